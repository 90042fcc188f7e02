/*
 * gemm_plain.c -- C = A @ B: A [M, K] and B [K, N] f16, C [M, N] f16, accumulated in f32,
 * written the plain way (plain_gemm, plain.c: a tile loop of loads and loom_dot, a cast
 * and a store) and handed to the compiler's automatic warp specialization
 * (loom_kernel_set_autows, docs/dsl.md "Two levels").
 *
 * What the template adds to plain_gemm is the search: the tile (BM, BN, BK) and the
 * passes' three knobs -- consumer warp groups, ring stages, ping-pong -- and the grouped
 * tile order are config keys with candidates, and valid() refuses, before anything is
 * built, what the passes would refuse at compile or what cannot fit:
 *
 *   - each consumer warp group holds 64 or 128 of the accumulator's rows (wgmma's 64 rows
 *     a group): consumers=1 takes BM 64 or 128, consumers=2 cooperative BM=128 (64 rows
 *     each); pingpong=1 (consumers=2 taking every other tile whole) BM=64;
 *   - the accumulator stays within the consumers' registers (192 of them a thread);
 *   - shared memory: the ring (stages x (BM x BK + BK x BN) f16) beside the epilogue's
 *     staging tile for the TMA store of C (BM x BN f16, two with ping-pong; without
 *     ping-pong, where the whole does not fit, a half or a quarter of its columns, each
 *     at least 64: C goes out in column parts), the barriers and 1 KiB of alignment,
 *     within 227 KiB -- the sums pipe/autows.c's staged_store takes.  A config past them
 *     would still compile, its store going from registers; the template refuses it so
 *     that every config it tunes has the TMA store;
 *   - TMA's 16-byte rows: N and K multiples of 8.
 *
 * M is a run-time dim (the kernel built at M serves every launch up to it); the grid is
 * the user's, cdiv(M, BM) * cdiv(N, BN) programs along x, which the persistent kernel
 * takes one CTA an SM (the launch passes the grid; runtime/launch.c).
 */
#include "kernels.h"
#include "plain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { S_M, S_N, S_K };
enum { C_BM, C_BN, C_BK, C_CONSUMERS, C_STAGES, C_PINGPONG, C_GROUP };
enum { A_M, A_A, A_B, A_C }; /* the kernel's arguments (plain_gemm's) */

#define CDIV(a, b) (((a) + (b) - 1) / (b))

/* Shared memory a CTA may take, and what the specialized kernel keeps beside the ring and
 * the staging tile: 1 KiB of alignment and 64 bytes of barriers a stage (pipe/autows.c). */
enum { SMEM_LIMIT = 227 * 1024, SMEM_FIXED = 1024, SMEM_PER_STAGE = 64 };

static plain_cfg cfg_of(const int64_t *cf)
{
    return (plain_cfg){.bm = (int)cf[C_BM], .bn = (int)cf[C_BN], .bk = (int)cf[C_BK],
                       .consumers = (int)cf[C_CONSUMERS], .stages = (int)cf[C_STAGES],
                       .group = (int)cf[C_GROUP], .pingpong = (int)cf[C_PINGPONG]};
}

