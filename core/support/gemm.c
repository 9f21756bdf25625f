/*
 * gemm.c — the one validation path in front of the OpenBLAS and cuBLAS matrix products.
 * Views are reduced to BLAS's (pointer, transpose, leading dimension) form; a transposed
 * output is handled by computing cᵀ = op(b)ᵀ·op(a)ᵀ.  Every check runs before any write.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "dispatch.h"
#include "elementwise_space.h"
#include "gemm.h"

/* A logical matrix: rows × cols, element (r, c) at data + r·rs + c·cs. */
typedef struct {
    const char *name;
    char *data;
    int64_t rows, cols, rs, cs;
} mat;

static mat mat_of(const ploss_view *v, const char *name, int transpose)
{
    mat m = {.name = name, .data = v->data, .rows = v->shape[0], .cols = v->shape[1], .rs = v->strides[0],
             .cs = v->strides[1]};
    if (transpose) {
        m.rows = v->shape[1]; m.cols = v->shape[0];
        m.rs = v->strides[1]; m.cs = v->strides[0];
    }
    return m;
}

static mat mat_t(mat m)
{
    mat t = m;
    t.rows = m.cols; t.cols = m.rows;
    t.rs = m.cs; t.cs = m.rs;
    return t;
}

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

/* Stored row-major: unit column stride and a leading stride ≥ the row length. */
static int as_row_major(const mat *m, int64_t *ld)
{
    if (m->cols > 1 && m->cs != 1)
        return 0;
    if (m->rows <= 1) {
        *ld = max1(m->cols);
        return 1;
    }
    if (m->rs < max1(m->cols))
        return 0;
    *ld = m->rs;
    return 1;
}

static ploss_status layout_error(const mat *m, const ploss_view *v)
{
    return ploss_error(PLOSS_ERR_LAYOUT,
                       "%s: a GEMM operand needs a unit stride on one axis and a leading stride of "
                       "at least the size of that axis (a row-major or transposed view); got strides "
                       "[%lld, %lld] for shape [%lld, %lld]; pass :contiguous()",
                       m->name, (long long)v->strides[0], (long long)v->strides[1],
                       (long long)v->shape[0], (long long)v->shape[1]);
}

/* Operand in BLAS form: *trans = 0 when stored row-major, 1 when stored transposed. */
static int as_operand(const mat *m, int *trans, int64_t *ld)
{
    if (as_row_major(m, ld)) {
        *trans = 0;
        return 1;
    }
    mat t = mat_t(*m);
    if (as_row_major(&t, ld)) {
        *trans = 1;
        return 1;
    }
    return 0;
}

static ploss_status check_matrix(ploss_view *v, const DLTensor *t, const char *name, ploss_ctx_t *ctx)
{
    ploss_status st;
    if ((st = ploss_view_init(v, t, name)) || (st = ploss_view_check_device(v, ctx, name)))
        return st;
    if (v->ndim != 2) {
        char b[200];
        return ploss_error(PLOSS_ERR_SHAPE, "%s: expected a 2-D matrix, got %s", name,
                           ploss_view_describe(v, b, sizeof b));
    }
    if (!ploss_dtype_is_float(v->dtype))
        return ploss_error(PLOSS_ERR_DTYPE, "%s: expected f32, f16, bf16 or f64, got %s", name,
                           ploss_dtype_name(v->dtype));
    return PLOSS_OK;
}

