/*
 * sigmoid_impl.h — the elementwise kernels for one compute type, included by sigmoid.c
 * with REAL, REAL_DTYPE, EXP, LOG, LOG1P, POW, REAL_MAX, LOAD/STORE (chunks.h row
 * converters) and F(name) defined.  Elements go through blocks of BLOCK: a tensor that is
 * REAL and dense is used in place, any other is gathered into a REAL buffer by the walker
 * (and the outputs scattered back), then one vectorised loop per kind and pass computes
 * the block; the loss is summed in double.
 */

/* Loss and ∂loss/∂x of one element of the pointwise criteria (formulas in elementwise.h);
 * `kind` is a constant at every call.  w is the weight (1 without one) of MSE, L1, HUBER
 * and BCE_PROB and TARGET_WEIGHTED_MSE's target scale, beta the threshold of SMOOTH_L1
 * (β), HUBER (δ) and the margin of HINGE_EMBEDDING and HINGE.  The branches at the
 * thresholds and the signs follow PyTorch's kernels: sign(0) = 0, the quadratic part strictly
 * inside |d| < β. */
_Static_assert(PLOSS_EW_KIND_COUNT == 18, "a new kind of core/engines/elementwise.h: add its maths to "
                                         "F(pointwise) or F(element) and its case to F(block)");
static inline __attribute__((always_inline)) void F(pointwise)(int kind, REAL x, REAL y, REAL w, REAL beta,
                                                                REAL *loss, REAL *dx)
{
    const REAL d = x - y, ad = fabs(d);
    const REAL sgn = d > 0 ? 1 : d < 0 ? -1 : 0;
    if (kind == PLOSS_EW_MSE) {
        *loss = w * (d * d);
        *dx = w * (2 * d);
    } else if (kind == PLOSS_EW_TARGET_WEIGHTED_MSE) {
        const REAL dw = x - w * y;
        *loss = dw * dw;
        *dx = 2 * dw;
    } else if (kind == PLOSS_EW_L1) {
        *loss = w * ad;
        *dx = w * sgn;
    } else if (kind == PLOSS_EW_SMOOTH_L1) {
        /* never inside for β = 0: the L1 loss, no 0/0; a NaN d takes the quadratic part's
         * gradient (NaN) where β > 0, as PyTorch's smooth_l1_backward */
        const int in = ad < beta || (d != d && beta > 0);
        *loss = in ? (REAL)0.5 * d * d / beta : ad - (REAL)0.5 * beta;
        *dx = in ? d / beta : sgn;
    } else if (kind == PLOSS_EW_HUBER) {
        const int in = ad < beta || d != d; /* a NaN d: a NaN gradient, as huber_backward */
        *loss = w * (in ? (REAL)0.5 * d * d : beta * (ad - (REAL)0.5 * beta));
        *dx = w * (in ? d : beta * sgn);
    } else if (kind == PLOSS_EW_BCE_PROB) {
        /* logs clamped at −100 (NaN stays NaN); the gradient's denominator at 1e-12 */
        const REAL lx = LOG(x), l1x = LOG1P(-x);
        const REAL cx = lx < -100 ? -100 : lx, c1x = l1x < -100 ? -100 : l1x;
        const REAL den = (1 - x) * x;
        *loss = w * ((y - 1) * c1x - y * cx);
        *dx = w * (x - y) / (den < (REAL)1e-12 ? (REAL)1e-12 : den);
    } else if (kind == PLOSS_EW_SOFT_MARGIN) {
        const REAL z = -y * x, e = EXP_FLUSH(-fabs(z)), r = 1 / (1 + e);
        *loss = (z > 0 ? z : 0) + LOG1P(e);   /* softplus(z) */
        *dx = -y * (z >= 0 ? r : e * r);      /* −y·σ(z)     */
    } else if (kind == PLOSS_EW_KL_DIV) {
        *loss = (y == 0 ? 0 : y * LOG(y)) - y * x; /* xlogy(y, y) − y·x */
        *dx = -y;
    } else if (kind == PLOSS_EW_HINGE_EMBEDDING) {
        /* PyTorch: where(y ≠ 1, clamp_min(m − x, 0)) + where(y ≠ −1, x); the clamp keeps a
         * NaN (h < 0 is false for it); its gradient passes where m − x >= 0 */
        const REAL h = beta - x;
        *loss = (y != 1 ? (h < 0 ? 0 : h) : 0) + (y != -1 ? x : 0);
        *dx = (y != 1 ? (h >= 0 ? -1 : 0) : 0) + (y != -1 ? 1 : 0);
    } else if (kind == PLOSS_EW_HINGE) {
        /* Torch7's MarginCriterion: −y where y·x < m (0 at the kink and for a NaN y·x); the
         * loss keeps a NaN (z < 0 is false for it) */
        const REAL z = beta - y * x;
        *loss = z < 0 ? 0 : z;
        *dx = y * x < beta ? -y : 0;
    } else if (kind == PLOSS_EW_KL_DIV_LOG_TARGET) {
        const REAL e = EXP_FLUSH(y); /* a log-target far below 0: e = 0 (see vmath.h) */
        *loss = e * (y - x);
        *dx = -e;
    } else if (kind >= PLOSS_EW_POISSON_NLL_LOG && kind <= PLOSS_EW_POISSON_NLL_FULL) {
        /* PyTorch's poisson_nll_loss (ε = beta); with full, Stirling's log y! where y > 1 */
        if (kind == PLOSS_EW_POISSON_NLL_LOG || kind == PLOSS_EW_POISSON_NLL_LOG_FULL) {
            const REAL e = EXP_FLUSH(x);
            *loss = e - y * x;
            *dx = e - y;
        } else {
            const REAL xe = x + beta;
            *loss = x - y * LOG(xe);
            *dx = 1 - y / xe;
        }
        if (kind == PLOSS_EW_POISSON_NLL_LOG_FULL || kind == PLOSS_EW_POISSON_NLL_FULL) {
            const REAL ys = y > 1 ? y : 2; /* no log of y <= 1 in the lanes that drop the term */
            const REAL st = ys * LOG(ys) - ys + (REAL)0.5 * LOG((REAL)6.283185307179586 * ys);
            *loss += y > 1 ? st : 0;
        }
    } else { /* no such kind (ploss_run_loss refuses its loss first) */
        *loss = *dx = (REAL)NAN;
    }
}

