/*
 * cross_entropy.cu — CUDA backend of the softmax cross-entropy family,
 * with exactly the semantics of core/cpu/rows/cross_entropy.c.  Per sample i, with
 * c_ij = w_j·(a·t_ij + b) (t one-hot for class indices):
 *     ℓ_i = Σ_j c_ij·(lse_i − x_ij),      ∂ℓ_i/∂x_ij = ω_i·((Σ_k c_ik)·p_ij − c_ij),
 * accumulated in f32 (f64 for f64 inputs); terms with c_ij = 0 are skipped as on the CPU.
 *
 * Class-index targets on rows with a contiguous class axis (x_sc = 1, C > 32, f32/f16/bf16)
 * go to the row engine (kernels/rows/row_engine.cuh, policy_cross_entropy.cuh); f32 class
 * indices without class weights on a strided class axis with C ≤ 32 to the per-sample
 * kernels of sample_policies.cu (to_sample_kernels).  The rest here, chosen by
 * choose_kernel():
 *  - ce_rows_2pass: x_sc = 1 rows the engine does not take (probabilities, f64): a block
 *    per row, an online (running max, Σ e, Σ c) pass, then a pass that re-reads the row
 *    (mostly from L2) for the loss terms c·(lse − x) and the gradient.
 *  - ce_samples<CMAX, P>: class axis strided (N×C×S with x_ss = 1, or small C anywhere): a
 *    thread per sample walks C with stride x_sc so that warps read coalesced; class
 *    indices with C ≤ CMAX (8, 24, 64) are held in registers (one read), and where the
 *    sample axis is contiguous a thread takes P = 2 neighbouring samples, each class's pair
 *    one access; CMAX = 0 is the generic two-pass walk (any strides, probabilities).  f64
 *    always takes the generic kernels (it is a checking dtype).
 * Reductions: each block (cluster) writes partial sums (double) to the context's
 * workspace; ce_finalize adds them in a fixed order with one block, so the loss is bitwise
 * reproducible and no float atomics are used.  The MEAN divisor Σ w_y (class indices) is
 * summed the same way: by the main kernel for the forward loss, or by a label pass
 * (ce_divisor_partials, then the row engine's launch_sum_partials) before the main kernel
 * when the gradient needs it (backward / fused with 'mean').  No host synchronisation; no
 * allocation except the workspace.  Invalid labels (≠ ignore_index, outside [0, C)) set ctx->error_slot and give
 * a NaN loss (and lse) for the sample and a zero gradient row; an out-of-range label is
 * never used as an index.
 */
#include <math_constants.h>

#include "rows.h"
#include "common.cuh"
#include "policy_cross_entropy.cuh"

using namespace ploss_cuda;

