/*
 * ikbo_lce.c -- IKBO linear compression: out[b] = W_cand @ E_cand[b] + W_user @ E_user[u(b)].
 *
 * Shapes: W_user [M, Ku], W_cand [M, Kc], E_user [U, Ku, N], E_cand [B, Kc, N], the user
 * index u = cand_to_user [B] (i32), out [B, M, N]; f16 or bf16 in and out, f32
 * accumulation.  The user half is computed once per user, not once per candidate.
 *
 * One builder makes every GEMM kernel of the four stages (templates/ikbo_lce_api.c runs
 * them), each a warp-specialized TMA + wgmma kernel like templates/gemm.c: a producer
 * warp group fills a ring of W and E tiles by TMA, a consumer task runs wgmma out of it.
 *
 *   IK_USER        user_res[u] = W_user @ E_user[u]                    (tiles: U x M x N)
 *   IK_CAND        cand[b] = W_cand @ E_cand[b]                          (tiles: B x M x N)
 *   IK_CAND_FUSED  out[b] = W_cand @ E_cand[b] + user_res[u(b)]
 *   IK_FUSED       one persistent kernel: every program first takes user tiles, then
 *                  candidate tiles (tile t = pid, pid + ctas, ...; the user tiles come
 *                  first in that order, so a program never waits before its own user
 *                  tiles are done).  The user tiles hand their results over through a
 *                  counter in global memory (below).
 *
 * user_res keeps the f32 accumulator's precision as two planes of the I/O dtype, hi =
 * round(u) and lo = round(u - hi) (u = hi + lo to 22 bits for f16): out is then rounded
 * once, from acc + u, as with f32.  (hi alone is not enough: round(acc + round(u)) can
 * be off by half an ulp of u more than round(u + c), and on small samples it loses to
 * the framework's round(round(c) + round(u)) the checks compare against.)
 *
 * How a candidate tile adds its user's tile: as more k steps of its GEMM.  acc +=
 * I[BM, BM] @ plane[BM, BN] on the tensor cores (exact: the products are the plane's
 * values times 1 or 0), for hi and then lo, 64 rows of the plane a ring use: the producer
 * TMA-loads the plane's rows into the E half of a ring slot, and the consumer runs the
 * wgmma with a 64-column part of the identity (kept in shared memory, written once) in
 * place of the slot's W tile.  So the planes flow through the ring like any k step:
 * nothing waits for them, the accumulator never leaves the registers and the epilogue is
 * that of a plain GEMM.  user_res was written by the previous kernel (stage 3) or by the
 * user tiles of the same kernel (stage 4).  (An identity carried as columns of W_cand,
 * loaded with each plane step, measured 2-3% slower at the headline on an H200: 8 KiB
 * more of L2 traffic a step.)
 *
 * Stage 4's hand-over.  Each user tile, once its stores are done, adds 1 to one counter
 * in global memory (release).  A program's producer, before the planes of its first
 * candidate tile, waits until the counter reaches every user tile of the launch
 * (acquire; the counter counts up over launches, by rows of user_res times its blocks of 64
 * columns: epoch * U * M * cdiv(N, 64)).  One wait a
 * program, not one a tile: a wait is an L2 round trip the producer cannot hide, and
 * since every program takes its user tiles first, waiting for all of them costs at most
 * the end of the slowest user tile.  The user tiles were written by other programs'
 * generic stores; the wait ends with a fence of the async proxy, which orders them
 * before the TMA loads.  (Session 4 had a loader warp group wait per tile and copy the
 * planes with generic loads: 0.461 ms at the headline against stage 3's 0.401; a wait a
 * tile in the producer, with TMA: 0.416 against 0.394.)
 *
 * Consumers (`consumers`): one task of cwarps warps shares each tile by rows; or (1,
 * ping-pong) two warp groups take turns on whole tiles, each with its own tile of BM
 * rows: one's epilogue runs while the other's mainloop keeps the tensor cores busy.  They
 * hand the tensor cores over at named barriers X and Y (the order makes the ring's
 * parity waits sound, as in templates/gemm.c) and share one staging tile, which each
 * leaves only once its TMA store has read it.  Or (2, split) two warp groups share each
 * 128-row tile, 64 rows each, so one E tile in shared memory feeds twice the rows (the
 * L2-to-SM traffic a FLOP is 0.6 of 64-row tiles'); a group whose rows are all past M
 * (M = 433: the last tile's second half) computes nothing and only gives the ring's
 * slots back, and of the plane steps each group computes the two that hold its rows.
 * They stage their halves in one buffer in turn (the hand barriers, as in gemm.c).
 * (At the headline on an H200 split tiles took 0.437 ms with 3 stages and 0.414 with 4
 * (which store through borrowed ring slots, below) against 0.400 for 64-row tiles with
 * one warp group, so the tuner keeps the latter there; bench/RESULTS.md, sessions 6-7.)
 *
 * The transposed product (trans=1, the default): out[b]^T = E[b]^T @ W^T, as cuBLAS runs
 * this GEMM.  M sits on wgmma's N side, so a tile has M split evenly into at most BM rows
 * (224 at M = 433: 15 rows of waste, as with 64-row blocks) by 128 columns; two warp
 * groups own 64 columns each (A: their [64, 64] half of the E tile, read transposed; B:
 * the W tile [rows, 64]).  A plane step loads the user tile's rows by one group's 64
 * columns into a slot's W part (four a tile, each group computing its two), and each
 * group's output, transposed by stmatrix, goes out through its lo step's slot.  With
 * cluster=2 two CTAs take a tile's two column halves and each multicasts half of the W
 * tile to both.  (Stage 4 at the headline on an H200: 0.378 ms with the pair, 0.440
 * without, 0.402 for 64 x 256 tiles with one warp group; bench/RESULTS.md, session 8.)
 *
 * K alignment: TMA needs 16-byte rows, so the weights (K innermost) are padded with zero
 * columns to a multiple of 8 once, when prepared; E's K is an outer dim, so it is used
 * as given and TMA reads its rows past K as zero: any K works.  Tiles are ordered with
 * the M tiles of one batch entry next to each other, so programs working side by side
 * share E[b] in L2; within an entry the M x N tiles are rotated by the entry's index, so
 * that a persistent program (stride ctas) does not always get the same, perhaps short,
 * last M tile.
 */
#include "ikbo_lce.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#define CI(v) loom_const_i(k, LOOM_I32, (v))

/* Shared memory the tiles of a CTA may take: the hardware's 227 KiB of dynamic shared
 * memory less 1 KiB for the mbarriers. */
#define IK_SMEM (226 * 1024)

/* Register budgets (per thread) of the producer and the consumers. */
enum { PROD_REGS = 40, CONS_REGS = 232 };

/* Named barriers of the consumer task's threads: the staging tile, the identity. */
enum { BAR_CONS = 2, BAR_EYE = 3 };

int64_t ik_pad8(int64_t k) { return (k + 7) / 8 * 8; }

static bool tr(const ik_spec *s) { return s->trans != 0; }
static int clu(const ik_spec *s) { return s->cluster == 2 ? 2 : 1; }

int64_t ik_tile_rows(const ik_spec *s)
{
    int64_t q = 8 * clu(s); /* cluster=2: two halves of a multiple of 8 */
    return tr(s) ? TPL_CDIV(TPL_CDIV(s->M, TPL_CDIV(s->M, s->bm)), q) * q : s->bm;
}

