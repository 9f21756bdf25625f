/*
 * common.cuh — device helpers shared by every CUDA loss family (kernels/<family>.cu).
 * Internal; included by .cu files only, all names live in namespace ploss_cuda.
 *
 *  - acc_t<T>: the accumulation type (float for f32/f16/bf16, double for f64);
 *    to_acc(v) / from_acc<T>(a) / convert<T>(v): loads and stores with round to nearest
 *    even.  Narrowing from double to f16/bf16 goes through float first, exactly as the CPU
 *    backend (core/cpu/scalar.h) does, so both backends round identically.
 *  - vec16<T>::get/set: elements of a 16-byte vector held as uint4; launder(u).
 *  - exp2_ftz(v), exp_ftz(v): 2^v and e^v through ex2.approx.ftz (f32 fast paths).
 *  - cp_async16 / cp_async4(dst, src, bytes), cp_async_commit(), cp_async_wait<N>():
 *    asynchronous copies from global to shared memory (zero-filled where bytes = 0).
 *  - load_dyn / store_dyn / load_int_dyn: element access when the dtype is only known at
 *    run time (weights, probability targets, labels, upstream gradients) with the CPU's
 *    semantics (float → integer truncates toward zero, saturates, NaN → 0).
 *  - dispatch_float / dispatch_index / dispatch_any: ONE host-side switch from a
 *    ploss_dtype to a generic lambda taking a type tag:
 *        return dispatch_float(p->x_dtype, "input", [&](auto tag) {
 *            using T = typename decltype(tag)::type;
 *            my_kernel<T><<<grid, threads, 0, stream_of(ctx)>>>(...);
 *            return check_launch("my_kernel");
 *        });
 *  - block_all_reduce<THREADS>(v, op) / block_reduce<THREADS>(v, op) and
 *    warp_all_reduce<LANES>(v, op): deterministic (fixed-order) reductions through CUB;
 *    SumOp, MaxOp (NaN-ignoring like fmax) and MinOp functors.
 *  - sample_label(problem, n, s): the i64 or i32 class label of sample (n, s), by its dtype;
 *    labels_flat(problem), for_flat_labels<TI>(problem, r0, step, rows, f): label passes
 *    over contiguous labels in 16-byte vectors; label_status(problem, y) (valid, ignored or
 *    out of range) and divisor_share (a thread's share of a 'mean' divisor, Σ weight(y)).
 *  - report_invalid_label(ctx->error_slot, y): first invalid label wins (atomicCAS on the
 *    flag 0→1, then the label is stored); reported by ploss_ctx_synchronize().
 *  - report_invalid(ctx->error_slot, flag, n): the same for element n (a box, a variance) of
 *    the tensor `flag` names.
 *  - last_block_arrives(ticket, blocks), arrival_ticket(ctx), last_block_sum<THREADS>: the
 *    last block of a grid finishes a reduction in the same launch (no float atomics, fixed
 *    order); kernels/region/dice.cu's one-launch kernel also holds a grid barrier on it.
 *  - grid_blocks(n, threads), thread_index(), grid_stride(): 64-bit grid-stride loops;
 *    resident_blocks(kernel, threads, fallback): the grid of one full wave.
 *  - align_up(bytes): a workspace piece's bytes rounded up to 256 (pieces start aligned).
 *  - view_offset(view, k): offset in elements of the k-th (row-major) element of a strided
 *    ploss_view passed to a kernel by value (same order as core/cpu/scalar.h).
 *  - check_launch(what): the launch error, if any, as a ploss status; cub_status(e, what):
 *    a CUB call's.
 */
#ifndef PLOSS_KERNELS_COMMON_CUH
#define PLOSS_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <cuda/atomic>

#include <cub/block/block_reduce.cuh>
#include <cub/util_ptx.cuh>
#include <cub/warp/warp_reduce.cuh>

#ifndef PLOSS_HAVE_CUDA
#define PLOSS_HAVE_CUDA 1 /* .cu files are only compiled in CUDA builds */
#endif
#include "internal.h"

