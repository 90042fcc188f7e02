/*
 * test_error_model.c -- the checks' error model (docs/checks.md, templates/error_model.c)
 * fails no right kernel and passes no wrong one.
 *
 *   - the helpers: ulps of each type, the f32 sum term, the bound's binade rule;
 *   - a random-shape sweep: every template at random shapes, dtypes, mappings and valid
 *     configs, each checked element by element against its bound: no false failure.  On
 *     the interpreter in CI (four tests of LOOM_TEST_SWEEP shapes each, default 80: 320 in
 *     all); on the GPU the same sweep (LOOM_TEST_SWEEP_GPU, default 100) where there is one;
 *   - mutation: in each checked output of each template, one element moved just past its
 *     bound (up or down, at the first, last and a random element), made NaN or infinite,
 *     is caught every time, and the count of bad elements is exactly the number planted.
 */
#include <criterion/criterion.h>

#include "loom.h"
#include "t_model.h" /* t_just_past */
#include "testutil.h"

#include "../templates/tpl.h"
#include "tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Test(error_model, helpers)
{
    cr_expect_eq(loom_ulp(LOOM_F16, 1.0), 0x1p-10);
    cr_expect_eq(loom_ulp(LOOM_F16, 1.999), 0x1p-10);
    cr_expect_eq(loom_ulp(LOOM_F16, 2.0), 0x1p-9);
    cr_expect_eq(loom_ulp(LOOM_F16, -3.0), 0x1p-9);
    cr_expect_eq(loom_ulp(LOOM_F16, 0.0), 0x1p-24);     /* subnormal spacing */
    cr_expect_eq(loom_ulp(LOOM_F16, 0x1p-20), 0x1p-24);
    cr_expect_eq(loom_ulp(LOOM_BF16, 1.0), 0x1p-7);
    cr_expect_eq(loom_ulp(LOOM_F32, 1.0), 0x1p-23);
    cr_expect_eq(loom_ulp(LOOM_F32, 0.0), 0x1p-149);
    cr_expect_eq(loom_ulp(LOOM_I32, 5.0), 0.0);
    cr_expect_eq(loom_f32_sum_error(1, 100.0), 0.0);
    double g = loom_f32_sum_error(1000, 1.0);
    cr_expect(g > 1000 * 0x1p-23 && g < 1001 * 0x1p-23, "%g", g);
    cr_expect(isinf(loom_f32_sum_error(INT64_C(1) << 23, 1.0)));
    /* one ulp at the reference, plus the error; across a power of two the larger ulp */
    cr_expect_eq(loom_error_bound(LOOM_F16, 1.5, 0.0), 0x1p-10);
    cr_expect_eq(loom_error_bound(LOOM_F16, 1.999, 0.01), 0.01 + 0x1p-9);
    cr_expect_eq(loom_error_bound(LOOM_I32, 7.0, 0.0), 0.0);
    cr_expect(isinf(loom_error_bound(LOOM_F16, NAN, 0.0)));
}

/* ---------------------------------------------------------------- random shapes */

static uint64_t rnd(uint64_t *s, uint64_t n) { return tpl_rand(s) % n; }
static int64_t pick(uint64_t *s, int64_t lo, int64_t hi) { return lo + (int64_t)rnd(s, (uint64_t)(hi - lo + 1)); }

static const loom_dtype f16s[] = {LOOM_F16, LOOM_BF16};
static const loom_dtype floats[] = {LOOM_F16, LOOM_BF16, LOOM_F32};

