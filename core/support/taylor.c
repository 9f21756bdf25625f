/*
 * taylor.c — the one validation path in front of the CPU and CUDA backends of the Taylor
 * softmax and log-Taylor softmax ops.  Every check runs before any write.
 */
#include <string.h>

#include "dispatch.h"
#include "loss_check.h"
#include "taylor.h"

void ploss_taylor_softmax_opts_init(ploss_taylor_softmax_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->n = 2;
    o->dim = 1;
    o->opts_tag = PLOSS_OPTS_TAG;
}

/* A tensor of the input's shape and dtype: its (n, j, s) strides around axis `dim`. */
static ploss_status rows_of(const ploss_view *v, int dim, const char *name, int64_t *sn, int64_t *sc,
                            int64_t *ss)
{
    ploss_status st;
    if ((st = ploss_check_collapse(v, 0, dim, name, sn)) || (st = ploss_check_collapse(v, dim + 1, v->ndim, name, ss)))
        return st;
    *sc = v->strides[dim];
    return PLOSS_OK;
}

static ploss_status same_as_input(const ploss_view *v, const ploss_view *x, const char *name)
{
    ploss_status st;
    if ((st = ploss_check_dtype(v, x->dtype, name)))
        return st;
    int same = v->ndim == x->ndim;
    for (int d = 0; same && d < x->ndim; ++d)
        same = v->shape[d] == x->shape[d];
    return same ? PLOSS_OK : ploss_check_shape_error(name, "the input's shape", v);
}

static ploss_status run(ploss_ctx_t *ctx, int log, const DLTensor *input, const DLTensor *grad_output,
                        const ploss_taylor_softmax_opts *user, DLTensor *out)
{
    ploss_clear_error();
    ploss_taylor_softmax_opts o;
    ploss_taylor_softmax_opts_init(&o);
    if (user)
        o = *user;
    if (o.opts_tag != PLOSS_OPTS_TAG)
        return ploss_opts_tag_error(o.opts_tag, "ploss_taylor_softmax_opts_init");
    const int backward = grad_output != NULL;
    const char *out_name = backward ? "grad_input" : "output";
    ploss_status st;
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    if (o.n < 2 || o.n > 64 || o.n % 2)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.n: %d is not an even Taylor order in [2, 64] (odd orders have real roots)", o.n);

    ploss_view x, g, v;
    if ((st = ploss_view_init(&x, input, "input")) || (st = ploss_view_check_device(&x, ctx, "input")))
        return st;
    if (!ploss_dtype_is_float(x.dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "input: expected f32, f16, bf16 or f64, got %s", ploss_dtype_name(x.dtype));
    if (x.ndim < 1)
        return ploss_check_shape_error("input", "rank >= 1", &x);
    const int dim = o.dim < 0 ? o.dim + x.ndim : o.dim;
    if (dim < 0 || dim >= x.ndim)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.dim: %d is out of range for an input of rank %d",
                           o.dim, x.ndim);
    if (backward && ((st = ploss_view_init(&g, grad_output, "grad_output")) ||
                     (st = ploss_view_check_device(&g, ctx, "grad_output")) ||
                     (st = same_as_input(&g, &x, "grad_output"))))
        return st;
    if (!out)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", out_name);
    if ((st = ploss_view_init(&v, out, out_name)) || (st = ploss_view_check_device(&v, ctx, out_name)) ||
        (st = same_as_input(&v, &x, out_name)) || (st = ploss_view_check_writable(&v, out_name)) ||
        (st = ploss_check_no_alias(&v, out_name, &x, "input")) ||
        (backward && (st = ploss_check_no_alias(&v, out_name, &g, "grad_output"))))
        return st;

    ploss_taylor_problem p;
    memset(&p, 0, sizeof p);
    p.order = o.n;
    p.log = log;
    p.backward = backward;
    p.dtype = x.dtype;
    p.C = x.shape[dim];
    p.N = p.S = 1;
    for (int d = 0; d < dim; ++d)
        p.N *= x.shape[d];
    for (int d = dim + 1; d < x.ndim; ++d)
        p.S *= x.shape[d];
    p.x = x.data;
    p.out = v.data;
    if ((st = rows_of(&x, dim, "input", &p.x_sn, &p.x_sc, &p.x_ss)) ||
        (st = rows_of(&v, dim, out_name, &p.o_sn, &p.o_sc, &p.o_ss)))
        return st;
    if (backward) {
        p.g = g.data;
        if ((st = rows_of(&g, dim, "grad_output", &p.g_sn, &p.g_sc, &p.g_ss)))
            return st;
    }
    if (x.numel == 0) /* nothing to write; N·S rows of C = 0 entries may still be very many */
        return PLOSS_OK;

    return ploss_dispatch(ctx, PLOSS_OP_TAYLOR_SOFTMAX, "input", &p);
}

ploss_status ploss_taylor_softmax_forward(ploss_ctx_t *ctx, const DLTensor *input,
                                          const ploss_taylor_softmax_opts *opts, DLTensor *output)
{
    return run(ctx, 0, input, NULL, opts, output);
}

ploss_status ploss_taylor_softmax_backward(ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *grad_output,
                                           const ploss_taylor_softmax_opts *opts, DLTensor *grad_input)
{
    if (!grad_output) {
        ploss_clear_error();
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "grad_output: tensor is NULL");
    }
    return run(ctx, 0, input, grad_output, opts, grad_input);
}

ploss_status ploss_log_taylor_softmax_forward(ploss_ctx_t *ctx, const DLTensor *input,
                                              const ploss_taylor_softmax_opts *opts, DLTensor *output)
{
    return run(ctx, 1, input, NULL, opts, output);
}

ploss_status ploss_log_taylor_softmax_backward(ploss_ctx_t *ctx, const DLTensor *input,
                                               const DLTensor *grad_output, const ploss_taylor_softmax_opts *opts,
                                               DLTensor *grad_input)
{
    if (!grad_output) {
        ploss_clear_error();
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "grad_output: tensor is NULL");
    }
    return run(ctx, 1, input, grad_output, opts, grad_input);
}
