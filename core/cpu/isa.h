/*
 * isa.h — runtime choice among the builds of the CPU loss kernels.  The kernel files
 * (core/cpu/rows/, core/cpu/elementwise/, core/cpu/margin/, core/cpu/linear/,
 * core/cpu/region/dice.c and core/cpu/sequence/ctc.c) are compiled once per instruction
 * set — portable x86-64 (or the host's baseline elsewhere), AVX2+FMA, AVX-512 — each with
 * PLOSS_ISA set to a suffix of its symbols, and core/cpu/isa.c picks one build per process
 * from the CPU's features (__builtin_cpu_supports), so one library runs everywhere.
 * PLOSS_CPU_ISA=baseline|avx2|avx512 in the environment caps the choice (tests of every
 * build on one machine).  Internal.
 */
#ifndef PLOSS_CPU_ISA_H
#define PLOSS_CPU_ISA_H

#include "elementwise.h"
#include "linear_cross_entropy.h"
#include "margin.h"
#include "region.h"
#include "rows.h"
#include "sequence.h"

#define PLOSS_ISA_CAT2(a, b) a##b
#define PLOSS_ISA_CAT(a, b) PLOSS_ISA_CAT2(a, b)
/* name of a kernel entry point in the build being compiled */
#define PLOSS_ISA_FN(name) PLOSS_ISA_CAT(name, PLOSS_ISA)

#define PLOSS_ISA_DECLARE(sfx)                                                                     \
    ploss_status ploss_cpu_cross_entropy##sfx(ploss_ctx_t *ctx, const ploss_ce_problem *p);       \
    ploss_status ploss_cpu_softmax_focal##sfx(ploss_ctx_t *ctx, const ploss_sfocal_problem *p);   \
    ploss_status ploss_cpu_sample_policies##sfx(ploss_ctx_t *ctx, const ploss_sample_problem *p); \
    ploss_status ploss_cpu_sigmoid##sfx(ploss_ctx_t *ctx, const ploss_sigmoid_problem *p);       \
    ploss_status ploss_cpu_margin##sfx(ploss_ctx_t *ctx, const ploss_margin_problem *p);        \
    ploss_status ploss_cpu_dice##sfx(ploss_ctx_t *ctx, const ploss_region_problem *p);          \
    ploss_status ploss_cpu_linear_cross_entropy##sfx(ploss_ctx_t *ctx, const ploss_linear_problem *p);  \
    ploss_status ploss_cpu_ctc##sfx(ploss_ctx_t *ctx, const ploss_ctc_problem *p);

PLOSS_ISA_DECLARE(_baseline)
#if defined(__x86_64__)
#define PLOSS_ISA_X86 1
PLOSS_ISA_DECLARE(_avx2)
PLOSS_ISA_DECLARE(_avx512)
#endif

/* The build in use: 0 baseline, 1 AVX2, 2 AVX-512. */
int ploss_cpu_isa(void);

#endif
