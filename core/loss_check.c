/* loss_check.c — validation helpers shared by the loss front ends (see loss_check.h). */
#include <stdio.h>

#include "scalar.h"
#include "elementwise_space.h"
#include "loss_check.h"

ploss_status ploss_check_shape_error(const char *name, const char *expect, const ploss_view *got)
{
    char b[200];
    return ploss_error(PLOSS_ERR_SHAPE, "%s: expected %s, got %s", name, expect,
                       ploss_view_describe(got, b, sizeof b));
}

/* Dims [first, end) of v as one strided axis: 1 and *stride its stride (0 when every dim is
 * 1; 1 when one of them is 0: an axis without elements is walked by any stride), or 0 when
 * they cannot be walked as one. */
static int collapse_axis(const ploss_view *v, int first, int end, int64_t *stride)
{
    int64_t st = 0, expect = 0;
    int have = 0;
    for (int d = first; d < end; ++d) {
        if (v->shape[d] == 0) {
            *stride = 1;
            return 1;
        }
    }
    for (int d = end - 1; d >= first; --d) {
        if (v->shape[d] == 1)
            continue;
        if (!have) {
            st = v->strides[d];
            expect = st * v->shape[d];
            have = 1;
        } else if (v->strides[d] == expect) {
            expect *= v->shape[d];
        } else {
            return 0;
        }
    }
    *stride = st;
    return 1;
}

ploss_status ploss_check_collapse(const ploss_view *v, int first, int end, const char *name,
                                  int64_t *stride)
{
    if (collapse_axis(v, first, end, stride))
        return PLOSS_OK;
    return ploss_error(PLOSS_ERR_LAYOUT,
                       "%s: the strides of dims %d..%d (0-based; Lua dims %d..%d) cannot be walked as one "
                       "axis; pass a contiguous or channels-last tensor (:contiguous())",
                       name, first, end - 1, first + 1, end);
}

/* "shape [a, b, …]" of x with axis 1 dropped (size < -1), kept (-1) or set to size. */
static void describe_shape(const ploss_view *x, int64_t size, const char *tail, char *want, size_t len)
{
    size_t n = (size_t)snprintf(want, len, "shape [%lld", (long long)(x->ndim ? x->shape[0] : 0));
    for (int d = 1; d < x->ndim && n < len; ++d) {
        if (d == 1 && size < -1)
            continue;
        long long v = d == 1 && size >= 0 ? size : x->shape[d];
        n += (size_t)snprintf(want + n, len - n, ", %lld", v);
    }
    if (n < len)
        snprintf(want + n, len - n, "]%s", tail);
}

ploss_status ploss_check_ignore_index_fits(int64_t ignore_index, ploss_dtype label_dtype, const char *labels)
{
    /* INT64_MIN stands for "no ignore_index" inside the engines (every label a class) */
    if (ignore_index == INT64_MIN)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.ignore_index: %lld (INT64_MIN) is reserved: the engines take it for no "
                           "ignore_index (every %s value a class); choose another value",
                           (long long)ignore_index, labels);
    if (label_dtype == PLOSS_I32 && (ignore_index < INT32_MIN || ignore_index > INT32_MAX))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.ignore_index: %lld is outside the range of the i32 %s, which can never equal it "
                           "(nothing would be ignored)",
                           (long long)ignore_index, labels);
    return PLOSS_OK;
}

ploss_status ploss_check_sample_shape(const ploss_view *v, const ploss_view *x, const char *name)
{
    int ok = v->ndim == x->ndim - 1 && v->shape[0] == x->shape[0];
    for (int d = 2; ok && d < x->ndim; ++d)
        ok = v->shape[d - 1] == x->shape[d];
    if (ok)
        return PLOSS_OK;
    char want[240];
    describe_shape(x, -2, " (the input's shape without the class axis)", want, sizeof want);
    return ploss_check_shape_error(name, want, v);
}

