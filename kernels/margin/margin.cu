/*
 * margin.cu — CUDA backend of the margin softmax losses (core/engines/margin.h),
 * f32/f16/bf16 inputs, fp32 arithmetic:
 *
 *   sample    Partial FC (sample_n > 0): the classes of the labels flagged, every class's
 *             Philox key sorted with CUB (stable: ties by class), the first k = n_s − |P|
 *             classes of that order outside P kept with P, and their list and positions
 *             from a scan — the front's draw (margin.h), on the device;
 *   prep      one warp per row of x and of the (kept) centres: the row copied as it is into a
 *             contiguous X (N×D) or W (K×D) of the input dtype, and 1/max(‖row‖, ε); one
 *             block counts the rows that are not ignored ('mean') and reports labels outside
 *             [0, C) through the error slot;
 *   tiles     f32/bf16 with s <= 64 on one device, the shifted path (below run_shifted): per
 *             chunk of rows, tiles of columns of the products (cuBLAS, fp32), each read once
 *             into e^(s(c − 1) + TOP) and row sums — for bf16 on sm_90 with CUTLASS, one
 *             product GEMM that writes those exponentials and sums from its epilogue
 *             (margin_exp_gemm.cu) —, the rows, the gradient products on those
 *             exponentials.  Otherwise (f16, larger scales, sharded):
 *             per tile of rows: the products X_b·Wᵀ (cuBLAS, fp32 accumulation and output);
 *             one pass over them (cosine_rows: the row engine's register rows and its
 *             process_row with the margin policy, kernels/rows/policy_margin.cuh) scales
 *             each row into its cosines c_ij = x_i·w_j/(n_i·n_j) in registers, writes the
 *             row's loss, and G' = (∂L/∂c)/(n_i·n_j) in the input dtype into the chunk's
 *             gradient rows; per chunk of such rows, P = G'·W and Q (+)= G'ᵀ·X (cuBLAS, fp32
 *             output, chunk order);
 *   losses    the per-row losses of a reduced loss summed in a fixed order by one block;
 *   out       one warp per row of x and of the centres: P_i = ∂L/∂x̂_i / n_i, so ∂L/∂x_i =
 *             P_i − (P_i·x̂_i)·x̂_i (P_i where the norm is clamped), likewise Q for the
 *             centres, written in the input dtype.
 * The products run on the inputs themselves (tensor cores for f16/bf16) and the cosines are
 * those of the given values: no normalised copy is rounded to the input dtype for them; only
 * the gradient products' operands are (G', or the shifted path's E, Ŵ and a ⊙ X̂).  A tile holds at most TILE_BYTES of fp32 products (or
 * opts.tile_rows rows), a chunk at most GRAD_BYTES of G' (opts.tile_rows: one tile), so the
 * gradient products usually run once over all N rows; the rest is O((N + C)·D) (the copies
 * and the fp32 gradient sums) and O(N + C), all in the context's workspace, and the GEMMs
 * take none: nothing is allocated, and nothing synchronised but Partial FC's kept count when
 * the batch may hold more classes than n_s (N >= n_s: one 8-byte copy to the host).
 * The products run over Kp = K rounded up to 8 classes: cuBLAS has only unaligned kernels,
 * 3–4× slower, for a product whose contiguous extent is not a multiple of 8 (Partial FC's
 * 10,001 kept classes), so the centres' copy has Kp − K zero rows, the tiles and G' rows
 * of Kp values, and G''s last Kp − K columns are zeroed before ∂x̂ = G'·Ŵ.
 * Deterministic: fixed tiles, chunks and orders, no float atomics.  Partial FC: W holds the
 * kept centres, the labels become their positions among them, and the centres not kept get
 * a zero gradient.
 */
#include <algorithm>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "gemm.h"
#include "margin.h"
#ifdef PLOSS_HAVE_CUTLASS
#include "margin_exp_gemm.h"
#endif
#include "pairs/pairs.cuh"
#include "philox.h"
#include "policy_margin.cuh"

