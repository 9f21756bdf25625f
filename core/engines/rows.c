/*
 * rows.c — the one validation front of the rows kernel shape: every loss over the class axis
 * (axis 1) of N×C×d1×…×dk inputs with class-index targets (or, multi-label, a float label per
 * class or a list of classes per row): the softmax-row losses and the direct rows (negative
 * log-likelihood, multi-class margin, multi-label soft margin, multi-label margin).  It
 * checks the tensors of a call against the loss's spec (core/loss.h), before anything is
 * written, builds the problem of the loss's backend (core/engines/rows.h) and dispatches it
 * to the CPU or CUDA.  The loss's options
 * were checked by its entry point (core/losses.c).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dispatch.h"
#include "loss.h"
#include "loss_check.h"
#include "rows.h"
#include "scalar.h"

/* Class priors on the CPU: finite, >= 0, at least one > 0. */
static ploss_status check_priors_cpu(const ploss_view *w, const char *name)
{
    int positive = 0;
    for (int64_t j = 0; j < w->shape[0]; ++j) {
        const double v = ploss_load(w->data, w->dtype, j * w->strides[0]);
        if (!(v >= 0.0) || !isfinite(v))
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                               "%s: the prior %s of class %lld is not a finite number >= 0", name, PLOSS_SHOWN(v),
                               (long long)j);
        positive |= v > 0.0;
    }
    if (!positive && w->shape[0] > 0)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: every prior is 0 (at least one must be > 0)", name);
    return PLOSS_OK;
}

/* The target of a loss with class-index (or probability) targets. */
static ploss_status check_target(ploss_ctx_t *ctx, const ploss_loss_spec *spec, const DLTensor *target,
                                 const ploss_view *x, ploss_view *t, int *probabilities)
{
    ploss_status st;
    if ((st = ploss_view_init(t, target, "target")) || (st = ploss_view_check_device(t, ctx, "target")))
        return st;
    *probabilities = 0;
    if (spec->target == PLOSS_LOSS_TARGET_INDEX_LIST) { /* a list of classes per row: the input's shape */
        if (t->dtype != PLOSS_I64 && t->dtype != PLOSS_I32)
            return ploss_error(PLOSS_ERR_DTYPE, "target: expected class indices (i64 or i32) of the input's shape, "
                               "each row's classes ended by -1, got %s", ploss_dtype_name(t->dtype));
        *probabilities = 1; /* a target of the input's shape: no per-sample label to check */
        return ploss_check_shape_axis1(t, x, -1, "target", " (each row's target classes, then -1: the input's shape)");
    }
    if (spec->target == PLOSS_LOSS_TARGET_ELEMENTWISE) { /* labels of every class: the input's shape */
        /* float labels, or integer 0/1 ones as PyTorch takes them (its formula promotes them) */
        if (!ploss_dtype_is_float(t->dtype) && t->dtype != PLOSS_I64 && t->dtype != PLOSS_I32)
            return ploss_error(PLOSS_ERR_DTYPE, "target: expected labels (0/1 per class) of the input's shape, of dtype "
                               "f32, f16, bf16, f64, i64 or i32, got %s", ploss_dtype_name(t->dtype));
        *probabilities = 1;
        return ploss_check_shape_axis1(t, x, -1, "target", " (a label per class: the input's shape)");
    }
    if (t->dtype == PLOSS_I64 || t->dtype == PLOSS_I32) {
        /* N labels against C×N logits: the input is transposed, not the labels wrong */
        if (x->ndim == 2 && t->ndim == 1 && t->shape[0] != x->shape[0] && t->shape[0] == x->shape[1])
            return ploss_error(PLOSS_ERR_SHAPE,
                               "target: expected shape [%lld] (one label per row of the input), got %s[%lld]: is "
                               "the input transposed? it is rows × classes (%lld × %lld here)",
                               (long long)x->shape[0], ploss_dtype_name(t->dtype), (long long)t->shape[0],
                               (long long)x->shape[0], (long long)x->shape[1]);
        return ploss_check_sample_shape(t, x, "target");
    }
    if (spec->target == PLOSS_LOSS_TARGET_INDEX_OR_PROBABILITIES && ploss_dtype_is_float(t->dtype)) {
        /* float labels of the sample shape are class indices in the wrong dtype, not
         * probabilities: say so rather than ask for the input's shape */
        if (t->ndim == x->ndim - 1 && ploss_check_sample_shape(t, x, "target") == PLOSS_OK)
            return ploss_error(PLOSS_ERR_DTYPE,
                               "target: class indices must be i64 or i32, got %s of the sample shape "
                               "(convert them, e.g. target:long(); probabilities need the input's shape)",
                               ploss_dtype_name(t->dtype));
        *probabilities = 1;
        return ploss_check_shape_axis1(t, x, -1, "target", " (probabilities of the input's shape)");
    }
    if (ploss_dtype_is_float(t->dtype) && t->ndim == x->ndim - 1)
        return ploss_error(PLOSS_ERR_DTYPE,
                           "target: class indices must be i64 or i32, got %s (convert them, e.g. target:long())",
                           ploss_dtype_name(t->dtype));
    /* other integers (u8 label maps): the conversion that reads them */
    const char *hint = ploss_dtype_is_float(t->dtype) ? "" : " (convert them, e.g. target:long())";
    if (spec->target == PLOSS_LOSS_TARGET_INDEX_OR_PROBABILITIES)
        return ploss_error(PLOSS_ERR_DTYPE,
                           "target: expected class indices (i64 or i32) or probabilities (float), got %s%s",
                           ploss_dtype_name(t->dtype), hint);
    return ploss_error(PLOSS_ERR_DTYPE, "target: expected class indices of dtype i64 or i32, got %s%s",
                       ploss_dtype_name(t->dtype), hint);
}

