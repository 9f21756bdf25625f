/*
 * infonce.cu — CUDA backend of InfoNCE (core/engines/pairs.h).
 *
 * The GEMMs take the inputs x (queries) and y (keys) as they are, in their own dtype (f16 and
 * bf16 on the tensor cores, f32 accumulation; f32 in f32 without TF32; f64 in f64), never a
 * normalised copy: with a_i = 1/max(‖x_i‖, eps) and b_j = 1/max(‖y_j‖, eps) (1 without
 * normalize), S_ij = a_i·b_j·(x_i·y_j)/τ, the scales applied where the tile is read.
 *
 *   prep      one warp per row of each view: its norm and inverse norm (and, for a view the
 *             GEMM cannot address — not unit-stride along D — a packed copy); the diagonal
 *             S_ii from the rows;
 *   lse pass  per tile of query rows: S (f32; f64 for f64) through cuBLAS, one read of it
 *             giving a (max, Σe^(S − max)) partial per row and 256 columns and per column and
 *             32 rows, merged in a fixed order into the rows' log-sum-exps and the columns'
 *             running pairs;
 *   losses    one block: ℓ_i and the reduced loss in a fixed order, each row's weight;
 *   ∂x sweep  per tile of query rows: S recomputed in sub-tiles and turned into
 *             G̃_ij = G_ij·b_j/c (G = ∂L/∂S; c the weights' known factor ½/N for 16-bit input,
 *             1 otherwise) in the GEMM's operand dtype, as PyTorch's autograd rounds the
 *             gradient of a 16-bit S; ∂L/∂u = c/τ·G̃·y (one GEMM, f32 out), then through the
 *             normalisation into ∂L/∂x, written in the input dtype;
 *   ∂y sweep  the same over tiles of key rows, on Sᵀ = b_j·a_i·(y_j·x_i)/τ, whose gradient
 *             Gᵀ has the same form with the roles of the row and column log-sum-exps swapped.
 * Two sweeps rather than one sweep accumulating ∂L/∂v += Gᵀ·u_b per tile: that accumulator is
 * N×D f32 (the workspace bound would not hold) and costs 2·N·D·4 bytes of traffic per tile,
 * where the second sweep costs one more S GEMM (2·N²·D FLOPs at tensor-core rate) and keeps
 * every GEMM output written once.
 *
 * Rectangular and sharded (pairs.h, comm): the queries are this rank's N rows, the keys every
 * rank's M rows gathered (M = N on one device) and query i's positive is key key_offset + i;
 * the keys' column pairs are merged over the ranks in rank order after the lse pass
 * (gathered, colmerge_kernel), the loss weights w are kept for all M samples, a reduced loss
 * sums every rank's row losses (gathered, in a fixed order), and the ∂y sweep writes the
 * partial gradients of all M keys in the accumulation type (f32; f64 for f64) for the
 * front's reduce-scatter.
 *
 * Workspace: the tile area (TILE_BYTES: the G tile plus one f32 S sub-tile of at most
 * S_TILE_BYTES, sized so that it stays in L2 between its GEMM and its reader; for f32/f64 G
 * overwrites S in place), the GEMM output of one G tile (rows × D), the lse partials and
 * O(N) vectors — plus N×D per view that needs packing.  Deterministic: fixed tiles and
 * orders, no atomics.
 */
#include <algorithm>

#include <math_constants.h>

#include "gemm.h"
#include "pairs.cuh"
#include "pairs.h"
#include "infonce_exp_gemm.h" /* its kernels are built with PLOSS_HAVE_CUTLASS alone */

