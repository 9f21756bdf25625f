/*
 * pairs.h — the validated problems handed by core/engines/pairs.c to the CPU (core/cpu/pairs/)
 * and CUDA (kernels/pairs/) backends of the pairs kernel shape: losses over N×D embeddings
 * that compare rows with rows.  Internal.
 *
 * Triplet margin loss (given triplets): per row i of anchor a, positive p, negative n,
 *   d(u, v) = ‖u − v + ε‖_p (or, cosine, 1 − u·v / (max(‖u‖, 1e-8)·max(‖v‖, 1e-8))),  d_ap = d(a_i, p_i),  d_an = d(a_i, n_i) (swap: the smaller of
 *   d(a_i, n_i) and d(p_i, n_i), whose pair then takes the negative term, half each at a tie),
 *   ℓ_i = max(0, d_ap − d_an + μ)  or (soft margin)  softplus(d_ap − d_an).
 *
 * Batch-hard triplet loss: embeddings x (N×D) and labels y; for each anchor i the farthest
 * positive p(i) (j ≠ i, y_j = y_i) and the nearest negative n(i) (y_j ≠ y_i), mined from row
 * blocks of the distance matrix (a GEMM per block), then ℓ_i from the two distances
 * recomputed from the rows.  Every anchor's two pairs send their gradient to both of their
 * rows; a row's gradient adds the terms of the anchors that chose it in anchor order.  A NaN
 * distance wins the mining (ploss_mine_better), so NaN reaches the losses it would reach
 * through torch.max/min, and a NaN ℓ_i has a NaN ∂ℓ/∂d (ploss_triplet_hinge).
 *
 * InfoNCE: queries q and keys k (N×D), u and v their rows normalised (or not), S = u·vᵀ/τ;
 *   ℓ_i = lse(row i of S) − S_ii, averaged with lse(column i) − S_ii when symmetric.  Both
 *   backends compute S in row tiles (a GEMM each) with the row log-sum-exps exact per tile
 *   and the column ones merged online across tiles; backward recomputes the tiles.
 *
 * Margin ranking loss: scores x1, x2 and signs y of one shape (any rank), one loss per
 *   element, ℓ = max(0, −y·(x1 − x2) + m); every tensor walked through one collapsed shape.
 *
 * Cosine embedding loss: x1, x2 (N×D) and signs y (N), per row the cosine with aten's ε added
 *   to the squared norms, ℓ = 1 − cos (y = 1), max(0, cos − m) (y = −1), 0 (other y).
 *
 * Gaussian NLL: means μ, targets y (any shape) and variances σ², one per element or one per
 *   row of μ's last axis; ℓ = ½·(log v + (μ − y)²/v), v = max(σ², ε), one loss per element.
 *
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
    int cosine;                   /* 1: the cosine distance (p, eps, soft_margin unread)    */
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

typedef struct ploss_batch_hard_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_dtype dtype;            /* of the embeddings and their gradient                   */
    int64_t N, D;
    ploss_pair_operand x;         /* the embeddings                                         */
    const void *labels; ploss_dtype label_dtype; int64_t y_sn;
    int distance;                 /* ploss_pair_distance                                    */
    double margin;
    int soft_margin;
    double scale;                 /* fused: the gradient's multiplier                       */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn;
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn;
    ploss_pair_grad grad;         /* ∂/∂embeddings                                          */
} ploss_batch_hard_problem;

ploss_status ploss_cpu_batch_hard(ploss_ctx_t *ctx, const ploss_batch_hard_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_batch_hard(ploss_ctx_t *ctx, const ploss_batch_hard_problem *p);
#endif

typedef struct ploss_infonce_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_dtype dtype;            /* of both inputs and their gradients                     */
    int64_t N, D;
    ploss_pair_operand x[2];      /* queries, keys                                          */
    double temperature;
    int symmetric, normalize;
    double scale;                 /* fused: the gradient's multiplier                       */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn;
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn;
    ploss_pair_grad grad[2];      /* ∂/∂query, ∂/∂key                                       */
    /* Sharded over the ranks of comm (NULL: one device, M = N, key_offset 0; the front is
     * core/engines/sharded.c): x[0] holds this rank's N queries, x[1] every rank's keys
     * gathered in rank order (M = R·N), query i's positive is key key_offset + i, and every
     * key is some rank's sample (its own column loss).  The backend merges the keys' column
     * statistics over the ranks (pairs of (max, Σ) per key, all-gathered, merged in rank
     * order), stores its rows' losses ('none'; a reduced loss is of all M samples, gathered,
     * bitwise the same on every rank; 'mean' divides by M), reads grad_loss ('none'
     * backward) for all M samples, writes ∂query of its rows and ∂key of all M keys through
     * its queries, in gk_dtype (the accumulation type; the front sums it over the ranks). */
    int64_t M, key_offset;
    ploss_comm_t *comm;
    ploss_dtype gk_dtype;         /* of grad[1] on the CPU: dtype, or f64 (comm); CUDA writes
                                   * its accumulation type with comm                         */
} ploss_infonce_problem;

