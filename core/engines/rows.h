/*
 * rows.h — the validated problems that the rows engine (core/engines/rows.c) hands to its
 * CPU (core/cpu/rows/) and CUDA (kernels/rows/) backends.  Internal.
 *
 * Samples are indexed i = (n, s), n < N, s < S (S = d1⋯dk collapsed to one axis).  Every
 * tensor is addressed as base + n·sn + s·ss (+ j·sc along classes, or k along the state's
 * components), strides in elements.  Four backends today: cross-entropy (label smoothing,
 * class weights, probability targets), the softmax focal losses, the per-sample
 * policies (large-margin, Taylor CE, PC-softmax, OHEM over cross-entropy or large-margin),
 * and the direct rows (no softmax: negative log-likelihood, multi-class margin).
 */
#ifndef PLOSS_ROWS_H
#define PLOSS_ROWS_H

#include "internal.h"

#include <math.h>

#ifdef __CUDACC__
#define PLOSS_ROWS_INLINE __host__ __device__ static inline
#else
#define PLOSS_ROWS_INLINE static inline
#endif

/* A row loss's 'mean': the total over the divisor (the valid samples, or their Σ w_y); NaN
 * when the divisor is 0, whatever the total: nothing to average.  PyTorch's loss is NaN
 * there too for weights >= 0 (its NLL part is 0/0, also where label smoothing adds a term
 * over those weights, where total/0 would give +inf); with negative class weights that
 * cancel it gives ±inf, ploss NaN.  Every backend's 'mean' goes through here. */
PLOSS_ROWS_INLINE double ploss_rows_mean(double total, double divisor)
{
    return divisor != 0.0 ? total / divisor : (double)NAN;
}

/* Coordinate j of the vertex of class k (both in [0, C), C >= 2) of the regular simplex of C
 * unit vectors centred at the origin, in the first n = C − 1 coordinates (the last is 0):
 * Torch7's ClassSimplexCriterion's construction (each vertex k < n ends with a positive
 * entry a_k at coordinate k; the later vertices share the entry c_j < 0 at every coordinate
 * j before theirs, so that every two vertices have the dot product −1/n), in closed form:
 * with q = n − j, a_j = √((n + 1)·q / (n·(q + 1))) and c_j = −(n + 1)/(n·(q + 1)·a_j). */
PLOSS_ROWS_INLINE double ploss_simplex_coord(int64_t C, int64_t k, int64_t j)
{
    const int64_t n = C - 1;
    if (j > k || j == n)
        return 0.0;
    const double nd = (double)n, q = (double)(n - j);
    const double a = sqrt((nd + 1.0) * q / (nd * (q + 1.0)));
    return j == k ? a : -(nd + 1.0) / (nd * (q + 1.0) * a);
}

#ifdef __cplusplus
extern "C" {
#endif

/* ---- cross-entropy ----------------------------------------------------------------------
 * Per sample, with c_ij = w_j·(a·t_ij + b) (t one-hot for class indices, where the weighted
 * positive term is a·w_y) the loss is ℓ_i = Σ_j c_ij·(lse_i − x_ij) and
 * ∂ℓ_i/∂x_ij = (Σ_k c_ik)·p_ij − c_ij. */

typedef enum {
    PLOSS_TARGET_INDEX = 0, /* class indices (t_dtype i64 or i32)       */
    PLOSS_TARGET_PROB = 1   /* probabilities of the input's shape        */
} ploss_target_kind;

typedef struct ploss_ce_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_target_kind target_kind;
    int64_t N, S, C;

    /* input logits */
    const void *x; ploss_dtype x_dtype; int64_t x_sn, x_ss, x_sc;
    /* target: indices (x_sc unused) or probabilities */
    const void *t; ploss_dtype t_dtype; int64_t t_sn, t_ss, t_sc;
    /* class weights, NULL = all ones */
    const void *w; ploss_dtype w_dtype; int64_t w_s;

    double a, b;             /* smoothing coefficients: target a·t + b      */
    int64_t ignore_index;    /* class-index targets only                    */
    double scale;            /* fused: multiplier of the gradient           */
    /* loss: per sample (NONE) or one scalar (MEAN/SUM); f32 or f64 */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn, l_ss;
    /* saved log-sum-exp per sample (forward: written if non-NULL; backward: read if
     * non-NULL, else recomputed); f32 or f64 */
    void *lse; ploss_dtype lse_dtype; int64_t lse_sn, lse_ss;
    /* upstream gradient (backward): scalar (MEAN/SUM) or per sample (NONE) */
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn, gl_ss;
    /* gradient output, the input's dtype */
    void *grad; int64_t g_sn, g_ss, g_sc;
} ploss_ce_problem;

