/*
 * gemm_bias_act.c -- C = act(A @ B + bias): A [M, K] and B [K, N] f16, bias [N] f32, C [M,
 * N] f16, accumulated in f32; act is none, relu or silu (x / (1 + e^-x)).
 *
 * Written on the pipeline layer (loom_pipe.h), a tile of BM x BN a program: the producer
 * (one warp group issuing TMA) fills a ring of `stages` slots with A's and B's tiles along
 * K; the consumer (one warp group) waits for each slot, runs the wgmma and frees the slot;
 * the epilogue adds the bias, applies the activation in registers and stores the tile.
 * The ring's barriers, phases and register budgets are the layer's.  TMA needs rows
 * 16-byte aligned: N and K multiples of 8.  BN and stages are the tuner's knobs.
 */
#include "kernels.h"
#include "loom_pipe.h"

#include <math.h>
#include <stdio.h>

enum { S_M, S_N, S_K, S_ACT };
enum { C_BN, C_STAGES };
enum { A_A, A_B, A_BIAS, A_C }; /* the kernel's arguments */
enum { ACT_NONE, ACT_RELU, ACT_SILU };
enum { BM = 64, BK = 64 };

static int refused(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    int64_t bn = cf[C_BN], stages = cf[C_STAGES];
    if (sh[S_M] < 1 || sh[S_N] < 8 || sh[S_K] < 8 || sh[S_N] % 8 || sh[S_K] % 8)
        return snprintf(why, n, "M must be positive, N and K multiples of 8 (TMA's 16-byte rows)"), 1;
    if (sh[S_ACT] < ACT_NONE || sh[S_ACT] > ACT_SILU)
        return snprintf(why, n, "act must be 0 (none), 1 (relu) or 2 (silu)"), 1;
    if (bn != 64 && bn != 128 && bn != 256)
        return snprintf(why, n, "BN must be 64, 128 or 256"), 1;
    /* the ring, and the accumulator's f32 tile once: the epilogue changes its layout */
    if (stages < 2 || stages * (BM * BK + BK * bn) * 2 + BM * bn * 4 > 227 * 1024)
        return snprintf(why, n, "%lld stages of %lld bytes and the %lld-byte epilogue: at least 2 stages, within "
                        "227 KiB of shared memory", (long long)stages, (long long)(BM * BK + BK * bn) * 2,
                        (long long)(BM * bn * 4)), 1;
    return 0;
}

/* The program's tile: rows from m0, columns from n0. */
static void origin(loom_kernel *k, int64_t bn, loom_val o[2])
{
    o[0] = loom_mul(k, loom_program_id(k, 1), loom_const_i(k, LOOM_I32, BM));
    o[1] = loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, bn));
}

