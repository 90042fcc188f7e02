/*
 * ikbo_lce_registry.c -- the IKBO linear compression as a registry template (its stage-4
 * kernel, which `loomc tune ikbo_lce` tunes), and what the tuner and the tests need
 * around it: shape and config vectors as specs, the cost model, inputs and the CPU
 * reference in double.  The kernels themselves are built in templates/ikbo_lce.c.
 */
#include "ikbo_lce.h"

#include <stdio.h>
#include <stdlib.h>


enum { S_B, S_U, S_M, S_N, S_KU, S_KC, S_DTYPE, S_SHUFFLE };
enum { C_BM, C_BN, C_STAGES, C_CWARPS, C_CTAS, C_CONSUMERS, C_TRANS, C_CLUSTER };

ik_spec ik_spec_of(ik_mode mode, const int64_t *sh, const int64_t *cf)
{
    return (ik_spec){mode, sh[S_B], sh[S_U], sh[S_M], sh[S_N], sh[S_KU], sh[S_KC], (loom_dtype)sh[S_DTYPE], 2,
                     (int)cf[C_BM], (int)cf[C_BN], (int)cf[C_STAGES], (int)cf[C_CWARPS], (int)cf[C_CTAS],
                     (int)cf[C_CONSUMERS], (int)cf[C_TRANS], (int)cf[C_CLUSTER]};
}

loom_ikbo_lce_config ik_config_of(const int64_t *cf)
{
    return (loom_ikbo_lce_config){(int)cf[C_BM],   (int)cf[C_BN],        (int)cf[C_STAGES], (int)cf[C_CWARPS],
                                  (int)cf[C_CTAS], (int)cf[C_CONSUMERS], (int)cf[C_TRANS], (int)cf[C_CLUSTER]};
}

static int valid(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    ik_spec s = ik_spec_of(IK_FUSED, sh, cf);
    char buf[300];
    const char *w = ik_why_not(&s, buf, sizeof buf);
    if (w && why && n)
        snprintf(why, n, "%s", w);
    return w == NULL;
}

static loom_kernel *build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    ik_spec s = ik_spec_of(IK_FUSED, sh, cf);
    return ik_build(&s, err, n);
}

static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    ik_spec s = ik_spec_of(IK_FUSED, sh, cf);
    ik_grid(&s, g);
}

/* Rank configs: waves of equal tiles over the persistent CTAs, the rows and columns
 * computed past M and N (split: rows of whole 64-row halves; trans: columns of whole
 * 64-column halves), the L2 traffic a FLOP, the ring's depth. */
static double cost(const int64_t *sh, const int64_t *cf)
{
    ik_spec s = ik_spec_of(IK_FUSED, sh, cf);
    double rows = (double)ik_tile_rows(&s);
    double tm = (double)TPL_CDIV(s.M, (int64_t)rows), tn = (double)TPL_CDIV(s.N, s.bn);
    double per_tile_u = rows * s.bn * ik_pad8(s.Ku), per_tile_c = rows * s.bn * ik_pad8(s.Kc);
    /* split: a group whose rows (trans: columns) are all past M (N) computes nothing */
    double busy = s.consumers != IK_SPLIT ? 1.0
                  : s.trans   ? (double)TPL_CDIV(s.N, 64) * 64 / (tn * s.bn)
                             : (double)TPL_CDIV(s.M, 64) * 64 / (tm * s.bm);
    double work = busy * tm * tn * (s.U * per_tile_u + s.B * per_tile_c) * (1.0 + 64.0 / rows + 64.0 / s.bn);
    double ctas = s.ctas ? s.ctas : 132, tiles = (double)ik_tiles(&s);
    double waves = tiles / ctas, tail = waves > (int64_t)waves ? 1.0 : 0.0;
    return work / tiles * ((int64_t)waves + tail) / (s.stages >= 3 ? 1.0 : 1.3);
}

/* The user of each candidate: contiguous runs (b * U / B), or a random permutation of them. */
void ik_mapping(int64_t B, int64_t U, int shuffle, uint64_t seed, int32_t *map)
{
    for (int64_t b = 0; b < B; b++) /* with more users than candidates, spread over them */
        map[b] = (int32_t)(b * U / B);
    if (shuffle)
        for (int64_t b = B - 1; b > 0; b--) {
            int64_t j = (int64_t)(tpl_rand(&seed) % (uint64_t)(b + 1));
            int32_t x = map[b];
            map[b] = map[j];
            map[j] = x;
        }
}

/* Fill W [M, kp] with values in its first K columns and zeros after. */
static void fill_padded(void *w, loom_dtype dt, int64_t M, int64_t K, int64_t kp, uint64_t *seed)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t q = 0; q < kp; q++)
            tpl_set(w, dt, m * kp + q, q < K ? (double)(tpl_rand(seed) % 2001) / 1000.0 - 1.0 : 0.0);
}

static void init(const int64_t *sh, void *const *host, uint64_t seed)
{
    loom_dtype dt = (loom_dtype)sh[S_DTYPE];
    fill_padded(host[0], dt, sh[S_M], sh[S_KU], ik_pad8(sh[S_KU]), &seed); /* W_user */
    fill_padded(host[2], dt, sh[S_M], sh[S_KC], ik_pad8(sh[S_KC]), &seed); /* W_cand */
    tpl_fill(host[1], dt, sh[S_U] * sh[S_KU] * sh[S_N], -1, 1, &seed);
    tpl_fill(host[3], dt, sh[S_B] * sh[S_KC] * sh[S_N], -1, 1, &seed);
    ik_mapping(sh[S_B], sh[S_U], (int)sh[S_SHUFFLE], seed, host[4]);
    /* user_res, the counter: zero (the buffers come zeroed); epoch 1 */
    *(int32_t *)host[8] = 1;
}

