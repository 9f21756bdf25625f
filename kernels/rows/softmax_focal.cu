/*
 * softmax_focal.cu — CUDA backend of the softmax focal family: softmax_focal and dual_focal
 * (formulas in core/engines/rows.h and core/ploss.h).
 *
 * Kernel shapes (as the cross-entropy family):
 *  - rows whose class axis is contiguous (or N×C) with C ≥ 32: a warp per row for
 *    C ≤ 1024, a block per row above, the row cached in shared memory when it fits
 *    (the second and third passes then read no global memory);
 *  - the class-strided layout N×C×d… (and C < 32): a thread per sample walking C with
 *    stride S, so a warp reads consecutive samples (coalesced).
 *  - softmax focal (with or without α), class axis contiguous, C ≥ 32, f32/f16/bf16: the
 *    row engine (kernels/rows/row_engine.cuh, policy_softmax_focal.cuh), which reads the
 *    row once and writes the gradient once; the kernels above serve dual focal, f64 and
 *    the class-strided layout.
 * Per sample: pass 1 the log-sum-exp (online max/sum per lane, merged with fixed-order CUB
 * reductions) unless a saved lse is given; dual focal: pass 2 the loss terms and Σ p·G;
 * last pass the gradient.  fp32 accumulation (f64 for f64); the log-sum-exp, the dual focal
 * terms and Σ p·G in double for every dtype (cancellation).  MEAN divides by the number of
 * valid samples, counted on the device first (an integer atomic: exact and order-free);
 * per-block partial sums of the loss go to the context's workspace and one block adds them
 * in a fixed order.  Invalid labels set the context's error slot, give the sample a NaN
 * loss and a zero gradient row (the row is never read).  No host synchronisation.
 */
#include <string.h>

#include "common.cuh"
#include "rows.h"
#include "policy_softmax_focal.cuh"

