/*
 * philox.h — Philox-4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy
 * as 1, 2, 3", SC 2011), usable from C and CUDA so that one seed gives the same numbers on
 * the CPU and the GPU.  Internal.
 */
#ifndef PLOSS_PHILOX_H
#define PLOSS_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define PLOSS_PHILOX_FN __host__ __device__ __forceinline__
#else
#define PLOSS_PHILOX_FN static inline
#endif

typedef struct { uint32_t v[4]; } ploss_philox4;

PLOSS_PHILOX_FN ploss_philox4 ploss_philox(uint64_t counter, uint64_t seed)
{
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; ++r) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    ploss_philox4 out = {{c0, c1, c2, c3}};
    return out;
}

/* 53-bit uniform in [0, 1) from two words. */
PLOSS_PHILOX_FN double ploss_philox_unit(uint32_t hi, uint32_t lo)
{
    uint64_t bits = ((uint64_t)hi << 21) ^ ((uint64_t)lo >> 11);
    return (double)(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

/* The high 64 bits of a·b. */
PLOSS_PHILOX_FN uint64_t ploss_mulhi64(uint64_t a, uint64_t b)
{
#ifdef __CUDA_ARCH__
    return __umul64hi(a, b);
#else
    const uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
    const uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    const uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

/* An integer in [0, span), span >= 1, from one draw.  Up to 2^32: the first 64 bits modulo
 * span (relative bias below 2^-32).  Above: the top 64 bits of the 128-bit draw times span,
 * floor((a·2^64 + b)·span / 2^128) = hi(a·span) + the carry of lo(a·span) + hi(b·span)
 * (bias below span/2^128; 64 bits modulo span would favour the low values by up to
 * span/2^64, 5 % at 10^18). */
PLOSS_PHILOX_FN uint64_t ploss_philox_below(ploss_philox4 r, uint64_t span)
{
    const uint64_t a = ((uint64_t)r.v[0] << 32) | r.v[1];
    if (span <= 0x100000000ull)
        return a % span;
    const uint64_t b = ((uint64_t)r.v[2] << 32) | r.v[3];
    const uint64_t lo = a * span, sum = lo + ploss_mulhi64(b, span);
    return ploss_mulhi64(a, span) + (sum < lo);
}

#endif
