/*
 * lovasz.cu — CUDA backend of the Lovász-softmax loss (formulas in core/engines/region.h and
 * docs/losses.md).  fp32 accumulation for f32/f16/bf16 input, f64 for f64.
 *
 * A (group, class) segment holds the M pixels of its group.  The segments are sorted in
 * batches of up to 4 by CUB radix sorts of 32-bit keys and 32-bit values:
 *     key   = slot of the segment in the batch << 30 | error code
 *     value = foreground << 31 | pixel index in the group
 * The error code of a valid pixel is 0x3f800001 − bits(error as f32) (an error lies in
 * [0, 1], whose f32 bit patterns are 0 … 0x3f800000), 0 for a NaN error, and 2^30 − 1 for an
 * ignored pixel: ascending codes rank a segment's valid pixels by decreasing error (a NaN
 * error first) and its ignored ones last, and the f32 error is exactly recovered from the
 * key.  Keys use bits [0, 30 + 2) at most: 4 radix passes, as for any 32-bit key, so a
 * batch of 4 segments costs no more passes than one; smaller batches keep the workspace
 * within the input's size (counted at the accumulation width).  The sort is stable, so
 * ties keep the increasing pixel order of the CPU backend.
 *
 *  1. per pixel: the softmax's max and 1/Σ (invalid labels go to the context's error slot
 *     and their pixels are treated as ignored);
 *  per batch:
 *  2. per pixel: the batch's keys and values (and, for f64, the errors in f64), and with the
 *     gradient the pixel's signed-weight slots of the batch's segments set to 0;
 *  3. the radix sort;
 *  4. one block per chunk of CHUNK ranks of a segment counts its foreground pixels; the last
 *     block to finish turns the counts into each chunk's count before it and each segment's
 *     total P (integers: exact to 2^31 pixels);
 *  5. one block per chunk: each rank's Lovász weight in closed form (a block scan of the
 *     foreground bits gives F), the chunk's Σ error × weight, and (want_grad) the signed
 *     weight of the pixel where it is not 0 — written into the gradient's own slot when the
 *     gradient has the accumulation type and is not the input, else into a workspace buffer
 *     (each a scattered 4- or 8-byte store, one L2 transaction apiece: the ranks after a
 *     segment's last foreground pixel, whose weight is 0, are most of them);
 *  then:
 *  6. one block: each segment's L (its chunk partials in a fixed order, double), the
 *     reduction over groups and classes (fixed order, double), the loss and each L_gc's
 *     weight ω;
 *  7. per pixel: the gradient through the softmax from the signed weights.
 * Nothing uses a float atomic: the results are bitwise the same on every run.  The
 * workspace is the context's, reused by the next call: the sort's double buffers (16 bytes
 * per element of a batch, 24 for f64), the softmax statistics (2 accumulators per pixel),
 * the signed weights when they cannot live in the gradient (one accumulator per class-pixel
 * pair), per-chunk counts and partials, and CUB's temporary storage.
 */
#include <cub/block/block_load.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "region_common.cuh"

