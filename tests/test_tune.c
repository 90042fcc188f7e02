/*
 * test_tune.c -- the autotuner (tune/) and its cache (tune/tune_cache.c).
 *
 * Without a GPU: the candidate lists and validity reasons of every registered template
 * (and that every valid config builds), the device-side comparison kernel run on the
 * interpreter, the choice of finalists and their runs, the statistics, the cache file (round trip, corrupt files, writers in several processes
 * at once, a writer killed at random moments), and loom_tune on the interpreter, which
 * must hand back a launchable default config and say why it did not tune.
 *
 * With a GPU (skipped otherwise): tuning the broadcast-add over its valid configs at the
 * benchmark shape picks a config within 3% of the best found by timing every config
 * again independently (the pick and the best timed again side by side), and a second start finds it in the cache and compiles nothing; a
 * test template with planted faults shows that wrong, refused and invalid configs are
 * rejected with their reasons, against the CPU reference and against the GPU reference.
 *
 * The test template below is not in the registry: the tuner knows templates only by
 * their declarations.
 */
#include <criterion/criterion.h>

#include "loom.h"
#include "testutil.h"

#include "../templates/tpl.h"
#include "../templates/ikbo_lce.h"
#include "gpu.h"
#include "tune.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- helpers */

static char *temp_dir(void) { return t_temp_dir("loom-tune-test"); }
#define remove_dir t_remove_dir

static void defaults(const loom_param *p, int n, int64_t *v)
{
    char err[256];
    memset(v, 0, LOOM_MAX_PARAMS * sizeof *v);
    cr_assert_eq(loom_params_parse(p, n, NULL, v, err, sizeof err), 0);
}

static const tc_device dev_a = {"NVIDIA Test GPU", 132, 13000};

/* ---------------------------------------------------------------- a test template */

/* y = 2 x, with planted faults: bug=1 computes 2x + 1 (a wrong result), bug=2 is refused
 * by the build, bug=3 is rejected by valid(). */
enum { TS_N };
enum { TC_BLOCK, TC_WARPS, TC_BUG };

static loom_kernel *ts_build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    if (cf[TC_BUG] == 2) {
        snprintf(err, n, "planted refusal (bug=2)");
        return NULL;
    }
    loom_kernel *k = loom_kernel_create("tune_test_scale", (int)cf[TC_WARPS]);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(sh[TS_N]), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", LOOM_F32, LOOM_SHAPE1(sh[TS_N]), LOOM_OUT);
    loom_val off = loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, cf[TC_BLOCK]));
    loom_val v = loom_load(k, x, &off, LOOM_SHAPE1(cf[TC_BLOCK]), LOOM_NONE, 0.0);
    loom_val r = loom_mul(k, v, loom_const_f(k, LOOM_F32, 2.0));
    if (cf[TC_BUG] == 1)
        r = loom_add(k, r, loom_const_f(k, LOOM_F32, 1.0));
    loom_store(k, y, &off, r, LOOM_NONE);
    return k;
}

static void ts_grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    g[0] = (int)((sh[TS_N] + cf[TC_BLOCK] - 1) / cf[TC_BLOCK]);
    g[1] = g[2] = 1;
}

static void ts_init(const int64_t *sh, void *const *host, uint64_t seed)
{
    float *x = host[0];
    for (int64_t i = 0; i < sh[TS_N]; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((seed >> 40) % 2001) / 1000.0f - 1.0f;
    }
}

static void ts_reference(const int64_t *sh, void *const *host, void *const *ref)
{
    const float *x = host[0];
    float *y = ref[1];
    for (int64_t i = 0; i < sh[TS_N]; i++)
        y[i] = 2 * x[i];
}

static int ts_valid(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    (void)sh;
    if (cf[TC_BUG] == 3) {
        snprintf(why, n, "planted: bug=3 is never valid");
        return 0;
    }
    if (cf[TC_BLOCK] < 32 * cf[TC_WARPS]) {
        snprintf(why, n, "BLOCK=%lld is smaller than the CTA's %lld threads", (long long)cf[TC_BLOCK],
                 (long long)(32 * cf[TC_WARPS]));
        return 0;
    }
    return 1;
}

static double ts_cost(const int64_t *sh, const int64_t *cf)
{
    (void)sh;
    return (double)cf[TC_BUG] * 10 + 1.0 / (double)cf[TC_BLOCK];
}

static const loom_template test_scale = {
    .name = "tune_test_scale",
    .doc = "y = 2 x, with planted faults",
    .nshape = 1,
    .shape = {{"N", 1 << 20, "elements"}},
    .nconfig = 3,
    .config = {{"BLOCK", 512, "elements per program", 3, {32, 512, 2048}},
               {"warps", 4, "warps per CTA", 2, {1, 4}},
               {"bug", 0, "planted fault", 4, {0, 1, 2, 3}}},
    .build = ts_build,
    .grid = ts_grid,
    .init = ts_init,
    .reference = ts_reference,
    .atol = 0,
    .rtol = 1e-6,
    .valid = ts_valid,
    .cost = ts_cost,
};

/* A reference that cannot predict y (every element off by one): y as a workspace. */
static void ts_reference_off(const int64_t *sh, void *const *host, void *const *ref)
{
    ts_reference(sh, host, ref);
    float *y = ref[1];
    for (int64_t i = 0; i < sh[TS_N]; i++)
        y[i] += 1;
}

/* A check compares every output but those the template marks unchecked (a workspace
 * the other outputs show: ikbo_lce's user_res, and its flags counter, whose value depends
 * on the config). */
Test(tune, check_leaves_unchecked_outputs_alone)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt);
    loom_template t = test_scale;
    t.reference = ts_reference_off;
    int64_t sh[1] = {4096}, cf[3] = {512, 4, 0};
    char rep[512];
    cr_expect_eq(loom_template_check(rt, &t, sh, cf, 1, rep, sizeof rep), LOOM_ERR_RUNTIME, "%s", rep);
    cr_expect(strstr(rep, "4096 of 4096 elements outside their error bound"), "%s", rep);
    t.unchecked = 1u << 1;
    cr_expect_eq(loom_template_check(rt, &t, sh, cf, 1, rep, sizeof rep), LOOM_OK, "%s", rep);
    cr_expect(strstr(rep, "0 of 0 elements"), "%s", rep);
    /* ikbo_lce's user_res: its planes alone may round the other way at a tie */
    const loom_template *lce = loom_template_find("ikbo_lce");
    cr_assert(lce);
    cr_expect_eq(lce->unchecked, 1u << IKA_URES | 1u << IKA_FLAGS);
    loom_kernel *k = lce->build((int64_t[]){64, 4, 64, 64, 64, 64, LOOM_BF16, 0, LOOM_F16},
                                (int64_t[]){256, 128, 4, 8, 132, 2, 1, 2}, rep, sizeof rep);
    cr_assert(k, "%s", rep);
    loom_arg_info ai;
    loom_kernel_arg_info(k, IKA_URES, &ai);
    cr_expect_str_eq(ai.name, "user_res");
    loom_kernel_arg_info(k, IKA_FLAGS, &ai);
    cr_expect_str_eq(ai.name, "flags");
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- candidates, validity */