/* The units of one [M, N] output the programs step through: tiles, or (cluster=2) pairs of
 * tiles side by side along N (a cluster's CTAs take one each; an odd last one is paired
 * with a tile past N, whose warp groups only pass the ring on). */
int64_t ik_tiles_mn(const ik_spec *s)
{
    return TPL_CDIV(s->M, ik_tile_rows(s)) * TPL_CDIV(TPL_CDIV(s->N, s->bn), clu(s));
}

static bool has_user(const ik_spec *s) { return s->mode == IK_USER || s->mode == IK_FUSED; }
static bool has_cand(const ik_spec *s) { return s->mode != IK_USER; }
/* The candidate tiles add user_res[u(b)]'s tile. */
static bool adds_user(const ik_spec *s) { return s->mode == IK_CAND_FUSED || s->mode == IK_FUSED; }

static bool split(const ik_spec *s) { return s->consumers == IK_SPLIT; }
static int64_t esz(const ik_spec *s) { return (int64_t)loom_dtype_size(s->dt); }
static int64_t ring_bytes(const ik_spec *s) { return (int64_t)s->stages * (ik_tile_rows(s) + s->bn) * 64 * esz(s); }
/* The staging tile: BM rows, or a split group's 64 (the groups take turns on it). */
static int64_t staging_bytes(const ik_spec *s) { return (int64_t)(split(s) ? 64 : s->bm) * s->bn * esz(s); }

/* The identity the plane steps multiply by: [BM, BM], or a split group's [64, 64]. */
static int64_t eye_rows(const ik_spec *s) { return split(s) ? 64 : s->bm; }
static int64_t eye_bytes(const ik_spec *s) { return adds_user(s) ? eye_rows(s) * eye_rows(s) * esz(s) : 0; }

/* Ring uses that add a candidate tile's user tile: hi then lo, 64 rows a use (trans: 64
 * columns a use). */
static int64_t halves_of(const ik_spec *s) { return tr(s) ? s->bn / 64 : s->bm / 64; }
static int64_t plane_steps(const ik_spec *s) { return 2 * halves_of(s); }

/* k steps of the candidate GEMM. */
static int64_t cand_steps(const ik_spec *s) { return TPL_CDIV(ik_pad8(s->Kc), 64); }

/* The counter's unit: a row of user_res by a block of 64 columns, whatever the tiles. */
int64_t ik_user_blocks(const ik_spec *s) { return s->U * s->M * TPL_CDIV(s->N, 64); }

int64_t ik_tiles(const ik_spec *s)
{
    return ik_tiles_mn(s) * ((has_user(s) ? s->U : 0) + (has_cand(s) ? s->B : 0));
}

void ik_grid(const ik_spec *s, int grid[3])
{
    int64_t t = ik_tiles(s) * clu(s);
    grid[0] = (int)(s->ctas && s->ctas < t ? s->ctas : t);
    grid[1] = grid[2] = 1;
}

const char *ik_why_not(const ik_spec *s, char *buf, size_t n)
{
    if (s->dt != LOOM_F16 && s->dt != LOOM_BF16)
        return "dtype must be f16 or bf16 (the tensor-core inputs)";
    if (s->B < 1 || s->U < 1 || s->M < 1 || s->N < 1 || s->Ku < 1 || s->Kc < 1)
        return "B, U, M, N, Ku and Kc must be positive";
    if (s->N % 8)
        return "N must be a multiple of 8 (TMA needs 16-byte aligned rows of E and out)";
    if (s->trans != 0 && s->trans != 1)
        return "trans must be 0 or 1";
    if (s->cluster < 0 || s->cluster > 2)
        return "cluster must be 1 or 2";
    if (clu(s) > 1 && !tr(s))
        return "cluster=2 needs trans=1 (the pair shares the W tile of a tile's two column halves)";
    if (clu(s) > 1 && s->ctas % 2)
        return "cluster=2 needs an even number of CTAs (ctas)";
    if (tr(s)) {
        if (s->consumers != IK_SPLIT || s->cwarps != 8 || s->bn != 128)
            return "trans=1 needs consumers=2, cwarps=8 and BN=128 (two warp groups of 64 columns each); trans=0 for the "
                   "other tilings";
        if (s->bm < 8 || s->bm > 256 || s->bm % 8)
            return "trans=1: BM (the most rows of a tile, on wgmma's N side) must be a multiple of 8 up to 256";
    } else {
        const char *w = tpl_why_not_consumers(s->cwarps, s->consumers, TPL_SPLIT, s->ctas, s->bm, s->bn);
        if (w)
            return w;
    }
    if (s->stages < 2 || s->stages > 8)
        return "stages must be 2 to 8";
    if (ring_bytes(s) > IK_SMEM) {
        snprintf(buf, n, "the ring needs %lld bytes of shared memory (over 226 KiB); use fewer stages or smaller tiles",
                 (long long)ring_bytes(s));
        return buf;
    }
    if (split(s) && !tr(s) && s->bm != 128)
        return "consumers=2 (split) needs BM=128: each of the two warp groups owns 64 rows";
    if (ring_bytes(s) + eye_bytes(s) > IK_SMEM) {
        snprintf(buf, n,
                 "the user tile is added through shared memory: the ring (%lld bytes) and the identity (%lld) need "
                 "over 226 KiB; use fewer stages or smaller tiles",
                 (long long)ring_bytes(s), (long long)eye_bytes(s));
        return buf;
    }
    if (adds_user(s) && s->planes != 2)
        return "the fused modes read user_res as two planes (hi, lo): planes must be 2";
    if (s->planes != 1 && s->planes != 2)
        return "planes must be 1 or 2";
    if (s->ctas < 0)
        return "ctas must be >= 0";
    if (s->mode == IK_FUSED && (s->ctas < 1 || s->ctas > 1024))
        return "the fused kernel is persistent: ctas must be 1 to 1024 (at most one per SM on the GPU)";
    return NULL;
}

/* Candidate tiles go out through a shared-memory staging tile and one TMA store (which
 * runs on during the next tile's mainloop) whenever the ring leaves room for it, else
 * straight from the accumulator's registers (a deeper ring against a slower epilogue:
 * 64 x 256 tiles with 5 stages and register stores took 0.53 ms at the headline on an
 * H200, against 0.40 with 4 stages and the staging tile), or through a borrowed ring
 * slot (below). */
static bool cs_fits(const ik_spec *s) { return ring_bytes(s) + staging_bytes(s) + eye_bytes(s) <= IK_SMEM; }
static bool staged(const ik_spec *s) { return has_cand(s) && !tr(s) && cs_fits(s); }

/* Where the staging tile does not fit but the candidate tiles have plane steps, a
 * tile's output (a warp group's 64 x BN) goes out through the E part of its last plane
 * step's ring slot instead, which has that shape: the group keeps the slot after the
 * step's wgmma, writes the tile into it, starts the TMA store, and gives the slot back
 * to the producer only after its next tile's first wgmma has been issued (and the store
 * has read the slot), so the wait for the store hides behind the tensor cores.  It frees
 * the staging tile's shared memory for a deeper ring (64 x 256: 5 stages; split 128 x
 * 256: 4).  A ring of 3 slots at least: with 2 the producer could wait on the held slot
 * for the ring use the holder waits on.  (Stage 4 at the headline on an H200: split
 * 128 x 256 with 4 stages 0.414 ms against 0.437 with 3 and the shared staging tile;
 * 64 x 256 with 5 stages 0.459 against 0.403 with 4 and the staging tile, so the tuner
 * keeps the latter.) */