namespace ploss_cuda {
namespace infonce_kernels {
namespace {

using namespace pairs;

constexpr int LOSS_THREADS = 1024;
constexpr size_t TILE_BYTES = (size_t)48 << 20;
constexpr size_t S_TILE_BYTES = (size_t)16 << 20;
/* lse_tile_kernel: a block reads THREADS columns of LSE_ROWS<A> rows (32 KiB of smem). */
template <class A> constexpr int LSE_ROWS = 128 / (int)sizeof(A);
/* grad_tile_kernel: a block covers G_COLS·THREADS columns of G_ROWS rows. */
constexpr int G_ROWS = 8;
constexpr int G_COLS = 2;

template <class A> struct lse_pair {
    A m, s;
};

template <class A> struct buffers {
    A *inv[2];               /* a_i, b_j: the inverse norms (1 without normalize)              */
    double *norm[2];         /* ‖x_i‖, ‖y_j‖                                                    */
    double *diag, *row_lse;  /* S_i,off+i; the rows' log-sum-exps                               */
    double *col_m, *col_s;   /* the columns' running (max, Σ); col_m holds lse after the losses */
    double *w;               /* each sample's loss weight over the G scale c (M of them)        */
    double *losses;          /* sharded: the rows' losses, then every rank's (M)                */
    double *all_m, *all_s;   /* sharded: every rank's column pairs (R·M each)                   */
    lse_pair<A> *rpart;      /* per tile row and 256 columns                                    */
    lse_pair<A> *cpart;      /* per 32 tile rows and column                                     */
    /* the fused path (bf16, normalised): */
    float *scaled[2];        /* a_i·log2(e)/τ, b_j·log2(e)/τ: the GEMMs' row scales              */
    float *u, *v;            /* a sweep's per-row and per-column gradient factors               */
};

/* The fused path's fixed shift (natural units): with |S| ≤ 1/τ, E = e^(S − 1/τ + top) lies in
 * [e^(top − 2/τ), e^top]; top = max(0, 2/τ − 80) keeps the smallest within fp32's normal
 * range (≥ e^−80) and the largest at 1 where it can — the exponent of the dominant terms
 * then near 0, where fp32 is finest — and at most e^48 for 2/τ ≤ 128. */
constexpr double FUSED_MIN_EXP = 80.0;
[[maybe_unused]] constexpr double FUSED_MAX_INV_T = 64.0;
/* The fused lse pass takes chunks of at most this many query rows (a multiple of the GEMM's
 * tile): the partials stay a few MiB, and 4096 × N still fills the device many times over. */
[[maybe_unused]] constexpr int64_t FUSED_SUMS_ROWS = 4096;

template <class A> __device__ __forceinline__ A exp_a(A v);
template <> __device__ __forceinline__ float exp_a(float v) { return expf(v); }
template <> __device__ __forceinline__ double exp_a(double v) { return exp(v); }

/* Rows 0..N−1: queries, rows N..N+M−1: keys; pack[k] non-null: view k copied to rows×D. */
template <class T>
__global__ void __launch_bounds__(THREADS) prep_kernel(const ploss_infonce_problem p, buffers<acc_t<T>> b,
                                                       T *pack0, T *pack1)
{
    using A = acc_t<T>;
    const int lane = threadIdx.x & 31;
    for (int64_t row = warp_row(); row < p.N + p.M; row += warp_rows_stride()) {
        const int k = row < p.N ? 0 : 1;
        const int64_t i = row - k * p.N;
        const T *x = (const T *)p.x[k].data + i * p.x[k].sn;
        T *pack = k == 0 ? pack0 : pack1;
        A s = 0;
        for (int64_t j = lane; j < p.D; j += 32) {
            const T t = x[j * p.x[k].sd];
            const A a = to_acc(t);
            s += a * a;
            if (pack)
                pack[i * p.D + j] = t;
        }
        s = warp_all_reduce<32>(s, SumOp());
        const double r = sqrt((double)s);
        if (lane == 0) {
            b.norm[k][i] = r;
            b.inv[k][i] = p.normalize ? (A)(1.0 / fmax(r, PLOSS_NORMALIZE_EPS)) : A(1);
        }
    }
}

/* S_i,off+i (query i with its positive key) from the rows. */
template <class T>
__global__ void __launch_bounds__(THREADS) diag_kernel(const ploss_infonce_problem p, buffers<acc_t<T>> b)
{
    using A = acc_t<T>;
    const int lane = threadIdx.x & 31;
    for (int64_t i = warp_row(); i < p.N; i += warp_rows_stride()) {
        const int64_t k = p.key_offset + i;
        const T *x = (const T *)p.x[0].data + i * p.x[0].sn, *y = (const T *)p.x[1].data + k * p.x[1].sn;
        A s = 0;
        for (int64_t j = lane; j < p.D; j += 32)
            s += to_acc(x[j * p.x[0].sd]) * to_acc(y[j * p.x[1].sd]);
        s = warp_all_reduce<32>(s, SumOp());
        if (lane == 0)
            b.diag[i] = (double)s * (double)b.inv[0][i] * (double)b.inv[1][k] / p.temperature;
    }
}

/* Sharded: each key's column pair merged over the ranks' (all_m, all_s: R blocks of M, rank
 * order) into col_m, col_s. */
template <class A>
__global__ void __launch_bounds__(THREADS) colmerge_kernel(int64_t M, int R, buffers<A> b)
{
    for (int64_t j = thread_index(); j < M; j += grid_stride()) {
        double m = 0.0, s = 0.0;
        for (int q = 0; q < R; ++q)
            ploss_lse_merge(&m, &s, b.all_m[(size_t)q * M + j], b.all_s[(size_t)q * M + j]);
        b.col_m[j] = m;
        b.col_s[j] = s;
    }
}

/* One read of the lse tile S (rows × N, unscaled: the row i = b0 + r has scale a_i·b_j):
 * block (bx, by) covers columns bx·THREADS … and rows by·LSE_ROWS …; each thread its column's
 * (max, Σ) over those rows into cpart[by·N + j], each warp a few rows' (max, Σ) over those
 * columns (staged through shared memory) into rpart[r·gridDim.x + bx]. */
template <class A>
__global__ void __launch_bounds__(THREADS) lse_tile_kernel(const A *S, int64_t N, int64_t rows, const A *inv_r,
                                                           const A *inv_c, lse_pair<A> *rpart, lse_pair<A> *cpart)
{
    constexpr int R = LSE_ROWS<A>;
    __shared__ A sm[R][THREADS + 1];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int64_t c0 = (int64_t)blockIdx.x * THREADS, c = c0 + t, r0 = (int64_t)blockIdx.y * R;
    const int nr = (int)std::min<int64_t>(R, rows - r0);
    if (c < N) {
        const A ic = inv_c[c];
        A v[R], m = -INFINITY, s = 0;
#pragma unroll
        for (int k = 0; k < R; ++k)
            if (k < nr) {
                v[k] = S[(r0 + k) * N + c] * inv_r[r0 + k] * ic;
                m = MaxOp()(m, v[k]);
                sm[k][t] = v[k];
            }
#pragma unroll
        for (int k = 0; k < R; ++k)
            if (k < nr)
                s += exp_a(v[k] - m);
        cpart[blockIdx.y * N + c] = {m, s};
    }
    __syncthreads();
    const int ncol = (int)std::min<int64_t>(THREADS, N - c0);
    for (int k = warp; k < nr; k += WARPS) {
        A m = -INFINITY, s = 0;
        for (int q = lane; q < ncol; q += 32)
            m = MaxOp()(m, sm[k][q]);
        m = warp_all_reduce<32>(m, MaxOp());
        for (int q = lane; q < ncol; q += 32)
            s += exp_a(sm[k][q] - m);
        s = warp_all_reduce<32>(s, SumOp());
        if (lane == 0)
            rpart[(r0 + k) * gridDim.x + blockIdx.x] = {m, s};
    }
}

/* The partials of one lse tile (rows b0 … b0 + rows − 1) merged in a fixed order: the first
 * ncb blocks one thread per column, its row-block partials merged into its running pair in
 * order; the others one warp per row, its column-block partials into its log-sum-exp
 * (the largest max first, then Σ s·e^(m − max) over lanes and a fixed warp tree). */
template <class A>
__global__ void __launch_bounds__(THREADS) lse_merge_kernel(int64_t N, buffers<A> b, int64_t b0, int64_t rows,
                                                            int64_t ncb, int64_t nrb)
{
    if (blockIdx.x < ncb) {
        const int64_t j = (int64_t)blockIdx.x * THREADS + threadIdx.x;
        if (j >= N)
            return;
        double m = b.col_m[j], s = b.col_s[j];
        for (int64_t q = 0; q < nrb; ++q) {
            const lse_pair<A> pr = b.cpart[q * N + j];
            ploss_lse_merge(&m, &s, (double)pr.m, (double)pr.s);
        }
        b.col_m[j] = m;
        b.col_s[j] = s;
        return;
    }
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)(blockIdx.x - ncb) * WARPS + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    const lse_pair<A> *pr = b.rpart + r * ncb;
    double m = -INFINITY, s = 0.0;
    for (int64_t q = lane; q < ncb; q += 32)
        m = fmax(m, (double)pr[q].m);
    m = warp_all_reduce<32>(m, MaxOp());
    for (int64_t q = lane; q < ncb; q += 32)
        s += (double)pr[q].s * exp((double)pr[q].m - m);
    s = warp_all_reduce<32>(s, SumOp());
    if (lane == 0)
        b.row_lse[b0 + r] = m + log(s);
}

/* One block: the keys' column log-sum-exps into col_m and each sample's weight w_j (halved
 * when symmetric) over gscale (all M samples); then the rows' losses (NONE: stored; MEAN/SUM:
 * summed in a fixed order and stored, or, sharded, kept in b.losses for the gather). */
template <class A>
__global__ void __launch_bounds__(LOSS_THREADS) loss_kernel(const ploss_infonce_problem p, buffers<A> b,
                                                            double gscale)
{
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD, none = p.reduction == PLOSS_REDUCTION_NONE;
    const double half = p.symmetric ? 0.5 : 1.0;
    double up = p.scale;
    if (p.pass == PLOSS_PASS_BACKWARD && !none)
        up = load_dyn(p.grad_loss, p.gl_dtype, 0);
    if (p.reduction == PLOSS_REDUCTION_MEAN)
        up /= (double)p.M;
    for (int64_t j = threadIdx.x; j < p.M; j += LOSS_THREADS) {
        b.col_m[j] += log(b.col_s[j]);
        b.w[j] = half * (p.pass == PLOSS_PASS_BACKWARD && none ? load_dyn(p.grad_loss, p.gl_dtype, j * p.gl_sn) : up) /
                 gscale;
    }
    __syncthreads();
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < p.N; i += LOSS_THREADS) {
        const double lr = b.row_lse[i] - b.diag[i], lc = b.col_m[p.key_offset + i] - b.diag[i];
        const double l = p.symmetric ? 0.5 * (lr + lc) : lr;
        if (want_loss && none)
            store_dyn(p.loss, p.loss_dtype, i * p.l_sn, l);
        else if (p.comm)
            b.losses[i] = l;
        sum += l;
    }
    if (p.comm)
        return;
    sum = block_reduce<LOSS_THREADS>(sum, SumOp());
    if (threadIdx.x == 0 && want_loss && !none)
        store_dyn(p.loss, p.loss_dtype, 0, p.reduction == PLOSS_REDUCTION_MEAN ? sum / (double)p.N : sum);
}

/* Sharded, a reduced loss: every rank's M row losses (gathered) summed in a fixed order. */
__global__ void __launch_bounds__(LOSS_THREADS) reduced_loss_kernel(const ploss_infonce_problem p,
                                                                    const double *losses)
{
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < p.M; i += LOSS_THREADS)
        sum += losses[i];
    sum = block_reduce<LOSS_THREADS>(sum, SumOp());
    if (threadIdx.x == 0)
        store_dyn(p.loss, p.loss_dtype, 0, p.reduction == PLOSS_REDUCTION_MEAN ? sum / (double)p.M : sum);
}

