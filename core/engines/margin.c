/*
 * margin.c — the validation front of the margin kernel shape: the losses of a softmax over
 * the products of N×D rows x with C×D class rows weight (D×C with weight_layout DxC: the
 * problem then walks its columns), one class label per row — the margin softmax losses
 * (combined margin, AM-softmax/CosFace, ArcFace: cosines of normalised rows, a margin on the
 * target; core/engines/margin.h) and the fused linear + cross-entropy (plain products, a
 * language-model head; core/engines/linear_cross_entropy.h).  It checks every tensor of a
 * call before anything is written — x and weight (a float dtype, N×D and C×D, one dtype,
 * the same D, C >= 2), the labels (N integers; on the CPU each in [0, C) or ignore_index,
 * CUDA reports them through the error slot), the loss, the upstream gradient, one gradient per
 * input, that no output overlaps an input or another output — draws Partial FC's classes on
 * the CPU (sample_rate < 1; CUDA draws them on the device), then builds the problem and
 * dispatches it.  The options were checked by the loss's entry point (core/losses.c); a
 * margin policy only decides which of m1, m2, m3 its options fill (the rest keep the
 * identity margin).  With opts.comm the checked call goes to core/engines/sharded.c,
 * which runs it over the communicator's ranks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "dispatch.h"
#include "loss.h"
#include "loss_check.h"
#include "linear_cross_entropy.h"
#include "margin_front.h"
#include "philox.h"
#include "scalar.h"

/* A float input (x or weight) on the context's device; its shape is checked by the caller. */
static ploss_status check_matrix(ploss_ctx_t *ctx, ploss_view *v, const DLTensor *t, const char *name,
                                 const char *what)
{
    ploss_status st;
    if ((st = ploss_view_init(v, t, name)) || (st = ploss_view_check_device(v, ctx, name)))
        return st;
    if (!ploss_dtype_is_float(v->dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "%s: expected %s of dtype f32, f16, bf16 or f64, got %s", name, what,
                           ploss_dtype_name(v->dtype));
    return PLOSS_OK;
}

/* INVALID_LABEL for the label v of row i when it is neither in [0, C) nor ignore_index. */
static ploss_status check_label(int64_t v, int64_t i, int64_t C, int64_t ignore_index)
{
    if (v == ignore_index || (v >= 0 && v < C))
        return PLOSS_OK;
    return ploss_error(PLOSS_ERR_INVALID_LABEL,
                       "labels: class index %lld at row %lld (0-based) is outside [0, %lld) and is not "
                       "ignore_index (%lld)%s", (long long)v, (long long)i, (long long)C, (long long)ignore_index,
                       v == C ? PLOSS_ONE_BASED_HINT : "");
}

ploss_status ploss_margin_check_labels_cpu(const void *labels, ploss_dtype dtype, int64_t sn, int64_t N, int64_t C,
                                           int64_t ignore_index)
{
    ploss_status st = PLOSS_OK;
    for (int64_t i = 0; i < N && !st; ++i)
        st = check_label(ploss_load_int(labels, dtype, i * sn), i, C, ignore_index);
    return st;
}

/* A drawn class: its Philox key, ties broken by the class. */
typedef struct {
    uint64_t key;
    int64_t cls;
} drawn_class;

static int by_key(const void *a, const void *b)
{
    const drawn_class *u = a, *v = b;
    if (u->key != v->key)
        return u->key < v->key ? -1 : 1;
    return u->cls < v->cls ? -1 : u->cls > v->cls;
}

/* Partial FC's kept classes on the CPU (margin.h; the labels checked by the caller) among
 * p's C classes, class j being p->class_offset + j: *kept (ascending, *K of them) and
 * *class_pos (C entries), both to free(). */
static ploss_status sample_classes(const ploss_margin_problem *p, double rate, int64_t seed, int64_t **kept,
                                   int64_t **class_pos, int64_t *K)
{
    const int64_t C = p->C, off = p->class_offset;
    int64_t *pos = malloc((size_t)C * sizeof *pos), *list = malloc((size_t)C * sizeof *list);
    drawn_class *cand = malloc((size_t)C * sizeof *cand);
    if (!pos || !list || !cand) {
        free(pos);
        free(list);
        free(cand);
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "weight: the kept classes of %lld", (long long)C);
    }
    for (int64_t j = 0; j < C; ++j)
        pos[j] = -1;
    int64_t npos = 0;
    for (int64_t i = 0; i < p->N; ++i) {
        const int64_t v = ploss_load_int(p->labels, p->label_dtype, i * p->y_sn) - off;
        if (v + off != p->ignore_index && v >= 0 && v < C && pos[v] < 0) {
            pos[v] = 0;
            ++npos;
        }
    }
    const int64_t n_s = ploss_margin_sample_size(C, rate);
    if (npos < n_s) {
        int64_t ncand = 0;
        for (int64_t j = 0; j < C; ++j)
            if (pos[j] < 0) {
                const ploss_philox4 r = ploss_philox((uint64_t)(off + j), (uint64_t)seed);
                cand[ncand++] = (drawn_class){((uint64_t)r.v[0] << 32) | r.v[1], j};
            }
        qsort(cand, (size_t)ncand, sizeof *cand, by_key);
        for (int64_t k = 0; k < n_s - npos; ++k)
            pos[cand[k].cls] = 0;
    }
    free(cand);
    int64_t n = 0;
    for (int64_t j = 0; j < C; ++j)
        if (pos[j] == 0) {
            pos[j] = n;
            list[n++] = j;
        }
    *kept = list;
    *class_pos = pos;
    *K = n;
    return PLOSS_OK;
}

