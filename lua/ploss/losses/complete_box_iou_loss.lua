-- The CIoU loss: the DIoU loss plus an aspect-ratio term.
local B = require "ploss.losses.box_options"

return {
  name = "complete_box_iou_loss",
  criterion = "CIoULoss",
  aliases = { "ciou_loss" },
  title = "Complete IoU loss",
  source = "Zheng et al., \"Distance-IoU Loss: Faster and Better Learning for Bounding Box Regression\", " ..
    "AAAI 2020 (CIoU); torchvision.ops.complete_box_iou_loss",
  shape = "boxes",
  policy = "complete_box_iou",
  opts_type = "ploss_box_loss_opts",
  opts_init = "ploss_box_loss_opts_init",
  target = "boxes",
  tensors = B.tensors,
  options = B.options,
  formula = B.common_formula .. [[


With ρ²/c² the centre term of distance_box_iou_loss and the aspect-ratio term

    v = (4/π²)·(atan2(W, H) − atan2(w, h))²
    α = v/(1 − IoU + v + ε)   (0 when v = 0)
    ℓ = weight·(1 − IoU + ρ²/c² + α·v)

atan2(w, h) is torchvision's atan(w/h) wherever h > 0; a box of zero height has π/2 (and a
finite gradient, where atan(w/0) gives a NaN one), a point box 0.]],
  gradient = B.common_gradient .. [[
  α is held constant (torchvision computes it without gradient); the gradient of v is
the exact one or the paper's (ciou_gradient).]],
  notes = B.common_notes,
}
