/*
 * infonce.cu — CUDA backend of InfoNCE (core/engines/pairs.h).
 *
 *   prep      one warp per row of each view: the row normalised (or copied) in fp32 (f64 for
 *             f64 input), its norm, and the diagonal S_ii;
 *   pass 1    per tile of query rows: S_b = u_b·vᵀ/τ through cuBLAS (kernels/support/gemm.cu),
 *             then one warp per tile row for its log-sum-exp and one thread per column for the
 *             tile's (max, Σe^(S − max)), merged into the column's running pair in tile order;
 *   losses    one block: ℓ_i and the reduced loss in a fixed order, and each row's weight;
 *   pass 2    per tile: S_b recomputed, turned into G = ∂L/∂S in place, ∂L/∂u_b = G·v/τ and
 *             ∂L/∂v += Gᵀ·u_b/τ (cuBLAS, tile order);
 *   out       one warp per row: through the normalisation, written in the input dtype.
 * The tile holds at most TILE_BYTES; everything else is O(N·D) (the normalised views and
 * their gradients) and O(N).  Deterministic: fixed tiles and orders, no atomics.
 */
#include <algorithm>

#include "gemm.h"
#include "pairs.cuh"
#include "pairs.h"

namespace ploss_cuda {
namespace {

using namespace pairs;

constexpr int LOSS_THREADS = 1024;
constexpr size_t TILE_BYTES = (size_t)64 << 20;

template <class A> struct buffers {
    A *u, *v, *gu, *gv, *tile;
    double *r[2], *diag, *row_lse, *col_m, *col_s, *w;
};

template <class A> __device__ __forceinline__ A exp_a(A v);
template <> __device__ __forceinline__ float exp_a(float v) { return expf(v); }
template <> __device__ __forceinline__ double exp_a(double v) { return exp(v); }

/* Rows 0..N−1: queries into u, rows N..2N−1: keys into v. */
template <class T>
__global__ void __launch_bounds__(THREADS) prep_kernel(const ploss_infonce_problem p, buffers<acc_t<T>> b)
{
    using A = acc_t<T>;
    const int lane = threadIdx.x & 31;
    for (int64_t row = warp_row(); row < 2 * p.N; row += warp_rows_stride()) {
        const int k = row < p.N ? 0 : 1;
        const int64_t i = row - k * p.N;
        const T *x = (const T *)p.x[k].data + i * p.x[k].sn;
        A *out = (k == 0 ? b.u : b.v) + i * p.D;
        A s = 0;
        for (int64_t j = lane; j < p.D; j += 32) {
            const A a = to_acc(x[j * p.x[k].sd]);
            s += a * a;
        }
        s = warp_all_reduce<32>(s, SumOp());
        const double r = sqrt((double)s);
        const A inv = p.normalize ? (A)(1.0 / fmax(r, PLOSS_NORMALIZE_EPS)) : A(1);
        for (int64_t j = lane; j < p.D; j += 32)
            out[j] = to_acc(x[j * p.x[k].sd]) * inv;
        if (lane == 0)
            b.r[k][i] = r;
    }
}

template <class A>
__global__ void __launch_bounds__(THREADS) diag_kernel(const ploss_infonce_problem p, buffers<A> b)
{
    const int lane = threadIdx.x & 31;
    for (int64_t i = warp_row(); i < p.N; i += warp_rows_stride()) {
        A s = 0;
        for (int64_t j = lane; j < p.D; j += 32)
            s += b.u[i * p.D + j] * b.v[i * p.D + j];
        s = warp_all_reduce<32>(s, SumOp());
        if (lane == 0) {
            b.diag[i] = (double)s / p.temperature;
            b.col_m[i] = b.col_s[i] = 0.0;
        }
    }
}

/* One warp per row of the tile (rows b0 …): its log-sum-exp over the N columns. */
template <class A>
__global__ void __launch_bounds__(THREADS) row_lse_kernel(int64_t N, buffers<A> b, int64_t b0, int64_t rows)
{
    const int lane = threadIdx.x & 31;
    for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
        const A *t = b.tile + r * N;
        A m = -INFINITY;
        for (int64_t j = lane; j < N; j += 32)
            m = m > t[j] ? m : t[j];
        m = warp_all_reduce<32>(m, MaxOp());
        A s = 0;
        for (int64_t j = lane; j < N; j += 32)
            s += exp_a(t[j] - m);
        s = warp_all_reduce<32>(s, SumOp());
        if (lane == 0)
            b.row_lse[b0 + r] = (double)m + log((double)s);
    }
}

/* One thread per column: the tile's (max, Σ) merged into the column's running pair. */
template <class A>
__global__ void __launch_bounds__(THREADS) col_lse_kernel(int64_t N, buffers<A> b, int64_t rows)
{
    for (int64_t j = thread_index(); j < N; j += grid_stride()) {
        A m = -INFINITY;
        for (int64_t r = 0; r < rows; ++r)
            m = m > b.tile[r * N + j] ? m : b.tile[r * N + j];
        A s = 0;
        for (int64_t r = 0; r < rows; ++r)
            s += exp_a(b.tile[r * N + j] - m);
        double cm = b.col_m[j], cs = b.col_s[j];
        ploss_lse_merge(&cm, &cs, (double)m, (double)s);
        b.col_m[j] = cm;
        b.col_s[j] = cs;
    }
}

/* One block: the losses (NONE: stored; MEAN/SUM: summed in a fixed order), the columns'
 * log-sum-exps into col_m, and each row's weight w_i (halved when symmetric). */
template <class A>
__global__ void __launch_bounds__(LOSS_THREADS) loss_kernel(const ploss_infonce_problem p, buffers<A> b)
{
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD, none = p.reduction == PLOSS_REDUCTION_NONE;
    const double half = p.symmetric ? 0.5 : 1.0;
    double up = p.scale;
    if (p.pass == PLOSS_PASS_BACKWARD && !none)
        up = load_dyn(p.grad_loss, p.gl_dtype, 0);
    if (p.reduction == PLOSS_REDUCTION_MEAN)
        up /= (double)p.N;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < p.N; i += LOSS_THREADS) {
        const double col_lse = b.col_m[i] + log(b.col_s[i]);
        const double lr = b.row_lse[i] - b.diag[i], lc = col_lse - b.diag[i];
        const double l = p.symmetric ? 0.5 * (lr + lc) : lr;
        if (want_loss && none)
            store_dyn(p.loss, p.loss_dtype, i * p.l_sn, l);
        sum += l;
        b.col_m[i] = col_lse;
        b.w[i] = half * (p.pass == PLOSS_PASS_BACKWARD && none ? load_dyn(p.grad_loss, p.gl_dtype, i * p.gl_sn) : up);
    }
    sum = block_reduce<LOSS_THREADS>(sum, SumOp());
    if (threadIdx.x == 0 && want_loss && !none)
        store_dyn(p.loss, p.loss_dtype, 0, p.reduction == PLOSS_REDUCTION_MEAN ? sum / (double)p.N : sum);
}

