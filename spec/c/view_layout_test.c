/*
 * view_layout_test.c — how every entry point turns a DLTensor into a view
 * (ploss_view_init): a data pointer not aligned to the element size, and strides or sizes
 * whose byte extent is too large or leaves the address space, are PLOSS_ERR_LAYOUT naming
 * the argument, with nothing written; the largest legal extents are still accepted.  A
 * negative size is PLOSS_ERR_SHAPE.  An output's strides that share memory, or that are
 * not shown free of overlap, are LAYOUT with a message saying which.
 */
#include <stdint.h>

#include "check.h"

static ploss_ctx_t *ctx;

/* ploss_fill on `dst` is refused with LAYOUT and `fragment`; `bytes` of `guard` unchanged. */
static void fill_refused(DLTensor *dst, const unsigned char *guard, size_t bytes, const char *fragment)
{
    unsigned char before[256];
    memcpy(before, guard, bytes);
    CHECK_STATUS(ploss_fill(ctx, dst, 7.0), PLOSS_ERR_LAYOUT, fragment);
    CHECK(memcmp(before, guard, bytes) == 0);
}

static void misaligned_data(void)
{
    _Alignas(16) unsigned char buf[256];
    memset(buf, 0x5a, sizeof buf);
    int64_t shape[2] = {2, 3}, vshape[1] = {6};

    /* the pointer itself is off (byte_offset 0): every float dtype, inputs and outputs */
    DLTensor t = cpu_tensor(buf + 2, dt_f32, 2, shape, NULL);
    fill_refused(&t, buf, sizeof buf, "dst: data pointer");
    t = cpu_tensor(buf + 1, dt_f16, 2, shape, NULL);
    fill_refused(&t, buf, sizeof buf, "dst: data pointer");
    t = cpu_tensor(buf + 1, dt_bf16, 2, shape, NULL);
    fill_refused(&t, buf, sizeof buf, "not aligned to the bf16 element size (2 bytes)");
    t = cpu_tensor(buf + 4, dt_f64, 2, shape, NULL); /* 4-aligned is not enough for f64 */
    fill_refused(&t, buf, sizeof buf, "not aligned to the f64 element size (8 bytes)");
    t = cpu_tensor(buf + 4, dt_i64, 1, vshape, NULL);
    fill_refused(&t, buf, sizeof buf, "dst: data pointer");

    /* an input: src of a copy, whose destination stays untouched */
    float out[6] = {-1, -1, -1, -1, -1, -1};
    DLTensor dst = cpu_tensor(out, dt_f32, 2, shape, NULL);
    DLTensor src = cpu_tensor(buf + 3, dt_f32, 2, shape, NULL);
    CHECK_STATUS(ploss_copy(ctx, &dst, &src), PLOSS_ERR_LAYOUT, "src: data pointer");
    for (int i = 0; i < 6; ++i)
        CHECK(out[i] == -1.0f);

    /* GEMM operands: the argument named is the misaligned one */
    float a[6] = {1, 2, 3, 4, 5, 6}, c[4] = {9, 9, 9, 9};
    int64_t sa[2] = {2, 3}, sb[2] = {3, 2}, sc[2] = {2, 2};
    DLTensor ta = cpu_tensor(a, dt_f32, 2, sa, NULL), tb = cpu_tensor(buf + 2, dt_f32, 2, sb, NULL);
    DLTensor tc = cpu_tensor(c, dt_f32, 2, sc, NULL);
    CHECK_STATUS(ploss_gemm(ctx, PLOSS_NO_TRANSPOSE, PLOSS_NO_TRANSPOSE, 1.0, &ta, &tb, 0.0, &tc),
                 PLOSS_ERR_LAYOUT, "b: data pointer");
    for (int i = 0; i < 4; ++i)
        CHECK(c[i] == 9.0f);

    /* a misaligned pointer is not repaired by a byte_offset that lands on an aligned address */
    t = cpu_tensor(buf + 1, dt_f32, 2, shape, NULL);
    t.byte_offset = 3;
    fill_refused(&t, buf, sizeof buf, "dst: byte_offset 3 is not a multiple");

    /* still accepted: u8 at any address, an aligned pointer with an aligned offset, an empty
     * tensor with NULL data */
    t = cpu_tensor(buf + 1, dt_u8, 1, vshape, NULL);
    CHECK_OK(ploss_fill(ctx, &t, 3.0));
    CHECK(buf[0] == 0x5a && buf[1] == 3 && buf[6] == 3 && buf[7] == 0x5a);
    t = cpu_tensor(buf + 8, dt_f32, 1, vshape, NULL);
    t.byte_offset = 4;
    CHECK_OK(ploss_fill(ctx, &t, 2.5));
    float f[7];
    memcpy(f, buf + 8, sizeof f);
    CHECK(f[1] == 2.5f && f[6] == 2.5f);
    int64_t empty[1] = {0};
    t = cpu_tensor(NULL, dt_f64, 1, empty, NULL);
    CHECK_OK(ploss_fill(ctx, &t, 1.0));
}

