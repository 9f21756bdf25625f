/*
 * softmax2.cu — CUDA backend of the softmax family II losses with class-index targets
 * (large-margin softmax, Taylor CE, PC-softmax CE, OHEM CE / large-margin); formulas and
 * the OHEM mining rule in core/softmax2.h, LOSSES.md §2.2–2.7.
 *
 * Kernel shapes (one read of the logits from DRAM, one write of the gradient):
 *  - class-strided rows (x_sc != 1, e.g. N×C×H×W): one thread per sample walks its C
 *    classes with stride x_sc, so a warp reads 32 consecutive pixels per class
 *    (coalesced); with C <= 32 the row is loaded into registers at once (C loads in
 *    flight per thread), else the gradient pass re-reads it from L1/L2.
 *  - class-contiguous rows (x_sc == 1, e.g. N×C): a group of G lanes per sample (a warp,
 *    or the whole 256-thread block for C > 2048) strides over the classes; per-lane
 *    statistics are merged with CUB (fixed order).
 * Per-sample statistics are accumulated online in one pass (running maximum, rescaled
 * sums; initial maximum −∞): large-margin keeps the statistics of the non-target classes
 * only, with their own maximum, and gets the full log-sum-exp from them and x_y, so a
 * dominant target logit cannot underflow the non-target sum.
 *
 * Invalid labels (≠ ignore_index, outside [0, C)) set the context's error slot and give
 * the sample a NaN loss (and state) and a zero gradient, as cross_entropy.cu.
 *
 * Reductions are deterministic: each block writes one partial loss, a single block sums
 * the partials in a fixed order; integer counts (valid samples, OHEM histograms) use
 * integer atomics, whose results do not depend on the order.  Nothing synchronises with
 * the host: the MEAN divisor and the OHEM threshold live in device memory.
 *
 * OHEM threshold without a sort: a score kernel writes each sample's 32-bit key and a
 * histogram of its top 11 bits; then at most two more histogram passes over the keys
 * (11 and 10 bits, restricted to the bucket found so far) and three single-block select
 * kernels find the n_min-th smallest key exactly (radix select).  When at least n_min
 * keys are ≤ key(τ) the threshold is τ and the later passes return at once.
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
template <int G, int CMAX, class Op, class T>
__device__ __forceinline__ typename Op::Stats row_stats(const Op &op, const RowView<G, CMAX, typename Op::acc> &row,
                                                        const T *x, int64_t xo, int64_t sc, int64_t C, int64_t y,
                                                        int lane)
{
    typename Op::Stats a = Op::init();
    row.each(x, xo, sc, C, lane, [&](int64_t j, typename Op::acc xj) { op.push(a, xj, j == y, j); });
    return group_all_reduce<G>(a, MergeOp<Op>());
}

/* ---- OHEM mining state (device memory, zeroed before the score kernel) --------------- */

constexpr int HIST0 = 2048, HIST1 = 2048, HIST2 = 1024;

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
    A *partial;                    /* one loss partial per block */
    unsigned long long *count;     /* MEAN divisor (valid samples), or NULL */
    uint32_t *keys;                /* OHEM keys, or NULL */
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

/* OHEM pass 1: the key of every sample (softmax probability of its label), the histogram
 * of the keys' top 11 bits, the number of keys ≤ key(τ) and of valid samples. */
template <int G, int CMAX, class T, class A>
__global__ void __launch_bounds__(THREADS) score_kernel(ploss_sm2_problem p, Aux<A> aux)
{
    __shared__ unsigned int hist[HIST0];
    for (int b = threadIdx.x; b < HIST0; b += THREADS)
        hist[b] = 0;
    __syncthreads();
    constexpr int R = THREADS / G;
    const int lane = (int)(threadIdx.x % G);
    const int64_t M = p.N * p.S;
    const T *x = (const T *)p.x;
    const SoftmaxOp<A> op{nullptr};
    unsigned long long n_le = 0, n_valid = 0;
    for (int64_t base = (int64_t)blockIdx.x * R; base < M; base += (int64_t)gridDim.x * R) {
        const int64_t i = base + threadIdx.x / G;
        if (i >= M)
            continue; /* uniform over a group */
        const int64_t n = i / p.S, s = i % p.S;
        const int64_t y = label_of(p, n, s);
        const bool invalid = invalid_label(p, y);
        if (invalid && lane == 0)
            report_invalid_label(aux.slot, y);
        const bool valid = y != p.ignore_index && !invalid;
        uint32_t key = PLOSS_OHEM_IGNORED_KEY;
        if (valid) {
            const int64_t xo = n * p.x_sn + s * p.x_ss;
            RowView<G, CMAX, A> row;
            row.load(x, xo, p.x_sc, p.C);
            const auto st = row_stats(op, row, x, xo, p.x_sc, p.C, y, lane);
            const A xy = load_as<A>(x, xo + y * p.x_sc);
            key = score_key((float)exp(xy - (st.m + log(st.s))));
        }
        if (lane == 0) {
            aux.keys[i] = key;
            hist_add(hist, key >> 21);
            n_le += key <= p.thresh_key;
            n_valid += valid;
        }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < HIST0; b += THREADS)
        if (hist[b])
            atomicAdd(&aux.mine->hist[0][b], (unsigned long long)hist[b]);
    n_le = block_reduce<THREADS>(n_le, SumOp());
    n_valid = block_reduce<THREADS>(n_valid, SumOp());
    if (threadIdx.x == 0) {
        if (n_le)
            atomicAdd(&aux.mine->n_le_thresh, n_le);
        if (n_valid)
            atomicAdd(&aux.mine->n_valid, n_valid);
    }
}