static bool borrows(const ik_spec *s)
{
    if (tr(s))
        return adds_user(s) && s->stages >= 3;
    return adds_user(s) && !cs_fits(s) && s->stages >= 3 && s->consumers != IK_PINGPONG && (split(s) || s->bm == 64);
}

/* Tile t's batch entry j (user or candidate), first row m0, first column n0, and r, its
 * index within the entry's M x N tiles (the order rotated by j). */
typedef struct tile_at {
    loom_val j, m0, n0, r;
} tile_at;

static tile_at tile_coords(loom_kernel *k, const ik_spec *s, loom_val tc, loom_val rank)
{
    int64_t rows = ik_tile_rows(s), tm = TPL_CDIV(s->M, rows), per = ik_tiles_mn(s);
    tile_at a;
    a.j = loom_div(k, tc, CI(per));
    a.r = loom_rem(k, loom_add(k, loom_rem(k, tc, CI(per)), a.j), CI(per)); /* rotated by the entry */
    a.m0 = loom_mul(k, loom_rem(k, a.r, CI(tm)), CI(rows));
    a.n0 = loom_mul(k, loom_div(k, a.r, CI(tm)), CI(s->bn * clu(s)));
    if (rank) /* the cluster's rank-th tile of the unit */
        a.n0 = loom_add(k, a.n0, loom_mul(k, rank, CI(s->bn)));
    return a;
}

/* The kernel's arguments (LOOM_NONE where its mode has none). */
typedef struct ik_args {
    loom_val wu, wc, eu, ec, index, ures, flags, epoch, out;
} ik_args;

static ik_args declare(loom_kernel *k, const ik_spec *s)
{
    ik_args a = {0};
    int64_t kpu = ik_pad8(s->Ku);
    if (has_user(s)) {
        a.wu = loom_arg_tensor(k, "W_user", s->dt, LOOM_SHAPE2(s->M, kpu), LOOM_IN);
        a.eu = loom_arg_tensor(k, "E_user", s->dt, LOOM_SHAPE3(s->U, s->Ku, s->N), LOOM_IN);
    }
    if (has_cand(s)) {
        a.wc = loom_arg_tensor(k, "W_cand", s->dt, LOOM_SHAPE2(s->M, ik_pad8(s->Kc)), LOOM_IN);
        a.ec = loom_arg_tensor(k, "E_cand", s->dt, LOOM_SHAPE3(s->B, s->Kc, s->N), LOOM_IN);
    }
    if (adds_user(s))
        a.index = loom_arg_tensor(k, "cand_to_user", LOOM_I32, LOOM_SHAPE1(s->B), LOOM_IN);
    if (s->mode != IK_CAND) {
        loom_shape us = LOOM_SHAPE3(s->U, s->M, s->N);
        if (s->planes == 2) /* [U, 2, M, N]: hi, lo */
            us = (loom_shape){4, {s->U, 2, s->M, s->N}};
        a.ures = loom_arg_tensor(k, "user_res", s->dt, us,
                                 s->mode == IK_USER ? LOOM_OUT : s->mode == IK_FUSED ? LOOM_INOUT : LOOM_IN);
    }
    if (s->mode == IK_FUSED) {
        a.flags = loom_arg_tensor(k, "flags", LOOM_I32, LOOM_SHAPE1(1), LOOM_INOUT); /* the user tiles done */
        a.epoch = loom_arg_scalar(k, "epoch", LOOM_I32);
    }
    if (s->mode != IK_USER)
        a.out = loom_arg_tensor(k, "out", s->dt, LOOM_SHAPE3(s->B, s->M, s->N), LOOM_OUT);
    return a;
}

/* Shared memory and barriers: the ring of W [BM, 64] (split: two [64, 64] halves a slot)
 * and E [64, BN] tiles with its full and empty barriers; the staging tile cs; split: the
 * hand barriers of the staging tile's turns (hand[r]: group r is done with it); where
 * candidate tiles add the user tile, the identity eye. */
typedef struct ik_smem {
    loom_val as, bs, full, empty;
    loom_val cs, hand, eye;
} ik_smem;

/* Ping-pong: the consumer replica (0 or 1) and "is it replica 1" (LOOM_NONE otherwise). */
typedef struct ik_turns {
    loom_val rep, second;
} ik_turns;

/* The named barriers that hand the tensor cores over between ping-pong replicas. */
enum { BAR_X = 4, BAR_Y = 5 };

/* Borrowing: each split group's own barrier before its TMA store. */
enum { BAR_G0 = 6, BAR_G1 = 7 };

/* W's [BM, 64] box at (m0, k0) into ring slot sl's W part (split: as two 64-row halves). */
static void load_w(loom_kernel *k, const ik_spec *s, const ik_smem *m, loom_val w, loom_val m0, loom_val k0,
                   loom_val sl)
{
    if (clu(s) > 1) { /* rank q multicasts rows q * rows / 2 .. of the box to the pair */
        int64_t half = ik_tile_rows(s) / 2;
        loom_val rank = loom_cluster_rank(k);
        for (int64_t q = 0; q < 2; q++) {
            loom_region_op mine = loom_if_begin(k, loom_cmp(k, LOOM_EQ, rank, CI(q)), 0);
            loom_tma_load_multicast(k, w, ((loom_val[]){loom_add(k, m0, CI(q * half)), k0}),
                                    loom_smem_part(k, loom_smem_slot(k, m->as, sl), 0, q * half, half), m->full, sl);
            loom_if_end(k, mine, 0, NULL);
        }
        return;
    }
    if (!split(s) || tr(s)) {
        loom_tma_load(k, w, ((loom_val[]){m0, k0}), loom_smem_slot(k, m->as, sl), m->full, sl);
        return;
    }
    for (int64_t h = 0; h < 2; h++)
        loom_tma_load(k, w, ((loom_val[]){loom_add(k, m0, CI(64 * h)), k0}),
                      loom_smem_slot(k, m->as, loom_add(k, loom_mul(k, sl, CI(2)), CI(h))), m->full, sl);
}

/* expect the boxes on full[slot], then TMA W's [rows, 64] and E[j]'s [64, BN] boxes (trans:
 * E's as two [64, 64] halves, one a warp group) */
static void load_step(loom_kernel *k, const ik_spec *s, const ik_smem *m, loom_val w, loom_val e, tile_at t,
                      loom_val k0, loom_val slot)
{
    loom_mbar_expect(k, m->full, slot, (int64_t)(ik_tile_rows(s) + s->bn) * 64 * esz(s));
    load_w(k, s, m, w, t.m0, k0, slot);
    if (!tr(s)) {
        loom_tma_load(k, e, ((loom_val[]){t.j, k0, t.n0}), loom_smem_slot(k, m->bs, slot), m->full, slot);
        return;
    }
    for (int64_t h = 0; h < s->bn / 64; h++)
        loom_tma_load(k, e, ((loom_val[]){t.j, k0, loom_add(k, t.n0, CI(64 * h))}),
                      loom_smem_slot(k, m->bs, loom_add(k, loom_mul(k, slot, CI(s->bn / 64)), CI(h))), m->full, slot);
}

/* The user of candidate tile t. */
static loom_val user_of(loom_kernel *k, const ik_args *a, tile_at t)
{
    return loom_name(k, loom_load_scalar(k, a->index, ((loom_val[]){t.j})), "u");
}

