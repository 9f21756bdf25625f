-- What the box regression losses share: one C options struct (ploss_box_loss_opts), its
-- options, the per-box tensors, and the text every one of them repeats.
local B = {}

B.enums = {
  { ctype = "ploss_box_format", prefix = "PLOSS_BOX_FORMAT_", count = "PLOSS_BOX_FORMAT_COUNT",
    doc = "How the four numbers of a box read (input and target alike).",
    values = {
      { "xyxy", "XYXY", "(x1, y1, x2, y2): two corners, x1 ≤ x2 and y1 ≤ y2" },
      { "xywh", "XYWH", "(x1, y1, w, h): a corner and the size, w ≥ 0 and h ≥ 0" },
      { "cxcywh", "CXCYWH", "(cx, cy, w, h): the centre and the size, w ≥ 0 and h ≥ 0" },
    } },
  { ctype = "ploss_ciou_gradient", prefix = "PLOSS_CIOU_GRADIENT_", count = "PLOSS_CIOU_GRADIENT_COUNT",
    doc = "The gradient of CIoU's aspect-ratio term α·v (α is a constant in both).",
    values = {
      { "exact", "EXACT", "the derivative of v, as torchvision's autograd gives it: ∂atan2(w, h)/∂w = " ..
        "h/(w² + h²), ∂atan2(w, h)/∂h = −w/(w² + h²) (0 for a point box)" },
      { "paper", "PAPER", "Zheng et al.'s gradient: the factor 1/(w² + h²) of the exact one replaced by 1, " ..
        "so that small boxes do not get large steps" },
    } },
}

B.options = {
  { "eps", "double", 1e-7, min = 0,
    doc = "ε of the denominators U + ε, A_C + ε, c² + ε and of CIoU's α (torchvision's default)" },
  { "box_format", "enum", "xyxy", ctype = "ploss_box_format", doc = "how a box's four numbers read" },
  { "ciou_gradient", "enum", "exact", ctype = "ploss_ciou_gradient",
    doc = "the gradient of CIoU's aspect term (complete_box_iou_loss only): 'exact' (torchvision's) or " ..
      "'paper' (its factor 1/(w² + h²) replaced by 1)" },
}

B.tensors = {
  { name = "weight", kind = "sample_vector", doc = "N weights, one per box, any float dtype: the box's loss times its weight" },
  { name = "ignore", kind = "sample_vector", mask = true,
    doc = "N values, one per box, any dtype (u8 as a mask; a Lua list: booleans or 0/1), each 0 or 1: 1 leaves " ..
      "the box out: its loss and gradient are 0, 'mean' does not count it and its coordinates are not checked; " ..
      "another value (0.5, NaN, 2) is an error, not a box left out" },
}

B.common_formula = [[
With box_format 'xyxy', a predicted box b = (x1, y1, x2, y2) of width w = x2 − x1 and
height h = y2 − y1, and its target (X1, Y1, X2, Y2) of width W and height H:

    I   = max(min(x2, X2) − max(x1, X1), 0) · max(min(y2, Y2) − max(y1, Y1), 0)
    U   = w·h + W·H − I
    IoU = I/(U + ε)

(torchvision's intersection: I = 0 unless both overlaps are > 0).  Two boxes of zero area
(U = 0) have IoU = 0, unless they are the same box: then every loss is 0 with a zero
gradient (torchvision gives IoU 0: a point or a segment predicted exactly would cost 1).]]

B.common_gradient = [[
Exact, with respect to the predicted box in its box_format (the target gets none): every
min and max splits a tie ½ to each side, as PyTorch's minimum and maximum do, and the
intersection's gradient is 0 where an overlap is clamped at 0.]]

B.common_notes = [[
The boxes are N×4 tensors, the target in the input's box_format.  A box of the input or of
the target with x2 < x1 or y2 < y1 (w < 0 or h < 0 in 'xywh' and 'cxcywh') is an error,
INVALID_BOX, naming the box (CPU: before anything is written; CUDA: the kernel records it
in the context's error slot, the box's loss is NaN and its gradient 0, and the next call
that synchronises raises it); ignored boxes are not checked.  Boxes of zero width or height
give finite values and gradients; where the boxes are degenerate together (two segments on
one line: the union or the enclosing box of area 0) the loss has no derivative, and the
gradient given, the formulas' with the ties split as PyTorch splits them, can be of order
1/eps.  NaN or infinite coordinates are not checked.  A NaN makes the box's loss and
gradient NaN.  An infinite one gives what the formulas give, as torchvision's do: the IoU loss
of an infinitely wide box over a finite target is 1 (I/U = I/∞ = 0) with a NaN gradient
wherever the chain rule multiplies 0 by ∞ (its y-coordinates there: the union's derivative
is the box's infinite width); GIoU, DIoU and CIoU are NaN (∞/∞ in their enclosing-box and
distance terms).  weight multiplies each box's loss; 'mean' divides by the
number of boxes that are not ignored (not by the sum of the weights), and with none left it
is NaN with a zero gradient (torchvision returns 0 for an empty batch).  The default
reduction is 'mean', as every ploss criterion's, where torchvision's functions
(generalized_box_iou_loss and the others) default to reduction = 'none': pass
reduction = 'none' for their per-box losses.  CUDA computes f16/bf16/f32 boxes in f32 with
the hardware's reciprocal refined by one Newton step (within an ulp) and a polynomial atan2
(absolute error below 7e-8); a nonzero denominator below 2^-126 (boxes whose sides are below
about 1e-19) has an infinite reciprocal there, so such boxes get a non-finite gradient; f64
boxes use exact divisions.]]

return B
