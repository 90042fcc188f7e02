/*
 * ikbo_fa_units.h -- the IKBO flash attention's work plan: a mapping made into units a
 * program takes.  Plain C11 over the C library alone, because two programs compile it:
 * loom (templates/ikbo_fa_plan.c, through templates/ikbo_fa.h) and every file `loomc aot`
 * writes for ikbo_fa (aot/aot.c copies this text in), so that the generated launcher
 * plans exactly as loom does.
 *
 * The plan turns a mapping into units: two 64-row blocks of query rows of one user.  A
 * run of consecutive candidates of one user (all of a user's, when the mapping is sorted)
 * is a run of consecutive query rows, cut into 64-row blocks (the last one short); a
 * user's blocks are then paired, in order, so the two consumer warp groups of a program
 * share every K/V tile.  Any order of the mapping gives the same pairs of full blocks when
 * nseed is a multiple of 64; a shuffled mapping only cuts runs into more, shorter blocks
 * when it is not.  Users with the most keys go first, so that the longest units do not
 * end the launch alone (the schedules take units in order).
 */
#ifndef LOOM_IKBO_FA_UNITS_H
#define LOOM_IKBO_FA_UNITS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Query rows a consumer warp group owns: one m64 wgmma block. */
#define FA_BLOCK 64
/* int32 fields of a plan unit: user, first row and rows of block 0, of block 1 (rows 0:
 * no block), three unused. */
enum { FA_U_USER, FA_U_Q0, FA_U_N0, FA_U_Q1, FA_U_N1, FA_UNIT_FIELDS = 8 };

/* The most units a plan of B candidates of nseed query rows can hold. */
static inline int64_t fa_units_max(int64_t B, int64_t nseed) { return B * ((nseed + FA_BLOCK - 1) / FA_BLOCK); }

/* A block of query rows of one user. */
typedef struct fa_block {
    int32_t user, q0, rows;
} fa_block;

/* The plan of mapping map [B] (users in [0, U)) with lengths seq_len [U] (each 0 to S; NULL:
 * S each) into units [fa_units_max(B, nseed)][FA_UNIT_FIELDS] (rows past the plan's are
 * zero).  Returns the units, or -1 with a message in err naming the first bad entry (or
 * saying that host memory ran out). */
static inline int64_t fa_units(int64_t B, int64_t U, int64_t S, int64_t nseed, const int32_t *map,
                               const int32_t *seq_len, int32_t *units, char *err, size_t errlen)
{
    int64_t ns = nseed;
    for (int64_t b = 0; b < B; b++)
        if (map[b] < 0 || map[b] >= U) {
            snprintf(err, errlen, "cand_to_user[%lld] = %d is not a user (0 to %lld)", (long long)b, map[b],
                     (long long)U - 1);
            return -1;
        }
    for (int64_t u = 0; seq_len && u < U; u++)
        if (seq_len[u] < 0 || seq_len[u] > S) {
            snprintf(err, errlen, "seq_len[%lld] = %d is outside 0 to S = %lld", (long long)u, seq_len[u],
                     (long long)S);
            return -1;
        }
    int64_t maxb = fa_units_max(B, nseed);
    fa_block *blk = malloc((size_t)maxb * sizeof *blk), *byuser = malloc((size_t)maxb * sizeof *byuser);
    int64_t *first = calloc((size_t)U + 1, sizeof *first), *order = malloc((size_t)U * sizeof *order);
    int64_t *next = calloc((size_t)U, sizeof *next);
    if (!blk || !first || !order || !byuser || !next) {
        free(blk), free(first), free(order), free(byuser), free(next);
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
            blk[nb++] = (fa_block){map[b], (int32_t)r, (int32_t)(e * ns - r < FA_BLOCK ? e * ns - r : FA_BLOCK)};
        b = e;
    }
    /* grouped by user (a counting sort keeps each user's blocks in row order) */
    for (int64_t i = 0; i < nb; i++)
        first[blk[i].user + 1]++;
    for (int64_t u = 0; u < U; u++)
        first[u + 1] += first[u];
    for (int64_t i = 0; i < nb; i++)
        byuser[first[blk[i].user] + next[blk[i].user]++] = blk[i];
    /* users by length, longest first (stable: ties by user; insertion sort: U is small
     * next to B) */
    for (int64_t u = 0; u < U; u++)
        order[u] = u;
    for (int64_t i = 1; i < U; i++) {
        int64_t x = order[i], j = i, lx = seq_len ? seq_len[x] : S;
        while (j > 0 && (seq_len ? seq_len[order[j - 1]] : S) < lx)
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

#endif
