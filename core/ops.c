/* ops.c — public copy, fill, axpby and random-number entry points: checks, then dispatch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "loss_check.h"
#include "scalar.h"
#include "tensor_ops.h"

static ploss_status check_ctx(const ploss_ctx_t *ctx)
{
    return ctx ? PLOSS_OK : ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
}

static int on_cuda(const ploss_view *v) { return v->device.device_type == kDLCUDA; }

/* Tensors of ploss_copy may sit on the context's device or on the CPU. */
static ploss_status check_copy_device(const ploss_view *v, const ploss_ctx_t *ctx, const char *name)
{
    if (v->device.device_type == kDLCPU)
        return PLOSS_OK;
    return ploss_view_check_device(v, ctx, name);
}

#ifdef PLOSS_HAVE_CUDA
/* Copy between the CPU and the context's GPU through dense staging buffers. */
static ploss_status copy_across(ploss_ctx_t *ctx, const ploss_view *dst, const ploss_view *src)
{
    const int to_device = on_cuda(dst);
    const ploss_view *dev = to_device ? dst : src, *host = to_device ? src : dst;
    const ploss_dtype dt = dev->dtype; /* bytes cross the bus in the device tensor's dtype */
    const size_t bytes = (size_t)dev->numel * ploss_dtype_size(dt);
    ploss_status st = ploss_cuda_set_device(ctx->device.device_id);
    if (st != PLOSS_OK)
        return st;
    if (!to_device && (st = ploss_ctx_synchronize(ctx)) != PLOSS_OK)
        return st;

    ploss_view dev_dense = *dev, host_dense = *host;
    void *dbuf = dev->data, *hbuf = host->data, *hown = NULL;
    if (!ploss_view_is_contiguous(dev)) {
        if ((st = ploss_workspace(ctx, bytes, &dbuf)) != PLOSS_OK)
            return st;
        ploss_view_make_contiguous(&dev_dense, dbuf, dt, dev->device);
    }
    if (!ploss_view_is_contiguous(host) || host->dtype != dt) {
        hown = malloc(bytes ? bytes : 1);
        if (!hown)
            return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "host staging buffer of %zu bytes", bytes);
        hbuf = hown;
        ploss_view_make_contiguous(&host_dense, hbuf, dt, host->device);
    }
    if (to_device) {
        if (hown)
            ploss_cpu_copy(&host_dense, src);
        st = ploss_cuda_memcpy(dbuf, hbuf, bytes, PLOSS_COPY_H2D, ctx->stream);
        if (st == PLOSS_OK && dbuf != dev->data)
            st = ploss_cuda_copy(ctx, dst, &dev_dense);
    } else {
        if (dbuf != dev->data)
            st = ploss_cuda_copy(ctx, &dev_dense, src);
        if (st == PLOSS_OK)
            st = ploss_cuda_memcpy(hbuf, dbuf, bytes, PLOSS_COPY_D2H, ctx->stream);
        if (st == PLOSS_OK && hown)
            ploss_cpu_copy(dst, &host_dense);
    }
    free(hown);
    return st;
}
#endif

ploss_status ploss_copy(ploss_ctx_t *ctx, DLTensor *dst, const DLTensor *src)
{
    ploss_clear_error();
    ploss_view d, s;
    ploss_status st;
    if ((st = check_ctx(ctx)) || (st = ploss_view_init(&d, dst, "dst")) ||
        (st = ploss_view_init(&s, src, "src")) || (st = check_copy_device(&d, ctx, "dst")) ||
        (st = check_copy_device(&s, ctx, "src")) || (st = ploss_view_check_writable(&d, "dst")))
        return st;
    int same_shape = d.ndim == s.ndim;
    for (int k = 0; same_shape && k < d.ndim; ++k)
        same_shape = d.shape[k] == s.shape[k];
    if (!same_shape) {
        char a[160], b[160];
        return ploss_error(PLOSS_ERR_SHAPE, "dst: expected the shape of src %s, got %s",
                           ploss_view_describe(&s, a, sizeof a), ploss_view_describe(&d, b, sizeof b));
    }
    if (ploss_view_same(&d, &s))
        return PLOSS_OK;
    if ((st = ploss_check_no_alias(&d, "dst", &s, "src")))
        return st;
    if (d.numel == 0)
        return PLOSS_OK;
    if (!on_cuda(&d) && !on_cuda(&s))
        return ploss_cpu_copy(&d, &s);
#ifdef PLOSS_HAVE_CUDA
    if (on_cuda(&d) && on_cuda(&s)) {
        if ((st = ploss_cuda_set_device(ctx->device.device_id)))
            return st;
        if (d.dtype == s.dtype && ploss_view_is_contiguous(&d) && ploss_view_is_contiguous(&s))
            return ploss_cuda_memcpy(d.data, s.data, (size_t)d.numel * ploss_dtype_size(d.dtype),
                                     PLOSS_COPY_D2D, ctx->stream);
        return ploss_cuda_copy(ctx, &d, &s);
    }
    return copy_across(ctx, &d, &s);
#else
    return ploss_error(PLOSS_ERR_UNSUPPORTED, "dst/src: CUDA tensors need a library built with CUDA");
#endif
}