namespace ploss_cuda {

/* ------------------------------------------------------------------------------------ */
/* Types, loads and stores                                                              */
/* ------------------------------------------------------------------------------------ */

/* Accumulation type: f32 for f32/f16/bf16 storage, f64 for f64. */
template <class T> struct acc { using type = float; };
template <> struct acc<double> { using type = double; };
template <class T> using acc_t = typename acc<T>::type;

/* Storage → accumulation (exact). */
__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

/* Any float/double → storage type T, round to nearest even (double → f16/bf16 via f32,
 * as the CPU backend). */
template <class T> struct converter;
template <> struct converter<float> {
    __device__ __forceinline__ static float from(float v) { return v; }
    __device__ __forceinline__ static float from(double v) { return (float)v; }
};
template <> struct converter<double> {
    __device__ __forceinline__ static double from(float v) { return (double)v; }
    __device__ __forceinline__ static double from(double v) { return v; }
};
template <> struct converter<__half> {
    __device__ __forceinline__ static __half from(float v) { return __float2half_rn(v); }
    __device__ __forceinline__ static __half from(double v) { return __float2half_rn((float)v); }
};
template <> struct converter<__nv_bfloat16> {
    __device__ __forceinline__ static __nv_bfloat16 from(float v) { return __float2bfloat16_rn(v); }
    __device__ __forceinline__ static __nv_bfloat16 from(double v) { return __float2bfloat16_rn((float)v); }
};

template <class T, class A> __device__ __forceinline__ T convert(A v) { return converter<T>::from(v); }
template <class T> __device__ __forceinline__ T from_acc(acc_t<T> v) { return converter<T>::from(v); }

/* Element i of a T array as the accumulation type A (A may differ from acc_t<T>). */
template <class A, class T> __device__ __forceinline__ A load_as(const T *p, int64_t i)
{
    return (A)to_acc(p[i]);
}

/* Run-time dtype element access, semantics of ploss_load / ploss_store / ploss_load_int
 * in core/cpu/scalar.h. */
__device__ __forceinline__ double load_dyn(const void *base, ploss_dtype dt, int64_t i)
{
    switch (dt) {
    case PLOSS_F32: return (double)((const float *)base)[i];
    case PLOSS_F64: return ((const double *)base)[i];
    case PLOSS_F16: return (double)__half2float(((const __half *)base)[i]);
    case PLOSS_BF16: return (double)__bfloat162float(((const __nv_bfloat16 *)base)[i]);
    case PLOSS_I64: return (double)((const int64_t *)base)[i];
    case PLOSS_I32: return (double)((const int32_t *)base)[i];
    case PLOSS_U8: return (double)((const uint8_t *)base)[i];
    default: return __longlong_as_double(0x7ff8000000000000ll); /* NaN */
    }
}

/* A float element as A without a detour through double when the dtype allows it
 * (weights, probability targets: any float dtype). */
template <class A> __device__ __forceinline__ A load_float_dyn(const void *base, ploss_dtype dt, int64_t i)
{
    switch (dt) {
    case PLOSS_F32: return (A)((const float *)base)[i];
    case PLOSS_F16: return (A)__half2float(((const __half *)base)[i]);
    case PLOSS_BF16: return (A)__bfloat162float(((const __nv_bfloat16 *)base)[i]);
    default: return (A)load_dyn(base, dt, i);
    }
}

/* Float → integer: truncation toward zero, NaN → 0, saturation at [lo, hi]. */
__device__ __forceinline__ int64_t double_to_i64(double v, double lo, double hi)
{
    if (v != v)
        return 0;
    if (v <= lo)
        return (int64_t)lo;
    if (v >= hi)
        return (int64_t)hi;
    return (int64_t)v;
}

__device__ __forceinline__ void store_dyn(void *base, ploss_dtype dt, int64_t i, double v)
{
    switch (dt) {
    case PLOSS_F32: ((float *)base)[i] = (float)v; break;
    case PLOSS_F64: ((double *)base)[i] = v; break;
    case PLOSS_F16: ((__half *)base)[i] = __float2half_rn((float)v); break;
    case PLOSS_BF16: ((__nv_bfloat16 *)base)[i] = __float2bfloat16_rn((float)v); break;
    case PLOSS_I64:
        ((int64_t *)base)[i] = double_to_i64(v, -9223372036854775808.0, 9223372036854774784.0);
        break;
    case PLOSS_I32: ((int32_t *)base)[i] = (int32_t)double_to_i64(v, -2147483648.0, 2147483647.0); break;
    case PLOSS_U8: ((uint8_t *)base)[i] = (uint8_t)double_to_i64(v, 0.0, 255.0); break;
    default: break;
    }
}

/* The saved state between forward and backward: f32 or f64 (the fronts refuse any other
 * dtype), so two branches rather than the whole switch of load_dyn / store_dyn. */
__device__ __forceinline__ double load_state(const void *base, ploss_dtype dt, int64_t i)
{
    return dt == PLOSS_F64 ? ((const double *)base)[i] : (double)((const float *)base)[i];
}

__device__ __forceinline__ void store_state(void *base, ploss_dtype dt, int64_t i, double v)
{
    if (dt == PLOSS_F64)
        ((double *)base)[i] = v;
    else
        ((float *)base)[i] = (float)v;
}

/* The class label of sample (n, s) of a problem with labels t of dtype t_dtype (i64 or i32:
 * the dtypes dispatch_index admits) and strides t_sn, t_ss: one label per sample, read by
 * its dtype at run time, so kernels are not compiled per label type. */
template <class P> __device__ __forceinline__ int64_t sample_label(const P &a, int64_t n, int64_t s)
{
    const int64_t off = n * a.t_sn + s * a.t_ss;
    return a.t_dtype == PLOSS_I32 ? (int64_t)((const int32_t *)a.t)[off] : ((const int64_t *)a.t)[off];
}

/* Whether sample i's label is element i of the labels (N×S contiguous, or a vector when S
 * = 1) and the labels start on 16 bytes: a label pass can then read them as 16-byte vectors
 * (for_flat_labels). */
template <class P> __host__ __device__ __forceinline__ bool labels_flat(const P &a)
{
    return (a.S == 1 ? a.t_sn == 1 : a.t_ss == 1 && a.t_sn == a.S) && (uintptr_t)a.t % 16 == 0;
}

/* Samples per thread of a grid that walks flat labels once (the label passes' grids):
 * eight 16-byte vectors of int64 labels, four in flight at a time. */
constexpr int kLabelsPerThread = 16;

/* f(y) for the labels (TI: i64 or i32) of samples [0, rows) of a problem whose labels are
 * flat (labels_flat), this thread's share of a grid-stride walk from r0 by step: 16-byte
 * vectors r0, r0 + step, … (four in flight), then the samples past the last whole vector.
 * When every r0 in [0, step) walks (a grid, or a block with r0 = threadIdx.x), each label
 * is visited once; a thread visits its own in a fixed order. */
template <class TI, class P, class F>
__device__ __forceinline__ void for_flat_labels(const P &a, int64_t r0, int64_t step, int64_t rows, F &&f)
{
    constexpr int E = 16 / (int)sizeof(TI), U = 4;
    const uint4 *v = (const uint4 *)a.t;
    const int64_t nv = rows / E;
    for (int64_t i0 = r0; i0 < nv; i0 += U * step) {
        uint4 w[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (i0 + u * step < nv)
                w[u] = __ldg(v + i0 + u * step);
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (i0 + u * step < nv) {
                TI e[E];
                memcpy(e, &w[u], sizeof e);
#pragma unroll
                for (int k = 0; k < E; ++k)
                    f((int64_t)e[k]);
            }
    }
    for (int64_t i = nv * E + r0; i < rows; i += step)
        f((int64_t)((const TI *)a.t)[i]);
}

enum { kValid = 0, kIgnored = 1, kInvalid = 2 };

/* Whether the label y of a sample (sample_label) is valid, ignored or out of range, for
 * the row engine's RowArgs and the backend problems of core/engines/rows.h alike. */
template <class P> __device__ __forceinline__ int label_status(const P &a, int64_t y)
{
    if (y == a.ignore_index)
        return kIgnored;
    return y < 0 || y >= a.C ? kInvalid : kValid;
}

/* One thread's share of the 'mean' divisor: Σ weight(y) over the valid labels y of the
 * samples r0, r0 + step, … below rows, of RowArgs or a backend problem (sample_label,
 * label_status).  Flat labels (labels_flat) are read as 16-byte vectors r0, r0 + step, …
 * (for_flat_labels); others one sample at a time, four labels' loads in flight, a sample's
 * image by a 32-bit division where the count allows.  A thread adds its terms in a fixed
 * order (exact for counts; a fixed sum of weights). */
template <class P, class Weight>
__device__ __forceinline__ double divisor_share(const P &a, Weight &&weight, int64_t r0, int64_t step, int64_t rows)
{
    double acc = 0.0;
    if (labels_flat(a)) {
        const auto add = [&](int64_t y) {
            if (label_status(a, y) == kValid)
                acc += weight(y);
        };
        if (a.t_dtype == PLOSS_I32)
            for_flat_labels<int32_t>(a, r0, step, rows, add);
        else
            for_flat_labels<int64_t>(a, r0, step, rows, add);
        return acc;
    }
    constexpr int U = 4;
    const bool narrow = rows <= INT32_MAX;
    for (int64_t i0 = r0; i0 < rows; i0 += U * step) {
        int64_t y[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int64_t i = i0 + u * step;
            y[u] = a.ignore_index; /* past the end: adds nothing */
            if (i < rows) {
                const int64_t n = a.S == 1 ? i : narrow ? (int64_t)((uint32_t)i / (uint32_t)a.S) : i / a.S;
                y[u] = sample_label(a, n, i - n * a.S);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (label_status(a, y[u]) == kValid)
                acc += weight(y[u]);
    }
    return acc;
}

/* Integer element as int64 (exact); float dtypes truncate as double_to_i64. */
__device__ __forceinline__ int64_t load_int_dyn(const void *base, ploss_dtype dt, int64_t i)
{
    switch (dt) {
    case PLOSS_I64: return ((const int64_t *)base)[i];
    case PLOSS_I32: return (int64_t)((const int32_t *)base)[i];
    case PLOSS_U8: return (int64_t)((const uint8_t *)base)[i];
    default:
        return double_to_i64(load_dyn(base, dt, i), -9223372036854775808.0, 9223372036854774784.0);
    }
}

__device__ __forceinline__ void store_int_dyn(void *base, ploss_dtype dt, int64_t i, int64_t v)
{
    switch (dt) {
    case PLOSS_I64: ((int64_t *)base)[i] = v; break;
    case PLOSS_I32: ((int32_t *)base)[i] = (int32_t)v; break;
    case PLOSS_U8: ((uint8_t *)base)[i] = (uint8_t)v; break;
    default: store_dyn(base, dt, i, (double)v); break;
    }
}

/* ------------------------------------------------------------------------------------ */
/* 16-byte vectors held as uint4 (four 32-bit registers)                                */
/* ------------------------------------------------------------------------------------ */

/* vec16<T>: N elements of T in a uint4 (one 16-byte load/store); get(u, e) returns element
 * e (a compile-time index after unrolling) in the accumulation type, set(u, e, a) stores a
 * rounded to T.  Keeping rows as uint4 lets launder() stop the compiler from caching
 * unpacked copies of f16/bf16 rows between passes (which would double the registers). */
__device__ __forceinline__ uint32_t u4_word(const uint4 &u, int i)
{
    return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}
__device__ __forceinline__ void u4_set_word(uint4 &u, int i, uint32_t w)
{
    if (i == 0)
        u.x = w;
    else if (i == 1)
        u.y = w;
    else if (i == 2)
        u.z = w;
    else
        u.w = w;
}
template <class T> struct vec16;
template <> struct vec16<float> {
    static constexpr int N = 4;
    __device__ __forceinline__ static float get(const uint4 &u, int e) { return __uint_as_float(u4_word(u, e)); }
    __device__ __forceinline__ static void set(uint4 &u, int e, float v) { u4_set_word(u, e, __float_as_uint(v)); }
};
template <> struct vec16<double> {
    static constexpr int N = 2;
    __device__ __forceinline__ static double get(const uint4 &u, int e)
    {
        return __hiloint2double((int)u4_word(u, 2 * e + 1), (int)u4_word(u, 2 * e));
    }
    __device__ __forceinline__ static void set(uint4 &u, int e, double v)
    {
        u4_set_word(u, 2 * e, (uint32_t)__double2loint(v));
        u4_set_word(u, 2 * e + 1, (uint32_t)__double2hiint(v));
    }
};
template <> struct vec16<__half> {
    static constexpr int N = 8;
    __device__ __forceinline__ static float get(const uint4 &u, int e)
    {
        return __half2float(__ushort_as_half((unsigned short)(u4_word(u, e >> 1) >> ((e & 1) * 16))));
    }
    __device__ __forceinline__ static void set(uint4 &u, int e, float v)
    {
        const uint32_t b = __half_as_ushort(__float2half_rn(v)), w = u4_word(u, e >> 1);
        u4_set_word(u, e >> 1, (e & 1) ? (w & 0xffffu) | (b << 16) : (w & 0xffff0000u) | b);
    }
};
template <> struct vec16<__nv_bfloat16> {
    static constexpr int N = 8;
    __device__ __forceinline__ static float get(const uint4 &u, int e)
    {
        const uint32_t w = u4_word(u, e >> 1);
        return __uint_as_float((e & 1) ? (w & 0xffff0000u) : (w << 16));
    }
    __device__ __forceinline__ static void set(uint4 &u, int e, float v)
    {
        const uint32_t b = __bfloat16_as_ushort(__float2bfloat16_rn(v)), w = u4_word(u, e >> 1);
        u4_set_word(u, e >> 1, (e & 1) ? (w & 0xffffu) | (b << 16) : (w & 0xffff0000u) | b);
    }
};

/* An empty asm that "modifies" its operand: values derived from it before are not reused
 * after, and a load that produced it is issued (and waited for) before this point. */
__device__ __forceinline__ void launder(uint4 &u)
{
    asm volatile("" : "+r"(u.x), "+r"(u.y), "+r"(u.z), "+r"(u.w));
}
__device__ __forceinline__ void launder(float &v) { asm volatile("" : "+f"(v)); }
__device__ __forceinline__ void launder(double &v) { asm volatile("" : "+d"(v)); }

/* 2^v as ex2.approx.ftz: one MUFU op; results below 2^-126 flush to 0 instead of going
 * through the denormal range check of ex2.approx.f32 (exp2f, __expf: 3 more instructions). */
__device__ __forceinline__ float exp2_ftz(float v)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}

/* e^v as exp2_ftz(v·log2 e): one multiply and one MUFU op.  Relative error about
 * 2^-22 + |v|·2^-24; results below 2^-126 (v < −87.3) flush to 0, which is harmless
 * wherever such a term is added to values near 1 or multiplies a factor of a gradient (a
 * probability below 1.2e-38 becomes 0).  Not for values ranked or compared with a
 * threshold near 0 (the OHEM keys of sample_policies.cu use expf). */
__device__ __forceinline__ float exp_ftz(float v) { return exp2_ftz(v * 1.4426950408889634f); }

/* 16 bytes from global src to shared dst, asynchronously (cp.async, L1 bypassed): the
 * first `bytes` read, the rest zero-filled (bytes = 0: nothing read). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int bytes)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}
/* 4 bytes likewise (through L1: cp.async.cg takes 16 only); bytes 4, or 0 for a zero */
__device__ __forceinline__ void cp_async4(void *dst, const void *src, int bytes)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* Wait until at most N of this thread's committed groups are still in flight. */
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* ------------------------------------------------------------------------------------ */
/* Host-side dtype dispatch: one switch, the body is a generic lambda over a type tag    */
/* ------------------------------------------------------------------------------------ */

template <class T> struct type_tag { using type = T; };

/* f32, f16, bf16, f64 → f(type_tag<float | __half | __nv_bfloat16 | double>{}). */
template <class F> ploss_status dispatch_float(ploss_dtype d, const char *what, F &&f)
{
    switch (d) {
    case PLOSS_F32: return f(type_tag<float>{});
    case PLOSS_F16: return f(type_tag<__half>{});
    case PLOSS_BF16: return f(type_tag<__nv_bfloat16>{});
    case PLOSS_F64: return f(type_tag<double>{});
    default:
        return ploss_error(PLOSS_ERR_DTYPE, "%s: no CUDA kernel for dtype %s (expected f32, f16, bf16 or f64)",
                           what, ploss_dtype_name(d));
    }
}

/* Class-index dtypes i64, i32 → f(type_tag<int64_t | int32_t>{}). */
template <class F> ploss_status dispatch_index(ploss_dtype d, const char *what, F &&f)
{
    switch (d) {
    case PLOSS_I64: return f(type_tag<int64_t>{});
    case PLOSS_I32: return f(type_tag<int32_t>{});
    default:
        return ploss_error(PLOSS_ERR_DTYPE, "%s: no CUDA kernel for dtype %s (expected i64 or i32)", what,
                           ploss_dtype_name(d));
    }
}

/* Every storage dtype (floats, i64, i32, u8). */
template <class F> ploss_status dispatch_any(ploss_dtype d, const char *what, F &&f)
{
    switch (d) {
    case PLOSS_F32: return f(type_tag<float>{});
    case PLOSS_F16: return f(type_tag<__half>{});
    case PLOSS_BF16: return f(type_tag<__nv_bfloat16>{});
    case PLOSS_F64: return f(type_tag<double>{});
    case PLOSS_I64: return f(type_tag<int64_t>{});
    case PLOSS_I32: return f(type_tag<int32_t>{});
    case PLOSS_U8: return f(type_tag<uint8_t>{});
    default: return ploss_error(PLOSS_ERR_DTYPE, "%s: unsupported dtype code %d", what, (int)d);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Deterministic reductions (CUB: fixed tree for a fixed block size, no atomics)         */
/* ------------------------------------------------------------------------------------ */

struct SumOp {
    template <class T> __device__ __forceinline__ T operator()(const T &a, const T &b) const { return a + b; }
};
/* max/min that ignore a NaN operand (fmax semantics); a NaN row is caught downstream. */
struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
    __device__ __forceinline__ double operator()(double a, double b) const { return fmax(a, b); }
};
struct MinOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fminf(a, b); }
    __device__ __forceinline__ double operator()(double a, double b) const { return fmin(a, b); }
};

/* Reduce v over a 1-D block of exactly THREADS threads; the result is returned to EVERY
 * thread.  All threads of the block must call it (it synchronises), and it may be called
 * again right away (the storage is released before returning).  T: a trivially
 * constructible type (scalars or small POD structs with a matching op). */
template <int THREADS, class T, class Op> __device__ __forceinline__ T block_all_reduce(T v, Op op)
{
    using BR = cub::BlockReduce<T, THREADS>;
    __shared__ typename BR::TempStorage tmp;
    __shared__ T result;
    T r = BR(tmp).Reduce(v, op);
    if (threadIdx.x == 0)
        result = r;
    __syncthreads();
    r = result;
    __syncthreads();
    return r;
}

/* As block_all_reduce, but the result is valid in thread 0 only (one barrier fewer). */
template <int THREADS, class T, class Op> __device__ __forceinline__ T block_reduce(T v, Op op)
{
    using BR = cub::BlockReduce<T, THREADS>;
    __shared__ typename BR::TempStorage tmp;
    T r = BR(tmp).Reduce(v, op);
    __syncthreads();
    return r;
}

/* Reduce v over each aligned group of LANES (power of two ≤ 32) lanes of a warp; every
 * lane of the group gets the result.  All lanes of the group must call it (no block
 * barrier, so warps of a block may diverge).  Blocks of at most 1024 threads. */
template <int LANES, class T, class Op> __device__ __forceinline__ T warp_all_reduce(T v, Op op)
{
    using WR = cub::WarpReduce<T, LANES>;
    __shared__ typename WR::TempStorage tmp[1024 / LANES];
    const int group = (int)(threadIdx.x / LANES);
    T r = WR(tmp[group]).Reduce(v, op);
    const unsigned lane_in_warp = threadIdx.x & 31u;
    const unsigned mask = LANES == 32 ? 0xffffffffu : (((1u << LANES) - 1u) << (lane_in_warp & ~(unsigned)(LANES - 1)));
    return cub::ShuffleIndex<LANES>(r, 0, mask);
}

/* ------------------------------------------------------------------------------------ */
/* Invalid labels                                                                       */
/* ------------------------------------------------------------------------------------ */

/* Record `label` in the context's device error slot {flag, label}: the first reporter
 * flips the flag 0 → 1 and stores its label; later ones leave the slot alone. */
__device__ __forceinline__ void report_invalid_label(int64_t *slot, int64_t label)
{
    if (!slot)
        return;
    if (atomicCAS((unsigned long long *)slot, 0ull, 1ull) == 0ull)
        *(volatile long long *)(slot + 1) = (long long)label;
}

/* Record element `index` of the tensor that `flag` names (PLOSS_SLOT_INPUT_BOX, …_TARGET_BOX,
 * …_BOXES1_BOX, …_BOXES2_BOX: a box; PLOSS_SLOT_NEGATIVE_VARIANCE: a variance) as invalid,
 * the first report winning as for labels. */
__device__ __forceinline__ void report_invalid(int64_t *slot, int flag, int64_t index)
{
    if (!slot)
        return;
    if (atomicCAS((unsigned long long *)slot, 0ull, (unsigned long long)flag) == 0ull)
        *(volatile long long *)(slot + 1) = (long long)index;
}

/* One-launch reductions: every block writes its partial, then calls last_block_arrives;
 * the block that arrives last (the result is the same for all its threads) reads every
 * partial — written by the others before their arrival — and finishes the reduction.
 * `ticket` is the context's arrival ticket (arrival_ticket(ctx)), 0 between kernels: the
 * last block sets it back to 0.  At most one kernel counts on it at a time (a context's
 * kernels run in stream order).  Ordering: the barrier puts every thread's share of the
 * partial before thread 0's arrival, an acquire-release add at device scope (it publishes
 * this block's writes and, in the last block, makes the others' visible: cheaper than the
 * full fences of __threadfence), and the second barrier passes that on to the block. */
__device__ __forceinline__ bool last_block_arrives(unsigned long long *ticket, unsigned long long blocks)
{
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
        cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> t(*ticket);
        last = t.fetch_add(1ull, cuda::memory_order_acq_rel) == blocks - 1;
        if (last)
            t.store(0ull, cuda::memory_order_relaxed); /* the kernel's last use */
    }
    __syncthreads();
    return last;
}

/* The last block's sum of the `count` partials of a one-launch reduction, in a fixed order
 * (read past the L1: other blocks wrote them in this launch); valid in thread 0. */
template <int THREADS> __device__ __forceinline__ double last_block_sum(const double *part, int64_t count)
{
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < count; i += THREADS)
        s += __ldcg(part + i);
    return block_reduce<THREADS>(s, SumOp());
}

