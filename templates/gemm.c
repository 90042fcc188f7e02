/*
 * gemm.c -- C[b] = A[b] @ B[b] on Hopper's tensor cores: a warp-specialized kernel.
 *
 * The algorithm, on the pipeline layer (include/loom_pipe.h, which owns the barriers,
 * phases and budgets):
 *
 *   ring     `stages` slots of an A tile [BM, BK] and a B tile [BK, BN] (128-byte
 *            swizzle; A's 64-byte at BK=32)
 *   producer for each output tile it owns, for each k step (a running count of ring uses
 *            over tiles): produce the slot, TMA A and B into it
 *   consumer for each tile: acc = 0; for each k step: consume the slot, wgmma, commit,
 *            wait until one group is in flight, release the previous slot; after the
 *            loop wait for all and release the last slot
 *   epilogue cast and store the tile: straight from the accumulator's registers (masked
 *            at the M/N edges) or, with tmastore=1, through a staging tile in shared
 *            memory and a TMA store that runs asynchronously
 *
 * How the consumer warp groups share the work (`consumers`):
 *   0 cooperative  one task of cwarps warps; its warp groups split every tile by rows
 *   1 ping-pong    two replicas of one warp group take turns on whole BMxBN tiles: one's
 *                  epilogue runs while the other's mainloop keeps the tensor cores busy
 *   2 split        two replicas of one warp group share every tile by rows (each its own
 *                  accumulator and its own half of the A slot), consume every ring slot and
 *                  run free of each other, up to the ring's depth apart; with tmastore=1
 *                  they hand one staging buffer over (replica 0 first), which puts them a
 *                  few k steps apart, so one's epilogue overlaps the other's last k steps
 *                  or first ones of the next tile
 *
 * The defaults, and why the other schemes are kept as tuner candidates, are measured in
 * bench/RESULTS.md ("Design measurements").
 *
 * Tiles are visited persistently (grid = `ctas` programs, tile t = pid, pid + ctas, ...)
 * in groups of `group` tile rows so neighbouring CTAs share A and B in L2; ctas=0
 * launches one program per tile instead.  With cluster=2 the programs run in pairs (a
 * cluster) that take two tiles stacked along M at a time: they need the same B tile, so
 * each CTA TMA-loads one column half of it multicast into both CTAs' ring slot (half the
 * L2 reads of B), and a consumer gives a slot back to both producers.  With share=1 the
 * pair takes the same tile of two consecutive products of a batch sharing one A instead:
 * each CTA multicasts half of A's rows and loads its own B (a product past the batch
 * reads zeros and stores nothing).  Out-of-range rows
 * and columns read as zero (TMA), so M, N and K may be anything; TMA only needs the rows
 * of A and B 16-byte aligned, so they are lda and ldb elements apart (multiples of 8: K
 * and N rounded up by default; loom_gemm_run, templates/gemm_api.c, copies unaligned
 * contiguous operands into such padded ones), and C's rows too where the TMA store
 * writes them (tmastore=1; tmastore=0 stores from the registers at any N).  A batch runs
 * as more tiles; A may be shared by the whole batch (ashared=1, the IKBO weights case).
 */
#include "tpl.h"
#include "loom_pipe.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

enum { S_M, S_N, S_K, S_BATCH, S_DTYPE, S_ODTYPE, S_ASHARED, S_LDA, S_LDB };
enum { C_BM, C_BN, C_BK, C_STAGES, C_CWARPS, C_CTAS, C_GROUP, C_CONSUMERS, C_TMASTORE, C_CLUSTER, C_SHARE };
enum { COOPERATIVE = TPL_COOPERATIVE, PINGPONG = TPL_PINGPONG, SPLIT = TPL_SPLIT };

typedef struct g_cfg {
    int64_t M, N, K, batch;
    loom_dtype dt, odt;
    int ashared;
    int64_t lda, ldb; /* the row strides of A and B in elements (the shape's 0: K, N rounded up to 8) */
    int bm, bn, bk, stages, cwarps, ctas, group, consumers, tmastore, cluster;
    int share_a; /* cluster: 0 the pair shares B (tiles stacked along M), 1 A (consecutive products) */
} g_cfg;

