/*
 * loss_check.h — validation helpers shared by the loss front ends (core/<family>.c): shape
 * and dtype checks with uniform messages, collapsing dims into one strided axis, aliasing
 * checks over a list of outputs, the CPU label scan, label-smoothing options, class
 * vectors (weight / alpha / priors), the elementwise and broadcast checks of the sigmoid
 * family (core/engines/elementwise.c), and the whole check of the per-sample outputs of the
 * softmax-row losses (core/engines/rows.c).
 * Internal.
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
 * every dim is 1).  LAYOUT error when the dims cannot be walked as one axis, naming them
 * 0-based and as Lua's 1-based dims. */
ploss_status ploss_check_collapse(const ploss_view *v, int first, int end, const char *name,
                                  int64_t *stride);

/* v must have the sample shape of the N×C×d1×…×dk input x: x's shape without axis 1. */
ploss_status ploss_check_sample_shape(const ploss_view *v, const ploss_view *x, const char *name);
/* INT64_MIN (the engines' "no ignore_index") is refused as an option value, and i32 labels
 * never equal an ignore_index outside int32's range: such an option would ignore
 * nothing without a word (a typo), so it is refused; `labels` names the label tensor. */
ploss_status ploss_check_ignore_index_fits(int64_t ignore_index, ploss_dtype label_dtype, const char *labels);

/* v must have x's shape with axis 1 of size `size` (size < 0: x's own size). */
ploss_status ploss_check_shape_axis1(const ploss_view *v, const ploss_view *x, int64_t size,
                                     const char *name, const char *what);

/* A fused pass with opts.inplace: grad_input must be the input tensor itself (same data,
 * shape and strides); else PLOSS_ERR_ALIAS naming grad_input. */
ploss_status ploss_check_inplace_request(const ploss_view *grad, const ploss_view *x);

/* Loss-shaped tensors (loss, grad_loss): the sample shape for NONE, one element else. */
ploss_status ploss_check_loss_shape(const ploss_view *v, const ploss_view *x, ploss_reduction r,
                                    const char *name);

/* Loss-shaped tensors of a loss with one value per row of N×D inputs (the pairs and margin
 * shapes): N values for NONE, else a 0-d or 1-element tensor. */
ploss_status ploss_check_row_loss_shape(const ploss_view *v, int64_t N, ploss_reduction r, const char *name);

/* The shape a front accepts for its loss-shaped tensors (the loss, the upstream gradient):
 * PLOSS_OK, or its SHAPE error naming `name`; `arg` holds the front's own facts. */
typedef ploss_status (*ploss_loss_shape_check)(const ploss_view *v, const void *arg, const char *name);

/* The loss-shaped tensors of a call, checked in this order: the loss of a forward or fused
 * pass into l (given, on ctx's device, of dtype `acc`, a shape `shape` accepts, writable),
 * the upstream gradient of a backward pass into gl (given, on ctx's device, a shape `shape`
 * accepts, f32 or f64).  Every front of a loss shape takes them so. */
ploss_status ploss_check_loss_tensors(ploss_ctx_t *ctx, ploss_pass pass, const DLTensor *loss, const DLTensor *grad_loss,
                                      ploss_dtype acc, ploss_loss_shape_check shape, const void *arg, ploss_view *l,
                                      ploss_view *gl);

/* A ploss_loss_shape_check of ploss_check_row_loss_shape: arg is a ploss_row_loss_shape. */
typedef struct ploss_row_loss_shape {
    int64_t N;
    ploss_reduction reduction;
} ploss_row_loss_shape;
ploss_status ploss_row_loss_shape_check(const ploss_view *v, const void *arg, const char *name);

/* ploss_loss_shape_checks of the loss shapes relative to an input x: arg is a
 * ploss_input_loss_shape.  Of a softmax-row loss (ploss_check_loss_shape: the sample shape for
 * NONE) and of an elementwise one (ploss_check_elementwise_loss_shape: x's shape for NONE). */
typedef struct ploss_input_loss_shape {
    const ploss_view *x;
    ploss_reduction reduction;
} ploss_input_loss_shape;
ploss_status ploss_sample_loss_shape_check(const ploss_view *v, const void *arg, const char *name);
ploss_status ploss_elementwise_loss_shape_check(const ploss_view *v, const void *arg, const char *name);

/* DTYPE error unless v->dtype == want. */
ploss_status ploss_check_dtype(const ploss_view *v, ploss_dtype want, const char *name);

/* ±1 labels (the target kind 'signs', of a loss of several inputs or an elementwise one):
 * any float dtype, or i64/i32 as PyTorch's arithmetic promotes them; DTYPE naming target
 * otherwise. */
ploss_status ploss_check_sign_labels(const ploss_view *t);

