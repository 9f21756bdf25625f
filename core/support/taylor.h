/*
 * taylor.h — the validated problem of the Taylor softmax / log-Taylor softmax ops
 * handed by core/support/taylor.c to the CPU (core/cpu/support/taylor.c) and CUDA
 * (kernels/support/taylor.cu) backends.  Internal.
 *
 * The input is viewed as rows r = (n, s): n over the dims before `dim` (N of them, one
 * strided axis), s over the dims after it (S, one strided axis), j < C along `dim`.
 * Element (n, j, s) of a tensor sits at n·sn + j·sc + s·ss.  With F_j = f_n(x_j) (the
 * Taylor polynomial of exp), Z = Σ_j F_j and G the upstream gradient:
 *   softmax      forward F_j/Z                 backward f_{n−1}(x_k)·(G_k/Z − Σ_j F_j G_j/Z²)
 *   log-softmax  forward log F_j − log Z       backward f_{n−1}(x_k)·(G_k/F_k − Σ_j G_j/Z)
 */
#ifndef PLOSS_TAYLOR_INTERNAL_H
#define PLOSS_TAYLOR_INTERNAL_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ploss_taylor_problem {
    int order;    /* n: even, 2..64 */
    int log;      /* 1: log-Taylor softmax */
    int backward; /* 0: output = op(x); 1: grad_input from grad_output */
    int64_t N, C, S;
    ploss_dtype dtype; /* of every tensor */
    const void *x; int64_t x_sn, x_sc, x_ss;
    const void *g; int64_t g_sn, g_sc, g_ss;   /* grad_output (backward) */
    void *out; int64_t o_sn, o_sc, o_ss;       /* output or grad_input */
} ploss_taylor_problem;

ploss_status ploss_cpu_taylor(ploss_ctx_t *ctx, const ploss_taylor_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_taylor(ploss_ctx_t *ctx, const ploss_taylor_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
