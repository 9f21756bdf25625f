/*
 * softmax_focal.c — the one validation path in front of the CPU and CUDA backends of the
 * softmax focal family: softmax_focal and dual_focal (LOSSES.md §2.6).  Every check runs
 * before any write; on the CPU the labels are checked before the backend starts.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "loss_check.h"
#include "softmax_focal.h"

void ploss_softmax_focal_opts_init(ploss_softmax_focal_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->reduction = PLOSS_REDUCTION_MEAN;
    o->ignore_index = -100;
    o->gamma = 2.0;
    o->scale = 1.0;
    o->inplace = 0;
}

void ploss_dual_focal_opts_init(ploss_dual_focal_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->reduction = PLOSS_REDUCTION_MEAN;
    o->ignore_index = -100;
    o->eps = 1e-5;
    o->scale = 1.0;
    o->inplace = 0;
}

/* The options of both losses after their own checks. */
typedef struct {
    ploss_sfocal_kind kind;
    ploss_reduction reduction;
    int64_t ignore_index;
    double gamma, eps, scale;
    int inplace;
} sf_opts;

typedef struct {
    const DLTensor *input, *target, *alpha, *lse, *grad_loss;
    DLTensor *loss, *grad;
} sf_args;

static ploss_status run(ploss_ctx_t *ctx, ploss_pass pass, const sf_args *a, const sf_opts *o)
{
    ploss_status st;
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    if ((unsigned)o->reduction >= PLOSS_REDUCTION_COUNT)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.reduction: %d is not none (0), mean (1) or sum (2)",
                           (int)o->reduction);
    if (pass == PLOSS_PASS_FUSED && !isfinite(o->scale))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.scale: %g is not finite", o->scale);

    ploss_view x, t, w, l, lse, gl, g;
    if ((st = ploss_view_init(&x, a->input, "input")) || (st = ploss_view_check_device(&x, ctx, "input")))
        return st;
    if (!ploss_dtype_is_float(x.dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "input: expected logits of dtype f32, f16, bf16 or f64, got %s",
                           ploss_dtype_name(x.dtype));
    if (x.ndim < 2)
        return ploss_check_shape_error("input", "rank >= 2 (N×C or N×C×d1×…×dk)", &x);
    if (x.shape[1] < 1)
        return ploss_check_shape_error("input", "at least one class (C >= 1 along axis 1)", &x);
    const ploss_dtype acc = x.dtype == PLOSS_F64 ? PLOSS_F64 : PLOSS_F32;
    const int64_t C = x.shape[1];

    if ((st = ploss_view_init(&t, a->target, "target")) || (st = ploss_view_check_device(&t, ctx, "target")))
        return st;
    if (t.dtype != PLOSS_I64 && t.dtype != PLOSS_I32)
        return ploss_error(PLOSS_ERR_DTYPE, "target: expected class indices of dtype i64 or i32, got %s",
                           ploss_dtype_name(t.dtype));
    if ((st = ploss_check_sample_shape(&t, &x, "target")))
        return st;

    if (a->alpha) {
        if ((st = ploss_view_init(&w, a->alpha, "alpha")) || (st = ploss_view_check_device(&w, ctx, "alpha")))
            return st;
        if (!ploss_dtype_is_float(w.dtype))
            return ploss_error(PLOSS_ERR_DTYPE, "alpha: expected a float dtype, got %s", ploss_dtype_name(w.dtype));
        if (w.ndim != 1 || w.shape[0] != C) {
            char want[64];
            snprintf(want, sizeof want, "shape [%lld] (one factor per class)", (long long)C);
            return ploss_check_shape_error("alpha", want, &w);
        }
    }

    if (pass != PLOSS_PASS_BACKWARD) {
        if (!a->loss)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "loss: tensor is NULL");
        if ((st = ploss_view_init(&l, a->loss, "loss")) || (st = ploss_view_check_device(&l, ctx, "loss")) ||
            (st = ploss_check_dtype(&l, acc, "loss")) || (st = ploss_check_loss_shape(&l, &x, o->reduction, "loss")) ||
            (st = ploss_view_check_writable(&l, "loss")))
            return st;
    }
    if (a->lse) {
        if ((st = ploss_view_init(&lse, a->lse, "lse")) || (st = ploss_view_check_device(&lse, ctx, "lse")) ||
            (st = ploss_check_dtype(&lse, acc, "lse")) || (st = ploss_check_sample_shape(&lse, &x, "lse")))
            return st;
        if (pass == PLOSS_PASS_FORWARD && (st = ploss_view_check_writable(&lse, "lse")))
            return st;
    }
    if (pass == PLOSS_PASS_BACKWARD) {
        if (!a->grad_loss)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "grad_loss: tensor is NULL");
        if ((st = ploss_view_init(&gl, a->grad_loss, "grad_loss")) ||
            (st = ploss_view_check_device(&gl, ctx, "grad_loss")) ||
            (st = ploss_check_loss_shape(&gl, &x, o->reduction, "grad_loss")))
            return st;
        if (gl.dtype != PLOSS_F32 && gl.dtype != PLOSS_F64)
            return ploss_error(PLOSS_ERR_DTYPE, "grad_loss: expected f32 or f64, got %s", ploss_dtype_name(gl.dtype));
    }
    if (pass != PLOSS_PASS_FORWARD) {
        if (!a->grad)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "grad_input: tensor is NULL");
        if ((st = ploss_view_init(&g, a->grad, "grad_input")) || (st = ploss_view_check_device(&g, ctx, "grad_input")) ||
            (st = ploss_check_dtype(&g, x.dtype, "grad_input")))
            return st;
        int same = g.ndim == x.ndim;
        for (int d = 0; same && d < x.ndim; ++d)
            same = g.shape[d] == x.shape[d];
        if (!same)
            return ploss_check_shape_error("grad_input", "the input's shape", &g);
        if ((st = ploss_view_check_writable(&g, "grad_input")))
            return st;
    }

    /* aliasing: outputs may not overlap inputs or each other */
    const ploss_view *ins[5] = {&x, &t, a->alpha ? &w : NULL, pass == PLOSS_PASS_BACKWARD ? &gl : NULL,
                                a->lse && pass == PLOSS_PASS_BACKWARD ? &lse : NULL};
    const char *in_names[5] = {"input", "target", "alpha", "grad_loss", "lse"};
    const ploss_view *outs[3] = {pass != PLOSS_PASS_BACKWARD ? &l : NULL, pass != PLOSS_PASS_FORWARD ? &g : NULL,
                                 a->lse && pass == PLOSS_PASS_FORWARD ? &lse : NULL};
    const char *out_names[3] = {"loss", "grad_input", "lse"};
    for (int i = 0; i < 3; ++i) {
        if (!outs[i])
            continue;
        for (int j = 0; j < 5; ++j) {
            if (!ins[j])
                continue;
            if (i == 1 && j == 0 && pass == PLOSS_PASS_FUSED && o->inplace && ploss_view_same(&g, &x))
                continue; /* the requested in-place gradient */
            if ((st = ploss_check_no_alias(outs[i], out_names[i], ins[j], in_names[j])))
                return st;
        }
        for (int k = i + 1; k < 3; ++k)
            if (outs[k] && (st = ploss_check_no_alias(outs[i], out_names[i], outs[k], out_names[k])))
                return st;
    }
    if (pass == PLOSS_PASS_FUSED && o->inplace && !ploss_view_same(&g, &x))
        return ploss_error(PLOSS_ERR_ALIAS,
                           "grad_input: opts.inplace asks for the gradient over the input, but grad_input "
                           "is not the input tensor (same data, shape and strides)");

    /* the problem, with sample dims collapsed to (n, s) */
    ploss_sfocal_problem p;
    memset(&p, 0, sizeof p);
    p.pass = pass;
    p.reduction = o->reduction;
    p.kind = o->kind;
    p.N = x.shape[0];
    p.C = C;
    p.S = 1;
    for (int d = 2; d < x.ndim; ++d)
        p.S *= x.shape[d];
    p.x = x.data; p.x_dtype = x.dtype; p.x_sn = x.strides[0]; p.x_sc = x.strides[1];
    if ((st = ploss_check_collapse(&x, 2, x.ndim, "input", &p.x_ss)))
        return st;
    p.t = t.data; p.t_dtype = t.dtype; p.t_sn = t.strides[0];
    if ((st = ploss_check_collapse(&t, 1, t.ndim, "target", &p.t_ss)))
        return st;
    if (a->alpha) {
        p.w = w.data; p.w_dtype = w.dtype; p.w_s = w.strides[0];
    }
    p.gamma = o->gamma;
    p.eps = o->eps;
    p.ignore_index = o->ignore_index;
    p.scale = o->scale;
    if (pass != PLOSS_PASS_BACKWARD) {
        p.loss = l.data; p.loss_dtype = l.dtype;
        if (o->reduction == PLOSS_REDUCTION_NONE) {
            p.l_sn = l.strides[0];
            if ((st = ploss_check_collapse(&l, 1, l.ndim, "loss", &p.l_ss)))
                return st;
        }
    }
    if (a->lse) {
        p.lse = lse.data; p.lse_dtype = lse.dtype; p.lse_sn = lse.strides[0];
        if ((st = ploss_check_collapse(&lse, 1, lse.ndim, "lse", &p.lse_ss)))
            return st;
    }
    if (pass == PLOSS_PASS_BACKWARD) {
        p.grad_loss = gl.data; p.gl_dtype = gl.dtype;
        if (o->reduction == PLOSS_REDUCTION_NONE) {
            p.gl_sn = gl.strides[0];
            if ((st = ploss_check_collapse(&gl, 1, gl.ndim, "grad_loss", &p.gl_ss)))
                return st;
        }
    }
    if (pass != PLOSS_PASS_FORWARD) {
        p.grad = g.data; p.g_sn = g.strides[0]; p.g_sc = g.strides[1];
        if ((st = ploss_check_collapse(&g, 2, g.ndim, "grad_input", &p.g_ss)))
            return st;
    }

    if (ctx->device.device_type == kDLCPU) {
        if ((st = ploss_check_labels_cpu(p.t, p.t_dtype, p.N, p.S, p.t_sn, p.t_ss, p.C, p.ignore_index)))
            return st;
        return ploss_cpu_softmax_focal(ctx, &p);
    }
