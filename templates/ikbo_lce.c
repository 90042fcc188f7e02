/*
 * ikbo_lce.c -- IKBO linear compression: out[b] = W_cand @ E_cand[b] + W_user @ E_user[u(b)].
 *
 * Shapes: W_user [M, Ku], W_cand [M, Kc], E_user [U, Ku, N], E_cand [B, Kc, N], the user
 * index u = cand_to_user [B] (i32), out [B, M, N]; f16 or bf16 in and out, f32
 * accumulation.  The user half is computed once per user, not once per candidate.
 *
 * One builder makes every GEMM kernel of the four stages (templates/ikbo_lce_api.c runs
 * them), each a warp-specialized TMA + wgmma kernel on the pipeline layer
 * (include/loom_pipe.h) like templates/gemm.c: a producer warp group fills a ring of W and
 * E tiles by TMA (`producer`), a consumer task runs wgmma out of it (`consumers`, one
 * tile at a time: `tile` or, split, `tile_split`), then the tile's epilogue
 * (`store_cand`, `store_user`).  The registry entry, cost model and CPU reference are in
 * templates/ikbo_lce_registry.c; the measurements behind each choice in bench/RESULTS.md
 * ("Design measurements").
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
 * user tiles of the same kernel (stage 4).
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
 * before the TMA loads.
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
 *
 * The transposed product (trans=1, the default): out[b]^T = E[b]^T @ W^T, as cuBLAS runs
 * this GEMM.  M sits on wgmma's N side, so a tile has M split evenly into at most BM rows
 * (224 at M = 433: 15 rows of waste, as with 64-row blocks) by 128 columns; two warp
 * groups own 64 columns each (A: their [64, 64] half of the E tile, read transposed; B:
 * the W tile [rows, 64]).  A plane step loads the user tile's rows by one group's 64
 * columns into a slot's W part (four a tile, each group computing its two), and each
 * group's output, transposed by stmatrix, goes out through its lo step's slot.  With
 * cluster=2 two CTAs take a tile's two column halves and each multicasts half of the W
 * tile to both.
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
#include "loom_pipe.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CI(v) loom_const_i(k, LOOM_I32, (v))

/* Shared memory the tiles of a CTA may take: the hardware's 227 KiB of dynamic shared
 * memory less 1 KiB for the mbarriers. */
#define IK_SMEM (226 * 1024)

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
static bool fp8(const ik_spec *s) { return ik_fp8(s); }
static int64_t esz(const ik_spec *s) { return (int64_t)loom_dtype_size(s->dt); }
/* out's element size (f16 and bf16 user_res's too) */
static int64_t osz(const ik_spec *s) { return (int64_t)loom_dtype_size(ik_out_dt(s)); }
/* Elements of K a k step: a 128-byte row of W and of E (FP8: E^T) in one swizzle span. */
static int64_t bk(const ik_spec *s) { return 128 / esz(s); }
static int64_t ring_bytes(const ik_spec *s) { return (int64_t)s->stages * (ik_tile_rows(s) + s->bn) * 128; }
/* The staging tile: BM rows, or a split group's 64 (the groups take turns on it). */
static int64_t staging_bytes(const ik_spec *s) { return (int64_t)(split(s) ? 64 : s->bm) * s->bn * osz(s); }
/* The candidate tiles add the user's tile by plane steps on the tensor cores (f16 and
 * bf16), or in the epilogue, scaled, loaded in the accumulator's layout (FP8). */
static bool plane_add(const ik_spec *s) { return adds_user(s) && !fp8(s); }

/* The transposed product's user tiles go out through shared memory where it fits beside
 * the ring and the identity: a warp group's [rows, 64] plane by stmatrix, read back and
 * stored 16 bytes at a time, the two groups taking turns on one tile (rows padded to a
 * power of two, so that the reads of a padded layout's rows stay inside it).  From the
 * registers the transposed tile is 2-byte stores (224 a thread and plane at M = 433);
 * through shared memory stage 4 ran 1.7-3.9% faster (bench/RESULTS.md, session 16). */
static int64_t ustage_rows(const ik_spec *s) { return tpl_pow2_at_least(ik_tile_rows(s)); }
static int64_t ustage_bytes(const ik_spec *s) { return ustage_rows(s) * 64 * osz(s); }

/* The identity the plane steps multiply by: [BM, BM], or a split group's [64, 64]. */
static int64_t eye_rows(const ik_spec *s) { return split(s) ? 64 : s->bm; }
static int64_t eye_bytes(const ik_spec *s) { return plane_add(s) ? eye_rows(s) * eye_rows(s) * esz(s) : 0; }

static bool user_staged(const ik_spec *s)
{
    return tr(s) && has_user(s) && !fp8(s) && ring_bytes(s) + eye_bytes(s) + ustage_bytes(s) <= IK_SMEM;
}

/* FP8, transposed: the candidate tiles go out the way user_staged's user tiles do (a
 * warp group's [rows, 64] of out by stmatrix through the same kind of tile, read back by
 * rows and stored 16 bytes at a time, the groups taking turns), where it fits beside the
 * ring: FP8 has no plane steps whose slots a tile could store through. */
static bool cand_staged_t(const ik_spec *s)
{
    return tr(s) && has_cand(s) && fp8(s) && ring_bytes(s) + ustage_bytes(s) <= IK_SMEM;
}

/* Ring uses that add a candidate tile's user tile: hi then lo, 64 rows a use (trans: 64
 * columns a use). */
static int64_t halves_of(const ik_spec *s) { return tr(s) ? s->bn / 64 : s->bm / 64; }
static int64_t plane_steps(const ik_spec *s) { return plane_add(s) ? 2 * halves_of(s) : 0; }

/* k steps of the candidate GEMM and of the user GEMM. */
static int64_t cand_steps(const ik_spec *s) { return TPL_CDIV(ik_kpad(s->dt, s->Kc), bk(s)); }
static int64_t user_steps(const ik_spec *s) { return TPL_CDIV(ik_kpad(s->dt, s->Ku), bk(s)); }

/* The counter's unit: a row of user_res by a block of 64 columns, whatever the tiles. */
int64_t ik_user_blocks(const ik_spec *s) { return s->U * ik_blocks_per_user(s); }
int64_t ik_blocks_per_user(const ik_spec *s) { return s->M * TPL_CDIV(s->N, 64); }

int64_t ik_tiles(const ik_spec *s)
{
    return ik_tiles_mn(s) * ((has_user(s) ? s->U : 0) + (has_cand(s) ? s->B : 0));
}

void ik_grid_rule(const ik_spec *s, int ib, int iu, loom_grid_rule *r)
{
    memset(r, 0, sizeof *r);
    for (int d = 0; d < 3; d++)
        r->div[d] = r->mult[d] = 1;
    r->c[1] = r->c[2] = 1;
    /* tiles_mn per user and per candidate, a CTA each (a pair of them in a cluster) */
    if (has_user(s))
        r->per[0][iu] = ik_tiles_mn(s) * clu(s);
    if (has_cand(s))
        r->per[0][ib] = ik_tiles_mn(s) * clu(s);
    r->cap[0] = s->ctas;
}

