/*
 * gemm_bias_act.c -- C = act(A @ B + bias): A [M, K] and B [K, N] f16, bias [N] f32, C [M,
 * N] f16, accumulated in f32; act is none, relu or silu (x * sigmoid(x)).
 *
 * A warp-specialized, persistent GEMM on the pipeline layer (loom_pipe.h), written as a
 * user writes one: `ctas` programs take the BM x BN tiles in turn (grouped `group` tile
 * rows at a time, so programs side by side share A and B in L2).  The producer (one warp
 * group issuing TMA) fills a ring of `stages` slots with A's and B's tiles along K; the
 * consumer (one warp group) runs the layer's mainloop over them (loom_mainloop: wgmma with
 * one group in flight, each slot given back once its group is done); the epilogue
 * function adds the bias row (loaded straight into the accumulator's registers), applies
 * the activation and casts to f16, and the staged epilogue writes the tile with one TMA
 * store that runs while the next tile's mainloop starts.  With pingpong=1 two consumer
 * warp groups take the program's tiles in turn (loom_pingpong): one's epilogue (the bias
 * load, the activation, the store) runs while the other's mainloop keeps the tensor cores
 * busy, each through its own staging tile.  The ring's barriers, phases and register
 * budgets are the layer's.  TMA needs rows 16-byte aligned: N and K multiples of 8.  BN,
 * stages, ctas, group and pingpong are the tuner's knobs.
 */
#include "kernels.h"
#include "loom_pipe.h"

#include <math.h>
#include <stdio.h>

/* The template's table (docs/kernels.md, "A template's table"): each key once. */
#define GBA_SHAPE(X)                                                                       \
    X(M, M, int64_t, 1024, "rows of A and C")                                              \
    X(N, N, int64_t, 1024, "columns of B and C (a multiple of 8)")                         \
    X(K, K, int64_t, 1024, "columns of A, rows of B (a multiple of 8)")                    \
    X(act, act, int64_t, 1, "0 none, 1 relu, 2 silu")
#define GBA_CONFIG(X)                                                                      \
    X(BN, bn, int64_t, 256, "tile columns", 64, 128, 256)                                  \
    X(stages, stages, int64_t, 4, "ring slots", 2, 3, 4)                                   \
    X(ctas, ctas, int64_t, 132, "persistent programs (the H100's SMs)", 132)                \
    X(group, group, int64_t, 32, "tile rows a group of programs walks together (L2 reuse)", 8, 32) \
    X(pingpong, pingpong, int64_t, 0,                                                      \
      "1: two consumer warp groups take tiles in turn, one's epilogue beside the other's mainloop", 0, 1)
enum { GBA_SHAPE(LOOM_S_INDEX) S_COUNT };  /* S_M, S_N, S_K, S_act */
enum { GBA_CONFIG(LOOM_C_INDEX) C_COUNT }; /* C_BN, C_stages, C_ctas, C_group, C_pingpong */
enum { A_A, A_B, A_BIAS, A_C }; /* the kernel's arguments */
enum { ACT_NONE, ACT_RELU, ACT_SILU };
enum { BM = 64, BK = 64 };
#define SILU_REL (5 * 0x1p-23 + 0x1p-24) /* x * sigmoid(x): sigmoid's 5 ulp, the product's rounding */

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int refused(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    int64_t bn = cf[C_BN], stages = cf[C_stages], pp = cf[C_pingpong];
    if (sh[S_M] < 1 || sh[S_N] < 8 || sh[S_K] < 8 || sh[S_N] % 8 || sh[S_K] % 8)
        return snprintf(why, n, "M must be positive, N and K multiples of 8 (TMA's 16-byte rows)"), 1;
    if (sh[S_act] < ACT_NONE || sh[S_act] > ACT_SILU)
        return snprintf(why, n, "act must be 0 (none), 1 (relu) or 2 (silu)"), 1;
    if (bn != 64 && bn != 128 && bn != 256)
        return snprintf(why, n, "BN must be 64, 128 or 256"), 1;
    if (pp != 0 && pp != 1)
        return snprintf(why, n, "pingpong must be 0 or 1"), 1;
    /* the ring, and the f16 staging tiles of the TMA store (one a consumer warp group) */
    if (stages < 2 || stages * (BM * BK + BK * bn) * 2 + (1 + pp) * BM * bn * 2 > 226 * 1024)
        return snprintf(why, n, "%lld stages of %lld bytes and %lld staging tiles of %lld bytes: at least 2 stages, "
                        "within 226 KiB of shared memory", (long long)stages, (long long)(BM * BK + BK * bn) * 2,
                        (long long)(1 + pp), (long long)(BM * bn * 2)), 1;
    if (cf[C_ctas] < 1 || cf[C_ctas] > 1024 || cf[C_group] < 1)
        return snprintf(why, n, "ctas must be 1 to 1024 and group positive"), 1;
    return 0;
}

/* What the epilogue function reads: the bias argument and the activation. */
typedef struct epi_ctx {
    loom_val bias;
    int64_t act;
} epi_ctx;

