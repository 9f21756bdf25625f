/*
 * sample_policies.c — CPU backend of the per-sample policy losses with class-index targets
 * (large-margin softmax, Taylor CE, PC-softmax CE, OHEM CE / large-margin; formulas in
 * core/engines/rows.h), computed by the softmax-row kernels (softmax_rows.h); the OHEM
 * mining scores every sample with them, then selects here.  Labels were validated by
 * core/engines/rows.c.
 */
#include <stdlib.h>
#include <string.h>

#include "chunks.h"
#include "softmax_rows.h"

/* ---- OHEM mining --------------------------------------------------------------------- */

/* The r-th smallest (r >= 1) of keys[0..M) by a three-pass radix select on 11/11/10-bit
 * digits, the algorithm of the CUDA backend. */
static uint32_t select_key(const uint32_t *keys, int64_t M, int64_t r)
{
    static const int shift[3] = {21, 10, 0}, bits[3] = {11, 11, 10};
    uint32_t prefix = 0, prefix_mask = 0;
    int64_t hist[2048];
    for (int pass = 0; pass < 3; ++pass) {
        const uint32_t nb = 1u << bits[pass];
        memset(hist, 0, sizeof hist);
        for (int64_t i = 0; i < M; ++i)
            if ((keys[i] & prefix_mask) == prefix)
                ++hist[(keys[i] >> shift[pass]) & (nb - 1)];
        uint32_t b = 0;
        while (r > hist[b]) {
            r -= hist[b];
            ++b;
        }
        prefix |= b << shift[pass];
        prefix_mask |= (nb - 1) << shift[pass];
    }
    return prefix;
}

/* Scores every sample into keys[] with the problem r, and sets kept[i] = 1 for the mined
 * ones (rows.h). */
static ploss_status ohem_mine(const ploss_sample_problem *p, ploss_cpu_srows r, uint32_t *keys, unsigned char *kept)
{
    const int64_t M = p->N * p->S;
    r.keys = keys;
    const ploss_status status = PLOSS_ISA_FN(ploss_cpu_srows_run)(&r);
    if (status != PLOSS_OK)
        return status;
    uint32_t t = p->thresh_key;
    if (p->n_min > 0 && p->n_min < M) {
        const uint32_t k = select_key(keys, M, p->n_min);
        t = k > t ? k : t;
    }
    if (p->n_min >= M || t == PLOSS_OHEM_IGNORED_KEY)
        t = PLOSS_OHEM_IGNORED_KEY - 1u; /* every valid sample, never an ignored one */
    for (int64_t i = 0; i < M; ++i)
        kept[i] = keys[i] <= t;
    return PLOSS_OK;
}

/* ---- driver ---------------------------------------------------------------------------- */

_Static_assert(PLOSS_SAMPLE_KIND_COUNT == 4, "a new per-sample loss kind (core/engines/rows.h): map it to its "
                                             "softmax-row kind in ploss_cpu_sample_policies");

ploss_status PLOSS_ISA_FN(ploss_cpu_sample_policies)(ploss_ctx_t *ctx, const ploss_sample_problem *p)
{
    (void)ctx;
    const int64_t M = p->N * p->S;
    ploss_srows_kind kind;
    switch (p->loss_kind) {
    case PLOSS_SAMPLE_LARGE_MARGIN: kind = PLOSS_SROWS_LARGE_MARGIN; break;
    case PLOSS_SAMPLE_TAYLOR_CE: kind = PLOSS_SROWS_TAYLOR_CE; break;
    case PLOSS_SAMPLE_PC_SOFTMAX: kind = PLOSS_SROWS_PC_SOFTMAX; break;
    case PLOSS_SAMPLE_CROSS_ENTROPY: kind = PLOSS_SROWS_CE; break;
    default: return ploss_error(PLOSS_ERR_UNSUPPORTED, "sample_policies: no CPU kernel for loss kind %d", (int)p->loss_kind);
    }
    ploss_cpu_srows r = {
        .name = "sample_policies", .kind = kind,
        .pass = p->pass, .reduction = p->reduction, .N = p->N, .S = p->S, .C = p->C,
        .x = p->x, .x_dtype = p->x_dtype, .x_sn = p->x_sn, .x_ss = p->x_ss, .x_sc = p->x_sc,
        .t = p->t, .t_dtype = p->t_dtype, .t_sn = p->t_sn, .t_ss = p->t_ss, .ignore_index = p->ignore_index,
        .w = p->w, .w_dtype = p->w_dtype, .w_s = p->w_s, .lam = p->lam, .order = p->order,
        .loss = p->loss, .loss_dtype = p->loss_dtype, .l_sn = p->l_sn, .l_ss = p->l_ss,
        .state = p->state, .state_dtype = p->state_dtype, .n_state = p->n_state,
        .st_sn = p->st_sn, .st_ss = p->st_ss, .st_sk = p->st_sk,
        .grad_loss = p->grad_loss, .gl_dtype = p->gl_dtype, .gl_sn = p->gl_sn, .gl_ss = p->gl_ss,
        .grad = p->grad, .g_sn = p->g_sn, .g_ss = p->g_ss, .g_sc = p->g_sc,
    };

    /* the OHEM keys and flags are taken (and the keys written) before any output */
    uint32_t *keys = NULL;
    unsigned char *kept = NULL;
    if (p->ohem) {
        keys = malloc((size_t)(M ? M : 1) * sizeof *keys);
        kept = malloc((size_t)(M ? M : 1));
        ploss_status status = !keys || !kept ? ploss_error(PLOSS_ERR_OUT_OF_MEMORY,
                                                           "sample_policies: OHEM keys of %lld samples", (long long)M)
                                             : ohem_mine(p, r, keys, kept);
        if (status != PLOSS_OK) {
            free(keys);
            free(kept);
            return status;
        }
        r.kept = kept;
    }

    /* valid (or mined) samples: the MEAN divisor */
    r.divisor = 1.0;
    if (p->reduction == PLOSS_REDUCTION_MEAN && p->ohem) {
        int64_t count = 0;
        for (int64_t i = 0; i < M; ++i)
            count += kept[i];
        r.divisor = (double)count;
    } else if (p->reduction == PLOSS_REDUCTION_MEAN) {
        r.divisor = (double)ploss_cpu_count_labels(p->t, p->t_dtype, p->N, p->S, p->t_sn, p->t_ss, p->ignore_index);
    }
    r.omega = ploss_cpu_grad_scale(p->pass, p->reduction, p->scale, p->grad_loss, p->gl_dtype, r.divisor);
    const ploss_status status = PLOSS_ISA_FN(ploss_cpu_srows_run)(&r);
    free(keys);
    free(kept);
    return status;
}
