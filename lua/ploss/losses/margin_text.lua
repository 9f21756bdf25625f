-- What the margin softmax losses (combined margin, AM-softmax, ArcFace) share: their
-- inputs, the options every one of them has, and the text of their maths.
local M = {}

M.half_pi = math.pi / 2

-- A fresh list each time: the description machinery annotates it in place.
function M.inputs()
  return {
    { "x", "N×D embeddings" },
    { "weight", "C×D class centres, one per row (the convention of nn.Linear's weight; D×C with " ..
      "weight_layout 'DxC')" },
  }
end

-- Declared by the first margin loss (combined_margin), named by the others.
M.enums = {
  { ctype = "ploss_weight_layout", prefix = "PLOSS_WEIGHT_LAYOUT_", count = "PLOSS_WEIGHT_LAYOUT_COUNT",
    doc = "How the rows of weight (class centres, or a vocabulary's rows) lie in it.",
    values = {
      { "CxD", "CXD", "C×D, one per row (the convention of nn.Linear's weight)" },
      { "DxC", "DXC", "D×C, one per column (the D×C matrix of pytorch-loss's AMSoftmax)" },
    } },
}

M.weight_layout = { "weight_layout", "enum", "CxD", ctype = "ploss_weight_layout",
  doc = "how the centres lie in weight: 'CxD' (one per row) or 'DxC' (one per column)" }

M.sample_rate = { "sample_rate", "double", 1, min_exclusive = 0, max = 1,
  doc = "Partial FC: keep the batch's classes and uniformly drawn others, min(C, max(2, ⌊C·rate⌋ + 1)) " ..
    "in all, or the batch's classes where they are more (rate 1: every class; InsightFace draws ⌊C·rate⌋)" }
M.seed = { "seed", "int64", 0, min = -(2 ^ 53 - 1), max = 2 ^ 53 - 1,
  doc = "Partial FC: the seed of the drawn classes (the same seed and labels draw the same classes on every " ..
    "device; with comm each rank draws among its own block); a criterion advances it by one after each " ..
    "backward and fused call with sample_rate < 1, so each step draws anew and a forward and its backward " ..
    "alike (as PartialFCLoss); the functional calls take it as given" }

M.comm = { "comm", "comm", false,
  doc = "shard the classes over the communicator's ranks: weight holds this rank's block of " ..
    "centres (the ranks' blocks in rank order make the C classes), labels are global class ids, every " ..
    "rank passes the same number of rows, and the loss is that of the ranks' rows gathered " ..
    "(docs/distributed.md)" }
M.scale_grad_x_by_ranks = { "scale_grad_x_by_ranks", "bool", false,
  doc = "with comm: multiply grad_x by the number of ranks (undoing a data-parallel average of the " ..
    "backbone's gradients, as InsightFace's Partial FC does)" }

-- the options together: the C engine's own check, said at construction
function M.check(o)
  if o.scale_grad_x_by_ranks and not o.comm then
    return "opts.scale_grad_x_by_ranks: set without opts.comm (it multiplies grad_x by the communicator's " ..
      "number of ranks; a call on one device has none)"
  end
end

M.ignore_index = { "ignore_index", "int64", -100, doc = "rows with this label add nothing and get a zero gradient" }
M.tile_rows = { "tile_rows", "int64", 0, min = 0,
  doc = "rows of the cosine tile computed at a time (0: as many as fit a fixed budget of N×C values)" }

-- The formula of a loss whose target cosine becomes `target`; beyond `beyond` (nil: never)
-- InsightFace's monotone `fallback` replaces it, and with easy_margin `plain` (the target
-- without its angular margin) where cos θ <= 0.
function M.formula(target, beyond, fallback, plain)
  local f = [[
With x̂_i = x_i / max(‖x_i‖, 1e-12), ŵ_j = w_j / max(‖w_j‖, 1e-12) and the cosines
c_ij = x̂_i·ŵ_j (cos θ_ij), the target's cosine of row i (label y_i) is replaced by
φ(c) = ]] .. target .. [[ and every cosine is scaled by s:

    z_ij = s·c_ij (j ≠ y_i),   z_iy = s·φ(c_iy),   ℓ_i = log Σ_j e^(z_ij) − z_iy]]
  if beyond then
    f = f .. "\n\nWhere " .. beyond .. " (past it the cosine of the shifted angle would turn back up) " ..
      "the target takes " .. fallback .. " instead, which keeps the target logit falling as θ " ..
      "grows.  With easy_margin the target takes " .. plain .. " (no angular margin) wherever cos θ ≤ 0."
  end
  return f .. "\n\n'mean' divides by the rows whose label is not ignore_index.  The cosines are " ..
    "computed in tiles of rows (a matrix product each); the N×C logits are never all stored."
