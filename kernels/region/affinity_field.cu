/*
 * affinity_field.cu — CUDA backend of the affinity field loss (formulas in
 * core/engines/region.h and docs/losses.md).  fp32 accumulation for f32/f16/bf16 input, f64
 * for f64.
 *
 *  1. field_prep, one block per PREP_TH×PREP_TW tile, one thread per pixel: its label into
 *     an int32 map (-1: ignored; an invalid label is reported through the context's error
 *     slot and treated as ignored), the count of valid pixels (integer atomics: exact in any
 *     order; MEAN's divisor, needed by the gradient) and, only when the gradient overwrites
 *     the input (an in-place pass), a copy of the input for the neighbours' logits;
 *  2. field_main: a warp takes a strip of 32 columns and R + 2 rows (lane = column; lanes
 *     1…30 and rows 1…R are its pixels, lane 0 / 31 and rows 0 / R + 1 the halo), a block
 *     WARPS strips stacked vertically.  A lane keeps its column's values in registers and
 *     takes its neighbours' through warp shuffles.  Three sweeps over the classes:
 *      - the log-softmax: staged (fp32 accumulation, few enough classes), the block's logits
 *        and halo are copied to shared memory once (f32: cp.async, all in flight at once),
 *        and each (row, column) of the stage, taken by one thread, is replaced by its
 *        log-softmax; else (f64, many classes) each sweep reads the logits
 *        from global memory (the later sweeps mostly from L1) and the log-sum-exp of the
 *        lane's rows is taken online (the sum rescaled when the max grows);
 *      - the divergences, each unordered neighbour pair once: a lane owns the pairs of the
 *        2×2 square whose top-left pixel it holds (the vertical one below, the horizontal
 *        one to the right, both diagonals; KL both ways, or the reference form's terms),
 *        and a pixel gathers its eight pairs from its own lane and the lane on its left;
 *        then per pixel z the loss ℓ_z (the 'none' map, or per block partial sums reduced
 *        in a fixed order by the last block to finish) and the pairs' coefficients;
 *      - the gradient, class by class:
 *          KL:        g_c = p_z·(K0 + l_z·K1 − KD − Σ_o c1_o·l_o) − Σ_o c0_o·p_o
 *          reference: g_c = p_z·(Σ c0_o·dot0_o − Σ c1_o·dot1_o + 2p_z·K1 − Σ_o (c0_o + c1_o)·p_o)
 *        with c0_o / c1_o the coefficients of pair (z, o) / (o, z), K0 = Σ c0, K1 = Σ c1,
 *        KD = Σ c1_o·D(o, z), dot0_o = Σ_c p_z·p_o, dot1_o = 2Σ_c p_z² − dot0_o.
 * The input is read from DRAM once (the halo mostly from L2), the gradient written once.  No
 * float atomics: the results are bitwise the same on every run, and the same for every
 * layout of the input (the order of the arithmetic does not depend on it).
 */
#include "region_common.cuh"
#include <limits>
#include <type_traits>

