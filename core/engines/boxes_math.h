/*
 * boxes_math.h — the maths of one box of the box regression losses, written once for the
 * CPU (core/cpu/boxes/boxes.c, in double) and CUDA (kernels/boxes/boxes.cu, in float and
 * double).  Included with
 *   REAL        the compute type
 *   F(name)     name with the type's suffix
 *   BOX_FN      the qualifiers of a function (static inline; __device__ __forceinline__)
 *   ATAN2       the type's atan2 (only ever called with x >= 0)
 * and optionally BOX_FMAX, BOX_FMIN: the type's fmax and fmin (one instruction on a GPU;
 * the same values as the comparisons otherwise used, NaN aside, which makes the loss NaN
 * either way), and BOX_RCP: 1/x within an ulp (default: the division)
 * defined, once per compute type (no include guard).  Plain C that nvcc also compiles.
 * Internal.
 *
 * A box is (x1, y1, x2, y2) after F(box_to_xyxy); the similarity s of a predicted box p and
 * its target t (torchvision's definitions, see core/ploss_losses.h), whose loss is 1 − s:
 *   I = max(min(x2,X2) − max(x1,X1), 0)·max(min(y2,Y2) − max(y1,Y1), 0), both overlaps > 0
 *   U = w·h + W·H − I,  IoU = I/(U + ε₀)  (U = 0: the same box has s = 1 and gradient 0,
 *   two others IoU = 0)
 *   IOU:  IoU
 *   GIOU: IoU − (A_C − U)/(A_C + ε₀),  A_C = cw·ch the enclosing box's area
 *   DIOU: IoU − ρ²/c²,  c² = cw² + ch² + ε,  ρ² the squared distance of the centres
 *   CIOU: DIOU − α·v,  v = (4/π²)(atan2(W,H) − atan2(w,h))²,  α = v/(1 − IoU + v + ε) constant
 * ε₀ = ε for the losses; torchvision's pairwise functions (box_iou, …) have ε₀ = 0.  The
 * gradient is the reverse-mode derivative of the loss 1 − s with respect to p: each min/max
 * passes its adjoint to the larger (smaller) operand and half of it to each of two equal
 * ones (PyTorch's maximum/minimum), a clamped overlap passes none.
 */

#ifndef BOX_RCP
#define BOX_RCP(x) ((REAL)1 / (x))
#endif

/* The adjoint of coordinate a where a max or min of a and b passes `above` to a when a > b,
 * `below` when a < b, and `tie` (the mean of the two, PyTorch's split) when a == b. */
BOX_FN REAL F(box_pick)(REAL a, REAL b, REAL above, REAL below, REAL tie)
{
    return a > b ? above : a < b ? below : tie;
}

#ifdef BOX_FMAX
BOX_FN REAL F(box_max)(REAL a, REAL b) { return BOX_FMAX(a, b); }
BOX_FN REAL F(box_min)(REAL a, REAL b) { return BOX_FMIN(a, b); }
#else
BOX_FN REAL F(box_max)(REAL a, REAL b) { return a >= b ? a : b; }
BOX_FN REAL F(box_min)(REAL a, REAL b) { return a <= b ? a : b; }
#endif

/* The four numbers r of a box in `format` as (x1, y1, x2, y2) in b; returns 0 when the box
 * is invalid (x2 < x1 or y2 < y1; a negative width or height), 1 otherwise (NaN passes). */
BOX_FN int F(box_to_xyxy)(int format, const REAL *r, REAL *b)
{
    if (format == PLOSS_BOX_FORMAT_XYXY) {
        b[0] = r[0]; b[1] = r[1]; b[2] = r[2]; b[3] = r[3];
        return !(r[2] < r[0] || r[3] < r[1]);
    }
    if (format == PLOSS_BOX_FORMAT_XYWH) {
        b[0] = r[0]; b[1] = r[1]; b[2] = r[0] + r[2]; b[3] = r[1] + r[3];
    } else { /* CXCYWH */
        const REAL hw = r[2] / 2, hh = r[3] / 2;
        b[0] = r[0] - hw; b[1] = r[1] - hh; b[2] = r[0] + hw; b[3] = r[1] + hh;
    }
    return !(r[2] < 0 || r[3] < 0);
}

/* The gradient g with respect to (x1, y1, x2, y2) as the gradient with respect to the four
 * numbers of the box in `format`, in place. */
BOX_FN void F(box_grad_from_xyxy)(int format, REAL *g)
{
    if (format == PLOSS_BOX_FORMAT_XYWH) {
        g[0] += g[2];
        g[1] += g[3];
    } else if (format == PLOSS_BOX_FORMAT_CXCYWH) {
        const REAL gx1 = g[0], gy1 = g[1];
        g[0] = gx1 + g[2];
        g[1] = gy1 + g[3];
        g[2] = (g[2] - gx1) / 2;
        g[3] = (g[3] - gy1) / 2;
    }
}

/* The similarity s of predicted box p and target t (both xyxy) and, with want_grad, the
 * gradient of the loss 1 − s with respect to p in g[0..4).  kind: ploss_box_kind; eps0, eps:
 * ε₀ and ε above; paper: CIoU's gradient of v with the factor 1/(w² + h²) replaced by 1. */