ploss_status ploss_margin_draw(const ploss_ctx_t *ctx, const ploss_loss_params *o, ploss_margin_problem *p,
                               int64_t **kept, int64_t **class_pos)
{
    *kept = *class_pos = NULL;
    if (o->sample_rate >= 1.0)
        return PLOSS_OK;
    if (ctx->device.device_type != kDLCPU) {
        /* CUDA draws the classes on the device (no host copy of the labels); n_s = C keeps
         * every class */
        const int64_t n_s = ploss_margin_sample_size(p->C, o->sample_rate);
        p->sample_n = n_s < p->C ? n_s : 0;
        p->seed = (uint64_t)o->seed;
        return PLOSS_OK;
    }
    ploss_status st = sample_classes(p, o->sample_rate, o->seed, kept, class_pos, &p->K);
    if (!st) {
        p->kept = *kept;
        p->class_pos = *class_pos;
    }
    return st;
}

/* The linear cross-entropy's optional tensors: the bias b (a->tensors[0]: C values of x's
 * dtype or f32), its gradient gb (backward and fused, with b only: C values of b's dtype, or
 * f32 for a 16-bit b) and the per-row outputs lse and entropy (forward and fused: N values
 * of the loss's dtype `acc`).  Views of the absent ones are left zeroed (data null). */
static ploss_status check_linear_extras(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_args *a,
                                        const ploss_view *x, int64_t N, int64_t C, ploss_dtype acc, ploss_view *b,
                                        ploss_view *gb, ploss_view *stats)
{
    ploss_status st;
    if (a->tensors[0]) {
        if ((st = ploss_check_class_vector(ctx, a->tensors[0], C, "bias", "bias", b)))
            return st;
        if (b->dtype != x->dtype && b->dtype != PLOSS_F32)
            return ploss_error(PLOSS_ERR_DTYPE, "bias: expected %s (hidden's dtype)%s, got %s",
                               ploss_dtype_name(x->dtype), x->dtype == PLOSS_F32 ? "" : " or f32",
                               ploss_dtype_name(b->dtype));
    }
    if (pass != PLOSS_PASS_FORWARD && a->grad_tensors[0]) {
        if (!a->tensors[0])
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "grad_bias: given without a bias (pass NULL)");
        if ((st = ploss_check_class_vector(ctx, a->grad_tensors[0], C, "grad_bias", "bias gradient", gb)) ||
            (st = ploss_view_check_writable(gb, "grad_bias")))
            return st;
        const int wide = gb->dtype == PLOSS_F32 && (b->dtype == PLOSS_F16 || b->dtype == PLOSS_BF16);
        if (!wide && (st = ploss_check_dtype(gb, b->dtype, "grad_bias")))
            return st;
    } else if (pass != PLOSS_PASS_FORWARD && a->tensors[0]) {
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "grad_bias: tensor is NULL (a bias gets a gradient)");
    }
    static const char *const names[2] = {"lse", "entropy"};
    for (int k = 0; k < 2 && pass != PLOSS_PASS_BACKWARD; ++k) {
        if (!a->outputs[k])
            continue;
        char want[64];
        if ((st = ploss_view_init(&stats[k], a->outputs[k], names[k])) ||
            (st = ploss_view_check_device(&stats[k], ctx, names[k])) ||
            (st = ploss_check_dtype(&stats[k], acc, names[k])))
            return st;
        if (stats[k].ndim != 1 || stats[k].shape[0] != N) {
            snprintf(want, sizeof want, "[%lld] (one value per row of hidden)", (long long)N);
            return ploss_check_shape_error(names[k], want, &stats[k]);
        }
        if ((st = ploss_view_check_writable(&stats[k], names[k])))
            return st;
    }
    return PLOSS_OK;
}

