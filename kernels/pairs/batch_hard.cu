/*
 * batch_hard.cu — CUDA backend of the batch-hard triplet loss (core/engines/pairs.h).
 *
 *   pack      a dense copy of the embeddings (the GEMM's operand), their squared norms, the
 *             labels as int64 and the cosine distance's clamped norms;
 *   per block of anchor rows: the Gram block X_b·Xᵀ through cuBLAS (kernels/support/gemm.cu,
 *             fp32 output, f64 for f64), then `mine`: one warp per anchor scans its row of
 *             the block for the hardest positive and negative by a key in double, monotone
 *             in the distance (ties: the lowest index; a NaN distance wins, as torch.max/min
 *             propagate it; a non-finite value of the expansion is taken again from the
 *             rows).  The block holds at most GRAM_BYTES: the N×N matrix never exists;
 *   anchors   one warp per anchor: the two chosen distances recomputed from the rows, ℓ_i,
 *             ∂ℓ/∂d and the pairs' gradient terms (the maths of the CPU backend);
 *   stats     one block: the active anchors and the reduced loss, in a fixed order; then each
 *             anchor's ∂ℓ/∂d times its upstream factor ω (mean: over the active anchors);
 *   gradient  the pairs that reach each row from other anchors, grouped by row with a stable
 *             radix sort of (row, entry) — entry order is anchor order — then one block per
 *             row adds its own terms and those in that order.
 * Everything is deterministic (no float atomics); the workspace is O(N·D + N + block).
 */
#include <algorithm>

#include <cub/device/device_radix_sort.cuh>

#include "gemm.h"
#include "pairs.cuh"
#include "pairs.h"

