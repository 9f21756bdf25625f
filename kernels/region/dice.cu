/*
 * dice.cu — CUDA backend of the soft Dice losses (soft_dice, binary; generalized_soft_dice
 * per sample and batch_soft_dice over the batch, per class; formulas in
 * core/engines/region.h and docs/losses.md).
 * fp32 accumulation for f32/f16/bf16 input, f64 for f64.
 *
 *  1. one block per chunk of the pixels of a (sample, class): partial A = Σ s·o,
 *     B = Σ (s^p + o), R = Σ o (CUB block reductions, one partial per block);
 *  2. one thread per (sample, class) adds its partials in order (double);
 *  3. one thread forms the groups in a fixed order: the class weights, num, den, the loss
 *     and the gradient's coefficients;
 *  4. one thread per pixel writes the gradient of its C classes.
 * No atomics: the results are bitwise the same on every run.  Invalid labels are reported
 * through the context's error slot and their pixels treated as ignored.
 */
#include "region_common.cuh"

namespace ploss_cuda {
namespace {
using namespace region;

constexpr int THREADS = 256;
constexpr int64_t CHUNK = 8192; /* pixels of one (sample, class) per block of the sums */


template <class A> __device__ __forceinline__ A power(A s, A e) { return e == A(1) ? s : e == A(2) ? s * s : m_pow(s, e); }

/* The target of pixel (n, s) for class c: the float target (binary) or the one-hot of the
 * label (0 at an ignored pixel); valid: the pixel is not ignored. */
template <class A, class TI>
__device__ __forceinline__ A load_target(const ploss_region_problem &p, int64_t n, int64_t s, int64_t c,
                                         int64_t *error_slot, int &valid)
{
    const int64_t q = n * p.S + s;
    if (p.binary) {
        valid = 1;
        return load_float_dyn<A>(p.t, p.t_dtype, pixel_at(p, q, p.t_sn, p.t_ss));
    }
    const int64_t y = load_label<TI>(p, q, error_slot);
    valid = y >= 0;
    return y == c ? A(1) : A(0);
}

template <class A> struct Sums {
    A a, b, r;
};
struct SumsOp {
    template <class A> __device__ __forceinline__ Sums<A> operator()(const Sums<A> &u, const Sums<A> &v) const
    {
        return {u.a + v.a, u.b + v.b, u.r + v.r};
    }
};

/* 1. Block (nc, chunk): the partial sums of its pixels. */
template <class T, class TI>
__global__ void __launch_bounds__(THREADS) dice_sums(const ploss_region_problem p, int64_t chunks, int64_t *error_slot,
                                                      Sums<acc_t<T>> *partial)
{
    using A = acc_t<T>;
    const int64_t nc = blockIdx.x / chunks, chunk = blockIdx.x % chunks, n = nc / p.C, c = nc % p.C;
    const int64_t end = (chunk + 1) * CHUNK < p.S ? (chunk + 1) * CHUNK : p.S;
    const T *x = (const T *)p.x;
    const A e = (A)p.exponent;
    Sums<A> acc = {0, 0, 0};
    for (int64_t s = chunk * CHUNK + threadIdx.x; s < end; s += THREADS) {
        /* the class-0 blocks report invalid labels (once per pixel is enough) */
        int valid;
        const A o = load_target<A, TI>(p, n, s, c, c == 0 ? error_slot : nullptr, valid);
        if (!valid && p.mask_ignored)
            continue;
        const A v = (A)to_acc(x[pixel_at(p, n * p.S + s, p.x_sn, p.x_ss) + c * p.x_sc]);
        const A sg = A(1) / (A(1) + m_exp(-v));
        acc.a += sg * o;
        acc.b += power(sg, e) + (p.binary ? power(o, e) : o);
        acc.r += o;
    }
    const Sums<A> total = block_reduce<THREADS>(acc, SumsOp());
    if (threadIdx.x == 0)
        partial[blockIdx.x] = total;
}

/* 2. One thread per (sample, class): its partials in order. */
template <class A>
__global__ void dice_sample_class(const Sums<A> *partial, int64_t nsc, int64_t chunks, double *abr)
{
    for (int64_t nc = thread_index(); nc < nsc; nc += grid_stride()) {
        double a = 0.0, b = 0.0, r = 0.0;
        for (int64_t k = 0; k < chunks; ++k) {
            const Sums<A> v = partial[nc * chunks + k];
            a += (double)v.a;
            b += (double)v.b;
            r += (double)v.r;
        }
        abr[3 * nc] = a;
        abr[3 * nc + 1] = b;
        abr[3 * nc + 2] = r;
    }
}

/* 3. One thread: per group the class weights, num and den; the loss; the gradient's
 * coefficients coef[g·C + c] = w_c·ω_g, num[g], den[g]. */
template <class A>
__global__ void dice_finish(const ploss_region_problem p, const double *abr, double *wbuf, A *coef, A *num, A *den)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    const int64_t N = p.N, C = p.C, G = p.per_image ? N : 1;
    double total = 0.0;
    for (int64_t g = 0; g < G; ++g) {
        const int64_t n0 = p.per_image ? g : 0, n1 = p.per_image ? g + 1 : N;
        double wmax = 0.0;
        for (int64_t c = 0; c < C; ++c) {
            double rc = 0.0;
            for (int64_t n = n0; n < n1; ++n)
                rc += abr[3 * (n * C + c) + 2];
            double wc = 1.0;
            if (p.sudre)
                wc = rc > 0.0 ? 1.0 / (rc * rc) : -1.0; /* absent: the largest weight, below */
            else if (p.w)
                wc = load_dyn(p.w, p.w_dtype, c * p.w_s);
            wbuf[c] = wc;
            wmax = fmax(wmax, wc);
        }
        double a = 0.0, b = 0.0;
        for (int64_t c = 0; c < C; ++c) {
            if (p.sudre && wbuf[c] < 0.0)
                wbuf[c] = wmax;
            for (int64_t n = n0; n < n1; ++n) {
                a += wbuf[c] * abr[3 * (n * C + c)];
                b += wbuf[c] * abr[3 * (n * C + c) + 1];
            }
        }
        const double nm = 2.0 * a + p.smooth, dn = b + p.smooth, loss = 1.0 - nm / dn;
        double om = p.reduction == PLOSS_REDUCTION_MEAN ? 1.0 / (double)G : 1.0;
        om *= p.pass == PLOSS_PASS_BACKWARD ? load_dyn(p.grad_loss, p.gl_dtype, g * p.gl_sg) : p.scale;
        if (coef) {
            for (int64_t c = 0; c < C; ++c)
                coef[g * C + c] = (A)(wbuf[c] * om);
            num[g] = (A)nm;
            den[g] = (A)dn;
        }
        if (p.pass != PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE)
            store_dyn(p.loss, p.loss_dtype, g * p.l_sg, loss);
        total += loss;
    }
    if (p.pass != PLOSS_PASS_BACKWARD && p.reduction != PLOSS_REDUCTION_NONE)
        store_dyn(p.loss, p.loss_dtype, 0, p.reduction == PLOSS_REDUCTION_MEAN ? total / (double)G : total);
}

/* 4. One thread per pixel: the gradient of its C classes. */
template <class T, class TI>
__global__ void __launch_bounds__(THREADS) dice_grad(const ploss_region_problem p, const acc_t<T> *coef,
                                                      const acc_t<T> *num, const acc_t<T> *den)
{
    using A = acc_t<T>;
    const T *x = (const T *)p.x;
    T *grad = (T *)p.grad;
    const A e = (A)p.exponent;
    for (int64_t q = thread_index(); q < p.N * p.S; q += grid_stride()) {
        const int64_t n = q / p.S, s = q % p.S, g = p.per_image ? n : 0;
        const int64_t xo = pixel_at(p, q, p.x_sn, p.x_ss), go = pixel_at(p, q, p.g_sn, p.g_ss);
        const A nm = num[g], dn = den[g];
        for (int64_t c = 0; c < p.C; ++c) {
            int valid;
            const A o = load_target<A, TI>(p, n, s, c, nullptr, valid);
            A d = 0;
            if (valid || !p.mask_ignored) {
                const A v = (A)to_acc(x[xo + c * p.x_sc]);
                const A sg = A(1) / (A(1) + m_exp(-v)), sg1 = A(1) / (A(1) + m_exp(v));
                d = nm * e * power(sg, e) * sg1 / dn / dn;
                d -= A(2) * o * sg * sg1 / dn;
                d *= coef[g * p.C + c];
            }
            grad[go + c * p.g_sc] = from_acc<T>(d);
        }
    }
}

template <class T, class TI> ploss_status run(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    using A = acc_t<T>;
    const cudaStream_t stream = stream_of(ctx);
    const int64_t N = p->N, C = p->C, G = ploss_region_groups(p);
    const int64_t chunks = (p->S + CHUNK - 1) / CHUNK, blocks = N * C * chunks;
    const int want_grad = p->pass != PLOSS_PASS_FORWARD;
    if (blocks > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "input: %lld (sample, class) chunks exceed the CUDA grid",
                           (long long)blocks);
    const size_t b_part = align_up((size_t)blocks * sizeof(Sums<A>)), b_abr = align_up((size_t)(3 * N * C) * 8);
    const size_t b_w = align_up((size_t)C * 8), b_coef = align_up((size_t)(G * C) * sizeof(A)),
                 b_g = align_up((size_t)G * sizeof(A));
    char *ws = nullptr;
    ploss_status st = ploss_workspace(ctx, b_part + b_abr + b_w + b_coef + 2 * b_g + 256, (void **)&ws);
    if (st)
        return st;
    Sums<A> *partial = (Sums<A> *)ws;
    double *abr = (double *)(ws + b_part), *wbuf = (double *)(ws + b_part + b_abr);
    A *coef = (A *)(ws + b_part + b_abr + b_w), *num = (A *)((char *)coef + b_coef), *den = (A *)((char *)num + b_g);

    dice_sums<T, TI><<<(unsigned)blocks, THREADS, 0, stream>>>(*p, chunks, ctx->error_slot, partial);
    if ((st = check_launch("soft Dice sums")))
        return st;
    dice_sample_class<A><<<grid_blocks(N * C, THREADS), THREADS, 0, stream>>>(partial, N * C, chunks, abr);
    if ((st = check_launch("soft Dice sample sums")))
        return st;
    dice_finish<A><<<1, 1, 0, stream>>>(*p, abr, wbuf, want_grad ? coef : nullptr, num, den);
    if ((st = check_launch("soft Dice finish")))
        return st;
    if (want_grad) {
        dice_grad<T, TI><<<grid_blocks(N * p->S, THREADS), THREADS, 0, stream>>>(*p, coef, num, den);
        if ((st = check_launch("soft Dice gradient")))
            return st;
    }
    return PLOSS_OK;
}

} // namespace
} // namespace ploss_cuda

extern "C" ploss_status ploss_cuda_dice(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    using namespace ploss_cuda;
    return dispatch_float(p->x_dtype, "input", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (p->binary) /* a float target, read by dtype at run time */
            return run<T, int64_t>(ctx, p);
        return dispatch_index(p->t_dtype, "target", [&](auto itag) {
            using TI = typename decltype(itag)::type;
            return run<T, TI>(ctx, p);
        });
    });
}
