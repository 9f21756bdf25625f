/*
 * linear_cross_entropy.cu — CUDA backend of the fused linear + cross-entropy
 * (core/engines/linear_cross_entropy.h), f32/f16/bf16 inputs:
 *
 *   count   one block counts the rows that are not ignored ('mean') and reports labels
 *           outside [0, C) through the error slot;
 *   tiles   per tile of B rows: the logits X_b·Wᵀ (cuBLAS, fp32 accumulation, written in the
 *           input dtype: what F.linear gives), the bias added and capped in place (one pass,
 *           with either); the row engine with the linear cross-entropy policy
 *           (kernels/rows/policy_linear_cross_entropy.cuh) over the tile: each row's loss (and
 *           its lse and entropy, asked for, into an N×2 f32 buffer), and G = ω·∂ℓ/∂z written
 *           over its logits; then ∂L/∂X_b = G·W into grad_x's rows, ∂L/∂W = Gᵀ·X_b added over
 *           the tiles into grad_w (cuBLAS, fp32 accumulation, the input dtype: one rounding per
 *           tile; with accumulate the first tile adds too) and ∂L/∂b = Gᵀ·1 added over the
 *           tiles into an f32 buffer (cuBLAS);
 *           With a 16-bit grad_w over several tiles, each tile's label entries G_iy (up to
 *           ~1/p larger than a class's other entries in one tile) are taken out of the tile
 *           after ∂L/∂X_b, before ∂L/∂W: kept in, a class's label entries made its 16-bit
 *           running sum so large that the later tiles' small softmax terms rounded away (a
 *           bias, not noise);
 *   labels  those label entries added to grad_w per class, in fp32 with one rounding (rows
 *           sorted by label with CUB);
 *   losses  a reduced loss summed in a fixed order by one block; lse, entropy and the bias's
 *           gradient (added to grad_b with accumulate) stored from their buffers.
 * The workspace is the tile (at most TILE_BYTES, or opts.tile_rows rows), O(N) and, with the
 * label entries taken apart, 2·⌈N/kTargetChunk⌉·D floats of their partial sums; operands
 * and gradients whose rows are not contiguous (unit feature stride, a leading dimension of at
 * least D that fits in int32) are staged through contiguous copies.  The gradients may be f32 for
 * f16/bf16 inputs: the products then write and accumulate them in fp32.  Nothing is allocated or
 * synchronised (CUDA graphs can capture the call); deterministic: fixed tiles and orders, no
 * float atomics (cuBLAS's GEMMs are run-to-run reproducible on one device).
 */
#include <algorithm>

#include <cub/device/device_radix_sort.cuh>

#include "gemm.h"
#include "linear_cross_entropy.h"
#include "pairs/pairs.cuh"
#include "policy_linear_cross_entropy.cuh"