namespace ploss_cuda {
namespace {

using namespace pairs;
namespace re = row_engine;

constexpr size_t TILE_BYTES = (size_t)256 << 20;
constexpr size_t GRAD_BYTES = (size_t)2 << 30;

template <class T> struct buffers {
    T *xc, *wc;       /* the rows of x and of the (kept) centres, contiguous, as given    */
    float *inv_x, *inv_w; /* 1/max(‖row‖, ε)                                         */
    double *rx, *rw;  /* ‖row‖                                                          */
    float *tile;      /* the products of a tile                                          */
    T *gt;            /* G' (shifted path: E) of a chunk (f32 with chunks of one tile:
                         the tile itself)                                                */
    float *gx, *gw;   /* P (N×D) and Q (K×D)                                             */
    double *losses, *divisor; /* divisor[0]: rows not ignored, divisor[1]: its inverse (0 for none) */
    /* Partial FC (null without): the kept classes, each class's position among them, and
     * the labels as those positions */
    int64_t *kept, *class_pos, *labels;
    /* sharded: a tile's row statistics (3 per row), then every rank's */
    float *stats;
    /* the shifted path (null without): the normalised centres Ŵ (K×D, input dtype), each
     * row's target cosine, its factor a_i of ∂x, the tiles' partial sums (a column tile
     * after another, R rows each) and the rows a_i·x̂_i of the chunk (R×D, input dtype) */
    T *wn;
    float *cy;
    float *ax;
    float *part;
    T *xs;
    /* the fused product GEMM (margin_exp_gemm.cu; null without): each row's scale
     * s·log2(e)/n_i and target column (a float, −1: none), and the chunk rows' partial sums
     * of E (fp32, from the GEMM's epilogue) */
    float *rs, *rt, *sums;
};

/* Partial FC's draw on the device (sample_n > 0), C entries each: flag (a class of the
 * batch), the Philox keys and their classes before and after the sort, cand (a sorted
 * entry outside the batch) and its exclusive scan rank, keep and its exclusive scan pos,
 * count (the kept classes), and CUB's scratch. */
struct draw_buffers {
    int *flag, *cls_in, *cls, *cand, *rank, *keep, *pos;
    uint64_t *key_in, *key;
    int64_t *count;
    void *scratch;
    size_t scratch_bytes;
};

/* The batch's classes: flag[j] = 1 for every label y = class_offset + j of the block (ignored
 * ones skipped, and those outside every rank's classes: count_labels_kernel reports them). */
__global__ void __launch_bounds__(THREADS) flag_kernel(const ploss_margin_problem p, int *flag)
{
    for (int64_t i = thread_index(); i < p.N; i += grid_stride()) {
        const int64_t y = load_int_dyn(p.labels, p.label_dtype, i * p.y_sn), j = y - p.class_offset;
        if (y != p.ignore_index && j >= 0 && j < p.C)
            flag[j] = 1;
    }
}

/* Each class's draw key (the front's: the first two Philox words of counter = the global
 * class id, offset + j). */
__global__ void __launch_bounds__(THREADS) key_kernel(int64_t C, int64_t offset, uint64_t seed, uint64_t *key, int *cls)
{
    for (int64_t j = thread_index(); j < C; j += grid_stride()) {
        const ploss_philox4 r = ploss_philox((uint64_t)(offset + j), seed);
        key[j] = ((uint64_t)r.v[0] << 32) | r.v[1];
        cls[j] = (int)j;
    }
}

/* cand[t]: the t-th class in key order is outside the batch. */
__global__ void __launch_bounds__(THREADS) cand_kernel(int64_t C, const int *flag, const int *cls, int *cand)
{
    for (int64_t t = thread_index(); t < C; t += grid_stride())
        cand[t] = !flag[cls[t]];
}

/* keep: the batch's classes and the first k = n_s − |P| others in key order (|P| = C minus
 * the candidates, the scan's total). */
__global__ void __launch_bounds__(THREADS)
    pick_kernel(int64_t C, int64_t n_s, const int *flag, const int *cls, const int *cand, const int *rank, int *keep)
{
    const int64_t npos = C - ((int64_t)rank[C - 1] + cand[C - 1]), k = n_s - npos;
    for (int64_t t = thread_index(); t < C; t += grid_stride()) {
        const int j = cls[t];
        keep[j] = flag[j] || (cand[t] && rank[t] < k);
    }
}

/* The kept classes in ascending order, each class's position among them (−1: not kept),
 * and their count. */
__global__ void __launch_bounds__(THREADS)
    list_kernel(int64_t C, const int *keep, const int *pos, int64_t *kept, int64_t *class_pos, int64_t *count)
{
    for (int64_t j = thread_index(); j < C; j += grid_stride()) {
        class_pos[j] = keep[j] ? pos[j] : -1;
        if (keep[j])
            kept[pos[j]] = j;
        if (j == C - 1)
            *count = (int64_t)pos[j] + keep[j];
    }
}

/* CUB's scratch for the draw's sort and scans of C entries (sizes only: nothing runs). */
ploss_status draw_scratch_bytes(int64_t C, size_t *bytes)
{
    size_t sort = 0, scan = 0;
    ploss_status st;
    if ((st = cub_status(cub::DeviceRadixSort::SortPairs(nullptr, sort, (const uint64_t *)nullptr,
                                                         (uint64_t *)nullptr, (const int *)nullptr, (int *)nullptr,
                                                         (int)C),
                         "Partial FC: sizing the sort of the draw keys")) ||
        (st = cub_status(cub::DeviceScan::ExclusiveSum(nullptr, scan, (const int *)nullptr, (int *)nullptr, (int)C),
                         "Partial FC: sizing the scan of the kept classes")))
        return st;
    *bytes = std::max(sort, scan);
    return PLOSS_OK;
}

/* Partial FC's kept classes into b.kept / b.class_pos and their count into d.count. */
ploss_status draw_classes(const ploss_margin_problem &p, const draw_buffers &d, int64_t *kept, int64_t *class_pos,
                          cudaStream_t stream)
{
    const int64_t C = p.C;
    const unsigned gc = grid_blocks(C, THREADS);
    ploss_status st;
    if ((st = ploss_cuda_memset(d.flag, 0, (size_t)C * sizeof(int), stream)))
        return st;
    if (p.N > 0)
        flag_kernel<<<grid_blocks(p.N, THREADS), THREADS, 0, stream>>>(p, d.flag);
    key_kernel<<<gc, THREADS, 0, stream>>>(C, p.class_offset, p.seed, d.key_in, d.cls_in);
    size_t bytes = d.scratch_bytes;
    if ((st = cub_status(cub::DeviceRadixSort::SortPairs(d.scratch, bytes, d.key_in, d.key, d.cls_in, d.cls, (int)C,
                                                         0, 64, stream),
                         "Partial FC: sorting the draw keys")))
        return st;
    cand_kernel<<<gc, THREADS, 0, stream>>>(C, d.flag, d.cls, d.cand);
    bytes = d.scratch_bytes;
    if ((st = cub_status(cub::DeviceScan::ExclusiveSum(d.scratch, bytes, d.cand, d.rank, (int)C, stream),
                         "Partial FC: ranking the candidates")))
        return st;
    pick_kernel<<<gc, THREADS, 0, stream>>>(C, p.sample_n, d.flag, d.cls, d.cand, d.rank, d.keep);
    bytes = d.scratch_bytes;
    if ((st = cub_status(cub::DeviceScan::ExclusiveSum(d.scratch, bytes, d.keep, d.pos, (int)C, stream),
                         "Partial FC: numbering the kept classes")))
        return st;
    list_kernel<<<gc, THREADS, 0, stream>>>(C, d.keep, d.pos, kept, class_pos, d.count);
    return check_launch("Partial FC: the kept classes");
}

/* A row's elements in runs of V = vec16<T>::N (16 bytes): lane l takes the runs at
 * j = l·V, l·V + 32·V, …; the rows that are not whole aligned vectors take the same
 * elements one by one, so both add in the same order (the same norms and products). */

/* Whether rows of D elements (unit element stride, sn apart) at data are whole aligned
 * vectors. */
template <class T> bool rows_in_vectors(const void *data, int64_t sn, int64_t sd, int64_t D)
{
    constexpr int64_t V = vec16<T>::N;
    return (sd == 1 || D <= 1) && D % V == 0 && sn % V == 0 && (uintptr_t)data % 16 == 0;
}

/* The run of a row from j (vec: one 16-byte load; else the elements below D, 0 past it). */
template <class T>
__device__ __forceinline__ uint4 load_run(const T *row, int64_t sd, int64_t j, int64_t D, bool vec)
{
    if (vec)
        return *reinterpret_cast<const uint4 *>(row + j);
    uint4 u = {};
#pragma unroll
    for (int k = 0; k < vec16<T>::N; ++k)
        if (j + k < D)
            vec16<T>::set(u, k, to_acc(row[(j + k) * sd]));
    return u;
}

/* Stores the run of a row from j (vec: one 16-byte store; else the elements below D). */
template <class T>
__device__ __forceinline__ void store_run(T *row, int64_t sd, int64_t j, int64_t D, bool vec, const uint4 &u)
{
    if (vec) {
        *reinterpret_cast<uint4 *>(row + j) = u;
        return;
    }
    for (int k = 0; k < vec16<T>::N && j + k < D; ++k)
        row[(j + k) * sd] = from_acc<T>(vec16<T>::get(u, k));
}

/* One warp per row: rows [0, N) of x, rows [N, N + K) of the (kept) centres; xvec/wvec:
 * whether x's and the centres' rows are whole vectors (rows_in_vectors).  Where b.xc or b.wc
 * is the input itself nothing is copied. */
template <class T>
__global__ void __launch_bounds__(THREADS) prep_kernel(const ploss_margin_problem p, buffers<T> b, bool xvec,
                                                       bool wvec)
{
    constexpr int V = vec16<T>::N;
    const int lane = threadIdx.x & 31;
    const bool ovec = p.D % V == 0; /* the copies' rows (D apart) are whole vectors */
    for (int64_t row = warp_row(); row < p.N + p.K; row += warp_rows_stride()) {
        const bool is_x = row < p.N, vec = is_x ? xvec : wvec;
        const int64_t i = is_x ? row : row - p.N;
        const ploss_pair_operand &op = is_x ? p.x : p.w;
        const T *v = (const T *)op.data + (is_x || !b.kept ? i : b.kept[i]) * op.sn;
        T *out = (is_x ? b.xc : b.wc) + i * p.D;
        const bool copy = out != v;
        float s = 0.0f;
        for (int64_t j = lane * V; j < p.D; j += 32 * V) {
            const uint4 e = load_run(v, op.sd, j, p.D, vec);
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const float a = vec16<T>::get(e, k);
                s += a * a;
            }
            if (copy)
                store_run(out, 1, j, p.D, ovec, e);
        }
        s = warp_all_reduce<32>(s, SumOp());
        const double r = sqrt((double)s);
        const float inv = (float)(1.0 / fmax(r, PLOSS_NORMALIZE_EPS));
        if (lane == 0) {
            (is_x ? b.rx : b.rw)[i] = r;
            (is_x ? b.inv_x : b.inv_w)[i] = inv;
            if (is_x && b.rs)
                b.rs[i] = (float)(p.margin.s * CUDART_L2E) * inv;
        }
        if (!is_x && b.wn) /* each lane reads back what it wrote */
            for (int64_t j = lane * V; j < p.D; j += 32 * V) {
                uint4 e = load_run<T>(out, 1, j, p.D, ovec);
#pragma unroll
                for (int k = 0; k < V; ++k)
                    vec16<T>::set(e, k, vec16<T>::get(e, k) * inv);
                store_run(b.wn + i * p.D, 1, j, p.D, ovec, e);
            }
    }
}

/* Partial FC's position of an ignored row: no kept class's (an ignore_index in [0, C) may
 * be one), the ignore_index of the rows that take the positions. */
constexpr int64_t KEPT_IGNORED = -1;

/* Partial FC: each label as its class's position among the kept ones (every class of a row
 * that is not ignored is kept), KEPT_IGNORED for an ignored row; a label outside [0, C)
 * stays outside [0, K) and is not KEPT_IGNORED (−2 for a negative one), an invalid row for
 * the row kernel; count_labels_kernel, which runs first, has reported its value. */
template <class T> __global__ void __launch_bounds__(THREADS) remap_kernel(const ploss_margin_problem p, buffers<T> b)
{
    for (int64_t i = thread_index(); i < p.N; i += grid_stride()) {
        const int64_t y = load_int_dyn(p.labels, p.label_dtype, i * p.y_sn);
        b.labels[i] = y == p.ignore_index ? KEPT_IGNORED : y < 0 ? KEPT_IGNORED - 1 : y >= p.C ? y : b.class_pos[y];
    }
}

/* A tile row held in registers (the row engine's RegRow over its fp32 products), as
 * process_row sees it: scale() turns the products into the cosines x·(1/n_i·1/n_j) in place,
 * each() hands them to the policy, and write() stores G'_ij = G_ij·(1/n_i·1/n_j) in the input
 * dtype T — the scaling of the products and of the gradient in the one pass over the row. */
template <class T, int LANES, int K> struct CosineRow : re::RegRow<float, re::kRowNV, LANES, K> {
    using Base = re::RegRow<float, re::kRowNV, LANES, K>;
    using Base::gi;
    using Base::GT;
    using Base::hc;
    using Base::hv;
    using Base::jt;
    using Base::nfull;
    using Base::raw;
    using Base::tv;
    static constexpr int VEC = Base::VEC;
    const float *inv_w; /* 1/n_j of every class                                          */
    float inv_x;        /* 1/n_i of the row                                              */

    /* 1/(n_i·n_j) for the VEC classes jb, jb + 1, … of an aligned vector (one 16-byte load
     * of inv_w where the row starts on a vector boundary) */
    __device__ __forceinline__ float4 factors(int jb) const
    {
        const float4 w = hc == 0 ? *reinterpret_cast<const float4 *>(inv_w + jb)
                                 : make_float4(inv_w[jb], inv_w[jb + 1], inv_w[jb + 2], inv_w[jb + 3]);
        return make_float4(inv_x * w.x, inv_x * w.y, inv_x * w.z, inv_x * w.w);
    }
    __device__ __forceinline__ void scale()
    {
#pragma unroll
        for (int k = 0; k < re::kRowNV; ++k) {
            const int q = k * GT + gi;
            if (q < nfull) {
                const float4 f = factors(hc + q * VEC);
                raw[k] = make_uint4(__float_as_uint(__uint_as_float(raw[k].x) * f.x),
                                    __float_as_uint(__uint_as_float(raw[k].y) * f.y),
                                    __float_as_uint(__uint_as_float(raw[k].z) * f.z),
                                    __float_as_uint(__uint_as_float(raw[k].w) * f.w));
            }
        }
        if (hv)
            this->xh *= inv_x * inv_w[gi];
        if (tv)
            this->xt *= inv_x * inv_w[jt + gi];
    }
    /* Stores g(c, j, is_y)·(1/n_i·1/n_j) for this thread's classes at gr[j·gsc]. */
    template <class G> __device__ __forceinline__ void write(T *gr, int64_t gsc, int y, G &&g)
    {
        struct alignas(VEC * sizeof(T)) pack {
            T v[VEC];
        };
        const bool gvec = gsc == 1 && ((uintptr_t)(gr + hc) & (sizeof(pack) - 1)) == 0;
#pragma unroll
        for (int k = 0; k < re::kRowNV; ++k) {
            launder(raw[k]);
            const int q = k * GT + gi;
            if (q < nfull) {
                const int jb = hc + q * VEC;
                const float4 f = factors(jb);
                const float fe[VEC] = {f.x, f.y, f.z, f.w};
                pack o;
#pragma unroll
                for (int e = 0; e < VEC; ++e)
                    o.v[e] = from_acc<T>(g(vec16<float>::get(raw[k], e), jb + e, jb + e == y) * fe[e]);
                if (gvec)
                    reinterpret_cast<pack *>(gr + hc)[q] = o;
                else
#pragma unroll
                    for (int e = 0; e < VEC; ++e)
                        gr[(int64_t)(jb + e) * gsc] = o.v[e];
            }
        }
        if (hv)
            gr[(int64_t)gi * gsc] = from_acc<T>(g(this->xh, gi, gi == y) * (inv_x * inv_w[gi]));
        if (tv) {
            const int j = jt + gi;
            gr[(int64_t)j * gsc] = from_acc<T>(g(this->xt, j, j == y) * (inv_x * inv_w[j]));
        }
    }
};

/* Ask the L2 for this block's share (1/K, in 16-byte units) of the fp32 row at `row` (C
 * values) without waiting: one bulk prefetch (sm_90), issued by one thread. */
__device__ __forceinline__ void prefetch_row_share(const float *row, int64_t C, int rank, int K)
{
#if PLOSS_ROW_ENGINE_SM90
    const uintptr_t base = (uintptr_t)row, end = (base + (uintptr_t)C * sizeof(float)) & ~(uintptr_t)15;
    const uintptr_t start = (base + 15) & ~(uintptr_t)15;
    if (end <= start)
        return;
    const uintptr_t share = ((end - start) / (uintptr_t)K + 15) & ~(uintptr_t)15;
    const uintptr_t lo = start + (uintptr_t)rank * share, hi = lo + share < end ? lo + share : end;
    if (lo < hi)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(lo), "r"((unsigned)(hi - lo)) : "memory");
#else
    (void)row, (void)C, (void)rank, (void)K;
#endif
}