#ifdef PLOSS_HAVE_CUDA
    if ((st = ploss_cuda_set_device(ctx->device.device_id)))
        return st;
    return ploss_cuda_softmax_focal(ctx, &p);
#else
    return ploss_error(PLOSS_ERR_UNSUPPORTED, "input: a CUDA tensor needs a library built with CUDA");
#endif
}

/* ---- softmax_focal ---- */

static ploss_status softmax_focal(ploss_ctx_t *ctx, ploss_pass pass, const sf_args *a,
                                  const ploss_softmax_focal_opts *user)
{
    ploss_clear_error();
    ploss_softmax_focal_opts u;
    ploss_softmax_focal_opts_init(&u);
    if (user)
        u = *user;
    if (!(u.gamma >= 0.0) || !isfinite(u.gamma))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.gamma: %g must be finite and >= 0", u.gamma);
    sf_opts o = {PLOSS_SOFTMAX_FOCAL, u.reduction, u.ignore_index, u.gamma, 0.0, u.scale, u.inplace};
    return run(ctx, pass, a, &o);
}

ploss_status ploss_softmax_focal_forward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                         const DLTensor *alpha, const ploss_softmax_focal_opts *opts,
                                         DLTensor *loss, DLTensor *lse)
{
    sf_args a = {input, target, alpha, lse, NULL, loss, NULL};
    return softmax_focal(ctx, PLOSS_PASS_FORWARD, &a, opts);
}