namespace {

/* ------------------------------------------------------------------------------------ */
/* Per-sample helpers shared by every kernel                                            */
/* ------------------------------------------------------------------------------------ */

struct Aux {
    double *part_loss;     /* one partial loss sum per block (reduced loss wanted), or null */
    double *part_w;        /* one partial Σ w_y per block (forward 'mean', class indices), or null */
    const double *divisor; /* 'mean' divisor on the device (label pass), or null */
    double divisor_value;  /* 'mean' divisor when `divisor` is null (N·S for probabilities) */
    const void *wts;       /* class weights converted to the accumulation type, or null */
    int64_t *error_slot;
};

/* f32: exp through ex2.approx.ftz (exp_ftz: one multiply, one MUFU op): relative error
 * ≈ 2^-22 + |v|·2^-24, results below 2^-126 flush to 0 — far inside the f32 tolerances,
 * and it keeps the 16-bit row kernels off the instruction roofline.  f64: the correctly
 * rounded-ish libdevice exp. */
__device__ __forceinline__ float ex(float v) { return exp_ftz(v); }
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
/* ce_rows_2pass: a block per row, online pass + gradient pass (rows of any length)      */
/* ------------------------------------------------------------------------------------ */

/* Rows of any length (x_sc = 1), any target kind: a block per row; head / aligned
 * 16-byte vectors / tail as in the row engine's rows, U vectors in flight per thread. */
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
            y = sample_label(p, n, s);
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

/* P neighbouring samples' elements of one class as their raw bits: one access of
 * P·sizeof(T) = 4 or 8 bytes (callers check the alignment).  Held raw, a 16-bit pair costs
 * one register per class instead of two; get(k) unpacks sample k to f32. */
template <class T, int P> struct Run {
    static constexpr int W = P * (int)sizeof(T) / 4;
    static_assert(sizeof(T) <= 4 && (W == 1 || W == 2), "a run is one 4- or 8-byte access");
    uint32_t w[W];
    __device__ __forceinline__ void zero()
    {
#pragma unroll
        for (int i = 0; i < W; ++i)
            w[i] = 0u;
    }
    /* an empty asm per word: the unpacked values are not kept between the passes */
    __device__ __forceinline__ void launder()
    {
#pragma unroll
        for (int i = 0; i < W; ++i)
            asm volatile("" : "+r"(w[i]));
    }
    __device__ __forceinline__ float get(int k) const
    {
        if constexpr (sizeof(T) == 4) {
            return __uint_as_float(w[k]);
        } else {
            const uint32_t x = w[k >> 1];
            if constexpr (std::is_same<T, __nv_bfloat16>::value)
                return __uint_as_float((k & 1) ? (x & 0xffff0000u) : (x << 16));
            else
                return __half2float(__ushort_as_half((unsigned short)(x >> ((k & 1) * 16))));
        }
    }
};
/* P values rounded to T (to nearest, as convert<T>) and written as one access. */
template <class T, int P> __device__ __forceinline__ void store_run(T *ptr, const float (&g)[P])
{
    constexpr int W = Run<T, P>::W;
    uint32_t w[W];
#pragma unroll
    for (int i = 0; i < W; ++i) {
        if constexpr (std::is_same<T, float>::value) {
            w[i] = __float_as_uint(g[i]);
        } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
            const __nv_bfloat162 h = __floats2bfloat162_rn(g[2 * i], g[2 * i + 1]);
            w[i] = *(const uint32_t *)&h;
        } else {
            const __half2 h = __floats2half2_rn(g[2 * i], g[2 * i + 1]);
            w[i] = *(const uint32_t *)&h;
        }
    }
    if constexpr (W == 1)
        *(uint32_t *)ptr = w[0];
    else
        *(uint2 *)ptr = make_uint2(w[0], w[1]);
}

/* C ≤ CMAX (class indices only; W: with class weights), a thread per sample: the sample's
 * C logits held in registers as the accumulation type, then e^(x − M) in their place (one
 * read, one write). */
template <class T, int CMAX, bool W>
__device__ __forceinline__ void samples_in_registers(const ploss_ce_problem &p, const Aux &aux, int64_t count,
                                                     double &acc_loss, double &acc_w)
{
    using A = acc_t<T>;
    const bool want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD;
    const bool saved = p.pass == PLOSS_PASS_BACKWARD && p.lse != nullptr;
    const int64_t C = p.C;
    const Coef<A> coef(p, aux);
    for (int64_t i = thread_index(); i < count; i += grid_stride()) {
        const int64_t n = p.S == 1 ? i : i / p.S, s = i - n * p.S;
        const int64_t y = sample_label(p, n, s);
        const int st = label_status(p, y);
        const T *xr = (const T *)p.x + n * p.x_sn + s * p.x_ss;
        T *gr = want_grad ? (T *)p.grad + n * p.g_sn + s * p.g_ss : nullptr;
        const int64_t xsc = p.x_sc, gsc = p.g_sc;

        /* the logits are read together with the label (in bounds whatever the label says);
         * the values of an ignored or invalid sample are never used */
        A v[CMAX];
        const T *xp = xr;
#pragma unroll
        for (int j = 0; j < CMAX; ++j) {
            v[j] = j < C ? (A)to_acc(*xp) : A(0);
            xp += xsc;
        }
#pragma unroll
        for (int j = 0; j < CMAX; ++j)
            launder(v[j]);

        if (st != kValid) {
            finish_skipped<A>(p, aux, n, s, st, y, acc_loss);
            if (want_grad)
                for (int64_t j = 0; j < C; ++j)
                    gr[j * gsc] = convert<T>(0.0f);
            continue;
        }

        {
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
        }
    }
}

