// comm_nccl.cu — the NCCL backend of the communicators (declared in core/comm_nccl.h).
// NCCL's communicator is created non-blocking (ncclConfig_t.blocking = 0): every NCCL call
// returns at once, possibly with ncclInProgress, and ncclCommGetAsyncError is polled until
// the call has finished, failed or run past the timeout, when the communicator is aborted
// (ncclCommAbort also stops the kernels of queued collectives).  A dead or stalled peer so
// gives PLOSS_ERR_COMM on the waiting ranks instead of a hang.
#include <cuda_runtime.h>
#include <nccl.h>

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_nccl.h"

static_assert(sizeof(ncclUniqueId) == PLOSS_NCCL_ID_BYTES, "ncclUniqueId has changed size");

struct ploss_nccl {
    ncclComm_t comm;
    int device_id;
    int broken; // aborted: every later call fails
    double timeout;
};

static double now_seconds()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Between two polls: a short sleep, so that a waiting rank leaves its CPU to the others.
static void pause_briefly()
{
    struct timespec ts = {0, 50000}; // 50 µs
    nanosleep(&ts, nullptr);
}

static ploss_status nccl_error(ncclResult_t r, ncclComm_t comm, const char *what)
{
    const char *last = ncclGetLastError(comm);
    return ploss_error(PLOSS_ERR_COMM, "%s: NCCL error %d (%s)%s%s", what, (int)r, ncclGetErrorString(r),
                       last && last[0] ? ": " : "", last ? last : "");
}

static ploss_status abort_with(ploss_nccl *c, ploss_status st)
{
    ploss_nccl_abort(c);
    return st;
}

// Poll ncclCommGetAsyncError until the last call on `c` has finished (ncclSuccess).
static ploss_status wait_async(ploss_nccl *c, const char *what)
{
    const double deadline = now_seconds() + c->timeout;
    for (;;) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(c->comm, &state);
        if (r != ncclSuccess)
            return abort_with(c, nccl_error(r, c->comm, what));
        if (state == ncclSuccess)
            return PLOSS_OK;
        if (state != ncclInProgress)
            return abort_with(c, nccl_error(state, c->comm, what));
        if (now_seconds() > deadline)
            return abort_with(c, ploss_error(PLOSS_ERR_COMM,
                                             "%s: timed out after %g s waiting for NCCL (a rank exited, "
                                             "stalled or called another collective); the communicator "
                                             "was aborted",
                                             what, c->timeout));
        pause_briefly();
    }
}

static ploss_status set_device(int device_id)
{
    cudaError_t e = cudaSetDevice(device_id);
    if (e != cudaSuccess)
        return ploss_error(PLOSS_ERR_CUDA, "cudaSetDevice(%d): %s", device_id, cudaGetErrorString(e));
    return PLOSS_OK;
}

extern "C" ploss_status ploss_nccl_unique_id(void *out)
{
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
        return nccl_error(r, nullptr, "ncclGetUniqueId");
    memcpy(out, &id, sizeof id);
    return PLOSS_OK;
}

extern "C" ploss_status ploss_nccl_init(int device_id, int nranks, int rank, const void *nccl_id,
                                        double timeout, ploss_nccl **out)
{
    *out = nullptr;
    ploss_status st = set_device(device_id);
    if (st != PLOSS_OK)
        return st;
    ploss_nccl *c = (ploss_nccl *)calloc(1, sizeof *c);
    if (!c)
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "communicator: host allocation failed");
    c->device_id = device_id;
    c->timeout = timeout;
    ncclUniqueId id;
    memcpy(&id, nccl_id, sizeof id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&c->comm, nranks, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
        st = nccl_error(r, c->comm, "ncclCommInitRankConfig");
        if (c->comm)
            (void)ncclCommAbort(c->comm);
        free(c);
        return st;
    }
    st = wait_async(c, "ncclCommInitRankConfig");
    if (st != PLOSS_OK) { // aborted by wait_async
        free(c);
        return st;
    }
    *out = c;
    return PLOSS_OK;
}

