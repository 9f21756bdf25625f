/*
 * dice.c — CPU backend of the soft Dice losses (soft_dice, binary; generalized_soft_dice
 * per sample and batch_soft_dice over the batch, per class; formulas in
 * core/engines/region.h and docs/losses.md), in double for every input dtype.
 *
 *  1. per (sample, class) (OpenMP): A = Σ s·o, B = Σ (s^p + o), R = Σ o over its pixels,
 *     each in pixel order;
 *  2. per group, in a fixed order: the class weights, num, den, the loss and the weight ω_g
 *     of the group's loss in the reduced loss;
 *  3. per pixel (OpenMP): the gradient.
 */
#include <math.h>

#include "region.h"
#include "scalar.h"

static double power(double s, double e) { return e == 1.0 ? s : e == 2.0 ? s * s : pow(s, e); }

/* The target of pixel (n, s) for class c: the float target (binary) or the one-hot of the
 * label (0 at an ignored pixel); *valid: the pixel is not ignored. */
static double target(const ploss_region_problem *p, int64_t n, int64_t s, int64_t c, int *valid)
{
    const int64_t off = n * p->t_sn + ploss_region_pixel_offset(p, p->t_ss, s);
    if (p->binary) {
        *valid = 1;
        return ploss_load(p->t, p->t_dtype, off);
    }
    const int64_t y = ploss_load_int(p->t, p->t_dtype, off);
    *valid = y != p->ignore_index;
    return *valid && y == c;
}

ploss_status ploss_cpu_dice(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    const int64_t N = p->N, C = p->C, S = p->S, G = ploss_region_groups(p);
    ploss_status st;
    double *sums = NULL, *group = NULL; /* A, B, R per (n, c); w per (g, c), num, den, ω per g */
    if ((st = ploss_alloc(ctx, (size_t)(3 * N * C) * sizeof(double), (void **)&sums)) ||
        (st = ploss_alloc(ctx, (size_t)(G * C + 3 * G) * sizeof(double), (void **)&group))) {
        ploss_free(ctx, sums);
        return st;
    }
    double *A = sums, *B = sums + N * C, *R = sums + 2 * N * C;
    double *w = group, *num = group + G * C, *den = num + G, *omega = den + G;

    /* 1. per (sample, class) sums */
#pragma omp parallel for schedule(static)
    for (int64_t nc = 0; nc < N * C; ++nc) {
        const int64_t n = nc / C, c = nc % C;
        double a = 0.0, b = 0.0, r = 0.0;
        for (int64_t s = 0; s < S; ++s) {
            int valid;
            const double o = target(p, n, s, c, &valid);
            if (!valid && p->mask_ignored)
                continue;
            const double x = ploss_load(p->x, p->x_dtype, n * p->x_sn + c * p->x_sc + ploss_region_pixel_offset(p, p->x_ss, s));
            const double sg = 1.0 / (1.0 + exp(-x));
            a += sg * o;
            b += power(sg, p->exponent) + (p->binary ? power(o, p->exponent) : o);
            r += o;
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

    /* 3. the gradient */
    if (p->pass != PLOSS_PASS_FORWARD) {
#pragma omp parallel for schedule(static)
        for (int64_t q = 0; q < N * S; ++q) {
            const int64_t n = q / S, s = q % S, g = p->per_image ? n : 0;
            const int64_t xo = n * p->x_sn + ploss_region_pixel_offset(p, p->x_ss, s), go = n * p->g_sn + ploss_region_pixel_offset(p, p->g_ss, s);
            const double dens = den[g] * den[g];
            for (int64_t c = 0; c < C; ++c) {
                int valid;
                const double o = target(p, n, s, c, &valid);
                double d = 0.0;
                if (valid || !p->mask_ignored) {
                    const double x = ploss_load(p->x, p->x_dtype, xo + c * p->x_sc);
                    const double sg = 1.0 / (1.0 + exp(-x)), sg1 = 1.0 / (1.0 + exp(x)); /* σ(x), 1 − σ(x) */
                    d = num[g] * p->exponent * power(sg, p->exponent) * sg1 / dens;
                    d -= 2.0 * o * sg * sg1 / den[g];
                    d *= w[g * C + c] * omega[g];
                }
                ploss_store(p->grad, p->x_dtype, go + c * p->g_sc, d);
            }
        }
    }
    ploss_free(ctx, sums);
    ploss_free(ctx, group);
    return PLOSS_OK;
}
