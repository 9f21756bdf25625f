/*
 * boxes.c — the one validation front of the boxes kernel shape: losses with one value per
 * box of N×4 predicted and target boxes (the IoU family).  It checks the tensors of a call
 * against the loss's spec before anything is written, checks the boxes' coordinates on
 * the CPU (a CUDA kernel reports them through the context's error slot instead), and
 * dispatches the problem (core/engines/boxes.h) to the CPU or CUDA.  The options were
 * checked by the loss's entry point (core/losses.c).  Also the front of ploss_box_iou, the
 * pairwise similarities of two box sets.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boxes.h"
#include "dispatch.h"
#include "loss.h"
#include "loss_check.h"
#include "scalar.h"

/* An N×4 box tensor of a float dtype: the input or the target. */
static ploss_status check_box_tensor(ploss_ctx_t *ctx, const DLTensor *t, const char *name, ploss_view *v)
{
    ploss_status st;
    if ((st = ploss_view_init(v, t, name)) || (st = ploss_view_check_device(v, ctx, name)))
        return st;
    if (!ploss_dtype_is_float(v->dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "%s: expected boxes of dtype f32, f16, bf16 or f64, got %s", name,
                           ploss_dtype_name(v->dtype));
    if (v->ndim != 2 || v->shape[1] != 4) { /* with the view that gives N×4 where one does */
        const char *want = "N×4 boxes (shape [N, 4])";
        if (v->ndim == 1 && v->shape[0] == 4)
            want = "N×4 boxes (shape [N, 4]; one box: :view(1, 4))";
        else if (v->ndim > 2 && v->shape[v->ndim - 1] == 4)
            want = "N×4 boxes (shape [N, 4]; batches of boxes: :view(-1, 4))";
        else if (v->ndim == 2 && v->shape[1] > 4)
            want = "N×4 boxes (shape [N, 4]; the first four columns: :narrow(2, 1, 4))";
        return ploss_check_shape_error(name, want, v);
    }
    return PLOSS_OK;
}

/* A tensor of one value per box: shape [N]. */
static ploss_status check_per_box(const ploss_view *v, int64_t n, const char *name, const char *what)
{
    if (v->ndim == 1 && v->shape[0] == n)
        return PLOSS_OK;
    char want[120];
    snprintf(want, sizeof want, "shape [%lld] (%s)", (long long)n, what);
    return ploss_check_shape_error(name, want, v);
}

/* A loss-shaped tensor: [N] for NONE, one element for MEAN / SUM (arg: a
 * ploss_row_loss_shape). */
static ploss_status check_box_loss_shape(const ploss_view *v, const void *arg, const char *name)
{
    const ploss_row_loss_shape *a = arg;
    if (a->reduction == PLOSS_REDUCTION_NONE)
        return check_per_box(v, a->N, name, "one loss per box");
    if (v->numel == 1)
        return PLOSS_OK;
    return ploss_check_shape_error(name, "one element (0-d or [1]) for a reduced loss", v);
}

/* CPU: the n boxes of `which` (ignore[i] = 0 where a mask is given: 0 or 1, checked) must have x2 >= x1
 * and y2 >= y1 (w, h >= 0 in the formats with a size). */
static ploss_status check_boxes_cpu(int format, int64_t N, const void *ign, ploss_dtype ign_dtype, int64_t ign_sn,
                                    const void *base, ploss_dtype dt, int64_t sn, int64_t sk, const char *which)
{
    for (int64_t n = 0; n < N; ++n) {
        if (ign && ploss_load(ign, ign_dtype, n * ign_sn) != 0)
            continue;
        double r[4];
        for (int k = 0; k < 4; ++k)
            r[k] = ploss_load(base, dt, n * sn + k * sk);
        const int bad_xyxy = format == PLOSS_BOX_FORMAT_XYXY && (r[2] < r[0] || r[3] < r[1]);
        if (!bad_xyxy && !(format != PLOSS_BOX_FORMAT_XYXY && (r[2] < 0 || r[3] < 0)))
            continue;
        char c[4][32]; /* each coordinate in the fewest digits that read back as it in dt */
        for (int k = 0; k < 4; ++k)
            for (int digits = 1; digits <= 17; ++digits) {
                snprintf(c[k], sizeof c[k], "%.*g", digits, r[k]);
                uint64_t cell;
                ploss_store(&cell, dt, 0, strtod(c[k], NULL));
                if (ploss_load(&cell, dt, 0) == r[k] || r[k] != r[k])
                    break;
            }
        if (bad_xyxy)
            return ploss_error(PLOSS_ERR_INVALID_BOX,
                               "%s: box %lld (0-based) = (%s, %s, %s, %s) has x2 < x1 or y2 < y1; boxes are "
                               "(x1, y1, x2, y2) with x1 <= x2 and y1 <= y2 in box_format 'xyxy'",
                               which, (long long)n, c[0], c[1], c[2], c[3]);
        return ploss_error(PLOSS_ERR_INVALID_BOX,
                           "%s: box %lld (0-based) = (%s, %s, %s, %s) has a negative width or height "
                           "(box_format '%s')",
                           which, (long long)n, c[0], c[1], c[2], c[3],
                           format == PLOSS_BOX_FORMAT_XYWH ? "xywh" : "cxcywh");
    }
    return PLOSS_OK;
}

/* The box kind of a policy, or -1 for a policy this engine has no maths for. */
static int kind_of(ploss_policy policy)
{
    switch (policy) {
    case PLOSS_POLICY_BOX_IOU: return PLOSS_BOX_IOU;
    case PLOSS_POLICY_GENERALIZED_BOX_IOU: return PLOSS_BOX_GIOU;
    case PLOSS_POLICY_DISTANCE_BOX_IOU: return PLOSS_BOX_DIOU;
    case PLOSS_POLICY_COMPLETE_BOX_IOU: return PLOSS_BOX_CIOU;
    default: return -1;
    }
}

int ploss_boxes_computes(ploss_policy policy) { return kind_of(policy) >= 0; }

ploss_status ploss_boxes_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                             const ploss_loss_args *a, const ploss_loss_params *o)
{
    ploss_status st;
    /* the per-box tensors of the loss, by name */
    const DLTensor *weight = NULL, *ignore = NULL;
    for (int k = 0; k < spec->ntensors; ++k) {
        if (!strcmp(spec->tensors[k].name, "weight"))
            weight = a->tensors[k];
        else if (!strcmp(spec->tensors[k].name, "ignore"))
            ignore = a->tensors[k];
    }

    ploss_view x, t, w, ig, l, gl, g;
    if ((st = check_box_tensor(ctx, a->input, "input", &x)) || (st = check_box_tensor(ctx, a->target, "target", &t)))
        return st;
    if ((st = ploss_check_input_shape(&t, &x, "target")))
        return st;
    const int64_t N = x.shape[0];
    const ploss_dtype acc = x.dtype == PLOSS_F64 ? PLOSS_F64 : PLOSS_F32;
    if (weight) {
        if ((st = ploss_view_init(&w, weight, "weight")) || (st = ploss_view_check_device(&w, ctx, "weight")))
            return st;
        if (!ploss_dtype_is_float(w.dtype))
            return ploss_error(PLOSS_ERR_DTYPE, "weight: expected a float dtype, got %s", ploss_dtype_name(w.dtype));
        if ((st = check_per_box(&w, N, "weight", "one weight per box")))
            return st;
    }
    if (ignore) {
        if ((st = ploss_view_init(&ig, ignore, "ignore")) || (st = ploss_view_check_device(&ig, ctx, "ignore")) ||
            (st = check_per_box(&ig, N, "ignore", "one value per box, 1 to leave it out, else 0")))
            return st;
        /* a mask: 0 or 1 (0.5 or NaN leaving a box out would be a silent choice); CUDA's
         * kernels report another value through the error slot */
        if (ctx->device.device_type == kDLCPU)
            for (int64_t n = 0; n < N; ++n) {
                const double v = ploss_load(ig.data, ig.dtype, n * (ig.ndim ? ig.strides[0] : 0));
                if (v != 0.0 && v != 1.0)
                    return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                                       "ignore: element %lld (0-based) = %s is neither 0 nor 1 (a mask: 1 leaves the "
                                       "box out)",
                                       (long long)n, PLOSS_SHOWN(v));
            }
    }
    const ploss_row_loss_shape shape = {N, o->reduction};
    if ((st = ploss_check_loss_tensors(ctx, pass, a->loss, a->grad_loss, acc, check_box_loss_shape, &shape, &l, &gl)))
        return st;
    if (pass != PLOSS_PASS_FORWARD && (st = ploss_check_grad_input(ctx, a->grad_input, &x, &g)))
        return st;

    const ploss_view *ins[5] = {&x, &t, weight ? &w : NULL, ignore ? &ig : NULL,
                                pass == PLOSS_PASS_BACKWARD ? &gl : NULL};
    const char *in_names[5] = {"input", "target", "weight", "ignore", "grad_loss"};
    if ((st = ploss_check_outputs_apart(pass, o->inplace, &l, &g, ins, in_names, 5)))
        return st;

    ploss_boxes_problem p;
    memset(&p, 0, sizeof p);
    p.pass = pass;
    p.reduction = o->reduction;
    p.kind = (ploss_box_kind)kind_of(spec->policy);
    p.format = o->box_format;
    p.paper_gradient = p.kind == PLOSS_BOX_CIOU && o->ciou_gradient == PLOSS_CIOU_GRADIENT_PAPER;
    p.eps = o->eps;
    p.scale = o->scale;
    p.n = N;
    p.x = x.data; p.x_dtype = x.dtype; p.x_sn = x.strides[0]; p.x_sk = x.strides[1];
    p.t = t.data; p.t_dtype = t.dtype; p.t_sn = t.strides[0]; p.t_sk = t.strides[1];
    if (weight) {
        p.w = w.data; p.w_dtype = w.dtype; p.w_sn = w.strides[0];
    }
    if (ignore) {
        p.ign = ig.data; p.ign_dtype = ig.dtype; p.ign_sn = ig.strides[0];
    }
    if (pass != PLOSS_PASS_BACKWARD) {
        p.loss = l.data; p.loss_dtype = l.dtype;
        p.l_sn = o->reduction == PLOSS_REDUCTION_NONE ? l.strides[0] : 0;
    }
    if (pass == PLOSS_PASS_BACKWARD) {
        p.grad_loss = gl.data; p.gl_dtype = gl.dtype;
        p.gl_sn = o->reduction == PLOSS_REDUCTION_NONE ? gl.strides[0] : 0;
    }
    if (pass != PLOSS_PASS_FORWARD) {
        p.grad = g.data; p.g_sn = g.strides[0]; p.g_sk = g.strides[1];
    }
    if (ctx->device.device_type == kDLCPU &&
        ((st = check_boxes_cpu(p.format, N, p.ign, p.ign_dtype, p.ign_sn, p.x, p.x_dtype, p.x_sn, p.x_sk, "input")) ||
         (st = check_boxes_cpu(p.format, N, p.ign, p.ign_dtype, p.ign_sn, p.t, p.t_dtype, p.t_sn, p.t_sk, "target"))))
        return st;
    return ploss_dispatch(ctx, PLOSS_OP_BOXES, "input", &p);
}

