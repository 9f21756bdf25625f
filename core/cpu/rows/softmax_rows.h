/*
 * softmax_rows.h — the CPU kernels shared by the softmax-row losses with class-index
 * targets other than cross-entropy itself: softmax focal and dual focal (softmax_focal.c),
 * large-margin, Taylor CE, PC-softmax and the OHEM scores and losses (sample_policies.c).
 * Each backend turns its problem (core/engines/rows.h) into a ploss_cpu_srows and calls
 * ploss_cpu_srows_run of its own build (one per instruction set, see isa.h).  Internal.
 *
 * f32, f16 and bf16 logits are computed in float, f64 logits in double
 * (softmax_rows_impl.h, once for each), the dtype chosen once per call; per-sample values
 * (lse, the loss, the label's gradient entry), dual focal's class terms and the reductions
 * in double.  Samples go
 * through tiles of up to 32 neighbours (one n of N×C×d1⋯dk, or consecutive n when S = 1):
 * with contiguous classes every class loop is vectorised along the classes of a sample,
 * else along the samples of the tile.  A tile is read in place when it is REAL and
 * contiguous along the vectorised axis, else converted into a buffer.  Reductions run over
 * fixed chunks of samples summed in order, so results do not depend on the number of
 * OpenMP threads.
 */
#ifndef PLOSS_CPU_SOFTMAX_ROWS_H
#define PLOSS_CPU_SOFTMAX_ROWS_H

#include "isa.h"

typedef enum {
    PLOSS_SROWS_CE,           /* ℓ = lse − x_y (OHEM)                                  */
    PLOSS_SROWS_PC_SOFTMAX,   /* ℓ = log Σ_j w_j e^x_j − x_y (w: priors)               */
    PLOSS_SROWS_LARGE_MARGIN, /* rows.h, state lse, lse', E                            */
    PLOSS_SROWS_TAYLOR_CE,    /* ℓ = log Z − log f_n(x_y), state Z                      */
    PLOSS_SROWS_FOCAL,        /* ℓ = −α_y (1 − p_y)^γ log p_y (w: α), state lse        */
    PLOSS_SROWS_DUAL_FOCAL,   /* ℓ = −Σ_j log(1 + ε − (p_j − [j = y])²), state lse      */
    /* the number of kinds, asserted in softmax_rows_impl.h: the `default:` of its switches
     * on the kind is the cross-entropy / PC-softmax maths, so a new kind needs its cases */
    PLOSS_SROWS_KIND_COUNT
} ploss_srows_kind;

typedef struct {
    const char *name; /* for messages */
    ploss_srows_kind kind;
    ploss_pass pass;
    ploss_reduction reduction;
    int64_t N, S, C;
    const void *x; ploss_dtype x_dtype; int64_t x_sn, x_ss, x_sc;
    const void *t; ploss_dtype t_dtype; int64_t t_sn, t_ss;
    int64_t ignore_index;
    const unsigned char *kept; /* OHEM: the mined samples (NULL: every valid label) */
    const void *w; ploss_dtype w_dtype; int64_t w_s; /* α (focal) or priors (PC); NULL = ones */
    double gamma, eps, lam;
    int order;
    void *loss; ploss_dtype loss_dtype; int64_t l_sn, l_ss;
    void *state; ploss_dtype state_dtype; int n_state; int64_t st_sn, st_ss, st_sk;
    const void *grad_loss; ploss_dtype gl_dtype; int64_t gl_sn, gl_ss;
    void *grad; int64_t g_sn, g_ss, g_sc;
    double divisor, omega; /* MEAN divisor; ω of reduced losses (chunks.h) */
    /* non-NULL: only score every sample (OHEM): keys[i] = the f32 bit pattern of p_{i,y_i}
     * (PLOSS_OHEM_NAN_KEY, PLOSS_OHEM_IGNORED_KEY), nothing else is written */
    uint32_t *keys;
} ploss_cpu_srows;

/* Runs the pass: the loss (per sample or reduced), the state, the gradient.  Takes every
 * buffer before the first write; PLOSS_ERR_OUT_OF_MEMORY leaves the outputs untouched. */
ploss_status PLOSS_ISA_FN(ploss_cpu_srows_run)(const ploss_cpu_srows *p);

#endif
