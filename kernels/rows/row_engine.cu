/*
 * row_engine.cu — the kernels of the row engine (row_engine.cuh) that do not depend on
 * the policy or the dtype: final fixed-order reductions and the class-weight conversion.
 */
#include "row_engine.cuh"

namespace ploss_cuda {
namespace row_engine_kernels {
namespace {

using namespace row_engine;

/* Fixed-order sum of `count` doubles by one block (valid in thread 0). */
__device__ __forceinline__ double sum_fixed(const double *v, int64_t count)
{
    double acc = 0.0;
    for (int64_t k = threadIdx.x; k < count; k += kFinalThreads)
        acc += v[k];
    return block_reduce<kFinalThreads>(acc, SumOp{});
}

__global__ void __launch_bounds__(kFinalThreads) sum_partials(const double *part, const int64_t count, double *out)
{
    const double t = sum_fixed(part, count);
    if (threadIdx.x == 0)
        *out = t;
}

/* loss = Σ partials, divided by the divisor for 'mean' (ploss_rows_mean: NaN over a divisor of 0). */
__global__ void __launch_bounds__(kFinalThreads)
    finalize(const double *part, const int64_t count, const double *divisor, void *loss, const ploss_dtype loss_dtype)
{
    const double total = sum_fixed(part, count);
    if (threadIdx.x == 0) {
        const double v = divisor ? ploss_rows_mean(total, *divisor) : total;
        store_state(loss, loss_dtype, 0, v);
    }
}

/* Class weights (any float dtype, strided) → f32 in `out`, and their sum in fixed order. */
__global__ void __launch_bounds__(kFinalThreads)
    convert_class_weights(const void *w, const ploss_dtype dt, const int64_t ws, const int64_t C, float *out,
                          double *sum)
{
    double acc = 0.0;
    for (int64_t j = threadIdx.x; j < C; j += kFinalThreads) {
        const float v = load_float_dyn<float>(w, dt, j * ws);
        out[j] = v;
        acc += (double)v;
    }
    const double t = block_reduce<kFinalThreads>(acc, SumOp{});
    if (threadIdx.x == 0)
        *sum = t;
}

} // namespace
} // namespace row_engine_kernels

namespace row_engine {

ploss_status launch_sum_partials(const double *part, int64_t count, double *out, cudaStream_t stream)
{
    row_engine_kernels::sum_partials<<<1, kFinalThreads, 0, stream>>>(part, count, out);
    return check_launch("row engine (label pass)");
}

ploss_status launch_finalize(const double *part, int64_t count, const double *divisor, void *loss,
                             ploss_dtype loss_dtype, cudaStream_t stream)
{
    row_engine_kernels::finalize<<<1, kFinalThreads, 0, stream>>>(part, count, divisor, loss, loss_dtype);
    return check_launch("row engine (final reduction)");
}

ploss_status launch_convert_class_weights(const void *w, ploss_dtype dt, int64_t ws, int64_t C, float *out,
                                          double *sum, cudaStream_t stream)
{
    row_engine_kernels::convert_class_weights<<<1, kFinalThreads, 0, stream>>>(w, dt, ws, C, out, sum);
    return check_launch("row engine (class weights)");
}

} // namespace row_engine
} // namespace ploss_cuda
