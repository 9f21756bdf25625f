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

ploss_status ploss_cpu_linear_cross_entropy(ploss_ctx_t *ctx, const ploss_linear_problem *p)
{
    return p->dtype == PLOSS_F64 ? linear_cross_entropy_f64(ctx, p) : linear_cross_entropy_f32(ctx, p);
}

