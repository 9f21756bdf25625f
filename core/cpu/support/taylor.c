/* taylor.c — CPU backend of the Taylor softmax / log-Taylor softmax ops (docs/losses.md;
 * formulas in core/support/taylor.h).  Accumulates in double; one row per iteration. */
#include <math.h>

#include "taylor.h"
#include "taylor_poly.h"
#include "scalar.h"

ploss_status ploss_cpu_taylor(ploss_ctx_t *ctx, const ploss_taylor_problem *p)
{
    (void)ctx;
    const int64_t rows = p->N * p->S, C = p->C;
    const int n = p->order;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t a = r / p->S, b = r % p->S;
        const int64_t xo = a * p->x_sn + b * p->x_ss, go = a * p->g_sn + b * p->g_ss, oo = a * p->o_sn + b * p->o_ss;
        double z = 0.0, t = 0.0; /* Z and Σ F·G (softmax) or Σ G (log) */
        for (int64_t j = 0; j < C; ++j) {
            const double f = ploss_taylor_poly(ploss_load(p->x, p->dtype, xo + j * p->x_sc), n);
            z += f;
            if (p->backward) {
                const double gj = ploss_load(p->g, p->dtype, go + j * p->g_sc);
                t += p->log ? gj : f * gj;
            }
        }
        for (int64_t j = 0; j < C; ++j) {
            const double xj = ploss_load(p->x, p->dtype, xo + j * p->x_sc);
            double v;
            if (!p->backward) {
                const double f = ploss_taylor_poly(xj, n);
                v = p->log ? log(f) - log(z) : f / z;
            } else {
                const double gj = ploss_load(p->g, p->dtype, go + j * p->g_sc);
                const double d = ploss_taylor_poly(xj, n - 1);
                v = p->log ? d * (gj / ploss_taylor_poly(xj, n) - t / z) : d * (gj - t / z) / z;
            }
            ploss_store(p->out, p->dtype, oo + j * p->o_sc, v);
        }
    }
    return PLOSS_OK;
}
