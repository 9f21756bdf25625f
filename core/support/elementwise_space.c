/* elementwise.c — coalesced iteration spaces and small checks shared by the support ops. */
#include <stdio.h>
#include <string.h>

#include "elementwise_space.h"

void ploss_ew_build(ploss_ew_shape *shape, ploss_ew_operand *ops, const ploss_view *const *views,
                    int n)
{
    const ploss_view *ref = NULL;
    for (int i = 0; i < n; ++i) {
        memset(&ops[i], 0, sizeof ops[i]);
        if (views[i]) {
            ops[i].data = views[i]->data;
            ops[i].dtype = views[i]->dtype;
            if (!ref)
                ref = views[i];
        }
    }
    memset(shape, 0, sizeof *shape);
    shape->ndim = 1;
    shape->shape[0] = 1;
    shape->numel = ref ? ref->numel : 0;
    if (!ref)
        return;
    if (ref->numel == 0) {
        shape->shape[0] = 0;
        return;
    }
    /* innermost first: merge dim d into the current run when every view steps over the
     * run with exactly stride[d] */
    int64_t rs[PLOSS_MAX_DIMS];          /* run sizes, innermost first */
    int64_t st[PLOSS_MAX_DIMS][PLOSS_MAX_DIMS]; /* [run][operand] stride */
    int runs = 0;
    for (int d = ref->ndim - 1; d >= 0; --d) {
        const int64_t size = ref->shape[d];
        if (size == 1)
            continue;
        int merge = runs > 0;
        for (int i = 0; merge && i < n; ++i)
            if (views[i])
                merge = views[i]->strides[d] == st[runs - 1][i] * rs[runs - 1];
        if (merge) {
            rs[runs - 1] *= size;
            continue;
        }
        rs[runs] = size;
        for (int i = 0; i < n; ++i)
            st[runs][i] = views[i] ? views[i]->strides[d] : 0;
        ++runs;
    }
    if (runs == 0)
        return; /* a single element */
    shape->ndim = runs;
    for (int r = 0; r < runs; ++r) {
        shape->shape[runs - 1 - r] = rs[r];
        for (int i = 0; i < n; ++i)
            ops[i].strides[runs - 1 - r] = st[r][i];
    }
}

int ploss_same_shape(const ploss_view *a, const ploss_view *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; ++d)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

ploss_status ploss_shape_mismatch(const char *name, const ploss_view *got, const char *other_name,
                                  const ploss_view *want)
{
    char a[200], b[200];
    return ploss_error(PLOSS_ERR_SHAPE, "%s: expected the shape of %s, %s; got %s", name, other_name,
                       ploss_view_describe(want, a, sizeof a), ploss_view_describe(got, b, sizeof b));
}
