/*
 * sigmoid.cu — CUDA backend of the elementwise sigmoid family: binary_cross_entropy_with_logits
 * and sigmoid_focal (LOSSES.md §3.1; formulas in core/sigmoid.h and core/ploss.h).
 *
 * One elementwise kernel, templated over the input and target storage types, computes in
 * fp32 (f64 for f64 input).  A dense problem (one collapsed axis) walks k·stride; any other
 * layout decodes the row-major index per element.  Reduced losses are summed in the same
 * pass: per-thread sums, a CUB block reduction, one partial per block in the context's
 * workspace (a fixed grid that depends on the element count only), then one block adds the
 * partials in a fixed order — deterministic, no atomics, no elementwise loss buffer, no
 * host synchronisation.
 */
#include <float.h>

#include "common.cuh"
#include "../core/sigmoid.h"

namespace ploss_cuda {
namespace {

constexpr int THREADS = 256;
constexpr int64_t MAX_BLOCKS = 8192; /* partials per reduction: 64 KiB of workspace */
constexpr int FINISH_THREADS = 1024;
constexpr int ILP = 4; /* elements in flight per thread */

__device__ __forceinline__ float m_exp(float v) { return expf(v); }
__device__ __forceinline__ double m_exp(double v) { return exp(v); }
__device__ __forceinline__ float m_log1p(float v) { return log1pf(v); }
__device__ __forceinline__ double m_log1p(double v) { return log1p(v); }
__device__ __forceinline__ float m_abs(float v) { return fabsf(v); }
__device__ __forceinline__ double m_abs(double v) { return fabs(v); }
__device__ __forceinline__ float m_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double m_pow(double a, double b) { return pow(a, b); }
__device__ __forceinline__ float m_min(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ double m_min(double a, double b) { return fmin(a, b); }
template <class A> __device__ __forceinline__ A max_finite();
template <> __device__ __forceinline__ float max_finite<float>() { return FLT_MAX; }
template <> __device__ __forceinline__ double max_finite<double>() { return DBL_MAX; }

/* q^γ with the common exponents exact and cheap (0^0 = 1, as pow). */
template <class A> __device__ __forceinline__ A pow_gamma(A q, A gamma)
{
    if (gamma == A(2))
        return q * q;
    if (gamma == A(1))
        return q;
    if (gamma == A(0))
        return A(1);
    return m_pow(q, gamma);
}

/* Loss and ∂loss/∂x of one element (before the upstream gradient); mirrors element() in
 * core/cpu/sigmoid.c. */
template <class A>
__device__ __forceinline__ void element(ploss_sigmoid_kind kind, A a1, A a0, A gamma, A x, A y, A w, A pw,
                                        A &loss, A &dx)
{
    const A e = m_exp(-m_abs(x)), lg = m_log1p(e);
    const A sp_pos = (x > A(0) ? x : A(0)) + lg;
    const A sp_neg = (x < A(0) ? -x : A(0)) + lg;
    const A inv = A(1) / (A(1) + e);
    const A sig_pos = x >= A(0) ? inv : e * inv;
    const A sig_neg = x >= A(0) ? e * inv : inv;
    const A pos = y != A(0) ? y * sp_neg : A(0), neg = y != A(1) ? (A(1) - y) * sp_pos : A(0);
    const A p_minus_y = x >= A(0) ? (A(1) - y) - sig_neg : sig_pos - y;

    if (kind == PLOSS_SIGMOID_BCE) {
        loss = w * (pw * pos + neg);
        dx = w * ((y != A(1) ? (A(1) - y) * sig_pos : A(0)) - (y != A(0) ? pw * y * sig_neg : A(0)));
    } else if (kind == PLOSS_SIGMOID_FOCAL_TORCHVISION) {
        const A Aw = a1 * y + a0 * (A(1) - y);
        const A q = y * sig_neg + (A(1) - y) * sig_pos;
        const A ce = pos + neg;
        const A qg = pow_gamma(q, gamma);
        loss = Aw * qg * ce;
        A d = qg * p_minus_y;
        if (gamma != A(0) && q > A(0))
            d += gamma * (A(1) - A(2) * y) * ce * qg * (sig_pos * sig_neg / q);
        dx = Aw * d;
    } else {
        /* 0 < γ < 1: |p − y|^(γ−1) is ill-conditioned at the kink y ≈ p.  σ(x) in f32 carries
         * ~1 ulp (6e-8) of absolute error, a relative error 6e-8/|p − y| on |p − y| and
         * (1 − γ)× that on the gradient factor: 1e-3 at |p − y| ≈ 3e-5 (issue 5, a focal
         * reference γ = 0.5 gradient off by 0.011 of 9.78).  Near the kink (|p − y| < 2^-6,
         * a few per cent of the elements for spread soft labels) p − y is re-formed in double
         * (x and y are exact in double), so only the final rounding to A remains. */
        A pmy = p_minus_y;
        if (sizeof(A) < sizeof(double) && gamma > A(0) && gamma < A(1) && m_abs(pmy) < A(0.015625)) {
            const double xd = (double)x, ed = exp(-fabs(xd)), invd = 1.0 / (1.0 + ed);
            pmy = (A)((xd >= 0.0 ? invd : ed * invd) - (double)y);
        }
        const A ad = m_abs(pmy);
        const A c = pow_gamma(ad, gamma);
        const A ev = (y != A(0) ? a1 * y * sp_neg : A(0)) + (y != A(1) ? a0 * (A(1) - y) * sp_pos : A(0));
        const A de = (y != A(1) ? a0 * (A(1) - y) * sig_pos : A(0)) - (y != A(0) ? a1 * y * sig_neg : A(0));
        loss = c * ev;
        A d = c * de;
        if (gamma != A(0) && ad > A(0)) { /* subgradient 0 at the kink y = p */
            const A m = m_min(pow_gamma(ad, gamma - A(1)), max_finite<A>());
            d += gamma * m * (pmy > A(0) ? A(1) : A(-1)) * (sig_pos * sig_neg) * ev;
        }
        dx = d;
    }
}

/* Offsets of element k of every tensor: dense (one axis) or decoded per dim. */
struct offsets {
    int64_t x, t, w, pw, l, gl, g;
};

template <bool DENSE>
__device__ __forceinline__ offsets offsets_of(const ploss_sigmoid_problem &p, int64_t k)
{
    offsets o;
    if (DENSE) {
        o.x = k * p.x_st[0]; o.t = k * p.t_st[0]; o.w = k * p.w_st[0]; o.pw = k * p.pw_st[0];
        o.l = k * p.l_st[0]; o.gl = k * p.gl_st[0]; o.g = k * p.g_st[0];
        return o;
    }
    o.x = o.t = o.w = o.pw = o.l = o.gl = o.g = 0;
    for (int d = p.ndim - 1; d >= 0; --d) {
        const int64_t i = k % p.shape[d];
        k /= p.shape[d];
        o.x += i * p.x_st[d]; o.t += i * p.t_st[d]; o.w += i * p.w_st[d]; o.pw += i * p.pw_st[d];
        o.l += i * p.l_st[d]; o.gl += i * p.gl_st[d]; o.g += i * p.g_st[d];
    }
    return o;
}

/* One pass over the elements: elementwise loss (NONE), block partial sums (MEAN/SUM),
 * gradient.  omega_host: ω of a fused pass; backward reads the upstream gradient here. */
template <class T, class TT, bool DENSE>
__global__ void __launch_bounds__(THREADS, 4)
sigmoid_kernel(const ploss_sigmoid_problem p, double omega_host, double *partials)
{
    using A = acc_t<T>;
    const T *x = (const T *)p.x;
    const TT *t = (const TT *)p.t;
    T *grad = (T *)p.grad;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD;
    const bool want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool none = p.reduction == PLOSS_REDUCTION_NONE;
    const bool per_element_up = p.pass == PLOSS_PASS_BACKWARD && none;

    A omega = (A)omega_host;
    if (p.pass == PLOSS_PASS_BACKWARD && !none) {
        const double up = load_dyn(p.grad_loss, p.gl_dtype, 0);
        omega = (A)(p.reduction == PLOSS_REDUCTION_MEAN ? up / (double)p.numel : up);
    }
    const A a1 = (A)p.a1, a0 = (A)p.a0, gamma = (A)p.gamma;

    /* ILP elements per thread and step: all their loads are issued before the math */
    A sum = A(0);
    const int64_t gs = grid_stride();
    for (int64_t base = thread_index(); base < p.numel; base += gs * ILP) {
        A xv[ILP], yv[ILP];
#pragma unroll
        for (int u = 0; u < ILP; ++u) {
            const int64_t k = base + u * gs;
            if (k < p.numel) {
                const offsets o = offsets_of<DENSE>(p, k);
                xv[u] = to_acc(x[o.x]);
                yv[u] = to_acc(t[o.t]);
            }
        }
#pragma unroll
        for (int u = 0; u < ILP; ++u) {
            const int64_t k = base + u * gs;
            if (k >= p.numel)
                break;
            const offsets o = offsets_of<DENSE>(p, k); /* recomputed: fewer live registers */
            const A wv = p.w ? load_float_dyn<A>(p.w, p.w_dtype, o.w) : A(1);
            const A pwv = p.pw ? load_float_dyn<A>(p.pw, p.pw_dtype, o.pw) : A(1);
            A loss, dx;
            element<A>(p.kind, a1, a0, gamma, xv[u], yv[u], wv, pwv, loss, dx);
            if (want_loss) {
                if (none)
                    store_dyn(p.loss, p.loss_dtype, o.l, (double)loss);
                else
                    sum += loss;
            }
            if (want_grad) {
                const A om = per_element_up ? (A)load_dyn(p.grad_loss, p.gl_dtype, o.gl) : omega;
                grad[o.g] = from_acc<T>(om * dx);
            }
        }
    }
    if (want_loss && !none) {
        const double block_sum = (double)block_reduce<THREADS>(sum, SumOp());
        if (threadIdx.x == 0)
            partials[blockIdx.x] = block_sum;
    }
}

/* One block: the partials in a fixed order, then loss = Σ / divisor. */
__global__ void __launch_bounds__(FINISH_THREADS)
sigmoid_finish(const double *partials, int64_t nparts, double divisor, void *loss, ploss_dtype loss_dtype)
{
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < nparts; i += FINISH_THREADS)
        s += partials[i];
    s = block_reduce<FINISH_THREADS>(s, SumOp());
    if (threadIdx.x == 0)
        store_dyn(loss, loss_dtype, 0, s / divisor); /* 0/0 = NaN for an empty MEAN */
}

} // namespace
} // namespace ploss_cuda

