/*
 * gemm.c -- C[b] = A[b] @ B[b] on Hopper's tensor cores: a warp-specialized kernel.
 *
 * The algorithm, on the pipeline layer (include/loom_pipe.h, which owns the barriers,
 * phases and budgets):
 *
 *   ring     `stages` slots of an A tile [BM, BK] and a B tile [BK, BN] (128-byte
 *            swizzle; A's 64-byte at BK=32), or with btrans=1 [BN, BK] (swizzled as A)
 *   producer for each output tile it owns, for each k step (a running count of ring uses
 *            over tiles): produce the slot, TMA A and B into it
 *   consumer for each tile: acc = 0; for each k step: consume the slot, wgmma, commit,
 *            wait until one group is in flight, release the previous slot; after the
 *            loop wait for all and release the last slot (the layer's loom_mainloop)
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
 *                  or first ones of the next tile; the transposed product's groups
 *                  instead store their [BM, 64] each in parts of 32 (or 16) rows,
 *                  and f16 or bf16 ones with BN >= 256 their [BM / 2, BN] in parts of
 *                  64 columns, through two small staging slots of their own
 *                  (split_part), so neither waits for the other's store
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
 *
 * M and batch are run-time dims: the kernel's first two arguments, i32 values given at each
 * launch (1 up to the built shape's M and batch), so one compiled kernel serves every
 * request up to them; N, K, lda and ldb are static.  The arguments are, in order:
 *
 *   M, batch   the launch's rows of A and C and products (loom_arg_dim)
 *   A          [M, K] (batch 1, or ashared=1) or [batch, M, K], rows lda apart
 *   B          [K, N] (batch 1) or [batch, K, N], rows ldb apart; with btrans=1 [N, K] or
 *              [batch, N, K]
 *
 * FP8 (dtype e4m3 or e5m2) needs btrans=1: FP8 wgmma reads both operands K-major, so B's
 * ring tile is [BN, BK] like A's, its rows one swizzle span of BK bytes (BK=128: 128
 * bytes; BK=64: 64).  The tensor cores accumulate FP8 products with reduced precision,
 * which the bound takes (docs/checks.md, "FP8").  The shape's promote=P (elements of K, a
 * multiple of BK) asks for promotion: the pipeline layer's mainloop adds the tensor
 * cores' partial sum into an f32 accumulator every P / BK k steps (loom_pipe.h,
 * "Promotion"), the bound is the promoted one, and configs whose two accumulators do not
 * fit in registers are refused (why_not_promote).  It is a shape key, not a config knob,
 * because it is part of what the caller asks for: the bound (which sees only the shape)
 * follows it, and the tuner never trades it for speed.
 *   C          [M, N] or [batch, M, N]
 *   scale_a, scale_b   with scaled=1: f32 scalars, C = scale_a * scale_b * (A @ B),
 *              multiplied into the f32 accumulator before the cast (per-tensor scales);
 *              with scaled=2: f32 vectors scale_a [M] and scale_b [N], C[m, n] =
 *              scale_a[m] * scale_b[n] * (A @ B)[m, n] (per-row and per-column scales,
 *              loaded in the accumulator's slices in the epilogue; batch 1, trans=0);
 *              with scaled=3 (block-wise, FP8 with promote=128): f32 scale_a [KB, M]
 *              (1 x 128 blocks of A: row m's scale of K block kb at [kb, m], rows M_max
 *              apart; the argument is KB * M_max floats) and scale_b
 *              [NB, KB] (128 x 128 blocks of B, [N, K]), KB = cdiv(K, 128), NB =
 *              cdiv(N, 128): C[m, n] = sum over kb of scale_a[kb, m] scale_b[n / 128, kb]
 *              (A @ B over block kb), each block's sum scaled as it is promoted
 *
 * The strides stay those of the built shape: in a batch, product b of A (ashared=0) and
 * of C starts at row b * M_max (the built M), and a launch at a smaller M uses the first
 * M rows of each.  From M and batch each task derives, once at its top, the units of a
 * product and of the launch (the scheduler's count: loom_sched_set_count, its loops built
 * for the units of the built shape); a unit's coordinates come from them once a unit, and
 * the mainloop is the one of a static M.  The grid follows the launch by
 * gemm_grid_rule: without a batch, the units at M (capped at ctas); with a batch, the
 * units at the launch's batch and the built M, so a launch at a smaller M may start
 * programs that find no unit (they return at once).
 */
#include "tpl.h"
#include "loom_pipe.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The template's table (loom_tune.h, "A template's table"): X(KEY, FIELD, TYPE, DEFAULT,
 * DOC, candidates or loom_param fields).  The index enums, g_cfg's fields, cfg_of and the
 * registry entry's parameters are made from it. */
#define GEMM_SHAPE(X)                                                                                       \
    X(M, M, int64_t, 512, "rows of A and C: the most a launch takes (its kernel argument M, 1 to this)",   \
      .runtime = 1)                                                                                        \
    X(N, N, int64_t, 512, "columns of B and C (any; tmastore=1 needs a multiple of 8)")                    \
    X(K, K, int64_t, 512, "columns of A, rows of B (any)")                                                 \
    X(batch, batch, int64_t, 1,                                                                            \
      "independent products (B and C batched): the most a launch takes (its kernel argument "              \
      "batch, 1 to this; 1 builds an unbatched kernel)", .runtime = 1)                                     \
    X(dtype, dt, loom_dtype, LOOM_F16,                                                                     \
      "input type: f16, bf16, or e4m3 or e5m2 (FP8: needs btrans=1, and BK=128 fills a 128-byte "         \
      "swizzle row)")                                                                                      \
    X(odtype, odt, loom_dtype, LOOM_F16, "output type: f16, bf16 or f32")                                  \
    X(ashared, ashared, int, 1, "1: A [M,K] shared by the batch; 0: A batched too")                       \
    X(lda, lda, int64_t, 0,                                                                                \
      "elements from one row of A to the next, 16 bytes' worth a multiple (0: K rounded up to that; "      \
      "loom_gemm_run pads contiguous rows into that)")                                                     \
    X(ldb, ldb, int64_t, 0,                                                                                \
      "elements from one row of B to the next, 16 bytes' worth a multiple (0: B's row, N or with "         \
      "btrans=1 K, rounded up to that)")                                                                   \
    X(btrans, btrans, int, 0,                                                                              \
      "0: B is [K, N]; 1: B is [N, K] (K-major, read transposed; FP8 needs it: its wgmma has no "          \
      "transpose)")                                                                                        \
    X(promote, promote, int, 0,                                                                            \
      "FP8 accumulation: 0 the tensor cores add the whole K (fast accumulation); P > 0 every P elements "  \
      "of K (a multiple of BK) their partial sum is added into an f32 accumulator in registers (128: as "  \
      "CUTLASS and DeepGEMM do); the bound follows it (docs/checks.md, \"FP8\")")                          \
    X(scaled, scaled, int, 0,                                                                              \
      "1: C = scale_a * scale_b * (A @ B), two f32 scalar arguments after C (per-tensor FP8 scales), "     \
      "multiplied into the f32 accumulator before the cast; 2: per-row and per-column scales, f32 "        \
      "vectors scale_a [M] and scale_b [N] after C, C[m, n] = scale_a[m] scale_b[n] (A @ B)[m, n] (batch 1); " \
      "3: block-wise (FP8, promote=128, BN 64, 128 or 192): scale_a [cdiv(K,128), M] per 1 x 128 block of A and " \
      "scale_b [cdiv(N,128), cdiv(K,128)] per 128 x 128 block of B, each block's sum scaled as it is promoted")
#define GEMM_CONFIG(X)                                                                                     \
    X(BM, bm, int, 64, "tile rows (64 or 128 per consumer warp group; trans=1: a multiple of 8 up to 256)", 64, \
      128, 224, 256)                                                                                       \
    X(BN, bn, int, 256,                                                                                    \
      "tile columns (64, 128, 192, 256; 192: the widest tile whose two accumulators fit with "            \
      "promote)", 64, 128, 192, 256)                                                              \
    X(BK, bk, int, 64,                                                                                     \
      "k step (64, or 32: half the bytes a ring slot, twice the slots for the same "                       \
      "shared memory, slower on the H200; FP8: 128 or 64, a 128- or 64-byte row)", 64, 128)               \
    X(stages, stages, int, 4, "ring slots (powers of two ran faster on the H200)", 2, 3, 4)               \
    X(cwarps, cwarps, int, 4, "consumer warps (4: one warp group, 8: two)", 4, 8)                          \
    X(ctas, ctas, int, 132, "persistent CTAs (0: one CTA per tile)", 132)                                  \
    X(group, group, int, 32, "tile rows per L2 group", 8, 32)                                              \
    X(consumers, consumers, int, 0,                                                                        \
      "how the consumer warp groups share the tiles: 0 cooperative (one task "                             \
      "splits each tile), 1 ping-pong (two take turns on whole tiles), 2 split "                           \
      "(two share each tile by rows and run free of each other; with BM=128 the "                          \
      "fastest on large squares on the H200)", 0, 1, 2)                                                    \
    X(tmastore, tmastore, int, 1,                                                                          \
      "1: the epilogue stages the tile in shared memory and writes it with one TMA "                       \
      "store; 0: it stores straight from the accumulator registers", 1, 0)                                 \
    X(cluster, cluster, int, 1,                                                                            \
      "CTAs a cluster (1 or 2): the two tiles of a cluster are stacked along M and "                       \
      "share B, each CTA multicasting half of it (half the L2 reads of B); 8-17% slower "                  \
      "than 1 at the IKBO shape on the H200, 0.72 -> 0.90 of cuBLAS at "                                   \
      "433x1000x1184x64 on the H100 (bench/RESULTS.md, session 14)", 1, 2)                                 \
    X(share, share_a, int, 0,                                                                              \
      "with cluster=2, what the pair shares: 0 B (its two tiles stacked along M), 1 A "                    \
      "(the same tile of two consecutive products of a batch sharing one A; each CTA "                     \
      "multicasts half of A's rows; with trans=1 too, BM a multiple of 16)", 0, 1)                         \
    X(trans, trans, int, 0,                                                                                \
      "1: the transposed product C^T = B^T A^T, as cuBLAS runs a small M: wgmma's M side is "              \
      "N (two warp groups of 64 columns: BN=128, cwarps=8, consumers=2) and its N side M (BM "              \
      "any multiple of 8 up to 256: 224 covers the IKBO M=433 in two tiles, 448 rows)", 0, 1)              \
    X(BN2, bn2, int, 0,                                                                                    \
      "0: every tile BN columns; 64 or 128 (under BN): the tile columns past `wide` are BN2 columns, "     \
      "so that the last wave of tiles is not mostly idle SMs (consumers 0 or 2, trans=0, cluster=1, "      \
      "batch=1; each program's BN tiles run first)")                                                     \
    X(wide, wide, int, 0, "with BN2: the tile columns of BN from column 0 (at least 1, fewer than N takes)")