/* The untuned config is a candidate where it is none of the combinations: gemm's
 * promoted FP8 at 4096^3 takes tiles of two widths (BN2, wide: knobs with no candidates
 * of their own), once, valid, first (always timed: a max_configs cut kept only 2-stage
 * 128 x 128 tiles at BK=64, 3x slower, on an H200), the rest in cost order; the cost
 * model puts it before its tiles at 192 columns alone (the busiest program 5.59 tiles'
 * time against 6). */
Test(tune, the_untuned_config_is_a_candidate)
{
    const loom_template *t = loom_template_find("gemm");
    int64_t sh[LOOM_MAX_PARAMS], un[LOOM_MAX_PARAMS];
    char err[256];
    cr_assert_eq(loom_params_parse(t->shape, t->nshape, "M=4096,N=4096,K=4096,dtype=e4m3,btrans=1,promote=128", sh, err,
                                   sizeof err),
                 0, "%s", err);
    loom_template_untuned_config(t, sh, un);
    int64_t combos = 1;
    for (int i = 0; i < t->nconfig; i++)
        combos *= t->config[i].ncand ? t->config[i].ncand : 1;
    loom_tune_result *r = NULL;
    int nvalid = 0, n = tune_candidates(t, sh, &r, &nvalid);
    cr_assert_eq(n, combos + 1, "%d candidates, %lld combinations", n, (long long)combos);
    int64_t one[LOOM_MAX_PARAMS]; /* the same tiles, all 192 columns */
    memcpy(one, un, sizeof one);
    int bn2 = -1, wide = -1, seen = 0, at = -1, at_one = -1;
    for (int i = 0; i < t->nconfig; i++)
        bn2 = strcmp(t->config[i].key, "BN2") ? bn2 : i, wide = strcmp(t->config[i].key, "wide") ? wide : i;
    cr_assert(bn2 >= 0 && wide >= 0 && un[bn2] == 128 && un[wide] == 16, "untuned BN2 %lld wide %lld",
              (long long)un[bn2], (long long)un[wide]);
    one[bn2] = one[wide] = 0;
    for (int i = 0; i < n; i++) {
        seen += !memcmp(r[i].config, un, sizeof un);
        at = !memcmp(r[i].config, un, sizeof un) ? i : at;
        at_one = !memcmp(r[i].config, one, sizeof one) ? i : at_one;
    }
    cr_expect_eq(seen, 1, "the untuned config %d times", seen);
    cr_assert(at == 0 && r[at].verdict == LOOM_TUNE_TIMED, "the untuned config at %d, not first", at);
    for (int i = 2; i < nvalid; i++)
        cr_expect_leq(r[i - 1].cost, r[i].cost, "the rest in cost order");
    /* the pruning keeps it and measures from the best estimate, the second's here */
    double best = r[1].cost < r[0].cost ? r[1].cost : r[0].cost;
    int kept = tune_prune(r, nvalid, 1.5, 4);
    cr_expect_eq(r[0].verdict, LOOM_TUNE_TIMED);
    for (int i = 4; i < nvalid; i++)
        cr_expect_eq(i < kept, r[i].cost <= best * 1.5, "candidate %d (x%.2f the best): kept %d", i, r[i].cost / best,
                     i < kept);
    cr_assert(at_one > 0, "the same tiles at 192 columns only are no candidate");
    cr_expect(r[at].cost < r[at_one].cost / 1.05, "cost %g, with 192 columns only %g", r[at].cost, r[at_one].cost);
    free(r);
}

/* Every template in the registry: the candidates are every combination (and the untuned
 * config where it is none of them: not at any default shape), the invalid ones say why,
 * the valid ones come first in cost order (past the untuned config, which leads them),
 * the default config is valid at the default shape, and every valid config builds and
 * verifies. */
Test(tune, every_template_declares_valid_candidates)
{
    for (int ti = 0; ti < loom_template_count(); ti++) {
        const loom_template *t = loom_template_at(ti);
        int64_t sh[LOOM_MAX_PARAMS], def[LOOM_MAX_PARAMS];
        defaults(t->shape, t->nshape, sh);
        defaults(t->config, t->nconfig, def);
        int64_t combos = 1;
        for (int i = 0; i < t->nconfig; i++)
            combos *= t->config[i].ncand ? t->config[i].ncand : 1;
        loom_tune_result *r = NULL;
        int nvalid = 0, n = tune_candidates(t, sh, &r, &nvalid);
        cr_assert_eq(n, combos, "%s: %d candidates, expected %lld", t->name, n, (long long)combos);
        cr_expect_gt(nvalid, 0, "%s: no valid config at the default shape", t->name);
        bool def_seen = false;
        for (int i = 0; i < n; i++) {
            if (i < nvalid) {
                cr_expect_eq(r[i].verdict, LOOM_TUNE_TIMED, "%s: valid ones first", t->name);
                if (i > 1 && t->cost) /* the first: the untuned config, where the template has a heuristic */
                    cr_expect_leq(r[i - 1].cost, r[i].cost, "%s: valid ones in cost order", t->name);
                def_seen |= !memcmp(r[i].config, def, sizeof def);
                char err[1024] = "";
                loom_kernel *k = t->build(sh, r[i].config, err, sizeof err);
                cr_expect(k, "%s: valid config %d refused by the build: %s", t->name, i, err);
                if (k)
                    cr_expect_eq(loom_verify(k), LOOM_OK, "%s: %s", t->name, loom_kernel_errors(k));
                loom_kernel_destroy(k);
            } else {
                cr_expect_eq(r[i].verdict, LOOM_TUNE_INVALID);
                cr_expect_gt(strlen(r[i].reason), 10, "%s: an invalid config without a reason", t->name);
            }
        }
        cr_expect(def_seen, "%s: the default config is not valid at the default shape", t->name);
        free(r);
    }
}

/* The reason of a rejection names what limits the config. */
static void expect_reason(const char *tname, const char *shape, const char *config, const char *word)
{
    const loom_template *t = loom_template_find(tname);
    cr_assert(t && t->valid);
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char err[256], why[256] = "";
    cr_assert_eq(loom_params_parse(t->shape, t->nshape, shape, sh, err, sizeof err), 0, "%s", err);
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, config, cf, err, sizeof err), 0, "%s", err);
    cr_expect_eq(t->valid(sh, cf, why, sizeof why), 0, "%s [%s] [%s] should be invalid", tname, shape, config);
    cr_expect(strstr(why, word), "%s [%s]: reason '%s' does not mention '%s'", tname, config, why, word);
}

