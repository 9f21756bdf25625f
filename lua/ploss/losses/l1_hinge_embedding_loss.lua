-- L1 hinge embedding loss between two N×D embedding batches and a ±1 label per pair, with
-- Torch7's L1HingeEmbeddingCriterion semantics; both inputs get a gradient.
return {
  name = "l1_hinge_embedding_loss",
  criterion = "L1HingeEmbeddingLoss",
  criterion_aliases = { "L1HingeEmbeddingCriterion" },
  title = "L1 hinge embedding loss",
  source = "Torch7 nn.L1HingeEmbeddingCriterion (one pair there; N pairs here)",
  shape = "pairs",
  policy = "l1_hinge_embedding",
  target = "signs",
  input_layout = "rows_or_vector",
  inputs = {
    { "input1", "x1, N×D embeddings (or one embedding of D values)" },
    { "input2", "x2, x1's shape" },
  },
  input_doc = "N×D, or D for one pair (Torch7's form), f32/f16/bf16/f64, any strides; both " ..
    "inputs of the same dtype and shape.",
  target_doc = "y, N values (a 0-d tensor for D inputs): 1 (similar) or −1 (dissimilar), any " ..
    "float dtype or i64/i32; any y other than −1 counts as similar, as Torch7's.",
  options = {
    { "margin", "double", 1, param = "margin", doc = "m, the L1 distance below which a dissimilar pair is penalised" },
  },
  formula = [[
Per pair i, with the L1 distance d_i = Σ_j |x1_ij − x2_ij|:

    ℓ_i = max(0, m − d_i)      if y_i = −1
    ℓ_i = d_i                  otherwise

'mean' divides by N; D inputs give one pair (Torch7's criterion, a 0-d loss for 'none').  A
NaN element gives a NaN loss.]],
  gradient = [[
With s_ij = sign(x1_ij − x2_ij) (0 for equal elements, NaN for a NaN difference) and c_i = 1
for a similar pair, −[d_i ≤ m] for a dissimilar one (Torch7's: the gradient passes at the kink
d = m and for a NaN d), times the upstream gradient: ∂ℓ/∂x1_ij = c_i·s_ij, ∂ℓ/∂x2_ij =
−c_i·s_ij.]],
  notes = [[
PyTorch has no such criterion (its HingeEmbeddingLoss takes the distances, its
CosineEmbeddingLoss the cosine).  The distance is summed in f64 on the CPU and in fp32 (f64
for f64 input) on CUDA.  No state is kept: backward recomputes the distances.]],
}