/* Checks shared by fill and the random generators: an output on the ctx's device. */
static ploss_status prepare_output(ploss_ctx_t *ctx, ploss_view *v, DLTensor *t)
{
    ploss_status st;
    if ((st = check_ctx(ctx)) || (st = ploss_view_init(v, t, "dst")) ||
        (st = ploss_view_check_device(v, ctx, "dst")) || (st = ploss_view_check_writable(v, "dst")))
        return st;
#ifdef PLOSS_HAVE_CUDA
    if (on_cuda(v))
        return ploss_cuda_set_device(ctx->device.device_id);
#endif
    return PLOSS_OK;
}

/* dst takes only a value it holds: in an integer dtype a fraction would be truncated and a
 * value outside the dtype's range wrapped (undefined behaviour in C) without a word; in a
 * float dtype a finite value beyond its largest one would become ±inf (or that largest). */
static ploss_status check_fill_value(ploss_dtype dtype, double value)
{
    double lo, hi; /* lo <= value < hi */
    switch (dtype) {
    case PLOSS_I64: lo = -0x1p63, hi = 0x1p63; break;
    case PLOSS_I32: lo = -0x1p31, hi = 0x1p31; break;
    case PLOSS_U8: lo = 0, hi = 256; break;
    default: {
        /* a float dtype: a finite value beyond its largest finite one, which would be stored
         * rounded to it or as ±inf, is refused (as PyTorch's fill_); ±inf and NaN are stored */
        const double max = dtype == PLOSS_F16    ? 65504.0
                           : dtype == PLOSS_BF16 ? 0x1.FEp127
                           : dtype == PLOSS_F32  ? 0x1.FFFFFEp127
                                                 : INFINITY;
        if (isfinite(value) && fabs(value) > max)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "value: %s exceeds %s's largest finite value %s%s",
                               PLOSS_SHOWN(value), ploss_dtype_name(dtype), value < 0 ? "-" : "", PLOSS_SHOWN(max));
        return PLOSS_OK;
    }
    }
    if (isnan(value))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "value: NaN is not a value of %s", ploss_dtype_name(dtype));
    if (!(value >= lo && value < hi) || value != floor(value))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "value: %s is not a value of %s (an integer in [%.0f, %.0f))",
                           PLOSS_SHOWN(value), ploss_dtype_name(dtype), lo, hi);
    return PLOSS_OK;
}

ploss_status ploss_fill(ploss_ctx_t *ctx, DLTensor *dst, double value)
{
    ploss_clear_error();
    ploss_view d;
    ploss_status st = prepare_output(ctx, &d, dst);
    if (st || (st = check_fill_value(d.dtype, value)) || d.numel == 0)
        return st;
#ifdef PLOSS_HAVE_CUDA
    if (on_cuda(&d))
        return ploss_cuda_fill(ctx, &d, value);
#endif
    return ploss_cpu_fill(&d, value);
}

