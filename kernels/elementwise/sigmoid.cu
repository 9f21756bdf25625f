/*
 * sigmoid.cu — CUDA backend of the elementwise losses: the sigmoid family
 * (binary_cross_entropy_with_logits, sigmoid_focal) and the pointwise criteria (mse_loss,
 * l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy, soft_margin_loss, kl_div,
 * hinge_embedding_loss, poisson_nll_loss, hinge_loss, target_weighted_mse_loss); formulas in
 * core/engines/elementwise.h and core/ploss_losses.h.
 *
 * Two elementwise kernels compute in fp32 (f64 for f64 input):
 *  - sigmoid_fast<T, KIND, G2>: the common case — x and target of one dtype, dense, unit
 *    stride, 16-byte aligned (as the gradient and an elementwise loss), no weight and no
 *    pos_weight, not a backward pass with reduction NONE.  Whole 16-byte vectors (4 f32,
 *    8 f16/bf16, 2 f64) with VPT vectors per tensor in flight per thread, the sigmoid kind
 *    and γ = 2 compile-time (branch-free sign-folded formulas, fast f32 exp / reciprocal
 *    and a cancellation-free log1p, see fast_element), other γ through element() with its
 *    kink handling, the pointwise kinds in one kernel that switches on the kind (MSE and
 *    BCE on probabilities in kernels of their own); a scalar tail of numel % N elements.
 *  - sigmoid_kernel<T, DENSE>: everything else (strides, broadcast weight/pos_weight, a
 *    target of another float dtype (read by its dtype at run time), misaligned views,
 *    elementwise upstream gradient), with the accurate libdevice functions.  A dense
 *    problem (one collapsed axis) walks k·stride; any other layout decodes the row-major
 *    index once per element.
 * Reduced losses are summed in the same pass: per-thread sums, a CUB block reduction, one
 * partial per block in the context's workspace (a fixed grid that depends on the element
 * count, dtype and kernel only), then one block adds the partials in a fixed order —
 * deterministic, no atomics, no elementwise loss buffer, no host synchronisation.  The
 * weighted 'mean' of MSE and L1 (over Σ w) first sums the weight the same way into the
 * workspace, where the general kernel and the loss read it (run_weight_mean).
 */
#include <float.h>
#include <string.h>

#include "common.cuh"
#include "partials.cuh"
#include "elementwise.h"

