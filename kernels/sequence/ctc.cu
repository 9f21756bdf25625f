/*
 * ctc.cu — CUDA backend of the CTC loss (core/engines/sequence.h; formulas in
 * docs/losses.md), in fp32 for f32/f16/bf16 (f64 for f64), log space throughout.
 *
 *  - ctc_row_lse (logits only): a warp per (frame, sequence) row takes its log-sum-exp, which
 *    every read of a log-probability then subtracts.
 *  - ctc_recursion: a block per sequence runs α over its frames and, with a gradient, a
 *    second block per sequence β from the last frame back, in the same launch; a thread per
 *    position of the extended target (strided over 2S + 1), one barrier per frame, the
 *    previous frame read from shared memory and the log-probabilities of a thread's first
 *    positions loaded a few frames ahead; each position's three-way log-sum-exp in one step
 *    (lse3; fp32 by the fast intrinsics); each frame stored relative to a per-frame offset
 *    kept in double, so that the stored values stay near 0 and their fp32 rounding does not
 *    grow with the frames; with a gradient every frame of α and β (and its offset) is kept
 *    in the workspace, else two of α; the α block writes the sequence's loss ℓ_n.
 *  - ctc_grad (gradient only): a block per (frame, sequence) writes the frame's gradient row:
 *    e^lp·w for every class, then, after a barrier, the classes of the target: γ of the blank
 *    by a block reduction over the even positions, γ of a label by one thread walking the
 *    positions of that label (a chain made on the host, so the order of the sums is fixed);
 *    frames past the sequence's length get zeros.
 *  - ctc_loss: one block stores the losses (NONE) or reduces them in a fixed order.
 * The lengths, labels and chains come from the host (the front checked them) through the
 * workspace; no atomics: the results are bitwise repeatable.
 */
#include <math_constants.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <new>
#include <vector>

#include "common.cuh"
#include "sequence.h"