/* A row stride given (> 0), or the columns rounded up to a multiple of 8 (0). */
static int64_t row_stride(int64_t given, int64_t cols) { return given > 0 ? given : tpl_pad8(cols); }

static g_cfg cfg_of(const int64_t *sh, const int64_t *cf)
{
    return (g_cfg){sh[S_M], sh[S_N], sh[S_K], sh[S_BATCH], (loom_dtype)sh[S_DTYPE], (loom_dtype)sh[S_ODTYPE],
                   (int)sh[S_ASHARED], row_stride(sh[S_LDA], sh[S_K]), row_stride(sh[S_LDB], sh[S_N]), (int)cf[C_BM], (int)cf[C_BN], (int)cf[C_BK], (int)cf[C_STAGES],
                   (int)cf[C_CWARPS], (int)cf[C_CTAS], (int)cf[C_GROUP], (int)cf[C_CONSUMERS],
                   (int)cf[C_TMASTORE], (int)cf[C_CLUSTER], (int)cf[C_SHARE]};
}

/* The units the programs (or, with clusters, the clusters) step through: tiles, or pairs
 * of tiles a cluster's CTAs take one each: vertically adjacent ones (sharing B), or with
 * share=1 the same tile of two consecutive products (sharing the batch's one A). */
static int64_t units(const g_cfg *c)
{
    if (c->share_a)
        return TPL_CDIV(c->M, c->bm) * TPL_CDIV(c->N, c->bn) * TPL_CDIV(c->batch, c->cluster);
    return TPL_CDIV(c->M, (int64_t)c->bm * c->cluster) * TPL_CDIV(c->N, c->bn) * c->batch;
}

#define CI(v) loom_const_i(k, LOOM_I32, (v))

/* The ring's tiles: A [rows, BK] (split: two halves a slot, one a replica), B [BK, BN]. */
enum { TILE_A, TILE_B };

/* What the tasks work with. */
typedef struct gk {
    const g_cfg *c;
    loom_val A, B;
    loom_ring ring;
    loom_sched sched;
    loom_epilogue epi;
    bool batched;
} gk;

/* The tile of unit t for this program: batch b, first row m0, first column n0 (grouped
 * order).  With clusters a unit is `cluster` tiles stacked along M, and rank r of the
 * cluster takes the r-th: the cluster's CTAs share the B tile. */
static void tile_coords(loom_kernel *k, const g_cfg *c, loom_val t, loom_val *b, loom_val *m0, loom_val *n0)
{
    int64_t um = (int64_t)c->bm * (c->share_a ? 1 : c->cluster); /* the unit's rows */
    loom_val tr, tc;
    loom_sched_grouped(k, t, TPL_CDIV(c->M, um), TPL_CDIV(c->N, c->bn), c->group, b, &tr, &tc);
    *m0 = loom_mul(k, tr, CI(um));
    *n0 = loom_mul(k, tc, CI(c->bn));
    if (c->cluster > 1 && c->share_a) /* rank r: product 2b + r (past the batch: TMA reads zeros, stores nothing) */
        *b = loom_add(k, loom_mul(k, *b, CI(c->cluster)), loom_cluster_rank(k));
    else if (c->cluster > 1)
        *m0 = loom_add(k, *m0, loom_mul(k, loom_cluster_rank(k), CI(c->bm)));
}

/* Offsets (x, y) into a 2-D tensor, or (b, x, y) into a batched one, written into o. */
static loom_val *offs_of(bool batched, loom_val b, loom_val x, loom_val y, loom_val o[3])
{
    if (!batched)
        return o[0] = x, o[1] = y, o;
    return o[0] = b, o[1] = x, o[2] = y, o;
}

/* Producer: for each unit, for each k step (a running count of ring uses over units),
 * A's box (split: its two row halves) and B's (multicast in parts over a cluster). */
