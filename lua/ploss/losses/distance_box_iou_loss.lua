-- The DIoU loss: IoU penalised by the distance of the centres.
local B = require "ploss.losses.box_options"

return {
  name = "distance_box_iou_loss",
  criterion = "DIoULoss",
  aliases = { "diou_loss" },
  title = "Distance IoU loss",
  source = "Zheng et al., \"Distance-IoU Loss: Faster and Better Learning for Bounding Box Regression\", " ..
    "AAAI 2020; torchvision.ops.distance_box_iou_loss",
  shape = "boxes",
  policy = "distance_box_iou",
  opts_type = "ploss_box_loss_opts",
  opts_init = "ploss_box_loss_opts_init",
  target = "boxes",
  tensors = B.tensors,
  options = B.options,
  unused_options = { ciou_gradient = true },
  formula = B.common_formula .. [[


With ρ² the squared distance of the centres and c² the squared diagonal of the smallest
box enclosing both:

    ρ² = ((x1 + x2 − X1 − X2)/2)² + ((y1 + y2 − Y1 − Y2)/2)²
    c² = (max(x2, X2) − min(x1, X1))² + (max(y2, Y2) − min(y1, Y1))² + ε
    ℓ  = weight·(1 − IoU + ρ²/c²)]],
  gradient = B.common_gradient,
  notes = B.common_notes,
}
