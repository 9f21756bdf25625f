/*
 * embedding_pairs.c — CPU backend of the embedding pair losses (core/engines/pairs.h): the
 * cosine embedding loss and the L1 hinge embedding loss.  One pass per pair in double,
 * whatever the dtype — the two rows are read once into row buffers, the pair's sums taken
 * (cosine: Σx1·x2, Σx1², Σx2²; L1: Σ|x1 − x2|), the pair finished
 * (ploss_cosine_embedding_finish, ploss_l1_hinge_embedding_finish) and both gradient rows
 * written from the same buffers.  Rows are taken in fixed chunks whose loss partials are
 * added in chunk order, so the result does not depend on the thread count.
 */
#include <math.h>
#include <omp.h>

#include "chunks.h"
#include "pairs.h"
#include "scalar.h"

enum { CHUNK = 64 };

ploss_status ploss_cpu_embedding_pairs(ploss_ctx_t *ctx, const ploss_embedding_pair_problem *p)
{
    (void)ctx;
    const int64_t N = p->N, D = p->D;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;
    const double divisor = p->reduction == PLOSS_REDUCTION_MEAN ? (double)N : 1.0;
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor);
    const int per_row_gl = p->pass == PLOSS_PASS_BACKWARD && none;

    /* two input rows and two gradient rows per thread, taken before any write */
    ploss_cpu_rows b;
    const int l1 = p->kind == PLOSS_EMBEDDING_PAIR_L1_HINGE;
    ploss_status st = ploss_cpu_rows_alloc(&b, l1 ? "l1_hinge_embedding_loss" : "cosine_embedding_loss", N, D,
                                           want_grad ? 4 : 2, CHUNK);
    if (st)
        return st;

#pragma omp parallel
    {
        double *u = NULL, *v = NULL, *gu = NULL, *gv = NULL;
        if (N > 0 && D > 0) {
            double *rows = ploss_cpu_rows_thread(&b, omp_get_thread_num());
            u = rows;
            v = rows + D;
            gu = want_grad ? rows + 2 * D : NULL;
            gv = want_grad ? rows + 3 * D : NULL;
        }
#pragma omp for schedule(static)
        for (int64_t chunk = 0; chunk < b.nchunks; ++chunk) {
            const int64_t begin = chunk * CHUNK, end = begin + CHUNK < N ? begin + CHUNK : N;
            double acc = 0.0;
            for (int64_t i = begin; i < end; ++i) {
                double dot = 0.0, s1 = 0.0, s2 = 0.0; /* L1: the distance in dot */
                if (D > 0) {
                    ploss_cpu_load_f64(u, p->x[0].data, p->dtype, i * p->x[0].sn, p->x[0].sd, D);
                    ploss_cpu_load_f64(v, p->x[1].data, p->dtype, i * p->x[1].sn, p->x[1].sd, D);
                    if (l1) {
                        for (int64_t j = 0; j < D; ++j)
                            dot += fabs(u[j] - v[j]);
                    } else {
                        for (int64_t j = 0; j < D; ++j) {
                            dot += u[j] * v[j];
                            s1 += u[j] * u[j];
                            s2 += v[j] * v[j];
                        }
                    }
                }
                const double y = ploss_load(p->y, p->y_dtype, i * p->y_sn);
                const double w =
                    !want_grad ? 0.0 : per_row_gl ? ploss_load(p->grad_loss, p->gl_dtype, i * p->gl_sn) : omega;
                ploss_cosine_pair r = {0.0, 0.0, 0.0, 0.0};
                ploss_l1_hinge_pair h = {0.0, 0.0};
                if (l1)
                    h = ploss_l1_hinge_embedding_finish(dot, y, p->margin, w);
                else
                    r = ploss_cosine_embedding_finish(dot, s1, s2, y, p->margin, w);
                if (want_loss) {
                    const double loss = l1 ? h.loss : r.loss;
                    if (none)
                        ploss_store(p->loss, p->loss_dtype, i * p->l_sn, loss);
                    else
                        acc += loss;
                }
                if (!want_grad || D == 0)
                    continue;
                if (l1) {
                    for (int64_t j = 0; j < D; ++j) {
                        gu[j] = h.c * ploss_sign_or_nan(u[j] - v[j]);
                        gv[j] = -gu[j];
                    }
                } else {
                    for (int64_t j = 0; j < D; ++j) {
                        gu[j] = r.self1 * u[j] + r.cross * v[j];
                        gv[j] = r.self2 * v[j] + r.cross * u[j];
                    }
                }
                ploss_cpu_store_f64(p->grad[0].data, p->dtype, i * p->grad[0].sn, p->grad[0].sd, D, gu);
                ploss_cpu_store_f64(p->grad[1].data, p->dtype, i * p->grad[1].sn, p->grad[1].sd, D, gv);
            }
            b.partial[chunk] = acc;
        }
    }
    if (want_loss) /* 0/0 = NaN for an empty MEAN, as PyTorch */
        ploss_cpu_rows_store_loss(&b, p->reduction, divisor, p->loss, p->loss_dtype);
    ploss_cpu_rows_free(&b);
    return PLOSS_OK;
}
