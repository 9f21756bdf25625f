/*
 * affinity_field.cu — CUDA backend of the affinity field loss (formulas in
 * core/engines/region.h and docs/losses.md).  fp32 accumulation for f32/f16/bf16 input, f64
 * for f64.
 *
 *  1. field_prep, one block per TH×TW tile (the main kernel's tiles, so no per-pixel
 *     index division), one thread per pixel: its label into an int32 map (-1: ignored; an invalid
 *     label is reported through the context's error slot and treated as ignored), the count
 *     of valid pixels (integer atomics: exact in any order; MEAN's divisor, needed by the
 *     gradient) and, only when the gradient overwrites the input (an in-place pass), a copy
 *     of the input for the neighbours' logits;
 *  2. field_main, one block per TH×TW tile of one image: the tile and its one-pixel halo in
 *     shared memory (labels; then, class chunk by class chunk, the log-softmax and softmax,
 *     the log-sum-exp taken over all classes first), a thread per pixel z: the divergences
 *     of its 16 pairs (8 with z as the centre u, 8 as the neighbour v; the same 8 neighbour
 *     pixels), ℓ_z (the 'none' map, per block partial sums reduced in a fixed order by the
 *     last block to finish), then its gradient class by class:
 *        KL:        g_c = p_z·(K0 + l_z·K1 − KD) − Σ_o (c0_o·p_o + p_z·c1_o·l_o)
 *        reference: g_c = p_z·(Σ c0_o·dot0_o − Σ c1_o·dot1_o + 2p_z·K1 − Σ_o (c0_o + c1_o)·p_o)
 *     with c0_o / c1_o the coefficients of pair (z, o) / (o, z), K0 = Σ c0, K1 = Σ c1,
 *     KD = Σ c1_o·D(o, z).
 * The tile's logits are loaded LOAD_BATCH elements per thread at a time (all loads issued
 * before the stores to shared memory), so that enough reads are in flight to cover the
 * memory latency; the launch bounds keep the registers to 4 resident blocks per SM (fp32).
 * The input is read once (plus the halo, mostly from L2), the gradient written once.  No
 * float atomics: the results are bitwise the same on every run.
 */
#include "region_common.cuh"

