/*
 * boxes.cu — CUDA backend of the box regression losses (core/engines/boxes.h): IoU, GIoU,
 * DIoU and CIoU, their maths in core/engines/boxes_math.h (the CPU backend's), computed in
 * fp32 (f64 for f64 input).
 *
 * One kernel, boxes_kernel<T, VEC, KIND> (KIND the loss, a constant: each instance keeps only
 * its own maths), a thread per box in a grid-stride loop over one wave of resident blocks,
 * reads the 8 numbers of a box pair once and writes its loss (NONE) and its 4 gradients in
 * the same pass.  VEC: the input, target (same dtype) and gradient are dense N×4 and aligned
 * to a box, so a box is one 4·sizeof(T)-byte load or store (one 16-byte vector for f32);
 * otherwise any strides, and a target of any float dtype.  PLAIN (fewer than 2^30
 * f32/f16/bf16 xyxy boxes without weights or an ignore mask) compiles the per-box option
 * tests out and indexes in 32 bits.  VEC and
 * PLAIN choose an instance by the call's layout and options, never by its pass, and VEC's
 * two instances run the same maths, so that every pass and layout of one call's options
 * gives bitwise the same results (a constant xyxy in only one of them would let the
 * compiler contract other products into FMAs there).  Instructions bound CIoU about as
 * much as bytes, so they count: one wave of resident blocks (not a block per 256 boxes)
 * spreads each thread's setup and the block reduction over many boxes, ω comes from the
 * host where it can, and f32 uses the atan2 and reciprocal below.  Boxes with
 * x2 < x1 or y2 < y1 (not ignored) are reported through the context's error slot and get a
 * NaN loss and a zero gradient, as do boxes whose ignore value is neither 0 nor 1.  Reduced
 * losses: per-thread sums, a CUB block reduction, one partial per block in the context's
 * workspace, then the last block to finish adds the partials in a fixed order — no float
 * atomics, no host synchronisation, one launch; bitwise repeatable on a card model (the
 * grid is the card's one wave).
 * MEAN with an ignore mask divides by the boxes kept, counted before the main kernel
 * (integer atomics, exact).  Also ploss_box_iou's pairwise similarities (box_pairs_kernel).
 */
#include <math_constants.h>

#include <algorithm>
#include <cfloat>
#include <type_traits>

#include "common.cuh"
#include "boxes.h"

