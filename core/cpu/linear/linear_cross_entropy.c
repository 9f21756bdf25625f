/*
 * linear_cross_entropy.c — CPU backend of the fused linear + cross-entropy
 * (core/engines/linear_cross_entropy.h), in f32 for f32/f16/bf16 inputs and f64 for f64
 * (linear_cross_entropy_impl.h, once for each):
 *   1. x and the weight loaded into X (N×D) and W (C×D);
 *   2. per tile of rows: the logits X_b·Wᵀ through the project's GEMM (OpenBLAS), at most
 *      TILE_ELEMS values (or opts.tile_rows rows); each row's bias added and capped
 *      (softcap), its loss, lse, entropy and, in place, its gradient G = ω·∂ℓ/∂z (in double,
 *      stored in the compute type); then ∂L/∂b += the column sums of G (in double, row
 *      order), ∂L/∂X_b = G·W and ∂L/∂W += Gᵀ·X_b (tile order, summed in the compute type);
 *   3. the losses reduced in row order; the gradients stored (the weight's and the bias's
 *      added to grad_weight and grad_bias with accumulate).
 */
#include <math.h>
#include <string.h>

#include "chunks.h"
#include "focal.h"
#include "isa.h"
#include "linear_cross_entropy.h"
#include "scalar.h"
#include "vmath.h"

enum { TILE_ELEMS = 1 << 22 };

#define PLOSS_REAL_IMPL "linear/linear_cross_entropy_impl.h"
#include "real_types.h"

/* D = 0: every logit is 0 (and its softcap too), so each row not ignored loses
 * log C + z_loss·log²C (label smoothing changes nothing among equal logits; focal: p_y = 1/C)
 * and the gradients are empty: no tile is formed (N may be huge, with broadcast labels). */
static ploss_status no_features(const ploss_linear_problem *p)
{
    if (p->pass == PLOSS_PASS_BACKWARD)
        return PLOSS_OK;
    const double lse = log((double)p->C);
    double row = lse;
    if (p->focal)
        (void)ploss_focal_factor(-lse, p->gamma, &row);
    ploss_cpu_store_constant_row_losses(p->loss, p->loss_dtype, p->l_sn, p->reduction, p->labels, p->label_dtype,
                                        p->y_sn, p->N, p->ignore_index, row + p->z_loss * lse * lse);
    return PLOSS_OK;
}

ploss_status PLOSS_ISA_FN(ploss_cpu_linear_cross_entropy)(ploss_ctx_t *ctx, const ploss_linear_problem *p)
{
    /* with a bias the logits differ, and lse / entropy are per-row outputs: the tiles */
    if (p->D == 0 && !p->bias && !p->lse && !p->entropy)
        return no_features(p);
    return p->dtype == PLOSS_F64 ? linear_cross_entropy_f64(ctx, p) : linear_cross_entropy_f32(ctx, p);
}

