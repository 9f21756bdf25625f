/*
 * cross_entropy.cu — CUDA backend of the softmax cross-entropy family,
 * with exactly the semantics of core/cpu/rows/cross_entropy.c.  Per sample i, with
 * c_ij = w_j·(a·t_ij + b) (t one-hot for class indices):
 *     ℓ_i = Σ_j c_ij·(lse_i − x_ij),      ∂ℓ_i/∂x_ij = ω_i·((Σ_k c_ik)·p_ij − c_ij),
 * accumulated in f32 (f64 for f64 inputs); terms with c_ij = 0 are skipped as on the CPU.
 *
 * Kernels, chosen by choose_kernel():
 *  - ce_rows_reg: class axis contiguous (x_sc = 1: N×C, channels-last N×…×C), class
 *    indices without weights, C > 32.  The row is held in registers as 16-byte vectors
 *    (rows of any alignment: head elements, aligned vectors, tail elements), so the
 *    logits are read once from memory and the gradient written once.  A row goes to a
 *    warp (8 rows per block), a block of 128 or 512 threads, or, on sm_90, a cluster of
 *    2/4/8 blocks of 512 threads exchanging their partials through distributed shared
 *    memory: up to 131072 f32 / 262144 f16-bf16 classes.  Two reductions per row: the max
 *    M, then (Σ_{j≠y} e^(x−M), Σ_{j≠y}(M − x_j), M − x_y), e^(x_y−M) added after the
 *    reduction; the loss is Σc·log Σe + b·Σ_{j≠y}(M − x_j) + (a + b)·(M − x_y): every term
 *    ≥ 0, so logits of ±1e4 do not cancel.  f32 keeps e^(x−M) in place of x; f16/bf16
 *    recompute it (f64 never comes here).  With p.focal it computes the softmax focal loss
 *    instead (kernels/rows/softmax_focal.cu).
 *  - ce_rows_2pass: x_sc = 1 rows that do not fit (or weights, probabilities, no
 *    clusters): a block per row, an online (running max, Σ e, Σ c) pass, then a pass that
 *    re-reads the row (mostly from L2) for the loss terms c·(lse − x) and the gradient.
 *  - ce_samples<CMAX>: class axis strided (N×C×S with x_ss = 1, or small C anywhere): a
 *    thread per sample walks C with stride x_sc so that warps read coalesced; class
 *    indices with C ≤ CMAX (8, 24, 64) are held in registers (one read), CMAX = 0 is the
 *    generic two-pass walk (any strides, probabilities).  f64 always takes the generic
 *    kernels (it is a checking dtype).
 * Reductions: each block (cluster) writes partial sums (double) to the context's
 * workspace; ce_finalize adds them in a fixed order with one block, so the loss is bitwise
 * reproducible and no float atomics are used.  The MEAN divisor Σ w_y (class indices) is
 * summed the same way: by the main kernel for the forward loss, or by a label pass
 * (ce_divisor_partials + ce_sum_partials) before the main kernel when the gradient needs
 * it (backward / fused with 'mean').  No host synchronisation; no allocation except the
 * workspace.  Invalid labels (≠ ignore_index, outside [0, C)) set ctx->error_slot and give
 * a NaN loss (and lse) for the sample and a zero gradient row; an out-of-range label is
 * never used as an index.
 */
#include <cooperative_groups.h>
#include <math_constants.h>

#include "rows.h"
#include "common.cuh"

using namespace ploss_cuda;
namespace cg = cooperative_groups;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CE_DEVICE_CLUSTERS 1
#else
#define CE_DEVICE_CLUSTERS 0
#endif