/* The class lists of a multi-label margin target on the CPU: every entry before a row's
 * first negative one in [0, C). */
static ploss_status check_label_lists_cpu(const ploss_view *t, const ploss_row_outputs *r)
{
    for (int64_t n = 0; n < r->N; ++n)
        for (int64_t k = 0; k < r->C; ++k) {
            const int64_t y = ploss_load_int(t->data, t->dtype, n * r->t.sn + k * r->t.sk);
            if (y < 0)
                break;
            if (y >= r->C)
                return ploss_error(PLOSS_ERR_INVALID_LABEL,
                                   "target: class index %lld at (row %lld, position %lld) is outside [0, %lld); "
                                   "0-based, a row's list ends at its first negative entry%s",
                                   (long long)y, (long long)n, (long long)k, (long long)r->C,
                                   y == r->C ? " (Torch7's 1-based lists ended by 0: target - 1, in Lua "
                                               "target:add_(-1), ends them at -1)"
                                             : "");
        }
    return PLOSS_OK;
}

/* The fields every backend problem has (the three structs of rows.h name them alike), from
 * the checked tensors: sizes, input, class-index target, class vector, options the three
 * share, loss, upstream gradient and gradient. */
#define FILL_ROW_PROBLEM(p, pass_, o, x, t, w, r)                                                   \
    do {                                                                                           \
        (p).pass = (pass_); (p).reduction = (o)->reduction;                                        \
        (p).N = (r)->N; (p).S = (r)->S; (p).C = (r)->C;                                            \
        (p).x = (x)->data; (p).x_dtype = (x)->dtype;                                               \
        (p).x_sn = (r)->x.sn; (p).x_ss = (r)->x.ss; (p).x_sc = (r)->x.sk;                          \
        (p).t = (t)->data; (p).t_dtype = (t)->dtype; (p).t_sn = (r)->t.sn; (p).t_ss = (r)->t.ss;   \
        if (w) {                                                                                   \
            (p).w = (w)->data; (p).w_dtype = (w)->dtype; (p).w_s = (w)->strides[0];                \
        }                                                                                          \
        (p).ignore_index = (o)->ignore_index;                                                      \
        (p).scale = (o)->scale;                                                                    \
        (p).loss = (r)->l.v.data; (p).loss_dtype = (r)->l.v.dtype;                                 \
        (p).l_sn = (r)->l.sn; (p).l_ss = (r)->l.ss;                                                \
        (p).grad_loss = (r)->gl.v.data; (p).gl_dtype = (r)->gl.v.dtype;                            \
        (p).gl_sn = (r)->gl.sn; (p).gl_ss = (r)->gl.ss;                                            \
        (p).grad = (r)->g.v.data; (p).g_sn = (r)->g.sn; (p).g_ss = (r)->g.ss; (p).g_sc = (r)->g.sk; \
    } while (0)

