-- Binary cross-entropy on probabilities, elementwise, PyTorch's BCELoss (log clamped at −100).
return {
  name = "binary_cross_entropy",
  criterion = "BCELoss",
  criterion_aliases = { "BCECriterion" },
  title = "Binary cross-entropy on probabilities",
  source = "PyTorch torch.nn.BCELoss / torch.nn.functional.binary_cross_entropy; Torch7 nn.BCECriterion",
  shape = "elementwise",
  policy = "binary_cross_entropy",
  target = "elementwise",
  input_doc = "probabilities in [0, 1], any shape (rank 0..8), f32/f16/bf16/f64, any strides.",
  input_range = { 0, 1 },
  tensors = {
    { name = "weight", kind = "broadcast", doc = "w, broadcast over the input as PyTorch broadcasts it" },
  },
  options = {},
  formula = [[
Elementwise, with both logarithms clamped at −100 as PyTorch does (so x = 0 or 1 gives a
finite loss):

    ℓ = −w·[y·max(log x, −100) + (1 − y)·max(log(1 − x), −100)]

'mean' divides by the element count (the weight does not change the divisor).]],
  gradient = [[
∂ℓ/∂x = w·(x − y) / max(x·(1 − x), 10⁻¹²), PyTorch's formula: the exact derivative
wherever x·(1 − x) > 10⁻¹², a finite value at x = 0 and x = 1 (±10¹², past f16's range:
±∞ in f16, as in PyTorch).  (PyTorch's 10⁻¹² is the
f32 number nearest to it even for f64 inputs: its clamped gradients differ from these by
4·10⁻⁹ relative.)]],
  notes = [[
For logits use binary_cross_entropy_with_logits, which is exact where this one saturates.
Under its Torch7 name too the clamp is PyTorch's: Torch7's BCECriterion took log(x + 10⁻¹²)
instead (27.6 where this gives 100 at x = 0, y = 1).
PyTorch raises an error for an input or target outside [0, 1]; ploss does not read the
values to check them: an input outside [0, 1] gives NaN.  weight is nil (all ones) or
broadcast over the input as for binary_cross_entropy_with_logits (trailing dims aligned; a
vector of length C is one value per class along axis 1).  No gradient is computed for the
target.]],
}