/* The fused linear + cross-entropy from the checked views. */
static ploss_status run_linear(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_params *o,
                               const ploss_margin_call *c, const char *xn)
{
    const ploss_view *x = &c->x, *w = &c->w, *y = &c->y, *l = &c->l, *gl = &c->gl, *gx = &c->gx, *gw = &c->gw;
    const ploss_view *b = &c->b, *gb = &c->gb, *stats = c->stats;
    const int ac = c->ac, ad = c->ad;
    ploss_linear_problem p;
    memset(&p, 0, sizeof p);
    p.pass = pass;
    p.reduction = o->reduction;
    p.dtype = x->dtype;
    p.N = x->shape[0];
    p.C = w->shape[ac];
    p.D = x->shape[1];
    p.x = (ploss_pair_operand){x->data, x->strides[0], x->strides[1]};
    p.w = (ploss_pair_operand){w->data, w->strides[ac], w->strides[ad]};
    p.labels = y->data;
    p.label_dtype = y->dtype;
    p.y_sn = y->strides[0];
    p.ignore_index = o->ignore_index;
    p.label_smoothing = o->label_smoothing;
    p.softcap = o->softcap;
    p.z_loss = o->z_loss;
    p.focal = o->linear_policy == PLOSS_LINEAR_POLICY_FOCAL;
    p.gamma = o->gamma;
    if (p.focal && p.label_smoothing != 0.0)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.label_smoothing: %s with policy 'focal' (smoothing is the cross-entropy's; 0 with focal)",
                           PLOSS_SHOWN(p.label_smoothing));
    /* γ other than its default without the focal policy: a forgotten policy, not ignored */
    if (!p.focal && p.gamma != 2.0)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.gamma: %s with policy 'cross_entropy' (γ is the focal policy's: policy = 'focal')",
                           PLOSS_SHOWN(p.gamma));
    p.accumulate = o->accumulate;
    p.tile_rows = o->tile_rows;
    p.scale = o->scale;
    if (pass != PLOSS_PASS_BACKWARD) {
        p.loss = l->data;
        p.loss_dtype = l->dtype;
        p.l_sn = l->ndim == 1 ? l->strides[0] : 0;
    } else {
        p.grad_loss = gl->data;
        p.gl_dtype = gl->dtype;
        p.gl_sn = gl->ndim == 1 ? gl->strides[0] : 0;
    }
    if (pass != PLOSS_PASS_FORWARD) {
        p.grad_x = (ploss_pair_grad){gx->data, gx->strides[0], gx->strides[1]};
        p.grad_w = (ploss_pair_grad){gw->data, gw->strides[ac], gw->strides[ad]};
        p.gx_dtype = gx->dtype;
        p.gw_dtype = gw->dtype;
    }
    if (b->data) {
        p.bias = b->data;
        p.b_dtype = b->dtype;
        p.b_s = b->strides[0];
    }
    if (gb->data) {
        p.grad_b = gb->data;
        p.gb_dtype = gb->dtype;
        p.gb_s = gb->strides[0];
    }
    p.stats_dtype = p.loss_dtype;
    if (stats[0].data) {
        p.lse = stats[0].data;
        p.lse_s = stats[0].strides[0];
    }
    if (stats[1].data) {
        p.entropy = stats[1].data;
        p.ent_s = stats[1].strides[0];
    }
    return ploss_dispatch(ctx, PLOSS_OP_LINEAR_CROSS_ENTROPY, xn, &p);
}