ploss_status ploss_check_shape_axis1(const ploss_view *v, const ploss_view *x, int64_t size,
                                     const char *name, const char *what)
{
    int ok = v->ndim == x->ndim;
    for (int d = 0; ok && d < x->ndim; ++d)
        ok = v->shape[d] == (d == 1 && size >= 0 ? size : x->shape[d]);
    if (ok)
        return PLOSS_OK;
    char want[240];
    describe_shape(x, size < 0 ? -1 : size, what, want, sizeof want);
    return ploss_check_shape_error(name, want, v);
}

/* A reduced (MEAN/SUM) loss or upstream gradient: one element. */
static ploss_status check_reduced_loss(const ploss_view *v, const char *name)
{
    if (v->numel == 1)
        return PLOSS_OK;
    return ploss_check_shape_error(name, "one element (0-d or [1]) for a reduced loss", v);
}

ploss_status ploss_check_inplace_request(const ploss_view *grad, const ploss_view *x)
{
    if (ploss_view_same(grad, x))
        return PLOSS_OK;
    return ploss_error(PLOSS_ERR_ALIAS, "grad_input: opts.inplace asks for the gradient over the input, but "
                                        "grad_input is not the input tensor (same data, shape and strides)");
}

ploss_status ploss_check_loss_shape(const ploss_view *v, const ploss_view *x, ploss_reduction r,
                                    const char *name)
{
    return r == PLOSS_REDUCTION_NONE ? ploss_check_sample_shape(v, x, name) : check_reduced_loss(v, name);
}

ploss_status ploss_check_row_loss_shape(const ploss_view *v, int64_t N, ploss_reduction r, const char *name)
{
    char want[64];
    if (r == PLOSS_REDUCTION_NONE) {
        if (v->ndim == 1 && v->shape[0] == N)
            return PLOSS_OK;
        snprintf(want, sizeof want, "[%lld] (one value per sample, reduction none)", (long long)N);
        return ploss_check_shape_error(name, want, v);
    }
    if (v->numel == 1 && v->ndim <= 1)
        return PLOSS_OK;
    return ploss_check_shape_error(name, "a 0-d tensor or shape [1] (reduction mean or sum)", v);
}

ploss_status ploss_row_loss_shape_check(const ploss_view *v, const void *arg, const char *name)
{
    const ploss_row_loss_shape *a = arg;
    return ploss_check_row_loss_shape(v, a->N, a->reduction, name);
}

ploss_status ploss_sample_loss_shape_check(const ploss_view *v, const void *arg, const char *name)
{
    const ploss_input_loss_shape *a = arg;
    return ploss_check_loss_shape(v, a->x, a->reduction, name);
}

ploss_status ploss_elementwise_loss_shape_check(const ploss_view *v, const void *arg, const char *name)
{
    const ploss_input_loss_shape *a = arg;
    return ploss_check_elementwise_loss_shape(v, a->x, a->reduction, name);
}

ploss_status ploss_check_loss_tensors(ploss_ctx_t *ctx, ploss_pass pass, const DLTensor *loss, const DLTensor *grad_loss,
                                      ploss_dtype acc, ploss_loss_shape_check shape, const void *arg, ploss_view *l,
                                      ploss_view *gl)
{
    ploss_status st;
    if (pass != PLOSS_PASS_BACKWARD) {
        if (!loss)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "loss: tensor is NULL");
        if ((st = ploss_view_init(l, loss, "loss")) || (st = ploss_view_check_device(l, ctx, "loss")) ||
            (st = ploss_check_dtype(l, acc, "loss")) || (st = shape(l, arg, "loss")) ||
            (st = ploss_view_check_writable(l, "loss")))
            return st;
        return PLOSS_OK;
    }
    if (!grad_loss)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "grad_loss: tensor is NULL");
    if ((st = ploss_view_init(gl, grad_loss, "grad_loss")) || (st = ploss_view_check_device(gl, ctx, "grad_loss")) ||
        (st = shape(gl, arg, "grad_loss")))
        return st;
    if (gl->dtype != PLOSS_F32 && gl->dtype != PLOSS_F64)
        return ploss_error(PLOSS_ERR_DTYPE, "grad_loss: expected f32 or f64, got %s", ploss_dtype_name(gl->dtype));
    return PLOSS_OK;
}

