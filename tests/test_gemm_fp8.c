/*
 * test_gemm_fp8.c -- the gemm template with FP8 inputs (dtype=e4m3 or e5m2, B given as
 * [N, K]: btrans=1) and the btrans key itself (docs/architecture.md, "FP8 gemm";
 * docs/checks.md, "FP8").
 *
 *   gemm_fp8      on the interpreter at small shapes with tails in M, N and K: every
 *                 consumer scheme, BK=128 and 64, both epilogues, clusters, a batch,
 *                 every output type, e4m3 and e5m2, and btrans=1 with f16 and bf16,
 *                 each element against the template's CPU reference within its bound
 *                 (loom_template_check); an element moved just past its bound, up and
 *                 down, or made NaN, is caught; the refusals (FP8 with btrans=0, an FP8
 *                 BK that is not one swizzle span, FP8 rows not 16 bytes apart) name
 *                 the reason; the PTX of the FP8 headline configs at 4096^3 (the
 *                 defaults, split BM=128 BN=256, ping-pong, clusters) uses the FP8
 *                 instructions and assembles with ptxas without spills.
 *   gemm_fp8_gpu  the same shapes and configs on the GPU against the CPU reference by the
 *                 FP8 bound; and large shapes (4096^3 at the split headline, K = 8192),
 *                 where that bound says little, with integer inputs whose sums are exact
 *                 in any order and precision: every element must be the NVRTC
 *                 reference's sum rounded once.  It skips without a GPU.
 */
#include "loom.h"
#include "t_nvref.h"
#include "rt.h"
#include "t_model.h"
#include "testutil.h"
#include "tpl.h"

static const loom_template *gemm(void)
{
    const loom_template *t = loom_template_find("gemm");
    cr_assert(t);
    return t;
}

static void params(const char *shape, const char *config, int64_t *sh, int64_t *cf)
{
    t_params(gemm()->shape, gemm()->nshape, shape, sh);
    t_params(gemm()->config, gemm()->nconfig, config, cf);
}

/* The template's check of (shape, config) on runtime rt: every output element within
 * its bound. */
static void check(loom_runtime *rt, const char *shape, const char *config, uint64_t seed)
{
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char why[256], rep[1024];
    params(shape, config, sh, cf);
    cr_assert(gemm()->valid(sh, cf, why, sizeof why), "gemm [%s] [%s] refused: %s", shape, config, why);
    loom_status st = loom_template_check(rt, gemm(), sh, cf, seed, rep, sizeof rep);
    cr_expect_eq(st, LOOM_OK, "gemm [%s] [%s]: %s", shape, config, rep);
}

static const char *const shapes[] = {
    "M=70,N=40,K=200,dtype=e4m3,btrans=1",
    "M=65,N=72,K=130,dtype=e5m2,btrans=1,odtype=f32",
    "M=33,N=24,K=96,batch=2,ashared=0,dtype=e4m3,btrans=1,odtype=bf16",
};

static const char *const configs[] = {
    "BM=64,BN=64,BK=128,stages=2",                                  /* cooperative, TMA store */
    "BM=128,BN=64,cwarps=8,BK=64,stages=3,tmastore=0",              /* two warp groups, 64-byte swizzle */
    "BM=128,BN=64,cwarps=8,consumers=2,BK=128,stages=2,ctas=3",     /* split */
    "BM=64,BN=64,cwarps=8,consumers=1,BK=128,stages=2,ctas=2",      /* ping-pong */
    "BM=64,BN=128,cluster=2,ctas=2,BK=128,stages=2",                /* B's halves multicast by rows */
    "BM=128,BN=192,cwarps=8,BK=128,stages=2,ctas=3",                /* 192 columns (promote's untuned) */
};

/* Every shape at every config (shape s with seed seed + s). */
static void check_each(loom_runtime *rt, const char *const *shape, size_t ns, const char *const *config, size_t nc,
                       uint64_t seed)
{
    for (size_t s = 0; s < ns; s++)
        for (size_t c = 0; c < nc; c++)
            check(rt, shape[s], config[c], seed + s);
}

Test(gemm_fp8, interpreter_matches_the_reference_within_the_bound)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    check_each(rt, shapes, sizeof shapes / sizeof *shapes, configs, sizeof configs / sizeof *configs, 10);
    loom_runtime_destroy(rt);
}

/* Promotion (promote=256: every 2 k steps at BK=128, 4 at BK=64; the last block of each
 * shape shorter) and per-tensor scales (scaled=1: scale_a and scale_b in [0.25, 4), not
 * powers of two), each combination at every config, each element within its bound. */
static const char *const promo_shapes[] = {
    "M=70,N=40,K=600,dtype=e4m3,btrans=1",
    "M=33,N=24,K=300,batch=2,ashared=0,dtype=e5m2,btrans=1,odtype=f32",
};

Test(gemm_fp8, promoted_and_scaled_match_the_reference_within_the_bound)
{
    static const char *const keys[] = {"promote=0,scaled=0", "promote=0,scaled=1", "promote=256,scaled=0",
                                       "promote=256,scaled=1"};
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    for (size_t s = 0; s < sizeof promo_shapes / sizeof *promo_shapes; s++)
        for (size_t v = 0; v < sizeof keys / sizeof *keys; v++)
            for (size_t c = 0; c < sizeof configs / sizeof *configs; c++) {
                char shape[256];
                snprintf(shape, sizeof shape, "%s,%s", promo_shapes[s], keys[v]);
                check(rt, shape, configs[c], 40 + s);
            }
    loom_runtime_destroy(rt);
}

/* Per-row and per-column scales (scaled=2: scale_a [M] and scale_b [N] in [0.25, 4),
 * loaded in the accumulator's slices in the epilogue), with and without promotion, at
 * every config, each element within its bound; and f16 inputs scaled the same way. */
Test(gemm_fp8, row_and_column_scales_match_the_reference_within_the_bound)
{
    static const char *const scaled[] = {
        "M=70,N=40,K=600,dtype=e4m3,btrans=1,scaled=2",
        "M=70,N=40,K=600,dtype=e4m3,btrans=1,scaled=2,promote=256,odtype=f32",
        "M=65,N=72,K=130,dtype=e5m2,btrans=1,odtype=bf16,scaled=2",
    };
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    check_each(rt, scaled, sizeof scaled / sizeof *scaled, configs, sizeof configs / sizeof *configs, 60);
    check(rt, "M=70,N=40,K=50,scaled=2,odtype=f32", "BM=64,BN=64,stages=2", 70);
    check(rt, "M=70,N=136,K=50,dtype=bf16,scaled=2", "BM=128,BN=128,cwarps=8,consumers=2,stages=2", 71);
    loom_runtime_destroy(rt);
}

