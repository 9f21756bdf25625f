/*
 * row_groups.cuh — the row-walking shapes shared by kernels/rows/sample_policies.cu and
 * kernels/support/taylor.cu.  A row (the C values of one sample along the class axis) is walked
 * by a group of G lanes of a 256-thread block:
 *   G = 1    one thread per row: for class-strided rows (N×C×H×W, transposed N×C), a warp
 *            then reads 32 neighbouring rows' class j at once (coalesced);
 *   G = 32   a warp per row: class-contiguous rows with C <= 2048;
 *   G = 256  the whole block per row: class-contiguous rows with C > 2048.
 * RowView<G> walks a row: each pass reads memory (the first from DRAM, the next ones mostly
 * from L1/L2).  Small C is served by the register kernels of sample_policies.cu instead.
 * Internal; namespace ploss_cuda.
 */
#ifndef PLOSS_KERNELS_ROW_GROUPS_CUH
#define PLOSS_KERNELS_ROW_GROUPS_CUH

#include <type_traits>

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

/* One lane's view of a row of C values at x[xo + j·sc] (see the top of this file). */
template <int G, class A> struct RowView {
    /* f(j, x_j) for each class j of this lane (j ≡ lane mod G), in increasing j. */
    template <class T, class F>
    __device__ __forceinline__ void each(const T *x, int64_t xo, int64_t sc, int64_t C, int lane, F &&f) const
    {
        for (int64_t j = lane; j < C; j += G)
            f(j, load_as<A>(x, xo + j * sc));
    }
};

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
