-- InfoNCE between two views of N items in CLIP's cross-view form (each query against the N
-- keys: 1 positive, N − 1 negatives), computed in tiles of the similarity matrix with an
-- online log-sum-exp per row and per column.
return {
  name = "info_nce",
  criterion = "InfoNCELoss",
  title = "InfoNCE contrastive loss",
  source = "van den Oord, Li and Vinyals, Representation Learning with Contrastive Predictive " ..
    "Coding, arXiv:1807.03748; Radford et al., CLIP, ICML 2021 (the symmetric form); the tiled " ..
    "computation of Inf-CL, Cheng et al., arXiv:2410.17243",
  shape = "pairs",
  policy = "info_nce",
  target = "none",
  inputs = {
    { "query", "q, N×D embeddings of the first view" },
    { "key", "k, N×D embeddings of the second view, row i the positive of query row i" },
  },
  options = {
    { "temperature", "double", 0.07, min = 1e-30,
      doc = "τ > 0: the similarities are divided by it (at least 1e-30: 1/τ stays within fp32's range)" },
    { "symmetric", "bool", true, doc = "average the query→key and key→query losses (CLIP); false: query→key only" },
    { "normalize", "bool", true, doc = "L2-normalise the rows first (x / max(‖x‖, 1e-12), as F.normalize)" },
    { "comm", "comm", false,
      doc = "shard the batch over the communicator's ranks: each rank passes its own N rows of both views " ..
        "(the same N on every rank), every rank's keys are negatives of every query and every rank's " ..
        "queries of every key, and the loss is that of the ranks' rows gathered (docs/distributed.md)" },
  },
  formula = [[
With u_i = q_i/max(‖q_i‖, 1e-12) and v_j = k_j/max(‖k_j‖, 1e-12) (normalize; else u = q,
v = k) and the similarities S_ij = u_i·v_j / τ:

    ℓ_i = lse_j(S_ij) − S_ii                                  (symmetric = false)
    ℓ_i = ½·[lse_j(S_ij) − S_ii] + ½·[lse_j(S_ji) − S_ii]     (symmetric = true)

lse_j(S_ij) is the log-sum-exp of row i (query i against every key), lse_j(S_ji) that of
column i (key i against every query): the cross-entropy of each row and of each column with
the diagonal as the target.  'mean' divides by N.  S is computed in tiles of rows (a matrix
product per tile) with the row and column log-sum-exps kept online; the N×N matrix is never
stored (O(N) memory besides one tile), and the backward pass recomputes the tiles.]],
  gradient = "With P_ij = e^(S_ij − lse_row i), Q_ij = e^(S_ij − lse_col j) and the weights " ..
    "w_i of each row's loss (halved when symmetric), G_ij = w_i·(P_ij − δ_ij) + [symmetric]·w_j·" ..
    "(Q_ij − δ_ij); ∂L/∂u = G·v/τ and ∂L/∂v = Gᵀ·u/τ, on the CPU accumulated tile by tile, on CUDA each in " ..
    "its own sweep over tiles of rows (∂L/∂v from the transposed tiles, nothing accumulated), then " ..
    "through the normalisation: ∂L/∂q_i = (g_i − (g_i·u_i)·u_i)/‖q_i‖ (g_i/1e-12 below the clamp, as F.normalize's).  Exact for both inputs.",
  notes = [[
This is CLIP's cross-view InfoNCE: the negatives of query i are the N − 1 other keys (and,
symmetric, those of key i the N − 1 other queries), not SimCLR's NT-Xent, which also
contrasts each view with the other items of its own view (2N − 2 negatives).  With comm the
batch is sharded over ranks (negatives from every rank, exact gradients for each rank's rows:
docs/distributed.md).  The CPU multiplies in f32 for f32/f16/bf16 inputs and in f64 for f64
(OpenBLAS sgemm/dgemm), the log-sum-exps, norms and sums in f64.  CUDA multiplies the
inputs as given with cuBLAS (f16/bf16 on tensor cores with fp32 accumulation, f32 in f32,
f64 in f64), the normalisation applied as a scale when a tile is read; the similarity tile
is f32 (f64), the gradient tile of the two gradient products is in the input dtype (as
PyTorch's 16-bit autograd), and the workspace is a 48 MiB tile area plus O(N) vectors and
one tile's gradient product (about 55 MiB at N = 32768, D = 1024).  A learnable temperature
(CLIP's logit scale): L depends on τ only through the similarities over τ, so with
normalize = false ∂L/∂τ = −(1/τ)·Σ_i q_i·∂L/∂q_i, one dot product of the query view and its
gradient (the key view's gives the same); with normalize = true that sum needs the gradient
of the normalised rows, which the call does not return (the raw rows' gradient is
orthogonal to them): pass normalised rows with normalize = false to train τ.  On sm_90 (H100, H200)
with CUTLASS's headers at build time, bf16 inputs with normalize = true take a path where no
similarity tile exists, on one device when N and D are multiples of 8, T ≥ 1/64 and each
view's rows are 16-byte aligned (a contiguous tensor, or a slice whose row stride is a
multiple of 8 elements): the normalised similarities are bounded by 1/T, so e^(S − 1/T) (for
T < 1/40 shifted further, to stay within fp32's range) is computed with one fixed shift in
the epilogue of the similarity GEMM, which sums it per row and per column (fp32 partials per
256 × 128 tile, added in a fixed order in double); each gradient sweep recomputes the GEMM
with an epilogue that writes the bf16 gradient tile directly, the positive pair's entry
rewritten from S_ii in double.  No state is kept: backward recomputes the log-sum-exps.]],
}
