/*
 * pick.c -- the fastest of a few alternatives (tune_pick, tune.h): an operation that can
 * compute one output several ways (the IKBO LCE's stages, ops/ikbo_lce_auto.c) gives each
 * way as a prepare, a run and an output, and gets back the one that is fastest at the
 * shape, prepared, with the others released.  It knows no operation by name.
 *
 *   1. Cache.  The pick is an entry of the tuning cache (tune_cache.c; the file's format is
 *      the configs'): under the key of the template whose shape it is at (tc_key) plus
 *      "|pick=WHAT|VARIANT", an entry of template ENTRY whose config holds the pick's value
 *      (key WHAT) and each alternative's time in ns (WHAT<value>_ns; 0: dropped).  A hit
 *      whose value is still an alternative and prepares here is kept, and nothing is timed;
 *      LOOM_TUNE_FORCE=1 times again; LOOM_TUNE=0 times nothing (a cached pick still
 *      serves).
 *   2. Runs.  The caller's setup (its inputs), then each alternative prepared, given an
 *      output of its own poisoned with 0xff, and run once.  One that fails is dropped with
 *      the reason.
 *   3. Check.  The outputs are compared pairwise on the device by the error model: the
 *      comparison kernel of check.c with the caller's bound per element (and an rtol
 *      part), folded to two numbers a pair.  The largest group agreeing with one member
 *      stays, ties to the earlier alternative; the others are dropped with the count and
 *      size of their differences.  A lone survivor of several is no evidence, so the pick
 *      fails.
 *   4. Time.  TUNE_PICK_ROUNDS rounds, each a loom_time_work of every alternative in turn
 *      (TUNE_PICK_REPS runs after an L2 flush each, median), so that each one's time (the
 *      median of its rounds') is taken beside the others': the clock drifts by up to 13%
 *      under load (docs/tuning.md), more than some alternatives differ.  While the two
 *      fastest are within TUNE_PICK_CLOSE, more rounds, up to TUNE_PICK_ROUNDS_MAX.  With
 *      several input placements (spec.places), a round times every alternative on each
 *      of the first spec.places_first placements, and an alternative's time is the mean
 *      over the placements of its median there (the IKBO LCE's stages run up to 25%
 *      apart depending on where E_cand lies, bench/RESULTS.md, sessions 22 and 27); then
 *      one placement more at a time, as many rounds each, while the pick is not settled
 *      (tune_pick_settled: the fastest, with confidence, within TUNE_PICK_WITHIN of the
 *      second), up to spec.places.
 *   5. The fastest is kept, the others released, and the pick stored.
 *
 * Prefix: tune_pick (pick_ for this file's own).
 */
#include "../util/util.h"
#include "tpl.h"
#include "tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The message of a failed prepare or run, without its leading "FN: " when FN starts with
 * the spec's strip prefix. */
static void pick_why(const tune_pick_spec *s, loom_runtime *rt, char *why, size_t n)
{
    const char *e = loom_runtime_error(rt), *c = strstr(e, ": ");
    size_t np = s->strip ? strlen(s->strip) : 0;
    snprintf(why, n, "%s", np && !strncmp(e, s->strip, np) && c ? c + 2 : e);
}

/* ---------------------------------------------------------------- the cache */

typedef struct pick_cache {
    bool on; /* a GPU, the template and a cache file */
    char path[4096], key[3072];
    loom_template pt; /* the entry's layout: the template's shape, the pick and the times as its config */
    char keys[1 + TUNE_PICK_MAX][64];
    tc_device dev;
} pick_cache;

