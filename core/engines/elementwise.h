/*
 * elementwise.h — the validated problem handed by core/engines/elementwise.c to the CPU (core/cpu/elementwise/sigmoid.c)
 * and CUDA (kernels/elementwise/sigmoid.cu) backends of the elementwise losses: the sigmoid
 * family (binary_cross_entropy_with_logits, sigmoid_focal) and the pointwise criteria of
 * PyTorch (mse_loss, l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy,
 * soft_margin_loss, kl_div, hinge_embedding_loss, poisson_nll_loss, hinge_loss).  Internal.
 *
 * Every tensor is addressed with the same (collapsed) shape: dims of size 1 are dropped and
 * neighbouring dims that are contiguous in every tensor are merged, so dense inputs become
 * one axis.  Element k (row-major over `shape`) of tensor T is at Σ_d idx_d(k)·T_st[d].
 * Broadcast tensors (weight, pos_weight) have stride 0 in their broadcast dims.
 *
 * Per element, with σ = sigmoid, sp = softplus, a₁/a₀ the α weights (1/1 when disabled):
 *   BCE:             ℓ = w·[pw·y·sp(−x) + (1 − y)·sp(x)]
 *   FOCAL_TV:        ℓ = (a₁y + a₀(1−y))·q^γ·[y·sp(−x) + (1−y)·sp(x)],  q = y·σ(−x) + (1−y)·σ(x)
 *   FOCAL_REFERENCE: ℓ = |y − σ(x)|^γ·[a₁·y·sp(−x) + a₀·(1−y)·sp(x)]
 * and with d = x − y, β the threshold (smooth_l1_loss's β, huber_loss's δ), w the weight
 * (1 without one):
 *   MSE:         ℓ = w·d²
 *   TARGET_WEIGHTED_MSE: ℓ = (x − w·y)²  (w the weight tensor, scaling the target)
 *   L1:          ℓ = w·|d|
 *   SMOOTH_L1:   ℓ = |d| < β ? d²/(2β) : |d| − β/2
 *   HUBER:       ℓ = w·(|d| < β ? d²/2 : β·(|d| − β/2))
 *   BCE_PROB:    ℓ = −w·[y·max(log x, −100) + (1 − y)·max(log(1 − x), −100)]  (x a probability)
 *   SOFT_MARGIN: ℓ = sp(−y·x)
 *   KL_DIV:      ℓ = y·log y − y·x (0 where y = 0);   KL_DIV_LOG_TARGET: ℓ = e^y·(y − x)
 *   HINGE_EMBEDDING (margin m = β): ℓ = [y ≠ −1]·x + [y ≠ 1]·max(0, m − x)
 *   HINGE (margin m = β): ℓ = max(0, m − y·x)
 *   POISSON_NLL_LOG: ℓ = e^x − y·x;   POISSON_NLL (ε = β): ℓ = x − y·log(x + ε)
 *   the _FULL kinds add [y > 1]·(y·log y − y + ½·log(2π·y)) (Stirling's log y!)
 * (the derivatives are written out in core/ploss_losses.h).
 */
#ifndef PLOSS_SIGMOID_INTERNAL_H
#define PLOSS_SIGMOID_INTERNAL_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PLOSS_SIGMOID_BCE = 0,
    PLOSS_SIGMOID_FOCAL_TORCHVISION = 1,
    PLOSS_SIGMOID_FOCAL_REFERENCE = 2,
    /* the pointwise criteria: a few operations of (x, y), no sigmoid */
    PLOSS_EW_MSE = 3,
    PLOSS_EW_L1 = 4,
    PLOSS_EW_SMOOTH_L1 = 5,
    PLOSS_EW_HUBER = 6,
    PLOSS_EW_BCE_PROB = 7,
    PLOSS_EW_SOFT_MARGIN = 8,
    PLOSS_EW_KL_DIV = 9,
    PLOSS_EW_KL_DIV_LOG_TARGET = 10,
    PLOSS_EW_HINGE_EMBEDDING = 11,
    PLOSS_EW_POISSON_NLL_LOG = 12,
    PLOSS_EW_POISSON_NLL = 13,
    PLOSS_EW_POISSON_NLL_LOG_FULL = 14,
    PLOSS_EW_POISSON_NLL_FULL = 15,
    PLOSS_EW_HINGE = 16,
    PLOSS_EW_TARGET_WEIGHTED_MSE = 17,
    /* the number of kinds: each place that computes a kind's maths asserts it, so that a
     * new kind is added there too (docs/ADDING_A_LOSS.md) instead of falling through to
     * another kind's maths */
    PLOSS_EW_KIND_COUNT = 18
} ploss_sigmoid_kind;

