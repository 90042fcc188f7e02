/*
 * broadcast_add.c -- the IKBO broadcast-add: out[b,m,n] = cand[b,m,n] + user[u(b),m,n].
 *
 * Frameworks materialize user[u(b)] for every candidate b (a copy B/U times larger than
 * user).  Here each program reads the index u(b) once and loads the user tile by that
 * index, so the broadcast never exists in memory.  Grid: (tiles of M x N, B).
 */
#include "tpl.h"

loom_kernel *tpl_broadcast_add(const tpl_broadcast_add_shape *s, int bm, int bn, int warps)
{
    loom_kernel *k = loom_kernel_create("ikbo_broadcast_add", warps);
    loom_val cand = loom_arg_tensor(k, "cand", s->dtype, LOOM_SHAPE3(s->B, s->M, s->N), LOOM_IN);
    loom_val user = loom_arg_tensor(k, "user", s->dtype, LOOM_SHAPE3(s->U, s->M, s->N), LOOM_IN);
    loom_val map = loom_arg_tensor(k, "cand_to_user", LOOM_I32, LOOM_SHAPE1(s->B), LOOM_IN);
    loom_val out = loom_arg_tensor(k, "out", s->dtype, LOOM_SHAPE3(s->B, s->M, s->N), LOOM_OUT);

    /* which tile of [M, N] and which candidate this program handles */
    int64_t tiles_n = TPL_CDIV(s->N, bn);
    loom_val tile = loom_program_id(k, 0);
    loom_val b = loom_program_id(k, 1);
    loom_val tn = loom_const_i(k, LOOM_I32, tiles_n);
    loom_val cbm = loom_const_i(k, LOOM_I32, bm);
    loom_val cbn = loom_const_i(k, LOOM_I32, bn);
    loom_val m0 = loom_mul(k, loom_div(k, tile, tn), cbm);
    loom_val n0 = loom_mul(k, loom_rem(k, tile, tn), cbn);

    /* the broadcast by index: read u(b), then user[u(b)]'s tile */
    loom_val u = loom_name(k, loom_load_scalar(k, map, (loom_val[]){b}), "u");
    loom_val c = loom_load(k, cand, ((loom_val[]){b, m0, n0}), LOOM_SHAPE2(bm, bn), LOOM_NONE, 0.0);
    loom_val x = loom_load(k, user, ((loom_val[]){u, m0, n0}), LOOM_SHAPE2(bm, bn), LOOM_NONE, 0.0);
    loom_store(k, out, ((loom_val[]){b, m0, n0}), loom_add(k, c, x), LOOM_NONE);
    return k;
}

void tpl_broadcast_add_grid(const tpl_broadcast_add_shape *s, int bm, int bn, int grid[3])
{
    grid[0] = (int)(TPL_CDIV(s->M, bm) * TPL_CDIV(s->N, bn));
    grid[1] = (int)s->B;
    grid[2] = 1;
}

/* ---------------------------------------------------------------- registry entry */

enum { S_B, S_U, S_M, S_N, S_DTYPE, S_SHUFFLE };
enum { C_BM, C_BN, C_WARPS };

static tpl_broadcast_add_shape shape_of(const int64_t *sh)
{
    return (tpl_broadcast_add_shape){sh[S_B], sh[S_U], sh[S_M], sh[S_N], (loom_dtype)sh[S_DTYPE]};
}

static loom_kernel *build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    if (sh[S_DTYPE] != LOOM_F16 && sh[S_DTYPE] != LOOM_BF16 && sh[S_DTYPE] != LOOM_F32)
        return tpl_refuse(err, n, "dtype must be f16, bf16 or f32");
    if (sh[S_U] < 1 || sh[S_B] < 1 || sh[S_M] < 1 || sh[S_N] < 1)
        return tpl_refuse(err, n, "B, U, M, N must be positive");
    if (cf[C_BM] < 1 || cf[C_BN] < 1 || cf[C_BM] * cf[C_BN] > 65536)
        return tpl_refuse(err, n, "BM*BN must be between 1 and 65536");
    tpl_broadcast_add_shape s = shape_of(sh);
    return tpl_broadcast_add(&s, (int)cf[C_BM], (int)cf[C_BN], (int)cf[C_WARPS]);
}

static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    tpl_broadcast_add_shape s = shape_of(sh);
    tpl_broadcast_add_grid(&s, (int)cf[C_BM], (int)cf[C_BN], g);
}

static void init(const int64_t *sh, void *const *host, uint64_t seed)
{
    tpl_broadcast_add_shape s = shape_of(sh);
    tpl_fill(host[0], s.dtype, s.B * s.M * s.N, -1, 1, &seed);
    tpl_fill(host[1], s.dtype, s.U * s.M * s.N, -1, 1, &seed);
    int32_t *map = host[2];
    for (int64_t b = 0; b < s.B; b++)
        map[b] = (int32_t)(b * s.U / s.B);
    if (sh[S_SHUFFLE])
        for (int64_t b = s.B - 1; b > 0; b--) {
            int64_t j = (int64_t)(tpl_rand(&seed) % (uint64_t)(b + 1));
            int32_t t = map[b];
            map[b] = map[j];
            map[j] = t;
        }
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    tpl_broadcast_add_shape s = shape_of(sh);
    const int32_t *map = host[2];
    int64_t mn = s.M * s.N;
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t i = 0; i < mn; i++)
            tpl_set(ref[3], s.dtype, b * mn + i,
                    tpl_get(host[0], s.dtype, b * mn + i) + tpl_get(host[1], s.dtype, map[b] * mn + i));
}

const loom_template tpl_def_broadcast_add = {
    .name = "ikbo_broadcast_add",
    .doc = "IKBO broadcast-add by index: out[b] = cand[b] + user[cand_to_user[b]]",
    .nshape = 6,
    .shape = {{"B", 1024, "candidates"},
              {"U", 15, "users"},
              {"M", 433, "rows per candidate"},
              {"N", 256, "columns"},
              {"dtype", LOOM_F16, "element type"},
              {"shuffle", 0, "1: shuffled candidate-to-user mapping"}},
    .nconfig = 3,
    .config = {{"BM", 8, "tile rows"}, {"BN", 256, "tile columns"}, {"warps", 4, "warps per CTA"}},
    .build = build,
    .grid = grid,
    .init = init,
    .reference = reference,
    .atol = 0,
    .rtol = 1e-3, /* f32: bit-exact in practice; f16/bf16: within one rounding */
};
