/*
 * entries.c — the one table of public entry points the fuzzer calls (see fuzz.h for the
 * slot and field conventions).  A new loss family adds its _forward/_backward/_fused
 * here: one thunk per function and one table row.
 */
#include "fuzz.h"

/* ---- support ops: copy, fill, random numbers --------------------------------------- */

/* Scalar arguments of fill and rand_*, fuzzed like an options struct. */
typedef struct fz_scalars {
    double a, b;      /* fill value / low, high / mean, std */
    int64_t ia, ib;   /* randint low, high */
    uint64_t seed, offset;
} fz_scalars;

static const fz_scalars *scalars(const void *o)
{
    static const fz_scalars zero;
    return o ? (const fz_scalars *)o : &zero;
}

static void scalars_init(void *o)
{
    fz_scalars *s = o;
    s->a = 0.0;
    s->b = 1.0;
    s->ia = 0;
    s->ib = 10;
    s->seed = 42;
    s->offset = 0;
}

#define FZ_SCALAR_FIELDS                                                                 \
    .opts_size = sizeof(fz_scalars), .opts_init = scalars_init, .nfields = 6,            \
    .fields = {FZ_FIELD(fz_scalars, a, FZ_F64, 0, 0), FZ_FIELD(fz_scalars, b, FZ_F64, 0, 0), \
               FZ_FIELD(fz_scalars, ia, FZ_I64, 0, 0), FZ_FIELD(fz_scalars, ib, FZ_I64, 0, 0), \
               FZ_FIELD(fz_scalars, seed, FZ_U64, 0, 0),                                  \
               FZ_FIELD(fz_scalars, offset, FZ_U64, 0, 0)}

static ploss_status call_copy(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    (void)o;
    return ploss_copy(ctx, t[0], t[1]);
}

static ploss_status call_fill(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_fill(ctx, t[0], scalars(o)->a);
}

static ploss_status call_rand_uniform(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    const fz_scalars *s = scalars(o);
    return ploss_rand_uniform(ctx, t[0], s->seed, s->offset, s->a, s->b);
}

static ploss_status call_rand_normal(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    const fz_scalars *s = scalars(o);
    return ploss_rand_normal(ctx, t[0], s->seed, s->offset, s->a, s->b);
}

static ploss_status call_rand_int(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    const fz_scalars *s = scalars(o);
    return ploss_rand_int(ctx, t[0], s->seed, s->offset, s->ia, s->ib);
}

/* ---- softmax cross-entropy (issue 2) ------------------------------------------------ */

static void ce_opts_init(void *o) { ploss_cross_entropy_opts_init(o); }

#define CE_OPTS                                                                          \
    .opts_size = sizeof(ploss_cross_entropy_opts), .opts_init = ce_opts_init,            \
    .opts_nullable = 1, .nfields = 6,                                                    \
    .fields = {FZ_FIELD(ploss_cross_entropy_opts, reduction, FZ_ENUM, 0, PLOSS_REDUCTION_COUNT - 1), \
               FZ_FIELD(ploss_cross_entropy_opts, ignore_index, FZ_I64, 0, 0),             \
               FZ_FIELD(ploss_cross_entropy_opts, label_smoothing, FZ_F64, 0, 0),          \
               FZ_FIELD(ploss_cross_entropy_opts, smoothing_convention, FZ_ENUM, 0,        \
                        PLOSS_SMOOTHING_CONVENTION_COUNT - 1),                             \
               FZ_FIELD(ploss_cross_entropy_opts, scale, FZ_F64, 0, 0),                    \
               FZ_FIELD(ploss_cross_entropy_opts, inplace, FZ_INT, 0, 1)}

/* The class-index or probability target of the loss families of the softmax kind. */
#define CE_INPUT {"input", FZ_IN, "NCd", "f"}
#define CE_TARGET {"target", FZ_IN, "Nd|NCd", "i|i|x|f"}
#define CE_WEIGHT {"weight", FZ_IN | FZ_OPTIONAL, "C", "f|x"}