Test(tune, validity_reasons)
{
    expect_reason("ikbo_broadcast_add", "N=256", "BM=8,BN=512,warps=4", "masked off");
    expect_reason("ikbo_broadcast_add", "M=433", "BM=1024,BN=32,warps=4", "masked off");
    expect_reason("ikbo_broadcast_add", "N=4096,M=4096", "BM=64,BN=2048,warps=4", "65536");
    expect_reason("ikbo_broadcast_add", "", "BM=1,BN=32,warps=8", "16-byte vector");
    expect_reason("ikbo_broadcast_add", "dtype=f32", "BM=8,BN=30,warps=1", "16-byte vector");
    expect_reason("ikbo_broadcast_add", "", "BM=64,BN=256,warps=1", "registers");
    expect_reason("ikbo_broadcast_add", "B=70000", "", "grid");
    expect_reason("row_softmax", "N=4096", "BM=32,warps=4", "65536");
    expect_reason("row_softmax", "N=1000", "BM=16,warps=1", "registers");
    expect_reason("row_softmax", "N=16", "BM=1,warps=32", "no element");
    expect_reason("row_softmax", "R=3", "BM=8,warps=1", "masked off");
}

Test(tune, broadcast_add_has_at_least_32_valid_configs_at_the_benchmark_shape)
{
    const loom_template *t = loom_template_find("ikbo_broadcast_add");
    int64_t sh[LOOM_MAX_PARAMS];
    defaults(t->shape, t->nshape, sh);
    loom_tune_result *r = NULL;
    int nvalid = 0;
    cr_assert_gt(tune_candidates(t, sh, &r, &nvalid), 0);
    cr_expect_geq(nvalid, 32, "only %d valid configs", nvalid);
    free(r);
}

/* The tuner's big inputs are filled on several threads, with the values one thread makes. */
Test(tune, threaded_fill_gives_the_sequential_values)
{
    const int64_t n = (5 << 20) + 3;
    uint16_t *h = malloc(n * 2);
    uint64_t seed = 42, s = 42;
    tpl_fill(h, LOOM_F16, n, -1, 1, &seed);
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(tpl_rand(&s) >> 11) * (1.0 / 9007199254740992.0);
        uint16_t want;
        tpl_set(&want, LOOM_F16, 0, -1 + u * 2);
        if (h[i] != want)
            cr_assert_fail("element %lld: 0x%04x, sequentially 0x%04x", (long long)i, h[i], want);
    }
    cr_expect_eq(seed, s, "the state advances as one thread's would");
    free(h);
}

/* ---------------------------------------------------------------- the comparison kernel */

