/*
 * test_smem_epilogue.c -- an epilogue that reads a tile TMA brought into shared memory
 * (a residual R) and adds it to a wgmma accumulator: C = A @ B + R.
 *
 * The layout pass gives such a smem_load the accumulator's layout when every use ends in
 * an elementwise op on the accumulator, through a cast (codegen/layout_prefer.c,
 * cg_prefer_loads), so the epilogue moves no data between threads: each thread reads
 * its own column pairs straight from the swizzled tile, one 32-bit load a pair
 * (codegen/lower_smem.c, lower_smem_load).  Checked here: the interpreter's result, the
 * PTX (32-bit loads only, no conversion scratch in the shared memory it asks for), and
 * on the GPU (skipped without one) the result for f16 and bf16 at a row tail.
 */
#include "ir.h"
#include "testutil.h"

#include <math.h>

#define I32(k, v) loom_const_i(k, LOOM_I32, v)

enum { BM = 64, K = 64, N = 128 };

/* C [M, N] f32 = A [M, K] @ B [K, N] + R [M, N], one 64-row tile a program. */
static loom_kernel *residual_gemm(int64_t M, loom_dtype dt)
{
    loom_kernel *k = loom_kernel_create("residual_gemm", 8);
    loom_val A = loom_arg_tensor(k, "A", dt, LOOM_SHAPE2(M, K), LOOM_IN);
    loom_val B = loom_arg_tensor(k, "B", dt, LOOM_SHAPE2(K, N), LOOM_IN);
    loom_val R = loom_arg_tensor(k, "R", dt, LOOM_SHAPE2(M, N), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F32, LOOM_SHAPE2(M, N), LOOM_OUT);
    loom_val as = loom_smem_alloc(k, dt, LOOM_SHAPE2(BM, K), 1, LOOM_SWIZZLE_128);
    loom_val bs = loom_smem_alloc(k, dt, LOOM_SHAPE2(K, N), 1, LOOM_SWIZZLE_128);
    loom_val rs = loom_smem_alloc(k, dt, LOOM_SHAPE2(BM, N), 1, LOOM_SWIZZLE_128);
    loom_val full = loom_mbar_alloc(k, 1, 1);
    loom_val m0 = loom_mul(k, loom_program_id(k, 0), I32(k, BM)), zero = I32(k, 0);

    loom_region_op pt = loom_task_begin(k, 4, 40, 1);
    loom_mbar_expect(k, full, zero, (BM * K + K * N + BM * N) * 2);
    loom_tma_load(k, A, ((loom_val[]){m0, zero}), loom_smem_slot(k, as, zero), full, zero);
    loom_tma_load(k, B, ((loom_val[]){zero, zero}), loom_smem_slot(k, bs, zero), full, zero);
    loom_tma_load(k, R, ((loom_val[]){m0, zero}), loom_smem_slot(k, rs, zero), full, zero);
    loom_task_end(k, pt);

    loom_region_op ct = loom_task_begin(k, 4, 232, 1);
    loom_mbar_wait(k, full, zero, zero);
    loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(BM, N));
    loom_val acc = loom_wgmma(k, loom_smem_slot(k, as, zero), loom_smem_slot(k, bs, zero), acc0);
    loom_wgmma_commit(k);
    loom_region_op wt = loom_wgmma_wait(k, 0, 1, &acc);
    acc = loom_wgmma_result(k, wt, 0);
    loom_val r = loom_cast(k, loom_smem_load(k, loom_smem_slot(k, rs, zero)), LOOM_F32);
    loom_store(k, C, ((loom_val[]){m0, zero}), loom_add(k, acc, r), LOOM_NONE);
    loom_task_end(k, ct);
    return k;
}

typedef struct io {
    int64_t M;
    uint16_t *a, *b, *r;
    float *c, *ref;
} io;

static uint16_t pick(loom_dtype dt, unsigned *seed, float *f)
{
    *seed = *seed * 1103515245u + 12345u;
    float x = (float)((*seed >> 8) % 2001) / 1000.0f - 1.0f;
    uint16_t h = dt == LOOM_F16 ? ir_f32_to_f16(x) : ir_f32_to_bf16(x);
    *f = dt == LOOM_F16 ? ir_f16_to_f32(h) : ir_bf16_to_f32(h);
    return h;
}

static io make_io(int64_t M, loom_dtype dt)
{
    io x = {.M = M};
    x.a = malloc((size_t)(M * K) * 2);
    x.b = malloc((size_t)(K * N) * 2);
    x.r = malloc((size_t)(M * N) * 2);
    x.c = calloc((size_t)(M * N), 4);
    x.ref = calloc((size_t)(M * N), 4);
    float *af = malloc((size_t)(M * K) * 4), *bf = malloc((size_t)(K * N) * 4);
    cr_assert(x.a && x.b && x.r && x.c && x.ref && af && bf);
    unsigned seed = 5;
    for (int64_t i = 0; i < M * K; i++)
        x.a[i] = pick(dt, &seed, &af[i]);
    for (int64_t i = 0; i < K * N; i++)
        x.b[i] = pick(dt, &seed, &bf[i]);
    for (int64_t i = 0; i < M * N; i++) /* the residual, then the product on top */
        x.r[i] = pick(dt, &seed, &x.ref[i]);
    for (int64_t m = 0; m < M; m++)
        for (int64_t q = 0; q < K; q++)
            for (int64_t j = 0; j < N; j++)
                x.ref[m * N + j] += af[m * K + q] * bf[q * N + j];
    free(af);
    free(bf);
    return x;
}

