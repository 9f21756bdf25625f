/*
 * margin.h — the validated problem handed by core/engines/margin.c to the CPU
 * (core/cpu/margin/) and CUDA (kernels/margin/) backends of the margin kernel shape: a
 * softmax cross-entropy over the scaled cosines between N×D embeddings x and C×D class
 * centres w, with an angular or cosine margin on each row's target (the combined margin
 * of InsightFace; AM-softmax/CosFace and ArcFace are its special cases).  Internal.
 *
 *   x̂_i = x_i / max(‖x_i‖, ε),  ŵ_j = w_j / max(‖w_j‖, ε),  c_ij = x̂_i·ŵ_j,
 *   z_ij = s·c_ij (j ≠ y_i),  z_iy = s·φ(c_iy),  ℓ_i = lse_j(z_ij) − z_iy,
 *   φ(c) = cos(m1·θ + m2) − m3 (θ = arccos c), with InsightFace's fallback where the angle
 *   leaves [0, π] and its easy margin (ploss_margin_target below).
 *
 * Both backends compute the cosines in tiles of rows (a GEMM per tile), turn each tile into
 * ∂L/∂c in place (the softmax of each row with the margin on its target), and accumulate
 * ∂L/∂x̂ = G·Ŵ per tile and ∂L/∂Ŵ = Gᵀ·X̂ over the tiles in order; then the
 * normalisation backward.  The tiles are the unit a class-sharded version shares: a
 * device's block of classes against every row, with the rows' max and sum merged.
 *
 * Partial FC (sample_rate < 1; An et al., ICCV Workshops 2021): the front keeps the classes
 * of the batch's labels P and draws k = max(0, n_s − |P|) others uniformly without
 * replacement, n_s = min(C, max(2, ⌊C·rate⌋ + 1)): the k classes outside P with the smallest
 * Philox keys (counter = class, key = seed), so one seed and one batch draw the same classes
 * on every device.  With |P| >= n_s the kept set is P itself.  The backends then run on the
 * kept centres only.  The CPU front draws them on the host (kept, class_pos); CUDA draws them
 * on the device from sample_n and seed (kernels/margin/margin.cu), without reading the labels
 * on the host.
 */
#ifndef PLOSS_MARGIN_INTERNAL_H
#define PLOSS_MARGIN_INTERNAL_H

#include <math.h>

#include "pairs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The margin of the target's cosine, with what the per-row maths precomputes. */
typedef struct {
    double s, m1, m2, m3;
    int easy_margin;
    double cos_m2, sin_m2;
    double threshold; /* cos((π − m2)/m1): at or below it m1·θ + m2 >= π, the fallback   */
    double fallback;  /* m2·sin m2 + m3, subtracted from c by the fallback                */
} ploss_margin;

typedef struct ploss_margin_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_dtype dtype;             /* of x, weight and both gradients                      */
    int64_t N, C, D;
    ploss_pair_operand x, w;       /* x: N×D (sn, sd); w: C×D (sn along the classes)       */
    const void *labels; ploss_dtype label_dtype; int64_t y_sn;
    int64_t ignore_index;
    ploss_margin margin;
    int64_t tile_rows;             /* 0: the backend's budget                              */
    /* Partial FC: the softmax over K kept classes only.  kept: NULL (every class, K = C), or
     * K ascending class indices; class_pos: C entries, each class's position in kept or −1.
     * Both in host memory, valid during the call.  The labels stay the caller's (every one
     * of a row that is not ignored is kept); grad_w is zero on the rows not kept. */
    int64_t K;
    const int64_t *kept, *class_pos;
    /* Partial FC drawn by the backend (CUDA): sample_n = n_s > 0 with kept NULL and K = C
     * (the backend finds the kept count itself), and the draw's seed; 0: no draw there. */
    int64_t sample_n;
    uint64_t seed;
    double scale;                  /* fused: the gradient's multiplier                     */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn;
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn;
    ploss_pair_grad grad_x, grad_w;
    ploss_dtype gx_dtype;          /* of grad_x on the CPU: dtype, or f64 (comm); CUDA
                                    * writes f32 with comm                                  */
    /* Sharded over the ranks of comm (NULL: one device; core/engines/sharded.c): x
     * and the labels hold every rank's rows gathered in rank order (N in all), w this rank's
     * block of C centres, the classes class_offset … class_offset + C − 1 of classes_total,
     * and the labels are those global ids (Partial FC draws among the block's classes, the
     * Philox counter the global id).  Per tile the backend takes each row's statistics over
     * its block — the max M of the non-target cosines, S = Σ e^(s(c − M)) over them, the
     * target's cosine where the block holds it — and merges them over the ranks
     * (ploss_sharded_gather); every rank then has every row's loss.  It stores the losses of
     * rows loss_row0 … loss_row0 + loss_rows − 1 (reduction 'none'; a reduced loss is of
     * every row, bitwise the same on every rank), and ∂L/∂x of every gathered row through
     * this block's classes (gx_dtype; the front sums them over the ranks) times
     * grad_x_factor.  Every rank must take the same tiles of rows (one gather each): their
     * rows derive from tile_rows, or else from classes_max, the most classes any rank's
     * softmax may hold (its block; with Partial FC max(n_s, N) within it), never
     * from the rank's own C or kept count. */
    ploss_comm_t *comm;
    int64_t class_offset, classes_total, classes_max, loss_row0, loss_rows;
    double grad_x_factor;
} ploss_margin_problem;