namespace ploss_cuda {
namespace {

constexpr int THREADS = 256;       /* warp-per-row and thread-per-sample kernels */
constexpr int ROW_THREADS = 512;   /* block-per-row kernel                       */
constexpr int FINISH_THREADS = 1024;
constexpr int64_t MAX_BLOCKS = 8192;
constexpr int64_t WARP_ROW_MAX_C = 1024;
constexpr int64_t ROW_MIN_C = 32;

__device__ __forceinline__ float m_exp(float v) { return expf(v); }
__device__ __forceinline__ double m_exp(double v) { return exp(v); }
__device__ __forceinline__ float m_expm1(float v) { return expm1f(v); }
__device__ __forceinline__ double m_expm1(double v) { return expm1(v); }
__device__ __forceinline__ float m_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double m_pow(double a, double b) { return pow(a, b); }

template <class A> __device__ __forceinline__ A pow_gamma(A q, A gamma)
{
    if (gamma == A(2))
        return q * q;
    if (gamma == A(1))
        return q;
    return m_pow(q, gamma);
}

/* Reductions over the lanes that share one sample; UNROLL: loads in flight per lane in
 * the first pass (enough bytes in flight per SM to cover the memory latency). */
struct single_group {
    static constexpr int UNROLL = 4;
    __device__ __forceinline__ int lane() const { return 0; }
    __device__ __forceinline__ int size() const { return 1; }
    template <class A> __device__ __forceinline__ A sum(A v) const { return v; }
    template <class A> __device__ __forceinline__ A max(A v) const { return v; }
};
struct warp_group {
    static constexpr int UNROLL = 8;
    __device__ __forceinline__ int lane() const { return (int)(threadIdx.x & 31u); }
    __device__ __forceinline__ int size() const { return 32; }
    template <class A> __device__ __forceinline__ A sum(A v) const { return warp_all_reduce<32>(v, SumOp()); }
    template <class A> __device__ __forceinline__ A max(A v) const { return warp_all_reduce<32>(v, MaxOp()); }
};
struct block_group {
    static constexpr int UNROLL = 16;
    __device__ __forceinline__ int lane() const { return (int)threadIdx.x; }
    __device__ __forceinline__ int size() const { return ROW_THREADS; }
    template <class A> __device__ __forceinline__ A sum(A v) const { return block_all_reduce<ROW_THREADS>(v, SumOp()); }
    template <class A> __device__ __forceinline__ A max(A v) const { return block_all_reduce<ROW_THREADS>(v, MaxOp()); }
};

/* ω of reduced losses (scalar upstream gradient, divided by the valid count for MEAN). */
template <class A>
__device__ __forceinline__ A reduced_omega(const ploss_sfocal_problem &p, const unsigned long long *count)
{
    double up = 0.0;
    if (p.pass == PLOSS_PASS_FUSED)
        up = p.scale;
    else if (p.pass == PLOSS_PASS_BACKWARD && p.reduction != PLOSS_REDUCTION_NONE)
        up = load_dyn(p.grad_loss, p.gl_dtype, 0);
    if (p.reduction == PLOSS_REDUCTION_MEAN) {
        const unsigned long long c = *count;
        up = c ? up / (double)c : 0.0;
    }
    return (A)up;
}

/* Dual focal term of class j in double: log(1 + ε − d_j²) and G_j = 2·d_j / (1 + ε − d_j²),
 * from lp = log p_j without cancellation (see core/cpu/rows/softmax_focal.c). */
__device__ __forceinline__ void dual_term(double lp, bool is_y, double eps, double &log_den, double &G)
{
    const double pj = exp(lp);
    double ad, om, d;
    if (is_y) {
        ad = -expm1(lp);
        om = pj;
        d = -ad;
    } else {
        ad = pj;
        om = -expm1(lp);
        d = pj;
    }
    const double den = eps + om * (1.0 + ad);
    log_den = log(den);
    G = 2.0 * d / den;
}

/* One sample i = (n, s), processed by the lanes of group g.  `cache` (CACHE only) holds
 * the row for the later passes; every lane reads back only the classes it wrote. */
template <class T, bool CACHE, class Group>
__device__ __forceinline__ void process_sample(const ploss_sfocal_problem &p, int64_t i, const Group &g, T *cache,
                                               acc_t<T> omega, int64_t *error_slot, acc_t<T> &thread_sum)
{
    using A = acc_t<T>;
    const T *x = (const T *)p.x;
    T *grad = (T *)p.grad;
    const int64_t C = p.C, n = i / p.S, s = i % p.S;
    const int lane = g.lane(), size = g.size();
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD;
    const bool want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool none = p.reduction == PLOSS_REDUCTION_NONE;

    const int64_t y = sample_label(p, n, s);
    bool valid = y != p.ignore_index, invalid = false;
    if (valid && (y < 0 || y >= C)) {
        if (lane == 0)
            report_invalid_label(error_slot, y);
        valid = false;
        invalid = true;
    }
    const int64_t xo = n * p.x_sn + s * p.x_ss, go = n * p.g_sn + s * p.g_ss;
    if (!valid) { /* ignored: loss 0; invalid label: NaN loss (as cross_entropy.cu); zero gradient */
        if (want_loss && lane == 0) {
            const double v = invalid ? (double)NAN : 0.0;
            if (none)
                store_dyn(p.loss, p.loss_dtype, n * p.l_sn + s * p.l_ss, v);
            else if (invalid)
                thread_sum += (A)v;
            if (p.lse)
                store_state(p.lse, p.lse_dtype, n * p.lse_sn + s * p.lse_ss, v);
        }
        if (want_grad)
            for (int64_t j = lane; j < C; j += size)
                grad[go + j * p.g_sc] = from_acc<T>(A(0));
        return;
    }
    /* read before any lane can write the gradient over the input (in-place fused) */
    const A xy = to_acc(x[xo + y * p.x_sc]);

    bool filled = false; /* the cache holds this row */
    auto X = [&](int64_t j) -> A {
        if (CACHE && filled)
            return to_acc(cache[j]);
        const T v = x[xo + j * p.x_sc];
        if (CACHE)
            cache[j] = v;
        return to_acc(v);
    };

    /* The lse is kept in double for every dtype: log p_j = x_j − lse cancels when p_j → 1
     * (the dominant class of a confident sample, where 1 − p_j = −expm1(log p_j) is what the
     * dual focal term log(1 + ε − d²) and the softmax focal factor (1 − p_t)^γ need).  With an
     * f32 lse the rounding of lse (|lse|·2^-24) is an absolute error on log p_j, i.e. a
     * relative error |lse|·2^-24 / (1 − p_j) on 1 − p_j: 1e-2 at lse ≈ 9, 1 − p_j ≈ 1e-4 (a
     * dual focal loss off by 0.01 on the GPU).  Σe is therefore summed in double
     * (its terms e^{x−m} stay float: each has a relative error, and the max term is exactly 1
     * so 1 − p_j = rest / (1 + rest) keeps the relative accuracy of the rest). */
    double lse;
    if (p.pass == PLOSS_PASS_BACKWARD && p.lse) {
        lse = load_state(p.lse, p.lse_dtype, n * p.lse_sn + s * p.lse_ss);
    } else {
        /* online (max, Σe) per lane; UNROLL independent loads in flight per lane */
        constexpr int UNROLL = Group::UNROLL;
        A m = -INFINITY;
        double se = 0.0;
        for (int64_t j0 = lane; j0 < C; j0 += (int64_t)size * UNROLL) {
            A v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int64_t j = j0 + (int64_t)u * size;
                v[u] = j < C ? X(j) : A(0);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                if (j0 + (int64_t)u * size >= C)
                    break;
                if (v[u] > m) {
                    se = se * (double)m_exp(m - v[u]) + 1.0;
                    m = v[u];
                } else {
                    se += (double)m_exp(v[u] - m);
                }
            }
        }
        filled = CACHE;
        const A mall = g.max(m);
        const double sall = g.sum(se != 0.0 ? se * (double)m_exp(m - mall) : se);
        lse = (double)mall + ::log(sall);
    }
    /* log p_j = x_j − lse in double, then rounded once to A */
    auto logp = [&](A xj) -> A { return (A)((double)xj - lse); };

