/*
 * broadcast_add.c -- the IKBO broadcast-add: out[b,m,n] = cand[b,m,n] + user[u(b),m,n].
 *
 * Frameworks materialize user[u(b)] for every candidate b (a copy B/U times larger than
 * user).  Here each program reads the index u(b) once and loads the user tile by that
 * index, so the broadcast never exists in memory.  Grid: (tiles of M x N, B).
 */
#include "loom.h"

loom_kernel *tpl_broadcast_add(const tpl_broadcast_add_shape *s, int bm, int bn, int warps)
{
    loom_kernel *k = loom_kernel_create("ikbo_broadcast_add", warps);
    loom_val cand = loom_arg_tensor(k, "cand", s->dtype, LOOM_SHAPE3(s->B, s->M, s->N), LOOM_IN);
    loom_val user = loom_arg_tensor(k, "user", s->dtype, LOOM_SHAPE3(s->U, s->M, s->N), LOOM_IN);
    loom_val map = loom_arg_tensor(k, "cand_to_user", LOOM_I32, LOOM_SHAPE1(s->B), LOOM_IN);
    loom_val out = loom_arg_tensor(k, "out", s->dtype, LOOM_SHAPE3(s->B, s->M, s->N), LOOM_OUT);

    int64_t tiles_n = (s->N + bn - 1) / bn;
    loom_val tile = loom_program_id(k, 0);
    loom_val b = loom_program_id(k, 1);
    loom_val tn = loom_const_i(k, LOOM_I32, tiles_n);
    loom_val m0 = loom_mul(k, loom_div(k, tile, tn), loom_const_i(k, LOOM_I32, bm));
    loom_val n0 = loom_mul(k, loom_rem(k, tile, tn), loom_const_i(k, LOOM_I32, bn));

    loom_val u = loom_name(k, loom_load_scalar(k, map, (loom_val[]){b}), "u");
    loom_val c = loom_load(k, cand, ((loom_val[]){b, m0, n0}), LOOM_SHAPE2(bm, bn), LOOM_NONE, 0.0);
    loom_val x = loom_load(k, user, ((loom_val[]){u, m0, n0}), LOOM_SHAPE2(bm, bn), LOOM_NONE, 0.0);
    loom_store(k, out, ((loom_val[]){b, m0, n0}), loom_add(k, c, x), LOOM_NONE);
    return k;
}

void tpl_broadcast_add_grid(const tpl_broadcast_add_shape *s, int bm, int bn, int grid[3])
{
    grid[0] = (int)(((s->M + bm - 1) / bm) * ((s->N + bn - 1) / bn));
    grid[1] = (int)s->B;
    grid[2] = 1;
}