/* The sharded backends' gather of their per-tile statistics (the margin losses' rows,
 * InfoNCE's columns and losses; core/engines/sharded.c): `count` values of dtype dt at send,
 * on the communicator's device, gathered into recv (nranks·count, rank order). */
ploss_status ploss_sharded_gather(ploss_comm_t *comm, const void *send, void *recv, int64_t count, ploss_dtype dt);

ploss_status ploss_cpu_infonce(ploss_ctx_t *ctx, const ploss_infonce_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_infonce(ploss_ctx_t *ctx, const ploss_infonce_problem *p);
#endif

/* Two score tensors compared element with element, each getting a gradient: the margin
 * ranking loss (with its ±1 target) and the distance ratio loss (no target). */
typedef enum {
    PLOSS_SCORE_PAIR_MARGIN_RANKING = 0,
    PLOSS_SCORE_PAIR_DISTANCE_RATIO = 1
} ploss_score_pair_kind;

/* Margin ranking and distance ratio: every tensor addressed through the same collapsed shape
 * (dims of size 1 dropped, neighbours contiguous in every tensor merged): element k
 * (row-major over shape) of tensor T at Σ_d idx_d(k)·T_st[d]. */
typedef struct ploss_margin_ranking_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_score_pair_kind kind;
    ploss_dtype dtype;            /* of both inputs and their gradients                     */
    int ndim;                     /* collapsed rank, 1..PLOSS_MAX_DIMS                       */
    int64_t shape[PLOSS_MAX_DIMS];
    int64_t numel;
    const void *x1, *x2; int64_t x1_st[PLOSS_MAX_DIMS], x2_st[PLOSS_MAX_DIMS];
    const void *y; ploss_dtype y_dtype; int64_t y_st[PLOSS_MAX_DIMS]; /* float or integer; NULL
                                                                          for DISTANCE_RATIO */
    double margin;                /* MARGIN_RANKING                                         */
    double scale;                 /* fused: the gradient's multiplier                       */
    /* loss: elementwise (NONE) or one value; f32 or f64 */
    void *loss; ploss_dtype loss_dtype; int64_t l_st[PLOSS_MAX_DIMS];
    /* upstream gradient (backward): one value (MEAN/SUM) or elementwise (NONE) */
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_st[PLOSS_MAX_DIMS];
    void *g1, *g2; int64_t g1_st[PLOSS_MAX_DIMS], g2_st[PLOSS_MAX_DIMS];
} ploss_margin_ranking_problem;

ploss_status ploss_cpu_margin_ranking(ploss_ctx_t *ctx, const ploss_margin_ranking_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_margin_ranking(ploss_ctx_t *ctx, const ploss_margin_ranking_problem *p);
#endif

/* Gaussian NLL: μ's elements as R rows of its last axis (D values; a 0-d μ is one row of
 * one), rows numbered row-major over μ's other dims.  Element (r, j) of tensor T is at
 * T_row(r) + j·T_sd with T_row(r) = Σ_d idx_d(r)·T_st[d] over the rows' dims `shape`.  The
 * variance is read at v_row(r) + j·v_sd: v_sd = 0 when one variance serves the row, and
 * var_per_row where that row has other than one element (its gradient is then the row's
 * sum, at gv_row(r); rows of one element are taken as elements). */
typedef struct ploss_gaussian_nll_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_dtype dtype;            /* of the three inputs and their gradients                */
    int ndim;                     /* rank of the rows' index space, 0..PLOSS_MAX_DIMS − 1    */
    int64_t shape[PLOSS_MAX_DIMS];
    int64_t rows, D, numel;       /* numel = rows·D                                         */
    int var_per_row;
    int full;
    double eps;
    double scale;                 /* fused: the gradient's multiplier                       */
    const void *x, *t, *v;
    int64_t x_st[PLOSS_MAX_DIMS], t_st[PLOSS_MAX_DIMS], v_st[PLOSS_MAX_DIMS];
    int64_t x_sd, t_sd, v_sd;
    /* loss: elementwise (NONE, μ's shape) or one value; f32 or f64 */
    void *loss; ploss_dtype loss_dtype; int64_t l_st[PLOSS_MAX_DIMS], l_sd;
    /* upstream gradient (backward): one value (MEAN/SUM) or elementwise (NONE) */
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_st[PLOSS_MAX_DIMS], gl_sd;
    void *gx, *gt, *gv;
    int64_t gx_st[PLOSS_MAX_DIMS], gt_st[PLOSS_MAX_DIMS], gv_st[PLOSS_MAX_DIMS];
    int64_t gx_sd, gt_sd, gv_sd;
} ploss_gaussian_nll_problem;

