/*
 * tune.h -- internals of the autotuner (tune/): what its files share, and what the tests
 * reach (tests/test_tune.c).
 *
 * The public side is loom_tune() in include/loom_tune.h, section 3.  The files, in the order a
 * tuning goes through them:
 *
 *   tune.c        the driver: loom_tune, and tune_shape, which tunes one shape step by
 *                 step with the files below
 *   candidates.c  the candidate configs in cost order; the finalists of the first pass
 *   pool.c        the thread pool that compiles the candidates
 *   check.c       the bench (inputs, their copies, the reference) and the check of a
 *                 candidate's output by a comparison kernel built in loom's own DSL
 *   gpu_inputs.c  inputs filled on the device by a counter-based hash, and reductions that
 *                 bring a check's result back as two numbers (kernels in loom's own DSL)
 *   measure.c     the timed runs, the first pass (in groups, with an anchor), the final pass
 *   report.c      the progress bar and the summary table
 *   tune_cache.c  the winners, in one JSON file (cJSON) shared by every process on the
 *                 machine
 *   pick.c        beside loom_tune: the fastest of an operation's alternative ways to
 *                 compute one output (tune_pick), its pick cached in the same file
 *
 * Prefixes: tune_ (all but tune_cache.c), tc_ (tune_cache.c).
 */
#ifndef LOOM_TUNE_H
#define LOOM_TUNE_H

#include "loom.h"
#include "gpu.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Copy the first line of s into buf, after prefix (errors from the code generator run
 * long). */
static inline void tune_first_line(char *buf, size_t n, const char *prefix, const char *s)
{
    const char *nl = strchr(s, '\n');
    int len = nl ? (int)(nl - s) : (int)strlen(s);
    snprintf(buf, n, "%s%.*s", prefix, len, s);
}

/* ---------------------------------------------------------------- candidates.c */

/* Every combination of t's config candidates at shape, the valid ones first in cost
 * order (enumeration order among equal costs), then the invalid ones with their
 * reasons.  *out is malloc'ed; returns the count, or -1 when out of memory.  *nvalid
 * receives the number of valid ones. */
int tune_candidates(const loom_template *t, const int64_t *shape, loom_tune_result **out,
                    int *nvalid);

/* Pruning: past the first keep candidates (valid ones in cost order, res[0..ntry-1]), those
 * whose cost exceeds ratio times the best (res[0]'s) are marked SKIPPED with the reason;
 * returns how many are left to try.  Nothing is pruned when ratio <= 1 or the costs are
 * not positive.  The tuner keeps TUNE_PRUNE_KEEP and takes the ratio from
 * LOOM_TUNE_PRUNE (default TUNE_PRUNE_RATIO; 0 turns pruning off). */
#define TUNE_PRUNE_KEEP 32
#define TUNE_PRUNE_RATIO 2.0
int tune_prune(loom_tune_result *res, int ntry, double ratio, int keep);

/* The time budget of one shape's tuning: LOOM_TUNE_BUDGET_MS (default
 * TUNE_BUDGET_DEFAULT_MS; 0: none).  Candidates stop being compiled when the budget less
 * the final pass's reserve (tune_budget_reserve) would run out before one more compile
 * ends; the best so far is then taken. */
#define TUNE_BUDGET_DEFAULT_MS 3000.0
double tune_budget_ms(void);
/* What the compiles leave of a budget for the finalists' pass and the set-down: a quarter
 * of it, at most TUNE_BUDGET_RESERVE_FINS final passes (the finalists, and the checks and
 * first-pass runs of the candidates whose compiles end at the deadline: 1.5 passes left
 * the ikbo_lce headline 63 ms past 3000 on an H100, bench/RESULTS.md session 11). */
#define TUNE_BUDGET_RESERVE_FINS 2.5
double tune_budget_reserve(double budget_ms);
/* Runs of each finalist within remaining_ms of wall time (the runs of tune_final_runs, fewer
 * when time is short, never fewer than TUNE_FIN_RUNS_MIN). */
int tune_final_runs_within(double best_ms, int nfin, double remaining_ms);

/* The finalists: the fastest TUNE_FIN_MIN of the first pass, and those after them within
 * TUNE_FIN_MARGIN of the fastest, at most TUNE_FIN_MAX.  They are timed again together,
 * one run of each in turn, tune_final_runs() runs each, and the best interquartile mean
 * wins. */
