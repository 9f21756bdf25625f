/*
 * sample_policies_rows.cu — the row-engine half of the CUDA per-sample policy losses:
 * large-margin, PC-softmax and Taylor CE (order ≤ 10) without mining, on rows with a
 * contiguous class axis (kernels/rows/row_engine.cuh, policy_sample_losses.cuh).  Its own
 * translation unit so that it compiles beside sample_policies.cu.
 */
#include "rows.h"
#include "policy_sample_losses.cuh"

using namespace ploss_cuda;

/* Large-margin, PC-softmax and Taylor CE (order ≤ 10) without mining, on rows with a
 * contiguous class axis (C > 32, f32/f16/bf16): the row engine
 * (kernels/rows/row_engine.cuh, policy_sample_losses.cuh).  PLOSS_ERR_UNSUPPORTED
 * (nothing launched) when it does not take the problem. */
template <class T> static ploss_status run_typed(ploss_ctx_t *ctx, const ploss_sample_problem *p)
{
    namespace re = row_engine;
    if (p->ohem || p->C <= 32 || !re::serves<T>(p->x_sc, p->C) ||
        (p->loss_kind == PLOSS_SAMPLE_TAYLOR_CE && p->order > 10))
        return PLOSS_ERR_UNSUPPORTED;
    re::RowArgs a = {};
    a.pass = p->pass; a.reduction = p->reduction;
    a.N = p->N; a.S = p->S; a.C = p->C;
    a.x = p->x; a.x_sn = p->x_sn; a.x_ss = p->x_ss;
    a.t = p->t; a.t_dtype = p->t_dtype; a.t_sn = p->t_sn; a.t_ss = p->t_ss;
    a.ignore_index = p->ignore_index;
    a.grad = p->grad; a.g_sn = p->g_sn; a.g_ss = p->g_ss; a.g_sc = p->g_sc;
    a.loss = p->loss; a.loss_dtype = p->loss_dtype; a.l_sn = p->l_sn; a.l_ss = p->l_ss;
    a.state = p->state; a.state_dtype = p->state_dtype; a.st_sn = p->st_sn; a.st_ss = p->st_ss; a.st_sk = p->st_sk;
    a.grad_loss = p->grad_loss; a.gl_dtype = p->gl_dtype; a.gl_sn = p->gl_sn; a.gl_ss = p->gl_ss;
    a.scale = p->scale;
    auto none = [](char *, cudaStream_t, auto &) { return PLOSS_OK; };
    switch (p->loss_kind) {
    case PLOSS_SAMPLE_LARGE_MARGIN:
        return re::run<T>(ctx, a, re::LargeMarginPolicy{(float)(0.5 * p->lam), (float)(1.0 / (double)(p->C - 1))},
                          0, none);
    case PLOSS_SAMPLE_TAYLOR_CE:
        return re::run<T>(ctx, a, re::TaylorPolicy{p->order}, 0, none);
    case PLOSS_SAMPLE_PC_SOFTMAX: {
        const size_t wbytes = ((size_t)p->C * sizeof(float) + 255) / 256 * 256;
        return re::run<T>(ctx, a, re::PcSoftmaxPolicy{nullptr}, wbytes + sizeof(double),
                          [&](char *ws, cudaStream_t stream, re::PcSoftmaxPolicy &q) {
                              q.w = (const float *)ws;
                              return re::launch_convert_class_weights(p->w, p->w_dtype, p->w_s, p->C, (float *)ws,
                                                                      (double *)(ws + wbytes), stream);
                          });
    }
    default:
        return PLOSS_ERR_UNSUPPORTED;
    }
}

extern "C" ploss_status ploss_cuda_sample_policies_rows(ploss_ctx_t *ctx, const ploss_sample_problem *p)
{
    return dispatch_float(p->x_dtype, "input", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (sizeof(T) <= 4)
            return run_typed<T>(ctx, p);
        else
            return PLOSS_ERR_UNSUPPORTED;
    });
}