ploss_status ploss_cpu_gaussian_nll(ploss_ctx_t *ctx, const ploss_gaussian_nll_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_gaussian_nll(ploss_ctx_t *ctx, const ploss_gaussian_nll_problem *p);
#endif

/* The embedding pairs: N×D inputs (D inputs: N = 1, sn = 0) and N signs, compared by their
 * cosine (cosine_embedding_loss) or their L1 distance (l1_hinge_embedding_loss). */
typedef enum { PLOSS_EMBEDDING_PAIR_COSINE = 0, PLOSS_EMBEDDING_PAIR_L1_HINGE = 1 } ploss_embedding_pair_kind;
typedef struct ploss_embedding_pair_problem {
    ploss_embedding_pair_kind kind;
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_dtype dtype;            /* of both inputs and their gradients                     */
    int64_t N, D;
    ploss_pair_operand x[2];      /* input1, input2                                          */
    const void *y; ploss_dtype y_dtype; int64_t y_sn; /* float or integer                   */
    double margin;
    double scale;                 /* fused: the gradient's multiplier                       */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn;
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn;
    ploss_pair_grad grad[2];      /* ∂/∂input1, ∂/∂input2                                    */
} ploss_embedding_pair_problem;

ploss_status ploss_cpu_embedding_pairs(ploss_ctx_t *ctx, const ploss_embedding_pair_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_embedding_pairs(ploss_ctx_t *ctx, const ploss_embedding_pair_problem *p);
#endif

/* The smallest norm a normalised row is divided by (F.normalize's eps). */
#define PLOSS_NORMALIZE_EPS 1e-12

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

/* ℓ and c = ∂ℓ/∂d_ap (= −∂ℓ/∂d_an) of a triplet from its two distances; the hinge's gradient
 * passes at the kink (PyTorch 2.15's clamp_min gives 0 there).  A NaN argument (a NaN distance, or ∞ − ∞) gives
 * ℓ = NaN, as clamp_min, and c = NaN, so that the rows of a NaN loss get a NaN gradient
 * rather than a silent 0 (softplus and σ of NaN are NaN already). */
PLOSS_PAIRS_FN double ploss_triplet_hinge(double d_ap, double d_an, double margin, int soft_margin, double *c)
{
    if (soft_margin) {
        *c = ploss_sigmoid(d_ap - d_an);
        return ploss_softplus(d_ap - d_an);
    }
    const double t = d_ap - d_an + margin;
    if (t != t) { /* NaN: neither branch below may turn it into 0 */
        *c = t;
        return t;
    }
    *c = t >= 0.0 ? 1.0 : 0.0;
    return t > 0.0 ? t : 0.0;
}

/* What one triplet row gives: its loss, and the factors of its gradient.  With
 * g_uv = sign(z)|z|^(p−1), z = u − v + ε (per component):
 *   ∂ℓ/∂a += k_ap·g_ap,  ∂ℓ/∂p −= k_ap·g_ap
 *   ∂ℓ/∂a += k_an·g_an,  ∂ℓ/∂n −= k_an·g_an
 *   ∂ℓ/∂p += k_pn·g_pn,  ∂ℓ/∂n −= k_pn·g_pn   (swap only)
 * k = ±c / d^(p−1) (0 at d = 0, NaN at a NaN d): c = ∂ℓ/∂d_ap = −∂ℓ/∂d_neg (before that
 * division, from ploss_triplet_split: k = ∂ℓ/∂d of each pair).  With swap the negative term
 * goes as torch.minimum's backward sends it: all to the smaller of d_an and d_pn, half to
 * each at a tie, all to both when either is NaN. */
typedef struct {
    double loss, k_ap, k_an, k_pn;
} ploss_triplet_row;

/* The row from its three distances (d_pn read only with swap): the loss and k = ∂ℓ/∂d of
 * each pair, the negative term −c where torch.minimum's backward sends it. */
PLOSS_PAIRS_FN ploss_triplet_row ploss_triplet_split(double d_ap, double d_an, double d_pn, double margin,
                                                     int soft_margin, int swap)
{
    ploss_triplet_row r;
    if (!swap)
        d_pn = d_an;
    /* torch.minimum: a NaN either side is the result */
    const double d_neg = d_pn < d_an || d_pn != d_pn ? d_pn : d_an;
    double c;
    r.loss = ploss_triplet_hinge(d_ap, d_neg, margin, soft_margin, &c);
    r.k_ap = c;
    r.k_an = r.k_pn = 0.0;
    if (!swap || d_an < d_pn)
        r.k_an = -c;
    else if (d_pn < d_an)
        r.k_pn = -c;
    else if (d_an == d_pn) /* a tie: half each */
        r.k_an = r.k_pn = -0.5 * c;
    else /* a NaN: both */
        r.k_an = r.k_pn = -c;
    return r;
}

/* ∂d/∂z = g / d^(p−1) for k = ∂ℓ/∂d: k / d^(p−1), 0 where k or d is 0 (a zero distance has a
 * zero gradient), NaN at a NaN d. */
PLOSS_PAIRS_FN double ploss_pnorm_factor(double k, double d, double p)
{
    const double den = p == 2.0 ? d : p == 1.0 ? 1.0 : pow(d, p - 1.0);
    return k != 0.0 && d != 0.0 ? k / den : 0.0;
}

/* The row from the sums Σ|z|^p of its pairs (s_pn read only with swap). */
PLOSS_PAIRS_FN ploss_triplet_row ploss_triplet_finish(double s_ap, double s_an, double s_pn, double p, double margin,
                                                      int soft_margin, int swap)
{
    const double d_ap = ploss_pnorm_root(s_ap, p), d_an = ploss_pnorm_root(s_an, p);
    const double d_pn = swap ? ploss_pnorm_root(s_pn, p) : d_an;
    ploss_triplet_row r = ploss_triplet_split(d_ap, d_an, d_pn, margin, soft_margin, swap);
    r.k_ap = ploss_pnorm_factor(r.k_ap, d_ap, p);
    r.k_an = ploss_pnorm_factor(r.k_an, d_an, p);
    r.k_pn = ploss_pnorm_factor(r.k_pn, d_pn, p);
    return r;
}

/* The smallest norm the cosine distance divides by. */
#define PLOSS_COSINE_EPS 1e-8

/* max(r, PLOSS_COSINE_EPS) that keeps a NaN r (fmax would return the eps). */
PLOSS_PAIRS_FN double ploss_cosine_norm(double r) { return r < PLOSS_COSINE_EPS ? PLOSS_COSINE_EPS : r; }

/* A triplet row with the cosine distance d(u, v) = 1 − u·v / (max(‖u‖, ε)·max(‖v‖, ε)):
 * the loss and the gradient as  ∂ℓ/∂a = self[0]·a + cross_ap·p + cross_an·n,
 * ∂ℓ/∂p = self[1]·p + cross_ap·a + cross_pn·n,  ∂ℓ/∂n = self[2]·n + cross_an·a + cross_pn·p.
 * For a pair with k = ∂ℓ/∂d and clamped norms c_u, c_v: ∂d/∂u = −v/(c_u·c_v) + cos·u/(c_u·‖u‖),
 * PyTorch's cosine_similarity backward (the norm's own derivative u/‖u‖ unclamped, 0 at
 * u = 0).  sq: the squared norms of a, p, n; ap, an, pn: the products (pn read only with
 * swap). */
typedef struct {
    double loss, self[3], cross_ap, cross_an, cross_pn;
} ploss_triplet_cosine_row;

PLOSS_PAIRS_FN ploss_triplet_cosine_row ploss_triplet_cosine_finish(const double sq[3], double ap, double an, double pn,
                                                                    double margin, int swap)
{
    double nrm[3], cl[3];
    for (int k = 0; k < 3; ++k) {
        nrm[k] = sqrt(sq[k]);
        cl[k] = ploss_cosine_norm(nrm[k]);
    }
    const double cos_ap = ap / (cl[0] * cl[1]), cos_an = an / (cl[0] * cl[2]);
    const double cos_pn = swap ? pn / (cl[1] * cl[2]) : cos_an;
    const ploss_triplet_row h = ploss_triplet_split(1.0 - cos_ap, 1.0 - cos_an, 1.0 - cos_pn, margin, 0, swap);
    ploss_triplet_cosine_row r;
    r.loss = h.loss;
    r.self[0] = r.self[1] = r.self[2] = 0.0;
    const int pair_u[3] = {0, 0, 1}, pair_v[3] = {1, 2, 2};
    const double ks[3] = {h.k_ap, h.k_an, h.k_pn}, cs[3] = {cos_ap, cos_an, cos_pn};
    double cross[3];
    for (int q = 0; q < 3; ++q) {
        const int u = pair_u[q], v = pair_v[q];
        const double k = ks[q];
        cross[q] = k != 0.0 ? -k / (cl[u] * cl[v]) : 0.0;
        if (k != 0.0 && nrm[u] != 0.0)
            r.self[u] += k * cs[q] / (cl[u] * nrm[u]);
        if (k != 0.0 && nrm[v] != 0.0)
            r.self[v] += k * cs[q] / (cl[v] * nrm[v]);
    }
    r.cross_ap = cross[0];
    r.cross_an = cross[1];
    r.cross_pn = cross[2];
    return r;
}

/* A distance of the distance matrix from the product x_i·x_j and the squared norms (the
 * mining values: squared and Euclidean clamp the cancellation's negative values at 0, a NaN
 * stays NaN).  A result that is not finite may come from ∞ − ∞ in the expansion where
 * ‖x_i − x_j‖ itself is ∞: the backends then take the distance from the rows
 * (ploss_pair_distance_from_sums) before mining it. */
PLOSS_PAIRS_FN double ploss_pair_distance_from_gram(int distance, double dot, double sq_i, double sq_j)
{
    if (distance == 2 /* cosine */) {
        const double ni = ploss_cosine_norm(sqrt(sq_i)), nj = ploss_cosine_norm(sqrt(sq_j));
        return 1.0 - dot / (ni * nj);
    }
    double s = sq_i + sq_j - 2.0 * dot;
    if (s < 0.0)
        s = 0.0;
    return distance == 1 /* squared */ ? s : sqrt(s);
}

/* The same distance from dd = Σ(x_i − x_j)² (and, for cosine, the product and norms). */
PLOSS_PAIRS_FN double ploss_pair_distance_from_sums(int distance, double dd, double dot, double sq_i, double sq_j)
{
    if (distance == 2)
        return ploss_pair_distance_from_gram(distance, dot, sq_i, sq_j);
    return distance == 1 ? dd : sqrt(dd);
}

/* Whether the candidate (d2, k2) replaces (d, k) as an anchor's hardest pair: the larger
 * distance (want_max: the farthest positive) or the smaller (the nearest negative), the
 * lower index at equal values; k < 0 is no pair yet.  A NaN distance beats every number,
 * as torch.max and torch.min propagate NaN (two NaN: the lower index), so that a NaN in the
 * batch reaches the loss of every anchor that compares against it instead of being skipped. */
PLOSS_PAIRS_FN int ploss_mine_better(double d, int64_t k, double d2, int64_t k2, int want_max)
{
    if (k2 < 0)
        return 0;
    if (k < 0)
        return 1;
    const int nan = d != d, nan2 = d2 != d2;
    if (nan || nan2)
        return nan2 && (!nan || k2 < k);
    return (want_max ? d2 > d : d2 < d) || (d2 == d && k2 < k);
}

/* One chosen pair (i, j) with ∂ℓ/∂d = c: its distance, recomputed from the rows' sums
 * (dd = Σ(x_i − x_j)², dot = x_i·x_j, sq = ‖·‖²), and the coefficients of its gradient
 *   ∂(c·d)/∂x_i = self_i·x_i + cross·x_j,   ∂(c·d)/∂x_j = self_j·x_j + cross·x_i. */
typedef struct {
    double d, self_i, self_j, cross;
} ploss_pair_terms;

PLOSS_PAIRS_FN ploss_pair_terms ploss_pair_terms_of(int distance, double dd, double dot, double sq_i, double sq_j)
{
    ploss_pair_terms t;
    if (distance == 2) { /* cosine: d = 1 − dot/(n_i n_j), the norms clamped at eps */
        const double ri = sqrt(sq_i), rj = sqrt(sq_j);
        const double ni = ploss_cosine_norm(ri), nj = ploss_cosine_norm(rj);
        t.d = 1.0 - dot / (ni * nj);
        t.cross = -1.0 / (ni * nj);
        t.self_i = ri <= PLOSS_COSINE_EPS ? 0.0 : dot / (ni * ni * ni * nj); /* NaN stays NaN */
        t.self_j = rj <= PLOSS_COSINE_EPS ? 0.0 : dot / (nj * nj * nj * ni);
    } else if (distance == 1) { /* squared: ∂/∂x_i = 2(x_i − x_j) */
        t.d = dd;
        t.self_i = t.self_j = 2.0;
        t.cross = -2.0;
    } else { /* Euclidean: (x_i − x_j)/d, 0 at d = 0 (NaN at a NaN d) */
        t.d = sqrt(dd);
        const double k = t.d == 0.0 ? 0.0 : 1.0 / t.d;
        t.self_i = t.self_j = k;
        t.cross = -k;
    }
    return t;
}

/* Online log-sum-exp: merge the partial (m2, s2) — max and Σe^(x − max) — into (m, s). */
PLOSS_PAIRS_FN void ploss_lse_merge(double *m, double *s, double m2, double s2)
{
    if (s2 == 0.0)
        return;
    if (*s == 0.0 || m2 > *m) {
        *s = s2 + (*s == 0.0 ? 0.0 : *s * exp(*m - m2));
        *m = m2;
    } else {
        *s += s2 * exp(m2 - *m);
    }
}

/* Margin ranking, one element: ℓ = max(0, u), u = −y·(x1 − x2) + m (a NaN u stays NaN, as
 * clamp_min); *g1 = ∂ℓ/∂x1 times the upstream factor w, as autograd gives it: w where u >= 0
 * (the gradient passes at the kink, where PyTorch 2.15 gives 0), else 0 whatever w is; then times −y (so a NaN y gives
 * NaN).  ∂ℓ/∂x2 = −*g1. */
PLOSS_PAIRS_FN double ploss_margin_ranking_elem(double x1, double x2, double y, double margin, double w, double *g1)
{
    const double u = -y * (x1 - x2) + margin;
    *g1 = (u >= 0.0 ? w : 0.0) * -y;
    return u > 0.0 || u != u ? u : 0.0;
}

/* Distance ratio, one element: ℓ = softplus(x1 − x2) = x1 + log(e^−x1 + e^−x2), as
 * max(d, 0) + log1p(e^−|d|) (d = x1 − x2: finite for any finite distances; a NaN d, from a
 * NaN distance or ∞ − ∞, gives NaN loss and gradients through e); *g1 = ∂ℓ/∂x1 times w =
 * σ(d)·w, σ taken without overflow on either side (x2 = +∞ gives 0).  ∂ℓ/∂x2 = −*g1. */
PLOSS_PAIRS_FN double ploss_distance_ratio_elem(double x1, double x2, double w, double *g1)
{
    const double d = x1 - x2, e = exp(-fabs(d));
    *g1 = w * (d >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e));
    return (d > 0.0 ? d : 0.0) + log1p(e);
}

/* Gaussian NLL, one element: ℓ = ½·(log v + d²/v) (+ ½·log 2π when full), d = μ − y,
 * v = max(σ², ε) (a NaN σ² stays NaN, as torch.clamp); *gx = ∂ℓ/∂μ·w = w·d/v (∂ℓ/∂y is its
 * negation), *gv = ∂ℓ/∂σ²·w = w·½·(1/v − d²/v²), taken at v also where σ² < ε (PyTorch
 * clamps a copy outside autograd).  A negative σ² is the caller's to refuse. */
#define PLOSS_HALF_LOG_2PI 0.91893853320467274178
PLOSS_PAIRS_FN double ploss_gaussian_nll_elem(double x, double y, double var, double eps, int full, double w,
                                              double *gx, double *gv)
{
    const double v = var < eps ? eps : var, d = x - y, q = d / v;
    *gx = w * q;
    *gv = w * 0.5 * (1.0 / v - q * q);
    return 0.5 * (log(v) + d * q) + (full ? PLOSS_HALF_LOG_2PI : 0.0);
}

/* Gaussian NLL: the offsets (elements) of row r's first element in every tensor of p, from
 * one walk of the rows' index space (tensors a pass does not use have strides 0). */
typedef struct {
    int64_t x, t, v, l, gl, gx, gt, gv;
} ploss_gaussian_row;

PLOSS_PAIRS_FN ploss_gaussian_row ploss_gaussian_row_offsets(const ploss_gaussian_nll_problem *p, int64_t r)
{
    ploss_gaussian_row o = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int d = p->ndim - 1; d >= 0; --d) {
        const int64_t i = r % p->shape[d];
        r /= p->shape[d];
        o.x += i * p->x_st[d];
        o.t += i * p->t_st[d];
        o.v += i * p->v_st[d];
        o.l += i * p->l_st[d];
        o.gl += i * p->gl_st[d];
        o.gx += i * p->gx_st[d];
        o.gt += i * p->gt_st[d];
        o.gv += i * p->gv_st[d];
    }
    return o;
}

