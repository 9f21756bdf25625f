-- Online hard example mining, then the large-margin softmax loss.
return {
  name = "ohem_large_margin",
  criterion = "OhemLargeMarginLoss",
  title = "OHEM large-margin softmax",
  source = "the mining of OhemCrossEntropyLoss, then Kobayashi's large-margin softmax loss " ..
    "(pytorch-loss OhemLargeMarginLoss)",
  shape = "rows",
  policy = "ohem_large_margin",
  opts_type = "ploss_ohem_opts",
  target = "index",
  min_classes = 2,
  min_classes_why = "the large-margin regulariser needs a non-target class",
  options = require "ploss.losses.ohem_options",
  formula = [[
The mining of ohem_cross_entropy on the plain softmax score p_y, then the loss of
large_margin_softmax (λ = lam) over the kept samples.]],
  gradient = "The large-margin gradient on the kept samples, zero elsewhere; no state is kept.",
}
