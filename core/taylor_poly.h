/*
 * taylor_poly.h — the Taylor polynomial of exp, f_n(v) = Σ_{k≤n} v^k/k!, by Horner's rule
 * (f ← 1; for k = n…1: f ← 1 + f·v/k), shared by the CPU support op (core/cpu/support/taylor.c;
 * double) and the CUDA kernels (kernels/support/taylor.cu, kernels/rows/sample_policies.cu;
 * any float type); the CPU loss kernels evaluate the same steps along a tile of samples
 * (TAYLOR_COLUMN, core/cpu/rows/softmax_rows.c).  f_n′ = f_{n−1}.  Internal.
 */
#ifndef PLOSS_TAYLOR_POLY_H
#define PLOSS_TAYLOR_POLY_H

#ifdef __CUDACC__
template <class A> __host__ __device__ __forceinline__ A ploss_taylor_poly(A v, int n)
{
    A f = 1;
#ifdef __CUDA_ARCH__
#pragma unroll 1 /* n is known at run time only: one copy of the step (of its division) */
#endif
    for (int k = n; k >= 1; --k)
        f = (A)1 + f * v / (A)k;
    return f;
}
#else
static inline double ploss_taylor_poly(double v, int n)
{
    double f = 1.0;
    for (int k = n; k >= 1; --k)
        f = 1.0 + f * v / (double)k;
    return f;
}
#endif

#endif
