/*
 * loss.c — from a loss's entry point (core/losses.c) to the front of its kernel shape.
 */
#include <math.h>

#include "loss.h"

/* The engine of each kernel shape: its name, its front and the losses it computes. */
static const struct {
    const char *name;
    ploss_status (*run)(ploss_ctx_t *, ploss_pass, const ploss_loss_spec *, const ploss_loss_args *,
                        const ploss_loss_params *);
    int (*computes)(ploss_policy);
} engines[PLOSS_SHAPE_COUNT] = {
    [PLOSS_SHAPE_ROWS] = {"rows", ploss_rows_run, ploss_rows_computes},
    [PLOSS_SHAPE_ELEMENTWISE] = {"elementwise", ploss_elementwise_run, ploss_elementwise_computes},
    [PLOSS_SHAPE_PAIRS] = {"pairs", ploss_pairs_run, ploss_pairs_computes},
    [PLOSS_SHAPE_BOXES] = {"boxes", ploss_boxes_run, ploss_boxes_computes},
    [PLOSS_SHAPE_REGION] = {"region", ploss_region_run, ploss_region_computes},
    [PLOSS_SHAPE_MARGIN] = {"margin", ploss_margin_run, ploss_margin_computes},
    [PLOSS_SHAPE_SEQUENCE] = {"sequence", ploss_sequence_run, ploss_sequence_computes},
};

int ploss_engine_computes(ploss_shape shape, ploss_policy policy)
{
    return (unsigned)shape < PLOSS_SHAPE_COUNT && engines[shape].computes(policy);
}

ploss_status ploss_check_common_options(ploss_reduction reduction, double scale, int inplace)
{
    if ((unsigned)reduction >= PLOSS_REDUCTION_COUNT)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.reduction: %d is not none (0), mean (1) or sum (2)",
                           (int)reduction);
    /* scale and inplace are read by the fused pass only, but checked by every pass: a
     * struct with a bad value (not initialised by *_opts_init) is refused at its first use */
    if (!isfinite(scale))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.scale: %s is not finite", PLOSS_SHOWN(scale));
    return ploss_check_flag(inplace, "opts.inplace");
}

ploss_status ploss_run_loss(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec, const ploss_loss_args *a,
                            const ploss_loss_params *p)
{
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    if ((unsigned)spec->shape >= PLOSS_SHAPE_COUNT)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: no kernel shape %d", spec->name, (int)spec->shape);
    /* a loss described but without its maths in its engine (docs/ADDING_A_LOSS.md) */
    if (!ploss_engine_computes(spec->shape, spec->policy))
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "%s: the %s engine has no maths for this loss", spec->name,
                           engines[spec->shape].name);
    /* a tensor the loss cannot go without (PC-softmax's priors, CTC's lengths, the
     * target-weighted MSE's weight) given as NULL: refused before any engine reads the call,
     * not taken for the optional tensor's default */
    for (int k = 0; k < spec->ntensors; ++k)
        if (spec->tensors[k].required && !a->tensors[k])
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", spec->tensors[k].name);
    return engines[spec->shape].run(ctx, pass, spec, a, p);
}
