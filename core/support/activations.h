/*
 * activations.h — the validated elementwise problem of the activations
 * handed by core/support/activations.c to core/cpu/support/activations.c and kernels/support/activations.cu.
 * Internal.  All operands share one dtype.
 *   forward:  out = f(x)
 *   backward: out = f′(x)·gy
 */
#ifndef PLOSS_ACTIVATIONS_INTERNAL_H
#define PLOSS_ACTIVATIONS_INTERNAL_H

#include "elementwise_space.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { PLOSS_ACT_X = 0, PLOSS_ACT_GY = 1, PLOSS_ACT_OUT = 2, PLOSS_ACT_OPERANDS = 3 };

typedef struct ploss_act_problem {
    ploss_activation act;
    int backward;
    ploss_dtype dtype;
    ploss_ew_shape shape;
    ploss_ew_operand op[PLOSS_ACT_OPERANDS]; /* x, gy (backward only), out */
} ploss_act_problem;

ploss_status ploss_cpu_activation(const ploss_act_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_activation(ploss_ctx_t *ctx, const ploss_act_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