enum { GEMM_SHAPE(LOOM_S_INDEX) S_COUNT };
enum { GEMM_CONFIG(LOOM_C_INDEX) C_COUNT };
enum { COOPERATIVE = TPL_COOPERATIVE, PINGPONG = TPL_PINGPONG, SPLIT = TPL_SPLIT };

/* A shape and config unpacked.  lda and ldb are the row strides of A and B in elements
 * (the shape's 0: K, N rounded up to 8); share_a: with clusters, 0 the pair shares B
 * (tiles stacked along M), 1 A (consecutive products). */
typedef struct g_cfg {
    GEMM_SHAPE(LOOM_FIELD)
    GEMM_CONFIG(LOOM_FIELD)
} g_cfg;

/* A row stride given (> 0), or the columns of `es`-byte elements rounded up to 16 bytes
 * (0): a multiple of 8 for f16/bf16, of 16 for FP8. */
static int64_t row_stride(int64_t given, int64_t cols, int64_t es)
{
    int64_t q = es > 0 && es <= 16 ? 16 / es : 1;
    return given > 0 ? given : (cols + q - 1) / q * q;
}

/* The columns of B as stored: N, or K with btrans=1. */
static int64_t b_cols(const g_cfg *c) { return c->btrans ? c->K : c->N; }

/* The shape's fields, the row strides resolved (the config's fields left zero). */
static g_cfg shape_of(const int64_t *sh)
{
    g_cfg c = {0};
    LOOM_UNPACK(GEMM_SHAPE, &c, sh);
    int64_t es = (int64_t)loom_dtype_size(c.dt);
    c.lda = row_stride(c.lda, c.K, es);
    c.ldb = row_stride(c.ldb, b_cols(&c), es);
    return c;
}

static g_cfg cfg_of(const int64_t *sh, const int64_t *cf)
{
    g_cfg c = shape_of(sh);
    LOOM_UNPACK(GEMM_CONFIG, &c, cf);
    return c;
}

/* FP8 inputs (e4m3 or e5m2)? */
static bool fp8_in(const g_cfg *c) { return c->dt == LOOM_E4M3 || c->dt == LOOM_E5M2; }

/* The rows of a unit: a tile's, or with clusters sharing B the cluster's tiles stacked
 * along M. */
static int64_t unit_rows(const g_cfg *c) { return (int64_t)c->bm * (c->share_a ? 1 : c->cluster); }

/* The tile columns of BN (with BN2: `wide` of them, from column 0) and of BN2 (the rest
 * of N; none without BN2). */
static int64_t cols_wide(const g_cfg *c) { return c->bn2 ? c->wide : TPL_CDIV(c->N, c->bn); }
static int64_t cols_narrow(const g_cfg *c) { return c->bn2 ? TPL_CDIV(c->N - (int64_t)c->wide * c->bn, c->bn2) : 0; }
static int64_t tile_cols(const g_cfg *c) { return cols_wide(c) + cols_narrow(c); }

/* The units of a product (unit rows of M by tile columns of N). */
static int64_t units_per_product(const g_cfg *c) { return TPL_CDIV(c->M, unit_rows(c)) * tile_cols(c); }

/* The products a unit row takes: one, or with share=1 a pair (rounded up). */
static int64_t product_units(const g_cfg *c) { return c->share_a ? TPL_CDIV(c->batch, c->cluster) : c->batch; }

/* The units the programs (or, with clusters, the clusters) step through at the built
 * shape (M and batch at their maxima): tiles, or pairs of tiles a cluster's CTAs take one
 * each: vertically adjacent ones (sharing B), or with share=1 the same tile of two
 * consecutive products (sharing the batch's one A).  A launch takes the units at its own
 * M and batch (the count gemm_build gives the schedule). */
static int64_t units(const g_cfg *c) { return units_per_product(c) * product_units(c); }

#define CI(v) loom_const_i(k, LOOM_I32, (v))

/* The ring's tiles: A [rows, BK] (split: two halves a slot, one a replica), B [BK, BN];
 * with scaled=3, A's rows' scales of the step's K block, f32 [rows] (split: halves). */
enum { TILE_A, TILE_B, TILE_SA };

/* What the tasks work with. */
typedef struct gk {
    const g_cfg *c;
    loom_val M, batch;   /* the launch's dims (the kernel's first arguments) */
    /* each task's (launch_units): the launch's unit rows of a product, units of a product
     * (tm x the tile columns), and the rows of the last group of unit rows (1 .. group)
     * with its reciprocal (TAIL_SHIFT fixed point; LOOM_NONE where it is not used) */
    loom_val tm, tiles, tail, tail_inv;
    loom_val A, B;
    loom_val scale_a, scale_b; /* scaled=1: the f32 scalars; 2: the vectors [M], [N]; 3: the blocks' (else LOOM_NONE) */
    loom_ring ring;
    loom_sched sched;
    loom_epilogue epi;
    bool batched;
} gk;

/* A quotient by the run-time tail of the grouped order without a division a unit:
 * q = (n * inv) >> TAIL_SHIFT with inv = 2^TAIL_SHIFT / d + 1 is n / d exactly while
 * n * d < 2^TAIL_SHIFT (inv * d = 2^TAIL_SHIFT + e, 0 < e <= d, so the error n e / 2^TAIL_SHIFT
 * stays below 1 / d of a step), and n * inv stays below 2^31.  Here n < group * tile
 * columns and d <= group; tail_exact says whether the built shape keeps both bounds (else
 * a division it is). */
enum { TAIL_SHIFT = 16 };

static bool tail_exact(const g_cfg *c)
{
    int64_t tn = cols_wide(c) > cols_narrow(c) ? cols_wide(c) : cols_narrow(c), per_group = (int64_t)c->group * tn;
    return per_group * c->group < (INT64_C(1) << TAIL_SHIFT) && per_group * ((INT64_C(1) << TAIL_SHIFT) + 1) < INT32_MAX;
}

/* The grouped (L2-friendly) order of loom_sched_grouped within a product (or, with BN2, a
 * region of tn tile columns of it) whose unit rows (g->tm) are known at run time: unit r
 * is unit row *tr and tile column *tc, `group` unit rows at a time.  A group has `group`
 * rows but the last (g->tail); the quotients are by the constant group or, in the last
 * group, by the tail's reciprocal: no division by a run-time value a unit.  With one tile
 * column the row is r itself. */
static void grouped(loom_kernel *k, const gk *g, loom_val r, int64_t tn, loom_val *tr, loom_val *tc)
{
    const g_cfg *c = g->c;
    int64_t per_group = (int64_t)c->group * tn;
    if (tn == 1) { /* r = first + in with in < the group's rows: row r, column 0 */
        *tr = r;
        *tc = CI(0);
        return;
    }
    loom_val first = loom_mul(k, loom_div(k, r, CI(per_group)), CI(c->group));
    loom_val in = loom_rem(k, r, CI(per_group));
    loom_val full = loom_cmp(k, LOOM_LE, loom_add(k, first, CI(c->group)), g->tm);
    loom_val qt = g->tail_inv ? loom_div(k, loom_mul(k, in, g->tail_inv), CI(INT64_C(1) << TAIL_SHIFT))
                              : loom_div(k, in, g->tail);
    loom_val q = loom_select(k, full, loom_div(k, in, CI(c->group)), qt);
    loom_val gsize = loom_select(k, full, CI(c->group), g->tail);
    *tr = loom_add(k, first, loom_sub(k, in, loom_mul(k, q, gsize)));
    *tc = q;
}

/* The tile of the program's unit r of product b: first row m0, first column n0 (grouped
 * order), and the product (*b).  With clusters a unit is `cluster` tiles stacked along M,
 * and rank r of the cluster takes the r-th: the cluster's CTAs share the B tile; with
 * share=1 the same tile of products 2b and 2b + 1. */
static void tile_coords(loom_kernel *k, const gk *g, loom_val r, loom_val *b, loom_val *m0, loom_val *n0)
{
    const g_cfg *c = g->c;
    int64_t um = unit_rows(c);
    loom_val tr, tc;
    grouped(k, g, r, cols_wide(c), &tr, &tc);
    *m0 = loom_mul(k, tr, CI(um));
    *n0 = loom_mul(k, tc, CI(c->bn));
    if (c->cluster > 1 && c->share_a) /* rank r: product 2b + r (past the batch: TMA reads zeros, stores nothing) */
        *b = loom_add(k, loom_mul(k, *b, CI(c->cluster)), loom_cluster_rank(k));
    else if (c->cluster > 1)
        *m0 = loom_add(k, *m0, loom_mul(k, loom_cluster_rank(k), CI(c->bm)));
}

/* At the top of a task (divisions are task work): a copy of g with the launch's units,
 * from its M and batch: unit rows at M (rounded up) by the tile columns, by the products
 * (share=1: pairs of them), and the schedule's count set to them (its loops are built for
 * the units at the built shape); the grouped order's last group and its reciprocal. */
static gk launch_units(loom_kernel *k, const gk *g0)
{
    gk g = *g0;
    const g_cfg *c = g.c;
    int64_t tn = tile_cols(c);
    g.tm = loom_div(k, loom_add(k, g.M, CI(unit_rows(c) - 1)), CI(unit_rows(c)));
    g.tiles = loom_mul(k, g.tm, CI(tn));
    loom_val count = g.tiles;
    if (g.batched)
        count = loom_mul(k, count,
                         c->share_a ? loom_div(k, loom_add(k, g.batch, CI(c->cluster - 1)), CI(c->cluster)) : g.batch);
    loom_sched_set_count(&g.sched, count);
    g.tail = g.tail_inv = LOOM_NONE;
    if (tn > 1) {
        g.tail = loom_add(k, loom_rem(k, loom_sub(k, g.tm, CI(1)), CI(c->group)), CI(1));
        if (tail_exact(c))
            g.tail_inv = loom_add(k, loom_div(k, CI(INT64_C(1) << TAIL_SHIFT), g.tail), CI(1));
    }
    return g;
}

/* A task's loop over its units (the schedule's loop, for the task's role; replica:
 * ping-pong's, or LOOM_NONE), carrying the ring's use count and, in a batch, the unit's
 * product and its unit within the product: those start from the task's first unit and
 * move by its stride without a division a unit (the stride's products and remainder are
 * divided out once). */
