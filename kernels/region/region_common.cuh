/*
 * region_common.cuh — device helpers shared by the CUDA backends of the region kernel shape
 * (the .cu files of kernels/region/).  Internal; names in namespace ploss_cuda::region.
 *
 *  - m_exp / m_log / m_log1p / m_pow: float and double overloads of the libdevice functions;
 *  - pixel_at(p, q, sn, ss): the offset of pixel q = n·S + s (core/engines/region.h);
 *  - load_label<TI>(p, q, slot): the class of pixel q, -1 when ignored; a label outside
 *    [0, C) that is not ignore_index is reported in the error slot (when given) and treated
 *    as ignored; load_label_at<TI>(p, off, slot): the same for the label at element offset
 *    off of the target (callers that know the pixel's row and column: no division);
 *  - store_reduced_loss<THREADS>(p, v, partial, ticket, divisor): a kernel's reduced loss
 *    from its blocks' partial sums, finished by the last block to arrive;
 *  - grad_overlaps_input(p, elem): whether the gradient's elements may share memory with
 *    the input's (an in-place pass), from their address ranges;
 *  - WindowWork, window_workspace(ctx, p, blocks, elem, w): the affinity losses' workspace.
 */
#ifndef PLOSS_KERNELS_REGION_COMMON_CUH
#define PLOSS_KERNELS_REGION_COMMON_CUH

#include "common.cuh"
#include "region.h"

namespace ploss_cuda {
namespace region {

__device__ __forceinline__ float m_exp(float v) { return expf(v); }
__device__ __forceinline__ double m_exp(double v) { return exp(v); }
__device__ __forceinline__ float m_log(float v) { return logf(v); }
__device__ __forceinline__ double m_log(double v) { return log(v); }
__device__ __forceinline__ float m_log1p(float v) { return log1pf(v); }
__device__ __forceinline__ double m_log1p(double v) { return log1p(v); }
__device__ __forceinline__ float m_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double m_pow(double a, double b) { return pow(a, b); }

__device__ __forceinline__ int64_t pixel_at(const ploss_region_problem &p, int64_t q, int64_t sn, const int64_t *ss)
{
    return ploss_region_pixel_at(&p, q, sn, ss);
}

template <class TI>
__device__ __forceinline__ int64_t load_label_at(const ploss_region_problem &p, int64_t off, int64_t *error_slot)
{
    const int64_t y = (int64_t)((const TI *)p.t)[off];
    if (y == p.ignore_index)
        return -1;
    if (y < 0 || y >= p.C) {
        report_invalid_label(error_slot, y);
        return -1;
    }
    return y;
}

template <class TI>
__device__ __forceinline__ int64_t load_label(const ploss_region_problem &p, int64_t q, int64_t *error_slot)
{
    return load_label_at<TI>(p, pixel_at(p, q, p.t_sn, p.t_ss), error_slot);
}

/* The reduced loss of a kernel whose blocks each hold a part of it (`v`, every thread's
 * share): each block stores its sum in partial[blockIdx.x], then the last block to arrive
 * (the context's arrival ticket: last_block_arrives) adds the partials in a fixed order
 * (last_block_sum) and stores Σ, or Σ/divisor for MEAN, as the loss.  Deterministic, no
 * float atomics.  Every thread of the block calls it. */
template <int THREADS, class A>
__device__ void store_reduced_loss(const ploss_region_problem &p, A v, double *partial, unsigned long long *ticket,
                                   double divisor)
{
    const A total = block_reduce<THREADS>(v, SumOp());
    if (threadIdx.x == 0)
        partial[blockIdx.x] = (double)total;
    if (!last_block_arrives(ticket, gridDim.x))
        return;
    const double sum = last_block_sum<THREADS>(partial, gridDim.x);
    if (threadIdx.x == 0)
        store_dyn(p.loss, p.loss_dtype, 0, p.reduction == PLOSS_REDUCTION_MEAN ? sum / divisor : sum);
}

/* The byte range [lo, hi) spanned by an N×C×(spatial) tensor at base with these strides. */
inline void byte_range(const ploss_region_problem &p, const void *base, size_t elem, int64_t sn, int64_t sc,
                       const int64_t *ss, uintptr_t &lo, uintptr_t &hi)
{
    int64_t mn = 0, mx = 0;
    const auto span = [&](int64_t extent, int64_t stride) {
        const int64_t d = (extent - 1) * stride;
        (d < 0 ? mn : mx) += d;
    };
    span(p.N, sn);
    span(p.C, sc);
    for (int d = 0; d < p.sdim; ++d)
        span(p.sshape[d], ss[d]);
    lo = (uintptr_t)base + (uintptr_t)(mn * (int64_t)elem);
    hi = (uintptr_t)base + (uintptr_t)((mx + 1) * (int64_t)elem);
}

inline bool grad_overlaps_input(const ploss_region_problem &p, size_t elem)
{
    if (!p.grad)
        return false;
    uintptr_t xl, xh, gl, gh;
    byte_range(p, p.x, elem, p.x_sn, p.x_sc, p.x_ss, xl, xh);
    byte_range(p, p.grad, elem, p.g_sn, p.g_sc, p.g_ss, gl, gh);
    return xl < gh && gl < xh;
}

/* The workspace of the 2-D neighbourhood losses (affinity, affinity field): a label map of
 * int32 classes per pixel, a 64-bit counter (zeroed on the stream: the pixels or pairs the
 * 'mean' divides by), the context's arrival ticket, a loss partial per block, and, when
 * the gradient overwrites the input (in place), a contiguous N×C×S copy of the input for
 * the neighbours' logits (elem bytes each; null otherwise). */
struct WindowWork {
    int32_t *label;            /* [n·S + s] */
    unsigned long long *count; /* zeroed, then counted by the label pass */
    unsigned long long *ticket;
    double *partial;           /* [block] */
    void *copy;
};
inline ploss_status window_workspace(ploss_ctx_t *ctx, const ploss_region_problem &p, int64_t blocks, size_t elem,
                                     WindowWork &w)
{
    const int64_t NS = p.N * p.S;
    const bool in_place = grad_overlaps_input(p, elem);
    const size_t b_lab = align_up((size_t)NS * 4), b_cnt = 256, b_part = align_up((size_t)blocks * sizeof(double)),
                 b_copy = in_place ? align_up((size_t)(NS * p.C) * elem) : 0;
    char *ws = nullptr;
    const ploss_status st = ploss_workspace(ctx, b_lab + b_cnt + b_part + b_copy, (void **)&ws);
    if (st)
        return st;
    w.label = (int32_t *)ws;
    w.count = (unsigned long long *)(ws + b_lab);
    w.ticket = arrival_ticket(ctx);
    w.partial = (double *)(ws + b_lab + b_cnt);
    w.copy = in_place ? ws + b_lab + b_cnt + b_part : nullptr;
    return ploss_cuda_memset(w.count, 0, sizeof *w.count, stream_of(ctx));
}

} // namespace region
} // namespace ploss_cuda

#endif
