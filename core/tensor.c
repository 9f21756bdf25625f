/* tensor.c — DLTensor normalisation and the checks every entry point shares. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

ploss_dtype ploss_dtype_of(DLDataType t)
{
    if (t.lanes != 1)
        return PLOSS_DTYPE_INVALID;
    switch (t.code) {
    case kDLFloat:
        return t.bits == 32 ? PLOSS_F32 : t.bits == 16 ? PLOSS_F16 : t.bits == 64 ? PLOSS_F64
                                                                                    : PLOSS_DTYPE_INVALID;
    case kDLBfloat:
        return t.bits == 16 ? PLOSS_BF16 : PLOSS_DTYPE_INVALID;
    case kDLInt:
        return t.bits == 64 ? PLOSS_I64 : t.bits == 32 ? PLOSS_I32 : PLOSS_DTYPE_INVALID;
    case kDLUInt:
        return t.bits == 8 ? PLOSS_U8 : PLOSS_DTYPE_INVALID;
    default:
        return PLOSS_DTYPE_INVALID;
    }
}

const char *ploss_dtype_name(ploss_dtype d)
{
    static const char *const names[PLOSS_DTYPE_COUNT] = {"f32", "f16", "bf16", "f64",
                                                         "i64", "i32", "u8"};
    return (d >= 0 && d < PLOSS_DTYPE_COUNT) ? names[d] : "unsupported";
}

size_t ploss_dtype_size(ploss_dtype d)
{
    static const size_t sizes[PLOSS_DTYPE_COUNT] = {4, 2, 2, 8, 8, 4, 1};
    return (d >= 0 && d < PLOSS_DTYPE_COUNT) ? sizes[d] : 0;
}

int ploss_dtype_is_float(ploss_dtype d)
{
    return d == PLOSS_F32 || d == PLOSS_F16 || d == PLOSS_BF16 || d == PLOSS_F64;
}

static const char *device_name(DLDevice d, char *buf, size_t len)
{
    if (d.device_type == kDLCPU)
        snprintf(buf, len, "cpu");
    else if (d.device_type == kDLCUDA)
        snprintf(buf, len, "cuda:%d", d.device_id);
    else
        snprintf(buf, len, "device type %d", (int)d.device_type);
    return buf;
}

const char *ploss_view_describe(const ploss_view *v, char *buf, size_t len)
{
    char dev[32];
    size_t n = (size_t)snprintf(buf, len, "%s[", ploss_dtype_name(v->dtype));
    for (int d = 0; d < v->ndim && n < len; ++d)
        n += (size_t)snprintf(buf + n, len - n, d ? ", %lld" : "%lld", (long long)v->shape[d]);
    if (n < len)
        snprintf(buf + n, len - n, "] on %s", device_name(v->device, dev, sizeof dev));
    return buf;
}

ploss_status ploss_view_init(ploss_view *v, const DLTensor *t, const char *name)
{
    memset(v, 0, sizeof *v);
    if (!t)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", name);
    if (t->ndim < 0 || t->ndim > PLOSS_MAX_DIMS)
        return ploss_error(PLOSS_ERR_SHAPE, "%s: rank %d is outside [0, %d]", name, t->ndim,
                           PLOSS_MAX_DIMS);
    if (t->ndim > 0 && !t->shape)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: shape is NULL for rank %d", name,
                           t->ndim);
    v->dtype = ploss_dtype_of(t->dtype);
    if (v->dtype == PLOSS_DTYPE_INVALID)
        return ploss_error(PLOSS_ERR_DTYPE,
                           "%s: dtype (code %u, bits %u, lanes %u) is not one of f32, f16, "
                           "bf16, f64, i64, i32, u8",
                           name, t->dtype.code, t->dtype.bits, t->dtype.lanes);
    if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDA)
        return ploss_error(PLOSS_ERR_DEVICE, "%s: device type %d is neither CPU nor CUDA", name,
                           (int)t->device.device_type);
    v->device = t->device;
    v->ndim = t->ndim;
    v->numel = 1;
    int64_t nonzero = 1; /* product of the sizes other than 0: every product of sizes that a
                            family forms (rows, samples) stays below it, even when numel = 0 */
    for (int d = t->ndim - 1; d >= 0; --d) {
        if (t->shape[d] < 0)
            return ploss_error(PLOSS_ERR_SHAPE, "%s: size %lld of dim %d (0-based; Lua dim %d) is negative",
                               name, (long long)t->shape[d], d, d + 1);
        v->shape[d] = t->shape[d];
        if (t->shape[d] > 0 && t->shape[d] > INT64_MAX / nonzero)
            return ploss_error(PLOSS_ERR_SHAPE, "%s: element count overflows int64 (sizes other "
                               "than 0 count too, for empty tensors)", name);
        if (t->shape[d] > 0)
            nonzero *= t->shape[d];
        v->strides[d] = t->strides ? t->strides[d] : v->numel;
        v->numel *= t->shape[d];
    }
    /* span: bytes from the lowest to the highest element; below: bytes of it under the
     * first element (negative strides).  Each |stride|·(size − 1)·element size and their sum
     * stay within 2^62 (checked before each product), so no offset in bytes or elements,
     * nor a sum of them, overflows int64 in any backend. */
    const uint64_t es = ploss_dtype_size(v->dtype), limit = UINT64_C(1) << 62;
    uint64_t span = 0, below = 0;
    for (int d = 0; d < v->ndim; ++d) {
        if (v->shape[d] <= 1)
            continue;
        const uint64_t s = v->strides[d] < 0 ? (uint64_t)0 - (uint64_t)v->strides[d]
                                             : (uint64_t)v->strides[d];
        const uint64_t n = (uint64_t)v->shape[d] - 1;
        if (s > limit / n / es)
            return ploss_error(PLOSS_ERR_LAYOUT, "%s: stride %lld of dim %d (0-based; Lua dim %d; size "
                               "%lld) reaches more than 2^62 bytes", name, (long long)v->strides[d], d,
                               d + 1, (long long)v->shape[d]);
        span += s * n * es;
        if (v->strides[d] < 0)
            below += s * n * es;
        if (span > limit)
            return ploss_error(PLOSS_ERR_LAYOUT, "%s: %s span more than 2^62 bytes", name,
                               t->strides ? "strides" : "sizes");
    }
    if (t->byte_offset % es != 0)
        return ploss_error(PLOSS_ERR_LAYOUT, "%s: byte_offset %llu is not a multiple of the %s element size",
                           name, (unsigned long long)t->byte_offset, ploss_dtype_name(v->dtype));
    if (v->numel > 0 && !t->data)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: data is NULL for %lld elements", name,
                           (long long)v->numel);
    const uintptr_t base = (uintptr_t)t->data;
    if (base % es != 0)
        return ploss_error(PLOSS_ERR_LAYOUT, "%s: data pointer %p is not aligned to the %s element "
                           "size (%zu bytes)", name, t->data, ploss_dtype_name(v->dtype), (size_t)es);
    if (!t->data)
        return PLOSS_OK; /* no elements, and no arithmetic on NULL (UB) */
    /* the bytes of the elements lie inside the address space (no wrap-around) */
    const uintptr_t first = t->byte_offset <= UINTPTR_MAX - base ? base + (uintptr_t)t->byte_offset : 0;
    if (!first || (v->numel > 0 && (below > first || span - below + es > UINTPTR_MAX - first)))
        return ploss_error(PLOSS_ERR_LAYOUT, "%s: byte_offset %llu and strides place elements "
                           "outside the address space (data %p)", name,
                           (unsigned long long)t->byte_offset, t->data);
    /* no allocation reaches 2^56 bytes (64 PiB) past its start: a byte_offset or strides
     * that reach that far past the data pointer are a mistake, refused rather than
     * dereferenced.  A bound on the offsets, not on the address, so that pointers carrying
     * tag bits (MTE, HWASan, LAM) stay valid. */
    const uint64_t reach = UINT64_C(1) << 56;
    if (v->numel > 0 && (t->byte_offset >= reach || span - below + es > reach - t->byte_offset))
        return ploss_error(PLOSS_ERR_LAYOUT, "%s: byte_offset %llu and strides reach 2^56 bytes or more past "
                           "the data pointer (no allocation is that large)", name,
                           (unsigned long long)t->byte_offset);
    v->data = (char *)t->data + t->byte_offset;
    return PLOSS_OK;
}

