/*
 * ctc.c — CPU backend of the CTC loss (formulas in docs/losses.md and core/ploss_losses.h),
 * in double for every input dtype, one sequence per OpenMP iteration:
 *
 *  0. with logits: the log-sum-exp of every (frame, sequence) row (log_probs = x − it);
 *  1. α over the sequence's frames in log space (every frame kept when a gradient is wanted,
 *     two otherwise) and its loss ℓ_n;
 *  2. with a gradient: β from the last frame back, two frames at a time; at frame t the
 *     γ_t(c) of every class from α_t + β_t, then the frame's gradient row; frames past the
 *     sequence's length get zeros;
 *  3. the loss, reduced in sequence order.
 * Each thread's buffers are allocated before anything is written.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "chunks.h"
#include "scalar.h"
#include "sequence.h"

/* log(e^a + e^b), −∞ absorbing. */
static inline double lse(double a, double b)
{
    if (a < b) {
        const double t = a;
        a = b;
        b = t;
    }
    return b == -INFINITY ? a : a + log1p(exp(b - a));
}

typedef struct {
    const ploss_ctc_problem *p;
    int64_t n, Tn, L;
    const int32_t *lab;
    const double *lse; /* logits: the rows' log-sum-exps (row t·N + n); NULL: log_probs given */
} sequence;

static inline double logp(const sequence *q, int64_t t, int64_t c)
{
    const ploss_ctc_problem *p = q->p;
    const double v = ploss_load(p->x, p->x_dtype, t * p->x_st + q->n * p->x_sn + c * p->x_sc);
    return q->lse ? v - q->lse[t * p->N + q->n] : v;
}

/* log Σ_c e^x[t, n, c] of every row of the logits into lse[t·N + n]. */
static void row_lse(const ploss_ctc_problem *p, double *lse)
{
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < p->T * p->N; ++r) {
        const int64_t base = (r / p->N) * p->x_st + (r % p->N) * p->x_sn;
        double m = -INFINITY, s = 0.0;
        for (int64_t c = 0; c < p->C; ++c)
            m = fmax(m, ploss_load(p->x, p->x_dtype, base + c * p->x_sc));
        for (int64_t c = 0; c < p->C; ++c)
            s += exp(ploss_load(p->x, p->x_dtype, base + c * p->x_sc) - m);
        lse[r] = m + log(s);
    }
}

/* The class of position s of the extended target (blank, l_1, blank, …, l_L, blank). */
static inline int64_t symbol(const sequence *q, int64_t s) { return s & 1 ? q->lab[s >> 1] : q->p->blank; }

/* Whether position s may be reached from s − 2 (a label different from the one before). */
static inline int skips(const sequence *q, int64_t s) { return (s & 1) && s > 1 && q->lab[s >> 1] != q->lab[(s >> 1) - 1]; }

/* α of frames [0, Tn) into A (row t at A + (keep ? t : t & 1)·S2) and the loss −log p(l | x). */
static double forward(const sequence *q, double *A, int keep)
{
    const int64_t S2 = 2 * q->L + 1;
    if (q->Tn == 0)
        return q->L == 0 ? 0.0 : INFINITY;
    for (int64_t s = 0; s < S2; ++s)
        A[s] = s < 2 ? logp(q, 0, symbol(q, s)) : -INFINITY;
    for (int64_t t = 1; t < q->Tn; ++t) {
        const double *prev = A + (keep ? t - 1 : (t - 1) & 1) * S2;
        double *cur = A + (keep ? t : t & 1) * S2;
        for (int64_t s = 0; s < S2; ++s) {
            double a = prev[s];
            if (s > 0)
                a = lse(a, prev[s - 1]);
            if (skips(q, s))
                a = lse(a, prev[s - 2]);
            cur[s] = a + logp(q, t, symbol(q, s)); /* −∞ stays −∞; a NaN input spreads (PyTorch's) */
        }
    }
    const double *last = A + (keep ? q->Tn - 1 : (q->Tn - 1) & 1) * S2;
    return -(q->L > 0 ? lse(last[S2 - 1], last[S2 - 2]) : last[0]);
}

/* e^(γ + ℓ − lp), the share of the alignments through (t, c): 0 where none passes (γ = −∞)
 * and ℓ < +∞, also at lp = −∞ (a masked class); NaN when ℓ is +∞ (no alignment at all) or
 * NaN, as PyTorch's. */
static inline double occupancy(double gamma, double nll, double lp)
{
    return gamma == -INFINITY && nll < INFINITY ? 0.0 : exp(gamma + nll - lp);
}