/* out[b] = Wc @ Ec[b] + Wu @ Eu[u(b)] in double, W given padded (W_user [M, pad8(Ku)],
 * W_cand [M, pad8(Kc)]). */
void ik_reference(const ik_spec *s, const void *wu, const void *wc, const void *eu, const void *ec,
                  const int32_t *map, void *ures, void *out)
{
    int64_t M = s->M, N = s->N, kpu = ik_pad8(s->Ku), kpc = ik_pad8(s->Kc);
    double *u = calloc((size_t)(s->U * M * N), sizeof(double)), *row = malloc((size_t)N * sizeof(double));
    if (!u || !row)
        goto done;
    for (int64_t x = 0; x < s->U; x++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t q = 0; q < s->Ku; q++) {
                double a = tpl_get(wu, s->dt, m * kpu + q);
                for (int64_t j = 0; j < N; j++)
                    u[(x * M + m) * N + j] += a * tpl_get(eu, s->dt, (x * s->Ku + q) * N + j);
            }
    if (ures) /* user x's planes at [x][0] and [x][1] */
        for (int64_t i = 0; i < s->U * M * N; i++) {
            int64_t x = i / (M * N), e = i % (M * N);
            double hi = tpl_round(s->dt, u[i]);
            tpl_set(ures, s->dt, (2 * x) * M * N + e, hi);
            tpl_set(ures, s->dt, (2 * x + 1) * M * N + e, u[i] - hi);
        }
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t m = 0; m < M; m++) {
            for (int64_t j = 0; j < N; j++)
                row[j] = u[((int64_t)map[b] * M + m) * N + j];
            for (int64_t q = 0; q < s->Kc; q++) {
                double a = tpl_get(wc, s->dt, m * kpc + q);
                for (int64_t j = 0; j < N; j++)
                    row[j] += a * tpl_get(ec, s->dt, (b * s->Kc + q) * N + j);
            }
            for (int64_t j = 0; j < N; j++)
                tpl_set(out, s->dt, (b * M + m) * N + j, row[j]);
        }
done:
    free(u);
    free(row);
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    static const int64_t cf[8] = {128, 256, 4, 8, 132, 0, 0, 1}; /* the outputs do not depend on it */
    ik_spec s = ik_spec_of(IK_FUSED, sh, cf);
    ik_reference(&s, host[0], host[2], host[1], host[3], host[4], ref[5], ref[9]);
    if (ref[6]) /* the counter after one launch; the claims (ref[7]) are back at zero */
        *(int32_t *)ref[6] = (int32_t)ik_user_blocks(&s);
}

const loom_template tpl_def_ikbo_lce = {
    .name = "ikbo_lce",
    .doc = "IKBO linear compression out[b] = W_cand @ E_cand[b] + W_user @ E_user[u(b)]: one persistent "
           "warp-specialized kernel, user tiles handed to candidate tiles by flags (stage 4)",
    .nshape = 8,
    .shape = {{"B", 1024, "candidates"},
              {"U", 15, "users"},
              {"M", 433, "rows of the weights and of out"},
              {"N", 256, "columns of E and out (a multiple of 8)"},
              {"Ku", 1178, "user K (any; the weights are padded to a multiple of 8)"},
              {"Kc", 866, "candidate K (any)"},
              {"dtype", LOOM_F16, "f16 or bf16"},
              {"shuffle", 0, "check inputs: 0 contiguous users, 1 shuffled"}},
    .nconfig = 8,
    .config = {{"BM", 256, "tile rows (64 or 128 per consumer warp group; trans=1: at most BM, M split evenly)", 3,
                {64, 128, 256}},
               {"BN", 128, "tile columns", 3, {64, 128, 256}},
               {"stages", 4, "ring slots", 3, {2, 3, 4}},
               {"cwarps", 8, "consumer warps (4 or 8)", 2, {4, 8}},
               {"ctas", 132, "persistent CTAs (at most one per SM)", 1, {132}},
               {"consumers", 2, "0: one consumer task shares each tile; 1: ping-pong, two warp groups take turns on "
                                "whole tiles (cwarps=8); 2: split, two warp groups share each 128-row tile "
                                "(cwarps=8, BM=128)", 3, {0, 1, 2}},
               {"trans", 1, "1: the transposed product out^T = E^T @ W^T (consumers=2, cwarps=8, BN=128): each warp "
                            "group owns 64 columns of out, a tile's rows (on wgmma's N side) are M split evenly "
                            "into tiles of at most BM rows", 2, {0, 1}},
               {"cluster", 2, "trans=1: 2 runs the CTAs in pairs that take a tile's two column halves, each "
                              "multicasting half of the W tile to both (half the L2 reads of W)", 2, {1, 2}}},
    .valid = valid,
    .cost = cost,
    .build = build,
    .grid = grid,
    .init = init,
    .reference = reference,
    .atol = 2e-2,
    .rtol = 2e-2,
};
