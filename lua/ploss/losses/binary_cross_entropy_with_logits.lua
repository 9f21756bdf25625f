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
    { name = "weight", kind = "broadcast", doc = "w, broadcast over the input (as described above)" },
    { name = "pos_weight", kind = "broadcast", doc = "pw, the weight of the positive term, same forms" },
  },
  options = {},
  formula = [[
Elementwise, with softplus(z) = max(z, 0) + log1p(e^−|z|):

    ℓ = w·[pw·y·softplus(−x) + (1 − y)·softplus(x)]

'mean' divides by the element count (weights do not change the divisor, as PyTorch).]],
  gradient = "∂ℓ/∂x = w·[(1 − y)·σ(x) − pw·y·σ(−x)]  (= w·(σ(x) − y) when pw = 1).",
  notes = [[
weight and pos_weight are nil (all ones) or broadcast over the input as PyTorch broadcasts
them: a tensor of rank at most the input's whose dims align with the input's last ones, each
of size 1 or the input's (for an N×C×H×W input e.g. [C, 1, 1], [H, W], [1, W], [N, 1, H, W],
one value as 0-d or [1]).  For an N×C input a vector of length C (pos_weight: C or 1) is one
value per class.  Above rank 2, ploss also reads a vector of length C as one value per class
along axis 1 (Lua dim 2) where PyTorch's broadcasting has no reading, i.e. when C is not the
size of the last dim; when it is, a vector of that length reads differently in PyTorch (along
the last dim) and is refused (SHAPE error naming both readings): pass [C, 1, …, 1] for the
class axis or [1, W] for the last dim.  Targets are hard 0/1 or soft labels in [0, 1] of any
float dtype; no gradient is computed for them.  An infinite logit with its matching hard
target (x = +inf with y = 1, x = −inf with y = 0) gives a loss of 0 and a gradient of 0: the
term of the other label is dropped where its factor is exactly 0, where PyTorch computes
0·∞ = NaN.  Against the other target (or a soft one) the loss is +inf.]],
}
