/*
 * chunks.h — scaffolding shared by the CPU loss backends that reduce over fixed chunks of
 * samples (rows/cross_entropy.c, rows/softmax_focal.c, rows/sample_policies.c, elementwise/sigmoid.c,
 * and for the row losses and tile products margin/margin.c and linear/): the gradient scale ω,
 * the per-thread row buffers and per-chunk partial sums taken before any output is
 * written, and the fixed-order final sum into the reduced loss.  The chunk loops and the
 * per-sample maths stay in each backend.  Internal.
 */
#ifndef PLOSS_CPU_ROWS_H
#define PLOSS_CPU_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* The ω that multiplies ∂ℓ_i/∂x of every sample of a reduced loss:
 *   up = `scale` (fused pass) or the scalar upstream gradient grad_loss[0] (backward),
 *   ω  = up / divisor for MEAN (0 when the divisor is 0: no valid sample, zero gradient),
 *        up for SUM.
 * Returns 0 for the forward pass (grad_loss is not read) and for NONE in backward, where
 * the caller reads each sample's upstream gradient itself (NONE in the fused pass: `scale`).
 * grad_loss/gl_dtype are read only in backward with MEAN or SUM. */
double ploss_cpu_grad_scale(ploss_pass pass, ploss_reduction reduction, double scale, const void *grad_loss,
                            ploss_dtype gl_dtype, double divisor);

/* The MEAN divisor of unweighted class-index losses: the labels of the N×S samples (strides
 * sn, ss in elements, dtype an integer type) that are not ignore_index.  The labels are
 * already checked (in range or ignored).  S = 0: none (N may then be huge). */
int64_t ploss_cpu_count_labels(const void *t, ploss_dtype dtype, int64_t N, int64_t S, int64_t sn, int64_t ss,
                               int64_t ignore_index);

/* The loss from N per-row losses kept by a backend: each row's at loss[i·l_sn] for NONE,
 * else their sum in row order, divided by `divisor` for MEAN (0/0: NaN, as PyTorch). */
void ploss_cpu_store_row_losses(void *loss, ploss_dtype dtype, int64_t l_sn, ploss_reduction reduction,
                                const double *losses, int64_t N, double divisor);

/* The loss when every row whose label (i64/i32, stride y_sn) is not ignore_index loses l0:
 * l0 or 0 per row for NONE, else (rows counted)·l0, divided by that count for MEAN (0/0:
 * NaN).  For the row losses of inputs without features (D = 0). */
void ploss_cpu_store_constant_row_losses(void *loss, ploss_dtype dtype, int64_t l_sn, ploss_reduction reduction,
                                         const void *labels, ploss_dtype label_dtype, int64_t y_sn, int64_t N,
                                         int64_t ignore_index, double l0);

/* The logits of a tile of `rows` rows of a linear layer (the margin losses' cosines, the
 * linear cross-entropy): tile = x_tile·Wᵀ (rows×C, leading dimension C), with x_tile
 * (rows×D) and W (C×D) of leading dimension ld, all of `dtype`. */
ploss_status ploss_cpu_tile_products(ploss_ctx_t *ctx, const void *x_tile, int64_t rows, int64_t C, int64_t D,
                                     const void *w, int64_t ld, ploss_dtype dtype, void *tile);

/* The two gradient products of a tile of `rows` rows of a linear layer's logits (the
 * margin losses, the linear cross-entropy): with G the rows×C gradient of the tile's
 * logits (row-major, leading dimension C),
 *   gx_tile = alpha·G·W            (rows×D: this tile's rows of ∂x, written),
 *   gw     += alpha·Gᵀ·x_tile      (C×D: ∂W, added to),
 * W (C×D), x_tile (rows×D) and the outputs with leading dimension ld, all of `dtype`. */
ploss_status ploss_cpu_tile_gradient_products(ploss_ctx_t *ctx, const void *g, int64_t rows, int64_t C, int64_t D,
                                              double alpha, const void *w, const void *x_tile, int64_t ld,
                                              ploss_dtype dtype, void *gx_tile, void *gw);

/* Scratch of one backend call, all of it taken by ploss_cpu_rows_alloc. */
typedef struct {
    int nthreads;     /* team size the rows were sized for: omp_get_max_threads() at alloc */
    size_t cls;       /* C, or 0 without samples (C may then be huge and is not allocated) */
    size_t row_elems; /* doubles per thread: k·cls                                          */
    int64_t nchunks;  /* ⌈M / chunk⌉ reduction chunks                                       */
    double *rows;     /* nthreads × row_elems doubles, zeroed; NULL when k = 0              */
    double *partial;  /* nchunks partial sums, zeroed (at least one element)                */
} ploss_cpu_rows;

/* Takes the buffers of a pass over M samples of C classes in chunks of `chunk` samples:
 * k rows of C doubles per OpenMP thread (k = 0: none) and the per-chunk partial sums.
 * Call it before the first write to any output.  A size that does not fit in ptrdiff_t
 * counts as an allocation failure, not a short buffer.
 * Returns PLOSS_OK, or PLOSS_ERR_OUT_OF_MEMORY with a message naming `loss` (nothing is
 * left allocated, *b is then all zero/NULL and may still be passed to ploss_cpu_rows_free). */
ploss_status ploss_cpu_rows_alloc(ploss_cpu_rows *b, const char *loss, int64_t M, int64_t C, int k,
                                  int64_t chunk);

/* Row buffer of OpenMP thread `thread` (0 <= thread < b->nthreads): b->row_elems doubles. */
double *ploss_cpu_rows_thread(const ploss_cpu_rows *b, int thread);

/* Stores the reduced loss: the chunk partials summed in chunk order (independent of the
 * number of threads), divided by `divisor` for MEAN (0/0 = NaN when nothing is valid, as
 * PyTorch), into loss[0] of dtype loss_dtype.  Stores nothing for NONE. */
void ploss_cpu_rows_store_loss(const ploss_cpu_rows *b, ploss_reduction reduction, double divisor, void *loss,
                               ploss_dtype loss_dtype);

/* Row I/O of the kernels that compute in float (f32, f16 and bf16 data) or double (f64
 * data): n elements at base + off + k·stride (elements) converted into dst[0..n), and back
 * (round to nearest even).  The dtype is switched on once per row, not per element. */
void ploss_cpu_load_f32(float *dst, const void *base, ploss_dtype dt, int64_t off, int64_t stride, int64_t n);
void ploss_cpu_load_f64(double *dst, const void *base, ploss_dtype dt, int64_t off, int64_t stride, int64_t n);
void ploss_cpu_store_f32(void *base, ploss_dtype dt, int64_t off, int64_t stride, int64_t n, const float *src);
void ploss_cpu_store_f64(void *base, ploss_dtype dt, int64_t off, int64_t stride, int64_t n, const double *src);

/* Stores n zeros at base + off + k·stride (elements) of dtype dt, a block at a time. */
void ploss_cpu_store_zeros(void *base, ploss_dtype dt, int64_t off, int64_t stride, int64_t n);

/* Frees what ploss_cpu_rows_alloc took (safe on a failed or freed *b) and zeroes *b. */
void ploss_cpu_rows_free(ploss_cpu_rows *b);

#endif
