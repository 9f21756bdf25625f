/*
 * softmax2.c — the one validation path in front of the CPU and CUDA backends of the
 * softmax family II losses with class-index targets: large-margin softmax (LOSSES.md
 * §2.3), Taylor cross-entropy (§2.5), PC-softmax cross-entropy (§2.2), OHEM cross-entropy
 * and OHEM large-margin (§2.7).  Every check runs before any write; the public entry
 * points only translate their options into a `config`.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu/scalar.h"
#include "loss_check.h"
#include "softmax2.h"

/* What one public loss asks of the common validation. */
typedef struct {
    ploss_sm2_loss kind;
    int ohem;
    ploss_reduction reduction;
    int64_t ignore_index;
    double lam;
    int order;
    double scale;
    int inplace;
    double thresh;
    int64_t n_min;   /* < 0: ⌊M/16⌋ */
    int n_state;     /* 0: no state, 1: one per sample (sample-shaped), 3: N×3×d1×…×dk */
    int64_t min_classes;
} sm2_config;

typedef struct {
    const DLTensor *input, *target, *prior, *state, *grad_loss;
    DLTensor *loss, *grad;
} sm2_args;

static ploss_status check_options(ploss_pass pass, const sm2_config *c)
{
    if ((unsigned)c->reduction >= PLOSS_REDUCTION_COUNT)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.reduction: %d is not none (0), mean (1) or sum (2)",
                           (int)c->reduction);
    if (c->kind == PLOSS_SM2_TAYLOR_CE && (c->order < 2 || c->order > 64 || c->order % 2))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.n: %d is not an even Taylor order in [2, 64] (odd orders have real roots)",
                           c->order);
    if (c->kind == PLOSS_SM2_LARGE_MARGIN && !(c->lam >= 0.0 && isfinite(c->lam)))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.lam: %g is not a finite number >= 0", c->lam);
    if (c->ohem && !(c->thresh >= 0.0 && c->thresh <= 1.0))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.score_thresh: %g is outside [0, 1]", c->thresh);
    if (c->ohem && c->n_min < -1)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.n_min: %lld is negative (-1 asks for the default, a 16th of the samples)",
                           (long long)c->n_min);
    if (pass == PLOSS_PASS_FUSED && !isfinite(c->scale))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.scale: %g is not finite", c->scale);
    return PLOSS_OK;
}

/* PC-softmax priors on the CPU: finite, >= 0, at least one > 0 (LOSSES.md §2.2). */
static ploss_status check_priors_cpu(const ploss_view *w)
{
    int positive = 0;
    for (int64_t j = 0; j < w->shape[0]; ++j) {
        const double v = ploss_load(w->data, w->dtype, j * w->strides[0]);
        if (!(v >= 0.0) || !isfinite(v))
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                               "lb_proportion: the prior %g of class %lld is not a finite number >= 0", v,
                               (long long)j);
        positive |= v > 0.0;
    }
    if (!positive && w->shape[0] > 0)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "lb_proportion: every prior is 0 (at least one must be > 0)");
    return PLOSS_OK;
}

