/*
 * row_split.cuh — the row engine's split path for very long rows (the vocabularies of the
 * fused linear + cross-entropy, kernels/linear/): each row cut into chunks of CHUNK classes,
 * one block per (row, chunk), two kernels:
 *   stats   the chunk's max M_c and the policy's sums relative to M_c (one read);
 *   finish  each block merges its row's chunk statistics in chunk order (Policy::rebase to
 *           the row max M), the policy's finish gives the row's coefficients, the chunk's
 *           gradient is written over it (a read and a write), and the row's first block
 *           writes the loss.
 * Two reads and one write of a row where the register engine (row_engine.cuh) reads it
 * once; it wins where a row needs a cluster of blocks there, whose barriers leave the memory
 * idle between rows, while every block here streams on its own.  Deterministic: the
 * statistics are merged in chunk order and reduced by CUB trees.
 *
 * Rows: classes contiguous, each row's start 16-byte aligned and readable up to the next
 * multiple of the vector (x_sn a multiple of it: the caller's padded tiles); reduction
 * 'none' (the caller reduces); the gradient written at the same layout (in place or not).
 * The policy adds to the engine's interface
 *     Sums rebase(const Sums &, float Mc, float M, int others, bool has_y) const;
 * the sums of a chunk taken relative to its max Mc, made relative to M >= Mc (`others`: its
 * classes other than y).
 */
#ifndef PLOSS_KERNELS_ROW_SPLIT_CUH
#define PLOSS_KERNELS_ROW_SPLIT_CUH

#include "row_engine.cuh"