end

-- The gradient's text, with `dphi` saying what φ′ is for the loss.
function M.gradient(dphi)
  return "With p_ij = e^(z_ij − lse_i) and ω_i the row's upstream factor, G_ij = ω_i·s·p_ij " ..
    "(j ≠ y_i) and G_iy = ω_i·s·φ′(c_iy)·(p_iy − 1); ∂L/∂x̂ = G·Ŵ and ∂L/∂Ŵ = Gᵀ·X̂ (accumulated " ..
    "tile by tile), then through the normalisation: ∂L/∂x_i = (g_i − (g_i·x̂_i)·x̂_i)/‖x_i‖ " ..
    "(g_i/1e-12 below the clamp).  " .. dphi .. "  Ignored rows get a zero gradient; a non-finite " ..
    "embedding in an ignored row still reaches its own ∂L/∂x and ∂L/∂W through the products (0·NaN " ..
    "is NaN), as in PyTorch's composite (normalize, matmul, cross_entropy with ignore_index)."
end

-- φ′ of an angular margin cos(m1·θ + m2) − m3, with m1 and m2 named as the loss names them.
function M.angular_dphi(m1, shift)
  return "φ′ = " .. m1 .. "sin(" .. m1 .. "θ + " .. shift .. ")/sin θ with sin θ kept above 1e-6, so " ..
    "|cos θ| = 1 gives a finite derivative (never the NaN of 1/√(1 − cos²θ)); the fallback and " ..
    "the easy margin have φ′ = 1.  Finite is not accurate there: for an embedding within about 1e-3 " ..
    "rad of its centre, f32/f16/bf16 products round cos θ near 1, and both sin θ = √(1 − cos²θ) and " ..
    "the part of ŵ across x̂ lose most of their digits, so the target row's gradient can be off by " ..
    "two orders of magnitude (in f32 about 100× within 2.4e-4 rad, where cos θ rounds to 1 and sin θ " ..
    "takes its 1e-6 floor; f64 inputs keep it; PyTorch's acos form gives ∞ or NaN there)."
end

M.notes = [[
Called as crit(x, weight, labels): both x and weight get a gradient.  A zero embedding or
centre has the cosine 0 with every row (a defined loss, no NaN).  The CPU multiplies in f32
for f32/f16/bf16 inputs and in f64 for f64 (OpenBLAS), the rows' statistics, losses and sums
in f64; CUDA multiplies the inputs as given with cuBLAS (fp32
accumulation, tensor cores for f16/bf16).  For f32 and bf16 with s up to about 64 (the
defaults; the bound falls a little as C grows) it takes the products a tile of classes at a
time and turns each cosine into e^(s·(cos − 1) + T) at once, T about 60 (as high as f32 lets
a row's sum be): |cos| <= 1 bounds every logit by s, so the row's max is not needed and
every exponential lies within f32's range; the gradient products then run on those
exponentials, each row scaled afterwards (any C).  On an H100/H200 (sm_90) with CUTLASS's
headers at build time (tools/fetch_cutlass.sh; tools/quickstart.sh fetches them), bf16 takes
the exponentials and the rows' sums straight from the product GEMM's epilogue, so the f32
products never reach memory.  For f16 (whose range is too short for that) and larger s, one
pass per tile of rows scales the products into cosines and runs
the softmax with the row engine's policy (C <= 131072 there; f64 is CPU only).  CUDA's
workspace: a chunk of at most 2 GiB of gradient rows in the input dtype (so that the two
gradient products usually run once over all rows), a tile of at most 256 MiB of f32
products, plus O((N + C)·D); tile_rows bounds both to that many rows.
Partial FC (sample_rate < 1) draws its classes on the device (CUB), reading 8 bytes back
only when the batch has at least as many rows as the sample has classes.  No state is kept:
backward recomputes the tiles.  f16 on CUDA: the gradient tile of the GEMMs is f16, so an
angular margin's derivative near |cos| = 1 (up to s·sin m2 / 1e-6) overflows it and the
gradient of such a row is NaN; train ArcFace-style margins in bf16 or f32.]]

return M