/* A random shape of template t (its parameters by name), small enough for the interpreter. */
static void random_shape(const loom_template *t, uint64_t *s, int64_t *sh)
{
    for (int i = 0; i < t->nshape; i++)
        sh[i] = t->shape[i].def;
    for (int i = 0; i < t->nshape; i++) {
        const char *k = t->shape[i].key;
        int64_t v = sh[i];
        if (!strcmp(t->name, "ikbo_broadcast_add"))
            v = !strcmp(k, "B") ? pick(s, 1, 80) : !strcmp(k, "U") ? pick(s, 1, 40) : !strcmp(k, "M") ? pick(s, 1, 100)
                : !strcmp(k, "N") ? pick(s, 1, 300) : !strcmp(k, "dtype") ? floats[rnd(s, 3)] : v;
        else if (!strcmp(t->name, "row_softmax"))
            v = !strcmp(k, "R") ? pick(s, 1, 64) : !strcmp(k, "N") ? pick(s, 1, 2000)
                : !strcmp(k, "dtype") ? floats[rnd(s, 3)] : v;
        else if (!strcmp(t->name, "gemm"))
            v = !strcmp(k, "M") ? pick(s, 1, 200) : !strcmp(k, "N") ? pick(s, 1, 32) * 8 : !strcmp(k, "K") ? pick(s, 1, 300)
                : !strcmp(k, "batch") ? pick(s, 1, 3) : !strcmp(k, "dtype") ? f16s[rnd(s, 2)]
                : !strcmp(k, "odtype") ? floats[rnd(s, 3)] : !strcmp(k, "ashared") ? pick(s, 0, 1) : v;
        else if (!strcmp(t->name, "ikbo_lce"))
            v = !strcmp(k, "B") ? pick(s, 1, 48) : !strcmp(k, "U") ? pick(s, 1, 20) : !strcmp(k, "M") ? pick(s, 1, 150)
                : !strcmp(k, "N") ? pick(s, 1, 16) * 8 : !strcmp(k, "Ku") ? pick(s, 1, 200)
                : !strcmp(k, "Kc") ? pick(s, 1, 200) : !strcmp(k, "dtype") ? f16s[rnd(s, 2)] : v;
        else if (!strcmp(t->name, "ikbo_fa"))
            v = !strcmp(k, "B") ? pick(s, 1, 10) : !strcmp(k, "U") ? pick(s, 1, 5) : !strcmp(k, "S") ? pick(s, 1, 300)
                : !strcmp(k, "H") ? pick(s, 1, 2) : !strcmp(k, "D") ? 64 << rnd(s, 2)
                : !strcmp(k, "n_seed") ? pick(s, 1, 80) : !strcmp(k, "dtype") ? f16s[rnd(s, 2)]
                : !strcmp(k, "varlen") ? pick(s, 0, 1) : v;
        if (!strcmp(k, "shuffle"))
            v = pick(s, 0, 1);
        sh[i] = v;
    }
}

/* n random (template, shape, valid config) checks on rt, from seed; returns the number
 * checked (shapes with no valid config are drawn again). */
static int sweep(loom_runtime *rt, uint64_t seed, int n)
{
    uint64_t s = seed;
    int done = 0, tries = 0;
    while (done < n && tries < 20 * n) {
        tries++;
        const loom_template *t = loom_template_at((int)rnd(&s, (uint64_t)loom_template_count()));
        int64_t sh[LOOM_MAX_PARAMS];
        random_shape(t, &s, sh);
        loom_tune_result *res = NULL;
        int nvalid = 0;
        int nres = tune_candidates(t, sh, &res, &nvalid);
        cr_assert(nres >= 0, "out of memory");
        if (nvalid == 0) {
            free(res);
            continue;
        }
        int64_t cf[LOOM_MAX_PARAMS];
        memcpy(cf, res[rnd(&s, (uint64_t)nvalid)].config, sizeof cf);
        free(res);
        char rep[1024], shs[300], cfs[300];
        loom_params_format(t->shape, t->nshape, sh, shs, sizeof shs);
        loom_params_format(t->config, t->nconfig, cf, cfs, sizeof cfs);
        loom_status st = loom_template_check(rt, t, sh, cf, seed + (uint64_t)done, rep, sizeof rep);
        cr_expect_eq(st, LOOM_OK, "%s --shape %s --config %s: %s", t->name, shs, cfs, rep);
        done++;
    }
    return done;
}

static int sweep_count(const char *env, int def)
{
    const char *v = getenv(env);
    return v && atoi(v) > 0 ? atoi(v) : def;
}

static void interp_sweep(uint64_t seed)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    int n = sweep_count("LOOM_TEST_SWEEP", 80);
    cr_expect_eq(sweep(rt, seed, n), n);
    loom_runtime_destroy(rt);
}

Test(error_model, sweep_interpreter_0, .timeout = 900) { interp_sweep(1000); }
Test(error_model, sweep_interpreter_1, .timeout = 900) { interp_sweep(2000); }
Test(error_model, sweep_interpreter_2, .timeout = 900) { interp_sweep(3000); }
Test(error_model, sweep_interpreter_3, .timeout = 900) { interp_sweep(4000); }

