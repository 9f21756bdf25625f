/*
 * row_engine.cuh — the CUDA row engine of the softmax-row losses: rows of C contiguous
 * classes (x_sc = 1: N×C, channels-last N×…×C) with class-index targets, f32/f16/bf16
 * storage and f32 arithmetic.  The loss itself is a policy (kernels/rows/policy_*.cuh):
 *
 *   struct Policy {
 *       struct Sums { ...; };                       per-row sums, merged by Policy::add
 *       static constexpr int kState;                saved-state components per sample
 *       Sums zero() const;  Sums add(Sums, Sums) const;
 *       static constexpr bool kKeepsTerm;           f32 rows keep term()'s value in place of x
 *       static constexpr bool kMaxExcludesY;        M: the max over j ≠ y (else over all j)
 *       static constexpr bool kClusters;            long rows may take a cluster (its kernels
 *                                                   instantiated), else one streamed block
 *       static constexpr bool kRegisterRows;        short rows held in a warp's registers,
 *                                                   else streamed by a warp (fewer copies of
 *                                                   the policy's code in the build)
 *       float term(Sums &, float x, int j, IsY is_y, float M) const;  element j; is_y: j = y
 *                                                   (bool, or std::false_type where known)
 *       Row finish(const Sums &, int y, float M, float omega) const;
 *                                                   loss, state, gradient coefficients (ω
 *                                                   the sample's gradient factor)
 *       template <bool KEPT> float grad(float v, int j, IsY is_y, float M, const Row &) const;
 *                                                   v: x, or term()'s value when KEPT
 *       double divisor(int y) const;                the sample's share of the 'mean' divisor
 *       optional: float max_term(float x, int j) const;  what class j adds to M (else x)
 *
 *       optional (kOnline = true; a policy inheriting one says false again unless its Sums
 *       are the base's): a streamed row's max and sums in one read instead of two —
 *       struct Running;  Running running() const;   the row's statistics relative to a running max
 *       template <int N> void step(Running &, const float (&x)[N], int jb, int y) const;
 *                                                   the classes jb … jb + N − 1 folded in
 *       Running merge(const Running &, const Running &) const;
 *       Sums settle(const Running &, float &M) const;           the Sums term() would give, and M
 *   };
 *
 * Every row is read from DRAM once and its gradient written once, in one of two ways.  Held
 * in registers (RegRow) as 16-byte vectors (kRowNV per thread), cut into a head (the < VEC
 * elements before its first 16-byte boundary), aligned vectors and a tail, so rows of any
 * length and alignment are served: a warp per row (8 rows per block) up to 1024 f32 / 2048
 * f16-bf16 classes when there are at least kWarpRowsMin rows (streamed by the warp instead
 * for a policy without kRegisterRows); the margin losses' tiles (kernels/margin) also hold
 * longer rows in the registers of a block of 512 threads or a cluster of them (sm_90) that
 * exchange their partial sums through distributed shared memory.  Or streamed (StreamRow):
 * the row stays in memory and is read twice, the first time from DRAM and the second from
 * L2, because a block or a cluster's block takes a slice small enough that the slices of
 * every resident block fit the L2: the first read gathers the max and the policy's sums
 * together (online softmax: the sums are kept relative to a running max and rescaled when it
 * grows), the second writes the gradient (policies without kOnline take a third read: the
 * max, then the sums).  A block of 256 threads takes rows up to kStreamSlice bytes, a
 * block of 512 up to twice that (and longer rows where clusters are unavailable), beyond
 * that a cluster of 4 or kMaxCluster blocks of 256 (sm_90), the fewest whose shares are at
 * most kStreamSlice; a policy without kClusters, one block of 256 for every row.  Holding
 * nothing, the streamed row has no length limit and keeps the occupancy high, which hides
 * the per-row barriers that a row in registers exposes.  Per row: the max M and the policy's
 * sums relative to M, then the gradient; the reductions are fixed-order CUB trees, and
 * cluster partials are merged in rank order, so results are bitwise reproducible.
 *
 * Reductions over samples: with 'mean' a label pass sums the divisor (Σ over valid samples
 * of Policy::divisor) first, so the gradient can be scaled in the same pass; the reduced
 * loss goes through per-block (per-cluster) partials in the context's workspace, added in
 * a fixed order by one block (the grid depends on the shape only).  Up to kOneLaunchRows
 * rows on the streamed single-block shape, the rows take one launch (after the policy's
 * preparation, class weights say): each block sums the divisor over all labels itself, its
 * row's first loads already on their way, and the last block to finish adds the
 * partials.  No float atomics, no host
 * synchronisation.  Ignored samples get a zero loss and gradient; invalid labels (neither
 * ignore_index nor in [0, C)) set the context's error slot, a NaN loss and state, and a
 * zero gradient row.  The backward pass recomputes the row's statistics from the logits
 * (the row is on chip either way), so backward after forward is the fused gradient,
 * bitwise.
 */
#ifndef PLOSS_KERNELS_ROW_ENGINE_CUH
#define PLOSS_KERNELS_ROW_ENGINE_CUH

#include <cfloat>
#include <cooperative_groups.h>
#include <math_constants.h>
#include <type_traits>

#include "common.cuh"
#include "rows.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PLOSS_ROW_ENGINE_SM90 1
#else
#define PLOSS_ROW_ENGINE_SM90 0
#endif

