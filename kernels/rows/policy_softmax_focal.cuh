/*
 * policy_softmax_focal.cuh — the softmax focal loss (Lin et al.) with class-index targets
 * and per-class α, as a policy of the row engine (row_engine.cuh).  With u = 1 − p_y and
 * L = −log p_y:
 *     ℓ = α_y·u^γ·L,   ∂ℓ/∂x_j = ω·α_y·F·(p_j − [j = y]),   F = u^γ·(1 + γ·p_y·L/u),
 * state: lse.  u = Σ_{j≠y} e_j / Σe is formed without 1 − p_y, L as log1p(Σ_{j≠y} e_j)
 * when the label holds the max (no cancellation either way); L/u → 1 as u → 0.  'mean'
 * divides by the number of valid samples.
 */
#ifndef PLOSS_KERNELS_POLICY_SOFTMAX_FOCAL_CUH
#define PLOSS_KERNELS_POLICY_SOFTMAX_FOCAL_CUH

#include "row_engine.cuh"

namespace ploss_cuda {
namespace row_engine {

/* The focal terms of a row from Σ_{j≠y} e_j and d_y (relative to the row max): the row's
 * Σe and its log, u = 1 − p_y, L = −log p_y, u^γ and the gradient factor F. */
struct FocalTerms {
    float ey, SE, logSE, u, L, ug, F;
};
__device__ __forceinline__ FocalTerms focal_terms(float se, float dy, float gamma)
{
    FocalTerms f;
    f.ey = __expf(-dy);
    f.SE = se + f.ey;
    f.logSE = logf(f.SE);
    f.u = se / f.SE;
    f.L = dy == 0.0f ? log1pf(se) : dy + f.logSE;
    f.ug = gamma == 0.0f ? 1.0f : gamma == 2.0f ? f.u * f.u : powf(f.u, gamma);
    f.F = gamma == 0.0f ? 1.0f : f.ug * (1.0f + gamma * (f.ey / f.SE) * (f.u > 0.0f ? f.L / f.u : 1.0f));
    return f;
}

struct SoftmaxFocalPolicy {
    static constexpr int kState = 1;
    static constexpr bool kKeepsTerm = true; /* term() gives e_j */
    static constexpr bool kMaxExcludesY = false;
    static constexpr bool kClusters = true;
    static constexpr bool kRegisterRows = true;
    float gamma;
    const float *alpha; /* per-class α as f32 (workspace), or null */

    struct Sums {
        float se; /* Σ_{j≠y} e_j */
        float dy; /* d_y          */
    };
    struct Row {
        float loss, state[1];
        float k1, gy; /* g_j = k1·e_j for j ≠ y, g_y = gy (ω included) */
    };

    __device__ __forceinline__ Sums zero() const { return Sums{0.0f, 0.0f}; }
    __device__ __forceinline__ Sums add(const Sums &u, const Sums &v) const { return Sums{u.se + v.se, u.dy + v.dy}; }
    template <class IsY> __device__ __forceinline__ float term(Sums &s, float x, int, IsY is_y, float M) const
    {
        const float d = M - x;
        if (is_y) {
            s.dy += d;
            return 0.0f;
        }
        const float e = __expf(-d);
        s.se += e;
        return e;
    }
    __device__ __forceinline__ Row finish(const Sums &s, int y, float M, float om) const
    {
        const FocalTerms f = focal_terms(s.se, s.dy, gamma);
        const float ay = alpha ? alpha[y] : 1.0f;
        Row r;
        r.loss = ay * f.ug * f.L;
        r.state[0] = M + f.logSE;
        r.k1 = om * (ay * f.F / f.SE);
        r.gy = -om * (ay * f.F * f.u);
        return r;
    }
    template <bool KEPT, class IsY>
    __device__ __forceinline__ float grad(float v, int, IsY is_y, float M, const Row &r) const
    {
        return is_y ? r.gy : r.k1 * (KEPT ? v : exp_ftz(v - M));
    }
    __device__ __forceinline__ double divisor(int) const { return 1.0; }

    /* streamed rows in one read: term()'s sums against a running max */
    static constexpr bool kOnline = true;
    using Running = OnlineLse<false>;
    __device__ __forceinline__ Running running() const { return Running::start(); }
    template <int N> __device__ __forceinline__ void step(Running &r, const float (&x)[N], int jb, int y) const
    {
        r.step(x, jb, y, false, [](int) { return 0.0f; });
    }
    __device__ __forceinline__ Running merge(const Running &u, const Running &v) const { return Running::merge(u, v); }
    __device__ __forceinline__ Sums settle(const Running &r, float &M) const
    {
        M = r.m;
        return Sums{r.se, r.m - r.xy};
    }
};

} // namespace row_engine
} // namespace ploss_cuda

#endif
