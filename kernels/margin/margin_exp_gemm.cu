/*
 * margin_exp_gemm.cu — the margin losses' product GEMM with its exponential fused into the
 * epilogue (CUTLASS 3, sm_90 warp-specialised TMA kernel, built only where the CUTLASS
 * headers are found: tools/fetch_cutlass.sh).  For bf16 X (M×K) and W (N×K), row-major:
 *
 *     E_ij = 2^(X_i·W_j · c_j · r_i − shift)      (bf16, fp32 accumulation and epilogue)
 *
 * with c_j = 1/‖w_j‖ and r_i = s·log2(e)/‖x_i‖, so E_ij = e^(s·cos_ij − s + TOP) for the
 * shifted path of kernels/margin/margin.cu, zero at each row's target and on the padding
 * columns, and each row's sums of E per tile in fp32 (before E's rounding): the fp32
 * products never reach memory.
 */
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cute/tensor.hpp>

#include "margin_exp_gemm.h"

namespace {

using namespace cute;
namespace fusion = cutlass::epilogue::fusion;

struct MaskedExp2Arguments {
    float shift = 0.0f;
    float classes = 0.0f; /* columns at or past it are padding */
};

/* 2^(acc·c·r − shift), 0 at the row's target column and on the padding (the epilogue's
 * compute node; a column's index from ColumnIndex, a row's target as a broadcast float,
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
        for (int i = 0; i < N; ++i)
            o[i] = col[i] < a.classes && col[i] != target[i] ? exp2f(acc[i] * c[i] * r[i] - a.shift) : 0.0f;
        return o;
    }
};

/* Each element's column j as a float, from the epilogue's coordinate tensor (relative to the
 * thread's first element, whose column is N minus the column residue): no load, where a
 * broadcast vector of the indices would be read through shared memory per tile. */
struct ColumnIndex : fusion::Sm90VisitorImpl<> {
    using fusion::Sm90VisitorImpl<>::Sm90VisitorImpl;

    template <class CTensor> struct ConsumerStoreCallbacks : fusion::EmptyConsumerStoreCallbacks {
        CTensor tCcD; /* (CPY, CPY_M, CPY_N, EPI_M, EPI_N), static once the loops unroll */
        float col0;   /* exact: the columns stay below 2^24 */
        CUTLASS_DEVICE ConsumerStoreCallbacks(CTensor t, int c) : tCcD(t), col0((float)c) {}
        template <class ElementAccumulator, int FragmentSize>
        CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(cutlass::Array<ElementAccumulator, FragmentSize> const &,
                                                                 int epi_v, int epi_m, int epi_n)
        {
            cutlass::Array<float, FragmentSize> o;
            Tensor c = tCcD(_, _, _, epi_m, epi_n);
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < FragmentSize; ++i)
                o[i] = (float)get<1>(c(epi_v * FragmentSize + i)) + col0; /* a constant plus col0 */
            return o;
        }
    };

    template <bool ReferenceSrc, class... Args>
    CUTLASS_DEVICE auto get_consumer_store_callbacks(fusion::detail::ConsumerStoreArgs<Args...> const &args)
    {
        const int col0 = (int)get<1>(args.problem_shape_mnkl) - (int)get<1>(args.residue_tCcD);
        return ConsumerStoreCallbacks<decltype(args.tCcD)>(args.tCcD, col0);
    }
};

using Element = cutlass::bfloat16_t;
using TileShape = Shape<Int<PLOSS_MARGIN_EXP_TILE_M>, Int<PLOSS_MARGIN_EXP_TILE_N>, _64>;
using ClusterShape = Shape<_1, _2, _1>;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

template <class Vector> using PerColumn = fusion::Sm90RowBroadcast<0, TileShape, Vector, float, Stride<_0, _1, int64_t>, 1>;
template <class Vector> using PerRow = fusion::Sm90ColBroadcast<0, TileShape, Vector, float, Stride<_1, _0, int64_t>, 1>;
using Masked = fusion::Sm90EVT<fusion::Sm90Compute<MaskedExp2, float, float, kRound>, fusion::Sm90AccFetch,
                               PerColumn<float> /* c_j */, PerRow<float> /* r_i */, ColumnIndex /* j */,
                               PerRow<float> /* y_i */>;
/* the rows' sums in fp32, one partial per tile (each written once: deterministic; the
 * caller adds them in order) */
using RowSums = fusion::Sm90EVT<fusion::Sm90ColReduction<cutlass::plus, cutlass::plus, cutlass::plus, 0, TileShape,
                                                         float, float, kRound, Stride<_1, _0, int64_t>, 4, true,
                                                         false>,
                                Masked>;
using ExpTree = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::epilogue::thread::Identity, Element, float, kRound>,
                                RowSums>;

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, 8, Element,
    cutlass::layout::RowMajor, 8, cutlass::epilogue::TmaWarpSpecializedCooperative, ExpTree>::CollectiveOp;

using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor, 8, Element,
    cutlass::layout::ColumnMajor, 8, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;

using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                    cutlass::gemm::PersistentScheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

} // namespace

extern "C" ploss_status ploss_cuda_margin_exp_gemm(const ploss_margin_exp_gemm *g, void *workspace,
                                                   size_t workspace_bytes, size_t *needed, cudaStream_t stream)
{
    using StrideA = typename Gemm::GemmKernel::StrideA;
    using StrideB = typename Gemm::GemmKernel::StrideB;
    using StrideC = typename Gemm::GemmKernel::StrideC;
    using StrideD = typename Gemm::GemmKernel::StrideD;
    const int M = (int)g->M, N = (int)g->N, K = (int)g->K;
    /* (rows, contiguous extent, batch) strides of the row-major operands */
    const StrideA sa = make_stride(g->lda, _1{}, g->lda * M);
    const StrideB sb = make_stride(g->ldb, _1{}, g->ldb * N);
    const StrideD sd = make_stride(g->ldd, _1{}, g->ldd * M);
    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                  {M, N, K, 1},
                                  {(const Element *)g->A, sa, (const Element *)g->B, sb},
                                  {{}, nullptr, StrideC{}, (Element *)g->D, sd}};
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
    Gemm gemm;
    const size_t bytes = Gemm::get_workspace_size(args);
    if (needed) { /* the probe: no message, the caller takes the unfused path instead */
        *needed = bytes;
        return gemm.can_implement(args) == cutlass::Status::kSuccess ? PLOSS_OK : PLOSS_ERR_UNSUPPORTED;
    }
    if (gemm.can_implement(args) != cutlass::Status::kSuccess)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "margin: the fused product GEMM does not serve %d×%d×%d", M, N, K);
    if (bytes > workspace_bytes)
        return ploss_error(PLOSS_ERR_CUDA, "margin: the fused product GEMM's workspace is short");
    if (gemm.initialize(args, workspace, stream) != cutlass::Status::kSuccess ||
        gemm.run(stream) != cutlass::Status::kSuccess) {
        const cudaError_t e = cudaGetLastError();
        return ploss_error(PLOSS_ERR_CUDA, "margin: the fused product GEMM failed: %s", cudaGetErrorString(e));
    }
    return PLOSS_OK;
}
