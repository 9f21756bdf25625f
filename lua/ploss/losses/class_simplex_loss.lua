-- Squared distance of each sample's C outputs to its class's vertex of a regular simplex,
-- Torch7's ClassSimplexCriterion.
return {
  name = "class_simplex_loss",
  criterion = "ClassSimplexLoss",
  criterion_aliases = { "ClassSimplexCriterion" },
  title = "Class simplex loss",
  source = "Torch7 nn.ClassSimplexCriterion (the simplex targets of Mroueh, Voinea and Poggio, " ..
    "arXiv:1506.08230)",
  shape = "rows",
  policy = "class_simplex",
  target = "index",
  min_classes = 2,
  min_classes_why = "a simplex of C vertices needs C >= 2, as Torch7's nClasses > 1",
  input_doc = "N×C outputs, one per class (or N×C×d1×…×dk: one sample per position, ploss's extension), " ..
    "f32/f16/bf16/f64; C >= 2.  Layouts as for the other losses of this shape.  One sample may also " ..
    "be C outputs with a 0-d class index (Torch7's number target): its NONE loss is 0-d.",
  target_doc = "class indices, i64 or i32, shape N×d1×…×dk, values in [0, C) (no ignore_index).",
  options = {},
  number_hint = "Torch7's nClasses is not taken: the class count is the input's size along axis 1, " ..
    "ploss.ClassSimplexLoss() for any C",
  formula = [[
Class k's target is the vertex s_k of the regular simplex of C unit vectors centred at the
origin, in the first C − 1 coordinates (the last is 0: Torch7 embeds the simplex in one
more dimension than it needs), built as Torch7 builds it: with n = C − 1, vertex k < n has
a_k = √((n + 1)·(n − k) / (n·(n − k + 1))) at coordinate k, every later vertex has
c_k = −(n + 1) / (n·(n − k + 1)·a_k) there, and the entries after a vertex's own are 0, so
that s_j·s_k = −1/n for j ≠ k.  Per sample with label y and outputs x:

    ℓ = Σ_j (x_j − s_y,j)²

the squared error against the vertex.  'mean' divides the sum by the input's element count
(N·C, times d1·…·dk) and 'sum' is the plain sum: Torch7's MSECriterion with sizeAverage true
and false.]],
  gradient = "∂ℓ/∂x_j = 2·(x_j − s_y,j).",
  notes = [[
The vertices are computed in f64 where they are used (no C×C table is kept); they agree
with Torch7's iterative construction to rounding.  Predictions: the class whose vertex has
the largest dot product with the outputs (`crit:predictions(x)` gives the N×C dot products,
Torch7's getPredictions, and `crit:top_prediction(x)` their argmax per row, 0-based, Torch7's
getTopPrediction).  'none' gives each sample's squared distance (Torch7 has no such
reduction).  Torch7's constructor took nClasses; here the class count is the input's size
along axis 1 (any C from one call to the next), and the criterion has no nClasses or
simplex field: the vertices are the columns of the predictions of the identity matrix.]],
}