Test(tune, compare_kernel_counts_mismatches_on_the_interpreter)
{
    const int64_t n = 5000; /* three programs, the last one partial */
    int grid0 = 0;
    loom_kernel *k = tune_compare_kernel(LOOM_F32, n, false, &grid0);
    cr_assert(k);
    cr_assert_eq(grid0, (int)((n + TUNE_CMP_BLOCK - 1) / TUNE_CMP_BLOCK));
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    float *got = malloc(n * 4), *ref = malloc(n * 4), bad[8], mx[8];
    for (int64_t i = 0; i < n; i++)
        got[i] = ref[i] = (float)i * 0.25f - 100.0f;
    got[7] += 0.5f;                    /* beyond atol + rtol*|ref| */
    got[2500] = -got[2500];            /* beyond */
    got[4999] += 1e-7f * fabsf(ref[4999]); /* within rtol */
    got[100] = ref[100] = NAN;         /* NaN on both sides: passes */
    got[3000] = NAN;                   /* NaN on one side: fails */
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_buffer *bg = loom_buffer_create(rt, n * 4), *br = loom_buffer_create(rt, n * 4);
    loom_buffer *bb = loom_buffer_create(rt, grid0 * 4), *bm = loom_buffer_create(rt, grid0 * 4);
    loom_buffer_upload(bg, got, n * 4);
    loom_buffer_upload(br, ref, n * 4);
    loom_arg a[6] = {LOOM_ARG_BUF(bg), LOOM_ARG_BUF(br), LOOM_ARG_F32(1e-6f), LOOM_ARG_F32(1e-6f),
                     LOOM_ARG_BUF(bb), LOOM_ARG_BUF(bm)};
    int grid[3] = {grid0, 1, 1};
    cr_assert_eq(loom_launch(rt, k, grid, a, 6), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_buffer_download(bb, bad, grid0 * 4);
    loom_buffer_download(bm, mx, grid0 * 4);
    cr_expect_eq(bad[0], 1.0f);
    cr_expect_eq(bad[1], 2.0f);
    cr_expect_eq(bad[2], 0.0f);
    cr_expect_float_eq(mx[0], 0.5f, 1e-6);
    cr_expect(isinf(mx[1]), "a NaN against a number is an infinite error");
    cr_expect_lt(mx[2], 1e-3f);
    loom_buffer_destroy(bg);
    loom_buffer_destroy(br);
    loom_buffer_destroy(bb);
    loom_buffer_destroy(bm);
    loom_runtime_destroy(rt);
    loom_kernel_destroy(k);
    free(got);
    free(ref);
}

/* ---------------------------------------------------------------- the two timing passes */

/* The finalists: the fastest TUNE_FIN_MIN whatever their times, then the others within
 * TUNE_FIN_MARGIN of the fastest, at most TUNE_FIN_MAX, fastest first; untimed ones (0)
 * never. */
Test(tune, finalists_are_the_fastest_within_the_margin)
{
    int fin[TUNE_FIN_MAX];
    double none[3] = {0, 0, 0};
    cr_expect_eq(tune_finalists(none, 3, fin), 0);
    double one[3] = {0, 2.5, 0};
    cr_assert_eq(tune_finalists(one, 3, fin), 1);
    cr_expect_eq(fin[0], 1);
    /* far apart: the fastest three all the same */
    double apart[5] = {9.0, 1.0, 0, 4.0, 2.0};
    cr_assert_eq(tune_finalists(apart, 5, fin), TUNE_FIN_MIN);
    cr_expect_eq(fin[0], 1);
    cr_expect_eq(fin[1], 4);
    cr_expect_eq(fin[2], 3);
    /* many close ones: capped at TUNE_FIN_MAX, the fastest kept, in order of time */
    double close[20];
    for (int i = 0; i < 20; i++)
        close[i] = 1.0 + 0.001 * ((i * 7) % 20); /* a permutation of 1.000 .. 1.019 */
    int n = tune_finalists(close, 20, fin);
    cr_assert_eq(n, TUNE_FIN_MAX);
    for (int f = 0; f < n; f++) {
        cr_expect_float_eq(close[fin[f]], 1.0 + 0.001 * f, 1e-12, "finalist %d", f);
    }
    /* the margin: 1.00, 1.05, 1.09 (within), then beyond 1.10 after the minimum three */
    double m[6] = {1.30, 1.09, 1.00, 1.12, 1.05, 1.101};
    cr_assert_eq(tune_finalists(m, 6, fin), 3);
    cr_expect_eq(fin[0], 2);
    cr_expect_eq(fin[1], 4);
    cr_expect_eq(fin[2], 1);
    double m2[6] = {1.30, 1.02, 1.00, 1.12, 1.05, 1.099};
    cr_expect_eq(tune_finalists(m2, 6, fin), 4);
    cr_expect_eq(fin[3], 5);
    /* equal times: the lower index first */
    double eq[4] = {2.0, 1.0, 1.0, 1.0};
    cr_assert_eq(tune_finalists(eq, 4, fin), 3);
    cr_expect(fin[0] == 1 && fin[1] == 2 && fin[2] == 3);
}

/* Runs per finalist: the budget shared out, within bounds. */
Test(tune, final_runs_share_the_budget)
{
    cr_expect_eq(tune_final_runs(1.0, 0), 0);
    cr_expect_eq(tune_final_runs(0.001, 8), TUNE_FIN_RUNS_MAX, "short kernels: the most runs");
    cr_expect_eq(tune_final_runs(0, 3), TUNE_FIN_RUNS_MAX);
    cr_expect_eq(tune_final_runs(50.0, 8), TUNE_FIN_RUNS_MIN, "long kernels: the fewest");
    int r = tune_final_runs(0.6, 8);
    cr_expect_eq(r, (int)ceil(TUNE_FIN_BUDGET_MS / (0.6 * 8)));
    cr_expect_leq(r * 0.6 * 8, TUNE_FIN_BUDGET_MS + 0.6 * 8);
}

/* The statistics: the median, and the interquartile mean that sees below the timer's
 * step. */
Test(tune, median_and_interquartile_mean)
{
    double a[5] = {5, 1, 100, 2, 3};
    cr_expect_float_eq(tune_median(a, 5), 3.0, 1e-12);
    double b[4] = {4, 1, 3, 2};
    cr_expect_float_eq(tune_median(b, 4), 2.5, 1e-12);
    cr_expect_eq(tune_median(b, 0), 0);
    double c[3] = {7, 1, 1000};
    cr_expect_float_eq(tune_iqm(c, 3), 7.0, 1e-12, "fewer than 4: the median");
    double d[8] = {1000, 1, 2, 3, 4, 5, 6, 0.001}; /* the middle half: 2 3 4 5 */
    cr_expect_float_eq(tune_iqm(d, 8), 3.5, 1e-12);
    /* times quantized to a step of 1 for a kernel of about 7.5: the median says 7 or 8, the
     * interquartile mean lies between */
    double q[9] = {7, 8, 7, 8, 7, 8, 8, 7, 50};
    cr_expect_float_eq(tune_iqm(q, 9), (7 + 7 + 8 + 8 + 8) / 5.0, 1e-12); /* 7 7 [7 7 8 8 8] 8 50 */
    double q2[8] = {7, 8, 7, 8, 7, 8, 8, 7};
    cr_expect_float_eq(tune_iqm(q2, 8), 7.5, 1e-12);
}

/* ---------------------------------------------------------------- the cache file */

static void store(const char *path, const char *key, const loom_template *t, int64_t bm, double ms)
{
    int64_t sh[LOOM_MAX_PARAMS];
    defaults(t->shape, t->nshape, sh);
    tc_record rec = {.ms = ms, .ncand = 196, .nvalid = 90, .tune_ms = 1234};
    defaults(t->config, t->nconfig, rec.config);
    rec.config[0] = bm;
    char err[512] = "";
    cr_assert_eq(tc_store(path, key, t, sh, sh, &dev_a, &rec, err, sizeof err), LOOM_OK, "%s", err);
}

Test(tune_cache, round_trip)
{
    const loom_template *t = loom_template_find("ikbo_broadcast_add");
    char *dir = temp_dir(), path[256], warn[512];
    snprintf(path, sizeof path, "%s/sub/dir/tune.json", dir); /* directories are created */
    store(path, "key-one", t, 16, 0.25);
    store(path, "key-two", t, 32, 0.5);
    store(path, "key-one", t, 4, 0.125); /* replaces */
    tc_file *f = tc_open(path, warn, sizeof warn);
    cr_assert(f);
    cr_expect_str_empty(warn);
    cr_expect_eq(tc_count(f), 2);
    tc_record r;
    cr_assert(tc_find(f, "key-one", t, &r));
    cr_expect_eq(r.config[0], 4);
    cr_expect_eq(r.config[1], t->config[1].def);
    cr_expect_float_eq(r.ms, 0.125, 1e-12);
    cr_expect_eq(r.ncand, 196);
    cr_expect_eq(r.nvalid, 90);
    cr_assert(tc_find(f, "key-two", t, &r));
    cr_expect_eq(r.config[0], 32);
    cr_expect_not(tc_find(f, "key-three", t, &r));
    /* another template's knobs do not fit an entry that lacks them */
    cr_expect_not(tc_find(f, "key-one", &test_scale, &r));
    tc_close(f);
    remove_dir(dir);
}

Test(tune_cache, key_names_everything_the_choice_depends_on)
{
    const loom_template *t = loom_template_find("ikbo_broadcast_add");
    int64_t a[LOOM_MAX_PARAMS], b[LOOM_MAX_PARAMS], ba[LOOM_MAX_PARAMS], bb[LOOM_MAX_PARAMS];
    defaults(t->shape, t->nshape, a);
    memcpy(b, a, sizeof a);
    b[0] = 1000; /* B=1000 and B=1024 share a bucket */
    memcpy(ba, a, sizeof a);
    memcpy(bb, b, sizeof b);
    t->bucket(a, ba);
    t->bucket(b, bb);
    char k1[1024], k2[1024];
    tc_key(t, ba, &dev_a, k1, sizeof k1);
    tc_key(t, bb, &dev_a, k2, sizeof k2);
    cr_expect_str_eq(k1, k2);
    cr_expect(strstr(k1, "ikbo_broadcast_add") && strstr(k1, "NVIDIA Test GPU") && strstr(k1, "sm=132") &&
                  strstr(k1, "driver=13000") && strstr(k1, "loom=" LOOM_VERSION) && strstr(k1, "B=1024"),
              "%s", k1);
    tc_device other = dev_a;
    other.sm_count = 114;
    tc_key(t, ba, &other, k2, sizeof k2);
    cr_expect_str_neq(k1, k2);
    other = dev_a;
    other.driver = 12040;
    tc_key(t, ba, &other, k2, sizeof k2);
    cr_expect_str_neq(k1, k2);
    ba[2] = 432; /* M is not bucketed */
    tc_key(t, ba, &dev_a, k2, sizeof k2);
    cr_expect_str_neq(k1, k2);
    /* a template with other candidates is another key */
    loom_template t2 = *t;
    t2.config[0].cand[0] = 3;
    t->bucket(a, ba);
    tc_key(&t2, ba, &dev_a, k2, sizeof k2);
    cr_expect_str_neq(k1, k2);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
}

Test(tune_cache, corrupt_files_are_ignored_and_rebuilt)
{
    const loom_template *t = loom_template_find("ikbo_broadcast_add");
    char *dir = temp_dir(), path[256], warn[512];
    snprintf(path, sizeof path, "%s/tune.json", dir);
    const char *bad[] = {"{\"loom_tune_cache\": 1, \"entries\": {\"k\": {\"config\": {\"BM\": 8", /* truncated */
                         "\x01\x02garbage\xff", "[1, 2, 3]", "{\"loom_tune_cache\": 99, \"entries\": {}}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_file(path, bad[i]);
        tc_file *f = tc_open(path, warn, sizeof warn);
        cr_assert(f);
        cr_expect_neq(strlen(warn), 0, "case %zu: no warning", i);
        cr_expect(strstr(warn, path), "the warning names the file: %s", warn);
        cr_expect_eq(tc_count(f), 0);
        tc_close(f);
        store(path, "fresh", t, 2, 0.1); /* rebuilt */
        f = tc_open(path, warn, sizeof warn);
        cr_expect_str_empty(warn);
        cr_expect_eq(tc_count(f), 1, "case %zu", i);
        tc_record r;
        cr_expect(tc_find(f, "fresh", t, &r));
        tc_close(f);
    }
    /* a malformed entry is skipped alone */
    write_file(path, "{\"loom_tune_cache\": 1, \"entries\": {"
                     "\"bad1\": {\"config\": {\"BM\": \"eight\", \"BN\": 256, \"warps\": 4}},"
                     "\"bad2\": {\"config\": {\"BM\": 8.5, \"BN\": 256, \"warps\": 4}},"
                     "\"bad3\": 17,"
                     "\"good\": {\"config\": {\"BM\": 8, \"BN\": 256, \"warps\": 4}, \"ms\": 0.3}}}");
    tc_file *f = tc_open(path, warn, sizeof warn);
    cr_expect_str_empty(warn);
    tc_record r;
    cr_expect_not(tc_find(f, "bad1", t, &r));
    cr_expect_not(tc_find(f, "bad2", t, &r));
    cr_expect_not(tc_find(f, "bad3", t, &r));
    cr_expect(tc_find(f, "good", t, &r));
    cr_expect_eq(r.config[0], 8);
    tc_close(f);
    remove_dir(dir);
}

Test(tune_cache, concurrent_writers_lose_nothing)
{
    const loom_template *t = loom_template_find("ikbo_broadcast_add");
    char *dir = temp_dir(), path[256], warn[512];
    snprintf(path, sizeof path, "%s/tune.json", dir);
    enum { PROCS = 4, KEYS = 15 };
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        cr_assert_geq(pids[p], 0);
        if (pids[p] == 0) {
            int64_t sh[LOOM_MAX_PARAMS];
            defaults(t->shape, t->nshape, sh);
            for (int k = 0; k < KEYS; k++) {
                char key[64], err[512];
                snprintf(key, sizeof key, "proc%d-key%d", p, k);
                tc_record rec = {.ms = p + k * 0.01};
                defaults(t->config, t->nconfig, rec.config);
                rec.config[0] = p * 100 + k;
                if (tc_store(path, key, t, sh, sh, &dev_a, &rec, err, sizeof err) != LOOM_OK)
                    _exit(1);
            }
            _exit(0);
        }
    }
    for (int p = 0; p < PROCS; p++) {
        int status;
        cr_assert_eq(waitpid(pids[p], &status, 0), pids[p]);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer %d failed", p);
    }
    tc_file *f = tc_open(path, warn, sizeof warn);
    cr_expect_str_empty(warn);
    cr_expect_eq(tc_count(f), PROCS * KEYS);
    for (int p = 0; p < PROCS; p++)
        for (int k = 0; k < KEYS; k++) {
            char key[64];
            tc_record r;
            snprintf(key, sizeof key, "proc%d-key%d", p, k);
            cr_expect(tc_find(f, key, t, &r), "%s lost", key);
            cr_expect_eq(r.config[0], p * 100 + k);
        }
    tc_close(f);
    remove_dir(dir);
}

