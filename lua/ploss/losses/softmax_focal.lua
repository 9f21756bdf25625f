-- Multi-class focal loss on the softmax.
return {
  name = "softmax_focal",
  criterion = "SoftmaxFocalLoss",
  title = "Softmax focal loss",
  source = "Lin et al., ICCV 2017, eq. 5 with the softmax in place of the sigmoid",
  shape = "rows",
  policy = "softmax_focal",
  target = "index",
  tensors = {
    { name = "alpha", kind = "class_vector", what = "factor", doc = "C per-class factors α_j (any float dtype)" },
  },
  state = { name = "lse", components = 1, doc = "the log-sum-exp of each sample" },
  options = {
    { "ignore_index", "int64", -100, doc = "samples with this label add nothing" },
    { "gamma", "double", 2, min = 0, doc = "γ ≥ 0, the focusing exponent (0 gives the cross-entropy)" },
  },
  formula = [[
Per valid sample with label y, log p_t = x_y − lse and 1 − p_t = −expm1(log p_t):

    ℓ_i = −α_y·(1 − p_t)^γ·log p_t

'mean' divides by the number of valid samples (α does not change the divisor).]],
  gradient = [[
∂ℓ_i/∂x_ij = α_y·G·(p_ij − [j = y]), G = u^γ·(1 + γ·p_t·L/u) with u = 1 − p_t and
L = −log p_t (L/u → 1 as u → 0, so G is finite for every γ ≥ 0).]],
  notes = [[
For a confident sample log p_t = x_y − lse keeps only the digits that lse's float spacing
leaves: the loss and gradient there, tiny, carry a relative error up to about
10⁻¹⁶·|lse|/(1 − p_t) in f64 (6·10⁻⁸·|lse|/(1 − p_t) where lse is an f32: CUDA's kernels of
at most 32 classes, or an f32 state through the C API; the Lua criteria save it in f64), and
backward from the saved lse differs from the fused pass by as much (2 % at logits (30, 0) in
f64, where 1 − p_t ≈ 10⁻¹³).]],
}
