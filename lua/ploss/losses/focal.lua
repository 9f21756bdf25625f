--- Focal family: binary cross-entropy with logits, sigmoid focal loss, softmax focal loss
-- and dual focal loss (LOSSES.md §3.1, §2.6; core/ploss.h, section "sigmoid and focal
-- family").  Computed in fp32 (f64 for f64 input; the CPU in f64) with log-space forms
-- (softplus, log-sigmoid, x_y − lse), so logits of any finite size (|x| = 1e4, f16 ±60000)
-- give finite losses and gradients.  Gradients come back in the input's dtype, losses in
-- f32 (f64 for f64 input).  'mean' over zero elements / zero valid samples gives a NaN loss
-- and an exactly zero gradient.
--
-- ploss.BCEWithLogitsLoss{weight=, pos_weight=, reduction='mean'}
--   PyTorch's torch.nn.BCEWithLogitsLoss.  Elementwise, with p = σ(x):
--     ℓ = w·[pw·y·softplus(−x) + (1 − y)·softplus(x)],   ∂ℓ/∂x = w·[(1 − y)·p − pw·y·(1 − p)]
--   input   logits of any shape, f32/f16/bf16/f64, any strides.
--   target  float, the input's shape; 0/1 or soft labels in [0, 1].
--   weight  nil, a tensor of the input's rank whose sizes are 1 or the input's (broadcast:
--           the input's shape, N×1×H×W, 1×C×1×1, …), or a vector of length C = size(2)
--           (per class along dim 2; for an N×C input this is PyTorch's broadcasting, for
--           N×C×d… it is PyTorch's with the weight viewed as C×1×…×1).  A Lua list is
--           copied to the input's device.
--   pos_weight  the positive-term weight, same accepted forms; as a vector its length must
--           be C = size(2), "per class" as PyTorch's pos_weight for an N×C input.
--   'mean' divides by the element count (weights do not change the divisor, as PyTorch).
--
-- ploss.FocalLoss{alpha=0.25, gamma=2, convention='torchvision', reduction='mean'}
--   Sigmoid focal loss (Lin et al., "Focal Loss for Dense Object Detection", ICCV 2017;
--   torchvision.ops.sigmoid_focal_loss).  With p = σ(x), a1 = α, a0 = 1 − α (both 1 when
--   alpha < 0, which disables the balancing):
--     'torchvision' ℓ = (a1·y + a0·(1−y))·q^γ·BCE(x, y),  q = 1 − p_t = y(1 − p) + (1 − y)p
--     'reference'   ℓ = |y − p|^γ·[a1·y·softplus(−x) + a0·(1−y)·softplus(x)]
--                   (pytorch-loss FocalLossV1–V3; the |y − p|^γ factor of Quality Focal
--                   Loss, Li et al., NeurIPS 2020)
--   The two agree for 0/1 targets.  gamma ≥ 0 (gamma = 0: α-weighted BCE), alpha ≤ 1.
--   Gradients are finite for every gamma ≥ 0; at the kink y = p of 'reference' (soft
--   targets only) the subgradient of the |y − p|^γ factor is taken as 0.
--   input/target as BCEWithLogitsLoss; 'mean' divides by the element count.
--
-- ploss.SoftmaxFocalLoss{alpha=, gamma=2, ignore_index=-100, reduction='mean'}
--   Multi-class focal loss on the softmax (Lin et al. 2017 with a softmax):
--     ℓ_i = −α_y·(1 − p_t)^γ·log p_t,   p_t = softmax(x_i)_y
--     ∂ℓ_i/∂x_ij = α_y·G·(p_ij − [j = y]),  G = (1 − p_t)^γ·(1 + γ·p_t·(−log p_t)/(1 − p_t))
--   input   N×C or N×C×d1×…×dk logits (class axis = dim 2).
--   target  class indices (0-based) i64/i32 of shape N×d1×…×dk, or ignore_index.
--   alpha   nil, or C per-class factors (tensor or Lua list).
--   'mean' divides by the number of valid (non-ignored) samples; α does not change it.
--   State kept between forward and backward: the log-sum-exp, one float per sample.
--
-- ploss.DualFocalLoss{eps=1e-5, ignore_index=-100, reduction='mean'}
--   Dual focal loss (Hossain, Paplinski, Betts, Neurocomputing 2021 / arXiv:1909.11932, as
--   implemented by pytorch-loss Dual_Focal_loss, whose formula is the spec; note its
--   ignore default is 255, ploss's -100):
--     ℓ_i = −Σ_j log(1 + ε − (p_ij − [j = y])²)
--     ∂ℓ_i/∂x_ik = p_ik·(G_k − Σ_j p_ij·G_j),  G_j = 2·(p_ij − [j = y]) / (1 + ε − (p_ij − [j = y])²)
--   Shapes as SoftmaxFocalLoss; 'mean' over the valid samples.
--
-- ploss.OneHotTargets(criterion [, {ignore_index=-1, label_smoothing=0, smoothing_convention=}])
--   Adapts an elementwise criterion on N×C(×d…) logits (BCEWithLogitsLoss, FocalLoss) to
--   class-index targets: each call builds the one-hot targets of the labels (ploss.one_hot,
--   in the input's dtype on its device, a buffer reused between calls; ignored labels give
--   all-zero rows) and calls the wrapped criterion with them.  Same API as a criterion.
--
-- Every criterion: forward / backward / crit(input, target [, scale]) (fused, one pass;
-- `inplace = true` writes the gradient over the input), as ploss.nn describes.
-- Functional API (as ploss.F.cross_entropy):
--   F.binary_cross_entropy_with_logits(input, target, opts), _backward, _fused
--   F.sigmoid_focal (alias F.sigmoid_focal_loss), F.softmax_focal, F.dual_focal, each with
--   _backward and _fused.
--
-- Errors (Lua errors at the caller's line, message from ploss_last_error(); nothing written):
--   "target: expected the input's shape [...]"          (PLOSS_ERR_SHAPE)
--   "pos_weight: expected a vector of length C (one value per class along axis 1) or 1, ..."
--   "opts.gamma: -1 must be finite and >= 0"             (PLOSS_ERR_INVALID_ARGUMENT)
--   "opts.alpha: 2 must be finite and <= 1 ..."
--   "opts.eps: 0 must be finite and > 0"
--   "target: class index 7 at sample (n, s) is outside [0, C) and is not ignore_index"
--           (PLOSS_ERR_INVALID_LABEL; on CUDA reported by the next synchronising call)
--   "alpha: expected shape [C] (one factor per class)"
return function(ploss)
local C = ploss.C
local nn = ploss.nn
local F = ploss.F

local function dl(t) return t and t:dl() or nil end
local function input_sizes(input) return input:size() end

nn.register(ploss, {
  name = "BCEWithLogitsLoss",
  fname = "binary_cross_entropy_with_logits",
  doc = "binary cross-entropy on logits, PyTorch semantics (LOSSES.md §3.1 baseline)",
  opts_ctype = "ploss_bce_with_logits_opts",
  opts_init = "ploss_binary_cross_entropy_with_logits_opts_init",
  options = {
    { "weight", kind = "tensor" },
    { "pos_weight", kind = "tensor" },
    { "reduction", kind = "enum", default = "mean", values = nn.reductions },
  },
  loss_sizes = input_sizes,
  forward = function(o, ctx, input, target, copts, loss)
    return C.ploss_binary_cross_entropy_with_logits_forward(ctx, input:dl(), target:dl(), dl(o.weight),
      dl(o.pos_weight), copts, loss:dl())
  end,
  backward = function(o, ctx, input, target, copts, _, grad_loss, grad_input)
    return C.ploss_binary_cross_entropy_with_logits_backward(ctx, input:dl(), target:dl(), dl(o.weight),
      dl(o.pos_weight), copts, grad_loss:dl(), grad_input:dl())
  end,
  fused = function(o, ctx, input, target, copts, loss, grad_input)
    return C.ploss_binary_cross_entropy_with_logits_fused(ctx, input:dl(), target:dl(), dl(o.weight),
      dl(o.pos_weight), copts, loss:dl(), grad_input:dl())
  end,
})

local conventions = { torchvision = C.PLOSS_FOCAL_TORCHVISION, reference = C.PLOSS_FOCAL_REFERENCE }

nn.register(ploss, {
  name = "FocalLoss",
  fname = "sigmoid_focal",
  doc = "sigmoid focal loss, torchvision semantics by default (LOSSES.md §3.1)",
  opts_ctype = "ploss_sigmoid_focal_opts",
  opts_init = "ploss_sigmoid_focal_opts_init",
  options = {
    { "alpha", kind = "number", default = 0.25 },
    { "gamma", kind = "number", default = 2 },
    { "convention", kind = "enum", default = "torchvision", values = conventions },
    { "reduction", kind = "enum", default = "mean", values = nn.reductions },
  },
  loss_sizes = input_sizes,
  forward = function(_, ctx, input, target, copts, loss)
    return C.ploss_sigmoid_focal_forward(ctx, input:dl(), target:dl(), copts, loss:dl())
  end,
  backward = function(_, ctx, input, target, copts, _, grad_loss, grad_input)
    return C.ploss_sigmoid_focal_backward(ctx, input:dl(), target:dl(), copts, grad_loss:dl(), grad_input:dl())
  end,
  fused = function(_, ctx, input, target, copts, loss, grad_input)
    return C.ploss_sigmoid_focal_fused(ctx, input:dl(), target:dl(), copts, loss:dl(), grad_input:dl())
  end,
})
F.sigmoid_focal_loss = F.sigmoid_focal -- torchvision's name

-- one-hot adapter ----------------------------------------------------------------------
local OneHotTargets = nn.class("OneHotTargets")

function OneHotTargets:__init(inner, opts)
  if type(inner) ~= "table" or not inner.fused then
    ploss.raise("OneHotTargets: expected a criterion (e.g. ploss.FocalLoss{}), got " .. type(inner))
  end
  self.inner = inner
  self.one_hot_opts = {}
  for k, v in pairs(opts or {}) do self.one_hot_opts[k] = v end
end

function OneHotTargets:targets(input, labels)
  if not ploss.one_hot then ploss.raise("OneHotTargets: this build has no ploss.one_hot") end
  local sizes = labels:size()
  table.insert(sizes, math.min(2, #sizes + 1), input:size(2))
  self._onehot = nn.buffer(self._onehot, sizes, input:dtype(), input:device())
  local o = { out = self._onehot }
  for k, v in pairs(self.one_hot_opts) do o[k] = v end
  return ploss.one_hot(labels, nil, o)
end

function OneHotTargets:forward(input, labels)
  self.output = self.inner:forward(input, self:targets(input, labels))
  return self.output
end

function OneHotTargets:backward(input, labels, gradOutput)
  self.gradInput = self.inner:backward(input, self:targets(input, labels), gradOutput)
  return self.gradInput
end

function OneHotTargets:fused(input, labels, scale)
  self.output, self.gradInput = self.inner:fused(input, self:targets(input, labels), scale)
  return self.output, self.gradInput
end

function OneHotTargets:tostring() return "ploss.OneHotTargets(" .. tostring(self.inner) .. ")" end

-- ploss.OneHotTargets(criterion, opts): `OneHotTargets` is the class; calling it with a
-- criterion builds an instance
ploss.OneHotTargets = function(inner, opts)
  local self = setmetatable({}, OneHotTargets)
  self:__init(inner, opts)
  return self
end

nn.register(ploss, {
  name = "SoftmaxFocalLoss",
  fname = "softmax_focal",
  doc = "multi-class softmax focal loss (Lin et al. 2017 with a softmax)",
  opts_ctype = "ploss_softmax_focal_opts",
  opts_init = "ploss_softmax_focal_opts_init",
  options = {
    { "alpha", kind = "tensor" },
    { "gamma", kind = "number", default = 2 },
    { "ignore_index", kind = "integer", default = -100 },
    { "reduction", kind = "enum", default = "mean", values = nn.reductions },
  },
  state = true, -- the log-sum-exp, one float per sample
  forward = function(o, ctx, input, target, copts, loss, lse)
    return C.ploss_softmax_focal_forward(ctx, input:dl(), target:dl(), dl(o.alpha), copts, loss:dl(), dl(lse))
  end,
  backward = function(o, ctx, input, target, copts, lse, grad_loss, grad_input)
    return C.ploss_softmax_focal_backward(ctx, input:dl(), target:dl(), dl(o.alpha), copts, dl(lse),
      grad_loss:dl(), grad_input:dl())
  end,
  fused = function(o, ctx, input, target, copts, loss, grad_input)
    return C.ploss_softmax_focal_fused(ctx, input:dl(), target:dl(), dl(o.alpha), copts, loss:dl(), grad_input:dl())
  end,
})

nn.register(ploss, {
  name = "DualFocalLoss",
  fname = "dual_focal",
  doc = "dual focal loss on the softmax, pytorch-loss semantics (LOSSES.md §2.6)",
  opts_ctype = "ploss_dual_focal_opts",
  opts_init = "ploss_dual_focal_opts_init",
  options = {
    { "eps", kind = "number", default = 1e-5 },
    { "ignore_index", kind = "integer", default = -100 },
    { "reduction", kind = "enum", default = "mean", values = nn.reductions },
  },
  state = true, -- the log-sum-exp, one float per sample
  forward = function(_, ctx, input, target, copts, loss, lse)
    return C.ploss_dual_focal_forward(ctx, input:dl(), target:dl(), copts, loss:dl(), dl(lse))
  end,
  backward = function(_, ctx, input, target, copts, lse, grad_loss, grad_input)
    return C.ploss_dual_focal_backward(ctx, input:dl(), target:dl(), copts, dl(lse), grad_loss:dl(), grad_input:dl())
  end,
  fused = function(_, ctx, input, target, copts, loss, grad_input)
    return C.ploss_dual_focal_fused(ctx, input:dl(), target:dl(), copts, loss:dl(), grad_input:dl())
  end,
})
end
