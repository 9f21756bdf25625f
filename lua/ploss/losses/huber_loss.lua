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
  tensors = {
    { name = "weight", kind = "broadcast",
      doc = "w, one weight per element (PyTorch ≥ 2.6's weight), broadcast over the input" },
  },
  options = {
    { "delta", "double", 1, min_exclusive = 0, param = "delta",
      doc = "δ > 0, where the quadratic part ends" },
  },
  formula = [[
Elementwise, with d = x − y and w the weight (1 without one):

    ℓ = w·d²/2            if |d| < δ
    ℓ = w·δ·(|d| − δ/2)   otherwise

'mean' divides by the element count, with a weight too (PyTorch's weighted Huber loss takes
the mean of w·ℓ, unlike its weighted MSE and L1 losses).]],
  gradient = "∂ℓ/∂x = w·d where |d| < δ, w·δ·sign(d) elsewhere; a NaN d gives a NaN gradient (as " ..
    "PyTorch's huber_backward: neither threshold test holds).",
  notes = [[
Only the input gets a gradient (not the target, not the weight).  The target must have the
input's shape; PyTorch asks the same of a weight, ploss also broadcasts a smaller one
(trailing dims aligned).  δ times the smooth L1 loss with β = δ.]],
}