static ploss_status call_ce_forward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_cross_entropy_forward(ctx, t[0], t[1], t[2], o, t[3], t[4]);
}

static ploss_status call_ce_backward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_cross_entropy_backward(ctx, t[0], t[1], t[2], o, t[3], t[4], t[5]);
}

static ploss_status call_ce_fused(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_cross_entropy_fused(ctx, t[0], t[1], t[2], o, t[3], t[4]);
}

/* ---- support ops (issue 3): GEMM, activations, bias, argmax, optimisers -------------- */

typedef struct fz_gemm {
    int trans_a, trans_b;
    double alpha, beta;
} fz_gemm;

static void gemm_init(void *o)
{
    fz_gemm *g = o;
    g->trans_a = g->trans_b = PLOSS_NO_TRANSPOSE;
    g->alpha = 1.0;
    g->beta = 0.0;
}

static ploss_status call_gemm(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    const fz_gemm *g = o;
    return ploss_gemm(ctx, (ploss_transpose)g->trans_a, (ploss_transpose)g->trans_b, g->alpha, t[0],
                      t[1], g->beta, t[2]);
}

typedef struct fz_act {
    int act, inplace;
} fz_act;

static ploss_status call_act_forward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    const fz_act *a = o;
    return ploss_activation_forward(ctx, (ploss_activation)a->act, t[0], t[1], a->inplace);
}

static ploss_status call_act_backward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    const fz_act *a = o;
    return ploss_activation_backward(ctx, (ploss_activation)a->act, t[0], t[1], t[2], a->inplace);
}

#define ACT_OPTS                                                                         \
    .opts_size = sizeof(fz_act), .nfields = 2,                                           \
    .fields = {FZ_FIELD(fz_act, act, FZ_ENUM, 0, PLOSS_ACTIVATION_COUNT - 1),            \
               FZ_FIELD(fz_act, inplace, FZ_INT, 0, 1)}

static ploss_status call_bias_add(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    (void)o;
    return ploss_bias_add(ctx, t[0], t[1]);
}

static ploss_status call_bias_grad(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    (void)o;
    return ploss_bias_grad(ctx, t[0], t[1]);
}

static ploss_status call_argmax(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    (void)o;
    return ploss_argmax(ctx, t[0], t[1]);
}

/* the optimisers' step counts travel with their options */
typedef struct fz_sgd {
    ploss_sgd_opts o;
    int64_t step;
} fz_sgd;

static void sgd_init(void *o)
{
    fz_sgd *s = o;
    ploss_sgd_opts_init(&s->o);
    s->step = 1;
}

static ploss_status call_sgd(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    const fz_sgd *s = o;
    return ploss_sgd_step(ctx, t[0], t[1], t[2], s ? s->step : 1, s ? &s->o : NULL);
}

typedef struct fz_adam {
    ploss_adam_opts o;
    int64_t step;
} fz_adam;

static void adam_init(void *o)
{
    fz_adam *a = o;
    ploss_adam_opts_init(&a->o);
    a->step = 1;
}

static ploss_status call_adam(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    const fz_adam *a = o;
    return ploss_adam_step(ctx, t[0], t[1], t[2], t[3], a ? a->step : 1, a ? &a->o : NULL);
}

/* ---- sigmoid and focal family (issue 5) ----------------------------------------------- */

static void bce_init(void *o) { ploss_binary_cross_entropy_with_logits_opts_init(o); }

#define BCE_OPTS                                                                          \
    .opts_size = sizeof(ploss_bce_with_logits_opts), .opts_init = bce_init,               \
    .opts_nullable = 1, .nfields = 3,                                                     \
    .fields = {FZ_FIELD(ploss_bce_with_logits_opts, reduction, FZ_ENUM, 0, PLOSS_REDUCTION_COUNT - 1), \
               FZ_FIELD(ploss_bce_with_logits_opts, scale, FZ_F64, 0, 0),                   \
               FZ_FIELD(ploss_bce_with_logits_opts, inplace, FZ_INT, 0, 1)}
