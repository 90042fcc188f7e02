/*
 * test_tune_gpu.c -- the tuner tunes every template, on the GPU: at its headline (default)
 * shape and at an odd shape, from an empty tuning cache, each shape is tuned (not fallen
 * back on the default config), no candidate that ran is called wrong (a right kernel
 * never fails the check: a WRONG verdict is a bug of the kernel or of the check, either
 * way a failure here), and at least half the candidates that compiled and launched were
 * checked right and timed.  How good the pick is against the exhaustive best is a
 * benchmark's question (bench_tune --exhaustive), not a test's.  Skipped without a GPU.
 */
#include <criterion/criterion.h>

#include "loom.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void tune_at(loom_runtime *rt, const char *name, const char *shape)
{
    const loom_template *t = loom_template_find(name);
    cr_assert(t, "%s", name);
    int64_t sh[LOOM_MAX_PARAMS];
    char err[512];
    cr_assert_eq(loom_params_parse(t->shape, t->nshape, shape, sh, err, sizeof err), 0, "%s", err);
    loom_tuned r;
    loom_tune_opts o = {.force = 1, .quiet = 1};
    loom_status st = loom_tune(rt, t, sh, 1, &o, &r);
    cr_expect_eq(st, LOOM_OK, "%s [%s]: %s: %s", name, shape, loom_status_name(st), r.note);
    cr_expect_eq(r.source, LOOM_TUNE_TUNED, "%s [%s]: not tuned: %s", name, shape, r.note);
    int ran = 0, timed = 0, wrong = 0;
    char first_wrong[600] = "";
    for (int i = 0; i < r.nresults; i++) {
        const loom_tune_result *x = &r.results[i];
        if (x->verdict == LOOM_TUNE_TIMED || x->verdict == LOOM_TUNE_WRONG)
            ran++;
        timed += x->verdict == LOOM_TUNE_TIMED;
        if (x->verdict == LOOM_TUNE_WRONG && !wrong++) {
            char c[300];
            loom_params_format(t->config, t->nconfig, x->config, c, sizeof c);
            snprintf(first_wrong, sizeof first_wrong, "%s: %s", c, x->reason);
        }
    }
    cr_expect_eq(wrong, 0, "%s [%s]: %d candidates called wrong, the first %s", name, shape, wrong, first_wrong);
    cr_expect(timed >= 1 && 2 * timed >= ran, "%s [%s]: %d of %d candidates that ran were checked right", name,
              shape, timed, ran);
    cr_log_info("%s [%s]: tuned, %d of %d valid timed, none wrong: %s", name, shape, timed, r.nvalid, r.note);
    loom_tuned_release(&r, 1);
}

static void tune_both(const char *name, const char *odd)
{
    loom_runtime *rt = t_gpu_or_skip();
    char dir[] = "/tmp/loom-tune-gpu-XXXXXX", path[128];
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/tune.json", dir);
    setenv("LOOM_TUNE_CACHE", path, 1);
    tune_at(rt, name, ""); /* the headline: the template's default shape */
    tune_at(rt, name, odd);
    unsetenv("LOOM_TUNE_CACHE");
    remove(path);
    char lock[160];
    snprintf(lock, sizeof lock, "%s.lock", path);
    remove(lock);
    rmdir(dir);
    loom_runtime_destroy(rt);
}

Test(tune_gpu, broadcast_add_tunes, .timeout = 300) { tune_both("ikbo_broadcast_add", "B=77,U=5,M=45,N=100,dtype=f32,shuffle=1"); }
Test(tune_gpu, row_softmax_tunes, .timeout = 300) { tune_both("row_softmax", "R=129,N=1000,dtype=bf16"); }
Test(tune_gpu, gemm_tunes, .timeout = 300) { tune_both("gemm", "M=433,N=256,K=872,batch=6,dtype=bf16,odtype=f32,ashared=0"); }
Test(tune_gpu, ikbo_lce_tunes, .timeout = 300) { tune_both("ikbo_lce", "B=300,U=7,M=200,N=136,Ku=300,Kc=100,shuffle=1"); }
Test(tune_gpu, ikbo_fa_tunes, .timeout = 300) { tune_both("ikbo_fa", "B=40,U=3,S=600,H=2,D=64,n_seed=40,varlen=1,shuffle=1"); }
