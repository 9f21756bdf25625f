/*
 * infonce_exp_gemm.cu — InfoNCE's similarity GEMMs with the exponential in the epilogue
 * (CUTLASS 3, sm_90 warp-specialised TMA kernels, built only where the CUTLASS headers are
 * found: tools/fetch_cutlass.sh).  For normalised bf16 views the similarities are bounded,
 * |S_ij| ≤ 1/τ, so one fixed shift keeps every e^S in fp32's range and no row or column max
 * is needed (kernels/pairs/infonce.cu):
 *
 *   sums GEMM      E_ij = 2^(x_i·y_j · r_i · c_j − shift), each row's and each column's
 *                  partial sums of E per tile in fp32; E itself never reaches memory;
 *   gradient GEMM  the same E, turned into the gradient tile E_ij·(u_i + v_j)·c_j in bf16.
 *
 * Each partial is written once by its tile (no atomics: deterministic); the caller adds them
 * in a fixed order.
 */
#include "infonce_exp_gemm.h"
#include "sm90_epilogue_gemm.cuh"

/* named, not anonymous: meson.build compiles the CUTLASS GEMMs as one translation unit */
namespace ploss_infonce_exp {

using namespace ploss_sm90;

struct ShiftArguments {
    float shift = 0.0f;
};

/* 2^(acc·c·r − shift) */
template <class T> struct ScaledExp2 {
    using Arguments = ShiftArguments;
};
template <int N> struct ScaledExp2<cutlass::Array<float, N>> {
    using Arguments = ShiftArguments;
    using V = cutlass::Array<float, N>;
    CUTLASS_DEVICE V operator()(V const &acc, V const &c, V const &r, Arguments const &a) const
    {
        V o;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < N; ++i)
            o[i] = exp2_ftz(acc[i] * c[i] * r[i] - a.shift);
        return o;
    }
};

/* 2^(acc·c·r − shift)·(u + v)·c */
template <class T> struct GradientExp2 {
    using Arguments = ShiftArguments;
};
template <int N> struct GradientExp2<cutlass::Array<float, N>> {
    using Arguments = ShiftArguments;
    using V = cutlass::Array<float, N>;
    CUTLASS_DEVICE V operator()(V const &acc, V const &c, V const &r, V const &u, V const &v,
                                Arguments const &a) const
    {
        V o;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < N; ++i)
            o[i] = exp2_ftz(acc[i] * c[i] * r[i] - a.shift) * (u[i] + v[i]) * c[i];
        return o;
    }
};

using TileShape = Shape<Int<PLOSS_INFONCE_EXP_TILE_M>, Int<PLOSS_INFONCE_EXP_TILE_N>, _64>;
template <class Vector> using PerColumn = ploss_sm90::PerColumn<TileShape, Vector>;
template <class Vector> using PerRow = ploss_sm90::PerRow<TileShape, Vector>;

/* the sums GEMM: E, its rows' sums per tile (a reduction over columns), then its columns'
 * sums per tile (over rows); no output tensor */
using Exp = fusion::Sm90EVT<fusion::Sm90Compute<ScaledExp2, float, float, kRound>, fusion::Sm90AccFetch,
                           PerColumn<float> /* c_j */, PerRow<float> /* r_i */>;
using RowSums = fusion::Sm90EVT<fusion::Sm90ColReduction<cutlass::plus, cutlass::plus, cutlass::plus, 0, TileShape,
                                                         float, float, kRound, Stride<_1, _0, int64_t>, 4, true,
                                                         false>,
                                Exp>;
/* Each column's sums of E over the rows of a tile: one partial per column and tile,
 * ptr[q·Nr + j] for row tile q (Nr = N rounded up to TILE_N), in a fixed order.  The register
 * sums hold one slot per distinct column of the thread's elements; the GMMA accumulator gives
 * the lanes that share columns (lane bits 2–4: rows) and the warps that do (the warp group's
 * four, each its rows), so the lanes' sums are added by three shuffles and the warps'
 * through shared memory, in warp order.  (CUTLASS's Sm90RowReduction keeps its sums in local memory here.) */
struct ColumnSums {
    struct SharedStorage {};
    struct Arguments {
        float *ptr = nullptr;
    };
    using Params = Arguments;
    using ElementAux = cutlass::bfloat16_t; /* the epilogue builder takes its (unused) layout type
                                             * for a void D from the tree's root */