ploss_status ploss_margin_check_call(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                                     const ploss_loss_args *a, const ploss_loss_params *o, ploss_margin_call *out)
{
    ploss_status st;
    char want[192];
    ploss_view x, w, y, l, gl, gx, gw, b, gb, stats[2];
    memset(&b, 0, sizeof b);
    memset(&gb, 0, sizeof gb);
    memset(stats, 0, sizeof stats);
    memset(&l, 0, sizeof l);
    memset(&gl, 0, sizeof gl);
    memset(&gx, 0, sizeof gx);
    memset(&gw, 0, sizeof gw);
    if ((st = ploss_check_no_inplace(spec->name, o->inplace)))
        return st;
    /* a flag for sharded calls: set without a communicator it would be ignored without a word */
    if (o->scale_grad_x_by_ranks && !o->comm)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.scale_grad_x_by_ranks: set without opts.comm (it multiplies grad_x by the "
                           "communicator's number of ranks; a call on one device has none)");
    const int linear = spec->policy == PLOSS_POLICY_LINEAR_CROSS_ENTROPY;
    const char *xn = spec->input_names[0], *wn = spec->input_names[1];
    if ((st = check_matrix(ctx, &x, a->inputs[0], xn, linear ? "hidden states" : "embeddings")))
        return st;
    if (x.ndim != 2)
        return ploss_check_shape_error(xn, linear ? "N×D hidden states (2 dims: B×T×H flattened to (B·T)×H)"
                                                  : "N×D embeddings (2 dims)", &x);
    const int64_t N = x.shape[0], D = x.shape[1];
    const char *rows_of_w = linear ? "vocabulary rows" : "class centres";
    if ((st = check_matrix(ctx, &w, a->inputs[1], wn, rows_of_w)))
        return st;
    if (w.dtype != x.dtype)
        return ploss_error(PLOSS_ERR_DTYPE, "%s: expected %s, the dtype of %s (both of one dtype), got %s", wn,
                           ploss_dtype_name(x.dtype), xn, ploss_dtype_name(w.dtype));
    /* the centres' axis and the features' axis of weight */
    const int dxc = o->weight_layout == PLOSS_WEIGHT_LAYOUT_DXC, ac = dxc ? 1 : 0, ad = dxc ? 0 : 1;
    if (w.ndim != 2 || w.shape[ad] != D) {
        /* the linear cross-entropy's sizes are the vocabulary V and the hidden size H */
        const char *cl = linear ? "V" : "C", *dl = linear ? "H" : "D";
        if (dxc && w.ndim == 2 && w.shape[1] == D) /* C×D given with weight_layout DxC */
            snprintf(want, sizeof want, "%lld×%s %s (one per column, weight_layout DxC; %s = %lld as %s; for a "
                     "%s×%lld weight: the default weight_layout 'CxD')", (long long)D, cl, rows_of_w, dl, (long long)D,
                     xn, cl, (long long)D);
        else if (dxc)
            snprintf(want, sizeof want, "%lld×%s %s (one per column, weight_layout DxC; %s = %lld as %s)",
                     (long long)D, cl, rows_of_w, dl, (long long)D, xn);
        else if (w.ndim == 2 && w.shape[0] == D) /* D×C given for C×D: say how to pass it */
            snprintf(want, sizeof want, "%s×%lld %s (one per row; %s = %lld as %s; for a %lld×%s weight: "
                     "weight_layout = 'DxC', or its transpose)", cl, (long long)D, rows_of_w, dl, (long long)D, xn,
                     (long long)D, cl);
        else
            snprintf(want, sizeof want, "%s×%lld %s (one per row; %s = %lld as %s)", cl, (long long)D, rows_of_w, dl,
                     (long long)D, xn);
        return ploss_check_shape_error(wn, want, &w);
    }
    const int64_t C = w.shape[ac];
    /* sharded (opts.comm): the classes of every rank together, checked once they are known */
    if (o->comm && C < 1)
        return ploss_error(PLOSS_ERR_SHAPE, "%s: expected at least one class centre on each rank (opts.comm), got 0",
                           wn);
    if (!o->comm && C < spec->min_classes)
        return ploss_error(PLOSS_ERR_SHAPE, "%s: expected at least %lld %s (%s), got %lld", wn,
                           (long long)spec->min_classes, rows_of_w, spec->min_classes_why, (long long)C);
    if (N > INT32_MAX || C > INT32_MAX || D > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED,
                           "%s: N = %lld rows, C = %lld %s and D = %lld exceed the matrix products' sizes "
                           "(each < 2^31)", xn, (long long)N, (long long)C, rows_of_w, (long long)D);
    if ((st = ploss_view_init(&y, a->target, "labels")) || (st = ploss_view_check_device(&y, ctx, "labels")))
        return st;
    if (y.dtype != PLOSS_I64 && y.dtype != PLOSS_I32)
        return ploss_error(PLOSS_ERR_DTYPE, "labels: expected class indices of dtype i64 or i32, got %s",
                           ploss_dtype_name(y.dtype));
    if ((st = ploss_check_ignore_index_fits(o->ignore_index, y.dtype, "labels")))
        return st;
    if (y.ndim != 1 || y.shape[0] != N) {
        snprintf(want, sizeof want, "[%lld] (one class index per row of %s)", (long long)N, xn);
        return ploss_check_shape_error("labels", want, &y);
    }
    const ploss_dtype acc = x.dtype == PLOSS_F64 ? PLOSS_F64 : PLOSS_F32;
    const ploss_row_loss_shape shape = {N, o->reduction};
    if ((st = ploss_check_loss_tensors(ctx, pass, a->loss, a->grad_loss, acc, ploss_row_loss_shape_check, &shape, &l,
                                       &gl)))
        return st;
    if (pass != PLOSS_PASS_FORWARD) {
        ploss_view *g[2] = {&gx, &gw};
        const ploss_view *in[2] = {&x, &w};
        for (int k = 0; k < 2; ++k) {
            const char *name = spec->grad_names[k];
            if (!a->grad_inputs[k])
                return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
            if ((st = ploss_view_init(g[k], a->grad_inputs[k], name)) ||
                (st = ploss_view_check_device(g[k], ctx, name)))
                return st;
            /* the linear cross-entropy also writes f32 gradients of f16/bf16 inputs (a
             * mixed-precision step's fp32 gradients, accumulated over the tiles unrounded) */
            const int narrow_in = linear && (x.dtype == PLOSS_F16 || x.dtype == PLOSS_BF16);
            if (g[k]->dtype != x.dtype && !(narrow_in && g[k]->dtype == PLOSS_F32)) {
                if (narrow_in)
                    return ploss_error(PLOSS_ERR_DTYPE, "%s: expected %s or f32, got %s", name,
                                       ploss_dtype_name(x.dtype), ploss_dtype_name(g[k]->dtype));
                return ploss_check_dtype(g[k], x.dtype, name);
            }
            if (g[k]->ndim != 2 || g[k]->shape[0] != in[k]->shape[0] || g[k]->shape[1] != in[k]->shape[1]) {
                snprintf(want, sizeof want, "[%lld, %lld] (the shape of %s)", (long long)in[k]->shape[0],
                         (long long)in[k]->shape[1], spec->input_names[k]);
                return ploss_check_shape_error(name, want, g[k]);
            }
            if ((st = ploss_view_check_writable(g[k], name)))
                return st;
        }
    }
    if (linear && (st = check_linear_extras(ctx, pass, a, &x, N, C, acc, &b, &gb, stats)))
        return st;
    /* the linear cross-entropy's bias, its gradient and per-row outputs: null views where absent */
    const ploss_view *ins[5] = {&x, &w, &y, pass == PLOSS_PASS_BACKWARD ? &gl : NULL, b.data ? &b : NULL};
    const char *in_names[5] = {xn, wn, "labels", "grad_loss", "bias"};
    const ploss_view *outs[6] = {pass != PLOSS_PASS_BACKWARD ? &l : NULL, pass != PLOSS_PASS_FORWARD ? &gx : NULL,
                                 pass != PLOSS_PASS_FORWARD ? &gw : NULL, gb.data ? &gb : NULL,
                                 stats[0].data ? &stats[0] : NULL, stats[1].data ? &stats[1] : NULL};
    const char *out_names[6] = {"loss", spec->grad_names[0], spec->grad_names[1], "grad_bias", "lse", "entropy"};
    if ((st = ploss_check_aliasing(outs, out_names, 6, ins, in_names, 5, -1, -1)))
        return st;
    if (ctx->device.device_type != kDLCPU && x.dtype == PLOSS_F64)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "%s: %s on CUDA takes f32, f16 or bf16 (f64 on the CPU only)",
                           xn, spec->name);
    out->x = x;
    out->w = w;
    out->y = y;
    out->l = l;
    out->gl = gl;
    out->gx = gx;
    out->gw = gw;
    out->b = b;
    out->gb = gb;
    out->stats[0] = stats[0];
    out->stats[1] = stats[1];
    out->ac = ac;
    out->ad = ad;
    out->N = N;
    out->C = C;
    out->D = D;
    return PLOSS_OK;
}

