/*
 * support_ops.cuh — device helpers of the support-op kernels (gemm, activations, linear,
 * optim): the accumulation type of each storage type, conversions, and the grid of a
 * grid-stride loop.  Internal; included by .cu files only.
 */
#ifndef PLOSS_SUPPORT_OPS_CUH
#define PLOSS_SUPPORT_OPS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "elementwise_space.h"

namespace ploss_support {

/* f32 accumulation for f32/f16/bf16 storage, f64 for f64. */
template <class T> struct acc { using type = float; };
template <> struct acc<double> { using type = double; };
template <class T> using acc_t = typename acc<T>::type;

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ __forceinline__ T from_acc(acc_t<T> v);
template <> __device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <> __device__ __forceinline__ double from_acc<double>(double v) { return v; }
template <> __device__ __forceinline__ __half from_acc<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

/* Store an accumulator of any precision into T (round to nearest even). */
template <class T, class A> __device__ __forceinline__ T store_as(A v)
{
    return from_acc<T>((acc_t<T>)v);
}

constexpr int kThreads = 256;

/* Blocks of a grid-stride loop over n items (capped; the loop covers the rest). */
inline unsigned grid_for(int64_t n)
{
    int64_t b = (n + kThreads - 1) / kThreads;
    if (b < 1)
        b = 1;
    if (b > 65535LL * 8)
        b = 65535LL * 8;
    return (unsigned)b;
}

} // namespace ploss_support

#endif
