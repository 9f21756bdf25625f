/*
 * infonce.c — CPU backend of InfoNCE (core/engines/pairs.h), in f64 whatever the dtype:
 *   1. the rows normalised (or copied) into u and v;
 *   2. row tiles S_b = u_b·vᵀ/τ through the project's GEMM (OpenBLAS dgemm), at most
 *      TILE_ELEMS values: each tile gives its rows' log-sum-exp exactly and a partial
 *      (max, Σe^(S − max)) per column, merged into the columns' online log-sum-exp in tile
 *      order;
 *   3. the losses from the log-sum-exps and the diagonal;
 *   4. backward: each tile recomputed and turned into G = ∂L/∂S in place; ∂L/∂u_b = G·v/τ
 *      and ∂L/∂v += Gᵀ·u_b/τ (two GEMMs per tile, in tile order), then through the
 *      normalisation into the gradients.
 * Sharded (pairs.h, comm): u holds this rank's N queries, v every rank's M keys; the
 * columns' (max, Σ) pairs are merged over the ranks in rank order before their
 * log-sum-exps are taken, and the rows' losses gathered for a reduced loss.
 */
#include <math.h>
#include <string.h>

#include "chunks.h"
#include "dispatch.h"
#include "gemm.h"
#include "pairs.h"
#include "scalar.h"

enum { TILE_ELEMS = 1 << 20 };

/* u_i = x_i / max(‖x_i‖, eps) (normalize) or x_i, rows of D doubles (N queries, M keys);
 * r_i = ‖x_i‖. */
static void load_rows(const ploss_infonce_problem *p, int k, double *u, double *r)
{
    const int64_t N = k == 0 ? p->N : p->M, D = p->D;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
        double *row = u + (size_t)i * (size_t)D;
        ploss_cpu_load_f64(row, p->x[k].data, p->dtype, i * p->x[k].sn, p->x[k].sd, D);
        double s = 0.0;
        for (int64_t j = 0; j < D; ++j)
            s += row[j] * row[j];
        r[i] = sqrt(s);
        if (p->normalize) {
            const double inv = 1.0 / fmax(r[i], PLOSS_NORMALIZE_EPS);
            for (int64_t j = 0; j < D; ++j)
                row[j] *= inv;
        }
    }
}

/* The tile of rows [b0, b0 + rows): S = u_b·vᵀ/τ (rows × M). */
static ploss_status tile_of(ploss_ctx_t *ctx, const ploss_infonce_problem *p, const double *u, const double *v,
                            int64_t b0, int64_t rows, double *s)
{
    const int64_t D = p->D;
    const ploss_gemm_problem g = {.m = rows, .n = p->M, .k = D, .alpha = 1.0 / p->temperature, .beta = 0.0,
                                  .a = u + (size_t)b0 * (size_t)D, .lda = D > 0 ? D : 1, .b = v, .trans_b = 1,
                                  .ldb = D > 0 ? D : 1, .ab_dtype = PLOSS_F64, .c = s, .ldc = p->M > 0 ? p->M : 1,
                                  .c_dtype = PLOSS_F64};
    return ploss_cpu_gemm(ctx, &g);
}

