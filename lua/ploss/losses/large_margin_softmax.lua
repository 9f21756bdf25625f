-- Large-margin softmax loss (Kobayashi's regulariser on the non-target softmax).
return {
  name = "large_margin_softmax",
  criterion = "LargeMarginSoftmaxLoss",
  title = "Large-margin softmax",
  source = "T. Kobayashi, \"Large Margin In Softmax Cross-Entropy Loss\", BMVC 2019; pytorch-loss " ..
    "LargeMarginSoftmaxV1–V3 (whose ignore default is 255; ploss keeps PyTorch's -100)",
  shape = "rows",
  policy = "large_margin",
  opts_type = "ploss_large_margin_opts",
  target = "index",
  min_classes = 2,
  min_classes_why = "the large-margin regulariser needs a non-target class",
  state = { name = "state", components = 3,
            doc = "three values per sample: lse, the log-sum-exp over the non-target classes, and E" },
  options = {
    { "ignore_index", "int64", -100, doc = "samples with this label add nothing" },
    { "lam", "double", 0.3, min = 0, doc = "λ ≥ 0, the weight of the regulariser" },
  },
  formula = [[
Cross-entropy plus a regulariser that pushes the softmax over the non-target classes towards
uniform.  Per valid sample with label y, 𝒩 = {j ≠ y}, u = 1/(C − 1), q the softmax over 𝒩:

    ℓ = (lse − x_y) + (λ/2)·Σ_{j∈𝒩} (q_j − u)·log q_j
      = (lse − x_y) + (λ/2)·(E − u·Σ_{j∈𝒩} x_j),   E = Σ_{j∈𝒩} q_j·x_j

'mean' divides by the number of valid samples.  The sums over all classes and over 𝒩 keep
separate maxima, so a target logit far above the others stays finite.  'none' gives the
target's shape with zeros at ignored samples (pytorch-loss V3, not V1/V2's compacted vector).
A non-target logit of −∞ (a masked class) makes the regulariser −u·log q_j = +∞, so the
loss is +∞; its gradient there is not specified (the CPU gives the gradient formula's finite
limit as x_j → −∞, CUDA's paths are not checked on it): mask a class by leaving it out of
the logits instead.]],
  gradient = "∂ℓ/∂x_y = p_y − 1, ∂ℓ/∂x_j = p_j + (λ/2)·(q_j·(x_j − E + 1) − u) for j ∈ 𝒩.",
}
