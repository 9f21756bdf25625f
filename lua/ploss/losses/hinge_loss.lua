-- Hinge loss on ±1 labels (the margin classifier's loss), elementwise, Torch7's MarginCriterion.
return {
  name = "hinge_loss",
  criterion = "HingeLoss",
  criterion_aliases = { "MarginCriterion" },
  title = "Hinge loss",
  source = "Torch7 nn.MarginCriterion; the hinge loss of margin classifiers (scikit-learn's hinge_loss, " ..
    "Keras' Hinge for m = 1)",
  shape = "elementwise",
  policy = "hinge",
  target = "signs",
  input_doc = "scores, any shape (rank 0..8), f32/f16/bf16/f64, any strides.",
  target_doc = "the input's shape, any float dtype or i64/i32: labels −1 or 1 (other values are used as they are).",
  options = {
    { "margin", "double", 1, param = "margin", doc = "m, the margin" },
  },
  formula = [[
Elementwise, with x the score and y the label:

    ℓ = max(0, m − y·x)

'mean' divides by the element count (Torch7's sizeAverage).  A NaN score or label gives a
NaN loss (Torch7's kernel dropped it as 0).]],
  gradient = [[
∂ℓ/∂x = −y where y·x < m, else 0 (Torch7's: 0 at the kink y·x = m, and where y·x is NaN); where
it is 0 the upstream gradient does not pass, a NaN or infinite one included.]],
  notes = [[
PyTorch has no such criterion: its SoftMarginLoss is the smooth form, log(1 + e^(−y·x)),
and its HingeEmbeddingLoss takes distances, not scores.  Only the input gets a gradient.]],
}
