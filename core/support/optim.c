/*
 * optim.c — the one validation path of the optimiser steps (SGD, Adam) in front of the
 * CPU and CUDA backends.  Every check runs before any write.
 */
#include <math.h>
#include <string.h>

#include "dispatch.h"
#include "optim.h"

void ploss_sgd_opts_init(ploss_sgd_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->lr = 0.01;
    o->opts_tag = PLOSS_OPTS_TAG;
}

void ploss_adam_opts_init(ploss_adam_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->lr = 1e-3;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->eps = 1e-8;
    o->opts_tag = PLOSS_OPTS_TAG;
}

static ploss_status check_opt(double v, int ok, const char *name, const char *range)
{
    if (isfinite(v) && ok)
        return PLOSS_OK;
    return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.%s: %s is outside %s", name, PLOSS_SHOWN(v), range);
}

/* Validate param, grad and the state buffers (NULL entries absent), then fill the
 * operands of p.  state_names[i] names state i in messages. */
static ploss_status prepare(ploss_ctx_t *ctx, ploss_optim_problem *p, DLTensor *param, const DLTensor *grad,
                            DLTensor *s1, DLTensor *s2, const char *const state_names[2], int64_t step)
{
    ploss_status st;
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    if (step < 1)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "step: expected 1 for the first step, then 2, 3, …; got %lld",
                           (long long)step);
    ploss_view vp, vg, vs[2];
    if ((st = ploss_view_init(&vp, param, "param")) || (st = ploss_view_check_device(&vp, ctx, "param")))
        return st;
    if (!ploss_dtype_is_float(vp.dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "param: expected f32, f16, bf16 or f64, got %s", ploss_dtype_name(vp.dtype));
    if ((st = ploss_view_check_writable(&vp, "param")))
        return st;
    if ((st = ploss_view_init(&vg, grad, "grad")) || (st = ploss_view_check_device(&vg, ctx, "grad")))
        return st;
    if (vg.dtype != vp.dtype)
        return ploss_error(PLOSS_ERR_DTYPE, "grad: expected param's dtype %s, got %s", ploss_dtype_name(vp.dtype),
                           ploss_dtype_name(vg.dtype));
    if (!ploss_same_shape(&vg, &vp))
        return ploss_shape_mismatch("grad", &vg, "param", &vp);
    const ploss_view *views[PLOSS_OPT_OPERANDS] = {&vp, &vg, NULL, NULL};
    DLTensor *states[2] = {s1, s2};
    for (int i = 0; i < 2; ++i) {
        if (!states[i])
            continue;
        const char *name = state_names[i];
        if ((st = ploss_view_init(&vs[i], states[i], name)) || (st = ploss_view_check_device(&vs[i], ctx, name)))
            return st;
        if (vs[i].dtype != vp.dtype && vs[i].dtype != PLOSS_F32)
            return ploss_error(PLOSS_ERR_DTYPE, "%s: expected %s%s (param's dtype%s), got %s", name,
                               ploss_dtype_name(vp.dtype), vp.dtype == PLOSS_F32 ? "" : " or f32",
                               vp.dtype == PLOSS_F32 ? "" : " or f32", ploss_dtype_name(vs[i].dtype));
        if (i == 1 && vs[1].dtype != vs[0].dtype)
            return ploss_error(PLOSS_ERR_DTYPE, "%s: expected the dtype of %s (%s), got %s", name, state_names[0],
                               ploss_dtype_name(vs[0].dtype), ploss_dtype_name(vs[1].dtype));
        if (!ploss_same_shape(&vs[i], &vp))
            return ploss_shape_mismatch(name, &vs[i], "param", &vp);
        if ((st = ploss_view_check_writable(&vs[i], name)))
            return st;
        views[PLOSS_OPT_S1 + i] = &vs[i];
    }
    /* no operand may overlap another */
    const char *names[PLOSS_OPT_OPERANDS] = {"param", "grad", state_names[0], state_names[1]};
    for (int i = 0; i < PLOSS_OPT_OPERANDS; ++i)
        for (int j = i + 1; j < PLOSS_OPT_OPERANDS; ++j)
            if (views[i] && views[j] && (st = ploss_check_no_alias(views[i], names[i], views[j], names[j])))
                return st;
    p->p_dtype = vp.dtype;
    p->s_dtype = views[PLOSS_OPT_S1] ? vs[0].dtype : vp.dtype;
    ploss_ew_build(&p->shape, p->op, views, PLOSS_OPT_OPERANDS);
    return ploss_enter_device(ctx, "param");
}

static ploss_status dispatch(ploss_ctx_t *ctx, const ploss_optim_problem *p)
{
    if (p->shape.numel == 0)
        return PLOSS_OK;
    return ploss_dispatch(ctx, PLOSS_OP_OPTIM, "param", p);
}

