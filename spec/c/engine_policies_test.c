/*
 * engine_policies_test.c — each kernel shape's engine computes exactly the losses whose
 * descriptions name that shape (PLOSS_POLICY_SHAPES, generated from them), and
 * ploss_run_loss refuses any other policy with UNSUPPORTED before touching a tensor: a
 * loss described but not written into its engine is an error, never another loss's
 * results (the engines map policies to their maths with switches).
 */
#include "check.h"
#include "loss.h"

int main(void)
{
    static const ploss_shape shape_of[PLOSS_POLICY_COUNT] = PLOSS_POLICY_SHAPES;
    ploss_ctx_t *ctx;
    DLDevice cpu = {kDLCPU, 0};
    if (ploss_ctx_create(cpu, &ctx) != PLOSS_OK) {
        fprintf(stderr, "ploss_ctx_create: %s\n", ploss_last_error());
        return 1;
    }
    const ploss_loss_args args = {0}; /* no tensors: a refusal must come first */
    const ploss_loss_params params = {0};
    for (int p = 0; p < PLOSS_POLICY_COUNT; ++p)
        for (int s = 0; s < PLOSS_SHAPE_COUNT; ++s) {
            const int own = shape_of[p] == (ploss_shape)s;
            if (ploss_engine_computes((ploss_shape)s, (ploss_policy)p) != own)
                fprintf(stderr, "policy %d, shape %d: computes %d, its description's shape %d\n", p, s,
                        ploss_engine_computes((ploss_shape)s, (ploss_policy)p), (int)shape_of[p]);
            CHECK(ploss_engine_computes((ploss_shape)s, (ploss_policy)p) == own);
            if (!own) {
                const ploss_loss_spec spec = {.name = "probe", .shape = (ploss_shape)s, .policy = (ploss_policy)p};
                CHECK_STATUS(ploss_run_loss(ctx, PLOSS_PASS_FUSED, &spec, &args, &params), PLOSS_ERR_UNSUPPORTED,
                             "probe: the ");
                CHECK(strstr(ploss_last_error(), "engine has no maths for this loss") != NULL);
            }
        }
    ploss_ctx_destroy(ctx);
    return check_report("engine_policies");
}
