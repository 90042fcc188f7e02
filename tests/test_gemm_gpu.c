/*
 * test_gemm_gpu.c -- the gemm template on the GPU against its plain-C reference, in every
 * consumer scheme: cooperative (the consumer warp groups split a tile), ping-pong (two
 * warp groups take turns on whole tiles) and split (two share each tile by rows), each with the epilogue storing from registers or
 * through shared memory and TMA (tmastore=1), at shapes with tails in M, N and K, batches with
 * A shared or not, every output dtype, and CTA counts that leave one replica a tile short
 * (ctas=2, 3, 5 below).  Skipped without a GPU; the interpreter runs the same template in
 * test_hopper_ir.c.
 */
#include <criterion/criterion.h>

#include "loom.h"
#include "nvrtc_ref.h"
#include "rt.h"
#include "testutil.h"

static void check(loom_runtime *rt, const char *shape, const char *config, uint64_t seed)
{
    const loom_template *t = loom_template_find("gemm");
    cr_assert(t);
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char err[512], rep[1024];
    cr_assert_eq(loom_params_parse(t->shape, t->nshape, shape, sh, err, sizeof err), 0, "%s", err);
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, config, cf, err, sizeof err), 0, "%s", err);
    if (!t->valid(sh, cf, err, sizeof err)) /* e.g. an f32 staging buffer that does not fit */
        return;
    loom_status st = loom_template_check(rt, t, sh, cf, seed, rep, sizeof rep);
    cr_expect_eq(st, LOOM_OK, "gemm [%s] [%s]: %s", shape, config, rep);
}

static const char *const shapes[] = {
    "M=300,N=200,K=136",
    "M=433,N=256,K=872,batch=6,dtype=bf16",
    "M=77,N=72,K=40,batch=5,dtype=bf16,odtype=f32,ashared=0",
    "M=600,N=520,K=392,odtype=f32",
};

/* Every config at every shape (the inputs' seed: seed + the shape's index). */
static void check_configs(const char *const *configs, size_t n, uint64_t seed)
{
    loom_runtime *rt = t_gpu_or_skip();
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (size_t c = 0; c < n; c++)
            check(rt, shapes[s], configs[c], seed + s);
    loom_runtime_destroy(rt);
}

Test(gemm_gpu, cooperative)
{
    static const char *const configs[] = {"", "BM=128,BN=256,cwarps=8,tmastore=0", "BM=128,cwarps=8,BN=128,stages=3,ctas=3,tmastore=0",
                                          "BM=64,cwarps=4,BN=64,stages=2,ctas=0,tmastore=0",
                                          "BM=128,BN=256,cwarps=8,tmastore=1,stages=3", "BM=64,cwarps=4,BN=256,tmastore=1,ctas=0"};
    check_configs(configs, sizeof configs / sizeof *configs, 100);
}

Test(gemm_gpu, pingpong)
{
    static const char *const configs[] = {"BM=128,cwarps=8,consumers=1,BN=128", "BM=128,cwarps=8,consumers=1,BN=128,ctas=2,stages=6",
                                          "cwarps=8,consumers=1,BM=64,BN=256,stages=5,ctas=5",
                                          "cwarps=8,consumers=1,BM=64,BN=64,stages=2,ctas=3",
                                          "cwarps=8,consumers=1,BM=64,BN=256,stages=4,tmastore=1",
                                          "BM=128,cwarps=8,consumers=1,BN=128,stages=5,ctas=3,tmastore=1",
                                          "BM=128,cwarps=8,consumers=1,BN=128,stages=2,ctas=2,tmastore=1"};
    check_configs(configs, sizeof configs / sizeof *configs, 200);
}

Test(gemm_gpu, split)
{
    static const char *const configs[] = {"BM=128,BN=256,cwarps=8,consumers=2", "BM=128,BN=256,cwarps=8,consumers=2,tmastore=1", "BM=128,BN=256,cwarps=8,consumers=2,tmastore=1,ctas=3,stages=2",
                                          "cwarps=8,consumers=2,BM=256,BN=128,tmastore=1,ctas=5",
                                          "BM=128,cwarps=8,consumers=2,BN=64,stages=3,ctas=0"};
    check_configs(configs, sizeof configs / sizeof *configs, 300);
}

/* BK=32: A in 64-byte swizzled rows, twice the ring slots for the same shared memory */
Test(gemm_gpu, bk32)
{
    static const char *const configs[] = {"BM=128,BN=256,cwarps=8,BK=32,stages=8,tmastore=0", "BK=32,stages=6,BM=128,BN=256,cwarps=8,consumers=2,tmastore=1,ctas=3",
                                          "BK=32,stages=8,BN=256,cwarps=8,consumers=1,BM=64,tmastore=1",
                                          "BK=32,stages=9,BM=64,cwarps=4,BN=256,tmastore=1"};
    check_configs(configs, sizeof configs / sizeof *configs, 400);
}

/* Shapes whose rows TMA cannot address: K % 8 != 0 (A filled by the producer's loads),
 * N % 8 != 0 (B filled, C stored from the registers, masked), both, and the smallest
 * (M, N, K = 1), against the plain-C reference. */