namespace ploss_cuda {
namespace row_engine {

namespace cg = cooperative_groups;

/* ---- the problem, as every policy sees it ---------------------------------------------- */

struct RowArgs {
    ploss_pass pass;
    ploss_reduction reduction;
    int64_t N, S, C;
    const void *x; int64_t x_sn, x_ss;                        /* x_sc = 1 */
    const void *t; ploss_dtype t_dtype; int64_t t_sn, t_ss;   /* i64 or i32 labels */
    int64_t ignore_index;
    void *grad; int64_t g_sn, g_ss, g_sc;
    void *loss; ploss_dtype loss_dtype; int64_t l_sn, l_ss;   /* f32 or f64 */
    void *state; ploss_dtype state_dtype; int64_t st_sn, st_ss, st_sk;
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn, gl_ss;
    double scale; /* fused: multiplier of the gradient */
    /* filled by the engine */
    double *part_loss;      /* reduced loss partials, or null */
    const double *divisor;  /* 'mean' divisor (device), or null */
    unsigned long long *ticket; /* one launch: the context's arrival ticket (the last block
                                   adds the loss partials) */
    int64_t *error_slot;
};

constexpr int kLabelThreads = 256;
constexpr int kFinalThreads = 1024;
constexpr int kMaxCluster = 8;

/* The gradient factor ω shared by every sample (fused, or backward of a reduced loss); d:
 * the 'mean' divisor. */
__device__ __forceinline__ float common_omega(const RowArgs &a, double d)
{
    const double up = a.pass == PLOSS_PASS_FUSED ? a.scale : load_dyn(a.grad_loss, a.gl_dtype, 0);
    if (a.reduction != PLOSS_REDUCTION_MEAN)
        return (float)up;
    return d != 0.0 ? (float)(up / d) : 0.0f;
}
__device__ __forceinline__ float common_omega(const RowArgs &a)
{
    return common_omega(a, a.reduction == PLOSS_REDUCTION_MEAN ? *a.divisor : 1.0);
}

/* A thread's share of the 'mean' divisor, Σ pol.divisor(y) (common.cuh's divisor_share). */
template <class Policy>
__device__ __forceinline__ double divisor_share(const RowArgs &a, const Policy &pol, int64_t r0, int64_t step,
                                                int64_t rows)
{
    return ploss_cuda::divisor_share(a, [&](int64_t y) { return pol.divisor((int)y); }, r0, step, rows);
}

/* The 'mean' divisor summed by one block over every sample's label, in a fixed order (the
 * same value in every block). */
template <int THREADS, class Policy>
__device__ __forceinline__ double block_divisor(const RowArgs &a, const Policy &pol, int64_t rows)
{
    return block_all_reduce<THREADS>(divisor_share(a, pol, threadIdx.x, THREADS, rows), SumOp{});
}

/* Row r's first THREADS·128 bytes (the class axis is contiguous in the engine's rows) asked
 * into L2, a 128-byte line per thread of the block, without waiting for them. */
template <class T, int THREADS>
__device__ __forceinline__ void prefetch_row(const RowArgs &a, int64_t r, int64_t rows)
{
    if (r >= rows)
        return;
    const int64_t n = a.S == 1 ? r : r / a.S, s = r - n * a.S;
    const char *row = (const char *)((const T *)a.x + n * a.x_sn + s * a.x_ss);
    const int64_t b = (int64_t)threadIdx.x * 128;
    if (b < a.C * (int64_t)sizeof(T))
        asm volatile("prefetch.global.L2 [%0];" ::"l"(row + b));
}

/* The reduced loss of a one-launch pass (single-block rows): the block whose
 * partial arrives last adds every partial in a fixed order and stores the loss ('mean':
 * over the divisor, *div where the block summed it for the gradient — in shared memory,
 * written before last_block_arrives' barriers —, else summed now). */
template <int THREADS, class Policy>
__device__ __forceinline__ void finish_by_last_block(const RowArgs &a, const Policy &pol, int64_t parts, int64_t rows,
                                                     const double *div)
{
    if (!last_block_arrives(a.ticket, (unsigned long long)parts))
        return;
    const double total = last_block_sum<THREADS>(a.part_loss, parts);
    const double d =
        a.reduction != PLOSS_REDUCTION_MEAN ? 1.0 : div ? *div : block_divisor<THREADS>(a, pol, rows);
    if (threadIdx.x == 0)
        store_state(a.loss, a.loss_dtype, 0, a.reduction == PLOSS_REDUCTION_MEAN ? ploss_rows_mean(total, d) : total);
}

__device__ __forceinline__ float sample_omega(const RowArgs &a, float common, int64_t n, int64_t s)
{
    if (a.pass == PLOSS_PASS_BACKWARD && a.reduction == PLOSS_REDUCTION_NONE)
        return (float)load_dyn(a.grad_loss, a.gl_dtype, n * a.gl_sn + s * a.gl_ss);
    return common;
}

/* Per-sample outputs: the loss (NONE) or its share of the partial, and the state. */
template <class Policy>
__device__ __forceinline__ void store_outputs(const RowArgs &a, int64_t n, int64_t s, float loss, const float *state,
                                              double &acc)
{
    if (a.pass == PLOSS_PASS_BACKWARD)
        return;
    if (a.reduction == PLOSS_REDUCTION_NONE)
        store_state(a.loss, a.loss_dtype, n * a.l_sn + s * a.l_ss, (double)loss);
    else
        acc += (double)loss;
    if (a.state)
        for (int k = 0; k < Policy::kState; ++k)
            store_state(a.state, a.state_dtype, n * a.st_sn + s * a.st_ss + k * a.st_sk, (double)state[k]);
}

template <class Policy>
__device__ __forceinline__ void store_skipped(const RowArgs &a, int64_t n, int64_t s, int st, int64_t y, double &acc)
{
    if (st == kInvalid)
        report_invalid_label(a.error_slot, y);
    const float v = st == kInvalid ? CUDART_NAN_F : 0.0f;
    float state[Policy::kState > 0 ? Policy::kState : 1];
    for (int k = 0; k < Policy::kState; ++k)
        state[k] = v;
    store_outputs<Policy>(a, n, s, v, state, acc);
}

struct MaxF {
    __device__ __forceinline__ float operator()(float u, float v) const { return fmaxf(u, v); }
};
template <class Policy> struct SumsOp {
    const Policy *pol;
    __device__ __forceinline__ typename Policy::Sums operator()(const typename Policy::Sums &u,
                                                                const typename Policy::Sums &v) const
    {
        return pol->add(u, v);
    }
};

template <class Policy> struct MergeOp {
    const Policy *pol;
    __device__ __forceinline__ typename Policy::Running operator()(const typename Policy::Running &u,
                                                                   const typename Policy::Running &v) const
    {
        return pol->merge(u, v);
    }
};
template <class P, class = void> struct online_policy : std::false_type {};
template <class P> struct online_policy<P, std::void_t<decltype(P::kOnline)>> : std::bool_constant<P::kOnline> {};

/* What class j adds to the row's max M: x, or Policy::max_term(x, j) where the policy has
 * one (PC-softmax: −∞ for a class of prior 0, which must not set the scale of the others'
 * exponentials). */
template <class P, class = void> struct max_term_policy : std::false_type {};
template <class P> struct max_term_policy<P, std::void_t<decltype(&P::max_term)>> : std::true_type {};

/* The running statistics of the softmax policies whose sums are Σ_{j≠y} e_j, optionally
 * Σ_{j≠y} w_j·d_j (SD), and d_y (e_j = e^(−d_j), d_j = M − x_j): kept relative to the max
 * m of the elements seen so far and moved to a larger max M by shift() (Σe scaled by
 * e^(m−M), Σw·d raised by (M − m)·Σw, both without cancellation); x_y is kept as it is
 * (the one thread holding it adds it, the others 0).  m starts at −FLT_MAX, not −∞, so
 * that −∞ logits met first give e = 0 and d = +∞ as they do against the final max.  The
 * exponentials are exp_ftz's (a term below 2^-126 adds 0): streamed 16-bit rows are bound
 * by their instructions, and __expf's denormal range check costs three per element. */
template <bool SD> struct OnlineLse {
    float m, se, sd, sw, xy;

    __device__ __forceinline__ static OnlineLse start() { return OnlineLse{-FLT_MAX, 0.0f, 0.0f, 0.0f, 0.0f}; }
    __device__ __forceinline__ void shift(float M)
    {
        se *= exp_ftz(m - M);
        if (SD && sw != 0.0f)
            sd = fmaf(M - m, sw, sd);
        m = M;
    }
    template <bool UNIT, class Wt> __device__ __forceinline__ void add(float x, int j, bool with_sd, Wt &&w)
    {
        const float d = m - x;
        se += exp_ftz(-d);
        if (SD && with_sd) {
            const float wj = w(j);
            sd = fmaf(wj, d, sd);
            if (!UNIT)
                sw += wj;
        }
    }
    /* the classes jb … jb + N − 1 (w(j): class j's weight, read where SD and with_sd; UNIT:
     * every weight is 1, and Σw grows by the span's count, the same integer as one by one):
     * one max test per span, not per element (the elements' terms stay independent) */
    template <bool UNIT = false, int N, class Wt>
    __device__ __forceinline__ void step(const float (&x)[N], int jb, int y, bool with_sd, Wt &&w)
    {
        float vm = x[0];
#pragma unroll
        for (int e = 1; e < N; ++e)
            vm = fmaxf(vm, x[e]);
        if (vm > m)
            shift(vm);
        const bool has_y = (unsigned)(y - jb) < (unsigned)N;
        if (has_y) {
#pragma unroll
            for (int e = 0; e < N; ++e) {
                if (jb + e == y)
                    xy = x[e];
                else
                    add<UNIT>(x[e], jb + e, with_sd, w);
            }
        } else {
#pragma unroll
            for (int e = 0; e < N; ++e)
                add<UNIT>(x[e], jb + e, with_sd, w);
        }
        if (UNIT && SD && with_sd)
            sw += (float)(has_y ? N - 1 : N);
    }
    __device__ __forceinline__ static OnlineLse merge(OnlineLse u, OnlineLse v)
    {
        const float M = fmaxf(u.m, v.m);
        u.shift(M);
        v.shift(M);
        return OnlineLse{M, u.se + v.se, u.sd + v.sd, u.sw + v.sw, u.xy + v.xy};
    }
};

/* Element offset of a row start within its 16-byte vector. */
template <class T> __device__ __forceinline__ int misalign(const T *ptr)
{
    return (int)(((uintptr_t)ptr / sizeof(T)) & (uintptr_t)(vec16<T>::N - 1));
}

/* The statistics, outputs and gradient of one row, whichever kernel holds it.  Row gives:
 * each<KEEP>(y, f) → f(x, j, is_y) over this thread's elements; write(gr, gsc, y, g) stores
 * g(x, j, is_y) for them;
 * all_reduce(v, op) over the row's threads; leader() for the one thread that writes the
 * per-sample outputs. */
template <class T, class Policy, class Row>
__device__ __forceinline__ void process_row(const RowArgs &a, const Policy &pol, Row &row, int64_t n, int64_t s,
                                            int64_t y, float omega_common, double &acc)
{
    const bool want_grad = a.pass != PLOSS_PASS_FORWARD;
    const int st = label_status(a, y);
    if (st != kValid) {
        if (row.leader())
            store_skipped<Policy>(a, n, s, st, y, acc);
        if (want_grad)
            row.write((T *)a.grad + n * a.g_sn + s * a.g_ss, a.g_sc, -1, [](float, int, auto) { return 0.0f; });
        return;
    }
    const int yi = (int)y;
    /* f32 rows keep what term() returns (e^(x−M), say) in place of x when the policy asks */
    constexpr bool kKeep = Policy::kKeepsTerm && Row::kCanKeep && sizeof(T) == sizeof(float);
    float M;
    typename Policy::Sums sums;
    /* a streamed row: one read for both (rows in registers keep two reductions: the running
     * statistics' registers cost the f32 register rows more than the reduction they save) */
    if constexpr (online_policy<Policy>::value && !Row::kCanKeep) {
        static_assert(!Policy::kMaxExcludesY, "the running max covers every class");
        typename Policy::Running run = pol.running();
        row.spans([&](const auto &xs, int jb) { pol.step(run, xs, jb, yi); });
        sums = pol.settle(row.all_reduce(run, MergeOp<Policy>{&pol}), M);
    } else {
        float m = -CUDART_INF_F;
        if constexpr (Policy::kMaxExcludesY) /* the max over the classes other than y */
            row.each(yi, [&](float x, int, auto is_y) {
                if (!is_y)
                    m = fmaxf(m, x);
            });
        else if constexpr (max_term_policy<Policy>::value)
            row.each(-1, [&](float x, int j, auto) { m = fmaxf(m, pol.max_term(x, j)); });
        else
            row.each(-1, [&](float x, int, auto) { m = fmaxf(m, x); });
        M = row.all_reduce(m, MaxF{});
        sums = pol.zero();
        row.template each<kKeep>(yi, [&](float x, int j, auto is_y) { return pol.term(sums, x, j, is_y, M); });
        sums = row.all_reduce(sums, SumsOp<Policy>{&pol});
    }
    const float om = want_grad ? sample_omega(a, omega_common, n, s) : 0.0f;
    const typename Policy::Row r = pol.finish(sums, yi, M, om);
    if (row.leader())
        store_outputs<Policy>(a, n, s, r.loss, r.state, acc);
    if (want_grad)
        row.write((T *)a.grad + n * a.g_sn + s * a.g_ss, a.g_sc, yi,
                  [&](float v, int j, auto is_y) { return pol.template grad<kKeep>(v, j, is_y, M, r); });
}

/* All-reduce over a row's LANES·K threads: warp shuffles (LANES = 32), or a block reduction
 * whose blocks' partials (K > 1) are merged in rank order through distributed shared memory.
 * K > 1 and `arrived` (the caller has arrived at the cluster barrier after its previous row,
 * without waiting): the wait comes here, just before this block's slot is written again, so
 * the row's first pass ran while the other blocks were still reading their partials. */
template <int LANES, int K, class U, class Op> __device__ __forceinline__ U row_all_reduce(U v, Op op, bool &arrived)
{
    if constexpr (LANES == 32) {
        return warp_all_reduce<32>(v, op);
    } else {
        using BR = cub::BlockReduce<U, LANES>;
        __shared__ typename BR::TempStorage tmp;
        __shared__ U slot_v, res_v; /* one pair per type U: the max and the policy's sums */
        U *slot = &slot_v, *res = &res_v;
        const U b = BR(tmp).Reduce(v, op);
        const int tid = (int)threadIdx.x;
        /* *res is rewritten by thread 0 after the next reduction's own barrier, which every
         * thread reaches only after reading it here */
        if constexpr (K == 1) {
            if (tid == 0)
                *res = b;
            __syncthreads();
            return *res;
        } else {
#if PLOSS_ROW_ENGINE_SM90
            cg::cluster_group cluster = cg::this_cluster();
            if (arrived) {
                cluster.barrier_wait();
                arrived = false;
            }
            if (tid == 0)
                *slot = b;
            cluster.sync();
            /* lanes 0..K−1 read one rank's partial each, merged by a fixed shuffle tree */
            if (tid < K) {
                using WR = cub::WarpReduce<U, K>;
                __shared__ typename WR::TempStorage wtmp;
                const U t = WR(wtmp).Reduce(*cluster.map_shared_rank(slot, tid), op);
                if (tid == 0)
                    *res = t;
            }
            __syncthreads();
            return *res;
#else
            __trap();
            return b;
#endif
        }
    }
}

/* ---- where a thread's elements of a row lie -------------------------------------------- */

/* A row of C elements of T cut into a head (the < VEC elements before its first 16-byte
 * boundary), aligned 16-byte vectors and a tail; a row is LANES·K threads (LANES = 32: a
 * warp; LANES = THREADS: a block, K > 1: a cluster of K blocks on sm_90), thread
 * gi = rank·LANES + lane takes the vectors gi, gi + LANES·K, … and head / tail element gi.
 * Shared by the row in registers and the streamed row. */
template <class T, int LANES, int K> struct RowSplit {
    using V = vec16<T>;
    static constexpr int VEC = V::N;
    static constexpr int GT = LANES * K;
    int gi, hc, nfull, jt, off;
    bool hv, tv, lead;
    bool arrived = false; /* at the cluster barrier that ends the previous row, not yet waited */

    __device__ __forceinline__ void split(const T *xr, int C)
    {
        off = misalign(xr);
        hc = min((VEC - off) & (VEC - 1), C);
        nfull = (C - hc) / VEC;
        jt = hc + nfull * VEC;
        hv = gi < hc;
        tv = gi < C - jt;
    }
    __device__ __forceinline__ bool leader() const { return lead; }
    template <class U, class Op> __device__ __forceinline__ U all_reduce(U v, Op op)
    {
        return row_all_reduce<LANES, K>(v, op, arrived);
    }
};

/* ---- the row in registers ------------------------------------------------------------ */

/* One thread's share of a row held in registers: its vectors (NV of them at most) and its
 * head / tail element, as RowSplit lays them out. */
template <class T, int NV, int LANES, int K> struct RegRow : RowSplit<T, LANES, K> {
    using Split = RowSplit<T, LANES, K>;
    using typename Split::V;
    using Split::GT;
    using Split::VEC;
    using Split::gi;
    using Split::hc;
    using Split::hv;
    using Split::jt;
    using Split::nfull;
    using Split::off;
    using Split::tv;
    uint4 raw[NV];
    float xh, xt;
    static constexpr bool kCanKeep = true;

    __device__ __forceinline__ void load(const T *xr, int C)
    {
        this->split(xr, C);
        const uint4 *xv = reinterpret_cast<const uint4 *>(xr + hc);
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            const int q = k * GT + gi;
            raw[k] = q < nfull ? xv[q] : make_uint4(0u, 0u, 0u, 0u);
        }
        xh = hv ? to_acc(xr[gi]) : 0.0f;
        xt = tv ? to_acc(xr[jt + gi]) : 0.0f;
    }
    /* g(x, j, is_y) for the VEC elements of vector u (classes jb, jb + 1, …); with STORE
     * the results replace the elements.  is_y is std::false_type for a vector that does not
     * hold class y (no per-element test there). */
    template <bool STORE, class G> __device__ __forceinline__ static void visit(uint4 &u, int jb, int y, G &&g)
    {
        auto one = [&](int e, auto is_y) {
            if constexpr (STORE)
                V::set(u, e, g(V::get(u, e), jb + e, is_y));
            else
                g(V::get(u, e), jb + e, is_y);
        };
        if ((unsigned)(y - jb) < (unsigned)VEC) {
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                one(e, jb + e == y);
        } else {
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                one(e, std::false_type{});
        }
    }
    /* f(x, j, is_y) over this thread's elements; with KEEP the value f returns replaces the
     * element (f32 rows keeping a policy's term). */
    template <bool KEEP = false, class F> __device__ __forceinline__ void each(int y, F &&f)
    {
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            launder(raw[k]);
            const int q = k * GT + gi;
            if (q < nfull)
                visit<KEEP>(raw[k], hc + q * VEC, y, f);
        }
        auto scalar = [&](float &x, int j) {
            if constexpr (KEEP)
                x = f(x, j, j == y);
            else
                f(x, j, j == y);
        };
        if (hv)
            scalar(xh, gi);
        if (tv)
            scalar(xt, jt + gi);
    }
    /* Stores g(x, j, is_y) for this thread's elements at gr[j·gsc]. */
    template <class G> __device__ __forceinline__ void write(T *gr, int64_t gsc, int y, G &&g)
    {
        const bool gvec = gsc == 1 && misalign(gr) == off;
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            launder(raw[k]);
            const int q = k * GT + gi;
            if (q < nfull) {
                const int jb = hc + q * VEC;
                uint4 o = raw[k];
                visit<true>(o, jb, y, g);
                if (gvec)
                    reinterpret_cast<uint4 *>(gr + hc)[q] = o;
                else
#pragma unroll
                    for (int e = 0; e < VEC; ++e)
                        gr[(int64_t)(jb + e) * gsc] = convert<T>(V::get(o, e));
            }
        }
        if (hv)
            gr[(int64_t)gi * gsc] = convert<T>(g(xh, gi, gi == y));
        if (tv)
            gr[(int64_t)(jt + gi) * gsc] = convert<T>(g(xt, jt + gi, jt + gi == y));
    }
};