namespace ploss_cuda {
namespace boxes_kernels {
namespace {

/* atan2(y, x) for x >= 0 (all boxes_math.h asks) in f32: the octant by |y| against x, then
 * a degree-17 odd polynomial of atan on [0, 1] (fitted for this file, absolute error below
 * 7e-8 in f32 arithmetic): a quarter of the instructions of atan2f, whose quadrant logic and
 * correctly rounded division weigh on compute-bound CIoU.  The ratio lo/hi <= 1 is lo times
 * the hardware reciprocal of hi (__fdividef's value) with hi raised to the smallest normal
 * float, which leaves 0/0 = 0 and drops __fdividef's rescaling of subnormal operands (both
 * products below 1.2e-38: boxes whose IoU terms have underflowed already).  A NaN argument
 * gives a number here, but a NaN coordinate makes the IoU terms, and so the loss, NaN anyway. */
__device__ __forceinline__ float box_atan2_f32(float y, float x)
{
    const float a = fabsf(y), lo = fminf(a, x), hi = fmaxf(fmaxf(a, x), FLT_MIN);
    float rhi;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(rhi) : "f"(hi));
    const float t = lo * rhi, s = t * t;
    float q = 2.435108414e-03f;
    q = fmaf(q, s, -1.430982072e-02f);
    q = fmaf(q, s, 3.962171078e-02f);
    q = fmaf(q, s, -7.220119983e-02f);
    q = fmaf(q, s, 1.049119979e-01f);
    q = fmaf(q, s, -1.415892243e-01f);
    q = fmaf(q, s, 1.998554319e-01f);
    q = fmaf(q, s, -3.333257139e-01f);
    q = fmaf(q, s, 9.999998808e-01f);
    const float r = q * t;
    return copysignf(a > x ? CUDART_PIO2_F - r : r, y);
}

/* 1/x in f32 within an ulp: the hardware's approximation and one Newton step on its exact
 * residual (unbiased: a sum over many boxes keeps f32 accuracy), without the range check
 * and slow path of a correctly rounded division; 0 and ±inf results pass unrefined.  The
 * approximation flushes subnormals (.ftz: one instruction, where the subnormal-safe form
 * rescales its argument in six more): 1/x is ±inf for |x| < 2^-126 and 0 for |x| > 2^126. */
__device__ __forceinline__ float box_rcp_f32(float x)
{
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    const float e = fmaf(-x, r, 1.f);
    return fabsf(r) < CUDART_INF_F && r != 0.f ? fmaf(r, e, r) : r;
}

#define BOX_FN __device__ __forceinline__
#define REAL float
#define F(name) name##_f32
#define ATAN2 box_atan2_f32
#define BOX_FMAX fmaxf
#define BOX_FMIN fminf
#define BOX_RCP box_rcp_f32
#include "boxes_math.h"
#undef REAL
#undef F
#undef ATAN2
#undef BOX_FMAX
#undef BOX_FMIN
#undef BOX_RCP
#define REAL double
#define F(name) name##_f64
#define ATAN2 atan2
#define BOX_FMAX fmax
#define BOX_FMIN fmin
#include "boxes_math.h"
#undef REAL
#undef F
#undef BOX_FN
#undef ATAN2
#undef BOX_FMAX
#undef BOX_FMIN

__device__ __forceinline__ int box_to_xyxy(int format, const float *r, float *b) { return box_to_xyxy_f32(format, r, b); }
__device__ __forceinline__ int box_to_xyxy(int format, const double *r, double *b) { return box_to_xyxy_f64(format, r, b); }
__device__ __forceinline__ void box_grad_from_xyxy(int format, float *g) { box_grad_from_xyxy_f32(format, g); }
__device__ __forceinline__ void box_grad_from_xyxy(int format, double *g) { box_grad_from_xyxy_f64(format, g); }
__device__ __forceinline__ float box_similarity(int kind, int paper, float eps0, float eps, const float *p,
                                                const float *t, int want_grad, float *g)
{
    return box_similarity_f32(kind, paper, eps0, eps, p, t, want_grad, g);
}
__device__ __forceinline__ double box_similarity(int kind, int paper, double eps0, double eps, const double *p,
                                                 const double *t, int want_grad, double *g)
{
    return box_similarity_f64(kind, paper, eps0, eps, p, t, want_grad, g);
}

constexpr int THREADS = 256;
constexpr int64_t MAX_BLOCKS = 8192; /* partials per reduction: 64 KiB of workspace */
/* PLAIN kernels index boxes in 32 bits (a box index plus a grid stride stays below 2^31) */
constexpr int64_t PLAIN_MAX_BOXES = (int64_t)1 << 30;

/* The four numbers of a box as one aligned load / store. */
template <class T> struct alignas(4 * sizeof(T)) box_vec {
    T v[4];
};

template <class A> __device__ __forceinline__ A qnan();
template <> __device__ __forceinline__ float qnan<float>() { return CUDART_NAN_F; }
template <> __device__ __forceinline__ double qnan<double>() { return CUDART_NAN; }

/* The divisor of MEAN: the boxes kept (counted on the device) or all of them. */
__device__ __forceinline__ double mean_divisor(const ploss_boxes_problem &p, const unsigned long long *kept)
{
    return kept ? (double)*kept : (double)p.n;
}

/* ω of a reduced pass from the upstream value `up` (the fused multiplier or the scalar
 * upstream gradient): up ÷ the divisor d for MEAN (0 with no box left: a zero gradient); 0
 * where it is not used. */
__host__ __device__ inline double reduced_omega(const ploss_boxes_problem &p, double up, double d)
{
    if (p.pass == PLOSS_PASS_FORWARD || (p.pass == PLOSS_PASS_BACKWARD && p.reduction == PLOSS_REDUCTION_NONE))
        return 0.0;
    if (p.reduction == PLOSS_REDUCTION_MEAN)
        return d != 0.0 ? up / d : 0.0;
    return up;
}

/* ω where the host cannot know it: the upstream gradient or the count of kept boxes is on
 * the device. */
__device__ __forceinline__ double device_omega(const ploss_boxes_problem &p, const unsigned long long *kept)
{
    const bool upstream = p.pass == PLOSS_PASS_BACKWARD && p.reduction != PLOSS_REDUCTION_NONE;
    return reduced_omega(p, upstream ? load_dyn(p.grad_loss, p.gl_dtype, 0) : p.scale, mean_divisor(p, kept));
}

/* KIND: the loss (ploss_box_kind) as a constant, so each kernel keeps only its own maths.
 * PLAIN: fewer than 2^30 xyxy boxes without weights or an ignore mask (the common call),
 * their per-box tests compiled out and their index 32-bit; every pass of one call's options
 * runs the same instance, so that fused, forward and backward stay bitwise the same.  eps:
 * p.eps in the compute type (an argument, not a conversion per box).  With fp32 maths at
 * most 40 registers: six blocks per SM (five, with more registers, measured slower). */
template <class T, bool VEC, int KIND, bool PLAIN>
__global__ void __launch_bounds__(THREADS, sizeof(acc_t<T>) == 4 ? 6 : 1)
boxes_kernel(const ploss_boxes_problem p, acc_t<T> eps, const unsigned long long *kept, bool omega_on_host,
             double host_omega, int64_t *error_slot, double *partials, unsigned long long *ticket)
{
    using A = acc_t<T>;
    const T *x = (const T *)p.x;
    T *grad = (T *)p.grad;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD;
    const bool want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool none = p.reduction == PLOSS_REDUCTION_NONE;
    const bool per_box_up = p.pass == PLOSS_PASS_BACKWARD && none;
    /* from the host where it can: the threads start on their first boxes sooner */
    const A omega = (A)(omega_on_host ? host_omega : device_omega(p, kept));
    const int format = PLAIN ? (int)PLOSS_BOX_FORMAT_XYXY : p.format;

    A sum = A(0);
    using Index = std::conditional_t<PLAIN, int, int64_t>; /* PLAIN: fewer than 2^30 boxes */
    const Index gs = (Index)gridDim.x * THREADS;
    for (Index n = (Index)blockIdx.x * THREADS + (Index)threadIdx.x; n < (Index)p.n; n += gs) {
        A loss = A(0), g[4] = {A(0), A(0), A(0), A(0)};
        const double ig = PLAIN || !p.ign ? 0.0 : load_dyn(p.ign, p.ign_dtype, n * p.ign_sn);
        if (ig != 0.0 && ig != 1.0) { /* not a mask value: reported, the box's loss NaN */
            report_invalid(error_slot, PLOSS_SLOT_IGNORE_VALUE, n);
            loss = qnan<A>();
        } else if (ig == 0.0) {
            A r[4], q[4], pb[4], tb[4];
            if (VEC) {
                const box_vec<T> bx = ((const box_vec<T> *)p.x)[n], bt = ((const box_vec<T> *)p.t)[n];
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    r[k] = to_acc(bx.v[k]);
                    q[k] = to_acc(bt.v[k]);
                }
            } else {
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    r[k] = to_acc(x[n * p.x_sn + k * p.x_sk]);
                    q[k] = load_float_dyn<A>(p.t, p.t_dtype, n * p.t_sn + k * p.t_sk);
                }
            }
            const int valid_x = box_to_xyxy(format, r, pb), valid_t = box_to_xyxy(format, q, tb);
            if (!valid_x || !valid_t) {
                report_invalid(error_slot, valid_x ? PLOSS_SLOT_TARGET_BOX : PLOSS_SLOT_INPUT_BOX, n);
                loss = qnan<A>();
            } else {
                const A w = !PLAIN && p.w ? load_float_dyn<A>(p.w, p.w_dtype, n * p.w_sn) : A(1);
                loss = w * (A(1) - box_similarity(KIND, p.paper_gradient, eps, eps, pb, tb, want_grad, g));
                if (want_grad) {
                    box_grad_from_xyxy(format, g);
                    const A up = per_box_up ? (A)load_dyn(p.grad_loss, p.gl_dtype, n * p.gl_sn) : omega;
#pragma unroll
                    for (int k = 0; k < 4; ++k)
                        g[k] *= w * up;
                }
            }
        }
        if (want_loss) {
            if (none)
                store_state(p.loss, p.loss_dtype, n * p.l_sn, (double)loss);
            else
                sum += loss;
        }
        if (want_grad) {
            if (VEC) {
                box_vec<T> out;
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    out.v[k] = from_acc<T>(g[k]);
                ((box_vec<T> *)grad)[n] = out;
            } else {
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    grad[n * p.g_sn + k * p.g_sk] = from_acc<T>(g[k]);
            }
        }
    }
    if (want_loss && !none) {
        const double block_sum = (double)block_reduce<THREADS>(sum, SumOp());
        if (threadIdx.x == 0)
            partials[blockIdx.x] = block_sum;
        if (last_block_arrives(ticket, gridDim.x)) {
            const double s = last_block_sum<THREADS>(partials, gridDim.x);
            if (threadIdx.x == 0) /* 0/0 = NaN for MEAN with no box left */
                store_state(p.loss, p.loss_dtype, 0,
                            p.reduction == PLOSS_REDUCTION_MEAN ? s / mean_divisor(p, kept) : s);
        }
    }
}

