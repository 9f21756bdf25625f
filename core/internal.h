/*
 * internal.h — shared by the C core and the CUDA launchers (kernels/ *.cu files); not installed.
 * Everything here is plain C so that nvcc (C++) and the C11 core see the same layouts.
 */
#ifndef PLOSS_INTERNAL_H
#define PLOSS_INTERNAL_H

#include "ploss.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PLOSS_MAX_DIMS 8

/* Internal dtype codes (the C side switches on these; templates live in the .cu). */
typedef enum ploss_dtype {
    PLOSS_F32 = 0,
    PLOSS_F16 = 1,
    PLOSS_BF16 = 2,
    PLOSS_F64 = 3,
    PLOSS_I64 = 4,
    PLOSS_I32 = 5,
    PLOSS_U8 = 6,
    PLOSS_DTYPE_COUNT,
    PLOSS_DTYPE_INVALID = -1
} ploss_dtype;

/* Which entry point of a loss runs: _forward, _backward or _fused (every family). */
typedef enum { PLOSS_PASS_FORWARD = 0, PLOSS_PASS_BACKWARD = 1, PLOSS_PASS_FUSED = 2 } ploss_pass;

/* The upstream factor w times a coefficient k of a gradient, as autograd's clamp_min and
 * where backward give it: 0 where k is 0 (a hinge not active, a pair that carries no
 * gradient) whatever w is, so a NaN or infinite upstream gradient reaches only what it
 * flows through (the hinge losses of the CPU and CUDA backends). */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline double ploss_upstream(double w, double k) { return k != 0.0 ? w * k : 0.0; }

/* ---- errors (core/error.c) ---- */