void ploss_margin_problem_of(ploss_margin_problem *p, ploss_pass pass, const ploss_loss_spec *spec,
                             const ploss_loss_params *o, const ploss_margin_call *c)
{
    memset(p, 0, sizeof *p);
    p->pass = pass;
    p->reduction = o->reduction;
    p->dtype = c->x.dtype;
    p->N = c->N;
    p->C = c->C;
    p->D = c->D;
    p->x = (ploss_pair_operand){c->x.data, c->x.strides[0], c->x.strides[1]};
    p->w = (ploss_pair_operand){c->w.data, c->w.strides[c->ac], c->w.strides[c->ad]};
    p->labels = c->y.data;
    p->label_dtype = c->y.dtype;
    p->y_sn = c->y.strides[0];
    p->ignore_index = o->ignore_index;
    /* AM-softmax fills m3 only, ArcFace m2 only: m1 = 1 keeps the angle as it is */
    const double m1 = spec->policy == PLOSS_POLICY_COMBINED_MARGIN ? o->margin_m1 : 1.0;
    p->margin = ploss_margin_of(o->margin_scale, m1, o->margin_m2, o->margin_m3, o->easy_margin);
    p->tile_rows = o->tile_rows;
    p->scale = o->scale;
    if (pass != PLOSS_PASS_BACKWARD) {
        p->loss = c->l.data;
        p->loss_dtype = c->l.dtype;
        p->l_sn = c->l.ndim == 1 ? c->l.strides[0] : 0;
    } else {
        p->grad_loss = c->gl.data;
        p->gl_dtype = c->gl.dtype;
        p->gl_sn = c->gl.ndim == 1 ? c->gl.strides[0] : 0;
    }
    if (pass != PLOSS_PASS_FORWARD) {
        p->grad_x = (ploss_pair_grad){c->gx.data, c->gx.strides[0], c->gx.strides[1]};
        p->grad_w = (ploss_pair_grad){c->gw.data, c->gw.strides[c->ac], c->gw.strides[c->ad]};
    }
    p->gx_dtype = c->x.dtype;
    p->K = c->C;
    p->classes_total = c->C;
    p->loss_rows = c->N;
    p->grad_x_factor = 1.0;
}

