/*
 * sample_policies.cu — CUDA backend of the per-sample policy losses with class-index targets
 * (large-margin softmax, Taylor CE, PC-softmax CE, OHEM CE / large-margin, and the f32
 * class-strided cross-entropy that cross_entropy.cu hands over, label smoothing included);
 * formulas and the OHEM mining rule in core/engines/rows.h
 *
 * Large-margin, PC-softmax and Taylor CE (order ≤ 10) without mining on rows with a
 * contiguous class axis (32 < C ≤ 2^24, f32/f16/bf16) go to the row engine first
 * (sample_policies_rows.cu); the kernels here serve the rest.
 *
 * Kernel shapes (one read of the logits from DRAM, one write of the gradient):
 *  - per sample (f32/f16/bf16 with f32 math, C <= SAMPLE_CMAX = 32): a thread computes
 *    loss, state and gradient of one sample from its C logits (sample_step), taken
 *      · from shared-memory tiles (tile_kernel) when the sample axis is contiguous and
 *        every class row starts on 16 bytes (N×C×H×W as it comes): 16-byte cp.async
 *        copies, the next tile in flight while the current one is computed, the gradient
 *        out in 16-byte stores;
 *      · else from registers (reg_kernel), all C loads in flight before any arithmetic
 *        (compile-time C bound of 8, 24 or 32; pairs of adjacent samples for C <= 8);
 *    exp is exp_ftz (ex2.approx.ftz).
 *  - row groups (f64, Taylor with f64 internals, C > 32): one thread per sample for
 *    class-strided rows (a warp reads 32 consecutive pixels per class, coalesced; the
 *    gradient pass re-reads the row from L1/L2), or a group of G lanes per sample for
 *    class-contiguous rows (a warp, or the whole 256-thread block for C > 2048) striding
 *    over the classes; per-lane statistics are merged with CUB (fixed order).
 * Per-sample statistics on the row-group path are accumulated online in one pass (running
 * maximum, rescaled sums; initial maximum −∞).  Large-margin keeps the statistics of the
 * non-target classes apart, relative to their own maximum (the per-sample kernels: to
 * another class's logit, or their maximum where a logit lies far above it), and gets the
 * full log-sum-exp from them and x_y, so a dominant target cannot underflow the
 * non-target sum.
 *
 * Invalid labels (≠ ignore_index, outside [0, C)) set the context's error slot and give
 * the sample a NaN loss (and state) and a zero gradient, as cross_entropy.cu.
 *
 * Reductions are deterministic: per-thread sums in the accumulation type, a CUB block
 * reduction, one double partial per block (the grid depends on the shape, dtype and layout,
 * which pick the kernel, never on timing) or, on the tile path, per tile (its warps' sums
 * added in warp order, whichever block computed it: the tile path's grid is what fits on
 * the device); a single block sums the partials in a fixed order; integer counts (valid
 * samples, OHEM histograms) use integer atomics, whose results do not depend on the
 * order.  Nothing synchronises with the host: the MEAN divisor and the OHEM threshold live
 * in device memory.
 *
 * OHEM threshold without a sort and without a per-sample buffer (workspace: the 48 KiB
 * histogram state): mining level 0 computes every sample's score key and a histogram of
 * its top 11 bits, the number of keys ≤ key(τ) and of valid samples; a single-block select
 * finds the bucket holding the n_min-th smallest key.  When at least n_min keys are
 * ≤ key(τ) the threshold is τ and levels 1 and 2 return at once (no read of the logits);
 * otherwise they recompute the keys (one more read of the logits each) and histogram the
 * next 11 and 10 bits inside the bucket, giving the n_min-th smallest key exactly (radix
 * select).  The loss pass recomputes the key and keeps the samples with key ≤ t*.  Keys
 * are recomputed by one function per path (softmax_sums + sums_key: IEEE f32 operations,
 * exp_ftz in the sum and expf for p_y's numerator, no contraction; group_key), so every
 * pass sees the same bits.
 */
#include <algorithm>
#include <cfloat>
#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "rows.h"
#include "taylor_poly.h"
#include "row_groups.cuh"