/* OHEM passes 2 and 3: histogram of the next digit of the keys inside the bucket. */
__global__ void __launch_bounds__(THREADS) hist_kernel(const uint32_t *keys, int64_t M, MineState *ms, int pass)
{
    if (ms->done)
        return;
    __shared__ unsigned int hist[HIST1];
    const int nb = pass == 1 ? HIST1 : HIST2, shift = pass == 1 ? 10 : 0;
    for (int b = threadIdx.x; b < nb; b += THREADS)
        hist[b] = 0;
    __syncthreads();
    const uint32_t prefix = ms->prefix, mask = ms->mask;
    for (int64_t i = thread_index(); i < M; i += grid_stride()) {
        const uint32_t k = keys[i];
        if ((k & mask) == prefix)
            hist_add(hist, (k >> shift) & (uint32_t)(nb - 1));
    }
    __syncthreads();
    for (int b = threadIdx.x; b < nb; b += THREADS)
        if (hist[b])
            atomicAdd(&ms->hist[pass][b], (unsigned long long)hist[b]);
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
template <int G, int CMAX, class T, class Op>
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
        const bool valid = p.ohem ? aux.keys[i] <= tkey : y != p.ignore_index && !invalid;
        const int64_t xo = n * p.x_sn + s * p.x_ss;
        const A fill = invalid ? (A)NAN : (A)0;
        State<A> st = {{fill, fill, fill}};
        A loss = fill, xy = 0;
        RowView<G, CMAX, A> row;
        if (valid) {
            row.load(x, xo, p.x_sc, C);
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
            aux.partial[blockIdx.x] = acc;
    }
}

/* One block: Σ partials in a fixed order; MEAN divides by the count (0/0 = NaN). */
template <class A, class LT>
__global__ void __launch_bounds__(THREADS) finalize_kernel(ploss_sm2_problem p, Aux<A> aux, int64_t nparts)
{
    A s = 0;
    for (int64_t k = threadIdx.x; k < nparts; k += THREADS)
        s += aux.partial[k];
    s = block_reduce<THREADS>(s, SumOp());
    if (threadIdx.x == 0) {
        if (p.reduction == PLOSS_REDUCTION_MEAN)
            s = s / (A)(p.ohem ? aux.mine->kept : *aux.count);
        *(LT *)p.loss = (LT)s;
    }
}

/* ---- host side ------------------------------------------------------------------------ */

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

template <int G, int CMAX, class T, class Op>
ploss_status run_loss(ploss_ctx_t *ctx, const ploss_sm2_problem *p, const Op &op, Aux<typename Op::acc> aux,
                      unsigned blocks)
{
    using A = typename Op::acc;
    using LT = std::conditional_t<std::is_same<T, double>::value, double, float>;
    cudaStream_t stream = stream_of(ctx);
    loss_kernel<G, CMAX, T, Op><<<blocks, THREADS, 0, stream>>>(*p, op, aux);
    ploss_status st = check_launch("softmax2 loss_kernel");
    if (st == PLOSS_OK && p->pass != PLOSS_PASS_BACKWARD && p->reduction != PLOSS_REDUCTION_NONE) {
        finalize_kernel<A, LT><<<1, THREADS, 0, stream>>>(*p, aux, (int64_t)blocks);
        st = check_launch("softmax2 finalize_kernel");
    }
    return st;
}

