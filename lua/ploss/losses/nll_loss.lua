-- Negative log-likelihood on log-probabilities, PyTorch's NLLLoss (weight, ignore_index).
return {
  name = "nll_loss",
  criterion = "NLLLoss",
  criterion_aliases = { "ClassNLLCriterion", "SpatialClassNLLCriterion" },
  title = "Negative log-likelihood",
  source = "PyTorch torch.nn.NLLLoss / torch.nn.functional.nll_loss; Torch7 nn.ClassNLLCriterion",
  shape = "rows",
  policy = "nll",
  target = "index",
  input_doc = "N×C or N×C×d1×…×dk log-probabilities (e.g. a log-softmax over axis 1), " ..
    "f32/f16/bf16/f64; C >= 1.  Layouts as for the other losses of this shape: N and C take any " ..
    "strides, the sample dims d1…dk must be walkable as one strided axis.  One sample may also be C " ..
    "log-probabilities (PyTorch's unbatched form) with a 0-d class index: its NONE loss is 0-d.",
  tensors = {
    { name = "weight", kind = "class_vector", what = "weight", doc = "w, C class weights" },
  },
  options = {
    { "ignore_index", "int64", -100, doc = "samples with this label add nothing (nor count in 'mean')" },
  },
  formula = [[
Per sample i with label y ≠ ignore_index, x the input (log-probabilities):

    ℓ_i = −w_y·x_iy

ignored samples: ℓ_i = 0.  'mean' divides by Σ w_y over the samples not ignored (their count
without weights), as PyTorch.]],
  gradient = "∂ℓ_i/∂x_iy = −w_y, 0 at every other class and for ignored samples.",
  notes = [[
Only the target's entry of each row is read: a non-finite value at another class does not
change the loss.  cross_entropy is this loss after a log-softmax, in one pass.]],
}