ploss_status ploss_gemm(ploss_ctx_t *ctx, ploss_transpose trans_a, ploss_transpose trans_b, double alpha,
                        const DLTensor *a, const DLTensor *b, double beta, DLTensor *c)
{
    ploss_clear_error();
    ploss_status st;
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    if ((unsigned)trans_a >= PLOSS_TRANSPOSE_COUNT || (unsigned)trans_b >= PLOSS_TRANSPOSE_COUNT)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "trans_%s: %d is neither PLOSS_NO_TRANSPOSE (0) nor PLOSS_TRANSPOSE (1)",
                           (unsigned)trans_a >= PLOSS_TRANSPOSE_COUNT ? "a" : "b",
                           (unsigned)trans_a >= PLOSS_TRANSPOSE_COUNT ? (int)trans_a : (int)trans_b);
    ploss_view va, vb, vc;
    if ((st = check_matrix(&va, a, "a", ctx)) || (st = check_matrix(&vb, b, "b", ctx)) ||
        (st = check_matrix(&vc, c, "c", ctx)))
        return st;
    if (vb.dtype != va.dtype)
        return ploss_error(PLOSS_ERR_DTYPE, "b: expected the dtype of a (%s), got %s",
                           ploss_dtype_name(va.dtype), ploss_dtype_name(vb.dtype));
    const int low = va.dtype == PLOSS_F16 || va.dtype == PLOSS_BF16;
    if (vc.dtype != va.dtype && !(low && vc.dtype == PLOSS_F32))
        return ploss_error(PLOSS_ERR_DTYPE, "c: expected %s%s, got %s", ploss_dtype_name(va.dtype),
                           low ? " or f32" : "", ploss_dtype_name(vc.dtype));

    mat A = mat_of(&va, "a", trans_a == PLOSS_TRANSPOSE);
    mat B = mat_of(&vb, "b", trans_b == PLOSS_TRANSPOSE);
    mat C = mat_of(&vc, "c", 0);
    /* the inner sizes first: c's shape is only wrong once op(a)·op(b) is defined */
    if (A.cols != B.rows)
        return ploss_error(PLOSS_ERR_SHAPE,
                           "a, b: op(a) is %lld×%lld and op(b) is %lld×%lld (trans_a = %d, trans_b = %d): "
                           "op(a)'s %lld columns must equal op(b)'s %lld rows",
                           (long long)A.rows, (long long)A.cols, (long long)B.rows, (long long)B.cols,
                           (int)trans_a, (int)trans_b, (long long)A.cols, (long long)B.rows);
    if (C.rows != A.rows || C.cols != B.cols)
        return ploss_error(PLOSS_ERR_SHAPE,
                           "c: op(a) is %lld×%lld and op(b) is %lld×%lld (trans_a = %d, trans_b = %d), "
                           "so c must be %lld×%lld; got %lld×%lld",
                           (long long)A.rows, (long long)A.cols, (long long)B.rows, (long long)B.cols,
                           (int)trans_a, (int)trans_b, (long long)A.rows, (long long)B.cols,
                           (long long)C.rows, (long long)C.cols);
    if ((st = ploss_view_check_writable(&vc, "c")) || (st = ploss_check_no_alias(&vc, "c", &va, "a")) ||
        (st = ploss_check_no_alias(&vc, "c", &vb, "b")))
        return st;

    if (C.rows == 0 || C.cols == 0)
        return ploss_enter_device(ctx, "c"); /* nothing to compute */

    int64_t ldc = 0;
    if (!as_row_major(&C, &ldc)) {
        mat Ct = mat_t(C);
        if (!as_row_major(&Ct, &ldc))
            return layout_error(&C, &vc);
        /* cᵀ = op(b)ᵀ · op(a)ᵀ with cᵀ row-major */
        mat nA = mat_t(B), nB = mat_t(A);
        nA.name = "b";
        nB.name = "a";
        A = nA;
        B = nB;
        C = Ct;
    }
    ploss_gemm_problem p;
    memset(&p, 0, sizeof p);
    if (A.cols == 0) { /* k = 0: a and b are empty and never read */
        p.lda = p.ldb = 1;
    } else {
        if (!as_operand(&A, &p.trans_a, &p.lda))
            return layout_error(&A, A.name[0] == 'a' ? &va : &vb);
        if (!as_operand(&B, &p.trans_b, &p.ldb))
            return layout_error(&B, B.name[0] == 'a' ? &va : &vb);
    }
    p.m = C.rows; p.n = C.cols; p.k = A.cols;
    p.alpha = alpha; p.beta = beta;
    p.a = A.data; p.b = B.data; p.c = C.data;
    p.ab_dtype = va.dtype; p.c_dtype = vc.dtype;
    p.ldc = ldc;
    const int64_t lim = INT_MAX;
    if (p.m > lim || p.n > lim || p.k > lim || p.lda > lim || p.ldb > lim || p.ldc > lim)
        return ploss_error(PLOSS_ERR_UNSUPPORTED,
                           "a, b, c: sizes or leading strides above 2^31 − 1 (m %lld, n %lld, k %lld, "
                           "lda %lld, ldb %lld, ldc %lld) do not fit BLAS's int",
                           (long long)p.m, (long long)p.n, (long long)p.k, (long long)p.lda,
                           (long long)p.ldb, (long long)p.ldc);
    return ploss_dispatch(ctx, PLOSS_OP_GEMM, "c", &p);
}
