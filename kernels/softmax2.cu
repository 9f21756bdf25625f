/*
 * softmax2.cu — CUDA backend of the softmax family II losses with class-index targets
 * (large-margin softmax, Taylor CE, PC-softmax CE, OHEM CE / large-margin); formulas and
 * the OHEM mining rule in core/softmax2.h, LOSSES.md §2.2–2.7.
 *
 * Kernel shapes (one read of the logits from DRAM, one write of the gradient):
 *  - registers (f32/f16/bf16 with f32 math, C <= REG_CMAX = 32, any layout): reg_kernel,
 *    a thread per sample — or, for C <= 8, per pair of adjacent samples when the sample
 *    axis is contiguous (N×C×H×W), read and written as 2-element vectors where aligned —
 *    holds the C logits in registers (all C loads in flight before any arithmetic,
 *    compile-time C bound of 8, 24 or 32), computes loss, state and gradient from them
 *    (one read of x, one write of the gradient); exp is __expf.
 *  - row groups (f64, Taylor with f64 internals, C > 32): one thread per sample for
 *    class-strided rows (a warp reads 32 consecutive pixels per class, coalesced; the
 *    gradient pass re-reads the row from L1/L2), or a group of G lanes per sample for
 *    class-contiguous rows (a warp, or the whole 256-thread block for C > 2048) striding
 *    over the classes; per-lane statistics are merged with CUB (fixed order).
 * Per-sample statistics on the row-group path are accumulated online in one pass (running
 * maximum, rescaled sums; initial maximum −∞).  Large-margin keeps the statistics of the
 * non-target classes with their own maximum on both paths, and gets the full log-sum-exp
 * from them and x_y, so a dominant target logit cannot underflow the non-target sum.
 *
 * Invalid labels (≠ ignore_index, outside [0, C)) set the context's error slot and give
 * the sample a NaN loss (and state) and a zero gradient, as cross_entropy.cu.
 *
 * Reductions are deterministic: per-thread sums in the accumulation type, a CUB block
 * reduction, one double partial per block (the grid depends on the shape, dtype and layout,
 * which pick the kernel, never on timing), a single
 * block sums the partials in a fixed order; integer counts (valid samples, OHEM
 * histograms) use integer atomics, whose results do not depend on the order.  Nothing
 * synchronises with the host: the MEAN divisor and the OHEM threshold live in device
 * memory.
 *
 * OHEM threshold without a sort and without a per-sample buffer (workspace: the 48 KiB
 * histogram state): mining level 0 computes every sample's score key and a histogram of
 * its top 11 bits, the number of keys ≤ key(τ) and of valid samples; a single-block select
 * finds the bucket holding the n_min-th smallest key.  When at least n_min keys are
 * ≤ key(τ) the threshold is τ and levels 1 and 2 return at once (no read of the logits);
 * otherwise they recompute the keys (one more read of the logits each) and histogram the
 * next 11 and 10 bits inside the bucket, giving the n_min-th smallest key exactly (radix
 * select).  The loss pass recomputes the key and keeps the samples with key ≤ t*.  Keys
 * are recomputed by one function per path (reg_key: IEEE f32 operations and the accurate
 * expf only; group_key), so every pass sees the same bits.
 */
#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "../core/softmax2.h"
#include "../core/taylor_poly.h"
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
 * their own running maximum m: s = Σ e^(x−m), t = Σ e^(x−m)·(x−m), rel = Σ (x−m). */