    A loss = A(0), G = A(0);
    double PG = 0.0;
    if (p.kind == PLOSS_SOFTMAX_FOCAL) {
        const A alpha = p.w ? load_float_dyn<A>(p.w, p.w_dtype, y * p.w_s) : A(1);
        const A lp = logp(xy), u = -m_expm1(lp), L = -lp, gamma = (A)p.gamma;
        if (gamma == A(0)) {
            G = alpha;
            loss = alpha * L;
        } else {
            const A ug = pow_gamma(u, gamma);
            const A r = u > A(0) ? L / u : A(1);
            G = alpha * ug * (A(1) + gamma * m_exp(lp) * r);
            loss = alpha * ug * L;
        }
    } else {
        /* dual focal in double: the gradient p_j·(G_j − Σ_k p_k G_k) cancels when G_j is
         * close to the mean (f32 terms gave 7e-4 relative error on the H200) */
        double lsum = 0.0, pg = 0.0;
        for (int64_t j = lane; j < C; j += size) {
            const double lpj = (double)X(j) - lse;
            double log_den, Gj;
            dual_term(lpj, j == y, p.eps, log_den, Gj);
            lsum -= log_den;
            pg += m_exp(lpj) * Gj;
        }
        filled = CACHE;
        loss = (A)g.sum(lsum);
        PG = g.sum(pg);
    }

