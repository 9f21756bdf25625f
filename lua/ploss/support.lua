--- Support ops: not losses, but what a training script needs around them —
-- the matrix product, the activations (swish, hard-swish, mish), the bias add and its gradient,
-- argmax, optimiser steps — and three small helpers built on them: layers
-- (ploss.nn.Linear, ploss.nn.Swish / HardSwish / Mish, ploss.nn.Sequential) and
-- optimisers (ploss.optim.SGD, ploss.optim.Adam).  They are kept small on purpose: this is
-- a loss library; the ops exist so that the examples and the fused linear losses can run.
--
-- Functional API (tensors on one device; every output is a new contiguous tensor unless an
-- `out`/`grad_input` buffer is given; errors are Lua errors at the caller's line carrying
-- ploss_last_error(), with nothing written):
--   F.gemm(a, b [, {trans_a=, trans_b=, alpha=1, beta=0, out=}]) → c = alpha·op(a)·op(b) + beta·c
--       a, b: 2-d f32/f16/bf16/f64 of one dtype, row-major or transposed views (t:t() is
--       used without a copy); out: M×N, a's dtype (or f32 for f16/bf16), required when
--       beta ≠ 0.  OpenBLAS on the CPU, cuBLAS on CUDA, f32 accumulation (f64 for f64).
--   F.matmul(a, b) → a·b
--   F.swish(x [, {out=, inplace=}]), F.hard_swish, F.mish → y = f(x), elementwise, x's dtype
--       (F.silu = F.swish, F.hardswish = F.hard_swish); inplace = true writes over x
--       (or allows `out` to be x itself).
--   F.swish_backward(x, grad_output [, {grad_input=, inplace=}]) (and _hard_swish, _mish)
--       → f′(x)·grad_output; inplace = true writes over grad_output (or allows
--       `grad_input` to be grad_output or x itself).  hard-swish's
--       derivative is PyTorch's since 2.8: 0 at x = −3, 1 at x = 3.
--   F.bias_add(x, bias) → x, with x[i][j] += bias[j] (in place; x N×C, bias C)
--   F.bias_grad(grad_output [, {out=}]) → column sums (C), deterministic
--   F.argmax(x [, {out=}]) / ploss.argmax(x) → i64 indices along dim 2 (the class axis),
--       the first maximum wins, NaN counts as the maximum (torch.argmax).
--   F.sgd_step(param, grad, momentum_buffer, step, {lr=, momentum=, dampening=,
--       weight_decay=, nesterov=})   torch.optim.SGD's update of one tensor, in place
--   F.adam_step(param, grad, exp_avg, exp_avg_sq, step, {lr=, beta1=, beta2=, eps=,
--       weight_decay=, decoupled_weight_decay=})   torch.optim.Adam / AdamW, in place
--   ploss.optim.EMA(params, {decay=, warmup=})   moving averages of parameters (below)
return function(ploss)
local C = ploss.C
local F = ploss.F
local nn = ploss.nn

local function need_tensor(x, what)
  if not ploss.is_tensor(x) then
    ploss.raise(what .. ": expected a ploss tensor, got " .. type(x))
  end
  return x
end

-- Raise when the list `list` (named `what`) has a hole (ploss.list_hole): ipairs would
-- stop there, the tensors after it silently left out.
local function check_no_hole(list, what)
  local i = ploss.list_hole(list)
  if i then ploss.raise(string.format("%s: the list has a hole ([%d] is nil)", what, i)) end
end

