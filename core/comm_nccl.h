/*
 * comm_nccl.h — the NCCL backend of the communicators (kernels/comm_nccl.cu), called by
 * core/comm.c for CUDA contexts; present only in builds with NCCL (PLOSS_HAVE_NCCL).
 * Plain C so that nvcc (C++) and the C11 core see the same declarations.  Every function
 * takes the timeout in seconds and fails with PLOSS_ERR_COMM when NCCL does not finish
 * in time; after such a failure the NCCL communicator is aborted (ploss_nccl_broken()).
 */
#ifndef PLOSS_COMM_NCCL_H
#define PLOSS_COMM_NCCL_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef PLOSS_HAVE_NCCL

/* NCCL's own unique id (ncclUniqueId) has this size. */
#define PLOSS_NCCL_ID_BYTES 128

typedef struct ploss_nccl ploss_nccl;

/* ncclGetUniqueId into `out` (PLOSS_NCCL_ID_BYTES): starts NCCL's bootstrap root in this
 * process, which must live until every rank has initialised. */
ploss_status ploss_nccl_unique_id(void *out);

/* ncclCommInitRankConfig (non-blocking) on `device_id`, polled until done or the timeout. */
ploss_status ploss_nccl_init(int device_id, int nranks, int rank, const void *nccl_id,
                             double timeout, ploss_nccl **out);

/* The collectives the communicators expose, queued on `stream`; `count` is the element
 * count of recv for all-reduce and reduce-scatter, of send for all-gather. */
enum { PLOSS_NCCL_ALL_REDUCE = 0, PLOSS_NCCL_ALL_GATHER = 1, PLOSS_NCCL_REDUCE_SCATTER = 2 };
ploss_status ploss_nccl_collective(ploss_nccl *c, int kind, const void *send, void *recv,
                                   size_t count, ploss_dtype dtype, ploss_reduce_op op,
                                   void *stream);

/* Wait for `stream` (cudaStreamQuery) while watching NCCL's asynchronous error. */
ploss_status ploss_nccl_wait(ploss_nccl *c, void *stream);

/* ncclCommAbort now (the communicator stays allocated until ploss_nccl_destroy). */
void ploss_nccl_abort(ploss_nccl *c);

/* 1 once the communicator was aborted (by ploss_nccl_abort or after a failure). */
int ploss_nccl_broken(const ploss_nccl *c);

/* Finalise (polled up to the timeout) and destroy, or abort when broken; frees `c`. */
ploss_status ploss_nccl_destroy(ploss_nccl *c);

#endif /* PLOSS_HAVE_NCCL */

#ifdef __cplusplus
}
#endif

#endif /* PLOSS_COMM_NCCL_H */
