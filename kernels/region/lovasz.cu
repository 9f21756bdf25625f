/*
 * lovasz.cu — CUDA backend of the Lovász-softmax loss (formulas in core/engines/region.h and
 * docs/losses.md).  fp32 accumulation for f32/f16/bf16 input, f64 for f64.
 *
 * Every (group, class) segment is sorted at once by one CUB radix sort of 64-bit keys
 *     segment << 34 | ignored << 33 | ~bits(error as f32) << 1 | foreground
 * over bits [1, 34 + bits(segments)): within a segment the valid pixels come first by
 * decreasing error (a canonical NaN error first), the ignored ones last; the foreground bit
 * rides along unsorted.  The sort is stable, so ties keep the increasing pixel order of the
 * CPU backend.  Then:
 *  - the foreground bits are summed by one CUB integer scan over all segments (a segment's
 *    counts are the scan minus its value before the segment: exact to 2^31 pixels);
 *  - one block per chunk of a segment takes each rank's Lovász weight in closed form, adds
 *    error × weight to a per-chunk partial (CUB block reduction) and, for a gradient,
 *    writes the signed weight over the pixel's error (same slot, same thread);
 *  - one thread per segment adds its partials in order; one thread reduces the groups and
 *    classes in double and writes the loss and each L_gc's weight in the reduced loss;
 *  - one thread per pixel recomputes its softmax and writes the gradient.
 * Nothing uses a float atomic: the results are bitwise the same on every run.  Invalid
 * labels are reported through the context's error slot and their pixels treated as ignored.
 * The workspace (keys and values double-buffered for the sort, the counts in the free key
 * buffer, the errors: 28 bytes per class-pixel pair for f32, plus CUB's small temporary) is
 * the context's, reused by the next call.
 */
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "region_common.cuh"

