/*
 * test_gemm_plain.c -- the examples plugin's gemm_plain template (examples/kernels/
 * gemm_plain.c): plain_gemm with the automatic warp specialization's knobs (consumer warp
 * groups, stages, ping-pong) as config keys the tuner searches.
 *
 * The template is linked in, as plain.c is for tests/test_autows.c (scripts/test.sh
 * builds the plugin itself against the installed loom and runs it through loomc).
 *   - It is a template a plugin may register (loom_template_validate), its candidates are
 *     the product of its knobs' lists, and every config valid() accepts builds, verifies
 *     and passes the autows passes.
 *   - On the interpreter, at a small shape with a partial tile and a K tail, configs with
 *     one consumer warp group, two sharing BM=128, and ping-pong: the kernel as written
 *     (loomc run's path) and its specialized form (persistent CTAs over the grid, under
 *     the interpreter's deadlock and race checks) against the template's reference and
 *     bound.
 *   - valid() refuses what the passes or the hardware refuse, saying why; its shared
 *     memory sum is the one the passes use to stage C for a TMA store.
 *   - The tuner without a GPU takes it: the default config, ready to launch.
 *   - At 4096^3 its PTX assembles with ptxas, no spills, within valid()'s shared memory.
 */
#include "../pipe/autows.h"
#include "kernels.h"
#include "plain.h"
#include "testutil.h"
#include "tune.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const loom_template *T = &gemm_plain_template;

/* shape or config text over the template's defaults */
#define SHAPE(text, v) t_params(T->shape, T->nshape, (text), (v))
#define CONFIG(text, v) t_params(T->config, T->nconfig, (text), (v))

/* ---------------------------------------------------------------- the template */

