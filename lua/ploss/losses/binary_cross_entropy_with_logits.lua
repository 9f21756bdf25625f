-- Binary cross-entropy on logits, elementwise, with PyTorch's weight and pos_weight.
return {
  name = "binary_cross_entropy_with_logits",
  criterion = "BCEWithLogitsLoss",
  title = "Binary cross-entropy on logits",
  source = "PyTorch torch.nn.functional.binary_cross_entropy_with_logits",
  shape = "elementwise",
  policy = "bce",
  opts_type = "ploss_bce_with_logits_opts",
  opts_init = "ploss_binary_cross_entropy_with_logits_opts_init",
  target = "elementwise",
  tensors = {
    { name = "weight", kind = "broadcast", doc = "w, broadcast over the input (see below)" },
    { name = "pos_weight", kind = "broadcast", doc = "pw, the weight of the positive term, same forms" },
  },
  options = {},
  formula = [[
Elementwise, with softplus(z) = max(z, 0) + log1p(e^−|z|):

    ℓ = w·[pw·y·softplus(−x) + (1 − y)·softplus(x)]

'mean' divides by the element count (weights do not change the divisor, as PyTorch).]],
  gradient = "∂ℓ/∂x = w·[(1 − y)·σ(x) − pw·y·σ(−x)]  (= w·(σ(x) − y) when pw = 1).",
  notes = [[
weight and pos_weight are nil (all ones) or broadcast over the input: (a) a tensor of the
input's rank whose every size is 1 or the input's; (b) a vector of C = the size of axis 1
(one value per class along axis 1; for an N×C input this is PyTorch's broadcasting); (c) one
value.  A pos_weight vector must have length C or 1.  Targets are hard 0/1 or soft labels
in [0, 1] of any float dtype; no gradient is computed for them.]],
}
