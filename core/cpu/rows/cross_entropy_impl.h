/*
 * cross_entropy_impl.h — the cross-entropy kernels for one compute type, included by
 * cross_entropy.c with REAL (float for f32/f16/bf16 logits, double for f64), REAL_DTYPE,
 * EXP and LOAD/STORE (the row converters of chunks.h) defined, and F(name) naming its
 * functions.  Exponentials are computed in REAL; row sums, the loss and the reductions in
 * double.
 *
 * Per valid sample, with m = max_j x_j, e_j = e^(x_j − m), s = Σ_j e_j and c_j its
 * coefficients (rows.h):
 *   ℓ = Σ_j c_j·(log s + m − x_j) = csum·log s + Σ_j c_j·(m − x_j)   (every term ≥ 0)
 *   ∂ℓ/∂x_j = csum·e_j/s − c_j; the label's own entry in double (no cancellation near p = 1).
 * Two layouts: a row kernel for contiguous classes (vectorised along the classes) and a
 * tile kernel for spatial inputs whose samples are contiguous (vectorised along TILE
 * neighbouring samples).
 */

/* what is fixed for the whole call */
typedef struct {
    const ploss_ce_problem *p;
    const REAL *w;   /* class weights as REAL, NULL = 1 */
    double wsum;     /* Σ_j w_j (C without weights) */
    int want_loss;
    int saved;       /* backward reads the saved lse */
} F(call);

/* ---- row kernel: x, t, g contiguous rows of C ------------------------------------------ */
/* g may be x itself (in place): x is read only before g is written. */

/* Loss and lse − m of one valid row (lse = m + ls), Σ_j c_j, m and x_y; e^(x_j − m) goes to
 * g when the gradient is wanted (row_grad then scales it by e^−(lse − m): lse − m as summed,
 * not from lse, which keeps it only to m's spacing). */
static double F(row_forward)(const F(call) *k, const REAL *x, const REAL *restrict t, int64_t y, REAL *g,
                              double saved_lse, double *ls_out, double *csum_out, REAL *m_out, double *xy_out)
{
    const ploss_ce_problem *p = k->p;
    const int64_t C = p->C;
    const REAL *restrict w = k->w;
    REAL m = -INFINITY; /* NaN and infinite logits make s, hence lse, NaN (as PyTorch) */
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < C; ++j)
        m = x[j] > m ? x[j] : m;
    const double md = m;
    double csum, q = 0.0; /* Σ c_j, Σ c_j·(m − x_j) */
    if (p->target_kind == PLOSS_TARGET_PROB) {
        const double a = p->a, b = p->b;
        csum = 0.0;
#pragma omp simd reduction(+ : csum, q)
        for (int64_t j = 0; j < C; ++j) {
            const double c = (w ? (double)w[j] : 1.0) * (a * t[j] + b);
            csum += c;
            q += c != 0.0 ? c * (md - x[j]) : 0.0; /* no 0·inf for masked logits */
        }
    } else {
        /* c_j = b·w_j, the label's c_y = (a + b)·w_y taken whole: a term whose coefficient
         * is 0 adds nothing even for a −inf logit (label smoothing 1, the label masked) */
        const double wy = w ? (double)w[y] : 1.0, cy = (p->a + p->b) * wy;
        csum = p->b * k->wsum + p->a * wy;
        if (k->want_loss && p->b != 0.0) {
            double r = 0.0; /* Σ_{j≠y} w_j·(m − x_j) */
            for (int64_t lo = 0, hi = y; lo < C; lo = hi + 1, hi = C) {
                if (w) {
#pragma omp simd reduction(+ : r)
                    for (int64_t j = lo; j < hi; ++j)
                        r += w[j] != 0 ? (double)w[j] * (md - x[j]) : 0.0;
                } else {
#pragma omp simd reduction(+ : r)
                    for (int64_t j = lo; j < hi; ++j)
                        r += md - x[j];
                }
            }
            q = p->b * r;
        }
        if (cy != 0.0)
            q += cy * (md - x[y]);
        *xy_out = x[y];
    }
    double s = 0.0;
    if (g) {
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < C; ++j) {
            const REAL e = EXP_FLUSH(x[j] - m);
            g[j] = e;
            s += e;
        }
    } else if (!k->saved) {
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < C; ++j)
            s += EXP_FLUSH(x[j] - m);
    }
    const double ls = k->saved ? saved_lse - md : log(s); /* lse − m */
    *ls_out = ls;
    *csum_out = csum;
    *m_out = m;
    return csum * ls + q;
}

/* ∂ℓ/∂x_y = csum·p_y − c_y (c_y = (a + b)·w_y) with d = log p_y: where p_y > 1/2 as
 * csum·(p_y − 1) + b·(Σw − w_y), which does not cancel as p_y nears 1; below, as it reads
 * (exactly −c_y where p_y is 0). */
