-- Huber loss, elementwise, PyTorch's HuberLoss with its delta.
return {
  name = "huber_loss",
  criterion = "HuberLoss",
  title = "Huber loss",
  source = "Huber, \"Robust Estimation of a Location Parameter\", Ann. Math. Statist. 1964; " ..
    "PyTorch torch.nn.HuberLoss / torch.nn.functional.huber_loss",
  shape = "elementwise",
  policy = "huber",
  target = "elementwise",
  input_doc = "any shape (rank 0..8), f32/f16/bf16/f64, any strides.",
  target_doc = "the input's shape, any float dtype (any real values).",
  options = {
    { "delta", "double", 1, min_exclusive = 0, param = "delta",
      doc = "δ > 0, where the quadratic part ends" },
  },
  formula = [[
Elementwise, with d = x − y:

    ℓ = d²/2            if |d| < δ
    ℓ = δ·(|d| − δ/2)   otherwise

'mean' divides by the element count.]],
  gradient = "∂ℓ/∂x = d where |d| < δ, δ·sign(d) elsewhere; a NaN d gives a NaN gradient (as " ..
    "PyTorch's huber_backward: neither threshold test holds).",
  notes = [[
Only the input gets a gradient.  The target must have the input's shape.  δ times the smooth
L1 loss with β = δ.]],
}
