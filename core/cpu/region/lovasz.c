/*
 * lovasz.c — CPU backend of the Lovász-softmax loss (formulas in core/engines/region.h and
 * docs/losses.md), in double for every input dtype.
 *
 *  1. per pixel (OpenMP): the softmax of its C logits into a C × pixels buffer;
 *  2. per (group, class) segment (OpenMP, one segment per iteration): the errors of the
 *     group's valid pixels sorted in decreasing order, ties by increasing pixel index, by a
 *     stable radix sort of their bits (the order of the CUDA backend's); the foreground
 *     counts are integers and each Lovász weight is taken in closed form; L_gc in a fixed order, and, when a
 *     gradient is asked for, the signed weight of each pixel into a second buffer;
 *  3. the reduction over groups and classes in a fixed order, and the weight ω_gc of each
 *     L_gc in the reduced loss;
 *  4. per pixel (OpenMP): the gradient through the softmax.
 * Every buffer is freed before returning.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "chunks.h"
#include "region.h"
#include "scalar.h"

/* The sort key of an error: unsigned keys in increasing order are errors in decreasing
 * order, NaN first (as the CUDA keys rank it; NaN is key 0, which no number maps to). */
static uint64_t descending_key(double e)
{
    if (e != e)
        return 0;
    if (e == 0.0)
        e = 0.0; /* −0 as +0: they compare equal */
    uint64_t b;
    memcpy(&b, &e, sizeof b);
    b = b >> 63 ? ~b : b | 0x8000000000000000ull; /* increasing with e */
    return ~b;
}

/* Sorts n (key, index) pairs by key, stably (LSD radix sort of 8-bit digits; a digit that
 * every key shares is skipped); tk/ti: n pairs of scratch.  The pairs come back in k/i or
 * in tk/ti: *in_scratch says which. */
static void radix_sort(uint64_t *k, uint32_t *i, uint64_t *tk, uint32_t *ti, int64_t n, int *in_scratch)
{
    enum { DIGITS = 8 };
    int64_t count[DIGITS][256] = {{0}};
    for (int64_t j = 0; j < n; ++j)
        for (int d = 0; d < DIGITS; ++d)
            ++count[d][(k[j] >> (8 * d)) & 255];
    *in_scratch = 0;
    for (int d = 0; d < DIGITS; ++d) {
        if (n == 0 || count[d][(k[0] >> (8 * d)) & 255] == n)
            continue;
        int64_t start[256], at = 0;
        for (int b = 0; b < 256; ++b) {
            start[b] = at;
            at += count[d][b];
        }
        for (int64_t j = 0; j < n; ++j) {
            const int64_t to = start[(k[j] >> (8 * d)) & 255]++;
            tk[to] = k[j];
            ti[to] = i[j];
        }
        uint64_t *sk = k;
        uint32_t *si = i;
        k = tk, i = ti, tk = sk, ti = si;
        *in_scratch = !*in_scratch;
    }
}

/* The Lovász weight of rank k (1-based) with F of the first k pixels in the class, P in all. */
static double lovasz_weight(int64_t k, int64_t F, int64_t P, int foreground)
{
    const double a = (double)(P + k - F);
    return (k == 1 || foreground) ? 1.0 / a : (double)(P - F) / a / (a - 1.0);
}

