/*
 * api_conventions_test.c — the conventions at the top of ploss.h, as a C caller meets them:
 * a failing call that returns a pointer through `out` sets it to NULL; the options that only
 * the fused pass reads (scale, inplace) are checked by every pass, so a struct not made by
 * *_opts_init is refused at its first use (its opts_tag), with nothing written; a loss whose inputs each get
 * a gradient refuses inplace = 1 in every pass; ploss_last_error() keeps a failed call's
 * message until a later call succeeds; the optimisers' options are checked alone as their
 * steps check them; a row loss's one sample of C classes (a rank-1
 * input) is validated as any descriptor is.
 */
#include <math.h>

#include "check.h"

int main(void)
{
    ploss_ctx_t *ctx = (ploss_ctx_t *)1;
    /* a CPU context of device id 1 is refused, and the pointer cleared */
    CHECK(ploss_ctx_create((DLDevice){kDLCPU, 1}, &ctx) != PLOSS_OK);
    CHECK(ctx == NULL);
    CHECK_OK(ploss_ctx_create((DLDevice){kDLCPU, 0}, &ctx));
    void *p = (void *)1;
    CHECK_STATUS(ploss_alloc(NULL, 8, &p), PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    CHECK(p == NULL);

    float x[4] = {0.5f, -1.0f, 2.0f, 0.0f}, y[4] = {0.0f, 1.0f, 1.5f, -2.0f}, loss = 7.0f, g[4];
    int64_t s4[1] = {4};
    DLTensor X = cpu_tensor(x, dt_f32, 1, s4, NULL), Y = cpu_tensor(y, dt_f32, 1, s4, NULL);
    DLTensor L = cpu_tensor(&loss, dt_f32, 0, NULL, NULL), G = cpu_tensor(g, dt_f32, 1, s4, NULL);
    ploss_mse_loss_opts o;
    ploss_mse_loss_opts_init(&o);
    o.inplace = 7; /* a truthy value that is not 1 */
    CHECK_STATUS(ploss_mse_loss_forward(ctx, &X, &Y, NULL, &o, &L), PLOSS_ERR_INVALID_ARGUMENT, "opts.inplace");
    CHECK(loss == 7.0f);
    ploss_mse_loss_opts_init(&o);
    o.scale = NAN;
    CHECK_STATUS(ploss_mse_loss_forward(ctx, &X, &Y, NULL, &o, &L), PLOSS_ERR_INVALID_ARGUMENT, "opts.scale: nan is not finite");
    CHECK(loss == 7.0f);
    float up = 1.0f;
    DLTensor U = cpu_tensor(&up, dt_f32, 0, NULL, NULL);
    memset(g, 0x5a, sizeof g);
    CHECK_STATUS(ploss_mse_loss_backward(ctx, &X, &Y, NULL, &o, &U, &G), PLOSS_ERR_INVALID_ARGUMENT, "opts.scale");
    unsigned char poison[sizeof g];
    memset(poison, 0x5a, sizeof poison);
    CHECK(memcmp(g, poison, sizeof g) == 0);
    /* the message stays until a call succeeds, then is "" */
    CHECK(strstr(ploss_last_error(), "opts.scale") != NULL);
    CHECK(strcmp(ploss_status_string(PLOSS_OK), "PLOSS_OK") == 0);
    CHECK(strstr(ploss_last_error(), "opts.scale") != NULL);
    ploss_mse_loss_opts_init(&o);
    CHECK_OK(ploss_mse_loss_forward(ctx, &X, &Y, NULL, &o, &L));
    CHECK(fabsf(loss - (0.25f + 4.0f + 0.25f + 4.0f) / 4.0f) < 1e-6f);
    CHECK(ploss_last_error()[0] == '\0');

    /* a struct filled by hand (its other fields 0, not their defaults: scale 0 would zero the
     * gradient) is refused by every entry point, with nothing written */
    ploss_mse_loss_opts hand = {.reduction = PLOSS_REDUCTION_SUM};
    loss = 7.0f;
    memset(g, 0x5a, sizeof g);
    CHECK_STATUS(ploss_mse_loss_fused(ctx, &X, &Y, NULL, &hand, &L, &G), PLOSS_ERR_INVALID_ARGUMENT,
                 "opts: not filled by ploss_mse_loss_opts_init()");
    CHECK(loss == 7.0f && memcmp(g, poison, sizeof g) == 0);
    ploss_sgd_opts sgd = {0};
    CHECK_STATUS(ploss_sgd_step(ctx, &G, &X, NULL, 1, &sgd), PLOSS_ERR_INVALID_ARGUMENT,
                 "opts: not filled by ploss_sgd_opts_init()");
    CHECK(memcmp(g, poison, sizeof g) == 0);
    CHECK_STATUS(ploss_sgd_opts_check(&sgd), PLOSS_ERR_INVALID_ARGUMENT, "opts: not filled by ploss_sgd_opts_init()");
    /* the optimisers' options checked alone (a caller holding them before the first step):
     * the step's own checks and messages */
    ploss_sgd_opts_init(&sgd);
    CHECK_OK(ploss_sgd_opts_check(&sgd));
    CHECK_OK(ploss_sgd_opts_check(NULL));
    sgd.nesterov = 1;
    CHECK_STATUS(ploss_sgd_opts_check(&sgd), PLOSS_ERR_INVALID_ARGUMENT, "opts.nesterov: needs momentum > 0");
    ploss_adam_opts adam;
    ploss_adam_opts_init(&adam);
    CHECK_OK(ploss_adam_opts_check(&adam));
    adam.beta2 = 1.0;
    CHECK_STATUS(ploss_adam_opts_check(&adam), PLOSS_ERR_INVALID_ARGUMENT, "opts.beta2: 1 is outside [0, 1)");
    ploss_mse_loss_opts_init(&hand);
    CHECK(hand.opts_tag == PLOSS_OPTS_TAG);
    CHECK_OK(ploss_mse_loss_forward(ctx, &X, &Y, NULL, NULL, &L)); /* NULL: no weight, every default */
    p = (void *)1;
    CHECK_STATUS(ploss_alloc(ctx, SIZE_MAX, &p), PLOSS_ERR_OUT_OF_MEMORY, "");
    CHECK(p == NULL);
    /* the getters given no context: no device, -1, and the message */
    const DLDevice none = ploss_ctx_device(NULL);
    CHECK(none.device_type == 0 && none.device_id == -1);
    CHECK(strstr(ploss_last_error(), "ctx: context is NULL") != NULL);
    CHECK(ploss_ctx_deterministic(NULL) == -1);
    CHECK(ploss_ctx_stream(NULL) == NULL);
    /* a getter that succeeds leaves the message of the failed call before it */
    CHECK(ploss_ctx_deterministic(ctx) == 1 && ploss_ctx_device(ctx).device_type == kDLCPU);
    CHECK(strstr(ploss_last_error(), "ctx: context is NULL") != NULL);

    /* inplace = 1 is refused by every pass of a loss whose inputs each get a gradient */
    float a[2] = {0, 0}, pp[2] = {1, 0}, n[2] = {3, 0}, gl = 7.0f;
    int64_t s12[2] = {1, 2};
    DLTensor A = cpu_tensor(a, dt_f32, 2, s12, NULL), P = cpu_tensor(pp, dt_f32, 2, s12, NULL),
             N = cpu_tensor(n, dt_f32, 2, s12, NULL), GL = cpu_tensor(&gl, dt_f32, 0, NULL, NULL);
    ploss_triplet_margin_opts to;
    ploss_triplet_margin_opts_init(&to);
    to.inplace = 1;
    CHECK_STATUS(ploss_triplet_margin_forward(ctx, &A, &P, &N, &to, &GL), PLOSS_ERR_INVALID_ARGUMENT,
                 "opts.inplace: triplet_margin has no in-place gradient");
    CHECK(gl == 7.0f);
    ploss_triplet_margin_opts_init(&to);
    CHECK_OK(ploss_triplet_margin_forward(ctx, &A, &P, &N, &to, &GL));
    CHECK(fabsf(gl - 0.0f) < 1e-6f); /* d_ap = 1, d_an = 3: max(0, 1 − 3 + 1) */

    /* … and by the margin losses' (the centres get their own gradient) */
    float w[4] = {1, 0, 0, 1}, xe[2] = {1, 0.5f};
    int64_t lab[1] = {0}, s22[2] = {2, 2}, s1[1] = {1};
    DLTensor XE = cpu_tensor(xe, dt_f32, 2, s12, NULL), W = cpu_tensor(w, dt_f32, 2, s22, NULL),
             LB = cpu_tensor(lab, dt_i64, 1, s1, NULL);
    ploss_arc_face_opts ao;
    ploss_arc_face_opts_init(&ao);
    ao.inplace = 1;
    gl = 7.0f;
    CHECK_STATUS(ploss_arc_face_forward(ctx, &XE, &W, &LB, &ao, &GL), PLOSS_ERR_INVALID_ARGUMENT,
                 "opts.inplace: arc_face has no in-place gradient");
    CHECK(gl == 7.0f);

    /* one sample of C classes (a rank-1 input) with a NULL shape is a refused descriptor,
     * as at any other rank — never read */
    DLTensor bad = cpu_tensor(x, dt_f32, 1, NULL, NULL);
    int64_t idx = 1;
    DLTensor I0 = cpu_tensor(&idx, dt_i64, 0, NULL, NULL);
    loss = 7.0f;
    ploss_cross_entropy_opts co;
    ploss_cross_entropy_opts_init(&co);
    CHECK_STATUS(ploss_cross_entropy_forward(ctx, &bad, &I0, NULL, &co, &L, NULL), PLOSS_ERR_INVALID_ARGUMENT,
                 "input: shape is NULL");
    DLTensor X4 = cpu_tensor(x, dt_f32, 1, s4, NULL), badt = cpu_tensor(y, dt_f32, 1, NULL, NULL);
    CHECK_STATUS(ploss_cross_entropy_forward(ctx, &X4, &badt, NULL, &co, &L, NULL), PLOSS_ERR_INVALID_ARGUMENT,
                 "target: shape is NULL");
    CHECK(loss == 7.0f);
    /* and its value is its 1×C view's */
    int64_t s14[2] = {1, 4};
    DLTensor X14 = cpu_tensor(x, dt_f32, 2, s14, NULL), I1 = cpu_tensor(&idx, dt_i64, 1, s1, NULL);
    float l14 = 0.0f;
    DLTensor L14 = cpu_tensor(&l14, dt_f32, 0, NULL, NULL);
    CHECK_OK(ploss_cross_entropy_forward(ctx, &X4, &I0, NULL, &co, &L, NULL));
    CHECK_OK(ploss_cross_entropy_forward(ctx, &X14, &I1, NULL, &co, &L14, NULL));
    CHECK(loss == l14 && loss > 0.0f);

    ploss_ctx_destroy(ctx);
    return check_report("api_conventions");
}
