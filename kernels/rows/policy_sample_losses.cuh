/*
 * policy_sample_losses.cuh — large-margin softmax, PC-softmax and Taylor cross-entropy as
 * policies of the row engine (row_engine.cuh); their formulas are in core/engines/rows.h.
 * Rows up to a block (16384 f32 / 32768 16-bit classes): longer ones keep the two-read
 * kernels of sample_policies.cu, which spares the build three cluster instances each.
 */
#ifndef PLOSS_KERNELS_POLICY_SAMPLE_LOSSES_CUH
#define PLOSS_KERNELS_POLICY_SAMPLE_LOSSES_CUH

#include "row_engine.cuh"
#include "taylor_poly.h"

namespace ploss_cuda {
namespace row_engine {

/* Large-margin softmax (Kobayashi, λ = 2·half_lam, u = 1/(C−1)).  M is the max over the
 * non-target classes 𝒩 (kMaxExcludesY), so a dominant target cannot underflow their sum:
 * with d_j = M − x_j, s = Σ_𝒩 e^(−d), t = Σ_𝒩 e^(−d)·(−d), r = Σ_𝒩 (−d), d_y = M − x_y:
 *   lse' = M + log s,  E = M + t/s,  lse − x_y = d_y + log(e^(−d_y) + s)  (log1p(e^(d_y)·s)
 *   when x_y > M),  ℓ = lse − x_y + half_lam·(t/s − u·r),
 *   ∂ℓ/∂x_j = p_j + half_lam·(q_j·(x_j − E + 1) − u) (j ∈ 𝒩),  ∂ℓ/∂x_y = −Σ_𝒩 p_j.
 * state: lse, lse', E. */
struct LargeMarginPolicy {
    static constexpr int kState = 3;
    static constexpr bool kKeepsTerm = false;
    static constexpr bool kMaxExcludesY = true;
    static constexpr bool kClusters = false;
    static constexpr bool kRegisterRows = false; /* rare short rows: streamed, a smaller build */
    float half_lam, u;

    struct Sums {
        float s, t;
        double r; /* Σ (x − M) of logits near ±FLT_MAX overflows f32 */
        float dy;
    };
    struct Row {
        float loss, state[3];
        float pn;  /* e^(M − lse): p_j = e^(−d_j)·pn */
        float inv_s, ts, om, gy;
    };
    __device__ __forceinline__ Sums zero() const { return Sums{0.0f, 0.0f, 0.0, 0.0f}; }
    __device__ __forceinline__ Sums add(const Sums &a, const Sums &b) const
    {
        return Sums{a.s + b.s, a.t + b.t, a.r + b.r, a.dy + b.dy};
    }
    template <class IsY> __device__ __forceinline__ float term(Sums &a, float x, int, IsY is_y, float M) const
    {
        const float d = M - x;
        if (is_y) {
            a.dy += d;
            return 0.0f;
        }
        const float e = __expf(-d);
        a.s += e;
        a.t -= e * (d > 128.0f ? 128.0f : d); /* e = 0 beyond 128: 0, not 0·∞ (NaN d: e is NaN) */
        a.r += (double)x - (double)M;
        return 0.0f;
    }
    __device__ __forceinline__ Row finish(const Sums &a, int, float M, float om) const
    {
        Row w;
        const float inv_s = 1.0f / a.s, ts = a.t * inv_s;
        /* lse − x_y without cancellation, and e^(M − lse) */
        float lse_y, pn;
        if (a.dy >= 0.0f) {
            const float z = __expf(-a.dy) + a.s;
            lse_y = a.dy + logf(z);
            pn = 1.0f / z;
        } else {
            const float es = __expf(a.dy) * a.s;
            lse_y = log1pf(es);
            pn = __expf(a.dy) / (1.0f + es);
        }
        w.loss = (float)(lse_y + half_lam * ((double)ts - a.r * u)); /* a large finite loss stays finite */
        w.state[0] = M - a.dy + lse_y;
        w.state[1] = M + logf(a.s);
        w.state[2] = M + ts;
        w.pn = pn;
        w.inv_s = inv_s;
        w.ts = ts;
        w.om = om;
        w.gy = -om * (a.s * pn);
        return w;
    }
    template <bool KEPT, class IsY>
    __device__ __forceinline__ float grad(float x, int, IsY is_y, float M, const Row &w) const
    {
        if (is_y)
            return w.gy;
        const float d = M - x, e = __expf(-d);
        const float dc = d > 128.0f ? 128.0f : d; /* e = 0 beyond 128: e·(1 − d − ts) = 0, not 0·∞ */
        return w.om * (e * w.pn + half_lam * (e * w.inv_s * (1.0f - dc - w.ts) - u));
    }
    __device__ __forceinline__ double divisor(int) const { return 1.0; }
};

/* PC-softmax with class priors w: ℓ = lse_w − x_y, lse_w = log Σ_j w_j·e^(x_j),
 * ∂ℓ/∂x_j = w_j·e^(x_j − lse_w) − [j = y], the label's as −Σ_{j≠y} w_j·e^(x_j − lse_w);
 * state: lse_w.  A zero prior contributes nothing: M is the max over the classes of a prior
 * other than 0 (a larger logit of a class of prior 0 would underflow every other term),
 * and such a class's term and gradient are 0 (not 0·∞).  A +∞ logit there is kept in M,
 * so the row is NaN, as the CPU's log w + x = −∞ + ∞. */
struct PcSoftmaxPolicy {
    static constexpr int kState = 1;
    static constexpr bool kKeepsTerm = true; /* term() gives w_j·e_j */
    static constexpr bool kMaxExcludesY = false;
    static constexpr bool kClusters = false;
    static constexpr bool kRegisterRows = false; /* rare short rows: streamed, a smaller build */
    const float *w; /* priors as f32 (workspace) */