namespace {

/* ------------------------------------------------------------------------------------ */
/* Per-sample helpers shared by every kernel                                            */
/* ------------------------------------------------------------------------------------ */

enum { kValid = 0, kIgnored = 1, kInvalid = 2 };

struct Aux {
    double *part_loss;     /* one partial loss sum per block (reduced loss wanted), or null */
    double *part_w;        /* one partial Σ w_y per block (forward 'mean', class indices), or null */
    const double *divisor; /* 'mean' divisor on the device (label pass), or null */
    double divisor_value;  /* 'mean' divisor when `divisor` is null (N·S for probabilities) */
    const void *wts;       /* class weights converted to the accumulation type, or null */
    int64_t *error_slot;
};

/* f32: exp through ex2.approx (MUFU): relative error ≈ 2^-22 + |v|·2^-24, results below
 * 2^-126 flush to 0 — far inside the f32 tolerances, and it keeps the 16-bit row kernels
 * off the instruction roofline.  f64: the correctly rounded-ish libdevice exp. */
__device__ __forceinline__ float ex(float v) { return __expf(v); }
__device__ __forceinline__ double ex(double v) { return exp(v); }
__device__ __forceinline__ float lg(float v) { return logf(v); }
__device__ __forceinline__ double lg(double v) { return log(v); }
__device__ __forceinline__ float mx(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double mx(double a, double b) { return fmax(a, b); }
template <class A> __device__ __forceinline__ A neg_inf();
template <> __device__ __forceinline__ float neg_inf<float>() { return -CUDART_INF_F; }
template <> __device__ __forceinline__ double neg_inf<double>() { return -CUDART_INF; }
template <class A> __device__ __forceinline__ A qnan();
template <> __device__ __forceinline__ float qnan<float>() { return CUDART_NAN_F; }
template <> __device__ __forceinline__ double qnan<double>() { return CUDART_NAN; }

/* e^(m_old − m_new) with e^(−∞ − (−∞)) taken as 1 (an empty partial stays empty). */
template <class A> __device__ __forceinline__ A rescale(A m_old, A m_new)
{
    return m_old == m_new ? A(1) : ex(m_old - m_new);
}

__device__ __forceinline__ int64_t load_label(const ploss_ce_problem &p, int64_t n, int64_t s)
{
    const int64_t off = n * p.t_sn + s * p.t_ss;
    return p.t_dtype == PLOSS_I32 ? (int64_t)((const int32_t *)p.t)[off] : ((const int64_t *)p.t)[off];
}

__device__ __forceinline__ int label_status(const ploss_ce_problem &p, int64_t y)
{
    if (y == p.ignore_index)
        return kIgnored;
    return y < 0 || y >= p.C ? kInvalid : kValid;
}

/* Coefficients c_j = w_j·(b + a·[j = y]) (class indices) or w_j·(a·t_j + b)
 * (probabilities); w: the class weights converted to A in the workspace, or null. */
template <class A> struct Coef {
    A a, b, ab;
    const A *w;
    __device__ __forceinline__ Coef(const ploss_ce_problem &p, const Aux &aux)
        : a((A)p.a), b((A)p.b), ab((A)(p.a + p.b)), w((const A *)aux.wts) {}
    /* class indices without weights */
    template <class I> __device__ __forceinline__ A plain(I j, I y) const { return j == y ? ab : b; }
    template <class I> __device__ __forceinline__ A index(I j, I y) const
    {
        const A c = j == y ? ab : b;
        return w ? w[j] * c : c;
    }
    __device__ __forceinline__ A prob(const ploss_ce_problem &p, int64_t j, int64_t toff) const
    {
        const A c = a * load_float_dyn<A>(p.t, p.t_dtype, toff + j * p.t_sc) + b;
        return w ? w[j] * c : c;
    }
    __device__ __forceinline__ A any(const ploss_ce_problem &p, int64_t j, int64_t y, int64_t toff) const
    {
        return p.target_kind == PLOSS_TARGET_PROB ? prob(p, j, toff) : index(j, y);
    }
};

/* ω_i: the factor of the per-sample gradient (CPU: omega / w_i). */
template <class A>
__device__ __forceinline__ A omega_of(const ploss_ce_problem &p, const Aux &aux, int64_t n, int64_t s)
{
    if (p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE)
        return (A)load_dyn(p.grad_loss, p.gl_dtype, n * p.gl_sn + s * p.gl_ss);
    const double up = p.pass == PLOSS_PASS_FUSED ? p.scale : load_dyn(p.grad_loss, p.gl_dtype, 0);
    if (p.reduction != PLOSS_REDUCTION_MEAN)
        return (A)up;
    const double d = aux.divisor ? *aux.divisor : aux.divisor_value;
    return d != 0.0 ? (A)(up / d) : A(0);
}

/* Loss / lse outputs of an ignored (0) or invalid (NaN, error slot) sample. */
template <class A>
__device__ __forceinline__ void finish_skipped(const ploss_ce_problem &p, const Aux &aux, int64_t n, int64_t s,
                                               int st, int64_t y, double &acc_loss)
{
    if (st == kInvalid)
        report_invalid_label(aux.error_slot, y);
    if (p.pass == PLOSS_PASS_BACKWARD)
        return;
    const A v = st == kInvalid ? qnan<A>() : A(0);
    if (p.reduction == PLOSS_REDUCTION_NONE)
        ((A *)p.loss)[n * p.l_sn + s * p.l_ss] = v;
    else
        acc_loss += (double)v;
    if (p.lse)
        store_state(p.lse, p.lse_dtype, n * p.lse_sn + s * p.lse_ss, (double)v);
}

/* Loss / lse outputs of a valid sample; acc_w collects Σ w_y for the forward 'mean'. */
template <class A>
__device__ __forceinline__ void finish_valid(const ploss_ce_problem &p, int64_t n, int64_t s, int64_t y, A lse,
                                             A loss, double &acc_loss, double &acc_w)
{
    if (p.reduction == PLOSS_REDUCTION_NONE)
        ((A *)p.loss)[n * p.l_sn + s * p.l_ss] = loss;
    else
        acc_loss += (double)loss;
    if (p.lse)
        store_state(p.lse, p.lse_dtype, n * p.lse_sn + s * p.lse_ss, (double)lse);
    if (p.target_kind == PLOSS_TARGET_INDEX)
        acc_w += p.w ? load_dyn(p.w, p.w_dtype, y * p.w_s) : 1.0;
}

template <class A> struct Tri {
    A se, cs, cd; /* three sums reduced together (see the kernels for their meaning) */
};
struct TriSum {
    template <class A> __device__ __forceinline__ Tri<A> operator()(const Tri<A> &u, const Tri<A> &v) const
    {
        return Tri<A>{u.se + v.se, u.cs + v.cs, u.cd + v.cd};
    }
};

/* online softmax statistics: running max m, Σ e^(x−m), Σ c */
template <class A> struct Online {
    A m, se, cs;
};
struct OnlineMerge {
    template <class A> __device__ __forceinline__ Online<A> operator()(const Online<A> &u, const Online<A> &v) const
    {
        const A m = mx(u.m, v.m);
        return Online<A>{m, u.se * rescale(u.m, m) + v.se * rescale(v.m, m), u.cs + v.cs};
    }
};

/* Element offset of a row start modulo the vector width (rows are split at 16 B). */
template <class T> __device__ __forceinline__ int misalign(const T *ptr)
{
    return (int)(((uintptr_t)ptr / sizeof(T)) & (uintptr_t)(vec16<T>::N - 1));
}

/* ------------------------------------------------------------------------------------ */
/* Row reductions: a warp, a block, or a cluster of blocks per row                       */
/* ------------------------------------------------------------------------------------ */

/* All-reduce of v over the threads of one row.  LANES < THREADS: the row is a warp;
 * CLUSTER > 1: the row spans the blocks of a cluster, whose partials are exchanged
 * through `slot` (distributed shared memory) and merged in rank order by every block.
 * The caller must cluster-sync before `slot` is written again. */
template <int LANES, int THREADS, int CLUSTER, class V, class Op>
__device__ __forceinline__ V row_all_reduce(V v, Op op, V *slot)
{
    if constexpr (LANES < THREADS) {
        (void)slot;
        return warp_all_reduce<LANES>(v, op);
    } else if constexpr (CLUSTER == 1) {
        (void)slot;
        return block_all_reduce<THREADS>(v, op);
    } else {
#if CE_DEVICE_CLUSTERS
        /* block partial → own slot; after the cluster barrier, lanes 0..CLUSTER−1 of each
         * block read one rank's slot each and merge them with a fixed shuffle tree (the
         * same in every block), broadcast through shared memory */
        using WR = cub::WarpReduce<V, CLUSTER>;
        __shared__ typename WR::TempStorage wtmp;
        __shared__ V result;
        cg::cluster_group cluster = cg::this_cluster();
        const V r = block_reduce<THREADS>(v, op);
        if (threadIdx.x == 0)
            *slot = r;
        cluster.sync();
        if (threadIdx.x < CLUSTER) {
            const V mine = *cluster.map_shared_rank(slot, threadIdx.x);
            const V all = WR(wtmp).Reduce(mine, op);
            if (threadIdx.x == 0)
                result = all;
        }
        __syncthreads();
        return result; /* rewritten only after the next cluster barrier */
#else
        (void)op;
        (void)slot;
        __trap(); /* never launched: the host checks that the kernel was built for sm_90 */
        return v;
#endif
    }
}

template <int CLUSTER> __device__ __forceinline__ void cluster_barrier()
{
#if CE_DEVICE_CLUSTERS
    if constexpr (CLUSTER > 1)
        cg::this_cluster().sync();
#endif
}

template <int CLUSTER> __device__ __forceinline__ int cluster_rank()
{
#if CE_DEVICE_CLUSTERS
    if constexpr (CLUSTER > 1)
        return (int)cg::this_cluster().block_rank();
#endif
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* ce_rows_reg: the row in registers                                                    */
/* ------------------------------------------------------------------------------------ */

/* Rows of C contiguous classes (x_sc = 1), class-index targets without weights.  Each row
 * is handled by LANES·CLUSTER threads (LANES = 32: a warp per row, THREADS/32 rows per
 * block; LANES = THREADS: a block, or a cluster of CLUSTER blocks, per row).  The row is
 * split into a head (the < VEC elements before the first 16-byte boundary), nfull aligned
 * 16-byte vectors and a tail (< VEC elements); thread gi holds vectors gi, gi + GT, … in
 * raw[NV] (uint4) and head/tail element gi in a scalar.  The row must fit: nfull ≤ NV·GT
 * (C ≤ 2^18 here, so element indices are 32-bit).  One loss partial per block (cluster). */
template <class T, int NV, int LANES, int THREADS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, (THREADS >= 1024 ? 1 : 1024 / THREADS))
    ce_rows_reg(const ploss_ce_problem p, const Aux aux, const int64_t rows)
{
    using A = acc_t<T>;
    using V = vec16<T>;
    constexpr int VEC = V::N;
    constexpr int RPC = THREADS / LANES;            /* rows per block at a time */
    constexpr int GT = LANES * CLUSTER;             /* threads per row */
    constexpr bool kKeepE = sizeof(T) == sizeof(A); /* e^(x−M) replaces x in place */
    static_assert(LANES == 32 || LANES == THREADS, "a row is a warp or a whole block");
    static_assert(CLUSTER == 1 || LANES == THREADS, "clusters of whole blocks only");
    static_assert(sizeof(A) == sizeof(float), "f32 accumulation only (f64 takes the generic kernels)");

    __shared__ A slot_m;
    __shared__ Tri<A> slot_t;
    __shared__ double s_loss[RPC], s_w[RPC]; /* per-row-group sums, kept out of registers */

    const int rank = cluster_rank<CLUSTER>();
    const int lane = (int)threadIdx.x % LANES, group = (int)threadIdx.x / LANES;
    const int gi = rank * LANES + lane; /* thread index within the row */
    const int64_t cta = blockIdx.x / CLUSTER, ncta = gridDim.x / CLUSTER;
    const bool want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD;
    const bool saved = p.pass == PLOSS_PASS_BACKWARD && p.lse != nullptr;
    const int C = (int)p.C;
    const Coef<A> coef(p, aux);
    const A csum = (A)((double)(C - 1) * p.b + (p.a + p.b)); /* Σ_j c_j (CPU: summed in f64) */
    if (gi == 0) {
        s_loss[group] = 0.0;
        s_w[group] = 0.0;
    }

    for (int64_t row = cta * RPC + group; row < rows; row += ncta * RPC) {
        const int64_t n = p.S == 1 ? row : row / p.S, s = row - n * p.S;
        const int64_t y = load_label(p, n, s);
        const T *xr = (const T *)p.x + n * p.x_sn + s * p.x_ss;
        const int off = misalign(xr);
        const int hc = min((VEC - off) & (VEC - 1), C); /* head elements */
        const int nfull = (C - hc) / VEC;              /* aligned vectors */
        const int jt = hc + nfull * VEC;               /* first tail element */
        const bool hv = gi < hc, tv = gi < C - jt;     /* this thread holds a head / tail element */

        /* the row is read together with its label (in bounds whatever the label says); the
         * values of an ignored or invalid row are never used */
        uint4 raw[NV];
        const uint4 *xv = reinterpret_cast<const uint4 *>(xr + hc);
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            const int q = k * GT + gi;
            raw[k] = q < nfull ? xv[q] : make_uint4(0u, 0u, 0u, 0u);
        }
        A xh = hv ? (A)to_acc(xr[gi]) : A(0);
        A xt = tv ? (A)to_acc(xr[jt + gi]) : A(0);
        const int st = label_status(p, y);

        if (st != kValid) {
            if (gi == 0)
                finish_skipped<A>(p, aux, n, s, st, y, s_loss[group]);
            if (want_grad) {
                T *gr = (T *)p.grad + n * p.g_sn + s * p.g_ss;
                const int64_t gsc = p.g_sc;
                const bool gvec = gsc == 1 && misalign(gr) == off;
                const T z = convert<T>(0.0f);
#pragma unroll
                for (int k = 0; k < NV; ++k) {
                    const int q = k * GT + gi;
                    if (q < nfull) {
                        if (gvec)
                            reinterpret_cast<uint4 *>(gr + hc)[q] = make_uint4(0u, 0u, 0u, 0u);
                        else
                            for (int e = 0; e < VEC; ++e)
                                gr[(int64_t)(hc + q * VEC + e) * gsc] = z;
                    }
                }
                if (hv)
                    gr[(int64_t)gi * gsc] = z;
                if (tv)
                    gr[(int64_t)(jt + gi) * gsc] = z;
            }
            continue;
        }
        const int yi = (int)y;

        A M;
        if (saved) {
            M = (A)load_state(p.lse, p.lse_dtype, n * p.lse_sn + s * p.lse_ss); /* then e = p directly */
        } else {
            A m = neg_inf<A>();
#pragma unroll
            for (int k = 0; k < NV; ++k)
                if (k * GT + gi < nfull)
#pragma unroll
                    for (int e = 0; e < VEC; ++e)
                        m = mx(m, V::get(raw[k], e));
            if (hv)
                m = mx(m, xh);
            if (tv)
                m = mx(m, xt);
            M = row_all_reduce<LANES, THREADS, CLUSTER>(m, MaxOp{}, &slot_m);
        }

        /* c_j = b for j ≠ y and a + b for j = y: per element only Σ e^(x−M) and Σ (M − x)
         * over j ≠ y; the label's d_y = M − x_y is kept apart by the thread holding it (the
         * vector that contains y takes the slow loop), and every thread forms e_y = e^(−d_y)
         * after the reduction, so Σ_{j≠y} e = 1 − p_y stays exact to rounding (focal). */
        Tri<A> t{A(0), A(0), A(0)}; /* {Σ_{j≠y} e, Σ_{j≠y} d, d_y} */
        auto take = [&](A x, int j) {
            const A d = M - x;
            const A ev = ex(-d);
            if (j == yi) {
                t.cd += d;
            } else {
                t.se += ev;
                t.cs += d;
            }
            return ev;
        };
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            launder(raw[k]);
            const int q = k * GT + gi;
            if (q < nfull) {
                const int jb = hc + q * VEC;
                if ((unsigned)(yi - jb) < (unsigned)VEC) {
#pragma unroll
                    for (int e = 0; e < VEC; ++e) {
                        const A ev = take(V::get(raw[k], e), jb + e);
                        if constexpr (kKeepE)
                            V::set(raw[k], e, ev);
                    }
                } else {
#pragma unroll
                    for (int e = 0; e < VEC; ++e) {
                        const A d = M - V::get(raw[k], e);
                        const A ev = ex(-d);
                        t.se += ev;
                        t.cs += d;
                        if constexpr (kKeepE)
                            V::set(raw[k], e, ev);
                    }
                }
            }
        }
        if (hv)
            xh = take(xh, gi);
        if (tv)
            xt = take(xt, jt + gi);
        const Tri<A> R = row_all_reduce<LANES, THREADS, CLUSTER>(t, TriSum{}, &slot_t);
        const A ey = ex(-R.cd); /* e^(x_y − M), bitwise the value the label's thread holds */
        const A SE = saved ? A(1) : R.se + ey;
        const A logSE = lg(SE);
        /* focal: u = 1 − p_y, L = −log p_y (log1p when y holds the max: no cancellation),
         * loss α·u^γ·L (α = 1 here), gradient G·(p_j − [j = y]) */
        A focal_G = A(0), u = A(0);
        if (p.focal) {
            const A SEf = R.se + ey; /* ≈ 1 with a saved lse (e = p) */
            u = R.se / SEf;
            const A L = saved ? R.cd : R.cd == A(0) ? log1pf(R.se) : R.cd + logSE;
            const A gamma = (A)p.focal_gamma;
            const A ug = gamma == A(0) ? A(1) : gamma == A(2) ? u * u : powf(u, gamma);
            focal_G = gamma == A(0) ? A(1) : ug * (A(1) + gamma * (ey / SEf) * (u > A(0) ? L / u : A(1)));
            if (want_loss && gi == 0)
                finish_valid<A>(p, n, s, y, M + logSE, ug * L, s_loss[group], s_w[group]);
        } else if (want_loss && gi == 0) {
            /* Σ_{c≠0} c·(lse − x) = Σc·log Σe + b·Σ_{j≠y}(M − x_j) + (a + b)·(M − x_y) */
            A cd = A(0);
            if (coef.b != A(0))
                cd += coef.b * R.cs;
            if (coef.ab != A(0))
                cd += coef.ab * R.cd;
            const A loss = (csum != A(0) ? csum * logSE : A(0)) + cd;
            finish_valid<A>(p, n, s, y, M + logSE, loss, s_loss[group], s_w[group]);
        }
        if (want_grad) {
            T *gr = (T *)p.grad + n * p.g_sn + s * p.g_ss;
            const int64_t gsc = p.g_sc;
            const bool gvec = gsc == 1 && misalign(gr) == off;
            const A om = omega_of<A>(p, aux, n, s);
            /* CE: g_j = k1·e_j − ω·c_j with k1 = ω·Σc/Σe; focal: k1 = ω·G/Σe, c_j = 0 for
             * j ≠ y and g_y = −ω·G·u directly (p_y − 1 would cancel) */
            const A k1 = p.focal ? om * (focal_G / SE) : om * (csum / SE);
            const A k0 = p.focal ? A(0) : om * coef.b;
            const A gy = p.focal ? -om * focal_G * u : k1 * ey - om * coef.ab;
            auto grad = [&](A ev, int j) { return j == yi ? gy : k1 * ev - k0; };
            uint4 *gv = reinterpret_cast<uint4 *>(gr + hc);
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                launder(raw[k]);
                const int q = k * GT + gi;
                if (q < nfull) {
                    const int jb = hc + q * VEC;
                    uint4 o = make_uint4(0u, 0u, 0u, 0u);
                    auto e_of = [&](int e) {
                        if constexpr (kKeepE)
                            return V::get(raw[k], e);
                        else
                            return ex(V::get(raw[k], e) - M);
                    };
                    if ((unsigned)(yi - jb) < (unsigned)VEC) { /* the vector holding the label */
#pragma unroll
                        for (int e = 0; e < VEC; ++e)
                            V::set(o, e, grad(e_of(e), jb + e));
                    } else {
#pragma unroll
                        for (int e = 0; e < VEC; ++e)
                            V::set(o, e, k1 * e_of(e) - k0);
                    }
                    if (gvec) {
                        gv[q] = o;
                    } else {
#pragma unroll
                        for (int e = 0; e < VEC; ++e)
                            gr[(int64_t)(jb + e) * gsc] = convert<T>(V::get(o, e));
                    }
                }
            }
            if (hv)
                gr[(int64_t)gi * gsc] = convert<T>(grad(xh, gi));
            if (tv)
                gr[(int64_t)(jt + gi) * gsc] = convert<T>(grad(xt, jt + gi));
        }
        cluster_barrier<CLUSTER>(); /* the slots may be written again / the block may exit */
    }

    if (aux.part_loss) {
        if constexpr (RPC == 1) {
            if (threadIdx.x == 0 && rank == 0) {
                aux.part_loss[cta] = s_loss[0];
                if (aux.part_w)
                    aux.part_w[cta] = s_w[0];
            }
        } else {
            __syncthreads();
            if (threadIdx.x == 0) {
                double a = 0.0, b = 0.0;
                for (int g = 0; g < RPC; ++g) {
                    a += s_loss[g];
                    b += s_w[g];
                }
                aux.part_loss[cta] = a;
                if (aux.part_w)
                    aux.part_w[cta] = b;
            }
        }
    }
}

