/*
 * triplet.cu — CUDA backend of the triplet margin loss (core/engines/pairs.h).
 *
 * One warp per triplet row (grid-stride over rows): the lanes walk D once for the three sums
 * Σ|z|^p in fp32 (f64 for f64 input), a warp reduction gives every lane the sums, the row is
 * finished in double by the maths the CPU backend uses (ploss_triplet_finish), and the lanes
 * walk D again writing the three gradient rows (their inputs are then in L1/L2).  The cosine
 * distance takes the three squared norms and the products instead of the sums Σ|z|^p
 * (ploss_triplet_cosine_finish).  Reduced
 * losses: each warp adds its rows' losses in double, the warps of a block are added in warp
 * order into one partial per block, and one block adds the partials in a fixed order.  The
 * grid depends on N only: deterministic, no atomics.
 */
#include "pairs.cuh"
#include "partials.cuh"
#include "pairs.h"

namespace ploss_cuda {
namespace triplet_kernels {
namespace {

using namespace pairs;


/* |z|^p and sign(z)|z|^(p−1) in the accumulation type (p = 1, 2 without pow). */
template <class A> __device__ __forceinline__ A term(A z, A p)
{
    const A a = z < A(0) ? -z : z;
    return p == A(2) ? a * a : p == A(1) ? a : (A)pow((double)a, (double)p);
}
template <class A> __device__ __forceinline__ A dir(A z, A p)
{
    if (p == A(2))
        return z;
    if (z == A(0))
        return A(0);
    const A s = z > A(0) ? A(1) : A(-1);
    return p == A(1) ? s : s * (A)pow((double)(z < A(0) ? -z : z), (double)(p - A(1)));
}

/* omega: ω of a fused pass (backward reads the upstream gradient itself). */
template <class T>
__global__ void __launch_bounds__(THREADS) triplet_kernel(const ploss_triplet_problem p, double omega,
                                                          double *partials)
{
    using A = acc_t<T>;
    const int lane = threadIdx.x & 31;
    const bool want_loss = p.pass != PLOSS_PASS_BACKWARD, want_grad = p.pass != PLOSS_PASS_FORWARD;
    const bool none = p.reduction == PLOSS_REDUCTION_NONE;
    const T *xa = (const T *)p.x[0].data, *xp = (const T *)p.x[1].data, *xn = (const T *)p.x[2].data;
    const A eps = (A)p.eps, pn = (A)p.p;
    omega = pairs::reduced_backward_omega(p, omega, p.N);
    double acc = 0.0;
    for (int64_t i = warp_row(); i < p.N; i += warp_rows_stride()) {
        const T *ra = xa + i * p.x[0].sn, *rp = xp + i * p.x[1].sn, *rn = xn + i * p.x[2].sn;
        ploss_triplet_row r{};
        ploss_triplet_cosine_row rc{};
        if (p.cosine) {
            A s[6] = {0, 0, 0, 0, 0, 0}; /* ‖a‖², ‖p‖², ‖n‖², a·p, a·n, p·n */
            for (int64_t j = lane; j < p.D; j += 32) {
                const A a = to_acc(ra[j * p.x[0].sd]), b = to_acc(rp[j * p.x[1].sd]), n = to_acc(rn[j * p.x[2].sd]);
                s[0] += a * a;
                s[1] += b * b;
                s[2] += n * n;
                s[3] += a * b;
                s[4] += a * n;
                s[5] += b * n;
            }
            for (int k = 0; k < 6; ++k)
                s[k] = warp_all_reduce<32>(s[k], SumOp());
            const double sq[3] = {(double)s[0], (double)s[1], (double)s[2]};
            rc = ploss_triplet_cosine_finish(sq, (double)s[3], (double)s[4], (double)s[5], p.margin, p.swap);
            r.loss = rc.loss;
        } else {
            A s_ap = 0, s_an = 0, s_pn = 0;
            for (int64_t j = lane; j < p.D; j += 32) {
                const A a = to_acc(ra[j * p.x[0].sd]), b = to_acc(rp[j * p.x[1].sd]), n = to_acc(rn[j * p.x[2].sd]);
                s_ap += term(a - b + eps, pn);
                s_an += term(a - n + eps, pn);
                if (p.swap)
                    s_pn += term(b - n + eps, pn);
            }
            s_ap = warp_all_reduce<32>(s_ap, SumOp());
            s_an = warp_all_reduce<32>(s_an, SumOp());
            if (p.swap)
                s_pn = warp_all_reduce<32>(s_pn, SumOp());
            r = ploss_triplet_finish((double)s_ap, (double)s_an, (double)s_pn, p.p, p.margin, p.soft_margin, p.swap);
        }
        if (want_loss) {
            if (none) {
                if (lane == 0)
                    store_dyn(p.loss, p.loss_dtype, i * p.l_sn, r.loss);
            } else {
                acc += r.loss;
            }
        }
        if (!want_grad)
            continue;
        const double w = p.pass == PLOSS_PASS_BACKWARD && none ? load_dyn(p.grad_loss, p.gl_dtype, i * p.gl_sn) : omega;
        T *ga = (T *)p.grad[0].data + i * p.grad[0].sn, *gp = (T *)p.grad[1].data + i * p.grad[1].sn,
          *gn = (T *)p.grad[2].data + i * p.grad[2].sn;
        if (p.cosine) {
            const A sa = (A)ploss_upstream(w, rc.self[0]), sp = (A)ploss_upstream(w, rc.self[1]),
                    sn = (A)ploss_upstream(w, rc.self[2]);
            const A c_ap = (A)ploss_upstream(w, rc.cross_ap), c_an = (A)ploss_upstream(w, rc.cross_an),
                    c_pn = (A)ploss_upstream(w, rc.cross_pn);
            for (int64_t j = lane; j < p.D; j += 32) {
                const A a = to_acc(ra[j * p.x[0].sd]), b = to_acc(rp[j * p.x[1].sd]), n = to_acc(rn[j * p.x[2].sd]);
                ga[j * p.grad[0].sd] = from_acc<T>(sa * a + c_ap * b + c_an * n);
                gp[j * p.grad[1].sd] = from_acc<T>(sp * b + c_ap * a + c_pn * n);
                gn[j * p.grad[2].sd] = from_acc<T>(sn * n + c_an * a + c_pn * b);
            }
            continue;
        }
        const A k_ap = (A)ploss_upstream(w, r.k_ap), k_an = (A)ploss_upstream(w, r.k_an),
                k_pn = (A)ploss_upstream(w, r.k_pn);
        for (int64_t j = lane; j < p.D; j += 32) {
            const A a = to_acc(ra[j * p.x[0].sd]), b = to_acc(rp[j * p.x[1].sd]), n = to_acc(rn[j * p.x[2].sd]);
            const A t_ap = k_ap == A(0) ? A(0) : k_ap * dir(a - b + eps, pn);
            const A t_an = k_an == A(0) ? A(0) : k_an * dir(a - n + eps, pn);
            const A t_pn = k_pn == A(0) ? A(0) : k_pn * dir(b - n + eps, pn);
            ga[j * p.grad[0].sd] = from_acc<T>(t_ap + t_an);
            gp[j * p.grad[1].sd] = from_acc<T>(t_pn - t_ap);
            gn[j * p.grad[2].sd] = from_acc<T>(-(t_an + t_pn));
        }
    }
    if (!partials)
        return;
    store_block_partial(acc, partials);
}

} // namespace

extern "C" ploss_status ploss_cuda_triplet(ploss_ctx_t *ctx, const ploss_triplet_problem *p)
{
    const unsigned blocks = row_blocks(p->N);
    return with_block_partials(ctx, p->pass, p->reduction, p->scale, p->N, p->N, blocks, p->loss, p->loss_dtype,
                               [&](double omega, double *partials) {
        return dispatch_float(p->dtype, "anchor", [&](auto tag) {
            using T = typename decltype(tag)::type;
            triplet_kernel<T><<<blocks, THREADS, 0, stream_of(ctx)>>>(*p, omega, partials);
            return check_launch("triplet_kernel");
        });
    });
}

} // namespace triplet_kernels
} // namespace ploss_cuda