/* A writer killed at random moments (SIGKILL: no clean-up of any kind) leaves a file the
 * next reader parses without a warning, holding every entry stored before the kill; the
 * next writer is not blocked and removes the dead writer's temporary file. */
Test(tune_cache, killed_writer_leaves_a_readable_cache)
{
    const loom_template *t = loom_template_find("ikbo_broadcast_add");
    char *dir = temp_dir(), path[256], warn[512];
    snprintf(path, sizeof path, "%s/tune.json", dir);
    store(path, "before", t, 8, 0.2);
    for (int round = 0; round < 6; round++) {
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            int64_t sh[LOOM_MAX_PARAMS];
            defaults(t->shape, t->nshape, sh);
            for (int k = 0;; k++) {
                char key[64], err[512];
                snprintf(key, sizeof key, "round%d-key%d", round, k % 50);
                tc_record rec = {.ms = k};
                defaults(t->config, t->nconfig, rec.config);
                tc_store(path, key, t, sh, sh, &dev_a, &rec, err, sizeof err);
            }
        }
        struct timespec ts = {0, (long)(2 + 7 * round) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFSIGNALED(status));
        tc_file *f = tc_open(path, warn, sizeof warn);
        cr_assert(f);
        cr_expect_str_empty(warn, "round %d: %s", round, warn);
        tc_record r;
        cr_expect(tc_find(f, "before", t, &r), "round %d: an entry stored before the kill is gone", round);
        tc_close(f);
    }
    store(path, "after", t, 16, 0.1); /* the lock is free, orphans are removed */
    DIR *d = opendir(dir);
    struct dirent *de;
    int orphans = 0;
    while ((de = readdir(d)))
        orphans += strstr(de->d_name, ".tmp.") != NULL;
    closedir(d);
    cr_expect_eq(orphans, 0, "temporary files of the killed writers were left");
    tc_file *f = tc_open(path, warn, sizeof warn);
    tc_record r;
    cr_expect(tc_find(f, "after", t, &r));
    tc_close(f);
    remove_dir(dir);
}

/* ---------------------------------------------------------------- loom_tune without a GPU */

