-- Cosine embedding loss between two N×D embedding batches and a ±1 label per pair, with
-- PyTorch's CosineEmbeddingLoss semantics; both inputs get a gradient.
return {
  name = "cosine_embedding_loss",
  criterion = "CosineEmbeddingLoss",
  criterion_aliases = { "CosineEmbeddingCriterion" },
  title = "Cosine embedding loss",
  source = "PyTorch torch.nn.CosineEmbeddingLoss / torch.nn.functional.cosine_embedding_loss " ..
    "(aten's cosine_embedding_loss, EPSILON = 1e-12); Torch7 nn.CosineEmbeddingCriterion",
  shape = "pairs",
  policy = "cosine_embedding",
  target = "signs",
  input_layout = "rows_or_vector",
  inputs = {
    { "input1", "x1, N×D embeddings (or one embedding of D values)" },
    { "input2", "x2, x1's shape" },
  },
  input_doc = "N×D, or D for one pair (PyTorch's unbatched form), f32/f16/bf16/f64, any " ..
    "strides; both inputs of the same dtype and shape.",
  target_doc = "y, N values (a 0-d tensor for D inputs): 1 (similar) or −1 (dissimilar), any " ..
    "float dtype or i64/i32; a pair with any other y has loss 0, as PyTorch.",
  options = {
    { "margin", "double", 0, param = "margin",
      doc = "m, the cosine above which a dissimilar pair is penalised (PyTorch suggests 0 to 0.5)" },
  },
  formula = [[
Per pair i, as aten's cosine_embedding_loss (ε = 1e-12 added to each squared norm):

    cos_i = Σ_j x1_ij·x2_ij / sqrt((Σ_j x1_ij² + ε)·(Σ_j x2_ij² + ε))
    ℓ_i = 1 − cos_i            if y_i = 1
    ℓ_i = max(0, cos_i − m)    if y_i = −1
    ℓ_i = 0                    otherwise

A zero vector has cos = 0 (loss 1 for y = 1, max(0, −m) for y = −1), never NaN.  'mean'
divides by N; D inputs give one pair (a 0-d loss for 'none').  ε is exactly 10⁻¹² (aten's
is the f32 number nearest to it even for f64 inputs: the gradient of a pair with one zero
vector differs from PyTorch's by 2·10⁻⁹ relative).]],
  gradient = [[
With A = Σx1² + ε, B = Σx2² + ε, d = sqrt(A·B) and g = ∂ℓ/∂cos (−1 for y = 1; [cos − m >= 0]
for y = −1, the gradient passing at the kink, as PyTorch 2.11's clamp_min does (2.15's gives 0
there); 0 otherwise), times the
upstream gradient: ∂ℓ/∂x1 = g·(x2/d − cos·x1/A), ∂ℓ/∂x2 = g·(x1/d − cos·x2/B).  A pair with a
NaN element has NaN gradients whatever its y (as autograd's 0·NaN), and a NaN loss only for
y = ±1.]],
  notes = [[
PyTorch computes in the input's dtype; the CPU here works in f64, CUDA takes the three sums
of a pair in fp32 (f64 for f64 input) and finishes it in f64, so sqrt(A·B) does not overflow
for large f32 norms where PyTorch's f32 product would.  No state is kept: backward recomputes
the sums (one pass over each pair's rows).]],
}
