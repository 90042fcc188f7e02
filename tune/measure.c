/*
 * measure.c -- timing the candidates: the runs, the first pass, the final pass.
 *
 * Every run is timed between a pair of events (rt_gpu_time_each).  Before it, outside the
 * timed window, the bench's flush buffer (twice the L2) is written, which evicts the L2,
 * and successive runs take successive copies of the arguments, so no run finds its inputs
 * cached by the run before.  Kernels timed together run one after another, one run of
 * each in turn, round after round (bench_time_many), so every one of them gets the same
 * share of any drift of the clocks.
 *
 * That drift is large.  The GPU's clock drops by up to 13% within a tenth of a second of
 * sustained tensor-core load (H200) and recovers while the GPU waits for the compiler, so
 * only times taken side by side compare.  Hence two passes:
 *
 *   - The first pass (tune_fp_add, tune_fp_flush) times each candidate briefly as soon as
 *     it is checked, while the others compile: in a group with the next ones checked and
 *     with the anchor, the first config timed, which runs in every group.  A candidate's
 *     time is the anchor's first time scaled by the ratio of their times in its group.
 *   - The final pass (tune_time_finalists) times the finalists (candidates.c) again,
 *     together, with many more runs (tune_final_runs), under sustained load as a serving
 *     GPU runs, with any drift shared by all of them; the driver picks the fastest.
 *
 * A time is the interquartile mean of its runs (tune_iqm): as robust to stray runs as
 * the median, and finer than the timer's resolution for kernels of a few microseconds.
 * loom_time_launch_flushed offers the same flushed measurement of one kernel to users.
 */
#include "../util/util.h"
#include "tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the runs */

static loom_status flush_work(void *p, char *err, size_t n)
{
    tune_bench *b = p;
    loom_status st = loom_buffer_fill(b->flush, (unsigned char)b->rep);
    if (st != LOOM_OK)
        snprintf(err, n, "L2 flush: %s", loom_runtime_error(b->rt));
    return st;
}

static loom_status run_work(void *p, char *err, size_t n)
{
    tune_bench *b = p;
    int i = (int)(b->rep % (unsigned)b->ncur), c = (int)(b->rep / (unsigned)b->ncur % (unsigned)b->ncopies);
    b->rep++;
    loom_status st = loom_launch(b->rt, b->cur[i], b->grid[i], b->args[c], b->nargs);
    if (st != LOOM_OK)
        snprintf(err, n, "%s", loom_runtime_error(b->rt));
    return st;
}

/* Time nk kernels interleaved: warmup + reps rounds, each round one run of every kernel
 * in turn, each run after an L2 flush and on the next copy of the arguments.  Kernel i's
 * times of the timed rounds go to times[i * reps + 0 .. reps - 1].  Interleaving gives
 * every kernel the same share of any drift of the clocks (power, temperature), so their
 * times compare fairly. */
