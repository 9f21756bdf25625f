/*
 * cross_entropy.h — the validated problem handed by core/cross_entropy.c to the CPU
 * (core/cpu/cross_entropy.c) and CUDA (kernels/cross_entropy.cu) backends.  Internal.
 *
 * Samples are indexed i = (n, s), n < N, s < S (S = d1⋯dk collapsed to one axis).  Every
 * tensor is addressed as base + n·sn + s·ss (+ j·sc along classes), strides in elements.
 * Per sample, with c_ij = w_j·(a·t_ij + b) (t one-hot for class indices, where the
 * weighted positive term is a·w_y) the loss is ℓ_i = Σ_j c_ij·(lse_i − x_ij) and
 * ∂ℓ_i/∂x_ij = (Σ_k c_ik)·p_ij − c_ij.
 */
#ifndef PLOSS_CROSS_ENTROPY_INTERNAL_H
#define PLOSS_CROSS_ENTROPY_INTERNAL_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PLOSS_TARGET_INDEX = 0, /* class indices (t_dtype i64 or i32)       */
    PLOSS_TARGET_PROB = 1   /* probabilities of the input's shape        */
} ploss_target_kind;

typedef struct ploss_ce_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_target_kind target_kind;
    int64_t N, S, C;

    /* input logits */
    const void *x; ploss_dtype x_dtype; int64_t x_sn, x_ss, x_sc;
    /* target: indices (x_sc unused) or probabilities */
    const void *t; ploss_dtype t_dtype; int64_t t_sn, t_ss, t_sc;
    /* class weights, NULL = all ones */
    const void *w; ploss_dtype w_dtype; int64_t w_s;

    double a, b;             /* smoothing coefficients: target a·t + b      */
    int64_t ignore_index;    /* class-index targets only                    */
    double scale;            /* fused: multiplier of the gradient           */
    /* Focal modulation (softmax focal, LOSSES.md §3.1: ℓ_i = −(1 − p_y)^γ log p_y,
     * ∂ℓ_i/∂x_ij = G_i·(p_ij − [j = y]) with G_i = (1 − p_y)^γ·(1 + γ·p_y·(−log p_y)/(1 − p_y))).
     * Set only by the CUDA softmax focal backend (kernels/softmax_focal.cu), which hands
     * it row-contiguous class-index problems without class weights and a = 1, b = 0; the
     * CUDA backend then returns PLOSS_ERR_UNSUPPORTED, having written nothing but its
     * workspace, when the rows do not fit its register-row kernel (or the cluster launch is
     * refused).  core/cross_entropy.c leaves it 0. */
    int focal;
    double focal_gamma;

    /* loss: per sample (NONE) or one scalar (MEAN/SUM); f32 or f64 */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn, l_ss;
    /* saved log-sum-exp per sample (forward: written if non-NULL; backward: read if
     * non-NULL, else recomputed); f32 or f64 */
    void *lse; ploss_dtype lse_dtype; int64_t lse_sn, lse_ss;
    /* upstream gradient (backward): scalar (MEAN/SUM) or per sample (NONE) */
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn, gl_ss;
    /* gradient output, the input's dtype */
    void *grad; int64_t g_sn, g_ss, g_sc;
} ploss_ce_problem;

/* Backends: same semantics; the CPU one is always built. */
ploss_status ploss_cpu_cross_entropy(ploss_ctx_t *ctx, const ploss_ce_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_cross_entropy(ploss_ctx_t *ctx, const ploss_ce_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
