/*
 * check.h — the little the C tests of spec/c/ share: a failure counter, CHECK macros that
 * print the failing expression, and DLTensor descriptors over caller memory.
 */
#ifndef PLOSS_SPEC_CHECK_H
#define PLOSS_SPEC_CHECK_H

#include <stdio.h>
#include <string.h>

#include "ploss.h"

static int check_failures, check_count;

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        ++check_count;                                                                      \
        if (!(cond)) {                                                                      \
            ++check_failures;                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);       \
        }                                                                                   \
    } while (0)

/* The call returns `want` and ploss_last_error() contains `fragment`. */
#define CHECK_STATUS(call, want, fragment)                                                  \
    do {                                                                                    \
        ploss_status st_ = (call);                                                          \
        ++check_count;                                                                      \
        if (st_ != (want) || !strstr(ploss_last_error(), (fragment))) {                     \
            ++check_failures;                                                               \
            fprintf(stderr, "%s:%d: %s\n  returned %s (\"%s\"), expected %s with \"%s\"\n", \
                    __FILE__, __LINE__, #call, ploss_status_string(st_), ploss_last_error(), \
                    ploss_status_string(want), (fragment));                                 \
        }                                                                                   \
    } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, PLOSS_OK, "")

static const DLDataType dt_f16 = {kDLFloat, 16, 1}, dt_bf16 = {kDLBfloat, 16, 1},
                        dt_f32 = {kDLFloat, 32, 1}, dt_f64 = {kDLFloat, 64, 1},
                        dt_i64 = {kDLInt, 64, 1}, dt_u8 = {kDLUInt, 8, 1};

/* A CPU descriptor; shape and strides (NULL: contiguous) are the caller's arrays. */
static inline DLTensor cpu_tensor(void *data, DLDataType dtype, int ndim, int64_t *shape,
                                  int64_t *strides)
{
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.ndim = ndim;
    t.dtype = dtype;
    t.shape = shape;
    t.strides = strides;
    return t;
}

/* Prints the summary; the exit status of main. */
static inline int check_report(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif
