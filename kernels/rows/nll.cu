/*
 * nll.cu — CUDA backend of the negative log-likelihood (formulas in core/engines/rows.h).
 *
 * Three kernels, in stream order:
 *  - nll_samples: a thread per sample reads its label and the target's entry x_iy, writes
 *    the per-sample loss ('none') or a per-block partial of Σ ℓ and of Σ w_y (the MEAN
 *    divisor); an out-of-range label is reported through the context's error slot and the
 *    sample is skipped (nothing is read out of bounds).  Only when the loss or the divisor
 *    is needed.
 *  - nll_finish: one block adds the partials in a fixed order, stores the reduced loss and
 *    the gradient's scale ω in the workspace (deterministic, no atomics, no host
 *    synchronisation).
 *  - nll_grad: a thread per gradient element (row-major over N×C×S, the order of a
 *    contiguous gradient): −w_y·ω at the target's class, 0 elsewhere and in ignored rows.
 * The input is read only at the target's entries; the gradient is written once.
 */
#include "common.cuh"
#include "rows.h"

namespace ploss_cuda {
namespace {

constexpr int THREADS = 256;
constexpr int64_t MAX_BLOCKS = 4096; /* partials per reduction: 2 × 32 KiB of workspace */
constexpr int FINISH_THREADS = 1024;

/* The label of sample (n, s), and whether it counts: in [0, C) (out of range: reported,
 * skipped) and not ignore_index. */
template <class TI>
__device__ __forceinline__ bool label_of(const ploss_nll_problem &p, int64_t n, int64_t s, int64_t *error_slot,
                                         int64_t &y)
{
    y = (int64_t)((const TI *)p.t)[n * p.t_sn + s * p.t_ss];
    if (y == p.ignore_index)
        return false;
    if (y < 0 || y >= p.C) {
        report_invalid_label(error_slot, y);
        return false;
    }
    return true;
}

template <class T, class TI>
__global__ void __launch_bounds__(THREADS)
nll_samples(const ploss_nll_problem p, int64_t *error_slot, double *partials)
{
    using A = acc_t<T>;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD;
    const bool none = p.reduction == PLOSS_REDUCTION_NONE;
    const int64_t M = p.N * p.S;
    double loss_sum = 0.0, weight_sum = 0.0;
    for (int64_t i = thread_index(); i < M; i += grid_stride()) {
        const int64_t n = i / p.S, s = i % p.S;
        int64_t y;
        double loss = 0.0;
        if (label_of<TI>(p, n, s, error_slot, y)) {
            const double wy = p.w ? load_dyn(p.w, p.w_dtype, y * p.w_s) : 1.0;
            loss = -wy * (double)to_acc(((const T *)p.x)[n * p.x_sn + s * p.x_ss + y * p.x_sc]);
            weight_sum += wy;
        }
        if (want_loss && none)
            store_dyn(p.loss, p.loss_dtype, n * p.l_sn + s * p.l_ss, (double)(A)loss);
        loss_sum += loss;
    }
    if (!none) {
        loss_sum = block_reduce<THREADS>(loss_sum, SumOp());
        __syncthreads();
        weight_sum = block_reduce<THREADS>(weight_sum, SumOp());
        if (threadIdx.x == 0) {
            partials[blockIdx.x] = loss_sum;
            partials[gridDim.x + blockIdx.x] = weight_sum;
        }
    }
}

/* One block: Σ ℓ and Σ w_y in a fixed order; the reduced loss (forward, fused) and ω of a
 * reduced gradient: up / Σ w_y for MEAN (0 when nothing counts), up for SUM, with up the
 * fused scale or the backward's upstream gradient. */
__global__ void __launch_bounds__(FINISH_THREADS)
nll_finish(const ploss_nll_problem p, const double *partials, int64_t nparts, double *omega)
{
    double l = 0.0, w = 0.0;
    for (int64_t b = threadIdx.x; b < nparts; b += FINISH_THREADS) {
        l += partials[b];
        w += partials[nparts + b];
    }
    l = block_reduce<FINISH_THREADS>(l, SumOp());
    __syncthreads();
    w = block_reduce<FINISH_THREADS>(w, SumOp());
    if (threadIdx.x != 0)
        return;
    const bool mean = p.reduction == PLOSS_REDUCTION_MEAN;
    if (p.pass != PLOSS_PASS_BACKWARD)
        store_dyn(p.loss, p.loss_dtype, 0, mean ? l / w : l); /* 0/0 = NaN when nothing counts */
    const double up = p.pass == PLOSS_PASS_FUSED ? p.scale : load_dyn(p.grad_loss, p.gl_dtype, 0);
    *omega = mean ? (w != 0.0 ? up / w : 0.0) : up;
}

template <class T, class TI>
__global__ void __launch_bounds__(THREADS)
nll_grad(const ploss_nll_problem p, const double *omega_dev, double omega_host, int64_t *error_slot)
{
    const bool per_sample_up = p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE;
    /* ω: from nll_finish; a SUM backward's scalar upstream gradient; the fused scale */
    const double omega = omega_dev ? *omega_dev
                         : p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_SUM
                             ? load_dyn(p.grad_loss, p.gl_dtype, 0)
                             : omega_host;
    const int64_t total = p.N * p.C * p.S;
    T *grad = (T *)p.grad;
    for (int64_t k = thread_index(); k < total; k += grid_stride()) {
        const int64_t s = k % p.S, j = (k / p.S) % p.C, n = k / (p.S * p.C);
        int64_t y;
        double v = 0.0;
        /* the label is reported by the thread of its class 0 only (once per sample) */
        if (label_of<TI>(p, n, s, j == 0 ? error_slot : nullptr, y) && j == y) {
            const double wy = p.w ? load_dyn(p.w, p.w_dtype, y * p.w_s) : 1.0;
            const double om = per_sample_up ? load_dyn(p.grad_loss, p.gl_dtype, n * p.gl_sn + s * p.gl_ss) : omega;
            v = -wy * om;
        }
        grad[n * p.g_sn + j * p.g_sc + s * p.g_ss] = from_acc<T>((acc_t<T>)v);
    }
}

} // namespace
} // namespace ploss_cuda

