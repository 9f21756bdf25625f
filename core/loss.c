/*
 * loss.c — from a loss's entry point (core/losses.c) to the front of its kernel shape.
 */
#include <math.h>

#include "loss.h"

typedef ploss_status (*ploss_front)(ploss_ctx_t *, ploss_pass, const ploss_loss_spec *, const ploss_loss_args *,
                                    const ploss_loss_params *);

static const ploss_front fronts[PLOSS_SHAPE_COUNT] = {
    [PLOSS_SHAPE_ROWS] = ploss_rows_run,
    [PLOSS_SHAPE_ELEMENTWISE] = ploss_elementwise_run,
    [PLOSS_SHAPE_PAIRS] = ploss_pairs_run,
    [PLOSS_SHAPE_BOXES] = ploss_boxes_run,
    [PLOSS_SHAPE_REGION] = ploss_region_run,
    [PLOSS_SHAPE_MARGIN] = ploss_margin_run,
};

static int (*const computes[PLOSS_SHAPE_COUNT])(ploss_policy) = {
    [PLOSS_SHAPE_ROWS] = ploss_rows_computes,
    [PLOSS_SHAPE_ELEMENTWISE] = ploss_elementwise_computes,
    [PLOSS_SHAPE_PAIRS] = ploss_pairs_computes,
    [PLOSS_SHAPE_BOXES] = ploss_boxes_computes,
    [PLOSS_SHAPE_REGION] = ploss_region_computes,
    [PLOSS_SHAPE_MARGIN] = ploss_margin_computes,
};

static const char *const shape_names[PLOSS_SHAPE_COUNT] = {
    [PLOSS_SHAPE_ROWS] = "rows", [PLOSS_SHAPE_ELEMENTWISE] = "elementwise", [PLOSS_SHAPE_PAIRS] = "pairs",
    [PLOSS_SHAPE_BOXES] = "boxes", [PLOSS_SHAPE_REGION] = "region", [PLOSS_SHAPE_MARGIN] = "margin",
};

int ploss_engine_computes(ploss_shape shape, ploss_policy policy)
{
    return (unsigned)shape < PLOSS_SHAPE_COUNT && computes[shape](policy);
}

ploss_status ploss_check_common_options(ploss_pass pass, ploss_reduction reduction, double scale, int inplace)
{
    if ((unsigned)reduction >= PLOSS_REDUCTION_COUNT)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.reduction: %d is not none (0), mean (1) or sum (2)",
                           (int)reduction);
    if (pass == PLOSS_PASS_FUSED && !isfinite(scale))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.scale: %g is not finite", ploss_shown(scale));
    if (pass == PLOSS_PASS_FUSED && inplace != 0 && inplace != 1)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "opts.inplace: %d is not 0 or 1", inplace);
    return PLOSS_OK;
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
                           shape_names[spec->shape]);
    return fronts[spec->shape](ctx, pass, spec, a, p);
}