-- The options table `opts` (nil: none) of `what`; with `known` (a set of names) a key
-- outside it is an error: a misspelt option is not ignored.
local function opts_table(opts, what, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    -- Torch7's nn.ReLU(true) and nn.Linear(in, out, false): the in-place and bias flags as
    -- positional arguments
    local hint = ""
    if type(opts) == "boolean" and known and known.inplace then
      hint = string.format(" (Torch7's positional in-place flag is {inplace = %s} here)", tostring(opts))
    elseif type(opts) == "boolean" and known and known.bias then
      hint = string.format(" (Torch7's positional bias flag is {bias = %s} here)", tostring(opts))
    end
    ploss.raise(what .. ": opts: expected a table, got " .. type(opts) .. hint)
  end
  if known then ploss.check_option_keys(opts, what, known) end
  return opts
end

-- opts[key], of Lua type `kind` ("boolean" or "number"; `default` when absent): any other
-- value is an error (a 0 for a boolean would be true to Lua).
local KIND_TEXT = { boolean = "a boolean (true or false)", number = "a number" }
local function opt(opts, key, kind, default, what)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= kind then
    ploss.raise(string.format("%s: opts.%s: expected %s, got %s %s", what, key, KIND_TEXT[kind], type(v),
      ploss.shown(v)))
  end
  return v
end

-- The options each op takes (opts_table refuses others).
local GEMM_OPTS = { trans_a = true, trans_b = true, alpha = true, beta = true, out = true }
local ACT_OPTS, ACT_BACKWARD_OPTS = { out = true, inplace = true }, { grad_input = true, inplace = true }
local OUT_OPTS = { out = true }

-- The tensors an op wrote: a criterion's saved state computed from one of them is stale.
local function written(...)
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if t then t:bump_version() end
  end
end

---------------------------------------------------------------------------------------
-- GEMM
---------------------------------------------------------------------------------------

function F.gemm(a, b, opts)
  opts = opts_table(opts, "gemm", GEMM_OPTS)
  need_tensor(a, "gemm: a")
  need_tensor(b, "gemm: b")
  if a:dim() ~= 2 or b:dim() ~= 2 then
    ploss.raise(string.format("gemm: a and b must be 2-d matrices, got %d-d and %d-d", a:dim(), b:dim()))
  end
  local ta = opt(opts, "trans_a", "boolean", false, "gemm") and 1 or 0
  local tb = opt(opts, "trans_b", "boolean", false, "gemm") and 1 or 0
  local alpha, beta = opt(opts, "alpha", "number", 1, "gemm"), opt(opts, "beta", "number", 0, "gemm")
  local c = opts.out
  if c == nil then
    if beta ~= 0 then ploss.raise("gemm: beta = " .. beta .. " needs an `out` tensor to accumulate into") end
    local m = ta == 1 and a:size(2) or a:size(1)
    local n = tb == 1 and b:size(1) or b:size(2)
    c = ploss.empty({ m, n }, { dtype = a:dtype(), device = a:device() })
  else
    need_tensor(c, "gemm: out")
  end
  ploss.check(C.ploss_gemm(a:context(), ta, tb, alpha, a:dl(), b:dl(), beta, c:dl()), "gemm",
    opts.out and { c = "opts.out" })
  written(c)
  return c
end

function F.matmul(a, b) return F.gemm(a, b) end

---------------------------------------------------------------------------------------
-- Activations
---------------------------------------------------------------------------------------

local activations = {
  swish = C.PLOSS_ACTIVATION_SWISH,
  hard_swish = C.PLOSS_ACTIVATION_HARD_SWISH,
  mish = C.PLOSS_ACTIVATION_MISH,
}
ploss.activations = activations

for name, code in pairs(activations) do
  F[name] = function(x, opts)
    opts = opts_table(opts, name, ACT_OPTS)
    need_tensor(x, name .. ": input")
    local inplace = opt(opts, "inplace", "boolean", false, name)
    local out = opts.out or (inplace and x) or ploss.empty_like(x)
    ploss.check(C.ploss_activation_forward(x:context(), code, x:dl(), need_tensor(out, name .. ": out"):dl(),
      inplace and 1 or 0), name, opts.out and { output = "opts.out" })
    written(out)
    return out
  end
  F[name .. "_backward"] = function(x, grad_output, opts)
    local where = name .. "_backward"
    opts = opts_table(opts, where, ACT_BACKWARD_OPTS)
    need_tensor(x, where .. ": input")
    need_tensor(grad_output, where .. ": grad_output")
    local inplace = opt(opts, "inplace", "boolean", false, where)
    local gin = opts.grad_input or (inplace and grad_output) or ploss.empty_like(x)
    ploss.check(C.ploss_activation_backward(x:context(), code, x:dl(), grad_output:dl(),
      need_tensor(gin, where .. ": grad_input"):dl(), inplace and 1 or 0), where)
    written(gin)
    return gin
  end
end
F.silu, F.silu_backward = F.swish, F.swish_backward
F.hardswish, F.hardswish_backward = F.hard_swish, F.hard_swish_backward

---------------------------------------------------------------------------------------
-- Bias, argmax
---------------------------------------------------------------------------------------

function F.bias_add(x, bias)
  need_tensor(x, "bias_add: x")
  need_tensor(bias, "bias_add: bias")
  ploss.check(C.ploss_bias_add(x:context(), x:dl(), bias:dl()), "bias_add")
  written(x)
  return x
end

function F.bias_grad(grad_output, opts)
  opts = opts_table(opts, "bias_grad", OUT_OPTS)
  need_tensor(grad_output, "bias_grad: grad_output")
  local out = opts.out
  if out == nil then
    local cols = grad_output:dim() == 2 and grad_output:size(2) or 0
    out = ploss.empty({ cols }, { dtype = grad_output:dtype(), device = grad_output:device() })
  end
  ploss.check(C.ploss_bias_grad(grad_output:context(), grad_output:dl(), need_tensor(out, "bias_grad: out"):dl()),
    "bias_grad", opts.out and { grad_bias = "opts.out" })
  written(out)
  return out
end

function F.argmax(x, opts)
  opts = opts_table(opts, "argmax", OUT_OPTS)
  need_tensor(x, "argmax: input")
  local out = opts.out
  if out == nil then
    local sizes = {}
    for i, s in ipairs(x:size()) do if i ~= 2 then sizes[#sizes + 1] = s end end
    out = ploss.empty(sizes, { dtype = "i64", device = x:device() })
  end
  ploss.check(C.ploss_argmax(x:context(), x:dl(), need_tensor(out, "argmax: out"):dl()), "argmax",
    opts.out and { indices = "opts.out" })
  written(out)
  return out
end
ploss.argmax = F.argmax

local replaced_by = nn.replaced_by -- the tensors a model's conversion replaced

---------------------------------------------------------------------------------------
-- ClassSimplexLoss's predictions (Torch7's getPredictions and getTopPrediction)
---------------------------------------------------------------------------------------

-- The C×C matrix of the simplex's vertices (row k: class k's) in `x`'s dtype and on its
-- device, kept by the criterion per (C, dtype, device).  Taken from the loss itself, so that
-- there is one construction of the vertices: at outputs 0 with labels 0 … C − 1, the 'sum'
-- gradient of row k is 2·(0 − s_k), and −½ of it is s_k exactly.
local function simplex_of(crit, x, where)
  need_tensor(x, where .. ": outputs")
  if x:dim() ~= 1 and x:dim() ~= 2 then
    ploss.raise(string.format("%s: outputs: expected N×C or C values, got %s", where, ploss.shown(x)))
  end
  if not ploss.dtypes[x:dtype()].float then
    ploss.raise(string.format("%s: outputs: expected a float dtype (f32, f16, bf16, f64), got %s", where,
      ploss.shown(x)))
  end
  local C = x:size(x:dim())
  if C < 2 then
    ploss.raise(string.format("%s: outputs: expected at least 2 classes (the simplex of C vertices), got %s", where,
      ploss.shown(x)))
  end
  local key = string.format("%d %s %s", C, x:dtype(), x:device())
  local cached = rawget(crit, "_simplex")
  if cached and cached.key == key and not cached.matrix:is_freed() then return cached.matrix end
  local labels = {}
  for k = 1, C do labels[k] = k - 1 end
  local _, grad = F.class_simplex_loss_fused(ploss.zeros({ C, C }, { dtype = "f64" }),
    ploss.tensor(labels, { dtype = "i64" }), { reduction = "sum" })
  local vertices = grad:mul_(-0.5):to(x:device(), x:dtype())
  crit._simplex = { key = key, matrix = vertices }
  return vertices
end

--- crit:predictions(outputs) → the N×C dot products of each row of outputs (N×C, or C
-- values: one row) with every class's vertex (Torch7's getPredictions).
local function predictions(crit, x, where)
  local vertices = simplex_of(crit, x, where)
  return F.gemm(x:dim() == 1 and x:view(1, x:size(1)) or x, vertices, { trans_b = true })
end
function ploss.ClassSimplexLoss:predictions(x)
  nn.check_self(self, "ClassSimplexLoss", "predictions")
  return predictions(self, x, "ClassSimplexLoss:predictions")
end

