/*
 * gemm.c — CPU matrix product through OpenBLAS's CBLAS (Debian libopenblas-dev).
 * f32 and f64 go straight to cblas_sgemm / cblas_dgemm on the caller's memory; f16 and
 * bf16 operands are converted to f32 in scratch memory of this call first (f32
 * accumulation), and an f16/bf16 output receives alpha·op(A)·op(B) (f32) + beta·c rounded
 * once.  The scratch is allocated per call, not kept in the context, so that threads may
 * share a CPU context (ploss.h).
 */
#include <cblas.h>
#include <stdint.h>

#include "gemm.h"
#include "scalar.h"

/* c ← beta·c for k = 0 (beta = 0 writes zeros without reading c). */
static void scale_c(const ploss_gemm_problem *p)
{
    for (int64_t i = 0; i < p->m; ++i)
        for (int64_t j = 0; j < p->n; ++j) {
            const int64_t o = i * p->ldc + j;
            ploss_store(p->c, p->c_dtype, o, p->beta == 0.0 ? 0.0 : p->beta * ploss_load(p->c, p->c_dtype, o));
        }
}

/* Dense row-major f32 copy of op(X), rows × cols. */
static void to_f32(float *dst, const void *x, ploss_dtype dt, int trans, int64_t ld, int64_t rows,
                   int64_t cols)
{
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            dst[r * cols + c] = (float)ploss_load(x, dt, trans ? c * ld + r : r * ld + c);
}

static enum CBLAS_TRANSPOSE tr(int t) { return t ? CblasTrans : CblasNoTrans; }

ploss_status ploss_cpu_gemm(ploss_ctx_t *ctx, const ploss_gemm_problem *p)
{
    const int m = (int)p->m, n = (int)p->n, k = (int)p->k;
    /* no product: c ← beta·c, as BLAS (OpenBLAS's small-matrix kernels would still read a
     * and b with alpha = 0, so a NaN there reached c at some sizes and not others) */
    if (k == 0 || p->alpha == 0.0) {
        scale_c(p);
        return PLOSS_OK;
    }
    if (p->ab_dtype == PLOSS_F64) {
        cblas_dgemm(CblasRowMajor, tr(p->trans_a), tr(p->trans_b), m, n, k, p->alpha, p->a, (int)p->lda,
                    p->b, (int)p->ldb, p->beta, p->c, (int)p->ldc);
        return PLOSS_OK;
    }
    if (p->ab_dtype == PLOSS_F32) {
        cblas_sgemm(CblasRowMajor, tr(p->trans_a), tr(p->trans_b), m, n, k, (float)p->alpha, p->a,
                    (int)p->lda, p->b, (int)p->ldb, (float)p->beta, p->c, (int)p->ldc);
        return PLOSS_OK;
    }
    /* f16 / bf16: convert op(A) (m×k) and op(B) (k×n) to dense f32 */
    const size_t na = (size_t)p->m * (size_t)p->k, nb = (size_t)p->k * (size_t)p->n;
    const size_t nc = p->c_dtype == PLOSS_F32 ? 0 : (size_t)p->m * (size_t)p->n;
    void *ws = NULL;
    ploss_status st = ploss_alloc(ctx, (na + nb + nc) * sizeof(float), &ws);
    if (st != PLOSS_OK)
        return st;
    float *fa = ws, *fb = fa + na, *fc = fb + nb;
    to_f32(fa, p->a, p->ab_dtype, p->trans_a, p->lda, p->m, p->k);
    to_f32(fb, p->b, p->ab_dtype, p->trans_b, p->ldb, p->k, p->n);
    if (p->c_dtype == PLOSS_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, (float)p->alpha, fa, k, fb, n,
                    (float)p->beta, p->c, (int)p->ldc);
        return ploss_free(ctx, ws);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, (float)p->alpha, fa, k, fb, n, 0.0f,
                fc, n);
#pragma omp parallel for schedule(static) if (nc > 65536)
    for (int64_t i = 0; i < p->m; ++i)
        for (int64_t j = 0; j < p->n; ++j) {
            const int64_t o = i * p->ldc + j;
            double v = fc[i * p->n + j];
            if (p->beta != 0.0)
                v += p->beta * ploss_load(p->c, p->c_dtype, o);
            ploss_store(p->c, p->c_dtype, o, v);
        }
    return ploss_free(ctx, ws);
}
