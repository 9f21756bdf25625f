/*
 * sharded.h — the losses sharded over a communicator's ranks (opts.comm; internal), whose
 * fronts are in core/engines/sharded.c: the margin losses and Partial FC (the classes
 * sharded; declared with the margin call in margin_front.h) and InfoNCE (the batch sharded,
 * negatives from every rank).
 */
#ifndef PLOSS_SHARDED_H
#define PLOSS_SHARDED_H

#include "loss.h"
#include "pairs.h"

/* InfoNCE over the ranks: `local` is this rank's status from its own checks, p its problem
 * on its own tensors (NULL unless local is PLOSS_OK), key and gl its key and grad_loss
 * views, grad_key its gradient tensor of the key.  Every rank learns every rank's status
 * and call before any of them computes, so a refusal on one is an error on all. */
ploss_status ploss_infonce_run_sharded(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_params *o,
                                       const ploss_infonce_problem *p, const ploss_view *key, const ploss_view *gl,
                                       const DLTensor *grad_key, ploss_status local);

#endif