ploss_status ploss_axpby(ploss_ctx_t *ctx, DLTensor *dst, double alpha, const DLTensor *src, double beta)
{
    ploss_clear_error();
    ploss_view d, s, sb;
    ploss_status st = prepare_output(ctx, &d, dst);
    if (st)
        return st;
    if (!ploss_dtype_is_float(d.dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "dst: expected a float dtype (f32, f16, bf16, f64), got %s",
                           ploss_dtype_name(d.dtype));
    if (!isfinite(alpha) || !isfinite(beta))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: expected a finite number, got %s",
                           isfinite(alpha) ? "beta" : "alpha", PLOSS_SHOWN(isfinite(alpha) ? beta : alpha));
    if ((st = ploss_view_init(&s, src, "src")) || (st = ploss_view_check_device(&s, ctx, "src")))
        return st;
    if (!ploss_dtype_is_float(s.dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "src: expected a float dtype (f32, f16, bf16, f64), got %s",
                           ploss_dtype_name(s.dtype));
    /* dst's shape, src's data, dtype and strides (0 along broadcast dims) */
    sb = d;
    sb.data = s.data;
    sb.dtype = s.dtype;
    if (!ploss_broadcast_strides(&s, &d, sb.strides)) {
        char a[160], b[160];
        return ploss_error(PLOSS_ERR_SHAPE, "src: %s does not broadcast to dst's sizes (dst is %s): src's dims, "
                           "aligned with dst's last ones, must each be 1 or dst's",
                           ploss_view_describe(&s, a, sizeof a), ploss_view_describe(&d, b, sizeof b));
    }
    if (!ploss_view_same(&d, &s) && (st = ploss_check_no_alias(&d, "dst", &s, "src")))
        return st;
    if (d.numel == 0)
        return PLOSS_OK;
#ifdef PLOSS_HAVE_CUDA
    if (on_cuda(&d))
        return ploss_cuda_axpby(ctx, &d, alpha, &sb, beta);
#endif
    return ploss_cpu_axpby(&d, alpha, &sb, beta);
}

/* The value of float dtype dt next to v (a finite value of dt, or ±Inf) toward +Inf (dir >
 * 0) or −Inf: one step of its sign-magnitude bit pattern. */
static double dtype_step(ploss_dtype dt, double v, int dir)
{
    if (dt == PLOSS_F64)
        return nextafter(v, dir > 0 ? INFINITY : -INFINITY);
    if (dt == PLOSS_F32)
        return nextafterf((float)v, dir > 0 ? INFINITY : -INFINITY);
    uint64_t word = 0; /* room for any dtype; f16 and bf16 take its first two bytes */
    uint16_t b;        /* their bits: sign bit 15, magnitude below it */
    ploss_store(&word, dt, 0, v);
    memcpy(&b, &word, sizeof b);
    if ((b & 0x7fff) == 0)
        b = dir > 0 ? 0x0001 : 0x8001;
    else
        b = ((b & 0x8000) == 0) == (dir > 0) ? (uint16_t)(b + 1) : (uint16_t)(b - 1);
    memcpy(&word, &b, sizeof b);
    return ploss_load(&word, dt, 0);
}

/* v rounded to the nearest value of float dtype dt (±Inf beyond its finite values). */
static double nearest_value(ploss_dtype dt, double v)
{
    uint64_t word = 0; /* room for any dtype */
    ploss_store(&word, dt, 0, v);
    return ploss_load(&word, dt, 0);
}

/* The least and greatest values of float dtype dt in [low, high) (finite, low < high),
 * into s->lo and s->hi; an error when the dtype has none there, or when low or high lies
 * beyond its finite values (the draws past them would all be held at its largest value:
 * f16 [0, 1e5) would be a third 65504). */
static ploss_status uniform_bounds(ploss_dtype dt, ploss_rand_spec *s)
{
    double lo = nearest_value(dt, s->a), hi = nearest_value(dt, s->b);
    if (isinf(lo) || isinf(hi))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "low, high: [%s, %s) reaches beyond the finite values of %s",
                           PLOSS_SHOWN(s->a), PLOSS_SHOWN(s->b), ploss_dtype_name(dt));
    if (lo < s->a)
        lo = dtype_step(dt, lo, +1);
    if (hi >= s->b)
        hi = dtype_step(dt, hi, -1);
    if (!(lo <= hi))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "low, high: no %s value lies in [%s, %s)",
                           ploss_dtype_name(dt), PLOSS_SHOWN(s->a), PLOSS_SHOWN(s->b));
    s->lo = lo, s->hi = hi;
    return PLOSS_OK;
}

