/*
 * batch_hard_mine_gemm.cu — the batch-hard triplet loss's Gram GEMM with the mining in its
 * epilogue (CUTLASS 3, sm_90 warp-specialised TMA kernel, built only where the CUTLASS
 * headers are found: tools/fetch_cutlass.sh).  Each product x_i·x_j becomes its mining
 * distance (fp32) and a signed key in double (positive pairs +, negative pairs −, the pair
 * (i, i) 0): the distance's bits in the high word, the column in the low one;
 * CUTLASS's row reduction (a max) takes each row's largest positive key per tile, then,
 * over the keys of negative pairs alone, the largest negative one (the nearest negative).  The N×N distances never reach memory: one
 * key per row, tile and kind does (each written once: deterministic).
 */
#include "batch_hard_mine_gemm.h"
#include "sm90_epilogue_gemm.cuh"

/* named, not anonymous: meson.build compiles the CUTLASS GEMMs as one translation unit */
namespace ploss_batch_hard_mine {

using namespace ploss_sm90;

struct MineKeyArguments {
    float row0 = 0.0f; /* the global index of the block's first row */
    int cosine = 0;
};

/* The key of distance d (≥ 0, or NaN) and column word `low`: the double whose high word is
 * d's fp32 bits raised clear of 0 — increasing in d, then in `low`; a NaN's high word is
 * `nan_high`. */
__device__ __forceinline__ double mine_key(float d, uint32_t low, uint32_t nan_high)
{
    const uint32_t high = d != d ? nan_high : __float_as_uint(d > 0.0f ? d : 0.0f) + 0x00100000u;
    return __longlong_as_double((long long)(((uint64_t)high << 32) | low));
}

/* acc = x_i·x_j → the signed key of the pair (see batch_hard_mine_gemm.h): the distance in
 * fp32 (squared for the Euclidean distance: the same order). */
template <class T> struct MineKey {
    using Arguments = MineKeyArguments;
};
template <int N> struct MineKey<cutlass::Array<float, N>> {
    using Arguments = MineKeyArguments;
    using V = cutlass::Array<float, N>;
    CUTLASS_DEVICE cutlass::Array<double, N> operator()(V const &acc, V const &vi, V const &vj, V const &lo_i,
                                                        V const &hi_i, V const &lo_j, V const &hi_j, V const &row,
                                                        V const &col, Arguments const &a) const
    {
        cutlass::Array<double, N> o;
        CUTLASS_PRAGMA_UNROLL
        for (int e = 0; e < N; ++e) {
            const float d = a.cosine ? 1.0f - acc[e] / (vi[e] * vj[e]) : vi[e] + vj[e] - 2.0f * acc[e];
            const uint32_t j = (uint32_t)col[e];
            const bool same = lo_i[e] == lo_j[e] && hi_i[e] == hi_j[e];
            o[e] = row[e] + a.row0 == col[e] ? 0.0
                   : same                    ? mine_key(d, 0xffffffffu - j, 0x7fe00000u)
                                             : -mine_key(d, j, 0u);
        }
        return o;
    }
};

/* The keys of negative pairs (negative values) kept, the rest −∞ (the max's identity). */
template <class T> struct NegativeOnly {};
template <int N> struct NegativeOnly<cutlass::Array<double, N>> {
    using V = cutlass::Array<double, N>;
    CUTLASS_DEVICE V operator()(V const &k) const
    {
        V o;
        CUTLASS_PRAGMA_UNROLL
        for (int e = 0; e < N; ++e)
            o[e] = k[e] < 0.0 ? k[e] : -INFINITY;
        return o;
    }
};

using TileShape = Shape<Int<PLOSS_BATCH_HARD_TILE_M>, Int<PLOSS_BATCH_HARD_TILE_N>, _64>;
template <class Vector> using PerColumn = ploss_sm90::PerColumn<TileShape, Vector>;
template <class Vector> using PerRow = ploss_sm90::PerRow<TileShape, Vector>;

/* each row's largest key per tile, one partial per tile (written once) */
using RowMax = fusion::Sm90ColReduction<cutlass::maximum, cutlass::maximum, cutlass::maximum, 0, TileShape, double,
                                        double, kRound, Stride<_1, _0, int64_t>, 2, true, false>;
using Keys = fusion::Sm90EVT<fusion::Sm90Compute<MineKey, double, float, kRound>, fusion::Sm90AccFetch,
                            PerRow<float> /* v_i */, PerColumn<float> /* v_j */, PerRow<float> /* lo_i */,
                            PerRow<float> /* hi_i */, PerColumn<float> /* lo_j */, PerColumn<float> /* hi_j */,
                            Coordinate<0> /* i − row0 */, Coordinate<1> /* j */>;
using PosMax = fusion::Sm90EVT<RowMax, Keys>;
using Negatives = fusion::Sm90EVT<fusion::Sm90Compute<NegativeOnly, double, double, kRound>, PosMax>;
using NegMax = fusion::Sm90EVT<RowMax, Negatives>;
/* the root hands the epilogue (fp32 compute) a float it does not store */
using MineTree = fusion::Sm90EVT<
    WithoutOutput<fusion::Sm90Compute<cutlass::epilogue::thread::Identity, float, double, kRound>>, NegMax>;

using Gemm = EpilogueGemm<TileShape, void, MineTree>::Gemm;

extern "C" ploss_status ploss_cuda_batch_hard_mine_gemm(const ploss_batch_hard_mine_gemm *g, void *workspace,
                                                        size_t workspace_bytes, size_t *needed, cudaStream_t stream)
{
    const auto *xi = (const cutlass::bfloat16_t *)g->X + (g->X ? g->row0 * g->ldx : 0);
    typename Gemm::Arguments args = row_major_operands<Gemm>(g->M, g->N, g->K, xi, g->ldx, g->X, g->ldx);
    const int64_t r0 = g->row0;
    auto row = [&](auto *v) { return v ? v + r0 : v; };
    /* the tree from the root down: to fp32 (not stored) ← the negative pairs' max per tile ←
     * the negative pairs alone ← the positive pairs' max per tile ← the keys */
    args.epilogue.thread = {
        {
            {
                {
                    {
                        {},                                  /* acc */
                        {row(g->v), 0.0f, {_1{}, _0{}, 0}},  /* v_i */
                        {g->v, 0.0f, {_0{}, _1{}, 0}},       /* v_j */
                        {row(g->lo), 0.0f, {_1{}, _0{}, 0}}, /* lo_i */
                        {row(g->hi), 0.0f, {_1{}, _0{}, 0}}, /* hi_i */
                        {g->lo, 0.0f, {_0{}, _1{}, 0}},      /* lo_j */
                        {g->hi, 0.0f, {_0{}, _1{}, 0}},      /* hi_j */
                        {},                                  /* i − row0 */
                        {},                                  /* j */
                        {(float)g->row0, g->cosine},         /* the keys */
                    },
                    {g->pos, -INFINITY, {_1{}, _0{}, 0}},    /* positive pairs: max per tile */
                },
                {},                                          /* negative pairs alone */
            },
            {g->neg, -INFINITY, {_1{}, _0{}, 0}},            /* their max per tile */
        },
        {},                                                  /* to fp32 */
    };
    return launch<Gemm>(args, workspace, workspace_bytes, needed, stream, "batch_hard: the mining");
}

} // namespace ploss_batch_hard_mine
