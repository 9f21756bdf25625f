/*
 * elementwise.c — the one validation front of the elementwise kernel shape: losses with one
 * value per element of an input of any shape (binary cross-entropy with logits, sigmoid
 * focal, and PyTorch's pointwise criteria: MSE, L1, smooth L1, Huber, binary cross-entropy
 * on probabilities, soft margin, KL divergence, hinge embedding, Poisson NLL).  It checks the tensors of a call against
 * the loss's spec before anything is written, coalesces the dims the tensors allow to walk
 * as one, and dispatches the problem (core/engines/elementwise.h) to the CPU or CUDA.  The
 * options were checked by the loss's entry point (core/losses.c).
 */
#include <math.h>
#include <string.h>

#include "dispatch.h"
#include "elementwise.h"
#include "loss.h"
#include "loss_check.h"

/* Drop dims of size 1 and merge neighbours that are contiguous in every tensor. */
enum { NT = 7 };
static void collapse_joint(ploss_sigmoid_problem *p, const ploss_view *x, int64_t *const st[NT])
{
    int64_t shape[PLOSS_MAX_DIMS], out[NT][PLOSS_MAX_DIMS];
    int n = 0;
    if (x->numel == 0) {
        p->ndim = 1;
        p->shape[0] = 0;
        for (int k = 0; k < NT; ++k)
            st[k][0] = 0;
        return;
    }
    for (int d = x->ndim - 1; d >= 0; --d) {
        if (x->shape[d] == 1)
            continue;
        int merge = n > 0;
        for (int k = 0; merge && k < NT; ++k)
            merge = st[k][d] == out[k][n - 1] * shape[n - 1];
        if (merge) {
            shape[n - 1] *= x->shape[d];
        } else {
            shape[n] = x->shape[d];
            for (int k = 0; k < NT; ++k)
                out[k][n] = st[k][d];
            ++n;
        }
    }
    if (n == 0) { /* one element */
        shape[0] = 1;
        for (int k = 0; k < NT; ++k)
            out[k][0] = 0;
        n = 1;
    }
    p->ndim = n;
    for (int d = 0; d < n; ++d) {
        p->shape[d] = shape[n - 1 - d];
        for (int k = 0; k < NT; ++k)
            st[k][d] = out[k][n - 1 - d];
    }
    for (int d = n; d < PLOSS_MAX_DIMS; ++d) {
        p->shape[d] = 1;
        for (int k = 0; k < NT; ++k)
            st[k][d] = 0;
    }
}

/* The kind of the problem of a loss's policy (with its options); PLOSS_EW_KIND_COUNT for a
 * policy this engine has no kind for (a loss described but not yet computed here). */
static ploss_sigmoid_kind kind_of(ploss_policy policy, const ploss_loss_params *o)
{
    switch (policy) {
    case PLOSS_POLICY_BCE: return PLOSS_SIGMOID_BCE;
    case PLOSS_POLICY_MSE: return PLOSS_EW_MSE;
    case PLOSS_POLICY_TARGET_WEIGHTED_MSE: return PLOSS_EW_TARGET_WEIGHTED_MSE;
    case PLOSS_POLICY_L1: return PLOSS_EW_L1;
    case PLOSS_POLICY_SMOOTH_L1: return PLOSS_EW_SMOOTH_L1;
    case PLOSS_POLICY_HUBER: return PLOSS_EW_HUBER;
    case PLOSS_POLICY_BINARY_CROSS_ENTROPY: return PLOSS_EW_BCE_PROB;
    case PLOSS_POLICY_SOFT_MARGIN: return PLOSS_EW_SOFT_MARGIN;
    case PLOSS_POLICY_KL_DIV: return o->log_target ? PLOSS_EW_KL_DIV_LOG_TARGET : PLOSS_EW_KL_DIV;
    case PLOSS_POLICY_HINGE_EMBEDDING: return PLOSS_EW_HINGE_EMBEDDING;
    case PLOSS_POLICY_HINGE: return PLOSS_EW_HINGE;
    case PLOSS_POLICY_POISSON_NLL:
        return o->log_input ? (o->full ? PLOSS_EW_POISSON_NLL_LOG_FULL : PLOSS_EW_POISSON_NLL_LOG)
                            : (o->full ? PLOSS_EW_POISSON_NLL_FULL : PLOSS_EW_POISSON_NLL);
    case PLOSS_POLICY_SIGMOID_FOCAL:
        return o->convention == PLOSS_FOCAL_TORCHVISION ? PLOSS_SIGMOID_FOCAL_TORCHVISION
                                                        : PLOSS_SIGMOID_FOCAL_REFERENCE;
    default: return PLOSS_EW_KIND_COUNT;
    }
}

