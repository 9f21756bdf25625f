/*
 * affinity.cu — CUDA backend of the affinity loss (local context prior; formulas in
 * core/engines/region.h and docs/losses.md).  fp32 accumulation for f32/f16/bf16 input, f64
 * for f64.
 *
 *  1. one thread per pixel: its label (-1: ignored; an invalid label is reported through the
 *     context's error slot and treated as ignored) and its logits (class-major, in the
 *     accumulation type) into the workspace: the later passes never read the input, which an
 *     in-place fused pass overwrites;
 *  2. one thread per pixel p: ℓ_p and its pair count over the (2k − 1)² pixels it can share
 *     a window with (the 'none' map), per block partial sums (CUB, a fixed grid);
 *  3. one thread: the partials in order, the loss and the gradient's base weight;
 *  4. one thread per pixel p: the factor of each partner q, m·(σ(A) − T)·(ω_p + ω_q), then
 *     the gradient class by class, Σ_q factor·x_q.  No atomics, no unfolded windows.
 */
#include "region_common.cuh"

namespace ploss_cuda {
namespace {
using namespace region;

constexpr int THREADS = 256;
constexpr int MAX_PARTNERS = (2 * PLOSS_AFFINITY_MAX_KERNEL - 1) * (2 * PLOSS_AFFINITY_MAX_KERNEL - 1);

/* The number of windows of side k (stride 1, inside [0, size)) holding positions a and b. */
__device__ __forceinline__ int64_t shared_windows(int64_t a, int64_t b, int64_t k, int64_t size)
{
    const int64_t lo_max = a > b ? a : b, hi_min = a < b ? a : b;
    const int64_t lo = lo_max - k + 1 > 0 ? lo_max - k + 1 : 0, hi = hi_min < size - k ? hi_min : size - k;
    return hi >= lo ? hi - lo + 1 : 0;
}

/* Partner j (0 ≤ j < (2k − 1)²) of pixel q0: its index, or -1 outside the image, ignored or
 * sharing no window; *m the windows they share. */
__device__ __forceinline__ int64_t partner(const ploss_region_problem &p, const int32_t *label, int64_t q0, int j,
                                           int64_t &m)
{
    const int64_t k = p.kernel_size, span = 2 * k - 1, H = p.sshape[0], W = p.sshape[1];
    const int64_t s0 = q0 % p.S, h0 = s0 / W, w0 = s0 % W;
    const int64_t h = h0 + j / span - (k - 1), w = w0 + j % span - (k - 1);
    if (h < 0 || h >= H || w < 0 || w >= W)
        return -1;
    const int64_t q = q0 - s0 + h * W + w;
    m = shared_windows(h0, h, k, H) * shared_windows(w0, w, k, W);
    return (m == 0 || label[q] < 0) ? -1 : q;
}

/* x_a·x_b over the classes (xs: the logits, class-major). */
template <class A> __device__ __forceinline__ A inner(const ploss_region_problem &p, const A *xs, int64_t a, int64_t b)
{
    const int64_t NS = p.N * p.S;
    A d = 0;
    for (int64_t c = 0; c < p.C; ++c)
        d += xs[c * NS + a] * xs[c * NS + b];
    return d;
}

template <class T, class TI>
__global__ void __launch_bounds__(THREADS) window_labels(const ploss_region_problem p, int64_t *error_slot,
                                                          int32_t *label, acc_t<T> *xs)
{
    const int64_t NS = p.N * p.S;
    for (int64_t q = thread_index(); q < NS; q += grid_stride()) {
        const int64_t xo = pixel_at(p, q, p.x_sn, p.x_ss);
        for (int64_t c = 0; c < p.C; ++c)
            xs[c * NS + q] = (acc_t<T>)to_acc(((const T *)p.x)[xo + c * p.x_sc]);
        label[q] = (int32_t)load_label<TI>(p, q, error_slot);
    }
}

template <class T>
__global__ void __launch_bounds__(THREADS) window_loss(const ploss_region_problem p, const int32_t *label,
                                                        const acc_t<T> *xs, Partial<acc_t<T>> *partial)
{
    using A = acc_t<T>;
    const int span = 2 * p.kernel_size - 1;
    Partial<A> acc = {0, 0};
    for (int64_t q0 = thread_index(); q0 < p.N * p.S; q0 += grid_stride()) {
        A l = 0;
        if (label[q0] >= 0)
            for (int j = 0; j < span * span; ++j) {
                int64_t m;
                const int64_t q = partner(p, label, q0, j, m);
                if (q < 0)
                    continue;
                const A a = inner(p, xs, q0, q);
                const A sp = (a > A(0) ? a : A(0)) + m_log1p(m_exp(-(a > A(0) ? a : -a)));
                l += (A)m * (sp - (label[q0] == label[q] ? a : A(0)));
                acc.count += m;
            }
        acc.sum += l;
        if (p.pass != PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE)
            store_dyn(p.loss, p.loss_dtype, pixel_at(p, q0, p.l_sg, p.l_ss), (double)l);
    }
    const Partial<A> total = block_reduce<THREADS>(acc, PartialOp());
    if (threadIdx.x == 0)
        partial[blockIdx.x] = total;
}

template <class A>
__global__ void window_finish(const ploss_region_problem p, const Partial<A> *partial, unsigned blocks, double *base)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    double total = 0.0;
    long long pairs = 0;
    for (unsigned b = 0; b < blocks; ++b) {
        total += (double)partial[b].sum;
        pairs += partial[b].count;
    }
    if (p.pass != PLOSS_PASS_BACKWARD && p.reduction != PLOSS_REDUCTION_NONE)
        store_dyn(p.loss, p.loss_dtype, 0, p.reduction == PLOSS_REDUCTION_MEAN ? total / (double)pairs : total);
    double w = p.reduction == PLOSS_REDUCTION_MEAN ? (pairs > 0 ? 1.0 / (double)pairs : 0.0) : 1.0;
    if (p.pass != PLOSS_PASS_BACKWARD)
        w *= p.scale;
    else if (p.reduction != PLOSS_REDUCTION_NONE)
        w *= load_dyn(p.grad_loss, p.gl_dtype, 0);
    *base = w;
}

template <class T>
__global__ void __launch_bounds__(THREADS) window_grad(const ploss_region_problem p, const int32_t *label,
                                                        const acc_t<T> *xs, const double *base_weight)
{
    using A = acc_t<T>;
    const int64_t NS = p.N * p.S;
    T *grad = (T *)p.grad;
    const A base = (A)*base_weight;
    const int span = 2 * p.kernel_size - 1;
    const int per_pixel = p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE;
    for (int64_t q0 = thread_index(); q0 < p.N * p.S; q0 += grid_stride()) {
        const int64_t go = pixel_at(p, q0, p.g_sn, p.g_ss);
        int64_t at[MAX_PARTNERS];
        A factor[MAX_PARTNERS];
        int n = 0;
        if (label[q0] >= 0) {
            const A w0 = per_pixel ? (A)load_dyn(p.grad_loss, p.gl_dtype, pixel_at(p, q0, p.gl_sg, p.gl_ss)) : A(1);
            for (int j = 0; j < span * span; ++j) {
                int64_t m;
                const int64_t q = partner(p, label, q0, j, m);
                if (q < 0)
                    continue;
                const A a = inner(p, xs, q0, q);
                const A slope = A(1) / (A(1) + m_exp(-a)) - (label[q0] == label[q] ? A(1) : A(0));
                const A wq = per_pixel ? (A)load_dyn(p.grad_loss, p.gl_dtype, pixel_at(p, q, p.gl_sg, p.gl_ss)) : A(1);
                at[n] = q;
                factor[n] = (A)m * slope * (w0 + wq);
                ++n;
            }
        }
        for (int64_t c = 0; c < p.C; ++c) {
            A g = 0;
            for (int i = 0; i < n; ++i)
                g += factor[i] * xs[c * NS + at[i]];
            grad[go + c * p.g_sc] = from_acc<T>(base * g);
        }
    }
}

template <class T, class TI> ploss_status run(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    using A = acc_t<T>;
    const cudaStream_t stream = stream_of(ctx);
    const int64_t NS = p->N * p->S;
    const unsigned blocks = grid_blocks(NS, THREADS);
    const size_t b_lab = align_up((size_t)NS * 4), b_part = align_up((size_t)blocks * sizeof(Partial<A>)),
                 b_x = align_up((size_t)(NS * p->C) * sizeof(A));
    char *ws = nullptr;
    ploss_status st = ploss_workspace(ctx, b_lab + b_part + b_x + 256, (void **)&ws);
    if (st)
        return st;
    int32_t *label = (int32_t *)ws;
    Partial<A> *partial = (Partial<A> *)(ws + b_lab);
    A *xs = (A *)(ws + b_lab + b_part);
    double *base = (double *)(ws + b_lab + b_part + b_x);

    window_labels<T, TI><<<blocks, THREADS, 0, stream>>>(*p, ctx->error_slot, label, xs);
    if ((st = check_launch("affinity labels")))
        return st;
    window_loss<T><<<blocks, THREADS, 0, stream>>>(*p, label, xs, partial);
    if ((st = check_launch("affinity loss")))
        return st;
    window_finish<A><<<1, 1, 0, stream>>>(*p, partial, blocks, base);
    if ((st = check_launch("affinity finish")))
        return st;
    if (p->pass != PLOSS_PASS_FORWARD) {
        window_grad<T><<<blocks, THREADS, 0, stream>>>(*p, label, xs, base);
        if ((st = check_launch("affinity gradient")))
            return st;
    }
    return PLOSS_OK;
}

} // namespace
} // namespace ploss_cuda

extern "C" ploss_status ploss_cuda_affinity(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    using namespace ploss_cuda;
    return dispatch_float(p->x_dtype, "input", [&](auto tag) {
        using T = typename decltype(tag)::type;
        return dispatch_index(p->t_dtype, "target", [&](auto itag) {
            using TI = typename decltype(itag)::type;
            return run<T, TI>(ctx, p);
        });
    });
}