/* Record a formatted message for this thread and return `status`. */
ploss_status ploss_error(ploss_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A double as an error message shows it, for a "%s": the fewest digits (15 to 17) that read
 * back as the same double (1.0000001 is not shown as 1, 0.1 not as 0.10000000000000001), a
 * NaN without its sign ("nan", where printf writes "-nan" for 0/0).  Returns buf. */
const char *ploss_shown_text(char *buf, size_t len, double v);
/* An int flag (`name` in the message) must be 0 or 1: 2 or −1 would be true to C without a
 * word, where the caller may have meant something else (a count, an enum). */
ploss_status ploss_check_flag(int v, const char *name);
/* INVALID_ARGUMENT for an options struct whose opts_tag is `tag`, not PLOSS_OPTS_TAG (set
 * by its _opts_init, named `init`): a struct filled by hand has 0 in the fields it leaves
 * out, not their defaults, which would compute another loss without a word.  Callers:
 * if (o.opts_tag != PLOSS_OPTS_TAG) return ploss_opts_tag_error(o.opts_tag, "…_opts_init"). */
ploss_status ploss_opts_tag_error(uint32_t tag, const char *init);
#define PLOSS_SHOWN(v) ploss_shown_text((char[32]){0}, 32, (v))

/* Clear the thread's message (called on entry of public functions). */
void ploss_clear_error(void);

/* ---- dtypes and tensors (core/tensor.c) ---- */

ploss_dtype ploss_dtype_of(DLDataType t);      /* PLOSS_DTYPE_INVALID if unsupported */
const char *ploss_dtype_name(ploss_dtype d);    /* "f32", … */
size_t ploss_dtype_size(ploss_dtype d);
int ploss_dtype_is_float(ploss_dtype d);

/* A checked, normalised view of a DLTensor: strides filled in, byte_offset applied. */
typedef struct ploss_view {
    char *data; /* data + byte_offset */
    ploss_dtype dtype;
    int ndim;
    int64_t shape[PLOSS_MAX_DIMS];
    int64_t strides[PLOSS_MAX_DIMS]; /* elements */
    int64_t numel;
    DLDevice device;
} ploss_view;

/* Normalise `t` (named `name` in messages) into `v`.  Rejects NULL, ndim outside
 * [0, PLOSS_MAX_DIMS], negative sizes, unsupported dtypes, NULL data with numel > 0, a data
 * pointer or byte_offset not a multiple of the element size, and elements more than 2^62
 * bytes apart or outside the address space: on success every byte offset of an element,
 * |stride|·index·element size and any sum of them, fits in int64. */
ploss_status ploss_view_init(ploss_view *v, const DLTensor *t, const char *name);
/* "f32[4, 5] on cuda:0" style description into buf. */
const char *ploss_view_describe(const ploss_view *v, char *buf, size_t len);
/* The tensor must be on the context's device. */
ploss_status ploss_view_check_device(const ploss_view *v, const ploss_ctx_t *ctx,
                                     const char *name);
/* An output: no two distinct indices may share memory (no zero or overlapping strides). */
ploss_status ploss_view_check_writable(const ploss_view *v, const char *name);
/* Byte range [lo, hi) touched by the view; returns 0 for an empty view. */
int ploss_view_extent(const ploss_view *v, uintptr_t *lo, uintptr_t *hi);
/* 1 when the byte ranges of a and b intersect. */
int ploss_view_overlaps(const ploss_view *a, const ploss_view *b);
/* 1 when the view is dense row-major (size-1 dims ignored). */
int ploss_view_is_contiguous(const ploss_view *v);
/* Re-point `v` (same shape) at dense row-major `data` of `dtype` on `device`. */
void ploss_view_make_contiguous(ploss_view *v, void *data, ploss_dtype dtype, DLDevice device);
/* 1 when a and b are the same view (data, dtype, shape, strides). */
int ploss_view_same(const ploss_view *a, const ploss_view *b);
/* Fail with ALIAS when output `out` overlaps input `in`. */
ploss_status ploss_check_no_alias(const ploss_view *out, const char *out_name,
                                  const ploss_view *in, const char *in_name);

/* ---- context (core/context.c) ---- */

struct ploss_ctx {
    DLDevice device;
    void *stream;        /* cudaStream_t */
    int deterministic;
    void *workspace;     /* CUDA only: device memory, grown on demand, counted as allocations */
    size_t workspace_bytes;
    int64_t *error_slot; /* CUDA: device memory, 3 × int64: {flag, offending label or box,
                          * arrival ticket}; the ticket is 0 between kernels: a kernel whose
                          * last block finishes its reduction counts its blocks there and
                          * that block sets it back to 0; a cooperative kernel's grid
                          * barriers count on it the same way */
    void *cublas;        /* cublasHandle_t, created by the first GEMM (kernels/support/gemm.cu) */
};

/* The flag of the CUDA error slot: what its second word names.  Any other nonzero flag is
 * an invalid label. */
enum {
    PLOSS_SLOT_LABEL = 1,
    PLOSS_SLOT_INPUT_BOX = 2,  /* the losses' input, target */
    PLOSS_SLOT_TARGET_BOX = 3,
    PLOSS_SLOT_BOXES1_BOX = 4, /* ploss_box_iou's boxes1, boxes2 */
    PLOSS_SLOT_BOXES2_BOX = 5,
    PLOSS_SLOT_NEGATIVE_VARIANCE = 6, /* the Gaussian NLL's var; the second word holds
                                       * INT64_MAX − the smallest index (atomicMax) */
    PLOSS_SLOT_IGNORE_VALUE = 7 /* a box loss's ignore mask: a value neither 0 nor 1 */
};

/* Scratch memory of at least `bytes` on a CUDA context's device, valid until the next call
 * on this context (stream-ordered reuse).  Grows the pool; never shrinks it.  CPU contexts
 * keep no per-call state, so that threads may share them (ploss.h): CPU backends allocate
 * their scratch per call with ploss_alloc / ploss_free, and this refuses a CPU context. */
ploss_status ploss_workspace(ploss_ctx_t *ctx, size_t bytes, void **out);

/* ---- CUDA runtime wrappers (kernels/runtime.cu); absent without CUDA ---- */
#ifdef PLOSS_HAVE_CUDA
enum { PLOSS_COPY_H2D = 0, PLOSS_COPY_D2H = 1, PLOSS_COPY_D2D = 2 };
int ploss_cuda_count(void);
ploss_status ploss_cuda_set_device(int device_id);
ploss_status ploss_cuda_malloc(int device_id, size_t bytes, void **out);
ploss_status ploss_cuda_free(int device_id, void *ptr);
/* Stream-ordered copy; H2D and D2H wait for completion. */
ploss_status ploss_cuda_memcpy(void *dst, const void *src, size_t bytes, int kind,
                               void *stream);
ploss_status ploss_cuda_memset(void *dst, int value, size_t bytes, void *stream);
ploss_status ploss_cuda_stream_sync(void *stream);
/* The last launch error, if any, as a ploss status naming `what`. */
ploss_status ploss_cuda_check_launch(const char *what);
/* Destroy a context's cuBLAS handle (kernels/support/gemm.cu); NULL is a no-op. */
void ploss_cuda_blas_destroy(int device_id, void *handle);
#endif

#ifdef __cplusplus
}
#endif

#endif /* PLOSS_INTERNAL_H */
