/*
 * cross_entropy.c — the one validation path in front of the CPU and CUDA backends of the
 * softmax cross-entropy family (LOSSES.md §2.1).  Every check runs before any write.
 */
#include <math.h>
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
    if ((st = ploss_check_smoothing(o.smoothing_convention, o.label_smoothing, -1)))
        return st;
    if (pass == PLOSS_PASS_FUSED && !isfinite(o.scale))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.scale: %g is not finite", o.scale);

    ploss_view x, t, w;
    if ((st = ploss_check_row_input(ctx, a->input, &x)))
        return st;
    if (x.shape[1] < 1)
        return ploss_check_shape_error("input", "at least one class (C >= 1 along axis 1)", &x);

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
    if (a->weight && (st = ploss_check_class_vector(ctx, a->weight, C, "weight", "weight", &w)))
        return st;
    if ((st = ploss_check_smoothing(o.smoothing_convention, o.label_smoothing, C)))
        return st;

    /* outputs, saved lse, aliasing; the problem with sample dims collapsed to (n, s) */
    const ploss_view *ins[1] = {a->weight ? &w : NULL};
    const char *in_names[1] = {"weight"};
    ploss_row_outputs r = {.loss = a->loss, .state = a->lse, .grad_loss = a->grad_loss, .grad = a->grad,
                           .state_name = "lse", .state_k = 1};
    if ((st = ploss_check_row_outputs(ctx, pass, o.reduction, o.inplace, &x, &t, ins, in_names, 1, &r)))
        return st;
    ploss_ce_problem p;
    memset(&p, 0, sizeof p);
    p.pass = pass; p.reduction = o.reduction; p.target_kind = kind; p.N = r.N; p.S = r.S; p.C = r.C;
    p.x = x.data; p.x_dtype = x.dtype; p.x_sn = r.x.sn; p.x_ss = r.x.ss; p.x_sc = r.x.sk;
    p.t = t.data; p.t_dtype = t.dtype; p.t_sn = r.t.sn; p.t_ss = r.t.ss; p.t_sc = r.t.sk;
    if (a->weight) {
        p.w = w.data; p.w_dtype = w.dtype; p.w_s = w.strides[0];
    }
    ploss_smoothing_coefficients(o.smoothing_convention, o.label_smoothing, C, &p.a, &p.b);
    p.ignore_index = o.ignore_index;
    p.scale = o.scale;
    p.loss = r.l.v.data; p.loss_dtype = r.l.v.dtype; p.l_sn = r.l.sn; p.l_ss = r.l.ss;
    p.lse = r.st.v.data; p.lse_dtype = r.st.v.dtype; p.lse_sn = r.st.sn; p.lse_ss = r.st.ss;
    p.grad_loss = r.gl.v.data; p.gl_dtype = r.gl.v.dtype; p.gl_sn = r.gl.sn; p.gl_ss = r.gl.ss;
    p.grad = r.g.v.data; p.g_sn = r.g.sn; p.g_ss = r.g.ss; p.g_sc = r.g.sk;

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
