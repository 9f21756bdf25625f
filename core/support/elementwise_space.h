/*
 * elementwise.h — the iteration space of the elementwise support ops (activations,
 * optimiser steps, argmax over samples), shared by core/ *.c, core/cpu/ *.c and the
 * kernels/ *.cu launchers.  Internal.
 *
 * Several views of one shape are coalesced into one iteration space: size-1 dims are
 * dropped and neighbouring dims are merged where every view allows it, so contiguous
 * (and identically strided) tensors become one flat axis.  Element k (row-major order
 * of the common shape) of operand o lives at o.data + ploss_ew_offset(&shape, o.strides, k).
 */
#ifndef PLOSS_ELEMENTWISE_H
#define PLOSS_ELEMENTWISE_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__CUDACC__)
#define PLOSS_HD __host__ __device__
#else
#define PLOSS_HD
#endif

typedef struct ploss_ew_shape {
    int ndim;                        /* ≥ 1 */
    int64_t numel;
    int64_t shape[PLOSS_MAX_DIMS];   /* outermost first */
} ploss_ew_shape;

typedef struct ploss_ew_operand {
    void *data;                      /* NULL for an absent optional operand */
    ploss_dtype dtype;
    int64_t strides[PLOSS_MAX_DIMS]; /* elements, per coalesced dim */
} ploss_ew_operand;

/* Build the coalesced space of `n` views of the same shape (the caller checked it);
 * views[i] == NULL leaves ops[i] absent (data NULL). */
void ploss_ew_build(ploss_ew_shape *shape, ploss_ew_operand *ops, const ploss_view *const *views,
                    int n);

static inline PLOSS_HD int64_t ploss_ew_offset(const ploss_ew_shape *s, const int64_t *strides,
                                               int64_t k)
{
    if (s->ndim == 1)
        return k * strides[0];
    int64_t off = 0;
    for (int d = s->ndim - 1; d >= 0; --d) {
        const int64_t size = s->shape[d];
        off += (k % size) * strides[d];
        k /= size;
    }
    return off;
}

/* 1 when the shapes of a and b are equal. */
int ploss_same_shape(const ploss_view *a, const ploss_view *b);

/* SHAPE error "name: expected the shape of `other_name` A, got B". */
ploss_status ploss_shape_mismatch(const char *name, const ploss_view *got, const char *other_name,
                                  const ploss_view *want);


#ifdef __cplusplus
}
#endif

#endif