namespace ploss_cuda {
namespace {

using namespace pairs;

constexpr size_t TILE_BYTES = (size_t)512 << 20;

/* dst ← src for `rows` rows of `cols` values (strides in elements), one warp per row;
 * src null: zeros. */
template <class T>
__global__ void __launch_bounds__(THREADS) copy_rows_kernel(const T *src, int64_t s_sn, int64_t s_sd, T *dst,
                                                            int64_t d_sn, int64_t d_sd, int64_t rows, int64_t cols)
{
    const int lane = threadIdx.x & 31;
    for (int64_t i = warp_row(); i < rows; i += warp_rows_stride())
        for (int64_t j = lane; j < cols; j += 32)
            dst[i * d_sn + j * d_sd] = src ? src[i * s_sn + j * s_sd] : from_acc<T>(0.0f);
}

template <class T> ploss_status copy_rows(const T *src, int64_t s_sn, int64_t s_sd, T *dst, int64_t d_sn, int64_t d_sd,
                                          int64_t rows, int64_t cols, cudaStream_t stream)
{
    if (rows <= 0 || cols <= 0)
        return PLOSS_OK;
    copy_rows_kernel<T><<<row_blocks(rows), THREADS, 0, stream>>>(src, s_sn, s_sd, dst, d_sn, d_sd, rows, cols);
    return check_launch("linear cross-entropy (row copy)");
}

/* c·tanh(z/c) over a tile of n logits, in place. */
template <class T> __global__ void __launch_bounds__(THREADS) softcap_kernel(T *z, int64_t n, float cap, float inv_cap)
{
    for (int64_t e = thread_index(); e < n; e += grid_stride())
        z[e] = from_acc<T>(cap * tanhf(to_acc(z[e]) * inv_cap));
}

/* z + b_j, then c·tanh(·/c) with a softcap (inv_cap > 0), over the first C columns of a tile
 * of `rows` rows of ld logits, in place (the padding columns stay 0); b as f32. */
template <class T>
__global__ void __launch_bounds__(THREADS)
    bias_softcap_kernel(T *z, int64_t rows, int64_t ld, int64_t C, const float *b, float cap, float inv_cap)
{
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
        for (int64_t j = (int64_t)blockIdx.x * THREADS + threadIdx.x; j < C; j += (int64_t)gridDim.x * THREADS) {
            const float v = to_acc(z[r * ld + j]) + b[j];
            z[r * ld + j] = from_acc<T>(inv_cap > 0.0f ? cap * tanhf(v * inv_cap) : v);
        }
}

/* n values v of T. */
template <class T> __global__ void __launch_bounds__(THREADS) fill_kernel(T *x, int64_t n, float v)
{
    for (int64_t e = thread_index(); e < n; e += grid_stride())
        x[e] = from_acc<T>(v);
}

/* The per-row outputs from the N×2 buffer (lse, entropy) into the caller's vectors (null:
 * not asked), of dtype dt. */
__global__ void __launch_bounds__(THREADS)
    store_stats_kernel(const float *st, int64_t N, void *lse, int64_t lse_s, void *ent, int64_t ent_s, ploss_dtype dt)
{
    for (int64_t i = thread_index(); i < N; i += grid_stride()) {
        if (lse)
            store_state(lse, dt, i * lse_s, (double)st[2 * i]);
        if (ent)
            store_state(ent, dt, i * ent_s, (double)st[2 * i + 1]);
    }
}

/* grad_b[j] (+)= acc[j] for the C classes, in grad_b's dtype (T, or f32). */
template <class T>
__global__ void __launch_bounds__(THREADS)
    store_bias_grad_kernel(const float *acc, int64_t C, void *gb, int64_t gb_s, ploss_dtype dt, bool accumulate)
{
    for (int64_t j = thread_index(); j < C; j += grid_stride()) {
        if (dt == PLOSS_F32) {
            float *g = (float *)gb + j * gb_s;
            *g = accumulate ? *g + acc[j] : acc[j];
        } else {
            T *g = (T *)gb + j * gb_s;
            *g = from_acc<T>(accumulate ? to_acc(*g) + acc[j] : acc[j]);
        }
    }
}

/* r[i] ← G_iy and G_iy ← 0 for the tile's rows whose label is a class (0 for the others),
 * and the rows' sort keys: the label, or C for a row without a class (ignored). */
template <class T>
__global__ void __launch_bounds__(THREADS)
    take_targets_kernel(const ploss_linear_problem p, int64_t b0, int64_t rows, T *tile, int64_t ldt, float *r,
                        uint32_t *key, int *row)
{
    for (int64_t i = thread_index(); i < rows; i += grid_stride()) {
        const int64_t y = load_int_dyn(p.labels, p.label_dtype, (b0 + i) * p.y_sn);
        const bool cls = y >= 0 && y < p.C;
        float v = 0.0f;
        if (cls) {
            T *g = tile + i * ldt + y;
            v = to_acc(*g);
            *g = from_acc<T>(0.0f);
        }
        r[b0 + i] = v;
        key[b0 + i] = (uint32_t)(cls ? y : p.C);
        row[b0 + i] = (int)(b0 + i);
    }
}

/* ∂L/∂W_c += Σ_{i: y_i = c} r_i·x_i over the label runs of the sorted rows, in fp32 with
 * one rounding into gw; rows in ascending order within a run (the sort is stable), the
 * features over a block's threads, the sums cut at fixed chunks of kTargetChunk sorted
 * positions (the same bits whatever the grid).  A run within one chunk is added by one
 * block (target_runs_kernel); a run that crosses a chunk boundary (a frequent label) is
 * summed per chunk by the chunks' blocks (target_segments_kernel: the segment at a chunk's
 * start into its slot 0, one that starts inside it into slot 1) and its segments added in
 * chunk order (target_crossing_kernel), so that a long run does not fall on one block. */
constexpr int64_t kTargetChunk = 64;

struct TargetRuns {
    const uint32_t *key; /* sorted labels (C: no class) */
    const int *row;      /* the rows in that order */
    const float *r;      /* each row's label entry */
    int64_t N;
    uint32_t C;
    int64_t D;
    float *part; /* 2 slots of D per chunk */