ploss_status ploss_check_dtype(const ploss_view *v, ploss_dtype want, const char *name)
{
    if (v->dtype == want)
        return PLOSS_OK;
    return ploss_error(PLOSS_ERR_DTYPE, "%s: expected %s, got %s", name, ploss_dtype_name(want),
                       ploss_dtype_name(v->dtype));
}

ploss_status ploss_check_sign_labels(const ploss_view *t)
{
    if (ploss_dtype_is_float(t->dtype) || t->dtype == PLOSS_I64 || t->dtype == PLOSS_I32)
        return PLOSS_OK;
    return ploss_error(PLOSS_ERR_DTYPE, "target: expected ±1 labels of dtype f32, f16, bf16, f64, i64 or i32, got %s",
                       ploss_dtype_name(t->dtype));
}

ploss_status ploss_check_aliasing(const ploss_view *const *outs, const char *const *out_names, int nouts,
                                  const ploss_view *const *ins, const char *const *in_names, int nins,
                                  int inplace_out, int inplace_in)
{
    ploss_status st;
    for (int i = 0; i < nouts; ++i) {
        if (!outs[i])
            continue;
        for (int j = 0; j < nins; ++j) {
            if (!ins[j])
                continue;
            if (i == inplace_out && j == inplace_in && ploss_view_same(outs[i], ins[j]))
                continue;
            if ((st = ploss_check_no_alias(outs[i], out_names[i], ins[j], in_names[j])))
                return st;
        }
        for (int k = i + 1; k < nouts; ++k)
            if (outs[k] && (st = ploss_check_no_alias(outs[i], out_names[i], outs[k], out_names[k])))
                return st;
    }
    return PLOSS_OK;
}

ploss_status ploss_check_grad_input(ploss_ctx_t *ctx, const DLTensor *grad, const ploss_view *x, ploss_view *g)
{
    ploss_status st;
    if (!grad)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "grad_input: tensor is NULL");
    if ((st = ploss_view_init(g, grad, "grad_input")) || (st = ploss_view_check_device(g, ctx, "grad_input")) ||
        (st = ploss_check_dtype(g, x->dtype, "grad_input")) || (st = ploss_check_input_shape(g, x, "grad_input")))
        return st;
    return ploss_view_check_writable(g, "grad_input");
}

ploss_status ploss_check_outputs_apart(ploss_pass pass, int inplace, const ploss_view *l, const ploss_view *g,
                                       const ploss_view *const *ins, const char *const *in_names, int nins)
{
    const ploss_view *outs[2] = {pass != PLOSS_PASS_BACKWARD ? l : NULL, pass != PLOSS_PASS_FORWARD ? g : NULL};
    const char *out_names[2] = {"loss", "grad_input"};
    inplace = inplace && pass == PLOSS_PASS_FUSED;
    ploss_status st = ploss_check_aliasing(outs, out_names, 2, ins, in_names, nins, inplace ? 1 : -1, inplace ? 0 : -1);
    if (st == PLOSS_OK && inplace)
        st = ploss_check_inplace_request(g, ins[0]);
    return st;
}

/* "[2, 3, 4]" into buf. */
static const char *shape_string(const ploss_view *v, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < v->ndim && n < len; ++d)
        n += (size_t)snprintf(buf + n, len - n, d ? ", %lld" : "%lld", (long long)v->shape[d]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
    return buf;
}