ploss_status ploss_view_check_device(const ploss_view *v, const ploss_ctx_t *ctx, const char *name)
{
    if (v->device.device_type == ctx->device.device_type &&
        (v->device.device_type == kDLCPU || v->device.device_id == ctx->device.device_id))
        return PLOSS_OK;
    char a[32], b[200];
    return ploss_error(PLOSS_ERR_DEVICE, "%s: expected a tensor on %s (the context's device), got %s",
                       name, device_name(ctx->device, a, sizeof a), ploss_view_describe(v, b, sizeof b));
}

typedef struct { int64_t size, stride; } dim_pair;

static int cmp_stride(const void *pa, const void *pb)
{
    const dim_pair *a = pa, *b = pb;
    return (a->stride > b->stride) - (a->stride < b->stride);
}

ploss_status ploss_view_check_writable(const ploss_view *v, const char *name)
{
    if (v->numel <= 1)
        return PLOSS_OK;
    dim_pair dims[PLOSS_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < v->ndim; ++d) {
        if (v->shape[d] == 1)
            continue;
        dims[n].size = v->shape[d];
        dims[n].stride = v->strides[d] < 0 ? -v->strides[d] : v->strides[d];
        ++n;
    }
    qsort(dims, (size_t)n, sizeof dims[0], cmp_stride);
    int64_t reach = 0; /* largest offset reachable by the smaller-stride dims */
    for (int k = 0; k < n; ++k) {
        /* a zero stride, or two equal ones, map distinct elements to one place; otherwise
         * the test is sufficient, not necessary: say what it asks, not that they overlap */
        if (dims[k].stride == 0 || (k > 0 && dims[k].stride == dims[k - 1].stride))
            return ploss_error(PLOSS_ERR_LAYOUT,
                               "%s: strides make distinct elements share memory (an expanded or "
                               "overlapping view cannot be written); pass a contiguous tensor",
                               name);
        if (dims[k].stride <= reach)
            return ploss_error(PLOSS_ERR_LAYOUT,
                               "%s: strides not shown free of overlap: sorted, each must exceed the "
                               "furthest offset the smaller ones reach (%lld <= %lld), as a permuted "
                               "or sliced dense tensor's do; pass a contiguous tensor",
                               name, (long long)dims[k].stride, (long long)reach);
        reach += dims[k].stride * (dims[k].size - 1);
    }
    return PLOSS_OK;
}

