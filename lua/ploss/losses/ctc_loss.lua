-- Connectionist temporal classification: the negative log-likelihood of a label sequence
-- summed over every frame-level alignment of it, by the forward-backward recursions.
return {
  name = "ctc_loss",
  criterion = "CTCLoss",
  title = "Connectionist temporal classification (CTC) loss",
  source = "Graves, Fernández, Gomez and Schmidhuber, \"Connectionist Temporal Classification: " ..
    "Labelling Unsegmented Sequence Data with Recurrent Neural Networks\", ICML 2006 (PyTorch's " ..
    "nn.CTCLoss: its arguments, reductions, zero_infinity and gradient)",
  shape = "sequence",
  policy = "ctc",
  target = "sequences",
  inputs = {
    { "log_probs", "log-probabilities over the C classes (a log_softmax over the last dim) of T frames of " ..
      "N sequences" },
  },
  input_layout = "sequence",
  tensors = {
    { name = "input_lengths", kind = "lengths", required = true,
      doc = "the frames of each sequence, N integers in [0, T]: an i64/i32 tensor of shape [N] on the input's " ..
        "device (0-d or [1] for one T×C sequence); in Lua also a list of integers, or an integer for one T×C " ..
        "sequence.  Frames past a sequence's length are not read and get a zero gradient" },
    { name = "target_lengths", kind = "lengths", required = true,
      doc = "the labels of each target, N integers >= 0 (at most S with padded N×S targets), given as " ..
        "input_lengths" },
  },
  options = {
    { "blank", "int64", 0, min = 0, range = "an integer in [0, C)", doc = "the class index of the blank" },
    { "logits", "bool", false,
      doc = "the input holds logits: the loss takes their log_softmax over the C classes itself (no " ..
        "log-probability tensor is made; the gradient is the same, that of the logits)" },
    { "zero_infinity", "bool", false,
      doc = "an infinite loss (no alignment of the target fits its input length) and its gradient become 0" },
  },
  formula = [[
For sequence n with input length T_n, target l = (l_1 … l_L), L = target_lengths[n], and
y_t(c) = exp(log_probs[t, n, c]): the extended target l' = (b, l_1, b, l_2, …, b, l_L, b) of
2L + 1 symbols (b the blank), and the forward variables, in log space,

    α_0(0) = log y_0(b),  α_0(1) = log y_0(l_1),  α_0(s) = −∞ for s > 1
    α_t(s) = log y_t(l'_s) + lse(α_{t−1}(s), α_{t−1}(s − 1), α_{t−1}(s − 2))

where the third term counts only when l'_s is not blank and l'_s ≠ l'_{s−2}.  The loss is

    ℓ_n = −lse(α_{T_n−1}(2L), α_{T_n−1}(2L − 1))     (α_{T_n−1}(2L) alone when L = 0)

= −log of the total probability of every alignment of T_n frames that collapses (repeats
merged, then blanks removed) to l; a sequence of T_n = 0 frames has ℓ_n = 0 for L = 0.  ℓ_n = +∞
when no alignment exists (T_n below L plus the number of equal neighbours in l), 0 with
zero_infinity.  'mean'
averages ℓ_n / max(L, 1) over the N sequences (PyTorch's), 'sum' adds ℓ_n, 'none' gives ℓ_n.]],
  gradient = [[
With the backward variables β_t(s) (the same recursion from the end, β including y_t(l'_s))
and γ_t(c) = lse over the s with l'_s = c of α_t(s) + β_t(s):

    ∂ℓ_n/∂x[t, n, c] = exp(log_probs[t, n, c]) − exp(γ_t(c) + ℓ_n − log_probs[t, n, c])

for t < T_n, 0 for t ≥ T_n, and for finite ℓ_n the second term 0 where γ_t(c) = −∞ (no
alignment passes (t, c): a class outside the target, or log_probs = −∞ there, e.g. a masked
class, where PyTorch's formula gives NaN).  This is PyTorch's gradient, the derivative of ℓ_n with respect to
the logits x that log_probs = log_softmax(x) came from (Graves et al.'s eq. 16).  Its sum over
c is 0, so a log_softmax's backward passes it through unchanged and a network trained through
one gets the exact gradient; taken alone it is not ∂ℓ_n/∂log_probs (that is its second term
negated), and finite differences of log_probs compare with it only through a log_softmax.  An
infinite ℓ_n without zero_infinity gives NaN gradients for its frames (as PyTorch's).]],
  notes = [[
The targets are N×S with each sample's labels first in its row (padding past target_lengths[n]
is not read), or 1-D with the N targets one after another (Σ target_lengths labels).  Every
label read must be in [0, C) and not the blank (INVALID_LABEL naming it); lengths outside their
ranges are SHAPE errors naming the sample.  The lengths and the targets are read on the host (a
CUDA input copies them there first, as PyTorch's CUDA kernel does its lengths): every check
happens before anything is written.  The CPU computes in f64; CUDA in fp32 (f64 for f64 input),
one block per sequence for the recursions (α and β at once) and one per frame for the gradient,
with α and β (T × (2S + 1) values per sequence, S the longest target, and one f64 offset per
frame) in its workspace for backward and fused — forward alone keeps two frames of α.  Each
frame of α and β is stored relative to an offset kept in f64, so the fp32 error does not grow
with the size of α (about log C per frame): measured against f64, 2e-4 of the largest gradient
entry at T = 1000, C = 5000, where PyTorch's fp32 CTC has 7e-3.  Nothing is kept between forward and backward: backward
runs the recursions again.]],
}
