/*
 * margin.cu — CUDA backend of the margin softmax losses (core/engines/margin.h),
 * f32/f16/bf16 inputs, fp32 arithmetic:
 *
 *   prep      one warp per row of x and of the (kept) centres: the row copied as it is into a
 *             contiguous X (N×D) or W (K×D) of the input dtype, and 1/max(‖row‖, ε); one
 *             block counts the rows that are not ignored ('mean') and reports labels outside
 *             [0, C) through the error slot;
 *   tiles     per tile of rows: the products X_b·Wᵀ (cuBLAS, fp32 accumulation and output),
 *             scaled into the cosines c_ij = x_i·w_j/(n_i·n_j); the row engine with the
 *             margin policy (kernels/rows/policy_margin.cuh) over the tile: each row's loss,
 *             and G = ∂L/∂c written over its cosines; G' = G/(n_i·n_j) in the input dtype;
 *             then P_b = G'·W and Q += G'ᵀ·X_b (cuBLAS, fp32 output, tile order);
 *   losses    the per-row losses of a reduced loss summed in a fixed order by one block;
 *   out       one warp per row of x and of the centres: P_i = ∂L/∂x̂_i / n_i, so ∂L/∂x_i =
 *             P_i − (P_i·x̂_i)·x̂_i (P_i where the norm is clamped), likewise Q for the
 *             centres, written in the input dtype.
 * The products run on the inputs themselves (tensor cores for f16/bf16) and the cosines are
 * those of the given values: no normalised copy is rounded to the input dtype; only G' is,
 * for the gradient products.  The tile holds at most TILE_BYTES of cosines (or
 * opts.tile_rows rows); the rest is O((N + C)·D) (the copies and the fp32 gradient sums)
 * and O(N + C), all in the context's workspace: the row engine takes none of it for rows of
 * reduction 'none' (below), and the GEMMs none at all, so nothing is allocated or
 * synchronised (CUDA graphs can capture the call; Partial FC excepted: its kept classes are
 * copied from the front's host lists).  Deterministic: fixed tiles and orders, no float
 * atomics.  Partial FC (margin.h): W holds the kept centres, the labels become their
 * positions among them, and the centres not kept get a zero gradient.
 */
#include <algorithm>

#include "gemm.h"
#include "margin.h"
#include "pairs/pairs.cuh"
#include "policy_margin.cuh"

