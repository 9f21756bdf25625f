/* context.c — contexts: device, stream, workspace pool and the device error slot. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "loss_check.h"

ploss_status ploss_ctx_create(DLDevice device, ploss_ctx_t **out)
{
    ploss_clear_error();
    if (!out)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "out: pointer is NULL");
    *out = NULL;
    if (device.device_type == kDLCUDA) {
#ifdef PLOSS_HAVE_CUDA
        int n = ploss_cuda_count();
        if (device.device_id < 0 || device.device_id >= n)
            return ploss_error(PLOSS_ERR_DEVICE, "device: cuda:%d does not exist (%d CUDA device%s visible)",
                               device.device_id, n, n == 1 ? "" : "s");
#else
        return ploss_error(PLOSS_ERR_UNSUPPORTED,
                           "device: cuda:%d requested but this ploss library was built without CUDA",
                           device.device_id);
#endif
    } else if (device.device_type != kDLCPU) {
        return ploss_error(PLOSS_ERR_DEVICE, "device: type %d is neither CPU (1) nor CUDA (2)",
                           (int)device.device_type);
    } else if (device.device_id != 0) {
        return ploss_error(PLOSS_ERR_DEVICE, "device: cpu:%d does not exist (the CPU is device 0)", device.device_id);
    }
    ploss_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "context: host allocation failed");
    ctx->device = device;
    if (device.device_type == kDLCPU)
        ctx->device.device_id = 0;
    ctx->deterministic = 1;
#ifdef PLOSS_HAVE_CUDA
    if (device.device_type == kDLCUDA) {
        void *slot = NULL;
        ploss_status st = ploss_alloc(ctx, 3 * sizeof(int64_t), &slot);
        if (st == PLOSS_OK)
            st = ploss_cuda_memset(slot, 0, 3 * sizeof(int64_t), NULL);
        if (st == PLOSS_OK)
            st = ploss_cuda_stream_sync(NULL);
        if (st != PLOSS_OK) {
            ploss_free(ctx, slot);
            free(ctx);
            return st;
        }
        ctx->error_slot = slot;
    }
#endif
    *out = ctx;
    return PLOSS_OK;
}

void ploss_ctx_destroy(ploss_ctx_t *ctx)
{
    if (!ctx)
        return;
#ifdef PLOSS_HAVE_CUDA
    if (ctx->device.device_type == kDLCUDA) {
        ploss_cuda_stream_sync(ctx->stream);
        ploss_cuda_blas_destroy(ctx->device.device_id, ctx->cublas);
    }
#endif
    ploss_free(ctx, ctx->workspace);
    ploss_free(ctx, ctx->error_slot);
    free(ctx);
}

/* The getters leave ploss_last_error() alone when they succeed (a caller's diagnostic may
 * read both); given NULL they set it. */
DLDevice ploss_ctx_device(const ploss_ctx_t *ctx)
{
    if (ctx)
        return ctx->device;
    ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    return (DLDevice){.device_type = (DLDeviceType)0, .device_id = -1}; /* no device */
}

ploss_status ploss_ctx_set_stream(ploss_ctx_t *ctx, void *stream)
{
    ploss_clear_error();
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    if (ctx->device.device_type == kDLCPU && stream)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "stream: a CPU context takes no CUDA stream");
    ctx->stream = stream;
    return PLOSS_OK;
}

void *ploss_ctx_stream(const ploss_ctx_t *ctx)
{
    if (ctx)
        return ctx->stream;
    ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    return NULL;
}

ploss_status ploss_ctx_set_deterministic(ploss_ctx_t *ctx, int deterministic)
{
    ploss_clear_error();
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    ploss_status st = ploss_check_flag(deterministic, "deterministic");
    if (st)
        return st;
    ctx->deterministic = deterministic;
    return PLOSS_OK;
}

int ploss_ctx_deterministic(const ploss_ctx_t *ctx)
{
    if (ctx)
        return ctx->deterministic;
    ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    return -1;
}