/* Block-wise scales (scaled=3, promote=128: scale_a [cdiv(K,128), M] per 1 x 128 block
 * of A, scale_b [cdiv(N,128), cdiv(K,128)] per 128 x 128 block of B, each block's sum
 * scaled as it is promoted): every config whose tiles lie in one 128-column block (BN 64
 * or 128), a ragged last block of K and of N, both FP8 types, each element within its
 * bound (the blocks' FP8 sums, the scales' roundings, the f32 sum over the blocks). */
Test(gemm_fp8, block_scales_match_the_reference_within_the_bound)
{
    static const char *const blocked[] = {
        "M=70,N=200,K=600,dtype=e4m3,btrans=1,scaled=3,promote=128,odtype=f32",
        "M=65,N=136,K=300,dtype=e5m2,btrans=1,scaled=3,promote=128,odtype=bf16",
    };
    static const char *const bcfg[] = {
        "BM=64,BN=64,BK=128,stages=2",
        "BM=128,BN=64,cwarps=8,consumers=2,BK=128,stages=2,ctas=3",
        "BM=64,BN=64,cwarps=8,consumers=1,BK=128,stages=2,ctas=2",
        "BM=128,BN=128,cwarps=8,BK=64,stages=3,tmastore=0",
        "BM=64,BN=128,cluster=2,ctas=2,BK=128,stages=2",
        /* 192 columns: tiles at n0 = 0 and 192 (their middle 64 columns in B's first and
         * second blocks), and N = 136's last 8 columns in its second block */
        "BM=128,BN=192,cwarps=8,consumers=2,BK=128,stages=2,ctas=3",
        "BM=128,BN=192,cwarps=8,BK=128,stages=2",
    };
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    check_each(rt, blocked, sizeof blocked / sizeof *blocked, bcfg, sizeof bcfg / sizeof *bcfg, 80);
    /* tiles of two widths (split 192 and 128, 128-column tiles from a block's start; 64 at
     * n0 % 128 = 64; cooperative 128 and 64), B's last block ragged */
    static const char *const two[][2] = {
        {"M=200,N=584,K=400,dtype=e4m3,btrans=1,scaled=3,promote=128,odtype=bf16",
         "BM=128,BN=192,cwarps=8,consumers=2,BK=128,stages=2,ctas=3,BN2=128,wide=2"},
        {"M=200,N=584,K=400,dtype=e4m3,btrans=1,scaled=3,promote=128,odtype=f32",
         "BM=128,BN=192,cwarps=8,consumers=2,BK=128,stages=2,ctas=4,BN2=64,wide=1"},
        {"M=130,N=456,K=260,dtype=e5m2,btrans=1,scaled=3,promote=128,odtype=f16",
         "BM=128,BN=128,cwarps=8,BK=128,stages=2,ctas=2,BN2=64,wide=1"},
    };
    for (size_t i = 0; i < sizeof two / sizeof *two; i++)
        check(rt, two[i][0], two[i][1], 90 + i);
    loom_runtime_destroy(rt);
}

/* btrans=1 is not FP8's alone: f16 and bf16 B given as [N, K], at the f16 BKs. */
Test(gemm_fp8, btrans_with_f16_and_bf16)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    check(rt, "M=70,N=40,K=50,btrans=1", "BM=64,BN=64,stages=2", 1);
    check(rt, "M=70,N=40,K=50,btrans=1,dtype=bf16,odtype=f32", "BM=128,BN=64,cwarps=8,BK=32,tmastore=0", 2);
    check(rt, "M=70,N=136,K=50,btrans=1,ldb=64", "BM=64,BN=128,cluster=2,ctas=2,stages=2", 3);
    loom_runtime_destroy(rt);
}

/* An element of C moved to the nearest value of its type just past its bound, up or
 * down, or made NaN, at the first, the last and a middle element, is the one element
 * the check reports. */