/* ---- the row streamed from memory ------------------------------------------------------ */

/* One thread's share of a row that stays in memory: spans(), each() and write() stream the
 * thread's vectors (the same interleave as RegRow, kStreamUnroll 16-byte loads in flight per
 * thread) instead of holding them.  Only the first pass (the max and the sums of an online
 * policy, else the max) reads the row from DRAM: a block (a cluster's block) takes a slice
 * small enough (run() picks the shape) that the slices of every block resident on the card
 * fit the L2 cache, and the later passes (the gradient; before it the sums of a policy
 * without kOnline) read it from there.  The gradient pass's vector loads and (on a
 * dense gradient) vector stores are streaming (evict first), to leave the cache to the
 * slices still being read. */
constexpr int kStreamUnroll = 4;

template <class T, int LANES, int K> struct StreamRow : RowSplit<T, LANES, K> {
    using Split = RowSplit<T, LANES, K>;
    using typename Split::V;
    using Split::GT;
    using Split::VEC;
    using Split::gi;
    using Split::hc;
    using Split::hv;
    using Split::jt;
    using Split::nfull;
    using Split::off;
    using Split::tv;
    static constexpr bool kCanKeep = false;
    const T *xr;

    __device__ __forceinline__ void load(const T *row, int C)
    {
        xr = row;
        this->split(row, C);
    }
    /* v(u, q) for every aligned vector q of this thread, kStreamUnroll loads issued at once;
     * LAST: the row's last read (streaming loads).  The other reads prefetch the next
     * kStreamUnroll vectors into L2 as they load these (no registers held for them), so the
     * next loads wait for L2, not DRAM (the distances tried: bench/RESULTS.md). */
    template <bool LAST, class Fn> __device__ __forceinline__ void stream(Fn &&v) const
    {
        const uint4 *xv = reinterpret_cast<const uint4 *>(xr + hc);
        for (int q0 = gi; q0 < nfull; q0 += kStreamUnroll * GT) {
            uint4 u[kStreamUnroll];
#pragma unroll
            for (int k = 0; k < kStreamUnroll; ++k) {
                const int q = q0 + k * GT;
                if (q < nfull)
                    u[k] = LAST ? __ldcs(xv + q) : xv[q];
            }
            if constexpr (!LAST) {
#pragma unroll
                for (int k = 0; k < kStreamUnroll; ++k) {
                    const int q = q0 + (kStreamUnroll + k) * GT;
                    if (q < nfull)
                        asm volatile("prefetch.global.L2 [%0];" ::"l"(xv + q));
                }
            }
#pragma unroll
            for (int k = 0; k < kStreamUnroll; ++k) {
                const int q = q0 + k * GT;
                if (q < nfull)
                    v(u[k], q);
            }
        }
    }
    template <bool KEEP = false, class F> __device__ __forceinline__ void each(int y, F &&f)
    {
        static_assert(!KEEP, "a streamed row keeps nothing");
        stream<false>([&](uint4 &u, int q) { RegRow<T, 1, LANES, K>::template visit<false>(u, hc + q * VEC, y, f); });
        if (hv)
            f(to_acc(xr[gi]), gi, gi == y);
        if (tv)
            f(to_acc(xr[jt + gi]), jt + gi, jt + gi == y);
    }
    /* f(xs, jb) for the thread's elements in spans: each aligned vector's VEC values (classes
     * jb, jb + 1, …), then the head and the tail element alone */
    template <class F> __device__ __forceinline__ void spans(F &&f) const
    {
        stream<false>([&](uint4 &u, int q) {
            float xs[VEC];
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                xs[e] = V::get(u, e);
            f(xs, hc + q * VEC);
        });
        if (hv) {
            const float xs[1] = {to_acc(xr[gi])};
            f(xs, gi);
        }
        if (tv) {
            const float xs[1] = {to_acc(xr[jt + gi])};
            f(xs, jt + gi);
        }
    }
    template <class G> __device__ __forceinline__ void write(T *gr, int64_t gsc, int y, G &&g)
    {
        const bool gvec = gsc == 1 && misalign(gr) == off;
        stream<true>([&](uint4 &u, int q) {
            const int jb = hc + q * VEC;
            RegRow<T, 1, LANES, K>::template visit<true>(u, jb, y, g);
            if (gvec)
                __stcs(reinterpret_cast<uint4 *>(gr + hc) + q, u);
            else
#pragma unroll
                for (int e = 0; e < VEC; ++e)
                    gr[(int64_t)(jb + e) * gsc] = convert<T>(V::get(u, e));
        });
        if (hv)
            gr[(int64_t)gi * gsc] = convert<T>(g(to_acc(xr[gi]), gi, gi == y));
        if (tv)
            gr[(int64_t)(jt + gi) * gsc] = convert<T>(g(to_acc(xr[jt + gi]), jt + gi, jt + gi == y));
    }
};

