/*
 * ema.c — CPU backend of the multi-tensor EMA update and swap (core/support/ema.h):
 * one OpenMP team for the whole list, tensor by tensor, the elements of each split over the
 * team with no barrier between tensors (they are independent); f32/f16/bf16 in float (the
 * row converters of chunks.h for f16/bf16), f64 in double, integers copied.  The helpers'
 * work-sharing loops bind to the team of ploss_cpu_ema.
 */
#include <string.h>

#include "chunks.h"
#include "ema.h"

#define BLOCK 4096 /* elements converted together (f16 / bf16) */

static void update_f32(float *s, const float *p, int64_t n, float c)
{
#pragma omp for simd schedule(static) nowait
    for (int64_t k = 0; k < n; ++k)
        s[k] += c * (p[k] - s[k]);
}

static void update_f64(double *s, const double *p, int64_t n, double c)
{
#pragma omp for simd schedule(static) nowait
    for (int64_t k = 0; k < n; ++k)
        s[k] += c * (p[k] - s[k]);
}

/* f16 / bf16: blocks converted to float and back (round to nearest even) */
static void update_half(void *s, const void *p, ploss_dtype dt, int64_t n, float c)
{
#pragma omp for schedule(static) nowait
    for (int64_t b = 0; b < n; b += BLOCK) {
        float sb[BLOCK], pb[BLOCK];
        const int64_t m = n - b < BLOCK ? n - b : BLOCK;
        ploss_cpu_load_f32(sb, s, dt, b, 1, m);
        ploss_cpu_load_f32(pb, p, dt, b, 1, m);
        for (int64_t k = 0; k < m; ++k)
            sb[k] += c * (pb[k] - sb[k]);
        ploss_cpu_store_f32(s, dt, b, 1, m, sb);
    }
}

/* Exchange n bytes of a and b, a block at a time. */
static void swap_bytes(char *a, char *b, size_t n)
{
#pragma omp for schedule(static) nowait
    for (size_t k = 0; k < n; k += 65536) {
        char tmp[65536];
        const size_t m = n - k < sizeof tmp ? n - k : sizeof tmp;
        memcpy(tmp, a + k, m);
        memcpy(a + k, b + k, m);
        memcpy(b + k, tmp, m);
    }
}

ploss_status ploss_cpu_ema(const ploss_ema_problem *p)
{
#pragma omp parallel
    for (int64_t i = 0; i < p->n; ++i) {
        const ploss_ema_tensor *t = &p->tensors[i];
        const size_t bytes = (size_t)t->numel * ploss_dtype_size(t->dtype);
        if (p->mode == PLOSS_EMA_SWAP) {
            swap_bytes(t->shadow, t->param, bytes);
            continue;
        }
        switch (t->dtype) {
        case PLOSS_F32: update_f32(t->shadow, t->param, t->numel, (float)p->one_minus_d); break;
        case PLOSS_F64: update_f64(t->shadow, t->param, t->numel, p->one_minus_d); break;
        case PLOSS_F16:
        case PLOSS_BF16: update_half(t->shadow, t->param, t->dtype, t->numel, (float)p->one_minus_d); break;
        default: /* integers: copied, not averaged */
#pragma omp single nowait
            memcpy(t->shadow, t->param, bytes);
            break;
        }
    }
    return PLOSS_OK;
}
