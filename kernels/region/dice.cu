/*
 * dice.cu — CUDA backend of the soft Dice losses (soft_dice, binary; generalized_soft_dice
 * per sample and batch_soft_dice over the batch, per class; formulas in
 * core/engines/region.h and docs/losses.md).
 * fp32 accumulation for f32/f16/bf16 input, f64 for f64.
 *
 * Two kernels, each over a grid of tiles (a tile: TILE consecutive pixels of one sample,
 * PPT per thread, pixel tile·TILE + i·THREADS + thread for i < PPT):
 *  1. dice_sums: a thread reads the labels (or binary targets) of its pixels once, then
 *     class by class their logits, and the block forms the tile's partial A = Σ s·o,
 *     B = Σ (s^p + o), R = Σ o per class (warp shuffles, then the warps in order).  The
 *     last tile of a sample to finish (a fence and an arrival counter) adds the sample's
 *     partials in tile order (double); the last sample to finish forms the groups in a
 *     fixed order: the class weights, num, den, the loss and the gradient's coefficients;
 *  2. dice_grad (backward): the same tiles in reverse order (the end of the input, read
 *     last by the sums, is still in L2), labels read once per pixel, the gradient of its
 *     C classes.
 * Spatial dims merged to one (sdim ≤ 1, the usual case) give a pixel's offset as s·stride
 * (FLAT); other views take the general strided offset.  Both map pixels to threads and
 * reduce in the same way, so a strided view gives the bits of its contiguous copy.
 * No float atomics (integer arrival counters only): the results are bitwise the same on
 * every run.  Invalid labels are reported through the context's error slot and their
 * pixels treated as ignored.
 */
#include "region_common.cuh"