#define ELEM_INPUT {"input", FZ_IN, "NCd|N|NC", "f"}
#define ELEM_TARGET {"target", FZ_IN, "NCd|N|NC", "x|f"}
#define ELEM_LOSS {"loss", FZ_OUT, "|NCd|1", "a"}
#define BCE_WEIGHTS {"weight", FZ_IN | FZ_OPTIONAL, "NCd|C|1", "x|f"}, \
                    {"pos_weight", FZ_IN | FZ_OPTIONAL, "C|NCd", "x|f"}

static ploss_status call_bce_forward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_binary_cross_entropy_with_logits_forward(ctx, t[0], t[1], t[2], t[3], o, t[4]);
}

static ploss_status call_bce_backward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_binary_cross_entropy_with_logits_backward(ctx, t[0], t[1], t[2], t[3], o, t[4], t[5]);
}

static ploss_status call_bce_fused(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_binary_cross_entropy_with_logits_fused(ctx, t[0], t[1], t[2], t[3], o, t[4], t[5]);
}

static void sfocal_init(void *o) { ploss_sigmoid_focal_opts_init(o); }

#define SFOCAL_OPTS                                                                       \
    .opts_size = sizeof(ploss_sigmoid_focal_opts), .opts_init = sfocal_init,              \
    .opts_nullable = 1, .nfields = 6,                                                     \
    .fields = {FZ_FIELD(ploss_sigmoid_focal_opts, reduction, FZ_ENUM, 0, PLOSS_REDUCTION_COUNT - 1), \
               FZ_FIELD(ploss_sigmoid_focal_opts, alpha, FZ_F64, 0, 0),                    \
               FZ_FIELD(ploss_sigmoid_focal_opts, gamma, FZ_F64, 0, 0),                    \
               FZ_FIELD(ploss_sigmoid_focal_opts, convention, FZ_ENUM, 0, PLOSS_FOCAL_CONVENTION_COUNT - 1), \
               FZ_FIELD(ploss_sigmoid_focal_opts, scale, FZ_F64, 0, 0),                    \
               FZ_FIELD(ploss_sigmoid_focal_opts, inplace, FZ_INT, 0, 1)}

static ploss_status call_sfocal_forward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_sigmoid_focal_forward(ctx, t[0], t[1], o, t[2]);
}

static ploss_status call_sfocal_backward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_sigmoid_focal_backward(ctx, t[0], t[1], o, t[2], t[3]);
}

static ploss_status call_sfocal_fused(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_sigmoid_focal_fused(ctx, t[0], t[1], o, t[2], t[3]);
}

static void mfocal_init(void *o) { ploss_softmax_focal_opts_init(o); }

#define MFOCAL_OPTS                                                                       \
    .opts_size = sizeof(ploss_softmax_focal_opts), .opts_init = mfocal_init,              \
    .opts_nullable = 1, .nfields = 5,                                                     \
    .fields = {FZ_FIELD(ploss_softmax_focal_opts, reduction, FZ_ENUM, 0, PLOSS_REDUCTION_COUNT - 1), \
               FZ_FIELD(ploss_softmax_focal_opts, ignore_index, FZ_I64, 0, 0),             \
               FZ_FIELD(ploss_softmax_focal_opts, gamma, FZ_F64, 0, 0),                    \
               FZ_FIELD(ploss_softmax_focal_opts, scale, FZ_F64, 0, 0),                    \
               FZ_FIELD(ploss_softmax_focal_opts, inplace, FZ_INT, 0, 1)}
#define SM_TARGET {"target", FZ_IN, "Nd", "i|i|i|f"}
#define SM_LOSS {"loss", FZ_OUT, "|Nd|1", "a"}
#define SM_GRAD_LOSS {"grad_loss", FZ_IN, "|Nd|1", "a|f"}
#define SM_GRAD_INPUT {"grad_input", FZ_OUT, "NCd", "x"}

static ploss_status call_mfocal_forward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_softmax_focal_forward(ctx, t[0], t[1], t[2], o, t[3], t[4]);
}

static ploss_status call_mfocal_backward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_softmax_focal_backward(ctx, t[0], t[1], t[2], o, t[3], t[4], t[5]);
}