static void producer(loom_kernel *k, const gk *g)
{
    const g_cfg *c = g->c;
    int64_t nk = TPL_CDIV(c->K, c->bk);
    bool split = c->consumers == SPLIT, bat_a = g->batched && !c->ashared;
    int arows = split ? c->bm / 2 : c->bm;
    loom_val zero = CI(0), one = CI(1);
    loom_region_op pt = loom_producer_begin(k);
    {
        loom_region_op tl = loom_sched_for(k, &g->sched, LOOM_NONE, 1, &zero);
        loom_val b, m0, n0, o[3];
        tile_coords(k, c, loom_for_iv(k, tl), &b, &m0, &n0);
        loom_val it0 = loom_for_arg(k, tl, 0);
        loom_region_op kl = loom_for_begin(k, zero, CI(nk), one, 0, NULL);
        {
            loom_val kk = loom_for_iv(k, kl);
            loom_val s = loom_ring_produce(k, &g->ring, loom_add(k, it0, kk), -1);
            loom_val k0 = loom_mul(k, kk, CI(c->bk));
            if (c->share_a) { /* the pair's one A tile, multicast in row halves; B its own */
                loom_ring_load_shared(k, &g->ring, s, TILE_A, 0, g->A, offs_of(false, b, m0, k0, o));
                loom_ring_load(k, &g->ring, s, TILE_B, 0, g->B, offs_of(g->batched, b, k0, n0, o));
            } else {
                for (int h = 0; h < (split ? 2 : 1); h++) {
                    loom_val m = h ? loom_add(k, m0, CI(arows)) : m0;
                    loom_ring_load(k, &g->ring, s, TILE_A, h, g->A, offs_of(bat_a, b, m, k0, o));
                }
                loom_ring_load_shared(k, &g->ring, s, TILE_B, 1, g->B, offs_of(g->batched, b, k0, n0, o));
            }
        }
        loom_for_end(k, kl, 0, NULL);
        loom_val next = loom_add(k, it0, CI(nk));
        loom_for_end(k, tl, 1, &next);
    }
    loom_task_end(k, pt);
}

/* The mainloop of one tile: ring uses it0 .. it0 + nk - 1.  Each waits for its slot,
 * issues the wgmmas (split: A is replica rep's half of the slot), lets one group stay in
 * flight and gives the previous use's slot back.  Returns the accumulator with the last
 * group still in flight. */
static loom_val mainloop(loom_kernel *k, const gk *g, loom_val it0, int bm, loom_val rep)
{
    const g_cfg *c = g->c;
    loom_val zero = CI(0), one = CI(1);
    loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(bm, c->bn));
    loom_region_op kl = loom_for_begin(k, zero, CI(TPL_CDIV(c->K, c->bk)), one, 1, &acc0);
    {
        loom_val kk = loom_for_iv(k, kl);
        loom_val it = loom_add(k, it0, kk);
        loom_val s = loom_ring_consume(k, &g->ring, it);
        loom_val a = loom_ring_view(k, &g->ring, s, TILE_A, c->consumers == SPLIT ? rep : LOOM_NONE);
        loom_val acc = loom_wgmma(k, a, loom_ring_view(k, &g->ring, s, TILE_B, LOOM_NONE), loom_for_arg(k, kl, 0));
        loom_wgmma_commit(k);
        loom_region_op w = loom_wgmma_wait(k, 1, 1, &acc);
        /* the previous use's wgmma is done: give its slot back */
        loom_region_op first = loom_if_begin(k, loom_cmp(k, LOOM_GT, kk, zero), 0);
        loom_ring_release(k, &g->ring, loom_ring_slot_of(k, &g->ring, loom_sub(k, it, one)));
        loom_if_end(k, first, 0, NULL);
        loom_val res = loom_wgmma_result(k, w, 0);
        loom_for_end(k, kl, 1, &res);
    }
    return loom_for_result(k, kl, 0);
}

/* After the mainloop of the tile whose uses start at it0: wait for its last wgmma group
 * and give the last slot back (right after the wait: the compiler issues the two
 * together); returns the tile cast to the output type. */
