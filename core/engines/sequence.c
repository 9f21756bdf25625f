/*
 * sequence.c — the validation front of the sequence kernel shape: T×N×C frames of N
 * sequences scored against label sequences (CTC).  It checks the tensors of a call against
 * the loss's spec, reads the lengths and the labels on the host (a CUDA context copies them
 * there first: the recursions' sizes and every check are the host's before anything is
 * written), packs them, and dispatches the problem (core/engines/sequence.h) to the CPU or
 * CUDA.  The options were checked by the loss's entry point (core/losses.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "loss.h"
#include "loss_check.h"
#include "scalar.h"
#include "sequence.h"

int ploss_sequence_computes(ploss_policy policy) { return policy == PLOSS_POLICY_CTC; }

/* An integer tensor `name` of the call: on ctx's device, i64 or i32. */
static ploss_status check_integers(ploss_ctx_t *ctx, const DLTensor *t, const char *name, const char *what,
                                   ploss_view *v)
{
    ploss_status st;
    if ((st = ploss_view_init(v, t, name)) || (st = ploss_view_check_device(v, ctx, name)))
        return st;
    if (v->dtype != PLOSS_I64 && v->dtype != PLOSS_I32)
        return ploss_error(PLOSS_ERR_DTYPE, "%s: expected %s of dtype i64 or i32, got %s", name, what,
                           ploss_dtype_name(v->dtype));
    return PLOSS_OK;
}

/* An integer view readable on the host: its elements' span (any strides) is copied there
 * first from a CUDA device; element at offset `off` (elements, from v's data) by host_int. */
typedef struct {
    const char *base; /* v's data, or its host copy, at offset 0 */
    char *copy;
    ploss_dtype dtype;
} host_ints;

static ploss_status host_ints_open(ploss_ctx_t *ctx, const ploss_view *v, host_ints *h)
{
    h->base = v->data;
    h->copy = NULL;
    h->dtype = v->dtype;
    if (v->numel == 0 || ctx->device.device_type == kDLCPU)
        return PLOSS_OK;
#ifdef PLOSS_HAVE_CUDA
    int64_t lo = 0, hi = 0; /* the span of the view's elements, relative to its data */
    for (int d = 0; d < v->ndim; ++d) {
        const int64_t reach = (v->shape[d] - 1) * v->strides[d];
        if (reach < 0)
            lo += reach;
        else
            hi += reach;
    }
    const size_t esize = ploss_dtype_size(v->dtype), bytes = (size_t)(hi - lo + 1) * esize;
    if (!(h->copy = malloc(bytes)))
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "a host copy of %zu bytes of lengths or labels", bytes);
    ploss_status st = ploss_cuda_memcpy(h->copy, v->data + lo * (int64_t)esize, bytes, PLOSS_COPY_D2H, ctx->stream);
    if (st) {
        free(h->copy);
        h->copy = NULL;
        return st;
    }
    h->base = h->copy - lo * (int64_t)esize;
    return PLOSS_OK;
#else
    return ploss_error(PLOSS_ERR_UNSUPPORTED, "a device tensor with a library built without CUDA");
#endif
}

static inline int64_t host_int(const host_ints *h, int64_t off) { return ploss_load_int(h->base, h->dtype, off); }

static void host_ints_close(host_ints *h) { free(h->copy); }

/* The N values of a lengths view (one dim, or one value) into out. */
static ploss_status read_lengths(ploss_ctx_t *ctx, const ploss_view *v, int64_t N, int64_t *out)
{
    host_ints h;
    ploss_status st = host_ints_open(ctx, v, &h);
    if (st)
        return st;
    for (int64_t n = 0; n < N; ++n)
        out[n] = host_int(&h, v->ndim ? n * v->strides[0] : 0);
    host_ints_close(&h);
    return PLOSS_OK;
}

/* A loss-shaped tensor: N values for NONE (0-d for one T×C sequence), else one element. */
typedef struct {
    int64_t N;
    int unbatched;
    ploss_reduction reduction;
} loss_shape;