ploss_status ploss_check_input_shape(const ploss_view *v, const ploss_view *x, const char *name)
{
    if (ploss_same_shape(v, x))
        return PLOSS_OK;
    char s[160], want[200];
    snprintf(want, sizeof want, "the input's shape %s", shape_string(x, s, sizeof s));
    return ploss_check_shape_error(name, want, v);
}

ploss_status ploss_check_elementwise_loss_shape(const ploss_view *v, const ploss_view *x, ploss_reduction r,
                                                const char *name)
{
    return r == PLOSS_REDUCTION_NONE ? ploss_check_input_shape(v, x, name) : check_reduced_loss(v, name);
}

/* "[n, 1, …, 1]" (`ones` ones) into buf. */
static const char *class_shape(int64_t n, int ones, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "[%lld", (long long)n);
    for (int d = 0; d < ones && k < len; ++d)
        k += (size_t)snprintf(buf + k, len - k, ", 1");
    if (k < len)
        snprintf(buf + k, len - k, "]");
    return buf;
}

int ploss_broadcast_strides(const ploss_view *v, const ploss_view *x, int64_t st[PLOSS_MAX_DIMS])
{
    const int r = x->ndim, lead = x->ndim - v->ndim;
    int ok = lead >= 0;
    for (int d = 0; ok && d < v->ndim; ++d)
        ok = v->shape[d] == 1 || v->shape[d] == x->shape[lead + d];
    for (int d = 0; d < PLOSS_MAX_DIMS; ++d)
        st[d] = ok && d >= lead && d < r && v->shape[d - lead] != 1 ? v->strides[d - lead] : 0;
    return ok;
}

ploss_status ploss_check_broadcast_strides(const ploss_view *v, const ploss_view *x, const char *name,
                                           int64_t st[PLOSS_MAX_DIMS])
{
    for (int d = 0; d < PLOSS_MAX_DIMS; ++d)
        st[d] = 0;
    char s[160], c[120], want[480];
    const int r = x->ndim;
    /* ploss's class vector: C values along axis 1 of an N×C×d1×…×dk input, where PyTorch's
     * broadcasting (along the last axis) has no reading; refused where it has another */
    if (r > 2 && v->ndim == 1 && v->shape[0] == x->shape[1] && v->shape[0] != 1) {
        if (v->shape[0] == x->shape[r - 1])
            return ploss_error(PLOSS_ERR_SHAPE,
                               "%s: a vector of length %lld over the input %s has two readings: one value "
                               "per class along axis 1 (0-based; Lua dim 2), ploss's convention, or one "
                               "along the last axis %d (0-based; Lua dim %d), PyTorch's broadcasting; pass "
                               "shape %s for the class axis or [1, %lld] for the last axis",
                               name, (long long)v->shape[0], shape_string(x, s, sizeof s), r - 1, r,
                               class_shape(v->shape[0], r - 2, c, sizeof c), (long long)v->shape[0]);
        st[1] = v->strides[0];
        return PLOSS_OK;
    }
    if (ploss_broadcast_strides(v, x, st))
        return PLOSS_OK;
    int n = snprintf(want, sizeof want,
                     "a shape that broadcasts over the input %s as in PyTorch (rank at most %d, its dims "
                     "aligned with the input's last ones, each of size 1 or the input's)",
                     shape_string(x, s, sizeof s), r);
    if (r > 2 && x->shape[1] != 1 && x->shape[1] != x->shape[r - 1] && n > 0 && (size_t)n < sizeof want)
        snprintf(want + n, sizeof want - (size_t)n,
                 " or a vector of length %lld (one value per class along axis 1, 0-based; Lua dim 2)",
                 (long long)x->shape[1]);
    return ploss_check_shape_error(name, want, v);
}