/* The boxes that are not ignored, into *kept (zeroed before; integer adds, exact). */
__global__ void __launch_bounds__(THREADS) boxes_count_kept(const ploss_boxes_problem p, unsigned long long *kept)
{
    unsigned long long c = 0;
    for (int64_t n = thread_index(); n < p.n; n += grid_stride())
        c += load_dyn(p.ign, p.ign_dtype, n * p.ign_sn) == 0.0;
    c = block_reduce<THREADS>(c, SumOp());
    if (threadIdx.x == 0 && c)
        atomicAdd(kept, c);
}

/* ploss_box_iou: a thread per pair (i, j), j fastest (coalesced writes of a dense row);
 * an invalid box makes its pairs NaN and is reported through the error slot. */
template <class A>
__global__ void __launch_bounds__(THREADS) box_pairs_kernel(const ploss_box_pairs_problem p, int64_t *error_slot)
{
    const int64_t total = p.n * p.m;
    for (int64_t k = thread_index(); k < total; k += grid_stride()) {
        const int64_t i = k / p.m, j = k % p.m;
        A r[4], q[4], a[4], b[4], g[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            r[c] = load_float_dyn<A>(p.a, p.a_dtype, i * p.a_sn + c * p.a_sk);
            q[c] = load_float_dyn<A>(p.b, p.b_dtype, j * p.b_sn + c * p.b_sk);
        }
        const int valid_a = box_to_xyxy(p.format, r, a), valid_b = box_to_xyxy(p.format, q, b);
        A s;
        if (!valid_a || !valid_b) {
            report_invalid(error_slot, valid_a ? PLOSS_SLOT_BOXES2_BOX : PLOSS_SLOT_BOXES1_BOX,
                               valid_a ? j : i);
            s = qnan<A>();
        } else {
            s = box_similarity((int)p.kind, 0, A(0), (A)p.eps, a, b, 0, g);
        }
        store_state(p.out, p.out_dtype, i * p.o_sn + j * p.o_sm, (double)s);
    }
}

} // namespace

