/*
 * sharded.c — the losses sharded over the ranks of a communicator (opts.comm): every rank
 * runs the call on its share, the collectives join the shares, and each rank gets the loss
 * of the whole (gathered) batch and the gradients of its own tensors, equal to the
 * single-device loss of the gathered batch.
 *
 * Both fronts first gather every rank's status from its own checks and the facts the ranks
 * must share (row counts, D, dtypes, options: agree()), so a refusal on one rank — a bad
 * shape, a mismatch — is an error on every rank and no rank waits in a collective the others
 * never enter.  CUDA: the collectives run on the context's stream and the call waits for them
 * (ploss_comm_synchronize), so a dead or stalled peer is an error after the communicator's
 * timeout, not a hang.  A failure of one rank's own resources after the agreement (out of
 * memory, a CUDA error) aborts the communicator, so the others fail at once naming it
 * instead of waiting for that timeout; a failure every rank meets alike (a bad label among
 * the gathered ones) leaves it usable.
 *
 * Margin losses and Partial FC (the classes sharded; Partial FC's model parallelism, An et
 * al. 2021).  Rank r holds a block of C_r centres (the blocks in rank order make the C
 * classes, rank r's starting at C_0 + … + C_{r−1}) and n rows of embeddings with their
 * global labels (n the same on every rank):
 *   1. x, the labels and ('none' backward) the upstream gradients are all-gathered, and the
 *      labels checked against C on every rank (CPU; CUDA reports them through the error
 *      slot of every rank, all of which see the same gathered labels);
 *   2. the backend runs on the gathered rows against the rank's block, merging each tile's
 *      row statistics over the ranks (margin.h), so every rank has every row's loss: 'mean'
 *      and 'sum' are bitwise the same on every rank, 'none' gives the rank's own rows;
 *   3. ∂L/∂x of the gathered rows through the block's classes (the accumulation type) is
 *      summed over the ranks by a reduce-scatter, each rank keeping its own rows (times R
 *      with scale_grad_x_by_ranks); ∂L/∂W of the block is the rank's alone.
 * Partial FC draws per rank among its block's classes (the batch's classes there and
 * max(2, ⌊C_r·rate⌋ + 1) in all; the Philox counter is the global class id).
 *
 * InfoNCE (the batch sharded): rank r holds n queries and their n keys (sample r·n + i is
 * its row i).  The keys are all-gathered; the backend takes its queries against every key
 * (the rows' log-sum-exps exactly, the keys' column pairs merged over the ranks; pairs.h),
 * so each query has every rank's keys as negatives and each key every rank's queries; the
 * query gradient is exact on its rank, the key gradient of every key through the rank's
 * queries is summed over the ranks by a reduce-scatter.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "margin_front.h"
#include "sharded.h"

static int64_t bits_of(double v)
{
    int64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static DLDataType dl_dtype(ploss_dtype dt)
{
    static const DLDataType t[PLOSS_DTYPE_COUNT] = {
        {kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}, {kDLFloat, 64, 1},
        {kDLInt, 64, 1},   {kDLInt, 32, 1},   {kDLUInt, 8, 1}};
    return t[dt];
}

/* A dense 1-d DLTensor of `count` elements at `data` on `ctx`'s device. */
static DLTensor dense(const ploss_ctx_t *ctx, const void *data, ploss_dtype dt, int64_t *count)
{
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = (void *)data;
    t.device = ctx->device;
    t.ndim = 1;
    t.dtype = dl_dtype(dt);
    t.shape = count;
    return t;
}

ploss_status ploss_sharded_gather(ploss_comm_t *comm, const void *send, void *recv, int64_t count, ploss_dtype dt)
{
    const ploss_ctx_t *ctx = ploss_comm_context(comm);
    int64_t n = count, all = count * ploss_comm_size(comm);
    DLTensor s = dense(ctx, send, dt, &n), r = dense(ctx, recv, dt, &all);
    return ploss_comm_all_gather(comm, &s, &r);
}

/* Pieces of one allocation (a sharded call's buffers), each 256-byte aligned: sized with
 * base NULL, then carved from the allocation. */
typedef struct {
    char *base;
    size_t used;
} pieces;

