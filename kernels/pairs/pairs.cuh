/*
 * pairs.cuh — what the CUDA backends of the pairs shape (kernels/pairs/) share: one warp
 * per row in a grid-stride loop, and the carving of one workspace into aligned pieces.
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

/* Blocks for one warp per row of n rows. */
inline unsigned row_blocks(int64_t n) { return grid_blocks(n, WARPS, MAX_BLOCKS); }

/* Pieces of one workspace, each 256-byte aligned: run once with base = nullptr to size it
 * (used + 256), then over the workspace. */
struct carve {
    char *base;
    size_t used;
    template <class U> U *take(size_t n)
    {
        used = (used + 255) & ~(size_t)255;
        U *r = base ? (U *)(base + used) : nullptr;
        used += n * sizeof(U);
        return r;
    }
};

} // namespace pairs
} // namespace ploss_cuda

#endif