    if (want_loss && lane == 0) {
        if (none)
            store_dyn(p.loss, p.loss_dtype, n * p.l_sn + s * p.l_ss, (double)loss);
        else
            thread_sum += loss;
        if (p.lse)
            store_state(p.lse, p.lse_dtype, n * p.lse_sn + s * p.lse_ss, (double)lse);
    }
    if (!want_grad)
        return;
    A w_i = omega;
    if (p.pass == PLOSS_PASS_BACKWARD && none)
        w_i = (A)load_dyn(p.grad_loss, p.gl_dtype, n * p.gl_sn + s * p.gl_ss);
    for (int64_t j = lane; j < C; j += size) {
        A gj;
        if (p.kind == PLOSS_SOFTMAX_FOCAL) {
            const A lpj = logp(X(j));
            gj = w_i * G * (j == y ? m_expm1(lpj) : m_exp(lpj));
        } else {
            const double lpj = (double)X(j) - lse;
            double log_den, Gj;
            dual_term(lpj, j == y, p.eps, log_den, Gj);
            gj = (A)((double)w_i * m_exp(lpj) * (Gj - PG));
        }
        grad[go + j * p.g_sc] = from_acc<T>(gj);
    }
}

/* Block-level partial of the per-thread loss sums (all threads of the block call it). */
template <int BLOCK, class A>
__device__ __forceinline__ void write_partial(const ploss_sfocal_problem &p, A thread_sum, double *partials)
{
    if (p.pass == PLOSS_PASS_BACKWARD || p.reduction == PLOSS_REDUCTION_NONE)
        return;
    const double b = (double)block_reduce<BLOCK>(thread_sum, SumOp());
    if (threadIdx.x == 0)
        partials[blockIdx.x] = b;
}

/* Valid samples (label ≠ ignore_index and in range), for MEAN. */
__global__ void __launch_bounds__(THREADS)
count_valid(const ploss_sfocal_problem p, unsigned long long *count)
{
    const int64_t M = p.N * p.S;
    unsigned long long c = 0;
    for (int64_t i = thread_index(); i < M; i += grid_stride()) {
        const int64_t n = i / p.S, s = i % p.S;
        const int64_t y = sample_label(p, n, s);
        c += y != p.ignore_index && y >= 0 && y < p.C;
    }
    c = block_reduce<THREADS>(c, SumOp());
    if (threadIdx.x == 0 && c)
        atomicAdd(count, c); /* integer: exact whatever the order */
}

template <class T>
__global__ void __launch_bounds__(THREADS)
sfocal_samples(const ploss_sfocal_problem p, const unsigned long long *count, int64_t *error_slot, double *partials)
{
    using A = acc_t<T>;
    const A omega = reduced_omega<A>(p, count);
    A thread_sum = A(0);
    const int64_t M = p.N * p.S;
    for (int64_t i = thread_index(); i < M; i += grid_stride())
        process_sample<T, false>(p, i, single_group(), (T *)nullptr, omega, error_slot, thread_sum);
    write_partial<THREADS>(p, thread_sum, partials);
}

template <class T>
__global__ void __launch_bounds__(THREADS)
sfocal_rows_warp(const ploss_sfocal_problem p, const unsigned long long *count, int64_t *error_slot,
                 double *partials)
{
    using A = acc_t<T>;
    constexpr int WARPS = THREADS / 32;
    const A omega = reduced_omega<A>(p, count);
    A thread_sum = A(0);
    const int64_t M = p.N * p.S;
    for (int64_t i = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32; i < M; i += (int64_t)gridDim.x * WARPS)
        process_sample<T, false>(p, i, warp_group(), (T *)nullptr, omega, error_slot, thread_sum);
    write_partial<THREADS>(p, thread_sum, partials);
}

template <class T, bool CACHE>
__global__ void __launch_bounds__(ROW_THREADS, 2)
sfocal_rows_block(const ploss_sfocal_problem p, const unsigned long long *count, int64_t *error_slot,
                  double *partials)
{
    using A = acc_t<T>;
    extern __shared__ __align__(16) unsigned char row_cache[];
    const A omega = reduced_omega<A>(p, count);
    A thread_sum = A(0);
    const int64_t M = p.N * p.S;
    for (int64_t i = blockIdx.x; i < M; i += gridDim.x)
        process_sample<T, CACHE>(p, i, block_group(), (T *)row_cache, omega, error_slot, thread_sum);
    write_partial<ROW_THREADS>(p, thread_sum, partials);
}

__global__ void __launch_bounds__(FINISH_THREADS)
sfocal_finish(const ploss_sfocal_problem p, const double *partials, int64_t nparts, const unsigned long long *count)
{
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < nparts; i += FINISH_THREADS)
        s += partials[i];
    s = block_reduce<FINISH_THREADS>(s, SumOp());
    if (threadIdx.x == 0) {
        store_dyn(p.loss, p.loss_dtype, 0, p.reduction == PLOSS_REDUCTION_MEAN ? ploss_rows_mean(s, (double)*count) : s);
    }
}

/* Largest dynamic shared memory for one block on this device (opt-in), minus a reserve
 * for the reductions' static storage. */
size_t row_cache_limit(int device)
{
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess || v <= 0) {
        cudaGetLastError();
        return 48 * 1024 - 4096;
    }
    return (size_t)v > 8192 ? (size_t)v - 8192 : 0;
}

} // namespace
} // namespace ploss_cuda

using namespace ploss_cuda;

/* Softmax focal on rows with a contiguous class axis (C ≥ 32, f32/f16/bf16): the row
 * engine (kernels/rows/row_engine.cuh, policy_softmax_focal.cuh).  PLOSS_ERR_UNSUPPORTED
 * (nothing launched) when it does not apply. */
template <class T> static ploss_status softmax_focal_rows(ploss_ctx_t *ctx, const ploss_sfocal_problem *p)
{
    namespace re = row_engine;
    re::RowArgs a = re::row_args(*p);
    a.state = p->lse; a.state_dtype = p->lse_dtype; a.st_sn = p->lse_sn; a.st_ss = p->lse_ss;
    re::SoftmaxFocalPolicy pol = {};
    pol.gamma = (float)p->gamma;
    const size_t extra = p->w ? re::class_values_bytes(p->C) : 0;
    return re::run<T>(ctx, a, pol, extra, [&](char *ws, cudaStream_t stream, re::SoftmaxFocalPolicy &q) {
        const double *sum = nullptr;
        return p->w ? re::convert_class_values(p->w, p->w_dtype, p->w_s, p->C, ws, stream, &q.alpha, &sum) : PLOSS_OK;
    });
}

