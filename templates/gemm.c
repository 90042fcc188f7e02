/*
 * gemm.c -- C[b] = A[b] @ B[b] on Hopper's tensor cores: a warp-specialized kernel.
 *
 * The algorithm, as the builder calls below spell it:
 *
 *   shared: A ring [stages][BM, BK], B ring [stages][BK, BN] (128-byte swizzle),
 *           barriers full[stages] (the producer's expect-bytes: 1 arrival) and
 *           empty[stages] (the consumer task: 1 arrival a phase)
 *   producer task (one warp group, 40 registers): for each output tile it owns, for each
 *           k step i (a running count over tiles): wait empty[i % S] (phase ^ 1), expect
 *           the bytes of both boxes on full[i % S], TMA A and B into slot i % S
 *   consumer task (one or two warp groups, 232 registers): for each tile: acc = 0; for
 *           each k step: wait full[slot], wgmma, commit, wait until one group is in
 *           flight, release the previous slot (arrive on empty); after the loop wait for
 *           all, release the last slot; then the epilogue: cast and store the tile
 *           straight from the accumulator's registers (masked at the M/N edges)
 *
 * Tiles are visited persistently (grid = `ctas` programs, tile t = pid, pid + ctas, ...)
 * in groups of 8 tile rows so neighbouring CTAs share A and B in L2; ctas=0 launches one
 * program per tile instead.  Out-of-range rows and K columns read as zero (TMA), so any
 * M and N work and K only needs 16-byte aligned rows (a multiple of 8).  A batch runs as
 * more tiles; A may be shared by the whole batch (ashared=1, the IKBO weights case).
 */
#include "tpl.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

enum { S_M, S_N, S_K, S_BATCH, S_DTYPE, S_ODTYPE, S_ASHARED };
enum { C_BM, C_BN, C_BK, C_STAGES, C_CWARPS, C_CTAS, C_GROUP };

typedef struct g_cfg {
    int64_t M, N, K, batch;
    loom_dtype dt, odt;
    int ashared;
    int bm, bn, bk, stages, cwarps, ctas, group;
} g_cfg;

static g_cfg cfg_of(const int64_t *sh, const int64_t *cf)
{
    return (g_cfg){sh[S_M], sh[S_N], sh[S_K], sh[S_BATCH], (loom_dtype)sh[S_DTYPE], (loom_dtype)sh[S_ODTYPE],
                   (int)sh[S_ASHARED], (int)cf[C_BM], (int)cf[C_BN], (int)cf[C_BK], (int)cf[C_STAGES],
                   (int)cf[C_CWARPS], (int)cf[C_CTAS], (int)cf[C_GROUP]};
}

static int64_t tiles(const g_cfg *c) { return TPL_CDIV(c->M, c->bm) * TPL_CDIV(c->N, c->bn) * c->batch; }

/* The tile t of this program: batch b, first row m0, first column n0 (grouped order). */
static void tile_coords(loom_kernel *k, const g_cfg *c, loom_val t, loom_val *b, loom_val *m0, loom_val *n0)
{
    int64_t tm = TPL_CDIV(c->M, c->bm), tn = TPL_CDIV(c->N, c->bn);
#define CI(v) loom_const_i(k, LOOM_I32, (v))
    *b = loom_div(k, t, CI(tm * tn));
    loom_val r = loom_rem(k, t, CI(tm * tn));
    loom_val per_group = CI((int64_t)c->group * tn);
    loom_val first = loom_mul(k, loom_div(k, r, per_group), CI(c->group));
    loom_val gsize = loom_min(k, loom_sub(k, CI(tm), first), CI(c->group));
    loom_val in = loom_rem(k, r, per_group);
    *m0 = loom_mul(k, loom_add(k, first, loom_rem(k, in, gsize)), CI(c->bm));
    *n0 = loom_mul(k, loom_div(k, in, gsize), CI(c->bn));
}