ploss_status ploss_cpu_lovasz(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    const int64_t N = p->N, C = p->C, S = p->S, NS = N * S;
    const int64_t G = ploss_region_groups(p), M = ploss_region_group_pixels(p);
    const int want_grad = p->pass != PLOSS_PASS_FORWARD;
    ploss_status st = PLOSS_OK;
    double *prob = NULL, *signed_weight = NULL, *seg_loss = NULL, *omega = NULL;
    int64_t *label = NULL, *seg_count = NULL;

    if ((st = ploss_alloc(ctx, (size_t)(C * NS) * sizeof(double), (void **)&prob)) ||
        (want_grad && (st = ploss_alloc(ctx, (size_t)(C * NS) * sizeof(double), (void **)&signed_weight))) ||
        (st = ploss_alloc(ctx, (size_t)NS * sizeof(int64_t), (void **)&label)) ||
        (st = ploss_alloc(ctx, (size_t)(G * C) * sizeof(double), (void **)&seg_loss)) ||
        (st = ploss_alloc(ctx, (size_t)(G * C) * sizeof(double), (void **)&omega)) ||
        (st = ploss_alloc(ctx, (size_t)(G * C) * sizeof(int64_t), (void **)&seg_count)))
        goto done;

    /* 1. labels (-1: ignored; the front checked the range) and probabilities */
#pragma omp parallel for schedule(static)
    for (int64_t q = 0; q < NS; ++q) {
        const int64_t n = q / S, s = q % S;
        const int64_t y = ploss_load_int(p->t, p->t_dtype, n * p->t_sn + ploss_region_pixel_offset(p, p->t_ss, s));
        label[q] = y == p->ignore_index ? -1 : y;
        const int64_t xo = n * p->x_sn + ploss_region_pixel_offset(p, p->x_ss, s);
        double mx = -INFINITY;
        for (int64_t c = 0; c < C; ++c)
            mx = fmax(mx, ploss_load(p->x, p->x_dtype, xo + c * p->x_sc));
        double sum = 0.0;
        for (int64_t c = 0; c < C; ++c) {
            const double v = exp(ploss_load(p->x, p->x_dtype, xo + c * p->x_sc) - mx);
            prob[c * NS + q] = v;
            sum += v;
        }
        for (int64_t c = 0; c < C; ++c)
            prob[c * NS + q] /= sum;
    }

    /* 2. one (group, class) segment per iteration */
    if (M > (int64_t)UINT32_MAX) {
        st = ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "lovasz_softmax: a group of %lld pixels is more than the CPU "
                         "backend sorts (2^32 - 1)", (long long)M);
        goto done;
    }
    int failed = 0;