static ploss_status run(ploss_ctx_t *ctx, ploss_pass pass, const sm2_args *a, const sm2_config *c)
{
    ploss_status st;
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    if ((st = check_options(pass, c)))
        return st;

    ploss_view x, t, w;
    if ((st = ploss_check_row_input(ctx, a->input, &x)))
        return st;
    const int64_t C = x.shape[1];
    if (C < c->min_classes) {
        char want[160];
        snprintf(want, sizeof want, "at least %lld classes along axis 1%s", (long long)c->min_classes,
                 c->min_classes == 2 ? " (the large-margin regulariser needs a non-target class)" : "");
        return ploss_check_shape_error("input", want, &x);
    }

    if ((st = ploss_view_init(&t, a->target, "target")) || (st = ploss_view_check_device(&t, ctx, "target")))
        return st;
    if (t.dtype != PLOSS_I64 && t.dtype != PLOSS_I32)
        return ploss_error(PLOSS_ERR_DTYPE, "target: expected class indices (i64 or i32), got %s",
                           ploss_dtype_name(t.dtype));
    if ((st = ploss_check_sample_shape(&t, &x, "target")))
        return st;

    if (c->kind == PLOSS_SM2_PC_SOFTMAX) {
        if (!a->prior)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "lb_proportion: tensor is NULL");
        if ((st = ploss_check_class_vector(ctx, a->prior, C, "lb_proportion", "prior", &w)) ||
            (ctx->device.device_type == kDLCPU && (st = check_priors_cpu(&w))))
            return st;
    }
    /* outputs, saved state, aliasing; the problem with sample dims collapsed to (n, s) */
    const ploss_view *ins[1] = {c->kind == PLOSS_SM2_PC_SOFTMAX ? &w : NULL};
    const char *in_names[1] = {"lb_proportion"};
    ploss_row_outputs r = {.loss = a->loss, .state = a->state, .grad_loss = a->grad_loss, .grad = a->grad,
                           .state_name = "state", .state_k = c->n_state};
    if ((st = ploss_check_row_outputs(ctx, pass, c->reduction, c->inplace, &x, &t, ins, in_names, 1, &r)))
        return st;
    ploss_sm2_problem p;
    memset(&p, 0, sizeof p);
    p.pass = pass; p.reduction = c->reduction; p.loss_kind = c->kind; p.N = r.N; p.S = r.S; p.C = r.C;
    p.x = x.data; p.x_dtype = x.dtype; p.x_sn = r.x.sn; p.x_ss = r.x.ss; p.x_sc = r.x.sk;
    p.t = t.data; p.t_dtype = t.dtype; p.t_sn = r.t.sn; p.t_ss = r.t.ss;
    if (c->kind == PLOSS_SM2_PC_SOFTMAX) {
        p.w = w.data; p.w_dtype = w.dtype; p.w_s = w.strides[0];
    }
    p.ignore_index = c->ignore_index;
    p.lam = c->lam;
    p.order = c->order;
    p.scale = c->scale;
    p.ohem = c->ohem;
    if (c->ohem) {
        const float tf = (float)c->thresh; /* scores are compared as f32 keys */
        memcpy(&p.thresh_key, &tf, sizeof p.thresh_key);
        p.n_min = c->n_min < 0 ? p.N * p.S / 16 : c->n_min;
    }
    p.loss = r.l.v.data; p.loss_dtype = r.l.v.dtype; p.l_sn = r.l.sn; p.l_ss = r.l.ss;
    if (r.has_state) {
        p.state = r.st.v.data; p.state_dtype = r.st.v.dtype; p.n_state = c->n_state;
        p.st_sn = r.st.sn; p.st_ss = r.st.ss; p.st_sk = r.st.sk;
    }
    p.grad_loss = r.gl.v.data; p.gl_dtype = r.gl.v.dtype; p.gl_sn = r.gl.sn; p.gl_ss = r.gl.ss;
    p.grad = r.g.v.data; p.g_sn = r.g.sn; p.g_ss = r.g.ss; p.g_sc = r.g.sk;

    if (ctx->device.device_type == kDLCPU) {
        if ((st = ploss_check_labels_cpu(p.t, p.t_dtype, p.N, p.S, p.t_sn, p.t_ss, C, p.ignore_index)))
            return st;
        return ploss_cpu_softmax2(ctx, &p);
    }
#ifdef PLOSS_HAVE_CUDA
    if ((st = ploss_cuda_set_device(ctx->device.device_id)))
        return st;
    return ploss_cuda_softmax2(ctx, &p);
#else
    return ploss_error(PLOSS_ERR_UNSUPPORTED, "input: a CUDA tensor needs a library built with CUDA");
#endif
}

/* ---- large-margin softmax ---------------------------------------------------------- */

void ploss_large_margin_opts_init(ploss_large_margin_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->reduction = PLOSS_REDUCTION_MEAN;
    o->ignore_index = 255;
    o->lam = 0.3;
    o->scale = 1.0;
    o->inplace = 0;
}

static ploss_status large_margin(ploss_ctx_t *ctx, ploss_pass pass, const sm2_args *a,
                                 const ploss_large_margin_opts *user)
{
    ploss_clear_error();
    ploss_large_margin_opts o;
    ploss_large_margin_opts_init(&o);
    if (user)
        o = *user;
    sm2_config c = {PLOSS_SM2_LARGE_MARGIN, 0, o.reduction, o.ignore_index, o.lam, 0, o.scale, o.inplace,
                    0.0, 0, 3, 2};
    return run(ctx, pass, a, &c);
}

