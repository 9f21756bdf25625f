/*
 * margin_impl.h — the margin losses' CPU kernels for one compute type, included by margin.c
 * through real_types.h (REAL, REAL_DTYPE, LOAD/STORE, F(name)): the normalised operands,
 * the cosine tiles and the gradients in REAL, every sum and the rows' statistics in double.
 */

/* u_i = v_k / max(‖v_k‖, eps) of `rows` rows of D values, k = index[i] (index NULL: i),
 * r_i = ‖v_k‖. */
static void F(load_normalised)(const ploss_pair_operand *v, ploss_dtype dt, const int64_t *index, int64_t rows,
                            int64_t D, REAL *u, double *r)
{
#pragma omp parallel for schedule(static) if (rows * D > 65536)
    for (int64_t i = 0; i < rows; ++i) {
        REAL *row = u + (size_t)i * (size_t)D;
        LOAD(row, v->data, dt, (index ? index[i] : i) * v->sn, v->sd, D);
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < D; ++j)
            s += (double)row[j] * row[j];
        r[i] = sqrt(s);
        const REAL inv = (REAL)(1.0 / fmax(r[i], PLOSS_NORMALIZE_EPS));
#pragma omp simd
        for (int64_t j = 0; j < D; ++j)
            row[j] *= inv;
    }
}

/* factor·∂L/∂v_k from ∂L/∂v̂ (g, in place): (g − (g·v̂)v̂)/‖v‖, or g/eps where the norm was
 * clamped; stored as dt at output row k of `rows`: from g's row pos[k], or zeros where
 * pos[k] < 0 (pos NULL: row k). */
static void F(normalisation_backward)(const ploss_pair_grad *out, ploss_dtype dt, const int64_t *pos, int64_t rows,
                                   int64_t D, REAL *g, const REAL *u, const double *r, double factor)
{
#pragma omp parallel for schedule(static) if (rows * D > 65536)
    for (int64_t k = 0; k < rows; ++k) {
        const int64_t i = pos ? pos[k] : k;
        if (i < 0) {
            ploss_cpu_store_zeros(out->data, dt, k * out->sn, out->sd, D);
            continue;
        }
        REAL *gi = g + (size_t)i * (size_t)D;
        const REAL *ui = u + (size_t)i * (size_t)D;
        double dot = 0.0;
        if (r[i] > PLOSS_NORMALIZE_EPS) {
#pragma omp simd reduction(+ : dot)
            for (int64_t j = 0; j < D; ++j)
                dot += (double)gi[j] * ui[j];
        }
        const REAL inv = (REAL)(factor / fmax(r[i], PLOSS_NORMALIZE_EPS)), dr = (REAL)dot;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j)
            gi[j] = (gi[j] - dr * ui[j]) * inv;
        STORE(out->data, dt, k * out->sn, out->sd, D, gi);
    }
}

/* A tile of a sharded call (margin.h): the rows' statistics over this rank's classes
 * (tile: rows × K cosines) merged over the ranks through stats (3·rows values, then R times
 * that); each row's loss to losses[r], and for a gradient ω·∂ℓ/∂z over the tile in place,
 * the target's entry times φ′ (the products multiply by s). */
static ploss_status F(sharded_tile)(const ploss_margin_problem *p, REAL *tile, int64_t rows, int64_t b0,
                                 double omega, double *stats, double *losses)
{
    const int R = ploss_comm_size(p->comm);
    const int64_t K = p->K;
    const double s = p->margin.s;
    const int want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int per_row = p->pass == PLOSS_PASS_BACKWARD && p->reduction == PLOSS_REDUCTION_NONE;
    double *mine = stats, *all = stats + 3 * rows;
#pragma omp parallel for schedule(static) if (rows * K > 65536)
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t y = ploss_load_int(p->labels, p->label_dtype, (b0 + r) * p->y_sn);
        const int64_t j = ploss_margin_shard_class(p, p->class_pos, y);
        const REAL *c = tile + (size_t)r * (size_t)K;
        double M = -INFINITY, S = 0.0;
        for (int64_t k = 0; k < K; ++k)
            if (k != j)
                M = fmax(M, c[k]);
        if (M > -INFINITY)
            for (int64_t k = 0; k < K; ++k)
                if (k != j)
                    S += exp(s * (c[k] - M));
        mine[3 * r] = M;
        mine[3 * r + 1] = S;
        mine[3 * r + 2] = j >= 0 ? c[j] : 0.0;
    }
    ploss_status st = ploss_sharded_gather(p->comm, mine, all, 3 * rows, PLOSS_F64);
    if (st)
        return st;
