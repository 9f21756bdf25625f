/*
 * infonce.c — CPU backend of InfoNCE (core/engines/pairs.h), in float for f32/f16/bf16
 * inputs and double for f64 (infonce_impl.h, once for each; the log-sum-exps, norms and sums
 * in double):
 *   1. the rows normalised (or copied) into u and v;
 *   2. row tiles S_b = u_b·vᵀ/τ through the project's GEMM (OpenBLAS sgemm/dgemm), at most
 *      TILE_ELEMS values: each tile gives its rows' log-sum-exp exactly and a partial
 *      (max, Σe^(S − max)) per column, merged into the columns' online log-sum-exp in tile
 *      order;
 *   3. the losses from the log-sum-exps and the diagonal;
 *   4. backward: each tile recomputed (kept from pass 1 when one tile holds every row) and
 *      turned into G = ∂L/∂S in place; ∂L/∂u_b = G·v/τ
 *      and ∂L/∂v += Gᵀ·u_b/τ (two GEMMs per tile, in tile order), then through the
 *      normalisation into the gradients.
 * Sharded (pairs.h, comm): u holds this rank's N queries, v every rank's M keys; the
 * columns' (max, Σ) pairs are merged over the ranks in rank order before their
 * log-sum-exps are taken, and the rows' losses gathered for a reduced loss.
 */
#include <math.h>
#include <string.h>

#include "chunks.h"
#include "dispatch.h"
#include "gemm.h"
#include "pairs.h"
#include "scalar.h"
#include "vmath.h"

enum { TILE_ELEMS = 1 << 22 };

#define PLOSS_REAL_IMPL "pairs/infonce_impl.h"
#include "real_types.h"

ploss_status ploss_cpu_infonce(ploss_ctx_t *ctx, const ploss_infonce_problem *p)
{
    return p->dtype == PLOSS_F64 ? infonce_f64(ctx, p) : infonce_f32(ctx, p);
}