    template <class ProblemShape> static constexpr Params to_underlying_arguments(ProblemShape const &,
                                                                                  Arguments const &a, void *)
    {
        return a;
    }
    template <class ProblemShape> static bool can_implement(ProblemShape const &, Arguments const &) { return true; }
    template <class ProblemShape> static size_t get_workspace_size(ProblemShape const &, Arguments const &)
    {
        return 0;
    }
    template <class ProblemShape>
    static cutlass::Status initialize_workspace(ProblemShape const &, Arguments const &, void *, cudaStream_t,
                                                cutlass::CudaHostAdapter * = nullptr)
    {
        return cutlass::Status::kSuccess;
    }
    CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
    CUTLASS_DEVICE bool is_C_load_needed() const { return false; }
    CUTLASS_HOST_DEVICE ColumnSums() {}
    CUTLASS_HOST_DEVICE ColumnSums(Params const &p, SharedStorage const &) : params(p) {}
    Params params;

    template <class... Args> CUTLASS_DEVICE auto get_producer_load_callbacks(fusion::detail::ProducerLoadArgs<Args...> const &)
    {
        return fusion::EmptyProducerLoadCallbacks{};
    }

    template <class RTensor, class CTensor, class Residue>
    struct ConsumerStoreCallbacks : fusion::EmptyConsumerStoreCallbacks {
        RTensor tCrSum; /* (CPY, CPY_M, CPY_N, EPI_M, EPI_N), stride 0 along the rows */
        CTensor tCcD;   /* each element's (row, column) in the tile */
        Residue residue;
        int n0, q, n_total, thread_idx;
        float *ptr;
        CUTLASS_DEVICE ConsumerStoreCallbacks(RTensor r, CTensor c, Residue res, int n0_, int q_, int nt, int t,
                                              float *p)
            : tCrSum(r), tCcD(c), residue(res), n0(n0_), q(q_), n_total(nt), thread_idx(t), ptr(p)
        {
        }

        template <class ElementAccumulator, int FragmentSize>
        CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(cutlass::Array<ElementAccumulator, FragmentSize> const &,
                                                                 int epi_v, int epi_m, int epi_n,
                                                                 cutlass::Array<float, FragmentSize> const &in)
        {
            Tensor r = tCrSum(_, _, _, epi_m, epi_n);
            Tensor c = tCcD(_, _, _, epi_m, epi_n);
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < FragmentSize; ++i)
                if (elem_less(c(epi_v * FragmentSize + i), residue))
                    r(epi_v * FragmentSize + i) += in[i];
            return in;
        }

        template <class STensor, class SyncFn, class VTensor>
        CUTLASS_DEVICE void reduce(STensor &&smem_buffer, SyncFn const &sync_fn, int, int, bool is_last_iteration,
                                   VTensor)
        {
            if (!is_last_iteration)
                return;
            constexpr int TN = PLOSS_INFONCE_EXP_TILE_N, WARPS = PLOSS_INFONCE_EXP_TILE_M / 32;
            static_assert(decltype(cosize(smem_buffer.layout()))::value *
                                  sizeof(typename remove_cvref_t<STensor>::value_type) >=
                              WARPS * TN * sizeof(float),
                          "ColumnSums: the epilogue's shared memory is short");
            float *sm = (float *)raw_pointer_cast(smem_buffer.data());
            const int lane = thread_idx & 31, warp = thread_idx >> 5;
            Tensor flat = filter_zeros(tCrSum); /* the distinct columns' slots */
            CUTLASS_PRAGMA_UNROLL
            for (int k = 0; k < size(flat); ++k) {
                float v = flat(k);
                v += __shfl_xor_sync(0xffffffffu, v, 4);
                v += __shfl_xor_sync(0xffffffffu, v, 8);
                v += __shfl_xor_sync(0xffffffffu, v, 16);
                flat(k) = v;
            }
            sync_fn(); /* the buffer is free */
            if (lane < 4) {
                /* tCcD is relative to the thread's first element, whose column in the tile is
                 * N − residue − n0; every element of a slot carries its column: the same value
                 * to the same place */
                float *row = sm + warp * TN + (n_total - (int)get<1>(residue) - n0);
                CUTLASS_PRAGMA_UNROLL
                for (int e = 0; e < size(tCcD); ++e)
                    row[get<1>(tCcD(e))] = tCrSum(e);
            }
            sync_fn();
            if (thread_idx < TN && n0 + thread_idx < n_total) {
                float v = 0.0f;
                CUTLASS_PRAGMA_UNROLL
                for (int w = 0; w < WARPS; ++w)
                    v += sm[w * TN + thread_idx];
                const int64_t Nr = (int64_t)(n_total + TN - 1) / TN * TN;
                ptr[(int64_t)q * Nr + n0 + thread_idx] = v;
            }
            sync_fn();
        }
    };

    template <bool ReferenceSrc, class... Args>
    CUTLASS_DEVICE auto get_consumer_store_callbacks(fusion::detail::ConsumerStoreArgs<Args...> const &args)
    {
        auto [M, N, K, L] = args.problem_shape_mnkl;
        auto [m, n, k, l] = args.tile_coord_mnkl;
        /* a stride-0 view along the rows gives the register sums one slot per column */
        Tensor g = make_tensor(make_gmem_ptr<float>(nullptr),
                               make_layout(take<0, 2>(args.tile_shape_mnk), make_stride(_0{}, _1{})));
        Tensor tCg = fusion::sm90_partition_for_epilogue<ReferenceSrc>(g, args.epi_tile, args.tiled_copy,
                                                                       args.thread_idx);
        Tensor tCr = make_tensor_like<float>(tCg);
        fill(tCr, 0.0f);
        static_assert(decltype(size(args.tiled_copy))::value == PLOSS_INFONCE_EXP_TILE_M,
                      "ColumnSums: a thread per tile row (one ping-pong warp group)");
        const int n0 = (int)n * PLOSS_INFONCE_EXP_TILE_N;
        return ConsumerStoreCallbacks<decltype(tCr), decltype(args.tCcD), decltype(args.residue_tCcD)>(
            tCr, args.tCcD, args.residue_tCcD, n0, (int)m, (int)N, args.thread_idx, params.ptr);
    }
};
using SumsTree = fusion::Sm90EVT<ColumnSums, RowSums>;

