/*
 * dispatch.c — the (operation, device) → backend table of core/dispatch.h.  The backends
 * keep their typed signatures; the thin adapters below give them one shape.
 */
#include "dispatch.h"

#include <omp.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "activations.h"
#include "boxes.h"
#include "elementwise.h"
#include "ema.h"
#include "gemm.h"
#include "linear.h"
#include "linear_cross_entropy.h"
#include "margin.h"
#include "one_hot.h"
#include "optim.h"
#include "pairs.h"
#include "region.h"
#include "rows.h"
#include "sequence.h"
#include "taylor.h"

typedef ploss_status (*ploss_backend)(ploss_ctx_t *ctx, const void *problem);

/* An adapter `name` calling backend `fn` on a problem of type `type`, with or without ctx. */
#define WITH_CTX(name, fn, type) \
    static ploss_status name(ploss_ctx_t *ctx, const void *p) { return fn(ctx, (const type *)p); }
#define NO_CTX(name, fn, type)                                 \
    static ploss_status name(ploss_ctx_t *ctx, const void *p) \
    {                                                          \
        (void)ctx;                                             \
        return fn((const type *)p);                            \
    }

WITH_CTX(cpu_cross_entropy, ploss_cpu_cross_entropy, ploss_ce_problem)
WITH_CTX(cpu_softmax_focal, ploss_cpu_softmax_focal, ploss_sfocal_problem)
WITH_CTX(cpu_sample_policies, ploss_cpu_sample_policies, ploss_sample_problem)
WITH_CTX(cpu_sigmoid, ploss_cpu_sigmoid, ploss_sigmoid_problem)
WITH_CTX(cpu_one_hot, ploss_cpu_one_hot, ploss_one_hot_problem)
WITH_CTX(cpu_taylor, ploss_cpu_taylor, ploss_taylor_problem)
NO_CTX(cpu_activation, ploss_cpu_activation, ploss_act_problem)
WITH_CTX(cpu_gemm, ploss_cpu_gemm, ploss_gemm_problem)
NO_CTX(cpu_bias_add, ploss_cpu_bias_add, ploss_bias_problem)
NO_CTX(cpu_bias_grad, ploss_cpu_bias_grad, ploss_bias_problem)
NO_CTX(cpu_argmax, ploss_cpu_argmax, ploss_argmax_problem)
NO_CTX(cpu_optim, ploss_cpu_optim, ploss_optim_problem)
WITH_CTX(cpu_triplet, ploss_cpu_triplet, ploss_triplet_problem)
WITH_CTX(cpu_batch_hard, ploss_cpu_batch_hard, ploss_batch_hard_problem)
WITH_CTX(cpu_infonce, ploss_cpu_infonce, ploss_infonce_problem)
WITH_CTX(cpu_boxes, ploss_cpu_boxes, ploss_boxes_problem)
WITH_CTX(cpu_box_pairs, ploss_cpu_box_pairs, ploss_box_pairs_problem)
NO_CTX(cpu_ema, ploss_cpu_ema, ploss_ema_problem)
WITH_CTX(cpu_direct_rows, ploss_cpu_direct_rows, ploss_direct_problem)
WITH_CTX(cpu_lovasz, ploss_cpu_lovasz, ploss_region_problem)
WITH_CTX(cpu_dice, ploss_cpu_dice, ploss_region_problem)
WITH_CTX(cpu_affinity_field, ploss_cpu_affinity_field, ploss_region_problem)
WITH_CTX(cpu_affinity, ploss_cpu_affinity, ploss_region_problem)
WITH_CTX(cpu_margin_ranking, ploss_cpu_margin_ranking, ploss_margin_ranking_problem)
WITH_CTX(cpu_gaussian_nll, ploss_cpu_gaussian_nll, ploss_gaussian_nll_problem)
WITH_CTX(cpu_embedding_pairs, ploss_cpu_embedding_pairs, ploss_embedding_pair_problem)
WITH_CTX(cpu_margin, ploss_cpu_margin, ploss_margin_problem)
WITH_CTX(cpu_linear_ce, ploss_cpu_linear_cross_entropy, ploss_linear_problem)
WITH_CTX(cpu_ctc, ploss_cpu_ctc, ploss_ctc_problem)