ploss_status ploss_large_margin_softmax_forward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                                const ploss_large_margin_opts *opts, DLTensor *loss,
                                                DLTensor *state)
{
    sm2_args a = {input, target, NULL, state, NULL, loss, NULL};
    return large_margin(ctx, PLOSS_PASS_FORWARD, &a, opts);
}

ploss_status ploss_large_margin_softmax_backward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                                 const ploss_large_margin_opts *opts, const DLTensor *state,
                                                 const DLTensor *grad_loss, DLTensor *grad_input)
{
    sm2_args a = {input, target, NULL, state, grad_loss, NULL, grad_input};
    return large_margin(ctx, PLOSS_PASS_BACKWARD, &a, opts);
}

ploss_status ploss_large_margin_softmax_fused(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                              const ploss_large_margin_opts *opts, DLTensor *loss,
                                              DLTensor *grad_input)
{
    sm2_args a = {input, target, NULL, NULL, NULL, loss, grad_input};
    return large_margin(ctx, PLOSS_PASS_FUSED, &a, opts);
}

/* ---- Taylor cross-entropy -------------------------------------------------------------- */

void ploss_taylor_cross_entropy_opts_init(ploss_taylor_cross_entropy_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->reduction = PLOSS_REDUCTION_MEAN;
    o->ignore_index = -1;
    o->n = 2;
    o->scale = 1.0;
    o->inplace = 0;
}

static ploss_status taylor_ce(ploss_ctx_t *ctx, ploss_pass pass, const sm2_args *a,
                              const ploss_taylor_cross_entropy_opts *user)
{
    ploss_clear_error();
    ploss_taylor_cross_entropy_opts o;
    ploss_taylor_cross_entropy_opts_init(&o);
    if (user)
        o = *user;
    sm2_config c = {PLOSS_SM2_TAYLOR_CE, 0, o.reduction, o.ignore_index, 0.0, o.n, o.scale, o.inplace,
                    0.0, 0, 1, 1};
    return run(ctx, pass, a, &c);
}

ploss_status ploss_taylor_cross_entropy_forward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                                const ploss_taylor_cross_entropy_opts *opts, DLTensor *loss,
                                                DLTensor *state)
{
    sm2_args a = {input, target, NULL, state, NULL, loss, NULL};
    return taylor_ce(ctx, PLOSS_PASS_FORWARD, &a, opts);
}

ploss_status ploss_taylor_cross_entropy_backward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                                 const ploss_taylor_cross_entropy_opts *opts, const DLTensor *state,
                                                 const DLTensor *grad_loss, DLTensor *grad_input)
{
    sm2_args a = {input, target, NULL, state, grad_loss, NULL, grad_input};
    return taylor_ce(ctx, PLOSS_PASS_BACKWARD, &a, opts);
}

ploss_status ploss_taylor_cross_entropy_fused(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                              const ploss_taylor_cross_entropy_opts *opts, DLTensor *loss,
                                              DLTensor *grad_input)
{
    sm2_args a = {input, target, NULL, NULL, NULL, loss, grad_input};
    return taylor_ce(ctx, PLOSS_PASS_FUSED, &a, opts);
}

/* ---- PC-softmax cross-entropy ---------------------------------------------------------- */

void ploss_pc_softmax_opts_init(ploss_pc_softmax_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->reduction = PLOSS_REDUCTION_MEAN;
    o->ignore_index = -100;
    o->scale = 1.0;
    o->inplace = 0;
}

static ploss_status pc_softmax(ploss_ctx_t *ctx, ploss_pass pass, const sm2_args *a, const ploss_pc_softmax_opts *user)
{
    ploss_clear_error();
    ploss_pc_softmax_opts o;
    ploss_pc_softmax_opts_init(&o);
    if (user)
        o = *user;
    sm2_config c = {PLOSS_SM2_PC_SOFTMAX, 0, o.reduction, o.ignore_index, 0.0, 0, o.scale, o.inplace, 0.0, 0, 1, 1};
    return run(ctx, pass, a, &c);
}

ploss_status ploss_pc_softmax_cross_entropy_forward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                                    const DLTensor *lb_proportion, const ploss_pc_softmax_opts *opts,
                                                    DLTensor *loss, DLTensor *state)
{
    sm2_args a = {input, target, lb_proportion, state, NULL, loss, NULL};
    return pc_softmax(ctx, PLOSS_PASS_FORWARD, &a, opts);
}

