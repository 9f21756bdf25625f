-- ArcFace: the combined margin loss with m1 = 1, m2 = m and m3 = 0.
local M = require "ploss.losses.margin_text"
return {
  name = "arc_face",
  criterion = "ArcFaceLoss",
  title = "Additive angular margin softmax loss (ArcFace)",
  source = "Deng, Guo, Xue and Zafeiriou, ArcFace: Additive Angular Margin Loss for Deep Face " ..
    "Recognition, CVPR 2019; InsightFace's ArcFace (its threshold, fallback and easy margin)",
  shape = "margin",
  policy = "arc_face",
  target = "class_labels",
  min_classes = 2,
  min_classes_why = "a softmax over one class centre has nothing to separate",
  inputs = M.inputs(),
  options = {
    { "s", "double", 64, min_exclusive = 0, max = 1e30, param = "margin_scale",
      doc = "s > 0, the scale of the cosines (at most 1e30: s·cos stays within fp32's range)" },
    { "m", "double", 0.5, min = 0, max = M.half_pi, param = "margin_m2",
      doc = "the additive angular margin, in radians" },
    { "easy_margin", "bool", false, doc = "no angular margin where cos θ <= 0: the target takes cos θ there" },
    M.weight_layout, M.ignore_index, M.tile_rows, M.sample_rate, M.seed, M.comm, M.scale_grad_x_by_ranks,
  },
  formula = M.formula("cos(θ + m)", "θ + m > π", "cos θ − m·sin m (InsightFace's fallback)", "cos θ"),
  gradient = M.gradient(M.angular_dphi("", "m")),
  check = M.check,
  notes = M.notes,
}
