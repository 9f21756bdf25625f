/*
 * infonce_exp_gemm.h — InfoNCE's similarity GEMMs with the exponential in their epilogue
 * (kernels/pairs/infonce_exp_gemm.cu, built where the CUTLASS headers are: PLOSS_HAVE_CUTLASS).
 * Internal.
 */
#ifndef PLOSS_INFONCE_EXP_GEMM_H
#define PLOSS_INFONCE_EXP_GEMM_H

#include <cuda_runtime.h>

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The GEMMs' tile: the sums come as one partial per TILE_N columns (each row's) and per
 * TILE_M rows (each column's). */
#define PLOSS_INFONCE_EXP_TILE_M 128
#define PLOSS_INFONCE_EXP_TILE_N 128

/* A (M×K) and B (N×K) bf16 row-major (leading dimensions lda, ldb), r (M) and c (N) f32:
 *     E_ij = 2^(A_i·B_j · r_i · c_j − shift)
 * With D null (the sums GEMM): each row's sums of E over TILE_N columns into
 * row_sums[i + Mr·t] (Mr = M rounded up to TILE_M, t < ⌈N/TILE_N⌉) and each column's over
 * TILE_M rows into col_sums[j + Nr·q] (Nr = N rounded up to TILE_N, q < ⌈M/TILE_M⌉), fp32,
 * nothing else written.  With D (the gradient GEMM): D_ij = E_ij·(u_i + v_j)·c_j in bf16
 * (ldd), u (M) and v (N) f32.  K, the leading dimensions and the pointers' byte offsets
 * multiples of 8 elements (16 bytes, for the TMA), and for the gradient GEMM N too. */
typedef struct {
    int64_t M, N, K;
    const void *A; int64_t lda;
    const void *B; int64_t ldb;
    const float *r, *c;
    float shift;
    float *row_sums, *col_sums;   /* the sums GEMM */
    const float *u, *v;           /* the gradient GEMM */
    void *D; int64_t ldd;
} ploss_infonce_exp_gemm;

/* With needed non-NULL: the workspace bytes it takes into *needed (PLOSS_ERR_UNSUPPORTED
 * where it cannot run that shape), nothing run; else runs on stream with that workspace. */
ploss_status ploss_cuda_infonce_exp_gemm(const ploss_infonce_exp_gemm *g, void *workspace, size_t workspace_bytes,
                                         size_t *needed, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