using namespace ploss_cuda;

extern "C" ploss_status ploss_cuda_nll(ploss_ctx_t *ctx, const ploss_nll_problem *p)
{
    const bool want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const bool reduced = p->reduction != PLOSS_REDUCTION_NONE;
    /* the samples pass: the loss, or the MEAN divisor of a backward pass */
    const bool samples = want_loss || (want_grad && p->reduction == PLOSS_REDUCTION_MEAN);
    const bool finish = reduced && samples;
    const int64_t M = p->N * p->S;
    const unsigned blocks = grid_blocks(M, THREADS, MAX_BLOCKS);
    cudaStream_t stream = stream_of(ctx);

    double *ws = NULL; /* 2 × blocks partials, then ω */
    if (finish) {
        void *w = NULL;
        const ploss_status st = ploss_workspace(ctx, (2 * (size_t)blocks + 1) * sizeof(double), &w);
        if (st)
            return st;
        ws = (double *)w;
    }
    /* ω of the gradient: from nll_finish after a samples pass; else the fused scale ('none':
     * of the sum) or what nll_grad reads itself (the upstream gradient of a backward pass) */
    const double *omega_dev = finish && want_grad ? ws + 2 * blocks : NULL;
    const double omega_host = p->pass == PLOSS_PASS_FUSED ? p->scale : 0.0;
    return dispatch_float(p->x_dtype, "input", [&](auto xtag) {
        using T = typename decltype(xtag)::type;
        return dispatch_index(p->t_dtype, "target", [&](auto ttag) -> ploss_status {
            using TI = typename decltype(ttag)::type;
            if (samples) {
                nll_samples<T, TI><<<blocks, THREADS, 0, stream>>>(*p, ctx->error_slot, ws);
                ploss_status st = check_launch("nll_samples");
                if (st)
                    return st;
            }
            if (finish) {
                nll_finish<<<1, FINISH_THREADS, 0, stream>>>(*p, ws, (int64_t)blocks, ws + 2 * blocks);
                ploss_status st = check_launch("nll_finish");
                if (st)
                    return st;
            }
            if (!want_grad)
                return PLOSS_OK;
            const int64_t total = M * p->C;
            if (total == 0)
                return PLOSS_OK;
            nll_grad<T, TI><<<grid_blocks(total, THREADS), THREADS, 0, stream>>>(*p, omega_dev, omega_host,
                                                                                 ctx->error_slot);
            return check_launch("nll_grad");
        });
    });
}