namespace ploss_cuda {
namespace ctc_kernels {
namespace {

constexpr int THREADS = 256;

/* The sequences' facts on the device. */
struct Sequences {
    const int64_t *input_length, *target_length, *offset; /* N each */
    const int32_t *labels;                                /* per label: its class         */
    const int32_t *next;                                  /* the next position of the same
                                                           * class in its target, 0: none */
    const int32_t *head;                                  /* 1 at a class's first position */
    const void *lse;                                      /* logits: the rows' log-sum-exps,
                                                           * acc_t (row t·N + n); else NULL */
};

template <class A> __device__ __forceinline__ A neg_inf() { return (A)-CUDART_INF; }

template <class A> __device__ __forceinline__ A lse(A a, A b)
{
    const A hi = a > b ? a : b, lo = a > b ? b : a;
    return lo == neg_inf<A>() ? hi : hi + log1p(exp(lo - hi));
}

template <class T>
__device__ __forceinline__ acc_t<T> logp(const ploss_ctc_problem &p, const Sequences &q, int64_t t, int64_t n, int64_t c)
{
    using A = acc_t<T>;
    const A v = (A)to_acc(((const T *)p.x)[t * p.x_st + n * p.x_sn + c * p.x_sc]);
    return q.lse ? v - ((const A *)q.lse)[t * p.N + n] : v;
}

/* log Σ_c e^x[t, n, c] of row r = t·N + n, a warp per row (a butterfly: the same order every run). */
template <class T> __global__ void __launch_bounds__(THREADS) ctc_row_lse(ploss_ctc_problem p, acc_t<T> *lse)
{
    using A = acc_t<T>;
    const int64_t r = (int64_t)blockIdx.x * (THREADS / 32) + threadIdx.x / 32;
    if (r >= p.T * p.N)
        return; /* the whole warp */
    const int lane = threadIdx.x % 32;
    const T *x = (const T *)p.x + (r / p.N) * p.x_st + (r % p.N) * p.x_sn;
    A m = neg_inf<A>(), s = A(0);
    for (int64_t c = lane; c < p.C; c += 32)
        m = max(m, (A)to_acc(x[c * p.x_sc]));
    for (int o = 16; o > 0; o >>= 1)
        m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    for (int64_t c = lane; c < p.C; c += 32)
        s += exp((A)to_acc(x[c * p.x_sc]) - m);
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0)
        lse[r] = m + log(s);
}

__device__ __forceinline__ int64_t symbol(const ploss_ctc_problem &p, const int32_t *lab, int64_t s)
{
    return s & 1 ? (int64_t)lab[s >> 1] : p.blank;
}

/* log(e^a + e^b + e^c) of the recursion, −∞ when all three are, NaN when one is (as the
 * CPU's: where the comparisons pass over a NaN and find only −∞ besides, the sum keeps it).
 * fp32: one maximum, three exponentials and a logarithm by the fast intrinsics (ex2.approx,
 * lg2.approx: an absolute error of about 2^-22, below the rounding of α itself once it is
 * past a few units); f64: two exact pairwise steps. */
__device__ __forceinline__ float lse3(float a, float b, float c)
{
    const float ab = a > b ? a : b, m = ab > c ? ab : c;
    return m == -CUDART_INF_F ? a + b + c : m + __logf(__expf(a - m) + __expf(b - m) + __expf(c - m));
}
__device__ __forceinline__ double lse3(double a, double b, double c) { return lse(lse(a, b), c); }

/* The recursion's constants: each thread's first POS positions of the extended target keep
 * their symbol and skip flag in registers and have their log-probabilities loaded PF frames
 * ahead of use (the loads' latency off the frame-to-frame chain); later positions (targets
 * of more than (POS·THREADS − 1)/2 labels) load theirs when used. */
constexpr int POS = 4, PF = 4;

/* Whether position s (a label) may be reached from s − 2: its label differs from the
 * previous one. */
__device__ __forceinline__ bool skip_to(const int32_t *lab, int64_t s)
{
    return (s & 1) && s > 1 && lab[s >> 1] != lab[(s >> 1) - 1];
}

/* α (blocks [0, N)) or β (blocks [N, 2N), with a gradient) of sequence n = blockIdx.x mod N,
 * one thread per position of the extended target (strided over 2L + 1), one barrier per
 * frame.  Each frame is stored relative to an offset O_f (double): its values minus the
 * largest of the previous frame's stored values are added to O_{f−1}, so what is stored
 * stays within a few units of 0 and its fp32 rounding does not grow with the frames (α itself
 * falls by about log C per frame: past 8192 its fp32 spacing is 2^-10); the blocks' warps
 * leave their maxima in shared memory for the next frame (no extra barrier).  With KEEP the
 * offsets go to offsets[n·frames + t] (α) and offsets[(N + n)·frames + t] (β).  The last two
 * frames in shared memory (ring_smem: 2·S2 values of dynamic shared memory; else the
 * workspace serves, as the kept table or two frames of it); with KEEP every frame is also
 * stored in the table (α at alpha, β at beta; frame t of sequence n at (n·frames + t)·S2),
 * else two (α only).  β_t(s) includes lp_t(s), as α_t(s) does.  The α blocks write ℓ_n to
 * nll[n]. */
template <class T, bool KEEP>
__global__ void __launch_bounds__(THREADS) ctc_recursion(ploss_ctc_problem p, Sequences q, acc_t<T> *alpha,
                                                         acc_t<T> *beta, int64_t frames, int64_t S2, bool ring_smem,
                                                         double *offsets, double *nll)
{
    using A = acc_t<T>;
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ A wmax[2][THREADS / 32]; /* each warp's largest stored value of the last two frames */
    const bool fw = blockIdx.x < p.N;
    const int64_t n = fw ? blockIdx.x : blockIdx.x - p.N;
    const int64_t Tn = q.input_length[n], L = q.target_length[n], s2 = 2 * L + 1;
    const int32_t *lab = q.labels + q.offset[n];
    A *table = (fw ? alpha : beta) + n * frames * S2;
    if (Tn == 0) {
        if (fw && threadIdx.x == 0)
            nll[n] = L == 0 ? 0.0 : CUDART_INF;
        return;
    }
    /* frame f of the walk is frame t = f (α) or Tn − 1 − f (β); its values at buf(f) */
    const auto frame_of = [&](int64_t f) { return fw ? f : Tn - 1 - f; };
    const auto buf = [&](int64_t f) -> A * {
        if (ring_smem)
            return (A *)smem + (f & 1) * S2;
        return table + (KEEP ? frame_of(f) : f & 1) * S2;
    };
    const T *x = (const T *)p.x + n * p.x_sn;
    const A *lse_n = q.lse ? (const A *)q.lse + n : nullptr; /* frame t's at lse_n[t·N] */
    const auto lp_raw = [&](int64_t t, int64_t c) { return x[t * p.x_st + c * p.x_sc]; };
    const auto lp_of = [&](T raw, A row_lse) { return (A)to_acc(raw) - row_lse; };

    int64_t sym[POS];
    bool skip[POS]; /* α: from s − 2 into s; β: from s + 2 into s */
    T raw[POS][PF]; /* the log-probabilities of frames f0 + u, loaded ahead */
    A rl[PF];       /* their rows' log-sum-exps (logits), else 0 */
#pragma unroll
    for (int k = 0; k < POS; ++k) {
        const int64_t s = threadIdx.x + (int64_t)k * THREADS;
        sym[k] = s < s2 ? symbol(p, lab, s) : p.blank;
        skip[k] = s < s2 && (fw ? skip_to(lab, s) : s + 2 < s2 && skip_to(lab, s + 2));
    }
    const auto prefetch = [&](int u, int64_t f) {
        if (f >= Tn)
            return;
        const int64_t t = frame_of(f);
        rl[u] = lse_n ? lse_n[t * p.N] : A(0);
#pragma unroll
        for (int k = 0; k < POS; ++k)
            if (threadIdx.x + (int64_t)k * THREADS < s2)
                raw[k][u] = lp_raw(t, sym[k]);
    };
    double *off = KEEP ? offsets + ((fw ? 0 : p.N) + n) * frames : nullptr;
    /* frame f's largest stored value (NaN ignored) into wmax[f & 1], a slot per warp */
    const auto leave_max = [&](int64_t f, A tm) {
        for (int o = 16; o > 0; o >>= 1)
            tm = max(tm, __shfl_xor_sync(0xffffffffu, tm, o));
        if (threadIdx.x % 32 == 0)
            wmax[f & 1][threadIdx.x / 32] = tm;
    };
    double O = 0.0; /* the offset of the frame last stored */
    /* frame 0: α_0 at positions 0 and 1, β_{Tn−1} at the last two; offset 0 */
    {
        const int64_t t = frame_of(0);
        const A r0 = lse_n ? lse_n[t * p.N] : A(0);
        A *cur = buf(0), tm = neg_inf<A>();
        for (int64_t s = threadIdx.x; s < s2; s += THREADS) {
            const bool start = fw ? s < 2 : s >= s2 - 2;
            const A v = start ? lp_of(lp_raw(t, symbol(p, lab, s)), r0) : neg_inf<A>();
            cur[s] = v;
            tm = max(tm, v);
            if (KEEP && ring_smem)
                table[t * S2 + s] = v;
        }
        leave_max(0, tm);
        if (KEEP && threadIdx.x == 0)
            off[t] = 0.0;
    }
#pragma unroll
    for (int u = 0; u < PF; ++u)
        prefetch(u, 1 + u);
    for (int64_t f0 = 1; f0 < Tn; f0 += PF) {
#pragma unroll
        for (int u = 0; u < PF; ++u) {
            const int64_t f = f0 + u;
            if (f >= Tn)
                break;
            __syncthreads(); /* frame f − 1 complete */
            const int64_t t = frame_of(f);
            const A *prev = buf(f - 1);
            A *cur = buf(f), tm = neg_inf<A>();
            const int d = fw ? -1 : 1; /* the neighbours: s + d, s + 2d */
            /* the shift: frame f − 1's largest stored value (0 where it is ±∞: no alignment
             * reaches the frame, or an infinite input) */
            A m = neg_inf<A>();
#pragma unroll
            for (int w = 0; w < THREADS / 32; ++w)
                m = max(m, wmax[(f - 1) & 1][w]);
            if (!(m > neg_inf<A>() && m < -neg_inf<A>()))
                m = A(0);
            O += (double)m;
#pragma unroll
            for (int k = 0; k < POS; ++k) {
                const int64_t s = threadIdx.x + (int64_t)k * THREADS;
                if (s >= s2)
                    break;
                const A a = lse3(prev[s], (fw ? s > 0 : s + 1 < s2) ? prev[s + d] : neg_inf<A>(),
                                 skip[k] ? prev[s + 2 * d] : neg_inf<A>());
                const A v = (a - m) + lp_of(raw[k][u], rl[u]); /* as the CPU: a NaN input spreads */
                cur[s] = v;
                tm = max(tm, v);
                if (KEEP && ring_smem)
                    table[t * S2 + s] = v;
            }
            for (int64_t s = threadIdx.x + (int64_t)POS * THREADS; s < s2; s += THREADS) {
                const bool sk = fw ? skip_to(lab, s) : s + 2 < s2 && skip_to(lab, s + 2);
                const A a = lse3(prev[s], (fw ? s > 0 : s + 1 < s2) ? prev[s + d] : neg_inf<A>(),
                                 sk ? prev[s + 2 * d] : neg_inf<A>());
                const A v = (a - m) + lp_of(lp_raw(t, symbol(p, lab, s)), rl[u]);
                cur[s] = v;
                tm = max(tm, v);
                if (KEEP && ring_smem)
                    table[t * S2 + s] = v;
            }
            leave_max(f, tm);
            if (KEEP && threadIdx.x == 0)
                off[t] = O;
            prefetch(u, f + PF);
        }
    }
    if (!fw)
        return;
    __syncthreads();
    if (threadIdx.x == 0) {
        const A *last = buf(Tn - 1);
        nll[n] = 0.0 - ((double)(L > 0 ? lse(last[s2 - 1], last[s2 - 2]) : last[0]) + O); /* +0, not −0 */
    }
}

/* e^(γ + ℓ − lp), the share of the alignments through (t, c): 0 where none passes (γ = −∞)
 * and ℓ < +∞, also at lp = −∞; NaN when ℓ is +∞ or NaN (the CPU's rule). */
template <class A> __device__ __forceinline__ A occupancy(A gamma, A nll, A lp)
{
    return gamma == neg_inf<A>() && nll < -neg_inf<A>() ? A(0) : exp(gamma + nll - lp);
}

/* The weight of sequence n's gradient: the upstream gradient of its loss. */
__device__ __forceinline__ double weight(const ploss_ctc_problem &p, int64_t n, int64_t L)
{
    if (p.reduction == PLOSS_REDUCTION_NONE)
        return p.pass == PLOSS_PASS_FUSED ? p.scale : load_dyn(p.grad_loss, p.gl_dtype, n * p.gl_sn);
    const double up = p.pass == PLOSS_PASS_FUSED ? p.scale : load_dyn(p.grad_loss, p.gl_dtype, 0);
    return p.reduction == PLOSS_REDUCTION_MEAN ? up / ((double)p.N * (double)(L > 0 ? L : 1)) : up;
}

/* The gradient row of frame t of sequence n, block blockIdx.x = n·T + t. */
template <class T>
__global__ void __launch_bounds__(THREADS) ctc_grad(ploss_ctc_problem p, Sequences q, const acc_t<T> *alpha,
                                                    const acc_t<T> *beta, int64_t frames, int64_t S2,
                                                    const double *offsets, const double *nll)
{
    using A = acc_t<T>;
    const int64_t n = blockIdx.x / p.T, t = blockIdx.x % p.T;
    const int64_t Tn = q.input_length[n], L = q.target_length[n];
    T *grad = (T *)p.grad + t * p.g_st + n * p.g_sn;
    const double ell = nll[n];
    if (t >= Tn || (p.zero_infinity && ell == CUDART_INF)) {
        for (int64_t c = threadIdx.x; c < p.C; c += THREADS)
            grad[c * p.g_sc] = from_acc<T>(A(0));
        return;
    }
    /* γ + ℓ of the stored (offset) α and β: γ̃ + (O^α_t + O^β_t + ℓ), the bracket in double */
    const A w = (A)weight(p, n, L),
            nl = (A)(offsets[n * frames + t] + offsets[(p.N + n) * frames + t] + ell);
    const A *a = alpha + (n * frames + t) * S2, *b = beta + (n * frames + t) * S2;
    /* γ of the blank over the L + 1 even positions: max, then the sum of exponentials */
    A m = neg_inf<A>();
    for (int64_t k = threadIdx.x; k <= L; k += THREADS)
        m = max(m, a[2 * k] + b[2 * k]);
    m = block_all_reduce<THREADS>(m, MaxOp());
    A sum = A(0);
    if (m != neg_inf<A>())
        for (int64_t k = threadIdx.x; k <= L; k += THREADS)
            sum += exp(a[2 * k] + b[2 * k] - m);
    sum = block_all_reduce<THREADS>(sum, SumOp());
    const A gamma_blank = m == neg_inf<A>() ? m : m + log(sum);
    /* the blank's log-probability (its entry is written last) */
    const A lp_blank = logp<T>(p, q, t, n, p.blank);
    /* a class outside the target has γ = −∞ */
    for (int64_t c = threadIdx.x; c < p.C; c += THREADS) {
        const A lp = logp<T>(p, q, t, n, c);
        grad[c * p.g_sc] = from_acc<T>((exp(lp) - occupancy(neg_inf<A>(), nl, lp)) * w);
    }
    __syncthreads(); /* the row's values before the target's classes overwrite theirs */
    const int64_t o = q.offset[n];
    for (int64_t k = threadIdx.x; k < L; k += THREADS) {
        if (!q.head[o + k])
            continue;
        A g = neg_inf<A>();
        for (int64_t j = k;; j = q.next[o + j]) {
            g = lse(g, a[2 * j + 1] + b[2 * j + 1]);
            if (!q.next[o + j])
                break;
        }
        const int64_t c = q.labels[o + k];
        const A lp = logp<T>(p, q, t, n, c);
        grad[c * p.g_sc] = from_acc<T>((exp(lp) - occupancy(g, nl, lp)) * w);
    }
    if (threadIdx.x == 0)
        grad[p.blank * p.g_sc] = from_acc<T>((exp(lp_blank) - occupancy(gamma_blank, nl, lp_blank)) * w);
}

/* The losses: per sequence (NONE) or reduced in a fixed order (one block). */
__global__ void __launch_bounds__(THREADS) ctc_loss(ploss_ctc_problem p, const int64_t *target_length, const double *nll)
{
    double s = 0.0;
    for (int64_t n = threadIdx.x; n < p.N; n += THREADS) {
        double v = nll[n];
        if (p.zero_infinity && v == CUDART_INF)
            v = 0.0;
        if (p.reduction == PLOSS_REDUCTION_NONE)
            store_dyn(p.loss, p.loss_dtype, n * p.l_sn, v);
        else
            s += p.reduction == PLOSS_REDUCTION_MEAN ? v / (double)(target_length[n] > 0 ? target_length[n] : 1) : v;
    }
    if (p.reduction == PLOSS_REDUCTION_NONE)
        return;
    s = block_reduce<THREADS>(s, SumOp());
    if (threadIdx.x == 0)
        store_dyn(p.loss, p.loss_dtype, 0, p.reduction == PLOSS_REDUCTION_MEAN ? s / (double)p.N : s);
}

} // namespace

extern "C" ploss_status ploss_cuda_ctc(ploss_ctx_t *ctx, const ploss_ctc_problem *p)
{
    const bool want_grad = p->pass != PLOSS_PASS_FORWARD, want_loss = p->pass != PLOSS_PASS_BACKWARD;
    const int64_t N = p->N, S2 = 2 * p->max_target + 1;
    const int64_t frames = want_grad ? std::max<int64_t>(p->max_input, 1) : 2;
    const size_t acc = p->x_dtype == PLOSS_F64 ? 8 : 4;
    if ((want_grad ? 2 * N : N) > INT_MAX || ((want_grad || p->logits) && N * p->T > INT_MAX))
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "log_probs: CUDA takes at most 2^31 - 1 sequences (2^30 - 1 with a "
                           "gradient; frames × sequences at most 2^31 - 1 with a gradient or logits), got N = %lld, "
                           "T = %lld", (long long)N, (long long)p->T);