static ploss_status check_loss_shape(const ploss_view *v, const void *arg, const char *name)
{
    const loss_shape *a = arg;
    if (a->reduction == PLOSS_REDUCTION_NONE && a->unbatched) {
        if (v->ndim == 0)
            return PLOSS_OK;
        return ploss_check_shape_error(name, "a 0-d tensor (one sequence of T×C log_probs, reduction none)", v);
    }
    return ploss_check_row_loss_shape(v, a->N, a->reduction, name);
}

/* A lengths tensor: N values, or for one T×C sequence a 0-d or 1-element one. */
static ploss_status check_lengths_shape(const ploss_view *v, int64_t N, int unbatched, const char *name)
{
    if (unbatched ? v->numel == 1 && v->ndim <= 1 : v->ndim == 1 && v->shape[0] == N)
        return PLOSS_OK;
    char want[96];
    snprintf(want, sizeof want, unbatched ? "one value (0-d or [1]) for one sequence of T×C log_probs"
                                          : "[%lld] (one length per sequence, log_probs' dim 1)",
             (long long)N);
    return ploss_check_shape_error(name, want, v);
}

/* The lengths and labels of the call checked and packed into `pack` (3N int64: input
 * lengths, target lengths, offsets; then the labels as int32), filling p's host members.
 * Only the labels a sequence uses are read (a padded row's first target_lengths[n]). */
static ploss_status pack_targets(ploss_ctx_t *ctx, ploss_ctc_problem *p, const ploss_view *y, const ploss_view *il,
                                 const ploss_view *tl, int unbatched, void **pack)
{
    const int64_t N = p->N;
    const int padded = y->ndim == 2;
    const int64_t S = padded ? y->shape[1] : y->shape[0];
    if (N > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "log_probs: %lld sequences; at most 2^31 - 1 are taken",
                           (long long)N);
    int64_t *len = malloc(sizeof(int64_t) * (size_t)(3 * N + 1));
    int32_t *labels = NULL;
    host_ints h = {NULL, NULL, PLOSS_I64};
    ploss_status st;
    if (!len)
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "host buffer of %lld lengths", (long long)(3 * N));
    int64_t *in_len = len, *tg_len = len + N, *offset = len + 2 * N;
    if ((st = read_lengths(ctx, il, N, in_len)) || (st = read_lengths(ctx, tl, N, tg_len)))
        goto fail;
    int64_t total = 0; /* at most S (1-D) or N·S (padded, each at most S): no overflow */
    p->max_input = p->max_target = 0;
    for (int64_t n = 0; n < N; ++n) {
        if (in_len[n] < 0 || in_len[n] > p->T) {
            st = ploss_error(PLOSS_ERR_SHAPE, "input_lengths: sequence %lld (0-based) has %lld frames, outside [0, %lld] "
                             "(T, log_probs' dim 0)", (long long)n, (long long)in_len[n], (long long)p->T);
            goto fail;
        }
        if (tg_len[n] < 0) {
            st = ploss_error(PLOSS_ERR_SHAPE, "target_lengths: sequence %lld (0-based) has a length of %lld < 0",
                             (long long)n, (long long)tg_len[n]);
            goto fail;
        }
        if (padded && tg_len[n] > S) {
            st = ploss_error(PLOSS_ERR_SHAPE, "target_lengths: sequence %lld (0-based) has %lld labels, more than the "
                             "%lld of a row of the padded N×S target", (long long)n, (long long)tg_len[n], (long long)S);
            goto fail;
        }
        if (!padded && tg_len[n] > S - total) {
            st = ploss_error(PLOSS_ERR_SHAPE, "target: the 1-D (concatenated) target has %lld labels, fewer than the "
                             "sum of target_lengths (more than %lld by sequence %lld, 0-based)", (long long)S,
                             (long long)S, (long long)n);
            goto fail;
        }
        offset[n] = total;
        total += tg_len[n];
        if (in_len[n] > p->max_input)
            p->max_input = in_len[n];
        if (tg_len[n] > p->max_target)
            p->max_target = tg_len[n];
    }
    if (!padded && total != S) {
        st = ploss_error(PLOSS_ERR_SHAPE, "target: the 1-D (concatenated) target has %lld labels, the sum of "
                         "target_lengths is %lld: they must be equal%s", (long long)S, (long long)total,
                         unbatched ? "" : " (a padded target is N×S)");
        goto fail;
    }
    if (total > INT32_MAX) {
        st = ploss_error(PLOSS_ERR_UNSUPPORTED, "target_lengths: %lld labels in all; at most 2^31 - 1 are taken",
                         (long long)total);
        goto fail;
    }
    if (!(labels = malloc(sizeof(int32_t) * (size_t)(total + 1)))) {
        st = ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "host buffer of %lld labels", (long long)total);
        goto fail;
    }
    if ((st = host_ints_open(ctx, y, &h)))
        goto fail;
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t i = 0; i < tg_len[n]; ++i) {
            const int64_t c = host_int(&h, padded ? n * y->strides[0] + i * y->strides[1] : (offset[n] + i) * y->strides[0]);
            if (c < 0 || c >= p->C || c == p->blank) {
                char why[96];
                if (c == p->blank)
                    snprintf(why, sizeof why, "the blank (opts.blank): a target holds labels only");
                else
                    snprintf(why, sizeof why, "outside [0, %lld) (C, log_probs' last dim)", (long long)p->C);
                st = ploss_error(PLOSS_ERR_INVALID_LABEL, "target: label %lld of sequence %lld (0-based, position "
                                 "%lld) is %s", (long long)c, (long long)n, (long long)i, why);
                goto fail;
            }
            labels[offset[n] + i] = (int32_t)c; /* C < 2^31 (the front) */
        }
    }
    host_ints_close(&h);
    p->input_length = in_len;
    p->target_length = tg_len;
    p->offset = offset;
    p->labels = labels;
    p->total_labels = total;
    pack[0] = len;
    pack[1] = labels;
    return PLOSS_OK;