/* What a sweep over the rows of one view needs of the two views: its rows' and the other
 * view's inverse norms, log-sum-exps and loss weights, whether each of the two terms of G is
 * present, and the offsets that pair them (row r and column c are a positive pair where
 * r + off_own = c + off_other).  ∂x sweep: own = the queries (the rows' lse, weights
 * w[key_offset + i], off_own = key_offset), f_own = 1, f_other = symmetric; ∂y sweep: own =
 * the keys (the columns' lse, w[j]), off_other = key_offset, f_own = symmetric, f_other = 1. */
template <class A> struct side {
    const A *inv_own, *inv_other;
    const double *lse_own, *lse_other;
    const double *w_own, *w_other;
    int64_t off_own, off_other;
    bool f_own, f_other;
};

/* S sub-tile (srows × N columns, unscaled) → G̃ (same shape, operand dtype T): with
 * s = S·a_r·b_c,
 *   G = f_own·w_r·(e^(s − lse_own_r) − δ) + f_other·w_c·(e^(s − lse_other_c) − δ),
 *   G̃ = G·b_c (w over the G scale already).
 * For T = A, G may be S itself (each element read and written by the same thread). */
template <class T, class A>
__global__ void __launch_bounds__(THREADS) grad_tile_kernel(const A *S, T *G, int64_t N, int64_t srows, int64_t row0,
                                                            const side<A> sd)
{
    A ic[G_COLS], mc[G_COLS], wc[G_COLS];
    int64_t col[G_COLS];
#pragma unroll
    for (int q = 0; q < G_COLS; ++q) {
        col[q] = ((int64_t)blockIdx.x * G_COLS + q) * THREADS + threadIdx.x;
        const bool ok = col[q] < N;
        ic[q] = ok ? sd.inv_other[col[q]] : A(0);
        mc[q] = ok ? (A)sd.lse_other[col[q]] : A(0);
        wc[q] = ok ? (A)sd.w_other[col[q]] : A(0);
    }
    for (int rr = 0; rr < G_ROWS; ++rr) {
        const int64_t r = (int64_t)blockIdx.y * G_ROWS + rr;
        if (r >= srows)
            break;
        const int64_t i = row0 + r;
        const A ir = sd.inv_own[i], lr = (A)sd.lse_own[i], wr = (A)sd.w_own[i];
#pragma unroll
        for (int q = 0; q < G_COLS; ++q) {
            if (col[q] >= N)
                continue;
            const int64_t e = r * N + col[q];
            const A s = S[e] * ir * ic[q], delta = i + sd.off_own == col[q] + sd.off_other ? A(1) : A(0);
            A g = 0;
            if (sd.f_own)
                g = wr * (exp_a(s - lr) - delta);
            if (sd.f_other)
                g += wc[q] * (exp_a(s - mc[q]) - delta);
            G[e] = convert<T>(g * ic[q]);
        }
    }
}

