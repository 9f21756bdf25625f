/*
 * policy_linear_cross_entropy.cuh — the softmax cross-entropy of the fused linear +
 * cross-entropy (core/engines/linear_cross_entropy.h) as a policy of the row engine: the
 * cross-entropy policy with label smoothing (a = 1 − ε, b = ε/C, no class weights), plus
 *   z-loss   ℓ += z·lse², ∂ℓ/∂z_j += 2·z·lse·p_j (the p_j part of every entry, the target's too);
 *   softcap  the row holds the capped logits z_j = c·tanh(·/c) (kernels/linear/), and every
 *            gradient entry is multiplied by 1 − (z_j/c)²;
 *   'mean'   1/(rows not ignored over the whole batch, on the device) multiplied into ω: the
 *            engine runs each tile with reduction 'none';
 *   state    (lse, H): the row's log-sum-exp and, when asked (entropy), its softmax entropy
 *            H = lse − Σ_j p_j·z_j = log SE + Σ_j e_j·d_j / SE (d_j = M − z_j ≥ 0,
 *            e_j = e^(−d_j), SE = Σ_j e_j: a sum of terms ≥ 0, so no cancellation), from one
 *            more per-row sum Σ_{j≠y} e_j·d_j (the label's term from d_y).
 *   focal    (label smoothing 0) the softmax focal loss in place of the cross-entropy:
 *            ℓ = u^γ·L, ∂ℓ/∂z_j = F·(p_j − [j = y]) (policy_softmax_focal.cuh's terms, α = 1);
 *            z-loss, softcap, 'mean' and the state as above.
 * The row keeps its logits, not e_j (kKeepsTerm = false): the softcap factor needs z_j.
 */
#ifndef PLOSS_KERNELS_POLICY_LINEAR_CROSS_ENTROPY_CUH
#define PLOSS_KERNELS_POLICY_LINEAR_CROSS_ENTROPY_CUH

#include "policy_cross_entropy.cuh"
#include "policy_softmax_focal.cuh"

namespace ploss_cuda {
namespace row_engine {

struct LinearCrossEntropyPolicy : CrossEntropyPolicy<false> {
    using Base = CrossEntropyPolicy<false>;
    static constexpr int kState = 2; /* lse, entropy */
    static constexpr bool kKeepsTerm = false;
    static constexpr bool kClusters = true;
    static constexpr bool kRegisterRows = true;
    float z_loss;
    float inv_cap;             /* 1/softcap, 0 without */
    const double *inv_divisor; /* 'mean': 1/(rows not ignored), else null */
    bool entropy;              /* the state's entropy is wanted: sum Σ e_j·d_j */
    bool focal;                /* the focal loss of each row (label smoothing 0) */
    float gamma;               /* its γ */

    struct Sums {
        float se, sd, dy; /* Base::Sums' */
        float sed;        /* Σ_{j≠y} e_j·d_j (entropy only) */
    };
    struct Row {
        float loss, state[2];
        float k1, k0, gy; /* as Base::Row's */
    };