static void *take(pieces *c, size_t bytes)
{
    const size_t at = (c->used + 255) & ~(size_t)255;
    c->used = at + bytes;
    return c->base ? c->base + at : NULL;
}

/* The staging a gather of view v needs (none when v is dense or NULL), or `bytes` if more. */
static size_t stage_size(size_t bytes, const ploss_view *v)
{
    const size_t need = v && !ploss_view_is_contiguous(v) ? (size_t)v->numel * ploss_dtype_size(v->dtype) : 0;
    return need > bytes ? need : bytes;
}

/* The all-gather of the view v (its elements in row-major order; any strides: a view that is
 * not dense is copied to `stage` first) into out (every rank's, rank order). */
static ploss_status gather_view(ploss_ctx_t *ctx, ploss_comm_t *comm, const ploss_view *v, void *stage, void *out)
{
    const void *send = v->data;
    if (!ploss_view_is_contiguous(v)) {
        DLTensor src, dst;
        memset(&src, 0, sizeof src);
        src.data = v->data;
        src.device = v->device;
        src.ndim = v->ndim;
        src.dtype = dl_dtype(v->dtype);
        src.shape = (int64_t *)v->shape;
        src.strides = (int64_t *)v->strides;
        dst = src;
        dst.data = stage;
        dst.strides = NULL;
        ploss_status st = ploss_copy(ctx, &dst, &src);
        if (st)
            return st;
        send = stage;
    }
    return ploss_sharded_gather(comm, send, out, v->numel, v->dtype);
}

/* Every rank's partial gradients `all` (R·n rows × D of acc) summed over the ranks, this
 * rank's n rows of the sum (through `mine`, n × D of acc) stored into out (its dtype and
 * strides). */
static ploss_status sum_rows_into(ploss_ctx_t *ctx, ploss_comm_t *comm, void *all, void *mine, int64_t n, int64_t D,
                                  ploss_dtype acc, const DLTensor *out)
{
    if (n == 0 || D == 0)
        return PLOSS_OK;
    int64_t all_count = n * D * ploss_comm_size(comm), my_count = n * D;
    DLTensor s = dense(ctx, all, acc, &all_count), r = dense(ctx, mine, acc, &my_count);
    ploss_status st = ploss_comm_reduce_scatter(comm, &s, &r, PLOSS_REDUCE_SUM);
    if (st)
        return st;
    int64_t shape[2] = {n, D};
    DLTensor src = r;
    src.ndim = 2;
    src.shape = shape;
    return ploss_copy(ctx, (DLTensor *)out, &src);
}

/* A failure of this rank alone (its memory, its device) after the agreement: the other ranks
 * would wait for it in the next collective, so the communicator is aborted and they fail at
 * once; a failure every rank meets alike, or the communicator's own, is returned as it is. */
static ploss_status fail_alone(ploss_comm_t *comm, ploss_status st)
{
    if (st != PLOSS_ERR_OUT_OF_MEMORY && st != PLOSS_ERR_CUDA)
        return st;
    char message[1024];
    snprintf(message, sizeof message, "%s", ploss_last_error());
    (void)ploss_comm_abort(comm);
    return ploss_error(st, "%s (opts.comm: the communicator was aborted, so every rank fails: destroy it)", message);
}

/* The value of a one-element upstream gradient (f32 or f64, on the context's device) as its
 * bits, for the agreement; 0 when it cannot be read (the call then fails at that read). */
static int64_t scalar_bits(ploss_ctx_t *ctx, const ploss_view *v)
{
    double d = 0.0;
    float f = 0.0f;
    void *dst = v->dtype == PLOSS_F64 ? (void *)&d : (void *)&f;
    const size_t size = ploss_dtype_size(v->dtype);
    if (ctx->device.device_type == kDLCPU)
        memcpy(dst, v->data, size);
#ifdef PLOSS_HAVE_CUDA
    else if (ploss_cuda_memcpy(dst, v->data, size, PLOSS_COPY_D2H, ctx->stream))
        return 0;
#endif
    return bits_of(v->dtype == PLOSS_F64 ? d : (double)f);
}

/* The upstream gradient every rank must give alike: the fused pass's scale, a reduced
 * backward's one-element grad_loss (a 'none' backward's are gathered, each rank's own). */