#define TUNE_FIN_MIN 3
#define TUNE_FIN_MAX 8
#define TUNE_FIN_MARGIN 0.10

/* The finalists among n candidates whose first-pass times are ms[i] (0: not timed):
 * their indices into fin[TUNE_FIN_MAX], fastest first (the lower index first among
 * equal times); returns how many. */
int tune_finalists(const double *ms, int n, int *fin);

/* ---------------------------------------------------------------- report.c */

/* The progress bar, on stderr when it is a terminal. */
typedef struct tune_progress {
    bool on;
    const char *tname;
    int compiled, jobs;           /* compile jobs finished, of jobs */
    int checked, total;           /* candidates checked and timed (or rejected), of total */
    const char *phase;            /* NULL while compiling and timing; then the final phase */
    double best_ms;
    char best[160];
    double last_ms;
} tune_progress;

/* Redraw the bar: at most every 50 ms, unless force. */
void tune_progress_draw(tune_progress *p, bool force);
/* Erase the bar. */
void tune_progress_end(tune_progress *p);

/* ---------------------------------------------------------------- pool.c */

/* One compile: a candidate, or a given kernel (a comparison kernel). */
typedef struct tune_job {
    loom_kernel *k;        /* built by the worker, or given (the comparison kernels) */
    loom_tune_result *res; /* the candidate (NULL for a given kernel) */
    loom_status st;
    char err[512];         /* for a given kernel */
    double codegen_ms, link_ms, load_ms; /* of the compile (0 when served by a cache) */
    bool finished;         /* set by the pool (under its mutex) once the job is done */
    bool must;             /* compiled even past the budget's deadline (the reference config) */
} tune_job;

/* The compile pool: workers take jobs in order; the main thread takes finished jobs in the
 * order they finish (tune_pool_next), so it checks and times each candidate while the
 * others compile. */
typedef struct tune_pool {
    rt_gpu *g;
    const loom_template *t;
    const int64_t *shape;
    tune_job *jobs;
    int njobs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int next, done;
    int *order;    /* job indices in the order they finished (done of them) */
    double end_ms; /* when the last job finished */
    /* The time budget: a candidate whose compile would not end before deadline_ms
     * (util_now_ms; 0: no budget), by the mean wall time of the compiles so far, is not
     * compiled but skipped, with budget_why as its reason.  Given kernels always are. */
    double deadline_ms;
    double job_ms_sum;
    int job_ms_n;
    int nskipped;
    const char *budget_why;
} tune_pool;

/* Start nthreads workers over p's jobs; returns how many started (0: the jobs run inline,
 * one by one, as tune_pool_next asks for them). */
int tune_pool_start(tune_pool *p, pthread_t *th, int nthreads);
/* The next finished job after the *seen already taken, or -1 when every job has been
 * taken.  When none has finished yet: with wait, wait for one (drawing progress); without,
 * return -2.  With no worker thread, the next job runs here. */
int tune_pool_next(tune_pool *p, int started, int *seen, tune_progress *pr, bool wait);
/* Wait until job j has finished (running jobs here, in order, when there is no worker). */
void tune_pool_wait(tune_pool *p, int started, int j, tune_progress *pr);
/* Wait for every job, then join the workers. */
void tune_pool_finish(tune_pool *p, pthread_t *th, int started, tune_progress *pr);

/* ---------------------------------------------------------------- gpu_inputs.c */

/* The counter-based hash of element i of a fill with seed s: 32 bits (lowbias32 of
 * lo32(i) + tune_seed32(s)). */
uint32_t tune_seed32(uint64_t seed);
uint32_t tune_hash(uint64_t seed, int64_t i);
/* Element i of a fill: fma(float(hash >> 8) * 2^-24, hi - lo, lo) in f32, in [lo, hi). */
float tune_fill_value(uint64_t seed, int64_t i, float lo, float hi);
/* What tune_fill_kernel writes, on the host: n elements of dt, rounded to nearest even;
 * elements with i % ld >= cols are 0 (ld <= 0: none). */
void tune_fill_host(void *p, loom_dtype dt, int64_t n, uint64_t seed, float lo, float hi, int64_t ld, int64_t cols);

/* The fill kernel: out[n] of dt (f16, bf16, f32) = tune_fill_host's values.  Arguments:
 * out, seed32 (i64), lo, hi (f32), ld, cols (i64); grid (*grid0, 1, 1), TUNE_FILL_BLOCK
 * elements a program.  NULL when n or dt is unsupported. */
