/*
 * optim.h — the validated elementwise optimiser step (SGD with momentum, Adam/AdamW)
 * handed by core/support/optim.c to core/cpu/support/optim.c and kernels/support/optim.cu.  Internal.
 * param and grad share one dtype; the state buffers share one dtype (param's or f32).
 */
#ifndef PLOSS_OPTIM_INTERNAL_H
#define PLOSS_OPTIM_INTERNAL_H

#include "elementwise_space.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PLOSS_OPTIM_SGD = 0, PLOSS_OPTIM_ADAM = 1 } ploss_optim_kind;

enum { PLOSS_OPT_PARAM = 0, PLOSS_OPT_GRAD = 1, PLOSS_OPT_S1 = 2, PLOSS_OPT_S2 = 3, PLOSS_OPT_OPERANDS = 4 };

typedef struct ploss_optim_problem {
    ploss_optim_kind kind;
    ploss_dtype p_dtype;  /* param and grad */
    ploss_dtype s_dtype;  /* state buffers */
    ploss_ew_shape shape;
    /* param, grad, state 1 (momentum buffer / exp_avg; data NULL for SGD without
     * momentum), state 2 (exp_avg_sq; Adam only) */
    ploss_ew_operand op[PLOSS_OPT_OPERANDS];
    double lr, weight_decay;
    /* SGD */
    double momentum, dampening;
    int nesterov, first_step;
    /* Adam: step size lr/(1 − β1ᵗ), √(1 − β2ᵗ), decoupled decay factor 1 − lr·wd */
    double beta1, beta2, eps, step_size, sqrt_bc2, decay;
    int decoupled;
} ploss_optim_problem;

ploss_status ploss_cpu_optim(const ploss_optim_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_optim(ploss_ctx_t *ctx, const ploss_optim_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
