/*
 * gaussian_nll.c — CPU backend of the Gaussian negative log-likelihood (core/engines/pairs.h):
 * a check that no variance is negative, before anything is written; then one pass over the
 * rows of the input's last axis in double, whatever the dtype, each element's loss and
 * gradients from ploss_gaussian_nll_elem, a shared variance's gradient summed along its
 * row.  Rows are taken in fixed chunks whose loss partials are added in chunk order, so the
 * result does not depend on the thread count.
 */
#include <stdint.h>

#include "chunks.h"
#include "pairs.h"
#include "scalar.h"

enum { CHUNK = 4096 }; /* elements of a chunk (at least one row) */

/* The first negative variance in row-major order of var's own elements, or INT64_MAX. */
static int64_t first_negative_variance(const ploss_gaussian_nll_problem *p)
{
    const int64_t per_row = p->var_per_row ? 1 : p->D;
    int64_t first = INT64_MAX;
#pragma omp parallel for schedule(static) reduction(min : first)
    for (int64_t r = 0; r < p->rows; ++r) {
        const int64_t base = ploss_gaussian_row_offsets(p, r).v;
        for (int64_t j = 0; j < per_row; ++j)
            if (ploss_load(p->v, p->dtype, base + j * p->v_sd) < 0.0) {
                first = r * per_row + j < first ? r * per_row + j : first;
                break;
            }
    }
    return first;
}

ploss_status ploss_cpu_gaussian_nll(ploss_ctx_t *ctx, const ploss_gaussian_nll_problem *p)
{
    (void)ctx;
    const int64_t bad = first_negative_variance(p);
    if (bad != INT64_MAX)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "var: element %lld (0-based, row-major) is negative: variances must be >= 0, as PyTorch",
                           (long long)bad);
    const int64_t D = p->D, rows = p->rows;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;
    const double divisor = p->reduction == PLOSS_REDUCTION_MEAN ? (double)p->numel : 1.0;
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor);
    const int per_elem_gl = p->pass == PLOSS_PASS_BACKWARD && none;
    const int64_t rows_per_chunk = D > 0 && D < CHUNK ? CHUNK / D : 1;

    /* only the chunk partials: taken before any write */
    ploss_cpu_rows b;
    ploss_status st = ploss_cpu_rows_alloc(&b, "gaussian_nll_loss", rows, 1, 0, rows_per_chunk);
    if (st)
        return st;

#pragma omp parallel for schedule(static)
    for (int64_t chunk = 0; chunk < b.nchunks; ++chunk) {
        const int64_t begin = chunk * rows_per_chunk, end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
        double acc = 0.0;
        for (int64_t r = begin; r < end; ++r) {
            const ploss_gaussian_row o = ploss_gaussian_row_offsets(p, r);
            double gv_row = 0.0;
            for (int64_t j = 0; j < D; ++j) {
                const double x = ploss_load(p->x, p->dtype, o.x + j * p->x_sd);
                const double y = ploss_load(p->t, p->dtype, o.t + j * p->t_sd);
                const double v = ploss_load(p->v, p->dtype, o.v + j * p->v_sd);
                const double w = per_elem_gl ? ploss_load(p->grad_loss, p->gl_dtype, o.gl + j * p->gl_sd) : omega;
                double gx, gv;
                const double l = ploss_gaussian_nll_elem(x, y, v, p->eps, p->full, w, &gx, &gv);
                if (want_loss) {
                    if (none)
                        ploss_store(p->loss, p->loss_dtype, o.l + j * p->l_sd, l);
                    else
                        acc += l;
                }
                if (want_grad) {
                    ploss_store(p->gx, p->dtype, o.gx + j * p->gx_sd, gx);
                    ploss_store(p->gt, p->dtype, o.gt + j * p->gt_sd, -gx);
                    if (p->var_per_row)
                        gv_row += gv;
                    else
                        ploss_store(p->gv, p->dtype, o.gv + j * p->gv_sd, gv);
                }
            }
            if (want_grad && p->var_per_row)
                ploss_store(p->gv, p->dtype, o.gv, gv_row);
        }
        b.partial[chunk] = acc;
    }
    if (want_loss) /* 0/0 = NaN for an empty MEAN, as PyTorch */
        ploss_cpu_rows_store_loss(&b, p->reduction, divisor, p->loss, p->loss_dtype);
    ploss_cpu_rows_free(&b);
    return PLOSS_OK;
}
