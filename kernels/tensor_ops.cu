/*
 * tensor_ops.cu — CUDA copy, fill, axpby and Philox random numbers over strided views
 * (core/tensor_ops.h), with exactly the semantics of core/cpu/tensor_ops.c:
 *  - copy: integer → integer is exact (through int64, C conversions on the store);
 *    anything else goes through double, and double → f16/bf16 through float (RNE);
 *    float → integer truncates toward zero, saturates, NaN → 0;
 *  - rand: element k (row-major) gets Philox(offset + k, seed) turned into a value by the
 *    same expression as rand_value() in the CPU file (explicit fma, same Box–Muller), so
 *    one seed gives the same numbers on both backends (f64 normals can differ in the
 *    last bit where the CUDA and C library log/cos round differently).
 * Views (up to PLOSS_MAX_DIMS dims) are passed to the kernels by value.
 */
#include <type_traits>

#include "philox.h"
#include "tensor_ops.h"
#include "common.cuh"

namespace ploss_cuda {
namespace tensor_ops_kernels {

namespace {

constexpr int kThreads = 256;

template <class T> constexpr bool is_int_type()
{
    return std::is_same<T, int64_t>::value || std::is_same<T, int32_t>::value || std::is_same<T, uint8_t>::value;
}

/* Element → double (ploss_load). */
template <class S> __device__ __forceinline__ double to_double(S v)
{
    if constexpr (is_int_type<S>())
        return (double)v;
    else
        return (double)to_acc(v);
}

/* double → element (ploss_store). */
template <class D> __device__ __forceinline__ D from_double(double v)
{
    if constexpr (std::is_same<D, int64_t>::value)
        return (int64_t)double_to_i64(v, -9223372036854775808.0, 9223372036854774784.0);
    else if constexpr (std::is_same<D, int32_t>::value)
        return (int32_t)double_to_i64(v, -2147483648.0, 2147483647.0);
    else if constexpr (std::is_same<D, uint8_t>::value)
        return (uint8_t)double_to_i64(v, 0.0, 255.0);
    else
        return convert<D>(v);
}

/* int64 → element (ploss_store_int). */
template <class D> __device__ __forceinline__ D from_int(int64_t v)
{
    if constexpr (is_int_type<D>())
        return (D)v;
    else
        return from_double<D>((double)v);
}

__device__ __forceinline__ int64_t offset_of(const ploss_view &v, int contiguous, int64_t k)
{
    return contiguous ? k : view_offset(v, k);
}

template <class D, class S>
__global__ void copy_kernel(ploss_view dst, ploss_view src, int dst_dense, int src_dense)
{
    D *d = (D *)dst.data;
    const S *s = (const S *)src.data;
    for (int64_t k = thread_index(); k < dst.numel; k += grid_stride()) {
        const S v = s[offset_of(src, src_dense, k)];
        D out;
        if constexpr (is_int_type<D>() && is_int_type<S>())
            out = (D)(int64_t)v;
        else
            out = from_double<D>(to_double(v));
        d[offset_of(dst, dst_dense, k)] = out;
    }
}

/* rand_value() of core/cpu/tensor_ops.c, term for term. */
__device__ __forceinline__ double rand_value(const ploss_rand_spec &s, int64_t k, int64_t *ival)
{
    ploss_philox4 r = ploss_philox(s.offset + (uint64_t)k, s.seed);
    switch (s.kind) {
    case PLOSS_RAND_UNIFORM:
        return fmin(fmax(fma(s.b - s.a, ploss_philox_unit(r.v[0], r.v[1]), s.a), s.lo), s.hi);
    case PLOSS_RAND_NORMAL: {
        double u1 = 1.0 - ploss_philox_unit(r.v[0], r.v[1]); /* (0, 1] */
        double u2 = ploss_philox_unit(r.v[2], r.v[3]);
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        return fma(s.b, z, s.a);
    }
    default: {
        *ival = (int64_t)((uint64_t)s.low + ploss_philox_below(r, s.span));
        return (double)*ival;
    }
    }
}

template <class D> __global__ void rand_kernel(ploss_view dst, int dense, ploss_rand_spec spec)
{
    D *d = (D *)dst.data;
    for (int64_t k = thread_index(); k < dst.numel; k += grid_stride()) {
        int64_t iv = 0;
        const double v = rand_value(spec, k, &iv);
        d[offset_of(dst, dense, k)] = spec.kind == PLOSS_RAND_INT ? from_int<D>(iv) : from_double<D>(v);
    }
}

} // namespace

extern "C" ploss_status ploss_cuda_copy(ploss_ctx_t *ctx, const ploss_view *dst, const ploss_view *src)
{
    if (dst->numel == 0)
        return PLOSS_OK;
    const int dd = ploss_view_is_contiguous(dst), sd = ploss_view_is_contiguous(src);
    const unsigned grid = grid_blocks(dst->numel, kThreads);
    cudaStream_t stream = stream_of(ctx);
    return dispatch_any(dst->dtype, "dst", [&](auto dtag) {
        using D = typename decltype(dtag)::type;
        return dispatch_any(src->dtype, "src", [&](auto stag) {
            using S = typename decltype(stag)::type;
            copy_kernel<D, S><<<grid, kThreads, 0, stream>>>(*dst, *src, dd, sd);
            return check_launch("copy");
        });
    });
}

namespace {
/* Fill: the value is converted once per thread with from_double (ploss_store's rules). */
template <class D> __global__ void fill_convert_kernel(ploss_view dst, int dense, double value)
{
    D *d = (D *)dst.data;
    const D v = from_double<D>(value);
    for (int64_t k = thread_index(); k < dst.numel; k += grid_stride())
        d[offset_of(dst, dense, k)] = v;
}
} // namespace

extern "C" ploss_status ploss_cuda_fill(ploss_ctx_t *ctx, const ploss_view *dst, double value)
{
    if (dst->numel == 0)
        return PLOSS_OK;
    const int dense = ploss_view_is_contiguous(dst);
    const unsigned grid = grid_blocks(dst->numel, kThreads);
    cudaStream_t stream = stream_of(ctx);
    return dispatch_any(dst->dtype, "dst", [&](auto tag) {
        using D = typename decltype(tag)::type;
        fill_convert_kernel<D><<<grid, kThreads, 0, stream>>>(*dst, dense, value);
        return check_launch("fill");
    });
}

namespace {
/* axpby: fma(alpha, s, beta·d) in double, as ploss_cpu_axpby (the product beta·d rounded
 * on its own: __dmul_rn keeps it out of any contraction).  src's dtype is read at run time
 * (one kernel per dst dtype). */
template <class D>
__global__ void axpby_kernel(ploss_view dst, ploss_view src, int dst_dense, int src_dense, double alpha,
                             double beta)
{
    D *d = (D *)dst.data;
    for (int64_t k = thread_index(); k < dst.numel; k += grid_stride()) {
        const int64_t od = offset_of(dst, dst_dense, k);
        const double y = beta != 0 ? __dmul_rn(beta, to_double(d[od])) : -0.0; /* a −0 product stays −0 */
        const double x = load_dyn(src.data, src.dtype, offset_of(src, src_dense, k));
        d[od] = from_double<D>(fma(alpha, x, y));
    }
}
} // namespace

extern "C" ploss_status ploss_cuda_axpby(ploss_ctx_t *ctx, const ploss_view *dst, double alpha, const ploss_view *src,
                                         double beta)
{
    if (dst->numel == 0)
        return PLOSS_OK;
    const int dd = ploss_view_is_contiguous(dst), sd = ploss_view_is_contiguous(src);
    const unsigned grid = grid_blocks(dst->numel, kThreads);
    cudaStream_t stream = stream_of(ctx);
    return dispatch_float(dst->dtype, "dst", [&](auto tag) {
        using D = typename decltype(tag)::type;
        axpby_kernel<D><<<grid, kThreads, 0, stream>>>(*dst, *src, dd, sd, alpha, beta);
        return check_launch("axpby");
    });
}

extern "C" ploss_status ploss_cuda_rand(ploss_ctx_t *ctx, const ploss_view *dst, const ploss_rand_spec *spec)
{
    if (dst->numel == 0)
        return PLOSS_OK;
    const int dense = ploss_view_is_contiguous(dst);
    const unsigned grid = grid_blocks(dst->numel, kThreads);
    cudaStream_t stream = stream_of(ctx);
    return dispatch_any(dst->dtype, "dst", [&](auto tag) {
        using D = typename decltype(tag)::type;
        rand_kernel<D><<<grid, kThreads, 0, stream>>>(*dst, dense, *spec);
        return check_launch("rand");
    });
}

} // namespace tensor_ops_kernels
} // namespace ploss_cuda
