/*
 * affinity.c — CPU backend of the affinity loss (local context prior; formulas in
 * core/engines/region.h and docs/losses.md), in double for every input dtype.
 *
 *  0. per pixel (OpenMP): its label and logits into buffers (the gradient may overwrite the
 *     input: an in-place fused pass);
 *  1. per pixel p (OpenMP): ℓ_p and its count Σ_q m(p, q) over the (2k − 1)² pixels it can
 *     share a window with; the reduction in pixel order;
 *  2. per pixel p (OpenMP): the gradient gathered from the same pixels.
 */
#include <math.h>

#include "chunks.h"
#include "region.h"
#include "scalar.h"

/* The number of windows of side k (stride 1, inside [0, size)) holding positions a and b. */
static int64_t shared_windows(int64_t a, int64_t b, int64_t k, int64_t size)
{
    const int64_t lo_max = a > b ? a : b, hi_min = a < b ? a : b;
    const int64_t lo = lo_max - k + 1 > 0 ? lo_max - k + 1 : 0, hi = hi_min < size - k ? hi_min : size - k;
    return hi >= lo ? hi - lo + 1 : 0;
}

/* The upstream gradient of pixel q's loss (backward, reduction NONE). */
static double upstream(const ploss_region_problem *p, int64_t q)
{
    return ploss_load(p->grad_loss, p->gl_dtype, ploss_region_pixel_at(p, q, p->gl_sg, p->gl_ss));
}

static double softplus(double a) { return fmax(a, 0.0) + log1p(exp(-fabs(a))); }

static int64_t label_at(const ploss_region_problem *p, int64_t q)
{
    const int64_t y = ploss_load_int(p->t, p->t_dtype, ploss_region_pixel_at(p, q, p->t_sn, p->t_ss));
    return y == p->ignore_index ? -1 : y;
}

/* x_p·x_q over the classes (xs: the logits, pixel-major). */
static double inner(const double *xs, int64_t C, int64_t a, int64_t b)
{
    double d = 0.0;
    for (int64_t c = 0; c < C; ++c)
        d += xs[a * C + c] * xs[b * C + c];
    return d;
}

/* Visit each valid q sharing m > 0 windows with pixel q0 (valid). */
#define FOR_EACH_PARTNER(p, label, q0, q, m, BODY)                                                   \
    do {                                                                                           \
        const int64_t k_ = (p)->kernel_size, H_ = (p)->sshape[0], W_ = (p)->sshape[1];             \
        const int64_t s0_ = (q0) % (p)->S, h0_ = s0_ / W_, w0_ = s0_ % W_;                         \
        for (int64_t dh_ = -(k_ - 1); dh_ <= k_ - 1; ++dh_)                                        \
            for (int64_t dw_ = -(k_ - 1); dw_ <= k_ - 1; ++dw_) {                                  \
                const int64_t h_ = h0_ + dh_, w_ = w0_ + dw_;                                      \
                if (h_ < 0 || h_ >= H_ || w_ < 0 || w_ >= W_)                                      \
                    continue;                                                                      \
                const int64_t q = (q0) - s0_ + h_ * W_ + w_;                                       \
                const int64_t m = shared_windows(h0_, h_, k_, H_) * shared_windows(w0_, w_, k_, W_); \
                if (m == 0 || (label)[q] < 0)                                                      \
                    continue;                                                                      \
                BODY                                                                               \
            }                                                                                      \
    } while (0)