typedef struct unit_loop {
    loom_sched_loop loop;
    loom_val it;     /* the ring's uses before this unit */
    loom_val b, r;   /* the unit's product and its unit within the product */
    loom_val db, dr; /* the stride's whole products and remainder */
} unit_loop;

static unit_loop units_begin(loom_kernel *k, const gk *g, int role, loom_val replica, loom_val it0)
{
    unit_loop u = {0};
    if (!g->batched) {
        u.loop = loom_sched_begin(k, &g->sched, role, replica, 1, &it0);
        u.it = loom_sched_arg(&u.loop, 0);
        u.b = CI(0);
        u.r = loom_sched_unit(&u.loop);
        return u;
    }
    /* the loop's first unit and stride, as the schedule's loop takes them (ping-pong:
     * replica r from the program's r-th unit, every other one) */
    loom_val first, step;
    loom_sched_range(k, &g->sched, &first, &step);
    if (replica) {
        first = loom_add(k, first, loom_mul(k, replica, step));
        step = loom_mul(k, step, CI(2));
    }
    loom_val b0 = loom_div(k, first, g->tiles);
    u.db = loom_div(k, step, g->tiles);
    u.dr = loom_sub(k, step, loom_mul(k, u.db, g->tiles));
    loom_val init[3] = {it0, b0, loom_sub(k, first, loom_mul(k, b0, g->tiles))};
    u.loop = loom_sched_begin(k, &g->sched, role, replica, 3, init);
    u.it = loom_sched_arg(&u.loop, 0);
    u.b = loom_sched_arg(&u.loop, 1);
    u.r = loom_sched_arg(&u.loop, 2);
    return u;
}

/* The loop's end: the ring's uses after the unit, and the next unit's product and unit. */
static void units_end(loom_kernel *k, const gk *g, unit_loop *u, loom_val next_it)
{
    if (!g->batched) {
        loom_sched_end(k, &u->loop, &next_it);
        return;
    }
    loom_val r = loom_add(k, u->r, u->dr), b = loom_add(k, u->b, u->db); /* r < 2 tiles */
    loom_val wrap = loom_cmp(k, LOOM_GE, r, g->tiles);
    loom_val y[3] = {next_it, loom_select(k, wrap, loom_add(k, b, CI(1)), b),
                     loom_select(k, wrap, loom_sub(k, r, g->tiles), r)};
    loom_sched_end(k, &u->loop, y);
}

/* Offsets (x, y) into a 2-D tensor, or (b, x, y) into a batched one, written into o. */
static loom_val *offs_of(bool batched, loom_val b, loom_val x, loom_val y, loom_val o[3])
{
    if (!batched)
        return o[0] = x, o[1] = y, o;
    return o[0] = b, o[1] = x, o[2] = y, o;
}

/* The offsets of B's tile at k0, n0 of product b: [K, N] or with btrans [N, K]. */
static loom_val *b_offs(const gk *g, loom_val b, loom_val k0, loom_val n0, loom_val o[3])
{
    return g->c->btrans ? offs_of(g->batched, b, n0, k0, o) : offs_of(g->batched, b, k0, n0, o);
}

/* A task's work on one tile of `cols` columns at (b, m0, n0), from ring use it0 (rep: a
 * split consumer's replica, else LOOM_NONE). */
typedef void (*tile_fn)(loom_kernel *k, const gk *g, loom_val rep, loom_val b, loom_val m0, loom_val n0, loom_val it0,
                        int cols);

/* With BN2 (one product): the program's units as two loops, each of one tile width: its
 * BN-column tiles (units first, first + step, .. below W = tm * wide, in their grouped
 * order), then its BN2-column ones (the same stride on from the first past W, in theirs),
 * so that the static schedule's round robin gives the BN2 tiles first to the programs
 * with one BN tile fewer.  Each loop carries the ring's use count; no unit branches on
 * its width (ptxas kept both widths' values live across one loop and spilled). */
static void two_width_units(loom_kernel *k, const gk *g, loom_val rep, tile_fn fn)
{
    const g_cfg *c = g->c;
    loom_val first, step, it = CI(0);
    loom_sched_range(k, &g->sched, &first, &step);
    loom_val W = loom_mul(k, g->tm, CI(c->wide));
    for (int narrow = 0; narrow < 2; narrow++) {
        loom_val from = first, to = narrow ? g->sched.count : W;
        if (narrow) { /* the first unit past W that this program takes */
            loom_val behind = loom_max(k, loom_sub(k, W, first), CI(0));
            loom_val steps = loom_div(k, loom_add(k, behind, loom_sub(k, step, CI(1))), step);
            from = loom_add(k, first, loom_mul(k, steps, step));
        }
        loom_region_op l = loom_for_begin(k, from, to, step, 1, &it);
        {
            loom_val u = loom_for_iv(k, l), it0 = loom_for_arg(k, l, 0), tr, tc;
            grouped(k, g, narrow ? loom_sub(k, u, W) : u, narrow ? cols_narrow(c) : c->wide, &tr, &tc);
            loom_val n0 = narrow ? loom_add(k, loom_mul(k, tc, CI(c->bn2)), CI((int64_t)c->wide * c->bn))
                                 : loom_mul(k, tc, CI(c->bn));
            fn(k, g, rep, CI(0), loom_mul(k, tr, CI(c->bm)), n0, it0, narrow ? c->bn2 : c->bn);
            loom_val next = loom_add(k, it0, CI(TPL_CDIV(c->K, c->bk)));
            loom_for_end(k, l, 1, &next);
        }
        it = loom_for_result(k, l, 0);
    }
}

/* A task's tiles, each through fn: with BN2 two_width_units' two loops, else the
 * schedule's loop over the task's units (role: LOOM_SCHED_PRODUCER or _CONSUMER). */
static void each_tile(loom_kernel *k, const gk *g, int role, loom_val rep, tile_fn fn)
{
    const g_cfg *c = g->c;
    if (c->bn2) {
        two_width_units(k, g, rep, fn);
        return;
    }
    unit_loop u = units_begin(k, g, role, LOOM_NONE, CI(0));
    loom_val b = u.b, m0, n0;
    tile_coords(k, g, u.r, &b, &m0, &n0);
    fn(k, g, rep, b, m0, n0, u.it, c->bn);
    units_end(k, g, &u, loom_add(k, u.it, CI(TPL_CDIV(c->K, c->bk))));
}

/* The producer's k steps of one tile (ring uses it0 ..): A's box (split: its two row
 * halves) and B's (multicast in parts over a cluster).  cols: the tile's columns, BN, or
 * BN2 (a part of B's slot, its full barrier expecting those bytes). */
static void produce_tile(loom_kernel *k, const gk *g, loom_val rep, loom_val b, loom_val m0, loom_val n0, loom_val it0,
                         int cols)
{
    (void)rep;
    const g_cfg *c = g->c;
    int64_t nk = TPL_CDIV(c->K, c->bk), es = (int64_t)loom_dtype_size(c->dt);
    bool split = c->consumers == SPLIT, bat_a = g->batched && !c->ashared;
    int arows = split ? c->bm / 2 : c->bm;
    loom_val one = CI(1), o[3];
    int64_t bytes = cols == c->bn ? -1 : g->ring.bytes - (int64_t)(c->bn - cols) * c->bk * es;
    loom_region_op kl = loom_for_begin(k, CI(0), CI(nk), one, 0, NULL);
    {
        loom_val kk = loom_for_iv(k, kl);
        loom_val s = loom_ring_produce(k, &g->ring, loom_add(k, it0, kk), bytes);
        loom_val k0 = loom_mul(k, kk, CI(c->bk));
        /* A: the pair's one tile, multicast in row halves (share); trans's [BM, BK] whole;
         * else [BM, BK] (split: two halves, one a replica) */
        if (c->share_a)
            loom_ring_load_multicast(k, &g->ring, s, TILE_A, 0, g->A, offs_of(false, b, m0, k0, o));
        else if (c->trans)
            loom_ring_load(k, &g->ring, s, TILE_A, 0, g->A, offs_of(bat_a, b, m0, k0, o));
        else
            for (int h = 0; h < (split ? 2 : 1); h++) {
                loom_val m = h ? loom_add(k, m0, CI(arows)) : m0;
                loom_ring_load(k, &g->ring, s, TILE_A, h, g->A, offs_of(bat_a, b, m, k0, o));
                if (c->scaled == 3) /* the rows' scales of the step's block of 128 of K */
                    loom_ring_load(k, &g->ring, s, TILE_SA, h, g->scale_a,
                                   ((loom_val[]){loom_add(k, loom_mul(k, loom_div(k, k0, CI(128)), CI(c->M)), m)}));
            }
        /* B: trans's [BK, BN] in two column parts, one a group; share's its own; a BN2 tile's
         * first BN2 columns of the slot's [BK, BN] (with btrans its first BN2 rows of [BN,
         * BK]); else the pair's tile in halves along N (its columns, or with btrans its rows) */
        if (c->trans)
            for (int h = 0; h < 2; h++)
                loom_ring_load(k, &g->ring, s, TILE_B, h, g->B, b_offs(g, b, k0, loom_add(k, n0, CI(64 * h)), o));
        else if (c->share_a)
            loom_ring_load(k, &g->ring, s, TILE_B, 0, g->B, b_offs(g, b, k0, n0, o));
        else if (cols != c->bn) {
            loom_val slot_b = loom_ring_view(k, &g->ring, s, TILE_B, LOOM_NONE);
            loom_tma_load(k, g->B, b_offs(g, b, k0, n0, o), loom_smem_part(k, slot_b, c->btrans ? 0 : 1, 0, cols),
                          g->ring.full, s);
        } else
            loom_ring_load_multicast(k, &g->ring, s, TILE_B, c->btrans ? 0 : 1, g->B, b_offs(g, b, k0, n0, o));
    }
    loom_for_end(k, kl, 0, NULL);
}

/* Producer: for each unit, its tile's k steps (a running count of ring uses over units);
 * with BN2, the BN-column tiles' loop, then the BN2-column ones'. */
static void producer(loom_kernel *k, const gk *g)
{
    loom_region_op pt = loom_producer_begin(k);
    {
        gk gl = launch_units(k, g);
        each_tile(k, &gl, LOOM_SCHED_PRODUCER, LOOM_NONE, produce_tile);
    }
    loom_task_end(k, pt);
}

