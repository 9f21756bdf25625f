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
  input_doc = "N×C logits (or N×C×d1×…×dk: one loss per position, the classes along axis 1, ploss's " ..
    "extension), f32/f16/bf16/f64; C >= 1.  Layouts as for the other losses of this shape.",
  target_doc = "the input's shape, any float dtype: y = 1 where the class is present, 0 where it is not " ..
    "(values between are taken as soft labels).",
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
PyTorch's function takes N×C (or C) and averages over its last axis; ploss's axis 1 is the
same axis for N×C.  sp is taken in its stable form (max(z, 0) + log(1 + e^−|z|)): no overflow
for large logits.  A one-sample input is a 1×C tensor.]],
}