/* Producer: the plane steps of candidate tile t, ring uses it .. it + plane_steps - 1:
 * rows m0 + 64h .. of plane p of user u's tile into the E half of a slot (trans: the
 * tile's rows by columns n0 + 64h .., into the W part).  (Its user's index read before
 * the tile's k steps, to hide that load, measured no faster.) */
static void load_planes(loom_kernel *k, const ik_spec *s, const ik_args *a, const ik_smem *m, tile_at t, loom_val it)
{
    loom_val u = user_of(k, a, t);
    for (int64_t q = 0; q < plane_steps(s); q++) {
        int64_t p = q / halves_of(s), h = q % halves_of(s);
        loom_val use = loom_add(k, it, CI(q));
        loom_val sl = loom_ring_slot(k, use, s->stages);
        loom_mbar_wait(k, m->empty, sl, loom_sub(k, CI(1), loom_ring_phase(k, use, s->stages)));
        if (tr(s)) {
            loom_mbar_expect(k, m->full, sl, ik_tile_rows(s) * 64 * esz(s));
            loom_tma_load(k, a->ures, ((loom_val[]){u, CI(p), t.m0, loom_add(k, t.n0, CI(64 * h))}),
                          loom_smem_slot(k, m->as, sl), m->full, sl);
            continue;
        }
        loom_mbar_expect(k, m->full, sl, (int64_t)64 * s->bn * esz(s));
        loom_tma_load(k, a->ures, ((loom_val[]){u, CI(p), loom_add(k, t.m0, CI(64 * h)), t.n0}),
                      loom_smem_slot(k, m->bs, sl), m->full, sl);
    }
}

/* wgmma's A operand of ring slot sl: the slot's W tile, or split group rep's half of it;
 * trans: group rep's [64, 64] half of E, transposed (E^T: rows n, columns k). */
static loom_val a_view(loom_kernel *k, const ik_spec *s, const ik_smem *m, loom_val sl, loom_val rep)
{
    if (tr(s))
        return loom_smem_trans(k, loom_smem_slot(k, m->bs, loom_add(k, loom_mul(k, sl, CI(s->bn / 64)), rep)));
    if (!split(s))
        return loom_smem_slot(k, m->as, sl);
    return loom_smem_slot(k, m->as, loom_add(k, loom_mul(k, sl, CI(2)), rep));
}

/* wgmma's B operand of ring slot sl (of a k step and of a plane step alike): the slot's E
 * tile [64, BN]; trans: its W tile (or plane part) transposed, [64, rows]. */
static loom_val b_view(loom_kernel *k, const ik_spec *s, const ik_smem *m, loom_val sl)
{
    if (tr(s))
        return loom_smem_trans(k, loom_smem_slot(k, m->as, sl));
    return loom_smem_slot(k, m->bs, sl);
}

/* The ring slot part a held slot's tile output goes out through: [64, BN] (E), or trans
 * [rows, 64] (W). */
static loom_val held_view(loom_kernel *k, const ik_spec *s, const ik_smem *m, loom_val sl)
{
    return loom_smem_slot(k, tr(s) ? m->as : m->bs, sl);
}

/* A warp group's tile as out and user_res hold it: as is, or trans its transpose (the
 * tile's rows by the group's 64 columns). */
static loom_val oriented(loom_kernel *k, const ik_spec *s, loom_val v) { return tr(s) ? loom_trans(k, v) : v; }

/* What a warp group stores of its accumulator: acc in the dtype, oriented. */
static loom_val out_tile(loom_kernel *k, const ik_spec *s, loom_val acc) { return oriented(k, s, loom_cast(k, acc, s->dt)); }

/* Ring slot sl back to the producer (cluster=2: to both CTAs' producers, whose multicasts
 * fill it). */
static void free_slot(loom_kernel *k, const ik_spec *s, const ik_smem *m, loom_val sl)
{
    if (clu(s) > 1)
        loom_mbar_arrive_cluster(k, m->empty, sl);
    else
        loom_mbar_arrive(k, m->empty, sl);
}

/* Consumer: ring use `it`: wait for its slot, acc += a @ E of the slot (a: the slot's W,
 * or av where given: the identity), one group left in flight; then, where `give_back` (an
 * i1, or LOOM_NONE for always), ring use prev's slot goes back to the producer (its group
 * is done; prev LOOM_NONE: none goes back). */
static loom_val ring_step(loom_kernel *k, const ik_spec *s, const ik_smem *m, loom_val it, loom_val prev,
                          loom_val rep, loom_val av, loom_val acc, loom_val give_back)
{
    loom_val sl = loom_ring_slot(k, it, s->stages);
    loom_mbar_wait(k, m->full, sl, loom_ring_phase(k, it, s->stages));
    loom_val r = loom_wgmma(k, av ? av : a_view(k, s, m, sl, rep), b_view(k, s, m, sl), acc);
    loom_wgmma_commit(k);
    loom_region_op wt = loom_wgmma_wait(k, 1, 1, &r);
    if (prev) {
        loom_region_op pb = give_back ? loom_if_begin(k, give_back, 0) : 0;
        free_slot(k, s, m, loom_ring_slot(k, prev, s->stages));
        if (give_back)
            loom_if_end(k, pb, 0, NULL);
    }
    return loom_wgmma_result(k, wt, 0);
}

/* Split: a ring use this group computes nothing on: wait until it is filled (so that the
 * arrival counts toward this use's phase of empty), then give the slot back. */
static void pass_step(loom_kernel *k, const ik_spec *s, const ik_smem *m, loom_val it)
{
    loom_val sl = loom_ring_slot(k, it, s->stages);
    loom_mbar_wait(k, m->full, sl, loom_ring_phase(k, it, s->stages));
    free_slot(k, s, m, sl);
}

/* out[j, m0.., n0..] = v: from registers, or through the staging tile cs and a TMA store.
 * One consumer task waits for the previous store lazily, before writing; two replicas
 * (`turns`: ping-pong or split, 128 threads each) share cs and take turns, so each waits
 * until its store has read it. */
static void store_out(loom_kernel *k, const ik_spec *s, const ik_args *a, tile_at t, loom_val v, loom_val cs,
                      bool turns)
{
    loom_val offs[3] = {t.j, t.m0, t.n0};
    if (!cs) {
        loom_store(k, a->out, offs, v, LOOM_NONE);
        return;
    }
    if (!turns)
        loom_tma_store_wait(k, 0); /* the previous tile's store has read the staging tile */
    loom_smem_store(k, cs, v);
    loom_fence_async(k);
    loom_named_barrier(k, BAR_CONS, turns ? 128 : s->cwarps * 32);
    loom_tma_store(k, a->out, offs, cs);
    if (turns)
        loom_tma_store_wait(k, 0);
}

/* Borrowing (borrows()): did the group's previous tile store through a ring slot it still
 * holds (an i1), and that slot's ring use. */
typedef struct ik_held {
    loom_val flag, use;
} ik_held;

/* The held slot back to the producer, once the TMA store has read it. */
static void release_held(loom_kernel *k, const ik_spec *s, const ik_smem *m, const ik_held *h)
{
    loom_region_op r = loom_if_begin(k, h->flag, 0);
    loom_tma_store_wait(k, 0);
    free_slot(k, s, m, loom_ring_slot(k, h->use, s->stages));
    loom_if_end(k, r, 0, NULL);
}

