/*
 * boxes.h — the validated problem handed by core/engines/boxes.c to the CPU
 * (core/cpu/boxes/boxes.c) and CUDA (kernels/boxes/boxes.cu) backends of the box
 * regression losses: box_iou_loss, generalized_box_iou_loss, distance_box_iou_loss and
 * complete_box_iou_loss (formulas in boxes_math.h and core/ploss_losses.h).  Internal.
 *
 * N boxes of four numbers: coordinate k of box n of a box tensor B is at B + n·B_sn + k·B_sk
 * (elements); the per-box tensors (weight, ignore, the loss of NONE, an elementwise upstream
 * gradient) at n·sn.  Also the pairwise similarities of ploss_box_iou.
 */
#ifndef PLOSS_BOXES_INTERNAL_H
#define PLOSS_BOXES_INTERNAL_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The loss of a box, in the order of growing terms (boxes_math.h). */
typedef enum {
    PLOSS_BOX_IOU = 0,  /* 1 − IoU                    */
    PLOSS_BOX_GIOU = 1, /* + (A_C − U)/(A_C + ε)      */
    PLOSS_BOX_DIOU = 2, /* + ρ²/c²                    */
    PLOSS_BOX_CIOU = 3  /* + ρ²/c² + α·v              */
} ploss_box_kind;

typedef struct ploss_boxes_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    ploss_box_kind kind;
    int format;         /* ploss_box_format of the input and the target               */
    int paper_gradient; /* CIoU: the paper's gradient of v (ploss_ciou_gradient PAPER) */
    double eps;
    double scale;       /* fused: gradient multiplier                                  */
    int64_t n;          /* boxes (may be 0)                                            */

    const void *x; ploss_dtype x_dtype; int64_t x_sn, x_sk;   /* predicted boxes          */
    const void *t; ploss_dtype t_dtype; int64_t t_sn, t_sk;   /* target boxes             */
    const void *w; ploss_dtype w_dtype; int64_t w_sn;         /* NULL = 1                 */
    const void *ign; ploss_dtype ign_dtype; int64_t ign_sn;   /* NULL = none ignored      */

    /* loss: per box (NONE, l_sn) or one scalar (MEAN/SUM); f32 or f64 */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn;
    /* upstream gradient (backward): one scalar (MEAN/SUM) or per box (NONE); f32 or f64 */
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn;
    /* gradient output, the input's dtype */
    void *grad; int64_t g_sn, g_sk;
} ploss_boxes_problem;

/* The similarity of every pair of boxes of two sets (ploss_box_iou): out[i, j] =
 * s(a[i], b[j]) with ε₀ = 0 (boxes_math.h). */
typedef struct ploss_box_pairs_problem {
    ploss_box_kind kind;
    int format; /* ploss_box_format of both sets */
    double eps;
    int64_t n, m;
    const void *a; ploss_dtype a_dtype; int64_t a_sn, a_sk; /* N×4 */
    const void *b; ploss_dtype b_dtype; int64_t b_sn, b_sk; /* M×4 */
    void *out; ploss_dtype out_dtype; int64_t o_sn, o_sm;   /* N×M, f32 or f64 */
} ploss_box_pairs_problem;

ploss_status ploss_cpu_boxes(ploss_ctx_t *ctx, const ploss_boxes_problem *p);
ploss_status ploss_cpu_box_pairs(ploss_ctx_t *ctx, const ploss_box_pairs_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_boxes(ploss_ctx_t *ctx, const ploss_boxes_problem *p);
ploss_status ploss_cuda_box_pairs(ploss_ctx_t *ctx, const ploss_box_pairs_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
