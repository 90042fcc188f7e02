/*
 * test_launch_gpu.c -- launches on a caller's stream, captured into a CUDA graph and
 * replayed (skipped without a GPU), and the launch path's memo of a kernel's key (by the
 * kernel's uid and IR generation, never its address).
 */
#include "gpu.h"
#include "rt.h"
#include "testutil.h"

/* out[i] = a[i] * s + c over n elements, one CTA */
static loom_kernel *axpc(int n, float c)
{
    loom_kernel *k = loom_kernel_create("axpc", 4);
    loom_val a = loom_arg_tensor(k, "a", LOOM_F32, LOOM_SHAPE1(n), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE1(n), LOOM_INOUT);
    loom_val s = loom_arg_scalar(k, "s", LOOM_F32);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_val x = loom_load(k, a, &z, LOOM_SHAPE1(n), LOOM_NONE, 0.0);
    loom_val y = loom_load(k, o, &z, LOOM_SHAPE1(n), LOOM_NONE, 0.0);
    loom_store(k, o, &z, loom_add(k, y, loom_add(k, loom_mul(k, x, s), loom_const_f(k, LOOM_F32, c))), LOOM_NONE);
    return k;
}

Test(launch_gpu, stream_launches_capture_into_a_graph_and_replay)
{
    loom_runtime *rt = t_gpu_or_skip();
    rt_gpu *g = rt_runtime_gpu(rt);
    char err[1024];
    enum { N = 128 };
    loom_kernel *k = axpc(N, 1.0f);
    float a[N], out[N];
    for (int i = 0; i < N; i++)
        a[i] = (float)i;
    loom_buffer *ba = loom_buffer_create(rt, sizeof a), *bo = loom_buffer_create(rt, sizeof a);
    cr_assert(ba && bo);
    cr_assert_eq(loom_buffer_upload(ba, a, sizeof a), LOOM_OK);
    cr_assert_eq(loom_buffer_fill(bo, 0), LOOM_OK);
    void *stream = NULL, *exec = NULL;
    cr_assert_eq(rt_gpu_stream_create(g, &stream, err, sizeof err), LOOM_OK, "%s", err);
    int grid[3] = {1, 1, 1};
    loom_arg args[3] = {LOOM_ARG_BUF(ba), LOOM_ARG_BUF(bo), LOOM_ARG_F32(2.0f)};
    /* the first launch compiles and loads; out = 2a + 1 */
    cr_assert_eq(loom_launch_stream(rt, k, grid, args, 3, stream), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(rt_gpu_stream_sync(g, stream, err, sizeof err), LOOM_OK, "%s", err);
    /* three launches captured: each adds 2a + 1 */
    cr_assert_eq(rt_gpu_capture_begin(g, stream, err, sizeof err), LOOM_OK, "%s", err);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(loom_launch_stream(rt, k, grid, args, 3, stream), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(rt_gpu_capture_end(g, stream, &exec, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(loom_buffer_download(bo, out, sizeof out), LOOM_OK);
    cr_expect_eq(out[5], 2 * 5 + 1, "capturing ran nothing: out[5] = %g", out[5]);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(rt_gpu_graph_launch(g, exec, stream, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(rt_gpu_stream_sync(g, stream, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(loom_buffer_download(bo, out, sizeof out), LOOM_OK);
    for (int i = 0; i < N; i++) /* 1 + 2 replays x 3 launches */
        cr_assert_eq(out[i], 7.0f * (2 * a[i] + 1), "out[%d] = %g", i, out[i]);
    rt_gpu_graph_destroy(g, exec);
    rt_gpu_stream_destroy(g, stream);
    loom_buffer_destroy(ba);
    loom_buffer_destroy(bo);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}

/* Kernels built one after the other, each destroyed before the next (so one may get the
 * last one's address): each launch runs its own IR, never the memo of another's. */
Test(launch_gpu, the_launch_memo_never_serves_another_kernels_function)
{
    loom_runtime *rt = t_gpu_or_skip();
    enum { N = 64 };
    float a[N], out[N];
    for (int i = 0; i < N; i++)
        a[i] = (float)i;
    loom_buffer *ba = loom_buffer_create(rt, sizeof a), *bo = loom_buffer_create(rt, sizeof a);
    cr_assert(ba && bo);
    cr_assert_eq(loom_buffer_upload(ba, a, sizeof a), LOOM_OK);
    int grid[3] = {1, 1, 1};
    loom_arg args[3] = {LOOM_ARG_BUF(ba), LOOM_ARG_BUF(bo), LOOM_ARG_F32(1.0f)};
    for (int c = 1; c <= 3; c++) { /* out = a + c, each from a fresh kernel */
        loom_kernel *k = axpc(N, (float)c);
        cr_assert_eq(loom_buffer_fill(bo, 0), LOOM_OK);
        cr_assert_eq(loom_launch(rt, k, grid, args, 3), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_assert_eq(loom_buffer_download(bo, out, sizeof out), LOOM_OK);
        cr_expect_eq(out[3], 3.0f + (float)c, "kernel %d: out[3] = %g", c, out[3]);
        loom_kernel_destroy(k);
    }
    loom_buffer_destroy(ba);
    loom_buffer_destroy(bo);
    loom_runtime_destroy(rt);
}