/* Rows of LANES·K threads in blocks of THREADS threads (THREADS / LANES rows at a time per
 * block or cluster), walked with a grid stride; one loss partial per block (cluster).  A
 * streamed single-block kernel also serves the one-launch reductions (a.ticket set: the
 * arrival ticket counts blocks, one partial each); the other shapes are compiled without
 * that code, which would cost the register rows registers (a warp-row instance of it for
 * few rows was slower: bench/RESULTS.md). */
template <class T, class Policy, class RowT, int LANES, int THREADS, int K>
__global__ void __launch_bounds__(THREADS, 1024 / THREADS)
    rows_kernel(const RowArgs a, const Policy pol, const int64_t rows)
{
    constexpr int RPB = THREADS / LANES; /* rows per block at a time */
    constexpr bool kMayOne = K == 1 && LANES == THREADS && !RowT::kCanKeep;
    static_assert(LANES == 32 || LANES == THREADS, "a row is a warp or whole blocks");
    __shared__ double s_acc[RPB];
    static_assert(!std::is_same<typename Policy::Sums, float>::value, "Sums: a struct (all_reduce keeps one slot per type)");

    int rank = 0;
#if PLOSS_ROW_ENGINE_SM90
    if constexpr (K > 1)
        rank = (int)cg::this_cluster().block_rank();
#endif
    const int lane = (int)threadIdx.x % LANES, group = (int)threadIdx.x / LANES;
    const int64_t cid = (int64_t)blockIdx.x / K, ncl = (int64_t)gridDim.x / K;
    float omega = 0.0f;
    /* one launch: the 'mean' divisor this block summed for ω, kept for the loss should this
     * block arrive last (in shared memory: no register held through the rows) */
    __shared__ double s_div;
    bool have_div = false;
    if (a.pass != PLOSS_PASS_FORWARD && !(a.pass == PLOSS_PASS_BACKWARD && a.reduction == PLOSS_REDUCTION_NONE)) {
        if (kMayOne && a.ticket) {
            double d = 1.0;
            if (a.reduction == PLOSS_REDUCTION_MEAN) {
                /* the block's row (one each in a one-launch grid) on its way into the cache
                 * while the labels are read and summed */
                prefetch_row<T, THREADS>(a, cid, rows);
                d = block_divisor<THREADS>(a, pol, rows);
                if (threadIdx.x == 0)
                    s_div = d;
                have_div = true;
            }
            omega = common_omega(a, d);
        } else {
            omega = common_omega(a);
        }
    }
    RowT row;
    row.gi = rank * LANES + lane;
    row.lead = row.gi == 0;
    if (lane == 0)
        s_acc[group] = 0.0; /* the group's loss sum, kept out of registers */
    for (int64_t r = cid * RPB + group; r < rows; r += ncl * RPB) {
        const int64_t n = a.S == 1 ? r : r / a.S, s = r - n * a.S;
        const int64_t y = sample_label(a, n, s); /* read with the row, used after it */
        row.load((const T *)a.x + n * a.x_sn + s * a.x_ss, (int)a.C);
        process_row<T>(a, pol, row, n, s, y, omega, s_acc[group]);
#if PLOSS_ROW_ENGINE_SM90
        /* the slots may be written again once every block has arrived here: the next row's
         * first reduction waits (a row without reductions, an ignored one, waits here) */
        if constexpr (K > 1) {
            if (row.arrived)
                cg::this_cluster().barrier_wait();
            cg::this_cluster().barrier_arrive();
            row.arrived = true;
        }
#endif
    }
    if (a.part_loss) {
        __syncthreads();
        if (threadIdx.x == 0 && rank == 0) {
            double t = 0.0;
            for (int g = 0; g < RPB; ++g)
                t += s_acc[g];
            a.part_loss[cid] = t;
        }
        if (kMayOne && a.ticket)
            finish_by_last_block<THREADS>(a, pol, ncl, rows, have_div ? &s_div : nullptr);
    }
#if PLOSS_ROW_ENGINE_SM90
    if constexpr (K > 1) { /* no block leaves while another may read its slots */
        if (!row.arrived)
            cg::this_cluster().barrier_arrive();
        cg::this_cluster().barrier_wait();
    }
#endif
}