/* One warp per row i = b0 + r of view k: ∂L/∂u_i (row r of out) through the normalisation,
 * (g − a_i²(g·x_i)x_i)·a_i (g alone without normalize), written in the input dtype. */
template <class T>
__global__ void __launch_bounds__(THREADS) finish_kernel(const ploss_infonce_problem p, int k, const acc_t<T> *out,
                                                         const double *norm, int64_t b0, int64_t rows)
{
    using A = acc_t<T>;
    const int lane = threadIdx.x & 31;
    const int64_t D = p.D;
    for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
        const int64_t i = b0 + r;
        const A *g = out + r * D;
        const T *x = (const T *)p.x[k].data + i * p.x[k].sn;
        A dot = 0, inv = 1;
        if (p.normalize) {
            const double rn = norm[i];
            if (rn > PLOSS_NORMALIZE_EPS)
                for (int64_t j = lane; j < D; j += 32)
                    dot += g[j] * to_acc(x[j * p.x[k].sd]);
            dot = warp_all_reduce<32>(dot, SumOp());
            inv = (A)(1.0 / fmax(rn, PLOSS_NORMALIZE_EPS));
        }
        const A c = inv * inv * dot;
        if (k == 1 && p.comm) { /* sharded: partial sums of the keys (A) for the front's reduce-scatter */
            A *o = (A *)p.grad[1].data + i * p.grad[1].sn;
            for (int64_t j = lane; j < D; j += 32)
                o[j * p.grad[1].sd] = (g[j] - c * to_acc(x[j * p.x[1].sd])) * inv;
            continue;
        }
        T *o = (T *)p.grad[k].data + i * p.grad[k].sn;
        for (int64_t j = lane; j < D; j += 32)
            o[j * p.grad[k].sd] = from_acc<T>((g[j] - c * to_acc(x[j * p.x[k].sd])) * inv);
    }
}

/* The fused path (kernels/pairs/infonce_exp_gemm.cu): the GEMMs' row scales of both views. */
template <class A>
__global__ void __launch_bounds__(THREADS) fused_scales_kernel(int64_t N, int64_t M, buffers<A> b, float k2)
{
    for (int64_t i = thread_index(); i < N + M; i += grid_stride()) {
        const int k = i < N ? 0 : 1;
        b.scaled[k][i - k * N] = (float)b.inv[k][i - k * N] * k2;
    }
}

/* Where the sums GEMM puts the partials of `rows` query rows against M keys
 * (infonce_exp_gemm.h): row i's of column tile t at i + Mr·t (Mr·nt of them), then column
 * j's of row tile q at j + Nr·q (Nr·nq). */
struct fused_sums_layout {
    int64_t Mr, nt, Nr, nq;
    __host__ __device__ fused_sums_layout(int64_t rows, int64_t M)
        : Mr((rows + PLOSS_INFONCE_EXP_TILE_M - 1) / PLOSS_INFONCE_EXP_TILE_M * PLOSS_INFONCE_EXP_TILE_M),
          nt((M + PLOSS_INFONCE_EXP_TILE_N - 1) / PLOSS_INFONCE_EXP_TILE_N),
          Nr(nt * PLOSS_INFONCE_EXP_TILE_N), nq(Mr / PLOSS_INFONCE_EXP_TILE_M)
    {
    }
    __host__ __device__ int64_t row_partials() const { return Mr * nt; }
    __host__ __device__ int64_t col_partials() const { return Nr * nq; }
};