static ploss_status cross_entropy(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_params *o, int probabilities,
                                  const ploss_view *x, const ploss_view *t, const ploss_view *w,
                                  const ploss_row_outputs *r)
{
    ploss_ce_problem p;
    memset(&p, 0, sizeof p);
    FILL_ROW_PROBLEM(p, pass, o, x, t, w, r);
    p.target_kind = probabilities ? PLOSS_TARGET_PROB : PLOSS_TARGET_INDEX;
    p.t_sc = r->t.sk;
    ploss_smoothing_coefficients((ploss_smoothing_convention)o->smoothing_convention, o->label_smoothing, r->C,
                                 &p.a, &p.b);
    p.lse = r->st.v.data; p.lse_dtype = r->st.v.dtype; p.lse_sn = r->st.sn; p.lse_ss = r->st.ss;
    return ploss_dispatch(ctx, PLOSS_OP_ROWS_CROSS_ENTROPY, "input", &p);
}

static ploss_status softmax_focal(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                                  const ploss_loss_params *o, const ploss_view *x, const ploss_view *t,
                                  const ploss_view *w, const ploss_row_outputs *r)
{
    ploss_sfocal_problem p;
    memset(&p, 0, sizeof p);
    FILL_ROW_PROBLEM(p, pass, o, x, t, w, r);
    p.kind = spec->policy == PLOSS_POLICY_DUAL_FOCAL ? PLOSS_DUAL_FOCAL : PLOSS_SOFTMAX_FOCAL;
    p.gamma = o->gamma;
    p.eps = o->eps;
    p.lse = r->st.v.data; p.lse_dtype = r->st.v.dtype; p.lse_sn = r->st.sn; p.lse_ss = r->st.ss;
    return ploss_dispatch(ctx, PLOSS_OP_ROWS_SOFTMAX_FOCAL, "input", &p);
}

static ploss_status direct_rows(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                                const ploss_loss_params *o, int64_t ignore_index, const ploss_view *x,
                                const ploss_view *t, const ploss_view *w, const ploss_row_outputs *r)
{
    ploss_direct_problem p;
    memset(&p, 0, sizeof p);
    FILL_ROW_PROBLEM(p, pass, o, x, t, w, r);
    p.kind = spec->policy == PLOSS_POLICY_MULTI_MARGIN               ? PLOSS_DIRECT_MULTI_MARGIN
             : spec->policy == PLOSS_POLICY_MULTILABEL_SOFT_MARGIN ? PLOSS_DIRECT_MULTILABEL_SOFT_MARGIN
             : spec->policy == PLOSS_POLICY_MULTILABEL_MARGIN      ? PLOSS_DIRECT_MULTILABEL_MARGIN
             : spec->policy == PLOSS_POLICY_CLASS_SIMPLEX          ? PLOSS_DIRECT_CLASS_SIMPLEX
                                                                     : PLOSS_DIRECT_NLL;
    p.t_sc = r->t.sk;
    p.ignore_index = ignore_index;
    p.margin = o->margin;
    p.power = o->power;
    return ploss_dispatch(ctx, PLOSS_OP_ROWS_DIRECT, "input", &p);
}

static ploss_status sample_policies(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                                    const ploss_loss_params *o, const ploss_view *x, const ploss_view *t,
                                    const ploss_view *w, const ploss_row_outputs *r)
{
    ploss_sample_problem p;
    memset(&p, 0, sizeof p);
    switch (spec->policy) {
    case PLOSS_POLICY_LARGE_MARGIN: p.loss_kind = PLOSS_SAMPLE_LARGE_MARGIN; break;
    case PLOSS_POLICY_TAYLOR_CE: p.loss_kind = PLOSS_SAMPLE_TAYLOR_CE; break;
    case PLOSS_POLICY_PC_SOFTMAX: p.loss_kind = PLOSS_SAMPLE_PC_SOFTMAX; break;
    case PLOSS_POLICY_OHEM_LARGE_MARGIN: p.loss_kind = PLOSS_SAMPLE_LARGE_MARGIN; p.ohem = 1; break;
    case PLOSS_POLICY_OHEM_CROSS_ENTROPY: p.loss_kind = PLOSS_SAMPLE_CROSS_ENTROPY; p.ohem = 1; break;
    default: return ploss_error(PLOSS_ERR_UNSUPPORTED, "%s: no per-sample policy for this loss", spec->name);
    }
    FILL_ROW_PROBLEM(p, pass, o, x, t, w, r);
    p.lam = o->lam;
    p.order = o->order;
    if (p.ohem) {
        /* scores are compared as f32 keys; τ = −0 is +0 (its sign bit would key above 1) */
        const float tf = (float)o->score_thresh + 0.0f;
        memcpy(&p.thresh_key, &tf, sizeof p.thresh_key);
        p.n_min = o->n_min < 0 ? p.N * p.S / 16 : o->n_min;
    }
    if (r->has_state) {
        p.state = r->st.v.data; p.state_dtype = r->st.v.dtype; p.n_state = spec->state_components;
        p.st_sn = r->st.sn; p.st_ss = r->st.ss; p.st_sk = r->st.sk;
    }
    return ploss_dispatch(ctx, PLOSS_OP_ROWS_SAMPLE_POLICIES, "input", &p);
}

