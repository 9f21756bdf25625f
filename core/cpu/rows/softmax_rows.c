/*
 * softmax_rows.c — the softmax-row kernels with class-index targets (softmax_rows.h),
 * instantiated for float (f32, f16 and bf16 logits) and double (f64 logits).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "chunks.h"
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

#define REAL float
#define REAL_DTYPE PLOSS_F32
#define EXP expf
#define LOAD ploss_cpu_load_f32
#define STORE ploss_cpu_store_f32
#define F(name) name##_f32
#include "softmax_rows_impl.h"
#undef REAL
#undef REAL_DTYPE
#undef EXP
#undef LOAD
#undef STORE
#undef F

#define REAL double
#define REAL_DTYPE PLOSS_F64
#define EXP exp
#define LOAD ploss_cpu_load_f64
#define STORE ploss_cpu_store_f64
#define F(name) name##_f64
#include "softmax_rows_impl.h"

ploss_status PLOSS_ISA_FN(ploss_cpu_srows_run)(const ploss_cpu_srows *p)
{
    return p->x_dtype == PLOSS_F64 ? run_f64(p) : run_f32(p);
}