static double F(label_grad)(const F(call) *k, double d, double csum, double wy)
{
    const ploss_ce_problem *p = k->p;
    if (d > -0.6931471805599453) /* log 1/2 */
        return csum * expm1(d) + p->b * (k->wsum - wy);
    return csum * exp(d) - (p->b * wy + p->a * wy);
}

/* g = w_i·∂ℓ/∂x of a valid row whose g holds e^(x_j − m) (row_forward); ls = lse − m. */
static void F(row_grad)(const F(call) *k, const REAL *restrict t, int64_t y, double xy, REAL *restrict g, double w_i,
                        double ls, double csum, REAL m)
{
    const ploss_ce_problem *p = k->p;
    const int64_t C = p->C;
    const REAL *restrict w = k->w;
    if (p->target_kind == PLOSS_TARGET_PROB) {
        /* in double, each c_j formed as in csum: a row whose softmax is exact (C = 1) gets
         * exactly csum·1 − c = 0 */
        const double a = p->a, b = p->b, r = csum * exp(-ls); /* csum/s */
#pragma omp simd
        for (int64_t j = 0; j < C; ++j) {
            const double c = (w ? (double)w[j] : 1.0) * (a * t[j] + b);
            g[j] = (REAL)(w_i * ((double)g[j] * r - c));
        }
        return;
    }
    const REAL scale = (REAL)(w_i * csum * exp(-ls)); /* w_i·csum/s */
    const REAL wb = (REAL)(w_i * p->b);
    if (w) {
#pragma omp simd
        for (int64_t j = 0; j < C; ++j)
            g[j] = g[j] * scale - wb * w[j];
    } else {
#pragma omp simd
        for (int64_t j = 0; j < C; ++j)
            g[j] = g[j] * scale - wb;
    }
    const double wy = w ? (double)w[y] : 1.0;
    g[y] = (REAL)(w_i * F(label_grad)(k, (xy - (double)m) - ls, csum, wy));
}

/* ---- tile kernel: T samples with unit sample stride; x, t, g rows xs, ts, gs apart ------- */
/* g may be x itself (in place): each x element is read before its g element is written. */

static void F(tile)(const F(call) *k, int64_t T, const REAL *x, int64_t xs, const REAL *restrict t, int64_t ts,
                    const int64_t *y, REAL *g, int64_t gs, const double *saved_lse, const double *w_i, double *loss,
                    double *lse)
{
    const ploss_ce_problem *p = k->p;
    const int64_t C = p->C;
    const REAL *restrict w = k->w;
    const int prob = p->target_kind == PLOSS_TARGET_PROB;
    REAL m[TILE];
    double s[TILE], q[TILE], csum[TILE], xy[TILE], ls[TILE]; /* ls: lse − m */
    for (int64_t i = 0; i < T; ++i) {
        m[i] = -INFINITY;
        s[i] = q[i] = 0.0;
        csum[i] = prob ? 0.0 : p->b * k->wsum;
    }
    for (int64_t j = 0; j < C; ++j) {
        const REAL *xj = x + j * xs;
#pragma omp simd
        for (int64_t i = 0; i < T; ++i)
            m[i] = xj[i] > m[i] ? xj[i] : m[i];
    }
    for (int64_t i = 0; !prob && i < T; ++i) { /* the label's term, c_y = (a + b)·w_y whole */
        if (y[i] < 0)
            continue;
        const double wy = w ? (double)w[y[i]] : 1.0, cy = (p->a + p->b) * wy;
        xy[i] = x[y[i] * xs + i];
        csum[i] += p->a * wy;
        if (cy != 0.0)
            q[i] += cy * ((double)m[i] - xy[i]);
    }
    for (int64_t j = 0; j < C; ++j) {
        const REAL *xj = x + j * xs;
        const double wj = w ? (double)w[j] : 1.0;
        if (prob) {
            const REAL *restrict tj = t + j * ts;
#pragma omp simd
            for (int64_t i = 0; i < T; ++i) {
                const double c = wj * (p->a * tj[i] + p->b);
                csum[i] += c;
                q[i] += c != 0.0 ? c * ((double)m[i] - xj[i]) : 0.0;
            }
        } else if (k->want_loss && p->b != 0.0 && wj != 0.0) {
            const double bw = p->b * wj;
#pragma omp simd
            for (int64_t i = 0; i < T; ++i)
                q[i] += j != y[i] ? bw * ((double)m[i] - xj[i]) : 0.0; /* the label's above */
        }
        if (g) {
            REAL *gj = g + j * gs;
#pragma omp simd
            for (int64_t i = 0; i < T; ++i) {
                const REAL e = EXP_FLUSH(xj[i] - m[i]);
                gj[i] = e;
                s[i] += e;
            }
        } else {
#pragma omp simd
            for (int64_t i = 0; i < T; ++i)
                s[i] += EXP_FLUSH(xj[i] - m[i]);
        }
    }
    for (int64_t i = 0; i < T; ++i) {
        if (!prob && y[i] < 0) { /* ignored */
            loss[i] = lse[i] = ls[i] = 0.0;
            continue;
        }
        ls[i] = k->saved ? saved_lse[i] - m[i] : log(s[i]);
        lse[i] = m[i] + ls[i];
        loss[i] = csum[i] * ls[i] + q[i];
    }
    if (!g)
        return;
    REAL sc[TILE], wb[TILE];
    double rs[TILE]; /* csum/s */
    for (int64_t i = 0; i < T; ++i) {
        rs[i] = csum[i] * exp(-ls[i]);
        sc[i] = (REAL)(w_i[i] * rs[i]);
        wb[i] = (REAL)(w_i[i] * p->b);
    }
    for (int64_t j = 0; j < C; ++j) {
        REAL *restrict gj = g + j * gs;
        const REAL wj = w ? w[j] : (REAL)1;
        if (prob) { /* in double, as row_grad */
            const REAL *restrict tj = t + j * ts;
            const double a = p->a, b = p->b;
#pragma omp simd
            for (int64_t i = 0; i < T; ++i)
                gj[i] = (REAL)(w_i[i] * ((double)gj[i] * rs[i] - (double)wj * (a * tj[i] + b)));
        } else {
#pragma omp simd
            for (int64_t i = 0; i < T; ++i)
                gj[i] = gj[i] * sc[i] - wb[i] * wj;
        }
    }
    for (int64_t i = 0; !prob && i < T; ++i)
        if (y[i] >= 0) {
            const double wy = w ? (double)w[y[i]] : 1.0;
            g[y[i] * gs + i] = (REAL)(w_i[i] * F(label_grad)(k, (xy[i] - (double)m[i]) - ls[i], csum[i], wy));
        } else { /* ignored: zero, whatever its logits */
            for (int64_t j = 0; j < C; ++j)
                g[j * gs + i] = 0;
        }
}