int ploss_rows_computes(ploss_policy policy)
{
    switch (policy) {
    case PLOSS_POLICY_CROSS_ENTROPY: case PLOSS_POLICY_SOFTMAX_FOCAL: case PLOSS_POLICY_DUAL_FOCAL:
    case PLOSS_POLICY_NLL: case PLOSS_POLICY_MULTI_MARGIN: case PLOSS_POLICY_MULTILABEL_SOFT_MARGIN:
    case PLOSS_POLICY_MULTILABEL_MARGIN: case PLOSS_POLICY_CLASS_SIMPLEX: case PLOSS_POLICY_LARGE_MARGIN:
    case PLOSS_POLICY_TAYLOR_CE: case PLOSS_POLICY_PC_SOFTMAX: case PLOSS_POLICY_OHEM_LARGE_MARGIN:
    case PLOSS_POLICY_OHEM_CROSS_ENTROPY:
        return 1;
    default: return 0;
    }
}

static ploss_status rows_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec, const ploss_loss_args *a,
                             const ploss_loss_params *o);

/* A tensor with a leading dim of 1 (its shape and strides kept in the struct). */
typedef struct {
    DLTensor t;
    int64_t shape[PLOSS_MAX_DIMS + 1], strides[PLOSS_MAX_DIMS + 1];
} one_row;

static const DLTensor *as_one_row(const DLTensor *t, one_row *b)
{
    if (!t || t->ndim < 0 || t->ndim >= PLOSS_MAX_DIMS)
        return t; /* left to the checks */
    b->t = *t;
    b->t.ndim = t->ndim + 1;
    b->shape[0] = 1;
    for (int d = 0; d < t->ndim; ++d)
        b->shape[d + 1] = t->shape[d];
    b->t.shape = b->shape;
    if (t->strides) {
        /* the new dim has size 1: any stride reads the same; the row's extent where it is
         * positive and fits (a contiguous tensor stays contiguous), else 1 (the descriptor
         * is checked after this, so no product of its values may overflow here) */
        const int64_t s0 = t->ndim ? t->strides[0] : 1, n0 = t->ndim && t->shape[0] > 1 ? t->shape[0] : 1;
        b->strides[0] = s0 > 0 && s0 <= INT64_MAX / n0 ? s0 * n0 : 1;
        for (int d = 0; d < t->ndim; ++d)
            b->strides[d + 1] = t->strides[d];
        b->t.strides = b->strides;
    }
    return &b->t;
}

/* The tensor `t` (named `name`) of an unbatched call, when given: a valid descriptor of `ndim`
 * dims (with `size` along the one dim), else SHAPE naming the caller's shape and `what`. */
static ploss_status check_one_sample(const DLTensor *t, const char *name, int ndim, int64_t size, const char *what)
{
    if (!t)
        return PLOSS_OK;
    ploss_view v;
    ploss_status st = ploss_view_init(&v, t, name);
    if (st || (v.ndim == ndim && (ndim == 0 || v.shape[0] == size)))
        return st;
    char want[400];
    if (ndim == 0)
        snprintf(want, sizeof want, "a 0-d tensor (%s)", what);
    else
        snprintf(want, sizeof want, "[%lld] (%s)", (long long)size, what);
    return ploss_check_shape_error(name, want, &v);
}

/* PyTorch's unbatched form of a row loss: an input of C classes (one dim) is one sample —
 * a 0-d class index, or a target of C values (probabilities, per-class labels) — and its
 * 'none' loss is 0-d, its state that of one sample (0-d, or its k values).  Every tensor
 * the form reshapes is checked as given first (messages name the caller's shapes), then the
 * call runs as the 1×C batch. */
