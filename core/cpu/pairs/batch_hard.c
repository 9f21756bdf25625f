/*
 * batch_hard.c — CPU backend of the batch-hard triplet loss (core/engines/pairs.h), in f64
 * whatever the dtype:
 *   1. the embeddings in f64 and their squared norms;
 *   2. row blocks of the Gram matrix X·Xᵀ through the project's GEMM (OpenBLAS dgemm), each
 *      block mined at once into the hardest positive and negative of its anchors (ties: the
 *      lowest index) — only one block of at most BLOCK_ELEMS values exists at a time;
 *   3. per anchor the two chosen distances recomputed from the rows, its loss and ∂ℓ/∂d;
 *   4. the gradient: every anchor's two pairs send terms to both of their rows; the terms a
 *      row receives from other anchors are listed per row (a counting sort, in anchor order)
 *      and each row adds its own and then those, in that fixed order.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "chunks.h"
#include "dispatch.h"
#include "gemm.h"
#include "pairs.h"
#include "scalar.h"

enum { BLOCK_ELEMS = 1 << 20 }; /* doubles of one Gram block */

typedef struct {
    int64_t pos, neg;            /* the hardest positive and negative (-1: none)            */
    ploss_pair_terms tp, tn;     /* the gradient terms of the two pairs                     */
    double loss, c;              /* ℓ_i and ∂ℓ/∂d_ap                                        */
} anchor_t;

static int64_t label_of(const ploss_batch_hard_problem *p, int64_t i)
{
    return ploss_load_int(p->labels, p->label_dtype, i * p->y_sn);
}

/* Σ(u − v)² and u·v */
static void pair_sums(const double *u, const double *v, int64_t D, double *dd, double *dot)
{
    double s = 0.0, t = 0.0;
    for (int64_t j = 0; j < D; ++j) {
        const double z = u[j] - v[j];
        s += z * z;
        t += u[j] * v[j];
    }
    *dd = s;
    *dot = t;
}

ploss_status ploss_cpu_batch_hard(ploss_ctx_t *ctx, const ploss_batch_hard_problem *p)
{
    const int64_t N = p->N, D = p->D;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;
    const int64_t B = N == 0 ? 0 : (N >= BLOCK_ELEMS ? 1 : (BLOCK_ELEMS / N < N ? BLOCK_ELEMS / N : N));

    /* every buffer is taken before the first write to an output */
    const size_t n_x = (size_t)N * (size_t)D, n_tile = (size_t)B * (size_t)N;
    void *ws = NULL;
    const size_t bytes = (n_x + (size_t)N + n_tile) * sizeof(double) + (size_t)N * sizeof(anchor_t) +
                         (3 * (size_t)N + 1) * sizeof(int64_t);
    ploss_status st = ploss_alloc(ctx, bytes, &ws);
    if (st)
        return st;
    double *x = ws, *sq = x + n_x, *tile = sq + N;
    anchor_t *an = (anchor_t *)(tile + n_tile);
    int64_t *start = (int64_t *)(an + N), *entries = start + N + 1;

    /* 1. the rows in f64 and their squared norms */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
        double *r = x + (size_t)i * (size_t)D;
        ploss_cpu_load_f64(r, p->x.data, p->dtype, i * p->x.sn, p->x.sd, D);
        double s = 0.0;
        for (int64_t j = 0; j < D; ++j)
            s += r[j] * r[j];
        sq[i] = s;
    }

    /* 2. Gram blocks, mined as they come */
    for (int64_t b0 = 0; b0 < N; b0 += B) {
        const int64_t rows = N - b0 < B ? N - b0 : B;
        const ploss_gemm_problem g = {.m = rows, .n = N, .k = D, .alpha = 1.0, .beta = 0.0,
                                      .a = x + (size_t)b0 * (size_t)D, .trans_a = 0, .lda = D > 0 ? D : 1,
                                      .b = x, .trans_b = 1, .ldb = D > 0 ? D : 1, .ab_dtype = PLOSS_F64,
                                      .c = tile, .ldc = N, .c_dtype = PLOSS_F64};
        if ((st = ploss_cpu_gemm(ctx, &g))) {
            ploss_free(ctx, ws);
            return st;
        }
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = b0 + r, yi = label_of(p, i);
            const double *t = tile + (size_t)r * (size_t)N;
            int64_t bp = -1, bn = -1;
            double dp = 0.0, dn = 0.0;
            for (int64_t j = 0; j < N; ++j) {
                if (j == i)
                    continue;
                const double d = ploss_pair_distance_from_gram(p->distance, t[j], sq[i], sq[j]);
                if (label_of(p, j) == yi) {
                    if (bp < 0 || d > dp)
                        bp = j, dp = d;
                } else if (bn < 0 || d < dn) {
                    bn = j, dn = d;
                }
            }
            an[i].pos = bp;
            an[i].neg = bn;
        }
    }

    /* 3. each active anchor's loss and ∂ℓ/∂d from its two recomputed distances */
    int64_t active = 0;