/* Why (shape, config) cannot be served, with the reason in why; 0 when it can. */
static int refused(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    int64_t bm = cf[C_BM], bn = cf[C_BN], bk = cf[C_BK], cons = cf[C_CONSUMERS], stages = cf[C_STAGES];
    int64_t pp = cf[C_PINGPONG];
    if (sh[S_M] < 1 || sh[S_M] > INT32_MAX)
        return snprintf(why, n, "M must be 1 to 2^31 - 1 (the kernel takes it as an i32 argument)"), 1;
    if (sh[S_N] < 8 || sh[S_K] < 8 || sh[S_N] % 8 || sh[S_K] % 8)
        return snprintf(why, n, "N and K must be positive multiples of 8 (TMA's 16-byte rows)"), 1;
    if (bm != 64 && bm != 128)
        return snprintf(why, n, "BM must be 64 or 128"), 1;
    if (bn != 64 && bn != 128 && bn != 256)
        return snprintf(why, n, "BN must be 64, 128 or 256"), 1;
    if (bk != 32 && bk != 64)
        return snprintf(why, n, "BK must be 32 or 64 (A's tile row one 64- or 128-byte swizzle span)"), 1;
    if (cons != 1 && cons != 2)
        return snprintf(why, n, "consumers must be 1 or 2 (consumer warp groups)"), 1;
    if (pp != 0 && pp != 1)
        return snprintf(why, n, "pingpong must be 0 or 1"), 1;
    if (pp && (cons != 2 || bm != 64))
        return snprintf(why, n, "pingpong=1 needs consumers=2 and BM=64 (two warp groups taking turns on whole "
                                "64-row tiles), not consumers=%lld and BM=%lld", (long long)cons, (long long)bm), 1;
    if (!pp && cons == 2 && bm != 128)
        return snprintf(why, n, "consumers=2 without pingpong needs BM=128 (two warp groups sharing a tile, 64 rows "
                                "each: wgmma's rows a warp group), not BM=%lld", (long long)bm), 1;
    int64_t rows = pp ? bm : bm / cons; /* a warp group's rows */
    if (rows * bn / 128 > 192)
        return snprintf(why, n, "a %lld x %lld accumulator in one warp group takes %lld registers a thread: more than "
                                "192 of the consumers' (BN=128, or consumers=2 with BM=128, halves it)",
                        (long long)rows, (long long)bn, (long long)(rows * bn / 128)), 1;
    if (cf[C_GROUP] < 0)
        return snprintf(why, n, "group must be 0 (row-major tiles) or the tile rows of a group"), 1;
    if (stages < 2 || stages > 8)
        return snprintf(why, n, "stages must be 2 to 8 (the ring's slots)"), 1;
    int64_t ring = stages * (bm * bk + bk * bn) * 2, staging = bm * bn * 2 * (pp ? 2 : 1);
    for (int64_t p = 2; !pp && p <= 4 && bn / p >= 64 && ring + staging + SMEM_FIXED + SMEM_PER_STAGE * stages > SMEM_LIMIT;
         p *= 2)
        staging = bm * bn * 2 / p; /* in column parts */
    if (ring + staging + SMEM_FIXED + SMEM_PER_STAGE * stages > SMEM_LIMIT)
        return snprintf(why, n, "%lld stages of %lld bytes and the %lld-byte staging of C need more than 227 KiB of "
                                "shared memory: fewer stages or a smaller tile",
                        (long long)stages, (long long)(ring / stages), (long long)staging), 1;
    return 0;
}

static int valid(const int64_t *sh, const int64_t *cf, char *why, size_t n) { return !refused(sh, cf, why, n); }

static loom_kernel *build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    if (refused(sh, cf, err, n))
        return NULL;
    plain_cfg c = cfg_of(cf);
    return plain_gemm(sh[S_M], sh[S_N], sh[S_K], LOOM_F16, &c);
}

/* Waves of tiles over 132 SMs times a tile's work, larger tiles reading less per
 * product; two stages expose the loads.  An order, not a time. */
static double cost(const int64_t *sh, const int64_t *cf)
{
    double tiles = (double)CDIV(sh[S_M], cf[C_BM]) * (double)CDIV(sh[S_N], cf[C_BN]);
    double waves = ceil(tiles / 132);
    double per_tile = (double)cf[C_BM] * cf[C_BN] * sh[S_K] * (1.0 + 64.0 / cf[C_BM] + 64.0 / cf[C_BN]);
    return waves * per_tile / (cf[C_STAGES] >= 3 ? 1.0 : 1.3);
}

/* grid[0] = cdiv(N, BN) * cdiv(M, BM), following a launch's M. */
static void grid_rule(const int64_t *sh, const int64_t *cf, loom_grid_rule *r)
{
    *r = (loom_grid_rule){0};
    for (int d = 0; d < 3; d++)
        r->div[d] = r->mult[d] = 1;
    r->c[1] = r->c[2] = 1;
    r->per[0][S_M] = 1;
    r->div[0] = cf[C_BM];
    r->mult[0] = CDIV(sh[S_N], cf[C_BN]);
}

static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    loom_grid_rule r;
    grid_rule(sh, cf, &r);
    loom_grid_rule_eval(&r, sh, g);
}

