/*
 * ema.cu — CUDA backend of the multi-tensor EMA update and swap (core/support/ema.h): up
 * to 256 tensors per launch, their pointers and sizes passed as one __grid_constant__
 * kernel parameter (no host-to-device copy, capturable in a CUDA graph).  Each tensor is cut
 * into chunks of CHUNK elements; a block takes a chunk (its tensor found by a binary search
 * of the chunks' prefix sums) and its threads walk it in 16-byte vectors where both
 * pointers allow, elementwise otherwise.  Float tensors: s ← s + (1 − d)(p − s) in f32 (f64
 * for f64); integer tensors copied; the swap exchanges bytes.  No reduction: deterministic.
 */
#include <string.h>

#include "common.cuh"
#include "ema.h"

namespace ploss_cuda {
namespace ema_kernels {

namespace {

constexpr int MAX_TENSORS = 256;
constexpr int THREADS = 256;
constexpr int64_t CHUNK = 16384; /* elements per chunk: whole 16-byte vectors of every dtype */

struct ema_table {
    int64_t chunk_start[MAX_TENSORS + 1]; /* first chunk of tensor i; [count]: all of them */
    void *s[MAX_TENSORS];
    void *p[MAX_TENSORS];
    int64_t numel[MAX_TENSORS];
    int dtype[MAX_TENSORS];
    int count;
    int mode;
    double c; /* 1 − d */
};

__device__ __forceinline__ bool aligned16(const void *a) { return ((uintptr_t)a & 15u) == 0; }

/* s[k] += c·(p[k] − s[k]) for k in [begin, end); begin is a multiple of every vector width. */
template <class T> __device__ void update_range(T *s, const T *p, int64_t begin, int64_t end, acc_t<T> c)
{
    constexpr int N = vec16<T>::N;
    int64_t k0 = begin;
    if (aligned16(s) && aligned16(p)) {
        const int64_t nv = (end - begin) / N;
        uint4 *sv = (uint4 *)(s + begin);
        const uint4 *pv = (const uint4 *)(p + begin);
        for (int64_t v = threadIdx.x; v < nv; v += THREADS) {
            uint4 a = sv[v];
            const uint4 b = pv[v];
#pragma unroll
            for (int e = 0; e < N; ++e) {
                const acc_t<T> x = vec16<T>::get(a, e), y = vec16<T>::get(b, e);
                vec16<T>::set(a, e, x + c * (y - x));
            }
            sv[v] = a;
        }
        k0 = begin + nv * N;
    }
    for (int64_t k = k0 + threadIdx.x; k < end; k += THREADS) {
        const acc_t<T> x = to_acc(s[k]), y = to_acc(p[k]);
        s[k] = from_acc<T>(x + c * (y - x));
    }
}

/* Bytes [lo, hi) of a and b, elements of `size` bytes: b copied into a, or exchanged. */
template <class U> __device__ void move_units(U *a, U *b, int64_t lo, int64_t hi, bool swap)
{
    for (int64_t k = lo + threadIdx.x; k < hi; k += THREADS) {
        const U v = b[k];
        if (swap)
            b[k] = a[k];
        a[k] = v;
    }
}

__device__ void move_range(char *a, char *b, int64_t begin, int64_t end, int size, bool swap)
{
    if (aligned16(a) && aligned16(b)) { /* whole vectors, then the tail in bytes */
        const int64_t lo = begin * size, hi = end * size, nv = (hi - lo) / 16;
        move_units((uint4 *)(a + lo), (uint4 *)(b + lo), 0, nv, swap);
        move_units((unsigned char *)a, (unsigned char *)b, lo + 16 * nv, hi, swap);
        return;
    }
    switch (size) {
    case 8: move_units((uint64_t *)a, (uint64_t *)b, begin, end, swap); break;
    case 4: move_units((uint32_t *)a, (uint32_t *)b, begin, end, swap); break;
    case 2: move_units((uint16_t *)a, (uint16_t *)b, begin, end, swap); break;
    default: move_units((unsigned char *)a, (unsigned char *)b, begin, end, swap); break;
    }
}

__device__ __forceinline__ int dtype_size(int dt)
{
    return dt == PLOSS_F64 || dt == PLOSS_I64 ? 8 : dt == PLOSS_F32 || dt == PLOSS_I32 ? 4 : dt == PLOSS_U8 ? 1 : 2;
}

__global__ void __launch_bounds__(THREADS) ema_kernel(const __grid_constant__ ema_table tab)
{
    const int64_t total = tab.chunk_start[tab.count];
    for (int64_t chunk = blockIdx.x; chunk < total; chunk += gridDim.x) {
        int lo = 0, hi = tab.count - 1; /* the last tensor whose first chunk is <= chunk */
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (tab.chunk_start[mid] <= chunk)
                lo = mid;
            else
                hi = mid - 1;
        }
        const int i = lo;
        const int64_t begin = (chunk - tab.chunk_start[i]) * CHUNK;
        const int64_t end = begin + CHUNK < tab.numel[i] ? begin + CHUNK : tab.numel[i];
        const int dt = tab.dtype[i];
        if (tab.mode == PLOSS_EMA_UPDATE && dt == PLOSS_F32)
            update_range((float *)tab.s[i], (const float *)tab.p[i], begin, end, (float)tab.c);
        else if (tab.mode == PLOSS_EMA_UPDATE && dt == PLOSS_BF16)
            update_range((__nv_bfloat16 *)tab.s[i], (const __nv_bfloat16 *)tab.p[i], begin, end, (float)tab.c);
        else if (tab.mode == PLOSS_EMA_UPDATE && dt == PLOSS_F16)
            update_range((__half *)tab.s[i], (const __half *)tab.p[i], begin, end, (float)tab.c);
        else if (tab.mode == PLOSS_EMA_UPDATE && dt == PLOSS_F64)
            update_range((double *)tab.s[i], (const double *)tab.p[i], begin, end, tab.c);
        else /* integers are copied; the swap exchanges any dtype */
            move_range((char *)tab.s[i], (char *)tab.p[i], begin, end, dtype_size(dt), tab.mode == PLOSS_EMA_SWAP);
    }
}

} // namespace

extern "C" ploss_status ploss_cuda_ema(ploss_ctx_t *ctx, const ploss_ema_problem *p)
{
    for (int64_t first = 0; first < p->n; first += MAX_TENSORS) {
        ema_table tab;
        memset(&tab, 0, sizeof tab);
        tab.count = (int)(p->n - first < MAX_TENSORS ? p->n - first : MAX_TENSORS);
        tab.mode = (int)p->mode;
        tab.c = p->one_minus_d;
        for (int i = 0; i < tab.count; ++i) {
            const ploss_ema_tensor *t = &p->tensors[first + i];
            tab.s[i] = t->shadow;
            tab.p[i] = t->param;
            tab.numel[i] = t->numel;
            tab.dtype[i] = (int)t->dtype;
            tab.chunk_start[i + 1] = tab.chunk_start[i] + (t->numel + CHUNK - 1) / CHUNK;
        }
        const int64_t chunks = tab.chunk_start[tab.count];
        if (chunks == 0)
            continue;
        const unsigned blocks = (unsigned)(chunks < (1 << 20) ? chunks : (1 << 20));
        ema_kernel<<<blocks, THREADS, 0, stream_of(ctx)>>>(tab);
        const ploss_status st = check_launch(p->mode == PLOSS_EMA_SWAP ? "ema_swap" : "ema_update");
        if (st)
            return st;
    }
    return PLOSS_OK;
}

} // namespace ema_kernels
} // namespace ploss_cuda
