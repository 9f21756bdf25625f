/*
 * triplet.c — CPU backend of the triplet margin loss (core/engines/pairs.h): one pass per row
 * in double, whatever the dtype — the three rows are read once into row buffers, the sums
 * Σ|z|^p of the pairs taken (cosine: the squared norms and the products), the row finished
 * (ploss_triplet_finish, ploss_triplet_cosine_finish), and the gradients of the three rows
 * written from the same buffers.  Rows are taken in fixed chunks whose loss
 * partials are added in chunk order, so the result does not depend on the thread count.
 */
#include <omp.h>

#include "chunks.h"
#include "pairs.h"
#include "scalar.h"

enum { CHUNK = 64 };

/* Σ_j |u_j − v_j + ε|^p */
static double pair_sum(const double *u, const double *v, int64_t D, double eps, double p)
{
    double s = 0.0;
    for (int64_t j = 0; j < D; ++j)
        s += ploss_pnorm_term(u[j] - v[j] + eps, p);
    return s;
}

/* g[j] += k·dir(u_j − v_j + ε) and h[j] −= the same. */
static void pair_grad(double *g, double *h, const double *u, const double *v, int64_t D, double eps, double p,
                      double k)
{
    if (k == 0.0)
        return;
    for (int64_t j = 0; j < D; ++j) {
        const double t = k * ploss_pnorm_dir(u[j] - v[j] + eps, p);
        g[j] += t;
        h[j] -= t;
    }
}

/* The p-norm distance's row: its loss, and (g non-NULL) the three gradient rows scaled by w. */
static double pnorm_row(const ploss_triplet_problem *p, double *const x[3], double *const g[3], double w)
{
    const int64_t D = p->D;
    const double s_ap = pair_sum(x[0], x[1], D, p->eps, p->p);
    const double s_an = pair_sum(x[0], x[2], D, p->eps, p->p);
    const double s_pn = p->swap ? pair_sum(x[1], x[2], D, p->eps, p->p) : 0.0;
    const ploss_triplet_row r = ploss_triplet_finish(s_ap, s_an, s_pn, p->p, p->margin, p->soft_margin, p->swap);
    if (g[0]) {
        for (int k = 0; k < 3; ++k)
            for (int64_t j = 0; j < D; ++j)
                g[k][j] = 0.0;
        pair_grad(g[0], g[1], x[0], x[1], D, p->eps, p->p, ploss_upstream(w, r.k_ap));
        pair_grad(g[0], g[2], x[0], x[2], D, p->eps, p->p, ploss_upstream(w, r.k_an));
        pair_grad(g[1], g[2], x[1], x[2], D, p->eps, p->p, ploss_upstream(w, r.k_pn));
    }
    return r.loss;
}

static double dot(const double *u, const double *v, int64_t D)
{
    double s = 0.0;
    for (int64_t j = 0; j < D; ++j)
        s += u[j] * v[j];
    return s;
}

/* The cosine distance's row: its loss, and (g non-NULL) the three gradient rows scaled by w. */
static double cosine_row(const ploss_triplet_problem *p, double *const x[3], double *const g[3], double w)
{
    const int64_t D = p->D;
    const double sq[3] = {dot(x[0], x[0], D), dot(x[1], x[1], D), dot(x[2], x[2], D)};
    const ploss_triplet_cosine_row r = ploss_triplet_cosine_finish(
        sq, dot(x[0], x[1], D), dot(x[0], x[2], D), p->swap ? dot(x[1], x[2], D) : 0.0, p->margin, p->swap);
    if (g[0]) {
        const double s0 = ploss_upstream(w, r.self[0]), s1 = ploss_upstream(w, r.self[1]),
                     s2 = ploss_upstream(w, r.self[2]), c_ap = ploss_upstream(w, r.cross_ap),
                     c_an = ploss_upstream(w, r.cross_an), c_pn = ploss_upstream(w, r.cross_pn);
        for (int64_t j = 0; j < D; ++j) {
            const double a = x[0][j], b = x[1][j], n = x[2][j];
            g[0][j] = s0 * a + c_ap * b + c_an * n;
            g[1][j] = s1 * b + c_ap * a + c_pn * n;
            g[2][j] = s2 * n + c_an * a + c_pn * b;
        }
    }
    return r.loss;
}

ploss_status ploss_cpu_triplet(ploss_ctx_t *ctx, const ploss_triplet_problem *p)
{
    (void)ctx;
    const int64_t N = p->N, D = p->D;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;
    const double divisor = p->reduction == PLOSS_REDUCTION_MEAN ? (double)N : 1.0;
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor);
    const int per_row_gl = p->pass == PLOSS_PASS_BACKWARD && none;

    /* rows of no element: each costs the loss of zero distances, and there is nothing to
     * read and no gradient element to write (N may be far beyond what a loop should walk) */
    if (D == 0 && N > 0 && !(want_loss && none)) {
        if (want_loss) {
            const double zero[3] = {0.0, 0.0, 0.0};
            const double loss = p->cosine ? ploss_triplet_cosine_finish(zero, 0.0, 0.0, 0.0, p->margin, p->swap).loss
                                          : ploss_triplet_finish(0.0, 0.0, 0.0, p->p, p->margin, p->soft_margin,
                                                                 p->swap).loss;
            ploss_store(p->loss, p->loss_dtype, 0, p->reduction == PLOSS_REDUCTION_SUM ? loss * (double)N : loss);
        }
        return PLOSS_OK;
    }

    /* three input rows and three gradient rows per thread, taken before any write */
    ploss_cpu_rows b;
    ploss_status st = ploss_cpu_rows_alloc(&b, "triplet_margin", N, D, want_grad ? 6 : 3, CHUNK);
    if (st)
        return st;

#pragma omp parallel
    {
        double *x[3], *g[3];
        if (N > 0) {
            double *rows = ploss_cpu_rows_thread(&b, omp_get_thread_num());
            for (int k = 0; k < 3; ++k) {
                x[k] = rows + (size_t)k * D;
                g[k] = want_grad ? rows + (size_t)(3 + k) * D : NULL;
            }
        }
#pragma omp for schedule(static)
        for (int64_t chunk = 0; chunk < b.nchunks; ++chunk) {
            const int64_t begin = chunk * CHUNK, end = begin + CHUNK < N ? begin + CHUNK : N;
            double acc = 0.0;
            for (int64_t i = begin; i < end; ++i) {
                for (int k = 0; k < 3; ++k)
                    ploss_cpu_load_f64(x[k], p->x[k].data, p->dtype, i * p->x[k].sn, p->x[k].sd, D);
                const double w = !want_grad ? 0.0
                                 : per_row_gl ? ploss_load(p->grad_loss, p->gl_dtype, i * p->gl_sn) : omega;
                const double loss = p->cosine ? cosine_row(p, x, g, w) : pnorm_row(p, x, g, w);
                if (want_loss) {
                    if (none)
                        ploss_store(p->loss, p->loss_dtype, i * p->l_sn, loss);
                    else
                        acc += loss;
                }
                if (want_grad)
                    for (int k = 0; k < 3; ++k)
                        ploss_cpu_store_f64(p->grad[k].data, p->dtype, i * p->grad[k].sn, p->grad[k].sd, D, g[k]);
            }
            b.partial[chunk] = acc;
        }
    }
    if (want_loss) /* 0/0 = NaN for an empty MEAN, as PyTorch */
        ploss_cpu_rows_store_loss(&b, p->reduction, divisor, p->loss, p->loss_dtype);
    ploss_cpu_rows_free(&b);
    return PLOSS_OK;
}
