-- The IoU loss 1 − IoU of predicted boxes against their targets.
local B = require "ploss.losses.box_options"

return {
  name = "box_iou_loss",
  criterion = "IoULoss",
  aliases = { "iou_loss" },
  title = "IoU loss",
  source = "Yu et al., \"UnitBox: An Advanced Object Detection Network\", ACM MM 2016 (the IoU loss); " ..
    "Rezatofighi et al., \"Generalized Intersection over Union\", CVPR 2019 (its 1 − IoU form); " ..
    "the intersection and union of torchvision.ops.generalized_box_iou_loss",
  shape = "boxes",
  policy = "box_iou",
  opts_type = "ploss_box_loss_opts",
  opts_init = "ploss_box_loss_opts_init",
  target = "boxes",
  enums = B.enums,
  tensors = B.tensors,
  options = B.options,
  unused_options = { ciou_gradient = true },
  formula = B.common_formula .. [[


    ℓ = weight·(1 − IoU)]],
  gradient = B.common_gradient,
  notes = B.common_notes,
}
