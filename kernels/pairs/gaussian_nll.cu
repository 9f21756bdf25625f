/*
 * gaussian_nll.cu — CUDA backend of the Gaussian negative log-likelihood
 * (core/engines/pairs.h), with the maths the CPU backend runs (ploss_gaussian_nll_elem, in
 * f64 per element), so both give the same values.
 *
 * One variance per element: one thread per element in a grid-stride loop.  One variance per
 * row of the last axis: one warp per row (pairs.cuh), its lanes along the row, the
 * variance's gradient the warp's sum in f64, written by lane 0.  Reduced losses: a block
 * partial per block (the warps' sums in warp order) and one block adding the partials in a
 * fixed order; the grid depends on the sizes only: deterministic, no float atomics.  A
 * negative variance makes its elements' loss and gradients NaN and goes to the context's
 * error slot (PLOSS_SLOT_NEGATIVE_VARIANCE, the smallest such index in var's row-major
 * order), reported by the next synchronising call, where the CPU backend refuses the call
 * before writing.
 */
#include <math_constants.h>

#include "pairs.cuh"
#include "partials.cuh"
#include "pairs.h"

namespace ploss_cuda {
namespace gaussian_nll_kernels {
namespace {

using pairs::THREADS;

/* Element j of the row whose offsets are o: its loss into the 'none' loss or *acc, its
 * gradients for μ and y, and the return value ∂ℓ/∂σ² (times the upstream factor).  v: the
 * variance, already read; `negative`: whether it is < 0 (NaN results). */
template <class T>
__device__ __forceinline__ double element(const ploss_gaussian_nll_problem &p, const ploss_gaussian_row &o,
                                          int64_t j, double v, bool negative, double omega, double *acc)
{
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD, want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool none = p.reduction == PLOSS_REDUCTION_NONE;
    const double x = (double)to_acc(((const T *)p.x)[o.x + j * p.x_sd]);
    const double y = (double)to_acc(((const T *)p.t)[o.t + j * p.t_sd]);
    const double w = p.pass == PLOSS_PASS_BACKWARD && none ? load_dyn(p.grad_loss, p.gl_dtype, o.gl + j * p.gl_sd)
                                                           : omega;
    double gx, gv;
    double l = ploss_gaussian_nll_elem(x, y, v, p.eps, p.full, w, &gx, &gv);
    if (negative)
        l = gx = gv = CUDART_NAN;
    if (want_loss) {
        if (none)
            store_dyn(p.loss, p.loss_dtype, o.l + j * p.l_sd, l);
        else
            *acc += l;
    }
    if (want_grad) {
        ((T *)p.gx)[o.gx + j * p.gx_sd] = convert<T>(gx);
        ((T *)p.gt)[o.gt + j * p.gt_sd] = convert<T>(-gx);
    }
    return gv;
}

/* A negative variance, element `index` of var in row-major order, to the error slot: the
 * smallest index of all reporters is kept (the CPU names the first one too), as
 * INT64_MAX − index under atomicMax (context.c decodes it), whatever the order the threads
 * arrive in.  A slot already holding another kind of error is left alone. */
__device__ __forceinline__ void report_negative_variance(int64_t *slot, int64_t index)
{
    if (!slot)
        return;
    const unsigned long long prev =
        atomicCAS((unsigned long long *)slot, 0ull, (unsigned long long)PLOSS_SLOT_NEGATIVE_VARIANCE);
    if (prev == 0ull || prev == (unsigned long long)PLOSS_SLOT_NEGATIVE_VARIANCE)
        atomicMax((long long *)(slot + 1), (long long)(INT64_MAX - index));
}

/* One variance per element: a thread per element. */
template <class T>
__global__ void __launch_bounds__(THREADS) elementwise_kernel(const ploss_gaussian_nll_problem p, double omega,
                                                              double *partials, int64_t *slot)
{
    omega = pairs::reduced_backward_omega(p, omega, p.numel);
    double acc = 0.0;
    for (int64_t k = thread_index(); k < p.numel; k += grid_stride()) {
        const int64_t r = k / p.D, j = k - r * p.D;
        const ploss_gaussian_row o = ploss_gaussian_row_offsets(&p, r);
        const double v = (double)to_acc(((const T *)p.v)[o.v + j * p.v_sd]);
        const bool negative = v < 0.0;
        if (negative)
            report_negative_variance(slot, k);
        const double gv = element<T>(p, o, j, v, negative, omega, &acc);
        if (p.pass != PLOSS_PASS_FORWARD)
            ((T *)p.gv)[o.gv + j * p.gv_sd] = convert<T>(gv);
    }
    if (!partials)
        return;
    acc = block_reduce<THREADS>(acc, SumOp());
    if (threadIdx.x == 0)
        partials[blockIdx.x] = acc;
}

/* One variance per row: a warp per row. */
template <class T>
__global__ void __launch_bounds__(THREADS) per_row_kernel(const ploss_gaussian_nll_problem p, double omega,
                                                          double *partials, int64_t *slot)
{
    omega = pairs::reduced_backward_omega(p, omega, p.numel);
    const int lane = threadIdx.x & 31;
    double acc = 0.0;
    for (int64_t r = pairs::warp_row(); r < p.rows; r += pairs::warp_rows_stride()) {
        const ploss_gaussian_row o = ploss_gaussian_row_offsets(&p, r);
        const double v = (double)to_acc(((const T *)p.v)[o.v]);
        const bool negative = v < 0.0;
        if (negative && lane == 0)
            report_negative_variance(slot, r);
        double gv = 0.0;
        for (int64_t j = lane; j < p.D; j += 32)
            gv += element<T>(p, o, j, v, negative, omega, &acc);
        gv = warp_all_reduce<32>(gv, SumOp());
        if (p.pass != PLOSS_PASS_FORWARD && lane == 0)
            ((T *)p.gv)[o.gv] = convert<T>(gv);
    }
    if (!partials)
        return;
    acc = warp_all_reduce<32>(acc, SumOp());
    pairs::store_block_partial(acc, partials);
}

} // namespace

extern "C" ploss_status ploss_cuda_gaussian_nll(ploss_ctx_t *ctx, const ploss_gaussian_nll_problem *p)
{
    const unsigned blocks = p->var_per_row ? grid_blocks(p->rows, pairs::WARPS, pairs::MAX_BLOCKS)
                                           : grid_blocks(p->numel, THREADS, 4096);
    /* rows sharing a variance have its gradient (0) to write even without elements */
    const int64_t work = p->var_per_row ? p->rows : p->numel;
    return with_block_partials(ctx, p->pass, p->reduction, p->scale, work, p->numel, blocks, p->loss, p->loss_dtype,
                               [&](double omega, double *partials) {
        return dispatch_float(p->dtype, "input", [&](auto tag) {
            using T = typename decltype(tag)::type;
            if (p->var_per_row)
                per_row_kernel<T><<<blocks, THREADS, 0, stream_of(ctx)>>>(*p, omega, partials, ctx->error_slot);
            else
                elementwise_kernel<T><<<blocks, THREADS, 0, stream_of(ctx)>>>(*p, omega, partials, ctx->error_slot);
            return check_launch("gaussian_nll");
        });
    });
}

} // namespace gaussian_nll_kernels
} // namespace ploss_cuda
