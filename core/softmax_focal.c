/*
 * softmax_focal.c — the one validation path in front of the CPU and CUDA backends of the
 * softmax focal family: softmax_focal and dual_focal (LOSSES.md §2.6).  Every check runs
 * before any write; on the CPU the labels are checked before the backend starts.
 */
#include <math.h>
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

    ploss_view x, t, w;
    if ((st = ploss_check_row_input(ctx, a->input, &x)))
        return st;
    if (x.shape[1] < 1)
        return ploss_check_shape_error("input", "at least one class (C >= 1 along axis 1)", &x);
    const int64_t C = x.shape[1];

    if ((st = ploss_view_init(&t, a->target, "target")) || (st = ploss_view_check_device(&t, ctx, "target")))
        return st;
    if (t.dtype != PLOSS_I64 && t.dtype != PLOSS_I32)
        return ploss_error(PLOSS_ERR_DTYPE, "target: expected class indices of dtype i64 or i32, got %s",
                           ploss_dtype_name(t.dtype));
    if ((st = ploss_check_sample_shape(&t, &x, "target")))
        return st;

    if (a->alpha && (st = ploss_check_class_vector(ctx, a->alpha, C, "alpha", "factor", &w)))
        return st;

    /* outputs, saved lse, aliasing; the problem with sample dims collapsed to (n, s) */
    const ploss_view *ins[1] = {a->alpha ? &w : NULL};
    const char *in_names[1] = {"alpha"};
    ploss_row_outputs r = {.loss = a->loss, .state = a->lse, .grad_loss = a->grad_loss, .grad = a->grad,
                           .state_name = "lse", .state_k = 1, .grad_shape_plain = 1};
    if ((st = ploss_check_row_outputs(ctx, pass, o->reduction, o->inplace, &x, &t, ins, in_names, 1, &r)))
        return st;
    ploss_sfocal_problem p;
    memset(&p, 0, sizeof p);
    p.pass = pass; p.reduction = o->reduction; p.kind = o->kind; p.N = r.N; p.S = r.S; p.C = r.C;
    p.x = x.data; p.x_dtype = x.dtype; p.x_sn = r.x.sn; p.x_ss = r.x.ss; p.x_sc = r.x.sk;
    p.t = t.data; p.t_dtype = t.dtype; p.t_sn = r.t.sn; p.t_ss = r.t.ss;
    if (a->alpha) {
        p.w = w.data; p.w_dtype = w.dtype; p.w_s = w.strides[0];
    }
    p.gamma = o->gamma;
    p.eps = o->eps;
    p.ignore_index = o->ignore_index;
    p.scale = o->scale;
    p.loss = r.l.v.data; p.loss_dtype = r.l.v.dtype; p.l_sn = r.l.sn; p.l_ss = r.l.ss;
    p.lse = r.st.v.data; p.lse_dtype = r.st.v.dtype; p.lse_sn = r.st.sn; p.lse_ss = r.st.ss;
    p.grad_loss = r.gl.v.data; p.gl_dtype = r.gl.v.dtype; p.gl_sn = r.gl.sn; p.gl_ss = r.gl.ss;
    p.grad = r.g.v.data; p.g_sn = r.g.sn; p.g_ss = r.g.ss; p.g_sc = r.g.sk;

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
