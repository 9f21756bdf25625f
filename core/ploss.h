/*
 * ploss.h — the public C ABI of ploss, fused loss functions for deep learning.
 *
 * Conventions (see DESIGN.md):
 *  - Every fallible function returns a ploss_status; PLOSS_OK == 0.  On any other
 *    status, ploss_last_error() holds a message naming the argument at fault with the
 *    expected and the actual shape / dtype / device, and no output has been written.
 *  - Tensors are DLPack DLTensor views (dlpack/dlpack.h, Debian libdlpack-dev).
 *    Strides are in elements; strides == NULL means contiguous row-major.  Supported
 *    dtypes: f32, f16, bf16, f64 (floating), i64, i32 (labels), u8 (bytes).  Lanes = 1.
 *  - The class axis of an input N×C×d1×…×dk is axis 1, whatever its stride.
 *  - Outputs are allocated by the caller; nothing here allocates an output.
 *  - CUDA work is queued on the context's stream; forward/backward never synchronise
 *    with the host.  Invalid labels found inside a CUDA kernel are recorded in the
 *    context's device-side error slot and reported (PLOSS_ERR_INVALID_LABEL) by the
 *    next call that synchronises: ploss_ctx_synchronize() or a copy to the host.
 *  - Accumulation is fp32 for f16/bf16/f32 inputs on CUDA (at least fp32 on the CPU,
 *    which accumulates in f64), f64 for f64 inputs; gradients are written in the
 *    input's dtype; losses are f32 (f64 for f64 inputs).
 *  - Reductions are deterministic: the same inputs give bitwise the same results.
 *  - The library never aborts, exits, asserts or prints.
 */
#ifndef PLOSS_H
#define PLOSS_H

#include <stddef.h>
#include <stdint.h>
#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Version of this ABI; init.lua refuses a library whose ploss_abi_version() differs. */
#define PLOSS_ABI_VERSION 1

/* ------------------------------------------------------------------------------------ */
/* Status and errors                                                                    */
/* ------------------------------------------------------------------------------------ */

/** Status returned by every fallible function. */
typedef enum ploss_status {
    PLOSS_OK = 0,
    PLOSS_ERR_INVALID_ARGUMENT = 1, /* NULL pointer, option out of range, bad enum value */
    PLOSS_ERR_SHAPE = 2,            /* a tensor's rank or sizes do not match            */
    PLOSS_ERR_DTYPE = 3,            /* a tensor's dtype is not accepted for this slot    */
    PLOSS_ERR_DEVICE = 4,           /* tensors on different devices / not the ctx's      */
    PLOSS_ERR_LAYOUT = 5,           /* strides that cannot be used (overlapping output)  */
    PLOSS_ERR_ALIAS = 6,            /* an output overlaps an input it may not overlap    */
    PLOSS_ERR_INVALID_LABEL = 7,    /* a class index outside [0, C) and != ignore_index  */
    PLOSS_ERR_OUT_OF_MEMORY = 8,    /* host or device allocation failed                  */
    PLOSS_ERR_UNSUPPORTED = 9,      /* e.g. a CUDA tensor with a library built w/o CUDA  */
    PLOSS_ERR_CUDA = 10,            /* a CUDA runtime error (message has its string)     */
    PLOSS_STATUS_COUNT
} ploss_status;

/** A fixed name for a status, e.g. "PLOSS_ERR_SHAPE"; "PLOSS_UNKNOWN_STATUS" otherwise. */
const char *ploss_status_string(ploss_status status);

/** The calling thread's message for the last failed call ("" if none). Valid until the
 *  next ploss call on the same thread. */
const char *ploss_last_error(void);

/** PLOSS_ABI_VERSION of the compiled library. */
int ploss_abi_version(void);

/** 1 when the library was compiled with CUDA kernels, else 0. */
int ploss_built_with_cuda(void);

/** Number of CUDA devices visible (0 when built without CUDA or no GPU/driver). */
int ploss_cuda_device_count(void);

/* ------------------------------------------------------------------------------------ */
/* Context                                                                              */
/* ------------------------------------------------------------------------------------ */

/** Opaque context: device, CUDA stream, workspace pool, deterministic flag and a
 *  device-side error slot.  One context per device per thread of work. */
typedef struct ploss_ctx ploss_ctx_t;

