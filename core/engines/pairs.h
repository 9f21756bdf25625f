/*
 * pairs.h — the validated problems handed by core/engines/pairs.c to the CPU (core/cpu/pairs/)
 * and CUDA (kernels/pairs/) backends of the pairs kernel shape: losses over N×D embeddings
 * that compare rows with rows.  Internal.
 *
 * Triplet margin loss (given triplets): per row i of anchor a, positive p, negative n,
 *   d(u, v) = ‖u − v + ε‖_p,  d_ap = d(a_i, p_i),  d_an = d(a_i, n_i) (swap: the smaller of
 *   d(a_i, n_i) and d(p_i, n_i), whose pair then takes the negative term),
 *   ℓ_i = max(0, d_ap − d_an + μ)  or (soft margin)  softplus(d_ap − d_an).
 * The per-row maths below is shared by both backends (plain C, host and device).
 */
#ifndef PLOSS_PAIRS_INTERNAL_H
#define PLOSS_PAIRS_INTERNAL_H

#include <math.h>

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One N×D operand: element (i, j) at data + i·sn + j·sd (elements). */
typedef struct {
    const void *data;
    int64_t sn, sd;
} ploss_pair_operand;

/* One N×D gradient output, same addressing. */
typedef struct {
    void *data;
    int64_t sn, sd;
} ploss_pair_grad;

enum { PLOSS_TRIPLET_ANCHOR = 0, PLOSS_TRIPLET_POSITIVE = 1, PLOSS_TRIPLET_NEGATIVE = 2 };

typedef struct ploss_triplet_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_dtype dtype;            /* of every embedding input and gradient                  */
    int64_t N, D;
    ploss_pair_operand x[3];      /* anchor, positive, negative                             */
    double margin, p, eps;
    int soft_margin, swap;
    double scale;                 /* fused: the gradient's multiplier                       */
    /* loss: N values (NONE, stride l_sn) or one; f32 or f64 */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn;
    /* upstream gradient (backward): one value (MEAN/SUM) or N values (NONE, stride gl_sn) */
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn;
    ploss_pair_grad grad[3];      /* ∂/∂anchor, ∂/∂positive, ∂/∂negative                    */
} ploss_triplet_problem;

ploss_status ploss_cpu_triplet(ploss_ctx_t *ctx, const ploss_triplet_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_triplet(ploss_ctx_t *ctx, const ploss_triplet_problem *p);
#endif

/* ---- the per-row maths, shared by the backends ------------------------------------- */

#if defined(__CUDACC__)
#define PLOSS_PAIRS_FN __host__ __device__ __forceinline__ static
#else
#define PLOSS_PAIRS_FN static inline
#endif

/* |z|^p, the term of a p-norm's sum (p = 1 and 2 without pow). */
PLOSS_PAIRS_FN double ploss_pnorm_term(double z, double p)
{
    const double a = fabs(z);
    return p == 2.0 ? a * a : p == 1.0 ? a : pow(a, p);
}

/* ‖·‖_p from Σ|z|^p. */
PLOSS_PAIRS_FN double ploss_pnorm_root(double s, double p)
{
    return p == 2.0 ? sqrt(s) : p == 1.0 ? s : pow(s, 1.0 / p);
}

/* sign(z)·|z|^(p−1): ∂‖z‖_p/∂z times ‖z‖_p^(p−1) (0 at z = 0 for p = 1, as PyTorch). */
PLOSS_PAIRS_FN double ploss_pnorm_dir(double z, double p)
{
    if (p == 2.0)
        return z;
    if (z == 0.0)
        return 0.0;
    const double s = z > 0.0 ? 1.0 : -1.0;
    return p == 1.0 ? s : s * pow(fabs(z), p - 1.0);
}

/* softplus(z) = max(z, 0) + log1p(e^−|z|), finite for every finite z. */
PLOSS_PAIRS_FN double ploss_softplus(double z) { return (z > 0.0 ? z : 0.0) + log1p(exp(-fabs(z))); }

/* σ(z) without overflow. */
PLOSS_PAIRS_FN double ploss_sigmoid(double z)
{
    if (z >= 0.0)
        return 1.0 / (1.0 + exp(-z));
    const double e = exp(z);
    return e / (1.0 + e);
}

/* What one triplet row gives: its loss, and the factors of its gradient.  With
 * g_uv = sign(z)|z|^(p−1), z = u − v + ε (per component):
 *   ∂ℓ/∂a += k_ap·g_ap,  ∂ℓ/∂p −= k_ap·g_ap
 *   ∂ℓ/∂u += k_neg·g_un, ∂ℓ/∂n −= k_neg·g_un   (u = a, or p when `swapped`)
 * k = ±c / d^(p−1) (0 at d = 0): c = ∂ℓ/∂d_ap = −∂ℓ/∂d_neg. */
typedef struct {
    double loss, k_ap, k_neg;
    int swapped;
} ploss_triplet_row;

/* The row from the sums Σ|z|^p of its pairs (s_pn read only with swap). */
PLOSS_PAIRS_FN ploss_triplet_row ploss_triplet_finish(double s_ap, double s_an, double s_pn, double p, double margin,
                                                      int soft_margin, int swap)
{
    ploss_triplet_row r;
    const double d_ap = ploss_pnorm_root(s_ap, p);
    double d_neg = ploss_pnorm_root(s_an, p);
    r.swapped = 0;
    if (swap) {
        const double d_pn = ploss_pnorm_root(s_pn, p);
        if (d_pn < d_neg) {
            d_neg = d_pn;
            r.swapped = 1;
        }
    }
    double c;
    if (soft_margin) {
        const double z = d_ap - d_neg;
        r.loss = ploss_softplus(z);
        c = ploss_sigmoid(z);
    } else {
        const double t = d_ap - d_neg + margin;
        r.loss = t > 0.0 ? t : 0.0;
        c = t >= 0.0 ? 1.0 : 0.0; /* clamp_min's gradient passes at the kink, as PyTorch */
    }
    /* ∂d/∂z = g / d^(p−1); a zero distance has a zero gradient */
    const double pm1 = p - 1.0;
    const double den_ap = p == 2.0 ? d_ap : p == 1.0 ? 1.0 : pow(d_ap, pm1);
    const double den_neg = p == 2.0 ? d_neg : p == 1.0 ? 1.0 : pow(d_neg, pm1);
    r.k_ap = c != 0.0 && d_ap > 0.0 ? c / den_ap : 0.0;
    r.k_neg = c != 0.0 && d_neg > 0.0 ? -c / den_neg : 0.0;
    return r;
}

#ifdef __cplusplus
}
#endif

#endif
