/*
 * region.c — the one validation front of the region kernel shape: losses reduced per class
 * over groups of pixels (Lovász-softmax, the soft Dice losses) and the affinity losses
 * (stencils over the pixels of each image).  It checks the tensors of a call
 * against the loss's spec before anything is written (on the CPU the labels too), merges
 * the spatial dims the tensors allow to walk as one, and dispatches the problem
 * (core/engines/region.h) to the CPU or CUDA.  The options were checked by the loss's entry
 * point (core/losses.c).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dispatch.h"
#include "loss.h"
#include "loss_check.h"
#include "region.h"
#include "scalar.h"
#include "tensor_ops.h"

/* What the loss of NONE holds: one value per (group, class), per sample, one, or one per
 * pixel (the label map's shape). */
typedef enum { PER_GROUP_CLASS, PER_SAMPLE, ONE, PER_PIXEL } loss_groups;

/* Loss-shaped tensors: NONE as `groups` says ([C] or [N, C] per image for PER_GROUP_CLASS);
 * MEAN / SUM one element. */
typedef struct {
    const ploss_view *x;
    int64_t N, C;
    ploss_reduction reduction;
    loss_groups groups;
    int per_image;
} group_shape;

static ploss_status check_group_shape(const ploss_view *v, const void *arg, const char *name)
{
    const group_shape *a = arg;
    const ploss_view *x = a->x;
    const int64_t N = a->N, C = a->C;
    const ploss_reduction r = a->reduction;
    const loss_groups groups = a->groups;
    const int per_image = a->per_image;
    char want[160];
    if (groups == PER_PIXEL)
        return ploss_check_loss_shape(v, x, r, name);
    if (r != PLOSS_REDUCTION_NONE || groups == ONE) {
        if (v->numel == 1 && (r != PLOSS_REDUCTION_NONE || v->ndim == 1))
            return PLOSS_OK;
        return ploss_check_shape_error(name, r != PLOSS_REDUCTION_NONE ? "one element (a reduced loss)"
                                                                       : "shape [1] (one value for the batch)", v);
    }
    if (groups == PER_SAMPLE) {
        if (v->ndim == 1 && v->shape[0] == N)
            return PLOSS_OK;
        snprintf(want, sizeof want, "shape [%lld] (one value per sample, reduction 'none')", (long long)N);
    } else if (per_image) {
        if (v->ndim == 2 && v->shape[0] == N && v->shape[1] == C)
            return PLOSS_OK;
        snprintf(want, sizeof want, "shape [%lld, %lld] (one value per image and class, reduction 'none')",
                 (long long)N, (long long)C);
    } else {
        if (v->ndim == 1 && v->shape[0] == C)
            return PLOSS_OK;
        snprintf(want, sizeof want, "shape [%lld] (one value per class, reduction 'none')", (long long)C);
    }
    return ploss_check_shape_error(name, want, v);
}

/* Strides of a checked NONE loss-shaped tensor along the group, the class and (a pixel map:
 * N×H×W, N×W or N) its two spatial dims. */
static void group_strides(const ploss_view *v, loss_groups groups, int per_image, int64_t *sg, int64_t *sc,
                          int64_t ss[2])
{
    *sg = groups == PER_SAMPLE || groups == PER_PIXEL || (groups == PER_GROUP_CLASS && per_image) ? v->strides[0] : 0;
    *sc = groups == PER_GROUP_CLASS ? v->strides[per_image ? 1 : 0] : 0;
    if (groups == PER_PIXEL) {
        ss[0] = v->ndim == 3 ? v->strides[1] : 0;
        ss[1] = v->ndim >= 2 ? v->strides[v->ndim - 1] : 0;
    }
}

/* Merge the spatial dims of x and g (from dim `first`, g when given) and t (x's dim d is t's
 * dim d − t_shift) where every one of them is contiguous across the pair; drop dims of size 1. */
static void merge_spatial(ploss_region_problem *p, const ploss_view *x, const ploss_view *t, const ploss_view *g,
                          int first, int t_shift)
{
    int n = 0;
    int64_t shape[PLOSS_MAX_DIMS], xs[PLOSS_MAX_DIMS], ts[PLOSS_MAX_DIMS], gs[PLOSS_MAX_DIMS];
    for (int d = x->ndim - 1; d >= first; --d) {
        const int64_t size = x->shape[d];
        if (size == 1)
            continue;
        const int64_t sx = x->strides[d], st = t->strides[d - t_shift], sg = g ? g->strides[d] : 0;
        if (n > 0 && sx == xs[n - 1] * shape[n - 1] && st == ts[n - 1] * shape[n - 1] &&
            sg == gs[n - 1] * shape[n - 1]) {
            shape[n - 1] *= size;
            continue;
        }
        shape[n] = size; xs[n] = sx; ts[n] = st; gs[n] = sg;
        ++n;
    }
    p->sdim = n;
    p->S = 1;
    for (int d = 0; d < n; ++d) { /* innermost first above: reverse into row-major order */
        p->sshape[d] = shape[n - 1 - d];
        p->x_ss[d] = xs[n - 1 - d];
        p->t_ss[d] = ts[n - 1 - d];
        p->g_ss[d] = gs[n - 1 - d];
        p->S *= p->sshape[d];
    }
}