static loom_kernel *gemm_build(const g_cfg *c)
{
    int prod_warps = 4, warps = prod_warps + c->cwarps;
    loom_kernel *k = loom_kernel_create("gemm", warps);
    bool batched = c->batch > 1;
    loom_shape ash = batched && !c->ashared ? LOOM_SHAPE3(c->batch, c->M, c->K) : LOOM_SHAPE2(c->M, c->K);
    loom_shape bsh = batched ? LOOM_SHAPE3(c->batch, c->K, c->N) : LOOM_SHAPE2(c->K, c->N);
    loom_shape csh = batched ? LOOM_SHAPE3(c->batch, c->M, c->N) : LOOM_SHAPE2(c->M, c->N);
    loom_val A = loom_arg_tensor(k, "A", c->dt, ash, LOOM_IN);
    loom_val B = loom_arg_tensor(k, "B", c->dt, bsh, LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", c->odt, csh, LOOM_OUT);

    loom_val as = loom_smem_alloc(k, c->dt, LOOM_SHAPE2(c->bm, c->bk), c->stages, LOOM_SWIZZLE_128);
    loom_val bs = loom_smem_alloc(k, c->dt, LOOM_SHAPE2(c->bk, c->bn), c->stages, LOOM_SWIZZLE_128);
    loom_val full = loom_mbar_alloc(k, c->stages, 1);
    loom_val empty = loom_mbar_alloc(k, c->stages, 1);
    int64_t nk = TPL_CDIV(c->K, c->bk), ntiles = tiles(c);
    int64_t bytes = ((int64_t)c->bm * c->bk + (int64_t)c->bk * c->bn) * (int64_t)loom_dtype_size(c->dt);
    loom_val pid = loom_program_id(k, 0);
    loom_val step = c->ctas ? loom_num_programs(k, 0) : CI(ntiles);
    loom_val zero = CI(0), one = CI(1);

    /* producer: TMA into the ring */
    loom_region_op pt = loom_task_begin(k, prod_warps, 40, 1);
    {
        loom_region_op tl = loom_for_begin(k, pid, CI(ntiles), step, 1, &zero);
        loom_val b, m0, n0;
        tile_coords(k, c, loom_for_iv(k, tl), &b, &m0, &n0);
        loom_val it0 = loom_for_arg(k, tl, 0);
        loom_region_op kl = loom_for_begin(k, zero, CI(nk), one, 0, NULL);
        {
            loom_val kk = loom_for_iv(k, kl);
            loom_val it = loom_add(k, it0, kk);
            loom_val s = loom_ring_slot(k, it, c->stages);
            loom_mbar_wait(k, empty, s, loom_sub(k, one, loom_ring_phase(k, it, c->stages)));
            loom_mbar_expect(k, full, s, bytes);
            loom_val k0 = loom_mul(k, kk, CI(c->bk));
            if (batched && !c->ashared)
                loom_tma_load(k, A, ((loom_val[]){b, m0, k0}), loom_smem_slot(k, as, s), full, s);
            else
                loom_tma_load(k, A, ((loom_val[]){m0, k0}), loom_smem_slot(k, as, s), full, s);
            if (batched)
                loom_tma_load(k, B, ((loom_val[]){b, k0, n0}), loom_smem_slot(k, bs, s), full, s);
            else
                loom_tma_load(k, B, ((loom_val[]){k0, n0}), loom_smem_slot(k, bs, s), full, s);
        }
        loom_for_end(k, kl, 0, NULL);
        loom_val next = loom_add(k, it0, CI(nk));
        loom_for_end(k, tl, 1, &next);
    }
    loom_task_end(k, pt);

    /* consumers: wgmma out of the ring, epilogue from registers */
    loom_region_op ct = loom_task_begin(k, c->cwarps, 232, 1);
    {
        loom_region_op tl = loom_for_begin(k, pid, CI(ntiles), step, 1, &zero);
        loom_val b, m0, n0;
        tile_coords(k, c, loom_for_iv(k, tl), &b, &m0, &n0);
        loom_val it0 = loom_for_arg(k, tl, 0);
        loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(c->bm, c->bn));
        loom_region_op kl = loom_for_begin(k, zero, CI(nk), one, 1, &acc0);
        {
            loom_val kk = loom_for_iv(k, kl);
            loom_val it = loom_add(k, it0, kk);
            loom_val s = loom_ring_slot(k, it, c->stages);
            loom_mbar_wait(k, full, s, loom_ring_phase(k, it, c->stages));
            loom_val acc = loom_wgmma(k, loom_smem_slot(k, as, s), loom_smem_slot(k, bs, s), loom_for_arg(k, kl, 0));
            loom_wgmma_commit(k);
            loom_region_op w = loom_wgmma_wait(k, 1, 1, &acc);
            /* the previous step's wgmma is done: give its slot back */
            loom_region_op first = loom_if_begin(k, loom_cmp(k, LOOM_GT, kk, zero), 0);
            loom_mbar_arrive(k, empty, loom_ring_slot(k, loom_sub(k, it, one), c->stages));
            loom_if_end(k, first, 0, NULL);
            loom_val r = loom_wgmma_result(k, w, 0);
            loom_for_end(k, kl, 1, &r);
        }
        loom_val accl = loom_for_result(k, kl, 0);
        loom_region_op w = loom_wgmma_wait(k, 0, 1, &accl);
        loom_val last = loom_add(k, it0, CI(nk - 1));
        loom_mbar_arrive(k, empty, loom_ring_slot(k, last, c->stages));
        loom_val out = loom_cast(k, loom_wgmma_result(k, w, 0), c->odt);
        if (batched)
            loom_store(k, C, ((loom_val[]){b, m0, n0}), out, LOOM_NONE);
        else
            loom_store(k, C, ((loom_val[]){m0, n0}), out, LOOM_NONE);
        loom_val next = loom_add(k, it0, CI(nk));
        loom_for_end(k, tl, 1, &next);
    }
    loom_task_end(k, ct);
#undef CI
    return k;
}