int ploss_view_extent(const ploss_view *v, uintptr_t *lo, uintptr_t *hi)
{
    if (v->numel == 0)
        return 0;
    int64_t mn = 0, mx = 0;
    for (int d = 0; d < v->ndim; ++d) {
        int64_t e = v->strides[d] * (v->shape[d] - 1);
        if (e < 0)
            mn += e;
        else
            mx += e;
    }
    size_t es = ploss_dtype_size(v->dtype);
    *lo = (uintptr_t)v->data + (uintptr_t)(mn * (int64_t)es);
    *hi = (uintptr_t)v->data + (uintptr_t)(mx * (int64_t)es) + es;
    return 1;
}

int ploss_view_overlaps(const ploss_view *a, const ploss_view *b)
{
    uintptr_t alo, ahi, blo, bhi;
    /* one address space per CPU whatever device_id says, one per GPU */
    if (a->device.device_type != b->device.device_type ||
        (a->device.device_type != kDLCPU && a->device.device_id != b->device.device_id))
        return 0;
    if (!ploss_view_extent(a, &alo, &ahi) || !ploss_view_extent(b, &blo, &bhi))
        return 0;
    return alo < bhi && blo < ahi;
}

int ploss_view_same(const ploss_view *a, const ploss_view *b)
{
    if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; ++d)
        if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->strides[d] != b->strides[d]))
            return 0;
    return 1;
}

ploss_status ploss_check_no_alias(const ploss_view *out, const char *out_name, const ploss_view *in,
                                  const char *in_name)
{
    if (!ploss_view_overlaps(out, in))
        return PLOSS_OK;
    return ploss_error(PLOSS_ERR_ALIAS, "%s: overlaps the memory of %s (their spans meet: the bytes from "
                       "each one's first to its last element); pass a separate buffer", out_name, in_name);
}

int ploss_view_is_contiguous(const ploss_view *v)
{
    if (v->numel == 0) /* no element: any strides (PyTorch's is_contiguous, Tensor:is_contiguous) */
        return 1;
    int64_t expect = 1;
    for (int d = v->ndim - 1; d >= 0; --d) {
        if (v->shape[d] != 1 && v->strides[d] != expect)
            return 0;
        expect *= v->shape[d];
    }
    return 1;
}

void ploss_view_make_contiguous(ploss_view *v, void *data, ploss_dtype dtype, DLDevice device)
{
    int64_t s = 1;
    for (int d = v->ndim - 1; d >= 0; --d) {
        v->strides[d] = s;
        s *= v->shape[d];
    }
    v->data = data;
    v->dtype = dtype;
    v->device = device;
}
