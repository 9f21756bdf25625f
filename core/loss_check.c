/* loss_check.c — validation helpers shared by the loss front ends (see loss_check.h). */
#include <stdio.h>

#include "cpu/scalar.h"
#include "elementwise.h"
#include "loss_check.h"

ploss_status ploss_check_shape_error(const char *name, const char *expect, const ploss_view *got)
{
    char b[200];
    return ploss_error(PLOSS_ERR_SHAPE, "%s: expected %s, got %s", name, expect,
                       ploss_view_describe(got, b, sizeof b));
}

ploss_status ploss_check_collapse(const ploss_view *v, int first, int end, const char *name,
                                  int64_t *stride)
{
    int64_t st = 0, expect = 0;
    int have = 0;
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
            return ploss_error(PLOSS_ERR_LAYOUT,
                               "%s: the strides of dims %d..%d cannot be walked as one axis; pass a "
                               "contiguous or channels-last tensor (:contiguous())",
                               name, first, end - 1);
        }
    }
    *stride = st;
    return PLOSS_OK;
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

ploss_status ploss_check_loss_shape(const ploss_view *v, const ploss_view *x, ploss_reduction r,
                                    const char *name)
{
    if (r == PLOSS_REDUCTION_NONE)
        return ploss_check_sample_shape(v, x, name);
    if (v->numel == 1)
        return PLOSS_OK;
    return ploss_check_shape_error(name, "one element (0-d or [1]) for a reduced loss", v);
}

ploss_status ploss_check_dtype(const ploss_view *v, ploss_dtype want, const char *name)
{
    if (v->dtype == want)
        return PLOSS_OK;
    return ploss_error(PLOSS_ERR_DTYPE, "%s: expected %s, got %s", name, ploss_dtype_name(want),
                       ploss_dtype_name(v->dtype));
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
    if (r == PLOSS_REDUCTION_NONE)
        return ploss_check_input_shape(v, x, name);
    if (v->numel == 1)
        return PLOSS_OK;
    return ploss_check_shape_error(name, "one element (0-d or [1]) for a reduced loss", v);
}

ploss_status ploss_check_broadcast_strides(const ploss_view *v, const ploss_view *x, const char *name,
                                           int64_t st[PLOSS_MAX_DIMS])
{
    for (int d = 0; d < PLOSS_MAX_DIMS; ++d)
        st[d] = 0;
    const int64_t C = x->ndim >= 2 ? x->shape[1] : 1;
    if (v->ndim == x->ndim) {
        int ok = 1;
        for (int d = 0; ok && d < x->ndim; ++d)
            ok = v->shape[d] == x->shape[d] || v->shape[d] == 1;
        if (ok) {
            for (int d = 0; d < x->ndim; ++d)
                st[d] = v->shape[d] == 1 ? 0 : v->strides[d];
            return PLOSS_OK;
        }
    }
    if (v->ndim == 0)
        return PLOSS_OK;
    if (v->ndim == 1 && (v->shape[0] == C || v->shape[0] == 1)) {
        if (x->ndim >= 2 && v->shape[0] != 1)
            st[1] = v->strides[0];
        return PLOSS_OK;
    }
    char s[160], want[400];
    snprintf(want, sizeof want,
             "a vector of length %lld (one value per class along axis 1) or 1, or a tensor of "
             "rank %d whose sizes are 1 or those of the input %s",
             (long long)C, x->ndim, shape_string(x, s, sizeof s));
    return ploss_check_shape_error(name, want, v);
}

ploss_status ploss_check_labels_cpu(const void *t, ploss_dtype dt, int64_t N, int64_t S, int64_t sn,
                                    int64_t ss, int64_t C, int64_t ignore_index)
{
    for (int64_t n = 0; n < (S > 0 ? N : 0); ++n) /* S = 0: no sample (N may be huge) */
        for (int64_t s = 0; s < S; ++s) {
            int64_t y = ploss_load_int(t, dt, n * sn + s * ss);
            if (y != ignore_index && (y < 0 || y >= C))
                return ploss_error(PLOSS_ERR_INVALID_LABEL,
                                   "target: class index %lld at sample (%lld, %lld) is outside [0, %lld) "
                                   "and is not ignore_index (%lld)",
                                   (long long)y, (long long)n, (long long)s, (long long)C,
                                   (long long)ignore_index);
        }
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