/* Partial FC's n_s = min(C, max(2, ⌊C·rate⌋ + 1)): the classes kept when the batch's are
 * fewer; at least two, so that a batch of one class still has a softmax (one class alone
 * would give a loss and a gradient of exactly 0). */
static inline int64_t ploss_margin_sample_size(int64_t C, double rate)
{
    double want = floor((double)C * rate) + 1.0;
    if (want < 2.0)
        want = 2.0;
    return want >= (double)C ? C : (int64_t)want;
}

/* Sharded: the position of global label y among this rank's softmax classes (its block, or
 * the kept ones through class_pos), −1 where the block does not hold it or the row is
 * ignored.  class_pos: the backend's copy (host or device), or NULL. */
PLOSS_PAIRS_FN int64_t ploss_margin_shard_class(const ploss_margin_problem *p, const int64_t *class_pos, int64_t y)
{
    const int64_t j = y - p->class_offset;
    if (y == p->ignore_index || j < 0 || j >= p->C)
        return -1;
    return class_pos ? class_pos[j] : j;
}

ploss_status ploss_cpu_margin(ploss_ctx_t *ctx, const ploss_margin_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_margin(ploss_ctx_t *ctx, const ploss_margin_problem *p);
#endif

/* The least sin θ the angular derivative divides by: |cos θ| = 1 has a finite φ′. */
#define PLOSS_MARGIN_SIN_MIN 1e-6

/* The margin from its options (s, m1, m2, m3, easy_margin). */
static inline ploss_margin ploss_margin_of(double s, double m1, double m2, double m3, int easy_margin)
{
    ploss_margin m;
    m.s = s;
    m.m1 = m1;
    m.m2 = m2;
    m.m3 = m3;
    m.easy_margin = easy_margin;
    m.cos_m2 = cos(m2);
    m.sin_m2 = sin(m2);
    m.threshold = cos((3.14159265358979323846 - m2) / m1);
    /* beyond the threshold (m1·θ + m2 > π) the target is c − fallback: InsightFace's
     * c − m2·sin m2 − m3 for m1 = 1; for m1 > 1, where cos(m1·θ + m2) turns back up, the line
     * through its minimum −1 − m3 at c = threshold, so the target keeps falling as θ grows */
    m.fallback = m1 == 1.0 ? m2 * m.sin_m2 + m3 : m.threshold + 1.0 + m3;
    return m;
}

/* φ(c), the target's cosine after the margin, and φ′(c) into *dphi (c is clamped to
 * [−1, 1] first: a rounded cosine may leave it):
 *   m1 = 1, m2 = 0 (a cosine margin):       c − m3, φ′ = 1;
 *   easy_margin and c <= 0:                 c − m3, φ′ = 1;
 *   c <= threshold:                         c − fallback, φ′ = 1 (m1 = 1: c − m2·sin m2 − m3;
 *                                           m1 > 1: c − threshold − 1 − m3, continuous there);
 *   m1 = 1:                                 c·cos m2 − sin θ·sin m2 − m3 (exactly cos(θ + m2) − m3);
 *   else:                                   cos(m1·θ + m2) − m3;
 * φ′ = m1·sin(m1·θ + m2)/max(sin θ, PLOSS_MARGIN_SIN_MIN) for the angular cases. */
PLOSS_PAIRS_FN double ploss_margin_target(const ploss_margin *m, double c, double *dphi)
{
    c = c > 1.0 ? 1.0 : c < -1.0 ? -1.0 : c;
    if ((m->m1 == 1.0 && m->m2 == 0.0) || (m->easy_margin && c <= 0.0)) {
        *dphi = 1.0;
        return c - m->m3;
    }
    if (c <= m->threshold) {
        *dphi = 1.0;
        return c - m->fallback;
    }
    const double sin_t = sqrt(fmax(1.0 - c * c, 0.0)), den = fmax(sin_t, PLOSS_MARGIN_SIN_MIN);
    if (m->m1 == 1.0) {
        *dphi = m->cos_m2 + c * m->sin_m2 / den;
        return c * m->cos_m2 - sin_t * m->sin_m2 - m->m3;
    }
    const double a = m->m1 * acos(c) + m->m2;
    *dphi = m->m1 * sin(a) / den;
    return cos(a) - m->m3;
}

/* The loss of a row from its statistics over every class: M the max of the non-target
 * cosines, S = Σ_{j≠y} e^(s(c_j − M)) ∈ [1, C − 1], cy the target's cosine.  With
 * d = s·(φ(cy) − M): ℓ = log(S + e^d) − d (log1p(S·e^(−d)) for d > 0); *pn = e^(sM − lse),
 * so p_j = e^(s(c_j − M))·pn and 1 − p_y = S·pn (no cancellation); *dphi = φ′(cy). */
PLOSS_PAIRS_FN double ploss_margin_row_loss(const ploss_margin *m, double S, double cy, double M, double *pn,
                                            double *dphi)
{
    const double phi = ploss_margin_target(m, cy, dphi);
    const double d = m->s * (phi - M);
    if (d <= 0.0) {
        const double z = S + exp(d);
        *pn = 1.0 / z;
        return log(z) - d;
    }
    const double e = exp(-d), z = S * e;
    *pn = e / (1.0 + z);
    return log1p(z);
}

#ifdef __cplusplus
}
#endif

#endif
