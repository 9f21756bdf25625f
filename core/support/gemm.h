/*
 * gemm.h — the validated matrix product handed by core/support/gemm.c to the CPU (core/cpu/support/gemm.c,
 * OpenBLAS) and CUDA (kernels/support/gemm.cu, cuBLAS) backends.  Internal.
 *
 * Canonical row-major form: c (m×n, row i at c + i·ldc) ← alpha·op(A)·op(B) + beta·c.
 * op(A) is m×k: element (i, p) at a[i·lda + p] (trans_a = 0) or a[p·lda + i] (trans_a = 1);
 * op(B) is k×n: element (p, j) at b[p·ldb + j] (trans_b = 0) or b[j·ldb + p] (trans_b = 1).
 * Every size and leading dimension fits in int32 and satisfies BLAS's lower bounds;
 * m, n ≥ 1 (empty products never reach a backend); k may be 0 (c ← beta·c).
 */
#ifndef PLOSS_GEMM_INTERNAL_H
#define PLOSS_GEMM_INTERNAL_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ploss_gemm_problem {
    int64_t m, n, k;
    double alpha, beta;
    const void *a; int trans_a; int64_t lda;
    const void *b; int trans_b; int64_t ldb;
    ploss_dtype ab_dtype;            /* f32, f16, bf16 or f64 */
    void *c; int64_t ldc;
    ploss_dtype c_dtype;             /* ab_dtype, or f32 for f16/bf16 operands */
} ploss_gemm_problem;

ploss_status ploss_cpu_gemm(ploss_ctx_t *ctx, const ploss_gemm_problem *p);
#ifdef PLOSS_HAVE_CUDA
ploss_status ploss_cuda_gemm(ploss_ctx_t *ctx, const ploss_gemm_problem *p);
/* Whether `device` runs the CUTLASS epilogue GEMMs (kernels/margin/margin_exp_gemm.cu,
 * kernels/pairs/infonce_exp_gemm.cu): compute capability 9.0, their machine code being sm_90a's. */
int ploss_cuda_sm90a_serves(int device);
#endif

#ifdef __cplusplus
}
#endif

#endif
