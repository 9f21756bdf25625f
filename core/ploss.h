/*
 * ploss.h — the public C ABI of ploss, fused loss functions for deep learning.
 *
 * Conventions :
 *  - Every fallible function returns a ploss_status; PLOSS_OK == 0.  On any other
 *    status, ploss_last_error() holds a message naming the argument at fault with the
 *    expected and the actual shape / dtype / device, and no output tensor has been written
 *    (a function returning a pointer through `out` — ploss_ctx_create, ploss_alloc,
 *    ploss_comm_init — sets *out to NULL on any failure, where out itself is not NULL).
 *  - Tensors are DLPack DLTensor views (dlpack/dlpack.h, Debian libdlpack-dev).
 *    Strides are in elements; strides == NULL means contiguous row-major; the data
 *    pointer and byte_offset must both be multiples of the element size, the lowest
 *    and highest elements at most 2^62 bytes apart, and no element 2^56 bytes or more past
 *    the data pointer (else PLOSS_ERR_LAYOUT: no allocation is that large; an offset or
 *    stride that reaches unmapped memory nearer cannot be detected).  The product
 *    of the sizes other than 0 must fit in int64, even for a tensor with a size 0 (else
 *    PLOSS_ERR_SHAPE).  CPU tensors may carry any device_id (one address space).  Supported
 *    dtypes: f32, f16, bf16, f64 (floating), i64, i32 (labels), u8 (bytes).  Lanes = 1.
 *  - An output's strides must be shown free of overlap: sorted by magnitude, each stride
 *    larger than the furthest offset the smaller ones reach (every permutation, slice or
 *    negative-stride view of a dense tensor); "non-overlapping strides" below means this.
 *    Others, interleaved layouts that happen not to overlap among them, give
 *    PLOSS_ERR_LAYOUT.
 *  - The class axis of an input N×C×d1×…×dk is axis 1, whatever its stride.
 *  - Outputs are allocated by the caller; nothing here allocates an output.
 *  - CUDA work is queued on the context's stream; forward/backward never synchronise
 *    with the host.  Invalid labels (boxes, negative variances) found inside a CUDA kernel
 *    are recorded in the context's device-side error slot and reported
 *    (PLOSS_ERR_INVALID_LABEL, PLOSS_ERR_INVALID_BOX, PLOSS_ERR_INVALID_ARGUMENT) by the next
 *    call that synchronises: ploss_ctx_synchronize() or a copy to the host.
 *  - Accumulation is fp32 for f16/bf16/f32 inputs on CUDA (at least fp32 on the CPU,
 *    which accumulates in f64), f64 for f64 inputs; gradients are written in the
 *    input's dtype; losses are f32 (f64 for f64 inputs).
 *  - Reductions are deterministic: the same inputs give bitwise the same results.
 *  - The library never aborts, exits, asserts or prints (given valid pointers: a destroyed
 *    context or freed memory is undefined behaviour, as in C).
 */
#ifndef PLOSS_H
#define PLOSS_H

#include <stddef.h>
#include <stdint.h>
#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Version of this ABI; init.lua refuses a library whose ploss_abi_version() differs.  It is
 *  the only guard against a header and a library of different layouts: the options structs
 *  carry a tag that catches an uninitialised struct, not a size or a version. */
#define PLOSS_ABI_VERSION 2

/** The last field of every options struct, opts_tag, set by its _opts_init: the functions
 * refuse (INVALID_ARGUMENT) a struct without it, as one filled by hand (`= {0}`, designated
 * initialisers) has 0 in the fields it leaves out, not their defaults.  Fill a struct with its
 * _opts_init, then set the fields to change; or pass NULL for every default. */
#define PLOSS_OPTS_TAG 0x706c6f73u

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
    PLOSS_ERR_LAYOUT = 5,           /* strides that cannot be used (an output's overlap) */
    PLOSS_ERR_ALIAS = 6,            /* an output overlaps an input it may not overlap:
                                       their spans (first to last byte) meet, which also
                                       refuses two interleaved views (even and odd elements) */
    PLOSS_ERR_INVALID_LABEL = 7,    /* a class index outside [0, C) and != ignore_index  */
    PLOSS_ERR_OUT_OF_MEMORY = 8,    /* host or device allocation failed                  */
    PLOSS_ERR_UNSUPPORTED = 9,      /* e.g. a CUDA tensor with a library built w/o CUDA  */
    PLOSS_ERR_CUDA = 10,            /* a CUDA runtime error (message has its string)     */
    PLOSS_ERR_INVALID_BOX = 11,     /* a box with x2 < x1 or y2 < y1 (width/height < 0)  */
    PLOSS_ERR_COMM = 12,            /* a collective failed: a rank timed out, exited,    */
                                    /* aborted, or called a different collective (NCCL) */
    PLOSS_STATUS_COUNT
} ploss_status;