namespace ploss_cuda {
namespace affinity_field_kernels {
namespace {
using namespace region;

constexpr int PREP_TW = 32, PREP_TH = 8, PREP_THREADS = PREP_TW * PREP_TH; /* field_prep's tiles */
constexpr int WARPS = 8, THREADS = 32 * WARPS; /* field_main: a block of WARPS strips */
constexpr int SW = 30;                         /* a strip's own columns (lanes 1…30) */
constexpr unsigned FULL = 0xffffffffu;
/* A strip's own rows: 3 for the KL divergence with fp32 accumulation (its 8R + 6 pair sums
 * and 16R coefficients within two resident blocks' registers; 4 rows make 576 blocks of the
 * benchmark's 8×256×256 images, 2.2 waves of 264, and were slower), 2 for the reference form
 * (a third sum per pair) and for f64. */
template <class A, bool REF> constexpr int ROWS = sizeof(A) == 8 || REF ? 2 : 3;
template <class A> constexpr int MAIN_BLOCKS = sizeof(A) == 8 ? 1 : 2;

/* The logits read by field_main: the input, or its copy (in place). */
template <class T> struct Src {
    const T *x;
    int64_t sn, sc, sh, sw;
};

/* The workspace (window_workspace): count = the valid pixels. */
using Work = WindowWork;

template <class T, class TI>
__global__ void __launch_bounds__(PREP_THREADS) field_prep(const ploss_region_problem p, int64_t *error_slot,
                                                            Work w)
{
    const int64_t H = p.sshape[0], W = p.sshape[1];
    const int64_t tiles_w = (W + PREP_TW - 1) / PREP_TW, tiles = tiles_w * ((H + PREP_TH - 1) / PREP_TH);
    /* 32-bit divisions: the grid (and so every tile count) is below 2^31 */
    const unsigned n = blockIdx.x / (unsigned)tiles, tile = blockIdx.x % (unsigned)tiles;
    const int64_t h = (int64_t)(tile / (unsigned)tiles_w) * PREP_TH + threadIdx.x / PREP_TW,
                  wc = (int64_t)(tile % (unsigned)tiles_w) * PREP_TW + threadIdx.x % PREP_TW;
    unsigned long long count = 0;
    if (h < H && wc < W) {
        const int64_t y = load_label_at<TI>(p, n * p.t_sn + h * p.t_ss[0] + wc * p.t_ss[1], error_slot);
        const int64_t s = h * W + wc;
        w.label[n * p.S + s] = (int32_t)y;
        count = y >= 0;
        if (w.copy) {
            const T *x = (const T *)p.x + n * p.x_sn + h * p.x_ss[0] + wc * p.x_ss[1];
            for (int64_t c = 0; c < p.C; ++c)
                ((T *)w.copy)[(n * p.C + c) * p.S + s] = x[c * p.x_sc];
        }
    }
    count = block_reduce<PREP_THREADS>(count, SumOp());
    if (threadIdx.x == 0 && count)
        atomicAdd(w.count, count);
}

/* One unordered pair (a, b): KL ab = D(a, b) = Σ p_b·(l_b − l_a), ba = D(b, a); the reference
 * form ab = Σ p_b·(p_b − p_a), ba = Σ p_a·(p_a − p_b) and dot = Σ p_a·p_b. */
template <class A, bool REF> struct Pair {
    A ab = 0, ba = 0;
    struct None {};
    std::conditional_t<REF, A, None> dot{};
    /* MASKED: some l may be −∞ (a class of probability 0), which then adds 0, not 0·(−∞);
     * else every l is finite and p·t needs no test */
    template <bool MASKED> __device__ __forceinline__ void add(A la, A pa, A lb, A pb)
    {
        if constexpr (REF) {
            const A t = pb - pa;
            ab = fma(pb, t, ab);
            ba = fma(-pa, t, ba);
            dot = fma(pa, pb, dot);
        } else {
            const A t = lb - la;
            if (!MASKED || pb != A(0))
                ab = fma(pb, t, ab);
            if (!MASKED || pa != A(0))
                ba = fma(-pa, t, ba);
        }
    }
    /* the same pair held by the lane on the left */
    __device__ __forceinline__ Pair from_left() const
    {
        Pair q;
        q.ab = __shfl_up_sync(FULL, ab, 1);
        q.ba = __shfl_up_sync(FULL, ba, 1);
        if constexpr (REF)
            q.dot = __shfl_up_sync(FULL, dot, 1);
        return q;
    }
};

template <class T> __device__ __forceinline__ acc_t<T> load_ro(const T *x) { return (acc_t<T>)to_acc(__ldg(x)); }

/* e^v: exp_ftz (common.cuh) for fp32 accumulation, libdevice's exp for f64 */
__device__ __forceinline__ float fast_exp(float v) { return exp_ftz(v); }
__device__ __forceinline__ double fast_exp(double v) { return exp(v); }

/* Rows of a block's stage: its strips' rows and the halo row above and below. */
template <class A, bool REF> constexpr int STAGE_ROWS = WARPS * ROWS<A, REF> + 2;
constexpr size_t STAGE_BUDGET = 112 * 1024; /* two blocks per SM on sm_90 */

/* STAGED (fp32 accumulation, the C × STAGE_ROWS × 32 f32 values of a block's stage within
 * STAGE_BUDGET and the device's shared memory per block): the sweeps read the block's
 * log-softmax from shared memory; else (f64, many classes) each sweep reads the logits from
 * global memory. */
template <class T, bool REF, bool STAGED>
__global__ void __launch_bounds__(THREADS, MAIN_BLOCKS<acc_t<T>>)
    field_main(const ploss_region_problem p, Src<T> src, Work w)
{
    using A = acc_t<T>;
    constexpr int R = ROWS<A, REF>, RR = R + 2, BAND = WARPS * R, RB = STAGE_ROWS<A, REF>;
    const int64_t H = p.sshape[0], W = p.sshape[1], C = p.C;
    const int64_t strips = (W + SW - 1) / SW, tiles = strips * ((H + BAND - 1) / BAND);
    /* 32-bit divisions: the grid (and so every tile count) is below 2^31 */
    const unsigned n = blockIdx.x / (unsigned)tiles, tile = blockIdx.x % (unsigned)tiles;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t b_row = (int64_t)(tile / (unsigned)strips) * BAND - 1; /* the block's halo row */
    const int64_t col = (int64_t)(tile % (unsigned)strips) * SW - 1 + lane, row0 = b_row + warp * R;
    const bool incol = col >= 0 && col < W;

    /* this column's rows: labels (-1 outside the image or ignored), validity, the left and
     * right columns' labels */
    int lab[RR], labL[RR], labR[RR];
    unsigned valid = 0; /* bit r: row r of this column is a valid pixel */
#pragma unroll
    for (int r = 0; r < RR; ++r) {
        const int64_t hh = row0 + r;
        lab[r] = incol && hh >= 0 && hh < H ? w.label[n * p.S + hh * W + col] : -1;
        valid |= (lab[r] >= 0 ? 1u : 0u) << r;
    }
#pragma unroll
    for (int r = 0; r < RR; ++r) {
        labL[r] = __shfl_up_sync(FULL, lab[r], 1);
        labR[r] = __shfl_down_sync(FULL, lab[r], 1);
    }
    /* Sweep 1, the log-sum-exp of each pixel, and class c's log-softmax l and softmax p of
     * this column's rows (softmax(c, l, p)).
     * Direct: the logits from global memory (rows outside the image read image n's first
     * pixel instead: a valid address, so the loads need no branch; their values are
     * dropped); the log-sum-exp online (the sum rescaled when the max grows; the max starts
     * at the lowest finite value, so that −∞ logits add e^−∞ = 0 without an ∞ − ∞); l = p = 0
     * at invalid pixels.
     * Staged: the block's logits are copied to shared memory (f32: cp.async, every copy in
     * flight at once; f16/bf16: batches of loads, widened); each (row, column) of the stage
     * is then taken by one thread, which replaces its logits by their log-softmax l (0 at
     * invalid pixels: p = 1 there, finite, and every coefficient of such a pixel is 0), so
     * that every sweep after reads l and takes p = e^l — no halo pixel's log-sum-exp is
     * computed twice, and no mask is applied per element.  (l stays in natural units: a
     * logit near the float range's end, a masked class say, keeps l finite.) */
    extern __shared__ __align__(16) unsigned char smem[];
    A lse[RR];
    const T *xrow[STAGED ? 1 : RR];
    const auto load_class = [&](int64_t c, A (&v)[RR]) { /* direct: class c of this column's rows */
        const int64_t off = c * src.sc;
#pragma unroll
        for (int r = 0; r < RR; ++r)
            v[r] = load_ro(xrow[r] + off);
    };
    const float *stage = (const float *)smem + (warp * R) * 32 + lane;
    /* staged: some l of the block is −∞ */
    bool masked = false;
    if constexpr (STAGED) {
        /* a thread takes the stage rows warp, warp + WARPS, … of its column: it copies their
         * logits and then transforms them, so only the end needs the block's barrier */
        float *stg = (float *)smem; /* [C][RB][32] */
        /* row rr's pixel of class 0; outside the image, image 0's first pixel (a valid
         * address: nothing is read from it) */
        const auto row_at = [&](int rr, bool &in) {
            const int64_t hh = b_row + rr;
            in = incol && hh >= 0 && hh < H;
            return in ? src.x + n * src.sn + hh * src.sh + col * src.sw : src.x;
        };
        const int64_t step = src.sc;
        for (int rr = warp; rr < RB; rr += WARPS) {
            bool in;
            const T *g = row_at(rr, in);
            float *d = stg + rr * 32 + lane;
            if constexpr (sizeof(T) == 4) {
                const int bytes = in ? 4 : 0; /* 0: zeros, nothing read */
                for (int c = 0; c < (int)C; ++c, g += step, d += RB * 32)
                    cp_async4(d, g, bytes);
            } else {
                constexpr int BATCH = 8; /* loads in flight */
                for (int c0 = 0; c0 < (int)C; c0 += BATCH) {
                    float v[BATCH];
#pragma unroll
                    for (int u = 0; u < BATCH; ++u)
                        v[u] = in && c0 + u < (int)C ? to_acc(__ldg(g + (c0 + u) * step)) : 0.0f;
#pragma unroll
                    for (int u = 0; u < BATCH; ++u)
                        if (c0 + u < (int)C)
                            d[(c0 + u) * RB * 32] = v[u];
                }
            }
        }
        if constexpr (sizeof(T) == 4) {
            cp_async_commit();
            cp_async_wait<0>();
        }
        int neg_inf = 0;
        for (int rr = warp; rr < RB; rr += WARPS) {
            const int64_t hh = b_row + rr;
            const bool ok = incol && hh >= 0 && hh < H && w.label[n * p.S + hh * W + col] >= 0;
            float *e = stg + rr * 32 + lane;
            float m = std::numeric_limits<float>::lowest(), sum = 0.0f;
            for (int c = 0; c < (int)C; ++c)
                m = fmaxf(m, e[c * RB * 32]);
            for (int c = 0; c < (int)C; ++c)
                sum += fast_exp(e[c * RB * 32] - m);
            const float lse1 = m + __logf(sum);
            for (int c = 0; c < (int)C; ++c) {
                const float l = ok ? e[c * RB * 32] - lse1 : 0.0f;
                neg_inf |= l == -INFINITY;
                e[c * RB * 32] = l;
            }
        }
        masked = __syncthreads_or(neg_inf);
    } else {
#pragma unroll
        for (int r = 0; r < RR; ++r) {
            const int64_t hh = row0 + r;
            const bool in = incol && hh >= 0 && hh < H;
            xrow[r] = src.x + n * src.sn + (in ? hh * src.sh + col * src.sw : 0);
        }
        A mx[RR], se[RR];
#pragma unroll
        for (int r = 0; r < RR; ++r)
            mx[r] = std::numeric_limits<A>::lowest(), se[r] = A(0);
#pragma unroll 4
        for (int64_t c = 0; c < C; ++c) {
            A v[RR];
            load_class(c, v);
#pragma unroll
            for (int r = 0; r < RR; ++r) {
                const bool up = v[r] > mx[r];
                const A hi = up ? v[r] : mx[r], lo = up ? mx[r] : v[r];
                const A e = fast_exp(lo - hi);
                se[r] = up ? fma(se[r], e, A(1)) : se[r] + e;
                mx[r] = hi;
            }
        }
#pragma unroll
        for (int r = 0; r < RR; ++r)
            lse[r] = mx[r] + m_log(se[r]);
    }
    const auto softmax = [&](int64_t c, A (&l)[RR], A (&pr)[RR]) {
        if constexpr (STAGED) {
#pragma unroll
            for (int r = 0; r < RR; ++r)
                l[r] = stage[((int)c * RB + r) * 32];
#pragma unroll
            for (int r = 0; r < RR; ++r)
                pr[r] = fast_exp(l[r]);
        } else {
            A v[RR];
            load_class(c, v);
#pragma unroll
            for (int r = 0; r < RR; ++r) {
                const bool ok = valid >> r & 1u;
                l[r] = ok ? v[r] - lse[r] : A(0);
                pr[r] = ok ? fast_exp(l[r]) : A(0);
            }
        }
    };

    /* sweep 2: the pairs this lane owns (a row of this column, a row of this column or of the
     * column on the right): V[r] (r, r + 1), DR[r] (r, r + 1 right), UR[r] (r + 1, r right) for
     * r = 0…R, Hz[r] (r, r right) for r = 1…R (Hz[0] unused) */
    Pair<A, REF> V[R + 1], Hz[R + 1], DR[R + 1], UR[R + 1];
    A q[RR]; /* the reference form: Σ_c p² of this column's rows */
#pragma unroll
    for (int r = 0; r < RR; ++r)
        q[r] = A(0);
    /* sweep(M): M = some l may be −∞, so the KL form's sums test p for 0 before each
     * p·(l − l') (a class of probability 0 adds 0, not 0·(−∞)); the direct path always does */
    const auto with_mask = [&](const auto &sweep) {
        if constexpr (REF)
            sweep(std::false_type{});
        else if constexpr (!STAGED)
            sweep(std::true_type{});
        else if (masked)
            sweep(std::true_type{});
        else
            sweep(std::false_type{});
    };
    const auto sweep2 = [&](auto masked_t) {
        constexpr bool M = decltype(masked_t)::value;
#pragma unroll 2
        for (int64_t c = 0; c < C; ++c) {
            A l[RR], pr[RR], lR[RR], pR[RR];
            softmax(c, l, pr);
#pragma unroll
            for (int r = 0; r < RR; ++r) {
                lR[r] = __shfl_down_sync(FULL, l[r], 1);
                pR[r] = __shfl_down_sync(FULL, pr[r], 1);
                if (REF)
                    q[r] = fma(pr[r], pr[r], q[r]);
            }
#pragma unroll
            for (int r = 0; r <= R; ++r) {
                V[r].template add<M>(l[r], pr[r], l[r + 1], pr[r + 1]);
                DR[r].template add<M>(l[r], pr[r], lR[r + 1], pR[r + 1]);
                UR[r].template add<M>(l[r + 1], pr[r + 1], lR[r], pR[r]);
                if (r >= 1)
                    Hz[r].template add<M>(l[r], pr[r], lR[r], pR[r]);
            }
        }
    };
    with_mask(sweep2);

    /* each own pixel's eight pairs: D0[o] = D(z, o), D1[o] = D(o, z) (the reference form:
     * dot0[o] = Σ p_z·p_o); neighbour o as in the CPU's order: (−1,−1) (−1,0) (−1,1) (0,−1)
     * (0,1) (1,−1) (1,0) (1,1) */
    const bool own_lane = lane >= 1 && lane <= SW && incol;
    const int per_pixel = p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE;
    double base = 1.0;
    if (p.reduction == PLOSS_REDUCTION_MEAN) {
        const unsigned long long v = *w.count;
        base = v > 0 ? 1.0 / (double)v : 0.0;
    }
    if (p.pass != PLOSS_PASS_BACKWARD)
        base *= p.scale;
    else if (p.reduction != PLOSS_REDUCTION_NONE)
        base *= load_dyn(p.grad_loss, p.gl_dtype, 0);
    const A base8 = (A)(base / 8.0), kappa = (A)p.kl_margin, ls = (A)p.lambda_same, ld = (A)p.lambda_diff;
    A up[RR], upL[RR], upR[RR]; /* the upstream gradient of this column's and its neighbours' pixels */
#pragma unroll
    for (int r = 0; r < RR; ++r) {
        up[r] = per_pixel && valid >> r & 1u
                    ? (A)load_dyn(p.grad_loss, p.gl_dtype, n * p.gl_sg + (row0 + r) * p.gl_ss[0] + col * p.gl_ss[1])
                    : A(1);
        upL[r] = __shfl_up_sync(FULL, up[r], 1);
        upR[r] = __shfl_down_sync(FULL, up[r], 1);
    }
    /* the gradient's factors of each own pixel: KL g = p_z·(KA + l_z·KB − Σ c1·l_o) − Σ c0·p_o
     * with KA = K0 − KD, KB = K1;
     * reference g = p_z·(KA + p_z·KB − Σ c0·p_o) with c0 = c0 + c1, KA = Σ c0·dot0 −
     * Σ c1·dot1, KB = 2·K1 */
    A c0v[R][8], c1v[R][8], KA[R], KB[R];
    A loss_sum = 0;
#pragma unroll
    for (int i = 1; i <= R; ++i) {
        const Pair<A, REF> left = Hz[i].from_left(), upleft = DR[i - 1].from_left(), downleft = UR[i].from_left();
        /* (D0, D1, dot0) of each neighbour */
        A D0[8], D1[8], dt[8];
        const auto take = [&](int o, const Pair<A, REF> &pq, bool z_is_a) {
            D0[o] = z_is_a ? pq.ab : pq.ba;
            D1[o] = z_is_a ? pq.ba : pq.ab;
            if constexpr (REF)
                dt[o] = pq.dot;
        };
        take(0, upleft, false);
        take(1, V[i - 1], false);
        take(2, UR[i - 1], true);
        take(3, left, false);
        take(4, Hz[i], true);
        take(5, downleft, false);
        take(6, V[i], true);
        take(7, DR[i], true);
        const int lz = lab[i];
        const int lo_lab[8] = {labL[i - 1], lab[i - 1], labR[i - 1], labL[i], labR[i], labL[i + 1], lab[i + 1], labR[i + 1]};
        const A wo[8] = {upL[i - 1], up[i - 1], upR[i - 1], upL[i], upR[i], upL[i + 1], up[i + 1], upR[i + 1]};
        const bool z_ok = own_lane && lz >= 0 && row0 + i < H;
        const A wz = up[i];
        A loss = 0, K0 = 0, K1 = 0, KX = 0;
#pragma unroll
        for (int o = 0; o < 8; ++o) {
            c0v[i - 1][o] = c1v[i - 1][o] = A(0);
            if (!(z_ok && lo_lab[o] >= 0))
                continue;
            const bool same = lo_lab[o] == lz;
            const A m0 = kappa - D0[o], m1 = kappa - D1[o];
            loss += same ? ls * D0[o] : ld * (m0 > A(0) ? m0 : A(0));
            const A a0 = base8 * wz * (same ? ls : (m0 > A(0) ? -ld : A(0)));
            const A a1 = base8 * wo[o] * (same ? ls : (m1 > A(0) ? -ld : A(0)));
            c0v[i - 1][o] = REF ? a0 + a1 : a0;
            c1v[i - 1][o] = a1; /* (unused by the reference form) */
            K0 += a0;
            K1 += a1;
            if constexpr (REF)
                KX += a0 * dt[o] - a1 * (A(2) * q[i] - dt[o]);
            else
                KX += a1 * D1[o];
        }
        KA[i - 1] = REF ? KX : K0 - KX;
        KB[i - 1] = REF ? A(2) * K1 : K1;
        loss /= A(8);
        if (p.pass != PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE && own_lane && row0 + i < H)
            store_dyn(p.loss, p.loss_dtype, n * p.l_sg + (row0 + i) * p.l_ss[0] + col * p.l_ss[1], (double)loss);
        loss_sum += loss;
    }
    if (p.pass != PLOSS_PASS_BACKWARD && p.reduction != PLOSS_REDUCTION_NONE)
        store_reduced_loss<THREADS>(p, loss_sum, w.partial, w.ticket, (double)*w.count);
    if (p.pass == PLOSS_PASS_FORWARD)
        return;

    /* sweep 3: the gradient, class by class */
    T *gcol = (T *)p.grad + n * p.g_sn + (incol ? col : 0) * p.g_ss[1];
    const auto sweep3 = [&](auto masked_t) {
        constexpr bool M = decltype(masked_t)::value;
#pragma unroll 2
        for (int64_t c = 0; c < C; ++c) {
            A l[RR], pr[RR], lL[RR], pL[RR], lR[RR], pR[RR];
            softmax(c, l, pr);
#pragma unroll
            for (int r = 0; r < RR; ++r) {
                lL[r] = __shfl_up_sync(FULL, l[r], 1);
                pL[r] = __shfl_up_sync(FULL, pr[r], 1);
                lR[r] = __shfl_down_sync(FULL, l[r], 1);
                pR[r] = __shfl_down_sync(FULL, pr[r], 1);
            }
#pragma unroll
            for (int i = 1; i <= R; ++i) {
                [[maybe_unused]] const A lo[8] = {lL[i - 1], l[i - 1], lR[i - 1], lL[i], lR[i], lL[i + 1], l[i + 1], lR[i + 1]};
                const A po[8] = {pL[i - 1], pr[i - 1], pR[i - 1], pL[i], pR[i], pL[i + 1], pr[i + 1], pR[i + 1]};
                const A lz = l[i], pz = pr[i];
                A s0 = 0, s1 = 0;
#pragma unroll
                for (int o = 0; o < 8; ++o) {
                    if constexpr (REF) {
                        s0 = fma(c0v[i - 1][o], po[o], s0); /* c0 + c1 */
                    } else { /* masked: a neighbour of probability 0 here and no weight adds 0, not 0·(−∞) */
                        s0 = fma(c0v[i - 1][o], po[o], s0);
                        if (!M || c1v[i - 1][o] != A(0))
                            s1 = fma(c1v[i - 1][o], lo[o], s1);
                    }
                }
                /* KL, masked: the p_z factor's 0 where l_z = −∞ taken as 0, not 0·(−∞) */
                const A g = REF ? pz * (KA[i - 1] + pz * KB[i - 1] - s0)
                                : (!M || pz != A(0) ? pz * (KA[i - 1] + lz * KB[i - 1] - s1) : A(0)) - s0;
                if (own_lane && row0 + i < H)
                    gcol[c * p.g_sc + (row0 + i) * p.g_ss[0]] = from_acc<T>(g);
            }
        }
    };
    with_mask(sweep3);
}

template <class T, class TI> ploss_status run(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    using A = acc_t<T>;
    const cudaStream_t stream = stream_of(ctx);
    const int64_t H = p->sshape[0], W = p->sshape[1];
    const int64_t prep_blocks = p->N * ((H + PREP_TH - 1) / PREP_TH) * ((W + PREP_TW - 1) / PREP_TW);
    /* staged: fp32 accumulation and the stage within its budget */
    const bool ref = p->reference_divergence;
    const size_t stage = (size_t)p->C * (ref ? STAGE_ROWS<A, true> : STAGE_ROWS<A, false>) * 32 * sizeof(float);
    int optin = 0; /* the device's shared memory per block (the kernel's own static ~128 bytes aside) */
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->device.device_id) != cudaSuccess) {
        cudaGetLastError();
        optin = 48 * 1024;
    }
    const bool staged = sizeof(A) == 4 && stage <= STAGE_BUDGET && stage + 1024 <= (size_t)optin;
    const int band = WARPS * (ref ? ROWS<A, true> : ROWS<A, false>);
    const int64_t blocks = p->N * ((H + band - 1) / band) * ((W + SW - 1) / SW);
    if (prep_blocks > INT32_MAX || blocks > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "input: %lld tiles exceed the CUDA grid",
                           (long long)(prep_blocks > blocks ? prep_blocks : blocks));
    Work w;
    ploss_status st = window_workspace(ctx, *p, blocks, sizeof(T), w);
    if (st)
        return st;
    field_prep<T, TI><<<(unsigned)prep_blocks, PREP_THREADS, 0, stream>>>(*p, ctx->error_slot, w);
    if ((st = check_launch("affinity field labels")))
        return st;