#pragma omp parallel for schedule(static) if (rows * K > 65536)
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t y = ploss_load_int(p->labels, p->label_dtype, (b0 + r) * p->y_sn);
        REAL *g = tile + (size_t)r * (size_t)K;
        if (y == p->ignore_index) {
            losses[r] = 0.0;
            if (want_grad)
                memset(g, 0, (size_t)K * sizeof *g);
            continue;
        }
        /* the merge in rank order: M = max M_q, S = Σ S_q·e^(s(M_q − M)), the owner's c_y */
        double M = -INFINITY, S = 0.0, cy = 0.0;
        for (int q = 0; q < R; ++q)
            M = fmax(M, all[(size_t)q * 3 * rows + 3 * r]);
        for (int q = 0; q < R; ++q) {
            const double *f = all + (size_t)q * 3 * rows + 3 * r;
            if (f[1] > 0.0)
                S += f[1] * exp(s * (f[0] - M));
            cy += f[2];
        }
        double pn, dphi;
        losses[r] = ploss_margin_row_loss(&p->margin, S, cy, M, &pn, &dphi);
        if (!want_grad)
            continue;
        const double w = per_row ? ploss_load(p->grad_loss, p->gl_dtype, (b0 + r) * p->gl_sn) : omega;
        const int64_t j = ploss_margin_shard_class(p, p->class_pos, y);
        for (int64_t k = 0; k < K; ++k)
            g[k] = (REAL)(k == j ? -w * dphi * S * pn : w * pn * exp(s * (g[k] - M)));
    }
    return PLOSS_OK;
}

