-- Poisson negative log-likelihood, elementwise, PyTorch's PoissonNLLLoss.
return {
  name = "poisson_nll_loss",
  criterion = "PoissonNLLLoss",
  title = "Poisson negative log-likelihood",
  source = "PyTorch torch.nn.PoissonNLLLoss / torch.nn.functional.poisson_nll_loss",
  shape = "elementwise",
  policy = "poisson_nll",
  target = "elementwise",
  input_doc = "the log-rate log λ (log_input), or the rate λ >= 0, any shape (rank 0..8), " ..
    "f32/f16/bf16/f64, any strides.",
  target_doc = "the input's shape, any float dtype: counts y >= 0 (any real values are taken).",
  options = {
    { "log_input", "bool", true, param = "log_input", doc = "the input is log λ (else λ itself)" },
    { "full", "bool", false, param = "full",
      doc = "add the Stirling term of log(y!) where y > 1" },
    { "eps", "double", 1e-8, min = 0, param = "eps",
      doc = "ε >= 0 added to λ inside the logarithm when log_input is false" },
  },
  formula = [[
Elementwise, with x the input and y the target:

    ℓ = e^x − y·x              (log_input)
    ℓ = x − y·log(x + ε)       otherwise

and with full, where y > 1, the Stirling approximation of log(y!) is added:

    ℓ += y·log y − y + ½·log(2π·y)

'mean' divides by the element count.]],
  gradient = "∂ℓ/∂x = e^x − y (log_input), or 1 − y/(x + ε); the Stirling term does not depend on x.",
  notes = [[
As PyTorch, the input is not checked: without log_input a negative rate gives NaN (the log of
a negative number) or a finite value where x + ε > 0.  The Stirling term is 0 where y <= 1
(PyTorch's masked_fill).  No gradient is computed for the target.]],
}
