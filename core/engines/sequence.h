/*
 * sequence.h — the validated problem handed by core/engines/sequence.c to the CPU
 * (core/cpu/sequence/ctc.c) and CUDA (kernels/sequence/ctc.cu) backends of the sequence
 * losses: frames of N sequences scored against label sequences by recursions over time
 * (CTC).  Internal.
 *
 * log_probs[t, n, c] is at x + t·x_st + n·x_sn + c·x_sc (elements); its gradient likewise
 * with the g_ strides.  The lengths and labels are checked and packed on the host by the
 * front: sequence n has input_length[n] frames and target_length[n] labels, the latter at
 * labels[offset[n] …].
 */
#ifndef PLOSS_SEQUENCE_INTERNAL_H
#define PLOSS_SEQUENCE_INTERNAL_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ploss_ctc_problem {
    ploss_pass pass;
    ploss_reduction reduction;
    int zero_infinity;  /* an infinite loss and its gradient become 0 */
    int logits;         /* x holds logits: log_probs = x − the log-sum-exp of its (t, n) row */
    int64_t blank;
    double scale;       /* fused: the gradient's multiplier */
    int64_t T, N, C;
    int64_t max_input;  /* the longest input length */
    int64_t max_target; /* the longest target length */
    int64_t total_labels;

    const void *x; ploss_dtype x_dtype; int64_t x_st, x_sn, x_sc;
    /* host memory */
    const int64_t *input_length, *target_length, *offset; /* N each */
    const int32_t *labels;                                /* total_labels, in [0, C), not blank */

    /* loss: per sequence (NONE, l_sn) or one scalar (MEAN/SUM); f32 or f64 */
    void *loss; ploss_dtype loss_dtype; int64_t l_sn;
    /* upstream gradient (backward): one scalar (MEAN/SUM) or per sequence (NONE); f32 or f64 */
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn;
    /* gradient output, the input's dtype */
    void *grad; int64_t g_st, g_sn, g_sc;
} ploss_ctc_problem;

ploss_status ploss_cpu_ctc(ploss_ctx_t *ctx, const ploss_ctc_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_ctc(ploss_ctx_t *ctx, const ploss_ctc_problem *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