#ifdef PLOSS_HAVE_CUDA
WITH_CTX(cuda_cross_entropy, ploss_cuda_cross_entropy, ploss_ce_problem)
WITH_CTX(cuda_softmax_focal, ploss_cuda_softmax_focal, ploss_sfocal_problem)
WITH_CTX(cuda_sample_policies, ploss_cuda_sample_policies, ploss_sample_problem)
WITH_CTX(cuda_sigmoid, ploss_cuda_sigmoid, ploss_sigmoid_problem)
WITH_CTX(cuda_one_hot, ploss_cuda_one_hot, ploss_one_hot_problem)
WITH_CTX(cuda_taylor, ploss_cuda_taylor, ploss_taylor_problem)
WITH_CTX(cuda_activation, ploss_cuda_activation, ploss_act_problem)
WITH_CTX(cuda_gemm, ploss_cuda_gemm, ploss_gemm_problem)
WITH_CTX(cuda_bias_add, ploss_cuda_bias_add, ploss_bias_problem)
WITH_CTX(cuda_bias_grad, ploss_cuda_bias_grad, ploss_bias_problem)
WITH_CTX(cuda_argmax, ploss_cuda_argmax, ploss_argmax_problem)
WITH_CTX(cuda_optim, ploss_cuda_optim, ploss_optim_problem)
WITH_CTX(cuda_triplet, ploss_cuda_triplet, ploss_triplet_problem)
WITH_CTX(cuda_batch_hard, ploss_cuda_batch_hard, ploss_batch_hard_problem)
WITH_CTX(cuda_infonce, ploss_cuda_infonce, ploss_infonce_problem)
WITH_CTX(cuda_boxes, ploss_cuda_boxes, ploss_boxes_problem)
WITH_CTX(cuda_box_pairs, ploss_cuda_box_pairs, ploss_box_pairs_problem)
WITH_CTX(cuda_ema, ploss_cuda_ema, ploss_ema_problem)
WITH_CTX(cuda_direct_rows, ploss_cuda_direct_rows, ploss_direct_problem)
WITH_CTX(cuda_lovasz, ploss_cuda_lovasz, ploss_region_problem)
WITH_CTX(cuda_dice, ploss_cuda_dice, ploss_region_problem)
WITH_CTX(cuda_affinity_field, ploss_cuda_affinity_field, ploss_region_problem)
WITH_CTX(cuda_affinity, ploss_cuda_affinity, ploss_region_problem)
WITH_CTX(cuda_margin_ranking, ploss_cuda_margin_ranking, ploss_margin_ranking_problem)
WITH_CTX(cuda_gaussian_nll, ploss_cuda_gaussian_nll, ploss_gaussian_nll_problem)
WITH_CTX(cuda_embedding_pairs, ploss_cuda_embedding_pairs, ploss_embedding_pair_problem)
WITH_CTX(cuda_margin, ploss_cuda_margin, ploss_margin_problem)
WITH_CTX(cuda_linear_ce, ploss_cuda_linear_cross_entropy, ploss_linear_problem)
WITH_CTX(cuda_ctc, ploss_cuda_ctc, ploss_ctc_problem)
#define CUDA(fn) fn
#else
#define CUDA(fn) NULL
#endif

enum { CPU = 0, GPU = 1 };

