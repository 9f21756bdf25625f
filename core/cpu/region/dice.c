/*
 * dice.c — CPU backend of the soft Dice losses (soft_dice, binary; generalized_soft_dice
 * per sample and batch_soft_dice over the batch, per class; formulas in
 * core/engines/region.h and docs/losses.md).  f32, f16 and bf16 inputs are computed in
 * float, f64 in double (dice_impl.h, once for each); every sum in double.
 *
 *  1. per (sample, chunk of CHUNK pixels) (OpenMP): the chunk's labels read once, then per
 *     class A = Σ s·o, B = Σ (s^p + o), R = Σ o over its pixels (vector loops);
 *  2. per (sample, class): the chunks' sums added in chunk order (so the result does not
 *     depend on the number of threads); per group, in a fixed order: the class weights,
 *     num, den, the loss and the weight ω_g of the group's loss in the reduced loss;
 *  3. per (sample, chunk) (OpenMP): the gradient.
 * Compiled once per instruction set (core/cpu/isa.h).
 */
#include <math.h>
#include <stdint.h>

#include "chunks.h"
#include "isa.h"
#include "region.h"
#include "scalar.h"
#include "vmath.h"

enum { CHUNK = 2048 }; /* pixels a task reads at a time, and the unit of the partial sums */

/* The pixels [s0, s0 + n) of a sample lie in runs along the last merged spatial dim: the
 * length of the run from s0 (at most n) and its stride in a tensor of spatial strides ss. */
static int64_t run_from(const ploss_region_problem *p, int64_t s0, int64_t n)
{
    if (p->sdim == 0)
        return n;
    const int64_t L = p->sshape[p->sdim - 1], left = L - s0 % L;
    return left < n ? left : n;
}
static int64_t run_stride(const ploss_region_problem *p, const int64_t *ss) { return p->sdim ? ss[p->sdim - 1] : 1; }

#define PLOSS_REAL_IMPL "region/dice_impl.h"
#include "real_types.h"

ploss_status PLOSS_ISA_FN(ploss_cpu_dice)(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    const int64_t N = p->N, C = p->C, S = p->S, G = ploss_region_groups(p), K = (S + CHUNK - 1) / CHUNK;
    ploss_status st;
    double *part = NULL, *group = NULL; /* A, B, R per (n, chunk, c); per (n, c); w per (g, c), num, den, ω per g */
    if ((st = ploss_alloc(ctx, (size_t)(3 * N * K * C + 3 * N * C) * sizeof(double), (void **)&part)) ||
        (st = ploss_alloc(ctx, (size_t)(G * C + 3 * G) * sizeof(double), (void **)&group))) {
        ploss_free(ctx, part);
        return st;
    }
    double *A = part + 3 * N * K * C, *B = A + N * C, *R = B + N * C;
    double *w = group, *num = group + G * C, *den = num + G, *omega = den + G;

    /* 1. the chunks' sums, then per (sample, class) in chunk order */
    if (p->x_dtype == PLOSS_F64)
        sums_f64(p, K, part);
    else
        sums_f32(p, K, part);
    for (int64_t nc = 0; nc < N * C; ++nc) {
        const int64_t n = nc / C, c = nc % C;
        double a = 0.0, b = 0.0, r = 0.0;
        for (int64_t k = 0; k < K; ++k) {
            const double *q = part + 3 * ((n * K + k) * C + c);
            a += q[0];
            b += q[1];
            r += q[2];
        }
        A[nc] = a;
        B[nc] = b;
        R[nc] = r;
    }

    /* 2. per group: weights, num, den, loss; the reduction */
    double total = 0.0;
    for (int64_t g = 0; g < G; ++g) {
        const int64_t n0 = p->per_image ? g : 0, n1 = p->per_image ? g + 1 : N;
        double wmax = 0.0;
        for (int64_t c = 0; c < C; ++c) {
            double rc = 0.0;
            for (int64_t n = n0; n < n1; ++n)
                rc += R[n * C + c];
            double wc = 1.0;
            if (p->sudre)
                wc = rc > 0.0 ? 1.0 / (rc * rc) : -1.0; /* absent: the largest weight, below */
            else if (p->w)
                wc = ploss_load(p->w, p->w_dtype, c * p->w_s);
            w[g * C + c] = wc;
            wmax = fmax(wmax, wc);
        }
        double a = 0.0, b = 0.0;
        for (int64_t c = 0; c < C; ++c) {
            if (w[g * C + c] < 0.0 && p->sudre)
                w[g * C + c] = wmax;
            for (int64_t n = n0; n < n1; ++n) {
                a += w[g * C + c] * A[n * C + c];
                b += w[g * C + c] * B[n * C + c];
            }
        }
        num[g] = 2.0 * a + p->smooth;
        den[g] = b + p->smooth;
        const double loss = 1.0 - num[g] / den[g];
        double om = p->reduction == PLOSS_REDUCTION_MEAN ? 1.0 / (double)G : 1.0;
        om *= p->pass == PLOSS_PASS_BACKWARD ? ploss_load(p->grad_loss, p->gl_dtype, g * p->gl_sg) : p->scale;
        omega[g] = om;
        if (p->pass != PLOSS_PASS_BACKWARD && p->reduction == PLOSS_REDUCTION_NONE)
            ploss_store(p->loss, p->loss_dtype, g * p->l_sg, loss);
        total += loss;
    }
    if (p->pass != PLOSS_PASS_BACKWARD && p->reduction != PLOSS_REDUCTION_NONE)
        ploss_store(p->loss, p->loss_dtype, 0, p->reduction == PLOSS_REDUCTION_MEAN ? total / (double)G : total);

    /* 3. the gradient: per (group, class) d = k1·s^p·(1 − s) − k2·o·s·(1 − s) with
     * k1 = num·p·w_c·ω/den², k2 = 2·w_c·ω/den (part's first 2·G·C doubles, free now); a
     * group whose den is 0 (its loss 0/0: smooth = 0 and every weighted sum 0, as Sudre's
     * weights of a group whose pixels are all ignored) gets 0 */
    if (p->pass != PLOSS_PASS_FORWARD) {
        double *k1 = part, *k2 = part + G * C;
        for (int64_t g = 0; g < G; ++g) {
            const double om = den[g] != 0.0 ? omega[g] : 0.0, dg = den[g] != 0.0 ? den[g] : 1.0;
            for (int64_t c = 0; c < C; ++c) {
                const double wo = w[g * C + c] * om;
                k1[g * C + c] = num[g] * p->exponent * wo / (dg * dg);
                k2[g * C + c] = 2.0 * wo / dg;
            }
        }
        if (p->x_dtype == PLOSS_F64)
            gradient_f64(p, K, k1, k2);
        else
            gradient_f32(p, K, k1, k2);
    }
    ploss_free(ctx, part);
    ploss_free(ctx, group);
    return PLOSS_OK;
}