fail:
    host_ints_close(&h);
    free(len);
    free(labels);
    return st;
}

ploss_status ploss_sequence_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                                const ploss_loss_args *a, const ploss_loss_params *o)
{
    ploss_status st;
    if ((st = ploss_check_no_inplace(spec->name, o->inplace)))
        return st;
    const char *xname = spec->input_names[0], *gname = spec->grad_names[0];
    ploss_view x, y, il, tl, l, gl, g;
    if ((st = ploss_view_init(&x, a->inputs[0], xname)) || (st = ploss_view_check_device(&x, ctx, xname)))
        return st;
    if (!ploss_dtype_is_float(x.dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "%s: expected log-probabilities of dtype f32, f16, bf16 or f64, got %s",
                           xname, ploss_dtype_name(x.dtype));
    if (x.ndim != 3 && x.ndim != 2)
        return ploss_check_shape_error(xname, "T×N×C (3 dims: frames, sequences, classes) or T×C for one sequence", &x);
    const int unbatched = x.ndim == 2;
    const int64_t T = x.shape[0], N = unbatched ? 1 : x.shape[1], C = x.shape[x.ndim - 1];
    if (C < 1)
        return ploss_check_shape_error(xname, "C >= 1 classes (the last dim)", &x);
    if (C > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "%s: %lld classes; at most 2^31 - 1 are taken", xname, (long long)C);
    if (o->blank >= C)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.blank: %lld is not a class of log_probs' C = %lld "
                           "(an integer in [0, C))", (long long)o->blank, (long long)C);

    if ((st = check_integers(ctx, a->target, "target", "label sequences", &y)))
        return st;
    if (unbatched ? y.ndim != 1 && !(y.ndim == 2 && y.shape[0] == 1) : !(y.ndim == 1 || (y.ndim == 2 && y.shape[0] == N))) {
        char want[200];
        if (unbatched)
            snprintf(want, sizeof want, "one label sequence for T×C log_probs: 1-D, or [1, S]");
        else
            snprintf(want, sizeof want, "[%lld, S] (padded, a row per sequence) or 1-D (the %lld targets one after another)%s",
                     (long long)N, (long long)N,
                     y.ndim == 2 && y.shape[0] == T ? "; log_probs is T×N×C, frames first: a batch-first N×T×C "
                                                      "tensor goes as its :transpose(1, 2)" : "");
        return ploss_check_shape_error("target", want, &y);
    }
    if ((st = check_integers(ctx, a->tensors[0], "input_lengths", "lengths", &il)) ||
        (st = check_lengths_shape(&il, N, unbatched, "input_lengths")) ||
        (st = check_integers(ctx, a->tensors[1], "target_lengths", "lengths", &tl)) ||
        (st = check_lengths_shape(&tl, N, unbatched, "target_lengths")))
        return st;

    const loss_shape shape = {N, unbatched, o->reduction};
    if ((st = ploss_check_loss_tensors(ctx, pass, a->loss, a->grad_loss, x.dtype == PLOSS_F64 ? PLOSS_F64 : PLOSS_F32,
                                       check_loss_shape, &shape, &l, &gl)))
        return st;
    if (pass != PLOSS_PASS_FORWARD) {
        if (!a->grad_inputs[0])
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", gname);
        if ((st = ploss_view_init(&g, a->grad_inputs[0], gname)) || (st = ploss_view_check_device(&g, ctx, gname)) ||
            (st = ploss_check_dtype(&g, x.dtype, gname)))
            return st;
        if (g.ndim != x.ndim || memcmp(g.shape, x.shape, sizeof(int64_t) * (size_t)x.ndim)) {
            char buf[96], want[128];
            snprintf(want, sizeof want, "the shape of %s, %s", xname, ploss_view_describe(&x, buf, sizeof buf));
            return ploss_check_shape_error(gname, want, &g);
        }
        if ((st = ploss_view_check_writable(&g, gname)))
            return st;
    }
    const ploss_view *ins[5] = {&x, &y, &il, &tl, pass == PLOSS_PASS_BACKWARD ? &gl : NULL};
    const char *in_names[5] = {xname, "target", "input_lengths", "target_lengths", "grad_loss"};
    const ploss_view *outs[2] = {pass != PLOSS_PASS_BACKWARD ? &l : NULL, pass != PLOSS_PASS_FORWARD ? &g : NULL};
    const char *out_names[2] = {"loss", gname};
    if ((st = ploss_check_aliasing(outs, out_names, 2, ins, in_names, 5, -1, -1)))
        return st;

    ploss_ctc_problem p;
    memset(&p, 0, sizeof p);
    p.pass = pass;
    p.reduction = o->reduction;
    p.zero_infinity = o->zero_infinity;
    p.logits = o->logits;
    p.blank = o->blank;
    p.scale = o->scale;
    p.T = T;
    p.N = N;
    p.C = C;
    p.x = x.data; p.x_dtype = x.dtype;
    p.x_st = x.strides[0]; p.x_sn = unbatched ? 0 : x.strides[1]; p.x_sc = x.strides[x.ndim - 1];
    if (pass != PLOSS_PASS_BACKWARD) {
        p.loss = l.data; p.loss_dtype = l.dtype;
        p.l_sn = o->reduction == PLOSS_REDUCTION_NONE && l.ndim == 1 ? l.strides[0] : 0;
    }
    if (pass == PLOSS_PASS_BACKWARD) {
        p.grad_loss = gl.data; p.gl_dtype = gl.dtype;
        p.gl_sn = o->reduction == PLOSS_REDUCTION_NONE && gl.ndim == 1 ? gl.strides[0] : 0;
    }
    if (pass != PLOSS_PASS_FORWARD) {
        p.grad = g.data;
        p.g_st = g.strides[0]; p.g_sn = unbatched ? 0 : g.strides[1]; p.g_sc = g.strides[g.ndim - 1];
    }
    void *pack[2] = {NULL, NULL};
    if ((st = pack_targets(ctx, &p, &y, &il, &tl, unbatched, pack)))
        return st;
    /* the recursions' tables: α and β of every frame of every sequence at most (CUDA), the
     * rows' log-sum-exps with logits; sizes no allocation reaches are refused here, before
     * any product of them can wrap */
    const double table = (double)N * (double)(p.max_input > 2 ? p.max_input : 2) * (double)(2 * p.max_target + 1) +
                         (double)T * (double)N;
    if (table * 8.0 > 0x1p60) {
        free(pack[0]);
        free(pack[1]);
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "%s: the recursions would need %.3g bytes (%lld sequences of up "
                           "to %lld frames and %lld labels)", xname, table * 8.0, (long long)N,
                           (long long)p.max_input, (long long)p.max_target);
    }
    st = ploss_dispatch(ctx, PLOSS_OP_CTC, xname, &p);
    free(pack[0]);
    free(pack[1]);
    return st;
}
