/*
 * ikbo_fa_registry.c -- the IKBO flash attention as a registry template (what `loomc tune
 * ikbo_fa` tunes and `loomc check` runs): shape and config vectors as specs, the cost
 * model, inputs (a mapping and its plan) and the CPU reference.  The kernel is built in
 * templates/ikbo_fa.c.
 */
#include "ikbo_fa.h"
#include "ikbo_lce.h" /* ik_mapping: the check inputs' mapping */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { S_B, S_U, S_S, S_H, S_D, S_NSEED, S_DTYPE, S_VARLEN, S_SHUFFLE };
enum { C_BN, C_STAGES, C_CTAS, C_SCHED, C_TURNS, C_OVERLAP, C_TMASTORE, C_XUNIT };
/* The kernel's arguments (templates/ikbo_fa.h). */
enum { A_ROWS, A_U, A_Q, A_K, A_V, A_PLAN, A_LENS, A_CLAIMS, A_UNITS, A_OUT }; /* fa_build's */

fa_spec fa_spec_of(const int64_t *sh, const int64_t *cf)
{
    return (fa_spec){sh[S_B], sh[S_U], sh[S_S], sh[S_H], sh[S_D], sh[S_NSEED], (loom_dtype)sh[S_DTYPE],
                     (int)sh[S_VARLEN], (int)cf[C_BN], (int)cf[C_STAGES], (int)cf[C_CTAS], (int)cf[C_SCHED],
                     (int)cf[C_TURNS], (int)cf[C_OVERLAP], (int)cf[C_TMASTORE], (int)cf[C_XUNIT]};
}

loom_ikbo_fa_config fa_config_of(const int64_t *cf)
{
    return (loom_ikbo_fa_config){(int)cf[C_BN],    (int)cf[C_STAGES], (int)cf[C_CTAS],
                                 (int)cf[C_SCHED], (int)cf[C_TURNS],  (int)cf[C_OVERLAP], (int)cf[C_TMASTORE],
                                 (int)cf[C_XUNIT]};
}

static int valid(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    fa_spec s = fa_spec_of(sh, cf);
    char buf[300];
    const char *w = fa_why_not(&s, buf, sizeof buf);
    if (w && why && n)
        snprintf(why, n, "%s", w);
    return w == NULL;
}

static loom_kernel *build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    fa_spec s = fa_spec_of(sh, cf);
    return fa_build(&s, err, n);
}

/* A program a unit and head, at most ctas: the units at most B blocks of rows a candidate. */
static void grid_rule(const int64_t *sh, const int64_t *cf, loom_grid_rule *r)
{
    fa_spec s = fa_spec_of(sh, cf);
    memset(r, 0, sizeof *r);
    for (int d = 0; d < 3; d++)
        r->div[d] = r->mult[d] = 1;
    r->c[1] = r->c[2] = 1;
    r->per[0][S_B] = fa_units_max(1, s.nseed) * s.H;
    r->cap[0] = s.ctas;
}

/* B and U tuned by bucket (the power of two at or above each): the kernel takes its rows
 * (B * n_seed, a dim of its own) and U at run time, so a config serves its bucket.  They
 * are not the registry's run-time keys, whose dim argument is named by the key. */
static void bucket(const int64_t *sh, int64_t *bk)
{
    bk[S_B] = loom_dim_bucket(sh[S_B]);
    bk[S_U] = loom_dim_bucket(sh[S_U]);
}

static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    loom_grid_rule r;
    grid_rule(sh, cf, &r);
    loom_grid_rule_eval(&r, sh, g);
}

/* Rank configs: waves of units over the CTAs (full 128-row units of S keys), the keys
 * computed past S, a deeper ring, and taking turns. */
static double cost(const int64_t *sh, const int64_t *cf)
{
    fa_spec s = fa_spec_of(sh, cf);
    double units = (double)TPL_CDIV(fa_rows(&s), 2 * FA_BLOCK) * (double)s.H;
    double waves = units / s.ctas, w = (double)(int64_t)waves + (waves > (double)(int64_t)waves ? 1 : 0);
    double keys = (double)TPL_CDIV(s.S, s.bn) * s.bn;
    return w * keys * (1.0 + 48.0 / s.bn) / (s.stages >= 3 ? 1.05 : 1.0) / (s.overlap ? 1.3 : s.turns ? 0.85 : 1.0);
}

/* The lengths of the check inputs (varlen): 1 to S, the first user's 0 when there are
 * several (a user with no history). */
static void lengths(const fa_spec *s, int32_t *lens, uint64_t *seed)
{
    for (int64_t u = 0; u < s->U; u++)
        lens[u] = !s->varlen ? (int32_t)s->S : u == 0 && s->U > 1 ? 0 : (int32_t)(1 + tpl_rand(seed) % s->S);
}

