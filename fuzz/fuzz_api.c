/*
 * fuzz_api.c — libFuzzer harness over the public C entry points listed in entries.c.
 *
 * One fuzz input describes one call: which entry, the shared sizes (N, C, spatial dims),
 * then per tensor slot its presence, dtype, device, shape, strides, data pointer and byte
 * offset, aliasing with other slots, the values of the input tensors, the options struct
 * and the context.  Bytes are read in that order; a missing byte reads as 0, and 0 is the
 * ordinary choice everywhere (present, CPU, hinted dtype and shape, contiguous), so short
 * inputs make well-formed calls and longer ones break them.
 *
 * What is checked is listed in fuzz.h.  Any violation prints the case and aborts, so
 * libFuzzer saves the input as a crash artifact.  FZ_VERBOSE=1 prints one line per call
 * (useful to read what a corpus file does: ./fuzz_api -runs=0 file); FZ_VERBOSE=2 also
 * prints each call before it is made (for hangs).
 *
 * Build: meson setup build-fuzz -Dfuzzer=true -Dcuda=disabled with CC=clang (see
 * fuzz/meson.build and .ci/run).  The library's sources are compiled into the fuzzer
 * with coverage instrumentation, ASan and UBSan (no recovery: any report aborts).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#define FZ_MAX_DIMS 10          /* the library takes 8: 9 and 10 must be refused or handled */
#define FZ_NUMEL_CAP 4096       /* elements of any descriptor the library may accept */
#define FZ_BUF_CAP (1u << 20)   /* bytes of the buffer behind one descriptor */
#define FZ_GUARD_BYTES 64       /* buffer behind a descriptor the call must refuse */
#define FZ_SPAN_LIMIT (INT64_C(1) << 62) /* bytes from the first to the last element (ploss.h) */

/* ---- input bytes and a PRNG for bulk values ------------------------------------------ */

typedef struct fz_src {
    const uint8_t *p;
    size_t n;
} fz_src;

static unsigned u8(fz_src *s)
{
    if (!s->n)
        return 0;
    s->n--;
    return *s->p++;
}

static uint64_t u64(fz_src *s)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
        v |= (uint64_t)u8(s) << (8 * i);
    return v;
}

static uint64_t rng_state;

