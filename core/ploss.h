/*
 * ploss.h — the public C ABI of ploss, fused loss functions for deep learning.
 *
 * Conventions (see DESIGN.md):
 *  - Every fallible function returns a ploss_status; PLOSS_OK == 0.  On any other
 *    status, ploss_last_error() holds a message naming the argument at fault with the
 *    expected and the actual shape / dtype / device, and no output has been written.
 *  - Tensors are DLPack DLTensor views (dlpack/dlpack.h, Debian libdlpack-dev).
 *    Strides are in elements; strides == NULL means contiguous row-major; byte_offset
 *    must be a multiple of the element size (else PLOSS_ERR_LAYOUT).  Supported
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

/** The library's release version, e.g. "0.1.0" (the project version in meson.build). A
 *  static string. */
const char *ploss_version(void);

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
 *  seed and offset give the same numbers on the CPU and on any GPU, whatever the strides
 *  (normal f64 values may differ in the last bit: the device's log/cos are not glibc's).
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

/* ---- GEMM (core/gemm.c; OpenBLAS CBLAS on the CPU, cuBLAS on CUDA) ------------------- */

/** Whether a GEMM operand is used as stored or transposed (BLAS's transa / transb). */
typedef enum ploss_transpose {
    PLOSS_NO_TRANSPOSE = 0,
    PLOSS_TRANSPOSE = 1,
    PLOSS_TRANSPOSE_COUNT
} ploss_transpose;

/**
 * General matrix product, BLAS semantics: c ← alpha·op(a)·op(b) + beta·c, where
 * op(x) = x (PLOSS_NO_TRANSPOSE) or xᵀ (PLOSS_TRANSPOSE); op(a) is M×K, op(b) K×N, c M×N.
 *
 * in     a, b   2-D, f32, f16, bf16 or f64, both of the same dtype.  Each needs a unit
 *               stride on one axis and a leading stride ≥ the size of that axis: a
 *               row-major view (strides [ld, 1]) or a transposed view (strides [1, ld]);
 *               both are used in place, without a copy.  Other layouts (broadcast, two
 *               non-unit strides, negative strides) give LAYOUT.
 * in/out c      2-D M×N, the dtype of a and b, or f32 when they are f16/bf16; a row-major
 *               or transposed view as above; may not overlap a or b.  With beta = 0, c is
 *               not read (NaN or Inf in it are overwritten), as in BLAS.
 * Accumulation in f32 for f32/f16/bf16 (CPU: f16/bf16 are converted to f32 and the
 * product is cblas_sgemm; CUDA: cublasGemmEx with CUBLAS_COMPUTE_32F, no TF32), f64 for
 * f64 (dgemm).  K = 0 gives c ← beta·c; M = 0 or N = 0 does nothing.  M, N, K and the
 * leading strides must fit in 32 bits (BLAS's int).  On CUDA the context's cuBLAS handle
 * is created on first use (its own workspace is not counted by ploss_memory_stats_get).
 * Statuses: INVALID_ARGUMENT (ctx/a/b/c NULL, bad enum), SHAPE, DTYPE, DEVICE, LAYOUT,
 *           ALIAS, UNSUPPORTED (sizes over 2^31 − 1, CUDA tensor without CUDA), CUDA,
 *           OUT_OF_MEMORY.
 */
ploss_status ploss_gemm(ploss_ctx_t *ctx, ploss_transpose trans_a, ploss_transpose trans_b,
                        double alpha, const DLTensor *a, const DLTensor *b, double beta,
                        DLTensor *c);

/* ---- Activations (LOSSES.md §7; core/activations.c) ---------------------------------- */

/** Elementwise activations of LOSSES.md §7. */
typedef enum ploss_activation {
    /* y = x·σ(x) (Ramachandran et al. 2017; Elfwing et al. 2018; PyTorch silu)           */
    PLOSS_ACTIVATION_SWISH = 0,
    /* y = x·min(max(x + 3, 0), 6)/6 (Howard et al., MobileNetV3, ICCV 2019); derivative
     * 0 for x < −3, x/3 + 1/2 for −3 ≤ x ≤ 3, 1 for x > 3: PyTorch's hardswish_backward
     * convention, −0.5 at x = −3 and 1.5 at x = 3 (§7.2)                                 */
    PLOSS_ACTIVATION_HARD_SWISH = 1,
    /* y = x·tanh(softplus(x)) (Misra, BMVC 2020); softplus(x) = x above 20 (PyTorch)      */
    PLOSS_ACTIVATION_MISH = 2,
    PLOSS_ACTIVATION_COUNT
} ploss_activation;

/**
 * Activation forward: output = f(input), elementwise.
 * in  input    any shape, f32/f16/bf16/f64, any strides.
 * out output   the input's shape and dtype, any non-overlapping strides.  With
 *              inplace = 1 output may be the input tensor itself (same data, shape and
 *              strides); any other overlap with the input is ALIAS.
 * Computed in f32 (f64 for f64) on CUDA, in f64 on the CPU; stable at ±1e4.
 * Statuses: INVALID_ARGUMENT (NULL, bad enum), SHAPE, DTYPE, DEVICE, LAYOUT, ALIAS,
 *           UNSUPPORTED, CUDA.
 */
ploss_status ploss_activation_forward(ploss_ctx_t *ctx, ploss_activation act,
                                      const DLTensor *input, DLTensor *output, int inplace);

/**
 * Activation backward: grad_input = f′(input) · grad_output, elementwise (the derivatives
 * of LOSSES.md §7, recomputed from the saved input).
 * in  input        the tensor given to _forward.
 * in  grad_output  the input's shape and dtype.
 * out grad_input   the input's shape and dtype.  With inplace = 1 it may be grad_output
 *                  or input itself (same data, shape, strides); other overlaps are ALIAS.
 * Statuses: as _forward.
 */
ploss_status ploss_activation_backward(ploss_ctx_t *ctx, ploss_activation act,
                                       const DLTensor *input, const DLTensor *grad_output,
                                       DLTensor *grad_input, int inplace);

/* ---- Linear-layer helpers and argmax (core/linear.c) --------------------------------- */

/**
 * Bias add, in place: x[i, j] ← x[i, j] + bias[j] for a 2-D N×C tensor x.
 * in/out x     N×C, f32/f16/bf16/f64, any non-overlapping strides.
 * in     bias  C elements (rank 1), x's dtype, any stride; may not overlap x.
 * Statuses: INVALID_ARGUMENT, SHAPE, DTYPE, DEVICE, LAYOUT, ALIAS, UNSUPPORTED, CUDA.
 */
ploss_status ploss_bias_add(ploss_ctx_t *ctx, DLTensor *x, const DLTensor *bias);

/**
 * Bias gradient: grad_bias[j] ← Σ_i grad_output[i, j] (column sums of an N×C tensor).
 * Deterministic: a fixed summation order (CPU: f64 in row order; CUDA: f32, f64 for
 * f64, fixed row chunks then an in-order sum of the chunks).  N = 0 gives zeros.
 * in  grad_output  N×C, f32/f16/bf16/f64, any strides.
 * out grad_bias    C elements (rank 1), grad_output's dtype; may not overlap grad_output.
 * Statuses: INVALID_ARGUMENT, SHAPE, DTYPE, DEVICE, LAYOUT, ALIAS, UNSUPPORTED, CUDA,
 *           OUT_OF_MEMORY.
 */
