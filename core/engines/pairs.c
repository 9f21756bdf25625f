/*
 * pairs.c — the validation front of the pairs kernel shape: losses over N×D embedding
 * inputs that each get a gradient (the triplet margin loss on given triplets, the
 * batch-hard triplet loss, InfoNCE).  It checks every tensor of a call before anything is
 * written — the inputs (a float dtype, N×D, all of the first input's dtype and shape), the
 * labels (N integers) of a labelled loss, the loss (N values for NONE, else one), the
 * upstream gradient, one gradient per input, and that no output overlaps an input or another
 * output — then builds the loss's problem (core/engines/pairs.h) and dispatches it.  The
 * options were checked by the loss's entry point (core/losses.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dispatch.h"
#include "loss.h"
#include "loss_check.h"
#include "pairs.h"

/* The checked tensors of one call. */
typedef struct {
    int n;                                    /* inputs                                   */
    ploss_view x[PLOSS_MAX_LOSS_INPUTS];      /* the embedding inputs                     */
    ploss_view g[PLOSS_MAX_LOSS_INPUTS];      /* their gradients (backward, fused)        */
    ploss_view l, gl;                         /* loss (forward, fused), grad_loss (backward) */
    ploss_view y;                             /* labels (a labels target)                 */
    int64_t N, D;
} pairs_call;

static ploss_status check_call(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                               const ploss_loss_args *a, const ploss_loss_params *o, pairs_call *c)
{
    ploss_status st;
    char want[96];
    memset(c, 0, sizeof *c);
    c->n = spec->ninputs;
    if (pass == PLOSS_PASS_FUSED && o->inplace)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.inplace: %s has no in-place gradient (its inputs each get one)", spec->name);
    for (int k = 0; k < c->n; ++k) {
        const char *name = spec->input_names[k];
        ploss_view *x = &c->x[k];
        if ((st = ploss_view_init(x, a->inputs[k], name)) || (st = ploss_view_check_device(x, ctx, name)))
            return st;
        if (!ploss_dtype_is_float(x->dtype))
            return ploss_error(PLOSS_ERR_DTYPE, "%s: expected embeddings of dtype f32, f16, bf16 or f64, got %s", name,
                               ploss_dtype_name(x->dtype));
        if (x->ndim != 2)
            return ploss_check_shape_error(name, "N×D embeddings (2 dims)", x);
        if (k == 0) {
            c->N = x->shape[0];
            c->D = x->shape[1];
            continue;
        }
        if ((st = ploss_check_dtype(x, c->x[0].dtype, name)))
            return st;
        if (x->shape[0] != c->N || x->shape[1] != c->D) {
            snprintf(want, sizeof want, "[%lld, %lld] (the %s's shape; D must match)", (long long)c->N,
                     (long long)c->D, spec->input_names[0]);
            return ploss_check_shape_error(name, want, x);
        }
    }
    if (spec->target == PLOSS_LOSS_TARGET_LABELS) {
        if ((st = ploss_view_init(&c->y, a->target, "labels")) || (st = ploss_view_check_device(&c->y, ctx, "labels")))
            return st;
        if (c->y.dtype != PLOSS_I64 && c->y.dtype != PLOSS_I32)
            return ploss_error(PLOSS_ERR_DTYPE, "labels: expected class labels of dtype i64 or i32, got %s",
                               ploss_dtype_name(c->y.dtype));
        if (c->y.ndim != 1 || c->y.shape[0] != c->N) {
            snprintf(want, sizeof want, "[%lld] (one label per row of %s)", (long long)c->N, spec->input_names[0]);
            return ploss_check_shape_error("labels", want, &c->y);
        }
    }
    const ploss_dtype acc = c->x[0].dtype == PLOSS_F64 ? PLOSS_F64 : PLOSS_F32;
    if (pass != PLOSS_PASS_BACKWARD) {
        if (!a->loss)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "loss: tensor is NULL");
        if ((st = ploss_view_init(&c->l, a->loss, "loss")) || (st = ploss_view_check_device(&c->l, ctx, "loss")) ||
            (st = ploss_check_dtype(&c->l, acc, "loss")) ||
            (st = ploss_check_row_loss_shape(&c->l, c->N, o->reduction, "loss")) ||
            (st = ploss_view_check_writable(&c->l, "loss")))
            return st;
    }
    if (pass == PLOSS_PASS_BACKWARD) {
        if (!a->grad_loss)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "grad_loss: tensor is NULL");
        if ((st = ploss_view_init(&c->gl, a->grad_loss, "grad_loss")) ||
            (st = ploss_view_check_device(&c->gl, ctx, "grad_loss")) ||
            (st = ploss_check_row_loss_shape(&c->gl, c->N, o->reduction, "grad_loss")))
            return st;
        if (c->gl.dtype != PLOSS_F32 && c->gl.dtype != PLOSS_F64)
            return ploss_error(PLOSS_ERR_DTYPE, "grad_loss: expected f32 or f64, got %s", ploss_dtype_name(c->gl.dtype));
    }
    if (pass != PLOSS_PASS_FORWARD) {
        for (int k = 0; k < c->n; ++k) {
            const char *name = spec->grad_names[k];
            ploss_view *g = &c->g[k];
            if (!a->grad_inputs[k])
                return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
            if ((st = ploss_view_init(g, a->grad_inputs[k], name)) || (st = ploss_view_check_device(g, ctx, name)) ||
                (st = ploss_check_dtype(g, c->x[k].dtype, name)))
                return st;
            if (g->ndim != 2 || g->shape[0] != c->N || g->shape[1] != c->D) {
                snprintf(want, sizeof want, "[%lld, %lld] (the shape of %s)", (long long)c->N, (long long)c->D,
                         spec->input_names[k]);
                return ploss_check_shape_error(name, want, g);
            }
            if ((st = ploss_view_check_writable(g, name)))
                return st;
        }
    }

    /* no output may overlap an input or another output */
    const ploss_view *ins[PLOSS_MAX_LOSS_INPUTS + 2], *outs[PLOSS_MAX_LOSS_INPUTS + 1];
    const char *in_names[PLOSS_MAX_LOSS_INPUTS + 2], *out_names[PLOSS_MAX_LOSS_INPUTS + 1];
    int nin = 0, nout = 0;
    for (int k = 0; k < c->n; ++k) {
        ins[nin] = &c->x[k];
        in_names[nin++] = spec->input_names[k];
    }
    ins[nin] = spec->target == PLOSS_LOSS_TARGET_LABELS ? &c->y : NULL;
    in_names[nin++] = "labels";
    ins[nin] = pass == PLOSS_PASS_BACKWARD ? &c->gl : NULL;
    in_names[nin++] = "grad_loss";
    outs[nout] = pass != PLOSS_PASS_BACKWARD ? &c->l : NULL;
    out_names[nout++] = "loss";
    for (int k = 0; k < c->n; ++k) {
        outs[nout] = pass != PLOSS_PASS_FORWARD ? &c->g[k] : NULL;
        out_names[nout++] = spec->grad_names[k];
    }
    return ploss_check_aliasing(outs, out_names, nout, ins, in_names, nin, -1, -1);
}

