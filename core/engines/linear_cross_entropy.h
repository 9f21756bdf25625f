/*
 * linear_cross_entropy.h — the validated problem handed by core/engines/margin.c to the CPU
 * (core/cpu/linear/) and CUDA (kernels/linear/) backends of the fused linear +
 * cross-entropy: N×D rows x (hidden states) against C×D weight rows w (a vocabulary), the
 * logits z_ij = x_i·w_j + b_j (an optional bias b, before the cap; capped to c·tanh(z/c) with a
 * softcap c > 0) and a softmax cross-entropy per row with label smoothing ε and z-loss:
 *
 *   ℓ_i = (1 − ε)·(lse_i − z_iy) + (ε/C)·Σ_j (lse_i − z_ij) + z_loss·lse_i²,
 *   ∂ℓ_i/∂z_ij = p_ij·(1 + 2·z_loss·lse_i) − (1 − ε)·[j = y_i] − ε/C  (× 1 − (z_ij/c)²),
 * or with `focal` the softmax focal loss in place of the cross-entropy (ε = 0):
 *   ℓ_i = u^γ·L + z_loss·lse_i²,  u = 1 − p_iy, L = −log p_iy,
 *   ∂ℓ_i/∂z_ij = F_i·(p_ij − [j = y_i]) + 2·z_loss·lse_i·p_ij,  F_i = u^γ·(1 + γ·p_iy·L/u).
 *
 * Both backends compute the logits in tiles of rows (a GEMM per tile), turn each tile into
 * G = ∂L/∂z in place, then ∂L/∂x_b = G_b·W, ∂L/∂W (+)= G_bᵀ·X_b and ∂L/∂b (+)= Σ_i G_i, tile
 * after tile.  Forward and fused may also write each row's lse_i and softmax entropy
 * H_i = lse_i − Σ_j p_ij·z_ij (0 at ignored rows).  The margin shape's front validates the
 * tensors (the same inputs as the margin losses, plus the bias and these outputs).
 * Internal.
 */
#ifndef PLOSS_LINEAR_CE_INTERNAL_H
#define PLOSS_LINEAR_CE_INTERNAL_H

#include "pairs.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ploss_linear_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_dtype dtype;             /* of x and weight (the gradients': gx_dtype, gw_dtype) */
    int64_t N, C, D;               /* rows, classes (the vocabulary), features             */
    ploss_pair_operand x, w;       /* x: N×D (sn, sd); w: C×D (sn along the classes)       */
    const void *labels; ploss_dtype label_dtype; int64_t y_sn;
    int64_t ignore_index;
    double label_smoothing, softcap, z_loss;
    int focal; double gamma;       /* the focal loss of each row (label_smoothing 0), γ    */
    int accumulate;                /* grad_w += rather than =                              */
    int64_t tile_rows;             /* 0: the backend's budget                              */
    double scale;                  /* fused: the gradient's multiplier                     */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn;
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn;
    ploss_pair_grad grad_x, grad_w;
    ploss_dtype gx_dtype, gw_dtype; /* dtype, or f32 for f16/bf16 inputs                 */
    const void *bias;              /* C values, or null: no bias                           */
    ploss_dtype b_dtype; int64_t b_s;
    void *grad_b;                  /* backward, fused with a bias: C values (+= with accumulate) */
    ploss_dtype gb_dtype; int64_t gb_s;
    void *lse, *entropy;           /* forward, fused: N values each, or null               */
    ploss_dtype stats_dtype;       /* of lse and entropy: loss_dtype                       */
    int64_t lse_s, ent_s;
} ploss_linear_problem;

ploss_status ploss_cpu_linear_cross_entropy(ploss_ctx_t *ctx, const ploss_linear_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_linear_cross_entropy(ploss_ctx_t *ctx, const ploss_linear_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