#pragma omp parallel for schedule(static) reduction(+ : active)
    for (int64_t i = 0; i < N; ++i) {
        anchor_t *a = &an[i];
        a->loss = a->c = 0.0;
        if (a->pos < 0 || a->neg < 0)
            continue;
        ++active;
        const double *xi = x + (size_t)i * (size_t)D;
        double dd, dot;
        pair_sums(xi, x + (size_t)a->pos * (size_t)D, D, &dd, &dot);
        a->tp = ploss_pair_terms_of(p->distance, dd, dot, sq[i], sq[a->pos]);
        pair_sums(xi, x + (size_t)a->neg * (size_t)D, D, &dd, &dot);
        a->tn = ploss_pair_terms_of(p->distance, dd, dot, sq[i], sq[a->neg]);
        a->loss = ploss_triplet_hinge(a->tp.d, a->tn.d, p->margin, p->soft_margin, &a->c);
    }

    if (want_loss) {
        if (none) {
            for (int64_t i = 0; i < N; ++i)
                ploss_store(p->loss, p->loss_dtype, i * p->l_sn, an[i].loss);
        } else {
            double s = 0.0;
            for (int64_t i = 0; i < N; ++i)
                s += an[i].loss;
            /* no active anchor: 0, not 0/0 */
            const double v = p->reduction == PLOSS_REDUCTION_MEAN ? (active ? s / (double)active : 0.0) : s;
            ploss_store(p->loss, p->loss_dtype, 0, v);
        }
    }

    if (want_grad) {
        /* ω·c per anchor: the weight of its positive pair (its negative pair: minus it) */
        const double omega =
            ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, (double)active);
        const int per_row_gl = p->pass == PLOSS_PASS_BACKWARD && none;
        for (int64_t i = 0; i < N; ++i) /* an inactive anchor's c stays 0 (ω may be NaN or ∞) */
            if (an[i].c != 0.0)
                an[i].c *= per_row_gl ? ploss_load(p->grad_loss, p->gl_dtype, i * p->gl_sn) : omega;
        /* the pairs that reach row j from other anchors: entry e < N is anchor e's positive
         * pair, e >= N anchor e − N's negative pair; listed per row in increasing e */
        memset(start, 0, (size_t)(N + 1) * sizeof *start);
        for (int64_t i = 0; i < N; ++i)
            if (an[i].c != 0.0) {
                ++start[an[i].pos + 1];
                ++start[an[i].neg + 1];
            }
        for (int64_t j = 0; j < N; ++j)
            start[j + 1] += start[j];
        int64_t *fill = (int64_t *)tile; /* the Gram block (B·N >= N values) is free now */
        memcpy(fill, start, (size_t)N * sizeof *fill);
        for (int64_t e = 0; e < 2 * N; ++e) {
            const anchor_t *a = &an[e < N ? e : e - N];
            if (a->c != 0.0)
                entries[fill[e < N ? a->pos : a->neg]++] = e;
        }
        ploss_cpu_rows b;
        if ((st = ploss_cpu_rows_alloc(&b, "batch_hard_triplet", N, D, 1, 1))) {
            ploss_free(ctx, ws);
            return st;
        }
#pragma omp parallel
        {
            double *g = N > 0 ? ploss_cpu_rows_thread(&b, omp_get_thread_num()) : NULL;
#pragma omp for schedule(static)
            for (int64_t k = 0; k < N; ++k) {
                const anchor_t *a = &an[k];
                const double *xk = x + (size_t)k * (size_t)D;
                double self = 0.0;
                for (int64_t j = 0; j < D; ++j)
                    g[j] = 0.0;
                if (a->c != 0.0) { /* as the anchor of its two pairs */
                    self += a->c * (a->tp.self_i - a->tn.self_i);
                    const double *xp = x + (size_t)a->pos * (size_t)D, *xn = x + (size_t)a->neg * (size_t)D;
                    const double kp = a->c * a->tp.cross, kn = -a->c * a->tn.cross;
                    for (int64_t j = 0; j < D; ++j)
                        g[j] += kp * xp[j] + kn * xn[j];
                }
                for (int64_t q = start[k]; q < start[k + 1]; ++q) { /* as another anchor's partner */
                    const int64_t e = entries[q], i = e < N ? e : e - N;
                    const double w = e < N ? an[i].c : -an[i].c;
                    const ploss_pair_terms *t = e < N ? &an[i].tp : &an[i].tn;
                    self += w * t->self_j;
                    const double kx = w * t->cross, *xi = x + (size_t)i * (size_t)D;
                    for (int64_t j = 0; j < D; ++j)
                        g[j] += kx * xi[j];
                }
                for (int64_t j = 0; j < D; ++j)
                    g[j] += self * xk[j];
                ploss_cpu_store_f64(p->grad.data, p->dtype, k * p->grad.sn, p->grad.sd, D, g);
            }
        }
        ploss_cpu_rows_free(&b);
    }
    return ploss_free(ctx, ws);
}