/* The mainloop of a tile (the pipeline layer's loom_mainloop): ring uses it0 .. it0 +
 * nk - 1, each waited for, its wgmmas issued (split: A is replica rep's half of the
 * slot), one group left in flight and the previous use's slot given back. */
static loom_mainloop mainloop_of(const gk *g, int bm)
{
    const g_cfg *c = g->c;
    if (c->trans) /* [64, BM] += (group rep's [BK, 64] part of B)^T @ A^T */
        return (loom_mainloop){.ring = &g->ring, .a_tile = TILE_B, .b_tile = TILE_A, .a_trans = 1, .b_trans = 1,
                               .a_split = 1, .rows = 64, .cols = c->bm, .steps = TPL_CDIV(c->K, c->bk)};
    return (loom_mainloop){.ring = &g->ring, .a_tile = TILE_A, .b_tile = TILE_B, .b_trans = c->btrans,
                           .a_split = c->consumers == SPLIT, .rows = bm, .cols = c->bn,
                           .steps = TPL_CDIV(c->K, c->bk), .promote = c->promote / c->bk};
}

/* scaled=3: where a consumer's accumulator lies, for its blocks' scales. */
typedef struct block_at {
    const gk *g;
    loom_val it0, n0; /* the tile's first ring use and first column */
    int64_t rows;     /* the consumer's rows (split: replica rep's part of the slot's scales) */
    int64_t cols;     /* the tile's columns (BN, or with BN2 a BN2 tile's) */
    bool split;
} block_at;

/* The scales of K block kb's partial sums, a row each: scale_a[kb, m] of the consumer's
 * rows, which came with the block's first ring use (its slot, waited for by the
 * mainloop), times scale_b[n0 / 128, kb] (f32 [rows]).  Through the ring, not from global
 * memory in the k loop: 1.17x at 4096^3 on an H100 (bench/RESULTS.md, session 31). */
static loom_val block_scale(void *ctx, loom_kernel *k, loom_val kb, loom_val rep)
{
    const block_at *a = ctx;
    const g_cfg *c = a->g->c;
    const loom_ring *r = &a->g->ring;
    loom_val s = loom_ring_slot_of(k, r, loom_add(k, a->it0, loom_mul(k, kb, CI(c->promote / c->bk))));
    loom_val sa = loom_smem_load(k, loom_ring_view(k, r, s, TILE_SA, a->split ? rep : LOOM_NONE));
    loom_val nb = loom_div(k, a->n0, CI(128));
    loom_val sb = loom_load_scalar(k, a->g->scale_b, ((loom_val[]){nb, kb}));
    if (a->cols <= 128) /* the tile's columns lie in one block of B */
        return loom_mul(k, sa, loom_splat(k, sb, LOOM_SHAPE1(a->rows)));
    /* 192 columns from n0 (a multiple of 64) span two blocks: columns 0-63 lie in block
     * nb, 128-191 in nb + 1 (past N: the last block's), 64-127 in nb where n0 is a
     * multiple of 128, else in nb + 1.  Which third a column is in is fixed by where it
     * lies in the accumulator (the selects below fold away), so a block's scales are six
     * products a thread and one fma an element. */
    loom_val nb1 = loom_min(k, loom_add(k, nb, CI(1)), CI(TPL_CDIV(c->N, 128) - 1));
    loom_val sb1 = loom_load_scalar(k, a->g->scale_b, ((loom_val[]){nb1, kb}));
    loom_val smid = loom_select(k, loom_cmp(k, LOOM_EQ, loom_rem(k, a->n0, CI(128)), CI(0)), sb, sb1);
    loom_shape sh = LOOM_SHAPE1(a->cols);
    loom_val col = loom_arange(k, 0, a->cols);
    loom_val sbc = loom_select(k, loom_cmp(k, LOOM_LT, col, loom_splat(k, CI(64), sh)), loom_splat(k, sb, sh),
                               loom_select(k, loom_cmp(k, LOOM_LT, col, loom_splat(k, CI(128), sh)),
                                           loom_splat(k, smid, sh), loom_splat(k, sb1, sh)));
    loom_shape t = LOOM_SHAPE2(a->rows, a->cols);
    return loom_mul(k, loom_broadcast(k, loom_expand_dims(k, sa, 1), t),
                    loom_broadcast(k, loom_expand_dims(k, sbc, 0), t));
}

/* The mainloop of a tile of `cols` columns (BN, or BN2: a part of each slot's B tile) with
 * its blocks' scales where scaled=3 (ba, kept alive by the caller while the mainloop is
 * built). */
static loom_mainloop scaled_mainloop(const gk *g, int bm, int cols, block_at *ba, loom_val it0, loom_val n0)
{
    loom_mainloop ml = mainloop_of(g, bm);
    if (cols != g->c->bn)
        ml.cols = ml.b_part = cols;
    if (g->c->scaled == 3) {
        *ba = (block_at){.g = g, .it0 = it0, .n0 = n0, .rows = bm, .cols = cols, .split = g->c->consumers == SPLIT};
        ml.block_scale = block_scale, ml.block_ctx = ba;
    }
    return ml;
}

/* After the mainloop of the tile whose uses start at it0: wait for its last wgmma group
 * and give the last slot back; returns the tile (scaled=1: times scale_a * scale_b, in f32)
 * cast to the output type; with scaled=2 the f32 tile, which store_tile scales and casts. */
static loom_val finish(loom_kernel *k, const gk *g, const loom_mainloop *ml, loom_val acc, loom_val it0)
{
    acc = loom_mainloop_finish(k, ml, acc, loom_mainloop_last(k, ml, it0));
    if (g->c->scaled == 2)
        return acc;
    if (g->c->scaled == 1) {
        loom_val s = loom_mul(k, g->scale_a, g->scale_b);
        acc = loom_mul(k, acc, loom_splat(k, s, LOOM_SHAPE2(ml->rows, ml->cols)));
    }
    return loom_cast(k, acc, g->c->odt);
}

/* scaled=2's epilogue function: the f32 tile times scale_a at its rows, then scale_b at
 * its columns (each loaded in the accumulator's slice), cast to the output type. */
static loom_val row_col_scaled(void *ctx, loom_kernel *k, loom_val acc, const loom_tile_at *t)
{
    const gk *g = ctx;
    acc = loom_mul(k, acc, loom_tile_col_vector(k, t, g->scale_a));
    acc = loom_mul(k, acc, loom_tile_row_vector(k, t, g->scale_b));
    return loom_cast(k, acc, g->c->odt);
}

/* The epilogue's store of tile `out` at (b, m0, n0) through staging slot `slot` (split:
 * in replica rep's turn, its j-th tile).  With share=1 the pair's second product is past
 * an odd batch at its last unit: a TMA store writes nothing there, and a store from the
 * registers is skipped (t.batch). */
static void store_tile(loom_kernel *k, const gk *g, loom_val out, loom_tile_at t, loom_val slot, loom_val j)
{
    t.b = g->batched ? t.b : LOOM_NONE;
    t.batch = g->c->share_a ? g->batch : LOOM_NONE;
    bool rc = g->c->scaled == 2; /* the tile's rows and columns: those of its accumulator */
    loom_epilogue_visit(k, &g->epi, rc ? row_col_scaled : NULL, (void *)g, out, &t, slot, j);
}

/* Cooperative, one tile of `cols` columns (BN, or BN2: a part of each slot's B tile) at
 * (b, m0, n0) from ring use it0. */
static void cooperative_tile(loom_kernel *k, const gk *g, loom_val rep, loom_val b, loom_val m0, loom_val n0,
                             loom_val it0, int cols)
{
    (void)rep;
    const g_cfg *c = g->c;
    block_at ba;
    loom_mainloop ml = scaled_mainloop(g, c->bm, cols, &ba, it0, n0);
    loom_val out = finish(k, g, &ml, loom_mainloop_run(k, &ml, it0, LOOM_NONE, LOOM_NONE, 0), it0);
    store_tile(k, g, out, (loom_tile_at){.b = b, .m0 = m0, .n0 = n0, .rows = c->bm, .cols = cols}, LOOM_NONE,
               LOOM_NONE);
}

/* Cooperative: one consumer task (its warp groups split every tile by rows); with BN2, a
 * unit's tile is BN or BN2 columns. */
static void consumers_cooperative(loom_kernel *k, const gk *g)
{
    loom_region_op ct = loom_consumers_begin(k, g->c->cwarps, 1);
    {
        gk gl = launch_units(k, g);
        each_tile(k, &gl, LOOM_SCHED_CONSUMER, LOOM_NONE, cooperative_tile);
        loom_epilogue_finish(k, &gl.epi);
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
        gk gl = launch_units(k, g);
        g = &gl;
        loom_val rep = loom_pingpong_start(k, pp);
        loom_val it_first = loom_mul(k, rep, CI(nk));
        unit_loop u = units_begin(k, g, LOOM_SCHED_CONSUMER, rep, it_first);
        loom_val b = u.b, m0, n0;
        tile_coords(k, g, u.r, &b, &m0, &n0);
        loom_val it0 = u.it;
        block_at ba;
        loom_mainloop ml = scaled_mainloop(g, c->bm, c->bn, &ba, it0, n0);
        loom_pingpong_mma_begin(k, pp);
        loom_val acc = loom_mainloop_run(k, &ml, it0, rep, LOOM_NONE, 0);
        loom_pingpong_mma_end(k, pp);
        loom_val out = finish(k, g, &ml, acc, it0);
        store_tile(k, g, out, (loom_tile_at){.b = b, .m0 = m0, .n0 = n0, .rows = c->bm, .cols = c->bn}, rep,
                   LOOM_NONE);
        loom_pingpong_tile_end(k, pp);
        loom_val next = loom_add(k, it0, CI(2 * nk)); /* and the other replica's tile */
        units_end(k, g, &u, next);
        loom_pingpong_finish(k, pp, loom_sched_odd(k, &g->sched));
        loom_epilogue_finish(k, &g->epi);
    }
    loom_task_end(k, ct);
}

/* Split, one tile of `cols` columns (BN, or BN2) at (b, m0, n0) from ring use it0:
 * replica rep's half of its rows (trans: of its columns). */