/* The tile's S turned into G = w_i(P − δ) + [symmetric] w_j(Q − δ) in place. */
template <class A>
__global__ void __launch_bounds__(THREADS) grad_tile_kernel(const ploss_infonce_problem p, buffers<A> b, int64_t b0,
                                                            int64_t rows)
{
    const int64_t N = p.N;
    for (int64_t e = thread_index(); e < rows * N; e += grid_stride()) {
        const int64_t r = e / N, j = e - r * N, i = b0 + r;
        const A s = b.tile[e], delta = i == j ? A(1) : A(0);
        A g = (A)b.w[i] * (exp_a(s - (A)b.row_lse[i]) - delta);
        if (p.symmetric)
            g += (A)b.w[j] * (exp_a(s - (A)b.col_m[j]) - delta);
        b.tile[e] = g;
    }
}

/* One warp per row of each view: (g − (g·u)u)/‖x‖ (normalize) or g, in the input dtype. */
template <class T>
__global__ void __launch_bounds__(THREADS) out_kernel(const ploss_infonce_problem p, buffers<acc_t<T>> b)
{
    using A = acc_t<T>;
    const int lane = threadIdx.x & 31;
    for (int64_t row = warp_row(); row < 2 * p.N; row += warp_rows_stride()) {
        const int k = row < p.N ? 0 : 1;
        const int64_t i = row - k * p.N;
        const A *g = (k == 0 ? b.gu : b.gv) + i * p.D, *x = (k == 0 ? b.u : b.v) + i * p.D;
        const double r = b.r[k][i];
        A dot = 0, inv = 1;
        if (p.normalize) {
            if (r > PLOSS_NORMALIZE_EPS)
                for (int64_t j = lane; j < p.D; j += 32)
                    dot += g[j] * x[j];
            dot = warp_all_reduce<32>(dot, SumOp());
            inv = (A)(1.0 / fmax(r, PLOSS_NORMALIZE_EPS));
        }
        T *out = (T *)p.grad[k].data + i * p.grad[k].sn;
        for (int64_t j = lane; j < p.D; j += 32)
            out[j * p.grad[k].sd] = from_acc<T>((g[j] - dot * x[j]) * inv);
    }
}

