--- ploss.nn: criteria with Torch7's API, and the helper that declares a loss from its
-- C entry points in a few lines.
--
-- Using a criterion (every loss):
--
--     local crit = ploss.CrossEntropyLoss{label_smoothing = 0.1}
--     local loss = crit:forward(input, target)      -- Lua number (reduced; reading it
--                                                   -- synchronises) or a tensor ('none')
--     local gin  = crit:backward(input, target)     -- gradInput, a buffer reused between calls
--     local loss, gin = crit(input, target)         -- fused forward + backward, one pass
--
--  * `forward(input, target)` → loss; `updateOutput` is an alias.  The loss tensor and the
--    saved per-sample state (e.g. the log-sum-exp) are buffers of the criterion.
--  * `forward_tensor(input, target)` → the loss as a device tensor, without synchronising.
--  * `backward(input, target [, gradOutput])` → gradInput; `updateGradInput` is an alias.
--    gradOutput: a number or a one-element tensor for a reduced loss (default 1), a tensor
--    of the loss's shape for 'none' (default ones: the gradient of the sum).  Uses the
--    state saved by the last forward when `input` is the same tensor object (do not modify
--    the input in place in between), recomputes it otherwise.
--  * `crit(input, target [, scale])` → loss, gradInput from the fused pass: the gradient of
--    the reduced loss times `scale` (default 1; for 'none': of the sum of the losses).
--    With the option `inplace = true` the gradient is written over `input` itself, and
--    gradInput is `input`.
--  * gradInput is a contiguous buffer of the input's sizes, dtype and device, reallocated
--    only when one of those changes.  Loss: f32 (f64 for f64 input).
--  * `crit.output`, `crit.gradInput` hold the last results (Torch7 fields).
--  * `crit:to(device)` moves tensor options (e.g. weight) to a device.
--  * Options can be changed after construction (`crit.reduction = 'sum'`).
--
-- Declaring a loss (in lua/ploss/losses/<family>.lua):
--
--     ploss.nn.register(ploss, {
--       name = "CrossEntropyLoss", fname = "cross_entropy",
--       opts_ctype = "ploss_cross_entropy_opts", opts_init = "ploss_cross_entropy_opts_init",
--       options = {                         -- in display order
--         { "weight", kind = "tensor" },
--         { "ignore_index", kind = "integer", default = -100 },
--         { "reduction", kind = "enum", default = "mean", values = ploss.nn.reductions },
--       },                                  -- option name = C struct field unless `field` says
--       state = true,                       -- forward saves one float per sample
--       forward  = function(o, ctx, input, target, copts, loss, state) return C.ploss_x_forward(...) end,
--       backward = function(o, ctx, input, target, copts, state, grad_loss, grad_input) ... end,
--       fused    = function(o, ctx, input, target, copts, loss, grad_input) ... end,
--     })
--
-- which creates `ploss.CrossEntropyLoss{...}` and `ploss.F.cross_entropy`,
-- `ploss.F.cross_entropy_backward`, `ploss.F.cross_entropy_fused`.  In the three closures,
-- `o` holds the resolved options (tensor options already on the input's device: o.weight),
-- tensors are ploss tensors (`t:dl()` gives the DLTensor *), `state` may be nil (pass
-- NULL: the C side recomputes it), and the return value is a ploss_status.
--
-- Optional spec fields: `doc` (shown by tostring of the class), `loss_sizes(input, target)`
-- (sizes of the 'none' loss; default: input sizes without dim 2), `state_sizes` (default:
-- as loss_sizes), `loss_dtype(input)` (default f64 for f64 input else f32),
-- `fused_fields = false` when the C options struct has no `scale`/`inplace` fields,
-- `check(o, input, target)` for extra Lua-side checks.  A family with another calling
-- shape (several inputs, parameters) can subclass `nn.Criterion` by hand.
return function(ploss)
local ffi = require "ffi"
local C = ploss.C
local nn = {}

--- Reduction names and their C values (PLOSS_REDUCTION_*).
nn.reductions = { none = C.PLOSS_REDUCTION_NONE, mean = C.PLOSS_REDUCTION_MEAN, sum = C.PLOSS_REDUCTION_SUM }

---------------------------------------------------------------------------------------
-- Criterion base class
---------------------------------------------------------------------------------------

local Criterion = {}
Criterion.__index = Criterion
nn.Criterion = Criterion

function Criterion:updateOutput(input, target) return self:forward(input, target) end
function Criterion:updateGradInput(input, target, gradOutput) return self:backward(input, target, gradOutput) end

--- Create a criterion class `name` deriving from `parent` (default Criterion).
-- Instances are made by calling the class: `Cls{opts}`; `Cls.__init(self, opts)` runs.
function nn.class(name, parent)
  parent = parent or Criterion
  local cls = setmetatable({}, { __index = parent })
  cls.__index = cls
  cls.__name = name
  cls.__tostring = function(self) return self:tostring() end
  cls.__call = function(self, ...) return self:fused(...) end
  cls._class_name = name
  setmetatable(cls, {
    __index = parent,
    __call = function(c, opts)
      local self = setmetatable({}, c)
      self:__init(opts or {})
      return self
    end,
    __tostring = function(c) return "ploss." .. name .. (c._doc and (": " .. c._doc) or "") end,
  })
  return cls
end

function Criterion:__init() end
function Criterion:tostring() return "ploss." .. (self._class_name or "Criterion") end

---------------------------------------------------------------------------------------
-- Buffers
---------------------------------------------------------------------------------------

local function same_sizes(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end
nn.same_sizes = same_sizes

--- A contiguous buffer `t` if it matches (sizes, dtype, device), else a new one.
function nn.buffer(t, sizes, dtype, device)
  if t and not t:is_freed() and t:dtype() == dtype and t:device() == device and t:is_contiguous()
      and same_sizes(t:size(), sizes) then
    return t
  end
  return ploss.empty(sizes, { dtype = dtype, device = device })
end

local function default_loss_sizes(input)
  local s, sizes = {}, input:size()
  for i = 1, #sizes do if i ~= 2 then s[#s + 1] = sizes[i] end end
  return s
end

local function default_loss_dtype(input) return input:dtype() == "f64" and "f64" or "f32" end

---------------------------------------------------------------------------------------
-- Options
---------------------------------------------------------------------------------------

local function show(v)
  if type(v) == "string" then return "'" .. v .. "'" end
  if ploss.is_tensor(v) then return string.format("%s[%s]", v:dtype(), table.concat(v:size(), "x")) end
  return tostring(v)
end

-- Resolve user options into `o` (validated types, defaults), for spec.options.
local function resolve_options(spec, user, o)
  o = o or {}
  local known = { inplace = true, scale = true, out = true, grad_input = true }
  for _, opt in ipairs(spec.options) do
    local name = opt[1]
    known[name] = true
    local v = user[name]
    if v == nil then v = opt.default end
    if v ~= nil then
      if opt.kind == "enum" then
        if opt.values[v] == nil then
          local names = {}
          for k in pairs(opt.values) do names[#names + 1] = "'" .. k .. "'" end
          table.sort(names)
          ploss.raise(string.format("%s: %s is not one of %s", name, show(v), table.concat(names, ", ")))
        end
      elseif opt.kind == "number" or opt.kind == "integer" then
        if type(v) ~= "number" then ploss.raise(name .. ": expected a number, got " .. type(v)) end
        if opt.kind == "integer" and v ~= math.floor(v) then
          ploss.raise(name .. ": expected an integer, got " .. v)
        end
      elseif opt.kind == "boolean" then
        if type(v) ~= "boolean" then ploss.raise(name .. ": expected a boolean, got " .. type(v)) end
      elseif opt.kind == "tensor" then
        if type(v) == "table" and not ploss.is_tensor(v) then
          v = ploss.tensor(v, { dtype = "f32" }) -- a Lua list: owned, moved to the input's device
          o["_owned_" .. name] = true
        elseif not ploss.is_tensor(v) then
          ploss.raise(name .. ": expected a tensor or a list of numbers, got " .. type(v))
        end
      end
    end
    o[name] = v
  end
  for k in pairs(user) do
    if not known[k] and type(k) == "string" then
      ploss.raise(string.format("%s: unknown option '%s'", spec.name, k))
    end
  end
  return o
end

-- Fill the C options struct from resolved options `o`.
local function fill_copts(spec, o, copts)
  C[spec.opts_init](copts)
  for _, opt in ipairs(spec.options) do
    local v = o[opt[1]]
    if v ~= nil and opt.kind ~= "tensor" and opt.field ~= false then
      local field = opt.field or opt[1]
      if opt.kind == "enum" then v = opt.values[v]
      elseif opt.kind == "boolean" then v = v and 1 or 0 end
      copts[field] = v
    end
  end
  return copts
end

-- Tensor options on the input's device: a list given by the user is copied there (cached);
-- a tensor given by the user is passed as it is (a device mismatch is the C side's error).
local function tensor_options(spec, o, input, cache)
  local r = setmetatable({}, { __index = o })
  for _, opt in ipairs(spec.options) do
    local name = opt[1]
    local v = o[name]
    if opt.kind == "tensor" and v ~= nil and o["_owned_" .. name] and v:device() ~= input:device() then
      local c = cache and cache[name]
      if not (c and c:device() == input:device() and not c:is_freed()) then
        c = v:to(input:device())
        if cache then cache[name] = c end
      end
      r[name] = c
    end
  end
  return r
end

---------------------------------------------------------------------------------------
-- The three passes, shared by criteria and the functional API
---------------------------------------------------------------------------------------

local function check_args(spec, input, target)
  if not ploss.is_tensor(input) then ploss.raise(spec.name .. ": input: expected a ploss tensor, got " .. type(input)) end
  if not ploss.is_tensor(target) then ploss.raise(spec.name .. ": target: expected a ploss tensor, got " .. type(target)) end
end

local function loss_buffers(spec, o, input, target, loss, state, want_state)
  local dtype = (spec.loss_dtype or default_loss_dtype)(input)
  local sizes = o.reduction == "none" and (spec.loss_sizes or default_loss_sizes)(input, target) or {}
  loss = nn.buffer(loss, sizes, dtype, input:device())
  if want_state then
    local ssizes = (spec.state_sizes or spec.loss_sizes or default_loss_sizes)(input, target)
    state = nn.buffer(state, ssizes, dtype, input:device())
  end
  return loss, state
end

-- A one-element gradOutput tensor from a number or tensor.
local function grad_loss_tensor(o, input, gradOutput, sizes, dtype, buf)
  if gradOutput == nil then
    if o.reduction == "none" then
      return nn.buffer(buf, sizes, dtype, input:device()):fill(1)
    end
    gradOutput = 1
  end
  if type(gradOutput) == "number" then
    return nn.buffer(buf, {}, dtype, input:device()):fill(gradOutput)
  end
  if not ploss.is_tensor(gradOutput) then
    ploss.raise("gradOutput: expected a number or a tensor, got " .. type(gradOutput))
  end
  return gradOutput
end

---------------------------------------------------------------------------------------
-- register: criterion class + functional API from a spec
---------------------------------------------------------------------------------------

function nn.register(ploss_, spec)
  assert(spec.name and spec.options and spec.opts_ctype and spec.opts_init, "nn.register: incomplete spec")
  local ctype = ffi.typeof(spec.opts_ctype)
  local fused_fields = spec.fused_fields ~= false
  local cls = nn.class(spec.name)
  cls._doc = spec.doc
  cls._spec = spec

  function cls:__init(opts)
    if type(opts) ~= "table" then ploss.raise(spec.name .. ": expected an options table") end
    resolve_options(spec, opts, self)
    self.inplace = opts.inplace and true or false
    self._copts = ctype()
    self._cache = {}
    self._state_of = setmetatable({}, { __mode = "v" })
  end

  -- re-resolve (options may have been edited) and fill the C struct
  local function prepare(self, input, target)
    check_args(spec, input, target)
    local user = {}
    for _, opt in ipairs(spec.options) do user[opt[1]] = rawget(self, opt[1]) end
    local o = resolve_options(spec, user, {})
    for _, opt in ipairs(spec.options) do
      local k = "_owned_" .. opt[1]
      o[k] = o[k] or rawget(self, k)
    end
    if spec.check then spec.check(o, input, target) end
    return tensor_options(spec, o, input, self._cache), fill_copts(spec, o, self._copts)
  end

  function cls:forward_tensor(input, target)
    local o, copts = prepare(self, input, target)
    local want_state = spec.state and spec.backward ~= nil
    self._loss, self._state = loss_buffers(spec, o, input, target, self._loss, self._state, want_state)
    self._state_of[1] = nil
    ploss.check(spec.forward(o, input:context(), input, target, copts, self._loss,
      want_state and self._state or nil), spec.fname .. "_forward")
    if want_state then self._state_of[1] = input end
    return self._loss
  end

  function cls:forward(input, target)
    local loss = self:forward_tensor(input, target)
    if self.reduction == "none" then
      self.output = loss
    else
      self.output = loss:item()
    end
    return self.output
  end

  function cls:backward(input, target, gradOutput)
    if not spec.backward then ploss.raise(spec.name .. ": no separate backward; use the fused call crit(input, target)") end
    local o, copts = prepare(self, input, target)
    local dtype = (spec.loss_dtype or default_loss_dtype)(input)
    local sizes = (spec.loss_sizes or default_loss_sizes)(input, target)
    local gl = grad_loss_tensor(o, input, gradOutput, sizes, dtype, self._grad_loss)
    if gl ~= gradOutput then self._grad_loss = gl end
    local state = nil
    if spec.state and self._state_of[1] == input and self._state and not self._state:is_freed() then
      state = self._state
    end
    self.gradInput = nn.buffer(self.gradInput, input:size(), input:dtype(), input:device())
    ploss.check(spec.backward(o, input:context(), input, target, copts, state, gl, self.gradInput),
      spec.fname .. "_backward")
    return self.gradInput
  end

  function cls:fused(input, target, scale)
    local o, copts = prepare(self, input, target)
    if scale ~= nil and type(scale) ~= "number" then ploss.raise("scale: expected a number, got " .. type(scale)) end
    if fused_fields then
      copts.scale = scale or 1
      copts.inplace = self.inplace and 1 or 0
    end
    self._loss = loss_buffers(spec, o, input, target, self._loss, nil, false)
    local grad
    if self.inplace then
      grad = input
    else
      self.gradInput = nn.buffer(self.gradInput, input:size(), input:dtype(), input:device())
      grad = self.gradInput
    end
    self._state_of[1] = nil
    ploss.check(spec.fused(o, input:context(), input, target, copts, self._loss, grad), spec.fname .. "_fused")
    if o.reduction == "none" then self.output = self._loss else self.output = self._loss:item() end
    if self.inplace then return self.output, input end
    return self.output, self.gradInput
  end

  --- Move tensor options (e.g. weight) to `device`; returns self.
  function cls:to(device)
    for _, opt in ipairs(spec.options) do
      if opt.kind == "tensor" and self[opt[1]] then self[opt[1]] = self[opt[1]]:to(device) end
    end
    return self
  end
  function cls:cuda() return self:to("cuda") end
  function cls:cpu() return self:to("cpu") end

  function cls:tostring()
    local parts = {}
    for _, opt in ipairs(spec.options) do
      local v = self[opt[1]]
      if v ~= nil then parts[#parts + 1] = opt[1] .. "=" .. show(v) end
    end
    if self.inplace then parts[#parts + 1] = "inplace=true" end
    return "ploss." .. spec.name .. "(" .. table.concat(parts, ", ") .. ")"
  end

  -- the functional API ------------------------------------------------------------------
  local F = ploss_.F
  local fname = spec.fname
  if fname then
    local function fprep(input, target, opts)
      check_args(spec, input, target)
      opts = opts or {}
      if type(opts) ~= "table" then ploss.raise(fname .. ": opts: expected a table") end
      local o = resolve_options(spec, opts, {})
      if spec.check then spec.check(o, input, target) end
      return tensor_options(spec, o, input, nil), fill_copts(spec, o, ctype()), opts
    end

    F[fname] = function(input, target, opts)
      local o, copts, raw = fprep(input, target, opts)
      local loss = raw.out or loss_buffers(spec, o, input, target, nil, nil, false)
      ploss.check(spec.forward(o, input:context(), input, target, copts, loss, nil), fname)
      if raw.out or o.reduction == "none" then return loss end
      local v = loss:item()
      loss:free()
      return v
    end

    if spec.backward then
      F[fname .. "_backward"] = function(input, target, grad_output, opts)
        local o, copts, raw = fprep(input, target, opts)
        local dtype = (spec.loss_dtype or default_loss_dtype)(input)
        local sizes = (spec.loss_sizes or default_loss_sizes)(input, target)
        local gl = grad_loss_tensor(o, input, grad_output, sizes, dtype, nil)
        local grad = raw.grad_input or ploss.empty_like(input)
        ploss.check(spec.backward(o, input:context(), input, target, copts, nil, gl, grad), fname .. "_backward")
        return grad
      end
    end

    F[fname .. "_fused"] = function(input, target, opts)
      local o, copts, raw = fprep(input, target, opts)
      if fused_fields then
        copts.scale = raw.scale or 1
        copts.inplace = raw.inplace and 1 or 0
      end
      local loss = raw.out or loss_buffers(spec, o, input, target, nil, nil, false)
      local grad = raw.inplace and input or raw.grad_input or ploss.empty_like(input)
      ploss.check(spec.fused(o, input:context(), input, target, copts, loss, grad), fname .. "_fused")
      if raw.out or o.reduction == "none" then return loss, grad end
      local v = loss:item()
      loss:free()
      return v, grad
    end
  end

  ploss_[spec.name] = cls
  return cls
end

return nn
end