static loom_val finish(loom_kernel *k, const gk *g, loom_val acc, loom_val it0)
{
    const g_cfg *c = g->c;
    loom_val last = loom_ring_slot_of(k, &g->ring, loom_add(k, it0, CI(TPL_CDIV(c->K, c->bk) - 1)));
    loom_region_op w = loom_wgmma_wait(k, 0, 1, &acc);
    loom_ring_release(k, &g->ring, last);
    return loom_cast(k, loom_wgmma_result(k, w, 0), c->odt);
}

/* Cooperative: one consumer task (its warp groups split every tile by rows). */
static void consumers_cooperative(loom_kernel *k, const gk *g)
{
    const g_cfg *c = g->c;
    loom_val zero = CI(0);
    loom_region_op ct = loom_consumers_begin(k, c->cwarps, 1);
    {
        loom_region_op tl = loom_sched_for(k, &g->sched, LOOM_NONE, 1, &zero);
        loom_val b, m0, n0, o[3];
        tile_coords(k, c, loom_for_iv(k, tl), &b, &m0, &n0);
        loom_val it0 = loom_for_arg(k, tl, 0);
        loom_val out = finish(k, g, mainloop(k, g, it0, c->bm, LOOM_NONE), it0);
        loom_epilogue_store(k, &g->epi, offs_of(g->batched, b, m0, n0, o), out, LOOM_NONE);
        loom_val next = loom_add(k, it0, CI(TPL_CDIV(c->K, c->bk)));
        loom_for_end(k, tl, 1, &next);
        loom_epilogue_finish(k, &g->epi);
    }
    loom_task_end(k, ct);
}

/* Ping-pong: two consumer replicas take turns on whole tiles (the program's units
 * alternately), so one's epilogue runs while the other's mainloop keeps the tensor cores
 * busy; each stores through its own staging slot.  Each ring slot is consumed, and given
 * back, by one replica a use: the empty barriers count one arrival a phase. */
static void consumers_pingpong(loom_kernel *k, const gk *g, loom_pingpong *pp)
{
    const g_cfg *c = g->c;
    int64_t nk = TPL_CDIV(c->K, c->bk);
    loom_region_op ct = loom_consumers_begin(k, 4, 2);
    {
        loom_val rep = loom_pingpong_start(k, pp);
        loom_val it_first = loom_mul(k, rep, CI(nk));
        loom_region_op tl = loom_sched_for(k, &g->sched, rep, 1, &it_first);
        loom_val b, m0, n0, o[3];
        tile_coords(k, c, loom_for_iv(k, tl), &b, &m0, &n0);
        loom_val it0 = loom_for_arg(k, tl, 0);
        loom_pingpong_mma_begin(k, pp);
        loom_val acc = mainloop(k, g, it0, c->bm, rep);
        loom_pingpong_mma_end(k, pp);
        loom_val out = finish(k, g, acc, it0);
        loom_epilogue_store(k, &g->epi, offs_of(g->batched, b, m0, n0, o), out, rep);
        loom_pingpong_tile_end(k, pp);
        loom_val next = loom_add(k, it0, CI(2 * nk)); /* and the other replica's tile */
        loom_for_end(k, tl, 1, &next);
        loom_pingpong_finish(k, pp, loom_sched_odd(k, &g->sched));
        loom_epilogue_finish(k, &g->epi);
    }
    loom_task_end(k, ct);
}

/* Split: two replicas of one warp group share every tile by rows: replica rep owns rows
 * m0 + rep*BM/2 .., with its own accumulator and its own half of each A slot.  Both
 * consume every ring slot (the empty barriers count two arrivals a phase) but wait for
 * nothing else of each other, so they may drift apart by up to the ring's depth.  With
 * tmastore they stage their halves in one tile in turn, replica 0 first (the handover
 * epilogue), which puts replica 1 that much behind: the epilogue of one overlaps k steps
 * of the other. */
