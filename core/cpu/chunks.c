/*
 * chunks.c — scaffolding shared by the chunked CPU loss backends (see chunks.h).
 */
#include <omp.h>
#include <stdlib.h>

#include "chunks.h"
#include "gemm.h"
#include "rows.h"
#include "scalar.h"
#include "vmath.h"

/* The thresholds of ploss_exp_flush_*, each twice (vmath.h says why). */
const float ploss_exp_clamp_f32 = -87.0f, ploss_exp_mask_f32 = -87.0f;
const double ploss_exp_clamp_f64 = -708.0, ploss_exp_mask_f64 = -708.0;

double ploss_cpu_grad_scale(ploss_pass pass, ploss_reduction reduction, double scale, const void *grad_loss,
                            ploss_dtype gl_dtype, double divisor)
{
    if (pass == PLOSS_PASS_FORWARD)
        return 0.0;
    const double up = pass == PLOSS_PASS_FUSED ? scale
                      : reduction == PLOSS_REDUCTION_NONE ? 0.0
                                                          : ploss_load(grad_loss, gl_dtype, 0);
    if (reduction == PLOSS_REDUCTION_MEAN)
        return divisor != 0.0 ? up / divisor : 0.0;
    return up;
}

void ploss_cpu_store_row_losses(void *loss, ploss_dtype dtype, int64_t l_sn, ploss_reduction reduction,
                                const double *losses, int64_t N, double divisor)
{
    if (reduction == PLOSS_REDUCTION_NONE) {
        for (int64_t i = 0; i < N; ++i)
            ploss_store(loss, dtype, i * l_sn, losses[i]);
        return;
    }
    double s = 0.0;
    for (int64_t i = 0; i < N; ++i)
        s += losses[i];
    ploss_store(loss, dtype, 0, reduction == PLOSS_REDUCTION_MEAN ? ploss_rows_mean(s, divisor) : s);
}

ploss_status ploss_cpu_tile_products(ploss_ctx_t *ctx, const void *x_tile, int64_t rows, int64_t C, int64_t D,
                                     const void *w, int64_t ld, ploss_dtype dtype, void *tile)
{
    const ploss_gemm_problem z = {.m = rows, .n = C, .k = D, .alpha = 1.0, .a = x_tile, .lda = ld, .b = w,
                                  .trans_b = 1, .ldb = ld, .ab_dtype = dtype, .c = tile, .ldc = C, .c_dtype = dtype};
    return ploss_cpu_gemm(ctx, &z);
}

ploss_status ploss_cpu_tile_gradient_products(ploss_ctx_t *ctx, const void *g, int64_t rows, int64_t C, int64_t D,
                                              double alpha, const void *w, const void *x_tile, int64_t ld,
                                              ploss_dtype dtype, void *gx_tile, void *gw)
{
    const ploss_gemm_problem dx = {.m = rows, .n = D, .k = C, .alpha = alpha, .a = g, .lda = C, .b = w, .ldb = ld,
                                   .ab_dtype = dtype, .c = gx_tile, .ldc = ld, .c_dtype = dtype};
    const ploss_gemm_problem dw = {.m = C, .n = D, .k = rows, .alpha = alpha, .beta = 1.0, .a = g, .trans_a = 1,
                                   .lda = C, .b = x_tile, .ldb = ld, .ab_dtype = dtype, .c = gw, .ldc = ld,
                                   .c_dtype = dtype};
    ploss_status st = ploss_cpu_gemm(ctx, &dx);
    return st ? st : ploss_cpu_gemm(ctx, &dw);
}

void ploss_cpu_store_constant_row_losses(void *loss, ploss_dtype dtype, int64_t l_sn, ploss_reduction reduction,
                                         const void *labels, ploss_dtype label_dtype, int64_t y_sn, int64_t N,
                                         int64_t ignore_index, double l0)
{
    if (reduction == PLOSS_REDUCTION_NONE) {
        for (int64_t i = 0; i < N; ++i) {
            const int64_t y = ploss_load_int(labels, label_dtype, i * y_sn);
            ploss_store(loss, dtype, i * l_sn, y == ignore_index ? 0.0 : l0);
        }
        return;
    }
    const double count = (double)ploss_cpu_count_labels(labels, label_dtype, N, 1, y_sn, 0, ignore_index);
    ploss_store(loss, dtype, 0, reduction == PLOSS_REDUCTION_MEAN ? count * l0 / count : count * l0);
}

int64_t ploss_cpu_count_labels(const void *t, ploss_dtype dtype, int64_t N, int64_t S, int64_t sn, int64_t ss,
                               int64_t ignore_index)
{
    int64_t count = 0;
    for (int64_t n = 0; n < (S > 0 ? N : 0); ++n)
        for (int64_t s = 0; s < S; ++s)
            count += ploss_load_int(t, dtype, n * sn + s * ss) != ignore_index;
    return count;
}

