-- Lovász-softmax: a convex surrogate of the per-class Jaccard index over groups of pixels.
return {
  name = "lovasz_softmax",
  criterion = "LovaszSoftmaxLoss",
  title = "Lovász-softmax loss",
  source = "Berman, Rannen Triki, Blaschko, \"The Lovász-Softmax loss: A tractable surrogate for the " ..
    "optimization of the intersection-over-union measure in neural networks\", CVPR 2018 (its " ..
    "lovasz_softmax with classes 'present', 'all' or a list, and per_image)",
  shape = "region",
  policy = "lovasz_softmax",
  target = "index",
  loss_groups = "class",
  enums = {
    { ctype = "ploss_lovasz_classes", prefix = "PLOSS_LOVASZ_", count = "PLOSS_LOVASZ_CLASSES_COUNT",
      doc = "Which classes of a group enter its loss.",
      values = {
        { "present", "PRESENT", "the classes with at least one valid pixel of that label in the group " ..
          "(Berman et al.'s default)" },
        { "all", "ALL", "every class; a class absent from the group's labels has L_c = the largest p_c " ..
          "over its valid pixels" },
        { "listed", "LISTED", "the classes of class_ids, present in the group or not (Berman et al.'s list)" },
      } },
  },
  tensors = {
    { name = "class_ids", kind = "class_ids",
      doc = "with classes = 'listed': the class indices that count, in [0, C) (a Lua list or a tensor of " ..
        "any numeric dtype on the input's device; on CUDA an index outside [0, C) is reported as an " ..
        "invalid label)" },
  },
  options = {
    { "classes", "enum", "present", ctype = "ploss_lovasz_classes", list = { value = "listed", tensor = "class_ids" },
      doc = "which classes count (see the choices above); a list (or tensor) of class indices is read as " ..
        "classes = 'listed' with those class_ids, as Berman et al.'s classes = [...]" },
    { "per_image", "bool", false, doc = "one group per image (true) or the whole batch as one group (false)" },
    { "ignore_index", "int64", -100, doc = "pixels with this label are left out of every class's sort" },
  },
  formula = [[
In each group (the whole batch, or one image with per_image) and for each class c, with p
the softmax over the C classes, the errors of the valid pixels e_i = 1 − p_ic where y_i = c
and e_i = p_ic elsewhere are sorted in decreasing order e_(1) ≥ e_(2) ≥ … (ties by
increasing pixel index, row-major over N×d1×…×dk).  With P the number of pixels of class c
in the group and F_k the number among the first k,

    Δ(k) = k / (P + k − F_k)           (the Jaccard loss of the k worst pixels, Δ(0) = 0)
    g_k  = Δ(k) − Δ(k − 1)             (the Lovász weights)
    L_c  = Σ_k e_(k)·g_k

g_k is computed in closed form (1/(P + k − F_k) for a pixel of class c or k = 1, else
(P − F_k)/((P + k − F_k)(P + k − 1 − F_k))) and the counts are integers, so no difference
of nearly equal numbers is taken.  The loss of a group is the mean of L_c over the classes
that count in it (0 when none does); 'mean' averages the groups' losses, 'sum' adds every
counted L_c, 'none' gives L_c per class ([C], or [N, C] with per_image; 0 for a class that
does not count).]],
  gradient = [[
The sort order is held fixed (the loss is piecewise linear in the probabilities):
∂L_c/∂p_ic = g_k·(−1 if y_i = c else +1) at the pixel of rank k, and through the softmax
∂ℓ/∂x_ik = p_ik·(G_ik − Σ_c p_ic·G_ic) with G_ic = ω_c·∂L_c/∂p_ic, ω_c the weight of L_c in
the reduced loss (1/(groups × counted classes of the group) for 'mean', 1 for 'sum', the
upstream gradient for 'none').  Ignored pixels get an exactly zero gradient.]],
  notes = [[
Edge cases: a group whose pixels are all ignored gives 0 and a zero gradient (also with
'mean': Berman et al.'s convention, not NaN); a single valid pixel is an ordinary group; a
class absent from a group's labels is skipped with classes = 'present' and gives L_c =
max_i p_ic with 'all' (the reference project's setting); C = 1 gives 0.  Labels outside [0, C)
that are not ignore_index are an error (INVALID_LABEL).  The CUDA backend sorts the (group,
class) segments in batches of up to four with CUB's radix sort on 32-bit (segment slot, f32
error) keys, counts the foreground pixels per chunk of ranks (integer prefix counts), and
keeps at most about the input's size in its workspace (f32; f16/bf16: about 4× their input,
the weights being f32); nothing of size C × pixels is kept after the call.  The CPU backend
holds the probabilities and, for the gradient, the signed weights in f64 during the call (two
C × pixels f64 buffers and the sort's keys: 4–6× an f32 input).
On CUDA f64 inputs are ranked by their errors rounded to f32 (equal there: by pixel index),
the loss and the gradient computed in f64; the CPU ranks them by their f64 errors.  The loss
does not depend on the order of tied errors, the gradient does: where two errors differ
only below f32's precision the backends may give the gradients of two such orders.  class_ids is a set: a class listed twice counts once
(Berman et al.'s loop would count it twice), and an empty list gives 0.  With per_image the
'mean' of an empty batch (no group) is 0, Berman et al.'s mean of nothing.]],
}