/** Create a context for `device` (kDLCPU, or kDLCUDA with a device_id).
 *  Statuses: INVALID_ARGUMENT (out NULL), DEVICE (unknown device type or id),
 *  UNSUPPORTED (CUDA requested, built without CUDA), CUDA, OUT_OF_MEMORY. */
ploss_status ploss_ctx_create(DLDevice device, ploss_ctx_t **out);

/** Destroy a context and its workspace (NULL is accepted). Synchronises its stream. */
void ploss_ctx_destroy(ploss_ctx_t *ctx);

/** The context's device. */
DLDevice ploss_ctx_device(const ploss_ctx_t *ctx);

/** Set the CUDA stream (a cudaStream_t passed as void *; NULL = legacy default stream).
 *  Statuses: INVALID_ARGUMENT (ctx NULL or a CPU context with a non-NULL stream). */
ploss_status ploss_ctx_set_stream(ploss_ctx_t *ctx, void *stream);

/** The CUDA stream as void * (NULL for the default stream and for CPU contexts). */
void *ploss_ctx_stream(const ploss_ctx_t *ctx);

/** Deterministic mode (default 1): fixed reduction order, no float atomics.  Every
 *  kernel in this version is deterministic; the flag is kept for faster future paths. */
ploss_status ploss_ctx_set_deterministic(ploss_ctx_t *ctx, int deterministic);
int ploss_ctx_deterministic(const ploss_ctx_t *ctx);

/** Wait for the context's stream, then report and clear the device error slot.
 *  Statuses: INVALID_LABEL (a kernel saw a label outside [0, C)), CUDA. */
ploss_status ploss_ctx_synchronize(ploss_ctx_t *ctx);

/* ------------------------------------------------------------------------------------ */
/* Memory (counted per device; benchmarks read the counters)                             */
/* ------------------------------------------------------------------------------------ */

/** Allocate `bytes` on the context's device (256-byte aligned).  bytes == 0 gives a
 *  unique non-NULL pointer.  Statuses: INVALID_ARGUMENT, OUT_OF_MEMORY, CUDA. */
ploss_status ploss_alloc(ploss_ctx_t *ctx, size_t bytes, void **out);

/** Free memory from ploss_alloc on the same context's device (NULL is a no-op).
 *  Statuses: INVALID_ARGUMENT (pointer not allocated by ploss on that device), CUDA. */
ploss_status ploss_free(ploss_ctx_t *ctx, void *ptr);

/** Byte counters of one device: memory held through ploss_alloc plus context
 *  workspaces. `current` and `peak` may be NULL. */
typedef struct ploss_memory_stats {
    uint64_t current_bytes; /* bytes allocated now                         */
    uint64_t peak_bytes;    /* high-water mark since start or last reset   */
    uint64_t alloc_count;   /* number of successful allocations            */
} ploss_memory_stats;

/** Read the counters of `device`.  Statuses: INVALID_ARGUMENT, DEVICE. */
ploss_status ploss_memory_stats_get(DLDevice device, ploss_memory_stats *out);

/** Set the peak of `device` to its current value.  Statuses: DEVICE. */
ploss_status ploss_memory_reset_peak(DLDevice device);

/* ------------------------------------------------------------------------------------ */
/* Tensor ops (support for the Lua tensor type)                                         */
/* ------------------------------------------------------------------------------------ */

/** dst ← src, element by element, any strides, converting dtypes (float↔int by C
 *  rules, floats to integers truncate).  Shapes must be equal.  Either tensor may be on
 *  the context's device or on the CPU (host↔device copies synchronise the stream and
 *  report the error slot).  dst must not overlap src unless identical.
 *  Statuses: SHAPE, DTYPE, DEVICE, LAYOUT (dst has overlapping strides), ALIAS,
 *  INVALID_LABEL (pending device error), CUDA, OUT_OF_MEMORY. */
ploss_status ploss_copy(ploss_ctx_t *ctx, DLTensor *dst, const DLTensor *src);

/** Every element of dst ← value (converted to dst's dtype).  Statuses: DTYPE, DEVICE,
 *  LAYOUT, CUDA. */
ploss_status ploss_fill(ploss_ctx_t *ctx, DLTensor *dst, double value);

