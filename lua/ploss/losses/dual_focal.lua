-- Dual focal loss on the softmax.
return {
  name = "dual_focal",
  criterion = "DualFocalLoss",
  title = "Dual focal loss",
  source = "Hossain, Paplinski, Betts, \"Dual Focal Loss to address class imbalance in semantic " ..
    "segmentation\", Neurocomputing 2021 (arXiv:1909.11932), as read by pytorch-loss Dual_Focal_loss, " ..
    "whose ignore default is 255",
  shape = "rows",
  policy = "dual_focal",
  target = "index",
  state = { name = "lse", components = 1, doc = "the log-sum-exp of each sample" },
  options = {
    { "ignore_index", "int64", -100, doc = "samples with this label add nothing" },
    { "eps", "double", 1e-5, min_exclusive = 0, doc = "ε > 0 inside the logarithm" },
  },
  formula = [[
Per valid sample with label y, p = softmax(x_i) and d_j = p_j − [j = y]:

    ℓ_i = −Σ_j log(1 + ε − d_j²),  evaluated as −Σ_j log(ε + (1 − |d_j|)·(1 + |d_j|))

so each term lies in [−log(1 + ε), −log ε].  'mean' divides by the number of valid samples.]],
  gradient = [[
G_j = 2·d_j/(1 + ε − d_j²), ∂ℓ_i/∂x_ik = p_ik·(G_k − Σ_j p_ij·G_j)  (|G_j| ≤ 2/ε).]],
}