void ploss_box_iou_opts_init(ploss_box_iou_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->kind = PLOSS_BOX_IOU_IOU;
    o->eps = 1e-7;
    o->box_format = PLOSS_BOX_FORMAT_XYXY;
    o->opts_tag = PLOSS_OPTS_TAG;
}

ploss_status ploss_box_iou(ploss_ctx_t *ctx, const DLTensor *boxes1, const DLTensor *boxes2,
                           const ploss_box_iou_opts *opts, DLTensor *out)
{
    ploss_clear_error();
    ploss_box_iou_opts o;
    ploss_box_iou_opts_init(&o);
    if (opts)
        o = *opts;
    if (o.opts_tag != PLOSS_OPTS_TAG)
        return ploss_opts_tag_error(o.opts_tag, "ploss_box_iou_opts_init");
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    if ((unsigned)o.kind >= PLOSS_BOX_IOU_KIND_COUNT)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.kind: %d is not one of iou (0), generalized (1), distance (2), complete (3)",
                           (int)o.kind);
    if (!(isfinite(o.eps) && o.eps >= 0.0))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.eps: %s is not a finite number >= 0", PLOSS_SHOWN(o.eps));
    if ((unsigned)o.box_format >= PLOSS_BOX_FORMAT_COUNT)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.box_format: %d is not one of xyxy (0), xywh (1), cxcywh (2)",
                           (int)o.box_format);
    ploss_status st;
    ploss_view a, b, v;
    if ((st = check_box_tensor(ctx, boxes1, "boxes1", &a)) || (st = check_box_tensor(ctx, boxes2, "boxes2", &b)))
        return st;
    if ((st = ploss_view_init(&v, out, "out")) || (st = ploss_view_check_device(&v, ctx, "out")) ||
        (st = ploss_check_dtype(&v, a.dtype == PLOSS_F64 ? PLOSS_F64 : PLOSS_F32, "out")))
        return st;
    if (v.ndim != 2 || v.shape[0] != a.shape[0] || v.shape[1] != b.shape[0]) {
        char want[120];
        snprintf(want, sizeof want, "shape [%lld, %lld] (boxes1 × boxes2)", (long long)a.shape[0],
                 (long long)b.shape[0]);
        return ploss_check_shape_error("out", want, &v);
    }
    if ((st = ploss_view_check_writable(&v, "out")) || (st = ploss_check_no_alias(&v, "out", &a, "boxes1")) ||
        (st = ploss_check_no_alias(&v, "out", &b, "boxes2")))
        return st;

    ploss_box_pairs_problem p;
    memset(&p, 0, sizeof p);
    p.kind = (ploss_box_kind)o.kind; /* the same order */
    p.format = o.box_format;
    p.eps = o.eps;
    p.n = a.shape[0];
    p.m = b.shape[0];
    p.a = a.data; p.a_dtype = a.dtype; p.a_sn = a.strides[0]; p.a_sk = a.strides[1];
    p.b = b.data; p.b_dtype = b.dtype; p.b_sn = b.strides[0]; p.b_sk = b.strides[1];
    p.out = v.data; p.out_dtype = v.dtype; p.o_sn = v.strides[0]; p.o_sm = v.strides[1];
    if (ctx->device.device_type == kDLCPU &&
        ((st = check_boxes_cpu(p.format, p.n, NULL, PLOSS_U8, 0, p.a, p.a_dtype, p.a_sn, p.a_sk, "boxes1")) ||
         (st = check_boxes_cpu(p.format, p.m, NULL, PLOSS_U8, 0, p.b, p.b_dtype, p.b_sn, p.b_sk, "boxes2"))))
        return st;
    if (p.n == 0 || p.m == 0)
        return ploss_enter_device(ctx, "boxes1");
    return ploss_dispatch(ctx, PLOSS_OP_BOX_PAIRS, "boxes1", &p);
}
