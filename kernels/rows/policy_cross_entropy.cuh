/*
 * policy_cross_entropy.cuh — cross-entropy with class-index targets, label smoothing and
 * class weights, as a policy of the row engine (row_engine.cuh).  With c_j = w_j·(a·[j = y] + b):
 *     ℓ = Σ_j c_j·(lse − x_j),   ∂ℓ/∂x_j = ω·(Σ_k c_k·p_j − c_j),   state: lse.
 * Relative to the row max M (d_j = M − x_j ≥ 0, e_j = e^(−d_j)) the loss is
 *     Σc·log Σe + b·Σ_{j≠y} w_j·d_j + (a + b)·w_y·d_y,
 * a sum of terms ≥ 0 (logits of ±1e4 do not cancel); terms whose coefficient is 0 are
 * skipped, as on the CPU.  The label's gradient uses p_y − 1 = −Σ_{j≠y} e_j / Σe, so a
 * confident sample's gradient keeps its relative precision.  Where the gradient recomputes
 * e^(x − M) (rows that do not keep term()'s value: 16-bit and streamed rows) it is
 * exp_ftz's (a probability below 2^-126 is 0), as are a streamed row's sums (OnlineLse).
 */
#ifndef PLOSS_KERNELS_POLICY_CROSS_ENTROPY_CUH
#define PLOSS_KERNELS_POLICY_CROSS_ENTROPY_CUH

#include "row_engine.cuh"

namespace ploss_cuda {
namespace row_engine {

/* W: class weights given (the weightless instance has no per-element select). */
template <bool W> struct CrossEntropyPolicy {
    static constexpr int kState = 1;
    static constexpr bool kKeepsTerm = true; /* term() gives e_j */
    static constexpr bool kMaxExcludesY = false;
    /* weighted long rows are streamed by one block: they are rare, and the build is spared
     * the cluster instances */
    static constexpr bool kClusters = !W;
    static constexpr bool kRegisterRows = true;
    float a, b;          /* smoothing: target a·[j = y] + b */
    const float *w;      /* class weights as f32 (workspace), or null */
    const double *wsum;  /* Σ_j w_j (workspace), with w */
    float csum_plain;    /* Σ_j c_j without weights: a + b·C */
    float n_classes;     /* C: Σ_j w_j without weights */
    const void *w_raw; ploss_dtype w_dtype; int64_t w_s; /* the caller's weights ('mean' divisor) */

    struct Sums {
        float se; /* Σ_{j≠y} e_j        */
        float sd; /* Σ_{j≠y} w_j·d_j     */
        float dy; /* d_y                  */
    };
    struct Row {
        float loss, state[1];
        float k1, k0, gy; /* g_j = k1·e_j − k0·w_j for j ≠ y, g_y = gy (ω included) */
    };

    __device__ __forceinline__ Sums zero() const { return Sums{0.0f, 0.0f, 0.0f}; }
    __device__ __forceinline__ Sums add(const Sums &u, const Sums &v) const
    {
        return Sums{u.se + v.se, u.sd + v.sd, u.dy + v.dy};
    }
    __device__ __forceinline__ float wt(int j) const
    {
        if constexpr (W)
            return w[j];
        else
            return (void)j, 1.0f;
    }
    template <class IsY> __device__ __forceinline__ float term(Sums &s, float x, int j, IsY is_y, float M) const
    {
        const float d = M - x;
        if (is_y) {
            s.dy += d;
            return 0.0f;
        }
        const float e = __expf(-d);
        s.se += e;
        if (b != 0.0f)
            s.sd += W ? wt(j) * d : d;
        return e;
    }
    __device__ __forceinline__ Row finish(const Sums &s, int y, float M, float om) const
    {
        const float ey = __expf(-s.dy), SE = s.se + ey, logSE = logf(SE), inv = 1.0f / SE;
        const float wy = wt(y);
        const float Wsum = W ? (float)*wsum : n_classes;
        const float csum = W ? (float)((double)wy * a + (double)b * *wsum) : csum_plain;
        Row r;
        float loss = csum != 0.0f ? csum * logSE : 0.0f;
        if (b != 0.0f)
            loss += b * s.sd;
        if (a + b != 0.0f)
            loss += (a + b) * wy * s.dy;
        r.loss = loss;
        r.state[0] = M + logSE;
        r.k1 = om * (csum * inv);
        r.k0 = om * b;
        /* csum·p_y − w_y·(a + b) = w_y·a·(p_y − 1) + b·(W·p_y − w_y), W = C without weights */
        r.gy = om * (-wy * a * (s.se * inv) + (b != 0.0f ? b * (Wsum * ey * inv - wy) : 0.0f));
        return r;
    }
    template <bool KEPT, class IsY>
    __device__ __forceinline__ float grad(float v, int j, IsY is_y, float M, const Row &r) const
    {
        if (is_y)
            return r.gy;
        const float g = r.k1 * (KEPT ? v : exp_ftz(v - M));
        return r.k0 != 0.0f ? g - r.k0 * wt(j) : g;
    }
    __device__ __forceinline__ double divisor(int y) const
    {
        return w_raw ? load_dyn(w_raw, w_dtype, (int64_t)y * w_s) : 1.0;
    }

    /* streamed rows in one read: term()'s sums against a running max */
    static constexpr bool kOnline = true;
    using Running = OnlineLse<true>;
    __device__ __forceinline__ Running running() const { return Running::start(); }
    template <int N> __device__ __forceinline__ void step(Running &r, const float (&x)[N], int jb, int y) const
    {
        r.template step<!W>(x, jb, y, b != 0.0f, [&](int j) { return wt(j); });
    }
    __device__ __forceinline__ Running merge(const Running &u, const Running &v) const { return Running::merge(u, v); }
    __device__ __forceinline__ Sums settle(const Running &r, float &M) const
    {
        M = r.m;
        return Sums{r.se, r.sd, r.m - r.xy};
    }
};

} // namespace row_engine
} // namespace ploss_cuda

#endif