ploss_status ploss_bias_grad(ploss_ctx_t *ctx, const DLTensor *grad_output, DLTensor *grad_bias);

/**
 * Argmax along axis 1: indices[n, d…] = argmax_j input[n, j, d…].  The first maximal
 * index wins ties; a NaN counts as the maximum (its first occurrence), as torch.argmax.
 * in  input    N×C or N×C×d1×…×dk, f32/f16/bf16/f64, any strides, C ≥ 1.
 * out indices  i64, the input's shape without axis 1 (N, d1, …, dk).
 * Statuses: INVALID_ARGUMENT, SHAPE (C = 0 included), DTYPE, DEVICE, LAYOUT, ALIAS,
 *           UNSUPPORTED, CUDA.
 */
ploss_status ploss_argmax(ploss_ctx_t *ctx, const DLTensor *input, DLTensor *indices);

/* ---- Optimisers (core/optim.c) ------------------------------------------------------- */

/** Options of ploss_sgd_step (torch.optim.SGD's); fill with ploss_sgd_opts_init(). */
typedef struct ploss_sgd_opts {
    double lr;           /* learning rate ≥ 0, default 0.01                               */
    double momentum;     /* μ ≥ 0, default 0                                              */
    double dampening;    /* default 0                                                     */
    double weight_decay; /* L2 coefficient ≥ 0 added to the gradient, default 0          */
    int nesterov;        /* default 0; needs momentum > 0 and dampening = 0              */
} ploss_sgd_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_sgd_opts_init(ploss_sgd_opts *opts);

/**
 * One SGD step on one parameter tensor, elementwise, torch.optim.SGD semantics:
 *   d = g + wd·p;
 *   if μ ≠ 0: buf = d at step 1, else buf = μ·buf + (1 − dampening)·d;
 *             d = d + μ·buf (nesterov) or d = buf;
 *   p ← p − lr·d.
 * in/out param            any shape, f32/f16/bf16/f64, non-overlapping strides.
 * in     grad             param's shape and dtype.
 * in/out momentum_buffer  param's shape; param's dtype or f32; required when μ ≠ 0
 *                         (not read at step 1), ignored (may be NULL) when μ = 0.
 * in     step             1 for the first step of this parameter, then 2, 3, …
 * Computed in f64 on the CPU, f32 (f64 for f64) on CUDA.  No tensor may overlap another.
 * Statuses: INVALID_ARGUMENT (NULL, step < 1, option out of range), SHAPE, DTYPE, DEVICE,
 *           LAYOUT, ALIAS, UNSUPPORTED, CUDA.
 */
ploss_status ploss_sgd_step(ploss_ctx_t *ctx, DLTensor *param, const DLTensor *grad,
                            DLTensor *momentum_buffer, int64_t step,
                            const ploss_sgd_opts *opts);

/** Options of ploss_adam_step (torch.optim.Adam / AdamW); fill with ploss_adam_opts_init(). */
typedef struct ploss_adam_opts {
    double lr;           /* default 1e-3                                                  */
    double beta1;        /* in [0, 1), default 0.9                                        */
    double beta2;        /* in [0, 1), default 0.999                                      */
    double eps;          /* ≥ 0, default 1e-8                                             */
    double weight_decay; /* ≥ 0, default 0                                                */
    int decoupled_weight_decay; /* 0: Adam (wd·p added to g); 1: AdamW (p ← p·(1 − lr·wd)) */
} ploss_adam_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_adam_opts_init(ploss_adam_opts *opts);

/**
 * One Adam step (Kingma & Ba, ICLR 2015; AdamW: Loshchilov & Hutter, ICLR 2019), with
 * torch.optim.Adam's formulas (amsgrad off), t = step:
 *   g = g + wd·p (Adam) or p ← p·(1 − lr·wd) (AdamW);
 *   m ← β1·m + (1 − β1)·g;  v ← β2·v + (1 − β2)·g²;
 *   p ← p − (lr / (1 − β1ᵗ)) · m / (√v / √(1 − β2ᵗ) + eps).
 * in/out param, grad   as ploss_sgd_step.
 * in/out exp_avg, exp_avg_sq  param's shape; param's dtype or f32 (both the same);
 *        zeros before step 1 (the caller fills them).
 * Statuses: as ploss_sgd_step.
 */
ploss_status ploss_adam_step(ploss_ctx_t *ctx, DLTensor *param, const DLTensor *grad,
                             DLTensor *exp_avg, DLTensor *exp_avg_sq, int64_t step,
                             const ploss_adam_opts *opts);

/* ==== end section: support ops ==== */

/* ==== section: sigmoid and focal family (BCE with logits, sigmoid/softmax/dual focal) ==== */
/*
 * Conventions of this section.  All four losses compute in fp32 (f64 for f64 input; the
 * CPU in f64), return the loss in f32 (f64 for f64 input) and the gradient in the input's
 * dtype; 'mean' over zero elements / zero valid samples gives a NaN loss and an exactly
 * zero gradient.  Every logarithm of a sigmoid or softmax is taken in log-space
 * (softplus(z) = max(z,0) + log1p(e^−|z|), log σ(z) = −softplus(−z), 1 − σ(z) = σ(−z),
 * log p_t = x_t − lse), so logits of any finite size (|x| = 1e4, f16 ±60000) give finite
 * losses and gradients.  γ < 0 is rejected; γ = 0 reduces to the cross-entropy.
 * `scale` and `inplace` are used by _fused only, as in the cross-entropy family.
 */

/** Options of binary_cross_entropy_with_logits; fill with
 *  ploss_binary_cross_entropy_with_logits_opts_init(). */
typedef struct ploss_bce_with_logits_opts {
    ploss_reduction reduction; /* default MEAN (mean over all elements)                     */
    double scale;              /* _fused only: gradient multiplier, default 1                */
    int inplace;               /* _fused only: 1 allows grad_input to be the input, default 0 */
} ploss_bce_with_logits_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_binary_cross_entropy_with_logits_opts_init(ploss_bce_with_logits_opts *opts);

