/*
 * policy_margin.cuh — the margin softmax losses (core/engines/margin.h) as a policy of the
 * row engine (row_engine.cuh): a row holds the cosines c_j of one embedding with every
 * class centre (a tile of kernels/margin/margin.cu), the logits are z_j = s·c_j with the
 * target's s·φ(c_y) (ploss_margin_target), and the gradient written over the row is
 * ∂ℓ/∂c_j = ω·s·p_j (j ≠ y), ω·s·φ′(c_y)·(p_y − 1) at the target.
 *
 * M is the max cosine over the non-target classes (kMaxExcludesY), so their sum
 * S = Σ_{j≠y} e^(s(c_j − M)) lies in [1, C − 1]; with d = s·(φ(c_y) − M):
 *   ℓ = log(S + e^d) − d  (= log1p(S·e^(−d)) for d > 0),  e^(sM − lse) = 1/(S + e^d),
 *   p_j = e^(s(c_j − M))·e^(sM − lse),  1 − p_y = S·e^(sM − lse)  (no cancellation).
 * The per-row values are taken in double (s up to hundreds puts e^d beyond f32).
 * Rows up to a cluster of 8 blocks (kClusters): 131072 f32 classes.
 */
#ifndef PLOSS_KERNELS_POLICY_MARGIN_CUH
#define PLOSS_KERNELS_POLICY_MARGIN_CUH

#include "margin.h"
#include "row_engine.cuh"

namespace ploss_cuda {
namespace row_engine {

struct MarginPolicy {
    static constexpr int kState = 0;
    static constexpr bool kKeepsTerm = false;
    static constexpr bool kMaxExcludesY = true;
    static constexpr bool kClusters = true;
    static constexpr bool kRegisterRows = true;
    ploss_margin margin;
    float s;
    /* 'mean': 1/(rows not ignored) on the device, multiplied into ω; null: 1 */
    const double *inv_divisor;

    struct Sums {
        float sum, cy; /* Σ_{j≠y} e^(s(c_j − M)); c_y (the target's thread only, else 0) */
    };
    struct Row {
        float loss, state[1];
        float k;  /* ω·s·e^(sM − lse): the gradient of c_j is k·e^(s(c_j − M)) */
        float gy; /* the target's gradient */
    };
    __device__ __forceinline__ Sums zero() const { return Sums{0.0f, 0.0f}; }
    __device__ __forceinline__ Sums add(const Sums &a, const Sums &b) const { return Sums{a.sum + b.sum, a.cy + b.cy}; }
    template <class IsY> __device__ __forceinline__ float term(Sums &a, float x, int, IsY is_y, float M) const
    {
        if (is_y)
            a.cy += x;
        else
            a.sum += __expf(s * (x - M));
        return 0.0f;
    }
    __device__ __forceinline__ Row finish(const Sums &a, int, float M, float om) const
    {
        Row w;
        double dphi, pn; /* pn = e^(sM − lse) */
        const double S = (double)a.sum;
        const double loss = ploss_margin_row_loss(&margin, S, (double)a.cy, (double)M, &pn, &dphi);
        const double omega = (double)om * (inv_divisor ? *inv_divisor : 1.0);
        w.loss = (float)loss;
        w.state[0] = 0.0f;
        w.k = (float)(omega * margin.s * pn);
        w.gy = (float)(-omega * margin.s * dphi * S * pn);
        return w;
    }
    template <bool KEPT, class IsY>
    __device__ __forceinline__ float grad(float x, int, IsY is_y, float M, const Row &w) const
    {
        if (is_y)
            return w.gy;
        return w.k * __expf(s * (x - M));
    }
    __device__ __forceinline__ double divisor(int) const { return 1.0; }
};

} // namespace row_engine
} // namespace ploss_cuda

#endif
