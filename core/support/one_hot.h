/*
 * one_hot.h — the validated one-hot problem handed by core/support/one_hot.c to the CPU
 * (core/cpu/support/one_hot.c) and CUDA (kernels/support/one_hot.cu) backends.  Internal.
 *
 * Samples i = (n, s), n < N, s < S (S = d1⋯dk collapsed to one axis).  The output element
 * (n, j, s) sits at n·o_sn + j·o_sc + s·o_ss and takes a·[j = y] + b for a valid label y,
 * 0 for an ignored one.
 */
#ifndef PLOSS_ONE_HOT_INTERNAL_H
#define PLOSS_ONE_HOT_INTERNAL_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ploss_one_hot_problem {
    int64_t N, S, C;
    const void *t; ploss_dtype t_dtype; int64_t t_sn, t_ss;
    void *out; ploss_dtype out_dtype; int64_t o_sn, o_ss, o_sc;
    double a, b;
    int64_t ignore_index;
} ploss_one_hot_problem;

ploss_status ploss_cpu_one_hot(ploss_ctx_t *ctx, const ploss_one_hot_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_one_hot(ploss_ctx_t *ctx, const ploss_one_hot_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
