/*
 * vmath.h — the libm functions that the CPU kernels call inside `#pragma omp simd` loops,
 * declared with vector variants so that GCC vectorises those loops into calls of the GNU
 * vector ABI (_ZGV<isa>N<lanes>v_expf, …).  glibc's libmvec provides them (within 4 ULP,
 * its documented bound); the scalar remainder of a loop calls libm.  Compilers without the
 * vector variants call libm for every element.  Internal.
 */
#ifndef PLOSS_CPU_VMATH_H
#define PLOSS_CPU_VMATH_H

#include <math.h>

#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float logf(float);
#pragma omp declare simd notinbranch
float log1pf(float);
#pragma omp declare simd notinbranch
float powf(float, float);
#pragma omp declare simd notinbranch
double exp(double);
#pragma omp declare simd notinbranch
double log(double);
#pragma omp declare simd notinbranch
double log1p(double);
#pragma omp declare simd notinbranch
double expm1(double);
#pragma omp declare simd notinbranch
double pow(double, double);

/* e^d for the terms of a softmax (d = x − max <= 0, or any d), with the results below the
 * smallest normal number flushed to 0 (d below −87 in float, −708 in double): the vector
 * exp then never meets an argument for which libmvec takes its per-lane scalar path (the
 * scalar exp's underflow handling), and no later arithmetic meets subnormal numbers, each
 * of which costs x86 ~100 cycles: rows of widely spread logits (a spread past ~90) ran
 * 5–40× slower.  The flushed terms are below 1.7e-38 (f32) and 3.3e-308 (f64) of the
 * row's largest, which is 1; NaN stays NaN, −∞ gives 0.  The clamp and the mask read two
 * objects of the same value (chunks.c), so that the compiler cannot prove the clamp
 * useless where the mask keeps e and call exp on the unclamped argument (a link-time
 * optimisation, which the build does not ask for, could still see through them). */
extern const float ploss_exp_clamp_f32, ploss_exp_mask_f32;
extern const double ploss_exp_clamp_f64, ploss_exp_mask_f64;
static inline __attribute__((always_inline)) float ploss_exp_flush_f32(float d)
{
    const float e = expf(d < ploss_exp_clamp_f32 ? ploss_exp_clamp_f32 : d);
    return d < ploss_exp_mask_f32 ? 0.0f : e;
}
static inline __attribute__((always_inline)) double ploss_exp_flush_f64(double d)
{
    const double e = exp(d < ploss_exp_clamp_f64 ? ploss_exp_clamp_f64 : d);
    return d < ploss_exp_mask_f64 ? 0.0 : e;
}

#endif