static int64_t upstream_bits(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_params *o, const ploss_view *gl)
{
    if (pass == PLOSS_PASS_FUSED)
        return bits_of(o->scale);
    if (pass == PLOSS_PASS_BACKWARD && o->reduction != PLOSS_REDUCTION_NONE)
        return scalar_bits(ctx, gl);
    return 0;
}

/* Every rank's `count` facts (mine[0] its status) into all[R·count], through host memory on
 * the CPU or a device copy on CUDA. */
static ploss_status exchange(ploss_comm_t *comm, const int64_t *mine, int count, int64_t *all)
{
    ploss_ctx_t *cctx = ploss_comm_context(comm);
    const int R = ploss_comm_size(comm);
    const size_t bytes = sizeof(int64_t) * (size_t)count;
    if (cctx->device.device_type == kDLCPU)
        return ploss_sharded_gather(comm, mine, all, count, PLOSS_I64);
#ifdef PLOSS_HAVE_CUDA
    void *dev = NULL;
    ploss_status st = ploss_alloc(cctx, bytes * (size_t)(R + 1), &dev);
    if (st) /* the others would wait in the gather */
        return fail_alone(comm, st);
    char *d = dev;
    if (!(st = ploss_cuda_memcpy(d, mine, bytes, PLOSS_COPY_H2D, cctx->stream)) &&
        !(st = ploss_sharded_gather(comm, d, d + bytes, count, PLOSS_I64)) && !(st = ploss_comm_synchronize(comm)))
        st = ploss_cuda_memcpy(all, d + bytes, bytes * (size_t)R, PLOSS_COPY_D2H, cctx->stream);
    ploss_free(cctx, dev);
    return st;
#else
    (void)bytes;
    (void)R;
    return ploss_error(PLOSS_ERR_UNSUPPORTED, "opts.comm: a CUDA communicator in a library built without CUDA");
#endif
}

/* The size of every agreement's record (int64 facts): the largest loss's count or more. */
#define AGREE_FACTS 32

/* What a fact of the agreement holds, for its message. */
enum { FACT_INT, FACT_DOUBLE /* its bits */, FACT_DTYPE, FACT_PASS, FACT_REDUCTION, FACT_LOSS /* a policy */ };

/* A fact's value as a message shows it, into buf. */
static const char *fact_text(int kind, int64_t v, char *buf, size_t len)
{
    static const char *const passes[] = {"forward", "backward", "fused"};
    static const char *const reductions[] = {"none", "mean", "sum", "batchmean"};
    double d;
    switch (kind) {
    case FACT_DOUBLE:
        memcpy(&d, &v, sizeof d);
        return ploss_shown_text(buf, len, d);
    case FACT_DTYPE:
        return ploss_dtype_name((ploss_dtype)v);
    case FACT_PASS:
        return v >= 0 && v < 3 ? passes[v] : "?";
    case FACT_REDUCTION:
        return v >= 0 && v < 4 ? reductions[v] : "?";
    case FACT_LOSS:
        return v == PLOSS_POLICY_ARC_FACE ? "arc_face" : v == PLOSS_POLICY_AM_SOFTMAX ? "am_softmax"
             : v == PLOSS_POLICY_COMBINED_MARGIN ? "combined_margin" : v == PLOSS_POLICY_INFO_NCE ? "info_nce" : "?";
    default:
        snprintf(buf, len, "%lld", (long long)v);
        return buf;
    }
}

/* The agreement before any data moves: mine[0] is this rank's status (its error message
 * kept across the exchange), mine[1] the loss, mine[2…count) the facts every rank must
 * share but those with own[k] set (a rank's own size), named by names[k] and shown as
 * kinds[k] says; mine holds AGREE_FACTS values (zeros past count), so that every loss's
 * record has one size and ranks that call different sharded losses meet in one exchange
 * and are told so by name.  PLOSS_OK when every rank accepted the call with the same facts,
 * else the first refusal or mismatch, the same on every rank (a refusing rank keeps its own
 * message); with `all` non-NULL, on PLOSS_OK *all is every rank's record (R·AGREE_FACTS
 * values, rank q's at q·AGREE_FACTS), the caller's to free. */