/* ---- driver ------------------------------------------------------------------------------ */

/* Rows (tiled: classes) of `n` samples (tiled; else one) from offset o as REAL, with *ld the
 * elements between rows: the data itself when it is REAL with a unit stride along the
 * vectorised axis, else converted into buf (rows `TILE` apart). */
static const REAL *F(view_in)(const void *base, ploss_dtype dt, int64_t o, int64_t sc, int64_t ss, int64_t C,
                              int64_t n, int tiled, REAL *buf, int64_t *ld)
{
    if (dt == REAL_DTYPE && (tiled ? ss == 1 : sc == 1)) {
        *ld = sc;
        return (const REAL *)base + o;
    }
    *ld = TILE;
    if (!tiled)
        LOAD(buf, base, dt, o, sc, C);
    for (int64_t j = 0; tiled && j < C; ++j)
        LOAD(buf + j * TILE, base, dt, o + j * sc, ss, n);
    return buf;
}

static ploss_status F(run)(const ploss_ce_problem *p, double divisor, double omega)
{
    const int64_t M = p->N * p->S, C = p->C;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD;
    const int want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;
    const int index = p->target_kind == PLOSS_TARGET_INDEX;
    /* tiles when the samples, not the classes, are contiguous (N×C×d1⋯dk) */
    const int tiled = p->S > 1 && p->x_sc != 1 && p->x_ss == 1 && C <= 1024;
    const int direct_g = want_grad && p->x_dtype == REAL_DTYPE && (tiled ? p->g_ss == 1 : p->g_sc == 1);

    /* per thread: x, t and g of one row or tile as REAL (sized in doubles), and the weights
     * as REAL, all taken before the first write */
    ploss_cpu_rows b;
    ploss_status status = ploss_cpu_rows_alloc(&b, "cross_entropy", M, C, (tiled ? TILE : 1) * 3, CHUNK);
    if (status != PLOSS_OK)
        return status;
    REAL *wr = NULL;
    double wsum = (double)C;
    if (p->w && M > 0) {
        wr = malloc((size_t)C * sizeof *wr);
        if (!wr) {
            ploss_cpu_rows_free(&b);
            return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "cross_entropy: weights of %lld classes", (long long)C);
        }
        LOAD(wr, p->w, p->w_dtype, 0, p->w_s, C);
        wsum = 0.0;
        for (int64_t j = 0; j < C; ++j)
            wsum += wr[j];
    }
    const F(call) k = {p, wr, wsum, want_loss, p->pass == PLOSS_PASS_BACKWARD && p->lse != NULL};
    const int64_t nchunks = b.nchunks, stride = tiled ? TILE : 1;

    /* no samples: nothing to compute, and no per-thread buffers (their offsets W·C could
     * overflow for a huge class count) */
    if (nchunks > 0) {
#pragma omp parallel num_threads(b.nthreads) if (M * C > 32768)
        {
            REAL *xb = (REAL *)ploss_cpu_rows_thread(&b, omp_get_thread_num());
            REAL *tb = xb + stride * C, *gb = tb + stride * C;
#pragma omp for schedule(static)
            for (int64_t chunk = 0; chunk < nchunks; ++chunk) {
                double acc = 0.0;
                const int64_t end = (chunk + 1) * CHUNK < M ? (chunk + 1) * CHUNK : M;
                for (int64_t i = chunk * CHUNK; i < end;) {
                    const int64_t n = i / p->S, s = i % p->S;
                    /* T samples of one n: a tile, or one row */
                    int64_t T = tiled ? p->S - s : 1;
                    T = T < TILE ? T : TILE;
                    T = T < end - i ? T : end - i;
                    int64_t y[TILE];
                    double saved[TILE], w_i[TILE], loss[TILE], lse[TILE];
                    int any = 0;
                    for (int64_t u = 0; u < T; ++u) {
                        y[u] = 0;
                        if (index) {
                            y[u] = ploss_load_int(p->t, p->t_dtype, n * p->t_sn + (s + u) * p->t_ss);
                            if (y[u] == p->ignore_index || y[u] < 0 || y[u] >= C)
                                y[u] = -1;
                        }
                        any |= y[u] >= 0;
                        loss[u] = lse[u] = 0.0;
                        saved[u] = k.saved ? ploss_load(p->lse, p->lse_dtype, n * p->lse_sn + (s + u) * p->lse_ss) : 0.0;
                        w_i[u] = want_grad && p->pass == PLOSS_PASS_BACKWARD && none
                                     ? ploss_load(p->grad_loss, p->gl_dtype, n * p->gl_sn + (s + u) * p->gl_ss)
                                     : omega;
                    }
                    const int64_t go = n * p->g_sn + s * p->g_ss;
                    REAL *g = !want_grad ? NULL : direct_g ? (REAL *)p->grad + go : gb;
                    const int64_t gs = g == gb ? TILE : p->g_sc;
                    if (any) {
                        int64_t xs, ts = 0;
                        const REAL *x = F(view_in)(p->x, p->x_dtype, n * p->x_sn + s * p->x_ss, p->x_sc, p->x_ss, C,
                                                   T, tiled, xb, &xs);
                        const REAL *t = index ? NULL
                                              : F(view_in)(p->t, p->t_dtype, n * p->t_sn + s * p->t_ss, p->t_sc,
                                                           p->t_ss, C, T, tiled, tb, &ts);
                        if (tiled) {
                            F(tile)(&k, T, x, xs, t, ts, y, g, gs, saved, w_i, loss, lse);
                        } else {
                            REAL m;
                            double csum, ls, xy = 0.0;
                            loss[0] = F(row_forward)(&k, x, t, y[0], g, saved[0], &ls, &csum, &m, &xy);
                            lse[0] = (double)m + ls;
                            if (g)
                                F(row_grad)(&k, t, y[0], xy, g, w_i[0], ls, csum, m);
                        }
                    } else if (g) { /* every sample ignored */
                        for (int64_t j = 0; j < C; ++j)
                            for (int64_t u = 0; u < T; ++u)
                                g[tiled ? j * gs + u : j] = 0;
                    }
                    for (int64_t u = 0; want_loss && u < T; ++u) {
                        acc += loss[u];
                        if (none)
                            ploss_store(p->loss, p->loss_dtype, n * p->l_sn + (s + u) * p->l_ss, loss[u]);
                        if (p->lse)
                            ploss_store(p->lse, p->lse_dtype, n * p->lse_sn + (s + u) * p->lse_ss, lse[u]);
                    }
                    if (g == gb && g) {
                        if (tiled)
                            for (int64_t j = 0; j < C; ++j)
                                STORE(p->grad, p->x_dtype, go + j * p->g_sc, p->g_ss, T, gb + j * TILE);
                        else
                            STORE(p->grad, p->x_dtype, go, p->g_sc, C, gb);
                    }
                    i += T;
                }
                b.partial[chunk] = acc;
            }
        }
    }
    free(wr);
    if (want_loss)
        ploss_cpu_rows_store_loss(&b, p->reduction, divisor, p->loss, p->loss_dtype);
    ploss_cpu_rows_free(&b);
    return PLOSS_OK;
}