    Src<T> src = {(const T *)p->x, p->x_sn, p->x_sc, p->x_ss[0], p->x_ss[1]};
    if (w.copy)
        src = {(const T *)w.copy, p->C * p->S, p->S, W, 1};
    const auto launch = [&](auto kernel, size_t smem) {
        if (smem) {
            if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
                return check_launch("affinity field loss: its shared memory");
        } else {
            /* no shared memory to speak of: the carveout leaves the most to L1, where the
             * second and third sweeps find the logits */
            cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 0);
        }
        kernel<<<(unsigned)blocks, THREADS, smem, stream>>>(*p, src, w);
        return check_launch("affinity field loss and gradient");
    };
    const auto go = [&](auto ref_tag) {
        constexpr bool REF = decltype(ref_tag)::value;
        if constexpr (sizeof(A) == 4) {
            if (staged)
                return launch(field_main<T, REF, true>, stage);
        }
        return launch(field_main<T, REF, false>, 0);
    };
    return ref ? go(std::true_type()) : go(std::false_type());
}

} // namespace

extern "C" ploss_status ploss_cuda_affinity_field(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    return dispatch_float(p->x_dtype, "input", [&](auto tag) {
        using T = typename decltype(tag)::type;
        return dispatch_index(p->t_dtype, "target", [&](auto itag) {
            using TI = typename decltype(itag)::type;
            return run<T, TI>(ctx, p);
        });
    });
}

} // namespace affinity_field_kernels
} // namespace ploss_cuda