static void split_tile(loom_kernel *k, const gk *g, loom_val rep, loom_val b, loom_val m0, loom_val n0, loom_val it0,
                       int cols)
{
    const g_cfg *c = g->c;
    int half = c->trans ? 64 : c->bm / 2; /* trans: each group 64 columns of every row */
    block_at ba;
    loom_mainloop ml = scaled_mainloop(g, half, cols, &ba, it0, n0);
    loom_val out = finish(k, g, &ml, loom_mainloop_run(k, &ml, it0, rep, LOOM_NONE, 0), it0);
    loom_val off = loom_mul(k, rep, CI(half)), m = m0, n = n0;
    if (c->trans) /* the group's [64, BM] of C^T is C's [BM, 64] at column n0 + 64 rep */
        out = loom_trans(k, out), n = loom_add(k, n0, off);
    else
        m = loom_add(k, m0, off);
    loom_val j = c->tmastore ? loom_div(k, it0, CI(TPL_CDIV(c->K, c->bk))) : LOOM_NONE; /* the replica's tile count */
    loom_tile_at at = {.b = b, .m0 = m, .n0 = n, .rows = c->trans ? c->bm : half, .cols = c->trans ? 64 : cols,
                       .rep = rep};
    store_tile(k, g, out, at, LOOM_NONE, j);
}

/* Split: two replicas of one warp group share every tile by rows: replica rep owns rows
 * m0 + rep*BM/2 .., with its own accumulator and its own half of each A slot.  Both
 * consume every ring slot (the empty barriers count two arrivals a phase) but wait for
 * nothing else of each other, so they may drift apart by up to the ring's depth.  With
 * tmastore they stage their halves in one tile in turn, replica 0 first (the handover
 * epilogue), which puts replica 1 that much behind: the epilogue of one overlaps k steps
 * of the other; where split_part allows (trans=1; f16 or bf16 with BN >= 256), each group
 * stores its part in parts through two slots of its own instead (LOOM_EPI_PARTS).  With
 * BN2, a loop of each tile width (two_width_units). */
static void consumers_split(loom_kernel *k, const gk *g)
{
    loom_region_op ct = loom_consumers_begin(k, 4, 2);
    {
        gk gl = launch_units(k, g);
        loom_val rep = loom_task_replica(k);
        each_tile(k, &gl, LOOM_SCHED_CONSUMER, rep, split_tile);
        if (gl.epi.kind == LOOM_EPI_PARTS) /* (handing over waits for each store) */
            loom_epilogue_finish(k, &gl.epi);
    }
    loom_task_end(k, ct);
}

/* The split groups' store in parts (LOOM_EPI_PARTS: through two staging slots of each
 * group's own, so neither waits for the other's store), or rank 0 where they hand one
 * staging tile over: the transposed product's [BM, 64] of C a group in parts of 32 rows
 * (16 where BM is not a multiple of 32; neither: handed over); else a group's [BM / 2,
 * BN] of f16 or bf16 C in parts of 64 columns where BN has at least four (no more shared
 * memory than the handed-over tile). */
static loom_shape split_part(const g_cfg *c)
{
    loom_shape none = {0};
    int64_t os = (int64_t)loom_dtype_size(c->odt), cols = 128 / os;
    if (!c->tmastore || c->consumers != SPLIT)
        return none;
    if (c->trans)
        return c->bm % 32 == 0 ? LOOM_SHAPE2(32, 64) : c->bm % 16 == 0 ? LOOM_SHAPE2(16, 64) : none;
    /* (f16 and bf16 in and out only, as timed: with f32 C the parts would make split tiles
     * fit that the handed-over tile does not; FP8's kernels were not timed with them) */
    return os == 2 && !fp8_in(c) && c->bn % cols == 0 && c->bn / cols >= 4 ? LOOM_SHAPE2(c->bm / 2, cols) : none;
}

/* Shared memory of the output's staging (0: stored from the registers). */
static int64_t staging_bytes(const g_cfg *c)
{
    int64_t os = (int64_t)loom_dtype_size(c->odt);
    loom_shape pt = split_part(c);
    if (!c->tmastore)
        return 0;
    if (pt.rank)
        return 2 * 2 * pt.dim[0] * pt.dim[1] * os; /* two slots a group */
    return (int64_t)(c->consumers == PINGPONG ? 2 : 1) * (c->consumers == SPLIT ? c->bm / 2 : c->bm) * c->bn * os;
}

