/*
 * test_ikbo_gather.c -- the examples plugin's ikbo_gather_softmax template (examples/kernels/
 * ikbo_gather_softmax.c): each candidate scores its user's keys, read by index, and
 * softmaxes the scores.
 *
 * The template is linked in, as gemm_plain.c is for tests/test_gemm_plain.c
 * (scripts/test.sh builds the plugin itself against the installed loom and runs it
 * through loomc --plugin).
 *   - It is a template a plugin may register; its grid follows the run-time B.
 *   - Every config valid() accepts builds and verifies; valid() says why it refuses.
 *   - On the interpreter, at shapes with tails everywhere (B not a multiple of BB, S not a
 *     power of two, D not a multiple of BD), f16 and f32, in-order and shuffled mappings:
 *     the kernel against the template's reference, element by element within its bound;
 *     one kernel built for a larger B and U serves a smaller batch.
 *   - The check fails a wrong kernel: an element moved just past its bound (up, down),
 *     NaN or infinite, at the first, the last and a random element, is caught alone; and
 *     one candidate read from another user's keys is caught.
 *   - Compiled for sm_90a at its default shape and every valid config of it: no layout
 *     conversion through shared memory (loom_kernel_explain) and no f64 in the PTX, which
 *     ptxas assembles without spills (where there is a ptxas).
 */
#include "kernels.h"
#include "t_model.h"
#include "testutil.h"
#include "tune.h"

#include <stdlib.h>
#include <string.h>

static const loom_template *T = &ikbo_gather_softmax_template;

enum { A_B, A_U, A_Q, A_K, A_MAP, A_OUT }; /* the kernel's arguments */

/* shape or config text over the template's defaults */
#define SHAPE(text, v) t_params(T->shape, T->nshape, (text), (v))
#define CONFIG(text, v) t_params(T->config, T->nconfig, (text), (v))

/* ---------------------------------------------------------------- the template */

Test(ikbo_gather, is_a_template_a_plugin_may_register)
{
    char err[512] = "";
    cr_expect_eq(loom_template_validate(T, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(T->name, "ikbo_gather_softmax");
    cr_expect(T->shape[0].runtime && T->shape[1].runtime, "B and U are run-time dims");
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    SHAPE("B=1000,U=7,S=100,D=64", sh);
    CONFIG("BB=8", cf);
    int g[3];
    T->grid(sh, cf, g);
    cr_expect(g[0] == 125 && g[1] == 1 && g[2] == 1, "cdiv(B, BB) along x: %d %d %d", g[0], g[1], g[2]);
}

/* Every valid candidate at shape builds and verifies; returns how many are valid. */
static int every_valid_config_builds(const char *shape)
{
    int64_t sh[LOOM_MAX_PARAMS], def[LOOM_MAX_PARAMS];
    SHAPE(shape, sh);
    CONFIG(NULL, def);
    loom_tune_result *r = NULL;
    int nvalid = 0, n = tune_candidates(T, sh, &r, &nvalid);
    cr_assert_eq(n, 64, "4 x 4 x 4 candidates, not %d", n);
    bool def_seen = false;
    for (int i = 0; i < n; i++) {
        if (i >= nvalid) {
            cr_expect_eq(r[i].verdict, LOOM_TUNE_INVALID);
            cr_expect_gt(strlen(r[i].reason), 10, "an invalid config without a reason");
            continue;
        }
        def_seen |= !memcmp(r[i].config, def, sizeof def);
        char err[2048] = "";
        loom_kernel *k = T->build(sh, r[i].config, err, sizeof err);
        cr_assert(k, "valid config %d refused by the build: %s", i, err);
        cr_expect_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
        loom_kernel_destroy(k);
    }
    cr_expect(def_seen, "the default config is valid at %s", shape);
    free(r);
    return nvalid;
}

Test(ikbo_gather, every_valid_candidate_builds)
{
    /* at 2048 x 256 keys x 128: the tiles whose keys, products and scores fit in registers,
     * BB x BD at most 14 elements a warp (10 of 64) */
    cr_expect_eq(every_valid_config_builds(""), 10);
    cr_expect_gt(every_valid_config_builds("B=3,U=2,S=37,D=24,dtype=f32"), 5);
}

static void expect_refused(const char *shape, const char *config, const char *word, bool builds)
{
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    SHAPE(shape, sh);
    CONFIG(config, cf);
    char why[512] = "", err[512] = "";
    cr_expect_eq(T->valid(sh, cf, why, sizeof why), 0, "[%s] [%s] should be invalid", shape, config);
    cr_expect(strstr(why, word), "[%s] [%s]: '%s' does not mention '%s'", shape, config, why, word);
    loom_kernel *k = T->build(sh, cf, err, sizeof err);
    cr_expect_eq(k != NULL, builds, "[%s] [%s]: the build %s it", shape, config, builds ? "takes" : "refuses");
    if (!builds)
        cr_expect_str_eq(err, why, "with the same message");
    loom_kernel_destroy(k);
}

Test(ikbo_gather, valid_refuses_saying_why)
{
    expect_refused("dtype=bf16", "", "f16 or f32", false);
    expect_refused("S=0", "", "S and D", false);
    expect_refused("", "BB=3", "powers of two", false);
    expect_refused("S=4096", "BB=8,BD=16", "65536-element tile", false);
    expect_refused("B=3", "BB=8", "masked off", true);
    expect_refused("D=24", "BD=128", "masked off", true);
    expect_refused("S=4", "BB=1,BD=16,warps=8", "no element", true);
    expect_refused("S=2048", "BB=1,BD=32,warps=1", "registers", true);
}

/* ---------------------------------------------------------------- on the interpreter */

static loom_runtime *interp(void)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt);
    return rt;
}