/* aten's EPSILON of cosine_embedding_loss, added to each squared norm. */
#define PLOSS_COSINE_EMBEDDING_EPS 1e-12

/* Cosine embedding, one pair, from its sums dot = Σx1·x2, s1 = Σx1², s2 = Σx2², its label y,
 * the margin and the upstream factor w: the loss and the coefficients of its gradients
 *   ∂/∂x1 = self1·x1 + cross·x2,   ∂/∂x2 = self2·x2 + cross·x1.
 * g = ∂ℓ/∂cos·w is w's selection by autograd's where (0 for a pair whose branch is not taken,
 * whatever w); the coefficients are then g/d, −g·cos/A, −g·cos/B, so a NaN sum gives NaN
 * gradients even at g = 0, as autograd's 0·NaN. */
typedef struct {
    double loss, self1, self2, cross;
} ploss_cosine_pair;

PLOSS_PAIRS_FN ploss_cosine_pair ploss_cosine_embedding_finish(double dot, double s1, double s2, double y,
                                                               double margin, double w)
{
    ploss_cosine_pair r;
    const double A = s1 + PLOSS_COSINE_EMBEDDING_EPS, B = s2 + PLOSS_COSINE_EMBEDDING_EPS;
    const double d = sqrt(A * B);
    const double c = dot / d;
    double g = 0.0;
    r.loss = 0.0;
    if (y == 1.0) {
        r.loss = 1.0 - c;
        g = -w;
    } else if (y == -1.0) {
        const double t = c - margin;
        r.loss = t > 0.0 || t != t ? t : 0.0;
        g = t >= 0.0 ? w : 0.0;
    }
    r.cross = g / d;
    r.self1 = -g * c / A;
    r.self2 = -g * c / B;
    return r;
}

