/*
 * region.h — the validated problem handed by core/engines/region.c to the CPU
 * (core/cpu/region/) and CUDA (kernels/region/) backends of the region kernel shape: losses
 * reduced over groups of pixels (a whole image or the whole batch) per class, whose
 * gradient needs the group's statistics first.  Internal.
 *
 * Layout: logits N×C×d1×…×dk and class-index labels N×d1×…×dk.  The spatial dims d1…dk of
 * the input, the labels and the gradient are merged where all three allow it and kept as
 * up to PLOSS_MAX_DIMS strided dims otherwise (a crop of a map is read in place): pixel s
 * in [0, S) of sample n, in row-major order over `sshape`, lies at
 *     n·x_sn + c·x_sc + Σ_d idx_d(s)·x_ss[d]   (class c of the input and the gradient)
 *     n·t_sn + Σ_d idx_d(s)·t_ss[d]            (its label).
 *
 * Groups are the samples (per_image) or the whole batch.  The front answers calls without
 * pixels itself: a backend sees N·S >= 1 and C >= 1.
 *
 * Lovász-softmax: within a group g,
 * for each class c, the errors of the valid pixels e = |[y = c] − p_c| sorted in decreasing
 * order (ties by increasing pixel index) define the Lovász weights of the Jaccard loss and
 * L_gc = Σ_k e_(k)·g_k.  The loss of NONE has shape [C] (batch) or [N, C] (per_image),
 * strides l_sg (group) and l_sc (class).
 *
 * Soft Dice (per-class sigmoid s = σ(x), one-hot o of the labels): per group and class
 * A_gc = Σ s·o over the valid pixels, B_gc = Σ (s^p + o) over the valid pixels (and the
 * ignored ones unless mask_ignored), R_gc = Σ o; with class weights w_c (given, 1, or
 * Sudre's 1/R_gc²), ℓ_g = 1 − (2·Σ_c w_c·A_gc + smooth)/(Σ_c w_c·B_gc + smooth).  The loss
 * of NONE has one value per group, stride l_sg.  Binary soft Dice: logits of any shape seen
 * as N × 1 × (the other dims) (one sample of one pixel for a 0-d input) and a float target y
 * of the same shape in place of o, with B = Σ (s^p + y^p).
 *
 * Affinity field loss: for each valid pixel u and each of its 8 neighbours v inside the
 * image and valid, the divergence D(u, v) of the softmax distributions, the term
 * λ_same·D for equal labels and λ_diff·max(0, κ − D) otherwise; ℓ_u = (1/8)·Σ_v term.
 *
 * Affinity loss: for each ordered pair of valid pixels (p, q) sharing m(p, q) > 0 of the
 * k×k windows (stride 1, no padding), A = x_p·x_q over the classes, T = [y_p = y_q] and
 * ℓ_p = Σ_q m(p, q)·(softplus(A) − T·A); 'mean' divides by Σ m over the counted pairs.
 */