/* The rows of a tile (a.x: rows × C fp32 products, a.grad: their G' rows of T), LANES·K
 * threads a row as the row engine's rows_kernel (a warp, a block, or a cluster of K blocks),
 * walked with a grid stride; each row's loss to a.loss (reduction 'none' per row).  A
 * cluster (launched one wave of them) asks the L2 for its next row while it works on this
 * one, so that row's reads from memory overlap this row's reductions and cluster barriers. */
template <class T, int LANES, int THREADS, int K>
__global__ void __launch_bounds__(THREADS, 1024 / THREADS)
    cosine_rows(const re::RowArgs a, const re::MarginPolicy pol, const float *inv_x, const float *inv_w)
{
    constexpr int RPB = THREADS / LANES; /* rows per block at a time */
    int rank = 0;
#if PLOSS_ROW_ENGINE_SM90
    if constexpr (K > 1)
        rank = (int)re::cg::this_cluster().block_rank();
#endif
    const int lane = (int)threadIdx.x % LANES, group = (int)threadIdx.x / LANES;
    const int64_t cid = (int64_t)blockIdx.x / K, ncl = (int64_t)gridDim.x / K;
    const float omega = a.pass != PLOSS_PASS_FORWARD && !(a.pass == PLOSS_PASS_BACKWARD &&
                                                            a.reduction == PLOSS_REDUCTION_NONE)
                            ? re::common_omega(a)
                            : 0.0f;
    CosineRow<T, LANES, K> row;
    row.gi = rank * LANES + lane;
    row.lead = row.gi == 0;
    row.inv_w = inv_w;
    double acc = 0.0; /* unused: the rows' losses are stored one by one */
    for (int64_t r = cid * RPB + group; r < a.N; r += ncl * RPB) {
        if constexpr (K > 1)
            if (threadIdx.x == 0 && r + ncl < a.N)
                prefetch_row_share((const float *)a.x + (r + ncl) * a.x_sn, a.C, rank, K);
        const int64_t y = sample_label(a, r, 0);
        row.load((const float *)a.x + r * a.x_sn, (int)a.C);
        row.inv_x = inv_x[r];
        row.scale();
        re::process_row<T>(a, pol, row, r, 0, y, omega, acc);
#if PLOSS_ROW_ENGINE_SM90
        if constexpr (K > 1)
            re::cg::this_cluster().sync(); /* the reduction slots may be written again */
#endif
    }
#if PLOSS_ROW_ENGINE_SM90
    if constexpr (K > 1)
        re::cg::this_cluster().sync(); /* no block leaves while another may read its slots */
#endif
}

/* cosine_rows over the rows of `a` in the row engine's shapes: a warp per row (8 rows per
 * block) for short rows when there are enough of them, else a block of 512 threads per row,
 * alone or in a cluster of 2, 4 or 8 (sm_90).  PLOSS_ERR_UNSUPPORTED, with nothing launched,
 * where the rows are too long. */
