-- Triplet margin loss with a named distance, PyTorch's TripletMarginWithDistanceLoss for
-- its default distance (pairwise_distance) and the cosine distance.
return {
  name = "triplet_margin_with_distance",
  criterion = "TripletMarginWithDistanceLoss",
  title = "Triplet margin loss with a distance",
  source = "PyTorch torch.nn.TripletMarginWithDistanceLoss / " ..
    "torch.nn.functional.triplet_margin_with_distance_loss",
  shape = "pairs",
  policy = "triplet_margin_with_distance",
  target = "none",
  input_layout = "rows_or_vector",
  inputs = {
    { "anchor", "a, N×D embeddings (or one embedding of D values)" },
    { "positive", "p, a's shape: embeddings of the anchors' class" },
    { "negative", "n, a's shape: embeddings of other classes" },
  },
  input_doc = "N×D, or D for one triplet (PyTorch's unbatched form: its 'none' loss is 0-d), " ..
    "f32/f16/bf16/f64, any strides; the three inputs of one dtype and shape.",
  enums = {
    { ctype = "ploss_triplet_distance", prefix = "PLOSS_TRIPLET_DISTANCE_", count = "PLOSS_TRIPLET_DISTANCE_COUNT",
      doc = "The distance of a triplet's pairs.",
      values = {
        { "pairwise", "PAIRWISE", "d(u, v) = ‖u − v + 1e-6‖₂, PyTorch's pairwise_distance (its default)" },
        { "cosine", "COSINE",
          "d(u, v) = 1 − u·v / (max(‖u‖, 1e-8)·max(‖v‖, 1e-8)), 1 − PyTorch's cosine_similarity" },
      } },
  },
  options = {
    { "distance", "enum", "pairwise", ctype = "ploss_triplet_distance", doc = "the distance (see below)" },
    { "margin", "double", 1, min_exclusive = 0, doc = "μ > 0, the margin of the hinge (PyTorch refuses μ <= 0)" },
    { "swap", "bool", false, doc = "the distance swap: d_an becomes min(d_an, d_pn)" },
  },
  formula = [[
Per triplet i:

    d_ap = d(a_i, p_i),   d_an = d(a_i, n_i)   (swap: d_an = min(d(a_i, n_i), d(p_i, n_i)))
    ℓ_i = max(0, d_ap − d_an + μ)

'mean' divides by N.  PyTorch takes any function of two batches as its distance; ploss
names the two it is used with: pairwise_distance (p = 2, ε = 1e-6 added to every
difference: the same numbers as TripletMarginLoss's defaults) and 1 − cosine_similarity.]],
  gradient = "With c = [d_ap − d_an + μ ≥ 0] (the gradient passes at the kink, as " ..
    "TripletMarginLoss's and PyTorch 2.11's; 2.15's clamp_min gives 0 there, which the cosine distance " ..
    "meets with one-hot embeddings, a = p and n orthogonal to them): ∂ℓ/∂d_ap = c, ∂ℓ/∂d_an = −c (with swap the negative term goes to the smaller " ..
    "of d(a, n) and d(p, n), half to each at a tie).  pairwise: as TripletMarginLoss.  cosine, " ..
    "for a pair (u, v) with clamped norms c_u = max(‖u‖, 1e-8): ∂d/∂u = −v/(c_u·c_v) + " ..
    "cos·u/(c_u·‖u‖), as PyTorch's cosine_similarity backward computes it (the norm's own " ..
    "derivative taken unclamped, 0 for u = 0), so a vector shorter than 1e-8 gets PyTorch's " ..
    "finite gradient.  A NaN or infinite upstream gradient reaches only the rows whose hinge is " ..
    "active (c ≠ 0).",
  notes = [[
A NaN element gives its row a NaN loss and NaN gradients in its three rows, as
TripletMarginLoss (PyTorch leaves the positive's gradient 0 when only the negative is NaN);
infinite elements give what the arithmetic gives (∞ − ∞ is NaN).  The kink where a = p and n
is orthogonal to them is met exactly only where the cosine rounds to 1 exactly (one-hot
embeddings); other such a = p give d(a, a) = ±1 ulp, on either side of it.  The cosine distance is
taken from the squared norms and the products: summed in f64 on the CPU, in f32 on the GPU
for f32/f16/bf16 inputs, so elements beyond about 1e154 (CPU, f64) or 1e19 (GPU) overflow
them and give NaN where PyTorch, normalising first, stays finite.  The loss is
(d_ap − d_an) + μ, PyTorch's (μ + d_ap) − d_an: the last bit may differ.  No state is
kept: backward recomputes the distances.]],
}
