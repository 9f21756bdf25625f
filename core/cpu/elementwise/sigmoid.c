/*
 * sigmoid.c — CPU backend of the elementwise sigmoid family: binary_cross_entropy_with_logits
 * and sigmoid_focal (formulas in core/engines/elementwise.h and core/ploss.h).
 * Accumulates in double for every dtype; reductions run over fixed chunks of elements
 * summed in order, so results do not depend on the number of OpenMP threads.
 */
#include <float.h>
#include <math.h>
#include <omp.h>

#include "elementwise.h"
#include "chunks.h"
#include "isa.h"
#include "scalar.h"

#define CHUNK 4096 /* elements per reduction chunk */

enum { TX, TT, TW, TPW, TL, TGL, TG, NT };

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

static void walker_next(walker *w)
{
    for (int d = w->ndim - 1; d >= 0; --d) {
        for (int t = 0; t < NT; ++t)
            w->off[t] += w->st[t][d];
        if (++w->idx[d] < w->shape[d])
            return;
        for (int t = 0; t < NT; ++t)
            w->off[t] -= w->st[t][d] * w->shape[d];
        w->idx[d] = 0;
    }
}

/* Loss and ∂loss/∂x of one element (before the upstream gradient). */
static void element(const ploss_sigmoid_problem *p, double x, double y, double w, double pw, double *loss,
                    double *dx)
{
    const double e = exp(-fabs(x)), lg = log1p(e);
    const double sp_pos = (x > 0 ? x : 0.0) + lg;  /* softplus(x)  = −log(1 − σ(x)) */
    const double sp_neg = (x < 0 ? -x : 0.0) + lg; /* softplus(−x) = −log σ(x)       */
    const double sig_pos = x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e); /* σ(x)  */
    const double sig_neg = x >= 0 ? e / (1.0 + e) : 1.0 / (1.0 + e); /* σ(−x) */
    /* terms with a zero coefficient are skipped: no 0·inf for infinite logits */
    const double pos = y != 0.0 ? y * sp_neg : 0.0, neg = y != 1.0 ? (1.0 - y) * sp_pos : 0.0;
    /* σ(x) − y, without cancellation near p = 1 */
    const double p_minus_y = x >= 0 ? (1.0 - y) - sig_neg : sig_pos - y;

    switch (p->kind) {
    case PLOSS_SIGMOID_BCE:
        *loss = w * (pw * pos + neg);
        *dx = w * ((y != 1.0 ? (1.0 - y) * sig_pos : 0.0) - (y != 0.0 ? pw * y * sig_neg : 0.0));
        return;
    case PLOSS_SIGMOID_FOCAL_TORCHVISION: {
        const double A = p->a1 * y + p->a0 * (1.0 - y);
        const double q = y * sig_neg + (1.0 - y) * sig_pos; /* 1 − p_t */
        const double ce = pos + neg;
        const double qg = pow(q, p->gamma); /* 0^0 = 1 */
        *loss = A * qg * ce;
        double d = qg * p_minus_y;
        if (p->gamma != 0.0 && q > 0.0)
            d += p->gamma * (1.0 - 2.0 * y) * ce * qg * (sig_pos * sig_neg / q);
        *dx = A * d;
        return;
    }
    case PLOSS_SIGMOID_FOCAL_REFERENCE:
    default: {
        const double ad = fabs(p_minus_y);
        const double c = pow(ad, p->gamma);
        const double ev = (y != 0.0 ? p->a1 * y * sp_neg : 0.0) + (y != 1.0 ? p->a0 * (1.0 - y) * sp_pos : 0.0);
        const double de = (y != 1.0 ? p->a0 * (1.0 - y) * sig_pos : 0.0) - (y != 0.0 ? p->a1 * y * sig_neg : 0.0);
        *loss = c * ev;
        double d = c * de;
        if (p->gamma != 0.0 && ad > 0.0) { /* subgradient 0 at the kink y = p */
            double m = fmin(pow(ad, p->gamma - 1.0), DBL_MAX);
            d += p->gamma * m * (p_minus_y > 0 ? 1.0 : -1.0) * (sig_pos * sig_neg) * ev;
        }
        *dx = d;
        return;
    }
    }
}

ploss_status PLOSS_ISA_FN(ploss_cpu_sigmoid)(ploss_ctx_t *ctx, const ploss_sigmoid_problem *p)
{
    (void)ctx;
    const int64_t M = p->numel;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD;
    const int want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;
    const double divisor = p->reduction == PLOSS_REDUCTION_MEAN ? (double)M : 1.0;

    /* ω of reduced losses; per element for NONE in backward */
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor);

    /* the only buffer (the chunk partials, no rows) is taken before the first write */
    ploss_cpu_rows b;
    const ploss_status status = ploss_cpu_rows_alloc(&b, "sigmoid", M, 0, 0, CHUNK);
    if (status != PLOSS_OK)
        return status;
    const int64_t nchunks = b.nchunks;

#pragma omp parallel for schedule(static)
    for (int64_t chunk = 0; chunk < nchunks; ++chunk) {
        const int64_t begin = chunk * CHUNK, end = begin + CHUNK < M ? begin + CHUNK : M;
        walker it;
        walker_start(&it, p, begin);
        double acc = 0.0;
        for (int64_t k = begin; k < end; ++k, walker_next(&it)) {
            const double x = ploss_load(p->x, p->x_dtype, it.off[TX]);
            const double y = ploss_load(p->t, p->t_dtype, it.off[TT]);
            const double w = p->w ? ploss_load(p->w, p->w_dtype, it.off[TW]) : 1.0;
            const double pw = p->pw ? ploss_load(p->pw, p->pw_dtype, it.off[TPW]) : 1.0;
            double loss, dx;
            element(p, x, y, w, pw, &loss, &dx);
            if (want_loss) {
                acc += loss;
                if (none)
                    ploss_store(p->loss, p->loss_dtype, it.off[TL], loss);
            }
            if (want_grad) {
                double om = omega;
                if (p->pass == PLOSS_PASS_BACKWARD && none)
                    om = ploss_load(p->grad_loss, p->gl_dtype, it.off[TGL]);
                ploss_store(p->grad, p->x_dtype, it.off[TG], om * dx);
            }
        }
        b.partial[chunk] = acc;
    }
    if (want_loss) /* 0/0 = NaN for an empty input, as PyTorch */
        ploss_cpu_rows_store_loss(&b, p->reduction, divisor, p->loss, p->loss_dtype);
    ploss_cpu_rows_free(&b);
    return PLOSS_OK;
}