template <class T>
ploss_status launch_cosine_rows(ploss_ctx_t *ctx, const re::RowArgs &a, const re::MarginPolicy &pol,
                                const float *inv_x, const float *inv_w, cudaStream_t stream)
{
    constexpr int NB = re::kBlockThreads, VEC = vec16<float>::N;
    int K = 0;
    if (a.C > re::warp_capacity<float>() || a.N < re::kWarpRowsMin) {
        K = 1;
        while (K <= re::kMaxCluster && (a.C / VEC + K - 1) / K > (int64_t)re::kRowNV * NB)
            K *= 2;
        if (K > re::kMaxCluster ||
            (K > 1 && !re::sm90_ready(ctx->device.device_id, (const void *)cosine_rows<T, NB, NB, 2>)))
            return PLOSS_ERR_UNSUPPORTED;
    }
    /* rows (warps) or clusters of the grid: the rows' losses are stored one by one, so the
     * results do not depend on it */
    const int64_t per_block = K == 0 ? 8 : 1;
    const int64_t units = std::max<int64_t>(1, std::min<int64_t>((a.N + per_block - 1) / per_block,
                                                                 4096 * (K == 0 ? 1 : 16)));
    if (K == 0) {
        cosine_rows<T, 32, 256, 1><<<(unsigned)units, 256, 0, stream>>>(a, pol, inv_x, inv_w);
        return check_launch("margin rows (a warp per row)");
    }
    auto kernel = K == 1   ? cosine_rows<T, NB, NB, 1>
                  : K == 2 ? cosine_rows<T, NB, NB, 2>
                  : K == 4 ? cosine_rows<T, NB, NB, 4>
                           : cosine_rows<T, NB, NB, 8>;
    if (K == 1) {
        kernel<<<(unsigned)units, NB, 0, stream>>>(a, pol, inv_x, inv_w);
        return check_launch("margin rows (a block per row)");
    }
    /* clusters: one wave of them, each prefetching its next row (H200, ArcFace's 100,000
     * classes: 8.19 → 8.05 ms; a wave of single blocks measured 1 % slower, not taken) */
    const int64_t clusters = std::min(units, std::max<int64_t>(1, resident_blocks(kernel, NB, units * K, K) / K));
    return re::launch_clusters(kernel, clusters, K, NB, stream, "margin rows", a, pol, inv_x, inv_w);
}

/* One warp per row of x and of the centres: P_i − (P_i·x̂_i)·x̂_i (P_i where the norm is
 * clamped), in the input dtype; zeros for the centres not kept (Partial FC).  xvec/wvec:
 * whether the rows of grad_x and grad_w are whole vectors (rows_in_vectors). */
template <class T>
__global__ void __launch_bounds__(THREADS) out_kernel(const ploss_margin_problem p, buffers<T> b, bool xvec,
                                                      bool wvec)
{
    constexpr int V = vec16<T>::N;
    const int lane = threadIdx.x & 31;
    const bool ivec = p.D % V == 0; /* the rows of xc, wc, gx, gw (D apart) are whole vectors */
    for (int64_t row = warp_row(); row < p.N + p.C; row += warp_rows_stride()) {
        const bool is_x = row < p.N;
        const int64_t k = is_x ? row : row - p.N;
        const ploss_pair_grad &out = is_x ? p.grad_x : p.grad_w;
        /* sharded ∂x: f32 partial sums for the front's reduce-scatter */
        const bool f32_out = is_x && p.comm, vec = (is_x ? xvec : wvec) && !f32_out;
        T *o = (T *)out.data + k * out.sn;
        auto store = [&](int64_t j, const float *g) {
            if (f32_out) {
                for (int e = 0; e < V && j + e < p.D; ++e)
                    ((float *)out.data)[k * out.sn + (j + e) * out.sd] = g[e] * (float)p.grad_x_factor;
                return;
            }
            uint4 w;
#pragma unroll
            for (int e = 0; e < V; ++e)
                vec16<T>::set(w, e, g[e]);
            store_run(o, out.sd, j, p.D, vec, w);
        };
        const int64_t i = is_x || !b.class_pos ? k : b.class_pos[k];
        if (i < 0) {
            const float zero[V] = {};
            for (int64_t j = lane * V; j < p.D; j += 32 * V)
                store(j, zero);
            continue;
        }
        const float *gs = (is_x ? b.gx : b.gw) + i * p.D;
        const T *v = (is_x ? b.xc : b.wc) + i * p.D;
        const bool clamped = (is_x ? b.rx : b.rw)[i] <= PLOSS_NORMALIZE_EPS;
        const float inv = (is_x ? b.inv_x : b.inv_w)[i];
        /* the shifted path's products are E·Ŵ and Eᵀ·(a ⊙ X̂): P_i = (a_i/n_i)·(E·Ŵ)_i and
         * Q_j = (Eᵀ·(a ⊙ X̂))_j/n_j, the factor in double (a_i/n_i alone may exceed f32) */
        const double f = !b.ax ? 1.0 : (is_x ? (double)b.ax[i] : 1.0) * (double)inv;
        /* the V gradient entries from j and the V entries of the row's unit vector */
        auto load = [&](int64_t j, float *g, float *u) {
            if (ivec) {
                const float4 g0 = *reinterpret_cast<const float4 *>(gs + j);
                g[0] = g0.x, g[1] = g0.y, g[2] = g0.z, g[3] = g0.w;
                if (V == 8) {
                    const float4 g1 = *reinterpret_cast<const float4 *>(gs + j + 4);
                    g[4] = g1.x, g[5] = g1.y, g[6] = g1.z, g[7] = g1.w;
                }
            } else
                for (int e = 0; e < V; ++e)
                    g[e] = j + e < p.D ? gs[j + e] : 0.0f;
            const uint4 x = load_run<T>(v, 1, j, p.D, ivec);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                if (b.ax)
                    g[e] = (float)((double)g[e] * f);
                u[e] = vec16<T>::get(x, e) * inv;
            }
        };
        float g[V], u[V], dot = 0.0f;
        if (!clamped)
            for (int64_t j = lane * V; j < p.D; j += 32 * V) {
                load(j, g, u);
#pragma unroll
                for (int e = 0; e < V; ++e)
                    dot += g[e] * u[e];
            }
        dot = warp_all_reduce<32>(dot, SumOp());
        for (int64_t j = lane * V; j < p.D; j += 32 * V) {
            load(j, g, u);
#pragma unroll
            for (int e = 0; e < V; ++e)
                g[e] -= dot * u[e];
            store(j, g);
        }
    }
}

/* Row i's gradient factor ω: its upstream gradient (and the 'mean' divisor's inverse,
 * divisor[1]), or the fused pass's scale. */
__device__ __forceinline__ double row_omega(const ploss_margin_problem &p, const double *divisor, int64_t i)
{
    if (p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE)
        return load_dyn(p.grad_loss, p.gl_dtype, i * p.gl_sn);
    return (p.pass == PLOSS_PASS_FUSED ? p.scale : load_dyn(p.grad_loss, p.gl_dtype, 0)) *
           (p.reduction == PLOSS_REDUCTION_MEAN ? divisor[1] : 1.0);
}

/* ---- sharded calls (margin.h): a block of SHARD_THREADS threads per row of a tile ---- */

constexpr int SHARD_THREADS = 256;

/* Each row's statistics over the block's K classes (tile: the fp32 products), three floats:
 * the max M of the non-target cosines, S = Σ e^(s(c − M)) over them, the target's cosine
 * (0 where the block does not hold it). */
template <class T>
__global__ void __launch_bounds__(SHARD_THREADS)
    shard_stats_kernel(const ploss_margin_problem p, const buffers<T> b, int64_t b0, int64_t rows, int64_t K,
                       int64_t ld, float *stats)
{
    const float s = (float)p.margin.s;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t i = b0 + r;
        const int64_t y = load_int_dyn(p.labels, p.label_dtype, i * p.y_sn);
        const int64_t j = ploss_margin_shard_class(&p, b.class_pos, y);
        const float *row = b.tile + r * ld;
        const float ix = b.inv_x[i];
        float m = -CUDART_INF_F;
        for (int64_t k = threadIdx.x; k < K; k += SHARD_THREADS)
            if (k != j)
                m = fmaxf(m, row[k] * (ix * b.inv_w[k]));
        const float M = block_all_reduce<SHARD_THREADS>(m, MaxOp());
        float sum = 0.0f;
        if (M > -CUDART_INF_F)
            for (int64_t k = threadIdx.x; k < K; k += SHARD_THREADS)
                if (k != j)
                    sum += __expf(s * (row[k] * (ix * b.inv_w[k]) - M));
        sum = block_reduce<SHARD_THREADS>(sum, SumOp());
        if (threadIdx.x == 0) {
            stats[3 * r] = M;
            stats[3 * r + 1] = sum;
            stats[3 * r + 2] = j >= 0 ? row[j] * (ix * b.inv_w[j]) : 0.0f;
        }
    }
}