void ik_grid(const ik_spec *s, int grid[3])
{
    loom_grid_rule r;
    int64_t sh[LOOM_MAX_PARAMS] = {s->B, s->U};
    ik_grid_rule(s, 0, 1, &r);
    loom_grid_rule_eval(&r, sh, grid);
}

/* FP8: the f32 accumulator's registers a consumer thread: a warp group's [64, rows]
 * (trans) or [64, BN] (split), ping-pong's [BM, BN] a group, or one task's [BM, BN] over
 * its warps.  A candidate tile's epilogue adds the user's f32 tile loaded in the same
 * layout, as many registers again, beside the tile loop's state: ptxas fits 80 and 80 in
 * the 232 a consumer thread has (160-row transposed tiles at M = 433 assemble with no
 * spills), and spills at 224-row ones (stage 3's candidate kernel 172 bytes, stage 4's 68). */
enum { IK_FP8_ACC_REGS = 80 };
static int64_t fp8_acc_regs(const ik_spec *s)
{
    if (tr(s))
        return 64 * ik_tile_rows(s) / 128;
    if (split(s))
        return 64 * s->bn / 128;
    return s->bm * s->bn / (s->consumers == IK_PINGPONG ? 128 : s->cwarps * 32);
}

const char *ik_why_not(const ik_spec *s, char *buf, size_t n)
{
    if (s->dt != LOOM_F16 && s->dt != LOOM_BF16 && s->dt != LOOM_E4M3)
        return "dtype must be f16, bf16 or e4m3 (the tensor-core inputs)";
    if (s->B < 1 || s->U < 1 || s->M < 1 || s->N < 1 || s->Ku < 1 || s->Kc < 1)
        return "B, U, M, N, Ku and Kc must be positive";
    if (fp8(s)) {
        if (s->odt != LOOM_F16 && s->odt != LOOM_BF16)
            return "dtype e4m3: odtype (out's type) must be f16 or bf16";
        if (s->mode == IK_CAND)
            return "dtype e4m3 serves stages 3 and 4 (the user GEMM, the candidate GEMM adding user_res, the fused "
                   "kernel); the plain candidate GEMM of stages 0-2 is f16 and bf16's";
        if (s->Ku % 16 || s->Kc % 16) {
            snprintf(buf, n,
                     "dtype e4m3: %s=%lld must be a multiple of 16: E_%s^T's rows are K e4m3 values and TMA needs "
                     "16-byte rows (pad K with zeros, in E^T and in the weights)",
                     s->Ku % 16 ? "Ku" : "Kc", (long long)(s->Ku % 16 ? s->Ku : s->Kc), s->Ku % 16 ? "user" : "cand");
            return buf;
        }
    }
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
        if (s->bn != 64 && s->bn != 128 && s->bn != 256) /* tiles of 192 columns: gemm's only */
            return "BN must be 64, 128 or 256";
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
    if (fp8(s) && adds_user(s) && fp8_acc_regs(s) > IK_FP8_ACC_REGS) {
        snprintf(buf, n,
                 "dtype e4m3: a candidate tile's epilogue holds its f32 accumulator and the user's f32 tile at once, "
                 "%lld registers a consumer thread each at this tile (%lld x %lld a warp group); more than %d each "
                 "spill (ptxas): use smaller tiles (trans: BM at most 192 at M = 433, 160-row tiles)",
                 (long long)fp8_acc_regs(s), (long long)(tr(s) || split(s) ? 64 : s->bm),
                 (long long)(tr(s) ? ik_tile_rows(s) : s->bn), IK_FP8_ACC_REGS);
        return buf;
    }
    if (plane_add(s) && s->planes != 2)
        return "the fused modes read user_res as two planes (hi, lo): planes must be 2";
    if (s->planes != 1 && s->planes != 2)
        return "planes must be 1 or 2";
    if (s->ctas < 0)
        return "ctas must be >= 0";
    if (s->mode == IK_FUSED && s->consumers == IK_PINGPONG)
        return "the persistent kernel (stage 4) claims its tiles as it goes, and ping-pong's turns need the tiles known "
               "ahead: consumers=0 or 2";
    if (s->mode == IK_FUSED && (s->ctas < 1 || s->ctas > 1024))
        return "the fused kernel is persistent: ctas must be 1 to 1024 (at most one per SM on the GPU)";
    return NULL;
}

/* Candidate tiles go out through a shared-memory staging tile and one TMA store (which
 * runs on during the next tile's mainloop) whenever the ring leaves room for it, else
 * straight from the accumulator's registers (a deeper ring against a slower epilogue),
 * or through a borrowed ring slot (below).  bench/RESULTS.md has the measurements behind
 * each choice of this file. */
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
 * for the ring use the holder waits on. */