static void planted_errors_caught(const char *shape, const char *config)
{
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char err[512], rep[1024];
    params(shape, config, sh, cf);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_instance in;
    cr_assert_eq(loom_instance_create(rt, gemm(), sh, cf, 5, &in, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(loom_launch(rt, in.kernel, in.grid, in.args, in.nargs), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_expected e;
    cr_assert_eq(loom_expected_create(gemm(), sh, &in, &e), LOOM_OK);
    int c = 4; /* C */
    cr_assert(e.ref[c] && e.bound[c]);
    void *got[LOOM_MAX_ARGS] = {0};
    got[c] = malloc(in.info[c].min_bytes);
    cr_assert(got[c]);
    cr_assert_eq(loom_buffer_download(in.buf[c], got[c], in.info[c].min_bytes), LOOM_OK);
    cr_assert_eq(loom_expected_compare(gemm(), &in, &e, got, rep, sizeof rep), 0, "the right kernel: %s", rep);
    loom_dtype dt = in.info[c].dtype;
    int64_t cnt = (int64_t)(in.info[c].min_bytes / loom_dtype_size(dt));
    int64_t at[3] = {0, cnt - 1, cnt / 2 + 3};
    for (int w = 0; w < 3; w++)
        for (int kind = 0; kind < 3; kind++) {
            int64_t x = at[w];
            double keep = tpl_get(got[c], dt, x), r = tpl_get(e.ref[c], dt, x), b = e.bound[c][x];
            cr_assert(isfinite(b) && b > 0, "element %lld: bound %g", (long long)x, b);
            double v = kind == 2 ? NAN : t_just_past(dt, r, b, kind ? -1 : 1);
            tpl_set(got[c], dt, x, v);
            int64_t bad = loom_expected_compare(gemm(), &in, &e, got, rep, sizeof rep);
            cr_expect_eq(bad, 1, "[%s] C[%lld] = %.9g (reference %.9g, bound %.3g): %s", shape, (long long)x, v, r, b,
                         rep);
            tpl_set(got[c], dt, x, keep);
        }
    free(got[c]);
    loom_expected_destroy(&e);
    loom_instance_destroy(&in);
    loom_runtime_destroy(rt);
}

Test(gemm_fp8, an_element_past_its_bound_is_caught)
{
    planted_errors_caught("M=70,N=40,K=200,dtype=e4m3,btrans=1", "BM=64,BN=64,BK=128,stages=2");
}

/* The same with promotion and scales: the promoted bound and the scales' roundings. */
Test(gemm_fp8, an_element_past_its_promoted_scaled_bound_is_caught)
{
    planted_errors_caught("M=70,N=40,K=600,dtype=e4m3,btrans=1,promote=256,scaled=1",
                          "BM=128,BN=64,cwarps=8,consumers=2,BK=128,stages=2,ctas=3");
    planted_errors_caught("M=33,N=24,K=300,dtype=e5m2,btrans=1,odtype=f32,promote=128",
                          "BM=64,BN=64,BK=64,stages=3,tmastore=0");
    planted_errors_caught("M=70,N=40,K=600,dtype=e4m3,btrans=1,odtype=f32,scaled=2",
                          "BM=128,BN=64,cwarps=8,consumers=2,BK=128,stages=2,ctas=3");
    planted_errors_caught("M=70,N=200,K=600,dtype=e4m3,btrans=1,odtype=f32,scaled=3,promote=128",
                          "BM=128,BN=64,cwarps=8,consumers=2,BK=128,stages=2,ctas=3");
}

/* The bound is the FP8 one: gamma_K with u = 2^-13 of sum |a b|, wider than f16's. */
Test(gemm_fp8, the_bound_is_the_fp8_wgmma_model)
{
    cr_expect_eq(loom_fp8_mma_sum_error(1, 5.0), 0);
    double g = 200 * 0x1p-13;
    cr_expect(fabs(loom_fp8_mma_sum_error(200, 3.0) - g / (1 - g) * 3.0) < 1e-15);
    cr_expect(isinf(loom_fp8_mma_sum_error(8192, 1.0)), "K = 2^13: no bound");
    cr_expect(loom_fp8_mma_sum_error(4096, 1.0) > 1000 * loom_f32_sum_error(4096, 1.0));
}

/* The promoted bound: gamma_block (u = 2^-13) within the blocks, gamma over the blocks
 * (u = 2^-23) of their sums in f32.  At K = 4096 promoted every 128 it is 1.6% of sum |a b|
 * where the whole chain's is 100%; at K = 8192 it is finite; one block is the chain. */
Test(gemm_fp8, the_promoted_bound_is_the_block_model)
{
    double g8 = 128 * 0x1p-13 / (1 - 128 * 0x1p-13), g32 = 32 * 0x1p-23 / (1 - 32 * 0x1p-23);
    double want = g8 * 2.0 + g32 * (2.0 + g8 * 2.0);
    cr_expect(fabs(loom_fp8_promoted_sum_error(4096, 128, 2.0) - want) < 1e-15, "%.17g, want %.17g",
              loom_fp8_promoted_sum_error(4096, 128, 2.0), want);
    cr_expect(loom_fp8_promoted_sum_error(4096, 128, 1.0) < 0.0162);
    cr_expect(loom_fp8_mma_sum_error(4096, 1.0) >= 1.0);
    cr_expect(isfinite(loom_fp8_promoted_sum_error(8192, 256, 1.0)));
    cr_expect(loom_fp8_promoted_sum_error(8192, 256, 1.0) < 0.033);
    cr_expect_eq(loom_fp8_promoted_sum_error(200, 256, 3.0), loom_fp8_mma_sum_error(200, 3.0));
    cr_expect_eq(loom_fp8_promoted_sum_error(200, 0, 3.0), loom_fp8_mma_sum_error(200, 3.0));
    /* a tail block: cdiv(300, 128) = 3 blocks */
    double g3 = 3 * 0x1p-23 / (1 - 3 * 0x1p-23);
    cr_expect(fabs(loom_fp8_promoted_sum_error(300, 128, 1.0) - (g8 + g3 * (1 + g8))) < 1e-15);
}

/* The template's bound follows the shape's promote: the promoted one is the tighter, at
 * every element. */
Test(gemm_fp8, the_template_bound_follows_promote)
{
    double *b[2] = {NULL, NULL};
    int64_t n = 0;
    for (int p = 0; p < 2; p++) {
        int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
        char err[512];
        params(p ? "M=20,N=16,K=1000,dtype=e4m3,btrans=1,odtype=f32,promote=128"
                 : "M=20,N=16,K=1000,dtype=e4m3,btrans=1,odtype=f32",
               "BM=64,BN=64,BK=128,stages=2", sh, cf);
        loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
        loom_instance in;
        cr_assert_eq(loom_instance_create(rt, gemm(), sh, cf, 7, &in, err, sizeof err), LOOM_OK, "%s", err);
        loom_expected e;
        cr_assert_eq(loom_expected_create(gemm(), sh, &in, &e), LOOM_OK);
        n = (int64_t)(in.info[4].min_bytes / 4);
        b[p] = malloc((size_t)n * sizeof *b[p]);
        cr_assert(b[p]);
        memcpy(b[p], e.bound[4], (size_t)n * sizeof *b[p]);
        loom_expected_destroy(&e);
        loom_instance_destroy(&in);
        loom_runtime_destroy(rt);
    }
    /* gamma_1000(2^-13) = 0.139 against gamma_128(2^-13) + gamma_8(2^-23) = 0.0159 */
    for (int64_t i = 0; i < n; i++)
        cr_expect(b[1][i] < b[0][i] / 5, "element %lld: promoted %g, whole chain %g", (long long)i, b[1][i], b[0][i]);
    free(b[0]);
    free(b[1]);
}

/* ---------------------------------------------------------------- refusals */

static void expect_refused(const char *shape, const char *config, const char *msg)
{
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char why[256] = "", err[256] = "";
    params(shape, config, sh, cf);
    cr_expect(!gemm()->valid(sh, cf, why, sizeof why), "[%s] [%s] is valid", shape, config);
    cr_expect(strstr(why, msg), "[%s] [%s]: want '%s', got '%s'", shape, config, msg, why);
    loom_kernel *k = gemm()->build(sh, cf, err, sizeof err);
    cr_expect_null(k, "[%s] [%s] builds", shape, config);
    cr_expect(strstr(err, msg), "build: want '%s', got '%s'", msg, err);
    loom_kernel_destroy(k);
}

Test(gemm_fp8, refusals_name_the_reason)
{
    expect_refused("M=256,N=256,K=256,dtype=e4m3", "",
                   "dtype e4m3/e5m2 needs btrans=1: FP8 wgmma reads B K-major only, so give B as [N, K]");
    expect_refused("M=256,N=256,K=256,dtype=e5m2,btrans=0", "BK=128", "needs btrans=1");
    expect_refused("M=256,N=256,K=256,dtype=e4m3,btrans=1", "BK=32",
                   "BK must be 128 or 64 for FP8 (A's row is then one 128- or 64-byte swizzle span)");
    expect_refused("M=256,N=256,K=256,btrans=1", "BK=128", "BK must be 64 or 32");
    expect_refused("M=256,N=256,K=256,dtype=e4m3,btrans=1,lda=264", "BK=128",
                   "lda and ldb must be multiples of 16 for FP8");
    expect_refused("M=256,N=256,K=256,dtype=e4m3,btrans=1,ldb=200", "BK=128", "ldb at least B's row");
    expect_refused("M=256,N=256,K=256,btrans=2", "", "btrans must be 0");
    expect_refused("M=256,N=256,K=256,dtype=i32", "", "dtype must be f16, bf16, e4m3 or e5m2");
}

/* Promotion's refusals: tiles whose two accumulators do not fit (split 128 x 256: 64 x 256
 * a warp group; the defaults' 64 x 256; ping-pong's whole 128 x 128 tile a warp group),
 * a promote that is not whole k steps, f16 inputs, a negative promote; and scaled's range. */
Test(gemm_fp8, promote_refusals_name_the_reason)
{
    const char *fp8 = "M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,promote=128";
    expect_refused(fp8, "BM=128,BN=256,cwarps=8,consumers=2,BK=128",
                   "promote=128 keeps a second f32 accumulator: 2 x 128 registers a thread (64 x 256 a warp group), "
                   "over the 192 an accumulator may take; use at most 64 x 192 a warp group");
    expect_refused(fp8, "BK=128", "2 x 128 registers a thread (64 x 256 a warp group)");
    expect_refused(fp8, "BM=128,BN=128,cwarps=8,consumers=1,BK=128", "2 x 128 registers a thread (128 x 128 a warp");
    expect_refused("M=256,N=256,K=256,dtype=e4m3,btrans=1,promote=64", "BM=128,BN=128,cwarps=8,consumers=2,BK=128",
                   "promote=64 (elements of K) must be a multiple of BK=128");
    expect_refused("M=256,N=256,K=256,promote=128", "", "promote is for FP8 inputs");
    expect_refused("M=256,N=256,K=256,dtype=e4m3,btrans=1,promote=-128", "BK=128", "promote must be 0");
    expect_refused("M=256,N=256,K=256,dtype=e4m3,btrans=1,scaled=4", "BK=128", "scaled must be 0, 1");
    expect_refused("M=256,N=256,K=256,dtype=e4m3,btrans=1,scaled=3", "BK=128", "scaled=3 (block-wise scales) is FP8's "
                                                                              "with promote=128");
    expect_refused("M=256,N=256,K=256,scaled=3,promote=128", "", "scaled=3 (block-wise scales) is FP8's");
    expect_refused("M=256,N=256,K=256,dtype=e4m3,btrans=1,scaled=3,promote=128", "BN=256,BK=128",
                   "scaled=3 takes BN 64, 128 or 192");
    expect_refused("M=256,N=256,K=256,batch=2,dtype=e4m3,btrans=1,scaled=2", "BK=128",
                   "scaled=2 (a scale a row and a column) takes one product (batch=1)");
}

/* Tiles of two widths (BN2): the columns past `wide` BN-column tiles in BN2-column ones,
 * each program's BN tiles first, then its BN2 ones.  A ragged M and a ragged last BN2
 * tile, one BN column and several, BN2 64 and 128 (256, 192 and 128 wide tiles),
 * cooperative and split, promoted and not, scaled 1 and 2, f32 and bf16 out, f16 and bf16
 * in, the epilogue from the registers, a few programs that take several tiles of each
 * width, a program a tile: each element within its bound. */
Test(gemm_fp8, two_tile_widths_match_the_reference_within_the_bound)
{
    static const char *const cases[][2] = {
        {"M=200,N=344,K=384,dtype=e4m3,btrans=1,promote=128,odtype=bf16",
         "BM=128,BN=192,cwarps=8,BK=128,stages=4,group=8,BN2=128,wide=1"},
        {"M=256,N=512,K=256,dtype=e4m3,btrans=1,promote=128,odtype=f16,scaled=2",
         "BM=128,BN=192,cwarps=8,BK=128,stages=2,group=8,BN2=64,wide=2"},
        {"M=384,N=456,K=200,dtype=e5m2,btrans=1,promote=128,odtype=f32",
         "BM=128,BN=128,cwarps=8,BK=128,stages=2,group=2,BN2=64,wide=2"},
        {"M=640,N=400,K=256,dtype=e4m3,btrans=1,scaled=1",
         "BM=128,BN=192,cwarps=8,BK=128,stages=2,BN2=128,wide=1,ctas=3"},
        {"M=640,N=400,K=256,dtype=e4m3,btrans=1,promote=128",
         "BM=128,BN=192,cwarps=8,BK=128,stages=2,BN2=128,wide=1,ctas=0"},
        {"M=300,N=520,K=136,dtype=f16,btrans=1", "BM=128,BN=192,cwarps=8,BK=64,stages=3,group=8,BN2=128,wide=2,ctas=4"},
        {"M=256,N=400,K=256,dtype=bf16,btrans=1,odtype=bf16",
         "BM=64,BN=192,BK=64,stages=2,BN2=64,wide=1,tmastore=0,ctas=5"},
        /* split: each group's parts (f16 out), the handed-over staging tile (f32 out),
         * promoted FP8 */
        {"M=300,N=648,K=136", "BM=128,BN=256,cwarps=8,consumers=2,stages=2,group=8,BN2=128,wide=1,ctas=5"},
        {"M=300,N=648,K=136,odtype=f32", "BM=128,BN=256,cwarps=8,consumers=2,stages=2,group=8,BN2=64,wide=2,ctas=3"},
        {"M=200,N=344,K=384,dtype=e4m3,btrans=1,promote=128,odtype=bf16",
         "BM=128,BN=192,cwarps=8,consumers=2,BK=128,stages=2,BN2=128,wide=1"},
    };
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check(rt, cases[i][0], cases[i][1], 80 + i);
    loom_runtime_destroy(rt);
}

/* What two tile widths refuse, each naming the reason. */
Test(gemm_fp8, two_tile_width_refusals_name_the_reason)
{
    const char *fp8 = "M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,promote=128";
    const char *coop = "BM=128,BN=192,cwarps=8,BK=128";
    char cf[256];
    expect_refused(fp8, "BM=128,BN=192,cwarps=8,BK=128,BN2=96,wide=16",
                   "BN2 must be 0 (every tile BN columns), or 64 or 128");
    expect_refused(fp8, "BM=128,BN=128,cwarps=8,BK=128,BN2=128,wide=16", "or 64 or 128 and less than BN");
    expect_refused(fp8, "BM=64,BN=128,cwarps=8,consumers=1,BK=128,BN2=64,wide=16",
                   "BN2 takes consumers 0 (cooperative) or 2");
    expect_refused("M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,promote=128,scaled=3",
                   "BM=128,BN=192,cwarps=8,consumers=2,BK=128,BN2=128,wide=15",
                   "scaled=3 with BN2=128 needs wide * BN (2880) a multiple of 128");
    expect_refused("M=4096,N=4096,K=4096,batch=2,dtype=e4m3,btrans=1", "BM=128,BN=192,cwarps=8,BK=128,BN2=128,wide=16",
                   "one product (batch=1)");
    expect_refused("M=433,N=256,K=872,batch=8", "BM=224,BN=128,cwarps=8,consumers=2,trans=1,BN2=64,wide=1",
                   "trans=0, cluster=1");
    expect_refused(fp8, "BM=128,BN=192,cwarps=8,BK=128,cluster=2,BN2=128,wide=16", "cluster=1");
    snprintf(cf, sizeof cf, "%s,BN2=128", coop);
    expect_refused(fp8, cf, "wide must be at least 1 and wide * BN (0) less than N (4096)");
    snprintf(cf, sizeof cf, "%s,BN2=128,wide=22", coop);
    expect_refused(fp8, cf, "wide * BN (4224) less than N (4096)");
    snprintf(cf, sizeof cf, "%s,wide=3", coop);
    expect_refused(fp8, cf, "BN2 must be 0 (every tile BN columns)");
}

/* Asked for promotion, the untuned config is one whose accumulators fit: split 128 x 128
 * at a large square, 64 x 128 at a small shape, BK=64 where promote is not a multiple of
 * 128; without it, the split 128 x 256 headline as before. */
Test(gemm_fp8, the_untuned_promoted_config_fits)
{
    static const char *const cases[][2] = {
        /* 4096^3: 704 tiles of 128 x 192 are 5.33 waves on 132 SMs; 16 columns of them and 8
         * of 128 columns, the busiest program 5.59 tiles' time */
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,promote=128", "BM=128,BN=192,BK=128,stages=4,cwarps=8"},
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,promote=128", "BN2=128,wide=16"},
        {"M=2048,N=7168,K=4096,dtype=e4m3,btrans=1,promote=128", "BN2=128,wide=30"},
        /* f16 split 128 x 256: 800 tiles at 5120^3 are 6.06 waves; 17 columns of them
         * and 6 of 128 columns */
        {"M=5120,N=5120,K=5120",
         "BM=128,BN=256,BK=64,stages=4,cwarps=8,ctas=132,group=8,consumers=2,tmastore=1,cluster=1,share=0,trans=0,"
         "BN2=128,wide=17"},
        /* block scales: split 128 x 192 (cooperative spills) with the tail, 5.59 tiles of
         * 192 at 1.5 / 1.10 the time of one of 128 against 8 of 128 */
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,promote=128,scaled=3",
         "BM=128,BN=192,BK=128,stages=4,cwarps=8,ctas=132,group=8,consumers=2,tmastore=1,cluster=1,share=0,trans=0,"
         "BN2=128,wide=16"},
        {"M=8192,N=8192,K=8192,dtype=e4m3,btrans=1,promote=128,scaled=3",
         "BM=128,BN=192,BK=128,stages=4,cwarps=8,ctas=132,group=8,consumers=2,tmastore=1,cluster=1,share=0,trans=0,"
         "BN2=0"},
        {"M=8192,N=8192,K=8192,dtype=e4m3,btrans=1,promote=128",
         "BM=128,BN=192,BK=128,stages=4,cwarps=8,ctas=132,group=8,consumers=0,tmastore=1,cluster=1,share=0,trans=0,"
         "BN2=0"}, /* 20.85 waves: a tail gains under 3% */
        {"M=512,N=512,K=4096,dtype=e4m3,btrans=1,promote=128", "BM=64,BN=128,BK=128"},
        /* f32 out: a 128 x 192 f32 staging tile does not fit beside 4 stages */
        {"M=8192,N=8192,K=8192,dtype=e4m3,btrans=1,promote=128,odtype=f32", "BM=128,BN=128,BK=128,stages=4,cwarps=8"},
        {"M=256,N=256,K=4096,dtype=e4m3,btrans=1,promote=256", "BM=64,BN=128,BK=128"},
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,promote=64", "BM=128,BN=192,BK=64"},
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1", "BM=128,BN=256,BK=128"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
        char text[512], why[256];
        t_params(gemm()->shape, gemm()->nshape, cases[i][0], sh);
        loom_template_untuned_config(gemm(), sh, cf);
        loom_params_format(gemm()->config, gemm()->nconfig, cf, text, sizeof text);
        cr_expect(gemm()->valid(sh, cf, why, sizeof why), "[%s] %s: %s", cases[i][0], text, why);
        cr_expect(strstr(text, cases[i][1]), "[%s]: %s, want %s", cases[i][0], text, cases[i][1]);
    }
}

/* ---------------------------------------------------------------- PTX */

static void count_conversions(void *ctx, const loom_cost *c) { *(int *)ctx += c->kind == LOOM_COST_CONVERT; }

/* The FP8 headline configs at 4096^3: the PTX issues m64nNk32 FP8 wgmmas and assembles
 * without spills or layout conversions. */
Test(gemm_fp8, headline_ptx_assembles_without_spills)
{
    static const char *const cases[][3] = {
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1", "", "m64n256k32.f32.e4m3.e4m3"},
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1", "BK=128", "m64n256k32.f32.e4m3.e4m3"},
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1", "BM=128,BN=256,cwarps=8,consumers=2,BK=128",
         "m64n256k32.f32.e4m3.e4m3"},
        {"M=4096,N=4096,K=4096,dtype=e5m2,btrans=1,odtype=bf16", "BM=128,BN=128,cwarps=8,consumers=1,BK=128",
         "m64n128k32.f32.e5m2.e5m2"},
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,odtype=f32", "BM=128,BN=256,cwarps=8,BK=128,stages=3,tmastore=0",
         "m64n256k32.f32.e4m3.e4m3"},
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1", "BM=128,BN=256,cwarps=8,consumers=2,cluster=2,BK=128",
         "m64n256k32.f32.e4m3.e4m3"},
        /* promoted (every 128 and 256 elements of K, split 128 x 128) and scaled */
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,odtype=bf16,promote=128",
         "BM=128,BN=128,cwarps=8,consumers=2,BK=128,group=8", "m64n128k32.f32.e4m3.e4m3"},
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,odtype=bf16,promote=128", "BM=128,BN=192,cwarps=8,BK=128,group=8",
         "m64n192k32.f32.e4m3.e4m3"},
        /* two tile widths (the untuned config at 4096^3): each width its own loop */
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,odtype=bf16,promote=128",
         "BM=128,BN=192,cwarps=8,BK=128,group=8,BN2=128,wide=16", "m64n128k32.f32.e4m3.e4m3"},
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,odtype=bf16,promote=256,scaled=1",
         "BM=128,BN=128,cwarps=8,consumers=2,BK=128,group=8", "m64n128k32.f32.e4m3.e4m3"},
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,odtype=bf16,scaled=1",
         "BM=128,BN=256,cwarps=8,consumers=2,BK=128,group=8", "m64n256k32.f32.e4m3.e4m3"},
        /* per-row and per-column scales, unpromoted and promoted */
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,odtype=bf16,scaled=2",
         "BM=128,BN=256,cwarps=8,consumers=2,BK=128,group=8", "m64n256k32.f32.e4m3.e4m3"},
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,odtype=bf16,promote=128,scaled=2",
         "BM=128,BN=128,cwarps=8,consumers=2,BK=128,group=8", "m64n128k32.f32.e4m3.e4m3"},
        /* block-wise scales, split and cooperative */
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,odtype=bf16,promote=128,scaled=3",
         "BM=128,BN=128,cwarps=8,consumers=2,BK=128,group=8", "m64n128k32.f32.e4m3.e4m3"},
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,odtype=bf16,promote=128,scaled=3",
         "BM=128,BN=128,cwarps=8,BK=128,group=8", "m64n128k32.f32.e4m3.e4m3"},
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,odtype=bf16,promote=128,scaled=3",
         "BM=128,BN=192,cwarps=8,consumers=2,BK=128,group=8", "m64n192k32.f32.e4m3.e4m3"},
        {"M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,odtype=bf16,promote=128,scaled=3",
         "BM=128,BN=192,cwarps=8,consumers=2,BK=128,group=8,BN2=128,wide=16", "m64n128k32.f32.e4m3.e4m3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
        char err[2048] = "", name[256];
        params(cases[i][0], cases[i][1], sh, cf);
        snprintf(name, sizeof name, "gemm [%s] [%s]", cases[i][0], cases[i][1]);
        loom_kernel *k = gemm()->build(sh, cf, err, sizeof err);
        cr_assert(k, "%s: %s", name, err);
        char *ptx = NULL;
        cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s: %s", name, err);
        cr_expect(strstr(ptx, cases[i][2]), "%s: no %s", name, cases[i][2]);
        cr_expect_eq(t_count(ptx, "k16.f32"), 0, "%s: a k16 wgmma", name);
        /* promoted: a block's first wgmma starts from zero (scale-d off: predicate z) and
         * the block's end adds the 64 x BN a warp group (BN / 2 a thread) into f32 (with
         * block scales, as fmas of the sum and the rows' scales) */
        bool promoted = strstr(cases[i][0], "promote="), blocks = strstr(cases[i][0], "scaled=3");
        int adds = t_count(ptx, blocks ? "fma.rn.f32" : "add.rn.f32");
        cr_expect_eq(adds >= 64, promoted, "%s: %d f32 %s", name, adds, blocks ? "fmas" : "adds");
        cr_expect(!promoted || t_count(ptx, "z, 1, 1;") >= 1, "%s: no wgmma from zero", name);
        if (blocks) { /* the scales come by TMA with the block: read after its mbarrier wait,
                       * with no task barrier (the same bar.syncs as without scales) */
            char *plain = NULL, shape[256];
            snprintf(shape, sizeof shape, "%.*s", (int)(strstr(cases[i][0], ",promote=") - cases[i][0]), cases[i][0]);
            strcat(shape, ",promote=128");
            int64_t sh2[LOOM_MAX_PARAMS], cf2[LOOM_MAX_PARAMS];
            params(shape, cases[i][1], sh2, cf2);
            loom_kernel *k2 = gemm()->build(sh2, cf2, err, sizeof err);
            cr_assert(k2, "%s: %s", shape, err);
            cr_assert_eq(loom_compile_ptx(k2, "sm_90a", &plain, NULL, err, sizeof err), LOOM_OK, "%s", err);
            cr_expect_eq(t_count(ptx, "bar.sync"), t_count(plain, "bar.sync"), "%s: bar.sync %d, without scales %d",
                         name, t_count(ptx, "bar.sync"), t_count(plain, "bar.sync"));
            cr_expect(t_count(ptx, "ld.shared.f32") >= 2, "%s: the block's scales not read from shared memory", name);
            free(plain);
            loom_kernel_destroy(k2);
        }
        t_ptxas_ok(ptx, "sm_90a", name);
        free(ptx);
        /* no layout conversion: the scales (per row and column, or per block, read from
         * the ring slot by the promoted loop) load in the accumulator's slices */
        int convert = 0;
        cr_assert_eq(loom_kernel_explain(k, "sm_90a", count_conversions, &convert, NULL, err, sizeof err), LOOM_OK,
                     "%s: %s", name, err);
        cr_expect_eq(convert, 0, "%s: %d layout conversions", name, convert);
        loom_kernel_destroy(k);
    }
}