/** A fixed name for a status, e.g. "PLOSS_ERR_SHAPE"; "PLOSS_UNKNOWN_STATUS" otherwise. */
const char *ploss_status_string(ploss_status status);

/** The calling thread's message for its last call that failed; a later call that
 *  succeeds clears it to "", except those that cannot fail (ploss_status_string,
 *  ploss_version, ploss_abi_version, ploss_built_with_cuda, ploss_cuda_device_count, the
 *  *_opts_init functions) and ploss_alloc and ploss_free (the library's own cleanup after a
 *  failure calls them), which leave it.
 *  Valid until the next ploss call on the same thread. */
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
 *  device-side error slot.
 *
 *  Threads.  A CPU context may be shared: any number of threads may call functions on
 *  one CPU context at the same time.  It keeps no state between calls (scratch memory is
 *  allocated per call; each thread has its own ploss_last_error()), and every concurrent
 *  call runs its own OpenMP team (OMP_NUM_THREADS threads each; called from inside an
 *  OpenMP parallel region of yours, one thread unless nested parallelism is enabled, so
 *  the losses built on matrix products then give OMP_NUM_THREADS=1's last bits with
 *  OpenBLAS's OpenMP build: see docs/losses.md, deterministic).  A CUDA context serves
 *  one thread at a time: every call reuses its workspace, cuBLAS handle and error slot
 *  in stream order, so threads sharing one must serialise their calls (a mutex); the
 *  usual way is a context, with its own stream, per thread.  The work of two calls on one
 *  CUDA context must not run at the same time on the device either (a stream switched by
 *  ploss_ctx_set_stream while work is still queued on the old one, a captured graph
 *  replayed on another stream beside direct calls): they share the workspace, the error
 *  slot and the arrival counter of the one-launch reductions.  On either kind,
 *  ploss_ctx_set_stream, ploss_ctx_set_deterministic and ploss_ctx_destroy must not
 *  overlap other calls on that context.  Separate contexts are independent; ploss_alloc,
 *  ploss_free and the memory counters are thread-safe.  Concurrent calls must not write
 *  a tensor that another of them reads or writes. */
typedef struct ploss_ctx ploss_ctx_t;

/** Opaque communicator (section "communicators" below; the `comm` option of the losses
 *  that shard over ranks). */
typedef struct ploss_comm ploss_comm_t;

/** Create a context for `device` (kDLCPU with device_id 0, or kDLCUDA with a device_id).
 *  Statuses: INVALID_ARGUMENT (out NULL), DEVICE (unknown device type or id),
 *  UNSUPPORTED (CUDA requested, built without CUDA), CUDA, OUT_OF_MEMORY. */
ploss_status ploss_ctx_create(DLDevice device, ploss_ctx_t **out);

/** Destroy a context and its workspace (NULL is accepted). Synchronises its stream.  The
 *  pointer is then invalid: passing it to any function (destroy included) is undefined
 *  behaviour, as for free(). */
void ploss_ctx_destroy(ploss_ctx_t *ctx);

/** The context's device; ctx NULL: {0, -1} (no device) and ploss_last_error() says so.  The
 *  getters (device, stream, deterministic) leave ploss_last_error() as it is otherwise. */
DLDevice ploss_ctx_device(const ploss_ctx_t *ctx);

/** Set the CUDA stream (a cudaStream_t passed as void *; NULL = legacy default stream).
 *  Statuses: INVALID_ARGUMENT (ctx NULL or a CPU context with a non-NULL stream). */
ploss_status ploss_ctx_set_stream(ploss_ctx_t *ctx, void *stream);

/** The CUDA stream as void * (NULL for the default stream and for CPU contexts; ctx NULL:
 *  NULL and ploss_last_error() says so). */
void *ploss_ctx_stream(const ploss_ctx_t *ctx);

/** Deterministic mode (default 1): fixed reduction order, no float atomics.  Every
 *  kernel in this version is deterministic; the flag is kept for faster future paths.
 *  deterministic: 0 or 1 (anything else: INVALID_ARGUMENT).  ploss_ctx_deterministic gives
 *  the flag; ctx NULL: -1 and ploss_last_error() says so. */
ploss_status ploss_ctx_set_deterministic(ploss_ctx_t *ctx, int deterministic);
int ploss_ctx_deterministic(const ploss_ctx_t *ctx);

/** Wait for the context's stream, then report and clear the device error slot.
 *  Statuses: INVALID_LABEL (a kernel saw a label outside [0, C)), INVALID_BOX (a box
 *  with x2 < x1 or y2 < y1), INVALID_ARGUMENT (a negative variance of the Gaussian NLL, a
 *  box loss's ignore value neither 0 nor 1), CUDA. */
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
 *  workspaces. */
typedef struct ploss_memory_stats {
    uint64_t current_bytes; /* bytes allocated now                         */
    uint64_t peak_bytes;    /* high-water mark since start or last reset   */
    uint64_t alloc_count;   /* number of successful allocations            */
} ploss_memory_stats;

/** Read the counters of `device`.  Statuses: INVALID_ARGUMENT, DEVICE (a device that does
 *  not exist: cpu:N for N ≠ 0, a GPU that is not visible), UNSUPPORTED (a CUDA device,
 *  built without CUDA). */
ploss_status ploss_memory_stats_get(DLDevice device, ploss_memory_stats *out);

/** Set the peak of `device` to its current value.  Statuses: DEVICE (as
 *  ploss_memory_stats_get), UNSUPPORTED. */
ploss_status ploss_memory_reset_peak(DLDevice device);

/* ------------------------------------------------------------------------------------ */
/* Tensor ops (support for the Lua tensor type)                                         */
/* ------------------------------------------------------------------------------------ */

/** dst ← src, element by element, any strides, converting dtypes (float↔int by C
 *  rules, floats to integers truncate; a NaN, or a float outside the integer dtype's range
 *  once truncated, gives an unspecified value: the caller checks such values, as the Lua
 *  tensor's :copy and :to do; float to float rounds to nearest even, f64 to f16 or bf16
 *  through f32 as PyTorch's conversions do, so a value within 2^-24 (relative) of a tie of
 *  the 16-bit dtype may round to the tie's other side).  Shapes must be equal.  Either
 *  tensor may be on the context's device or on the CPU (host↔device copies synchronise the
 *  stream and report the error slot).  dst must not overlap src unless identical.
 *  Statuses: SHAPE, DTYPE, DEVICE, LAYOUT (dst has overlapping strides), ALIAS,
 *  INVALID_LABEL (pending device error), CUDA, OUT_OF_MEMORY. */
ploss_status ploss_copy(ploss_ctx_t *ctx, DLTensor *dst, const DLTensor *src);

/** Every element of dst ← value (converted to dst's dtype; an integer dtype takes only an
 *  integer in its range, a float dtype ±inf, NaN or a finite value within its largest
 *  finite one — 65504 for f16 —, else INVALID_ARGUMENT).  Statuses: DTYPE, DEVICE, LAYOUT,
 *  INVALID_ARGUMENT, CUDA. */
ploss_status ploss_fill(ploss_ctx_t *ctx, DLTensor *dst, double value);

/** dst ← alpha·src + beta·dst, element by element (BLAS's axpby; PyTorch's
 *  dst.mul_(beta).add_(src, alpha=alpha) in one pass).  dst: a float tensor (f32, f16,
 *  bf16, f64) of any shape and strides without overlap, on the context's device.  src: a
 *  float tensor of dst's shape or broadcast to it by PyTorch's rules (src's dims aligned
 *  with dst's last ones, each of size 1 or dst's), on the same device; src may be dst
 *  itself (the same view) and may not otherwise overlap it.  As in BLAS, dst is not read
 *  when beta = 0 (a NaN or Inf there does not come through: a buffer is initialised);
 *  src is always read (alpha = 0 keeps a NaN or Inf of src, as PyTorch's add_).  Each element is fma(alpha, s, beta·d) in f64, rounded to
 *  dst's dtype (f16 and bf16 through f32, as ploss_copy), on the CPU and on CUDA alike.
 *  Statuses: INVALID_ARGUMENT (NULL ctx, dst or src, alpha or beta not finite), SHAPE,
 *  DTYPE, DEVICE, LAYOUT, ALIAS, CUDA. */
ploss_status ploss_axpby(ploss_ctx_t *ctx, DLTensor *dst, double alpha, const DLTensor *src, double beta);

/** Counter-based random numbers (Philox-4x32-10; Salmon et al., SC 2011).  Element k in
 *  row-major order of `dst` takes counter (offset + k) under key `seed`, so the same
 *  seed and offset give the same numbers on the CPU and on any GPU, whatever the strides
 *  (normal f64 values may differ in the last bit: the device's log/cos are not glibc's).
 *  uniform: values of dst's float dtype in [low, high) (low and high finite, within the
 *  dtype's finite values): a draw is
 *  held between the least and the greatest such value before it is rounded to the dtype,
 *  so rounding never gives high (nor a value below low).  normal: mean + std·N(0,1)
 *  (Box–Muller; mean and std finite).
 *  randint: integers in [low, high), uniform to a relative bias below 2^-32 (spans up to
 *  2^32: 64 random bits modulo the span) or span/2^128 (larger spans: 128 bits scaled)
 *  (any dtype; high > low; for i32 and u8 within the
 *  dtype's range; a float dst holds them exactly only up to its significand: 2^11 for f16,
 *  2^8 for bf16, 2^24 for f32, 2^53 for f64 in magnitude, beyond which they are rounded;
 *  for f16 within ±65519, which round to finite values).
 *  Statuses: INVALID_ARGUMENT (a bound, the mean or std not finite, high <= low, std < 0,
 *  no value of dst's float dtype in [low, high), [low, high) outside an integer dst's
 *  range or beyond f16's finite values), DTYPE, DEVICE, LAYOUT, CUDA. */
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
    PLOSS_REDUCTION_BATCHMEAN = 3, /* sum / the input's first dim (kl_div only, as PyTorch)     */
    PLOSS_REDUCTION_COUNT
} ploss_reduction;