static ploss_status agree(ploss_ctx_t *ctx, ploss_comm_t *comm, const char *loss, int64_t mine[AGREE_FACTS],
                          int count, const char *const *names, const unsigned char *kinds, const unsigned char *own,
                          int64_t **all)
{
    ploss_status local = (ploss_status)mine[0];
    if (!local && ploss_comm_context(comm) != ctx)
        local = ploss_error(PLOSS_ERR_DEVICE, "opts.comm: the communicator was made with another context than the "
                                              "call's (one context per device and rank)");
    mine[0] = local;
    char message[1024];
    snprintf(message, sizeof message, "%s", local ? ploss_last_error() : "");
    const int R = ploss_comm_size(comm), rank = ploss_comm_rank(comm);
    int64_t *gathered = malloc(sizeof(int64_t) * AGREE_FACTS * (size_t)R);
    if (!gathered) /* the others would wait in the exchange */
        return fail_alone(comm, ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "opts.comm: the exchange of %d ranks", R));
    ploss_status st = exchange(comm, mine, AGREE_FACTS, gathered);
    if (!st && local)
        st = ploss_error(local, "%s", message);
    for (int q = 0; q < R && !st; ++q) {
        const int64_t *f = gathered + (size_t)q * AGREE_FACTS;
        if (f[0]) {
            st = ploss_error((ploss_status)f[0],
                             "opts.comm: rank %d refused the call (%s; its error names the argument), so no rank "
                             "ran it", q, ploss_status_string((ploss_status)f[0]));
            break;
        }
        for (int k = 1; k < count && !st; ++k)
            if (!own[k] && f[k] != mine[k]) {
                char a[40], b[40];
                st = ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                                 "opts.comm: the ranks disagree on %s: %s on rank %d, %s on rank %d (this %s "
                                 "call; every rank passes the same rows, dtypes and options)", names[k],
                                 fact_text(kinds[k], f[k], a, sizeof a), q, fact_text(kinds[k], mine[k], b, sizeof b),
                                 rank, loss);
            }
    }
    if (st || !all)
        free(gathered);
    else
        *all = gathered;
    return st;
}