static loom_kernel *build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    if (refused(sh, cf, err, n))
        return NULL;
    int64_t M = sh[S_M], N = sh[S_N], K = sh[S_K], bn = cf[C_BN], nk = (K + BK - 1) / BK;
    loom_kernel *k = loom_kernel_create("gemm_bias_act", LOOM_PIPE_PRODUCER_WARPS + 4);
    loom_pipe p = loom_pipe_create(k);
    loom_val A = loom_arg_tensor(k, "A", LOOM_F16, LOOM_SHAPE2(M, K), LOOM_IN);
    loom_val B = loom_arg_tensor(k, "B", LOOM_F16, LOOM_SHAPE2(K, N), LOOM_IN);
    loom_val bias = loom_arg_tensor(k, "bias", LOOM_F32, LOOM_SHAPE1(N), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F16, LOOM_SHAPE2(M, N), LOOM_OUT);
    loom_ring_tile tiles[2] = {{LOOM_F16, LOOM_SHAPE2(BM, BK), 1, LOOM_SWIZZLE_128},
                               {LOOM_F16, LOOM_SHAPE2(BK, bn), 1, LOOM_SWIZZLE_128}};
    loom_ring ring = loom_ring_create(&p, (int)cf[C_STAGES], 1, 2, tiles);
    loom_epilogue epi = loom_epilogue_create(&p, LOOM_EPI_REGISTERS, C, LOOM_F16, LOOM_SHAPE2(BM, bn), 1, 128);
    loom_val zero = loom_const_i(k, LOOM_I32, 0), one = loom_const_i(k, LOOM_I32, 1);
    loom_val steps = loom_const_i(k, LOOM_I32, nk), o[2];

    loom_region_op producer = loom_producer_begin(k);
    {
        origin(k, bn, o);
        loom_region_op kl = loom_for_begin(k, zero, steps, one, 0, NULL);
        {
            loom_val it = loom_for_iv(k, kl), k0 = loom_mul(k, it, loom_const_i(k, LOOM_I32, BK));
            loom_val s = loom_ring_produce(k, &ring, it, -1);
            loom_ring_load(k, &ring, s, 0, 0, A, ((loom_val[]){o[0], k0}));
            loom_ring_load(k, &ring, s, 1, 0, B, ((loom_val[]){k0, o[1]}));
        }
        loom_for_end(k, kl, 0, NULL);
    }
    loom_task_end(k, producer);

    loom_region_op consumer = loom_consumers_begin(k, 4, 1);
    {
        origin(k, bn, o);
        loom_shape tile = LOOM_SHAPE2(BM, bn);
        loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0), tile);
        loom_region_op kl = loom_for_begin(k, zero, steps, one, 1, &acc0);
        {
            loom_val s = loom_ring_consume(k, &ring, loom_for_iv(k, kl));
            loom_val acc = loom_wgmma(k, loom_ring_view(k, &ring, s, 0, LOOM_NONE),
                                      loom_ring_view(k, &ring, s, 1, LOOM_NONE), loom_for_arg(k, kl, 0));
            loom_wgmma_commit(k);
            loom_region_op w = loom_wgmma_wait(k, 0, 1, &acc);
            loom_ring_release(k, &ring, s);
            loom_val r = loom_wgmma_result(k, w, 0);
            loom_for_end(k, kl, 1, &r);
        }
        /* the epilogue: + bias, the activation, f16 */
        loom_val b = loom_load(k, bias, &o[1], LOOM_SHAPE1(bn), LOOM_NONE, 0);
        loom_val x = loom_add(k, loom_for_result(k, kl, 0), loom_broadcast(k, loom_expand_dims(k, b, 0), tile));
        if (sh[S_ACT] == ACT_RELU)
            x = loom_max(k, x, loom_const_f(k, LOOM_F32, 0));
        if (sh[S_ACT] == ACT_SILU) {
            loom_val e = loom_exp2(k, loom_mul(k, x, loom_const_f(k, LOOM_F32, -1.4426950408889634)));
            x = loom_div(k, x, loom_add(k, e, loom_const_f(k, LOOM_F32, 1)));
        }
        loom_epilogue_store(k, &epi, o, loom_cast(k, x, LOOM_F16), LOOM_NONE);
        loom_epilogue_finish(k, &epi);
    }
    loom_task_end(k, consumer);
    return k;
}

static int valid(const int64_t *sh, const int64_t *cf, char *why, size_t n) { return !refused(sh, cf, why, n); }

static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    g[0] = (int)((sh[S_N] + cf[C_BN] - 1) / cf[C_BN]), g[1] = (int)((sh[S_M] + BM - 1) / BM), g[2] = 1;
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
    return sh[S_ACT] == ACT_RELU ? fmax(x, 0) : sh[S_ACT] == ACT_SILU ? x / (1 + exp(-x)) : x;
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    double mag;
    for (int64_t m = 0; m < sh[S_M]; m++)
        for (int64_t n = 0; n < sh[S_N]; n++)
            kernels_set(ref[A_C], LOOM_F16, m * sh[S_N] + n, exact(sh, host, m, n, &mag));
}

/* The error model (docs/checks.md): the K products are exact in f32 and summed with the
 * bias in f32 (loom_f32_sum_error of K + 1 terms); the activation's slope is at most 1.1
 * and silu adds exp2 (2^-21) and a few roundings of its own; then f16. */
static void bound(const int64_t *sh, void *const *host, void *const *ref, double *const *bnd)
{
    double mag;
    for (int64_t m = 0; m < sh[S_M]; m++)
        for (int64_t n = 0; n < sh[S_N]; n++) {
            int64_t i = m * sh[S_N] + n;
            double y = exact(sh, host, m, n, &mag);
            double err = 1.1 * loom_f32_sum_error(sh[S_K] + 1, mag) + fabs(y) * (0x1p-21 + 8 * 0x1p-24);
            bnd[A_C][i] = loom_error_bound(LOOM_F16, kernels_get(ref[A_C], LOOM_F16, i), err);
        }
}

const loom_template gemm_bias_act_template = {
    .name = "gemm_bias_act",
    .doc = "C = act(A @ B + bias), f16 in and out, f32 accumulation (examples/kernels)",
    .nshape = 4,
    .shape = {{"M", 1024, "rows of A and C"}, {"N", 1024, "columns of B and C (a multiple of 8)"},
              {"K", 1024, "columns of A, rows of B (a multiple of 8)"}, {"act", ACT_RELU, "0 none, 1 relu, 2 silu"}},
    .nconfig = 2,
    .config = {{"BN", 128, "tile columns", 3, {64, 128, 256}}, {"stages", 4, "ring slots", 3, {2, 3, 4}}},
    .build = build,
    .grid = grid,
    .init = init,
    .reference = reference,
    .valid = valid,
    .bound = bound,
};