static bool borrows(const ik_spec *s)
{
    if (tr(s))
        return plane_add(s) && s->stages >= 3;
    return plane_add(s) && !cs_fits(s) && s->stages >= 3 && s->consumers != IK_PINGPONG && (split(s) || s->bm == 64);
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

/* The kernel's arguments (LOOM_NONE where its mode has none): the run-time dims B and U
 * first (ikbo_lce.h: ik_dims_of), then the tensors. */
typedef struct ik_args {
    loom_val B, U, wu, wc, eu, ec, index, ures, flags, claims, base, out;
    loom_val swu, swc, seu, sec; /* FP8: the scales (ikbo_lce.h, "FP8") */
} ik_args;

static ik_args declare(loom_kernel *k, const ik_spec *s)
{
    ik_args a = {0};
    int64_t kpu = ik_kpad(s->dt, s->Ku), kpc = ik_kpad(s->dt, s->Kc);
    if (ik_dims_of(s->mode) & IK_DIM_B)
        a.B = loom_arg_dim(k, "B", s->B, 1);
    if (ik_dims_of(s->mode) & IK_DIM_U)
        a.U = loom_arg_dim(k, "U", s->U, 1);
    int64_t B = LOOM_DIM(a.B), U = LOOM_DIM(a.U);
    /* E [*, K, N], or FP8's E^T [*, N, K] */
    loom_shape eus = fp8(s) ? LOOM_SHAPE3(U, s->N, s->Ku) : LOOM_SHAPE3(U, s->Ku, s->N);
    loom_shape ecs = fp8(s) ? LOOM_SHAPE3(B, s->N, s->Kc) : LOOM_SHAPE3(B, s->Kc, s->N);
    if (has_user(s)) {
        a.wu = loom_arg_tensor(k, "W_user", s->dt, LOOM_SHAPE2(s->M, kpu), LOOM_IN);
        a.eu = loom_arg_tensor(k, fp8(s) ? "E_user_t" : "E_user", s->dt, eus, LOOM_IN);
    }
    if (has_cand(s)) {
        a.wc = loom_arg_tensor(k, "W_cand", s->dt, LOOM_SHAPE2(s->M, kpc), LOOM_IN);
        a.ec = loom_arg_tensor(k, fp8(s) ? "E_cand_t" : "E_cand", s->dt, ecs, LOOM_IN);
    }
    if (adds_user(s))
        a.index = loom_arg_tensor(k, "cand_to_user", LOOM_I32, LOOM_SHAPE1(B), LOOM_IN);
    if (s->mode != IK_CAND) {
        loom_shape us = LOOM_SHAPE3(U, s->M, s->N);
        if (fp8(s) && tr(s)) /* FP8: f32, as the transposed product's accumulator lies */
            us = LOOM_SHAPE3(U, s->N, s->M);
        else if (!fp8(s) && s->planes == 2) /* [U, 2, M, N]: hi, lo */
            us = (loom_shape){4, {U, 2, s->M, s->N}};
        a.ures = loom_arg_tensor(k, "user_res", fp8(s) ? LOOM_F32 : s->dt, us,
                                 s->mode == IK_USER ? LOOM_OUT : s->mode == IK_FUSED ? LOOM_INOUT : LOOM_IN);
    }
    if (s->mode == IK_FUSED) {
        a.flags = loom_arg_tensor(k, "flags", LOOM_I32, LOOM_SHAPE1(1), LOOM_INOUT); /* the user tiles done */
        a.claims = loom_arg_tensor(k, "claims", LOOM_I32, LOOM_SHAPE1(2), LOOM_INOUT); /* the dynamic schedule's */
        a.base = loom_arg_scalar(k, "flag_base", LOOM_I32); /* the counter before this launch */
    }
    if (s->mode != IK_USER)
        a.out = loom_arg_tensor(k, "out", ik_out_dt(s), LOOM_SHAPE3(B, s->M, s->N), LOOM_OUT);
    if (fp8(s)) { /* after the tensors of f16's kernels, so that IKA_* keep their places */
        if (has_user(s))
            a.swu = loom_arg_tensor(k, "w_user_scale", LOOM_F32, LOOM_SHAPE1(s->M), LOOM_IN);
        if (has_cand(s))
            a.swc = loom_arg_tensor(k, "w_cand_scale", LOOM_F32, LOOM_SHAPE1(s->M), LOOM_IN);
        if (has_user(s))
            a.seu = loom_arg_tensor(k, "e_user_scale", LOOM_F32, LOOM_SHAPE1(U), LOOM_IN);
        if (has_cand(s))
            a.sec = loom_arg_tensor(k, "e_cand_scale", LOOM_F32, LOOM_SHAPE1(B), LOOM_IN);
    }
    return a;
}

/* The ring's tiles: W [rows, 64] (split: two [64, 64] halves a slot, one a warp group)
 * and E [64, BN] (trans: BN / 64 parts [64, 64], one a warp group). */
enum { TILE_W, TILE_E };

/* Everything the tasks share: the spec, the arguments and the pipeline's pieces. */
typedef struct ik {
    loom_kernel *k;
    const ik_spec *s;
    ik_args a;
    loom_ring ring;
    loom_sched sched;
    loom_epilogue epi;   /* candidate tiles' output: staged, in turns, or from registers */
    loom_pingpong pp;    /* ping-pong's turns */
    loom_sync eye_sync;  /* the identity is written */
    loom_sync held_sync; /* borrowing: the threads that wrote a held slot's tile */
    loom_val eye;        /* the identity the plane steps multiply by */
    loom_epilogue uepi;  /* user_staged: the user tiles' staging tile, the groups' turns on it
                            (LOOM_EPI_REGISTERS: stored from the registers) */
    loom_sync ugroup;    /* user_staged: a group's threads, around its writes and reads of it */
    bool turns, halves;  /* ping-pong; split */
    loom_val nut, ntot;  /* user tiles (first), all tiles: i32 at run time (the dims B and U) */
    int64_t nku, nkc;    /* k steps of a user and of a candidate tile */
    int64_t nsc;         /* ring uses of a candidate tile (its planes too) */
} ik;

/* Is tile tv a user tile (an i1). */
static loom_val is_user(const ik *g, loom_val tv)
{
    loom_kernel *k = g->k;
    if (g->s->mode == IK_FUSED)
        return loom_cmp(k, LOOM_LT, tv, g->nut);
    return loom_const_i(k, LOOM_I1, g->s->mode == IK_USER);
}

/* Tile tv's ring uses. */
static loom_val uses_of(const ik *g, loom_val tv)
{
    loom_kernel *k = g->k;
    if (g->s->mode == IK_FUSED)
        return loom_select(k, is_user(g, tv), CI(g->nku), CI(g->nsc));
    return CI(has_user(g->s) ? g->nku : g->nsc);
}

/* Tile tv's coordinates among its kind (rank: the CTA's in its cluster, or LOOM_NONE). */
static tile_at tile_of(const ik *g, loom_val tv, loom_val rank)
{
    loom_kernel *k = g->k;
    if (g->s->mode != IK_FUSED)
        return tile_coords(k, g->s, tv, rank);
    return tile_coords(k, g->s, loom_select(k, is_user(g, tv), tv, loom_sub(k, tv, g->nut)), rank);
}

/* ---------------------------------------------------------------- producer */

/* W's [rows, 64] box at (m0, k0) and E[j]'s [64, BN] box at (k0, n0) into the slot: W
 * multicast in row halves over a cluster, or as two halves (split); E in BN / 64 column
 * parts (trans). */
static void load_step(const ik *g, loom_val w, loom_val e, tile_at t, loom_val k0, loom_val sl)
{
    loom_kernel *k = g->k;
    const ik_spec *s = g->s;
    loom_val wo[2] = {t.m0, k0};
    if (clu(s) > 1)
        loom_ring_load_multicast(k, &g->ring, sl, TILE_W, 0, w, wo);
    else if (!split(s) || tr(s))
        loom_ring_load(k, &g->ring, sl, TILE_W, 0, w, wo);
    else
        for (int h = 0; h < 2; h++) {
            loom_val ho[2] = {loom_add(k, t.m0, CI(64 * h)), k0};
            loom_ring_load(k, &g->ring, sl, TILE_W, h, w, ho);
        }
    int parts = tr(s) ? (int)(s->bn / 64) : 1;
    for (int h = 0; h < parts; h++) {
        loom_val n0 = tr(s) ? loom_add(k, t.n0, CI(64 * h)) : t.n0;
        loom_val eo[3] = {t.j, k0, n0};
        if (fp8(s)) /* E^T [*, N, K] */
            eo[1] = n0, eo[2] = k0;
        loom_ring_load(k, &g->ring, sl, TILE_E, h, e, eo);
    }
}

/* The user of candidate tile t. */
static loom_val user_of(const ik *g, tile_at t)
{
    return loom_name(g->k, loom_load_scalar(g->k, g->a.index, ((loom_val[]){t.j})), "u");
}

/* The plane steps of candidate tile t, ring uses it .. it + plane_steps - 1: rows
 * m0 + 64h .. of plane p of user u's tile into the E part of a slot (trans: the tile's
 * rows by columns n0 + 64h .., into the W part). */
static void load_planes(const ik *g, tile_at t, loom_val it)
{
    loom_kernel *k = g->k;
    const ik_spec *s = g->s;
    loom_val u = user_of(g, t);
    for (int64_t q = 0; q < plane_steps(s); q++) {
        int64_t p = q / halves_of(s), h = q % halves_of(s);
        int64_t bytes = (tr(s) ? ik_tile_rows(s) * 64 : 64 * s->bn) * esz(s);
        loom_val sl = loom_ring_produce(k, &g->ring, loom_add(k, it, CI(q)), bytes);
        loom_val o[4] = {u, CI(p), t.m0, t.n0};
        if (tr(s))
            o[3] = loom_add(k, t.n0, CI(64 * h));
        else
            o[2] = loom_add(k, t.m0, CI(64 * h));
        loom_ring_load(k, &g->ring, sl, tr(s) ? TILE_W : TILE_E, 0, g->a.ures, o);
    }
}

/* Stage 4: before the planes of the program's first candidate tile (`waited`, an i32,
 * says whether it came), every user tile of the launch is done (acquire; the wait ends
 * with a proxy fence, for the TMA loads).  The dynamic schedule hands the user tiles out
 * first, so each of them is claimed by a running program by then.  Returns the new
 * `waited`. */
static loom_val wait_for_users(const ik *g, loom_val waited)
{
    loom_kernel *k = g->k;
    loom_val zero = CI(0);
    loom_region_op w = loom_if_begin(k, loom_cmp(k, LOOM_EQ, waited, zero), 0);
    loom_val blocks = loom_mul(k, g->a.U, CI(ik_blocks_per_user(g->s)));
    loom_flag_wait(k, g->a.flags, ((loom_val[]){zero}), loom_add(k, g->a.base, blocks));
    loom_if_end(k, w, 0, NULL);
    return CI(1);
}

/* The producer: for each of the program's tiles, its k steps (user: W_user and E_user;
 * candidate: W_cand and E_cand), then a candidate tile's plane steps.  The loop carries
 * the ring use. */
static void producer(const ik *g)
{
    loom_kernel *k = g->k;
    const ik_spec *s = g->s;
    loom_val zero = CI(0), one = CI(1);
    loom_region_op pt = loom_producer_begin(k);
    {
        loom_val rank = clu(s) > 1 ? loom_cluster_rank(k) : LOOM_NONE;
        /* carried: the ring use, stage 4: whether the user tiles were waited for */
        int nc = s->mode == IK_FUSED ? 2 : 1;
        loom_sched_loop tl = loom_sched_begin(k, &g->sched, LOOM_SCHED_PRODUCER, LOOM_NONE, nc, ((loom_val[]){zero, zero}));
        loom_val tv = loom_sched_unit(&tl), user = is_user(g, tv);
        tile_at t = tile_of(g, tv, rank);
        loom_val it0 = loom_sched_arg(&tl, 0), waited = nc > 1 ? loom_sched_arg(&tl, 1) : LOOM_NONE;
        loom_val nk = s->mode == IK_FUSED ? loom_select(k, user, CI(g->nku), CI(g->nkc))
                                          : CI(has_user(s) ? g->nku : g->nkc);
        loom_region_op kl = loom_for_begin(k, zero, nk, one, 0, NULL);
        {
            loom_val kk = loom_for_iv(k, kl);
            loom_val sl = loom_ring_produce(k, &g->ring, loom_add(k, it0, kk), -1);
            loom_val k0 = loom_mul(k, kk, CI(bk(s)));
            if (s->mode == IK_FUSED) {
                loom_region_op br = loom_if_begin(k, user, 0);
                load_step(g, g->a.wu, g->a.eu, t, k0, sl);
                loom_else(k, br, 0, NULL);
                load_step(g, g->a.wc, g->a.ec, t, k0, sl);
                loom_if_end(k, br, 0, NULL);
            } else if (has_user(s)) {
                load_step(g, g->a.wu, g->a.eu, t, k0, sl);
            } else {
                load_step(g, g->a.wc, g->a.ec, t, k0, sl);
            }
        }
        loom_for_end(k, kl, 0, NULL);
        if (plane_add(s)) { /* a candidate tile's planes, after its k steps */
            loom_region_op pl = loom_if_begin(k, loom_not(k, user), nc - 1);
            loom_val now = s->mode == IK_FUSED ? wait_for_users(g, waited) : LOOM_NONE;
            load_planes(g, t, loom_add(k, it0, CI(g->nkc)));
            loom_else(k, pl, nc - 1, &now);
            loom_if_end(k, pl, nc - 1, &waited);
            if (nc > 1)
                waited = loom_if_result(k, pl, 0);
        }
        loom_val next[2] = {loom_add(k, it0, uses_of(g, tv)), waited};
        loom_sched_end(k, &tl, next);
    }
    loom_task_end(k, pt);
}

/* ---------------------------------------------------------------- consumers */

/* The part of a held slot a tile's output goes out through: E [64, BN], or trans W
 * [rows, 64]. */
static loom_val held_view(const ik *g, loom_val sl)
{
    return loom_ring_view(g->k, &g->ring, sl, tr(g->s) ? TILE_W : TILE_E, LOOM_NONE);
}

/* A warp group's tile as out and user_res hold it: as is, or trans its transpose (the
 * tile's rows by the group's 64 columns). */
static loom_val oriented(loom_kernel *k, const ik_spec *s, loom_val v) { return tr(s) ? loom_trans(k, v) : v; }

/* What a warp group stores of its accumulator: acc in the dtype, oriented. */
static loom_val out_tile(loom_kernel *k, const ik_spec *s, loom_val acc) { return oriented(k, s, loom_cast(k, acc, s->dt)); }

/* The k loop of a tile (the pipeline layer's loom_mainloop): nk steps, ring uses it0 ..,
 * into a [rows, BN] accumulator, acc += W @ E of each slot (split: group rep's W half;
 * trans: [64, the tile's rows] += E^T @ W^T, group rep's E half), one group left in
 * flight and the previous use's slot given back.  Its steps also run the plane steps
 * (acc += I @ plane, the identity given as A). */
static loom_mainloop mainloop_of(const ik *g, int64_t nk, int64_t rows)
{
    const ik_spec *s = g->s;
    /* FP8: E^T's tile is K-major, as FP8 wgmma reads both operands: A as it is (trans), B
     * transposed */
    return (loom_mainloop){.ring = &g->ring, .a_tile = tr(s) ? TILE_E : TILE_W, .b_tile = tr(s) ? TILE_W : TILE_E,
                           .a_trans = tr(s) && !fp8(s), .b_trans = tr(s) || fp8(s), .a_split = tr(s) || split(s),
                           .rows = rows,
                           .cols = tr(s) ? ik_tile_rows(s) : s->bn, .steps = nk, .order = 1};
}

/* Borrowing (borrows()): did the group's previous tile store through a ring slot it still
 * holds (an i1), and that slot's ring use. */
typedef struct ik_held {
    loom_val flag, use;
} ik_held;

/* The k steps of a tile (ml) from ring use it0 into a fresh accumulator; the last group
 * is left in flight.  A held slot (h, or NULL) goes back once the first step's wgmma is
 * issued. */
static loom_val mainloop(const ik *g, const loom_mainloop *ml, loom_val it0, loom_val rep, const ik_held *h)
{
    loom_kernel *k = g->k;
    if (!h)
        return loom_mainloop_run(k, ml, it0, rep, LOOM_NONE, 0);
    /* the first step outside the loop, then the held slot */
    loom_val acc = loom_mainloop_step(k, ml, it0, LOOM_NONE, LOOM_NONE, LOOM_NONE, loom_mainloop_zero(k, ml), rep);
    loom_epilogue_return_slot(k, &g->ring, h->flag, h->use);
    return loom_mainloop_run(k, ml, it0, rep, acc, 1);
}

/* A candidate tile's output v at out[j, m0.., n0..]: through the held slot of ring use
 * `held` (borrowing; rep: split group rep, LOOM_NONE: the one consumer task), else by the
 * candidate epilogue. */
static void store_cand(const ik *g, tile_at t, loom_val v, loom_val held, loom_val rep)
{
    loom_val offs[3] = {t.j, t.m0, t.n0};
    if (held)
        loom_epilogue_store_borrowed(g->k, g->a.out, offs, v, held_view(g, loom_ring_slot_of(g->k, &g->ring, held)),
                                     g->held_sync, rep);
    else
        loom_epilogue_store(g->k, &g->epi, offs, v, LOOM_NONE);
}

/* One plane v of a user tile at user_res[offs]: from the registers, or (user_staged, in
 * the group's turn) written to the staging tile, read back by rows and stored 16 bytes at
 * a time; the group's threads meet after the write and after the reads (the next write,
 * or the other group's, may then come). */
static void put_user(const ik *g, loom_val dst, const loom_val *offs, loom_val v, loom_val rep)
{
    loom_kernel *k = g->k;
    if (g->uepi.kind != LOOM_EPI_HANDOVER) {
        loom_store(k, dst, offs, v, LOOM_NONE);
        return;
    }
    loom_val view = loom_smem_part(k, loom_smem_slot(k, g->uepi.stage, CI(0)), 0, 0, ik_tile_rows(g->s));
    loom_smem_store(k, view, v);
    loom_sync_wait(k, g->ugroup, rep);
    loom_store(k, dst, offs, loom_smem_load(k, view), LOOM_NONE);
    loom_sync_wait(k, g->ugroup, rep);
}

/* FP8: acc times its scales, the weight's at each row of out (ws [M]) and the batch
 * entry's (es [B] or [U], at t.j), as the accumulator lies: [rows, BN] at (m0, n0), or
 * trans [64, rows] at (n0, m0); f32 (the two scales' product, then acc times it). */
static loom_val fp8_scaled(const ik *g, tile_at t, loom_val acc, loom_val ws, loom_val es)
{
    loom_kernel *k = g->k;
    loom_shape sh = loom_val_shape(k, acc);
    /* the rows of out the accumulator holds: its columns (trans) or its rows */
    int axis = tr(g->s) ? 1 : 0;
    int64_t n = sh.dim[axis];
    loom_val w = loom_load(k, ws, ((loom_val[]){t.m0}), LOOM_SHAPE1(n), LOOM_NONE, 0.0);
    loom_val e = loom_load_scalar(k, es, ((loom_val[]){t.j}));
    w = loom_mul(k, w, loom_splat(k, e, LOOM_SHAPE1(n))); /* a vector: one product a row of out */
    return loom_mul(k, acc, loom_broadcast(k, loom_expand_dims(k, w, 1 - axis), sh));
}

/* FP8: where the accumulator's tile lies in user_res (ikbo_lce.h, "FP8"): [U, N, M]
 * (trans) or [U, M, N], user x. */
static void fp8_ures_offs(const ik_spec *s, tile_at t, loom_val x, loom_val *o)
{
    o[0] = x;
    o[1] = tr(s) ? t.n0 : t.m0;
    o[2] = tr(s) ? t.m0 : t.n0;
}

/* Stage 4 in FP8: the candidate tiles read user_res by loads of their own, so the
 * consumers wait for the user tiles (the f16 kernel's producer waits, before the TMA loads
 * of its planes): once a program and warp group, where `waited` (an i32 the tile loop
 * carries) is 0, before the epilogue of its first candidate tile (its mainloop ran
 * meanwhile).  Acquire: the user tiles' stores are visible to the group's loads. */
static void users_ready(const ik *g, loom_val waited)
{
    if (waited)
        wait_for_users(g, waited);
}

/* FP8: candidate tile t's epilogue: out = round(swc[m] sec[b] acc + user_res[u(b)]), the
 * user's tile loaded in the accumulator's layout (f32, scaled already); stored through
 * the output's staging tile in split group rep's turn (j: the program's tile), or by the
 * candidate epilogue. */
static void store_cand_fp8(const ik *g, tile_at t, loom_val acc, loom_val rep, loom_val j)
{
    loom_kernel *k = g->k;
    const ik_spec *s = g->s;
    loom_val o[3];
    fp8_ures_offs(s, t, user_of(g, t), o);
    loom_val sc = fp8_scaled(g, t, acc, g->a.swc, g->a.sec);
    loom_val r = loom_load(k, g->a.ures, o, loom_val_shape(k, acc), LOOM_NONE, 0.0);
    loom_val v = loom_add(k, sc, r);
    v = oriented(k, s, loom_cast(k, v, ik_out_dt(s)));
    if (g->uepi.kind != LOOM_EPI_HANDOVER) {
        store_cand(g, t, v, LOOM_NONE, rep);
        return;
    }
    loom_epilogue_turn_wait(k, &g->uepi, rep, j);
    put_user(g, g->a.out, ((loom_val[]){t.j, t.m0, t.n0}), v, rep);
    loom_epilogue_turn_done(k, &g->uepi, rep);
}

/* A user tile's epilogue: acc into user_res (one plane, or hi and lo); in the fused
 * kernel, then count its rows times blocks of 64 columns done (rows: the tile's, or a
 * split group's 64; trans: the tile's rows by the group's 64 columns).  user_staged: in
 * split group rep's turn on the staging tile, the program's j-th tile (the user tiles are
 * a program's first, so j counts them). */
static void store_user(const ik *g, tile_at t, loom_val acc, int64_t rows, loom_val rep, loom_val j)
{
    loom_kernel *k = g->k;
    const ik_spec *s = g->s;
    const ik_args *a = &g->a;
    bool turn = g->uepi.kind == LOOM_EPI_HANDOVER;
    if (turn)
        loom_epilogue_turn_wait(k, &g->uepi, rep, j);
    loom_val hi = fp8(s) ? LOOM_NONE : loom_cast(k, acc, s->dt);
    if (fp8(s)) { /* swu[m] seu[u] acc, f32, as it lies; from the registers (the staging tile is
                   * out's, its turn passed on) */
        loom_val o[3];
        fp8_ures_offs(s, t, t.j, o);
        loom_store(k, a->ures, o, fp8_scaled(g, t, acc, a->swu, a->seu), LOOM_NONE);
    } else if (s->planes == 1) {
        put_user(g, a->ures, ((loom_val[]){t.j, t.m0, t.n0}), oriented(k, s, hi), rep);
    } else {
        /* lo = acc - hi, exact in f32.  lo rounds acc again, as acc + 0 (the same
         * value, -0 aside, whose lo is then -0 - 0 = -0; but not the same expression
         * to LLVM), so hi is needed by its own stores only and the compiler stores it
         * as it goes: a hi tile kept for lo (bf16 is held in f32 registers) and acc
         * would not fit in the consumers' registers. */
        put_user(g, a->ures, ((loom_val[]){t.j, CI(0), t.m0, t.n0}), oriented(k, s, hi), rep);
        loom_val again = loom_cast(k, loom_add(k, acc, loom_const_f(k, LOOM_F32, 0.0)), s->dt);
        loom_val lo = loom_cast(k, loom_sub(k, acc, loom_cast(k, again, LOOM_F32)), s->dt);
        put_user(g, a->ures, ((loom_val[]){t.j, CI(1), t.m0, t.n0}), oriented(k, s, lo), rep);
    }
    if (turn) /* the staging tile to the other group */
        loom_epilogue_turn_done(k, &g->uepi, rep);
    if (s->mode == IK_FUSED) { /* its rows times its blocks of 64 columns are done */
        int64_t cb = tr(s) ? 1 : s->bn / 64;
        loom_val mr = loom_min(k, CI(tr(s) ? ik_tile_rows(s) : rows), loom_sub(k, CI(s->M), t.m0));
        loom_val nb = loom_min(k, CI(cb), loom_sub(k, CI(TPL_CDIV(s->N, 64)), loom_div(k, t.n0, CI(64))));
        loom_flag_add(k, a->flags, ((loom_val[]){CI(0)}), loom_mul(k, mr, nb));
    }
}

/* One tile of the consumer task (or of a ping-pong replica): the mainloop (nk k steps
 * from ring use it0; a candidate tile adds its user's tile in plane steps after them),
 * the ping-pong hand-over, the epilogue.  Borrowing (h: the slot the previous tile
 * holds): returns whether this tile holds its last slot (an i32). */
static loom_val tile(const ik *g, tile_at t, loom_val it0, int64_t nk, bool cand, const ik_held *h, loom_val waited)
{
    loom_kernel *k = g->k;
    const ik_spec *s = g->s;
    bool hold = h && cand;
    loom_mainloop ml = mainloop_of(g, nk, s->bm);
    loom_val acc = mainloop(g, &ml, it0, LOOM_NONE, h);
    int64_t steps = nk;
    if (cand && plane_add(s)) /* acc += I @ plane, 64 rows of the plane a step */
        for (int64_t q = 0; q < plane_steps(s); q++, steps++) {
            int64_t hh = q % (s->bm / 64);
            loom_val eye = s->bm == 64 ? g->eye : loom_smem_part(k, g->eye, 1, 64 * hh, 64);
            loom_val it = loom_add(k, it0, CI(steps));
            acc = loom_mainloop_step(k, &ml, it, loom_sub(k, it, CI(1)), LOOM_NONE, eye, acc, LOOM_NONE);
        }
    if (g->turns)
        loom_pingpong_mma_end(k, &g->pp);
    loom_val last = loom_add(k, it0, CI(steps - 1));
    acc = loom_mainloop_finish(k, &ml, acc, hold ? LOOM_NONE : last);

    /* the epilogue */
    if (cand && fp8(s)) {
        users_ready(g, waited);
        store_cand_fp8(g, t, acc, LOOM_NONE, LOOM_NONE);
    } else if (cand)
        store_cand(g, t, out_tile(k, s, acc), hold ? last : LOOM_NONE, LOOM_NONE);
    else
        store_user(g, t, acc, s->bm, LOOM_NONE, LOOM_NONE);
    if (g->turns)
        loom_pingpong_tile_end(k, &g->pp);
    return h ? CI(hold) : LOOM_NONE;
}

/* Split: group rep's half (rows m0 + 64 rep ..; trans: columns n0 + 64 rep ..) of one
 * tile, the tile's j-th of the program.  Rows all past M: it only passes the ring uses
 * on.  Of the plane steps (hi h0, hi h1, lo h0, lo h1) it computes the two of its half,
 * after its k steps, and passes the other two on.  Staged output: the groups take turns
 * on the staging tile, group 0 first; a group with nothing to store takes its turn too.
 * Borrowing (h): group rep stores through the slot of its lo step and returns whether it
 * holds one. */
static loom_val tile_split(const ik *g, tile_at t, loom_val it0, int64_t nk, bool cand, loom_val rep, loom_val j,
                           const ik_held *h, loom_val waited)
{
    loom_kernel *k = g->k;
    const ik_spec *s = g->s;
    loom_val zero = CI(0), one = CI(1), other = loom_sub(k, one, rep);
    bool planes = cand && plane_add(s), hold = h && cand, handover = g->epi.kind == LOOM_EPI_HANDOVER;
    int64_t uses = nk + (planes ? plane_steps(s) : 0);
    tile_at half = t;
    loom_val *at = tr(s) ? &half.n0 : &half.m0;
    *at = loom_add(k, *at, loom_mul(k, rep, CI(64)));
    loom_region_op br = loom_if_begin(k, loom_cmp(k, LOOM_LT, *at, CI(tr(s) ? s->N : s->M)), h ? 1 : 0);
    {
        loom_mainloop ml = mainloop_of(g, nk, 64);
        loom_val acc = mainloop(g, &ml, it0, rep, h);
        loom_val last = loom_add(k, it0, CI(nk - 1));
        for (int64_t p = 0; planes && p < 2; p++) {
            loom_val first = loom_add(k, it0, CI(nk + 2 * p));
            loom_val mine = loom_add(k, first, rep);
            if (s->stages < 3) /* mine may be two uses after last, in last's slot: give that back
                                * first (a ring of 3 or more has mine's slot back already) */
                acc = loom_mainloop_finish(k, &ml, acc, last);
            acc = loom_mainloop_step(k, &ml, mine, s->stages < 3 ? LOOM_NONE : last, LOOM_NONE, g->eye, acc, rep);
            loom_ring_pass(k, &g->ring, loom_add(k, first, other));
            last = mine;
        }
        acc = loom_mainloop_finish(k, &ml, acc, hold ? LOOM_NONE : last);
        if (handover)
            loom_epilogue_turn_wait(k, &g->epi, rep, j);
        if (cand && fp8(s)) {
            users_ready(g, waited);
            store_cand_fp8(g, half, acc, rep, j);
        } else if (cand)
            store_cand(g, half, out_tile(k, s, acc), hold ? last : LOOM_NONE, rep);
        else
            store_user(g, half, acc, 64, rep, j);
    }
    loom_val held_now = CI(hold);
    loom_else(k, br, h ? 1 : 0, &held_now);
    {
        if (h)
            loom_epilogue_return_slot(k, &g->ring, h->flag, h->use);
        loom_region_op pl = loom_for_begin(k, zero, CI(uses), one, 0, NULL);
        loom_ring_pass(k, &g->ring, loom_add(k, it0, loom_for_iv(k, pl)));
        loom_for_end(k, pl, 0, NULL);
        if (handover)
            loom_epilogue_turn_wait(k, &g->epi, rep, j);
        if (cand) /* (the group waits as the other does: its next tile may have columns) */
            users_ready(g, waited);
        if ((!cand || fp8(s)) && g->uepi.kind == LOOM_EPI_HANDOVER) { /* its turn on the user (FP8: out)
                                                                         * staging tile */
            loom_epilogue_turn_wait(k, &g->uepi, rep, j);
            loom_epilogue_turn_done(k, &g->uepi, rep);
        }
    }
    loom_if_end(k, br, h ? 1 : 0, &zero);
    if (handover) /* the staging tile to the other group */
        loom_epilogue_turn_done(k, &g->epi, rep);
    return h ? loom_if_result(k, br, 0) : LOOM_NONE;
}

/* A user or candidate tile, by the consumers' scheme (borrowing: returns whether it
 * holds a slot after it). */
static loom_val consume(const ik *g, tile_at t, loom_val it0, bool cand, loom_val rep, loom_val j, const ik_held *h,
                        loom_val waited)
{
    int64_t nk = cand ? g->nkc : g->nku;
    if (g->halves)
        return tile_split(g, t, it0, nk, cand, rep, j, h, waited);
    return tile(g, t, it0, nk, cand, h, waited);
}

/* The identity the plane steps multiply by, written once (two replicas: replica 0
 * writes it), then every consumer thread meets. */
static void write_identity(const ik *g, loom_val who)
{
    loom_kernel *k = g->k;
    int64_t n = eye_rows(g->s);
    loom_shape sq = LOOM_SHAPE2(n, n);
    loom_region_op w0 = who ? loom_if_begin(k, loom_cmp(k, LOOM_EQ, who, CI(0)), 0) : LOOM_NO_REGION;
    loom_val row = loom_broadcast(k, loom_expand_dims(k, loom_arange(k, 0, n), 1), sq);
    loom_val col = loom_broadcast(k, loom_expand_dims(k, loom_arange(k, 0, n), 0), sq);
    loom_val eye = loom_select(k, loom_cmp(k, LOOM_EQ, row, col), loom_splat(k, loom_const_f(k, g->s->dt, 1), sq),
                               loom_splat(k, loom_const_f(k, g->s->dt, 0), sq));
    loom_smem_store(k, g->eye, eye);
    loom_fence_async(k);
    if (who)
        loom_if_end(k, w0, 0, NULL);
    loom_sync_wait(k, g->eye_sync, LOOM_NONE);
}

/* The consumers: wgmma out of the ring, then each tile's epilogue.  The tile loop
 * carries the ring use; ping-pong: replica r takes the program's tiles r, r + 2, ..., its
 * ring uses skipping the other's tiles; split: both replicas take every tile, each its
 * 64 rows (the loop also carries the tile's number, for the staging tile's turns);
 * borrowing: also whether the previous tile holds a slot. */
static void consumers(ik *g)
{
    loom_kernel *k = g->k;
    const ik_spec *s = g->s;
    loom_val zero = CI(0), one = CI(1);
    bool two = g->turns || g->halves;
    loom_region_op ct = loom_consumers_begin(k, two ? 4 : s->cwarps, two ? 2 : 1);
    {
        loom_val pid = LOOM_NONE, step = LOOM_NONE, carried[3] = {zero, zero, zero};
        if (g->turns) /* ping-pong counts the other replica's ring uses: the static stride */
            loom_sched_range(k, &g->sched, &pid, &step);
        loom_val rank = clu(s) > 1 ? loom_cluster_rank(k) : LOOM_NONE;
        loom_val rep = g->turns ? loom_pingpong_start(k, &g->pp) : g->halves ? loom_task_replica(k) : LOOM_NONE;
        if (g->turns) /* replica 1 starts after replica 0's first tile */
            carried[0] = loom_select(k, loom_and(k, g->pp.second, loom_cmp(k, LOOM_LT, pid, g->ntot)),
                                     uses_of(g, pid), zero);
        if (plane_add(s))
            write_identity(g, rep);
        bool borrow = borrows(s);
        /* carried: the ring use, split: the tile's number, borrowing: the held flag, FP8
         * stage 4: whether the user tiles were waited for (never with borrowing) */
        bool cwait = fp8(s) && s->mode == IK_FUSED;
        int nc = 1 + g->halves + borrow + cwait, hc = nc - 1;
        loom_sched_loop tl = loom_sched_begin(k, &g->sched, LOOM_SCHED_CONSUMER, g->turns ? rep : LOOM_NONE, nc, carried);
        loom_val tv = loom_sched_unit(&tl);
        tile_at t = tile_of(g, tv, rank);
        loom_val it0 = loom_sched_arg(&tl, 0);
        /* the slot the previous tile holds: its last ring use (split: group rep's lo step) */
        ik_held held = {LOOM_NONE, LOOM_NONE};
        if (borrow) {
            held.flag = loom_cmp(k, LOOM_NE, loom_sched_arg(&tl, hc), zero);
            held.use = g->halves ? loom_add(k, loom_sub(k, it0, CI(2)), rep) : loom_sub(k, it0, one);
        }
        const ik_held *hp = borrow ? &held : NULL;
        if (g->turns)
            loom_pingpong_mma_begin(k, &g->pp);
        loom_val j = g->halves ? loom_sched_arg(&tl, 1) : LOOM_NONE;
        loom_val waited = cwait ? loom_sched_arg(&tl, hc) : LOOM_NONE;
        loom_val now_held;
        if (s->mode == IK_FUSED) {
            loom_region_op br = loom_if_begin(k, is_user(g, tv), borrow);
            loom_val after_user = consume(g, t, it0, false, rep, j, hp, LOOM_NONE);
            loom_else(k, br, borrow, &after_user);
            loom_val after_cand = consume(g, t, it0, true, rep, j, hp, waited);
            loom_if_end(k, br, borrow, &after_cand);
            now_held = borrow ? loom_if_result(k, br, 0) : LOOM_NONE;
        } else {
            now_held = consume(g, t, it0, has_cand(s), rep, j, hp, LOOM_NONE);
        }
        loom_val next[3] = {loom_add(k, it0, uses_of(g, tv)), g->halves ? loom_add(k, j, one) : zero, zero};
        if (borrow)
            next[hc] = now_held;
        if (cwait) /* a candidate tile waited */
            next[hc] = loom_select(k, is_user(g, tv), waited, one);
        if (g->turns) { /* and the other replica's tile in between */
            loom_val other = loom_add(k, tv, step);
            next[0] = loom_add(k, next[0], loom_select(k, loom_cmp(k, LOOM_LT, other, g->ntot), uses_of(g, other), zero));
        }
        loom_sched_end(k, &tl, next);
        if (g->turns)
            loom_pingpong_finish(k, &g->pp, loom_sched_odd(k, &g->sched));
        loom_epilogue_finish(k, &g->epi);
        if (borrow)
            loom_tma_store_wait(k, 0); /* the last store has read the held slot */
    }
    loom_task_end(k, ct);
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
    loom_kernel *k = loom_kernel_create(mode_name(s->mode), LOOM_PIPE_PRODUCER_WARPS + s->cwarps);
    if (clu(s) > 1)
        loom_kernel_set_cluster(k, clu(s));
    ik g = {.k = k, .s = s, .turns = s->consumers == IK_PINGPONG, .halves = split(s)};
    g.a = declare(k, s);
    loom_pipe p = loom_pipe_create(k);

    loom_ring_tile tiles[2];
    int64_t kb = bk(s); /* a 128-byte row of K: 64 elements of f16 or bf16, 128 of e4m3 */
    if (tr(s)) { /* W [rows, BK] a slot, E as [64, 64] parts (FP8: E^T as [64, BK] parts) */
        tiles[TILE_W] = (loom_ring_tile){s->dt, LOOM_SHAPE2(ik_tile_rows(s), kb), 1, LOOM_SWIZZLE_128};
        tiles[TILE_E] = (loom_ring_tile){s->dt, LOOM_SHAPE2(64, fp8(s) ? kb : 64), (int)(s->bn / 64), LOOM_SWIZZLE_128};
    } else { /* W [BM, BK] (split: two [64, BK] halves), E [64, BN] (FP8: E^T [BN, BK]) */
        tiles[TILE_W] = split(s) ? (loom_ring_tile){s->dt, LOOM_SHAPE2(64, kb), 2, LOOM_SWIZZLE_128}
                                 : (loom_ring_tile){s->dt, LOOM_SHAPE2(s->bm, kb), 1, LOOM_SWIZZLE_128};
        tiles[TILE_E] = fp8(s) ? (loom_ring_tile){s->dt, LOOM_SHAPE2(s->bn, kb), 1, LOOM_SWIZZLE_128}
                               : (loom_ring_tile){s->dt, LOOM_SHAPE2(64, s->bn), 1, LOOM_SWIZZLE_128};
    }
    g.ring = loom_ring_create(&p, s->stages, split(s) ? 2 : 1, 2, tiles); /* split: both groups release */
    loom_epilogue_kind ek = !staged(s) ? LOOM_EPI_REGISTERS
                            : split(s) ? LOOM_EPI_HANDOVER
                            : g.turns  ? LOOM_EPI_TURNS
                                       : LOOM_EPI_STAGED;
    g.epi = loom_epilogue_create(&p, ek, g.a.out, ik_out_dt(s), LOOM_SHAPE2(split(s) ? 64 : s->bm, s->bn), 1,
                                 g.turns || split(s) ? 128 : s->cwarps * 32);
    if (plane_add(s)) {
        g.eye = loom_smem_alloc(k, s->dt, LOOM_SHAPE2(eye_rows(s), eye_rows(s)), 1, LOOM_SWIZZLE_128);
        g.eye_sync = loom_sync_create(&p, s->cwarps * 32);
    }
    if (borrows(s))
        g.held_sync = split(s) ? loom_sync_create_per_replica(&p, 128, 2) : loom_sync_create(&p, s->cwarps * 32);
    /* the user tiles' staging tile (trans implies split: two groups take turns on it) */
    bool ustaged = user_staged(s) || cand_staged_t(s); /* FP8: the tile is out's (the user tiles pass their turns) */
    g.uepi = loom_epilogue_create(&p, ustaged ? LOOM_EPI_HANDOVER : LOOM_EPI_REGISTERS,
                                  cand_staged_t(s) ? g.a.out : g.a.ures, ik_out_dt(s), LOOM_SHAPE2(ustage_rows(s), 64), 1,
                                  128);
    if (ustaged)
        g.ugroup = borrows(s) ? g.held_sync : loom_sync_create_per_replica(&p, 128, 2);
    if (g.turns)
        g.pp = loom_pingpong_create(&p);
    /* the tiles at this launch's B and U; the static counts (at the maxima) bound the loops */
    loom_val per = CI(ik_tiles_mn(s));
    g.nut = has_user(s) ? loom_mul(k, g.a.U, per) : CI(0);
    g.ntot = has_cand(s) ? loom_add(k, g.nut, loom_mul(k, g.a.B, per)) : g.nut;
    g.nku = user_steps(s);
    g.nkc = cand_steps(s);
    g.nsc = g.nkc + plane_steps(s);
    /* stage 4 claims its tiles (user tiles first) from a counter, so a candidate tile's
     * wait for the user tiles never waits on a program that is not running */
    g.sched = s->mode == IK_FUSED ? loom_sched_dynamic(&p, ik_tiles(s), g.a.claims, 3, split(s) ? 2 : 1)
                                  : loom_sched_static(&p, ik_tiles(s), s->ctas != 0);
    loom_sched_set_count(&g.sched, g.ntot);

    producer(&g);
    consumers(&g);
    return k;
}

/* ---------------------------------------------------------------- the gather kernel */

/* The materialized broadcast of frameworks: cat[b] = [E_user[u(b)]; E_cand[b]] along K
 * (rows Ku + Kc, padded with zero rows to a multiple of 8), [rows, N] a program per
 * (row block of 16, b). */
loom_kernel *ik_gather_kernel(const ik_spec *s)
{
    int64_t kt = tpl_pad8(s->Ku + s->Kc), w = tpl_pow2_at_least(s->N);
    loom_kernel *k = loom_kernel_create("ikbo_materialize", 4);
    int64_t B = LOOM_DIM(loom_arg_dim(k, "B", s->B, 1)), U = LOOM_DIM(loom_arg_dim(k, "U", s->U, 1));
    loom_val eu = loom_arg_tensor(k, "E_user", s->dt, LOOM_SHAPE3(U, s->Ku, s->N), LOOM_IN);
    loom_val ec = loom_arg_tensor(k, "E_cand", s->dt, LOOM_SHAPE3(B, s->Kc, s->N), LOOM_IN);
    loom_val index = loom_arg_tensor(k, "cand_to_user", LOOM_I32, LOOM_SHAPE1(B), LOOM_IN);
    loom_val cat = loom_arg_tensor(k, "E_cat", s->dt, LOOM_SHAPE3(B, kt, s->N), LOOM_OUT);
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