/* ------------------------------------------------------------------------------------ */
/* ce_rows_2pass: a block per row, online pass + gradient pass (rows of any length)      */
/* ------------------------------------------------------------------------------------ */

/* Rows of any length (x_sc = 1), any target kind: a block per row; head / aligned
 * 16-byte vectors / tail as in ce_rows_reg, U vectors in flight per thread. */
template <class T, int THREADS>
__global__ void __launch_bounds__(THREADS, 2048 / THREADS / 2)
    ce_rows_2pass(const ploss_ce_problem p, const Aux aux, const int64_t rows)
{
    using A = acc_t<T>;
    using V = vec16<T>;
    constexpr int VEC = V::N;
    constexpr int U = 4; /* vectors in flight per thread */
    const bool want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD;
    const bool saved = p.pass == PLOSS_PASS_BACKWARD && p.lse != nullptr;
    const int64_t C = p.C, gsc = p.g_sc;
    const int tid = (int)threadIdx.x;
    const Coef<A> coef(p, aux);
    double acc_loss = 0.0, acc_w = 0.0;

    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const int64_t n = p.S == 1 ? row : row / p.S, s = row - n * p.S;
        int64_t y = 0;
        int st = kValid;
        if (p.target_kind == PLOSS_TARGET_INDEX) {
            y = load_label(p, n, s);
            st = label_status(p, y);
        }
        const T *xr = (const T *)p.x + n * p.x_sn + s * p.x_ss;
        T *gr = want_grad ? (T *)p.grad + n * p.g_sn + s * p.g_ss : nullptr;
        const int64_t toff = n * p.t_sn + s * p.t_ss;
        const int off = misalign(xr);
        const int64_t hc = min((int64_t)((VEC - off) & (VEC - 1)), C);
        const int64_t nfull = (C - hc) / VEC, jt = hc + nfull * VEC;
        const bool hv = tid < hc, tv = tid < C - jt;
        const bool gvec = want_grad && gsc == 1 && misalign(gr) == off;
        const uint4 *xv = reinterpret_cast<const uint4 *>(xr + hc);
        uint4 *gv = want_grad ? reinterpret_cast<uint4 *>(gr + hc) : nullptr;

        if (st != kValid) {
            if (tid == 0)
                finish_skipped<A>(p, aux, n, s, st, y, acc_loss);
            if (want_grad) {
                const T z = convert<T>(0.0f);
                for (int64_t q = tid; q < nfull; q += THREADS)
#pragma unroll
                    for (int e = 0; e < VEC; ++e)
                        gr[(hc + q * VEC + e) * gsc] = z;
                if (hv)
                    gr[tid * gsc] = z;
                if (tv)
                    gr[(jt + tid) * gsc] = z;
            }
            continue;
        }

        /* pass 1: running max, Σ e^(x − max), Σ c; one rescale per vector */
        Online<A> o{neg_inf<A>(), A(0), A(0)};
        for (int64_t q0 = tid; q0 < nfull; q0 += (int64_t)U * THREADS) {
            uint4 raw[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int64_t q = q0 + (int64_t)u * THREADS;
                raw[u] = q < nfull ? xv[q] : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int64_t q = q0 + (int64_t)u * THREADS;
                if (q < nfull) {
                    A vm = neg_inf<A>();
#pragma unroll
                    for (int e = 0; e < VEC; ++e)
                        vm = mx(vm, V::get(raw[u], e));
                    const A m = mx(o.m, vm);
                    o.se *= rescale(o.m, m);
                    o.m = m;
#pragma unroll
                    for (int e = 0; e < VEC; ++e) {
                        o.se += ex(V::get(raw[u], e) - m);
                        o.cs += coef.any(p, hc + q * VEC + e, y, toff);
                    }
                }
            }
        }
        auto online1 = [&](A x, int64_t j) {
            const A m = mx(o.m, x);
            o.se = o.se * rescale(o.m, m) + ex(x - m);
            o.m = m;
            o.cs += coef.any(p, j, y, toff);
        };
        if (hv)
            online1((A)to_acc(xr[tid]), tid);
        if (tv)
            online1((A)to_acc(xr[jt + tid]), jt + tid);
        const Online<A> R = block_all_reduce<THREADS>(o, OnlineMerge{});
        const A lse = saved ? (A)load_state(p.lse, p.lse_dtype, n * p.lse_sn + s * p.lse_ss) : R.m + lg(R.se);
        const A om = want_grad ? omega_of<A>(p, aux, n, s) : A(0);

        /* pass 2: loss terms c·(lse − x) and the gradient ω·(Σc·p − c) */
        A lsum = A(0);
        auto second = [&](A x, int64_t j) {
            const A c = coef.any(p, j, y, toff);
            if (want_loss && c != A(0))
                lsum += c * (lse - x);
            return want_grad ? om * (R.cs * ex(x - lse) - c) : A(0);
        };
        for (int64_t q0 = tid; q0 < nfull; q0 += (int64_t)U * THREADS) {
            uint4 raw[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int64_t q = q0 + (int64_t)u * THREADS;
                raw[u] = q < nfull ? xv[q] : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int64_t q = q0 + (int64_t)u * THREADS;
                if (q < nfull) {
                    uint4 g;
#pragma unroll
                    for (int e = 0; e < VEC; ++e)
                        V::set(g, e, second(V::get(raw[u], e), hc + q * VEC + e));
                    if (want_grad) {
                        if (gvec) {
                            gv[q] = g;
                        } else {
#pragma unroll
                            for (int e = 0; e < VEC; ++e)
                                gr[(hc + q * VEC + e) * gsc] = convert<T>(V::get(g, e));
                        }
                    }
                }
            }
        }
        if (hv) {
            const A g = second((A)to_acc(xr[tid]), tid);
            if (want_grad)
                gr[tid * gsc] = convert<T>(g);
        }
        if (tv) {
            const A g = second((A)to_acc(xr[jt + tid]), jt + tid);
            if (want_grad)
                gr[(jt + tid) * gsc] = convert<T>(g);
        }
        if (want_loss) {
            const A loss = block_reduce<THREADS>(lsum, SumOp{});
            if (tid == 0)
                finish_valid<A>(p, n, s, y, lse, loss, acc_loss, acc_w);
        }
    }
    if (aux.part_loss && tid == 0) {
        aux.part_loss[blockIdx.x] = acc_loss;
        if (aux.part_w)
            aux.part_w[blockIdx.x] = acc_w;
    }
}

