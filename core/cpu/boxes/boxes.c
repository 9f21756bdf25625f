/*
 * boxes.c — CPU backend of the box regression losses (core/engines/boxes.h): every box in
 * double whatever the dtype (the maths of core/engines/boxes_math.h), losses summed in
 * double over fixed chunks of boxes, the chunks summed in order, so the results do not
 * depend on the number of OpenMP threads.  The front has checked the boxes' coordinates.
 * Also the pairwise similarities of ploss_box_iou, a row of boxes1 per iteration.
 */
#include <math.h>
#include <omp.h>

#include "boxes.h"
#include "chunks.h"
#include "scalar.h"

#define REAL double
#define F(name) name##_f64
#define BOX_FN static inline
#define ATAN2 atan2
#include "boxes_math.h"
#undef REAL
#undef F
#undef BOX_FN
#undef ATAN2

#define CHUNK 2048 /* boxes per reduction chunk */

static int ignored(const ploss_boxes_problem *p, int64_t n)
{
    return p->ign && ploss_load(p->ign, p->ign_dtype, n * p->ign_sn) != 0;
}

ploss_status ploss_cpu_boxes(ploss_ctx_t *ctx, const ploss_boxes_problem *p)
{
    (void)ctx;
    const int64_t N = p->n;
    const int want_loss = p->pass != PLOSS_PASS_BACKWARD, want_grad = p->pass != PLOSS_PASS_FORWARD;
    const int none = p->reduction == PLOSS_REDUCTION_NONE;
    const int per_box_up = p->pass == PLOSS_PASS_BACKWARD && none;
    int64_t kept = N;
    if (p->ign && p->reduction == PLOSS_REDUCTION_MEAN)
        for (int64_t n = 0; n < N; ++n)
            kept -= ignored(p, n);
    const double divisor = p->reduction == PLOSS_REDUCTION_MEAN ? (double)kept : 1.0;
    /* ω of a reduced loss (0 for MEAN with no box left: a zero gradient) */
    const double omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, divisor);

    /* the only buffer (the chunk partials) is taken before the first write */
    ploss_cpu_rows b;
    const ploss_status status = ploss_cpu_rows_alloc(&b, "boxes", N, 0, 0, CHUNK);
    if (status != PLOSS_OK)
        return status;
#pragma omp parallel for schedule(static)
    for (int64_t chunk = 0; chunk < b.nchunks; ++chunk) {
        const int64_t end = (chunk + 1) * CHUNK < N ? (chunk + 1) * CHUNK : N;
        double acc = 0.0;
        for (int64_t n = chunk * CHUNK; n < end; ++n) {
            double loss = 0.0, g[4] = {0.0, 0.0, 0.0, 0.0};
            if (!ignored(p, n)) {
                double r[4], pb[4], tb[4];
                for (int k = 0; k < 4; ++k)
                    r[k] = ploss_load(p->x, p->x_dtype, n * p->x_sn + k * p->x_sk);
                box_to_xyxy_f64(p->format, r, pb);
                for (int k = 0; k < 4; ++k)
                    r[k] = ploss_load(p->t, p->t_dtype, n * p->t_sn + k * p->t_sk);
                box_to_xyxy_f64(p->format, r, tb);
                const double w = p->w ? ploss_load(p->w, p->w_dtype, n * p->w_sn) : 1.0;
                loss = w * (1 - box_similarity_f64((int)p->kind, p->paper_gradient, p->eps, p->eps, pb, tb, want_grad, g));
                if (want_grad) {
                    box_grad_from_xyxy_f64(p->format, g);
                    const double up = per_box_up ? ploss_load(p->grad_loss, p->gl_dtype, n * p->gl_sn) : omega;
                    for (int k = 0; k < 4; ++k)
                        g[k] *= w * up;
                }
            }
            if (want_loss) {
                if (none)
                    ploss_store(p->loss, p->loss_dtype, n * p->l_sn, loss);
                else
                    acc += loss;
            }
            if (want_grad)
                for (int k = 0; k < 4; ++k)
                    ploss_store(p->grad, p->x_dtype, n * p->g_sn + k * p->g_sk, g[k]);
        }
        b.partial[chunk] = acc;
    }
    if (want_loss) /* 0/0 = NaN with no box left, as PyTorch */
        ploss_cpu_rows_store_loss(&b, p->reduction, divisor, p->loss, p->loss_dtype);
    ploss_cpu_rows_free(&b);
    return PLOSS_OK;
}

ploss_status ploss_cpu_box_pairs(ploss_ctx_t *ctx, const ploss_box_pairs_problem *p)
{
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < p->n; ++i) {
        double r[4], a[4], b[4], g[4];
        for (int k = 0; k < 4; ++k)
            r[k] = ploss_load(p->a, p->a_dtype, i * p->a_sn + k * p->a_sk);
        box_to_xyxy_f64(p->format, r, a);
        for (int64_t j = 0; j < p->m; ++j) {
            for (int k = 0; k < 4; ++k)
                r[k] = ploss_load(p->b, p->b_dtype, j * p->b_sn + k * p->b_sk);
            box_to_xyxy_f64(p->format, r, b);
            const double s = box_similarity_f64((int)p->kind, 0, 0.0, p->eps, a, b, 0, g);
            ploss_store(p->out, p->out_dtype, i * p->o_sn + j * p->o_sm, s);
        }
    }
    return PLOSS_OK;
}