static ploss_status call_mfocal_fused(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_softmax_focal_fused(ctx, t[0], t[1], t[2], o, t[3], t[4]);
}

static void dfocal_init(void *o) { ploss_dual_focal_opts_init(o); }

#define DFOCAL_OPTS                                                                       \
    .opts_size = sizeof(ploss_dual_focal_opts), .opts_init = dfocal_init,                 \
    .opts_nullable = 1, .nfields = 5,                                                     \
    .fields = {FZ_FIELD(ploss_dual_focal_opts, reduction, FZ_ENUM, 0, PLOSS_REDUCTION_COUNT - 1), \
               FZ_FIELD(ploss_dual_focal_opts, ignore_index, FZ_I64, 0, 0),                \
               FZ_FIELD(ploss_dual_focal_opts, eps, FZ_F64, 0, 0),                         \
               FZ_FIELD(ploss_dual_focal_opts, scale, FZ_F64, 0, 0),                       \
               FZ_FIELD(ploss_dual_focal_opts, inplace, FZ_INT, 0, 1)}

static ploss_status call_dfocal_forward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_dual_focal_forward(ctx, t[0], t[1], o, t[2], t[3]);
}

static ploss_status call_dfocal_backward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_dual_focal_backward(ctx, t[0], t[1], o, t[2], t[3], t[4]);
}

static ploss_status call_dfocal_fused(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_dual_focal_fused(ctx, t[0], t[1], o, t[2], t[3]);
}

/* ---- softmax family II (issue 6): one-hot, large-margin softmax ------------------------ */

static void one_hot_init(void *o) { ploss_one_hot_opts_init(o); }

static ploss_status call_one_hot(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_one_hot(ctx, t[0], o, t[1]);
}

static void lm_init(void *o) { ploss_large_margin_opts_init(o); }

#define LM_OPTS                                                                           \
    .opts_size = sizeof(ploss_large_margin_opts), .opts_init = lm_init,                   \
    .opts_nullable = 1, .nfields = 5,                                                     \
    .fields = {FZ_FIELD(ploss_large_margin_opts, reduction, FZ_ENUM, 0, PLOSS_REDUCTION_COUNT - 1), \
               FZ_FIELD(ploss_large_margin_opts, ignore_index, FZ_I64, 0, 0),              \
               FZ_FIELD(ploss_large_margin_opts, lam, FZ_F64, 0, 0),                       \
               FZ_FIELD(ploss_large_margin_opts, scale, FZ_F64, 0, 0),                     \
               FZ_FIELD(ploss_large_margin_opts, inplace, FZ_INT, 0, 1)}

static ploss_status call_lm_forward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_large_margin_softmax_forward(ctx, t[0], t[1], o, t[2], t[3]);
}

static ploss_status call_lm_backward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_large_margin_softmax_backward(ctx, t[0], t[1], o, t[2], t[3], t[4]);
}

static ploss_status call_lm_fused(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_large_margin_softmax_fused(ctx, t[0], t[1], o, t[2], t[3]);
}

/* ---- softmax family II (issue 6): Taylor softmax and Taylor cross-entropy ------------ */

static void ts_init(void *o) { ploss_taylor_softmax_opts_init(o); }

#define TS_OPTS                                                                           \
    .opts_size = sizeof(ploss_taylor_softmax_opts), .opts_init = ts_init,                 \
    .opts_nullable = 1, .nfields = 2,                                                     \
    .fields = {FZ_FIELD(ploss_taylor_softmax_opts, n, FZ_INT, 0, 8),                      \
               FZ_FIELD(ploss_taylor_softmax_opts, dim, FZ_INT, -3, 3)}

static ploss_status call_ts_forward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_taylor_softmax_forward(ctx, t[0], o, t[1]);
}

static ploss_status call_ts_backward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_taylor_softmax_backward(ctx, t[0], t[1], o, t[2]);
}

static ploss_status call_lts_forward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_log_taylor_softmax_forward(ctx, t[0], o, t[1]);
}

