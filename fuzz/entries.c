/*
 * entries.c — the one table of public entry points the fuzzer calls (see fuzz.h for the
 * slot and field conventions): the runtime and support ops written here, every loss's
 * _forward/_backward/_fused from fuzz/loss_entries.h (generated from the loss
 * descriptions by tools/gen_losses.lua).
 */
#include "fuzz.h"
#include "loss_entries.h"

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

static ploss_status call_axpby(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    const fz_scalars *s = scalars(o);
    return ploss_axpby(ctx, t[0], s->a, t[1], s->b);
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

/* ---- support ops: GEMM, activations, bias, argmax, optimisers -------------- */

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

/* ---- one-hot --------------------------------------------------------------------- */

static void one_hot_init(void *o) { ploss_one_hot_opts_init(o); }

static ploss_status call_one_hot(ploss_ctx_t *ctx, DLTensor *const t[], const void *o)
{
    return ploss_one_hot(ctx, t[0], o, t[1]);
}

/* ---- Taylor softmax and log-Taylor softmax --------------------------------------- */

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

/* ---- the table ---------------------------------------------------------------------- */

const fz_entry fz_entries[] = {
    {.name = "ploss_copy", .call = call_copy, .nslots = 2,
     .slots = {{"dst", FZ_OUT, "NCd|Nd|", "*"}, {"src", FZ_IN, "NCd|Nd|", "*"}}},
    {.name = "ploss_fill", .call = call_fill, .nslots = 1,
     .slots = {{"dst", FZ_OUT, "NCd|Nd|", "*"}}, FZ_SCALAR_FIELDS},
    {.name = "ploss_axpby", .call = call_axpby, .nslots = 2,
     .slots = {{"dst", FZ_OUT, "NCd|Nd|", "*"}, {"src", FZ_IN, "NCd|Nd|", "*"}}, FZ_SCALAR_FIELDS},
    {.name = "ploss_rand_uniform", .call = call_rand_uniform, .nslots = 1,
     .slots = {{"dst", FZ_OUT, "NCd|Nd|", "f"}}, FZ_SCALAR_FIELDS},
    {.name = "ploss_rand_normal", .call = call_rand_normal, .nslots = 1,
     .slots = {{"dst", FZ_OUT, "NCd|Nd|", "f"}}, FZ_SCALAR_FIELDS},
    {.name = "ploss_rand_int", .call = call_rand_int, .nslots = 1,
     .slots = {{"dst", FZ_OUT, "NCd|Nd|", "*"}}, FZ_SCALAR_FIELDS},

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

    {.name = "ploss_one_hot", .call = call_one_hot, .nslots = 2,
     .slots = {{"target", FZ_IN, "Nd", "i"}, {"out", FZ_OUT, "NCd|NdC", "f"}},
     .opts_size = sizeof(ploss_one_hot_opts), .opts_init = one_hot_init, .opts_nullable = 1,
     .nfields = 3,
     .fields = {FZ_FIELD(ploss_one_hot_opts, ignore_index, FZ_I64, 0, 0),
                FZ_FIELD(ploss_one_hot_opts, label_smoothing, FZ_F64, 0, 0),
                FZ_FIELD(ploss_one_hot_opts, smoothing_convention, FZ_ENUM, 0,
                         PLOSS_SMOOTHING_CONVENTION_COUNT - 1)}},
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
    /* every loss: generated from the loss descriptions */
    FZ_LOSS_ENTRIES
};

const int fz_nentries = (int)(sizeof fz_entries / sizeof fz_entries[0]);