ploss_status ploss_rows_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec, const ploss_loss_args *a,
                            const ploss_loss_params *o)
{
    if (!a->input || a->input->ndim != 1)
        return rows_run(ctx, pass, spec, a, o);
    ploss_view x;
    /* the input's dtype before the target's shape, as the batched form (labels passed as the
     * input are named as such, not the target that fits them) */
    ploss_status st;
    if ((st = ploss_view_init(&x, a->input, "input")) || (st = ploss_check_logits_dtype(&x)))
        return st;
    const int64_t C = x.shape[0];
    char what[160];
    snprintf(what, sizeof what, "the input is one sample of %lld classes, PyTorch's unbatched form", (long long)C);
    /* PyTorch's multi_margin_loss (and Torch7's MultiMarginCriterion) also take the label of
     * one sample as a [1] target: then the call is the 1×C batch with that target as given,
     * its 'none' loss [1] */
    if (spec->policy == PLOSS_POLICY_MULTI_MARGIN && a->target && a->target->ndim == 1 && a->target->shape &&
        a->target->shape[0] == 1) {
        if ((st = check_one_sample(a->grad_input, "grad_input", 1, C, "the input's shape")))
            return st;
        one_row bi, bg;
        ploss_loss_args b = *a;
        b.input = as_one_row(a->input, &bi);
        b.grad_input = as_one_row(a->grad_input, &bg);
        return rows_run(ctx, pass, spec, &b, o);
    }
    if (a->target) {
        /* class indices (integers) are one 0-d index; every other target C values */
        const int integer = a->target->dtype.code == kDLInt || a->target->dtype.code == kDLUInt;
        const int index = spec->target == PLOSS_LOSS_TARGET_INDEX ||
                          (spec->target == PLOSS_LOSS_TARGET_INDEX_OR_PROBABILITIES && integer);
        char want[240];
        snprintf(want, sizeof want, "%s; %s",
                 index ? "a class index"
                 : spec->target == PLOSS_LOSS_TARGET_INDEX_OR_PROBABILITIES ? "one probability per class"
                                                                            : "one value per class",
                 what);
        if (spec->policy == PLOSS_POLICY_MULTI_MARGIN && index) { /* (the [1] form was taken above) */
            ploss_view t;
            if ((st = ploss_view_init(&t, a->target, "target")))
                return st;
            char both[320];
            snprintf(both, sizeof both, "a 0-d tensor or shape [1] (%s)", want);
            if (t.ndim != 0)
                return ploss_check_shape_error("target", both, &t);
        } else if ((st = check_one_sample(a->target, "target", index ? 0 : 1, C, want)))
            return st;
    }
    const int none = o->reduction == PLOSS_REDUCTION_NONE, k = spec->state_components;
    char state_what[200];
    snprintf(state_what, sizeof state_what, "the state of one sample; %s", what);
    if ((none && (st = check_one_sample(a->loss, "loss", 0, 1, "the 'none' loss of one sample"))) ||
        (none && (st = check_one_sample(a->grad_loss, "grad_loss", 0, 1, "the upstream gradient of one sample"))) ||
        (st = check_one_sample(a->grad_input, "grad_input", 1, C, "the input's shape")) ||
        (st = check_one_sample(a->state, spec->state_name ? spec->state_name : "state", k > 1, k, state_what)))
        return st;
    one_row bi, bt, bl, bs, bgl, bg;
    ploss_loss_args b = *a;
    b.input = as_one_row(a->input, &bi);
    b.target = as_one_row(a->target, &bt);
    b.loss = none ? as_one_row(a->loss, &bl) : a->loss;
    b.state = as_one_row(a->state, &bs);
    b.grad_loss = none ? as_one_row(a->grad_loss, &bgl) : a->grad_loss;
    b.grad_input = as_one_row(a->grad_input, &bg);
    return rows_run(ctx, pass, spec, &b, o);
}