static void cache_open(loom_runtime *rt, const tune_pick_spec *s, pick_cache *c)
{
    memset(c, 0, sizeof *c);
    rt_gpu *g = rt_runtime_gpu(rt);
    if (!g || !s->t || !tc_path(c->path, sizeof c->path))
        return;
    const rt_gpu_props *pr = rt_gpu_properties(g);
    snprintf(c->dev.gpu, sizeof c->dev.gpu, "%s", pr->name);
    c->dev.sm_count = pr->sm_count;
    c->dev.driver = pr->driver_version;
    char k[2048];
    tc_key(s->t, s->shape, &c->dev, k, sizeof k);
    snprintf(c->key, sizeof c->key, "%s|pick=%s|%s", k, s->what, s->variant);
    loom_template *pt = &c->pt;
    pt->name = s->entry;
    pt->doc = s->doc;
    pt->nshape = s->t->nshape;
    memcpy(pt->shape, s->t->shape, sizeof pt->shape);
    pt->nconfig = 1 + s->n;
    snprintf(c->keys[0], sizeof c->keys[0], "%s", s->what);
    pt->config[0] = (loom_param){.key = c->keys[0], .def = s->def};
    for (int i = 0; i < s->n; i++) {
        snprintf(c->keys[1 + i], sizeof c->keys[1 + i], "%s%lld_ns", s->what, (long long)s->value[i]);
        pt->config[1 + i] = (loom_param){.key = c->keys[1 + i], .def = 0};
    }
    c->on = true;
}

/* The cached pick, prepared, into r; false (r->note says why when there was one) when there
 * is none or it fails here. */
static bool cache_pick(loom_runtime *rt, const tune_pick_spec *s, const pick_cache *c, tune_picked *r)
{
    char warn[512];
    tc_file *f = tc_open(c->path, warn, sizeof warn);
    tc_record rec;
    bool hit = f && tc_find(f, c->key, &c->pt, &rec);
    tc_close(f);
    if (!hit)
        return false;
    int best = -1;
    for (int i = 0; i < s->n && best < 0; i++)
        if (rec.config[0] == s->value[i])
            best = i;
    if (best < 0) {
        snprintf(r->note, sizeof r->note, "the cached pick, %s %lld, is not a candidate: timed again", s->what,
                 (long long)rec.config[0]);
        return false;
    }
    if (s->prepare(s->ctx, best) != LOOM_OK) {
        char e[300];
        pick_why(s, rt, e, sizeof e);
        snprintf(r->note, sizeof r->note, "the cached pick, %s %lld, fails here (%s): timed again", s->what,
                 (long long)rec.config[0], e);
        return false;
    }
    r->best = best;
    r->cached = true;
    for (int i = 0; i < s->n; i++)
        r->ms[i] = rec.config[1 + i] > 0 ? (double)rec.config[1 + i] * 1e-6 : 0;
    return true;
}

static void cache_store(const tune_pick_spec *s, const pick_cache *c, tune_picked *r, double tune_ms)
{
    if (!c->on)
        return;
    tc_record rec;
    memset(&rec, 0, sizeof rec);
    rec.config[0] = s->value[r->best];
    for (int i = 0; i < s->n; i++) {
        double ns = r->ms[i] * 1e6 + 0.5; /* (the cache reads int32: past 2.1 s, 2.1 s) */
        rec.config[1 + i] = r->why[i][0] ? 0 : ns < 1 ? 1 : ns < INT32_MAX ? (int64_t)ns : INT32_MAX;
        rec.ncand++;
        rec.nvalid += !r->why[i][0];
    }
    rec.ms = r->ms[r->best];
    rec.tune_ms = tune_ms;
    if (tc_store(c->path, c->key, &c->pt, s->shape, s->shape, &c->dev, &rec, r->store_err, sizeof r->store_err) ==
        LOOM_OK)
        r->store_err[0] = 0;
    else if (!r->store_err[0])
        snprintf(r->store_err, sizeof r->store_err, "the cache file could not be written");
}

/* ---------------------------------------------------------------- the check */

/* The comparison of two outputs on the device by the error model: check.c's comparison
 * kernel (per TUNE_CMP_BLOCK elements: those beyond bound + rtol |a|, the largest
 * difference) and its fold to two numbers, with the caller's bound computed once. */
typedef struct pick_cmp {
    loom_kernel *k, *fold;
    int grid[3];
    loom_buffer *bad, *maxerr, *two, *bound;
} pick_cmp;

static void cmp_free(pick_cmp *c)
{
    loom_kernel_destroy(c->k);
    loom_kernel_destroy(c->fold);
    loom_buffer_destroy(c->bad);
    loom_buffer_destroy(c->maxerr);
    loom_buffer_destroy(c->two);
    loom_buffer_destroy(c->bound);
}

