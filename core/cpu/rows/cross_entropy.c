/*
 * cross_entropy.c — CPU backend of the softmax cross-entropy family.
 * Accumulates in double for every dtype; reductions run over fixed chunks of samples
 * summed in order, so results do not depend on the number of OpenMP threads.
 */
#include <math.h>
#include <omp.h>

#include "rows.h"
#include "chunks.h"
#include "scalar.h"

#define CHUNK 256 /* samples per reduction chunk */

typedef struct {
    double loss;   /* ℓ_i */
    double lse;    /* log-sum-exp */
    double csum;   /* Σ_j c_ij */
    int valid;     /* not ignored */
} sample_stats;

static double weight_of(const ploss_ce_problem *p, int64_t j)
{
    return p->w ? ploss_load(p->w, p->w_dtype, j * p->w_s) : 1.0;
}

/* Coefficient c_ij of class j (t_j read for probability targets). */
static double coef(const ploss_ce_problem *p, int64_t y, const double *t, int64_t j)
{
    if (p->target_kind == PLOSS_TARGET_PROB)
        return weight_of(p, j) * (p->a * t[j] + p->b);
    return (p->b + (j == y ? p->a : 0.0)) * weight_of(p, j);
}

static double lse_of(const double *x, int64_t C)
{
    double m = -INFINITY; /* NaN and infinite logits make s, hence lse, NaN (as PyTorch) */
    for (int64_t j = 0; j < C; ++j)
        m = x[j] > m ? x[j] : m;
    double s = 0.0;
    for (int64_t j = 0; j < C; ++j)
        s += exp(x[j] - m);
    return m + log(s);
}

/* Reads the row of sample (n, s) into x (and t), returns the label (index targets). */
static int64_t gather(const ploss_ce_problem *p, int64_t n, int64_t s, double *x, double *t)
{
    const int64_t xo = n * p->x_sn + s * p->x_ss;
    for (int64_t j = 0; j < p->C; ++j)
        x[j] = ploss_load(p->x, p->x_dtype, xo + j * p->x_sc);
    if (p->target_kind == PLOSS_TARGET_PROB) {
        const int64_t to = n * p->t_sn + s * p->t_ss;
        for (int64_t j = 0; j < p->C; ++j)
            t[j] = ploss_load(p->t, p->t_dtype, to + j * p->t_sc);
        return 0;
    }
    return ploss_load_int(p->t, p->t_dtype, n * p->t_sn + s * p->t_ss);
}

static sample_stats stats_of(const ploss_ce_problem *p, int64_t y, const double *x, const double *t,
                             const double *saved_lse)
{
    sample_stats r = {0.0, 0.0, 0.0, 0};
    if (p->target_kind == PLOSS_TARGET_INDEX && (y == p->ignore_index || y < 0 || y >= p->C))
        return r;
    r.valid = 1;
    r.lse = saved_lse ? *saved_lse : lse_of(x, p->C);
    for (int64_t j = 0; j < p->C; ++j) {
        double c = coef(p, y, t, j);
        if (c != 0.0)
            r.loss += c * (r.lse - x[j]);
        r.csum += c;
    }
    return r;
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

ploss_status ploss_cpu_cross_entropy(ploss_ctx_t *ctx, const ploss_ce_problem *p)
{
    (void)ctx;
    const int64_t M = p->N * p->S, C = p->C;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD;
    const int want_grad = p->pass != PLOSS_PASS_FORWARD;
    const double divisor = p->reduction == PLOSS_REDUCTION_MEAN ? mean_divisor(p) : 1.0;

    /* ω for reduced losses; per sample for NONE in backward */
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor);

    /* two rows of C doubles per thread (x and t), taken before the first write */
    ploss_cpu_rows b;
    const ploss_status status = ploss_cpu_rows_alloc(&b, "cross_entropy", M, C, 2, CHUNK);
    if (status != PLOSS_OK)
        return status;
    const int64_t nchunks = b.nchunks;

#pragma omp parallel num_threads(b.nthreads) if (M * C > 32768)
    {
        double *x = ploss_cpu_rows_thread(&b, omp_get_thread_num()), *t = x + b.cls;
#pragma omp for schedule(static)
        for (int64_t chunk = 0; chunk < nchunks; ++chunk) {
            double acc = 0.0;
            const int64_t end = (chunk + 1) * CHUNK < M ? (chunk + 1) * CHUNK : M;
            for (int64_t i = chunk * CHUNK; i < end; ++i) {
                const int64_t n = i / p->S, s = i % p->S;
                const int64_t y = gather(p, n, s, x, t);
                double saved, *use_saved = NULL;
                if (p->pass == PLOSS_PASS_BACKWARD && p->lse) {
                    saved = ploss_load(p->lse, p->lse_dtype, n * p->lse_sn + s * p->lse_ss);
                    use_saved = &saved;
                }
                const sample_stats st = stats_of(p, y, x, t, use_saved);
                if (want_loss) {
                    acc += st.loss;
                    if (p->reduction == PLOSS_REDUCTION_NONE)
                        ploss_store(p->loss, p->loss_dtype, n * p->l_sn + s * p->l_ss, st.loss);
                    if (p->lse)
                        ploss_store(p->lse, p->lse_dtype, n * p->lse_sn + s * p->lse_ss, st.lse);
                }
                if (!want_grad)
                    continue;
                double w_i = omega;
                if (p->pass == PLOSS_PASS_BACKWARD && p->reduction == PLOSS_REDUCTION_NONE)
                    w_i = ploss_load(p->grad_loss, p->gl_dtype, n * p->gl_sn + s * p->gl_ss);
                const int64_t go = n * p->g_sn + s * p->g_ss;
                for (int64_t j = 0; j < C; ++j) {
                    double gj = st.valid ? w_i * (st.csum * exp(x[j] - st.lse) - coef(p, y, t, j)) : 0.0;
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
