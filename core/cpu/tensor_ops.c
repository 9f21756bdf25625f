/* tensor_ops.c — CPU copy, fill, axpby and Philox random numbers over strided views. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunks.h"
#include "philox.h"
#include "scalar.h"
#include "tensor_ops.h"

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
#define COPY_TA 64       /* tiles of COPY_TA along dst's fast dim × COPY_TB along src's (views */
#define COPY_TB 64       /* whose fast dims differ) */

/* The dim along which v's elements are closest in memory (smallest non-zero |stride|
 * among dims of size > 1), or -1. */
static int fast_dim(const ploss_view *v)
{
    int best = -1;
    for (int d = 0; d < v->ndim; ++d) {
        const int64_t st = llabs(v->strides[d]);
        if (v->shape[d] > 1 && st != 0 && (best < 0 || st < llabs(v->strides[best])))
            best = d;
    }
    return best;
}

/* Copy of views whose fast dims differ (a transposed or permuted src or dst): walks tiles
 * of COPY_TA along dst's fast dim a × COPY_TB along src's fast dim b, each through a
 * buffer (src read along b, dst written along a, every line of both views touched once
 * per tile, so power-of-two strides cannot evict what is still needed); units of one
 * band of b × the other dims run in parallel.  Returns 0 (nothing copied) when the fast
 * dims agree. */
static int copy_tiled(const ploss_view *dst, const ploss_view *src)
{
    const int a = fast_dim(dst), b = fast_dim(src);
    if (a < 0 || b < 0 || a == b)
        return 0;
    /* the dims other than a and b, for the offsets of each unit */
    ploss_view od = *dst, os = *src;
    od.ndim = os.ndim = 0;
    for (int d = 0; d < dst->ndim; ++d)
        if (d != a && d != b) {
            od.shape[od.ndim] = os.shape[os.ndim] = dst->shape[d];
            od.strides[od.ndim++] = dst->strides[d];
            os.strides[os.ndim++] = src->strides[d];
        }
    const int64_t na = dst->shape[a], nb = dst->shape[b], bblocks = (nb + COPY_TB - 1) / COPY_TB;
    const int64_t outer = dst->numel / (na * nb), units = outer * bblocks;
    const int64_t dsa = dst->strides[a], dsb = dst->strides[b], ssa = src->strides[a], ssb = src->strides[b];
    const int same = dst->dtype == src->dtype;
    const size_t es = ploss_dtype_size(dst->dtype);
#pragma omp parallel for schedule(static) if (dst->numel > COPY_CHUNK)
    for (int64_t unit = 0; unit < units; ++unit) {
        const int64_t o = unit / bblocks, b0 = unit % bblocks * COPY_TB;
        const int64_t b1 = b0 + COPY_TB < nb ? b0 + COPY_TB : nb;
        const int64_t d0 = ploss_view_offset(&od, o), s0 = ploss_view_offset(&os, o);
        for (int64_t a0 = 0; a0 < na; a0 += COPY_TA) {
            const int64_t n = na - a0 < COPY_TA ? na - a0 : COPY_TA;
            const int64_t dt = d0 + a0 * dsa, st = s0 + a0 * ssa, nbt = b1 - b0;
#define TILE(T)                                                                                \
    {                                                                                          \
        T buf[COPY_TA][COPY_TB];                                                               \
        for (int64_t k = 0; k < n; ++k) {                                                      \
            const T *sr = (const T *)src->data + st + k * ssa + b0 * ssb;                      \
            if (ssb == 1)                                                                      \
                memcpy(buf[k], sr, (size_t)nbt * sizeof(T));                                   \
            else                                                                               \
                for (int64_t ib = 0; ib < nbt; ++ib)                                           \
                    buf[k][ib] = sr[ib * ssb];                                                 \
        }                                                                                      \
        for (int64_t ib = 0; ib < nbt; ++ib) {                                                 \
            T *dr = (T *)dst->data + dt + (b0 + ib) * dsb;                                     \
            if (dsa == 1)                                                                      \
                for (int64_t k = 0; k < n; ++k)                                                \
                    dr[k] = buf[k][ib];                                                        \
            else                                                                               \
                for (int64_t k = 0; k < n; ++k)                                                \
                    dr[k * dsa] = buf[k][ib];                                                  \
        }                                                                                      \
    }
            switch (same ? es : 0) {
            case 1: TILE(uint8_t) break;
            case 2: TILE(uint16_t) break;
            case 4: TILE(uint32_t) break;
            case 8: TILE(uint64_t) break;
            default:
                for (int64_t ib = b0; ib < b1; ++ib)
                    copy_run(dst, dt + ib * dsb, dsa, src, st + ib * ssb, ssa, n);
            }
#undef TILE
        }
    }
    return 1;
}

