/*
 * softmax2.h — the validated problem of the "softmax family II" losses with class-index
 * targets (large-margin softmax, Taylor cross-entropy, PC-softmax cross-entropy, OHEM on
 * cross-entropy and on large-margin; LOSSES.md §2.2, §2.3, §2.5, §2.7), handed by
 * core/softmax2.c to the CPU (core/cpu/softmax2.c) and CUDA (kernels/softmax2.cu)
 * backends.  Internal.
 *
 * Samples i = (n, s), n < N, s < S (S = d1⋯dk collapsed to one axis).  Every tensor is
 * addressed as base + n·sn + s·ss (+ j·sc along classes / state components), strides in
 * elements.  Per valid sample (label y ≠ ignore_index), with x the logits row:
 *
 *  LARGE_MARGIN (Kobayashi, BMVC 2019; λ = lam), 𝒩 = {j ≠ y}, u = 1/(C−1):
 *     lse = log Σ_j e^x_j, lse' = log Σ_𝒩 e^x_j, q_j = e^(x_j − lse'), E = Σ_𝒩 q_j·x_j
 *     ℓ = lse − x_y + (λ/2)·(E − u·Σ_𝒩 x_j)
 *     ∂ℓ/∂x_y = p_y − 1, ∂ℓ/∂x_j = p_j + (λ/2)·(q_j·(x_j − E + 1) − u)   (j ∈ 𝒩)
 *     state (3 per sample): lse, lse', E.
 *  TAYLOR_CE (order n even): F_j = f_n(x_j) = Σ_{k≤n} x_j^k/k!, Z = Σ_j F_j
 *     ℓ = log Z − log F_y,  ∂ℓ/∂x_k = f_{n−1}(x_k)·(1/Z − [k = y]/F_y);  state: Z.
 *  PC_SOFTMAX (priors w): lse_w = log Σ_j w_j·e^x_j
 *     ℓ = lse_w − x_y,  ∂ℓ/∂x_k = w_k·e^(x_k − lse_w) − [k = y];  state: lse_w.
 *  CROSS_ENTROPY (OHEM only): ℓ = lse − x_y,  ∂ℓ/∂x_k = p_k − [k = y].
 *
 * OHEM (ohem = 1; loss CROSS_ENTROPY or LARGE_MARGIN): the score of a sample is
 * s_i = p_{i,y_i} rounded to f32; its 32-bit key is the bit pattern of s_i (monotone for
 * s ≥ 0; NaN → PLOSS_OHEM_NAN_KEY) and PLOSS_OHEM_IGNORED_KEY for ignored samples.  With
 * k_(r) the r-th smallest key of all M samples, the kept set is {valid i : key_i ≤ t*},
 * t* = max(key(τ), k_(n_min)) (no k term when n_min = 0; every valid sample when n_min ≥ M,
 * as the reference skips mining then), so every
 * sample tied with the n_min-th hardest is kept.  Reductions are over the kept set.
 */
#ifndef PLOSS_SOFTMAX2_INTERNAL_H
#define PLOSS_SOFTMAX2_INTERNAL_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PLOSS_SM2_LARGE_MARGIN = 0,
    PLOSS_SM2_TAYLOR_CE = 1,
    PLOSS_SM2_PC_SOFTMAX = 2,
    PLOSS_SM2_CROSS_ENTROPY = 3
} ploss_sm2_loss;

#define PLOSS_OHEM_NAN_KEY 0x7FC00000u     /* above +inf, below the ignored key */
#define PLOSS_OHEM_IGNORED_KEY 0xFFFFFFFFu /* ignored samples sort last          */

typedef struct ploss_sm2_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_sm2_loss loss_kind;
    int64_t N, S, C;

    /* input logits */
    const void *x; ploss_dtype x_dtype; int64_t x_sn, x_ss, x_sc;
    /* class indices, i64 or i32 */
    const void *t; ploss_dtype t_dtype; int64_t t_sn, t_ss;
    /* PC-softmax class priors (C values, any float dtype) */
    const void *w; ploss_dtype w_dtype; int64_t w_s;

    int64_t ignore_index;
    double lam;              /* large-margin λ                               */
    int order;               /* Taylor order n (even, >= 2)                  */
    double scale;            /* fused: multiplier of the gradient            */

    int ohem;                /* 1: mine hard samples first                   */
    uint32_t thresh_key;     /* key of τ (the score threshold, rounded to f32) */
    int64_t n_min;           /* resolved: ⌊M/16⌋ for the default             */

    /* loss: per sample (NONE) or one scalar (MEAN/SUM); f32 or f64 */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn, l_ss;
    /* saved state: n_state components per sample at n·st_sn + k·st_sk + s·st_ss (forward:
     * written if non-NULL; backward: read if non-NULL, else recomputed); f32 or f64 */
    void *state; ploss_dtype state_dtype; int n_state; int64_t st_sn, st_ss, st_sk;
    /* upstream gradient (backward): scalar (MEAN/SUM) or per sample (NONE) */
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn, gl_ss;
    /* gradient output, the input's dtype */
    void *grad; int64_t g_sn, g_ss, g_sc;
} ploss_sm2_problem;

ploss_status ploss_cpu_softmax2(ploss_ctx_t *ctx, const ploss_sm2_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_softmax2(ploss_ctx_t *ctx, const ploss_sm2_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