ploss_status ploss_check_logits_dtype(const ploss_view *x)
{
    if (!ploss_dtype_is_float(x->dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "input: expected logits of dtype f32, f16, bf16 or f64, got %s",
                           ploss_dtype_name(x->dtype));
    return PLOSS_OK;
}

ploss_status ploss_check_row_input(ploss_ctx_t *ctx, const DLTensor *input, int rank2, const char *rank_want,
                                   ploss_view *x)
{
    ploss_status st;
    if ((st = ploss_view_init(x, input, "input")) || (st = ploss_view_check_device(x, ctx, "input")) ||
        (st = ploss_check_logits_dtype(x)))
        return st;
    if (rank2 ? x->ndim != 2 : x->ndim < 2)
        return ploss_check_shape_error("input", rank_want, x);
    return PLOSS_OK;
}

ploss_status ploss_check_class_vector(ploss_ctx_t *ctx, const DLTensor *t, int64_t C, const char *name,
                                      const char *what, ploss_view *v)
{
    ploss_status st;
    if ((st = ploss_view_init(v, t, name)) || (st = ploss_view_check_device(v, ctx, name)))
        return st;
    if (!ploss_dtype_is_float(v->dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "%s: expected a float dtype, got %s", name, ploss_dtype_name(v->dtype));
    if (v->ndim != 1 || v->shape[0] != C) {
        char want[96];
        snprintf(want, sizeof want, "shape [%lld] (one %s per class)", (long long)C, what);
        return ploss_check_shape_error(name, want, v);
    }
    return PLOSS_OK;
}

/* The view v of `name` walked by sample: dims 1.. collapsed, or axis 1 kept as k and dims 2..
 * collapsed (axis1).  LAYOUT error saying what the row losses accept when d1…dk are not one
 * strided axis. */
static ploss_status collapse_rows(const ploss_view *v, int axis1, const char *name, ploss_row_tensor *r)
{
    r->v = *v;
    r->sn = v->strides[0];
    r->sk = axis1 ? v->strides[1] : 0;
    const int first = axis1 ? 2 : 1;
    if (collapse_axis(v, first, v->ndim, &r->ss))
        return PLOSS_OK;
    return ploss_error(PLOSS_ERR_LAYOUT,
                       "%s: the sample dims d1…dk (Lua dims %d..%d; 0-based %d..%d) cannot be walked as one "
                       "strided axis, as the row losses need: %s may have any strides, but each d_i's "
                       "stride must equal d_(i+1)'s stride times d_(i+1)'s size (dims of size 1 skipped), "
                       "as in a contiguous or channels-last tensor; a crop of d2…dk (:narrow) or a "
                       "permutation of d1…dk is not: call :contiguous() on it",
                       name, first + 1, v->ndim, first, v->ndim - 1, axis1 ? "N and C" : "N");
}

/* A loss-shaped tensor (loss, grad_loss): walked by sample for NONE, its view only else. */
static ploss_status collapse_loss(const ploss_view *v, ploss_reduction r, const char *name, ploss_row_tensor *out)
{
    if (r == PLOSS_REDUCTION_NONE)
        return collapse_rows(v, 0, name, out);
    out->v = *v;
    return PLOSS_OK;
}

/* The saved state o->state (given, state_k > 0) into s: see ploss_check_row_outputs. */
static ploss_status check_row_state(ploss_ctx_t *ctx, ploss_pass pass, const ploss_view *x,
                                    const ploss_row_outputs *o, ploss_view *s)
{
    const char *name = o->state_name;
    ploss_status st;
    if ((st = ploss_view_init(s, o->state, name)) || (st = ploss_view_check_device(s, ctx, name)))
        return st;
    /* f64 whatever the input: a state rounded to f32 would make backward differ from the
     * fused pass (a confident sample's gradient p_y − 1 cancels) */
    if (s->dtype != PLOSS_F32 && s->dtype != PLOSS_F64)
        return ploss_error(PLOSS_ERR_DTYPE, "%s: expected f64 (or f32), got %s", name, ploss_dtype_name(s->dtype));
    st = o->state_k == 1 ? ploss_check_sample_shape(s, x, name)
                         : ploss_check_shape_axis1(s, x, o->state_k, name,
                                                   " (the input's shape with the state components on axis 1)");
    if (st)
        return st;
    return pass == PLOSS_PASS_FORWARD ? ploss_view_check_writable(s, name) : PLOSS_OK;
}

/* grad_input (backward, fused) into g: see ploss_check_row_outputs. */
static ploss_status check_row_grad(ploss_ctx_t *ctx, const ploss_view *x, const ploss_row_outputs *o,
                                   ploss_view *g)
{
    ploss_status st;
    if (!o->grad)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "grad_input: tensor is NULL");
    if ((st = ploss_view_init(g, o->grad, "grad_input")) || (st = ploss_view_check_device(g, ctx, "grad_input")) ||
        (st = ploss_check_dtype(g, x->dtype, "grad_input")))
        return st;
    if (o->grad_shape_plain && !ploss_same_shape(g, x))
        return ploss_check_shape_error("grad_input", "the input's shape", g);
    if ((st = ploss_check_shape_axis1(g, x, -1, "grad_input", " (the input's shape)")))
        return st;
    return ploss_view_check_writable(g, "grad_input");
}

ploss_status ploss_check_row_outputs(ploss_ctx_t *ctx, ploss_pass pass, ploss_reduction r, int inplace,
                                     const ploss_view *x, const ploss_view *t, const ploss_view *const *ins,
                                     const char *const *in_names, int nins, ploss_row_outputs *o)
{
    enum { MAX_INS = 8 };
    if (nins < 0 || nins > MAX_INS - 4) /* a caller's bug */
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ploss_check_row_outputs: %d named inputs (at most %d)",
                           nins, MAX_INS - 4);
    const ploss_dtype acc = x->dtype == PLOSS_F64 ? PLOSS_F64 : PLOSS_F32;
    const int fwd = pass != PLOSS_PASS_BACKWARD, bwd = pass != PLOSS_PASS_FORWARD;
    ploss_view l, s, gl, g;
    ploss_status st;

    /* the loss before the state, the state before the upstream gradient */
    const ploss_input_loss_shape shape = {x, r};
    if (fwd && (st = ploss_check_loss_tensors(ctx, pass, o->loss, o->grad_loss, acc, ploss_sample_loss_shape_check, &shape,
                                              &l, &gl)))
        return st;
    o->has_state = o->state && o->state_k > 0;
    if (o->has_state && (st = check_row_state(ctx, pass, x, o, &s)))
        return st;
    if (pass == PLOSS_PASS_BACKWARD && (st = ploss_check_loss_tensors(ctx, pass, o->loss, o->grad_loss, acc,
                                                                      ploss_sample_loss_shape_check, &shape, &l, &gl)))
        return st;
    if (bwd && (st = check_row_grad(ctx, x, o, &g)))
        return st;

    /* aliasing: outputs may not overlap inputs or each other, bar the in-place gradient */
    const ploss_view *in[MAX_INS] = {x, t};
    const char *in_name[MAX_INS] = {"input", "target"};
    for (int i = 0; i < nins; ++i) {
        in[2 + i] = ins[i];
        in_name[2 + i] = in_names[i];
    }
    in[2 + nins] = pass == PLOSS_PASS_BACKWARD ? &gl : NULL;
    in_name[2 + nins] = "grad_loss";
    in[3 + nins] = o->has_state && pass == PLOSS_PASS_BACKWARD ? &s : NULL;
    in_name[3 + nins] = o->state_name;
    const ploss_view *out[3] = {fwd ? &l : NULL, bwd ? &g : NULL,
                                o->has_state && pass == PLOSS_PASS_FORWARD ? &s : NULL};
    const char *out_name[3] = {"loss", "grad_input", o->state_name};
    const int in_place = pass == PLOSS_PASS_FUSED && inplace;
    if ((st = ploss_check_aliasing(out, out_name, 3, in, in_name, 4 + nins, in_place ? 1 : -1, 0)))
        return st;
    if (in_place && (st = ploss_check_inplace_request(&g, x)))
        return st;

    /* samples (n, s) with the dims d1…dk collapsed */
    o->N = x->shape[0];
    o->C = x->shape[1];
    o->S = 1;
    for (int d = 2; d < x->ndim; ++d)
        o->S *= x->shape[d];
    if ((st = collapse_rows(x, 1, "input", &o->x)) || (st = collapse_rows(t, t->ndim == x->ndim, "target", &o->t)) ||
        (fwd && (st = collapse_loss(&l, r, "loss", &o->l))) ||
        (o->has_state && (st = collapse_rows(&s, o->state_k > 1, o->state_name, &o->st))) ||
        (pass == PLOSS_PASS_BACKWARD && (st = collapse_loss(&gl, r, "grad_loss", &o->gl))) ||
        (bwd && (st = collapse_rows(&g, 1, "grad_input", &o->g))))
        return st;
    return PLOSS_OK;
}

