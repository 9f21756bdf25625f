/*
 * sm90_epilogue_gemm.cuh — what the CUTLASS GEMMs with a fused epilogue share
 * (kernels/margin/margin_exp_gemm.cu, kernels/pairs/infonce_exp_gemm.cu,
 * kernels/pairs/batch_hard_mine_gemm.cu; built only where CUTLASS's headers are, for
 * sm_90a): bf16 row-major A (M×K) times bf16 row-major B (N×K)ᵀ with fp32 accumulation, a
 * warp-specialised TMA kernel (cooperative or ping-pong) on clusters of 1×2 with a
 * persistent scheduler, the epilogue a visitor tree; per-row and per-column fp32 vectors
 * broadcast into it; the probe-or-run launch.  Internal; included by those .cu files only.
 */
#ifndef PLOSS_SM90_EPILOGUE_GEMM_CUH
#define PLOSS_SM90_EPILOGUE_GEMM_CUH

#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cute/tensor.hpp>

#include "../common.cuh"
#include "internal.h"

namespace ploss_sm90 {

using namespace cute;
namespace fusion = cutlass::epilogue::fusion;

using Element = cutlass::bfloat16_t;
using ClusterShape = Shape<_1, _2, _1>;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

/* The epilogues' exponentials: their arguments never go below -116 (their shifts keep
 * every term they keep at or above e^-80), so ex2.approx.ftz's flush never applies. */
using ploss_cuda::exp2_ftz;
using ploss_cuda::launder;

/* An fp32 vector with one value per column (j) or per row (i) of the output. */
template <class Tile, class Vector>
using PerColumn = fusion::Sm90RowBroadcast<0, Tile, Vector, float, Stride<_0, _1, int64_t>, 1>;
template <class Tile, class Vector>
using PerRow = fusion::Sm90ColBroadcast<0, Tile, Vector, float, Stride<_1, _0, int64_t>, 1>;

/* Each element's row (Mode 0) or column (Mode 1) index as a float, from the epilogue's
 * coordinate tensor (relative to the thread's first element, whose index is the extent
 * minus the residue): no load, where a broadcast vector of the indices would be read
 * through shared memory per tile.  Exact below 2^24. */
template <int Mode> struct Coordinate : fusion::Sm90VisitorImpl<> {
    using fusion::Sm90VisitorImpl<>::Sm90VisitorImpl;

    template <class CTensor> struct ConsumerStoreCallbacks : fusion::EmptyConsumerStoreCallbacks {
        CTensor tCcD; /* (CPY, CPY_M, CPY_N, EPI_M, EPI_N), static once the loops unroll */
        float base;
        CUTLASS_DEVICE ConsumerStoreCallbacks(CTensor t, int b) : tCcD(t), base((float)b) {}
        template <class ElementAccumulator, int FragmentSize>
        CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(cutlass::Array<ElementAccumulator, FragmentSize> const &,
                                                                 int epi_v, int epi_m, int epi_n)
        {
            cutlass::Array<float, FragmentSize> o;
            Tensor c = tCcD(_, _, _, epi_m, epi_n);
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < FragmentSize; ++i)
                o[i] = (float)get<Mode>(c(epi_v * FragmentSize + i)) + base; /* a constant plus base */
            return o;
        }
    };

    template <bool ReferenceSrc, class... Args>
    CUTLASS_DEVICE auto get_consumer_store_callbacks(fusion::detail::ConsumerStoreArgs<Args...> const &args)
    {
        const int base = (int)get<Mode>(args.problem_shape_mnkl) - (int)get<Mode>(args.residue_tCcD);
        return ConsumerStoreCallbacks<decltype(args.tCcD)>(args.tCcD, base);
    }
};

/* A tree's root node without an output tensor (ElementD void): the epilogue builder lays
 * out its unused buffer by the root's ElementAux. */
template <class Node> struct WithoutOutput : Node {
    using Node::Node;
    using ElementAux = cutlass::bfloat16_t;
};

/* The GEMM of an epilogue tree; ElementD void: no output tensor (the tree's root names the
 * type the epilogue builder lays its unused buffer out by).  Cooperative: the two consumer
 * warp groups share each tile (Tile's M = 256), then its epilogue; PingPong: each warp group
 * takes its own tile (M = 128) and runs its epilogue while the other's products run — for
 * epilogues whose per-element work would otherwise leave the tensor cores idle (the margin
 * product and InfoNCE's GEMMs; the batch-hard mining, whose epilogue keeps more state per
 * element, is slower so and stays cooperative). */
enum class Schedule { Cooperative, PingPong };
template <class Tile, class ElementD, class Tree, Schedule S = Schedule::Cooperative> struct EpilogueGemm {
    static constexpr bool kPingPong = S == Schedule::PingPong;
    using EpilogueSchedule = std::conditional_t<kPingPong, cutlass::epilogue::TmaWarpSpecialized,
                                                cutlass::epilogue::TmaWarpSpecializedCooperative>;
    using KernelSchedule = std::conditional_t<kPingPong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                              cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
    using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, ClusterShape,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, 8, ElementD,
        cutlass::layout::RowMajor, 8, EpilogueSchedule, Tree>::CollectiveOp;
    using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor, 8, Element,
        cutlass::layout::ColumnMajor, 8, float, Tile, ClusterShape,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
        KernelSchedule>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                        cutlass::gemm::PersistentScheduler>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

/* Arguments with the problem and the row-major operands set (leading dimensions lda, ldb);
 * the caller adds the epilogue's. */
template <class Gemm>
typename Gemm::Arguments row_major_operands(int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                                            const void *B, int64_t ldb)
{
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {(int)M, (int)N, (int)K, 1};
    /* (rows, contiguous extent, batch) strides */
    args.mainloop = {(const Element *)A, make_stride(lda, _1{}, lda * M), (const Element *)B,
                     make_stride(ldb, _1{}, ldb * N)};
    return args;
}

/* With needed non-null, the probe: the workspace bytes into *needed, PLOSS_ERR_UNSUPPORTED
 * (no message: the caller takes its unfused path) where the GEMM cannot run; else the run on
 * stream.  `what` names the GEMM in messages ("margin: the fused product"). */
template <class Gemm>
ploss_status launch(typename Gemm::Arguments &args, void *workspace, size_t workspace_bytes, size_t *needed,
                    cudaStream_t stream, const char *what)
{
    Gemm gemm;
    const size_t bytes = Gemm::get_workspace_size(args);
    if (needed) {
        *needed = bytes;
        return gemm.can_implement(args) == cutlass::Status::kSuccess ? PLOSS_OK : PLOSS_ERR_UNSUPPORTED;
    }
    if (gemm.can_implement(args) != cutlass::Status::kSuccess)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "%s GEMM does not serve %d×%d×%d", what,
                           (int)get<0>(args.problem_shape), (int)get<1>(args.problem_shape),
                           (int)get<2>(args.problem_shape));
    if (bytes > workspace_bytes)
        return ploss_error(PLOSS_ERR_CUDA, "%s GEMM's workspace is short", what);
    if (gemm.initialize(args, workspace, stream) != cutlass::Status::kSuccess ||
        gemm.run(stream) != cutlass::Status::kSuccess) {
        const cudaError_t e = cudaGetLastError();
        return ploss_error(PLOSS_ERR_CUDA, "%s GEMM failed: %s", what, cudaGetErrorString(e));
    }
    return PLOSS_OK;
}

} // namespace ploss_sm90

#endif