/* Each row from the ranks' statistics (all: R blocks of 3·rows floats, rank order): the
 * merge M = max M_q, S = Σ S_q·e^(s(M_q − M)), the owner's c_y; the row's loss into
 * b.losses (and p.loss for this rank's rows with 'none'), and G' = (∂L/∂c)/(n_i·n_j) over
 * the block's classes into gt. */
template <class T>
__global__ void __launch_bounds__(SHARD_THREADS)
    shard_rows_kernel(const ploss_margin_problem p, const buffers<T> b, int64_t b0, int64_t rows, int64_t K,
                      int64_t ld, const float *all, int R, T *gt)
{
    const double s = p.margin.s;
    const bool want_grad = p.pass != PLOSS_PASS_FORWARD, none = p.reduction == PLOSS_REDUCTION_NONE;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t i = b0 + r;
        const int64_t y = load_int_dyn(p.labels, p.label_dtype, i * p.y_sn);
        const bool ignored = y == p.ignore_index || y < 0 || y >= p.classes_total;
        double M = -CUDART_INF, S = 0.0, cy = 0.0;
        for (int q = 0; q < R; ++q)
            M = fmax(M, (double)all[(size_t)q * 3 * rows + 3 * r]);
        for (int q = 0; q < R; ++q) {
            const float *f = all + (size_t)q * 3 * rows + 3 * r;
            if (f[1] > 0.0f)
                S += (double)f[1] * exp(s * ((double)f[0] - M));
            cy += (double)f[2];
        }
        double pn = 0.0, dphi = 0.0;
        const double loss = ignored ? 0.0 : ploss_margin_row_loss(&p.margin, S, cy, M, &pn, &dphi);
        if (threadIdx.x == 0 && p.pass != PLOSS_PASS_BACKWARD) {
            b.losses[i] = loss;
            if (none && i >= p.loss_row0 && i < p.loss_row0 + p.loss_rows)
                store_state(p.loss, p.loss_dtype, (i - p.loss_row0) * p.l_sn, loss);
        }
        if (!want_grad)
            continue;
        T *g = gt + r * ld;
        if (ignored) {
            for (int64_t k = threadIdx.x; k < K; k += SHARD_THREADS)
                g[k] = from_acc<T>(0.0f);
            continue;
        }
        const double w = row_omega(p, b.divisor, i);
        const int64_t j = ploss_margin_shard_class(&p, b.class_pos, y);
        const float kf = (float)(w * s * pn), gy = (float)(-w * s * dphi * S * pn), Mf = (float)M, sf = (float)s;
        const float *row = b.tile + r * ld;
        const float ix = b.inv_x[i];
        for (int64_t k = threadIdx.x; k < K; k += SHARD_THREADS) {
            const float f = ix * b.inv_w[k];
            const float v = k == j ? gy : kf * __expf(sf * (row[k] * f - Mf));
            g[k] = from_acc<T>(v * f);
        }
    }
}

/* ---- the shifted path: one device, f32/bf16, s up to about 64 --------------------------
 *
 * A cosine c ∈ [−1, 1] has e = e^(s(c − 1) + TOP) ∈ [e^(TOP − 2s), e^TOP], TOP as high as
 * f32 lets a row's sum S and its target's entry −φ′·S be (shifted_top: about 60 for 10^5
 * classes), so that for s up to about 64 every e is a normal f32 (and bf16) and the rows'
 * factors a_i below stay far from f32's top.  So no row needs its max before its
 * exponentials: the fixed shift
 * M = 1 − TOP/s stands in for it in ploss_margin_row_loss (exact whatever M is, the target's
 * term taken in double), and the products are taken a tile of columns at a time (the
 * chunk's rows × Cb classes within TILE_BYTES: the product GEMM, bound by writing its fp32
 * output, runs at full speed only on wide tiles) and turned in one read into E (input
 * dtype) and per-row partial sums.  With a_i = ω·s·pn_i,
 * ∂L/∂c_ij = a_i·E_ij, the target's E_iy being −φ′(c_y)·S_i (written once S_i is known), so
 * the gradient products run on E itself: ∂L/∂x̂ = diag(a)·E·Ŵ, ∂L/∂Ŵ = Eᵀ·(a ⊙ X̂), and
 * nothing walks a row twice.  f16 (whose range is far shorter) and larger scales take the
 * row engine's pass above. */

/* TOP for K classes: K·e^TOP·max φ′ (φ′ <= m1/PLOSS_MARGIN_SIN_MIN + 1) at e^86. */
inline double shifted_top(const ploss_margin &m, int64_t K)
{
    return 86.0 - log((double)std::max<int64_t>(K, 1)) - log(fabs(m.m1) / PLOSS_MARGIN_SIN_MIN + 1.0);
}

/* Row i's label among the softmax's K classes (Partial FC: the kept position), −1 where the
 * row is ignored or its label invalid (count_labels_kernel reports those). */
template <class T> __device__ __forceinline__ int64_t shifted_label(const ploss_margin_problem &p, const buffers<T> &b,
                                                                    int64_t i)
{
    if (b.labels) { /* positions: KEPT_IGNORED and invalid labels lie outside [0, K) */
        const int64_t y = b.labels[i];
        return y < 0 || y >= p.K ? -1 : y;
    }
    const int64_t y = load_int_dyn(p.labels, p.label_dtype, i * p.y_sn);
    return y == p.ignore_index || y < 0 || y >= p.K ? -1 : y;
}

/* One warp per row r of the chunk's tile (ncols fp32 products from class j0, stride ldt):
 * E_ij = e^(s·c_ij − shift) for the classes j < K other than the target (whose cosine goes
 * to b.cy) into E (when given, stride lde), zeros elsewhere and on rows without a valid
 * label, and their sum to b.part[t·R + r]. */
template <class T>
__global__ void __launch_bounds__(THREADS)
    shifted_tile_kernel(const ploss_margin_problem p, const buffers<T> b, int64_t r0, int64_t rows, int64_t j0,
                        int64_t ncols, int64_t ldt, int64_t t, int64_t R, T *E, int64_t lde, float s, float shift)
{
    struct alignas(4 * sizeof(T)) pack {
        T v[4];
    };
    const int lane = threadIdx.x & 31;
    for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
        const int64_t i = r0 + r, y = shifted_label(p, b, i);
        const int64_t yl = y - j0, kl = p.K - j0; /* the target's and the end's columns */
        const float ix = b.inv_x[i];
        const float *pr = b.tile + r * ldt;
        float sum = 0.0f;
#pragma unroll 4
        for (int64_t c = 4 * lane; c < ncols; c += 128) {
            const float4 v = *reinterpret_cast<const float4 *>(pr + c);
            const float4 w = *reinterpret_cast<const float4 *>(b.inv_w + j0 + c);
            const float pv[4] = {v.x, v.y, v.z, v.w}, wv[4] = {w.x, w.y, w.z, w.w};
            pack o;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float cs = pv[k] * (ix * wv[k]);
                float e = __expf(fmaf(s, cs, -shift));
                if (c + k == yl)
                    b.cy[i] = cs;
                if (y < 0 || c + k == yl || c + k >= kl)
                    e = 0.0f;
                sum += e;
                o.v[k] = from_acc<T>(e);
            }
            if (E)
                *reinterpret_cast<pack *>(E + r * lde + j0 + c) = o;
        }
        sum = warp_all_reduce<32>(sum, SumOp());
        if (lane == 0)
            b.part[t * R + r] = sum;
    }
}

#ifdef PLOSS_HAVE_CUTLASS
/* The fused product GEMM's partial row sums: one per PLOSS_MARGIN_EXP_TILE_N columns, the
 * rows of a chunk of `rows` padded to whole GEMM tiles between two of them. */
