/*
 * sigmoid.c — CPU backend of the elementwise losses: the sigmoid family
 * (binary_cross_entropy_with_logits, sigmoid_focal) and the pointwise criteria (formulas in
 * core/engines/elementwise.h and core/ploss_losses.h).
 * f32, f16 and bf16 inputs are computed in float, f64 in double (sigmoid_impl.h, once
 * for each); losses are summed in double over fixed chunks of elements, summed in order,
 * so results do not depend on the number of OpenMP threads.
 */
#include <float.h>
#include <math.h>
#include <omp.h>

#include "elementwise.h"
#include "chunks.h"
#include "isa.h"
#include "scalar.h"
#include "vmath.h"

#define CHUNK 4096 /* elements per reduction chunk */
#define BLOCK 512  /* elements computed together (a divisor of CHUNK) */

enum { TX, TT, TW, TPW, TL, TGL, TG, NT };

/* The loss of each kind, as messages name it. */
static const char *const kind_loss[] = {
    "binary_cross_entropy_with_logits", "sigmoid_focal", "sigmoid_focal", "mse_loss", "l1_loss", "smooth_l1_loss",
    "huber_loss", "binary_cross_entropy", "soft_margin_loss", "kl_div", "kl_div", "hinge_embedding_loss",
    "poisson_nll_loss", "poisson_nll_loss", "poisson_nll_loss", "poisson_nll_loss", "hinge_loss",
    "target_weighted_mse_loss",
};
_Static_assert(sizeof kind_loss / sizeof kind_loss[0] == PLOSS_EW_KIND_COUNT, "a loss name for every kind");

/* Row-major walk over the collapsed shape with the offsets of every tensor. */
typedef struct {
    int64_t idx[PLOSS_MAX_DIMS];
    int64_t off[NT];
    const int64_t *st[NT];
    const int64_t *shape;
    int ndim;
} walker;

static void walker_start(walker *w, const ploss_sigmoid_problem *p, int64_t k)
{
    w->st[TX] = p->x_st; w->st[TT] = p->t_st; w->st[TW] = p->w_st; w->st[TPW] = p->pw_st;
    w->st[TL] = p->l_st; w->st[TGL] = p->gl_st; w->st[TG] = p->g_st;
    w->shape = p->shape;
    w->ndim = p->ndim;
    for (int t = 0; t < NT; ++t)
        w->off[t] = 0;
    for (int d = p->ndim - 1; d >= 0; --d) {
        w->idx[d] = k % p->shape[d];
        k /= p->shape[d];
        for (int t = 0; t < NT; ++t)
            w->off[t] += w->idx[d] * w->st[t][d];
    }
}

/* Moves the walk n elements on (one carry per dim, not per element). */
static void walker_skip(walker *w, int64_t n)
{
    for (int d = w->ndim - 1; d >= 0 && n > 0; --d) {
        const int64_t v = w->idx[d] + n;
        n = v / w->shape[d];
        w->idx[d] = v % w->shape[d];
    }
    for (int t = 0; t < NT; ++t) {
        w->off[t] = 0;
        for (int d = 0; d < w->ndim; ++d)
            w->off[t] += w->idx[d] * w->st[t][d];
    }
}

#define PLOSS_REAL_IMPL "elementwise/sigmoid_impl.h"
#include "real_types.h"

ploss_status PLOSS_ISA_FN(ploss_cpu_sigmoid)(ploss_ctx_t *ctx, const ploss_sigmoid_problem *p)
{
    (void)ctx;
    const int64_t M = p->numel;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD;

    /* the only buffer (the chunk partials, no rows) is taken before the first write */
    ploss_cpu_rows b;
    const char *loss = (unsigned)p->kind < PLOSS_EW_KIND_COUNT ? kind_loss[p->kind] : "elementwise";
    const ploss_status status = ploss_cpu_rows_alloc(&b, loss, M, 0, 0, CHUNK);
    if (status != PLOSS_OK)
        return status;
    /* a weighted mean's divisor Σ w first: the gradient needs it (the partials are reused) */
    const double divisor = p->reduction != PLOSS_REDUCTION_MEAN ? 1.0
                           : !p->weight_mean                    ? (double)p->mean_divisor
                           : p->x_dtype == PLOSS_F64            ? weight_sum_f64(p, &b)
                                                                : weight_sum_f32(p, &b);

    /* ω of reduced losses; per element for NONE in backward */
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor);
    if (p->x_dtype == PLOSS_F64)
        run_f64(p, &b, omega);
    else
        run_f32(p, &b, omega);
    if (want_loss) /* 0/0 = NaN for an empty input, as PyTorch */
        ploss_cpu_rows_store_loss(&b, p->reduction, divisor, p->loss, p->loss_dtype);
    ploss_cpu_rows_free(&b);
    return PLOSS_OK;
}