static loom_status cmp_make(loom_runtime *rt, const tune_pick_spec *s, pick_cmp *c)
{
    memset(c, 0, sizeof *c);
    c->grid[1] = c->grid[2] = 1;
    if (!(c->k = tune_compare_kernel(s->dtype, s->nelem, true, &c->grid[0])) ||
        !(c->fold = tune_reduce2_kernel(c->grid[0], TUNE_RED_SUM, TUNE_RED_MAX)))
        return tpl_fail(rt, LOOM_ERR_UNSUPPORTED, "outputs of %lld elements cannot be compared", (long long)s->nelem);
    loom_status st = LOOM_OK;
    if (!(c->bad = tpl_zeroed_buffer(rt, (size_t)c->grid[0] * 4, &st)) ||
        !(c->maxerr = tpl_zeroed_buffer(rt, (size_t)c->grid[0] * 4, &st)) ||
        !(c->two = tpl_zeroed_buffer(rt, 8, &st)) ||
        !(c->bound = tpl_zeroed_buffer(rt, (size_t)s->nelem * 4, &st)) ||
        (st = loom_prepare_many(rt, (loom_kernel *[]){c->k, c->fold}, 2, 0)) != LOOM_OK)
        return st;
    return s->bound ? s->bound(s->ctx, c->bound) : LOOM_OK;
}

/* Elements of a past their bound of b, and the largest difference. */
static loom_status cmp_run(loom_runtime *rt, const tune_pick_spec *s, pick_cmp *c, loom_buffer *a, loom_buffer *b,
                           double *nbad, double *worst)
{
    loom_arg x[7] = {LOOM_ARG_BUF(a), LOOM_ARG_BUF(b), LOOM_ARG_BUF(c->bound), LOOM_ARG_F32(0.0f),
                     LOOM_ARG_F32((float)s->rtol), LOOM_ARG_BUF(c->bad), LOOM_ARG_BUF(c->maxerr)};
    loom_arg f[3] = {LOOM_ARG_BUF(c->bad), LOOM_ARG_BUF(c->maxerr), LOOM_ARG_BUF(c->two)};
    static const int one[3] = {1, 1, 1};
    float two[2];
    loom_status st;
    if ((st = loom_launch(rt, c->k, c->grid, x, 7)) != LOOM_OK ||
        (st = loom_launch(rt, c->fold, one, f, 3)) != LOOM_OK ||
        (st = loom_buffer_download(c->two, two, sizeof two)) != LOOM_OK)
        return st;
    *nbad = two[0];
    *worst = two[1];
    return LOOM_OK;
}

/* Check the alternatives that ran against one another; drop those outside the largest
 * agreeing group.  A failure (the reason in rt) when the check cannot run, or several ran
 * and no two agree. */
static loom_status pick_check(loom_runtime *rt, const tune_pick_spec *s, loom_buffer *const *out, tune_picked *r)
{
    int in[TUNE_PICK_MAX], nin = 0;
    for (int i = 0; i < s->n; i++)
        if (!r->why[i][0])
            in[nin++] = i;
    if (nin < 2)
        return LOOM_OK; /* nothing to compare with */
    pick_cmp cmp;
    loom_status st = cmp_make(rt, s, &cmp);
    double nbad[TUNE_PICK_MAX][TUNE_PICK_MAX] = {{0}}, worst[TUNE_PICK_MAX][TUNE_PICK_MAX] = {{0}};
    for (int a = 0; a < nin && st == LOOM_OK; a++)
        for (int b = a + 1; b < nin && st == LOOM_OK; b++) {
            int i = in[a], j = in[b];
            st = cmp_run(rt, s, &cmp, out[i], out[j], &nbad[i][j], &worst[i][j]);
            nbad[j][i] = nbad[i][j];
            worst[j][i] = worst[i][j];
        }
    cmp_free(&cmp);
    if (st != LOOM_OK)
        return tpl_fail(rt, st, "%s: comparing the %ss' outputs: %s", s->fn, s->what, loom_runtime_error(rt));
    int ref = -1, most = 0;
    for (int a = 0; a < nin; a++) {
        int agree = 1;
        for (int b = 0; b < nin; b++)
            agree += b != a && nbad[in[a]][in[b]] == 0;
        if (agree > most)
            most = agree, ref = in[a];
    }
    if (most < 2)
        return tpl_fail(rt, LOOM_ERR_RUNTIME,
                        "%s: no two %ss agree at this shape (%s %lld vs %lld: %.0f elements past their error bound, "
                        "max |diff| %.3g): a bug in loom, please report it; pin a %s meanwhile",
                        s->fn, s->what, s->what, (long long)s->value[in[0]], (long long)s->value[in[1]],
                        nbad[in[0]][in[1]], worst[in[0]][in[1]], s->what);
    for (int a = 0; a < nin; a++) {
        int i = in[a];
        if (i != ref && nbad[i][ref] > 0)
            snprintf(r->why[i], sizeof r->why[i],
                     "its output differs from %s %lld's: %.0f elements past their error bound, max |diff| %.3g",
                     s->what, (long long)s->value[ref], nbad[i][ref], worst[i][ref]);
    }
    return LOOM_OK;
}

