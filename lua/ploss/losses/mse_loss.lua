-- Mean squared error, elementwise, PyTorch's MSELoss.
return {
  name = "mse_loss",
  criterion = "MSELoss",
  criterion_aliases = { "MSECriterion" },
  title = "Mean squared error",
  source = "PyTorch torch.nn.MSELoss / torch.nn.functional.mse_loss; Torch7 nn.MSECriterion",
  shape = "elementwise",
  policy = "mse",
  target = "elementwise",
  input_doc = "any shape (rank 0..8), f32/f16/bf16/f64, any strides.",
  target_doc = "the input's shape, any float dtype (any real values).",
  options = {},
  formula = [[
Elementwise, with d = x − y:

    ℓ = d²

'mean' divides by the element count.]],
  gradient = "∂ℓ/∂x = 2·d.",
  notes = [[
Only the input gets a gradient (the target is data).  The target must have the input's shape
(PyTorch broadcasts it with a warning; ploss refuses another shape).]],
}