ploss_status ploss_ctx_synchronize(ploss_ctx_t *ctx)
{
    ploss_clear_error();
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
#ifdef PLOSS_HAVE_CUDA
    if (ctx->device.device_type == kDLCUDA) {
        int64_t slot[2] = {0, 0};
        ploss_status st = ploss_cuda_set_device(ctx->device.device_id);
        if (st == PLOSS_OK)
            st = ploss_cuda_memcpy(slot, ctx->error_slot, sizeof slot, PLOSS_COPY_D2H, ctx->stream);
        if (st != PLOSS_OK)
            return st;
        if (slot[0]) {
            static const int64_t zero[2] = {0, 0};
            st = ploss_cuda_memcpy(ctx->error_slot, zero, sizeof zero, PLOSS_COPY_H2D, ctx->stream);
            if (st != PLOSS_OK)
                return st;
            static const char *const box_sets[] = {"input", "target", "boxes1", "boxes2"};
            if (slot[0] >= PLOSS_SLOT_INPUT_BOX && slot[0] <= PLOSS_SLOT_BOXES2_BOX)
                return ploss_error(PLOSS_ERR_INVALID_BOX,
                                   "%s: box %lld (0-based) has x2 < x1 or y2 < y1 (width or height < 0), "
                                   "found by a CUDA kernel; the losses and gradients of the last calls on "
                                   "this context are invalid",
                                   box_sets[slot[0] - PLOSS_SLOT_INPUT_BOX], (long long)slot[1]);
            if (slot[0] == PLOSS_SLOT_IGNORE_VALUE)
                return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                                   "ignore: element %lld (0-based) is neither 0 nor 1 (a mask: 1 leaves the box "
                                   "out), found by a CUDA kernel; the losses and gradients of the last calls on "
                                   "this context are invalid",
                                   (long long)slot[1]);
            if (slot[0] == PLOSS_SLOT_NEGATIVE_VARIANCE)
                return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                                   "var: element %lld (0-based, row-major) is negative, found by a CUDA "
                                   "kernel (variances must be >= 0); the losses and gradients of the last "
                                   "calls on this context are invalid",
                                   (long long)(INT64_MAX - slot[1]));
            return ploss_error(PLOSS_ERR_INVALID_LABEL,
                               "target: a CUDA kernel found class index %lld, outside [0, C) and "
                               "not ignore_index" PLOSS_ONE_BASED_HINT "; the losses and gradients of the "
                               "last calls on this context are invalid",
                               (long long)slot[1]);
        }
    }
#endif
    return PLOSS_OK;
}

ploss_status ploss_workspace(ploss_ctx_t *ctx, size_t bytes, void **out)
{
    if (ctx->device.device_type == kDLCPU) /* a programming error: see internal.h */
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "ctx: a CPU context has no shared workspace "
                           "(threads may share it); CPU backends allocate scratch per call");
    if (bytes <= ctx->workspace_bytes) {
        *out = ctx->workspace;
        return PLOSS_OK;
    }
    void *fresh = NULL;
    /* the first request exactly (a context serving one loss keeps what it needs); a later
     * growth geometrically, by at most 64 MiB (a tile of hundreds of MiB is not rounded up
     * by half of itself), so that alternating requests do not reallocate every time */
    const size_t half = bytes / 2 < ((size_t)64 << 20) ? bytes / 2 : ((size_t)64 << 20);
    const size_t want = bytes + (ctx->workspace_bytes > 0 ? half : 0);
    ploss_status st = ploss_alloc(ctx, want, &fresh);
    if (st != PLOSS_OK)
        return st;
    ploss_free(ctx, ctx->workspace); /* cudaFree waits for queued work that uses it */
    ctx->workspace = fresh;
    ctx->workspace_bytes = want;
    *out = fresh;
    return PLOSS_OK;
}