static void consumers_split(loom_kernel *k, const gk *g)
{
    const g_cfg *c = g->c;
    int64_t nk = TPL_CDIV(c->K, c->bk);
    int half = c->bm / 2;
    loom_val zero = CI(0);
    loom_region_op ct = loom_consumers_begin(k, 4, 2);
    {
        loom_val rep = loom_task_replica(k);
        loom_region_op tl = loom_sched_for(k, &g->sched, LOOM_NONE, 1, &zero);
        loom_val b, m0, n0, o[3];
        tile_coords(k, c, loom_for_iv(k, tl), &b, &m0, &n0);
        loom_val it0 = loom_for_arg(k, tl, 0);
        loom_val out = finish(k, g, mainloop(k, g, it0, half, rep), it0);
        loom_val m = loom_add(k, m0, loom_mul(k, rep, CI(half)));
        loom_val j = c->tmastore ? loom_div(k, it0, CI(nk)) : LOOM_NONE; /* the replica's tile count */
        loom_epilogue_store_turn(k, &g->epi, offs_of(g->batched, b, m, n0, o), out, rep, j);
        loom_val next = loom_add(k, it0, CI(nk));
        loom_for_end(k, tl, 1, &next);
    }
    loom_task_end(k, ct);
}

static loom_kernel *gemm_build(const g_cfg *c)
{
    loom_kernel *k = loom_kernel_create("gemm", LOOM_PIPE_PRODUCER_WARPS + c->cwarps);
    if (c->cluster > 1)
        loom_kernel_set_cluster(k, c->cluster);
    loom_pipe p = loom_pipe_create(k);
    gk g = {.c = c, .batched = c->batch > 1};
    bool bat_a = g.batched && !c->ashared;
    loom_shape ash = bat_a ? LOOM_SHAPE3(c->batch, c->M, c->K) : LOOM_SHAPE2(c->M, c->K);
    loom_shape bsh = g.batched ? LOOM_SHAPE3(c->batch, c->K, c->N) : LOOM_SHAPE2(c->K, c->N);
    loom_shape csh = g.batched ? LOOM_SHAPE3(c->batch, c->M, c->N) : LOOM_SHAPE2(c->M, c->N);
    /* A and B row-major with rows lda and ldb apart (TMA reads zeros past K and N) */
    int64_t ast[3] = {c->M * c->lda, c->lda, 1}, bst[3] = {c->K * c->ldb, c->ldb, 1};
    g.A = loom_arg_tensor_strided(k, "A", c->dt, ash, bat_a ? ast : ast + 1, LOOM_IN);
    g.B = loom_arg_tensor_strided(k, "B", c->dt, bsh, g.batched ? bst : bst + 1, LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", c->odt, csh, LOOM_OUT);

    bool split = c->consumers == SPLIT;
    int arows = split ? c->bm / 2 : c->bm; /* split: A slots hold half a tile's rows */
    /* A's rows are BK wide (128 bytes at BK=64, 64 at BK=32): the swizzle spans one row */
    loom_swizzle aswz = c->bk == 32 ? LOOM_SWIZZLE_64 : LOOM_SWIZZLE_128;
    loom_ring_tile tiles[2] = {{c->dt, LOOM_SHAPE2(arows, c->bk), split ? 2 : 1, aswz},
                               {c->dt, LOOM_SHAPE2(c->bk, c->bn), 1, LOOM_SWIZZLE_128}};
    g.ring = loom_ring_create(k, c->stages, split ? 2 : 1, 2, tiles); /* split: both replicas release */
    g.sched = loom_sched_static(k, units(c), c->ctas != 0);
    loom_pingpong pp = c->consumers == PINGPONG ? loom_pingpong_create(&p) : (loom_pingpong){0};
    loom_epilogue_kind ek = !c->tmastore                ? LOOM_EPI_REGISTERS
                            : split                     ? LOOM_EPI_HANDOVER
                                                        : LOOM_EPI_STAGED;
    g.epi = loom_epilogue_create(&p, ek, C, c->odt, LOOM_SHAPE2(arows, c->bn), c->consumers == PINGPONG ? 2 : 1,
                                 c->consumers == COOPERATIVE ? c->cwarps * 32 : 128);

    producer(k, &g);
    if (c->consumers == PINGPONG)
        consumers_pingpong(k, &g, &pp);
    else if (split)
        consumers_split(k, &g);
    else
        consumers_cooperative(k, &g);
    return k;
}
#undef CI

/* Why (shape, config) cannot be served, or NULL when it can. */
static const char *why_not(const g_cfg *c, char *buf, size_t n)
{
    if (c->dt != LOOM_F16 && c->dt != LOOM_BF16)
        return "dtype must be f16 or bf16 (the tensor-core inputs)";
    if (c->odt != LOOM_F16 && c->odt != LOOM_BF16 && c->odt != LOOM_F32)
        return "odtype must be f16, bf16 or f32";
    if (c->M < 1 || c->N < 1 || c->K < 1 || c->batch < 1)
        return "M, N, K and batch must be positive";
    if (c->lda < c->K || c->ldb < c->N)
        return "lda must be at least K and ldb at least N (the rows of A and B)";
    if (c->lda % 8 || c->ldb % 8)
        return "lda and ldb must be multiples of 8 (TMA needs 16-byte aligned rows; loom_gemm_run copies "
               "unaligned operands into padded ones)";
    if (c->tmastore && c->N % 8)
        return "tmastore=1 needs N a multiple of 8 (the TMA store writes 16-byte aligned rows of C); use "
               "tmastore=0, which stores C from the registers";
    if (c->bk != 64 && c->bk != 32)
        return "BK must be 64 or 32 (A's row is then one 128- or 64-byte swizzle span of f16/bf16)";
    const char *w = tpl_why_not_consumers(c->cwarps, c->consumers, SPLIT, c->ctas, c->bm, c->bn);
    if (w)
        return w;
    if (c->stages < 2 || c->stages > 12)
        return "stages must be 2 to 12";
    if (c->tmastore != 0 && c->tmastore != 1)
        return "tmastore must be 0 or 1";
    int64_t ring = (int64_t)c->stages * (c->bm + c->bn) * c->bk * 2;
    int64_t stage = !c->tmastore ? 0
                    : (int64_t)(c->consumers == PINGPONG ? 2 : 1) * (c->consumers == SPLIT ? c->bm / 2 : c->bm) *
                          c->bn * (int64_t)loom_dtype_size(c->odt);
    if (ring + stage > 226 * 1024) { /* 227 KiB a CTA, less room for the barriers */
        if (stage)
            snprintf(buf, n,
                     "the ring (%lld bytes) and the output staging buffer (%lld) need more than 226 KiB of "
                     "shared memory; use fewer stages, smaller tiles or tmastore=0",
                     (long long)ring, (long long)stage);
        else
            snprintf(buf, n,
                     "the ring needs %lld bytes of shared memory (over 226 KiB); use fewer stages or smaller tiles",
                     (long long)ring);
        return buf;
    }
    if (c->ctas < 0 || c->group < 1)
        return "ctas must be >= 0 and group >= 1";
    if (c->cluster != 1 && c->cluster != 2)
        return "cluster must be 1 or 2 (CTAs sharing the B tile)";
    if (c->share_a != 0 && c->share_a != 1)
        return "share must be 0 (a cluster's pair shares B) or 1 (it shares A)";
    if (c->share_a && c->cluster == 1)
        return "share=1 needs cluster=2 (a pair of CTAs to share A)";
    if (c->share_a && (c->batch == 1 || !c->ashared))
        return "share=1 needs a batch sharing one A (batch > 1, ashared=1): the pair takes consecutive products";
    if (c->share_a && c->consumers == SPLIT)
        return "share=1 takes consumers 0 or 1 (split loads A in row halves of its own)";
    if (c->cluster > 1 && !c->share_a && c->bn < 128)
        return "cluster=2 needs BN >= 128: each CTA multicasts half of B's 64-column chunks";
    if (c->cluster > 1 && c->ctas % c->cluster)
        return "with clusters, ctas must be a multiple of the cluster size";
    return NULL;
}

static int valid(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    g_cfg c = cfg_of(sh, cf);
    char buf[200];
    const char *w = why_not(&c, buf, sizeof buf);
    if (w && why && n)
        snprintf(why, n, "%s", w);
    return w == NULL;
}

static loom_kernel *build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    g_cfg c = cfg_of(sh, cf);
    char buf[200];
    const char *w = why_not(&c, buf, sizeof buf);
    if (w)
        return tpl_refuse(err, n, "%s", w);
    return gemm_build(&c);
}