static ploss_status F(margin)(ploss_ctx_t *ctx, const ploss_margin_problem *p)
{
    /* C: the classes of the softmax (Partial FC: the K kept ones) */
    const int64_t N = p->N, C = p->K, D = p->D, ld = D > 0 ? D : 1;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;
    /* sharded: the same tiles on every rank (margin.h) */
    int64_t B = p->tile_rows > 0 ? p->tile_rows : TILE_ELEMS / (p->comm ? p->classes_max : C);
    B = B < 1 ? 1 : B > N ? N : B;
    const size_t nd = (size_t)N * (size_t)D, cd = (size_t)C * (size_t)D;

    /* X̂, Ŵ, their norms, the tile, the losses, φ′ of a tile's rows; backward also ∂L/∂X̂
     * and ∂L/∂Ŵ — all taken before the first write to an output */
    void *ws = NULL;
    const size_t doubles = (size_t)N + (size_t)C + (size_t)N + (size_t)B + (p->kept && !p->comm ? (size_t)N : 0) +
                           (p->comm ? (size_t)B * 3 * (size_t)(ploss_comm_size(p->comm) + 1) : 0);
    const size_t reals = nd + cd + (size_t)B * (size_t)C + (want_grad ? nd + cd : 0);
    ploss_status st = ploss_alloc(ctx, doubles * sizeof(double) + reals * sizeof(REAL) + 8, &ws);
    if (st)
        return st;
    double *rx = ws, *rw = rx + N, *losses = rw + C, *dphi = losses + N, *after = dphi + B;
    double *stats = after; /* sharded (no remapped labels): a tile's row statistics, then every rank's */
    REAL *xh = (REAL *)(after + (p->kept && !p->comm ? (size_t)N : 0) +
                        (p->comm ? (size_t)B * 3 * (size_t)(ploss_comm_size(p->comm) + 1) : 0));
    REAL *wh = xh + nd, *tile = wh + cd, *gx = tile + (size_t)B * (size_t)C, *gw = gx + (want_grad ? nd : 0);
    F(load_normalised)(&p->x, p->dtype, NULL, N, D, xh, rx);
    F(load_normalised)(&p->w, p->dtype, p->kept, C, D, wh, rw);
    if (want_grad)
        memset(gw, 0, cd * sizeof(REAL));

    /* the labels as positions among the softmax's classes (Partial FC: in the kept list,
     * an ignored row at position −1: an ignore_index in [0, C) may be a kept position) */
    const void *labels = p->labels;
    ploss_dtype label_dtype = p->label_dtype;
    int64_t y_sn = p->y_sn, ignore = p->ignore_index;
    if (p->kept && !p->comm) {
        int64_t *remapped = (int64_t *)after;
        for (int64_t i = 0; i < N; ++i) {
            const int64_t y = ploss_load_int(p->labels, p->label_dtype, i * p->y_sn);
            remapped[i] = y == p->ignore_index ? -1 : p->class_pos[y];
        }
        labels = remapped;
        label_dtype = PLOSS_I64;
        y_sn = 1;
        ignore = -1;
    }
    const ploss_margin *m = &p->margin;
    const size_t label_size = ploss_dtype_size(label_dtype);
    const double divisor = (double)ploss_cpu_count_labels(labels, label_dtype, N, 1, y_sn, 0, ignore);
    /* the upstream factor of every row: one value, or the row's own for backward of NONE */
    const int per_row = p->pass == PLOSS_PASS_BACKWARD && none;
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor);
    for (int64_t b0 = 0; b0 < N; b0 += B) {
        const int64_t rows = N - b0 < B ? N - b0 : B;
        if ((st = ploss_cpu_tile_products(ctx, xh + (size_t)b0 * (size_t)D, rows, C, D, wh, ld, REAL_DTYPE, tile)))
            break;
        if (p->comm) {
            if ((st = F(sharded_tile)(p, tile, rows, b0, omega, stats, losses + b0)))
                break;
            if (want_grad && D > 0 &&
                (st = ploss_cpu_tile_gradient_products(ctx, tile, rows, C, D, m->s, wh, xh + (size_t)b0 * (size_t)D,
                                                       ld, REAL_DTYPE, gx + (size_t)b0 * (size_t)D, gw)))
                break;
            continue;
        }
        /* the logits: s·c, the target's s·φ(c) */
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t y = ploss_load_int(labels, label_dtype, (b0 + r) * y_sn);
            REAL *z = tile + (size_t)r * (size_t)C;
            const double phi = y != ignore ? ploss_margin_target(m, z[y], &dphi[r]) : 0.0;
            const REAL s = (REAL)m->s;
#pragma omp simd
            for (int64_t j = 0; j < C; ++j)
                z[j] *= s;
            if (y != ignore)
                z[y] = (REAL)(m->s * phi);
        }
        /* the softmax cross-entropy of each row: the loss, and ω·∂ℓ/∂z over z */
        ploss_cpu_srows sr = {
            .name = "margin", .kind = PLOSS_SROWS_CE, .pass = want_grad ? (per_row ? PLOSS_PASS_BACKWARD
                                                                                    : PLOSS_PASS_FUSED)
                                                                        : PLOSS_PASS_FORWARD,
            .reduction = PLOSS_REDUCTION_NONE, .N = rows, .S = 1, .C = C,
            .x = tile, .x_dtype = REAL_DTYPE, .x_sn = C, .x_sc = 1,
            .t = (const char *)labels + b0 * y_sn * (int64_t)label_size, .t_dtype = label_dtype,
            .t_sn = y_sn, .ignore_index = ignore,
            .loss = losses + b0, .loss_dtype = PLOSS_F64, .l_sn = 1,
            .grad = want_grad ? tile : NULL, .g_sn = C, .g_sc = 1,
            .divisor = 1.0, .omega = omega,
        };
        if (per_row) {
            sr.grad_loss = (const char *)p->grad_loss + b0 * p->gl_sn * (int64_t)ploss_dtype_size(p->gl_dtype);
            sr.gl_dtype = p->gl_dtype;
            sr.gl_sn = p->gl_sn;
        }
        if ((st = PLOSS_ISA_FN(ploss_cpu_srows_run)(&sr)))
            break;
        if (!want_grad || D == 0)
            continue;
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t y = ploss_load_int(labels, label_dtype, (b0 + r) * y_sn);
            if (y != ignore)
                tile[(size_t)r * (size_t)C + y] *= (REAL)dphi[r];
        }
        if ((st = ploss_cpu_tile_gradient_products(ctx, tile, rows, C, D, m->s, wh, xh + (size_t)b0 * (size_t)D, ld,
                                                   REAL_DTYPE, gx + (size_t)b0 * (size_t)D, gw)))
            break;
    }
    if (st) {
        ploss_free(ctx, ws);
        return st;
    }

    if (want_loss)
        ploss_cpu_store_row_losses(p->loss, p->loss_dtype, p->l_sn, p->reduction,
                                   losses + (p->reduction == PLOSS_REDUCTION_NONE ? p->loss_row0 : 0),
                                   p->reduction == PLOSS_REDUCTION_NONE ? p->loss_rows : N, divisor);
    if (want_grad) {
        F(normalisation_backward)(&p->grad_x, p->gx_dtype, NULL, N, D, gx, xh, rx, p->grad_x_factor);
        F(normalisation_backward)(&p->grad_w, p->dtype, p->class_pos, p->C, D, gw, wh, rw, 1.0);
    }
    return ploss_free(ctx, ws);
}
