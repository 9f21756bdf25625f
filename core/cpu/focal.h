/*
 * focal.h — the softmax focal loss's per-row factors (Lin et al.) from lp = log p_y, in
 * double, shared by the CPU softmax rows (rows/softmax_rows_impl.h) and the fused linear +
 * loss (linear/linear_cross_entropy_impl.h).  With u = 1 − p_y = −expm1(lp) (no
 * cancellation) and L = −lp:
 *     ℓ = u^γ·L,   ∂ℓ/∂x_j = F·(p_j − [j = y]),   F = u^γ·(1 + γ·p_y·L/u),
 * with L/u → 1 as u → 0, so F is finite for every γ ≥ 0 (1 at γ = 0: the cross-entropy).
 * Internal.
 */
#ifndef PLOSS_CPU_FOCAL_H
#define PLOSS_CPU_FOCAL_H

#include <math.h>

/* F of the row; its loss u^γ·L into *loss. */
static inline double ploss_focal_factor(double lp, double gamma, double *loss)
{
    const double u = -expm1(lp), L = -lp;
    const double ug = pow(u, gamma);
    const double r = u > 0.0 ? L / u : 1.0;
    *loss = ug * L;
    return gamma == 0.0 ? 1.0 : ug * (1.0 + gamma * exp(lp) * r);
}

#endif