/* ---------------------------------------------------------------- the GPU */

Test(gemm_fp8_gpu, matches_the_reference_within_the_fp8_bound)
{
    loom_runtime *rt = t_gpu_or_skip();
    check_each(rt, shapes, sizeof shapes / sizeof *shapes, configs, sizeof configs / sizeof *configs, 20);
    check(rt, "M=1000,N=1000,K=1000,dtype=e5m2,btrans=1,odtype=f32", "BK=128", 31);
    /* per-row and per-column scales: split 128 x 256 (a row of scale_b 32 vectors a thread,
     * read clamped), promoted split 128 x 128, ping-pong, a ragged M and N */
    check(rt, "M=1000,N=1032,K=1024,dtype=e4m3,btrans=1,odtype=bf16,scaled=2",
          "BM=128,BN=256,cwarps=8,consumers=2,BK=128,group=8", 32);
    check(rt, "M=1000,N=1032,K=1024,dtype=e4m3,btrans=1,odtype=f32,scaled=2,promote=128",
          "BM=128,BN=128,cwarps=8,consumers=2,BK=128,group=8", 33);
    check(rt, "M=777,N=520,K=512,dtype=e5m2,btrans=1,odtype=f16,scaled=2", "BM=64,BN=128,cwarps=8,consumers=1,BK=128",
          34);
    /* block-wise scales: the promoted split 128 x 128, a ragged K and N */
    check(rt, "M=1000,N=1032,K=1000,dtype=e4m3,btrans=1,odtype=bf16,scaled=3,promote=128",
          "BM=128,BN=128,cwarps=8,consumers=2,BK=128,group=8", 35);
    /* and split 128 x 192: tiles at n0 % 128 = 0 and 64, the last one past N */
    check(rt, "M=1000,N=1032,K=1000,dtype=e4m3,btrans=1,odtype=bf16,scaled=3,promote=128",
          "BM=128,BN=192,cwarps=8,consumers=2,BK=128,group=8", 36);
    /* tiles of two widths: 2 columns of split 128 x 192, then 128-column tiles (the
     * untuned block-scaled config's form) */
    check(rt, "M=1000,N=1032,K=1000,dtype=e4m3,btrans=1,odtype=bf16,scaled=3,promote=128",
          "BM=128,BN=192,cwarps=8,consumers=2,BK=128,group=8,BN2=128,wide=2", 37);
    loom_runtime_destroy(rt);
}