static ploss_status softmax_focal_engine(ploss_ctx_t *ctx, const ploss_sfocal_problem *p)
{
    if (p->kind != PLOSS_SOFTMAX_FOCAL || p->C < ROW_MIN_C)
        return PLOSS_ERR_UNSUPPORTED;
    return dispatch_float(p->x_dtype, "input", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (sizeof(T) <= 4) {
            if (row_engine::serves<T>(p->x_sc, p->C))
                return softmax_focal_rows<T>(ctx, p);
        }
        return PLOSS_ERR_UNSUPPORTED;
    });
}

extern "C" ploss_status ploss_cuda_softmax_focal(ploss_ctx_t *ctx, const ploss_sfocal_problem *p)
{
    {
        const ploss_status st = softmax_focal_engine(ctx, p);
        if (st != PLOSS_ERR_UNSUPPORTED)
            return st;
    }
    const int64_t M = p->N * p->S;
    const bool want_loss = p->pass != PLOSS_PASS_BACKWARD;
    const bool want_grad = p->pass != PLOSS_PASS_FORWARD;
    const bool mean = p->reduction == PLOSS_REDUCTION_MEAN;
    const bool need_partials = want_loss && p->reduction != PLOSS_REDUCTION_NONE;
    const bool need_count = mean && (need_partials || want_grad);
    cudaStream_t stream = stream_of(ctx);

    enum { SAMPLES, ROWS_WARP, ROWS_BLOCK } shape;
    if ((p->S == 1 || p->x_sc == 1) && p->C >= ROW_MIN_C)
        shape = p->C <= WARP_ROW_MAX_C ? ROWS_WARP : ROWS_BLOCK;
    else
        shape = SAMPLES;
    unsigned blocks;
    if (shape == SAMPLES)
        blocks = grid_blocks(M, THREADS, MAX_BLOCKS);
    else if (shape == ROWS_WARP)
        blocks = grid_blocks(M, THREADS / 32, MAX_BLOCKS);
    else
        blocks = grid_blocks(M, 1, MAX_BLOCKS);

    /* workspace: [count (8 bytes, padded to 256)] [partials: blocks doubles] */
    const size_t count_bytes = 256;
    void *ws = NULL;
    ploss_status st = ploss_workspace(ctx, count_bytes + (size_t)blocks * sizeof(double), &ws);
    if (st)
        return st;
    unsigned long long *count = (unsigned long long *)ws;
    double *partials = (double *)((char *)ws + count_bytes);

    if (need_count) {
        if ((st = ploss_cuda_memset(count, 0, sizeof *count, stream)))
            return st;
        st = dispatch_index(p->t_dtype, "target", [&](auto) { /* the kernels read the labels' dtype at run time */
            count_valid<<<grid_blocks(M, THREADS, MAX_BLOCKS), THREADS, 0, stream>>>(*p, count);
            return check_launch("count_valid");
        });
        if (st)
            return st;
    }

    if (M > 0) {
        const size_t cache_limit = shape == ROWS_BLOCK ? row_cache_limit(ctx->device.device_id) : 0;
        st = dispatch_float(p->x_dtype, "input", [&](auto xtag) {
            using T = typename decltype(xtag)::type;
            return dispatch_index(p->t_dtype, "target", [&](auto) {
                if (shape == SAMPLES) {
                    sfocal_samples<T><<<blocks, THREADS, 0, stream>>>(*p, count, ctx->error_slot, partials);
                } else if (shape == ROWS_WARP) {
                    sfocal_rows_warp<T><<<blocks, THREADS, 0, stream>>>(*p, count, ctx->error_slot, partials);
                } else {
                    const size_t bytes = (size_t)p->C * sizeof(T);
                    if (bytes <= cache_limit) {
                        if (bytes > 48 * 1024 &&
                            cudaFuncSetAttribute(sfocal_rows_block<T, true>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess)
                            return check_launch("sfocal_rows_block (shared memory size)");
                        sfocal_rows_block<T, true>
                            <<<blocks, ROW_THREADS, bytes, stream>>>(*p, count, ctx->error_slot, partials);
                    } else {
                        sfocal_rows_block<T, false>
                            <<<blocks, ROW_THREADS, 0, stream>>>(*p, count, ctx->error_slot, partials);
                    }
                }
                return check_launch("softmax_focal kernel");
            });
        });
        if (st)
            return st;
    } else if (need_partials) {
        if ((st = ploss_cuda_memset(partials, 0, sizeof(double), stream)))
            return st;
        blocks = 1;
    }
    if (!need_partials)
        return PLOSS_OK;
    sfocal_finish<<<1, FINISH_THREADS, 0, stream>>>(*p, partials, (int64_t)blocks, count);
    return check_launch("sfocal_finish");
}