/* Consumer: the k steps of a tile, ring uses it0 .. it0 + nk - 1, into a fresh [rows, BN]
 * accumulator (split: group rep's W half; trans: [64, the tile's rows], group rep's E
 * half); the last group is left in flight.  A held
 * slot (h, or NULL) goes back once the first step's wgmma is issued. */
static loom_val mainloop(loom_kernel *k, const ik_spec *s, const ik_smem *m, loom_val it0, int64_t nk, int64_t rows,
                         loom_val rep, const ik_held *h)
{
    loom_val zero = CI(0), one = CI(1), from = zero;
    loom_val acc = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(rows, tr(s) ? ik_tile_rows(s) : s->bn));
    if (h) { /* the first step outside the loop, then the held slot */
        acc = ring_step(k, s, m, it0, LOOM_NONE, rep, LOOM_NONE, acc, LOOM_NONE);
        release_held(k, s, m, h);
        from = one;
    }
    loom_region_op kl = loom_for_begin(k, from, CI(nk), one, 1, &acc);
    {
        loom_val kk = loom_for_iv(k, kl), it = loom_add(k, it0, kk);
        loom_val r = ring_step(k, s, m, it, loom_sub(k, it, one), rep, LOOM_NONE, loom_for_arg(k, kl, 0),
                               h ? LOOM_NONE : loom_cmp(k, LOOM_GT, kk, zero));
        loom_for_end(k, kl, 1, &r);
    }
    return loom_for_result(k, kl, 0);
}

/* Consumer: wait for acc's last wgmma group and give ring use last's slot back (LOOM_NONE:
 * the group keeps it). */
static loom_val drain(loom_kernel *k, const ik_spec *s, const ik_smem *m, loom_val acc, loom_val last)
{
    loom_region_op wt = loom_wgmma_wait(k, 0, 1, &acc);
    if (last)
        free_slot(k, s, m, loom_ring_slot(k, last, s->stages));
    return loom_wgmma_result(k, wt, 0);
}

/* Borrowing: out[j, m0.., n0..] = v through the E part of ring use held's slot, which
 * the group keeps until release_held (rep: split group rep, whose 128 threads meet at
 * their own named barrier; LOOM_NONE: the one consumer task). */
static void store_held(loom_kernel *k, const ik_spec *s, const ik_args *a, const ik_smem *m, tile_at t, loom_val v,
                       loom_val held, loom_val rep)
{
    loom_val view = held_view(k, s, m, loom_ring_slot(k, held, s->stages));
    loom_smem_store(k, view, v);
    loom_fence_async(k);
    if (rep) {
        loom_region_op g = loom_if_begin(k, loom_cmp(k, LOOM_EQ, rep, CI(0)), 0);
        loom_named_barrier(k, BAR_G0, 128);
        loom_else(k, g, 0, NULL);
        loom_named_barrier(k, BAR_G1, 128);
        loom_if_end(k, g, 0, NULL);
    } else {
        loom_named_barrier(k, BAR_CONS, s->cwarps * 32);
    }
    loom_tma_store(k, a->out, ((loom_val[]){t.j, t.m0, t.n0}), view);
}

/* A user tile's epilogue: acc into user_res (one plane, or hi and lo); in the fused
 * kernel, then count its rows times blocks of 64 columns done (rows: the tile's, or a
 * split group's 64; trans: the tile's rows by the group's 64 columns). */
static void store_user(loom_kernel *k, const ik_spec *s, const ik_args *a, tile_at t, loom_val acc, int64_t rows)
{
    loom_val hi = loom_cast(k, acc, s->dt);
    if (s->planes == 1) {
        loom_store(k, a->ures, ((loom_val[]){t.j, t.m0, t.n0}), oriented(k, s, hi), LOOM_NONE);
    } else {
        /* lo = acc - hi, exact in f32.  lo rounds acc again, as acc + 0 (the same
         * value, -0 aside, whose lo is then -0 - 0 = -0; but not the same expression
         * to LLVM), so hi is needed by its own stores only and the compiler stores it
         * as it goes: a hi tile kept for lo (bf16 is held in f32 registers) and acc
         * would not fit in the consumers' 232 registers. */
        loom_store(k, a->ures, ((loom_val[]){t.j, CI(0), t.m0, t.n0}), oriented(k, s, hi), LOOM_NONE);
        loom_val again = loom_cast(k, loom_add(k, acc, loom_const_f(k, LOOM_F32, 0.0)), s->dt);
        loom_val lo = loom_cast(k, loom_sub(k, acc, loom_cast(k, again, LOOM_F32)), s->dt);
        loom_store(k, a->ures, ((loom_val[]){t.j, CI(1), t.m0, t.n0}), oriented(k, s, lo), LOOM_NONE);
    }
    if (s->mode == IK_FUSED) { /* its rows times its blocks of 64 columns are done */
        int64_t cb = tr(s) ? 1 : s->bn / 64;
        loom_val mr = loom_min(k, CI(tr(s) ? ik_tile_rows(s) : rows), loom_sub(k, CI(s->M), t.m0));
        loom_val nb = loom_min(k, CI(cb), loom_sub(k, CI(TPL_CDIV(s->N, 64)), loom_div(k, t.n0, CI(64))));
        loom_flag_add(k, a->flags, ((loom_val[]){CI(0)}), loom_mul(k, mr, nb));
    }
}

/* Consumer: one tile (nk k steps from ring use it0; a candidate tile adds its user's tile
 * in plane steps after them): the mainloop, the ping-pong hand-over, the epilogue.
 * Borrowing (h: the slot the previous tile holds): returns whether this tile holds its
 * last slot (an i32). */
static loom_val tile(loom_kernel *k, const ik_spec *s, const ik_args *a, const ik_smem *m, tile_at t, loom_val it0,
                     int64_t nk, bool cand, const ik_turns *pp, const ik_held *h)
{
    bool hold = h && cand;
    loom_val acc = mainloop(k, s, m, it0, nk, s->bm, LOOM_NONE, h);
    int64_t steps = nk;
    if (cand && adds_user(s)) /* acc += I @ plane, 64 rows of the plane a step */
        for (int64_t q = 0; q < plane_steps(s); q++, steps++) {
            int64_t h = q % (s->bm / 64);
            loom_val eye = s->bm == 64 ? m->eye : loom_smem_part(k, m->eye, 1, 64 * h, 64);
            loom_val it = loom_add(k, it0, CI(steps));
            acc = ring_step(k, s, m, it, loom_sub(k, it, CI(1)), LOOM_NONE, eye, acc, LOOM_NONE);
        }
    if (pp) { /* the tensor cores to the other replica */
        loom_region_op hand = loom_if_begin(k, pp->second, 0);
        loom_named_barrier(k, BAR_Y, 256);
        loom_else(k, hand, 0, NULL);
        loom_named_barrier(k, BAR_X, 256);
        loom_if_end(k, hand, 0, NULL);
    }
    loom_val last = loom_add(k, it0, CI(steps - 1));
    acc = drain(k, s, m, acc, hold ? LOOM_NONE : last);

    /* the epilogue */
    if (hold)
        store_held(k, s, a, m, t, out_tile(k, s, acc), last, LOOM_NONE);
    else if (cand)
        store_out(k, s, a, t, out_tile(k, s, acc), m->cs, pp != NULL);
    else
        store_user(k, s, a, t, acc, s->bm);
    if (pp) { /* replica 0 waits until replica 1's mainloop is done */
        loom_region_op w = loom_if_begin(k, pp->second, 0);
        loom_else(k, w, 0, NULL);
        loom_named_barrier(k, BAR_Y, 256);
        loom_if_end(k, w, 0, NULL);
    }
    return h ? CI(hold) : LOOM_NONE;
}