namespace ploss_cuda {
namespace sigmoid_kernels {
namespace {

constexpr int THREADS = 256;
constexpr int64_t MAX_BLOCKS = 8192; /* partials per reduction: 64 KiB of workspace (a weighted
                                        mean's two reductions: 128 KiB) */
constexpr int ILP = 2; /* general kernel: elements in flight per thread (4 spills with the saved offsets) */

__device__ __forceinline__ float m_exp(float v) { return expf(v); }
__device__ __forceinline__ double m_exp(double v) { return exp(v); }
__device__ __forceinline__ float m_log(float v) { return logf(v); }
__device__ __forceinline__ double m_log(double v) { return log(v); }
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

/* Loss and ∂loss/∂x of one element of the pointwise criteria; mirrors pointwise() in
 * core/cpu/elementwise/sigmoid_impl.h (PyTorch's thresholds and signs: sign(0) = 0, the
 * quadratic part strictly inside |d| < β, BCE's logs clamped at −100 and its gradient's
 * denominator at 1e-12). */
static_assert(PLOSS_EW_KIND_COUNT == 18, "a new kind of core/engines/elementwise.h: add its maths to "
                                        "pointwise_element or element and its launch here");
template <class A>
__device__ __forceinline__ void pointwise_element(ploss_sigmoid_kind kind, A beta, A x, A y, A w, A &loss, A &dx)
{
    const A d = x - y, ad = m_abs(d);
    const A sgn = d > A(0) ? A(1) : d < A(0) ? A(-1) : A(0);
    switch (kind) {
    case PLOSS_EW_MSE: /* w: the weight, 1 without one (the fast kernels') */
        loss = w * (d * d);
        dx = w * (A(2) * d);
        break;
    case PLOSS_EW_TARGET_WEIGHTED_MSE: {
        const A dw = x - w * y;
        loss = dw * dw;
        dx = A(2) * dw;
        break;
    }
    case PLOSS_EW_L1:
        loss = w * ad;
        dx = w * sgn;
        break;
    case PLOSS_EW_SMOOTH_L1: { /* β = 0: never inside, the L1 loss; NaN d inside where β > 0 */
        const bool in = ad < beta || (d != d && beta > A(0));
        loss = in ? A(0.5) * d * d / beta : ad - A(0.5) * beta;
        dx = in ? d / beta : sgn;
        break;
    }
    case PLOSS_EW_HUBER: {
        const bool in = ad < beta || d != d;
        loss = w * (in ? A(0.5) * d * d : beta * (ad - A(0.5) * beta));
        dx = w * (in ? d : beta * sgn);
        break;
    }
    case PLOSS_EW_BCE_PROB: {
        const A lx = m_log(x), l1x = m_log1p(-x);
        const A cx = lx < A(-100) ? A(-100) : lx, c1x = l1x < A(-100) ? A(-100) : l1x;
        const A den = (A(1) - x) * x;
        loss = w * ((y - A(1)) * c1x - y * cx);
        dx = w * (x - y) / (den < A(1e-12) ? A(1e-12) : den);
        break;
    }
    case PLOSS_EW_SOFT_MARGIN: {
        const A z = -y * x, e = m_exp(-m_abs(z)), r = A(1) / (A(1) + e);
        loss = (z > A(0) ? z : A(0)) + m_log1p(e);
        dx = -y * (z >= A(0) ? r : e * r);
        break;
    }
    case PLOSS_EW_KL_DIV:
        loss = (y == A(0) ? A(0) : y * m_log(y)) - y * x;
        dx = -y;
        break;
    case PLOSS_EW_HINGE_EMBEDDING: { /* margin m = beta; the clamp keeps a NaN, its gradient
                                        passes where m − x >= 0 */
        const A h = beta - x;
        loss = (y != A(1) ? (h < A(0) ? A(0) : h) : A(0)) + (y != A(-1) ? x : A(0));
        dx = (y != A(1) ? (h >= A(0) ? A(-1) : A(0)) : A(0)) + (y != A(-1) ? A(1) : A(0));
        break;
    }
    case PLOSS_EW_HINGE: { /* Torch7's MarginCriterion, margin m = beta: −y where y·x < m */
        const A z = beta - y * x;
        loss = z < A(0) ? A(0) : z;
        dx = y * x < beta ? -y : A(0);
        break;
    }
    case PLOSS_EW_POISSON_NLL_LOG:
    case PLOSS_EW_POISSON_NLL:
    case PLOSS_EW_POISSON_NLL_LOG_FULL:
    case PLOSS_EW_POISSON_NLL_FULL: { /* ε = beta; with full, Stirling's log y! where y > 1 */
        if (kind == PLOSS_EW_POISSON_NLL_LOG || kind == PLOSS_EW_POISSON_NLL_LOG_FULL) {
            const A e = m_exp(x);
            loss = e - y * x;
            dx = e - y;
        } else {
            const A xe = x + beta;
            loss = x - y * m_log(xe);
            dx = A(1) - y / xe;
        }
        if ((kind == PLOSS_EW_POISSON_NLL_LOG_FULL || kind == PLOSS_EW_POISSON_NLL_FULL) && y > A(1))
            loss += y * m_log(y) - y + A(0.5) * m_log(A(6.283185307179586) * y);
        break;
    }
    case PLOSS_EW_KL_DIV_LOG_TARGET: {
        const A e = m_exp(y);
        loss = e * (y - x);
        dx = -e;
        break;
    }
    default: /* no such kind (ploss_run_loss refuses its loss first) */
        loss = dx = A(NAN);
        break;
    }
}

/* Loss and ∂loss/∂x of one element (before the upstream gradient); mirrors element() in
 * core/cpu/elementwise/sigmoid_impl.h. */
template <class A>
__device__ __forceinline__ void element(ploss_sigmoid_kind kind, A a1, A a0, A gamma, A beta, A x, A y, A w, A pw,
                                        A &loss, A &dx)
{
    if (PLOSS_EW_IS_POINTWISE(kind)) {
        pointwise_element<A>(kind, beta, x, y, w, loss, dx);
        return;
    }
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
        /* ce·σ(x)σ(−x) first, and nothing where that factor is 0 (|x| past float's σ range
         * or ∞): not γ·ce overflowing to ∞ times 0 */
        const A ss = sig_pos * sig_neg;
        if (gamma != A(0) && q != A(0) && ss != A(0)) /* q < 0: a target outside [0, 1] */
            d += gamma * (A(1) - A(2) * y) * qg * (ce * (ss / q));
        dx = Aw * d;
    } else {
        /* 0 < γ < 1: |p − y|^(γ−1) is ill-conditioned at the kink y ≈ p.  σ(x) in f32 carries
         * ~1 ulp (6e-8) of absolute error, a relative error 6e-8/|p − y| on |p − y| and
         * (1 − γ)× that on the gradient factor: 1e-3 at |p − y| ≈ 3e-5 (a focal
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
        const A ss = sig_pos * sig_neg; /* 0: the term is 0 (ev may be ∞) */
        if (gamma != A(0) && ad > A(0) && ss != A(0)) { /* subgradient 0 at the kink y = p */
            const A m = m_min(pow_gamma(ad, gamma - A(1)), max_finite<A>());
            d += gamma * m * (pmy > A(0) ? A(1) : A(-1)) * ss * ev;
        }
        dx = d;
    }
}

/* ------------------------------------------------------------------------------------ */
/* General kernel: any layout, broadcast weight / pos_weight, mixed target dtype         */
/* ------------------------------------------------------------------------------------ */

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

/* The upstream gradient factor ω of a reduced pass: the fused multiplier, or the scalar
 * upstream gradient of a backward pass (÷ mean_divisor for MEAN).  A weighted mean divides by Σ w
 * on the device instead (0 where Σ w = 0, as the host's ω for no elements). */
template <class A> __device__ __forceinline__ A reduced_omega(const ploss_sigmoid_problem &p, double omega_host)
{
    const bool mean = p.reduction == PLOSS_REDUCTION_MEAN;
    double up = omega_host;
    if (p.pass == PLOSS_PASS_BACKWARD && p.reduction != PLOSS_REDUCTION_NONE) {
        up = load_dyn(p.grad_loss, p.gl_dtype, 0);
        if (mean && !p.weight_sum)
            up /= (double)p.mean_divisor;
    }
    if (mean && p.weight_sum)
        up = *p.weight_sum != 0.0 ? up / *p.weight_sum : 0.0;
    return (A)up;
}

/* Per-block partial sums of the weight over the elements (a weighted mean's divisor), each
 * weight as the loss reads it (in A) and summed in double: a fixed grid for the element
 * count, so the sum is deterministic. */
template <class A, bool DENSE>
__global__ void __launch_bounds__(THREADS) weight_sum_kernel(const ploss_sigmoid_problem p, double *partials)
{
    double sum = 0.0;
    for (int64_t k = thread_index(); k < p.numel; k += grid_stride())
        sum += (double)load_float_dyn<A>(p.w, p.w_dtype, offsets_of<DENSE>(p, k).w);
    const double block_sum = block_reduce<THREADS>(sum, SumOp());
    if (threadIdx.x == 0)
        partials[blockIdx.x] = block_sum;
}

/* One pass over the elements: elementwise loss (NONE), block partial sums (MEAN/SUM),
 * gradient.  omega_host: ω of a fused pass; backward reads the upstream gradient here.
 * The offsets of element k are decoded once: the load phase keeps the two output offsets
 * it needs (loss or elementwise upstream gradient, gradient) for the store phase. */
template <class T, bool DENSE>
__global__ void __launch_bounds__(THREADS, 4)
sigmoid_kernel(const ploss_sigmoid_problem p, double omega_host, double *partials)
{
    using A = acc_t<T>;
    const T *x = (const T *)p.x;
    T *grad = (T *)p.grad;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD;
    const bool want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool none = p.reduction == PLOSS_REDUCTION_NONE;
    const bool per_element_up = p.pass == PLOSS_PASS_BACKWARD && none;
    const A omega = reduced_omega<A>(p, omega_host);
    const A a1 = (A)p.a1, a0 = (A)p.a0, gamma = (A)p.gamma, beta = (A)p.beta;

    /* ILP elements per thread and step: all their loads are issued before the math */
    A sum = A(0);
    const int64_t gs = grid_stride();
    for (int64_t base = thread_index(); base < p.numel; base += gs * ILP) {
        A xv[ILP], yv[ILP], wv[ILP], pwv[ILP];
        int64_t o_out[ILP], o_g[ILP]; /* loss (forward/fused) or grad_loss (backward); grad */
#pragma unroll
        for (int u = 0; u < ILP; ++u) {
            const int64_t k = base + u * gs;
            if (k < p.numel) {
                const offsets o = offsets_of<DENSE>(p, k);
                xv[u] = to_acc(x[o.x]);
                yv[u] = load_float_dyn<A>(p.t, p.t_dtype, o.t);
                wv[u] = p.w ? load_float_dyn<A>(p.w, p.w_dtype, o.w) : A(1);
                pwv[u] = p.pw ? load_float_dyn<A>(p.pw, p.pw_dtype, o.pw) : A(1);
                o_out[u] = per_element_up ? o.gl : o.l;
                o_g[u] = o.g;
            }
        }
#pragma unroll
        for (int u = 0; u < ILP; ++u) {
            const int64_t k = base + u * gs;
            if (k >= p.numel)
                break;
            A loss, dx;
            element<A>(p.kind, a1, a0, gamma, beta, xv[u], yv[u], wv[u], pwv[u], loss, dx);
            if (want_loss) {
                if (none)
                    store_dyn(p.loss, p.loss_dtype, o_out[u], (double)loss);
                else
                    sum += loss;
            }
            if (want_grad) {
                const A om = per_element_up ? (A)load_dyn(p.grad_loss, p.gl_dtype, o_out[u]) : omega;
                grad[o_g[u]] = from_acc<T>(PLOSS_EW_UPSTREAM(p.kind, om, dx, xv[u], yv[u], beta));
            }
        }
    }
    if (want_loss && !none) {
        const double block_sum = (double)block_reduce<THREADS>(sum, SumOp());
        if (threadIdx.x == 0)
            partials[blockIdx.x] = block_sum;
    }
}

/* ------------------------------------------------------------------------------------ */
/* Fast kernel: x, target (same dtype) and gradient dense, unit stride, 16-byte aligned; */
/* no weight, no pos_weight; the loss kind and γ = 2 are compile-time                    */
/* ------------------------------------------------------------------------------------ */

constexpr int VPT = 2; /* 16-byte vectors in flight per thread and tensor */

/* log1p(e) for e in [0, 1] without the cancellation of log(1 + e):
 *   log1p(e) = 2·atanh(s),  s = e / (2 + e) ∈ [0, 1/3],  2·atanh(s) = s·P(s²),
 *   P(z) = 2 + z·(c0 + z·(c1 + z·(c2 + z·c3))) ≈ 2·Σ_k z^k / (2k + 1) on z ∈ [0, 1/9]:
 * c0..c3 fitted here (weighted least squares for the relative error, iteratively
 * reweighted towards equal ripple), max relative error of P 4.5e-9 (Taylor to z^6 needs
 * six FMAs for 1.4e-8).  Emulated in f32 over e ∈ [1e-30, 1] the result is within 3.7 ulp
 * of log1p (the rounding of 2 + e and of the quotient dominate; exact 0 at e = 0); the
 * rcp.approx quotient adds ≤ 2 ulp to s. */
__device__ __forceinline__ float log1p_unit(float e)
{
    const float s = __fdividef(e, 2.0f + e); /* MUFU.RCP: 2 ulp for a divisor in [2, 3] */
    const float z = s * s;
    float p = 2.801199279e-01f;
    p = fmaf(p, z, 2.800180383e-01f);
    p = fmaf(p, z, 4.002152735e-01f);
    p = fmaf(p, z, 6.666641628e-01f);
    p = fmaf(p, z, 2.0f);
    return s * p;
}

/* exp(−a) for a ≥ 0 (exp_ftz: terms below 1.2e-38 flush to 0, next to values ≥ 0.5). */
__device__ __forceinline__ float exp_neg_ftz(float a) { return exp_ftz(-a); }

template <class A> struct logit_parts {
    A a, r, er, lg;
};
__device__ __forceinline__ logit_parts<float> parts_of(float x)
{
    logit_parts<float> s;
    s.a = fabsf(x);
    const float e = exp_neg_ftz(s.a);
    s.r = __fdividef(1.0f, 1.0f + e);
    s.er = e * s.r;
    s.lg = log1p_unit(e);
    return s;
}
__device__ __forceinline__ logit_parts<double> parts_of(double x)
{
    logit_parts<double> s;
    s.a = fabs(x);
    const double e = exp(-s.a);
    s.r = 1.0 / (1.0 + e);
    s.er = e * s.r;
    s.lg = log1p(e);
    return s;
}

/* KIND of the fast kernel for the pointwise criteria: the kind is read at run time (one
 * uniform switch per element; the pass is memory-bound), so one kernel per dtype serves them.
 * Two kinds have kernels of their own (KIND = the kind): BCE on probabilities (two
 * logarithms and a division an element, past the memory bound with the switch) and MSE
 * (the most used; in 16 bits, eight switches a 16-byte vector kept it off the bound). */
constexpr int KIND_POINTWISE = -1;

/* ω·loss and ω·∂loss/∂x of one element for a compile-time kind (KIND_POINTWISE: the
 * problem's kind); G2: γ = 2 (else the general element() with the run-time γ, its kink
 * handling included).
 *
 * The γ = 2 / BCE forms are written in the frame of x ≥ 0 and the sign s = sign(x) (+1 at
 * 0) is applied to the gradient at the end.  With yd the target weight of the softplus
 * term that contains a = |x| (x ≥ 0: 1 − y, the term (1−y)·sp(x); x < 0: y, the term
 * y·sp(−x)) and ya the other one (its softplus is lg):
 *   y·sp(−x) + (1−y)·sp(x) = lg + yd·a        (ya + yd = 1)
 *   σ(x) − y = s·(yd − er)                    (x ≥ 0: (1−y) − σ(−x); x < 0: σ(x) − y)
 *   q = y·σ(−x) + (1−y)·σ(x) = ya·er + yd·r,  1 − 2y = s·(yd − ya),  σ(x)σ(−x) = r·er
 * which are the element() formulas with the same roundings of σ(x) − y (no cancellation
 * near p = y = 1) and no 0·inf: the a-term is dropped when its weight is 0 (x = ±inf).
 *   BCE:        ℓ = lg + yd·a,   ∂ℓ/∂x = s·u,  u = yd − er
 *   FOCAL_TV:   ℓ = A·q²·ce,     ∂ℓ/∂x = s·A·q·(q·u + 2(1 − 2ya)·ce·r·er),  A = a₁y + a₀(1−y)
 *   FOCAL_REF:  ℓ = u²·ev,       ∂ℓ/∂x = s·u·(u·(wd·r − wa·er) + 2·r·er·ev),
 *               wy = a₁y, wn = a₀(1−y), (wd, wa) = x ≥ 0 ? (wn, wy) : (wy, wn), ev = (wa+wd)·lg + wd·a
 * (the γ = 2 gradients of element(): qg/q = q, γ|p−y|^(γ−1)·sign = 2(p − y); no kink). */
template <class A, int KIND, bool G2>
__device__ __forceinline__ void fast_element(ploss_sigmoid_kind kind, A x, A y, A a1, A a0, A gamma, A beta, A omega,
                                             A &loss, A &g)
{
    if (KIND == KIND_POINTWISE || PLOSS_EW_IS_POINTWISE(KIND)) {
        const ploss_sigmoid_kind k = KIND == KIND_POINTWISE ? kind : (ploss_sigmoid_kind)KIND;
        A dx;
        pointwise_element<A>(k, beta, x, y, A(1), loss, dx);
        g = PLOSS_EW_UPSTREAM(k, omega, dx, x, y, beta);
        return;
    }
    if (KIND != PLOSS_SIGMOID_BCE && !G2) {
        A l, dx;
        element<A>((ploss_sigmoid_kind)KIND, a1, a0, gamma, beta, x, y, A(1), A(1), l, dx);
        loss = l;
        g = omega * dx;
        return;
    }
    const logit_parts<A> s = parts_of(x);
    const bool neg = x < A(0);
    const A omy = A(1) - y;
    const A yd = neg ? y : omy, ya = neg ? omy : y;
    const A u = yd - s.er;
    const A om = neg ? -omega : omega;
    if (KIND == PLOSS_SIGMOID_BCE) {
        loss = yd != A(0) ? s.lg + yd * s.a : s.lg;
        g = om * u;
    } else if (KIND == PLOSS_SIGMOID_FOCAL_TORCHVISION) {
        const A Aw = a1 * y + a0 * omy;
        const A q = ya * s.er + yd * s.r;
        const A ce = yd != A(0) ? s.lg + yd * s.a : s.lg;
        const A Aq = Aw * q;
        loss = (Aq * q) * ce;
        /* 2(1 − 2·ya) = 2(yd − ya) up to the rounding of 1 − y, as element()'s (1 − 2y) */
        g = (om * Aq) * (q * u + (A(-4) * ya + A(2)) * ce * (s.r * s.er));
    } else {
        const A wy = a1 * y, wn = a0 * omy;
        const A wd = neg ? wy : wn, wa = neg ? wn : wy;
        const A ev = wd != A(0) ? (wa + wd) * s.lg + wd * s.a : (wa + wd) * s.lg;
        loss = (u * u) * ev;
        g = om * u * (u * (wd * s.r - wa * s.er) + A(2) * (s.r * s.er) * ev);
    }
}

/* 16-byte vector of N accumulation values → storage T (round to nearest even, as from_acc;
 * f16/bf16 two at a time). */
template <class V> __device__ __forceinline__ uint32_t bits32(V h) /* __half2 / __nv_bfloat162 */
{
    static_assert(sizeof(V) == sizeof(uint32_t), "a pair of 16-bit values");
    uint32_t w;
    memcpy(&w, &h, sizeof w);
    return w;
}
template <class T> __device__ __forceinline__ uint4 pack16(const acc_t<T> *a);
template <> __device__ __forceinline__ uint4 pack16<float>(const float *a)
{
    return make_uint4(__float_as_uint(a[0]), __float_as_uint(a[1]), __float_as_uint(a[2]), __float_as_uint(a[3]));
}
template <> __device__ __forceinline__ uint4 pack16<double>(const double *a)
{
    uint4 u;
    vec16<double>::set(u, 0, a[0]);
    vec16<double>::set(u, 1, a[1]);
    return u;
}
template <> __device__ __forceinline__ uint4 pack16<__nv_bfloat16>(const float *a)
{
    return make_uint4(bits32(__floats2bfloat162_rn(a[0], a[1])), bits32(__floats2bfloat162_rn(a[2], a[3])),
                      bits32(__floats2bfloat162_rn(a[4], a[5])), bits32(__floats2bfloat162_rn(a[6], a[7])));
}
template <> __device__ __forceinline__ uint4 pack16<__half>(const float *a)
{
    return make_uint4(bits32(__floats2half2_rn(a[0], a[1])), bits32(__floats2half2_rn(a[2], a[3])),
                      bits32(__floats2half2_rn(a[4], a[5])), bits32(__floats2half2_rn(a[6], a[7])));
}

/* N consecutive elementwise losses (f32 or f64) as 16-byte stores; dst 16-byte aligned. */
template <int N, class A> __device__ __forceinline__ void store_losses(A *dst, const A *l)
{
    constexpr int PER = (int)(16 / sizeof(A));
    static_assert(N % PER == 0, "whole 16-byte vectors");
    uint4 *d = (uint4 *)dst;
#pragma unroll
    for (int c = 0; c < N / PER; ++c)
        d[c] = pack16<A>(l + PER * c);
}

/* Dense aligned pass: VPT vectors of x and target per thread and step (their loads issued
 * before the math), grid-stride over vectors with 64-bit vector indices (a few integer
 * instructions per vector, not per element), the numel % N tail one element per thread of
 * the first threads.  Not for backward with reduction NONE (elementwise upstream gradient:
 * general kernel).  The same per-thread sums → block partial → finish scheme as the
 * general kernel. */
template <class T, int KIND, bool G2>
__global__ void __launch_bounds__(THREADS, 4)
sigmoid_fast(const ploss_sigmoid_problem p, double omega_host, double *partials)
{
    using A = acc_t<T>;
    constexpr int N = vec16<T>::N;
    const uint4 *xv = (const uint4 *)p.x;
    const uint4 *tv = (const uint4 *)p.t;
    uint4 *gv = (uint4 *)p.grad;
    A *lv = (A *)p.loss;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD;
    const bool want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool none = p.reduction == PLOSS_REDUCTION_NONE;
    const A omega = reduced_omega<A>(p, omega_host);
    const A a1 = (A)p.a1, a0 = (A)p.a0, gamma = (A)p.gamma, beta = (A)p.beta;
    const int64_t nvec = p.numel / N;

    A sum = A(0);
    const int64_t gs = grid_stride();
    for (int64_t base = thread_index(); base < nvec; base += gs * VPT) {
        uint4 xr[VPT], tr[VPT];
#pragma unroll
        for (int u = 0; u < VPT; ++u) {
            const int64_t v = base + u * gs;
            if (v < nvec) {
                xr[u] = xv[v];
                tr[u] = tv[v];
            }
        }
#pragma unroll
        for (int u = 0; u < VPT; ++u) {
            const int64_t v = base + u * gs;
            if (v >= nvec)
                break;
            A lo[N], go[N];
#pragma unroll
            for (int e = 0; e < N; ++e)
                fast_element<A, KIND, G2>(p.kind, vec16<T>::get(xr[u], e), vec16<T>::get(tr[u], e), a1, a0, gamma,
                                          beta, omega, lo[e], go[e]);
            if (want_loss) {
                if (none) {
                    store_losses<N>(lv + v * N, lo);
                } else {
#pragma unroll
                    for (int e = 0; e < N; ++e)
                        sum += lo[e];
                }
            }
            if (want_grad)
                gv[v] = pack16<T>(go);
        }
    }
    /* tail: elements nvec·N … numel − 1 (fewer than N) */
    const int64_t k = nvec * N + thread_index();
    if (k < p.numel) {
        A lo, go;
        fast_element<A, KIND, G2>(p.kind, to_acc(((const T *)p.x)[k]), to_acc(((const T *)p.t)[k]), a1, a0, gamma,
                                  beta, omega, lo, go);
        if (want_loss) {
            if (none)
                lv[k] = lo;
            else
                sum += lo;
        }
        if (want_grad)
            ((T *)p.grad)[k] = from_acc<T>(go);
    }
    if (want_loss && !none) {
        const double block_sum = (double)block_reduce<THREADS>(sum, SumOp());
        if (threadIdx.x == 0)
            partials[blockIdx.x] = block_sum;
    }
}

} // namespace

/* The fast kernel applies: x and target of one dtype, dense with unit stride, no weight
 * or pos_weight, every vector-accessed pointer (x, target, gradient, elementwise loss)
 * 16-byte aligned, and not a backward pass with reduction NONE.  A view whose byte_offset
 * is not a multiple of 16 bytes takes the general kernel. */
static bool fast_path_applies(const ploss_sigmoid_problem *p)
{
    const bool want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const bool none = p->reduction == PLOSS_REDUCTION_NONE;
    if (p->w || p->pw || p->x_dtype != p->t_dtype || p->ndim != 1 || p->numel == 0)
        return false;
    if (p->x_st[0] != 1 || p->t_st[0] != 1 || (p->pass == PLOSS_PASS_BACKWARD && none))
        return false;
    const auto aligned = [](const void *ptr) { return ((uintptr_t)ptr & 15u) == 0; };
    if (!aligned(p->x) || !aligned(p->t))
        return false;
    if (want_grad && (p->g_st[0] != 1 || !aligned(p->grad)))
        return false;
    if (want_loss && none && (p->l_st[0] != 1 || !aligned(p->loss)))
        return false;
    return true;
}

template <class T>
static ploss_status launch_fast(const ploss_sigmoid_problem *p, unsigned blocks, cudaStream_t stream, double omega,
                                double *partials)
{
    const bool g2 = p->gamma == 2.0;
    if (p->kind == PLOSS_EW_BCE_PROB) {
        sigmoid_fast<T, PLOSS_EW_BCE_PROB, false><<<blocks, THREADS, 0, stream>>>(*p, omega, partials);
        return check_launch("sigmoid_fast");
    }
    if (p->kind == PLOSS_EW_MSE) {
        sigmoid_fast<T, PLOSS_EW_MSE, false><<<blocks, THREADS, 0, stream>>>(*p, omega, partials);
        return check_launch("sigmoid_fast");
    }
    if (PLOSS_EW_IS_POINTWISE(p->kind)) {
        sigmoid_fast<T, KIND_POINTWISE, false><<<blocks, THREADS, 0, stream>>>(*p, omega, partials);
        return check_launch("sigmoid_fast");
    }
    switch (p->kind) {
    case PLOSS_SIGMOID_BCE:
        sigmoid_fast<T, PLOSS_SIGMOID_BCE, true><<<blocks, THREADS, 0, stream>>>(*p, omega, partials);
        break;
    case PLOSS_SIGMOID_FOCAL_TORCHVISION:
        if (g2)
            sigmoid_fast<T, PLOSS_SIGMOID_FOCAL_TORCHVISION, true><<<blocks, THREADS, 0, stream>>>(*p, omega, partials);
        else
            sigmoid_fast<T, PLOSS_SIGMOID_FOCAL_TORCHVISION, false><<<blocks, THREADS, 0, stream>>>(*p, omega, partials);
        break;
    case PLOSS_SIGMOID_FOCAL_REFERENCE:
        if (g2)
            sigmoid_fast<T, PLOSS_SIGMOID_FOCAL_REFERENCE, true><<<blocks, THREADS, 0, stream>>>(*p, omega, partials);
        else
            sigmoid_fast<T, PLOSS_SIGMOID_FOCAL_REFERENCE, false><<<blocks, THREADS, 0, stream>>>(*p, omega, partials);
        break;
    default: /* ploss_run_loss refuses a loss without a kind first */
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "elementwise loss kind %d has no CUDA kernel", (int)p->kind);
    }
    return check_launch("sigmoid_fast");
}

