-- Affinity loss (local context prior): BCE of the logit inner products of pixels sharing a window.
return {
  name = "affinity",
  criterion = "AffinityLoss",
  title = "Affinity loss (local context prior)",
  source = "adapted from Yu, Wang, Gao, Yu, Shen, Sang, \"Context Prior for Scene Segmentation\", CVPR 2020 " ..
    "(local k×k windows and raw logit inner products instead of a predicted global affinity map); " ..
    "pytorch-loss AffinityLoss",
  shape = "region",
  input_doc = "logits, f32/f16/bf16/f64: N×C×H×W, N×C×W (a row of pixels per image) or N×C (one pixel per " ..
    "image: no neighbours), C >= 1; rank at most 4; any strides (a crop of a segmentation map is read in " ..
    "place).  Each pixel is compared with its neighbours: one loss per pixel; the target, and grad_input, " ..
    "have any strides too.",
  policy = "affinity",
  target = "index",
  loss_groups = "pixel",
  options = {
    { "kernel_size", "int", 3, min = 1, max = 7, doc = "k, the side of the windows (stride 1, no padding)" },
    { "ignore_index", "int64", -100, doc = "pixels with this label take part in no pair" },
  },
  formula = [[
Logits N×C×H×W (N×C×W: images of one row), labels N×H×W.  Every k×k window of an image
(stride 1, no padding) pairs each of its cells a with each cell b (a = b included):
A = Σ_c x_ca·x_cb, T = 1 if both cells have the same label, and the pair adds
softplus(A) − T·A (BCE with logits).  With m(p, q) the
number of windows holding both pixels p and q, gathered per pixel:

    ℓ_p = Σ_q m(p, q)·(softplus(A_pq) − T_pq·A_pq)        (p and q valid)

'mean' divides Σ_p ℓ_p by Σ m(p, q) over the counted pairs (N·k⁴·(H − k + 1)(W − k + 1)
without ignored pixels, the reference's count), 'sum' gives Σ_p ℓ_p, 'none' the map ℓ (N×H×W).]],
  gradient = [[
∂ℓ/∂x_cp = Σ_q m(p, q)·(σ(A_pq) − T_pq)·x_cq·(ω_p + ω_q), ω the upstream weight of each
pixel's ℓ (the diagonal q = p gives the factor 2 of ‖x_p‖²).  Each pixel gathers the
(2k − 1)² pixels it can share a window with: no atomics, no unfolded k²·C·L tensor.]],
  notes = [[
Unlike the reference, pairs with an ignored pixel are left out of the value, the count and
the gradient (the reference keeps them with T = 0, so an ignored pixel is pushed to be
unlike everything, itself included).  An image smaller than k along H or W has no window
(an N×C×W input's images are one row: none unless k = 1).  'mean' with no counted pair
gives NaN and a zero gradient.  Labels outside [0, C) that are
not ignore_index are an error (INVALID_LABEL).  Memory during the call: on CUDA a workspace
of about the input's size; on the CPU an f64 copy of the logits and per-pixel values (2–3×
an f32 input).]],
}