ploss_status ploss_check_labels_cpu(const void *t, ploss_dtype dt, int64_t N, int64_t S, int64_t sn,
                                    int64_t ss, int64_t C, int64_t ignore_index)
{
    for (int64_t n = 0; n < (S > 0 ? N : 0); ++n) /* S = 0: no sample (N may be huge) */
        for (int64_t s = 0; s < S; ++s) {
            int64_t y = ploss_load_int(t, dt, n * sn + s * ss);
            /* ignore_index INT64_MIN: a loss without one, whose every label must be a class */
            if ((y != ignore_index || ignore_index == INT64_MIN) && (y < 0 || y >= C)) {
                char ign[64] = "";
                if (ignore_index != INT64_MIN)
                    snprintf(ign, sizeof ign, " and is not ignore_index (%lld)", (long long)ignore_index);
                return ploss_error(PLOSS_ERR_INVALID_LABEL,
                                   "target: class index %lld at sample (n = %lld, s = %lld) is outside [0, %lld)%s; "
                                   "n and s are 0-based, s counting the positions d1⋯dk in row-major order%s",
                                   (long long)y, (long long)n, (long long)s, (long long)C, ign,
                                   y == C ? PLOSS_ONE_BASED_HINT : "");
            }
        }
    return PLOSS_OK;
}