ploss_status ploss_cpu_affinity(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    const int64_t NS = p->N * p->S, C = p->C;
    ploss_status st;
    int64_t *label = NULL, *count = NULL;
    double *lp = NULL, *xs = NULL;
    if ((st = ploss_alloc(ctx, (size_t)NS * sizeof(int64_t), (void **)&label)) ||
        (st = ploss_alloc(ctx, (size_t)NS * sizeof(int64_t), (void **)&count)) ||
        (st = ploss_alloc(ctx, (size_t)NS * sizeof(double), (void **)&lp)) ||
        (st = ploss_alloc(ctx, (size_t)(NS * C) * sizeof(double), (void **)&xs)))
        goto done;

    /* 0. labels and logits */
#pragma omp parallel for schedule(static)
    for (int64_t q = 0; q < NS; ++q) {
        label[q] = label_at(p, q);
        const int64_t xo = ploss_region_pixel_at(p, q, p->x_sn, p->x_ss);
        for (int64_t c = 0; c < C; ++c)
            xs[q * C + c] = ploss_load(p->x, p->x_dtype, xo + c * p->x_sc);
    }

    /* 1. ℓ_p and its count */
#pragma omp parallel for schedule(static)
    for (int64_t q0 = 0; q0 < NS; ++q0) {
        double l = 0.0;
        int64_t n = 0;
        if (label[q0] >= 0)
            FOR_EACH_PARTNER(p, label, q0, q, m, {
                const double A = inner(xs, C, q0, q);
                l += (double)m * (softplus(A) - (label[q0] == label[q] ? A : 0.0));
                n += m;
            });
        lp[q0] = l;
        count[q0] = n;
    }
    double total = 0.0;
    int64_t pairs = 0;
    for (int64_t q = 0; q < NS; ++q) {
        total += lp[q];
        pairs += count[q];
    }
    if (p->pass != PLOSS_PASS_BACKWARD) {
        if (p->reduction == PLOSS_REDUCTION_NONE) {
            for (int64_t q = 0; q < NS; ++q)
                ploss_store(p->loss, p->loss_dtype, ploss_region_pixel_at(p, q, p->l_sg, p->l_ss), lp[q]);
        } else {
            ploss_store(p->loss, p->loss_dtype, 0,
                        p->reduction == PLOSS_REDUCTION_MEAN ? total / (double)pairs : total);
        }
    }

    /* 2. the gradient: Σ_q m·(σ(A) − T)·x_q·(ω_p + ω_q) */
    if (p->pass != PLOSS_PASS_FORWARD) {
        double base = p->reduction == PLOSS_REDUCTION_MEAN ? (pairs > 0 ? 1.0 / (double)pairs : 0.0) : 1.0;
        if (p->pass == PLOSS_PASS_BACKWARD && p->reduction != PLOSS_REDUCTION_NONE)
            base *= ploss_load(p->grad_loss, p->gl_dtype, 0);
        else if (p->pass != PLOSS_PASS_BACKWARD)
            base *= p->scale;
        const int per_pixel = p->pass == PLOSS_PASS_BACKWARD && p->reduction == PLOSS_REDUCTION_NONE;
        int failed = 0;
#pragma omp parallel
        {
            double *G = NULL;
            if (ploss_alloc(ctx, (size_t)C * sizeof(double), (void **)&G) != PLOSS_OK) {
#pragma omp atomic write
                failed = 1;
            }
#pragma omp for schedule(static)
            for (int64_t q0 = 0; q0 < NS; ++q0) {
                const int64_t go = ploss_region_pixel_at(p, q0, p->g_sn, p->g_ss);
                ploss_cpu_store_zeros(p->grad, p->x_dtype, go, p->g_sc, C);
                if (!G || label[q0] < 0)
                    continue;
                const double w0 = per_pixel ? upstream(p, q0) : 1.0;
                for (int64_t c = 0; c < C; ++c)
                    G[c] = 0.0;
                FOR_EACH_PARTNER(p, label, q0, q, m, {
                    const double A = inner(xs, C, q0, q);
                    const double slope = 1.0 / (1.0 + exp(-A)) - (label[q0] == label[q] ? 1.0 : 0.0);
                    const double f = (double)m * slope * (w0 + (per_pixel ? upstream(p, q) : 1.0));
                    for (int64_t c = 0; c < C; ++c)
                        G[c] += f * xs[q * C + c];
                });
                for (int64_t c = 0; c < C; ++c)
                    ploss_store(p->grad, p->x_dtype, go + c * p->g_sc, base * G[c]);
            }
            ploss_free(ctx, G);
        }
        if (failed)
            st = ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "affinity: no memory for a gradient row of %lld classes",
                             (long long)C);
    }

done:
    ploss_free(ctx, label);
    ploss_free(ctx, count);
    ploss_free(ctx, lp);
    ploss_free(ctx, xs);
    return st;
}