/* Split: group rep's half (rows m0 + 64 rep ..) of one tile, the tile's j-th of the
 * program.  Rows all past M: it only passes the ring uses on.  Of the plane steps
 * (hi h0, hi h1, lo h0, lo h1) it computes the two of its half, after its k steps, and
 * passes the other two on.  Staged output: the groups take turns on the staging tile,
 * group 0 first (hand[1 - rep]'s parity (j + 1 - rep) % 2: group 0's first wait passes on
 * the fresh barrier); a group with nothing to store takes its turn too.  Borrowing (h):
 * group rep stores through the slot of its lo step and returns whether it holds one. */
static loom_val tile_split(loom_kernel *k, const ik_spec *s, const ik_args *a, const ik_smem *m, tile_at t,
                           loom_val it0, int64_t nk, bool cand, loom_val rep, loom_val j, const ik_held *h)
{
    loom_val zero = CI(0), one = CI(1), other = loom_sub(k, one, rep);
    bool planes = cand && adds_user(s), hold = h && cand;
    int64_t uses = nk + (planes ? plane_steps(s) : 0);
    tile_at half = t; /* the group's part: rows m0 + 64 rep .. (trans: columns n0 + 64 rep ..) */
    loom_val *at = tr(s) ? &half.n0 : &half.m0;
    *at = loom_add(k, *at, loom_mul(k, rep, CI(64)));
    loom_val turn_parity = loom_rem(k, loom_add(k, j, other), CI(2));
    loom_region_op br = loom_if_begin(k, loom_cmp(k, LOOM_LT, *at, CI(tr(s) ? s->N : s->M)), h ? 1 : 0);
    {
        loom_val acc = mainloop(k, s, m, it0, nk, 64, rep, h);
        loom_val last = loom_add(k, it0, CI(nk - 1));
        for (int64_t p = 0; planes && p < 2; p++) {
            loom_val first = loom_add(k, it0, CI(nk + 2 * p));
            loom_val mine = loom_add(k, first, rep);
            if (s->stages < 3) /* mine may be two uses after last, in last's slot: give that back
                                * first (a ring of 3 or more has mine's slot back already) */
                acc = drain(k, s, m, acc, last);
            acc = ring_step(k, s, m, mine, s->stages < 3 ? LOOM_NONE : last, rep, m->eye, acc, LOOM_NONE);
            pass_step(k, s, m, loom_add(k, first, other));
            last = mine;
        }
        acc = drain(k, s, m, acc, hold ? LOOM_NONE : last);
        if (m->cs)
            loom_mbar_wait(k, m->hand, other, turn_parity);
        if (hold)
            store_held(k, s, a, m, half, out_tile(k, s, acc), last, rep);
        else if (cand)
            store_out(k, s, a, half, out_tile(k, s, acc), m->cs, true);
        else
            store_user(k, s, a, half, acc, 64);
    }
    loom_val held_now = CI(hold);
    loom_else(k, br, h ? 1 : 0, &held_now);
    {
        if (h)
            release_held(k, s, m, h);
        loom_region_op pl = loom_for_begin(k, zero, CI(uses), one, 0, NULL);
        pass_step(k, s, m, loom_add(k, it0, loom_for_iv(k, pl)));
        loom_for_end(k, pl, 0, NULL);
        if (m->cs)
            loom_mbar_wait(k, m->hand, other, turn_parity);
    }
    loom_if_end(k, br, h ? 1 : 0, &zero);
    if (m->cs) /* the staging tile to the other group */
        loom_mbar_arrive(k, m->hand, rep);
    return h ? loom_if_result(k, br, 0) : LOOM_NONE;
}

/* Consumer: a user or candidate tile, by the consumers' scheme (borrowing: returns
 * whether it holds a slot after it). */
static loom_val consume(loom_kernel *k, const ik_spec *s, const ik_args *a, const ik_smem *m, tile_at t, loom_val it0,
                        bool cand, const ik_turns *pp, loom_val rep, loom_val j, const ik_held *h)
{
    int64_t nk = cand ? cand_steps(s) : TPL_CDIV(ik_pad8(s->Ku), 64);
    if (split(s))
        return tile_split(k, s, a, m, t, it0, nk, cand, rep, j, h);
    return tile(k, s, a, m, t, it0, nk, cand, pp, h);
}

/* A task's first unit (tiles; cluster=2: tile pairs, by the cluster), stride and rank in
 * its cluster (LOOM_NONE without clusters). */
static void units(loom_kernel *k, const ik_spec *s, int64_t ntot, loom_val *pid, loom_val *step, loom_val *rank)
{
    *pid = loom_program_id(k, 0);
    *step = s->ctas ? loom_num_programs(k, 0) : CI(ntot);
    *rank = LOOM_NONE;
    if (clu(s) > 1) {
        *rank = loom_cluster_rank(k);
        *pid = loom_div(k, *pid, CI(clu(s)));
        if (s->ctas)
            *step = loom_div(k, *step, CI(clu(s)));
    }
}

static const char *mode_name(ik_mode m)
{
    return m == IK_USER ? "ikbo_user_gemm" : m == IK_CAND ? "ikbo_cand_gemm" : m == IK_CAND_FUSED ? "ikbo_cand_fused" : "ikbo_lce_fused";
}

