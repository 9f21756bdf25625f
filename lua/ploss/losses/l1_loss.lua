-- Mean absolute error, elementwise, PyTorch's L1Loss.
return {
  name = "l1_loss",
  criterion = "L1Loss",
  criterion_aliases = { "AbsCriterion" },
  title = "Mean absolute error (L1)",
  source = "PyTorch torch.nn.L1Loss / torch.nn.functional.l1_loss; Torch7 nn.AbsCriterion",
  shape = "elementwise",
  policy = "l1",
  target = "elementwise",
  input_doc = "any shape (rank 0..8), f32/f16/bf16/f64, any strides.",
  target_doc = "the input's shape, any float dtype (any real values).",
  options = {},
  formula = [[
Elementwise, with d = x − y:

    ℓ = |d|

'mean' divides by the element count.]],
  gradient = "∂ℓ/∂x = sign(d), 0 at d = 0 (PyTorch's subgradient).",
  notes = [[
Only the input gets a gradient.  The target must have the input's shape.]],
}