/* Rank configs before timing: waves of tiles over 132 SMs, penalising small tiles. */
static double cost(const int64_t *sh, const int64_t *cf)
{
    g_cfg c = cfg_of(sh, cf);
    double t = (double)units(&c) * c.cluster, ctas = c.ctas ? c.ctas : 132;
    double waves = t / ctas;
    double per_tile = (double)c.bm * c.bn * c.K * (1.0 + 64.0 / c.bm + 64.0 / c.bn);
    return (waves < 1 ? 1 : waves + (waves - (int64_t)waves > 0 ? 1 : 0)) * per_tile / (c.stages >= 3 ? 1.0 : 1.3);
}

static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    g_cfg c = cfg_of(sh, cf);
    int64_t u = units(&c), cl = c.ctas / c.cluster; /* clusters */
    g[0] = (int)((c.ctas && cl < u ? cl : u) * c.cluster);
    g[1] = g[2] = 1;
}

/* The inputs fill every element their buffers hold (the padding of rows too: the kernel
 * must never read it). */
static void init(const int64_t *sh, void *const *host, uint64_t seed)
{
    int64_t M = sh[S_M], N = sh[S_N], K = sh[S_K], nb = sh[S_BATCH];
    int64_t na = nb > 1 && !sh[S_ASHARED] ? nb : 1;
    int64_t lda = row_stride(sh[S_LDA], K), ldb = row_stride(sh[S_LDB], N);
    tpl_fill(host[0], (loom_dtype)sh[S_DTYPE], (na - 1) * M * lda + (M - 1) * lda + K, -1, 1, &seed);
    tpl_fill(host[1], (loom_dtype)sh[S_DTYPE], (nb - 1) * K * ldb + (K - 1) * ldb + N, -1, 1, &seed);
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    int64_t M = sh[S_M], N = sh[S_N], K = sh[S_K], nb = sh[S_BATCH];
    int64_t lda = row_stride(sh[S_LDA], K), ldb = row_stride(sh[S_LDB], N);
    loom_dtype dt = (loom_dtype)sh[S_DTYPE], odt = (loom_dtype)sh[S_ODTYPE];
    bool ash = nb == 1 || sh[S_ASHARED];
    double *row = malloc((size_t)N * sizeof *row);
    if (!row)
        return;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t m = 0; m < M; m++) {
            for (int64_t j = 0; j < N; j++)
                row[j] = 0;
            for (int64_t q = 0; q < K; q++) {
                double a = tpl_get(host[0], dt, (ash ? 0 : b * M * lda) + m * lda + q);
                for (int64_t j = 0; j < N; j++)
                    row[j] += a * tpl_get(host[1], dt, b * K * ldb + q * ldb + j);
            }
            for (int64_t j = 0; j < N; j++)
                tpl_set(ref[2], odt, b * M * N + m * N + j, row[j]);
        }
    free(row);
}

