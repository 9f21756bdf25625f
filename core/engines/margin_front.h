/*
 * margin_front.h — what the two fronts of the margin shape share (internal): the checks of
 * one call (core/engines/margin.c) and the sharded call over a communicator's ranks
 * (core/engines/sharded.c), which runs those checks on each rank before any rank
 * computes.
 */
#ifndef PLOSS_MARGIN_FRONT_H
#define PLOSS_MARGIN_FRONT_H

#include "loss.h"
#include "margin.h"

/* The views of a checked margin-shape call (ploss_margin_check_call). */
typedef struct ploss_margin_call {
    ploss_view x, w, y, l, gl, gx, gw, b, gb, stats[2];
    int ac, ad;                    /* weight's class axis and feature axis                 */
    int64_t N, C, D;
} ploss_margin_call;

/* Every check of a margin-shape call that needs no other rank (core/engines/margin.c): the
 * tensors' dtypes, shapes, devices and overlaps (not the labels' values). */
ploss_status ploss_margin_check_call(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                                     const ploss_loss_args *a, const ploss_loss_params *o, ploss_margin_call *out);
/* The problem of a checked call on its own tensors (Partial FC not drawn yet). */
void ploss_margin_problem_of(ploss_margin_problem *p, ploss_pass pass, const ploss_loss_spec *spec,
                             const ploss_loss_params *o, const ploss_margin_call *c);
/* Partial FC's classes for p (labels checked): CUDA draws them itself (sample_n, seed);
 * on the CPU *kept and *class_pos (to free) among p's C classes (p->class_offset + j the
 * global id of class j; labels outside the block ignored). */
ploss_status ploss_margin_draw(const ploss_ctx_t *ctx, const ploss_loss_params *o, ploss_margin_problem *p,
                               int64_t **kept, int64_t **class_pos);
/* CPU labels: each in [0, C) or ignore_index. */
ploss_status ploss_margin_check_labels_cpu(const void *labels, ploss_dtype dtype, int64_t sn, int64_t N, int64_t C,
                                           int64_t ignore_index);
/* The sharded call (opts.comm; core/engines/sharded.c): `local` is this rank's
 * status from ploss_margin_check_call (c valid when it is PLOSS_OK); every rank learns every
 * rank's status before any of them computes, so a refusal on one is an error on all. */
ploss_status ploss_margin_run_sharded(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                                      const ploss_loss_args *a, const ploss_loss_params *o,
                                      const ploss_margin_call *c, ploss_status local);
#endif