static void init(const int64_t *sh, void *const *host, uint64_t seed)
{
    fa_spec s = fa_spec_of(sh, (const int64_t[]){128, 2, 132, 0, 0, 0, 0, 0});
    int64_t qn = fa_rows(&s) * s.H * s.D, kn = s.U * s.S * s.H * s.D;
    *(int32_t *)host[A_ROWS] = (int32_t)fa_rows(&s); /* the run-time dims at the shape's values */
    *(int32_t *)host[A_U] = (int32_t)s.U;
    tpl_fill(host[A_Q], s.dt, qn, -1, 1, &seed);
    tpl_fill(host[A_K], s.dt, kn, -1, 1, &seed);
    tpl_fill(host[A_V], s.dt, kn, -1, 1, &seed);
    int32_t *map = malloc((size_t)s.B * sizeof *map);
    if (!map)
        return;
    ik_mapping(s.B, s.U, (int)sh[S_SHUFFLE], seed, map);
    lengths(&s, host[A_LENS], &seed);
    char err[200];
    int64_t n = fa_plan(&s, map, host[A_LENS], host[A_PLAN], err, sizeof err);
    *(int32_t *)host[A_UNITS] = (int32_t)(n < 0 ? 0 : n);
    free(map);
}

/* The mapping back from the plan (every candidate's rows are in some block); NULL when
 * out of memory. */
static int32_t *map_of_plan(const fa_spec *s, void *const *host)
{
    int32_t *map = calloc((size_t)s->B, sizeof *map);
    if (!map)
        return NULL;
    const int32_t *plan = host[A_PLAN];
    for (int64_t i = 0; i < *(const int32_t *)host[A_UNITS]; i++) {
        const int32_t *e = plan + i * FA_UNIT_FIELDS;
        for (int b = 0; b < 2; b++) {
            int32_t q0 = e[b ? FA_U_Q1 : FA_U_Q0], n = e[b ? FA_U_N1 : FA_U_N0];
            for (int32_t r = q0; r < q0 + n; r++)
                map[r / s->nseed] = e[FA_U_USER];
        }
    }
    return map;
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    fa_spec s = fa_spec_of(sh, (const int64_t[]){128, 2, 132, 0, 0, 0, 0, 0});
    int32_t *map = map_of_plan(&s, host);
    if (map)
        fa_reference(&s, host[A_Q], host[A_K], host[A_V], map, host[A_LENS], ref[A_OUT]);
    free(map);
}

/* out: fa_bound; the claims come back to zero, exactly. */
static void bound(const int64_t *sh, void *const *host, void *const *ref, double *const *bnd)
{
    fa_spec s = fa_spec_of(sh, (const int64_t[]){128, 2, 132, 0, 0, 0, 0, 0});
    int32_t *map = map_of_plan(&s, host);
    if (map && bnd[A_OUT])
        fa_bound(&s, host[A_Q], host[A_K], host[A_V], map, host[A_LENS], ref[A_OUT], bnd[A_OUT]);
    if (bnd[A_CLAIMS])
        bnd[A_CLAIMS][0] = bnd[A_CLAIMS][1] = 0;
    free(map);
}

const loom_template tpl_def_ikbo_fa = {
    .name = "ikbo_fa",
    .doc = "IKBO flash attention out[b] = softmax(Q[b] K[u(b)]^T / sqrt(D)) V[u(b)]: candidates read their user's "
           "K/V by index; a producer warp group and two consumer warp groups sharing each K/V tile",
    .nshape = 9,
    .shape = {{"B", 2048, "candidates (the kernel takes B * n_seed rows at run time, at most this many)"},
              {"U", 32, "users (the kernel takes them at run time, at most this many)"},
              {"S", 1024, "keys a user (padded)"},
              {"H", 2, "heads"},
              {"D", 128, "head dim (64 or 128)"},
              {"n_seed", 64, "query rows a candidate"},
              {"dtype", LOOM_F16, "f16 or bf16"},
              {"varlen", 0, "1: per-user lengths seq_len[U] mask the keys past them"},
              {"shuffle", 0, "check inputs: 0 contiguous users, 1 shuffled", 0, {0}, 1}},
    .nconfig = 8,
    .config = {{"BN", 128, "keys a K/V tile: 64 or 128 (either head dim)", 2, {64, 128}},
               {"stages", 2, "slots of the K ring and of the V ring (two Q slots where they fit)", 3, {2, 3, 4}},
               {"ctas", 132, "persistent CTAs (at most one per SM)", 1, {132}},
               {"sched", 0, "0: units round-robin; 1: claimed from a counter", 2, {0, 1}},
               {"turns", 0, "1: the two consumer warp groups take turns to issue their GEMMs", 2, {0, 1}},
               {"overlap", 1, "1: a K/V tile's softmax runs while the previous tile's P V is on the tensor cores", 2,
                {0, 1}},
               {"tmastore", 1, "1: where n_seed is a multiple of 64, out goes out by TMA through the Q tile (the Q "
                               "slot comes back after the store); 0: stored from the registers, the Q slot back "
                               "after the last S = Q K^T", 2, {0, 1}},
               {"xunit", 0, "1: the next unit's first S = Q K^T and its softmax run beside this unit's last P V "
                            "(sched=0, overlap=1, turns=0, two Q slots); measured slower (bench/RESULTS.md), so not "
                            "tuned", 1, {0}}},
    .valid = valid,
    .cost = cost,
    .build = build,
    .grid = grid,
    .grid_rule = grid_rule,
    .bucket = bucket,
    .init = init,
    .reference = reference,
    .atol = 2e-2,
    .rtol = 2e-2,
    .bound = bound,
};
