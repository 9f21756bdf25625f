/*
 * softmax_focal.h — the validated problem handed by core/softmax_focal.c to the CPU
 * (core/cpu/softmax_focal.c) and CUDA (kernels/softmax_focal.cu) backends of the softmax
 * focal family: softmax_focal and dual_focal (LOSSES.md §2.6; formulas in core/ploss.h).
 * Internal.
 *
 * Samples are indexed i = (n, s), n < N, s < S (S = d1⋯dk collapsed to one axis), as in the
 * cross-entropy family: every tensor is addressed as base + n·sn + s·ss (+ j·sc along
 * classes), strides in elements.  Targets are class indices; a sample is valid when its
 * label is not ignore_index.  MEAN divides by the number of valid samples.
 */
#ifndef PLOSS_SOFTMAX_FOCAL_INTERNAL_H
#define PLOSS_SOFTMAX_FOCAL_INTERNAL_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PLOSS_SOFTMAX_FOCAL = 0, /* ℓ = −α_y (1 − p_t)^γ log p_t                 */
    PLOSS_DUAL_FOCAL = 1     /* ℓ = −Σ_j log(1 + ε − (p_j − [j = y])²)         */
} ploss_sfocal_kind;

typedef struct ploss_sfocal_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_sfocal_kind kind;
    int64_t N, S, C;

    /* input logits */
    const void *x; ploss_dtype x_dtype; int64_t x_sn, x_ss, x_sc;
    /* class indices, i64 or i32 */
    const void *t; ploss_dtype t_dtype; int64_t t_sn, t_ss;
    /* per-class α (softmax focal), NULL = all ones */
    const void *w; ploss_dtype w_dtype; int64_t w_s;

    double gamma;          /* softmax focal γ ≥ 0  */
    double eps;            /* dual focal ε > 0     */
    int64_t ignore_index;
    double scale;          /* fused: multiplier of the gradient */

    /* loss: per sample (NONE) or one scalar (MEAN/SUM); f32 or f64 */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn, l_ss;
    /* saved log-sum-exp per sample (forward: written if non-NULL; backward: read if
     * non-NULL, else recomputed); f32 or f64 */
    void *lse; ploss_dtype lse_dtype; int64_t lse_sn, lse_ss;
    /* upstream gradient (backward): scalar (MEAN/SUM) or per sample (NONE) */
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn, gl_ss;
    /* gradient output, the input's dtype */
    void *grad; int64_t g_sn, g_ss, g_sc;
} ploss_sfocal_problem;

ploss_status ploss_cpu_softmax_focal(ploss_ctx_t *ctx, const ploss_sfocal_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_softmax_focal(ploss_ctx_t *ctx, const ploss_sfocal_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
