/*
 * linear_cross_entropy_impl.h — the CPU fused linear + cross-entropy for one compute type
 * REAL (included by linear_cross_entropy.c through real_types.h: float for f32, f16 and
 * bf16 inputs, double for f64): the operands, the logit tiles, the gradient products and
 * their sums in REAL (OpenBLAS sgemm / dgemm), each row's softmax in double.  No include
 * guard: included once per compute type.  Internal.
 */
/* Row r of a tile: its products z (C values; the bias bd added and the cap taken here)
 * become ω·∂ℓ/∂z when grad; the loss is returned, the row's lse and softmax entropy through
 * *lse_out and *ent_out.  y is a valid label.  The row's arithmetic is double whatever REAL
 * is (vector loops). */
static double F(row_loss)(const ploss_linear_problem *p, REAL *z, const REAL *bd, int64_t C, int64_t y, int grad,
                          double om, double *lse_out, double *ent_out)
{
    const double cap = p->softcap, eps = p->label_smoothing, zl = p->z_loss;
    if (bd)
        for (int64_t j = 0; j < C; ++j)
            z[j] = (REAL)((double)z[j] + (double)bd[j]);
    if (cap > 0.0)
        for (int64_t j = 0; j < C; ++j)
            z[j] = (REAL)(cap * tanh((double)z[j] / cap));
    double M = z[0], sz = 0.0;
#pragma omp simd reduction(max : M) reduction(+ : sz)
    for (int64_t j = 0; j < C; ++j) {
        M = z[j] > M ? z[j] : M;
        sz += z[j];
    }
    /* S = Σ e^(z−M) and Σ e^(z−M)·(M − z): H = log S + that / S, a sum of terms >= 0; a
     * class of probability 0 (a logit of −∞) adds nothing (0·log 0 = 0, not 0·∞) */
    double S = 0.0, SD = 0.0;
#pragma omp simd reduction(+ : S, SD)
    for (int64_t j = 0; j < C; ++j) {
        const double d = M - z[j], e = exp(-d);
        S += e;
        SD += e != 0.0 ? e * d : 0.0;
    }
    const double lse = M + log(S);
    *lse_out = lse;
    *ent_out = log(S) + SD / S;
    /* focal: ℓ = u^γ·L with the factor F on p_j − [j = y]; the cross-entropy has F = 1 */
    double loss, factor = 1.0;
    if (p->focal) {
        factor = ploss_focal_factor((double)z[y] - lse, p->gamma, &loss);
        loss += zl * lse * lse;
    } else {
        loss = (1.0 - eps) * (lse - z[y]) + zl * lse * lse;
        if (eps != 0.0)
            loss += eps * (lse - sz / (double)C);
    }
    if (grad) {
        /* p_j = e^(z_j − M)/S: exact for logits of any size (e^(z_j − lse) loses log S to
         * the rounding of lse = M + log S once |M| is large) */
        const double k = (factor + 2.0 * zl * lse) / S, b = eps / (double)C, gy = factor * (1.0 - eps);
#pragma omp simd
        for (int64_t j = 0; j < C; ++j) {
            const double zj = z[j], t = cap > 0.0 ? 1.0 - (zj / cap) * (zj / cap) : 1.0;
            z[j] = (REAL)(om * t * (exp(zj - M) * k - b - (j == y ? gy : 0.0)));
        }
    }
    return loss;
}

