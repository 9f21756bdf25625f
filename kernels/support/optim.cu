/*
 * optim.cu — CUDA backend of the SGD and Adam steps: one grid-stride elementwise kernel,
 * templated over the parameter and state storage types, computing in f32 (f64 for f64
 * parameters) with the formulas of core/cpu/support/optim.c.
 */
#include "optim.h"
#include "support_ops.cuh"

namespace ploss_support {
namespace optim_kernels {

template <class T, class S> __global__ void optim_kernel(ploss_optim_problem p)
{
    using A = acc_t<T>;
    T *param = (T *)p.op[PLOSS_OPT_PARAM].data;
    const T *grad = (const T *)p.op[PLOSS_OPT_GRAD].data;
    S *s1 = (S *)p.op[PLOSS_OPT_S1].data, *s2 = (S *)p.op[PLOSS_OPT_S2].data;
    const A lr = (A)p.lr, wd = (A)p.weight_decay;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < p.shape.numel;
         k += (int64_t)gridDim.x * blockDim.x) {
        T *pw = param + ploss_ew_offset(&p.shape, p.op[PLOSS_OPT_PARAM].strides, k);
        A w = to_acc(*pw);
        A g = to_acc(grad[ploss_ew_offset(&p.shape, p.op[PLOSS_OPT_GRAD].strides, k)]);
        if (p.kind == PLOSS_OPTIM_SGD) {
            if (wd != A(0))
                g += wd * w;
            if (p.momentum != 0.0) {
                const A mu = (A)p.momentum;
                S *pb = s1 + ploss_ew_offset(&p.shape, p.op[PLOSS_OPT_S1].strides, k);
                const A buf_new = p.first_step ? g : mu * (A)to_acc(*pb) + (A(1) - (A)p.dampening) * g;
                const S stored = store_as<S>(buf_new);
                *pb = stored;
                const A buf = (A)to_acc(stored);
                g = p.nesterov ? g + mu * buf : buf;
            }
            *pw = from_acc<T>(w - lr * g);
        } else {
            if (wd != A(0)) {
                if (p.decoupled)
                    w *= (A)p.decay;
                else
                    g += wd * w;
            }
            S *pm = s1 + ploss_ew_offset(&p.shape, p.op[PLOSS_OPT_S1].strides, k);
            S *pv = s2 + ploss_ew_offset(&p.shape, p.op[PLOSS_OPT_S2].strides, k);
            const A b1 = (A)p.beta1, b2 = (A)p.beta2;
            const S m_s = store_as<S>(b1 * (A)to_acc(*pm) + (A(1) - b1) * g);
            const S v_s = store_as<S>(b2 * (A)to_acc(*pv) + (A(1) - b2) * g * g);
            *pm = m_s;
            *pv = v_s;
            const A m = (A)to_acc(m_s), v = (A)to_acc(v_s);
            const A denom = sqrt(v) / (A)p.sqrt_bc2 + (A)p.eps;
            *pw = from_acc<T>(w - (A)p.step_size * m / denom);
        }
    }
}

template <class T, class S> static void launch(ploss_ctx_t *ctx, const ploss_optim_problem *p)
{
    optim_kernel<T, S><<<grid_for(p->shape.numel), kThreads, 0, (cudaStream_t)ctx->stream>>>(*p);
}

extern "C" ploss_status ploss_cuda_optim(ploss_ctx_t *ctx, const ploss_optim_problem *p)
{
    const int f32_state = p->s_dtype == PLOSS_F32;
    switch (p->p_dtype) {
    case PLOSS_F32: launch<float, float>(ctx, p); break;
    case PLOSS_F16: f32_state ? launch<__half, float>(ctx, p) : launch<__half, __half>(ctx, p); break;
    case PLOSS_BF16:
        f32_state ? launch<__nv_bfloat16, float>(ctx, p) : launch<__nv_bfloat16, __nv_bfloat16>(ctx, p);
        break;
    default:
        if (f32_state)
            launch<double, float>(ctx, p);
        else
            launch<double, double>(ctx, p);
        break;
    }
    return ploss_cuda_check_launch(p->kind == PLOSS_OPTIM_SGD ? "sgd_step" : "adam_step");
}

} // namespace optim_kernels
} // namespace ploss_support