namespace ploss_cuda {
namespace {

using namespace pairs;

constexpr int STATS_THREADS = 1024;
constexpr size_t GRAM_BYTES = (size_t)64 << 20; /* one Gram block */

struct anchor_t {
    int64_t pos, neg;          /* the hardest positive and negative (-1: none) */
    ploss_pair_terms tp, tn;
    double loss, c;
};

struct stats_t {
    int64_t active;
};

/* Dense copy xd (row-major N×D, the input dtype), squared norms sq (A), the labels as
 * int64 (lab) and the cosine distance's clamped norms (nrm, double). */
template <class T>
__global__ void __launch_bounds__(THREADS)
    pack_kernel(const ploss_batch_hard_problem p, T *xd, acc_t<T> *sq, int64_t *lab, double *nrm)
{
    using A = acc_t<T>;
    const int lane = threadIdx.x & 31;
    const T *x = (const T *)p.x.data;
    for (int64_t i = warp_row(); i < p.N; i += warp_rows_stride()) {
        A s = 0;
        for (int64_t j = lane; j < p.D; j += 32) {
            const T v = x[i * p.x.sn + j * p.x.sd];
            xd[i * p.D + j] = v;
            const A a = to_acc(v);
            s += a * a;
        }
        s = warp_all_reduce<32>(s, SumOp());
        if (lane == 0) {
            sq[i] = s;
            lab[i] = load_int_dyn(p.labels, p.label_dtype, i * p.y_sn);
            nrm[i] = ploss_cosine_norm(sqrt((double)s));
        }
    }
}

/* (d, index) of the better candidate (ploss_mine_better: a NaN wins, ties the lower index). */
__device__ __forceinline__ void pick(double &d, int64_t &k, double d2, int64_t k2, bool want_max)
{
    if (ploss_mine_better(d, k, d2, k2, want_max)) {
        d = d2;
        k = k2;
    }
}

/* One warp per anchor row b0 + r of the Gram block `gram` (rows × N, leading dimension N).
 * Each candidate is ranked in double by a key monotone in its distance (ploss_pair_distance_
 * from_gram's values, without the square root of the Euclidean distance: the same order);
 * a key that is not finite is taken again from the rows.  f32 blocks are read 16 bytes a
 * lane (with the norms and labels) so that enough loads are in flight. */
template <class T>
__global__ void __launch_bounds__(THREADS) mine_kernel(const ploss_batch_hard_problem p, const T *xd,
                                                       const acc_t<T> *gram, const acc_t<T> *sq,
                                                       const int64_t *lab, const double *nrm, int64_t b0,
                                                       int64_t rows, anchor_t *an)
{
    using A = acc_t<T>;
    const int lane = threadIdx.x & 31;
    const bool cosine = p.distance == 2;
    for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
        const int64_t i = b0 + r, yi = lab[i];
        const A *t = gram + r * p.N;
        const double sqi = (double)sq[i], ni = nrm[i];
        double dp = 0.0, dn = 0.0;
        int64_t bp = -1, bn = -1;
        auto consider = [&](int64_t j, A g, A sqj, int64_t yj) {
            if (j == i)
                return;
            double d;
            if (cosine)
                d = 1.0 - (double)g / (ni * nrm[j]);
            else {
                d = sqi + (double)sqj - 2.0 * (double)g;
                d = d < 0.0 ? 0.0 : d; /* NaN stays NaN */
            }
            if (!isfinite(d)) { /* an infinite element (or an overflow): ∞ − ∞ is not ‖x_i − x_j‖ */
                double dd = 0.0, dot = 0.0;
                for (int64_t k = 0; k < p.D; ++k) {
                    const double u = (double)to_acc(xd[i * p.D + k]), v = (double)to_acc(xd[j * p.D + k]);
                    dd += (u - v) * (u - v);
                    dot += u * v;
                }
                d = cosine ? ploss_pair_distance_from_sums(p.distance, dd, dot, sqi, (double)sqj) : dd;
            }
            /* ploss_mine_better within one lane, whose candidates come in increasing j (a
             * tie keeps the earlier one): a NaN is kept once taken */
            const bool nan = d != d;
            if (yj == yi) {
                if (bp < 0 || (dp == dp && (nan || d > dp))) {
                    dp = d;
                    bp = j;
                }
            } else if (bn < 0 || (dn == dn && (nan || d < dn))) {
                dn = d;
                bn = j;
            }
        };
        int64_t nv = 0; /* the vectorised part */
        if constexpr (sizeof(A) == 4) {
            nv = p.N % 4 == 0 ? p.N : 0;
#pragma unroll 2
            for (int64_t j = 4 * lane; j < nv; j += 128) {
                const float4 g = *reinterpret_cast<const float4 *>(t + j), q = *reinterpret_cast<const float4 *>(sq + j);
                const longlong2 y0 = *reinterpret_cast<const longlong2 *>(lab + j);
                const longlong2 y1 = *reinterpret_cast<const longlong2 *>(lab + j + 2);
                consider(j, g.x, q.x, y0.x);
                consider(j + 1, g.y, q.y, y0.y);
                consider(j + 2, g.z, q.z, y1.x);
                consider(j + 3, g.w, q.w, y1.y);
            }
        }
        for (int64_t j = nv + lane; j < p.N; j += 32)
            consider(j, t[j], sq[j], lab[j]);
        for (int off = 16; off > 0; off >>= 1) {
            const double dp2 = __shfl_down_sync(0xffffffffu, dp, off), dn2 = __shfl_down_sync(0xffffffffu, dn, off);
            const long long bp2 = __shfl_down_sync(0xffffffffu, (long long)bp, off);
            const long long bn2 = __shfl_down_sync(0xffffffffu, (long long)bn, off);
            pick(dp, bp, dp2, bp2, true);
            pick(dn, bn, dn2, bn2, false);
        }
        if (lane == 0) {
            an[i].pos = bp;
            an[i].neg = bn;
        }
    }
}

/* One warp per anchor: the recomputed pair distances, ℓ_i, ∂ℓ/∂d, the loss of 'none'. */
template <class T>
__global__ void __launch_bounds__(THREADS) anchor_kernel(const ploss_batch_hard_problem p, const T *xd, const acc_t<T> *sq,
                                                         anchor_t *an)
{
    using A = acc_t<T>;
    const int lane = threadIdx.x & 31;
    for (int64_t i = warp_row(); i < p.N; i += warp_rows_stride()) {
        anchor_t a = an[i];
        a.loss = a.c = 0.0;
        if (a.pos >= 0 && a.neg >= 0) {
            const T *xi = xd + i * p.D, *xp = xd + a.pos * p.D, *xn = xd + a.neg * p.D;
            A ddp = 0, dotp = 0, ddn = 0, dotn = 0;
            for (int64_t j = lane; j < p.D; j += 32) {
                const A u = to_acc(xi[j]), v = to_acc(xp[j]), w = to_acc(xn[j]);
                ddp += (u - v) * (u - v);
                dotp += u * v;
                ddn += (u - w) * (u - w);
                dotn += u * w;
            }
            ddp = warp_all_reduce<32>(ddp, SumOp());
            dotp = warp_all_reduce<32>(dotp, SumOp());
            ddn = warp_all_reduce<32>(ddn, SumOp());
            dotn = warp_all_reduce<32>(dotn, SumOp());
            a.tp = ploss_pair_terms_of(p.distance, (double)ddp, (double)dotp, (double)sq[i], (double)sq[a.pos]);
            a.tn = ploss_pair_terms_of(p.distance, (double)ddn, (double)dotn, (double)sq[i], (double)sq[a.neg]);
            a.loss = ploss_triplet_hinge(a.tp.d, a.tn.d, p.margin, p.soft_margin, &a.c);
        }
        if (lane == 0) {
            an[i] = a;
            if (p.pass != PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE)
                store_dyn(p.loss, p.loss_dtype, i * p.l_sn, a.loss);
        }
    }
}

/* One block: the active anchors and (reduced forward / fused) the loss, summed in a fixed order. */
__global__ void __launch_bounds__(STATS_THREADS) stats_kernel(const ploss_batch_hard_problem p, const anchor_t *an,
                                                              stats_t *stats)
{
    double s = 0.0;
    long long n = 0;
    for (int64_t i = threadIdx.x; i < p.N; i += STATS_THREADS) {
        s += an[i].loss;
        n += an[i].pos >= 0 && an[i].neg >= 0;
    }
    s = block_reduce<STATS_THREADS>(s, SumOp());
    __syncthreads();
    n = block_reduce<STATS_THREADS>(n, SumOp());
    if (threadIdx.x != 0)
        return;
    stats->active = n;
    if (p.pass != PLOSS_PASS_BACKWARD && p.reduction != PLOSS_REDUCTION_NONE)
        store_dyn(p.loss, p.loss_dtype, 0,
                  p.reduction == PLOSS_REDUCTION_SUM ? s : (n ? s / (double)n : 0.0)); /* none active: 0 */
}

/* c_i ← ω_i·c_i: the weight of anchor i's positive pair (its negative pair: minus it). */
__global__ void __launch_bounds__(THREADS) weights_kernel(const ploss_batch_hard_problem p, anchor_t *an,
                                                          const stats_t *stats)
{
    const int64_t active = stats->active;
    for (int64_t i = thread_index(); i < p.N; i += grid_stride()) {
        if (an[i].c == 0.0)
            continue;
        double up;
        if (p.pass == PLOSS_PASS_FUSED)
            up = p.scale;
        else
            up = load_dyn(p.grad_loss, p.gl_dtype, p.reduction == PLOSS_REDUCTION_NONE ? i * p.gl_sn : 0);
        if (p.reduction == PLOSS_REDUCTION_MEAN)
            up = active ? up / (double)active : 0.0;
        an[i].c *= up;
    }
}

/* Entry e < N: anchor e's positive pair, e >= N: anchor e − N's negative pair; key: the
 * partner row, N (after every row) for an inactive anchor. */
__global__ void __launch_bounds__(THREADS) entries_kernel(int64_t N, const anchor_t *an, int64_t *keys, int64_t *vals)
{
    for (int64_t e = thread_index(); e < 2 * N; e += grid_stride()) {
        const anchor_t &a = an[e < N ? e : e - N];
        const bool active = a.pos >= 0 && a.neg >= 0;
        keys[e] = active ? (e < N ? a.pos : a.neg) : N;
        vals[e] = e;
    }
}

/* First position of `k` in the sorted keys[0, n). */
__device__ __forceinline__ int64_t lower_bound(const int64_t *keys, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < k)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* One block per row k, a thread per column (GRAD_THREADS columns at a time): its own pairs'
 * terms, then the other anchors' in entry order, then the coefficient of x_k; written in
 * the input dtype.  The entries that reach the row are read GRAD_THREADS at a time into
 * shared memory, so a row reached by many anchors (a hub of the batch) costs loads in
 * parallel, not a chain of them. */
constexpr int GRAD_THREADS = 256;
template <class T>
__global__ void __launch_bounds__(GRAD_THREADS)
grad_kernel(const ploss_batch_hard_problem p, const T *xd, const anchor_t *an, const int64_t *keys,
            const int64_t *vals)
{
    using A = acc_t<T>;
    __shared__ int64_t s_row[GRAD_THREADS];
    __shared__ A s_cross[GRAD_THREADS];
    __shared__ double s_self[GRAD_THREADS];
    __shared__ int64_t s_range[2];
    __shared__ double s_ks;
    const int tid = threadIdx.x;
    for (int64_t k = blockIdx.x; k < p.N; k += gridDim.x) {
        const anchor_t a = an[k];
        const double wk = a.c;
        if (tid == 0) {
            s_range[0] = lower_bound(keys, 2 * p.N, k);
            s_range[1] = lower_bound(keys, 2 * p.N, k + 1);
        }
        __syncthreads();
        const int64_t lo = s_range[0], hi = s_range[1];
        double self = wk != 0.0 ? wk * (a.tp.self_i - a.tn.self_i) : 0.0; /* thread 0's sum */
        const A kp = (A)(wk * a.tp.cross), kn = (A)(-wk * a.tn.cross);
        const T *xk = xd + k * p.D;
        T *g = (T *)p.grad.data + k * p.grad.sn;
        for (int64_t d0 = 0; d0 < p.D; d0 += GRAD_THREADS) {
            const int64_t j = d0 + tid;
            const bool in = j < p.D;
            A v = 0;
            if (in && wk != 0.0)
                v += kp * to_acc(xd[a.pos * p.D + j]) + kn * to_acc(xd[a.neg * p.D + j]);
            for (int64_t c0 = lo; c0 < hi; c0 += GRAD_THREADS) {
                const int n = hi - c0 < GRAD_THREADS ? (int)(hi - c0) : GRAD_THREADS;
                __syncthreads(); /* the last chunk's entries are read */
                if (tid < n) {
                    const int64_t e = vals[c0 + tid], i = e < p.N ? e : e - p.N;
                    const anchor_t &ai = an[i];
                    s_row[tid] = i;
                    s_cross[tid] = (A)(e < p.N ? ai.c * ai.tp.cross : -ai.c * ai.tn.cross);
                    s_self[tid] = e < p.N ? ai.c * ai.tp.self_j : -ai.c * ai.tn.self_j;
                }
                __syncthreads();
                if (d0 == 0 && tid == 0)
                    for (int q = 0; q < n; ++q)
                        self += s_self[q];
                if (in)
                    for (int q = 0; q < n; ++q)
                        v += s_cross[q] * to_acc(xd[s_row[q] * p.D + j]);
            }
            if (d0 == 0) {
                if (tid == 0)
                    s_ks = self;
                __syncthreads();
            }
            if (in)
                g[j * p.grad.sd] = from_acc<T>(v + (A)s_ks * to_acc(xk[j]));
        }
        __syncthreads(); /* s_range and s_ks may be written again */
    }
}

template <class T> ploss_status run(ploss_ctx_t *ctx, const ploss_batch_hard_problem *p)
{
    using A = acc_t<T>;
    const int64_t N = p->N, D = p->D;
    const bool want_grad = p->pass != PLOSS_PASS_FORWARD;
    cudaStream_t stream = stream_of(ctx);
    const int64_t B = N == 0 ? 0 : std::min<int64_t>(N, std::max<int64_t>(1, (int64_t)(GRAM_BYTES / sizeof(A)) / N));
    const int end_bit = [&] {
        int b = 1;
        while (b < 63 && (((int64_t)1 << b) <= N))
            ++b;
        return b;
    }();
    size_t sort_bytes = 0;
    if (want_grad && N > 0)
        cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const int64_t *)nullptr, (int64_t *)nullptr,
                                        (const int64_t *)nullptr, (int64_t *)nullptr, (int)(2 * N), 0, end_bit,
                                        stream);
    /* the workspace, sized by a dry run of the carving */
    auto layout = [&](char *base, T **xd, A **sq, int64_t **lab, double **nrm, A **gram, anchor_t **an, stats_t **stats, int64_t **keys,
                      int64_t **vals, void **sort_tmp) {
        carve c{base, 0};
        *xd = c.take<T>((size_t)N * (size_t)D);
        *sq = c.take<A>((size_t)N);
        *lab = c.take<int64_t>((size_t)N);
        *nrm = c.take<double>((size_t)N);
        *gram = c.take<A>((size_t)B * (size_t)N);
        *an = c.take<anchor_t>((size_t)N);
        *stats = c.take<stats_t>(1);
        const size_t ne = want_grad ? 2 * (size_t)N : 0;
        keys[0] = c.take<int64_t>(ne);
        keys[1] = c.take<int64_t>(ne);
        vals[0] = c.take<int64_t>(ne);
        vals[1] = c.take<int64_t>(ne);
        *sort_tmp = c.take<char>(sort_bytes);
        return c.used + 256;
    };
    T *xd;
    A *sq, *gram;
    double *nrm;
    int64_t *lab;
    anchor_t *an;
    stats_t *stats;
    int64_t *keys[2], *vals[2];
    void *sort_tmp;
    void *ws = NULL;
    ploss_status st = ploss_workspace(ctx, layout(nullptr, &xd, &sq, &lab, &nrm, &gram, &an, &stats, keys, vals, &sort_tmp), &ws);
    if (st)
        return st;
    layout((char *)ws, &xd, &sq, &lab, &nrm, &gram, &an, &stats, keys, vals, &sort_tmp);

    const unsigned blocks = row_blocks(N);
    if (N > 0) {
        pack_kernel<T><<<blocks, THREADS, 0, stream>>>(*p, xd, sq, lab, nrm);
        if ((st = check_launch("batch_hard pack")))
            return st;
    }
    for (int64_t b0 = 0; b0 < N; b0 += B) {
        const int64_t rows = std::min(B, N - b0);
        const ploss_gemm_problem g = {rows, N, D, 1.0, 0.0, xd + b0 * D, 0, D > 0 ? D : 1, xd, 1, D > 0 ? D : 1,
                                      p->dtype, gram, N, p->dtype == PLOSS_F64 ? PLOSS_F64 : PLOSS_F32};
        if ((st = ploss_cuda_gemm(ctx, &g)))
            return st;
        mine_kernel<T><<<row_blocks(rows), THREADS, 0, stream>>>(*p, xd, gram, sq, lab, nrm, b0, rows, an);
        if ((st = check_launch("batch_hard mine")))
            return st;
    }
    if (N > 0) {
        anchor_kernel<T><<<blocks, THREADS, 0, stream>>>(*p, xd, sq, an);
        if ((st = check_launch("batch_hard anchors")))
            return st;
    }
    stats_kernel<<<1, STATS_THREADS, 0, stream>>>(*p, an, stats);
    if ((st = check_launch("batch_hard stats")) || !want_grad || N == 0)
        return st;
    weights_kernel<<<grid_blocks(N, THREADS), THREADS, 0, stream>>>(*p, an, stats);
    if ((st = check_launch("batch_hard weights")))
        return st;
    entries_kernel<<<grid_blocks(2 * N, THREADS), THREADS, 0, stream>>>(N, an, keys[0], vals[0]);
    if ((st = check_launch("batch_hard entries")))
        return st;
    if (cub::DeviceRadixSort::SortPairs(sort_tmp, sort_bytes, keys[0], keys[1], vals[0], vals[1], (int)(2 * N), 0,
                                        end_bit, stream) != cudaSuccess)
        return check_launch("batch_hard sort");
    grad_kernel<T><<<(unsigned)std::min<int64_t>(N, 1 << 20), GRAD_THREADS, 0, stream>>>(*p, xd, an, keys[1], vals[1]);
    return check_launch("batch_hard gradient");
}

} // namespace
} // namespace ploss_cuda

using namespace ploss_cuda;

extern "C" ploss_status ploss_cuda_batch_hard(ploss_ctx_t *ctx, const ploss_batch_hard_problem *p)
{
    return dispatch_float(p->dtype, "embeddings", [&](auto tag) {
        using T = typename decltype(tag)::type;
        return run<T>(ctx, p);
    });
}