/* Backends: same semantics; the CPU one is always built. */
ploss_status ploss_cpu_cross_entropy(ploss_ctx_t *ctx, const ploss_ce_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_cross_entropy(ploss_ctx_t *ctx, const ploss_ce_problem *p);
#endif

/* ---- softmax focal and dual focal -------------------------------------------------------
 * Targets are class indices; a sample is valid when its label is not ignore_index.  MEAN
 * divides by the number of valid samples. */

typedef enum {
    PLOSS_SOFTMAX_FOCAL = 0, /* ℓ = −α_y (1 − p_t)^γ log p_t                 */
    PLOSS_DUAL_FOCAL = 1     /* ℓ = −Σ_j log(1 + ε − (p_j − [j = y])²)         */
} ploss_sfocal_kind;

typedef struct ploss_sfocal_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_sfocal_kind kind;
    int64_t N, S, C;

    /* input logits */
    const void *x; ploss_dtype x_dtype; int64_t x_sn, x_ss, x_sc;
    /* class indices, i64 or i32 */
    const void *t; ploss_dtype t_dtype; int64_t t_sn, t_ss;
    /* per-class α (softmax focal), NULL = all ones */
    const void *w; ploss_dtype w_dtype; int64_t w_s;

    double gamma;          /* softmax focal γ ≥ 0  */
    double eps;            /* dual focal ε > 0     */
    int64_t ignore_index;
    double scale;          /* fused: multiplier of the gradient */

    /* loss: per sample (NONE) or one scalar (MEAN/SUM); f32 or f64 */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn, l_ss;
    /* saved log-sum-exp per sample (forward: written if non-NULL; backward: read if
     * non-NULL, else recomputed); f32 or f64 */
    void *lse; ploss_dtype lse_dtype; int64_t lse_sn, lse_ss;
    /* upstream gradient (backward): scalar (MEAN/SUM) or per sample (NONE) */
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn, gl_ss;
    /* gradient output, the input's dtype */
    void *grad; int64_t g_sn, g_ss, g_sc;
} ploss_sfocal_problem;