/* ------------------------------------------------------------------------------------ */
/* ce_samples: a thread per sample (class axis strided, or small C)                      */
/* ------------------------------------------------------------------------------------ */

constexpr int kSampleThreads = 256;

/* CMAX > 0 (class indices only; W: with class weights): the C ≤ CMAX logits of the sample
 * are held in registers (one read, one write); CMAX = 0: any C and target kind, an online
 * pass then a loss/gradient pass (two reads). */
template <class T, int CMAX, bool W>
__global__ void __launch_bounds__(kSampleThreads, CMAX == 0 || CMAX > 24 ? 2 : CMAX > 8 ? 3 : 4)
    ce_samples(const ploss_ce_problem p, const Aux aux, const int64_t count)
{
    using A = acc_t<T>;
    const bool want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD;
    const bool saved = p.pass == PLOSS_PASS_BACKWARD && p.lse != nullptr;
    const int64_t C = p.C;
    const Coef<A> coef(p, aux);
    double acc_loss = 0.0, acc_w = 0.0;

    for (int64_t i = thread_index(); i < count; i += grid_stride()) {
        const int64_t n = p.S == 1 ? i : i / p.S, s = i - n * p.S;
        int64_t y = 0;
        int st = kValid;
        if (p.target_kind == PLOSS_TARGET_INDEX) {
            y = load_label(p, n, s);
            st = label_status(p, y);
        }
        const T *xr = (const T *)p.x + n * p.x_sn + s * p.x_ss;
        T *gr = want_grad ? (T *)p.grad + n * p.g_sn + s * p.g_ss : nullptr;
        const int64_t toff = n * p.t_sn + s * p.t_ss;
        const int64_t xsc = p.x_sc, gsc = p.g_sc;

        /* CMAX > 0: the logits are read together with the label (in bounds whatever the
         * label says); the values of an ignored or invalid sample are never used */
        A v[CMAX > 0 ? CMAX : 1];
        if constexpr (CMAX > 0) {
            const T *xp = xr;
#pragma unroll
            for (int j = 0; j < CMAX; ++j) {
                v[j] = j < C ? (A)to_acc(*xp) : A(0);
                xp += xsc;
            }
#pragma unroll
            for (int j = 0; j < CMAX; ++j)
                launder(v[j]);
        }

        if (st != kValid) {
            finish_skipped<A>(p, aux, n, s, st, y, acc_loss);
            if (want_grad)
                for (int64_t j = 0; j < C; ++j)
                    gr[j * gsc] = convert<T>(0.0f);
            continue;
        }

        if constexpr (CMAX > 0) {
            const int Ci = (int)C, yi = (int)y;
            A M;
            if (saved) {
                M = (A)load_state(p.lse, p.lse_dtype, n * p.lse_sn + s * p.lse_ss);
            } else {
                M = neg_inf<A>();
#pragma unroll
                for (int j = 0; j < CMAX; ++j)
                    if (j < Ci)
                        M = mx(M, v[j]);
            }
            A se = A(0), cs = A(0), cd = A(0);
#pragma unroll
            for (int j = 0; j < CMAX; ++j)
                if (j < Ci) {
                    const A d = M - v[j];
                    const A ev = ex(-d);
                    const A c = W ? coef.index(j, yi) : coef.plain(j, yi);
                    se += ev;
                    cs += c;
                    if (c != A(0))
                        cd += c * d;
                    v[j] = ev;
                }
            if (saved)
                se = A(1);
            const A logSE = lg(se);
            if (want_loss)
                finish_valid<A>(p, n, s, y, M + logSE, (cs != A(0) ? cs * logSE : A(0)) + cd, acc_loss, acc_w);
            if (want_grad) {
                const A om = omega_of<A>(p, aux, n, s);
                const A inv = A(1) / se;
                T *gp = gr;
#pragma unroll
                for (int j = 0; j < CMAX; ++j) {
                    if (j < Ci)
                        *gp = convert<T>(om * (cs * (v[j] * inv) - (W ? coef.index(j, yi) : coef.plain(j, yi))));
                    gp += gsc;
                }
            }
        } else {
            /* One thread walks all C classes in sequence (C up to ~10^5 here), so the
             * sums Σ e^(x−m), Σ c and Σ c·(lse − x) are kept in double: an f32 running
             * sum of that many terms loses ~1e-4 relative, well beyond the tree-reduced
             * kernels.  The terms themselves stay in A (e^(x−m) through ex()).  The max
             * m moves rarely (O(log C) times for random rows), and its rescale
             * e^(m_old − m_new) is taken in double, so even an ascending row does not
             * compound the error of ex().  A logit of −∞ adds nothing (e^(−∞ − m) = 0
             * as on the CPU, whatever m is so far); a row with no logit above −∞ has a
             * NaN lse as on the CPU (−∞ − (−∞)); NaN or +∞ logits give NaN. */
            A m = neg_inf<A>();
            double se = 0.0, cs = 0.0;
            for (int64_t j = 0; j < C; ++j) {
                const A x = (A)to_acc(xr[j * xsc]);
                if (x > m) {
                    se *= exp((double)m - (double)x); /* m = −∞: 0 (se is 0 or NaN then) */
                    m = x;
                }
                if (x != neg_inf<A>())
                    se += (double)ex(x - m);
                cs += (double)coef.any(p, j, y, toff);
            }
            if (C > 0 && m == neg_inf<A>())
                se = CUDART_NAN;
            const double lse_d =
                saved ? load_state(p.lse, p.lse_dtype, n * p.lse_sn + s * p.lse_ss) : (double)m + log(se);
            const A lse = (A)lse_d, csa = (A)cs;
            const A om = want_grad ? omega_of<A>(p, aux, n, s) : A(0);
            double loss = 0.0;
            for (int64_t j = 0; j < C; ++j) {
                const A x = (A)to_acc(xr[j * xsc]);
                const A c = coef.any(p, j, y, toff);
                if (want_loss && c != A(0))
                    loss += (double)c * (lse_d - (double)x);
                if (want_grad)
                    gr[j * gsc] = convert<T>(om * (csa * ex(x - lse) - c));
            }
            if (want_loss)
                finish_valid<A>(p, n, s, y, lse, (A)loss, acc_loss, acc_w);
        }
    }

    if (aux.part_loss) {
        const double a = block_reduce<kSampleThreads>(acc_loss, SumOp{});
        const double b = aux.part_w ? block_reduce<kSampleThreads>(acc_w, SumOp{}) : 0.0;
        if (threadIdx.x == 0) {
            aux.part_loss[blockIdx.x] = a;
            if (aux.part_w)
                aux.part_w[blockIdx.x] = b;
        }
    }
}