static ploss_status check_labels(const ploss_region_problem *p)
{
    for (int64_t n = 0; n < (p->S > 0 ? p->N : 0); ++n)
        for (int64_t s = 0; s < p->S; ++s) {
            const int64_t y = ploss_load_int(p->t, p->t_dtype, n * p->t_sn + ploss_region_pixel_offset(p, p->t_ss, s));
            if (y != p->ignore_index && (y < 0 || y >= p->C))
                return ploss_error(PLOSS_ERR_INVALID_LABEL,
                                   "target: class index %lld at pixel (n = %lld, s = %lld) is outside [0, %lld) "
                                   "and is not ignore_index (%lld); n and s are 0-based, s counting the "
                                   "positions d1⋯dk in row-major order%s",
                                   (long long)y, (long long)n, (long long)s, (long long)p->C,
                                   (long long)p->ignore_index, y == p->C ? PLOSS_ONE_BASED_HINT : "");
        }
    return PLOSS_OK;
}

/* Lovász's class_ids: given exactly with classes = 'listed'; a vector (or one index) of any
 * numeric dtype on ctx's device; on the CPU each an integer in [0, C). */
static ploss_status check_class_ids(ploss_ctx_t *ctx, const DLTensor *ids, int listed, int64_t C, ploss_view *v)
{
    ploss_status st;
    if (!ids)
        return listed ? ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "class_ids: required with classes = 'listed'")
                      : PLOSS_OK;
    if (!listed)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "class_ids: given while opts.classes is not 'listed' (the list would be ignored)");
    if ((st = ploss_view_init(v, ids, "class_ids")) || (st = ploss_view_check_device(v, ctx, "class_ids")))
        return st;
    if (v->ndim > 1)
        return ploss_check_shape_error("class_ids", "a vector of class indices", v);
    if (ctx->device.device_type != kDLCPU)
        return PLOSS_OK;
    for (int64_t k = 0; k < v->numel; ++k) {
        const double c = ploss_load(v->data, v->dtype, k * (v->ndim ? v->strides[0] : 0));
        if (!(c >= 0.0 && c < (double)C && c == floor(c)))
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                               "class_ids: element %lld (from 0) = %s is not an integer class index in [0, %lld)", (long long)k,
                               PLOSS_SHOWN(c), (long long)C);
    }
    return PLOSS_OK;
}

/* A call without pixels: nothing to differentiate; the loss is 0 (Lovász: Berman et al.'s
 * mean of nothing too), 1 − smooth/smooth per group (Dice: 0, NaN when smooth = 0; 'mean' of
 * no group NaN) or, for the stencils, NaN ('mean' of no valid pixel) and 0. */
static ploss_status no_pixel(ploss_ctx_t *ctx, ploss_pass pass, const ploss_view *l, const ploss_loss_params *o,
                             int affinity, int dice, int64_t groups)
{
    ploss_status st = ploss_enter_device(ctx, "input");
    if (st || pass == PLOSS_PASS_BACKWARD)
        return st;
    const int mean = o->reduction == PLOSS_REDUCTION_MEAN;
    double v = 0.0;
    if (affinity)
        v = mean ? NAN : 0.0;
    else if (dice)
        v = groups > 0 || o->reduction == PLOSS_REDUCTION_NONE ? (o->smooth > 0.0 ? 0.0 : NAN) : (mean ? NAN : 0.0);
#ifdef PLOSS_HAVE_CUDA
    if (ctx->device.device_type != kDLCPU)
        return ploss_cuda_fill(ctx, l, v);
#endif
    return ploss_cpu_fill(l, v);
}

/* The operation that computes a policy's loss, or -1 for a policy this engine has no
 * maths for. */
static int op_of(ploss_policy policy)
{
    switch (policy) {
    case PLOSS_POLICY_LOVASZ_SOFTMAX: return PLOSS_OP_REGION_LOVASZ;
    case PLOSS_POLICY_SOFT_DICE: case PLOSS_POLICY_GENERALIZED_SOFT_DICE: case PLOSS_POLICY_BATCH_SOFT_DICE:
        return PLOSS_OP_REGION_DICE;
    case PLOSS_POLICY_AFFINITY_FIELD: return PLOSS_OP_REGION_AFFINITY_FIELD;
    case PLOSS_POLICY_AFFINITY: return PLOSS_OP_REGION_AFFINITY;
    default: return -1;
    }
}

