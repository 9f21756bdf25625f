/*
 * one_hot.cu — CUDA backend of ploss_one_hot (problem in core/support/one_hot.h).
 * One thread per output element (n, j, s) in row-major order, so the writes are coalesced
 * for both the N×C and the N×C×d1×…×dk layouts; the label of a sample is read by each of
 * its C threads (cached).  An invalid label is reported once (by its j = 0 thread) through
 * the context's error slot and its row is written as zeros.
 */
#include <type_traits>

#include "one_hot.h"
#include "common.cuh"

namespace ploss_cuda {
namespace one_hot_kernels {
namespace {

template <class O> __device__ __forceinline__ O out_value(double v)
{
    if constexpr (std::is_integral<O>::value)
        return (O)v;
    else
        return convert<O>(v);
}

template <class O, class L>
__global__ void one_hot_kernel(ploss_one_hot_problem p, int64_t *slot)
{
    const int64_t total = p.N * p.C * p.S;
    const O on = out_value<O>(p.a + p.b), off = out_value<O>(p.b), zero = out_value<O>(0.0);
    for (int64_t k = thread_index(); k < total; k += grid_stride()) {
        const int64_t s = k % p.S, r = k / p.S, j = r % p.C, n = r / p.C;
        const int64_t y = (int64_t)((const L *)p.t)[n * p.t_sn + s * p.t_ss];
        bool valid = y != p.ignore_index;
        if (valid && (y < 0 || y >= p.C)) {
            if (j == 0)
                report_invalid_label(slot, y);
            valid = false;
        }
        ((O *)p.out)[n * p.o_sn + j * p.o_sc + s * p.o_ss] = valid ? (j == y ? on : off) : zero;
    }
}

} // namespace

extern "C" ploss_status ploss_cuda_one_hot(ploss_ctx_t *ctx, const ploss_one_hot_problem *p)
{
    const int64_t total = p->N * p->C * p->S;
    if (total == 0)
        return PLOSS_OK;
    const int threads = 256;
    return dispatch_any(p->out_dtype, "out", [&](auto otag) {
        using O = typename decltype(otag)::type;
        return dispatch_index(p->t_dtype, "target", [&](auto ltag) {
            using L = typename decltype(ltag)::type;
            one_hot_kernel<O, L><<<grid_blocks(total, threads), threads, 0, stream_of(ctx)>>>(*p, ctx->error_slot);
            return check_launch("one_hot_kernel");
        });
    });
}

} // namespace one_hot_kernels
} // namespace ploss_cuda
