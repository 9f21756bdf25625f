/*
 * margin.c — CPU backend of the margin softmax losses (core/engines/margin.h), in float for
 * f32/f16/bf16 inputs and double for f64 (margin_impl.h, once for each), the rows'
 * statistics, losses and sums in double:
 *   1. x and the centres loaded and normalised into X̂ (N×D) and Ŵ (C×D), their norms kept;
 *   2. per tile of rows: the cosines X̂_b·Ŵᵀ through the project's GEMM (OpenBLAS sgemm/dgemm), at
 *      most TILE_ELEMS values (or opts.tile_rows rows); each row scaled by s with its
 *      target's cosine replaced by φ(c) (margin.h); the softmax cross-entropy of every
 *      row — its loss and, in place, its gradient ∂ℓ/∂z weighted by the row's upstream
 *      factor — by the softmax-row kernels of the other class-index losses
 *      (core/cpu/rows/softmax_rows.h); the target's entry times φ′(c) gives G/s, then
 *      ∂L/∂x̂_b = s·G·Ŵ and ∂L/∂Ŵ += s·Gᵀ·X̂_b (tile order);
 *   3. the losses reduced in row order; the gradients through the normalisation.
 * Partial FC: Ŵ holds the kept centres only, the labels are their positions among them,
 * and the rows of ∂L/∂W not kept are zero.  Sharded (margin.h, comm): the labels stay
 * global ids (ploss_margin_shard_class finds a row's class in the block) and sharded_tile
 * takes the softmax of each tile over every rank's classes.
 * Compiled once per instruction set (core/cpu/isa.h), as the softmax-row kernels it calls.
 */
#include <math.h>
#include <string.h>

#include "chunks.h"
#include "margin.h"
#include "scalar.h"
#include "rows/softmax_rows.h"

enum { TILE_ELEMS = 1 << 22 };

/* D = 0: every cosine is 0 (the norms are clamped), so each row not ignored loses
 * log(K − 1 + e^a) − a with a = s·φ(0), and the gradients are empty: no tile is formed
 * (N may be huge, with broadcast labels). */
static ploss_status no_features(const ploss_margin_problem *p)
{
    if (p->pass == PLOSS_PASS_BACKWARD)
        return PLOSS_OK;
    double dphi;
    const double a = p->margin.s * ploss_margin_target(&p->margin, 0.0, &dphi), others = (double)(p->K - 1);
    const double l0 = a > 0.0 ? log1p(others * exp(-a)) : log(others + exp(a)) - a;
    ploss_cpu_store_constant_row_losses(p->loss, p->loss_dtype, p->l_sn, p->reduction, p->labels, p->label_dtype,
                                        p->y_sn, p->N, p->ignore_index, l0);
    return PLOSS_OK;
}

#define PLOSS_REAL_IMPL "margin/margin_impl.h"
#include "real_types.h"

ploss_status PLOSS_ISA_FN(ploss_cpu_margin)(ploss_ctx_t *ctx, const ploss_margin_problem *p)
{
    if (p->D == 0 && !p->comm)
        return no_features(p);
    return p->dtype == PLOSS_F64 ? margin_f64(ctx, p) : margin_f32(ctx, p);
}
