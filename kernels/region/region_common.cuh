/*
 * region_common.cuh — device helpers shared by the CUDA backends of the region kernel shape
 * (the .cu files of kernels/region/).  Internal; names in namespace ploss_cuda::region.
 *
 *  - m_exp / m_log / m_log1p / m_pow: float and double overloads of the libdevice functions;
 *  - pixel_at(p, q, sn, ss): the offset of pixel q = n·S + s (core/engines/region.h);
 *  - load_label<TI>(p, q, slot): the class of pixel q, -1 when ignored; a label outside
 *    [0, C) that is not ignore_index is reported in the error slot (when given) and treated
 *    as ignored;
 *  - Partial<A> / PartialOp: a sum and a count reduced together (CUB block reductions);
 *  - align_up(bytes): the workspace's 256-byte slices.
 */
#ifndef PLOSS_KERNELS_REGION_COMMON_CUH
#define PLOSS_KERNELS_REGION_COMMON_CUH

#include "common.cuh"
#include "region.h"

namespace ploss_cuda {
namespace region {

__device__ __forceinline__ float m_exp(float v) { return expf(v); }
__device__ __forceinline__ double m_exp(double v) { return exp(v); }
__device__ __forceinline__ float m_log(float v) { return logf(v); }
__device__ __forceinline__ double m_log(double v) { return log(v); }
__device__ __forceinline__ float m_log1p(float v) { return log1pf(v); }
__device__ __forceinline__ double m_log1p(double v) { return log1p(v); }
__device__ __forceinline__ float m_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double m_pow(double a, double b) { return pow(a, b); }

__device__ __forceinline__ int64_t pixel_at(const ploss_region_problem &p, int64_t q, int64_t sn, const int64_t *ss)
{
    return ploss_region_pixel_at(&p, q, sn, ss);
}

template <class TI>
__device__ __forceinline__ int64_t load_label(const ploss_region_problem &p, int64_t q, int64_t *error_slot)
{
    const int64_t y = (int64_t)((const TI *)p.t)[pixel_at(p, q, p.t_sn, p.t_ss)];
    if (y == p.ignore_index)
        return -1;
    if (y < 0 || y >= p.C) {
        report_invalid_label(error_slot, y);
        return -1;
    }
    return y;
}

template <class A> struct Partial {
    A sum;
    long long count;
};
struct PartialOp {
    template <class A> __device__ __forceinline__ Partial<A> operator()(const Partial<A> &a, const Partial<A> &b) const
    {
        return {a.sum + b.sum, a.count + b.count};
    }
};

inline size_t align_up(size_t v) { return (v + 255) & ~(size_t)255; }

} // namespace region
} // namespace ploss_cuda

#endif