template <class T> ploss_status run(ploss_ctx_t *ctx, const ploss_infonce_problem *p)
{
    using A = acc_t<T>;
    const ploss_dtype adt = sizeof(A) == 8 ? PLOSS_F64 : PLOSS_F32;
    const int64_t N = p->N, D = p->D;
    const bool want_grad = p->pass != PLOSS_PASS_FORWARD;
    cudaStream_t stream = stream_of(ctx);
    const int64_t B = N == 0 ? 0 : std::min<int64_t>(N, std::max<int64_t>(1, (int64_t)(TILE_BYTES / sizeof(A)) / N));
    const size_t nd = (size_t)N * (size_t)D;
    auto layout = [&](char *base, buffers<A> &b) {
        carve c{base, 0};
        b.u = c.take<A>(nd);
        b.v = c.take<A>(nd);
        b.gu = c.take<A>(want_grad ? nd : 0);
        b.gv = c.take<A>(want_grad ? nd : 0);
        b.tile = c.take<A>((size_t)B * (size_t)N);
        b.r[0] = c.take<double>(N);
        b.r[1] = c.take<double>(N);
        b.diag = c.take<double>(N);
        b.row_lse = c.take<double>(N);
        b.col_m = c.take<double>(N);
        b.col_s = c.take<double>(N);
        b.w = c.take<double>(N);
        return c.used + 256;
    };
    buffers<A> b;
    void *ws = NULL;
    ploss_status st = ploss_workspace(ctx, layout(nullptr, b), &ws);
    if (st)
        return st;
    layout((char *)ws, b);

    const double inv_t = 1.0 / p->temperature;
    const int64_t ld = D > 0 ? D : 1;
    auto tile_gemm = [&](int64_t b0, int64_t rows) {
        const ploss_gemm_problem g = {rows, N, D, inv_t, 0.0, b.u + b0 * D, 0, ld, b.v, 1, ld, adt, b.tile, N, adt};
        return ploss_cuda_gemm(ctx, &g);
    };
    if (N > 0) {
        prep_kernel<T><<<row_blocks(2 * N), THREADS, 0, stream>>>(*p, b);
        diag_kernel<A><<<row_blocks(N), THREADS, 0, stream>>>(*p, b);
        if ((st = check_launch("info_nce prep")))
            return st;
    }
    for (int64_t b0 = 0; b0 < N; b0 += B) {
        const int64_t rows = std::min(B, N - b0);
        if ((st = tile_gemm(b0, rows)))
            return st;
        row_lse_kernel<A><<<row_blocks(rows), THREADS, 0, stream>>>(N, b, b0, rows);
        col_lse_kernel<A><<<grid_blocks(N, THREADS), THREADS, 0, stream>>>(N, b, rows);
        if ((st = check_launch("info_nce log-sum-exp")))
            return st;
    }
    loss_kernel<A><<<1, LOSS_THREADS, 0, stream>>>(*p, b);
    if ((st = check_launch("info_nce losses")) || !want_grad || N == 0)
        return st;
    for (int64_t b0 = 0; b0 < N && D > 0; b0 += B) {
        const int64_t rows = std::min(B, N - b0);
        if ((st = tile_gemm(b0, rows)))
            return st;
        grad_tile_kernel<A><<<grid_blocks(rows * N, THREADS), THREADS, 0, stream>>>(*p, b, b0, rows);
        if ((st = check_launch("info_nce gradient tile")))
            return st;
        const ploss_gemm_problem du = {rows, D, N, inv_t, 0.0, b.tile, 0, N, b.v, 0, ld, adt, b.gu + b0 * D, ld, adt};
        const ploss_gemm_problem dv = {N, D, rows, inv_t, b0 == 0 ? 0.0 : 1.0, b.tile, 1, N, b.u + b0 * D, 0, ld, adt,
                                       b.gv, ld, adt};
        if ((st = ploss_cuda_gemm(ctx, &du)) || (st = ploss_cuda_gemm(ctx, &dv)))
            return st;
    }
    if (D == 0)
        return PLOSS_OK;
    out_kernel<T><<<row_blocks(2 * N), THREADS, 0, stream>>>(*p, b);
    return check_launch("info_nce out");
}

} // namespace
} // namespace ploss_cuda

using namespace ploss_cuda;

extern "C" ploss_status ploss_cuda_infonce(ploss_ctx_t *ctx, const ploss_infonce_problem *p)
{
    return dispatch_float(p->dtype, "query", [&](auto tag) {
        using T = typename decltype(tag)::type;
        return run<T>(ctx, p);
    });
}
