--- Ops beside the losses: one-hot encoding with label smoothing (ploss.one_hot), the
-- Taylor softmax and log-Taylor softmax (ploss.F.taylor_softmax, ploss.TaylorSoftmax, …),
-- ploss.OneHotTargets, which adapts an elementwise criterion to class-index targets, and
-- the pairwise box similarities (ploss.box_iou, generalized_box_iou, …).
-- Errors are Lua errors at the caller's line with the C library's message; nothing is
-- half-written.
return function(ploss)
local ffi = require "ffi"
local C = ploss.C
local nn = ploss.nn

-- A C options struct filled with its defaults.
local function new_opts(ctype, init)
  local o = ffi.new(ctype)
  C[init](o)
  return o
end

local conventions = {
  pytorch = C.PLOSS_SMOOTHING_PYTORCH,
  reference = C.PLOSS_SMOOTHING_REFERENCE,
  uniform_others = C.PLOSS_SMOOTHING_UNIFORM_OTHERS,
}

local function check_integer(name, v, min)
  if type(v) ~= "number" or v ~= math.floor(v) or (min and v < min) then
    ploss.raise(string.format("%s: expected an integer%s, got %s", name,
      min and (" >= " .. min) or "", ploss.shown(v)))
  end
  -- past int64's range the C option would take another value (INT64_MIN) than the one given
  if v < -2 ^ 63 or v >= 2 ^ 63 then
    ploss.raise(string.format("%s: expected an integer in 64 bits, got %s", name, ploss.shown(v)))
  end
end

---------------------------------------------------------------------------------------
-- one-hot
---------------------------------------------------------------------------------------

