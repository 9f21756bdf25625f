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
    re::RowArgs a = re::row_args(*p);
    a.state = p->state; a.state_dtype = p->state_dtype; a.st_sn = p->st_sn; a.st_ss = p->st_ss; a.st_sk = p->st_sk;
    auto none = [](char *, cudaStream_t, auto &) { return PLOSS_OK; };
    switch (p->loss_kind) {
    case PLOSS_SAMPLE_LARGE_MARGIN:
        return re::run<T>(ctx, a, re::LargeMarginPolicy{(float)(0.5 * p->lam), (float)(1.0 / (double)(p->C - 1))},
                          0, none);
    case PLOSS_SAMPLE_TAYLOR_CE:
        return re::run<T>(ctx, a, re::TaylorPolicy{p->order}, 0, none);
    case PLOSS_SAMPLE_PC_SOFTMAX:
        return re::run<T>(ctx, a, re::PcSoftmaxPolicy{nullptr}, re::class_values_bytes(p->C),
                          [&](char *ws, cudaStream_t stream, re::PcSoftmaxPolicy &q) {
                              const double *sum = nullptr;
                              return re::convert_class_values(p->w, p->w_dtype, p->w_s, p->C, ws, stream, &q.w, &sum);
                          });
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
