--- The losses of ploss, one description each (lua/ploss/losses/<name>.lua), in the order
-- of the public header and of docs/losses.md.  A description is data: see
-- lua/ploss/description.lua for its fields.  Adding a loss adds its name here.
return {
  "cross_entropy",
  "binary_cross_entropy_with_logits",
  "sigmoid_focal",
  "softmax_focal",
  "dual_focal",
  "large_margin_softmax",
  "taylor_cross_entropy",
  "pc_softmax_cross_entropy",
  "ohem_cross_entropy",
  "ohem_large_margin",
  "triplet_margin",
  "batch_hard_triplet",
  "info_nce",
  "box_iou_loss",
  "generalized_box_iou_loss",
  "distance_box_iou_loss",
  "complete_box_iou_loss",
  "combined_margin",
  "am_softmax",
  "arc_face",
}
