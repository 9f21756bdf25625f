-- The combined angular margin softmax loss of InsightFace: a softmax cross-entropy over the
-- scaled cosines between normalised embeddings and normalised class centres, with the
-- target's cosine replaced by cos(m1·θ + m2) − m3.  AM-softmax (CosFace) and ArcFace are
-- its special cases and share its engines.
local M = require "ploss.losses.margin_text"
return {
  name = "combined_margin",
  criterion = "CombinedMarginLoss",
  title = "Combined margin softmax loss",
  source = "Deng, Guo, Xue and Zafeiriou, ArcFace: Additive Angular Margin Loss for Deep Face " ..
    "Recognition, CVPR 2019 (the combined margin m1, m2, m3, for any combination of them; " ..
    "InsightFace's CombinedMarginLoss matches only m1 = 1 with m3 = 0 (ArcFace) or m1 = 1, m2 = 0, m3 > 0 " ..
    "(CosFace: its m3 > 0 branch ignores m1 and m2) and refuses the rest); " ..
    "Wang et al., CosFace, CVPR 2018; Liu et al., SphereFace, CVPR 2017 (m1)",
  shape = "margin",
  policy = "combined_margin",
  target = "class_labels",
  min_classes = 2,
  min_classes_why = "a softmax over one class centre has nothing to separate",
  inputs = M.inputs(),
  enums = M.enums,
  options = {
    { "s", "double", 64, min_exclusive = 0, max = 1e30, param = "margin_scale",
      doc = "s > 0, the scale of the cosines (at most 1e30: s·cos stays within fp32's range)" },
    { "m1", "double", 1, min = 1, max = 4, param = "margin_m1", doc = "the multiplicative angular margin (SphereFace)" },
    { "m2", "double", 0.5, min = 0, max = M.half_pi, param = "margin_m2",
      doc = "the additive angular margin (ArcFace), in radians" },
    { "m3", "double", 0, min = 0, max = 1, param = "margin_m3", doc = "the additive cosine margin (CosFace)" },
    { "easy_margin", "bool", false, doc = "no angular margin where cos θ <= 0: the target takes cos θ − m3 there" },
    M.weight_layout, M.ignore_index, M.tile_rows, M.sample_rate, M.seed, M.comm, M.scale_grad_x_by_ranks,
  },
  formula = M.formula("cos(m1·θ + m2) − m3", "m1·θ + m2 > π",
    "cos θ − m2·sin m2 − m3 for m1 = 1 (InsightFace's fallback) and, for m1 > 1, the line " ..
    "cos θ − cos θ_t − 1 − m3 through the minimum −1 − m3 at θ_t = (π − m2)/m1 (with easy_margin too, " ..
    "where cos θ > 0)", "cos θ − m3"),
  gradient = M.gradient(M.angular_dphi("m1·", "m2")),
  check = M.check,
  notes = M.notes,
}