#define TUNE_FILL_BLOCK 2048
loom_kernel *tune_fill_kernel(loom_dtype dt, int64_t n, int *grid0);
/* Its 6 launch arguments (ld <= 0: no padding). */
void tune_fill_args(loom_buffer *out, uint64_t seed, double lo, double hi, int64_t ld, int64_t cols, int64_t n,
                    loom_arg a[6]);

/* part[p] = max |a - b| over the p-th TUNE_RED_BLOCK elements of a[n] (dtype da) and b[n]
 * (db), in f32; a NaN on either side counts as infinity.  Arguments a, b, part[*grid0]. */
#define TUNE_RED_BLOCK 2048
loom_kernel *tune_maxdiff_kernel(loom_dtype da, loom_dtype db, int64_t n, int *grid0);
/* One program: out[0] = op0 over x0[n], out[1] = op1 over x1[n] (f32; the inputs are
 * never negative, so a max starts at 0).  Arguments x0, x1, out[2]; grid (1, 1, 1). */
typedef enum tune_red { TUNE_RED_SUM, TUNE_RED_MAX } tune_red;
loom_kernel *tune_reduce2_kernel(int64_t n, tune_red op0, tune_red op1);

/* ---------------------------------------------------------------- check.c */

#define TUNE_MAX_COPIES 8
#define TUNE_MAX_REFK 4 /* reference kernels a template may run on the device */
#define TUNE_TOGETHER 8 /* kernels timed together (one run of each in turn), at most */

/* What the candidates of one shape run on: the inputs and their copies, the flush buffer,
 * the reference and the comparison kernels (check.c), and the runs being timed
 * (measure.c). */
typedef struct tune_bench {
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
    loom_buffer *bound[LOOM_MAX_ARGS]; /* the error model's bound per element (f32), or zeros */
    bool model[LOOM_MAX_ARGS];         /* bound[i] holds the model's bounds (a CPU reference) */
    loom_kernel *cmpk[LOOM_MAX_ARGS];
    int cmpgrid[LOOM_MAX_ARGS];
    loom_buffer *cbad[LOOM_MAX_ARGS], *cmax[LOOM_MAX_ARGS];
    loom_kernel *redk[LOOM_MAX_ARGS]; /* cbad, cmax -> csum: the bad count and the worst error */
    loom_buffer *csum[LOOM_MAX_ARGS];
    /* inputs made on the device (the template's tpl_device entry): fill kernels, one per
     * filled argument, and the reference kernels */
    const struct tpl_device *dev;
    int nfill;
    int fill_arg[LOOM_MAX_ARGS];
    loom_kernel *fillk[LOOM_MAX_ARGS];
    int fillgrid[LOOM_MAX_ARGS];
    double fill_lo[LOOM_MAX_ARGS], fill_hi[LOOM_MAX_ARGS];
    int64_t fill_ld[LOOM_MAX_ARGS], fill_cols[LOOM_MAX_ARGS];
    int nrefk;
    loom_kernel *refk[TUNE_MAX_REFK];
    int refgrid[TUNE_MAX_REFK][3];
    loom_kernel *boundk; /* the error model's bound on the device (tpl_device.bound), or NULL */
    int boundgrid[3];
    uint64_t seed;
    double atol, rtol;
    bool gpu_reference;
    double inputs_ms; /* of the set-up: making and uploading the inputs */
    /* the runs being timed: kernels cur[0..ncur-1] in turn, one run each, round after round */
    loom_kernel *cur[TUNE_TOGETHER];
    int grid[TUNE_TOGETHER][3];
    int ncur;
    unsigned rep;
} tune_bench;

/* The kernel that compares an output with its reference on the device: arguments
 * got[n] and ref[n] of dtype dt, with_bound: bound[n] (f32, the error model's bound per
 * element), atol and rtol (f32 scalars), then bad[grid] and maxerr[grid] (f32): per
 * program of TUNE_CMP_BLOCK elements, the number of elements with |got - ref| > bound +
 * atol + rtol * |ref| (NaN on both sides passes) and the largest |got - ref| (infinity
 * for a NaN on one side only).  *grid0 receives the grid size. */
#define TUNE_CMP_BLOCK 2048
loom_kernel *tune_compare_kernel(loom_dtype dt, int64_t n, bool with_bound, int *grid0);

void tune_bench_free(tune_bench *b);
/* The comparison kernels (one per output argument of the probe kernel, and the reduction
 * of its per-program results), built before the pool starts so that it compiles them
 * with the candidates. */
