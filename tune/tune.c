/*
 * tune.c -- the per-shape autotuner: loom_tune() (include/loom.h section 8,
 * docs/tuning.md).
 *
 * A template declares knobs with candidate values, a validity check that explains each
 * rejection, a grid function, and optionally a cost model and a shape-bucketing
 * function.  The tuner knows no template by name: it works from those declarations
 * alone.  For each shape:
 *
 *   1. Cache.  The key (template, shape bucket, GPU name and SM count, driver, loom
 *      version, candidate space) is looked up in the JSON cache (tune_cache.c).  A hit
 *      whose config still serves the shape is built and loaded (from the module disk
 *      cache: LLVM does not run) and nothing else happens.
 *   2. Candidates.  Every combination of the knobs' candidates is checked by the
 *      template's valid(); the valid ones are ranked by its cost model (when it has one)
 *      and, if asked, only the best max_configs are kept.
 *   3. Compile, in parallel.  A pthread pool builds, verifies and compiles each
 *      candidate (rt_gpu_prepare: codegen, PTX -> cubin, module load): the comparison
 *      kernels first, then the default config (its output is the reference for large
 *      outputs), then the others in cost order.  Codegen works on a private copy of the
 *      kernel with its own LLVM context, LLVM's target is initialized once (pthread_once),
 *      the module table is guarded by a mutex, and each worker makes the device's primary
 *      context current on its own thread.  Meanwhile the main thread makes the inputs (the
 *      template's init), uploads them, and computes the reference; then it checks and
 *      times the candidates as they come off the pool (steps 4 and 5), while the rest
 *      compile.
 *   4. Check.  Each compiled candidate runs once on poisoned outputs and is compared with
 *      the reference on the device, by a comparison kernel written in loom's own DSL
 *      (tune_compare_kernel): only a count and a maximum per program come back, so a
 *      check costs a fraction of a millisecond even for outputs of hundreds of MB.  The
 *      reference is the template's CPU reference when the outputs are small (at most
 *      LOOM_TUNE_REF_MAX elements, 4M by default); for larger outputs the CPU reference
 *      would take seconds, so the reference is the GPU output of the default config (the
 *      config the test suite checks against the CPU reference at many shapes), and the
 *      tolerance is doubled since both sides round.  A candidate beyond tolerance is
 *      rejected with the number of bad elements and the largest error.
 *   5. Time, in two passes.  Every run is timed between a pair of events; before it
 *      (outside the timed window) a buffer twice the L2 size is written, which evicts the
 *      L2, and successive runs use different copies of the arguments when one copy is
 *      smaller than four L2 sizes, so no run finds its inputs cached by the run before.
 *      - The first pass: checked candidates are timed in groups of up to TUNE_FIRST_GROUP,
 *        a few rounds of one run each in turn, with the anchor (the first config timed)
 *        in every group; a candidate's time is the anchor's times the ratio of their
 *        times in its group.  The GPU's clock drops by a tenth within a tenth of a second
 *        of sustained tensor-core load and recovers while the GPU waits for the compiler,
 *        so only times taken side by side compare.
 *      - The finalists (the best few of the first pass, tune_finalists) are timed again
 *        together, one run of each in turn, many runs each (tune_final_runs), and the
 *        best interquartile mean wins: the comparison is made under sustained load, as
 *        a serving GPU runs, with any drift shared by all of them.
 *   6. Store.  The winner goes into the cache (one atomic file replace under a lock per
 *      shape, so a process killed mid-way keeps every shape finished before), and its
 *      kernel is returned ready to launch.
 *
 * A config that fails anywhere (refused by the build, fails to verify, compile, load or
 * launch, or gives a wrong result) is reported with its reason and skipped.  Without a
 * GPU, or with LOOM_TUNE=0, nothing is timed: the default config (or, when it cannot
 * serve the shape, the cost model's best valid config) is returned, with a note.
 *
 * Output: a progress bar on stderr when it is a terminal (configs done of total, best so
 * far), a summary table at the end (loom_tune_print), and every config's time with
 * LOOM_TUNE_VERBOSE=1.
 */
#define _GNU_SOURCE
#include "gpu.h"
#include "../util/util.h"
#include "tune.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TUNE_MAX_COPIES 8
#define TUNE_MAX_COMBOS 65536
#define TUNE_TOGETHER 8 /* kernels timed together (one run of each in turn), at most */
_Static_assert(TUNE_FIN_MAX <= TUNE_TOGETHER && TUNE_FIRST_GROUP + 1 <= TUNE_TOGETHER, "timed together");



static bool env_off(const char *name)
{
    const char *v = getenv(name);
    return v && strcmp(v, "0") == 0;
}

static long env_long(const char *name, long def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    long x = strtol(v, &end, 0);
    return *end || x < 0 ? def : x;
}

/* Copy the first line of s into buf (errors from the code generator run long). */
static void first_line(char *buf, size_t n, const char *prefix, const char *s)
{
    const char *nl = strchr(s, '\n');
    int len = nl ? (int)(nl - s) : (int)strlen(s);
    snprintf(buf, n, "%s%.*s", prefix, len, s);
}

const char *loom_tune_verdict_name(loom_tune_verdict v)
{
    switch (v) {
    case LOOM_TUNE_TIMED: return "timed";
    case LOOM_TUNE_INVALID: return "invalid";
    case LOOM_TUNE_REFUSED: return "refused";
    case LOOM_TUNE_COMPILE_FAILED: return "compile failed";
    case LOOM_TUNE_LAUNCH_FAILED: return "launch failed";
    case LOOM_TUNE_WRONG: return "wrong result";
    case LOOM_TUNE_SKIPPED: return "skipped";
    }
    return "?";
}

/* ---------------------------------------------------------------- candidates */

typedef struct ranked {
    int idx;
    int invalid;
    double cost;
} ranked;

static int cmp_ranked(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->invalid != y->invalid)
        return x->invalid - y->invalid;
    if (x->cost != y->cost)
        return x->cost < y->cost ? -1 : 1;
    return x->idx - y->idx;
}

int tune_candidates(const loom_template *t, const int64_t *shape, loom_tune_result **out,
                    int *nvalid)
{
    *out = NULL;
    *nvalid = 0;
    int64_t total = 1;
    for (int i = 0; i < t->nconfig; i++) {
        int nc = t->config[i].ncand > 0 ? t->config[i].ncand : 1;
        total *= nc;
        if (total > TUNE_MAX_COMBOS)
            total = TUNE_MAX_COMBOS; /* the rest are never looked at */
    }
    loom_tune_result *r = calloc((size_t)total, sizeof *r);
    ranked *rk = calloc((size_t)total, sizeof *rk);
    if (!r || !rk) {
        free(r);
        free(rk);
        return -1;
    }
    for (int64_t c = 0; c < total; c++) {
        /* mixed radix, the last knob varying fastest */
        int64_t rest = c;
        for (int i = t->nconfig - 1; i >= 0; i--) {
            const loom_param *p = &t->config[i];
            if (p->ncand > 0) {
                r[c].config[i] = p->cand[rest % p->ncand];
                rest /= p->ncand;
            } else {
                r[c].config[i] = p->def;
            }
        }
        r[c].verdict = LOOM_TUNE_TIMED; /* pending: not rejected so far */
        if (t->valid && !t->valid(shape, r[c].config, r[c].reason, sizeof r[c].reason)) {
            r[c].verdict = LOOM_TUNE_INVALID;
            if (!r[c].reason[0])
                snprintf(r[c].reason, sizeof r[c].reason, "rejected by the template (no reason given)");
        } else {
            r[c].reason[0] = 0;
            r[c].cost = t->cost ? t->cost(shape, r[c].config) : 0;
            ++*nvalid;
        }
        rk[c] = (ranked){(int)c, r[c].verdict == LOOM_TUNE_INVALID, r[c].cost};
    }
    qsort(rk, (size_t)total, sizeof *rk, cmp_ranked);
    loom_tune_result *sorted = malloc((size_t)total * sizeof *sorted);
    if (!sorted) {
        free(r);
        free(rk);
        return -1;
    }
    for (int64_t c = 0; c < total; c++)
        sorted[c] = r[rk[c].idx];
    free(r);
    free(rk);
    *out = sorted;
    return (int)total;
}

