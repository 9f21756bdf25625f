/*
 * direct_rows.cu — CUDA backend of the direct rows (formulas in core/engines/rows.h): the
 * negative log-likelihood, the multi-class margin loss, the multi-label soft margin and
 * margin losses and the class simplex loss, no softmax.
 *
 * Kernels, in stream order:
 *  - direct_samples: NLL reads each sample's label and the target's entry x_iy; the
 *    multi-class margin walks the sample's row (twice with the gradient: the sums, then the
 *    gradient row, each entry read before it is written, so the gradient may be the input
 *    itself), a warp per row when the classes are the row (S = 1: coalesced reads), a thread
 *    per sample when they are strided over the pixels (S > 1: neighbouring threads read
 *    neighbouring pixels).  It writes the per-sample loss ('none') or a per-block partial of
 *    Σ ℓ and of the MEAN divisor (NLL: Σ w_y); an out-of-range label is reported through the
 *    context's error slot and the sample is skipped (nothing is read out of bounds).
 *  - direct_finish: one block adds the partials in a fixed order, stores the reduced loss
 *    and NLL's gradient scale ω in the workspace (deterministic, no atomics, no host
 *    synchronisation).
 *  - nll_grad: NLL's gradient, −w_y·ω at the target's class, 0 elsewhere and in ignored
 *    rows; a 2-D grid (y: samples; x: the classes of a row for S = 1, the pixels for S > 1,
 *    each thread then writing its pixel's C classes), so every label is read once per thread
 *    and no index is divided.
 * The other kinds' ω is known without a reduction (their MEAN divisor is the sample count,
 * the class simplex's the element count), so their gradient is written by direct_samples,
 * which walks the multi-label loss's row (labels and logits) and the class simplex's like the
 * multi-class margin's.
 *
 * The multi-label margin loss takes a warp per row.  A list of at most 32 classes is held
 * in the lanes' registers: one sweep over the classes gives the loss, each unlisted class's
 * gradient (against every listed class, through shuffles) and, by ballots, each listed
 * class's count of active hinges.  A longer list marks its classes in a bit set of the
 * workspace (a set per warp of the grid, reused row after row); a sweep over the classes
 * gives the loss and the unlisted classes' gradient, a sweep per distinct listed class its
 * gradient.  A listed class's gradient needs every unlisted input and an unlisted one's
 * every listed input, so in place the gradient is written to the workspace first and
 * copied over the input after the kernel (copy_rows).
 */
#include <algorithm>

#include "common.cuh"
#include "rows.h"

