/*
 * softmax_rows_impl.h — the kernels of softmax_rows.h for one compute type, included by
 * softmax_rows.c with REAL (float for f32/f16/bf16 logits, double for f64), REAL_DTYPE,
 * EXP, LOAD/STORE (the row converters of chunks.h) defined, and F(name) naming its
 * functions.
 *
 * A tile holds T ≤ TILE samples; x[i·xi + j·xj] is class j of sample i, with xj = 1 (rows
 * of contiguous classes, computed along the classes) or xi = 1 (computed along the
 * samples).  Per valid sample, with m = max_j x_j (PC: of x_j + b_j, b_j = log w_j) and
 * s = Σ_j e^(x_j − m):
 *   lse − x_y = (m − x_y) + log s
 * (no cancellation between an lse and an x_y of a large magnitude; but, as in PyTorch's
 * log_softmax, a confident sample's s = 1 + Σ_{j≠y} e^(x_j − m) holds that sum only to s's
 * spacing, so a loss below ~1e-13 (f64) keeps a few digits), and the gradient entries of the
 * label, where p_y − 1 would cancel, are computed in double with expm1.  The vector loops compute every class as if it were not the label
 * (masked out of the sums that exclude it); the label's entry is then written over.
 */

_Static_assert(PLOSS_SROWS_KIND_COUNT == 6, "a new kind of softmax_rows.h: add its case to every switch on the "
                                           "kind in this file (their default is the cross-entropy maths)");

typedef struct {
    const ploss_cpu_srows *p;
    const REAL *br;    /* PC: b_j = log w_j as REAL, else zeros */
    const double *cd;  /* PC: b_j, focal: α_j, in double; NULL: no class values (α = 1) */
    int use_state;     /* backward reads the saved state */
} F(call);

/* Per-sample values of a tile: in (label, upstream weight, saved state), out (loss, state). */
typedef struct {
    int32_t y[TILE]; /* label, −1: not valid (ignored, not mined) */
    double w[TILE];  /* ω, or the sample's upstream gradient */
    double st[3][TILE];
    double loss[TILE];
} F(samples);

/* Loss and state (forward), gradient (g non-NULL: g[i·gi + j·gj]) or the OHEM keys (keys
 * non-NULL: nothing else) of the tile x[i·xi + j·xj] (rows: xj = gj = 1, else xi = gi = 1);
 * scratch: C REALs (Taylor rows).  g may be x itself: every pass that needs x runs before
 * the gradient pass, which reads x_ij before writing g_ij, and the label's logit is kept
 * aside. */