/**
 * Binary cross-entropy on logits, forward (PyTorch
 * torch.nn.functional.binary_cross_entropy_with_logits).  Elementwise, per element
 *     ℓ = w·[ pw·y·softplus(−x) + (1 − y)·softplus(x) ]   = −w·[pw·y·log σ(x) + (1−y)·log(1−σ(x))]
 *
 * in  input       logits, any shape (rank 0..8), f32/f16/bf16/f64, any strides.
 * in  target      y, the input's shape, any float dtype (hard 0/1 or soft labels in [0, 1]);
 *                 no gradient is computed for it.
 * in  weight      NULL (all ones), or w broadcast over the input, either
 *                 (a) a tensor of the input's rank whose every size is 1 or the input's
 *                     size (e.g. the input's shape, N×1×H×W pixel weights, 1×C×1×1), or
 *                 (b) a 1-D tensor of C = the size of axis 1 (1 for inputs of rank < 2):
 *                     one weight per class along axis 1 (for a rank-2 N×C input this is
 *                     PyTorch's broadcasting; for N×C×d… it is PyTorch's with the weight
 *                     reshaped to C×1×…×1), or
 *                 (c) one value: a 0-d tensor or a 1-D tensor of length 1.
 *                 (a) is tried first when the ranks are equal.
 *                 Any float dtype, any strides, on the input's device.
 * in  pos_weight  NULL (all ones), or pw, the weight of the positive term, with the same
 *                 accepted forms as `weight`; as a vector its length must equal the size of
 *                 axis 1 ("per class", as PyTorch's pos_weight of an N×C input) or be 1.
 * in  opts        NULL for defaults.
 * out loss        NONE: the input's shape; MEAN / SUM: a 0-d or 1-element tensor; f32
 *                 (f64 for f64 input).  MEAN divides by the element count (weights do not
 *                 change the divisor, as PyTorch).
 * Statuses: INVALID_ARGUMENT (ctx/input/target/loss NULL, bad enum, scale not finite),
 *           SHAPE (target not the input's shape, weight / pos_weight not broadcastable, a
 *           pos_weight vector whose length is not the size of axis 1), DTYPE, DEVICE,
 *           LAYOUT, ALIAS, UNSUPPORTED, CUDA, OUT_OF_MEMORY.  Nothing is written on error.
 */
ploss_status ploss_binary_cross_entropy_with_logits_forward(
    ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target, const DLTensor *weight,
    const DLTensor *pos_weight, const ploss_bce_with_logits_opts *opts, DLTensor *loss);

/**
 * Binary cross-entropy on logits, backward:
 *     ∂ℓ/∂x = w·[ (1 − y)·σ(x) − pw·y·σ(−x) ]          (= w·(σ(x) − y) when pw = 1)
 * times the upstream gradient (per element for NONE; the scalar, divided by the element
 * count for MEAN).  No state is kept between passes.
 * in  input, target, weight, pos_weight, opts   as given to _forward.
 * in  grad_loss   NONE: the input's shape; MEAN / SUM: one element; f32 or f64.
 * out grad_input  the input's shape and dtype, any non-overlapping strides; may not overlap
 *                 any input.
 * Statuses: as _forward.
 */
ploss_status ploss_binary_cross_entropy_with_logits_backward(
    ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target, const DLTensor *weight,
    const DLTensor *pos_weight, const ploss_bce_with_logits_opts *opts, const DLTensor *grad_loss,
    DLTensor *grad_input);

/**
 * Binary cross-entropy on logits, forward and backward in one pass: `loss` as _forward and
 * grad_input = opts->scale · ∂(reduced loss)/∂input (NONE: of the sum of the elementwise
 * losses).  With opts->inplace = 1, grad_input may be the input itself (same data, shape
 * and strides).  Statuses: as _forward.
 */
ploss_status ploss_binary_cross_entropy_with_logits_fused(
    ploss_ctx_t *ctx, const DLTensor *input, const DLTensor *target, const DLTensor *weight,
    const DLTensor *pos_weight, const ploss_bce_with_logits_opts *opts, DLTensor *loss,
    DLTensor *grad_input);

/** Definition of the sigmoid focal loss for soft targets (the two agree for y ∈ {0, 1}).
 *  With p = σ(x), a₁ = α, a₀ = 1 − α (a₁ = a₀ = 1 when α < 0):
 *   TORCHVISION (torchvision.ops.sigmoid_focal_loss; Lin et al., ICCV 2017):
 *       ℓ = (a₁·y + a₀·(1−y)) · q^γ · [y·softplus(−x) + (1−y)·softplus(x)],
 *       q = 1 − p_t = y·(1 − p) + (1 − y)·p
 *   REFERENCE (pytorch-loss FocalLossV1–V3; the |y − p|^γ factor of Quality Focal Loss,
 *       Li et al., NeurIPS 2020):
 *       ℓ = |y − p|^γ · [a₁·y·softplus(−x) + a₀·(1−y)·softplus(x)]   */
typedef enum ploss_focal_convention {
    PLOSS_FOCAL_TORCHVISION = 0,
    PLOSS_FOCAL_REFERENCE = 1,
    PLOSS_FOCAL_CONVENTION_COUNT
} ploss_focal_convention;

/** Options of sigmoid_focal; fill with ploss_sigmoid_focal_opts_init(). */
typedef struct ploss_sigmoid_focal_opts {
    ploss_reduction reduction;         /* default MEAN (mean over all elements)             */
    double alpha;                      /* α ≤ 1, default 0.25; α < 0 disables the balancing */
    double gamma;                      /* γ ≥ 0, default 2                                   */
    ploss_focal_convention convention; /* soft-target definition, default TORCHVISION        */
    double scale;                      /* _fused only: gradient multiplier, default 1        */
    int inplace;                       /* _fused only: grad_input may be the input, default 0 */
} ploss_sigmoid_focal_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_sigmoid_focal_opts_init(ploss_sigmoid_focal_opts *opts);

/**
 * Sigmoid focal loss, forward (Lin, Goyal, Girshick, He, Dollár, "Focal Loss for Dense
 * Object Detection", ICCV 2017; torchvision.ops.sigmoid_focal_loss; pytorch-loss
 * FocalLossV1–V3 for the REFERENCE convention; LOSSES.md §3.1).  Elementwise, per element
 * the ℓ of ploss_focal_convention.  For y ∈ {0, 1} both conventions give
 * α_t·(1 − p_t)^γ·BCE(x, y).
 *
 * in  input   logits, any shape (rank 0..8), f32/f16/bf16/f64, any strides.
 * in  target  y, the input's shape, any float dtype; in [0, 1] (hard or soft).  Values
 *             outside [0, 1] are not checked (TORCHVISION then takes a power of a negative
 *             number: NaN for non-integer γ).
 * in  opts    NULL for defaults.
 * out loss    NONE: the input's shape; MEAN / SUM: one element; f32 (f64 for f64 input).
 *             MEAN divides by the element count.
 * Statuses: INVALID_ARGUMENT (NULLs, γ < 0 or not finite, α > 1 or not finite, bad enum,
 *           scale not finite), SHAPE, DTYPE, DEVICE, LAYOUT, ALIAS, UNSUPPORTED, CUDA,
 *           OUT_OF_MEMORY.  Nothing is written on error.
 */
ploss_status ploss_sigmoid_focal_forward(ploss_ctx_t *ctx, const DLTensor *input,
                                         const DLTensor *target,
                                         const ploss_sigmoid_focal_opts *opts, DLTensor *loss);

/**
 * Sigmoid focal loss, backward.  With s = p·(1 − p) (computed as σ(x)·σ(−x)):
 *   TORCHVISION: ∂ℓ/∂x = A·[ q^γ·(p − y) + γ·(1 − 2y)·BCE·q^γ·(s/q) ],  A = a₁y + a₀(1−y);
 *                s/q ≤ 1 for y ∈ [0, 1], so the γ-term is finite for every γ ≥ 0 and is
 *                taken as 0 where q = 0 (its limit).
 *   REFERENCE:   ∂ℓ/∂x = γ·|y − p|^(γ−1)·sign(p − y)·s·e + |y − p|^γ·e′,
 *                e = a₁y·softplus(−x) + a₀(1−y)·softplus(x), e′ = a₀(1−y)·p − a₁y·(1 − p).
 *                Subgradient at the kink y = p (reachable only with soft targets): the
 *                γ-term is 0 there for every γ (for 0 < γ < 1 the derivative is unbounded
 *                near the kink; |y − p|^(γ−1) is clamped to the largest finite value of the
 *                accumulation type).  γ = 0 drops the γ-term everywhere.
 * times the upstream gradient as in binary_cross_entropy_with_logits.  No saved state.
 * in  input, target, opts   as given to _forward.
 * in  grad_loss   NONE: the input's shape; MEAN / SUM: one element; f32 or f64.
 * out grad_input  the input's shape and dtype, any non-overlapping strides.
 * Statuses: as _forward.
 */
