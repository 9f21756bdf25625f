/*
 * infonce_impl.h — InfoNCE's CPU kernels for one compute type, included by infonce.c through
 * real_types.h (REAL, REAL_DTYPE, EXP, LOAD/STORE, F(name)): the rows, the similarity tiles
 * and the gradients in REAL, the log-sum-exps, norms, losses and every sum in double.
 */

/* u_i = x_i / max(‖x_i‖, eps) (normalize) or x_i, rows of D values (N queries, M keys);
 * r_i = ‖x_i‖. */
static void F(load_rows)(const ploss_infonce_problem *p, int k, REAL *u, double *r)
{
    const int64_t N = k == 0 ? p->N : p->M, D = p->D;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
        REAL *row = u + (size_t)i * (size_t)D;
        LOAD(row, p->x[k].data, p->dtype, i * p->x[k].sn, p->x[k].sd, D);
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < D; ++j)
            s += (double)row[j] * row[j];
        r[i] = sqrt(s);
        if (p->normalize) {
            const REAL inv = (REAL)(1.0 / fmax(r[i], PLOSS_NORMALIZE_EPS));
#pragma omp simd
            for (int64_t j = 0; j < D; ++j)
                row[j] *= inv;
        }
    }
}

/* The tile of rows [b0, b0 + rows): S = u_b·vᵀ/τ (rows × M). */
static ploss_status F(tile_of)(ploss_ctx_t *ctx, const ploss_infonce_problem *p, const REAL *u, const REAL *v,
                               int64_t b0, int64_t rows, REAL *s)
{
    const int64_t D = p->D;
    const ploss_gemm_problem g = {.m = rows, .n = p->M, .k = D, .alpha = 1.0 / p->temperature, .beta = 0.0,
                                  .a = u + (size_t)b0 * (size_t)D, .lda = D > 0 ? D : 1, .b = v, .trans_b = 1,
                                  .ldb = D > 0 ? D : 1, .ab_dtype = REAL_DTYPE, .c = s, .ldc = p->M > 0 ? p->M : 1,
                                  .c_dtype = REAL_DTYPE};
    return ploss_cpu_gemm(ctx, &g);
}

static ploss_status F(infonce)(ploss_ctx_t *ctx, const ploss_infonce_problem *p)
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
    const size_t doubles = (size_t)N + (size_t)M + 2 * (size_t)N + 4 * (size_t)M +
                           (p->comm ? 2 * (size_t)M * (size_t)(R + 1) : 0) + (size_t)M + (size_t)N + (size_t)M;
    const size_t reals = nd + md + (size_t)(B > 0 ? B : 0) * (size_t)M + (want_grad ? nd + md : 0);
    ploss_status st = ploss_alloc(ctx, doubles * sizeof(double) + reals * sizeof(REAL) + 8, &ws);
    if (st)
        return st;
    double *ru = ws, *rv = ru + N, *row_lse = rv + M, *diag = row_lse + N, *col_m = diag + N, *col_s = col_m + M,
           *tm = col_s + M, *ts = tm + M, *pairs = ts + M; /* tm, ts: a tile's column (max, sum) */
    double *losses = pairs + (p->comm ? 2 * (size_t)M * (size_t)(R + 1) : 0), *w_row = losses + M,
           *w_col = w_row + N;
    REAL *u = (REAL *)(w_col + M), *v = u + nd, *tile = v + md;
    REAL *gu = tile + (size_t)(B > 0 ? B : 0) * (size_t)M, *gv = gu + nd;
    const double inv_t = 1.0 / p->temperature;

    F(load_rows)(p, 0, u, ru);
    F(load_rows)(p, 1, v, rv);
    for (int64_t j = 0; j < M; ++j)
        col_m[j] = col_s[j] = 0.0;

    /* pass 1: row log-sum-exps per tile, column ones merged across tiles */
    for (int64_t b0 = 0; b0 < N && st == PLOSS_OK; b0 += B) {
        const int64_t rows = N - b0 < B ? N - b0 : B;
        if ((st = F(tile_of)(ctx, p, u, v, b0, rows, tile)))
            break;
        /* the positives' similarities from the tile itself, so that a loss, lse − S_ii, is
         * taken from one rounding of S */
        for (int64_t r = 0; r < rows; ++r)
            diag[b0 + r] = tile[(size_t)r * (size_t)M + (size_t)(off + b0 + r)];
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const REAL *t = tile + (size_t)r * (size_t)M;
            REAL m = t[0];
            double s = 0.0;
            for (int64_t j = 1; j < M; ++j)
                m = t[j] > m || m != m ? t[j] : m;
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < M; ++j)
                s += EXP_FLUSH(t[j] - m);
            row_lse[b0 + r] = m + log(s);
        }
        /* the columns' (max, sum) over the tile's rows in row order, a block of columns a
         * thread, rows outer (contiguous) */
