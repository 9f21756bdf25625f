-- Mean absolute error, elementwise, PyTorch's L1Loss.
return {
  name = "l1_loss",
  criterion = "L1Loss",
  criterion_aliases = { "AbsCriterion" },
  title = "Mean absolute error (L1)",
  source = "PyTorch torch.nn.L1Loss / torch.nn.functional.l1_loss; Torch7 nn.AbsCriterion",
  shape = "elementwise",
  policy = "l1",
  target = "elementwise",
  input_doc = "any shape (rank 0..8), f32/f16/bf16/f64, any strides.",
  target_doc = "the input's shape, any float dtype (any real values).",
  tensors = {
    { name = "weight", kind = "broadcast",
      doc = "w, one weight per element (PyTorch ≥ 2.6's weight), broadcast over the input" },
  },
  options = {},
  mean_doc = "the element count, or with a weight Σ w over the elements",
  formula = [[
Elementwise, with d = x − y and w the weight (1 without one):

    ℓ = w·|d|

'mean' divides by the element count, or with a weight by Σ w over the elements (PyTorch's
weighted mean: Σ w·|d| / Σ w).]],
  gradient = "∂ℓ/∂x = w·sign(d), sign(0) = 0 (PyTorch's subgradient).",
  notes = [[
Only the input gets a gradient.  The target must have the input's shape.
With a weight, 'mean' is Σ w·ℓ / Σ w as PyTorch computes it; weights summing to 0 give NaN
and a zero gradient (ploss's rule for a mean over nothing: the factor 1/Σ w is taken as 0,
so only a non-finite ∂ℓ/∂x, at an infinite input, stays NaN; PyTorch's division gives ±∞ or
NaN for both).  The weight gets no gradient.  PyTorch asks for a weight of the input's
own shape; ploss also broadcasts a smaller one (trailing dims aligned), and Σ w counts each
weight once per element it covers.]],
}