/* The gradient rows of the sequence's T frames, times w, from its α (every frame) and loss. */
static void backward(const sequence *q, const double *A, double nll, double w, double *B, double *gamma)
{
    const ploss_ctc_problem *p = q->p;
    const int64_t S2 = 2 * q->L + 1, C = p->C;
    char *grad = p->grad;
    const int zero = p->zero_infinity && nll == INFINITY;
    for (int64_t t = p->T - 1; t >= 0; --t) {
        const int64_t row = t * p->g_st + q->n * p->g_sn;
        if (t >= q->Tn || zero) {
            for (int64_t c = 0; c < C; ++c)
                ploss_store(grad, p->x_dtype, row + c * p->g_sc, 0.0);
            continue;
        }
        double *cur = B + (t & 1) * S2;
        const double *next = B + ((t + 1) & 1) * S2;
        for (int64_t s = 0; s < S2; ++s) {
            double b;
            if (t == q->Tn - 1) {
                b = s >= S2 - 2 ? 0.0 : -INFINITY;
            } else {
                b = next[s];
                if (s + 1 < S2)
                    b = lse(b, next[s + 1]);
                if (s + 2 < S2 && skips(q, s + 2))
                    b = lse(b, next[s + 2]);
            }
            cur[s] = b + logp(q, t, symbol(q, s));
        }
        for (int64_t c = 0; c < C; ++c)
            gamma[c] = -INFINITY;
        const double *a = A + t * S2;
        for (int64_t s = 0; s < S2; ++s) {
            const int64_t c = symbol(q, s);
            gamma[c] = lse(gamma[c], a[s] + cur[s]);
        }
        for (int64_t c = 0; c < C; ++c) {
            const double lp = logp(q, t, c);
            ploss_store(grad, p->x_dtype, row + c * p->g_sc, (exp(lp) - occupancy(gamma[c], nll, lp)) * w);
        }
    }
}

ploss_status ploss_cpu_ctc(ploss_ctx_t *ctx, const ploss_ctc_problem *p)
{
    const int64_t N = p->N, S2 = 2 * p->max_target + 1;
    const int want_grad = p->pass != PLOSS_PASS_FORWARD;
    /* per thread: α (every frame with a gradient, else two), two frames of β, γ per class */
    const int64_t frames = want_grad ? (p->max_input > 0 ? p->max_input : 1) : 2;
    const size_t per_thread = (size_t)(frames * S2 + (want_grad ? 2 * S2 + p->C : 0));
    double *nll = NULL, *lse = NULL;
    ploss_status st = ploss_alloc(ctx, sizeof(double) * (size_t)(N + 1), (void **)&nll);
    if (st)
        return st;
    if (p->logits) {
        if ((st = ploss_alloc(ctx, sizeof(double) * (size_t)(p->T * N + 1), (void **)&lse))) {
            ploss_free(ctx, nll);
            return st;
        }
        row_lse(p, lse);
    }
    /* the upstream gradient of a reduced loss (MEAN divides per sequence below) */
    const double up = ploss_cpu_grad_scale(p->pass, p->reduction == PLOSS_REDUCTION_NONE ? PLOSS_REDUCTION_NONE
                                                                                        : PLOSS_REDUCTION_SUM,
                                           p->scale, p->grad_loss, p->gl_dtype, 1.0);
    int failed = 0;
    /* no more threads (each with its buffers) than sequences */
    const int threads = (int)(N < omp_get_max_threads() ? (N > 0 ? N : 1) : omp_get_max_threads());
#pragma omp parallel num_threads(threads)
    {
        double *work = NULL;
        if (ploss_alloc(ctx, sizeof(double) * per_thread, (void **)&work) != PLOSS_OK) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp barrier
        int stop;
#pragma omp atomic read
        stop = failed;
        if (!stop) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t n = 0; n < N; ++n) {
                const sequence q = {p, n, p->input_length[n], p->target_length[n], p->labels + p->offset[n], lse};
                const int64_t s2 = 2 * q.L + 1;
                nll[n] = forward(&q, work, want_grad);
                if (want_grad) {
                    double w;
                    if (p->reduction == PLOSS_REDUCTION_NONE)
                        w = p->pass == PLOSS_PASS_FUSED ? p->scale : ploss_load(p->grad_loss, p->gl_dtype, n * p->gl_sn);
                    else
                        w = p->reduction == PLOSS_REDUCTION_MEAN ? up / ((double)N * (double)(q.L > 0 ? q.L : 1)) : up;
                    backward(&q, work, nll[n], w, work + frames * S2, work + frames * S2 + 2 * s2);
                }
            }
        }
        ploss_free(ctx, work);
    }
    ploss_free(ctx, lse);
    if (failed) {
        ploss_free(ctx, nll);
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "CTC: the per-thread buffers of %zu bytes", sizeof(double) * per_thread);
    }
    if (p->pass != PLOSS_PASS_BACKWARD) {
        for (int64_t n = 0; n < N; ++n) {
            if (p->zero_infinity && nll[n] == INFINITY)
                nll[n] = 0.0;
            if (p->reduction == PLOSS_REDUCTION_MEAN)
                nll[n] /= (double)(p->target_length[n] > 0 ? p->target_length[n] : 1);
        }
        ploss_cpu_store_row_losses(p->loss, p->loss_dtype, p->l_sn, p->reduction, nll, N, (double)N);
    }
    ploss_free(ctx, nll);
    return PLOSS_OK;
}