static ploss_status F(linear_cross_entropy)(ploss_ctx_t *ctx, const ploss_linear_problem *p)
{
    const int64_t N = p->N, C = p->C, D = p->D, ld = D > 0 ? D : 1;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;
    int64_t B = p->tile_rows > 0 ? p->tile_rows : TILE_ELEMS / C;
    B = B < 1 ? 1 : B > N ? N : B;
    const size_t nd = (size_t)N * (size_t)D, cd = (size_t)C * (size_t)D;

    /* the losses, lse and entropies, the bias's gradient (in double); X, W, the bias, the
     * tile, and with gradients ∂L/∂X and ∂L/∂W — all taken before the first write to an
     * output */
    const int want_gb = want_grad && p->bias;
    /* a weight already in the compute type with rows of D contiguous values is read where it
     * is, and such a weight gradient (not accumulated) is summed where it is: no C×D copy
     * (no output overlaps an input: the front checked) */
    const int own_w = p->dtype == REAL_DTYPE && p->w.sd == 1 && p->w.sn == ld;
    const int own_gw = want_grad && !p->accumulate && p->gw_dtype == REAL_DTYPE && p->grad_w.sd == 1 &&
                       p->grad_w.sn == ld;
    void *ws = NULL;
    const size_t doubles = 3 * (size_t)N + (want_gb ? (size_t)C : 0);
    const size_t reals = nd + (own_w ? 0 : cd) + (p->bias ? (size_t)C : 0) + (size_t)B * (size_t)C +
                         (want_grad ? nd + (own_gw ? 0 : cd) : 0);
    ploss_status st = ploss_alloc(ctx, doubles * sizeof(double) + reals * sizeof(REAL) + 8, &ws);
    if (st)
        return st;
    double *losses = ws, *lses = losses + N, *ents = lses + N, *gbd = ents + N;
    REAL *xd = (REAL *)(gbd + (want_gb ? C : 0)), *wd = own_w ? (REAL *)p->w.data : xd + nd;
    REAL *bd = xd + nd + (own_w ? 0 : cd), *tile = bd + (p->bias ? C : 0);
    REAL *gx = tile + (size_t)B * (size_t)C, *gw = own_gw ? (REAL *)p->grad_w.data : gx + (want_grad ? nd : 0);
#pragma omp parallel for schedule(static) if (N * D > 65536)
    for (int64_t i = 0; i < N; ++i)
        LOAD(xd + (size_t)i * (size_t)D, p->x.data, p->dtype, i * p->x.sn, p->x.sd, D);
#pragma omp parallel for schedule(static) if (C * D > 65536)
    for (int64_t j = 0; j < (own_w ? 0 : C); ++j)
        LOAD(wd + (size_t)j * (size_t)D, p->w.data, p->dtype, j * p->w.sn, p->w.sd, D);
    if (want_grad)
        memset(gw, 0, cd * sizeof(REAL));
    for (int64_t j = 0; p->bias && j < C; ++j)
        bd[j] = (REAL)ploss_load(p->bias, p->b_dtype, j * p->b_s);
    if (want_gb)
        memset(gbd, 0, (size_t)C * sizeof(double));

    const double divisor = (double)ploss_cpu_count_labels(p->labels, p->label_dtype, N, 1, p->y_sn, 0,
                                                          p->ignore_index);
    /* the upstream factor of every row: one value, or the row's own for backward of NONE */
    const int per_row = p->pass == PLOSS_PASS_BACKWARD && none;
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor);
    for (int64_t b0 = 0; b0 < N; b0 += B) {
        const int64_t rows = N - b0 < B ? N - b0 : B;
        if ((st = ploss_cpu_tile_products(ctx, xd + (size_t)b0 * (size_t)D, rows, C, D, wd, ld, REAL_DTYPE, tile)))
            break;
#pragma omp parallel for schedule(static) if (rows * C > 65536)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = b0 + r, y = ploss_load_int(p->labels, p->label_dtype, i * p->y_sn);
            REAL *z = tile + (size_t)r * (size_t)C;
            if (y == p->ignore_index) {
                losses[i] = lses[i] = ents[i] = 0.0;
                if (want_grad)
                    memset(z, 0, (size_t)C * sizeof(REAL));
                continue;
            }
            const double om = per_row ? ploss_load(p->grad_loss, p->gl_dtype, i * p->gl_sn) : omega;
            losses[i] = F(row_loss)(p, z, p->bias ? bd : NULL, C, y, want_grad, om, &lses[i], &ents[i]);
        }
        /* ∂L/∂b: the tile's column sums, each in row order (the tiles in order) */
#pragma omp parallel for schedule(static) if (rows * C > 65536)
        for (int64_t j = 0; j < (want_gb ? C : 0); ++j)
            for (int64_t r = 0; r < rows; ++r)
                gbd[j] += (double)tile[(size_t)r * (size_t)C + (size_t)j];
        if (!want_grad || D == 0)
            continue;
        if ((st = ploss_cpu_tile_gradient_products(ctx, tile, rows, C, D, 1.0, wd, xd + (size_t)b0 * (size_t)D, ld,
                                                   REAL_DTYPE, gx + (size_t)b0 * (size_t)D, gw)))
            break;
    }
    if (st) {
        ploss_free(ctx, ws);
        return st;
    }

    if (want_loss)
        ploss_cpu_store_row_losses(p->loss, p->loss_dtype, p->l_sn, p->reduction, losses, N, divisor);
    for (int64_t i = 0; want_loss && p->lse && i < N; ++i)
        ploss_store(p->lse, p->stats_dtype, i * p->lse_s, lses[i]);
    for (int64_t i = 0; want_loss && p->entropy && i < N; ++i)
        ploss_store(p->entropy, p->stats_dtype, i * p->ent_s, ents[i]);
    for (int64_t j = 0; want_gb && j < C; ++j)
        ploss_store(p->grad_b, p->gb_dtype, j * p->gb_s,
                    gbd[j] + (p->accumulate ? ploss_load(p->grad_b, p->gb_dtype, j * p->gb_s) : 0.0));
    if (want_grad) {
#pragma omp parallel for schedule(static) if (N * D > 65536)
        for (int64_t i = 0; i < N; ++i)
            STORE(p->grad_x.data, p->gx_dtype, i * p->grad_x.sn, p->grad_x.sd, D, gx + (size_t)i * (size_t)D);
#pragma omp parallel for schedule(static) if (C * D > 65536)
        for (int64_t j = 0; j < (own_gw ? 0 : C); ++j) {
            REAL *row = gw + (size_t)j * (size_t)D;
            for (int64_t k = 0; p->accumulate && k < D; ++k)
                row[k] = (REAL)((double)row[k] + ploss_load(p->grad_w.data, p->gw_dtype, j * p->grad_w.sn + k * p->grad_w.sd));
            STORE(p->grad_w.data, p->gw_dtype, j * p->grad_w.sn, p->grad_w.sd, D, row);
        }
    }
    return ploss_free(ctx, ws);
}
