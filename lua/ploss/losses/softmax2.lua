--- Softmax family II (LOSSES.md §2.2–2.5, §2.7, §8.1; core/ploss.h section "softmax
-- family II"): one-hot encoding, large-margin softmax, Taylor softmax / log-Taylor softmax
-- and Taylor cross-entropy, PC-softmax cross-entropy, OHEM cross-entropy and OHEM
-- large-margin.
--
-- Common to the criteria (as ploss.CrossEntropyLoss, see ploss/nn.lua): input N×C or
-- N×C×d1×…×dk logits (f32/f16/bf16/f64, class axis = dim 2 in Lua's numbering), target
-- class indices (i64/i32, 0-based) of shape N×d1×…×dk; `crit:forward`, `crit:backward`,
-- `crit(input, target)` (fused); ploss.F.<name>, <name>_backward, <name>_fused.
-- 'mean' with no valid sample gives a NaN loss and an exactly zero gradient.  Errors are
-- Lua errors at the caller's line with the C library's message; nothing is half-written.
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
      min and (" >= " .. min) or "", tostring(v)))
  end
end

---------------------------------------------------------------------------------------
-- one-hot (LOSSES.md §8.1)
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
--   out                   a tensor to write (then num_classes may be nil: its dim 2)
-- Errors: a label outside [0, C) that is not ignore_index ("target: class index 7 at
-- sample (n, s) is outside [0, 5) …"; on CUDA reported by the next synchronising call).
function ploss.one_hot(target, num_classes, opts)
  opts = opts or {}
  if not ploss.is_tensor(target) then ploss.raise("one_hot: target: expected a ploss tensor, got " .. type(target)) end
  if type(opts) ~= "table" then ploss.raise("one_hot: opts: expected a table") end
  local out = opts.out
  if out == nil then
    check_integer("one_hot: num_classes", num_classes, 1)
    local sizes = target:size()
    table.insert(sizes, math.min(2, #sizes + 1), num_classes)
    out = ploss.empty(sizes, { dtype = opts.dtype or "f32", device = target:device() })
  elseif not ploss.is_tensor(out) then
    ploss.raise("one_hot: out: expected a ploss tensor, got " .. type(out))
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
  ploss.check(C.ploss_one_hot(target:context(), target:dl(), co, out:dl()), "one_hot")
  return out
end
ploss.F.one_hot = ploss.one_hot

---------------------------------------------------------------------------------------
-- large-margin softmax (LOSSES.md §2.3)
---------------------------------------------------------------------------------------

--- ploss.LargeMarginSoftmaxLoss{lam=0.3, ignore_index=255, reduction='mean', inplace=false}
--
-- T. Kobayashi, "Large Margin In Softmax Cross-Entropy Loss", BMVC 2019 (pytorch-loss
-- LargeMarginSoftmaxV1–V3).  Cross-entropy plus (λ/2)·Σ_{j≠y} (q_j − 1/(C−1))·log q_j,
-- where q is the softmax over the non-target classes: it pushes the non-target
-- probabilities towards uniform, widening the margin to the strongest competitor.
--   ℓ_i = lse_i − x_iy + (λ/2)·(E_q[x] − mean_{j≠y} x_j)
--   ∂ℓ/∂x_y = p_y − 1,  ∂ℓ/∂x_j = p_j + (λ/2)·(q_j·(x_j − E_q[x] + 1) − 1/(C−1))  (j ≠ y)
-- input needs C >= 2 classes ("input: expected at least 2 classes along axis 1").
-- 'none' gives the target's shape with zeros at ignored samples (as pytorch-loss V3, not
-- V1/V2's compacted vector).  A target logit far above the others (1e3) stays finite: the
-- sums over all classes and over the non-target classes keep separate maxima.
-- State kept between forward and backward: 3 floats per sample (N×3×d1×…×dk).
-- ploss.F.large_margin_softmax(input, target, opts), _backward, _fused as every loss.
nn.register(ploss, {
  name = "LargeMarginSoftmaxLoss",
  fname = "large_margin_softmax",
  doc = "large-margin softmax cross-entropy, Kobayashi BMVC 2019 (LOSSES.md §2.3)",
  opts_ctype = "ploss_large_margin_opts",
  opts_init = "ploss_large_margin_opts_init",
  options = {
    { "lam", kind = "number", default = 0.3 },
    { "ignore_index", kind = "integer", default = 255 },
    { "reduction", kind = "enum", default = "mean", values = nn.reductions },
  },
  state = true,
  state_sizes = function(input)
    local s = input:size()
    s[2] = 3
    return s
  end,
  forward = function(o, ctx, input, target, copts, loss, state)
    return C.ploss_large_margin_softmax_forward(ctx, input:dl(), target:dl(), copts, loss:dl(),
      state and state:dl() or nil)
  end,
  backward = function(o, ctx, input, target, copts, state, grad_loss, grad_input)
    return C.ploss_large_margin_softmax_backward(ctx, input:dl(), target:dl(), copts,
      state and state:dl() or nil, grad_loss:dl(), grad_input:dl())
  end,
  fused = function(o, ctx, input, target, copts, loss, grad_input)
    return C.ploss_large_margin_softmax_fused(ctx, input:dl(), target:dl(), copts, loss:dl(), grad_input:dl())
  end,
})

---------------------------------------------------------------------------------------
-- Taylor softmax / log-Taylor softmax (LOSSES.md §2.4)
---------------------------------------------------------------------------------------

-- C options of the Taylor ops from Lua options {n = 2, dim = 2} (dim 1-based, negative
-- from the end, as Tensor:size(dim)).
local function taylor_copts(opts, what)
  if type(opts) ~= "table" then ploss.raise(what .. ": opts: expected a table") end
  local co = new_opts("ploss_taylor_softmax_opts", "ploss_taylor_softmax_opts_init")
  local n, dim = opts.n or 2, opts.dim or 2
  check_integer(what .. ": n", n)
  check_integer(what .. ": dim", dim)
  if dim == 0 then ploss.raise(what .. ": dim: 0 is not a dimension (dims are 1-based; -1 is the last)") end
  co.n = n
  co.dim = dim > 0 and dim - 1 or dim
  return co
end

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
    opts = opts or {}
    if not ploss.is_tensor(input) then ploss.raise(fname .. ": input: expected a ploss tensor, got " .. type(input)) end
    local co = taylor_copts(opts, fname)
    local out = opts.out or ploss.empty_like(input)
    ploss.check(c_forward(input:context(), input:dl(), co, out:dl()), fname)
    return out
  end

  --- ploss.F.taylor_softmax_backward(input, grad_output [, opts]) → grad_input (and the
  -- log variant): the gradient through the op, recomputing its sums from the input.
  -- opts: n, dim as forward; grad_input (a tensor to write).
  ploss.F[fname .. "_backward"] = function(input, grad_output, opts)
    opts = opts or {}
    if not ploss.is_tensor(input) then ploss.raise(fname .. "_backward: input: expected a ploss tensor, got " .. type(input)) end
    if not ploss.is_tensor(grad_output) then
      ploss.raise(fname .. "_backward: grad_output: expected a ploss tensor, got " .. type(grad_output))
    end
    local co = taylor_copts(opts, fname .. "_backward")
    local grad = opts.grad_input or ploss.empty_like(input)
    ploss.check(c_backward(input:context(), input:dl(), grad_output:dl(), co, grad:dl()), fname .. "_backward")
    return grad
  end

  --- ploss.TaylorSoftmax{n = 2, dim = 2} and ploss.LogTaylorSoftmax{n = 2, dim = 2}: modules
  -- (also ploss.nn.TaylorSoftmax / ploss.nn.LogTaylorSoftmax, for nn.Sequential) with
  -- forward(input) → output and backward(input, gradOutput) → gradInput (buffers reused
  -- between calls); updateOutput / updateGradInput are aliases.  No parameters.
  local cls = {}
  cls.__index = cls
  cls.__tostring = function(self) return string.format("ploss.%s(n=%d, dim=%d)", cls_name, self.n, self.dim) end
  setmetatable(cls, {
    __call = function(c, opts)
      opts = opts or {}
      if type(opts) ~= "table" then ploss.raise(cls_name .. ": expected an options table") end
      for k in pairs(opts) do
        if k ~= "n" and k ~= "dim" then ploss.raise(string.format("%s: unknown option '%s'", cls_name, tostring(k))) end
      end
      local self = setmetatable({ n = opts.n or 2, dim = opts.dim or 2 }, c)
      taylor_copts(self, cls_name) -- validate the types now; ranges are checked by the C side
      return self
    end,
    __tostring = function() return "ploss." .. cls_name .. ": " .. (fname == "taylor_softmax" and "" or "log-") ..
      "Taylor softmax (LOSSES.md §2.4)" end,
  })
  function cls:forward(input)
    if not ploss.is_tensor(input) then ploss.raise(cls_name .. ": input: expected a ploss tensor, got " .. type(input)) end
    self.output = nn.buffer(self.output, input:size(), input:dtype(), input:device())
    ploss.check(c_forward(input:context(), input:dl(), taylor_copts(self, cls_name), self.output:dl()), fname)
    return self.output
  end
  function cls:backward(input, gradOutput)
    if not ploss.is_tensor(input) then ploss.raise(cls_name .. ": input: expected a ploss tensor, got " .. type(input)) end
    if not ploss.is_tensor(gradOutput) then
      ploss.raise(cls_name .. ": gradOutput: expected a ploss tensor, got " .. type(gradOutput))
    end
    self.gradInput = nn.buffer(self.gradInput, input:size(), input:dtype(), input:device())
    ploss.check(c_backward(input:context(), input:dl(), gradOutput:dl(), taylor_copts(self, cls_name),
      self.gradInput:dl()), fname .. "_backward")
    return self.gradInput
  end
  function cls:updateOutput(input) return self:forward(input) end
  function cls:updateGradInput(input, gradOutput) return self:backward(input, gradOutput) end
  function cls:parameters() return {}, {} end
  function cls:tostring() return tostring(self) end
  ploss[cls_name] = cls
  nn[cls_name] = cls
end

---------------------------------------------------------------------------------------
-- Taylor cross-entropy (LOSSES.md §2.5)
---------------------------------------------------------------------------------------

--- ploss.TaylorCrossEntropyLoss{n=2, ignore_index=-1, reduction='mean', inplace=false}
--
-- The NLL of the log-Taylor softmax over the class axis (pytorch-loss
-- TaylorCrossEntropyLossV1/V3): with F_j = f_n(x_j), Z = Σ_j F_j,
--   ℓ_i = log Z_i − log F_{i,y_i},   ∂ℓ/∂x_k = f_{n−1}(x_k)·(1/Z − [k = y]/F_y).
-- n: even Taylor order (2..64).  ignore_index defaults to -1, as the reference (not -100).
-- Computed in f32 (f64 for f64 input and for n > 10).  State kept between forward and
-- backward: Z, one float per sample.
-- ploss.F.taylor_cross_entropy(input, target, opts), _backward, _fused as every loss.
nn.register(ploss, {
  name = "TaylorCrossEntropyLoss",
  fname = "taylor_cross_entropy",
  doc = "cross-entropy of the log-Taylor softmax (LOSSES.md §2.5)",
  opts_ctype = "ploss_taylor_cross_entropy_opts",
  opts_init = "ploss_taylor_cross_entropy_opts_init",
  options = {
    { "n", kind = "integer", default = 2 },
    { "ignore_index", kind = "integer", default = -1 },
    { "reduction", kind = "enum", default = "mean", values = nn.reductions },
  },
  state = true, -- Z, one float per sample
  forward = function(o, ctx, input, target, copts, loss, state)
    return C.ploss_taylor_cross_entropy_forward(ctx, input:dl(), target:dl(), copts, loss:dl(),
      state and state:dl() or nil)
  end,
  backward = function(o, ctx, input, target, copts, state, grad_loss, grad_input)
    return C.ploss_taylor_cross_entropy_backward(ctx, input:dl(), target:dl(), copts,
      state and state:dl() or nil, grad_loss:dl(), grad_input:dl())
  end,
  fused = function(o, ctx, input, target, copts, loss, grad_input)
    return C.ploss_taylor_cross_entropy_fused(ctx, input:dl(), target:dl(), copts, loss:dl(), grad_input:dl())
  end,
})

---------------------------------------------------------------------------------------
-- PC-softmax cross-entropy (LOSSES.md §2.2)
---------------------------------------------------------------------------------------

--- ploss.PCSoftmaxCrossEntropyLoss{lb_proportion = {...}, ignore_index=-100, reduction='mean', inplace=false}
--
-- Probability-corrected softmax cross-entropy (Qin, Kim, Gedeon, arXiv:1911.10688;
-- pytorch-loss PCSoftmaxCrossEntropyV1/V2): the softmax normaliser is weighted by the class
-- priors w = lb_proportion (C values, not normalised; a Lua list or a float tensor):
--   ℓ_i = log Σ_k w_k·e^(x_ik) − x_{i,y_i}   (may be negative)
--   ∂ℓ/∂x_k = w_k·e^(x_k)/Σ_j w_j·e^(x_j) − [k = y]   (the correct gradient; the reference V2
--   uses w_y for every class, right only for equal priors).
-- lb_proportion is required; the priors must be finite and >= 0, one at least > 0 ("lb_proportion:
-- the prior -1 of class 2 is not a finite number >= 0").  A Lua list is checked here
-- whatever the device; a tensor on a GPU is not read back (a negative prior then gives NaN).
-- ignore_index defaults to -100 (as V2; V1 used 255).  State: one float per sample.
-- ploss.F.pc_softmax_cross_entropy(input, target, {lb_proportion = ...}), _backward, _fused.
local function check_priors(o)
  local w = o.lb_proportion
  if w == nil then ploss.raise("PCSoftmaxCrossEntropyLoss: lb_proportion (the C class priors) is required") end
  if not (o._owned_lb_proportion or w:device() == "cpu") then return end -- a device tensor: the C side's doc
  local positive = false
  for j, v in ipairs(w:flat()) do
    if not (v >= 0 and v < math.huge) then
      ploss.raise(string.format("lb_proportion: the prior %s of class %d is not a finite number >= 0", tostring(v), j - 1))
    end
    positive = positive or v > 0
  end
  if not positive and w:numel() > 0 then ploss.raise("lb_proportion: every prior is 0 (at least one must be > 0)") end
end

nn.register(ploss, {
  name = "PCSoftmaxCrossEntropyLoss",
  fname = "pc_softmax_cross_entropy",
  doc = "probability-corrected softmax cross-entropy, Qin et al. 2019 (LOSSES.md §2.2)",
  opts_ctype = "ploss_pc_softmax_opts",
  opts_init = "ploss_pc_softmax_opts_init",
  options = {
    { "lb_proportion", kind = "tensor" },
    { "ignore_index", kind = "integer", default = -100 },
    { "reduction", kind = "enum", default = "mean", values = nn.reductions },
  },
  check = function(o) check_priors(o) end,
  state = true, -- the prior-weighted log-sum-exp, one float per sample
  forward = function(o, ctx, input, target, copts, loss, state)
    return C.ploss_pc_softmax_cross_entropy_forward(ctx, input:dl(), target:dl(), o.lb_proportion:dl(), copts,
      loss:dl(), state and state:dl() or nil)
  end,
  backward = function(o, ctx, input, target, copts, state, grad_loss, grad_input)
    return C.ploss_pc_softmax_cross_entropy_backward(ctx, input:dl(), target:dl(), o.lb_proportion:dl(), copts,
      state and state:dl() or nil, grad_loss:dl(), grad_input:dl())
  end,
  fused = function(o, ctx, input, target, copts, loss, grad_input)
    return C.ploss_pc_softmax_cross_entropy_fused(ctx, input:dl(), target:dl(), o.lb_proportion:dl(), copts,
      loss:dl(), grad_input:dl())
  end,
})

---------------------------------------------------------------------------------------
-- OHEM cross-entropy and OHEM large-margin (LOSSES.md §2.7)
---------------------------------------------------------------------------------------

--- ploss.OhemCrossEntropyLoss{score_thresh=0.7, n_min=-1, ignore_index=255, reduction='mean', inplace=false}
-- ploss.OhemLargeMarginLoss{score_thresh=0.7, n_min=-1, lam=0.3, ignore_index=255, reduction='mean', inplace=false}
--
-- Online hard example mining over all the samples (pixels) of the batch (Shrivastava et al.,
-- CVPR 2016; the probability-threshold variant of segmentation code, pytorch-loss
-- OhemCELoss / OhemLargeMarginLoss), then cross-entropy (or the large-margin softmax
-- loss, LOSSES.md §2.3) over the kept samples:
--   score s_i = softmax probability of the label (rounded to f32); ignored samples sort last
--   kept K = {valid i : s_i <= max(score_thresh, s_(n_min))}   (s_(r): the r-th smallest)
-- i.e. the samples predicted with probability <= score_thresh, and at least the n_min
-- hardest ones.  n_min = -1 (default) takes ⌊M/16⌋ with M the number of samples, ignored ones
-- included (as the reference); n_min >= M keeps every valid sample.  Ties with the
-- n_min-th score are all kept (the reference keeps exactly n_min of them).  'mean' divides
-- by |K| (NaN with a zero gradient when K is empty); 'none' gives each sample's loss, 0
-- where not kept.  The threshold is chosen on the device without a sort or a host round
-- trip; backward recomputes the mining (no state is kept).
-- ploss.F.ohem_cross_entropy / ploss.F.ohem_large_margin (+ _backward, _fused).
local ohem_common = {
  { "score_thresh", kind = "number", default = 0.7 },
  { "n_min", kind = "integer", default = -1 },
}
for _, def in ipairs {
  { name = "OhemCrossEntropyLoss", fname = "ohem_cross_entropy", cname = "ohem_cross_entropy",
    doc = "OHEM cross-entropy: hard-pixel mining, then cross-entropy (LOSSES.md §2.7)" },
  { name = "OhemLargeMarginLoss", fname = "ohem_large_margin", cname = "ohem_large_margin", lam = true,
    doc = "OHEM large-margin softmax: hard-pixel mining, then the Kobayashi loss (LOSSES.md §2.7)" },
} do
  local options = { ohem_common[1], ohem_common[2] }
  if def.lam then options[#options + 1] = { "lam", kind = "number", default = 0.3 } end
  options[#options + 1] = { "ignore_index", kind = "integer", default = 255 }
  options[#options + 1] = { "reduction", kind = "enum", default = "mean", values = nn.reductions }
  local c_forward, c_backward, c_fused = C["ploss_" .. def.cname .. "_forward"], C["ploss_" .. def.cname .. "_backward"],
    C["ploss_" .. def.cname .. "_fused"]
  nn.register(ploss, {
    name = def.name,
    fname = def.fname,
    doc = def.doc,
    opts_ctype = "ploss_ohem_opts",
    opts_init = "ploss_ohem_opts_init",
    options = options,
    state = false, -- backward recomputes the mining
    forward = function(o, ctx, input, target, copts, loss)
      return c_forward(ctx, input:dl(), target:dl(), copts, loss:dl())
    end,
    backward = function(o, ctx, input, target, copts, state, grad_loss, grad_input)
      return c_backward(ctx, input:dl(), target:dl(), copts, grad_loss:dl(), grad_input:dl())
    end,
    fused = function(o, ctx, input, target, copts, loss, grad_input)
      return c_fused(ctx, input:dl(), target:dl(), copts, loss:dl(), grad_input:dl())
    end,
  })
end

end
