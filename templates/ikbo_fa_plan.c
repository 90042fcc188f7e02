/*
 * ikbo_fa_plan.c -- the IKBO flash attention's work plan, and its CPU reference.
 *
 * The plan turns a mapping into units a program can take: two 64-row blocks of query
 * rows of one user.  A run of consecutive candidates of one user (all of a user's, when
 * the mapping is sorted) is a run of consecutive query rows, cut into 64-row blocks (the
 * last one short); a user's blocks are then paired, in order, so the two consumer warp
 * groups of a program share every K/V tile.  Any order of the mapping gives the same
 * pairs of full blocks when nseed is a multiple of 64; a shuffled mapping only cuts runs
 * into more, shorter blocks when it is not.  Users with the most keys go first, so that
 * the longest units do not end the launch alone (the schedules take units in order).
 */
#include "ikbo_fa.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A block of query rows of one user. */
typedef struct block {
    int32_t user, q0, rows;
} block;

static int64_t len_of(const fa_spec *s, const int32_t *seq_len, int64_t u)
{
    return seq_len ? seq_len[u] : s->S;
}

int64_t fa_plan(const fa_spec *s, const int32_t *map, const int32_t *seq_len, int32_t *units, char *err,
                size_t errlen)
{
    int64_t B = s->B, U = s->U, ns = s->nseed;
    for (int64_t b = 0; b < B; b++)
        if (map[b] < 0 || map[b] >= U) {
            snprintf(err, errlen, "cand_to_user[%lld] = %d is not a user (0 to %lld)", (long long)b, map[b],
                     (long long)U - 1);
            return -1;
        }
    for (int64_t u = 0; seq_len && u < U; u++)
        if (seq_len[u] < 0 || seq_len[u] > s->S) {
            snprintf(err, errlen, "seq_len[%lld] = %d is outside 0 to S = %lld", (long long)u, seq_len[u],
                     (long long)s->S);
            return -1;
        }
    int64_t maxb = fa_max_units(s);
    block *blk = malloc((size_t)maxb * sizeof *blk);
    int64_t *first = calloc((size_t)U + 1, sizeof *first), *order = malloc((size_t)U * sizeof *order);
    block *byuser = malloc((size_t)maxb * sizeof *byuser);
    if (!blk || !first || !order || !byuser) {
        free(blk), free(first), free(order), free(byuser);
        snprintf(err, errlen, "out of host memory for the plan of %lld candidates", (long long)B);
        return -1;
    }
    /* runs of consecutive candidates of one user, cut into blocks */
    int64_t nb = 0;
    for (int64_t b = 0; b < B;) {
        int64_t e = b + 1;
        while (e < B && map[e] == map[b])
            e++;
        for (int64_t r = b * ns; r < e * ns; r += FA_BLOCK)
            blk[nb++] = (block){map[b], (int32_t)r, (int32_t)(e * ns - r < FA_BLOCK ? e * ns - r : FA_BLOCK)};
        b = e;
    }
    /* grouped by user (a counting sort keeps each user's blocks in row order) */
    for (int64_t i = 0; i < nb; i++)
        first[blk[i].user + 1]++;
    for (int64_t u = 0; u < U; u++)
        first[u + 1] += first[u];
    int64_t *next = calloc((size_t)U, sizeof *next);
    if (!next) {
        free(blk), free(first), free(order), free(byuser);
        snprintf(err, errlen, "out of host memory for the plan of %lld candidates", (long long)B);
        return -1;
    }
    for (int64_t i = 0; i < nb; i++)
        byuser[first[blk[i].user] + next[blk[i].user]++] = blk[i];
    /* users by length, longest first (stable: ties by user) */
    for (int64_t u = 0; u < U; u++)
        order[u] = u;
    for (int64_t i = 1; i < U; i++) { /* insertion sort: U is small next to B */
        int64_t x = order[i], j = i;
        while (j > 0 && len_of(s, seq_len, order[j - 1]) < len_of(s, seq_len, x))
            order[j] = order[j - 1], j--;
        order[j] = x;
    }
    int64_t n = 0;
    for (int64_t oi = 0; oi < U; oi++) {
        int64_t u = order[oi];
        for (int64_t i = first[u]; i < first[u + 1]; i += 2) {
            int32_t *e = units + n++ * FA_UNIT_FIELDS;
            memset(e, 0, FA_UNIT_FIELDS * sizeof *e);
            e[FA_U_USER] = (int32_t)u;
            e[FA_U_Q0] = byuser[i].q0;
            e[FA_U_N0] = byuser[i].rows;
            /* an odd block's partner: the same rows again, none of them stored */
            e[FA_U_Q1] = i + 1 < first[u + 1] ? byuser[i + 1].q0 : byuser[i].q0;
            e[FA_U_N1] = i + 1 < first[u + 1] ? byuser[i + 1].rows : 0;
        }
    }
    for (int64_t i = n; i < maxb; i++) /* the rest of the tensor: never read, but defined */
        memset(units + i * FA_UNIT_FIELDS, 0, FA_UNIT_FIELDS * sizeof *units);
    free(blk), free(first), free(order), free(byuser), free(next);
    return n;
}

void fa_reference(const fa_spec *s, const void *q, const void *k, const void *v, const int32_t *map,
                  const int32_t *seq_len, void *out)
{
    int64_t H = s->H, D = s->D, S = s->S;
    double scale = 1.0 / sqrt((double)D);
    double *p = malloc((size_t)S * sizeof *p), *o = malloc((size_t)D * sizeof *o);
    if (!p || !o) {
        free(p), free(o);
        return;
    }
    for (int64_t r = 0; r < fa_rows(s); r++) {
        int64_t u = map[r / s->nseed], len = len_of(s, seq_len, u);
        for (int64_t h = 0; h < H; h++) {
            const int64_t qo = (r * H + h) * D;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < len; j++) {
                int64_t ko = ((u * S + j) * H + h) * D;
                double d = 0;
                for (int64_t x = 0; x < D; x++)
                    d += tpl_get(q, s->dt, qo + x) * tpl_get(k, s->dt, ko + x);
                p[j] = d * scale;
                mx = p[j] > mx ? p[j] : mx;
            }
            for (int64_t x = 0; x < D; x++)
                o[x] = 0;
            for (int64_t j = 0; j < len; j++) {
                p[j] = exp(p[j] - mx);
                sum += p[j];
                int64_t vo = ((u * S + j) * H + h) * D;
                for (int64_t x = 0; x < D; x++)
                    o[x] += p[j] * tpl_get(v, s->dt, vo + x);
            }
            for (int64_t x = 0; x < D; x++)
                tpl_set(out, s->dt, qo + x, len ? o[x] / sum : 0);
        }
    }
    free(p), free(o);
}
