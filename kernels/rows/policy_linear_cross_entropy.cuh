/*
 * policy_linear_cross_entropy.cuh — the softmax cross-entropy of the fused linear +
 * cross-entropy (core/engines/linear_cross_entropy.h) as a policy of the row engine: the
 * cross-entropy policy with label smoothing (a = 1 − ε, b = ε/C, no class weights), plus
 *   z-loss   ℓ += z·lse², ∂ℓ/∂z_j += 2·z·lse·p_j (the p_j part of every entry, the target's too);
 *   softcap  the row holds the capped logits z_j = c·tanh(·/c) (kernels/linear/), and every
 *            gradient entry is multiplied by 1 − (z_j/c)²;
 *   'mean'   1/(rows not ignored over the whole batch, on the device) multiplied into ω: the
 *            engine runs each tile with reduction 'none'.
 * The row keeps its logits, not e_j (kKeepsTerm = false): the softcap factor needs z_j.
 */
#ifndef PLOSS_KERNELS_POLICY_LINEAR_CROSS_ENTROPY_CUH
#define PLOSS_KERNELS_POLICY_LINEAR_CROSS_ENTROPY_CUH

#include "policy_cross_entropy.cuh"

namespace ploss_cuda {
namespace row_engine {

struct LinearCrossEntropyPolicy : CrossEntropyPolicy<false> {
    using Base = CrossEntropyPolicy<false>;
    static constexpr bool kKeepsTerm = false;
    static constexpr bool kClusters = true;
    float z_loss;
    float inv_cap;             /* 1/softcap, 0 without */
    const double *inv_divisor; /* 'mean': 1/(rows not ignored), else null */

    __device__ __forceinline__ Row finish(const Sums &s, int y, float M, float om) const
    {
        const float o = inv_divisor ? (float)((double)om * *inv_divisor) : om;
        Row r = Base::finish(s, y, M, o);
        if (z_loss != 0.0f) {
            const float lse = r.state[0], ey = __expf(-s.dy), inv = 1.0f / (s.se + ey), c = o * 2.0f * z_loss * lse;
            r.loss += z_loss * lse * lse;
            r.k1 += c * inv;
            r.gy += c * ey * inv;
        }
        return r;
    }
    template <bool KEPT, class IsY>
    __device__ __forceinline__ float grad(float v, int j, IsY is_y, float M, const Row &r) const
    {
        const float g = Base::template grad<KEPT>(v, j, is_y, M, r);
        if (inv_cap == 0.0f)
            return g;
        const float t = v * inv_cap;
        return g * (1.0f - t * t);
    }
};

} // namespace row_engine
} // namespace ploss_cuda

#endif
