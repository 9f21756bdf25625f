/*
 * ema.c — the one validation path of the multi-tensor EMA update and swap in front of the
 * CPU and CUDA backends.  Every check runs before any write.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "elementwise_space.h"
#include "ema.h"

void ploss_ema_opts_init(ploss_ema_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->decay = 0.9999;
    o->warmup = 1;
    o->opts_tag = PLOSS_OPTS_TAG;
}

/* Checks pair i of (a, b) (names an, bn in messages) and fills t. */
static ploss_status check_pair(ploss_ctx_t *ctx, const DLTensor *a, const DLTensor *b, int64_t i, const char *an,
                               const char *bn, ploss_view *va, ploss_view *vb, ploss_ema_tensor *t)
{
    char na[48], nb[48];
    snprintf(na, sizeof na, "%s[%lld]", an, (long long)i);
    snprintf(nb, sizeof nb, "%s[%lld]", bn, (long long)i);
    ploss_status st;
    if ((st = ploss_view_init(va, a, na)) || (st = ploss_view_check_device(va, ctx, na)) ||
        (st = ploss_view_init(vb, b, nb)) || (st = ploss_view_check_device(vb, ctx, nb)))
        return st;
    if (vb->dtype != va->dtype)
        return ploss_error(PLOSS_ERR_DTYPE, "%s: expected %s's dtype %s, got %s", nb, na, ploss_dtype_name(va->dtype),
                           ploss_dtype_name(vb->dtype));
    if (!ploss_same_shape(vb, va))
        return ploss_shape_mismatch(nb, vb, na, va);
    if (!ploss_view_is_contiguous(va) || !ploss_view_is_contiguous(vb))
        return ploss_error(PLOSS_ERR_LAYOUT, "%s: expected a contiguous tensor (:contiguous())",
                           ploss_view_is_contiguous(va) ? nb : na);
    t->shadow = va->data;
    t->param = vb->data;
    t->numel = va->numel;
    t->dtype = va->dtype;
    return PLOSS_OK;
}

/* Validate n pairs (a[i] written; b[i] written too when both_written), then run `mode`. */
static ploss_status run(ploss_ctx_t *ctx, ploss_ema_mode mode, double one_minus_d, const DLTensor *const *a,
                        const DLTensor *const *b, int64_t n, const char *an, const char *bn, int both_written)
{
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    if (n < 0)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "n: %lld tensors, expected >= 0", (long long)n);
    if (n > 0 && (!a || !b))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: list is NULL", a ? bn : an);
    if (n == 0)
        return ploss_enter_device(ctx, an);
    ploss_ema_tensor *ts = malloc((size_t)n * sizeof *ts);
    ploss_view *views = malloc((size_t)n * 2 * sizeof *views);
    ploss_status st = PLOSS_OK;
    if (!ts || !views) {
        st = ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "%s: host lists of %lld tensors", an, (long long)n);
        goto done;
    }
    for (int64_t i = 0; i < n && !st; ++i)
        st = check_pair(ctx, a[i], b[i], i, an, bn, &views[2 * i], &views[2 * i + 1], &ts[i]);
    /* a written tensor may overlap no other tensor of either list */
    for (int64_t i = 0; i < 2 * n && !st; ++i) {
        const int written = i % 2 == 0 || both_written;
        for (int64_t j = i + 1; j < 2 * n && !st; ++j) {
            if (!written && !(j % 2 == 0 || both_written))
                continue;
            if (ploss_view_overlaps(&views[i], &views[j])) {
                char ni[48], nj[48];
                snprintf(ni, sizeof ni, "%s[%lld]", i % 2 ? bn : an, (long long)(i / 2));
                snprintf(nj, sizeof nj, "%s[%lld]", j % 2 ? bn : an, (long long)(j / 2));
                st = ploss_error(PLOSS_ERR_ALIAS, "%s: overlaps %s", written ? ni : nj, written ? nj : ni);
            }
        }
    }
    if (!st) {
        const ploss_ema_problem p = {mode, one_minus_d, n, ts};
        st = ploss_dispatch(ctx, PLOSS_OP_EMA, an, &p);
    }
done:
    free(ts);
    free(views);
    return st;
}

ploss_status ploss_ema_update(ploss_ctx_t *ctx, DLTensor *const *shadows, const DLTensor *const *params, int64_t n,
                              int64_t updates, const ploss_ema_opts *opts)
{
    ploss_clear_error();
    ploss_ema_opts o;
    ploss_ema_opts_init(&o);
    if (opts)
        o = *opts;
    if (o.opts_tag != PLOSS_OPTS_TAG)
        return ploss_opts_tag_error(o.opts_tag, "ploss_ema_opts_init");
    ploss_status st;
    if (!(o.decay >= 0.0 && o.decay <= 1.0))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.decay: %s is not in [0, 1]", PLOSS_SHOWN(o.decay));
    if ((st = ploss_check_flag(o.warmup, "opts.warmup")))
        return st;
    if (updates < 0)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "updates: %lld is negative (0 before the first update)",
                           (long long)updates);
    double d = o.decay;
    if (o.warmup) {
        const double w = (1.0 + (double)updates) / (10.0 + (double)updates);
        d = w < d ? w : d;
    }
    return run(ctx, PLOSS_EMA_UPDATE, 1.0 - d, (const DLTensor *const *)shadows, params, n, "shadows", "params", 0);
}

ploss_status ploss_ema_swap(ploss_ctx_t *ctx, DLTensor *const *a, DLTensor *const *b, int64_t n)
{
    ploss_clear_error();
    return run(ctx, PLOSS_EMA_SWAP, 0.0, (const DLTensor *const *)a, (const DLTensor *const *)b, n, "a", "b", 1);
}
