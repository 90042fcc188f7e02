/*
 * matmul -- C[M,N] = A[M,K] @ B[K,N] with f16 inputs and f32 accumulation, built with the
 * DSL and run with loom_launch (GPU if there is one, else the interpreter;
 * LOOM_INTERPRET=1 forces it).
 *
 * One program computes a BM x BN tile of C: a for-loop over K in steps of BK carries the
 * f32 accumulator, and each step adds loom_dot of an A tile and a B tile.  Tails in M, N
 * and K are masked by the loads (fill 0, so padded products add nothing) and the store.
 *
 * Tolerance: |C - ref| <= 1e-5 * sum_k |A[m,k] * B[k,n]|, ref the plain-C f32 sum in k
 * order.  Products of f16 values are exact in f32, so the only error is the f32 rounding
 * of the running sum, at most K * 2^-24 (~3e-6 for K = 50) of that bound; the interpreter,
 * which sums in the same order, matches the reference bit for bit, and a GPU summing in
 * another order stays well inside it.
 *
 * Usage: matmul [M N K]
 *
 * tests/test_examples.c includes this file with LOOM_EXAMPLE_NO_MAIN defined and calls
 * mm_run(), so every name here is prefixed mm_.
 */
#include "loom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define MM_TOL 1e-5

typedef struct mm_cfg {
    int bm, bn, bk;
} mm_cfg;

static loom_kernel *mm_build(int64_t m, int64_t n, int64_t kk, mm_cfg c)
{
    loom_kernel *k = loom_kernel_create("matmul", 4);
    loom_val a = loom_arg_tensor(k, "a", LOOM_F16, LOOM_SHAPE2(m, kk), LOOM_IN);
    loom_val b = loom_arg_tensor(k, "b", LOOM_F16, LOOM_SHAPE2(kk, n), LOOM_IN);
    loom_val out = loom_arg_tensor(k, "c", LOOM_F32, LOOM_SHAPE2(m, n), LOOM_OUT);
    loom_val m0 = loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, c.bm));
    loom_val n0 = loom_mul(k, loom_program_id(k, 1), loom_const_i(k, LOOM_I32, c.bn));
    loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0.0), LOOM_SHAPE2(c.bm, c.bn));
    loom_val lo = loom_const_i(k, LOOM_I32, 0), hi = loom_const_i(k, LOOM_I32, kk);
    loom_region_op loop = loom_for_begin(k, lo, hi, loom_const_i(k, LOOM_I32, c.bk), 1, &acc0);
    loom_val k0 = loom_for_iv(k, loop);
    loom_val ta = loom_load(k, a, ((loom_val[]){m0, k0}), LOOM_SHAPE2(c.bm, c.bk), LOOM_NONE, 0.0);
    loom_val tb = loom_load(k, b, ((loom_val[]){k0, n0}), LOOM_SHAPE2(c.bk, c.bn), LOOM_NONE, 0.0);
    loom_val acc = loom_dot(k, ta, tb, loom_for_arg(k, loop, 0));
    loom_for_end(k, loop, 1, &acc);
    loom_store(k, out, ((loom_val[]){m0, n0}), loom_for_result(k, loop, 0), LOOM_NONE);
    return k;
}

/* A random normal f16 of magnitude [1/8, 4) (its bits), and its value. */
static uint16_t mm_rand_f16(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    uint32_t r = *s >> 8;
    return (uint16_t)(((r & 1) << 15) | ((12 + (r >> 1) % 5) << 10) | ((r >> 4) & 0x3ff));
}

static float mm_f16_value(uint16_t h)
{
    float v = ldexpf(1.0f + (float)(h & 0x3ff) / 1024.0f, (int)((h >> 10) & 0x1f) - 15);
    return (h & 0x8000) ? -v : v;
}

/* Build, run on rt and compare; returns the number of elements outside the tolerance
 * (-1: not run).  *max_err gets the largest error relative to the bound's scale. */
