-- Triplet margin loss on given (anchor, positive, negative) triplets, with PyTorch's
-- TripletMarginLoss semantics, and its soft-margin form.
return {
  name = "triplet_margin",
  criterion = "TripletMarginLoss",
  title = "Triplet margin loss",
  source = "Schroff, Kalenichenko and Philbin, FaceNet, CVPR 2015; PyTorch " ..
    "torch.nn.functional.triplet_margin_loss; the soft margin of Hermans, Beyer and Leibe, In " ..
    "Defense of the Triplet Loss for Person Re-Identification, arXiv:1703.07737",
  shape = "pairs",
  policy = "triplet_margin",
  target = "none",
  input_layout = "rows_or_vector",
  inputs = {
    { "anchor", "a, N×D embeddings (or one embedding of D values)" },
    { "positive", "p, a's shape: embeddings of the anchors' class" },
    { "negative", "n, a's shape: embeddings of other classes" },
  },
  input_doc = "N×D, or D for one triplet (PyTorch's unbatched form: its 'none' loss is 0-d), " ..
    "f32/f16/bf16/f64, any strides; the three inputs of one dtype and shape.",
  options = {
    { "margin", "double", 1, range = "a finite number (> 0 without soft_margin; 1, the default, with it)",
      type_hint = "the soft margin, pytorch-loss's margin = None, is soft_margin = true",
      doc = "μ, the margin of the hinge (with soft_margin any value but the default is refused; PyTorch also refuses μ <= 0)" },
    { "p", "double", 2, min = 1, param = "p_norm", doc = "the p of the p-norm distance" },
    { "eps", "double", 1e-6, min = 0, doc = "added to every difference before its norm, as PyTorch" },
    { "swap", "bool", false, doc = "the distance swap: d_an becomes min(d_an, d_pn)" },
    { "soft_margin", "bool", false,
      doc = "softplus(d_ap − d_an) in place of the hinge (pytorch-loss's TripletLoss with margin = None)" },
  },
  -- PyTorch's TripletMarginLoss refuses a margin <= 0; the soft margin has none, and a
  -- margin given with it is refused (some soft-margin triplet losses add one inside the
  -- softplus: taken without a word, it would be a silently different loss)
  check = function(o)
    if o.soft_margin and o.margin ~= 1 then
      return string.format("opts.margin: %s with soft_margin = true (the soft margin softplus(d_ap − d_an) " ..
        "has no margin: leave it out)", require("ploss.description").number(o.margin))
    end
    if not o.soft_margin and not (o.margin > 0) then
      return string.format("opts.margin: %s is not > 0 (the hinge's margin; soft_margin = true has none)",
        require("ploss.description").number(o.margin))
    end
  end,
  formula = [[
Per triplet i, with the p-norm distance d(u, v) = ‖u − v + ε‖_p (ε added to every
component, as PyTorch's pairwise_distance):

    d_ap = d(a_i, p_i),   d_an = d(a_i, n_i)   (swap: d_an = min(d(a_i, n_i), d(p_i, n_i)))
    ℓ_i = max(0, d_ap − d_an + μ)              (hinge)
    ℓ_i = softplus(d_ap − d_an)                (soft_margin; softplus(z) = max(z, 0) + log1p(e^−|z|))

'mean' divides by N.  The soft margin is evaluated in the stable form, so a gap
d_ap − d_an of hundreds gives that gap as the loss and a gradient of ±1, where
log(1 + exp(·)) would overflow.]],
  gradient = "With c = [d_ap − d_an + μ ≥ 0] (hinge) or σ(d_ap − d_an) (soft margin) and " ..
    "∂d(u, v)/∂u = sign(z)·|z|^(p−1) / d^(p−1), z = u − v + ε: ∂ℓ/∂a = c·(∂d_ap/∂a − ∂d_an/∂a), " ..
    "∂ℓ/∂p = c·∂d_ap/∂p, ∂ℓ/∂n = −c·∂d_an/∂n; with swap, when d(p, n) < d(a, n) the negative " ..
    "term goes to p and n instead of a and n, and at a tie d(p, n) = d(a, n) each pair takes half " ..
    "(torch.minimum's backward).  A distance of 0 (identical embeddings with eps = 0) has the " ..
    "gradient 0, never NaN.  A NaN element, or infinite distances (∞ − ∞), give that row a NaN " ..
    "loss, as PyTorch (the hinge's clamp keeps NaN; with swap a NaN distance is the minimum), " ..
    "and NaN gradients in its three rows, hinge or soft margin (PyTorch's are NaN in part of " ..
    "them only, or 0 for p = 1, by where the NaN is); the other rows are unaffected, and 'mean' " ..
    "or 'sum' is then NaN.  A NaN or infinite upstream gradient reaches only " ..
    "the rows whose hinge is active (c ≠ 0): an inactive row's gradient is 0, as autograd's clamp " ..
    "backward gives it.  One infinite distance (an infinite component, the other distance finite) " ..
    "gives an infinite loss; that distance's terms of the gradients are 0 and the finite one's " ..
    "are as ever (PyTorch's ∞/∞ gives NaN at the infinite component).",
  notes = [[
In Lua the soft margin is asked for with soft_margin = true: a table cannot hold margin = nil
as a value distinct from leaving margin out (which gives the default 1).  With eps = 0 and
soft_margin = true the loss is the reference's soft-margin triplet loss (plain Euclidean
distances).  p >= 1: for p = 1 the derivative of |z| at z = 0 is taken as 0, as PyTorch's.
No state is kept: backward recomputes the distances (one pass over the rows).  The hinge is
(d_ap − d_an) + μ: at distances past 2^53·μ PyTorch's (μ + d_ap) − d_an loses the margin
(a loss of 0 where this one keeps μ).]],
}