namespace ploss_cuda {
namespace row_engine {

constexpr int kSplitThreads = 256;
constexpr int kSplitNV = 4; /* 16-byte vectors per thread and chunk */

template <class T> constexpr int split_chunk() { return kSplitThreads * kSplitNV * vec16<T>::N; }

template <class Policy> struct ChunkStats {
    float M;
    typename Policy::Sums s;
};

/* This thread's vectors of chunk c of row xr (C classes): zeros beyond the row. */
template <class T>
__device__ __forceinline__ void split_load(const T *xr, int64_t c, int64_t C, uint4 (&raw)[kSplitNV])
{
    constexpr int VEC = vec16<T>::N;
    const uint4 *xv = reinterpret_cast<const uint4 *>(xr);
    const int64_t q0 = c * (int64_t)(kSplitThreads * kSplitNV) + threadIdx.x;
#pragma unroll
    for (int k = 0; k < kSplitNV; ++k) {
        const int64_t q = q0 + (int64_t)k * kSplitThreads;
        raw[k] = q * VEC < C ? xv[q] : make_uint4(0u, 0u, 0u, 0u);
    }
}

/* f(x, j, is_y) over this thread's classes (< C) of chunk c. */
template <class T, class F>
__device__ __forceinline__ void split_each(const uint4 (&raw)[kSplitNV], int64_t c, int64_t C, int y, F &&f)
{
    using V = vec16<T>;
    const int64_t q0 = c * (int64_t)(kSplitThreads * kSplitNV) + threadIdx.x;
#pragma unroll
    for (int k = 0; k < kSplitNV; ++k) {
        const int jb = (int)((q0 + (int64_t)k * kSplitThreads) * V::N);
#pragma unroll
        for (int e = 0; e < V::N; ++e)
            if (jb + e < C)
                f(V::get(raw[k], e), jb + e, jb + e == y);
    }
}

template <class T, class Policy>
__global__ void __launch_bounds__(kSplitThreads)
    split_stats(const RowArgs a, const Policy pol, const int nch, ChunkStats<Policy> *stats)
{
    const int64_t r = (int64_t)blockIdx.x / nch, c = (int64_t)blockIdx.x % nch;
    const int64_t y = load_label(a, r, 0);
    if (label_status(a, y) != kValid)
        return;
    uint4 raw[kSplitNV];
    split_load<T>((const T *)a.x + r * a.x_sn, c, a.C, raw);
    float m = -CUDART_INF_F;
    split_each<T>(raw, c, a.C, -1, [&](float x, int, bool) { m = fmaxf(m, x); });
    const float Mc = block_all_reduce<kSplitThreads>(m, MaxF{});
    typename Policy::Sums s = pol.zero();
    split_each<T>(raw, c, a.C, (int)y, [&](float x, int j, bool is_y) { (void)pol.term(s, x, j, is_y, Mc); });
    using BR = cub::BlockReduce<typename Policy::Sums, kSplitThreads>;
    __shared__ typename BR::TempStorage tmp;
    s = BR(tmp).Reduce(s, SumsOp<Policy>{&pol});
    if (threadIdx.x == 0)
        stats[blockIdx.x] = ChunkStats<Policy>{Mc, s};
}

template <class T, class Policy>
__global__ void __launch_bounds__(kSplitThreads)
    split_finish(const RowArgs a, const Policy pol, const int nch, const ChunkStats<Policy> *stats)
{
    constexpr int CH = split_chunk<T>();
    const int64_t r = (int64_t)blockIdx.x / nch, c = (int64_t)blockIdx.x % nch;
    const bool want_grad = a.pass != PLOSS_PASS_FORWARD;
    if (!want_grad && c > 0)
        return;
    const int64_t y = load_label(a, r, 0);
    const int st = label_status(a, y);
    T *gr = want_grad ? (T *)a.grad + r * a.g_sn : nullptr;
    double acc = 0.0; /* reduction 'none': unused */
    if (st != kValid) {
        if (c == 0 && threadIdx.x == 0)
            store_skipped<Policy>(a, r, 0, st, y, acc);
        if (want_grad) {
            uint4 zero[kSplitNV];
            for (int k = 0; k < kSplitNV; ++k)
                zero[k] = make_uint4(0u, 0u, 0u, 0u);
            const int64_t q0 = c * (int64_t)(kSplitThreads * kSplitNV) + threadIdx.x;
            for (int k = 0; k < kSplitNV; ++k) {
                const int64_t q = q0 + (int64_t)k * kSplitThreads;
                if (q * vec16<T>::N < a.C)
                    reinterpret_cast<uint4 *>(gr)[q] = zero[k];
            }
        }
        return;
    }
    __shared__ float s_M;
    __shared__ typename Policy::Row s_row;
    if (threadIdx.x == 0) {
        const ChunkStats<Policy> *cs = stats + r * nch;
        float M = -CUDART_INF_F;
        for (int k = 0; k < nch; ++k)
            M = fmaxf(M, cs[k].M);
        typename Policy::Sums s = pol.zero();
        for (int k = 0; k < nch; ++k) {
            const int64_t n = min((int64_t)CH, a.C - (int64_t)k * CH);
            const bool has_y = y / CH == k;
            s = pol.add(s, pol.rebase(cs[k].s, cs[k].M, M, (int)(n - (has_y ? 1 : 0)), has_y));
        }
        const float om = want_grad ? sample_omega(a, common_omega(a), r, 0) : 0.0f;
        s_row = pol.finish(s, (int)y, M, om);
        s_M = M;
        if (c == 0)
            store_outputs<Policy>(a, r, 0, s_row.loss, s_row.state, acc);
    }
    __syncthreads();
    if (!want_grad)
        return;
    const float M = s_M;
    const typename Policy::Row rr = s_row;
    uint4 raw[kSplitNV];
    split_load<T>((const T *)a.x + r * a.x_sn, c, a.C, raw);
    using V = vec16<T>;
    const int64_t q0 = c * (int64_t)(kSplitThreads * kSplitNV) + threadIdx.x;
#pragma unroll
    for (int k = 0; k < kSplitNV; ++k) {
        const int64_t q = q0 + (int64_t)k * kSplitThreads;
        const int jb = (int)(q * V::N);
        if (jb >= a.C)
            continue;
        uint4 o = raw[k];
#pragma unroll
        for (int e = 0; e < V::N; ++e)
            if (jb + e < a.C)
                V::set(o, e, pol.template grad<false>(V::get(o, e), jb + e, jb + e == (int)y, M, rr));
        reinterpret_cast<uint4 *>(gr)[q] = o;
    }
}

/* The chunks of a row of C classes. */
template <class T> inline int64_t split_chunks(int64_t C) { return (C + split_chunk<T>() - 1) / split_chunk<T>(); }

/* The split path over the `a.N` rows of `a` (S = 1, reduction 'none'); `stats`: a.N ·
 * split_chunks<T>(a.C) entries of workspace. */
template <class T, class Policy>
ploss_status run_split(ploss_ctx_t *ctx, RowArgs a, const Policy &pol, ChunkStats<Policy> *stats)
{
    const int64_t nch = split_chunks<T>(a.C), blocks = a.N * nch;
    if (blocks <= 0)
        return PLOSS_OK;
    if (blocks > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "row engine (split rows): %lld row chunks exceed a grid",
                           (long long)blocks);
    a.error_slot = ctx->error_slot;
    cudaStream_t stream = stream_of(ctx);
    split_stats<T, Policy><<<(unsigned)blocks, kSplitThreads, 0, stream>>>(a, pol, (int)nch, stats);
    ploss_status st = check_launch("row engine (split rows: statistics)");
    if (st != PLOSS_OK)
        return st;
    split_finish<T, Policy><<<(unsigned)blocks, kSplitThreads, 0, stream>>>(a, pol, (int)nch, stats);
    return check_launch("row engine (split rows: gradient)");
}

} // namespace row_engine
} // namespace ploss_cuda

#endif