loom_kernel *ik_build(const ik_spec *s, char *err, size_t errlen)
{
    char buf[300];
    const char *w = ik_why_not(s, buf, sizeof buf);
    if (w)
        return tpl_refuse(err, errlen, "%s", w);
    int prod_warps = 4;
    loom_kernel *k = loom_kernel_create(mode_name(s->mode), prod_warps + s->cwarps);
    ik_args a = declare(k, s);

    ik_smem m = {0};
    if (tr(s)) { /* W [rows, 64] a slot, E as [64, 64] halves */
        m.as = loom_smem_alloc(k, s->dt, LOOM_SHAPE2(ik_tile_rows(s), 64), s->stages, LOOM_SWIZZLE_128);
        m.bs = loom_smem_alloc(k, s->dt, LOOM_SHAPE2(64, 64), s->bn / 64 * s->stages, LOOM_SWIZZLE_128);
    } else {
        if (split(s))
            m.as = loom_smem_alloc(k, s->dt, LOOM_SHAPE2(64, 64), 2 * s->stages, LOOM_SWIZZLE_128);
        else
            m.as = loom_smem_alloc(k, s->dt, LOOM_SHAPE2(s->bm, 64), s->stages, LOOM_SWIZZLE_128);
        m.bs = loom_smem_alloc(k, s->dt, LOOM_SHAPE2(64, s->bn), s->stages, LOOM_SWIZZLE_128);
    }
    m.full = loom_mbar_alloc(k, s->stages, 1);
    /* split: both groups give each slot back; cluster=2: those of both CTAs */
    m.empty = loom_mbar_alloc(k, s->stages, (split(s) ? 2 : 1) * clu(s));
    if (staged(s)) {
        m.cs = loom_smem_alloc(k, s->dt, LOOM_SHAPE2(split(s) ? 64 : s->bm, s->bn), 1, LOOM_SWIZZLE_128);
        if (split(s))
            m.hand = loom_mbar_alloc(k, 2, 1);
    }
    if (adds_user(s))
        m.eye = loom_smem_alloc(k, s->dt, LOOM_SHAPE2(eye_rows(s), eye_rows(s)), 1, LOOM_SWIZZLE_128);
    int64_t nut = has_user(s) ? s->U * ik_tiles_mn(s) : 0, ntot = ik_tiles(s);
    int64_t nku = TPL_CDIV(ik_pad8(s->Ku), 64), nkc = cand_steps(s);
    int64_t nsc = nkc + (adds_user(s) ? plane_steps(s) : 0); /* ring uses of a candidate tile */
    /* pid: the program's (cluster=2: its cluster's) first unit, step: the stride, rank: the
     * program's in its cluster (set at the start of each task) */
    loom_val pid, step, rank;
#define UNITS() units(k, s, ntot, &pid, &step, &rank)
    if (clu(s) > 1)
        loom_kernel_set_cluster(k, clu(s));
    loom_val zero = CI(0), one = CI(1);

    /* Is tile tv a user tile, and its ring uses. */
#define IS_USER(tv) (s->mode == IK_FUSED ? loom_cmp(k, LOOM_LT, (tv), CI(nut)) : loom_const_i(k, LOOM_I1, s->mode == IK_USER))
#define USES(tv) (s->mode == IK_FUSED ? loom_select(k, IS_USER(tv), CI(nku), CI(nsc)) : CI(has_user(s) ? nku : nsc))
    /* Tile tv's coordinates among its kind. */
#define TILE_OF(tv) tile_coords(k, s, s->mode == IK_FUSED ? loom_select(k, IS_USER(tv), (tv), loom_sub(k, (tv), CI(nut))) : (tv), rank)

    /* producer: TMA into the ring (the tile loop carries the ring use) */
    loom_region_op pt = loom_task_begin(k, prod_warps, PROD_REGS, 1);
    {
        UNITS();
        loom_region_op tl = loom_for_begin(k, pid, CI(ntot), step, 1, &zero);
        loom_val tv = loom_for_iv(k, tl);
        loom_val is_user = IS_USER(tv);
        tile_at t = TILE_OF(tv);
        loom_val it0 = loom_for_arg(k, tl, 0);
        loom_val nk = s->mode == IK_FUSED ? loom_select(k, is_user, CI(nku), CI(nkc)) : CI(has_user(s) ? nku : nkc);
        loom_region_op kl = loom_for_begin(k, zero, nk, one, 0, NULL);
        {
            loom_val kk = loom_for_iv(k, kl);
            loom_val it = loom_add(k, it0, kk);
            loom_val sl = loom_ring_slot(k, it, s->stages);
            loom_mbar_wait(k, m.empty, sl, loom_sub(k, one, loom_ring_phase(k, it, s->stages)));
            loom_val k0 = loom_mul(k, kk, CI(64));
            if (s->mode == IK_FUSED) {
                loom_region_op br = loom_if_begin(k, is_user, 0);
                load_step(k, s, &m, a.wu, a.eu, t, k0, sl);
                loom_else(k, br, 0, NULL);
                load_step(k, s, &m, a.wc, a.ec, t, k0, sl);
                loom_if_end(k, br, 0, NULL);
            } else if (has_user(s)) {
                load_step(k, s, &m, a.wu, a.eu, t, k0, sl);
            } else {
                load_step(k, s, &m, a.wc, a.ec, t, k0, sl);
            }
        }
        loom_for_end(k, kl, 0, NULL);
        if (adds_user(s)) { /* a candidate tile's planes, after its k steps */
            loom_region_op pl = loom_if_begin(k, loom_not(k, is_user), 0);
            if (s->mode == IK_FUSED) {
                /* before the first candidate tile's: every user tile of the launch is done
                 * (acquire; then a proxy fence, for the TMA loads) */
                loom_val behind = loom_max(k, loom_sub(k, CI(nut), pid), zero);
                loom_val first = loom_add(k, pid, loom_mul(k, loom_div(k, loom_sub(k, loom_add(k, behind, step), one),
                                                                        step), step));
                loom_region_op w = loom_if_begin(k, loom_cmp(k, LOOM_EQ, tv, first), 0);
                loom_flag_wait(k, a.flags, ((loom_val[]){zero}), loom_mul(k, a.epoch, CI(ik_user_blocks(s))));
                loom_if_end(k, w, 0, NULL);
            }
            load_planes(k, s, &a, &m, t, loom_add(k, it0, CI(nkc)));
            loom_if_end(k, pl, 0, NULL);
        }
        loom_val next = loom_add(k, it0, USES(tv));
        loom_for_end(k, tl, 1, &next);
    }
    loom_task_end(k, pt);

    /* consumers: wgmma out of the ring, then the tile's epilogue (the tile loop carries the
     * ring use).  Ping-pong: replica r takes the program's tiles r, r + 2, ..., its ring
     * uses skipping the other's tiles.  Split: both replicas take every tile, each its
     * 64 rows (the loop also carries the tile's number, for the staging tile's turns). */
    bool turns = s->consumers == IK_PINGPONG, halves = split(s);
    loom_region_op ct = loom_task_begin(k, turns || halves ? 4 : s->cwarps, CONS_REGS, turns || halves ? 2 : 1);
    {
        UNITS();
        ik_turns pp = {LOOM_NONE, LOOM_NONE};
        loom_val first = pid, stride = step, carried[3] = {zero, zero, zero};
        if (turns) {
            pp.rep = loom_task_replica(k);
            pp.second = loom_cmp(k, LOOM_EQ, pp.rep, one);
            first = loom_add(k, pid, loom_mul(k, pp.rep, step));
            stride = loom_mul(k, step, CI(2));
            carried[0] = loom_select(k, loom_and(k, pp.second, loom_cmp(k, LOOM_LT, pid, CI(ntot))), USES(pid), zero);
        }
        loom_val rep = halves ? loom_task_replica(k) : LOOM_NONE;
        if (adds_user(s)) { /* the identity, once (two replicas: replica 0 writes it) */
            int64_t n = eye_rows(s);
            loom_shape sq = LOOM_SHAPE2(n, n);
            loom_val who = turns ? pp.rep : rep;
            loom_region_op w0 = who ? loom_if_begin(k, loom_cmp(k, LOOM_EQ, who, zero), 0) : 0;
            loom_val row = loom_broadcast(k, loom_expand_dims(k, loom_arange(k, 0, n), 1), sq);
            loom_val col = loom_broadcast(k, loom_expand_dims(k, loom_arange(k, 0, n), 0), sq);
            loom_val eye = loom_select(k, loom_cmp(k, LOOM_EQ, row, col), loom_splat(k, loom_const_f(k, s->dt, 1), sq),
                                       loom_splat(k, loom_const_f(k, s->dt, 0), sq));
            loom_smem_store(k, m.eye, eye);
            loom_fence_async(k);
            if (who)
                loom_if_end(k, w0, 0, NULL);
            loom_named_barrier(k, BAR_EYE, s->cwarps * 32);
        }
        /* carried: the ring use, split: the tile's number, borrowing: is a slot held */
        bool borrow = borrows(s);
        int nc = 1 + halves + borrow, hc = nc - 1;
        loom_region_op tl = loom_for_begin(k, first, CI(ntot), stride, nc, carried);
        loom_val tv = loom_for_iv(k, tl);
        tile_at t = TILE_OF(tv);
        loom_val it0 = loom_for_arg(k, tl, 0);
        /* the slot the previous tile holds: its last ring use (split: group rep's lo step) */
        ik_held held = {LOOM_NONE, LOOM_NONE};
        if (borrow) {
            held.flag = loom_cmp(k, LOOM_NE, loom_for_arg(k, tl, hc), zero);
            held.use = halves ? loom_add(k, loom_sub(k, it0, CI(2)), rep) : loom_sub(k, it0, one);
        }
        const ik_held *hp = borrow ? &held : NULL;
        if (turns) { /* replica 1 waits until replica 0's mainloop is done */
            loom_region_op w1 = loom_if_begin(k, pp.second, 0);
            loom_named_barrier(k, BAR_X, 256);
            loom_if_end(k, w1, 0, NULL);
        }
        const ik_turns *ppp = turns ? &pp : NULL;
        loom_val j = halves ? loom_for_arg(k, tl, 1) : LOOM_NONE;
        loom_val now_held;
        if (s->mode == IK_FUSED) {
            loom_region_op br = loom_if_begin(k, IS_USER(tv), borrow);
            loom_val after_user = consume(k, s, &a, &m, t, it0, false, ppp, rep, j, hp);
            loom_else(k, br, borrow, &after_user);
            loom_val after_cand = consume(k, s, &a, &m, t, it0, true, ppp, rep, j, hp);
            loom_if_end(k, br, borrow, &after_cand);
            now_held = borrow ? loom_if_result(k, br, 0) : LOOM_NONE;
        } else {
            now_held = consume(k, s, &a, &m, t, it0, has_cand(s), ppp, rep, j, hp);
        }
        loom_val next[3] = {loom_add(k, it0, USES(tv)), halves ? loom_add(k, loom_for_arg(k, tl, 1), one) : zero,
                            zero};
        if (borrow)
            next[hc] = now_held;
        if (turns) { /* and the other replica's tile in between */
            loom_val other = loom_add(k, tv, step);
            next[0] = loom_add(k, next[0], loom_select(k, loom_cmp(k, LOOM_LT, other, CI(ntot)), USES(other), zero));
        }
        loom_for_end(k, tl, nc, next);
        if (turns) {
            /* replica 1 after its n tiles: replica 0 has tile 2n too when pid + (2n) * step
             * < ntot; meet it at X and Y once more */
            loom_val n = loom_div(k, loom_add(k, loom_sub(k, CI(ntot), first), loom_sub(k, stride, one)), stride);
            loom_val last0 = loom_add(k, pid, loom_mul(k, loom_mul(k, n, CI(2)), step));
            loom_val more = loom_and(k, pp.second, loom_and(k, loom_cmp(k, LOOM_LT, first, CI(ntot)),
                                                            loom_cmp(k, LOOM_LT, last0, CI(ntot))));
            loom_val none1 = loom_and(k, pp.second, loom_and(k, loom_cmp(k, LOOM_GE, first, CI(ntot)),
                                                             loom_cmp(k, LOOM_LT, pid, CI(ntot))));
            loom_region_op ex = loom_if_begin(k, loom_or(k, more, none1), 0);
            loom_named_barrier(k, BAR_X, 256);
            loom_named_barrier(k, BAR_Y, 256);
            loom_if_end(k, ex, 0, NULL);
        }
        if (m.cs || borrow)
            loom_tma_store_wait(k, 0); /* the last store has read the staging tile (or held slot) */
    }
    loom_task_end(k, ct);
#undef UNITS
#undef TILE_OF
#undef USES
#undef IS_USER
    return k;
}

