-- The distance ratio loss of triplet networks: −log of the softmax probability that the
-- similar pair is the closer one, on given distances; Torch7's DistanceRatioCriterion.
return {
  name = "distance_ratio_loss",
  criterion = "DistanceRatioLoss",
  criterion_aliases = { "DistanceRatioCriterion" },
  title = "Distance ratio loss (triplet network)",
  source = "Hoffer and Ailon, Deep Metric Learning Using Triplet Network, SIMBAD 2015 " ..
    "(arXiv:1412.6622); Torch7 nn.DistanceRatioCriterion",
  shape = "pairs",
  policy = "distance_ratio",
  target = "none",
  input_layout = "elementwise",
  inputs = {
    { "d_pos", "X, the distances of the similar pairs (anchor to positive)" },
    { "d_neg", "Y, the distances of the dissimilar pairs (anchor to negative), X's shape" },
  },
  input_doc = "any shape (rank 0..8, typically N: one distance per triplet), f32/f16/bf16/f64, " ..
    "any strides; both inputs of the same dtype and shape (no broadcasting).",
  options = {},
  formula = [[
Elementwise, the negative log of the softmax over (−X, −Y) at the similar pair:

    ℓ = −log(e^−X / (e^−X + e^−Y)) = X + log(e^−X + e^−Y) = softplus(X − Y)

computed as max(X − Y, 0) + log1p(e^−|X − Y|), finite for any finite X and Y (Torch7's
e^−X overflows, or underflows to a log of 0, once the distances pass ~700 in f64 or ~88
in f32).  'mean' divides by the element count.]],
  gradient = [[
With σ the logistic function: ∂ℓ/∂X = σ(X − Y) (Torch7's 1 − e^−X/(e^−X + e^−Y)) and
∂ℓ/∂Y = −σ(X − Y), each times the upstream gradient.  X = Y = +∞ gives NaN (∞ − ∞), as
Torch7's; X finite and Y = +∞ gives 0 and zero gradients.]],
  notes = [[
Torch7's criterion takes the list {X, Y}, `crit:forward({d_pos, d_neg})`, and nothing after
it: a Torch7 loop's target there, which Torch7 ignored, is refused rather than taken for
the upstream gradient.  With sizeAverage it divides the sum by X's first size: for its
usual input, one distance per triplet (N, or N×1), the same as 'mean' here; for inputs with
more than one distance per row 'mean' divides by all of them.  The distances come from the caller (e.g. the
p-norm of the embeddings' differences); TripletMarginLoss{soft_margin = true} is the same
softplus on distances it computes itself.  Both backends compute each element in f64; the
loss is f32 (f64 for f64 input).  No state is kept.]],
}