--- crit:top_prediction(outputs) → N class indices (i64, 0-based): the vertex of the largest
-- dot product per row (Torch7's getTopPrediction, whose indices are 1-based).
function ploss.ClassSimplexLoss:top_prediction(x)
  nn.check_self(self, "ClassSimplexLoss", "top_prediction")
  return F.argmax(predictions(self, x, "ClassSimplexLoss:top_prediction"))
end

---------------------------------------------------------------------------------------
-- Optimiser steps
---------------------------------------------------------------------------------------

local ffi = require "ffi"

local function fill_struct(ctype, init, opts, fields, what)
  local s = ffi.new(ctype)
  C[init](s)
  ploss.check_option_keys(opts, what, fields)
  for k in pairs(opts) do
    local v = opt(opts, k, fields[k], nil, what)
    if fields[k] == "boolean" then v = v and 1 or 0 end
    s[k] = v
  end
  return s
end

local sgd_fields = { lr = "number", momentum = "number", dampening = "number", weight_decay = "number",
                     nesterov = "boolean" }
local adam_fields = { lr = "number", beta1 = "number", beta2 = "number", eps = "number",
                      weight_decay = "number", decoupled_weight_decay = "boolean" }

local function check_step(step, what)
  -- below 2^53, where a Lua number is an exact integer (±inf would wrap to int64's minimum)
  if type(step) ~= "number" or step ~= math.floor(step) or not (math.abs(step) < 2 ^ 53) then
    ploss.raise(what .. ": step: expected an integer (1 for the first step), got " .. ploss.shown(step))
  end
end

function F.sgd_step(param, grad, momentum_buffer, step, opts)
  need_tensor(param, "sgd_step: param")
  need_tensor(grad, "sgd_step: grad")
  check_step(step, "sgd_step")
  local s = fill_struct("ploss_sgd_opts", "ploss_sgd_opts_init", opts_table(opts, "sgd_step"), sgd_fields, "sgd_step")
  ploss.check(C.ploss_sgd_step(param:context(), param:dl(), grad:dl(),
    momentum_buffer and need_tensor(momentum_buffer, "sgd_step: momentum_buffer"):dl() or nil, step, s), "sgd_step")
  written(param, momentum_buffer)
  return param
end

function F.adam_step(param, grad, exp_avg, exp_avg_sq, step, opts)
  need_tensor(param, "adam_step: param")
  need_tensor(grad, "adam_step: grad")
  need_tensor(exp_avg, "adam_step: exp_avg")
  need_tensor(exp_avg_sq, "adam_step: exp_avg_sq")
  check_step(step, "adam_step")
  local s = fill_struct("ploss_adam_opts", "ploss_adam_opts_init", opts_table(opts, "adam_step"), adam_fields,
    "adam_step")
  ploss.check(C.ploss_adam_step(param:context(), param:dl(), grad:dl(), exp_avg:dl(), exp_avg_sq:dl(), step, s),
    "adam_step")
  written(param, exp_avg, exp_avg_sq)
  return param
end

---------------------------------------------------------------------------------------
-- Layers (Torch7's Module API, reduced): forward(input) → output,
-- backward(input, gradOutput) → gradInput (parameter gradients are overwritten, not
-- accumulated, unless a Linear is made with accumulate = true), parameters() → {params},
-- {grads}, zeroGradParameters(), updateParameters(lr) (p ← p − lr·g, Torch7's).
---------------------------------------------------------------------------------------

-- A layer's method called on its object: nn.check_self's checks, and an object of this very
-- class (m1.add(m2) without the colon passes another layer first)
local function check_layer(self, cls, name, method, var)
  nn.check_self(self, name, method, var or "layer")
  if getmetatable(self) ~= cls then
    ploss.raise(string.format("%s.%s: called without its object (got %s first): write %s:%s(...), with a colon",
      name, method, ploss.shown(self), var or "layer", method))
  end
end

-- The fields of a layer that hold its parameters and their gradients (moved by :to()).
local PARAMETER_FIELDS = { "weight", "bias", "gradWeight", "gradBias" }
-- Torch7's tensor type names: the device and dtype they stand for.
local TORCH7_TYPES = {
  ["torch.FloatTensor"] = { "cpu", "f32" }, ["torch.DoubleTensor"] = { "cpu", "f64" },
  ["torch.CudaTensor"] = { "cuda", "f32" }, ["torch.CudaDoubleTensor"] = { "cuda", "f64" },
  ["torch.CudaHalfTensor"] = { "cuda", "f16" },
}

local function module_class(name)
  local cls = {}
  cls.__index = cls
  cls.__name = name
  cls.__tostring = function(self) return self:tostring() end
  setmetatable(cls, {
    __call = function(c, ...)
      local self = setmetatable({}, c)
      self:__init(...)
      return self
    end,
    __tostring = function() return "ploss.nn." .. name end,
  })
  cls.updateOutput = function(self, input)
    check_layer(self, cls, name, "updateOutput")
    return self:forward(input)
  end
  cls.updateGradInput = function(self, input, gradOutput)
    check_layer(self, cls, name, "updateGradInput")
    return self:backward(input, gradOutput)
  end
  cls.parameters = function(self)
    check_layer(self, cls, name, "parameters")
    return {}, {}
  end
  cls.zeroGradParameters = function(self)
    check_layer(self, cls, name, "zeroGradParameters")
    local _, gs = self:parameters()
    for _, g in ipairs(gs) do g:zero() end
  end
  cls.updateParameters = function(self, lr)
    check_layer(self, cls, name, "updateParameters")
    if type(lr) ~= "number" or not (lr > -math.huge and lr < math.huge) then
      ploss.raise(string.format("%s:updateParameters: expected a finite learning rate, got %s", name, ploss.shown(lr)))
    end
    local ps, gs = self:parameters()
    for i, p in ipairs(ps) do p:add_(gs[i], -lr) end
  end
  -- Torch7's clone: a layer of the same class and options with copies of its parameters
  -- and their gradients (a Sequential's modules cloned in turn); nothing is shared with
  -- the original and nothing is drawn from the generator.  The buffers of the last call
  -- (output, gradInput, the saved inputs) are not copied: the next call makes them.
  -- What the original shares the clone shares (as Torch7's clone): a module listed twice,
  -- also in nested Sequentials, is one module listed twice, and a tensor held by two
  -- modules one tensor (`memo`, passed down to the modules' clones, maps the original's
  -- modules and tensors to their copies).
  cls.clone = function(self, memo)
    check_layer(self, cls, name, "clone")
    memo = memo or {}
    local function object(v) -- a module among the fields (a Sequential's): cloned in turn
      if type(v.clone) ~= "function" then
        ploss.raise(string.format("%s:clone: a field holds %s, which has no clone()", name, ploss.shown(v)))
      end
      return v:clone(memo)
    end
    local c = setmetatable({}, getmetatable(self))
    memo[self] = c
    for k, v in pairs(self) do
      if not nn.is_buffer_key(k) then c[k] = nn.deep_copy(v, object, memo) end
    end
    return c
  end
  -- Torch7's conversions: the parameters and their gradients on a device and in a dtype
  -- (new tensors where either changes; the old ones are marked replaced, so that an
  -- optimiser or EMA made with them refuses them and is made again), the buffers of the last
  -- call dropped; a Sequential's modules in turn.  type() takes Torch7's names and ploss's
  -- dtypes.
  cls.to = function(self, device, dtype)
    check_layer(self, cls, name, "to", "model")
    -- every new tensor made before any field is set: a refused device or dtype, or memory
    -- running out part-way, leaves the model as it was
    local moves = {}
    local function collect(m)
      for _, k in ipairs(PARAMETER_FIELDS) do
        local v = rawget(m, k)
        if ploss.is_tensor(v) then moves[#moves + 1] = { m, k, v:to(device, dtype), v } end
      end
      for _, sub in ipairs(rawget(m, "modules") or {}) do collect(sub) end
    end
    collect(self)
    for _, mv in ipairs(moves) do
      rawset(mv[1], mv[2], mv[3])
      if mv[3] ~= mv[4] then replaced_by[mv[4]] = name end
    end
    return self:clearState()
  end
  cls.cuda = function(self) check_layer(self, cls, name, "cuda", "model") return self:to("cuda") end
  cls.cpu = function(self) check_layer(self, cls, name, "cpu", "model") return self:to("cpu") end
  cls.type = function(self, t)
    check_layer(self, cls, name, "type", "model")
    local torch7 = TORCH7_TYPES[t]
    if torch7 then return self:to(torch7[1], torch7[2]) end
    if type(t) ~= "string" then
      ploss.raise(string.format("%s:type: expected a type name ('torch.FloatTensor', 'torch.DoubleTensor', " ..
        "'torch.CudaTensor', 'f32', …), got %s", name, ploss.shown(t)))
    end
    return self:to(nil, ploss.float_dtype(t, name .. ":type"))
  end
  cls.float = function(self) check_layer(self, cls, name, "float", "model") return self:type("torch.FloatTensor") end
  cls.double = function(self) check_layer(self, cls, name, "double", "model") return self:type("torch.DoubleTensor") end
  cls.clearState = function(self)
    check_layer(self, cls, name, "clearState", "model")
    nn.drop_buffers(self)
    -- (a module of another kind may have no buffers to drop, hence no clearState)
    for _, m in ipairs(rawget(self, "modules") or {}) do
      if type(m.clearState) == "function" then m:clearState() end
    end
    return self
  end
  cls.tostring = function() return "ploss.nn." .. name end
  nn[name] = cls
  return cls
end

--- ploss.nn.Linear(in_features, out_features [, opts]): y = x·Wᵀ + b (PyTorch's layout:
-- weight out×in, bias out).  opts: bias (true), dtype ('f32'), device ('cpu'),
-- init ('he': N(0, 2/in), for ReLU-like activations; 'xavier': N(0, 2/(in + out))) drawn
-- from the global seeded generator (ploss.manual_seed; the same numbers on CPU and GPU),
-- input_grad (true; false skips the gradient of the input, e.g. for the first layer),
-- accumulate (false: backward writes gradWeight and gradBias; true: adds to them, as
-- Torch7's accGradParameters, for a layer run several times per step — shared weights —
-- with zeroGradParameters() before each step).
-- Input N×in, output N×out.  Fields: weight, bias, gradWeight, gradBias, output, gradInput.
local Linear = module_class("Linear")

function Linear:__init(in_features, out_features, opts)
  opts = opts_table(opts, "Linear",
    { bias = true, dtype = true, device = true, init = true, input_grad = true, accumulate = true })
  for _, v in ipairs { in_features, out_features } do
    if type(v) ~= "number" or v < 1 or v ~= math.floor(v) then
      ploss.raise("Linear: expected positive integer sizes (in_features, out_features), got " .. ploss.shown(v))
    end
  end
  local dtype, device = ploss.float_dtype(opts.dtype, "Linear"), opts.device or "cpu"
  local init = opts.init or "he"
  local std
  if init == "he" then std = math.sqrt(2 / in_features)
  elseif init == "xavier" then std = math.sqrt(2 / (in_features + out_features))
  else ploss.raise("Linear: init: expected 'he' or 'xavier', got " .. tostring(init)) end
  self.in_features, self.out_features, self.init = in_features, out_features, init
  self.weight = ploss.randn({ out_features, in_features }, { dtype = dtype, device = device, std = std })
  self.gradWeight = ploss.zeros({ out_features, in_features }, { dtype = dtype, device = device })
  if opt(opts, "bias", "boolean", true, "Linear") then
    self.bias = ploss.zeros({ out_features }, { dtype = dtype, device = device })
    self.gradBias = ploss.zeros({ out_features }, { dtype = dtype, device = device })
  end
  self.input_grad = opt(opts, "input_grad", "boolean", true, "Linear")
  self.accumulate = opt(opts, "accumulate", "boolean", false, "Linear")
end

-- Raise unless `t` (the layer's input or gradOutput, named `name`) is N×`cols` with N
-- `rows` (when given), of the weight's dtype and device: named here, not as gemm's a or b.
local function check_linear_operand(self, t, name, cols, rows)
  if t:dim() ~= 2 or t:size(2) ~= cols or (rows and t:size(1) ~= rows) then
    ploss.raise(string.format("Linear: %s: expected %s×%d, got %s", name, rows or "N", cols,
      t:dim() == 2 and table.concat(t:size(), "×") or (t:dim() .. "-d")))
  end
  local w = self.weight
  if t:dtype() ~= w:dtype() then
    ploss.raise(string.format("Linear: %s: dtype %s, but the layer's weight is %s (make the layer with {dtype = " ..
      "'%s'}, or convert: %s:to('%s'))", name, t:dtype(), w:dtype(), t:dtype(), name, w:dtype()))
  end
  if t:device() ~= w:device() then
    ploss.raise(string.format("Linear: %s: on %s, but the layer's weight is on %s (make the layer with {device = " ..
      "'%s'}, or move: %s:to('%s'))", name, t:device(), w:device(), t:device(), name, w:device()))
  end
  -- a broadcast view (expand: stride 0) is no GEMM operand: named here, not as gemm's
  for d = 1, 2 do
    if t:stride(d) == 0 and t:size(d) > 1 then
      ploss.raise(string.format("Linear: %s: dim %d is broadcast (stride 0, an expand); pass %s:contiguous()", name, d,
        name))
    end
  end
end

function Linear:forward(input)
  nn.check_self(self, "Linear", "forward", "layer")
  need_tensor(input, "Linear: input")
  check_linear_operand(self, input, "input", self.in_features)
  -- (a new buffer when the input is the layer's own output, given back to it)
  local out = nn.buffer(self.output, { input:size(1), self.out_features }, self.weight:dtype(), self.weight:device(),
    input)
  F.gemm(input, self.weight, { trans_b = true, out = out })
  if self.bias then F.bias_add(out, self.bias) end
  self.output = out -- only once the product has succeeded
  nn.saw_input(self, input)
  return out
end

function Linear:backward(input, gradOutput)
  nn.check_self(self, "Linear", "backward", "layer")
  need_tensor(input, "Linear: input")
  need_tensor(gradOutput, "Linear: gradOutput")
  check_linear_operand(self, input, "input", self.in_features)
  check_linear_operand(self, gradOutput, "gradOutput", self.out_features, input:size(1))
  nn.check_input(self, input, "Linear")
  -- (out×N)·(N×in), added to the gradient with accumulate
  F.gemm(gradOutput, input, { trans_a = true, beta = self.accumulate and 1 or 0, out = self.gradWeight })
  if self.bias then
    if self.accumulate then self.gradBias:add_(F.bias_grad(gradOutput)) else F.bias_grad(gradOutput, { out = self.gradBias }) end
  end
  if not self.input_grad then return nil end
  local gi = nn.buffer(self.gradInput, input:size(), self.weight:dtype(), self.weight:device(), input, gradOutput)
  F.gemm(gradOutput, self.weight, { out = gi }) -- (N×out)·(out×in)
  self.gradInput = gi -- only once the product has succeeded
  return gi
end

function Linear:parameters()
  check_layer(self, Linear, "Linear", "parameters")
  if self.bias then return { self.weight, self.bias }, { self.gradWeight, self.gradBias } end
  return { self.weight }, { self.gradWeight }
end

function Linear:tostring()
  return string.format("ploss.nn.Linear(%d -> %d%s, init=%s%s)", self.in_features, self.out_features,
    self.bias and "" or ", no bias", self.init, self.accumulate and ", accumulate" or "")
end

--- ploss.nn.Swish(), ploss.nn.HardSwish(), ploss.nn.Mish() ({inplace = true} writes the
-- gradient over gradOutput; the forward output is always a separate buffer, since the
-- backward pass needs the input).
for cls_name, fname in pairs { Swish = "swish", HardSwish = "hard_swish", Mish = "mish" } do
  local Act = module_class(cls_name)
  local fwd, bwd = F[fname], F[fname .. "_backward"]
  function Act:__init(opts)
    opts = opts_table(opts, cls_name, { inplace = true })
    self.inplace = opt(opts, "inplace", "boolean", false, cls_name)
  end
  function Act:forward(input)
    nn.check_self(self, cls_name, "forward", "layer")
    need_tensor(input, cls_name .. ": input")
    -- a new buffer when the input is in the layer's own output (given back to it), as the
    -- criteria do with their gradient: never written over the input it reads
    local out = nn.buffer(self.output, input:size(), input:dtype(), input:device(), input)
    fwd(input, { out = out })
    self.output = out -- only once the call has succeeded
    nn.saw_input(self, input)
    return out
  end
  function Act:backward(input, gradOutput)
    nn.check_self(self, cls_name, "backward", "layer")
    need_tensor(input, cls_name .. ": input")
    need_tensor(gradOutput, cls_name .. ": gradOutput")
    nn.check_input(self, input, cls_name)
    if self.inplace then
      self.gradInput = bwd(input, gradOutput, { inplace = true })
    else
      local gi = nn.buffer(self.gradInput, input:size(), input:dtype(), input:device(), input, gradOutput)
      bwd(input, gradOutput, { grad_input = gi })
      self.gradInput = gi
    end
    return self.gradInput
  end
  function Act:tostring() return "ploss.nn." .. cls_name .. "(" .. (self.inplace and "inplace=true" or "") .. ")" end
end

--- ploss.nn.Sequential{m1, m2, …}: forward chains the modules, backward runs them in
-- reverse with the inputs saved by the last forward (backward with another input runs
-- forward on it first).  Its input written since the forward ran (its storage's version
-- moved) is refused: call forward again.  Linear, the activation modules and the Taylor
-- softmax modules likewise refuse, in backward, the tensor their last forward read once it
-- was written since (so a module listed twice, whose later forward rewrote its output, is
-- refused by the layer that read that output).
local Sequential = module_class("Sequential")

-- Raise unless `m` is a module (an object with forward and backward methods).
local function need_module(m, what)
  local ok = type(m) == "table" and type(m.forward) == "function" and type(m.backward) == "function"
  local class = ok and rawget(m, "__index") ~= nil -- the class itself, not a module made by calling it
  if ok and not class and m._loss_head then
    ploss.raise(string.format("%s: %s is a loss head, not a layer: chain the layers, then call " ..
      "head(embeddings, labels) on their output", what, tostring(m._loss_head)))
  end
  if ok and not class and type(m.fused) == "function" then -- a criterion: forward needs a target
    ploss.raise(string.format("%s: %s is a criterion, not a layer: chain the layers, then call the criterion " ..
      "on their output and the target", what, m._class_name and ("ploss." .. m._class_name) or "this"))
  end
  if not ok or class then
    ploss.raise(string.format("%s: expected a module (e.g. ploss.nn.Linear(4, 3)), got %s", what,
      class and "a class (make one: Cls(…))" or type(m) == "table" and "a table that is not one" or ploss.shown(m)))
  end
  return m
end

function Sequential:__init(modules)
  if modules ~= nil and (type(modules) ~= "table" or type(modules.forward) == "function") then
    ploss.raise("Sequential: expected a list of modules ({m1, m2, …}), got " ..
      (type(modules) == "table" and "a module (wrap it in a list: {m})" or type(modules)))
  end
  self.modules = {}
  for i, m in ipairs(modules or {}) do self.modules[i] = need_module(m, "Sequential: modules[" .. i .. "]") end
end

function Sequential:add(m)
  check_layer(self, Sequential, "Sequential", "add", "model")
  self.modules[#self.modules + 1] = need_module(m, "Sequential:add")
  return self
end

function Sequential:forward(input)
  nn.check_self(self, "Sequential", "forward", "model")
  self._inputs, self._version = nil, nil
  local inputs = { input }
  local x = input
  for i, m in ipairs(self.modules) do
    x = m:forward(x)
    inputs[i + 1] = x
  end
  -- the input's version once the chain has run (a module may write its input in place):
  -- backward refuses an input written after that.  The modules' own inputs are theirs to
  -- check (Linear, the activation and Taylor modules do; a module listed twice rewrites its
  -- output, which the next module's backward then refuses)
  self._inputs, self._version = inputs, ploss.is_tensor(input) and input:version() or nil
  self.output = x
  return x
end

function Sequential:backward(input, gradOutput)
  nn.check_self(self, "Sequential", "backward", "model")
  if not self._inputs or self._inputs[1] ~= input then
    self:forward(input)
  elseif self._version and not input:is_freed() and input:version() ~= self._version then
    ploss.raise(string.format("Sequential:backward: input was written since forward (its storage's version is %d, " ..
      "forward read %d); the saved activations belong to the old values: call forward again", input:version(),
      self._version))
  end
  -- A layer that skips its input gradient (input_grad = false) ends the chain: only where no
  -- layer before it has parameters (they would keep a stale or zero gradient without a
  -- word).  Checked before any layer runs; a module of another kind that gives none is
  -- checked when it does.
  local function check_skip(i)
    for j = 1, i - 1 do
      local m = self.modules[j]
      if m.parameters and #m:parameters() > 0 then
        ploss.raise(string.format("Sequential:backward: modules[%d] gives no input gradient (input_grad = " ..
          "false), but modules[%d] before it has parameters that need one: only a first layer may skip it", i, j))
      end
    end
  end
  for i = 2, #self.modules do
    if self.modules[i].input_grad == false then check_skip(i) end
  end
  local g = gradOutput
  for i = #self.modules, 1, -1 do
    g = self.modules[i]:backward(self._inputs[i], g)
    if g == nil then
      check_skip(i)
      break
    end
  end
  self.gradInput = g
  return g
end

-- Each parameter once, in module order: a module listed twice (shared weights, a Linear
-- with accumulate = true) gives its parameters once, as torch's Module.parameters(), so
-- that an optimiser steps them once per step.
function Sequential:parameters()
  check_layer(self, Sequential, "Sequential", "parameters", "model")
  local ps, gs, seen = {}, {}, {}
  for _, m in ipairs(self.modules) do
    local p, g = m:parameters()
    for i = 1, #p do
      if not seen[p[i]] then
        seen[p[i]] = true
        ps[#ps + 1], gs[#gs + 1] = p[i], g[i]
      end
    end
  end
  return ps, gs
end

function Sequential:tostring()
  local parts = {}
  for i, m in ipairs(self.modules) do parts[i] = "  (" .. i .. ") " .. tostring(m) end
  return "ploss.nn.Sequential {\n" .. table.concat(parts, "\n") .. "\n}"
end

---------------------------------------------------------------------------------------
-- Optimisers: opt = ploss.optim.SGD(params, grads, opts); opt:step() after each backward.
---------------------------------------------------------------------------------------

ploss.optim = ploss.optim or {}

-- Raise when params[i] was replaced by its model's conversion (model:double(), :to(…)): the
-- model trains new tensors, which an optimiser or EMA made with the old ones would never
-- see (its steps moving, its averages taken from, tensors the model no longer uses).
local function check_not_replaced(p, where, i)
  local by = replaced_by[p]
  if by then
    ploss.raise(string.format("%s: params[%d] was replaced by its %s's conversion (to, cuda, cpu, type, float, " ..
      "double): the model holds new tensors; make the %s again from model:parameters()", where, i, by,
      where:match("^EMA") and "EMA" or "optimiser"))
  end
end

-- An optimiser's options are fields of it as well: `opt.lr` reads the value the next step
-- takes (the default where none was given) and `opt.lr = x` sets it (a learning-rate
-- schedule; its type and range checked there, as the constructor checks them: a value the
-- step would refuse is never kept); any other new field is refused
-- (a misspelt `opt.lrr = x` would otherwise be ignored without a word).
local function optimizer(name, make_state, step_one, fields)
  local cls = {}
  local ctype = "ploss_" .. name:lower() .. "_opts"
  local defaults = ffi.new(ctype)
  C[ctype .. "_init"](defaults)
  local function value(self, k)
    local v = rawget(self, "opts")[k]
    if v ~= nil then return v end
    if fields[k] == "boolean" then return defaults[k] ~= 0 end
    return tonumber(defaults[k])
  end
  cls.__index = function(self, k)
    local m = cls[k]
    if m == nil and fields[k] then return value(self, k) end
    return m
  end
  -- the step's own checks of the options' ranges, run on the options as a whole
  local function check_ranges(opts)
    ploss.check(C[ctype .. "_check"](fill_struct(ctype, ctype .. "_init", opts, fields, name)), name)
  end
  cls.__newindex = function(self, k, v)
    ploss.check_option_keys({ [k] = true }, name, fields) -- the constructor's refusal of a name
    if v ~= nil then opt({ [k] = v }, k, fields[k], nil, name) end
    local opts = rawget(self, "opts")
    local new = {}
    for key, val in pairs(opts) do new[key] = val end
    new[k] = v
    check_ranges(new) -- nothing set where the step would refuse the options
    opts[k] = v
  end
  cls.__name = name
  setmetatable(cls, {
    __call = function(c, params, grads, opts)
      if type(params) ~= "table" or type(grads) ~= "table" then
        ploss.raise(name .. ": expected two lists of the same length (params, grads), e.g. model:parameters()")
      end
      check_no_hole(params, name .. ": params")
      check_no_hole(grads, name .. ": grads")
      if #params ~= #grads then
        ploss.raise(name .. ": expected two lists of the same length (params, grads), e.g. model:parameters()")
      end
      opts = opts_table(opts, name, fields)
      -- the options' types and ranges now, not at the first step, and into a copy of its
      -- own: an option set on one optimiser must not move another built from the same table
      local own = {}
      for k in pairs(opts) do own[k] = opt(opts, k, fields[k], nil, name) end
      check_ranges(own)
      for i, g in ipairs(grads) do need_tensor(g, name .. ": grads[" .. i .. "]") end
      local self = setmetatable({ params = params, grads = grads, opts = own, t = 0, state = {} }, c)
      for i, p in ipairs(params) do
        check_not_replaced(p, name, i)
        self.state[i] = make_state(need_tensor(p, name .. ": params[" .. i .. "]"), own)
        self.state[i].step = 0
        self.state[i].param = p -- the tensor its buffers belong to (torch keys them by parameter)
      end
      return self
    end,
  })
  --- One update of every parameter from its gradient.
  -- Every gradient is checked against its parameter (shape, dtype, device: the usual slips)
  -- before the first parameter moves.  Each parameter keeps its own step count (torch's
  -- state['step']), advanced with its update: a step that the C checks refuse part-way
  -- leaves every parameter's count matching the updates it had (self.t counts the
  -- optimiser's completed steps).
  function cls:step()
    nn.check_self(self, name, "step", "optim")
    for i, p in ipairs(self.params) do
      local g = self.grads[i]
      check_not_replaced(p, name .. ": step", i)
      if not self.state[i] or p ~= self.state[i].param then -- no state, or another tensor's
        ploss.raise(string.format("%s: step: params[%d] is not a tensor the optimiser was made with (its " ..
          "state, step count and buffers, belongs to that one): make a new optimiser for new parameters", name, i))
      end
      if not (ploss.is_tensor(p) and ploss.is_tensor(g) and p:dtype() == g:dtype() and
              p:device() == g:device() and p:has_sizes(g:size())) then
        ploss.raise(string.format("%s: step: grads[%d] (%s) does not match params[%d] (%s): expected the " ..
          "parameter's shape, dtype and device", name, i, ploss.shown(g), i, ploss.shown(p)))
      end
    end
    for i, p in ipairs(self.params) do
      local st = self.state[i]
      step_one(p, self.grads[i], st, st.step + 1, self.opts)
      st.step = st.step + 1
    end
    self.t = self.t + 1
  end
  -- every option, the defaults the step takes (its C options struct's) where none was given
  cls.__tostring = function(self)
    local keys = {}
    for k in pairs(fields) do keys[#keys + 1] = k .. "=" .. tostring(value(self, k)) end
    table.sort(keys)
    return "ploss.optim." .. name .. "(" .. table.concat(keys, ", ") .. ")"
  end
  ploss.optim[name] = cls
  return cls
end

--- ploss.optim.SGD(params, grads, {lr=0.01, momentum=0, dampening=0, weight_decay=0,
-- nesterov=false}): torch.optim.SGD.  A momentum buffer (the param's dtype) is allocated at
-- the first step with momentum ≠ 0 and starts as that step's gradient (torch's), also where
-- momentum is set on after some steps without it.
optimizer("SGD", function()
  return {}
end, function(p, g, st, t, opts)
  if (opts.momentum or 0) ~= 0 and not st.buf then
    -- the C step's first step: the buffer is written, not read; kept only once written
    local buf = ploss.empty(p:size(), { dtype = p:dtype(), device = p:device() })
    F.sgd_step(p, g, buf, 1, opts)
    st.buf = buf
    return
  end
  F.sgd_step(p, g, st.buf, t, opts)
end, sgd_fields)

--- ploss.optim.Adam(params, grads, {lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
-- weight_decay=0, decoupled_weight_decay=false}): torch.optim.Adam (AdamW with
-- decoupled_weight_decay = true).  Moments are kept in f32 (f64 for f64 params).
optimizer("Adam", function(p)
  local dt = p:dtype() == "f64" and "f64" or "f32"
  return { m = ploss.zeros(p:size(), { dtype = dt, device = p:device() }),
           v = ploss.zeros(p:size(), { dtype = dt, device = p:device() }) }
end, function(p, g, st, t, opts)
  F.adam_step(p, g, st.m, st.v, t, opts)
end, adam_fields)

---------------------------------------------------------------------------------------
-- EMA of parameters
---------------------------------------------------------------------------------------

-- A C array of the descriptors of a list of tensors (read-only ones: `const`).
local function dl_array(list, const)
  local a = ffi.new(const and "const DLTensor *[?]" or "DLTensor *[?]", math.max(#list, 1))
  for i, t in ipairs(list) do a[i - 1] = t:dl() end
  return a
end

--- ema = ploss.optim.EMA(params, {decay = 0.9999, warmup = true})
--
-- Exponential moving averages ("shadows", copies of the params when made) of a list of
-- tensors, as TensorFlow's ExponentialMovingAverage with num_updates:
--   ema:update()    after each optimiser step: shadow ← d·shadow + (1 − d)·param for every
--                   float tensor at once (one pass, one launch on CUDA), integer tensors
--                   copied, d = min(decay, (1 + t)/(10 + t)) with t the updates before
--                   (warmup = false: d = decay)
--   ema:apply()     the averages into the params (evaluation), the live weights kept in
--                   the shadows' buffers: the two are exchanged, no third copy
--   ema:restore()   the live weights back (exchanged again)
-- The params are the tensors of the list as it was at construction (a copy of it: the
-- optimiser updates them in place); update() between apply() and restore() is an error, and
-- so is restore() after a param was written since apply() (restore{force = true} anyway).  The params must be
-- contiguous, on one device, and not overlap (checked here, named params[i]).  The shadows
-- have the params' dtype: the f32 result of each update is rounded to it, so with f16/bf16
-- params and a decay near 1 small steps are lost (a bf16 shadow with decay 0.999 moves only
-- while |param − shadow| exceeds ~4·|shadow|: never, in practice); average f32 masters instead.
-- The checks of the update and the exchange that concern the params alone, made when the
-- EMA is built rather than at its first apply(): every param contiguous, on the device of
-- params[1], and no two overlapping (a tensor listed twice, two views of one buffer:
-- apply() writes each param).  Names are 1-based, as the list's.
local function check_ema_params(params)
  local dev = params[1] and params[1]:device()
  local spans = {}
  for i, p in ipairs(params) do
    local name = "EMA: params[" .. i .. "]"
    if not p:is_contiguous() then ploss.raise(name .. ": expected a contiguous tensor (:contiguous())") end
    if p:device() ~= dev then
      ploss.raise(string.format("%s: on %s, expected params[1]'s device %s", name, p:device(), dev))
    end
    local n = p:numel() * p:element_size()
    if n > 0 then
      local dl = p:dl()
      local lo = tonumber(ffi.cast("uintptr_t", dl.data)) + tonumber(dl.byte_offset)
      spans[#spans + 1] = { lo = lo, hi = lo + n, i = i }
    end
  end
  -- sorted by start: a span overlaps an earlier one iff it starts before the farthest end so far
  table.sort(spans, function(a, b) return a.lo < b.lo or (a.lo == b.lo and a.i < b.i) end)
  local far
  for _, sp in ipairs(spans) do
    if far and sp.lo < far.hi then
      local i, j = math.min(sp.i, far.i), math.max(sp.i, far.i)
      ploss.raise(string.format("EMA: params[%d]: overlaps params[%d] (a tensor listed twice, or two views of " ..
        "one buffer): each param needs its own memory", j, i))
    end
    if not far or sp.hi > far.hi then far = sp end
  end
end

local EMA = {}
EMA.__index = EMA
local ema_fields = { decay = "number", warmup = "boolean" }
-- The options are fixed when the EMA is made (the update reads them from its C struct): a
-- field set on it afterwards (`ema.decay = 0.999`) would be ignored without a word, so none is
-- taken.
EMA.__newindex = function(_, k)
  ploss.raise(string.format("EMA: '%s' cannot be set: the options are given when it is made, " ..
    "ploss.optim.EMA(params, {decay = …, warmup = …}) (ema:decay() reads the next update's decay)", tostring(k)))
end

setmetatable(EMA, {
  __call = function(_, params, opts)
    if type(params) ~= "table" or ploss.is_tensor(params) then
      ploss.raise("EMA: params: expected a list of tensors, e.g. model:parameters()")
    end
    check_no_hole(params, "EMA: params")
    if type(opts) == "table" and ploss.is_tensor(opts[1]) then -- EMA(model:parameters()): its grads as opts
      ploss.raise("EMA: takes the parameters alone, EMA(params [, opts]), and got a list of tensors as opts: " ..
        "model:parameters() returns the parameters and their gradients; take the first " ..
        "(local params = model:parameters())")
    end
    opts = opts_table(opts, "EMA")
    ploss.check_option_keys(opts, "EMA", ema_fields)
    for k, v in pairs(opts) do
      if type(v) ~= ema_fields[k] then ploss.raise("EMA: " .. k .. ": expected a " .. ema_fields[k] .. ", got " .. type(v)) end
    end
    local self = setmetatable({ params = {}, shadows = {}, t = 0, applied = false,
      copts = ffi.new("ploss_ema_opts") }, EMA)
    C.ploss_ema_opts_init(self.copts)
    if opts.decay ~= nil then self.copts.decay = opts.decay end
    if opts.warmup ~= nil then self.copts.warmup = opts.warmup and 1 or 0 end
    if not (self.copts.decay >= 0 and self.copts.decay <= 1) then
      ploss.raise("EMA: decay: " .. tostring(opts.decay) .. " is not in [0, 1]")
    end
    for i, p in ipairs(params) do
      check_not_replaced(p, "EMA", i)
      self.params[i] = need_tensor(p, "EMA: params[" .. i .. "]")
    end
    check_ema_params(self.params)
    for i, p in ipairs(self.params) do self.shadows[i] = p:clone() end
    return self
  end,
})

local function ema_context(self, where)
  for i, p in ipairs(self.params) do check_not_replaced(p, where, i) end
  return #self.params > 0 and self.params[1]:context() or ploss.context("cpu")
end

function EMA:update()
  nn.check_self(self, "EMA", "update", "ema")
  if self.applied then ploss.raise("EMA: update() between apply() and restore()") end
  ploss.check(C.ploss_ema_update(ema_context(self, "EMA:update"), dl_array(self.shadows), dl_array(self.params, true),
    #self.params,
    self.t, self.copts), "ema_update")
  self.t = self.t + 1
  for _, s in ipairs(self.shadows) do s:bump_version() end
end

local function exchange(self, what)
  ploss.check(C.ploss_ema_swap(ema_context(self, "EMA:" .. what:match("_(%a+)$")), dl_array(self.params),
    dl_array(self.shadows), #self.params), what)
  for i = 1, #self.params do
    self.params[i]:bump_version()
    self.shadows[i]:bump_version()
  end
end

function EMA:apply()
  nn.check_self(self, "EMA", "apply", "ema")
  if self.applied then ploss.raise("EMA: apply() twice without restore()") end
  exchange(self, "ema_apply")
  -- the params' versions once the averages are in: a write after it shows at restore()
  self.applied = {}
  for i, p in ipairs(self.params) do self.applied[i] = p:version() end
end

--- ema:restore([{force = true}]): the live weights back into the params.  A param written
-- since apply() (an optimiser step between the two) is refused: restoring would drop that
-- write into the shadows without a word; force = true restores anyway.
function EMA:restore(opts)
  nn.check_self(self, "EMA", "restore", "ema")
  if not self.applied then ploss.raise("EMA: restore() without apply()") end
  if not opt(opts_table(opts, "EMA:restore", { force = true }), "force", "boolean", false, "EMA:restore") then
    for i, p in ipairs(self.params) do
      if p:version() ~= self.applied[i] then
        ploss.raise(string.format("EMA:restore: params[%d] was written since apply() (an optimiser step between " ..
          "apply() and restore()?): restoring would move that write into the shadows and bring back the weights " ..
          "from before it; restore() before training, or restore{force = true} to drop it", i))
      end
    end
  end
  exchange(self, "ema_restore")
  self.applied = false
end

--- The decay d of the next update.
function EMA:decay(...)
  if select("#", ...) > 0 then -- a getter: an argument would be dropped without a word
    ploss.raise("EMA:decay: takes no argument (it gives the decay of the next update; the decay is set at " ..
      "construction: EMA(params, {decay = …}))")
  end
  local d = self.copts.decay
  if self.copts.warmup ~= 0 then d = math.min(d, (1 + self.t) / (10 + self.t)) end
  return d
end

EMA.__tostring = function(self)
  return string.format("ploss.optim.EMA(decay=%s, warmup=%s, %d tensors, %d updates)", tostring(self.copts.decay),
    tostring(self.copts.warmup ~= 0), #self.params, self.t)
end
ploss.optim.EMA = EMA

end
