/*
 * tune.c -- the per-shape autotuner: loom_tune() (include/loom_tune.h section 3,
 * docs/tuning.md), the driver of the other files of tune/.
 *
 * A template declares knobs with candidate values, a validity check that explains each
 * rejection, a grid function, and optionally a cost model and a shape-bucketing
 * function.  The tuner knows no template by name: it works from those declarations
 * alone.  For each shape, tune_shape goes through these steps:
 *
 *   1. Cache.  The key (template, shape bucket, GPU name and SM count, driver, loom
 *      version, candidate space) is looked up in the JSON cache (tune_cache.c).  A hit
 *      whose config still serves the shape is built and loaded (from the module disk
 *      cache: LLVM does not run) and nothing else happens.
 *   2. Candidates.  Every combination of the knobs' candidates is checked by the
 *      template's valid(); the valid ones are ranked by its cost model (when it has one)
 *      and, if asked, only the best max_configs are kept, and past the first
 *      TUNE_PRUNE_KEEP those the model puts at more than LOOM_TUNE_PRUNE times the best
 *      estimate are pruned (candidates.c).  The whole tuning of a shape has a time budget
 *      (LOOM_TUNE_BUDGET_MS): the pool skips the compiles that would end past it (pool.c),
 *      the finalists' pass shrinks to what is left, and the best so far is taken.
 *   3. Compile, in parallel.  A pthread pool (pool.c) builds, verifies and compiles each
 *      candidate (rt_gpu_prepare: codegen, PTX -> cubin, module load): the comparison
 *      kernels first, then the default config (its output is the reference for large
 *      outputs), then the others in cost order.  Meanwhile the main thread makes the
 *      inputs (the template's init), uploads them, and computes the reference -- or, for a
 *      template with a tpl_device entry (templates/tpl_device.h), fills the inputs on the
 *      device and runs its reference kernels there (check.c, gpu_inputs.c); then it
 *      checks and times the candidates as they come off the pool (steps 4 and 5), while
 *      the rest compile.
 *   4. Check (check.c).  Each compiled candidate runs once on poisoned outputs and is
 *      compared with the reference on the device, by a comparison kernel written in
 *      loom's own DSL (tune_compare_kernel): only a count and a maximum per program come
 *      back, so a check costs a fraction of a millisecond even for outputs of hundreds of
 *      MB.  The reference is the template's CPU reference when the outputs are small (at
 *      most LOOM_TUNE_REF_MAX elements, 4M by default); for larger outputs the CPU
 *      reference would take seconds, so the reference is the GPU output of the default
 *      config (the config the test suite checks against the CPU reference at many
 *      shapes), and the tolerance is doubled since both sides round.  A candidate beyond
 *      tolerance is rejected with the number of bad elements and the largest error.
 *   5. Time, in two passes (measure.c).  Every run is timed between a pair of events;
 *      before it (outside the timed window) a buffer twice the L2 size is written, which
 *      evicts the L2, and successive runs use different copies of the arguments when one
 *      copy is smaller than four L2 sizes, so no run finds its inputs cached by the run
 *      before.
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
 * Output (report.c): a progress bar on stderr when it is a terminal (configs done of
 * total, best so far), a summary table at the end (loom_tune_print), and every config's
 * time with LOOM_TUNE_VERBOSE=1.
 */
#define _GNU_SOURCE
#include "../util/util.h"
#include "tune.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Up to a million seconds (0: no budget). */
double tune_budget_ms(void) { return util_env_double("LOOM_TUNE_BUDGET_MS", TUNE_BUDGET_DEFAULT_MS, 0, 1e9); }

double tune_budget_reserve(double budget_ms)
{
    double r = TUNE_BUDGET_RESERVE_FINS * TUNE_FIN_BUDGET_MS;
    return budget_ms / 4 < r ? budget_ms / 4 : r;
}


/* ---------------------------------------------------------------- a template's tuning */

/* What loom_tune sets up once for all the shapes. */
typedef struct tune_ctx {
    loom_runtime *rt;
    rt_gpu *g;
    const loom_template *t;
    loom_tune_opts o;
    bool show_progress;
    bool disabled; /* LOOM_TUNE=0: the cache still serves, nothing is timed */
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
        tune_first_line(err, n, "", loom_kernel_num_errors(k) ? loom_kernel_errors(k) : loom_runtime_error(c->rt));
        loom_kernel_destroy(k);
        return st;
    }
    r->kernel = k;
    memcpy(r->config, config, sizeof r->config);
    c->t->grid(r->shape, config, r->grid);
    return LOOM_OK;
}

