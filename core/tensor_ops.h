/*
 * tensor_ops.h — copy, fill, axpby and counter-based random numbers over strided views, shared
 * by core/ops.c, core/cpu/tensor_ops.c and kernels/tensor_ops.cu.  Internal.
 */
#ifndef PLOSS_TENSOR_OPS_H
#define PLOSS_TENSOR_OPS_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PLOSS_RAND_UNIFORM = 0, PLOSS_RAND_NORMAL = 1, PLOSS_RAND_INT = 2 } ploss_rand_kind;

typedef struct ploss_rand_spec {
    ploss_rand_kind kind;
    uint64_t seed, offset;
    double a, b;          /* uniform: [a, b); normal: mean a, std b */
    double lo, hi;        /* uniform: the least and greatest values of dst's dtype in [a, b);
                             each draw is clamped to them before it is rounded to the dtype,
                             so that rounding cannot reach b (or fall below a) */
    int64_t low;          /* int: low + ploss_philox_below(r, span) */
    uint64_t span;
} ploss_rand_spec;

/* Same-device element-wise copy with dtype conversion (shapes already checked equal). */
ploss_status ploss_cpu_copy(const ploss_view *dst, const ploss_view *src);
ploss_status ploss_cpu_fill(const ploss_view *dst, double value);
ploss_status ploss_cpu_rand(const ploss_view *dst, const ploss_rand_spec *spec);
/* dst ← fma(alpha, src, beta·dst) in f64 (dst not read when beta = 0).  src has dst's
 * shape (broadcast dims with stride 0), dtype any float. */
ploss_status ploss_cpu_axpby(const ploss_view *dst, double alpha, const ploss_view *src, double beta);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_copy(ploss_ctx_t *ctx, const ploss_view *dst, const ploss_view *src);
ploss_status ploss_cuda_fill(ploss_ctx_t *ctx, const ploss_view *dst, double value);
ploss_status ploss_cuda_rand(ploss_ctx_t *ctx, const ploss_view *dst, const ploss_rand_spec *spec);
ploss_status ploss_cuda_axpby(ploss_ctx_t *ctx, const ploss_view *dst, double alpha, const ploss_view *src,
                              double beta);
#endif

#ifdef __cplusplus
}
#endif

#endif
