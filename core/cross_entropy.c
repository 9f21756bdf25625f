/*
 * cross_entropy.c — the one validation path in front of the CPU and CUDA backends of the
 * softmax cross-entropy family (LOSSES.md §2.1).  Every check runs before any write.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cross_entropy.h"
#include "loss_check.h"

void ploss_cross_entropy_opts_init(ploss_cross_entropy_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->reduction = PLOSS_REDUCTION_MEAN;
    o->ignore_index = -100;
    o->label_smoothing = 0.0;
    o->smoothing_convention = PLOSS_SMOOTHING_PYTORCH;
    o->scale = 1.0;
    o->inplace = 0;
}

typedef struct {
    const DLTensor *input, *target, *weight, *lse, *grad_loss;
    DLTensor *loss, *grad;
} ce_args;

static ploss_status run(ploss_ctx_t *ctx, ploss_pass pass, const ce_args *a,
                        const ploss_cross_entropy_opts *user_opts)
{
    ploss_clear_error();
    ploss_cross_entropy_opts o;
    ploss_cross_entropy_opts_init(&o);
    if (user_opts)
        o = *user_opts;
    ploss_status st;
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    if ((unsigned)o.reduction >= PLOSS_REDUCTION_COUNT)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.reduction: %d is not none (0), mean (1) or sum (2)",
                           (int)o.reduction);
    if ((unsigned)o.smoothing_convention >= PLOSS_SMOOTHING_CONVENTION_COUNT)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.smoothing_convention: %d is not pytorch (0), reference (1) or "
                           "uniform_others (2)",
                           (int)o.smoothing_convention);
    if (!(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.label_smoothing: %g is outside [0, 1]",
                           o.label_smoothing);
    if (pass == PLOSS_PASS_FUSED && !isfinite(o.scale))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.scale: %g is not finite", o.scale);

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

    if ((st = ploss_view_init(&t, a->target, "target")) || (st = ploss_view_check_device(&t, ctx, "target")))
        return st;
    ploss_target_kind kind;
    if (t.dtype == PLOSS_I64 || t.dtype == PLOSS_I32) {
        kind = PLOSS_TARGET_INDEX;
        if ((st = ploss_check_sample_shape(&t, &x, "target")))
            return st;
    } else if (ploss_dtype_is_float(t.dtype)) {
        kind = PLOSS_TARGET_PROB;
        if ((st = ploss_check_shape_axis1(&t, &x, -1, "target", " (probabilities of the input's shape)")))
            return st;
    } else {
        return ploss_error(PLOSS_ERR_DTYPE,
                           "target: expected class indices (i64 or i32) or probabilities (float), got %s",
                           ploss_dtype_name(t.dtype));
    }

    const int64_t C = x.shape[1];
    if (a->weight) {
        if ((st = ploss_view_init(&w, a->weight, "weight")) || (st = ploss_view_check_device(&w, ctx, "weight")))
            return st;
        if (!ploss_dtype_is_float(w.dtype))
            return ploss_error(PLOSS_ERR_DTYPE, "weight: expected a float dtype, got %s", ploss_dtype_name(w.dtype));
        if (w.ndim != 1 || w.shape[0] != C) {
            char want[64];
            snprintf(want, sizeof want, "shape [%lld] (one weight per class)", (long long)C);
            return ploss_check_shape_error("weight", want, &w);
        }
    }
    if (o.smoothing_convention == PLOSS_SMOOTHING_UNIFORM_OTHERS && C == 1 && o.label_smoothing > 0)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.smoothing_convention: uniform_others (ε/(C−1)) is undefined for C = 1");

    if (pass != PLOSS_PASS_BACKWARD) {
        if (!a->loss)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "loss: tensor is NULL");
        if ((st = ploss_view_init(&l, a->loss, "loss")) || (st = ploss_view_check_device(&l, ctx, "loss")) ||
            (st = ploss_check_dtype(&l, acc, "loss")) || (st = ploss_check_loss_shape(&l, &x, o.reduction, "loss")) ||
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
            (st = ploss_check_loss_shape(&gl, &x, o.reduction, "grad_loss")))
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
        if ((st = ploss_check_shape_axis1(&g, &x, -1, "grad_input", " (the input's shape)")) ||
            (st = ploss_view_check_writable(&g, "grad_input")))
            return st;
    }

    /* aliasing: outputs may not overlap inputs or each other */
    const ploss_view *ins[5] = {&x, &t, a->weight ? &w : NULL,
                                pass == PLOSS_PASS_BACKWARD ? &gl : NULL,
                                a->lse && pass == PLOSS_PASS_BACKWARD ? &lse : NULL};
    const char *in_names[5] = {"input", "target", "weight", "grad_loss", "lse"};
    const ploss_view *outs[3] = {pass != PLOSS_PASS_BACKWARD ? &l : NULL,
                                 pass != PLOSS_PASS_FORWARD ? &g : NULL,
                                 a->lse && pass == PLOSS_PASS_FORWARD ? &lse : NULL};
    const char *out_names[3] = {"loss", "grad_input", "lse"};
    /* the requested in-place gradient (fused, grad_input == input) is the one exception */
    const int inplace = pass == PLOSS_PASS_FUSED && o.inplace;
    if ((st = ploss_check_aliasing(outs, out_names, 3, ins, in_names, 5, inplace ? 1 : -1, inplace ? 0 : -1)))
        return st;
    if (pass == PLOSS_PASS_FUSED && o.inplace && !ploss_view_same(&g, &x))
        return ploss_error(PLOSS_ERR_ALIAS,
                           "grad_input: opts.inplace asks for the gradient over the input, but grad_input "
                           "is not the input tensor (same data, shape and strides)");

    /* the problem, with sample dims collapsed to (n, s) */
    ploss_ce_problem p;
    memset(&p, 0, sizeof p);
    p.pass = pass;
    p.reduction = o.reduction;
    p.target_kind = kind;
    p.N = x.shape[0];
    p.C = C;
    p.S = x.numel / (C ? C : 1) / (p.N ? p.N : 1);
    if (x.numel == 0) {
        p.S = 1;
        for (int d = 2; d < x.ndim; ++d)
            p.S *= x.shape[d];
    }
    p.x = x.data; p.x_dtype = x.dtype; p.x_sn = x.strides[0]; p.x_sc = x.strides[1];
    if ((st = ploss_check_collapse(&x, 2, x.ndim, "input", &p.x_ss)))
        return st;
    p.t = t.data; p.t_dtype = t.dtype; p.t_sn = t.strides[0];
    if (kind == PLOSS_TARGET_INDEX)
        st = ploss_check_collapse(&t, 1, t.ndim, "target", &p.t_ss);
    else {
        p.t_sc = t.strides[1];
        st = ploss_check_collapse(&t, 2, t.ndim, "target", &p.t_ss);
    }
    if (st)
        return st;
    if (a->weight) {
        p.w = w.data; p.w_dtype = w.dtype; p.w_s = w.strides[0];
    }
    ploss_smoothing_coefficients(o.smoothing_convention, o.label_smoothing, C, &p.a, &p.b);
    p.ignore_index = o.ignore_index;
    p.scale = o.scale;
    if (pass != PLOSS_PASS_BACKWARD) {
        p.loss = l.data; p.loss_dtype = l.dtype;
        if (o.reduction == PLOSS_REDUCTION_NONE) {
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
        if (o.reduction == PLOSS_REDUCTION_NONE) {
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
        if (kind == PLOSS_TARGET_INDEX &&
            (st = ploss_check_labels_cpu(p.t, p.t_dtype, p.N, p.S, p.t_sn, p.t_ss, p.C, p.ignore_index)))
            return st;
        return ploss_cpu_cross_entropy(ctx, &p);
    }
#ifdef PLOSS_HAVE_CUDA
    if ((st = ploss_cuda_set_device(ctx->device.device_id)))
        return st;
    return ploss_cuda_cross_entropy(ctx, &p);
#else
    return ploss_error(PLOSS_ERR_UNSUPPORTED, "input: a CUDA tensor needs a library built with CUDA");
#endif
}

ploss_status ploss_cross_entropy_forward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                         const DLTensor *weight, const ploss_cross_entropy_opts *opts,
                                         DLTensor *loss, DLTensor *lse)
{
    ce_args a = {input, target, weight, lse, NULL, loss, NULL};
    return run(ctx, PLOSS_PASS_FORWARD, &a, opts);
}

ploss_status ploss_cross_entropy_backward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                          const DLTensor *weight, const ploss_cross_entropy_opts *opts,
                                          const DLTensor *lse, const DLTensor *grad_loss, DLTensor *grad_input)
{
    ce_args a = {input, target, weight, lse, grad_loss, NULL, grad_input};
    return run(ctx, PLOSS_PASS_BACKWARD, &a, opts);
}

ploss_status ploss_cross_entropy_fused(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                       const DLTensor *weight, const ploss_cross_entropy_opts *opts,
                                       DLTensor *loss, DLTensor *grad_input)
{
    ce_args a = {input, target, weight, NULL, NULL, loss, grad_input};
    return run(ctx, PLOSS_PASS_FUSED, &a, opts);
}