    __device__ __forceinline__ bool crosses_after(int64_t q, uint32_t c) const
    {
        return q % kTargetChunk == 0 && q < N && key[q] == c;
    }
    /* the end of the segment of label c from p, at most to the end of p's chunk */
    __device__ __forceinline__ int64_t segment_end(int64_t p, uint32_t c) const
    {
        const int64_t hi = min(N, (p / kTargetChunk + 1) * kTargetChunk);
        int64_t q = p + 1;
        while (q < hi && key[q] == c)
            ++q;
        return q;
    }
    template <class T>
    __device__ __forceinline__ float sum(int64_t p, int64_t q, const T *__restrict__ x, int64_t ldx, int64_t d) const
    {
        float acc = 0.0f;
        for (int64_t t = p; t < q; ++t) {
            const int i = row[t];
            acc += r[i] * to_acc(x[(int64_t)i * ldx + d]);
        }
        return acc;
    }
};

template <class T>
__global__ void __launch_bounds__(THREADS)
    target_runs_kernel(const TargetRuns a, const T *__restrict__ x, int64_t ldx, T *__restrict__ gw, int64_t ldw)
{
    for (int64_t s = blockIdx.x; s < a.N; s += gridDim.x) {
        const uint32_t c = a.key[s];
        if (c >= a.C || (s > 0 && a.key[s - 1] == c))
            continue;
        const int64_t q = a.segment_end(s, c);
        if (a.crosses_after(q, c))
            continue;
        for (int64_t d = threadIdx.x; d < a.D; d += THREADS) {
            T *o = gw + (int64_t)c * ldw + d;
            *o = from_acc<T>(to_acc(*o) + a.sum(s, q, x, ldx, d));
        }
    }
}

template <class T>
__global__ void __launch_bounds__(THREADS) target_segments_kernel(const TargetRuns a, const T *__restrict__ x, int64_t ldx)
{
    for (int64_t k = blockIdx.x; k * kTargetChunk < a.N; k += gridDim.x) {
        const int64_t lo = k * kTargetChunk;
        /* the segment at the chunk's start, of a run from the chunk before */
        const uint32_t c0 = a.key[lo];
        int64_t q0 = lo;
        if (lo > 0 && c0 < a.C && a.key[lo - 1] == c0) {
            q0 = a.segment_end(lo, c0);
            for (int64_t d = threadIdx.x; d < a.D; d += THREADS)
                a.part[2 * k * a.D + d] = a.sum(lo, q0, x, ldx, d);
        }
        /* the segment at the chunk's end, of a run that goes on (if not the one above) */
        const int64_t hi = min(a.N, lo + kTargetChunk);
        const uint32_t c1 = a.key[hi - 1];
        if (hi < a.N && c1 < a.C && a.key[hi] == c1 && hi - 1 >= q0) {
            int64_t p = hi - 1;
            while (p > lo && a.key[p - 1] == c1)
                --p;
            for (int64_t d = threadIdx.x; d < a.D; d += THREADS)
                a.part[(2 * k + (p == lo ? 0 : 1)) * a.D + d] = a.sum(p, hi, x, ldx, d);
        }
    }
}

template <class T>
__global__ void __launch_bounds__(THREADS) target_crossing_kernel(const TargetRuns a, T *__restrict__ gw, int64_t ldw)
{
    for (int64_t s = blockIdx.x; s < a.N; s += gridDim.x) {
        const uint32_t c = a.key[s];
        if (c >= a.C || (s > 0 && a.key[s - 1] == c) || !a.crosses_after(a.segment_end(s, c), c))
            continue;
        const int64_t k0 = s / kTargetChunk;
        int64_t k1 = k0 + 1; /* the run's last chunk */
        while ((k1 + 1) * kTargetChunk < a.N && a.key[(k1 + 1) * kTargetChunk] == c)
            ++k1;
        const float *first = a.part + (2 * k0 + (s == k0 * kTargetChunk ? 0 : 1)) * a.D;
        for (int64_t d = threadIdx.x; d < a.D; d += THREADS) {
            float acc = first[d];
            for (int64_t k = k0 + 1; k <= k1; ++k)
                acc += a.part[2 * k * a.D + d];
            T *o = gw + (int64_t)c * ldw + d;
            *o = from_acc<T>(to_acc(*o) + acc);
        }
    }
}

/* Rows of `rows` × D values the GEMMs can read or write in place: unit feature stride, a
 * leading dimension in [D, 2^31). */
inline bool gemm_ready(int64_t sn, int64_t sd, int64_t rows, int64_t D)
{
    return rows <= 1 ? sd == 1 || D <= 1 : sd == 1 && sn >= D && sn <= INT32_MAX;
}

/* A matrix as the GEMMs see it: its data (the caller's or a staged copy), leading dimension
 * and dtype. */
struct operand {
    void *data;
    int64_t ld;
    ploss_dtype dtype;
    char *row(int64_t i) const { return (char *)data + (size_t)(i * ld) * ploss_dtype_size(dtype); }
};

/* Rows copied between a caller's strided matrix and a contiguous staging buffer of the same
 * dtype (T, or f32 for an f32 gradient of f16/bf16 inputs); src null: zeros. */
template <class T>
ploss_status copy_as(ploss_dtype dt, const void *src, int64_t s_sn, int64_t s_sd, void *dst, int64_t d_sn,
                     int64_t d_sd, int64_t rows, int64_t cols, cudaStream_t stream)
{
    if (dt == PLOSS_F32)
        return copy_rows<float>((const float *)src, s_sn, s_sd, (float *)dst, d_sn, d_sd, rows, cols, stream);
    return copy_rows<T>((const T *)src, s_sn, s_sd, (T *)dst, d_sn, d_sd, rows, cols, stream);
}

template <class T> ploss_status run(ploss_ctx_t *ctx, const ploss_linear_problem *p)
{
    namespace re = row_engine;
    const int64_t N = p->N, C = p->C, D = p->D, ldd = D > 0 ? D : 1;
    const bool want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const bool none = p->reduction == PLOSS_REDUCTION_NONE;
    if (!re::serves<T>(1, C))
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "weight: V = %lld classes: the CUDA row engine takes 2 to 2^24",
                           (long long)C);
    cudaStream_t stream = stream_of(ctx);