/* ---- label pass and final reduction -------------------------------------------------- */

template <class Policy>
__global__ void __launch_bounds__(kLabelThreads)
    divisor_partials(const RowArgs a, const Policy pol, double *part, const int64_t rows)
{
    const double t = block_reduce<kLabelThreads>(divisor_share(a, pol, thread_index(), grid_stride(), rows), SumOp{});
    if (threadIdx.x == 0)
        part[blockIdx.x] = t;
}

/* Non-template kernels of the engine (kernels/rows/row_engine.cu), launched on `stream`:
 * the fixed-order sum of `count` doubles into *out; the final loss (Σ partials, divided by
 * *divisor when it is given) stored as loss_dtype; class weights of any float dtype as f32
 * with their sum. */
ploss_status launch_sum_partials(const double *part, int64_t count, double *out, cudaStream_t stream);
ploss_status launch_finalize(const double *part, int64_t count, const double *divisor, void *loss,
                             ploss_dtype loss_dtype, cudaStream_t stream);
ploss_status launch_convert_class_weights(const void *w, ploss_dtype dt, int64_t ws, int64_t C, float *out,
                                          double *sum, cudaStream_t stream);

/* ---- host side ---------------------------------------------------------------------------- */

/* Whether cluster kernels can run on `device`: sm_90+, cluster launch, and
 * the kernels compiled for compute_90 or later.  Cached per device. */
