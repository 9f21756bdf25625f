/*
 * dice.cu — CUDA backend of the soft Dice losses (soft_dice, binary; generalized_soft_dice
 * per sample and batch_soft_dice over the batch, per class; formulas in
 * core/engines/region.h and docs/losses.md).
 * fp32 accumulation for f32/f16/bf16 input, f64 for f64.
 *
 * Inputs of at most kOneLaunchValues values: one cooperative kernel (every block resident,
 * a grid barrier on the context's arrival ticket between its phases), each block walking
 * tiles b, b + G, … (a tile: TILE consecutive pixels of one sample, PPT per thread in runs
 * of one 16-byte vector, pixel_of below):
 *  1. sums: a thread issues the loads of its pixels' labels (or binary targets) with those
 *     of their first class's logits, then class by class their logits (the next class's
 *     loads in flight while one is summed), and the block forms the tile's partial
 *     A = Σ s·o, B = Σ (s^p + o), R = Σ o per class (warp shuffles, then the warps in order,
 *     one barrier per CLASS_CHUNK classes); where the block's tiles × classes are at most
 *     kKeptClassTiles (float accumulators), the logits stay in its shared memory for step 3;
 *  2. at a grid barrier, the block that arrives last adds, a warp per (sample, class), its
 *     tiles' partials in tile order (double; into its shared memory where they fit) and
 *     forms the groups in a fixed order: the class weights, num, den, the loss and the
 *     gradient's coefficients; then it releases the others;
 *  3. (backward) the same tiles in reverse order (the end of the input, read last by the
 *     sums, is still in L2), labels read once per pixel, the gradient of its C classes from
 *     the kept logits or read again.
 * Larger inputs: the same steps in two kernels, dice_sums (blocks of a group of a sample's
 * tiles; the last block of a sample to finish — a fence and an arrival counter — adds the
 * sample's partials, the last sample forms the groups) and dice_grad (a block per tile, in
 * reverse order).  Both give the same bits: the partials are per tile whatever the grid.
 * Spatial dims merged to one (sdim ≤ 1, the usual case) give a pixel's offset as s·stride
 * (FLAT); other views take the general strided offset.  Contiguous runs are read and
 * written as 16-byte vectors, others element by element; all map pixels to threads and
 * reduce in the same way, so a strided view gives the bits of its contiguous copy.
 * No float atomics (the partials are per tile, whatever the grid): the results are bitwise
 * the same on every run and every card.  Invalid labels are reported through the context's
 * error slot and their pixels treated as ignored.
 */
#include <type_traits>

#include "region_common.cuh"

