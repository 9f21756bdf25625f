-- Soft margin loss (two-class logistic loss on ±1 labels), elementwise, PyTorch's SoftMarginLoss.
return {
  name = "soft_margin_loss",
  criterion = "SoftMarginLoss",
  criterion_aliases = { "SoftMarginCriterion" },
  title = "Soft margin loss",
  source = "PyTorch torch.nn.SoftMarginLoss / torch.nn.functional.soft_margin_loss; Torch7 nn.SoftMarginCriterion",
  shape = "elementwise",
  policy = "soft_margin",
  target = "signs",
  input_doc = "scores, any shape (rank 0..8), f32/f16/bf16/f64, any strides.",
  target_doc = "the input's shape, any float dtype or i64/i32: labels −1 or 1 (other values are used as they are).",
  options = {},
  formula = [[
Elementwise, with softplus(z) = max(z, 0) + log1p(e^−|z|):

    ℓ = log(1 + e^(−y·x)) = softplus(−y·x)

'mean' divides by the element count.]],
  gradient = "∂ℓ/∂x = −y·σ(−y·x).",
  notes = [[
Evaluated as a softplus: finite for any finite margin, where PyTorch's log(1 + exp(−y·x))
overflows to inf once −y·x exceeds about 88 in f32.  A correctly classified infinite score
(y·x = +inf) gives a loss of 0; a wrongly classified one (y·x = −inf) an infinite loss and
the gradient −y (PyTorch's is NaN there, and in f32 already from y·x below about −88).]],
}
