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