--- ploss.one_hot(target, num_classes [, opts]) → a tensor N×C×d1×…×dk (also ploss.F.one_hot)
--
-- Class indices (i64/i32, shape N×d1×…×dk, 0-based) to one-hot vectors along dim 2 (the
-- class axis), on the target's device.  opts:
--   dtype                 'f32' (default) or any dtype; integer dtypes need no smoothing
--   label_smoothing       ε in [0, 1], default 0: values a·[j = y] + b
--   smoothing_convention  'pytorch' (default: 1 − ε + ε/C and ε/C), 'reference'
--                         (pytorch-loss OnehotEncoder: 1 − ε and ε/C), 'uniform_others'
--                         (1 − ε and ε/(C−1))
--   ignore_index          default -1 (as the reference): those samples get all zeros
--   out                   a tensor to write (then num_classes may be nil: its dim 2;
--                         a num_classes or dtype given must be out's)
-- Errors: a label outside [0, C) that is not ignore_index ("target: class index 7 at
-- sample (n, s) is outside [0, 5) …"; on CUDA reported by the next synchronising call).
local one_hot_keys = { dtype = true, label_smoothing = true, smoothing_convention = true, ignore_index = true, out = true }
local ONE_HOT_MADE = { out = "opts.dtype" }
function ploss.one_hot(target, num_classes, opts)
  if opts == nil then opts = {} end
  if not ploss.is_tensor(target) then ploss.raise("one_hot: target: expected a ploss tensor, got " .. type(target)) end
  ploss.check_option_keys(opts, "one_hot", one_hot_keys)
  local out = opts.out
  if out ~= nil and not ploss.is_tensor(out) then
    ploss.raise("one_hot: out: expected a ploss tensor, got " .. ploss.shown(out))
  end
  if num_classes ~= nil or out == nil then check_integer("one_hot: num_classes", num_classes, 1) end
  if out == nil then
    local sizes = target:size()
    table.insert(sizes, math.min(2, #sizes + 1), num_classes)
    out = ploss.empty(sizes, { dtype = opts.dtype or "f32", device = target:device() })
  else
    -- the classes the caller named are the labels' range: out's class axis must agree
    local sizes = out:size()
    if num_classes ~= nil and sizes[2] ~= num_classes then
      ploss.raise(string.format("one_hot: out: %d classes along dim 2 (its sizes [%s]), but num_classes is %d",
        sizes[2] or 0, table.concat(sizes, ", "), num_classes))
    end
    if opts.dtype ~= nil and ploss.dtype(opts.dtype) ~= out:dtype() then
      ploss.raise(string.format("one_hot: out: dtype %s, but opts.dtype is %s", out:dtype(), ploss.shown(opts.dtype)))
    end
  end
  local co = new_opts("ploss_one_hot_opts", "ploss_one_hot_opts_init")
  if opts.ignore_index ~= nil then check_integer("one_hot: ignore_index", opts.ignore_index); co.ignore_index = opts.ignore_index end
  if opts.label_smoothing ~= nil then
    if type(opts.label_smoothing) ~= "number" then ploss.raise("one_hot: label_smoothing: expected a number") end
    co.label_smoothing = opts.label_smoothing
  end
  if opts.smoothing_convention ~= nil then
    local v = conventions[opts.smoothing_convention]
    if v == nil then
      ploss.raise("one_hot: smoothing_convention: '" .. tostring(opts.smoothing_convention) ..
        "' is not one of 'pytorch', 'reference', 'uniform_others'")
    end
    co.smoothing_convention = v
  end
  -- an output made here from opts.dtype: its errors (an integer dtype with smoothing) name
  -- that option
  ploss.check(C.ploss_one_hot(target:context(), target:dl(), co, out:dl()), "one_hot",
    opts.out == nil and ONE_HOT_MADE or nil)
  out:bump_version() -- a criterion's state computed from it is stale
  return out
end
ploss.F.one_hot = ploss.one_hot


---------------------------------------------------------------------------------------
-- Taylor softmax / log-Taylor softmax
---------------------------------------------------------------------------------------

-- C options of the Taylor ops from Lua options {n = 2, dim = 2} (dim 1-based, negative
-- from the end, as Tensor:size(dim)); `input` (optional) is the call's, for the rank a
-- message names.  n and dim are C ints: a value past 32 bits is refused here, with the
-- value given, before it could wrap (2^32 + 2 would become the order 2).
local INT32 = 2 ^ 31
local function taylor_copts(opts, what, input)
  if type(opts) ~= "table" then ploss.raise(what .. ": opts: expected a table") end
  local co = new_opts("ploss_taylor_softmax_opts", "ploss_taylor_softmax_opts_init")
  local n, dim = opts.n or 2, opts.dim or 2
  check_integer(what .. ": n", n)
  check_integer(what .. ": dim", dim)
  if dim == 0 then ploss.raise(what .. ": dim: 0 is not a dimension (dims are 1-based; -1 is the last)") end
  if not (n >= -INT32 and n < INT32) then
    ploss.raise(string.format("%s: opts.n: %.0f is not an even Taylor order in [2, 64]", what, n))
  end
  if not (dim > -INT32 and dim < INT32) then
    ploss.raise(string.format("%s: opts.dim: %.0f is out of range for %s", what, dim,
      ploss.is_tensor(input) and ("an input of rank " .. input:dim()) or "any input (a tensor has at most 8 dims)"))
  end
  -- a dim past the input's rank named as given (1-based), where the C call would name it
  -- 0-based; an input the C call refuses first (its dtype, 0-d) is left to it
  local rank = ploss.is_tensor(input) and input:is_floating_point() and input:dim() or 0
  if rank > 0 and (dim > rank or dim < -rank) then
    ploss.raise(string.format("%s: opts.dim: %d is out of range for an input of rank %d (1 to %d, or -%d to -1) " ..
      "(PLOSS_ERR_INVALID_ARGUMENT)", what, dim, rank, rank, rank))
  end
  co.n = n
  co.dim = dim > 0 and dim - 1 or dim
  return co
end
local TAYLOR_KEYS = { n = true, dim = true, out = true }
local TAYLOR_BACKWARD_KEYS = { n = true, dim = true, grad_input = true }

-- opts[key] when it is nil or a tensor (a buffer to write into), else an error naming it.
local function buffer_opt(opts, key, what)
  local v = opts[key]
  if v ~= nil and not ploss.is_tensor(v) then
    ploss.raise(string.format("%s: opts.%s: expected a ploss tensor (a buffer to write into), got %s", what, key,
      ploss.shown(v)))
  end
  return v
end

-- the fields of the Taylor modules: their options and Torch7's module fields
local TAYLOR_FIELDS = { n = true, dim = true, output = true, gradInput = true, train = true }
for _, op in ipairs { { "taylor_softmax", "TaylorSoftmax" }, { "log_taylor_softmax", "LogTaylorSoftmax" } } do
  local fname, cls_name = op[1], op[2]
  local c_forward, c_backward = C["ploss_" .. fname .. "_forward"], C["ploss_" .. fname .. "_backward"]

  --- ploss.F.taylor_softmax(input [, opts]) → output, and ploss.F.log_taylor_softmax:
  -- output_j = f_n(x_j) / Σ_k f_n(x_k) (log: log f_n(x_j) − log Σ_k f_n(x_k)) along `dim`,
  -- with f_n(v) = Σ_{k≤n} v^k/k! the even-order Taylor polynomial of exp (de Brébisson &
  -- Vincent, ICLR 2016; Banerjee et al., arXiv:2011.11538; pytorch-loss TaylorSoftmaxV1/V3).
  -- opts: n (even, 2..64; default 2), dim (1-based, default 2 = the class axis; -1 = last),
  -- out (a tensor to write).  Any rank, f32/f16/bf16/f64; computed in f32 (f64 for f64 and
  -- for n > 10), so f16 inputs do not overflow.  Errors: "opts.n: 3 is not an even Taylor
  -- order in [2, 64]", "opts.dim: 5 is out of range for an input of rank 2".
  ploss.F[fname] = function(input, opts)
    if opts == nil then opts = {} end
    if not ploss.is_tensor(input) then ploss.raise(fname .. ": input: expected a ploss tensor, got " .. type(input)) end
    if type(opts) ~= "table" then ploss.raise(fname .. ": opts: expected a table") end
    ploss.check_option_keys(opts, fname, TAYLOR_KEYS)
    local co = taylor_copts(opts, fname, input)
    local out = buffer_opt(opts, "out", fname) or ploss.empty_like(input)
    ploss.check(c_forward(input:context(), input:dl(), co, out:dl()), fname, opts.out and { output = "opts.out" })
    out:bump_version() -- a criterion's state computed from it is stale
    return out
  end

  --- ploss.F.taylor_softmax_backward(input, grad_output [, opts]) → grad_input (and the
  -- log variant): the gradient through the op, recomputing its sums from the input.
  -- opts: n, dim as forward; grad_input (a tensor to write).
  ploss.F[fname .. "_backward"] = function(input, grad_output, opts)
    if opts == nil then opts = {} end
    if not ploss.is_tensor(input) then ploss.raise(fname .. "_backward: input: expected a ploss tensor, got " .. type(input)) end
    if not ploss.is_tensor(grad_output) then
      ploss.raise(fname .. "_backward: grad_output: expected a ploss tensor, got " .. type(grad_output))
    end
    local where = fname .. "_backward"
    if type(opts) ~= "table" then ploss.raise(where .. ": opts: expected a table") end
    ploss.check_option_keys(opts, where, TAYLOR_BACKWARD_KEYS)
    local co = taylor_copts(opts, where, input)
    local grad = buffer_opt(opts, "grad_input", where) or ploss.empty_like(input)
    ploss.check(c_backward(input:context(), input:dl(), grad_output:dl(), co, grad:dl()), where,
      opts.grad_input and { grad_input = "opts.grad_input" })
    grad:bump_version()
    return grad
  end

  --- ploss.TaylorSoftmax{n = 2, dim = 2} and ploss.LogTaylorSoftmax{n = 2, dim = 2}: modules
  -- (also ploss.nn.TaylorSoftmax / ploss.nn.LogTaylorSoftmax, for nn.Sequential) with
  -- forward(input) → output and backward(input, gradOutput) → gradInput (buffers reused
  -- between calls); updateOutput / updateGradInput are aliases.  No parameters.
  local cls = {}
  cls.__index = cls
  cls.__name = cls_name
  cls.__tostring = function(self) return string.format("ploss.%s(n=%d, dim=%d)", cls_name, self.n, self.dim) end
  -- n and dim are read at each call: a misspelt one (m.order = 4) is refused, not kept unread
  cls.__newindex = function(self, k, v)
    if type(k) == "string" and not TAYLOR_FIELDS[k] and k:sub(1, 1) ~= "_" then
      ploss.raise(string.format("%s: '%s' is none of the fields it reads at each call (dim, n)%s", cls_name, k,
        (k == "order" or k == "N") and ": the order of the polynomial is n" or ""))
    end
    rawset(self, k, v)
  end
  setmetatable(cls, {
    __call = function(c, opts)
      if opts == nil then opts = {} end
      if type(opts) ~= "table" then ploss.raise(cls_name .. ": expected an options table") end
      ploss.check_option_keys(opts, cls_name, { n = true, dim = true })
      local self = setmetatable({ n = opts.n or 2, dim = opts.dim or 2 }, c)
      taylor_copts(self, cls_name) -- validate the types now; ranges are checked by the C side
      return self
    end,
    __tostring = function() return "ploss." .. cls_name .. ": " .. (fname == "taylor_softmax" and "" or "log-") ..
      "Taylor softmax" end,
  })
  function cls:forward(input)
    nn.check_self(self, cls_name, "forward", "layer")
    if not ploss.is_tensor(input) then ploss.raise(cls_name .. ": input: expected a ploss tensor, got " .. type(input)) end
    -- (a new buffer when the input is in the module's own output, given back to it)
    local out = nn.buffer(self.output, input:size(), input:dtype(), input:device(), input)
    ploss.check(c_forward(input:context(), input:dl(), taylor_copts(self, cls_name, input), out:dl()), fname)
    out:bump_version()
    self.output = out -- only once the call has succeeded
    nn.saw_input(self, input)
    return out
  end
  function cls:backward(input, gradOutput)
    nn.check_self(self, cls_name, "backward", "layer")
    if not ploss.is_tensor(input) then ploss.raise(cls_name .. ": input: expected a ploss tensor, got " .. type(input)) end
    if not ploss.is_tensor(gradOutput) then
      ploss.raise(cls_name .. ": gradOutput: expected a ploss tensor, got " .. type(gradOutput))
    end
    nn.check_input(self, input, cls_name)
    local gi = nn.buffer(self.gradInput, input:size(), input:dtype(), input:device(), input, gradOutput)
    ploss.check(c_backward(input:context(), input:dl(), gradOutput:dl(), taylor_copts(self, cls_name, input),
      gi:dl()), fname .. "_backward")
    gi:bump_version()
    self.gradInput = gi
    return gi
  end
  function cls:updateOutput(input)
    nn.check_self(self, cls_name, "updateOutput", "layer")
    return self:forward(input)
  end
  function cls:updateGradInput(input, gradOutput)
    nn.check_self(self, cls_name, "updateGradInput", "layer")
    return self:backward(input, gradOutput)
  end
  function cls:parameters() return {}, {} end
  -- Torch7's clearState: the buffers of the last call dropped (a Sequential's conversions
  -- and clearState call it on each module)
  function cls:clearState()
    nn.check_self(self, cls_name, "clearState", "layer")
    return nn.drop_buffers(self)
  end
  -- (no parameters: a module of the same options, as the layers' clone)
  function cls:clone()
    nn.check_self(self, cls_name, "clone", "layer")
    return cls { n = self.n, dim = self.dim }
  end
  function cls:tostring() return tostring(self) end
  ploss[cls_name] = cls
  nn[cls_name] = cls
end


---------------------------------------------------------------------------------------
-- ploss.OneHotTargets(criterion [, {ignore_index=-1, label_smoothing=0, smoothing_convention=}])
--   Adapts an elementwise criterion on N×C(×d…) logits (BCEWithLogitsLoss, FocalLoss) to
--   class-index targets: each call builds the one-hot targets of the labels (ploss.one_hot,
--   in the input's dtype on its device, a buffer reused between calls; ignored labels give
--   all-zero rows, which the wrapped criterion trains as background, as pytorch-loss's
--   OnehotEncoder) and calls the wrapped criterion with them.  Same API as a criterion;
--   its options are fields read at each call (w.label_smoothing = 0.1), the reduction the
--   wrapped criterion's (w.inner.reduction).
---------------------------------------------------------------------------------------
local OneHotTargets = nn.class("OneHotTargets")
OneHotTargets._takes_target = true -- the labels (nn.takes_target)
-- its options are fields read at each call, as a criterion's (a misspelt one is refused)
local ONE_HOT_OPTIONS = { "ignore_index", "label_smoothing", "smoothing_convention" }
OneHotTargets._fields = { inner = true }
for _, k in ipairs(ONE_HOT_OPTIONS) do OneHotTargets._fields[k] = true end
OneHotTargets._field_hints = {
  reduction = ": the reduction is the wrapped criterion's (w.inner.reduction = …)",
}
-- A field's value checked before the field takes it, as one_hot checks its options at each
-- call (label_smoothing's range too: one_hot's C check); named `prefix` .. k ("crit." for a
-- field set, "opts." for the constructor's options).
local function check_one_hot_field(k, v, prefix)
  if v == nil then return end -- back to one_hot's default
  local name = "OneHotTargets: " .. prefix .. k
  if k == "inner" then
    if type(v) ~= "table" or not v.fused then
      ploss.raise(name .. ": expected a criterion (e.g. ploss.FocalLoss{}), got " .. ploss.shown(v))
    end
  elseif k == "ignore_index" then
    check_integer(name, v)
  elseif k == "label_smoothing" and (type(v) ~= "number" or not (v >= 0 and v <= 1)) then
    ploss.raise(name .. ": expected a number in [0, 1], got " .. ploss.shown(v))
  elseif k == "smoothing_convention" and conventions[v] == nil then
    ploss.raise(name .. ": " .. ploss.shown(v) .. " is not one of 'pytorch', 'reference', 'uniform_others'")
  end
end
OneHotTargets._check_field = function(_, k, v) check_one_hot_field(k, v, "crit.") end

function OneHotTargets:__init(inner, opts)
  if type(inner) ~= "table" or not inner.fused then
    ploss.raise("OneHotTargets: expected a criterion (e.g. ploss.FocalLoss{}), got " .. type(inner))
  end
  self.inner = inner
  opts = ploss.options_of(opts, "OneHotTargets")
  -- the one-hot tensor is the wrapper's own buffer, in the input's dtype
  local known = {}
  for _, k in ipairs(ONE_HOT_OPTIONS) do known[k] = true end
  ploss.check_option_keys(opts, "OneHotTargets", known)
  for _, k in ipairs(ONE_HOT_OPTIONS) do check_one_hot_field(k, opts[k], "opts.") end
  for _, k in ipairs(ONE_HOT_OPTIONS) do self[k] = opts[k] end
end

function OneHotTargets:targets(input, labels)
  if not ploss.is_tensor(input) then ploss.raise("OneHotTargets: input: expected a ploss tensor, got " .. ploss.shown(input)) end
  if not ploss.is_tensor(labels) then ploss.raise("OneHotTargets: target: expected a ploss tensor of class indices, got " .. ploss.shown(labels)) end
  if input:dim() < 2 then
    ploss.raise("OneHotTargets: input: expected N×C(×d…) logits, got " .. ploss.shown(input))
  end
  -- the labels' shape is the input's without its class dim (the one-hot buffer's would be
  -- named otherwise, a tensor the caller never made)
  local sizes, want = labels:size(), input:size()
  table.remove(want, 2)
  local same = #sizes == #want
  for d = 1, #want do same = same and sizes[d] == want[d] end
  if not same then
    ploss.raise(string.format("OneHotTargets: target: expected class indices of shape [%s] (the input's without " ..
      "its class dim), got %s", table.concat(want, ", "), ploss.shown(labels)))
  end
  table.insert(sizes, 2, input:size(2))
  self._onehot = nn.buffer(self._onehot, sizes, input:dtype(), input:device())
  local o = { out = self._onehot }
  for _, k in ipairs(ONE_HOT_OPTIONS) do o[k] = nn.field(self, k) end
  return ploss.one_hot(labels, nil, o)
end

function OneHotTargets:forward(input, labels)
  nn.check_self(self, "OneHotTargets", "forward")
  self.output = self.inner:forward(input, self:targets(input, labels))
  return self.output
end

function OneHotTargets:backward(input, labels, gradOutput)
  nn.check_self(self, "OneHotTargets", "backward")
  self.gradInput = self.inner:backward(input, self:targets(input, labels), gradOutput)
  return self.gradInput
end

function OneHotTargets:fused(input, labels, scale)
  nn.check_self(self, "OneHotTargets", "fused")
  self.output, self.gradInput = self.inner:fused(input, self:targets(input, labels), scale)
  return self.output, self.gradInput
end

-- Torch7's criterion methods (cuda, cpu, type, float, double through to): the device ones
-- act on the wrapped criterion (the one-hot buffer is made again on the next call), clone
-- copies it, clearState drops the buffer.
nn.torch7_methods(OneHotTargets, "OneHotTargets")
function OneHotTargets:to(device)
  nn.check_self(self, "OneHotTargets", "to")
  self.inner:to(device)
  self._onehot = nil
  return self
end
function OneHotTargets:clone()
  nn.check_self(self, "OneHotTargets", "clone")
  local opts = {}
  for _, k in ipairs(ONE_HOT_OPTIONS) do opts[k] = nn.field(self, k) end
  return ploss.OneHotTargets(self.inner:clone(), opts)
end
function OneHotTargets:clearState()
  nn.check_self(self, "OneHotTargets", "clearState")
  self._onehot, self.output, self.gradInput = nil, nil, nil
  if type(self.inner.clearState) == "function" then self.inner:clearState() end
  return self
end

function OneHotTargets:tostring()
  local set = {}
  for _, k in ipairs(ONE_HOT_OPTIONS) do
    local v = nn.field(self, k)
    if v ~= nil then set[#set + 1] = k .. "=" .. (type(v) == "string" and ("'" .. v .. "'") or tostring(v)) end
  end
  return "ploss.OneHotTargets(" .. tostring(self.inner) .. (#set > 0 and ", " .. table.concat(set, ", ") or "") .. ")"
end

-- ploss.OneHotTargets(criterion, opts): `OneHotTargets` is the class; calling it with a
-- criterion builds an instance
ploss.OneHotTargets = function(inner, opts)
  local self = setmetatable({}, OneHotTargets)
  self:__init(inner, opts)
  return self
end

---------------------------------------------------------------------------------------
-- pairwise box similarities
---------------------------------------------------------------------------------------

local box_formats = { xyxy = C.PLOSS_BOX_FORMAT_XYXY, xywh = C.PLOSS_BOX_FORMAT_XYWH, cxcywh = C.PLOSS_BOX_FORMAT_CXCYWH }
local box_iou_keys = { eps = true, box_format = true, out = true }

--- ploss.box_iou(boxes1, boxes2 [, opts]) → N×M similarities (also generalized_box_iou,
-- distance_box_iou, complete_box_iou, and the same names in ploss.F)
--
-- torchvision's pairwise functions: out[i][j] is the IoU (GIoU, DIoU, CIoU) of boxes1[i]
-- and boxes2[j], N×4 and M×4 boxes of any float dtypes on one device; f32 (f64 for f64
-- boxes1).  opts: eps (1e-7: of c² + ε and CIoU's α), box_format ('xyxy', 'xywh',
-- 'cxcywh'), out (a tensor to write).  A box with x2 < x1 or y2 < y1 is an INVALID_BOX error.
for _, op in ipairs { { "box_iou", C.PLOSS_BOX_IOU_IOU }, { "generalized_box_iou", C.PLOSS_BOX_IOU_GENERALIZED },
                      { "distance_box_iou", C.PLOSS_BOX_IOU_DISTANCE }, { "complete_box_iou", C.PLOSS_BOX_IOU_COMPLETE } } do
  local name, kind = op[1], op[2]
  ploss[name] = function(boxes1, boxes2, opts)
    if opts == nil then opts = {} end
    if not ploss.is_tensor(boxes1) then ploss.raise(name .. ": boxes1: expected a ploss tensor, got " .. type(boxes1)) end
    if not ploss.is_tensor(boxes2) then ploss.raise(name .. ": boxes2: expected a ploss tensor, got " .. type(boxes2)) end
    if type(opts) ~= "table" then ploss.raise(name .. ": opts: expected a table") end
    ploss.check_option_keys(opts, name, box_iou_keys)
    local co = new_opts("ploss_box_iou_opts", "ploss_box_iou_opts_init")
    co.kind = kind
    if opts.eps ~= nil then
      if type(opts.eps) ~= "number" then ploss.raise(name .. ": eps: expected a number, got " .. type(opts.eps)) end
      co.eps = opts.eps
    end
    if opts.box_format ~= nil then
      local f = box_formats[opts.box_format]
      if f == nil then
        ploss.raise(name .. ": box_format: '" .. tostring(opts.box_format) .. "' is not one of 'xyxy', 'xywh', 'cxcywh'")
      end
      co.box_format = f
    end
    local out = opts.out
    if out == nil then
      -- (boxes of another rank: the C call names them)
      local n1, n2 = #boxes1:size() == 2 and boxes1:size()[1] or 0, #boxes2:size() == 2 and boxes2:size()[1] or 0
      out = ploss.empty({ n1, n2 }, { dtype = boxes1:dtype() == "f64" and "f64" or "f32", device = boxes1:device() })
    elseif not ploss.is_tensor(out) then
      ploss.raise(name .. ": out: expected a ploss tensor, got " .. type(out))
    end
    ploss.check(C.ploss_box_iou(boxes1:context(), boxes1:dl(), boxes2:dl(), co, out:dl()), name)
    out:bump_version()
    return out
  end
  ploss.F[name] = ploss[name]
end

end
