/*
 * ctc.c — CPU backend of the CTC loss (formulas in docs/losses.md and core/ploss_losses.h),
 * in double for every input dtype, one sequence per OpenMP iteration:
 *
 *  0. with logits: the log-sum-exp of every (frame, sequence) row (log_probs = x − it);
 *  1. α over the sequence's frames in log space (every frame kept when a gradient is wanted,
 *     two otherwise) and its loss ℓ_n;
 *  2. with a gradient: β from the last frame back, two frames at a time; at frame t the
 *     γ_t(c) of the classes of the extended target from α_t + β_t, then the frame's gradient
 *     row; frames past the sequence's length get zeros;
 *  3. the loss, reduced in sequence order.
 * A frame's recursion is one vector loop over the extended target's positions: each row of
 * α and β has two −∞ cells of padding on the side the recursion reads past, and a label
 * position that may not skip its predecessor adds −∞ to that term, so the log-sum-exp of the
 * three terms needs no branch (libmvec's exp and log, core/cpu/vmath.h).  Each thread's
 * buffers are allocated before anything is written.  Compiled once per instruction set
 * (core/cpu/isa.h).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "chunks.h"
#include "isa.h"
#include "scalar.h"
#include "sequence.h"
#include "vmath.h"

enum { PAD = 2 }; /* −∞ cells before each α row, after each β row */

typedef struct {
    const ploss_ctc_problem *p;
    int64_t n, Tn, L, S2;
    const int32_t *lab;
    const double *lse; /* logits: the rows' log-sum-exps (row t·N + n); NULL: log_probs given */
    double *sym_lp;    /* S2: the log-probability of each position's symbol at the frame */
    double *skip;      /* S2: 0 where position s may come from s − 2 (a label unlike the one
                        * before it), else −∞ */
} sequence;

/* The class of position s of the extended target (blank, l_1, blank, …, l_L, blank). */
static inline int64_t symbol(const sequence *q, int64_t s) { return s & 1 ? q->lab[s >> 1] : q->p->blank; }

static inline double logp(const sequence *q, int64_t t, int64_t c)
{
    const ploss_ctc_problem *p = q->p;
    const double v = ploss_load(p->x, p->x_dtype, t * p->x_st + q->n * p->x_sn + c * p->x_sc);
    return q->lse ? v - q->lse[t * p->N + q->n] : v;
}

/* The frame's log-probabilities of the positions' symbols into q->sym_lp. */
static void frame_symbols(const sequence *q, int64_t t)
{
    const double blank = logp(q, t, q->p->blank);
    for (int64_t s = 0; s < q->S2; ++s)
        q->sym_lp[s] = s & 1 ? logp(q, t, q->lab[s >> 1]) : blank;
}

/* x, or −700 below it: libmvec's exp takes a slow path for −∞ (and e^−745 is subnormal),
 * while e^−700 vanishes beside the 1 of the largest term.  A NaN stays NaN. */
static inline double floor700(double x) { return x < -700.0 ? -700.0 : x; }

/* log(e^a + e^b + e^c) + y, −∞ when all three are −∞; a NaN spreads (through an
 * exponential where the max skips it).  Compares, not fmax (a libm call that stops the
 * vectoriser). */
static inline double lse3(double a, double b, double c, double y)
{
    const double ab = a > b ? a : b, m = ab > c ? ab : c, m0 = m == -INFINITY ? 0.0 : m;
    const double r = m0 + log(exp(floor700(a - m0)) + exp(floor700(b - m0)) + exp(floor700(c - m0))) + y;
    /* all three −∞: −∞ (NaN for a NaN or +∞ y); a NaN that the comparisons passed over
     * (the others −∞): NaN — the sum keeps both */
    return m == -INFINITY ? a + b + c + y : r;
}

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

/* α of frames [0, Tn) into A (row t at A + PAD + (keep ? t : t & 1)·(S2 + PAD), the PAD
 * cells before it −∞) and the loss −log p(l | x). */