    /* the host part: lengths and offsets, labels, and per label the next position of its
     * class in its target (0: none) and whether it is the class's first */
    const size_t meta_bytes = sizeof(int64_t) * (size_t)(3 * N), label_bytes = sizeof(int32_t) * (size_t)p->total_labels;
    const size_t host_bytes = meta_bytes + label_bytes * 3;
    std::vector<int32_t> chain;
    std::vector<std::pair<int32_t, int32_t>> order; /* (class, position) of one target */
    std::vector<char> host;
    try { /* (an allocation that fails is an error, not an exception through the C API) */
        chain.resize((size_t)(2 * p->total_labels));
        order.reserve((size_t)p->max_target);
        host.resize(host_bytes ? host_bytes : 1);
    } catch (const std::bad_alloc &) {
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "CTC: host buffers of %zu bytes for %lld labels",
                           host_bytes + label_bytes * 2, (long long)p->total_labels);
    }
    int32_t *next = chain.data(), *head = chain.data() + p->total_labels;
    {
        for (int64_t n = 0; n < N; ++n) {
            const int64_t o = p->offset[n], L = p->target_length[n];
            order.clear();
            for (int64_t k = 0; k < L; ++k)
                order.emplace_back(p->labels[o + k], (int32_t)k);
            std::sort(order.begin(), order.end());
            for (int64_t i = 0; i < L; ++i) {
                const int32_t k = order[(size_t)i].second;
                const bool first = i == 0 || order[(size_t)i - 1].first != order[(size_t)i].first;
                const bool last = i + 1 == L || order[(size_t)i + 1].first != order[(size_t)i].first;
                head[o + k] = first;
                next[o + k] = last ? 0 : order[(size_t)i + 1].second;
            }
        }
    }
    const size_t off_nll = align_up(host_bytes), off_lse = off_nll + align_up(sizeof(double) * (size_t)N);
    const size_t off_alpha = off_lse + (p->logits ? align_up(acc * (size_t)(N * p->T)) : 0);
    const size_t table = acc * (size_t)N * (size_t)frames * (size_t)S2;
    const size_t off_beta = off_alpha + align_up(table);
    const size_t off_offsets = off_beta + (want_grad ? align_up(table) : 0);
    const size_t total = off_offsets + (want_grad ? sizeof(double) * 2 * (size_t)N * (size_t)frames : 0);
    void *ws = NULL;
    ploss_status st = ploss_workspace(ctx, total, &ws);
    if (st)
        return st;
    char *w = (char *)ws;
    /* one upload of the host part */
    memcpy(host.data(), p->input_length, sizeof(int64_t) * (size_t)N);
    memcpy(host.data() + sizeof(int64_t) * N, p->target_length, sizeof(int64_t) * (size_t)N);
    memcpy(host.data() + 2 * sizeof(int64_t) * N, p->offset, sizeof(int64_t) * (size_t)N);
    memcpy(host.data() + meta_bytes, p->labels, label_bytes);
    memcpy(host.data() + meta_bytes + label_bytes, chain.data(), 2 * label_bytes);
    if (host_bytes && (st = ploss_cuda_memcpy(w, host.data(), host_bytes, PLOSS_COPY_H2D, ctx->stream)))
        return st;
    Sequences q;
    q.input_length = (const int64_t *)w;
    q.target_length = q.input_length + N;
    q.offset = q.target_length + N;
    q.labels = (const int32_t *)(w + meta_bytes);
    q.next = q.labels + p->total_labels;
    q.head = q.next + p->total_labels;
    q.lse = p->logits ? w + off_lse : NULL;
    double *nll = (double *)(w + off_nll), *offsets = want_grad ? (double *)(w + off_offsets) : nullptr;
    cudaStream_t stream = stream_of(ctx);

    return dispatch_float(p->x_dtype, "log_probs", [&](auto tag) -> ploss_status {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        A *alpha = (A *)(w + off_alpha), *beta = (A *)(w + off_beta);
        if (p->logits && N * p->T > 0) {
            const int64_t rows = N * p->T, per_block = THREADS / 32;
            ctc_row_lse<T><<<(unsigned)((rows + per_block - 1) / per_block), THREADS, 0, stream>>>(*p, (A *)(w + off_lse));
            ploss_status s = check_launch("ctc_row_lse");
            if (s)
                return s;
        }
        if (N > 0) {
            /* the recursion's last two frames in shared memory where they fit (the device's
             * opt-in limit), else in the workspace */
            int optin = 0;
            if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->device.device_id) !=
                cudaSuccess)
                optin = 48 << 10;
            const size_t ring = 2 * (size_t)S2 * sizeof(A);
            const bool ring_smem = ring <= (size_t)optin;
            const auto kernel = want_grad ? ctc_recursion<T, true> : ctc_recursion<T, false>;
            if (ring_smem && ring > (48 << 10))
                cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ring);
            kernel<<<(unsigned)(want_grad ? 2 * N : N), THREADS, ring_smem ? ring : 0, stream>>>(
                *p, q, alpha, beta, frames, S2, ring_smem, offsets, nll);
            ploss_status s = check_launch("ctc_recursion");
            if (s)
                return s;
        }
        if (want_grad && N > 0 && p->T > 0) {
            ploss_status s;
            ctc_grad<T><<<(unsigned)(N * p->T), THREADS, 0, stream>>>(*p, q, alpha, beta, frames, S2, offsets,
                                                                     nll);
            if ((s = check_launch("ctc_grad")))
                return s;
        }
        if (want_loss) {
            ctc_loss<<<1, THREADS, 0, stream>>>(*p, q.target_length, nll);
            return check_launch("ctc_loss");
        }
        return PLOSS_OK;
    });
}

} // namespace ctc_kernels
} // namespace ploss_cuda