#pragma omp parallel for schedule(static)
        for (int64_t j0 = 0; j0 < M; j0 += 256) {
            const int64_t j1 = j0 + 256 < M ? j0 + 256 : M;
            for (int64_t j = j0; j < j1; ++j) {
                tm[j] = tile[j];
                ts[j] = 0.0;
            }
            for (int64_t r = 1; r < rows; ++r) {
                const REAL *t = tile + (size_t)r * (size_t)M;
                for (int64_t j = j0; j < j1; ++j)
                    tm[j] = t[j] > tm[j] || tm[j] != tm[j] ? t[j] : tm[j];
            }
            for (int64_t r = 0; r < rows; ++r) {
                const REAL *t = tile + (size_t)r * (size_t)M;
#pragma omp simd
                for (int64_t j = j0; j < j1; ++j)
                    ts[j] += EXP_FLUSH(t[j] - (REAL)tm[j]);
            }
            for (int64_t j = j0; j < j1; ++j)
                ploss_lse_merge(&col_m[j], &col_s[j], tm[j], ts[j]);
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
        /* one tile holds every row: pass 1's is still there */
        if (B < N && (st = F(tile_of)(ctx, p, u, v, b0, rows, tile)))
            break;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = b0 + r;
            REAL *t = tile + (size_t)r * (size_t)M;
            const REAL wr = (REAL)w_row[i], lr = (REAL)row_lse[i];
            if (p->symmetric) {
#pragma omp simd
                for (int64_t j = 0; j < M; ++j)
                    t[j] = wr * EXP_FLUSH(t[j] - lr) + (REAL)w_col[j] * EXP_FLUSH(t[j] - (REAL)col_lse[j]);
            } else {
#pragma omp simd
                for (int64_t j = 0; j < M; ++j)
                    t[j] = wr * EXP_FLUSH(t[j] - lr);
            }
            /* the positive's −1s, apart (no cancellation inside the vector loop's sum) */
            if (off + i < M)
                t[off + i] -= (REAL)(w_row[i] + (p->symmetric ? w_col[off + i] : 0.0));
        }
        const ploss_gemm_problem du = {.m = rows, .n = D, .k = M, .alpha = inv_t, .beta = 0.0, .a = tile, .lda = M,
                                       .b = v, .ldb = D > 0 ? D : 1, .ab_dtype = REAL_DTYPE,
                                       .c = gu + (size_t)b0 * (size_t)D, .ldc = D > 0 ? D : 1, .c_dtype = REAL_DTYPE};
        const ploss_gemm_problem dv = {.m = M, .n = D, .k = rows, .alpha = inv_t, .beta = b0 == 0 ? 0.0 : 1.0,
                                       .a = tile, .trans_a = 1, .lda = M, .b = u + (size_t)b0 * (size_t)D,
                                       .ldb = D > 0 ? D : 1, .ab_dtype = REAL_DTYPE, .c = gv, .ldc = D > 0 ? D : 1,
                                       .c_dtype = REAL_DTYPE};
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
        REAL *g = k == 0 ? gu : gv;
        const REAL *x = k == 0 ? u : v;
        const double *r = k == 0 ? ru : rv;
        const int64_t rows = k == 0 ? N : M;
        const ploss_dtype dt = k == 0 ? p->dtype : p->gk_dtype;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < rows; ++i) {
            REAL *gi = g + (size_t)i * (size_t)D;
            const REAL *xi = x + (size_t)i * (size_t)D;
            if (p->normalize) {
                double dot = 0.0;
                if (r[i] > PLOSS_NORMALIZE_EPS) {
#pragma omp simd reduction(+ : dot)
                    for (int64_t j = 0; j < D; ++j)
                        dot += (double)gi[j] * xi[j];
                }
                const REAL inv = (REAL)(1.0 / fmax(r[i], PLOSS_NORMALIZE_EPS)), dr = (REAL)dot;
#pragma omp simd
                for (int64_t j = 0; j < D; ++j)
                    gi[j] = (gi[j] - dr * xi[j]) * inv;
            }
            STORE(p->grad[k].data, dt, i * p->grad[k].sn, p->grad[k].sd, D, gi);
        }
    }
    return ploss_free(ctx, ws);
}