#ifndef PLOSS_REGION_H
#define PLOSS_REGION_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ploss_region_problem {
    ploss_pass pass;
    ploss_reduction reduction;

    int64_t N, C, S;                /* samples, classes, pixels per sample         */
    int sdim;                       /* merged spatial rank, 0..PLOSS_MAX_DIMS - 2  */
    int64_t sshape[PLOSS_MAX_DIMS]; /* merged spatial shape (S is its product)     */

    const void *x; ploss_dtype x_dtype; int64_t x_sn, x_sc, x_ss[PLOSS_MAX_DIMS];
    const void *t; ploss_dtype t_dtype; int64_t t_sn, t_ss[PLOSS_MAX_DIMS];
    void *grad; int64_t g_sn, g_sc, g_ss[PLOSS_MAX_DIMS];   /* the input's dtype */

    /* loss: NONE, one value per (group, class); MEAN/SUM one scalar; f32 or f64 */
    void *loss; ploss_dtype loss_dtype; int64_t l_sg, l_sc;
    /* upstream gradient (backward): one scalar, or per (group, class) for NONE */
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sg, gl_sc;

    int64_t ignore_index;
    int per_image;  /* groups: the N samples (1) or the whole batch (0)                */
    double scale;   /* fused: the gradient's multiplier                                */

    /* Lovász-softmax */
    int present;    /* 1: only classes present in a group's labels count               */
    const void *ids; ploss_dtype ids_dtype; int64_t ids_n, ids_s; /* classes = 'listed':
                       the classes that count (NULL: present or all)                   */

    /* soft Dice */
    int binary;              /* one sigmoid per element against a float target of the
                                input's shape (C = 1, no ignored pixel, B adds y^p)     */
    double exponent, smooth; /* p > 0 of s^p, smooth >= 0                              */
    int mask_ignored;        /* ignored pixels leave the denominator too               */
    int sudre;               /* class weights 1/R_gc² (a class absent from the group:
                                the largest weight of the group's present classes)     */
    const void *w; ploss_dtype w_dtype; int64_t w_s; /* given class weights; NULL: 1    */

    /* affinity field loss: N×C×H×W, sdim = 2 (H, W unmerged); the loss of NONE and its
     * upstream gradient are N×H×W maps with strides l_sg / gl_sg (n) and l_ss / gl_ss */
    double kl_margin, lambda_same, lambda_diff;
    int reference_divergence; /* Σ p_v·(p_v − p_u) rather than KL(p_v ‖ p_u)          */
    int64_t l_ss[2], gl_ss[2];

    /* affinity loss (the same N×C×H×W layout and N×H×W loss map) */
    int kernel_size;          /* k of the k×k windows, 1..PLOSS_AFFINITY_MAX_KERNEL       */
} ploss_region_problem;

/* The largest window of the affinity loss: a pixel pairs with (2k − 1)² pixels. */
#define PLOSS_AFFINITY_MAX_KERNEL 7

#ifdef __CUDACC__
#define PLOSS_REGION_INLINE __host__ __device__ static inline
#else
#define PLOSS_REGION_INLINE static inline
#endif

/* The groups of a problem and the pixels of each. */
PLOSS_REGION_INLINE int64_t ploss_region_groups(const ploss_region_problem *p) { return p->per_image ? p->N : 1; }
PLOSS_REGION_INLINE int64_t ploss_region_group_pixels(const ploss_region_problem *p)
{
    return p->per_image ? p->S : p->N * p->S;
}

/* The offset of pixel s (row-major over the spatial shape) along the spatial strides ss. */
PLOSS_REGION_INLINE int64_t ploss_region_pixel_offset(const ploss_region_problem *p, const int64_t *ss, int64_t s)
{
    int64_t off = 0;
    for (int d = p->sdim - 1; d >= 0; --d) {
        off += (s % p->sshape[d]) * ss[d];
        s /= p->sshape[d];
    }
    return off;
}

/* The offset of pixel q = n·S + s of a tensor with sample stride sn and spatial strides ss. */
PLOSS_REGION_INLINE int64_t ploss_region_pixel_at(const ploss_region_problem *p, int64_t q, int64_t sn,
                                                  const int64_t *ss)
{
    return (q / p->S) * sn + ploss_region_pixel_offset(p, ss, q % p->S);
}

ploss_status ploss_cpu_lovasz(ploss_ctx_t *ctx, const ploss_region_problem *p);
ploss_status ploss_cpu_dice(ploss_ctx_t *ctx, const ploss_region_problem *p);
ploss_status ploss_cpu_affinity_field(ploss_ctx_t *ctx, const ploss_region_problem *p);
ploss_status ploss_cpu_affinity(ploss_ctx_t *ctx, const ploss_region_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_lovasz(ploss_ctx_t *ctx, const ploss_region_problem *p);
ploss_status ploss_cuda_dice(ploss_ctx_t *ctx, const ploss_region_problem *p);
ploss_status ploss_cuda_affinity_field(ploss_ctx_t *ctx, const ploss_region_problem *p);
ploss_status ploss_cuda_affinity(ploss_ctx_t *ctx, const ploss_region_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