namespace ploss_cuda {
namespace {
using namespace region;

constexpr int THREADS = 256, WARPS = THREADS / 32;
constexpr int PPT = 8;                 /* pixels per thread */
constexpr int TILE = THREADS * PPT;    /* pixels of one sample per block */
constexpr int OUTSIDE = -2;            /* a thread's pixel slot past the sample's end */

/* s^e: the exponents 1 and 2 inline; any other through one out-of-line copy of pow (inlined
 * at each of a thread's PPT pixels it would multiply the build's code for a rare case). */
template <class A> __device__ __noinline__ A power_general(A s, A e) { return m_pow(s, e); }
template <class A> __device__ __forceinline__ A power(A s, A e)
{
    return e == A(1) ? s : e == A(2) ? s * s : power_general(s, e);
}
__device__ __forceinline__ float m_rcp(float v) { return __frcp_rn(v); }
__device__ __forceinline__ double m_rcp(double v) { return 1.0 / v; }

/* σ(v) and 1 − σ(v) from one exponential, both without cancellation. */
template <class A> __device__ __forceinline__ void sigmoid2(A v, A &s, A &s1)
{
    const A e = m_exp(v >= A(0) ? -v : v), r = m_rcp(A(1) + e);
    s = v >= A(0) ? r : e * r;
    s1 = v >= A(0) ? e * r : r;
}

/* The offset of pixel s of a sample along the spatial strides ss. */
template <bool FLAT>
__device__ __forceinline__ int64_t spatial(const ploss_region_problem &p, const int64_t *ss, int64_t s)
{
    if (FLAT)
        return p.sdim ? s * ss[0] : 0;
    return ploss_region_pixel_offset(&p, ss, s);
}

/* The offsets of a thread's PPT pixels of tile `tile` of sample n in a tensor with sample
 * stride sn and spatial strides ss: FLAT, a base and a step (two registers); otherwise one
 * offset per pixel. */
template <bool FLAT> struct Offsets {
    int64_t at[PPT];
    __device__ __forceinline__ Offsets(const ploss_region_problem &p, int64_t sn, const int64_t *ss, int64_t n,
                                       int64_t tile)
    {
#pragma unroll
        for (int i = 0; i < PPT; ++i) {
            const int64_t s = tile * TILE + i * THREADS + threadIdx.x;
            at[i] = s < p.S ? n * sn + spatial<false>(p, ss, s) : 0;
        }
    }
    __device__ __forceinline__ int64_t operator[](int i) const { return at[i]; }
};
template <> struct Offsets<true> {
    int64_t base, step;
    __device__ __forceinline__ Offsets(const ploss_region_problem &p, int64_t sn, const int64_t *ss, int64_t n,
                                       int64_t tile)
    {
        const int64_t stride = p.sdim ? ss[0] : 0;
        base = n * sn + (tile * TILE + threadIdx.x) * stride;
        step = THREADS * stride;
    }
    __device__ __forceinline__ int64_t operator[](int i) const { return base + i * step; }
};

template <class A> struct Sums {
    A a, b, r;
};

template <class V> __device__ __forceinline__ V warp_sum(V v)
{
    for (int d = 16; d > 0; d >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}

/* The workspace. */
template <class A> struct Work {
    Sums<A> *partial;   /* [n][c][tile] */
    double *abr;        /* [n][c][3]: the sample's A, B, R */
    double *loss;       /* [g] */
    A *coef;            /* [g][c]: w_c·ω_g */
    A *alpha, *beta;    /* [g]: num·p/den², 2/den */
    unsigned *arrived;  /* [n]: tiles of sample n done; [N]: samples done (zeroed) */
};

/* The binary targets of a thread's pixels as U, all loads issued before any is used. */
template <class U, class A, bool FLAT>
__device__ __forceinline__ void load_targets(const ploss_region_problem &p, int64_t n, int64_t tile, A (&tgt)[PPT])
{
    U raw[PPT];
#pragma unroll
    for (int i = 0; i < PPT; ++i) {
        const int64_t s = tile * TILE + i * THREADS + threadIdx.x;
        raw[i] = s < p.S ? ((const U *)p.t)[n * p.t_sn + spatial<FLAT>(p, p.t_ss, s)] : U(0);
    }
#pragma unroll
    for (int i = 0; i < PPT; ++i)
        tgt[i] = (A)to_acc(raw[i]);
}

/* The classes of a thread's pixels (lab[i] = OUTSIDE past the sample's end is kept): -1
 * ignored; an invalid label is reported and its pixel ignored. */
template <class TI, bool FLAT>
__device__ __forceinline__ void load_labels(const ploss_region_problem &p, int64_t n, int64_t tile, int64_t *error_slot,
                                            int (&lab)[PPT])
{
    TI y[PPT];
#pragma unroll
    for (int i = 0; i < PPT; ++i) {
        const int64_t s = tile * TILE + i * THREADS + threadIdx.x;
        y[i] = lab[i] != OUTSIDE ? ((const TI *)p.t)[n * p.t_sn + spatial<FLAT>(p, p.t_ss, s)] : TI(0);
    }
#pragma unroll
    for (int i = 0; i < PPT; ++i) {
        if (lab[i] == OUTSIDE)
            continue;
        const int64_t v = (int64_t)y[i];
        lab[i] = -1;
        if (v != p.ignore_index) {
            if (v >= 0 && v < p.C)
                lab[i] = (int)v;
            else
                report_invalid_label(error_slot, v);
        }
    }
}

/* A thread's pixels of tile `tile` of sample n: the class (-1 ignored, OUTSIDE past the end;
 * 0 for binary) and, binary, the float target.  Every load is issued before any value is
 * looked at (one memory latency per thread, not one per pixel).  The target's dtype is read
 * at run time (once per thread: the kernels are not compiled per label type). */
template <class A, bool BINARY, bool FLAT>
__device__ __forceinline__ void load_pixels(const ploss_region_problem &p, int64_t n, int64_t tile, int64_t *error_slot,
                                            int (&lab)[PPT], A (&tgt)[PPT])
{
#pragma unroll
    for (int i = 0; i < PPT; ++i) {
        lab[i] = tile * TILE + i * THREADS + threadIdx.x < p.S ? 0 : OUTSIDE;
        tgt[i] = A(0);
    }
    if constexpr (BINARY) {
        switch (p.t_dtype) {
        case PLOSS_F32: load_targets<float, A, FLAT>(p, n, tile, tgt); break;
        case PLOSS_F16: load_targets<__half, A, FLAT>(p, n, tile, tgt); break;
        case PLOSS_BF16: load_targets<__nv_bfloat16, A, FLAT>(p, n, tile, tgt); break;
        default: load_targets<double, A, FLAT>(p, n, tile, tgt); break;
        }
    } else if (p.t_dtype == PLOSS_I32) {
        load_labels<int32_t, FLAT>(p, n, tile, error_slot, lab);
    } else {
        load_labels<int64_t, FLAT>(p, n, tile, error_slot, lab);
    }
}

/* The class weight of class c in group g (before Sudre's absent-class substitution). */
__device__ __forceinline__ double class_weight(const ploss_region_problem &p, double rc, int64_t c)
{
    if (p.sudre)
        return rc > 0.0 ? 1.0 / (rc * rc) : -1.0; /* absent: the largest weight, below */
    return p.w ? load_dyn(p.w, p.w_dtype, c * p.w_s) : 1.0;
}

/* R of class c over the samples of group g. */
__device__ __forceinline__ double group_r(const ploss_region_problem &p, const double *abr, int64_t g, int64_t c)
{
    const int64_t n0 = p.per_image ? g : 0, n1 = p.per_image ? g + 1 : p.N;
    double rc = 0.0;
    for (int64_t n = n0; n < n1; ++n)
        rc += __ldcg(abr + 3 * (n * p.C + c) + 2);
    return rc;
}

/* The last block: per group (one thread each) the weights, num, den, loss and the
 * gradient's coefficients; then the reduced loss in group order. */
template <class A> __device__ void finish(const ploss_region_problem &p, const Work<A> &w)
{
    const int64_t C = p.C, G = ploss_region_groups(&p);
    for (int64_t g = threadIdx.x; g < G; g += THREADS) {
        const int64_t n0 = p.per_image ? g : 0, n1 = p.per_image ? g + 1 : p.N;
        double wmax = 0.0;
        if (p.sudre)
            for (int64_t c = 0; c < C; ++c)
                wmax = fmax(wmax, class_weight(p, group_r(p, w.abr, g, c), c));
        double a = 0.0, b = 0.0;
        for (int64_t c = 0; c < C; ++c) {
            double wc = class_weight(p, p.sudre ? group_r(p, w.abr, g, c) : 0.0, c);
            if (p.sudre && wc < 0.0)
                wc = wmax;
            for (int64_t n = n0; n < n1; ++n) {
                a += wc * __ldcg(w.abr + 3 * (n * C + c));
                b += wc * __ldcg(w.abr + 3 * (n * C + c) + 1);
            }
        }
        const double nm = 2.0 * a + p.smooth, dn = b + p.smooth, loss = 1.0 - nm / dn;
        double om = p.reduction == PLOSS_REDUCTION_MEAN ? 1.0 / (double)G : 1.0;
        om *= p.pass == PLOSS_PASS_BACKWARD ? load_dyn(p.grad_loss, p.gl_dtype, g * p.gl_sg) : p.scale;
        if (p.pass != PLOSS_PASS_FORWARD) {
            for (int64_t c = 0; c < C; ++c) {
                double wc = class_weight(p, p.sudre ? group_r(p, w.abr, g, c) : 0.0, c);
                if (p.sudre && wc < 0.0)
                    wc = wmax;
                w.coef[g * C + c] = (A)(wc * om);
            }
            w.alpha[g] = (A)(nm * p.exponent / dn / dn);
            w.beta[g] = (A)(2.0 / dn);
        }
        if (p.pass != PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE)
            store_dyn(p.loss, p.loss_dtype, g * p.l_sg, loss);
        w.loss[g] = loss;
    }
    if (p.pass == PLOSS_PASS_BACKWARD || p.reduction == PLOSS_REDUCTION_NONE)
        return;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int64_t g = 0; g < G; ++g)
            total += w.loss[g];
        store_dyn(p.loss, p.loss_dtype, 0, p.reduction == PLOSS_REDUCTION_MEAN ? total / (double)G : total);
    }
}

/* 1. Block b = n·tiles + tile: the partial sums of the tile per class; the last tiles
 * finish the sample, then the groups. */
template <class T, bool BINARY, bool FLAT>
__global__ void __launch_bounds__(THREADS, FLAT ? 4 : 2) dice_sums(const ploss_region_problem p, int64_t tiles, int64_t *error_slot,
                                                      Work<acc_t<T>> w)
{
    using A = acc_t<T>;
    __shared__ Sums<A> red[2][WARPS];
    __shared__ bool last;
    const int64_t n = blockIdx.x / tiles, tile = blockIdx.x % tiles;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int lab[PPT];
    A tgt[PPT];
    load_pixels<A, BINARY, FLAT>(p, n, tile, error_slot, lab, tgt);
    const Offsets<FLAT> xo(p, p.x_sn, p.x_ss, n, tile);
    const T *x = (const T *)p.x;
    const A e = (A)p.exponent;
    for (int64_t c = 0; c < p.C; ++c) {
        A v[PPT];
#pragma unroll
        for (int i = 0; i < PPT; ++i) /* every load first */
            v[i] = lab[i] == OUTSIDE ? A(0) : (A)to_acc(x[xo[i] + c * p.x_sc]);
        Sums<A> acc = {0, 0, 0};
#pragma unroll
        for (int i = 0; i < PPT; ++i) {
            if (lab[i] == OUTSIDE || (lab[i] < 0 && p.mask_ignored))
                continue;
            A sg, sg1;
            sigmoid2(v[i], sg, sg1);
            const A o = BINARY ? tgt[i] : (lab[i] == c ? A(1) : A(0));
            acc.a += sg * o;
            acc.b += power(sg, e) + (BINARY ? power(o, e) : o);
            acc.r += o;
        }
        acc.a = warp_sum(acc.a);
        acc.b = warp_sum(acc.b);
        acc.r = warp_sum(acc.r);
        if (lane == 0)
            red[c & 1][warp] = acc;
        __syncthreads(); /* one barrier per class: red alternates, thread 0 reads before the next one */
        if (threadIdx.x == 0) {
            Sums<A> t = red[c & 1][0];
            for (int k = 1; k < WARPS; ++k) {
                t.a += red[c & 1][k].a;
                t.b += red[c & 1][k].b;
                t.r += red[c & 1][k].r;
            }
            w.partial[(n * p.C + c) * tiles + tile] = t;
        }
    }

    /* the last tile of sample n to arrive adds its partials, tile by tile */
    if (threadIdx.x == 0) {
        __threadfence(); /* the partials, before the arrival */
        last = atomicAdd(w.arrived + n, 1u) == (unsigned)(tiles - 1);
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    for (int64_t c = warp; c < p.C; c += WARPS) {
        double a = 0.0, b = 0.0, r = 0.0;
        for (int64_t k = lane; k < tiles; k += 32) {
            const Sums<A> *q = w.partial + (n * p.C + c) * tiles + k;
            a += (double)__ldcg(&q->a);
            b += (double)__ldcg(&q->b);
            r += (double)__ldcg(&q->r);
        }
        a = warp_sum(a);
        b = warp_sum(b);
        r = warp_sum(r);
        if (lane == 0) {
            w.abr[3 * (n * p.C + c)] = a;
            w.abr[3 * (n * p.C + c) + 1] = b;
            w.abr[3 * (n * p.C + c) + 2] = r;
        }
    }
    __threadfence(); /* the sample's sums, before its arrival */
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(w.arrived + p.N, 1u) == (unsigned)(p.N - 1);
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    finish(p, w);
}

/* 2. Block b: tile gridDim.x − 1 − b (reverse order); the gradient of its pixels. */
template <class T, bool BINARY, bool FLAT>
__global__ void __launch_bounds__(THREADS, FLAT ? 4 : 2) dice_grad(const ploss_region_problem p, int64_t tiles, Work<acc_t<T>> w)
{
    using A = acc_t<T>;
    const int64_t b = gridDim.x - 1 - blockIdx.x, n = b / tiles, tile = b % tiles, g = p.per_image ? n : 0;
    int lab[PPT];
    A tgt[PPT];
    load_pixels<A, BINARY, FLAT>(p, n, tile, nullptr, lab, tgt);
    const Offsets<FLAT> xo(p, p.x_sn, p.x_ss, n, tile), go(p, p.g_sn, p.g_ss, n, tile);
    const T *x = (const T *)p.x;
    T *grad = (T *)p.grad;
    const A e = (A)p.exponent, alpha = w.alpha[g], beta = w.beta[g];
    for (int64_t c = 0; c < p.C; ++c) {
        A v[PPT];
#pragma unroll
        for (int i = 0; i < PPT; ++i)
            v[i] = lab[i] == OUTSIDE ? A(0) : (A)to_acc(x[xo[i] + c * p.x_sc]);
        const A k = w.coef[g * p.C + c];
#pragma unroll
        for (int i = 0; i < PPT; ++i) {
            if (lab[i] == OUTSIDE)
                continue;
            A d = 0;
            if (lab[i] >= 0 || !p.mask_ignored) {
                A sg, sg1;
                sigmoid2(v[i], sg, sg1);
                const A o = BINARY ? tgt[i] : (lab[i] == c ? A(1) : A(0));
                d = k * (alpha * power(sg, e) * sg1 - beta * o * sg * sg1);
            }
            grad[go[i] + c * p.g_sc] = from_acc<T>(d);
        }
    }
}

template <class T, bool BINARY, bool FLAT> ploss_status run(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    using A = acc_t<T>;
    const cudaStream_t stream = stream_of(ctx);
    const int64_t N = p->N, C = p->C, G = ploss_region_groups(p);
    const int64_t tiles = (p->S + TILE - 1) / TILE, blocks = N * tiles;
    if (blocks > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "input: %lld pixel tiles exceed the CUDA grid", (long long)blocks);
    const size_t b_part = align_up((size_t)(N * C * tiles) * sizeof(Sums<A>)), b_abr = align_up((size_t)(3 * N * C) * 8),
                 b_loss = align_up((size_t)G * 8), b_coef = align_up((size_t)(G * C) * sizeof(A)),
                 b_g = align_up((size_t)G * sizeof(A)), b_cnt = align_up((size_t)(N + 1) * sizeof(unsigned));
    char *ws = nullptr;
    ploss_status st = ploss_workspace(ctx, b_part + b_abr + b_loss + b_coef + 2 * b_g + b_cnt, (void **)&ws);
    if (st)
        return st;
    Work<A> w;
    w.partial = (Sums<A> *)ws;
    w.abr = (double *)(ws + b_part);
    w.loss = (double *)(ws + b_part + b_abr);
    w.coef = (A *)(ws + b_part + b_abr + b_loss);
    w.alpha = (A *)((char *)w.coef + b_coef);
    w.beta = (A *)((char *)w.alpha + b_g);
    w.arrived = (unsigned *)((char *)w.beta + b_g);
    if ((st = ploss_cuda_memset(w.arrived, 0, (size_t)(N + 1) * sizeof(unsigned), stream)))
        return st;
    dice_sums<T, BINARY, FLAT><<<(unsigned)blocks, THREADS, 0, stream>>>(*p, tiles, ctx->error_slot, w);
    if ((st = check_launch("soft Dice sums")))
        return st;
    if (p->pass != PLOSS_PASS_FORWARD) {
        dice_grad<T, BINARY, FLAT><<<(unsigned)blocks, THREADS, 0, stream>>>(*p, tiles, w);
        if ((st = check_launch("soft Dice gradient")))
            return st;
    }
    return PLOSS_OK;
}

template <class T, bool BINARY> ploss_status run_layout(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    return p->sdim <= 1 ? run<T, BINARY, true>(ctx, p) : run<T, BINARY, false>(ctx, p);
}

} // namespace
} // namespace ploss_cuda

extern "C" ploss_status ploss_cuda_dice(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    using namespace ploss_cuda;
    return dispatch_float(p->x_dtype, "input", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (p->binary) /* a float target, read by dtype at run time */
            return run_layout<T, true>(ctx, p);
        /* the labels, likewise: dispatch_index only checks their dtype */
        return dispatch_index(p->t_dtype, "target", [&](auto) { return run_layout<T, false>(ctx, p); });
    });
}