/* Loss and ∂loss/∂x of one element (before the upstream gradient); `kind`, the pass and
 * g2 (γ = 2: squares instead of pow) are constants at every call, so each combination
 * compiles to its own loop without the unused maths (and without branches around calls,
 * which would keep the loop scalar). */
static inline __attribute__((always_inline)) void F(element)(int kind, int want_loss, int want_grad, int g2, REAL x, REAL y,
                                                              REAL w, REAL pw, REAL a1, REAL a0, REAL gamma,
                                                              REAL beta, REAL *loss, REAL *dx)
{
    if (PLOSS_EW_IS_POINTWISE(kind)) {
        F(pointwise)(kind, x, y, w, beta, loss, dx);
        return;
    }
    const REAL e = EXP_FLUSH(-fabs(x)), r = 1 / (1 + e);
    const REAL lg = want_loss || kind != PLOSS_SIGMOID_BCE ? LOG1P(e) : 0; /* BCE's gradient needs no log */
    const REAL sp_pos = (x > 0 ? x : 0) + lg;          /* softplus(x)  = −log(1 − σ(x)) */
    const REAL sp_neg = (x < 0 ? -x : 0) + lg;         /* softplus(−x) = −log σ(x)       */
    const REAL sig_pos = x >= 0 ? r : e * r;           /* σ(x)  */
    const REAL sig_neg = x >= 0 ? e * r : r;           /* σ(−x) */
    /* terms with a zero coefficient are skipped: no 0·inf for infinite logits */
    const REAL pos = y != 0 ? y * sp_neg : 0, neg = y != 1 ? (1 - y) * sp_pos : 0;
    /* σ(x) − y, without cancellation near p = 1 */
    const REAL p_minus_y = x >= 0 ? (1 - y) - sig_neg : sig_pos - y;
    if (kind == PLOSS_SIGMOID_BCE) {
        *loss = w * (pw * pos + neg);
        if (want_grad)
            *dx = w * ((y != 1 ? (1 - y) * sig_pos : 0) - (y != 0 ? pw * y * sig_neg : 0));
    } else if (kind == PLOSS_SIGMOID_FOCAL_TORCHVISION) {
        const REAL A = a1 * y + a0 * (1 - y);
        const REAL q = y * sig_neg + (1 - y) * sig_pos; /* 1 − p_t */
        const REAL ce = pos + neg;
        const REAL qg = g2 ? q * q : POW(q, gamma); /* 0^0 = 1 */
        *loss = A * qg * ce;
        if (want_grad) {
            /* ce·σ(x)σ(−x) first: where σ(x)σ(−x) is 0 (|x| past ~87 in float, where e^−|x|
             * is flushed, or ∞) the term is 0, not γ·ce overflowing to ∞ times 0 */
            const REAL ss = sig_pos * sig_neg;
            const REAL extra = ss != 0 ? gamma * (1 - 2 * y) * qg * (ce * (ss / q)) : 0;
            *dx = A * (qg * p_minus_y + (gamma != 0 && q != 0 ? extra : 0)); /* q < 0: a target outside [0, 1] */
        }
    } else {
        /* 0 < γ < 1: |p − y|^(γ−1) is ill-conditioned at the kink y ≈ p, where σ(x)'s one
         * rounding in float is a large relative error of p − y (1e-3 of the gradient at
         * |p − y| ≈ 3e-5); there p − y is formed in double (x and y are exact in it), as the
         * CUDA backend does. */
        REAL pmy = p_minus_y;
        if (sizeof(REAL) < sizeof(double) && gamma > 0 && gamma < 1) {
            const double xd = (double)x, ed = exp(-fabs(xd)), invd = 1.0 / (1.0 + ed);
            const REAL pd = (REAL)((xd >= 0.0 ? invd : ed * invd) - (double)y);
            pmy = fabs(pmy) < (REAL)0.015625 ? pd : pmy;
        }
        const REAL ad = fabs(pmy);
        const REAL c = g2 ? ad * ad : POW(ad, gamma);
        const REAL ev = (y != 0 ? a1 * y * sp_neg : 0) + (y != 1 ? a0 * (1 - y) * sp_pos : 0);
        *loss = c * ev;
        if (want_grad) {
            /* dc/dx = γ·|σ − y|^(γ−1)·sign(σ − y)·σ(1 − σ); subgradient 0 at the kink y = p */
            const REAL de = (y != 1 ? a0 * (1 - y) * sig_pos : 0) - (y != 0 ? a1 * y * sig_neg : 0);
            const REAL pm = g2 ? ad : POW(ad, gamma - 1);
            const REAL m = pm < REAL_MAX ? pm : REAL_MAX;
            const REAL ss = sig_pos * sig_neg; /* 0: the term is 0 (ev may be ∞) */
            const REAL extra = ss != 0 ? gamma * m * (pmy > 0 ? 1 : -1) * ss * ev : 0;
            *dx = c * de + (gamma != 0 && ad > 0 ? extra : 0);
        }
    }
}