inline bool sm90_ready(int device, const void *probe)
{
    static int cache[64]; /* 0 unknown, 1 yes, 2 no */
    if (device < 0 || device >= 64)
        return false;
    if (cache[device] == 0) {
        int major = 0, cluster = 0;
        cudaFuncAttributes fa;
        const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                        cudaDeviceGetAttribute(&cluster, cudaDevAttrClusterLaunch, device) == cudaSuccess &&
                        cudaFuncGetAttributes(&fa, probe) == cudaSuccess && major >= 9 && cluster &&
                        fa.ptxVersion >= 90;
        (void)cudaGetLastError();
        cache[device] = ok ? 1 : 2;
    }
    return cache[device] == 1;
}

/* The engine's arguments from a backend problem of core/engines/rows.h: every field but
 * the saved state, which the problems name differently. */
template <class P> inline RowArgs row_args(const P &p)
{
    RowArgs a = {};
    a.pass = p.pass; a.reduction = p.reduction;
    a.N = p.N; a.S = p.S; a.C = p.C;
    a.x = p.x; a.x_sn = p.x_sn; a.x_ss = p.x_ss;
    a.t = p.t; a.t_dtype = p.t_dtype; a.t_sn = p.t_sn; a.t_ss = p.t_ss;
    a.ignore_index = p.ignore_index;
    a.grad = p.grad; a.g_sn = p.g_sn; a.g_ss = p.g_ss; a.g_sc = p.g_sc;
    a.loss = p.loss; a.loss_dtype = p.loss_dtype; a.l_sn = p.l_sn; a.l_ss = p.l_ss;
    a.grad_loss = p.grad_loss; a.gl_dtype = p.gl_dtype; a.gl_sn = p.gl_sn; a.gl_ss = p.gl_ss;
    a.scale = p.scale;
    return a;
}

