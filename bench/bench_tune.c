/*
 * bench_tune -- how long the autotuner takes, and how good its pick is.
 *
 *   bench_tune                       every registered template at its default shape
 *   bench_tune NAME [--shape k=v,..] one template
 *
 * For each: a cold tuning (empty tuning cache and empty module cache, in this process,
 * after the runtime is created: CUDA's start-up is not tuning), then a warm start in a
 * new process (the same caches: the pick comes from the tuning cache and its cubin from
 * the module cache), then every config the tuner timed is timed again independently
 * (loom_time_launch_flushed, the tuner's measure, with more runs and in three interleaved
 * rounds, median of the rounds) to find the exhaustive best, and the pick's time is set
 * beside it.
 *
 * Targets (issue 6): cold <= 3 s over >= 32 configs, warm <= 100 ms, pick within 3% of
 * the exhaustive best.  The peer: Triton 3.6 autotunes its IKBO kernel over 48 configs
 * in 21.4 s cold (H200, ../shared/BENCH.md); Triton is not on the GPU machine, so that
 * figure is quoted, not measured in this run.
 */
#include "loom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int parse_shape(const loom_template *t, const char *text, int64_t *sh)
{
    char err[512];
    memset(sh, 0, LOOM_MAX_PARAMS * sizeof *sh);
    if (loom_params_parse(t->shape, t->nshape, text, sh, err, sizeof err)) {
        fprintf(stderr, "bench_tune: --shape for %s: %s\n", t->name, err);
        return -1;
    }
    return 0;
}

/* The second start, in its own process: prints "warm <ms> <source> <compiled>". */
static int warm_child(const char *name, const char *shape)
{
    const loom_template *t = loom_template_find(name);
    int64_t sh[LOOM_MAX_PARAMS];
    if (!t || parse_shape(t, shape, sh))
        return 2;
    double t0 = now_ms();
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK)
        return 1;
    double start_ms = now_ms() - t0;
    loom_tuned x;
    t0 = now_ms();
    loom_status st = loom_tune(rt, t, sh, 1, &(loom_tune_opts){.quiet = 1}, &x);
    double ms = now_ms() - t0;
    printf("warm %.3f %s %.1f\n", ms, st != LOOM_OK ? "failed" : x.source == LOOM_TUNE_CACHED ? "cached" : "not-cached",
           start_ms);
    loom_tuned_release(&x, 1);
    loom_runtime_destroy(rt);
    return st != LOOM_OK;
}

/* Every timed config again, with the tuner's measure (L2 flushed before each run) but more
 * runs and none of its shortcuts: 3 interleaved rounds of 30 runs, median of rounds. */
static void exhaustive(loom_runtime *rt, const loom_tuned *x, double *best, double *picked, int *ibest)
{
    const loom_template *t = x->t;
    loom_instance in;
    char err[1024];
    *best = *picked = 0;
    *ibest = -1;
    if (loom_instance_create(rt, t, x->shape, x->config, 7, &in, err, sizeof err) != LOOM_OK) {
        printf("exhaustive timing: %s\n", err);
        return;
    }
    int n = x->nresults;
    double *r = calloc((size_t)n * 3 + 1, sizeof *r);
    loom_kernel **k = calloc((size_t)n + 1, sizeof *k);
    for (int i = 0; i < n && k; i++)
        if (x->results[i].verdict == LOOM_TUNE_TIMED && x->results[i].ms > 0)
            k[i] = t->build(x->shape, x->results[i].config, err, sizeof err);
    for (int round = 0; round < 3 && r && k; round++)
        for (int i = 0; i < n; i++) {
            int g[3];
            if (!k[i])
                continue;
            t->grid(x->shape, x->results[i].config, g);
            if (loom_time_launch_flushed(rt, k[i], g, in.args, in.nargs, 2, 30, &r[i * 3 + round]) != LOOM_OK) {
                printf("exhaustive timing: %s\n", loom_runtime_error(rt));
                loom_kernel_destroy(k[i]);
                k[i] = NULL;
            }
        }
    for (int i = 0; i < n && k && r; i++) {
        if (!k[i])
            continue;
        double a = r[i * 3], b = r[i * 3 + 1], c = r[i * 3 + 2];
        double med = fmax(fmin(a, b), fmin(fmax(a, b), c));
        if (*ibest < 0 || med < *best) {
            *best = med;
            *ibest = i;
        }
        if (!memcmp(x->results[i].config, x->config, sizeof x->config))
            *picked = med;
        loom_kernel_destroy(k[i]);
    }
    free(k);
    free(r);
    loom_instance_destroy(&in);
}

typedef struct row {
    char name[64], pick[128], best[128];
    int ncand, nvalid, ntimed;
    double cold_ms, compile_ms, setup_ms, measure_ms, warm_ms, warm_start_ms, pick_ms, best_ms, tuner_ms;
    char warm_src[32];
} row;

