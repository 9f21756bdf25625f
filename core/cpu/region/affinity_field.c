/*
 * affinity_field.c — CPU backend of the affinity field loss (formulas in core/engines/region.h
 * and docs/losses.md), in double for every input dtype.
 *
 *  1. per pixel (OpenMP): its label, log-softmax and softmax into buffers (pixel-major: a
 *     pixel's C values side by side);
 *  2. per pixel u (OpenMP): D(u, v) of its 8 neighbours, kept, and ℓ_u; the reduction in
 *     pixel order;
 *  3. per pixel z (OpenMP): the gradient gathered from the 16 pairs z belongs to (8 as the
 *     centre u, 8 as the neighbour v), each weighted by its centre's upstream weight.
 */
#include <math.h>

#include "chunks.h"
#include "region.h"
#include "scalar.h"

static const int DH[8] = {-1, -1, -1, 0, 0, 1, 1, 1};
static const int DW[8] = {-1, 0, 1, -1, 1, -1, 0, 1};

typedef struct {
    const ploss_region_problem *p;
    const double *lp;     /* log-softmax, pixels × C */
    const double *pr;     /* softmax, pixels × C */
    const int64_t *label; /* -1: ignored */
} field;

/* D(u, v) of the pixels u and v (indices into the buffers).  A class of probability 0 at v
 * (a logit of −∞) adds nothing to the KL form: 0·log 0 = 0, not 0·(−∞). */
static double divergence(const field *f, int64_t u, int64_t v)
{
    const int64_t C = f->p->C;
    const double *lu = f->lp + u * C, *lv = f->lp + v * C, *pu = f->pr + u * C, *pv = f->pr + v * C;
    double d = 0.0;
    for (int64_t c = 0; c < C; ++c) {
        if (f->p->reference_divergence)
            d += pv[c] * (pv[c] - pu[c]);
        else if (pv[c] != 0.0)
            d += pv[c] * (lv[c] - lu[c]);
    }
    return d;
}

/* The derivative of pair (u, v)'s term by D. */
static double term_slope(const ploss_region_problem *p, double D, int same)
{
    return same ? p->lambda_same : (p->kl_margin - D > 0.0 ? -p->lambda_diff : 0.0);
}

/* The neighbour of pixel q along direction k, or -1 outside the image or ignored. */
static int64_t neighbour(const field *f, int64_t q, int k, int sign)
{
    const int64_t W = f->p->sshape[1], H = f->p->sshape[0], S = H * W;
    const int64_t s = q % S, h = s / W + sign * DH[k], w = s % W + sign * DW[k];
    if (h < 0 || h >= H || w < 0 || w >= W)
        return -1;
    const int64_t v = q - s + h * W + w;
    return f->label[v] < 0 ? -1 : v;
}

