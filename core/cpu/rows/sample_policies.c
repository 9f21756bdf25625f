/*
 * sample_policies.c — CPU backend of the per-sample policy losses with class-index targets
 * (large-margin softmax, Taylor CE, PC-softmax CE, OHEM CE / large-margin; formulas in
 * core/engines/rows.h).  Accumulates in double for every dtype;
 * reductions run over fixed chunks of samples summed in order, so results do not depend
 * on the number of OpenMP threads.  Labels were validated by core/engines/rows.c.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "rows.h"
#include "taylor_poly.h"
#include "chunks.h"
#include "isa.h"
#include "scalar.h"

#define CHUNK 256 /* samples per reduction chunk */

/* ---- per-row maths: a valid row x[0..C) with label y -------------------------------- */

static double max_of(const double *x, int64_t C, int64_t skip)
{
    double m = -INFINITY;
    for (int64_t j = 0; j < C; ++j)
        if (j != skip && x[j] > m)
            m = x[j];
    return m;
}

/* log Σ_j e^(x_j + bias_j) over j ≠ skip (bias NULL = 0). */
static double lse_of(const double *x, const double *bias, int64_t C, int64_t skip)
{
    double m = -INFINITY;
    for (int64_t j = 0; j < C; ++j)
        if (j != skip && x[j] + (bias ? bias[j] : 0.0) > m)
            m = x[j] + (bias ? bias[j] : 0.0);
    double s = 0.0;
    for (int64_t j = 0; j < C; ++j)
        if (j != skip)
            s += exp(x[j] + (bias ? bias[j] : 0.0) - m);
    return m + log(s);
}

/* Loss of a valid row and its saved state st[0..n_state).  `bias` = log priors (PC). */
static double row_forward(const ploss_sample_problem *p, const double *x, const double *bias, int64_t y,
                          double st[3])
{
    const int64_t C = p->C;
    switch (p->loss_kind) {
    case PLOSS_SAMPLE_LARGE_MARGIN: {
        /* separate maxima for the sums over all classes and over 𝒩 = {j ≠ y} */
        const double lse = lse_of(x, NULL, C, -1);
        const double m2 = max_of(x, C, y);
        double s2 = 0.0, t2 = 0.0, sum2 = 0.0;
        for (int64_t j = 0; j < C; ++j) {
            if (j == y)
                continue;
            const double d = x[j] - m2, e = exp(d);
            s2 += e;
            t2 += e * d;
            sum2 += d;
        }
        const double reg = t2 / s2 - sum2 / (double)(C - 1); /* E_q[x] − x̄_𝒩, both relative to m2 */
        st[0] = lse;
        st[1] = m2 + log(s2);
        st[2] = m2 + t2 / s2;
        return lse - x[y] + 0.5 * p->lam * reg;
    }
    case PLOSS_SAMPLE_TAYLOR_CE: {
        double z = 0.0;
        for (int64_t j = 0; j < C; ++j)
            z += ploss_taylor_poly(x[j], p->order);
        st[0] = z;
        return log(z) - log(ploss_taylor_poly(x[y], p->order));
    }
    case PLOSS_SAMPLE_PC_SOFTMAX:
        st[0] = lse_of(x, bias, C, -1);
        return st[0] - x[y];
    default: /* CROSS_ENTROPY */
        st[0] = lse_of(x, NULL, C, -1);
        return st[0] - x[y];
    }
}

/* g[j] = w·∂ℓ/∂x_j of a valid row from its state. */
static void row_grad(const ploss_sample_problem *p, const double *x, const double *bias, int64_t y,
                     const double st[3], double w, double *g)
{
    const int64_t C = p->C;
    switch (p->loss_kind) {
    case PLOSS_SAMPLE_LARGE_MARGIN: {
        const double h = 0.5 * p->lam, u = 1.0 / (double)(C - 1);
        for (int64_t j = 0; j < C; ++j) {
            const double pj = exp(x[j] - st[0]);
            if (j == y)
                g[j] = w * (pj - 1.0);
            else
                g[j] = w * (pj + h * (exp(x[j] - st[1]) * (x[j] - st[2] + 1.0) - u));
        }
        break;
    }
    case PLOSS_SAMPLE_TAYLOR_CE: {
        const double fy = ploss_taylor_poly(x[y], p->order);
        for (int64_t j = 0; j < C; ++j)
            g[j] = w * ploss_taylor_poly(x[j], p->order - 1) * (1.0 / st[0] - (j == y ? 1.0 / fy : 0.0));
        break;
    }
    default: /* PC_SOFTMAX (bias = log priors) and CROSS_ENTROPY (bias NULL) */
        for (int64_t j = 0; j < C; ++j)
            g[j] = w * (exp(x[j] + (bias ? bias[j] : 0.0) - st[0]) - (j == y ? 1.0 : 0.0));
        break;
    }
}