namespace ploss_cuda {
namespace {
using namespace region;

constexpr int THREADS = 256;
constexpr int64_t CHUNK = 4096; /* ranks of one segment per block of the weight pass */

/* Max and sum of exp(x − max) of a pixel's logits. */
template <class T> __device__ __forceinline__ void softmax_stats(const ploss_region_problem &p, const T *x, int64_t xo,
                                                                 acc_t<T> &mx, acc_t<T> &sum)
{
    using A = acc_t<T>;
    mx = -INFINITY;
    for (int64_t c = 0; c < p.C; ++c)
        mx = MaxOp()(mx, (A)to_acc(x[xo + c * p.x_sc]));
    sum = 0;
    for (int64_t c = 0; c < p.C; ++c)
        sum += m_exp((A)to_acc(x[xo + c * p.x_sc]) - mx);
}

/* The sort key's error bits: decreasing error ascending, a NaN error first. */
__device__ __forceinline__ uint64_t error_bits(float e)
{
    if (e != e)
        e = __uint_as_float(0x7fc00000u);
    else if (!(e > 0.0f))
        e = 0.0f;
    return (uint64_t)(~__float_as_uint(e));
}

/* Per pixel: the keys, values (pixel index in the group) and errors of its C segments. */
template <class T, class TI>
__global__ void __launch_bounds__(THREADS) lovasz_keys(const ploss_region_problem p, int64_t M, uint64_t *keys,
                                                        int32_t *vals, acc_t<T> *err, int64_t *error_slot)
{
    using A = acc_t<T>;
    const T *x = (const T *)p.x;
    const int64_t NS = p.N * p.S;
    for (int64_t q = thread_index(); q < NS; q += grid_stride()) {
        const int64_t n = q / p.S, s = q % p.S, g = p.per_image ? n : 0, local = p.per_image ? s : q;
        const int64_t y = load_label<TI>(p, q, error_slot);
        const int64_t xo = pixel_at(p, q, p.x_sn, p.x_ss);
        A mx, sum;
        softmax_stats(p, x, xo, mx, sum);
        const A inv = A(1) / sum;
        for (int64_t c = 0; c < p.C; ++c) {
            const int64_t seg = g * p.C + c, idx = seg * M + local;
            const A pc = m_exp((A)to_acc(x[xo + c * p.x_sc]) - mx) * inv;
            const A e = y == c ? A(1) - pc : pc;
            const uint64_t key = y < 0 ? (1ull << 33) : (error_bits((float)e) << 1 | (uint64_t)(y == c));
            keys[idx] = (uint64_t)seg << 34 | key;
            vals[idx] = (int32_t)local;
            err[idx] = y < 0 ? A(0) : e;
        }
    }
}

/* The foreground bit of each sorted key, for the scan. */
__global__ void __launch_bounds__(THREADS) lovasz_foreground(const uint64_t *keys, int64_t E, int32_t *fg)
{
    for (int64_t k = thread_index(); k < E; k += grid_stride())
        fg[k] = (int32_t)(keys[k] & 1u);
}

/* One block per chunk of a segment: each rank's Lovász weight, the chunk's Σ error·weight,
 * and (want_grad) the signed weight written over the pixel's error. */
template <class A>
__global__ void __launch_bounds__(THREADS) lovasz_weights(const uint64_t *keys, const int32_t *vals,
                                                           const int32_t *count, int64_t M, int64_t chunks,
                                                           int want_grad, A *err, A *partial)
{
    const int64_t seg = blockIdx.x / chunks, chunk = blockIdx.x % chunks, base = seg * M;
    const int64_t before = base > 0 ? count[base - 1] : 0, P = count[base + M - 1] - before;
    const int64_t end = (chunk + 1) * CHUNK < M ? (chunk + 1) * CHUNK : M;
    A term = 0;
    for (int64_t j = chunk * CHUNK + threadIdx.x; j < end; j += THREADS) {
        const uint64_t key = keys[base + j];
        if (key >> 33 & 1u) /* ignored: every later rank of the segment is ignored too */
            break;
        const int fg = (int)(key & 1u);
        const int64_t k = j + 1, F = count[base + j] - before;
        const A a = (A)(P + k - F);
        const A w = (k == 1 || fg) ? A(1) / a : (A)(P - F) / a / (a - A(1));
        A *slot = err + base + vals[base + j];
        term += *slot * w;
        if (want_grad)
            *slot = fg ? -w : w;
    }
    const A total = block_reduce<THREADS>(term, SumOp());
    if (threadIdx.x == 0)
        partial[blockIdx.x] = total;
}

/* One thread per segment: L (its partials in order) and P (its foreground count). */
template <class A>
__global__ void lovasz_segments(const A *partial, const int32_t *count, int64_t nseg, int64_t M, int64_t chunks,
                                double *seg_loss, int64_t *seg_count)
{
    for (int64_t seg = thread_index(); seg < nseg; seg += grid_stride()) {
        double L = 0.0;
        for (int64_t b = 0; b < chunks; ++b)
            L += (double)partial[seg * chunks + b];
        const int64_t base = seg * M;
        seg_loss[seg] = L;
        seg_count[seg] = count[base + M - 1] - (base > 0 ? count[base - 1] : 0);
    }
}

/* Class c counts in a group with seg_count P: listed (classes = 'listed'; an index outside
 * [0, C) is reported in the error slot), present, or always ('all'). */
__device__ __forceinline__ int class_counts(const ploss_region_problem &p, int64_t c, int64_t P)
{
    if (!p.ids)
        return !p.present || P > 0;
    for (int64_t k = 0; k < p.ids_n; ++k)
        if (load_int_dyn(p.ids, p.ids_dtype, k * p.ids_s) == c)
            return 1;
    return 0;
}

/* One thread: the reduction over groups and classes (fixed order, double), the loss, and
 * the weight ω of each L_gc in the reduced loss. */
template <class A>
__global__ void lovasz_finish(const ploss_region_problem p, const double *seg_loss, const int64_t *seg_count,
                              A *omega, int64_t *error_slot)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    for (int64_t k = 0; p.ids && k < p.ids_n; ++k) {
        const double id = load_dyn(p.ids, p.ids_dtype, k * p.ids_s);
        if (!(id >= 0.0 && id < (double)p.C && id == floor(id)))
            report_invalid_label(error_slot, (int64_t)id);
    }
    const int64_t G = p.per_image ? p.N : 1;
    double total = 0.0;
    for (int64_t g = 0; g < G; ++g) {
        int64_t counted = 0;
        double group = 0.0;
        for (int64_t c = 0; c < p.C; ++c)
            if (class_counts(p, c, seg_count[g * p.C + c])) {
                ++counted;
                group += seg_loss[g * p.C + c];
            }
        for (int64_t c = 0; c < p.C; ++c) {
            const int64_t seg = g * p.C + c;
            const int counts = class_counts(p, c, seg_count[seg]);
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

/* Per pixel: ∂ℓ/∂x_c = p_c·(G_c − Σ_k p_k·G_k), G_c = ω_gc × the signed weight; 0 if ignored. */
template <class T, class TI>
__global__ void __launch_bounds__(THREADS) lovasz_grad(const ploss_region_problem p, int64_t M,
                                                        const acc_t<T> *signed_weight, const acc_t<T> *omega)
{
    using A = acc_t<T>;
    const T *x = (const T *)p.x;
    T *grad = (T *)p.grad;
    const int64_t NS = p.N * p.S;
    for (int64_t q = thread_index(); q < NS; q += grid_stride()) {
        const int64_t n = q / p.S, s = q % p.S, g = p.per_image ? n : 0, local = p.per_image ? s : q;
        const int64_t go = pixel_at(p, q, p.g_sn, p.g_ss);
        if (load_label<TI>(p, q, nullptr) < 0) {
            for (int64_t c = 0; c < p.C; ++c)
                grad[go + c * p.g_sc] = from_acc<T>(A(0));
            continue;
        }
        const int64_t xo = pixel_at(p, q, p.x_sn, p.x_ss);
        A mx, sum;
        softmax_stats(p, x, xo, mx, sum);
        const A inv = A(1) / sum;
        A dot = 0;
        for (int64_t c = 0; c < p.C; ++c) {
            const int64_t seg = g * p.C + c;
            dot += m_exp((A)to_acc(x[xo + c * p.x_sc]) - mx) * inv * omega[seg] * signed_weight[seg * M + local];
        }
        for (int64_t c = 0; c < p.C; ++c) {
            const int64_t seg = g * p.C + c;
            const A pc = m_exp((A)to_acc(x[xo + c * p.x_sc]) - mx) * inv;
            grad[go + c * p.g_sc] = from_acc<T>(pc * (omega[seg] * signed_weight[seg * M + local] - dot));
        }
    }
}

template <class T, class TI> ploss_status run(ploss_ctx_t *ctx, const ploss_region_problem *p)
{
    using A = acc_t<T>;
    const cudaStream_t stream = stream_of(ctx);
    const int64_t G = ploss_region_groups(p), M = ploss_region_group_pixels(p), nseg = G * p->C;
    const int64_t E = nseg * M, NS = p->N * p->S;
    const int64_t chunks = (M + CHUNK - 1) / CHUNK;
    const int want_grad = p->pass != PLOSS_PASS_FORWARD;
    if (E > INT32_MAX || nseg >= (1ll << 30))
        return ploss_error(PLOSS_ERR_UNSUPPORTED,
                           "input: %lld class-pixel pairs in %lld (group, class) segments: the CUDA Lovász-softmax "
                           "sorts at most 2^31 - 1 pairs in fewer than 2^30 segments",
                           (long long)E, (long long)nseg);
    int end_bit = 34;
    while (end_bit < 64 && (1ll << (end_bit - 34)) < nseg)
        ++end_bit;

    size_t sort_bytes = 0, scan_bytes = 0;
    cub::DoubleBuffer<uint64_t> keys(nullptr, nullptr);
    cub::DoubleBuffer<int32_t> vals(nullptr, nullptr);
    if (cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, vals, E, 1, end_bit, stream) != cudaSuccess ||
        cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, (const int32_t *)nullptr, (int32_t *)nullptr, E,
                                      stream) != cudaSuccess)
        return ploss_error(PLOSS_ERR_CUDA, "lovasz_softmax: CUB temporary storage query failed");
    const size_t b_keys = align_up((size_t)E * 8), b_vals = align_up((size_t)E * 4), b_err = align_up((size_t)E * sizeof(A));
    const size_t b_part = align_up((size_t)(nseg * chunks) * sizeof(A)), b_seg = align_up((size_t)nseg * 8);
    const size_t b_temp = align_up(sort_bytes > scan_bytes ? sort_bytes : scan_bytes);
    const size_t total = 2 * b_keys + 2 * b_vals + b_err + b_part + 3 * b_seg + b_temp + 256;
    char *ws = nullptr;
    ploss_status st = ploss_workspace(ctx, total, (void **)&ws);
    if (st)
        return st;
    keys = cub::DoubleBuffer<uint64_t>((uint64_t *)ws, (uint64_t *)(ws + b_keys));
    vals = cub::DoubleBuffer<int32_t>((int32_t *)(ws + 2 * b_keys), (int32_t *)(ws + 2 * b_keys + b_vals));
    A *err = (A *)(ws + 2 * b_keys + 2 * b_vals);
    A *partial = (A *)((char *)err + b_err);
    double *seg_loss = (double *)((char *)partial + b_part);
    int64_t *seg_count = (int64_t *)((char *)seg_loss + b_seg);
    A *omega = (A *)((char *)seg_count + b_seg);
    void *temp = (char *)omega + b_seg;

    lovasz_keys<T, TI><<<grid_blocks(NS, THREADS), THREADS, 0, stream>>>(*p, M, keys.Current(), vals.Current(), err,
                                                                         ctx->error_slot);
    if ((st = check_launch("lovasz_softmax keys")))
        return st;
    cudaError_t e = cub::DeviceRadixSort::SortPairs(temp, sort_bytes, keys, vals, E, 1, end_bit, stream);
    if (e != cudaSuccess)
        return ploss_error(PLOSS_ERR_CUDA, "lovasz_softmax: the radix sort: %s", cudaGetErrorString(e));
    /* the sorted keys and values are Current(); the other key buffer holds the foreground
     * bits and their scan */
    const uint64_t *sorted_keys = keys.Current();
    const int32_t *sorted_vals = vals.Current();
    int32_t *fg = (int32_t *)keys.Alternate(), *count = fg + E;
    lovasz_foreground<<<grid_blocks(E, THREADS), THREADS, 0, stream>>>(sorted_keys, E, fg);
    if ((st = check_launch("lovasz_softmax foreground")))
        return st;
    if ((e = cub::DeviceScan::InclusiveSum(temp, scan_bytes, (const int32_t *)fg, count, E, stream)) != cudaSuccess)
        return ploss_error(PLOSS_ERR_CUDA, "lovasz_softmax: the foreground scan: %s", cudaGetErrorString(e));
    lovasz_weights<A><<<(unsigned)(nseg * chunks), THREADS, 0, stream>>>(sorted_keys, sorted_vals, count, M, chunks,
                                                                        want_grad, err, partial);
    if ((st = check_launch("lovasz_softmax weights")))
        return st;
    lovasz_segments<A><<<grid_blocks(nseg, THREADS), THREADS, 0, stream>>>(partial, count, nseg, M, chunks, seg_loss,
                                                                         seg_count);
    if ((st = check_launch("lovasz_softmax segments")))
        return st;
    lovasz_finish<A><<<1, 1, 0, stream>>>(*p, seg_loss, seg_count, want_grad ? omega : nullptr, ctx->error_slot);
    if ((st = check_launch("lovasz_softmax finish")))
        return st;
    if (want_grad) {
        lovasz_grad<T, TI><<<grid_blocks(NS, THREADS), THREADS, 0, stream>>>(*p, M, err, omega);
        if ((st = check_launch("lovasz_softmax gradient")))
            return st;
    }
    return PLOSS_OK;
}

} // namespace
} // namespace ploss_cuda

extern "C" ploss_status ploss_cuda_lovasz(ploss_ctx_t *ctx, const ploss_region_problem *p)
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
