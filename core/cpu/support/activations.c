/*
 * activations.c — CPU backend of swish, hard-swish and mish, forward and
 * backward, in f64 for every dtype.  Elementwise, so in-place operation is safe: each
 * element is read before it is written.
 */
#include <math.h>

#include "activations.h"
#include "scalar.h"

/* Elementwise loops go parallel above this many elements (below it, waking threads costs
 * more than it saves, and more so on a loaded machine). */
#define PLOSS_CPU_PARALLEL_MIN 262144

/* σ(x) and σ(−x) = 1 − σ(x), each evaluated by the sign of x so neither overflows. */
static void sigmoid2(double x, double *s, double *sm)
{
    if (x >= 0) {
        const double e = exp(-x);
        *s = 1.0 / (1.0 + e);
        *sm = e / (1.0 + e);
    } else {
        const double e = exp(x);
        *s = e / (1.0 + e);
        *sm = 1.0 / (1.0 + e);
    }
}

/* tanh(softplus(x)) and 1 − tanh²(softplus(x)), cancellation-free below the softplus
 * threshold 20: with e = eˣ, n = e(e + 2), tanh(sp) = n/(n + 2) and
 * 1 − tanh² = 4(n + 1)/(n + 2)²; above it softplus(x) = x (PyTorch's threshold). */
static void tanh_softplus(double x, double *t, double *sech2)
{
    if (x > 20.0) {
        *t = tanh(x);
        *sech2 = 1.0 - *t * *t;
        return;
    }
    const double e = exp(x), n = e * (e + 2.0), d = n + 2.0;
    *t = n / d;
    *sech2 = 4.0 * (n + 1.0) / (d * d);
}

static double forward(ploss_activation act, double x)
{
    switch (act) {
    case PLOSS_ACTIVATION_SWISH: {
        double s, sm;
        sigmoid2(x, &s, &sm);
        return x * s;
    }
    case PLOSS_ACTIVATION_HARD_SWISH:
        return x * fmin(fmax(x + 3.0, 0.0), 6.0) / 6.0;
    default: {
        double t, sech2;
        tanh_softplus(x, &t, &sech2);
        return x * t;
    }
    }
}

static double derivative(ploss_activation act, double x)
{
    switch (act) {
    case PLOSS_ACTIVATION_SWISH: {
        double s, sm;
        sigmoid2(x, &s, &sm);
        return s * (1.0 + x * sm); /* σ(x)·(1 + x·(1 − σ(x))) */
    }
    case PLOSS_ACTIVATION_HARD_SWISH: /* PyTorch >= 2.8: 0 at −3, 1 at 3 */
        if (x <= -3.0)
            return 0.0;
        if (x < 3.0)
            return x / 3.0 + 0.5;
        return 1.0;
    default: { /* t + x·σ(x)·(1 − t²), one exponential below the softplus threshold */
        if (x > 20.0) {
            double t, sech2, s, sm;
            tanh_softplus(x, &t, &sech2);
            sigmoid2(x, &s, &sm);
            return t + x * s * sech2;
        }
        const double e = exp(x), n = e * (e + 2.0), d = n + 2.0;
        return n / d + x * (e / (1.0 + e)) * (4.0 * (n + 1.0) / (d * d));
    }
    }
}

/* The loop over all elements for one dtype; always inlined with a constant `dt`, so the
 * compiler drops the per-element dtype switch of ploss_load/ploss_store. */
static inline __attribute__((always_inline)) void run_dtype(const ploss_act_problem *p, ploss_dtype dt)
{
    const ploss_ew_shape *sh = &p->shape;
    const ploss_ew_operand *x = &p->op[PLOSS_ACT_X], *gy = &p->op[PLOSS_ACT_GY], *o = &p->op[PLOSS_ACT_OUT];
#pragma omp parallel for schedule(static) if (sh->numel > PLOSS_CPU_PARALLEL_MIN)
    for (int64_t k = 0; k < sh->numel; ++k) {
        const double v = ploss_load(x->data, dt, ploss_ew_offset(sh, x->strides, k));
        double r;
        if (p->backward)
            r = derivative(p->act, v) * ploss_load(gy->data, dt, ploss_ew_offset(sh, gy->strides, k));
        else
            r = forward(p->act, v);
        ploss_store(o->data, dt, ploss_ew_offset(sh, o->strides, k), r);
    }
}

ploss_status ploss_cpu_activation(const ploss_act_problem *p)
{
    switch (p->dtype) {
    case PLOSS_F32: run_dtype(p, PLOSS_F32); break;
    case PLOSS_F16: run_dtype(p, PLOSS_F16); break;
    case PLOSS_BF16: run_dtype(p, PLOSS_BF16); break;
    default: run_dtype(p, PLOSS_F64); break;
    }
    return PLOSS_OK;
}