namespace ploss_cuda {
namespace {

using namespace pairs;

constexpr size_t TILE_BYTES = (size_t)256 << 20;

template <class T> struct buffers {
    T *xc, *wc;       /* the rows of x and of the (kept) centres, contiguous, as given    */
    float *inv_x, *inv_w; /* 1/max(‖row‖, ε)                                         */
    double *rx, *rw;  /* ‖row‖                                                          */
    float *tile;      /* the cosines of a tile, then G                                   */
    T *gt;            /* G' of the tile (f32: the tile itself)                           */
    float *gx, *gw;   /* P (N×D) and Q (K×D)                                             */
    double *losses, *divisor; /* divisor[0]: rows not ignored, divisor[1]: its inverse (0 for none) */
    /* Partial FC (null without): the kept classes, each class's position among them, and
     * the labels as those positions */
    int64_t *kept, *class_pos, *labels;
};

/* One warp per row: rows [0, N) of x, rows [N, N + K) of the (kept) centres. */
template <class T>
__global__ void __launch_bounds__(THREADS) prep_kernel(const ploss_margin_problem p, buffers<T> b)
{
    const int lane = threadIdx.x & 31;
    for (int64_t row = warp_row(); row < p.N + p.K; row += warp_rows_stride()) {
        const bool is_x = row < p.N;
        const int64_t i = is_x ? row : row - p.N;
        const ploss_pair_operand &op = is_x ? p.x : p.w;
        const T *v = (const T *)op.data + (is_x || !b.kept ? i : b.kept[i]) * op.sn;
        T *out = (is_x ? b.xc : b.wc) + i * p.D;
        float s = 0.0f;
        for (int64_t j = lane; j < p.D; j += 32) {
            const T e = v[j * op.sd];
            const float a = to_acc(e);
            s += a * a;
            out[j] = e;
        }
        s = warp_all_reduce<32>(s, SumOp());
        if (lane == 0) {
            const double r = sqrt((double)s);
            (is_x ? b.rx : b.rw)[i] = r;
            (is_x ? b.inv_x : b.inv_w)[i] = (float)(1.0 / fmax(r, PLOSS_NORMALIZE_EPS));
        }
    }
}

/* Partial FC: each label as its class's position among the kept ones (the front checked
 * the labels; every one of a row that is not ignored is kept). */
template <class T> __global__ void __launch_bounds__(THREADS) remap_kernel(const ploss_margin_problem p, buffers<T> b)
{
    for (int64_t i = thread_index(); i < p.N; i += grid_stride()) {
        const int64_t y = load_int_dyn(p.labels, p.label_dtype, i * p.y_sn);
        b.labels[i] = y == p.ignore_index || y < 0 || y >= p.C ? y : b.class_pos[y];
    }
}

/* The tile's products into cosines (GRAD = false: in place), or its G into G' (GRAD =
 * true: into gt); rows b0 … b0 + rows − 1 of K classes. */
template <class T, bool GRAD>
__global__ void __launch_bounds__(THREADS) scale_kernel(buffers<T> b, int64_t b0, int64_t rows, int64_t K)
{
    for (int64_t e = thread_index(); e < rows * K; e += grid_stride()) {
        const int64_t r = e / K, j = e - r * K;
        const float v = b.tile[e] * (b.inv_x[b0 + r] * b.inv_w[j]);
        if (GRAD)
            b.gt[e] = from_acc<T>(v);
        else
            b.tile[e] = v;
    }
}

/* One warp per row of x and of the centres: P_i − (P_i·x̂_i)·x̂_i (P_i where the norm is
 * clamped), in the input dtype; zeros for the centres not kept (Partial FC). */
template <class T>
__global__ void __launch_bounds__(THREADS) out_kernel(const ploss_margin_problem p, buffers<T> b)
{
    const int lane = threadIdx.x & 31;
    for (int64_t row = warp_row(); row < p.N + p.C; row += warp_rows_stride()) {
        const bool is_x = row < p.N;
        const int64_t k = is_x ? row : row - p.N;
        const ploss_pair_grad &out = is_x ? p.grad_x : p.grad_w;
        T *o = (T *)out.data + k * out.sn;
        const int64_t i = is_x || !b.class_pos ? k : b.class_pos[k];
        if (i < 0) {
            for (int64_t j = lane; j < p.D; j += 32)
                o[j * out.sd] = from_acc<T>(0.0f);
            continue;
        }
        const float *g = (is_x ? b.gx : b.gw) + i * p.D;
        const T *v = (is_x ? b.xc : b.wc) + i * p.D;
        const bool clamped = (is_x ? b.rx : b.rw)[i] <= PLOSS_NORMALIZE_EPS;
        const float inv = (is_x ? b.inv_x : b.inv_w)[i];
        float dot = 0.0f;
        if (!clamped)
            for (int64_t j = lane; j < p.D; j += 32)
                dot += g[j] * (to_acc(v[j]) * inv);
        dot = warp_all_reduce<32>(dot, SumOp());
        for (int64_t j = lane; j < p.D; j += 32)
            o[j * out.sd] = from_acc<T>(g[j] - dot * (to_acc(v[j]) * inv));
    }
}

template <class T> ploss_status run(ploss_ctx_t *ctx, const ploss_margin_problem *p)
{
    namespace re = row_engine;
    /* C: the classes of the softmax (Partial FC: the K kept ones) */
    const int64_t N = p->N, C = p->K, D = p->D, ld = D > 0 ? D : 1;
    const bool want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const bool none = p->reduction == PLOSS_REDUCTION_NONE;
    /* the row engine's longest rows: a cluster of kMaxCluster blocks (sm_90) */
    if (!re::serves<float>(1, C) || C > re::block_capacity<float>() * re::kMaxCluster)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "weight: C = %lld classes exceed the CUDA row engine's rows "
                           "(at most %lld f32 values)", (long long)C,
                           (long long)(re::block_capacity<float>() * re::kMaxCluster));
    cudaStream_t stream = stream_of(ctx);
    int64_t B = p->tile_rows > 0 ? p->tile_rows : (int64_t)(TILE_BYTES / sizeof(float)) / C;
    B = std::max<int64_t>(1, std::min<int64_t>(B, N));
    const size_t nd = (size_t)N * (size_t)D, cd = (size_t)C * (size_t)D;
    constexpr bool kF32 = sizeof(T) == sizeof(float);
    auto layout = [&](char *base, buffers<T> &b) {
        carve c{base, 0};
        b.xc = c.take<T>(nd);
        b.wc = c.take<T>(cd);
        b.inv_x = c.take<float>(N);
        b.inv_w = c.take<float>(C);
        b.rx = c.take<double>(N);
        b.rw = c.take<double>(C);
        b.tile = c.take<float>((size_t)B * (size_t)C);
        b.gt = kF32 ? (T *)b.tile : c.take<T>(want_grad ? (size_t)B * (size_t)C : 0);
        b.gx = c.take<float>(want_grad ? nd : 0);
        b.gw = c.take<float>(want_grad ? cd : 0);
        b.losses = c.take<double>(N);
        b.divisor = c.take<double>(2);
        b.kept = p->kept ? c.take<int64_t>(C) : nullptr;
        b.class_pos = p->kept ? c.take<int64_t>(p->C) : nullptr;
        b.labels = p->kept ? c.take<int64_t>(N) : nullptr;
        return c.used + 256;
    };
    buffers<T> b;
    void *ws = nullptr;
    ploss_status st = ploss_workspace(ctx, layout(nullptr, b), &ws);
    if (st)
        return st;
    layout((char *)ws, b);