/* The fused path: the partial sums of E of one chunk of query rows (b0 … b0 + rows − 1)
 * added in a fixed order: the first ncb blocks one thread per key column j, its row-tile
 * partials into col_s[j] (col_m[j] the shift: its log-sum-exp is then col_m + log col_s, as
 * the unfused path's running pair); the others one thread per row, its column-tile partials
 * into the row's log-sum-exp. */
template <class A>
__global__ void __launch_bounds__(THREADS) fused_merge_kernel(int64_t M, buffers<A> b, const float *row_sums,
                                                              const float *col_sums, int64_t b0, int64_t rows,
                                                              int64_t ncb, double shift)
{
    if (blockIdx.x < ncb) {
        const int64_t j = (int64_t)blockIdx.x * THREADS + threadIdx.x;
        if (j >= M)
            return;
        const fused_sums_layout L(rows, M);
        double s = b.col_s[j];
        for (int64_t q = 0; q < L.nq; ++q)
            s += (double)col_sums[j + L.Nr * q];
        b.col_s[j] = s;
        b.col_m[j] = shift;
        return;
    }
    const int64_t r = (int64_t)(blockIdx.x - ncb) * THREADS + threadIdx.x;
    if (r >= rows)
        return;
    const fused_sums_layout L(rows, M);
    double s = 0.0;
    for (int64_t t = 0; t < L.nt; ++t)
        s += (double)row_sums[r + L.Mr * t];
    b.row_lse[b0 + r] = shift + log(s);
}

/* The fused path, one sweep's gradient factors: G_ij = E_ij·(u_i + v_j) off the positive
 * pairs, with u_i = f_own·w_i·e^(shift − lse_own_i) (nrows of them) and v_j likewise from the
 * other view's (ncols). */
template <class A>
__global__ void __launch_bounds__(THREADS) fused_factors_kernel(const side<A> sd, int64_t nrows, int64_t ncols,
                                                                float *u, float *v, double shift)
{
    for (int64_t i = thread_index(); i < nrows + ncols; i += grid_stride()) {
        if (i < nrows)
            u[i] = sd.f_own ? (float)(sd.w_own[i] * exp(shift - sd.lse_own[i])) : 0.0f;
        else {
            const int64_t j = i - nrows;
            v[j] = sd.f_other ? (float)(sd.w_other[j] * exp(shift - sd.lse_other[j])) : 0.0f;
        }
    }
}

/* The fused path: the positive pair of each row of a G tile (rows b0 …, row stride ldg)
 * written over the epilogue's value, with its −δ and from S_ii in double (diag, by query). */
template <class T, class A>
__global__ void __launch_bounds__(THREADS) fused_positive_kernel(T *G, int64_t ldg, int64_t b0, int64_t rows,
                                                                 int64_t ncols, int k, const double *diag,
                                                                 const side<A> sd)
{
    for (int64_t r = thread_index(); r < rows; r += grid_stride()) {
        const int64_t i = b0 + r, c = i + sd.off_own - sd.off_other;
        if (c < 0 || c >= ncols)
            continue;
        const double s = diag[k == 0 ? i : c];
        double g = 0.0;
        if (sd.f_own)
            g = sd.w_own[i] * (exp(s - sd.lse_own[i]) - 1.0);
        if (sd.f_other)
            g += sd.w_other[c] * (exp(s - sd.lse_other[c]) - 1.0);
        G[r * ldg + c] = convert<T>((A)g * sd.inv_other[c]);
    }
}

/* Whether cuBLAS can read view v as it is: element (i, j) at data + i·ld + j, ld ≥ D. */
static bool gemm_addressable(const ploss_pair_operand &v, int64_t N, int64_t D)
{
    return (D <= 1 || v.sd == 1) && (N <= 1 || (v.sn >= D && v.sn <= INT32_MAX));
}

