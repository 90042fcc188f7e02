/*
 * test_hang_gpu.c -- no silent hang, on the GPU (skipped without one; the checks that
 * need none are in tests/test_hang.c).
 *
 * The kernel: a barrier that expects two arrivals, a task of two replicas of which only
 * replica 0 arrives (the arrive count is wrong by one; the interpreter reports it as a
 * deadlock).  With LOOM_HANG_CHECK=<ms> set before the runtime is created, the stuck
 * wait traps after that long, and the error of the call that sees the trap names the
 * kernel, the program, the task, the barrier, the parity and this file's lines, in the
 * interpreter's words; the process lives on.  loom_runtime_sync with a timeout returns
 * LOOM_ERR_TIMEOUT, naming the kernel, instead of blocking while the kernel is stuck.  A
 * kernel whose arrivals are right runs as usual with the check on.
 *
 * Criterion runs each test in a process of its own, so the environment set here and the
 * context the trap kills are this test's alone.
 */
#include "testutil.h"

#include <time.h>

#define I32(k, v) loom_const_i(k, LOOM_I32, v)

/* As in tests/test_hang.c: with `only_first`, replica 1 never arrives. */
static loom_kernel *two_arrivals(bool only_first, int *tline, int *wline)
{
    *tline = __LINE__; loom_src task_at = LOOM_HERE;
    *wline = __LINE__; loom_src wait_at = LOOM_HERE;
    return t_two_arrivals(task_at, wait_at, "hang_two", only_first);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The words the report must hold for the kernel built at lines tl (task) and wl (wait). */
static void expect_report(const char *msg, int tl, int wl, int ms)
{
    char want[256];
    cr_assert(strstr(msg, "kernel 'hang_two' hung: program (0,0,0) task at "), "%s", msg);
    cr_assert(t_names_line(msg, __FILE__, tl), "the task's line %d: %s", tl, msg);
    cr_assert(strstr(msg, "(replica "), "%s", msg);
    snprintf(want, sizeof want, "waited more than %d ms on barrier %%bar.0[0] for phase parity 0 at ", ms);
    cr_assert(strstr(msg, want), "want '%s' in: %s", want, msg);
    cr_assert(t_names_line(msg, __FILE__, wl), "the wait's line %d: %s", wl, msg);
    cr_assert(strstr(msg, "LOOM_HANG_CHECK: the kernel trapped"), "%s", msg);
}

Test(hang_gpu, a_wrong_arrive_count_traps_and_names_the_barrier_and_line)
{
    setenv("LOOM_HANG_CHECK", "300", 1); /* read when the runtime is created */
    loom_runtime *rt = t_gpu_or_skip();
    int tl, wl;
    loom_kernel *k = two_arrivals(true, &tl, &wl);
    loom_buffer *bo = loom_buffer_create(rt, 2 * sizeof(int32_t));
    cr_assert(bo, "%s", loom_runtime_error(rt));
    loom_arg args[] = {LOOM_ARG_BUF(bo)};
    int grid[3] = {1, 1, 1};
    cr_assert_eq(loom_launch(rt, k, grid, args, 1), LOOM_OK, "the launch itself is fine: %s",
                 loom_runtime_error(rt));
    double t0 = now_ms();
    loom_status st = loom_runtime_sync(rt, 0); /* no host bound: the kernel's own ends it */
    double waited = now_ms() - t0;
    const char *msg = loom_runtime_error(rt);
    cr_log_info("after %.0f ms: %s: %s", waited, loom_status_name(st), msg);
    cr_assert_eq(st, LOOM_ERR_CUDA, "%s: %s", loom_status_name(st), msg);
    expect_report(msg, tl, wl, 300);
    cr_assert(waited >= 250, "the kernel waited its 300 ms first (%.0f ms)", waited);
    /* the context is dead, the process is not: later calls fail with the same report */
    int32_t out[2];
    cr_assert_eq(loom_buffer_download(bo, out, sizeof out), LOOM_ERR_CUDA);
    expect_report(loom_runtime_error(rt), tl, wl, 300);
    loom_buffer_destroy(bo);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}

Test(hang_gpu, a_sync_timeout_reports_instead_of_blocking)
{
    setenv("LOOM_HANG_CHECK", "3000", 1); /* the kernel gives up after 3 s; the host first */
    loom_runtime *rt = t_gpu_or_skip();
    int tl, wl;
    loom_kernel *k = two_arrivals(true, &tl, &wl);
    loom_buffer *bo = loom_buffer_create(rt, 2 * sizeof(int32_t));
    cr_assert(bo, "%s", loom_runtime_error(rt));
    loom_arg args[] = {LOOM_ARG_BUF(bo)};
    int grid[3] = {1, 1, 1};
    cr_assert_eq(loom_prepare(rt, k, NULL), LOOM_OK, "%s", loom_runtime_error(rt)); /* compile outside the bound */
    cr_assert_eq(loom_launch(rt, k, grid, args, 1), LOOM_OK, "%s", loom_runtime_error(rt));
    double t0 = now_ms();
    loom_status st = loom_runtime_sync(rt, 200);
    double waited = now_ms() - t0;
    cr_log_info("after %.0f ms: %s: %s", waited, loom_status_name(st), loom_runtime_error(rt));
    cr_assert_eq(st, LOOM_ERR_TIMEOUT, "%s: %s", loom_status_name(st), loom_runtime_error(rt));
    cr_assert(strstr(loom_runtime_error(rt), "not done after 200 ms; the last kernel launched was 'hang_two'"), "%s",
              loom_runtime_error(rt));
    cr_assert(waited >= 200 && waited < 2500, "returned after %.0f ms, not when the kernel ended", waited);
    /* waiting on: the kernel's own bound ends it, with its report */
    st = loom_runtime_sync(rt, 10000);
    cr_log_info("then: %s: %s", loom_status_name(st), loom_runtime_error(rt));
    cr_assert_eq(st, LOOM_ERR_CUDA, "%s: %s", loom_status_name(st), loom_runtime_error(rt));
    expect_report(loom_runtime_error(rt), tl, wl, 3000);
    loom_buffer_destroy(bo);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}

Test(hang_gpu, right_arrivals_run_as_usual_with_the_check_on)
{
    setenv("LOOM_HANG_CHECK", "300", 1);
    loom_runtime *rt = t_gpu_or_skip();
    int tl, wl;
    loom_kernel *k = two_arrivals(false, &tl, &wl);
    loom_buffer *bo = loom_buffer_create(rt, 2 * sizeof(int32_t));
    cr_assert(bo, "%s", loom_runtime_error(rt));
    loom_arg args[] = {LOOM_ARG_BUF(bo)};
    int grid[3] = {4, 1, 1};
    for (int r = 0; r < 3; r++)
        cr_assert_eq(loom_launch(rt, k, grid, args, 1), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_runtime_sync(rt, 10000), LOOM_OK, "%s", loom_runtime_error(rt));
    int32_t out[2] = {0};
    cr_assert_eq(loom_buffer_download(bo, out, sizeof out), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert(out[0] == 1 && out[1] == 2, "out = %d %d", out[0], out[1]);
    loom_buffer_destroy(bo);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}
