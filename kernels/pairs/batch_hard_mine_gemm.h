/*
 * batch_hard_mine_gemm.h — the batch-hard triplet loss's Gram GEMM with the mining in its
 * epilogue (kernels/pairs/batch_hard_mine_gemm.cu, built where the CUTLASS headers are:
 * PLOSS_HAVE_CUTLASS).  Internal.
 */
#ifndef PLOSS_BATCH_HARD_MINE_GEMM_H
#define PLOSS_BATCH_HARD_MINE_GEMM_H

#include <cuda_runtime.h>

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The GEMM's tile: each row's candidates come as one partial per TILE_N columns. */
#define PLOSS_BATCH_HARD_TILE_M 256
#define PLOSS_BATCH_HARD_TILE_N 128

/* For the rows x_i (i = row0 + r, r < M) against every row x_j (j < N) of X (bf16,
 * row-major, leading dimension ldx, K features), with the mining distance in fp32 of the
 * product g = x_i·x_j
 *
 *     d_ij = v_i + v_j − 2g (v = ‖x‖²)   or, cosine,   1 − g/(v_i·v_j) (v = ‖x‖, clamped)
 *
 * and the labels compared as two floats (lo, hi: equal labels ⇔ both equal), one key per
 * row r and column tile t (TILE_N columns) into pos[r + Mr·t] and neg[r + Mr·t]
 * (Mr = M rounded up to TILE_M): doubles whose high word is d's fp32 bits (d clamped at
 * 0, plus 2^20) and whose low word holds the column j:
 *   pos  the largest key of a positive pair (same label, j ≠ i), low word 2^32 − 1 − j (at
 *        equal distances the lower j wins); ≤ 0: none in the tile;
 *   neg  minus the smallest key of a negative pair (another label), low word j; −∞: none.
 * A NaN distance's key is above (pos) or below (neg) every number's.  M, N < 2^24; K and
 * ldx multiples of 8, X 16-byte aligned. */
typedef struct {
    int64_t M, N, K, row0;
    const void *X; int64_t ldx;
    const float *v;               /* per row of X (N): ‖x‖², or ‖x‖ (clamped) for cosine */
    const float *lo, *hi;         /* per row of X: the label's low 24 bits and the rest */
    int cosine;
    double *pos, *neg;
} ploss_batch_hard_mine_gemm;

/* With needed non-NULL: the workspace bytes it takes into *needed (PLOSS_ERR_UNSUPPORTED
 * where it cannot run), nothing run; else runs on stream with that workspace. */
ploss_status ploss_cuda_batch_hard_mine_gemm(const ploss_batch_hard_mine_gemm *g, void *workspace,
                                             size_t workspace_bytes, size_t *needed, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