static loom_status bench_time_many(tune_bench *b, loom_kernel *const *k, const int (*grid)[3], int nk, int warmup,
                                   int reps, double *times, char *err, size_t n)
{
    if (nk < 1 || nk > TUNE_TOGETHER) {
        snprintf(err, n, "bench_time_many: %d kernels", nk);
        return LOOM_ERR_INVALID;
    }
    int runs = (warmup + reps) * nk;
    double *all = malloc((size_t)runs * sizeof *all);
    if (!all) {
        snprintf(err, n, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    for (int i = 0; i < nk; i++) {
        b->cur[i] = k[i];
        memcpy(b->grid[i], grid[i], sizeof b->grid[i]);
    }
    b->ncur = nk;
    b->rep = 0;
    loom_status st = rt_gpu_time_each(b->g, flush_work, run_work, b, runs, all, err, n);
    if (st == LOOM_OK)
        for (int r = 0; r < reps; r++)
            for (int i = 0; i < nk; i++)
                times[(size_t)i * reps + r] = all[(size_t)(warmup + r) * nk + i];
    free(all);
    return st;
}

/* One kernel: warmup + reps runs; the reps' times go to times[0..reps-1]. */
static loom_status bench_time(tune_bench *b, loom_kernel *k, const int grid[3], int warmup, int reps,
                              double *times, char *err, size_t n)
{
    return bench_time_many(b, &k, (const int(*)[3])grid, 1, warmup, reps, times, err, n);
}

/* ---------------------------------------------------------------- statistics */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tune_median(double *v, int n)
{
    if (n < 1)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double tune_iqm(double *v, int n)
{
    if (n < 4)
        return tune_median(v, n);
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double sum = 0;
    int lo = n / 4, hi = n - n / 4;
    for (int i = lo; i < hi; i++)
        sum += v[i];
    return sum / (hi - lo);
}

/* ---------------------------------------------------------------- loom_time_launch_flushed */

loom_status loom_time_launch_flushed(loom_runtime *rt, loom_kernel *k, const int grid[3],
                                     const loom_arg *args, int nargs, int warmup, int reps,
                                     double *median_ms)
{
    if (!rt || !k || !median_ms || (nargs && !args) || nargs < 0 || nargs > LOOM_MAX_ARGS || reps < 1 ||
        warmup < 0 || reps > 100000 || warmup > 100000)
        return rt ? rt_runtime_fail(rt, LOOM_ERR_INVALID, "loom_time_launch_flushed: bad arguments")
                  : LOOM_ERR_INVALID;
    *median_ms = 0;
    rt_gpu *g = rt_runtime_gpu(rt);
    if (!g)
        return rt_runtime_fail(rt, LOOM_ERR_NO_GPU, "timing needs a GPU runtime");
    /* the first launch compiles and checks the arguments; its errors are the user's */
    loom_status st = loom_launch(rt, k, grid, args, nargs);
    if (st != LOOM_OK)
        return st;
    tune_bench *b = calloc(1, sizeof *b);
    double *times = malloc((size_t)reps * sizeof *times);
    const rt_gpu_props *pp = rt_gpu_properties(g);
    size_t l2 = pp->l2_bytes > 0 ? (size_t)pp->l2_bytes : (size_t)64 << 20;
    if (!b || !times || !(b->flush = loom_buffer_create(rt, 2 * l2))) {
        free(b);
        free(times);
        return rt_runtime_fail(rt, LOOM_ERR_NOMEM, "loom_time_launch_flushed: out of memory");
    }
    b->rt = rt;
    b->g = g;
    b->ncopies = 1;
    b->nargs = nargs;
    memcpy(b->args[0], args, (size_t)nargs * sizeof *args);
    char err[1024];
    st = bench_time(b, k, grid, warmup, reps, times, err, sizeof err);
    if (st == LOOM_OK)
        *median_ms = tune_median(times, reps);
    else
        rt_runtime_fail(rt, st, err);
    loom_buffer_destroy(b->flush);
    free(b);
    free(times);
    return st;
}

/* ---------------------------------------------------------------- the first pass */

/* The first pass of a group of checked candidates grp[0..ng-1] (at most TUNE_FIRST_GROUP):
 * warmup + reps rounds, each one run of the anchor and of every candidate in turn (without
 * an anchor yet, the first candidate becomes it).  Sets each one's verdict and ms.
 * times holds (ng + 1) * reps.  Returns false when the CUDA context broke. */
static bool time_group(tune_bench *b, const loom_template *t, const int64_t *shape, loom_tune_result *res,
                       loom_kernel **kern, const int *grp, int ng, tune_anchor *a, int warmup, int reps, double *times)
{
    loom_kernel *ks[TUNE_FIRST_GROUP + 1];
    int gs[TUNE_FIRST_GROUP + 1][3], nk = 0;
    bool had = a->k != NULL;
    if (had) {
        ks[nk] = a->k;
        memcpy(gs[nk++], a->grid, sizeof a->grid);
    }
    for (int g = 0; g < ng; g++) {
        ks[nk] = kern[grp[g]];
        t->grid(shape, res[grp[g]].config, gs[nk++]);
    }
    char e[1024];
    loom_status st = bench_time_many(b, ks, (const int(*)[3])gs, nk, warmup, reps, times, e, sizeof e);
    if (st != LOOM_OK) {
        for (int g = 0; g < ng; g++) {
            res[grp[g]].verdict = LOOM_TUNE_LAUNCH_FAILED;
            tune_first_line(res[grp[g]].reason, sizeof res[grp[g]].reason, "while timing: ", e);
        }
        return st != LOOM_ERR_CUDA;
    }
    double am = tune_iqm(times, reps);
    if (!had) {
        a->k = ks[0];
        memcpy(a->grid, gs[0], sizeof a->grid);
        a->ms = am;
    }
    for (int g = 0; g < ng; g++) {
        loom_tune_result *x = &res[grp[g]];
        int slot = had ? g + 1 : g;
        x->ms = slot == 0 ? a->ms : a->ms * tune_iqm(times + (size_t)slot * reps, reps) / (am > 0 ? am : 1);
        x->verdict = LOOM_TUNE_TIMED;
    }
    return true;
}

void tune_not_run(loom_tune_result *x)
{
    x->verdict = LOOM_TUNE_LAUNCH_FAILED;
    snprintf(x->reason, sizeof x->reason, "not run: an earlier fault broke the CUDA context");
}

void tune_fp_flush(tune_first_pass *f)
{
    if (f->ng == 0)
        return;
    const loom_template *t = f->t;
    double t0 = util_now_ms();
    if (!f->broken)
        f->broken = !time_group(f->b, t, f->r->shape, f->res, f->kern, f->grp, f->ng, &f->anchor, f->warmup,
                                f->reps, f->times);
    else
        for (int g = 0; g < f->ng; g++)
            tune_not_run(&f->res[f->grp[g]]);
    f->ms += util_now_ms() - t0;
    for (int g = 0; g < f->ng; g++) {
        loom_tune_result *x = &f->res[f->grp[g]];
        if (x->verdict == LOOM_TUNE_TIMED) {
            f->r->ntimed++;
            if (f->pr->best_ms == 0 || x->ms < f->pr->best_ms) {
                f->pr->best_ms = x->ms;
                loom_params_format(t->config, t->nconfig, x->config, f->pr->best, sizeof f->pr->best);
            }
        }
        if (f->verbose) {
            char text[512];
            loom_params_format(t->config, t->nconfig, x->config, text, sizeof text);
            fprintf(stderr, "loom tune: at %7.1f ms, in a group of %d: %-48s %s %.4f ms\n", util_now_ms() - f->t0, f->ng,
                    text, loom_tune_verdict_name(x->verdict), x->ms);
        }
    }
    f->pr->checked += f->ng;
    tune_progress_draw(f->pr, false);
    f->ng = 0;
}

void tune_fp_add(tune_first_pass *f, int i)
{
    double t0 = util_now_ms();
    bool passed = false;
    if (f->broken)
        tune_not_run(&f->res[i]);
    else
        f->broken = !tune_check_one(f->b, f->t, f->r->shape, &f->res[i], f->kern[i], &passed);
    f->ms += util_now_ms() - t0;
    if (!passed) {
        f->pr->checked++;
        return;
    }
    f->grp[f->ng++] = i;
    if (f->ng == TUNE_FIRST_GROUP)
        tune_fp_flush(f);
}

/* ---------------------------------------------------------------- the final pass */

int tune_final_runs(double best_ms, int nfin)
{
    if (nfin < 1)
        return 0;
    double per = best_ms > 0 ? TUNE_FIN_BUDGET_MS / (best_ms * nfin) : TUNE_FIN_RUNS_MAX;
    int runs = per >= TUNE_FIN_RUNS_MAX ? TUNE_FIN_RUNS_MAX : (int)ceil(per);
    return runs < TUNE_FIN_RUNS_MIN ? TUNE_FIN_RUNS_MIN : runs;
}

int tune_final_runs_within(double best_ms, int nfin, double remaining_ms)
{
    int runs = tune_final_runs(best_ms, nfin);
    if (nfin < 1 || !(best_ms > 0))
        return runs;
    /* each run also writes the flush buffer and is launched: count it half again */
    double fit = remaining_ms / (1.5 * best_ms * nfin);
    if (fit < runs)
        runs = fit < TUNE_FIN_RUNS_MIN ? TUNE_FIN_RUNS_MIN : (int)fit;
    return runs;
}

loom_status tune_time_finalists(tune_bench *b, const loom_template *t, const int64_t *shape,
                                loom_tune_result *res, loom_kernel **kern, const int *fin, int nfin, int runs,
                                char *err, size_t n)
{
    loom_kernel *fk[TUNE_FIN_MAX];
    int fg[TUNE_FIN_MAX][3];
    for (int f = 0; f < nfin; f++) {
        fk[f] = kern[fin[f]];
        t->grid(shape, res[fin[f]].config, fg[f]);
    }
    double *samples = malloc((size_t)nfin * (size_t)runs * sizeof *samples);
    if (!samples) {
        snprintf(err, n, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    loom_status st = bench_time_many(b, fk, (const int(*)[3])fg, nfin, 1, runs, samples, err, n);
    if (st == LOOM_OK)
        for (int f = 0; f < nfin; f++)
            res[fin[f]].ms = tune_iqm(samples + (size_t)f * runs, runs);
    free(samples);
    return st;
}
