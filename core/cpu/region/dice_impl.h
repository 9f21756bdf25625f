/*
 * dice_impl.h — the per-pixel passes of dice.c for one compute type, included by dice.c
 * through real_types.h (REAL, EXP, POW, LOAD/STORE, F(name)).
 */

/* The labels of pixels [s0, s0 + n) of sample n0 (index targets, checked: in [0, C) or
 * ignore_index) into y, −1 for ignore_index; v[i] = 1 where the pixel counts (not ignored,
 * or every pixel without mask_ignored), else 0. */
static void F(load_labels)(const ploss_region_problem *p, int64_t n0, int64_t s0, int64_t n, int32_t *y, REAL *v)
{
    for (int64_t i = 0; i < n;) {
        const int64_t len = run_from(p, s0 + i, n - i), st = run_stride(p, p->t_ss);
        const int64_t off = n0 * p->t_sn + ploss_region_pixel_offset(p, p->t_ss, s0 + i);
        for (int64_t k = 0; k < len; ++k) {
            const int64_t l = p->t_dtype == PLOSS_I64 ? ((const int64_t *)p->t)[off + k * st]
                                                      : ploss_load_int(p->t, p->t_dtype, off + k * st);
            y[i + k] = l == p->ignore_index ? -1 : (int32_t)l;
            v[i + k] = (REAL)(l != p->ignore_index || !p->mask_ignored);
        }
        i += len;
    }
}

/* The chunk [s0, s0 + n) of sample n0, per pixel: the target of class c (o, binary: the
 * float target; index: from the labels y, −1 where ignored) and whether the pixel counts (v:
 * not ignored, or every pixel without mask_ignored). */
static void F(chunk_targets)(const ploss_region_problem *p, int64_t n0, int64_t s0, int64_t n, REAL *bt, int32_t *y,
                             REAL *v)
{
    if (p->binary) {
        for (int64_t i = 0; i < n;) {
            const int64_t len = run_from(p, s0 + i, n - i);
            LOAD(bt + i, p->t, p->t_dtype, n0 * p->t_sn + ploss_region_pixel_offset(p, p->t_ss, s0 + i),
                 run_stride(p, p->t_ss), len);
            i += len;
        }
        for (int64_t i = 0; i < n; ++i)
            v[i] = 1;
        return;
    }
    F(load_labels)(p, n0, s0, n, y, v);
}

/* The logits of class c at pixels [s0, s0 + n) of sample n0. */
static void F(chunk_logits)(const ploss_region_problem *p, int64_t n0, int64_t c, int64_t s0, int64_t n, REAL *x)
{
    for (int64_t i = 0; i < n;) {
        const int64_t len = run_from(p, s0 + i, n - i);
        LOAD(x + i, p->x, p->x_dtype, n0 * p->x_sn + c * p->x_sc + ploss_region_pixel_offset(p, p->x_ss, s0 + i),
             run_stride(p, p->x_ss), len);
        i += len;
    }
}

/* s^e for e = p->exponent: e = 1 and 2 without pow. */
#define F_POWER(s, e, kind) ((kind) == 1 ? (s) : (kind) == 2 ? (s) * (s) : POW((s), (e)))

/* Pass 1: part[3·((n·K + k)·C + c) + {0, 1, 2}] = A, B, R of chunk k of sample n, class c. */
static void F(sums)(const ploss_region_problem *p, int64_t K, double *part)
{
    const int64_t C = p->C, S = p->S;
    const REAL e = (REAL)p->exponent;
    const int kind = p->exponent == 1.0 ? 1 : p->exponent == 2.0 ? 2 : 0, binary = p->binary;
#pragma omp parallel for schedule(static)
    for (int64_t q = 0; q < p->N * K; ++q) {
        const int64_t n = q / K, s0 = q % K * CHUNK, len = S - s0 < CHUNK ? S - s0 : CHUNK;
        REAL x[CHUNK], bt[CHUNK], v[CHUNK];
        int32_t y[CHUNK];
        F(chunk_targets)(p, n, s0, len, bt, y, v);
        for (int64_t c = 0; c < C; ++c) {
            F(chunk_logits)(p, n, c, s0, len, x);
            double a = 0.0, b = 0.0, r = 0.0;
#pragma omp simd reduction(+ : a, b, r)
            for (int64_t i = 0; i < len; ++i) {
                /* a pixel that does not count adds nothing, whatever its logit (even NaN) */
                const int on = v[i] != 0;
                const REAL s = 1 / (1 + EXP(-x[i]));
                const REAL o = binary ? bt[i] : (REAL)(y[i] == c);
                a += on ? s * o : 0;
                b += on ? F_POWER(s, e, kind) + (binary ? F_POWER(o, e, kind) : o) : 0;
                r += on ? o : 0;
            }
            double *out = part + 3 * (q * C + c);
            out[0] = a;
            out[1] = b;
            out[2] = r;
        }
    }
}

/* Pass 3: the gradient of every pixel and class, k1/k2 per (group, class) (dice.c). */
static void F(gradient)(const ploss_region_problem *p, int64_t K, const double *k1, const double *k2)
{
    const int64_t C = p->C, S = p->S;
    const REAL e = (REAL)p->exponent;
    const int kind = p->exponent == 1.0 ? 1 : p->exponent == 2.0 ? 2 : 0, binary = p->binary;
#pragma omp parallel for schedule(static)
    for (int64_t q = 0; q < p->N * K; ++q) {
        const int64_t n = q / K, s0 = q % K * CHUNK, len = S - s0 < CHUNK ? S - s0 : CHUNK, g = p->per_image ? n : 0;
        REAL x[CHUNK], bt[CHUNK], v[CHUNK];
        int32_t y[CHUNK];
        F(chunk_targets)(p, n, s0, len, bt, y, v);
        for (int64_t c = 0; c < C; ++c) {
            F(chunk_logits)(p, n, c, s0, len, x);
            const REAL a1 = (REAL)k1[g * C + c], a2 = (REAL)k2[g * C + c];
#pragma omp simd
            for (int64_t i = 0; i < len; ++i) {
                /* σ(x) and 1 − σ(x) from one exponential of −|x| */
                const REAL t = EXP_FLUSH(-(x[i] < 0 ? -x[i] : x[i])), u = 1 / (1 + t);
                const REAL s = x[i] >= 0 ? u : t * u, s1 = x[i] >= 0 ? t * u : u;
                const REAL o = binary ? bt[i] : (REAL)(y[i] == c);
                /* ignored pixels (v = 0) get 0, also where x is ±∞ or NaN */
                x[i] = v[i] != 0 ? (a1 * F_POWER(s, e, kind) - a2 * o * s) * s1 : 0;
            }
            for (int64_t i = 0; i < len;) {
                const int64_t run = run_from(p, s0 + i, len - i);
                STORE(p->grad, p->x_dtype, n * p->g_sn + c * p->g_sc + ploss_region_pixel_offset(p, p->g_ss, s0 + i),
                      run_stride(p, p->g_ss), run, x + i);
                i += run;
            }
        }
    }
}

#undef F_POWER
