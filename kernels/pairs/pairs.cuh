/*
 * pairs.cuh — what the CUDA backends of the pairs shape (kernels/pairs/) share: one warp
 * per row in a grid-stride loop, the gradient factor of a reduced backward, and the carving
 * of one workspace into aligned pieces.
 * Internal; included by .cu files only.
 */
#ifndef PLOSS_KERNELS_PAIRS_CUH
#define PLOSS_KERNELS_PAIRS_CUH

#include "common.cuh"

namespace ploss_cuda {
namespace pairs {

constexpr int WARPS = 8;
constexpr int THREADS = WARPS * 32;
constexpr int64_t MAX_BLOCKS = 8192;

/* The row of this warp, and the stride of the grid-stride loop over rows. */
__device__ __forceinline__ int64_t warp_row() { return (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5); }
__device__ __forceinline__ int64_t warp_rows_stride() { return (int64_t)gridDim.x * WARPS; }

/* The gradient factor ω of a kernel of problem p (fields pass, reduction, grad_loss,
 * gl_dtype): in a reduced backward the scalar upstream gradient, read here (no host sync),
 * divided by `count` for 'mean'; else `omega` as given (a fused pass's, 0 in forward; 'none'
 * reads each element's upstream gradient itself). */
template <class P>
__device__ __forceinline__ double reduced_backward_omega(const P &p, double omega, int64_t count)
{
    if (p.pass != PLOSS_PASS_BACKWARD || p.reduction == PLOSS_REDUCTION_NONE)
        return omega;
    const double up = load_dyn(p.grad_loss, p.gl_dtype, 0);
    return p.reduction == PLOSS_REDUCTION_MEAN ? up / (double)count : up;
}

/* Every lane of each warp holds its warp's sum `acc`: the block's partial, the warps' sums
 * added in warp order (the same on every run), goes to partials[blockIdx.x]. */
__device__ __forceinline__ void store_block_partial(double acc, double *partials)
{
    __shared__ double warp_sums[WARPS];
    if ((threadIdx.x & 31) == 0)
        warp_sums[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int k = 0; k < WARPS; ++k)
            s += warp_sums[k];
        partials[blockIdx.x] = s;
    }
}

/* One block of COUNT_THREADS: the rows of problem p (fields N, C, labels, label_dtype, y_sn,
 * ignore_index) whose label is not ignore_index into divisor[0], 1/divisor[0] (0 when
 * none) into divisor[1] — the 'mean' divisor in fixed order — and the first label outside
 * [0, C) to the error slot. */
constexpr int COUNT_THREADS = 1024;
template <class P>
__global__ void __launch_bounds__(COUNT_THREADS) count_labels_kernel(const P p, double *divisor, int64_t *slot)
{
    double count = 0.0;
    for (int64_t i = threadIdx.x; i < p.N; i += COUNT_THREADS) {
        const int64_t y = load_int_dyn(p.labels, p.label_dtype, i * p.y_sn);
        if (y == p.ignore_index)
            continue;
        if (y < 0 || y >= p.C)
            report_invalid_label(slot, y);
        else
            count += 1.0;
    }
    count = block_reduce<COUNT_THREADS>(count, SumOp());
    if (threadIdx.x == 0) {
        divisor[0] = count;
        divisor[1] = count > 0.0 ? 1.0 / count : 0.0;
    }
}

/* Blocks for one warp per row of n rows. */
inline unsigned row_blocks(int64_t n) { return grid_blocks(n, WARPS, MAX_BLOCKS); }

/* Pieces of one workspace, each 256-byte aligned: run once with base = nullptr to size it
 * (used + 256), then over the workspace. */
struct carve {
    char *base;
    size_t used;
    template <class U> U *take(size_t n)
    {
        used = align_up(used);
        U *r = base ? (U *)(base + used) : nullptr;
        used += n * sizeof(U);
        return r;
    }
};

} // namespace pairs
} // namespace ploss_cuda

#endif