ploss_status ploss_cpu_copy(const ploss_view *dst, const ploss_view *src)
{
    const int64_t N = dst->numel;
    if (N > 0 && dst->dtype == src->dtype && is_dense(dst) && is_dense(src)) {
        memmove(dst->data, src->data, (size_t)N * ploss_dtype_size(dst->dtype));
        return PLOSS_OK;
    }
    if (copy_tiled(dst, src))
        return PLOSS_OK;
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

ploss_status ploss_cpu_fill(const ploss_view *dst_view, double value)
{
    /* the value converted once (ploss_store), then stored along runs of the innermost dim
     * of the view with its dims in memory order (every element gets the same value) */
    uint64_t bits = 0;
    ploss_store(&bits, dst_view->dtype, 0, value);
    ploss_view sorted = *dst_view;
    for (int d = 1; d < sorted.ndim; ++d) /* insertion sort, |stride| descending */
        for (int e = d; e > 0 && llabs(sorted.strides[e]) > llabs(sorted.strides[e - 1]); --e) {
            const int64_t sh = sorted.shape[e], st = sorted.strides[e];
            sorted.shape[e] = sorted.shape[e - 1], sorted.strides[e] = sorted.strides[e - 1];
            sorted.shape[e - 1] = sh, sorted.strides[e - 1] = st;
        }
    const ploss_view *dst = &sorted;
    const size_t es = ploss_dtype_size(dst->dtype);
    const int64_t N = dst->numel, st = dst->ndim ? dst->strides[dst->ndim - 1] : 0;
    const int64_t pieces = (N + COPY_CHUNK - 1) / COPY_CHUNK;
#pragma omp parallel for schedule(static) if (pieces > 1)
    for (int64_t piece = 0; piece < pieces; ++piece) {
        const int64_t end = (piece + 1) * COPY_CHUNK < N ? (piece + 1) * COPY_CHUNK : N;
        odometer o;
        odometer_start(&o, dst, piece * COPY_CHUNK);
        for (int64_t k = piece * COPY_CHUNK; k < end;) {
            const int64_t n = odometer_run(&o) < end - k ? odometer_run(&o) : end - k;
#define FILL(T)                                                  \
    {                                                            \
        T v;                                                     \
        memcpy(&v, &bits, sizeof v);                             \
        for (int64_t i = 0; i < n; ++i)                          \
            ((T *)dst->data)[o.off + i * st] = v;                \
    }
            switch (es) {
            case 1: FILL(uint8_t) break;
            case 2: FILL(uint16_t) break;
            case 4: FILL(uint32_t) break;
            default: FILL(uint64_t) break;
            }
#undef FILL
            odometer_advance(&o, n);
            k += n;
        }
    }
    return PLOSS_OK;
}

ploss_status ploss_cpu_axpby(const ploss_view *dst, double alpha, const ploss_view *src, double beta)
{
    const int64_t N = dst->numel, pieces = (N + COPY_CHUNK - 1) / COPY_CHUNK;
    const int64_t ds = dst->ndim ? dst->strides[dst->ndim - 1] : 0, ss = src->ndim ? src->strides[src->ndim - 1] : 0;
#pragma omp parallel for schedule(static) if (pieces > 1)
    for (int64_t piece = 0; piece < pieces; ++piece) {
        const int64_t end = (piece + 1) * COPY_CHUNK < N ? (piece + 1) * COPY_CHUNK : N;
        odometer o, os;
        odometer_start(&o, dst, piece * COPY_CHUNK);
        odometer_start(&os, src, piece * COPY_CHUNK); /* src has dst's shape: the two move together */
        for (int64_t k = piece * COPY_CHUNK; k < end;) {
            int64_t n = odometer_run(&o) < end - k ? odometer_run(&o) : end - k;
            n = n < 256 ? n : 256;
            double d[256], s[256];
            if (beta != 0)
                ploss_cpu_load_f64(d, dst->data, dst->dtype, o.off, ds, n);
            ploss_cpu_load_f64(s, src->data, src->dtype, os.off, ss, n);
            for (int64_t i = 0; i < n; ++i)
                d[i] = fma(alpha, s[i], beta != 0 ? beta * d[i] : -0.0); /* −0: a −0 product stays −0 */
            ploss_cpu_store_f64(dst->data, dst->dtype, o.off, ds, n, d);
            odometer_advance(&o, n);
            odometer_advance(&os, n);
            k += n;
        }
    }
    return PLOSS_OK;
}

/* The value of element k; the CUDA kernel computes the same expression. */
static double rand_value(const ploss_rand_spec *s, int64_t k, int64_t *ival)
{
    ploss_philox4 r = ploss_philox(s->offset + (uint64_t)k, s->seed);
    switch (s->kind) {
    case PLOSS_RAND_UNIFORM:
        return fmin(fmax(fma(s->b - s->a, ploss_philox_unit(r.v[0], r.v[1]), s->a), s->lo), s->hi);
    case PLOSS_RAND_NORMAL: {
        double u1 = 1.0 - ploss_philox_unit(r.v[0], r.v[1]); /* (0, 1] */
        double u2 = ploss_philox_unit(r.v[2], r.v[3]);
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        return fma(s->b, z, s->a);
    }
    default: {
        *ival = (int64_t)((uint64_t)s->low + ploss_philox_below(r, s->span));
        return (double)*ival;
    }
    }
}

ploss_status ploss_cpu_rand(const ploss_view *dst, const ploss_rand_spec *spec)
{
    const int64_t N = dst->numel, st = dst->ndim ? dst->strides[dst->ndim - 1] : 0;
    const int64_t pieces = (N + COPY_CHUNK - 1) / COPY_CHUNK;
#pragma omp parallel for schedule(static) if (pieces > 1)
    for (int64_t piece = 0; piece < pieces; ++piece) {
        const int64_t end = (piece + 1) * COPY_CHUNK < N ? (piece + 1) * COPY_CHUNK : N;
        odometer o;
        odometer_start(&o, dst, piece * COPY_CHUNK);
        for (int64_t k = piece * COPY_CHUNK; k < end;) {
            /* a run of the innermost dim, in blocks through doubles (integers exactly) */
            int64_t n = odometer_run(&o) < end - k ? odometer_run(&o) : end - k;
            n = n < 256 ? n : 256;
            double buf[256];
            for (int64_t i = 0; i < n; ++i) {
                int64_t iv = 0;
                buf[i] = rand_value(spec, k + i, &iv);
                if (spec->kind == PLOSS_RAND_INT)
                    ploss_store_int(dst->data, dst->dtype, o.off + i * st, iv);
            }
            if (spec->kind != PLOSS_RAND_INT)
                ploss_cpu_store_f64(dst->data, dst->dtype, o.off, st, n, buf);
            odometer_advance(&o, n);
            k += n;
        }
    }
    return PLOSS_OK;
}