/* Elements per 16-byte vector of a float dtype. */
static int64_t vector_width(ploss_dtype d)
{
    return d == PLOSS_F64 ? 2 : d == PLOSS_F32 ? 4 : 8;
}

/* A weighted mean (weight_mean: MEAN over Σ w): Σ w into the workspace first (per-block
 * partials, then one block adds them), then the general kernel with ω and the loss divided
 * by it on the device.  Workspace: [loss partials | weight partials | Σ w]. */
static ploss_status run_weight_mean(ploss_ctx_t *ctx, const ploss_sigmoid_problem *p, unsigned blocks,
                                    cudaStream_t stream)
{
    const bool want_loss = p->pass != PLOSS_PASS_BACKWARD;
    const unsigned wblocks = grid_blocks(p->numel, THREADS, MAX_BLOCKS);
    void *ws = nullptr;
    ploss_status st = ploss_workspace(ctx, ((size_t)blocks + wblocks + 1) * sizeof(double), &ws);
    if (st)
        return st;
    double *partials = (double *)ws, *wparts = partials + blocks, *wsum = wparts + wblocks;
    const bool dense = p->ndim == 1;
    ploss_sigmoid_problem q = *p;
    q.weight_sum = wsum;
    const double omega = p->pass == PLOSS_PASS_FUSED ? p->scale : 0.0;
    st = dispatch_float(p->x_dtype, "input", [&](auto xtag) {
        using T = typename decltype(xtag)::type;
        using A = acc_t<T>;
        if (dense)
            weight_sum_kernel<A, true><<<wblocks, THREADS, 0, stream>>>(q, wparts);
        else
            weight_sum_kernel<A, false><<<wblocks, THREADS, 0, stream>>>(q, wparts);
        ploss_status s = check_launch("weight_sum_kernel");
        if (!s)
            s = launch_loss_from_partials(wparts, wblocks, 1.0, wsum, PLOSS_F64, stream);
        if (s)
            return s;
        if (dense)
            sigmoid_kernel<T, true><<<blocks, THREADS, 0, stream>>>(q, omega, want_loss ? partials : nullptr);
        else
            sigmoid_kernel<T, false><<<blocks, THREADS, 0, stream>>>(q, omega, want_loss ? partials : nullptr);
        return check_launch("sigmoid_kernel");
    });
    if (st || !want_loss)
        return st;
    return launch_loss_from_partials(partials, blocks, 1.0, p->loss, p->loss_dtype, stream, wsum);
}

