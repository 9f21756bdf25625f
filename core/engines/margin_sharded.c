/*
 * margin_sharded.c — the margin softmax losses with their classes sharded over the ranks of
 * a communicator (opts.comm; Partial FC's model parallelism, An et al. 2021).  Rank r holds
 * a block of C_r centres (the blocks in rank order make the C classes, rank r's starting at
 * C_0 + … + C_{r−1}), n rows of embeddings with their global labels (n the same on every
 * rank), and computes the loss of all R·n rows:
 *
 *   1. every rank's checks (ploss_margin_check_call) and the facts the ranks must share
 *      (n, D, the dtypes, the options) are gathered first, so a refusal on one rank — a bad
 *      shape, a mismatch — is an error on every rank and no rank waits in a collective the
 *      others never enter;
 *   2. x, the labels and ('none' backward) the upstream gradients are all-gathered, and the
 *      labels checked against C on every rank (CPU; CUDA reports them through the error
 *      slot of every rank, all of which see the same gathered labels);
 *   3. the backend runs on the gathered rows against the rank's block, merging each tile's
 *      row statistics over the ranks (margin.h), so every rank has every row's loss: 'mean'
 *      and 'sum' are bitwise the same on every rank, 'none' gives the rank's own rows;
 *   4. ∂L/∂x of the gathered rows through the block's classes (the accumulation type) is
 *      summed over the ranks by a reduce-scatter, each rank keeping its own rows (times R
 *      with scale_grad_x_by_ranks); ∂L/∂W of the block is the rank's alone.
 * Partial FC draws per rank among its block's classes (the batch's classes there and
 * ⌊C_r·rate⌋ + 1 in all; the Philox counter is the global class id).  CUDA: the collectives
 * run on the context's stream and the call waits for them (ploss_comm_synchronize), so a
 * dead or stalled peer is an error after the communicator's timeout, not a hang.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "margin_front.h"

/* What every rank must agree on, exchanged before any rank computes. */
enum {
    F_STATUS, F_ROWS, F_FEATURES, F_CLASSES, F_DTYPE, F_LABEL_DTYPE, F_PASS, F_REDUCTION, F_IGNORE,
    F_S, F_M1, F_M2, F_M3, F_EASY, F_RATE, F_SEED, F_SCALE_GRAD, F_SCALE, F_GL_DTYPE, F_COUNT
};
static const char *const field_names[F_COUNT] = {
    "status", "rows of x", "features D", "classes", "dtype of x", "dtype of labels", "pass", "reduction",
    "opts.ignore_index", "the scale s", "m1", "m2", "m3", "opts.easy_margin", "opts.sample_rate", "opts.seed",
    "opts.scale_grad_x_by_ranks", "opts.scale", "dtype of grad_loss"};

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

ploss_status ploss_margin_gather(ploss_comm_t *comm, const void *send, void *recv, int64_t count, ploss_dtype dt)
{
    const ploss_ctx_t *ctx = ploss_comm_context(comm);
    int64_t n = count, all = count * ploss_comm_size(comm);
    DLTensor s = dense(ctx, send, dt, &n), r = dense(ctx, recv, dt, &all);
    return ploss_comm_all_gather(comm, &s, &r);
}

/* A copy of the view v (any strides) into fresh dense memory of `dt` on ctx: *out to
 * ploss_free. */
static ploss_status dense_copy(ploss_ctx_t *ctx, const ploss_view *v, ploss_dtype dt, void **out)
{
    ploss_status st = ploss_alloc(ctx, (size_t)v->numel * ploss_dtype_size(dt), out);
    if (st)
        return st;
    DLTensor src, dst;
    memset(&src, 0, sizeof src);
    src.data = v->data;
    src.device = v->device;
    src.ndim = v->ndim;
    src.dtype = dl_dtype(v->dtype);
    src.shape = (int64_t *)v->shape;
    src.strides = (int64_t *)v->strides;
    dst = src;
    dst.data = *out;
    dst.dtype = dl_dtype(dt);
    dst.strides = NULL;
    return ploss_copy(ctx, &dst, &src);
}