/* The epilogue function: act(acc + bias) in f16. */
static loom_val bias_act(void *ctx, loom_kernel *k, loom_val acc, const loom_tile_at *t)
{
    const epi_ctx *a = ctx;
    loom_val x = loom_add(k, acc, loom_tile_row_vector(k, t, a->bias));
    if (a->act == ACT_RELU)
        x = loom_max(k, x, loom_const_f(k, LOOM_F32, 0));
    if (a->act == ACT_SILU)
        x = loom_mul(k, x, loom_sigmoid(k, x));
    return loom_cast(k, x, LOOM_F16);
}

static loom_kernel *build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    if (refused(sh, cf, err, n))
        return NULL;
    int64_t M = sh[S_M], N = sh[S_N], K = sh[S_K], bn = cf[C_BN];
    int64_t tm = cdiv(M, BM), tn = cdiv(N, bn), group = cf[C_group];
    int pp = (int)cf[C_pingpong], groups = 1 + pp; /* consumer warp groups */
    loom_kernel *k = loom_kernel_create("gemm_bias_act", LOOM_PIPE_PRODUCER_WARPS + 4 * groups);
    loom_pipe p = loom_pipe_create(k);
    loom_val A = loom_arg_tensor(k, "A", LOOM_F16, LOOM_SHAPE2(M, K), LOOM_IN);
    loom_val B = loom_arg_tensor(k, "B", LOOM_F16, LOOM_SHAPE2(K, N), LOOM_IN);
    loom_val bias = loom_arg_tensor(k, "bias", LOOM_F32, LOOM_SHAPE1(N), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F16, LOOM_SHAPE2(M, N), LOOM_OUT);
    loom_ring_tile tiles[2] = {{LOOM_F16, LOOM_SHAPE2(BM, BK), 1, LOOM_SWIZZLE_128},
                               {LOOM_F16, LOOM_SHAPE2(BK, bn), 1, LOOM_SWIZZLE_128}};
    loom_ring ring = loom_ring_create(&p, (int)cf[C_stages], 1, 2, tiles);
    loom_sched sched = loom_sched_static(&p, tm * tn, 1);
    loom_epilogue epi = loom_epilogue_create(&p, LOOM_EPI_STAGED, C, LOOM_F16, LOOM_SHAPE2(BM, bn), groups, 128);
    loom_pingpong turns = pp ? loom_pingpong_create(&p) : (loom_pingpong){0};
    loom_mainloop ml = {.ring = &ring, .a_tile = 0, .b_tile = 1, .rows = BM, .cols = bn, .steps = cdiv(K, BK)};
    loom_val zero = loom_const_i(k, LOOM_I32, 0), one = loom_const_i(k, LOOM_I32, 1), b, tr, tc;

    loom_region_op pt = loom_producer_begin(k);
    {
        loom_sched_loop tl = loom_sched_begin(k, &sched, LOOM_SCHED_PRODUCER, LOOM_NONE, 1, &zero);
        loom_sched_grouped(k, loom_sched_unit(&tl), tm, tn, group, &b, &tr, &tc);
        loom_val m0 = loom_mul(k, tr, loom_const_i(k, LOOM_I32, BM)), n0 = loom_mul(k, tc, loom_const_i(k, LOOM_I32, bn));
        loom_val it0 = loom_sched_arg(&tl, 0);
        loom_region_op kl = loom_for_begin(k, zero, loom_mainloop_uses(k, &ml), one, 0, NULL);
        {
            loom_val kk = loom_for_iv(k, kl), k0 = loom_mul(k, kk, loom_const_i(k, LOOM_I32, BK));
            loom_val s = loom_ring_produce(k, &ring, loom_add(k, it0, kk), -1);
            loom_ring_load(k, &ring, s, 0, 0, A, ((loom_val[]){m0, k0}));
            loom_ring_load(k, &ring, s, 1, 0, B, ((loom_val[]){k0, n0}));
        }
        loom_for_end(k, kl, 0, NULL);
        loom_val next = loom_add(k, it0, loom_mainloop_uses(k, &ml));
        loom_sched_end(k, &tl, &next);
    }
    loom_task_end(k, pt);

    loom_region_op ct = loom_consumers_begin(k, 4, groups);
    {
        /* ping-pong: replica r takes the program's tiles r, r + 2, ...; its ring uses skip
         * the other's tiles (it starts r tiles in and steps two tiles' uses) */
        loom_val rep = pp ? loom_pingpong_start(k, &turns) : LOOM_NONE;
        loom_val first = pp ? loom_mul(k, rep, loom_mainloop_uses(k, &ml)) : zero;
        loom_sched_loop tl = loom_sched_begin(k, &sched, LOOM_SCHED_CONSUMER, rep, 1, &first);
        loom_sched_grouped(k, loom_sched_unit(&tl), tm, tn, group, &b, &tr, &tc);
        loom_tile_at t = {.m0 = loom_mul(k, tr, loom_const_i(k, LOOM_I32, BM)),
                          .n0 = loom_mul(k, tc, loom_const_i(k, LOOM_I32, bn)), .rows = BM, .cols = bn};
        loom_val it0 = loom_sched_arg(&tl, 0);
        if (pp)
            loom_pingpong_mma_begin(k, &turns);
        loom_val acc = loom_mainloop_run(k, &ml, it0, LOOM_NONE, LOOM_NONE, 0);
        if (pp)
            loom_pingpong_mma_end(k, &turns);
        acc = loom_mainloop_finish(k, &ml, acc, loom_mainloop_last(k, &ml, it0));
        epi_ctx ctx = {bias, sh[S_act]};
        loom_epilogue_visit(k, &epi, bias_act, &ctx, acc, &t, rep, LOOM_NONE); /* rep's staging tile */
        if (pp)
            loom_pingpong_tile_end(k, &turns);
        loom_val next = loom_add(k, it0, loom_mul(k, loom_const_i(k, LOOM_I32, groups), loom_mainloop_uses(k, &ml)));
        loom_sched_end(k, &tl, &next);
        if (pp)
            loom_pingpong_finish(k, &turns, loom_sched_odd(k, &sched));
        loom_epilogue_finish(k, &epi); /* the last store has read the staging tile */
    }
    loom_task_end(k, ct);
    return k;
}

