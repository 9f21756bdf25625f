/*
 * softmax_focal.c — CPU backend of the softmax focal family: softmax_focal and dual_focal
 * (formulas in core/ploss.h).  Accumulates in double for every dtype;
 * reductions run over fixed chunks of samples summed in order, so results do not depend
 * on the number of OpenMP threads.
 */
#include <math.h>
#include <omp.h>

#include "rows.h"
#include "chunks.h"
#include "isa.h"
#include "scalar.h"

#define CHUNK 256 /* samples per reduction chunk */

static double lse_of(const double *x, int64_t C)
{
    double m = -INFINITY; /* NaN and infinite logits make the lse NaN (as PyTorch's CE) */
    for (int64_t j = 0; j < C; ++j)
        m = x[j] > m ? x[j] : m;
    double s = 0.0;
    for (int64_t j = 0; j < C; ++j)
        s += exp(x[j] - m);
    return m + log(s);
}

/* Softmax focal of one valid sample: returns ℓ, and *G with ∂ℓ/∂x_j = G·(p_j − [j = y]). */
static double softmax_focal_sample(const ploss_sfocal_problem *p, const double *x, int64_t y, double lse,
                                   double *G)
{
    const double alpha = p->w ? ploss_load(p->w, p->w_dtype, y * p->w_s) : 1.0;
    const double lp = x[y] - lse; /* log p_t ≤ 0 */
    const double u = -expm1(lp);  /* 1 − p_t, no cancellation */
    const double L = -lp;
    if (p->gamma == 0.0) {
        *G = alpha;
        return alpha * L;
    }
    const double ug = pow(u, p->gamma);
    const double r = u > 0.0 ? L / u : 1.0; /* −log p_t / (1 − p_t) → 1 as p_t → 1 */
    *G = alpha * ug * (1.0 + p->gamma * exp(lp) * r);
    return alpha * ug * L;
}

/* Dual focal of one valid sample: returns ℓ, fills Gv[j] = G_j and *PG = Σ_j p_j·G_j. */
static double dual_focal_sample(const ploss_sfocal_problem *p, const double *x, int64_t y, double lse,
                                double *Gv, double *PG)
{
    double loss = 0.0, pg = 0.0;
    for (int64_t j = 0; j < p->C; ++j) {
        const double lpj = x[j] - lse, pj = exp(lpj);
        double ad, om, d; /* |d_j|, 1 − |d_j|, d_j = p_j − [j = y] */
        if (j == y) {
            ad = -expm1(lpj);
            om = pj;
            d = -ad;
        } else {
            ad = pj;
            om = -expm1(lpj);
            d = pj;
        }
        const double den = p->eps + om * (1.0 + ad); /* 1 + ε − d² */
        loss -= log(den);
        Gv[j] = 2.0 * d / den;
        pg += pj * Gv[j];
    }
    *PG = pg;
    return loss;
}

ploss_status PLOSS_ISA_FN(ploss_cpu_softmax_focal)(ploss_ctx_t *ctx, const ploss_sfocal_problem *p)
{
    (void)ctx;
    const int64_t M = p->N * p->S, C = p->C;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD;
    const int want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;

    /* MEAN: the number of valid samples */
    const double divisor = p->reduction == PLOSS_REDUCTION_MEAN
                               ? (double)ploss_cpu_count_labels(p->t, p->t_dtype, p->N, p->S, p->t_sn, p->t_ss,
                                                                p->ignore_index)
                               : 1.0;
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor);

    /* two rows of C doubles per thread (x and Gv), taken before the first write */
    ploss_cpu_rows b;
    const ploss_status status = ploss_cpu_rows_alloc(&b, "softmax_focal", M, C, 2, CHUNK);
    if (status != PLOSS_OK)
        return status;
    const int64_t nchunks = b.nchunks;

#pragma omp parallel num_threads(b.nthreads)
    {
        double *x = ploss_cpu_rows_thread(&b, omp_get_thread_num()), *Gv = x + b.cls;
#pragma omp for schedule(static)
        for (int64_t chunk = 0; chunk < nchunks; ++chunk) {
            double acc = 0.0;
            const int64_t end = (chunk + 1) * CHUNK < M ? (chunk + 1) * CHUNK : M;
            for (int64_t i = chunk * CHUNK; i < end; ++i) {
                const int64_t n = i / p->S, s = i % p->S;
                const int64_t y = ploss_load_int(p->t, p->t_dtype, n * p->t_sn + s * p->t_ss);
                const int valid = y != p->ignore_index; /* labels were range-checked in core */
                double loss = 0.0, lse = 0.0, G = 0.0, PG = 0.0;
                if (valid) {
                    const int64_t xo = n * p->x_sn + s * p->x_ss;
                    for (int64_t j = 0; j < C; ++j)
                        x[j] = ploss_load(p->x, p->x_dtype, xo + j * p->x_sc);
                    if (p->pass == PLOSS_PASS_BACKWARD && p->lse)
                        lse = ploss_load(p->lse, p->lse_dtype, n * p->lse_sn + s * p->lse_ss);
                    else
                        lse = lse_of(x, C);
                    loss = p->kind == PLOSS_SOFTMAX_FOCAL ? softmax_focal_sample(p, x, y, lse, &G)
                                                          : dual_focal_sample(p, x, y, lse, Gv, &PG);
                }
                if (want_loss) {
                    acc += loss;
                    if (none)
                        ploss_store(p->loss, p->loss_dtype, n * p->l_sn + s * p->l_ss, loss);
                    if (p->lse)
                        ploss_store(p->lse, p->lse_dtype, n * p->lse_sn + s * p->lse_ss, lse);
                }
                if (!want_grad)
                    continue;
                double w_i = omega;
                if (p->pass == PLOSS_PASS_BACKWARD && none)
                    w_i = ploss_load(p->grad_loss, p->gl_dtype, n * p->gl_sn + s * p->gl_ss);
                const int64_t go = n * p->g_sn + s * p->g_ss;
                for (int64_t j = 0; j < C; ++j) {
                    double gj = 0.0;
                    if (valid) {
                        const double lpj = x[j] - lse;
                        if (p->kind == PLOSS_SOFTMAX_FOCAL) /* p_y − 1 = −(1 − p_y) without cancellation */
                            gj = w_i * G * (j == y ? expm1(lpj) : exp(lpj));
                        else
                            gj = w_i * exp(lpj) * (Gv[j] - PG);
                    }
                    ploss_store(p->grad, p->x_dtype, go + j * p->g_sc, gj);
                }
            }
            b.partial[chunk] = acc;
        }
    }
    if (want_loss)
        ploss_cpu_rows_store_loss(&b, p->reduction, divisor, p->loss, p->loss_dtype);
    ploss_cpu_rows_free(&b);
    return PLOSS_OK;
}
