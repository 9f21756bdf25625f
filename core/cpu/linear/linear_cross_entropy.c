/*
 * linear_cross_entropy.c — CPU backend of the fused linear + cross-entropy
 * (core/engines/linear_cross_entropy.h), in f32 for f32/f16/bf16 inputs and f64 for f64
 * (linear_cross_entropy_impl.h, once for each):
 *   1. x and the weight loaded into X (N×D) and W (C×D);
 *   2. per tile of rows: the logits X_b·Wᵀ through the project's GEMM (OpenBLAS), at most
 *      TILE_ELEMS values (or opts.tile_rows rows); each row capped (softcap), its loss and,
 *      in place, its gradient G = ω·∂ℓ/∂z (in double, stored in the compute type); then
 *      ∂L/∂X_b = G·W and ∂L/∂W += Gᵀ·X_b (tile order, summed in the compute type);
 *   3. the losses reduced in row order; the gradients stored (the weight's added to
 *      grad_weight with accumulate).
 */
#include <math.h>
#include <string.h>

#include "chunks.h"
#include "gemm.h"
#include "linear_cross_entropy.h"
#include "scalar.h"

enum { TILE_ELEMS = 1 << 20 };

#define PLOSS_REAL_IMPL "linear/linear_cross_entropy_impl.h"
#include "real_types.h"

/* D = 0: every logit is 0 (and its softcap too), so each row not ignored loses
 * log C + z_loss·log²C (label smoothing changes nothing among equal logits) and the
 * gradients are empty: no tile is formed (N may be huge, with broadcast labels). */
static ploss_status no_features(const ploss_linear_problem *p)
{
    if (p->pass == PLOSS_PASS_BACKWARD)
        return PLOSS_OK;
    const double lse = log((double)p->C), l0 = lse + p->z_loss * lse * lse;
    if (p->reduction == PLOSS_REDUCTION_NONE) {
        for (int64_t i = 0; i < p->N; ++i) {
            const int64_t y = ploss_load_int(p->labels, p->label_dtype, i * p->y_sn);
            ploss_store(p->loss, p->loss_dtype, i * p->l_sn, y == p->ignore_index ? 0.0 : l0);
        }
        return PLOSS_OK;
    }
    const double count = (double)ploss_cpu_count_labels(p->labels, p->label_dtype, p->N, 1, p->y_sn, 0,
                                                        p->ignore_index);
    const double total = count * l0;
    ploss_store(p->loss, p->loss_dtype, 0, p->reduction == PLOSS_REDUCTION_MEAN ? total / count : total);
    return PLOSS_OK;
}

ploss_status ploss_cpu_linear_cross_entropy(ploss_ctx_t *ctx, const ploss_linear_problem *p)
{
    if (p->D == 0)
        return no_features(p);
    return p->dtype == PLOSS_F64 ? linear_cross_entropy_f64(ctx, p) : linear_cross_entropy_f32(ctx, p);
}