/* Every non-NULL output must not overlap any non-NULL input nor another output.  The pair
 * (out index `inplace_out`, in index `inplace_in`) is skipped when both are >= 0 and the
 * two views are the same tensor (a requested in-place gradient). */
ploss_status ploss_check_aliasing(const ploss_view *const *outs, const char *const *out_names, int nouts,
                                  const ploss_view *const *ins, const char *const *in_names, int nins,
                                  int inplace_out, int inplace_in);

/* Elementwise losses (one input shape for every tensor, e.g. the sigmoid family).
 * v must have exactly x's shape: SHAPE error "<name>: expected the input's shape [..]". */
ploss_status ploss_check_input_shape(const ploss_view *v, const ploss_view *x, const char *name);

/* grad_input of a loss whose gradient has the input's shape (elementwise, boxes, region):
 * given, on the context's device, x's dtype and shape, writable; viewed into g. */
ploss_status ploss_check_grad_input(ploss_ctx_t *ctx, const DLTensor *grad, const ploss_view *x, ploss_view *g);

/* The outputs of such a loss, loss (where the pass writes it) and grad_input (where it
 * writes one), may not overlap ins[0..nins) nor each other; with `inplace` (a fused pass's
 * opts.inplace) grad_input must be ins[0], the input, itself. */
ploss_status ploss_check_outputs_apart(ploss_pass pass, int inplace, const ploss_view *l, const ploss_view *g,
                                       const ploss_view *const *ins, const char *const *in_names, int nins);

/* A loss whose inputs each get a gradient (spec->ninputs > 0: the pairs and margin
 * engines) has no in-place gradient: opts.inplace = 1 is refused in every pass, before any
 * tensor is looked at (each engine calls it first, so a sharded call still exchanges the
 * status with the other ranks). */
ploss_status ploss_check_no_inplace(const char *loss_name, int inplace);

/* Loss-shaped tensors of an elementwise loss: x's shape for NONE, one element else. */
ploss_status ploss_check_elementwise_loss_shape(const ploss_view *v, const ploss_view *x, ploss_reduction r,
                                                const char *name);

/* PyTorch's broadcasting of v over x (v's dims aligned with x's last ones, each of size 1 or
 * x's; a 0-d v is one value): 1 and v's strides laid out over x's dims in st (0 along the
 * broadcast ones and past x's rank), or 0 where v does not broadcast to x. */
int ploss_broadcast_strides(const ploss_view *v, const ploss_view *x, int64_t st[PLOSS_MAX_DIMS]);

/* Strides st[0..PLOSS_MAX_DIMS) (x's rank, 0 in broadcast dims, 0 beyond) of a weight-like
 * tensor v broadcast over the input x.  v is either (a) broadcastable to x as in PyTorch (rank
 * at most x's, its dims aligned with x's last ones, each of size 1 or x's; a 0-d tensor is one
 * value), or (b) for x of rank > 2, a vector of C = x's axis-1 size != 1 (ploss's class
 * vector, along axis 1) when C is not the size of x's last dim.  A vector of length C when C
 * is also the last dim's size (rank > 2) reads differently in (a) and (b): SHAPE error naming
 * both readings.  SHAPE error for any other shape. */
ploss_status ploss_check_broadcast_strides(const ploss_view *v, const ploss_view *x, const char *name,
                                           int64_t st[PLOSS_MAX_DIMS]);

/* ---- softmax-row losses: one row of C logits per sample of an N×C×d1×…×dk input ---- */

/* DTYPE error "input: expected logits of dtype f32, f16, bf16 or f64" unless the input x
 * (a view of the logits) is of a float dtype. */
ploss_status ploss_check_logits_dtype(const ploss_view *x);

/* The logits `input` of a softmax-row loss into x: a tensor (ploss_view_init) on ctx's device,
 * of a float dtype (ploss_check_logits_dtype),
 * of rank >= 2, or exactly 2 where rank2; rank_want: the SHAPE error's text of what is
 * expected when the rank is not. */
ploss_status ploss_check_row_input(ploss_ctx_t *ctx, const DLTensor *input, int rank2, const char *rank_want,
                                   ploss_view *x);

/* A per-class vector `name` (class weights, α, priors) into v: a tensor on ctx's device, of a
 * float dtype, of shape [C] (SHAPE error "expected shape [C] (one <what> per class)"). */
ploss_status ploss_check_class_vector(ploss_ctx_t *ctx, const DLTensor *t, int64_t C, const char *name,
                                      const char *what, ploss_view *v);