static const ploss_backend backends[PLOSS_OP_COUNT][2] = {
    [PLOSS_OP_ROWS_CROSS_ENTROPY] = {[CPU] = cpu_cross_entropy, [GPU] = CUDA(cuda_cross_entropy)},
    [PLOSS_OP_ROWS_SOFTMAX_FOCAL] = {[CPU] = cpu_softmax_focal, [GPU] = CUDA(cuda_softmax_focal)},
    [PLOSS_OP_ROWS_SAMPLE_POLICIES] = {[CPU] = cpu_sample_policies, [GPU] = CUDA(cuda_sample_policies)},
    [PLOSS_OP_ELEMENTWISE_SIGMOID] = {[CPU] = cpu_sigmoid, [GPU] = CUDA(cuda_sigmoid)},
    [PLOSS_OP_ONE_HOT] = {[CPU] = cpu_one_hot, [GPU] = CUDA(cuda_one_hot)},
    [PLOSS_OP_TAYLOR_SOFTMAX] = {[CPU] = cpu_taylor, [GPU] = CUDA(cuda_taylor)},
    [PLOSS_OP_ACTIVATION] = {[CPU] = cpu_activation, [GPU] = CUDA(cuda_activation)},
    [PLOSS_OP_GEMM] = {[CPU] = cpu_gemm, [GPU] = CUDA(cuda_gemm)},
    [PLOSS_OP_BIAS_ADD] = {[CPU] = cpu_bias_add, [GPU] = CUDA(cuda_bias_add)},
    [PLOSS_OP_BIAS_GRAD] = {[CPU] = cpu_bias_grad, [GPU] = CUDA(cuda_bias_grad)},
    [PLOSS_OP_ARGMAX] = {[CPU] = cpu_argmax, [GPU] = CUDA(cuda_argmax)},
    [PLOSS_OP_OPTIM] = {[CPU] = cpu_optim, [GPU] = CUDA(cuda_optim)},
    [PLOSS_OP_PAIRS_TRIPLET] = {[CPU] = cpu_triplet, [GPU] = CUDA(cuda_triplet)},
    [PLOSS_OP_PAIRS_BATCH_HARD] = {[CPU] = cpu_batch_hard, [GPU] = CUDA(cuda_batch_hard)},
    [PLOSS_OP_PAIRS_INFONCE] = {[CPU] = cpu_infonce, [GPU] = CUDA(cuda_infonce)},
    [PLOSS_OP_BOXES] = {[CPU] = cpu_boxes, [GPU] = CUDA(cuda_boxes)},
    [PLOSS_OP_BOX_PAIRS] = {[CPU] = cpu_box_pairs, [GPU] = CUDA(cuda_box_pairs)},
    [PLOSS_OP_EMA] = {[CPU] = cpu_ema, [GPU] = CUDA(cuda_ema)},
    [PLOSS_OP_ROWS_DIRECT] = {[CPU] = cpu_direct_rows, [GPU] = CUDA(cuda_direct_rows)},
    [PLOSS_OP_REGION_LOVASZ] = {[CPU] = cpu_lovasz, [GPU] = CUDA(cuda_lovasz)},
    [PLOSS_OP_REGION_DICE] = {[CPU] = cpu_dice, [GPU] = CUDA(cuda_dice)},
    [PLOSS_OP_REGION_AFFINITY_FIELD] = {[CPU] = cpu_affinity_field, [GPU] = CUDA(cuda_affinity_field)},
    [PLOSS_OP_REGION_AFFINITY] = {[CPU] = cpu_affinity, [GPU] = CUDA(cuda_affinity)},
    [PLOSS_OP_PAIRS_MARGIN_RANKING] = {[CPU] = cpu_margin_ranking, [GPU] = CUDA(cuda_margin_ranking)},
    [PLOSS_OP_PAIRS_GAUSSIAN_NLL] = {[CPU] = cpu_gaussian_nll, [GPU] = CUDA(cuda_gaussian_nll)},
    [PLOSS_OP_PAIRS_EMBEDDING] = {[CPU] = cpu_embedding_pairs, [GPU] = CUDA(cuda_embedding_pairs)},
    [PLOSS_OP_MARGIN] = {[CPU] = cpu_margin, [GPU] = CUDA(cuda_margin)},
    [PLOSS_OP_LINEAR_CROSS_ENTROPY] = {[CPU] = cpu_linear_ce, [GPU] = CUDA(cuda_linear_ce)},
    [PLOSS_OP_CTC] = {[CPU] = cpu_ctc, [GPU] = CUDA(cuda_ctc)},
};

