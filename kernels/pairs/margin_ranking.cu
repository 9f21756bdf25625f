/*
 * margin_ranking.cu — CUDA backend of the margin ranking and distance ratio losses
 * (core/engines/pairs.h).
 *
 * One thread per element in a grid-stride loop over the collapsed shape: x1, x2 and y (margin
 * ranking) read once, the element's loss and both gradients from ploss_margin_ranking_elem or
 * ploss_distance_ratio_elem in f64 (the maths the CPU backend runs, so both give the same
 * values; a few operations per element of a memory-bound pass).  Reduced losses: each thread
 * adds its elements' losses in double, a block reduction gives one partial per block, and one
 * block adds the partials in a fixed order.  The grid depends on the element count only:
 * deterministic, no atomics.
 */
#include "pairs.cuh"
#include "partials.cuh"
#include "pairs.h"

namespace ploss_cuda {
namespace margin_ranking_kernels {
namespace {

constexpr int MR_THREADS = 256;

/* Offset (elements) of element k, row-major over the collapsed shape, for strides st. */
__device__ __forceinline__ int64_t offset_of(const ploss_margin_ranking_problem &p, const int64_t *st, int64_t k)
{
    if (p.ndim == 1)
        return k * st[0];
    int64_t off = 0;
    for (int d = p.ndim - 1; d >= 0; --d) {
        off += (k % p.shape[d]) * st[d];
        k /= p.shape[d];
    }
    return off;
}

/* omega: ω of a fused pass (backward reads the upstream gradient itself). */
template <class T>
__global__ void __launch_bounds__(MR_THREADS) margin_ranking_kernel(const ploss_margin_ranking_problem p,
                                                                    double omega, double *partials)
{
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD, want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool none = p.reduction == PLOSS_REDUCTION_NONE;
    omega = pairs::reduced_backward_omega(p, omega, p.numel);
    const T *x1 = (const T *)p.x1, *x2 = (const T *)p.x2;
    double acc = 0.0;
    for (int64_t k = thread_index(); k < p.numel; k += grid_stride()) {
        const double a = (double)to_acc(x1[offset_of(p, p.x1_st, k)]);
        const double b = (double)to_acc(x2[offset_of(p, p.x2_st, k)]);
        const double w =
            p.pass == PLOSS_PASS_BACKWARD && none ? load_dyn(p.grad_loss, p.gl_dtype, offset_of(p, p.gl_st, k)) : omega;
        double g1;
        const double l = p.kind == PLOSS_SCORE_PAIR_DISTANCE_RATIO
                             ? ploss_distance_ratio_elem(a, b, w, &g1)
                             : ploss_margin_ranking_elem(a, b, load_dyn(p.y, p.y_dtype, offset_of(p, p.y_st, k)),
                                                         p.margin, w, &g1);
        if (want_loss) {
            if (none)
                store_dyn(p.loss, p.loss_dtype, offset_of(p, p.l_st, k), l);
            else
                acc += l;
        }
        if (want_grad) {
            ((T *)p.g1)[offset_of(p, p.g1_st, k)] = convert<T>(g1);
            ((T *)p.g2)[offset_of(p, p.g2_st, k)] = convert<T>(-g1);
        }
    }
    if (!partials)
        return;
    acc = block_reduce<MR_THREADS>(acc, SumOp());
    if (threadIdx.x == 0)
        partials[blockIdx.x] = acc;
}

} // namespace

extern "C" ploss_status ploss_cuda_margin_ranking(ploss_ctx_t *ctx, const ploss_margin_ranking_problem *p)
{
    const unsigned blocks = grid_blocks(p->numel, MR_THREADS, 4096);
    return with_block_partials(ctx, p->pass, p->reduction, p->scale, p->numel, p->numel, blocks, p->loss,
                               p->loss_dtype, [&](double omega, double *partials) {
        return dispatch_float(p->dtype, "input1", [&](auto tag) {
            using T = typename decltype(tag)::type;
            margin_ranking_kernel<T><<<blocks, MR_THREADS, 0, stream_of(ctx)>>>(*p, omega, partials);
            return check_launch("margin_ranking_kernel");
        });
    });
}

} // namespace margin_ranking_kernels
} // namespace ploss_cuda
