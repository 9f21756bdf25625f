/*
 * linear.c — the one validation path of the linear-layer helpers (bias add, bias
 * gradient) and argmax, in front of the CPU and CUDA backends.  Every check runs before
 * any write.
 */
#include <stdio.h>
#include <string.h>

#include "dispatch.h"
#include "linear.h"

static ploss_status check_ctx(const ploss_ctx_t *ctx)
{
    return ctx ? PLOSS_OK : ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
}

static ploss_status check_float(const ploss_view *v, const char *name)
{
    if (ploss_dtype_is_float(v->dtype))
        return PLOSS_OK;
    return ploss_error(PLOSS_ERR_DTYPE, "%s: expected f32, f16, bf16 or f64, got %s", name,
                       ploss_dtype_name(v->dtype));
}

/* A 2-D N×C float matrix and a C-vector of the same dtype on the context's device. */
static ploss_status check_bias_pair(ploss_ctx_t *ctx, ploss_view *m, const DLTensor *mt, const char *mname,
                                    ploss_view *v, const DLTensor *vt, const char *vname)
{
    ploss_status st;
    char b[200];
    if ((st = check_ctx(ctx)) || (st = ploss_view_init(m, mt, mname)) ||
        (st = ploss_view_check_device(m, ctx, mname)) || (st = check_float(m, mname)))
        return st;
    if (m->ndim != 2)
        return ploss_error(PLOSS_ERR_SHAPE, "%s: expected a 2-D N×C matrix, got %s", mname,
                           ploss_view_describe(m, b, sizeof b));
    if ((st = ploss_view_init(v, vt, vname)) || (st = ploss_view_check_device(v, ctx, vname)))
        return st;
    if (v->dtype != m->dtype)
        return ploss_error(PLOSS_ERR_DTYPE, "%s: expected the dtype of %s (%s), got %s", vname, mname,
                           ploss_dtype_name(m->dtype), ploss_dtype_name(v->dtype));
    if (v->ndim != 1 || v->shape[0] != m->shape[1])
        return ploss_error(PLOSS_ERR_SHAPE, "%s: expected shape [%lld] (one value per column of %s), got %s",
                           vname, (long long)m->shape[1], mname, ploss_view_describe(v, b, sizeof b));
    return PLOSS_OK;
}

static void fill_bias(ploss_bias_problem *p, const ploss_view *m, const ploss_view *v)
{
    memset(p, 0, sizeof *p);
    p->n = m->shape[0];
    p->c = m->shape[1];
    p->dtype = m->dtype;
    p->m = m->data; p->m_sn = m->strides[0]; p->m_sc = m->strides[1];
    p->v = v->data; p->v_s = v->strides[0];
}

ploss_status ploss_bias_add(ploss_ctx_t *ctx, DLTensor *x, const DLTensor *bias)
{
    ploss_clear_error();
    ploss_view vx, vb;
    ploss_status st;
    if ((st = check_bias_pair(ctx, &vx, x, "x", &vb, bias, "bias")) ||
        (st = ploss_view_check_writable(&vx, "x")) || (st = ploss_check_no_alias(&vx, "x", &vb, "bias")))
        return st;
    ploss_bias_problem p;
    fill_bias(&p, &vx, &vb);
    if ((st = ploss_enter_device(ctx, "x")) || vx.numel == 0)
        return st;
    return ploss_dispatch(ctx, PLOSS_OP_BIAS_ADD, "x", &p);
}

ploss_status ploss_bias_grad(ploss_ctx_t *ctx, const DLTensor *grad_output, DLTensor *grad_bias)
{
    ploss_clear_error();
    ploss_view vg, vb;
    ploss_status st;
    if ((st = check_bias_pair(ctx, &vg, grad_output, "grad_output", &vb, grad_bias, "grad_bias")) ||
        (st = ploss_view_check_writable(&vb, "grad_bias")) ||
        (st = ploss_check_no_alias(&vb, "grad_bias", &vg, "grad_output")))
        return st;
    ploss_bias_problem p;
    fill_bias(&p, &vg, &vb);
    if ((st = ploss_enter_device(ctx, "grad_bias")) || vb.numel == 0)
        return st;
    return ploss_dispatch(ctx, PLOSS_OP_BIAS_GRAD, "grad_bias", &p);
}

ploss_status ploss_argmax(ploss_ctx_t *ctx, const DLTensor *input, DLTensor *indices)
{
    ploss_clear_error();
    ploss_view x, o;
    ploss_status st;
    char b[200];
    if ((st = check_ctx(ctx)) || (st = ploss_view_init(&x, input, "input")) ||
        (st = ploss_view_check_device(&x, ctx, "input")) || (st = check_float(&x, "input")))
        return st;
    if (x.ndim < 2 || x.shape[1] < 1)
        return ploss_error(PLOSS_ERR_SHAPE, "input: expected N×C or N×C×d1×…×dk with C >= 1, got %s",
                           ploss_view_describe(&x, b, sizeof b));
    if ((st = ploss_view_init(&o, indices, "indices")) || (st = ploss_view_check_device(&o, ctx, "indices")))
        return st;
    if (o.dtype != PLOSS_I64)
        return ploss_error(PLOSS_ERR_DTYPE, "indices: expected i64, got %s", ploss_dtype_name(o.dtype));
    /* the input without its class axis: the sample space */
    ploss_view xs = x;
    xs.ndim = x.ndim - 1;
    xs.shape[0] = x.shape[0];
    xs.strides[0] = x.strides[0];
    for (int d = 2; d < x.ndim; ++d) {
        xs.shape[d - 1] = x.shape[d];
        xs.strides[d - 1] = x.strides[d];
    }
    xs.numel = x.numel / x.shape[1];
    if (x.numel == 0) {
        xs.numel = 1;
        for (int d = 0; d < xs.ndim; ++d)
            xs.numel *= xs.shape[d];
    }
    if (!ploss_same_shape(&o, &xs)) {
        char w[200];
        ploss_view want = xs;
        want.dtype = PLOSS_I64;
        return ploss_error(PLOSS_ERR_SHAPE, "indices: expected %s (the input's shape without axis 1), got %s",
                           ploss_view_describe(&want, w, sizeof w), ploss_view_describe(&o, b, sizeof b));
    }
    if ((st = ploss_view_check_writable(&o, "indices")) || (st = ploss_check_no_alias(&o, "indices", &x, "input")))
        return st;
    ploss_argmax_problem p;
    memset(&p, 0, sizeof p);
    p.C = x.shape[1];
    p.x_sc = x.strides[1];
    ploss_ew_operand ops[2];
    const ploss_view *views[2] = {&xs, &o};
    ploss_ew_build(&p.samples, ops, views, 2);
    p.x = ops[0];
    p.out = ops[1];
    if ((st = ploss_enter_device(ctx, "indices")) || p.samples.numel == 0)
        return st;
    return ploss_dispatch(ctx, PLOSS_OP_ARGMAX, "indices", &p);
}