/* Class weights (any float dtype, strided) → a dense array of the accumulation type. */
template <class A>
__global__ void __launch_bounds__(kSampleThreads) ce_convert_weights(const ploss_ce_problem p, A *out)
{
    for (int64_t j = thread_index(); j < p.C; j += grid_stride())
        out[j] = load_float_dyn<A>(p.w, p.w_dtype, j * p.w_s);
}

/* ------------------------------------------------------------------------------------ */
/* Label pass and final reductions                                                      */
/* ------------------------------------------------------------------------------------ */

constexpr int kFinalThreads = 1024;

/* Per-block Σ w_y over valid class-index samples (the 'mean' divisor). */
__global__ void __launch_bounds__(kSampleThreads)
    ce_divisor_partials(const ploss_ce_problem p, double *part, const int64_t count)
{
    double acc = 0.0;
    for (int64_t i = thread_index(); i < count; i += grid_stride()) {
        const int64_t n = p.S == 1 ? i : i / p.S, s = i - n * p.S;
        const int64_t y = load_label(p, n, s);
        if (label_status(p, y) == kValid)
            acc += p.w ? load_dyn(p.w, p.w_dtype, y * p.w_s) : 1.0;
    }
    const double r = block_reduce<kSampleThreads>(acc, SumOp{});
    if (threadIdx.x == 0)
        part[blockIdx.x] = r;
}

