-- Multi-label hinge loss on scores with a list of target classes per sample, PyTorch's
-- MultiLabelMarginLoss.
return {
  name = "multilabel_margin_loss",
  criterion = "MultiLabelMarginLoss",
  criterion_aliases = { "MultiLabelMarginCriterion" },
  title = "Multi-label margin loss",
  source = "PyTorch torch.nn.MultiLabelMarginLoss / torch.nn.functional.multilabel_margin_loss; " ..
    "Torch7 nn.MultiLabelMarginCriterion",
  shape = "rows",
  policy = "multilabel_margin",
  target = "index_list",
  input_doc = "N×C scores, f32/f16/bf16/f64, any strides; C >= 1 (rank 2, or one sample's C scores: " ..
    "PyTorch's unbatched form, with a C-entry target and a 0-d NONE loss; for more dims, move the " ..
    "classes last and view the input as (N·d1·…·dk)×C, as PyTorch reads the last axis).",
  target_doc = "class indices, i64 or i32, of the input's shape: each row lists its target classes " ..
    "first, in [0, C), and ends the list with -1 (any negative entry; the entries after it are " ..
    "not read; a row without one lists C classes).",
  options = {},
  formula = [[
Per sample with scores x, listed classes y_1 … y_L and T the set of them:

    ℓ = (1/C)·Σ_{k=1..L} Σ_{j ∉ T} max(0, 1 − x_{y_k} + x_j)

'mean' divides the sum of the ℓ by the number of samples, as PyTorch.]],
  gradient = [[
∂ℓ/∂x_j = (1/C)·#{k : 1 − x_{y_k} + x_j > 0} for an unlisted class j; for a listed class c,
−(1/C)·Σ_{k : y_k = c} #{j ∉ T : 1 − x_c + x_j > 0} (0 where the hinge is exactly 0).  A NaN
or infinite upstream gradient reaches only the active hinges: a sample with none active gets
0 (autograd's clamp backward), where PyTorch's kernel multiplies its zeros by it (NaN).]],
  notes = [[
A class listed twice counts twice, as in PyTorch's kernels.  A NaN hinge (a NaN score, or
+∞ − +∞) counts as active, as the multi-class margin loss's: the sample's loss is NaN and
the gradient takes its ±1/C (PyTorch's comparison z > 0 drops it).  An entry of a
list outside [0, C) is INVALID_LABEL (the CPU refuses the call before writing; on CUDA the
row adds nothing and the error comes at synchronisation).  A row is read up to its first
negative entry: any negative value ends the list, and what follows it is not checked
(PyTorch refuses an entry below −1 or from C on anywhere in the target).  Torch7's
MultiLabelMarginCriterion took 1-based classes ended by 0; here, as everywhere in ploss,
classes are 0-based and a list ends at −1: convert a Torch7 target with `target:add_(-1)`.  A single sample is a 1×C input
with a 1×C target, or C scores with a C-entry target.  CUDA computes the gradient of a listed class from every unlisted score
and the other way round, so in place it writes the gradient to a workspace of the input's
size first and copies it over the input.]],
}