/* ---------------------------------------------------------------- timing */

/* The ratio of the second fastest alternative still in to the fastest (0: fewer than two). */
static double pick_margin(const tune_pick_spec *s, const tune_picked *r)
{
    double a = 0, b = 0;
    for (int i = 0; i < s->n; i++) {
        if (r->why[i][0] || !(r->ms[i] > 0))
            continue;
        if (!a || r->ms[i] < a)
            b = a, a = r->ms[i];
        else if (!b || r->ms[i] < b)
            b = r->ms[i];
    }
    return a > 0 && b > 0 ? b / a : 0;
}

typedef struct pick_work {
    const tune_pick_spec *s;
    int i;
    loom_buffer *out;
} pick_work;

static loom_status pick_run_once(void *ctx)
{
    pick_work *w = ctx;
    return w->s->run(w->s->ctx, w->i, w->out);
}

/* The input placements an alternative may be timed on (1: the spec gives no others), and
 * how many are timed from the start. */
static int pick_places(const tune_pick_spec *s)
{
    return s->places > 1 && s->place ? (s->places < TUNE_PICK_PLACES ? s->places : TUNE_PICK_PLACES) : 1;
}

static int pick_places_first(const tune_pick_spec *s)
{
    int n = pick_places(s);
    return n > 1 && s->places_first >= 2 && s->places_first < n ? s->places_first : n;
}

typedef double pick_times[TUNE_PICK_MAX][TUNE_PICK_PLACES][TUNE_PICK_ROUNDS_MAX];

/* Round k of every alternative still in on placement j, in turn. */
static void pick_round(loom_runtime *rt, const tune_pick_spec *s, loom_buffer *out, tune_picked *r, pick_times ms,
                       int j, int k)
{
    for (int i = 0; i < s->n; i++) {
        if (r->why[i][0])
            continue;
        pick_work w = {s, i, out};
        if (loom_time_work(rt, pick_run_once, &w, k == 0 ? 1 : 0, TUNE_PICK_REPS, &ms[i][j][k]) != LOOM_OK)
            snprintf(r->why[i], sizeof r->why[i], "timing failed: %s", loom_runtime_error(rt));
    }
}

/* Each alternative's time: the mean over np placements of its median of k rounds there. */
static void pick_means(const tune_pick_spec *s, tune_picked *r, pick_times ms, int np, int k)
{
    for (int i = 0; i < s->n; i++)
        if (!r->why[i][0]) {
            double sum = 0;
            for (int j = 0; j < np; j++)
                sum += tune_median(ms[i][j], k);
            r->ms[i] = sum / np;
        }
}

/* Whether the fastest alternative (a, by the mean over np placements) is, with confidence,
 * no more than TUNE_PICK_WITHIN slower than the second (b) over placements at large.  On
 * each placement d = b / a - 1 (a and b timed side by side there); settled when the mean
 * of the d's less t standard errors (Student's t at 97.5%, one-sided) is above
 * -TUNE_PICK_WITHIN.  Where placement moves both alike, the d's agree and a few
 * placements settle it; where it moves one alternative on some placements and not the
 * other (bench/RESULTS.md, sessions 22 and 27), they scatter and more placements are
 * timed. */
static bool pick_settled(const tune_pick_spec *s, const tune_picked *r, pick_times ms, int np, int k)
{
    int a = -1, b = -1;
    for (int i = 0; i < s->n; i++) {
        if (r->why[i][0])
            continue;
        if (a < 0 || r->ms[i] < r->ms[a])
            b = a, a = i;
        else if (b < 0 || r->ms[i] < r->ms[b])
            b = i;
    }
    if (b < 0)
        return true;
    double d[TUNE_PICK_PLACES];
    for (int j = 0; j < np; j++)
        d[j] = tune_median(ms[b][j], k) / tune_median(ms[a][j], k) - 1;
    return tune_pick_settled(d, np);
}