ploss_status ploss_cpu_softmax_focal(ploss_ctx_t *ctx, const ploss_sfocal_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_softmax_focal(ploss_ctx_t *ctx, const ploss_sfocal_problem *p);
#endif

/* ---- per-sample policies ----------------------------------------------------------------
 *
 * Samples i = (n, s), n < N, s < S (S = d1⋯dk collapsed to one axis).  Every tensor is
 * addressed as base + n·sn + s·ss (+ j·sc along classes / state components), strides in
 * elements.  Per valid sample (label y ≠ ignore_index), with x the logits row:
 *
 *  LARGE_MARGIN (Kobayashi, BMVC 2019; λ = lam), 𝒩 = {j ≠ y}, u = 1/(C−1):
 *     lse = log Σ_j e^x_j, lse' = log Σ_𝒩 e^x_j, q_j = e^(x_j − lse'), E = Σ_𝒩 q_j·x_j
 *     ℓ = lse − x_y + (λ/2)·(E − u·Σ_𝒩 x_j)
 *     ∂ℓ/∂x_y = p_y − 1, ∂ℓ/∂x_j = p_j + (λ/2)·(q_j·(x_j − E + 1) − u)   (j ∈ 𝒩)
 *     state (3 per sample): lse, lse', E.
 *  TAYLOR_CE (order n even): F_j = f_n(x_j) = Σ_{k≤n} x_j^k/k!, Z = Σ_j F_j
 *     ℓ = log Z − log F_y,  ∂ℓ/∂x_k = f_{n−1}(x_k)·(1/Z − [k = y]/F_y);  state: Z.
 *  PC_SOFTMAX (priors w): lse_w = log Σ_j w_j·e^x_j
 *     ℓ = lse_w − x_y,  ∂ℓ/∂x_k = w_k·e^(x_k − lse_w) − [k = y];  state: lse_w.
 *  CROSS_ENTROPY: ℓ = lse − x_y,  ∂ℓ/∂x_k = p_k − [k = y]; OHEM CE, and on CUDA the
 *     f32 cross-entropy problems with class indices, no class weights, a strided class
 *     axis and at most 32 classes (ploss_cuda_cross_entropy hands them over, label
 *     smoothing in ls_a, ls_b:
 *     c_j = ls_b + ls_a·[j = y], ℓ = Σ_j c_j·(lse − x_j), ∂ℓ/∂x_k = Σ_j c_j·p_k − c_k).
 *
 * OHEM (ohem = 1; loss CROSS_ENTROPY or LARGE_MARGIN): the score of a sample is
 * s_i = p_{i,y_i} rounded to f32; its 32-bit key is the bit pattern of s_i (monotone for
 * s ≥ 0; a NaN score, from a NaN or infinite logit, → PLOSS_OHEM_NAN_KEY: the hardest, so
 * it is kept and the loss is NaN as the plain cross-entropy's, not mined away) and
 * PLOSS_OHEM_IGNORED_KEY for ignored samples.  With
 * k_(r) the r-th smallest key of all M samples, the kept set is {valid i : key_i ≤ t*},
 * t* = max(key(τ), k_(n_min)) (no k term when n_min = 0; every valid sample when n_min ≥ M,
 * as the reference skips mining then), so every
 * sample tied with the n_min-th hardest is kept.  Reductions are over the kept set.
 */

typedef enum {
    PLOSS_SAMPLE_LARGE_MARGIN = 0,
    PLOSS_SAMPLE_TAYLOR_CE = 1,
    PLOSS_SAMPLE_PC_SOFTMAX = 2,
    PLOSS_SAMPLE_CROSS_ENTROPY = 3,
    /* the number of kinds: the backends map each kind to its maths and refuse another */
    PLOSS_SAMPLE_KIND_COUNT = 4
} ploss_sample_loss;

#define PLOSS_OHEM_NAN_KEY 0x00000000u     /* a NaN score: with s = 0, the hardest */
#define PLOSS_OHEM_IGNORED_KEY 0xFFFFFFFFu /* ignored samples sort last          */

typedef struct ploss_sample_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_sample_loss loss_kind;
    int64_t N, S, C;

    /* input logits */
    const void *x; ploss_dtype x_dtype; int64_t x_sn, x_ss, x_sc;
    /* class indices, i64 or i32 */
    const void *t; ploss_dtype t_dtype; int64_t t_sn, t_ss;
    /* PC-softmax class priors (C values, any float dtype) */
    const void *w; ploss_dtype w_dtype; int64_t w_s;

    int64_t ignore_index;
    double ls_a, ls_b;       /* CROSS_ENTROPY without OHEM: label smoothing    */
    double lam;              /* large-margin λ                               */
    int order;               /* Taylor order n (even, >= 2)                  */
    double scale;            /* fused: multiplier of the gradient            */

    int ohem;                /* 1: mine hard samples first                   */
    uint32_t thresh_key;     /* key of τ (the score threshold, rounded to f32) */
    int64_t n_min;           /* resolved: ⌊M/16⌋ for the default             */

    /* loss: per sample (NONE) or one scalar (MEAN/SUM); f32 or f64 */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn, l_ss;
    /* saved state: n_state components per sample at n·st_sn + k·st_sk + s·st_ss (forward:
     * written if non-NULL; backward: read if non-NULL, else recomputed); f32 or f64 */
    void *state; ploss_dtype state_dtype; int n_state; int64_t st_sn, st_ss, st_sk;
    /* upstream gradient (backward): scalar (MEAN/SUM) or per sample (NONE) */
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn, gl_ss;
    /* gradient output, the input's dtype */
    void *grad; int64_t g_sn, g_ss, g_sc;
} ploss_sample_problem;

