-- Mean squared error against a weighted target, Torch7's WeightedMSECriterion.
return {
  name = "target_weighted_mse_loss",
  criterion = "TargetWeightedMSELoss",
  criterion_aliases = { "WeightedMSECriterion" },
  title = "Mean squared error against a weighted target",
  source = "Torch7 nn.WeightedMSECriterion (the reconstruction cost of the sparse coders of Kavukcuoglu " ..
    "et al., unsup)",
  shape = "elementwise",
  policy = "target_weighted_mse",
  target = "elementwise",
  input_doc = "any shape (rank 0..8), f32/f16/bf16/f64, any strides.",
  target_doc = "the input's shape, any float dtype (any real values).",
  tensors = {
    { name = "weight", kind = "broadcast", required = true,
      doc = "w, broadcast over the target as PyTorch broadcasts (Torch7's: the target's shape, or its shape " ..
        "without the first dim, one weight map for every sample)" },
  },
  options = {},
  formula = [[
Elementwise, with d = x − w·y (the weight scales the target, not the squared error):

    ℓ = d²

'mean' divides by the element count and 'sum' is the plain sum: Torch7's MSECriterion on
the weighted target, with sizeAverage true and false.]],
  gradient = "∂ℓ/∂x = 2·d.",
  notes = [[
This is Torch7's criterion, whose weight multiplies the target before the MSE (its sparse
coders weight a reconstruction's target map); a loss whose weights multiply each squared
error, Σ w·(x − y)², is not this one.  Only the input gets a gradient.  Torch7 takes the
weight at construction, `nn.WeightedMSECriterion(w)`: here `{weight = w}`.]],
}