/* The kinds computed by the pointwise terms (no sigmoid). */
#define PLOSS_EW_IS_POINTWISE(kind) ((kind) >= PLOSS_EW_MSE)

/* ∂ℓ/∂x times the upstream factor om (dx = ∂ℓ/∂x of element (x, y), β the margin).  The
 * hinge kinds pass om only through their active branches, a NaN or infinite om included —
 * autograd's clamp_min and where backward give 0 elsewhere, not 0·NaN; hinge embedding's
 * two branches each on its own (a label other than ±1 takes both: −om + om, NaN for a NaN
 * om, as PyTorch's sum of the two where branches). */
#define PLOSS_EW_UPSTREAM(kind, om, dx, x, y, beta)                                                      \
    ((kind) == PLOSS_EW_HINGE_EMBEDDING ? ((y) != 1 && (beta) - (x) >= 0 ? -(om) : 0) + ((y) != -1 ? (om) : 0) \
     : (kind) == PLOSS_EW_HINGE         ? ((y) * (x) < (beta) ? -(y) * (om) : 0)                           \
                                        : (om) * (dx))

typedef struct ploss_sigmoid_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_sigmoid_kind kind;

    int ndim;                        /* collapsed rank, 1..PLOSS_MAX_DIMS          */
    int64_t shape[PLOSS_MAX_DIMS];   /* collapsed shape                            */
    int64_t numel;                   /* element count of the input (may be 0)      */
    int64_t mean_divisor;            /* MEAN: numel, or the first dim for batchmean */
    int weight_mean;                 /* MEAN divides by Σ w over the elements instead
                                        (weighted MSE and L1, PyTorch's); a zero Σ w
                                        gives the gradient factor 0                    */

    const void *x; ploss_dtype x_dtype; int64_t x_st[PLOSS_MAX_DIMS];   /* logits        */
    const void *t; ploss_dtype t_dtype; int64_t t_st[PLOSS_MAX_DIMS];   /* float targets */
    const void *w; ploss_dtype w_dtype; int64_t w_st[PLOSS_MAX_DIMS];   /* NULL = 1      */
    const void *pw; ploss_dtype pw_dtype; int64_t pw_st[PLOSS_MAX_DIMS]; /* NULL = 1     */

    double a1, a0;  /* focal α weights of the positive / negative term (1, 1: disabled) */
    double gamma;   /* focal γ ≥ 0                                                      */
    double beta;    /* SMOOTH_L1's β ≥ 0, HUBER's δ > 0, HINGE_EMBEDDING's and HINGE's margin, POISSON_NLL's ε */
    double scale;   /* fused: gradient multiplier                                       */

    /* loss: elementwise (NONE, l_st) or one scalar (MEAN/SUM); f32 or f64 */
    void *loss; ploss_dtype loss_dtype; int64_t l_st[PLOSS_MAX_DIMS];
    /* upstream gradient (backward): one scalar (MEAN/SUM) or elementwise (NONE) */
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_st[PLOSS_MAX_DIMS];
    /* gradient output, the input's dtype */
    void *grad; int64_t g_st[PLOSS_MAX_DIMS];

    /* CUDA, set by its launcher where weight_mean: Σ w on the device */
    const double *weight_sum;
} ploss_sigmoid_problem;

ploss_status ploss_cpu_sigmoid(ploss_ctx_t *ctx, const ploss_sigmoid_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_sigmoid(ploss_ctx_t *ctx, const ploss_sigmoid_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