Test(error_model, sweep_gpu, .timeout = 900)
{
    loom_runtime *rt = t_gpu_or_skip();
    int n = sweep_count("LOOM_TEST_SWEEP_GPU", 100);
    cr_expect_eq(sweep(rt, 77, n), n);
    cr_log_info("error model: %d random shapes on %s", n, loom_runtime_device_name(rt));
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- planted errors */

static void plant_all(const char *name, const char *shape, const char *config)
{
    const loom_template *t = loom_template_find(name);
    cr_assert(t, "%s", name);
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char err[512], rep[1024];
    cr_assert_eq(loom_params_parse(t->shape, t->nshape, shape, sh, err, sizeof err), 0, "%s", err);
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, config, cf, err, sizeof err), 0, "%s", err);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_instance in;
    cr_assert_eq(loom_instance_create(rt, t, sh, cf, 5, &in, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(loom_launch(rt, in.kernel, in.grid, in.args, in.nargs), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_expected e;
    cr_assert_eq(loom_expected_create(t, sh, &in, &e), LOOM_OK);
    void *got[LOOM_MAX_ARGS] = {0};
    int nchecked = 0;
    for (int i = 0; i < in.nargs; i++)
        if (e.ref[i]) {
            got[i] = malloc(in.info[i].min_bytes);
            cr_assert_eq(loom_buffer_download(in.buf[i], got[i], in.info[i].min_bytes), LOOM_OK);
            nchecked++;
        }
    cr_assert(nchecked > 0, "%s checks no output", name);
    cr_assert_eq(loom_expected_compare(t, &in, &e, got, rep, sizeof rep), 0, "the right kernel: %s", rep);
    uint64_t s = 99;
    int planted = 0;
    for (int i = 0; i < in.nargs; i++) {
        if (!e.ref[i])
            continue;
        loom_dtype dt = in.info[i].dtype;
        int64_t cnt = (int64_t)(in.info[i].min_bytes / loom_dtype_size(dt));
        int64_t at[3] = {0, cnt - 1, (int64_t)rnd(&s, (uint64_t)cnt)};
        for (int w = 0; w < 3; w++)
            for (int kind = 0; kind < (dt == LOOM_F16 || dt == LOOM_BF16 || dt == LOOM_F32 ? 4 : 2); kind++) {
                int64_t x = at[w];
                double keep = tpl_get(got[i], dt, x), r = tpl_get(e.ref[i], dt, x), b = e.bound[i][x];
                double v = kind == 0 ? t_just_past(dt, r, b, 1) : kind == 1 ? t_just_past(dt, r, b, -1)
                           : kind == 2 ? NAN : INFINITY;
                tpl_set(got[i], dt, x, v);
                int64_t bad = loom_expected_compare(t, &in, &e, got, rep, sizeof rep);
                cr_expect_eq(bad, 1, "%s output %s[%lld] = %.9g (reference %.9g, bound %.3g): %s", name,
                             in.info[i].name, (long long)x, v, r, b, rep);
                tpl_set(got[i], dt, x, keep);
                planted++;
            }
    }
    cr_log_info("%s: %d planted errors caught in %d checked outputs", name, planted, nchecked);
    for (int i = 0; i < in.nargs; i++)
        free(got[i]);
    loom_expected_destroy(&e);
    loom_instance_destroy(&in);
    loom_runtime_destroy(rt);
}

Test(error_model, planted_errors_are_caught)
{
    plant_all("ikbo_broadcast_add", "B=7,U=3,M=5,N=40,dtype=f16,shuffle=1", "BM=4,BN=64,warps=4");
    plant_all("ikbo_broadcast_add", "B=7,U=3,M=5,N=40,dtype=f32", "BM=4,BN=64,warps=4");
    plant_all("row_softmax", "R=5,N=300,dtype=bf16", "BM=1,warps=4");
    plant_all("gemm", "M=70,N=40,K=50,batch=2,dtype=f16,odtype=f32", "BM=64,cwarps=4,BN=64");
    plant_all("ikbo_lce", "B=9,U=3,M=70,N=32,Ku=40,Kc=30,shuffle=1", "ctas=4");
    plant_all("ikbo_fa", "B=3,U=2,S=90,H=1,D=64,n_seed=20,varlen=1", "BN=64");
}