/* f(j) for the classes j < Ci of a thread's CMAX registers, unrolled: j is a compile-time
 * index into the registers, and the bounds check comes once per class. */
template <int CMAX, class F> __device__ __forceinline__ void each_class(int Ci, F &&f)
{
#pragma unroll
    for (int j = 0; j < CMAX; ++j) {
        if (j >= Ci)
            break;
        f(j);
    }
}

/* The same for P neighbouring samples of one image per thread (where the host has checked
 * that the sample axis is contiguous, S a multiple of P and the runs aligned): a class's P
 * logits read and its P gradient values written as one access (Run), P times the bytes in
 * flight per thread.  The logits stay raw in registers, and the class loops run over the
 * classes outside and the P samples inside, so that a class's bounds check and addresses
 * are shared by P elements.  Each e^(x − M) is formed again for the gradient with the
 * same operations (the sums' bits; exactly 1 at the max).  Without class weights the
 * label's own terms are not selected class by class: d_y comes from the label's logit read
 * once more (from the stage below, so a gradient written over the logits does not matter),
 * and the gradient is written e·ga − ω·b for every class, then the label's element
 * again with its −ω·a (the same thread's later store to the same address).  With class
 * weights every element takes its coefficient.  Per-sample factors are formed once (ω
 * hoisted, the image by a 32-bit division).
 * A thread's next run is read while it works on the current one: its logits copied by
 * cp.async into the thread's own slots of two stages in shared memory ([stage][class]
 * [word][thread]: a warp's accesses in distinct banks; no barrier, a thread reads only what
 * it copied), its labels into registers; the label's logit comes from the stage. */