/* The members every pairs problem has, from the checked call `c`: the pass, the reduction,
 * the sizes, the fused scale, and the loss (forward, fused) or the upstream gradient
 * (backward), each tensor's stride along N (0 when reduced). */
#define FILL_COMMON(p, pass_, c, o)                                                   \
    do {                                                                              \
        (p).pass = (pass_);                                                           \
        (p).reduction = (o)->reduction;                                               \
        (p).dtype = (c)->x[0].dtype;                                                  \
        (p).N = (c)->N;                                                               \
        (p).D = (c)->D;                                                               \
        (p).scale = (o)->scale;                                                       \
        if ((pass_) != PLOSS_PASS_BACKWARD) {                                         \
            (p).loss = (c)->l.data;                                                   \
            (p).loss_dtype = (c)->l.dtype;                                            \
            (p).l_sn = (c)->l.ndim == 1 ? (c)->l.strides[0] : 0;                      \
        } else {                                                                      \
            (p).grad_loss = (c)->gl.data;                                             \
            (p).gl_dtype = (c)->gl.dtype;                                             \
            (p).gl_sn = (c)->gl.ndim == 1 ? (c)->gl.strides[0] : 0;                   \
        }                                                                             \
    } while (0)

static ploss_status run_triplet(ploss_ctx_t *ctx, ploss_pass pass, const pairs_call *c, const ploss_loss_params *o)
{
    ploss_triplet_problem p;
    memset(&p, 0, sizeof p);
    FILL_COMMON(p, pass, c, o);
    for (int k = 0; k < 3; ++k) {
        p.x[k] = (ploss_pair_operand){c->x[k].data, c->x[k].strides[0], c->x[k].strides[1]};
        if (pass != PLOSS_PASS_FORWARD)
            p.grad[k] = (ploss_pair_grad){c->g[k].data, c->g[k].strides[0], c->g[k].strides[1]};
    }
    p.margin = o->margin;
    p.p = o->p_norm;
    p.eps = o->eps;
    p.soft_margin = o->soft_margin;
    p.swap = o->swap;
    return ploss_dispatch(ctx, PLOSS_OP_PAIRS_TRIPLET, "anchor", &p);
}