bool tune_pick_settled(const double *d, int n)
{
    /* Student's t, one-sided 97.5%, for n - 1 = 1 .. 7 degrees of freedom (then 2.31) */
    static const double t975[8] = {0, 12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36};
    if (n < 2)
        return false;
    double mean = 0, var = 0;
    for (int j = 0; j < n; j++)
        mean += d[j] / n;
    for (int j = 0; j < n; j++)
        var += (d[j] - mean) * (d[j] - mean) / (n - 1);
    return mean - (n - 1 < 8 ? t975[n - 1] : 2.31) * sqrt(var / n) > -TUNE_PICK_WITHIN;
}

/* Time the alternatives still in, side by side: rounds of one loom_time_work each in turn,
 * each one's time the median of its rounds'; TUNE_PICK_ROUNDS of them, and more (up to
 * TUNE_PICK_ROUNDS_MAX) while the two fastest are within TUNE_PICK_CLOSE.  With
 * placements: a round times every alternative on each of the first sets, then, while the
 * pick is not settled, one more set at a time takes as many rounds. */
static void pick_time(loom_runtime *rt, const tune_pick_spec *s, loom_buffer *out, tune_picked *r)
{
    pick_times ms; /* 7.5 KiB */
    int most = pick_places(s), np = pick_places_first(s);
    for (int j = 1; j < np; j++) /* the first sets (fewer where there is no room for them) */
        if (s->place(s->ctx, j) != LOOM_OK)
            np = most = j;
    if (most > 1)
        s->place(s->ctx, 0);
    int k = 0;
    for (; k < TUNE_PICK_ROUNDS_MAX; k++) {
        if (k >= TUNE_PICK_ROUNDS) {
            double m = pick_margin(s, r);
            if (!m || m > 1 + TUNE_PICK_CLOSE)
                break;
        }
        for (int j = 0; j < np; j++) {
            if (np > 1)
                s->place(s->ctx, j);
            pick_round(rt, s, out, r, ms, j, k);
        }
        if (k + 1 >= TUNE_PICK_ROUNDS)
            pick_means(s, r, ms, np, k + 1);
    }
    while (np < most && !pick_settled(s, r, ms, np, k) && s->place(s->ctx, np) == LOOM_OK) {
        for (int q = 0; q < k; q++)
            pick_round(rt, s, out, r, ms, np, q);
        pick_means(s, r, ms, ++np, k);
    }
    if (most > 1) /* the caller's inputs as setup left them */
        s->place(s->ctx, 0);
    r->rounds = k, r->places = np;
}

/* ---------------------------------------------------------------- the pick */

/* Prepare each alternative, give it an output poisoned with 0xff and run it once; a
 * failure drops it with the reason. */
static void pick_first_runs(loom_runtime *rt, const tune_pick_spec *s, bool *prepared, loom_buffer **out,
                            tune_picked *r)
{
    for (int i = 0; i < s->n; i++) {
        loom_status st = s->prepare(s->ctx, i);
        prepared[i] = st == LOOM_OK;
        if (st == LOOM_OK && !(out[i] = tpl_zeroed_buffer(rt, s->out_bytes, &st))) {
            snprintf(r->why[i], sizeof r->why[i], "its output: %s", loom_runtime_error(rt));
            continue;
        }
        if (st == LOOM_OK && (st = loom_buffer_fill(out[i], 0xff)) == LOOM_OK)
            st = s->run(s->ctx, i, out[i]);
        if (st != LOOM_OK) {
            pick_why(s, rt, r->why[i], sizeof r->why[i]);
            if (!r->why[i][0]) /* (never empty: an empty reason would keep it in) */
                snprintf(r->why[i], sizeof r->why[i], "status %d", (int)st);
        }
    }
}