/** Counter-based random numbers (Philox-4x32-10; Salmon et al., SC 2011).  Element k in
 *  row-major order of `dst` takes counter (offset + k) under key `seed`, so the same
 *  seed and offset give the same numbers on the CPU and on any GPU, whatever the strides.
 *  uniform: [low, high) in dst's float dtype.  normal: mean + std·N(0,1) (Box–Muller).
 *  randint: integers in [low, high) (any dtype; high > low).
 *  Statuses: INVALID_ARGUMENT (high <= low, std < 0), DTYPE, DEVICE, LAYOUT, CUDA. */
ploss_status ploss_rand_uniform(ploss_ctx_t *ctx, DLTensor *dst, uint64_t seed,
                                uint64_t offset, double low, double high);
ploss_status ploss_rand_normal(ploss_ctx_t *ctx, DLTensor *dst, uint64_t seed,
                               uint64_t offset, double mean, double std);
ploss_status ploss_rand_int(ploss_ctx_t *ctx, DLTensor *dst, uint64_t seed,
                            uint64_t offset, int64_t low, int64_t high);

/* ------------------------------------------------------------------------------------ */
/* Common loss options                                                                  */
/* ------------------------------------------------------------------------------------ */

/** Reduction of per-sample losses, as PyTorch's `reduction`. */
typedef enum ploss_reduction {
    PLOSS_REDUCTION_NONE = 0, /* one loss per sample, shape of the target (class axis removed) */
    PLOSS_REDUCTION_MEAN = 1, /* sum / divisor stated per loss                                 */
    PLOSS_REDUCTION_SUM = 2,
    PLOSS_REDUCTION_COUNT
} ploss_reduction;

/* ------------------------------------------------------------------------------------ */
/* Softmax cross-entropy with label smoothing (LOSSES.md §2.1)                          */
/* ------------------------------------------------------------------------------------ */

/** Label-smoothing conventions.  With ε = label_smoothing and C classes, the target of a
 *  sample with class y is t_j = a·[j = y] + b:
 *   PYTORCH   (Szegedy et al., CVPR 2016; torch.nn.functional.cross_entropy):
 *             positive 1 − ε + ε/C, negative ε/C          (a = 1 − ε,        b = ε/C)
 *   REFERENCE (pytorch-loss LabelSmoothSoftmaxCEV1–V3): positive 1 − ε, negative ε/C;
 *             the targets sum to 1 − ε/C                  (a = 1 − ε − ε/C,  b = ε/C)
 *   UNIFORM_OTHERS: positive 1 − ε, negative ε/(C − 1)   (a = 1 − ε − ε/(C−1), b = ε/(C−1));
 *             rejected for C = 1.
 *  Probability targets t are smoothed the same way: t̃_j = a·t_j + b. */
typedef enum ploss_smoothing_convention {
    PLOSS_SMOOTHING_PYTORCH = 0,
    PLOSS_SMOOTHING_REFERENCE = 1,
    PLOSS_SMOOTHING_UNIFORM_OTHERS = 2,
    PLOSS_SMOOTHING_CONVENTION_COUNT
} ploss_smoothing_convention;

/** Options of the cross-entropy family; fill with ploss_cross_entropy_opts_init(). */
typedef struct ploss_cross_entropy_opts {
    ploss_reduction reduction;                       /* default MEAN                          */
    int64_t ignore_index;                            /* default -100 (class-index targets)   */
    double label_smoothing;                          /* ε in [0, 1], default 0                */
    ploss_smoothing_convention smoothing_convention; /* default PYTORCH                       */
    double scale;       /* _fused only: gradient multiplier (the upstream gradient), default 1 */
    int inplace;        /* _fused only: 1 allows grad_input to be the input itself, default 0  */
} ploss_cross_entropy_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_cross_entropy_opts_init(ploss_cross_entropy_opts *opts);

