/*
 * loss_check.h — validation helpers shared by the loss front ends (core/<family>.c): shape
 * and dtype checks with uniform messages, collapsing dims into one strided axis, aliasing
 * checks over a list of outputs, and the CPU label scan.  They follow the checks of
 * core/cross_entropy.c (which keeps private copies).  Internal.
 */
#ifndef PLOSS_LOSS_CHECK_H
#define PLOSS_LOSS_CHECK_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SHAPE error "<name>: expected <expect>, got <description of got>". */
ploss_status ploss_check_shape_error(const char *name, const char *expect, const ploss_view *got);

/* Collapse dims [first, end) of v into one strided axis: *stride is its stride (0 when
 * every dim is 1).  LAYOUT error when the dims cannot be walked as one axis. */
ploss_status ploss_check_collapse(const ploss_view *v, int first, int end, const char *name,
                                  int64_t *stride);

/* v must have the sample shape of the N×C×d1×…×dk input x: x's shape without axis 1. */
ploss_status ploss_check_sample_shape(const ploss_view *v, const ploss_view *x, const char *name);

/* v must have x's shape with axis 1 of size `size` (size < 0: x's own size). */
ploss_status ploss_check_shape_axis1(const ploss_view *v, const ploss_view *x, int64_t size,
                                     const char *name, const char *what);

/* Loss-shaped tensors (loss, grad_loss): the sample shape for NONE, one element else. */
ploss_status ploss_check_loss_shape(const ploss_view *v, const ploss_view *x, ploss_reduction r,
                                    const char *name);

/* DTYPE error unless v->dtype == want. */
ploss_status ploss_check_dtype(const ploss_view *v, ploss_dtype want, const char *name);

/* Every non-NULL output must not overlap any non-NULL input nor another output.  The pair
 * (out index `inplace_out`, in index `inplace_in`) is skipped when both are >= 0 and the
 * two views are the same tensor (a requested in-place gradient). */
ploss_status ploss_check_aliasing(const ploss_view *const *outs, const char *const *out_names, int nouts,
                                  const ploss_view *const *ins, const char *const *in_names, int nins,
                                  int inplace_out, int inplace_in);

/* Elementwise losses (one input shape for every tensor, e.g. the sigmoid family).
 * v must have exactly x's shape: SHAPE error "<name>: expected the input's shape [..]". */
ploss_status ploss_check_input_shape(const ploss_view *v, const ploss_view *x, const char *name);

/* Loss-shaped tensors of an elementwise loss: x's shape for NONE, one element else. */
ploss_status ploss_check_elementwise_loss_shape(const ploss_view *v, const ploss_view *x, ploss_reduction r,
                                                const char *name);

/* Strides st[0..PLOSS_MAX_DIMS) (x's rank, 0 in broadcast dims, 0 beyond) of a weight-like
 * tensor v broadcast over the input x: (a) x's rank with sizes 1 or x's, (b) a vector of
 * C = size of axis 1 (1 below rank 2) or of length 1 (along axis 1, as PyTorch's
 * pos_weight), (c) a 0-d tensor.  SHAPE error otherwise. */
ploss_status ploss_check_broadcast_strides(const ploss_view *v, const ploss_view *x, const char *name,
                                           int64_t st[PLOSS_MAX_DIMS]);

/* CPU labels of an (n, s)-indexed label tensor: each must be in [0, C) or ignore_index.
 * INVALID_LABEL naming the first offending sample otherwise. */
ploss_status ploss_check_labels_cpu(const void *t, ploss_dtype dt, int64_t N, int64_t S, int64_t sn,
                                    int64_t ss, int64_t C, int64_t ignore_index);

/* Target coefficients (a, b) of a smoothing convention: t_j = a·[j = y] + b (ploss.h).
 * UNIFORM_OTHERS with C = 1 gives b = 0 (callers reject it when ε > 0). */
void ploss_smoothing_coefficients(ploss_smoothing_convention conv, double eps, int64_t C, double *a,
                                  double *b);

#ifdef __cplusplus
}
#endif

#endif