ploss_status ploss_margin_run_sharded(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                                      const ploss_loss_args *a, const ploss_loss_params *o,
                                      const ploss_margin_call *c, ploss_status local)
{
    /* the facts every rank must share (the block of classes is each rank's own) */
    enum {
        F_STATUS, F_LOSS, F_ROWS, F_FEATURES, F_CLASSES, F_DTYPE, F_LABEL_DTYPE, F_PASS, F_REDUCTION, F_IGNORE, F_S,
        F_M1, F_M2, F_M3, F_EASY, F_RATE, F_SEED, F_SCALE_GRAD, F_TILE_ROWS, F_UPSTREAM, F_GL_DTYPE, F_COUNT
    };
    _Static_assert(F_COUNT <= AGREE_FACTS, "the margin losses' facts exceed the agreement's record");
    /* the margins by the loss's own option names (ArcFace's m is m2, AM-softmax's m3) */
    const int arc = spec->policy == PLOSS_POLICY_ARC_FACE, am = spec->policy == PLOSS_POLICY_AM_SOFTMAX;
    const char *const names[F_COUNT] = {
        "status", "the loss", "the rows of x", "the features D", "classes", "the dtype of x", "the dtype of labels",
        "the pass", "opts.reduction", "opts.ignore_index", "opts.s", arc || am ? "m1 (1)" : "opts.m1",
        arc ? "opts.m" : am ? "m2 (0)" : "opts.m2", am ? "opts.m" : arc ? "m3 (0)" : "opts.m3", "opts.easy_margin",
        "opts.sample_rate", "opts.seed", "opts.scale_grad_x_by_ranks", "opts.tile_rows",
        "the upstream gradient (opts.scale, or a reduced grad_loss)", "the dtype of grad_loss"};
    static const unsigned char kinds[F_COUNT] = {
        [F_LOSS] = FACT_LOSS, [F_DTYPE] = FACT_DTYPE, [F_LABEL_DTYPE] = FACT_DTYPE, [F_PASS] = FACT_PASS,
        [F_REDUCTION] = FACT_REDUCTION, [F_S] = FACT_DOUBLE, [F_M1] = FACT_DOUBLE, [F_M2] = FACT_DOUBLE,
        [F_M3] = FACT_DOUBLE, [F_RATE] = FACT_DOUBLE, [F_UPSTREAM] = FACT_DOUBLE, [F_GL_DTYPE] = FACT_DTYPE};
    static const unsigned char own[F_COUNT] = {[F_CLASSES] = 1};
    ploss_comm_t *comm = o->comm;
    const int R = ploss_comm_size(comm), rank = ploss_comm_rank(comm);
    int64_t mine[AGREE_FACTS] = {0};
    mine[F_STATUS] = local;
    if (!local) {
        const double m1 = spec->policy == PLOSS_POLICY_COMBINED_MARGIN ? o->margin_m1 : 1.0;
        mine[F_LOSS] = spec->policy;
        mine[F_ROWS] = c->N;
        mine[F_FEATURES] = c->D;
        mine[F_CLASSES] = c->C;
        mine[F_DTYPE] = c->x.dtype;
        mine[F_LABEL_DTYPE] = c->y.dtype;
        mine[F_PASS] = pass;
        mine[F_REDUCTION] = o->reduction;
        mine[F_IGNORE] = o->ignore_index;
        mine[F_S] = bits_of(o->margin_scale);
        mine[F_M1] = bits_of(m1);
        mine[F_M2] = bits_of(o->margin_m2);
        mine[F_M3] = bits_of(o->margin_m3);
        mine[F_EASY] = o->easy_margin;
        mine[F_RATE] = bits_of(o->sample_rate);
        mine[F_SEED] = o->seed;
        mine[F_SCALE_GRAD] = o->scale_grad_x_by_ranks;
        mine[F_TILE_ROWS] = o->tile_rows;
        mine[F_UPSTREAM] = upstream_bits(ctx, pass, o, &c->gl);
        mine[F_GL_DTYPE] = pass == PLOSS_PASS_BACKWARD ? c->gl.dtype : 0;
    }
    int64_t *all = NULL;
    ploss_status st = agree(ctx, comm, spec->name, mine, F_COUNT, names, kinds, own, &all);
    if (st)
        return st;
    int64_t offset = 0, total = 0, widest = 0;
    for (int q = 0; q < R; ++q) {
        const int64_t Cq = all[(size_t)q * AGREE_FACTS + F_CLASSES];
        if (q < rank)
            offset += Cq;
        total += Cq;
        widest = Cq > widest ? Cq : widest;
    }
    free(all);
    const int64_t n = c->N, N = n * R, D = c->D;
    if (total < spec->min_classes)
        return ploss_error(PLOSS_ERR_SHAPE, "weight: expected at least %lld class centres over the ranks (%s), got %lld",
                           (long long)spec->min_classes, spec->min_classes_why, (long long)total);
    if (N > INT32_MAX || total > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "x: %lld gathered rows and %lld classes exceed the matrix "
                           "products' sizes (each < 2^31)", (long long)N, (long long)total);

    const int cpu = ctx->device.device_type == kDLCPU;
    const ploss_dtype acc = cpu ? PLOSS_F64 : PLOSS_F32;
    const int want_grad = pass != PLOSS_PASS_FORWARD;
    /* one allocation: a staging copy of a view that is not dense, the gathered x, labels
     * and ('none' backward) upstream gradients, the gradient of the gathered rows and of
     * this rank's */
    const int gather_gl = pass == PLOSS_PASS_BACKWARD && o->reduction == PLOSS_REDUCTION_NONE;
    const size_t xsz = ploss_dtype_size(c->x.dtype), ysz = ploss_dtype_size(c->y.dtype),
                 gsz = gather_gl ? ploss_dtype_size(c->gl.dtype) : 0, asz = ploss_dtype_size(acc);
    const size_t stage_bytes = stage_size(stage_size(stage_size(0, &c->x), &c->y), gather_gl ? &c->gl : NULL);
    void *mem = NULL;
    pieces cut = {NULL, 0};
    void *stage, *xs, *ys, *gls, *gx_all, *gx_mine;
    for (int k = 0; k < 2; ++k) {
        cut.used = 0;
        stage = take(&cut, stage_bytes);
        xs = take(&cut, (size_t)N * (size_t)D * xsz);
        ys = take(&cut, (size_t)N * ysz);
        gls = take(&cut, (size_t)N * gsz);
        gx_all = take(&cut, want_grad ? (size_t)N * (size_t)D * asz : 0);
        gx_mine = take(&cut, want_grad ? (size_t)n * (size_t)D * asz : 0);
        if (k == 0 && (st = ploss_alloc(ctx, cut.used, &mem)))
            return fail_alone(comm, st);
        cut.base = mem;
    }
    int64_t *kept = NULL, *class_pos = NULL;
    if ((st = gather_view(ctx, comm, &c->x, stage, xs)) || (st = gather_view(ctx, comm, &c->y, stage, ys)))
        goto done;
    if (gather_gl && (st = gather_view(ctx, comm, &c->gl, stage, gls)))
        goto done;
    if (cpu && (st = ploss_margin_check_labels_cpu(ys, c->y.dtype, 1, N, total, o->ignore_index)))
        goto done;

    ploss_margin_problem p;
    ploss_margin_problem_of(&p, pass, spec, o, c);
    p.N = N;
    p.x = (ploss_pair_operand){xs, D, 1};
    p.labels = ys;
    p.y_sn = 1;
    if (gather_gl) {
        p.grad_loss = gls;
        p.gl_sn = 1;
    }
    if (want_grad) {
        p.grad_x = (ploss_pair_grad){gx_all, D, 1};
        p.gx_dtype = acc;
    }
    p.comm = comm;
    p.class_offset = offset;
    p.classes_total = total;
    /* the widest softmax of any rank: its block, or Partial FC's most kept classes there,
     * max(n_s, gathered rows) with n_s = max(2, ⌊C_q·rate⌋ + 1) within the block (margin.h) */
    p.classes_max = widest;
    if (o->sample_rate < 1.0) {
        const int64_t n_s = ploss_margin_sample_size(widest, o->sample_rate), most = n_s > N ? n_s : N;
        p.classes_max = most < widest ? most : widest;
    }
    p.loss_row0 = (int64_t)rank * n;
    p.loss_rows = n;
    p.grad_x_factor = o->scale_grad_x_by_ranks ? (double)R : 1.0;
    if ((st = ploss_margin_draw(ctx, o, &p, &kept, &class_pos)) ||
        (st = ploss_dispatch(ctx, PLOSS_OP_MARGIN, spec->input_names[0], &p)))
        goto done;
    if (want_grad && (st = sum_rows_into(ctx, comm, gx_all, gx_mine, n, D, acc, a->grad_inputs[0])))
        goto done;
    if (!cpu)
        st = ploss_comm_synchronize(comm);
done:
    st = fail_alone(comm, st);
    free(kept);
    free(class_pos);
    ploss_free(ctx, mem);
    return st;
}

