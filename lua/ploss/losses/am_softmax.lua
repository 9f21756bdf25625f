-- Additive margin softmax (AM-softmax, CosFace): the combined margin loss with m1 = 1,
-- m2 = 0 and m3 = m.
local M = require "ploss.losses.margin_text"
return {
  name = "am_softmax",
  criterion = "AMSoftmaxLoss",
  aliases = { "cos_face" },
  criterion_aliases = { "CosFaceLoss" },
  title = "Additive margin softmax loss (AM-softmax, CosFace)",
  source = "Wang, Cheng, Liu and Liu, Additive Margin Softmax for Face Verification, IEEE Signal " ..
    "Processing Letters 2018; Wang et al., CosFace: Large Margin Cosine Loss for Deep Face " ..
    "Recognition, CVPR 2018; pytorch-loss AMSoftmax",
  shape = "margin",
  policy = "am_softmax",
  target = "class_labels",
  min_classes = 2,
  min_classes_why = "a softmax over one class centre has nothing to separate",
  inputs = M.inputs(),
  options = {
    { "s", "double", 30, min_exclusive = 0, max = 1e30, param = "margin_scale",
      doc = "s > 0, the scale of the cosines (at most 1e30: s·cos stays within fp32's range)" },
    { "m", "double", 0.35, min = 0, max = 1, param = "margin_m3", doc = "the margin subtracted from the target's cosine" },
    M.weight_layout, M.ignore_index, M.tile_rows, M.sample_rate, M.seed, M.comm, M.scale_grad_x_by_ranks,
  },
  formula = M.formula("cos θ − m", nil, nil),
  gradient = M.gradient("φ′ = 1: the margin only shifts the target's cosine."),
  check = M.check,
  notes = M.notes .. [[

CosFaceLoss is this criterion under CosFace's name, with AM-softmax's defaults (s = 30,
m = 0.35); InsightFace trains CosFace with s = 64, m = 0.4: give them.]],
}