Test(tune, startup_on_the_interpreter_returns_ready_defaults)
{
    const loom_template *t = loom_template_find("ikbo_broadcast_add");
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    /* the second shape cannot use the default BN=256 (N=24): the cost model's best valid
     * config is used instead */
    const char *texts[2] = {"B=9,U=2,M=33,N=200", "B=5,U=3,M=7,N=24,dtype=f32,shuffle=1"};
    int64_t shapes[2 * LOOM_MAX_PARAMS];
    char err[256], rep[1024];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(loom_params_parse(t->shape, t->nshape, texts[i], shapes + i * t->nshape, err, sizeof err), 0);
    loom_tuned out[2];
    loom_tune_opts o = {.quiet = 1};
    cr_assert_eq(loom_tune(rt, t, shapes, 2, &o, out), LOOM_OK, "%s", out[0].note);
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(out[i].source, LOOM_TUNE_DEFAULT);
        cr_expect_eq(out[i].status, LOOM_OK);
        cr_assert(out[i].kernel);
        cr_expect(strstr(out[i].note, "Not tuned"), "%s", out[i].note);
        cr_expect(strstr(out[i].note, "interpreter"), "%s", out[i].note);
        cr_expect_eq(loom_template_check(rt, t, out[i].shape, out[i].config, 3, rep, sizeof rep), LOOM_OK, "%s",
                     rep);
        int g[3];
        t->grid(out[i].shape, out[i].config, g);
        cr_expect(!memcmp(g, out[i].grid, sizeof g));
    }
    cr_expect_eq(out[0].config[1], 256, "the default config");
    cr_expect_neq(out[1].config[1], 256);
    cr_expect(strstr(out[1].note, "cannot serve"), "%s", out[1].note);
    loom_tuned_release(out, 2);
    loom_runtime_destroy(rt);
}

Test(tune, a_template_outside_the_registry_on_the_interpreter)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    int64_t shape[1] = {1000};
    loom_tuned out;
    cr_assert_eq(loom_tune(rt, &test_scale, shape, 1, &(loom_tune_opts){.quiet = 1}, &out), LOOM_OK);
    cr_expect_eq(out.config[TC_BLOCK], 512);
    cr_expect_eq(out.config[TC_BUG], 0);
    cr_expect_eq(out.ncand, 24);
    cr_expect_eq(out.nvalid, 15); /* bug=3 (6) and BLOCK=32 with 4 warps (3) are invalid */
    loom_tuned_release(&out, 1);
    loom_runtime_destroy(rt);
}

Test(tune, bad_arguments_are_reported)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    int64_t shape[1] = {1000};
    loom_tuned out;
    cr_expect_eq(loom_tune(rt, NULL, shape, 1, NULL, &out), LOOM_ERR_INVALID);
    cr_expect(strstr(out.note, "no template"), "%s", out.note);
    cr_expect_eq(loom_tune(NULL, &test_scale, shape, 1, NULL, &out), LOOM_ERR_INVALID);
    cr_expect(strstr(out.note, "no runtime"), "%s", out.note);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- on the GPU */


/* Fresh caches (tuning and modules) for this test process. */
static char *fresh_caches(void)
{
    char *dir = temp_dir(), p[256];
    snprintf(p, sizeof p, "%s/tune.json", dir);
    setenv("LOOM_TUNE_CACHE", p, 1);
    snprintf(p, sizeof p, "%s/modules", dir);
    setenv("LOOM_CACHE_DIR", p, 1);
    unsetenv("LOOM_TUNE");
    unsetenv("LOOM_TUNE_FORCE");
    return dir;
}

/* Time every config again, independently of the tuner's choices, with the tuner's measure
 * (L2-flushed launches, loom_time_launch_flushed) on one set of arguments: three
 * interleaved rounds of 30 runs rank them (median of the rounds); then the ranking's best
 * four and the pick are timed again together, 20 interleaved rounds of 10 runs (the
 * interquartile mean of the rounds), so that the pick and the best compare under the same
 * conditions. */
static void exhaustive(loom_runtime *rt, const loom_tuned *x, double *best, double *picked, int *nbest)
{
    const loom_template *t = x->t;
    loom_instance in;
    char err[1024];
    cr_assert_eq(loom_instance_create(rt, t, x->shape, x->config, 7, &in, err, sizeof err), LOOM_OK, "%s", err);
    int n = x->nresults, ipick = -1;
    double *r = calloc((size_t)n * 3, sizeof *r), *rank = calloc((size_t)n, sizeof *rank);
    loom_kernel **k = calloc((size_t)n, sizeof *k);
    for (int i = 0; i < n; i++) {
        if (x->results[i].verdict == LOOM_TUNE_TIMED && x->results[i].ms > 0)
            k[i] = t->build(x->shape, x->results[i].config, err, sizeof err);
        if (!memcmp(x->results[i].config, x->config, sizeof x->config))
            ipick = i;
    }
    cr_assert(ipick >= 0 && k[ipick]);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < n; i++) {
            if (!k[i])
                continue;
            int g[3];
            t->grid(x->shape, x->results[i].config, g);
            cr_assert_eq(loom_time_launch_flushed(rt, k[i], g, in.args, in.nargs, 2, 30, &r[i * 3 + round]),
                         LOOM_OK, "%s", loom_runtime_error(rt));
        }
    int top[5] = {-1, -1, -1, -1, -1}, ntop = 0;
    for (int i = 0; i < n; i++)
        if (k[i])
            rank[i] = tune_median(r + i * 3, 3);
    for (int f = 0; f < 4; f++) { /* the best four, by selection */
        int b = -1;
        for (int i = 0; i < n; i++) {
            bool taken = false;
            for (int j = 0; j < ntop; j++)
                taken |= top[j] == i;
            if (k[i] && !taken && (b < 0 || rank[i] < rank[b]))
                b = i;
        }
        if (b >= 0)
            top[ntop++] = b;
    }
    bool pick_in = false;
    for (int j = 0; j < ntop; j++)
        pick_in |= top[j] == ipick;
    if (!pick_in)
        top[ntop++] = ipick;
    double fair[5][20];
    for (int round = 0; round < 20; round++)
        for (int j = 0; j < ntop; j++) {
            int g[3];
            t->grid(x->shape, x->results[top[j]].config, g);
            cr_assert_eq(loom_time_launch_flushed(rt, k[top[j]], g, in.args, in.nargs, 1, 10, &fair[j][round]),
                         LOOM_OK, "%s", loom_runtime_error(rt));
        }
    *best = 0;
    for (int j = 0; j < ntop; j++) {
        double ms = tune_iqm(fair[j], 20);
        if (*best == 0 || ms < *best) {
            *best = ms;
            *nbest = top[j];
        }
        if (top[j] == ipick)
            *picked = ms;
    }
    for (int i = 0; i < n; i++)
        loom_kernel_destroy(k[i]);
    free(k);
    free(r);
    free(rank);
    loom_instance_destroy(&in);
}