template <class A> struct LargeMarginOp {
    using acc = A;
    static constexpr int n_state = 3;
    A half_lam, u; /* λ/2, 1/(C−1) */
    struct Stats { A m, s, t, rel; int64_t cnt; };
    __device__ static Stats init() { return {neg_inf<A>(), (A)0, (A)0, (A)0, 0}; }
    __device__ void push(Stats &a, A x, bool target, int64_t) const
    {
        if (target)
            return;
        if (a.cnt == 0) {
            a.m = x; a.s = 1; a.t = 0; a.rel = 0;
        } else if (x > a.m) {
            const A d = a.m - x, e = exp(d); /* rescale to the new maximum x */
            a.t = e * (a.t + a.s * d);
            a.s = a.s * e + (A)1;
            a.rel += (A)a.cnt * d;
            a.m = x;
        } else {
            const A d = x - a.m, e = exp(d);
            a.s += e;
            a.t += e * d;
            a.rel += d;
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
        return {m, a.s * ea + b.s * eb, ea * (a.t + a.s * da) + eb * (b.t + b.s * db),
                a.rel + (A)a.cnt * da + b.rel + (A)b.cnt * db, a.cnt + b.cnt};
    }
    __device__ A finish(const Stats &a, A xy, State<A> &st) const
    {
        const A m = xy > a.m ? xy : a.m;
        const A lse = m + log(exp(xy - m) + exp(a.m - m) * a.s);
        st.v[0] = lse;
        st.v[1] = a.m + log(a.s);
        st.v[2] = a.m + a.t / a.s;
        return lse - xy + half_lam * (a.t / a.s - a.rel * u);
    }
    __device__ A grad(const State<A> &st, A x, bool target, int64_t, A) const
    {
        const A p = exp(x - st.v[0]);
        if (target)
            return p - (A)1;
        return p + half_lam * (exp(x - st.v[1]) * (x - st.v[2] + (A)1) - u);
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
    double *partial;               /* one loss partial per block */
    unsigned long long *count;     /* MEAN divisor (valid samples), or NULL */
    MineState *mine;               /* OHEM state, or NULL */
};

/* ---- kernels -------------------------------------------------------------------------- */

/* Label of sample (n, s): i64 or i32 (a uniform branch, cheaper than a template). */
__device__ __forceinline__ int64_t label_of(const ploss_sm2_problem &p, int64_t n, int64_t s)
{
    const int64_t off = n * p.t_sn + s * p.t_ss;
    return p.t_dtype == PLOSS_I64 ? ((const int64_t *)p.t)[off] : (int64_t)((const int32_t *)p.t)[off];
}

/* A label that is neither ignore_index nor in [0, C). */
__device__ __forceinline__ bool invalid_label(const ploss_sm2_problem &p, int64_t y)
{
    return y != p.ignore_index && (y < 0 || y >= p.C);
}

/* Valid (not ignored, in range) labels → *count; invalid ones are reported. */
__global__ void __launch_bounds__(THREADS) count_kernel(ploss_sm2_problem p, unsigned long long *count)
{
    const int64_t M = p.N * p.S;
    unsigned long long c = 0;
    for (int64_t i = thread_index(); i < M; i += grid_stride()) {
        const int64_t y = label_of(p, i / p.S, i % p.S);
        c += y != p.ignore_index && !invalid_label(p, y);
    }
    c = block_reduce<THREADS>(c, SumOp());
    if (threadIdx.x == 0 && c)
        atomicAdd(count, c);
}

/* PC-softmax: bias_j = log w_j (−∞ for w_j = 0; NaN for a negative prior). */
template <class A> __global__ void log_prior_kernel(ploss_sm2_problem p, A *bias)
{
    for (int64_t j = thread_index(); j < p.C; j += grid_stride())
        bias[j] = log(load_float_dyn<A>(p.w, p.w_dtype, j * p.w_s));
}

/* OHEM key of a valid sample on the row-group path: the softmax probability of its label
 * from the online statistics (the same code in the mining and the loss kernels, so every
 * pass recomputes bit-identical keys). */
template <int G, class T, class A>
__device__ __forceinline__ uint32_t group_key(const ploss_sm2_problem &p, const T *x, int64_t xo, int64_t y, int lane)
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
__global__ void __launch_bounds__(THREADS) score_kernel(ploss_sm2_problem p, Aux<A> aux, int level)
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
        const int64_t y = label_of(p, n, s);
        const bool invalid = invalid_label(p, y);
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
__global__ void __launch_bounds__(THREADS) loss_kernel(ploss_sm2_problem p, Op op, Aux<typename Op::acc> aux)
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

    /* ω of a reduced loss: the scale (fused) or the upstream gradient, over the divisor */
    A omega = 0;
    if (want_grad) {
        const double up = p.pass == PLOSS_PASS_FUSED ? p.scale
                          : p.reduction == PLOSS_REDUCTION_NONE ? 0.0
                                                                : load_dyn(p.grad_loss, p.gl_dtype, 0);
        omega = (A)up;
        if (p.reduction == PLOSS_REDUCTION_MEAN) {
            const unsigned long long d = p.ohem ? aux.mine->kept : *aux.count;
            omega = d ? (A)(up / (double)d) : (A)0;
        }
    }

    A acc = 0;
    for (int64_t base = (int64_t)blockIdx.x * R; base < M; base += (int64_t)gridDim.x * R) {
        const int64_t i = base + threadIdx.x / G;
        if (i >= M)
            continue; /* uniform over a group */
        const int64_t n = i / p.S, s = i % p.S;
        const int64_t y = label_of(p, n, s);
        /* an invalid label (reported here, or by the OHEM score kernel) gives a NaN loss
         * and a zero gradient, as cross_entropy.cu; its row is never read */
        const bool invalid = invalid_label(p, y);
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
                    st.v[k] = (A)((const LT *)p.state)[n * p.st_sn + k * p.st_sk + s * p.st_ss];
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
                    ((LT *)p.state)[n * p.st_sn + k * p.st_sk + s * p.st_ss] = (LT)st.v[k];
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

/* One block: Σ partials in a fixed order; MEAN divides by the count (0/0 = NaN). */
template <class A, class LT>
__global__ void __launch_bounds__(THREADS) finalize_kernel(ploss_sm2_problem p, Aux<A> aux, int64_t nparts)
{
    double s = 0;
    for (int64_t k = threadIdx.x; k < nparts; k += THREADS)
        s += aux.partial[k];
    s = block_reduce<THREADS>(s, SumOp());
    if (threadIdx.x == 0) {
        if (p.reduction == PLOSS_REDUCTION_MEAN)
            s = s / (double)(p.ohem ? aux.mine->kept : *aux.count);
        *(LT *)p.loss = (LT)s;
    }
}

/* ---- thread-per-sample register kernels (C ≤ REG_CMAX; f32/f16/bf16 with f32 math) ---- */
/* A thread takes V samples s0 … s0+V−1 of one image (V = 2 when the sample axis is
 * contiguous and C ≤ 8, see reg_pairs; else 1) and reads their C ≤ CMAX logits into registers at once: all V·C
 * loads are issued before any arithmetic (launder), as V-element vectors where the
 * addresses allow (x_ss = 1, x_sc a multiple of V, the group's first element aligned to
 * V elements), element by element otherwise (the last group of an image when S is odd,
 * misaligned views).  Then the loss, the state and the gradient come from the registers,
 * and the gradient is written the same way: one read of x, one write of the gradient.
 * exp is __expf (ex2.approx, see cross_entropy.cu for the error argument) except in the
 * OHEM score, which is compared against a threshold and uses the accurate expf. */

constexpr int REG_CMAX = 32; /* largest C of the register kernels */

__device__ __forceinline__ float fex(float v) { return __expf(v); }

/* x_y of a register row without a dynamic register index (y < 0: none, 0). */
template <int CMAX> __device__ __forceinline__ float reg_pick(const float (&v)[CMAX], int y)
{
    float r = 0.f;
#pragma unroll
    for (int j = 0; j < CMAX; ++j)
        if (j == y)
            r = v[j];
    return r;
}

/* OHEM key of a valid sample from its register row: p_y in f32 with IEEE operations only
 * (no contraction can differ between the mining and the loss kernels). */
template <int CMAX> __device__ __forceinline__ uint32_t reg_key(const float (&v)[CMAX], int C, int y)
{
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < CMAX; ++j)
        if (j < C)
            m = fmaxf(m, v[j]);
    float se = 0.f;
#pragma unroll
    for (int j = 0; j < CMAX; ++j)
        if (j < C)
            se = __fadd_rn(se, expf(__fsub_rn(v[j], m)));
    return score_key(__fdiv_rn(expf(__fsub_rn(reg_pick(v, y), m)), se));
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

/* Register forms of the ops: finish() gives the loss, the state and the gradient context
 * GC from a row; from_state() the context from a saved state; grad() ∂ℓ/∂x_j. */
struct RegLargeMargin {
    static constexpr int n_state = 3;
    float half_lam, u;
    /* mN: non-target maximum, c1 = e^(mN − lse), invS = 1/S', Em = E − mN, py = p_y */
    struct GC { float mN, c1, invS, Em, py; };
    template <int CMAX>
    __device__ float finish(const float (&v)[CMAX], int C, int y, float xy, float (&st)[3], GC &g) const
    {
        float mN = -INFINITY;
#pragma unroll
        for (int j = 0; j < CMAX; ++j)
            if (j < C && j != y)
                mN = fmaxf(mN, v[j]);
        float sN = 0.f, tN = 0.f, rel = 0.f;
#pragma unroll
        for (int j = 0; j < CMAX; ++j)
            if (j < C && j != y) {
                const float d = v[j] - mN, e = fex(d);
                sN += e;
                tN = fmaf(e, d, tN);
                rel += d;
            }
        /* separate maxima: a dominant target cannot underflow the non-target sum */
        const float m = fmaxf(xy, mN);
        const float lse = m + logf(fex(xy - m) + fex(mN - m) * sN);
        const float Em = tN / sN;
        st[0] = lse;
        st[1] = mN + logf(sN);
        st[2] = mN + Em;
        g = {mN, fex(mN - lse), 1.f / sN, Em, fex(xy - lse)};
        return lse - xy + half_lam * (Em - rel * u);
    }
    __device__ GC from_state(const float (&st)[3], float xy) const
    {
        return {st[1], fex(st[1] - st[0]), 1.f, st[2] - st[1], fex(xy - st[0])};
    }
    __device__ float grad(float x, bool target, int, const GC &g) const
    {
        if (target)
            return g.py - 1.f;
        const float d = x - g.mN, e = fex(d);
        return fmaf(e, g.c1, half_lam * (e * g.invS * (d - g.Em + 1.f) - u));
    }
};

struct RegTaylor {
    static constexpr int n_state = 1;
    int order;
    struct GC { float invZ, invFy; };
    template <int CMAX>
    __device__ float finish(const float (&v)[CMAX], int C, int, float xy, float (&st)[3], GC &g) const
    {
        float z = 0.f;
#pragma unroll
        for (int j = 0; j < CMAX; ++j)
            if (j < C)
                z += reg_taylor(v[j], order);
        const float fy = reg_taylor(xy, order);
        st[0] = z;
        g = {1.f / z, 1.f / fy};
        return logf(z) - logf(fy);
    }
    __device__ GC from_state(const float (&st)[3], float xy) const
    {
        return {1.f / st[0], 1.f / reg_taylor(xy, order)};
    }
    __device__ float grad(float x, bool target, int, const GC &g) const
    {
        return reg_taylor(x, order - 1) * (g.invZ - (target ? g.invFy : 0.f));
    }
};

/* Cross-entropy (bias NULL) and PC-softmax (bias = log priors). */
struct RegSoftmax {
    static constexpr int n_state = 1;
    const float *bias;
    struct GC { float lse; };
    __device__ float z(float x, int j) const { return bias ? x + __ldg(bias + j) : x; }
    template <int CMAX>
    __device__ float finish(const float (&v)[CMAX], int C, int, float xy, float (&st)[3], GC &g) const
    {
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < CMAX; ++j)
            if (j < C)
                m = fmaxf(m, z(v[j], j));
        float se = 0.f;
#pragma unroll
        for (int j = 0; j < CMAX; ++j)
            if (j < C) {
                const float zj = z(v[j], j);
                if (zj != -INFINITY) /* a zero prior: no contribution */
                    se += fex(zj - m);
            }
        const float lse = m + logf(se);
        st[0] = lse;
        g = {lse};
        return lse - xy;
    }
    __device__ GC from_state(const float (&st)[3], float) const { return {st[0]}; }
    __device__ float grad(float x, bool target, int j, const GC &g) const
    {
        return fex(z(x, j) - g.lse) - (target ? 1.f : 0.f);
    }
};

/* V elements of T read or written as one vector. */
template <class T, int V> struct alignas(sizeof(T) * V) Pack { T e[V]; };

/* The MEAN/SUM gradient multiplier ω (the scale when fused, else the upstream scalar),
 * over the divisor for MEAN (0 when the divisor is 0: the gradient is then exactly 0). */
template <class A> __device__ __forceinline__ float reduced_omega(const ploss_sm2_problem &p, const Aux<A> &aux)
{
    const double up = p.pass == PLOSS_PASS_FUSED ? p.scale
                      : p.reduction == PLOSS_REDUCTION_NONE ? 0.0
                                                            : load_dyn(p.grad_loss, p.gl_dtype, 0);
    if (p.reduction != PLOSS_REDUCTION_MEAN)
        return (float)up;
    const unsigned long long d = p.ohem ? aux.mine->kept : *aux.count;
    return d ? (float)(up / (double)d) : 0.f;
}

/* MINE = false: the loss pass (loss, state, gradient); MINE = true: OHEM mining pass
 * `level` (histogram of the keys' digit, counts at level 0). */
template <class T, int CMAX, int V, class Op, bool MINE>
__global__ void __launch_bounds__(THREADS, 2) reg_kernel(ploss_sm2_problem p, Op op, Aux<float> aux, int level)
{
    __shared__ unsigned int hist[MINE ? HIST0 : 1];
    MineLevel L = {0u, 0u, 0, 0};
    if constexpr (MINE) {
        if (level > 0 && aux.mine->done)
            return; /* uniform: the select of an earlier level found t* */
        L = mine_level(aux.mine, level);
        for (int b = threadIdx.x; b < L.nb; b += THREADS)
            hist[b] = 0;
        __syncthreads();
    }
    const int64_t S = p.S, per = (S + V - 1) / V, groups = p.N * per;
    const int C = (int)p.C;
    const T *x = (const T *)p.x;
    T *gp = (T *)p.grad;
    const bool want_loss = !MINE && p.pass != PLOSS_PASS_BACKWARD;
    const bool want_grad = !MINE && p.pass != PLOSS_PASS_FORWARD;
    const bool use_state = p.pass == PLOSS_PASS_BACKWARD && p.state;
    const bool upstream_each = p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE;
    const uint32_t tkey = !MINE && p.ohem ? aux.mine->tkey : 0u;
    const float omega = want_grad && !upstream_each ? reduced_omega(p, aux) : 0.f;
    const bool small = groups <= (int64_t)UINT32_MAX; /* 32-bit division suffices */
    float acc = 0.f;
    unsigned long long n_le = 0, n_valid = 0;

    for (int64_t q = thread_index(); q < groups; q += grid_stride()) {
        const int64_t n = small ? (int64_t)((uint32_t)q / (uint32_t)per) : q / per;
        const int64_t s0 = (q - n * per) * V;
        const int nv = S - s0 < V ? (int)(S - s0) : V; /* samples of this group */
        int64_t y[V];
#pragma unroll
        for (int e = 0; e < V; ++e)
            y[e] = e < nv ? label_of(p, n, s0 + e) : p.ignore_index;

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
            const int64_t s = s0 + e;
            const bool invalid = invalid_label(p, y[e]);
            const bool valid = y[e] != p.ignore_index && !invalid;
            const int yi = valid ? (int)y[e] : -1;
            const uint32_t key = p.ohem && valid ? reg_key(v[e], C, yi) : PLOSS_OHEM_IGNORED_KEY;
            if constexpr (MINE) {
                if (invalid && level == 0)
                    report_invalid_label(aux.slot, y[e]);
                mine_count(hist, L, key);
                n_le += key <= p.thresh_key;
                n_valid += valid;
            } else {
                if (invalid && !p.ohem)
                    report_invalid_label(aux.slot, y[e]); /* OHEM: reported by the mining */
                /* an invalid label: NaN loss and state, zero gradient (as cross_entropy.cu) */
                const bool keep = p.ohem ? valid && key <= tkey : valid;
                const float fill = invalid ? NAN : 0.f;
                float st[3] = {fill, fill, fill}, loss = fill;
                const float xy = reg_pick(v[e], yi);
                typename Op::GC gc{};
                if (keep) {
                    if (use_state) {
#pragma unroll
                        for (int k = 0; k < Op::n_state; ++k)
                            st[k] = ((const float *)p.state)[n * p.st_sn + k * p.st_sk + s * p.st_ss];
                        gc = op.from_state(st, xy);
                    } else {
                        loss = op.finish(v[e], C, yi, xy, st, gc);
                    }
                }
                if (want_loss) {
                    acc += loss;
                    if (p.reduction == PLOSS_REDUCTION_NONE)
                        ((float *)p.loss)[n * p.l_sn + s * p.l_ss] = loss;
                    if (p.state)
#pragma unroll
                        for (int k = 0; k < Op::n_state; ++k)
                            ((float *)p.state)[n * p.st_sn + k * p.st_sk + s * p.st_ss] = st[k];
                }
                if (want_grad) {
                    const float w = upstream_each ? (float)load_dyn(p.grad_loss, p.gl_dtype, n * p.gl_sn + s * p.gl_ss)
                                                  : omega;
#pragma unroll
                    for (int j = 0; j < CMAX; ++j)
                        v[e][j] = keep && j < C ? w * op.grad(v[e][j], j == yi, j, gc) : 0.f;
                }
            }
            if (V > 1)
#pragma unroll
                for (int j = 0; j < CMAX; ++j)
                    launder(v[e][j]);
        }

        if (want_grad) {
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
    if constexpr (MINE) {
        mine_flush(hist, L, aux.mine, level, n_le, n_valid);
    } else if (want_loss && p.reduction != PLOSS_REDUCTION_NONE) {
        acc = block_reduce<THREADS>(acc, SumOp());
        if (threadIdx.x == 0)
            aux.partial[blockIdx.x] = (double)acc;
    }
}

/* ---- host side ------------------------------------------------------------------------ */

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* Σ of the per-block partials into the loss (MEAN/SUM, not backward). */
template <class A, class LT>
ploss_status run_finalize(ploss_ctx_t *ctx, const ploss_sm2_problem *p, Aux<A> aux, unsigned blocks)
{
    if (p->pass == PLOSS_PASS_BACKWARD || p->reduction == PLOSS_REDUCTION_NONE)
        return PLOSS_OK;
    finalize_kernel<A, LT><<<1, THREADS, 0, stream_of(ctx)>>>(*p, aux, (int64_t)blocks);
    return check_launch("softmax2 finalize_kernel");
}

/* OHEM radix select: level 0 of the histogram (hist(0), counts) is launched by the
 * caller; hist(level) launches the mining pass of a later level.  With n_min = 0 or
 * n_min ≥ M the threshold is known after level 0. */
template <class F> ploss_status run_select(ploss_ctx_t *ctx, const ploss_sm2_problem *p, MineState *ms, F &&hist)
{
    cudaStream_t stream = stream_of(ctx);
    const int64_t M = p->N * p->S;
    ploss_status st = hist(0);
    if (st != PLOSS_OK)
        return st;
    if (p->n_min <= 0 || p->n_min >= M) {
        fixed_threshold_kernel<<<1, 1, 0, stream>>>(ms, p->n_min <= 0 ? p->thresh_key : PLOSS_OHEM_IGNORED_KEY - 1u);
        return check_launch("softmax2 fixed_threshold_kernel");
    }
    for (int level = 0; level < 3 && st == PLOSS_OK; ++level) {
        if (level > 0 && (st = hist(level)))
            break;
        select_kernel<<<1, THREADS, 0, stream>>>(ms, level, p->n_min, p->thresh_key);
        st = check_launch("softmax2 select_kernel");
    }
    return st;
}

/* The register path: mining passes (OHEM) and the loss pass with CMAX ≥ C. */
template <class T, int CMAX, int V, class ROp>
ploss_status run_reg(ploss_ctx_t *ctx, const ploss_sm2_problem *p, const ROp &op, Aux<float> aux, unsigned blocks)
{
    cudaStream_t stream = stream_of(ctx);
    ploss_status st = PLOSS_OK;
    if (p->ohem)
        st = run_select(ctx, p, aux.mine, [&](int level) {
            reg_kernel<T, CMAX, V, RegSoftmax, true><<<blocks, THREADS, 0, stream>>>(*p, RegSoftmax{nullptr}, aux, level);
            return check_launch("softmax2 reg_kernel (mining)");
        });
    if (st != PLOSS_OK)
        return st;
    reg_kernel<T, CMAX, V, ROp, false><<<blocks, THREADS, 0, stream>>>(*p, op, aux, 0);
    if ((st = check_launch("softmax2 reg_kernel")))
        return st;
    return run_finalize<float, float>(ctx, p, aux, blocks);
}

/* Pixel pairs (V = 2) along a contiguous sample axis for C ≤ 8 only: with C > 8 the two
 * rows of a pair exceed the 128 registers of two 256-thread blocks per SM (ptxas spills
 * 68–136 bytes at CMAX = 24/32 in f32), while one sample per thread needs 64–97 registers
 * and no spill; its loads are still coalesced (a warp reads 32 consecutive pixels). */
inline bool reg_pairs(const ploss_sm2_problem *p) { return p->x_ss == 1 && p->S > 1 && p->C <= 8; }

/* CMAX tier (8, 24, 32) and vector width (reg_pairs: 2, else 1). */
template <class T, class ROp>
ploss_status launch_reg(ploss_ctx_t *ctx, const ploss_sm2_problem *p, const ROp &op, Aux<float> aux, unsigned blocks)
{
    const bool pair = reg_pairs(p);
    if (p->C <= 8)
        return pair ? run_reg<T, 8, 2>(ctx, p, op, aux, blocks) : run_reg<T, 8, 1>(ctx, p, op, aux, blocks);
    if (p->C <= 24)
        return run_reg<T, 24, 1>(ctx, p, op, aux, blocks);
    return run_reg<T, REG_CMAX, 1>(ctx, p, op, aux, blocks);
}

/* The row-group path (any C, f64, Taylor with f64 internals). */
template <int G, class T, class Op>
ploss_status run_groups(ploss_ctx_t *ctx, const ploss_sm2_problem *p, const Op &op, Aux<typename Op::acc> aux,
                        unsigned blocks)
{
    using A = typename Op::acc;
    using LT = std::conditional_t<std::is_same<T, double>::value, double, float>;
    cudaStream_t stream = stream_of(ctx);
    ploss_status st = PLOSS_OK;
    if (p->ohem)
        st = run_select(ctx, p, aux.mine, [&](int level) {
            score_kernel<G, T, A><<<blocks, THREADS, 0, stream>>>(*p, aux, level);
            return check_launch("softmax2 score_kernel");
        });
    if (st != PLOSS_OK)
        return st;
    loss_kernel<G, T, Op><<<blocks, THREADS, 0, stream>>>(*p, op, aux);
    if ((st = check_launch("softmax2 loss_kernel")))
        return st;
    return run_finalize<A, LT>(ctx, p, aux, blocks);
}

template <class T, class Op, class ROp>
ploss_status launch(ploss_ctx_t *ctx, const ploss_sm2_problem *p, const Op &op, const ROp &rop)
{
    using A = typename Op::acc;
    const int64_t M = p->N * p->S;
    /* registers: f32 math on f32/f16/bf16 with C ≤ REG_CMAX, a thread per sample */
    constexpr bool reg_ok = !std::is_same<T, double>::value && std::is_same<A, float>::value;
    const bool regs = reg_ok && p->C <= REG_CMAX;
    const int G = regs ? 1 : row_group_size(p->x_sc, p->C);
    const unsigned blocks = regs && reg_pairs(p) ? grid_blocks(p->N * ((p->S + 1) / 2), THREADS)
                                                 : grid_blocks(M, THREADS / G);

    /* workspace: loss partials | count | OHEM state (histograms) | log priors */
    const size_t o_count = align256((size_t)blocks * sizeof(double));
    const size_t o_mine = o_count + 256;
    const size_t o_bias = o_mine + (p->ohem ? align256(sizeof(MineState)) : 0);
    const bool priors = p->w && M > 0; /* no per-class buffer without samples (C may be huge) */
    const size_t bytes = o_bias + (priors ? align256((size_t)p->C * sizeof(A)) : 0);
    void *ws = NULL;
    ploss_status st = ploss_workspace(ctx, bytes, &ws);
    if (st != PLOSS_OK)
        return st;
    char *base = (char *)ws;
    Aux<A> aux = {ctx->error_slot, (double *)base, (unsigned long long *)(base + o_count),
                  p->ohem ? (MineState *)(base + o_mine) : nullptr};
    cudaStream_t stream = stream_of(ctx);
    if ((st = ploss_cuda_memset(base + o_count, 0, o_bias - o_count, stream)))
        return st;

    Op o = op;
    ROp ro = rop;
    if constexpr (std::is_same<Op, SoftmaxOp<A>>::value) {
        if (priors) {
            A *bias = (A *)(base + o_bias);
            log_prior_kernel<A><<<grid_blocks(p->C, THREADS), THREADS, 0, stream>>>(*p, bias);
            if ((st = check_launch("softmax2 log_prior_kernel")))
                return st;
            o.bias = bias;
            if constexpr (std::is_same<A, float>::value)
                ro.bias = bias;
        }
    }
    if (p->ohem) {
        if constexpr (std::is_same<Op, TaylorOp<A>>::value)
            return ploss_error(PLOSS_ERR_UNSUPPORTED, "OHEM runs on cross-entropy or large-margin only");
    } else if (p->reduction == PLOSS_REDUCTION_MEAN) {
        count_kernel<<<grid_blocks(M, THREADS, 4096), THREADS, 0, stream>>>(*p, aux.count);
        if ((st = check_launch("softmax2 count_kernel")))
            return st;
    }
    if constexpr (reg_ok) {
        if (regs)
            return launch_reg<T>(ctx, p, ro, aux, blocks);
    }
    return with_row_group(G, [&](auto g) { return run_groups<decltype(g)::value, T>(ctx, p, o, aux, blocks); });
}

template <class T, class A> ploss_status launch_kind(ploss_ctx_t *ctx, const ploss_sm2_problem *p)
{
    const float hl = (float)(0.5 * p->lam), u = (float)(1.0 / (double)(p->C - 1));
    switch (p->loss_kind) {
    case PLOSS_SM2_LARGE_MARGIN:
        return launch<T>(ctx, p, LargeMarginOp<A>{(A)(0.5 * p->lam), (A)(1.0 / (double)(p->C - 1))},
                         RegLargeMargin{hl, u});
    case PLOSS_SM2_TAYLOR_CE:
        return launch<T>(ctx, p, TaylorOp<A>{p->order}, RegTaylor{p->order});
    default: /* PC_SOFTMAX (priors set in launch) and CROSS_ENTROPY */
        return launch<T>(ctx, p, SoftmaxOp<A>{nullptr}, RegSoftmax{nullptr});
    }
}

} // namespace
} // namespace ploss_cuda

using namespace ploss_cuda;

extern "C" ploss_status ploss_cuda_softmax2(ploss_ctx_t *ctx, const ploss_sm2_problem *p)
{
    return dispatch_float(p->x_dtype, "input", [&](auto xtag) {
        using T = typename decltype(xtag)::type;
        /* Taylor polynomials above order 10 lose digits to cancellation in f32 */
        if constexpr (!std::is_same<T, double>::value)
            if (p->loss_kind == PLOSS_SM2_TAYLOR_CE && p->order > 10)
                return launch<T>(ctx, p, TaylorOp<double>{p->order}, RegTaylor{p->order});
        return launch_kind<T, acc_t<T>>(ctx, p);
    });
}