namespace ploss_cuda {
namespace lovasz_kernels {
namespace {
using namespace region;

constexpr int THREADS = 256;
constexpr int ITEMS = 16;                    /* ranks per thread in the passes over sorted ranks */
constexpr int64_t CHUNK = THREADS * ITEMS;   /* ranks of one segment per block */
constexpr int MAX_BATCH = 4;                 /* segments per sort: 2 key bits above the 30 of the code */
constexpr int CODE_BITS = 30;
constexpr uint32_t CODE_MASK = (1u << CODE_BITS) - 1u;
constexpr uint32_t ONE_BITS = 0x3f800000u;   /* bits of 1.0f: the largest error */
constexpr uint32_t IGNORED = CODE_MASK;      /* the code of an ignored pixel: last */
constexpr uint32_t FOREGROUND = 1u << 31;    /* value bit: the pixel is of the segment's class */

/* The sort code of an error in [0, 1]: decreasing error ascending, a NaN error first. */
__device__ __forceinline__ uint32_t error_code(float e)
{
    if (e != e)
        return 0u;
    const uint32_t u = __float_as_uint(e > 0.0f ? e : 0.0f);
    return ONE_BITS + 1u - (u < ONE_BITS ? u : ONE_BITS);
}

/* The f32 error of a valid pixel's code (the inverse of error_code). */
__device__ __forceinline__ float code_error(uint32_t code)
{
    return code == 0u ? __uint_as_float(0x7fc00000u) : __uint_as_float(ONE_BITS + 1u - code);
}

/* Pixel q = n·S + s split with a 32-bit division where q fits (S <= M < 2^31). */
__device__ __forceinline__ void split_pixel(const ploss_region_problem &p, int64_t q, int64_t &n, int64_t &s)
{
    n = q <= (int64_t)UINT32_MAX ? (int64_t)((uint32_t)q / (uint32_t)p.S) : q / p.S;
    s = q - n * p.S;
}

/* The offset of pixel (n, s) along sample stride sn and spatial strides ss; one spatial
 * dim (the merged layouts) needs no division. */
__device__ __forceinline__ int64_t offset_of(const ploss_region_problem &p, int64_t n, int64_t s, int64_t sn,
                                             const int64_t *ss)
{
    return n * sn + (p.sdim == 1 ? s * ss[0] : ploss_region_pixel_offset(&p, ss, s));
}

/* The class of pixel (n, s), as load_label_at (region_common.cuh) gives it. */
template <class TI>
__device__ __forceinline__ int64_t label_of(const ploss_region_problem &p, int64_t n, int64_t s, int64_t *error_slot)
{
    return load_label_at<TI>(p, offset_of(p, n, s, p.t_sn, p.t_ss), error_slot);
}

/* Where the signed weight of (segment, pixel `local` of its group g) is kept: the
 * gradient's slot of that class and pixel, or a segment-major workspace buffer. */
template <class A> struct WeightSlots {
    A *w;
    int in_grad;
    __device__ __forceinline__ int64_t at(const ploss_region_problem &p, int64_t M, int64_t g, int64_t c,
                                          int64_t local) const
    {
        if (!in_grad)
            return (g * p.C + c) * M + local;
        int64_t n, s;
        split_pixel(p, g * M + local, n, s);
        return offset_of(p, n, s, p.g_sn, p.g_ss) + c * p.g_sc;
    }
};

/* Per valid pixel: the max and 1/Σ exp(x − max) of its logits; invalid labels reported.
 * Thread 0 also clears the ticket of the counting pass. */
template <class T, class TI>
__global__ void __launch_bounds__(THREADS) lovasz_stats(const ploss_region_problem p, acc_t<T> *mx, acc_t<T> *inv,
                                                         int64_t *error_slot, unsigned *ticket)
{
    using A = acc_t<T>;
    const T *x = (const T *)p.x;
    if (thread_index() == 0)
        *ticket = 0u;
    const int64_t NS = p.N * p.S;
    for (int64_t q = thread_index(); q < NS; q += grid_stride()) {
        int64_t n, s;
        split_pixel(p, q, n, s);
        if (label_of<TI>(p, n, s, error_slot) < 0)
            continue;
        const int64_t xo = offset_of(p, n, s, p.x_sn, p.x_ss);
        A m = -INFINITY;
        for (int64_t c = 0; c < p.C; ++c)
            m = MaxOp()(m, (A)to_acc(x[xo + c * p.x_sc]));
        A sum = 0;
        for (int64_t c = 0; c < p.C; ++c)
            sum += m_exp((A)to_acc(x[xo + c * p.x_sc]) - m);
        mx[q] = m;
        inv[q] = A(1) / sum;
    }
}

/* Per pixel j of a group: the keys and values of segments s0 … s0 + nb − 1 at i·M + j (i:
 * the slot in the batch), and for f64 (err != nullptr) the errors there too.  With the
 * gradient (zero.w not null), a valid pixel's signed-weight slot of each segment is set to 0
 * here, in pixel order (coalesced): lovasz_weights then stores only the weights that are not
 * 0 — in a segment every rank after its last foreground pixel has weight 0, most of a
 * segment's ranks — in its scattered stores. */
template <class T, class TI>
__global__ void __launch_bounds__(THREADS) lovasz_keys(const ploss_region_problem p, int64_t M, int64_t s0, int nb,
                                                        const acc_t<T> *mx, const acc_t<T> *inv, uint32_t *keys,
                                                        uint32_t *vals, acc_t<T> *err, WeightSlots<acc_t<T>> zero)
{
    using A = acc_t<T>;
    const T *x = (const T *)p.x;
    const int64_t g0 = s0 / p.C, c0 = s0 - g0 * p.C;
    for (int64_t j = thread_index(); j < M; j += grid_stride()) {
        int64_t g_prev = -1, y = -1, xo = 0;
        A m = 0, iv = 0;
        /* segment s0 + i is class c of group g */
        for (int64_t i = 0, g = g0, c = c0; i < nb; ++i, c = c + 1 < p.C ? c + 1 : 0, g += c == 0) {
            const int64_t idx = i * M + j;
            if (g != g_prev) { /* a batch spans at most a few groups: one label load each */
                const int64_t q = g * M + j;
                int64_t n, s;
                split_pixel(p, q, n, s);
                g_prev = g;
                y = label_of<TI>(p, n, s, nullptr);
                if (y >= 0) {
                    xo = offset_of(p, n, s, p.x_sn, p.x_ss);
                    m = mx[q];
                    iv = inv[q];
                }
            }
            const uint32_t slot = (uint32_t)i << CODE_BITS;
            if (y < 0) {
                keys[idx] = slot | IGNORED;
                vals[idx] = (uint32_t)j;
                if (err)
                    err[idx] = A(0);
                continue;
            }
            const A pc = m_exp((A)to_acc(x[xo + c * p.x_sc]) - m) * iv;
            const A e = y == c ? A(1) - pc : pc;
            if (zero.w)
                zero.w[zero.at(p, M, g, c, j)] = A(0);
            keys[idx] = slot | error_code((float)e);
            vals[idx] = (uint32_t)j | (y == c ? FOREGROUND : 0u);
            if (err)
                err[idx] = e;
        }
    }
}

/* One block per chunk of a segment of the batch: its foreground count.  The last block to
 * finish writes, for every chunk of the batch, the count of the chunks before it in its
 * segment, and each segment's total; it then clears the ticket for the next batch. */
__global__ void __launch_bounds__(THREADS) lovasz_count(const uint32_t *vals, int64_t M, int64_t chunks, int64_t s0,
                                                         int nb, int32_t *chunk_fg, int32_t *chunk_before,
                                                         int32_t *seg_fg, unsigned *ticket)
{
    __shared__ int last;
    const int64_t i = blockIdx.x / chunks, chunk = blockIdx.x % chunks, base = i * M;
    const int64_t end = (chunk + 1) * CHUNK < M ? (chunk + 1) * CHUNK : M;
    int n = 0;
    for (int64_t j = chunk * CHUNK + threadIdx.x; j < end; j += THREADS)
        n += (int)(vals[base + j] >> 31);
    n = block_reduce<THREADS>(n, SumOp());
    if (threadIdx.x == 0) {
        chunk_fg[s0 * chunks + blockIdx.x] = n;
        __threadfence(); /* the count is visible before the ticket says so */
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    if (warp < nb) { /* one warp per segment: an exclusive scan of its chunk counts */
        const int64_t first = (s0 + warp) * chunks;
        int running = 0;
        for (int64_t k0 = 0; k0 < chunks; k0 += 32) {
            const int v = k0 + lane < chunks ? __ldcg(chunk_fg + first + k0 + lane) : 0;
            int incl = v;
            for (int d = 1; d < 32; d <<= 1) {
                const int up = __shfl_up_sync(0xffffffffu, incl, d);
                if (lane >= d)
                    incl += up;
            }
            if (k0 + lane < chunks)
                chunk_before[first + k0 + lane] = running + incl - v;
            running += __shfl_sync(0xffffffffu, incl, 31);
        }
        if (lane == 0)
            seg_fg[s0 + warp] = running;
    }
    if (threadIdx.x == 0)
        *ticket = 0u;
}

/* One block per chunk of a segment of the batch: each rank's Lovász weight, the chunk's
 * Σ error·weight, and (want_grad) the signed weight stored at the pixel's slot. */
template <class A>
__global__ void __launch_bounds__(THREADS) lovasz_weights(const ploss_region_problem p, const uint32_t *keys,
                                                           const uint32_t *vals, const A *err, int64_t M,
                                                           int64_t chunks, int64_t s0, const int32_t *chunk_before,
                                                           const int32_t *seg_fg, int want_grad, WeightSlots<A> out,
                                                           A *partial)
{
    using Load = cub::BlockLoad<uint32_t, THREADS, ITEMS, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
    using Scan = cub::BlockScan<int, THREADS>;
    __shared__ union {
        typename Load::TempStorage load;
        typename Scan::TempStorage scan;
    } tmp;
    const int64_t i = blockIdx.x / chunks, chunk = blockIdx.x % chunks, base = i * M, seg = s0 + i;
    const int64_t g = seg / p.C, c = seg - g * p.C;
    const int64_t start = chunk * CHUNK;
    const int n = (int)(M - start < CHUNK ? M - start : CHUNK);
    uint32_t key[ITEMS], val[ITEMS];
    Load(tmp.load).Load(vals + base + start, val, n, 0u);
    __syncthreads();
    Load(tmp.load).Load(keys + base + start, key, n, IGNORED);
    __syncthreads();
    int fg_here = 0;
#pragma unroll
    for (int t = 0; t < ITEMS; ++t)
        fg_here += (int)(val[t] >> 31);
    int fg_before;
    Scan(tmp.scan).ExclusiveSum(fg_here, fg_before);
    const int64_t P = seg_fg[seg];
    int64_t F = chunk_before[seg * chunks + chunk] + fg_before;
    A term = 0;
#pragma unroll
    for (int t = 0; t < ITEMS; ++t) {
        const uint32_t code = key[t] & CODE_MASK;
        if (code == IGNORED)
            continue;
        const int fg = (int)(val[t] >> 31);
        const int64_t k = start + (int64_t)threadIdx.x * ITEMS + t + 1, local = val[t] & ~FOREGROUND;
        F += fg;
        const A a = (A)(P + k - F);
        const A w = (k == 1 || fg) ? A(1) / a : (A)(P - F) / a / (a - A(1));
        A e;
        if constexpr (sizeof(A) == sizeof(float))
            e = code_error(code); /* exactly the error that was ranked */
        else
            e = err[base + local];
        term += e * w;
        if (want_grad && w != A(0)) /* the 0s are in place (lovasz_keys) */
            out.w[out.at(p, M, g, c, local)] = fg ? -w : w;
    }
    const A total = block_reduce<THREADS>(term, SumOp());
    if (threadIdx.x == 0)
        partial[seg * chunks + chunk] = total;
}

/* Class c counts in a group with P pixels of class c: listed (classes = 'listed'; an index
 * outside [0, C) is reported in the error slot), present, or always ('all'). */
__device__ __forceinline__ int class_counts(const ploss_region_problem &p, int64_t c, int64_t P)
{
    if (!p.ids)
        return !p.present || P > 0;
    for (int64_t k = 0; k < p.ids_n; ++k)
        if (load_int_dyn(p.ids, p.ids_dtype, k * p.ids_s) == c)
            return 1;
    return 0;
}

/* One block: each segment's L (its chunk partials in a fixed order, double), then in thread 0 the
 * reduction over groups and classes (fixed order, double), the loss, and the weight ω of
 * each L_gc in the reduced loss. */
template <class A>
__global__ void __launch_bounds__(THREADS) lovasz_finish(const ploss_region_problem p, const A *partial,
                                                          const int32_t *seg_fg, int64_t chunks, double *seg_loss,
                                                          A *omega, int64_t *error_slot)
{
    const int64_t G = p.per_image ? p.N : 1, nseg = G * p.C;
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31u);
    for (int64_t seg = warp; seg < nseg; seg += THREADS / 32) { /* one warp per segment, fixed order */
        double L = 0.0;
        for (int64_t b = lane; b < chunks; b += 32)
            L += (double)partial[seg * chunks + b];
        for (int d = 16; d > 0; d >>= 1)
            L += __shfl_xor_sync(0xffffffffu, L, d);
        if (lane == 0)
            seg_loss[seg] = L;
    }
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    for (int64_t k = 0; p.ids && k < p.ids_n; ++k) {
        const double id = load_dyn(p.ids, p.ids_dtype, k * p.ids_s);
        if (!(id >= 0.0 && id < (double)p.C && id == floor(id)))
            report_invalid_label(error_slot, (int64_t)id);
    }
    double total = 0.0;
    for (int64_t g = 0; g < G; ++g) {
        int64_t counted = 0;
        double group = 0.0;
        for (int64_t c = 0; c < p.C; ++c)
            if (class_counts(p, c, seg_fg[g * p.C + c])) {
                ++counted;
                group += seg_loss[g * p.C + c];
            }
        for (int64_t c = 0; c < p.C; ++c) {
            const int64_t seg = g * p.C + c;
            const int counts = class_counts(p, c, seg_fg[seg]);
            double w = 0.0;
            if (counts) {
                w = p.reduction == PLOSS_REDUCTION_MEAN ? 1.0 / ((double)G * (double)counted) : 1.0;
                w *= p.pass == PLOSS_PASS_BACKWARD ? load_dyn(p.grad_loss, p.gl_dtype, g * p.gl_sg + c * p.gl_sc)
                                                   : p.scale;
            }
            if (omega)
                omega[seg] = (A)w;
            if (p.pass != PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE)
                store_dyn(p.loss, p.loss_dtype, g * p.l_sg + c * p.l_sc, counts ? seg_loss[seg] : 0.0);
        }
        if (p.reduction == PLOSS_REDUCTION_SUM)
            total += group;
        else if (counted > 0)
            total += group / (double)counted;
    }
    if (p.pass != PLOSS_PASS_BACKWARD && p.reduction != PLOSS_REDUCTION_NONE)
        store_dyn(p.loss, p.loss_dtype, 0,
                  p.reduction == PLOSS_REDUCTION_MEAN ? total / (double)G : total);
}

/* Per pixel: ∂ℓ/∂x_c = p_c·(G_c − Σ_k p_k·G_k), G_c = ω_gc × the signed weight; 0 if ignored.
 * When the signed weights live in the gradient, each slot is read before it is written. */
template <class T, class TI>
__global__ void __launch_bounds__(THREADS) lovasz_grad(const ploss_region_problem p, int64_t M, const acc_t<T> *mx,
                                                        const acc_t<T> *inv, WeightSlots<acc_t<T>> sw,
                                                        const acc_t<T> *omega)
{
    using A = acc_t<T>;
    const T *x = (const T *)p.x;
    T *grad = (T *)p.grad;
    const int64_t NS = p.N * p.S;
    for (int64_t q = thread_index(); q < NS; q += grid_stride()) {
        int64_t n, s;
        split_pixel(p, q, n, s);
        const int64_t g = p.per_image ? n : 0, local = q - g * M;
        const int64_t go = offset_of(p, n, s, p.g_sn, p.g_ss);
        if (label_of<TI>(p, n, s, nullptr) < 0) {
            for (int64_t c = 0; c < p.C; ++c)
                grad[go + c * p.g_sc] = from_acc<T>(A(0));
            continue;
        }
        const int64_t xo = offset_of(p, n, s, p.x_sn, p.x_ss);
        const A m = mx[q], iv = inv[q];
        /* the slot of class c: go + c·g_sc in the gradient, else (g·C + c)·M + local */
        const int64_t w0 = sw.in_grad ? go : g * p.C * M + local, ws = sw.in_grad ? p.g_sc : M;
        A dot = 0;
        for (int64_t c = 0; c < p.C; ++c)
            dot += m_exp((A)to_acc(x[xo + c * p.x_sc]) - m) * iv * omega[g * p.C + c] * sw.w[w0 + c * ws];
        for (int64_t c = 0; c < p.C; ++c) {
            const A pc = m_exp((A)to_acc(x[xo + c * p.x_sc]) - m) * iv;
            grad[go + c * p.g_sc] = from_acc<T>(pc * (omega[g * p.C + c] * sw.w[w0 + c * ws] - dot));
        }
    }
}

template <class T, class TI> ploss_status run(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    using A = acc_t<T>;
    const cudaStream_t stream = stream_of(ctx);
    const int64_t G = ploss_region_groups(p), M = ploss_region_group_pixels(p), nseg = G * p->C, NS = p->N * p->S;
    const int64_t chunks = (M + CHUNK - 1) / CHUNK;
    const int want_grad = p->pass != PLOSS_PASS_FORWARD;
    if (M > INT32_MAX)
        return ploss_error(PLOSS_ERR_UNSUPPORTED,
                           "input: %lld pixels in a group: the CUDA Lovász-softmax sorts at most 2^31 - 1 pixels "
                           "per group",
                           (long long)M);
    /* the signed weights go into the gradient when it has the accumulation type and is not
     * the input (inplace: the logits are still needed) */
    const int in_grad = want_grad && sizeof(T) == sizeof(A) && p->grad != p->x;

    /* segments per sort: as many as fit (up to MAX_BATCH) with the sort's buffers, next to
     * the softmax statistics, within the input's size at the accumulation width */
    const int64_t per_item = 16 + (sizeof(A) == sizeof(float) ? 0 : (int64_t)sizeof(A));
    const int64_t budget = p->C * NS * (int64_t)sizeof(A), stats = 2 * NS * (int64_t)sizeof(A);
    int64_t batch = budget > stats ? (budget - stats) / (per_item * M) : 0;
    batch = batch < 1 ? 1 : batch > MAX_BATCH ? MAX_BATCH : batch;
    batch = batch < nseg ? batch : nseg;
    while (batch > 1 && batch * M > INT32_MAX)
        --batch;
    const int end_bit = CODE_BITS + (batch > 2 ? 2 : batch > 1 ? 1 : 0);
    const int items = (int)(batch * M);

    size_t sort_bytes = 0;
    cub::DoubleBuffer<uint32_t> keys(nullptr, nullptr), vals(nullptr, nullptr);
    ploss_status st = cub_status(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, vals, items, 0, end_bit, stream),
                                 "lovasz_softmax: sizing the radix sort");
    if (st)
        return st;
    const size_t b_buf = align_up((size_t)items * 4);
    const size_t b_err = sizeof(A) == sizeof(float) ? 0 : align_up((size_t)items * sizeof(A));
    const size_t b_stat = align_up((size_t)NS * sizeof(A));
    const size_t b_w = want_grad && !in_grad ? align_up((size_t)(nseg * M) * sizeof(A)) : 0;
    const size_t b_part = align_up((size_t)(nseg * chunks) * sizeof(A)), b_cnt = align_up((size_t)(nseg * chunks) * 4);
    const size_t b_seg = align_up((size_t)nseg * 8);
    const size_t total =
        4 * b_buf + b_err + 2 * b_stat + b_w + b_part + 2 * b_cnt + 3 * b_seg + 256 + align_up(sort_bytes);
    char *ws = nullptr;
    st = ploss_workspace(ctx, total, (void **)&ws);
    if (st)
        return st;
    char *at = ws;
    const auto take = [&at](size_t bytes) {
        char *r = at;
        at += bytes;
        return r;
    };
    keys = cub::DoubleBuffer<uint32_t>((uint32_t *)take(b_buf), (uint32_t *)take(b_buf));
    vals = cub::DoubleBuffer<uint32_t>((uint32_t *)take(b_buf), (uint32_t *)take(b_buf));
    A *err = b_err ? (A *)take(b_err) : nullptr;
    A *mx = (A *)take(b_stat), *inv = (A *)take(b_stat);
    const WeightSlots<A> slots{in_grad ? (A *)p->grad : (A *)take(b_w), in_grad};
    A *partial = (A *)take(b_part);
    int32_t *chunk_fg = (int32_t *)take(b_cnt), *chunk_before = (int32_t *)take(b_cnt);
    int32_t *seg_fg = (int32_t *)take(b_seg);
    double *seg_loss = (double *)take(b_seg);
    A *omega = (A *)take(b_seg);
    unsigned *ticket = (unsigned *)take(256);
    void *temp = take(align_up(sort_bytes));