using namespace ploss_cuda;

extern "C" ploss_status ploss_cuda_sigmoid(ploss_ctx_t *ctx, const ploss_sigmoid_problem *p)
{
    const bool want_loss = p->pass != PLOSS_PASS_BACKWARD;
    const bool reduced = p->reduction != PLOSS_REDUCTION_NONE;
    const bool need_partials = want_loss && reduced;
    if (p->numel == 0 && !need_partials)
        return PLOSS_OK;

    const unsigned blocks = grid_blocks((p->numel + ILP - 1) / ILP, THREADS, MAX_BLOCKS);
    double *partials = NULL;
    if (need_partials) {
        void *ws = NULL;
        ploss_status st = ploss_workspace(ctx, (size_t)blocks * sizeof(double), &ws);
        if (st)
            return st;
        partials = (double *)ws;
    }
    double omega = 0.0;
    if (p->pass == PLOSS_PASS_FUSED)
        omega = p->reduction == PLOSS_REDUCTION_MEAN ? (p->numel ? p->scale / (double)p->numel : 0.0) : p->scale;
    const bool dense = p->ndim == 1;
    cudaStream_t stream = stream_of(ctx);

    ploss_status st = dispatch_float(p->x_dtype, "input", [&](auto xtag) {
        using T = typename decltype(xtag)::type;
        return dispatch_float(p->t_dtype, "target", [&](auto ttag) {
            using TT = typename decltype(ttag)::type;
            if (dense)
                sigmoid_kernel<T, TT, true><<<blocks, THREADS, 0, stream>>>(*p, omega, partials);
            else
                sigmoid_kernel<T, TT, false><<<blocks, THREADS, 0, stream>>>(*p, omega, partials);
            return check_launch("sigmoid_kernel");
        });
    });
    if (st || !need_partials)
        return st;
    const double divisor = p->reduction == PLOSS_REDUCTION_MEAN ? (double)p->numel : 1.0;
    sigmoid_finish<<<1, FINISH_THREADS, 0, stream>>>(partials, (int64_t)blocks, divisor, p->loss, p->loss_dtype);
    return check_launch("sigmoid_finish");
}