ploss_status ploss_infonce_run_sharded(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_params *o,
                                       const ploss_infonce_problem *p, const ploss_view *key, const ploss_view *gl,
                                       const DLTensor *grad_key, ploss_status local)
{
    enum {
        F_STATUS, F_LOSS, F_ROWS, F_FEATURES, F_DTYPE, F_PASS, F_REDUCTION, F_TEMPERATURE, F_SYMMETRIC,
        F_NORMALIZE, F_UPSTREAM, F_GL_DTYPE, F_COUNT
    };
    _Static_assert(F_COUNT <= AGREE_FACTS, "InfoNCE's facts exceed the agreement's record");
    static const char *const names[F_COUNT] = {
        "status", "the loss", "the rows of query", "the features D", "the dtype of query", "the pass", "opts.reduction",
        "opts.temperature", "opts.symmetric", "opts.normalize",
        "the upstream gradient (opts.scale, or a reduced grad_loss)", "the dtype of grad_loss"};
    static const unsigned char kinds[F_COUNT] = {
        [F_LOSS] = FACT_LOSS, [F_DTYPE] = FACT_DTYPE, [F_PASS] = FACT_PASS, [F_REDUCTION] = FACT_REDUCTION,
        [F_TEMPERATURE] = FACT_DOUBLE,
        [F_UPSTREAM] = FACT_DOUBLE, [F_GL_DTYPE] = FACT_DTYPE};
    static const unsigned char own[F_COUNT] = {0};
    ploss_comm_t *comm = o->comm;
    const int R = ploss_comm_size(comm), rank = ploss_comm_rank(comm);
    int64_t mine[AGREE_FACTS] = {0};
    mine[F_STATUS] = local;
    if (!local) {
        mine[F_LOSS] = PLOSS_POLICY_INFO_NCE;
        mine[F_ROWS] = p->N;
        mine[F_FEATURES] = p->D;
        mine[F_DTYPE] = p->dtype;
        mine[F_PASS] = pass;
        mine[F_REDUCTION] = o->reduction;
        mine[F_TEMPERATURE] = bits_of(o->temperature);
        mine[F_SYMMETRIC] = o->symmetric;
        mine[F_NORMALIZE] = o->normalize;
        mine[F_UPSTREAM] = upstream_bits(ctx, pass, o, gl);
        mine[F_GL_DTYPE] = pass == PLOSS_PASS_BACKWARD ? gl->dtype : 0;
    }
    ploss_status st = agree(ctx, comm, "info_nce", mine, F_COUNT, names, kinds, own, NULL);
    if (st)
        return st;
    const int64_t n = p->N, M = n * R, D = p->D;
    if (M > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "query: %lld gathered rows exceed the matrix products' sizes "
                           "(< 2^31)", (long long)M);

    /* the key gradients' partial sums: f64 on the CPU and for f64 inputs, else f32 */
    const ploss_dtype acc = ctx->device.device_type == kDLCPU || p->dtype == PLOSS_F64 ? PLOSS_F64 : PLOSS_F32;
    const int want_grad = pass != PLOSS_PASS_FORWARD;
    /* one allocation: a staging copy of a view that is not dense, the gathered keys and
     * ('none' backward) upstream gradients, the gradient of every key and of this rank's */
    const int gather_gl = pass == PLOSS_PASS_BACKWARD && o->reduction == PLOSS_REDUCTION_NONE;
    const size_t xsz = ploss_dtype_size(p->dtype), gsz = gather_gl ? ploss_dtype_size(gl->dtype) : 0,
                 asz = ploss_dtype_size(acc);
    const size_t stage_bytes = stage_size(stage_size(0, key), gather_gl ? gl : NULL);
    void *mem = NULL;
    pieces cut = {NULL, 0};
    void *stage, *keys, *gls, *gk_all, *gk_mine;
    for (int k = 0; k < 2; ++k) {
        cut.used = 0;
        stage = take(&cut, stage_bytes);
        keys = take(&cut, (size_t)M * (size_t)D * xsz);
        gls = take(&cut, (size_t)M * gsz);
        gk_all = take(&cut, want_grad ? (size_t)M * (size_t)D * asz : 0);
        gk_mine = take(&cut, want_grad ? (size_t)n * (size_t)D * asz : 0);
        if (k == 0 && (st = ploss_alloc(ctx, cut.used, &mem)))
            return fail_alone(comm, st);
        cut.base = mem;
    }
    if ((st = gather_view(ctx, comm, key, stage, keys)))
        goto done;
    if (gather_gl && (st = gather_view(ctx, comm, gl, stage, gls)))
        goto done;
    ploss_infonce_problem q = *p;
    q.M = M;
    q.key_offset = (int64_t)rank * n;
    q.comm = comm;
    q.x[1] = (ploss_pair_operand){keys, D, 1};
    if (gather_gl) {
        q.grad_loss = gls;
        q.gl_sn = 1;
    }
    if (want_grad) {
        q.grad[1] = (ploss_pair_grad){gk_all, D, 1};
        q.gk_dtype = acc;
    }
    if ((st = ploss_dispatch(ctx, PLOSS_OP_PAIRS_INFONCE, "query", &q)))
        goto done;
    if (want_grad && (st = sum_rows_into(ctx, comm, gk_all, gk_mine, n, D, acc, grad_key)))
        goto done;
    if (ctx->device.device_type != kDLCPU)
        st = ploss_comm_synchronize(comm);
done:
    st = fail_alone(comm, st);
    ploss_free(ctx, mem);
    return st;
}