/* The sizes of the matrix products (and, for batch-hard mining, of the sort of 2N pairs)
 * are 32-bit: N at most max_n, D below 2^31. */
static ploss_status check_product_sizes(const pairs_call *c, const char *name, int64_t max_n)
{
    if (c->N <= max_n && c->D <= INT32_MAX)
        return PLOSS_OK;
    return ploss_error(PLOSS_ERR_UNSUPPORTED, "%s: N = %lld rows of D = %lld exceed the matrix products' sizes "
                       "(N <= %lld, D < 2^31)", name, (long long)c->N, (long long)c->D, (long long)max_n);
}

static ploss_status run_batch_hard(ploss_ctx_t *ctx, ploss_pass pass, const pairs_call *c,
                                   const ploss_loss_params *o)
{
    ploss_status st = check_product_sizes(c, "embeddings", INT32_MAX / 2);
    if (st)
        return st;
    ploss_batch_hard_problem p;
    memset(&p, 0, sizeof p);
    FILL_COMMON(p, pass, c, o);
    p.x = (ploss_pair_operand){c->x[0].data, c->x[0].strides[0], c->x[0].strides[1]};
    p.labels = c->y.data;
    p.label_dtype = c->y.dtype;
    p.y_sn = c->y.strides[0];
    p.distance = o->distance;
    p.margin = o->margin;
    p.soft_margin = o->soft_margin;
    if (pass != PLOSS_PASS_FORWARD)
        p.grad = (ploss_pair_grad){c->g[0].data, c->g[0].strides[0], c->g[0].strides[1]};
    return ploss_dispatch(ctx, PLOSS_OP_PAIRS_BATCH_HARD, "embeddings", &p);
}

static ploss_status run_infonce(ploss_ctx_t *ctx, ploss_pass pass, const pairs_call *c, const ploss_loss_params *o)
{
    ploss_status st = check_product_sizes(c, "query", INT32_MAX);
    if (st)
        return st;
    ploss_infonce_problem p;
    memset(&p, 0, sizeof p);
    FILL_COMMON(p, pass, c, o);
    for (int k = 0; k < 2; ++k) {
        p.x[k] = (ploss_pair_operand){c->x[k].data, c->x[k].strides[0], c->x[k].strides[1]};
        if (pass != PLOSS_PASS_FORWARD)
            p.grad[k] = (ploss_pair_grad){c->g[k].data, c->g[k].strides[0], c->g[k].strides[1]};
    }
    p.temperature = o->temperature;
    p.symmetric = o->symmetric;
    p.normalize = o->normalize;
    return ploss_dispatch(ctx, PLOSS_OP_PAIRS_INFONCE, "query", &p);
}

ploss_status ploss_pairs_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                             const ploss_loss_args *a, const ploss_loss_params *o)
{
    pairs_call c;
    ploss_status st = check_call(ctx, pass, spec, a, o, &c);
    if (st)
        return st;
    switch (spec->policy) {
    case PLOSS_POLICY_TRIPLET_MARGIN: return run_triplet(ctx, pass, &c, o);
    case PLOSS_POLICY_BATCH_HARD_TRIPLET: return run_batch_hard(ctx, pass, &c, o);
    case PLOSS_POLICY_INFO_NCE: return run_infonce(ctx, pass, &c, o);
    default: return ploss_error(PLOSS_ERR_UNSUPPORTED, "%s: no pairs engine for this loss", spec->name);
    }
}
