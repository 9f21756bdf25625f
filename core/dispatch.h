/*
 * dispatch.h — the one table from (operation, device) to the backend that runs it.  The
 * fronts (core/engines/, core/support/) validate a call, build its problem and hand it
 * here; a CUDA problem in a library built without CUDA gets PLOSS_ERR_UNSUPPORTED from
 * this one place.  Internal.
 */
#ifndef PLOSS_DISPATCH_H
#define PLOSS_DISPATCH_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PLOSS_OP_ROWS_CROSS_ENTROPY = 0, /* ploss_ce_problem        */
    PLOSS_OP_ROWS_SOFTMAX_FOCAL,     /* ploss_sfocal_problem    */
    PLOSS_OP_ROWS_SAMPLE_POLICIES,   /* ploss_sample_problem    */
    PLOSS_OP_ELEMENTWISE_SIGMOID,    /* ploss_sigmoid_problem   */
    PLOSS_OP_ONE_HOT,                /* ploss_one_hot_problem   */
    PLOSS_OP_TAYLOR_SOFTMAX,         /* ploss_taylor_problem    */
    PLOSS_OP_ACTIVATION,             /* ploss_act_problem       */
    PLOSS_OP_GEMM,                   /* ploss_gemm_problem      */
    PLOSS_OP_BIAS_ADD,               /* ploss_bias_problem      */
    PLOSS_OP_BIAS_GRAD,              /* ploss_bias_problem      */
    PLOSS_OP_ARGMAX,                 /* ploss_argmax_problem    */
    PLOSS_OP_OPTIM,                  /* ploss_optim_problem     */
    PLOSS_OP_PAIRS_TRIPLET,          /* ploss_triplet_problem   */
    PLOSS_OP_PAIRS_BATCH_HARD,       /* ploss_batch_hard_problem */
    PLOSS_OP_PAIRS_INFONCE,          /* ploss_infonce_problem   */
    PLOSS_OP_BOXES,                  /* ploss_boxes_problem     */
    PLOSS_OP_BOX_PAIRS,              /* ploss_box_pairs_problem */
    PLOSS_OP_EMA,                    /* ploss_ema_problem       */
    PLOSS_OP_ROWS_DIRECT,            /* ploss_direct_problem    */
    PLOSS_OP_REGION_LOVASZ,          /* ploss_region_problem    */
    PLOSS_OP_REGION_DICE,            /* ploss_region_problem    */
    PLOSS_OP_REGION_AFFINITY_FIELD,  /* ploss_region_problem    */
    PLOSS_OP_REGION_AFFINITY,        /* ploss_region_problem    */
    PLOSS_OP_PAIRS_MARGIN_RANKING,   /* ploss_margin_ranking_problem */
    PLOSS_OP_PAIRS_EMBEDDING, /* ploss_embedding_pair_problem */
    PLOSS_OP_PAIRS_GAUSSIAN_NLL,     /* ploss_gaussian_nll_problem */
    PLOSS_OP_MARGIN,                 /* ploss_margin_problem    */
    PLOSS_OP_LINEAR_CROSS_ENTROPY,   /* ploss_linear_problem    */
    PLOSS_OP_CTC,                    /* ploss_ctc_problem       */
    PLOSS_OP_COUNT
} ploss_op;

/* Make the context's device current (CUDA), or fail with UNSUPPORTED naming `what` when the
 * library has no CUDA backend.  For fronts that return before dispatching (empty tensors). */
ploss_status ploss_enter_device(ploss_ctx_t *ctx, const char *what);

/* Run `problem` (the type listed beside `op`) on the context's device. */
ploss_status ploss_dispatch(ploss_ctx_t *ctx, ploss_op op, const char *what, const void *problem);

#ifdef __cplusplus
}
#endif

#endif