/* n elements of tensor `t` from the walker's position (runs along the innermost dim). */
static void F(gather)(REAL *buf, const void *base, ploss_dtype dt, walker w, int t, int64_t n)
{
    const int last = w.ndim - 1;
    for (int64_t k = 0; k < n;) {
        int64_t run = w.shape[last] - w.idx[last];
        run = run < n - k ? run : n - k;
        LOAD(buf + k, base, dt, w.off[t], w.st[t][last], run);
        walker_skip(&w, run);
        k += run;
    }
}

static void F(scatter)(void *base, ploss_dtype dt, walker w, int t, int64_t n, const REAL *buf)
{
    const int last = w.ndim - 1;
    for (int64_t k = 0; k < n;) {
        int64_t run = w.shape[last] - w.idx[last];
        run = run < n - k ? run : n - k;
        STORE(base, dt, w.off[t], w.st[t][last], run, buf + k);
        walker_skip(&w, run);
        k += run;
    }
}

/* One vectorised loop per kind and pass: loss into lb (summed into acc), gradient into gb. */
#define SIGMOID_LOOP(K, WL, WG, G2)                                                                \
    _Pragma("omp simd reduction(+ : acc)") for (int64_t i = 0; i < n; ++i)                    \
    {                                                                                           \
        REAL l = 0, d = 0;                                                                      \
        F(element)(K, WL, WG, G2, x[i], y[i], w[i], pw[i], a1, a0, gamma, beta, &l, &d);            \
        if (WL) {                                                                               \
            lb[i] = l;                                                                          \
            acc += l;                                                                           \
        }                                                                                       \
        if (WG)                                                                                 \
            gb[i] = PLOSS_EW_UPSTREAM(K, om[i], d, x[i], y[i], beta);                           \
    }