int ploss_margin_computes(ploss_policy policy)
{
    switch (policy) {
    case PLOSS_POLICY_COMBINED_MARGIN: case PLOSS_POLICY_AM_SOFTMAX: case PLOSS_POLICY_ARC_FACE:
    case PLOSS_POLICY_LINEAR_CROSS_ENTROPY:
        return 1;
    default: return 0;
    }
}

ploss_status ploss_margin_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                              const ploss_loss_args *a, const ploss_loss_params *o)
{
    ploss_margin_call c;
    memset(&c, 0, sizeof c);
    ploss_status st = ploss_margin_check_call(ctx, pass, spec, a, o, &c);
    if (o->comm)
        return ploss_margin_run_sharded(ctx, pass, spec, a, o, &c, st);
    if (st)
        return st;
    if (ctx->device.device_type == kDLCPU &&
        (st = ploss_margin_check_labels_cpu(c.y.data, c.y.dtype, c.y.strides[0], c.N, c.C, o->ignore_index)))
        return st;
    const char *xn = spec->input_names[0];
    if (spec->policy == PLOSS_POLICY_LINEAR_CROSS_ENTROPY)
        return run_linear(ctx, pass, o, &c, xn);
    ploss_margin_problem p;
    ploss_margin_problem_of(&p, pass, spec, o, &c);
    int64_t *kept, *class_pos;
    if ((st = ploss_margin_draw(ctx, o, &p, &kept, &class_pos)))
        return st;
    st = ploss_dispatch(ctx, PLOSS_OP_MARGIN, xn, &p);
    free(kept);
    free(class_pos);
    return st;
}