static double forward(const sequence *q, double *A, int keep)
{
    const int64_t S2 = q->S2, W = S2 + PAD;
    if (q->Tn == 0)
        return q->L == 0 ? 0.0 : INFINITY;
    for (int64_t r = 0; r < (keep ? q->Tn : 2); ++r)
        A[r * W] = A[r * W + 1] = -INFINITY;
    frame_symbols(q, 0);
    double *row0 = A + PAD;
    for (int64_t s = 0; s < S2; ++s)
        row0[s] = s < 2 ? q->sym_lp[s] : -INFINITY;
    for (int64_t t = 1; t < q->Tn; ++t) {
        const double *prev = A + PAD + (keep ? t - 1 : (t - 1) & 1) * W;
        double *cur = A + PAD + (keep ? t : t & 1) * W;
        const double *y = q->sym_lp, *skip = q->skip;
        frame_symbols(q, t);
#pragma omp simd
        for (int64_t s = 0; s < S2; ++s)
            cur[s] = lse3(prev[s], prev[s - 1], prev[s - 2] + skip[s], y[s]);
    }
    const double *last = A + PAD + (keep ? q->Tn - 1 : (q->Tn - 1) & 1) * W;
    return 0.0 - (q->L > 0 ? lse(last[S2 - 1], last[S2 - 2]) : last[0]); /* +0, not −0, for a probability of 1 */
}

/* e^(γ + ℓ − lp), the share of the alignments through (t, c): 0 where none passes (γ = −∞)
 * and ℓ < +∞, also at lp = −∞ (a masked class); NaN when ℓ is +∞ (no alignment at all) or
 * NaN, as PyTorch's. */
static inline double occupancy(double gamma, double nll, double lp)
{
    const double e = exp(floor700(gamma + nll - lp)); /* (e^−700: the log-probability's own term) */
    return gamma == -INFINITY && nll < INFINITY ? 0.0 : e;
}

/* The gradient rows of the sequence's T frames, times w, from its α (every frame) and loss:
 * B two rows of β (each followed by PAD −∞ cells), gamma and row C values each. */
static void backward(const sequence *q, const double *A, double nll, double w, double *B, double *gamma, double *row)
{
    const ploss_ctc_problem *p = q->p;
    const int64_t S2 = q->S2, W = S2 + PAD, C = p->C;
    char *grad = p->grad;
    const int zero = p->zero_infinity && nll == INFINITY;
    for (int r = 0; r < 2; ++r)
        B[r * W + S2] = B[r * W + S2 + 1] = -INFINITY;
    for (int64_t c = 0; c < C; ++c)
        gamma[c] = -INFINITY;
    for (int64_t t = p->T - 1; t >= 0; --t) {
        const int64_t base = t * p->g_st + q->n * p->g_sn;
        if (t >= q->Tn || zero) {
            for (int64_t c = 0; c < C; ++c)
                ploss_store(grad, p->x_dtype, base + c * p->g_sc, 0.0);
            continue;
        }
        double *cur = B + (t & 1) * W;
        const double *next = B + ((t + 1) & 1) * W, *y = q->sym_lp, *skip = q->skip;
        frame_symbols(q, t);
        if (t == q->Tn - 1) {
            for (int64_t s = 0; s < S2; ++s)
                cur[s] = s >= S2 - 2 ? y[s] : -INFINITY;
        } else {
            /* s + 2 may come from s where s + 2 may skip back to s */
#pragma omp simd
            for (int64_t s = 0; s < S2; ++s)
                cur[s] = lse3(next[s], next[s + 1], next[s + 2] + (s + 2 < S2 ? skip[s + 2] : -INFINITY), y[s]);
        }
        /* γ of the target's classes (the others stay −∞) */
        const double *a = A + PAD + t * W;
        for (int64_t s = 0; s < S2; ++s) {
            const int64_t c = symbol(q, s);
            gamma[c] = lse(gamma[c], a[s] + cur[s]);
        }
        for (int64_t c = 0; c < C; ++c)
            row[c] = logp(q, t, c);
        if (nll < INFINITY && C >= 8 * (q->L + 1)) {
            /* many more classes than the target has: e^lp·w for every class (a vector loop),
             * then the occupancy of the target's classes alone (the others' is 0, a scalar
             * exponential each), each class's γ used once and set back to −∞ */
#pragma omp simd
            for (int64_t c = 0; c < C; ++c)
                row[c] = exp(floor700(row[c])) * (row[c] > -INFINITY) * w;
            for (int64_t s = 0; s < S2; ++s) {
                const int64_t c = symbol(q, s);
                if (gamma[c] != -INFINITY) {
                    row[c] -= exp(gamma[c] + nll - logp(q, t, c)) * w;
                    gamma[c] = -INFINITY;
                }
            }
        } else { /* every class's occupancy in the vector loop (also where ℓ = +∞ or NaN:
                  * NaN where PyTorch's formula gives it) */
#pragma omp simd
            for (int64_t c = 0; c < C; ++c)
                row[c] = (exp(floor700(row[c])) * (row[c] > -INFINITY) - occupancy(gamma[c], nll, row[c])) * w;
            for (int64_t s = 0; s < S2; ++s) /* back to −∞ for the next frame */
                gamma[symbol(q, s)] = -INFINITY;
        }
        for (int64_t c = 0; c < C; ++c)
            ploss_store(grad, p->x_dtype, base + c * p->g_sc, row[c]);
    }
}

