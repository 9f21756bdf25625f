/*
 * direct_rows.c — CPU backend of the direct rows (formulas in core/engines/rows.h): the
 * negative log-likelihood (a gather of the target's entry of each row), the multi-class
 * margin, multi-label soft margin and class simplex losses (one pass over each row) and the
 * multi-label margin loss (a pass over each row per listed class), no softmax.
 * Labels were validated by core/engines/rows.c.  The MEAN divisor (NLL: Σ of the valid samples' class weights) is
 * taken first, so that the gradient is written in the same pass as the loss; losses are
 * summed in double over fixed chunks of samples, summed in order, so results do not depend
 * on the number of OpenMP threads.
 */
#include <omp.h>

#include "chunks.h"
#include "rows.h"
#include "scalar.h"

/* Samples per reduction chunk (and per parallel task): 4096, fewer for long rows so that
 * a few hundred rows still spread over the threads; it depends on C only, so the order of
 * the sums does not depend on the number of threads. */
static int64_t chunk_of(const ploss_direct_problem *p)
{
    const int64_t c = p->kind != PLOSS_DIRECT_NLL && p->C > 64 ? 262144 / p->C : 4096;
    return c < 16 ? 16 : c > 4096 ? 4096 : c;
}

/* Class weight of label y (1 without weights). */
static double weight_of(const ploss_direct_problem *p, int64_t y)
{
    return p->w ? ploss_load(p->w, p->w_dtype, y * p->w_s) : 1.0;
}

/* The MEAN divisor: NLL Σ w_y over the valid samples (in chunk order), the class simplex the
 * element count, else the sample count. */
static double mean_divisor(const ploss_direct_problem *p, ploss_cpu_rows *b, int64_t K)
{
    const int64_t M = p->N * p->S;
    if (p->kind == PLOSS_DIRECT_CLASS_SIMPLEX)
        return (double)M * (double)p->C;
    if (p->kind != PLOSS_DIRECT_NLL)
        return (double)M;
#pragma omp parallel for schedule(static)
    for (int64_t chunk = 0; chunk < b->nchunks; ++chunk) {
        const int64_t end = (chunk + 1) * K < M ? (chunk + 1) * K : M;
        double acc = 0.0;
        for (int64_t i = chunk * K; i < end; ++i) {
            const int64_t n = i / p->S, s = i % p->S;
            const int64_t y = ploss_load_int(p->t, p->t_dtype, n * p->t_sn + s * p->t_ss);
            if (y != p->ignore_index)
                acc += weight_of(p, y);
        }
        b->partial[chunk] = acc;
    }
    double total = 0.0;
    for (int64_t c = 0; c < b->nchunks; ++c)
        total += b->partial[c];
    return total;
}

/* Multi-class margin loss of sample (n, s) with label y and class weight wy; with
 * `grad` the gradient row om·∂ℓ/∂x (written after the row is read: it may be the input).
 * row: C doubles of scratch. */
static double multi_margin_row(const ploss_direct_problem *p, int64_t n, int64_t s, int64_t y, double wy, int grad,
                               double om, double *row)
{
    const int64_t C = p->C, g0 = n * p->g_sn + s * p->g_ss;
    ploss_cpu_load_f64(row, p->x, p->x_dtype, n * p->x_sn + s * p->x_ss, p->x_sc, C);
    const double xy = row[y], c = wy / (double)C, margin = p->margin;
    const int square = p->power != 1;
    double sum = 0.0, gsum = 0.0;
#pragma omp simd reduction(+ : sum, gsum)
    for (int64_t j = 0; j < C; ++j) {
        const double z = margin - xy + row[j];
        const int on = j != y && !(z <= 0.0); /* z > 0, or NaN: counted */
        sum += on ? (square ? z * z : z) : 0.0;
        gsum += on ? (square ? 2.0 * z : 1.0) : 0.0;
    }
    if (grad) {
#pragma omp simd
        for (int64_t j = 0; j < C; ++j) {
            const double z = margin - xy + row[j];
            row[j] = j != y && !(z <= 0.0) ? c * (square ? 2.0 * z : 1.0) * om : 0.0;
        }
        row[y] = ploss_upstream(om, -c * gsum);
        ploss_cpu_store_f64(p->grad, p->x_dtype, g0, p->g_sc, C, row);
    }
    return c * sum;
}

/* Class simplex loss of sample (n, s) with label y; with `grad` the gradient row om·∂ℓ/∂x
 * (written after the row is read: it may be the input).  row: C doubles of scratch. */
