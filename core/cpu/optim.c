/*
 * optim.c — CPU backend of the SGD and Adam steps (torch.optim semantics), elementwise,
 * in f64.  State buffers are re-read at their storage precision before use, as a PyTorch
 * step that updates its buffer in place and then reads it.
 */
#include <math.h>

#include "../optim.h"
#include "scalar.h"

/* v rounded to dtype dt. */
static double round_to(ploss_dtype dt, double v)
{
    double slot = 0.0; /* 8 bytes: room for any float dtype */
    ploss_store(&slot, dt, 0, v);
    return ploss_load(&slot, dt, 0);
}

static void sgd_element(const ploss_optim_problem *p, int64_t k)
{
    const ploss_ew_shape *sh = &p->shape;
    const ploss_ew_operand *op = p->op;
    const int64_t po = ploss_ew_offset(sh, op[PLOSS_OPT_PARAM].strides, k);
    const double w = ploss_load(op[PLOSS_OPT_PARAM].data, p->p_dtype, po);
    double d = ploss_load(op[PLOSS_OPT_GRAD].data, p->p_dtype, ploss_ew_offset(sh, op[PLOSS_OPT_GRAD].strides, k));
    if (p->weight_decay != 0.0)
        d += p->weight_decay * w;
    if (p->momentum != 0.0) {
        void *bd = op[PLOSS_OPT_S1].data;
        const int64_t bo = ploss_ew_offset(sh, op[PLOSS_OPT_S1].strides, k);
        double buf = p->first_step ? d : p->momentum * ploss_load(bd, p->s_dtype, bo) + (1.0 - p->dampening) * d;
        buf = round_to(p->s_dtype, buf);
        ploss_store(bd, p->s_dtype, bo, buf);
        d = p->nesterov ? d + p->momentum * buf : buf;
    }
    ploss_store(op[PLOSS_OPT_PARAM].data, p->p_dtype, po, w - p->lr * d);
}

static void adam_element(const ploss_optim_problem *p, int64_t k)
{
    const ploss_ew_shape *sh = &p->shape;
    const ploss_ew_operand *op = p->op;
    const int64_t po = ploss_ew_offset(sh, op[PLOSS_OPT_PARAM].strides, k);
    double w = ploss_load(op[PLOSS_OPT_PARAM].data, p->p_dtype, po);
    double g = ploss_load(op[PLOSS_OPT_GRAD].data, p->p_dtype, ploss_ew_offset(sh, op[PLOSS_OPT_GRAD].strides, k));
    if (p->weight_decay != 0.0) {
        if (p->decoupled)
            w *= p->decay;
        else
            g += p->weight_decay * w;
    }
    const int64_t mo = ploss_ew_offset(sh, op[PLOSS_OPT_S1].strides, k);
    const int64_t vo = ploss_ew_offset(sh, op[PLOSS_OPT_S2].strides, k);
    double m = ploss_load(op[PLOSS_OPT_S1].data, p->s_dtype, mo);
    double v = ploss_load(op[PLOSS_OPT_S2].data, p->s_dtype, vo);
    m = round_to(p->s_dtype, p->beta1 * m + (1.0 - p->beta1) * g);
    v = round_to(p->s_dtype, p->beta2 * v + (1.0 - p->beta2) * g * g);
    ploss_store(op[PLOSS_OPT_S1].data, p->s_dtype, mo, m);
    ploss_store(op[PLOSS_OPT_S2].data, p->s_dtype, vo, v);
    const double denom = sqrt(v) / p->sqrt_bc2 + p->eps;
    ploss_store(op[PLOSS_OPT_PARAM].data, p->p_dtype, po, w - p->step_size * m / denom);
}

ploss_status ploss_cpu_optim(const ploss_optim_problem *p)
{
    const int64_t n = p->shape.numel;
    if (p->kind == PLOSS_OPTIM_SGD) {
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t k = 0; k < n; ++k)
            sgd_element(p, k);
    } else {
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t k = 0; k < n; ++k)
            adam_element(p, k);
    }
    return PLOSS_OK;
}