static int valid(const int64_t *sh, const int64_t *cf, char *why, size_t n) { return !refused(sh, cf, why, n); }

/* The persistent programs: ctas, or fewer where there are fewer tiles. */
static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    int64_t tiles = cdiv(sh[S_M], BM) * cdiv(sh[S_N], cf[C_BN]);
    g[0] = (int)(tiles < cf[C_ctas] ? tiles : cf[C_ctas]), g[1] = g[2] = 1;
}

static void init(const int64_t *sh, void *const *host, uint64_t seed)
{
    for (int64_t i = 0; i < sh[S_M] * sh[S_K]; i++)
        kernels_set(host[A_A], LOOM_F16, i, kernels_rand(&seed));
    for (int64_t i = 0; i < sh[S_K] * sh[S_N]; i++)
        kernels_set(host[A_B], LOOM_F16, i, kernels_rand(&seed));
    for (int64_t i = 0; i < sh[S_N]; i++)
        kernels_set(host[A_BIAS], LOOM_F32, i, kernels_rand(&seed));
}

/* act(A @ B + bias) at (m, n) in double, and the sum of the terms' magnitudes. */
static double exact(const int64_t *sh, void *const *host, int64_t m, int64_t n, double *mag)
{
    double x = kernels_get(host[A_BIAS], LOOM_F32, n);
    *mag = fabs(x);
    for (int64_t q = 0; q < sh[S_K]; q++) {
        double t = kernels_get(host[A_A], LOOM_F16, m * sh[S_K] + q) * kernels_get(host[A_B], LOOM_F16, q * sh[S_N] + n);
        x += t, *mag += fabs(t);
    }
    return sh[S_act] == ACT_RELU ? fmax(x, 0) : sh[S_act] == ACT_SILU ? x / (1 + exp(-x)) : x;
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    double mag;
    for (int64_t m = 0; m < sh[S_M]; m++)
        for (int64_t n = 0; n < sh[S_N]; n++)
            kernels_set(ref[A_C], LOOM_F16, m * sh[S_N] + n, exact(sh, host, m, n, &mag));
}

/* The error model (docs/checks.md): the K products are exact in f32 and summed with the
 * bias in f32 (loom_f32_sum_error of K + 1 terms); the activation's slope is at most 1.1;
 * silu's x * sigmoid(x) adds sigmoid's 5 ulp (docs/dsl.md's GPU bound; the interpreter's
 * is tighter) and the product's rounding, 5 * 2^-23 + 2^-24 of |y|; then f16. */
static void bound(const int64_t *sh, void *const *host, void *const *ref, double *const *bnd)
{
    double mag;
    for (int64_t m = 0; m < sh[S_M]; m++)
        for (int64_t n = 0; n < sh[S_N]; n++) {
            int64_t i = m * sh[S_N] + n;
            double y = exact(sh, host, m, n, &mag);
            double err = 1.1 * loom_f32_sum_error(sh[S_K] + 1, mag) + (sh[S_act] == ACT_SILU ? SILU_REL * fabs(y) : 0);
            bnd[A_C][i] = loom_error_bound(LOOM_F16, kernels_get(ref[A_C], LOOM_F16, i), err);
        }
}

const loom_template gemm_bias_act_template = {
    .name = "gemm_bias_act",
    .doc = "C = act(A @ B + bias), f16 in and out, f32 accumulation (examples/kernels)",
    .nshape = LOOM_COUNT(GBA_SHAPE),
    .shape = {GBA_SHAPE(LOOM_SHAPE_PARAM)},
    .nconfig = LOOM_COUNT(GBA_CONFIG),
    .config = {GBA_CONFIG(LOOM_CONFIG_PARAM)},
    .build = build,
    .grid = grid,
    .init = init,
    .reference = reference,
    .valid = valid,
    .bound = bound,
};