static int bench_one(const loom_template *t, const char *shape_text, const char *self, row *w)
{
    memset(w, 0, sizeof *w);
    snprintf(w->name, sizeof w->name, "%s", t->name);
    int64_t sh[LOOM_MAX_PARAMS];
    if (parse_shape(t, shape_text, sh))
        return 2;
    char dir[] = "/tmp/loom-bench-tune-XXXXXX", p[256];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(p, sizeof p, "%s/tune.json", dir);
    setenv("LOOM_TUNE_CACHE", p, 1);
    snprintf(p, sizeof p, "%s/modules", dir);
    setenv("LOOM_CACHE_DIR", p, 1);

    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    loom_tuned x;
    double t0 = now_ms();
    loom_status st = loom_tune(rt, t, sh, 1, &(loom_tune_opts){.quiet = 1}, &x);
    w->cold_ms = now_ms() - t0;
    char shape_full[512];
    loom_params_format(t->shape, t->nshape, sh, shape_full, sizeof shape_full);
    printf("\n== %s %s\n%s\n", t->name, shape_full, x.note);
    if (st != LOOM_OK || x.source != LOOM_TUNE_TUNED) {
        loom_tuned_release(&x, 1);
        loom_runtime_destroy(rt);
        return 1;
    }
    loom_tune_print(stdout, &x, 1, 0); /* loomc tune NAME lists every config */
    w->ncand = x.ncand;
    w->nvalid = x.nvalid;
    w->ntimed = x.ntimed;
    w->compile_ms = x.compile_ms;
    w->setup_ms = x.setup_ms;
    w->measure_ms = x.measure_ms;
    w->tuner_ms = x.ms;
    loom_params_format(t->config, t->nconfig, x.config, w->pick, sizeof w->pick);

    /* the second start, as a new process */
    char cmd[6000];
    snprintf(cmd, sizeof cmd, "'%s' --warm %s '%s'", self, t->name, shape_full);
    FILE *f = popen(cmd, "r");
    char line[256];
    snprintf(w->warm_src, sizeof w->warm_src, "failed");
    w->warm_ms = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "warm %lf %31s %lf", &w->warm_ms, w->warm_src, &w->warm_start_ms) == 3)
            break;
    if (f)
        pclose(f);

    int ib;
    exhaustive(rt, &x, &w->best_ms, &w->pick_ms, &ib);
    if (ib >= 0)
        loom_params_format(t->config, t->nconfig, x.results[ib].config, w->best, sizeof w->best);
    loom_tuned_release(&x, 1);
    loom_runtime_destroy(rt);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_tune: could not remove %s\n", dir);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--warm"))
        return warm_child(argv[2], argv[3]);
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        fprintf(stderr, "bench_tune: cannot find its own executable\n");
        return 1;
    }
    self[sl] = 0;
    loom_runtime *probe = loom_runtime_create(LOOM_TARGET_GPU);
    if (!probe || loom_runtime_status(probe) != LOOM_OK) {
        printf("bench_tune: skipped: %s\n", probe ? loom_runtime_error(probe) : "no runtime");
        loom_runtime_destroy(probe);
        return 0;
    }
    printf("bench_tune on %s\n", loom_runtime_device_name(probe));
    loom_runtime_destroy(probe);

    const char *only = argc > 1 ? argv[1] : NULL, *shape = NULL;
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--shape"))
            shape = argv[i + 1];
    row rows[64];
    int nrows = 0, fails = 0;
    for (int i = 0; i < loom_template_count() && nrows < 64; i++) {
        const loom_template *t = loom_template_at(i);
        if (only && strcmp(only, t->name))
            continue;
        int rc = bench_one(t, only ? shape : NULL, self, &rows[nrows]);
        fails += rc != 0;
        if (rc == 0)
            nrows++;
    }
    if (only && !loom_template_find(only)) {
        fprintf(stderr, "bench_tune: unknown template '%s'\n", only);
        return 2;
    }
    printf("\n%-20s %7s %6s %6s | %8s %8s %8s %8s | %8s %-10s | %9s %9s %7s  %s / %s\n", "template", "configs",
           "valid", "timed", "cold ms", "compile", "inputs", "measure", "warm ms", "(source)", "pick ms", "best ms",
           "ratio", "pick", "exhaustive best");
    for (int i = 0; i < nrows; i++) {
        row *w = &rows[i];
        printf("%-20s %7d %6d %6d | %8.0f %8.0f %8.0f %8.0f | %8.2f %-10s | %9.4f %9.4f %7.3f  %s / %s\n", w->name,
               w->ncand, w->nvalid, w->ntimed, w->cold_ms, w->compile_ms, w->setup_ms, w->measure_ms, w->warm_ms,
               w->warm_src, w->pick_ms, w->best_ms, w->best_ms > 0 ? w->pick_ms / w->best_ms : 0, w->pick, w->best);
    }
    printf("(compile and inputs overlap: the candidates compile on a thread pool while the main thread makes the "
           "inputs and the reference)\n");
    for (int i = 0; i < nrows; i++)
        printf("%s: the warm process spent %.0f ms creating its runtime (CUDA start-up), before loom_tune\n",
               rows[i].name, rows[i].warm_start_ms);
    printf("targets: cold <= 3000 ms over >= 32 configs, warm <= 100 ms, pick/best <= 1.03\n");
    printf("peer: Triton 3.6 autotune of its IKBO kernel, 48 configs: 21400 ms cold (H200, shared/BENCH.md; "
           "quoted, not measured in this run)\n");
    return fails != 0;
}