static void large_strides(void)
{
    /* c, then a2, then the huge views: views reaching upwards from mem + 8 never overlap c */
    double mem[16] = {0}, *c = mem, *a2_data = mem + 4;
    unsigned char *buf = (unsigned char *)(mem + 8);
    const size_t guard = sizeof mem;
    int64_t s22[2] = {2, 2};

    /* f64 2×2 with strides {2^60, 1}: 2^60 elements (the old bound was 2^62 elements) are
     * 2^63 bytes, beyond int64 once multiplied by the element size */
    int64_t st[2] = {INT64_C(1) << 60, 1};
    DLTensor t = cpu_tensor(buf, dt_f64, 2, s22, st);
    fill_refused(&t, (unsigned char *)mem, guard, "dst: stride 1152921504606846976 of dim 0 (0-based; Lua dim 1; size 2) reaches more than 2^62 bytes");
    st[0] = -(INT64_C(1) << 60);
    fill_refused(&t, (unsigned char *)mem, guard, "dst: stride -1152921504606846976 of dim 0");

    /* each input and output of a call names itself */
    st[0] = INT64_C(1) << 60;
    DLTensor ok = cpu_tensor(c, dt_f64, 2, s22, NULL);
    DLTensor cc = cpu_tensor(c, dt_f64, 2, s22, NULL);
    CHECK_STATUS(ploss_gemm(ctx, PLOSS_NO_TRANSPOSE, PLOSS_NO_TRANSPOSE, 1.0, &t, &ok, 0.0, &cc),
                 PLOSS_ERR_LAYOUT, "a: stride");
    DLTensor a2 = cpu_tensor(a2_data, dt_f64, 2, s22, NULL);
    CHECK_STATUS(ploss_gemm(ctx, PLOSS_NO_TRANSPOSE, PLOSS_NO_TRANSPOSE, 1.0, &a2, &ok, 0.0, &t),
                 PLOSS_ERR_LAYOUT, "c: stride");
    DLTensor dst = cpu_tensor(c, dt_f64, 2, s22, NULL);
    CHECK_STATUS(ploss_copy(ctx, &dst, &t), PLOSS_ERR_LAYOUT, "src: stride");

    /* the limit is 2^62 bytes between the first and the last element: one f64 stride of
     * 2^59 + 1 is over it alone, 2^59 with the second dim's 8 bytes … */
    st[0] = (INT64_C(1) << 59) + 1;
    fill_refused(&t, (unsigned char *)mem, guard, "dst: stride 576460752303423489 of dim 0 (0-based; Lua dim 1; size 2) reaches");
    st[0] = INT64_C(1) << 59;
    fill_refused(&t, (unsigned char *)mem, guard, "dst: strides span more than 2^62 bytes");
    /* … 2^59 − 1 is not, but it reaches more than 2^56 bytes past the data pointer, further
     * than any allocation: refused all the same, naming that */
    st[0] = (INT64_C(1) << 59) - 1;
    fill_refused(&t, (unsigned char *)mem, guard, "dst: byte_offset 0 and strides reach 2^56 bytes or more past the data pointer");
    /* a byte_offset that lands there (the elements themselves are few), and one just short */
    DLTensor off = cpu_tensor(buf, dt_f64, 2, s22, NULL);
    off.byte_offset = UINT64_C(1) << 62;
    fill_refused(&off, (unsigned char *)mem, guard, "dst: byte_offset 4611686018427387904 and strides reach 2^56 bytes");
    off.byte_offset = (UINT64_C(1) << 56) - 16;
    fill_refused(&off, (unsigned char *)mem, guard, "dst: byte_offset 72057594037927920 and strides reach 2^56 bytes");
    /* a view below it is accepted, and GEMM then refuses the leading stride for BLAS's int */
    st[0] = INT64_C(1) << 31;
    CHECK_STATUS(ploss_gemm(ctx, PLOSS_NO_TRANSPOSE, PLOSS_NO_TRANSPOSE, 1.0, &t, &a2, 0.0, &cc),
                 PLOSS_ERR_UNSUPPORTED, "lda 2147483648");
    CHECK(c[0] == 0.0 && c[3] == 0.0);

    /* dims within the limit one by one, not together: 2 × 2^61 bytes */
    int64_t s3[3] = {2, 2, 2}, st3[3] = {INT64_C(1) << 59, INT64_C(1) << 59, 1};
    DLTensor t3 = cpu_tensor(buf, dt_f32, 3, s3, st3);
    fill_refused(&t3, (unsigned char *)mem, guard, "dst: strides span more than 2^62 bytes");

    /* contiguous (strides NULL): 2^61 f64 elements are 2^64 bytes */
    int64_t big[1] = {INT64_C(1) << 61};
    DLTensor tb = cpu_tensor(buf, dt_f64, 1, big, NULL);
    fill_refused(&tb, (unsigned char *)mem, guard, "dst: stride 1 of dim 0 (0-based; Lua dim 1; size 2305843009213693952) reaches");
    int64_t big2[2] = {INT64_C(1) << 31, INT64_C(1) << 31};
    tb = cpu_tensor(buf, dt_f32, 2, big2, NULL); /* 2^62 elements of 4 bytes */
    fill_refused(&tb, (unsigned char *)mem, guard, "dst: stride 2147483648 of dim 0");

    /* an empty tensor with a huge other size is bounded the same way */
    int64_t empty[2] = {0, INT64_C(1) << 62};
    int64_t est[2] = {1, 2};
    DLTensor te = cpu_tensor(buf, dt_f32, 2, empty, est);
    fill_refused(&te, (unsigned char *)mem, guard, "dst: stride 2 of dim 1");
}

