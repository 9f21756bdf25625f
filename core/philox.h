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

#endif