static loom_kernel *gemm_build(const g_cfg *c)
{
    loom_kernel *k = loom_kernel_create("gemm", LOOM_PIPE_PRODUCER_WARPS + c->cwarps);
    if (c->cluster > 1)
        loom_kernel_set_cluster(k, c->cluster);
    loom_pipe p = loom_pipe_create(k);
    gk g = {.c = c, .batched = c->batch > 1};
    /* the launch's rows and products: run-time dims up to the built shape's */
    g.M = loom_arg_dim(k, "M", c->M, 1);
    g.batch = loom_arg_dim(k, "batch", c->batch, 1);
    int64_t M = LOOM_DIM(g.M), nb = LOOM_DIM(g.batch);
    bool bat_a = g.batched && !c->ashared;
    loom_shape ash = bat_a ? LOOM_SHAPE3(nb, M, c->K) : LOOM_SHAPE2(M, c->K);
    int64_t brows = c->btrans ? c->N : c->K; /* B [K, N], or [N, K] */
    loom_shape bsh = g.batched ? LOOM_SHAPE3(nb, brows, b_cols(c)) : LOOM_SHAPE2(brows, b_cols(c));
    loom_shape csh = g.batched ? LOOM_SHAPE3(nb, M, c->N) : LOOM_SHAPE2(M, c->N);
    /* A and B row-major with rows lda and ldb apart (TMA reads zeros past K and N, and
     * past the launch's M and batch); the products of A and C M_max rows apart */
    int64_t ast[3] = {c->M * c->lda, c->lda, 1}, bst[3] = {brows * c->ldb, c->ldb, 1}, cst[3] = {c->M * c->N, c->N, 1};
    g.A = loom_arg_tensor_strided(k, "A", c->dt, ash, bat_a ? ast : ast + 1, LOOM_IN);
    g.B = loom_arg_tensor_strided(k, "B", c->dt, bsh, g.batched ? bst : bst + 1, LOOM_IN);
    loom_val C = loom_arg_tensor_strided(k, "C", c->odt, csh, g.batched ? cst : cst + 1, LOOM_OUT);
    if (c->scaled == 1) { /* after C: an unscaled kernel keeps its arguments */
        g.scale_a = loom_arg_scalar(k, "scale_a", LOOM_F32);
        g.scale_b = loom_arg_scalar(k, "scale_b", LOOM_F32);
    } else if (c->scaled == 2) { /* a scale a row of A (the launch's M of them) and a column of B */
        g.scale_a = loom_arg_tensor(k, "scale_a", LOOM_F32, LOOM_SHAPE1(M), LOOM_IN);
        g.scale_b = loom_arg_tensor(k, "scale_b", LOOM_F32, LOOM_SHAPE1(c->N), LOOM_IN);
    } else if (c->scaled == 3) { /* a scale a 1 x 128 block of A, [KB, M]; one a 128 x 128 block of B */
        /* [KB, M] with rows M_max apart, as A's and C's, read as [KB * M_max]: the producer
         * loads a block's scales of a tile's rows as one box of the flat rows (the rows
         * past the launch's M are read, and their outputs not stored) */
        int64_t kb = TPL_CDIV(c->K, 128);
        g.scale_a = loom_arg_tensor(k, "scale_a", LOOM_F32, LOOM_SHAPE1(kb * c->M), LOOM_IN);
        g.scale_b = loom_arg_tensor(k, "scale_b", LOOM_F32, LOOM_SHAPE2(TPL_CDIV(c->N, 128), kb), LOOM_IN);
    }

    bool split = c->consumers == SPLIT;
    int arows = split ? c->bm / 2 : c->bm; /* split: A slots hold half a tile's rows */
    /* A's rows are BK wide (f16: 128 bytes at BK=64, 64 at BK=32; FP8: 128 at BK=128, 64
     * at BK=64): the swizzle spans one row; so does B's [BN, BK] with btrans */
    loom_swizzle aswz = c->bk * (int64_t)loom_dtype_size(c->dt) == 64 ? LOOM_SWIZZLE_64 : LOOM_SWIZZLE_128;
    loom_ring_tile tiles[3] = {{c->dt, LOOM_SHAPE2(arows, c->bk), split ? 2 : 1, aswz},
                               {c->dt, LOOM_SHAPE2(c->bk, c->bn), 1, LOOM_SWIZZLE_128},
                               {LOOM_F32, LOOM_SHAPE1(arows), split ? 2 : 1, LOOM_SWIZZLE_NONE}};
    if (c->btrans)
        tiles[TILE_B] = (loom_ring_tile){c->dt, LOOM_SHAPE2(c->bn, c->bk), 1, aswz};
    if (c->trans) { /* A's tile whole (wgmma's B), B's in a [BK, 64] part a group (its A, transposed) */
        tiles[TILE_A] = (loom_ring_tile){c->dt, LOOM_SHAPE2(c->bm, c->bk), 1, aswz};
        tiles[TILE_B] = (loom_ring_tile){c->dt, LOOM_SHAPE2(c->bk, 64), 2, LOOM_SWIZZLE_128};
    }
    g.ring = loom_ring_create(&p, c->stages, split ? 2 : 1, c->scaled == 3 ? 3 : 2, tiles); /* split: both release */
    g.sched = loom_sched_static(&p, units(c), c->ctas != 0); /* its count: each task's (launch_units) */
    loom_pingpong pp = c->consumers == PINGPONG ? loom_pingpong_create(&p) : (loom_pingpong){0};
    loom_shape pt = split_part(c);
    loom_epilogue_kind ek = !c->tmastore ? LOOM_EPI_REGISTERS
                            : pt.rank    ? LOOM_EPI_PARTS
                            : split      ? LOOM_EPI_HANDOVER
                                         : LOOM_EPI_STAGED;
    /* a group's part of C (trans: its [BM, 64]), or a part of it */
    loom_shape stage = pt.rank ? pt : c->trans ? LOOM_SHAPE2(c->bm, 64) : LOOM_SHAPE2(arows, c->bn);
    g.epi = loom_epilogue_create(&p, ek, C, c->odt, stage, c->consumers == PINGPONG || pt.rank ? 2 : 1,
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

/* What the transposed product (trans=1) needs, or NULL. */
static const char *why_not_trans(const g_cfg *c)
{
    if (c->trans != 1)
        return "trans must be 0 or 1";
    if (c->consumers != SPLIT || c->cwarps != 8 || c->bn != 128)
        return "trans=1 needs consumers=2, cwarps=8 and BN=128 (two warp groups of 64 columns of C each)";
    if (c->bm < 8 || c->bm > 256 || c->bm % 8)
        return "trans=1: BM (a tile's rows, on wgmma's N side) must be a multiple of 8 up to 256";
    if (c->btrans || fp8_in(c))
        return "trans=1 takes f16 or bf16 with B as [K, N] (btrans=0): it reads B's tile transposed, which FP8's "
               "wgmma cannot";
    if (!c->tmastore)
        return "trans=1 needs tmastore=1 (its groups' [BM, 64] parts go out through the staging tile)";
    if (c->cluster != 1 && !c->share_a)
        return "trans=1 takes cluster=2 with share=1 only (the pair's one A tile, multicast in row halves; "
               "sharing B would stack the pair's tiles along M, which trans=1 lays on wgmma's N side)";
    if (c->share_a && c->bm % 16)
        return "trans=1 with share=1: BM must be a multiple of 16 (each CTA multicasts half of A's rows, a "
               "whole number of the swizzle's 8-row periods)";
    return NULL;
}

/* The promoted configs (promote > 0, FP8 only): the second accumulator (f32, the shape of
 * the tensor cores') must fit beside the first in the 192 of the consumers' 232 registers a
 * thread that the accumulator may take (tpl_why_not_consumers): at most 64 x 192 of a tile
 * per warp group.  128 x 256 (64 x 256 a warp group, 128 registers each) does not fit;
 * 128 x 192 and 128 x 128 do. */
static const char *why_not_promote(const g_cfg *c, bool fp8, char *buf, size_t n)
{
    if (c->promote < 0)
        return "promote must be 0 (no promotion) or the elements of K between promotions (> 0)";
    if (!c->promote)
        return NULL;
    if (!fp8)
        return "promote is for FP8 inputs (dtype e4m3/e5m2): f16 and bf16 wgmma already add in f32";
    if (c->promote % c->bk) {
        snprintf(buf, n,
                 "promote=%d (elements of K) must be a multiple of BK=%d: the tensor cores' sum is promoted "
                 "after whole k steps",
                 c->promote, c->bk);
        return buf;
    }
    int wgs = c->consumers == PINGPONG ? 1 : c->cwarps / 4; /* warp groups sharing a tile (for the message) */
    int64_t regs = tpl_acc_regs(c->cwarps, c->consumers, c->bm, c->bn); /* an accumulator's, a thread */
    if (2 * regs <= TPL_ACC_REGS_MAX)
        return NULL;
    snprintf(buf, n,
             "promote=%d keeps a second f32 accumulator: 2 x %lld registers a thread (%d x %d a warp group), "
             "over the 192 an accumulator may take; use at most 64 x 192 a warp group (e.g. "
             "BM=128,BN=192,cwarps=8)",
             c->promote, (long long)regs, c->bm / wgs, c->bn);
    return buf;
}

/* What tiles of two widths (BN2 > 0) need, or NULL. */
static const char *why_not_bn2(const g_cfg *c, char *buf, size_t n)
{
    if (!c->bn2 && !c->wide)
        return NULL;
    if ((c->bn2 != 64 && c->bn2 != 128) || c->bn2 >= c->bn)
        return "BN2 must be 0 (every tile BN columns), or 64 or 128 and less than BN";
    if (c->consumers == PINGPONG || c->trans || c->cluster != 1 || c->batch != 1)
        return "BN2 takes consumers 0 (cooperative) or 2 (split), trans=0, cluster=1 and one product (batch=1)";
    if (c->scaled == 3 && c->bn2 == 128 && (int64_t)c->wide * c->bn % 128) {
        snprintf(buf, n,
                 "scaled=3 with BN2=128 needs wide * BN (%lld) a multiple of 128: each BN2 tile's columns must lie "
                 "in one 128-column block of B (one scale_b)",
                 (long long)c->wide * c->bn);
        return buf;
    }
    if (c->wide < 1 || (int64_t)c->wide * c->bn >= c->N) {
        snprintf(buf, n,
                 "wide must be at least 1 and wide * BN (%lld) less than N (%lld): the BN2-column tiles take the "
                 "columns past the first wide * BN",
                 (long long)c->wide * c->bn, (long long)c->N);
        return buf;
    }
    return NULL;
}

/* Why (shape, config) cannot be served, or NULL when it can. */
static const char *why_not(const g_cfg *c, char *buf, size_t n)
{
    bool fp8 = fp8_in(c);
    if (c->dt != LOOM_F16 && c->dt != LOOM_BF16 && !fp8)
        return "dtype must be f16, bf16, e4m3 or e5m2 (the tensor-core inputs)";
    if (c->scaled < 0 || c->scaled > 3)
        return "scaled must be 0, 1 (the f32 scalars scale_a and scale_b after C), 2 (the f32 vectors scale_a [M] "
               "and scale_b [N] after C) or 3 (block-wise: scale_a [cdiv(K,128), M], scale_b [cdiv(N,128), "
               "cdiv(K,128)])";
    if (c->scaled >= 2 && (c->batch != 1 || c->trans))
        return c->scaled == 2 ? "scaled=2 (a scale a row and a column) takes one product (batch=1) and trans=0"
                              : "scaled=3 (block-wise scales) takes one product (batch=1) and trans=0";
    if (c->scaled == 3 && (!fp8 || c->promote != 128))
        return "scaled=3 (block-wise scales) is FP8's with promote=128: each 128 elements of K are one block, whose "
               "sum is scaled as it is promoted into f32";
    if (c->scaled == 3 && 128 % c->bn && c->bn != 192)
        return "scaled=3 takes BN 64, 128 or 192: a tile's columns must lie in one 128-column block of B (one "
               "scale_b), or 192 in two";
    if (c->btrans != 0 && c->btrans != 1)
        return "btrans must be 0 (B is [K, N]) or 1 (B is [N, K])";
    if (fp8 && !c->btrans)
        return "dtype e4m3/e5m2 needs btrans=1: FP8 wgmma reads B K-major only, so give B as [N, K] "
               "(its rows along K) with btrans=1";
    if (c->odt != LOOM_F16 && c->odt != LOOM_BF16 && c->odt != LOOM_F32)
        return "odtype must be f16, bf16 or f32";
    if (c->M < 1 || c->N < 1 || c->K < 1 || c->batch < 1)
        return "M, N, K and batch must be positive";
    if (c->M > INT32_MAX || c->batch > INT32_MAX)
        return "M and batch must be below 2^31 (the kernel takes them as i32 arguments at each launch)";
    if (c->lda < c->K || c->ldb < b_cols(c))
        return "lda must be at least K and ldb at least B's row (N, or K with btrans=1)";
    int64_t es = (int64_t)loom_dtype_size(c->dt);
    if (c->lda * es % 16 || c->ldb * es % 16)
        return fp8 ? "lda and ldb must be multiples of 16 for FP8 (TMA needs 16-byte aligned rows)"
                   : "lda and ldb must be multiples of 8 (TMA needs 16-byte aligned rows; loom_gemm_run copies "
                     "unaligned operands into padded ones)";
    if (c->tmastore && c->N % 8)
        return "tmastore=1 needs N a multiple of 8 (the TMA store writes 16-byte aligned rows of C); use "
               "tmastore=0, which stores C from the registers";
    if (c->bk * es != 128 && c->bk * es != 64)
        return fp8 ? "BK must be 128 or 64 for FP8 (A's row is then one 128- or 64-byte swizzle span)"
                   : "BK must be 64 or 32 (A's row is then one 128- or 64-byte swizzle span of f16/bf16)";
    const char *w = c->trans ? why_not_trans(c) : tpl_why_not_consumers(c->cwarps, c->consumers, SPLIT, c->ctas, c->bm, c->bn);
    if (w)
        return w;
    if ((w = why_not_promote(c, fp8, buf, n)))
        return w;
    if ((w = why_not_bn2(c, buf, n)))
        return w;
    if (c->stages < 2 || c->stages > 12)
        return "stages must be 2 to 12";
    if (c->tmastore != 0 && c->tmastore != 1)
        return "tmastore must be 0 or 1";
    int64_t ring = (int64_t)c->stages * (c->bm + c->bn) * c->bk * es;
    int64_t stage = staging_bytes(c);
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
    if (c->share_a && c->consumers == SPLIT && !c->trans)
        return "share=1 takes consumers 0 or 1, or trans=1 (split loads A in row halves of its own)";
    if (c->cluster > 1 && !c->share_a && (c->bn < 128 || (c->bn == 192 && !c->btrans)))
        return "cluster=2 needs BN 128 or 256 (192 with btrans=1): each CTA multicasts half of B's 64-column chunks";
    if (c->cluster > 1 && c->ctas % c->cluster)
        return "with clusters, ctas must be a multiple of the cluster size";
    return NULL;
}

static int valid(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    g_cfg c = cfg_of(sh, cf);
    char buf[320];
    const char *w = why_not(&c, buf, sizeof buf);
    if (w && why && n)
        snprintf(why, n, "%s", w);
    return w == NULL;
}

static loom_kernel *build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    g_cfg c = cfg_of(sh, cf);
    char buf[320];
    const char *w = why_not(&c, buf, sizeof buf);
    if (w)
        return tpl_refuse(err, n, "%s", w);
    return gemm_build(&c);
}

/* The most time a program takes over the units the static schedule gives it (units p,
 * p + P, ...; P programs, or clusters), a BN-column tile taking 1 and a BN2-column one
 * `narrow` (with BN2 the BN-column tiles come first). */
static double busiest(const g_cfg *c, int64_t programs, double narrow)
{
    int64_t n = units(c), per = units_per_product(c), wide = TPL_CDIV(c->M, unit_rows(c)) * cols_wide(c);
    if (programs < 1)
        programs = 1;
    if (!c->bn2)
        return (double)TPL_CDIV(n, programs);
    double most = 0;
    for (int64_t p = 0; p < programs && p < n; p++) {
        double t = 0;
        for (int64_t u = p; u < n; u += programs)
            t += u % per < wide ? 1.0 : narrow;
        most = t > most ? t : most;
    }
    return most;
}

/* Rank configs before timing: waves of tiles over 132 SMs, penalising small tiles (with
 * BN2, its tiles by their share of the columns) and a ring of 2 slots (x1.3). */
static double cost(const int64_t *sh, const int64_t *cf)
{
    g_cfg c = cfg_of(sh, cf);
    int64_t ctas = c.ctas ? c.ctas : 132;
    double over = 1.0 + 64.0 / c.bm + 64.0 / c.bn; /* a tile's loads a FLOP, relative */
    double per_tile = (double)c.bm * c.bn * c.K * over;
    double narrow = c.bn2 ? (double)c.bn2 / c.bn * (1.0 + 64.0 / c.bm + 64.0 / c.bn2) / over : 0;
    return busiest(&c, ctas / c.cluster, narrow) * per_tile * (c.stages >= 3 ? 1.0 : 1.3);
}

/* Promoted FP8 (promote > 0: two accumulators of 64 x BN a warp group): BN=192, the widest
 * that fits, or 128, whichever the waves of 128-row tiles on the SMs say is faster: a
 * 192-column tile is 1.5 times a 128-column one's work at `gain` times its rate (on an
 * H100, bench/RESULTS.md session 31: cooperative 1.19 at 8192^3; with block scales, whose
 * 192-column form is split (cooperative spills), 1.13, less the split form's 3%).  So
 * 4096^3 takes 192 (6 waves against 8) but not with block scales; 8192^3 and 2048 x 7168
 * take 192 both ways.  (Where a 192-column config does not fit, f32 out, heuristic takes
 * 128.) */
static double promoted_gain(const g_cfg *c) { return c->scaled == 3 ? 1.10 : 1.19; }

static int promoted_bn(const g_cfg *c, int ctas)
{
    double gain = promoted_gain(c);
    int64_t tm = TPL_CDIV(c->M, 128) * c->batch;
    int64_t w192 = TPL_CDIV(tm * TPL_CDIV(c->N, 192), ctas), w128 = TPL_CDIV(tm * TPL_CDIV(c->N, 128), ctas);
    return 1.5 * (double)w192 < gain * (double)w128 ? 192 : 128;
}

/* A 128-column tile's time in BN-column tiles': 128 / BN of the work at 1 / rate the rate. */
static double narrow_time(const g_cfg *c, double rate) { return 128.0 / c->bn * rate; }

/* 128-row tiles whose last wave leaves SMs idle: the columns past `wide` BN-column tiles
 * in 128-column ones (BN2=128), at the `wide` whose busiest program (static schedule)
 * finishes first, where that is at least 3% sooner; a 128-column tile taking 128 / BN of
 * a BN-column one's work at 1 / `rate` its rate.  Promoted cooperative 128 x 192 (rate
 * 1.19, promoted_bn) at 4096^3 on 132 SMs: 16 columns of 192 and 8 of 128, the busiest
 * program 5.59 tiles' time against 6. */
static bool narrow_tail(const int64_t *sh, int64_t *cf, double rate)
{
    g_cfg c = cfg_of(sh, cf);
    char why[320];
    if (c.consumers == PINGPONG || c.bm != 128 || c.bn <= 128)
        return false;
    int64_t programs = c.ctas ? c.ctas : 132, tn = TPL_CDIV(c.N, c.bn);
    double best = busiest(&c, programs, 0) / 1.03, narrow = narrow_time(&c, rate);
    int pick = 0;
    for (int64_t wide = 1; wide < tn; wide++) {
        c.bn2 = 128, c.wide = (int)wide;
        double t = busiest(&c, programs, narrow);
        if (t < best && !why_not(&c, why, sizeof why))
            best = t, pick = (int)wide;
    }
    if (pick)
        cf[C_BN2] = 128, cf[C_wide] = pick;
    return pick != 0;
}

/* Split 128 x 128 tiles' time a FLOP over split 128 x 256 ones' (f16: 1.09-1.10 on an
 * H200 at 4224 x 4096 x 4096, whole waves of both; bench/RESULTS.md session 32): what a
 * 128-column tile costs in narrow_tail. */
#define SPLIT_128_RATE 1.09

/* Split tiles (two consumer warp groups sharing each BM x BN tile), 4 stages, groups of 8. */
static void split_tiles(int64_t *cf, int64_t bm, int64_t bn)
{
    cf[C_BM] = bm;
    cf[C_BN] = bn;
    cf[C_cwarps] = 8;
    cf[C_consumers] = SPLIT;
    cf[C_stages] = 4;
    cf[C_group] = 8;
}

/* BN columns and, where the shape fills the GPU with 128-row tiles that waste few rows,
 * split 128 x BN (promoted: cooperative, but where the split form is the one without
 * spills, block scales at 192); else the defaults' one warp group of 64 rows. */
static void plain_tiles(const g_cfg *c, int64_t *cf, int bn)
{
    cf[C_BN] = bn;
    int64_t rows64 = TPL_CDIV(c->M, 64) * 64, rows128 = TPL_CDIV(c->M, 128) * 128;
    int64_t tiles = TPL_CDIV(c->M, 128) * TPL_CDIV(c->N, bn) * c->batch;
    if (rows128 * 100 > rows64 * 103 || tiles * 4 < 132 * 3)
        return;
    split_tiles(cf, 128, bn);
    if (c->promote && !(c->scaled == 3 && bn == 192))
        cf[C_consumers] = COOPERATIVE;
}

/* Untuned: FP8 takes BK=128 (one 128-byte swizzle span of A's row; 64 where promote is
 * not a multiple of 128); promoted FP8 (promote > 0) takes BN=192 or 128, so that the two
 * accumulators fit (promoted_bn; cooperative 128 x BN at large shapes).  A small M (up
 * to 512) with N not a multiple of 256, or with a batch sharing one A, takes the
 * transposed product (trans=1) with BM the rows in one or two tiles rounded to 8 (16 with
 * a shared A: 224 at M=433), where its tiles fill the GPU; with a shared A, clusters of two
 * consecutive products multicast their one A tile (cluster=2, share=1), as cuBLAS's kernel
 * at the IKBO shape does (nvjet 128x224, 2x1 cluster).  On an H100 at M=433, K=866, batch
 * 1024 trans ran 2.6-2.9x the defaults at N=72 and 8 (BN=256 tiles there are mostly
 * empty) and 1.36-1.41x at N=1000 (session 23); at N=256 without the pair 0.82x the
 * defaults at K=872 and 1.07-1.14x at K=1184, with the pair 1.10x and 1.06-1.13x
 * (0.93 and 0.96 of cuBLAS); at K=872 the pair ran 1.46x trans alone at N=72, 1.40x at
 * N=8, 1.27x at N=1000 and 1.12x at N=256 with a batch of 64 (session 29).  At a shape whose rows
 * 128-row tiles cover as tightly as 64-row ones and whose 128 x 256 tiles fill most of
 * the SMs: split 128 x 256 tiles (two consumer warp groups
 * sharing each tile by rows), groups of 8 tile rows.  On an H100 that ran at 0.99-1.03 of
 * cuBLAS at 2048^3, 4096^3 and 8192^3, against 0.87-0.97 for the defaults (one warp group,
 * 64 x 256), which stay where M wastes rows in 128-row tiles (the IKBO M=433: 512 rows
 * against 448) or where there are too few tiles to fill the GPU (bench/RESULTS.md,
 * session 23). */
static void heuristic(const int64_t *sh, int64_t *cf)
{
    g_cfg c = cfg_of(sh, cf);
    if (fp8_in(&c)) /* FP8: a 128-byte row of A is 128 elements */
        cf[C_BK] = c.promote % 128 ? 64 : 128;
    /* trans: rows in 8s; with a batch sharing A, in 16s, since a cluster's pair multicasts
     * half of A's tile each */
    bool pair = c.batch >= 2 && c.ashared;
    int64_t mt = TPL_CDIV(c.M, 256), rr = pair ? 16 : 8, bm_t = TPL_CDIV(TPL_CDIV(c.M, mt), rr) * rr;
    if (c.M <= 512 && (c.N % 256 || pair) && mt * TPL_CDIV(c.N, 128) * c.batch >= 132 && !c.btrans &&
        (c.dt == LOOM_F16 || c.dt == LOOM_BF16)) {
        cf[C_trans] = 1;
        split_tiles(cf, bm_t, 128);
        if (pair) /* two consecutive products a cluster, their one A tile multicast */
            cf[C_cluster] = 2, cf[C_share] = 1;
        return;
    }
    if (!c.promote) {
        plain_tiles(&c, cf, 256);
        narrow_tail(sh, cf, SPLIT_128_RATE);
        return;
    }
    int64_t keep[C_COUNT], c128[C_COUNT];
    memcpy(keep, cf, sizeof keep);
    int programs = c.ctas > 0 ? c.ctas : 132, bn = promoted_bn(&c, programs);
    double gain = promoted_gain(&c);
    plain_tiles(&c, cf, bn);
    g_cfg t = cfg_of(sh, cf);
    char why[256];
    if (bn == 192 && why_not(&t, why, sizeof why)) { /* e.g. f32 out: its staging tile does not fit */
        memcpy(cf, keep, sizeof keep);
        plain_tiles(&c, cf, 128);
    } else if (bn == 192)
        narrow_tail(sh, cf, gain);
    else { /* 128 columns: 192 with a tail of 128-column tiles may still be sooner (block
            * scales at 4096^3: 5.59 tiles of 192 at 1.5 / 1.10 against 8 of 128) */
        memcpy(c128, cf, sizeof c128);
        memcpy(cf, keep, sizeof keep);
        plain_tiles(&c, cf, 192);
        bool two = narrow_tail(sh, cf, gain); /* (each candidate checked by why_not) */
        g_cfg a = cfg_of(sh, c128), w = cfg_of(sh, cf);
        double n = narrow_time(&w, gain); /* the two-width config's time in 128-column tiles' */
        if (!two || !(busiest(&w, programs, n) / n < busiest(&a, programs, 0) / 1.03))
            memcpy(cf, c128, sizeof c128);
    }
}

/* The grid at a launch's M and batch: a program (a cluster of them) for each unit, at
 * most ctas (grid[0] = mult * cdiv(c + per[M] M + per[batch] batch, div), capped).  The
 * units are a product of M's unit rows and the products, which a rule linear in the shape
 * cannot follow in both: without a batch (the built batch 1) it follows M exactly; with
 * one it follows batch and takes M at the built shape's (exact there, and an upper
 * bound below it: the extra programs find no unit).  Persistent programs stride over
 * whatever units there are, so the grid is right either way. */
static void gemm_grid_rule(const int64_t *sh, const int64_t *cf, loom_grid_rule *r)
{
    g_cfg c = cfg_of(sh, cf);
    memset(r, 0, sizeof *r);
    for (int d = 0; d < 3; d++)
        r->div[d] = r->mult[d] = 1;
    r->c[1] = r->c[2] = 1;
    int64_t tn = tile_cols(&c);
    if (c.batch <= 1) { /* cluster * tn * cdiv(M, unit rows) */
        r->per[0][S_M] = 1;
        r->div[0] = unit_rows(&c);
        r->mult[0] = tn * c.cluster;
    } else if (c.share_a) { /* cluster * units a product * cdiv(batch, cluster) */
        r->per[0][S_batch] = 1;
        r->div[0] = c.cluster;
        r->mult[0] = units_per_product(&c) * c.cluster;
    } else { /* cluster * units a product * batch */
        r->per[0][S_batch] = units_per_product(&c) * c.cluster;
    }
    r->cap[0] = c.ctas; /* 0: a program a unit */
}

static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    loom_grid_rule r;
    gemm_grid_rule(sh, cf, &r);
    loom_grid_rule_eval(&r, sh, g);
}