ploss_status ploss_cpu_affinity_field(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    const int64_t N = p->N, C = p->C, S = p->S, NS = N * S;
    ploss_status st;
    double *lp = NULL, *lu = NULL, *Dk = NULL;
    int64_t *label = NULL;
    if ((st = ploss_alloc(ctx, (size_t)(2 * C * NS) * sizeof(double), (void **)&lp)) ||
        (st = ploss_alloc(ctx, (size_t)NS * sizeof(double), (void **)&lu)) ||
        (st = ploss_alloc(ctx, (size_t)(8 * NS) * sizeof(double), (void **)&Dk)) ||
        (st = ploss_alloc(ctx, (size_t)NS * sizeof(int64_t), (void **)&label)))
        goto done;
    double *pr = lp + C * NS;
    const field f = {p, lp, pr, label};

    /* 1. labels, log-softmax and softmax */
#pragma omp parallel for schedule(static)
    for (int64_t q = 0; q < NS; ++q) {
        const int64_t n = q / S, s = q % S;
        const int64_t y = ploss_load_int(p->t, p->t_dtype, n * p->t_sn + ploss_region_pixel_offset(p, p->t_ss, s));
        label[q] = y == p->ignore_index ? -1 : y;
        double *l = lp + q * C, *pq = pr + q * C;
        ploss_cpu_load_f64(l, p->x, p->x_dtype, n * p->x_sn + ploss_region_pixel_offset(p, p->x_ss, s), p->x_sc, C);
        double mx = -INFINITY, sum = 0.0;
        for (int64_t c = 0; c < C; ++c)
            mx = fmax(mx, l[c]);
        for (int64_t c = 0; c < C; ++c)
            sum += exp(l[c] - mx);
        const double lse = mx + log(sum);
        for (int64_t c = 0; c < C; ++c) {
            l[c] -= lse;
            pq[c] = exp(l[c]);
        }
    }

    /* 2. D(u, v) of u's neighbours (Dk[8u + k]), ℓ_u and the reduction */
#pragma omp parallel for schedule(static)
    for (int64_t u = 0; u < NS; ++u) {
        double l = 0.0;
        if (label[u] >= 0)
            for (int k = 0; k < 8; ++k) {
                const int64_t v = neighbour(&f, u, k, 1);
                if (v < 0)
                    continue;
                const double D = Dk[8 * u + k] = divergence(&f, u, v);
                l += label[u] == label[v] ? p->lambda_same * D : p->lambda_diff * fmax(p->kl_margin - D, 0.0);
            }
        lu[u] = l / 8.0;
    }
    double total = 0.0;
    int64_t valid = 0;
    for (int64_t q = 0; q < NS; ++q) {
        total += lu[q];
        valid += label[q] >= 0;
    }
    if (p->pass != PLOSS_PASS_BACKWARD) {
        if (p->reduction == PLOSS_REDUCTION_NONE) {
            for (int64_t q = 0; q < NS; ++q)
                ploss_store(p->loss, p->loss_dtype, ploss_region_pixel_at(p, q, p->l_sg, p->l_ss), lu[q]);
        } else {
            ploss_store(p->loss, p->loss_dtype, 0,
                        p->reduction == PLOSS_REDUCTION_MEAN ? total / (double)valid : total);
        }
    }

    /* 3. the gradient, gathered per pixel */
    if (p->pass != PLOSS_PASS_FORWARD) {
        const double base = p->reduction == PLOSS_REDUCTION_MEAN ? (valid > 0 ? 1.0 / (double)valid : 0.0) : 1.0;
        int failed = 0;
#pragma omp parallel
        {
            double *G = NULL;
            if (ploss_alloc(ctx, (size_t)C * sizeof(double), (void **)&G) != PLOSS_OK) {
#pragma omp atomic write
                failed = 1;
            }
#pragma omp for schedule(static)
            for (int64_t z = 0; z < NS; ++z) {
                const int64_t n = z / S, go = n * p->g_sn + ploss_region_pixel_offset(p, p->g_ss, z % S);
                if (!G || label[z] < 0) {
                    ploss_cpu_store_zeros(p->grad, p->x_dtype, go, p->g_sc, C);
                    continue;
                }
                for (int64_t c = 0; c < C; ++c)
                    G[c] = 0.0;
                for (int role = 0; role < 2; ++role) /* 0: z is the centre u; 1: z is the neighbour v */
                    for (int k = 0; k < 8; ++k) {
                        const int64_t other = neighbour(&f, z, k, role ? -1 : 1);
                        if (other < 0)
                            continue;
                        const int64_t u = role ? other : z, v = role ? z : other;
                        const double D = Dk[8 * u + k]; /* v = u's neighbour k, either role */
                        double om = base / 8.0;
                        if (p->pass == PLOSS_PASS_BACKWARD)
                            om *= ploss_load(p->grad_loss, p->gl_dtype,
                                             p->reduction == PLOSS_REDUCTION_NONE
                                                 ? ploss_region_pixel_at(p, u, p->gl_sg, p->gl_ss)
                                                 : 0);
                        else
                            om *= p->scale;
                        const double coef = om * term_slope(p, D, label[u] == label[v]);
                        if (coef == 0.0)
                            continue;
                        double dot = 0.0; /* reference divergence: the softmax Jacobian's Σ */
                        const double *lpu = lp + u * C, *lpv = lp + v * C, *pru = pr + u * C, *prv = pr + v * C;
                        if (p->reference_divergence)
                            for (int64_t c = 0; c < C; ++c)
                                dot += role ? prv[c] * (2.0 * prv[c] - pru[c]) : pru[c] * prv[c];
                        for (int64_t c = 0; c < C; ++c) {
                            const double lu_c = lpu[c], lv_c = lpv[c], pu = pru[c], pv = prv[c];
                            double dD;
                            if (!p->reference_divergence) /* (0 where p_v is 0, as in D) */
                                dD = role ? (pv != 0.0 ? pv * (lv_c - lu_c - D) : 0.0) : pu - pv;
                            else
                                dD = role ? pv * ((2.0 * pv - pu) - dot) : pu * (dot - pv);
                            G[c] += coef * dD;
                        }
                    }
                ploss_cpu_store_f64(p->grad, p->x_dtype, go, p->g_sc, C, G);
            }
            ploss_free(ctx, G);
        }
        if (failed)
            st = ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "affinity_field: no memory for a gradient row of %lld classes",
                             (long long)C);
    }

done:
    ploss_free(ctx, lp);
    ploss_free(ctx, lu);
    ploss_free(ctx, Dk);
    ploss_free(ctx, label);
    return st;
}