static ploss_status call_lts_backward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_log_taylor_softmax_backward(ctx, t[0], t[1], o, t[2]);
}

static void tce_init(void *o) { ploss_taylor_cross_entropy_opts_init(o); }

#define TCE_OPTS                                                                          \
    .opts_size = sizeof(ploss_taylor_cross_entropy_opts), .opts_init = tce_init,          \
    .opts_nullable = 1, .nfields = 5,                                                     \
    .fields = {FZ_FIELD(ploss_taylor_cross_entropy_opts, reduction, FZ_ENUM, 0, PLOSS_REDUCTION_COUNT - 1), \
               FZ_FIELD(ploss_taylor_cross_entropy_opts, ignore_index, FZ_I64, 0, 0),      \
               FZ_FIELD(ploss_taylor_cross_entropy_opts, n, FZ_INT, 0, 8),                 \
               FZ_FIELD(ploss_taylor_cross_entropy_opts, scale, FZ_F64, 0, 0),             \
               FZ_FIELD(ploss_taylor_cross_entropy_opts, inplace, FZ_INT, 0, 1)}

static ploss_status call_tce_forward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_taylor_cross_entropy_forward(ctx, t[0], t[1], o, t[2], t[3]);
}

static ploss_status call_tce_backward(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_taylor_cross_entropy_backward(ctx, t[0], t[1], o, t[2], t[3], t[4]);
}

static ploss_status call_tce_fused(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_taylor_cross_entropy_fused(ctx, t[0], t[1], o, t[2], t[3]);
}

/* ---- the table ---------------------------------------------------------------------- */

