/*
 * bench_launch.c -- the host cost of a launch: loom_launch against the raw driver call.
 *
 * A tiny kernel (out[i] = a[i] + 1 over 256 elements, one CTA) is launched 10,000 times
 * back to back, four ways in the same process: loom_launch (the default stream),
 * loom_launch_stream (a stream of the caller's), and the raw driver calls of the very same
 * CUfunction with the same parameters: cuLaunchKernelEx, the call loom makes (the floor:
 * what any launcher pays; "host vs raw" is against it), and the older cuLaunchKernel.  Each figure
 * is the wall time of issuing the launches divided by their count ("issue"), and with the
 * final synchronization ("with sync"); the best of 5 rounds.  10,000 launches fill the
 * driver's launch queue, after which a launch waits for the GPU to retire one (the rate
 * of the GPU running tiny kernels, a few microseconds each, bounds both figures); so the
 * host's own cost is also measured on batches of 256 launches, which the queue takes
 * without waiting ("host": the median and the best of 41 rounds, each round running the
 * four ways in turn, as one host's speed drifts by more than loom's own cost).  The output is checked after the
 * loom rounds (never time a kernel that does nothing).  Then the same 10,000 launches
 * captured once into a CUDA graph on the stream and replayed, checked again.
 *
 * Usage: bench_launch [--launches N]     (skips cleanly without a GPU)
 */