loom_status tune_bench_compare_kernels(tune_bench *b, loom_kernel *probe, char *err, size_t n);
/* When the template makes its inputs on the device (tpl_device_find): the fill kernels and
 * the reference kernels, built before the pool starts like the comparison kernels.
 * LOOM_OK with b->dev NULL when it does not. */
loom_status tune_bench_device_kernels(tune_bench *b, char *err, size_t n);
/* Inputs made on the device: host copies of the small ones (the template's init_rest),
 * fills of the others by the fill kernels (compiled by then), outputs poisoned; then the
 * copies, the flush buffer and the reference buffers as tune_bench_setup. */
loom_status tune_bench_setup_device(tune_bench *b, uint64_t seed, char *err, size_t n);
/* The device reference: b->refk run in order with b->ref as the outputs. */
loom_status tune_bench_device_reference(tune_bench *b, char *err, size_t n);
/* Inputs, copies, flush buffer, reference buffers.  config is the config the instance is
 * set up with (any valid one: arguments depend on the shape alone). */
loom_status tune_bench_setup(tune_bench *b, const int64_t *config, uint64_t seed, char *err, size_t n);
/* The CPU reference, computed from the host inputs and uploaded into b->ref. */
loom_status tune_bench_cpu_reference(tune_bench *b, char *err, size_t n);
/* The GPU reference: kernel k run with b->ref as its outputs. */
loom_status tune_bench_gpu_reference(tune_bench *b, loom_kernel *k, const int grid[3], char *err, size_t n);
/* Does k take the same arguments as the bench was set up for? */
bool tune_bench_args_match(const tune_bench *b, loom_kernel *k);
/* Run candidate x (kernel k) once on poisoned outputs and compare them with the
 * reference.  A failure sets x's verdict and reason.  Returns false when the CUDA context
 * broke (an asynchronous fault): nothing more can run. */
bool tune_check_one(tune_bench *b, const loom_template *t, const int64_t *shape, loom_tune_result *x,
                    loom_kernel *k, bool *passed);

/* ---------------------------------------------------------------- measure.c */

/* The first pass: each candidate, as soon as it is compiled and checked, joins a group of
 * at most TUNE_FIRST_GROUP (timed when full, or when no other compiled candidate is
 * waiting), while the others compile.  A group runs TUNE_FIRST_WARMUP + TUNE_FIRST_REPS
 * rounds (opts.warmup, opts.reps), each one run of the anchor (the first config timed)
 * and of every member in turn; a member's first-pass time is the anchor's first time
 * times the ratio of their interquartile means. */
#define TUNE_FIRST_WARMUP 1
#define TUNE_FIRST_REPS 5
#define TUNE_FIRST_GROUP 7
_Static_assert(TUNE_FIN_MAX <= TUNE_TOGETHER && TUNE_FIRST_GROUP + 1 <= TUNE_TOGETHER, "timed together");

/* The final pass's runs: TUNE_FIN_BUDGET_MS of kernel time over all finalists. */
#define TUNE_FIN_BUDGET_MS 250.0
#define TUNE_FIN_RUNS_MIN 10
#define TUNE_FIN_RUNS_MAX 100

/* Runs of each finalist in the final pass: TUNE_FIN_BUDGET_MS of kernel time shared by
 * nfin finalists of about best_ms each, within [TUNE_FIN_RUNS_MIN, TUNE_FIN_RUNS_MAX]. */
int tune_final_runs(double best_ms, int nfin);
/* The median of v[0..n-1] (v is sorted in place); 0 when n < 1. */
double tune_median(double *v, int n);
/* The interquartile mean of v[0..n-1]: the mean of the middle half once sorted (in place),
 * the median when n < 4.  As robust to stray runs as the median, and finer than the
 * timer's resolution for kernels of a few microseconds, where medians of quantized times
 * tie or jump a whole step. */
double tune_iqm(double *v, int n);

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

/* The first pass in progress: the group of checked candidates waiting to be timed. */
typedef struct tune_first_pass {
    tune_bench *b;
    const loom_template *t;
    bool verbose;
    loom_tuned *r;
    loom_tune_result *res;
    loom_kernel **kern;
    int grp[TUNE_FIRST_GROUP], ng;
    tune_anchor anchor;
    int warmup, reps;
    double *times; /* (TUNE_FIRST_GROUP + 1) * reps */
    bool broken;   /* the CUDA context broke: nothing more runs */
    tune_progress *pr;
    double t0, ms; /* the tuning's start; time spent checking and timing */
} tune_first_pass;