template <class T, int P> int run_stage_bytes(int64_t C) { return 2 * (int)C * Run<T, P>::W * 4 * kSampleThreads; }
template <class T, int CMAX, bool W, int P>
__device__ __forceinline__ void sample_runs_in_registers(const ploss_ce_problem &p, const Aux &aux, int64_t count,
                                                         double &acc_loss, double &acc_w)
{
    using A = acc_t<T>;
    const bool want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD;
    const bool saved = p.pass == PLOSS_PASS_BACKWARD && p.lse != nullptr;
    const int Ci = (int)p.C;
    const Coef<A> coef(p, aux);
    /* ω: one value for every sample unless the backward of 'none' gives one per sample */
    const bool omega_each = p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE;
    const A omega_all = want_grad && !omega_each ? omega_of<A>(p, aux, 0, 0) : A(0);
    const bool narrow = count <= INT32_MAX; /* the sample's image by a 32-bit division */
    const A cs_plain = coef.a + coef.b * (A)Ci; /* Σ_j c_j without class weights */
    const bool smoothing = coef.b != A(0);     /* Σ_{j≠y} d_j wanted (no class weights) */
    const int64_t runs = count / P;
    constexpr int RW = Run<T, P>::W;
    extern __shared__ uint32_t stage_words[];
    const auto slot = [&](int buf, int j) { return stage_words + (buf * Ci + j) * RW * kSampleThreads + threadIdx.x; };
    const auto image_of = [&](int64_t i, int64_t &n, int64_t &s0) {
        const int64_t q = i * P;
        n = narrow ? (int64_t)((uint32_t)q / (uint32_t)p.S) : q / p.S;
        s0 = q - n * p.S;
    };
    /* the logits are read together with the labels (in bounds whatever the labels say);
     * the values of an ignored or invalid sample are never used */
    const auto read_ahead = [&](int64_t i, int buf, int64_t (&y)[P]) {
        int64_t n, s0;
        image_of(i, n, s0);
        const T *xp = (const T *)p.x + n * p.x_sn + s0 * p.x_ss;
#pragma unroll
        for (int j = 0; j < CMAX; ++j) {
            if (j < Ci)
#pragma unroll
                for (int w = 0; w < RW; ++w)
                    cp_async4(slot(buf, j) + w * kSampleThreads, (const uint32_t *)xp + w, 4);
            xp += p.x_sc;
        }
#pragma unroll
        for (int k = 0; k < P; ++k)
            y[k] = sample_label(p, n, s0 + k);
    };
    int64_t i = thread_index();
    int buf = 0;
    int64_t ycur[P];
    if (i < runs)
        read_ahead(i, 0, ycur);
    cp_async_commit();
    for (; i < runs; i += grid_stride(), buf ^= 1) {
        int64_t ynext[P] = {};
        if (i + grid_stride() < runs)
            read_ahead(i + grid_stride(), buf ^ 1, ynext);
        cp_async_commit();
        int64_t n, s0;
        image_of(i, n, s0);
        int yi[P];
        bool ok[P];
#pragma unroll
        for (int k = 0; k < P; ++k) {
            const int64_t y = ycur[k];
            ycur[k] = ynext[k];
            const int st = label_status(p, y);
            ok[k] = st == kValid;
            yi[k] = ok[k] ? (int)y : 0;
            if (!ok[k])
                finish_skipped<A>(p, aux, n, s0 + k, st, y, acc_loss);
        }
        cp_async_wait<1>(); /* this run's copies are in */
        Run<T, P> v[CMAX];
#pragma unroll
        for (int j = 0; j < CMAX; ++j) {
            if (j < Ci)
#pragma unroll
                for (int w = 0; w < RW; ++w)
                    v[j].w[w] = slot(buf, j)[w * kSampleThreads];
            else
                v[j].zero();
            v[j].launder();
        }
        A M[P]; /* the max, or the saved lse */
        {
#pragma unroll
            for (int k = 0; k < P; ++k)
                M[k] = neg_inf<A>();
            if (saved) {
#pragma unroll
                for (int k = 0; k < P; ++k)
                    if (ok[k])
                        M[k] = (A)load_state(p.lse, p.lse_dtype, n * p.lse_sn + (s0 + k) * p.lse_ss);
            } else {
                each_class<CMAX>(Ci, [&](int j) {
#pragma unroll
                    for (int k = 0; k < P; ++k)
                        M[k] = mx(M[k], v[j].get(k));
                });
            }
        }
        /* Σ e, and Σ c·d (d_j = M − x_j) as the coefficients need it */
        A se[P], cs[P], cd[P], xy[P]; /* xy: the label's logit (no class weights) */
#pragma unroll
        for (int k = 0; k < P; ++k)
            se[k] = cs[k] = cd[k] = A(0);
        if (W) {
            each_class<CMAX>(Ci, [&](int j) {
#pragma unroll
                for (int k = 0; k < P; ++k) {
                    const A x = v[j].get(k), c = coef.index(j, yi[k]);
                    se[k] += ex(x - M[k]);
                    cs[k] += c;
                    if (c != A(0))
                        cd[k] += c * (M[k] - x);
                }
            });
        } else {
            /* c_j = b for j ≠ y and a + b for y: Σc = a + b·C and Σ c·d = b·Σ_{j≠y} d_j +
             * (a + b)·d_y, a term of a zero coefficient left out (an infinite d times 0 is
             * not NaN; a + b is 0 at label smoothing 1 in two conventions) */
            A dsum[P];
#pragma unroll
            for (int k = 0; k < P; ++k)
                dsum[k] = A(0);
            if (smoothing) { /* uniform: two loops, not a select per element */
                each_class<CMAX>(Ci, [&](int j) {
#pragma unroll
                    for (int k = 0; k < P; ++k) {
                        const A x = v[j].get(k);
                        se[k] += ex(x - M[k]);
                        dsum[k] += j == yi[k] ? A(0) : M[k] - x;
                    }
                });
            } else {
                each_class<CMAX>(Ci, [&](int j) {
#pragma unroll
                    for (int k = 0; k < P; ++k)
                        se[k] += ex(v[j].get(k) - M[k]);
                });
            }
#pragma unroll
            for (int k = 0; k < P; ++k) {
                Run<T, P> ry;
#pragma unroll
                for (int w = 0; w < RW; ++w)
                    ry.w[w] = slot(buf, yi[k])[w * kSampleThreads];
                xy[k] = (A)ry.get(k);
                const A dy = M[k] - xy[k];
                cs[k] = cs_plain;
                cd[k] = (smoothing ? coef.b * dsum[k] : A(0)) + (coef.ab != A(0) ? coef.ab * dy : A(0));
            }
        }
        A ga[P], om[P];
#pragma unroll
        for (int k = 0; k < P; ++k) {
            ga[k] = om[k] = A(0);
            if (!ok[k])
                continue;
            const int64_t s = s0 + k;
            const A sek = saved ? A(1) : se[k], logSE = lg(sek);
            if (want_loss)
                finish_valid<A>(p, n, s, yi[k], M[k] + logSE, (cs[k] != A(0) ? cs[k] * logSE : A(0)) + cd[k],
                                acc_loss, acc_w);
            if (want_grad) {
                om[k] = omega_each ? omega_of<A>(p, aux, n, s) : omega_all;
                ga[k] = om[k] * cs[k] / sek;
            }
        }
        if (!want_grad)
            continue;
        /* g_j = e^(x_j − M)·ga − ω·c_j; a skipped sample's logits may be NaN: its zero is
         * not computed */
        T *gr = (T *)p.grad + n * p.g_sn + s0 * p.g_ss;
        A ob[P];
#pragma unroll
        for (int k = 0; k < P; ++k)
            ob[k] = om[k] * coef.b;
        {
            T *gp = gr;
            each_class<CMAX>(Ci, [&](int j) {
                A g[P];
#pragma unroll
                for (int k = 0; k < P; ++k) {
                    const A e = ex(v[j].get(k) - M[k]);
                    const A oc = W ? om[k] * coef.index(j, yi[k]) : ob[k];
                    g[k] = ok[k] ? e * ga[k] - oc : A(0);
                }
                store_run<T, P>(gp, g);
                gp += p.g_sc;
            });
        }
        if (!W)
#pragma unroll
            for (int k = 0; k < P; ++k)
                if (ok[k])
                    gr[(int64_t)yi[k] * p.g_sc + k] = convert<T>(ex(xy[k] - M[k]) * ga[k] - om[k] * coef.ab);
    }
}

