/*
 * affinity_field.cu — CUDA backend of the affinity field loss (formulas in
 * core/engines/region.h and docs/losses.md).  fp32 accumulation for f32/f16/bf16 input, f64
 * for f64.
 *
 *  1. one thread per pixel: its log-softmax (class-major) and its label (-1: ignored; an
 *     invalid label is reported through the context's error slot and treated as ignored)
 *     into the workspace: the later passes never read the input, which an in-place fused
 *     pass overwrites;
 *  2. one thread per pixel u: ℓ_u over its 8 neighbours (the 'none' map), and per block the
 *     partial Σ ℓ_u and count of valid pixels (CUB block reductions, a fixed grid);
 *  3. one thread: the partials in order, the loss and the gradient's base weight;
 *  4. one thread per pixel z: the divergences of the 16 pairs z belongs to (8 as the centre,
 *     8 as the neighbour), then its gradient gathered class by class.  No atomics.
 */
#include "region_common.cuh"

namespace ploss_cuda {
namespace {
using namespace region;

constexpr int THREADS = 256;

__device__ __constant__ int DH[8] = {-1, -1, -1, 0, 0, 1, 1, 1};
__device__ __constant__ int DW[8] = {-1, 0, 1, -1, 1, -1, 0, 1};

/* The neighbour of pixel q along direction k (sign −1: the opposite one), or -1 outside the
 * image or ignored. */
__device__ __forceinline__ int64_t neighbour(const ploss_region_problem &p, const int32_t *label, int64_t q, int k,
                                             int sign)
{
    const int64_t W = p.sshape[1], H = p.sshape[0], s = q % p.S;
    const int64_t h = s / W + sign * DH[k], w = s % W + sign * DW[k];
    if (h < 0 || h >= H || w < 0 || w >= W)
        return -1;
    const int64_t v = q - s + h * W + w;
    return label[v] < 0 ? -1 : v;
}

/* log p_c of pixel q (logp: class-major, N·S per class). */
template <class A>
__device__ __forceinline__ A log_prob(const ploss_region_problem &p, const A *logp, int64_t q, int64_t c)
{
    return logp[c * p.N * p.S + q];
}

/* D(u, v), and (reference divergence) the Σ of the softmax Jacobian for z = u (role 0:
 * Σ p_u·p_v) or z = v (role 1: Σ p_v·(2p_v − p_u)). */
template <class T>
__device__ __forceinline__ void pair_divergence(const ploss_region_problem &p, const acc_t<T> *logp, int64_t u,
                                                int64_t v, int role, acc_t<T> &D, acc_t<T> &dot)
{
    using A = acc_t<T>;
    D = 0;
    dot = 0;
    for (int64_t c = 0; c < p.C; ++c) {
        const A lu = log_prob(p, logp, u, c), lv = log_prob(p, logp, v, c), pv = m_exp(lv);
        if (p.reference_divergence) {
            const A pu = m_exp(lu);
            D += pv * (pv - pu);
            dot += role ? pv * (A(2) * pv - pu) : pu * pv;
        } else {
            D += pv * (lv - lu);
        }
    }
}

template <class T, class TI>
__global__ void __launch_bounds__(THREADS) field_stats(const ploss_region_problem p, int64_t *error_slot,
                                                        acc_t<T> *logp, int32_t *label)
{
    using A = acc_t<T>;
    const T *x = (const T *)p.x;
    for (int64_t q = thread_index(); q < p.N * p.S; q += grid_stride()) {
        label[q] = (int32_t)load_label<TI>(p, q, error_slot);
        const int64_t xo = pixel_at(p, q, p.x_sn, p.x_ss);
        A mx = -INFINITY, sum = 0;
        for (int64_t c = 0; c < p.C; ++c)
            mx = MaxOp()(mx, (A)to_acc(x[xo + c * p.x_sc]));
        for (int64_t c = 0; c < p.C; ++c)
            sum += m_exp((A)to_acc(x[xo + c * p.x_sc]) - mx);
        const A lse = mx + m_log(sum);
        for (int64_t c = 0; c < p.C; ++c)
            logp[c * p.N * p.S + q] = (A)to_acc(x[xo + c * p.x_sc]) - lse;
    }
}

template <class T>
__global__ void __launch_bounds__(THREADS) field_loss(const ploss_region_problem p, const acc_t<T> *logp,
                                                       const int32_t *label, Partial<acc_t<T>> *partial)
{
    using A = acc_t<T>;
    Partial<A> acc = {0, 0};
    for (int64_t u = thread_index(); u < p.N * p.S; u += grid_stride()) {
        A l = 0;
        if (label[u] >= 0) {
            for (int k = 0; k < 8; ++k) {
                const int64_t v = neighbour(p, label, u, k, 1);
                if (v < 0)
                    continue;
                A D, dot;
                pair_divergence<T>(p, logp, u, v, 0, D, dot);
                const A margin = (A)p.kl_margin - D;
                l += label[u] == label[v] ? (A)p.lambda_same * D : (A)p.lambda_diff * (margin > A(0) ? margin : A(0));
            }
            l /= A(8);
            acc.count += 1;
        }
        acc.sum += l;
        if (p.pass != PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE)
            store_dyn(p.loss, p.loss_dtype, pixel_at(p, u, p.l_sg, p.l_ss), (double)l);
    }
    const Partial<A> total = block_reduce<THREADS>(acc, PartialOp());
    if (threadIdx.x == 0)
        partial[blockIdx.x] = total;
}

/* One thread: the loss (MEAN / SUM) and the gradient's base weight (before 1/8 and, for
 * NONE backward, the centre's upstream gradient). */
template <class A>
__global__ void field_finish(const ploss_region_problem p, const Partial<A> *partial, unsigned blocks, double *base)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    double total = 0.0;
    long long valid = 0;
    for (unsigned b = 0; b < blocks; ++b) {
        total += (double)partial[b].sum;
        valid += partial[b].count;
    }
    if (p.pass != PLOSS_PASS_BACKWARD && p.reduction != PLOSS_REDUCTION_NONE)
        store_dyn(p.loss, p.loss_dtype, 0, p.reduction == PLOSS_REDUCTION_MEAN ? total / (double)valid : total);
    double w = p.reduction == PLOSS_REDUCTION_MEAN ? (valid > 0 ? 1.0 / (double)valid : 0.0) : 1.0;
    if (p.pass != PLOSS_PASS_BACKWARD)
        w *= p.scale;
    else if (p.reduction != PLOSS_REDUCTION_NONE)
        w *= load_dyn(p.grad_loss, p.gl_dtype, 0);
    *base = w;
}

template <class T>
__global__ void __launch_bounds__(THREADS) field_grad(const ploss_region_problem p, const acc_t<T> *logp,
                                                       const int32_t *label, const double *base_weight)
{
    using A = acc_t<T>;
    T *grad = (T *)p.grad;
    const A base = (A)(*base_weight / 8.0);
    for (int64_t z = thread_index(); z < p.N * p.S; z += grid_stride()) {
        const int64_t go = pixel_at(p, z, p.g_sn, p.g_ss);
        if (label[z] < 0) {
            for (int64_t c = 0; c < p.C; ++c)
                grad[go + c * p.g_sc] = from_acc<T>(A(0));
            continue;
        }
        /* the 16 pairs: the other pixel, the term's slope times the centre's weight, D, dot */
        int64_t other[16];
        A coef[16], Ds[16], dots[16];
        for (int j = 0; j < 16; ++j) {
            const int role = j >= 8;
            other[j] = neighbour(p, label, z, j & 7, role ? -1 : 1);
            coef[j] = 0;
            if (other[j] < 0)
                continue;
            const int64_t u = role ? other[j] : z, v = role ? z : other[j];
            pair_divergence<T>(p, logp, u, v, role, Ds[j], dots[j]);
            A slope = label[u] == label[v] ? (A)p.lambda_same
                                           : ((A)p.kl_margin - Ds[j] > A(0) ? -(A)p.lambda_diff : A(0));
            A om = base;
            if (p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE)
                om *= (A)load_dyn(p.grad_loss, p.gl_dtype, pixel_at(p, u, p.gl_sg, p.gl_ss));
            coef[j] = om * slope;
        }
        for (int64_t c = 0; c < p.C; ++c) {
            const A lz = log_prob(p, logp, z, c), pz = m_exp(lz);
            A g = 0;
            for (int j = 0; j < 16; ++j) {
                if (coef[j] == A(0))
                    continue;
                const A lo = log_prob(p, logp, other[j], c), po = m_exp(lo);
                A dD;
                if (j < 8) /* z = u, other = v */
                    dD = p.reference_divergence ? pz * (dots[j] - po) : pz - po;
                else       /* z = v, other = u */
                    dD = p.reference_divergence ? pz * ((A(2) * pz - po) - dots[j]) : pz * (lz - lo - Ds[j]);
                g += coef[j] * dD;
            }
            grad[go + c * p.g_sc] = from_acc<T>(g);
        }
    }
}

template <class T, class TI> ploss_status run(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    using A = acc_t<T>;
    const cudaStream_t stream = stream_of(ctx);
    const int64_t NS = p->N * p->S;
    const unsigned blocks = grid_blocks(NS, THREADS);
    const size_t b_logp = align_up((size_t)(NS * p->C) * sizeof(A)), b_lab = align_up((size_t)NS * 4),
                 b_part = align_up((size_t)blocks * sizeof(Partial<A>));
    char *ws = nullptr;
    ploss_status st = ploss_workspace(ctx, b_logp + b_lab + b_part + 256, (void **)&ws);
    if (st)
        return st;
    A *logp = (A *)ws;
    int32_t *label = (int32_t *)(ws + b_logp);
    Partial<A> *partial = (Partial<A> *)(ws + b_logp + b_lab);
    double *base = (double *)(ws + b_logp + b_lab + b_part);

    field_stats<T, TI><<<blocks, THREADS, 0, stream>>>(*p, ctx->error_slot, logp, label);
    if ((st = check_launch("affinity field statistics")))
        return st;
    field_loss<T><<<blocks, THREADS, 0, stream>>>(*p, logp, label, partial);
    if ((st = check_launch("affinity field loss")))
        return st;
    field_finish<A><<<1, 1, 0, stream>>>(*p, partial, blocks, base);
    if ((st = check_launch("affinity field finish")))
        return st;
    if (p->pass != PLOSS_PASS_FORWARD) {
        field_grad<T><<<blocks, THREADS, 0, stream>>>(*p, logp, label, base);
        if ((st = check_launch("affinity field gradient")))
            return st;
    }
    return PLOSS_OK;
}

} // namespace
} // namespace ploss_cuda

extern "C" ploss_status ploss_cuda_affinity_field(ploss_ctx_t *ctx, const ploss_region_problem *p)
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