namespace ploss_cuda {
namespace {
using namespace region;

constexpr int THREADS = 256, WARPS = THREADS / 32;
constexpr int PPT = 8;                 /* pixels per thread */
constexpr int TILE = THREADS * PPT;    /* pixels of one sample per block */
constexpr int CLASS_CHUNK = 32;        /* classes whose warp partials share one barrier */
constexpr int OUTSIDE = -2;            /* a thread's pixel slot past the sample's end */
constexpr int64_t kOneLaunchValues = 8 << 20; /* inputs of at most this many values: one launch */
constexpr int kKeptClassTiles = 4; /* one launch: a block keeps up to this many tiles × classes of logits (float accumulators) */
constexpr int64_t kSharedSums = 256; /* one launch: at most this many (sample, class) sums in shared memory */

/* A thread's pixels come in runs of V = vec16<T>::N consecutive ones (one 16-byte vector
 * of a contiguous input): slot i of thread t in tile `tile` is pixel
 * tile·TILE + (i / V)·THREADS·V + t·V + i % V.  Every layout uses this map, so a strided
 * view is summed in the same order as its contiguous copy and gives the same bits. */
template <class T> constexpr int run_of()
{
    static_assert(PPT % vec16<T>::N == 0, "a thread's pixels are whole runs");
    return vec16<T>::N;
}
template <class T> __device__ __forceinline__ int64_t pixel_of(int64_t tile, int i)
{
    constexpr int V = run_of<T>();
    return tile * TILE + (int64_t)(i / V) * (THREADS * V) + (int64_t)threadIdx.x * V + i % V;
}

/* s^e: the exponents 1 and 2 inline (EK = 1, 2); any other (EK = 0) through one
 * out-of-line copy of pow (inlined at each of a thread's PPT pixels it would multiply the
 * build's code for a rare case). */
template <class A> __device__ __noinline__ A power_general(A s, A e) { return m_pow(s, e); }
template <int EK, class A> __device__ __forceinline__ A power(A s, A e)
{
    return EK == 1 ? s : EK == 2 ? s * s : power_general(s, e);
}
/* f(EK) with EK the compile-time form of the exponent e: the exponent is uniform over the
 * grid, so the class loops branch on it once per class, not once per element. */
template <class A, class F> __device__ __forceinline__ void with_exponent(A e, F &&f)
{
    if (e == A(1))
        f(std::integral_constant<int, 1>{});
    else if (e == A(2))
        f(std::integral_constant<int, 2>{});
    else
        f(std::integral_constant<int, 0>{});
}
/* f32: e^v and 1/v through the MUFU approximations (a few ulp: the sums and gradient stay
 * well inside the f32 tolerances, and the kernels off the instruction roofline; e^v below
 * 2^-126 flushes to 0, where σ is 0 or 1 to f32 precision anyway); f64: the libdevice exp
 * and an IEEE division (a checking dtype). */
__device__ __forceinline__ float fast_exp(float v) { return exp_ftz(v); }
__device__ __forceinline__ double fast_exp(double v) { return exp(v); }
__device__ __forceinline__ float fast_rcp(float v) { return __fdividef(1.0f, v); }
__device__ __forceinline__ double fast_rcp(double v) { return 1.0 / v; }

/* σ(v) = 1/(1 + e^−v) (e^−v = ∞ gives 0). */
template <class A> __device__ __forceinline__ A sigmoid(A v) { return fast_rcp(A(1) + fast_exp(-v)); }

/* σ(v) and 1 − σ(v) from one exponential of −|v| (never overflows), both without
 * cancellation. */
template <class A> __device__ __forceinline__ void sigmoid2(A v, A &s, A &s1)
{
    const A e = fast_exp(-fabs(v)), r = fast_rcp(A(1) + e);
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
 * stride sn and spatial strides ss: FLAT, a base and the stride (two registers); otherwise
 * one offset per pixel. */
template <class T, bool FLAT> struct Offsets {
    int64_t at[PPT];
    __device__ __forceinline__ Offsets(const ploss_region_problem &p, int64_t sn, const int64_t *ss, int64_t n,
                                       int64_t tile)
    {
        /* not unrolled: the general offset (a division per dimension) inlined at each pixel
         * was most of the file's machine code, for views that are rare */
#pragma unroll 1
        for (int i = 0; i < PPT; ++i) {
            const int64_t s = pixel_of<T>(tile, i);
            at[i] = s < p.S ? n * sn + spatial<false>(p, ss, s) : 0;
        }
    }
    __device__ __forceinline__ int64_t operator[](int i) const { return at[i]; }
    __device__ __forceinline__ int64_t run(int j) const { return at[j * run_of<T>()]; }
};
template <class T> struct Offsets<T, true> {
    int64_t base, stride;
    __device__ __forceinline__ Offsets(const ploss_region_problem &p, int64_t sn, const int64_t *ss, int64_t n,
                                       int64_t tile)
    {
        stride = p.sdim ? ss[0] : 0;
        base = n * sn + pixel_of<T>(tile, 0) * stride;
    }
    __device__ __forceinline__ int64_t operator[](int i) const
    {
        constexpr int V = run_of<T>();
        return base + ((int64_t)(i / V) * (THREADS * V) + i % V) * stride;
    }
    /* the first pixel of run j where the stride is 1 (vector_runs): a constant offset */
    __device__ __forceinline__ int64_t run(int j) const { return base + (int64_t)j * (THREADS * run_of<T>()); }
};

/* Whether a tensor's runs of V pixels are whole aligned 16-byte vectors: spatial stride 1
 * (FLAT), sample and class strides multiples of V, a 16-byte aligned base. */
template <class T, bool FLAT>
__host__ __device__ inline bool vector_runs(const ploss_region_problem &p, const void *base, int64_t sn, int64_t sc,
                                            const int64_t *ss)
{
    constexpr int V = run_of<T>();
    return FLAT && p.sdim == 1 && ss[0] == 1 && sn % V == 0 && sc % V == 0 && (uintptr_t)base % 16 == 0;
}

/* Class c's values at a thread's pixels (0 past the sample's end): whole runs as one
 * 16-byte load each when `vec`, the rest element by element; every load issued before any
 * value is used. */
template <class T, class A, bool FLAT>
__device__ __forceinline__ void load_class(const T *x, const Offsets<T, FLAT> &xo, int64_t c_off, bool vec,
                                           const int (&lab)[PPT], A (&v)[PPT])
{
    constexpr int V = run_of<T>();
#pragma unroll
    for (int j = 0; j < PPT / V; ++j) {
        if (vec && lab[j * V + V - 1] != OUTSIDE) {
            const uint4 u = *(const uint4 *)(x + xo.run(j) + c_off); /* not __ldg: x may be the gradient */
#pragma unroll
            for (int k = 0; k < V; ++k)
                v[j * V + k] = (A)vec16<T>::get(u, k);
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k)
                v[j * V + k] = lab[j * V + k] == OUTSIDE ? A(0) : (A)to_acc(x[xo[j * V + k] + c_off]);
        }
    }
}

/* Class c's gradient at a thread's pixels, stored like load_class reads. */
template <class T, class A, bool FLAT>
__device__ __forceinline__ void store_class(T *g, const Offsets<T, FLAT> &go, int64_t c_off, bool vec,
                                            const int (&lab)[PPT], const A (&d)[PPT])
{
    constexpr int V = run_of<T>();
#pragma unroll
    for (int j = 0; j < PPT / V; ++j) {
        if (vec && lab[j * V + V - 1] != OUTSIDE) {
            uint4 u = make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int k = 0; k < V; ++k)
                vec16<T>::set(u, k, d[j * V + k]);
            *(uint4 *)(g + go.run(j) + c_off) = u;
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k)
                if (lab[j * V + k] != OUTSIDE)
                    g[go[j * V + k] + c_off] = from_acc<T>(d[j * V + k]);
        }
    }
}

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
    unsigned *arrived;  /* two-kernel path: [n] tiles of sample n done, [N] samples done (zeroed) */
};