/* ---------------------------------------------------------------- the finalists */

int tune_finalists(const double *ms, int n, int *fin)
{
    /* insertion into fin, kept sorted by time, of at most TUNE_FIN_MAX of the fastest */
    int nf = 0;
    for (int i = 0; i < n; i++) {
        if (!(ms[i] > 0))
            continue;
        int at = nf;
        while (at > 0 && ms[fin[at - 1]] > ms[i])
            at--;
        if (at >= TUNE_FIN_MAX)
            continue;
        if (nf < TUNE_FIN_MAX)
            nf++;
        memmove(fin + at + 1, fin + at, (size_t)(nf - 1 - at) * sizeof *fin);
        fin[at] = i;
    }
    /* beyond the first TUNE_FIN_MIN, only those within the margin of the fastest */
    int keep = 0;
    while (keep < nf && (keep < TUNE_FIN_MIN || ms[fin[keep]] <= ms[fin[0]] * (1 + TUNE_FIN_MARGIN)))
        keep++;
    return keep;
}

int tune_final_runs(double best_ms, int nfin)
{
    if (nfin < 1)
        return 0;
    double per = best_ms > 0 ? TUNE_FIN_BUDGET_MS / (best_ms * nfin) : TUNE_FIN_RUNS_MAX;
    int runs = per >= TUNE_FIN_RUNS_MAX ? TUNE_FIN_RUNS_MAX : (int)ceil(per);
    return runs < TUNE_FIN_RUNS_MIN ? TUNE_FIN_RUNS_MIN : runs;
}

/* ---------------------------------------------------------------- the comparison kernel */

loom_kernel *tune_compare_kernel(loom_dtype dt, int64_t n, int *grid0)
{
    int64_t nprog = (n + TUNE_CMP_BLOCK - 1) / TUNE_CMP_BLOCK;
    if (n < 1 || nprog > INT32_MAX)
        return NULL;
    *grid0 = (int)nprog;
    loom_kernel *k = loom_kernel_create("loom_tune_compare", 4);
    loom_val got = loom_arg_tensor(k, "got", dt, LOOM_SHAPE1(n), LOOM_IN);
    loom_val ref = loom_arg_tensor(k, "ref", dt, LOOM_SHAPE1(n), LOOM_IN);
    loom_val atol = loom_arg_scalar(k, "atol", LOOM_F32);
    loom_val rtol = loom_arg_scalar(k, "rtol", LOOM_F32);
    loom_val bad = loom_arg_tensor(k, "bad", LOOM_F32, LOOM_SHAPE1(nprog), LOOM_OUT);
    loom_val maxerr = loom_arg_tensor(k, "maxerr", LOOM_F32, LOOM_SHAPE1(nprog), LOOM_OUT);

    loom_val pid = loom_program_id(k, 0);
    loom_val off = n > INT32_MAX - TUNE_CMP_BLOCK
                       ? loom_mul(k, loom_cast(k, pid, LOOM_I64), loom_const_i(k, LOOM_I64, TUNE_CMP_BLOCK))
                       : loom_mul(k, pid, loom_const_i(k, LOOM_I32, TUNE_CMP_BLOCK));
    loom_shape tile = LOOM_SHAPE1(TUNE_CMP_BLOCK);
    /* the tail beyond n loads 0 on both sides, which compares equal */
    loom_val g = loom_cast(k, loom_load(k, got, &off, tile, LOOM_NONE, 0.0), LOOM_F32);
    loom_val r = loom_cast(k, loom_load(k, ref, &off, tile, LOOM_NONE, 0.0), LOOM_F32);
    loom_val d = loom_abs(k, loom_sub(k, g, r));
    loom_val ok = loom_cmp(k, LOOM_LE, d, loom_add(k, loom_splat(k, atol, tile), loom_mul(k, rtol, loom_abs(k, r))));
    loom_val both_nan = loom_and(k, loom_cmp(k, LOOM_NE, g, g), loom_cmp(k, LOOM_NE, r, r));
    ok = loom_or(k, ok, both_nan);
    loom_val zero = loom_const_f(k, LOOM_F32, 0.0), one = loom_const_f(k, LOOM_F32, 1.0);
    loom_val nbad = loom_reduce_sum(k, loom_select(k, ok, zero, one), 0);
    loom_val inf = loom_const_f(k, LOOM_F32, INFINITY);
    loom_val err = loom_select(k, both_nan, zero, loom_select(k, loom_cmp(k, LOOM_NE, d, d), inf, d));
    loom_val worst = loom_reduce_max(k, err, 0);
    loom_store(k, bad, &pid, loom_splat(k, nbad, LOOM_SHAPE1(1)), LOOM_NONE);
    loom_store(k, maxerr, &pid, loom_splat(k, worst, LOOM_SHAPE1(1)), LOOM_NONE);
    return k;
}

/* ---------------------------------------------------------------- progress bar */

typedef struct progress {
    bool on;
    const char *tname;
    int compiled, jobs;           /* compile jobs finished, of jobs */
    int checked, total;           /* candidates checked and timed (or rejected), of total */
    const char *phase;            /* NULL while compiling and timing; then the final phase */
    double best_ms;
    char best[160];
    double last_ms;
} progress;

static void progress_draw(progress *p, bool force)
{
    if (!p->on)
        return;
    double t = util_now_ms();
    if (!force && t - p->last_ms < 50)
        return;
    p->last_ms = t;
    int width = 24, fill = p->total ? (int)((int64_t)width * p->checked / p->total) : width;
    char bar[32], what[96];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    if (p->phase)
        snprintf(what, sizeof what, "%s", p->phase);
    else
        snprintf(what, sizeof what, "%d/%d compiled, %d/%d checked and timed", p->compiled, p->jobs, p->checked,
                 p->total);
    if (p->best_ms > 0)
        fprintf(stderr, "\r\033[Kloom tune %s [%s] %s  best %.4f ms (%s)", p->tname, bar, what, p->best_ms, p->best);
    else
        fprintf(stderr, "\r\033[Kloom tune %s [%s] %s", p->tname, bar, what);
    fflush(stderr);
}

static void progress_end(progress *p)
{
    if (!p->on)
        return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
}

/* ---------------------------------------------------------------- the compile pool */

typedef struct job {
    loom_kernel *k;        /* built by the worker, or given (the comparison kernels) */
    loom_tune_result *res; /* the candidate (NULL for a given kernel) */
    loom_status st;
    char err[512];         /* for a given kernel */
    double codegen_ms, link_ms, load_ms; /* of the compile (0 when served by a cache) */
} job;

/* The compile pool: workers take jobs in order; the main thread takes finished jobs in the
 * order they finish (pool_next), so it checks and times each candidate while the others
 * compile. */
typedef struct pool {
    rt_gpu *g;
    const loom_template *t;
    const int64_t *shape;
    job *jobs;
    int njobs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int next, done;
    int *order;    /* job indices in the order they finished (done of them) */
    double end_ms; /* when the last job finished */
} pool;

static void fail_job(job *j, loom_status st, const char *prefix, const char *msg)
{
    j->st = st;
    if (!j->res) { /* a given kernel: its owner frees it */
        first_line(j->err, sizeof j->err, prefix, msg);
        return;
    }
    j->res->verdict = st == LOOM_ERR_VERIFY || st == LOOM_ERR_INVALID ? LOOM_TUNE_REFUSED : LOOM_TUNE_COMPILE_FAILED;
    first_line(j->res->reason, sizeof j->res->reason, prefix, msg);
    loom_kernel_destroy(j->k);
    j->k = NULL;
}

