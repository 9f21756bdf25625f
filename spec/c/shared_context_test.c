/*
 * shared_context_test.c — one CPU context shared by several threads (the contract in
 * ploss.h's context section): f16 and bf16 GEMMs of several sizes (the CPU backend needs
 * scratch memory to convert them to f32) and cross-entropy / sigmoid focal losses run
 * concurrently on one context, and every result is bitwise the result of the same call
 * made alone on another context.  The lone results are first checked against naive
 * products and losses.  Under AddressSanitizer (CI's build-asan) a scratch buffer freed
 * or regrown by one thread while another uses it is a heap-use-after-free report.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

#define THREADS 6
#define ITERS 25
#define MAX_JOBS 32

/* ---- f16 / bf16 bits (values used here are exact in both) ---- */

static uint16_t f16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, e = (u >> 23) & 0xFFu, m = u & 0x7FFFFFu;
    if (e == 0)
        return (uint16_t)sign; /* ±0 */
    return (uint16_t)(sign | ((e - 112u) << 10) | (m >> 13)); /* normal, exact */
}

static float f16_value(uint16_t h)
{
    int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                                       : ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

static uint16_t bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16); /* exact for the values used */
}

static float bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int is_f16(DLDataType t) { return t.code == kDLFloat && t.bits == 16; }
static size_t dt_size(DLDataType t) { return t.bits / 8u; }

/* element i of a float array of dtype t, as a double */
static double load(const void *p, DLDataType t, size_t i)
{
    if (t.bits == 64)
        return ((const double *)p)[i];
    if (t.bits == 32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return is_f16(t) ? f16_value(h) : bf16_value(h);
}

static void store_exact(void *p, DLDataType t, size_t i, float v)
{
    if (t.bits == 32)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = is_f16(t) ? f16_bits(v) : bf16_bits(v);
}

static uint64_t lcg = 0x2545F4914F6CDD1Dull;
static unsigned next_u(void)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(lcg >> 33);
}
/* a multiple of 1/8 in [-4, 4]: exact in f16 and bf16, and so are sums of up to 2^12 of
 * their products in f32 (multiples of 1/64 below 2^18) */
static float small_value(void) { return (float)((int)(next_u() % 65) - 32) / 8.0f; }

/* ---- jobs ---- */

typedef enum { GEMM, CROSS_ENTROPY, SIGMOID_FOCAL } job_kind;

typedef struct job {
    job_kind kind;
    DLDataType dt, c_dt;    /* operand / input dtype; GEMM's c dtype */
    int64_t m, n, k;        /* GEMM; losses: m = samples, n = classes */
    int trans_a, trans_b;
    double beta;
    void *a, *b, *c_init;   /* GEMM operands; losses: a = input, b = target */
    size_t out_bytes[2];    /* GEMM: c; losses: loss, grad_input */
    unsigned char *ref[2];  /* the outputs of the call made alone */
} job;

static job jobs[MAX_JOBS];
static int njobs;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static void add_gemm(DLDataType dt, DLDataType c_dt, int64_t m, int64_t n, int64_t k, int ta, int tb,
                     double beta)
{
    job *j = &jobs[njobs++];
    *j = (job){GEMM, dt, c_dt, m, n, k, ta, tb, beta, NULL, NULL, NULL, {0}, {0}};
    j->a = xmalloc((size_t)(m * k) * dt_size(dt));
    j->b = xmalloc((size_t)(k * n) * dt_size(dt));
    j->c_init = xmalloc((size_t)(m * n) * dt_size(c_dt));
    for (int64_t i = 0; i < m * k; ++i)
        store_exact(j->a, dt, (size_t)i, small_value());
    for (int64_t i = 0; i < k * n; ++i)
        store_exact(j->b, dt, (size_t)i, small_value());
    for (int64_t i = 0; i < m * n; ++i)
        store_exact(j->c_init, c_dt, (size_t)i, small_value());
    j->out_bytes[0] = (size_t)(m * n) * dt_size(c_dt);
}

static void add_loss(job_kind kind, DLDataType dt, int64_t samples, int64_t classes)
{
    job *j = &jobs[njobs++];
    memset(j, 0, sizeof *j);
    j->kind = kind;
    j->dt = dt;
    j->m = samples;
    j->n = classes;
    const size_t count = (size_t)(samples * classes);
    j->a = xmalloc(count * dt_size(dt));
    for (size_t i = 0; i < count; ++i)
        store_exact(j->a, dt, i, small_value());
    if (kind == CROSS_ENTROPY) {
        int64_t *y = xmalloc((size_t)samples * sizeof *y);
        for (int64_t i = 0; i < samples; ++i)
            y[i] = (int64_t)(next_u() % (unsigned)classes);
        j->b = y;
    } else {
        float *y = xmalloc(count * sizeof *y);
        for (size_t i = 0; i < count; ++i)
            y[i] = (float)(next_u() % 2);
        j->b = y;
    }
    j->out_bytes[0] = sizeof(float);
    j->out_bytes[1] = count * dt_size(dt);
}

