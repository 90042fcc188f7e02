/*
 * tune.h -- internals of the autotuner (runtime/tune.c) and of its persistent cache
 * (runtime/tune_cache.c), declared here so the tests can reach them.
 *
 * The public side is loom_tune() in include/loom.h, section 8.  tune.c enumerates a
 * template's candidate configs, compiles them on a thread pool, checks each against a
 * reference with a comparison kernel built in loom's own DSL, and times them.
 * tune_cache.c keeps the winners in one JSON file (cJSON) shared by every process on
 * the machine.
 *
 * Prefixes: tune_ (tune.c), tc_ (tune_cache.c).
 */
#ifndef LOOM_TUNE_H
#define LOOM_TUNE_H

#include "loom.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- tune.c */

/* Every combination of t's config candidates at shape, the valid ones first in cost
 * order (enumeration order among equal costs), then the invalid ones with their
 * reasons.  *out is malloc'ed; returns the count, or -1 when out of memory.  *nvalid
 * receives the number of valid ones. */
int tune_candidates(const loom_template *t, const int64_t *shape, loom_tune_result **out,
                    int *nvalid);

/* The first pass: each candidate, as soon as it is compiled and checked, joins a group of
 * at most TUNE_FIRST_GROUP (timed when full, or when no other compiled candidate is
 * waiting), while the others compile.  A group runs TUNE_FIRST_WARMUP + TUNE_FIRST_REPS
 * rounds (opts.warmup, opts.reps), each one run of the anchor (the first config timed)
 * and of every member in turn; a member's first-pass time is the anchor's first time
 * times the ratio of their interquartile means. */
#define TUNE_FIRST_WARMUP 1
#define TUNE_FIRST_REPS 5
#define TUNE_FIRST_GROUP 7

/* The finalists: the fastest TUNE_FIN_MIN of the first pass, and those after them within
 * TUNE_FIN_MARGIN of the fastest, at most TUNE_FIN_MAX.  They are timed again together,
 * one run of each in turn, tune_final_runs() runs each, and the best interquartile mean
 * wins. */
#define TUNE_FIN_MIN 3
#define TUNE_FIN_MAX 8
#define TUNE_FIN_MARGIN 0.10
#define TUNE_FIN_BUDGET_MS 250.0 /* of kernel time, over all finalists */
#define TUNE_FIN_RUNS_MIN 10
#define TUNE_FIN_RUNS_MAX 100

/* The finalists among n candidates whose first-pass times are ms[i] (0: not timed):
 * their indices into fin[TUNE_FIN_MAX], fastest first (the lower index first among
 * equal times); returns how many. */
int tune_finalists(const double *ms, int n, int *fin);
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

/* The kernel that compares an output with its reference on the device: arguments
 * got[n] and ref[n] of dtype dt, atol and rtol (f32 scalars), then bad[grid] and
 * maxerr[grid] (f32): per program of TUNE_CMP_BLOCK elements, the number of elements
 * with |got - ref| > atol + rtol * |ref| (NaN on both sides passes) and the largest
 * |got - ref| (infinity for a NaN on one side only).  *grid0 receives the grid size. */
#define TUNE_CMP_BLOCK 2048
loom_kernel *tune_compare_kernel(loom_dtype dt, int64_t n, int *grid0);

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

#endif /* LOOM_TUNE_H */