Test(gpu_tune, broadcast_add_pick_within_3pct_of_exhaustive_then_cached, .timeout = 300)
{
    char *dir = fresh_caches();
    loom_runtime *rt = t_gpu_or_skip();
    const loom_template *t = loom_template_find("ikbo_broadcast_add");
    int64_t sh[LOOM_MAX_PARAMS];
    defaults(t->shape, t->nshape, sh);
    loom_tuned x;
    cr_assert_eq(loom_tune(rt, t, sh, 1, &(loom_tune_opts){.quiet = 1}, &x), LOOM_OK, "%s", x.note);
    cr_assert_eq(x.source, LOOM_TUNE_TUNED, "%s", x.note);
    cr_expect_geq(x.ntimed, 32, "only %d configs timed: %s", x.ntimed, x.note);
    char cf[256], rep[1024];
    loom_params_format(t->config, t->nconfig, x.config, cf, sizeof cf);
    double best = 0, picked = 0;
    int ib = -1;
    exhaustive(rt, &x, &best, &picked, &ib);
    char bc[256];
    loom_params_format(t->config, t->nconfig, x.results[ib].config, bc, sizeof bc);
    cr_log_info("tuned in %.0f ms: %s (%.4f ms); exhaustive best %s %.4f ms; picked %.4f ms (x%.3f)", x.tune_ms, cf,
                x.ms, bc, best, picked, picked / best);
    cr_expect_leq(picked, 1.03 * best, "picked %s at %.4f ms, exhaustive best %s at %.4f ms", cf, picked, bc, best);
    /* the pick runs correctly at other inputs too */
    cr_expect_eq(loom_template_check(rt, t, sh, x.config, 11, rep, sizeof rep), LOOM_OK, "%s", rep);
    loom_tuned_release(&x, 1);
    loom_runtime_destroy(rt);

    /* a second start: from the cache, compiling nothing */
    rt = t_gpu_or_skip();
    rt_gpu_stats_reset();
    loom_tuned y;
    cr_assert_eq(loom_tune(rt, t, sh, 1, &(loom_tune_opts){.quiet = 1}, &y), LOOM_OK, "%s", y.note);
    cr_expect_eq(y.source, LOOM_TUNE_CACHED, "%s", y.note);
    cr_expect(y.kernel);
    rt_gpu_stats st;
    rt_gpu_stats_get(&st);
    cr_expect_eq(st.misses, 0, "the second start compiled %llu kernels", (unsigned long long)st.misses);
    cr_expect_geq(st.disk_hits, 1);
    cr_expect_lt(y.tune_ms, 100, "warm start took %.1f ms", y.tune_ms);
    cr_log_info("warm start %.2f ms", y.tune_ms);
    loom_tuned_release(&y, 1);
    loom_runtime_destroy(rt);
    remove_dir(dir);
}

static void expect_planted_faults(const loom_tuned *x)
{
    int wrong = 0, refused = 0, invalid = 0, timed = 0;
    for (int i = 0; i < x->nresults; i++) {
        const loom_tune_result *r = &x->results[i];
        switch (r->config[TC_BUG]) {
        case 0:
            cr_expect_eq(r->verdict, r->config[TC_BLOCK] < 32 * r->config[TC_WARPS] ? LOOM_TUNE_INVALID
                                                                                   : LOOM_TUNE_TIMED,
                         "%s", r->reason);
            timed += r->verdict == LOOM_TUNE_TIMED;
            break;
        case 1:
            if (r->verdict != LOOM_TUNE_INVALID) {
                cr_expect_eq(r->verdict, LOOM_TUNE_WRONG, "bug=1: %s", loom_tune_verdict_name(r->verdict));
                cr_expect(strstr(r->reason, "outside tolerance"), "%s", r->reason);
                wrong++;
            }
            break;
        case 2:
            if (r->verdict != LOOM_TUNE_INVALID) {
                cr_expect_eq(r->verdict, LOOM_TUNE_REFUSED);
                cr_expect(strstr(r->reason, "planted refusal"), "%s", r->reason);
                refused++;
            }
            break;
        default:
            cr_expect_eq(r->verdict, LOOM_TUNE_INVALID);
            cr_expect(strstr(r->reason, "planted"), "%s", r->reason);
            invalid++;
        }
    }
    cr_expect_eq(wrong, 5);
    cr_expect_eq(refused, 5);
    cr_expect_eq(invalid, 6);
    cr_expect_eq(timed, 5);
    cr_expect_eq(x->config[TC_BUG], 0);
}

Test(gpu_tune, wrong_refused_and_invalid_configs_are_rejected, .timeout = 120)
{
    char *dir = fresh_caches();
    loom_runtime *rt = t_gpu_or_skip();
    int64_t shape[1] = {(1 << 20) + 77};
    loom_tuned x;
    /* outputs under LOOM_TUNE_REF_MAX: checked against the CPU reference */
    cr_assert_eq(loom_tune(rt, &test_scale, shape, 1, &(loom_tune_opts){.quiet = 1}, &x), LOOM_OK, "%s", x.note);
    cr_expect_eq(x.source, LOOM_TUNE_TUNED, "%s", x.note);
    cr_expect(strstr(x.note, "CPU reference"), "%s", x.note);
    expect_planted_faults(&x);
    loom_tuned_release(&x, 1);
    /* above it: against the default config's GPU output */
    setenv("LOOM_TUNE_REF_MAX", "1000", 1);
    cr_assert_eq(loom_tune(rt, &test_scale, shape, 1, &(loom_tune_opts){.quiet = 1, .force = 1}, &x), LOOM_OK, "%s",
                 x.note);
    cr_expect(strstr(x.note, "GPU output"), "%s", x.note);
    expect_planted_faults(&x);
    loom_tuned_release(&x, 1);
    unsetenv("LOOM_TUNE_REF_MAX");
    /* LOOM_TUNE=0 with nothing cached for this shape: the default, untimed */
    setenv("LOOM_TUNE", "0", 1);
    shape[0] = 4096;
    cr_assert_eq(loom_tune(rt, &test_scale, shape, 1, &(loom_tune_opts){.quiet = 1}, &x), LOOM_OK, "%s", x.note);
    cr_expect_eq(x.source, LOOM_TUNE_DEFAULT);
    cr_expect(strstr(x.note, "LOOM_TUNE=0"), "%s", x.note);
    loom_tuned_release(&x, 1);
    unsetenv("LOOM_TUNE");
    loom_runtime_destroy(rt);
    remove_dir(dir);
}

/* A tuning where no candidate is right falls back loudly: the default config's kernel is
 * ready, the source says FELL_BACK, the note opens NOT TUNED, and loom_tune returns
 * LOOM_ERR_NOT_TUNED; nothing goes into the tuning cache, so a second start tries again. */