static void F(tile)(const F(call) *k, int rows, int64_t T, const REAL *x, int64_t xi, int64_t xj, REAL *g,
                    int64_t gi, int64_t gj, REAL *scratch, F(samples) *sm, uint32_t *keys)
{
    const ploss_cpu_srows *p = k->p;
    const int64_t C = p->C;
    const ploss_srows_kind kind = keys ? PLOSS_SROWS_CE : p->kind;
    const int32_t *y = sm->y;
    const REAL *br = k->br;
    REAL m[TILE], m2[TILE], fr[TILE], cr[TILE], lsr[TILE], ls2r[TILE], col[TILE];
    double xy[TILE], by[TILE], a0[TILE], a1[TILE], a2[TILE], ls[TILE], G[TILE], PG[TILE], fy[TILE], fy1[TILE];
    for (int64_t i = 0; i < T; ++i) {
        xy[i] = y[i] >= 0 ? x[i * xi + y[i] * xj] : 0.0;
        by[i] = kind == PLOSS_SROWS_PC_SOFTMAX && y[i] >= 0 ? k->cd[y[i]] : 0.0; /* the label's log prior */
        m[i] = m2[i] = -INFINITY; /* NaN and infinite logits make s, hence the loss, NaN */
        a0[i] = a1[i] = a2[i] = 0.0;
    }
    if (kind == PLOSS_SROWS_TAYLOR_CE) { /* f_n(x_y), f_{n−1}(x_y) in REAL, as the F_j of Z (and
                                            as CUDA): an F_y past REAL's range is +∞ there too */
        REAL xr[TILE], fr_y[TILE], fr_y1[TILE];
        for (int64_t i = 0; i < T; ++i)
            xr[i] = (REAL)xy[i];
        TAYLOR_COLUMN(REAL, fr_y, xr, T, p->order);
        TAYLOR_COLUMN(REAL, fr_y1, xr, T, p->order - 1);
        for (int64_t i = 0; i < T; ++i) {
            fy[i] = fr_y[i];
            fy1[i] = fr_y1[i];
        }
    }

    /* maxima: m over every class (PC: of x + b), m2 over the classes other than y */
    if (kind == PLOSS_SROWS_LARGE_MARGIN)
        TILE_MAX(2, c0 = xv; c1 = (int32_t)j != y[i] ? xv : c1;);
    else if (kind != PLOSS_SROWS_TAYLOR_CE)
        TILE_MAX(1, c0 = xv + br[j];);

    /* the sums over the classes, the loss and the state */
    if (!k->use_state) {
        if (kind == PLOSS_SROWS_LARGE_MARGIN) {
            /* d = x − m2 in double for Σ d (a float difference of logits near ±FLT_MAX
             * overflows), e·d = 0 where e is 0 (not 0·∞) */
            TILE_SUM(3, const int other = (int32_t)j != y[i]; const REAL d = xv - m2[i], e = EXP_FLUSH(d);
                     c0 = other ? e : 0; c1 = other && e != 0 ? e * d : 0; c2 = other ? (double)xv - m2[i] : 0;);
        } else if (kind == PLOSS_SROWS_TAYLOR_CE && rows) {
            for (int64_t i = 0; i < T; ++i) {
                TAYLOR_COLUMN(REAL, scratch, x + i * xi, C, p->order);
                double z = 0.0;
#pragma omp simd reduction(+ : z)
                for (int64_t j = 0; j < C; ++j)
                    z += scratch[j];
                a0[i] = z;
            }
        } else if (kind == PLOSS_SROWS_TAYLOR_CE) {
            for (int64_t j = 0; j < C; ++j) {
                TAYLOR_COLUMN(REAL, col, x + j * xj, T, p->order);
#pragma omp simd
                for (int64_t i = 0; i < T; ++i)
                    a0[i] += col[i];
            }
        } else {
            TILE_SUM(1, c0 = EXP_FLUSH((xv + br[j]) - m[i]););
        }
        if (keys) { /* p_y rounded to f32 (rows.h) */
            for (int64_t i = 0; i < T; ++i) {
                const float score = (float)exp((xy[i] - m[i]) - log(a0[i]));
                uint32_t key;
                memcpy(&key, &score, sizeof key);
                keys[i] = y[i] < 0 ? PLOSS_OHEM_IGNORED_KEY : score != score ? PLOSS_OHEM_NAN_KEY : key;
            }
            return;
        }
        switch (kind) {
        case PLOSS_SROWS_LARGE_MARGIN: {
            const double h = 0.5 * p->lam, u = 1.0 / (double)(C - 1);
#pragma omp simd
            for (int64_t i = 0; i < T; ++i) {
                /* s = Σ_𝒩 e^(x − m) + e^(x_y − m) from the sums relative to m2 ≤ m */
                const double l = log(a0[i] * exp((double)m2[i] - m[i]) + exp(xy[i] - m[i]));
                ls[i] = l;
                sm->loss[i] = (m[i] - xy[i]) + l + h * (a1[i] / a0[i] - a2[i] * u);
                sm->st[0][i] = m[i] + l;
                sm->st[1][i] = m2[i] + log(a0[i]);
                sm->st[2][i] = m2[i] + a1[i] / a0[i];
            }
            break;
        }
        case PLOSS_SROWS_TAYLOR_CE:
#pragma omp simd
            for (int64_t i = 0; i < T; ++i) {
                sm->loss[i] = log(a0[i]) - log(fy[i]);
                sm->st[0][i] = a0[i];
            }
            break;
        default:
#pragma omp simd
            for (int64_t i = 0; i < T; ++i) {
                ls[i] = log(a0[i]);
                sm->loss[i] = (m[i] - xy[i]) + ls[i];
                sm->st[0][i] = m[i] + ls[i];
            }
            break;
        }
    }

    /* per-sample factors of the gradient (and the focal losses): in a fused pass from the
     * sums relative to the maxima, as the loss; from a saved state its lse relative to them
     * (a state m + log s keeps log s only to m's spacing: tied logits of a large magnitude
     * lose it) */
    switch (kind) {
    case PLOSS_SROWS_LARGE_MARGIN:
        for (int64_t i = 0; i < T; ++i) {
            double l2, e1; /* log s' and E − m2 relative to m2 */
            if (k->use_state) {
                ls[i] = sm->st[0][i] - m[i];
                l2 = sm->st[1][i] - m2[i];
                e1 = sm->st[2][i] - m2[i];
            } else {
                l2 = log(a0[i]);
                e1 = a1[i] / a0[i];
            }
            lsr[i] = (REAL)ls[i];
            ls2r[i] = (REAL)l2;
            fr[i] = (REAL)exp(((double)m2[i] - m[i]) + (l2 - ls[i])); /* p_j = q_j·e^(lse' − lse) */
            cr[i] = (REAL)(e1 - 1.0);                                  /* x_j − E + 1 = (x_j − m2) − cr */
        }
        break;
    case PLOSS_SROWS_TAYLOR_CE:
        break;
    default:
        for (int64_t i = 0; i < T; ++i) {
            if (k->use_state)
                ls[i] = sm->st[0][i] - m[i];
            lsr[i] = (REAL)ls[i];
        }
        break;
    }
    if (kind == PLOSS_SROWS_FOCAL) {
        const double gamma = p->gamma;
        double alpha[TILE];
        for (int64_t i = 0; i < T; ++i)
            alpha[i] = k->cd && y[i] >= 0 ? k->cd[y[i]] : 1.0;
#pragma omp simd
        for (int64_t i = 0; i < T; ++i) {
            double l;
            G[i] = alpha[i] * ploss_focal_factor((xy[i] - m[i]) - ls[i], gamma, &l); /* log p_y ≤ 0 */
            if (!k->use_state)
                sm->loss[i] = alpha[i] * l;
        }
    } else if (kind == PLOSS_SROWS_DUAL_FOCAL) {
        /* Σ_j −log(1 + ε − d_j²) and PG = Σ_j p_j·G_j, G_j = 2·d_j/(1 + ε − d_j²), d_j = p_j − [j = y];
         * in double: G_k − PG cancels where one p_k of the other classes is near 1 */
        const double eps = p->eps;
        for (int64_t i = 0; i < T; ++i)
            a0[i] = a1[i] = 0.0;
        TILE_SUM(2, const int other = (int32_t)j != y[i]; const double lp = ((double)xv - m[i]) - ls[i], pj = exp(lp);
                 const double den = eps - expm1(lp) * (1 + pj); /* ε + (1 − p)(1 + p) */
                 c0 = other ? -log(den) : 0; c1 = other ? pj * (2 * pj / den) : 0;);
        for (int64_t i = 0; i < T; ++i) {
            const double lp = (xy[i] - m[i]) - ls[i], py = exp(lp), ad = -expm1(lp);
            const double den = eps + py * (1.0 + ad);
            G[i] = -2.0 * ad / den;
            PG[i] = a1[i] + py * G[i];
            if (!k->use_state)
                sm->loss[i] = a0[i] - log(den);
        }
    }
    if (!g)
        return;

    /* the gradient, every class as a non-label one */
    REAL wr[TILE];
    for (int64_t i = 0; i < T; ++i) {
        const double w = sm->w[i];
        wr[i] = (REAL)(kind == PLOSS_SROWS_FOCAL ? w * G[i] : kind == PLOSS_SROWS_TAYLOR_CE ? w / sm->st[0][i] : w);
    }
    const REAL h = (REAL)(0.5 * p->lam), u = (REAL)(1.0 / (double)(C - 1));
    const double eps = p->eps;
    switch (kind) {
    case PLOSS_SROWS_LARGE_MARGIN:
        TILE_EACH(const REAL d = xv - m2[i], q = EXP_FLUSH(d - ls2r[i]);
                  gv = wr[i] * (q * fr[i] + h * ((q != 0 ? q * (d - cr[i]) : 0) - u)););
        break;
    case PLOSS_SROWS_TAYLOR_CE:
        if (rows) {
            for (int64_t i = 0; i < T; ++i) {
                REAL *gr = g + i * gi;
                TAYLOR_COLUMN(REAL, scratch, x + i * xi, C, p->order - 1);
#pragma omp simd
                for (int64_t j = 0; j < C; ++j)
                    gr[j] = wr[i] * scratch[j];
            }
        } else {
            for (int64_t j = 0; j < C; ++j) {
                REAL *gc = g + j * gj;
                TAYLOR_COLUMN(REAL, col, x + j * xj, T, p->order - 1);
#pragma omp simd
                for (int64_t i = 0; i < T; ++i)
                    gc[i] = wr[i] * col[i];
            }
        }
        break;
    case PLOSS_SROWS_DUAL_FOCAL:
        TILE_EACH(const double lp = ((double)xv - m[i]) - ls[i], pj = exp(lp); const double den = eps - expm1(lp) * (1 + pj);
                  gv = (REAL)(sm->w[i] * pj * (2 * pj / den - PG[i])););
        break;
    default:
        TILE_EACH(gv = wr[i] * EXP_FLUSH(((xv + br[j]) - m[i]) - lsr[i]););
        break;
    }

    /* the label's entry in double (lp: log p_y, PC: of the prior-weighted softmax); nothing
     * for samples that are not valid */
    double gy[TILE];
    const double *w = sm->w;
    switch (kind) {
    case PLOSS_SROWS_TAYLOR_CE:
#pragma omp simd
        for (int64_t i = 0; i < T; ++i)
            gy[i] = w[i] * fy1[i] * (1.0 / sm->st[0][i] - 1.0 / fy[i]);
        break;
    case PLOSS_SROWS_FOCAL:
#pragma omp simd
        for (int64_t i = 0; i < T; ++i)
            gy[i] = w[i] * G[i] * expm1((xy[i] - m[i]) - ls[i]);
        break;
    case PLOSS_SROWS_DUAL_FOCAL:
#pragma omp simd
        for (int64_t i = 0; i < T; ++i)
            gy[i] = w[i] * exp((xy[i] - m[i]) - ls[i]) * (G[i] - PG[i]);
        break;
    default:
#pragma omp simd
        for (int64_t i = 0; i < T; ++i)
            gy[i] = w[i] * expm1((xy[i] + by[i] - m[i]) - ls[i]); /* p_y − 1 */
        break;
    }
    for (int64_t i = 0; i < T; ++i)
        if (y[i] >= 0)
            g[i * gi + y[i] * gj] = (REAL)gy[i];
        else
            for (int64_t j = 0; j < C; ++j)
                g[i * gi + j * gj] = 0;
}

