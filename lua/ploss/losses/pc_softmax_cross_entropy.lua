-- Probability-corrected softmax cross-entropy.
return {
  name = "pc_softmax_cross_entropy",
  criterion = "PCSoftmaxCrossEntropyLoss",
  title = "PC-softmax cross-entropy",
  source = "Z. Qin, D. Kim, T. Gedeon, \"Rethinking Softmax with Cross-Entropy: Neural Network " ..
    "Classifier as Mutual Information Estimator\", arXiv:1911.10688; pytorch-loss " ..
    "PCSoftmaxCrossEntropyV1/V2",
  shape = "rows",
  policy = "pc_softmax",
  opts_type = "ploss_pc_softmax_opts",
  target = "index",
  tensors = {
    { name = "lb_proportion", kind = "class_vector", what = "prior", required = true, priors = true,
      doc = "the C class priors w (not normalised): finite, ≥ 0, at least one > 0" },
  },
  state = { name = "state", components = 1, doc = "log Σ_k w_k·e^(x_k) of each sample" },
  options = {
    { "ignore_index", "int64", -100, doc = "samples with this label add nothing" },
  },
  formula = [[
The softmax normaliser is weighted by the class priors w:

    ℓ = log Σ_k w_k·e^(x_k) − x_y

which may be negative; a class with w_k = 0 drops out of the normaliser, however large its
logit (+∞ excepted: log 0 + ∞ is NaN, as in the composite).  'mean' divides by
the number of valid samples.  The priors are checked on the CPU before anything is written;
on CUDA they are not read by the host (a negative or NaN prior gives NaN results).]],
  gradient = [[
∂ℓ/∂x_k = w_k·e^(x_k)/Σ_j w_j·e^(x_j) − [k = y] (the reference V2 uses w_y in place of w_k,
right only for equal priors).]],
}
