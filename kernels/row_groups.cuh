/*
 * row_groups.cuh — the row-walking shapes shared by kernels/softmax2.cu and
 * kernels/taylor.cu.  A row (the C values of one sample along the class axis) is walked
 * by a group of G lanes of a 256-thread block:
 *   G = 1    one thread per row: for class-strided rows (N×C×H×W, transposed N×C), a warp
 *            then reads 32 neighbouring rows' class j at once (coalesced);
 *   G = 32   a warp per row: class-contiguous rows with C <= 2048;
 *   G = 256  the whole block per row: class-contiguous rows with C > 2048.
 * Internal; namespace ploss_cuda.
 */
#ifndef PLOSS_KERNELS_ROW_GROUPS_CUH
#define PLOSS_KERNELS_ROW_GROUPS_CUH

#include "common.cuh"

namespace ploss_cuda {

constexpr int ROW_THREADS = 256; /* threads per block of every row kernel */

/* The group size for rows of C values with class stride sc. */
inline int row_group_size(int64_t sc, int64_t C)
{
    if (sc != 1 || C == 1)
        return 1;
    return C <= 2048 ? 32 : ROW_THREADS;
}

/* Reduce v over the G lanes of a row group; every lane gets the result.  All lanes of
 * the group must call it (G = ROW_THREADS: the whole block, it synchronises). */
template <int G, class T, class Op> __device__ __forceinline__ T group_all_reduce(T v, Op op)
{
    if constexpr (G == ROW_THREADS)
        return block_all_reduce<ROW_THREADS>(v, op);
    else if constexpr (G > 1)
        return warp_all_reduce<G>(v, op);
    else
        return v;
}

/* Host: call f(std::integral_constant<int, G>{}) with the group size G chosen at run time. */
template <class F> ploss_status with_row_group(int G, F &&f)
{
    if (G == 1)
        return f(std::integral_constant<int, 1>{});
    if (G == 32)
        return f(std::integral_constant<int, 32>{});
    return f(std::integral_constant<int, ROW_THREADS>{});
}

} // namespace ploss_cuda

#endif
