/*
 * embedding_pairs.cu — CUDA backend of the embedding pair losses (core/engines/pairs.h): the
 * cosine embedding loss and the L1 hinge embedding loss.
 *
 * One warp per pair (grid-stride over rows): the lanes walk D once for the pair's sums in
 * fp32 (f64 for f64 input; cosine: Σx1·x2, Σx1², Σx2²; L1: Σ|x1 − x2|), a warp reduction
 * gives every lane the sums, the pair is finished in double by the maths the CPU backend uses
 * (ploss_cosine_embedding_finish, ploss_l1_hinge_embedding_finish), and the lanes walk D
 * again writing both gradient rows (their inputs are then in L1/L2).  Reduced losses: each warp adds its pairs' losses in
 * double, the warps of a block are added in warp order into one partial per block, and one
 * block adds the partials in a fixed order.  The grid depends on N only: deterministic, no
 * atomics.
 */
#include "pairs.cuh"
#include "partials.cuh"
#include "pairs.h"

namespace ploss_cuda {
namespace embedding_pairs_kernels {
namespace {

using namespace pairs;


/* omega: ω of a fused pass (backward reads the upstream gradient itself). */
template <class T, ploss_embedding_pair_kind KIND>
__global__ void __launch_bounds__(THREADS) embedding_pair_kernel(const ploss_embedding_pair_problem p,
                                                                   double omega, double *partials)
{
    constexpr bool l1 = KIND == PLOSS_EMBEDDING_PAIR_L1_HINGE;
    using A = acc_t<T>;
    const int lane = threadIdx.x & 31;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD, want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool none = p.reduction == PLOSS_REDUCTION_NONE;
    const T *x1 = (const T *)p.x[0].data, *x2 = (const T *)p.x[1].data;
    omega = pairs::reduced_backward_omega(p, omega, p.N);
    double acc = 0.0;
    for (int64_t i = warp_row(); i < p.N; i += warp_rows_stride()) {
        const T *ru = x1 + i * p.x[0].sn, *rv = x2 + i * p.x[1].sn;
        A dot = 0, s1 = 0, s2 = 0; /* L1: the distance in dot */
        for (int64_t j = lane; j < p.D; j += 32) {
            const A u = to_acc(ru[j * p.x[0].sd]), v = to_acc(rv[j * p.x[1].sd]);
            if constexpr (l1) {
                dot += u > v ? u - v : v - u; /* |u − v|, NaN kept */
            } else {
                dot += u * v;
                s1 += u * u;
                s2 += v * v;
            }
        }
        dot = warp_all_reduce<32>(dot, SumOp());
        if constexpr (!l1) {
            s1 = warp_all_reduce<32>(s1, SumOp());
            s2 = warp_all_reduce<32>(s2, SumOp());
        }
        const double y = load_dyn(p.y, p.y_dtype, i * p.y_sn);
        const double w = !want_grad ? 0.0
                         : p.pass == PLOSS_PASS_BACKWARD && none ? load_dyn(p.grad_loss, p.gl_dtype, i * p.gl_sn)
                                                                 : omega;
        ploss_cosine_pair r = {0.0, 0.0, 0.0, 0.0};
        ploss_l1_hinge_pair h = {0.0, 0.0};
        if constexpr (l1)
            h = ploss_l1_hinge_embedding_finish((double)dot, y, p.margin, w);
        else
            r = ploss_cosine_embedding_finish((double)dot, (double)s1, (double)s2, y, p.margin, w);
        if (want_loss) {
            const double loss = l1 ? h.loss : r.loss;
            if (none) {
                if (lane == 0)
                    store_dyn(p.loss, p.loss_dtype, i * p.l_sn, loss);
            } else {
                acc += loss;
            }
        }
        if (!want_grad)
            continue;
        const A self1 = (A)r.self1, self2 = (A)r.self2, cross = (A)r.cross, c = (A)h.c;
        T *g1 = (T *)p.grad[0].data + i * p.grad[0].sn, *g2 = (T *)p.grad[1].data + i * p.grad[1].sn;
        for (int64_t j = lane; j < p.D; j += 32) {
            const A u = to_acc(ru[j * p.x[0].sd]), v = to_acc(rv[j * p.x[1].sd]);
            if constexpr (l1) {
                const A t = u - v;
                const A g = c * (t > A(0) ? A(1) : t < A(0) ? A(-1) : t == A(0) ? A(0) : t); /* sign, NaN kept */
                g1[j * p.grad[0].sd] = from_acc<T>(g);
                g2[j * p.grad[1].sd] = from_acc<T>(-g);
            } else {
                g1[j * p.grad[0].sd] = from_acc<T>(self1 * u + cross * v);
                g2[j * p.grad[1].sd] = from_acc<T>(self2 * v + cross * u);
            }
        }
    }
    if (!partials)
        return;
    store_block_partial(acc, partials);
}

} // namespace

extern "C" ploss_status ploss_cuda_embedding_pairs(ploss_ctx_t *ctx, const ploss_embedding_pair_problem *p)
{
    const unsigned blocks = row_blocks(p->N);
    return with_block_partials(ctx, p->pass, p->reduction, p->scale, p->N, p->N, blocks, p->loss, p->loss_dtype,
                               [&](double omega, double *partials) {
        return dispatch_float(p->dtype, "input1", [&](auto tag) {
            using T = typename decltype(tag)::type;
            if (p->kind == PLOSS_EMBEDDING_PAIR_L1_HINGE)
                embedding_pair_kernel<T, PLOSS_EMBEDDING_PAIR_L1_HINGE>
                    <<<blocks, THREADS, 0, stream_of(ctx)>>>(*p, omega, partials);
            else
                embedding_pair_kernel<T, PLOSS_EMBEDDING_PAIR_COSINE>
                    <<<blocks, THREADS, 0, stream_of(ctx)>>>(*p, omega, partials);
            return check_launch("embedding_pair_kernel");
        });
    });
}

} // namespace embedding_pairs_kernels
} // namespace ploss_cuda
