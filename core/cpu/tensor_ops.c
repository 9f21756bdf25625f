/* tensor_ops.c — CPU copy, fill and Philox random numbers over strided views. */
#include <math.h>

#include "philox.h"
#include "tensor_ops.h"
#include "scalar.h"

static int is_int(ploss_dtype d) { return d == PLOSS_I64 || d == PLOSS_I32 || d == PLOSS_U8; }

ploss_status ploss_cpu_copy(const ploss_view *dst, const ploss_view *src)
{
    const int ints = is_int(dst->dtype) && is_int(src->dtype);
#pragma omp parallel for schedule(static) if (dst->numel > 65536)
    for (int64_t k = 0; k < dst->numel; ++k) {
        int64_t od = ploss_view_offset(dst, k), os = ploss_view_offset(src, k);
        if (ints)
            ploss_store_int(dst->data, dst->dtype, od, ploss_load_int(src->data, src->dtype, os));
        else
            ploss_store(dst->data, dst->dtype, od, ploss_load(src->data, src->dtype, os));
    }
    return PLOSS_OK;
}

ploss_status ploss_cpu_fill(const ploss_view *dst, double value)
{
#pragma omp parallel for schedule(static) if (dst->numel > 65536)
    for (int64_t k = 0; k < dst->numel; ++k)
        ploss_store(dst->data, dst->dtype, ploss_view_offset(dst, k), value);
    return PLOSS_OK;
}

/* The value of element k; the CUDA kernel computes the same expression. */
static double rand_value(const ploss_rand_spec *s, int64_t k, int64_t *ival)
{
    ploss_philox4 r = ploss_philox(s->offset + (uint64_t)k, s->seed);
    switch (s->kind) {
    case PLOSS_RAND_UNIFORM:
        return fma(s->b - s->a, ploss_philox_unit(r.v[0], r.v[1]), s->a);
    case PLOSS_RAND_NORMAL: {
        double u1 = 1.0 - ploss_philox_unit(r.v[0], r.v[1]); /* (0, 1] */
        double u2 = ploss_philox_unit(r.v[2], r.v[3]);
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        return fma(s->b, z, s->a);
    }
    default: {
        uint64_t bits = ((uint64_t)r.v[0] << 32) | r.v[1];
        *ival = (int64_t)((uint64_t)s->low + bits % s->span);
        return (double)*ival;
    }
    }
}

ploss_status ploss_cpu_rand(const ploss_view *dst, const ploss_rand_spec *spec)
{
#pragma omp parallel for schedule(static) if (dst->numel > 65536)
    for (int64_t k = 0; k < dst->numel; ++k) {
        int64_t iv = 0;
        double v = rand_value(spec, k, &iv);
        int64_t off = ploss_view_offset(dst, k);
        if (spec->kind == PLOSS_RAND_INT)
            ploss_store_int(dst->data, dst->dtype, off, iv);
        else
            ploss_store(dst->data, dst->dtype, off, v);
    }
    return PLOSS_OK;
}
