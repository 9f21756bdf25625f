/*
 * softmax_focal.c — the one validation path in front of the CPU and CUDA backends of the
 * softmax focal family: softmax_focal and dual_focal (LOSSES.md §2.6).  Every check runs
 * before any write; on the CPU the labels are checked before the backend starts.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu/scalar.h"
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

/* Collapse dims [first, ndim) of v into one sample axis: *ss is its stride. */
static ploss_status collapse(const ploss_view *v, int first, const char *name, int64_t *ss)
{
    int64_t stride = 0, expect = 0;
    int have = 0;
    for (int d = v->ndim - 1; d >= first; --d) {
        if (v->shape[d] == 1)
            continue;
        if (!have) {
            stride = v->strides[d];
            expect = stride * v->shape[d];
            have = 1;
        } else if (v->strides[d] == expect) {
            expect *= v->shape[d];
        } else {
            return ploss_error(PLOSS_ERR_LAYOUT,
                               "%s: the strides of dims %d..%d cannot be walked as one axis; pass a "
                               "contiguous or channels-last tensor (:contiguous())",
                               name, first, v->ndim - 1);
        }
    }
    *ss = stride;
    return PLOSS_OK;
}

static ploss_status shape_error(const char *name, const char *expect, const ploss_view *got)
{
    char b[200];
    return ploss_error(PLOSS_ERR_SHAPE, "%s: expected %s, got %s", name, expect,
                       ploss_view_describe(got, b, sizeof b));
}

/* `v` must have the sample shape: the input's dims without axis 1. */
static ploss_status check_sample_shape(const ploss_view *v, const ploss_view *x, const char *name)
{
    int ok = v->ndim == x->ndim - 1 && v->shape[0] == x->shape[0];
    for (int d = 2; ok && d < x->ndim; ++d)
        ok = v->shape[d - 1] == x->shape[d];
    if (ok)
        return PLOSS_OK;
    char want[200];
    size_t n = (size_t)snprintf(want, sizeof want, "shape [%lld", (long long)x->shape[0]);
    for (int d = 2; d < x->ndim && n < sizeof want; ++d)
        n += (size_t)snprintf(want + n, sizeof want - n, ", %lld", (long long)x->shape[d]);
    if (n < sizeof want)
        snprintf(want + n, sizeof want - n, "] (the input's shape without the class axis)");
    return shape_error(name, want, v);
}

static ploss_status check_float_dtype(const ploss_view *v, ploss_dtype want, const char *name)
{
    if (v->dtype == want)
        return PLOSS_OK;
    return ploss_error(PLOSS_ERR_DTYPE, "%s: expected %s, got %s", name, ploss_dtype_name(want),
                       ploss_dtype_name(v->dtype));
}

static ploss_status check_loss_shape(const ploss_view *v, const ploss_view *x, ploss_reduction r,
                                     const char *name)
{
    if (r == PLOSS_REDUCTION_NONE)
        return check_sample_shape(v, x, name);
    if (v->numel == 1)
        return PLOSS_OK;
    return shape_error(name, "one element (0-d or [1]) for a reduced loss", v);
}