/* all-gather of the view v (n_local elements along dim 0) into fresh dense memory: *out. */
static ploss_status gather_view(ploss_ctx_t *ctx, ploss_comm_t *comm, const ploss_view *v, void **out)
{
    void *mine = NULL;
    const int R = ploss_comm_size(comm);
    ploss_status st = dense_copy(ctx, v, v->dtype, &mine);
    if (!st)
        st = ploss_alloc(ctx, (size_t)v->numel * (size_t)R * ploss_dtype_size(v->dtype) + 1, out);
    if (!st)
        st = ploss_margin_gather(comm, mine, *out, v->numel, v->dtype);
    ploss_free(ctx, mine);
    return st;
}

/* Every rank's fields (F_COUNT each) into all[R·F_COUNT], through host memory on the CPU or
 * a device copy on CUDA. */
static ploss_status exchange(ploss_comm_t *comm, const int64_t *mine, int64_t *all)
{
    ploss_ctx_t *cctx = ploss_comm_context(comm);
    const int R = ploss_comm_size(comm);
    const size_t bytes = sizeof(int64_t) * F_COUNT;
    if (cctx->device.device_type == kDLCPU)
        return ploss_margin_gather(comm, mine, all, F_COUNT, PLOSS_I64);
#ifdef PLOSS_HAVE_CUDA
    void *dev = NULL;
    ploss_status st = ploss_alloc(cctx, bytes * (size_t)(R + 1), &dev);
    if (st)
        return st;
    char *d = dev;
    if (!(st = ploss_cuda_memcpy(d, mine, bytes, PLOSS_COPY_H2D, cctx->stream)) &&
        !(st = ploss_margin_gather(comm, d, d + bytes, F_COUNT, PLOSS_I64)) && !(st = ploss_comm_synchronize(comm)))
        st = ploss_cuda_memcpy(all, d + bytes, bytes * (size_t)R, PLOSS_COPY_D2H, cctx->stream);
    ploss_free(cctx, dev);
    return st;
#else
    (void)bytes;
    (void)R;
    return ploss_error(PLOSS_ERR_UNSUPPORTED, "opts.comm: a CUDA communicator in a library built without CUDA");
#endif
}

