/*
 * scalar.h — element loads and stores for the CPU backend: every dtype is read into a
 * double (or int64 for integer copies) and written back with round-to-nearest-even (f16
 * and bf16 through f32, as PyTorch's and the CUDA backend's conversions), so
 * kernels are written once and switch on the dtype only here.  Internal.
 */
#ifndef PLOSS_CPU_SCALAR_H
#define PLOSS_CPU_SCALAR_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

static inline float ploss_bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t ploss_f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float ploss_half_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0x1F)
        return ploss_bits_to_f32(sign | 0x7F800000u | (man << 13));
    if (exp == 0) {
        float v = (float)man * 5.9604644775390625e-8f; /* man · 2^-24 */
        return sign ? -v : v;
    }
    return ploss_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t ploss_f32_to_half(float f)
{
    uint32_t u = ploss_f32_to_bits(f), sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7FFFFFFFu;
    if (a >= 0x7F800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7C00u | (a > 0x7F800000u ? 0x200u : 0u));
    if (a >= 0x477FF000u) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7C00u);
    if (a < 0x38800000u) { /* subnormal half: round a·2^24 to an integer, ties to even */
        float v = ploss_bits_to_f32(a) * 16777216.0f;
        return (uint16_t)(sign | (uint32_t)nearbyintf(v));
    }
    uint32_t r = a + 0xFFFu + ((a >> 13) & 1u); /* round to nearest even at bit 13 */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float ploss_bf16_to_f32(uint16_t b) { return ploss_bits_to_f32((uint32_t)b << 16); }

static inline uint16_t ploss_f32_to_bf16(float f)
{
    uint32_t u = ploss_f32_to_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* quiet nan */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Element `i` (in elements, may be negative) of `base` as a double. */
static inline double ploss_load(const void *base, ploss_dtype dt, int64_t i)
{
    switch (dt) {
    case PLOSS_F32: return ((const float *)base)[i];
    case PLOSS_F64: return ((const double *)base)[i];
    case PLOSS_F16: return ploss_half_to_f32(((const uint16_t *)base)[i]);
    case PLOSS_BF16: return ploss_bf16_to_f32(((const uint16_t *)base)[i]);
    case PLOSS_I64: return (double)((const int64_t *)base)[i];
    case PLOSS_I32: return ((const int32_t *)base)[i];
    case PLOSS_U8: return ((const uint8_t *)base)[i];
    default: return NAN;
    }
}

/* Float→integer stores truncate toward zero; NaN and out-of-range values give 0 / the
 * nearest bound instead of undefined behaviour. */
static inline int64_t ploss_double_to_i64(double v, double lo, double hi)
{
    if (v != v)
        return 0;
    if (v <= lo)
        return (int64_t)lo;
    if (v >= hi)
        return (int64_t)hi;
    return (int64_t)v;
}

static inline void ploss_store(void *base, ploss_dtype dt, int64_t i, double v)
{
    switch (dt) {
    case PLOSS_F32: ((float *)base)[i] = (float)v; break;
    case PLOSS_F64: ((double *)base)[i] = v; break;
    case PLOSS_F16: ((uint16_t *)base)[i] = ploss_f32_to_half((float)v); break;
    case PLOSS_BF16: ((uint16_t *)base)[i] = ploss_f32_to_bf16((float)v); break;
    case PLOSS_I64: ((int64_t *)base)[i] = ploss_double_to_i64(v, -9223372036854775808.0, 9223372036854774784.0); break;
    case PLOSS_I32: ((int32_t *)base)[i] = (int32_t)ploss_double_to_i64(v, -2147483648.0, 2147483647.0); break;
    case PLOSS_U8: ((uint8_t *)base)[i] = (uint8_t)ploss_double_to_i64(v, 0.0, 255.0); break;
    default: break;
    }
}

/* Integer element as int64 (exact), for label reads and integer copies. */
static inline int64_t ploss_load_int(const void *base, ploss_dtype dt, int64_t i)
{
    switch (dt) {
    case PLOSS_I64: return ((const int64_t *)base)[i];
    case PLOSS_I32: return ((const int32_t *)base)[i];
    case PLOSS_U8: return ((const uint8_t *)base)[i];
    default: return ploss_double_to_i64(ploss_load(base, dt, i), -9223372036854775808.0, 9223372036854774784.0);
    }
}

static inline void ploss_store_int(void *base, ploss_dtype dt, int64_t i, int64_t v)
{
    switch (dt) {
    case PLOSS_I64: ((int64_t *)base)[i] = v; break;
    case PLOSS_I32: ((int32_t *)base)[i] = (int32_t)v; break;
    case PLOSS_U8: ((uint8_t *)base)[i] = (uint8_t)v; break;
    default: ploss_store(base, dt, i, (double)v); break;
    }
}

/* Offset (elements) of the k-th element in row-major order of a view. */
static inline int64_t ploss_view_offset(const ploss_view *v, int64_t k)
{
    int64_t off = 0;
    for (int d = v->ndim - 1; d >= 0; --d) {
        int64_t size = v->shape[d];
        off += (k % size) * v->strides[d];
        k /= size;
    }
    return off;
}

#endif