/* Runs job j on ctx into out[] (GEMM's c starts from c_init). */
static ploss_status run_job(ploss_ctx_t *ctx, const job *j, unsigned char *out[2])
{
    int64_t sa[2], sb[2], sc[2] = {j->m, j->n}, s1[1] = {j->m};
    if (j->kind == GEMM) {
        memcpy(out[0], j->c_init, j->out_bytes[0]);
        sa[0] = j->trans_a ? j->k : j->m;
        sa[1] = j->trans_a ? j->m : j->k;
        sb[0] = j->trans_b ? j->n : j->k;
        sb[1] = j->trans_b ? j->k : j->n;
        DLTensor a = cpu_tensor(j->a, j->dt, 2, sa, NULL), b = cpu_tensor(j->b, j->dt, 2, sb, NULL);
        DLTensor c = cpu_tensor(out[0], j->c_dt, 2, sc, NULL);
        return ploss_gemm(ctx, (ploss_transpose)j->trans_a, (ploss_transpose)j->trans_b, 1.0, &a, &b,
                          j->beta, &c);
    }
    DLTensor in = cpu_tensor(j->a, j->dt, 2, sc, NULL), loss = cpu_tensor(out[0], dt_f32, 0, NULL, NULL);
    DLTensor grad = cpu_tensor(out[1], j->dt, 2, sc, NULL);
    if (j->kind == CROSS_ENTROPY) {
        DLTensor y = cpu_tensor(j->b, dt_i64, 1, s1, NULL);
        return ploss_cross_entropy_fused(ctx, &in, &y, NULL, NULL, &loss, &grad);
    }
    DLTensor y = cpu_tensor(j->b, dt_f32, 2, sc, NULL);
    return ploss_sigmoid_focal_fused(ctx, &in, &y, NULL, &loss, &grad);
}

/* ---- the lone results against naive ones ---- */

static void check_gemm(const job *j)
{
    double worst = 0;
    const double tol = j->c_dt.bits == 32 ? 0.0 : is_f16(j->c_dt) ? ldexp(1, -11) : ldexp(1, -8);
    for (int64_t i = 0; i < j->m; ++i)
        for (int64_t q = 0; q < j->n; ++q) {
            double s = 0;
            for (int64_t p = 0; p < j->k; ++p)
                s += load(j->a, j->dt, (size_t)(j->trans_a ? p * j->m + i : i * j->k + p)) *
                     load(j->b, j->dt, (size_t)(j->trans_b ? q * j->k + p : p * j->n + q));
            s += j->beta * load(j->c_init, j->c_dt, (size_t)(i * j->n + q));
            const double got = load(j->ref[0], j->c_dt, (size_t)(i * j->n + q));
            const double err = fabs(got - s) / (fabs(s) > 1 ? fabs(s) : 1);
            worst = err > worst ? err : worst;
        }
    if (worst > tol)
        fprintf(stderr, "gemm %lldx%lldx%lld: relative error %g > %g\n", (long long)j->m,
                (long long)j->n, (long long)j->k, worst, tol);
    CHECK(worst <= tol); /* f32 output: exact (every partial sum is a float) */
}

static double softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

static void check_loss(const job *j)
{
    double total = 0, worst_grad = 0;
    const double n = (double)j->m, grad_tol = j->dt.bits == 32 ? 1e-6 : 1e-2 / n;
    for (int64_t i = 0; i < j->m; ++i) {
        const size_t row = (size_t)(i * j->n);
        if (j->kind == CROSS_ENTROPY) {
            const int64_t y = ((const int64_t *)j->b)[i];
            double mx = -INFINITY, se = 0;
            for (int64_t c = 0; c < j->n; ++c)
                mx = fmax(mx, load(j->a, j->dt, row + (size_t)c));
            for (int64_t c = 0; c < j->n; ++c)
                se += exp(load(j->a, j->dt, row + (size_t)c) - mx);
            const double lse = mx + log(se);
            total += lse - load(j->a, j->dt, row + (size_t)y);
            for (int64_t c = 0; c < j->n; ++c) {
                const double g = (exp(load(j->a, j->dt, row + (size_t)c) - lse) - (c == y)) / n;
                worst_grad = fmax(worst_grad, fabs(g - load(j->ref[1], j->dt, row + (size_t)c)));
            }
        } else { /* torchvision: alpha_t·(1 − p_t)^2·BCE, alpha = 0.25, mean over elements */
            for (int64_t c = 0; c < j->n; ++c) {
                const double x = load(j->a, j->dt, row + (size_t)c);
                const double y = ((const float *)j->b)[row + (size_t)c];
                const double p = 1 / (1 + exp(-x)), q = y * (1 - p) + (1 - y) * p;
                total += (0.25 * y + 0.75 * (1 - y)) * q * q * (y * softplus(-x) + (1 - y) * softplus(x));
            }
        }
    }
    const double want = total / (j->kind == CROSS_ENTROPY ? n : n * (double)j->n);
    const double got = *(const float *)j->ref[0];
    if (fabs(got - want) > 1e-5 * fabs(want))
        fprintf(stderr, "%s: loss %.9g, naive %.9g\n", j->kind == CROSS_ENTROPY ? "cross_entropy" : "sigmoid_focal", got, want);
    CHECK(fabs(got - want) <= 1e-5 * fabs(want));
    if (j->kind == CROSS_ENTROPY)
        CHECK(worst_grad <= grad_tol);
}

