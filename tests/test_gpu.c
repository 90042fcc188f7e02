/*
 * test_gpu.c -- every template on the GPU against its independent plain-C reference, at
 * odd shapes (tails in every tiled dim, shuffled mappings, one user per candidate), with
 * outputs poisoned first and fresh random inputs per seed.  The same checks run on the
 * interpreter, so a disagreement names the side that is wrong.  Skipped without a GPU.
 */
#include <criterion/criterion.h>

#include "loom.h"
#include "testutil.h"

#include <stdio.h>


static void check(loom_runtime *rt, const char *name, const char *shape, const char *config, uint64_t seed)
{
    const loom_template *t = loom_template_find(name);
    cr_assert(t, "template %s", name);
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char err[512], rep[1024];
    cr_assert_eq(loom_params_parse(t->shape, t->nshape, shape, sh, err, sizeof err), 0, "%s", err);
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, config, cf, err, sizeof err), 0, "%s", err);
    loom_status st = loom_template_check(rt, t, sh, cf, seed, rep, sizeof rep);
    cr_expect_eq(st, LOOM_OK, "%s [%s] [%s]: %s", name, shape, config, rep);
}

static const char *bcast_shapes[] = {
    "B=70,U=3,M=45,N=100,dtype=f32",        "B=77,U=5,M=433,N=256,dtype=f16,shuffle=1",
    "B=33,U=33,M=17,N=9,dtype=bf16",        "B=5,U=40,M=64,N=256,dtype=f16,shuffle=1",
    "B=1,U=1,M=1,N=1,dtype=f32",
};
static const char *bcast_configs[] = {"BM=8,BN=256,warps=4", "BM=16,BN=64,warps=4", "BM=3,BN=40,warps=1",
                                      "BM=32,BN=256,warps=8"};

/* Every shape under every config, on the GPU and on the interpreter. */
static void check_all(const char *name, const char *const *shapes, size_t ns, const char *const *configs,
                      size_t nc, uint64_t seed)
{
    loom_runtime *rt = t_gpu_or_skip();
    loom_runtime *ri = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    for (size_t s = 0; s < ns; s++)
        for (size_t c = 0; c < nc; c++) {
            check(rt, name, shapes[s], configs[c], seed + s);
            check(ri, name, shapes[s], configs[c], seed + s);
        }
    loom_runtime_destroy(ri);
    loom_runtime_destroy(rt);
}

#define COUNT(a) (sizeof(a) / sizeof *(a))

Test(gpu, broadcast_add_matches_reference)
{
    check_all("ikbo_broadcast_add", bcast_shapes, COUNT(bcast_shapes), bcast_configs, COUNT(bcast_configs), 100);
}

static const char *sm_shapes[] = {"R=37,N=77,dtype=f32", "R=64,N=1000,dtype=f16", "R=5,N=4096,dtype=f32",
                                  "R=33,N=300,dtype=bf16", "R=1,N=1,dtype=f32"};
static const char *sm_configs[] = {"BM=1,warps=4", "BM=4,warps=4", "BM=2,warps=8", "BM=1,warps=1"};

Test(gpu, row_softmax_matches_reference)
{
    check_all("row_softmax", sm_shapes, COUNT(sm_shapes), sm_configs, COUNT(sm_configs), 200);
}
