/*
 * partials.cuh — the last step of a reduced loss whose kernels left one partial sum (double)
 * per block: one block adds the partials in index order and stores Σ / divisor as the loss
 * (0/0 = NaN for an empty 'mean'), so the value does not depend on timing or on the card;
 * with_block_partials: the host side around such a kernel.  Internal; the kernel is in
 * kernels/runtime.cu.
 */
#ifndef PLOSS_KERNELS_PARTIALS_CUH
#define PLOSS_KERNELS_PARTIALS_CUH

#include <cuda_runtime.h>

#include "common.cuh"
#include "internal.h"

namespace ploss_cuda {

/* loss[0] = Σ partials / divisor, or / *divisor_dev where that is given (on the device;
 * NaN where it is 0, ploss's mean over nothing). */
ploss_status launch_loss_from_partials(const double *partials, int64_t nparts, double divisor, void *loss,
                                       ploss_dtype loss_dtype, cudaStream_t stream,
                                       const double *divisor_dev = nullptr);

/* A kernel of `blocks` blocks that leaves one partial loss sum per block, with its host side:
 * the partials in the workspace where the pass gives a reduced loss (not backward, not
 * 'none'), the fused pass's gradient factor ω (scale / mean_divisor for 'mean', 0 when that
 * divisor is 0, scale for 'sum' and 'none'; 0 outside a fused pass), launch(ω, partials)
 * (partials null where no reduced loss is wanted), then the loss from the partials (Σ /
 * mean_divisor for 'mean').  Nothing runs for no elements and no reduced loss. */
template <class Launch>
ploss_status with_block_partials(ploss_ctx_t *ctx, ploss_pass pass, ploss_reduction reduction, double scale,
                                 int64_t elements, int64_t mean_divisor, unsigned blocks, void *loss,
                                 ploss_dtype loss_dtype, Launch &&launch)
{
    const bool need_partials = pass != PLOSS_PASS_BACKWARD && reduction != PLOSS_REDUCTION_NONE;
    if (elements == 0 && !need_partials)
        return PLOSS_OK;
    double *partials = nullptr;
    if (need_partials) {
        void *ws = nullptr;
        const ploss_status st = ploss_workspace(ctx, (size_t)blocks * sizeof(double), &ws);
        if (st)
            return st;
        partials = (double *)ws;
    }
    double omega = 0.0;
    if (pass == PLOSS_PASS_FUSED)
        omega = reduction == PLOSS_REDUCTION_MEAN ? (mean_divisor ? scale / (double)mean_divisor : 0.0) : scale;
    const ploss_status st = launch(omega, partials);
    if (st || !need_partials)
        return st;
    const double divisor = reduction == PLOSS_REDUCTION_MEAN ? (double)mean_divisor : 1.0;
    return launch_loss_from_partials(partials, (int64_t)blocks, divisor, loss, loss_dtype, stream_of(ctx));
}

} // namespace ploss_cuda

#endif
