-- Soft Dice over per-class sigmoid probabilities, the whole batch one Dice.
local dice = require "ploss.losses.class_dice_options"
return {
  name = "batch_soft_dice",
  criterion = "BatchSoftDiceLoss",
  title = "Batch soft Dice loss",
  source = "Milletari, Navab, Ahmadi, \"V-Net\", 3DV 2016; Sudre et al., DLMIA 2017 for " ..
    "class_weights = 'sudre'; pytorch-loss BatchSoftDiceLoss",
  shape = "region",
  policy = "batch_soft_dice",
  target = "index",
  loss_groups = "batch",
  opts_type = "ploss_class_dice_opts",
  tensors = dice.tensors,
  options = dice.options,
  formula = [[
With s = σ(x) per class (a sigmoid, not a softmax), o the one-hot of the labels and, for each
class c, sums over every pixel of the batch

    A_c = Σ s·o                   (valid pixels)
    B_c = Σ (s^p + o)             (valid pixels; also the ignored ones when
                                   mask_ignored_in_denominator is false)
    ℓ   = 1 − (2·Σ_c w_c·A_c + smooth) / (Σ_c w_c·B_c + smooth)

with w_c the class weights: one value for the batch ('none' gives it as shape [1]; 'mean'
and 'sum' give it as it is).]] .. dice.weights_text,
  gradient = dice.gradient,
  notes = dice.notes,
}