/* The label (target) offsets of a thread's pixels: general views (not FLAT) take them from
 * Offsets, formed once for whichever dtype's loads follow (inlined per pixel and per dtype
 * they were most of those kernels' machine code); FLAT ones from the pixel index. */
template <class T, bool FLAT> struct LabelOffsets {
    Offsets<T, FLAT> at;
    int64_t n, tile;
    __device__ __forceinline__ LabelOffsets(const ploss_region_problem &p, int64_t n_, int64_t tile_)
        : at(p, p.t_sn, p.t_ss, n_, tile_), n(n_), tile(tile_)
    {
    }
    /* whether pixel i lies in the sample (lab: load_pixels' classes, OUTSIDE past the end),
     * for the binary targets' loads */
    __device__ __forceinline__ bool inside(const ploss_region_problem &p, const int (&lab)[PPT], int i) const
    {
        if constexpr (FLAT)
            return pixel_of<T>(tile, i) < p.S;
        else
            return lab[i] != OUTSIDE;
    }
    __device__ __forceinline__ int64_t operator()(const ploss_region_problem &p, int i) const
    {
        if constexpr (FLAT)
            return n * p.t_sn + spatial<true>(p, p.t_ss, pixel_of<T>(tile, i));
        else
            return at[i];
    }
};

/* The V = run_of<T>() values of U at src (a run's first pixel, 16 bytes aligned) into
 * out[0, V): 16-, 8- or 4-byte vectors as their size allows, else element by element. */
template <class T, class U> __device__ __forceinline__ void load_run(const U *src, U *out)
{
    constexpr int V = run_of<T>(), BYTES = V * (int)sizeof(U);
    using W = std::conditional_t<BYTES % 16 == 0, uint4, std::conditional_t<BYTES % 8 == 0, uint2, uint32_t>>;
    if constexpr (BYTES % sizeof(W) == 0 && sizeof(W) >= sizeof(U)) {
        W w[BYTES / sizeof(W)];
#pragma unroll
        for (int k = 0; k < BYTES / (int)sizeof(W); ++k)
            w[k] = ((const W *)src)[k];
        memcpy(out, w, BYTES);
    } else {
#pragma unroll
        for (int k = 0; k < V; ++k)
            out[k] = src[k];
    }
}

/* The target's values (U) at a thread's pixels into raw (U(0) outside the sample): whole
 * runs inside the sample as vectors where the target's layout allows (vector_runs), the
 * rest element by element; all loads issued before any is used. */
template <class T, class U, bool FLAT>
__device__ __forceinline__ void load_target_values(const ploss_region_problem &p, const LabelOffsets<T, FLAT> &to,
                                                   const int (&lab)[PPT], U (&raw)[PPT])
{
    constexpr int V = run_of<T>();
    const bool vec = vector_runs<T, FLAT>(p, p.t, p.t_sn, 0, p.t_ss);
#pragma unroll
    for (int j = 0; j < PPT / V; ++j) {
        if (vec && to.inside(p, lab, j * V + V - 1)) {
            load_run<T, U>((const U *)p.t + to(p, j * V), raw + j * V);
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k)
                raw[j * V + k] = to.inside(p, lab, j * V + k) ? ((const U *)p.t)[to(p, j * V + k)] : U(0);
        }
    }
}

/* The binary targets of a thread's pixels as U, all loads issued before any is used. */
template <class T, class U, class A, bool FLAT>
__device__ __forceinline__ void load_targets(const ploss_region_problem &p, const LabelOffsets<T, FLAT> &to,
                                             const int (&lab)[PPT], A (&tgt)[PPT])
{
    U raw[PPT];
    load_target_values<T, U, FLAT>(p, to, lab, raw);
#pragma unroll
    for (int i = 0; i < PPT; ++i)
        tgt[i] = (A)to_acc(raw[i]);
}

/* The classes of a thread's pixels (lab[i] = OUTSIDE past the sample's end is kept): -1
 * ignored; an invalid label is reported and its pixel ignored. */