ploss_status ploss_sigmoid_focal_backward(ploss_ctx_t *ctx, const DLTensor *input,
                                          const DLTensor *target,
                                          const ploss_sigmoid_focal_opts *opts,
                                          const DLTensor *grad_loss, DLTensor *grad_input);

/**
 * Sigmoid focal loss, forward and backward in one pass: `loss` as _forward and
 * grad_input = opts->scale · ∂(reduced loss)/∂input; with opts->inplace = 1 grad_input may
 * be the input itself.  The reduced loss is summed inside the kernels (no elementwise loss
 * buffer).  Statuses: as _forward.
 */
ploss_status ploss_sigmoid_focal_fused(ploss_ctx_t *ctx, const DLTensor *input,
                                       const DLTensor *target,
                                       const ploss_sigmoid_focal_opts *opts, DLTensor *loss,
                                       DLTensor *grad_input);

/** Options of softmax_focal; fill with ploss_softmax_focal_opts_init(). */
typedef struct ploss_softmax_focal_opts {
    ploss_reduction reduction; /* default MEAN (over the valid samples, see _forward)         */
    int64_t ignore_index;      /* default -100                                              */
    double gamma;              /* γ ≥ 0, default 2                                           */
    double scale;              /* _fused only: gradient multiplier, default 1                */
    int inplace;               /* _fused only: grad_input may be the input, default 0         */
} ploss_softmax_focal_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_softmax_focal_opts_init(ploss_softmax_focal_opts *opts);

/**
 * Multi-class softmax focal loss, forward (Lin et al., ICCV 2017, eq. 5 with the softmax
 * in place of the sigmoid; not in PyTorch, torchvision or pytorch-loss).  Per valid
 * sample i with label y, p_t = softmax(x_i)_y computed as log p_t = x_iy − lse_i:
 *     ℓ_i = −α_y · (1 − p_t)^γ · log p_t,      1 − p_t = −expm1(log p_t)
 * γ = 0 and α = NULL give the cross-entropy.
 *
 * in  input   N×C or N×C×d1×…×dk logits, f32/f16/bf16/f64, any strides; C ≥ 1.
 * in  target  class indices, i64 or i32, shape N×d1×…×dk, in [0, C) or ignore_index.
 * in  alpha   NULL (all ones), or C per-class factors α_j (any float dtype, on the input's
 *             device).
 * in  opts    NULL for defaults.
 * out loss    NONE: the target's shape, 0 at ignored samples; MEAN / SUM: one element;
 *             f32 (f64 for f64 input).  MEAN divides by the number of valid samples (α does
 *             not change the divisor); no valid sample gives NaN.
 * out lse     NULL, or the saved state for _backward: the log-sum-exp per sample (the
 *             target's shape, f32 / f64 for f64 input).
 * Statuses: INVALID_ARGUMENT (NULLs, γ < 0 or not finite, bad enum, scale not finite),
 *           SHAPE, DTYPE, DEVICE, LAYOUT, ALIAS, INVALID_LABEL (CPU: before anything is
 *           written; CUDA: through the context's error slot), UNSUPPORTED, CUDA,
 *           OUT_OF_MEMORY.
 */
ploss_status ploss_softmax_focal_forward(ploss_ctx_t *ctx, const DLTensor *input,
                                         const DLTensor *target, const DLTensor *alpha,
                                         const ploss_softmax_focal_opts *opts, DLTensor *loss,
                                         DLTensor *lse);

/**
 * Softmax focal loss, backward.  With u = 1 − p_t and L = −log p_t,
 *     ∂ℓ_i/∂x_ij = α_y · G · (p_ij − [j = y]),   G = u^γ · (1 + γ·p_t·L/u)
 * (L/u → 1 as u → 0, so G is finite for every γ ≥ 0; G = 1 for γ = 0).  The loss is smooth
 * in x for every γ ≥ 0: there is no kink.  Zero at ignored samples; MEAN scales by
 * 1/(valid count) (zero gradient when there is none).
 * in  input, target, alpha, opts   as given to _forward.
 * in  lse         NULL (recomputed) or the state written by _forward.
 * in  grad_loss   NONE: the target's shape; MEAN / SUM: one element; f32 or f64.
 * out grad_input  the input's shape and dtype, any non-overlapping strides.
 * Statuses: as _forward.
 */
ploss_status ploss_softmax_focal_backward(ploss_ctx_t *ctx, const DLTensor *input,
                                          const DLTensor *target, const DLTensor *alpha,
                                          const ploss_softmax_focal_opts *opts,
                                          const DLTensor *lse, const DLTensor *grad_loss,
                                          DLTensor *grad_input);

/**
 * Softmax focal loss, forward and backward in one pass: `loss` as _forward and
 * grad_input = opts->scale · ∂(reduced loss)/∂input; with opts->inplace = 1 grad_input may
 * be the input itself.  Statuses: as _forward.
 */
ploss_status ploss_softmax_focal_fused(ploss_ctx_t *ctx, const DLTensor *input,
                                       const DLTensor *target, const DLTensor *alpha,
                                       const ploss_softmax_focal_opts *opts, DLTensor *loss,
                                       DLTensor *grad_input);

/** Options of dual_focal; fill with ploss_dual_focal_opts_init(). */
typedef struct ploss_dual_focal_opts {
    ploss_reduction reduction; /* default MEAN (over the valid samples)                        */
    int64_t ignore_index;      /* default -100 (pytorch-loss's Dual_Focal_loss uses 255)       */
    double eps;                /* ε > 0, default 1e-5                                          */
    double scale;              /* _fused only: gradient multiplier, default 1                  */
    int inplace;               /* _fused only: grad_input may be the input, default 0           */
} ploss_dual_focal_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_dual_focal_opts_init(ploss_dual_focal_opts *opts);

/**
 * Dual focal loss, forward (Hossain, Paplinski, Betts, "Dual Focal Loss to address class
 * imbalance in semantic segmentation", Neurocomputing 2021 / arXiv:1909.11932, as read by
 * pytorch-loss Dual_Focal_loss, whose formula is the spec; LOSSES.md §2.6).  Per valid
 * sample i with label y, p = softmax(x_i), d_j = p_j − [j = y]:
 *     ℓ_i = −Σ_j log(1 + ε − d_j²),  evaluated as −Σ_j log(ε + (1 − |d_j|)·(1 + |d_j|))
 * with 1 − |d_y| = p_y and 1 − |d_j| = −expm1(log p_j) for j ≠ y (no cancellation near
 * |d| = 1).  Each term lies in [−log(1 + ε), −log ε].
 *
 * in  input   N×C or N×C×d1×…×dk logits, f32/f16/bf16/f64, any strides; C ≥ 1.
 * in  target  class indices, i64 or i32, shape N×d1×…×dk, in [0, C) or ignore_index.
 * in  opts    NULL for defaults.
 * out loss    NONE: the target's shape, 0 at ignored samples; MEAN / SUM: one element;
 *             f32 (f64 for f64 input).  MEAN divides by the number of valid samples.
 * out lse     NULL, or the log-sum-exp per sample for _backward (as softmax_focal).
 * Statuses: INVALID_ARGUMENT (NULLs, ε ≤ 0 or not finite, bad enum, scale not finite),
 *           SHAPE, DTYPE, DEVICE, LAYOUT, ALIAS, INVALID_LABEL, UNSUPPORTED, CUDA,
 *           OUT_OF_MEMORY.
 */