/* Why (shape, config) cannot be served, or NULL when it can. */
static const char *why_not(const g_cfg *c, char *buf, size_t n)
{
    if (c->dt != LOOM_F16 && c->dt != LOOM_BF16)
        return "dtype must be f16 or bf16 (the tensor-core inputs)";
    if (c->odt != LOOM_F16 && c->odt != LOOM_BF16 && c->odt != LOOM_F32)
        return "odtype must be f16, bf16 or f32";
    if (c->M < 1 || c->N < 1 || c->K < 1 || c->batch < 1)
        return "M, N, K and batch must be positive";
    if (c->K % 8 || c->N % 8)
        return "K and N must be multiples of 8 (TMA needs 16-byte aligned rows)";
    if (c->bk != 64)
        return "BK must be 64 (one 128-byte swizzle span of f16/bf16)";
    if (c->cwarps != 4 && c->cwarps != 8)
        return "cwarps must be 4 or 8 (one or two consumer warp groups)";
    if (c->bm != 64 * (c->cwarps / 4) && c->bm != 128 * (c->cwarps / 4))
        return "BM must be 64 or 128 rows per consumer warp group";
    if (c->bn < 64 || c->bn > 256 || (c->bn & (c->bn - 1)))
        return "BN must be 64, 128 or 256";
    if (c->stages < 2 || c->stages > 8)
        return "stages must be 2 to 8";
    int64_t smem = (int64_t)c->stages * (c->bm + c->bn) * c->bk * 2;
    if (smem > 220 * 1024) {
        snprintf(buf, n, "the ring needs %lld bytes of shared memory (over 220 KiB); use fewer stages or smaller tiles",
                 (long long)smem);
        return buf;
    }
    if ((int64_t)(c->bm / (c->cwarps / 4)) * c->bn / 128 > 192)
        return "the accumulator needs more than 192 of the consumers' 232 registers a thread";
    if (c->ctas < 0 || c->group < 1)
        return "ctas must be >= 0 and group >= 1";
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
    double t = (double)tiles(&c), ctas = c.ctas ? c.ctas : 132;
    double waves = t / ctas;
    double per_tile = (double)c.bm * c.bn * c.K * (1.0 + 64.0 / c.bm + 64.0 / c.bn);
    return (waves < 1 ? 1 : waves + (waves - (int64_t)waves > 0 ? 1 : 0)) * per_tile / (c.stages >= 3 ? 1.0 : 1.3);
}

static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    g_cfg c = cfg_of(sh, cf);
    int64_t t = tiles(&c);
    g[0] = (int)(c.ctas && c.ctas < t ? c.ctas : t);
    g[1] = g[2] = 1;
}

static void init(const int64_t *sh, void *const *host, uint64_t seed)
{
    int64_t M = sh[S_M], N = sh[S_N], K = sh[S_K], nb = sh[S_BATCH];
    int64_t na = nb > 1 && !sh[S_ASHARED] ? nb : 1;
    tpl_fill(host[0], (loom_dtype)sh[S_DTYPE], na * M * K, -1, 1, &seed);
    tpl_fill(host[1], (loom_dtype)sh[S_DTYPE], nb * K * N, -1, 1, &seed);
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    int64_t M = sh[S_M], N = sh[S_N], K = sh[S_K], nb = sh[S_BATCH];
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
                double a = tpl_get(host[0], dt, (ash ? 0 : b * M * K) + m * K + q);
                for (int64_t j = 0; j < N; j++)
                    row[j] += a * tpl_get(host[1], dt, b * K * N + q * N + j);
            }
            for (int64_t j = 0; j < N; j++)
                tpl_set(ref[2], odt, b * M * N + m * N + j, row[j]);
        }
    free(row);
}

const loom_template tpl_def_gemm = {
    .name = "gemm",
    .doc = "C[b] = A[b] @ B[b] on the tensor cores (TMA ring, producer/consumer warp groups, wgmma)",
    .nshape = 7,
    .shape = {{"M", 512, "rows of A and C"},
              {"N", 512, "columns of B and C (a multiple of 8)"},
              {"K", 512, "columns of A, rows of B (a multiple of 8)"},
              {"batch", 1, "independent products (B and C batched)"},
              {"dtype", LOOM_F16, "input type: f16 or bf16"},
              {"odtype", LOOM_F16, "output type: f16, bf16 or f32"},
              {"ashared", 1, "1: A [M,K] shared by the batch; 0: A batched too"}},
    .nconfig = 7,
    .config = {{"BM", 128, "tile rows (64 or 128 per consumer warp group)", 3, {64, 128, 256}},
               {"BN", 256, "tile columns (64, 128, 256)", 3, {64, 128, 256}},
               {"BK", 64, "k step"},
               {"stages", 4, "ring slots", 3, {3, 4, 5}},
               {"cwarps", 8, "consumer warps (4: one warp group, 8: two)", 2, {4, 8}},
               {"ctas", 132, "persistent CTAs (0: one CTA per tile)", 2, {0, 132}},
               {"group", 8, "tile rows per L2 group", 2, {8, 16}}},
    .valid = valid,
    .cost = cost,
    .build = build,
    .grid = grid,
    .init = init,
    .reference = reference,
    .atol = 2e-2,
    .rtol = 2e-2,
};