/* Fixed-order sum of `count` doubles by one block: thread t adds t, t + 1024, …, then a
 * CUB block reduction.  Valid in thread 0. */
__device__ __forceinline__ double sum_fixed(const double *v, int64_t count)
{
    double acc = 0.0;
    for (int64_t k = threadIdx.x; k < count; k += kFinalThreads)
        acc += v[k];
    return block_reduce<kFinalThreads>(acc, SumOp{});
}

__global__ void __launch_bounds__(kFinalThreads) ce_sum_partials(const double *part, const int64_t count, double *out)
{
    const double r = sum_fixed(part, count);
    if (threadIdx.x == 0)
        *out = r;
}

/* loss = Σ partials (/ divisor for 'mean': Σ part_w, *divisor or divisor_value). */
__global__ void __launch_bounds__(kFinalThreads)
    ce_finalize(const Aux aux, const int64_t count, const int mean, void *loss, const ploss_dtype loss_dtype)
{
    const double total = sum_fixed(aux.part_loss, count);
    const double wsum = aux.part_w ? sum_fixed(aux.part_w, count) : 0.0;
    if (threadIdx.x == 0) {
        double v = total;
        if (mean) {
            const double d = aux.part_w ? wsum : aux.divisor ? *aux.divisor : aux.divisor_value;
            v = total / d; /* 0/0 = NaN with no valid sample, as PyTorch */
        }
        if (loss_dtype == PLOSS_F64)
            *(double *)loss = v;
        else
            *(float *)loss = (float)v;
    }
}