ploss_status ploss_dual_focal_forward(ploss_ctx_t *ctx, const DLTensor *input,
                                      const DLTensor *target, const ploss_dual_focal_opts *opts,
                                      DLTensor *loss, DLTensor *lse);

/**
 * Dual focal loss, backward (LOSSES.md §2.6):
 *     G_j = 2·d_j / (1 + ε − d_j²),   ∂ℓ_i/∂x_ik = p_ik·(G_k − Σ_j p_ij·G_j)
 * (|G_j| ≤ 2/ε: finite but up to 2e5 for the default ε).  Zero at ignored samples.
 * in  input, target, opts   as given to _forward.
 * in  lse         NULL (recomputed) or the state written by _forward.
 * in  grad_loss   NONE: the target's shape; MEAN / SUM: one element; f32 or f64.
 * out grad_input  the input's shape and dtype, any non-overlapping strides.
 * Statuses: as _forward.
 */
ploss_status ploss_dual_focal_backward(ploss_ctx_t *ctx, const DLTensor *input,
                                       const DLTensor *target, const ploss_dual_focal_opts *opts,
                                       const DLTensor *lse, const DLTensor *grad_loss,
                                       DLTensor *grad_input);

/**
 * Dual focal loss, forward and backward in one pass: `loss` as _forward and
 * grad_input = opts->scale · ∂(reduced loss)/∂input; with opts->inplace = 1 grad_input may
 * be the input itself.  Statuses: as _forward.
 */
ploss_status ploss_dual_focal_fused(ploss_ctx_t *ctx, const DLTensor *input,
                                    const DLTensor *target, const ploss_dual_focal_opts *opts,
                                    DLTensor *loss, DLTensor *grad_input);
/* ==== end section: focal family ==== */

/* ==== section: softmax family II (large-margin, Taylor, PC-softmax, OHEM, one-hot) ==== */

/* ---- One-hot encoding with label smoothing (LOSSES.md §8.1) ------------------------ */

/** Options of ploss_one_hot; fill with ploss_one_hot_opts_init(). */
typedef struct ploss_one_hot_opts {
    int64_t ignore_index;                            /* default -1 (pytorch-loss OnehotEncoder) */
    double label_smoothing;                          /* ε in [0, 1], default 0                  */
    ploss_smoothing_convention smoothing_convention; /* default PYTORCH (as cross-entropy)     */
} ploss_one_hot_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_one_hot_opts_init(ploss_one_hot_opts *opts);

/**
 * One-hot encoding of class indices along axis 1, with optional label smoothing
 * (pytorch-loss convert_to_one_hot / OnehotEncoder; LOSSES.md §8.1).  No gradient.
 *
 * in  target  class indices, i64 or i32, shape N×d1×…×dk (rank >= 1), values in [0, C)
 *             or ignore_index.
 * in  opts    NULL for defaults.
 * out out     shape N×C×d1×…×dk (C >= 1 is taken from axis 1), any dtype, any
 *             non-overlapping strides, on the target's device.  With the smoothing
 *             coefficients (a, b) of the convention (see ploss_smoothing_convention):
 *             out[n, j, s] = a·[j = y] + b for a valid label y, and 0 for every class of
 *             an ignored sample.  Without smoothing (ε = 0) that is exactly 1 / 0.  An
 *             integer dtype is accepted only when ε = 0.
 * Statuses: INVALID_ARGUMENT (NULL ctx/target/out, ε ∉ [0, 1], bad enum, UNIFORM_OTHERS
 *           with C = 1 and ε > 0), SHAPE, DTYPE, DEVICE, LAYOUT, ALIAS, INVALID_LABEL
 *           (CPU: found before anything is written; CUDA: through the context's error
 *           slot, the sample's row is then all zero), UNSUPPORTED, CUDA.
 */
ploss_status ploss_one_hot(ploss_ctx_t *ctx, const DLTensor *target, const ploss_one_hot_opts *opts,
                           DLTensor *out);

/* ---- Large-margin softmax (Kobayashi, BMVC 2019; LOSSES.md §2.3) -------------------- */

/** Options of the large-margin softmax loss; fill with ploss_large_margin_opts_init(). */
typedef struct ploss_large_margin_opts {
    ploss_reduction reduction; /* default MEAN                                              */
    int64_t ignore_index;      /* default 255 (pytorch-loss LargeMarginSoftmaxV1–V3)         */
    double lam;                /* λ >= 0, weight of the regulariser, default 0.3             */
    double scale;   /* _fused only: gradient multiplier (the upstream gradient), default 1 */
    int inplace;    /* _fused only: 1 allows grad_input to be the input itself, default 0  */
} ploss_large_margin_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_large_margin_opts_init(ploss_large_margin_opts *opts);

/**
 * Large-margin softmax loss, forward (T. Kobayashi, "Large Margin In Softmax Cross-Entropy
 * Loss", BMVC 2019; pytorch-loss LargeMarginSoftmaxV1–V3; LOSSES.md §2.3).  Cross-entropy
 * plus a regulariser that pushes the softmax over the non-target classes towards uniform.
 * Per valid sample with label y, 𝒩 = {j ≠ y}, u = 1/(C−1), q_j = softmax over 𝒩:
 *     ℓ = (lse − x_y) + (λ/2)·Σ_{j∈𝒩} (q_j − u)·log q_j
 *       = (lse − x_y) + (λ/2)·(E_q[x] − u·Σ_{j∈𝒩} x_j),   E_q[x] = Σ_{j∈𝒩} q_j·x_j.
 * The log-sum-exps over all classes and over 𝒩 keep separate running maxima, so a target
 * logit far above the others (e.g. by 1e3) gives a finite loss and gradient.
 *
 * in  input   N×C or N×C×d1×…×dk logits, f32/f16/bf16/f64, any strides; C >= 2.
 * in  target  class indices, i64 or i32, shape N×d1×…×dk, in [0, C) or ignore_index.
 * in  opts    NULL for defaults.
 * out loss    reduction NONE: the target's shape, zeros at ignored samples; MEAN / SUM: a
 *             0-d or 1-element tensor.  f32 (f64 for f64 input).  MEAN divides by the
 *             number of valid samples; none valid gives NaN.
 * out state   NULL, or the saved state for _backward: shape N×3×d1×…×dk (the input's
 *             shape with 3 on axis 1), f32 (f64 for f64 input): per sample lse over all
 *             classes, lse over 𝒩, and E_q[x] (zeros at ignored samples).
 * Statuses: INVALID_ARGUMENT (NULL ctx/input/target/loss, λ < 0 or not finite, bad enum,
 *           C < 2), SHAPE, DTYPE, DEVICE, LAYOUT, ALIAS, INVALID_LABEL (CPU: before
 *           anything is written; CUDA: through the error slot, the sample's loss is then
 *           NaN and its gradient zero), UNSUPPORTED, CUDA, OUT_OF_MEMORY.
 */