static uint64_t rng(void) /* splitmix64 */
{
    uint64_t z = (rng_state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* ---- dtypes --------------------------------------------------------------------------- */

typedef struct fz_dtype {
    DLDataType t;
    size_t size; /* 0: not supported by the ABI (must be refused) */
    char cls;    /* 'f' float, 'i' i64/i32, 'u' u8, 0 unsupported */
} fz_dtype;

static const fz_dtype dtypes[] = {
    {{kDLFloat, 32, 1}, 4, 'f'}, {{kDLFloat, 16, 1}, 2, 'f'}, {{kDLBfloat, 16, 1}, 2, 'f'},
    {{kDLFloat, 64, 1}, 8, 'f'}, {{kDLInt, 64, 1}, 8, 'i'},   {{kDLInt, 32, 1}, 4, 'i'},
    {{kDLUInt, 8, 1}, 1, 'u'},
};
enum { N_SUPPORTED = 7, DT_F32 = 0, DT_F64 = 3 };

static const DLDataType bad_dtypes[] = {
    {kDLFloat, 8, 1},   {kDLFloat, 32, 2}, {kDLFloat, 32, 0}, {kDLInt, 8, 1},
    {kDLInt, 16, 1},    {kDLUInt, 16, 1},  {kDLUInt, 1, 1},   {kDLUInt, 64, 1},
    {kDLBfloat, 32, 1}, {kDLComplex, 64, 1}, {kDLOpaqueHandle, 64, 1}, {6 /* kDLBool */, 8, 1},
    {kDLInt, 64, 4},    {kDLFloat, 128, 1},
};

static fz_dtype classify_dtype(DLDataType t)
{
    for (int i = 0; i < N_SUPPORTED; ++i)
        if (dtypes[i].t.code == t.code && dtypes[i].t.bits == t.bits && dtypes[i].t.lanes == t.lanes)
            return dtypes[i];
    fz_dtype bad = {t, 0, 0};
    return bad;
}

static const char *dtype_str(DLDataType t, char *buf, size_t n)
{
    snprintf(buf, n, "dtype(%u,%u,%u)", t.code, t.bits, t.lanes);
    return buf;
}

/* ---- descriptors and buffers ----------------------------------------------------------- */

typedef struct fz_desc {
    int present;
    unsigned flags;             /* slot flags: FZ_OUT, FZ_OPTIONAL */
    DLTensor t;
    int64_t shape[FZ_MAX_DIMS], strides[FZ_MAX_DIMS];
    fz_dtype dt;
    const char *invalid;        /* why the contract forbids it; NULL when valid */
    int64_t numel;              /* valid when !invalid */
    int64_t min_off, max_off;   /* element offsets reached (numel > 0) */
    size_t pad;                 /* bytes of the buffer before the lowest element */
    int null_data;              /* data is NULL */
    size_t data_skew, offset_skew; /* bytes (not a multiple of the element size) added to
                                      the data pointer or to byte_offset */
    int alias;                  /* slot whose buffer this one shares, or -1 */
    int buf;                    /* buffer index, or -1 (no buffer) */
} fz_desc;

typedef struct fz_buf {
    unsigned char *p, *before, *mark;
    size_t size;
    int has_output;
} fz_buf;

typedef struct fz_case {
    const fz_entry *e;
    int64_t N, C, d[3];
    int k;
    fz_desc s[FZ_MAX_SLOTS];
    fz_buf b[FZ_MAX_SLOTS];
    int nbuf;
    _Alignas(max_align_t) unsigned char opts[256];
    int opts_null, ctx_null;
    const char *must_fail; /* a reason the call as a whole must be refused */
} fz_case;

static const int64_t huge_sizes[] = {INT64_MAX, INT64_C(1) << 62, INT64_C(3) << 61,
                                     INT64_C(1) << 40, (INT64_C(1) << 32) + 1, INT64_C(1) << 31,
                                     -1, INT64_MIN};
/* around the 2^62-byte span limit for 1- to 8-byte elements, and far beyond it */
static const int64_t huge_strides[] = {INT64_MAX, INT64_MIN, INT64_C(1) << 62, -(INT64_C(1) << 62),
                                       INT64_C(1) << 61, INT64_C(1) << 40, INT64_C(1) << 33,
                                       -(INT64_C(1) << 33), INT64_C(1) << 60, -(INT64_C(1) << 60),
                                       (INT64_C(1) << 59) + 1, (INT64_C(1) << 59) - 1,
                                       INT64_C(1537228672809129301) /* ~2^62 / 3 */,
                                       -((INT64_C(1) << 60) + 3)};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int64_t pick_size(fz_src *s)
{
    static const int64_t small[] = {2, 3, 1, 4, 5};
    unsigned b = u8(s);
    if (b < 200)
        return small[b % 5];
    if (b < 216)
        return 0;
    if (b < 240)
        return 6 + (int64_t)(b - 216) * 3;
    return huge_sizes[(b - 240) % COUNT(huge_sizes)];
}

static int is_huge(int64_t v) { return v < 0 || v > 100; }

/* n-th alternative (mod count) of a '|'-separated pattern, into out. */
static void alternative(const char *pat, unsigned n, char *out, size_t len)
{
    int count = 1;
    for (const char *p = pat; *p; ++p)
        count += *p == '|';
    n %= (unsigned)count;
    const char *p = pat;
    while (n--)
        p = strchr(p, '|') + 1;
    size_t k = 0;
    while (p[k] && p[k] != '|' && k + 1 < len) {
        out[k] = p[k];
        ++k;
    }
    out[k] = 0;
}

static void pick_dtype(fz_case *c, fz_src *s, int slot, fz_desc *d)
{
    unsigned b = u8(s);
    if (b >= 240) { /* break the hint: unsupported, or any supported dtype */
        if (b >= 248) {
            unsigned r = u8(s);
            DLDataType t = bad_dtypes[r % COUNT(bad_dtypes)];
            if (r >= 240) {
                t.code = (uint8_t)u8(s);
                t.bits = (uint8_t)u8(s);
                t.lanes = (uint16_t)u8(s);
            }
            d->dt = classify_dtype(t);
        } else {
            d->dt = dtypes[u8(s) % N_SUPPORTED];
        }
        return;
    }
    char alt[8];
    alternative(c->e->slots[slot].dtype, b, alt, sizeof alt);
    const fz_dtype *first = c->s[0].present ? &c->s[0].dt : &dtypes[DT_F32];
    unsigned r = u8(s);
    switch (alt[0]) {
    case 'f': d->dt = dtypes[(int[]){DT_F32, 1, 2, DT_F64}[r % 4]]; break;
    case 'i': d->dt = dtypes[4 + r % 2]; break;
    case 'u': d->dt = dtypes[6]; break;
    case 'x': d->dt = first->size ? *first : dtypes[DT_F32]; break;
    case 'a':
        d->dt = dtypes[first->t.code == kDLFloat && first->t.bits == 64 ? DT_F64 : DT_F32];
        break;
    default: d->dt = dtypes[r % N_SUPPORTED]; break;
    }
}

static void pick_device(fz_src *s, fz_desc *d)
{
    unsigned b = u8(s);
    DLDevice dev = {kDLCPU, 0};
    if (b >= 224 && b < 232) {
        dev.device_id = (int32_t)u8(s);
    } else if (b >= 232 && b < 248) {
        dev.device_type = kDLCUDA;
        dev.device_id = b < 244 ? 0 : (int32_t)u8(s);
        d->invalid = "a CUDA tensor on a CPU context";
    } else if (b >= 248) {
        static const int others[] = {kDLCUDAHost, kDLOpenCL, kDLVulkan, kDLMetal, kDLROCM, 13, 0, 999};
        dev.device_type = (DLDeviceType)others[u8(s) % COUNT(others)];
        d->invalid = "a tensor on a device that is neither CPU nor CUDA";
    }
    d->t.device = dev;
}

/* Sizes from the slot's pattern, then (rarely) a broken rank or size. */
static void pick_shape(fz_case *c, fz_src *s, int slot, fz_desc *d)
{
    char alt[16];
    alternative(c->e->slots[slot].shape, u8(s), alt, sizeof alt);
    int n = 0;
    for (const char *p = alt; *p && n < FZ_MAX_DIMS; ++p) {
        if (*p == 'N')
            d->shape[n++] = c->N;
        else if (*p == 'C')
            d->shape[n++] = c->C;
        else if (*p == 'D')
            d->shape[n++] = c->k > 0 ? c->d[0] : 2;
        else if (*p >= '0' && *p <= '9')
            d->shape[n++] = *p - '0';
        else if (*p == 'd')
            for (int k = 0; k < c->k && n < FZ_MAX_DIMS; ++k)
                d->shape[n++] = c->d[k];
    }
    unsigned b = u8(s);
    int null_shape = 0;
    if (b >= 232) {
        switch (b % 6) {
        case 0: if (n > 0) --n; break;                                          /* drop a dim */
        case 1: if (n < FZ_MAX_DIMS) d->shape[n++] = 1 + u8(s) % 4; break;       /* add a dim  */
        case 2: if (n > 0) d->shape[u8(s) % n] = pick_size(s); break;            /* resize one */
        case 3: /* a random rank 0..10 with random sizes */
            n = (int)(u8(s) % (FZ_MAX_DIMS + 1));
            for (int k = 0; k < n; ++k)
                d->shape[k] = pick_size(s);
            break;
        case 4: d->t.ndim = -1 - (int)(u8(s) % 3); d->invalid = "a negative rank"; break;
        default: null_shape = n > 0; break;
        }
    }
    if (d->t.ndim >= 0)
        d->t.ndim = n;
    d->t.shape = null_shape ? NULL : d->shape;
    if (null_shape)
        d->invalid = "a NULL shape with rank > 0";
}

/* Element count; the contract forbids negative sizes and counts that overflow int64.  A
 * count the library could accept but that is above the cap is brought down (sizes that
 * look huge become small) so that every accepted call finishes quickly. */
static void count_elements(fz_desc *d)
{
    int n = d->t.ndim > 0 ? d->t.ndim : 0;
    int64_t numel = 1;
    int zero = 0, overflow = 0;
    for (int k = 0; k < n; ++k) {
        if (d->shape[k] < 0) {
            if (!d->invalid)
                d->invalid = "a negative size";
            return;
        }
        zero |= d->shape[k] == 0;
        if (!overflow && __builtin_mul_overflow(numel, d->shape[k], &numel))
            overflow = 1;
    }
    if (overflow && !zero) {
        if (!d->invalid)
            d->invalid = "an element count that overflows int64";
        return;
    }
    if (zero) {
        d->numel = 0;
        return;
    }
    if (numel > FZ_NUMEL_CAP) {
        for (int k = 0; k < n; ++k)
            if (is_huge(d->shape[k]))
                d->shape[k] = 1 + d->shape[k] % 3;
        numel = 1;
        for (int k = n - 1; k >= 0; --k) {
            while (numel * d->shape[k] > FZ_NUMEL_CAP)
                d->shape[k] = d->shape[k] / 2 > 0 ? d->shape[k] / 2 : 1;
            numel *= d->shape[k];
        }
    }
    d->numel = numel;
}

/* Lowest and highest element offsets; 0 when they overflow int64. */
static int extent(const fz_desc *d, const int64_t *st, int64_t *mn, int64_t *mx)
{
    *mn = *mx = 0;
    for (int k = 0; k < d->t.ndim; ++k) {
        if (d->shape[k] <= 1)
            continue;
        int64_t e;
        if (__builtin_mul_overflow(st[k], d->shape[k] - 1, &e) ||
            __builtin_add_overflow(e < 0 ? *mn : *mx, e, e < 0 ? mn : mx))
            return 0;
    }
    return !__builtin_sub_overflow(*mx, *mn, &(int64_t){0});
}

static void pick_strides(fz_src *s, fz_desc *d)
{
    int n = d->t.ndim;
    int64_t *st = d->strides;
    unsigned mode = u8(s);
    mode = mode < 128 ? 0 : 1 + mode % 8;
    int perm[FZ_MAX_DIMS];
    for (int k = 0; k < n; ++k)
        perm[k] = k;
    if (mode == 2) /* a permuted layout (channels-last and friends) */
        for (int k = n - 1; k > 0; --k) {
            int j = (int)(u8(s) % (unsigned)(k + 1)), t = perm[k];
            perm[k] = perm[j];
            perm[j] = t;
        }
    uint64_t acc = 1; /* unsigned: huge sizes of refused descriptors may wrap */
    for (int k = n - 1; k >= 0; --k) {
        st[perm[k]] = (int64_t)acc;
        acc *= d->shape[perm[k]] > 0 ? (uint64_t)d->shape[perm[k]] : 1u;
        if (mode == 3) /* padded rows */
            acc += u8(s) % 4;
    }
    switch (mode) {
    case 4: /* negative strides */
        for (int k = 0; k < n; ++k)
            if (u8(s) & 1)
                st[k] = (int64_t)(0 - (uint64_t)st[k]);
        break;
    case 5: /* zero strides (broadcast) */
        for (int k = 0; k < n; ++k)
            if (u8(s) & 1)
                st[k] = 0;
        break;
    case 6: /* overlapping */
        for (int k = 0; k < n; ++k)
            st[k] = (int64_t)(u8(s) % 3);
        break;
    case 7: /* anything small */
        for (int k = 0; k < n; ++k)
            st[k] = (int64_t)(u8(s) % 17) - 8;
        break;
    case 8: /* one huge stride, or a huge stride on every dim (a sum over the limit) */
        if (n > 0) {
            const unsigned every = u8(s) & 1, one = u8(s) % (unsigned)n;
            for (int k = 0; k < n; ++k)
                if (every || (unsigned)k == one)
                    st[k] = huge_strides[u8(s) % COUNT(huge_strides)];
        }
        break;
    default: break;
    }
    d->t.strides = mode == 0 ? NULL : st;
    d->min_off = d->max_off = 0;
    /* an empty tensor's NULL strides are not these (the library's become 0 outside a zero
     * size), and it touches no memory: only its explicit strides are bounded */
    if (d->invalid || (d->numel == 0 && !d->t.strides))
        return;
    int64_t mn, mx, bytes;
    if (!extent(d, st, &mn, &mx) || __builtin_mul_overflow(mx - mn, (int64_t)d->dt.size, &bytes) ||
        bytes > FZ_SPAN_LIMIT) {
        d->invalid = "elements more than 2^62 bytes apart";
        return;
    }
    if (d->numel == 0)
        return;
    d->min_off = mn;
    d->max_off = mx;
    if ((uint64_t)(mx - mn) >= FZ_BUF_CAP / d->dt.size) {
        /* legal but more memory than we back: use the contiguous layout instead */
        int64_t dense = 1;
        for (int k = n - 1; k >= 0; --k) {
            st[k] = dense;
            dense *= d->shape[k];
        }
        d->t.strides = st;
        extent(d, st, &d->min_off, &d->max_off);
    }
}

static void make_descriptor(fz_case *c, fz_src *s, int slot)
{
    fz_desc *d = &c->s[slot];
    const fz_slot *sl = &c->e->slots[slot];
    d->flags = sl->flags;
    d->alias = -1;
    unsigned b = u8(s);
    if ((sl->flags & FZ_OPTIONAL) ? b >= 192 : b >= 250) {
        d->present = 0;
        if (!(sl->flags & FZ_OPTIONAL))
            c->must_fail = "a required tensor is NULL";
        return;
    }
    d->present = 1;
    pick_dtype(c, s, slot, d);
    d->t.dtype = d->dt.t;
    if (!d->dt.size)
        d->invalid = "an unsupported dtype";
    pick_device(s, d);
    pick_shape(c, s, slot, d);
    count_elements(d);
    pick_strides(s, d);
    b = u8(s);
    if (b >= 244) { /* NULL data */
        if (d->numel > 0 && !d->invalid)
            d->invalid = "NULL data with elements";
        d->null_data = 1;
    }
    b = u8(s);
    if (b >= 224 && d->dt.size) /* room in front of the data: byte_offset becomes > 0 */
        d->pad = d->dt.size * (1 + u8(s) % 4);
    if (b >= 252 && d->dt.size > 1 && !d->null_data) { /* data pointer or byte_offset misaligned */
        const size_t skew = 1 + u8(s) % (d->dt.size - 1);
        if (u8(s) & 1)
            d->data_skew = skew;
        else
            d->offset_skew = skew;
        if (!d->invalid)
            d->invalid = "a data pointer or byte_offset not a multiple of the element size";
    }
}

/* The second slot shares the first's buffer: the same view (an in-place request) or a
 * different view of the same bytes. */
static void make_alias(fz_case *c, fz_src *s)
{
    unsigned b = u8(s);
    if (b < 224)
        return;
    int n = c->e->nslots, i = (int)(u8(s) % (unsigned)n), j = (int)(u8(s) % (unsigned)n);
    fz_desc *a = &c->s[i], *t = &c->s[j];
    if (i == j || !a->present || !t->present || a->invalid || t->invalid || a->null_data ||
        t->null_data)
        return;
    if (b >= 240) { /* exactly the same view */
        unsigned flags = a->flags;
        *a = *t;
        a->flags = flags;
        a->t.shape = a->shape;
        a->t.strides = t->t.strides ? a->strides : NULL;
    }
    a->alias = j;
}

/* ---- values ------------------------------------------------------------------------------ */

static void store(unsigned char *p, const fz_dtype *dt, double v, int64_t iv)
{
    switch (dt->t.code) {
    case kDLFloat:
        if (dt->t.bits == 32) {
            float f = (float)v;
            memcpy(p, &f, 4);
        } else if (dt->t.bits == 64) {
            memcpy(p, &v, 8);
        } else { /* f16: round through float, truncating the mantissa is fine here */
            float f = (float)v;
            uint32_t u;
            memcpy(&u, &f, 4);
            uint32_t sign = (u >> 16) & 0x8000u, e = (u >> 23) & 0xFFu, m = u & 0x7FFFFFu;
            uint16_t h;
            if (e == 0xFF)
                h = (uint16_t)(sign | 0x7C00u | (m ? 0x200u : 0u));
            else if (e > 142)
                h = (uint16_t)(sign | 0x7C00u);
            else if (e < 113)
                h = (uint16_t)sign;
            else
                h = (uint16_t)(sign | ((e - 112) << 10) | (m >> 13));
            memcpy(p, &h, 2);
        }
        break;
    case kDLBfloat: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        uint16_t h = (uint16_t)(u >> 16);
        memcpy(p, &h, 2);
        break;
    }
    case kDLInt:
        if (dt->t.bits == 64) {
            memcpy(p, &iv, 8);
        } else {
            int32_t i32 = (int32_t)iv;
            memcpy(p, &i32, 4);
        }
        break;
    default: *p = (unsigned char)iv; break;
    }
}

/* Calls fn(case, desc, element pointer) for every element of a valid descriptor. */
static void each_element(fz_desc *d, unsigned char *base, void (*fn)(fz_case *, fz_desc *, unsigned char *),
                         fz_case *c)
{
    if (d->numel == 0)
        return;
    int n = d->t.ndim;
    int64_t idx[FZ_MAX_DIMS] = {0};
    const int64_t *st = d->t.strides ? d->t.strides : NULL;
    int64_t cst[FZ_MAX_DIMS], acc = 1;
    for (int k = n - 1; k >= 0; --k) {
        cst[k] = st ? st[k] : acc;
        acc *= d->shape[k];
    }
    unsigned char *origin = base + d->pad + (size_t)(-d->min_off) * d->dt.size;
    for (int64_t e = 0; e < d->numel; ++e) {
        int64_t off = 0;
        for (int k = 0; k < n; ++k)
            off += idx[k] * cst[k];
        fn(c, d, origin + off * (int64_t)d->dt.size);
        for (int k = n - 1; k >= 0; --k) {
            if (++idx[k] < d->shape[k])
                break;
            idx[k] = 0;
        }
    }
}

static unsigned spice; /* 0..255: how often values are out of range or special */

static void fill_value(fz_case *c, fz_desc *d, unsigned char *p)
{
    uint64_t r = rng();
    int special = spice >= 128 && (r & 255) < (spice - 128) / 2;
    if (d->dt.cls == 'f') {
        static const double specials[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e30, -1e30,
                                          65504.0, 1e-40, 3e38, -1.0, 1.0};
        double v = special ? specials[(r >> 8) % COUNT(specials)]
                           : ((double)((r >> 8) & 0xFFFF) / 65536.0 - 0.5) * 8.0;
        store(p, &d->dt, v, 0);
    } else {
        static const int64_t bad[] = {-1, -100, INT32_MAX, INT64_MIN, INT64_MAX, 255, -101};
        int64_t v;
        if (special)
            v = (r >> 8) % 2 ? (int64_t)((uint64_t)c->C + (r >> 9) % 3) : bad[(r >> 10) % COUNT(bad)];
        else if ((r >> 8) % 8 == 0)
            v = -100; /* the default ignore_index */
        else
            v = c->C > 0 && c->C < INT32_MAX ? (int64_t)((r >> 12) % (uint64_t)c->C) : 0;
        store(p, &d->dt, (double)v, v);
    }
}

static void mark_element(fz_case *c, fz_desc *d, unsigned char *p)
{
    fz_buf *b = &c->b[d->buf];
    memset(b->mark + (p - b->p), 1, d->dt.size);
}

/* ---- buffers ------------------------------------------------------------------------------ */

static size_t span_bytes(const fz_desc *d)
{
    return d->pad + (d->numel > 0 ? (size_t)(d->max_off - d->min_off + 1) * d->dt.size : 0);
}

static void alloc_buffers(fz_case *c)
{
    int n = c->e->nslots;
    c->nbuf = 0;
    /* own buffers first, then the one alias joins the buffer of its slot */
    for (int pass = 0; pass < 2; ++pass)
        for (int i = 0; i < n; ++i) {
            fz_desc *d = &c->s[i];
            if (!d->present || d->null_data || (d->alias >= 0) != pass)
                continue;
            size_t size = d->invalid ? FZ_GUARD_BYTES : span_bytes(d);
            if (pass == 0) {
                d->buf = c->nbuf++;
                c->b[d->buf].size = 0;
            } else {
                d->buf = c->s[d->alias].buf;
            }
            if (size > c->b[d->buf].size)
                c->b[d->buf].size = size;
        }
    for (int i = 0; i < c->nbuf; ++i) {
        fz_buf *b = &c->b[i];
        b->p = malloc(b->size ? b->size : 1);
        b->before = malloc(b->size ? b->size : 1);
        b->mark = calloc(b->size ? b->size : 1, 1);
        b->has_output = 0;
        if (!b->p || !b->before || !b->mark)
            abort();
        for (size_t k = 0; k < b->size; ++k)
            b->p[k] = (unsigned char)(rng() >> 56); /* poison */
    }
    for (int i = 0; i < n; ++i) {
        fz_desc *d = &c->s[i];
        if (!d->present)
            continue;
        if (d->null_data) {
            d->buf = -1;
            d->t.data = NULL;
            d->t.byte_offset = d->invalid ? 0 : d->pad;
            continue;
        }
        d->t.data = c->b[d->buf].p + d->data_skew;
        d->t.byte_offset = d->offset_skew + (d->invalid ? 0 : d->pad + (uint64_t)(-d->min_off) * d->dt.size);
        if (d->flags & FZ_OUT)
            c->b[d->buf].has_output = 1;
    }
    /* values of the inputs, unless an output shares the buffer (then it stays poison) */
    for (int i = 0; i < n; ++i) {
        fz_desc *d = &c->s[i];
        if (d->present && !d->invalid && d->buf >= 0 && !c->b[d->buf].has_output)
            each_element(d, c->b[d->buf].p, fill_value, c);
    }
}

static void free_buffers(fz_case *c)
{
    for (int i = 0; i < c->nbuf; ++i) {
        free(c->b[i].p);
        free(c->b[i].before);
        free(c->b[i].mark);
    }
}

/* ---- options ------------------------------------------------------------------------------ */

static void pick_opts(fz_case *c, fz_src *s)
{
    const fz_entry *e = c->e;
    memset(c->opts, 0, sizeof c->opts);
    if (!e->opts_size)
        return;
    if (e->opts_size > sizeof c->opts)
        abort();
    if (e->opts_init)
        e->opts_init(c->opts);
    if (e->opts_nullable && u8(s) >= 224) {
        c->opts_null = 1;
        return;
    }
    static const double f64s[] = {0.0, -0.0, 1.0, 0.5, 0.1, -0.1, 1.0000000000000002, 2.0,
                                  NAN, INFINITY, -INFINITY, 1.7976931348623157e308, 4.9e-324,
                                  -1.0, 1e-300, 0.9999999999999999};
    static const int64_t i64s[] = {0, 1, -1, -100, 2, 3, INT64_MIN, INT64_MAX, INT32_MAX,
                                   (int64_t)INT32_MIN - 1, 255};
    for (int f = 0; f < e->nfields; ++f) {
        const fz_field *fl = &e->fields[f];
        unsigned char *p = c->opts + fl->offset;
        unsigned b = u8(s);
        if (b < 128)
            continue; /* keep the default */
        unsigned r = u8(s);
        switch (fl->kind) {
        case FZ_ENUM:
        case FZ_INT: {
            static const int odd[] = {-1, INT32_MIN, INT32_MAX, 1000};
            int v = b < 224 ? (int)(fl->lo + (int64_t)(r % (unsigned)(fl->hi - fl->lo + 1)))
                  : b < 240 ? (int)fl->hi + 1
                            : odd[r % 4];
            memcpy(p, &v, sizeof v);
            break;
        }
        case FZ_I64: {
            int64_t v = b < 240 ? i64s[r % COUNT(i64s)] : (int64_t)u64(s);
            if (b < 160)
                v = (int64_t)((uint64_t)c->C - 1 + r % 3); /* around the class count */
            memcpy(p, &v, sizeof v);
            break;
        }
        case FZ_U64: {
            uint64_t v = b < 192 ? (uint64_t)r : b < 240 ? UINT64_MAX - r : u64(s);
            memcpy(p, &v, sizeof v);
            break;
        }
        case FZ_F64: {
            double v = b < 240 ? f64s[r % COUNT(f64s)] : (double)(int8_t)r / 16.0;
            memcpy(p, &v, sizeof v);
            break;
        }
        }
    }
}

/* ---- the checks ------------------------------------------------------------------------- */

static void describe(const fz_case *c, ploss_status st)
{
    char buf[64];
    fprintf(stderr, "  %s(ctx=%s, opts=%s) -> %s: %s\n", c->e->name, c->ctx_null ? "NULL" : "cpu",
            !c->e->opts_size ? "-" : c->opts_null ? "NULL" : "set", ploss_status_string(st), ploss_last_error());
    for (int i = 0; i < c->e->nslots; ++i) {
        const fz_desc *d = &c->s[i];
        fprintf(stderr, "    %-10s %s", c->e->slots[i].name, (d->flags & FZ_OUT) ? "out" : "in ");
        if (!d->present) {
            fprintf(stderr, " NULL\n");
            continue;
        }
        fprintf(stderr, " %s dev(%d,%d) ndim %d [", dtype_str(d->t.dtype, buf, sizeof buf),
                (int)d->t.device.device_type, d->t.device.device_id, d->t.ndim);
        for (int k = 0; d->t.shape && k < d->t.ndim && k < FZ_MAX_DIMS; ++k)
            fprintf(stderr, k ? ", %lld" : "%lld", (long long)d->shape[k]);
        fprintf(stderr, "] strides ");
        if (!d->t.strides)
            fprintf(stderr, "NULL");
        for (int k = 0; d->t.strides && k < d->t.ndim && k < FZ_MAX_DIMS; ++k)
            fprintf(stderr, k ? ",%lld" : "(%lld", (long long)d->strides[k]);
        fprintf(stderr, "%s data %s%zu+%llu buf %d%s%s\n", d->t.strides && d->t.ndim > 0 ? ")" : "",
                d->t.data ? "buf+" : "NULL", d->data_skew, (unsigned long long)d->t.byte_offset, d->buf,
                d->invalid ? " INVALID: " : "", d->invalid ? d->invalid : "");
    }
}

static void fail(const fz_case *c, ploss_status st, const char *what)
{
    fprintf(stderr, "\nploss fuzz: %s\n", what);
    describe(c, st);
    abort();
}

static ploss_ctx_t *cpu_ctx(void)
{
    static ploss_ctx_t *ctx;
    if (!ctx) {
        DLDevice cpu = {kDLCPU, 0};
        if (ploss_ctx_create(cpu, &ctx) != PLOSS_OK) {
            fprintf(stderr, "ploss fuzz: cannot create a CPU context: %s\n", ploss_last_error());
            abort();
        }
    }
    return ctx;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv("FZ_VERBOSE") ? atoi(getenv("FZ_VERBOSE")) : 0;

    fz_src s = {data, size};
    fz_case c;
    memset(&c, 0, sizeof c);
    c.e = &fz_entries[u8(&s) % (unsigned)fz_nentries];
    rng_state = u64(&s);
    spice = u8(&s);

    /* shared sizes, brought under the element cap */
    c.N = pick_size(&s);
    c.C = pick_size(&s);
    c.k = (int)(u8(&s) % 4);
    for (int k = 0; k < c.k; ++k)
        c.d[k] = pick_size(&s);
    int64_t *dims[5] = {&c.d[2], &c.d[1], &c.d[0], &c.C, &c.N};
    for (int i = 0; i < 5; ++i) {
        int64_t prod = 1;
        for (int j = 0; j < 5; ++j)
            if (!is_huge(*dims[j]))
                prod *= *dims[j] ? *dims[j] : 1;
        if (prod > FZ_NUMEL_CAP && !is_huge(*dims[i]) && *dims[i] > 1)
            *dims[i] = 1 + *dims[i] % 3;
    }

    for (int i = 0; i < c.e->nslots; ++i)
        make_descriptor(&c, &s, i);
    make_alias(&c, &s);
    pick_opts(&c, &s);
    c.ctx_null = u8(&s) >= 252;
    if (c.ctx_null)
        c.must_fail = "the context is NULL";
    for (int i = 0; i < c.e->nslots; ++i)
        if (c.s[i].present && c.s[i].invalid && !(c.s[i].flags & FZ_MAY_IGNORE))
            c.must_fail = c.s[i].invalid;
    alloc_buffers(&c);

    DLTensor *t[FZ_MAX_SLOTS] = {0};
    for (int i = 0; i < c.e->nslots; ++i)
        t[i] = c.s[i].present ? &c.s[i].t : NULL;
    for (int i = 0; i < c.nbuf; ++i)
        memcpy(c.b[i].before, c.b[i].p, c.b[i].size);

    ploss_ctx_t *ctx = c.ctx_null ? NULL : cpu_ctx();
    if (verbose > 1) {
        fprintf(stderr, "calling:\n");
        describe(&c, PLOSS_OK);
    }
    ploss_status st = c.e->call(ctx, t, c.opts_null || !c.e->opts_size ? NULL : c.opts);

    if (verbose)
        describe(&c, st);
    if ((int)st < 0 || st >= PLOSS_STATUS_COUNT)
        fail(&c, st, "status outside the ploss_status enum");
    if (st != PLOSS_OK) {
        const char *msg = ploss_last_error();
        if (!msg || !*msg)
            fail(&c, st, "an error without a message (ploss_last_error() is empty)");
        if (!strcmp(ploss_status_string(st), "PLOSS_UNKNOWN_STATUS"))
            fail(&c, st, "ploss_status_string() does not know the status");
        for (int i = 0; i < c.nbuf; ++i)
            if (memcmp(c.b[i].before, c.b[i].p, c.b[i].size))
                fail(&c, st, "a refused call changed a buffer (outputs must stay untouched)");
    } else {
        if (c.must_fail)
            fail(&c, st, c.must_fail);
        for (int i = 0; i < c.e->nslots; ++i) {
            fz_desc *d = &c.s[i];
            if (d->present && !d->invalid && (d->flags & FZ_OUT) && d->buf >= 0)
                each_element(d, c.b[d->buf].p, mark_element, &c);
        }
        for (int i = 0; i < c.nbuf; ++i)
            for (size_t k = 0; k < c.b[i].size; ++k)
                if (!c.b[i].mark[k] && c.b[i].before[k] != c.b[i].p[k]) {
                    char what[128];
                    snprintf(what, sizeof what,
                             "byte %zu of buffer %d changed but belongs to no output element", k, i);
                    fail(&c, st, what);
                }
    }
    free_buffers(&c);
    return 0;
}