template <class T> ploss_status run(ploss_ctx_t *ctx, const ploss_infonce_problem *p)
{
    using A = acc_t<T>;
    const ploss_dtype tdt = p->dtype, adt = sizeof(A) == 8 ? PLOSS_F64 : PLOSS_F32;
    /* N queries (this rank's), M keys (M = N on one device); rows[k], the rows of view k */
    const int64_t N = p->N, M = p->M, D = p->D, rows_of[2] = {N, M};
    const int ranks = p->comm ? ploss_comm_size(p->comm) : 1;
    const bool want_grad = p->pass != PLOSS_PASS_FORWARD && N > 0 && D > 0;
    cudaStream_t stream = stream_of(ctx);

    /* Tiles (rows of at most M columns): Bs rows of S (≤ S_TILE_BYTES), G tiles of B rows (a
     * multiple of Bs) filling TILE_BYTES with the S sub-tile; the lse pass uses the whole area
     * for S tiles of Bl rows. */
    const bool in_place = sizeof(T) == sizeof(A);
    const size_t sb = (size_t)std::max<int64_t>(M, 1) * sizeof(A), gb = (size_t)std::max<int64_t>(M, 1) * sizeof(T);
    const int64_t Bs = std::max<int64_t>(1, std::min<int64_t>(M, (int64_t)(S_TILE_BYTES / sb)));
    const size_t s_sub = in_place ? 0 : (size_t)Bs * sb;
    const int64_t per = std::max<int64_t>(1, TILE_BYTES > s_sub ? (int64_t)((TILE_BYTES - s_sub) / ((size_t)Bs * gb)) : 1);
    const int64_t B = std::max<int64_t>(1, std::min<int64_t>(M, Bs * per));
    const size_t g_bytes = align_up((size_t)B * gb); /* the S sub-tile after it, aligned */
    const size_t area = g_bytes + s_sub;
    const int64_t Bl = std::max<int64_t>(1, std::min<int64_t>(N, (int64_t)(area / sb)));
    const int64_t col_blocks = (M + THREADS - 1) / THREADS, lse_row_blocks = (Bl + LSE_ROWS<A> - 1) / LSE_ROWS<A>;

    bool pack[2];
    int64_t ld[2]; /* the GEMM operands' leading dimensions: the views', or D packed */
    for (int k = 0; k < 2; ++k) {
        pack[k] = !gemm_addressable(p->x[k], rows_of[k], D);
        ld[k] = std::max<int64_t>(1, pack[k] || rows_of[k] <= 1 ? D : p->x[k].sn);
    }

    /* The fused path (bf16 normalised views on a compute capability 9.0 device, one rank):
     * S bounded by 1/τ, so the similarity GEMMs' epilogues take E = e^(S − shift) with no
     * max — the sums GEMM its rows' and columns' sums, the gradient GEMM each sweep's G tile
     * (infonce_exp_gemm.cu) — and no f32 S exists.  Its TMA copies want 16-byte rows: D and
     * N multiples of 8 (the G tile's rows, N long), the views' row strides too and their
     * bases 16-byte aligned (else they take the tiles below).  The area holds the sums'
     * partials of Bf query rows in the lse pass, G tiles of Gf rows in the sweeps. */
    bool fused = false;
    size_t gemm_ws = 0, farea = 0;
    [[maybe_unused]] int64_t Bf = 1;
    int64_t Gf = 1;
    [[maybe_unused]] const int64_t ldg = M; /* the G tile's row stride */
    [[maybe_unused]] auto sums_bytes = [&](int64_t rows) {
        const fused_sums_layout L(rows, M);
        return (size_t)(L.row_partials() + L.col_partials()) * sizeof(float) + 256;
    };
#ifdef PLOSS_HAVE_CUTLASS
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        fused = p->normalize && !p->comm && N > 0 && N == M && N % 8 == 0 && D > 0 && D % 8 == 0 &&
                N < ((int64_t)1 << 30) &&
                D < ((int64_t)1 << 30) && 1.0 / p->temperature <= FUSED_MAX_INV_T &&
                ploss_cuda_sm90a_serves(ctx->device.device_id);
        for (int k = 0; k < 2 && fused; ++k) /* the TMA: 16-byte rows and base */
            fused = pack[k] || (ld[k] % 8 == 0 && (uintptr_t)p->x[k].data % 16 == 0);
        if (fused) {
            const int64_t tm = PLOSS_INFONCE_EXP_TILE_M;
            Bf = std::min<int64_t>({N, FUSED_SUMS_ROWS,
                                    std::max<int64_t>(1, (int64_t)(TILE_BYTES / (sums_bytes(tm) - 256))) * tm});
            Gf = std::min<int64_t>(N, std::max<int64_t>(1, (int64_t)(TILE_BYTES / ((size_t)ldg * sizeof(T)))));
            farea = std::max(sums_bytes(Bf), (size_t)Gf * (size_t)ldg * sizeof(T));
            size_t need[2] = {0, 0};
            const ploss_infonce_exp_gemm sums = {Bf, M, D, nullptr, ld[0], nullptr, ld[1], nullptr, nullptr, 0.0f,
                                                 nullptr, nullptr, nullptr, nullptr, nullptr, 0};
            ploss_infonce_exp_gemm grad = sums;
            grad.M = Gf;
            grad.D = (void *)&need; /* any non-null: the gradient GEMM's probe */
            grad.ldd = ldg;
            fused = ploss_cuda_infonce_exp_gemm(&sums, nullptr, 0, &need[0], nullptr) == PLOSS_OK &&
                    ploss_cuda_infonce_exp_gemm(&grad, nullptr, 0, &need[1], nullptr) == PLOSS_OK;
            gemm_ws = fused ? std::max(need[0], need[1]) : 0;
        }
    }