/* the gradient GEMM */
using GradTree = fusion::Sm90EVT<fusion::Sm90Compute<GradientExp2, Element, float, kRound>, fusion::Sm90AccFetch,
                                 PerColumn<float> /* c_j */, PerRow<float> /* r_i */, PerRow<float> /* u_i */,
                                 PerColumn<float> /* v_j */>;

/* ping-pong, both: a tile's epilogue (an exponential per element, and the sums or the
 * gradient's scaling) runs while the other warp group's products do */
using SumsGemm = EpilogueGemm<TileShape, void, SumsTree, Schedule::PingPong>::Gemm;
using GradGemm = EpilogueGemm<TileShape, Element, GradTree, Schedule::PingPong>::Gemm;

extern "C" ploss_status ploss_cuda_infonce_exp_gemm(const ploss_infonce_exp_gemm *g, void *workspace,
                                                    size_t workspace_bytes, size_t *needed, cudaStream_t stream)
{
    if (!g->D) {
        typename SumsGemm::Arguments args =
            row_major_operands<SumsGemm>(g->M, g->N, g->K, g->A, g->lda, g->B, g->ldb);
        args.epilogue.thread = {
            {
                {
                    {},                              /* acc */
                    {g->c, 0.0f, {_0{}, _1{}, 0}},   /* c_j */
                    {g->r, 0.0f, {_1{}, _0{}, 0}},   /* r_i */
                    {g->shift},                      /* 2^(·) */
                },
                {g->row_sums, 0.0f, {_1{}, _0{}, 0}}, /* Σ_j E_ij per tile */
            },
            {g->col_sums},                            /* Σ_i E_ij per tile */
        };
        return launch<SumsGemm>(args, workspace, workspace_bytes, needed, stream, "info_nce: the fused sums");
    }
    typename GradGemm::Arguments args = row_major_operands<GradGemm>(g->M, g->N, g->K, g->A, g->lda, g->B, g->ldb);
    args.epilogue.ptr_D = (Element *)g->D;
    args.epilogue.dD = make_stride(g->ldd, _1{}, g->ldd * g->M);
    args.epilogue.thread = {
        {},                            /* acc */
        {g->c, 0.0f, {_0{}, _1{}, 0}}, /* c_j */
        {g->r, 0.0f, {_1{}, _0{}, 0}}, /* r_i */
        {g->u, 0.0f, {_1{}, _0{}, 0}}, /* u_i */
        {g->v, 0.0f, {_0{}, _1{}, 0}}, /* v_j */
        {g->shift},                    /* the gradient */
    };
    return launch<GradGemm>(args, workspace, workspace_bytes, needed, stream, "info_nce: the fused gradient");
}

} // namespace ploss_infonce_exp