static void run_job(pool *p, job *j)
{
    char err[2048] = "";
    if (!j->k) {
        j->k = p->t->build(p->shape, j->res->config, err, sizeof err);
        if (!j->k)
            return fail_job(j, LOOM_ERR_INVALID, "the build refused it: ", err[0] ? err : "(no reason)");
    }
    if (loom_verify(j->k) != LOOM_OK)
        return fail_job(j, LOOM_ERR_VERIFY, "verification failed: ", loom_kernel_errors(j->k));
    if (p->g) {
        loom_compile_info info;
        loom_status st = rt_gpu_prepare(p->g, j->k, &info, err, sizeof err);
        j->codegen_ms = info.codegen_ms;
        j->link_ms = info.link_ms;
        j->load_ms = info.load_ms;
        if (st != LOOM_OK)
            return fail_job(j, st, "", err);
    }
    j->st = LOOM_OK;
}

static void *worker(void *arg)
{
    pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int i = p->next < p->njobs ? p->next++ : -1;
        pthread_mutex_unlock(&p->mu);
        if (i < 0)
            return NULL;
        run_job(p, &p->jobs[i]);
        pthread_mutex_lock(&p->mu);
        p->order[p->done] = i;
        if (++p->done == p->njobs)
            p->end_ms = util_now_ms();
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

/* Start nthreads workers over p's jobs; returns how many started (0: the jobs run inline,
 * one by one, as pool_next asks for them). */
static int pool_start(pool *p, pthread_t *th, int nthreads)
{
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int started = 0;
    for (; started < nthreads; started++)
        if (pthread_create(&th[started], NULL, worker, p) != 0)
            break;
    return started;
}

/* The next finished job after the *seen already taken, or -1 when every job has been
 * taken.  When none has finished yet: with wait, wait for one (drawing progress); without,
 * return -2.  With no worker thread, the next job runs here. */
static int pool_next(pool *p, int started, int *seen, progress *pr, bool wait)
{
    if (*seen >= p->njobs)
        return -1;
    if (started == 0 && p->done == *seen) {
        if (!wait)
            return -2;
        int i = p->next++;
        run_job(p, &p->jobs[i]);
        p->order[p->done++] = i;
        if (p->done == p->njobs)
            p->end_ms = util_now_ms();
    }
    pthread_mutex_lock(&p->mu);
    while (p->done <= *seen) {
        if (!wait) {
            pthread_mutex_unlock(&p->mu);
            return -2;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        pr->compiled = p->done;
        pthread_mutex_unlock(&p->mu);
        progress_draw(pr, false);
        pthread_mutex_lock(&p->mu);
    }
    int j = p->order[(*seen)++];
    pr->compiled = p->done;
    pthread_mutex_unlock(&p->mu);
    return j;
}

/* Wait for every job, then join the workers. */
static void pool_finish(pool *p, pthread_t *th, int started, progress *pr)
{
    int seen = 0;
    while (pool_next(p, started, &seen, pr, true) >= 0)
        ;
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
}

/* ---------------------------------------------------------------- the measuring bench */

typedef struct bench {
    loom_runtime *rt;
    rt_gpu *g;
    const loom_template *t;
    const int64_t *shape;
    loom_instance in; /* copy 0, and the host copies of the inputs */
    int nargs, ncopies;
    loom_arg args[TUNE_MAX_COPIES][LOOM_MAX_ARGS];
    loom_buffer *extra[TUNE_MAX_COPIES][LOOM_MAX_ARGS];
    loom_buffer *flush;
    /* the reference and the comparison, per output argument */
    loom_buffer *ref[LOOM_MAX_ARGS];
    loom_kernel *cmpk[LOOM_MAX_ARGS];
    int cmpgrid[LOOM_MAX_ARGS];
    loom_buffer *cbad[LOOM_MAX_ARGS], *cmax[LOOM_MAX_ARGS];
    float *hbad, *hmax;
    double atol, rtol;
    bool gpu_reference;
    double inputs_ms; /* of the set-up: making and uploading the inputs */
    /* the runs being timed: kernels cur[0..ncur-1] in turn, one run each, round after round */
    loom_kernel *cur[TUNE_TOGETHER];
    int grid[TUNE_TOGETHER][3];
    int ncur;
    unsigned rep;
} bench;

static bool is_output(const loom_arg_info *ai) { return ai->is_tensor && (ai->access & LOOM_OUT); }

static void bench_free(bench *b)
{
    for (int c = 0; c < TUNE_MAX_COPIES; c++)
        for (int i = 0; i < LOOM_MAX_ARGS; i++)
            loom_buffer_destroy(b->extra[c][i]);
    for (int i = 0; i < LOOM_MAX_ARGS; i++) {
        loom_buffer_destroy(b->ref[i]);
        loom_buffer_destroy(b->cbad[i]);
        loom_buffer_destroy(b->cmax[i]);
        loom_kernel_destroy(b->cmpk[i]);
    }
    loom_buffer_destroy(b->flush);
    loom_instance_destroy(&b->in);
    free(b->hbad);
    free(b->hmax);
    memset(b, 0, sizeof *b);
}

/* The comparison kernels (one per output argument of the probe kernel), built before
 * the pool starts so that it compiles them with the candidates. */
static loom_status bench_compare_kernels(bench *b, loom_kernel *probe, char *err, size_t n)
{
    b->nargs = loom_kernel_num_args(probe);
    int most = 0;
    for (int i = 0; i < b->nargs; i++) {
        loom_arg_info ai;
        loom_kernel_arg_info(probe, i, &ai);
        if (!is_output(&ai))
            continue;
        int64_t cnt = (int64_t)(ai.min_bytes / loom_dtype_size(ai.dtype));
        b->cmpk[i] = tune_compare_kernel(ai.dtype, cnt, &b->cmpgrid[i]);
        if (!b->cmpk[i]) {
            snprintf(err, n, "output '%s' of %lld elements cannot be compared", ai.name, (long long)cnt);
            return LOOM_ERR_UNSUPPORTED;
        }
        if (b->cmpgrid[i] > most)
            most = b->cmpgrid[i];
    }
    b->hbad = malloc((size_t)most * sizeof(float) + 4);
    b->hmax = malloc((size_t)most * sizeof(float) + 4);
    if (!b->hbad || !b->hmax) {
        snprintf(err, n, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    return LOOM_OK;
}

/* Inputs, copies, flush buffer, reference buffers.  config is the config the instance is
 * set up with (any valid one: arguments depend on the shape alone). */
static loom_status bench_setup(bench *b, const int64_t *config, uint64_t seed, char *err, size_t n)
{
    double t0 = util_now_ms();
    loom_status st = loom_instance_create(b->rt, b->t, b->shape, config, seed, &b->in, err, n);
    b->inputs_ms = util_now_ms() - t0;
    if (st != LOOM_OK)
        return st;
    const rt_gpu_props *pp = rt_gpu_properties(b->g);
    size_t l2 = pp && pp->l2_bytes > 0 ? (size_t)pp->l2_bytes : (size_t)64 << 20;
    size_t budget = pp && pp->total_mem ? pp->total_mem / 4 : (size_t)4 << 30;
    size_t bytes = b->in.bytes ? b->in.bytes : 1;
    int k = (int)((4 * l2 + bytes - 1) / bytes);
    k = k < 1 ? 1 : k > TUNE_MAX_COPIES ? TUNE_MAX_COPIES : k;
    while (k > 1 && (size_t)k * bytes > budget)
        k--;
    b->ncopies = k;
    memcpy(b->args[0], b->in.args, sizeof b->in.args);
    for (int c = 1; c < k; c++)
        for (int i = 0; i < b->nargs; i++) {
            const loom_arg_info *ai = &b->in.info[i];
            b->args[c][i] = b->in.args[i];
            if (!ai->is_tensor)
                continue;
            loom_buffer *x = loom_buffer_create(b->rt, ai->min_bytes);
            if (!x)
                goto fail;
            b->extra[c][i] = x;
            b->args[c][i] = LOOM_ARG_BUF(x);
            st = ai->access == LOOM_OUT ? loom_buffer_fill(x, 0xff)
                                        : loom_buffer_upload(x, b->in.host[i], ai->min_bytes);
            if (st != LOOM_OK)
                goto fail;
        }
    b->flush = loom_buffer_create(b->rt, 2 * l2);
    if (!b->flush)
        goto fail;
    for (int i = 0; i < b->nargs; i++)
        if (is_output(&b->in.info[i]) && !(b->ref[i] = loom_buffer_create(b->rt, b->in.info[i].min_bytes)))
            goto fail;
    for (int i = 0; i < b->nargs; i++)
        if (b->cmpk[i] && (!(b->cbad[i] = loom_buffer_create(b->rt, (size_t)b->cmpgrid[i] * 4)) ||
                           !(b->cmax[i] = loom_buffer_create(b->rt, (size_t)b->cmpgrid[i] * 4))))
            goto fail;
    return LOOM_OK;
fail:
    snprintf(err, n, "setting up %d copies of the arguments (%zu bytes each): %s", k, bytes,
             loom_runtime_error(b->rt));
    return LOOM_ERR_NOMEM;
}

/* Outputs of copy 0 back to their starting state: OUT poisoned (0xff bytes: NaN or -1),
 * INOUT re-uploaded. */
static loom_status bench_reset_outputs(bench *b, loom_buffer *const *bufs)
{
    for (int i = 0; i < b->nargs; i++) {
        const loom_arg_info *ai = &b->in.info[i];
        if (!is_output(ai))
            continue;
        loom_status st = ai->access == LOOM_OUT ? loom_buffer_fill(bufs[i], 0xff)
                                                : loom_buffer_upload(bufs[i], b->in.host[i], ai->min_bytes);
        if (st != LOOM_OK)
            return st;
    }
    return LOOM_OK;
}

/* The CPU reference, computed from the host inputs and uploaded into b->ref. */
static loom_status bench_cpu_reference(bench *b, char *err, size_t n)
{
    void *ref[LOOM_MAX_ARGS] = {0};
    loom_status st = LOOM_OK;
    for (int i = 0; i < b->nargs && st == LOOM_OK; i++)
        if (b->ref[i] && !(ref[i] = calloc(1, b->in.info[i].min_bytes)))
            st = LOOM_ERR_NOMEM;
    if (st == LOOM_OK) {
        b->t->reference(b->shape, b->in.host, ref);
        for (int i = 0; i < b->nargs && st == LOOM_OK; i++)
            if (ref[i])
                st = loom_buffer_upload(b->ref[i], ref[i], b->in.info[i].min_bytes);
    }
    for (int i = 0; i < b->nargs; i++)
        free(ref[i]);
    if (st != LOOM_OK)
        snprintf(err, n, "reference: %s", st == LOOM_ERR_NOMEM ? "out of host memory" : loom_runtime_error(b->rt));
    return st;
}

/* The GPU reference: kernel k run with b->ref as its outputs. */
static loom_status bench_gpu_reference(bench *b, loom_kernel *k, const int grid[3], char *err, size_t n)
{
    loom_arg args[LOOM_MAX_ARGS];
    memcpy(args, b->args[0], sizeof args);
    for (int i = 0; i < b->nargs; i++)
        if (b->ref[i])
            args[i] = LOOM_ARG_BUF(b->ref[i]);
    loom_status st = bench_reset_outputs(b, b->ref);
    if (st == LOOM_OK)
        st = loom_launch(b->rt, k, grid, args, b->nargs);
    if (st == LOOM_OK) {
        char e[1024];
        st = rt_gpu_sync(b->g, e, sizeof e);
        if (st != LOOM_OK)
            snprintf(err, n, "%s", e);
    } else {
        snprintf(err, n, "%s", loom_runtime_error(b->rt));
    }
    return st;
}

/* Does k take the same arguments as the bench was set up for? */
static bool bench_args_match(const bench *b, loom_kernel *k)
{
    if (loom_kernel_num_args(k) != b->nargs)
        return false;
    for (int i = 0; i < b->nargs; i++) {
        loom_arg_info ai;
        loom_kernel_arg_info(k, i, &ai);
        const loom_arg_info *want = &b->in.info[i];
        if (ai.is_tensor != want->is_tensor || ai.dtype != want->dtype || ai.min_bytes != want->min_bytes ||
            ai.access != want->access)
            return false;
    }
    return true;
}

/* Run k once on copy 0 and compare its outputs with the reference.  Returns LOOM_OK and
 * the number of bad elements (and the worst error), or the launch's failure with the
 * message in err; *fault is set when the failure was reported by a later synchronizing
 * call (an asynchronous fault: the context may be unusable now). */
static loom_status bench_check(bench *b, loom_kernel *k, const int grid[3], double *nbad, double *worst,
                               bool *fault, char *err, size_t n)
{
    *nbad = 0;
    *worst = 0;
    *fault = false;
    loom_status st = bench_reset_outputs(b, b->in.buf);
    if (st == LOOM_OK)
        st = loom_launch(b->rt, k, grid, b->args[0], b->nargs);
    if (st != LOOM_OK) {
        first_line(err, n, "", loom_runtime_error(b->rt));
        return st;
    }
    double scale = b->gpu_reference ? 2.0 : 1.0;
    for (int i = 0; i < b->nargs; i++) {
        if (!b->cmpk[i])
            continue;
        loom_arg ca[6] = {LOOM_ARG_BUF(b->in.buf[i]), LOOM_ARG_BUF(b->ref[i]),
                          LOOM_ARG_F32((float)(scale * b->t->atol)), LOOM_ARG_F32((float)(scale * b->t->rtol)),
                          LOOM_ARG_BUF(b->cbad[i]), LOOM_ARG_BUF(b->cmax[i])};
        int cg[3] = {b->cmpgrid[i], 1, 1};
        st = loom_launch(b->rt, b->cmpk[i], cg, ca, 6);
        size_t bytes = (size_t)b->cmpgrid[i] * 4;
        if (st == LOOM_OK)
            st = loom_buffer_download(b->cbad[i], b->hbad, bytes);
        if (st == LOOM_OK)
            st = loom_buffer_download(b->cmax[i], b->hmax, bytes);
        if (st != LOOM_OK) {
            *fault = true;
            first_line(err, n, "", loom_runtime_error(b->rt));
            return st;
        }
        for (int p = 0; p < b->cmpgrid[i]; p++) {
            *nbad += b->hbad[p];
            if (!(b->hmax[p] <= *worst))
                *worst = b->hmax[p];
        }
    }
    return LOOM_OK;
}

static loom_status flush_work(void *p, char *err, size_t n)
{
    bench *b = p;
    loom_status st = loom_buffer_fill(b->flush, (unsigned char)b->rep);
    if (st != LOOM_OK)
        snprintf(err, n, "L2 flush: %s", loom_runtime_error(b->rt));
    return st;
}

static loom_status run_work(void *p, char *err, size_t n)
{
    bench *b = p;
    int i = (int)(b->rep % (unsigned)b->ncur), c = (int)(b->rep / (unsigned)b->ncur % (unsigned)b->ncopies);
    b->rep++;
    loom_status st = loom_launch(b->rt, b->cur[i], b->grid[i], b->args[c], b->nargs);
    if (st != LOOM_OK)
        snprintf(err, n, "%s", loom_runtime_error(b->rt));
    return st;
}

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

/* Time nk kernels interleaved: warmup + reps rounds, each round one run of every kernel
 * in turn, each run after an L2 flush and on the next copy of the arguments.  Kernel i's
 * times of the timed rounds go to times[i * reps + 0 .. reps - 1].  Interleaving gives
 * every kernel the same share of any drift of the clocks (power, temperature), so their
 * times compare fairly. */
static loom_status bench_time_many(bench *b, loom_kernel *const *k, const int (*grid)[3], int nk, int warmup,
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
static loom_status bench_time(bench *b, loom_kernel *k, const int grid[3], int warmup, int reps,
                              double *times, char *err, size_t n)
{
    return bench_time_many(b, &k, (const int(*)[3])grid, 1, warmup, reps, times, err, n);
}

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
    bench *b = calloc(1, sizeof *b);
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

/* ---------------------------------------------------------------- one shape */

typedef struct tune_ctx {
    loom_runtime *rt;
    rt_gpu *g;
    const loom_template *t;
    loom_tune_opts o;
    bool show_progress;
    char cache_path[4096];
    bool have_cache;
    tc_file *cache;
    tc_device dev;
} tune_ctx;

static void note(loom_tuned *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(loom_tuned *r, const char *fmt, ...)
{
    size_t len = strlen(r->note);
    if (len >= sizeof r->note - 1)
        return;
    if (len)
        r->note[len++] = ' ', r->note[len] = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->note + len, sizeof r->note - len, fmt, ap);
    va_end(ap);
}

/* Build, verify and prepare t at (shape, config) into r.  On failure the reason is in err. */
static loom_status make_ready(tune_ctx *c, loom_tuned *r, const int64_t *config, char *err, size_t n)
{
    loom_kernel *k = c->t->build(r->shape, config, err, n);
    if (!k)
        return LOOM_ERR_INVALID;
    loom_status st = loom_prepare(c->rt, k, NULL);
    if (st != LOOM_OK) {
        first_line(err, n, "", loom_kernel_num_errors(k) ? loom_kernel_errors(k) : loom_runtime_error(c->rt));
        loom_kernel_destroy(k);
        return st;
    }
    r->kernel = k;
    memcpy(r->config, config, sizeof r->config);
    c->t->grid(r->shape, config, r->grid);
    return LOOM_OK;
}

static void default_config(const loom_template *t, int64_t *cfg)
{
    memset(cfg, 0, LOOM_MAX_PARAMS * sizeof *cfg);
    for (int i = 0; i < t->nconfig; i++)
        cfg[i] = t->config[i].def;
}

/* No timing: the default config, or the best valid one by the cost model when the
 * default cannot serve the shape. */
static loom_status use_default(tune_ctx *c, loom_tuned *r, const char *why)
{
    const loom_template *t = c->t;
    int64_t cfg[LOOM_MAX_PARAMS];
    default_config(t, cfg);
    char reason[256] = "", err[1024] = "", text[512];
    loom_tune_result *cands = NULL;
    int nvalid = 0, nc = tune_candidates(t, r->shape, &cands, &nvalid);
    if (!r->results && nc > 0) {
        r->ncand = nc;
        r->nvalid = nvalid;
    }
    if (t->valid && !t->valid(r->shape, cfg, reason, sizeof reason)) {
        if (nc > 0 && nvalid > 0) {
            memcpy(cfg, cands[0].config, sizeof cfg);
            loom_params_format(t->config, t->nconfig, cfg, text, sizeof text);
            note(r, "%s; the default config cannot serve this shape (%s), so %s best valid config %s.", why,
                 reason, t->cost ? "the cost model's" : "the first", text);
        } else {
            note(r, "%s; no config is valid for this shape (default: %s).", why, reason);
        }
    } else {
        loom_params_format(t->config, t->nconfig, cfg, text, sizeof text);
        note(r, "%s; default config %s.", why, text);
    }
    free(cands);
    loom_status st = make_ready(c, r, cfg, err, sizeof err);
    if (st == LOOM_OK) {
        r->source = LOOM_TUNE_DEFAULT;
    } else {
        note(r, "It cannot be built: %s", err);
        r->source = LOOM_TUNE_NONE;
    }
    r->status = st;
    return st;
}

static void fill_device(tune_ctx *c)
{
    const rt_gpu_props *p = rt_gpu_properties(c->g);
    snprintf(c->dev.gpu, sizeof c->dev.gpu, "%s", p->name);
    c->dev.sm_count = p->sm_count;
    c->dev.driver = p->driver_version;
}

static void shape_bucket(const loom_template *t, const int64_t *shape, int64_t *bucket)
{
    memcpy(bucket, shape, LOOM_MAX_PARAMS * sizeof *bucket);
    if (t->bucket)
        t->bucket(shape, bucket);
}

/* Look the shape up in the cache; true when r is ready from it. */
static bool from_cache(tune_ctx *c, loom_tuned *r, const char *key)
{
    tc_record rec;
    if (!c->cache || !tc_find(c->cache, key, c->t, &rec))
        return false;
    char why[256] = "", err[1024] = "", text[512];
    loom_params_format(c->t->config, c->t->nconfig, rec.config, text, sizeof text);
    if (c->t->valid && !c->t->valid(r->shape, rec.config, why, sizeof why)) {
        note(r, "The cached config %s of this shape's bucket does not serve this shape (%s): tuned again.",
             text, why);
        return false;
    }
    if (make_ready(c, r, rec.config, err, sizeof err) != LOOM_OK) {
        note(r, "The cached config %s fails here (%s): tuned again.", text, err);
        return false;
    }
    r->source = LOOM_TUNE_CACHED;
    r->status = LOOM_OK;
    r->ms = rec.ms;
    r->ncand = rec.ncand;
    r->nvalid = rec.nvalid;
    note(r, "From the tuning cache (tuned over %d configs).", rec.ncand);
    return true;
}

static int nthreads_for(const tune_ctx *c, int njobs)
{
    long n = c->o.threads > 0 ? c->o.threads : env_long("LOOM_TUNE_THREADS", 0);
    if (n <= 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > 64)
        n = 64;
    return (int)(n < njobs ? n : njobs);
}

/* The first pass's yardstick: the first config timed.  Every later group of candidates is
 * timed together with it, one run of each in turn, and each candidate's time is the
 * anchor's own first time scaled by the ratio of their times in that group.  The GPU's
 * clock drops by up to 13% within a tenth of a second of sustained tensor-core load (H200)
 * and recovers while it waits for the compiler, so raw times taken at different moments
 * do not compare; ratios taken in the same few milliseconds do. */
typedef struct tune_anchor {
    loom_kernel *k;
    int grid[3];
    double ms;
} tune_anchor;

/* Run candidate x (kernel k) once on poisoned outputs and compare them with the
 * reference.  A failure sets x's verdict and reason.  Returns false when the CUDA context
 * broke (an asynchronous fault): nothing more can run. */
static bool check_one(bench *b, const loom_template *t, const int64_t *shape, loom_tune_result *x, loom_kernel *k,
                      bool *passed)
{
    int grid[3];
    t->grid(shape, x->config, grid);
    double nbad, worst;
    bool fault;
    char e[1024];
    *passed = false;
    loom_status st = bench_check(b, k, grid, &nbad, &worst, &fault, e, sizeof e);
    if (st != LOOM_OK) {
        x->verdict = LOOM_TUNE_LAUNCH_FAILED;
        first_line(x->reason, sizeof x->reason, "", e);
        return !fault;
    }
    if (nbad > 0) {
        x->verdict = LOOM_TUNE_WRONG;
        snprintf(x->reason, sizeof x->reason, "%.0f elements outside tolerance (max |err| %.3g) vs %s", nbad, worst,
                 b->gpu_reference ? "the reference config's GPU output" : "the CPU reference");
        return true;
    }
    *passed = true;
    return true;
}

/* The first pass of a group of checked candidates grp[0..ng-1] (at most TUNE_FIRST_GROUP):
 * warmup + reps rounds, each one run of the anchor and of every candidate in turn (without
 * an anchor yet, the first candidate becomes it).  Sets each one's verdict and ms.
 * times holds (ng + 1) * reps.  Returns false when the CUDA context broke. */
static bool time_group(bench *b, const loom_template *t, const int64_t *shape, loom_tune_result *res,
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
            first_line(res[grp[g]].reason, sizeof res[grp[g]].reason, "while timing: ", e);
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

/* The first pass in progress: the group of checked candidates waiting to be timed. */
typedef struct first_pass {
    bench *b;
    tune_ctx *c;
    loom_tuned *r;
    loom_tune_result *res;
    loom_kernel **kern;
    int grp[TUNE_FIRST_GROUP], ng;
    tune_anchor anchor;
    int warmup, reps;
    double *times; /* (TUNE_FIRST_GROUP + 1) * reps */
    bool broken;   /* the CUDA context broke: nothing more runs */
    progress *pr;
    double t0, ms; /* the tuning's start; time spent checking and timing */
} first_pass;

static void not_run(loom_tune_result *x)
{
    x->verdict = LOOM_TUNE_LAUNCH_FAILED;
    snprintf(x->reason, sizeof x->reason, "not run: an earlier fault broke the CUDA context");
}

/* Time the waiting group (if any). */
static void fp_flush(first_pass *f)
{
    if (f->ng == 0)
        return;
    const loom_template *t = f->c->t;
    double t0 = util_now_ms();
    if (!f->broken)
        f->broken = !time_group(f->b, t, f->r->shape, f->res, f->kern, f->grp, f->ng, &f->anchor, f->warmup,
                                f->reps, f->times);
    else
        for (int g = 0; g < f->ng; g++)
            not_run(&f->res[f->grp[g]]);
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
        if (f->c->o.verbose) {
            char text[512];
            loom_params_format(t->config, t->nconfig, x->config, text, sizeof text);
            fprintf(stderr, "loom tune: at %7.1f ms, in a group of %d: %-48s %s %.4f ms\n", util_now_ms() - f->t0, f->ng,
                    text, loom_tune_verdict_name(x->verdict), x->ms);
        }
    }
    f->pr->checked += f->ng;
    progress_draw(f->pr, false);
    f->ng = 0;
}

/* Check candidate i; when it passes, it joins the group, which is timed once full. */
static void fp_add(first_pass *f, int i)
{
    double t0 = util_now_ms();
    bool passed = false;
    if (f->broken)
        not_run(&f->res[i]);
    else
        f->broken = !check_one(f->b, f->c->t, f->r->shape, &f->res[i], f->kern[i], &passed);
    f->ms += util_now_ms() - t0;
    if (!passed) {
        f->pr->checked++;
        return;
    }
    f->grp[f->ng++] = i;
    if (f->ng == TUNE_FIRST_GROUP)
        fp_flush(f);
}

/* The full tuning of one shape (GPU only). */
static loom_status tune_shape(tune_ctx *c, loom_tuned *r, const int64_t *bucket, const char *key)
{
    const loom_template *t = c->t;
    char err[2048] = "", text[512];
    int nvalid = 0;
    loom_tune_result *res = NULL;
    int nres = tune_candidates(t, r->shape, &res, &nvalid);
    if (nres < 0) {
        note(r, "Out of host memory.");
        return r->status = LOOM_ERR_NOMEM;
    }
    r->results = res;
    r->nresults = nres;
    r->ncand = nres;
    r->nvalid = nvalid;
    int ntry = nvalid;
    if (c->o.max_configs > 0 && ntry > c->o.max_configs) {
        for (int i = c->o.max_configs; i < nvalid; i++) {
            res[i].verdict = LOOM_TUNE_SKIPPED;
            snprintf(res[i].reason, sizeof res[i].reason, "beyond max_configs=%d in %s order",
                     c->o.max_configs, t->cost ? "cost-model" : "enumeration");
        }
        ntry = c->o.max_configs;
    }
    if (ntry == 0) {
        note(r, "No valid config for this shape (%d considered).", nres);
        return use_default(c, r, "Not tuned");
    }

    /* the probe: the default config when it is among the candidates, else the first */
    int64_t def[LOOM_MAX_PARAMS];
    default_config(t, def);
    int base = 0;
    for (int i = 0; i < ntry; i++)
        if (!memcmp(res[i].config, def, sizeof def)) {
            base = i;
            break;
        }
    bench b;
    memset(&b, 0, sizeof b);
    b.rt = c->rt;
    b.g = c->g;
    b.t = t;
    b.shape = r->shape;
    loom_kernel *probe = NULL;
    int probe_i = base;
    for (; !probe && probe_i < ntry; probe_i++)
        probe = t->build(r->shape, res[probe_i].config, err, sizeof err);
    probe_i--;
    if (!probe || loom_verify(probe) != LOOM_OK ||
        bench_compare_kernels(&b, probe, err, sizeof err) != LOOM_OK) {
        if (probe && loom_kernel_num_errors(probe))
            first_line(err, sizeof err, "", loom_kernel_errors(probe));
        note(r, "No candidate builds: %s.", err);
        loom_kernel_destroy(probe);
        bench_free(&b);
        return use_default(c, r, "Not tuned");
    }
    loom_kernel_destroy(probe);

    /* compile every candidate and the comparison kernels on the pool: the comparison
     * kernels first (every check needs them), then the reference config (base: the
     * default, whose output is the reference for large outputs), then the others in cost
     * order */
    progress pr = {.on = c->show_progress, .tname = t->name, .total = ntry};
    int ncmp = 0;
    for (int i = 0; i < b.nargs; i++)
        ncmp += b.cmpk[i] != NULL;
    job *jobs = calloc((size_t)(ntry + ncmp), sizeof *jobs);
    int *order = calloc((size_t)(ntry + ncmp), sizeof *order);
    int *dq = calloc((size_t)ntry, sizeof *dq);
    loom_kernel **kern = calloc((size_t)ntry, sizeof *kern);
    pthread_t *th = calloc(64, sizeof *th);
    int warmup = c->o.warmup > 0 ? c->o.warmup : TUNE_FIRST_WARMUP;
    int reps = c->o.reps > 0 ? c->o.reps : TUNE_FIRST_REPS;
    double *times = malloc((size_t)reps * (TUNE_FIRST_GROUP + 1) * sizeof *times);
    if (!jobs || !order || !dq || !kern || !th || !times) {
        free(jobs);
        free(order);
        free(dq);
        free(kern);
        free(th);
        free(times);
        bench_free(&b);
        note(r, "Out of host memory.");
        return r->status = LOOM_ERR_NOMEM;
    }
    int nj = 0;
    for (int i = 0; i < b.nargs; i++)
        if (b.cmpk[i])
            jobs[nj++].k = b.cmpk[i];
    jobs[nj++].res = &res[base];
    for (int i = 0; i < ntry; i++)
        if (i != base)
            jobs[nj++].res = &res[i];
    pool p = {.g = c->g, .t = t, .shape = r->shape, .jobs = jobs, .njobs = nj, .order = order};
    pr.jobs = nj;
    double t0 = util_now_ms();
    int started = pool_start(&p, th, nthreads_for(c, nj));

    /* meanwhile: inputs, copies, reference buffers */
    loom_status st = bench_setup(&b, res[probe_i].config, c->o.seed, err, sizeof err);
    int64_t out_elems = 0;
    for (int i = 0; i < b.nargs; i++)
        if (b.ref[i])
            out_elems += (int64_t)(b.in.info[i].min_bytes / loom_dtype_size(b.in.info[i].dtype));
    long ref_max = env_long("LOOM_TUNE_REF_MAX", 1L << 22);
    b.gpu_reference = out_elems > ref_max;
    double tref = util_now_ms();
    if (st == LOOM_OK && !b.gpu_reference)
        st = bench_cpu_reference(&b, err, sizeof err);
    r->setup_ms = util_now_ms() - t0;
    if (c->o.verbose)
        fprintf(stderr, "loom tune: set-up %.0f ms: inputs %.0f ms (%zu bytes), %d copies, CPU reference %.0f ms\n",
                r->setup_ms, b.inputs_ms, b.in.bytes, b.ncopies, util_now_ms() - tref);

    /* check each candidate as soon as it is compiled, and time it briefly (the first pass)
     * in a group with the next ones checked and the anchor, while the others compile.  A
     * candidate waits (in dq) while the comparison kernels or the reference are not ready;
     * a group is timed when it is full or when no compiled candidate is waiting. */
    int seen = 0, ncmp_done = 0, ref_from = -1, ncompiled = 0, nmiss = 0, dh = 0, dn = 0;
    bool base_done = false, aborted = st != LOOM_OK, ref_tried = false;
    double codegen_ms = 0, link_ms = 0;
    first_pass fp = {.b = &b, .c = c, .r = r, .res = res, .kern = kern, .warmup = warmup, .reps = reps,
                     .times = times, .pr = &pr, .t0 = t0};
    for (;;) {
        bool need_ref = b.gpu_reference && ref_from < 0;
        int i;
        if (dn > 0 && !aborted && !fp.broken && (need_ref ? base_done : ncmp_done == ncmp)) {
            i = dq[dh];
            dh = (dh + 1) % ntry;
            dn--;
        } else {
            int j = pool_next(&p, started, &seen, &pr, fp.ng == 0);
            if (j == -2) { /* nothing new is compiled: time the waiting group meanwhile */
                fp_flush(&fp);
                continue;
            }
            if (j < 0)
                break;
            if (j < ncmp) {
                if (jobs[j].st != LOOM_OK && !aborted) {
                    snprintf(err, sizeof err, "the comparison kernel failed to compile: %s", jobs[j].err);
                    st = jobs[j].st;
                    aborted = true;
                }
                jobs[j].k = NULL; /* owned by the bench */
                ncmp_done++;
                continue;
            }
            i = (int)(jobs[j].res - res);
            kern[i] = jobs[j].k;
            jobs[j].k = NULL;
            base_done |= i == base;
            codegen_ms += jobs[j].codegen_ms;
            link_ms += jobs[j].link_ms;
            nmiss += jobs[j].codegen_ms > 0;
            if (kern[i] && !bench_args_match(&b, kern[i])) {
                res[i].verdict = LOOM_TUNE_REFUSED;
                snprintf(res[i].reason, sizeof res[i].reason,
                         "its arguments differ from the other configs' (arguments must depend on the shape alone)");
                loom_kernel_destroy(kern[i]);
                kern[i] = NULL;
            }
            ncompiled += kern[i] != NULL;
            if (!kern[i] || aborted || fp.broken) {
                if (kern[i] && fp.broken)
                    not_run(&res[i]);
                pr.checked++;
                continue;
            }
        }
        if (b.gpu_reference && ref_from < 0) {
            if (i != base && !base_done) { /* the default config's output is the reference */
                dq[(dh + dn++) % ntry] = i;
                continue;
            }
            int grid[3];
            char e[1024];
            double tr = util_now_ms();
            t->grid(r->shape, res[i].config, grid);
            ref_tried = true;
            loom_status rs = bench_gpu_reference(&b, kern[i], grid, e, sizeof e);
            fp.ms += util_now_ms() - tr;
            if (rs != LOOM_OK) {
                res[i].verdict = LOOM_TUNE_LAUNCH_FAILED;
                first_line(res[i].reason, sizeof res[i].reason, "as the reference: ", e);
                pr.checked++;
                continue;
            }
            ref_from = i;
        }
        if (ncmp_done < ncmp) {
            dq[(dh + dn++) % ntry] = i;
            continue;
        }
        fp_add(&fp, i);
    }
    fp_flush(&fp);
    for (; dn > 0; dn--, dh = (dh + 1) % ntry)
        if (fp.broken)
            not_run(&res[dq[dh]]);
    double check_ms = fp.ms;
    pool_finish(&p, th, started, &pr);
    double compile_ms = (p.end_ms > 0 ? p.end_ms : util_now_ms()) - t0;
    free(th);
    free(order);
    free(dq);
    free(times);
    if (aborted) {
        note(r, "Tuning set-up failed: %s.", err);
        goto fallback;
    }
    if (b.gpu_reference && ref_from < 0) {
        note(r, ref_tried ? "No config could produce the reference output." : "No candidate compiled.");
        st = LOOM_ERR_RUNTIME;
        goto fallback;
    }

    /* the finalists: re-timed together, run by run in turn, with many more runs */
    double *fms = calloc((size_t)ntry, sizeof *fms);
    int fin[TUNE_FIN_MAX], nfin = 0, fruns = 0;
    double t1 = util_now_ms();
    for (int i = 0; fms && i < ntry; i++)
        fms[i] = kern[i] && res[i].verdict == LOOM_TUNE_TIMED ? res[i].ms : 0;
    if (fms)
        nfin = tune_finalists(fms, ntry, fin);
    if (nfin > 1) {
        loom_kernel *fk[TUNE_FIN_MAX];
        int fg[TUNE_FIN_MAX][3];
        for (int f = 0; f < nfin; f++) {
            fk[f] = kern[fin[f]];
            t->grid(r->shape, res[fin[f]].config, fg[f]);
        }
        fruns = tune_final_runs(fms[fin[0]], nfin);
        double *samples = malloc((size_t)nfin * (size_t)fruns * sizeof *samples);
        char e[1024] = "out of host memory";
        pr.phase = "finalists";
        progress_draw(&pr, true);
        if (samples && bench_time_many(&b, fk, (const int(*)[3])fg, nfin, 1, fruns, samples, e, sizeof e) == LOOM_OK) {
            for (int f = 0; f < nfin; f++)
                res[fin[f]].ms = tune_iqm(samples + (size_t)f * fruns, fruns);
        } else {
            note(r, "The finalists' timing failed (%s): the first pass decides.", e);
            fruns = 0;
        }
        free(samples);
        if (c->o.verbose)
            for (int f = 0; f < nfin; f++) {
                loom_params_format(t->config, t->nconfig, res[fin[f]].config, text, sizeof text);
                fprintf(stderr, "loom tune: finalist %-48s first pass %.4f ms, %d interleaved runs %.4f ms\n", text,
                        fms[fin[f]], fruns, res[fin[f]].ms);
            }
    }
    free(fms);
    double final_ms = util_now_ms() - t1;
    r->compile_ms = compile_ms;
    r->measure_ms = check_ms + final_ms;
    progress_end(&pr);

    int win = -1; /* the fastest finalist (the finalists were timed together) */
    for (int f = 0; f < nfin; f++)
        if (win < 0 || res[fin[f]].ms < res[win].ms)
            win = fin[f];
    for (int i = 0; i < ntry; i++)
        if (i != win)
            loom_kernel_destroy(kern[i]);
    if (win < 0) {
        free(kern);
        note(r, "No candidate ran correctly (%d compiled of %d tried).", ncompiled, ntry);
        st = LOOM_ERR_RUNTIME;
        free(jobs);
        bench_free(&b);
        return use_default(c, r, "Not tuned") == LOOM_OK ? LOOM_OK : st;
    }
    r->kernel = kern[win];
    free(kern);
    memcpy(r->config, res[win].config, sizeof r->config);
    t->grid(r->shape, r->config, r->grid);
    r->ms = res[win].ms;
    r->source = LOOM_TUNE_TUNED;
    r->status = LOOM_OK;
    note(r, "Tuned: %d timed of %d valid (%d combinations) in %.0f ms: compile %.0f ms on %d threads (%d compiled: "
         "codegen %.0f + link %.0f ms in all); inputs and reference %.0f ms, check and first pass %.0f ms, both "
         "meanwhile; %d finalists x %d runs %.0f ms; reference: %s.",
         r->ntimed, nvalid, nres, util_now_ms() - t0, compile_ms, started, nmiss, codegen_ms, link_ms, r->setup_ms,
         check_ms, nfin, fruns, final_ms, b.gpu_reference ? "the default config's GPU output" : "the CPU reference");
    if (ref_from >= 0 && ref_from != base) {
        loom_params_format(t->config, t->nconfig, res[ref_from].config, text, sizeof text);
        note(r, "(reference config: %s)", text);
    }
    free(jobs);
    bench_free(&b);
    if (c->have_cache) {
        tc_record rec = {.ms = r->ms, .ncand = nres, .nvalid = nvalid};
        memcpy(rec.config, r->config, sizeof rec.config);
        rec.tune_ms = util_now_ms() - t0;
        char e[1024];
        if (tc_store(c->cache_path, key, t, r->shape, bucket, &c->dev, &rec, e, sizeof e) != LOOM_OK)
            note(r, "Not stored in the tuning cache: %s.", e);
        else {
            char w[512];
            tc_close(c->cache);
            c->cache = tc_open(c->cache_path, w, sizeof w); /* see it (and what others added) */
        }
    }
    return LOOM_OK;

fallback:
    progress_end(&pr);
    for (int i = 0; i < ntry; i++)
        loom_kernel_destroy(kern[i]);
    free(kern);
    free(jobs);
    bench_free(&b);
    loom_status fb = use_default(c, r, "Not tuned");
    return fb == LOOM_OK ? LOOM_OK : st;
}

/* ---------------------------------------------------------------- loom_tune */

loom_status loom_tune(loom_runtime *rt, const loom_template *t, const int64_t *shapes, int nshapes,
                      const loom_tune_opts *opts, loom_tuned *out)
{
    if (!out || nshapes < 0)
        return LOOM_ERR_INVALID;
    memset(out, 0, (size_t)nshapes * sizeof *out);
    if (!rt || !t || (!shapes && nshapes) || !t->build || !t->grid) {
        for (int i = 0; i < nshapes; i++) {
            out[i].status = LOOM_ERR_INVALID;
            snprintf(out[i].note, sizeof out[i].note, "loom_tune: %s", !rt ? "no runtime" : !t ? "no template"
                     : !shapes ? "no shapes" : "the template has no build or grid function");
        }
        return LOOM_ERR_INVALID;
    }
    if (loom_runtime_status(rt) != LOOM_OK) {
        for (int i = 0; i < nshapes; i++) {
            out[i].status = loom_runtime_status(rt);
            snprintf(out[i].note, sizeof out[i].note, "the runtime is not usable: %s", loom_runtime_error(rt));
        }
        return loom_runtime_status(rt);
    }
    tune_ctx c;
    memset(&c, 0, sizeof c);
    c.rt = rt;
    c.t = t;
    c.g = rt_runtime_gpu(rt);
    if (opts)
        c.o = *opts;
    if (!c.o.seed)
        c.o.seed = 1;
    if (util_env_on("LOOM_TUNE_FORCE"))
        c.o.force = 1;
    if (util_env_on("LOOM_TUNE_VERBOSE"))
        c.o.verbose = 1;
    c.show_progress = c.o.quiet != 1 && isatty(2);
    bool disabled = env_off("LOOM_TUNE");
    if (c.g) {
        fill_device(&c);
        c.have_cache = tc_path(c.cache_path, sizeof c.cache_path);
        if (c.have_cache) {
            char w[1024];
            c.cache = tc_open(c.cache_path, w, sizeof w);
            if (w[0])
                fprintf(stderr, "loom: warning: %s\n", w);
        }
    }
    loom_status first = LOOM_OK;
    bool tuned_any = false;
    for (int s = 0; s < nshapes; s++) {
        loom_tuned *r = &out[s];
        double t0 = util_now_ms();
        r->t = t;
        for (int i = 0; i < t->nshape; i++)
            r->shape[i] = shapes[(size_t)s * (size_t)t->nshape + (size_t)i];
        loom_status st;
        if (!c.g) {
            char why[1200];
            const char *e = loom_runtime_error(rt);
            snprintf(why, sizeof why, "Not tuned: %s", e[0] ? e : "the runtime is the CPU interpreter");
            st = use_default(&c, r, why);
        } else {
            int64_t bucket[LOOM_MAX_PARAMS];
            char key[2048];
            shape_bucket(t, r->shape, bucket);
            tc_key(t, bucket, &c.dev, key, sizeof key);
            if (!c.o.force && from_cache(&c, r, key))
                st = LOOM_OK;
            else if (disabled)
                st = use_default(&c, r, "Tuning is off (LOOM_TUNE=0)");
            else if (!t->init || !t->reference)
                st = use_default(&c, r, "Not tuned: the template has no init or reference function, so its "
                                        "candidates cannot be checked");
            else {
                st = tune_shape(&c, r, bucket, key);
                tuned_any = true;
            }
        }
        r->tune_ms = util_now_ms() - t0;
        if (st != LOOM_OK && first == LOOM_OK)
            first = st;
    }
    tc_close(c.cache);
    if (c.o.quiet != 2 && (c.o.verbose || (tuned_any && c.show_progress)))
        loom_tune_print(stderr, out, nshapes, c.o.verbose);
    return first;
}

void loom_tuned_release(loom_tuned *r, int n)
{
    for (int i = 0; r && i < n; i++) {
        loom_kernel_destroy(r[i].kernel);
        free(r[i].results);
        r[i].kernel = NULL;
        r[i].results = NULL;
        r[i].nresults = 0;
    }
}

/* ---------------------------------------------------------------- the summary table */

static const char *source_name(loom_tune_source s)
{
    switch (s) {
    case LOOM_TUNE_TUNED: return "tuned";
    case LOOM_TUNE_CACHED: return "cached";
    case LOOM_TUNE_DEFAULT: return "default";
    default: return "none";
    }
}

static int cmp_result(const void *a, const void *b)
{
    const loom_tune_result *x = a, *y = b;
    bool tx = x->verdict == LOOM_TUNE_TIMED && x->ms > 0, ty = y->verdict == LOOM_TUNE_TIMED && y->ms > 0;
    if (tx != ty)
        return tx ? -1 : 1;
    if (tx && x->ms != y->ms)
        return x->ms < y->ms ? -1 : 1;
    return (int)x->verdict - (int)y->verdict;
}

void loom_tune_print(FILE *f, const loom_tuned *r, int n, int every_config)
{
    if (!f || !r)
        return;
    fprintf(f, "%-20s %-40s %-8s %7s %6s %6s %10s %9s  %s\n", "template", "shape", "source", "configs",
            "valid", "timed", "best ms", "tune ms", "config");
    for (int s = 0; s < n; s++) {
        const loom_tuned *x = &r[s];
        if (!x->t)
            continue;
        char sh[512], cf[512];
        loom_params_format(x->t->shape, x->t->nshape, x->shape, sh, sizeof sh);
        if (x->kernel)
            loom_params_format(x->t->config, x->t->nconfig, x->config, cf, sizeof cf);
        else
            snprintf(cf, sizeof cf, "-");
        fprintf(f, "%-20s %-40s %-8s %7d %6d %6d %10.4f %9.1f  %s\n", x->t->name, sh, source_name(x->source),
                x->ncand, x->nvalid, x->ntimed, x->ms, x->tune_ms, cf);
        if (x->note[0])
            fprintf(f, "    %s\n", x->note);
        if (!every_config || !x->nresults)
            continue;
        loom_tune_result *sorted = malloc((size_t)x->nresults * sizeof *sorted);
        if (!sorted)
            continue;
        memcpy(sorted, x->results, (size_t)x->nresults * sizeof *sorted);
        qsort(sorted, (size_t)x->nresults, sizeof *sorted, cmp_result);
        for (int i = 0; i < x->nresults; i++) {
            loom_params_format(x->t->config, x->t->nconfig, sorted[i].config, cf, sizeof cf);
            if (sorted[i].verdict == LOOM_TUNE_TIMED && sorted[i].ms > 0)
                fprintf(f, "    %-36s %10.4f ms  x%.3f%s\n", cf, sorted[i].ms, sorted[i].ms / x->ms,
                        !memcmp(sorted[i].config, x->config, sizeof x->config) ? "  <- picked" : "");
            else
                fprintf(f, "    %-36s %-14s %s\n", cf, loom_tune_verdict_name(sorted[i].verdict), sorted[i].reason);
        }
        free(sorted);
    }
}