ploss_status ploss_large_margin_softmax_forward(ploss_ctx_t *ctx, const DLTensor *input,
                                                const DLTensor *target,
                                                const ploss_large_margin_opts *opts, DLTensor *loss,
                                                DLTensor *state);

/**
 * Large-margin softmax loss, backward: grad_input = ∂(reduced loss)/∂input · grad_loss.
 *     ∂ℓ/∂x_y = p_y − 1,   ∂ℓ/∂x_j = p_j + (λ/2)·(q_j·(x_j − E_q[x] + 1) − u)   (j ≠ y),
 * zero at ignored samples; MEAN scales by 1/(number of valid samples), and by 0 when
 * there is none.
 *
 * in  input, target, opts   as given to _forward.
 * in  state      NULL (recomputed from input) or the state written by _forward.
 * in  grad_loss  upstream gradient: 0-d/1-element for MEAN/SUM, the loss's shape for
 *                NONE; f32 or f64, on the input's device.
 * out grad_input the input's shape and dtype, any non-overlapping strides; may not overlap
 *                any input.
 * Statuses: as _forward.
 */
ploss_status ploss_large_margin_softmax_backward(ploss_ctx_t *ctx, const DLTensor *input,
                                                 const DLTensor *target,
                                                 const ploss_large_margin_opts *opts,
                                                 const DLTensor *state, const DLTensor *grad_loss,
                                                 DLTensor *grad_input);

/**
 * Large-margin softmax loss, forward and backward in one pass: writes `loss` as _forward
 * and grad_input = opts->scale · ∂(reduced loss)/∂input (NONE: of the sum of the losses).
 * With opts->inplace = 1, grad_input may be the input tensor itself.
 * Statuses: as _forward.
 */
ploss_status ploss_large_margin_softmax_fused(ploss_ctx_t *ctx, const DLTensor *input,
                                              const DLTensor *target,
                                              const ploss_large_margin_opts *opts, DLTensor *loss,
                                              DLTensor *grad_input);
/* ---- Taylor softmax and log-Taylor softmax (LOSSES.md §2.4) ------------------------- */

/** Options of the Taylor softmax ops; fill with ploss_taylor_softmax_opts_init(). */
typedef struct ploss_taylor_softmax_opts {
    int n;   /* order of the Taylor polynomial: even, 2 <= n <= 64; default 2          */
    int dim; /* the axis normalised over; negative counts from the end; default 1       */
} ploss_taylor_softmax_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_taylor_softmax_opts_init(ploss_taylor_softmax_opts *opts);

/**
 * Taylor softmax, forward (A. de Brébisson and P. Vincent, "An Exploration of Softmax
 * Alternatives Belonging to the Spherical Loss Family", ICLR 2016; K. Banerjee et al.,
 * "Exploring Alternatives to Softmax Function", arXiv:2011.11538; pytorch-loss
 * TaylorSoftmaxV1/V3; LOSSES.md §2.4).  exp is replaced by its even-order Taylor
 * polynomial f_n(v) = Σ_{k≤n} v^k/k!, which is positive on all of ℝ:
 *     output_j = f_n(x_j) / Σ_k f_n(x_k)   along `dim`.
 * Not shift-invariant (no max is subtracted).  Computed in f32 for f32/f16/bf16 inputs
 * (f64 for f64 inputs and for n > 10, where the alternating terms cancel), so f16
 * inputs cannot overflow the intermediate sums.
 *
 * in  input   any rank >= 1, f32/f16/bf16/f64, any strides such that the dims before
 *             and after `dim` can each be walked as one strided axis.
 * in  opts    NULL for defaults.
 * out output  the input's shape and dtype, any non-overlapping strides; may not overlap
 *             the input.
 * Statuses: INVALID_ARGUMENT (NULL ctx/input/output, n odd, < 2 or > 64, dim out of
 *           range), SHAPE, DTYPE, DEVICE, LAYOUT, ALIAS, UNSUPPORTED, CUDA.
 */
ploss_status ploss_taylor_softmax_forward(ploss_ctx_t *ctx, const DLTensor *input,
                                          const ploss_taylor_softmax_opts *opts, DLTensor *output);

/**
 * Taylor softmax, backward: with F_j = f_n(x_j), Z = Σ_j F_j, G the upstream gradient,
 *     grad_input_k = f_{n−1}(x_k)·(G_k/Z − (Σ_j F_j·G_j)/Z²)      (f_n′ = f_{n−1}).
 * in  input, opts    as given to _forward (the sums are recomputed from the input).
 * in  grad_output    the input's shape and dtype, any strides.
 * out grad_input     the input's shape and dtype; may not overlap the inputs.
 * Statuses: as _forward.
 */
ploss_status ploss_taylor_softmax_backward(ploss_ctx_t *ctx, const DLTensor *input,
                                           const DLTensor *grad_output,
                                           const ploss_taylor_softmax_opts *opts,
                                           DLTensor *grad_input);

/**
 * Log-Taylor softmax, forward: output_j = log f_n(x_j) − log Σ_k f_n(x_k) along `dim`
 * (pytorch-loss LogTaylorSoftmaxV1/V3).  Shapes, dtypes and statuses as
 * ploss_taylor_softmax_forward.
 */
ploss_status ploss_log_taylor_softmax_forward(ploss_ctx_t *ctx, const DLTensor *input,
                                              const ploss_taylor_softmax_opts *opts,
                                              DLTensor *output);

/**
 * Log-Taylor softmax, backward:
 *     grad_input_k = f_{n−1}(x_k)·(G_k/F_k − (Σ_j G_j)/Z).
 * Shapes, dtypes and statuses as ploss_taylor_softmax_backward.
 */
ploss_status ploss_log_taylor_softmax_backward(ploss_ctx_t *ctx, const DLTensor *input,
                                               const DLTensor *grad_output,
                                               const ploss_taylor_softmax_opts *opts,
                                               DLTensor *grad_input);

/* ---- Taylor cross-entropy (LOSSES.md §2.5) ------------------------------------------ */

/** Options of the Taylor cross-entropy; fill with ploss_taylor_cross_entropy_opts_init(). */
typedef struct ploss_taylor_cross_entropy_opts {
    ploss_reduction reduction; /* default MEAN                                              */
    int64_t ignore_index;      /* default -1 (pytorch-loss TaylorCrossEntropyLossV1/V3)      */
    int n;                     /* even order, 2 <= n <= 64; default 2                        */
    double scale;   /* _fused only: gradient multiplier (the upstream gradient), default 1 */
    int inplace;    /* _fused only: 1 allows grad_input to be the input itself, default 0  */
} ploss_taylor_cross_entropy_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_taylor_cross_entropy_opts_init(ploss_taylor_cross_entropy_opts *opts);