/* ---- OHEM mining --------------------------------------------------------------------- */

static uint32_t score_key(double s)
{
    float f = (float)s;
    if (f != f)
        return PLOSS_OHEM_NAN_KEY;
    uint32_t k;
    memcpy(&k, &f, sizeof k);
    return k;
}

/* The r-th smallest (r >= 1) of keys[0..M) by a three-pass radix select on 11/11/10-bit
 * digits, the algorithm of the CUDA backend. */
static uint32_t select_key(const uint32_t *keys, int64_t M, int64_t r)
{
    static const int shift[3] = {21, 10, 0}, bits[3] = {11, 11, 10};
    uint32_t prefix = 0, prefix_mask = 0;
    int64_t hist[2048];
    for (int pass = 0; pass < 3; ++pass) {
        const uint32_t nb = 1u << bits[pass];
        memset(hist, 0, sizeof hist);
        for (int64_t i = 0; i < M; ++i)
            if ((keys[i] & prefix_mask) == prefix)
                ++hist[(keys[i] >> shift[pass]) & (nb - 1)];
        uint32_t b = 0;
        while (r > hist[b]) {
            r -= hist[b];
            ++b;
        }
        prefix |= b << shift[pass];
        prefix_mask |= (nb - 1) << shift[pass];
    }
    return prefix;
}

/* Scores every sample into keys[] and sets kept[i] = 1 for the mined ones (rows.h);
 * b: per-thread rows of at least C doubles. */
static void ohem_mine(const ploss_sample_problem *p, uint32_t *keys, unsigned char *kept, const ploss_cpu_rows *b)
{
    const int64_t M = p->N * p->S, C = p->C;
#pragma omp parallel
    {
        double *x = ploss_cpu_rows_thread(b, omp_get_thread_num());
#pragma omp for schedule(static)
        for (int64_t i = 0; i < M; ++i) {
            const int64_t n = i / p->S, s = i % p->S;
            const int64_t y = ploss_load_int(p->t, p->t_dtype, n * p->t_sn + s * p->t_ss);
            if (y == p->ignore_index) {
                keys[i] = PLOSS_OHEM_IGNORED_KEY;
                continue;
            }
            const int64_t xo = n * p->x_sn + s * p->x_ss;
            for (int64_t j = 0; j < C; ++j)
                x[j] = ploss_load(p->x, p->x_dtype, xo + j * p->x_sc);
            keys[i] = score_key(exp(x[y] - lse_of(x, NULL, C, -1)));
        }
    }
    uint32_t t = p->thresh_key;
    if (p->n_min > 0 && p->n_min < M) {
        const uint32_t k = select_key(keys, M, p->n_min);
        t = k > t ? k : t;
    }
    if (p->n_min >= M || t == PLOSS_OHEM_IGNORED_KEY)
        t = PLOSS_OHEM_IGNORED_KEY - 1u; /* every valid sample, never an ignored one */
    for (int64_t i = 0; i < M; ++i)
        kept[i] = keys[i] <= t;
}

/* ---- driver ---------------------------------------------------------------------------- */