namespace ploss_cuda {
namespace direct_rows_kernels {
namespace {

constexpr int THREADS = 256;
constexpr int64_t MAX_BLOCKS = 4096; /* partials per reduction: 2 × 32 KiB of workspace */
constexpr int FINISH_THREADS = 1024;
constexpr int64_t GRAD_BLOCKS = 4096; /* NLL's gradient pass: blocks in all              */
constexpr int64_t GRAD_ITEMS = 8;     /* and entries per thread along a row (at least)    */

/* The label of sample (n, s), and whether it counts: in [0, C) (out of range: reported when
 * error_slot is given, skipped) and not ignore_index. */
__device__ __forceinline__ bool label_of(const ploss_direct_problem &p, int64_t n, int64_t s, int64_t *error_slot,
                                         int64_t &y)
{
    y = sample_label(p, n, s);
    if (y == p.ignore_index && p.ignore_index != INT64_MIN) /* INT64_MIN: no ignore_index */
        return false;
    if (y < 0 || y >= p.C) {
        report_invalid_label(error_slot, y);
        return false;
    }
    return true;
}

__device__ __forceinline__ double weight_of(const ploss_direct_problem &p, int64_t y)
{
    return p.w ? load_dyn(p.w, p.w_dtype, y * p.w_s) : 1.0;
}

/* ω of sample (n, s) for the gradients written by direct_samples: the per-sample upstream
 * gradient ('none' backward), the scalar one (÷ the MEAN divisor: the sample count, the class
 * simplex's element count), or the fused scale. */
template <bool SIMPLEX>
__device__ __forceinline__ double margin_omega(const ploss_direct_problem &p, int64_t n, int64_t s)
{
    const bool mean = p.reduction == PLOSS_REDUCTION_MEAN;
    const double count = (double)(p.N * p.S) * (SIMPLEX ? (double)p.C : 1.0);
    if (p.pass == PLOSS_PASS_FUSED)
        return mean ? p.scale / count : p.scale;
    if (p.reduction == PLOSS_REDUCTION_NONE)
        return load_dyn(p.grad_loss, p.gl_dtype, n * p.gl_sn + s * p.gl_ss);
    const double up = load_dyn(p.grad_loss, p.gl_dtype, 0);
    return mean ? up / count : up;
}

/* Multi-class margin loss of a row (label y, weight wy) walked by W lanes (W = 32: a warp,
 * lane `lane`; W = 1: one thread); with `grad`, om·∂ℓ/∂x into the gradient row.  Every lane
 * returns the row's loss.  In double, as the CPU backend: which hinges are active (z > 0) is
 * then the same decision on both (a jump of the p = 1 gradient), and the pass stays
 * memory-bound.  The warp's sums are combined in a fixed butterfly order (deterministic). */
template <class T, int W>
__device__ double margin_row(const ploss_direct_problem &p, int64_t n, int64_t s, int64_t y, double wy, bool grad,
                             double om, int lane)
{
    const T *x = (const T *)p.x + n * p.x_sn + s * p.x_ss;
    T *g = (T *)p.grad + n * p.g_sn + s * p.g_ss;
    const double xy = (double)to_acc(x[y * p.x_sc]), c = wy / (double)p.C;
    double sum = 0.0, gsum = 0.0;
    for (int64_t j = lane; j < p.C; j += W) {
        const double z = p.margin - xy + (double)to_acc(x[j * p.x_sc]);
        if (j != y && !(z <= 0.0)) { /* z > 0, or NaN: counted */
            sum += p.power == 1 ? z : z * z;
            gsum += p.power == 1 ? 1.0 : 2.0 * z;
        }
    }
    if (W > 1) { /* also the barrier after which x_y may be overwritten (in place) */
        for (int o = W / 2; o > 0; o /= 2) {
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
            gsum += __shfl_xor_sync(0xffffffffu, gsum, o);
        }
    }
    if (grad) {
        for (int64_t j = lane; j < p.C; j += W) {
            const double z = p.margin - xy + (double)to_acc(x[j * p.x_sc]);
            double v = 0.0;
            if (j == y)
                v = ploss_upstream(om, -c * gsum);
            else if (!(z <= 0.0))
                v = c * (p.power == 1 ? 1.0 : 2.0 * z) * om;
            g[j * p.g_sc] = from_acc<T>((acc_t<T>)v);
        }
    }
    return c * sum;
}

/* Class simplex loss of a row (label y) walked by W lanes, as margin_row; with `grad`,
 * om·∂ℓ/∂x into the gradient row (each entry read before it is written).  In double, as the
 * CPU backend. */
template <class T, int W>
__device__ double class_simplex_row(const ploss_direct_problem &p, int64_t n, int64_t s, int64_t y, bool grad,
                                    double om, int lane)
{
    const T *x = (const T *)p.x + n * p.x_sn + s * p.x_ss;
    T *g = (T *)p.grad + n * p.g_sn + s * p.g_ss;
    double sum = 0.0;
    for (int64_t j = lane; j < p.C; j += W) {
        const double d = (double)to_acc(x[j * p.x_sc]) - ploss_simplex_coord(p.C, y, j);
        sum += d * d;
        if (grad)
            g[j * p.g_sc] = from_acc<T>((acc_t<T>)(2.0 * d * om));
    }
    if (W > 1)
        for (int o = W / 2; o > 0; o /= 2)
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
    return sum;
}

/* Multi-label soft margin loss of a row walked by W lanes, as margin_row; with `grad`,
 * om·∂ℓ/∂x into the gradient row (each entry read before it is written).  In double, as
 * the CPU backend. */
template <class T, int W>
__device__ double multilabel_row(const ploss_direct_problem &p, int64_t n, int64_t s, bool grad, double om, int lane)
{
    const T *x = (const T *)p.x + n * p.x_sn + s * p.x_ss;
    T *g = (T *)p.grad + n * p.g_sn + s * p.g_ss;
    const int64_t t0 = n * p.t_sn + s * p.t_ss;
    const double inv_c = 1.0 / (double)p.C;
    double sum = 0.0;
    for (int64_t j = lane; j < p.C; j += W) {
        const double v = (double)to_acc(x[j * p.x_sc]), y = load_dyn(p.t, p.t_dtype, t0 + j * p.t_sc);
        const double w = weight_of(p, j), e = exp(-fabs(v)), lg = log1p(e); /* sp(z) = max(z, 0) + lg */
        sum += w * (y * ((v < 0.0 ? -v : 0.0) + lg) + (1.0 - y) * ((v > 0.0 ? v : 0.0) + lg));
        if (grad) { /* σ(v) − y, without the cancellation of 1 − σ(−v) near σ = y = 1 */
            const double small = e / (1.0 + e); /* σ(−|v|) */
            g[j * p.g_sc] = from_acc<T>((acc_t<T>)(w * inv_c * (v >= 0.0 ? (1.0 - y) - small : small - y) * om));
        }
    }
    if (W > 1)
        for (int o = W / 2; o > 0; o /= 2)
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
    return sum * inv_c;
}

/* The W lanes' predicate bits (W = 1: the lane's own). */
template <int W> __device__ __forceinline__ unsigned lanes_ballot(bool pred)
{
    if constexpr (W > 1)
        return __ballot_sync(0xffffffffu, pred);
    else
        return pred ? 1u : 0u;
}

/* Lane `src`'s value (W = 1: the lane's own). */
template <int W, class V> __device__ __forceinline__ V shfl_lane(V v, int src)
{
    if constexpr (W > 1)
        return __shfl_sync(0xffffffffu, v, src);
    else
        return v;
}

/* Multi-label margin loss of a row walked by a warp (W = 32); with `grad`, om·∂ℓ/∂x into
 * the gradient row (never the input: in place, the caller stages it).  listed: the warp's
 * bit set of ⌈C/32⌉ words (used by lists of more than W classes).  An entry of the list outside [0, C) is reported, and the row
 * then adds nothing and gets a zero gradient.  In double, as the CPU backend; the warp's
 * sums in a fixed butterfly order. */
template <class T, int W>
__device__ double multilabel_margin_row(const ploss_direct_problem &p, int64_t n, int64_t s, bool grad, double om,
                                        int lane, int64_t *error_slot, unsigned *listed)
{
    const T *x = (const T *)p.x + n * p.x_sn + s * p.x_ss;
    T *g = (T *)p.grad + n * p.g_sn + s * p.g_ss;
    const int64_t t0 = n * p.t_sn + s * p.t_ss, C = p.C, words = (C + 31) / 32;
    auto entry = [&](int64_t k) { return load_int_dyn(p.t, p.t_dtype, t0 + k * p.t_sc); };
    auto is_listed = [&](int64_t j) { return ((__ldcg(listed + (j >> 5)) >> (j & 31)) & 1u) != 0u; };
    /* the list's length L (its first negative entry, else C) and its entries' check */
    int64_t L = C;
    bool bad = false;
    for (int64_t base = 0; base < C && L == C; base += W) {
        const int64_t k = base + lane, y = k < C ? entry(k) : 0;
        const unsigned ends = lanes_ballot<W>(k < C && y < 0);
        const int first = ends ? __ffs((int)ends) - 1 : W;
        if (lane < first && k < C && y >= C) {
            bad = true;
            report_invalid_label(error_slot, y);
        }
        if (ends)
            L = base + first;
    }
    if (lanes_ballot<W>(bad)) {
        if (grad)
            for (int64_t j = lane; j < C; j += W)
                g[j * p.g_sc] = from_acc<T>(acc_t<T>(0));
        return 0.0;
    }
    if (L <= W) { /* the list in registers: lane k holds y_k and x_(y_k) */
        const int64_t yk = lane < L ? entry(lane) : -1;
        const double xk = lane < L ? (double)to_acc(x[yk * p.x_sc]) : 0.0;
        int64_t active = 0; /* lane k < L: #{unlisted j : 1 − x_(y_k) + x_j > 0} */
        double sum = 0.0;
        for (int64_t j0 = 0; j0 < C; j0 += W) {
            const int64_t j = j0 + lane;
            bool mine = j < C; /* an unlisted class of this lane */
            for (int kk = 0; kk < (int)L; ++kk) {
                const int64_t y = shfl_lane<W>(yk, kk); /* every lane shuffles */
                mine = mine && y != j;
            }
            const double xj = j < C ? (double)to_acc(x[j * p.x_sc]) : 0.0;
            double count = 0.0;
            for (int kk = 0; kk < (int)L; ++kk) {
                const double z = 1.0 - shfl_lane<W>(xk, kk) + xj;
                const bool on = mine && !(z <= 0.0); /* z > 0, or NaN: counted */
                sum += on ? z : 0.0;
                count += on ? 1.0 : 0.0;
                if (grad) {
                    const unsigned b = lanes_ballot<W>(on);
                    active += lane == kk ? __popc(b) : 0;
                }
            }
            if (grad && mine)
                g[j * p.g_sc] = from_acc<T>((acc_t<T>)ploss_upstream(om, count / (double)C));
        }
        if (W > 1)
            for (int o = W / 2; o > 0; o /= 2)
                sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (grad) { /* a class listed several times: its lanes' counts added, written by the first */
            int64_t total = 0;
            bool first = lane < L;
            for (int kk = 0; kk < (int)L; ++kk) {
                const int64_t ykk = shfl_lane<W>(yk, kk), akk = shfl_lane<W>(active, kk);
                total += ykk == yk ? akk : 0;
                first = first && !(ykk == yk && kk < lane);
            }
            if (first)
                g[yk * p.g_sc] = from_acc<T>((acc_t<T>)ploss_upstream(om, -(double)total / (double)C));
        }
        return sum / (double)C;
    }
    /* longer lists: the listed classes marked in the bit set, then the loss and the unlisted
     * classes' gradient, class j against every listed class */
    for (int64_t w = lane; w < words; w += W)
        __stcg(listed + w, 0u);
    __syncwarp();
    for (int64_t k = lane; k < L; k += W) {
        const int64_t y = entry(k);
        atomicOr(listed + (y >> 5), 1u << (y & 31));
    }
    __syncwarp();
    double sum = 0.0;
    for (int64_t j = lane; j < C; j += W) {
        if (is_listed(j))
            continue;
        const double xj = (double)to_acc(x[j * p.x_sc]);
        double count = 0.0;
        for (int64_t k = 0; k < L; ++k) {
            const double z = 1.0 - (double)to_acc(x[entry(k) * p.x_sc]) + xj;
            if (!(z <= 0.0)) { /* z > 0, or NaN: counted */
                sum += z;
                count += 1.0;
            }
        }
        if (grad)
            g[j * p.g_sc] = from_acc<T>((acc_t<T>)ploss_upstream(om, count / (double)C));
    }
    if (W > 1)
        for (int o = W / 2; o > 0; o /= 2)
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (!grad)
        return sum / (double)C;
    /* each distinct listed class c: −(its multiplicity)·#{unlisted j : 1 − x_c + x_j > 0} */
    for (int64_t k = 0; k < L; ++k) {
        const int64_t c = entry(k);
        bool earlier = false;
        int64_t times = 0;
        for (int64_t base = 0; base < L; base += W) {
            const int64_t q = base + lane;
            const bool same = q < L && entry(q) == c;
            earlier |= lanes_ballot<W>(same && q < k) != 0u;
            times += __popc(lanes_ballot<W>(same));
        }
        if (earlier)
            continue;
        const double base_c = 1.0 - (double)to_acc(x[c * p.x_sc]);
        int64_t active = 0;
        for (int64_t j0 = 0; j0 < C; j0 += W) {
            const int64_t j = j0 + lane;
            const bool on = j < C && !is_listed(j) && !(base_c + (double)to_acc(x[j * p.x_sc]) <= 0.0);
            active += __popc(lanes_ballot<W>(on));
        }
        if (lane == 0)
            g[c * p.g_sc] = from_acc<T>((acc_t<T>)ploss_upstream(om, -(double)(times * active) / (double)C));
    }
    return sum / (double)C;
}

/* The staged gradient (N×C, contiguous) over the input's own memory (multi-label margin in
 * place). */
template <class T>
__global__ void __launch_bounds__(THREADS) copy_rows(const ploss_direct_problem p, const T *staged)
{
    const int64_t total = p.N * p.C;
    for (int64_t i = thread_index(); i < total; i += grid_stride()) {
        const int64_t n = i / p.C, j = i - n * p.C;
        ((T *)p.grad)[n * p.g_sn + j * p.g_sc] = staged[i];
    }
}

/* W = 32: a warp per sample (the multi-class and multi-label margins and the class simplex
 * on rows, S = 1); W = 1: a thread.  SIMPLEX: the class simplex's own instance, whose f64
 * vertex coordinates (a square root and divisions per element) would otherwise raise the
 * registers and stack of every kind's kernel (80 registers and 80 bytes of stack for the
 * warp rows against 64 and 24 without them). */
template <class T, int W, bool SIMPLEX>
__global__ void __launch_bounds__(THREADS)
direct_samples(const ploss_direct_problem p, int64_t *error_slot, double *partials, unsigned *listed)
{
    using A = acc_t<T>;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD;
    const bool margin_grad = p.kind != PLOSS_DIRECT_NLL && p.pass != PLOSS_PASS_FORWARD;
    const bool none = p.reduction == PLOSS_REDUCTION_NONE;
    const int64_t M = p.N * p.S;
    const int lane = W > 1 ? (int)(threadIdx.x % W) : 0;
    double loss_sum = 0.0, divisor_sum = 0.0;
    for (int64_t i = thread_index() / W; i < M; i += grid_stride() / W) {
        const int64_t n = p.S == 1 ? i : i / p.S, s = p.S == 1 ? 0 : i % p.S;
        int64_t y;
        double loss = 0.0;
        if (p.kind == PLOSS_DIRECT_MULTILABEL_MARGIN) { /* launched with W = 32 only */
            if constexpr (W > 1)
                loss = multilabel_margin_row<T, W>(p, n, s, margin_grad,
                                                   margin_grad ? margin_omega<SIMPLEX>(p, n, s) : 0.0, lane, error_slot,
                                                   listed + (thread_index() / W) * ((p.C + 31) / 32));
            divisor_sum += lane == 0 ? 1.0 : 0.0;
        } else if (p.kind == PLOSS_DIRECT_MULTILABEL_SOFT_MARGIN) { /* no label to check: every class counts */
            loss = multilabel_row<T, W>(p, n, s, margin_grad, margin_grad ? margin_omega<SIMPLEX>(p, n, s) : 0.0, lane);
            divisor_sum += lane == 0 ? 1.0 : 0.0;
        } else if (label_of(p, n, s, lane == 0 ? error_slot : nullptr, y)) {
            const double wy = weight_of(p, y);
            if constexpr (SIMPLEX) {
                loss = class_simplex_row<T, W>(p, n, s, y, margin_grad,
                                               margin_grad ? margin_omega<SIMPLEX>(p, n, s) : 0.0, lane);
                divisor_sum += lane == 0 ? (double)p.C : 0.0;
            } else if (p.kind == PLOSS_DIRECT_MULTI_MARGIN) {
                loss = margin_row<T, W>(p, n, s, y, wy, margin_grad,
                                        margin_grad ? margin_omega<SIMPLEX>(p, n, s) : 0.0, lane);
                divisor_sum += lane == 0 ? 1.0 : 0.0;
            } else {
                loss = -wy * (double)to_acc(((const T *)p.x)[n * p.x_sn + s * p.x_ss + y * p.x_sc]);
                divisor_sum += wy;
            }
        } else if (margin_grad) { /* an invalid label (reported): a zero gradient row */
            for (int64_t j = lane; j < p.C; j += W)
                ((T *)p.grad)[n * p.g_sn + s * p.g_ss + j * p.g_sc] = from_acc<T>(A(0));
        }
        if (lane != 0)
            continue; /* the row's loss is counted once, by lane 0 */
        if (want_loss && none)
            store_dyn(p.loss, p.loss_dtype, n * p.l_sn + s * p.l_ss, (double)(A)loss);
        loss_sum += loss;
    }
    if (partials) {
        loss_sum = block_reduce<THREADS>(loss_sum, SumOp());
        __syncthreads();
        divisor_sum = block_reduce<THREADS>(divisor_sum, SumOp());
        if (threadIdx.x == 0) {
            partials[blockIdx.x] = loss_sum;
            partials[gridDim.x + blockIdx.x] = divisor_sum;
        }
    }
}

/* One block: Σ ℓ and the divisor in a fixed order; the reduced loss (forward, fused) and
 * NLL's ω: up / divisor for MEAN (0 when nothing counts), up for SUM, with up the fused
 * scale or the backward's upstream gradient. */
__global__ void __launch_bounds__(FINISH_THREADS)
direct_finish(const ploss_direct_problem p, const double *partials, int64_t nparts, double *omega)
{
    double l = 0.0, d = 0.0;
    for (int64_t b = threadIdx.x; b < nparts; b += FINISH_THREADS) {
        l += partials[b];
        d += partials[nparts + b];
    }
    l = block_reduce<FINISH_THREADS>(l, SumOp());
    __syncthreads();
    d = block_reduce<FINISH_THREADS>(d, SumOp());
    if (threadIdx.x != 0)
        return;
    const bool mean = p.reduction == PLOSS_REDUCTION_MEAN;
    if (p.pass != PLOSS_PASS_BACKWARD)
        store_dyn(p.loss, p.loss_dtype, 0, mean ? ploss_rows_mean(l, d) : l);
    if (p.pass == PLOSS_PASS_FORWARD)
        return; /* no gradient: no upstream gradient to read */
    const double up = p.pass == PLOSS_PASS_FUSED ? p.scale : load_dyn(p.grad_loss, p.gl_dtype, 0);
    *omega = mean ? (d != 0.0 ? up / d : 0.0) : up;
}

/* ω of NLL's gradient: from direct_finish; a SUM backward's scalar upstream gradient; the
 * fused scale; per sample for a 'none' backward. */
__device__ __forceinline__ double nll_omega(const ploss_direct_problem &p, const double *omega_dev,
                                            double omega_host, int64_t n, int64_t s)
{
    if (p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE)
        return load_dyn(p.grad_loss, p.gl_dtype, n * p.gl_sn + s * p.gl_ss);
    if (omega_dev)
        return *omega_dev;
    return p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_SUM ? load_dyn(p.grad_loss, p.gl_dtype, 0)
                                                                               : omega_host;
}

/* S = 1: x over the classes of row n = y (grid-stride in both). */
template <class T>
__global__ void __launch_bounds__(THREADS)
nll_grad_rows(const ploss_direct_problem p, const double *omega_dev, double omega_host, int64_t *error_slot)
{
    T *grad = (T *)p.grad;
    const bool reporter = blockIdx.x == 0 && threadIdx.x == 0; /* the label reported once */
    for (int64_t n = blockIdx.y; n < p.N; n += gridDim.y) {
        int64_t y;
        const bool counts = label_of(p, n, 0, reporter ? error_slot : nullptr, y);
        const double v = counts ? -weight_of(p, y) * nll_omega(p, omega_dev, omega_host, n, 0) : 0.0;
        T *g = grad + n * p.g_sn;
        for (int64_t j = thread_index(); j < p.C; j += grid_stride())
            g[j * p.g_sc] = from_acc<T>((acc_t<T>)(j == y && counts ? v : 0.0));
    }
}

/* S > 1: x over the pixels of sample n = y; each thread writes its pixel's C classes. */
template <class T>
__global__ void __launch_bounds__(THREADS)
nll_grad_pixels(const ploss_direct_problem p, const double *omega_dev, double omega_host, int64_t *error_slot)
{
    T *grad = (T *)p.grad;
    for (int64_t n = blockIdx.y; n < p.N; n += gridDim.y)
        for (int64_t s = thread_index(); s < p.S; s += grid_stride()) {
            int64_t y;
            const bool counts = label_of(p, n, s, error_slot, y);
            const double v = counts ? -weight_of(p, y) * nll_omega(p, omega_dev, omega_host, n, s) : 0.0;
            T *g = grad + n * p.g_sn + s * p.g_ss;
            for (int64_t j = 0; j < p.C; ++j)
                g[j * p.g_sc] = from_acc<T>((acc_t<T>)(j == y && counts ? v : 0.0));
        }
}

} // namespace

extern "C" ploss_status ploss_cuda_direct_rows(ploss_ctx_t *ctx, const ploss_direct_problem *p)
{
    const bool want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const bool nll = p->kind == PLOSS_DIRECT_NLL;
    const bool reduced = p->reduction != PLOSS_REDUCTION_NONE;
    /* the samples pass: the loss, the gradient of every kind but NLL, or NLL's MEAN divisor */
    const bool samples = want_loss || !nll || (want_grad && p->reduction == PLOSS_REDUCTION_MEAN);
    const bool finish = reduced && (want_loss || (nll && want_grad && p->reduction == PLOSS_REDUCTION_MEAN));
    const int64_t M = p->N * p->S;
    /* a warp per row of the kinds but NLL (the multi-label margin is N×C: S = 1 always) */
    const bool listed_rows = p->kind == PLOSS_DIRECT_MULTILABEL_MARGIN;
    const bool warp_rows = !nll && (p->S == 1 || listed_rows);
    /* the target's dtype checked here, read by the kernels at run time: class indices, or the
     * multi-label loss's labels (float, or integer as the front admits them) */
    const bool any_target = p->kind == PLOSS_DIRECT_MULTILABEL_SOFT_MARGIN;
    const unsigned blocks = grid_blocks(warp_rows ? M * 32 : M, THREADS, MAX_BLOCKS);
    cudaStream_t stream = stream_of(ctx);

    /* workspace: 2 × blocks partials, then ω; the multi-label margin's bit sets (one per warp
     * of the grid) and, in place, its staged gradient */
    const size_t partial_bytes = finish ? (2 * (size_t)blocks + 1) * sizeof(double) : 0;
    const size_t set_bytes = listed_rows && M > 0 ? (size_t)blocks * (THREADS / 32) * (size_t)((p->C + 31) / 32) * 4 : 0;
    const bool staged = listed_rows && want_grad && p->grad == p->x && M > 0;
    const size_t set_at = (partial_bytes + 15) / 16 * 16, staged_at = (set_at + set_bytes + 15) / 16 * 16;
    const size_t staged_bytes = staged ? (size_t)M * (size_t)p->C * ploss_dtype_size(p->x_dtype) : 0;
    double *ws = NULL;
    unsigned *sets = NULL;
    void *stage = NULL;
    if (partial_bytes + set_bytes + staged_bytes > 0) {
        void *w = NULL;
        const ploss_status st = ploss_workspace(ctx, staged_at + staged_bytes, &w);
        if (st)
            return st;
        ws = finish ? (double *)w : NULL;
        sets = set_bytes ? (unsigned *)((char *)w + set_at) : NULL;
        stage = staged ? (char *)w + staged_at : NULL;
    }
    /* in place, the multi-label margin writes its gradient to the stage (N×C, contiguous) */
    ploss_direct_problem q = *p;
    if (staged) {
        q.grad = stage;
        q.g_sn = p->C;
        q.g_ss = 0;
        q.g_sc = 1;
    }
    /* NLL's ω: from direct_finish after a reduced samples pass; else the fused scale ('none':
     * of the sum) or what nll_grad reads itself (the upstream gradient of a backward pass) */
    const double *omega_dev = finish && want_grad ? ws + 2 * blocks : NULL;
    const double omega_host = p->pass == PLOSS_PASS_FUSED ? p->scale : 0.0;
    return dispatch_float(p->x_dtype, "input", [&](auto xtag) {
        using T = typename decltype(xtag)::type;
        auto run = [&](auto) -> ploss_status {
            ploss_status st;
            if (samples) {
                const bool simplex = p->kind == PLOSS_DIRECT_CLASS_SIMPLEX;
                if (warp_rows && simplex)
                    direct_samples<T, 32, true><<<blocks, THREADS, 0, stream>>>(q, ctx->error_slot, ws, sets);
                else if (warp_rows)
                    direct_samples<T, 32, false><<<blocks, THREADS, 0, stream>>>(q, ctx->error_slot, ws, sets);
                else if (simplex)
                    direct_samples<T, 1, true><<<blocks, THREADS, 0, stream>>>(q, ctx->error_slot, ws, sets);
                else
                    direct_samples<T, 1, false><<<blocks, THREADS, 0, stream>>>(q, ctx->error_slot, ws, sets);
                if ((st = check_launch("direct_samples")))
                    return st;
            }
            if (staged) {
                copy_rows<T><<<grid_blocks(M * p->C, THREADS, MAX_BLOCKS), THREADS, 0, stream>>>(*p, (const T *)stage);
                if ((st = check_launch("copy_rows")))
                    return st;
            }
            if (finish) {
                direct_finish<<<1, FINISH_THREADS, 0, stream>>>(*p, ws, (int64_t)blocks, ws + 2 * blocks);
                if ((st = check_launch("direct_finish")))
                    return st;
            }
            if (!nll || !want_grad || M * p->C == 0)
                return PLOSS_OK;
            /* short rows: blocks of the row's length rounded to a warp, not of THREADS idle
             * lanes; about GRAD_ITEMS entries per thread along a row and GRAD_BLOCKS blocks in
             * all, each looping over rows (a block per 256 entries of every row would be a
             * million blocks of a few instructions each at 8192 × 32000: block scheduling,
             * not bandwidth, would bound the pass) */
            const int64_t width = p->S == 1 ? p->C : p->S;
            const int threads = (int)std::min<int64_t>(THREADS, (width + 31) / 32 * 32);
            const int64_t gx = std::max<int64_t>(1, std::min<int64_t>(GRAD_BLOCKS, width / ((int64_t)threads * GRAD_ITEMS)));
            const int64_t gy = std::max<int64_t>(1, std::min<int64_t>({p->N, GRAD_BLOCKS / gx, 65535}));
            const dim3 grid((unsigned)gx, (unsigned)gy);
            if (p->S == 1)
                nll_grad_rows<T><<<grid, threads, 0, stream>>>(*p, omega_dev, omega_host, ctx->error_slot);
            else
                nll_grad_pixels<T><<<grid, threads, 0, stream>>>(*p, omega_dev, omega_host, ctx->error_slot);
            return check_launch("nll_grad");
        };
        return any_target ? dispatch_any(p->t_dtype, "target", run) : dispatch_index(p->t_dtype, "target", run);
    });
}

} // namespace direct_rows_kernels
} // namespace ploss_cuda