static ploss_status rand_dispatch(ploss_ctx_t *ctx, DLTensor *dst, const ploss_rand_spec *request)
{
    ploss_view d;
    ploss_rand_spec sp = *request, *spec = &sp;
    ploss_status st = prepare_output(ctx, &d, dst);
    if (st)
        return st;
    if (spec->kind != PLOSS_RAND_INT && !ploss_dtype_is_float(d.dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "dst: expected a float dtype (f32, f16, bf16, f64), got %s",
                           ploss_dtype_name(d.dtype));
    if (spec->kind == PLOSS_RAND_UNIFORM && (st = uniform_bounds(d.dtype, spec)))
        return st;
    if (spec->kind == PLOSS_RAND_INT && (d.dtype == PLOSS_I32 || d.dtype == PLOSS_U8)) {
        /* [low, high) must hold in dst's integer dtype: a value outside it would wrap */
        const int64_t lo = d.dtype == PLOSS_U8 ? 0 : INT32_MIN, hi = d.dtype == PLOSS_U8 ? 255 : INT32_MAX;
        const int64_t last = (int64_t)((uint64_t)spec->low + (spec->span - 1));
        if (spec->low < lo || last > hi)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                               "low, high: [%lld, %lld) does not fit %s (values %lld to %lld)",
                               (long long)spec->low, (long long)last + 1, ploss_dtype_name(d.dtype), (long long)lo,
                               (long long)hi);
    }
    if (spec->kind == PLOSS_RAND_INT && d.dtype == PLOSS_F16) {
        /* f16 rounds integers of magnitude 65520 and above to ±inf: not a rounding to a
         * nearby integer, as the other float dtypes' (their range holds every int64) */
        const int64_t last = (int64_t)((uint64_t)spec->low + (spec->span - 1));
        if (spec->low <= -65520 || last >= 65520)
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                               "low, high: [%lld, %lld) reaches beyond the finite values of f16 (integers of "
                               "magnitude 65520 and above round to inf)",
                               (long long)spec->low, (long long)last + 1);
    }
    if (d.numel == 0)
        return PLOSS_OK;
#ifdef PLOSS_HAVE_CUDA
    if (on_cuda(&d))
        return ploss_cuda_rand(ctx, &d, spec);
#endif
    return ploss_cpu_rand(&d, spec);
}

ploss_status ploss_rand_uniform(ploss_ctx_t *ctx, DLTensor *dst, uint64_t seed, uint64_t offset,
                                double low, double high)
{
    ploss_clear_error();
    if (!isfinite(low) || !isfinite(high))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: expected a finite number, got %s",
                           isfinite(low) ? "high" : "low", PLOSS_SHOWN(isfinite(low) ? high : low));
    if (!(high > low))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "high: expected high > low, got low %s, high %s",
                           PLOSS_SHOWN(low), PLOSS_SHOWN(high));
    if (!isfinite(high - low))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "low, high: high − low overflows a double (%s, %s)",
                           PLOSS_SHOWN(low), PLOSS_SHOWN(high));
    ploss_rand_spec s = {.kind = PLOSS_RAND_UNIFORM, .seed = seed, .offset = offset, .a = low, .b = high};
    return rand_dispatch(ctx, dst, &s);
}

ploss_status ploss_rand_normal(ploss_ctx_t *ctx, DLTensor *dst, uint64_t seed, uint64_t offset,
                               double mean, double std)
{
    ploss_clear_error();
    if (!isfinite(mean))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "mean: expected a finite number, got %s", PLOSS_SHOWN(mean));
    if (!(std >= 0) || !isfinite(std))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "std: expected a finite std >= 0, got %s", PLOSS_SHOWN(std));
    ploss_rand_spec s = {.kind = PLOSS_RAND_NORMAL, .seed = seed, .offset = offset, .a = mean, .b = std};
    return rand_dispatch(ctx, dst, &s);
}

ploss_status ploss_rand_int(ploss_ctx_t *ctx, DLTensor *dst, uint64_t seed, uint64_t offset,
                            int64_t low, int64_t high)
{
    ploss_clear_error();
    if (!(high > low))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "high: expected high > low, got low %lld, high %lld",
                           (long long)low, (long long)high);
    ploss_rand_spec s = {.kind = PLOSS_RAND_INT, .seed = seed, .offset = offset, .low = low,
                         .span = (uint64_t)high - (uint64_t)low};
    return rand_dispatch(ctx, dst, &s);
}