/* ------------------------------------------------------------------------------------ */
/* Host side                                                                            */
/* ------------------------------------------------------------------------------------ */

constexpr int64_t kMaxBlocks = 65535ll * 16; /* grid cap; grid-stride loops cover the rest */
constexpr int kTwoPassThreads = 512;

/* Register-row configurations, smallest capacity first: {NV, LANES, THREADS, CLUSTER}.
 * Capacity NV·VEC·LANES·CLUSTER elements (VEC = 16 B / element size). */
struct RowCfg {
    int nv, lanes, threads, cluster;
};
constexpr RowCfg kRowCfgs[] = {
    {1, 32, 256, 1}, {4, 32, 256, 1},                    /* a warp per row (8 rows per block) */
    {8, 128, 128, 1}, {8, 512, 512, 1},                  /* a block per row */
    {8, 512, 512, 2}, {8, 512, 512, 4}, {8, 512, 512, 8}, /* a cluster per row (sm_90) */
};
constexpr int kRowCfgCount = (int)(sizeof kRowCfgs / sizeof kRowCfgs[0]);
/* f64 (a checking dtype) always takes the generic kernels: no register-row instances. */
template <class T> constexpr int row_cfg_count() { return sizeof(T) == 8 ? 0 : kRowCfgCount; }

/* Blocks (clusters) launched by configuration `cfg` for `rows` rows = partials written. */
int64_t row_partials(const RowCfg &cfg, int64_t rows)
{
    const int64_t rpc = cfg.threads / cfg.lanes;
    const int64_t b = (rows + rpc - 1) / rpc;
    return b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b;
}

/* Whether cluster kernels can run on `device`: sm_90+, cluster launch, and this library's
 * kernels compiled for compute_90 or later (gpu_arch).  Cached per device. */
int clusters_supported(int device, const void *probe)
{
    static int cache[64]; /* 0 unknown, 1 yes, 2 no */
    if (device < 0 || device >= 64)
        return 0;
    if (cache[device] == 0) {
        int major = 0, cluster = 0;
        cudaFuncAttributes fa;
        int ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                 cudaDeviceGetAttribute(&cluster, cudaDevAttrClusterLaunch, device) == cudaSuccess &&
                 cudaFuncGetAttributes(&fa, probe) == cudaSuccess && major >= 9 && cluster && fa.ptxVersion >= 90;
        (void)cudaGetLastError();
        cache[device] = ok ? 1 : 2;
    }
    return cache[device] == 1;
}

template <class T, int NV, int LANES, int THREADS, int CLUSTER>
ploss_status launch_rows_reg(const ploss_ce_problem &p, const Aux &aux, int64_t rows, int64_t blocks,
                             cudaStream_t stream)
{
    auto kernel = ce_rows_reg<T, NV, LANES, THREADS, CLUSTER>;
    if constexpr (CLUSTER == 1) {
        kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(p, aux, rows);
        return check_launch("cross_entropy (rows in registers)");
    } else {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((unsigned)(blocks * CLUSTER), 1, 1);
        cfg.blockDim = dim3(THREADS, 1, 1);
        cfg.dynamicSmemBytes = 0;
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = CLUSTER;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, p, aux, rows);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return PLOSS_ERR_UNSUPPORTED; /* caller falls back to the two-pass kernel */
        }
        return check_launch("cross_entropy (rows in a cluster)");
    }
}

template <class T>
ploss_status launch_rows_cfg(int cfg, const ploss_ce_problem &p, const Aux &aux, int64_t rows, int64_t blocks,
                             cudaStream_t stream)
{
    if constexpr (row_cfg_count<T>() == 0) {
        (void)cfg, (void)p, (void)aux, (void)rows, (void)blocks, (void)stream;
        return PLOSS_ERR_UNSUPPORTED;
    } else {
        switch (cfg) {
        case 0: return launch_rows_reg<T, 1, 32, 256, 1>(p, aux, rows, blocks, stream);
        case 1: return launch_rows_reg<T, 4, 32, 256, 1>(p, aux, rows, blocks, stream);
        case 2: return launch_rows_reg<T, 8, 128, 128, 1>(p, aux, rows, blocks, stream);
        case 3: return launch_rows_reg<T, 8, 512, 512, 1>(p, aux, rows, blocks, stream);
        case 4: return launch_rows_reg<T, 8, 512, 512, 2>(p, aux, rows, blocks, stream);
        case 5: return launch_rows_reg<T, 8, 512, 512, 4>(p, aux, rows, blocks, stream);
        default: return launch_rows_reg<T, 8, 512, 512, 8>(p, aux, rows, blocks, stream);
        }
    }
}

/* Largest C held in registers by the thread-per-sample kernel (f64: none, generic only). */
template <class T> constexpr int64_t sample_reg_max() { return sizeof(T) == 8 ? 0 : 64; }

template <class T, bool W>
void launch_samples_reg(const ploss_ce_problem &p, const Aux &aux, int64_t count, unsigned g, cudaStream_t stream)
{
    if (p.C <= 8)
        ce_samples<T, 8, W><<<g, kSampleThreads, 0, stream>>>(p, aux, count);
    else if (p.C <= 24)
        ce_samples<T, 24, W><<<g, kSampleThreads, 0, stream>>>(p, aux, count);
    else
        ce_samples<T, 64, W><<<g, kSampleThreads, 0, stream>>>(p, aux, count);
}