#include "gpu.h"
#include "rt.h"
#include "../util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 256, HOST_ROUNDS = 41 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static loom_kernel *tiny(void)
{
    loom_kernel *k = loom_kernel_create("tiny_add", 4);
    loom_val a = loom_arg_tensor(k, "a", LOOM_F32, LOOM_SHAPE1(N), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE1(N), LOOM_OUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_val x = loom_load(k, a, &z, LOOM_SHAPE1(N), LOOM_NONE, 0.0);
    loom_store(k, o, &z, loom_add(k, x, loom_const_f(k, LOOM_F32, 1.0)), LOOM_NONE);
    return k;
}

/* What one launch of each way needs: loom's kernel and arguments, the raw call's function
 * and parameters. */
typedef struct way_ctx {
    loom_runtime *rt;
    loom_kernel *k;
    const int *grid;
    loom_arg *args;
    rt_gpu *g;
    void *fn, *stream, **params;
    const unsigned *gr, *bl;
    unsigned smem;
} way_ctx;

/* One launch, way 0 loom_launch, 1 loom_launch_stream, 2 cuLaunchKernel, 3 cuLaunchKernelEx. */
static loom_status launch_way(const way_ctx *c, int way)
{
    switch (way) {
    case 0: return loom_launch(c->rt, c->k, c->grid, c->args, 2);
    case 1: return loom_launch_stream(c->rt, c->k, c->grid, c->args, 2, c->stream);
    case 2: return rt_gpu_raw_launch_legacy(c->g, c->fn, c->gr, c->bl, c->smem, c->params, c->stream);
    default: return rt_gpu_raw_launch(c->g, c->fn, c->gr, c->bl, c->smem, c->params, c->stream);
    }
}

static int check(loom_buffer *o, const float *a, const char *what)
{
    float got[N];
    if (loom_buffer_download(o, got, sizeof got) != LOOM_OK)
        return 0;
    for (int i = 0; i < N; i++)
        if (got[i] != a[i] + 1.0f) {
            printf("  %s: out[%d] = %g, expected %g: FAIL\n", what, i, got[i], a[i] + 1.0f);
            return 0;
        }
    return 1;
}

int main(int argc, char **argv)
{
    int launches = 10000;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--launches") && i + 1 < argc)
            launches = atoi(argv[++i]);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        printf("bench_launch: no GPU (%s): skipped\n", rt ? loom_runtime_error(rt) : "out of memory");
        loom_runtime_destroy(rt);
        return 0;
    }
    rt_gpu *g = rt_runtime_gpu(rt);
    char err[1024];
    loom_kernel *k = tiny();
    float a[N];
    for (int i = 0; i < N; i++)
        a[i] = (float)i * 0.5f;
    loom_buffer *ba = loom_buffer_create(rt, sizeof a), *bo = loom_buffer_create(rt, sizeof a);
    loom_buffer_upload(ba, a, sizeof a);
    loom_arg args[2] = {LOOM_ARG_BUF(ba), LOOM_ARG_BUF(bo)};
    int grid[3] = {1, 1, 1};
    void *stream = NULL, *fn = NULL;
    unsigned smem = 0;
    if (loom_launch(rt, k, grid, args, 2) != LOOM_OK || rt_gpu_sync(g, err, sizeof err) != LOOM_OK ||
        rt_gpu_stream_create(g, &stream, err, sizeof err) != LOOM_OK ||
        rt_gpu_kernel_function(g, k, &fn, &smem, err, sizeof err) != LOOM_OK) {
        printf("bench_launch: set-up failed: %s %s\n", loom_runtime_error(rt), err);
        return 1;
    }
    uint64_t pa = rt_buffer_dptr(ba), po = rt_buffer_dptr(bo);
    void *params[2] = {&pa, &po};
    unsigned gr[3] = {1, 1, 1}, bl[3] = {128, 1, 1};
    /* loom launches with cuLaunchKernelEx (way 3 is its raw call); cuLaunchKernel beside it */
    enum { WAYS = 4, RAW = 3 };
    const char *names[WAYS] = {"loom_launch", "loom_launch_stream", "cuLaunchKernel (raw)", "cuLaunchKernelEx (raw)"};
    double issue[WAYS], total[WAYS], host[WAYS], host_best[WAYS], batch[WAYS][HOST_ROUNDS];
    way_ctx wc = {rt, k, grid, args, g, fn, stream, params, gr, bl, smem};
    int ok = 1;
    /* the host's cost: batches the queue takes whole, the ways in turn within each round (so
     * a drift of the machine's speed meets every way alike); the median and the best round */
    for (int round = 0; round < HOST_ROUNDS; round++)
        for (int way = 0; way < WAYS; way++) {
            rt_gpu_sync(g, err, sizeof err);
            double t0 = util_now_ms();
            for (int i = 0; i < 256; i++)
                launch_way(&wc, way);
            batch[way][round] = (util_now_ms() - t0) * 1000.0 / 256;
        }
    for (int way = 0; way < WAYS; way++) {
        qsort(batch[way], HOST_ROUNDS, sizeof batch[way][0], cmp_double);
        host[way] = batch[way][HOST_ROUNDS / 2];
        host_best[way] = batch[way][0];
    }
    for (int way = 0; way < WAYS; way++) {
        issue[way] = total[way] = 1e30;
        for (int round = 0; round < 5; round++) {
            loom_buffer_fill(bo, 0);
            rt_gpu_sync(g, err, sizeof err);
            double t0 = util_now_ms();
            loom_status st = LOOM_OK;
            for (int i = 0; i < launches && st == LOOM_OK; i++)
                st = launch_way(&wc, way);
            double t1 = util_now_ms();
            if (st == LOOM_OK)
                st = rt_gpu_sync(g, err, sizeof err);
            double t2 = util_now_ms();
            if (st != LOOM_OK) {
                printf("  %s: %s %s\n", names[way], loom_runtime_error(rt), err);
                return 1;
            }
            issue[way] = (t1 - t0) * 1000.0 / launches < issue[way] ? (t1 - t0) * 1000.0 / launches : issue[way];
            total[way] = (t2 - t0) * 1000.0 / launches < total[way] ? (t2 - t0) * 1000.0 / launches : total[way];
        }
        ok &= check(bo, a, names[way]);
    }
    /* a CUDA graph of the same launches, captured on the stream */
    void *exec = NULL;
    loom_buffer_fill(bo, 0);
    rt_gpu_sync(g, err, sizeof err);
    double graph_us = -1;
    if (rt_gpu_capture_begin(g, stream, err, sizeof err) == LOOM_OK) {
        loom_status st = LOOM_OK;
        for (int i = 0; i < launches && st == LOOM_OK; i++)
            st = loom_launch_stream(rt, k, grid, args, 2, stream);
        if (rt_gpu_capture_end(g, stream, &exec, err, sizeof err) == LOOM_OK && st == LOOM_OK) {
            double t0 = util_now_ms();
            if (rt_gpu_graph_launch(g, exec, stream, err, sizeof err) == LOOM_OK &&
                rt_gpu_stream_sync(g, stream, err, sizeof err) == LOOM_OK)
                graph_us = (util_now_ms() - t0) * 1000.0 / launches;
            ok &= check(bo, a, "graph replay");
        }
    }
    printf("bench_launch on %s: host = median (best) of %d rounds of 256 launches, the ways in turn;\n"
           "issue / with sync = %d launches back to back, best of 5 rounds\n",
           loom_runtime_device_name(rt), HOST_ROUNDS, launches);
    printf("%-26s %16s %10s %10s %14s\n", "launch", "host us", "issue us", "with sync", "host vs raw");
    for (int way = 0; way < WAYS; way++)
        printf("%-26s %8.2f (%5.2f) %10.2f %10.2f %+13.2f\n", names[way], host[way], host_best[way], issue[way],
               total[way], host[way] - host[RAW]);
    if (graph_us >= 0)
        printf("%-26s %10s %10s %10.2f   (the captured loom launches, replayed)\n", "CUDA graph replay", "-", "-",
               graph_us);
    else
        printf("CUDA graph capture: %s\n", err);
    printf("check: %s\n", ok ? "ok" : "FAIL");
    rt_gpu_graph_destroy(g, exec);
    rt_gpu_stream_destroy(g, stream);
    loom_buffer_destroy(ba);
    loom_buffer_destroy(bo);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
    return ok ? 0 : 1;
}