    /* The tile's rows start on 16 bytes: its leading dimension is V padded to Vp.  cuBLAS
     * runs a product whose n, k or leading dimension is not a multiple of 16 bytes' elements
     * several times slower (V = 50257), so the products take the classes in two parts: the
     * first Va = V rounded down to such a multiple, from the weight itself, and the last
     * Vp − Va (0 or kAlign), whose V − Va weight rows are staged in a block of kAlign rows
     * completed with zeros.  The padding's logits are 0 and, the row engine writing the V
     * columns only, so is its gradient.  Tiles: as few as the budget allows, of equal rows
     * rounded up to a multiple of 256 where that fits; else as many as tiles of the largest
     * multiple of 256 rows within the budget make, when that is at most a quarter more
     * (rounded down), evened out and rounded up to 256 again; else of equal rows rounded up
     * to a multiple of 128 where that fits.  cuBLAS's products over tiles of an odd multiple
     * of 128 rows ran 4–13 % slower on the H100 than over tiles of 256·k rows, even a tenth
     * more of them (bench/RESULTS.md). */
    constexpr int64_t kAlign = 16 / sizeof(T);
    const int64_t Vp = (C + kAlign - 1) / kAlign * kAlign, Va = C / kAlign * kAlign, tail = Vp - Va;
    int64_t B = p->tile_rows;
    if (B <= 0) {
        const int64_t cap = std::max<int64_t>(1, (int64_t)(TILE_BYTES / sizeof(T)) / Vp);
        auto even = [&](int64_t tiles) { return tiles > 0 ? (N + tiles - 1) / tiles : 1; };
        auto round_up = [](int64_t v, int64_t m) { return (v + m - 1) / m * m; };
        const int64_t tiles = (N + cap - 1) / cap, wide = cap / 256 * 256;
        const int64_t tiles256 = wide > 0 ? (N + wide - 1) / wide : 0;
        if (round_up(even(tiles), 256) <= cap)
            B = round_up(even(tiles), 256);
        else if (wide > 0 && tiles256 <= tiles + tiles / 4)
            B = round_up(even(tiles256), 256);
        else
            B = round_up(even(tiles), 128) <= cap ? round_up(even(tiles), 128) : even(tiles);
    }
    B = std::max<int64_t>(1, std::min<int64_t>(B, N));