/* Any C and target kind, one thread per sample: an online pass, then a loss/gradient pass
 * (two reads). */
template <class T>
__device__ __forceinline__ void samples_online(const ploss_ce_problem &p, const Aux &aux, int64_t count,
                                               double &acc_loss, double &acc_w)
{
    using A = acc_t<T>;
    const bool want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD;
    const bool saved = p.pass == PLOSS_PASS_BACKWARD && p.lse != nullptr;
    const int64_t C = p.C;
    const Coef<A> coef(p, aux);
    for (int64_t i = thread_index(); i < count; i += grid_stride()) {
        const int64_t n = p.S == 1 ? i : i / p.S, s = i - n * p.S;
        int64_t y = 0;
        int st = kValid;
        if (p.target_kind == PLOSS_TARGET_INDEX) {
            y = sample_label(p, n, s);
            st = label_status(p, y);
        }
        const T *xr = (const T *)p.x + n * p.x_sn + s * p.x_ss;
        T *gr = want_grad ? (T *)p.grad + n * p.g_sn + s * p.g_ss : nullptr;
        const int64_t toff = n * p.t_sn + s * p.t_ss;
        const int64_t xsc = p.x_sc, gsc = p.g_sc;
        if (st != kValid) {
            finish_skipped<A>(p, aux, n, s, st, y, acc_loss);
            if (want_grad)
                for (int64_t j = 0; j < C; ++j)
                    gr[j * gsc] = convert<T>(0.0f);
            continue;
        }
        {
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
}

/* ce_samples: a thread per sample (P = 1) or per run of P neighbouring samples (P = 2),
 * for a strided class axis or small C; CMAX > 0: sample_runs_in_registers or
 * samples_in_registers, CMAX = 0: samples_online.  Blocks per SM from the registers the
 * logits take (CMAX·P values, held raw for P > 1). */
template <class T, int CMAX, int P> constexpr int sample_words()
{
    return P == 1 ? CMAX * (int)(sizeof(acc_t<T>) / 4) : CMAX * P * (int)sizeof(T) / 4;
}
template <class T, int CMAX, bool W, int P>
__global__ void __launch_bounds__(kSampleThreads, CMAX == 0 || sample_words<T, CMAX, P>() > 48 ? 2
                                                  : sample_words<T, CMAX, P>() > 8              ? 3
                                                                                                : 4)
    ce_samples(const ploss_ce_problem p, const Aux aux, const int64_t count)
{
    double acc_loss = 0.0, acc_w = 0.0;
    if constexpr (CMAX > 0 && P > 1)
        sample_runs_in_registers<T, CMAX, W, P>(p, aux, count, acc_loss, acc_w);
    else if constexpr (CMAX > 0)
        samples_in_registers<T, CMAX, W>(p, aux, count, acc_loss, acc_w);
    else
        samples_online<T>(p, aux, count, acc_loss, acc_w);
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
    const double acc = divisor_share(
        p, [&](int64_t y) { return p.w ? load_dyn(p.w, p.w_dtype, y * p.w_s) : 1.0; }, thread_index(), grid_stride(),
        count);
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
            v = ploss_rows_mean(total, d);
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

/* Largest C held in registers by the thread-per-sample kernel (f64: none, generic only). */
template <class T> constexpr int64_t sample_reg_max() { return sizeof(T) == 8 ? 0 : 64; }

/* Whether P consecutive samples of an image are one aligned access of P elements of x and
 * of the gradient, class by class. */
template <class T, int P> bool runs_fit(const ploss_ce_problem &p, bool want_grad)
{
    const auto fits = [](const void *base, int64_t sn, int64_t sc, int64_t ss) {
        return ss == 1 && sn % P == 0 && sc % P == 0 && (uintptr_t)base % (P * sizeof(T)) == 0;
    };
    return p.S % P == 0 && fits(p.x, p.x_sn, p.x_sc, p.x_ss) && (!want_grad || fits(p.grad, p.g_sn, p.g_sc, p.g_ss));
}

/* Samples per thread of the thread-per-sample kernel: 2 where the register path runs with
 * C ≤ paired_cmax and pairs of samples are single accesses, else 1.  A pair's logits are
 * held raw: 24 classes of 16-bit pairs take 24 registers (three blocks per SM; four
 * samples per thread, two blocks per SM, were slower, RESULTS.md); f32 logits pair only up
 * to 8 classes (the tile kernel of sample_policies.cu is faster for more). */
template <class T> constexpr int paired_cmax() { return sizeof(T) == 2 ? 24 : 8; }
template <class T> int samples_per_thread(const ploss_ce_problem &p)
{
    if constexpr (sample_reg_max<T>() > 0)
        if (p.target_kind == PLOSS_TARGET_INDEX && p.C <= paired_cmax<T>() && runs_fit<T, 2>(p, p.pass != PLOSS_PASS_FORWARD))
            return 2;
    return 1;
}

template <class T, int CMAX, bool W>
void launch_samples_p(const ploss_ce_problem &p, const Aux &aux, int64_t count, unsigned blocks, int per_thread,
                      cudaStream_t stream)
{
    if constexpr (CMAX <= paired_cmax<T>())
        if (per_thread == 2) {
            const int bytes = run_stage_bytes<T, 2>(p.C);
            if (bytes > 48 * 1024 - 1024) /* with the block reduction's static shared memory */
                cudaFuncSetAttribute(ce_samples<T, CMAX, W, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
            ce_samples<T, CMAX, W, 2><<<blocks, kSampleThreads, bytes, stream>>>(p, aux, count);
            return;
        }
    ce_samples<T, CMAX, W, 1><<<blocks, kSampleThreads, 0, stream>>>(p, aux, count);
}

template <class T, bool W>
void launch_samples_reg(const ploss_ce_problem &p, const Aux &aux, int64_t count, unsigned blocks, int per_thread,
                        cudaStream_t stream)
{
    if (p.C <= 8)
        launch_samples_p<T, 8, W>(p, aux, count, blocks, per_thread, stream);
    else if (p.C <= 24)
        launch_samples_p<T, 24, W>(p, aux, count, blocks, per_thread, stream);
    else
        launch_samples_p<T, 64, W>(p, aux, count, blocks, per_thread, stream);
}

/* blocks: as run_typed sizes the grid (samples_per_thread: P samples a thread, pairs twice). */
template <class T>
ploss_status launch_samples(const ploss_ce_problem &p, const Aux &aux, int64_t count, int64_t blocks, int per_thread,
                            cudaStream_t stream)
{
    if constexpr (sample_reg_max<T>() > 0) {
        if (p.target_kind == PLOSS_TARGET_INDEX && p.C <= sample_reg_max<T>()) {
            if (aux.wts)
                launch_samples_reg<T, true>(p, aux, count, (unsigned)blocks, per_thread, stream);
            else
                launch_samples_reg<T, false>(p, aux, count, (unsigned)blocks, per_thread, stream);
            return check_launch("cross_entropy (thread per sample)");
        }
    }
    ce_samples<T, 0, true, 1><<<(unsigned)blocks, kSampleThreads, 0, stream>>>(p, aux, count);
    return check_launch("cross_entropy (thread per sample)");
}

/* Which main kernel: -1 thread per sample, -2 two-pass rows. */
inline int choose_kernel(const ploss_ce_problem &p) { return p.x_sc != 1 || p.C <= 32 ? -1 : -2; }

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
    int kind = -1, per_thread = 1;
    int64_t blocks = 0;
    if (count > 0) {
        kind = choose_kernel(p);
        if (kind == -2) {
            blocks = count < kMaxBlocks ? count : kMaxBlocks;
        } else {
            per_thread = samples_per_thread<T>(p);
            /* pairs: two runs per thread, half the blocks to start (bench/RESULTS.md) */
            blocks = (int64_t)grid_blocks(count / per_thread, kSampleThreads * per_thread, kMaxBlocks);
        }
    }
    const int64_t label_blocks =
        label_pass ? (int64_t)grid_blocks(count, kSampleThreads * kLabelsPerThread, 4096) : 0;

    /* workspace: [part_loss | part_w | divisor | label partials | weights], 256-byte
     * aligned pieces */
    using A = acc_t<T>;
    const bool need_w = reduced && mean && index && !label_pass && count > 0;
    const size_t sz_loss = reduced ? align_up((size_t)blocks * sizeof(double)) : 0;
    const size_t sz_w = need_w ? align_up((size_t)blocks * sizeof(double)) : 0;
    const size_t sz_div = label_pass ? 256 : 0;
    const size_t sz_lab = label_pass ? align_up((size_t)label_blocks * sizeof(double)) : 0;
    const bool weights = p.w != nullptr && count > 0;
    const size_t sz_wts = weights ? align_up((size_t)p.C * sizeof(A)) : 0;
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
        ploss_status st = check_launch("cross_entropy (label pass)");
        if (st == PLOSS_OK) /* the partials' fixed-order sum, as the row engine's label pass */
            st = row_engine::launch_sum_partials(lab, label_blocks, (double *)aux.divisor, stream);
        if (st != PLOSS_OK)
            return st;
    }

    if (count > 0) {
        ploss_status st = PLOSS_OK;
        if (kind == -2) {
            ce_rows_2pass<T, kTwoPassThreads><<<(unsigned)blocks, kTwoPassThreads, 0, stream>>>(p, aux, count);
            st = check_launch("cross_entropy (two-pass rows)");
        } else if (kind == -1) {
            st = launch_samples<T>(p, aux, count, blocks, per_thread, stream);
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


/* Class-index targets on rows with a contiguous class axis: the row engine. */
template <class T, bool W>
ploss_status run_engine_policy(ploss_ctx_t *ctx, const ploss_ce_problem &p, const row_engine::RowArgs &a);

template <class T> ploss_status run_engine(ploss_ctx_t *ctx, const ploss_ce_problem &p)
{
    namespace re = row_engine;
    re::RowArgs a = re::row_args(p);
    a.state = p.lse; a.state_dtype = p.lse_dtype; a.st_sn = p.lse_sn; a.st_ss = p.lse_ss;
    if (p.w)
        return run_engine_policy<T, true>(ctx, p, a);
    return run_engine_policy<T, false>(ctx, p, a);
}

template <class T, bool W>
ploss_status run_engine_policy(ploss_ctx_t *ctx, const ploss_ce_problem &p, const row_engine::RowArgs &a)
{
    namespace re = row_engine;
    re::CrossEntropyPolicy<W> pol = {};
    pol.a = (float)p.a;
    pol.b = (float)p.b;
    pol.csum_plain = (float)(p.a + p.b * (double)p.C);
    pol.n_classes = (float)p.C;
    pol.w_raw = p.w; pol.w_dtype = p.w_dtype; pol.w_s = p.w_s;
    const size_t extra = p.w ? re::class_values_bytes(p.C) : 0;
    return re::run<T>(ctx, a, pol, extra, [&](char *ws, cudaStream_t stream, re::CrossEntropyPolicy<W> &q) {
        return p.w ? re::convert_class_values(p.w, p.w_dtype, p.w_s, p.C, ws, stream, &q.w, &q.wsum) : PLOSS_OK;
    });
}

} // namespace

/* f32 class indices without class weights on a strided class axis, C ≤ 32 (N×C×H×W
 * segmentation maps): the per-sample kernels of sample_policies.cu, whose shared-memory
 * tiles keep more bytes in flight than ce_samples' registers; for 16-bit logits the
 * register pairs here are as fast or faster (bench/RESULTS.md). */
static bool to_sample_kernels(const ploss_ce_problem *p)
{
    return p->x_dtype == PLOSS_F32 && p->target_kind == PLOSS_TARGET_INDEX && !p->w && p->x_sc != 1 && p->C <= 32;
}

static ploss_status run_sample_kernels(ploss_ctx_t *ctx, const ploss_ce_problem *p)
{
    ploss_sample_problem q = {};
    q.pass = p->pass; q.reduction = p->reduction; q.loss_kind = PLOSS_SAMPLE_CROSS_ENTROPY;
    q.N = p->N; q.S = p->S; q.C = p->C;
    q.x = p->x; q.x_dtype = p->x_dtype; q.x_sn = p->x_sn; q.x_ss = p->x_ss; q.x_sc = p->x_sc;
    q.t = p->t; q.t_dtype = p->t_dtype; q.t_sn = p->t_sn; q.t_ss = p->t_ss;
    q.ignore_index = p->ignore_index; q.ls_a = p->a; q.ls_b = p->b; q.scale = p->scale;
    q.loss = p->loss; q.loss_dtype = p->loss_dtype; q.l_sn = p->l_sn; q.l_ss = p->l_ss;
    q.state = p->lse; q.state_dtype = p->lse_dtype; q.n_state = 1; q.st_sn = p->lse_sn; q.st_ss = p->lse_ss;
    q.grad_loss = p->grad_loss; q.gl_dtype = p->gl_dtype; q.gl_sn = p->gl_sn; q.gl_ss = p->gl_ss;
    q.grad = p->grad; q.g_sn = p->g_sn; q.g_ss = p->g_ss; q.g_sc = p->g_sc;
    return ploss_cuda_sample_policies(ctx, &q);
}

extern "C" ploss_status ploss_cuda_cross_entropy(ploss_ctx_t *ctx, const ploss_ce_problem *p)
{
    if (to_sample_kernels(p))
        return run_sample_kernels(ctx, p);
    return dispatch_float(p->x_dtype, "input", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (sizeof(T) <= 4) {
            if (p->target_kind == PLOSS_TARGET_INDEX && row_engine::serves<T>(p->x_sc, p->C) && p->C > 32) {
                const ploss_status st = run_engine<T>(ctx, *p);
                if (st != PLOSS_ERR_UNSUPPORTED)
                    return st;
            }
        }
        return run_typed<T>(ctx, *p);
    });
}
