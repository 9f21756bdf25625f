/*
 * partials.cuh — the last step of a reduced loss whose kernels left one partial sum (double)
 * per block: one block adds the partials in index order and stores Σ / divisor as the loss
 * (0/0 = NaN for an empty 'mean'), so the value does not depend on timing or on the card.
 * Internal; the kernel is in kernels/runtime.cu.
 */
#ifndef PLOSS_KERNELS_PARTIALS_CUH
#define PLOSS_KERNELS_PARTIALS_CUH

#include <cuda_runtime.h>

#include "internal.h"

namespace ploss_cuda {

ploss_status launch_loss_from_partials(const double *partials, int64_t nparts, double divisor, void *loss,
                                       ploss_dtype loss_dtype, cudaStream_t stream);

} // namespace ploss_cuda

#endif