Test(gemm_plain, is_a_template_a_plugin_may_register)
{
    char err[512] = "";
    cr_expect_eq(loom_template_validate(T, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(T->name, "gemm_plain");
    cr_expect(T->shape[0].runtime, "M is a run-time dim");
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    SHAPE("M=1000,N=384,K=64", sh);
    CONFIG("BM=128,BN=256,consumers=2,stages=3", cf);
    int g[3];
    T->grid(sh, cf, g);
    cr_expect(g[0] == 8 * 2 && g[1] == 1 && g[2] == 1, "cdiv(M, BM) * cdiv(N, BN) along x: %d %d %d", g[0], g[1],
              g[2]);
}

/* The candidates at shape: the product of the knobs' lists; every valid one builds,
 * verifies and is specialized by the passes; the default is among them. */
static int every_valid_config_builds(const char *shape)
{
    int64_t sh[LOOM_MAX_PARAMS], def[LOOM_MAX_PARAMS];
    SHAPE(shape, sh);
    CONFIG(NULL, def);
    int64_t combos = 1;
    for (int i = 0; i < T->nconfig; i++)
        combos *= T->config[i].ncand ? T->config[i].ncand : 1;
    loom_tune_result *r = NULL;
    int nvalid = 0, n = tune_candidates(T, sh, &r, &nvalid);
    cr_assert_eq(n, combos, "%d candidates, expected %lld", n, (long long)combos);
    bool def_seen = false;
    for (int i = 0; i < n; i++) {
        if (i >= nvalid) {
            cr_expect_eq(r[i].verdict, LOOM_TUNE_INVALID);
            cr_expect_gt(strlen(r[i].reason), 10, "an invalid config without a reason");
            continue;
        }
        if (i > 0)
            cr_expect_leq(r[i - 1].cost, r[i].cost, "valid ones in cost order");
        def_seen |= !memcmp(r[i].config, def, sizeof def);
        char err[2048] = "";
        loom_kernel *k = T->build(sh, r[i].config, err, sizeof err);
        cr_assert(k, "valid config %d refused by the build: %s", i, err);
        cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
        loom_kernel *ws = NULL;
        cr_expect_eq(pipe_autows(k, NULL, &ws, err, sizeof err), LOOM_OK, "config %d: %s", i, err);
        loom_kernel_destroy(ws);
        loom_kernel_destroy(k);
    }
    cr_expect(def_seen, "the default config is valid at %s", shape);
    free(r);
    return nvalid;
}

Test(gemm_plain, every_valid_candidate_builds_and_specializes)
{
    /* 96 combinations; BM=64 with consumers=2 cooperative, ping-pong with one group or
     * BM=128 and BM=128 BN=256 in one group (registers) are out (BM=128 BN=256 with 4
     * stages stores C in column halves) */
    int nvalid = every_valid_config_builds("");
    cr_expect_eq(nvalid, 42, "%d valid at 4096^3", nvalid);
    cr_expect_eq(every_valid_config_builds("M=100,N=128,K=64"), nvalid, "the rules do not depend on the sizes");
}

/* ---------------------------------------------------------------- on the interpreter */

/* Run the specialized form of the instance's kernel over `ctas` persistent CTAs (the
 * user's grid passed after the arguments) and compare its outputs with the reference. */
static void specialized_check(loom_runtime *rt, const int64_t *sh, const int64_t *cf, const char *what)
{
    loom_instance in;
    char err[2048] = "";
    cr_assert_eq(loom_instance_create(rt, T, sh, cf, 7, &in, err, sizeof err), LOOM_OK, "%s", err);
    loom_kernel *ws = NULL;
    cr_assert_eq(pipe_autows(in.kernel, NULL, &ws, err, sizeof err), LOOM_OK, "%s: %s", what, err);
    loom_arg args[LOOM_MAX_ARGS];
    memcpy(args, in.args, (size_t)in.nargs * sizeof *args);
    for (int i = 0; i < 3; i++)
        args[in.nargs + i] = LOOM_ARG_I32(in.grid[i]);
    /* fewer CTAs than programs (3 taking 8: ping-pong's replicas end with an empty turn) */
    int ctas[3] = {pipe_autows_ctas(in.grid, 3), 1, 1};
    cr_assert_eq(loom_launch(rt, ws, ctas, args, in.nargs + 3), LOOM_OK, "%s: %s", what, loom_runtime_error(rt));
    loom_expected e;
    cr_assert_eq(loom_expected_create(T, sh, &in, &e), LOOM_OK);
    void *got[LOOM_MAX_ARGS] = {0};
    for (int i = 0; i < in.nargs; i++)
        if (e.ref[i]) {
            got[i] = malloc(in.info[i].min_bytes);
            cr_assert_eq(loom_buffer_download(in.buf[i], got[i], in.info[i].min_bytes), LOOM_OK);
        }
    char rep[512] = "";
    cr_expect_eq(loom_expected_compare(T, &in, &e, got, rep, sizeof rep), 0, "%s specialized: %s", what, rep);
    for (int i = 0; i < in.nargs; i++)
        free(got[i]);
    loom_expected_destroy(&e);
    loom_kernel_destroy(ws);
    loom_instance_destroy(&in);
}

Test(gemm_plain, configs_on_the_interpreter_match_the_reference, .timeout = 600)
{
    /* M not a multiple of BM, K not of BK: a partial tile and a K tail; then the default
     * config at a shape narrower than its tile, N and K odd multiples of 8 */
    static const char *cases[][2] = {
        {"M=200,N=256,K=96", "BM=64,BN=128,consumers=1,stages=4,group=32"},            /* one consumer warp group */
        {"M=200,N=256,K=96", "BM=128,BN=128,BK=32,consumers=2,stages=3,group=8"},     /* two sharing a tile */
        {"M=200,N=256,K=96", "BM=64,BN=128,consumers=2,pingpong=1,stages=2,group=0"}, /* ping-pong */
        {"M=96,N=72,K=136", ""},
    };
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt);
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        SHAPE(cases[i][0], sh);
        CONFIG(cases[i][1], cf);
        char why[256] = "", rep[1024] = "";
        cr_assert(T->valid(sh, cf, why, sizeof why), "%s: %s", cases[i][1], why);
        cr_expect_eq(loom_template_check(rt, T, sh, cf, 3, rep, sizeof rep), LOOM_OK, "[%s] [%s] as written: %s",
                     cases[i][0], cases[i][1], rep);
        specialized_check(rt, sh, cf, cases[i][1]);
    }
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- refusals */

static void expect_refused(const char *shape, const char *config, const char *word)
{
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    SHAPE(shape, sh);
    CONFIG(config, cf);
    char why[512] = "", err[512] = "";
    cr_expect_eq(T->valid(sh, cf, why, sizeof why), 0, "[%s] [%s] should be invalid", shape, config);
    cr_expect(strstr(why, word), "[%s] [%s]: '%s' does not mention '%s'", shape, config, why, word);
    loom_kernel *k = T->build(sh, cf, err, sizeof err);
    cr_expect(!k, "the build refuses it too");
    cr_expect_str_eq(err, why, "with the same message");
    loom_kernel_destroy(k);
}

Test(gemm_plain, valid_refuses_bad_combinations_saying_why)
{
    expect_refused("", "BM=64,consumers=2,pingpong=0", "consumers=2 without pingpong needs BM=128");
    expect_refused("", "BM=64,consumers=1,pingpong=1", "pingpong=1 needs consumers=2 and BM=64");
    expect_refused("", "BM=128,BN=128,consumers=2,pingpong=1", "pingpong=1 needs consumers=2 and BM=64");
    expect_refused("", "BM=128,BN=256,consumers=1", "256 registers");
    expect_refused("", "BM=64,BN=256,consumers=2,pingpong=1,stages=5", "227 KiB");
    expect_refused("", "BM=96", "BM must be 64 or 128");
    expect_refused("", "BN=192", "BN must be 64, 128 or 256");
    expect_refused("", "BK=128", "BK must be 32 or 64");
    expect_refused("", "consumers=3", "consumers must be 1 or 2");
    expect_refused("", "stages=1", "stages must be 2 to 8");
    expect_refused("", "group=-1", "group");
    expect_refused("N=100", "", "multiples of 8");
    expect_refused("K=4", "", "multiples of 8");
}

static void ws_pipeline(void *k)
{
    loom_kernel *ws = NULL;
    char err[1024] = "";
    loom_status st = pipe_autows(k, "ws-pipeline", &ws, err, sizeof err);
    cr_assert_eq(st, LOOM_OK, "%s", err);
    loom_kernel_destroy(ws);
}

/* Run pipe_autows's ws-pipeline dump on k; return what it printed (malloc'ed). */
static char *pipeline_dump(loom_kernel *k) { return t_capture_stderr(ws_pipeline, k); }

/* valid()'s shared memory sum is the passes' own: each valid config at 4096^3 stages C
 * for TMA stores (whole, or in column parts where the whole does not fit); a config
 * valid() refuses only for shared memory, built as plain_gemm with the same knobs, has
 * its store left in registers by the passes. */
Test(gemm_plain, shared_memory_rule_is_the_passes_staging_rule)
{
    int64_t sh[LOOM_MAX_PARAMS];
    SHAPE("", sh);
    loom_tune_result *r = NULL;
    int nvalid = 0, n = tune_candidates(T, sh, &r, &nvalid);
    for (int i = 0; i < nvalid; i++) {
        char err[512] = "";
        loom_kernel *k = T->build(sh, r[i].config, err, sizeof err);
        cr_assert(k, "%s", err);
        char *out = pipeline_dump(k);
        cr_expect(strstr(out, "staged in shared memory, one TMA store") || strstr(out, "staged in shared memory in "),
                  "valid config %d: %s", i, out);
        free(out);
        loom_kernel_destroy(k);
    }
    /* the candidates refused for shared memory, and configs past them (ping-pong's two
     * whole staging tiles beside 5 or 6 stages) */
    int64_t more[2][LOOM_MAX_PARAMS];
    CONFIG("BM=64,BN=256,consumers=2,pingpong=1,stages=5", more[0]);
    CONFIG("BM=64,BN=256,consumers=2,pingpong=1,stages=6", more[1]);
    int over = 0;
    for (int i = nvalid; i < n + 2; i++) {
        const int64_t *cf = i < n ? r[i].config : more[i - n];
        char why[512] = "";
        if (i < n ? !strstr(r[i].reason, "227 KiB") : (T->valid(sh, cf, why, sizeof why) || !strstr(why, "227 KiB")))
            continue;
        over++;
        plain_cfg c = {(int)cf[0], (int)cf[1], (int)cf[2], (int)cf[3], (int)cf[4], (int)cf[6], (int)cf[5]};
        loom_kernel *k = plain_gemm(sh[0], sh[1], sh[2], LOOM_F16, &c);
        char *out = pipeline_dump(k);
        cr_expect(strstr(out, "staging tile does not fit beside the ring"), "refused config %d: %s", i, out);
        free(out);
        loom_kernel_destroy(k);
    }
    cr_expect_geq(over, 2, "configs are refused for shared memory");
    free(r);
}

/* ---------------------------------------------------------------- the tuner without a GPU */

Test(gemm_plain, tuner_without_a_gpu_takes_the_default, .timeout = 120)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt);
    int64_t sh[LOOM_MAX_PARAMS], def[LOOM_MAX_PARAMS];
    SHAPE("M=100,N=128,K=64", sh);
    CONFIG(NULL, def);
    loom_tuned out;
    cr_assert_eq(loom_tune(rt, T, sh, 1, &(loom_tune_opts){.quiet = 1}, &out), LOOM_OK, "%s", out.note);
    cr_expect_eq(out.source, LOOM_TUNE_DEFAULT, "%s", out.note);
    cr_expect(strstr(out.note, "Not tuned") && strstr(out.note, "interpreter"), "%s", out.note);
    cr_expect_eq(out.ncand, 96);
    cr_expect_eq(out.nvalid, 42);
    cr_expect(!memcmp(out.config, def, sizeof def), "the default config");
    cr_assert(out.kernel);
    int g[3];
    T->grid(sh, out.config, g);
    cr_expect(!memcmp(g, out.grid, sizeof g));
    char rep[1024] = "";
    cr_expect_eq(loom_template_check(rt, T, out.shape, out.config, 5, rep, sizeof rep), LOOM_OK, "%s", rep);
    loom_tuned_release(&out, 1);
    loom_runtime_destroy(rt);

    /* the cost model's pruning keeps the default at the default shape */
    SHAPE("", sh);
    loom_tune_result *r = NULL;
    int nvalid = 0;
    cr_assert_gt(tune_candidates(T, sh, &r, &nvalid), 0);
    int left = tune_prune(r, nvalid, TUNE_PRUNE_RATIO, TUNE_PRUNE_KEEP), at = -1;
    for (int i = 0; i < left; i++)
        if (!memcmp(r[i].config, def, sizeof def))
            at = i;
    cr_expect_geq(at, 0, "the default survives pruning");
    free(r);
}

