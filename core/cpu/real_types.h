/*
 * real_types.h — instantiates the kernels of the file named by PLOSS_REAL_IMPL once per
 * compute type: float (for f32, f16 and bf16 inputs) and double (for f64), with
 *   REAL, REAL_DTYPE, REAL_MAX          the type, its ploss dtype and largest finite value
 *   EXP, LOG, LOG1P, POW                its libm functions (vectorised through vmath.h)
 *   EXP_FLUSH                           EXP with subnormal results flushed to 0 (vmath.h)
 *   LOAD, STORE                         the row converters of chunks.h
 *   F(name)                             name with the type's suffix (_f32, _f64)
 * PLOSS_REAL_IMPL is a path under core/cpu/ (e.g. "rows/cross_entropy_impl.h").  Include this
 * where the kernels' file would be included.  No include guard: meant to be
 * included once per kernel file.  Internal.
 */
#include <float.h>

#define REAL float
#define REAL_DTYPE PLOSS_F32
#define REAL_MAX FLT_MAX
#define EXP expf
#define EXP_FLUSH ploss_exp_flush_f32
#define LOG logf
#define LOG1P log1pf
#define POW powf
#define LOAD ploss_cpu_load_f32
#define STORE ploss_cpu_store_f32
#define F(name) name##_f32
#include PLOSS_REAL_IMPL
#undef REAL
#undef REAL_DTYPE
#undef REAL_MAX
#undef EXP
#undef EXP_FLUSH
#undef LOG
#undef LOG1P
#undef POW
#undef LOAD
#undef STORE
#undef F

#define REAL double
#define REAL_DTYPE PLOSS_F64
#define REAL_MAX DBL_MAX
#define EXP exp
#define EXP_FLUSH ploss_exp_flush_f64
#define LOG log
#define LOG1P log1p
#define POW pow
#define LOAD ploss_cpu_load_f64
#define STORE ploss_cpu_store_f64
#define F(name) name##_f64
#include PLOSS_REAL_IMPL
#undef REAL
#undef REAL_DTYPE
#undef REAL_MAX
#undef EXP
#undef EXP_FLUSH
#undef LOG
#undef LOG1P
#undef POW
#undef LOAD
#undef STORE
#undef F
