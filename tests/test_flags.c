/*
 * test_flags.c -- flags in global memory (loom_flag_add / loom_flag_wait): one program
 * hands data to another inside a kernel.
 *
 * The interpreter runs a kernel with flag waits with its programs side by side, so a
 * chain where each program waits for the next one's result (the reverse of the order a
 * sequential run would take) completes; a wait nobody will satisfy is a deadlock that
 * names the line, the flag and its value.  The same chain runs inside warp-group tasks,
 * and on the GPU (skipped without one), where the launch also refuses a grid larger than
 * the SMs.  The rules refuse flags that are not an i32 LOOM_INOUT tensor.
 */
#include "ir.h"
#include "testutil.h"

#define I32(k, v) loom_const_i(k, LOOM_I32, v)

OP_COVERED(flag_add)
OP_COVERED(flag_wait)

enum { P = 6 };

/* Program i (the last one first) waits until program i+1 published data[i+1], then
 * publishes data[i] = data[i+1] + 1 + i.  With tasks > 0 the body runs in a task of 4 warps. */
static loom_kernel *chain(int tasks, int *wait_line)
{
    loom_kernel *k = loom_kernel_create("flag_chain", 4);
    loom_val data = loom_arg_tensor(k, "data", LOOM_I32, LOOM_SHAPE1(P), LOOM_INOUT);
    loom_val flags = loom_arg_tensor(k, "flags", LOOM_I32, LOOM_SHAPE1(P), LOOM_INOUT);
    loom_val epoch = loom_arg_scalar(k, "epoch", LOOM_I32);
    loom_region_op t = tasks ? loom_task_begin(k, 4, 0, 1) : LOOM_NO_REGION;
    loom_val i = loom_program_id(k, 0);
    loom_val nxt = loom_add(k, i, I32(k, 1));
    loom_val last = loom_cmp(k, LOOM_EQ, i, I32(k, P - 1));
    loom_region_op br2 = loom_if_begin(k, loom_not(k, last), 0);
    {
        *wait_line = __LINE__ + 1;
        loom_flag_wait(k, flags, (loom_val[]){nxt}, epoch);
    }
    loom_if_end(k, br2, 0, NULL);
    loom_val src = loom_min(k, nxt, I32(k, P - 1));
    loom_val prev = loom_load(k, data, (loom_val[]){src}, LOOM_SHAPE1(1), LOOM_NONE, 0);
    prev = loom_select(k, loom_splat(k, last, LOOM_SHAPE1(1)), loom_splat(k, I32(k, 0), LOOM_SHAPE1(1)), prev);
    loom_val v = loom_add(k, prev, loom_splat(k, loom_add(k, i, I32(k, 1)), LOOM_SHAPE1(1)));
    loom_store(k, data, (loom_val[]){i}, v, LOOM_NONE);
    loom_flag_add(k, flags, (loom_val[]){i}, I32(k, 1));
    if (tasks)
        loom_task_end(k, t);
    return k;
}

/* data[i] = sum_{j >= i} (j + 1) */
static void expect_chain(const int32_t *data)
{
    for (int i = 0; i < P; i++) {
        int want = 0;
        for (int j = i; j < P; j++)
            want += j + 1;
        cr_assert_eq(data[i], want, "data[%d] = %d, want %d", i, data[i], want);
    }
}

Test(flags, interpreter_runs_programs_side_by_side)
{
    for (int tasks = 0; tasks < 2; tasks++) {
        int wl;
        loom_kernel *k = chain(tasks, &wl);
        cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
        int32_t data[P] = {0}, flags[P] = {0};
        int grid[3] = {P, 1, 1};
        targ a[] = {TA_ARR(data), TA_ARR(flags), TA_I32(1)};
        T_RUN_OK(k, grid, a, 3);
        expect_chain(data);
        for (int i = 0; i < P; i++)
            cr_assert_eq(flags[i], 1, "flags[%d] = %d: one add per program", i, flags[i]);
        /* the next launch counts on from the flags left behind */
        memset(data, 0, sizeof data);
        targ b[] = {TA_ARR(data), TA_ARR(flags), TA_I32(2)};
        T_RUN_OK(k, grid, b, 3);
        expect_chain(data);
        cr_assert_eq(flags[0], 2);
        loom_kernel_destroy(k);
    }
}