/* The error model (docs/checks.md): C[b,m,n] sums K exact products in f32, then rounds to
 * odtype once. */
static void bound(const int64_t *sh, void *const *host, void *const *ref, double *const *bnd)
{
    int64_t M = sh[S_M], N = sh[S_N], K = sh[S_K], nb = sh[S_BATCH];
    int64_t lda = row_stride(sh[S_LDA], K), ldb = row_stride(sh[S_LDB], N);
    loom_dtype dt = (loom_dtype)sh[S_DTYPE], odt = (loom_dtype)sh[S_ODTYPE];
    bool ash = nb == 1 || sh[S_ASHARED];
    double *mag = malloc((size_t)N * sizeof *mag);
    if (!mag || !bnd[2])
        goto done;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t m = 0; m < M; m++) {
            for (int64_t j = 0; j < N; j++)
                mag[j] = 0;
            for (int64_t q = 0; q < K; q++) {
                double a = fabs(tpl_get(host[0], dt, (ash ? 0 : b * M * lda) + m * lda + q));
                for (int64_t j = 0; j < N; j++)
                    mag[j] += a * fabs(tpl_get(host[1], dt, b * K * ldb + q * ldb + j));
            }
            for (int64_t j = 0; j < N; j++) {
                int64_t e = b * M * N + m * N + j;
                bnd[2][e] = loom_error_bound(odt, tpl_get(ref[2], odt, e), loom_f32_sum_error(K, mag[j]));
            }
        }
