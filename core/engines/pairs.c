/*
 * pairs.c — the validation front of the pairs kernel shape: losses over several inputs
 * that each get a gradient (the triplet margin loss on given triplets, the batch-hard
 * triplet loss, InfoNCE, the cosine embedding loss on N×D embeddings; the margin ranking
 * loss on scores of any shape).  It checks every tensor of a call before anything is
 * written — the inputs (a float dtype, N×D or as the loss's input layout says, all of the
 * first input's dtype and shape), the labels (N integers) of a labelled loss or the ±1 signs
 * (float or integer) of a signed one, the loss (N values for NONE, else one), the upstream
 * gradient, one gradient per input, and that no output overlaps an input or another output —
 * then builds the loss's problem (core/engines/pairs.h) and dispatches it.  The options were
 * checked by the loss's entry point (core/losses.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dispatch.h"
#include "loss.h"
#include "loss_check.h"
#include "pairs.h"
#include "sharded.h"

/* The checked tensors of one call. */
typedef struct {
    int n;                                    /* inputs                                   */
    ploss_view x[PLOSS_MAX_LOSS_INPUTS];      /* the embedding inputs                     */
    ploss_view g[PLOSS_MAX_LOSS_INPUTS];      /* their gradients (backward, fused)        */
    ploss_view l, gl;                         /* loss (forward, fused), grad_loss (backward) */
    ploss_view y;                             /* labels or signs (a labels or signs target) */
    int64_t N, D;
    ploss_input_layout layout;
    int unbatched;                            /* D inputs of ROWS_OR_VECTOR: one pair, N = 1 */
} pairs_call;

/* "[a, b, …]" of v's shape into buf. */
static const char *shape_text(const ploss_view *v, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < v->ndim && k < len; ++d)
        k += (size_t)snprintf(buf + k, len - k, d ? ", %lld" : "%lld", (long long)v->shape[d]);
    if (k < len)
        snprintf(buf + k, len - k, "]");
    return buf;
}

static int same_shape(const ploss_view *a, const ploss_view *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; ++d)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

/* SHAPE error unless v has the shape of the input x0 (named `first`). */
static ploss_status check_first_shape(const ploss_view *v, const ploss_view *x0, const char *first, const char *name)
{
    if (same_shape(v, x0))
        return PLOSS_OK;
    char s[160], want[220];
    snprintf(want, sizeof want, "%s (the shape of %s)", shape_text(x0, s, sizeof s), first);
    return ploss_check_shape_error(name, want, v);
}

/* The Gaussian NLL's variances v over the means x, as PyTorch takes them: x's shape (one per
 * element), x's shape without its last dim (one per row of the last axis), or x's shape with
 * one dim of size 1 where x's is not (one shared along that axis).  The axis a variance is
 * shared along (the last for one fewer dim), or -1 for one per element or a shape that is none
 * of these (-2). */
static int variance_shared_axis(const ploss_view *v, const ploss_view *x)
{
    if (x->ndim > 0 && v->ndim == x->ndim - 1) {
        for (int d = 0; d < v->ndim; ++d)
            if (v->shape[d] != x->shape[d])
                return -2;
        return x->ndim - 1;
    }
    if (v->ndim != x->ndim)
        return -2;
    int axis = -1;
    for (int d = 0; d < x->ndim; ++d)
        if (v->shape[d] != x->shape[d]) {
            if (v->shape[d] != 1 || axis >= 0)
                return -2;
            axis = d;
        }
    return axis;
}

static ploss_status check_variance_shape(const ploss_view *v, const ploss_view *x, const char *name)
{
    if (variance_shared_axis(v, x) >= -1)
        return PLOSS_OK;
    char s[160], want[320];
    snprintf(want, sizeof want,
             "%s (the input's shape), that shape with one dim of size 1 (one variance shared along "
             "that axis) or without its last dim, as PyTorch",
             shape_text(x, s, sizeof s));
    return ploss_check_shape_error(name, want, v);
}

/* Moves dim `axis` of v (of rank `ndim`) to the end; a view of another rank (a reduced loss,
 * an absent gradient) is left as it is. */
static void move_axis_last(ploss_view *v, int ndim, int axis)
{
    if (v->ndim != ndim)
        return;
    const int64_t size = v->shape[axis], stride = v->strides[axis];
    for (int d = axis; d < ndim - 1; ++d) {
        v->shape[d] = v->shape[d + 1];
        v->strides[d] = v->strides[d + 1];
    }
    v->shape[ndim - 1] = size;
    v->strides[ndim - 1] = stride;
}