/* The losses: options, enums and entry points, generated from their descriptions. */
#include "ploss_losses.h"

/* ==== support ops: what a training script needs around the losses ==================== */

/* ---- GEMM (core/support/gemm.c; OpenBLAS CBLAS on the CPU, cuBLAS on CUDA) ------------------- */

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
 * f64 (dgemm).  K = 0 or alpha = 0 gives c ← beta·c (a and b not read: a NaN there does
 * not reach c, as BLAS); M = 0 or N = 0 does nothing.  M, N, K and the
 * leading strides must fit in 32 bits (BLAS's int).  On CUDA the context's cuBLAS handle
 * is created on first use (its own workspace is not counted by ploss_memory_stats_get).
 * Statuses: INVALID_ARGUMENT (ctx/a/b/c NULL, bad enum), SHAPE, DTYPE, DEVICE, LAYOUT,
 *           ALIAS, UNSUPPORTED (sizes over 2^31 − 1, CUDA tensor without CUDA), CUDA,
 *           OUT_OF_MEMORY.
 */
ploss_status ploss_gemm(ploss_ctx_t *ctx, ploss_transpose trans_a, ploss_transpose trans_b,
                        double alpha, const DLTensor *a, const DLTensor *b, double beta,
                        DLTensor *c);

/* ---- Activations (core/support/activations.c) ---------------------------------- */

/** The elementwise activations of ploss_activation_forward and _backward (below). */
typedef enum ploss_activation {
    /* y = x·σ(x) (Ramachandran et al. 2017; Elfwing et al. 2018; PyTorch silu)           */
    PLOSS_ACTIVATION_SWISH = 0,
    /* y = x·min(max(x + 3, 0), 6)/6 (Howard et al., MobileNetV3, ICCV 2019); derivative
     * 0 for x ≤ −3, x/3 + 1/2 for −3 < x < 3, 1 for x ≥ 3: PyTorch's hardswish_backward
     * since 2.8, the flat pieces' slopes at the kinks (before 2.8: −0.5 and 1.5 there).  */
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
 * Statuses: INVALID_ARGUMENT (NULL, bad enum, inplace neither 0 nor 1), SHAPE, DTYPE,
 *           DEVICE, LAYOUT, ALIAS, UNSUPPORTED, CUDA.
 */
ploss_status ploss_activation_forward(ploss_ctx_t *ctx, ploss_activation act,
                                      const DLTensor *input, DLTensor *output, int inplace);

/**
 * Activation backward: grad_input = f′(input) · grad_output, elementwise (the derivatives
 * of, recomputed from the saved input).
 * in  input        the tensor given to _forward.
 * in  grad_output  the input's shape and dtype.
 * out grad_input   the input's shape and dtype.  With inplace = 1 it may be grad_output
 *                  or input itself (same data, shape, strides); other overlaps are ALIAS.
 * Statuses: as _forward.
 */
ploss_status ploss_activation_backward(ploss_ctx_t *ctx, ploss_activation act,
                                       const DLTensor *input, const DLTensor *grad_output,
                                       DLTensor *grad_input, int inplace);

/* ---- Linear-layer helpers and argmax (core/support/linear.c) --------------------------------- */

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

/* ---- Optimisers (core/support/optim.c) ------------------------------------------------------- */

/** Options of ploss_sgd_step (torch.optim.SGD's); fill with ploss_sgd_opts_init(). */
typedef struct ploss_sgd_opts {
    double lr;           /* learning rate ≥ 0, default 0.01                               */
    double momentum;     /* μ ≥ 0, default 0                                              */
    double dampening;    /* default 0                                                     */
    double weight_decay; /* L2 coefficient ≥ 0 added to the gradient, default 0          */
    int nesterov;        /* 0 or 1, default 0; 1 needs momentum > 0 and dampening = 0    */
    uint32_t opts_tag; /* PLOSS_OPTS_TAG, set by ploss_sgd_opts_init() */
} ploss_sgd_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_sgd_opts_init(ploss_sgd_opts *opts);

/** The checks of ploss_sgd_step on its options alone (ranges, flags, nesterov's needs): for a
 * caller that takes options long before the first step.  NULL (the defaults) is valid.
 * Statuses: INVALID_ARGUMENT. */
ploss_status ploss_sgd_opts_check(const ploss_sgd_opts *opts);

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
    int decoupled_weight_decay; /* 0: Adam (wd·p added to g); 1: AdamW (p ← p·(1 − lr·wd));
                                   no other value */
    uint32_t opts_tag; /* PLOSS_OPTS_TAG, set by ploss_adam_opts_init() */
} ploss_adam_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_adam_opts_init(ploss_adam_opts *opts);

/** The checks of ploss_adam_step on its options alone, as ploss_sgd_opts_check's.
 * Statuses: INVALID_ARGUMENT. */
ploss_status ploss_adam_opts_check(const ploss_adam_opts *opts);

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

/** Options of ploss_ema_update; fill with ploss_ema_opts_init(). */
typedef struct ploss_ema_opts {
    double decay; /* d in [0, 1]; default 0.9999                                             */
    int warmup;   /* 1: d = min(decay, (1 + t)/(10 + t)) (TensorFlow's ExponentialMovingAverage
                     with num_updates); 0: d = decay; default 1                                */
    uint32_t opts_tag; /* PLOSS_OPTS_TAG, set by ploss_ema_opts_init() */
} ploss_ema_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_ema_opts_init(ploss_ema_opts *opts);

/**
 * One update of the exponential moving averages of n tensors, all in one pass (one launch
 * on CUDA for up to 256 tensors): for a float tensor
 *     shadow ← shadow + (1 − d)·(param − shadow)   (= d·shadow + (1 − d)·param),
 * computed in f32 (f64 for f64), and for an integer tensor (a step counter) shadow ← param.
 * t = `updates` is the number of earlier updates (0 for the first), for the warm-up.
 * in/out shadows  n tensors; shadows[i] has params[i]'s shape and dtype (any dtype),
 *                 contiguous, on the context's device.
 * in     params   n tensors, contiguous; none may overlap a shadow.
 * Statuses: INVALID_ARGUMENT (NULL ctx, lists or tensors, n < 0, updates < 0, decay
 *           outside [0, 1], warmup not 0/1), SHAPE, DTYPE, DEVICE, LAYOUT (a tensor that is
 *           not contiguous), ALIAS, UNSUPPORTED, CUDA.  Nothing is written on an error.
 */
ploss_status ploss_ema_update(ploss_ctx_t *ctx, DLTensor *const *shadows, const DLTensor *const *params,
                              int64_t n, int64_t updates, const ploss_ema_opts *opts);

/**
 * Exchange the contents of a[i] and b[i] for i < n, in one pass (EMA's apply / restore:
 * the averaged weights into the model and the live ones into the shadows, without a third
 * buffer).  a[i] and b[i]: the same shape and dtype, contiguous, not overlapping any other.
 * Statuses: as ploss_ema_update.
 */
ploss_status ploss_ema_swap(ploss_ctx_t *ctx, DLTensor *const *a, DLTensor *const *b, int64_t n);


/* ---- One-hot encoding with label smoothing ------------------------ */

/** Options of ploss_one_hot; fill with ploss_one_hot_opts_init(). */
typedef struct ploss_one_hot_opts {
    int64_t ignore_index;                            /* default -1 (pytorch-loss OnehotEncoder) */
    double label_smoothing;                          /* ε in [0, 1], default 0                  */
    ploss_smoothing_convention smoothing_convention; /* default PYTORCH (as cross-entropy)     */
    uint32_t opts_tag; /* PLOSS_OPTS_TAG, set by ploss_one_hot_opts_init() */
} ploss_one_hot_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_one_hot_opts_init(ploss_one_hot_opts *opts);

/**
 * One-hot encoding of class indices along axis 1, with optional label smoothing
 * (pytorch-loss convert_to_one_hot / OnehotEncoder).  No gradient.
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
 *           with C = 1 and ε > 0), SHAPE, DTYPE (also an integer dtype with ε > 0), DEVICE,
 *           LAYOUT, ALIAS, INVALID_LABEL (CPU: found before anything is written; CUDA: through
 *           the context's error slot, the sample's row is then all zero), UNSUPPORTED, CUDA.
 */
ploss_status ploss_one_hot(ploss_ctx_t *ctx, const DLTensor *target, const ploss_one_hot_opts *opts,
                           DLTensor *out);


/* ---- Taylor softmax and log-Taylor softmax ------------------------- */

/** Options of the Taylor softmax ops; fill with ploss_taylor_softmax_opts_init(). */
typedef struct ploss_taylor_softmax_opts {
    int n;   /* order of the Taylor polynomial: even, 2 <= n <= 64; default 2          */
    int dim; /* the axis normalised over; negative counts from the end; default 1       */
    uint32_t opts_tag; /* PLOSS_OPTS_TAG, set by ploss_taylor_softmax_opts_init() */
} ploss_taylor_softmax_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_taylor_softmax_opts_init(ploss_taylor_softmax_opts *opts);

/**
 * Taylor softmax, forward (A. de Brébisson and P. Vincent, "An Exploration of Softmax
 * Alternatives Belonging to the Spherical Loss Family", ICLR 2016; K. Banerjee et al.,
 * "Exploring Alternatives to Softmax Function", arXiv:2011.11538; pytorch-loss
 * TaylorSoftmaxV1/V3).  exp is replaced by its even-order Taylor
 * polynomial f_n(v) = Σ_{k≤n} v^k/k!, which is positive on all of ℝ:
 *     output_j = f_n(x_j) / Σ_k f_n(x_k)   along `dim`.
 * Not shift-invariant (no max is subtracted).  Computed in f32 on CUDA for f32/f16/bf16
 * inputs (f64 for f64 inputs and for n > 10, where the alternating terms cancel; the CPU
 * computes in f64 throughout), so f16 inputs cannot overflow the intermediate sums.
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


/* ---- Pairwise box similarities (IoU, GIoU, DIoU, CIoU) -------------- */

/** Which similarity ploss_box_iou computes (torchvision.ops.box_iou, generalized_box_iou,
 *  distance_box_iou, complete_box_iou). */
typedef enum ploss_box_iou_kind {
    PLOSS_BOX_IOU_IOU = 0,
    PLOSS_BOX_IOU_GENERALIZED = 1,
    PLOSS_BOX_IOU_DISTANCE = 2,
    PLOSS_BOX_IOU_COMPLETE = 3,
    PLOSS_BOX_IOU_KIND_COUNT
} ploss_box_iou_kind;

/** Options of ploss_box_iou; fill with ploss_box_iou_opts_init(). */
typedef struct ploss_box_iou_opts {
    ploss_box_iou_kind kind;     /* default IOU                                          */
    double eps;                  /* ε of c² + ε and of CIoU's α, finite >= 0; 1e-7       */
    ploss_box_format box_format; /* of both box sets; default XYXY                       */
    uint32_t opts_tag; /* PLOSS_OPTS_TAG, set by ploss_box_iou_opts_init() */
} ploss_box_iou_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_box_iou_opts_init(ploss_box_iou_opts *opts);

/**
 * The similarity of every pair of boxes of two sets, torchvision's definitions (the
 * similarities s whose losses 1 − s are ploss_box_iou_loss and the others, with the IoU
 * and GIoU denominators without ε, as torchvision's pairwise functions): IoU = I/U,
 * GIoU = IoU − (A_C − U)/A_C, DIoU = IoU − ρ²/(c² + ε), CIoU = DIoU − α·v.  Two boxes of
 * zero area have IoU 1 when they are the same box and 0 otherwise (torchvision: 0/0).
 * No gradient.
 *
 * in  boxes1  N×4 boxes, f32/f16/bf16/f64, any strides.
 * in  boxes2  M×4 boxes, any float dtype, any strides.
 * in  opts    NULL for defaults.
 * out out     N×M, f32 (f64 when boxes1 is f64), any non-overlapping strides:
 *             out[i, j] = s(boxes1[i], boxes2[j]).
 * Statuses: INVALID_ARGUMENT (NULL ctx/boxes1/boxes2/out, a bad enum, eps not finite >= 0),
 *           SHAPE, DTYPE, DEVICE, LAYOUT, ALIAS, INVALID_BOX (a box with x2 < x1 or y2 < y1:
 *           CPU: before anything is written; CUDA: through the context's error slot, its
 *           row or column of out is NaN), UNSUPPORTED, CUDA.
 */
ploss_status ploss_box_iou(ploss_ctx_t *ctx, const DLTensor *boxes1, const DLTensor *boxes2,
                           const ploss_box_iou_opts *opts, DLTensor *out);

/* ==== communicators: collectives across processes (core/comm.c) ====================== */

/*
 * A communicator joins `nranks` processes on one machine, one per device, for the
 * collectives that sharded losses need.  The backend follows the context's device:
 *  - CPU: POSIX shared memory (shm_open, a segment named from the id, unlinked once every
 *    rank has joined) and a process-shared barrier.  Every collective is blocking and
 *    deterministic: sums are taken in rank order (rank 0's value + rank 1's + …), once, and
 *    the same result is copied to every rank, so every rank gets bitwise the same values;
 *    f16/bf16 are summed in f32 and rounded once.  Ranks must run as one user.
 *  - CUDA (a library built with NCCL): one NCCL communicator, created non-blocking; the
 *    collectives are queued on the context's stream (stream-ordered, asynchronous) and
 *    ploss_comm_synchronize waits for them.  NCCL's sums are deterministic for a fixed rank
 *    count and topology and the same NCCL version (its algorithm choice, ring or tree, and
 *    so the order of the additions, depends on both).  One GPU per rank: NCCL refuses two
 *    ranks on one device.  Without NCCL, a CUDA context gives UNSUPPORTED.
 * The unique id is a random token: one process makes it (ploss_comm_unique_id) and every
 * rank receives it (an environment variable, a file: tools/launch.sh does this).  The ranks
 * meet through the shared-memory segment named from it (on CUDA, rank 0 publishes NCCL's
 * own id there), so all ranks must run on one machine.
 * Failures do not hang: every wait (joining, each collective's barriers, NCCL's
 * non-blocking initialisation and enqueueing, ploss_comm_synchronize) gives up after the
 * timeout of ploss_comm_opts with PLOSS_ERR_COMM; the CPU backend also notices at once a
 * rank whose process has exited, or one that called ploss_comm_abort, and a rank that
 * calls a different collective, dtype or size.  After a timeout, exit or abort the
 * communicator is unusable on every rank (each further call gives PLOSS_ERR_COMM): destroy it.
 * Threads: a communicator serves one thread at a time, and every rank must call the same
 * collectives in the same order.
 */

/** The size of a communicator's unique id. */
#define PLOSS_COMM_ID_BYTES 32

/** An opaque unique id: a random token with a check value (ploss_comm_init refuses bytes
 *  that ploss_comm_unique_id did not make).  Plain bytes: copy it, write it as hex. */
typedef struct ploss_comm_id {
    uint8_t bytes[PLOSS_COMM_ID_BYTES];
} ploss_comm_id;

/* ploss_comm_t, the opaque communicator, is declared with the context above. */

/** The reduction of ploss_comm_all_reduce and ploss_comm_reduce_scatter. */
typedef enum ploss_reduce_op {
    PLOSS_REDUCE_SUM = 0, /* integer sums wrap around (two's complement), as NCCL's */
    PLOSS_REDUCE_MAX = 1, /* floats: C's fmax (a NaN counts only when all are NaN) */
    PLOSS_REDUCE_OP_COUNT
} ploss_reduce_op;

/** Options of ploss_comm_init; fill with ploss_comm_opts_init(). */
typedef struct ploss_comm_opts {
    double timeout; /* seconds any wait may last (joining, a collective, a synchronisation),
                       finite > 0; default 300                                            */
    uint32_t opts_tag; /* PLOSS_OPTS_TAG, set by ploss_comm_opts_init() */
} ploss_comm_opts;

/** Fill `opts` with the defaults listed in the struct. */
void ploss_comm_opts_init(ploss_comm_opts *opts);

/** A fresh unique id (24 random bytes from the kernel, getrandom).
 *  Statuses: INVALID_ARGUMENT (out NULL), UNSUPPORTED (no random source). */
ploss_status ploss_comm_unique_id(ploss_comm_id *out);

/**
 * Join the communicator `id` as rank `rank` of `nranks`; returns once every rank has
 * joined (or the timeout).  ctx: the rank's context (CPU, or CUDA on its own GPU); it
 * must outlive the communicator, and the collectives run on its device and stream.
 * nranks = 1 needs no other process.  The CPU backend takes up to 4096 ranks.
 * Statuses: INVALID_ARGUMENT (NULL, nranks < 1, rank outside [0, nranks), an id not made
 *           by ploss_comm_unique_id, a bad timeout, a rank already taken, ranks that
 *           disagree on nranks or on the device type), UNSUPPORTED (CUDA without NCCL),
 *           COMM (a rank did not join in time, exited or aborted; NCCL's initialisation
 *           failed), OUT_OF_MEMORY, CUDA.
 */
ploss_status ploss_comm_init(ploss_ctx_t *ctx, int nranks, int rank, const ploss_comm_id *id,
                             const ploss_comm_opts *opts, ploss_comm_t **out);

/** Leave and free the communicator (NULL is accepted); does not wait for the other ranks.
 *  On CUDA it first waits (up to the timeout) for the queued collectives, then finalises
 *  NCCL's communicator, or aborts it after an error.  Statuses: COMM (the wait failed; the
 *  communicator is freed anyway), CUDA. */
ploss_status ploss_comm_destroy(ploss_comm_t *comm);

/** Make the communicator unusable on every rank: the CPU backend's other ranks fail at
 *  once in their current or next collective (COMM, naming this rank); on CUDA NCCL's
 *  communicator is aborted (the others fail with an NCCL error or their timeout).  For a
 *  rank that cannot go on (an invalid input found before a collective).  Then destroy it.
 *  Statuses: INVALID_ARGUMENT (NULL). */
ploss_status ploss_comm_abort(ploss_comm_t *comm);

/** This process's rank, and the number of ranks (-1 for NULL). */
int ploss_comm_rank(const ploss_comm_t *comm);
int ploss_comm_size(const ploss_comm_t *comm);

/** The context the communicator was made with (NULL for NULL). */
ploss_ctx_t *ploss_comm_context(const ploss_comm_t *comm);

/**
 * All-reduce: recv ← op over the ranks of send, elementwise (in rank order on the CPU).
 * in  send  any shape, any dtype (f32, f16, bf16, f64, i64, i32, u8), contiguous, on the
 *           communicator's device; the same number of elements and dtype on every rank.
 * out recv  send's number of elements (any shape) and dtype, contiguous; may be send
 *           itself (same data pointer and byte offset: in place); no other overlap.
 * Statuses: INVALID_ARGUMENT (NULL, bad op), SHAPE, DTYPE, DEVICE, LAYOUT (not
 *           contiguous), ALIAS, COMM (CPU: a rank passed another collective, dtype, op or
 *           size, timed out, exited or aborted; CUDA: an NCCL error or timeout), CUDA.
 */
ploss_status ploss_comm_all_reduce(ploss_comm_t *comm, const DLTensor *send, DLTensor *recv,
                                   ploss_reduce_op op);

/**
 * All-gather: every rank's send, concatenated in rank order: rank r's elements are
 * recv's elements [r·n, (r + 1)·n) in row-major order, n = send's element count.
 * in  send  any shape and dtype, contiguous; n and the dtype equal on every rank.
 * out recv  nranks·n elements (any shape), send's dtype, contiguous; no overlap with send.
 * Statuses: as ploss_comm_all_reduce.
 */
ploss_status ploss_comm_all_gather(ploss_comm_t *comm, const DLTensor *send, DLTensor *recv);

/**
 * Reduce-scatter: rank r receives op over the ranks of send's elements [r·n, (r + 1)·n)
 * (in rank order on the CPU), n = recv's element count.
 * in  send  nranks·n elements, any shape and dtype, contiguous; equal on every rank.
 * out recv  n elements (any shape), send's dtype, contiguous; no overlap with send.
 * Statuses: as ploss_comm_all_reduce (SHAPE when send's count is not nranks times recv's).
 */
ploss_status ploss_comm_reduce_scatter(ploss_comm_t *comm, const DLTensor *send, DLTensor *recv,
                                       ploss_reduce_op op);

/** Wait for the collectives queued on a CUDA communicator (the context's stream), up to
 *  the timeout, watching NCCL's asynchronous errors; after a timeout or an error NCCL's
 *  communicator is aborted.  A no-op on the CPU (its collectives are blocking).
 *  Statuses: INVALID_ARGUMENT (NULL), COMM, CUDA. */
ploss_status ploss_comm_synchronize(ploss_comm_t *comm);

#ifdef __cplusplus
}
#endif

#endif /* PLOSS_H */
