-- Multi-class margin (hinge) loss, PyTorch's MultiMarginLoss (p, margin, weight).
return {
  name = "multi_margin_loss",
  criterion = "MultiMarginLoss",
  criterion_aliases = { "MultiMarginCriterion" },
  title = "Multi-class margin loss",
  source = "Weston, Watkins, \"Support Vector Machines for Multi-Class Pattern Recognition\", ESANN 1999; " ..
    "PyTorch torch.nn.MultiMarginLoss / torch.nn.functional.multi_margin_loss; Torch7 nn.MultiMarginCriterion",
  shape = "rows",
  policy = "multi_margin",
  target = "index",
  input_doc = "N×C scores (or N×C×d1×…×dk: one loss per position, ploss's extension), " ..
    "f32/f16/bf16/f64; C >= 1.  Layouts as for the other losses of this shape.  One sample may also " ..
    "be C scores (PyTorch's unbatched form) with a 0-d class index: its NONE loss is 0-d.",
  target_doc = "class indices, i64 or i32, shape N×d1×…×dk, values in [0, C) (no ignore_index).",
  tensors = {
    { name = "weight", kind = "class_vector", what = "weight", doc = "w, C class weights (of the target's class)" },
  },
  options = {
    { "p", "int", 1, min = 1, max = 2, param = "power", doc = "the power of the hinge: 1 or 2" },
    { "margin", "double", 1, doc = "m, the margin" },
  },
  formula = [[
Per sample with label y, scores x and z_j = m − x_y + x_j:

    ℓ = (w_y / C)·Σ_{j≠y} max(0, z_j)^p

'mean' divides by the number of samples (not by the weights), as PyTorch.]],
  gradient = [[
∂ℓ/∂x_j = (w_y/C)·p·z_j^(p−1) where z_j > 0 (j ≠ y), 0 elsewhere; ∂ℓ/∂x_y = −Σ_{j≠y} ∂ℓ/∂x_j.
A NaN or infinite upstream gradient reaches only the active hinges: a sample with none
active gets 0 (autograd's clamp backward), where PyTorch's kernel multiplies its zeros by it
(NaN).]],
  notes = [[
The weight multiplies the hinge after the power, as PyTorch's kernels do (its documentation
writes it inside).  A NaN hinge (a NaN score, or ∞ − ∞) counts as active: the sample's loss
is NaN and the gradient takes its terms (±w/C for p = 1, NaN for p = 2), where PyTorch's
comparison z > 0 drops it.  A
single sample is a 1×C input with a one-element target, or C scores with a 0-d target.]],
}