/* ---- the threads ---- */

static ploss_ctx_t *shared;
static atomic_int mismatches, call_errors;

static void *worker(void *arg)
{
    const int id = (int)(intptr_t)arg;
    unsigned char *out[MAX_JOBS][2];
    for (int j = 0; j < njobs; ++j)
        for (int o = 0; o < 2; ++o)
            out[j][o] = xmalloc(jobs[j].out_bytes[o]);
    for (int it = 0; it < ITERS; ++it)
        for (int s = 0; s < njobs; ++s) {
            const int j = (s + id * 5 + it) % njobs; /* threads run different jobs at once */
            if (run_job(shared, &jobs[j], out[j]) != PLOSS_OK) {
                if (atomic_fetch_add(&call_errors, 1) == 0)
                    fprintf(stderr, "thread %d, job %d: %s\n", id, j, ploss_last_error());
                continue;
            }
            for (int o = 0; o < 2; ++o)
                if (jobs[j].out_bytes[o] && memcmp(out[j][o], jobs[j].ref[o], jobs[j].out_bytes[o])) {
                    if (atomic_fetch_add(&mismatches, 1) < 5)
                        fprintf(stderr, "thread %d, iteration %d, job %d: output %d differs from the lone call\n",
                                id, it, j, o);
                }
        }
    for (int j = 0; j < njobs; ++j)
        for (int o = 0; o < 2; ++o)
            free(out[j][o]);
    return NULL;
}

int main(void)
{
    const DLDataType low[2] = {dt_f16, dt_bf16};
    for (int d = 0; d < 2; ++d) {
        /* growing sizes, both output dtypes, stored and transposed operands */
        add_gemm(low[d], dt_f32, 4, 5, 3, 0, 0, 0.0);
        add_gemm(low[d], low[d], 33, 17, 64, 1, 0, 0.5);
        add_gemm(low[d], dt_f32, 64, 96, 160, 0, 1, 0.5);
        add_gemm(low[d], low[d], 128, 40, 100, 1, 1, 0.0);
        add_gemm(low[d], dt_f32, 7, 200, 31, 0, 0, 1.0);
        add_gemm(low[d], low[d], 150, 150, 150, 0, 0, 0.0);
    }
    add_loss(CROSS_ENTROPY, dt_f32, 64, 37);
    add_loss(CROSS_ENTROPY, dt_bf16, 100, 10);
    add_loss(SIGMOID_FOCAL, dt_f32, 48, 20);

    DLDevice cpu = {kDLCPU, 0};
    ploss_ctx_t *alone = NULL;
    CHECK_OK(ploss_ctx_create(cpu, &alone));
    CHECK_OK(ploss_ctx_create(cpu, &shared));
    if (!alone || !shared)
        return check_report("shared_context");
    for (int j = 0; j < njobs; ++j) {
        for (int o = 0; o < 2; ++o)
            jobs[j].ref[o] = xmalloc(jobs[j].out_bytes[o]);
        CHECK_OK(run_job(alone, &jobs[j], jobs[j].ref));
        if (jobs[j].kind == GEMM)
            check_gemm(&jobs[j]);
        else
            check_loss(&jobs[j]);
    }
    ploss_ctx_destroy(alone);

    ploss_memory_stats before, after;
    CHECK_OK(ploss_memory_stats_get(cpu, &before));
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; ++i)
        CHECK(pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < THREADS; ++i)
        pthread_join(th[i], NULL);
    CHECK(atomic_load(&call_errors) == 0);
    CHECK(atomic_load(&mismatches) == 0);
    /* the context keeps no scratch memory between calls */
    CHECK_OK(ploss_memory_stats_get(cpu, &after));
    CHECK(after.current_bytes == before.current_bytes);
    CHECK(after.alloc_count > before.alloc_count); /* the f16/bf16 GEMMs did allocate */

    ploss_ctx_destroy(shared);
    for (int j = 0; j < njobs; ++j) {
        free(jobs[j].a);
        free(jobs[j].b);
        free(jobs[j].c_init);
        free(jobs[j].ref[0]);
        free(jobs[j].ref[1]);
    }
    return check_report("shared_context");
}
