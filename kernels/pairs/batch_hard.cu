/*
 * batch_hard.cu — CUDA backend of the batch-hard triplet loss (core/engines/pairs.h).
 *
 *   pack      the embeddings' squared norms, the labels as int64 and the cosine distance's
 *             clamped norms (and a dense copy of the embeddings where the GEMM cannot read
 *             them as they are);
 *   mining    bf16 on sm_90 with CUTLASS's headers (kernels/pairs/batch_hard_mine_gemm.cu):
 *             the Gram GEMM X_b·Xᵀ of a block of anchor rows with the mining in its
 *             epilogue, one key per row, column tile and kind (the hardest positive, the
 *             nearest negative: the fp32 distance's bits over the column), then one warp per
 *             anchor takes the best of its tiles' keys (ties, to fp32's rounding of the
 *             distance: the lowest index; a NaN distance wins).  The distances never reach
 *             memory.  A non-finite squared norm or a label beyond ±2^47 (the keys compare
 *             labels as two floats) sends every anchor to the rows instead (below).  Other
 *             dtypes and devices: the Gram block through cuBLAS (kernels/support/gemm.cu,
 *             fp32 output, f64 for f64), then one warp per anchor scans its row of the
 *             block for the hardest positive and negative by a key in double, monotone in
 *             the distance (the same ties and NaN; a non-finite value of the expansion is
 *             taken again from the rows).  The block holds at most GRAM_BYTES: the N×N
 *             matrix never exists;
 *   anchors   one warp per anchor: the two chosen distances recomputed from the rows, ℓ_i,
 *             ∂ℓ/∂d and the pairs' gradient terms (the maths of the CPU backend);
 *   stats     one block: the active anchors and the reduced loss, in a fixed order; then each
 *             anchor's ∂ℓ/∂d times its upstream factor ω (mean: over the active anchors);
 *   gradient  the pairs that reach each row from other anchors, grouped by row with a stable
 *             radix sort of (row, entry) — entry order is anchor order — and each row's first
 *             entry marked from the sorted keys, then one block per row adds its own terms
 *             and those in that order.
 * Everything is deterministic (no float atomics); the workspace is O(N + block) (and N·D for
 * a copy of the embeddings).
 */
#include <algorithm>

#include <cub/device/device_radix_sort.cuh>

#include "batch_hard_mine_gemm.h" /* its kernel is built with PLOSS_HAVE_CUTLASS alone */
#include "gemm.h"
#include "pairs.cuh"
#include "pairs.h"