/* The kernel's arguments (scale_a and scale_b with scaled > 0 only). */
enum { ARG_M, ARG_BATCH, ARG_A, ARG_B, ARG_C, ARG_SCALE_A, ARG_SCALE_B };

/* The dims at the shape's values; the inputs fill every element their buffers hold (the
 * padding of rows too: the kernel must never read it). */
static void init(const int64_t *sh, void *const *host, uint64_t seed)
{
    g_cfg c = shape_of(sh);
    int64_t M = c.M, nb = c.batch, na = nb > 1 && !c.ashared ? nb : 1, brows = c.btrans ? c.N : c.K;
    *(int32_t *)host[ARG_M] = (int32_t)M;
    *(int32_t *)host[ARG_BATCH] = (int32_t)nb;
    tpl_fill(host[ARG_A], c.dt, (na - 1) * M * c.lda + (M - 1) * c.lda + c.K, -1, 1, &seed);
    tpl_fill(host[ARG_B], c.dt, (nb - 1) * brows * c.ldb + (brows - 1) * c.ldb + b_cols(&c), -1, 1, &seed);
    if (c.scaled) { /* scales that are not powers of two: the product and the multiplies round */
        int64_t kb = TPL_CDIV(c.K, 128), na_s[4] = {0, 1, M, kb * M}, nb_s[4] = {0, 1, c.N, TPL_CDIV(c.N, 128) * kb};
        tpl_fill(host[ARG_SCALE_A], LOOM_F32, na_s[c.scaled], 0.25, 4, &seed);
        tpl_fill(host[ARG_SCALE_B], LOOM_F32, nb_s[c.scaled], 0.25, 4, &seed);
    }
}