inline int64_t fused_sums_tiles(int64_t cols) { return (cols + PLOSS_MARGIN_EXP_TILE_N - 1) / PLOSS_MARGIN_EXP_TILE_N; }
inline int64_t fused_sums_stride(int64_t rows)
{
    return (rows + PLOSS_MARGIN_EXP_TILE_M - 1) / PLOSS_MARGIN_EXP_TILE_M * PLOSS_MARGIN_EXP_TILE_M;
}
#endif

/* The fused product GEMM's input: each row's target column as a float (−1: none). */
template <class T>
__global__ void __launch_bounds__(THREADS) fused_targets_kernel(const ploss_margin_problem p, const buffers<T> b)
{
    for (int64_t k = thread_index(); k < p.N; k += grid_stride())
        b.rt[k] = (float)shifted_label(p, b, k);
}

/* The fused product GEMM's rows: one warp per row r of the chunk, its target's cosine
 * x_i·w_y/(n_i·n_y) into b.cy (the GEMM leaves the target's entry of E at 0). */
template <class T>
__global__ void __launch_bounds__(THREADS) target_cosine_kernel(const ploss_margin_problem p, const buffers<T> b,
                                                                int64_t r0, int64_t rows)
{
    const int lane = threadIdx.x & 31;
    for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
        const int64_t i = r0 + r, y = shifted_label(p, b, i);
        if (y < 0)
            continue;
        float d = 0.0f;
        for (int64_t j = lane; j < p.D; j += 32)
            d += to_acc(b.xc[i * p.D + j]) * to_acc(b.wc[y * p.D + j]);
        d = warp_all_reduce<32>(d, SumOp());
        if (lane == 0)
            b.cy[i] = d * (b.inv_x[i] * b.inv_w[y]);
    }
}

/* One warp per row r of the chunk: S_i from the tiles' partial sums (fixed order: the
 * column tiles', or the fused product GEMM's), the row's loss (b.losses, and p.loss with
 * 'none'); with a gradient a_i into b.ax, the target's E_iy = −φ′(c_y)·S_i, and the row
 * a_i·x̂_i into b.xs (input dtype). */
template <class T>
__global__ void __launch_bounds__(THREADS) shifted_rows_kernel(const ploss_margin_problem p, const buffers<T> b,
                                                               int64_t r0, int64_t rows, int64_t ntiles, int64_t R,
                                                               T *E, int64_t lde, double M)
{
    const int lane = threadIdx.x & 31;
    const bool want_grad = p.pass != PLOSS_PASS_FORWARD;
    for (int64_t r = warp_row(); r < rows; r += warp_rows_stride()) {
        const int64_t i = r0 + r, y = shifted_label(p, b, i);
        double S = 0.0;
        for (int64_t t = lane; t < ntiles; t += 32)
            S += (double)b.part[t * R + r];
        S = warp_all_reduce<32>(S, SumOp());
        double loss = 0.0, a = 0.0, pn = 0.0, dphi = 0.0;
        if (y >= 0) {
            loss = ploss_margin_row_loss(&p.margin, S, (double)b.cy[i], M, &pn, &dphi);
            if (want_grad)
                a = row_omega(p, b.divisor, i) * p.margin.s * pn;
        }
        if (lane == 0) {
            if (p.pass != PLOSS_PASS_BACKWARD) {
                b.losses[i] = loss;
                if (p.reduction == PLOSS_REDUCTION_NONE)
                    store_state(p.loss, p.loss_dtype, i * p.l_sn, loss);
            }
            if (want_grad) {
                b.ax[i] = (float)a;
                if (y >= 0)
                    E[r * lde + y] = from_acc<T>((float)(-dphi * S));
            }
        }
        if (!want_grad)
            continue;
        const float af = (float)a, ix = b.inv_x[i];
        const T *xr = b.xc + i * p.D;
        T *o = b.xs + r * p.D;
        for (int64_t j = lane; j < p.D; j += 32)
            o[j] = from_acc<T>(af * (to_acc(xr[j]) * ix));
    }
}

/* A chunk's gradient products: its rows of P (b.gx) = G·W and Q (b.gw, K×D) += Gᵀ·X, summed
 * over the chunks in order (G crows×Kp of the input dtype, W Kp×D, X crows×D). */
template <class T>
ploss_status gradient_products(ploss_ctx_t *ctx, const ploss_margin_problem &q, const buffers<T> &b, const T *G,
                               const T *W, const T *X, int64_t c0, int64_t crows)
{
    const int64_t D = q.D, K = q.K, ld = D > 0 ? D : 1, ldk = (K + 7) / 8 * 8;
    const ploss_gemm_problem dx = {crows, D, ldk, 1.0, 0.0, G, 0, ldk, W, 0, ld, q.dtype, b.gx + c0 * D, ld,
                                   PLOSS_F32};
    const ploss_gemm_problem dw = {K, D, crows, 1.0, c0 > 0 ? 1.0 : 0.0, G, 1, ldk, X, 0, ld, q.dtype, b.gw, ld,
                                   PLOSS_F32};
    ploss_status st = ploss_cuda_gemm(ctx, &dx);
    return st ? st : ploss_cuda_gemm(ctx, &dw);
}

/* Whether the shifted path serves these inputs (top: shifted_top of Kb, the classes' bound;
 * Kl their fewest): every e at least e^−80, and a_i = ω·s/(S + e^d) <= s·e^(2s − TOP)/(Kl − 1)
 * (S >= (Kl − 1)·e^(TOP − 2s)) at most e^69·|ω|, in f32 for |ω| up to about 10^8. */
template <class T> bool shifted_serves(const ploss_margin_problem &p, double top, int64_t Kl)
{
    const bool dtype = sizeof(T) == sizeof(float) || std::is_same<T, __nv_bfloat16>::value;
    const double s = p.margin.s, low = top - 2.0 * s;
    return dtype && !p.comm && low >= -80.0 && log(s) - low - log((double)std::max<int64_t>(Kl - 1, 1)) <= 69.0;
}

/* The shifted path over the prepared buffers: per chunk of R rows, the column tiles (Cb
 * classes each: product GEMM, shifted_tile_kernel), the rows, the gradient products. */
template <class T>
ploss_status run_shifted(ploss_ctx_t *ctx, const ploss_margin_problem &q, const buffers<T> &b, int64_t R,
                         int64_t Cb, double top, [[maybe_unused]] void *gemm_ws,
                         [[maybe_unused]] size_t gemm_ws_bytes, cudaStream_t stream)
{
    const int64_t N = q.N, D = q.D, K = q.K, ld = D > 0 ? D : 1, ldk = (K + 7) / 8 * 8;
    const int64_t ntiles = (ldk + Cb - 1) / Cb;
    const bool want_grad = q.pass != PLOSS_PASS_FORWARD;
    const double s = q.margin.s, M = 1.0 - top / s;
    ploss_status st;
#ifdef PLOSS_HAVE_CUTLASS
    if (b.rs && N > 0) {
        fused_targets_kernel<T><<<grid_blocks(N, THREADS), THREADS, 0, stream>>>(q, b);
        if ((st = check_launch("margin: the fused product GEMM's targets")))
            return st;
    }
#endif
    for (int64_t c0 = 0; c0 < N; c0 += R) {
        const int64_t crows = std::min(R, N - c0);
        T *E = want_grad || b.rs ? b.gt : nullptr;
        buffers<T> rb = b; /* the rows' view: partial sums of nt tiles, pr rows apart */
        int64_t nt = ntiles, pr = R;
#ifdef PLOSS_HAVE_CUTLASS
        if (b.rs) { /* E and the rows' partial sums from the fused product GEMM */
            rb.part = b.sums;
            nt = fused_sums_tiles(ldk);
            pr = fused_sums_stride(crows);
            const ploss_margin_exp_gemm eg = {crows,     ldk,        D,
                                              b.xc + c0 * D, D,   b.wc,
                                              D,         b.rs + c0, b.inv_w,
                                              b.rt + c0, (float)((s - top) * CUDART_L2E), K,
                                              E,         ldk,       b.sums};
            if ((st = ploss_cuda_margin_exp_gemm(&eg, gemm_ws, gemm_ws_bytes, nullptr, stream)))
                return st;
            target_cosine_kernel<T><<<row_blocks(crows), THREADS, 0, stream>>>(q, b, c0, crows);
            if ((st = check_launch("margin target cosines")))
                return st;
        } else
#endif
            for (int64_t t = 0; t < ntiles; ++t) {
                const int64_t j0 = t * Cb, ncols = std::min(Cb, ldk - j0);
                const ploss_gemm_problem cg = {crows, ncols, D, 1.0, 0.0, b.xc + c0 * D, 0, ld, b.wc + j0 * D, 1,
                                               ld, q.dtype, b.tile, Cb, PLOSS_F32};
                if ((st = ploss_cuda_gemm(ctx, &cg)))
                    return st;
                shifted_tile_kernel<T><<<row_blocks(crows), THREADS, 0, stream>>>(
                    q, b, c0, crows, j0, ncols, Cb, t, R, E, ldk, (float)s, (float)(s - top));
                if ((st = check_launch("margin column tile")))
                    return st;
            }
        shifted_rows_kernel<T><<<row_blocks(crows), THREADS, 0, stream>>>(q, rb, c0, crows, nt, pr, E, ldk, M);
        if ((st = check_launch("margin rows")))
            return st;
        if (want_grad && D > 0 && (st = gradient_products(ctx, q, b, E, b.wn, b.xs, c0, crows)))
            return st;
    }
    return PLOSS_OK;
}