/* A reference no config reproduces (bug=1's planted +1 included). */
static void ts_reference_far(const int64_t *sh, void *const *host, void *const *ref)
{
    ts_reference(sh, host, ref);
    float *y = ref[1];
    for (int64_t i = 0; i < sh[TS_N]; i++)
        y[i] += 3;
}

Test(gpu_tune, a_tuning_with_no_right_candidate_is_not_silent, .timeout = 300)
{
    char *dir = fresh_caches();
    loom_runtime *rt = t_gpu_or_skip();
    loom_template t = test_scale;
    t.reference = ts_reference_far; /* every candidate is "wrong" */
    int64_t sh[1] = {4096};
    loom_tuned x;
    loom_status st = loom_tune(rt, &t, sh, 1, &(loom_tune_opts){.quiet = 1}, &x);
    cr_expect_eq(st, LOOM_ERR_NOT_TUNED, "%s: %s", loom_status_name(st), x.note);
    cr_expect_eq(x.source, LOOM_TUNE_FELL_BACK, "%s", x.note);
    cr_expect_eq(x.status, LOOM_OK, "the default config's kernel is ready: %s", x.note);
    cr_expect(x.kernel);
    cr_expect(strstr(x.note, "NOT TUNED"), "%s", x.note);
    loom_tuned_release(&x, 1);
    loom_tuned y;
    st = loom_tune(rt, &t, sh, 1, &(loom_tune_opts){.quiet = 1}, &y);
    cr_expect_eq(y.source, LOOM_TUNE_FELL_BACK, "a fallback is never cached: %s", y.note);
    loom_tuned_release(&y, 1);
    loom_runtime_destroy(rt);
    remove_dir(dir);
}

/* What runs without timing: the defaults, adjusted by the template's heuristic where the
 * shape suits another config (gemm: split 128 x 256 tiles on large products), never a
 * config the shape cannot take. */
static void untuned_at(const loom_template *t, const char *shape_text, int64_t *shape, int64_t *cfg)
{
    char err[256];
    cr_assert_eq(loom_params_parse(t->shape, t->nshape, shape_text, shape, err, sizeof err), 0, "%s", err);
    loom_template_untuned_config(t, shape, cfg);
    cr_expect(t->valid(shape, cfg, err, sizeof err), "%s: %s", shape_text, err);
}

/* The untuned config at shape_text, written as "k=v,..." into text. */
static void untuned_text(const loom_template *t, const char *shape_text, char *text, size_t n)
{
    int64_t shape[LOOM_MAX_PARAMS], cfg[LOOM_MAX_PARAMS];
    untuned_at(t, shape_text, shape, cfg);
    loom_params_format(t->config, t->nconfig, cfg, text, n);
}

Test(tune, untuned_config_follows_the_template_heuristic)
{
    const loom_template *t = loom_template_find("gemm");
    cr_assert(t && t->heuristic);
    int64_t shape[LOOM_MAX_PARAMS], cfg[LOOM_MAX_PARAMS], def[LOOM_MAX_PARAMS];
    char text[512];
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, "", def, text, sizeof text), 0);
    untuned_text(t, "M=4096,N=4096,K=4096", text, sizeof text);
    cr_expect(strstr(text, "BM=128,BN=256,") && strstr(text, "cwarps=8") && strstr(text, "consumers=2") &&
                  strstr(text, "group=8"),
              "4096^3: %s", text);
    untuned_text(t, "M=2048,N=2048,K=2048,dtype=bf16,odtype=bf16", text, sizeof text);
    cr_expect(strstr(text, "consumers=2"), "2048^3: %s", text);
    untuned_text(t, "M=4096,N=4096,K=4096,dtype=e4m3,odtype=bf16,btrans=1", text, sizeof text);
    cr_expect(strstr(text, "BK=128,") && strstr(text, "consumers=2"), "FP8 4096^3: %s", text);
    /* rows wasted by 128-row tiles (433 -> 512 against 448), too few tiles, and a split
     * staging tile of f32 past the shared memory keep the defaults */
    const char *keep[3] = {"M=433,N=256,K=872", "M=512,N=512,K=4096", "M=4096,N=4096,K=4096,odtype=f32"};
    for (int i = 0; i < 3; i++) {
        untuned_at(t, keep[i], shape, cfg);
        cr_expect(!memcmp(cfg, def, t->nconfig * sizeof *cfg), "%s keeps the defaults", keep[i]);
    }
    /* a small M with N not a multiple of 256: the transposed product, BM its rows in two tiles */
    untuned_text(t, "M=433,N=72,K=866,batch=1024", text, sizeof text);
    cr_expect(strstr(text, "BM=224,BN=128,") && strstr(text, "trans=1"), "433x72: %s", text);
    /* a batch sharing one A (the IKBO shape, N=256 too): the transposed product, a cluster's
     * pair of products multicasting its one A tile; a batched A: no pair, N=256 keeps the
     * defaults */
    untuned_text(t, "M=433,N=256,K=872,batch=1024", text, sizeof text);
    cr_expect(strstr(text, "BM=224,BN=128,") && strstr(text, "trans=1") && strstr(text, "cluster=2") &&
                  strstr(text, "share=1"),
              "433x256 shared A: %s", text);
    untuned_at(t, "M=433,N=256,K=872,batch=1024,ashared=0", shape, cfg);
    cr_expect(!memcmp(cfg, def, t->nconfig * sizeof *cfg), "433x256 batched A keeps the defaults");
    untuned_text(t, "M=200,N=256,K=872,batch=1024", text, sizeof text); /* 200 rows: one tile of 208 */
    cr_expect(strstr(text, "BM=208,") && strstr(text, "share=1"), "200x256 shared A: %s", text);
    /* the tuner takes it when nothing is timed, and says so */
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    untuned_at(t, "M=4096,N=4096,K=4096", shape, cfg);
    loom_tuned out;
    cr_assert_eq(loom_tune(rt, t, shape, 1, &(loom_tune_opts){.quiet = 1}, &out), LOOM_OK, "%s", out.note);
    cr_expect_eq(out.source, LOOM_TUNE_DEFAULT);
    cr_expect(!memcmp(out.config, cfg, t->nconfig * sizeof *cfg), "%s", out.note);
    cr_expect(strstr(out.note, "heuristic"), "%s", out.note);
    loom_tuned_release(&out, 1);
    loom_runtime_destroy(rt);
    /* a template without a heuristic runs its defaults */
    const loom_template *b = loom_template_find("ikbo_broadcast_add");
    cr_assert_eq(loom_params_parse(b->config, b->nconfig, "", def, text, sizeof text), 0);
    untuned_at(b, "B=9,U=2,M=33,N=200", shape, cfg);
    cr_expect(!memcmp(cfg, def, b->nconfig * sizeof *cfg));
}