Test(ikbo_gather, configs_on_the_interpreter_match_the_reference, .timeout = 300)
{
    /* tails in B (BB), S (the power of two) and D (BD); a user with no candidate (U > B
     * when shuffled), one candidate, one key, S a power of two */
    static const char *cases[][2] = {
        {"B=13,U=4,S=37,D=40,dtype=f16,shuffle=1", "BB=4,BD=16,warps=4"},
        {"B=13,U=4,S=37,D=40,dtype=f32", "BB=2,BD=32,warps=2"},
        {"B=5,U=9,S=64,D=128,dtype=f16,shuffle=1", "BB=1,BD=128,warps=4"},
        {"B=1,U=1,S=1,D=8,dtype=f16", "BB=1,BD=16,warps=1"},
        {"B=9,U=3,S=100,D=64,dtype=f16", ""},
    };
    loom_runtime *rt = interp();
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        SHAPE(cases[i][0], sh);
        CONFIG(cases[i][1], cf);
        char rep[1024] = "";
        cr_expect_eq(loom_template_check(rt, T, sh, cf, 3 + i, rep, sizeof rep), LOOM_OK, "[%s] [%s]: %s", cases[i][0],
                     cases[i][1], rep);
    }
    loom_runtime_destroy(rt);
}

/* Download the instance's checked outputs into got[] (malloc'd). */
static void download(const loom_instance *in, const loom_expected *e, void **got)
{
    for (int i = 0; i < in->nargs; i++)
        if (e->ref[i]) {
            got[i] = malloc(in->info[i].min_bytes);
            cr_assert(got[i]);
            cr_assert_eq(loom_buffer_download(in->buf[i], got[i], in->info[i].min_bytes), LOOM_OK);
        }
}