/* L1 hinge embedding (Torch7's L1HingeEmbeddingCriterion), one pair, from its L1 distance
 * d, its label y, the margin and the upstream factor w: the loss and the coefficient c of its
 * gradients ∂/∂x1_j = c·sign(x1_j − x2_j), ∂/∂x2_j = −c·sign(x1_j − x2_j).  A dissimilar pair
 * (y = −1) passes the gradient unless d > m (at the kink and for a NaN d, as Torch7); any
 * other y is a similar pair. */
typedef struct {
    double loss, c;
} ploss_l1_hinge_pair;

PLOSS_PAIRS_FN ploss_l1_hinge_pair ploss_l1_hinge_embedding_finish(double d, double y, double margin, double w)
{
    ploss_l1_hinge_pair r;
    if (y == -1.0) {
        const double t = margin - d;
        r.loss = t > 0.0 || t != t ? t : 0.0;
        r.c = d > margin ? 0.0 : -w;
    } else {
        r.loss = d;
        r.c = w;
    }
    return r;
}

/* sign(t): 0 at 0, NaN for NaN (the subgradient of |t| that autograd and Torch7 take). */
PLOSS_PAIRS_FN double ploss_sign_or_nan(double t) { return t > 0.0 ? 1.0 : t < 0.0 ? -1.0 : t == 0.0 ? 0.0 : t; }

#ifdef __cplusplus
}
#endif

#endif
