/*
 * vector_add -- out = x + y over f32 vectors, built with the DSL, run with loom_launch (on
 * the GPU if there is one, else the interpreter; LOOM_INTERPRET=1 forces it) and checked
 * bit-exactly against plain C.  N need not be a multiple of the block: the last program's
 * tile reaches past the end, and the load/store mask it off.
 *
 * Usage: vector_add [N [BLOCK]]
 *
 * tests/test_examples.c includes this file with LOOM_EXAMPLE_NO_MAIN defined and calls
 * vadd_run() at small sizes, so every name here is prefixed vadd_.
 */
#include "loom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One program adds one block of `block` elements. */
static loom_kernel *vadd_build(int64_t n, int block)
{
    loom_kernel *k = loom_kernel_create("vector_add", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(n), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", LOOM_F32, LOOM_SHAPE1(n), LOOM_IN);
    loom_val out = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE1(n), LOOM_OUT);
    loom_val pid = loom_program_id(k, 0);
    loom_val off = loom_mul(k, pid, loom_const_i(k, LOOM_I32, block));
    loom_val a = loom_load(k, x, &off, LOOM_SHAPE1(block), LOOM_NONE, 0.0);
    loom_val b = loom_load(k, y, &off, LOOM_SHAPE1(block), LOOM_NONE, 0.0);
    loom_store(k, out, &off, loom_add(k, a, b), LOOM_NONE);
    return k;
}

/* Build, run on rt and compare; returns the number of wrong elements, or -1 when the
 * kernel could not be run (the reason on stderr). */
static long vadd_run(loom_runtime *rt, int64_t n, int block)
{
    loom_kernel *k = vadd_build(n, block);
    if (loom_verify(k) != LOOM_OK) {
        fprintf(stderr, "%s", loom_kernel_errors(k));
        loom_kernel_destroy(k);
        return -1;
    }
    size_t bytes = (size_t)n * sizeof(float);
    float *x = malloc(3 * bytes), *y = x + n, *out = y + n; /* one block for the three */
    uint32_t seed = 2024;
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 9) * 0x1p-20f - 2.0f;
        y[i] = (float)i * 0.25f - 1000.0f;
    }
    loom_buffer *buf[3] = {loom_buffer_create(rt, bytes), loom_buffer_create(rt, bytes),
                           loom_buffer_create(rt, bytes)};
    loom_buffer *bx = buf[0], *by = buf[1], *bo = buf[2];
    long bad = -1;
    if (bx && by && bo) {
        loom_buffer_upload(bx, x, bytes);
        loom_buffer_upload(by, y, bytes);
        loom_buffer_fill(bo, 0xff); /* poison: NaN everywhere */
        int grid[3] = {(int)((n + block - 1) / block), 1, 1};
        loom_arg args[] = {LOOM_ARG_BUF(bx), LOOM_ARG_BUF(by), LOOM_ARG_BUF(bo)};
        loom_status st = loom_launch(rt, k, grid, args, 3);
        if (st == LOOM_OK && loom_buffer_download(bo, out, bytes) == LOOM_OK) {
            bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float want = x[i] + y[i];
                if (memcmp(&out[i], &want, sizeof want) != 0 && bad++ < 5)
                    fprintf(stderr, "out[%lld] = %g, want %g\n", (long long)i, out[i], want);
            }
        } else {
            fprintf(stderr, "launch failed (%s): %s\n", loom_status_name(st), loom_runtime_error(rt));
        }
    } else {
        fprintf(stderr, "buffer: %s\n", loom_runtime_error(rt));
    }
    for (int i = 0; i < 3; i++)
        loom_buffer_destroy(buf[i]);
    loom_kernel_destroy(k);
    free(x);
    return bad;
}

#ifndef LOOM_EXAMPLE_NO_MAIN
int main(int argc, char **argv)
{
    int64_t n = argc > 1 ? atoll(argv[1]) : 100003; /* not a multiple of the block */
    int block = argc > 2 ? atoi(argv[2]) : 1024;
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_AUTO);
    printf("vector_add N=%lld block=%d on %s\n", (long long)n, block, loom_runtime_device_name(rt));
    long bad = vadd_run(rt, n, block);
    if (bad == 0)
        printf("ok: %lld elements equal plain C bit for bit\n", (long long)n);
    else
        printf("FAIL: %ld of %lld elements differ from plain C (-1: not run)\n", bad, (long long)n);
    loom_runtime_destroy(rt);
    return bad != 0;
}
#endif