#define SIGMOID_PASSES_G(K, G2)            \
    if (!want_grad) {                      \
        SIGMOID_LOOP(K, 1, 0, G2)          \
    } else if (!want_loss) {               \
        SIGMOID_LOOP(K, 0, 1, G2)          \
    } else {                               \
        SIGMOID_LOOP(K, 1, 1, G2)          \
    }
#define SIGMOID_PASSES(K)                  \
    if (K != PLOSS_SIGMOID_BCE && gamma == 2) { \
        SIGMOID_PASSES_G(K, 1)             \
    } else {                               \
        SIGMOID_PASSES_G(K, 0)             \
    }

static double F(block)(const ploss_sigmoid_problem *p, int64_t n, const REAL *restrict x, const REAL *restrict y,
                       const REAL *restrict w, const REAL *restrict pw, const REAL *restrict om, REAL *restrict lb,
                       REAL *restrict gb)
{
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const REAL a1 = (REAL)p->a1, a0 = (REAL)p->a0, gamma = (REAL)p->gamma, beta = (REAL)p->beta;
    double acc = 0.0;
    switch (p->kind) {
    case PLOSS_SIGMOID_BCE: SIGMOID_PASSES(PLOSS_SIGMOID_BCE) break;
    case PLOSS_SIGMOID_FOCAL_TORCHVISION: SIGMOID_PASSES(PLOSS_SIGMOID_FOCAL_TORCHVISION) break;
    case PLOSS_SIGMOID_FOCAL_REFERENCE: SIGMOID_PASSES(PLOSS_SIGMOID_FOCAL_REFERENCE) break;
    case PLOSS_EW_MSE: SIGMOID_PASSES_G(PLOSS_EW_MSE, 0) break;
    case PLOSS_EW_L1: SIGMOID_PASSES_G(PLOSS_EW_L1, 0) break;
    case PLOSS_EW_SMOOTH_L1: SIGMOID_PASSES_G(PLOSS_EW_SMOOTH_L1, 0) break;
    case PLOSS_EW_HUBER: SIGMOID_PASSES_G(PLOSS_EW_HUBER, 0) break;
    case PLOSS_EW_BCE_PROB: SIGMOID_PASSES_G(PLOSS_EW_BCE_PROB, 0) break;
    case PLOSS_EW_SOFT_MARGIN: SIGMOID_PASSES_G(PLOSS_EW_SOFT_MARGIN, 0) break;
    case PLOSS_EW_KL_DIV: SIGMOID_PASSES_G(PLOSS_EW_KL_DIV, 0) break;
    case PLOSS_EW_HINGE_EMBEDDING: SIGMOID_PASSES_G(PLOSS_EW_HINGE_EMBEDDING, 0) break;
    case PLOSS_EW_KL_DIV_LOG_TARGET: SIGMOID_PASSES_G(PLOSS_EW_KL_DIV_LOG_TARGET, 0) break;
    case PLOSS_EW_POISSON_NLL_LOG: SIGMOID_PASSES_G(PLOSS_EW_POISSON_NLL_LOG, 0) break;
    case PLOSS_EW_POISSON_NLL: SIGMOID_PASSES_G(PLOSS_EW_POISSON_NLL, 0) break;
    case PLOSS_EW_POISSON_NLL_LOG_FULL: SIGMOID_PASSES_G(PLOSS_EW_POISSON_NLL_LOG_FULL, 0) break;
    case PLOSS_EW_POISSON_NLL_FULL: SIGMOID_PASSES_G(PLOSS_EW_POISSON_NLL_FULL, 0) break;
    case PLOSS_EW_HINGE: SIGMOID_PASSES_G(PLOSS_EW_HINGE, 0) break;
    case PLOSS_EW_TARGET_WEIGHTED_MSE: SIGMOID_PASSES_G(PLOSS_EW_TARGET_WEIGHTED_MSE, 0) break;
    default: return NAN; /* no such kind (ploss_run_loss refuses its loss first) */
    }
    return acc;
}
#undef SIGMOID_PASSES
#undef SIGMOID_PASSES_G
#undef SIGMOID_LOOP