done:
    free(mag);
}

const loom_template tpl_def_gemm = {
    .name = "gemm",
    .doc = "C[b] = A[b] @ B[b] on the tensor cores (TMA ring, producer/consumer warp groups, wgmma)",
    .nshape = 9,
    .shape = {{"M", 512, "rows of A and C"},
              {"N", 512, "columns of B and C (any; tmastore=1 needs a multiple of 8)"},
              {"K", 512, "columns of A, rows of B (any)"},
              {"batch", 1, "independent products (B and C batched)"},
              {"dtype", LOOM_F16, "input type: f16 or bf16"},
              {"odtype", LOOM_F16, "output type: f16, bf16 or f32"},
              {"ashared", 1, "1: A [M,K] shared by the batch; 0: A batched too"},
              {"lda", 0, "elements from one row of A to the next, a multiple of 8 (0: K rounded up to 8; "
                         "loom_gemm_run pads contiguous rows into that)"},
              {"ldb", 0, "elements from one row of B to the next, a multiple of 8 (0: N rounded up to 8)"}},
    .nconfig = 11,
    .config = {{"BM", 64, "tile rows (64 or 128 per consumer warp group)", 3, {64, 128, 256}},
               {"BN", 256, "tile columns (64, 128, 256)", 3, {64, 128, 256}},
               {"BK", 64, "k step (64, or 32: half the bytes a ring slot, twice the slots for the same "
                          "shared memory; slower on the H200)"},
               {"stages", 4, "ring slots (powers of two ran faster on the H200)", 3, {2, 3, 4}},
               {"cwarps", 4, "consumer warps (4: one warp group, 8: two)", 2, {4, 8}},
               {"ctas", 132, "persistent CTAs (0: one CTA per tile)", 1, {132}},
               {"group", 32, "tile rows per L2 group", 2, {8, 32}},
               {"consumers", 0, "how the consumer warp groups share the tiles: 0 cooperative (one task "
                                "splits each tile), 1 ping-pong (two take turns on whole tiles), 2 split "
                                "(two share each tile by rows and run free of each other; with BM=128 the "
                                "fastest on large squares on the H200)", 3, {0, 1, 2}},
               {"tmastore", 1, "1: the epilogue stages the tile in shared memory and writes it with one TMA "
                               "store; 0: it stores straight from the accumulator registers", 2, {1, 0}},
               {"cluster", 1, "CTAs a cluster (1 or 2): the two tiles of a cluster are stacked along M and "
                              "share B, each CTA multicasting half of it (half the L2 reads of B); 8-17% slower "
                              "than 1 at the IKBO shape on the H200, 0.72 -> 0.90 of cuBLAS at "
                              "433x1000x1184x64 on the H100 (bench/RESULTS.md, session 14)", 2, {1, 2}},
               {"share", 0, "with cluster=2, what the pair shares: 0 B (its two tiles stacked along M), 1 A "
                            "(the same tile of two consecutive products of a batch sharing one A; each CTA "
                            "multicasts half of A's rows)", 2, {0, 1}}},
    .valid = valid,
    .cost = cost,
    .build = build,
    .grid = grid,
    .init = init,
    .reference = reference,
    .atol = 2e-2,
    .rtol = 2e-2,
    .bound = bound,
};