/* Dense N×4 boxes of `dt` aligned to a box (one vector load per box). */
static bool dense_boxes(const void *base, ploss_dtype dt, int64_t sn, int64_t sk)
{
    const uintptr_t box_bytes = 4 * (uintptr_t)ploss_dtype_size(dt);
    return sn == 4 && sk == 1 && ((uintptr_t)base % box_bytes) == 0;
}

extern "C" ploss_status ploss_cuda_boxes(ploss_ctx_t *ctx, const ploss_boxes_problem *p)
{
    const bool want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const bool need_partials = want_loss && p->reduction != PLOSS_REDUCTION_NONE;
    if (p->n == 0 && !need_partials)
        return PLOSS_OK;
    const bool count = p->ign && p->reduction == PLOSS_REDUCTION_MEAN;
    const bool vec = p->t_dtype == p->x_dtype && dense_boxes(p->x, p->x_dtype, p->x_sn, p->x_sk) &&
                     dense_boxes(p->t, p->t_dtype, p->t_sn, p->t_sk) &&
                     (!want_grad || dense_boxes(p->grad, p->x_dtype, p->g_sn, p->g_sk));

    /* workspace: the block partials (at most `blocks`), then the count of kept boxes */
    const unsigned blocks = grid_blocks(p->n, THREADS, MAX_BLOCKS);
    double *partials = NULL;
    unsigned long long *kept = NULL;
    if (need_partials || count) {
        void *ws = NULL;
        const ploss_status st = ploss_workspace(ctx, (size_t)blocks * sizeof(double) + sizeof(unsigned long long), &ws);
        if (st)
            return st;
        partials = (double *)ws;
        kept = count ? (unsigned long long *)(partials + blocks) : NULL;
    }
    cudaStream_t stream = stream_of(ctx);
    unsigned long long *ticket = arrival_ticket(ctx);
    const bool omega_on_host = p->pass != PLOSS_PASS_BACKWARD && !kept;
    const double host_omega = omega_on_host ? reduced_omega(*p, p->scale, (double)p->n) : 0.0;
    if (kept) {
        if (cudaMemsetAsync(kept, 0, sizeof *kept, stream) != cudaSuccess)
            return check_launch("boxes: clearing the count of kept boxes");
        boxes_count_kept<<<blocks, THREADS, 0, stream>>>(*p, kept);
        const ploss_status st = check_launch("boxes_count_kept");
        if (st)
            return st;
    }
    ploss_status st = dispatch_float(p->x_dtype, "input", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const bool plain = p->format == PLOSS_BOX_FORMAT_XYXY && !p->w && !p->ign && p->n < PLAIN_MAX_BOXES;
        auto launch = [&](auto kind) {
            constexpr int K = decltype(kind)::value;
            auto kernel = vec ? boxes_kernel<T, true, K, false> : boxes_kernel<T, false, K, false>;
            if constexpr (sizeof(acc_t<T>) == 4) /* f64 (checks) has the general kernel only */
                if (plain)
                    kernel = vec ? boxes_kernel<T, true, K, true> : boxes_kernel<T, false, K, true>;
            const unsigned grid = (unsigned)std::min<int64_t>(blocks, resident_blocks(kernel, THREADS, blocks));
            kernel<<<grid, THREADS, 0, stream>>>(*p, (acc_t<T>)p->eps, kept, omega_on_host, host_omega, ctx->error_slot,
                                                 partials, ticket);
        };
        switch (p->kind) {
        case PLOSS_BOX_IOU: launch(std::integral_constant<int, PLOSS_BOX_IOU>()); break;
        case PLOSS_BOX_GIOU: launch(std::integral_constant<int, PLOSS_BOX_GIOU>()); break;
        case PLOSS_BOX_DIOU: launch(std::integral_constant<int, PLOSS_BOX_DIOU>()); break;
        default: launch(std::integral_constant<int, PLOSS_BOX_CIOU>()); break;
        }
        return check_launch("boxes_kernel");
    });
    return st;
}

extern "C" ploss_status ploss_cuda_box_pairs(ploss_ctx_t *ctx, const ploss_box_pairs_problem *p)
{
    const unsigned blocks = grid_blocks(p->n * p->m, THREADS);
    if (p->out_dtype == PLOSS_F64)
        box_pairs_kernel<double><<<blocks, THREADS, 0, stream_of(ctx)>>>(*p, ctx->error_slot);
    else
        box_pairs_kernel<float><<<blocks, THREADS, 0, stream_of(ctx)>>>(*p, ctx->error_slot);
    return check_launch("box_pairs_kernel");
}

} // namespace boxes_kernels
} // namespace ploss_cuda
