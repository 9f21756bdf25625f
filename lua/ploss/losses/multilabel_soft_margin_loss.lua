-- Multi-label one-versus-all loss on logits, PyTorch's MultiLabelSoftMarginLoss (weight).
return {
  name = "multilabel_soft_margin_loss",
  criterion = "MultiLabelSoftMarginLoss",
  criterion_aliases = { "MultiLabelSoftMarginCriterion" },
  title = "Multi-label soft margin loss",
  source = "PyTorch torch.nn.MultiLabelSoftMarginLoss / torch.nn.functional.multilabel_soft_margin_loss; " ..
    "Torch7 nn.MultiLabelSoftMarginCriterion",
  shape = "rows",
  policy = "multilabel_soft_margin",
  target = "elementwise",
  input_doc = "N×C logits, f32/f16/bf16/f64, any strides; C >= 1 (rank 2, or one sample's C logits: " ..
    "PyTorch's unbatched form, with a target of C values and a 0-d NONE loss; for more dims, move the " ..
    "classes last and view the input as (N·d1·…·dk)×C, as PyTorch averages over the last axis).",
  target_doc = "the input's shape, any float dtype or i64/i32 (as PyTorch takes them): y = 1 where the class " ..
    "is present, 0 where it is not (float values between are taken as soft labels).",
  tensors = {
    { name = "weight", kind = "class_vector", what = "weight", doc = "w, C class weights" },
  },
  options = {},
  formula = [[
Per sample i, with x its C logits, y its labels and sp(z) = log(1 + e^z):

    ℓ_i = (1/C)·Σ_j w_j·[y_ij·sp(−x_ij) + (1 − y_ij)·sp(x_ij)]

the binary cross-entropy of each class's sigmoid, averaged over the classes.  'mean' divides
the sum of the ℓ_i by the number of samples, as PyTorch.]],
  gradient = "∂ℓ_i/∂x_ij = (w_j/C)·(σ(x_ij) − y_ij).",
  notes = [[
PyTorch's function averages over the last axis of any rank; the row losses' classes are
axis 1, the same axis only for N×C, so another rank is refused (SHAPE) rather than read
otherwise.  sp is taken in its stable form (max(z, 0) + log(1 + e^−|z|)): no overflow
for large logits.  An infinite upstream gradient gives ±∞ gradients (PyTorch's backward
gives NaN).  A one-sample input is a 1×C tensor or C logits.]],
}