/* Multiply the n f32 values of device buffer b by s (a power of two: exact), on the host. */
static void scale_buffer(loom_buffer *b, int64_t n, float s)
{
    float *h = malloc((size_t)n * sizeof *h);
    cr_assert(h);
    cr_assert_eq(loom_buffer_download(b, h, (size_t)n * sizeof *h), LOOM_OK);
    for (int64_t i = 0; i < n; i++)
        h[i] *= s;
    cr_assert_eq(loom_buffer_upload(b, h, (size_t)n * sizeof *h), LOOM_OK);
    free(h);
}

/* The template's kernel for shape and config on device buffers a [M, K] and bt [N, K] into
 * c: (M, 1, A, Bt, C) and, where the shape is scaled, scale_a and scale_b. */
static void launch_on_the_gpu(loom_runtime *rt, const char *shape, const char *config, loom_buffer *a, loom_buffer *bt,
                              loom_buffer *c, float scale_a, float scale_b)
{
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char err[1024];
    params(shape, config, sh, cf);
    const loom_template *t = gemm();
    loom_kernel *k = t->build(sh, cf, err, sizeof err);
    cr_assert(k, "%s [%s]: %s", shape, config, err);
    int grid[3];
    t->grid(sh, cf, grid);
    loom_arg args[7] = {LOOM_ARG_I32((int32_t)sh[0]), LOOM_ARG_I32(1), LOOM_ARG_BUF(a), LOOM_ARG_BUF(bt),
                        LOOM_ARG_BUF(c), LOOM_ARG_F32(scale_a), LOOM_ARG_F32(scale_b)};
    int nargs = strstr(shape, "scaled=1") ? 7 : 5;
    cr_assert_eq(loom_buffer_fill(c, 0xff), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_launch(rt, k, grid, args, nargs), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_kernel_destroy(k);
}

/* Large shapes, where the FP8 bound says little (gamma_K of the tensor cores' 13-bit adds
 * reaches 1 at K = 4096): inputs that are integers in [-2, 2] make every sum exact in any
 * order and precision of the adds (its partial sums stay far inside the adder's exact
 * integers), so each output must be the NVRTC reference's sum rounded once to odtype.
 * With scaled=1 the scales are powers of two (scale_a * scale_b = s), so the scaled sum is
 * exact too: the reference is multiplied by s (exactly) before the comparison.  The kernel
 * is the template's at the config given, launched on device buffers; every element is
 * checked. */
static void exact_on_the_gpu(loom_runtime *rt, nvref_gemm *ref, const char *shape, const char *config, float scale_a,
                             float scale_b)
{
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char err[1024];
    params(shape, config, sh, cf);
    int64_t M = sh[0], N = sh[1], K = sh[2];
    loom_dtype in = (loom_dtype)sh[4], odt = (loom_dtype)sh[5];
    cr_assert_eq(sh[3], 1, "one product");
    loom_buffer *a = loom_buffer_create(rt, (size_t)(M * K)), *bt = loom_buffer_create(rt, (size_t)(N * K));
    loom_buffer *c = loom_buffer_create(rt, (size_t)(M * N) * loom_dtype_size(odt));
    loom_buffer *r = loom_buffer_create(rt, (size_t)(M * N) * 4), *ra = loom_buffer_create(rt, (size_t)(M * N) * 4);
    cr_assert(a && bt && c && r && ra, "%s", loom_runtime_error(rt));
    nvref_gemm_shape ns = {M, N, K, 1, 0, in, 1};
    cr_assert_eq(nvref_gemm_fill_ints(ref, rt_buffer_dptr(a), in, M * K, 3, -2, 2, err, sizeof err), LOOM_OK, "%s",
                 err);
    cr_assert_eq(nvref_gemm_fill_ints(ref, rt_buffer_dptr(bt), in, N * K, 4, -2, 2, err, sizeof err), LOOM_OK, "%s",
                 err);
    cr_assert_eq(nvref_gemm_reference(ref, &ns, rt_buffer_dptr(a), rt_buffer_dptr(bt), rt_buffer_dptr(r),
                                      rt_buffer_dptr(ra), err, sizeof err),
                 LOOM_OK, "%s", err);
    bool scaled = strstr(shape, "scaled=1");
    if (scaled) {
        scale_buffer(r, M * N, scale_a * scale_b);
        scale_buffer(ra, M * N, fabsf(scale_a * scale_b));
    }
    launch_on_the_gpu(rt, shape, config, a, bt, c, scale_a, scale_b);
    nvref_gemm_report rep;
    cr_assert_eq(nvref_gemm_compare_gamma(ref, M * N, rt_buffer_dptr(c), odt, rt_buffer_dptr(r), LOOM_F32,
                                          rt_buffer_dptr(ra), 0.0, &rep, err, sizeof err),
                 LOOM_OK, "%s", err);
    cr_expect_eq(rep.bad, 0, "%s [%s]: %llu of %llu not the exact sum (%llu not finite); first at %lld: %.9g, want %.9g",
                 shape, config, (unsigned long long)rep.bad, (unsigned long long)rep.checked,
                 (unsigned long long)rep.nonfinite, (long long)rep.first_bad, rep.first_out, rep.first_ref);
    loom_buffer *all[] = {a, bt, c, r, ra};
    for (size_t i = 0; i < 5; i++)
        loom_buffer_destroy(all[i]);
}

Test(gemm_fp8_gpu, large_shapes_sum_integers_exactly)
{
    loom_runtime *rt = t_gpu_or_skip();
    nvref_gemm *ref = t_nvref_or_skip(rt);
    /* the split headline (the untuned config at 4096^3), and K = 8192 where the bound is
     * infinite, with a ragged M and N */
    exact_on_the_gpu(rt, ref, "M=4096,N=4096,K=4096,dtype=e4m3,odtype=bf16,btrans=1",
                     "BM=128,BN=256,cwarps=8,consumers=2,BK=128,group=8", 1, 1);
    exact_on_the_gpu(rt, ref, "M=1000,N=1032,K=8192,dtype=e5m2,odtype=f32,btrans=1", "BK=128", 1, 1);
    exact_on_the_gpu(rt, ref, "M=2048,N=2048,K=2048,dtype=e4m3,odtype=f16,btrans=1", "BK=128,cwarps=8,consumers=1", 1,
                     1);
    /* promoted (every 128 and 256 elements of K, the promoted headline split 128 x 128 and
     * ping-pong 64 x 128), and scaled by 0.5 and 4 (C = 2 A @ B, exact) */
    exact_on_the_gpu(rt, ref, "M=4096,N=4096,K=4096,dtype=e4m3,odtype=bf16,btrans=1,promote=128",
                     "BM=128,BN=128,cwarps=8,consumers=2,BK=128,group=8", 1, 1);
    /* cooperative 128 x 192 (N past the last whole tile), and the untuned promoted config:
     * 16 columns of those tiles, then 8 of 128 columns; 128-column tiles past a ragged N */
    exact_on_the_gpu(rt, ref, "M=4096,N=4096,K=4096,dtype=e4m3,odtype=bf16,btrans=1,promote=128",
                     "BM=128,BN=192,cwarps=8,BK=128,group=8", 1, 1);
    exact_on_the_gpu(rt, ref, "M=4096,N=4096,K=4096,dtype=e4m3,odtype=bf16,btrans=1,promote=128",
                     "BM=128,BN=192,cwarps=8,BK=128,group=8,BN2=128,wide=16", 1, 1);
    exact_on_the_gpu(rt, ref, "M=1000,N=1032,K=2048,dtype=e4m3,odtype=f16,btrans=1,promote=128",
                     "BM=128,BN=192,cwarps=8,BK=128,group=8,BN2=128,wide=3", 1, 1);
    exact_on_the_gpu(rt, ref, "M=1000,N=1032,K=8192,dtype=e5m2,odtype=f32,btrans=1,promote=256,scaled=1",
                     "BM=64,BN=128,cwarps=8,consumers=1,BK=128", 0.5f, 4);
    exact_on_the_gpu(rt, ref, "M=4096,N=4096,K=4096,dtype=e4m3,odtype=bf16,btrans=1,scaled=1",
                     "BM=128,BN=256,cwarps=8,consumers=2,BK=128,group=8", 0.5f, 4);
    nvref_gemm_close(ref);
    loom_runtime_destroy(rt);
}

/* Random real inputs at 4096^3, promoted every 128 elements of K, checked by the promoted
 * bound on the device: gamma = loom_fp8_promoted_sum_error(K, 128, 1) = 0.0159 of sum
 * |a b| (gamma_128(2^-13) in the blocks, gamma_32(2^-23) over them), taken for both
 * sides by nvref_gemm_compare_gamma (2 gamma (1 + gamma) sum |a b|, the reference's f32 sum
 * well inside it).  With inputs uniform in [-1, 1), sum |a b| is about K / 4 = 1024 and
 * |ref| about sqrt(K) / 3 = 21: the bound is some 32 at an element, 1.5 |ref| typical
 * (without promotion gamma_4096(2^-13) = 1: 4 sum |a b|, two hundred times |ref|, which
 * says nothing).  It catches a wrong tile or a misplaced element, not a lost k block of
 * 128 products (about 4 in magnitude): the exact integer check above does that. */
Test(gemm_fp8_gpu, promoted_random_inputs_within_the_promoted_bound)
{
    loom_runtime *rt = t_gpu_or_skip();
    nvref_gemm *ref = t_nvref_or_skip(rt);
    char err[1024];
    int64_t M = 4096, N = 4096, K = 4096;
    loom_buffer *a = loom_buffer_create(rt, (size_t)(M * K)), *bt = loom_buffer_create(rt, (size_t)(N * K));
    loom_buffer *c = loom_buffer_create(rt, (size_t)(M * N) * 2);
    loom_buffer *r = loom_buffer_create(rt, (size_t)(M * N) * 4), *ra = loom_buffer_create(rt, (size_t)(M * N) * 4);
    cr_assert(a && bt && c && r && ra, "%s", loom_runtime_error(rt));
    nvref_gemm_shape ns = {M, N, K, 1, 0, LOOM_E4M3, 1};
    cr_assert_eq(nvref_gemm_fill(ref, rt_buffer_dptr(a), LOOM_E4M3, M * K, 5, -1, 1, err, sizeof err), LOOM_OK, "%s",
                 err);
    cr_assert_eq(nvref_gemm_fill(ref, rt_buffer_dptr(bt), LOOM_E4M3, N * K, 6, -1, 1, err, sizeof err), LOOM_OK, "%s",
                 err);
    cr_assert_eq(nvref_gemm_reference(ref, &ns, rt_buffer_dptr(a), rt_buffer_dptr(bt), rt_buffer_dptr(r),
                                      rt_buffer_dptr(ra), err, sizeof err),
                 LOOM_OK, "%s", err);
    double gamma = loom_fp8_promoted_sum_error(K, 128, 1.0);
    cr_assert(gamma < 0.0162, "gamma %g", gamma);
    /* split 128 x 128, cooperative 128 x 192, and the untuned config (those and 128 x 128
     * ones past 16 columns of them) */
    static const char *const cfgs[] = {"BM=128,BN=128,cwarps=8,consumers=2,BK=128,group=8",
                                       "BM=128,BN=192,cwarps=8,BK=128,group=8",
                                       "BM=128,BN=192,cwarps=8,BK=128,group=8,BN2=128,wide=16"};
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        cr_assert_eq(loom_buffer_fill(c, 0xff), LOOM_OK); /* NaN: an element not written fails */
        launch_on_the_gpu(rt, "M=4096,N=4096,K=4096,dtype=e4m3,odtype=bf16,btrans=1,promote=128", cfgs[i], a, bt, c,
                          1, 1);
        nvref_gemm_report rep;
        cr_assert_eq(nvref_gemm_compare_gamma(ref, M * N, rt_buffer_dptr(c), LOOM_BF16, rt_buffer_dptr(r), LOOM_F32,
                                              rt_buffer_dptr(ra), gamma, &rep, err, sizeof err),
                     LOOM_OK, "%s", err);
        cr_expect_eq(rep.bad, 0,
                     "[%s] %llu of %llu past the promoted bound; first at %lld: %.9g, want %.9g (bound %.3g)", cfgs[i],
                     (unsigned long long)rep.bad, (unsigned long long)rep.checked, (long long)rep.first_bad,
                     rep.first_out, rep.first_ref, rep.first_bound);
        printf("gemm_fp8_gpu promoted 4096^3 [%s]: worst |err|/bound %.3g\n", cfgs[i], rep.worst);
    }
    loom_buffer *all[] = {a, bt, c, r, ra};
    for (size_t i = 0; i < 5; i++)
        loom_buffer_destroy(all[i]);
    nvref_gemm_close(ref);
    loom_runtime_destroy(rt);
}
