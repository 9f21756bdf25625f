-- Margin ranking loss between two score tensors and a ±1 ordering, with PyTorch's
-- MarginRankingLoss semantics; both scores get a gradient.
return {
  name = "margin_ranking_loss",
  criterion = "MarginRankingLoss",
  criterion_aliases = { "MarginRankingCriterion" },
  title = "Margin ranking loss",
  source = "PyTorch torch.nn.MarginRankingLoss / torch.nn.functional.margin_ranking_loss; " ..
    "Torch7 nn.MarginRankingCriterion",
  shape = "pairs",
  policy = "margin_ranking",
  target = "signs",
  input_layout = "elementwise",
  inputs = {
    { "input1", "x1, the first scores" },
    { "input2", "x2, the second scores, x1's shape" },
  },
  input_doc = "any shape (rank 0..8, typically N), f32/f16/bf16/f64, any strides; both inputs " ..
    "of the same dtype and shape (no broadcasting).",
  target_doc = "y, x1's shape: 1 (x1 should rank higher) or −1 (x2 should), any float dtype or " ..
    "i64/i32; other values are used as they are, as PyTorch (which does not check them).",
  options = {
    { "margin", "double", 0, param = "margin", doc = "m, the margin of the hinge" },
  },
  formula = [[
Elementwise, with u = −y·(x1 − x2) + m:

    ℓ = max(0, u)

as PyTorch's (−y·(x1 − x2) + m).clamp_min(0): a NaN u gives a NaN loss.  'mean' divides by
the element count.]],
  gradient = [[
With c = [u >= 0] (c = 0 where u is NaN; at the kink u = 0 the gradient passes, as PyTorch
2.11's clamp_min lets it, where 2.15's gives 0): ∂ℓ/∂x1 = −y·c, ∂ℓ/∂x2 = y·c, each times the upstream gradient (whose value is not
read where c = 0, as autograd's where).  A NaN y gives NaN gradients; a NaN x1 or x2 with
a finite y gives zeros.]],
  notes = [[
The inputs and the target must have one shape: PyTorch checks only that their ranks agree
and broadcasts; broadcasting is refused here (SHAPE naming the tensor), but for the Lua
criterion's number y (Torch7's form), which labels every pair.  Both backends
compute each element in f64, so CPU and CUDA agree; the loss is f32 (f64 for f64 input).  No
state is kept.]],
}