ploss_status ploss_enter_device(ploss_ctx_t *ctx, const char *what)
{
    if (ctx->device.device_type == kDLCPU)
        return PLOSS_OK;
#ifdef PLOSS_HAVE_CUDA
    (void)what;
    return ploss_cuda_set_device(ctx->device.device_id);
#else
    return ploss_error(PLOSS_ERR_UNSUPPORTED, "%s: a CUDA tensor needs a library built with CUDA", what);
#endif
}

#if defined(__x86_64__) || defined(__i386__)
/* A loss's CPU backend runs with subnormal results flushed to zero (MXCSR's FTZ; inputs
 * are read as they are) on the calling thread and every thread of its OpenMP team: x86
 * takes ~100 cycles for each arithmetic operation that gives a subnormal result, which a
 * softmax of widely spread logits makes by the million (its far tails' gradients, then the
 * products of a GEMM that reads them: a linear cross-entropy with logits spread over ±100
 * ran 40× slower).  A result below 1.2e-38 in f32 (2.2e-308 in f64) is then 0.  Each
 * thread's own mode is put back after the call: the two regions that set and restore it
 * have teams of one size (dynamic adjustment off for the call), which libgomp makes of the
 * same pool threads in the same order, and a thread it makes later copies its maker's mode;
 * past the first THREADS ones a thread keeps its mode and runs unflushed.  Called inside an
 * active parallel region (a nested team may be made of other threads) a backend runs
 * unflushed, as do the small ops of the training toolkit (one call per parameter: two team
 * starts would cost more than they save). */
enum { FTZ = 0x8000u, THREADS = 1024 };

static int flushed_op(ploss_op op)
{
    switch (op) {
    case PLOSS_OP_ONE_HOT: case PLOSS_OP_ACTIVATION: case PLOSS_OP_GEMM: case PLOSS_OP_BIAS_ADD:
    case PLOSS_OP_BIAS_GRAD: case PLOSS_OP_ARGMAX: case PLOSS_OP_OPTIM: case PLOSS_OP_EMA:
        return 0;
    default:
        return 1;
    }
}

static ploss_status run_flushed(ploss_backend fn, ploss_ctx_t *ctx, const void *problem)
{
    if (omp_in_parallel())
        return fn(ctx, problem);
    unsigned saved[THREADS];
    int entered = 0;
    const int dynamic = omp_get_dynamic();
    omp_set_dynamic(0);
#pragma omp parallel
    {
        const int t = omp_get_thread_num();
        if (t < THREADS) {
            saved[t] = _mm_getcsr();
            _mm_setcsr(saved[t] | FTZ);
        }
        if (t == 0)
            entered = omp_get_num_threads();
    }
    const ploss_status st = fn(ctx, problem);
#pragma omp parallel num_threads(entered)
    {
        const int t = omp_get_thread_num();
        if (t < THREADS)
            _mm_setcsr(saved[t]);
    }
    omp_set_dynamic(dynamic);
    return st;
}
#else
static int flushed_op(ploss_op op)
{
    (void)op;
    return 0;
}
static ploss_status run_flushed(ploss_backend fn, ploss_ctx_t *ctx, const void *problem)
{
    return fn(ctx, problem);
}
#endif

ploss_status ploss_dispatch(ploss_ctx_t *ctx, ploss_op op, const char *what, const void *problem)
{
    const int gpu = ctx->device.device_type != kDLCPU;
    const ploss_backend fn = (unsigned)op < PLOSS_OP_COUNT ? backends[op][gpu] : NULL;
    if (!fn)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "%s: a CUDA tensor needs a library built with CUDA", what);
    ploss_status st = ploss_enter_device(ctx, what);
    if (st)
        return st;
    return gpu || !flushed_op(op) ? fn(ctx, problem) : run_flushed(fn, ctx, problem);
}