/* One tensor of a softmax-row loss walked by sample: element (n, k, s) at
 * v.data + n·sn + k·sk + s·ss (s over d1⋯dk collapsed to one axis, k along axis 1 where the
 * tensor has one).  All zero when the tensor is absent; sn and ss are 0 for a reduced
 * (one-element) loss or grad_loss. */
typedef struct {
    ploss_view v;
    int64_t sn, ss, sk;
} ploss_row_tensor;

/* The per-sample outputs and saved state of one pass of a softmax-row loss (cross-entropy,
 * softmax focal, the per-sample policies).  Zero-initialise it, set the request fields, then call
 * ploss_check_row_outputs, which fills in the rest. */
typedef struct {
    /* request */
    const DLTensor *loss;      /* forward and fused: required, "loss"                          */
    const DLTensor *state;     /* optional saved state: written by forward, read by backward    */
    const DLTensor *grad_loss; /* backward: required, "grad_loss"                               */
    const DLTensor *grad;      /* backward and fused: required, "grad_input"                    */
    const char *state_name;    /* "lse", "state"                                                */
    int state_k;               /* state components per sample: 0 none (state ignored), 1 the
                                  sample shape, k > 1 the input's shape with k on axis 1        */
    int grad_shape_plain;      /* 1: grad_input's SHAPE message reads "expected the input's
                                  shape" without the sizes (the softmax focal wording)          */
    /* result: N samples × S positions × C classes, and each tensor walked by sample */
    int64_t N, S, C;
    int has_state;             /* state given and state_k > 0 */
    ploss_row_tensor x, t;     /* the input (k = class) and the target (k = class for
                                  probabilities of the input's shape, else none)                */
    ploss_row_tensor l, st, gl, g; /* loss, state (k = component), grad_loss, grad_input (k = class) */
} ploss_row_outputs;

/* Checks the per-sample tensors of pass `pass` of a softmax-row loss over the checked input x
 * (float, rank >= 2) and target t (the sample shape or the input's shape), in this order,
 * each only where the pass uses it:
 *   loss (forward, fused): not NULL, device, dtype f32 (f64 for an f64 input), the sample
 *     shape for NONE or one element, writable;
 *   state (if given and state_k > 0): device, the loss dtype, shape per state_k, writable in
 *     the forward pass;
 *   grad_loss (backward): not NULL, device, shape as the loss, dtype f32 or f64;
 *   grad_input (backward, fused): not NULL, device, x's dtype, x's shape, writable;
 * then aliasing (ploss_check_aliasing): outputs {loss, grad_input, state (forward)} against
 * inputs {x, t, ins[0..nins) (named in_names; nins <= 4; NULL entries skipped), grad_loss,
 * state (backward)} and each other, with grad_input == x allowed when `inplace` is set in a
 * fused pass; then an ALIAS error when such an in-place request's grad_input is not x
 * itself; last, the collapse of x, t, loss (NONE), state, grad_loss (NONE) and grad_input
 * to (n, s[, k]) strides (LAYOUT errors).  Returns the first failure; writes nothing but *o.
 * The callers copy the result into their problem structs. */
ploss_status ploss_check_row_outputs(ploss_ctx_t *ctx, ploss_pass pass, ploss_reduction r, int inplace,
                                     const ploss_view *x, const ploss_view *t, const ploss_view *const *ins,
                                     const char *const *in_names, int nins, ploss_row_outputs *o);

/* Appended to a class-index error whose index is exactly C: the likely 1-based label of a
 * Torch7 data set. */
#define PLOSS_ONE_BASED_HINT " (class indices are 0-based: Torch7's 1-based labels need target - 1, in Lua target:add_(-1))"

/* CPU labels of an (n, s)-indexed label tensor: each must be in [0, C) or ignore_index.
 * INVALID_LABEL naming the first offending sample (n, s) otherwise, said to be 0-based. */
ploss_status ploss_check_labels_cpu(const void *t, ploss_dtype dt, int64_t N, int64_t S, int64_t sn,
                                    int64_t ss, int64_t C, int64_t ignore_index);

/* The label-smoothing options: INVALID_ARGUMENT when opts.smoothing_convention is out of
 * range or opts.label_smoothing ε is outside [0, 1]; with C >= 0 (the class count, once
 * known) also for uniform_others with C = 1 and ε > 0, where ε/(C−1) is undefined. */
ploss_status ploss_check_smoothing(ploss_smoothing_convention conv, double eps, int64_t C);

/* Target coefficients (a, b) of a smoothing convention: t_j = a·[j = y] + b (ploss.h).
 * UNIFORM_OTHERS with C = 1 gives b = 0 (callers reject it when ε > 0). */
void ploss_smoothing_coefficients(ploss_smoothing_convention conv, double eps, int64_t C, double *a,
                                  double *b);

#ifdef __cplusplus
}
#endif

#endif
