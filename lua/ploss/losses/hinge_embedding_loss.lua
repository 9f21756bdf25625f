-- Hinge embedding loss (a distance for similar pairs, a hinge for dissimilar ones),
-- elementwise, PyTorch's HingeEmbeddingLoss.
return {
  name = "hinge_embedding_loss",
  criterion = "HingeEmbeddingLoss",
  criterion_aliases = { "HingeEmbeddingCriterion" },
  title = "Hinge embedding loss",
  source = "PyTorch torch.nn.HingeEmbeddingLoss / torch.nn.functional.hinge_embedding_loss; " ..
    "Torch7 nn.HingeEmbeddingCriterion",
  shape = "elementwise",
  policy = "hinge_embedding",
  target = "signs",
  input_doc = "distances (or any scores), any shape (rank 0..8), f32/f16/bf16/f64, any strides.",
  target_doc = "the input's shape, any float dtype or i64/i32: labels 1 (similar) or −1 (dissimilar); " ..
    "another value takes both terms, as PyTorch's definition does.",
  options = {
    { "margin", "double", 1, param = "margin", doc = "m, the margin of the dissimilar pairs" },
  },
  formula = [[
Elementwise, with x the input and y the label:

    ℓ = x                  if y = 1
    ℓ = max(0, m − x)      if y = −1

(PyTorch's definition for any other y: the sum of both terms, kept here.)  The max is
PyTorch's clamp_min: a NaN input gives a NaN loss (and so a NaN 'mean' and 'sum').  'mean'
divides by the element count.]],
  gradient = [[
∂ℓ/∂x = 1 for y = 1; −1 where m − x >= 0 for y = −1 (PyTorch 2.11's subgradient at the
hinge: its clamp_min passes the gradient at m − x = 0, where 2.15's gives 0), 0 elsewhere; the
sum of both for another y.  Where it is 0 the upstream gradient does not pass,
a NaN or infinite one included (autograd's clamp backward).]],
  notes = [[
Only the input gets a gradient.  The target must have the input's shape.]],
}
