/* one_hot.c — CPU backend of ploss_one_hot; labels validated by core. */
#include "one_hot.h"
#include "scalar.h"

ploss_status ploss_cpu_one_hot(ploss_ctx_t *ctx, const ploss_one_hot_problem *p)
{
    (void)ctx;
    const int64_t M = p->N * p->S;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M; ++i) {
        const int64_t n = i / p->S, s = i % p->S;
        const int64_t y = ploss_load_int(p->t, p->t_dtype, n * p->t_sn + s * p->t_ss);
        const int valid = y != p->ignore_index;
        const int64_t o = n * p->o_sn + s * p->o_ss;
        for (int64_t j = 0; j < p->C; ++j)
            ploss_store(p->out, p->out_dtype, o + j * p->o_sc, valid ? p->b + (j == y ? p->a : 0.0) : 0.0);
    }
    return PLOSS_OK;
}