static void outside_address_space(void)
{
    int64_t s4[1] = {4}, neg[1] = {-1};
    /* byte_offset that wraps the pointer around */
    DLTensor t = cpu_tensor((void *)(uintptr_t)4096, dt_f32, 1, s4, NULL);
    t.byte_offset = UINT64_MAX - 4095;
    CHECK_STATUS(ploss_fill(ctx, &t, 1.0), PLOSS_ERR_LAYOUT, "dst: byte_offset 18446744073709547520 and strides place elements outside the address space");
    /* elements above the top of the address space */
    t.byte_offset = 0;
    t.data = (void *)(UINTPTR_MAX - 7);
    CHECK_STATUS(ploss_fill(ctx, &t, 1.0), PLOSS_ERR_LAYOUT, "dst: byte_offset 0 and strides place");
    /* a negative stride that walks below address 0 */
    t = cpu_tensor((void *)(uintptr_t)8, dt_f32, 1, s4, neg);
    float out[4] = {0};
    int64_t s4b[1] = {4};
    DLTensor dst = cpu_tensor(out, dt_f32, 1, s4b, NULL);
    CHECK_STATUS(ploss_copy(ctx, &dst, &t), PLOSS_ERR_LAYOUT, "src: byte_offset 0 and strides place");
    /* the same view on real memory is fine: it ends at element 0 */
    float in[4] = {1, 2, 3, 4};
    t = cpu_tensor(in, dt_f32, 1, s4, neg);
    t.byte_offset = 3 * sizeof(float);
    CHECK_OK(ploss_copy(ctx, &dst, &t));
    CHECK(out[0] == 4.0f && out[1] == 3.0f && out[2] == 2.0f && out[3] == 1.0f);
}

/* a negative size is a SHAPE error naming its dim 0-based and as Lua's dim */
static void negative_size(void)
{
    float out[4] = {-1, -1, -1, -1};
    int64_t shape[2] = {2, -2};
    DLTensor t = cpu_tensor(out, dt_f32, 2, shape, NULL);
    CHECK_STATUS(ploss_fill(ctx, &t, 7.0), PLOSS_ERR_SHAPE, "dst: size -2 of dim 1 (0-based; Lua dim 2) is negative");
    for (int i = 0; i < 4; ++i)
        CHECK(out[i] == -1.0f);
}

/* An output's strides: a zero stride or two equal ones share memory; interleaved strides
 * that do not overlap but fail the sorted-reach test are refused as not shown free of
 * overlap (the message may not claim that they overlap); a permuted dense view is written. */
static void writable_strides(void)
{
    double out[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    int64_t shape[2] = {2, 3};
    int64_t interleaved[2] = {3, 2}; /* offsets 0 2 4 3 5 7: distinct */
    int64_t equal[2] = {2, 2}, zero[2] = {0, 1}, permuted[2] = {1, 2};
    DLTensor t = cpu_tensor(out, dt_f64, 2, shape, interleaved);
    fill_refused(&t, (const unsigned char *)out, sizeof out,
                 "dst: strides not shown free of overlap: sorted, each must exceed the furthest offset the "
                 "smaller ones reach (3 <= 4)");
    CHECK(strstr(ploss_last_error(), "share memory") == NULL);
    t.strides = equal;
    fill_refused(&t, (const unsigned char *)out, sizeof out, "dst: strides make distinct elements share memory");
    t.strides = zero;
    fill_refused(&t, (const unsigned char *)out, sizeof out, "dst: strides make distinct elements share memory");
    t.strides = permuted;
    CHECK_STATUS(ploss_fill(ctx, &t, 7.0), PLOSS_OK, "");
    for (int i = 0; i < 6; ++i)
        CHECK(out[i] == 7.0);
    CHECK(out[6] == -1.0 && out[7] == -1.0);
}

int main(void)
{
    DLDevice cpu = {kDLCPU, 0};
    if (ploss_ctx_create(cpu, &ctx) != PLOSS_OK) {
        fprintf(stderr, "ploss_ctx_create: %s\n", ploss_last_error());
        return 1;
    }
    misaligned_data();
    large_strides();
    outside_address_space();
    negative_size();
    writable_strides();
    ploss_ctx_destroy(ctx);
    return check_report("view_layout");
}