/* OHEM mining (score kernel, then the radix select) before the loss pass. */
template <int G, int CMAX, class T, class A>
ploss_status run_mining(ploss_ctx_t *ctx, const ploss_sm2_problem *p, Aux<A> aux, unsigned blocks)
{
    cudaStream_t stream = stream_of(ctx);
    const int64_t M = p->N * p->S;
    score_kernel<G, CMAX, T, A><<<blocks, THREADS, 0, stream>>>(*p, aux);
    ploss_status st = check_launch("softmax2 score_kernel");
    if (st != PLOSS_OK)
        return st;
    if (p->n_min <= 0 || p->n_min >= M) {
        fixed_threshold_kernel<<<1, 1, 0, stream>>>(aux.mine, p->n_min <= 0 ? p->thresh_key
                                                                             : PLOSS_OHEM_IGNORED_KEY - 1u);
        return check_launch("softmax2 fixed_threshold_kernel");
    }
    const unsigned hblocks = grid_blocks((M + 15) / 16, THREADS, 4096);
    for (int pass = 0; pass < 3 && st == PLOSS_OK; ++pass) {
        if (pass > 0) {
            hist_kernel<<<hblocks, THREADS, 0, stream>>>(aux.keys, M, aux.mine, pass);
            if ((st = check_launch("softmax2 hist_kernel")))
                break;
        }
        select_kernel<<<1, THREADS, 0, stream>>>(aux.mine, pass, p->n_min, p->thresh_key);
        st = check_launch("softmax2 select_kernel");
    }
    return st;
}

template <class T, class Op>
ploss_status launch(ploss_ctx_t *ctx, const ploss_sm2_problem *p, const Op &op)
{
    using A = typename Op::acc;
    const int64_t M = p->N * p->S;
    const int G = row_group_size(p->x_sc, p->C);
    const unsigned blocks = grid_blocks(M, THREADS / G);

    /* workspace: loss partials | count | OHEM state | OHEM keys | log priors */
    const size_t o_count = align256((size_t)blocks * sizeof(A));
    const size_t o_mine = o_count + 256;
    const size_t o_keys = o_mine + align256(sizeof(MineState));
    const size_t o_bias = o_keys + (p->ohem ? align256((size_t)M * sizeof(uint32_t)) : 0);
    const bool priors = p->w && M > 0; /* no per-class buffer without samples (C may be huge) */
    const size_t bytes = o_bias + (priors ? align256((size_t)p->C * sizeof(A)) : 0);
    void *ws = NULL;
    ploss_status st = ploss_workspace(ctx, bytes, &ws);
    if (st != PLOSS_OK)
        return st;
    char *base = (char *)ws;
    Aux<A> aux = {ctx->error_slot, (A *)base, (unsigned long long *)(base + o_count),
                  p->ohem ? (uint32_t *)(base + o_keys) : nullptr, p->ohem ? (MineState *)(base + o_mine) : nullptr};
    cudaStream_t stream = stream_of(ctx);
    if ((st = ploss_cuda_memset(base + o_count, 0, o_keys - o_count, stream)))
        return st;

    Op o = op;
    if constexpr (std::is_same<Op, SoftmaxOp<A>>::value) {
        if (priors) {
            A *bias = (A *)(base + o_bias);
            log_prior_kernel<A><<<grid_blocks(p->C, THREADS), THREADS, 0, stream>>>(*p, bias);
            if ((st = check_launch("softmax2 log_prior_kernel")))
                return st;
            o.bias = bias;
        }
    }
    /* one thread per row with C <= ROW_CMAX: the row is held in registers */
    const bool regs = G == 1 && p->C <= ROW_CMAX;
    if (p->ohem) {
        if constexpr (std::is_same<Op, TaylorOp<A>>::value)
            return ploss_error(PLOSS_ERR_UNSUPPORTED, "OHEM runs on cross-entropy or large-margin only");
        else
            st = regs ? run_mining<1, ROW_CMAX, T, A>(ctx, p, aux, blocks)
                      : with_row_group(G, [&](auto g) { return run_mining<decltype(g)::value, 0, T, A>(ctx, p, aux, blocks); });
    } else if (p->reduction == PLOSS_REDUCTION_MEAN) {
        count_kernel<<<grid_blocks(M, THREADS, 4096), THREADS, 0, stream>>>(*p, aux.count);
        st = check_launch("softmax2 count_kernel");
    }
    if (st != PLOSS_OK)
        return st;
    if (regs)
        return run_loss<1, ROW_CMAX, T>(ctx, p, o, aux, blocks);
    return with_row_group(G, [&](auto g) { return run_loss<decltype(g)::value, 0, T>(ctx, p, o, aux, blocks); });
}

template <class T, class A> ploss_status launch_kind(ploss_ctx_t *ctx, const ploss_sm2_problem *p)
{
    switch (p->loss_kind) {
    case PLOSS_SM2_LARGE_MARGIN:
        return launch<T>(ctx, p, LargeMarginOp<A>{(A)(0.5 * p->lam), (A)(1.0 / (double)(p->C - 1))});
    case PLOSS_SM2_TAYLOR_CE:
        return launch<T>(ctx, p, TaylorOp<A>{p->order});
    default: /* PC_SOFTMAX (priors set in launch) and CROSS_ENTROPY */
        return launch<T>(ctx, p, SoftmaxOp<A>{nullptr});
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
                return launch<T>(ctx, p, TaylorOp<double>{p->order});
        return launch_kind<T, acc_t<T>>(ctx, p);
    });
}