    struct Sums {
        float sn, ey, dy; /* Σ_{j≠y} w_j·e_j, w_y·e_y, d_y */
    };
    struct Row {
        float loss, state[1];
        float k1, gy;
    };
    __device__ __forceinline__ Sums zero() const { return Sums{0.0f, 0.0f, 0.0f}; }
    __device__ __forceinline__ Sums add(const Sums &a, const Sums &b) const
    {
        return Sums{a.sn + b.sn, a.ey + b.ey, a.dy + b.dy};
    }
    __device__ __forceinline__ float max_term(float x, int j) const
    {
        return w[j] != 0.0f || x == CUDART_INF_F ? x : -CUDART_INF_F;
    }
    template <class IsY> __device__ __forceinline__ float term(Sums &a, float x, int j, IsY is_y, float M) const
    {
        const float d = M - x, we = w[j] != 0.0f ? w[j] * __expf(-d) : 0.0f;
        if (is_y) {
            a.dy += d;
            a.ey += we;
        } else {
            a.sn += we;
        }
        return we;
    }
    __device__ __forceinline__ Row finish(const Sums &a, int, float M, float om) const
    {
        Row r;
        const float S = a.sn + a.ey, inv = 1.0f / S;
        r.loss = a.dy + logf(S);
        r.state[0] = M + logf(S);
        r.k1 = om * inv;
        r.gy = -om * (a.sn * inv);
        return r;
    }
    template <bool KEPT, class IsY>
    __device__ __forceinline__ float grad(float v, int j, IsY is_y, float M, const Row &r) const
    {
        if (is_y)
            return r.gy;
        return r.k1 * (KEPT ? v : w[j] != 0.0f ? w[j] * __expf(v - M) : 0.0f);
    }
    __device__ __forceinline__ double divisor(int) const { return 1.0; }
};

/* Taylor cross-entropy of even order n ≤ 10: F_j = f_n(x_j), Z = Σ_j F_j (summed in f64),
 * ℓ = log Z − log F_y, ∂ℓ/∂x_k = f_{n−1}(x_k)·(1/Z − [k = y]/F_y); state: Z. */
struct TaylorPolicy {
    static constexpr int kState = 1;
    static constexpr bool kKeepsTerm = false;
    static constexpr bool kMaxExcludesY = false;
    static constexpr bool kClusters = false;
    static constexpr bool kRegisterRows = false; /* rare short rows: streamed, a smaller build */
    int order;

    struct Sums {
        double z;
        float fy;
    };
    struct Row {
        float loss, state[1];
        float iz, iy; /* ω/Z, ω/F_y */
    };
    __device__ __forceinline__ Sums zero() const { return Sums{0.0, 0.0f}; }
    __device__ __forceinline__ Sums add(const Sums &a, const Sums &b) const { return Sums{a.z + b.z, a.fy + b.fy}; }
    template <class IsY> __device__ __forceinline__ float term(Sums &a, float x, int, IsY is_y, float) const
    {
        const float f = ploss_taylor_poly(x, order);
        a.z += (double)f;
        if (is_y)
            a.fy += f;
        return 0.0f;
    }
    __device__ __forceinline__ Row finish(const Sums &a, int, float, float om) const
    {
        Row r;
        r.loss = (float)(log(a.z) - log((double)a.fy));
        r.state[0] = (float)a.z;
        r.iz = (float)((double)om / a.z);
        r.iy = om / a.fy;
        return r;
    }
    template <bool KEPT, class IsY>
    __device__ __forceinline__ float grad(float x, int, IsY is_y, float, const Row &r) const
    {
        return ploss_taylor_poly(x, order - 1) * (is_y ? r.iz - r.iy : r.iz);
    }
    __device__ __forceinline__ double divisor(int) const { return 1.0; }
};

} // namespace row_engine
} // namespace ploss_cuda

#endif
