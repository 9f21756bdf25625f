-- Softmax cross-entropy with label smoothing, class weights and probability targets.
return {
  name = "cross_entropy",
  criterion = "CrossEntropyLoss",
  criterion_aliases = { "CrossEntropyCriterion" },
  title = "Softmax cross-entropy with label smoothing",
  source = "PyTorch torch.nn.functional.cross_entropy; label smoothing after Szegedy et al., " ..
    "\"Rethinking the Inception Architecture for Computer Vision\", CVPR 2016, and pytorch-loss " ..
    "LabelSmoothSoftmaxCEV1–V3 for the 'reference' convention",
  shape = "rows",
  policy = "cross_entropy",
  target = "index_or_probabilities",
  tensors = {
    { name = "weight", kind = "class_vector", what = "weight",
      doc = "C class weights w_j (any float dtype, on the input's device)" },
  },
  state = { name = "lse", components = 1, doc = "the log-sum-exp of each sample" },
  enums = {
    { ctype = "ploss_smoothing_convention", prefix = "PLOSS_SMOOTHING_", count = "PLOSS_SMOOTHING_CONVENTION_COUNT",
      doc = "Label-smoothing conventions.  With ε = label_smoothing and C classes, the target of a " ..
        "sample of class y is t_j = a·[j = y] + b; probability targets t are smoothed the same way, " ..
        "t̃_j = a·t_j + b.",
      values = {
        { "pytorch", "PYTORCH", "positive 1 − ε + ε/C, negative ε/C (a = 1 − ε, b = ε/C): " ..
          "Szegedy et al. 2016, torch.nn.functional.cross_entropy" },
        { "reference", "REFERENCE", "positive 1 − ε, negative ε/C, the targets sum to 1 − ε/C " ..
          "(a = 1 − ε − ε/C, b = ε/C): pytorch-loss LabelSmoothSoftmaxCEV1–V3" },
        { "uniform_others", "UNIFORM_OTHERS", "positive 1 − ε, negative ε/(C − 1) " ..
          "(a = 1 − ε − ε/(C−1), b = ε/(C−1)); refused for C = 1 with ε > 0" },
      } },
  },
  options = {
    { "ignore_index", "int64", -100, doc = "class-index targets: samples with this label add nothing; with probability targets it stays negative (INVALID_ARGUMENT otherwise, as PyTorch refuses it)" },
    { "label_smoothing", "double", 0, min = 0, max = 1, doc = "ε, the smoothing mass" },
    { "smoothing_convention", "enum", "pytorch", ctype = "ploss_smoothing_convention",
      doc = "how ε is spread over the classes (see the conventions above)" },
  },
  formula = [[
With lse_i the log-sum-exp of sample i over the C classes and the smoothed target
t_ij = a·[j = y_i] + b of its convention,

    ℓ_i = a·w_{y_i}·(lse_i − x_{i,y_i}) + b·Σ_j w_j·(lse_i − x_ij)      (class indices)
    ℓ_i = Σ_j w_j·(a·t_ij + b)·(lse_i − x_ij)                           (probabilities)

'mean' divides by Σ w_{y_i} over the valid samples (their count without weights) for
class indices, and by the number of samples N·d1⋯dk for probability targets.]],
  gradient = [[
With c_ij = w_j·t_ij the coefficients above and p the softmax of the row,
∂ℓ_i/∂x_ij = (Σ_k c_ik)·p_ij − c_ij; zero at ignored samples.]],
  notes = [[
The target may be class indices (i64/i32, the input's shape without axis 1) or
probabilities of any float dtype with the input's shape.  Channels-last (permuted) inputs
are read in place.  A class whose coefficient c_ij is 0 adds nothing, even at a logit of
−inf (a masked class): with label smoothing 1 in the 'reference' or 'uniform_others'
convention a masked label gives the finite limit, not 0·∞ = NaN; a masked class with a
non-zero coefficient gives an infinite loss, as in PyTorch — but for label smoothing 1 in
PyTorch's convention with the label's own logit −inf, where PyTorch's 0·∞ gives NaN and
ploss +∞ (the smoothing term's).]],
}
