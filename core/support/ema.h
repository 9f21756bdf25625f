/*
 * ema.h — the validated multi-tensor EMA update and swap handed by core/support/ema.c to
 * core/cpu/support/ema.c and kernels/support/ema.cu.  Internal.
 */
#ifndef PLOSS_EMA_INTERNAL_H
#define PLOSS_EMA_INTERNAL_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PLOSS_EMA_UPDATE = 0, /* float: s ← s + (1 − d)(p − s); integer: s ← p */
    PLOSS_EMA_SWAP = 1    /* s ↔ p                                      */
} ploss_ema_mode;

/* One pair of dense tensors of `numel` elements of `dtype`. */
typedef struct {
    void *shadow;
    void *param;
    int64_t numel;
    ploss_dtype dtype;
} ploss_ema_tensor;

typedef struct ploss_ema_problem {
    ploss_ema_mode mode;
    double one_minus_d;              /* 1 − d of this update                */
    int64_t n;                       /* tensors (> 0)                       */
    const ploss_ema_tensor *tensors; /* host array of n                      */
} ploss_ema_problem;

ploss_status ploss_cpu_ema(const ploss_ema_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_ema(ploss_ctx_t *ctx, const ploss_ema_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
