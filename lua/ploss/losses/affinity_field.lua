-- Affinity field loss: a pairwise regulariser over the 8 neighbours of every pixel.
return {
  name = "affinity_field",
  criterion = "AffinityFieldLoss",
  title = "Affinity field loss",
  source = "Ke, Hwang, Liu, Yu, \"Adaptive Affinity Fields for Semantic Segmentation\", ECCV 2018 (the fixed " ..
    "3×3 affinity field); pytorch-loss AffinityFieldLoss for divergence = 'reference'",
  shape = "region",
  input_doc = "logits, f32/f16/bf16/f64: N×C×H×W, N×C×W (a row of pixels per image) or N×C (one pixel per " ..
    "image: no neighbours), C >= 1; rank at most 4; any strides (a crop of a segmentation map is read in " ..
    "place).  Each pixel is compared with its neighbours: one loss per pixel; the target, and grad_input, " ..
    "have any strides too.",
  policy = "affinity_field",
  target = "index",
  loss_groups = "pixel",
  enums = {
    { ctype = "ploss_affinity_divergence", prefix = "PLOSS_AFFINITY_", count = "PLOSS_AFFINITY_DIVERGENCE_COUNT",
      doc = "The divergence D(u, v) between the class distributions of two neighbouring pixels.",
      values = {
        { "kl", "KL", "KL(p_v ‖ p_u) = Σ_c p_vc·(log p_vc − log p_uc), the paper's" },
        { "reference", "REFERENCE", "Σ_c p_vc·(p_vc − p_uc), the probability difference of pytorch-loss" },
      } },
  },
  options = {
    { "kl_margin", "double", 3, min = 0, doc = "κ, the margin of the divergence between pixels of different labels" },
    { "lambda_same", "double", 1, min = 0, doc = "the weight of the pairs with equal labels (λ_same·D)" },
    { "lambda_diff", "double", 1, min = 0, doc = "the weight of the pairs with different labels (λ_diff·max(0, κ − D))" },
    { "ignore_index", "int64", 255, doc = "pixels with this label take part in no pair" },
    { "divergence", "enum", "kl", ctype = "ploss_affinity_divergence", doc = "D (see the choices above)" },
  },
  formula = [[
Logits N×C×H×W (N×C×W: images of one row), labels N×H×W, p the softmax over the classes.
For each valid pixel u and each of its 8 neighbours v (the 4 sides and the 4 diagonals)
inside the image with a valid label,

    term(u, v) = λ_same·D(u, v)                 if y_u = y_v
               = λ_diff·max(0, κ − D(u, v))     otherwise
    ℓ_u        = (1/8)·Σ_v term(u, v)

(each unordered pair counts in both directions).  'mean' divides Σ_u ℓ_u by the number of
valid pixels, 'sum' gives Σ_u ℓ_u, 'none' the map ℓ (N×H×W, 0 at ignored pixels).]],
  gradient = [[
For D = KL(p_v ‖ p_u): ∂D/∂x_vk = p_vk·(log p_vk − log p_uk − D), ∂D/∂x_uk = p_uk − p_vk; for
the reference divergence the derivatives of Σ p_v·(p_v − p_u) through both softmaxes.  A pair
contributes λ_same·∂D, or −λ_diff·∂D where κ − D > 0 (0 at the kink and beyond), times the
upstream weight of its centre pixel u.  Each pixel gathers the 16 pairs it belongs to, no
atomics (on CUDA each unordered pair's divergences are summed once and read by both of its
pixels).]],
  notes = [[
Unlike the reference, a pair with an ignored pixel adds nothing to the value (the reference
adds λ_diff·κ for it) nor to the gradient.  The paper's "edge" pairs are those of different
labels; the reference calls its same-label weight lambda_edge, so the names here say which
pairs each weighs.
Memory during the call: on CUDA a workspace of about the input's size; on the CPU each
pixel's log-softmax and softmax in f64 and its eight divergences (5–6× an f32 input).
Only the fixed 3×3 field is implemented, not the adaptive kernel sizes.  'mean' with no valid
pixel gives NaN and a zero gradient.  Labels outside [0, C) that are not ignore_index are an
error (INVALID_LABEL).]],
}
