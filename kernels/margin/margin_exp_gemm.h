/*
 * margin_exp_gemm.h — the margin losses' product GEMM with the exponential in its epilogue
 * (kernels/margin/margin_exp_gemm.cu, built where the CUTLASS headers are: PLOSS_HAVE_CUTLASS).
 * Internal.
 */
#ifndef PLOSS_MARGIN_EXP_GEMM_H
#define PLOSS_MARGIN_EXP_GEMM_H

#include <cuda_runtime.h>

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The GEMM's tile: each row's sum comes as one partial per TILE_N columns. */
#define PLOSS_MARGIN_EXP_TILE_M 128
#define PLOSS_MARGIN_EXP_TILE_N 128

/* E = 2^(A·Bᵀ ⊙ (r·cᵀ) − shift) in bf16, zero where column j = row_target[i] or
 * j >= classes, and each row's sums of E over TILE_N columns in fp32 (before rounding) into
 * row_sums[i + Mr·t] (Mr = M rounded up to TILE_M, t < ⌈N/TILE_N⌉): A M×K and
 * B N×K bf16 row-major (leading dimensions lda, ldb), r (M) and c (N) f32, row_target (M)
 * each row's target column as a float (−1: none), exact below 2^24, D M×N
 * bf16 row-major (ldd).  N and the leading dimensions multiples of 8, the pointers 16-byte
 * aligned. */
typedef struct {
    int64_t M, N, K;
    const void *A; int64_t lda;
    const void *B; int64_t ldb;
    const float *row_scale, *col_scale, *row_target;
    float shift;
    int64_t classes;
    void *D; int64_t ldd;
    float *row_sums;
} ploss_margin_exp_gemm;

/* With needed non-NULL: the workspace bytes it takes into *needed, nothing run; else runs
 * on stream with that workspace. */
ploss_status ploss_cuda_margin_exp_gemm(const ploss_margin_exp_gemm *g, void *workspace, size_t workspace_bytes,
                                        size_t *needed, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
