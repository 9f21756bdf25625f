-- What the per-class soft Dice losses (generalized_soft_dice, batch_soft_dice) share: their
-- options (one C struct, ploss_class_dice_opts), class weights and maths text.  Not a loss:
-- not listed in lua/ploss/losses/init.lua.  The enum is declared by generalized_soft_dice
-- (the first of the two) only.
local dice = {}

dice.enums = {
  { ctype = "ploss_dice_class_weights", prefix = "PLOSS_DICE_WEIGHTS_", count = "PLOSS_DICE_WEIGHTS_COUNT",
    doc = "The class weights w_c of the per-class soft Dice losses.",
    values = {
      { "given", "GIVEN", "the weight tensor, or 1 for every class without one" },
      { "sudre", "SUDRE", "Sudre et al.'s w_c = 1/R_c² with R_c the number of valid pixels of class c in " ..
        "the Dice's group; a class absent from the group takes the largest weight of the present ones " ..
        "(as MONAI's GeneralizedDiceLoss); taken as constants (no gradient)" },
    } },
}

dice.tensors = {
  { name = "weight", kind = "class_vector", what = "weight", nonnegative = true,
    doc = "C class weights w_c (any float dtype, on the input's device); with class_weights = 'given'" },
}

dice.options = {
  { "p", "double", 1, min_exclusive = 0, param = "exponent", doc = "the exponent of s in the denominator" },
  { "smooth", "double", 1, min = 0, doc = "added to the numerator and the denominator" },
  { "ignore_index", "int64", 255, doc = "pixels with this label are left out (see mask_ignored_in_denominator)" },
  { "mask_ignored_in_denominator", "bool", true, param = "mask_ignored",
    doc = "true: ignored pixels leave the denominator too; false: their s^p stays in it, as in pytorch-loss" },
  { "class_weights", "enum", "given", ctype = "ploss_dice_class_weights",
    doc = "the class weights (see the choices above)" },
}

dice.weights_text = [[


Class weights: 'given' takes the weight tensor (1 without one); 'sudre' takes
1/R_c² per group, R_c the group's number of valid pixels of class c.  Those weights are
small (R_c counts pixels), so the default smooth = 1 outweighs the weighted sums at
realistic sizes and flattens the loss: with 'sudre' give a small smooth (MONAI's
GeneralizedDiceLoss uses 1e-5).]]

dice.gradient = [[
With num = 2·Σ_c w_c·A_c + smooth and den = Σ_c w_c·B_c + smooth of the pixel's group,
∂ℓ/∂x = w_c·s(1 − s)·(num·p·s^(p−1)/den² − 2·o/den) (computed as w_c·(num·p·s^p·(1 − s)/den²
− 2·o·s(1 − s)/den), finite for every p > 0); zero at ignored pixels, except the first term
when mask_ignored_in_denominator is false.]]

dice.notes = [[
Labels outside [0, C) that are not ignore_index are an error (INVALID_LABEL).  The
reference's quirk (ignored pixels' probabilities kept in the denominator, pushing them
towards 0) is reproduced only with mask_ignored_in_denominator = false.  A weight tensor
with class_weights = 'sudre' is an error; with 'sudre', a group without any valid pixel has
every weight 0: its loss is 1 − smooth/smooth = 0 (smooth > 0) with a zero gradient.  With
the default mask_ignored_in_denominator = true any group whose pixels are all ignored gives
that 1 − smooth/smooth, whatever its weights (its numerator and denominator are both
smooth): 0 for smooth > 0, so 'mean' over such groups is 0, not NaN; with false the ignored
pixels' probabilities stay in its denominator and it gives 1 − smooth/(Σp^p + smooth).  Weights given as a Lua list must be
finite and >= 0; a weight tensor's values are not checked (CUDA would have to read them on
the host).  With smooth = 0 a group whose pixels are all ignored gives NaN (0/0), with
'sudre' too: 'mean' and 'sum' are NaN then, while its gradient is 0 and the other groups'
stay finite.  An empty batch (N = 0): per sample (generalized_soft_dice) there is no group,
so 'mean' is NaN (the mean of nothing, as in PyTorch), 'sum' 0 and 'none' an empty tensor;
per class (batch_soft_dice) every class is a group without pixels, which gives 0 as above.]]

return dice