/**
 * Softmax cross-entropy, forward (PyTorch torch.nn.functional.cross_entropy; label
 * smoothing per Szegedy et al. 2016 and pytorch-loss, LOSSES.md §2.1).
 *
 * in  input   N×C or N×C×d1×…×dk logits, f32/f16/bf16/f64, any strides; C ≥ 1.
 * in  target  class indices, i64 or i32, shape N×d1×…×dk, values in [0, C) or
 *             ignore_index; or probabilities (any float dtype) of the input's shape.
 * in  weight  NULL, or C class weights (float dtype, any, on the input's device).
 *             With lse_i the log-sum-exp of sample i, per sample
 *             ℓ_i = a·w_{y_i}·(lse_i − x_{i,y_i}) + b·Σ_j w_j·(lse_i − x_ij)   (class indices)
 *             ℓ_i = Σ_j w_j·(a·t_ij + b)·(lse_i − x_ij)                          (probabilities)
 * in  opts    NULL for defaults.
 * out loss    reduction NONE: the target's shape (class indices) or the input's shape
 *             without axis 1 (probabilities), zeros at ignored samples; MEAN / SUM: a
 *             0-d or 1-element tensor.  f32 (f64 for f64 input), on the input's device.
 *             MEAN divides by Σ_{i valid} w_{y_i} (class indices; the count of valid
 *             samples without weight) or by the number of samples N·d1⋯dk (probabilities).
 *             No valid sample with MEAN gives NaN (PyTorch's behaviour).
 * out lse     NULL, or the saved state for _backward: log-sum-exp per sample, shape as the
 *             NONE loss, f32 (f64 for f64 input).  The only state kept between passes.
 * Statuses: INVALID_ARGUMENT (ctx/input/target/loss NULL, ε ∉ [0,1], bad enum, C = 1 with
 *           UNIFORM_OTHERS), SHAPE, DTYPE, DEVICE, LAYOUT, ALIAS, INVALID_LABEL (CPU:
 *           before anything is written), UNSUPPORTED, CUDA, OUT_OF_MEMORY.
 */
ploss_status ploss_cross_entropy_forward(ploss_ctx_t *ctx, const DLTensor *input,
                                         const DLTensor *target, const DLTensor *weight,
                                         const ploss_cross_entropy_opts *opts,
                                         DLTensor *loss, DLTensor *lse);

/**
 * Softmax cross-entropy, backward: grad_input = ∂(reduced loss)/∂input · grad_loss.
 * With ℓ_i = Σ_j c_ij·(lse_i − x_ij) as in _forward,
 * ∂ℓ_i/∂x_ij = (Σ_k c_ik)·p_ij − c_ij; zero at ignored
 * samples; MEAN scales by 1/divisor (zero gradient when the divisor is 0).
 *
 * in  input, target, weight, opts   as given to _forward.
 * in  lse        NULL (recomputed from input) or the state written by _forward.
 * in  grad_loss  upstream gradient: 0-d/1-element for MEAN/SUM, the loss's shape for
 *                NONE; f32 or f64, on the input's device.
 * out grad_input the input's shape, the input's dtype, any non-overlapping strides; may
 *                not overlap any input.
 * Statuses: as _forward.
 */
ploss_status ploss_cross_entropy_backward(ploss_ctx_t *ctx, const DLTensor *input,
                                          const DLTensor *target, const DLTensor *weight,
                                          const ploss_cross_entropy_opts *opts,
                                          const DLTensor *lse, const DLTensor *grad_loss,
                                          DLTensor *grad_input);

/**
 * Softmax cross-entropy, forward and backward in one pass: writes `loss` as _forward and
 * grad_input = opts->scale · ∂(reduced loss)/∂input (for NONE: the gradient of the sum
 * of the per-sample losses times scale).  With opts->inplace = 1, grad_input may be
 * the input tensor itself (same data and strides): the gradient overwrites the logits.
 * Otherwise any overlap between grad_input and input is PLOSS_ERR_ALIAS.
 * Statuses: as _forward.
 */
ploss_status ploss_cross_entropy_fused(ploss_ctx_t *ctx, const DLTensor *input,
                                       const DLTensor *target, const DLTensor *weight,
                                       const ploss_cross_entropy_opts *opts,
                                       DLTensor *loss, DLTensor *grad_input);

/* ==== section: support ops for the examples (GEMM, bias, activations, SGD, argmax) ==== */
/* ==== end section: support ops ==== */

/* ==== section: sigmoid and focal family (BCE with logits, sigmoid/softmax/dual focal) ==== */
/* ==== end section: focal family ==== */

/* ==== section: softmax family II (large-margin, Taylor, PC-softmax, OHEM, one-hot) ==== */
/* ==== end section: softmax family II ==== */

#ifdef __cplusplus
}
#endif

#endif /* PLOSS_H */
