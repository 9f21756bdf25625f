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

#endif