static ploss_status validate_labels_cpu(const ploss_sfocal_problem *p)
{
    for (int64_t n = 0; n < (p->S > 0 ? p->N : 0); ++n) /* S = 0: no sample (N may be huge) */
        for (int64_t s = 0; s < p->S; ++s) {
            int64_t y = ploss_load_int(p->t, p->t_dtype, n * p->t_sn + s * p->t_ss);
            if (y != p->ignore_index && (y < 0 || y >= p->C))
                return ploss_error(PLOSS_ERR_INVALID_LABEL,
                                   "target: class index %lld at sample (%lld, %lld) is outside [0, %lld) "
                                   "and is not ignore_index (%lld)",
                                   (long long)y, (long long)n, (long long)s, (long long)p->C,
                                   (long long)p->ignore_index);
        }
    return PLOSS_OK;
}

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
        return shape_error("input", "rank >= 2 (N×C or N×C×d1×…×dk)", &x);
    if (x.shape[1] < 1)
        return shape_error("input", "at least one class (C >= 1 along axis 1)", &x);
    const ploss_dtype acc = x.dtype == PLOSS_F64 ? PLOSS_F64 : PLOSS_F32;
    const int64_t C = x.shape[1];

    if ((st = ploss_view_init(&t, a->target, "target")) || (st = ploss_view_check_device(&t, ctx, "target")))
        return st;
    if (t.dtype != PLOSS_I64 && t.dtype != PLOSS_I32)
        return ploss_error(PLOSS_ERR_DTYPE, "target: expected class indices of dtype i64 or i32, got %s",
                           ploss_dtype_name(t.dtype));
    if ((st = check_sample_shape(&t, &x, "target")))
        return st;

    if (a->alpha) {
        if ((st = ploss_view_init(&w, a->alpha, "alpha")) || (st = ploss_view_check_device(&w, ctx, "alpha")))
            return st;
        if (!ploss_dtype_is_float(w.dtype))
            return ploss_error(PLOSS_ERR_DTYPE, "alpha: expected a float dtype, got %s", ploss_dtype_name(w.dtype));
        if (w.ndim != 1 || w.shape[0] != C) {
            char want[64];
            snprintf(want, sizeof want, "shape [%lld] (one factor per class)", (long long)C);
            return shape_error("alpha", want, &w);
        }
    }

    if (pass != PLOSS_PASS_BACKWARD) {
        if (!a->loss)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "loss: tensor is NULL");
        if ((st = ploss_view_init(&l, a->loss, "loss")) || (st = ploss_view_check_device(&l, ctx, "loss")) ||
            (st = check_float_dtype(&l, acc, "loss")) || (st = check_loss_shape(&l, &x, o->reduction, "loss")) ||
            (st = ploss_view_check_writable(&l, "loss")))
            return st;
    }
    if (a->lse) {
        if ((st = ploss_view_init(&lse, a->lse, "lse")) || (st = ploss_view_check_device(&lse, ctx, "lse")) ||
            (st = check_float_dtype(&lse, acc, "lse")) || (st = check_sample_shape(&lse, &x, "lse")))
            return st;
        if (pass == PLOSS_PASS_FORWARD && (st = ploss_view_check_writable(&lse, "lse")))
            return st;
    }
    if (pass == PLOSS_PASS_BACKWARD) {
        if (!a->grad_loss)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "grad_loss: tensor is NULL");
        if ((st = ploss_view_init(&gl, a->grad_loss, "grad_loss")) ||
            (st = ploss_view_check_device(&gl, ctx, "grad_loss")) ||
            (st = check_loss_shape(&gl, &x, o->reduction, "grad_loss")))
            return st;
        if (gl.dtype != PLOSS_F32 && gl.dtype != PLOSS_F64)
            return ploss_error(PLOSS_ERR_DTYPE, "grad_loss: expected f32 or f64, got %s", ploss_dtype_name(gl.dtype));
    }
    if (pass != PLOSS_PASS_FORWARD) {
        if (!a->grad)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "grad_input: tensor is NULL");
        if ((st = ploss_view_init(&g, a->grad, "grad_input")) || (st = ploss_view_check_device(&g, ctx, "grad_input")) ||
            (st = check_float_dtype(&g, x.dtype, "grad_input")))
            return st;
        int same = g.ndim == x.ndim;
        for (int d = 0; same && d < x.ndim; ++d)
            same = g.shape[d] == x.shape[d];
        if (!same)
            return shape_error("grad_input", "the input's shape", &g);
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
    if ((st = collapse(&x, 2, "input", &p.x_ss)))
        return st;
    p.t = t.data; p.t_dtype = t.dtype; p.t_sn = t.strides[0];
    if ((st = collapse(&t, 1, "target", &p.t_ss)))
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
            if ((st = collapse(&l, 1, "loss", &p.l_ss)))
                return st;
        }
    }
    if (a->lse) {
        p.lse = lse.data; p.lse_dtype = lse.dtype; p.lse_sn = lse.strides[0];
        if ((st = collapse(&lse, 1, "lse", &p.lse_ss)))
            return st;
    }
    if (pass == PLOSS_PASS_BACKWARD) {
        p.grad_loss = gl.data; p.gl_dtype = gl.dtype;
        if (o->reduction == PLOSS_REDUCTION_NONE) {
            p.gl_sn = gl.strides[0];
            if ((st = collapse(&gl, 1, "grad_loss", &p.gl_ss)))
                return st;
        }
    }
    if (pass != PLOSS_PASS_FORWARD) {
        p.grad = g.data; p.g_sn = g.strides[0]; p.g_sc = g.strides[1];
        if ((st = collapse(&g, 2, "grad_input", &p.g_ss)))
            return st;
    }

    if (ctx->device.device_type == kDLCPU) {
        if ((st = validate_labels_cpu(&p)))
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
