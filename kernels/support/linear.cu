/*
 * linear.cu — CUDA backend of the bias add, the bias gradient and argmax.
 * The bias gradient is deterministic: rows are cut into fixed chunks; each thread sums one
 * column of one chunk in row order (f32, f64 for f64) into the workspace, then one thread
 * per column sums the chunk partials in chunk order.  No atomics.
 */
#include "linear.h"
#include "support_ops.cuh"

namespace ploss_support {
namespace linear_kernels {

template <class T> __global__ void bias_add_kernel(ploss_bias_problem p)
{
    T *x = (T *)p.m;
    const T *b = (const T *)p.v;
    const int64_t total = p.n * p.c;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e / p.c, j = e % p.c;
        T *px = x + i * p.m_sn + j * p.m_sc;
        *px = from_acc<T>(to_acc(*px) + to_acc(b[j * p.v_s]));
    }
}

constexpr int64_t kRowsPerChunk = 256;

/* partial[chunk·C + j] = Σ_{i in chunk} g[i, j], rows in order. */
template <class T> __global__ void bias_grad_partial(ploss_bias_problem p, acc_t<T> *partial, int64_t chunks)
{
    const T *g = (const T *)p.m;
    const int64_t total = chunks * p.c;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t chunk = e / p.c, j = e % p.c;
        const int64_t i0 = chunk * kRowsPerChunk, i1 = i0 + kRowsPerChunk < p.n ? i0 + kRowsPerChunk : p.n;
        acc_t<T> s = 0;
        for (int64_t i = i0; i < i1; ++i)
            s += to_acc(g[i * p.m_sn + j * p.m_sc]);
        partial[e] = s;
    }
}

template <class T> __global__ void bias_grad_final(ploss_bias_problem p, const acc_t<T> *partial, int64_t chunks)
{
    T *gb = (T *)p.v;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < p.c; j += (int64_t)gridDim.x * blockDim.x) {
        acc_t<T> s = 0;
        for (int64_t chunk = 0; chunk < chunks; ++chunk)
            s += partial[chunk * p.c + j];
        gb[j * p.v_s] = from_acc<T>(s);
    }
}

template <class T> static ploss_status bias_grad(ploss_ctx_t *ctx, const ploss_bias_problem *p)
{
    const int64_t chunks = p->n > 0 ? (p->n + kRowsPerChunk - 1) / kRowsPerChunk : 0;
    void *ws = nullptr;
    if (chunks > 0) {
        ploss_status st = ploss_workspace(ctx, (size_t)(chunks * p->c) * sizeof(acc_t<T>), &ws);
        if (st != PLOSS_OK)
            return st;
        bias_grad_partial<T><<<grid_for(chunks * p->c), kThreads, 0, (cudaStream_t)ctx->stream>>>(
            *p, (acc_t<T> *)ws, chunks);
    }
    bias_grad_final<T><<<grid_for(p->c), kThreads, 0, (cudaStream_t)ctx->stream>>>(*p, (const acc_t<T> *)ws,
                                                                                  chunks);
    return ploss_cuda_check_launch("bias_grad");
}

/* One thread per sample; the first maximum wins, the first NaN counts as the maximum. */
template <class T> __global__ void argmax_kernel(ploss_argmax_problem p)
{
    const T *x = (const T *)p.x.data;
    int64_t *out = (int64_t *)p.out.data;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < p.samples.numel;
         k += (int64_t)gridDim.x * blockDim.x) {
        const T *row = x + ploss_ew_offset(&p.samples, p.x.strides, k);
        acc_t<T> best = to_acc(row[0]);
        int64_t arg = 0;
        for (int64_t j = 1; j < p.C && !isnan(best); ++j) {
            const acc_t<T> v = to_acc(row[j * p.x_sc]);
            if (v > best || isnan(v)) {
                best = v;
                arg = j;
            }
        }
        out[ploss_ew_offset(&p.samples, p.out.strides, k)] = arg;
    }
}

extern "C" ploss_status ploss_cuda_bias_add(ploss_ctx_t *ctx, const ploss_bias_problem *p)
{
    const unsigned grid = grid_for(p->n * p->c);
    cudaStream_t s = (cudaStream_t)ctx->stream;
    switch (p->dtype) {
    case PLOSS_F32: bias_add_kernel<float><<<grid, kThreads, 0, s>>>(*p); break;
    case PLOSS_F16: bias_add_kernel<__half><<<grid, kThreads, 0, s>>>(*p); break;
    case PLOSS_BF16: bias_add_kernel<__nv_bfloat16><<<grid, kThreads, 0, s>>>(*p); break;
    default: bias_add_kernel<double><<<grid, kThreads, 0, s>>>(*p); break;
    }
    return ploss_cuda_check_launch("bias_add");
}

extern "C" ploss_status ploss_cuda_bias_grad(ploss_ctx_t *ctx, const ploss_bias_problem *p)
{
    switch (p->dtype) {
    case PLOSS_F32: return bias_grad<float>(ctx, p);
    case PLOSS_F16: return bias_grad<__half>(ctx, p);
    case PLOSS_BF16: return bias_grad<__nv_bfloat16>(ctx, p);
    default: return bias_grad<double>(ctx, p);
    }
}

extern "C" ploss_status ploss_cuda_argmax(ploss_ctx_t *ctx, const ploss_argmax_problem *p)
{
    const unsigned grid = grid_for(p->samples.numel);
    cudaStream_t s = (cudaStream_t)ctx->stream;
    switch (p->x.dtype) {
    case PLOSS_F32: argmax_kernel<float><<<grid, kThreads, 0, s>>>(*p); break;
    case PLOSS_F16: argmax_kernel<__half><<<grid, kThreads, 0, s>>>(*p); break;
    case PLOSS_BF16: argmax_kernel<__nv_bfloat16><<<grid, kThreads, 0, s>>>(*p); break;
    default: argmax_kernel<double><<<grid, kThreads, 0, s>>>(*p); break;
    }
    return ploss_cuda_check_launch("argmax");
}

} // namespace linear_kernels
} // namespace ploss_support
