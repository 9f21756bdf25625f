-- Generalized soft Dice over per-class sigmoid probabilities, one Dice per sample.
local dice = require "ploss.losses.class_dice_options"
return {
  name = "generalized_soft_dice",
  criterion = "GeneralizedSoftDiceLoss",
  title = "Generalized soft Dice loss (per sample)",
  source = "Sudre, Li, Vercauteren, Ourselin, Cardoso, \"Generalised Dice overlap as a deep learning loss " ..
    "function for highly unbalanced segmentations\", DLMIA 2017 (class_weights = 'sudre'); the soft " ..
    "Dice of Milletari, Navab, Ahmadi, \"V-Net\", 3DV 2016; pytorch-loss GeneralizedSoftDiceLoss",
  shape = "region",
  policy = "generalized_soft_dice",
  target = "index",
  loss_groups = "sample",
  opts_type = "ploss_class_dice_opts",
  tensors = dice.tensors,
  enums = dice.enums,
  options = dice.options,
  formula = [[
With s = σ(x) per class (a sigmoid, not a softmax), o the one-hot of the labels and, for each
sample n and class c, sums over the pixels of the sample

    A_nc = Σ s·o                  (valid pixels)
    B_nc = Σ (s^p + o)            (valid pixels; also the ignored ones when
                                   mask_ignored_in_denominator is false)
    ℓ_n  = 1 − (2·Σ_c w_c·A_nc + smooth) / (Σ_c w_c·B_nc + smooth)

with w_c the class weights.  'mean' averages ℓ_n over the samples, 'sum' adds them, 'none'
gives ℓ_n (shape [N]).]] .. dice.weights_text,
  gradient = dice.gradient,
  notes = dice.notes,
}