ploss_status ploss_pc_softmax_cross_entropy_backward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                                     const DLTensor *lb_proportion, const ploss_pc_softmax_opts *opts,
                                                     const DLTensor *state, const DLTensor *grad_loss,
                                                     DLTensor *grad_input)
{
    sm2_args a = {input, target, lb_proportion, state, grad_loss, NULL, grad_input};
    return pc_softmax(ctx, PLOSS_PASS_BACKWARD, &a, opts);
}

ploss_status ploss_pc_softmax_cross_entropy_fused(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                                  const DLTensor *lb_proportion, const ploss_pc_softmax_opts *opts,
                                                  DLTensor *loss, DLTensor *grad_input)
{
    sm2_args a = {input, target, lb_proportion, NULL, NULL, loss, grad_input};
    return pc_softmax(ctx, PLOSS_PASS_FUSED, &a, opts);
}

/* ---- OHEM cross-entropy and OHEM large-margin --------------------------------------- */

void ploss_ohem_opts_init(ploss_ohem_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->reduction = PLOSS_REDUCTION_MEAN;
    o->ignore_index = 255;
    o->score_thresh = 0.7;
    o->n_min = -1;
    o->lam = 0.3;
    o->scale = 1.0;
    o->inplace = 0;
}

static ploss_status ohem(ploss_ctx_t *ctx, ploss_pass pass, ploss_sm2_loss kind, const sm2_args *a,
                         const ploss_ohem_opts *user)
{
    ploss_clear_error();
    ploss_ohem_opts o;
    ploss_ohem_opts_init(&o);
    if (user)
        o = *user;
    const int lm = kind == PLOSS_SM2_LARGE_MARGIN;
    sm2_config c = {kind, 1, o.reduction, o.ignore_index, o.lam, 0, o.scale, o.inplace,
                    o.score_thresh, o.n_min, 0, lm ? 2 : 1};
    return run(ctx, pass, a, &c);
}

ploss_status ploss_ohem_cross_entropy_forward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                              const ploss_ohem_opts *opts, DLTensor *loss)
{
    sm2_args a = {input, target, NULL, NULL, NULL, loss, NULL};
    return ohem(ctx, PLOSS_PASS_FORWARD, PLOSS_SM2_CROSS_ENTROPY, &a, opts);
}

ploss_status ploss_ohem_cross_entropy_backward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                               const ploss_ohem_opts *opts, const DLTensor *grad_loss,
                                               DLTensor *grad_input)
{
    sm2_args a = {input, target, NULL, NULL, grad_loss, NULL, grad_input};
    return ohem(ctx, PLOSS_PASS_BACKWARD, PLOSS_SM2_CROSS_ENTROPY, &a, opts);
}

ploss_status ploss_ohem_cross_entropy_fused(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                            const ploss_ohem_opts *opts, DLTensor *loss, DLTensor *grad_input)
{
    sm2_args a = {input, target, NULL, NULL, NULL, loss, grad_input};
    return ohem(ctx, PLOSS_PASS_FUSED, PLOSS_SM2_CROSS_ENTROPY, &a, opts);
}

ploss_status ploss_ohem_large_margin_forward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                             const ploss_ohem_opts *opts, DLTensor *loss)
{
    sm2_args a = {input, target, NULL, NULL, NULL, loss, NULL};
    return ohem(ctx, PLOSS_PASS_FORWARD, PLOSS_SM2_LARGE_MARGIN, &a, opts);
}

ploss_status ploss_ohem_large_margin_backward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                              const ploss_ohem_opts *opts, const DLTensor *grad_loss,
                                              DLTensor *grad_input)
{
    sm2_args a = {input, target, NULL, NULL, grad_loss, NULL, grad_input};
    return ohem(ctx, PLOSS_PASS_BACKWARD, PLOSS_SM2_LARGE_MARGIN, &a, opts);
}

ploss_status ploss_ohem_large_margin_fused(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target,
                                           const ploss_ohem_opts *opts, DLTensor *loss, DLTensor *grad_input)
{
    sm2_args a = {input, target, NULL, NULL, NULL, loss, grad_input};
    return ohem(ctx, PLOSS_PASS_FUSED, PLOSS_SM2_LARGE_MARGIN, &a, opts);
}