/* The scale of C's element at row m, column j: scale_a * scale_b (scaled=1), scale_a[m] *
 * scale_b[j] (scaled=2), 1 without scales; as the reference takes it: exact in double. */
static double scale_of(const g_cfg *c, void *const *host, int64_t m, int64_t j)
{
    if (!c->scaled)
        return 1;
    bool rc = c->scaled == 2;
    return tpl_get(host[ARG_SCALE_A], LOOM_F32, rc ? m : 0) * tpl_get(host[ARG_SCALE_B], LOOM_F32, rc ? j : 0);
}

/* Element (q, j) of B (row q of K, column j of N) of product b, either way it is stored. */
static size_t b_at(const g_cfg *c, int64_t b, int64_t q, int64_t j)
{
    return (size_t)(c->btrans ? b * c->N * c->ldb + j * c->ldb + q : b * c->K * c->ldb + q * c->ldb + j);
}

/* Row m of product b of A @ B in blocks of `blk` elements of K (blk >= K: one block) into
 * row[kb * N + j] (sums of products in double) and mag[kb * N + j] (sums of their
 * magnitudes); either may be NULL. */
static void row_products(const g_cfg *c, void *const *host, int64_t b, int64_t m, int64_t blk, double *row,
                         double *mag)
{
    bool ash = c->batch == 1 || c->ashared;
    for (int64_t j = 0; j < TPL_CDIV(c->K, blk) * c->N; j++) {
        if (row)
            row[j] = 0;
        if (mag)
            mag[j] = 0;
    }
    for (int64_t q = 0; q < c->K; q++) {
        double a = tpl_get(host[ARG_A], c->dt, (ash ? 0 : b * c->M * c->lda) + m * c->lda + q);
        int64_t at = q / blk * c->N;
        for (int64_t j = 0; j < c->N; j++) {
            double p = a * tpl_get(host[ARG_B], c->dt, b_at(c, b, q, j));
            if (row)
                row[at + j] += p;
            if (mag)
                mag[at + j] += fabs(p);
        }
    }
}

/* scaled=3: row m's sums of each K block of 128 (blk[kb * N + j], exact in double, and
 * mag the sums of their magnitudes) and the blocks' scales s[kb * N + j] = scale_a[kb, m]
 * * scale_b[j / 128, kb] (exact in double). */
static void block_products(const g_cfg *c, void *const *host, int64_t m, double *blk, double *mag, double *s)
{
    int64_t kb = TPL_CDIV(c->K, 128);
    row_products(c, host, 0, m, 128, blk, mag);
    for (int64_t b = 0; b < kb; b++)
        for (int64_t j = 0; j < c->N; j++)
            s[b * c->N + j] = tpl_get(host[ARG_SCALE_A], LOOM_F32, b * c->M + m) *
                              tpl_get(host[ARG_SCALE_B], LOOM_F32, (j / 128) * kb + b);
}

/* scaled=3: C's reference into ref (bnd NULL), or each element's bound into bnd about
 * the reference in ref, by the model: each block's FP8 sum within loom_fp8_mma_sum_error
 * of its products, times its scale (the scales' product rounds in f32, u; the fma into
 * the f32 accumulator rounds once, which the f32 sum's error counts: 2u + u^2 covers
 * both with room), the blocks added in f32 (loom_f32_sum_error), then rounded to odtype. */
static void block_scaled(const g_cfg *c, void *const *host, void *ref, double *bnd)
{
    int64_t kb = TPL_CDIV(c->K, 128), n = kb * c->N;
    double *blk = malloc((size_t)n * sizeof *blk), *mag = malloc((size_t)n * sizeof *mag),
           *sc = malloc((size_t)n * sizeof *sc);
    const double u = 0x1p-23;
    if (!blk || !mag || !sc)
        goto done;
    for (int64_t m = 0; m < c->M; m++) {
        block_products(c, host, m, blk, mag, sc);
        for (int64_t j = 0; j < c->N; j++) {
            double x = 0, err = 0, terms = 0;
            for (int64_t b = 0; b < kb; b++) {
                int64_t i = b * c->N + j, len = b < kb - 1 ? 128 : c->K - 128 * b;
                double e = loom_fp8_mma_sum_error(len, mag[i]), as = fabs(sc[i]);
                x += sc[i] * blk[i];
                err += as * (e + (2 * u + u * u) * (mag[i] + e));
                terms += as * (mag[i] + e) * (1 + 3 * u);
            }
            err += loom_f32_sum_error(kb, terms);
            int64_t e = m * c->N + j;
            if (!bnd) /* the reference */
                tpl_set(ref, c->odt, e, x);
            else /* the bound, about the reference made before */
                bnd[e] = loom_error_bound(c->odt, tpl_get(ref, c->odt, e), err);
        }
    }
done:
    free(blk), free(mag), free(sc);
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    g_cfg c = shape_of(sh);
    if (c.scaled == 3) {
        block_scaled(&c, host, ref[ARG_C], NULL);
        return;
    }
    double *row = malloc((size_t)c.N * sizeof *row);
    if (!row)
        return;
    for (int64_t b = 0; b < c.batch; b++)
        for (int64_t m = 0; m < c.M; m++) {
            row_products(&c, host, b, m, c.K, row, NULL);
            for (int64_t j = 0; j < c.N; j++)
                tpl_set(ref[ARG_C], c.odt, b * c.M * c.N + m * c.N + j, scale_of(&c, host, m, j) * row[j]);
        }
    free(row);
}

/* The error of an element's sum of K exact products whose magnitudes sum to mag: in f32,
 * or FP8's in the tensor cores' narrower adds, whole (loom_fp8_mma_sum_error) or promoted
 * into f32 every `promote` of them (loom_fp8_promoted_sum_error). */
static double sum_error(const g_cfg *c, double mag)
{
    if (!fp8_in(c))
        return loom_f32_sum_error(c->K, mag);
    return c->promote ? loom_fp8_promoted_sum_error(c->K, c->promote, mag) : loom_fp8_mma_sum_error(c->K, mag);
}

/* The error of s * acc, acc within err of the sum S (|S| <= mag) and s = scale_a * scale_b
 * exact: the kernel rounds s and then s * acc in f32 (scaled=1), or acc * scale_a and then
 * that times scale_b (scaled=2): two roundings either way (u each), |s| (err + (2u +
 * u^2)(mag + err)). */
static double scaled_error(double s, double mag, double err)
{
    const double u = 0x1p-23;
    return fabs(s) * (err + (2 * u + u * u) * (mag + err));
}

/* The error model (docs/checks.md): C[b,m,n] sums K exact products in f32 (FP8: in the
 * tensor cores' narrower adds, promoted or not: sum_error), is scaled (scaled=1 or 2), then
 * rounds to odtype once. */
static void bound(const int64_t *sh, void *const *host, void *const *ref, double *const *bnd)
{
    g_cfg c = shape_of(sh);
    if (c.scaled == 3) {
        if (bnd[ARG_C])
            block_scaled(&c, host, ref[ARG_C], bnd[ARG_C]);
        return;
    }
    double *mag = malloc((size_t)c.N * sizeof *mag);
    if (!mag || !bnd[ARG_C])
        goto done;
    for (int64_t b = 0; b < c.batch; b++)
        for (int64_t m = 0; m < c.M; m++) {
            row_products(&c, host, b, m, c.K, NULL, mag);
            for (int64_t j = 0; j < c.N; j++) {
                int64_t e = b * c.M * c.N + m * c.N + j;
                double err = sum_error(&c, mag[j]);
                if (c.scaled)
                    err = scaled_error(scale_of(&c, host, m, j), mag[j], err);
                bnd[ARG_C][e] = loom_error_bound(c.odt, tpl_get(ref[ARG_C], c.odt, e), err);
            }
        }
done:
    free(mag);
}

const loom_template tpl_def_gemm = {
    .name = "gemm",
    .doc = "C[b] = A[b] @ B[b] on the tensor cores (TMA ring, producer/consumer warp groups, wgmma)",
    .nshape = LOOM_COUNT(GEMM_SHAPE),
    .shape = {GEMM_SHAPE(LOOM_SHAPE_PARAM)},
    .nconfig = LOOM_COUNT(GEMM_CONFIG),
    .config = {GEMM_CONFIG(LOOM_CONFIG_PARAM)},
    .valid = valid,
    .cost = cost,
    .heuristic = heuristic,
    .build = build,
    .grid = grid,
    .grid_rule = gemm_grid_rule,
    .init = init,
    .reference = reference,
    .atol = 2e-2,
    .rtol = 2e-2,
    .bound = bound,
};
