/*
 * report.c -- what the tuner shows its user: a progress bar while it works, and a table
 * when it is done.
 *
 * A tuning compiles every candidate, which takes seconds for a large space (docs/tuning.md
 * has measurements), so while it runs a bar on stderr, drawn only when stderr is a
 * terminal and at most every 50 ms, says how many candidates are compiled, how many are
 * checked and timed, and the best so far.  The bar is erased when the tuning ends, and
 * loom_tune_print writes the summary: a line per shape (where its config came from, how
 * many configs were considered, valid and timed, the best time, the config) with the note
 * that explains it, and, when asked, every candidate: the timed ones fastest first with
 * their ratio to the pick, the others with their verdict and its reason.  loom_tune
 * prints the table on stderr when it tuned a shape on a terminal, or with
 * LOOM_TUNE_VERBOSE=1; loomc tune prints it itself, every candidate included.
 */
#include "../util/util.h"
#include "tune.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the progress bar */

void tune_progress_draw(tune_progress *p, bool force)
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

void tune_progress_end(tune_progress *p)
{
    if (!p->on)
        return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
}

/* ---------------------------------------------------------------- the summary table */

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

static const char *source_name(loom_tune_source s)
{
    switch (s) {
    case LOOM_TUNE_TUNED: return "tuned";
    case LOOM_TUNE_CACHED: return "cached";
    case LOOM_TUNE_DEFAULT: return "default";
    case LOOM_TUNE_FELL_BACK: return "FELL BACK (not tuned)";
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
