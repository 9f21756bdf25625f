/*
 * optim.c — CPU backend of the SGD and Adam steps (torch.optim semantics), elementwise,
 * in f64.  State buffers are re-read at their storage precision before use, as a PyTorch
 * step that updates its buffer in place and then reads it.
 */
#include <math.h>

#include "optim.h"
#include "scalar.h"

/* Parallel above this many elements (see core/cpu/support/activations.c). */
#define PLOSS_CPU_PARALLEL_MIN 262144

/* v rounded to dtype dt. */
static double round_to(ploss_dtype dt, double v)
{
    double slot = 0.0; /* 8 bytes: room for any float dtype */
    ploss_store(&slot, dt, 0, v);
    return ploss_load(&slot, dt, 0);
}

static inline __attribute__((always_inline)) void sgd_element(const ploss_optim_problem *p, int64_t k,
                                                               ploss_dtype pdt, ploss_dtype sdt)
{
    const ploss_ew_shape *sh = &p->shape;
    const ploss_ew_operand *op = p->op;
    const int64_t po = ploss_ew_offset(sh, op[PLOSS_OPT_PARAM].strides, k);
    const double w = ploss_load(op[PLOSS_OPT_PARAM].data, pdt, po);
    double d = ploss_load(op[PLOSS_OPT_GRAD].data, pdt, ploss_ew_offset(sh, op[PLOSS_OPT_GRAD].strides, k));
    if (p->weight_decay != 0.0)
        d += p->weight_decay * w;
    if (p->momentum != 0.0) {
        void *bd = op[PLOSS_OPT_S1].data;
        const int64_t bo = ploss_ew_offset(sh, op[PLOSS_OPT_S1].strides, k);
        double buf = p->first_step ? d : p->momentum * ploss_load(bd, sdt, bo) + (1.0 - p->dampening) * d;
        buf = round_to(sdt, buf);
        ploss_store(bd, sdt, bo, buf);
        d = p->nesterov ? d + p->momentum * buf : buf;
    }
    ploss_store(op[PLOSS_OPT_PARAM].data, pdt, po, w - p->lr * d);
}

static inline __attribute__((always_inline)) void adam_element(const ploss_optim_problem *p, int64_t k,
                                                                ploss_dtype pdt, ploss_dtype sdt)
{
    const ploss_ew_shape *sh = &p->shape;
    const ploss_ew_operand *op = p->op;
    const int64_t po = ploss_ew_offset(sh, op[PLOSS_OPT_PARAM].strides, k);
    double w = ploss_load(op[PLOSS_OPT_PARAM].data, pdt, po);
    double g = ploss_load(op[PLOSS_OPT_GRAD].data, pdt, ploss_ew_offset(sh, op[PLOSS_OPT_GRAD].strides, k));
    if (p->weight_decay != 0.0) {
        if (p->decoupled)
            w *= p->decay;
        else
            g += p->weight_decay * w;
    }
    const int64_t mo = ploss_ew_offset(sh, op[PLOSS_OPT_S1].strides, k);
    const int64_t vo = ploss_ew_offset(sh, op[PLOSS_OPT_S2].strides, k);
    double m = ploss_load(op[PLOSS_OPT_S1].data, sdt, mo);
    double v = ploss_load(op[PLOSS_OPT_S2].data, sdt, vo);
    m = round_to(sdt, p->beta1 * m + (1.0 - p->beta1) * g);
    v = round_to(sdt, p->beta2 * v + (1.0 - p->beta2) * g * g);
    ploss_store(op[PLOSS_OPT_S1].data, sdt, mo, m);
    ploss_store(op[PLOSS_OPT_S2].data, sdt, vo, v);
    const double denom = sqrt(v) / p->sqrt_bc2 + p->eps;
    ploss_store(op[PLOSS_OPT_PARAM].data, pdt, po, w - p->step_size * m / denom);
}

/* All elements for one (param, state) dtype pair; always inlined with constant dtypes, so
 * the compiler drops the per-element dtype switches. */
static inline __attribute__((always_inline)) void run_dtypes(const ploss_optim_problem *p, ploss_dtype pdt,
                                                             ploss_dtype sdt)
{
    const int64_t n = p->shape.numel;
    if (p->kind == PLOSS_OPTIM_SGD) {
#pragma omp parallel for schedule(static) if (n > PLOSS_CPU_PARALLEL_MIN)
        for (int64_t k = 0; k < n; ++k)
            sgd_element(p, k, pdt, sdt);
    } else {
#pragma omp parallel for schedule(static) if (n > PLOSS_CPU_PARALLEL_MIN)
        for (int64_t k = 0; k < n; ++k)
            adam_element(p, k, pdt, sdt);
    }
}

ploss_status ploss_cpu_optim(const ploss_optim_problem *p)
{
    const int f32_state = p->s_dtype == PLOSS_F32;
    switch (p->p_dtype) {
    case PLOSS_F32: run_dtypes(p, PLOSS_F32, PLOSS_F32); break;
    case PLOSS_F16: f32_state ? run_dtypes(p, PLOSS_F16, PLOSS_F32) : run_dtypes(p, PLOSS_F16, PLOSS_F16); break;
    case PLOSS_BF16: f32_state ? run_dtypes(p, PLOSS_BF16, PLOSS_F32) : run_dtypes(p, PLOSS_BF16, PLOSS_BF16); break;
    default: f32_state ? run_dtypes(p, PLOSS_F64, PLOSS_F32) : run_dtypes(p, PLOSS_F64, PLOSS_F64); break;
    }
    return PLOSS_OK;
}