ploss_status ploss_check_smoothing(ploss_smoothing_convention conv, double eps, int64_t C)
{
    if ((unsigned)conv >= PLOSS_SMOOTHING_CONVENTION_COUNT)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.smoothing_convention: %d is not pytorch (0), reference (1) or "
                           "uniform_others (2)",
                           (int)conv);
    if (!(eps >= 0.0 && eps <= 1.0))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.label_smoothing: %s is not a finite number in [0, 1]", PLOSS_SHOWN(eps));
    if (conv == PLOSS_SMOOTHING_UNIFORM_OTHERS && C == 1 && eps > 0)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.smoothing_convention: uniform_others (ε/(C−1)) is undefined for C = 1");
    return PLOSS_OK;
}

void ploss_smoothing_coefficients(ploss_smoothing_convention conv, double eps, int64_t C, double *a,
                                  double *b)
{
    switch (conv) {
    case PLOSS_SMOOTHING_PYTORCH: *a = 1.0 - eps; *b = eps / (double)C; break;
    case PLOSS_SMOOTHING_REFERENCE: *a = 1.0 - eps - eps / (double)C; *b = eps / (double)C; break;
    default:
        *b = C > 1 ? eps / (double)(C - 1) : 0.0;
        *a = 1.0 - eps - *b;
        break;
    }
}

ploss_status ploss_check_no_inplace(const char *loss_name, int inplace)
{
    if (!inplace)
        return PLOSS_OK;
    return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                       "opts.inplace: %s has no in-place gradient (its gradients go to buffers of their own)",
                       loss_name);
}