Test(gemm_gpu, odd_shapes)
{
    static const char *const odd[] = {
        "M=77,N=13,K=29",          "M=1,N=1,K=1",           "M=77,N=3,K=7,dtype=bf16", "M=300,N=8,K=7",
        "M=300,N=13,K=8",          "M=65,N=6,K=24,odtype=f32", "M=130,N=130,K=70,batch=3,ashared=0,dtype=bf16",
        "M=257,N=301,K=133,odtype=f32", "M=200,N=1001,K=1000,dtype=bf16,odtype=bf16",
    };
    static const char *const configs[] = {"tmastore=0", "BM=128,BN=256,cwarps=8,tmastore=0",
                                          "BM=128,BN=128,cwarps=8,consumers=1,tmastore=0,ctas=3",
                                          "BM=128,BN=128,cwarps=8,consumers=2,tmastore=0,stages=3",
                                          "BK=32,stages=6,BM=128,BN=128,cwarps=8,tmastore=0"};
    loom_runtime *rt = t_gpu_or_skip();
    for (size_t s = 0; s < sizeof odd / sizeof *odd; s++)
        for (size_t c = 0; c < sizeof configs / sizeof *configs; c++)
            check(rt, odd[s], configs[c], 500 + s);
    loom_runtime_destroy(rt);
}

/* A large odd shape against the NVRTC reference (independent of loom; the plain-C one
 * would take a minute): C [4097, 3001] = A [4097, 1000] @ B [1000, 3001], f16 and bf16,
 * at the config loomc and the tuner fall back on and at a two-consumer one. */
static void big_odd(loom_runtime *rt, nvref_gemm *ref, loom_dtype dt, const char *config)
{
    const loom_template *t = loom_template_find("gemm");
    int64_t M = 4097, N = 3001, K = 1000;
    char shape[128], err[1024];
    snprintf(shape, sizeof shape, "M=%lld,N=%lld,K=%lld,dtype=%s", (long long)M, (long long)N, (long long)K,
             loom_dtype_name(dt));
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    cr_assert_eq(loom_params_parse(t->shape, t->nshape, shape, sh, err, sizeof err), 0, "%s", err);
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, config, cf, err, sizeof err), 0, "%s", err);
    loom_kernel *k = t->build(sh, cf, err, sizeof err);
    cr_assert_not_null(k, "%s", err);
    loom_buffer *a = loom_buffer_create(rt, (size_t)(M * K) * 2), *b = loom_buffer_create(rt, (size_t)(K * N) * 2);
    loom_buffer *c = loom_buffer_create(rt, (size_t)(M * N) * 2);
    cr_assert(a && b && c);
    cr_assert_eq(nvref_gemm_fill(ref, rt_buffer_dptr(a), dt, M * K, 7, -1, 1, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(nvref_gemm_fill(ref, rt_buffer_dptr(b), dt, K * N, 8, -1, 1, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(loom_buffer_fill(c, 0xff), LOOM_OK);
    int grid[3];
    t->grid(sh, cf, grid);
    loom_arg args[] = {LOOM_ARG_BUF(a), LOOM_ARG_BUF(b), LOOM_ARG_BUF(c)};
    cr_assert_eq(loom_launch(rt, k, grid, args, 3), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_runtime_sync(rt, 60000), LOOM_OK, "%s", loom_runtime_error(rt));
    nvref_gemm_shape ns = {M, N, K, 1, 1, dt};
    nvref_gemm_report rep;
    cr_assert_eq(nvref_gemm_check(ref, &ns, rt_buffer_dptr(a), rt_buffer_dptr(b), rt_buffer_dptr(c), LOOM_F16, &rep,
                                  err, sizeof err),
                 LOOM_OK, "%s", err);
    cr_expect_eq(rep.bad, 0,
                 "gemm %s [%s]: %llu of %llu outside the tolerance (%llu not finite); first at %lld: %g vs %g "
                 "(tol %g)",
                 shape, config, (unsigned long long)rep.bad, (unsigned long long)rep.checked,
                 (unsigned long long)rep.nonfinite, (long long)rep.first_bad, rep.first_out, rep.first_ref,
                 rep.first_tol);
    loom_buffer_destroy(a), loom_buffer_destroy(b), loom_buffer_destroy(c);
    loom_kernel_destroy(k);
}

Test(gemm_gpu, odd_4097x3001x1000)
{
    loom_runtime *rt = t_gpu_or_skip();
    nvref_gemm *ref;
    char err[1024];
    if (nvref_gemm_open(rt_runtime_gpu(rt), &ref, err, sizeof err) != LOOM_OK) {
        loom_runtime_destroy(rt);
        cr_skip_test("no NVRTC reference: %s", err);
    }
    static const char *const configs[] = {"BM=128,BN=256,cwarps=8,stages=2,group=8,tmastore=0",
                                          "BM=128,BN=128,cwarps=8,consumers=1,tmastore=0", "tmastore=0"};
    for (size_t c = 0; c < sizeof configs / sizeof *configs; c++) {
        big_odd(rt, ref, LOOM_F16, configs[c]);
        big_odd(rt, ref, LOOM_BF16, configs[c]);
    }
    nvref_gemm_close(ref);
    loom_runtime_destroy(rt);
}