ploss_status ploss_margin_run_sharded(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                                      const ploss_loss_args *a, const ploss_loss_params *o,
                                      const ploss_margin_call *c, ploss_status local)
{
    ploss_comm_t *comm = o->comm;
    const int R = ploss_comm_size(comm), rank = ploss_comm_rank(comm);
    if (!local && ploss_comm_context(comm) != ctx)
        local = ploss_error(PLOSS_ERR_DEVICE, "opts.comm: the communicator was made with another context than "
                                              "the call's (one context per device and rank)");
    /* this rank's refusal survives the exchange (whose calls clear the message) */
    char message[1024];
    snprintf(message, sizeof message, "%s", local ? ploss_last_error() : "");
    int64_t mine[F_COUNT] = {0};
    mine[F_STATUS] = local;
    if (!local) {
        const double m1 = spec->policy == PLOSS_POLICY_COMBINED_MARGIN ? o->margin_m1 : 1.0;
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
        mine[F_SCALE] = pass == PLOSS_PASS_FUSED ? bits_of(o->scale) : 0;
        mine[F_GL_DTYPE] = pass == PLOSS_PASS_BACKWARD ? c->gl.dtype : 0;
    }
    int64_t *all = malloc(sizeof(int64_t) * F_COUNT * (size_t)R);
    if (!all)
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "opts.comm: the exchange of %d ranks", R);
    ploss_status st = exchange(comm, mine, all);
    if (st) {
        free(all);
        return st;
    }
    if (local) {
        free(all);
        return ploss_error(local, "%s", message);
    }
    int64_t offset = 0, total = 0;
    for (int q = 0; q < R && !st; ++q) {
        const int64_t *f = all + (size_t)q * F_COUNT;
        if (f[F_STATUS]) {
            st = ploss_error((ploss_status)f[F_STATUS],
                             "opts.comm: rank %d refused the call (%s; its error names the argument), so no rank ran "
                             "it", q, ploss_status_string((ploss_status)f[F_STATUS]));
            break;
        }
        for (int k = F_ROWS; k < F_COUNT && !st; ++k)
            if (k != F_CLASSES && f[k] != mine[k])
                st = ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                                 "opts.comm: rank %d called %s with another %s than rank %d (every rank passes the "
                                 "same rows, dtypes and options; %lld against %lld)", q, spec->name, field_names[k],
                                 rank, (long long)f[k], (long long)mine[k]);
        if (q < rank)
            offset += f[F_CLASSES];
        total += f[F_CLASSES];
    }
    free(all);
    if (st)
        return st;
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
    void *xs = NULL, *ys = NULL, *gls = NULL, *gx_all = NULL, *gx_mine = NULL;
    int64_t *kept = NULL, *class_pos = NULL;
    if ((st = gather_view(ctx, comm, &c->x, &xs)) || (st = gather_view(ctx, comm, &c->y, &ys)))
        goto done;
    if (pass == PLOSS_PASS_BACKWARD && o->reduction == PLOSS_REDUCTION_NONE &&
        (st = gather_view(ctx, comm, &c->gl, &gls)))
        goto done;
    if (cpu && (st = ploss_margin_check_labels_cpu(ys, c->y.dtype, 1, N, total, o->ignore_index)))
        goto done;
    if (want_grad && ((st = ploss_alloc(ctx, (size_t)N * (size_t)D * ploss_dtype_size(acc) + 1, &gx_all)) ||
                      (st = ploss_alloc(ctx, (size_t)n * (size_t)D * ploss_dtype_size(acc) + 1, &gx_mine))))
        goto done;

    ploss_margin_problem p;
    ploss_margin_problem_of(&p, pass, spec, o, c);
    p.N = N;
    p.x = (ploss_pair_operand){xs, D, 1};
    p.labels = ys;
    p.y_sn = 1;
    if (gls) {
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
    p.loss_row0 = (int64_t)rank * n;
    p.loss_rows = n;
    p.grad_x_factor = o->scale_grad_x_by_ranks ? (double)R : 1.0;
    if ((st = ploss_margin_draw(ctx, o, &p, &kept, &class_pos)) ||
        (st = ploss_dispatch(ctx, PLOSS_OP_MARGIN, spec->input_names[0], &p)))
        goto done;
    if (want_grad && n > 0 && D > 0) {
        int64_t all_count = N * D, my_count = n * D;
        DLTensor s = dense(ctx, gx_all, acc, &all_count), r = dense(ctx, gx_mine, acc, &my_count);
        if ((st = ploss_comm_reduce_scatter(comm, &s, &r, PLOSS_REDUCE_SUM)))
            goto done;
        /* the rank's rows into grad_x: its dtype and strides */
        int64_t shape[2] = {n, D};
        DLTensor src;
        memset(&src, 0, sizeof src);
        src.data = gx_mine;
        src.device = ctx->device;
        src.ndim = 2;
        src.dtype = dl_dtype(acc);
        src.shape = shape;
        st = ploss_copy(ctx, (DLTensor *)a->grad_inputs[0], &src);
    }
    if (!st && !cpu)
        st = ploss_comm_synchronize(comm);
done:
    free(kept);
    free(class_pos);
    ploss_free(ctx, xs);
    ploss_free(ctx, ys);
    ploss_free(ctx, gls);
    ploss_free(ctx, gx_all);
    ploss_free(ctx, gx_mine);
    return st;
}