extern "C" ploss_status ploss_cuda_sigmoid(ploss_ctx_t *ctx, const ploss_sigmoid_problem *p)
{
    /* the grid depends on the element count, dtype and the path only (deterministic sums) */
    const bool fast = fast_path_applies(p);
    const int64_t items = fast ? (p->numel / vector_width(p->x_dtype) + VPT - 1) / VPT : (p->numel + ILP - 1) / ILP;
    const unsigned blocks = grid_blocks(items, THREADS, MAX_BLOCKS);
    const bool dense = p->ndim == 1;
    cudaStream_t stream = stream_of(ctx);
    if (p->weight_mean)
        return run_weight_mean(ctx, p, blocks, stream);
    return with_block_partials(ctx, p->pass, p->reduction, p->scale, p->numel, p->mean_divisor, blocks, p->loss,
                               p->loss_dtype, [&](double omega, double *partials) {
        return dispatch_float(p->x_dtype, "input", [&](auto xtag) {
            using T = typename decltype(xtag)::type;
            if (fast)
                return launch_fast<T>(p, blocks, stream, omega, partials);
            /* the target's dtype (a float one, or i64/i32 ±1 labels: checked by the engine)
             * read by the kernel at run time */
            if (dense)
                sigmoid_kernel<T, true><<<blocks, THREADS, 0, stream>>>(*p, omega, partials);
            else
                sigmoid_kernel<T, false><<<blocks, THREADS, 0, stream>>>(*p, omega, partials);
            return check_launch("sigmoid_kernel");
        });
    });
}

} // namespace sigmoid_kernels
} // namespace ploss_cuda