ploss_status ploss_cpu_infonce(ploss_ctx_t *ctx, const ploss_infonce_problem *p)
{
    /* N queries (this rank's), M keys (every rank's; M = N on one device), query i's
     * positive the key off + i */
    const int64_t N = p->N, M = p->M, D = p->D, off = p->key_offset;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;
    const int R = p->comm ? ploss_comm_size(p->comm) : 1;
    const int64_t B = M == 0 ? 0 : (M >= TILE_ELEMS ? 1 : (TILE_ELEMS / M < N ? TILE_ELEMS / M : N));
    const size_t nd = (size_t)N * (size_t)D, md = (size_t)M * (size_t)D;

    /* u, v, their norms, the tile, the row and column statistics (and every rank's column
     * pairs), the diagonal, the losses (every rank's), the weights of the rows and of the
     * columns; backward also ∂L/∂u and ∂L/∂v — all taken before the first write to an output */
    void *ws = NULL;
    const size_t doubles = nd + md + (size_t)N + (size_t)M + (size_t)(B > 0 ? B : 0) * (size_t)M + 2 * (size_t)N +
                           2 * (size_t)M + (p->comm ? 2 * (size_t)M * (size_t)(R + 1) : 0) + (size_t)M + (size_t)N +
                           (size_t)M + (want_grad ? nd + md : 0);
    ploss_status st = ploss_alloc(ctx, doubles * sizeof(double) + 8, &ws);
    if (st)
        return st;
    double *u = ws, *v = u + nd, *ru = v + md, *rv = ru + N, *tile = rv + M;
    double *row_lse = tile + (size_t)(B > 0 ? B : 0) * (size_t)M, *diag = row_lse + N, *col_m = diag + N,
           *col_s = col_m + M, *pairs = col_s + M;
    double *losses = pairs + (p->comm ? 2 * (size_t)M * (size_t)(R + 1) : 0), *w_row = losses + M,
           *w_col = w_row + N;
    double *gu = w_col + M, *gv = gu + nd;
    const double inv_t = 1.0 / p->temperature;

    load_rows(p, 0, u, ru);
    load_rows(p, 1, v, rv);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
        double s = 0.0;
        for (int64_t j = 0; j < D; ++j)
            s += u[(size_t)i * (size_t)D + j] * v[(size_t)(off + i) * (size_t)D + j];
        diag[i] = s * inv_t;
    }
    for (int64_t j = 0; j < M; ++j)
        col_m[j] = col_s[j] = 0.0;

    /* pass 1: row log-sum-exps per tile, column ones merged across tiles */
    for (int64_t b0 = 0; b0 < N && st == PLOSS_OK; b0 += B) {
        const int64_t rows = N - b0 < B ? N - b0 : B;
        if ((st = tile_of(ctx, p, u, v, b0, rows, tile)))
            break;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const double *t = tile + (size_t)r * (size_t)M;
            double m = t[0], s = 0.0;
            for (int64_t j = 1; j < M; ++j)
                m = fmax(m, t[j]);
            for (int64_t j = 0; j < M; ++j)
                s += exp(t[j] - m);
            row_lse[b0 + r] = m + log(s);
        }
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < M; ++j) {
            double m = tile[j], s = 0.0;
            for (int64_t r = 1; r < rows; ++r)
                m = fmax(m, tile[(size_t)r * (size_t)M + j]);
            for (int64_t r = 0; r < rows; ++r)
                s += exp(tile[(size_t)r * (size_t)M + j] - m);
            ploss_lse_merge(&col_m[j], &col_s[j], m, s);
        }
    }
    /* sharded: every rank's column pairs, merged in rank order */
    if (!st && p->comm) {
        for (int64_t j = 0; j < M; ++j) {
            pairs[2 * j] = col_m[j];
            pairs[2 * j + 1] = col_s[j];
        }
        const double *all = pairs + 2 * M;
        if (!(st = ploss_sharded_gather(p->comm, pairs, pairs + 2 * M, 2 * M, PLOSS_F64)))
            for (int64_t j = 0; j < M; ++j) {
                col_m[j] = col_s[j] = 0.0;
                for (int q = 0; q < R; ++q)
                    ploss_lse_merge(&col_m[j], &col_s[j], all[(size_t)q * 2 * (size_t)M + 2 * j],
                                    all[(size_t)q * 2 * (size_t)M + 2 * j + 1]);
            }
    }
    if (st) {
        ploss_free(ctx, ws);
        return st;
    }

    double *col_lse = col_m;
    for (int64_t j = 0; j < M; ++j)
        col_lse[j] = col_m[j] + log(col_s[j]);
    /* the losses of this rank's rows, then (sharded) every rank's in rank order */
    for (int64_t i = 0; i < N; ++i) {
        const double lr = row_lse[i] - diag[i], lc = col_lse[off + i] - diag[i];
        losses[off + i] = p->symmetric ? 0.5 * (lr + lc) : lr;
    }
    if (want_loss && p->comm && !none && (st = ploss_sharded_gather(p->comm, losses + off, pairs, N, PLOSS_F64))) {
        ploss_free(ctx, ws);
        return st;
    }
    if (want_loss && none)
        ploss_cpu_store_row_losses(p->loss, p->loss_dtype, p->l_sn, p->reduction, losses + off, N, (double)M);
    else if (want_loss)
        ploss_cpu_store_row_losses(p->loss, p->loss_dtype, p->l_sn, p->reduction, p->comm ? pairs : losses, M,
                                   (double)M);
    if (!want_grad)
        return ploss_free(ctx, ws);

    /* pass 2: G = ∂L/∂S per tile, with the weight of each sample's loss (halved when
     * symmetric): w_row for this rank's queries, w_col for every key */
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, (double)M);
    const double half = p->symmetric ? 0.5 : 1.0;
    const int per_row = p->pass == PLOSS_PASS_BACKWARD && none;
    for (int64_t j = 0; j < M; ++j)
        w_col[j] = half * (per_row ? ploss_load(p->grad_loss, p->gl_dtype, j * p->gl_sn) : omega);
    for (int64_t i = 0; i < N; ++i)
        w_row[i] = w_col[off + i];
    for (int64_t b0 = 0; b0 < N; b0 += B) {
        const int64_t rows = N - b0 < B ? N - b0 : B;
        if ((st = tile_of(ctx, p, u, v, b0, rows, tile)))
            break;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = b0 + r;
            double *t = tile + (size_t)r * (size_t)M;
            for (int64_t j = 0; j < M; ++j) {
                double g = w_row[i] * (exp(t[j] - row_lse[i]) - (double)(off + i == j));
                if (p->symmetric)
                    g += w_col[j] * (exp(t[j] - col_lse[j]) - (double)(off + i == j));
                t[j] = g;
            }
        }
        const ploss_gemm_problem du = {.m = rows, .n = D, .k = M, .alpha = inv_t, .beta = 0.0, .a = tile, .lda = M,
                                       .b = v, .ldb = D > 0 ? D : 1, .ab_dtype = PLOSS_F64,
                                       .c = gu + (size_t)b0 * (size_t)D, .ldc = D > 0 ? D : 1, .c_dtype = PLOSS_F64};
        const ploss_gemm_problem dv = {.m = M, .n = D, .k = rows, .alpha = inv_t, .beta = b0 == 0 ? 0.0 : 1.0,
                                       .a = tile, .trans_a = 1, .lda = M, .b = u + (size_t)b0 * (size_t)D,
                                       .ldb = D > 0 ? D : 1, .ab_dtype = PLOSS_F64, .c = gv, .ldc = D > 0 ? D : 1,
                                       .c_dtype = PLOSS_F64};
        if (D > 0 && ((st = ploss_cpu_gemm(ctx, &du)) || (st = ploss_cpu_gemm(ctx, &dv))))
            break;
    }
    if (st) {
        ploss_free(ctx, ws);
        return st;
    }
    if (N == 0)
        memset(gv, 0, md * sizeof *gv);

    /* through the normalisation: (g − (g·u)u)/‖x‖, or g/eps below eps */
    for (int k = 0; k < 2; ++k) {
        double *g = k == 0 ? gu : gv;
        const double *x = k == 0 ? u : v, *r = k == 0 ? ru : rv;
        const int64_t rows = k == 0 ? N : M;
        const ploss_dtype dt = k == 0 ? p->dtype : p->gk_dtype;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < rows; ++i) {
            double *gi = g + (size_t)i * (size_t)D;
            const double *xi = x + (size_t)i * (size_t)D;
            if (p->normalize) {
                double dot = 0.0;
                if (r[i] > PLOSS_NORMALIZE_EPS)
                    for (int64_t j = 0; j < D; ++j)
                        dot += gi[j] * xi[j];
                const double inv = 1.0 / fmax(r[i], PLOSS_NORMALIZE_EPS);
                for (int64_t j = 0; j < D; ++j)
                    gi[j] = (gi[j] - dot * xi[j]) * inv;
            }
            ploss_cpu_store_f64(p->grad[k].data, dt, i * p->grad[k].sn, p->grad[k].sd, D, gi);
        }
    }
    return ploss_free(ctx, ws);
}