static ncclDataType_t nccl_dtype(ploss_dtype d)
{
    switch (d) {
    case PLOSS_F32: return ncclFloat32;
    case PLOSS_F16: return ncclFloat16;
    case PLOSS_BF16: return ncclBfloat16;
    case PLOSS_F64: return ncclFloat64;
    case PLOSS_I64: return ncclInt64;
    case PLOSS_I32: return ncclInt32;
    default: return ncclUint8; // PLOSS_U8 (core/comm.c passes only the seven dtypes)
    }
}

extern "C" ploss_status ploss_nccl_collective(ploss_nccl *c, int kind, const void *send, void *recv,
                                              size_t count, ploss_dtype dtype, ploss_reduce_op op,
                                              void *stream)
{
    static const char *const names[] = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter"};
    if (c->broken)
        return ploss_error(PLOSS_ERR_COMM, "%s: the communicator was aborted after an earlier "
                           "failure; destroy it", names[kind]);
    ploss_status st = set_device(c->device_id);
    if (st != PLOSS_OK)
        return st;
    const ncclDataType_t dt = nccl_dtype(dtype);
    const ncclRedOp_t rop = op == PLOSS_REDUCE_MAX ? ncclMax : ncclSum;
    cudaStream_t s = (cudaStream_t)stream;
    ncclResult_t r;
    if (kind == PLOSS_NCCL_ALL_REDUCE)
        r = ncclAllReduce(send, recv, count, dt, rop, c->comm, s);
    else if (kind == PLOSS_NCCL_ALL_GATHER)
        r = ncclAllGather(send, recv, count, dt, c->comm, s);
    else
        r = ncclReduceScatter(send, recv, count, dt, rop, c->comm, s);
    if (r == ncclInProgress)
        return wait_async(c, names[kind]);
    if (r != ncclSuccess)
        return abort_with(c, nccl_error(r, c->comm, names[kind]));
    return PLOSS_OK;
}

extern "C" ploss_status ploss_nccl_wait(ploss_nccl *c, void *stream)
{
    if (c->broken)
        return ploss_error(PLOSS_ERR_COMM, "synchronize: the communicator was aborted after an "
                           "earlier failure; destroy it");
    ploss_status st = set_device(c->device_id);
    if (st != PLOSS_OK)
        return st;
    const double deadline = now_seconds() + c->timeout;
    for (;;) {
        cudaError_t e = cudaStreamQuery((cudaStream_t)stream);
        if (e == cudaSuccess)
            return PLOSS_OK;
        if (e != cudaErrorNotReady)
            return abort_with(c, ploss_error(PLOSS_ERR_CUDA, "synchronize: cudaStreamQuery: %s",
                                             cudaGetErrorString(e)));
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(c->comm, &state);
        if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress))
            return abort_with(c, nccl_error(r != ncclSuccess ? r : state, c->comm, "synchronize"));
        if (now_seconds() > deadline)
            return abort_with(c, ploss_error(PLOSS_ERR_COMM,
                                             "synchronize: timed out after %g s waiting for the queued "
                                             "collectives (a rank exited, stalled or called another "
                                             "collective); the communicator was aborted",
                                             c->timeout));
        sched_yield();
    }
}

extern "C" void ploss_nccl_abort(ploss_nccl *c)
{
    if (c->broken)
        return;
    c->broken = 1;
    (void)cudaSetDevice(c->device_id);
    (void)ncclCommAbort(c->comm);
}

extern "C" int ploss_nccl_broken(const ploss_nccl *c) { return c->broken; }

extern "C" ploss_status ploss_nccl_destroy(ploss_nccl *c)
{
    ploss_status st = PLOSS_OK;
    if (!c->broken) {
        st = set_device(c->device_id);
        if (st == PLOSS_OK) {
            ncclResult_t r = ncclCommFinalize(c->comm);
            if (r == ncclSuccess || r == ncclInProgress)
                st = wait_async(c, "ncclCommFinalize"); // aborts on failure
            else
                st = abort_with(c, nccl_error(r, c->comm, "ncclCommFinalize"));
        }
        if (!c->broken)
            (void)ncclCommDestroy(c->comm);
    }
    free(c);
    return st;
}