namespace ploss_cuda {
namespace {
using namespace region;

constexpr int TW = 32, TH = 8, THREADS = TW * TH; /* a tile: TH rows of TW pixels */
constexpr int HW = TW + 2, HALO = HW * (TH + 2);  /* the tile with its one-pixel halo */
constexpr size_t SMEM_BUDGET = 96 * 1024;         /* dynamic shared memory of a block */
/* Resident blocks per SM of field_main (its launch bounds): 4 for fp32 accumulation (64
 * registers, 4 × 54 KB of shared memory), 2 for f64 (its chunks fill the budget). */
template <class A> constexpr int MAIN_BLOCKS = sizeof(A) == 8 ? 2 : 4;
constexpr int LOAD_BATCH = 8;                     /* global loads in flight per thread */

/* Neighbour o (the CPU's order): its row and column step, its offset in the halo. */
__device__ __forceinline__ constexpr int DH(int o) { return o < 3 ? -1 : o < 5 ? 0 : 1; }
__device__ __forceinline__ constexpr int DW(int o) { return o == 0 || o == 3 || o == 5 ? -1 : o == 1 || o == 6 ? 0 : 1; }
__device__ __forceinline__ constexpr int NB(int o) { return DH(o) * HW + DW(o); }

/* The logits read by field_main: the input, or its copy (in place). */
template <class T> struct Src {
    const T *x;
    int64_t sn, sc, sh, sw;
};

struct Work {
    int32_t *label;               /* [n·S + s] */
    unsigned long long *valid;    /* the valid pixels (zeroed, then counted) */
    unsigned long long *ticket;   /* the context's arrival ticket */
    double *partial;              /* [block]: Σ ℓ of the block's pixels */
};

template <class T, class TI>
__global__ void __launch_bounds__(THREADS) field_prep(const ploss_region_problem p, int64_t *error_slot,
                                                       Work w, T *copy)
{
    const int64_t H = p.sshape[0], W = p.sshape[1];
    const int64_t tiles_w = (W + TW - 1) / TW, tiles = tiles_w * ((H + TH - 1) / TH);
    const int64_t n = blockIdx.x / tiles, tile = blockIdx.x % tiles;
    const int64_t h = (tile / tiles_w) * TH + threadIdx.x / TW, wc = (tile % tiles_w) * TW + threadIdx.x % TW;
    unsigned long long count = 0;
    if (h < H && wc < W) {
        const int64_t y = load_label_at<TI>(p, n * p.t_sn + h * p.t_ss[0] + wc * p.t_ss[1], error_slot);
        const int64_t s = h * W + wc;
        w.label[n * p.S + s] = (int32_t)y;
        count = y >= 0;
        if (copy) {
            const T *x = (const T *)p.x + n * p.x_sn + h * p.x_ss[0] + wc * p.x_ss[1];
            for (int64_t c = 0; c < p.C; ++c)
                copy[(n * p.C + c) * p.S + s] = x[c * p.x_sc];
        }
    }
    count = block_reduce<THREADS>(count, SumOp());
    if (threadIdx.x == 0 && count)
        atomicAdd(w.valid, count);
}

template <class T, bool REF>
__global__ void __launch_bounds__(THREADS, MAIN_BLOCKS<acc_t<T>>)
    field_main(const ploss_region_problem p, Src<T> src, int cc, Work w)
{
    using A = acc_t<T>;
    extern __shared__ __align__(16) unsigned char smem[];
    A *s_lp = (A *)smem, *s_p = s_lp + (size_t)cc * HALO, *s_lse = s_p + (size_t)cc * HALO;
    int *s_lab = (int *)(s_lse + HALO);

    const int64_t H = p.sshape[0], W = p.sshape[1], C = p.C;
    const int64_t tiles_w = (W + TW - 1) / TW, tiles = tiles_w * ((H + TH - 1) / TH);
    const int64_t n = blockIdx.x / tiles, tile = blockIdx.x % tiles;
    const int64_t h0 = (tile / tiles_w) * TH - 1, w0 = (tile % tiles_w) * TW - 1; /* the halo's origin */
    const int tx = threadIdx.x % TW, ty = threadIdx.x / TW, zi = (ty + 1) * HW + tx + 1;
    const int64_t h = h0 + 1 + ty, wc = w0 + 1 + tx;
    const bool mine = h < H && wc < W;

    for (int i = threadIdx.x; i < HALO; i += THREADS) {
        const int64_t hh = h0 + i / HW, ww = w0 + i % HW;
        s_lab[i] = hh >= 0 && hh < H && ww >= 0 && ww < W ? w.label[n * p.S + hh * W + ww] : -1;
    }
    __syncthreads();
    const bool one = C <= cc; /* every class in one chunk: the logits are read once */
    const T *xn = src.x + n * src.sn;
    const auto at = [&](int i, int64_t c) { return xn + c * src.sc + (h0 + i / HW) * src.sh + (w0 + i % HW) * src.sw; };
    if (!one) /* the log-sum-exp over all classes first, from global memory */
        for (int i = threadIdx.x; i < HALO; i += THREADS) {
            if (s_lab[i] < 0)
                continue;
            A mx = -INFINITY, sum = 0;
            for (int64_t c = 0; c < C; ++c)
                mx = MaxOp()(mx, (A)to_acc(*at(i, c)));
            for (int64_t c = 0; c < C; ++c)
                sum += m_exp((A)to_acc(*at(i, c)) - mx);
            s_lse[i] = mx + m_log(sum);
        }
    /* chunk [c0, c0 + kc): its log-softmax and softmax in shared memory (0 at pixels
     * outside the image or ignored); the logits LOAD_BATCH per thread at a time */
    const auto load_chunk = [&](int64_t c0, int kc) {
        const int n_el = kc * HALO;
        for (int i0 = threadIdx.x; i0 < n_el; i0 += LOAD_BATCH * THREADS) {
            A v[LOAD_BATCH];
#pragma unroll
            for (int u = 0; u < LOAD_BATCH; ++u) {
                const int i = i0 + u * THREADS, j = i % HALO;
                v[u] = i < n_el && s_lab[j] >= 0 ? (A)to_acc(*at(j, c0 + i / HALO)) : A(0);
            }
#pragma unroll
            for (int u = 0; u < LOAD_BATCH; ++u)
                if (i0 + u * THREADS < n_el)
                    s_lp[i0 + u * THREADS] = v[u];
        }
        __syncthreads();
        if (one)
            for (int j = threadIdx.x; j < HALO; j += THREADS) {
                if (s_lab[j] < 0)
                    continue;
                A mx = -INFINITY, sum = 0;
                for (int c = 0; c < kc; ++c)
                    mx = MaxOp()(mx, s_lp[c * HALO + j]);
                for (int c = 0; c < kc; ++c)
                    sum += m_exp(s_lp[c * HALO + j] - mx);
                s_lse[j] = mx + m_log(sum);
            }
        __syncthreads();
        for (int i = threadIdx.x; i < kc * HALO; i += THREADS) {
            const int j = i % HALO;
            const A l = s_lab[j] >= 0 ? s_lp[i] - s_lse[j] : A(0);
            s_lp[i] = l;
            s_p[i] = s_lab[j] >= 0 ? m_exp(l) : A(0);
        }
        __syncthreads();
    };

    const int lz_lab = s_lab[zi];
    const bool valid = mine && lz_lab >= 0;
    unsigned nb = 0; /* the valid neighbours */
#pragma unroll
    for (int o = 0; o < 8; ++o)
        nb |= (valid && s_lab[zi + NB(o)] >= 0 ? 1u : 0u) << o;

    /* the divergences D(z, o), D(o, z) (and the reference Jacobian sums) */
    A D0[8], D1[8], dot0[8], dot1[8];
#pragma unroll
    for (int o = 0; o < 8; ++o)
        D0[o] = D1[o] = dot0[o] = dot1[o] = A(0);
    for (int64_t c0 = 0; c0 < C; c0 += cc) {
        const int kc = (int)(C - c0 < cc ? C - c0 : cc);
        if (c0 > 0)
            __syncthreads(); /* the previous chunk is no longer read */
        load_chunk(c0, kc);
        if (!valid)
            continue;
        for (int c = 0; c < kc; ++c) {
            const A lz = s_lp[c * HALO + zi], pz = s_p[c * HALO + zi];
#pragma unroll
            for (int o = 0; o < 8; ++o) {
                const A lo = s_lp[c * HALO + zi + NB(o)], po = s_p[c * HALO + zi + NB(o)];
                if (REF) {
                    D0[o] += po * (po - pz);
                    dot0[o] += pz * po;
                    D1[o] += pz * (pz - po);
                    dot1[o] += pz * (A(2) * pz - po);
                } else {
                    D0[o] += po * (lo - lz);
                    D1[o] += pz * (lz - lo);
                }
            }
        }
    }

    /* ℓ_z and the pairs' coefficients */
    const int per_pixel = p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE;
    const auto upstream = [&](int64_t hh, int64_t ww) {
        return (A)load_dyn(p.grad_loss, p.gl_dtype, n * p.gl_sg + hh * p.gl_ss[0] + ww * p.gl_ss[1]);
    };
    double base = 1.0;
    if (p.reduction == PLOSS_REDUCTION_MEAN) {
        const unsigned long long v = *w.valid;
        base = v > 0 ? 1.0 / (double)v : 0.0;
    }
    if (p.pass != PLOSS_PASS_BACKWARD)
        base *= p.scale;
    else if (p.reduction != PLOSS_REDUCTION_NONE)
        base *= load_dyn(p.grad_loss, p.gl_dtype, 0);
    const A base8 = (A)(base / 8.0), kappa = (A)p.kl_margin, ls = (A)p.lambda_same, ld = (A)p.lambda_diff;
    const A wz = valid && per_pixel ? upstream(h, wc) : A(1);
    A loss = 0, K0 = 0, K1 = 0, KX = 0; /* KX: KD (KL) or Σ c0·dot0 − Σ c1·dot1 (reference) */
    A c0v[8], c1v[8];
#pragma unroll
    for (int o = 0; o < 8; ++o) {
        c0v[o] = c1v[o] = A(0);
        if (!(nb >> o & 1u))
            continue;
        const bool same = s_lab[zi + NB(o)] == lz_lab;
        const A m0 = kappa - D0[o], m1 = kappa - D1[o];
        loss += same ? ls * D0[o] : ld * (m0 > A(0) ? m0 : A(0));
        const A wo = per_pixel ? upstream(h + DH(o), wc + DW(o)) : A(1);
        c0v[o] = base8 * wz * (same ? ls : (m0 > A(0) ? -ld : A(0)));
        c1v[o] = base8 * wo * (same ? ls : (m1 > A(0) ? -ld : A(0)));
        K0 += c0v[o];
        K1 += c1v[o];
        KX += REF ? c0v[o] * dot0[o] - c1v[o] * dot1[o] : c1v[o] * D1[o];
    }
    loss /= A(8);

    /* the loss: the 'none' map, or this block's partial sum and the last block's total */
    if (p.pass != PLOSS_PASS_BACKWARD) {
        if (p.reduction == PLOSS_REDUCTION_NONE) {
            if (mine)
                store_dyn(p.loss, p.loss_dtype, n * p.l_sg + h * p.l_ss[0] + wc * p.l_ss[1], (double)loss);
        } else {
            store_reduced_loss<THREADS>(p, loss, w.partial, w.ticket, (double)*w.valid);
        }
    }
    if (p.pass == PLOSS_PASS_FORWARD)
        return;

    /* the gradient, class by class */
    T *gz = (T *)p.grad + n * p.g_sn + h * p.g_ss[0] + wc * p.g_ss[1];
    for (int64_t c0 = 0; c0 < C; c0 += cc) {
        const int kc = (int)(C - c0 < cc ? C - c0 : cc);
        if (!one) {
            __syncthreads();
            load_chunk(c0, kc);
        }
        if (!mine)
            continue;
        for (int c = 0; c < kc; ++c) {
            A g = 0;
            if (valid) {
                const A lz = s_lp[c * HALO + zi], pz = s_p[c * HALO + zi];
                A sum = 0;
#pragma unroll
                for (int o = 0; o < 8; ++o) {
                    const A lo = s_lp[c * HALO + zi + NB(o)], po = s_p[c * HALO + zi + NB(o)];
                    sum += REF ? (c0v[o] + c1v[o]) * po : c0v[o] * po + pz * c1v[o] * lo;
                }
                g = REF ? pz * (KX + A(2) * pz * K1 - sum) : pz * (K0 + lz * K1 - KX) - sum;
            }
            gz[(c0 + c) * p.g_sc] = from_acc<T>(g);
        }
    }
}

template <class T, class TI> ploss_status run(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    using A = acc_t<T>;
    const cudaStream_t stream = stream_of(ctx);
    const int64_t NS = p->N * p->S, H = p->sshape[0], W = p->sshape[1];
    const int64_t blocks = p->N * ((H + TH - 1) / TH) * ((W + TW - 1) / TW);
    if (blocks > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "input: %lld tiles exceed the CUDA grid", (long long)blocks);
    const bool in_place = grad_overlaps_input(*p, sizeof(T));
    const size_t b_lab = align_up((size_t)NS * 4), b_cnt = 256, b_part = align_up((size_t)blocks * sizeof(double)),
                 b_copy = in_place ? align_up((size_t)(NS * p->C) * sizeof(T)) : 0;
    char *ws = nullptr;
    ploss_status st = ploss_workspace(ctx, b_lab + b_cnt + b_part + b_copy, (void **)&ws);
    if (st)
        return st;
    Work w;
    w.label = (int32_t *)ws;
    w.valid = (unsigned long long *)(ws + b_lab);
    w.ticket = arrival_ticket(ctx);
    w.partial = (double *)(ws + b_lab + b_cnt);
    T *copy = in_place ? (T *)(ws + b_lab + b_cnt + b_part) : nullptr;
    if ((st = ploss_cuda_memset(w.valid, 0, sizeof *w.valid, stream)))
        return st;
    field_prep<T, TI><<<(unsigned)blocks, THREADS, 0, stream>>>(*p, ctx->error_slot, w, copy);
    if ((st = check_launch("affinity field labels")))
        return st;

    Src<T> src = {(const T *)p->x, p->x_sn, p->x_sc, p->x_ss[0], p->x_ss[1]};
    if (in_place)
        src = {copy, p->C * p->S, p->S, W, 1};
    /* classes per chunk: the log-softmax, the softmax, the log-sum-exp and the labels of
     * the halo within the budget */
    const int64_t fit = (int64_t)((SMEM_BUDGET - HALO * (sizeof(A) + 4)) / (2 * HALO * sizeof(A)));
    const int cc = (int)(p->C < fit ? p->C : fit);
    const size_t smem = (2 * (size_t)cc + 1) * HALO * sizeof(A) + HALO * 4;
    const auto launch = [&](auto kernel) {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        kernel<<<(unsigned)blocks, THREADS, smem, stream>>>(*p, src, cc, w);
        return check_launch("affinity field loss and gradient");
    };
    return p->reference_divergence ? launch(field_main<T, true>) : launch(field_main<T, false>);
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
