/*
 * margin_ranking.c — CPU backend of the margin ranking and distance ratio losses
 * (core/engines/pairs.h): one pass over the elements in double, whatever the dtype, each
 * element's loss and both gradients from ploss_margin_ranking_elem or
 * ploss_distance_ratio_elem.  Elements are taken in fixed chunks whose loss partials
 * are added in chunk order, so the result does not depend on the thread count.
 */
#include "chunks.h"
#include "pairs.h"
#include "scalar.h"

enum { CHUNK = 4096 };

/* Offset (elements) of element k, row-major over the collapsed shape, of a tensor with
 * strides st. */
static int64_t offset_of(const ploss_margin_ranking_problem *p, const int64_t *st, int64_t k)
{
    int64_t off = 0;
    for (int d = p->ndim - 1; d >= 0; --d) {
        off += (k % p->shape[d]) * st[d];
        k /= p->shape[d];
    }
    return off;
}

ploss_status ploss_cpu_margin_ranking(ploss_ctx_t *ctx, const ploss_margin_ranking_problem *p)
{
    (void)ctx;
    const int64_t M = p->numel;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;
    const double divisor = p->reduction == PLOSS_REDUCTION_MEAN ? (double)M : 1.0;
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor);
    const int per_elem_gl = p->pass == PLOSS_PASS_BACKWARD && none;

    /* only the chunk partials: taken before any write */
    ploss_cpu_rows b;
    const char *name = p->kind == PLOSS_SCORE_PAIR_DISTANCE_RATIO ? "distance_ratio_loss" : "margin_ranking_loss";
    ploss_status st = ploss_cpu_rows_alloc(&b, name, M, 1, 0, CHUNK);
    if (st)
        return st;

#pragma omp parallel for schedule(static)
    for (int64_t chunk = 0; chunk < b.nchunks; ++chunk) {
        const int64_t begin = chunk * CHUNK, end = begin + CHUNK < M ? begin + CHUNK : M;
        double acc = 0.0;
        for (int64_t k = begin; k < end; ++k) {
            const double x1 = ploss_load(p->x1, p->dtype, offset_of(p, p->x1_st, k));
            const double x2 = ploss_load(p->x2, p->dtype, offset_of(p, p->x2_st, k));
            const double w =
                per_elem_gl ? ploss_load(p->grad_loss, p->gl_dtype, offset_of(p, p->gl_st, k)) : omega;
            double g1;
            const double l =
                p->kind == PLOSS_SCORE_PAIR_DISTANCE_RATIO
                    ? ploss_distance_ratio_elem(x1, x2, w, &g1)
                    : ploss_margin_ranking_elem(x1, x2, ploss_load(p->y, p->y_dtype, offset_of(p, p->y_st, k)),
                                                p->margin, w, &g1);
            if (want_loss) {
                if (none)
                    ploss_store(p->loss, p->loss_dtype, offset_of(p, p->l_st, k), l);
                else
                    acc += l;
            }
            if (want_grad) {
                ploss_store(p->g1, p->dtype, offset_of(p, p->g1_st, k), g1);
                ploss_store(p->g2, p->dtype, offset_of(p, p->g2_st, k), -g1);
            }
        }
        b.partial[chunk] = acc;
    }
    if (want_loss) /* 0/0 = NaN for an empty MEAN, as PyTorch */
        ploss_cpu_rows_store_loss(&b, p->reduction, divisor, p->loss, p->loss_dtype);
    ploss_cpu_rows_free(&b);
    return PLOSS_OK;
}