/* The row engine's path (f16, larger scales, sharded calls) over the prepared
 * buffers: per chunk of R rows, its tiles of B rows (product GEMM, then cosine_rows or the
 * sharded statistics, their gather and rows), then the chunk's gradient products. */
template <class T>
ploss_status run_rows(ploss_ctx_t *ctx, const ploss_margin_problem *p, const ploss_margin_problem &q,
                      const buffers<T> &b, int64_t B, int64_t R, cudaStream_t stream)
{
    const int64_t N = q.N, D = q.D, K = q.K, ld = D > 0 ? D : 1, ldk = (K + 7) / 8 * 8;
    const bool want_grad = q.pass != PLOSS_PASS_FORWARD, sharded = q.comm != nullptr;
    const int ranks = sharded ? ploss_comm_size(q.comm) : 0;
    ploss_status st;
    re::MarginPolicy pol;
    pol.margin = p->margin;
    pol.s = (float)p->margin.s;
    pol.inv_divisor = p->reduction == PLOSS_REDUCTION_MEAN ? b.divisor + 1 : nullptr;
    for (int64_t c0 = 0; c0 < N; c0 += R) {
        const int64_t crows = std::min(R, N - c0);
        for (int64_t b0 = c0; b0 < c0 + crows; b0 += B) {
            const int64_t rows = std::min(B, c0 + crows - b0);
            const ploss_gemm_problem cg = {rows, ldk, D, 1.0, 0.0, b.xc + b0 * D, 0, ld, b.wc, 1, ld, p->dtype,
                                           b.tile, ldk, PLOSS_F32};
            if ((st = ploss_cuda_gemm(ctx, &cg)))
                return st;
            if (sharded) {
                const unsigned blocks = (unsigned)std::min<int64_t>(rows, 8192);
                shard_stats_kernel<T><<<blocks, SHARD_THREADS, 0, stream>>>(q, b, b0, rows, K, ldk, b.stats);
                if ((st = check_launch("margin rows' statistics (sharded)")) ||
                    (st = ploss_sharded_gather(p->comm, b.stats, b.stats + 3 * rows, 3 * rows, PLOSS_F32)))
                    return st;
                shard_rows_kernel<T><<<blocks, SHARD_THREADS, 0, stream>>>(
                    q, b, b0, rows, K, ldk, b.stats + 3 * rows, ranks, want_grad ? b.gt + (b0 - c0) * ldk : nullptr);
                if ((st = check_launch("margin rows (sharded)")))
                    return st;
                continue;
            }
            /* the rows of the tile; with drawn classes the labels are their positions */
            re::RowArgs a = re::tile_row_args(*p, b0, rows, K, b.tile, ldk,
                                              want_grad ? b.gt + (b0 - c0) * ldk : nullptr, ldk, b.losses,
                                              ctx->error_slot);
            if (b.labels) {
                a.t = b.labels + b0;
                a.t_dtype = PLOSS_I64;
                a.t_sn = 1;
                a.ignore_index = KEPT_IGNORED;
            }
            st = launch_cosine_rows<T>(ctx, a, pol, b.inv_x + b0, b.inv_w, stream);
            if (st == PLOSS_ERR_UNSUPPORTED)
                st = ploss_error(PLOSS_ERR_UNSUPPORTED,
                                 "weight: C = %lld class centres are longer rows than the CUDA row engine serves "
                                 "on this device", (long long)K);
            if (st)
                return st;
        }
        if (!want_grad || D == 0)
            continue;
        if (ldk > K && cudaMemset2DAsync(b.gt + K, (size_t)ldk * sizeof(T), 0, (size_t)(ldk - K) * sizeof(T),
                                         (size_t)crows, stream) != cudaSuccess)
            return check_launch("margin: clearing G's padding");
        if ((st = gradient_products(ctx, q, b, b.gt, b.wc, b.xc + c0 * D, c0, crows)))
            return st;
    }
    return PLOSS_OK;
}