/**
 * Taylor cross-entropy, forward: the NLL of the log-Taylor softmax over the class axis
 * (pytorch-loss TaylorCrossEntropyLossV1/V3; LOSSES.md §2.5).  Per valid sample with
 * label y, F_j = f_n(x_j), Z = Σ_j F_j:   ℓ = log Z − log F_y.
 *
 * in  input   N×C or N×C×d1×…×dk logits, f32/f16/bf16/f64, any strides; C >= 1.
 * in  target  class indices, i64 or i32, shape N×d1×…×dk, in [0, C) or ignore_index.
 * in  opts    NULL for defaults.
 * out loss    reduction NONE: the target's shape, zeros at ignored samples; MEAN / SUM: a
 *             0-d or 1-element tensor.  f32 (f64 for f64 input).  MEAN divides by the
 *             number of valid samples; none valid gives NaN.
 * out state   NULL, or the saved state for _backward: Z per sample, the target's shape,
 *             f32 (f64 for f64 input).
 * Statuses: INVALID_ARGUMENT (NULL ctx/input/target/loss, n odd, < 2 or > 64, bad enum),
 *           SHAPE, DTYPE, DEVICE, LAYOUT, ALIAS, INVALID_LABEL (CPU: before anything is
 *           written; CUDA: through the error slot, the sample's loss is then NaN and its
 *           gradient zero), UNSUPPORTED, CUDA, OUT_OF_MEMORY.
 */
ploss_status ploss_taylor_cross_entropy_forward(ploss_ctx_t *ctx, const DLTensor *input,
                                                const DLTensor *target,
                                                const ploss_taylor_cross_entropy_opts *opts,
                                                DLTensor *loss, DLTensor *state);

/**
 * Taylor cross-entropy, backward:
 *     ∂ℓ/∂x_k = f_{n−1}(x_k)·(1/Z − [k = y]/F_y),
 * zero at ignored samples; MEAN scales by 1/(number of valid samples) (0 when none).
 * in  state      NULL (recomputed) or the state written by _forward.
 * in  grad_loss  0-d/1-element for MEAN/SUM, the loss's shape for NONE; f32 or f64.
 * out grad_input the input's shape and dtype; may not overlap any input.
 * Statuses: as _forward.
 */
ploss_status ploss_taylor_cross_entropy_backward(ploss_ctx_t *ctx, const DLTensor *input,
                                                 const DLTensor *target,
                                                 const ploss_taylor_cross_entropy_opts *opts,
                                                 const DLTensor *state, const DLTensor *grad_loss,
                                                 DLTensor *grad_input);

/**
 * Taylor cross-entropy, forward and backward in one pass: `loss` as _forward and
 * grad_input = opts->scale · ∂(reduced loss)/∂input (NONE: of the sum of the losses);
 * with opts->inplace = 1, grad_input may be the input tensor itself.
 * Statuses: as _forward.
 */
ploss_status ploss_taylor_cross_entropy_fused(ploss_ctx_t *ctx, const DLTensor *input,
                                              const DLTensor *target,
                                              const ploss_taylor_cross_entropy_opts *opts,
                                              DLTensor *loss, DLTensor *grad_input);

/* ---- PC-softmax cross-entropy (LOSSES.md §2.2) -------------------------------------- */

/** Options of the PC-softmax cross-entropy; fill with ploss_pc_softmax_opts_init(). */
typedef struct ploss_pc_softmax_opts {
    ploss_reduction reduction; /* default MEAN                                              */
    int64_t ignore_index;      /* default -100 (pytorch-loss PCSoftmaxCrossEntropyV2)       */
    double scale;   /* _fused only: gradient multiplier (the upstream gradient), default 1 */
    int inplace;    /* _fused only: 1 allows grad_input to be the input itself, default 0  */
} ploss_pc_softmax_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_pc_softmax_opts_init(ploss_pc_softmax_opts *opts);

/**
 * Probability-corrected softmax cross-entropy, forward (Z. Qin, D. Kim, T. Gedeon,
 * "Rethinking Softmax with Cross-Entropy: Neural Network Classifier as Mutual Information
 * Estimator", arXiv:1911.10688; pytorch-loss PCSoftmaxCrossEntropyV1/V2; LOSSES.md §2.2).
 * The softmax normaliser is weighted by the class priors w = lb_proportion:
 *     ℓ = log Σ_k w_k·e^(x_k) − x_y        (may be negative; a class with w_k = 0 drops out
 *                                           of the normaliser).
 *
 * in  input          N×C or N×C×d1×…×dk logits, f32/f16/bf16/f64, any strides; C >= 1.
 * in  target         class indices, i64 or i32, shape N×d1×…×dk, in [0, C) or ignore_index.
 * in  lb_proportion  the C class priors w (any float dtype, any stride, on the input's
 *                    device), not normalised; they must be finite and >= 0 with at least
 *                    one > 0.  CPU: checked before anything is written
 *                    (INVALID_ARGUMENT).  CUDA: not read by the host (that would
 *                    synchronise); a negative or NaN prior gives NaN results.
 * in  opts           NULL for defaults.
 * out loss    reduction NONE: the target's shape, zeros at ignored samples; MEAN / SUM: a
 *             0-d or 1-element tensor.  f32 (f64 for f64 input).  MEAN divides by the
 *             number of valid samples; none valid gives NaN.
 * out state   NULL, or the saved state for _backward: log Σ_k w_k·e^(x_k) per sample, the
 *             target's shape, f32 (f64 for f64 input).
 * Statuses: INVALID_ARGUMENT (NULL ctx/input/target/lb_proportion/loss, bad enum, bad
 *           priors on the CPU), SHAPE, DTYPE, DEVICE, LAYOUT, ALIAS, INVALID_LABEL (CPU:
 *           before anything is written; CUDA: through the error slot, the sample's loss is
 *           then NaN and its gradient zero), UNSUPPORTED, CUDA, OUT_OF_MEMORY.
 */
ploss_status ploss_pc_softmax_cross_entropy_forward(ploss_ctx_t *ctx, const DLTensor *input,
                                                    const DLTensor *target,
                                                    const DLTensor *lb_proportion,
                                                    const ploss_pc_softmax_opts *opts,
                                                    DLTensor *loss, DLTensor *state);

/**
 * PC-softmax cross-entropy, backward, with the correct gradient (the reference V2 uses
 * w_y in place of w_k, which is right only for equal priors):
 *     ∂ℓ/∂x_k = w_k·e^(x_k) / Σ_j w_j·e^(x_j) − [k = y],
 * zero at ignored samples; MEAN scales by 1/(number of valid samples) (0 when none).
 * in  state      NULL (recomputed) or the state written by _forward.
 * in  grad_loss  0-d/1-element for MEAN/SUM, the loss's shape for NONE; f32 or f64.
 * out grad_input the input's shape and dtype; may not overlap any input.
 * Statuses: as _forward.
 */
ploss_status ploss_pc_softmax_cross_entropy_backward(ploss_ctx_t *ctx, const DLTensor *input,
                                                     const DLTensor *target,
                                                     const DLTensor *lb_proportion,
                                                     const ploss_pc_softmax_opts *opts,
                                                     const DLTensor *state,
                                                     const DLTensor *grad_loss,
                                                     DLTensor *grad_input);