template <class T>
ploss_status launch_samples(const ploss_ce_problem &p, const Aux &aux, int64_t count, int64_t blocks,
                            cudaStream_t stream)
{
    const unsigned g = (unsigned)blocks;
    if constexpr (sample_reg_max<T>() > 0) {
        if (p.target_kind == PLOSS_TARGET_INDEX && p.C <= sample_reg_max<T>()) {
            if (aux.wts)
                launch_samples_reg<T, true>(p, aux, count, g, stream);
            else
                launch_samples_reg<T, false>(p, aux, count, g, stream);
            return check_launch("cross_entropy (thread per sample)");
        }
    }
    ce_samples<T, 0, true><<<g, kSampleThreads, 0, stream>>>(p, aux, count);
    return check_launch("cross_entropy (thread per sample)");
}

/* Which main kernel: -1 thread per sample, -2 two-pass rows, k ≥ 0 register rows kRowCfgs[k]. */
template <class T> int choose_kernel(const ploss_ce_problem &p, int device)
{
    constexpr int VEC = vec16<T>::N;
    const int64_t C = p.C;
    if (p.x_sc != 1 || C <= 32)
        return -1;
    if (p.target_kind != PLOSS_TARGET_INDEX || p.w)
        return -2;
    const int64_t need = C / VEC; /* ≥ the number of aligned vectors whatever the alignment */
    for (int k = 0; k < row_cfg_count<T>(); ++k) {
        const RowCfg &c = kRowCfgs[k];
        if ((int64_t)c.nv * c.lanes * c.cluster < need)
            continue;
        if (c.cluster > 1 && !clusters_supported(device, (const void *)ce_rows_reg<float, 8, 512, 512, 2>))
            return -2;
        return k;
    }
    return -2;
}

template <class T> ploss_status run_typed(ploss_ctx_t *ctx, const ploss_ce_problem &p)
{
    const int64_t count = p.N * p.S;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD, want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool reduced = want_loss && p.reduction != PLOSS_REDUCTION_NONE;
    const bool mean = p.reduction == PLOSS_REDUCTION_MEAN;
    const bool index = p.target_kind == PLOSS_TARGET_INDEX;
    const bool label_pass = want_grad && mean && index && count > 0;
    cudaStream_t stream = stream_of(ctx);

    /* main kernel and its number of partials */
    int kind = -1;
    int64_t blocks = 0;
    if (count > 0) {
        kind = choose_kernel<T>(p, ctx->device.device_id);
        if (p.focal && kind < 0)
            return PLOSS_ERR_UNSUPPORTED; /* focal: the register-row kernel only */
        if (kind >= 0)
            blocks = row_partials(kRowCfgs[kind], count);
        else if (kind == -2)
            blocks = count < kMaxBlocks ? count : kMaxBlocks;
        else
            blocks = (int64_t)grid_blocks(count, kSampleThreads, kMaxBlocks);
    }
    const int64_t label_blocks = label_pass ? (int64_t)grid_blocks(count, kSampleThreads * 4, 4096) : 0;

    /* workspace: [part_loss | part_w | divisor | label partials | weights], 256-byte
     * aligned pieces */
    using A = acc_t<T>;
    auto up256 = [](size_t b) { return (b + 255) & ~(size_t)255; };
    const bool need_w = reduced && mean && index && !label_pass && count > 0;
    const size_t sz_loss = reduced ? up256((size_t)blocks * sizeof(double)) : 0;
    const size_t sz_w = need_w ? up256((size_t)blocks * sizeof(double)) : 0;
    const size_t sz_div = label_pass ? 256 : 0;
    const size_t sz_lab = label_pass ? up256((size_t)label_blocks * sizeof(double)) : 0;
    const bool weights = p.w != nullptr && count > 0;
    const size_t sz_wts = weights ? up256((size_t)p.C * sizeof(A)) : 0;
    const size_t total = sz_loss + sz_w + sz_div + sz_lab + sz_wts;
    char *ws = nullptr;
    if (total > 0) {
        void *w = nullptr;
        ploss_status st = ploss_workspace(ctx, total, &w);
        if (st != PLOSS_OK)
            return st;
        ws = (char *)w;
    }
    Aux aux;
    aux.part_loss = reduced ? (double *)ws : nullptr;
    aux.part_w = need_w ? (double *)(ws + sz_loss) : nullptr;
    aux.divisor = label_pass ? (const double *)(ws + sz_loss + sz_w) : nullptr;
    aux.divisor_value = index ? 0.0 : (double)p.N * (double)p.S;
    aux.wts = weights ? (const void *)(ws + sz_loss + sz_w + sz_div + sz_lab) : nullptr;
    aux.error_slot = ctx->error_slot;

    if (weights) {
        ce_convert_weights<A><<<grid_blocks(p.C, kSampleThreads, 4096), kSampleThreads, 0, stream>>>(
            p, (A *)aux.wts);
        ploss_status st = check_launch("cross_entropy (weights)");
        if (st != PLOSS_OK)
            return st;
    }

    if (label_pass) {
        double *lab = (double *)(ws + sz_loss + sz_w + sz_div);
        ce_divisor_partials<<<(unsigned)label_blocks, kSampleThreads, 0, stream>>>(p, lab, count);
        ce_sum_partials<<<1, kFinalThreads, 0, stream>>>(lab, label_blocks, (double *)aux.divisor);
        ploss_status st = check_launch("cross_entropy (label pass)");
        if (st != PLOSS_OK)
            return st;
    }

    if (count > 0) {
        ploss_status st = PLOSS_OK;
        if (kind >= 0) {
            st = launch_rows_cfg<T>(kind, p, aux, count, blocks, stream);
            if (st == PLOSS_ERR_UNSUPPORTED && p.focal) /* cluster launch refused: only */
                return st;                              /* the workspace was written     */
            if (st == PLOSS_ERR_UNSUPPORTED) /* cluster launch refused: two-pass rows */
                kind = -2;
            else if (st != PLOSS_OK)
                return st;
        }
        if (kind == -2) {
            /* blocks = min(count, cap) here and for a cluster configuration alike */
            ce_rows_2pass<T, kTwoPassThreads><<<(unsigned)blocks, kTwoPassThreads, 0, stream>>>(p, aux, count);
            st = check_launch("cross_entropy (two-pass rows)");
        } else if (kind == -1) {
            st = launch_samples<T>(p, aux, count, blocks, stream);
        }
        if (st != PLOSS_OK)
            return st;
    }

    if (reduced) {
        ce_finalize<<<1, kFinalThreads, 0, stream>>>(aux, blocks, mean ? 1 : 0, p.loss, p.loss_dtype);
        return check_launch("cross_entropy (final reduction)");
    }
    return PLOSS_OK;
}

} // namespace

extern "C" ploss_status ploss_cuda_cross_entropy(ploss_ctx_t *ctx, const ploss_ce_problem *p)
{
    return dispatch_float(p->x_dtype, "input", [&](auto tag) {
        using T = typename decltype(tag)::type;
        return run_typed<T>(ctx, *p);
    });
}
