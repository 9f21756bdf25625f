-- Cross-entropy of the log-Taylor softmax.
return {
  name = "taylor_cross_entropy",
  criterion = "TaylorCrossEntropyLoss",
  title = "Taylor cross-entropy",
  source = "de Brébisson & Vincent, ICLR 2016; Banerjee et al., arXiv:2011.11538; pytorch-loss " ..
    "TaylorCrossEntropyLossV1/V3 (whose ignore default is -1; ploss keeps PyTorch's -100)",
  shape = "rows",
  policy = "taylor_ce",
  target = "index",
  state = { name = "state", components = 1, doc = "Z, the Taylor normaliser of each sample" },
  options = {
    { "ignore_index", "int64", -100, doc = "samples with this label add nothing" },
    { "n", "int", 2, min = 2, max = 64, even = true, param = "order",
      doc = "the even order of the Taylor polynomial (odd orders have real roots)" },
  },
  formula = [[
With f_n(v) = Σ_{k≤n} v^k/k!, F_j = f_n(x_j) and Z = Σ_j F_j, per valid sample with label y

    ℓ = log Z − log F_y

computed in f32 (f64 for f64 input and for n > 10).  'mean' divides by the number of valid
samples.]],
  gradient = "∂ℓ/∂x_k = f_{n−1}(x_k)·(1/Z − [k = y]/F_y).",
  notes = [[
The polynomials are evaluated as they are, not in log space: f_n(x) ≈ x^n/n! leaves the
computing type's range for |x| beyond about (n!·3.4·10³⁸)^(1/n) in f32 (2.6·10¹⁹ at n = 2,
3.2·10⁴ at n = 10) and (n!·1.8·10³⁰⁸)^(1/n) in f64.  A row holding such a logit has Z = +∞:
its loss is +∞, or NaN where it is the label's (∞ − ∞), and its gradient what 1/Z = 0 leaves,
−f_{n−1}(x_y)/F_y at the label (0 where F_y overflowed) and 0 at the other classes, NaN only
where f_{n−1}(x_k) overflows as well.  A −∞ logit does not mask its class, as it would in a
softmax: f_n(−∞) = +∞ (n is even), so the loss is +∞ and the gradient NaN.  Orders above
10 take f64 on CUDA as on the CPU, whatever the layout and class count, so there the f64
limit holds for every input dtype.]],
}
