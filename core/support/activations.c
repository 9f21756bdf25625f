/*
 * activations.c — the one validation path in front of the CPU and CUDA backends of the
 * activations swish, hard-swish and mish.  Every check runs before any write.
 */
#include <string.h>

#include "dispatch.h"
#include "activations.h"

static ploss_status run(ploss_ctx_t *ctx, ploss_activation act, int backward, const DLTensor *input,
                        const DLTensor *grad_output, DLTensor *out, int inplace)
{
    ploss_clear_error();
    const char *out_name = backward ? "grad_input" : "output";
    ploss_status st;
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    if ((unsigned)act >= PLOSS_ACTIVATION_COUNT)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "act: %d is not swish (0), hard_swish (1) or mish (2)", (int)act);
    if ((st = ploss_check_flag(inplace, "inplace")))
        return st;
    ploss_view x, gy, o;
    if ((st = ploss_view_init(&x, input, "input")) || (st = ploss_view_check_device(&x, ctx, "input")))
        return st;
    if (!ploss_dtype_is_float(x.dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "input: expected f32, f16, bf16 or f64, got %s",
                           ploss_dtype_name(x.dtype));
    if (backward) {
        if ((st = ploss_view_init(&gy, grad_output, "grad_output")) ||
            (st = ploss_view_check_device(&gy, ctx, "grad_output")))
            return st;
        if (gy.dtype != x.dtype)
            return ploss_error(PLOSS_ERR_DTYPE, "grad_output: expected the input's dtype %s, got %s",
                               ploss_dtype_name(x.dtype), ploss_dtype_name(gy.dtype));
        if (!ploss_same_shape(&gy, &x))
            return ploss_shape_mismatch("grad_output", &gy, "input", &x);
    }
    if ((st = ploss_view_init(&o, out, out_name)) || (st = ploss_view_check_device(&o, ctx, out_name)))
        return st;
    if (o.dtype != x.dtype)
        return ploss_error(PLOSS_ERR_DTYPE, "%s: expected the input's dtype %s, got %s", out_name,
                           ploss_dtype_name(x.dtype), ploss_dtype_name(o.dtype));
    if (!ploss_same_shape(&o, &x))
        return ploss_shape_mismatch(out_name, &o, "input", &x);
    if ((st = ploss_view_check_writable(&o, out_name)))
        return st;
    /* aliasing: the output may be exactly an input when asked, never partly overlap one */
    const ploss_view *ins[2] = {&x, backward ? &gy : NULL};
    const char *in_names[2] = {"input", "grad_output"};
    for (int i = 0; i < 2; ++i) {
        if (!ins[i] || (inplace && ploss_view_same(&o, ins[i])))
            continue;
        if (ploss_view_overlaps(&o, ins[i]))
            return ploss_error(PLOSS_ERR_ALIAS,
                               "%s: overlaps the memory of %s (their spans meet: the bytes from each "
                               "one's first to its last element); pass a separate buffer%s", out_name,
                               in_names[i],
                               inplace ? " or the same tensor (same data, shape and strides)"
                                       : ", or ask for the in-place form (inplace = 1) with the same tensor");
    }

    ploss_act_problem p;
    memset(&p, 0, sizeof p);
    p.act = act;
    p.backward = backward;
    p.dtype = x.dtype;
    const ploss_view *views[PLOSS_ACT_OPERANDS] = {&x, backward ? &gy : NULL, &o};
    ploss_ew_build(&p.shape, p.op, views, PLOSS_ACT_OPERANDS);
    if ((st = ploss_enter_device(ctx, out_name)) || p.shape.numel == 0)
        return st;
    return ploss_dispatch(ctx, PLOSS_OP_ACTIVATION, out_name, &p);
}

ploss_status ploss_activation_forward(ploss_ctx_t *ctx, ploss_activation act, const DLTensor *input,
                                      DLTensor *output, int inplace)
{
    return run(ctx, act, 0, input, NULL, output, inplace);
}

ploss_status ploss_activation_backward(ploss_ctx_t *ctx, ploss_activation act, const DLTensor *input,
                                       const DLTensor *grad_output, DLTensor *grad_input, int inplace)
{
    return run(ctx, act, 1, input, grad_output, grad_input, inplace);
}