/* ---------------------------------------------------------------- the two small kernels */

/* dst[m, 0:Kp] = src[m, 0:K] padded with zeros (Kp = ik_pad8(K)): one row a program. */
loom_kernel *ik_pad_kernel(int64_t M, int64_t K, loom_dtype dt)
{
    int64_t kp = ik_pad8(K), w = tpl_pow2_at_least(kp);
    loom_kernel *k = loom_kernel_create("ikbo_pad_weights", 4);
    loom_val src = loom_arg_tensor(k, "src", dt, LOOM_SHAPE2(M, K), LOOM_IN);
    loom_val dst = loom_arg_tensor(k, "dst", dt, LOOM_SHAPE2(M, kp), LOOM_OUT);
    loom_val m = loom_program_id(k, 0);
    loom_val x = loom_load(k, src, ((loom_val[]){m, CI(0)}), LOOM_SHAPE2(1, w), LOOM_NONE, 0.0);
    loom_store(k, dst, ((loom_val[]){m, CI(0)}), x, LOOM_NONE);
    return k;
}

/* The materialized broadcast of frameworks: cat[b] = [E_user[u(b)]; E_cand[b]] along K
 * (rows Ku + Kc, padded with zero rows to a multiple of 8), [rows, N] a program per
 * (row block of 16, b). */
loom_kernel *ik_gather_kernel(const ik_spec *s)
{
    int64_t kt = ik_pad8(s->Ku + s->Kc), w = tpl_pow2_at_least(s->N);
    loom_kernel *k = loom_kernel_create("ikbo_materialize", 4);
    loom_val eu = loom_arg_tensor(k, "E_user", s->dt, LOOM_SHAPE3(s->U, s->Ku, s->N), LOOM_IN);
    loom_val ec = loom_arg_tensor(k, "E_cand", s->dt, LOOM_SHAPE3(s->B, s->Kc, s->N), LOOM_IN);
    loom_val index = loom_arg_tensor(k, "cand_to_user", LOOM_I32, LOOM_SHAPE1(s->B), LOOM_IN);
    loom_val cat = loom_arg_tensor(k, "E_cat", s->dt, LOOM_SHAPE3(s->B, kt, s->N), LOOM_OUT);
    loom_val r0 = loom_mul(k, loom_program_id(k, 0), CI(16));
    loom_val b = loom_program_id(k, 1);
    loom_val u = loom_load_scalar(k, index, ((loom_val[]){b}));
    loom_val rows = loom_add(k, loom_arange(k, 0, 16), loom_splat(k, r0, LOOM_SHAPE1(16)));
    loom_val rr = loom_broadcast(k, loom_expand_dims(k, rows, 1), LOOM_SHAPE2(16, w));
    loom_val in_u = loom_cmp(k, LOOM_LT, rr, loom_splat(k, CI(s->Ku), LOOM_SHAPE2(16, w)));
    /* rows below Ku come from the user, the others from the candidate (masks keep each
     * load inside its own tensor; both read zero past their ends) */
    loom_val xu = loom_load(k, eu, ((loom_val[]){u, r0, CI(0)}), LOOM_SHAPE2(16, w), in_u, 0.0);
    loom_val xc = loom_load(k, ec, ((loom_val[]){b, loom_sub(k, r0, CI(s->Ku)), CI(0)}), LOOM_SHAPE2(16, w),
                            loom_not(k, in_u), 0.0);
    loom_store(k, cat, ((loom_val[]){b, r0, CI(0)}), loom_select(k, in_u, xu, xc), LOOM_NONE);
    return k;
}

#undef CI

/* ---------------------------------------------------------------- registry entry: the stage-4 kernel */

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
    double busy = !split(&s) ? 1.0
                  : tr(&s)   ? (double)TPL_CDIV(s.N, 64) * 64 / (tn * s.bn)
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
    *(int32_t *)host[7] = 1;
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
    ik_reference(&s, host[0], host[2], host[1], host[3], host[4], ref[5], ref[8]);
    if (ref[6]) /* the counter after one launch */
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
