/* tensor_ops.c — CPU copy, fill and Philox random numbers over strided views. */
#include <stdint.h>
#include <math.h>

#include "philox.h"
#include "tensor_ops.h"
#include "scalar.h"

#include <string.h>

#include "chunks.h"

static int is_int(ploss_dtype d) { return d == PLOSS_I64 || d == PLOSS_I32 || d == PLOSS_U8; }

static int is_dense(const ploss_view *v)
{
    int64_t expect = 1;
    for (int d = v->ndim - 1; d >= 0; --d) {
        if (v->shape[d] != 1 && v->strides[d] != expect)
            return 0;
        expect *= v->shape[d];
    }
    return 1;
}

/* Row-major odometer over a view: the position and offset of the current element. */
typedef struct {
    const ploss_view *v;
    int64_t idx[PLOSS_MAX_DIMS];
    int64_t off;
} odometer;

static void odometer_start(odometer *o, const ploss_view *v, int64_t k)
{
    o->v = v;
    o->off = 0;
    for (int d = v->ndim - 1; d >= 0; --d) {
        o->idx[d] = k % v->shape[d];
        k /= v->shape[d];
        o->off += o->idx[d] * v->strides[d];
    }
}

/* Elements left in the innermost dim (the whole view for a 0-d one). */
static int64_t odometer_run(const odometer *o)
{
    return o->v->ndim ? o->v->shape[o->v->ndim - 1] - o->idx[o->v->ndim - 1] : 1;
}

/* Moves on n elements, n <= odometer_run(o).  A dim that wraps goes back to its start
 * before the next one moves on, so the offset never steps past the view's last element (a
 * size-1 dim may carry any stride). */
static void odometer_advance(odometer *o, int64_t n)
{
    const ploss_view *v = o->v;
    int d = v->ndim - 1;
    if (d < 0)
        return;
    if (o->idx[d] + n < v->shape[d]) {
        o->idx[d] += n;
        o->off += n * v->strides[d];
        return;
    }
    o->off -= o->idx[d] * v->strides[d];
    o->idx[d] = 0;
    while (--d >= 0) {
        if (o->idx[d] + 1 < v->shape[d]) {
            ++o->idx[d];
            o->off += v->strides[d];
            return;
        }
        o->off -= o->idx[d] * v->strides[d];
        o->idx[d] = 0;
    }
}

/* n elements, strides ds/ss, of one dtype or through doubles (the conversions of
 * ploss_load/ploss_store; integer to integer exactly). */
static void copy_run(const ploss_view *dst, int64_t od, int64_t ds, const ploss_view *src, int64_t os, int64_t ss,
                     int64_t n)
{
    const ploss_dtype dt = dst->dtype, st = src->dtype;
    if (dt == st) {
        const size_t es = ploss_dtype_size(dt);
        if (ds == 1 && ss == 1) {
            memcpy(dst->data + od * (int64_t)es, src->data + os * (int64_t)es, (size_t)n * es);
            return;
        }
#define STRIDED(T) for (int64_t k = 0; k < n; ++k) ((T *)dst->data)[od + k * ds] = ((const T *)src->data)[os + k * ss]
        switch (es) {
        case 1: STRIDED(uint8_t); return;
        case 2: STRIDED(uint16_t); return;
        case 4: STRIDED(uint32_t); return;
        default: STRIDED(uint64_t); return;
        }
#undef STRIDED
    }
    if (is_int(dt) && is_int(st)) {
        for (int64_t k = 0; k < n; ++k)
            ploss_store_int(dst->data, dt, od + k * ds, ploss_load_int(src->data, st, os + k * ss));
        return;
    }
    double buf[256];
    for (int64_t k = 0; k < n; k += 256) {
        const int64_t m = n - k < 256 ? n - k : 256;
        ploss_cpu_load_f64(buf, src->data, st, os + k * ss, ss, m);
        ploss_cpu_store_f64(dst->data, dt, od + k * ds, ds, m, buf);
    }
}

#define COPY_CHUNK 65536 /* elements per parallel piece */

ploss_status ploss_cpu_copy(const ploss_view *dst, const ploss_view *src)
{
    const int64_t N = dst->numel;
    if (N > 0 && dst->dtype == src->dtype && is_dense(dst) && is_dense(src)) {
        memmove(dst->data, src->data, (size_t)N * ploss_dtype_size(dst->dtype));
        return PLOSS_OK;
    }
    const int64_t pieces = (N + COPY_CHUNK - 1) / COPY_CHUNK;
#pragma omp parallel for schedule(static) if (pieces > 1)
    for (int64_t piece = 0; piece < pieces; ++piece) {
        const int64_t end = (piece + 1) * COPY_CHUNK < N ? (piece + 1) * COPY_CHUNK : N;
        odometer d, s;
        odometer_start(&d, dst, piece * COPY_CHUNK);
        odometer_start(&s, src, piece * COPY_CHUNK);
        for (int64_t k = piece * COPY_CHUNK; k < end;) {
            int64_t n = odometer_run(&d) < odometer_run(&s) ? odometer_run(&d) : odometer_run(&s);
            n = n < end - k ? n : end - k;
            copy_run(dst, d.off, dst->ndim ? dst->strides[dst->ndim - 1] : 0, src, s.off,
                     src->ndim ? src->strides[src->ndim - 1] : 0, n);
            odometer_advance(&d, n);
            odometer_advance(&s, n);
            k += n;
        }
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
