/*
 * runtime.cu — the CUDA runtime wrappers declared in core/internal.h (ploss_cuda_*).
 * Every failure becomes a ploss status with the CUDA error string in the thread's
 * message; nothing aborts or prints.  Failed runtime calls are followed by
 * cudaGetLastError() so that a later ploss_cuda_check_launch() does not report them again.
 */
#include <cuda_runtime.h>

#include <mutex>

#include "common.cuh"
#include "partials.cuh"
#include "rows.h"

namespace ploss_cuda {
namespace runtime_kernels {
namespace {

ploss_status cuda_fail(cudaError_t e, const char *what)
{
    (void)cudaGetLastError(); /* clear the non-sticky error state */
    const ploss_status st = e == cudaErrorMemoryAllocation ? PLOSS_ERR_OUT_OF_MEMORY : PLOSS_ERR_CUDA;
    return ploss_error(st, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

constexpr int kPartialsThreads = 1024;

__global__ void __launch_bounds__(kPartialsThreads)
    loss_from_partials(const double *partials, int64_t nparts, double divisor, const double *divisor_dev, void *loss,
                       ploss_dtype loss_dtype)
{
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < nparts; i += kPartialsThreads)
        s += partials[i];
    s = block_reduce<kPartialsThreads>(s, SumOp());
    if (threadIdx.x == 0)
        store_dyn(loss, loss_dtype, 0, divisor_dev ? ploss_rows_mean(s, *divisor_dev) : s / divisor);
}

} // namespace

extern "C" int ploss_cuda_count(void)
{
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver / no device: not an error for the caller */
        return 0;
    }
    return n;
}

extern "C" ploss_status ploss_cuda_set_device(int device_id)
{
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current == device_id)
        return PLOSS_OK;
    (void)cudaGetLastError();
    const cudaError_t e = cudaSetDevice(device_id);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaSetDevice");
    return PLOSS_OK;
}

extern "C" ploss_status ploss_cuda_malloc(int device_id, size_t bytes, void **out)
{
    *out = NULL;
    ploss_status st = ploss_cuda_set_device(device_id);
    if (st != PLOSS_OK)
        return st;
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        const ploss_status code = e == cudaErrorMemoryAllocation ? PLOSS_ERR_OUT_OF_MEMORY : PLOSS_ERR_CUDA;
        return ploss_error(code, "cudaMalloc of %zu bytes on cuda:%d: %s (%s)", bytes, device_id,
                           cudaGetErrorString(e), cudaGetErrorName(e));
    }
    *out = p;
    return PLOSS_OK;
}

extern "C" ploss_status ploss_cuda_free(int device_id, void *ptr)
{
    if (!ptr)
        return PLOSS_OK;
    ploss_status st = ploss_cuda_set_device(device_id);
    if (st != PLOSS_OK)
        return st;
    const cudaError_t e = cudaFree(ptr);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaFree");
    return PLOSS_OK;
}

extern "C" ploss_status ploss_cuda_memcpy(void *dst, const void *src, size_t bytes, int kind, void *stream)
{
    if (bytes == 0)
        return PLOSS_OK;
    cudaMemcpyKind k;
    const char *what;
    switch (kind) {
    case PLOSS_COPY_H2D: k = cudaMemcpyHostToDevice; what = "cudaMemcpyAsync (host to device)"; break;
    case PLOSS_COPY_D2H: k = cudaMemcpyDeviceToHost; what = "cudaMemcpyAsync (device to host)"; break;
    case PLOSS_COPY_D2D: k = cudaMemcpyDeviceToDevice; what = "cudaMemcpyAsync (device to device)"; break;
    default: return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "memcpy kind: %d is not H2D, D2H or D2D", kind);
    }
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, k, s);
    if (e != cudaSuccess)
        return cuda_fail(e, what);
    if (kind != PLOSS_COPY_D2D) {
        /* the host buffer is the caller's: it must be complete (H2D: reusable) on return */
        e = cudaStreamSynchronize(s);
        if (e != cudaSuccess)
            return cuda_fail(e, "cudaStreamSynchronize after a host copy");
    }
    return PLOSS_OK;
}

extern "C" ploss_status ploss_cuda_memset(void *dst, int value, size_t bytes, void *stream)
{
    if (bytes == 0)
        return PLOSS_OK;
    const cudaError_t e = cudaMemsetAsync(dst, value, bytes, (cudaStream_t)stream);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaMemsetAsync");
    return PLOSS_OK;
}

extern "C" ploss_status ploss_cuda_stream_sync(void *stream)
{
    const cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaStreamSynchronize");
    return PLOSS_OK;
}

extern "C" ploss_status ploss_cuda_check_launch(const char *what)
{
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return ploss_error(e == cudaErrorMemoryAllocation ? PLOSS_ERR_OUT_OF_MEMORY : PLOSS_ERR_CUDA,
                           "%s: kernel launch failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return PLOSS_OK;
}

} // namespace runtime_kernels

ploss_status launch_loss_from_partials(const double *partials, int64_t nparts, double divisor, void *loss,
                                       ploss_dtype loss_dtype, cudaStream_t stream, const double *divisor_dev)
{
    using namespace runtime_kernels;
    loss_from_partials<<<1, kPartialsThreads, 0, stream>>>(partials, nparts, divisor, divisor_dev, loss, loss_dtype);
    return check_launch("the loss from its partial sums");
}

} // namespace ploss_cuda

/* resident_blocks (common.cuh): the occupancy of each (device, kernel, block size, cluster
 * size) asked once; a full table (64 entries) asks the runtime again, unchanged. */
int64_t ploss_cuda::resident_blocks_of(const void *kernel, int threads, int64_t fallback, int cluster)
{
    struct entry {
        const void *kernel;
        int device, threads, cluster;
        int64_t blocks;
    };
    static std::mutex lock;
    static entry cache[64];
    static int used = 0;
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
        (void)cudaGetLastError();
        return fallback;
    }
    {
        const std::lock_guard<std::mutex> hold(lock);
        for (int k = 0; k < used; ++k)
            if (cache[k].kernel == kernel && cache[k].device == device && cache[k].threads == threads &&
                cache[k].cluster == cluster)
                return cache[k].blocks;
    }
    int64_t blocks = 0;
    if (cluster <= 1) {
        int sms = 0, per_sm = 0;
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) == cudaSuccess)
            blocks = (int64_t)sms * per_sm;
    } else {
        cudaLaunchConfig_t cfg;
        cudaLaunchAttribute attr;
        cluster_config(cfg, attr, 1, cluster, threads, 0);
        int clusters = 0;
        if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess)
            blocks = (int64_t)clusters * cluster;
    }
    if (blocks <= 0) {
        (void)cudaGetLastError(); /* not left for the next check_launch */
        return fallback;
    }
    const std::lock_guard<std::mutex> hold(lock);
    if (used < 64)
        cache[used++] = entry{kernel, device, threads, cluster, blocks};
    return blocks;
}