template <class T> ploss_status run(ploss_ctx_t *ctx, const ploss_margin_problem *p)
{
    const int64_t N = p->N, D = p->D;
    const bool want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const bool none = p->reduction == PLOSS_REDUCTION_NONE;
    const bool draw = p->sample_n > 0;
    /* K: the classes of the softmax (Partial FC: the kept ones), known here unless the batch
     * may hold more classes than n_s; Kb bounds it for the workspace */
    int64_t K = draw ? (N < p->sample_n ? p->sample_n : 0) : p->K;
    const int64_t Kb = K > 0 ? K : std::min(p->C, std::max(p->sample_n, N));
    auto padded = [](int64_t k) { return (k + 7) / 8 * 8; }; /* a tile row's stride */
    const int64_t ldb = padded(Kb); /* Kp's bound */
    /* the row engine's longest rows: a cluster of kMaxCluster blocks (sm_90) */
    auto check_rows = [](int64_t k) {
        if (!re::serves<float>(1, k) || k > re::block_capacity<float>() * re::kMaxCluster)
            return ploss_error(PLOSS_ERR_UNSUPPORTED, "weight: C = %lld classes exceed the CUDA row engine's rows "
                               "(at most %lld f32 values)", (long long)k,
                               (long long)(re::block_capacity<float>() * re::kMaxCluster));
        return PLOSS_OK;
    };
    ploss_status st;
    const bool sharded = p->comm != nullptr; /* the sharded kernels serve rows of any length */
    const int ranks = sharded ? ploss_comm_size(p->comm) : 0;
    const double top = shifted_top(p->margin, Kb);
    const bool shifted = shifted_serves<T>(*p, top, draw ? p->sample_n : K); /* else the row engine's rows */
    if (K > 0 && !sharded && !shifted && (st = check_rows(K)))
        return st;
    cudaStream_t stream = stream_of(ctx);
    /* B: rows of a tile of fp32 products; R: rows of a chunk of G' (a multiple of B) */
    /* sharded: the same tiles and chunks on every rank, from the largest block (margin.h) */
    const int64_t Kt = padded(sharded ? std::max(p->classes_max, Kb) : Kb);
    int64_t B = p->tile_rows > 0 ? p->tile_rows : (int64_t)(TILE_BYTES / sizeof(float)) / Kt;
    B = std::max<int64_t>(1, std::min<int64_t>(B, N));
    int64_t R = B;
    if (p->tile_rows == 0)
        R = std::min<int64_t>(N, std::max<int64_t>(B, (int64_t)(GRAD_BYTES / sizeof(T)) / Kt / B * B));
    const size_t nd = (size_t)N * (size_t)D, kd = (size_t)Kb * (size_t)D, kpd = (size_t)ldb * (size_t)D;
    /* the shifted path: chunks of R rows (their E within GRAD_BYTES, their products'
     * tiles at least 128 classes wide within TILE_BYTES), tiles of Cb classes
     * (opts.tile_rows: R = tile_rows, Cb = 128, the smallest) */
    int64_t Cb = 0;
    if (shifted) {
        const int64_t tile_max = (int64_t)(TILE_BYTES / sizeof(float));
        /* the same chunks with or without a gradient: the forward's sums are the fused pass's */
        R = p->tile_rows > 0 ? p->tile_rows : tile_max / 128;
        R = std::min<int64_t>(R, std::max<int64_t>(1, (int64_t)(GRAD_BYTES / sizeof(T)) / ldb));
        R = std::max<int64_t>(1, std::min<int64_t>(R, N));
        Cb = p->tile_rows > 0 ? 128 : std::max<int64_t>(128, tile_max / R / 128 * 128);
        Cb = std::min<int64_t>(Cb, (ldb + 127) / 128 * 128);
        B = R;
    }
    const bool in_place = !shifted && sizeof(T) == sizeof(float) && R == B;
    /* the fused product GEMM (bf16 on a compute capability 9.0 device, the rows' stride a
     * multiple of 8 for its TMA, class indices exact as floats): E straight from the
     * products, forward alone too (its losses then the fused pass's, bitwise) */
    bool fused = false;
    size_t gemm_ws_bytes = 0;
#ifdef PLOSS_HAVE_CUTLASS
    fused = shifted && std::is_same<T, __nv_bfloat16>::value && D > 0 && D % 8 == 0 && N > 0 &&
            ldb <= ((int64_t)1 << 24) &&
            ploss_cuda_sm90a_serves(ctx->device.device_id);
    if (fused) {
        const ploss_margin_exp_gemm probe = {R,       ldb,     D,    nullptr, D,       nullptr, D,
                                             nullptr, nullptr, nullptr, 0.0f, ldb, nullptr, ldb, nullptr};
        fused = ploss_cuda_margin_exp_gemm(&probe, nullptr, 0, &gemm_ws_bytes, nullptr) == PLOSS_OK;
        if (!fused)
            gemm_ws_bytes = 0;
    }
#endif
    /* contiguous x and centres (all of them, a whole number of tile rows) are read where
     * they are instead of copied */
    const bool xvec = rows_in_vectors<T>(p->x.data, p->x.sn, p->x.sd, D);
    const bool wvec = rows_in_vectors<T>(p->w.data, p->w.sn, p->w.sd, D);
    const bool x_alias = D > 0 && p->x.sn == D && xvec;
    const bool w_alias = D > 0 && !draw && K == ldb && p->w.sn == D && wvec;
    draw_buffers d = {};
    if (draw && (st = draw_scratch_bytes(p->C, &d.scratch_bytes)))
        return st;
    void *gemm_ws = nullptr;
    auto layout = [&](char *base, buffers<T> &b) {
        carve c{base, 0};
        b.xc = x_alias ? (T *)p->x.data : c.take<T>(nd);
        b.wc = w_alias ? (T *)p->w.data : c.take<T>(kpd);
        b.inv_x = c.take<float>(N);
        b.inv_w = c.take<float>(ldb); /* the shifted tiles read up to Kp */
        b.rx = c.take<double>(N);
        b.rw = c.take<double>(Kb);
        b.tile = c.take<float>(fused ? 0 : (size_t)B * (size_t)(shifted ? Cb : ldb));
        b.gt = !want_grad && !fused ? nullptr : in_place ? (T *)b.tile : c.take<T>((size_t)R * (size_t)ldb);
        b.gx = c.take<float>(want_grad ? nd : 0);
        b.gw = c.take<float>(want_grad ? kd : 0);
        b.losses = c.take<double>(N);
        b.divisor = c.take<double>(2);
        b.kept = draw ? c.take<int64_t>(Kb) : nullptr;
        b.class_pos = draw ? c.take<int64_t>(p->C) : nullptr;
        b.labels = draw && !sharded ? c.take<int64_t>(N) : nullptr;
        b.stats = sharded ? c.take<float>((size_t)B * 3 * (size_t)(ranks + 1)) : nullptr;
        b.wn = shifted && want_grad ? c.take<T>(kpd) : nullptr;
        b.cy = shifted ? c.take<float>(N) : nullptr;
        b.ax = shifted && want_grad ? c.take<float>(N) : nullptr;
        b.part = shifted && !fused ? c.take<float>((size_t)R * (size_t)((ldb + Cb - 1) / Cb)) : nullptr;
        b.xs = shifted && want_grad ? c.take<T>((size_t)R * (size_t)D) : nullptr;
        b.rs = fused ? c.take<float>(N) : nullptr;
        b.rt = fused ? c.take<float>(N) : nullptr;
#ifdef PLOSS_HAVE_CUTLASS
        b.sums = fused ? c.take<float>((size_t)fused_sums_stride(R) * (size_t)fused_sums_tiles(ldb)) : nullptr;
#else
        b.sums = nullptr;
#endif
        gemm_ws = c.take<char>(gemm_ws_bytes);
        if (draw) {
            const size_t C = (size_t)p->C;
            d.flag = c.take<int>(C);
            d.cls_in = c.take<int>(C);
            d.cls = c.take<int>(C);
            d.cand = c.take<int>(C);
            d.rank = c.take<int>(C);
            d.keep = c.take<int>(C);
            d.pos = c.take<int>(C);
            d.key_in = c.take<uint64_t>(C);
            d.key = c.take<uint64_t>(C);
            d.count = c.take<int64_t>(1);
            d.scratch = c.take<char>(d.scratch_bytes);
        }
        return c.used + 256;
    };
    buffers<T> b;
    void *ws = nullptr;
    if ((st = ploss_workspace(ctx, layout(nullptr, b), &ws)))
        return st;
    layout((char *)ws, b);

    if (draw) {
        if ((st = draw_classes(*p, d, b.kept, b.class_pos, stream)))
            return st;
        /* the kept count when the batch may hold more than n_s classes (a host round trip) */
        if (K == 0 && ((st = ploss_cuda_memcpy(&K, d.count, sizeof K, PLOSS_COPY_D2H, stream)) ||
                       (!sharded && !shifted && (st = check_rows(K)))))
            return st;
    }
    const int64_t ldk = padded(K);
    ploss_margin_problem q = *p; /* the kernels' view: K kept classes */
    q.K = K;
    prep_kernel<T><<<row_blocks(N + K), THREADS, 0, stream>>>(q, b, xvec, wvec);
    ploss_margin_problem every = q; /* the labels lie among every rank's classes */
    every.C = p->classes_total;
    count_labels_kernel<<<1, COUNT_THREADS, 0, stream>>>(every, b.divisor, ctx->error_slot);
    if (draw && !sharded && N > 0)
        remap_kernel<T><<<grid_blocks(N, THREADS), THREADS, 0, stream>>>(q, b);
    if ((st = check_launch("margin prep")))
        return st;
    const size_t cd = (size_t)K * (size_t)D;
    T *const padded_rows[2] = {b.wc, b.wn};
    for (T *w : padded_rows)
        if (w && ldk > K && (st = ploss_cuda_memset(w + cd, 0, (size_t)(ldk - K) * (size_t)D * sizeof(T), stream)))
            return st;
    if (want_grad && cd > 0 && N == 0 && (st = ploss_cuda_memset(b.gw, 0, cd * sizeof(float), stream)))
        return st;

    st = shifted ? run_shifted<T>(ctx, q, b, R, Cb, top, gemm_ws, gemm_ws_bytes, stream)
                 : run_rows<T>(ctx, p, q, b, B, R, stream);
    if (st)
        return st;
    if (want_loss && !none &&
        (st = re::launch_finalize(b.losses, N, p->reduction == PLOSS_REDUCTION_MEAN ? b.divisor : nullptr, p->loss,
                                  p->loss_dtype, stream)))
        return st;
    if (want_grad && D > 0) {
        out_kernel<T><<<row_blocks(N + p->C), THREADS, 0, stream>>>(
            q, b, rows_in_vectors<T>(p->grad_x.data, p->grad_x.sn, p->grad_x.sd, D),
            rows_in_vectors<T>(p->grad_w.data, p->grad_w.sn, p->grad_w.sd, D));
        if ((st = check_launch("margin out")))
            return st;
    }
    return PLOSS_OK;
}

} // namespace
} // namespace ploss_cuda

using namespace ploss_cuda;

extern "C" ploss_status ploss_cuda_margin(ploss_ctx_t *ctx, const ploss_margin_problem *p)
{
    return dispatch_float(p->dtype, "x", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (sizeof(T) <= 4)
            return run<T>(ctx, p);
        else
            return ploss_error(PLOSS_ERR_UNSUPPORTED, "x: f64 on CUDA (the margin losses take it on the CPU only)");
    });
}