static ploss_status rows_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec, const ploss_loss_args *a,
                             const ploss_loss_params *o)
{
    ploss_status st;
    ploss_view x, t, w;
    /* labels of every class: PyTorch takes the classes along the last axis, ploss's rows along
     * axis 1, so only N×C reads the same (a higher rank would give other numbers without a
     * word) */
    const int rank2 = spec->target == PLOSS_LOSS_TARGET_ELEMENTWISE || spec->target == PLOSS_LOSS_TARGET_INDEX_LIST;
    /* rank 1 (one sample) was taken by ploss_rows_run */
    const char *rank = rank2 ? "N×C (rank 2: PyTorch takes the classes along the last axis, the row losses along "
                               "axis 1; for more dims, move the classes last and view the input as (N·d1·…·dk)×C; "
                               "one sample is a 1×C input or C values)"
                             : "rank >= 1 (C values: one sample, PyTorch's unbatched form; N×C; or N×C×d1×…×dk)";
    if ((st = ploss_check_row_input(ctx, a->input, rank2, rank, &x)))
        return st;
    const int64_t C = x.shape[1];
    if (C < spec->min_classes) {
        char want[200];
        snprintf(want, sizeof want, "at least %lld class%s along axis 1%s%s%s", (long long)spec->min_classes,
                 spec->min_classes == 1 ? "" : "es", spec->min_classes_why ? " (" : "",
                 spec->min_classes_why ? spec->min_classes_why : "", spec->min_classes_why ? ")" : "");
        return ploss_check_shape_error("input", want, &x);
    }
    int probabilities;
    if ((st = check_target(ctx, spec, a->target, &x, &t, &probabilities)))
        return st;
    if (!probabilities && (st = ploss_check_ignore_index_fits(o->ignore_index, t.dtype, "target")))
        return st;
    /* a class to ignore means nothing to probability targets: refused, as PyTorch does,
     * rather than dropped without a word */
    if (spec->target == PLOSS_LOSS_TARGET_INDEX_OR_PROBABILITIES && probabilities && o->ignore_index >= 0)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.ignore_index: %lld is not negative, but the target holds probabilities (no "
                           "labels to ignore); leave it negative (default -100), as PyTorch requires",
                           (long long)o->ignore_index);

    /* the per-class vector (class weights, α or priors), if the loss has one */
    const ploss_view *vec = NULL;
    const char *vec_name = "";
    for (int k = 0; k < spec->ntensors; ++k) {
        const char *name = spec->tensors[k].name;
        if (!a->tensors[k]) /* (a required one was refused by ploss_run_loss) */
            continue;
        if ((st = ploss_check_class_vector(ctx, a->tensors[k], C, name, spec->tensors[k].what, &w)))
            return st;
        if (spec->tensors[k].priors && ctx->device.device_type == kDLCPU && (st = check_priors_cpu(&w, name)))
            return st;
        vec = &w;
        vec_name = name;
    }
    if (spec->policy == PLOSS_POLICY_CROSS_ENTROPY &&
        (st = ploss_check_smoothing((ploss_smoothing_convention)o->smoothing_convention, o->label_smoothing, C)))
        return st;

    /* outputs, saved state, aliasing; the problem with sample dims collapsed to (n, s) */
    const ploss_view *ins[1] = {vec};
    const char *in_names[1] = {vec_name};
    ploss_row_outputs r = {.loss = a->loss, .state = a->state, .grad_loss = a->grad_loss, .grad = a->grad_input,
                           .state_name = spec->state_name ? spec->state_name : "state",
                           .state_k = spec->state_components};
    if ((st = ploss_check_row_outputs(ctx, pass, o->reduction, o->inplace, &x, &t, ins, in_names, 1, &r)))
        return st;
    /* the multi-class margin and class simplex losses ignore no label (PyTorch's and Torch7's
     * have no ignore_index) */
    const int64_t ignore_index =
        spec->policy == PLOSS_POLICY_MULTI_MARGIN || spec->policy == PLOSS_POLICY_CLASS_SIMPLEX ? INT64_MIN
                                                                                               : o->ignore_index;
    if (ctx->device.device_type == kDLCPU && !probabilities &&
        (st = ploss_check_labels_cpu(t.data, t.dtype, r.N, r.S, r.t.sn, r.t.ss, C, ignore_index)))
        return st;
    if (ctx->device.device_type == kDLCPU && spec->target == PLOSS_LOSS_TARGET_INDEX_LIST &&
        (st = check_label_lists_cpu(&t, &r)))
        return st;

    switch (spec->policy) {
    case PLOSS_POLICY_CROSS_ENTROPY:
        return cross_entropy(ctx, pass, o, probabilities, &x, &t, vec, &r);
    case PLOSS_POLICY_SOFTMAX_FOCAL:
    case PLOSS_POLICY_DUAL_FOCAL:
        return softmax_focal(ctx, pass, spec, o, &x, &t, vec, &r);
    case PLOSS_POLICY_NLL:
    case PLOSS_POLICY_MULTI_MARGIN:
    case PLOSS_POLICY_MULTILABEL_SOFT_MARGIN:
    case PLOSS_POLICY_MULTILABEL_MARGIN:
    case PLOSS_POLICY_CLASS_SIMPLEX:
        return direct_rows(ctx, pass, spec, o, ignore_index, &x, &t, vec, &r);
    default:
        return sample_policies(ctx, pass, spec, o, &x, &t, vec, &r);
    }
}