/* Every alternative run, checked, timed; the fastest kept. */
static loom_status pick_timed(loom_runtime *rt, const tune_pick_spec *s, const pick_cache *cache, tune_picked *r)
{
    double t0 = util_now_ms();
    loom_status st = s->setup ? s->setup(s->ctx) : LOOM_OK;
    if (st != LOOM_OK)
        return tpl_fail(rt, st, "%s: making inputs to time the %ss: %s", s->fn, s->what, loom_runtime_error(rt));
    bool prepared[TUNE_PICK_MAX];
    loom_buffer *out[TUNE_PICK_MAX] = {NULL};
    pick_first_runs(rt, s, prepared, out, r);
    if ((st = pick_check(rt, s, out, r)) == LOOM_OK) {
        loom_buffer *o = NULL;
        for (int i = 0; i < s->n; i++) /* one output for the timed runs; the others go */
            if (!r->why[i][0] && !o)
                o = out[i], out[i] = NULL;
        for (int i = 0; i < s->n; i++) {
            loom_buffer_destroy(out[i]);
            out[i] = NULL;
        }
        pick_time(rt, s, o, r);
        loom_buffer_destroy(o);
        for (int i = 0; i < s->n; i++)
            if (!r->why[i][0] && (r->best < 0 || r->ms[i] < r->ms[r->best]))
                r->best = i;
        if (r->best < 0) {
            char list[1200] = "";
            size_t n = 0;
            for (int i = 0; i < s->n && n < sizeof list; i++)
                n += (size_t)snprintf(list + n, sizeof list - n, "; %s %lld: %s", s->what, (long long)s->value[i],
                                      r->why[i]);
            st = tpl_fail(rt, LOOM_ERR_INVALID, "%s: no %s ran at this shape%s", s->fn, s->what, list);
        }
    }
    for (int i = 0; i < s->n; i++) {
        loom_buffer_destroy(out[i]);
        if (i != r->best && prepared[i])
            s->release(s->ctx, i);
    }
    if (r->best < 0)
        return st;
    r->margin = pick_margin(s, r);
    cache_store(s, cache, r, util_now_ms() - t0);
    return LOOM_OK;
}

loom_status tune_pick(loom_runtime *rt, const tune_pick_spec *s, tune_picked *r)
{
    memset(r, 0, sizeof *r);
    r->best = -1;
    if (s->n < 1 || s->n > TUNE_PICK_MAX)
        return tpl_fail(rt, LOOM_ERR_INVALID, "%s: %d alternatives; there must be 1 to %d", s->fn, s->n,
                        TUNE_PICK_MAX);
    pick_cache cache;
    cache_open(rt, s, &cache);
    if (cache.on && !util_env_on("LOOM_TUNE_FORCE") && cache_pick(rt, s, &cache, r))
        return LOOM_OK;
    if (!util_env_switch("LOOM_TUNE", true)) {
        snprintf(r->untimed, sizeof r->untimed, "LOOM_TUNE=0 and no pick cached");
        return LOOM_OK;
    }
    return pick_timed(rt, s, &cache, r);
}

void tune_pick_describe(const tune_pick_spec *s, const tune_picked *r, char *buf, size_t n)
{
    size_t w = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n && w < n; i++) {
        const char *sep = i ? "," : "";
        long long v = (long long)s->value[i];
        const char *picked = i == r->best ? " (picked)" : "";
        int c;
        if (r->cached ? r->ms[i] > 0 : !r->why[i][0])
            c = snprintf(buf + w, n - w, "%s %s %lld %.3f ms%s", sep, s->what, v, r->ms[i], picked);
        else if (r->cached) /* (the cache keeps no reasons) */
            c = snprintf(buf + w, n - w, "%s %s %lld dropped", sep, s->what, v);
        else
            c = snprintf(buf + w, n - w, "%s %s %lld dropped (%s)", sep, s->what, v, r->why[i]);
        if (c < 0)
            return;
        w += (size_t)c;
    }
    if (!r->cached && r->margin > 0 && w < n) {
        int c = snprintf(buf + w, n - w, "; margin %.1f%% to the next fastest, %d interleaved rounds of %d runs",
                         100 * (r->margin - 1), r->rounds, TUNE_PICK_REPS);
        if (c > 0 && (size_t)c < n - w && r->places > 1)
            snprintf(buf + w + c, n - w - c, " on each of %d input placements (the mean of their medians%s)",
                     r->places, r->places > pick_places_first(s) ? "; more than the first while the pick was not settled" : "");
    }
}