/* A loss-shaped tensor (loss, grad_loss): N values for NONE (the first input's shape for an
 * elementwise layout, one element for one pair of D inputs), else one element. */
typedef struct {
    const pairs_call *c;
    const char *first;
    ploss_reduction reduction;
} loss_shape;

static ploss_status check_loss_shape(const ploss_view *v, const void *arg, const char *name)
{
    const loss_shape *a = arg;
    const pairs_call *c = a->c;
    const ploss_reduction r = a->reduction;
    if (r == PLOSS_REDUCTION_NONE && c->layout == PLOSS_INPUT_LAYOUT_ELEMENTWISE)
        return check_first_shape(v, &c->x[0], a->first, name);
    if (r == PLOSS_REDUCTION_NONE && c->unbatched) {
        if (v->numel == 1 && v->ndim <= 1)
            return PLOSS_OK;
        return ploss_check_shape_error(name, "a 0-d or 1-element tensor (inputs of one row of D values each, "
                                             "reduction none)", v);
    }
    return ploss_check_row_loss_shape(v, c->N, r, name);
}

static ploss_status check_call(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                               const ploss_loss_args *a, const ploss_loss_params *o, pairs_call *c)
{
    ploss_status st;
    char want[96];
    memset(c, 0, sizeof *c);
    c->n = spec->ninputs;
    c->layout = spec->input_layout;
    const char *first = spec->input_names[0];
    if ((st = ploss_check_no_inplace(spec->name, o->inplace)))
        return st;
    for (int k = 0; k < c->n; ++k) {
        const char *name = spec->input_names[k];
        ploss_view *x = &c->x[k];
        if ((st = ploss_view_init(x, a->inputs[k], name)) || (st = ploss_view_check_device(x, ctx, name)))
            return st;
        if (!ploss_dtype_is_float(x->dtype))
            return ploss_error(PLOSS_ERR_DTYPE, "%s: expected %s of dtype f32, f16, bf16 or f64, got %s", name,
                               spec->policy == PLOSS_POLICY_GAUSSIAN_NLL ? "values"
                               : c->layout == PLOSS_INPUT_LAYOUT_ELEMENTWISE ? "scores"
                                                                              : "embeddings",
                               ploss_dtype_name(x->dtype));
        if (c->layout == PLOSS_INPUT_LAYOUT_ROWS && x->ndim != 2)
            return ploss_check_shape_error(name, "N×D embeddings (2 dims)", x);
        if (c->layout == PLOSS_INPUT_LAYOUT_ROWS_OR_VECTOR && x->ndim != 2 && x->ndim != 1)
            return ploss_check_shape_error(name, "N×D embeddings (2 dims) or one embedding of D values (1 dim)", x);
        if (k == 0) {
            c->unbatched = c->layout == PLOSS_INPUT_LAYOUT_ROWS_OR_VECTOR && x->ndim == 1;
            if (c->layout == PLOSS_INPUT_LAYOUT_ELEMENTWISE) {
                c->N = x->numel;
                c->D = 1;
            } else {
                c->N = c->unbatched ? 1 : x->shape[0];
                c->D = c->unbatched ? x->shape[0] : x->shape[1];
            }
            continue;
        }
        if ((st = ploss_check_dtype(x, c->x[0].dtype, name)))
            return st;
        if (spec->policy == PLOSS_POLICY_GAUSSIAN_NLL && k == 2) {
            if ((st = check_variance_shape(x, &c->x[0], name)))
                return st;
        } else if (c->layout != PLOSS_INPUT_LAYOUT_ROWS) {
            if ((st = check_first_shape(x, &c->x[0], first, name)))
                return st;
        } else if (x->shape[0] != c->N || x->shape[1] != c->D) {
            snprintf(want, sizeof want, "[%lld, %lld] (the %s's shape: %s)", (long long)c->N, (long long)c->D,
                     spec->input_names[0], x->shape[0] != c->N ? "row i of each input goes with row i of the others"
                                                                : "every input has the same D features");
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
    if (spec->target == PLOSS_LOSS_TARGET_SIGNS) {
        ploss_view *y = &c->y;
        if ((st = ploss_view_init(y, a->target, "target")) || (st = ploss_view_check_device(y, ctx, "target")))
            return st;
        if ((st = ploss_check_sign_labels(y)))
            return st;
        if (c->layout == PLOSS_INPUT_LAYOUT_ELEMENTWISE) {
            if ((st = check_first_shape(y, &c->x[0], first, "target")))
                return st;
        } else if (c->unbatched) {
            if (y->ndim != 0)
                return ploss_check_shape_error("target", "a 0-d tensor (one label for D inputs, as PyTorch)", y);
        } else if (y->ndim != 1 || y->shape[0] != c->N) {
            snprintf(want, sizeof want, "[%lld] (one label per row of %s)", (long long)c->N, first);
            return ploss_check_shape_error("target", want, y);
        }
    }
    const ploss_dtype acc = c->x[0].dtype == PLOSS_F64 ? PLOSS_F64 : PLOSS_F32;
    const loss_shape shape = {c, first, o->reduction};
    if ((st = ploss_check_loss_tensors(ctx, pass, a->loss, a->grad_loss, acc, check_loss_shape, &shape, &c->l, &c->gl)))
        return st;
    if (pass != PLOSS_PASS_FORWARD) {
        for (int k = 0; k < c->n; ++k) {
            const char *name = spec->grad_names[k];
            ploss_view *g = &c->g[k];
            if (!a->grad_inputs[k])
                return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
            if ((st = ploss_view_init(g, a->grad_inputs[k], name)) || (st = ploss_view_check_device(g, ctx, name)) ||
                (st = ploss_check_dtype(g, c->x[k].dtype, name)))
                return st;
            if (c->layout != PLOSS_INPUT_LAYOUT_ROWS) {
                if ((st = check_first_shape(g, &c->x[k], spec->input_names[k], name)))
                    return st;
            } else if (g->ndim != 2 || g->shape[0] != c->N || g->shape[1] != c->D) {
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
    ins[nin] = spec->target == PLOSS_LOSS_TARGET_LABELS || spec->target == PLOSS_LOSS_TARGET_SIGNS ? &c->y : NULL;
    in_names[nin++] = spec->target == PLOSS_LOSS_TARGET_SIGNS ? "target" : "labels";
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

/* An N×D operand, or a D one as one row (stride along N 0). */
static ploss_pair_operand operand_of(const ploss_view *v, int unbatched)
{
    return unbatched ? (ploss_pair_operand){v->data, 0, v->strides[0]}
                     : (ploss_pair_operand){v->data, v->strides[0], v->strides[1]};
}

static ploss_pair_grad grad_of(const ploss_view *v, int unbatched)
{
    return unbatched ? (ploss_pair_grad){v->data, 0, v->strides[0]}
                     : (ploss_pair_grad){v->data, v->strides[0], v->strides[1]};
}

/* The message of a margin given with soft_margin (its default is the only value taken with
 * it: an options struct cannot leave the margin unset); %s: the margin, then its default. */
#define SOFT_MARGIN_GIVEN                                                                      \
    "opts.margin: %s with soft_margin = true (the soft margin softplus(d_ap − d_an) has no margin: " \
    "leave opts.margin at its default, %s)"

static ploss_status run_triplet(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec, const pairs_call *c,
                                const ploss_loss_params *o)
{
    /* TripletMarginWithDistanceLoss: its pairwise distance is TripletMarginLoss's with p = 2
     * and eps = 1e-6, no soft margin (its margin checked > 0 by its entry point) */
    const int named = spec->policy == PLOSS_POLICY_TRIPLET_MARGIN_WITH_DISTANCE;
    /* PyTorch's TripletMarginLoss refuses a margin <= 0; the soft margin has none, and a
     * margin other than the default given with it is refused (a softplus with a margin
     * inside, as some implementations have, would otherwise be silently another loss) */
    if (!named && o->soft_margin && o->margin != 1.0)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, SOFT_MARGIN_GIVEN, PLOSS_SHOWN(o->margin), "1");
    if (!named && !o->soft_margin && !(o->margin > 0.0))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.margin: %s is not > 0 (the hinge's margin; soft_margin = true has none)", PLOSS_SHOWN(o->margin));
    ploss_triplet_problem p;
    memset(&p, 0, sizeof p);
    FILL_COMMON(p, pass, c, o);
    /* one triplet of D inputs: its loss and upstream gradient are one value either way */
    if (c->unbatched) {
        p.l_sn = 0;
        p.gl_sn = 0;
    }
    for (int k = 0; k < 3; ++k) {
        p.x[k] = operand_of(&c->x[k], c->unbatched);
        if (pass != PLOSS_PASS_FORWARD)
            p.grad[k] = grad_of(&c->g[k], c->unbatched);
    }
    p.margin = o->margin;
    p.p = named ? 2.0 : o->p_norm;
    p.eps = named ? 1e-6 : o->eps;
    p.soft_margin = named ? 0 : o->soft_margin;
    p.swap = o->swap;
    p.cosine = named && o->distance == PLOSS_TRIPLET_DISTANCE_COSINE;
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
    if (o->soft_margin && o->margin != 0.3)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, SOFT_MARGIN_GIVEN, PLOSS_SHOWN(o->margin), "0.3");
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

/* InfoNCE's problem on the call's own tensors (M = N keys, the positive of query i key i). */
static ploss_status infonce_problem(ploss_infonce_problem *p, ploss_pass pass, const pairs_call *c,
                                    const ploss_loss_params *o)
{
    ploss_status st = check_product_sizes(c, "query", INT32_MAX);
    if (st)
        return st;
    memset(p, 0, sizeof *p);
    FILL_COMMON(*p, pass, c, o);
    for (int k = 0; k < 2; ++k) {
        p->x[k] = (ploss_pair_operand){c->x[k].data, c->x[k].strides[0], c->x[k].strides[1]};
        if (pass != PLOSS_PASS_FORWARD)
            p->grad[k] = (ploss_pair_grad){c->g[k].data, c->g[k].strides[0], c->g[k].strides[1]};
    }
    p->temperature = o->temperature;
    p->symmetric = o->symmetric;
    p->normalize = o->normalize;
    p->M = p->N;
    p->gk_dtype = p->dtype;
    return PLOSS_OK;
}

/* Margin ranking: drop dims of size 1 and merge neighbours that are contiguous in every one
 * of the NT tensors (st[k]: tensor k's strides over x's dims, 0 for an absent or reduced
 * one), so that dense inputs walk as one axis. */
enum { MR_NT = 7 };
static void collapse_joint(ploss_margin_ranking_problem *p, const ploss_view *x, int64_t *const st[MR_NT])
{
    int64_t shape[PLOSS_MAX_DIMS], out[MR_NT][PLOSS_MAX_DIMS];
    int n = 0;
    for (int d = x->ndim - 1; d >= 0; --d) {
        if (x->shape[d] == 1)
            continue;
        int merge = n > 0;
        for (int k = 0; merge && k < MR_NT; ++k)
            merge = st[k][d] == out[k][n - 1] * shape[n - 1];
        if (merge) {
            shape[n - 1] *= x->shape[d];
        } else {
            shape[n] = x->shape[d];
            for (int k = 0; k < MR_NT; ++k)
                out[k][n] = st[k][d];
            ++n;
        }
    }
    if (n == 0) { /* one element, or none (a size-0 dim is kept above: numel 0) */
        shape[0] = 1;
        for (int k = 0; k < MR_NT; ++k)
            out[k][0] = 0;
        n = 1;
    }
    p->ndim = n;
    for (int d = 0; d < PLOSS_MAX_DIMS; ++d) {
        p->shape[d] = d < n ? shape[n - 1 - d] : 1;
        for (int k = 0; k < MR_NT; ++k)
            st[k][d] = d < n ? out[k][n - 1 - d] : 0;
    }
}

static ploss_status run_margin_ranking(ploss_ctx_t *ctx, ploss_pass pass, const pairs_call *c,
                                       const ploss_loss_params *o, ploss_score_pair_kind kind)
{
    ploss_margin_ranking_problem p;
    memset(&p, 0, sizeof p);
    p.pass = pass;
    p.reduction = o->reduction;
    p.kind = kind;
    p.dtype = c->x[0].dtype;
    p.numel = c->x[0].numel;
    p.margin = o->margin;
    p.scale = o->scale;
    const ploss_view *x = &c->x[0];
    const int none = o->reduction == PLOSS_REDUCTION_NONE;
    for (int d = 0; d < x->ndim; ++d) {
        p.x1_st[d] = c->x[0].strides[d];
        p.x2_st[d] = c->x[1].strides[d];
        p.y_st[d] = c->y.strides[d];
        if (pass != PLOSS_PASS_BACKWARD && none)
            p.l_st[d] = c->l.strides[d];
        if (pass == PLOSS_PASS_BACKWARD && none)
            p.gl_st[d] = c->gl.strides[d];
        if (pass != PLOSS_PASS_FORWARD) {
            p.g1_st[d] = c->g[0].strides[d];
            p.g2_st[d] = c->g[1].strides[d];
        }
    }
    p.x1 = c->x[0].data;
    p.x2 = c->x[1].data;
    p.y = c->y.data;
    p.y_dtype = c->y.dtype;
    if (pass != PLOSS_PASS_BACKWARD) {
        p.loss = c->l.data;
        p.loss_dtype = c->l.dtype;
    } else {
        p.grad_loss = c->gl.data;
        p.gl_dtype = c->gl.dtype;
    }
    if (pass != PLOSS_PASS_FORWARD) {
        p.g1 = c->g[0].data;
        p.g2 = c->g[1].data;
    }
    int64_t *const sts[MR_NT] = {p.x1_st, p.x2_st, p.y_st, p.l_st, p.gl_st, p.g1_st, p.g2_st};
    collapse_joint(&p, x, sts);
    return ploss_dispatch(ctx, PLOSS_OP_PAIRS_MARGIN_RANKING, "input1", &p);
}

/* Gaussian NLL: tensor v over the rows of x's last axis (core/engines/pairs.h): its strides
 * along x's other dims into st, along the last into *sd (0 where v has one value per row). */
static void row_strides(const ploss_view *v, const ploss_view *x, int per_row, int64_t st[PLOSS_MAX_DIMS], int64_t *sd)
{
    for (int d = 0; d < PLOSS_MAX_DIMS; ++d)
        st[d] = d < x->ndim - 1 ? v->strides[d] : 0;
    *sd = x->ndim > 0 && !per_row ? v->strides[x->ndim - 1] : 0;
}

static ploss_status run_gaussian_nll(ploss_ctx_t *ctx, ploss_pass pass, const pairs_call *c,
                                     const ploss_loss_params *o)
{
    ploss_gaussian_nll_problem p;
    memset(&p, 0, sizeof p);
    const int none = o->reduction == PLOSS_REDUCTION_NONE;
    /* a variance shared along an axis other than the last: that axis moved to the end of
     * every tensor (views, nothing copied), where the backends take one variance per row */
    pairs_call moved;
    const int axis = variance_shared_axis(&c->x[2], &c->x[0]);
    if (axis >= 0 && axis < c->x[0].ndim - 1) {
        moved = *c;
        const int nd = c->x[0].ndim;
        for (int k = 0; k < 3; ++k) {
            move_axis_last(&moved.x[k], nd, axis);
            if (pass != PLOSS_PASS_FORWARD)
                move_axis_last(&moved.g[k], nd, axis);
        }
        if (none)
            move_axis_last(pass == PLOSS_PASS_BACKWARD ? &moved.gl : &moved.l, nd, axis);
        c = &moved;
    }
    const ploss_view *x = &c->x[0];
    p.pass = pass;
    p.reduction = o->reduction;
    p.dtype = x->dtype;
    p.ndim = x->ndim > 0 ? x->ndim - 1 : 0;
    for (int d = 0; d < p.ndim; ++d)
        p.shape[d] = x->shape[d];
    p.D = x->ndim > 0 ? x->shape[x->ndim - 1] : 1;
    p.numel = x->numel;
    const int shared = !same_shape(&c->x[2], x); /* one variance per row */
    p.var_per_row = shared && p.D != 1;
    /* rows of an empty last axis still have a variance's gradient (0) when they share one */
    p.rows = p.D > 0 ? p.numel / p.D : shared ? c->x[2].numel : 0;
    p.full = o->full;
    p.eps = o->eps;
    p.scale = o->scale;
    p.x = x->data;
    p.t = c->x[1].data;
    p.v = c->x[2].data;
    row_strides(&c->x[0], x, 0, p.x_st, &p.x_sd);
    row_strides(&c->x[1], x, 0, p.t_st, &p.t_sd);
    row_strides(&c->x[2], x, shared, p.v_st, &p.v_sd);
    if (pass != PLOSS_PASS_BACKWARD) {
        p.loss = c->l.data;
        p.loss_dtype = c->l.dtype;
        if (none)
            row_strides(&c->l, x, 0, p.l_st, &p.l_sd);
    } else {
        p.grad_loss = c->gl.data;
        p.gl_dtype = c->gl.dtype;
        if (none)
            row_strides(&c->gl, x, 0, p.gl_st, &p.gl_sd);
    }
    if (pass != PLOSS_PASS_FORWARD) {
        p.gx = c->g[0].data;
        p.gt = c->g[1].data;
        p.gv = c->g[2].data;
        row_strides(&c->g[0], x, 0, p.gx_st, &p.gx_sd);
        row_strides(&c->g[1], x, 0, p.gt_st, &p.gt_sd);
        row_strides(&c->g[2], x, shared, p.gv_st, &p.gv_sd);
    }
    return ploss_dispatch(ctx, PLOSS_OP_PAIRS_GAUSSIAN_NLL, "input", &p);
}

static ploss_status run_embedding_pair(ploss_ctx_t *ctx, ploss_pass pass, const pairs_call *c,
                                       const ploss_loss_params *o, ploss_embedding_pair_kind kind)
{
    ploss_embedding_pair_problem p;
    memset(&p, 0, sizeof p);
    FILL_COMMON(p, pass, c, o);
    p.kind = kind;
    /* one pair of D inputs: its loss and upstream gradient are one value either way */
    if (c->unbatched) {
        p.l_sn = 0;
        p.gl_sn = 0;
    }
    for (int k = 0; k < 2; ++k) {
        p.x[k] = operand_of(&c->x[k], c->unbatched);
        if (pass != PLOSS_PASS_FORWARD)
            p.grad[k] = grad_of(&c->g[k], c->unbatched);
    }
    p.y = c->y.data;
    p.y_dtype = c->y.dtype;
    p.y_sn = c->unbatched ? 0 : c->y.strides[0];
    p.margin = o->margin;
    return ploss_dispatch(ctx, PLOSS_OP_PAIRS_EMBEDDING, "input1", &p);
}

int ploss_pairs_computes(ploss_policy policy)
{
    switch (policy) {
    case PLOSS_POLICY_TRIPLET_MARGIN: case PLOSS_POLICY_TRIPLET_MARGIN_WITH_DISTANCE:
    case PLOSS_POLICY_BATCH_HARD_TRIPLET: case PLOSS_POLICY_INFO_NCE:
    case PLOSS_POLICY_MARGIN_RANKING: case PLOSS_POLICY_COSINE_EMBEDDING: case PLOSS_POLICY_GAUSSIAN_NLL:
    case PLOSS_POLICY_L1_HINGE_EMBEDDING: case PLOSS_POLICY_DISTANCE_RATIO:
        return 1;
    default: return 0;
    }
}

ploss_status ploss_pairs_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                             const ploss_loss_args *a, const ploss_loss_params *o)
{
    pairs_call c;
    ploss_status st = check_call(ctx, pass, spec, a, o, &c);
    ploss_infonce_problem p;
    if (spec->policy == PLOSS_POLICY_INFO_NCE) {
        if (!st)
            st = infonce_problem(&p, pass, &c, o);
        if (o->comm) /* every rank learns every rank's status first */
            return ploss_infonce_run_sharded(ctx, pass, o, st ? NULL : &p, &c.x[1], &c.gl, a->grad_inputs[1], st);
        if (st)
            return st;
        return ploss_dispatch(ctx, PLOSS_OP_PAIRS_INFONCE, "query", &p);
    }
    if (st)
        return st;
    switch (spec->policy) {
    case PLOSS_POLICY_TRIPLET_MARGIN:
    case PLOSS_POLICY_TRIPLET_MARGIN_WITH_DISTANCE: return run_triplet(ctx, pass, spec, &c, o);
    case PLOSS_POLICY_BATCH_HARD_TRIPLET: return run_batch_hard(ctx, pass, &c, o);
    case PLOSS_POLICY_MARGIN_RANKING: return run_margin_ranking(ctx, pass, &c, o, PLOSS_SCORE_PAIR_MARGIN_RANKING);
    case PLOSS_POLICY_DISTANCE_RATIO: return run_margin_ranking(ctx, pass, &c, o, PLOSS_SCORE_PAIR_DISTANCE_RATIO);
    case PLOSS_POLICY_COSINE_EMBEDDING: return run_embedding_pair(ctx, pass, &c, o, PLOSS_EMBEDDING_PAIR_COSINE);
    case PLOSS_POLICY_L1_HINGE_EMBEDDING: return run_embedding_pair(ctx, pass, &c, o, PLOSS_EMBEDDING_PAIR_L1_HINGE);
    case PLOSS_POLICY_GAUSSIAN_NLL: return run_gaussian_nll(ctx, pass, &c, o);
    default: return ploss_error(PLOSS_ERR_UNSUPPORTED, "%s: no pairs engine for this loss", spec->name);
    }
}