/* ---- driver ------------------------------------------------------------------------------ */

static ploss_status F(run)(const ploss_cpu_srows *p)
{
    const int64_t M = p->N * p->S, C = p->C;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD && !p->keys;
    const int want_grad = p->pass != PLOSS_PASS_FORWARD && !p->keys;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;
    /* a tile: neighbours along d1⋯dk within one n, or consecutive n when S = 1; computed
     * along the classes when they are contiguous (rows), else along the samples */
    const int spatial = p->S > 1, rows = p->x_sc == 1;
    const int64_t x_si = spatial ? p->x_ss : p->x_sn, g_si = spatial ? p->g_ss : p->g_sn;
    const int direct_x = p->x_dtype == REAL_DTYPE && (rows || x_si == 1);
    const int direct_g = want_grad && p->x_dtype == REAL_DTYPE && (rows ? p->g_sc == 1 : g_si == 1);
    const int64_t W = C <= 2048 ? TILE : rows ? 4 : TILE / 2; /* samples per tile: buffers of W·C */

    /* per thread: x and g of one tile as REAL and a scratch row (sized in doubles); the
     * class values; all taken before the first write */
    ploss_cpu_rows b;
    const int nrows = (int)(((2 * W + 1) * (int64_t)sizeof(REAL) + sizeof(double) - 1) / sizeof(double));
    ploss_status status = ploss_cpu_rows_alloc(&b, p->name, M, C, nrows, CHUNK);
    if (status != PLOSS_OK)
        return status;
    const int pc = p->kind == PLOSS_SROWS_PC_SOFTMAX && !p->keys;
    REAL *br = M > 0 ? calloc((size_t)C, sizeof *br) : NULL; /* PC: b_j, else 0 */
    double *cd = p->w && M > 0 && !p->keys ? malloc((size_t)C * sizeof *cd) : NULL;
    if (M > 0 && (!br || (p->w && !p->keys && !cd))) {
        ploss_cpu_rows_free(&b);
        free(br);
        free(cd);
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "%s: class values of %lld classes", p->name, (long long)C);
    }
    if (cd)
        ploss_cpu_load_f64(cd, p->w, p->w_dtype, 0, p->w_s, C);
    for (int64_t j = 0; pc && cd && j < C; ++j) {
        cd[j] = log(cd[j]);
        br[j] = (REAL)cd[j];
    }
    const F(call) k = {p, br, cd, p->pass == PLOSS_PASS_BACKWARD && p->state != NULL && !p->keys};
    const int64_t nchunks = b.nchunks;

    /* no samples: nothing to compute, and no per-thread buffers (their offsets W·C could
     * overflow for a huge class count) */
    if (nchunks > 0) {
#pragma omp parallel num_threads(b.nthreads) if (M * C > 32768)
        {
            REAL *xb = (REAL *)ploss_cpu_rows_thread(&b, omp_get_thread_num()), *gb = xb + W * C, *scratch = gb + W * C;
#pragma omp for schedule(static)
            for (int64_t chunk = 0; chunk < nchunks; ++chunk) {
                double acc = 0.0;
                const int64_t end = (chunk + 1) * CHUNK < M ? (chunk + 1) * CHUNK : M;
                for (int64_t i = chunk * CHUNK; i < end;) {
                    const int64_t n = i / p->S, s = i % p->S;
                    int64_t T = spatial ? p->S - s : end - i;
                    T = T < W ? T : W;
                    T = T < end - i ? T : end - i;
                    F(samples) sm;
                    int any = 0;
                    for (int64_t u = 0; u < T; ++u) {
                        const int64_t nu = spatial ? n : n + u, su = spatial ? s + u : s;
                        const int64_t y = ploss_load_int(p->t, p->t_dtype, nu * p->t_sn + su * p->t_ss);
                        const int valid = p->kept ? p->kept[i + u] : y != p->ignore_index;
                        sm.y[u] = valid ? (int32_t)y : -1;
                        any |= valid;
                        sm.loss[u] = sm.st[0][u] = sm.st[1][u] = sm.st[2][u] = 0.0;
                        for (int c = 0; k.use_state && c < p->n_state; ++c)
                            sm.st[c][u] = ploss_load(p->state, p->state_dtype, nu * p->st_sn + su * p->st_ss + c * p->st_sk);
                        sm.w[u] = want_grad && p->pass == PLOSS_PASS_BACKWARD && none
                                      ? ploss_load(p->grad_loss, p->gl_dtype, nu * p->gl_sn + su * p->gl_ss)
                                      : p->omega;
                    }
                    /* x and g of the tile: in place, or rows of C (rows) / columns of W in the buffers */
                    const int64_t xo = n * p->x_sn + s * p->x_ss, go = n * p->g_sn + s * p->g_ss;
                    REAL *g = !want_grad ? NULL : direct_g ? (REAL *)p->grad + go : gb;
                    const int64_t gi = g == gb ? (rows ? C : 1) : rows ? g_si : 1;
                    const int64_t gj = g == gb ? (rows ? 1 : W) : rows ? 1 : p->g_sc;
                    if (any) {
                        const REAL *x = direct_x ? (const REAL *)p->x + xo : xb;
                        for (int64_t u = 0; !direct_x && u < (rows ? T : C); ++u)
                            if (rows)
                                LOAD(xb + u * C, p->x, p->x_dtype, xo + u * x_si, 1, C);
                            else
                                LOAD(xb + u * W, p->x, p->x_dtype, xo + u * p->x_sc, x_si, T);
                        F(tile)(&k, rows, T, x, direct_x && rows ? x_si : rows ? C : 1,
                                rows ? 1 : direct_x ? p->x_sc : W, g, gi, gj, scratch, &sm, p->keys ? p->keys + i : NULL);
                    } else if (p->keys) {
                        for (int64_t u = 0; u < T; ++u)
                            p->keys[i + u] = PLOSS_OHEM_IGNORED_KEY;
                    } else if (g) {
                        for (int64_t u = 0; u < T; ++u)
                            for (int64_t j = 0; j < C; ++j)
                                g[u * gi + j * gj] = 0;
                    }
                    for (int64_t u = 0; want_loss && u < T; ++u) {
                        const int64_t nu = spatial ? n : n + u, su = spatial ? s + u : s;
                        if (sm.y[u] < 0)
                            sm.loss[u] = sm.st[0][u] = sm.st[1][u] = sm.st[2][u] = 0.0;
                        acc += sm.loss[u];
                        if (none)
                            ploss_store(p->loss, p->loss_dtype, nu * p->l_sn + su * p->l_ss, sm.loss[u]);
                        for (int c = 0; p->state && c < p->n_state; ++c)
                            ploss_store(p->state, p->state_dtype, nu * p->st_sn + su * p->st_ss + c * p->st_sk, sm.st[c][u]);
                    }
                    for (int64_t u = 0; g == gb && g && u < (rows ? T : C); ++u)
                        if (rows)
                            STORE(p->grad, p->x_dtype, go + u * g_si, p->g_sc, C, gb + u * C);
                        else
                            STORE(p->grad, p->x_dtype, go + u * p->g_sc, g_si, T, gb + u * W);
                    i += T;
                }
                b.partial[chunk] = acc;
            }
        }
    }
    free(br);
    free(cd);
    if (want_loss)
        ploss_cpu_rows_store_loss(&b, p->reduction, p->divisor, p->loss, p->loss_dtype);
    ploss_cpu_rows_free(&b);
    return PLOSS_OK;
}