ploss_status ploss_cpu_rows_alloc(ploss_cpu_rows *b, const char *loss, int64_t M, int64_t C, int k,
                                  int64_t chunk)
{
    *b = (ploss_cpu_rows){0, 0, 0, 0, NULL, NULL};
    const int nthreads = omp_get_max_threads();
    const int64_t nchunks = (M + chunk - 1) / chunk;
    const size_t cls = M > 0 ? (size_t)C : 0;
    const int too_big = k > 0 && cls > PTRDIFF_MAX / ((size_t)k * sizeof(double)) / (size_t)nthreads;
    double *partial = calloc((size_t)(nchunks ? nchunks : 1), sizeof *partial);
    double *rows = k == 0 || too_big ? NULL : calloc((size_t)nthreads * cls * (size_t)k + 1, sizeof *rows);
    if (!partial || (k > 0 && !rows)) {
        free(partial);
        free(rows);
        if (k == 0)
            return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "%s: %lld reduction partials", loss, (long long)nchunks);
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "%s: row buffers for %d threads × %d × %lld classes", loss,
                           nthreads, k, (long long)C);
    }
    *b = (ploss_cpu_rows){nthreads, cls, cls * (size_t)k, nchunks, rows, partial};
    return PLOSS_OK;
}

double *ploss_cpu_rows_thread(const ploss_cpu_rows *b, int thread)
{
    return b->rows ? b->rows + (size_t)thread * b->row_elems : NULL;
}

void ploss_cpu_rows_store_loss(const ploss_cpu_rows *b, ploss_reduction reduction, double divisor, void *loss,
                               ploss_dtype loss_dtype)
{
    if (reduction == PLOSS_REDUCTION_NONE)
        return;
    double total = 0.0;
    for (int64_t c = 0; c < b->nchunks; ++c)
        total += b->partial[c];
    if (reduction == PLOSS_REDUCTION_MEAN)
        total = ploss_rows_mean(total, divisor);
    ploss_store(loss, loss_dtype, 0, total);
}

void ploss_cpu_rows_free(ploss_cpu_rows *b)
{
    free(b->rows);
    free(b->partial);
    *b = (ploss_cpu_rows){0, 0, 0, 0, NULL, NULL};
}

/* One loop per dtype: the switch is outside the element loop. */
#define LOAD_ROW(dst, base, dt, off, stride, n, T)                                                     \
    switch (dt) {                                                                                       \
    case PLOSS_F32: for (int64_t k = 0; k < (n); ++k) (dst)[k] = (T)((const float *)(base))[(off) + k * (stride)]; break; \
    case PLOSS_F64: for (int64_t k = 0; k < (n); ++k) (dst)[k] = (T)((const double *)(base))[(off) + k * (stride)]; break; \
    case PLOSS_F16: for (int64_t k = 0; k < (n); ++k) (dst)[k] = (T)ploss_half_to_f32(((const uint16_t *)(base))[(off) + k * (stride)]); break; \
    case PLOSS_BF16: for (int64_t k = 0; k < (n); ++k) (dst)[k] = (T)ploss_bf16_to_f32(((const uint16_t *)(base))[(off) + k * (stride)]); break; \
    default: for (int64_t k = 0; k < (n); ++k) (dst)[k] = (T)ploss_load((base), (dt), (off) + k * (stride)); break; \
    }

void ploss_cpu_load_f32(float *dst, const void *base, ploss_dtype dt, int64_t off, int64_t stride, int64_t n)
{
    LOAD_ROW(dst, base, dt, off, stride, n, float)
}

void ploss_cpu_load_f64(double *dst, const void *base, ploss_dtype dt, int64_t off, int64_t stride, int64_t n)
{
    LOAD_ROW(dst, base, dt, off, stride, n, double)
}

#define STORE_ROW(base, dt, off, stride, n, src)                                                        \
    switch (dt) {                                                                                       \
    case PLOSS_F32: for (int64_t k = 0; k < (n); ++k) ((float *)(base))[(off) + k * (stride)] = (float)(src)[k]; break; \
    case PLOSS_F64: for (int64_t k = 0; k < (n); ++k) ((double *)(base))[(off) + k * (stride)] = (double)(src)[k]; break; \
    case PLOSS_F16: for (int64_t k = 0; k < (n); ++k) ((uint16_t *)(base))[(off) + k * (stride)] = ploss_f32_to_half((float)(src)[k]); break; \
    case PLOSS_BF16: for (int64_t k = 0; k < (n); ++k) ((uint16_t *)(base))[(off) + k * (stride)] = ploss_f32_to_bf16((float)(src)[k]); break; \
    default: for (int64_t k = 0; k < (n); ++k) ploss_store((base), (dt), (off) + k * (stride), (double)(src)[k]); break; \
    }

void ploss_cpu_store_f32(void *base, ploss_dtype dt, int64_t off, int64_t stride, int64_t n, const float *src)
{
    STORE_ROW(base, dt, off, stride, n, src)
}

void ploss_cpu_store_f64(void *base, ploss_dtype dt, int64_t off, int64_t stride, int64_t n, const double *src)
{
    STORE_ROW(base, dt, off, stride, n, src)
}

void ploss_cpu_store_zeros(void *base, ploss_dtype dt, int64_t off, int64_t stride, int64_t n)
{
    static const float zeros[256];
    for (int64_t k = 0; k < n; k += 256)
        ploss_cpu_store_f32(base, dt, off + k * stride, stride, n - k < 256 ? n - k : 256, zeros);
}