/* ---------------------------------------------------------------- PTX */

Test(gemm_plain, ptx_at_4096_assembles_without_spills, .timeout = 600)
{
    static const char *cfgs[] = {
        "",                                                     /* the default: 64 x 256, one group */
        "BM=128,BN=256,consumers=2,stages=3",                   /* two groups sharing a tile */
        "BM=64,BN=256,consumers=2,pingpong=1,stages=4",         /* ping-pong, the most shared memory */
        "BM=128,BN=128,BK=32,consumers=1,stages=4,group=8",     /* one group of 128 rows */
    };
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    SHAPE("", sh);
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        CONFIG(cfgs[i], cf);
        char err[4096] = "", why[256] = "";
        cr_assert(T->valid(sh, cf, why, sizeof why), "%s: %s", cfgs[i], why);
        loom_kernel *k = T->build(sh, cf, err, sizeof err);
        cr_assert(k, "%s", err);
        char *ptx = NULL;
        size_t smem = 0;
        cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, &smem, err, sizeof err), LOOM_OK, "%s: %s", cfgs[i], err);
        cr_expect(strstr(ptx, "wgmma.mma_async") && strstr(ptx, "setmaxnreg"), "%s: specialized", cfgs[i]);
        cr_expect(strstr(ptx, "cp.async.bulk.tensor.2d.global.shared"), "%s: C by one TMA store", cfgs[i]);
        cr_expect_leq(smem, 227 * 1024, "%s: %zu bytes of shared memory", cfgs[i], smem);
        cr_expect(t_ptxas_ok(ptx, "sm_90a", cfgs[i]) || !t_find_ptxas(), "ptxas");
        free(ptx);
        loom_kernel_destroy(k);
    }
}