int ploss_elementwise_computes(ploss_policy policy)
{
    const ploss_loss_params defaults = {0};
    return kind_of(policy, &defaults) != PLOSS_EW_KIND_COUNT;
}

ploss_status ploss_elementwise_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                                   const ploss_loss_args *a, const ploss_loss_params *o)
{
    ploss_status st;
    /* the broadcast tensors of the loss (a weight, BCE's pos_weight), by name */
    const DLTensor *weight = NULL, *pos_weight = NULL;
    for (int k = 0; k < spec->ntensors; ++k) {
        if (!strcmp(spec->tensors[k].name, "weight"))
            weight = a->tensors[k];
        else
            pos_weight = a->tensors[k];
    }

    const ploss_sigmoid_kind kind = kind_of(spec->policy, o);
    ploss_view x, t, w, pw, l, gl, g;
    if ((st = ploss_view_init(&x, a->input, "input")) || (st = ploss_view_check_device(&x, ctx, "input")))
        return st;
    if (!ploss_dtype_is_float(x.dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "input: expected %s of dtype f32, f16, bf16 or f64, got %s",
                           PLOSS_EW_IS_POINTWISE(kind) ? "a float tensor" : "logits", ploss_dtype_name(x.dtype));
    const ploss_dtype acc = x.dtype == PLOSS_F64 ? PLOSS_F64 : PLOSS_F32;

    if ((st = ploss_view_init(&t, a->target, "target")) || (st = ploss_view_check_device(&t, ctx, "target")))
        return st;
    /* ±1 labels (the description's target 'signs': soft margin, hinge embedding, hinge) may
     * also be integers, as PyTorch's arithmetic takes them (both backends read a target of
     * any dtype as a float) */
    const int signs = spec->target == PLOSS_LOSS_TARGET_SIGNS;
    if (signs && (st = ploss_check_sign_labels(&t)))
        return st;
    if (!signs && !ploss_dtype_is_float(t.dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "target: expected float targets%s of dtype f32, f16, bf16 or f64, got %s",
                           PLOSS_EW_IS_POINTWISE(kind) ? "" : " (0/1 or soft labels)", ploss_dtype_name(t.dtype));
    if ((st = ploss_check_input_shape(&t, &x, "target")))
        return st;

    int64_t x_st[PLOSS_MAX_DIMS] = {0}, t_st[PLOSS_MAX_DIMS] = {0}, w_st[PLOSS_MAX_DIMS] = {0},
            pw_st[PLOSS_MAX_DIMS] = {0}, l_st[PLOSS_MAX_DIMS] = {0}, gl_st[PLOSS_MAX_DIMS] = {0},
            g_st[PLOSS_MAX_DIMS] = {0};
    for (int d = 0; d < x.ndim; ++d) {
        x_st[d] = x.strides[d];
        t_st[d] = t.strides[d];
    }
    if (weight) {
        if ((st = ploss_view_init(&w, weight, "weight")) || (st = ploss_view_check_device(&w, ctx, "weight")))
            return st;
        if (!ploss_dtype_is_float(w.dtype))
            return ploss_error(PLOSS_ERR_DTYPE, "weight: expected a float dtype, got %s", ploss_dtype_name(w.dtype));
        if ((st = ploss_check_broadcast_strides(&w, &x, "weight", w_st)))
            return st;
    }
    if (pos_weight) {
        if ((st = ploss_view_init(&pw, pos_weight, "pos_weight")) ||
            (st = ploss_view_check_device(&pw, ctx, "pos_weight")))
            return st;
        if (!ploss_dtype_is_float(pw.dtype))
            return ploss_error(PLOSS_ERR_DTYPE, "pos_weight: expected a float dtype, got %s",
                               ploss_dtype_name(pw.dtype));
        if ((st = ploss_check_broadcast_strides(&pw, &x, "pos_weight", pw_st)))
            return st;
    }

    const ploss_input_loss_shape shape = {&x, o->reduction};
    if ((st = ploss_check_loss_tensors(ctx, pass, a->loss, a->grad_loss, acc, ploss_elementwise_loss_shape_check, &shape, &l, &gl)))
        return st;
    if (o->reduction == PLOSS_REDUCTION_NONE)
        for (int d = 0; d < x.ndim; ++d) {
            if (pass != PLOSS_PASS_BACKWARD)
                l_st[d] = l.strides[d];
            else
                gl_st[d] = gl.strides[d];
        }
    if (pass != PLOSS_PASS_FORWARD) {
        if ((st = ploss_check_grad_input(ctx, a->grad_input, &x, &g)))
            return st;
        for (int d = 0; d < x.ndim; ++d)
            g_st[d] = g.strides[d];
    }

    const ploss_view *ins[5] = {&x, &t, weight ? &w : NULL, pos_weight ? &pw : NULL,
                                pass == PLOSS_PASS_BACKWARD ? &gl : NULL};
    const char *in_names[5] = {"input", "target", "weight", "pos_weight", "grad_loss"};
    if ((st = ploss_check_outputs_apart(pass, o->inplace, &l, &g, ins, in_names, 5)))
        return st;

    ploss_sigmoid_problem p;
    memset(&p, 0, sizeof p);
    p.pass = pass;
    /* batchmean is MEAN over the first dim (the sum for a 0-d input, as PyTorch) */
    p.reduction = o->reduction == PLOSS_REDUCTION_BATCHMEAN ? PLOSS_REDUCTION_MEAN : o->reduction;
    p.kind = kind;
    p.a1 = p.a0 = 1.0;
    if (kind == PLOSS_SIGMOID_FOCAL_TORCHVISION || kind == PLOSS_SIGMOID_FOCAL_REFERENCE) {
        p.a1 = o->alpha < 0.0 ? 1.0 : o->alpha;
        p.a0 = o->alpha < 0.0 ? 1.0 : 1.0 - o->alpha;
        p.gamma = o->gamma;
    }
    p.beta = kind == PLOSS_EW_HUBER ? o->delta : kind == PLOSS_EW_HINGE_EMBEDDING || kind == PLOSS_EW_HINGE ? o->margin
           : kind == PLOSS_EW_POISSON_NLL || kind == PLOSS_EW_POISSON_NLL_FULL ? o->eps : o->beta;
    p.numel = x.numel;
    p.mean_divisor = o->reduction != PLOSS_REDUCTION_BATCHMEAN ? x.numel : x.ndim > 0 ? x.shape[0] : 1;
    /* PyTorch's weighted MSE and L1 average over the weights (its weighted Huber loss over
     * the elements) */
    p.weight_mean = weight && p.reduction == PLOSS_REDUCTION_MEAN && (kind == PLOSS_EW_MSE || kind == PLOSS_EW_L1);
    p.x = x.data; p.x_dtype = x.dtype;
    p.t = t.data; p.t_dtype = t.dtype;
    if (weight) {
        p.w = w.data; p.w_dtype = w.dtype;
    }
    if (pos_weight) {
        p.pw = pw.data; p.pw_dtype = pw.dtype;
    }
    p.scale = o->scale;
    if (pass != PLOSS_PASS_BACKWARD) {
        p.loss = l.data; p.loss_dtype = l.dtype;
    }
    if (pass == PLOSS_PASS_BACKWARD) {
        p.grad_loss = gl.data; p.gl_dtype = gl.dtype;
    }
    if (pass != PLOSS_PASS_FORWARD)
        p.grad = g.data;
    int64_t *const sts[NT] = {x_st, t_st, w_st, pw_st, l_st, gl_st, g_st};
    collapse_joint(&p, &x, sts);
    memcpy(p.x_st, x_st, sizeof x_st);
    memcpy(p.t_st, t_st, sizeof t_st);
    memcpy(p.w_st, w_st, sizeof w_st);
    memcpy(p.pw_st, pw_st, sizeof pw_st);
    memcpy(p.l_st, l_st, sizeof l_st);
    memcpy(p.gl_st, gl_st, sizeof gl_st);
    memcpy(p.g_st, g_st, sizeof g_st);

    return ploss_dispatch(ctx, PLOSS_OP_ELEMENTWISE_SIGMOID, "input", &p);
}
