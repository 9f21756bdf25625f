/*
 * one_hot.c — the one validation path in front of the CPU and CUDA backends of
 * ploss_one_hot.  Every check runs before any write.
 */
#include <string.h>

#include "dispatch.h"
#include "loss_check.h"
#include "one_hot.h"

void ploss_one_hot_opts_init(ploss_one_hot_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->ignore_index = -1;
    o->label_smoothing = 0.0;
    o->smoothing_convention = PLOSS_SMOOTHING_PYTORCH;
    o->opts_tag = PLOSS_OPTS_TAG;
}

ploss_status ploss_one_hot(ploss_ctx_t *ctx, const DLTensor *target, const ploss_one_hot_opts *opts,
                           DLTensor *out)
{
    ploss_clear_error();
    ploss_one_hot_opts o;
    ploss_one_hot_opts_init(&o);
    if (opts)
        o = *opts;
    if (o.opts_tag != PLOSS_OPTS_TAG)
        return ploss_opts_tag_error(o.opts_tag, "ploss_one_hot_opts_init");
    ploss_status st;
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    if ((st = ploss_check_smoothing(o.smoothing_convention, o.label_smoothing, -1)))
        return st;

    ploss_view t, v;
    if ((st = ploss_view_init(&t, target, "target")) || (st = ploss_view_check_device(&t, ctx, "target")))
        return st;
    if (t.dtype != PLOSS_I64 && t.dtype != PLOSS_I32)
        return ploss_error(PLOSS_ERR_DTYPE, "target: expected class indices (i64 or i32), got %s",
                           ploss_dtype_name(t.dtype));
    if (t.ndim < 1)
        return ploss_check_shape_error("target", "rank >= 1 (N or N×d1×…×dk)", &t);
    if ((st = ploss_check_ignore_index_fits(o.ignore_index, t.dtype, "target")))
        return st;
    if ((st = ploss_view_init(&v, out, "out")) || (st = ploss_view_check_device(&v, ctx, "out")))
        return st;
    if (v.ndim != t.ndim + 1 || v.shape[0] != t.shape[0] || v.shape[1] < 1)
        return ploss_check_shape_error("out", "rank of the target + 1 with C >= 1 classes on axis 1 "
                                              "(N×C×d1×…×dk)", &v);
    if ((st = ploss_check_sample_shape(&t, &v, "target")))
        return st;
    const int64_t C = v.shape[1];
    if (!ploss_dtype_is_float(v.dtype) && o.label_smoothing > 0.0)
        return ploss_error(PLOSS_ERR_DTYPE, "out: label smoothing %g needs a float dtype, got %s",
                           o.label_smoothing, ploss_dtype_name(v.dtype));
    if ((st = ploss_check_smoothing(o.smoothing_convention, o.label_smoothing, C)))
        return st;
    if ((st = ploss_view_check_writable(&v, "out")) || (st = ploss_check_no_alias(&v, "out", &t, "target")))
        return st;

    ploss_one_hot_problem p;
    memset(&p, 0, sizeof p);
    p.N = v.shape[0];
    p.C = C;
    p.S = 1;
    for (int d = 2; d < v.ndim; ++d)
        p.S *= v.shape[d];
    p.t = t.data; p.t_dtype = t.dtype; p.t_sn = t.strides[0];
    p.out = v.data; p.out_dtype = v.dtype; p.o_sn = v.strides[0]; p.o_sc = v.strides[1];
    if ((st = ploss_check_collapse(&t, 1, t.ndim, "target", &p.t_ss)) ||
        (st = ploss_check_collapse(&v, 2, v.ndim, "out", &p.o_ss)))
        return st;
    ploss_smoothing_coefficients(o.smoothing_convention, o.label_smoothing, C, &p.a, &p.b);
    p.ignore_index = o.ignore_index;

    if (ctx->device.device_type == kDLCPU &&
        (st = ploss_check_labels_cpu(p.t, p.t_dtype, p.N, p.S, p.t_sn, p.t_ss, C, p.ignore_index)))
        return st;
    return ploss_dispatch(ctx, PLOSS_OP_ONE_HOT, "target", &p);
}