    __device__ __forceinline__ Sums zero() const { return Sums{0.0f, 0.0f, 0.0f, 0.0f}; }
    __device__ __forceinline__ Sums add(const Sums &u, const Sums &v) const
    {
        return Sums{u.se + v.se, u.sd + v.sd, u.dy + v.dy, u.sed + v.sed};
    }
    /* the cross-entropy's terms, and e_j·d_j for the entropy */
    template <class IsY> __device__ __forceinline__ float term(Sums &s, float x, int j, IsY is_y, float M) const
    {
        Base::Sums t{s.se, s.sd, s.dy};
        const float e = Base::term(t, x, j, is_y, M);
        s.se = t.se;
        s.sd = t.sd;
        s.dy = t.dy;
        if (entropy && !is_y && e != 0.0f) /* a class of probability 0 adds 0, not 0·∞ */
            s.sed += e * (M - x);
        return e;
    }
    __device__ __forceinline__ Row finish(const Sums &s, int y, float M, float om) const
    {
        const float o = inv_divisor ? (float)((double)om * *inv_divisor) : om;
        Row r;
        if (focal) {
            const FocalTerms f = focal_terms(s.se, s.dy, gamma);
            r = Row{f.ug * f.L, {M + f.logSE, 0.0f}, o * (f.F / f.SE), 0.0f, -o * (f.F * f.u)};
        } else {
            const Base::Row br = Base::finish(Base::Sums{s.se, s.sd, s.dy}, y, M, o);
            r = Row{br.loss, {br.state[0], 0.0f}, br.k1, br.k0, br.gy};
        }
        if (z_loss != 0.0f || entropy) {
            const float lse = r.state[0], ey = __expf(-s.dy), inv = 1.0f / (s.se + ey);
            if (entropy)
                r.state[1] = logf(s.se + ey) + (s.sed + ey * s.dy) * inv;
            if (z_loss != 0.0f) {
                const float c = o * 2.0f * z_loss * lse;
                r.loss += z_loss * lse * lse;
                r.k1 += c * inv;
                r.gy += c * ey * inv;
            }
        }
        return r;
    }
    /* Streamed rows in one read: the base's running statistics (OnlineLse, unit weights)
     * and, for the entropy, Σ_{j≠y} e_j·d_j against the same running max — moved to a larger
     * max M by sed ← e^(m−M)·(sed + (M − m)·se) (terms ≥ 0: no cancellation). */
    static constexpr bool kOnline = true;
    struct Running {
        OnlineLse<true> b;
        float sed;
    };
    __device__ __forceinline__ Running running() const { return Running{OnlineLse<true>::start(), 0.0f}; }
    __device__ __forceinline__ static void shift(Running &r, float M)
    {
        if (r.b.se != 0.0f) { /* e^(m−M) = 0 (maxima more than ~88 apart, M − m up to ∞): 0, not 0·∞ */
            const float s = exp_ftz(r.b.m - M);
            r.sed = s != 0.0f ? s * fmaf(M - r.b.m, r.b.se, r.sed) : 0.0f;
        }
        r.b.shift(M);
    }
    template <int N> __device__ __forceinline__ void step(Running &r, const float (&x)[N], int jb, int y) const
    {
        const auto unit = [](int) { return 1.0f; };
        if (!entropy) {
            r.b.template step<true>(x, jb, y, b != 0.0f, unit);
            return;
        }
        float vm = x[0];
#pragma unroll
        for (int e = 1; e < N; ++e)
            vm = fmaxf(vm, x[e]);
        if (vm > r.b.m)
            shift(r, vm);
        const bool has_y = (unsigned)(y - jb) < (unsigned)N;
#pragma unroll
        for (int e = 0; e < N; ++e) {
            if (has_y && jb + e == y) {
                r.b.xy = x[e];
            } else {
                const float d = r.b.m - x[e], ev = exp_ftz(-d);
                r.b.se += ev;
                if (ev != 0.0f)
                    r.sed = fmaf(ev, d, r.sed);
                if (b != 0.0f)
                    r.b.sd += d;
            }
        }
        if (b != 0.0f)
            r.b.sw += (float)(has_y ? N - 1 : N);
    }
    __device__ __forceinline__ Running merge(Running u, Running v) const
    {
        const float M = fmaxf(u.b.m, v.b.m);
        shift(u, M);
        shift(v, M);
        return Running{OnlineLse<true>::merge(u.b, v.b), u.sed + v.sed};
    }
    __device__ __forceinline__ Sums settle(const Running &r, float &M) const
    {
        M = r.b.m;
        return Sums{r.b.se, r.b.sd, r.b.m - r.b.xy, r.sed};
    }
    template <bool KEPT, class IsY>
    __device__ __forceinline__ float grad(float v, int j, IsY is_y, float M, const Row &r) const
    {
        static_assert(!KEPT, "the row keeps its logits");
        (void)j;
        float g;
        if (is_y) {
            g = r.gy;
        } else {
            g = r.k1 * exp_ftz(v - M);
            if (r.k0 != 0.0f)
                g -= r.k0;
        }
        if (inv_cap == 0.0f)
            return g;
        const float t = v * inv_cap;
        return g * (1.0f - t * t);
    }
};

} // namespace row_engine
} // namespace ploss_cuda

#endif
