--- Softmax cross-entropy with label smoothing (LOSSES.md §2.1; core/ploss.h
-- ploss_cross_entropy_*).
--
-- Formula (PyTorch torch.nn.functional.cross_entropy; label smoothing after Szegedy et al.,
-- "Rethinking the Inception Architecture", CVPR 2016, and pytorch-loss
-- LabelSmoothSoftmaxCEV1–V3 for the 'reference' convention).  With lse_i the
-- log-sum-exp of sample i over the C classes and ε = label_smoothing, the target of a sample
-- of class y is t_j = a·[j = y] + b, and
--     ℓ_i = Σ_j w_j · t_ij · (lse_i − x_ij)
--   'pytorch'        a = 1 − ε,            b = ε/C      (positive 1 − ε + ε/C)
--   'reference'      a = 1 − ε − ε/C,      b = ε/C      (positive 1 − ε; targets sum to 1 − ε/C)
--   'uniform_others' a = 1 − ε − ε/(C−1), b = ε/(C−1) (positive 1 − ε; refused for C = 1)
-- Probability targets t are smoothed as t̃ = a·t + b.  Gradient ∂ℓ_i/∂x_ij =
-- (Σ_k c_ik)·p_ij − c_ij with c_ij = w_j·t_ij (zero for ignored samples).
--
-- Shapes and dtypes:
--   input   N×C or N×C×d1×…×dk logits, f32/f16/bf16/f64, any strides (class axis = dim 2
--           in Lua's 1-based numbering); channels-last (permuted) inputs are accepted.
--   target  class indices i64/i32 of shape N×d1×…×dk, values in [0, C) (0-based) or
--           ignore_index; or probabilities (float) of the input's shape.
--   weight  nil, or C class weights (a float tensor, or a Lua list copied to the input's
--           device).
--   loss    'mean'/'sum': a Lua number from forward (f32 precision, f64 for f64 input);
--           'none': a tensor N×d1×…×dk, zeros at ignored samples.
--   gradInput  the input's sizes and dtype.
-- 'mean' divides by Σ w[y_i] over valid samples (by the count without weight; by N·d1⋯dk
-- for probability targets).  No valid sample (all ignored, or an empty batch) with 'mean'
-- gives a NaN loss and an exactly zero gradient, as PyTorch; 'sum' gives 0.
-- State kept between forward and backward: the log-sum-exp, one float per sample.
--
-- Errors (Lua errors at the caller's line, message from ploss_last_error()):
--   "target: expected shape [...]"        wrong target shape (PLOSS_ERR_SHAPE)
--   "target: expected class indices (i64 or i32) or probabilities (float), got u8"
--   "input: expected logits of dtype f32, f16, bf16 or f64, got i64"  (PLOSS_ERR_DTYPE)
--   "target: class index 7 at sample (n, s) is outside [0, C) and is not ignore_index"
--           (PLOSS_ERR_INVALID_LABEL; on CUDA reported by the next synchronising call:
--            reading the loss, :item(), ploss.synchronize())
--   "weight: expected shape [C] (one weight per class)"
--   "opts.label_smoothing: 1.5 is outside [0, 1]"
--   "opts.smoothing_convention: uniform_others (ε/(C−1)) is undefined for C = 1"
--   "target: expected ... on cuda:0, got ... on cpu" (mixed devices, PLOSS_ERR_DEVICE)
-- On any error no output has been written.
return function(ploss)
local C = ploss.C
local nn = ploss.nn

local conventions = {
  pytorch = C.PLOSS_SMOOTHING_PYTORCH,
  reference = C.PLOSS_SMOOTHING_REFERENCE,
  uniform_others = C.PLOSS_SMOOTHING_UNIFORM_OTHERS,
}

local function weight_dl(o) return o.weight and o.weight:dl() or nil end

--- ploss.CrossEntropyLoss{weight=, ignore_index=-100, label_smoothing=0,
-- smoothing_convention='pytorch', reduction='mean', inplace=false}
--
-- ploss.F.cross_entropy(input, target, opts) → loss (a number when reduced, a tensor for
--   'none'; with opts.out = a loss tensor, writes it and returns it without synchronising).
-- ploss.F.cross_entropy_backward(input, target, grad_output, opts) → grad_input
--   (grad_output: number / one-element tensor, or the 'none' loss's shape; opts.grad_input
--   = a buffer to write into).
-- ploss.F.cross_entropy_fused(input, target, opts) → loss, grad_input in one pass
--   (opts.scale multiplies the gradient; opts.inplace = true writes it over input;
--   opts.grad_input, opts.out: buffers to write into).
nn.register(ploss, {
  name = "CrossEntropyLoss",
  fname = "cross_entropy",
  doc = "softmax cross-entropy with label smoothing (LOSSES.md §2.1)",
  opts_ctype = "ploss_cross_entropy_opts",
  opts_init = "ploss_cross_entropy_opts_init",
  options = {
    { "weight", kind = "tensor" },
    { "ignore_index", kind = "integer", default = -100 },
    { "label_smoothing", kind = "number", default = 0 },
    { "smoothing_convention", kind = "enum", default = "pytorch", values = conventions },
    { "reduction", kind = "enum", default = "mean", values = nn.reductions },
  },
  state = true, -- the log-sum-exp, one float per sample
  -- probability targets: the 'none' loss has the input's shape without the class axis,
  -- as for index targets, so the default loss_sizes applies to both.
  forward = function(o, ctx, input, target, copts, loss, lse)
    return C.ploss_cross_entropy_forward(ctx, input:dl(), target:dl(), weight_dl(o), copts,
      loss:dl(), lse and lse:dl() or nil)
  end,
  backward = function(o, ctx, input, target, copts, lse, grad_loss, grad_input)
    return C.ploss_cross_entropy_backward(ctx, input:dl(), target:dl(), weight_dl(o), copts,
      lse and lse:dl() or nil, grad_loss:dl(), grad_input:dl())
  end,
  fused = function(o, ctx, input, target, copts, loss, grad_input)
    return C.ploss_cross_entropy_fused(ctx, input:dl(), target:dl(), weight_dl(o), copts,
      loss:dl(), grad_input:dl())
  end,
})
end