static double class_simplex_row(const ploss_direct_problem *p, int64_t n, int64_t s, int64_t y, int grad, double om,
                                double *row)
{
    const int64_t C = p->C;
    ploss_cpu_load_f64(row, p->x, p->x_dtype, n * p->x_sn + s * p->x_ss, p->x_sc, C);
    double sum = 0.0;
    for (int64_t j = 0; j < C; ++j) {
        const double d = row[j] - ploss_simplex_coord(C, y, j);
        sum += d * d;
        row[j] = 2.0 * d * om;
    }
    if (grad)
        ploss_cpu_store_f64(p->grad, p->x_dtype, n * p->g_sn + s * p->g_ss, p->g_sc, C, row);
    return sum;
}

/* Multi-label soft margin loss of sample (n, s); with `grad` the gradient row om·∂ℓ/∂x
 * (written after the row is read: it may be the input).  row, lab: C doubles of scratch. */
static double multilabel_row(const ploss_direct_problem *p, int64_t n, int64_t s, int grad, double om, double *row,
                             double *lab)
{
    const int64_t C = p->C, g0 = n * p->g_sn + s * p->g_ss;
    ploss_cpu_load_f64(row, p->x, p->x_dtype, n * p->x_sn + s * p->x_ss, p->x_sc, C);
    ploss_cpu_load_f64(lab, p->t, p->t_dtype, n * p->t_sn + s * p->t_ss, p->t_sc, C);
    const double inv_c = 1.0 / (double)C;
    double sum = 0.0;
    for (int64_t j = 0; j < C; ++j) {
        const double x = row[j], y = lab[j], w = weight_of(p, j);
        const double e = exp(-fabs(x)), lg = log1p(e); /* sp(z) = max(z, 0) + lg */
        sum += w * (y * ((x < 0 ? -x : 0) + lg) + (1 - y) * ((x > 0 ? x : 0) + lg));
        if (grad) { /* σ(x) − y, without the cancellation of 1 − σ(−x) near σ = y = 1 */
            const double small = e / (1 + e); /* σ(−|x|) */
            row[j] = w * inv_c * (x >= 0 ? (1 - y) - small : small - y) * om;
        }
    }
    if (grad)
        ploss_cpu_store_f64(p->grad, p->x_dtype, g0, p->g_sc, C, row);
    return sum * inv_c;
}

/* Multi-label margin loss of sample (n, s); with `grad` the gradient row om·∂ℓ/∂x (written
 * after the row is read: it may be the input).  row, listed, g: C doubles of scratch
 * (listed: 1 where the class is in the row's list).  The list's entries are in [0, C)
 * (checked by core/engines/rows.c). */
static double multilabel_margin_row(const ploss_direct_problem *p, int64_t n, int64_t s, int grad, double om,
                                    double *row, double *listed, double *g)
{
    const int64_t C = p->C, t0 = n * p->t_sn + s * p->t_ss;
    ploss_cpu_load_f64(row, p->x, p->x_dtype, n * p->x_sn + s * p->x_ss, p->x_sc, C);
    int64_t L = 0;
    for (int64_t j = 0; j < C; ++j)
        listed[j] = g[j] = 0.0;
    for (; L < C; ++L) {
        const int64_t y = ploss_load_int(p->t, p->t_dtype, t0 + L * p->t_sc);
        if (y < 0)
            break;
        listed[y] = 1.0;
    }
    double sum = 0.0;
    for (int64_t k = 0; k < L; ++k) {
        const int64_t c = ploss_load_int(p->t, p->t_dtype, t0 + k * p->t_sc);
        const double base = 1.0 - row[c];
        double on_sum = 0.0, on_count = 0.0;
#pragma omp simd reduction(+ : on_sum, on_count)
        for (int64_t j = 0; j < C; ++j) {
            const double z = base + row[j];
            const int on = listed[j] == 0.0 && !(z <= 0.0); /* z > 0, or NaN: counted */
            on_sum += on ? z : 0.0;
            on_count += on ? 1.0 : 0.0;
            g[j] += on ? 1.0 : 0.0;
        }
        sum += on_sum;
        g[c] -= on_count;
    }
    if (grad) {
        for (int64_t j = 0; j < C; ++j)
            g[j] = ploss_upstream(om, g[j] / (double)C);
        ploss_cpu_store_f64(p->grad, p->x_dtype, n * p->g_sn + s * p->g_ss, p->g_sc, C, g);
    }
    return sum / (double)C;
}