    const bool x_in = gemm_ready(p->x.sn, p->x.sd, N, D);
    const bool w_in = gemm_ready(p->w.sn, p->w.sd, C, D);
    const bool gx_in = !want_grad || gemm_ready(p->grad_x.sn, p->grad_x.sd, N, D);
    const bool gw_in = !want_grad || gemm_ready(p->grad_w.sn, p->grad_w.sd, C, D);
    const size_t nd = (size_t)N * (size_t)D, cd = (size_t)C * (size_t)D;
    const size_t gx_size = want_grad ? ploss_dtype_size(p->gx_dtype) : 1, gw_size = want_grad ? ploss_dtype_size(p->gw_dtype) : 1;
    /* the bias (as f32, with the sum the conversion gives), its gradient's f32 sums and the
     * vector of ones they are a product with; the per-row (lse, entropy) */
    const bool has_bias = p->bias != nullptr, want_gb = want_grad && p->grad_b != nullptr;
    const bool want_stats = want_loss && (p->lse || p->entropy);
    const bool split_targets = want_grad && D > 0 && p->gw_dtype != PLOSS_F32 && N > B;
    if (split_targets && N > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "hidden: %lld rows with a 16-bit grad_weight over several tiles "
                           "(at most 2^31 - 1)", (long long)N);
    size_t sort_bytes = 0;
    ploss_status st;
    if (split_targets &&
        (st = cub_status(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const uint32_t *)nullptr,
                                                         (uint32_t *)nullptr, (const int *)nullptr, (int *)nullptr,
                                                         (int)N),
                         "linear cross-entropy: sizing the sort of the rows by label")))
        return st;
    float *targets = nullptr;
    uint32_t *keys = nullptr;
    int *rows_of = nullptr;
    char *sort_ws = nullptr;
    float *target_parts = nullptr;
    T *tile = nullptr, *xs = nullptr, *wsd = nullptr, *wtail = nullptr, *ones = nullptr;
    char *gxs = nullptr, *gws = nullptr, *bias_ws = nullptr;
    float *gb_acc = nullptr, *stats = nullptr;
    double *losses = nullptr, *divisor = nullptr;
    auto layout = [&](char *base) {
        carve c{base, 0};
        tile = c.take<T>((size_t)B * (size_t)Vp);
        xs = c.take<T>(x_in ? 0 : nd);
        wsd = c.take<T>(w_in ? 0 : (size_t)Va * (size_t)D);
        wtail = c.take<T>((size_t)tail * (size_t)D);
        gxs = c.take<char>(gx_in ? 0 : nd * gx_size);
        gws = c.take<char>(gw_in ? 0 : cd * gw_size);
        losses = c.take<double>(want_loss && !none ? (size_t)N : 0);
        divisor = c.take<double>(2);
        bias_ws = c.take<char>(has_bias ? re::class_values_bytes(C) : 0);
        gb_acc = c.take<float>(want_gb ? (size_t)C : 0);
        ones = c.take<T>(want_gb ? (size_t)B : 0);
        stats = c.take<float>(want_stats ? 2 * (size_t)N : 0);
        const size_t n_split = split_targets ? (size_t)N : 0;
        targets = c.take<float>(n_split);
        keys = c.take<uint32_t>(2 * n_split);
        rows_of = c.take<int>(2 * n_split);
        sort_ws = c.take<char>(sort_bytes);
        target_parts = c.take<float>(split_targets ? 2 * (size_t)((N + kTargetChunk - 1) / kTargetChunk) * (size_t)D : 0);
        return c.used + 256;
    };
    void *ws = nullptr;
    st = ploss_workspace(ctx, layout(nullptr), &ws);
    if (st)
        return st;
    layout((char *)ws);

    /* the operands and gradients the GEMMs use: the caller's memory (with its leading
     * dimension; one row: D) or the staged copies */
    auto ld_of = [&](int64_t sn, int64_t rows) { return rows <= 1 ? ldd : sn; };
    const operand X = x_in ? operand{(void *)p->x.data, ld_of(p->x.sn, N), p->dtype} : operand{xs, ldd, p->dtype};
    const operand W = w_in ? operand{(void *)p->w.data, ld_of(p->w.sn, C), p->dtype} : operand{wsd, ldd, p->dtype};
    const operand GX = gx_in ? operand{p->grad_x.data, ld_of(p->grad_x.sn, N), p->gx_dtype}
                             : operand{gxs, ldd, p->gx_dtype};
    const operand GW = gw_in ? operand{p->grad_w.data, ld_of(p->grad_w.sn, C), p->gw_dtype}
                             : operand{gws, ldd, p->gw_dtype};
    if ((!x_in && (st = copy_rows<T>((const T *)p->x.data, p->x.sn, p->x.sd, xs, D, 1, N, D, stream))) ||
        (!w_in && (st = copy_rows<T>((const T *)p->w.data, p->w.sn, p->w.sd, wsd, D, 1, Va, D, stream))) ||
        (tail && (st = copy_rows<T>((const T *)p->w.data + Va * p->w.sn, p->w.sn, p->w.sd, wtail, D, 1, C - Va, D,
                                    stream))) ||
        (tail && (st = copy_rows<T>(nullptr, 0, 0, wtail + (C - Va) * D, D, 1, Vp - C, D, stream))) ||
        (!gw_in && p->accumulate &&
         (st = copy_as<T>(GW.dtype, p->grad_w.data, p->grad_w.sn, p->grad_w.sd, gws, D, 1, C, D, stream))))
        return st;
    count_labels_kernel<<<1, COUNT_THREADS, 0, stream>>>(*p, divisor, ctx->error_slot);
    if ((st = check_launch("linear cross-entropy (labels)")))
        return st;
    const float *bias = nullptr;
    if (has_bias) {
        const double *bsum = nullptr;
        if ((st = re::convert_class_values(p->bias, p->b_dtype, p->b_s, C, bias_ws, stream, &bias, &bsum)))
            return st;
    }
    if (want_gb) {
        fill_kernel<T><<<grid_blocks(B, THREADS), THREADS, 0, stream>>>(ones, B, 1.0f);
        if ((st = check_launch("linear cross-entropy (ones)")))
            return st;
        if (cudaMemsetAsync(gb_acc, 0, (size_t)C * sizeof(float), stream) != cudaSuccess) {
            (void)cudaGetLastError();
            return ploss_error(PLOSS_ERR_CUDA, "linear cross-entropy: clearing the bias's gradient failed");
        }
    }

    re::LinearCrossEntropyPolicy pol = {};
    pol.a = (float)(1.0 - p->label_smoothing);
    pol.b = (float)(p->label_smoothing / (double)C);
    pol.w = nullptr;
    pol.wsum = nullptr;
    pol.csum_plain = 1.0f; /* a + b·C */
    pol.n_classes = (float)C;
    pol.w_raw = nullptr;
    pol.z_loss = (float)p->z_loss;
    pol.inv_cap = p->softcap > 0.0 ? (float)(1.0 / p->softcap) : 0.0f;
    pol.inv_divisor = p->reduction == PLOSS_REDUCTION_MEAN ? divisor + 1 : nullptr;
    pol.entropy = want_stats && p->entropy;
    pol.focal = p->focal != 0;
    pol.gamma = (float)p->gamma;
    auto no_prep = [](char *, cudaStream_t, re::LinearCrossEntropyPolicy &) { return PLOSS_OK; };
    for (int64_t b0 = 0; b0 < N; b0 += B) {
        const int64_t rows = std::min(B, N - b0);
        /* the logits of the two parts */
        const ploss_gemm_problem zg[2] = {
            {rows, Va, D, 1.0, 0.0, X.row(b0), 0, X.ld, W.data, 1, W.ld, p->dtype, tile, Vp, p->dtype},
            {rows, tail, D, 1.0, 0.0, X.row(b0), 0, X.ld, wtail, 1, ldd, p->dtype, tile + Va, Vp, p->dtype}};
        for (const auto &g : zg)
            if (g.n > 0 && (st = ploss_cuda_gemm(ctx, &g)))
                return st;
        if (has_bias) {
            const dim3 grid((unsigned)std::min<int64_t>((C + THREADS - 1) / THREADS, 1024),
                            (unsigned)std::min<int64_t>(rows, 65535));
            bias_softcap_kernel<T><<<grid, THREADS, 0, stream>>>(tile, rows, Vp, C, bias, (float)p->softcap,
                                                                 pol.inv_cap);
            if ((st = check_launch("linear cross-entropy (bias)")))
                return st;
        } else if (p->softcap > 0.0) {
            softcap_kernel<T><<<grid_blocks(rows * Vp, THREADS), THREADS, 0, stream>>>(tile, rows * Vp,
                                                                                       (float)p->softcap, pol.inv_cap);
            if ((st = check_launch("linear cross-entropy (softcap)")))
                return st;
        }
        re::RowArgs a = re::tile_row_args(*p, b0, rows, C, tile, Vp, tile, Vp, losses, nullptr);
        if (want_loss && want_stats) {
            a.state = stats + 2 * b0;
            a.state_dtype = PLOSS_F32;
            a.st_sn = 2;
            a.st_sk = 1;
        }
        st = re::run<T>(ctx, a, pol, 0, no_prep);
        if (st)
            return st;
        /* ∂L/∂b += Gᵀ·1 (C × 1, fp32) */
        const ploss_gemm_problem db = {C, 1, rows, 1.0, 1.0, tile, 1, Vp, ones, 0, 1, p->dtype, gb_acc, 1, PLOSS_F32};
        if (want_gb && (st = ploss_cuda_gemm(ctx, &db)))
            return st;
        if (!want_grad || D == 0)
            continue;
        /* ∂L/∂X_b over the two parts, the second added (one more rounding of a 16-bit grad_x) */
        const ploss_gemm_problem dx[2] = {
            {rows, D, Va, 1.0, 0.0, tile, 0, Vp, W.data, 0, W.ld, p->dtype, GX.row(b0), GX.ld, GX.dtype},
            {rows, D, tail, 1.0, Va > 0 ? 1.0 : 0.0, tile + Va, 0, Vp, wtail, 0, ldd, p->dtype, GX.row(b0), GX.ld,
             GX.dtype}};
        for (const auto &g : dx)
            if (g.k > 0 && (st = ploss_cuda_gemm(ctx, &g)))
                return st;
        if (split_targets) {
            take_targets_kernel<T><<<grid_blocks(rows, THREADS), THREADS, 0, stream>>>(*p, b0, rows, tile, Vp, targets,
                                                                                   keys, rows_of);
            if ((st = check_launch("linear cross-entropy (label entries)")))
                return st;
        }
        /* ∂L/∂W over the first Va classes, then the last V − Va */
        const double beta = b0 > 0 || p->accumulate ? 1.0 : 0.0;
        const int64_t part[2][2] = {{0, Va}, {Va, C - Va}};
        for (const auto &q : part) {
            const ploss_gemm_problem dw = {q[1], D, rows, 1.0, beta, tile + q[0], 1, Vp, X.row(b0), 0, X.ld,
                                           p->dtype, GW.row(q[0]), GW.ld, GW.dtype};
            if (q[1] > 0 && (st = ploss_cuda_gemm(ctx, &dw)))
                return st;
        }
    }
    if (want_loss && !none &&
        (st = re::launch_finalize(losses, N, p->reduction == PLOSS_REDUCTION_MEAN ? divisor : nullptr, p->loss,
                                  p->loss_dtype, stream)))
        return st;
    if (want_stats && N > 0) {
        store_stats_kernel<<<grid_blocks(N, THREADS), THREADS, 0, stream>>>(stats, N, p->lse, p->lse_s, p->entropy,
                                                                            p->ent_s, p->stats_dtype);
        if ((st = check_launch("linear cross-entropy (lse, entropy)")))
            return st;
    }
    if (!want_grad)
        return PLOSS_OK;
    if (want_gb) {
        store_bias_grad_kernel<T><<<grid_blocks(C, THREADS), THREADS, 0, stream>>>(gb_acc, C, p->grad_b, p->gb_s,
                                                                                   p->gb_dtype, p->accumulate != 0);
        if ((st = check_launch("linear cross-entropy (bias gradient)")))
            return st;
    }
    if (split_targets) {
        int end_bit = 1;
        while (end_bit < 32 && ((uint64_t)1 << end_bit) <= (uint64_t)C)
            ++end_bit;
        size_t bytes = sort_bytes;
        if ((st = cub_status(cub::DeviceRadixSort::SortPairs(sort_ws, bytes, keys, keys + N, rows_of, rows_of + N,
                                                             (int)N, 0, end_bit, stream),
                             "linear cross-entropy: sorting the rows by label")))
            return st;
        const TargetRuns tr = {keys + N, rows_of + N, targets, N, (uint32_t)C, D, target_parts};
        const unsigned grid = (unsigned)std::min<int64_t>(N, 65535);
        target_runs_kernel<T><<<grid, THREADS, 0, stream>>>(tr, (const T *)X.data, X.ld, (T *)GW.data, GW.ld);
        target_segments_kernel<T><<<(unsigned)std::min<int64_t>((N + kTargetChunk - 1) / kTargetChunk, 65535),
                                    THREADS, 0, stream>>>(tr, (const T *)X.data, X.ld);
        target_crossing_kernel<T><<<grid, THREADS, 0, stream>>>(tr, (T *)GW.data, GW.ld);
        if ((st = check_launch("linear cross-entropy (label entries' weight gradient)")))
            return st;
    }
    /* no rows: the weight's gradient is zero (or left as it is with accumulate) */
    if (N == 0 && !p->accumulate && (st = copy_as<T>(GW.dtype, nullptr, 0, 0, GW.data, GW.ld, 1, C, D, stream)))
        return st;
    if ((!gx_in && (st = copy_as<T>(GX.dtype, gxs, D, 1, p->grad_x.data, p->grad_x.sn, p->grad_x.sd, N, D, stream))) ||
        (!gw_in && (st = copy_as<T>(GW.dtype, gws, D, 1, p->grad_w.data, p->grad_w.sn, p->grad_w.sd, C, D, stream))))
        return st;
    return PLOSS_OK;
}

} // namespace
} // namespace ploss_cuda

using namespace ploss_cuda;

extern "C" ploss_status ploss_cuda_linear_cross_entropy(ploss_ctx_t *ctx, const ploss_linear_problem *p)
{
    return dispatch_float(p->dtype, "hidden", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (sizeof(T) <= 4)
            return run<T>(ctx, p);
        else
            return ploss_error(PLOSS_ERR_UNSUPPORTED,
                               "hidden: f64 on CUDA (the linear cross-entropy takes it on the CPU only)");
    });
}
