/*
 * linear.h — validated problems of the linear-layer helpers (bias add, bias gradient)
 * and of argmax, handed by core/support/linear.c to core/cpu/support/linear.c and kernels/support/linear.cu.
 * Internal.  Strides are in elements.
 */
#ifndef PLOSS_LINEAR_INTERNAL_H
#define PLOSS_LINEAR_INTERNAL_H

#include "elementwise_space.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bias add x[i, j] += b[j] and bias gradient gb[j] = Σ_i g[i, j]: one N×C matrix `m`
 * (x or g) and one C-vector `v` (b or gb), both of dtype `dtype`. */
typedef struct ploss_bias_problem {
    int64_t n, c;
    ploss_dtype dtype;
    void *m; int64_t m_sn, m_sc;
    void *v; int64_t v_s;
} ploss_bias_problem;

/* Argmax along the class axis: samples walk the coalesced space `samples` (the input's
 * shape without axis 1); sample k reads x + offset(k, x.strides) + j·x_sc, j < C, and
 * writes the i64 index at out + offset(k, out.strides). */
typedef struct ploss_argmax_problem {
    int64_t C;
    int64_t x_sc;
    ploss_ew_shape samples;
    ploss_ew_operand x, out;
} ploss_argmax_problem;

ploss_status ploss_cpu_bias_add(const ploss_bias_problem *p);
ploss_status ploss_cpu_bias_grad(const ploss_bias_problem *p);
ploss_status ploss_cpu_argmax(const ploss_argmax_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_bias_add(ploss_ctx_t *ctx, const ploss_bias_problem *p);
ploss_status ploss_cuda_bias_grad(ploss_ctx_t *ctx, const ploss_bias_problem *p);
ploss_status ploss_cuda_argmax(ploss_ctx_t *ctx, const ploss_argmax_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