static long mm_run(loom_runtime *rt, int64_t m, int64_t n, int64_t kk, mm_cfg c, double *max_err)
{
    loom_kernel *k = mm_build(m, n, kk, c);
    if (loom_verify(k) != LOOM_OK) {
        fprintf(stderr, "%s", loom_kernel_errors(k));
        loom_kernel_destroy(k);
        return -1;
    }
    /* host copies: f32 values of A and B, C, then the f16 bits of A and B, in one block */
    float *fa = malloc((size_t)(m * kk + kk * n + m * n) * 4 + (size_t)(m * kk + kk * n) * 2);
    float *fb = fa + m * kk, *hc = fb + kk * n;
    uint16_t *ha = (uint16_t *)(hc + m * n), *hb = ha + m * kk;
    uint32_t s = 99;
    for (int64_t i = 0; i < m * kk; i++)
        fa[i] = mm_f16_value(ha[i] = mm_rand_f16(&s));
    for (int64_t i = 0; i < kk * n; i++)
        fb[i] = mm_f16_value(hb[i] = mm_rand_f16(&s));
    loom_buffer *ba = loom_buffer_create(rt, (size_t)(m * kk) * 2), *bb = loom_buffer_create(rt, (size_t)(kk * n) * 2),
                *bc = loom_buffer_create(rt, (size_t)(m * n) * 4);
    loom_status st = LOOM_ERR_NOMEM;
    if (ba && bb && bc) {
        loom_buffer_upload(ba, ha, (size_t)(m * kk) * 2);
        loom_buffer_upload(bb, hb, (size_t)(kk * n) * 2);
        loom_buffer_fill(bc, 0xff); /* poison: NaN everywhere */
        int grid[3] = {(int)((m + c.bm - 1) / c.bm), (int)((n + c.bn - 1) / c.bn), 1};
        loom_arg args[] = {LOOM_ARG_BUF(ba), LOOM_ARG_BUF(bb), LOOM_ARG_BUF(bc)};
        st = loom_launch(rt, k, grid, args, 3);
    }
    long bad = -1;
    *max_err = 0;
    if (st == LOOM_OK && loom_buffer_download(bc, hc, (size_t)(m * n) * 4) == LOOM_OK) {
        bad = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                float want = 0;
                double scale = 0;
                for (int64_t q = 0; q < kk; q++) {
                    want += fa[i * kk + q] * fb[q * n + j];
                    scale += fabs((double)fa[i * kk + q] * fb[q * n + j]);
                }
                double err = fabs((double)hc[i * n + j] - want) / (scale > 0 ? scale : 1);
                *max_err = err > *max_err ? err : *max_err;
                if (!(err <= MM_TOL) && bad++ < 5)
                    fprintf(stderr, "c[%lld][%lld] = %.9g, want %.9g\n", (long long)i, (long long)j, hc[i * n + j], want);
            }
    } else {
        fprintf(stderr, "launch failed (%s): %s\n", loom_status_name(st), loom_runtime_error(rt));
    }
    loom_buffer_destroy(ba);
    loom_buffer_destroy(bb);
    loom_buffer_destroy(bc);
    free(fa);
    loom_kernel_destroy(k);
    return bad;
}

#ifndef LOOM_EXAMPLE_NO_MAIN
int main(int argc, char **argv)
{
    int64_t m = 77, n = 45, kk = 50; /* odd sizes: tails in M, N and K */
    if (argc == 4) {
        m = atoll(argv[1]);
        n = atoll(argv[2]);
        kk = atoll(argv[3]);
    }
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_AUTO);
    printf("matmul M=%lld N=%lld K=%lld (f16 in, f32 acc) on %s\n", (long long)m, (long long)n, (long long)kk,
           loom_runtime_device_name(rt));
    double max_err;
    long bad = mm_run(rt, m, n, kk, (mm_cfg){32, 32, 16}, &max_err);
    if (bad == 0)
        printf("ok: every element within %g of sum|a*b| of plain C f32 (max %.3g)\n", MM_TOL, max_err);
    else
        printf("FAIL: %ld elements outside %g of sum|a*b| (-1: not run)\n", bad, MM_TOL);
    loom_runtime_destroy(rt);
    return bad != 0;
}
#endif