/* The rows [b0, b0 + rows) of a GEMM tile (the linear and margin losses) as the engine sees
 * them: C values per row at x with row stride x_sn, the gradient (if any) in place of them
 * at grad with row stride g_sn; reduction 'none' (each row's loss to the caller's loss, or
 * to the per-row f64 sums at row_losses + b0 for a reduced loss), ω from the pass (a scalar
 * upstream gradient read by every row through a zero stride); the caller's labels.  P: a
 * problem with the caller's labels, loss and upstream gradient (margin.h,
 * linear_cross_entropy.h). */
template <class P>
inline RowArgs tile_row_args(const P &p, int64_t b0, int64_t rows, int64_t C, const void *x, int64_t x_sn, void *grad,
                             int64_t g_sn, double *row_losses, int64_t *error_slot)
{
    const bool none = p.reduction == PLOSS_REDUCTION_NONE;
    RowArgs a = {};
    a.pass = p.pass;
    a.reduction = PLOSS_REDUCTION_NONE;
    a.N = rows;
    a.S = 1;
    a.C = C;
    a.x = x;
    a.x_sn = x_sn;
    a.t = (const char *)p.labels + (size_t)(b0 * p.y_sn) * ploss_dtype_size(p.label_dtype);
    a.t_dtype = p.label_dtype;
    a.t_sn = p.y_sn;
    a.ignore_index = p.ignore_index;
    if (p.pass != PLOSS_PASS_FORWARD) {
        a.grad = grad;
        a.g_sn = g_sn;
        a.g_sc = 1;
    }
    if (p.pass != PLOSS_PASS_BACKWARD) {
        a.loss = none ? (char *)p.loss + (size_t)(b0 * p.l_sn) * ploss_dtype_size(p.loss_dtype)
                      : (void *)(row_losses + b0);
        a.loss_dtype = none ? p.loss_dtype : PLOSS_F64;
        a.l_sn = none ? p.l_sn : 1;
    } else {
        a.grad_loss = none ? (const char *)p.grad_loss + (size_t)(b0 * p.gl_sn) * ploss_dtype_size(p.gl_dtype)
                           : p.grad_loss;
        a.gl_dtype = p.gl_dtype;
        a.gl_sn = none ? p.gl_sn : 0;
    }
    a.scale = p.scale;
    a.error_slot = error_slot;
    return a;
}

/* Policy data of per-class values (weights, α, priors): C f32 values and their f64 sum in
 * `class_values_bytes(C)` of workspace, converted from the caller's tensor on `stream`. */
inline size_t class_values_floats_bytes(int64_t C) { return align_up((size_t)C * sizeof(float)); }
inline size_t class_values_bytes(int64_t C) { return class_values_floats_bytes(C) + sizeof(double); }
inline ploss_status convert_class_values(const void *w, ploss_dtype dt, int64_t w_s, int64_t C, char *ws,
                                         cudaStream_t stream, const float **values, const double **sum)
{
    float *v = (float *)ws;
    double *t = (double *)(ws + class_values_floats_bytes(C));
    *values = v;
    *sum = t;
    return launch_convert_class_weights(w, dt, w_s, C, v, t, stream);
}

/* The engine serves rows with a contiguous class axis, C ≥ 2; the caller keeps its own
 * kernels for the rest (class-strided layouts, f64). */
/* Launches `kernel` on `blocks` clusters of K blocks of `threads` each (sm_90); a failed
 * launch is a ploss error naming `what`. */
template <class Kernel, class... Args>
inline ploss_status launch_clusters(Kernel kernel, int64_t blocks, int K, int threads, cudaStream_t stream,
                                    const char *what, Args... args)
{
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr;
    cluster_config(cfg, attr, blocks, K, threads, stream);
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return ploss_error(PLOSS_ERR_CUDA, "%s (a cluster of %d blocks per row): %s", what, K, cudaGetErrorString(e));
    }
    return PLOSS_OK;
}

template <class T> inline bool serves(int64_t x_sc, int64_t C)
{
    return sizeof(T) <= 4 && x_sc == 1 && C >= 2 && C <= (int64_t)1 << 24;
}

/* The row shapes: in registers, a warp per row (8 rows per block; margin.cu holds its tile
 * rows in one block of 512 threads or a cluster of up to kMaxCluster of them); streamed, a
 * block of 256 or 512 threads or a cluster of 4 or kMaxCluster blocks of 256 per row. */
constexpr int kRowNV = 8;
constexpr int64_t kWarpRowsMin = 2048; /* fewer rows than this: the block shapes */
constexpr int64_t kOneLaunchRows = 1024; /* at most this many rows: one launch in all */
constexpr int kBlockThreads = 512;
constexpr int kStreamThreads = 256;
constexpr int kWideThreads = 512;
/* A streamed row's share per 256 threads, which stays in L2 between the row's two reads:
 * 60–80 KiB shares were the fastest at every row length measured, and a block of 512 threads
 * beat a cluster of two blocks of 256 (bench/RESULTS.md) */
constexpr int64_t kStreamSlice = 80 * 1024;

template <class T> inline int64_t warp_capacity() { return (int64_t)kRowNV * 32 * vec16<T>::N; }
template <class T> inline int64_t block_capacity() { return (int64_t)kRowNV * kBlockThreads * vec16<T>::N; }

/* Run Policy on the rows of `a` (any length that serves() takes).  prep(extra, stream) may fill the policy's
 * device data in `extra_bytes` of workspace before any kernel reads it (class weights, say). */