/* log Σ_c e^x[t, n, c] of every row of the logits into lse[t·N + n]; `row` C values a thread. */
static ploss_status row_lse(ploss_ctx_t *ctx, const ploss_ctc_problem *p, double *lse)
{
    int failed = 0;
#pragma omp parallel
    {
        double *row = NULL;
        if (ploss_alloc(ctx, sizeof(double) * (size_t)(p->C + 1), (void **)&row) != PLOSS_OK) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < p->T * p->N; ++r) {
            if (!row)
                continue;
            const int64_t base = (r / p->N) * p->x_st + (r % p->N) * p->x_sn;
            double m = -INFINITY, s = 0.0;
            for (int64_t c = 0; c < p->C; ++c) {
                row[c] = ploss_load(p->x, p->x_dtype, base + c * p->x_sc);
                m = row[c] > m ? row[c] : m;
            }
#pragma omp simd reduction(+ : s)
            for (int64_t c = 0; c < p->C; ++c)
                s += exp(floor700(row[c] - m)) * (row[c] > -INFINITY);
            lse[r] = m + log(s);
        }
        ploss_free(ctx, row);
    }
    return failed ? ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "CTC: a row buffer of %lld values", (long long)p->C)
                  : PLOSS_OK;
}

ploss_status PLOSS_ISA_FN(ploss_cpu_ctc)(ploss_ctx_t *ctx, const ploss_ctc_problem *p)
{
    const int64_t N = p->N, S2 = 2 * p->max_target + 1, W = S2 + PAD;
    const int want_grad = p->pass != PLOSS_PASS_FORWARD;
    /* per thread: α (every frame with a gradient, else two), two frames of β, γ and a row
     * per class, the positions' symbols' log-probabilities and skip terms */
    const int64_t frames = want_grad ? (p->max_input > 0 ? p->max_input : 1) : 2;
    const size_t per_thread = (size_t)(frames * W + 2 * S2 + (want_grad ? 2 * W + 2 * p->C : 0));
    double *nll = NULL, *lse = NULL;
    ploss_status st = ploss_alloc(ctx, sizeof(double) * (size_t)(N + 1), (void **)&nll);
    if (st)
        return st;
    if (p->logits) {
        if ((st = ploss_alloc(ctx, sizeof(double) * (size_t)(p->T * N + 1), (void **)&lse)) ||
            (st = row_lse(ctx, p, lse))) {
            ploss_free(ctx, lse);
            ploss_free(ctx, nll);
            return st;
        }
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
                const int64_t L = p->target_length[n];
                double *sym = work + frames * W, *skip = sym + S2;
                sequence q = {p, n, p->input_length[n], L, 2 * L + 1, p->labels + p->offset[n], lse, sym, skip};
                for (int64_t s = 0; s < q.S2; ++s)
                    skip[s] = (s & 1) && s > 1 && q.lab[s >> 1] != q.lab[(s >> 1) - 1] ? 0.0 : -INFINITY;
                nll[n] = forward(&q, work, want_grad);
                if (want_grad) {
                    double w;
                    if (p->reduction == PLOSS_REDUCTION_NONE)
                        w = p->pass == PLOSS_PASS_FUSED ? p->scale : ploss_load(p->grad_loss, p->gl_dtype, n * p->gl_sn);
                    else
                        w = p->reduction == PLOSS_REDUCTION_MEAN ? up / ((double)N * (double)(L > 0 ? L : 1)) : up;
                    double *B = skip + S2, *gamma = B + 2 * W;
                    backward(&q, work, nll[n], w, B, gamma, gamma + p->C);
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
