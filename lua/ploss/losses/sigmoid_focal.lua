-- Sigmoid focal loss, elementwise, torchvision's definition by default.
return {
  name = "sigmoid_focal",
  criterion = "FocalLoss",
  aliases = { "sigmoid_focal_loss" },
  title = "Sigmoid focal loss",
  source = "Lin, Goyal, Girshick, He, Dollár, \"Focal Loss for Dense Object Detection\", ICCV 2017; " ..
    "torchvision.ops.sigmoid_focal_loss; pytorch-loss FocalLossV1–V3 for the 'reference' convention " ..
    "(the |y − p|^γ factor of Quality Focal Loss, Li et al., NeurIPS 2020)",
  shape = "elementwise",
  policy = "sigmoid_focal",
  target = "elementwise",
  enums = {
    { ctype = "ploss_focal_convention", prefix = "PLOSS_FOCAL_", count = "PLOSS_FOCAL_CONVENTION_COUNT",
      doc = "Definition of the sigmoid focal loss for soft targets (the two agree for y ∈ {0, 1}).",
      values = {
        { "torchvision", "TORCHVISION", "ℓ = (a₁·y + a₀·(1−y))·q^γ·BCE(x, y), q = y·(1 − p) + (1 − y)·p" },
        { "reference", "REFERENCE", "ℓ = |y − p|^γ·[a₁·y·softplus(−x) + a₀·(1−y)·softplus(x)]" },
      } },
  },
  options = {
    { "alpha", "double", 0.25, max = 1, doc = "α ≤ 1: a₁ = α, a₀ = 1 − α; α < 0 disables the balancing (a₁ = a₀ = 1)" },
    { "gamma", "double", 2, min = 0, doc = "γ ≥ 0, the focusing exponent (0 gives the α-weighted BCE)" },
    { "convention", "enum", "torchvision", ctype = "ploss_focal_convention",
      doc = "the soft-target definition (see the conventions above)" },
  },
  formula = [[
With p = σ(x), a₁ = α and a₀ = 1 − α, per element the ℓ of the convention; for y ∈ {0, 1}
both give α_t·(1 − p_t)^γ·BCE(x, y).  'mean' divides by the element count.]],
  gradient = [[
torchvision: ∂ℓ/∂x = A·[q^γ·(p − y) + γ·(1 − 2y)·BCE·q^γ·(s/q)], A = a₁y + a₀(1−y),
s = σ(x)·σ(−x); the γ-term is taken as 0 where q = 0 (its limit).  reference: the product
rule on |y − p|^γ·e, with the subgradient 0 at the kink y = p (soft targets only).]],
  notes = [[
Targets outside [0, 1] are not checked (torchvision's form then takes a power of a negative
number: NaN for a non-integer γ; for an integer γ the loss and its gradient are those of the
formula).  Logits of any finite size give finite values: every logarithm is taken in
log-space.  An infinite logit gives the limits: loss and gradient 0 where it agrees with a
0/1 target (+∞ with y = 1, −∞ with y = 0), else an infinite loss and the gradient
A·(p − y) = ±A (torchvision's formula gives NaN in both cases, from ∞·0 and ∞ − ∞).  The default reduction is 'mean', as every ploss criterion's, where
torchvision.ops.sigmoid_focal_loss defaults to reduction = 'none': pass reduction = 'none'
for its per-element losses.]],
}