template <class T, class Policy, class Prep>
ploss_status run(ploss_ctx_t *ctx, RowArgs a, Policy pol, size_t extra_bytes, Prep &&prep)
{
    const int64_t rows = a.N * a.S;
    const bool want_loss = a.pass != PLOSS_PASS_BACKWARD, want_grad = a.pass != PLOSS_PASS_FORWARD;
    const bool reduced = want_loss && a.reduction != PLOSS_REDUCTION_NONE;
    const bool mean = a.reduction == PLOSS_REDUCTION_MEAN && (reduced || want_grad);
    cudaStream_t stream = stream_of(ctx);
    const int device = ctx->device.device_id;

    /* The shape (measured on the H200, bench/RESULTS.md): K = 0, a warp per row in
     * registers; else streamed by one block (K = 1) of 256 threads, or of 512 (wide) for rows
     * of up to 2·kStreamSlice bytes and longer rows where clusters are not available, or by a
     * cluster of K blocks of 256. */
    const int64_t row_bytes = a.C * (int64_t)sizeof(T);
    int K = 0;
    bool wide = false;
    if (a.C > warp_capacity<T>() || rows < kWarpRowsMin) {
        K = 1;
        if constexpr (Policy::kClusters) {
            if (row_bytes > kStreamSlice) {
                if (row_bytes <= 2 * kStreamSlice ||
                    !sm90_ready(device, (const void *)rows_kernel<T, Policy, StreamRow<T, kStreamThreads, kMaxCluster>,
                                                                  kStreamThreads, kStreamThreads, kMaxCluster>)) {
                    wide = true;
                } else {
                    K = 4;
                    while (K < kMaxCluster && row_bytes > K * kStreamSlice)
                        K *= 2;
                }
            }
        }
    }
    /* a grid that depends on the shape only, so the per-block partials are the same on
     * every card */
    const int64_t per_block = K == 0 ? 8 : 1;
    int64_t blocks = (rows + per_block - 1) / per_block;
    if (blocks > 4096 * (K == 0 ? 1 : 16))
        blocks = 4096 * (K == 0 ? 1 : 16);
    if (blocks < 1)
        blocks = 1;

    /* Few rows: one launch (every block sums the 'mean' divisor itself; the last block
     * adds the loss partials); else a label pass first and a final reduction after. */
    const bool one_launch = K == 1 && rows > 0 && rows <= kOneLaunchRows;
    const bool label_pass = mean && !one_launch;

    /* workspace: [loss partials | divisor | label partials | policy data] */
    const int64_t label_blocks =
        label_pass && rows > 0 ? (int64_t)grid_blocks(rows, kLabelThreads * kLabelsPerThread, 1024) : 0;
    const size_t sz_part = reduced ? align_up((size_t)(blocks > 0 ? blocks : 1) * sizeof(double)) : 0;
    const size_t sz_div = label_pass ? 256 : 0;
    const size_t sz_lab = align_up((size_t)label_blocks * sizeof(double));
    const size_t total = sz_part + sz_div + sz_lab + align_up(extra_bytes);
    char *ws = nullptr;
    if (total > 0) {
        void *w = nullptr;
        const ploss_status st = ploss_workspace(ctx, total, &w);
        if (st != PLOSS_OK)
            return st;
        ws = (char *)w;
    }
    a.part_loss = reduced ? (double *)ws : nullptr;
    a.divisor = label_pass ? (const double *)(ws + sz_part) : nullptr;
    a.ticket = one_launch ? arrival_ticket(ctx) : nullptr;
    a.error_slot = ctx->error_slot;
    if (extra_bytes > 0 || rows > 0) {
        const ploss_status st = prep(ws + sz_part + sz_div + sz_lab, stream, pol);
        if (st != PLOSS_OK)
            return st;
    }

    if (label_pass) {
        double *lab = (double *)(ws + sz_part + sz_div);
        if (rows > 0)
            divisor_partials<<<(unsigned)label_blocks, kLabelThreads, 0, stream>>>(a, pol, lab, rows);
        const ploss_status st = launch_sum_partials(lab, rows > 0 ? label_blocks : 0, (double *)a.divisor, stream);
        if (st != PLOSS_OK)
            return st;
    }

    if (rows > 0) {
        if (K == 0) {
            if constexpr (Policy::kRegisterRows)
                rows_kernel<T, Policy, RegRow<T, kRowNV, 32, 1>, 32, 256, 1><<<(unsigned)blocks, 256, 0, stream>>>(a, pol, rows);
            else
                rows_kernel<T, Policy, StreamRow<T, 32, 1>, 32, 256, 1><<<(unsigned)blocks, 256, 0, stream>>>(a, pol, rows);
            const ploss_status st = check_launch("row engine (a warp per row)");
            if (st != PLOSS_OK)
                return st;
        } else {
            constexpr int S = kStreamThreads, W = kWideThreads;
            ploss_status st = PLOSS_OK;
            /* one block per row: one launch or not, a.ticket says */
            if (K == 1 && !wide) {
                rows_kernel<T, Policy, StreamRow<T, S, 1>, S, S, 1><<<(unsigned)blocks, S, 0, stream>>>(a, pol, rows);
                st = check_launch("row engine (a streamed block per row)");
            } else if constexpr (Policy::kClusters) {
                if (wide) {
                    rows_kernel<T, Policy, StreamRow<T, W, 1>, W, W, 1><<<(unsigned)blocks, W, 0, stream>>>(a, pol, rows);
                    st = check_launch("row engine (a streamed block of 512 threads per row)");
                } else {
                    auto kernel = K == 4 ? rows_kernel<T, Policy, StreamRow<T, S, 4>, S, S, 4>
                                         : rows_kernel<T, Policy, StreamRow<T, S, kMaxCluster>, S, S, kMaxCluster>;
                    st = launch_clusters(kernel, blocks, K, S, stream, "row engine (streamed)", a, pol, rows);
                }
            }
            if (st != PLOSS_OK)
                return st;
        }
    }

    if (reduced && !one_launch) {
        return launch_finalize(a.part_loss, rows > 0 ? blocks : 0,
                               a.reduction == PLOSS_REDUCTION_MEAN ? a.divisor : nullptr, a.loss, a.loss_dtype,
                               stream);
    }
    return PLOSS_OK;
}

} // namespace row_engine
} // namespace ploss_cuda

#endif