ploss_status ploss_cpu_sample_policies(ploss_ctx_t *ctx, const ploss_sample_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_sample_policies(ploss_ctx_t *ctx, const ploss_sample_problem *p);
/* The row-engine part of the CUDA backend (rows with a contiguous class axis, no mining):
 * PLOSS_ERR_UNSUPPORTED, having launched nothing, for the problems it does not take. */
ploss_status ploss_cuda_sample_policies_rows(ploss_ctx_t *ctx, const ploss_sample_problem *p);
#endif

/* ---- direct rows: losses of the input's values, no softmax --------------------------------
 * Per valid sample (label y ≠ ignore_index), w the class weights (1 without):
 *  NLL (x log-probabilities):  ℓ_i = −w_y·x_iy,   ∂ℓ_i/∂x_ij = −w_y·[j = y];
 *     ignored samples: ℓ = 0, a zero gradient row.  MEAN divides by Σ_valid w_y (the count
 *     of valid samples without weights), as PyTorch.
 *  MULTI_MARGIN (margin m, power p ∈ {1, 2}; every sample is valid):
 *     z_j = m − x_iy + x_ij,  h_j = z_j > 0 ? z_j^p : 0  (a NaN z_j counts: the loss is NaN)
 *     ℓ_i = (w_y/C)·Σ_{j≠y} h_j,   ∂ℓ_i/∂x_ij = (w_y/C)·p·z_j^(p−1) where z_j > 0 (j ≠ y),
 *     ∂ℓ_i/∂x_iy = −Σ_{j≠y} ∂ℓ_i/∂x_ij.  MEAN divides by the sample count, as PyTorch.
 *  MULTILABEL_SOFT_MARGIN (a float target y of the input's shape, every sample valid):
 *     ℓ_i = (1/C)·Σ_j w_j·[y_ij·sp(−x_ij) + (1 − y_ij)·sp(x_ij)],  sp(z) = log(1 + e^z),
 *     ∂ℓ_i/∂x_ij = (w_j/C)·(σ(x_ij) − y_ij).  MEAN divides by the sample count.
 *  MULTILABEL_MARGIN (target: each row's list of class indices y_i1 … y_iL of the input's
 *     shape, ended by its first negative entry (or the row's end); T_i the set of listed
 *     classes; every sample valid; no class weights):
 *     z_kj = 1 − x_i,y_ik + x_ij,  ℓ_i = (1/C)·Σ_{k ≤ L} Σ_{j ∉ T_i} max(0, z_kj)  (a NaN z
 *     counts, as MULTI_MARGIN's); ∂ℓ_i/∂x_ij = (1/C)·#{k : z_kj > 0} for j ∉ T_i, and for a
 *     listed class c, −(1/C)·Σ_{k : y_ik = c} #{j ∉ T_i : z_kj > 0} (a class listed twice
 *     counts twice, as PyTorch's).  MEAN divides by the sample count.
 *  CLASS_SIMPLEX (Torch7's ClassSimplexCriterion: every label in [0, C), no class weights;
 *     s_k the vertex of class k, ploss_simplex_coord):
 *     ℓ_i = Σ_j (x_ij − s_{y_i,j})²,  ∂ℓ_i/∂x_ij = 2·(x_ij − s_{y_i,j}).  MEAN divides by the
 *     input's element count N·S·C (Torch7's MSECriterion's sizeAverage). */

typedef enum {
    PLOSS_DIRECT_NLL = 0,
    PLOSS_DIRECT_MULTI_MARGIN = 1,
    PLOSS_DIRECT_MULTILABEL_SOFT_MARGIN = 2,
    PLOSS_DIRECT_MULTILABEL_MARGIN = 3,
    PLOSS_DIRECT_CLASS_SIMPLEX = 4
} ploss_direct_kind;

typedef struct ploss_direct_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_direct_kind kind;
    int64_t N, S, C;

    /* input log-probabilities */
    const void *x; ploss_dtype x_dtype; int64_t x_sn, x_ss, x_sc;
    /* class indices, i64 or i32; MULTILABEL_SOFT_MARGIN: float labels of the input's shape
     * (t_sc their class stride); MULTILABEL_MARGIN: i64/i32 lists of the input's shape */
    const void *t; ploss_dtype t_dtype; int64_t t_sn, t_ss, t_sc;
    /* class weights, NULL = all ones */
    const void *w; ploss_dtype w_dtype; int64_t w_s;

    int64_t ignore_index;  /* NLL; INT64_MIN (none) for MULTI_MARGIN and CLASS_SIMPLEX; unread by the
                              multi-label kinds */
    double margin;         /* MULTI_MARGIN m */
    int power;             /* MULTI_MARGIN p: 1 or 2 */
    double scale;          /* fused: multiplier of the gradient */

    /* loss: per sample (NONE) or one scalar (MEAN/SUM); f32 or f64 */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn, l_ss;
    /* upstream gradient (backward): scalar (MEAN/SUM) or per sample (NONE) */
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn, gl_ss;
    /* gradient output, the input's dtype */
    void *grad; int64_t g_sn, g_ss, g_sc;
} ploss_direct_problem;

ploss_status ploss_cpu_direct_rows(ploss_ctx_t *ctx, const ploss_direct_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_direct_rows(ploss_ctx_t *ctx, const ploss_direct_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
