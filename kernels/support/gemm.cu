/*
 * gemm.cu — CUDA matrix product through cuBLAS (cublasGemmEx): f32, f16 and bf16 with
 * CUBLAS_COMPUTE_32F (no TF32), f64 with CUBLAS_COMPUTE_64F.  The row-major problem
 * c = op(A)·op(B) of core/support/gemm.h is handed to column-major cuBLAS as cᵀ = op(B)ᵀ·op(A)ᵀ.
 * The cuBLAS handle is created on the context's first GEMM and destroyed with the context.
 */
#include <cublas_v2.h>

#include "gemm.h"
#include "support_ops.cuh"

namespace ploss_support {
namespace gemm_kernels {

static ploss_status blas_error(cublasStatus_t s, const char *what)
{
    const ploss_status st = s == CUBLAS_STATUS_ALLOC_FAILED ? PLOSS_ERR_OUT_OF_MEMORY : PLOSS_ERR_CUDA;
    return ploss_error(st, "%s: %s (%s)", what, cublasGetStatusName(s), cublasGetStatusString(s));
}

static ploss_status handle_of(ploss_ctx_t *ctx, cublasHandle_t *out)
{
    cublasStatus_t s;
    if (!ctx->cublas) {
        cublasHandle_t h = nullptr;
        if ((s = cublasCreate(&h)) != CUBLAS_STATUS_SUCCESS)
            return blas_error(s, "cublasCreate");
        ctx->cublas = h;
    }
    cublasHandle_t h = (cublasHandle_t)ctx->cublas;
    if ((s = cublasSetStream(h, (cudaStream_t)ctx->stream)) != CUBLAS_STATUS_SUCCESS)
        return blas_error(s, "cublasSetStream");
    *out = h;
    return PLOSS_OK;
}

extern "C" void ploss_cuda_blas_destroy(int device_id, void *handle)
{
    if (!handle)
        return;
    cudaSetDevice(device_id);
    cublasDestroy((cublasHandle_t)handle);
}

/* c ← beta·c (k = 0); beta = 0 writes zeros without reading c. */
template <class T>
__global__ void scale_kernel(T *c, int64_t m, int64_t n, int64_t ldc, acc_t<T> beta)
{
    const int64_t total = m * n;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e / n, j = e % n;
        T *x = c + i * ldc + j;
        *x = beta == acc_t<T>(0) ? from_acc<T>(acc_t<T>(0)) : from_acc<T>(beta * to_acc(*x));
    }
}

template <class T> static void launch_scale(ploss_ctx_t *ctx, const ploss_gemm_problem *p)
{
    scale_kernel<T><<<grid_for(p->m * p->n), kThreads, 0, (cudaStream_t)ctx->stream>>>(
        (T *)p->c, p->m, p->n, p->ldc, (acc_t<T>)p->beta);
}

static cudaDataType_t data_type(ploss_dtype d)
{
    switch (d) {
    case PLOSS_F16: return CUDA_R_16F;
    case PLOSS_BF16: return CUDA_R_16BF;
    case PLOSS_F64: return CUDA_R_64F;
    default: return CUDA_R_32F;
    }
}

extern "C" ploss_status ploss_cuda_gemm(ploss_ctx_t *ctx, const ploss_gemm_problem *p)
{
    if (p->k == 0 || p->alpha == 0.0) { /* no product: c ← beta·c, as BLAS (and the CPU) */
        switch (p->c_dtype) {
        case PLOSS_F32: launch_scale<float>(ctx, p); break;
        case PLOSS_F16: launch_scale<__half>(ctx, p); break;
        case PLOSS_BF16: launch_scale<__nv_bfloat16>(ctx, p); break;
        default: launch_scale<double>(ctx, p); break;
        }
        return ploss_cuda_check_launch("gemm (k = 0 or alpha = 0: scale)");
    }
    cublasHandle_t h = nullptr;
    ploss_status st = handle_of(ctx, &h);
    if (st != PLOSS_OK)
        return st;
    const cublasOperation_t op_a = p->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = p->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cudaDataType_t tab = data_type(p->ab_dtype), tc = data_type(p->c_dtype);
    cublasStatus_t s;
    if (p->ab_dtype == PLOSS_F64) {
        const double alpha = p->alpha, beta = p->beta;
        s = cublasGemmEx(h, op_b, op_a, (int)p->n, (int)p->m, (int)p->k, &alpha, p->b, tab, (int)p->ldb,
                         p->a, tab, (int)p->lda, &beta, p->c, tc, (int)p->ldc, CUBLAS_COMPUTE_64F,
                         CUBLAS_GEMM_DEFAULT);
    } else {
        const float alpha = (float)p->alpha, beta = (float)p->beta;
        s = cublasGemmEx(h, op_b, op_a, (int)p->n, (int)p->m, (int)p->k, &alpha, p->b, tab, (int)p->ldb,
                         p->a, tab, (int)p->lda, &beta, p->c, tc, (int)p->ldc, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT);
    }
    if (s != CUBLAS_STATUS_SUCCESS)
        return blas_error(s, "cublasGemmEx");
    return PLOSS_OK;
}

extern "C" int ploss_cuda_sm90a_serves(int device)
{
    int major = 0, minor = 0;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess;
    (void)cudaGetLastError();
    return ok && major == 9 && minor == 0; /* sm_90a machine code only */
}

} // namespace gemm_kernels
} // namespace ploss_support