Test(flags, a_wait_never_met_is_a_deadlock_naming_line_flag_and_value)
{
    int wl;
    loom_kernel *k = chain(0, &wl);
    int32_t data[P] = {0}, flags[P] = {0};
    int grid[3] = {P, 1, 1};
    targ a[] = {TA_ARR(data), TA_ARR(flags), TA_I32(5)}; /* nobody reaches 5 */
    cr_assert_eq(t_run(k, grid, a, 3), LOOM_ERR_RUNTIME);
    char want[128];
    snprintf(want, sizeof want, "test_flags.c:%d for flags[5] >= 5; it is 1", wl);
    cr_assert(strstr(t_last_error, "deadlock"), "%s", t_last_error);
    cr_assert(strstr(t_last_error, want), "want '%s' in: %s", want, t_last_error);
    cr_assert(strstr(t_last_error, "program (0,0,0) waits"), "%s", t_last_error);
    loom_kernel_destroy(k);
}

Test(flags, rules_want_i32_inout_flags_and_one_offset_per_dim)
{
    loom_kernel *k = loom_kernel_create("bad_flags", 4);
    loom_val f = loom_arg_tensor(k, "f", LOOM_F32, LOOM_SHAPE1(4), LOOM_INOUT);
    loom_val g = loom_arg_tensor(k, "g", LOOM_I32, LOOM_SHAPE1(4), LOOM_IN);
    loom_val h = loom_arg_tensor(k, "h", LOOM_I32, LOOM_SHAPE1(4), LOOM_INOUT);
    loom_flag_add(k, f, (loom_val[]){I32(k, 0)}, I32(k, 1));
    loom_flag_wait(k, g, (loom_val[]){I32(k, 0)}, I32(k, 1));
    loom_flag_wait(k, h, (loom_val[]){I32(k, 0)}, loom_const_f(k, LOOM_F32, 1));
    loom_flag_add(k, h, NULL, I32(k, 1));
    const char *e = loom_kernel_errors(k);
    cr_assert(strstr(e, "the flags 'f' are"), "%s", e);
    cr_assert(strstr(e, "'g' must be declared LOOM_INOUT"), "%s", e);
    cr_assert(strstr(e, "the target is f32"), "%s", e);
    cr_assert(strstr(e, "offsets is NULL"), "%s", e);
    loom_kernel_destroy(k);
}

Test(flags, ptx_releases_and_acquires_at_gpu_scope)
{
    int wl;
    loom_kernel *k = chain(1, &wl);
    char *ptx = NULL, err[512];
    size_t smem;
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, &smem, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert(strstr(ptx, "red.release.gpu.add.s32"), "no release add");
    cr_assert(strstr(ptx, "ld.acquire.gpu.s32"), "no acquire load");
    free(ptx);
    loom_kernel_destroy(k);
}

Test(flags, gpu_chain_and_refused_oversized_grid)
{
    loom_runtime *rt = t_gpu_or_skip();
    int wl;
    loom_kernel *k = chain(1, &wl);
    loom_buffer *d = loom_buffer_create(rt, P * 4), *f = loom_buffer_create(rt, P * 4);
    cr_assert(d && f);
    cr_assert_eq(loom_buffer_fill(d, 0), LOOM_OK);
    cr_assert_eq(loom_buffer_fill(f, 0), LOOM_OK);
    int grid[3] = {P, 1, 1};
    for (int epoch = 1; epoch <= 3; epoch++) {
        loom_arg a[] = {LOOM_ARG_BUF(d), LOOM_ARG_BUF(f), LOOM_ARG_I32(epoch)};
        cr_assert_eq(loom_launch(rt, k, grid, a, 3), LOOM_OK, "%s", loom_runtime_error(rt));
        int32_t data[P];
        cr_assert_eq(loom_buffer_download(d, data, sizeof data), LOOM_OK, "%s", loom_runtime_error(rt));
        expect_chain(data);
    }
    int big[3] = {100000, 1, 1};
    loom_arg a[] = {LOOM_ARG_BUF(d), LOOM_ARG_BUF(f), LOOM_ARG_I32(9)};
    cr_assert_eq(loom_launch(rt, k, big, a, 3), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "all its programs must run at once"), "%s",
              loom_runtime_error(rt));
    loom_buffer_destroy(d);
    loom_buffer_destroy(f);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}