Test(ikbo_gather, one_kernel_serves_a_smaller_batch)
{
    /* the kernel built for B=64, U=16 launched at B=11, U=3 (the instance's buffers) */
    loom_runtime *rt = interp();
    int64_t big[LOOM_MAX_PARAMS], sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    SHAPE("B=64,U=16,S=50,D=32,shuffle=1", big);
    SHAPE("B=11,U=3,S=50,D=32,shuffle=1", sh);
    CONFIG("BB=4,BD=16,warps=2", cf);
    loom_instance in;
    char err[1024] = "", rep[1024] = "";
    cr_assert_eq(loom_instance_create(rt, T, sh, cf, 9, &in, err, sizeof err), LOOM_OK, "%s", err);
    loom_kernel *k = T->build(big, cf, err, sizeof err);
    cr_assert(k, "%s", err);
    cr_assert_eq(loom_launch(rt, k, in.grid, in.args, in.nargs), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_expect_eq(in.grid[0], 3, "cdiv(11, 4) programs");
    loom_expected e;
    cr_assert_eq(loom_expected_create(T, sh, &in, &e), LOOM_OK);
    void *got[LOOM_MAX_ARGS] = {0};
    download(&in, &e, got);
    cr_expect_eq(loom_expected_compare(T, &in, &e, got, rep, sizeof rep), 0, "%s", rep);
    for (int i = 0; i < in.nargs; i++)
        free(got[i]);
    loom_expected_destroy(&e);
    loom_kernel_destroy(k);
    loom_instance_destroy(&in);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- the check fails a wrong kernel */

static void planted_errors(const char *shape, const char *config)
{
    loom_runtime *rt = interp();
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    SHAPE(shape, sh);
    CONFIG(config, cf);
    loom_instance in;
    char err[1024] = "", rep[1024] = "";
    cr_assert_eq(loom_instance_create(rt, T, sh, cf, 5, &in, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(loom_launch(rt, in.kernel, in.grid, in.args, in.nargs), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_expected e;
    cr_assert_eq(loom_expected_create(T, sh, &in, &e), LOOM_OK);
    cr_assert(e.ref[A_OUT] && e.bound[A_OUT] && !e.ref[A_Q] && !e.ref[A_K], "out is checked, and only out");
    void *got[LOOM_MAX_ARGS] = {0};
    download(&in, &e, got);
    cr_assert_eq(loom_expected_compare(T, &in, &e, got, rep, sizeof rep), 0, "the right kernel: %s", rep);

    loom_dtype dt = in.info[A_OUT].dtype;
    int64_t cnt = sh[0] * sh[2];
    int64_t at[3] = {0, cnt - 1, cnt / 3 + 1};
    for (int w = 0; w < 3; w++)
        for (int kind = 0; kind < 4; kind++) {
            int64_t x = at[w];
            double keep = tpl_get(got[A_OUT], dt, x), r = tpl_get(e.ref[A_OUT], dt, x), b = e.bound[A_OUT][x];
            double v = kind == 0 ? t_just_past(dt, r, b, 1) : kind == 1 ? t_just_past(dt, r, b, -1) : kind == 2 ? NAN
                                                                                                         : INFINITY;
            tpl_set(got[A_OUT], dt, x, v);
            cr_expect_eq(loom_expected_compare(T, &in, &e, got, rep, sizeof rep), 1,
                         "out[%lld] = %.9g (reference %.9g, bound %.3g): %s", (long long)x, v, r, b, rep);
            tpl_set(got[A_OUT], dt, x, keep);
        }
    /* a kernel that read candidate 0's scores from another user's keys */
    int32_t *map = in.host[A_MAP];
    int32_t keep = map[0];
    map[0] = (map[0] + 1) % (int32_t)sh[1];
    loom_expected wrong;
    cr_assert_eq(loom_expected_create(T, sh, &in, &wrong), LOOM_OK);
    int64_t bad = loom_expected_compare(T, &in, &wrong, got, rep, sizeof rep);
    cr_expect(bad > 0 && bad <= sh[2], "candidate 0 scored another user's keys: %lld bad (%s)", (long long)bad, rep);
    map[0] = keep;
    loom_expected_destroy(&wrong);

    for (int i = 0; i < in.nargs; i++)
        free(got[i]);
    loom_expected_destroy(&e);
    loom_instance_destroy(&in);
    loom_runtime_destroy(rt);
}

Test(ikbo_gather, the_check_catches_an_element_past_its_bound)
{
    planted_errors("B=7,U=3,S=45,D=40,dtype=f16,shuffle=1", "BB=2,BD=16,warps=2");
    planted_errors("B=7,U=3,S=45,D=40,dtype=f32", "BB=4,BD=32,warps=4");
}

/* ---------------------------------------------------------------- compiled for sm_90a */

typedef struct costs {
    int convert, scratch;
} costs;

static void on_cost(void *ctx, const loom_cost *c)
{
    costs *s = ctx;
    s->convert += c->kind == LOOM_COST_CONVERT;
    s->scratch += c->kind == LOOM_COST_SCRATCH;
}

Test(ikbo_gather, no_conversion_and_no_f64_at_sm_90a, .timeout = 300)
{
    /* every valid config at the default shape, and the default config at an odd shape */
    int64_t sh[LOOM_MAX_PARAMS];
    SHAPE("", sh);
    loom_tune_result *r = NULL;
    int nvalid = 0;
    cr_assert_geq(tune_candidates(T, sh, &r, &nvalid), 0);
    cr_assert_gt(nvalid, 0);
    for (int i = 0; i <= nvalid; i++) {
        int64_t s2[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
        if (i == nvalid) {
            SHAPE("B=100,U=5,S=200,D=72,dtype=f32", s2);
            CONFIG(NULL, cf);
        } else {
            memcpy(s2, sh, sizeof s2);
            memcpy(cf, r[i].config, sizeof cf);
        }
        char err[4096] = "", cfg[200];
        loom_params_format(T->config, T->nconfig, cf, cfg, sizeof cfg);
        loom_kernel *k = T->build(s2, cf, err, sizeof err);
        cr_assert(k, "%s: %s", cfg, err);
        costs c = {0};
        char *text = NULL;
        cr_assert_eq(loom_kernel_explain(k, "sm_90a", on_cost, &c, &text, err, sizeof err), LOOM_OK, "%s: %s", cfg,
                     err);
        cr_expect_eq(c.convert, 0, "%s converts through shared memory:\n%s", cfg, text);
        free(text);
        char *ptx = NULL;
        size_t smem = 0;
        cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, &smem, err, sizeof err), LOOM_OK, "%s: %s", cfg, err);
        cr_expect(!strstr(ptx, ".f64"), "%s: f64 in the PTX", cfg);
        if (i == 0 || i == nvalid) /* (ptxas over every config would take a while) */
            t_ptxas_ok(ptx, "sm_90a", cfg);
        free(ptx);
        loom_kernel_destroy(k);
    }
    free(r);
}
