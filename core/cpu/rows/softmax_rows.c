/*
 * softmax_rows.c — the softmax-row kernels with class-index targets (softmax_rows.h),
 * instantiated for float (f32, f16 and bf16 logits) and double (f64 logits).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "chunks.h"
#include "focal.h"
#include "scalar.h"
#include "softmax_rows.h"
#include "vmath.h"

#define CHUNK 256 /* samples per reduction chunk (a multiple of TILE) */
#define TILE 32   /* samples of a tile */

/* f[i] = f_n(x[i]) (taylor_poly.h) for i < T, in type R, vectorised along i */
#define TAYLOR_COLUMN(R, f, x, T, n)                                   \
    do {                                                               \
        for (int64_t i_ = 0; i_ < (T); ++i_)                           \
            (f)[i_] = 1;                                               \
        for (int k_ = (n); k_ >= 1; --k_) {                            \
            const R rk_ = (R)k_;                                       \
            _Pragma("omp simd") for (int64_t i_ = 0; i_ < (T); ++i_)   \
                (f)[i_] = 1 + (f)[i_] * (x)[i_] / rk_;                 \
        }                                                              \
    } while (0)

/* The class passes of a tile, over sample i < T and class j < C with xv = x_ij; `rows`
 * picks the loop order: vectorised along the classes of each sample (rows of contiguous
 * classes; sums into scalars) or along the samples of each class.  Names taken from the
 * tile function: rows, T, C, x, xi, xj, g, gi, gj, and the per-sample arrays.
 *   TILE_MAX(N, BODY): BODY sets c0 (and c1, N = 2), maxima into m[i] (and m2[i]);
 *   TILE_SUM(N, BODY): BODY sets c0 … c(N−1), sums into a0[i] … (double);
 *   TILE_EACH(BODY):   BODY sets gv, stored as g_ij.
 * ROW_PASS: the loops over the classes of each sample (PRE and POST around each row, the
 * pragma of the class loop); COL_PASS: over the samples of each class. */
#define ROW_PASS(PRE, PRAGMA, POST, ...)                                                           \
    for (int64_t i = 0; i < T; ++i) {                                                              \
        const REAL *xr = x + i * xi;                                                               \
        PRE;                                                                                       \
        _Pragma(PRAGMA) for (int64_t j = 0; j < C; ++j)                                           \
        {                                                                                          \
            const REAL xv = xr[j];                                                                 \
            __VA_ARGS__                                                                            \
        }                                                                                          \
        POST;                                                                                      \
    }
#define COL_PASS(...)                                                                              \
    for (int64_t j = 0; j < C; ++j) {                                                              \
        const REAL *xc = x + j * xj;                                                               \
        _Pragma("omp simd") for (int64_t i = 0; i < T; ++i)                                        \
        {                                                                                          \
            const REAL xv = xc[i];                                                                 \
            __VA_ARGS__                                                                            \
        }                                                                                          \
    }
#define TILE_MAX(N, ...)                                                                           \
    do {                                                                                           \
        if (rows) {                                                                                \
            ROW_PASS(REAL r0 = m[i]; REAL r1 = m2[i], "omp simd reduction(max : r0, r1)",          \
                     (m[i] = r0, m2[i] = r1), REAL c0; REAL c1 = r1; __VA_ARGS__;                  \
                     r0 = c0 > r0 ? c0 : r0; if (N > 1) r1 = c1 > r1 ? c1 : r1;)                   \
        } else {                                                                                   \
            COL_PASS(REAL c0; REAL c1 = m2[i]; __VA_ARGS__; m[i] = c0 > m[i] ? c0 : m[i];          \
                     if (N > 1) m2[i] = c1 > m2[i] ? c1 : m2[i];)                                  \
        }                                                                                          \
    } while (0)
#define TILE_SUM(N, ...)                                                                           \
    do {                                                                                           \
        if (rows) {                                                                                \
            ROW_PASS(double r0 = 0; double r1 = 0; double r2 = 0, "omp simd reduction(+ : r0, r1, r2)", \
                     (a0[i] += r0, a1[i] += r1, a2[i] += r2), double c0 = 0; double c1 = 0; double c2 = 0; \
                     __VA_ARGS__; r0 += c0; if (N > 1) r1 += c1; if (N > 2) r2 += c2;)             \
        } else {                                                                                   \
            COL_PASS(double c0 = 0; double c1 = 0; double c2 = 0; __VA_ARGS__; a0[i] += c0;        \
                     if (N > 1) a1[i] += c1; if (N > 2) a2[i] += c2;)                              \
        }                                                                                          \
    } while (0)
#define TILE_EACH(...)                                                                             \
    do {                                                                                           \
        if (rows) {                                                                                \
            ROW_PASS(REAL *gr = g + i * gi, "omp simd", (void)0, REAL gv; __VA_ARGS__; gr[j] = gv;) \
        } else {                                                                                   \
            COL_PASS(REAL gv; __VA_ARGS__; g[j * gj + i] = gv;)                                    \
        }                                                                                          \
    } while (0)

#define PLOSS_REAL_IMPL "rows/softmax_rows_impl.h"
#include "real_types.h"

ploss_status PLOSS_ISA_FN(ploss_cpu_srows_run)(const ploss_cpu_srows *p)
{
    /* Taylor polynomials above order 10 in f64 whatever the logits' dtype (their terms reach
     * past f32's range and cancel), as the CUDA backend's per-sample kernels */
    const int wide = p->x_dtype == PLOSS_F64 || (p->kind == PLOSS_SROWS_TAYLOR_CE && p->order > 10);
    return wide ? run_f64(p) : run_f32(p);
}