/**
 * PC-softmax cross-entropy, forward and backward in one pass: `loss` as _forward and
 * grad_input = opts->scale · ∂(reduced loss)/∂input (NONE: of the sum of the losses);
 * with opts->inplace = 1, grad_input may be the input tensor itself.
 * Statuses: as _forward.
 */
ploss_status ploss_pc_softmax_cross_entropy_fused(ploss_ctx_t *ctx, const DLTensor *input,
                                                  const DLTensor *target,
                                                  const DLTensor *lb_proportion,
                                                  const ploss_pc_softmax_opts *opts, DLTensor *loss,
                                                  DLTensor *grad_input);

/* ---- OHEM cross-entropy and OHEM large-margin (LOSSES.md §2.7) ---------------------- */

/** Options of the OHEM losses; fill with ploss_ohem_opts_init(). */
typedef struct ploss_ohem_opts {
    ploss_reduction reduction; /* default MEAN (over the kept samples)                      */
    int64_t ignore_index;      /* default 255 (pytorch-loss OhemCELoss)                      */
    double score_thresh;       /* τ in [0, 1]: keep samples whose p_y <= τ; default 0.7      */
    int64_t n_min;             /* keep at least the n_min hardest; -1 (default): ⌊M/16⌋ with
                                  M the number of samples, ignored ones included            */
    double lam;                /* ploss_ohem_large_margin_* only: λ >= 0, default 0.3        */
    double scale;   /* _fused only: gradient multiplier (the upstream gradient), default 1 */
    int inplace;    /* _fused only: 1 allows grad_input to be the input itself, default 0  */
} ploss_ohem_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_ohem_opts_init(ploss_ohem_opts *opts);

/**
 * OHEM cross-entropy, forward: online hard example mining over the pixels of the whole
 * batch (A. Shrivastava, A. Gupta, R. Girshick, "Training Region-based Object Detectors
 * with Online Hard Example Mining", CVPR 2016; the probability-threshold variant of
 * real-time segmentation code, pytorch-loss OhemCELoss; LOSSES.md §2.7), then
 * cross-entropy over the kept samples.
 *
 * Mining: the score of a valid sample is its softmax probability of the label, s = p_y,
 * rounded to f32 (τ too); ignored samples sort after every score.  With s_(r) the r-th
 * smallest score of all M samples, the kept set is
 *     K = {valid i : s_i <= t*},   t* = max(τ, s_(n_min))
 * (t* = τ when n_min = 0; K = every valid sample when n_min >= M, or when s_(n_min) is an
 * ignored sample's).  Ties: every sample whose score equals s_(n_min) is kept, so |K| can
 * exceed n_min (the reference keeps exactly n_min of the tied ones, in an arbitrary
 * order; the loss value over ties is the same either way, the subgradient is not).  A NaN
 * score (NaN logits) sorts above every number and below the ignored samples.  The
 * threshold is found on the device without sorting: a radix select over the 32-bit keys
 * of the scores (histograms of 11, 11 and 10 bits) that recomputes the scores instead of
 * storing them: no per-sample buffer, about 48 KiB of histogram state, the logits read again
 * only when fewer than n_min scores lie at or below the threshold; no host round trip.
 *
 * in  input   N×C or N×C×d1×…×dk logits, f32/f16/bf16/f64, any strides; C >= 1.
 * in  target  class indices, i64 or i32, shape N×d1×…×dk, in [0, C) or ignore_index.
 * in  opts    NULL for defaults.
 * out loss    reduction NONE: the target's shape, the sample's cross-entropy where kept and
 *             0 elsewhere; MEAN: Σ_{i∈K} ℓ_i / |K| (NaN when K is empty); SUM: Σ_{i∈K} ℓ_i.
 *             f32 (f64 for f64 input).
 * Statuses: INVALID_ARGUMENT (NULL ctx/input/target/loss, τ ∉ [0, 1], n_min < -1, bad
 *           enum), SHAPE, DTYPE, DEVICE, LAYOUT, ALIAS, INVALID_LABEL (CPU: before anything
 *           is written; CUDA: through the error slot, the sample's loss is then NaN, it
 *           is never kept and its gradient is zero), UNSUPPORTED, CUDA, OUT_OF_MEMORY.
 */
ploss_status ploss_ohem_cross_entropy_forward(ploss_ctx_t *ctx, const DLTensor *input,
                                              const DLTensor *target, const ploss_ohem_opts *opts,
                                              DLTensor *loss);

/**
 * OHEM cross-entropy, backward: the cross-entropy gradient p_k − [k = y] on the kept
 * samples (the selection is a constant), zero elsewhere; MEAN scales by 1/|K| (0 when K
 * is empty).  The mining is recomputed from the input: no state is kept.
 * in  grad_loss  0-d/1-element for MEAN/SUM, the loss's shape for NONE; f32 or f64.
 * out grad_input the input's shape and dtype; may not overlap any input.
 * Statuses: as _forward.
 */
ploss_status ploss_ohem_cross_entropy_backward(ploss_ctx_t *ctx, const DLTensor *input,
                                               const DLTensor *target, const ploss_ohem_opts *opts,
                                               const DLTensor *grad_loss, DLTensor *grad_input);

/**
 * OHEM cross-entropy, forward and backward in one pass: `loss` as _forward and
 * grad_input = opts->scale · ∂(reduced loss)/∂input (NONE: of the sum of the losses);
 * with opts->inplace = 1, grad_input may be the input tensor itself.
 * Statuses: as _forward.
 */
ploss_status ploss_ohem_cross_entropy_fused(ploss_ctx_t *ctx, const DLTensor *input,
                                            const DLTensor *target, const ploss_ohem_opts *opts,
                                            DLTensor *loss, DLTensor *grad_input);

/**
 * OHEM large-margin softmax, forward: the mining of ploss_ohem_cross_entropy_forward (on
 * the plain softmax score p_y), then the large-margin softmax loss (λ = opts->lam; see
 * ploss_large_margin_softmax_forward) over the kept samples (pytorch-loss
 * OhemLargeMarginLoss).  C >= 2.  Shapes, dtypes, reductions and statuses as
 * ploss_ohem_cross_entropy_forward, plus INVALID_ARGUMENT for λ < 0 and SHAPE for C < 2.
 */
ploss_status ploss_ohem_large_margin_forward(ploss_ctx_t *ctx, const DLTensor *input,
                                             const DLTensor *target, const ploss_ohem_opts *opts,
                                             DLTensor *loss);

/** OHEM large-margin softmax, backward: the large-margin gradient on the kept samples;
 *  as ploss_ohem_cross_entropy_backward otherwise. */
ploss_status ploss_ohem_large_margin_backward(ploss_ctx_t *ctx, const DLTensor *input,
                                              const DLTensor *target, const ploss_ohem_opts *opts,
                                              const DLTensor *grad_loss, DLTensor *grad_input);

/** OHEM large-margin softmax, forward and backward in one pass; as
 *  ploss_ohem_cross_entropy_fused otherwise. */
ploss_status ploss_ohem_large_margin_fused(ploss_ctx_t *ctx, const DLTensor *input,
                                           const DLTensor *target, const ploss_ohem_opts *opts,
                                           DLTensor *loss, DLTensor *grad_input);

/* ==== end section: softmax family II ==== */

#ifdef __cplusplus
}
#endif

#endif /* PLOSS_H */