#endif

    T *packed[2];
    char *tile = nullptr, *fused_ws = nullptr;
    A *out = nullptr;
    auto layout = [&](char *base, buffers<A> &b) {
        carve c{base, 0};
        /* null for a view used as it is: prep_kernel packs exactly the views whose pointer is
         * set (take(0) would hand out the start of the next piece, the tile) */
        for (int k = 0; k < 2; ++k)
            packed[k] = pack[k] ? c.take<T>((size_t)rows_of[k] * (size_t)D) : nullptr;
        tile = c.take<char>(N > 0 ? (fused ? farea : area) : 0);
        out = c.take<A>(want_grad ? (size_t)(fused ? Gf : B) * (size_t)D : 0);
        b.rpart = c.take<lse_pair<A>>(fused ? 0 : (size_t)Bl * (size_t)col_blocks);
        b.cpart = c.take<lse_pair<A>>(fused ? 0 : (size_t)lse_row_blocks * (size_t)M);
        fused_ws = c.take<char>(gemm_ws);
        for (int k = 0; k < 2; ++k)
            b.scaled[k] = c.take<float>(fused ? rows_of[k] : 0);
        b.u = c.take<float>(fused ? N : 0);
        b.v = c.take<float>(fused ? M : 0);
        for (int k = 0; k < 2; ++k) {
            b.inv[k] = c.take<A>(rows_of[k]);
            b.norm[k] = c.take<double>(rows_of[k]);
        }
        b.diag = c.take<double>(N);
        b.row_lse = c.take<double>(N);
        b.col_m = c.take<double>(M);
        b.col_s = c.take<double>(M);
        b.w = c.take<double>(M);
        b.losses = p->comm ? c.take<double>((size_t)N + (size_t)M) : nullptr;
        b.all_m = p->comm ? c.take<double>((size_t)ranks * (size_t)M) : nullptr;
        b.all_s = p->comm ? c.take<double>((size_t)ranks * (size_t)M) : nullptr;
        return c.used + 256;
    };
    buffers<A> b;
    void *ws = NULL;
    ploss_status st = ploss_workspace(ctx, layout(nullptr, b), &ws);
    if (st)
        return st;
    layout((char *)ws, b);

    /* The GEMM operands: the views themselves, or their packed copies. */
    const T *op[2];
    for (int k = 0; k < 2; ++k)
        op[k] = pack[k] ? packed[k] : (const T *)p->x[k].data;
    const double inv_t = 1.0 / p->temperature;
    /* the fused path's E = 2^(x·y·(a·log2(e)/τ)·b − shift2) = e^(S − shift): shift is the
     * fp32 shift2 the epilogue subtracts, taken back to natural units in double */
    [[maybe_unused]] const float shift2 = (float)((inv_t - std::max(0.0, 2.0 * inv_t - FUSED_MIN_EXP)) * CUDART_L2E);
    [[maybe_unused]] const double shift = (double)shift2 * CUDART_LN2;
    /* S (rows × the other view's rows, f32/f64) = x_{k, r0…}·x_{1−k}ᵀ/τ, unscaled by the norms. */
    auto s_gemm = [&](int k, int64_t r0, int64_t rows, A *S) {
        const int64_t cols = rows_of[1 - k];
        const ploss_gemm_problem g = {rows, cols, D, inv_t, 0.0, op[k] + r0 * ld[k], 0, ld[k],
                                      op[1 - k], 1, ld[1 - k], tdt, S, cols, adt};
        return ploss_cuda_gemm(ctx, &g);
    };

    if (M > 0) {
        prep_kernel<T><<<row_blocks(N + M), THREADS, 0, stream>>>(*p, b, packed[0], packed[1]);
        diag_kernel<T><<<row_blocks(N), THREADS, 0, stream>>>(*p, b);
        if ((st = check_launch("info_nce prep")) ||
            (st = ploss_cuda_memset(b.col_m, 0, (size_t)M * sizeof(double), stream)) ||
            (st = ploss_cuda_memset(b.col_s, 0, (size_t)M * sizeof(double), stream)))
            return st;
    }
#ifdef PLOSS_HAVE_CUTLASS
    if (fused) {
        fused_scales_kernel<A><<<grid_blocks(N + M, THREADS), THREADS, 0, stream>>>(N, M, b, (float)(inv_t * CUDART_L2E));
        if ((st = check_launch("info_nce scales")))
            return st;
    }
    for (int64_t b0 = 0; fused && b0 < N; b0 += Bf) {
        const int64_t rows = std::min(Bf, N - b0);
        float *row_sums = (float *)tile, *col_sums = row_sums + fused_sums_layout(rows, M).row_partials();
        const ploss_infonce_exp_gemm g = {rows,     M,      D,      op[0] + b0 * ld[0], ld[0],   op[1],   ld[1],
                                          b.scaled[0] + b0, (const float *)b.inv[1], shift2, row_sums,
                                          col_sums, nullptr, nullptr, nullptr, 0};
        if ((st = ploss_cuda_infonce_exp_gemm(&g, fused_ws, gemm_ws, nullptr, stream)))
            return st;
        const unsigned merge_blocks = (unsigned)(col_blocks + (rows + THREADS - 1) / THREADS);
        fused_merge_kernel<A><<<merge_blocks, THREADS, 0, stream>>>(M, b, row_sums, col_sums, b0, rows, col_blocks,
                                                                   shift);
        if ((st = check_launch("info_nce sums")))
            return st;
    }