ploss_status ploss_sgd_opts_check(const ploss_sgd_opts *opts)
{
    ploss_clear_error();
    if (!opts)
        return PLOSS_OK;
    const ploss_sgd_opts o = *opts;
    if (o.opts_tag != PLOSS_OPTS_TAG)
        return ploss_opts_tag_error(o.opts_tag, "ploss_sgd_opts_init");
    ploss_status st;
    if ((st = check_opt(o.lr, o.lr >= 0, "lr", "[0, ∞)")) ||
        (st = check_opt(o.momentum, o.momentum >= 0, "momentum", "[0, ∞)")) ||
        (st = check_opt(o.dampening, 1, "dampening", "the finite numbers")) ||
        (st = check_opt(o.weight_decay, o.weight_decay >= 0, "weight_decay", "[0, ∞)")) ||
        (st = ploss_check_flag(o.nesterov, "opts.nesterov")))
        return st;
    if (o.nesterov && !(o.momentum > 0 && o.dampening == 0))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.nesterov: needs momentum > 0 and dampening = 0 (got momentum %g, dampening %g)",
                           o.momentum, o.dampening);
    return PLOSS_OK;
}

ploss_status ploss_adam_opts_check(const ploss_adam_opts *opts)
{
    ploss_clear_error();
    if (!opts)
        return PLOSS_OK;
    const ploss_adam_opts o = *opts;
    if (o.opts_tag != PLOSS_OPTS_TAG)
        return ploss_opts_tag_error(o.opts_tag, "ploss_adam_opts_init");
    ploss_status st;
    if ((st = check_opt(o.lr, o.lr >= 0, "lr", "[0, ∞)")) ||
        (st = check_opt(o.beta1, o.beta1 >= 0 && o.beta1 < 1, "beta1", "[0, 1)")) ||
        (st = check_opt(o.beta2, o.beta2 >= 0 && o.beta2 < 1, "beta2", "[0, 1)")) ||
        (st = check_opt(o.eps, o.eps >= 0, "eps", "[0, ∞)")) ||
        (st = check_opt(o.weight_decay, o.weight_decay >= 0, "weight_decay", "[0, ∞)")) ||
        (st = ploss_check_flag(o.decoupled_weight_decay, "opts.decoupled_weight_decay")))
        return st;
    return PLOSS_OK;
}

ploss_status ploss_sgd_step(ploss_ctx_t *ctx, DLTensor *param, const DLTensor *grad, DLTensor *momentum_buffer,
                            int64_t step, const ploss_sgd_opts *opts)
{
    ploss_status st;
    if ((st = ploss_sgd_opts_check(opts)))
        return st;
    ploss_sgd_opts o;
    ploss_sgd_opts_init(&o);
    if (opts)
        o = *opts;
    const int use_buf = o.momentum != 0;
    if (use_buf && !momentum_buffer)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "momentum_buffer: tensor is NULL but opts.momentum is %g",
                           o.momentum);
    ploss_optim_problem p;
    memset(&p, 0, sizeof p);
    static const char *const names[2] = {"momentum_buffer", "unused"};
    if ((st = prepare(ctx, &p, param, grad, use_buf ? momentum_buffer : NULL, NULL, names, step)))
        return st;
    p.kind = PLOSS_OPTIM_SGD;
    p.lr = o.lr;
    p.weight_decay = o.weight_decay;
    p.momentum = o.momentum;
    p.dampening = o.dampening;
    p.nesterov = o.nesterov;
    p.first_step = step == 1;
    return dispatch(ctx, &p);
}

ploss_status ploss_adam_step(ploss_ctx_t *ctx, DLTensor *param, const DLTensor *grad, DLTensor *exp_avg,
                             DLTensor *exp_avg_sq, int64_t step, const ploss_adam_opts *opts)
{
    ploss_status st;
    if ((st = ploss_adam_opts_check(opts)))
        return st;
    ploss_adam_opts o;
    ploss_adam_opts_init(&o);
    if (opts)
        o = *opts;
    if (!exp_avg || !exp_avg_sq)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", exp_avg ? "exp_avg_sq" : "exp_avg");
    ploss_optim_problem p;
    memset(&p, 0, sizeof p);
    static const char *const names[2] = {"exp_avg", "exp_avg_sq"};
    if ((st = prepare(ctx, &p, param, grad, exp_avg, exp_avg_sq, names, step)))
        return st;
    p.kind = PLOSS_OPTIM_ADAM;
    p.lr = o.lr;
    p.weight_decay = o.weight_decay;
    p.beta1 = o.beta1;
    p.beta2 = o.beta2;
    p.eps = o.eps;
    p.decoupled = o.decoupled_weight_decay;
    const double t = (double)step;
    p.step_size = o.lr / (1.0 - pow(o.beta1, t));
    p.sqrt_bc2 = sqrt(1.0 - pow(o.beta2, t));
    p.decay = 1.0 - o.lr * o.weight_decay;
    return dispatch(ctx, &p);
}