template <class T, class TI, bool FLAT>
__device__ __forceinline__ void load_labels(const ploss_region_problem &p, const LabelOffsets<T, FLAT> &to,
                                            int64_t *error_slot, int (&lab)[PPT])
{
    TI y[PPT];
    load_target_values<T, TI, FLAT>(p, to, lab, y);
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

/* Which of a thread's pixels of tile `tile` lie in the sample: lab[i] = 0 inside, OUTSIDE
 * past its end (all load_class needs, so the logits' loads can be issued before the
 * labels'), and tgt[i] = 0. */
template <class T, class A>
__device__ __forceinline__ void tile_pixels(const ploss_region_problem &p, int64_t tile, int (&lab)[PPT], A (&tgt)[PPT])
{
#pragma unroll
    for (int i = 0; i < PPT; ++i) {
        lab[i] = pixel_of<T>(tile, i) < p.S ? 0 : OUTSIDE;
        tgt[i] = A(0);
    }
}

/* A thread's pixels of tile `tile` of sample n (lab and tgt from tile_pixels): the class (-1
 * ignored, OUTSIDE past the end; 0 for binary) and, binary, the float target.  Every load
 * is issued before any value is looked at (one memory latency per thread, not one per
 * pixel).  The target's dtype is read at run time (once per thread: the kernels are not
 * compiled per label type). */
template <class T, class A, bool BINARY, bool FLAT>
__device__ __forceinline__ void load_pixels(const ploss_region_problem &p, int64_t n, int64_t tile, int64_t *error_slot,
                                            int (&lab)[PPT], A (&tgt)[PPT])
{
    const LabelOffsets<T, FLAT> to(p, n, tile);
    if constexpr (BINARY) {
        switch (p.t_dtype) {
        case PLOSS_F32: load_targets<T, float, A, FLAT>(p, to, lab, tgt); break;
        case PLOSS_F16: load_targets<T, __half, A, FLAT>(p, to, lab, tgt); break;
        case PLOSS_BF16: load_targets<T, __nv_bfloat16, A, FLAT>(p, to, lab, tgt); break;
        default: load_targets<T, double, A, FLAT>(p, to, lab, tgt); break;
        }
    } else if (p.t_dtype == PLOSS_I32) {
        load_labels<T, int32_t, FLAT>(p, to, error_slot, lab);
    } else {
        load_labels<T, int64_t, FLAT>(p, to, error_slot, lab);
    }
}

/* A thread's pixels of tile `tile` of sample n (load_pixels; lab and tgt from tile_pixels)
 * and, with `logits`, class 0's logits into v (load_class, which needs only tile_pixels'
 * lab), the logits' loads issued with the labels' (one memory latency a tile, not two). */
template <class T, class A, bool BINARY, bool FLAT>
__device__ __forceinline__ void load_tile(const ploss_region_problem &p, int64_t n, int64_t tile, int64_t *error_slot,
                                          const T *x, const Offsets<T, FLAT> &xo, bool vec, int (&lab)[PPT],
                                          A (&tgt)[PPT], A (&v)[PPT], bool logits = true)
{
    if (logits)
        load_class<T, A, FLAT>(x, xo, 0, vec, lab, v);
    load_pixels<T, A, BINARY, FLAT>(p, n, tile, error_slot, lab, tgt);
}

/* f(c, values) for each class c in turn, v holding class 0's values (load_tile), class
 * c + 1's loaded while f works on class c's (a copy f may overwrite). */
template <class T, class A, bool FLAT, class F>
__device__ __forceinline__ void for_each_class(const ploss_region_problem &p, const T *x, const Offsets<T, FLAT> &xo,
                                               bool vec, const int (&lab)[PPT], A (&v)[PPT], F &&f)
{
    const int C = (int)p.C;
    for (int c = 0; c < C; ++c) {
        A cur[PPT];
#pragma unroll
        for (int i = 0; i < PPT; ++i)
            cur[i] = v[i];
        if (c + 1 < C)
            load_class<T, A, FLAT>(x, xo, (c + 1) * p.x_sc, vec, lab, v);
        f(c, cur);
    }
}

/* Whether each of a thread's pixels is in the sums and has a gradient: inside the sample,
 * and not an ignored pixel left out of the denominator. */
__device__ __forceinline__ void counted_pixels(const ploss_region_problem &p, const int (&lab)[PPT],
                                               bool (&counted)[PPT])
{
#pragma unroll
    for (int i = 0; i < PPT; ++i)
        counted[i] = lab[i] != OUTSIDE && (lab[i] >= 0 || !p.mask_ignored);
}

/* The class weight of class c in group g (before Sudre's absent-class substitution). */
__device__ __forceinline__ double class_weight(const ploss_region_problem &p, double rc, int64_t c)
{
    if (p.sudre)
        return rc > 0.0 ? 1.0 / (rc * rc) : -1.0; /* absent: the largest weight, below */
    return p.w ? load_dyn(p.w, p.w_dtype, c * p.w_s) : 1.0;
}

/* The (sample, class) sums abr (add_tiles): in the last block's shared memory (SHARED, the
 * one-launch kernel with few of them) or in global memory, written by other blocks (read
 * past the L1). */
template <bool SHARED> __device__ __forceinline__ double abr_at(const double *abr, int64_t i)
{
    return SHARED ? abr[i] : __ldcg(abr + i);
}

/* R of class c over the samples of group g. */
template <bool SHARED>
__device__ __forceinline__ double group_r(const ploss_region_problem &p, const double *abr, int64_t g, int64_t c)
{
    const int64_t n0 = p.per_image ? g : 0, n1 = p.per_image ? g + 1 : p.N;
    double rc = 0.0;
    for (int64_t n = n0; n < n1; ++n)
        rc += abr_at<SHARED>(abr, 3 * (n * p.C + c) + 2);
    return rc;
}

/* The last block: per group (one thread each) the weights, num, den, loss and the
 * gradient's coefficients from the sums abr; then the reduced loss in group order. */
template <bool SHARED, class A> __device__ void finish(const ploss_region_problem &p, const Work<A> &w, const double *abr)
{
    const int64_t C = p.C, G = ploss_region_groups(&p);
    for (int64_t g = threadIdx.x; g < G; g += THREADS) {
        const int64_t n0 = p.per_image ? g : 0, n1 = p.per_image ? g + 1 : p.N;
        double wmax = 0.0;
        if (p.sudre)
            for (int64_t c = 0; c < C; ++c)
                wmax = fmax(wmax, class_weight(p, group_r<SHARED>(p, abr, g, c), c));
        double a = 0.0, b = 0.0;
        for (int64_t c = 0; c < C; ++c) {
            double wc = class_weight(p, p.sudre ? group_r<SHARED>(p, abr, g, c) : 0.0, c);
            if (p.sudre && wc < 0.0)
                wc = wmax;
            for (int64_t n = n0; n < n1; ++n) {
                a += wc * abr_at<SHARED>(abr, 3 * (n * C + c));
                b += wc * abr_at<SHARED>(abr, 3 * (n * C + c) + 1);
            }
        }
        const double nm = 2.0 * a + p.smooth, dn = b + p.smooth, loss = 1.0 - nm / dn;
        double om = p.reduction == PLOSS_REDUCTION_MEAN ? 1.0 / (double)G : 1.0;
        om *= p.pass == PLOSS_PASS_BACKWARD ? load_dyn(p.grad_loss, p.gl_dtype, g * p.gl_sg) : p.scale;
        if (p.pass != PLOSS_PASS_FORWARD) {
            for (int64_t c = 0; c < C; ++c) {
                double wc = class_weight(p, p.sudre ? group_r<SHARED>(p, abr, g, c) : 0.0, c);
                if (p.sudre && wc < 0.0)
                    wc = wmax;
                w.coef[g * C + c] = (A)(wc * om);
            }
            /* a den of 0 (the loss 0/0: smooth = 0 and every weighted sum 0, as Sudre's
             * weights of a group whose pixels are all ignored) gives a zero gradient */
            w.alpha[g] = dn != 0.0 ? (A)(nm * p.exponent / dn / dn) : (A)0;
            w.beta[g] = dn != 0.0 ? (A)(2.0 / dn) : (A)0;
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

/* Tile `tile` of sample n: its partial sums per class into w.partial.  Class c + 1's values
 * are loaded while class c is summed; the warps' sums of up to CLASS_CHUNK classes wait in
 * shared memory for one barrier, then thread k adds class k's in warp order.  `keep`: where
 * the tile's logits stay in shared memory for its gradient (one launch). */
template <class T, bool BINARY, bool FLAT>
__device__ __forceinline__ void tile_sums(const ploss_region_problem &p, int64_t n, int64_t tile, int64_t tiles,
                                          int64_t *error_slot, const Work<acc_t<T>> &w,
                                          Sums<acc_t<T>> (&red)[CLASS_CHUNK][WARPS], acc_t<T> *keep = nullptr)
{
    using A = acc_t<T>;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, C = (int)p.C;
    int lab[PPT];
    A tgt[PPT], v[PPT];
    tile_pixels<T>(p, tile, lab, tgt);
    const Offsets<T, FLAT> xo(p, p.x_sn, p.x_ss, n, tile);
    const bool vec = vector_runs<T, FLAT>(p, p.x, p.x_sn, p.x_sc, p.x_ss);
    const T *x = (const T *)p.x;
    load_tile<T, A, BINARY, FLAT>(p, n, tile, error_slot, x, xo, vec, lab, tgt, v);
    const A e = (A)p.exponent;
    bool counted[PPT];
    counted_pixels(p, lab, counted);
    A tgt_pow_sum = A(0); /* binary: Σ o^p over the thread's pixels */
    if (BINARY)
        with_exponent(e, [&](auto ek) {
#pragma unroll
            for (int i = 0; i < PPT; ++i)
                tgt_pow_sum += counted[i] ? power<decltype(ek)::value>(tgt[i], e) : A(0);
        });
    for_each_class<T, A, FLAT>(p, x, xo, vec, lab, v, [&](int c, const A(&cur)[PPT]) {
        if (keep) /* the values for the gradient pass, in the block's shared memory */
#pragma unroll
            for (int i = 0; i < PPT; ++i)
                keep[(c * PPT + i) * THREADS + threadIdx.x] = cur[i];
        Sums<A> acc = {0, 0, 0};
        with_exponent(e, [&](auto ek) {
            /* selects, not branches: a pixel left out (whose logit may be NaN) adds 0 */
#pragma unroll
            for (int i = 0; i < PPT; ++i) {
                const A sg = sigmoid(cur[i]);
                const A ps = power<decltype(ek)::value>(sg, e);
                acc.b += counted[i] ? ps : A(0);
                if (BINARY) {
                    acc.a += counted[i] ? sg * tgt[i] : A(0);
                    acc.r += counted[i] ? tgt[i] : A(0);
                } else if (lab[i] == c) { /* a label equal to c is counted */
                    acc.a += sg;
                    acc.r += A(1);
                }
            }
        });
        acc.b += BINARY ? tgt_pow_sum : acc.r; /* Σ o^p: o^p = o for one-hot o */
        acc.a = warp_sum(acc.a);
        acc.b = warp_sum(acc.b);
        acc.r = warp_sum(acc.r);
        const int k = c % CLASS_CHUNK;
        if (lane == 0)
            red[k][warp] = acc;
        if (k == CLASS_CHUNK - 1 || c == C - 1) {
            __syncthreads();
            if (threadIdx.x <= k) {
                const int cc = c - k + threadIdx.x;
                Sums<A> t = red[threadIdx.x][0];
                for (int q = 1; q < WARPS; ++q) {
                    t.a += red[threadIdx.x][q].a;
                    t.b += red[threadIdx.x][q].b;
                    t.r += red[threadIdx.x][q].r;
                }
                w.partial[(n * p.C + cc) * tiles + tile] = t;
            }
            __syncthreads(); /* red is read before the next chunk writes it */
        }
    });
}

/* One warp: the partials of (sample, class) q = n·C + c over its tiles, lane k adding
 * tiles k, k + 32, … in order (double, four tiles' loads in flight), then the lanes; into
 * abr[3q, 3q + 3). */
template <class A> __device__ __forceinline__ void add_tiles(const Work<A> &w, int64_t q, int64_t tiles, double *abr)
{
    const int lane = threadIdx.x % 32;
    double a = 0.0, b = 0.0, r = 0.0;
#pragma unroll 4
    for (int64_t k = lane; k < tiles; k += 32) {
        const Sums<A> *part = w.partial + q * tiles + k;
        a += (double)__ldcg(&part->a);
        b += (double)__ldcg(&part->b);
        r += (double)__ldcg(&part->r);
    }
    a = warp_sum(a);
    b = warp_sum(b);
    r = warp_sum(r);
    if (lane == 0) {
        abr[3 * q] = a;
        abr[3 * q + 1] = b;
        abr[3 * q + 2] = r;
    }
}

/* The gradient of tile `tile` of sample n, class c + 1's values loaded while class c's
 * gradient is formed (or all of them from `kept`, the block's shared memory).  SAME_LAUNCH: the coefficients were written in this
 * launch (by the block that arrived last at the barrier), so they are read past the L1;
 * otherwise through it, as a kernel's input. */
template <class A, bool SAME_LAUNCH> __device__ __forceinline__ A coefficient(const A *v)
{
    return SAME_LAUNCH ? __ldcg(v) : *v;
}
template <class T, bool BINARY, bool FLAT, bool SAME_LAUNCH>
__device__ __forceinline__ void tile_grad(const ploss_region_problem &p, int64_t n, int64_t tile,
                                          const Work<acc_t<T>> &w, const acc_t<T> *kept = nullptr)
{
    using A = acc_t<T>;
    const int64_t g = p.per_image ? n : 0;
    int lab[PPT];
    A tgt[PPT], v[PPT];
    tile_pixels<T>(p, tile, lab, tgt);
    const Offsets<T, FLAT> xo(p, p.x_sn, p.x_ss, n, tile), go(p, p.g_sn, p.g_ss, n, tile);
    const bool vx = vector_runs<T, FLAT>(p, p.x, p.x_sn, p.x_sc, p.x_ss),
               vg = vector_runs<T, FLAT>(p, p.grad, p.g_sn, p.g_sc, p.g_ss);
    const T *x = (const T *)p.x;
    load_tile<T, A, BINARY, FLAT>(p, n, tile, nullptr, x, xo, vx, lab, tgt, v, !kept);
    T *grad = (T *)p.grad;
    const A e = (A)p.exponent, alpha = coefficient<A, SAME_LAUNCH>(w.alpha + g),
            beta = coefficient<A, SAME_LAUNCH>(w.beta + g);
    bool counted[PPT];
    counted_pixels(p, lab, counted);
    const auto class_grad = [&](int c, A(&d)[PPT]) { /* logits → gradient */
        /* the gradient k·(α·σ^p − β·o·σ)·(1 − σ), with k·α and k·β formed once per class */
        const A k = coefficient<A, SAME_LAUNCH>(w.coef + g * p.C + c), ka = k * alpha, kb = k * beta;
        with_exponent(e, [&](auto ek) {
#pragma unroll
            for (int i = 0; i < PPT; ++i) {
                A sg, sg1;
                sigmoid2(d[i], sg, sg1);
                const A os = BINARY ? tgt[i] * sg : lab[i] == c ? sg : A(0);
                const A gi = sg1 * (ka * power<decltype(ek)::value>(sg, e) - kb * os);
                d[i] = counted[i] ? gi : A(0); /* a select: a left-out NaN logit gives 0 */
            }
        });
        store_class<T, A, FLAT>(grad, go, c * p.g_sc, vg, lab, d);
    };
    if (kept) {
        for (int c = 0; c < (int)p.C; ++c) {
#pragma unroll
            for (int i = 0; i < PPT; ++i)
                v[i] = kept[(c * PPT + i) * THREADS + threadIdx.x];
            class_grad(c, v);
        }
    } else {
        for_each_class<T, A, FLAT>(p, x, xo, vx, lab, v, class_grad);
    }
}

/* 1. Block b: `group` consecutive tiles of one sample (b = n·⌈tiles/group⌉ + k: tiles from
 * k·group), the partial sums of each tile per class (tile_sums); the last block of a sample
 * to arrive finishes the sample, the last sample the groups.  The partials are per tile,
 * so the results do not depend on `group`. */
template <class T, bool BINARY, bool FLAT>
__global__ void __launch_bounds__(THREADS, FLAT && sizeof(acc_t<T>) == 4 ? 4 : 2)
    dice_sums(const ploss_region_problem p, int64_t tiles, int group, int64_t *error_slot, Work<acc_t<T>> w)
{
    using A = acc_t<T>;
    __shared__ Sums<A> red[CLASS_CHUNK][WARPS];
    __shared__ bool last;
    /* blocks ≤ INT32_MAX: 32-bit division */
    const unsigned groups = (unsigned)((tiles + group - 1) / group), blk = blockIdx.x;
    const int64_t n = blk / groups, first = (int64_t)(blk % groups) * group, end = min(first + group, tiles);
    const int warp = threadIdx.x / 32;
    for (int64_t tile = first; tile < end; ++tile)
        tile_sums<T, BINARY, FLAT>(p, n, tile, tiles, error_slot, w, red);

    /* the last block of sample n to arrive adds its partials, tile by tile */
    if (threadIdx.x == 0) {
        __threadfence(); /* the partials, before the arrival */
        const unsigned done = (unsigned)(end - first);
        last = atomicAdd(w.arrived + n, done) + done == (unsigned)tiles;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    for (int64_t c = warp; c < p.C; c += WARPS)
        add_tiles(w, n * p.C + c, tiles, w.abr);
    __threadfence(); /* the sample's sums, before its arrival */
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(w.arrived + p.N, 1u) == (unsigned)(p.N - 1);
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    finish<false>(p, w, w.abr);
}

/* 2. Block b: tile gridDim.x − 1 − b (reverse order). */
template <class T, bool BINARY, bool FLAT>
__global__ void __launch_bounds__(THREADS, FLAT && sizeof(acc_t<T>) == 4 ? 4 : 2)
    dice_grad(const ploss_region_problem p, int64_t tiles, Work<acc_t<T>> w)
{
    const unsigned b = gridDim.x - 1 - blockIdx.x, bt = (unsigned)tiles;
    tile_grad<T, BINARY, FLAT, false>(p, b / bt, b % bt, w);
}

/* The barrier of a cooperative launch (every block resident) on the context's arrival
 * ticket (arrival_ticket(ctx), 0 when the kernel starts), at which the block that arrives
 * last runs last_fn() (all its threads: the grid's reduction, say) before any block goes
 * on: every block adds 1 (an acquire-release add at device scope after the block's barrier
 * publishes the block's writes, as in last_block_arrives); the last one's add returns
 * gridDim.x − 1, it runs last_fn and releases the others with one add more (a release after
 * its barrier: last_fn's writes first); they wait until the ticket passes gridDim.x.  One
 * such barrier per kernel; grid_leave(ticket) at the kernel's end: every block adds 1 and
 * the last to leave sets the ticket back to 0. */
template <class Fn> __device__ __forceinline__ void grid_barrier_last(unsigned long long *ticket, Fn &&last_fn)
{
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
        cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> t(*ticket);
        last = t.fetch_add(1ull, cuda::memory_order_acq_rel) == (unsigned long long)gridDim.x - 1;
    }
    __syncthreads();
    if (last) {
        last_fn();
        __syncthreads();
        if (threadIdx.x == 0) {
            cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> t(*ticket);
            t.fetch_add(1ull, cuda::memory_order_release);
        }
    } else if (threadIdx.x == 0) {
        cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> t(*ticket);
        while (t.load(cuda::memory_order_acquire) <= (unsigned long long)gridDim.x)
            __nanosleep(32);
    }
    __syncthreads();
}
__device__ __forceinline__ void grid_leave(unsigned long long *ticket)
{
    if (threadIdx.x == 0) {
        cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> t(*ticket);
        if (t.fetch_add(1ull, cuda::memory_order_relaxed) == 2ull * gridDim.x)
            t.store(0ull, cuda::memory_order_relaxed);
    }
}

/* The one-launch kernel (file comment): block b takes tiles b, b + G, … of the N·tiles (≤ INT32_MAX,
 * 32-bit division), sample by sample. */
template <class T, bool BINARY, bool FLAT>
__global__ void __launch_bounds__(THREADS, FLAT && sizeof(acc_t<T>) == 4 ? 4 : 2)
    dice_kernel(const ploss_region_problem p, int64_t tiles, int64_t *error_slot, unsigned long long *ticket,
                Work<acc_t<T>> w)
{
    using A = acc_t<T>;
    __shared__ Sums<A> red[CLASS_CHUNK][WARPS];
    /* a block's logits from the sums to the gradient, where its tiles' classes fit (every
     * block decides alike: the grid's tiles per block rounded up) */
    constexpr int KEEP = sizeof(A) == 4 ? kKeptClassTiles : 1;
    __shared__ A kept[KEEP * PPT * THREADS];
    const unsigned total = (unsigned)(p.N * tiles), bt = (unsigned)tiles, G = gridDim.x;
    const bool keep =
        sizeof(A) == 4 && p.pass != PLOSS_PASS_FORWARD && (int64_t)((total + G - 1) / G) * p.C <= KEEP;
    for (unsigned k = blockIdx.x, j = 0; k < total; k += G, ++j)
        tile_sums<T, BINARY, FLAT>(p, k / bt, k % bt, tiles, error_slot, w, red,
                                               keep ? kept + j * p.C * PPT * THREADS : nullptr);
    /* the last block to arrive: a warp per (sample, class) adds its tiles' partials (at most
     * kOneLaunchValues / TILE of them in all), then the groups; the (sample, class) sums in
     * its shared memory where they fit */
    __shared__ double abr_s[3 * kSharedSums];
    grid_barrier_last(ticket, [&] {
        const bool shared = p.N * p.C <= kSharedSums;
        for (int64_t q = threadIdx.x / 32; q < p.N * p.C; q += WARPS)
            add_tiles(w, q, tiles, shared ? abr_s : w.abr);
        __syncthreads();
        if (shared)
            finish<true>(p, w, abr_s);
        else
            finish<false>(p, w, w.abr);
    });
    if (p.pass != PLOSS_PASS_FORWARD && blockIdx.x < total)
        for (unsigned k = blockIdx.x + (total - 1 - blockIdx.x) / G * G;; k -= G) {
            tile_grad<T, BINARY, FLAT, true>(p, k / bt, k % bt, w,
                                                         keep ? kept + (k / G) * p.C * PPT * THREADS : nullptr);
            if (k < G)
                break;
        }
    grid_leave(ticket);
}

template <class T, bool BINARY, bool FLAT> ploss_status run(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    using A = acc_t<T>;
    const cudaStream_t stream = stream_of(ctx);
    const int64_t N = p->N, C = p->C, G = ploss_region_groups(p);
    const int64_t tiles = (p->S + TILE - 1) / TILE, total = N * tiles;
    if (total > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "input: %lld pixel tiles exceed the CUDA grid", (long long)total);
    if (C > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "input: %lld classes exceed the CUDA kernels' int range", (long long)C);
    const size_t b_part = align_up((size_t)(N * C * tiles) * sizeof(Sums<A>)), b_abr = align_up((size_t)(3 * N * C) * 8),
                 b_loss = align_up((size_t)G * 8), b_coef = align_up((size_t)(G * C) * sizeof(A)),
                 b_g = align_up((size_t)G * sizeof(A));
    /* Small inputs in one cooperative launch (every block resident: the driver refuses a
     * grid that could not all be, rather than let the barriers wait forever), with as many
     * blocks as are resident at once: there the launches and the last-block chains of two
     * kernels are most of the time.  Larger ones in the sums and gradient kernels, whose
     * blocks are not held at barriers (bench/RESULTS.md has the measurements behind the
     * bound). */
    const bool one_launch = N * p->S * C <= kOneLaunchValues;
    const size_t b_cnt = one_launch ? 0 : align_up((size_t)(N + 1) * sizeof(unsigned));
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
    w.arrived = one_launch ? nullptr : (unsigned *)((char *)w.beta + b_g);
    if (one_launch) {
        const auto kernel = dice_kernel<T, BINARY, FLAT>;
        const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(total, resident_blocks(kernel, THREADS, 1)));
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((unsigned)grid, 1, 1);
        cfg.blockDim = dim3(THREADS, 1, 1);
        cfg.stream = stream;
        cudaLaunchAttribute attr = {};
        attr.id = cudaLaunchAttributeCooperative;
        attr.val.cooperative = 1;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, *p, tiles, ctx->error_slot, arrival_ticket(ctx), w);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return ploss_error(PLOSS_ERR_CUDA, "soft Dice: the cooperative launch of %lld blocks failed: %s",
                               (long long)grid, cudaGetErrorString(e));
        }
        return check_launch("soft Dice");
    }
    /* the sums' blocks take `group` tiles each, as many as fill about one wave (at most 8):
     * a block's arrival and the reductions between its loads come once per group */
    const int64_t wave = resident_blocks(dice_sums<T, BINARY, FLAT>, THREADS, 4 * 132);
    const int group = (int)std::min<int64_t>(8, std::max<int64_t>(1, (total + wave - 1) / wave));
    const int64_t sum_blocks = N * ((tiles + group - 1) / group);
    if ((st = ploss_cuda_memset(w.arrived, 0, (size_t)(N + 1) * sizeof(unsigned), stream)))
        return st;
    dice_sums<T, BINARY, FLAT><<<(unsigned)sum_blocks, THREADS, 0, stream>>>(*p, tiles, group, ctx->error_slot, w);
    if ((st = check_launch("soft Dice sums")))
        return st;
    if (p->pass != PLOSS_PASS_FORWARD) {
        dice_grad<T, BINARY, FLAT><<<(unsigned)total, THREADS, 0, stream>>>(*p, tiles, w);
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