static void check_c(const io *x)
{
    for (int64_t i = 0; i < x->M * N; i++)
        cr_assert(fabsf(x->c[i] - x->ref[i]) <= 1e-3f * (1 + fabsf(x->ref[i])), "C[%lld, %lld] = %g, want %g",
                  (long long)(i / N), (long long)(i % N), x->c[i], x->ref[i]);
}

static void free_io(io *x)
{
    free(x->a);
    free(x->b);
    free(x->r);
    free(x->c);
    free(x->ref);
}

Test(smem_epilogue, residual_on_the_interpreter)
{
    const int64_t M = 130; /* three tiles, the last with 2 rows */
    loom_kernel *k = residual_gemm(M, LOOM_F16);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    io x = make_io(M, LOOM_F16);
    int grid[3] = {3, 1, 1};
    targ a[] = {TA_BUF(x.a, M * K * 2), TA_BUF(x.b, K * N * 2), TA_BUF(x.r, M * N * 2), TA_BUF(x.c, M * N * 4)};
    T_RUN_OK(k, grid, a, 4);
    check_c(&x);
    free_io(&x);
    loom_kernel_destroy(k);
}

Test(smem_epilogue, residual_is_read_in_the_accumulator_layout)
{
    for (int bf = 0; bf < 2; bf++) {
        loom_kernel *k = residual_gemm(130, bf ? LOOM_BF16 : LOOM_F16);
        char *ptx = NULL, err[2048];
        size_t smem = 0;
        cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, &smem, err, sizeof err), LOOM_OK, "%s", err);
        /* [64, 128] f32 accumulator: 64 registers a thread, 32 column pairs */
        cr_expect_eq(t_count(ptx, "ld.shared.b32") + t_count(ptx, "ld.shared.u32"), 32, "one 32-bit load a pair: %d",
                     t_count(ptx, "ld.shared.b32") + t_count(ptx, "ld.shared.u32"));
        cr_expect_eq(t_count(ptx, "ld.shared.b16") + t_count(ptx, "ld.shared.u16"), 0, "no 16-bit loads");
        size_t tiles = (BM * K + K * N + BM * N) * 2;
        cr_expect(smem <= tiles + 1024, "no conversion scratch: %zu bytes of shared memory for %zu of tiles", smem,
                  tiles);
        free(ptx);
        loom_kernel_destroy(k);
    }
}

Test(smem_epilogue, residual_on_the_gpu)
{
    loom_runtime *rt = t_gpu_or_skip();
    const int64_t M = 130;
    for (int bf = 0; bf < 2; bf++) {
        loom_dtype dt = bf ? LOOM_BF16 : LOOM_F16;
        loom_kernel *k = residual_gemm(M, dt);
        io x = make_io(M, dt);
        loom_buffer *a = loom_buffer_create(rt, (size_t)(M * K) * 2), *b = loom_buffer_create(rt, (size_t)(K * N) * 2),
                    *r = loom_buffer_create(rt, (size_t)(M * N) * 2), *c = loom_buffer_create(rt, (size_t)(M * N) * 4);
        cr_assert(a && b && r && c, "%s", loom_runtime_error(rt));
        cr_assert_eq(loom_buffer_upload(a, x.a, (size_t)(M * K) * 2), LOOM_OK);
        cr_assert_eq(loom_buffer_upload(b, x.b, (size_t)(K * N) * 2), LOOM_OK);
        cr_assert_eq(loom_buffer_upload(r, x.r, (size_t)(M * N) * 2), LOOM_OK);
        cr_assert_eq(loom_buffer_fill(c, 0xff), LOOM_OK); /* NaNs: every element must be written */
        int grid[3] = {3, 1, 1};
        loom_arg args[] = {LOOM_ARG_BUF(a), LOOM_ARG_BUF(b), LOOM_ARG_BUF(r), LOOM_ARG_BUF(c)};
        cr_assert_eq(loom_launch(rt, k, grid, args, 4), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_assert_eq(loom_buffer_download(c, x.c, (size_t)(M * N) * 4), LOOM_OK, "%s", loom_runtime_error(rt));
        check_c(&x);
        loom_buffer *bs[] = {a, b, r, c};
        for (int i = 0; i < 4; i++)
            loom_buffer_destroy(bs[i]);
        free_io(&x);
        loom_kernel_destroy(k);
    }
    loom_runtime_destroy(rt);
}