ploss_status ploss_softmax_focal_backward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                          const DLTensor *alpha, const ploss_softmax_focal_opts *opts,
                                          const DLTensor *lse, const DLTensor *grad_loss, DLTensor *grad_input)
{
    sf_args a = {input, target, alpha, lse, grad_loss, NULL, grad_input};
    return softmax_focal(ctx, PLOSS_PASS_BACKWARD, &a, opts);
}

ploss_status ploss_softmax_focal_fused(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                       const DLTensor *alpha, const ploss_softmax_focal_opts *opts,
                                       DLTensor *loss, DLTensor *grad_input)
{
    sf_args a = {input, target, alpha, NULL, NULL, loss, grad_input};
    return softmax_focal(ctx, PLOSS_PASS_FUSED, &a, opts);
}

/* ---- dual_focal ---- */

static ploss_status dual_focal(ploss_ctx_t *ctx, ploss_pass pass, const sf_args *a,
                               const ploss_dual_focal_opts *user)
{
    ploss_clear_error();
    ploss_dual_focal_opts u;
    ploss_dual_focal_opts_init(&u);
    if (user)
        u = *user;
    if (!(u.eps > 0.0) || !isfinite(u.eps))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.eps: %g must be finite and > 0", u.eps);
    sf_opts o = {PLOSS_DUAL_FOCAL, u.reduction, u.ignore_index, 0.0, u.eps, u.scale, u.inplace};
    return run(ctx, pass, a, &o);
}

ploss_status ploss_dual_focal_forward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                      const ploss_dual_focal_opts *opts, DLTensor *loss, DLTensor *lse)
{
    sf_args a = {input, target, NULL, lse, NULL, loss, NULL};
    return dual_focal(ctx, PLOSS_PASS_FORWARD, &a, opts);
}

ploss_status ploss_dual_focal_backward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                       const ploss_dual_focal_opts *opts, const DLTensor *lse,
                                       const DLTensor *grad_loss, DLTensor *grad_input)
{
    sf_args a = {input, target, NULL, lse, grad_loss, NULL, grad_input};
    return dual_focal(ctx, PLOSS_PASS_BACKWARD, &a, opts);
}

ploss_status ploss_dual_focal_fused(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                    const ploss_dual_focal_opts *opts, DLTensor *loss, DLTensor *grad_input)
{
    sf_args a = {input, target, NULL, NULL, NULL, loss, grad_input};
    return dual_focal(ctx, PLOSS_PASS_FUSED, &a, opts);
}
