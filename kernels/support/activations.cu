/*
 * activations.cu — CUDA backend of swish, hard-swish and mish: one
 * grid-stride elementwise kernel per (dtype, direction), computing in f32 (f64 for f64)
 * with the same stable forms as core/cpu/support/activations.c.
 */
#include "activations.h"
#include "support_ops.cuh"

namespace ploss_support {
namespace activations_kernels {

__device__ __forceinline__ float ex(float v) { return expf(v); }
__device__ __forceinline__ double ex(double v) { return exp(v); }

/* σ(x) and σ(−x), by the sign of x. */
template <class A> __device__ __forceinline__ void sigmoid2(A x, A &s, A &sm)
{
    const A e = ex(x >= A(0) ? -x : x), r = A(1) / (A(1) + e);
    s = x >= A(0) ? r : e * r;
    sm = x >= A(0) ? e * r : r;
}

/* tanh(softplus(x)) and 1 − tanh²: n/(n + 2) and 4(n + 1)/(n + 2)², n = eˣ(eˣ + 2), for
 * x ≤ 20; tanh(x) above (softplus(x) = x there). */
template <class A> __device__ __forceinline__ void tanh_softplus(A x, A &t, A &sech2)
{
    if (x > A(20)) {
        t = tanh(x);
        sech2 = A(1) - t * t;
        return;
    }
    const A e = ex(x), n = e * (e + A(2)), d = n + A(2);
    t = n / d;
    sech2 = A(4) * (n + A(1)) / (d * d);
}

template <class A> __device__ __forceinline__ A act_forward(ploss_activation act, A x)
{
    if (act == PLOSS_ACTIVATION_SWISH) {
        A s, sm;
        sigmoid2(x, s, sm);
        return x * s;
    }
    if (act == PLOSS_ACTIVATION_HARD_SWISH) {
        const A r = x + A(3);
        const A c = r < A(0) ? A(0) : (r > A(6) ? A(6) : r);
        return x * c / A(6);
    }
    A t, sech2;
    tanh_softplus(x, t, sech2);
    return x * t;
}

template <class A> __device__ __forceinline__ A act_derivative(ploss_activation act, A x)
{
    if (act == PLOSS_ACTIVATION_SWISH) {
        A s, sm;
        sigmoid2(x, s, sm);
        return s * (A(1) + x * sm);
    }
    if (act == PLOSS_ACTIVATION_HARD_SWISH) /* PyTorch >= 2.8: 0 at −3, 1 at 3 */
        return x <= A(-3) ? A(0) : (x < A(3) ? x / A(3) + A(0.5) : A(1));
    A t, sech2, s, sm;
    tanh_softplus(x, t, sech2);
    sigmoid2(x, s, sm);
    return t + x * s * sech2;
}

template <class T> __global__ void activation_kernel(ploss_act_problem p)
{
    using A = acc_t<T>;
    const T *x = (const T *)p.op[PLOSS_ACT_X].data, *gy = (const T *)p.op[PLOSS_ACT_GY].data;
    T *o = (T *)p.op[PLOSS_ACT_OUT].data;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < p.shape.numel;
         k += (int64_t)gridDim.x * blockDim.x) {
        const A v = to_acc(x[ploss_ew_offset(&p.shape, p.op[PLOSS_ACT_X].strides, k)]);
        A r;
        if (p.backward)
            r = act_derivative(p.act, v) * to_acc(gy[ploss_ew_offset(&p.shape, p.op[PLOSS_ACT_GY].strides, k)]);
        else
            r = act_forward(p.act, v);
        o[ploss_ew_offset(&p.shape, p.op[PLOSS_ACT_OUT].strides, k)] = from_acc<T>(r);
    }
}

template <class T> static void launch(ploss_ctx_t *ctx, const ploss_act_problem *p)
{
    activation_kernel<T><<<grid_for(p->shape.numel), kThreads, 0, (cudaStream_t)ctx->stream>>>(*p);
}

extern "C" ploss_status ploss_cuda_activation(ploss_ctx_t *ctx, const ploss_act_problem *p)
{
    switch (p->dtype) {
    case PLOSS_F32: launch<float>(ctx, p); break;
    case PLOSS_F16: launch<__half>(ctx, p); break;
    case PLOSS_BF16: launch<__nv_bfloat16>(ctx, p); break;
    default: launch<double>(ctx, p); break;
    }
    return ploss_cuda_check_launch(p->backward ? "activation backward" : "activation forward");
}

} // namespace activations_kernels
} // namespace ploss_support
