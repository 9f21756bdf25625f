-- Fused linear + cross-entropy: the loss of a language-model head (hidden states times the
-- vocabulary's weight, then a softmax cross-entropy over the vocabulary) computed in tiles
-- of rows, so the BT×V logits are never all stored; the gradients of the hidden states and
-- of the weight (and of an optional bias) come from the same pass, which can also return
-- each token's log-sum-exp and softmax entropy (what RL losses use).
local M = require "ploss.losses.margin_text"
return {
  name = "linear_cross_entropy",
  criterion = "LinearCrossEntropyLoss",
  title = "Fused linear + cross-entropy (a language-model head without its logits)",
  source = "Wijmans et al., Cut Your Losses in Large-Vocabulary Language Models, ICLR 2025; " ..
    "Hsu et al., Liger Kernel, 2024 (the chunked fused linear cross-entropy); PyTorch's " ..
    "F.linear + F.cross_entropy (label_smoothing); Chowdhery et al., PaLM, 2022 (z-loss); " ..
    "Gemma 2 (final-logit soft-capping); Lin et al., ICCV 2017 (the focal policy)",
  shape = "margin",
  policy = "linear_cross_entropy",
  target = "class_labels",
  min_classes = 2,
  min_classes_why = "a softmax over one class has nothing to separate",
  inputs = {
    { "hidden", "BT×H hidden states, one row per token" },
    { "weight", "V×H output projection, one row per vocabulary entry (nn.Linear's weight; H×V with " ..
      "weight_layout 'DxC')" },
  },
  tensors = {
    { name = "bias", kind = "class_vector", what = "bias", grad = true,
      doc = "V values (V = C, the classes) added to every token's logits before the softcap (nn.Linear's bias): the input dtype " ..
        "or f32 (a list: f32, f64 for f64 inputs); its gradient grad_bias (the same dtype) is the sum over " ..
        "the tokens of ∂L/∂z" },
  },
  enums = {
    { ctype = "ploss_linear_policy", prefix = "PLOSS_LINEAR_POLICY_", count = "PLOSS_LINEAR_POLICY_COUNT",
      doc = "The softmax-row loss the fused linear + loss takes of each row's logits.",
      values = {
        { "cross_entropy", "CROSS_ENTROPY", "the cross-entropy (with label smoothing)" },
        { "focal", "FOCAL", "the softmax focal loss (Lin et al.): −(1 − p_y)^γ·log p_y" },
      } },
  },
  outputs = {
    { "lse", "each token's log-sum-exp of its logits lse_i (after bias and softcap)" },
    { "entropy", "each token's softmax entropy H_i = lse_i − Σ_j p_ij·z_ij" },
  },
  input_doc = "f32/f16/bf16/f64 (f64 on the CPU only), any strides; hidden and weight of one dtype and " ..
    "one H.",
  options = {
    M.ignore_index,
    { "policy", "enum", "cross_entropy", ctype = "ploss_linear_policy", param = "linear_policy",
      doc = "the loss of each row's logits: 'cross_entropy' or 'focal' (the softmax focal loss)" },
    { "gamma", "double", 2, min = 0,
      doc = "γ ≥ 0, focal's focusing exponent (0 gives the cross-entropy); another value than 2 only with policy = 'focal'" },
    { "label_smoothing", "double", 0, min = 0, max = 1,
      doc = "ε: the target is (1 − ε)·one-hot + ε/V (PyTorch's label_smoothing; cross_entropy only)" },
    { "softcap", "double", 0, min = 1e-20, or_zero = true,
      doc = "c > 0 caps every logit to c·tanh(z/c) before the softmax (Gemma 2); 0: no cap.  Caps below " ..
        "1e-20 are refused: the fp32 tile holding c·tanh(·) and 1/c would lose the gradient's factor 1 − tanh²" },
    { "z_loss", "double", 0, min = 0, doc = "adds z_loss·lse² per token (PaLM's auxiliary loss)" },
    { "accumulate", "bool", false, grads = { "grad_weight", "grad_bias" },
      doc = "add the weight's (and the bias's) gradient into grad_weight (grad_bias) instead of overwriting it " ..
        "(gradient accumulation)" },
    { "weight_layout", "enum", "CxD", ctype = "ploss_weight_layout",
      doc = "how weight lies: 'CxD' (V×H, one row per vocabulary entry) or 'DxC' (H×V)" },
    { "tile_rows", "int64", 0, min = 0,
      doc = "rows of the logit tile computed at a time (0: chosen within 512 MiB of logits)" },
  },
  check = function(o)
    if o.policy == "focal" and o.label_smoothing ~= 0 then
      return string.format("opts.label_smoothing: %s with policy 'focal' (smoothing is the cross-entropy's; " ..
        "0 with focal)", require("ploss.description").number(o.label_smoothing))
    end
    if o.policy ~= "focal" and o.gamma ~= 2 then
      return string.format("opts.gamma: %s with policy 'cross_entropy' (γ is the focal policy's: policy = 'focal')",
        require("ploss.description").number(o.gamma))
    end
  end,
  formula = [[
With z_ij = h_i·w_j + b_j (b = 0 without bias; softcap c > 0: z_ij = c·tanh((h_i·w_j + b_j) / c)),
lse_i = log Σ_j e^(z_ij), p_ij = e^(z_ij − lse_i) and label y_i:

    cross_entropy:  ℓ_i = (1 − ε)·(lse_i − z_iy) + (ε/V)·Σ_j (lse_i − z_ij) + z_loss·lse_i²
    focal:          ℓ_i = −(1 − p_iy)^γ·log p_iy + z_loss·lse_i²

Rows whose label is ignore_index add nothing; 'mean' divides by the rows that are not
ignored.  The logits are computed tile by tile (a matrix product per tile of rows) and turned
into their gradient in place; the BT×V logits are never all stored.]],
  gradient = "With ω_i the row's upstream factor, G_ij = ω_i·(p_ij·(1 + 2·z_loss·lse_i) − (1 − ε)·[j = y_i] − " ..
    "ε/V) for cross_entropy and G_ij = ω_i·(F_i·(p_ij − [j = y_i]) + 2·z_loss·lse_i·p_ij) for focal, where " ..
    "F_i = u^γ·(1 + γ·p_iy·L/u) with u = 1 − p_iy and L = −log p_iy (L/u → 1 as u → 0), each times " ..
    "1 − (z_ij/c)² with a softcap; then " ..
    "∂L/∂hidden = G·W, ∂L/∂weight = Gᵀ·H and ∂L/∂bias = Σ_i G_i (the last two added to grad_weight and " ..
    "grad_bias with accumulate), accumulated tile by tile.  Ignored rows get a zero gradient.",
  target_doc = "one class index per row of hidden (a token): shape BT, i64 or i32, values in [0, V) or " ..
    "ignore_index.",
  notes = [[
Called as crit(hidden, weight, labels): both get a gradient.  A bias is a tensor option, as
the class weights of the other criteria are (ploss.LinearCrossEntropyLoss{bias = b}, crit.bias
= b, or opts.bias of ploss.F): the calls then return grad_bias after grad_weight.  To have a
gradient written into a tensor of yours, set the criterion's field of its name
(crit.grad_weight = t, of weight's shape; crit.grad_hidden and crit.grad_bias likewise) or
pass it to ploss.F.linear_cross_entropy_fused / _backward as the option grad_weight /
grad_hidden / grad_bias; with accumulate the weight's and the bias's gradients are added to
those tensors (to the criterion's own buffers when none is given: then they sum over calls
until you zero them), as a loop of gradient accumulation needs.  return_lse = true and
return_entropy = true make forward and the fused call also return each token's lse_i and
entropy H_i (BT values, f32; f64 for f64 inputs; 0 at ignored rows; of the logits with the
bias and the softcap, their values leaving out the z-loss and the smoothing, which may be on;
not differentiated), as Cut Cross-Entropy's return_lse
and the entropy of RL trainers: loss, [grad_hidden, grad_weight, [grad_bias],] [lse,]
[entropy].  The gradients may be f32 tensors for f16/bf16 inputs (a
mixed-precision step's), accumulated unrounded.  No gradient filtering: every softmax
entry counts.  An ignored row adds nothing to the loss and gets a zero gradient, but a
non-finite hidden state in it still reaches grad_weight through the product (0·NaN is NaN),
as in PyTorch's composite.  The softcap caps the bias with the product: a bias of −∞ becomes
the logit −c there, not a masked class (mask a padded vocabulary with the bias only without
softcap, or leave the padded rows out of the weight).  Nor does such a mask combine with
label_smoothing: the smoothing term averages lse − z over every class, the masked ones
included, so the loss is +∞ (the gradient stays finite), as in PyTorch's composite; leave
the padded rows out of the weight there.  CUDA: the logit tile is computed by cuBLAS in the inputs' dtype (fp32
accumulation; bf16/f16 logits, as F.linear gives them), the row engine turns it into its
gradient in place (fp32 row statistics), and the two gradient products read it; a 16-bit
weight gradient is rounded to its dtype once per tile of rows there, except its label
entries (the gradient at each row's label), which are kept out of the tiles and added per
class in fp32 at the end, so that a class's large label term does not swallow the later
tiles' small softmax terms (f32 gradients do not round; the CPU sums the tiles in f32 and
rounds once).  A bias is added to the tile in
place (with the softcap, one pass) and its gradient is a product of the gradient tile with a
vector of ones (fp32, summed over the tiles unrounded).  The workspace is the tile (at most
512 MiB by default) plus O(BT + V), and with a 16-bit weight gradient over several tiles
the label entries' partial sums (2·⌈BT/64⌉·H floats: 8 MiB at BT 16384, H 4096); inputs and outputs whose rows are not contiguous are staged through copies.
When V is not a multiple of 8 (16 bytes: cuBLAS is several times slower on such products)
the products take the first classes up to a multiple of 8 from the weight and the last few
from a copy of their rows padded with zeros (∂hidden adds their part: one more rounding of
a 16-bit gradient).  CUDA takes up to 2^24 classes; f64 is CPU only.  The CPU multiplies
in f32 (f64 for f64 inputs) with OpenBLAS and takes each row's softmax in f64.  hidden is
BT×H: flatten a B×T×H batch (and its B×T labels) first.  No state is kept: backward
recomputes the tiles.]],
}
