-- Kullback-Leibler divergence on log-probabilities, elementwise, PyTorch's KLDivLoss.
return {
  name = "kl_div",
  criterion = "KLDivLoss",
  criterion_aliases = { "DistKLDivCriterion" },
  title = "Kullback-Leibler divergence",
  source = "Kullback, Leibler, \"On Information and Sufficiency\", Ann. Math. Statist. 1951; PyTorch " ..
    "torch.nn.KLDivLoss / torch.nn.functional.kl_div; Torch7 nn.DistKLDivCriterion",
  shape = "elementwise",
  policy = "kl_div",
  target = "elementwise",
  reductions = { "none", "mean", "sum", "batchmean" },
  input_doc = "log-probabilities, any shape (rank 0..8), f32/f16/bf16/f64, any strides.",
  target_doc = "the input's shape, any float dtype: probabilities, or log-probabilities with log_target.",
  options = {
    { "log_target", "bool", false, param = "log_target", doc = "the target holds log-probabilities" },
  },
  formula = [[
Elementwise, with x the input (log q) and y the target:

    ℓ = y·log y − y·x      (0·log 0 taken as 0, as PyTorch's xlogy)
    ℓ = e^y·(y − x)        with log_target

'mean' divides by the element count, 'batchmean' by the input's first dim (the sum for a 0-d
input): the KL divergence of each row averaged over the batch, which 'mean' is not.]],
  gradient = "∂ℓ/∂x = −y, or −e^y with log_target.",
  notes = [[
PyTorch's default reduction is 'mean', kept here; 'batchmean' is the mathematically correct
one for rows of distributions.  As in PyTorch, a negative probability target gives NaN (log
of a negative number), and so does a zero-probability target against an infinite input (0·∞;
with log_target: a target of −inf).  No gradient is computed for the target.]],
}
