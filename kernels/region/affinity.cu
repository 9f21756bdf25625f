/*
 * affinity.cu — CUDA backend of the affinity loss (local context prior; formulas in
 * core/engines/region.h and docs/losses.md).  fp32 accumulation for f32/f16/bf16 input, f64
 * for f64.
 *
 *  1. window_prep, one block per TH×TW tile (the main kernel's tiles, so no per-pixel
 *     index division), one thread per pixel: its label into an int32 map (-1: ignored; an
 *     invalid label is reported through the context's error slot and treated as ignored),
 *     MEAN's divisor Σ m(p, q) over the ordered pairs of valid pixels (integer atomics:
 *     exact in any order; needed by the gradient) and, only when the gradient overwrites
 *     the input (an in-place pass), a copy of the input for the partners' logits.  The
 *     divisor is counted per window rather than per pair: m(p, q) is the number of windows
 *     holding both, so Σ_{p,q} m(p, q) = Σ_windows n_w² with n_w the valid pixels of window
 *     w; each pixel counts the window whose top-left corner it is, from the valid flags of
 *     the tile and its (K − 1)-pixel halo (right and below) in shared memory;
 *  2. window_main<K>, one block per TH×TW tile of one image: the tile and its (K − 1)-pixel
 *     halo in shared memory (labels; the logits class chunk by class chunk), a thread per
 *     pixel p: the inner products A_q with its (2K − 1)² partners (registers), ℓ_p (the
 *     'none' map; per block partial sums reduced in a fixed order by the last block to
 *     finish), the factors m·(σ(A) − T)·(ω_p + ω_q), then its gradient class by class,
 *     Σ_q factor_q·x_q;
 *  2'. window_main_vec<CV> in place of window_main for k = 3, fp32 accumulation and at most
 *     32 classes (the common case): the same sums in the same order, from a pixel-major tile
 *     whose 16-byte loads take four classes at once, the pixel's own classes and gradient in
 *     registers.
 * window_main loads the tile's logits LOAD_BATCH elements per thread at a time,
 * window_main_vec all the classes of a halo pixel per thread (all loads issued before the
 * stores to shared memory), so that enough reads are in flight to cover the memory
 * latency.  The inner products stay in registers; the pair multiplicities m are recomputed
 * where needed rather than kept alongside them.
 * The input is read once (plus the halo, mostly from L2), the gradient written once.  No
 * float atomics: the results are bitwise the same on every run.
 */
#include <type_traits>

#include "region_common.cuh"