    lovasz_stats<T, TI><<<grid_blocks(NS, THREADS), THREADS, 0, stream>>>(*p, mx, inv, ctx->error_slot, ticket);
    if ((st = check_launch("lovasz_softmax statistics")))
        return st;
    for (int64_t s0 = 0; s0 < nseg; s0 += batch) {
        const int nb = (int)(nseg - s0 < batch ? nseg - s0 : batch);
        const unsigned blocks = (unsigned)(nb * chunks);
        lovasz_keys<T, TI><<<grid_blocks(M, THREADS), THREADS, 0, stream>>>(
            *p, M, s0, nb, mx, inv, keys.Current(), vals.Current(), err,
            want_grad ? slots : WeightSlots<A>{nullptr, 0});
        if ((st = check_launch("lovasz_softmax keys")))
            return st;
        if ((st = cub_status(cub::DeviceRadixSort::SortPairs(temp, sort_bytes, keys, vals, (int)(nb * M), 0, end_bit,
                                                             stream),
                             "lovasz_softmax: the radix sort")))
            return st;
        lovasz_count<<<blocks, THREADS, 0, stream>>>(vals.Current(), M, chunks, s0, nb, chunk_fg, chunk_before,
                                                     seg_fg, ticket);
        if ((st = check_launch("lovasz_softmax counts")))
            return st;
        lovasz_weights<A><<<blocks, THREADS, 0, stream>>>(*p, keys.Current(), vals.Current(), err, M, chunks, s0,
                                                          chunk_before, seg_fg, want_grad, slots, partial);
        if ((st = check_launch("lovasz_softmax weights")))
            return st;
    }
    lovasz_finish<A><<<1, THREADS, 0, stream>>>(*p, partial, seg_fg, chunks, seg_loss, want_grad ? omega : nullptr,
                                                ctx->error_slot);
    if ((st = check_launch("lovasz_softmax finish")))
        return st;
    if (want_grad) {
        lovasz_grad<T, TI><<<grid_blocks(NS, THREADS), THREADS, 0, stream>>>(*p, M, mx, inv, slots, omega);
        if ((st = check_launch("lovasz_softmax gradient")))
            return st;
    }
    return PLOSS_OK;
}

} // namespace

extern "C" ploss_status ploss_cuda_lovasz(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    return dispatch_float(p->x_dtype, "input", [&](auto tag) {
        using T = typename decltype(tag)::type;
        return dispatch_index(p->t_dtype, "target", [&](auto itag) {
            using TI = typename decltype(itag)::type;
            return run<T, TI>(ctx, p);
        });
    });
}

} // namespace lovasz_kernels
} // namespace ploss_cuda
