/* isa.c — picks the build of the CPU loss kernels once per process (see isa.h). */
#include <stdlib.h>
#include <string.h>

#include "isa.h"

static int chosen = -1;

static int detect(void)
{
    int best = 0;
#ifdef PLOSS_ISA_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        best = 1;
    if (best && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        best = 2;
#endif
    const char *cap = getenv("PLOSS_CPU_ISA");
    if (cap && strcmp(cap, "baseline") == 0)
        best = 0;
    else if (cap && strcmp(cap, "avx2") == 0 && best > 1)
        best = 1;
    return best;
}

__attribute__((constructor)) static void init(void) { chosen = detect(); }

int ploss_cpu_isa(void) { return chosen < 0 ? detect() : chosen; }

#ifdef PLOSS_ISA_X86
#define DISPATCH(name, problem)                                                \
    ploss_status name(ploss_ctx_t *ctx, const problem *p)                      \
    {                                                                          \
        switch (ploss_cpu_isa()) {                                             \
        case 2: return name##_avx512(ctx, p);                                  \
        case 1: return name##_avx2(ctx, p);                                    \
        default: return name##_baseline(ctx, p);                               \
        }                                                                      \
    }
#else
#define DISPATCH(name, problem) \
    ploss_status name(ploss_ctx_t *ctx, const problem *p) { return name##_baseline(ctx, p); }
#endif

DISPATCH(ploss_cpu_cross_entropy, ploss_ce_problem)
DISPATCH(ploss_cpu_softmax_focal, ploss_sfocal_problem)
DISPATCH(ploss_cpu_sample_policies, ploss_sample_problem)
DISPATCH(ploss_cpu_sigmoid, ploss_sigmoid_problem)
DISPATCH(ploss_cpu_margin, ploss_margin_problem)
DISPATCH(ploss_cpu_dice, ploss_region_problem)
DISPATCH(ploss_cpu_linear_cross_entropy, ploss_linear_problem)
DISPATCH(ploss_cpu_ctc, ploss_ctc_problem)