/* Check candidate i; when it passes, it joins the group, which is timed once full. */
void tune_fp_add(tune_first_pass *f, int i);
/* Time the waiting group (if any). */
void tune_fp_flush(tune_first_pass *f);
/* Reject x: an earlier fault broke the CUDA context. */
void tune_not_run(loom_tune_result *x);
/* The final pass: finalists res[fin[0..nfin-1]] (kernels kern[fin[f]]) timed together,
 * one run of each in turn, runs rounds after one of warm-up; each one's ms becomes the
 * interquartile mean of its runs.  On failure their ms stay and err says why. */
loom_status tune_time_finalists(tune_bench *b, const loom_template *t, const int64_t *shape,
                                loom_tune_result *res, loom_kernel **kern, const int *fin, int nfin, int runs,
                                char *err, size_t n);

/* ---------------------------------------------------------------- tune_cache.c */

/* The device part of a cache key. */
typedef struct tc_device {
    char gpu[256];
    int sm_count;
    int driver; /* cuDriverGetVersion, e.g. 13000 */
} tc_device;

/* The cache file: LOOM_TUNE_CACHE, else tune.json in the module cache's directory
 * (LOOM_CACHE_DIR, ...).  false when caching is off (LOOM_CACHE=0) or no path can be
 * named. */
bool tc_path(char *buf, size_t n);

/* The key of (template, bucket, device, loom version, candidate space): a readable
 * string.  The candidate space (every knob's name, default and candidates) enters as a
 * hash, so a template whose knobs change is tuned again. */
void tc_key(const loom_template *t, const int64_t *bucket, const tc_device *dev, char *buf,
            size_t n);

/* One tuned decision. */
typedef struct tc_record {
    int64_t config[LOOM_MAX_PARAMS];
    double ms;      /* the winner's median time */
    int ncand;      /* configs considered */
    int nvalid;     /* valid ones */
    double tune_ms; /* wall time the tuning took */
} tc_record;

/* A parsed cache file (read-only; writers replace the file, never edit it in place). */
typedef struct tc_file tc_file;

/* Read the cache file.  A missing file is an empty cache; an unreadable or corrupt one is
 * too, with the reason in warn (else warn is ""). */
tc_file *tc_open(const char *path, char *warn, size_t wn);
void tc_close(tc_file *f);
int tc_count(const tc_file *f); /* entries */
/* Look key up; the entry's config is read by t's knob names.  false when absent or when
 * the entry is malformed or lacks one of t's knobs. */
bool tc_find(const tc_file *f, const char *key, const loom_template *t, tc_record *out);

/* Add or replace the entry for key: under an exclusive flock on <path>.lock, read the
 * file again (a corrupt one is dropped, with a warning in warn), merge, write a
 * temporary file in the same directory, fsync, and rename it over the file.  So readers
 * never see a partial file, and concurrent writers lose nothing.  shape and bucket are
 * recorded for people reading the file. */
loom_status tc_store(const char *path, const char *key, const loom_template *t,
                     const int64_t *shape, const int64_t *bucket, const tc_device *dev,
                     const tc_record *rec, char *err, size_t errlen);

/* ---------------------------------------------------------------- pick.c */

/* The fastest of a few alternative ways to compute one output (an operation's stages):
 * each one a prepare, a run and an output; the outputs checked against one another on
 * the device by the error model, the alternatives timed side by side, the fastest kept and
 * its pick cached in the tuning cache beside the configs (pick.c says how).  Without a GPU
 * nothing can be timed: the caller picks on its own there. */
#define TUNE_PICK_MAX 8
#define TUNE_PICK_PLACES 8 /* the most input placements an alternative is timed on */
enum { TUNE_PICK_ROUNDS = 5, TUNE_PICK_ROUNDS_MAX = 15, TUNE_PICK_REPS = 5 };
#define TUNE_PICK_CLOSE 0.03
#define TUNE_PICK_WITHIN 0.02 /* more placements until the pick is, with confidence, this close to the best */

