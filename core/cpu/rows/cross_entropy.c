/*
 * cross_entropy.c — CPU backend of the softmax cross-entropy family (one build per
 * instruction set, see core/cpu/isa.h).  f32, f16 and bf16 logits are computed in float,
 * f64 logits in double (cross_entropy_impl.h, once for each), with row sums, losses and
 * reductions in double; reductions run over fixed chunks of samples summed in order, so
 * results do not depend on the number of OpenMP threads.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "chunks.h"
#include "isa.h"
#include "rows.h"
#include "scalar.h"
#include "vmath.h"

#define CHUNK 256 /* samples per reduction chunk */
#define TILE 32   /* neighbouring samples of a tile (spatial inputs) */

#define PLOSS_REAL_IMPL "rows/cross_entropy_impl.h"
#include "real_types.h"

static double weight_of(const ploss_ce_problem *p, int64_t j)
{
    return p->w ? ploss_load(p->w, p->w_dtype, j * p->w_s) : 1.0;
}

/* Divisor of MEAN: Σ w_y over valid samples (class indices) or the sample count. */
static double mean_divisor(const ploss_ce_problem *p)
{
    if (p->target_kind == PLOSS_TARGET_PROB)
        return (double)(p->N * p->S);
    double d = 0.0;
    for (int64_t n = 0; n < (p->S > 0 ? p->N : 0); ++n) /* S = 0: no sample (N may be huge) */
        for (int64_t s = 0; s < p->S; ++s) {
            int64_t y = ploss_load_int(p->t, p->t_dtype, n * p->t_sn + s * p->t_ss);
            if (y != p->ignore_index && y >= 0 && y < p->C)
                d += weight_of(p, y);
        }
    return d;
}

ploss_status PLOSS_ISA_FN(ploss_cpu_cross_entropy)(ploss_ctx_t *ctx, const ploss_ce_problem *p)
{
    (void)ctx;
    const double divisor = p->reduction == PLOSS_REDUCTION_MEAN ? mean_divisor(p) : 1.0;
    /* ω for reduced losses; per sample for NONE in backward */
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor);
    return p->x_dtype == PLOSS_F64 ? run_f64(p, divisor, omega) : run_f32(p, divisor, omega);
}