namespace ploss_cuda {
namespace batch_hard_kernels {
namespace {

using namespace pairs;

constexpr int STATS_THREADS = 1024;
constexpr size_t GRAM_BYTES = (size_t)64 << 20; /* one Gram block */
#ifdef PLOSS_HAVE_CUTLASS
constexpr int64_t FUSED_KEY_BYTES = (int64_t)2 << 20; /* the fused mining: one block of anchor rows' keys */
#endif

struct anchor_t {
    int64_t pos, neg;          /* the hardest positive and negative (-1: none) */
    ploss_pair_terms tp, tn;
    double loss, c;
};

struct stats_t {
    int64_t active;
};

/* The fused mining's per-row inputs (batch_hard_mine_gemm.h; v == nullptr: not fused) and
 * the flag that sends the mining to the rows. */
struct fused_rows {
    float *v;
    float *lo, *hi;
    int *to_rows;
};

/* Squared norms sq (A), the labels as int64 (lab), the cosine distance's clamped norms
 * (nrm, double), a dense copy xd (row-major N×D, the input dtype) where xd is not null and
 * the fused mining's rows where f.v is not null. */
template <class T>
__global__ void __launch_bounds__(THREADS)
    pack_kernel(const ploss_batch_hard_problem p, T *xd, acc_t<T> *sq, int64_t *lab, double *nrm, fused_rows f)
{
    using A = acc_t<T>;
    const int lane = threadIdx.x & 31;
    const T *x = (const T *)p.x.data;
    for (int64_t i = warp_row(); i < p.N; i += warp_rows_stride()) {
        A s = 0;
        for (int64_t j = lane; j < p.D; j += 32) {
            const T v = x[i * p.x.sn + j * p.x.sd];
            if (xd)
                xd[i * p.D + j] = v;
            const A a = to_acc(v);
            s += a * a;
        }
        s = warp_all_reduce<32>(s, SumOp());
        if (lane == 0) {
            const int64_t y = load_int_dyn(p.labels, p.label_dtype, i * p.y_sn);
            sq[i] = s;
            lab[i] = y;
            nrm[i] = ploss_cosine_norm(sqrt((double)s));
            if (f.v) {
                f.v[i] = p.distance == PLOSS_PAIR_DISTANCE_COSINE ? (float)nrm[i] : (float)s;
                const int64_t hi = y >> 24; /* arithmetic: floor(y / 2^24) */
                f.lo[i] = (float)(y & 0xffffff);
                f.hi[i] = (float)hi;
                if (!isfinite((double)s) || hi < -((int64_t)1 << 23) || hi >= ((int64_t)1 << 23))
                    atomicOr(f.to_rows, 1);
            }
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

/* One anchor's hardest positive (dp, bp) and negative (dn, bn) so far; -1: none. */
struct hardest {
    double dp = 0.0, dn = 0.0;
    int64_t bp = -1, bn = -1;
    /* candidate j at distance d, within one lane whose candidates come in increasing j
     * (ploss_mine_better, a tie keeping the earlier one): a NaN is kept once taken */
    __device__ __forceinline__ void offer(int64_t j, double d, bool same)
    {
        const bool nan = d != d;
        if (same) {
            if (bp < 0 || (dp == dp && (nan || d > dp))) {
                dp = d;
                bp = j;
            }
        } else if (bn < 0 || (dn == dn && (nan || d < dn))) {
            dn = d;
            bn = j;
        }
    }
    /* the warp's best, in lane 0 */
    __device__ __forceinline__ void reduce_warp()
    {
        for (int off = 16; off > 0; off >>= 1) {
            const double dp2 = __shfl_down_sync(0xffffffffu, dp, off), dn2 = __shfl_down_sync(0xffffffffu, dn, off);
            const long long bp2 = __shfl_down_sync(0xffffffffu, (long long)bp, off);
            const long long bn2 = __shfl_down_sync(0xffffffffu, (long long)bn, off);
            pick(dp, bp, dp2, bp2, true);
            pick(dn, bn, dn2, bn2, false);
        }
    }
};

/* The mining key of anchor i and row j from the rows themselves (double sums), one lane:
 * the cosine distance, or the squared Euclidean distance (the Gram path's keys: the same
 * order as the distance). */
template <class T>
__device__ __forceinline__ double distance_from_rows(const ploss_batch_hard_problem &p, const T *xr, int64_t ldx,
                                                     int64_t i, int64_t j, double sqi, double sqj)
{
    double dd = 0.0, dot = 0.0;
    for (int64_t k = 0; k < p.D; ++k) {
        const double u = (double)to_acc(xr[i * ldx + k]), v = (double)to_acc(xr[j * ldx + k]);
        dd += (u - v) * (u - v);
        dot += u * v;
    }
    return p.distance == PLOSS_PAIR_DISTANCE_COSINE ? ploss_pair_distance_from_sums(p.distance, dd, dot, sqi, sqj) : dd;
}

/* One warp per anchor row b0 + r of the Gram block `gram` (rows × N, leading dimension N).
 * Each candidate is ranked in double by a key monotone in its distance (ploss_pair_distance_
 * from_gram's values, without the square root of the Euclidean distance: the same order);
 * a key that is not finite is taken again from the rows.  f32 blocks are read 16 bytes a
 * lane (with the norms and labels) so that enough loads are in flight. */
template <class T>
__global__ void __launch_bounds__(THREADS) mine_kernel(const ploss_batch_hard_problem p, const T *xr, int64_t ldx,
                                                       const acc_t<T> *gram, const acc_t<T> *sq,
                                                       const int64_t *lab, const double *nrm, int64_t b0,
                                                       int64_t rows, anchor_t *an)
{
    using A = acc_t<T>;
    const int lane = threadIdx.x & 31;
    const bool cosine = p.distance == PLOSS_PAIR_DISTANCE_COSINE;
    for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
        const int64_t i = b0 + r, yi = lab[i];
        const A *t = gram + r * p.N;
        const double sqi = (double)sq[i], ni = nrm[i];
        hardest h;
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
            if (!isfinite(d)) /* an infinite element (or an overflow): ∞ − ∞ is not ‖x_i − x_j‖ */
                d = distance_from_rows(p, xr, ldx, i, j, sqi, (double)sqj);
            h.offer(j, d, yj == yi);
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
        h.reduce_warp();
        if (lane == 0) {
            an[i].pos = h.bp;
            an[i].neg = h.bn;
        }
    }
}

/* The fused mining's choice (batch_hard_mine_gemm.h): one warp per anchor row b0 + r takes
 * the largest of its tiles' keys pos[r + Mr·t] and neg[r + Mr·t] (t < nt), whose low words
 * give the columns.  With *to_rows set, every anchor scans the rows instead, its distances
 * from the rows themselves (what the Gram path does for a value that is not finite). */
template <class T>
__global__ void __launch_bounds__(THREADS)
    mine_fused_kernel(const ploss_batch_hard_problem p, const T *xr, int64_t ldx, const acc_t<T> *sq,
                      const int64_t *lab, const double *pos, const double *neg, int64_t Mr, int64_t nt,
                      const int *to_rows, int64_t b0, int64_t rows, anchor_t *an)
{
    const int lane = threadIdx.x & 31;
    const bool scan = *to_rows != 0;
    for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
        const int64_t i = b0 + r;
        int64_t bp = -1, bn = -1;
        if (scan) {
            hardest h;
            const int64_t yi = lab[i];
            for (int64_t j = lane; j < p.N; j += 32)
                if (j != i)
                    h.offer(j, distance_from_rows(p, xr, ldx, i, j, (double)sq[i], (double)sq[j]), lab[j] == yi);
            h.reduce_warp();
            bp = h.bp;
            bn = h.bn;
        } else {
            double kp = -INFINITY, kn = -INFINITY;
            for (int64_t t = lane; t < nt; t += 32) {
                kp = fmax(kp, pos[r + Mr * t]);
                kn = fmax(kn, neg[r + Mr * t]);
            }
            for (int off = 16; off > 0; off >>= 1) {
                kp = fmax(kp, __shfl_down_sync(0xffffffffu, kp, off));
                kn = fmax(kn, __shfl_down_sync(0xffffffffu, kn, off));
            }
            const uint32_t lp = (uint32_t)__double_as_longlong(kp), ln = (uint32_t)__double_as_longlong(-kn);
            bp = kp > 0.0 ? (int64_t)(0xffffffffu - lp) : -1;
            bn = kn > -INFINITY ? (int64_t)ln : -1;
        }
        if (lane == 0) {
            an[i].pos = bp;
            an[i].neg = bn;
        }
    }
}

/* One warp per anchor: the recomputed pair distances, ℓ_i, ∂ℓ/∂d, the loss of 'none'. */
template <class T>
__global__ void __launch_bounds__(THREADS) anchor_kernel(const ploss_batch_hard_problem p, const T *xr, int64_t ldx,
                                                         const acc_t<T> *sq,
                                                         anchor_t *an)
{
    using A = acc_t<T>;
    const int lane = threadIdx.x & 31;
    for (int64_t i = warp_row(); i < p.N; i += warp_rows_stride()) {
        anchor_t a = an[i];
        a.loss = a.c = 0.0;
        if (a.pos >= 0 && a.neg >= 0) {
            const T *xi = xr + i * ldx, *xp = xr + a.pos * ldx, *xn = xr + a.neg * ldx;
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

/* first[k] = the first position of key k in the sorted keys[0, n) (k ≤ N, the keys in
 * [0, N]): position e writes the keys after keys[e − 1] up to keys[e] (N after the last),
 * so that each row's entries are first[k] .. first[k + 1] without a search. */
__global__ void __launch_bounds__(THREADS) first_kernel(const int64_t *keys, int64_t n, int64_t N, int64_t *first)
{
    for (int64_t e = thread_index(); e <= n; e += grid_stride()) {
        const int64_t prev = e == 0 ? -1 : keys[e - 1], cur = e == n ? N : keys[e];
        for (int64_t k = prev + 1; k <= cur; ++k)
            first[k] = e;
    }
}

/* One block per row k, a thread per column (GRAD_THREADS columns at a time): its own pairs'
 * terms, then the other anchors' in entry order, then the coefficient of x_k; written in
 * the input dtype.  The entries that reach the row are read GRAD_THREADS at a time into
 * shared memory, so a row reached by many anchors (a hub of the batch) costs loads in
 * parallel, not a chain of them. */
constexpr int GRAD_THREADS = 256;
template <class T>
__global__ void __launch_bounds__(GRAD_THREADS)
grad_kernel(const ploss_batch_hard_problem p, const T *xr, int64_t ldx, const anchor_t *an, const int64_t *first,
            const int64_t *vals)
{
    using A = acc_t<T>;
    __shared__ int64_t s_row[GRAD_THREADS];
    __shared__ A s_cross[GRAD_THREADS];
    __shared__ double s_self[GRAD_THREADS];
    __shared__ double s_ks;
    const int tid = threadIdx.x;
    for (int64_t k = blockIdx.x; k < p.N; k += gridDim.x) {
        const anchor_t a = an[k];
        const double wk = a.c;
        const int64_t lo = first[k], hi = first[k + 1];
        double self = wk != 0.0 ? wk * (a.tp.self_i - a.tn.self_i) : 0.0; /* thread 0's sum */
        const A kp = (A)(wk * a.tp.cross), kn = (A)(-wk * a.tn.cross);
        const T *xk = xr + k * ldx;
        T *g = (T *)p.grad.data + k * p.grad.sn;
        for (int64_t d0 = 0; d0 < p.D; d0 += GRAD_THREADS) {
            const int64_t j = d0 + tid;
            const bool in = j < p.D;
            A v = 0;
            if (in && wk != 0.0)
                v += kp * to_acc(xr[a.pos * ldx + j]) + kn * to_acc(xr[a.neg * ldx + j]);
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
                        v += s_cross[q] * to_acc(xr[s_row[q] * ldx + j]);
            }
            if (d0 == 0) {
                if (tid == 0)
                    s_ks = self;
                __syncthreads();
            }
            if (in)
                g[j * p.grad.sd] = from_acc<T>(v + (A)s_ks * to_acc(xk[j]));
        }
        __syncthreads(); /* s_ks may be written again */
    }
}

/* The workspace's pieces. */
template <class T> struct buffers {
    T *xd;
    acc_t<T> *sq, *gram;
    double *nrm;
    int64_t *lab;
    anchor_t *an;
    stats_t *stats;
    int64_t *keys[2], *vals[2];
    void *sort_tmp;
    fused_rows f;
    double *pos, *neg;
    void *gemm_ws;
};

template <class T> ploss_status run(ploss_ctx_t *ctx, const ploss_batch_hard_problem *p)
{
    using A = acc_t<T>;
    const int64_t N = p->N, D = p->D;
    const bool want_grad = p->pass != PLOSS_PASS_FORWARD;
    cudaStream_t stream = stream_of(ctx);
    /* the embeddings as the GEMM and the kernels read them: the view itself (element (i, k)
     * at i·ldx + k) or a dense copy */
    const bool copy = !((D <= 1 || p->x.sd == 1) && (N <= 1 || (p->x.sn >= D && p->x.sn <= INT32_MAX)));
    const int64_t ldx = copy || N <= 1 ? std::max<int64_t>(D, 1) : p->x.sn;

    /* The fused mining (bf16 on a compute capability 9.0 device): its TMA copies want
     * 16-byte rows (D and the row stride multiples of 8, a 16-byte aligned base), the
     * indices exact in fp32 (N < 2^24).  Blocks of Bf anchor rows keep the tiles' keys
     * within FUSED_KEY_BYTES (two doubles per row and column tile). */
    bool fused = false;
    int64_t Bf = 1, nt = 0;
    size_t gemm_ws = 0;
#ifdef PLOSS_HAVE_CUTLASS
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        constexpr int64_t tm = PLOSS_BATCH_HARD_TILE_M;
        fused = N > 0 && N < ((int64_t)1 << 24) && D > 0 && D % 8 == 0 && D < ((int64_t)1 << 30) &&
                (copy || (ldx % 8 == 0 && (uintptr_t)p->x.data % 16 == 0)) &&
                ploss_cuda_sm90a_serves(ctx->device.device_id);
        if (fused) {
            nt = (N + PLOSS_BATCH_HARD_TILE_N - 1) / PLOSS_BATCH_HARD_TILE_N;
            const int64_t per_row = 2 * nt * (int64_t)sizeof(double);
            Bf = std::min<int64_t>(N, std::max<int64_t>(tm, FUSED_KEY_BYTES / per_row / tm * tm));
            const ploss_batch_hard_mine_gemm g = {Bf, N, D, 0, nullptr, ldx, nullptr, nullptr, nullptr, 0,
                                                  nullptr, nullptr};
            fused = ploss_cuda_batch_hard_mine_gemm(&g, nullptr, 0, &gemm_ws, nullptr) == PLOSS_OK;
        }
    }
#endif
    const int64_t Mr = (Bf + PLOSS_BATCH_HARD_TILE_M - 1) / PLOSS_BATCH_HARD_TILE_M * PLOSS_BATCH_HARD_TILE_M;
    const int64_t B = N == 0 || fused ? 0 : std::min<int64_t>(N, std::max<int64_t>(1, (int64_t)(GRAM_BYTES / sizeof(A)) / N));
    const int end_bit = [&] {
        int b = 1;
        while (b < 63 && (((int64_t)1 << b) <= N))
            ++b;
        return b;
    }();
    size_t sort_bytes = 0;
    ploss_status st;
    if (want_grad && N > 0 &&
        (st = cub_status(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const int64_t *)nullptr,
                                                         (int64_t *)nullptr, (const int64_t *)nullptr,
                                                         (int64_t *)nullptr, (int)(2 * N), 0, end_bit, stream),
                         "batch_hard: sizing the sort")))
        return st;
    /* the workspace, sized by a dry run of the carving */
    buffers<T> w;
    auto layout = [&](char *base) {
        carve c{base, 0};
        /* (pieces not taken are null: the kernels test them) */
        w.xd = copy ? c.take<T>((size_t)N * (size_t)D) : nullptr;
        w.sq = c.take<A>((size_t)N);
        w.lab = c.take<int64_t>((size_t)N);
        w.nrm = c.take<double>((size_t)N);
        w.gram = c.take<A>((size_t)B * (size_t)N);
        w.an = c.take<anchor_t>((size_t)N);
        w.stats = c.take<stats_t>(1);
        const size_t ne = want_grad ? 2 * (size_t)N : 0;
        w.keys[0] = c.take<int64_t>(ne);
        w.keys[1] = c.take<int64_t>(ne);
        w.vals[0] = c.take<int64_t>(ne);
        w.vals[1] = c.take<int64_t>(ne);
        w.sort_tmp = c.take<char>(sort_bytes);
        const size_t nf = fused ? (size_t)N : 0;
        w.f = fused ? fused_rows{c.take<float>(nf), c.take<float>(nf), c.take<float>(nf), c.take<int>(1)}
                    : fused_rows{nullptr, nullptr, nullptr, nullptr};
        w.pos = c.take<double>(fused ? (size_t)(Mr * nt) : 0);
        w.neg = c.take<double>(fused ? (size_t)(Mr * nt) : 0);
        w.gemm_ws = c.take<char>(gemm_ws);
        return c.used + 256;
    };
    void *ws = NULL;
    st = ploss_workspace(ctx, layout(nullptr), &ws);
    if (st)
        return st;
    layout((char *)ws);
    const T *xr = copy ? w.xd : (const T *)p->x.data;

    const unsigned blocks = row_blocks(N);
    if (N > 0) {
        if (fused && (st = ploss_cuda_memset(w.f.to_rows, 0, sizeof(int), stream)))
            return st;
        pack_kernel<T><<<blocks, THREADS, 0, stream>>>(*p, w.xd, w.sq, w.lab, w.nrm, w.f);
        if ((st = check_launch("batch_hard pack")))
            return st;
    }
    if (fused) {
#ifdef PLOSS_HAVE_CUTLASS
        for (int64_t b0 = 0; b0 < N; b0 += Bf) {
            const int64_t rows = std::min(Bf, N - b0);
            const ploss_batch_hard_mine_gemm g = {rows, N,       D,        b0, xr, ldx, w.f.v, w.f.lo, w.f.hi,
                                                  p->distance == 2, w.pos, w.neg};
            if ((st = ploss_cuda_batch_hard_mine_gemm(&g, w.gemm_ws, gemm_ws, nullptr, stream)))
                return st;
            const int64_t mr = (rows + PLOSS_BATCH_HARD_TILE_M - 1) / PLOSS_BATCH_HARD_TILE_M * PLOSS_BATCH_HARD_TILE_M;
            mine_fused_kernel<T><<<row_blocks(rows), THREADS, 0, stream>>>(*p, xr, ldx, w.sq, w.lab, w.pos, w.neg, mr,
                                                                           nt, w.f.to_rows, b0, rows, w.an);
            if ((st = check_launch("batch_hard mine")))
                return st;
        }
#endif
    } else {
        for (int64_t b0 = 0; b0 < N; b0 += B) {
            const int64_t rows = std::min(B, N - b0);
            const ploss_gemm_problem g = {rows, N, D, 1.0, 0.0, xr + b0 * ldx, 0, ldx, xr, 1, ldx,
                                          p->dtype, w.gram, N, p->dtype == PLOSS_F64 ? PLOSS_F64 : PLOSS_F32};
            if ((st = ploss_cuda_gemm(ctx, &g)))
                return st;
            mine_kernel<T><<<row_blocks(rows), THREADS, 0, stream>>>(*p, xr, ldx, w.gram, w.sq, w.lab, w.nrm, b0,
                                                                     rows, w.an);
            if ((st = check_launch("batch_hard mine")))
                return st;
        }
    }
    if (N > 0) {
        anchor_kernel<T><<<blocks, THREADS, 0, stream>>>(*p, xr, ldx, w.sq, w.an);
        if ((st = check_launch("batch_hard anchors")))
            return st;
    }
    stats_kernel<<<1, STATS_THREADS, 0, stream>>>(*p, w.an, w.stats);
    if ((st = check_launch("batch_hard stats")) || !want_grad || N == 0)
        return st;
    weights_kernel<<<grid_blocks(N, THREADS), THREADS, 0, stream>>>(*p, w.an, w.stats);
    if ((st = check_launch("batch_hard weights")))
        return st;
    entries_kernel<<<grid_blocks(2 * N, THREADS), THREADS, 0, stream>>>(N, w.an, w.keys[0], w.vals[0]);
    if ((st = check_launch("batch_hard entries")))
        return st;
    size_t bytes = sort_bytes;
    if ((st = cub_status(cub::DeviceRadixSort::SortPairs(w.sort_tmp, bytes, w.keys[0], w.keys[1], w.vals[0], w.vals[1],
                                                         (int)(2 * N), 0, end_bit, stream),
                         "batch_hard: the sort")))
        return st;
    /* each row's first entry, over the unsorted keys (2N ≥ N + 1 of them) */
    first_kernel<<<grid_blocks(2 * N + 1, THREADS), THREADS, 0, stream>>>(w.keys[1], 2 * N, N, w.keys[0]);
    if ((st = check_launch("batch_hard rows' entries")))
        return st;
    grad_kernel<T><<<(unsigned)std::min<int64_t>(N, 1 << 20), GRAD_THREADS, 0, stream>>>(*p, xr, ldx, w.an,
                                                                                       w.keys[0], w.vals[1]);
    return check_launch("batch_hard gradient");
}

} // namespace

extern "C" ploss_status ploss_cuda_batch_hard(ploss_ctx_t *ctx, const ploss_batch_hard_problem *p)
{
    return dispatch_float(p->dtype, "embeddings", [&](auto tag) {
        using T = typename decltype(tag)::type;
        return run<T>(ctx, p);
    });
}

} // namespace batch_hard_kernels
} // namespace ploss_cuda