BOX_FN REAL F(box_similarity)(int kind, int paper, REAL eps0, REAL eps, const REAL *p, const REAL *t, int want_grad,
                              REAL *g)
{
    const REAL x1 = p[0], y1 = p[1], x2 = p[2], y2 = p[3];
    const REAL X1 = t[0], Y1 = t[1], X2 = t[2], Y2 = t[3];
    const REAL w = x2 - x1, h = y2 - y1, W = X2 - X1, H = Y2 - Y1;

    /* intersection and union */
    const REAL ow = F(box_min)(x2, X2) - F(box_max)(x1, X1);
    const REAL oh = F(box_min)(y2, Y2) - F(box_max)(y1, Y1);
    const int overlap = ow > 0 && oh > 0;
    const REAL I = overlap ? ow * oh : (REAL)0;
    const REAL U = w * h + W * H - I;

    /* adjoints of the loss: dI, dU (I and U as independent), dw, dh (the predicted size,
     * besides its area), dcw, dch (the enclosing box), ddx, ddy (the centre offsets) */
    REAL dI = 0, dU = 0, dw = 0, dh = 0, dcw = 0, dch = 0, ddx = 0, ddy = 0;
    REAL iou;
    if (U == 0) { /* two boxes of zero area: the same box or not; a constant */
        if (x1 == X1 && y1 == Y1 && x2 == X2 && y2 == Y2) {
            /* the minimum, loss 0: no step (GIoU's ½-split ties at A_C = 0 would give
             * a ±1/ε one) */
            g[0] = g[1] = g[2] = g[3] = 0;
            return 1;
        }
        iou = 0;
    } else {
        const REAL rD = BOX_RCP(U + eps0); /* one reciprocal: the rest are products */
        iou = I * rD;
        dI = -rD;
        dU = iou * rD;
    }
    REAL s = iou;

    const REAL cw = F(box_max)(x2, X2) - F(box_min)(x1, X1);
    const REAL ch = F(box_max)(y2, Y2) - F(box_min)(y1, Y1);
    if (kind == PLOSS_BOX_GIOU) {
        const REAL Ac = cw * ch, Dc = Ac + eps0;
        if (Dc != 0) { /* Dc = 0 only with ε₀ = 0 and A_C = U = 0: the term is 0 */
            const REAL rDc = BOX_RCP(Dc);
            s -= (Ac - U) * rDc;
            dU -= rDc;
            const REAL dAc = (U + eps0) * rDc * rDc;
            dcw = dAc * ch;
            dch = dAc * cw;
        }
    } else if (kind >= PLOSS_BOX_DIOU) {
        const REAL c2 = cw * cw + ch * ch + eps;
        const REAL dx = (x2 + x1) / 2 - (X1 + X2) / 2, dy = (y2 + y1) / 2 - (Y1 + Y2) / 2;
        if (c2 > 0) { /* c2 = 0 only with ε = 0 for two equal points: ρ² = 0 */
            const REAL rho2 = dx * dx + dy * dy, rc2 = BOX_RCP(c2), d = rho2 * rc2;
            s -= d;
            const REAL dc2 = -d * rc2;
            ddx = 2 * dx * rc2;
            ddy = 2 * dy * rc2;
            dcw = 2 * cw * dc2;
            dch = 2 * ch * dc2;
        }
        if (kind == PLOSS_BOX_CIOU) {
            const REAL k = (REAL)0.40528473456935108578; /* 4/π² */
            /* atan2(W, H) − atan2(w, h) as one atan2: the angle between (H, W) and (h, w),
             * from their cross and dot products (both vectors in the first quadrant: the
             * dot is >= 0, the angle in [−π/2, π/2]).  A box of zero size has no direction
             * (atan2(0, 0) = 0): then the angle is the other box's, atan2(W, H) or
             * −atan2(w, h) = atan2(−w, h); cross and dot are both 0 only then. */
            REAL ay = W * h - w * H, ax = H * h + W * w;
            if (ax == 0 && ay == 0) {
                const int pz = w == 0 && h == 0;
                ay = pz ? W : -w;
                ax = pz ? H : h;
            }
            const REAL diff = ATAN2(ay, ax);
            const REAL v = k * diff * diff;
            const REAL alpha = v > 0 ? v * BOX_RCP(1 - iou + v + eps) : (REAL)0;
            s -= alpha * v;
            /* ∂(α·v)/∂atan2(w, h) = −2kα·diff; ∂atan2(w, h)/∂(w, h) = (h, −w)/(w² + h²) */
            const REAL r2 = w * w + h * h;
            const REAL scale = paper ? (REAL)1 : r2 > 0 ? BOX_RCP(r2) : (REAL)0;
            const REAL da = -2 * k * alpha * diff * scale;
            dw += da * h;
            dh -= da * w;
        }
    }
    if (!want_grad)
        return s;

    /* U = w·h + W·H − I, I = ow·oh where both overlaps are > 0 */
    dI -= dU;
    dw += dU * h;
    dh += dU * w;
    const REAL dow = overlap ? dI * oh : (REAL)0, doh = overlap ? dI * ow : (REAL)0;
    /* ow = min(x2, X2) − max(x1, X1), cw = max(x2, X2) − min(x1, X1), dx = (x1 + x2)/2 − … */
    const REAL hx = (dow + dcw) / 2, hy = (doh + dch) / 2; /* the adjoints of a tie */
    g[0] = -dw - F(box_pick)(x1, X1, dow, dcw, hx) + ddx / 2;
    g[2] = dw + F(box_pick)(x2, X2, dcw, dow, hx) + ddx / 2;
    g[1] = -dh - F(box_pick)(y1, Y1, doh, dch, hy) + ddy / 2;
    g[3] = dh + F(box_pick)(y2, Y2, dch, doh, hy) + ddy / 2;
    return s;
}
