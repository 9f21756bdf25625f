-- Binary soft Dice over sigmoid probabilities, the whole input (or each sample) one Dice.
return {
  name = "soft_dice",
  criterion = "SoftDiceLoss",
  title = "Soft Dice loss (binary)",
  source = "Milletari, Navab, Ahmadi, \"V-Net: Fully Convolutional Neural Networks for Volumetric Medical " ..
    "Image Segmentation\", 3DV 2016; pytorch-loss SoftDiceLossV1–V3",
  shape = "region",
  policy = "soft_dice",
  target = "elementwise",
  loss_groups = "sample_or_batch",
  options = {
    { "p", "double", 1, min_exclusive = 0, param = "exponent", doc = "the exponent of s and y in the denominator" },
    { "smooth", "double", 1, min = 0, doc = "added to the numerator and the denominator" },
    { "per_sample", "bool", false, param = "per_image",
      doc = "one Dice per sample (along the first dim) rather than one for the whole input" },
  },
  formula = [[
With s = σ(x) and y the target (0/1 or soft labels), over the elements of a group (the whole
input, or one sample with per_sample)

    A = Σ s·y,   B = Σ (s^p + y^p),   ℓ = 1 − (2A + smooth) / (B + smooth)

'mean' averages the groups' losses, 'sum' adds them, 'none' gives them: shape [N] with
per_sample, else [1].]],
  gradient = [[
With num = 2A + smooth and den = B + smooth of the element's group,
∂ℓ/∂x = s(1 − s)·(num·p·s^(p−1)/den² − 2y/den), computed as num·p·s^p·(1 − s)/den² −
2y·s(1 − s)/den (finite for every p > 0).]],
  notes = [[
Unlike the reference's third version, the labels are raised to p in the denominator and
every group gets its gradient whatever its size.  An empty group gives 0 with smooth > 0
(NaN with smooth = 0); with per_sample an empty batch has no group: 'mean' is NaN (the
mean of nothing, as in PyTorch), 'sum' 0 and 'none' an empty tensor; a 0-d input is one
sample of one element.  Targets are not checked: y^p of a negative target is NaN for a
non-integer p.]],
}