#endif
    for (int64_t b0 = 0; !fused && b0 < N; b0 += Bl) {
        const int64_t rows = std::min(Bl, N - b0);
        A *S = (A *)tile;
        if ((st = s_gemm(0, b0, rows, S)))
            return st;
        const dim3 grid((unsigned)col_blocks, (unsigned)((rows + LSE_ROWS<A> - 1) / LSE_ROWS<A>));
        lse_tile_kernel<A><<<grid, THREADS, 0, stream>>>(S, M, rows, b.inv[0] + b0, b.inv[1], b.rpart, b.cpart);
        const unsigned merge_blocks = (unsigned)(col_blocks + (rows + WARPS - 1) / WARPS);
        lse_merge_kernel<A><<<merge_blocks, THREADS, 0, stream>>>(M, b, b0, rows, col_blocks, (int64_t)grid.y);
        if ((st = check_launch("info_nce log-sum-exp")))
            return st;
    }
    /* sharded: the keys' column pairs merged over the ranks */
    if (p->comm && M > 0) {
        if ((st = ploss_sharded_gather(p->comm, b.col_m, b.all_m, M, PLOSS_F64)) ||
            (st = ploss_sharded_gather(p->comm, b.col_s, b.all_s, M, PLOSS_F64)))
            return st;
        colmerge_kernel<A><<<grid_blocks(M, THREADS), THREADS, 0, stream>>>(M, ranks, b);
        if ((st = check_launch("info_nce column merge")))
            return st;
    }
    /* 16-bit G carries the known part of the weights (½, 1/M) in alpha, so that its values
     * are O(P) rather than O(P/M), where f16 would flush them to zero. */
    double gscale = 1.0;
    if (sizeof(T) == 2)
        gscale = (p->symmetric ? 0.5 : 1.0) / (p->reduction == PLOSS_REDUCTION_MEAN ? (double)M : 1.0);
    loss_kernel<A><<<1, LOSS_THREADS, 0, stream>>>(*p, b, gscale);
    if ((st = check_launch("info_nce losses")))
        return st;
    /* sharded, a reduced loss: every rank's row losses, summed alike on every rank */
    if (p->comm && p->pass != PLOSS_PASS_BACKWARD && p->reduction != PLOSS_REDUCTION_NONE) {
        if ((st = ploss_sharded_gather(p->comm, b.losses, b.losses + N, N, PLOSS_F64)))
            return st;
        reduced_loss_kernel<<<1, LOSS_THREADS, 0, stream>>>(*p, b.losses + N);
        if ((st = check_launch("info_nce reduced loss")))
            return st;
    }
    if (!want_grad)
        return PLOSS_OK;

    T *G = (T *)tile;
    A *S_sub = in_place ? nullptr : (A *)(tile + g_bytes);
    /* rows b0 … b0 + rows − 1 of view k from their G tile (row stride ldgt): ∂L/∂u = c/τ·G̃·y
     * (f32 out), then through the normalisation */
    auto gradient_rows = [&](int k, int64_t b0, int64_t rows, int64_t ldgt) {
        const ploss_gemm_problem du = {rows, D, rows_of[1 - k], inv_t * gscale, 0.0, G, 0, ldgt, op[1 - k], 0,
                                       ld[1 - k], tdt, out, D, adt};
        ploss_status s = ploss_cuda_gemm(ctx, &du);
        if (s)
            return s;
        finish_kernel<T><<<row_blocks(rows), THREADS, 0, stream>>>(*p, k, out, b.norm[k], b0, rows);
        return check_launch("info_nce out");
    };
    for (int k = 0; k < 2; ++k) {
        const int64_t nrows = rows_of[k], ncols = rows_of[1 - k];
        const double *w_q = b.w + p->key_offset; /* the queries' weights */
        const side<A> sd = {b.inv[k], b.inv[1 - k], k == 0 ? b.row_lse : b.col_m, k == 0 ? b.col_m : b.row_lse,
                            k == 0 ? w_q : b.w, k == 0 ? b.w : w_q, k == 0 ? p->key_offset : 0,
                            k == 0 ? 0 : p->key_offset, k == 0 || p->symmetric != 0, k == 1 || p->symmetric != 0};
#ifdef PLOSS_HAVE_CUTLASS
        if (fused) {
            fused_factors_kernel<A><<<grid_blocks(nrows + ncols, THREADS), THREADS, 0, stream>>>(sd, nrows, ncols, b.u,
                                                                                             b.v, shift);
            if ((st = check_launch("info_nce gradient factors")))
                return st;
        }
        for (int64_t b0 = 0; fused && b0 < nrows; b0 += Gf) {
            const int64_t rows = std::min(Gf, nrows - b0);
            const ploss_infonce_exp_gemm g = {rows,      ncols,   D,       op[k] + b0 * ld[k],
                                              ld[k],     op[1 - k], ld[1 - k], b.scaled[k] + b0,
                                              (const float *)b.inv[1 - k], shift2, nullptr, nullptr,
                                              b.u + b0,  b.v,     G,       ldg};
            if ((st = ploss_cuda_infonce_exp_gemm(&g, fused_ws, gemm_ws, nullptr, stream)))
                return st;
            fused_positive_kernel<T, A><<<grid_blocks(rows, THREADS), THREADS, 0, stream>>>(G, ldg, b0, rows, ncols, k,
                                                                                          b.diag, sd);
            if ((st = check_launch("info_nce positive pairs")))
                return st;
            if ((st = gradient_rows(k, b0, rows, ldg)))
                return st;
        }
#endif
        for (int64_t b0 = 0; !fused && b0 < nrows; b0 += B) {
            const int64_t rows = std::min(B, nrows - b0);
            for (int64_t s0 = b0; s0 < b0 + rows; s0 += Bs) {
                const int64_t srows = std::min(Bs, b0 + rows - s0);
                T *Gs = G + (s0 - b0) * ncols;
                A *S = in_place ? (A *)Gs : S_sub;
                if ((st = s_gemm(k, s0, srows, S)))
                    return st;
                const dim3 grid((unsigned)((ncols + G_COLS * THREADS - 1) / (G_COLS * THREADS)),
                                (unsigned)((srows + G_ROWS - 1) / G_ROWS));
                grad_tile_kernel<T, A><<<grid, THREADS, 0, stream>>>(S, Gs, ncols, srows, s0, sd);
                if ((st = check_launch("info_nce gradient tile")))
                    return st;
            }
            if ((st = gradient_rows(k, b0, rows, ncols)))
                return st;
        }
    }
    return PLOSS_OK;
}

} // namespace

extern "C" ploss_status ploss_cuda_infonce(ploss_ctx_t *ctx, const ploss_infonce_problem *p)
{
    return dispatch_float(p->dtype, "query", [&](auto tag) {
        using T = typename decltype(tag)::type;
        return run<T>(ctx, p);
    });
}

} // namespace infonce_kernels
} // namespace ploss_cuda