/* No timing: the untuned config (the defaults, or the template's heuristic for the
 * shape), or the best valid one by the cost model when that cannot serve the shape. */
static loom_status use_default(tune_ctx *c, loom_tuned *r, const char *why)
{
    const loom_template *t = c->t;
    int64_t cfg[LOOM_MAX_PARAMS];
    loom_template_untuned_config(t, r->shape, cfg);
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
        note(r, "%s; %s config %s.", why, t->heuristic ? "the heuristic's (untuned)" : "default", text);
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

/* The shape's bucket: the template's rule, and each run-time dim to the power of two at or
 * above it (its kernel serves every value up to the one it was built for). */
static void shape_bucket(const loom_template *t, const int64_t *shape, int64_t *bucket)
{
    memcpy(bucket, shape, LOOM_MAX_PARAMS * sizeof *bucket);
    if (t->bucket)
        t->bucket(shape, bucket);
    for (int i = 0; i < t->nshape; i++)
        if (t->shape[i].runtime)
            bucket[i] = loom_dim_bucket(shape[i]);
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
    long n = c->o.threads > 0 ? c->o.threads : (long)util_env_int("LOOM_TUNE_THREADS", 0, 0, 64); /* 0: a core each */
    if (n <= 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > 64)
        n = 64;
    return (int)(n < njobs ? n : njobs);
}

/* ---------------------------------------------------------------- one shape, step by step */

/* One shape's tuning under way: what the steps of tune_shape hand one another. */
typedef struct shape_run {
    tune_ctx *c;
    loom_tuned *r;
    const loom_template *t;
    loom_status st; /* the tuning's own failure (its reason in err) */
    char err[2048];
    /* the candidates: res[0..ntry-1] are tried, the valid ones first in cost order */
    loom_tune_result *res; /* r->results */
    int nres, nvalid, ntry;
    int base;    /* the reference config: the default when it is among them, else the first */
    int probe_i; /* the candidate the bench's arguments were learnt from */
    tune_bench b;
    tune_progress pr;
    /* the pool: the given kernels' jobs (ncmp of them: the device fills, the device
     * reference, the comparisons and their reductions) first, then the candidates' */
    tune_job *jobs;
    int nj, ncmp;
    int jfill, jref; /* the first fill job and the first reference job */
    bool dev_ref;    /* the reference was made by the template's device reference kernels */
    int npruned;     /* candidates the cost model dropped */
    double tstart, budget_ms; /* when the shape's tuning began; its budget (0: none) */
    char budget_why[160];
    int *order;
    pthread_t *th;
    tune_pool pool;
    int started;        /* worker threads */
    double t0;          /* when the pool started */
    loom_kernel **kern; /* kern[i]: candidate i's compiled kernel (NULL: none, or not any more) */
    /* checking as they come: candidates waiting for the comparison kernels or the
     * reference, in a ring dq of ntry (head dh, dn of them) */
    int *dq, dh, dn;
    int ncmp_done, ncompiled, nmiss; /* nmiss: compiled by codegen (no cache served them) */
    bool base_done, aborted, ref_tried;
    int ref_from; /* the candidate whose GPU output is the reference (-1: none yet) */
    double codegen_ms, link_ms;
    tune_first_pass fp;
    double *times; /* the first pass's */
    double check_ms, compile_ms;
    /* the finalists */
    int fin[TUNE_FIN_MAX], nfin, fruns;
    double final_ms;
} shape_run;

/* Free what the steps made (r->results stays r's). */
static void release(shape_run *s)
{
    for (int i = 0; s->kern && i < s->ntry; i++)
        loom_kernel_destroy(s->kern[i]);
    free(s->kern);
    free(s->jobs);
    free(s->order);
    free(s->dq);
    free(s->th);
    free(s->times);
    tune_bench_free(&s->b);
}

/* Give up tuning: free what the steps made, and fall back on the default config
 * (use_default), never silently: the source says FELL_BACK and the status
 * LOOM_ERR_NOT_TUNED when the default serves; else st, the tuning's failure, or the
 * default's when st is LOOM_OK. */
static loom_status give_up(shape_run *s, loom_status st)
{
    release(s);
    loom_status fb = use_default(s->c, s->r, "NOT TUNED");
    if (fb != LOOM_OK)
        return st != LOOM_OK ? st : fb;
    s->r->source = LOOM_TUNE_FELL_BACK;
    return LOOM_ERR_NOT_TUNED;
}

/* Step 2: the candidates, beyond max_configs skipped.  false (with s->st) when there is
 * none to try. */
static bool list_candidates(shape_run *s)
{
    tune_ctx *c = s->c;
    loom_tuned *r = s->r;
    s->nres = tune_candidates(s->t, r->shape, &s->res, &s->nvalid);
    if (s->nres < 0) {
        note(r, "Out of host memory.");
        s->st = r->status = LOOM_ERR_NOMEM;
        return false;
    }
    r->results = s->res;
    r->nresults = s->nres;
    r->ncand = s->nres;
    r->nvalid = s->nvalid;
    s->ntry = s->nvalid;
    if (c->o.max_configs > 0 && s->ntry > c->o.max_configs) {
        for (int i = c->o.max_configs; i < s->nvalid; i++) {
            s->res[i].verdict = LOOM_TUNE_SKIPPED;
            snprintf(s->res[i].reason, sizeof s->res[i].reason, "beyond max_configs=%d in %s order",
                     c->o.max_configs, s->t->cost ? "cost-model" : "enumeration");
        }
        s->ntry = c->o.max_configs;
    }
    if (s->t->cost) { /* drop what the cost model says cannot win, before anything compiles it */
        int before = s->ntry;
        s->ntry = tune_prune(s->res, s->ntry, util_env_double("LOOM_TUNE_PRUNE", TUNE_PRUNE_RATIO, 0, 1e6), TUNE_PRUNE_KEEP);
        s->npruned = before - s->ntry;
    }
    if (s->ntry == 0) {
        note(r, "No valid config for this shape (%d considered).", s->nres);
        s->st = give_up(s, LOOM_OK);
        return false;
    }
    return true;
}

/* Step 3, before the pool starts: the comparison kernels, one per output, so that the
 * pool compiles them first.  A probe, the first candidate that builds from the reference
 * config on, gives the outputs' types and sizes (arguments depend on the shape alone).
 * false (with s->st) when none builds. */
static bool make_comparison_kernels(shape_run *s)
{
    const loom_template *t = s->t;
    loom_tuned *r = s->r;
    int64_t def[LOOM_MAX_PARAMS];
    loom_template_untuned_config(t, r->shape, def);
    for (int i = 0; i < s->ntry; i++)
        if (!memcmp(s->res[i].config, def, sizeof def)) {
            s->base = i;
            break;
        }
    s->b.rt = s->c->rt;
    s->b.g = s->c->g;
    s->b.t = t;
    s->b.shape = r->shape;
    loom_kernel *probe = NULL;
    int probe_i = s->base;
    for (; !probe && probe_i < s->ntry; probe_i++)
        probe = t->build(r->shape, s->res[probe_i].config, s->err, sizeof s->err);
    s->probe_i = probe_i - 1;
    if (!probe || loom_verify(probe) != LOOM_OK ||
        tune_bench_compare_kernels(&s->b, probe, s->err, sizeof s->err) != LOOM_OK) {
        if (probe && loom_kernel_num_errors(probe))
            tune_first_line(s->err, sizeof s->err, "", loom_kernel_errors(probe));
        note(r, "No candidate builds: %s.", s->err);
        loom_kernel_destroy(probe);
        s->st = give_up(s, LOOM_OK);
        return false;
    }
    /* inputs and reference on the device, when the template says how */
    char e[1024];
    if (tune_bench_device_kernels(&s->b, e, sizeof e) != LOOM_OK) {
        note(r, "Inputs on the host: %s.", e);
        for (int f = 0; f < s->b.nfill; f++) {
            loom_kernel_destroy(s->b.fillk[f]);
            s->b.fillk[f] = NULL;
        }
        for (int i = 0; i < s->b.nrefk; i++) {
            loom_kernel_destroy(s->b.refk[i]);
            s->b.refk[i] = NULL;
        }
        s->b.dev = NULL;
        s->b.nfill = s->b.nrefk = 0;
    }
    if (s->b.dev)
        s->b.in.kernel = probe; /* its argument infos name the arguments */
    else
        loom_kernel_destroy(probe);
    return true;
}

/* Step 3: compile every candidate and the comparison kernels on the pool: the comparison
 * kernels first (every check needs them), then the reference config (base: the default,
 * whose output is the reference for large outputs), then the others in cost order.
 * false (with s->st) when out of memory. */
static bool start_pool(shape_run *s)
{
    tune_ctx *c = s->c;
    loom_tuned *r = s->r;
    int ntry = s->ntry;
    s->pr = (tune_progress){.on = c->show_progress, .tname = s->t->name, .total = ntry};
    for (int i = 0; i < s->b.nargs; i++)
        s->ncmp += (s->b.cmpk[i] != NULL) + (s->b.redk[i] != NULL);
    s->ncmp += s->b.nfill + s->b.nrefk;
    s->jobs = calloc((size_t)(ntry + s->ncmp), sizeof *s->jobs);
    s->order = calloc((size_t)(ntry + s->ncmp), sizeof *s->order);
    s->dq = calloc((size_t)ntry, sizeof *s->dq);
    s->kern = calloc((size_t)ntry, sizeof *s->kern);
    s->th = calloc(64, sizeof *s->th);
    int warmup = c->o.warmup > 0 ? c->o.warmup : TUNE_FIRST_WARMUP;
    int reps = c->o.reps > 0 ? c->o.reps : TUNE_FIRST_REPS;
    s->times = malloc((size_t)reps * (TUNE_FIRST_GROUP + 1) * sizeof *s->times);
    if (!s->jobs || !s->order || !s->dq || !s->kern || !s->th || !s->times) {
        release(s);
        note(r, "Out of host memory.");
        s->st = r->status = LOOM_ERR_NOMEM;
        return false;
    }
    s->jfill = s->nj; /* first what the inputs and the reference need, then the comparisons */
    for (int f = 0; f < s->b.nfill; f++)
        s->jobs[s->nj++].k = s->b.fillk[f];
    s->jref = s->nj;
    for (int i = 0; i < s->b.nrefk; i++)
        s->jobs[s->nj++].k = s->b.refk[i];
    for (int i = 0; i < s->b.nargs; i++) {
        if (s->b.cmpk[i])
            s->jobs[s->nj++].k = s->b.cmpk[i];
        if (s->b.redk[i])
            s->jobs[s->nj++].k = s->b.redk[i];
    }
    s->jobs[s->nj].must = true; /* the reference config, whose output may be the reference */
    s->jobs[s->nj++].res = &s->res[s->base];
    for (int i = 0; i < ntry; i++)
        if (i != s->base)
            s->jobs[s->nj++].res = &s->res[i];
    s->pool = (tune_pool){.g = c->g, .t = s->t, .shape = r->shape, .jobs = s->jobs, .njobs = s->nj,
                          .order = s->order};
    s->pr.jobs = s->nj;
    s->t0 = util_now_ms();
    if (s->budget_ms > 0) {
        s->pool.deadline_ms = s->tstart + s->budget_ms - tune_budget_reserve(s->budget_ms);
        snprintf(s->budget_why, sizeof s->budget_why,
                 "not compiled: the tuning's time budget ran out (LOOM_TUNE_BUDGET_MS=%.0f)", s->budget_ms);
        s->pool.budget_why = s->budget_why;
    }
    s->started = tune_pool_start(&s->pool, s->th, nthreads_for(c, s->nj));
    s->fp = (tune_first_pass){.b = &s->b, .t = s->t, .verbose = c->o.verbose, .r = r, .res = s->res,
                              .kern = s->kern, .warmup = warmup, .reps = reps, .times = s->times, .pr = &s->pr,
                              .t0 = s->t0};
    return true;
}

/* Step 3's set-up when the template makes its inputs on the device
 * (templates/tpl_device.h): wait for the fill kernels to compile, fill, then wait for the
 * reference kernels and run them.  A reference that fails leaves the default config's
 * output as the reference (the tuning goes on); inputs that fail abort it. */
static void make_inputs_on_device(shape_run *s)
{
    tune_bench *b = &s->b;
    loom_tuned *r = s->r;
    for (int f = 0; f < b->nfill && s->st == LOOM_OK; f++) {
        tune_pool_wait(&s->pool, s->started, s->jfill + f, &s->pr);
        if (s->jobs[s->jfill + f].st != LOOM_OK) {
            snprintf(s->err, sizeof s->err, "the fill kernel failed to compile: %s", s->jobs[s->jfill + f].err);
            s->st = s->jobs[s->jfill + f].st;
        }
    }
    double t0 = util_now_ms();
    if (s->st == LOOM_OK)
        s->st = tune_bench_setup_device(b, s->c->o.seed, s->err, sizeof s->err);
    double tin = util_now_ms() - t0;
    b->gpu_reference = true; /* both sides round: the tolerance is doubled */
    char e[1024] = "";
    for (int i = 0; i < b->nrefk && s->st == LOOM_OK && !e[0]; i++) {
        tune_pool_wait(&s->pool, s->started, s->jref + i, &s->pr);
        if (s->jobs[s->jref + i].st != LOOM_OK)
            snprintf(e, sizeof e, "it failed to compile: %s", s->jobs[s->jref + i].err);
    }
    double t1 = util_now_ms();
    if (s->st == LOOM_OK && !e[0] && tune_bench_device_reference(b, e, sizeof e) == LOOM_OK)
        s->dev_ref = true;
    else if (s->st == LOOM_OK)
        note(r, "The template's device reference failed (%s): the default config's output is the reference.", e);
    r->setup_ms = util_now_ms() - s->t0;
    if (s->c->o.verbose)
        fprintf(stderr, "loom tune: set-up %.0f ms: inputs on the device %.0f ms (%zu bytes, %d filled), %d copies, "
                "device reference %.0f ms\n", r->setup_ms, tin, b->in.bytes, b->nfill, b->ncopies, util_now_ms() - t1);
    s->aborted = s->st != LOOM_OK;
}

/* Meanwhile, on the main thread: inputs, copies, reference buffers, and the reference
 * itself when the CPU makes it (outputs of at most LOOM_TUNE_REF_MAX elements).  A
 * failure aborts the tuning once the pool is done. */
static void make_inputs(shape_run *s)
{
    tune_bench *b = &s->b;
    loom_tuned *r = s->r;
    if (b->dev) {
        make_inputs_on_device(s);
        return;
    }
    s->st = tune_bench_setup(b, s->res[s->probe_i].config, s->c->o.seed, s->err, sizeof s->err);
    int64_t out_elems = 0;
    for (int i = 0; i < b->nargs; i++)
        if (b->ref[i])
            out_elems += (int64_t)(b->in.info[i].min_bytes / loom_dtype_size(b->in.info[i].dtype));
    int64_t ref_max = util_env_int("LOOM_TUNE_REF_MAX", INT64_C(1) << 22, 0, INT64_C(1) << 40);
    b->gpu_reference = out_elems > ref_max;
    double tref = util_now_ms();
    if (s->st == LOOM_OK && !b->gpu_reference)
        s->st = tune_bench_cpu_reference(b, s->err, sizeof s->err);
    r->setup_ms = util_now_ms() - s->t0;
    if (s->c->o.verbose)
        fprintf(stderr, "loom tune: set-up %.0f ms: inputs %.0f ms (%zu bytes), %d copies, CPU reference %.0f ms\n",
                r->setup_ms, b->inputs_ms, b->in.bytes, b->ncopies, util_now_ms() - tref);
    s->aborted = s->st != LOOM_OK;
}

/* Put candidate i in the queue, to be checked once what it waits for is ready. */
static void wait_in_queue(shape_run *s, int i)
{
    s->dq[(s->dh + s->dn++) % s->ntry] = i;
}

/* Take finished job j off the pool: a comparison kernel (whose failure aborts the
 * tuning), or a candidate.  Returns the candidate's index when it is to be checked, else
 * -1 (a comparison kernel; a candidate that did not compile, or whose arguments differ;
 * or nothing more runs). */
static int take_compiled(shape_run *s, int j)
{
    tune_job *jb = &s->jobs[j];
    if (j < s->ncmp) {
        bool ref_job = j >= s->jref && j < s->jref + s->b.nrefk; /* its failure: make_inputs_on_device */
        if (jb->st != LOOM_OK && !s->aborted && !ref_job) {
            snprintf(s->err, sizeof s->err, "the comparison kernel failed to compile: %s", jb->err);
            s->st = jb->st;
            s->aborted = true;
        }
        jb->k = NULL; /* owned by the bench */
        s->ncmp_done++;
        return -1;
    }
    int i = (int)(jb->res - s->res);
    loom_tune_result *x = &s->res[i];
    s->kern[i] = jb->k;
    jb->k = NULL;
    s->base_done |= i == s->base;
    s->codegen_ms += jb->codegen_ms;
    s->link_ms += jb->link_ms;
    s->nmiss += jb->codegen_ms > 0;
    if (s->kern[i] && !tune_bench_args_match(&s->b, s->kern[i])) {
        x->verdict = LOOM_TUNE_REFUSED;
        snprintf(x->reason, sizeof x->reason,
                 "its arguments differ from the other configs' (arguments must depend on the shape alone)");
        loom_kernel_destroy(s->kern[i]);
        s->kern[i] = NULL;
    }
    s->ncompiled += s->kern[i] != NULL;
    if (!s->kern[i] || s->aborted || s->fp.broken) {
        if (s->kern[i] && s->fp.broken)
            tune_not_run(x);
        s->pr.checked++;
        return -1;
    }
    return i;
}

/* Can candidate i be checked now?  Not while the comparison kernels compile, nor, when
 * the reference is a GPU output, before it is made: by the reference config (base), or by
 * i when base failed to compile.  A candidate that must wait goes in the queue; one that
 * fails to make the reference is rejected. */
static bool ready_to_check(shape_run *s, int i)
{
    if (s->b.gpu_reference && s->ref_from < 0 && !s->dev_ref) {
        if (i != s->base && !s->base_done) { /* the default config's output is the reference */
            wait_in_queue(s, i);
            return false;
        }
        int grid[3];
        char e[1024];
        double tr = util_now_ms();
        s->t->grid(s->r->shape, s->res[i].config, grid);
        s->ref_tried = true;
        loom_status rs = tune_bench_gpu_reference(&s->b, s->kern[i], grid, e, sizeof e);
        s->fp.ms += util_now_ms() - tr;
        if (rs != LOOM_OK) {
            s->res[i].verdict = LOOM_TUNE_LAUNCH_FAILED;
            tune_first_line(s->res[i].reason, sizeof s->res[i].reason, "as the reference: ", e);
            s->pr.checked++;
            return false;
        }
        s->ref_from = i;
    }
    if (s->ncmp_done < s->ncmp) {
        wait_in_queue(s, i);
        return false;
    }
    return true;
}

/* Steps 4 and 5's first pass: check each candidate as soon as it is compiled, and time it
 * briefly in a group with the next ones checked and the anchor, while the others compile.
 * A candidate waits in the queue while the comparison kernels or the reference are not
 * ready; a group is timed when it is full or when no compiled candidate is waiting. */
static void check_and_first_pass(shape_run *s)
{
    int seen = 0;
    for (;;) {
        bool need_ref = s->b.gpu_reference && s->ref_from < 0 && !s->dev_ref;
        int i;
        if (s->dn > 0 && !s->aborted && !s->fp.broken && (need_ref ? s->base_done : s->ncmp_done == s->ncmp)) {
            i = s->dq[s->dh];
            s->dh = (s->dh + 1) % s->ntry;
            s->dn--;
        } else {
            int j = tune_pool_next(&s->pool, s->started, &seen, &s->pr, s->fp.ng == 0);
            if (j == -2) { /* nothing new is compiled: time the waiting group meanwhile */
                tune_fp_flush(&s->fp);
                continue;
            }
            if (j < 0)
                break;
            if ((i = take_compiled(s, j)) < 0)
                continue;
        }
        if (ready_to_check(s, i))
            tune_fp_add(&s->fp, i);
    }
    tune_fp_flush(&s->fp);
    for (; s->dn > 0; s->dn--, s->dh = (s->dh + 1) % s->ntry)
        if (s->fp.broken)
            tune_not_run(&s->res[s->dq[s->dh]]);
    s->check_ms = s->fp.ms;
}

/* Wait for the last compiles and join the workers.  false (with s->st, after falling back
 * on the default) when the tuning cannot go on: its set-up failed, or no config made the
 * reference. */
static bool finish_pool(shape_run *s)
{
    tune_pool_finish(&s->pool, s->th, s->started, &s->pr);
    s->compile_ms = (s->pool.end_ms > 0 ? s->pool.end_ms : util_now_ms()) - s->t0;
    if (s->aborted) {
        note(s->r, "Tuning set-up failed: %s.", s->err);
    } else if (s->b.gpu_reference && s->ref_from < 0 && !s->dev_ref) {
        note(s->r, s->ref_tried ? "No config could produce the reference output." : "No candidate compiled.");
        s->st = LOOM_ERR_RUNTIME;
    } else {
        return true;
    }
    tune_progress_end(&s->pr);
    s->st = give_up(s, s->st);
    return false;
}

/* Step 5's final pass: the finalists, re-timed together, run by run in turn, with many
 * more runs. */
static void final_pass(shape_run *s)
{
    const loom_template *t = s->t;
    loom_tuned *r = s->r;
    double *fms = calloc((size_t)s->ntry, sizeof *fms);
    double t1 = util_now_ms();
    for (int i = 0; fms && i < s->ntry; i++)
        fms[i] = s->kern[i] && s->res[i].verdict == LOOM_TUNE_TIMED ? s->res[i].ms : 0;
    if (fms)
        s->nfin = tune_finalists(fms, s->ntry, s->fin);
    if (s->nfin > 1) {
        s->fruns = s->budget_ms > 0 ? tune_final_runs_within(fms[s->fin[0]], s->nfin,
                                                             s->tstart + s->budget_ms - util_now_ms())
                                    : tune_final_runs(fms[s->fin[0]], s->nfin);
        char e[1024];
        s->pr.phase = "finalists";
        tune_progress_draw(&s->pr, true);
        if (tune_time_finalists(&s->b, t, r->shape, s->res, s->kern, s->fin, s->nfin, s->fruns, e, sizeof e) !=
            LOOM_OK) {
            note(r, "The finalists' timing failed (%s): the first pass decides.", e);
            s->fruns = 0;
        }
        if (s->c->o.verbose)
            for (int f = 0; f < s->nfin; f++) {
                char text[512];
                loom_params_format(t->config, t->nconfig, s->res[s->fin[f]].config, text, sizeof text);
                fprintf(stderr, "loom tune: finalist %-48s first pass %.4f ms, %d interleaved runs %.4f ms\n", text,
                        fms[s->fin[f]], s->fruns, s->res[s->fin[f]].ms);
            }
    }
    free(fms);
    s->final_ms = util_now_ms() - t1;
    r->compile_ms = s->compile_ms;
    r->measure_ms = s->check_ms + s->final_ms;
    tune_progress_end(&s->pr);
}

/* The winner, the fastest finalist (the finalists were timed together), becomes r's
 * kernel.  false (with s->st, after falling back on the default) when no candidate ran
 * correctly. */
static bool pick_winner(shape_run *s)
{
    const loom_template *t = s->t;
    loom_tuned *r = s->r;
    int win = -1;
    for (int f = 0; f < s->nfin; f++)
        if (win < 0 || s->res[s->fin[f]].ms < s->res[win].ms)
            win = s->fin[f];
    if (win < 0) {
        note(r, "No candidate ran correctly (%d compiled of %d tried).", s->ncompiled, s->ntry);
        s->st = give_up(s, LOOM_ERR_RUNTIME);
        return false;
    }
    r->kernel = s->kern[win];
    s->kern[win] = NULL;
    memcpy(r->config, s->res[win].config, sizeof r->config);
    t->grid(r->shape, r->config, r->grid);
    r->ms = s->res[win].ms;
    r->source = LOOM_TUNE_TUNED;
    r->status = LOOM_OK;
    note(r, "Tuned: %d timed of %d valid (%d combinations) in %.0f ms: compile %.0f ms on %d threads (%d compiled: "
         "codegen %.0f + link %.0f ms in all); inputs and reference %.0f ms, check and first pass %.0f ms, both "
         "meanwhile; %d finalists x %d runs %.0f ms; reference: %s.",
         r->ntimed, s->nvalid, s->nres, util_now_ms() - s->t0, s->compile_ms, s->started, s->nmiss, s->codegen_ms,
         s->link_ms, r->setup_ms, s->check_ms, s->nfin, s->fruns, s->final_ms,
         s->dev_ref ? "the template's device reference" : s->b.gpu_reference ? "the default config's GPU output"
                                                          : "the CPU reference");
    if (s->b.dev)
        note(r, "Inputs made on the device%s.", s->dev_ref ? "; reference kernels on loom's SIMT path" : "");
    if (s->npruned || s->pool.nskipped)
        note(r, "%d pruned by the cost model (LOOM_TUNE_PRUNE), %d not compiled within the budget "
             "(LOOM_TUNE_BUDGET_MS=%.0f).", s->npruned, s->pool.nskipped, s->budget_ms);
    if (s->ref_from >= 0 && s->ref_from != s->base) {
        char text[512];
        loom_params_format(t->config, t->nconfig, s->res[s->ref_from].config, text, sizeof text);
        note(r, "(reference config: %s)", text);
    }
    release(s);
    return true;
}

/* Step 6: the winner into the cache, and the cache read again to see it (and what other
 * processes added). */
static void store(shape_run *s, const int64_t *bucket, const char *key)
{
    tune_ctx *c = s->c;
    loom_tuned *r = s->r;
    if (!c->have_cache)
        return;
    tc_record rec = {.ms = r->ms, .ncand = s->nres, .nvalid = s->nvalid};
    memcpy(rec.config, r->config, sizeof rec.config);
    rec.tune_ms = util_now_ms() - s->t0;
    char e[1024];
    if (tc_store(c->cache_path, key, s->t, r->shape, bucket, &c->dev, &rec, e, sizeof e) != LOOM_OK)
        note(r, "Not stored in the tuning cache: %s.", e);
    else {
        char w[512];
        tc_close(c->cache);
        c->cache = tc_open(c->cache_path, w, sizeof w);
    }
}

/* One shape on the GPU: the cached config when the cache has the shape's bucket, else the
 * full tuning (*tuned is set), else (tuning off, or a failure) the default config.  The
 * numbers are the steps of the essay at the top. */
static loom_status tune_shape(tune_ctx *c, loom_tuned *r, bool *tuned)
{
    const loom_template *t = c->t;
    int64_t bucket[LOOM_MAX_PARAMS];
    char key[2048];
    shape_bucket(t, r->shape, bucket);
    tc_key(t, bucket, &c->dev, key, sizeof key);
    if (!c->o.force && from_cache(c, r, key)) /* 1 */
        return LOOM_OK;
    if (c->disabled)
        return use_default(c, r, "Tuning is off (LOOM_TUNE=0)");
    if (!t->init || !t->reference)
        return use_default(c, r, "Not tuned: the template has no init or reference function, so its "
                                 "candidates cannot be checked");
    *tuned = true;
    shape_run s = {.c = c, .r = r, .t = t, .ref_from = -1, .tstart = util_now_ms(), .budget_ms = tune_budget_ms()};
    if (!list_candidates(&s)) /* 2 */
        return s.st;
    if (!make_comparison_kernels(&s) || !start_pool(&s)) /* 3 */
        return s.st;
    make_inputs(&s);          /* meanwhile */
    check_and_first_pass(&s); /* 4, and 5's first pass, while the rest compile */
    if (!finish_pool(&s))
        return s.st;
    final_pass(&s); /* 5's final pass */
    if (!pick_winner(&s))
        return s.st;
    store(&s, bucket, key); /* 6 */
    return LOOM_OK;
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
    c.disabled = !util_env_switch("LOOM_TUNE", true);
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
            st = tune_shape(&c, r, &tuned_any);
        }
        r->tune_ms = util_now_ms() - t0;
        /* a failure outranks a fallback, which outranks success */
        if (st != LOOM_OK && (first == LOOM_OK || (first == LOOM_ERR_NOT_TUNED && st != LOOM_ERR_NOT_TUNED)))
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
