-- The GIoU loss: IoU penalised by the empty part of the smallest enclosing box.
local B = require "ploss.losses.box_options"

return {
  name = "generalized_box_iou_loss",
  criterion = "GIoULoss",
  aliases = { "giou_loss" },
  title = "Generalized IoU loss",
  source = "Rezatofighi et al., \"Generalized Intersection over Union: A Metric and a Loss for Bounding " ..
    "Box Regression\", CVPR 2019; torchvision.ops.generalized_box_iou_loss",
  shape = "boxes",
  policy = "generalized_box_iou",
  opts_type = "ploss_box_loss_opts",
  opts_init = "ploss_box_loss_opts_init",
  target = "boxes",
  tensors = B.tensors,
  options = B.options,
  unused_options = { ciou_gradient = true },
  formula = B.common_formula .. [[


With A_C = (max(x2, X2) − min(x1, X1))·(max(y2, Y2) − min(y1, Y1)), the area of the
smallest box enclosing both:

    ℓ = weight·(1 − IoU + (A_C − U)/(A_C + ε))]],
  gradient = B.common_gradient,
  notes = B.common_notes,
}
