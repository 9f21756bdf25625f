-- Triplet loss with batch-hard mining (Hermans, Beyer and Leibe): for every anchor of the
-- batch, the farthest positive and the nearest negative.
return {
  name = "batch_hard_triplet",
  criterion = "BatchHardTripletLoss",
  title = "Batch-hard triplet loss",
  source = "Hermans, Beyer and Leibe, In Defense of the Triplet Loss for Person " ..
    "Re-Identification, arXiv:1703.07737 (batch hard, soft margin)",
  shape = "pairs",
  policy = "batch_hard_triplet",
  target = "labels",
  inputs = { { "embeddings", "x, N×D embeddings, row i labelled labels[i]" } },
  enums = {
    { ctype = "ploss_pair_distance", prefix = "PLOSS_PAIR_DISTANCE_", count = "PLOSS_PAIR_DISTANCE_COUNT",
      doc = "The distance between two embeddings.",
      values = {
        { "euclidean", "EUCLIDEAN", "d(u, v) = ‖u − v‖₂" },
        { "squared", "SQUARED", "d(u, v) = ‖u − v‖₂²" },
        { "cosine", "COSINE", "d(u, v) = 1 − u·v / (max(‖u‖, 1e-8)·max(‖v‖, 1e-8))" },
      } },
  },
  options = {
    { "margin", "double", 0.3, doc = "μ, the margin of the hinge (with soft_margin any value but the default 0.3 is refused)",
      type_hint = "the soft margin, pytorch-loss's margin = None, is soft_margin = true", },
    { "soft_margin", "bool", false,
      doc = "softplus(d_ap − d_an) in place of the hinge (the paper's soft margin, margin = None)" },
    { "distance", "enum", "euclidean", ctype = "ploss_pair_distance", doc = "the distance (see below)" },
  },
  -- the soft margin has no margin: one given with it is refused (a softplus with a margin
  -- inside, as some implementations have, would otherwise be silently another loss)
  check = function(o)
    if o.soft_margin and o.margin ~= 0.3 then
      return string.format("opts.margin: %s with soft_margin = true (the soft margin softplus(d_ap − d_an) " ..
        "has no margin: leave it out)", require("ploss.description").number(o.margin))
    end
  end,
  formula = [[
For each anchor i, over the other rows j of the batch:

    d_ap(i) = max_{j ≠ i, y_j = y_i} d(x_i, x_j)     (the hardest positive)
    d_an(i) = min_{y_j ≠ y_i} d(x_i, x_j)            (the hardest negative)
    ℓ_i = max(0, d_ap − d_an + μ)   or (soft_margin)   softplus(d_ap − d_an)

An anchor without a positive (its label unique in the batch) or without a negative (one
label in the batch) is inactive: ℓ_i = 0 and no gradient.  'mean' divides by the number of
active anchors; with none active the loss is 0 and the gradient 0 (not a division by zero).
Ties pick the lowest row index.  NaN propagates as through torch.max and torch.min: a NaN
distance is the hardest positive and the hardest negative, so one NaN element in row k makes
ℓ_i NaN for every active anchor i (each compares against row k, as a positive or a negative),
their gradients NaN, and 'mean' and 'sum' NaN; rows no anchor mined keep a 0 gradient.  An
infinite element is mined at its distance ∞ (the farthest positive, never the nearest
negative while a finite one exists), so anchors that do not mine it keep their values.  The N×N distances are computed in row blocks as a matrix
product (‖x_i‖² + ‖x_j‖² − 2·x_i·x_j, or the cosine of the normalised product) and mined
block by block, never all stored; with bf16 on a compute capability 9.0 device the mining
runs in the product's epilogue and the distances never reach memory at all (a few hundred
bytes a row of workspace at N = 4096); the two chosen distances of each anchor are then
recomputed from the rows themselves (no cancellation, exactly 0 for identical rows).]],
  gradient = "With c_i = [d_ap − d_an + μ ≥ 0] (hinge) or σ(d_ap − d_an) (soft margin), ℓ_i " ..
    "sends c_i·∂d(x_i, x_p)/∂· to the anchor and its hardest positive p and −c_i·∂d(x_i, x_n)/∂· " ..
    "to the anchor and its hardest negative n (the mining itself is not differentiated, as in " ..
    "autograd); a row collects the terms of every anchor that chose it, added in anchor order.  " ..
    "∂‖u − v‖/∂u = (u − v)/‖u − v‖, 0 at u = v; ∂‖u − v‖²/∂u = 2(u − v); the cosine distance's " ..
    "gradient is that of the normalised product.",
  notes = [[
Labels are any integers (i64 or i32): rows with equal labels are one class.  In Lua the soft
margin is soft_margin = true (a table cannot hold margin = nil apart from the default).  The
CPU computes the distance blocks in f64 (OpenBLAS); CUDA computes them in fp32 (f64 for f64
input; bf16 on compute capability 9.0 ranks the fp32 distances, ties to fp32's rounding
going to the lowest index), so two nearly tied candidates may be mined differently on the
two devices.  No state is kept: backward mines again.]],
}