ploss_status PLOSS_ISA_FN(ploss_cpu_sample_policies)(ploss_ctx_t *ctx, const ploss_sample_problem *p)
{
    (void)ctx;
    const int64_t M = p->N * p->S, C = p->C;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD;
    const int want_grad = p->pass != PLOSS_PASS_FORWARD;

    /* every buffer is taken before the first write, so a failure leaves outputs untouched:
     * three rows of C doubles per thread (x and g use the first two; the OHEM scores x),
     * the log priors, the OHEM keys and flags */
    ploss_cpu_rows b;
    const ploss_status status = ploss_cpu_rows_alloc(&b, "sample_policies", M, C, 3, CHUNK);
    if (status != PLOSS_OK)
        return status;
    const int64_t nchunks = b.nchunks;
    const size_t cls = b.cls;
    double *bias = p->w ? malloc((cls + 1) * sizeof *bias) : NULL;
    uint32_t *keys = p->ohem ? malloc((size_t)(M ? M : 1) * sizeof *keys) : NULL;
    unsigned char *kept = p->ohem ? malloc((size_t)(M ? M : 1)) : NULL;
    if ((p->w && !bias) || (p->ohem && (!keys || !kept))) {
        ploss_cpu_rows_free(&b); free(bias); free(keys); free(kept);
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "sample_policies: log priors of %lld classes, OHEM keys of %lld samples",
                           (long long)C, (long long)M);
    }
    for (int64_t j = 0; p->w && j < (int64_t)cls; ++j)
        bias[j] = log(ploss_load(p->w, p->w_dtype, j * p->w_s));

    /* valid (or mined) samples: the MEAN divisor */
    if (p->ohem)
        ohem_mine(p, keys, kept, &b);
    double divisor = 1.0;
    if (p->reduction == PLOSS_REDUCTION_MEAN && p->ohem) {
        int64_t count = 0;
        for (int64_t i = 0; i < M; ++i)
            count += kept[i];
        divisor = (double)count;
    } else if (p->reduction == PLOSS_REDUCTION_MEAN) {
        divisor = (double)ploss_cpu_count_labels(p->t, p->t_dtype, p->N, p->S, p->t_sn, p->t_ss, p->ignore_index);
    }

    /* ω for reduced losses; per sample for NONE in backward */
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor);
    const int use_state = p->pass == PLOSS_PASS_BACKWARD && p->state;

#pragma omp parallel num_threads(b.nthreads)
    {
        double *x = ploss_cpu_rows_thread(&b, omp_get_thread_num()), *g = x + cls;
#pragma omp for schedule(static)
        for (int64_t chunk = 0; chunk < nchunks; ++chunk) {
            double acc = 0.0;
            const int64_t end = (chunk + 1) * CHUNK < M ? (chunk + 1) * CHUNK : M;
            for (int64_t i = chunk * CHUNK; i < end; ++i) {
                const int64_t n = i / p->S, s = i % p->S;
                const int64_t y = ploss_load_int(p->t, p->t_dtype, n * p->t_sn + s * p->t_ss);
                const int valid = p->ohem ? kept[i] : y != p->ignore_index;
                const int64_t xo = n * p->x_sn + s * p->x_ss, so = n * p->st_sn + s * p->st_ss;
                double st[3] = {0.0, 0.0, 0.0}, loss = 0.0;
                if (valid) {
                    for (int64_t j = 0; j < C; ++j)
                        x[j] = ploss_load(p->x, p->x_dtype, xo + j * p->x_sc);
                    if (use_state)
                        for (int k = 0; k < p->n_state; ++k)
                            st[k] = ploss_load(p->state, p->state_dtype, so + k * p->st_sk);
                    else
                        loss = row_forward(p, x, bias, y, st);
                }
                if (want_loss) {
                    acc += loss;
                    if (p->reduction == PLOSS_REDUCTION_NONE)
                        ploss_store(p->loss, p->loss_dtype, n * p->l_sn + s * p->l_ss, loss);
                    for (int k = 0; p->state && k < p->n_state; ++k)
                        ploss_store(p->state, p->state_dtype, so + k * p->st_sk, st[k]);
                }
                if (!want_grad)
                    continue;
                double w_i = omega;
                if (p->pass == PLOSS_PASS_BACKWARD && p->reduction == PLOSS_REDUCTION_NONE)
                    w_i = ploss_load(p->grad_loss, p->gl_dtype, n * p->gl_sn + s * p->gl_ss);
                if (valid)
                    row_grad(p, x, bias, y, st, w_i, g);
                const int64_t go = n * p->g_sn + s * p->g_ss;
                for (int64_t j = 0; j < C; ++j)
                    ploss_store(p->grad, p->x_dtype, go + j * p->g_sc, valid ? g[j] : 0.0);
            }
            b.partial[chunk] = acc;
        }
    }
    if (want_loss)
        ploss_cpu_rows_store_loss(&b, p->reduction, divisor, p->loss, p->loss_dtype);
    ploss_cpu_rows_free(&b); free(bias); free(keys); free(kept);
    return PLOSS_OK;
}
