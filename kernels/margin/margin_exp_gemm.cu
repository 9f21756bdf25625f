/*
 * margin_exp_gemm.cu — the margin losses' product GEMM with its exponential fused into the
 * epilogue (CUTLASS 3, sm_90 warp-specialised ping-pong TMA kernel, built only where the
 * CUTLASS headers are found: tools/fetch_cutlass.sh).  For bf16 X (M×K) and W (N×K), row-major:
 *
 *     E_ij = 2^(X_i·W_j · c_j · r_i − shift)      (bf16, fp32 accumulation and epilogue)
 *
 * with c_j = 1/‖w_j‖ and r_i = s·log2(e)/‖x_i‖, so E_ij = e^(s·cos_ij − s + TOP) for the
 * shifted path of kernels/margin/margin.cu, zero at each row's target and on the padding
 * columns, and each row's sums of E per tile in fp32 (before E's rounding): the fp32
 * products never reach memory.
 */
#include "margin_exp_gemm.h"
#include "sm90_epilogue_gemm.cuh"

/* named, not anonymous: meson.build compiles the CUTLASS GEMMs as one translation unit */
namespace ploss_margin_exp {

using namespace ploss_sm90;

struct MaskedExp2Arguments {
    float shift = 0.0f;
    float classes = 0.0f; /* columns at or past it are padding */
};

/* 2^(acc·c·r − shift), 0 at the row's target column and on the padding (the epilogue's
 * compute node; a column's index from Coordinate<1>, a row's target as a broadcast float,
 * exact below 2^24). */
template <class T> struct MaskedExp2 {
    using Arguments = MaskedExp2Arguments;
};
template <int N> struct MaskedExp2<cutlass::Array<float, N>> {
    using Arguments = MaskedExp2Arguments;
    using V = cutlass::Array<float, N>;
    CUTLASS_DEVICE V operator()(V const &acc, V const &c, V const &r, V const &col, V const &target,
                                Arguments const &a) const
    {
        V o;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < N; ++i) {
            /* every element's exponential, then the mask as a select: computed under the
             * mask's predicate, each element reloaded the shift from constant memory and
             * waited on it */
            float e = exp2_ftz(acc[i] * c[i] * r[i] - a.shift);
            launder(e);
            o[i] = col[i] < a.classes && col[i] != target[i] ? e : 0.0f;
        }
        return o;
    }
};

using TileShape = Shape<Int<PLOSS_MARGIN_EXP_TILE_M>, Int<PLOSS_MARGIN_EXP_TILE_N>, _64>;

using Masked = fusion::Sm90EVT<fusion::Sm90Compute<MaskedExp2, float, float, kRound>, fusion::Sm90AccFetch,
                               PerColumn<TileShape, float> /* c_j */, PerRow<TileShape, float> /* r_i */,
                               Coordinate<1> /* j */, PerRow<TileShape, float> /* y_i */>;
/* the rows' sums in fp32, one partial per tile (each written once: deterministic; the
 * caller adds them in order).  No bounds test per element: the mask gives 0, the sum's
 * identity, at every column past the classes (those past N included), and the partials of
 * rows past M are never read. */
using RowSums = fusion::Sm90EVT<fusion::Sm90ColReduction<cutlass::plus, cutlass::plus, cutlass::plus, 0, TileShape,
                                                         float, float, kRound, Stride<_1, _0, int64_t>, 4, false,
                                                         false, false>,
                                Masked>;
using ExpTree = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::epilogue::thread::Identity, Element, float, kRound>,
                                RowSums>;

/* ping-pong: a tile's epilogue (an exponential, a select and a sum per element) runs while
 * the other warp group's products do */
using Gemm = EpilogueGemm<TileShape, Element, ExpTree, Schedule::PingPong>::Gemm;

extern "C" ploss_status ploss_cuda_margin_exp_gemm(const ploss_margin_exp_gemm *g, void *workspace,
                                                   size_t workspace_bytes, size_t *needed, cudaStream_t stream)
{
    typename Gemm::Arguments args = row_major_operands<Gemm>(g->M, g->N, g->K, g->A, g->lda, g->B, g->ldb);
    args.epilogue.ptr_D = (Element *)g->D;
    args.epilogue.dD = make_stride(g->ldd, _1{}, g->ldd * g->M);
    args.epilogue.thread = {
        {
            {
                {},                                      /* acc */
                {g->col_scale, 0.0f, {_0{}, _1{}, 0}},   /* c_j */
                {g->row_scale, 0.0f, {_1{}, _0{}, 0}},   /* r_i */
                {},                                      /* j */
                {g->row_target, 0.0f, {_1{}, _0{}, 0}},  /* y_i */
                {g->shift, (float)g->classes},           /* the masked 2^(·) */
            },
            {g->row_sums, 0.0f, {_1{}, _0{}, 0}},        /* Σ_j E_ij per tile, fp32 */
        },
        {},                                              /* to bf16 */
    };
    return launch<Gemm>(args, workspace, workspace_bytes, needed, stream, "margin: the fused product");
}

} // namespace ploss_margin_exp
