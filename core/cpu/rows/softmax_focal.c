/*
 * softmax_focal.c — CPU backend of the softmax focal family: softmax_focal and dual_focal
 * (formulas in core/ploss.h), computed by the softmax-row kernels (softmax_rows.h) with
 * the log-sum-exp as the saved state.
 */
#include "chunks.h"
#include "softmax_rows.h"

ploss_status PLOSS_ISA_FN(ploss_cpu_softmax_focal)(ploss_ctx_t *ctx, const ploss_sfocal_problem *p)
{
    (void)ctx;
    /* MEAN: the number of valid samples */
    const double divisor = p->reduction == PLOSS_REDUCTION_MEAN
                               ? (double)ploss_cpu_count_labels(p->t, p->t_dtype, p->N, p->S, p->t_sn, p->t_ss,
                                                                p->ignore_index)
                               : 1.0;
    const ploss_cpu_srows r = {
        .name = "softmax_focal",
        .kind = p->kind == PLOSS_SOFTMAX_FOCAL ? PLOSS_SROWS_FOCAL : PLOSS_SROWS_DUAL_FOCAL,
        .pass = p->pass, .reduction = p->reduction, .N = p->N, .S = p->S, .C = p->C,
        .x = p->x, .x_dtype = p->x_dtype, .x_sn = p->x_sn, .x_ss = p->x_ss, .x_sc = p->x_sc,
        .t = p->t, .t_dtype = p->t_dtype, .t_sn = p->t_sn, .t_ss = p->t_ss, .ignore_index = p->ignore_index,
        .w = p->kind == PLOSS_SOFTMAX_FOCAL ? p->w : NULL, .w_dtype = p->w_dtype, .w_s = p->w_s,
        .gamma = p->gamma, .eps = p->eps,
        .loss = p->loss, .loss_dtype = p->loss_dtype, .l_sn = p->l_sn, .l_ss = p->l_ss,
        .state = p->lse, .state_dtype = p->lse_dtype, .n_state = 1, .st_sn = p->lse_sn, .st_ss = p->lse_ss,
        .grad_loss = p->grad_loss, .gl_dtype = p->gl_dtype, .gl_sn = p->gl_sn, .gl_ss = p->gl_ss,
        .grad = p->grad, .g_sn = p->g_sn, .g_ss = p->g_ss, .g_sc = p->g_sc,
        .divisor = divisor,
        .omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor),
    };
    return PLOSS_ISA_FN(ploss_cpu_srows_run)(&r);
}