int ploss_region_computes(ploss_policy policy) { return op_of(policy) >= 0; }

ploss_status ploss_region_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                              const ploss_loss_args *a, const ploss_loss_params *o)
{
    ploss_status st;
    ploss_view x, t, w, l, gl, g;
    /* binary: logits of any shape, a float target of the same shape, no class axis (C = 1) */
    const int binary = spec->target == PLOSS_LOSS_TARGET_ELEMENTWISE;
    if (binary) {
        if ((st = ploss_view_init(&x, a->input, "input")) || (st = ploss_view_check_device(&x, ctx, "input")) ||
            (st = ploss_check_logits_dtype(&x)))
            return st;
        if ((st = ploss_view_init(&t, a->target, "target")) || (st = ploss_view_check_device(&t, ctx, "target")))
            return st;
        if (!ploss_dtype_is_float(t.dtype))
            return ploss_error(PLOSS_ERR_DTYPE,
                               "target: expected float targets (0/1 or soft labels) of dtype f32, f16, bf16 or f64, "
                               "got %s",
                               ploss_dtype_name(t.dtype));
        if ((st = ploss_check_input_shape(&t, &x, "target")))
            return st;
    } else {
        if ((st = ploss_check_row_input(ctx, a->input, 0, "rank >= 2 (N×C or N×C×d1×…×dk)", &x)))
            return st;
        if (x.shape[1] < spec->min_classes)
            return ploss_check_shape_error("input", "at least one class along axis 1", &x);
        if ((st = ploss_view_init(&t, a->target, "target")) || (st = ploss_view_check_device(&t, ctx, "target")))
            return st;
        if (t.dtype != PLOSS_I64 && t.dtype != PLOSS_I32)
            return ploss_error(PLOSS_ERR_DTYPE,
                               "target: expected class indices of dtype i64 or i32, got %s (convert them, e.g. "
                               "target:long())",
                               ploss_dtype_name(t.dtype));
        if ((st = ploss_check_sample_shape(&t, &x, "target")) ||
            (st = ploss_check_ignore_index_fits(o->ignore_index, t.dtype, "target")))
            return st;
    }
    const int64_t N = x.ndim > 0 ? x.shape[0] : 1, C = binary ? 1 : x.shape[1];
    const ploss_dtype acc = x.dtype == PLOSS_F64 ? PLOSS_F64 : PLOSS_F32;
    const ploss_op op = (ploss_op)op_of(spec->policy);
    const int affinity = op == PLOSS_OP_REGION_AFFINITY_FIELD || op == PLOSS_OP_REGION_AFFINITY;
    const int dice = op == PLOSS_OP_REGION_DICE;
    if (affinity && x.ndim > 4)
        return ploss_check_shape_error("input", "N×C×H×W logits (rank at most 4: the pixel neighbourhoods are 2-D)",
                                       &x);
    /* the groups: samples or the batch (Lovász and binary Dice: the per_image option;
     * generalized Dice: per sample; batch Dice: the batch) */
    const int per_image = dice && !binary ? spec->policy == PLOSS_POLICY_GENERALIZED_SOFT_DICE : o->per_image;
    const loss_groups groups = affinity ? PER_PIXEL : !dice ? PER_GROUP_CLASS : per_image ? PER_SAMPLE : ONE;

    /* the class weights of the Dice losses, or Lovász's list of classes */
    const DLTensor *weight = spec->ntensors > 0 && spec->tensors[0].kind == PLOSS_TENSOR_CLASS_VECTOR ? a->tensors[0]
                                                                                                     : NULL;
    const DLTensor *ids = spec->ntensors > 0 && spec->tensors[0].kind == PLOSS_TENSOR_CLASS_IDS ? a->tensors[0] : NULL;
    ploss_view iv;
    if (!dice && !affinity && (st = check_class_ids(ctx, ids, o->classes == PLOSS_LOVASZ_LISTED, C, &iv)))
        return st;
    if (weight) {
        if (o->class_weights == PLOSS_DICE_WEIGHTS_SUDRE)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                               "weight: class weights are given with class_weights = 'sudre', which computes "
                               "them (pass one or the other)");
        if ((st = ploss_check_class_vector(ctx, weight, C, "weight", spec->tensors[0].what, &w)))
            return st;
    }

    const group_shape shape = {&x, N, C, o->reduction, groups, per_image};
    if ((st = ploss_check_loss_tensors(ctx, pass, a->loss, a->grad_loss, acc, check_group_shape, &shape, &l, &gl)))
        return st;
    if (pass != PLOSS_PASS_FORWARD && (st = ploss_check_grad_input(ctx, a->grad_input, &x, &g)))
        return st;

    const ploss_view *ins[5] = {&x, &t, pass == PLOSS_PASS_BACKWARD ? &gl : NULL, weight ? &w : NULL, ids ? &iv : NULL};
    const char *in_names[5] = {"input", "target", "grad_loss", "weight", "class_ids"};
    if ((st = ploss_check_outputs_apart(pass, o->inplace, &l, &g, ins, in_names, 5)))
        return st;

    if (x.numel == 0) /* no pixel (N may be huge when S = 0): the losses' values in closed form */
        return no_pixel(ctx, pass, &l, o, affinity, dice, per_image ? N : 1);

    ploss_region_problem p;
    memset(&p, 0, sizeof p);
    p.pass = pass;
    p.reduction = o->reduction;
    p.N = N;
    p.C = C;
    const int lead = x.ndim > 0; /* a 0-d binary input is one sample of one pixel */
    p.x = x.data; p.x_dtype = x.dtype; p.x_sn = lead ? x.strides[0] : 0; p.x_sc = binary ? 0 : x.strides[1];
    p.t = t.data; p.t_dtype = t.dtype; p.t_sn = lead ? t.strides[0] : 0;
    if (pass != PLOSS_PASS_FORWARD) {
        p.grad = g.data; p.g_sn = lead ? g.strides[0] : 0; p.g_sc = binary ? 0 : g.strides[1];
    }
    if (affinity) { /* the two spatial dims as they are (the stencil needs them): H×W, 1×W, 1×1 */
        const int wd = x.ndim - 1; /* x's dim of W (the target's is wd − 1), H the one before */
        p.sdim = 2;
        p.sshape[0] = x.ndim == 4 ? x.shape[2] : 1;
        p.sshape[1] = x.ndim >= 3 ? x.shape[wd] : 1;
        p.S = p.sshape[0] * p.sshape[1];
        if (x.ndim == 4) {
            p.x_ss[0] = x.strides[2]; p.t_ss[0] = t.strides[1];
            if (pass != PLOSS_PASS_FORWARD)
                p.g_ss[0] = g.strides[2];
        }
        if (x.ndim >= 3) {
            p.x_ss[1] = x.strides[wd]; p.t_ss[1] = t.strides[wd - 1];
            if (pass != PLOSS_PASS_FORWARD)
                p.g_ss[1] = g.strides[wd];
        }
    } else {
        merge_spatial(&p, &x, &t, pass != PLOSS_PASS_FORWARD ? &g : NULL, binary ? 1 : 2, binary ? 0 : 1);
    }
    if (pass != PLOSS_PASS_BACKWARD) {
        p.loss = l.data; p.loss_dtype = l.dtype;
        if (o->reduction == PLOSS_REDUCTION_NONE)
            group_strides(&l, groups, per_image, &p.l_sg, &p.l_sc, p.l_ss);
    } else {
        p.grad_loss = gl.data; p.gl_dtype = gl.dtype;
        if (o->reduction == PLOSS_REDUCTION_NONE)
            group_strides(&gl, groups, per_image, &p.gl_sg, &p.gl_sc, p.gl_ss);
    }
    p.ignore_index = o->ignore_index;
    p.per_image = per_image;
    p.scale = o->scale;
    p.binary = binary;
    if (dice) {
        p.exponent = o->exponent;
        p.smooth = o->smooth;
        p.mask_ignored = o->mask_ignored;
        p.sudre = o->class_weights == PLOSS_DICE_WEIGHTS_SUDRE;
        if (weight) {
            p.w = w.data; p.w_dtype = w.dtype; p.w_s = w.strides[0];
        }
    } else if (affinity) {
        p.kl_margin = o->kl_margin;
        p.lambda_same = o->lambda_same;
        p.lambda_diff = o->lambda_diff;
        p.reference_divergence = o->divergence == PLOSS_AFFINITY_REFERENCE;
        p.kernel_size = o->kernel_size;
    } else {
        p.present = o->classes == PLOSS_LOVASZ_PRESENT;
        if (ids) {
            p.ids = iv.data; p.ids_dtype = iv.dtype; p.ids_n = iv.numel; p.ids_s = iv.ndim ? iv.strides[0] : 0;
        }
    }
    if (!binary && ctx->device.device_type == kDLCPU && (st = check_labels(&p)))
        return st;
    return ploss_dispatch(ctx, op, "input", &p);
}
