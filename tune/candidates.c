/*
 * candidates.c -- which configs the tuner tries, in which order, and which of them it
 * times a second time.
 *
 * A template's knobs each list their candidate values, and the candidates are every
 * combination of them (the last knob varying fastest; at most TUNE_MAX_COMBOS, a bound
 * no template comes near).  The tuner knows no template by name: the template's valid()
 * rejects the combinations that cannot serve the shape, each with a reason the summary
 * table shows, and its cost model, when it has one, ranks the valid ones.  The order
 * matters twice: a max_configs cut keeps the front of the list, and the compile pool
 * works from the front, so the promising configs are checked and timed first.  Equal
 * costs keep the enumeration order, so the list, and with it the tuning, is the same from
 * run to run.  The untuned config (a template's heuristic) leads the list where it is
 * valid: it is always timed and is the reference, so no cut loses it.
 *
 * The cost model also prunes (tune_prune): past the first TUNE_PRUNE_KEEP candidates, those
 * the model puts at more than LOOM_TUNE_PRUNE times the best estimate are skipped before
 * anything compiles them.  The ratio is the model's error bound: a config it rates that
 * much slower than the best has not been seen to win.
 *
 * After the first pass, tune_finalists picks the candidates worth timing again, at length
 * and side by side: the fastest few, and any others close enough to the fastest that the
 * first pass's few runs could have ranked them wrong.
 */
#include "tune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TUNE_MAX_COMBOS 65536

/* ---------------------------------------------------------------- the candidates */

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
    /* one more: the untuned config (the template's heuristic, from the shape) where it is
     * none of the combinations: a knob it sets from the shape (gemm's BN2 and wide) lists
     * no candidates, and the tuner must not lose what would run untuned */
    loom_tune_result *r = calloc((size_t)total + 1, sizeof *r);
    ranked *rk = calloc((size_t)total + 1, sizeof *rk);
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
    }
    int64_t untuned = -1; /* its index */
    if (t->heuristic) {
        loom_template_untuned_config(t, shape, r[total].config);
        for (int64_t c = 0; c < total && untuned < 0; c++)
            untuned = !memcmp(r[c].config, r[total].config, sizeof r[c].config) ? c : -1;
        if (untuned < 0)
            untuned = total++;
    }
    for (int64_t c = 0; c < total; c++) {
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
    /* the untuned config first where it is valid: always timed (a max_configs cut or the
     * pruning never drops it) and the reference the others are checked against, so a
     * tuned config is never one the tuner saw run slower than the untuned one */
    for (int64_t c = 1; c < total && untuned >= 0 && r[untuned].verdict != LOOM_TUNE_INVALID; c++)
        if (rk[c].idx == untuned) {
            ranked u = rk[c];
            memmove(rk + 1, rk, (size_t)c * sizeof *rk);
            rk[0] = u;
            break;
        }
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

/* ---------------------------------------------------------------- pruning by the cost model */

int tune_prune(loom_tune_result *res, int ntry, double ratio, int keep)
{
    /* the best estimate: the first's, or the second's where the first is the untuned config
     * put ahead of the cost order */
    double best = ntry > 1 && res[1].cost > 0 && res[1].cost < res[0].cost ? res[1].cost : res[0].cost;
    if (!(ratio > 1) || ntry <= keep || !(best > 0))
        return ntry;
    int n = keep > 0 ? keep : 1;
    while (n < ntry && res[n].cost <= best * ratio)
        n++;
    for (int i = n; i < ntry; i++) {
        res[i].verdict = LOOM_TUNE_SKIPPED;
        snprintf(res[i].reason, sizeof res[i].reason,
                 "pruned: the cost model puts it at x%.2f the best estimate (more than x%.2f), so it cannot win",
                 res[i].cost / best, ratio);
    }
    return n;
}
