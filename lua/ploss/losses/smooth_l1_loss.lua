-- Smooth L1 loss, elementwise, PyTorch's SmoothL1Loss with its beta.
return {
  name = "smooth_l1_loss",
  criterion = "SmoothL1Loss",
  criterion_aliases = { "SmoothL1Criterion" },
  title = "Smooth L1 loss",
  source = "Girshick, \"Fast R-CNN\", ICCV 2015; PyTorch torch.nn.SmoothL1Loss / " ..
    "torch.nn.functional.smooth_l1_loss; Torch7 nn.SmoothL1Criterion (β = 1)",
  shape = "elementwise",
  policy = "smooth_l1",
  target = "elementwise",
  input_doc = "any shape (rank 0..8), f32/f16/bf16/f64, any strides.",
  target_doc = "the input's shape, any float dtype (any real values).",
  options = {
    { "beta", "double", 1, min = 0, param = "beta",
      doc = "β ≥ 0, where the quadratic part ends (0 gives the L1 loss)" },
  },
  formula = [[
Elementwise, with d = x − y:

    ℓ = d²/(2β)       if |d| < β
    ℓ = |d| − β/2     otherwise

'mean' divides by the element count.  β = 0 is the L1 loss.]],
  gradient = "∂ℓ/∂x = d/β where |d| < β, sign(d) elsewhere (0 at d = 0 when β = 0, as the L1 loss's and " ..
    "PyTorch's: torch.nn.functional.smooth_l1_loss sends β = 0 to l1_loss; the aten op smooth_l1_loss " ..
    "called directly gives −1 there, an effect of the order of its branches).  A NaN d gives a NaN gradient where β > 0 (as PyTorch's: neither threshold test holds, " ..
    "so its quadratic branch runs), 0 where β = 0 (the L1 loss's sign).",
  notes = [[
Only the input gets a gradient.  The target must have the input's shape.  Huber's loss with
δ = β is β times this loss.]],
}