ploss_status ploss_cpu_direct_rows(ploss_ctx_t *ctx, const ploss_direct_problem *p)
{
    (void)ctx;
    const int64_t M = p->N * p->S;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;
    const int per_sample_up = p->pass == PLOSS_PASS_BACKWARD && none;

    ploss_cpu_rows b;
    /* scratch per thread: a row of C doubles (the multi-class margin, the class simplex), two
     * (multi-label soft margin), three (multi-label margin) */
    const int rows = p->kind == PLOSS_DIRECT_MULTI_MARGIN || p->kind == PLOSS_DIRECT_CLASS_SIMPLEX ? 1
                     : p->kind == PLOSS_DIRECT_MULTILABEL_SOFT_MARGIN ? 2
                     : p->kind == PLOSS_DIRECT_MULTILABEL_MARGIN      ? 3
                                                                      : 0;
    const int64_t K = chunk_of(p);
    const ploss_status status = ploss_cpu_rows_alloc(&b, "direct_rows", M, rows ? p->C : 0, rows, K);
    if (status != PLOSS_OK)
        return status;
    const double divisor = p->reduction == PLOSS_REDUCTION_MEAN ? mean_divisor(p, &b, K) : 1.0;
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor);

#pragma omp parallel for schedule(static)
    for (int64_t chunk = 0; chunk < b.nchunks; ++chunk) {
        const int64_t end = (chunk + 1) * K < M ? (chunk + 1) * K : M;
        double acc = 0.0;
        for (int64_t i = chunk * K; i < end; ++i) {
            const int64_t n = i / p->S, s = i % p->S;
            const double om = !want_grad    ? 0.0
                              : per_sample_up ? ploss_load(p->grad_loss, p->gl_dtype, n * p->gl_sn + s * p->gl_ss)
                                              : omega;
            double loss;
            if (p->kind == PLOSS_DIRECT_MULTILABEL_SOFT_MARGIN || p->kind == PLOSS_DIRECT_MULTILABEL_MARGIN) {
                double *scratch = ploss_cpu_rows_thread(&b, omp_get_thread_num());
                loss = p->kind == PLOSS_DIRECT_MULTILABEL_MARGIN
                           ? multilabel_margin_row(p, n, s, want_grad, om, scratch, scratch + p->C, scratch + 2 * p->C)
                           : multilabel_row(p, n, s, want_grad, om, scratch, scratch + p->C);
                if (want_loss && none)
                    ploss_store(p->loss, p->loss_dtype, n * p->l_sn + s * p->l_ss, loss);
                acc += loss;
                continue;
            }
            const int64_t y = ploss_load_int(p->t, p->t_dtype, n * p->t_sn + s * p->t_ss);
            const int valid = y != p->ignore_index;
            const double wy = valid ? weight_of(p, y) : 0.0;
            if (p->kind == PLOSS_DIRECT_MULTI_MARGIN) {
                loss = multi_margin_row(p, n, s, y, wy, want_grad, om, ploss_cpu_rows_thread(&b, omp_get_thread_num()));
            } else if (p->kind == PLOSS_DIRECT_CLASS_SIMPLEX) {
                loss = class_simplex_row(p, n, s, y, want_grad, om, ploss_cpu_rows_thread(&b, omp_get_thread_num()));
            } else { /* the gradient after every loss is read (it may be the input itself) */
                loss = valid ? -wy * ploss_load(p->x, p->x_dtype, n * p->x_sn + s * p->x_ss + y * p->x_sc) : 0.0;
            }
            if (want_loss && none)
                ploss_store(p->loss, p->loss_dtype, n * p->l_sn + s * p->l_ss, loss);
            acc += loss;
        }
        b.partial[chunk] = acc;
    }
    if (want_grad && p->kind == PLOSS_DIRECT_NLL) {
        /* each row zeros, but −ω·w_y at a valid label; rows in parallel (a row of C values
         * is the unit, not the loss's chunk of samples) */
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < M; ++i) {
            const int64_t n = i / p->S, s = i % p->S, g0 = n * p->g_sn + s * p->g_ss;
            ploss_cpu_store_zeros(p->grad, p->x_dtype, g0, p->g_sc, p->C);
            const int64_t y = ploss_load_int(p->t, p->t_dtype, n * p->t_sn + s * p->t_ss);
            if (y != p->ignore_index) {
                const double om = per_sample_up ? ploss_load(p->grad_loss, p->gl_dtype, n * p->gl_sn + s * p->gl_ss)
                                                : omega;
                ploss_store(p->grad, p->x_dtype, g0 + y * p->g_sc, -weight_of(p, y) * om);
            }
        }
    }
    if (want_loss)
        ploss_cpu_rows_store_loss(&b, p->reduction, divisor, p->loss, p->loss_dtype);
    ploss_cpu_rows_free(&b);
    return PLOSS_OK;
}
