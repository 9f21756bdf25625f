-- Online hard example mining over the samples of the batch, then cross-entropy.
local ohem_options = require "ploss.losses.ohem_options"

return {
  name = "ohem_cross_entropy",
  criterion = "OhemCrossEntropyLoss",
  title = "OHEM cross-entropy",
  source = "A. Shrivastava, A. Gupta, R. Girshick, \"Training Region-based Object Detectors with " ..
    "Online Hard Example Mining\", CVPR 2016; the probability-threshold variant of real-time " ..
    "segmentation code (pytorch-loss OhemCELoss)",
  shape = "rows",
  policy = "ohem_cross_entropy",
  opts_type = "ploss_ohem_opts",
  target = "index",
  options = ohem_options,
  unused_options = { lam = true },
  formula = [[
The score of a valid sample is its softmax probability of the label, s = p_y, rounded to
f32; ignored samples sort after every score, and a NaN score (a NaN or infinite logit) before
every score: it is the hardest, always kept, so the loss is NaN as the plain cross-entropy's
(the reference's threshold drops it, its top-k keeps it).  With s_(r) the r-th smallest score
of all M samples, the kept set is

    K = {valid i : s_i ≤ max(τ, s_(n_min))}

(τ alone when n_min = 0; every valid sample when n_min ≥ M).  Every sample tied with the
n_min-th score is kept.  Then ℓ_i = lse_i − x_{i,y_i} over K: 'mean' divides by |K| (NaN when
K is empty), 'none' gives 0 where a sample is not kept.  The threshold is found on the device
by a radix select over the 32-bit keys of the scores, without a sort or a host round trip.]],
  gradient = [[
p_k − [k = y] on the kept samples (the selection is a constant), zero elsewhere; the mining
is recomputed by the backward pass (no state is kept).]],
}
