/*
 * row_softmax -- out[r, :] = softmax(x[r, :]) over f32 rows, built with the DSL and run
 * with loom_launch (GPU if there is one, else the interpreter; LOOM_INTERPRET=1 forces it).
 *
 * One program handles a block of BR rows as one [BR, BN] tile, BN the power of two at or
 * above N: load with fill -inf (so the masked tail columns add exp2(-inf) = 0), subtract
 * the row max, exp2 of (x - max) * log2(e), sum, divide, store (tail rows and columns are
 * masked off).
 *
 * Tolerance: each element must be within (N + 16) * 2^-24 relative (plus 1e-9 absolute,
 * for tiny probabilities) of a double-precision reference: 3.2e-6 for N = 37, 4.8e-5 for
 * N = 781.  The kernel works in f32: the sum of N terms in order can lose up to
 * (N - 1) * 2^-24 relative; rounding (x - max) * log2(e), with inputs in [-4, 4] so
 * |x - max| <= 8, costs up to 8 * 2^-24 after exp2; exp2 itself, the divide and the
 * GPU's ex2.approx (~2 ulps) take a few ulps more.  In practice the error is far below
 * the bound (about 1e-6 at N = 781).
 *
 * Usage: row_softmax [R N]
 *
 * tests/test_examples.c includes this file with LOOM_EXAMPLE_NO_MAIN defined and calls
 * smax_run(), so every name here is prefixed smax_.
 */
#include "loom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define SMAX_RTOL(n) ((double)((n) + 16) * 0x1p-24)
#define SMAX_ATOL 1e-9

static int smax_pow2_at_least(int64_t n)
{
    int p = 1;
    while (p < n)
        p *= 2;
    return p;
}

/* Broadcast a per-row [br] value to the [br, bn] tile. */
static loom_val smax_rows(loom_kernel *k, loom_val v, int br, int bn)
{
    return loom_broadcast(k, loom_expand_dims(k, v, 1), LOOM_SHAPE2(br, bn));
}

static loom_kernel *smax_build(int64_t r, int64_t n, int br)
{
    int bn = smax_pow2_at_least(n);
    loom_kernel *k = loom_kernel_create("row_softmax", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(r, n), LOOM_IN);
    loom_val out = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE2(r, n), LOOM_OUT);
    loom_val pid = loom_program_id(k, 0);
    loom_val offs[2] = {loom_mul(k, pid, loom_const_i(k, LOOM_I32, br)), loom_const_i(k, LOOM_I32, 0)};
    loom_val v = loom_load(k, x, offs, LOOM_SHAPE2(br, bn), LOOM_NONE, -INFINITY);
    loom_val mx = smax_rows(k, loom_reduce_max(k, v, 1), br, bn);
    loom_val scaled = loom_mul(k, loom_sub(k, v, mx), loom_const_f(k, LOOM_F32, 1.4426950408889634));
    loom_val e = loom_exp2(k, scaled);
    loom_val sum = smax_rows(k, loom_reduce_sum(k, e, 1), br, bn);
    loom_store(k, out, offs, loom_div(k, e, sum), LOOM_NONE);
    return k;
}

/* Compare out with a double-precision softmax of x; returns the number of elements
 * outside the tolerance and the largest relative error in *max_rel. */
static long smax_compare(const float *x, const float *out, int64_t r, int64_t n, double *max_rel)
{
    long bad = 0;
    for (int64_t i = 0; i < r; i++) {
        const float *row = x + i * n;
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; j++)
            m = row[j] > m ? row[j] : m;
        for (int64_t j = 0; j < n; j++)
            sum += exp((double)row[j] - m);
        for (int64_t j = 0; j < n; j++) {
            double want = exp((double)row[j] - m) / sum, got = out[i * n + j];
            double err = fabs(got - want);
            if (want > 0 && err / want > *max_rel)
                *max_rel = err / want;
            if (!(err <= SMAX_ATOL + SMAX_RTOL(n) * want) && bad++ < 5)
                fprintf(stderr, "out[%lld][%lld] = %.9g, want %.9g\n", (long long)i, (long long)j, got, want);
        }
    }
    return bad;
}

/* Build, run on rt and compare with double precision; returns the number of elements
 * outside the tolerance (-1: not run).  *max_rel gets the largest relative error seen. */
static long smax_run(loom_runtime *rt, int64_t r, int64_t n, int br, double *max_rel)
{
    loom_kernel *k = smax_build(r, n, br);
    if (loom_verify(k) != LOOM_OK) {
        fprintf(stderr, "%s", loom_kernel_errors(k));
        loom_kernel_destroy(k);
        return -1;
    }
    size_t cnt = (size_t)(r * n), bytes = cnt * sizeof(float);
    float *x = malloc(bytes), *out = malloc(bytes);
    uint32_t s = 7;
    for (size_t i = 0; i < cnt; i++) {
        s = s * 1103515245u + 12345u;
        x[i] = (float)((s >> 8) & 0xffff) * (8.0f / 65536.0f) - 4.0f; /* [-4, 4) */
    }
    loom_buffer *bx = loom_buffer_create(rt, bytes), *bo = loom_buffer_create(rt, bytes);
    long bad = -1;
    *max_rel = 0;
    loom_status st = LOOM_ERR_NOMEM;
    if (bx && bo && loom_buffer_upload(bx, x, bytes) == LOOM_OK && loom_buffer_fill(bo, 0xff) == LOOM_OK) {
        int grid[3] = {(int)((r + br - 1) / br), 1, 1};
        loom_arg args[] = {LOOM_ARG_BUF(bx), LOOM_ARG_BUF(bo)};
        st = loom_launch(rt, k, grid, args, 2);
    }
    if (st == LOOM_OK && loom_buffer_download(bo, out, bytes) == LOOM_OK)
        bad = smax_compare(x, out, r, n, max_rel);
    else
        fprintf(stderr, "launch failed (%s): %s\n", loom_status_name(st), loom_runtime_error(rt));
    loom_buffer_destroy(bx);
    loom_buffer_destroy(bo);
    loom_kernel_destroy(k);
    free(x);
    free(out);
    return bad;
}

#ifndef LOOM_EXAMPLE_NO_MAIN
int main(int argc, char **argv)
{
    int64_t r = argc > 2 ? atoll(argv[1]) : 333, n = argc > 2 ? atoll(argv[2]) : 781;
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_AUTO);
    printf("row_softmax R=%lld N=%lld on %s\n", (long long)r, (long long)n, loom_runtime_device_name(rt));
    double max_rel;
    long bad = smax_run(rt, r, n, 4, &max_rel);
    if (bad == 0)
        printf("ok: %lld rows within %.3g relative of double precision (max %.3g)\n", (long long)r,
               SMAX_RTOL(n), max_rel);
    else
        printf("FAIL: %ld elements outside %.3g relative (-1: not run)\n", bad, SMAX_RTOL(n));
    loom_runtime_destroy(rt);
    return bad != 0;
}
#endif