const fz_entry fz_entries[] = {
    {.name = "ploss_copy", .call = call_copy, .nslots = 2,
     .slots = {{"dst", FZ_OUT, "NCd|Nd|", "*"}, {"src", FZ_IN, "NCd|Nd|", "*"}}},
    {.name = "ploss_fill", .call = call_fill, .nslots = 1,
     .slots = {{"dst", FZ_OUT, "NCd|Nd|", "*"}}, FZ_SCALAR_FIELDS},
    {.name = "ploss_rand_uniform", .call = call_rand_uniform, .nslots = 1,
     .slots = {{"dst", FZ_OUT, "NCd|Nd|", "f"}}, FZ_SCALAR_FIELDS},
    {.name = "ploss_rand_normal", .call = call_rand_normal, .nslots = 1,
     .slots = {{"dst", FZ_OUT, "NCd|Nd|", "f"}}, FZ_SCALAR_FIELDS},
    {.name = "ploss_rand_int", .call = call_rand_int, .nslots = 1,
     .slots = {{"dst", FZ_OUT, "NCd|Nd|", "*"}}, FZ_SCALAR_FIELDS},

    {.name = "ploss_cross_entropy_forward", .call = call_ce_forward, .nslots = 5,
     .slots = {CE_INPUT, CE_TARGET, CE_WEIGHT, SM_LOSS,
               {"lse", FZ_OUT | FZ_OPTIONAL, "Nd", "a"}},
     CE_OPTS},
    {.name = "ploss_cross_entropy_backward", .call = call_ce_backward, .nslots = 6,
     .slots = {CE_INPUT, CE_TARGET, CE_WEIGHT, {"lse", FZ_IN | FZ_OPTIONAL, "Nd", "a"},
               SM_GRAD_LOSS, {"grad_input", FZ_OUT, "NCd", "x"}},
     CE_OPTS},
    {.name = "ploss_cross_entropy_fused", .call = call_ce_fused, .nslots = 5,
     .slots = {CE_INPUT, CE_TARGET, CE_WEIGHT, SM_LOSS,
               {"grad_input", FZ_OUT, "NCd", "x"}},
     CE_OPTS},

    /* support ops (issue 3) */
    {.name = "ploss_gemm", .call = call_gemm, .nslots = 3,
     .slots = {{"a", FZ_IN, "ND|DN|NC", "f"}, {"b", FZ_IN, "DC|CD|NC", "x|f"},
               {"c", FZ_OUT, "NC|CN", "x|a|f"}},
     .opts_size = sizeof(fz_gemm), .opts_init = gemm_init, .nfields = 4,
     .fields = {FZ_FIELD(fz_gemm, trans_a, FZ_ENUM, 0, 1), FZ_FIELD(fz_gemm, trans_b, FZ_ENUM, 0, 1),
                FZ_FIELD(fz_gemm, alpha, FZ_F64, 0, 0), FZ_FIELD(fz_gemm, beta, FZ_F64, 0, 0)}},
    {.name = "ploss_activation_forward", .call = call_act_forward, .nslots = 2,
     .slots = {{"input", FZ_IN, "NCd|Nd|", "f"}, {"output", FZ_OUT, "NCd|Nd|", "x"}}, ACT_OPTS},
    {.name = "ploss_activation_backward", .call = call_act_backward, .nslots = 3,
     .slots = {{"input", FZ_IN, "NCd|Nd|", "f"}, {"grad_output", FZ_IN, "NCd|Nd|", "x"},
               {"grad_input", FZ_OUT, "NCd|Nd|", "x"}},
     ACT_OPTS},
    {.name = "ploss_bias_add", .call = call_bias_add, .nslots = 2,
     .slots = {{"x", FZ_OUT, "NC|NCd", "f"}, {"bias", FZ_IN, "C|NC", "x|f"}}},
    {.name = "ploss_bias_grad", .call = call_bias_grad, .nslots = 2,
     .slots = {{"grad_output", FZ_IN, "NC|NCd", "f"}, {"grad_bias", FZ_OUT, "C|NC", "x|f"}}},
    {.name = "ploss_argmax", .call = call_argmax, .nslots = 2,
     .slots = {{"input", FZ_IN, "NCd", "f"}, {"indices", FZ_OUT, "Nd|NCd", "i|*"}}},
    {.name = "ploss_sgd_step", .call = call_sgd, .nslots = 3,
     .slots = {{"param", FZ_OUT, "NCd|Nd|", "f"}, {"grad", FZ_IN, "NCd|Nd|", "x|f"},
               {"momentum_buffer", FZ_OUT | FZ_OPTIONAL | FZ_MAY_IGNORE, "NCd|Nd|", "x|a"}},
     .opts_size = sizeof(fz_sgd), .opts_init = sgd_init, .opts_nullable = 1, .nfields = 6,
     .fields = {FZ_FIELD(fz_sgd, o.lr, FZ_F64, 0, 0), FZ_FIELD(fz_sgd, o.momentum, FZ_F64, 0, 0),
                FZ_FIELD(fz_sgd, o.dampening, FZ_F64, 0, 0),
                FZ_FIELD(fz_sgd, o.weight_decay, FZ_F64, 0, 0),
                FZ_FIELD(fz_sgd, o.nesterov, FZ_INT, 0, 1), FZ_FIELD(fz_sgd, step, FZ_I64, 0, 0)}},
    {.name = "ploss_adam_step", .call = call_adam, .nslots = 4,
     .slots = {{"param", FZ_OUT, "NCd|Nd|", "f"}, {"grad", FZ_IN, "NCd|Nd|", "x|f"},
               {"exp_avg", FZ_OUT, "NCd|Nd|", "x|a"}, {"exp_avg_sq", FZ_OUT, "NCd|Nd|", "x|a"}},
     .opts_size = sizeof(fz_adam), .opts_init = adam_init, .opts_nullable = 1, .nfields = 7,
     .fields = {FZ_FIELD(fz_adam, o.lr, FZ_F64, 0, 0), FZ_FIELD(fz_adam, o.beta1, FZ_F64, 0, 0),
                FZ_FIELD(fz_adam, o.beta2, FZ_F64, 0, 0), FZ_FIELD(fz_adam, o.eps, FZ_F64, 0, 0),
                FZ_FIELD(fz_adam, o.weight_decay, FZ_F64, 0, 0),
                FZ_FIELD(fz_adam, o.decoupled_weight_decay, FZ_INT, 0, 1),
                FZ_FIELD(fz_adam, step, FZ_I64, 0, 0)}},

    /* sigmoid and focal family (issue 5) */
    {.name = "ploss_binary_cross_entropy_with_logits_forward", .call = call_bce_forward, .nslots = 5,
     .slots = {ELEM_INPUT, ELEM_TARGET, BCE_WEIGHTS, ELEM_LOSS}, BCE_OPTS},
    {.name = "ploss_binary_cross_entropy_with_logits_backward", .call = call_bce_backward, .nslots = 6,
     .slots = {ELEM_INPUT, ELEM_TARGET, BCE_WEIGHTS, {"grad_loss", FZ_IN, "|NCd|1", "a|f"},
               {"grad_input", FZ_OUT, "NCd|N|NC", "x"}},
     BCE_OPTS},
    {.name = "ploss_binary_cross_entropy_with_logits_fused", .call = call_bce_fused, .nslots = 6,
     .slots = {ELEM_INPUT, ELEM_TARGET, BCE_WEIGHTS, ELEM_LOSS, {"grad_input", FZ_OUT, "NCd|N|NC", "x"}},
     BCE_OPTS},
    {.name = "ploss_sigmoid_focal_forward", .call = call_sfocal_forward, .nslots = 3,
     .slots = {ELEM_INPUT, ELEM_TARGET, ELEM_LOSS}, SFOCAL_OPTS},
    {.name = "ploss_sigmoid_focal_backward", .call = call_sfocal_backward, .nslots = 4,
     .slots = {ELEM_INPUT, ELEM_TARGET, {"grad_loss", FZ_IN, "|NCd|1", "a|f"},
               {"grad_input", FZ_OUT, "NCd|N|NC", "x"}},
     SFOCAL_OPTS},
    {.name = "ploss_sigmoid_focal_fused", .call = call_sfocal_fused, .nslots = 4,
     .slots = {ELEM_INPUT, ELEM_TARGET, ELEM_LOSS, {"grad_input", FZ_OUT, "NCd|N|NC", "x"}},
     SFOCAL_OPTS},
    {.name = "ploss_softmax_focal_forward", .call = call_mfocal_forward, .nslots = 5,
     .slots = {CE_INPUT, SM_TARGET, {"alpha", FZ_IN | FZ_OPTIONAL, "C", "f|x"}, SM_LOSS,
               {"lse", FZ_OUT | FZ_OPTIONAL, "Nd", "a"}},
     MFOCAL_OPTS},
    {.name = "ploss_softmax_focal_backward", .call = call_mfocal_backward, .nslots = 6,
     .slots = {CE_INPUT, SM_TARGET, {"alpha", FZ_IN | FZ_OPTIONAL, "C", "f|x"},
               {"lse", FZ_IN | FZ_OPTIONAL, "Nd", "a"}, SM_GRAD_LOSS, SM_GRAD_INPUT},
     MFOCAL_OPTS},
    {.name = "ploss_softmax_focal_fused", .call = call_mfocal_fused, .nslots = 5,
     .slots = {CE_INPUT, SM_TARGET, {"alpha", FZ_IN | FZ_OPTIONAL, "C", "f|x"}, SM_LOSS,
               SM_GRAD_INPUT},
     MFOCAL_OPTS},
    {.name = "ploss_dual_focal_forward", .call = call_dfocal_forward, .nslots = 4,
     .slots = {CE_INPUT, SM_TARGET, SM_LOSS, {"lse", FZ_OUT | FZ_OPTIONAL, "Nd", "a"}}, DFOCAL_OPTS},
    {.name = "ploss_dual_focal_backward", .call = call_dfocal_backward, .nslots = 5,
     .slots = {CE_INPUT, SM_TARGET, {"lse", FZ_IN | FZ_OPTIONAL, "Nd", "a"}, SM_GRAD_LOSS,
               SM_GRAD_INPUT},
     DFOCAL_OPTS},
    {.name = "ploss_dual_focal_fused", .call = call_dfocal_fused, .nslots = 4,
     .slots = {CE_INPUT, SM_TARGET, SM_LOSS, SM_GRAD_INPUT}, DFOCAL_OPTS},

    /* softmax family II (issue 6) */
    {.name = "ploss_one_hot", .call = call_one_hot, .nslots = 2,
     .slots = {{"target", FZ_IN, "Nd", "i"}, {"out", FZ_OUT, "NCd|NdC", "f"}},
     .opts_size = sizeof(ploss_one_hot_opts), .opts_init = one_hot_init, .opts_nullable = 1,
     .nfields = 3,
     .fields = {FZ_FIELD(ploss_one_hot_opts, ignore_index, FZ_I64, 0, 0),
                FZ_FIELD(ploss_one_hot_opts, label_smoothing, FZ_F64, 0, 0),
                FZ_FIELD(ploss_one_hot_opts, smoothing_convention, FZ_ENUM, 0,
                         PLOSS_SMOOTHING_CONVENTION_COUNT - 1)}},
    {.name = "ploss_large_margin_softmax_forward", .call = call_lm_forward, .nslots = 4,
     .slots = {CE_INPUT, SM_TARGET, SM_LOSS, {"state", FZ_OUT | FZ_OPTIONAL, "N3d", "a"}}, LM_OPTS},
    {.name = "ploss_large_margin_softmax_backward", .call = call_lm_backward, .nslots = 5,
     .slots = {CE_INPUT, SM_TARGET, {"state", FZ_IN | FZ_OPTIONAL, "N3d", "a"}, SM_GRAD_LOSS,
               SM_GRAD_INPUT},
     LM_OPTS},
    {.name = "ploss_large_margin_softmax_fused", .call = call_lm_fused, .nslots = 4,
     .slots = {CE_INPUT, SM_TARGET, SM_LOSS, SM_GRAD_INPUT}, LM_OPTS},

    {.name = "ploss_taylor_softmax_forward", .call = call_ts_forward, .nslots = 2,
     .slots = {{"input", FZ_IN, "NCd|NC|C", "f"}, {"output", FZ_OUT, "NCd|NC|C", "x"}}, TS_OPTS},
    {.name = "ploss_taylor_softmax_backward", .call = call_ts_backward, .nslots = 3,
     .slots = {{"input", FZ_IN, "NCd|NC|C", "f"}, {"grad_output", FZ_IN, "NCd|NC|C", "x"},
               {"grad_input", FZ_OUT, "NCd|NC|C", "x"}},
     TS_OPTS},
    {.name = "ploss_log_taylor_softmax_forward", .call = call_lts_forward, .nslots = 2,
     .slots = {{"input", FZ_IN, "NCd|NC|C", "f"}, {"output", FZ_OUT, "NCd|NC|C", "x"}}, TS_OPTS},
    {.name = "ploss_log_taylor_softmax_backward", .call = call_lts_backward, .nslots = 3,
     .slots = {{"input", FZ_IN, "NCd|NC|C", "f"}, {"grad_output", FZ_IN, "NCd|NC|C", "x"},
               {"grad_input", FZ_OUT, "NCd|NC|C", "x"}},
     TS_OPTS},
    {.name = "ploss_taylor_cross_entropy_forward", .call = call_tce_forward, .nslots = 4,
     .slots = {CE_INPUT, SM_TARGET, SM_LOSS, {"state", FZ_OUT | FZ_OPTIONAL, "Nd", "a"}}, TCE_OPTS},
    {.name = "ploss_taylor_cross_entropy_backward", .call = call_tce_backward, .nslots = 5,
     .slots = {CE_INPUT, SM_TARGET, {"state", FZ_IN | FZ_OPTIONAL, "Nd", "a"}, SM_GRAD_LOSS,
               SM_GRAD_INPUT},
     TCE_OPTS},
    {.name = "ploss_taylor_cross_entropy_fused", .call = call_tce_fused, .nslots = 4,
     .slots = {CE_INPUT, SM_TARGET, SM_LOSS, SM_GRAD_INPUT}, TCE_OPTS},

    /* a new family: add its rows here (see fuzz.h) */
};

const int fz_nentries = (int)(sizeof fz_entries / sizeof fz_entries[0]);