static void init(const int64_t *sh, void *const *host, uint64_t seed)
{
    *(int32_t *)host[A_M] = (int32_t)sh[S_M];
    for (int64_t i = 0; i < sh[S_M] * sh[S_K]; i++)
        kernels_set(host[A_A], LOOM_F16, i, kernels_rand(&seed));
    for (int64_t i = 0; i < sh[S_K] * sh[S_N]; i++)
        kernels_set(host[A_B], LOOM_F16, i, kernels_rand(&seed));
}

/* Row m of A @ B in double into out[N] and, with mag, the products' magnitudes summed. */
static void row_of(const int64_t *sh, void *const *host, int64_t m, double *out, double *mag)
{
    int64_t N = sh[S_N], K = sh[S_K];
    for (int64_t j = 0; j < N; j++)
        out[j] = 0;
    for (int64_t j = 0; mag && j < N; j++)
        mag[j] = 0;
    for (int64_t q = 0; q < K; q++) {
        double a = kernels_get(host[A_A], LOOM_F16, m * K + q);
        const _Float16 *b = (const _Float16 *)host[A_B] + q * N;
        for (int64_t j = 0; j < N; j++) {
            out[j] += a * (double)b[j];
            if (mag)
                mag[j] += fabs(a * (double)b[j]);
        }
    }
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    double *row = malloc((size_t)sh[S_N] * sizeof *row);
    if (!row)
        return;
    for (int64_t m = 0; m < sh[S_M]; m++) {
        row_of(sh, host, m, row, NULL);
        for (int64_t j = 0; j < sh[S_N]; j++)
            kernels_set(ref[A_C], LOOM_F16, m * sh[S_N] + j, row[j]);
    }
    free(row);
}

/* The error model (docs/checks.md): C sums K exact products in f32 (in any order: the
 * interpreter's fma chain, wgmma's k steps), then rounds to f16 once. */
static void bound(const int64_t *sh, void *const *host, void *const *ref, double *const *bnd)
{
    int64_t N = sh[S_N];
    double *row = malloc((size_t)N * 2 * sizeof *row);
    if (!row)
        return;
    for (int64_t m = 0; m < sh[S_M]; m++) {
        row_of(sh, host, m, row, row + N);
        for (int64_t j = 0; j < N; j++)
            bnd[A_C][m * N + j] = loom_error_bound(LOOM_F16, kernels_get(ref[A_C], LOOM_F16, m * N + j),
                                                   loom_f32_sum_error(sh[S_K], row[N + j]));
    }
    free(row);
}

const loom_template gemm_plain_template = {
    .name = "gemm_plain",
    .doc = "C = A @ B, f16 in and out, f32 accumulation: a plain tile loop, warp-specialized by the compiler "
           "(examples/kernels)",
    .nshape = 3,
    .shape = {{.key = "M", .def = 4096, .runtime = 1,
               .doc = "rows of A and C: the most a launch takes (its kernel argument M, 1 to this)"},
              {"N", 4096, "columns of B and C (a multiple of 8)"},
              {"K", 4096, "columns of A, rows of B (a multiple of 8)"}},
    .nconfig = 7,
    /* the defaults: the fastest measured at 4096^3 on an H100 */
    .config = {{"BM", 128, "tile rows (64, or 128: two consumer warp groups, or one of 128 rows)", 2, {64, 128}},
               {"BN", 256, "tile columns (64, 128, 256)", 2, {128, 256}},
               {"BK", 64, "k step (64, or 32)"},
               {"consumers", 2, "consumer warp groups (1 or 2)", 2, {1, 2}},
               {"stages", 4, "ring slots (2 to 8)", 3, {2, 3, 4}},
               {"pingpong", 0, "1: the two consumer warp groups take turns on whole 64-row tiles (consumers=2, "
                               "BM=64), one's epilogue beside the other's wgmma", 2, {0, 1}},
               {"group", 8, "tile rows a group of the grouped (L2-friendly) order; 0: row-major", 2, {8, 32}}},
    .valid = valid,
    .cost = cost,
    .build = build,
    .grid = grid,
    .grid_rule = grid_rule,
    .init = init,
    .reference = reference,
    .bound = bound,
};