typedef struct tune_pick_spec {
    const char *fn;    /* the messages' prefix: "loom_ikbo_lce_prepare: auto" */
    const char *what;  /* an alternative's noun, for messages ("stage 3") and the cache's keys: "stage" */
    const char *strip; /* a failed prepare's or run's message in rt's error loses its leading "FN: " when it
                          starts with this ("loom_ikbo_lce_"; NULL: never) */
    int n;
    int64_t value[TUNE_PICK_MAX]; /* alternative i's value: what the cache stores as the pick */
    /* The cache: the key of template t at shape (t NULL: nothing cached) plus
     * "|pick=WHAT|VARIANT"; the entry is of template ENTRY (doc DOC), its config the pick's
     * value (key WHAT, default def) and each alternative's time in ns (WHAT<value>_ns; 0:
     * dropped). */
    const loom_template *t;
    const int64_t *shape; /* t's shape vector */
    const char *variant;
    const char *entry, *doc;
    int64_t def;
    /* The outputs: out_bytes each, compared as nelem elements of dtype; an element is off
     * when |a - b| > bound + rtol |a|. */
    size_t out_bytes;
    loom_dtype dtype;
    int64_t nelem;
    double rtol;
    /* The alternatives, through ctx; a failure leaves its reason in rt's error. */
    void *ctx;
    loom_status (*setup)(void *ctx);                        /* once, before they are timed: inputs (NULL: none) */
    loom_status (*prepare)(void *ctx, int i);               /* on failure nothing is left to release */
    loom_status (*run)(void *ctx, int i, loom_buffer *out); /* one run, on the inputs, into out */
    void (*release)(void *ctx, int i);                      /* a prepared alternative not picked */
    /* Input placements: the same inputs in up to `places` sets of buffers allocated apart
     * (setup makes set 0, current after it; place(ctx, j) makes set j the one run reads,
     * making it on its first use, and fails where there is no room for it).  An
     * alternative's time is the mean over the sets of its median there: where an
     * operation's speed depends on where its caller's buffers lie, the pick is the fastest
     * in expectation, not on one draw.  The first `places_first` sets are timed together
     * (0: all `places`); then one set more at a time while the pick is not settled
     * (pick.c, pick_settled) (places 0 or 1: one set, place unused). */
    int places, places_first;
    loom_status (*place)(void *ctx, int j);
    /* bound[nelem] (f32, zeros when it comes): each element's error bound, filled once the
     * outputs are in (NULL: zeros, the outputs compared within rtol |a| alone). */
    loom_status (*bound)(void *ctx, loom_buffer *bound);
} tune_pick_spec;

typedef struct tune_picked {
    int best;                     /* the alternative kept, prepared; -1 (untimed says why): none */
    bool cached;                  /* the pick came from the cache: nothing was timed */
    char untimed[64];             /* why nothing was timed: "LOOM_TUNE=0 and no pick cached" */
    double ms[TUNE_PICK_MAX];     /* each one's time (ms; cached: as stored, 0 for dropped) */
    char why[TUNE_PICK_MAX][256]; /* timed: why it was dropped ("" while it is in) */
    int rounds;                   /* timed: the rounds taken */
    int places;                   /* timed: the input placements each alternative was timed on */
    double margin;                /* timed: the second fastest's time over the fastest's (0: fewer than two) */
    char note[512];               /* timed: why a cached pick was not used ("": none was cached) */
    char store_err[1024];         /* timed: why the pick could not be cached ("": it was) */
} tune_picked;

/* The pick at s's shape into r: LOOM_OK with r->best prepared (the others released), or
 * LOOM_OK with r->best -1 when LOOM_TUNE=0 and nothing is cached; else a failure with the
 * message in rt's error ("FN: no two stages agree ...") and nothing left prepared. */
loom_status tune_pick(loom_runtime *rt, const tune_pick_spec *s, tune_picked *r);
/* Whether a pick is settled, from d[j] = (the second fastest's time / the fastest's) - 1
 * on each of n placements (the two timed side by side there): the mean of the d's less t
 * standard errors (Student's t for n - 1 degrees of freedom, one-sided 97.5%) is above
 * -TUNE_PICK_WITHIN, so the fastest is, with confidence, no more than that slower than the
 * second over placements at large.  false for n < 2. */
bool tune_pick_settled(const double *d, int n);
/* The alternatives as text: " stage 0 0.412 ms, stage 2 dropped (why), stage 4 0.344 ms
 * (picked)", and for a timed pick "; margin 3.1% to the next fastest, 5 interleaved
 * rounds of 5 runs". */
void tune_pick_describe(const tune_pick_spec *s, const tune_picked *r, char *buf, size_t n);

#endif /* LOOM_TUNE_H */