/* ------------------------------------------------------------------------------------ */
/* Grids, indices, strided views                                                        */
/* ------------------------------------------------------------------------------------ */

/* A workspace piece's bytes rounded up to 256: the pieces a kernel's workspace is cut into
 * each start 256-byte aligned. */
inline size_t align_up(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

/* Blocks of `threads` threads for n items with at most `cap` blocks (a grid-stride loop
 * covers the rest); at least 1.  The grid depends on n only, never on the device, so
 * per-block partial sums are the same on every card. */
inline unsigned grid_blocks(int64_t n, int threads, int64_t cap = 65535ll * 16)
{
    int64_t b = (n + threads - 1) / threads;
    if (b < 1)
        b = 1;
    if (b > cap)
        b = cap;
    return (unsigned)b;
}

/* Blocks of `kernel` (`threads` threads, no dynamic shared memory; launched in clusters of
 * `cluster` blocks, counted as whole clusters) resident on the current device at once, at
 * least 1; `fallback` when the device cannot say.  A grid-stride loop over
 * many light items launched with this many blocks keeps every SM full with one wave and
 * spreads each thread's fixed costs (setup, the block reduction) over many items.  The grid
 * then depends on the card: sums made in it are bitwise repeatable on one card model, not
 * across models.  The answer is cached per device, kernel, block size and cluster size
 * (kernels/runtime.cu): the occupancy query costs microseconds of host time, which a short
 * kernel's call would otherwise pay every time. */
int64_t resident_blocks_of(const void *kernel, int threads, int64_t fallback, int cluster = 1);
/* The launch of `clusters` clusters of `size` blocks of `threads` threads on `stream`, for
 * cudaLaunchKernelEx or the occupancy queries: cfg and its one attribute, `attr` (which
 * must outlive the launch). */
inline void cluster_config(cudaLaunchConfig_t &cfg, cudaLaunchAttribute &attr, int64_t clusters, int size,
                           int threads, cudaStream_t stream)
{
    cfg = cudaLaunchConfig_t{};
    cfg.gridDim = dim3((unsigned)(clusters * size), 1, 1);
    cfg.blockDim = dim3((unsigned)threads, 1, 1);
    cfg.stream = stream;
    attr = cudaLaunchAttribute{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = (unsigned)size;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
}

template <class Kernel>
inline int64_t resident_blocks(Kernel kernel, int threads, int64_t fallback, int cluster = 1)
{
    return resident_blocks_of((const void *)kernel, threads, fallback, cluster);
}

__device__ __forceinline__ int64_t thread_index() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return (int64_t)gridDim.x * blockDim.x; }

/* Offset (elements) of the k-th element, in row-major order, of a strided view. */
__device__ __forceinline__ int64_t view_offset(const ploss_view &v, int64_t k)
{
    int64_t off = 0;
    for (int d = v.ndim - 1; d >= 0; --d) {
        const int64_t size = v.shape[d];
        off += (k % size) * v.strides[d];
        k /= size;
    }
    return off;
}

/* ------------------------------------------------------------------------------------ */
/* Host helpers                                                                         */
/* ------------------------------------------------------------------------------------ */

inline cudaStream_t stream_of(const ploss_ctx_t *ctx) { return (cudaStream_t)ctx->stream; }

/* The last launch error, if any, as PLOSS_ERR_CUDA naming `what` (clears the error). */
inline ploss_status check_launch(const char *what) { return ploss_cuda_check_launch(what); }

/* A CUB device call's result as a ploss status: PLOSS_ERR_CUDA naming `what` (the error
 * cleared, not left for the next check_launch). */
inline ploss_status cub_status(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return PLOSS_OK;
    (void)cudaGetLastError();
    return ploss_error(PLOSS_ERR_CUDA, "%s: %s", what, cudaGetErrorString(e));
}

/* The context's arrival ticket for last_block_arrives. */
inline unsigned long long *arrival_ticket(ploss_ctx_t *ctx) { return (unsigned long long *)(ctx->error_slot + 2); }

} // namespace ploss_cuda

#endif /* PLOSS_KERNELS_COMMON_CUH */