namespace ploss_cuda {
namespace {

constexpr int THREADS = ROW_THREADS;

template <class A> __device__ __forceinline__ A neg_inf() { return -INFINITY; }

/* ---- per-loss operations ------------------------------------------------------------- */
/* Each op: Stats (online per-row statistics) with init/push/merge; finish() turns them
 * and x_y into the loss and the saved State; grad() gives ∂ℓ/∂x_j from the State. */

template <class A> struct State { A v[3]; };

/* Online (m, s) of z_j = x_j + bias_j: cross-entropy (bias NULL) and PC-softmax. */
template <class A> struct SoftmaxOp {
    using acc = A;
    static constexpr int n_state = 1;
    const A *bias; /* log priors (PC-softmax) or NULL */
    struct Stats { A m, s; };
    __device__ static Stats init() { return {neg_inf<A>(), (A)0}; }
    __device__ void push(Stats &a, A x, bool, int64_t j) const
    {
        const A z = bias ? x + bias[j] : x;
        if (z == neg_inf<A>())
            return; /* a zero prior: no contribution */
        if (z > a.m) {
            a.s = a.s * exp(a.m - z) + (A)1;
            a.m = z;
        } else {
            a.s += exp(z - a.m); /* NaN z propagates */
        }
    }
    __device__ static Stats merge(const Stats &a, const Stats &b)
    {
        if (a.m == neg_inf<A>())
            return b;
        if (b.m == neg_inf<A>())
            return a;
        const A m = a.m > b.m ? a.m : b.m;
        return {m, a.s * exp(a.m - m) + b.s * exp(b.m - m)};
    }
    __device__ A finish(const Stats &a, A xy, State<A> &st) const
    {
        st.v[0] = a.m + log(a.s);
        return st.v[0] - xy;
    }
    __device__ A grad(const State<A> &st, A x, bool target, int64_t j, A) const
    {
        const A z = bias ? x + bias[j] : x;
        return exp(z - st.v[0]) - (target ? (A)1 : (A)0);
    }
};

/* Large-margin softmax: online statistics over the non-target classes 𝒩 relative to
 * their own running maximum m: s = Σ e^(x−m), t = Σ e^(x−m)·(x−m), rel = Σ (x−m) (in
 * double: differences of f32 logits near ±FLT_MAX overflow f32).  In t a difference d ≤ 0
 * (−∞ where it overflows) is clamped to kDLo, below which e^d is 0 already: 0, not 0·∞. */
template <class A> struct LargeMarginOp {
    using acc = A;
    static constexpr int n_state = 3;
    static constexpr A kDLo = sizeof(A) == 4 ? (A)-128 : (A)-1100; /* e^kDLo is 0 in A */
    A half_lam, u; /* λ/2, 1/(C−1) */
    struct Stats { A m, s, t; double rel; int64_t cnt; };
    __device__ static A dlo(A d) { return d < kDLo ? kDLo : d; } /* NaN kept */
    __device__ static Stats init() { return {neg_inf<A>(), (A)0, (A)0, 0.0, 0}; }
    __device__ void push(Stats &a, A x, bool target, int64_t) const
    {
        if (target)
            return;
        if (a.cnt == 0) {
            a.m = x; a.s = 1; a.t = 0; a.rel = 0;
        } else if (x > a.m) {
            const A d = a.m - x, e = exp(d); /* rescale to the new maximum x */
            a.t = e * (a.t + a.s * dlo(d));
            a.s = a.s * e + (A)1;
            a.rel += (double)a.cnt * ((double)a.m - (double)x);
            a.m = x;
        } else {
            const A d = x - a.m, e = exp(d);
            a.s += e;
            a.t += e * dlo(d);
            a.rel += (double)x - (double)a.m;
        }
        ++a.cnt;
    }
    __device__ static Stats merge(const Stats &a, const Stats &b)
    {
        if (a.cnt == 0)
            return b;
        if (b.cnt == 0)
            return a;
        const A m = a.m > b.m ? a.m : b.m;
        const A da = a.m - m, db = b.m - m, ea = exp(da), eb = exp(db);
        return {m, a.s * ea + b.s * eb, ea * (a.t + a.s * dlo(da)) + eb * (b.t + b.s * dlo(db)),
                a.rel + (double)a.cnt * ((double)a.m - (double)m) + b.rel + (double)b.cnt * ((double)b.m - (double)m),
                a.cnt + b.cnt};
    }
    __device__ A finish(const Stats &a, A xy, State<A> &st) const
    {
        const A m = xy > a.m ? xy : a.m;
        const A lse = m + log(exp(xy - m) + exp(a.m - m) * a.s);
        st.v[0] = lse;
        st.v[1] = a.m + log(a.s);
        st.v[2] = a.m + a.t / a.s;
        /* rel·u in double: a large finite loss stays finite */
        return (A)(lse - xy + half_lam * ((double)(a.t / a.s) - a.rel * u));
    }
    __device__ A grad(const State<A> &st, A x, bool target, int64_t, A) const
    {
        const A p = exp(x - st.v[0]);
        if (target)
            return p - (A)1;
        const A q = exp(x - st.v[1]); /* q = 0: 0, not 0·∞ where x − E overflows */
        return p + half_lam * ((q != (A)0 ? q * (x - st.v[2] + (A)1) : (A)0) - u);
    }
};

/* Taylor cross-entropy: Z = Σ f_n(x_j). */
template <class A> struct TaylorOp {
    using acc = A;
    static constexpr int n_state = 1;
    int order;
    struct Stats { A z; };
    __device__ static Stats init() { return {(A)0}; }
    __device__ void push(Stats &a, A x, bool, int64_t) const { a.z += ploss_taylor_poly(x, order); }
    __device__ static Stats merge(const Stats &a, const Stats &b) { return {a.z + b.z}; }
    __device__ A finish(const Stats &a, A xy, State<A> &st) const
    {
        st.v[0] = a.z;
        return log(a.z) - log(ploss_taylor_poly(xy, order));
    }
    __device__ A grad(const State<A> &st, A x, bool target, int64_t, A xy) const
    {
        const A r = (A)1 / st.v[0] - (target ? (A)1 / ploss_taylor_poly(xy, order) : (A)0);
        return ploss_taylor_poly(x, order - 1) * r;
    }
};

template <class Op> struct MergeOp {
    template <class S> __device__ __forceinline__ S operator()(const S &a, const S &b) const { return Op::merge(a, b); }
};

/* Statistics of one row, merged over the G lanes of its group (G = 1: one thread). */
template <int G, class Op, class T>
__device__ __forceinline__ typename Op::Stats row_stats(const Op &op, const RowView<G, typename Op::acc> &row,
                                                        const T *x, int64_t xo, int64_t sc, int64_t C, int64_t y,
                                                        int lane)
{
    typename Op::Stats a = Op::init();
    row.each(x, xo, sc, C, lane, [&](int64_t j, typename Op::acc xj) { op.push(a, xj, j == y, j); });
    return group_all_reduce<G>(a, MergeOp<Op>());
}

/* ---- OHEM mining state (device memory, zeroed before the score kernel) --------------- */

constexpr int HIST0 = 2048, HIST2 = 1024; /* bins of levels 0 and 1 (11 bits), level 2 (10 bits) */

struct MineState {
    unsigned long long hist[3][2048];
    unsigned long long n_le_thresh; /* keys ≤ key(τ) */
    unsigned long long n_valid;     /* keys of non-ignored samples */
    unsigned long long below;       /* keys below the current bucket */
    unsigned long long rank;        /* rank still sought inside the bucket (1-based) */
    uint32_t prefix, mask;
    uint32_t tkey;                  /* the threshold key t* */
    int done;
    unsigned long long kept;        /* |K|: the MEAN divisor */
};

__device__ __forceinline__ uint32_t score_key(float s)
{
    return s != s ? PLOSS_OHEM_NAN_KEY : __float_as_uint(s);
}

/* hist[bin] += 1 for every calling lane, one shared atomic per distinct bin of the warp:
 * scores crowd into few top-bit buckets, and 32 lanes adding to one bin would serialise. */
__device__ __forceinline__ void hist_add(unsigned int *hist, uint32_t bin)
{
    const unsigned peers = __match_any_sync(__activemask(), bin);
    if ((int)(threadIdx.x & 31u) == __ffs(peers) - 1)
        atomicAdd(&hist[bin], (unsigned)__popc(peers));
}

/* Everything a kernel needs besides the problem. */
template <class A> struct Aux {
    int64_t *slot;                 /* error slot */
    double *partial;               /* loss partials: one per block, or per tile (tile_kernel) */
    unsigned long long *count;     /* MEAN divisor (valid samples), or NULL */
    MineState *mine;               /* OHEM state, or NULL */
    unsigned int *finished;        /* tile_kernel's blocks done (its last one sums the partials) */
};

/* The MEAN/SUM gradient multiplier ω (the scale when fused, else the upstream scalar),
 * over the divisor for MEAN (0 when the divisor is 0: the gradient is then exactly 0). */
template <class A> __device__ __forceinline__ double reduced_omega(const ploss_sample_problem &p, const Aux<A> &aux)
{
    const double up = p.pass == PLOSS_PASS_FUSED ? p.scale
                      : p.reduction == PLOSS_REDUCTION_NONE ? 0.0
                                                            : load_dyn(p.grad_loss, p.gl_dtype, 0);
    if (p.reduction != PLOSS_REDUCTION_MEAN)
        return up;
    const unsigned long long d = p.ohem ? aux.mine->kept : *aux.count;
    return d ? up / (double)d : 0.0;
}

/* ---- kernels -------------------------------------------------------------------------- */

/* Valid (not ignored, in range) labels → *count (the loss pass reports invalid ones), as
 * the row engine's 'mean' divisor counts them (divisor_share, weight 1: exact in f64). */
__global__ void __launch_bounds__(THREADS) count_kernel(ploss_sample_problem p, unsigned long long *count)
{
    const double c = block_reduce<THREADS>(
        divisor_share(p, [](int64_t) { return 1.0; }, thread_index(), grid_stride(), p.N * p.S), SumOp());
    if (threadIdx.x == 0 && c != 0.0)
        atomicAdd(count, (unsigned long long)c);
}

/* PC-softmax: bias_j = log w_j (−∞ for w_j = 0; NaN for a negative prior). */
template <class A> __global__ void log_prior_kernel(ploss_sample_problem p, A *bias)
{
    for (int64_t j = thread_index(); j < p.C; j += grid_stride())
        bias[j] = log(load_float_dyn<A>(p.w, p.w_dtype, j * p.w_s));
}

/* OHEM key of a valid sample on the row-group path: the softmax probability of its label
 * from the online statistics (the same code in the mining and the loss kernels, so every
 * pass recomputes bit-identical keys). */
template <int G, class T, class A>
__device__ __forceinline__ uint32_t group_key(const ploss_sample_problem &p, const T *x, int64_t xo, int64_t y, int lane)
{
    const SoftmaxOp<A> op{nullptr};
    RowView<G, A> row;
    const auto st = row_stats(op, row, x, xo, p.x_sc, p.C, y, lane);
    const A xy = load_as<A>(x, xo + y * p.x_sc);
    return score_key((float)exp(xy - (st.m + log(st.s))));
}

/* The shared histogram of one mining level (digit of `shift` bits width log2(nb)). */
struct MineLevel {
    uint32_t prefix, mask;
    int shift, nb;
};

__device__ __forceinline__ MineLevel mine_level(const MineState *ms, int level)
{
    return {level ? ms->prefix : 0u, level ? ms->mask : 0u, level == 0 ? 21 : level == 1 ? 10 : 0,
            level == 2 ? HIST2 : HIST0};
}

/* Count one sample's key in the histogram of this level (level 0: every key; later: the
 * keys inside the bucket selected so far). */
__device__ __forceinline__ void mine_count(unsigned int *hist, const MineLevel &L, uint32_t key)
{
    if ((key & L.mask) == L.prefix)
        hist_add(hist, (key >> L.shift) & (uint32_t)(L.nb - 1));
}

/* Flush a block's histogram and (level 0) its counts into the mining state. */
__device__ __forceinline__ void mine_flush(unsigned int *hist, const MineLevel &L, MineState *ms, int level,
                                           unsigned long long n_le, unsigned long long n_valid)
{
    __syncthreads();
    for (int b = threadIdx.x; b < L.nb; b += THREADS)
        if (hist[b])
            atomicAdd(&ms->hist[level][b], (unsigned long long)hist[b]);
    if (level == 0) {
        n_le = block_reduce<THREADS>(n_le, SumOp());
        n_valid = block_reduce<THREADS>(n_valid, SumOp());
        if (threadIdx.x == 0) {
            if (n_le)
                atomicAdd(&ms->n_le_thresh, n_le);
            if (n_valid)
                atomicAdd(&ms->n_valid, n_valid);
        }
    }
}

/* OHEM mining pass `level` on the row-group path: recompute every key (none is stored);
 * level 0 also counts keys ≤ key(τ) and valid samples, reports invalid labels. */
template <int G, class T, class A>
__global__ void __launch_bounds__(THREADS) score_kernel(ploss_sample_problem p, Aux<A> aux, int level)
{
    if (level > 0 && aux.mine->done)
        return; /* uniform: the select of an earlier level found t* */
    __shared__ unsigned int hist[HIST0];
    const MineLevel L = mine_level(aux.mine, level);
    for (int b = threadIdx.x; b < L.nb; b += THREADS)
        hist[b] = 0;
    __syncthreads();
    constexpr int R = THREADS / G;
    const int lane = (int)(threadIdx.x % G);
    const int64_t M = p.N * p.S;
    const T *x = (const T *)p.x;
    unsigned long long n_le = 0, n_valid = 0;
    for (int64_t base = (int64_t)blockIdx.x * R; base < M; base += (int64_t)gridDim.x * R) {
        const int64_t i = base + threadIdx.x / G;
        if (i >= M)
            continue; /* uniform over a group */
        const int64_t n = i / p.S, s = i % p.S;
        const int64_t y = sample_label(p, n, s);
        const bool invalid = label_status(p, y) == kInvalid;
        if (invalid && lane == 0 && level == 0)
            report_invalid_label(aux.slot, y);
        const bool valid = y != p.ignore_index && !invalid;
        const uint32_t key = valid ? group_key<G, T, A>(p, x, n * p.x_sn + s * p.x_ss, y, lane) : PLOSS_OHEM_IGNORED_KEY;
        if (lane == 0) {
            mine_count(hist, L, key);
            n_le += key <= p.thresh_key;
            n_valid += valid;
        }
    }
    mine_flush(hist, L, aux.mine, level, n_le, n_valid);
}

/* OHEM select (one block): the bucket of this pass holding the sought rank. */
__global__ void __launch_bounds__(THREADS) select_kernel(MineState *ms, int pass, int64_t n_min, uint32_t thresh_key)
{
    if (pass == 0 && ms->n_le_thresh >= (unsigned long long)n_min) {
        /* at least n_min keys ≤ key(τ): the n_min-th smallest is ≤ τ, so t* = τ */
        if (threadIdx.x == 0) {
            ms->tkey = thresh_key;
            ms->kept = ms->n_le_thresh;
            ms->done = 1;
        }
        return;
    }
    if (ms->done)
        return;
    const int nb = pass == 2 ? HIST2 : HIST0, shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
    constexpr int PER = HIST0 / THREADS; /* bins per thread (8; 4 used in pass 2) */
    const int per = nb / THREADS;
    const unsigned long long rank = pass == 0 ? (unsigned long long)n_min : ms->rank;
    const unsigned long long *h = ms->hist[pass];
    unsigned long long mine[PER], total = 0;
    for (int k = 0; k < per; ++k) {
        mine[k] = h[threadIdx.x * per + k];
        total += mine[k];
    }
    using Scan = cub::BlockScan<unsigned long long, THREADS>;
    __shared__ typename Scan::TempStorage tmp;
    unsigned long long before;
    Scan(tmp).ExclusiveSum(total, before);
    /* the thread whose bins cover cumulative positions (before, before + total] */
    if (rank > before && rank <= before + total) {
        unsigned long long cum = before;
        int b = 0;
        while (cum + mine[b] < rank) {
            cum += mine[b];
            ++b;
        }
        const uint32_t bin = (uint32_t)(threadIdx.x * per + b);
        const uint32_t prefix = ms->prefix | (bin << shift);
        ms->prefix = prefix;
        ms->mask |= (uint32_t)(nb - 1) << shift;
        ms->below += cum;
        ms->rank = rank - cum;
        if (pass == 2) {
            /* every key of this last bucket equals the selected key k_(n_min) */
            if (prefix == PLOSS_OHEM_IGNORED_KEY) {
                ms->tkey = PLOSS_OHEM_IGNORED_KEY - 1u; /* keep every valid sample */
                ms->kept = ms->n_valid;
            } else {
                ms->tkey = prefix; /* > key(τ): fewer than n_min keys are ≤ key(τ) */
                ms->kept = ms->below + mine[b];
            }
            ms->done = 1;
        }
    }
}

/* OHEM with n_min = 0 or n_min ≥ M: the threshold is known without a select. */
__global__ void fixed_threshold_kernel(MineState *ms, uint32_t tkey)
{
    ms->tkey = tkey;
    ms->kept = tkey == PLOSS_OHEM_IGNORED_KEY - 1u ? ms->n_valid : ms->n_le_thresh;
    ms->done = 1;
}

/* The loss pass: per-sample loss (and state), per-block loss partial, gradient. */
template <int G, class T, class Op>
__global__ void __launch_bounds__(THREADS) loss_kernel(ploss_sample_problem p, Op op, Aux<typename Op::acc> aux)
{
    using A = typename Op::acc;
    using LT = std::conditional_t<std::is_same<T, double>::value, double, float>; /* loss/state dtype */
    constexpr int R = THREADS / G;
    const int lane = (int)(threadIdx.x % G);
    const int64_t M = p.N * p.S, C = p.C;
    const T *x = (const T *)p.x;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD, want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool use_state = p.pass == PLOSS_PASS_BACKWARD && p.state;
    const uint32_t tkey = p.ohem ? aux.mine->tkey : 0u;

    const A omega = want_grad ? (A)reduced_omega(p, aux) : (A)0;

    A acc = 0;
    for (int64_t base = (int64_t)blockIdx.x * R; base < M; base += (int64_t)gridDim.x * R) {
        const int64_t i = base + threadIdx.x / G;
        if (i >= M)
            continue; /* uniform over a group */
        const int64_t n = i / p.S, s = i % p.S;
        const int64_t y = sample_label(p, n, s);
        /* an invalid label (reported here, or by the OHEM score kernel) gives a NaN loss
         * and a zero gradient, as cross_entropy.cu; its row is never read */
        const bool invalid = label_status(p, y) == kInvalid;
        if (invalid && !p.ohem && lane == 0)
            report_invalid_label(aux.slot, y);
        const int64_t xo = n * p.x_sn + s * p.x_ss;
        bool valid = y != p.ignore_index && !invalid;
        if (p.ohem && valid)
            valid = group_key<G, T, A>(p, x, xo, y, lane) <= tkey;
        const A fill = invalid ? (A)NAN : (A)0;
        State<A> st = {{fill, fill, fill}};
        A loss = fill, xy = 0;
        RowView<G, A> row;
        if (valid) {
            xy = load_as<A>(x, xo + y * p.x_sc);
            if (use_state) {
                for (int k = 0; k < Op::n_state; ++k)
                    st.v[k] = (A)load_state(p.state, p.state_dtype, n * p.st_sn + k * p.st_sk + s * p.st_ss);
            } else {
                const auto a = row_stats(op, row, x, xo, p.x_sc, C, y, lane);
                loss = op.finish(a, xy, st);
            }
        }
        if (want_loss && lane == 0) {
            acc += loss;
            if (p.reduction == PLOSS_REDUCTION_NONE)
                ((LT *)p.loss)[n * p.l_sn + s * p.l_ss] = (LT)loss;
            if (p.state)
                for (int k = 0; k < Op::n_state; ++k)
                    store_state(p.state, p.state_dtype, n * p.st_sn + k * p.st_sk + s * p.st_ss, (double)st.v[k]);
        }
        if (want_grad) {
            A w = omega;
            if (p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE)
                w = (A)load_dyn(p.grad_loss, p.gl_dtype, n * p.gl_sn + s * p.gl_ss);
            T *g = (T *)p.grad;
            const int64_t go = n * p.g_sn + s * p.g_ss;
            if (valid)
                row.each(x, xo, p.x_sc, C, lane, [&](int64_t j, A xj) {
                    g[go + j * p.g_sc] = from_acc<T>((acc_t<T>)(w * op.grad(st, xj, j == y, j, xy)));
                });
            else
                for (int64_t j = lane; j < C; j += G)
                    g[go + j * p.g_sc] = from_acc<T>((acc_t<T>)0);
        }
    }
    if (want_loss && p.reduction != PLOSS_REDUCTION_NONE) {
        acc = block_reduce<THREADS>(acc, SumOp());
        if (threadIdx.x == 0)
            aux.partial[blockIdx.x] = (double)acc;
    }
}

/* The reduced loss from its partials, by one block: Σ in a fixed order (whichever block
 * runs it); MEAN divides by the count (0/0 = NaN).  Partials are read past L1 (another
 * block of the same grid may have just written them). */
template <class A, class LT>
__device__ __forceinline__ void sum_partials(const ploss_sample_problem &p, const Aux<A> &aux, int64_t nparts)
{
    constexpr int U = 8; /* loads in flight per thread; the order of the adds is fixed */
    double s = 0;
    for (int64_t k0 = threadIdx.x; k0 < nparts; k0 += (int64_t)U * THREADS) {
        double v[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
            v[u] = k0 + u * THREADS < nparts ? __ldcg(aux.partial + k0 + u * THREADS) : 0.0;
#pragma unroll
        for (int u = 0; u < U; ++u)
            s += v[u];
    }
    s = block_reduce<THREADS>(s, SumOp());
    if (threadIdx.x == 0) {
        if (p.reduction == PLOSS_REDUCTION_MEAN)
            s = s / (double)(p.ohem ? aux.mine->kept : __ldcg(aux.count));
        *(LT *)p.loss = (LT)s;
    }
}

template <class A, class LT>
__global__ void __launch_bounds__(THREADS) finalize_kernel(ploss_sample_problem p, Aux<A> aux, int64_t nparts)
{
    sum_partials<A, LT>(p, aux, nparts);
}

/* ---- per-sample kernels (C ≤ SAMPLE_CMAX; f32/f16/bf16 with f32 math) ----------------- */
/* A thread takes one sample at a time (or, in reg_kernel with C ≤ 8, two adjacent ones)
 * and computes its loss, state and gradient from its C logits, read from DRAM once, with
 * one write of the gradient.  The logits reach the thread in one of two ways:
 *  - tile_kernel (the sample axis contiguous, rows 16-byte aligned: N×C×H×W as it comes):
 *    a block stages tiles of C × TILE_P logits (TILE_P consecutive samples of one image)
 *    in shared memory with 16-byte asynchronous copies (cp.async), STAGES tiles deep: the
 *    copies of the next tiles are in flight while the current one is computed, and no
 *    register holds a logit in flight.  The gradient goes back into the tile and out as
 *    16-byte stores where its layout is as aligned as the input's (else element by
 *    element, coalesced along the samples).  Blocks are persistent (as many as fit on the
 *    device) and walk the tiles;
 *  - reg_kernel (any other layout: channels-last, odd strides, misaligned views): the C ≤
 *    CMAX logits go to registers, all loads issued before any arithmetic (launder).
 * Both run the same per-sample code (sample_step) over a row (a register array or a tile
 * column).  exp is exp_ftz (ex2.approx.ftz, common.cuh).  The class loops treat every
 * class alike: the target's own terms are handled once per sample, outside them (the
 * large-margin statistics mask the target's slot of the row; every gradient loop writes
 * the non-target formula for all classes and the target's entry is written last). */

constexpr int SAMPLE_CMAX = 32; /* largest C of the per-sample kernels */
constexpr int TILE_P = THREADS;  /* samples per tile of tile_kernel: one per thread */
constexpr int STAGES = 2;        /* tile buffers of tile_kernel (copies in flight + 1) */

__device__ __forceinline__ float fex(float v) { return exp_ftz(v); }

/* max(v, lo), NaN when v is NaN (max.NaN; fmaxf would return lo). */
__device__ __forceinline__ float max_nan(float v, float lo)
{
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(v), "f"(lo));
    return r;
}

/* A sample's logits in a shared-memory tile: class j at s[j·TILE_P]. */
template <class T> struct TileRow {
    T *s;
    __device__ __forceinline__ float operator[](int j) const { return (float)to_acc(s[j * TILE_P]); }
};

/* f(j, x_j) for the classes j < C of a row, in increasing j: a register row is walked by a
 * loop unrolled to its compile-time bound (every index a constant), a tile row by a loop. */
template <int CMAX, class F> __device__ __forceinline__ void for_classes(const float (&v)[CMAX], int C, F &&f)
{
#pragma unroll
    for (int j = 0; j < CMAX; ++j)
        if (j < C)
            f(j, v[j]);
}
template <class T, class F> __device__ __forceinline__ void for_classes(const TileRow<T> &r, int C, F &&f)
{
#pragma unroll 4
    for (int j = 0; j < C; ++j)
        f(j, r[j]);
}

/* x_y of a row (y < 0: none, 0); a register row without a dynamic register index. */
template <int CMAX> __device__ __forceinline__ float row_pick(const float (&v)[CMAX], int y)
{
    float r = 0.f;
#pragma unroll
    for (int j = 0; j < CMAX; ++j)
        if (j == y)
            r = v[j];
    return r;
}
template <class T> __device__ __forceinline__ float row_pick(const TileRow<T> &r, int y) { return y >= 0 ? r[y] : 0.f; }

/* x_y ← v (0 ≤ y < C): a register row by selects (one move when y is a constant), a tile
 * row rounded to T. */
template <int CMAX> __device__ __forceinline__ void row_set(float (&v)[CMAX], int y, float val)
{
#pragma unroll
    for (int j = 0; j < CMAX; ++j)
        if (j == y)
            v[j] = val;
}
template <class T> __device__ __forceinline__ void row_set(const TileRow<T> &r, int y, float val)
{
    r.s[y * TILE_P] = from_acc<T>(val);
}

/* Softmax sums of a row: m = max_j x_j (0 when every x_j is −∞) and se = Σ_j e^(x_j − m),
 * with IEEE operations and exp_ftz only, classes in increasing order: the OHEM key is
 * recomputed from them by every pass and must come out bit-identical (no contraction). */
struct SoftmaxSums { float m, se; };
template <class R, class Z> __device__ __forceinline__ SoftmaxSums softmax_sums(const R &row, int C, Z &&z)
{
    float m = -INFINITY;
    for_classes(row, C, [&](int j, float x) { m = fmaxf(m, z(x, j)); });
    if (m == -INFINITY)
        m = 0.f; /* every term is e^−∞ = 0 (a zero prior, or x = −∞) */
    float se = 0.f;
    for_classes(row, C, [&](int j, float x) { se = __fadd_rn(se, fex(__fsub_rn(z(x, j), m))); });
    return {m, se};
}
struct Identity {
    __device__ __forceinline__ float operator()(float x, int) const { return x; }
};

/* OHEM key of a valid sample: p_y = e^(x_y − m)/se, rounded to f32; the numerator with the
 * accurate expf, so that scores below 2^-126 stay distinct (ordered) instead of flushing to
 * 0 (se ≥ 1 does not need it). */
__device__ __forceinline__ uint32_t sums_key(const SoftmaxSums &k, float xy)
{
    return score_key(__fdiv_rn(expf(__fsub_rn(xy, k.m)), k.se));
}

/* Taylor polynomial f_n in f32 (n = 2 and 1 unrolled, the common case). */
__device__ __forceinline__ float reg_taylor(float x, int n)
{
    if (n == 2)
        return fmaf(x, fmaf(x, 0.5f, 1.f), 1.f);
    if (n == 1)
        return 1.f + x;
    return ploss_taylor_poly(x, n);
}

/* Per-sample forms of the ops:
 *  - finish(row, C, y, x_y, sums, save, st, cx): the loss, the context cx of the gradient
 *    and (save) the state; sums: the row's softmax sums when the OHEM key already has them;
 *  - from_state(st, x_y): the context from a saved state;
 *  - coeffs(cx, w, x_y, y): the per-sample coefficients GC of the gradient times w;
 *  - grad(x_j, j, gc): w·∂ℓ/∂x_j for j ≠ y (also evaluated at y, then overwritten);
 *    gc.ty: w·∂ℓ/∂x_y.
 * Reciprocals are __frcp_rn (correctly rounded) times the numerator. */
struct RegLargeMargin {
    static constexpr int n_state = 3;
    float half_lam, u;
    /* r: reference point (a non-target logit or the non-target maximum, or from a state
     * r + log S'), c1 = e^(r − lse), invS = 1/Σ_𝒩 e^(x−r), Em = E_𝒩[x] − r, py = p_y */
    struct Ctx { float r, c1, invS, Em, py; };
    /* w·∂ℓ/∂x_j = e_j·(A + B·d_j) − K with d_j = x_j − r, e_j = e^(d_j):
     * A = w·(c1 + λ/2·invS·(1 − Em)), B = w·λ/2·invS, K = w·λ/2·u */
    struct GC { float r, A, B, K, ty; };
    template <class R>
    __device__ float finish(R &row, int C, int y, float xy, const SoftmaxSums *, bool save, float (&st)[3],
                            Ctx &cx) const
    {
        /* statistics of 𝒩 = {j ≠ y} relative to a reference r, from loops over every class
         * with r in the target's slot (e^0 = 1, offset by sN's start at −1; no t or rel
         * term; exact in a tile's T: r is one of the row's values).  r is first another
         * class's logit (x_1 or x_0: no pass for the maximum; its own e^0 keeps sN near or
         * above 1, whatever the order of the adds).  Taken again relative to the
         * non-target maximum when sN > 2^40 (a logit more than 27 above r: an overflow is
         * possible, and c1 = e^(r − lse) could flush to 0 while some p_j = e^(x_j − r)·c1
         * is above 2^-86) or sN is NaN. */
        float r = row_pick(row, y == 0 ? 1 : 0), sN, tN;
        float rel;
        auto sums = [&] {
            row_set(row, y, r);
            sN = -1.f, tN = 0.f, rel = 0.f;
            for_classes(row, C, [&](int, float x) {
                /* d ≥ −128 (NaN kept), where e^d is 0 already: e·d = 0, not 0·∞ */
                const float d = max_nan(x - r, -128.f), e = fex(d);
                sN += e;
                tN = fmaf(e, d, tN);
                rel += x - r;
            });
        };
        sums();
        if (!(sN <= 0x1p40f)) {
            row_set(row, y, -INFINITY);
            r = -INFINITY;
            for_classes(row, C, [&](int, float x) { r = fmaxf(r, x); });
            sums();
        }
        /* Σ (x − r) again in double where it overflowed f32 (logits near ±FLT_MAX) */
        double rel_d = rel;
        if (!(fabsf(rel) <= FLT_MAX)) {
            rel_d = 0.0;
            for_classes(row, C, [&](int, float x) { rel_d += (double)x - (double)r; });
        }
        /* the target apart from 𝒩: a dominant target cannot underflow the non-target sum */
        const float m = fmaxf(xy, r);
        const float lse = m + logf(fex(xy - m) + fex(r - m) * sN);
        const float invS = __frcp_rn(sN), Em = tN * invS;
        if (save) {
            st[0] = lse;
            st[1] = r + logf(sN);
            st[2] = r + Em;
        }
        cx = {r, fex(r - lse), invS, Em, fex(xy - lse)};
        return (float)(lse - xy + half_lam * ((double)Em - rel_d * u)); /* a large finite loss stays finite */
    }
    __device__ Ctx from_state(const float (&st)[3], float xy) const
    {
        return {st[1], fex(st[1] - st[0]), 1.f, st[2] - st[1], fex(xy - st[0])};
    }
    __device__ GC coeffs(const Ctx &c, float w, float, int) const
    {
        const float B = w * half_lam * c.invS;
        return {c.r, fmaf(B, 1.f - c.Em, w * c.c1), B, w * half_lam * u, w * (c.py - 1.f)};
    }
    __device__ float grad(float x, int, const GC &g) const
    {
        /* d ≥ −128 (NaN kept): e^d is 0 there already, and B·d cannot reach −∞ (0·∞) */
        const float d = max_nan(x - g.r, -128.f);
        return fmaf(fex(d), fmaf(g.B, d, g.A), -g.K);
    }
};

/* Taylor cross-entropy; N = 2: the order 2 (the default) known at compile time, N = 0:
 * the order `order`. */
template <int N> struct RegTaylor {
    static constexpr int n_state = 1;
    int order;
    struct Ctx { float invZ, invFy; };
    struct GC { float r, ty; }; /* r = w/Z */
    __device__ int n() const { return N ? N : order; }
    template <class R>
    __device__ float finish(R &row, int C, int, float xy, const SoftmaxSums *, bool, float (&st)[3], Ctx &cx) const
    {
        float z = 0.f;
        for_classes(row, C, [&](int, float x) { z += reg_taylor(x, n()); });
        st[0] = z;
        cx = {__frcp_rn(z), __frcp_rn(reg_taylor(xy, n()))};
        return logf(z * cx.invFy); /* log(Z / f_n(x_y)), Z ≥ f_n(x_y) > 0 */
    }
    __device__ Ctx from_state(const float (&st)[3], float xy) const
    {
        return {__frcp_rn(st[0]), __frcp_rn(reg_taylor(xy, n()))};
    }
    __device__ GC coeffs(const Ctx &c, float w, float xy, int) const
    {
        return {w * c.invZ, reg_taylor(xy, n() - 1) * (w * (c.invZ - c.invFy))};
    }
    __device__ float grad(float x, int, const GC &g) const
    {
        if (N == 2)
            return fmaf(x, g.r, g.r); /* f_1(x)·r */
        return reg_taylor(x, n() - 1) * g.r;
    }
};

/* Cross-entropy (PRIORS = false) and PC-softmax (PRIORS = true: z_j = x_j + bias_j, the log
 * priors).  A compile-time choice: a runtime test of the bias pointer put a predicated load
 * of the prior into every class step of every loop.  Cross-entropy without mining may carry
 * label smoothing: c_j = b + a·[j = y], csum = Σ_j c_j = a + b·C, ℓ = Σ_j c_j·(lse − x_j) (a
 * term whose coefficient is 0 adds nothing, even at x_j = −∞), ∂ℓ/∂x_j = csum·p_j − c_j;
 * a = 1, b = 0 is plain cross-entropy. */
template <bool PRIORS> struct RegSoftmaxOp {
    static constexpr int n_state = 1;
    static constexpr bool kPriors = PRIORS;
    const float *bias; /* the log priors (PRIORS), else unused */
    float a = 1.f, b = 0.f, csum = 1.f;
    struct Ctx { float lse; };
    struct GC { float lse, w, wb, ty; }; /* w·csum, w·b */
    __device__ float z(float x, int j) const
    {
        if constexpr (PRIORS)
            return x + __ldg(bias + j);
        else
            return x;
    }
    template <class R>
    __device__ float finish(R &row, int C, int y, float xy, const SoftmaxSums *known, bool, float (&st)[3],
                            Ctx &cx) const
    {
        if (!PRIORS && b != 0.f) { /* no mining: the sums with q = Σ_{j≠y} (m − x_j) ≥ 0 */
            float m = -INFINITY, se = 0.f, q = 0.f;
            for_classes(row, C, [&](int, float x) { m = fmaxf(m, x); });
            for_classes(row, C, [&](int j, float x) {
                se += fex(x - m);
                q += j != y ? m - x : 0.f;
            });
            const float ls = logf(se), lse = m + ls, cy = a + b; /* lse − m = ls ≥ 0 */
            st[0] = lse;
            cx = {lse};
            return fmaf(b, fmaf((float)(C - 1), ls, q), cy != 0.f ? cy * (lse - xy) : 0.f);
        }
        const SoftmaxSums k =
            known && !PRIORS ? *known : softmax_sums(row, C, [&](float x, int j) { return z(x, j); });
        const float lse = k.m + logf(k.se);
        st[0] = lse;
        cx = {lse};
        return a * (lse - xy);
    }
    __device__ Ctx from_state(const float (&st)[3], float) const { return {st[0]}; }
    __device__ GC coeffs(const Ctx &c, float w, float xy, int y) const
    {
        /* b = 0: no w·b term (an infinite upstream gradient keeps ±∞, not ∞·0 = NaN) */
        return {c.lse, w * csum, b != 0.f ? w * b : 0.f, w * (csum * fex(z(xy, y) - c.lse) - (a + b))};
    }
    __device__ float grad(float x, int j, const GC &g) const { return fmaf(fex(z(x, j) - g.lse), g.w, -g.wb); }
};
using RegSoftmax = RegSoftmaxOp<false>;

/* V elements of T read or written as one vector. */
template <class T, int V> struct alignas(sizeof(T) * V) Pack { T e[V]; };

/* What a pass of the per-sample kernels needs besides the samples (uniform over the grid). */
struct SamplePass {
    bool want_loss, want_grad, use_state, upstream_each;
    uint32_t tkey; /* OHEM: keep keys ≤ tkey */
    float omega;   /* gradient multiplier of a reduced loss */
    MineLevel L;   /* mining level (MINE) */
    int level;
};

/* Per-thread sums of a pass. */
struct SampleSums {
    float loss;
    unsigned long long n_le, n_valid;
};

/* MINE: the level's shared histogram zeroed; false when an earlier level's select already
 * found the threshold (uniform: the block returns). */
template <bool MINE>
__device__ __forceinline__ bool sample_pass(const ploss_sample_problem &p, const Aux<float> &aux, int level,
                                            unsigned int *hist, SamplePass &ps)
{
    ps = {!MINE && p.pass != PLOSS_PASS_BACKWARD,
          !MINE && p.pass != PLOSS_PASS_FORWARD,
          p.pass == PLOSS_PASS_BACKWARD && p.state != nullptr,
          p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE,
          0u,
          0.f,
          {0u, 0u, 0, 0},
          level};
    if constexpr (MINE) {
        if (level > 0 && aux.mine->done)
            return false;
        ps.L = mine_level(aux.mine, level);
        for (int b = threadIdx.x; b < ps.L.nb; b += THREADS)
            hist[b] = 0;
        __syncthreads();
    } else {
        ps.tkey = p.ohem ? aux.mine->tkey : 0u;
        ps.omega = ps.want_grad && !ps.upstream_each ? (float)reduced_omega(p, aux) : 0.f;
    }
    return true;
}

/* Sample (n, s) with label y and logits `row`.  MINE: its OHEM key into the level's
 * histogram (and counts).  Else: its loss and state, and, when the pass wants the
 * gradient, ∂ℓ/∂x_j · ω in place of x_j in the row for each class j < C (zero for a sample
 * not kept): the non-target formula for every j in increasing order (each x_j read before
 * it is replaced), then the target's value over it.  An invalid label gives a NaN loss and
 * state and a zero gradient (as cross_entropy.cu).  Large-margin also masks its target's
 * slot of the row. */
template <bool MINE, class Op, class R>
__device__ __forceinline__ void sample_step(const ploss_sample_problem &p, const Op &op, const Aux<float> &aux,
                                            const SamplePass &ps, unsigned int *hist, R &row, int64_t y,
                                            int64_t n, int64_t s, SampleSums &sum)
{
    const int C = (int)p.C;
    const bool invalid = label_status(p, y) == kInvalid;
    const bool valid = y != p.ignore_index && !invalid;
    const int yi = valid ? (int)y : -1;
    const float xy = row_pick(row, yi);
    SoftmaxSums ks = {0.f, 0.f};
    uint32_t key = PLOSS_OHEM_IGNORED_KEY;
    if (p.ohem && valid) {
        ks = softmax_sums(row, C, Identity{});
        key = sums_key(ks, xy);
    }
    if constexpr (MINE) {
        if (invalid && ps.level == 0)
            report_invalid_label(aux.slot, y);
        mine_count(hist, ps.L, key);
        sum.n_le += key <= p.thresh_key;
        sum.n_valid += valid;
    } else {
        if (invalid && !p.ohem)
            report_invalid_label(aux.slot, y); /* OHEM: reported by the mining */
        const bool keep = p.ohem ? valid && key <= ps.tkey : valid;
        const float fill = invalid ? NAN : 0.f;
        float st[3] = {fill, fill, fill}, loss = fill;
        typename Op::Ctx cx{};
        if (keep) {
            if (ps.use_state) {
#pragma unroll
                for (int k = 0; k < Op::n_state; ++k)
                    st[k] = (float)load_state(p.state, p.state_dtype, n * p.st_sn + k * p.st_sk + s * p.st_ss);
                cx = op.from_state(st, xy);
            } else {
                loss = op.finish(row, C, yi, xy, p.ohem ? &ks : nullptr, p.state != nullptr, st, cx);
            }
        }
        if (ps.want_loss) {
            sum.loss += loss;
            if (p.reduction == PLOSS_REDUCTION_NONE)
                ((float *)p.loss)[n * p.l_sn + s * p.l_ss] = loss;
            if (p.state)
#pragma unroll
                for (int k = 0; k < Op::n_state; ++k)
                    store_state(p.state, p.state_dtype, n * p.st_sn + k * p.st_sk + s * p.st_ss, (double)st[k]);
        }
        if (ps.want_grad) {
            /* a sample not kept runs the same loop and writes +0 (its values masked off, not
             * a branch: a conditional select around an op that loads, PC-softmax's prior,
             * becomes a branch per class): no second, divergent loop for the warps that
             * hold one (most of them at 1/16 ignored) */
            const float w =
                ps.upstream_each ? (float)load_dyn(p.grad_loss, p.gl_dtype, n * p.gl_sn + s * p.gl_ss) : ps.omega;
            typename Op::GC gc{};
            if (keep)
                gc = op.coeffs(cx, w, xy, yi);
            const unsigned live = keep ? ~0u : 0u;
            for_classes(row, C, [&](int j, float x) {
                row_set(row, j, __uint_as_float(__float_as_uint(op.grad(x, j, gc)) & live));
            });
            if (keep)
                row_set(row, yi, gc.ty);
        }
    }
}

/* The block's end of a pass: MINE, its histogram and counts into the mining state; else
 * its loss partial (reduced losses). */
template <bool MINE>
__device__ __forceinline__ void sample_flush(const ploss_sample_problem &p, const Aux<float> &aux, const SamplePass &ps,
                                             unsigned int *hist, SampleSums &sum)
{
    if constexpr (MINE) {
        mine_flush(hist, ps.L, aux.mine, ps.level, sum.n_le, sum.n_valid);
    } else if (ps.want_loss && p.reduction != PLOSS_REDUCTION_NONE) {
        const float acc = block_reduce<THREADS>(sum.loss, SumOp());
        if (threadIdx.x == 0)
            aux.partial[blockIdx.x] = (double)acc;
    }
}

/* Whether tile_kernel can read x (and write a gradient laid out as x) in 16-byte pieces:
 * the sample axis contiguous, every class row of every image starting on 16 bytes. */
template <class T> __host__ __device__ __forceinline__ bool tile_aligned(const void *a, int64_t sn, int64_t sc, int64_t ss)
{
    return ss == 1 && (uintptr_t)a % 16 == 0 && (sn * (int64_t)sizeof(T)) % 16 == 0 &&
           (sc * (int64_t)sizeof(T)) % 16 == 0;
}

/* f(g, t) for the 16-byte pieces a thread moves between a tile (t, class row j at
 * t + j·TILE_P) and global memory (g, class stride gsc): class rows j0, j0 + RPS, … < C. */
template <int RPS, class G, class Tile, class F>
__device__ __forceinline__ void for_tile_pieces(int j0, int C, G *g, int64_t gsc, Tile *t, F &&f)
{
    for (int j = j0; j < C; j += RPS, g += RPS * gsc, t += RPS * TILE_P)
        f(g, t);
}

/* A tile of the tile path and where it lies: tile t = n·per + r is samples r·TILE_P …
 * of image n.  The blocks walk the tiles with stride gridDim.x, so the cursors advance by
 * adding (dn, dr) = divmod(gridDim.x, per) with a carry: no division per tile. */
struct TileCursor {
    int64_t t, n, r;
    __device__ void advance(int64_t step, int64_t dn, int64_t dr, int64_t per)
    {
        t += step;
        n += dn;
        r += dr;
        if (r >= per) {
            r -= per;
            ++n;
        }
    }
};

/* The tile path: MINE = false the loss pass, MINE = true OHEM mining pass `level`.  Dynamic
 * shared memory: STAGES tiles of C × TILE_P elements of T.  Per tile: one barrier after
 * its copies land, one before its gradient leaves in 16-byte pieces (they hold other
 * threads' samples), one before its buffer is refilled; the tile's loss partial is the
 * sum of its warps' sums (shuffles, then one thread after the last barrier: fixed order).
 * The loss pass's last block to finish sums the per-tile loss partials. */
template <class T, class Op, bool MINE>
__global__ void __launch_bounds__(THREADS, 4)
    tile_kernel(ploss_sample_problem p, Op op, Aux<float> aux, int level)
{
    extern __shared__ __align__(16) unsigned char tile_smem[];
    __shared__ unsigned int hist[MINE ? HIST0 : 1];
    __shared__ float warp_loss[THREADS / 32];
    SamplePass ps;
    if (!sample_pass<MINE>(p, aux, level, hist, ps))
        return;
    constexpr int VE = 16 / (int)sizeof(T); /* elements of a 16-byte piece */
    constexpr int PPR = TILE_P / VE;         /* pieces per class row of a tile */
    constexpr int RPS = THREADS / PPR;       /* class rows per sweep of the block */
    const int C = (int)p.C;
    const int64_t S = p.S, per = (S + TILE_P - 1) / TILE_P, tiles = p.N * per;
    const int64_t step = gridDim.x, dn = step / per, dr = step - dn * per;
    const T *x = (const T *)p.x;
    T *const gp = (T *)p.grad;
    T *const buf = (T *)tile_smem;
    const bool gvec = !MINE && ps.want_grad && tile_aligned<T>(gp, p.g_sn, p.g_sc, p.g_ss);
    const bool reduced = !MINE && ps.want_loss && p.reduction != PLOSS_REDUCTION_NONE;
    /* this thread's pieces: element e of class rows j0, j0 + RPS, … of every tile */
    const int j0 = (int)threadIdx.x / PPR, e = ((int)threadIdx.x % PPR) * VE;

    /* the copies of tile c into tile buffer b (a piece that crosses the image's end is
     * zero-filled past it, one wholly past it is zeroed without a read) */
    auto fetch = [&](const TileCursor &c, int b) {
        const int64_t s0 = c.r * TILE_P, have = S - s0 - e;
        const int bytes = have >= VE ? 16 : have > 0 ? (int)have * (int)sizeof(T) : 0;
        const T *src = bytes ? x + c.n * p.x_sn + j0 * p.x_sc + s0 + e : x;
        const int64_t xs = bytes ? p.x_sc : 0;
        for_tile_pieces<RPS>(j0, C, src, xs, buf + ((size_t)b * C + j0) * TILE_P + e,
                             [&](const T *g, T *piece) { cp_async16(piece, g, bytes); });
    };

    /* the block's first STAGES tiles in flight; one commit group per tile, empty past the
     * last; `ahead` is then the tile STAGES steps on */
    const int64_t t0 = blockIdx.x;
    TileCursor cur = {t0, t0 / per, t0 % per}, ahead = cur;
    for (int q = 0; q < STAGES; ++q) {
        if (ahead.t < tiles)
            fetch(ahead, q);
        cp_async_commit();
        ahead.advance(step, dn, dr, per);
    }

    SampleSums sum = {0.f, 0, 0};
    for (int b = 0; cur.t < tiles; b = b + 1 < STAGES ? b + 1 : 0) {
        const int64_t n = cur.n, s0 = cur.r * TILE_P, s = s0 + threadIdx.x;
        const bool here = s < S;
        const int64_t y = here ? sample_label(p, n, s) : p.ignore_index;
        cp_async_wait<STAGES - 1>(); /* this thread's copies of the current tile have landed */
        __syncthreads();    /* and everyone's */
        T *const tile = buf + (size_t)b * C * TILE_P;
        /* the gradient replaces the logits in the tile, then leaves it below */
        if (here) {
            TileRow<T> row{tile + threadIdx.x};
            sample_step<MINE>(p, op, aux, ps, hist, row, y, n, s, sum);
        }
        if (reduced) {
            const float w = warp_all_reduce<32>(sum.loss, SumOp());
            if (threadIdx.x % 32 == 0)
                warp_loss[threadIdx.x / 32] = w;
            sum.loss = 0.f;
        }
        if (ps.want_grad) {
            if (gvec) { /* 16-byte pieces, as the tile came in */
                __syncthreads();
                const int64_t have = S - s0 - e;
                T *g = gp + n * p.g_sn + j0 * p.g_sc + s0 + e;
                const T *src = tile + j0 * TILE_P + e;
                if (have >= VE)
                    for_tile_pieces<RPS>(j0, C, g, p.g_sc, src,
                                         [](T *gj, const T *piece) { *(uint4 *)gj = *(const uint4 *)piece; });
                else
                    for_tile_pieces<RPS>(j0, C, g, p.g_sc, src, [&](T *gj, const T *piece) {
                        for (int i = 0; i < have; ++i)
                            gj[i] = piece[i];
                    });
            } else if (here) { /* this thread's sample, class by class (coalesced along s) */
                T *g = gp + n * p.g_sn + s * p.g_ss;
                for (int j = 0; j < C; ++j, g += p.g_sc)
                    *g = tile[j * TILE_P + threadIdx.x];
            }
        }
        __syncthreads(); /* tile buffer b is free: the block's tile STAGES tiles on goes there */
        if (reduced && threadIdx.x == 0) { /* one partial per tile (warp_loss is rewritten
                                              only after the next tile's first barrier) */
            float a = 0.f;
#pragma unroll
            for (int k = 0; k < THREADS / 32; ++k)
                a += warp_loss[k];
            aux.partial[cur.t] = (double)a;
        }
        if (ahead.t < tiles)
            fetch(ahead, b);
        cp_async_commit();
        ahead.advance(step, dn, dr, per);
        cur.advance(step, dn, dr, per);
    }
    cp_async_wait<0>();
    if constexpr (MINE) {
        sample_flush<MINE>(p, aux, ps, hist, sum);
    } else if (reduced) {
        /* the last block to finish sums the per-tile partials (no finalize kernel) */
        __shared__ bool last;
        __threadfence(); /* this block's partials, before its arrival */
        __syncthreads();
        if (threadIdx.x == 0)
            last = atomicAdd(aux.finished, 1u) == gridDim.x - 1;
        __syncthreads();
        if (last) {
            __threadfence();
            sum_partials<float, float>(p, aux, tiles);
        }
    }
}

/* The register path: a thread takes V samples s0 … s0+V−1 of one image (V = 2 when the
 * sample axis is contiguous and C ≤ 8, see reg_pairs; else 1) and reads their C ≤ CMAX
 * logits into registers at once: all V·C loads are issued before any arithmetic
 * (launder), as V-element vectors where the addresses allow (x_ss = 1, x_sc a multiple of
 * V, the group's first element aligned to V elements), element by element otherwise.
 * The gradient replaces the logits in the registers and is written the same way.
 * MINE as tile_kernel. */
template <class T, int CMAX, int V, class Op, bool MINE>
__global__ void __launch_bounds__(THREADS, 2) reg_kernel(ploss_sample_problem p, Op op, Aux<float> aux, int level)
{
    __shared__ unsigned int hist[MINE ? HIST0 : 1];
    SamplePass ps;
    if (!sample_pass<MINE>(p, aux, level, hist, ps))
        return;
    const int64_t S = p.S, per = (S + V - 1) / V, groups = p.N * per;
    const int C = (int)p.C;
    const T *x = (const T *)p.x;
    T *gp = (T *)p.grad;
    const bool small = groups <= (int64_t)UINT32_MAX; /* 32-bit division suffices */
    SampleSums sum = {0.f, 0, 0};

    for (int64_t q = thread_index(); q < groups; q += grid_stride()) {
        const int64_t n = small ? (int64_t)((uint32_t)q / (uint32_t)per) : q / per;
        const int64_t s0 = (q - n * per) * V;
        const int nv = S - s0 < V ? (int)(S - s0) : V; /* samples of this group */
        int64_t y[V];
#pragma unroll
        for (int e = 0; e < V; ++e)
            y[e] = e < nv ? sample_label(p, n, s0 + e) : p.ignore_index;

        /* every load first (in bounds whatever the labels say) */
        const int64_t xo = n * p.x_sn + s0 * p.x_ss;
        float v[V][CMAX];
        const bool xvec = V > 1 && nv == V && p.x_ss == 1 && p.x_sc % V == 0 &&
                          ((uintptr_t)(x + xo) % (sizeof(T) * V)) == 0;
        if (xvec) {
#pragma unroll
            for (int j = 0; j < CMAX; ++j) {
                Pack<T, V> pk;
                if (j < C)
                    pk = *(const Pack<T, V> *)(x + xo + j * p.x_sc);
#pragma unroll
                for (int e = 0; e < V; ++e)
                    v[e][j] = j < C ? (float)to_acc(pk.e[e]) : 0.f;
            }
        } else {
#pragma unroll
            for (int e = 0; e < V; ++e)
#pragma unroll
                for (int j = 0; j < CMAX; ++j)
                    v[e][j] = e < nv && j < C ? (float)to_acc(x[xo + e * p.x_ss + j * p.x_sc]) : 0.f;
        }
#pragma unroll
        for (int e = 0; e < V; ++e)
#pragma unroll
            for (int j = 0; j < CMAX; ++j)
                launder(v[e][j]);

#pragma unroll
        for (int e = 0; e < V; ++e) {
            if (e >= nv)
                break;
            /* one sample after the other: the values of sample e enter the arithmetic
             * only after sample e − 1 is done (asm volatile keeps the order), so the
             * temporaries of two samples are not interleaved by the compiler */
            if (e > 0)
#pragma unroll
                for (int j = 0; j < CMAX; ++j)
                    launder(v[e][j]);
            sample_step<MINE>(p, op, aux, ps, hist, v[e], y[e], n, s0 + e, sum);
            if (V > 1)
#pragma unroll
                for (int j = 0; j < CMAX; ++j)
                    launder(v[e][j]);
        }

        if (ps.want_grad) {
            const int64_t go = n * p.g_sn + s0 * p.g_ss;
            const bool gvec = V > 1 && nv == V && p.g_ss == 1 && p.g_sc % V == 0 &&
                              ((uintptr_t)(gp + go) % (sizeof(T) * V)) == 0;
            if (gvec) {
#pragma unroll
                for (int j = 0; j < CMAX; ++j)
                    if (j < C) {
                        Pack<T, V> pk;
#pragma unroll
                        for (int e = 0; e < V; ++e)
                            pk.e[e] = from_acc<T>(v[e][j]);
                        *(Pack<T, V> *)(gp + go + j * p.g_sc) = pk;
                    }
            } else {
#pragma unroll
                for (int e = 0; e < V; ++e)
#pragma unroll
                    for (int j = 0; j < CMAX; ++j)
                        if (e < nv && j < C)
                            gp[go + e * p.g_ss + j * p.g_sc] = from_acc<T>(v[e][j]);
            }
        }
    }
    sample_flush<MINE>(p, aux, ps, hist, sum);
}

/* ---- host side ------------------------------------------------------------------------ */

/* Σ of the per-block loss partials into the loss (MEAN/SUM, not backward), by a kernel of
 * its own (the tile path sums its per-tile partials in its last block instead). */
template <class A, class LT>
ploss_status run_finalize(ploss_ctx_t *ctx, const ploss_sample_problem *p, Aux<A> aux, int64_t nparts)
{
    if (p->pass == PLOSS_PASS_BACKWARD || p->reduction == PLOSS_REDUCTION_NONE)
        return PLOSS_OK;
    finalize_kernel<A, LT><<<1, THREADS, 0, stream_of(ctx)>>>(*p, aux, nparts);
    return check_launch("sample_policies finalize_kernel");
}

/* OHEM radix select: level 0 of the histogram (hist(0), counts) is launched by the
 * caller; hist(level) launches the mining pass of a later level.  With n_min = 0 or
 * n_min ≥ M the threshold is known after level 0. */
template <class F> ploss_status run_select(ploss_ctx_t *ctx, const ploss_sample_problem *p, MineState *ms, F &&hist)
{
    cudaStream_t stream = stream_of(ctx);
    const int64_t M = p->N * p->S;
    ploss_status st = hist(0);
    if (st != PLOSS_OK)
        return st;
    if (p->n_min <= 0 || p->n_min >= M) {
        fixed_threshold_kernel<<<1, 1, 0, stream>>>(ms, p->n_min <= 0 ? p->thresh_key : PLOSS_OHEM_IGNORED_KEY - 1u);
        return check_launch("sample_policies fixed_threshold_kernel");
    }
    for (int level = 0; level < 3 && st == PLOSS_OK; ++level) {
        if (level > 0 && (st = hist(level)))
            break;
        select_kernel<<<1, THREADS, 0, stream>>>(ms, level, p->n_min, p->thresh_key);
        st = check_launch("sample_policies select_kernel");
    }
    return st;
}

/* The op of a per-sample pass: the loss's own, or cross-entropy's for OHEM mining. */
template <bool MINE, class ROp> auto pass_op(const ROp &op)
{
    if constexpr (MINE)
        return RegSoftmax{nullptr};
    else
        return op;
}

/* A per-sample path: the mining passes (OHEM) and the loss pass, launched by
 * pass(std::bool_constant<MINE>, level). */
template <class F> ploss_status run_samples(ploss_ctx_t *ctx, const ploss_sample_problem *p, Aux<float> aux, F &&pass)
{
    ploss_status st = PLOSS_OK;
    if (p->ohem)
        st = run_select(ctx, p, aux.mine, [&](int level) { return pass(std::true_type{}, level); });
    return st == PLOSS_OK ? pass(std::false_type{}, 0) : st;
}

/* Pixel pairs (V = 2) along a contiguous sample axis for C ≤ 8 only: with C > 8 the two
 * rows of a pair exceed the 128 registers of two 256-thread blocks per SM (ptxas spills
 * 68–136 bytes at CMAX = 24/32 in f32), while one sample per thread needs 64–97 registers
 * and no spill; its loads are still coalesced (a warp reads 32 consecutive pixels). */
inline bool reg_pairs(const ploss_sample_problem *p) { return p->x_ss == 1 && p->S > 1 && p->C <= 8; }

/* The register path: CMAX tier (8, 24, 32) and vector width (reg_pairs: 2, else 1). */
template <class T, class ROp>
ploss_status run_reg(ploss_ctx_t *ctx, const ploss_sample_problem *p, const ROp &op, Aux<float> aux, unsigned blocks)
{
    cudaStream_t stream = stream_of(ctx);
    auto go = [&](auto cmax, auto vec) {
        constexpr int CMAX = decltype(cmax)::value, V = decltype(vec)::value;
        const ploss_status st = run_samples(ctx, p, aux, [&](auto mine, int level) {
            constexpr bool MINE = decltype(mine)::value;
            auto o = pass_op<MINE>(op);
            reg_kernel<T, CMAX, V, decltype(o), MINE><<<blocks, THREADS, 0, stream>>>(*p, o, aux, level);
            return check_launch(MINE ? "sample_policies reg_kernel (mining)" : "sample_policies reg_kernel");
        });
        return st != PLOSS_OK ? st : run_finalize<float, float>(ctx, p, aux, blocks);
    };
    using std::integral_constant;
    if (p->C <= 8)
        return reg_pairs(p) ? go(integral_constant<int, 8>{}, integral_constant<int, 2>{})
                            : go(integral_constant<int, 8>{}, integral_constant<int, 1>{});
    if (p->C <= 24)
        return go(integral_constant<int, 24>{}, integral_constant<int, 1>{});
    return go(integral_constant<int, SAMPLE_CMAX>{}, integral_constant<int, 1>{});
}

/* Tiles of the tile path (a partial tile at the end of each image). */
inline int64_t tile_count(const ploss_sample_problem *p) { return p->N * ((p->S + TILE_P - 1) / TILE_P); }

template <class T> size_t tile_smem_bytes(int64_t C) { return STAGES * (size_t)C * TILE_P * sizeof(T); }

/* The MEAN divisor (valid samples) into *count, by its own kernel. */
inline ploss_status run_count(ploss_ctx_t *ctx, const ploss_sample_problem *p, unsigned long long *count)
{
    count_kernel<<<grid_blocks(p->N * p->S, THREADS * kLabelsPerThread, 4096), THREADS, 0, stream_of(ctx)>>>(*p, count);
    return check_launch("sample_policies count_kernel");
}

/* Blocks of the tile path, or 0 where it does not apply (layout, alignment, no sample).
 * Both kernels of the path (loss, OHEM mining) opt in to the largest tiles' dynamic shared
 * memory (STAGES tiles of 32 KiB at C = 32 in f32, besides their static shared memory: the
 * mining histogram, CUB's scratch), once per device (cached like clusters_supported in
 * cross_entropy.cu; a cudaDeviceReset by the caller is not seen), not at every call.  The
 * grid is what fits on the device at once (the blocks walk the tiles); it decides only who
 * computes which tile: the loss partials are per tile, so the results do not depend on it. */
template <class T, class ROp> unsigned tile_grid(ploss_ctx_t *ctx, const ploss_sample_problem *p)
{
    const int64_t tiles = tile_count(p);
    const int device = ctx->device.device_id;
    if (tiles == 0 || device < 0 || device >= 64 || !tile_aligned<T>(p->x, p->x_sn, p->x_sc, p->x_ss))
        return 0;
    const auto loss_k = tile_kernel<T, ROp, false>;
    const auto mine_k = tile_kernel<T, RegSoftmax, true>;
    /* per device: opted in (a refusal is not remembered: the next call tries again) */
    static bool opted_in[64];
    if (!opted_in[device]) {
        const int most = (int)tile_smem_bytes<T>(SAMPLE_CMAX);
        opted_in[device] =
            cudaFuncSetAttribute(loss_k, cudaFuncAttributeMaxDynamicSharedMemorySize, most) == cudaSuccess &&
            cudaFuncSetAttribute(mine_k, cudaFuncAttributeMaxDynamicSharedMemorySize, most) == cudaSuccess;
    }
    const int smem = (int)tile_smem_bytes<T>(p->C);
    int per_sm = 0, sms = 0;
    const bool ok =
        opted_in[device] &&
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, loss_k, THREADS, smem) == cudaSuccess &&
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess;
    if (!ok || per_sm < 1 || sms < 1) {
        (void)cudaGetLastError(); /* no tile path here: the register path instead */
        return 0;
    }
    return (unsigned)std::min<int64_t>(tiles, (int64_t)per_sm * sms);
}

/* The tile path; the loss pass's last block sums the partials: no finalize kernel. */
template <class T, class ROp>
ploss_status run_tiles(ploss_ctx_t *ctx, const ploss_sample_problem *p, const ROp &op, Aux<float> aux, unsigned blocks)
{
    cudaStream_t stream = stream_of(ctx);
    const size_t smem = tile_smem_bytes<T>(p->C);
    return run_samples(ctx, p, aux, [&](auto mine, int level) {
        constexpr bool MINE = decltype(mine)::value;
        auto o = pass_op<MINE>(op);
        tile_kernel<T, decltype(o), MINE><<<blocks, THREADS, smem, stream>>>(*p, o, aux, level);
        return check_launch(MINE ? "sample_policies tile_kernel (mining)" : "sample_policies tile_kernel");
    });
}

template <class Op> struct is_taylor_op : std::false_type {};
template <class A> struct is_taylor_op<TaylorOp<A>> : std::true_type {};

/* The row-group path (any C, f64, Taylor with f64 internals). */
template <int G, class T, class Op>
ploss_status run_groups(ploss_ctx_t *ctx, const ploss_sample_problem *p, const Op &op, Aux<typename Op::acc> aux,
                        unsigned blocks)
{
    using A = typename Op::acc;
    using LT = std::conditional_t<std::is_same<T, double>::value, double, float>;
    cudaStream_t stream = stream_of(ctx);
    ploss_status st = PLOSS_OK;
    if constexpr (!is_taylor_op<Op>::value) /* OHEM is refused for Taylor CE before this */
        if (p->ohem)
            st = run_select(ctx, p, aux.mine, [&](int level) {
                score_kernel<G, T, A><<<blocks, THREADS, 0, stream>>>(*p, aux, level);
                return check_launch("sample_policies score_kernel");
            });
    if (st != PLOSS_OK)
        return st;
    loss_kernel<G, T, Op><<<blocks, THREADS, 0, stream>>>(*p, op, aux);
    if ((st = check_launch("sample_policies loss_kernel")))
        return st;
    return run_finalize<A, LT>(ctx, p, aux, blocks);
}

template <class T, class Op, class ROp>
ploss_status launch(ploss_ctx_t *ctx, const ploss_sample_problem *p, const Op &op, const ROp &rop)
{
    using A = typename Op::acc;
    const int64_t M = p->N * p->S;
    /* per sample: f32 math on f32/f16/bf16 with C ≤ SAMPLE_CMAX — tiles where the layout
     * allows, else registers; larger C, f64 and f64 internals: row groups */
    constexpr bool sample_ok = !std::is_same<T, double>::value && std::is_same<A, float>::value;
    const bool samples = sample_ok && p->C <= SAMPLE_CMAX;
    unsigned tiles = 0;
    if constexpr (sample_ok)
        tiles = samples ? tile_grid<T, ROp>(ctx, p) : 0;
    const int G = samples ? 1 : row_group_size(p->x_sc, p->C);
    const unsigned blocks = tiles                        ? tiles
                            : samples && reg_pairs(p) ? grid_blocks(p->N * ((p->S + 1) / 2), THREADS)
                                                      : grid_blocks(M, THREADS / G);
    const bool reduced = p->pass != PLOSS_PASS_BACKWARD && p->reduction != PLOSS_REDUCTION_NONE;
    const int64_t nparts = !reduced ? 0 : tiles ? tile_count(p) : blocks; /* loss partials */

    /* workspace: loss partials (per block, or per tile of 256 samples; none when no reduced
     * loss is computed) | count region (MEAN divisor, tile_kernel's finished blocks) | OHEM
     * state (histograms) | log priors */
    const size_t o_count = align_up((size_t)nparts * sizeof(double));
    const size_t o_mine = o_count + 256;
    const size_t o_bias = o_mine + (p->ohem ? align_up(sizeof(MineState)) : 0);
    const bool priors = p->w && M > 0; /* no per-class buffer without samples (C may be huge) */
    const size_t bytes = o_bias + (priors ? align_up((size_t)p->C * sizeof(A)) : 0);
    void *ws = NULL;
    ploss_status st = ploss_workspace(ctx, bytes, &ws);
    if (st != PLOSS_OK)
        return st;
    char *base = (char *)ws;
    /* the count region (zeroed): the MEAN divisor, then tile_kernel's finished blocks */
    Aux<A> aux = {ctx->error_slot, nparts ? (double *)base : nullptr, (unsigned long long *)(base + o_count),
                  p->ohem ? (MineState *)(base + o_mine) : nullptr, (unsigned int *)(base + o_count + 8)};
    cudaStream_t stream = stream_of(ctx);
    if ((st = ploss_cuda_memset(base + o_count, 0, o_bias - o_count, stream)))
        return st;

    Op o = op;
    ROp ro = rop;
    if constexpr (std::is_same<Op, SoftmaxOp<A>>::value) {
        if (priors) {
            A *bias = (A *)(base + o_bias);
            log_prior_kernel<A><<<grid_blocks(p->C, THREADS), THREADS, 0, stream>>>(*p, bias);
            if ((st = check_launch("sample_policies log_prior_kernel")))
                return st;
            o.bias = bias;
            if constexpr (std::is_same<A, float>::value) {
                if constexpr (ROp::kPriors)
                    ro.bias = bias;
                else /* launch_kind gives priors the op that adds them */
                    return ploss_error(PLOSS_ERR_UNSUPPORTED, "sample_policies: class priors without their op");
            }
        }
    }
    if (p->ohem) {
        if constexpr (is_taylor_op<Op>::value)
            return ploss_error(PLOSS_ERR_UNSUPPORTED, "OHEM runs on cross-entropy or large-margin only");
    } else if (p->reduction == PLOSS_REDUCTION_MEAN) {
        if ((st = run_count(ctx, p, aux.count)))
            return st;
    }
    if constexpr (sample_ok) {
        if (tiles)
            return run_tiles<T>(ctx, p, ro, aux, blocks);
        if (samples)
            return run_reg<T>(ctx, p, ro, aux, blocks);
    }
    return with_row_group(G, [&](auto g) { return run_groups<decltype(g)::value, T>(ctx, p, o, aux, blocks); });
}

static_assert(PLOSS_SAMPLE_KIND_COUNT == 4, "a new per-sample loss kind (core/engines/rows.h): add its case to "
                                           "launch_kind here, whose default is the softmax of PC-softmax and OHEM");
template <class T, class A> ploss_status launch_kind(ploss_ctx_t *ctx, const ploss_sample_problem *p)
{
    const float hl = (float)(0.5 * p->lam), u = (float)(1.0 / (double)(p->C - 1));
    switch (p->loss_kind) {
    case PLOSS_SAMPLE_LARGE_MARGIN:
        return launch<T>(ctx, p, LargeMarginOp<A>{(A)(0.5 * p->lam), (A)(1.0 / (double)(p->C - 1))},
                         RegLargeMargin{hl, u});
    case PLOSS_SAMPLE_TAYLOR_CE:
        return p->order == 2 ? launch<T>(ctx, p, TaylorOp<A>{2}, RegTaylor<2>{2})
                             : launch<T>(ctx, p, TaylorOp<A>{p->order}, RegTaylor<0>{p->order});
    case PLOSS_SAMPLE_CROSS_ENTROPY:
        if (!p->ohem) { /* from ploss_cuda_cross_entropy: label smoothing, per-sample kernels only */
            if (p->C > SAMPLE_CMAX || std::is_same<T, double>::value)
                return ploss_error(PLOSS_ERR_UNSUPPORTED, "sample_policies: cross-entropy without mining takes "
                                                          "at most %d classes of f32/f16/bf16 logits", SAMPLE_CMAX);
            const RegSoftmax ce = {nullptr, (float)p->ls_a, (float)p->ls_b, (float)(p->ls_a + p->ls_b * (double)p->C)};
            return launch<T>(ctx, p, SoftmaxOp<A>{nullptr}, ce);
        }
        [[fallthrough]]; /* OHEM CE */
    default: /* and PC_SOFTMAX (priors set in launch) */
        if (p->w)
            return launch<T>(ctx, p, SoftmaxOp<A>{nullptr}, RegSoftmaxOp<true>{nullptr});
        return launch<T>(ctx, p, SoftmaxOp<A>{nullptr}, RegSoftmax{nullptr});
    }
}

} // namespace
} // namespace ploss_cuda

using namespace ploss_cuda;

extern "C" ploss_status ploss_cuda_sample_policies(ploss_ctx_t *ctx, const ploss_sample_problem *p)
{
    return dispatch_float(p->x_dtype, "input", [&](auto xtag) {
        using T = typename decltype(xtag)::type;
        if constexpr (sizeof(T) <= 4) {
            const ploss_status st = ploss_cuda_sample_policies_rows(ctx, p);
            if (st != PLOSS_ERR_UNSUPPORTED)
                return st;
        }
        /* Taylor polynomials above order 10 lose digits to cancellation in f32 */
        if constexpr (!std::is_same<T, double>::value)
            if (p->loss_kind == PLOSS_SAMPLE_TAYLOR_CE && p->order > 10)
                return launch<T>(ctx, p, TaylorOp<double>{p->order}, RegTaylor<0>{p->order});
        return launch_kind<T, acc_t<T>>(ctx, p);
    });
}
