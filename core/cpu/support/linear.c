/*
 * linear.c — CPU backend of the bias add, the bias gradient (column sums in f64, rows
 * summed in order whatever the number of threads) and argmax along axis 1.
 */
#include <math.h>

#include "linear.h"
#include "scalar.h"

#define COLS 64 /* columns per task of the bias gradient */
#define PLOSS_CPU_PARALLEL_MIN 262144 /* elements; see core/cpu/support/activations.c */

ploss_status ploss_cpu_bias_add(const ploss_bias_problem *p)
{
#pragma omp parallel for schedule(static) if (p->n * p->c > PLOSS_CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < p->n; ++i)
        for (int64_t j = 0; j < p->c; ++j) {
            const int64_t o = i * p->m_sn + j * p->m_sc;
            ploss_store(p->m, p->dtype, o,
                        ploss_load(p->m, p->dtype, o) + ploss_load(p->v, p->dtype, j * p->v_s));
        }
    return PLOSS_OK;
}

ploss_status ploss_cpu_bias_grad(const ploss_bias_problem *p)
{
    const int64_t blocks = (p->c + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if (p->n * p->c > PLOSS_CPU_PARALLEL_MIN)
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t j0 = blk * COLS, j1 = j0 + COLS < p->c ? j0 + COLS : p->c;
        double acc[COLS] = {0};
        for (int64_t i = 0; i < p->n; ++i)
            for (int64_t j = j0; j < j1; ++j)
                acc[j - j0] += ploss_load(p->m, p->dtype, i * p->m_sn + j * p->m_sc);
        for (int64_t j = j0; j < j1; ++j)
            ploss_store(p->v, p->dtype, j * p->v_s, acc[j - j0]);
    }
    return PLOSS_OK;
}

ploss_status ploss_cpu_argmax(const ploss_argmax_problem *p)
{
    const ploss_ew_shape *sh = &p->samples;
#pragma omp parallel for schedule(static) if (sh->numel * p->C > PLOSS_CPU_PARALLEL_MIN)
    for (int64_t k = 0; k < sh->numel; ++k) {
        const int64_t xo = ploss_ew_offset(sh, p->x.strides, k);
        double best = ploss_load(p->x.data, p->x.dtype, xo);
        int64_t arg = 0;
        for (int64_t j = 1; j < p->C && !isnan(best); ++j) {
            const double v = ploss_load(p->x.data, p->x.dtype, xo + j * p->x_sc);
            if (v > best || isnan(v)) { /* first maximum; the first NaN wins (torch.argmax) */
                best = v;
                arg = j;
            }
        }
        ((int64_t *)p->out.data)[ploss_ew_offset(sh, p->out.strides, k)] = arg;
    }
    return PLOSS_OK;
}