namespace ploss_cuda {
namespace {
using namespace region;

constexpr int TW = 32, TH = 8, THREADS = TW * TH; /* a tile: TH rows of TW pixels */
constexpr size_t SMEM_BUDGET = 96 * 1024;         /* dynamic shared memory of a block */
constexpr int LOAD_BATCH = 8;                     /* global loads in flight per thread */
constexpr int PREP_R = PLOSS_AFFINITY_MAX_KERNEL - 1, PREP_W = TW + PREP_R; /* window_prep's halo */

/* Resident blocks per SM of window_main<K> (its launch bounds): 4 (64 registers) while
 * the (2K − 1)² inner products of fp32 accumulation fit, else 2. */
template <int K, class A> constexpr int MAIN_BLOCKS = K > 0 && K <= 3 && sizeof(A) == 4 ? 4 : 2;

/* The halo of window side k: R = k − 1 pixels around the tile. */
struct Halo {
    int R, SPAN, P, W, SIZE; /* P: partners of a pixel */
    __host__ __device__ constexpr explicit Halo(int k)
        : R(k - 1), SPAN(2 * k - 1), P((2 * k - 1) * (2 * k - 1)), W(TW + 2 * (k - 1)),
          SIZE((TW + 2 * (k - 1)) * (TH + 2 * (k - 1)))
    {
    }
};

/* The number of windows of side k (stride 1, inside [0, size)) holding positions a and b, in
 * the index type I (int where the image's sides allow it: window_main_vec). */
template <class I> __host__ __device__ __forceinline__ I shared_windows(I a, I b, I k, I size)
{
    const I lo_max = a > b ? a : b, hi_min = a < b ? a : b;
    const I lo = lo_max - k + 1 > 0 ? lo_max - k + 1 : 0, hi = hi_min < size - k ? hi_min : size - k;
    return hi >= lo ? hi - lo + 1 : 0;
}

/* The logits read by window_main: the input, or its copy (in place), of dtype dt. */
struct Src {
    const void *x;
    ploss_dtype dt;
    int64_t sn, sc, sh, sw;
};

/* Calls f(T()) with T the storage type of dtype dt among those of accumulation type A (f32:
 * f32, f16, bf16; f64: f64): window_main is compiled once per accumulation type, and only
 * its loads and stores switch on the dtype. */
template <class A, class F> __device__ __forceinline__ void with_storage(ploss_dtype dt, F &&f)
{
    if constexpr (sizeof(A) == 8) {
        (void)dt;
        f(double());
    } else if (dt == PLOSS_F16) {
        f(__half());
    } else if (dt == PLOSS_BF16) {
        f(__nv_bfloat16());
    } else {
        f(float());
    }
}

/* The workspace (window_workspace): count = Σ m over the counted pairs. */
using Work = WindowWork;

/* The class of a raw label, -1 when ignored or invalid. */
__device__ __forceinline__ int64_t class_of(const ploss_region_problem &p, int64_t y)
{
    return y == p.ignore_index || y < 0 || y >= p.C ? -1 : y;
}

template <class T, class TI>
__global__ void __launch_bounds__(THREADS) window_prep(const ploss_region_problem p, int64_t *error_slot,
                                                        Work w)
{
    __shared__ unsigned char s_ok[PREP_W * (TH + PREP_R)]; /* valid flags, rows of hw */
    const int64_t H = p.sshape[0], W = p.sshape[1];
    const int k = p.kernel_size, hw = TW + k - 1;
    const int64_t tiles_w = (W + TW - 1) / TW, tiles = tiles_w * ((H + TH - 1) / TH);
    const int64_t n = blockIdx.x / tiles, tile = blockIdx.x % tiles;
    const int64_t h0 = (tile / tiles_w) * TH, w0 = (tile % tiles_w) * TW; /* the tile's origin */
    const int tx = threadIdx.x % TW, ty = threadIdx.x / TW;
    const int64_t h = h0 + ty, wc = w0 + tx;
    const TI *t = (const TI *)p.t + n * p.t_sn;

    for (int i = threadIdx.x; i < hw * (TH + k - 1); i += THREADS) {
        const int64_t hh = h0 + i / hw, ww = w0 + i % hw;
        s_ok[i] = hh < H && ww < W && class_of(p, (int64_t)t[hh * p.t_ss[0] + ww * p.t_ss[1]]) >= 0;
    }
    if (h < H && wc < W) {
        const int64_t y = load_label_at<TI>(p, n * p.t_sn + h * p.t_ss[0] + wc * p.t_ss[1], error_slot);
        const int64_t s = h * W + wc;
        w.label[n * p.S + s] = (int32_t)y;
        if (w.copy) {
            const T *x = (const T *)p.x + n * p.x_sn + h * p.x_ss[0] + wc * p.x_ss[1];
            for (int64_t c = 0; c < p.C; ++c)
                ((T *)w.copy)[(n * p.C + c) * p.S + s] = x[c * p.x_sc];
        }
    }
    __syncthreads();
    unsigned long long count = 0; /* n_w² of the window with top-left corner (h, wc) */
    if (h + k <= H && wc + k <= W) {
        unsigned nw = 0;
        for (int a = 0; a < k; ++a)
            for (int b = 0; b < k; ++b)
                nw += s_ok[(ty + a) * hw + tx + b];
        count = (unsigned long long)nw * nw;
    }
    count = block_reduce<THREADS>(count, SumOp());
    if (threadIdx.x == 0 && count)
        atomicAdd(w.count, count);
}

/* An element of the upstream gradient of any dtype: out of line, for the per-pixel upstream
 * of a backward pass with reduction 'none' is read at each of up to (2k − 1)² partners, and
 * inlined there its dtype switch would be most of the kernels' code. */
__device__ __noinline__ double upstream_element(const void *g, ploss_dtype dt, int64_t i) { return load_dyn(g, dt, i); }

/* A block's tile of one image (blocks in image-major order of TH×TW tiles): the image n, the
 * halo's origin (h0, w0) and this thread's pixel (h, wc; zi its index in the halo). */
struct WindowTile {
    int64_t n, h0, w0, h, wc;
    int zi;
    __device__ __forceinline__ WindowTile(const ploss_region_problem &p, const Halo &HL)
    {
        const int64_t H = p.sshape[0], W = p.sshape[1];
        const int64_t tiles_w = (W + TW - 1) / TW, tiles = tiles_w * ((H + TH - 1) / TH), tile = blockIdx.x % tiles;
        const int tx = threadIdx.x % TW, ty = threadIdx.x / TW;
        n = blockIdx.x / tiles;
        h0 = (tile / tiles_w) * TH - HL.R;
        w0 = (tile % tiles_w) * TW - HL.R;
        zi = (ty + HL.R) * HL.W + tx + HL.R;
        h = h0 + HL.R + ty;
        wc = w0 + HL.R + tx;
    }
};

/* The labels of the tile and its halo into s_lab (-1: outside the image or ignored), then
 * a barrier. */
__device__ __forceinline__ void stage_labels(const ploss_region_problem &p, const WindowWork &w, const Halo &HL,
                                             int64_t n, int64_t h0, int64_t w0, int *s_lab)
{
    const int64_t H = p.sshape[0], W = p.sshape[1];
    for (int i = threadIdx.x; i < HL.SIZE; i += THREADS) {
        const int64_t hh = h0 + i / HL.W, ww = w0 + i % HL.W;
        s_lab[i] = hh >= 0 && hh < H && ww >= 0 && ww < W ? w.label[n * p.S + hh * W + ww] : -1;
    }
    __syncthreads();
}

/* The gradient's multiplier of every pair factor: 1 / Σ m for MEAN (0 without pairs), the
 * fused pass's scale, or a reduced loss's upstream gradient. */
__device__ __forceinline__ double window_base(const ploss_region_problem &p, unsigned long long pairs)
{
    double base = p.reduction == PLOSS_REDUCTION_MEAN ? (pairs > 0 ? 1.0 / (double)pairs : 0.0) : 1.0;
    if (p.pass != PLOSS_PASS_BACKWARD)
        base *= p.scale;
    else if (p.reduction != PLOSS_REDUCTION_NONE)
        base *= load_dyn(p.grad_loss, p.gl_dtype, 0);
    return base;
}

/* A pair's e = e^−|A|, log(1 + e) and 1 / (1 + e).  fp32: e through ex2.approx (exp_ftz:
 * relative error about 2^-22 + |A|·2^-24, and 0 below 2^-126, i.e. |A| > 87), the
 * reciprocals through rcp.approx (__fdividef, 2 ulp), and log(1 + e) for e ∈ [0, 1] as
 * 2·atanh(s) = 2s·Σ s^2i / (2i + 1) with s = e / (2 + e) ≤ 1/3, whose terms past s^13 are
 * below 2^-25 of the sum: log(1 + e) as accurate, relative to itself, as e however small e
 * is (no 1 + e rounding), in a tenth of libdevice's log1pf and IEEE division.  f64:
 * libdevice. */
struct PairTerms {
    float e, l1p, r;
    __device__ __forceinline__ explicit PairTerms(float v)
    {
        e = exp_ftz(-fabsf(v));
        const float s = __fdividef(e, 2.0f + e), t = s * s;
        float q = 1.0f / 13.0f;
        q = fmaf(q, t, 1.0f / 11.0f);
        q = fmaf(q, t, 1.0f / 9.0f);
        q = fmaf(q, t, 1.0f / 7.0f);
        q = fmaf(q, t, 1.0f / 5.0f);
        q = fmaf(q, t, 1.0f / 3.0f);
        q = fmaf(q, t, 1.0f);
        l1p = 2.0f * s * q;
        r = __fdividef(1.0f, 1.0f + e);
    }
};
struct PairTerms64 {
    double e, l1p, r;
    __device__ __forceinline__ explicit PairTerms64(double v)
    {
        e = exp(-fabs(v));
        l1p = log1p(e);
        r = 1.0 / (1.0 + e);
    }
};

/* ℓ_p and the pairs' gradient factors.  On entry a[j] is the inner product A with partner j
 * (row-major over the (2k − 1)² offsets), on return its factor m·(σ(A) − T)·(ω_p + ω_q), 0
 * for a partner not counted (outside the image, ignored, or sharing no window); returns ℓ_p.
 * The multiplicity is separable, m = m_h·m_w: 2(2k − 1) window counts per pixel.  One
 * exponential e = e^−|A| gives both the softplus and the sigmoid (1 / (1 + e) for A > 0,
 * e / (1 + e) otherwise). */
template <class A, int SPAN_MAX, bool PER_PIXEL, class I, int P_MAX, class Up>
__device__ __forceinline__ A window_factors(const Halo &HL, const int *s_lab, int zi, bool valid, int lz, int64_t h,
                                            int64_t wc, int64_t H, int64_t W, A w0v, const Up &upstream,
                                            A (&a)[P_MAX])
{
    int mh[SPAN_MAX], mw[SPAN_MAX];
#pragma unroll
    for (int i = 0; i < HL.SPAN; ++i) {
        mh[i] = (int)shared_windows<I>((I)h, (I)h + i - HL.R, HL.R + 1, (I)H);
        mw[i] = (int)shared_windows<I>((I)wc, (I)wc + i - HL.R, HL.R + 1, (I)W);
    }
    A loss = 0;
#pragma unroll
    for (int j = 0; j < HL.P; ++j) {
        const int jh = j / HL.SPAN, jw = j % HL.SPAN, lq = s_lab[zi + (jh - HL.R) * HL.W + jw - HL.R];
        const int m = valid && lq >= 0 ? mh[jh] * mw[jw] : 0;
        if (m == 0) {
            a[j] = A(0);
            continue;
        }
        const A v = a[j], same = lq == lz ? A(1) : A(0);
        const std::conditional_t<sizeof(A) == 4, PairTerms, PairTerms64> pt(v);
        loss += (A)m * ((v > A(0) ? v : A(0)) + pt.l1p - same * v);
        const A slope = (v > A(0) ? pt.r : pt.e * pt.r) - same;
        if constexpr (PER_PIXEL)
            a[j] = (A)m * slope * (w0v + upstream(h + jh - HL.R, wc + jw - HL.R));
        else
            a[j] = (A)m * slope * (w0v + A(1));
    }
    return loss;
}

/* window_factors with the upstream gradient per pixel (a backward pass of 'none') or not,
 * chosen once: a runtime test inside the loop was redone at every partner. */
template <class A, int SPAN_MAX, class I, int P_MAX, class Up>
__device__ __forceinline__ A window_factors_for(const ploss_region_problem &p, const Halo &HL, const int *s_lab,
                                                int zi, bool valid, int lz, int64_t h, int64_t wc, int64_t H,
                                                int64_t W, const Up &upstream, A (&a)[P_MAX])
{
    if (p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE)
        return window_factors<A, SPAN_MAX, true, I>(HL, s_lab, zi, valid, lz, h, wc, H, W,
                                                    valid ? upstream(h, wc) : A(1), upstream, a);
    return window_factors<A, SPAN_MAX, false, I>(HL, s_lab, zi, valid, lz, h, wc, H, W, A(1), upstream, a);
}

/* The loss: the 'none' map, or this block's partial sum and the last block's total. */
template <class A>
__device__ __forceinline__ void window_loss_out(const ploss_region_problem &p, const Work &w, bool mine, int64_t n,
                                                int64_t h, int64_t wc, A loss, unsigned long long pairs)
{
    if (p.pass == PLOSS_PASS_BACKWARD)
        return;
    if (p.reduction == PLOSS_REDUCTION_NONE) {
        if (mine)
            store_dyn(p.loss, p.loss_dtype, n * p.l_sg + h * p.l_ss[0] + wc * p.l_ss[1], (double)loss);
    } else {
        store_reduced_loss<THREADS>(p, loss, w.partial, w.ticket, (double)pairs);
    }
}

/* K: the window side, or 0 for p.kernel_size (f64, a checking dtype: one kernel for every
 * side, its inner products in local memory, instead of seven that were most of the file's
 * machine code). */
template <class A, int K>
__global__ void __launch_bounds__(THREADS, (MAIN_BLOCKS<K, A>))
    window_main(const ploss_region_problem p, Src src, int cc, Work w)
{
    const Halo HL(K > 0 ? K : p.kernel_size);
    constexpr int P_MAX = Halo(K > 0 ? K : PLOSS_AFFINITY_MAX_KERNEL).P;
    extern __shared__ __align__(16) unsigned char smem[];
    A *s_x = (A *)smem;
    int *s_lab = (int *)(s_x + (size_t)cc * HL.SIZE);

    const int64_t H = p.sshape[0], W = p.sshape[1], C = p.C;
    const WindowTile tl(p, HL);
    const int64_t n = tl.n, h0 = tl.h0, w0 = tl.w0, h = tl.h, wc = tl.wc;
    const int zi = tl.zi;
    const bool mine = h < H && wc < W;
    stage_labels(p, w, HL, n, h0, w0, s_lab);
    const bool one = C <= cc; /* every class in one chunk: the logits are read once */
    /* chunk [c0, c0 + kc) of the logits (0 at pixels outside the image or ignored),
     * LOAD_BATCH per thread at a time */
    const auto load_chunk = [&](int64_t c0, int kc) {
        const int n_el = kc * HL.SIZE;
        with_storage<A>(src.dt, [&](auto tag) {
            using T = decltype(tag);
            const T *xn = (const T *)src.x + n * src.sn;
            for (int i0 = threadIdx.x; i0 < n_el; i0 += LOAD_BATCH * THREADS) {
                A v[LOAD_BATCH];
#pragma unroll
                for (int u = 0; u < LOAD_BATCH; ++u) {
                    const int i = i0 + u * THREADS, j = i % HL.SIZE;
                    const int64_t at =
                        (c0 + i / HL.SIZE) * src.sc + (h0 + j / HL.W) * src.sh + (w0 + j % HL.W) * src.sw;
                    v[u] = i < n_el && s_lab[j] >= 0 ? (A)to_acc(xn[at]) : A(0);
                }
#pragma unroll
                for (int u = 0; u < LOAD_BATCH; ++u)
                    if (i0 + u * THREADS < n_el)
                        s_x[i0 + u * THREADS] = v[u];
            }
        });
        __syncthreads();
    };

    const int lz = s_lab[zi];
    const bool valid = mine && lz >= 0;
    A a[P_MAX]; /* the inner products, then the gradient's factors */
#pragma unroll
    for (int j = 0; j < HL.P; ++j)
        a[j] = A(0);
    for (int64_t c0 = 0; c0 < C; c0 += cc) {
        const int kc = (int)(C - c0 < cc ? C - c0 : cc);
        if (c0 > 0)
            __syncthreads(); /* the previous chunk is no longer read */
        load_chunk(c0, kc);
        if (!valid)
            continue;
        for (int c = 0; c < kc; ++c) {
            const A *xc = s_x + c * HL.SIZE + zi;
            const A xz = xc[0];
#pragma unroll
            for (int j = 0; j < HL.P; ++j)
                a[j] += xz * xc[(j / HL.SPAN - HL.R) * HL.W + j % HL.SPAN - HL.R];
        }
    }

    /* ℓ_p and the factors */
    const auto upstream = [&](int64_t hh, int64_t ww) {
        return (A)upstream_element(p.grad_loss, p.gl_dtype, n * p.gl_sg + hh * p.gl_ss[0] + ww * p.gl_ss[1]);
    };
    const unsigned long long pairs = *w.count;
    const double base = window_base(p, pairs);
    const A loss = window_factors_for<A, Halo(K > 0 ? K : PLOSS_AFFINITY_MAX_KERNEL).SPAN, int64_t>(
        p, HL, s_lab, zi, valid, lz, h, wc, H, W, upstream, a);
    window_loss_out(p, w, mine, n, h, wc, loss, pairs);
    if (p.pass == PLOSS_PASS_FORWARD)
        return;

    /* the gradient, class by class */
    const A bw = (A)base;
    const int64_t gz = n * p.g_sn + h * p.g_ss[0] + wc * p.g_ss[1];
    for (int64_t c0 = 0; c0 < C; c0 += cc) {
        const int kc = (int)(C - c0 < cc ? C - c0 : cc);
        if (!one) {
            __syncthreads();
            load_chunk(c0, kc);
        }
        if (!mine)
            continue;
        for (int c = 0; c < kc; ++c) {
            const A *xc = s_x + c * HL.SIZE + zi;
            A g = 0;
#pragma unroll
            for (int j = 0; j < HL.P; ++j)
                g += a[j] * xc[(j / HL.SPAN - HL.R) * HL.W + j % HL.SPAN - HL.R];
            with_storage<A>(p.x_dtype, [&](auto tag) { /* the gradient has the input's dtype */
                using T = decltype(tag);
                ((T *)p.grad)[gz + (c0 + c) * p.g_sc] = from_acc<T>(bw * g);
            });
        }
    }
}

/* window_main's fast form for fp32 accumulation, k = 3 and at most 4·CV classes: the tile's
 * logits in shared memory pixel-major (a pixel's classes, zero-padded to 4·CV, at a stride of
 * SX floats, SX / 4 odd so that the 16-byte loads of eight consecutive pixels fall in distinct
 * banks), so that an inner product or a gradient step takes one 16-byte load per four classes
 * instead of one 4-byte load per class; the classes of a thread's own pixel and its gradient
 * are held in registers.  Each inner product and each gradient element adds the same terms in
 * the same order as window_main (the padding adds exact zeros): the results are bitwise
 * window_main's. */
constexpr int VEC_K = 3, VEC_MAX_CV = 8;
template <int CV> constexpr int VEC_SX = (CV % 2 == 1) ? 4 * CV : 4 * CV + 4;
template <int CV> constexpr size_t vec_smem() { return (size_t)Halo(VEC_K).SIZE * (VEC_SX<CV> * 4 + 4); }
static_assert(vec_smem<VEC_MAX_CV>() <= SMEM_BUDGET, "the widest pixel-major tile within the shared-memory budget");

/* Four resident blocks per SM up to 20 classes (64 registers, a few values spilled to L1:
 * faster than three blocks without spills), else two. */
template <int CV>
__global__ void __launch_bounds__(THREADS, (CV <= 5 ? 4 : 2)) window_main_vec(const ploss_region_problem p, Src src, Work w)
{
    using A = float;
    constexpr Halo HL(VEC_K);
    constexpr int SX = VEC_SX<CV>, CP = 4 * CV;
    extern __shared__ __align__(16) unsigned char smem[];
    A *s_x = (A *)smem;
    int *s_lab = (int *)(s_x + (size_t)SX * HL.SIZE);

    const int64_t H = p.sshape[0], W = p.sshape[1], C = p.C;
    const WindowTile tl(p, HL);
    const int64_t n = tl.n, h0 = tl.h0, w0 = tl.w0, h = tl.h, wc = tl.wc;
    const int zi = tl.zi;
    const bool mine = h < H && wc < W;
    stage_labels(p, w, HL, n, h0, w0, s_lab);
    /* the logits: a thread takes halo pixels (consecutive across a warp: each class's loads
     * coalesced), all CP classes of one in flight at once (0 at pixels outside the image or
     * ignored, and for the padding classes), then stores them as CV 16-byte pieces */
    with_storage<A>(src.dt, [&](auto tag) {
        using T = decltype(tag);
        const T *xn = (const T *)src.x + n * src.sn;
        for (int j = threadIdx.x; j < HL.SIZE; j += THREADS) {
            const bool ok = s_lab[j] >= 0; /* inside the image and not ignored */
            int64_t at = ok ? (h0 + j / HL.W) * src.sh + (w0 + j % HL.W) * src.sw : 0; /* an offset, not a
                                                                  pointer: none is formed outside the input */
            float e[CP];
#pragma unroll
            for (int c = 0; c < CP; ++c, at += src.sc)
                e[c] = ok && c < C ? to_acc(xn[at]) : 0.0f;
#pragma unroll
            for (int v = 0; v < CV; ++v)
                *(float4 *)(s_x + j * SX + 4 * v) = make_float4(e[4 * v], e[4 * v + 1], e[4 * v + 2], e[4 * v + 3]);
        }
    });
    __syncthreads();

    const int lz = s_lab[zi];
    const bool valid = mine && lz >= 0;
    A a[HL.P]; /* the inner products, then the gradient's factors */
    {
        float xz[CP];
#pragma unroll
        for (int v = 0; v < CV; ++v) {
            const float4 q = *(const float4 *)(s_x + zi * SX + 4 * v);
            xz[4 * v] = q.x, xz[4 * v + 1] = q.y, xz[4 * v + 2] = q.z, xz[4 * v + 3] = q.w;
        }
#pragma unroll
        for (int j = 0; j < HL.P; ++j) {
            const A *xq = s_x + (zi + (j / HL.SPAN - HL.R) * HL.W + j % HL.SPAN - HL.R) * SX;
            A acc = 0;
#pragma unroll
            for (int v = 0; v < CV; ++v) {
                const float4 q = *(const float4 *)(xq + 4 * v);
                acc += xz[4 * v] * q.x;
                acc += xz[4 * v + 1] * q.y;
                acc += xz[4 * v + 2] * q.z;
                acc += xz[4 * v + 3] * q.w;
            }
            a[j] = acc; /* window_factors zeroes the partners of an invalid pixel */
        }
    }

    /* ℓ_p and the factors */
    const auto upstream = [&](int64_t hh, int64_t ww) {
        return (A)upstream_element(p.grad_loss, p.gl_dtype, n * p.gl_sg + hh * p.gl_ss[0] + ww * p.gl_ss[1]);
    };
    const unsigned long long pairs = *w.count;
    const double base = window_base(p, pairs);
    /* the image's sides below 2^30 (launch_vec): the window counts in int */
    const A loss = window_factors_for<A, HL.SPAN, int>(p, HL, s_lab, zi, valid, lz, h, wc, H, W, upstream, a);
    window_loss_out(p, w, mine, n, h, wc, loss, pairs);
    if (p.pass == PLOSS_PASS_FORWARD || !mine)
        return;

    /* the gradient: every class at once, one 16-byte load per partner and four classes */
    float g[CP];
#pragma unroll
    for (int c = 0; c < CP; ++c)
        g[c] = 0.0f;
#pragma unroll
    for (int j = 0; j < HL.P; ++j) {
        const A *xq = s_x + (zi + (j / HL.SPAN - HL.R) * HL.W + j % HL.SPAN - HL.R) * SX;
#pragma unroll
        for (int v = 0; v < CV; ++v) {
            const float4 q = *(const float4 *)(xq + 4 * v);
            g[4 * v] += a[j] * q.x;
            g[4 * v + 1] += a[j] * q.y;
            g[4 * v + 2] += a[j] * q.z;
            g[4 * v + 3] += a[j] * q.w;
        }
    }
    const A bw = (A)base;
    const int64_t gz = n * p.g_sn + h * p.g_ss[0] + wc * p.g_ss[1];
    with_storage<A>(p.x_dtype, [&](auto tag) { /* the gradient has the input's dtype */
        using T = decltype(tag);
#pragma unroll
        for (int c = 0; c < CP; ++c)
            if (c < C)
                ((T *)p.grad)[gz + c * p.g_sc] = from_acc<T>(bw * g[c]);
    });
}

template <int CV> ploss_status launch_vec_cv(const ploss_region_problem *p, Src src, int64_t blocks, Work w,
                                             cudaStream_t stream)
{
    const size_t smem = vec_smem<CV>();
    cudaFuncSetAttribute(window_main_vec<CV>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    window_main_vec<CV><<<(unsigned)blocks, THREADS, smem, stream>>>(*p, src, w);
    return check_launch("affinity loss and gradient");
}
/* window_main_vec for CV = ⌈C / 4⌉ rounded up to an instantiated width, its status in st;
 * false where it does not apply (k ≠ 3, more than 4·VEC_MAX_CV classes or a side of 2^30 pixels or
 * more: window_main). */
inline bool launch_vec(const ploss_region_problem *p, Src src, int64_t blocks, Work w, cudaStream_t stream,
                       ploss_status &st)
{
    if (p->kernel_size != VEC_K || p->C > 4 * VEC_MAX_CV || p->sshape[0] >= (1 << 30) || p->sshape[1] >= (1 << 30))
        return false;
    const int cv = (int)((p->C + 3) / 4);
    st = cv <= 2 ? launch_vec_cv<2>(p, src, blocks, w, stream)
       : cv <= 3 ? launch_vec_cv<3>(p, src, blocks, w, stream)
       : cv <= 4 ? launch_vec_cv<4>(p, src, blocks, w, stream)
       : cv <= 5 ? launch_vec_cv<5>(p, src, blocks, w, stream)
       : cv <= 6 ? launch_vec_cv<6>(p, src, blocks, w, stream)
                 : launch_vec_cv<8>(p, src, blocks, w, stream);
    return true;
}

template <class A, int K>
ploss_status launch_main(const ploss_region_problem *p, Src src, int64_t blocks, Work w, cudaStream_t stream)
{
    /* classes per chunk: the logits and the labels of the halo within the budget */
    const Halo hl(K > 0 ? K : p->kernel_size);
    const int64_t fit = (int64_t)((SMEM_BUDGET - hl.SIZE * 4) / (hl.SIZE * sizeof(A)));
    const int cc = (int)(p->C < fit ? p->C : fit);
    const size_t smem = (size_t)cc * hl.SIZE * sizeof(A) + hl.SIZE * 4;
    cudaFuncSetAttribute(window_main<A, K>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    window_main<A, K><<<(unsigned)blocks, THREADS, smem, stream>>>(*p, src, cc, w);
    return check_launch("affinity loss and gradient");
}

template <class T, class TI> ploss_status run(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    using A = acc_t<T>;
    const cudaStream_t stream = stream_of(ctx);
    const int64_t H = p->sshape[0], W = p->sshape[1];
    if (p->kernel_size < 1 || p->kernel_size > PLOSS_AFFINITY_MAX_KERNEL)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "kernel_size: %d outside [1, %d]", p->kernel_size,
                           PLOSS_AFFINITY_MAX_KERNEL);
    const int64_t blocks = p->N * ((H + TH - 1) / TH) * ((W + TW - 1) / TW);
    if (blocks > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "input: %lld tiles exceed the CUDA grid", (long long)blocks);
    Work w;
    ploss_status st = window_workspace(ctx, *p, blocks, sizeof(T), w);
    if (st)
        return st;
    window_prep<T, TI><<<(unsigned)blocks, THREADS, 0, stream>>>(*p, ctx->error_slot, w);
    if ((st = check_launch("affinity labels")))
        return st;

    Src src = {p->x, p->x_dtype, p->x_sn, p->x_sc, p->x_ss[0], p->x_ss[1]};
    if (w.copy)
        src = {w.copy, p->x_dtype, p->C * p->S, p->S, W, 1};
    if constexpr (sizeof(A) == 8) {
        return launch_main<A, 0>(p, src, blocks, w, stream);
    } else {
        if (launch_vec(p, src, blocks, w, stream, st))
            return st;
        switch (p->kernel_size) {
        case 1: return launch_main<A, 1>(p, src, blocks, w, stream);
        case 2: return launch_main<A, 2>(p, src, blocks, w, stream);
        case 3: return launch_main<A, 3>(p, src, blocks, w, stream);
        case 4: return launch_main<A, 4>(p, src, blocks, w, stream);
        case 5: return launch_main<A, 5>(p, src, blocks, w, stream);
        case 6: return launch_main<A, 6>(p, src, blocks, w, stream);
        default: return launch_main<A, 7>(p, src, blocks, w, stream);
        }
    }
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
