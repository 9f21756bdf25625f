-- Gaussian negative log-likelihood of a target under a predicted mean and variance, with
-- PyTorch's GaussianNLLLoss semantics; the mean, the target and the variance each get a
-- gradient.
return {
  name = "gaussian_nll_loss",
  criterion = "GaussianNLLLoss",
  title = "Gaussian negative log-likelihood",
  source = "Nix and Weigend, Estimating the mean and variance of the target probability " ..
    "distribution, ICNN 1994; PyTorch torch.nn.GaussianNLLLoss / " ..
    "torch.nn.functional.gaussian_nll_loss",
  shape = "pairs",
  policy = "gaussian_nll",
  target = "none",
  input_layout = "elementwise",
  inputs = {
    { "input", "μ, the predicted means" },
    { "target", "y, the observed values, μ's shape" },
    { "var", "σ², the predicted variances: μ's shape (one per element), μ's shape with one dim of " ..
      "size 1 (one variance shared along that axis: [N, 1, H, W] for [N, C, H, W]) or without its " ..
      "last dim (one per row of the last axis), as PyTorch; in Lua also a number >= 0, every " ..
      "element's variance (PyTorch's float var), which gets no gradient",
      number = true },
  },
  input_doc = "any shape (rank 0..8), f32/f16/bf16/f64, any strides; input and target of one " ..
    "shape (no broadcasting); var of that shape, of that shape with one dim of size 1, or of that " ..
    "shape without its last dim, as PyTorch; all three of one dtype.",
  options = {
    { "full", "bool", false, param = "full", doc = "add the constant ½·log(2π)" },
    { "eps", "double", 1e-6, min = 0, param = "eps",
      doc = "ε >= 0: variances below it are taken as ε (PyTorch's clamp, without its gradient)" },
  },
  formula = [[
Elementwise, with v = max(σ², ε) (σ² the element's variance, or the one it shares):

    ℓ = ½·(log v + (μ − y)² / v)          (+ ½·log(2π) with full)

'mean' divides by the element count of μ.  A negative variance is refused: on the CPU before
anything is written (INVALID_ARGUMENT naming var), on CUDA the element's loss and gradients
are NaN and the next synchronising call reports it (INVALID_ARGUMENT), as PyTorch raises
"var has negative entry/entries".  A NaN variance gives NaN, as PyTorch's clamp.]],
  gradient = [[
∂ℓ/∂μ = (μ − y)/v, ∂ℓ/∂y = −(μ − y)/v and ∂ℓ/∂σ² = ½·(1/v − (μ − y)²/v²), each times the
upstream gradient.  As PyTorch (which clamps a copy of the variances without recording
it), the variance's gradient is taken at v even where σ² < ε, not zeroed; a shared variance
gets the sum of its elements' terms.]],
  notes = [[
PyTorch broadcasts the target against the input; here the target must have the input's shape
(SHAPE naming it otherwise), and a 0-d input takes a 0-d variance (as PyTorch, which refuses
one of shape [1] there too).  Both backends compute each element in
f64 and add a shared variance's terms in f64, so CPU and CUDA agree to the rounding of the
input's dtype (in f64 to a few units in the last place: the GPU fuses multiply-adds and has
its own logarithm); the loss is f32 (f64 for f64 inputs).  A number as var (Lua; PyTorch's
float var) is that variance for every element, rounded to μ's dtype as PyTorch's
var·ones_like(μ) (+∞ past its range): backward and the fused call then return the gradients
of μ and y only (grad_var given with it is refused), and a negative one is refused before
anything runs, on either device (NaN gives NaN, as in a tensor).  With several negative variances
both name the first in var's row-major order.  No state is kept.]],
}