/* Σ w over the M elements (the weight broadcast over them, as the loss reads it: converted
 * to REAL), summed in double per chunk and the chunks in order. */
static double F(weight_sum)(const ploss_sigmoid_problem *p, ploss_cpu_rows *b)
{
    const int64_t M = p->numel;
#pragma omp parallel
    {
        REAL wb[BLOCK];
#pragma omp for schedule(static)
        for (int64_t chunk = 0; chunk < b->nchunks; ++chunk) {
            const int64_t cbegin = chunk * CHUNK, cend = cbegin + CHUNK < M ? cbegin + CHUNK : M;
            walker it;
            walker_start(&it, p, cbegin);
            double acc = 0.0;
            for (int64_t k = cbegin; k < cend; k += BLOCK) {
                const int64_t n = cend - k < BLOCK ? cend - k : BLOCK;
                F(gather)(wb, p->w, p->w_dtype, it, TW, n);
                for (int64_t i = 0; i < n; ++i)
                    acc += (double)wb[i];
                walker_skip(&it, n);
            }
            b->partial[chunk] = acc;
        }
    }
    double s = 0.0;
    for (int64_t chunk = 0; chunk < b->nchunks; ++chunk)
        s += b->partial[chunk];
    return s;
}

static void F(run)(const ploss_sigmoid_problem *p, ploss_cpu_rows *b, double omega)
{
    const int64_t M = p->numel;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;
    const int per_elem_gl = p->pass == PLOSS_PASS_BACKWARD && none;
    const int64_t nchunks = b->nchunks;
    /* in place: REAL and one dense axis */
#define DENSE(dt, st) ((dt) == REAL_DTYPE && p->ndim == 1 && (st)[0] == 1)
    const int dx = DENSE(p->x_dtype, p->x_st), dt = DENSE(p->t_dtype, p->t_st);
    const int dl = want_loss && none && DENSE(p->loss_dtype, p->l_st);
    const int dg = want_grad && DENSE(p->x_dtype, p->g_st) && p->grad != p->x; /* in place: via the buffer */
#undef DENSE

#pragma omp parallel
    {
        REAL xb[BLOCK], yb[BLOCK], wb[BLOCK], pwb[BLOCK], omb[BLOCK], lbuf[BLOCK], gbuf[BLOCK];
        for (int64_t i = 0; i < BLOCK; ++i)
            wb[i] = pwb[i] = 1, omb[i] = (REAL)omega;
#pragma omp for schedule(static)
        for (int64_t chunk = 0; chunk < nchunks; ++chunk) {
            const int64_t cbegin = chunk * CHUNK, cend = cbegin + CHUNK < M ? cbegin + CHUNK : M;
            walker it;
            walker_start(&it, p, cbegin);
            double acc = 0.0;
            for (int64_t k = cbegin; k < cend; k += BLOCK) {
                const int64_t n = cend - k < BLOCK ? cend - k : BLOCK;
                const REAL *x = dx ? (const REAL *)p->x + k : xb, *y = dt ? (const REAL *)p->t + k : yb;
                REAL *lb = dl ? (REAL *)p->loss + k : lbuf, *gb = dg ? (REAL *)p->grad + k : gbuf;
                if (!dx)
                    F(gather)(xb, p->x, p->x_dtype, it, TX, n);
                if (!dt)
                    F(gather)(yb, p->t, p->t_dtype, it, TT, n);
                if (p->w)
                    F(gather)(wb, p->w, p->w_dtype, it, TW, n);
                if (p->pw)
                    F(gather)(pwb, p->pw, p->pw_dtype, it, TPW, n);
                if (want_grad && per_elem_gl)
                    F(gather)(omb, p->grad_loss, p->gl_dtype, it, TGL, n);
                acc += F(block)(p, n, x, y, wb, pwb, omb, lb, gb);
                if (want_loss && none && !dl)
                    F(scatter)(p->loss, p->loss_dtype, it, TL, n, lbuf);
                if (want_grad && !dg)
                    F(scatter)(p->grad, p->x_dtype, it, TG, n, gbuf);
                walker_skip(&it, n);
            }
            b->partial[chunk] = acc;
        }
    }
}