#pragma omp parallel
    {
        void *sort = NULL; /* keys and pixel indices, twice */
        if (ploss_alloc(ctx, (size_t)M * 2 * (sizeof(uint64_t) + sizeof(uint32_t)), &sort) != PLOSS_OK) {
#pragma omp atomic write
            failed = 1;
        }
        uint64_t *key = sort, *tkey = key + M;
        uint32_t *pix = (uint32_t *)(tkey + M), *tpix = pix + M;
#pragma omp for schedule(dynamic, 1)
        for (int64_t seg = 0; seg < G * C; ++seg) {
            if (!sort) {
                seg_loss[seg] = 0.0;
                seg_count[seg] = 0;
                continue;
            }
            const int64_t g = seg / C, c = seg % C, q0 = g * M;
            int64_t nv = 0, P = 0;
            for (int64_t j = 0; j < M; ++j) {
                const int64_t y = label[q0 + j];
                if (y < 0)
                    continue;
                const double pc = prob[c * NS + q0 + j];
                key[nv] = descending_key(y == c ? 1.0 - pc : pc);
                pix[nv] = (uint32_t)j;
                P += y == c;
                ++nv;
            }
            /* decreasing error, ties in increasing pixel order (the sort is stable) */
            int in_scratch;
            radix_sort(key, pix, tkey, tpix, nv, &in_scratch);
            const uint32_t *order = in_scratch ? tpix : pix;
            double L = 0.0;
            int64_t F = 0;
            for (int64_t k = 1; k <= nv; ++k) {
                const int64_t q = q0 + order[k - 1];
                const int fg = label[q] == c;
                const double pc = prob[c * NS + q];
                F += fg;
                const double w = lovasz_weight(k, F, P, fg);
                L += (fg ? 1.0 - pc : pc) * w;
                if (want_grad)
                    signed_weight[c * NS + q] = fg ? -w : w;
            }
            seg_loss[seg] = L;
            seg_count[seg] = P;
        }
        ploss_free(ctx, sort);
    }
    if (failed) {
        st = ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "lovasz_softmax: no memory for the sort of %lld pixels",
                         (long long)M);
        goto done;
    }

    /* 3. the reduction and the weight of each L_gc in it; which classes count */
    {
        int *listed = NULL;
        if (p->ids) {
            if ((st = ploss_alloc(ctx, (size_t)C * sizeof(int), (void **)&listed)))
                goto done;
            for (int64_t c = 0; c < C; ++c)
                listed[c] = 0;
            for (int64_t k = 0; k < p->ids_n; ++k)
                listed[ploss_load_int(p->ids, p->ids_dtype, k * p->ids_s)] = 1; /* the front checked the range */
        }
#define COUNTS(seg) (listed ? listed[(seg) % C] : !p->present || seg_count[seg] > 0)
        double total = 0.0;
        for (int64_t g = 0; g < G; ++g) {
            int64_t counted = 0;
            double group = 0.0;
            for (int64_t c = 0; c < C; ++c)
                if (COUNTS(g * C + c)) {
                    ++counted;
                    group += seg_loss[g * C + c];
                }
            for (int64_t c = 0; c < C; ++c) {
                const int64_t seg = g * C + c;
                const int counts = COUNTS(seg);
                double w = 0.0;
                if (counts) {
                    if (p->reduction == PLOSS_REDUCTION_MEAN)
                        w = 1.0 / ((double)G * (double)counted);
                    else
                        w = 1.0;
                    if (p->pass == PLOSS_PASS_BACKWARD)
                        w *= ploss_load(p->grad_loss, p->gl_dtype, g * p->gl_sg + c * p->gl_sc);
                    else
                        w *= p->scale;
                }
                omega[seg] = w;
                if (p->pass != PLOSS_PASS_BACKWARD && p->reduction == PLOSS_REDUCTION_NONE)
                    ploss_store(p->loss, p->loss_dtype, g * p->l_sg + c * p->l_sc, counts ? seg_loss[seg] : 0.0);
            }
            if (p->reduction == PLOSS_REDUCTION_SUM)
                total += group;
            else if (counted > 0)
                total += group / (double)counted;
        }
        if (p->pass != PLOSS_PASS_BACKWARD && p->reduction != PLOSS_REDUCTION_NONE)
            ploss_store(p->loss, p->loss_dtype, 0,
                        p->reduction == PLOSS_REDUCTION_MEAN ? total / (double)G : total);
#undef COUNTS
        ploss_free(ctx, listed);
    }

    /* 4. the gradient through the softmax; zero at ignored pixels */
    if (want_grad) {
#pragma omp parallel for schedule(static)
        for (int64_t q = 0; q < NS; ++q) {
            const int64_t n = q / S, s = q % S, g = p->per_image ? n : 0;
            const int64_t go = n * p->g_sn + ploss_region_pixel_offset(p, p->g_ss, s);
            if (label[q] < 0) {
                ploss_cpu_store_zeros(p->grad, p->x_dtype, go, p->g_sc, C);
                continue;
            }
            double dot = 0.0;
            for (int64_t c = 0; c < C; ++c)
                dot += prob[c * NS + q] * omega[g * C + c] * signed_weight[c * NS + q];
            for (int64_t c = 0; c < C; ++c) {
                const double pc = prob[c * NS + q];
                ploss_store(p->grad, p->x_dtype, go + c * p->g_sc,
                            pc * (omega[g * C + c] * signed_weight[c * NS + q] - dot));
            }
        }
    }

done:
    ploss_free(ctx, prob);
    ploss_free(ctx, signed_weight);
    ploss_free(ctx, label);
    ploss_free(ctx, seg_loss);
    ploss_free(ctx, omega);
    ploss_free(ctx, seg_count);
    return st;
}