    if (p->kept && ((st = ploss_cuda_memcpy(b.kept, p->kept, (size_t)C * sizeof(int64_t), PLOSS_COPY_H2D, stream)) ||
                    (st = ploss_cuda_memcpy(b.class_pos, p->class_pos, (size_t)p->C * sizeof(int64_t),
                                            PLOSS_COPY_H2D, stream))))
        return st;
    prep_kernel<T><<<row_blocks(N + C), THREADS, 0, stream>>>(*p, b);
    count_labels_kernel<<<1, COUNT_THREADS, 0, stream>>>(*p, b.divisor, ctx->error_slot);
    if (p->kept && N > 0)
        remap_kernel<T><<<grid_blocks(N, THREADS), THREADS, 0, stream>>>(*p, b);
    if ((st = check_launch("margin prep")))
        return st;
    if (want_grad && cd > 0 && (st = ploss_cuda_memset(b.gw, 0, cd * sizeof(float), stream)))
        return st;

    re::MarginPolicy pol;
    pol.margin = p->margin;
    pol.s = (float)p->margin.s;
    pol.inv_divisor = p->reduction == PLOSS_REDUCTION_MEAN ? b.divisor + 1 : nullptr;
    const size_t label_size = ploss_dtype_size(p->label_dtype);
    auto no_prep = [](char *, cudaStream_t, re::MarginPolicy &) { return PLOSS_OK; };
    for (int64_t b0 = 0; b0 < N; b0 += B) {
        const int64_t rows = std::min(B, N - b0);
        const ploss_gemm_problem cg = {rows, C, D, 1.0, 0.0, b.xc + b0 * D, 0, ld, b.wc, 1, ld, p->dtype,
                                       b.tile, C, PLOSS_F32};
        if ((st = ploss_cuda_gemm(ctx, &cg)))
            return st;
        scale_kernel<T, false><<<grid_blocks(rows * C, THREADS), THREADS, 0, stream>>>(b, b0, rows, C);
        if ((st = check_launch("margin cosines")))
            return st;
        /* the rows of the tile: reduction 'none' (each row's loss to the caller's loss or to
         * the per-row buffer), ω from the pass (a scalar upstream gradient read by every row
         * through a zero stride), the 'mean' divisor in the policy */
        re::RowArgs a = {};
        a.pass = p->pass;
        a.reduction = PLOSS_REDUCTION_NONE;
        a.N = rows;
        a.S = 1;
        a.C = C;
        a.x = b.tile;
        a.x_sn = C;
        if (b.labels) {
            a.t = b.labels + b0;
            a.t_dtype = PLOSS_I64;
            a.t_sn = 1;
        } else {
            a.t = (const char *)p->labels + (size_t)(b0 * p->y_sn) * label_size;
            a.t_dtype = p->label_dtype;
            a.t_sn = p->y_sn;
        }
        a.ignore_index = p->ignore_index;
        if (want_grad) {
            a.grad = b.tile;
            a.g_sn = C;
            a.g_sc = 1;
        }
        if (want_loss) {
            a.loss = none ? (char *)p->loss + (size_t)(b0 * p->l_sn) * ploss_dtype_size(p->loss_dtype)
                          : (void *)(b.losses + b0);
            a.loss_dtype = none ? p->loss_dtype : PLOSS_F64;
            a.l_sn = none ? p->l_sn : 1;
        } else {
            a.grad_loss = none ? (const char *)p->grad_loss + (size_t)(b0 * p->gl_sn) * ploss_dtype_size(p->gl_dtype)
                               : p->grad_loss;
            a.gl_dtype = p->gl_dtype;
            a.gl_sn = none ? p->gl_sn : 0;
        }
        a.scale = p->scale;
        st = re::run<float>(ctx, a, pol, 0, no_prep);
        if (st == PLOSS_ERR_UNSUPPORTED)
            st = ploss_error(PLOSS_ERR_UNSUPPORTED,
                             "weight: C = %lld class centres are longer rows than the CUDA row engine serves on "
                             "this device", (long long)C);
        if (st)
            return st;
        if (!want_grad || D == 0)
            continue;
        scale_kernel<T, true><<<grid_blocks(rows * C, THREADS), THREADS, 0, stream>>>(b, b0, rows, C);
        if ((st = check_launch("margin gradient tile")))
            return st;
        const ploss_gemm_problem dx = {rows, D, C, 1.0, 0.0, b.gt, 0, C, b.wc, 0, ld, p->dtype,
                                       b.gx + b0 * D, ld, PLOSS_F32};
        const ploss_gemm_problem dw = {C, D, rows, 1.0, 1.0, b.gt, 1, C, b.xc + b0 * D, 0, ld, p->dtype,
                                       b.gw, ld, PLOSS_F32};
        if ((st = ploss_cuda_gemm(ctx, &dx)) || (st = ploss_cuda_gemm(ctx, &dw)))
            return st;
    }
    if (want_loss && !none &&
        (st = re::launch_finalize(b.losses, N, p->reduction == PLOSS_REDUCTION_MEAN ? b.divisor : nullptr, p->loss,
                                  p->loss_dtype, stream)))
        return st;
    if (want_grad && D > 0) {
        out_kernel<T><<<row_blocks(N + p->C), THREADS, 0, stream>>>(*p, b);
        if ((st = check_launch("margin out")))
            return st;
    }
    return PLOSS_OK;
}

} // namespace
} // namespace ploss_cuda

using namespace ploss_cuda;

extern "C" ploss_status ploss_cuda_margin(ploss_ctx_t *ctx, const ploss_margin_problem *p)
{
    return dispatch_float(p->dtype, "x", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (sizeof(T) <= 4)
            return run<T>(ctx, p);
        else
            return ploss_error(PLOSS_ERR_UNSUPPORTED, "x: f64 on CUDA (the margin losses take it on the CPU only)");
    });
}
