/*
 * taylor.cu — CUDA backend of the Taylor softmax / log-Taylor softmax ops (docs/losses.md;
 * problem and formulas in core/support/taylor.h).  Rows are walked by the shapes of
 * row_groups.cuh: one thread per row when the normalised axis is strided, a warp (or the
 * block, C > 2048) per row when it is contiguous.  Pass 1 sums Z = Σ f_n(x_j) (and
 * Σ F·G or Σ G for backward), pass 2 writes the output; sums in f32 for f32/f16/bf16
 * (f64 for f64 and for orders above 10), merged in a fixed order.
 */
#include <type_traits>

#include "taylor.h"
#include "taylor_poly.h"
#include "row_groups.cuh"

namespace ploss_cuda {
namespace taylor_kernels {
namespace {

template <class A> struct Sums { A z, t; };
struct SumsOp {
    template <class A> __device__ __forceinline__ Sums<A> operator()(const Sums<A> &a, const Sums<A> &b) const
    {
        return {a.z + b.z, a.t + b.t};
    }
};

template <int G, class T, class A> __global__ void __launch_bounds__(ROW_THREADS) taylor_kernel(ploss_taylor_problem p)
{
    constexpr int R = ROW_THREADS / G;
    const int lane = (int)(threadIdx.x % G);
    const int64_t rows = p.N * p.S, C = p.C;
    const int n = p.order;
    const T *x = (const T *)p.x, *g = (const T *)p.g;
    T *out = (T *)p.out;
    for (int64_t base = (int64_t)blockIdx.x * R; base < rows; base += (int64_t)gridDim.x * R) {
        const int64_t r = base + threadIdx.x / G;
        if (r >= rows)
            continue; /* uniform over a group */
        const int64_t a = r / p.S, b = r % p.S;
        const int64_t xo = a * p.x_sn + b * p.x_ss, go = a * p.g_sn + b * p.g_ss, oo = a * p.o_sn + b * p.o_ss;
        Sums<A> s = {(A)0, (A)0};
        for (int64_t j = lane; j < C; j += G) {
            const A f = ploss_taylor_poly(load_as<A>(x, xo + j * p.x_sc), n);
            s.z += f;
            if (p.backward) {
                const A gj = load_as<A>(g, go + j * p.g_sc);
                s.t += p.log ? gj : f * gj;
            }
        }
        s = group_all_reduce<G>(s, SumsOp());
        for (int64_t j = lane; j < C; j += G) {
            const A xj = load_as<A>(x, xo + j * p.x_sc);
            A v;
            if (!p.backward) {
                const A f = ploss_taylor_poly(xj, n);
                v = p.log ? log(f) - log(s.z) : f / s.z;
            } else {
                const A gj = load_as<A>(g, go + j * p.g_sc);
                const A d = ploss_taylor_poly(xj, n - 1);
                v = p.log ? d * (gj / ploss_taylor_poly(xj, n) - s.t / s.z) : d * (gj - s.t / s.z) / s.z;
            }
            out[oo + j * p.o_sc] = from_acc<T>((acc_t<T>)v);
        }
    }
}

} // namespace

extern "C" ploss_status ploss_cuda_taylor(ploss_ctx_t *ctx, const ploss_taylor_problem *p)
{
    const int64_t rows = p->N * p->S;
    if (rows == 0 || p->C == 0)
        return PLOSS_OK;
    const int G = row_group_size(p->x_sc, p->C);
    return dispatch_float(p->dtype, "input", [&](auto tag) {
        using T = typename decltype(tag)::type;
        return with_row_group(G, [&](auto gs) {
            constexpr int GS = decltype(gs)::value;
            const unsigned blocks = grid_blocks(rows, ROW_THREADS / GS);
            /* orders above 10 lose digits to cancellation near the minimum in f32 */
            if (std::is_same<T, double>::value || p->order > 10)
                taylor_kernel<GS, T, double><<<blocks, ROW_THREADS, 0, stream_of(ctx)>>>(*p);
            else
                taylor_kernel<GS, T, float><<<blocks, ROW_THREADS, 0, stream_of(ctx)>>>(*p);
            return check_launch("taylor_kernel");
        });
    });
}

} // namespace taylor_kernels
} // namespace ploss_cuda
