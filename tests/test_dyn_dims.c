/*
 * test_dyn_dims.c -- run-time dimensions (loom_arg_dim, LOOM_DIM): one kernel built once
 * and launched at many values of a dim on the interpreter, each output compared with
 * plain C; accesses past the launch's value masked or reported as past a static dim;
 * launches with a value out of range, or a buffer too small for the value, refused;
 * declarations that cannot work refused at the line that made them; the printed IR names
 * the dim and leaves its maximum out, so kernels that differ only in max are one module;
 * the PTX of a run-time-dim kernel assembles.
 */
#include "ir.h"
#include "testutil.h"

/* out[b, n] = x[b, n] * 2 + bias[n] for b < B (the grid has a program per row block of
 * 4 rows; the rows past B are masked by the tensor's run-time dim). */
static loom_kernel *rows_kernel(int64_t max, int64_t multiple, int64_t n)
{
    loom_kernel *k = loom_kernel_create("dyn_rows", 4);
    loom_val B = loom_arg_dim(k, "B", max, multiple);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(LOOM_DIM(B), n), LOOM_IN);
    loom_val bias = loom_arg_tensor(k, "bias", LOOM_F32, LOOM_SHAPE1(n), LOOM_IN);
    loom_val out = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE2(LOOM_DIM(B), n), LOOM_OUT);
    loom_val r0 = loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, 4));
    loom_val zero = loom_const_i(k, LOOM_I32, 0);
    loom_val t = loom_load(k, x, ((loom_val[]){r0, zero}), LOOM_SHAPE2(4, n), LOOM_NONE, 0.0);
    loom_val bt = loom_load(k, bias, ((loom_val[]){zero}), LOOM_SHAPE1(n), LOOM_NONE, 0.0);
    loom_val y = loom_add(k, loom_mul(k, t, loom_const_f(k, LOOM_F32, 2.0)),
                          loom_broadcast(k, loom_expand_dims(k, bt, 0), LOOM_SHAPE2(4, n)));
    loom_store(k, out, ((loom_val[]){r0, zero}), y, LOOM_NONE);
    return k;
}

Test(dyn_dims, one_kernel_serves_every_value_of_a_row_count)
{
    enum { N = 8, MAXB = 64 };
    loom_kernel *k = rows_kernel(MAXB, 1, N);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    const int Bs[] = {1, 3, 4, 5, 17, 63, 64};
    for (size_t c = 0; c < sizeof Bs / sizeof Bs[0]; c++) {
        int B = Bs[c];
        float x[MAXB * N], bias[N], out[MAXB * N + 8];
        for (int i = 0; i < B * N; i++)
            x[i] = (float)(i % 13) - 6.0f;
        for (int j = 0; j < N; j++)
            bias[j] = (float)j * 0.5f;
        for (int i = 0; i < MAXB * N + 8; i++)
            out[i] = -777.0f;
        /* buffers sized for this B, not the maximum: the launch checks them at B */
        targ a[] = {TA_I32(B), TA_BUF(x, (size_t)B * N * 4), TA_ARR(bias), TA_BUF(out, (size_t)B * N * 4)};
        int grid[3] = {(B + 3) / 4, 1, 1};
        T_RUN_OK(k, grid, a, 4);
        for (int i = 0; i < B * N; i++)
            cr_assert_eq(out[i], x[i] * 2 + bias[i % N], "B=%d element %d: %g", B, i, out[i]);
        for (int i = B * N; i < MAXB * N + 8; i++)
            cr_assert_eq(out[i], -777.0f, "B=%d: element %d past the rows was written", B, i);
    }
    loom_kernel_destroy(k);
}

/* A leading index past the launch's B is reported as past a static dim would be. */
Test(dyn_dims, a_leading_index_past_the_value_is_reported)
{
    enum { N = 8 };
    loom_kernel *k = loom_kernel_create("dyn_oob", 1);
    loom_val B = loom_arg_dim(k, "B", 100, 1);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(LOOM_DIM(B), N), LOOM_IN);
    loom_val out = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE1(N), LOOM_OUT);
    loom_val zero = loom_const_i(k, LOOM_I32, 0);
    int line = __LINE__ + 1;
    loom_val t = loom_load(k, x, ((loom_val[]){loom_program_id(k, 0), zero}), LOOM_SHAPE1(N), LOOM_NONE, 0.0);
    loom_store(k, out, ((loom_val[]){zero}), t, LOOM_NONE);
    float xs[3 * N] = {0}, o[N];
    targ a[] = {TA_I32(3), TA_ARR(xs), TA_ARR(o)};
    int ok[3] = {3, 1, 1}, bad[3] = {4, 1, 1};
    T_RUN_OK(k, ok, a, 3);
    cr_assert_eq(t_run(k, bad, a, 3), LOOM_ERR_BOUNDS, "%s", t_last_error);
    cr_assert(t_names_line(t_last_error, __FILE__, line), "%s", t_last_error);
    cr_assert(strstr(t_last_error, "'x'"), "%s", t_last_error);
    loom_kernel_destroy(k);
}

/* A run-time inner dim (given strides): the columns past N are masked per launch. */
Test(dyn_dims, an_inner_dim_with_static_strides_masks_per_launch)
{
    enum { MAXN = 32, ROWS = 2 };
    loom_kernel *k = loom_kernel_create("dyn_cols", 1);
    loom_val N = loom_arg_dim(k, "N", MAXN, 1);
    int64_t st[2] = {MAXN, 1};
    loom_val x = loom_arg_tensor_strided(k, "x", LOOM_F32, LOOM_SHAPE2(ROWS, LOOM_DIM(N)), st, LOOM_IN);
    loom_val out = loom_arg_tensor_strided(k, "out", LOOM_F32, LOOM_SHAPE2(ROWS, LOOM_DIM(N)), st, LOOM_OUT);
    loom_val zero = loom_const_i(k, LOOM_I32, 0);
    loom_val t = loom_load(k, x, ((loom_val[]){zero, zero}), LOOM_SHAPE2(ROWS, MAXN), LOOM_NONE, -1.0);
    loom_store(k, out, ((loom_val[]){zero, zero}), loom_add(k, t, loom_const_f(k, LOOM_F32, 1.0)), LOOM_NONE);
    for (int n = 1; n <= MAXN; n += 7) {
        float xs[ROWS * MAXN], o[ROWS * MAXN];
        for (int i = 0; i < ROWS * MAXN; i++)
            xs[i] = (float)i, o[i] = 99.0f;
        targ a[] = {TA_I32(n), TA_ARR(xs), TA_ARR(o)};
        T_RUN_OK(k, NULL, a, 3);
        for (int r = 0; r < ROWS; r++)
            for (int c = 0; c < MAXN; c++)
                cr_assert_eq(o[r * MAXN + c], c < n ? xs[r * MAXN + c] + 1 : 99.0f, "N=%d at [%d,%d]", n, r, c);
    }
    loom_kernel_destroy(k);
}

Test(dyn_dims, a_launch_out_of_range_or_short_of_bytes_is_refused)
{
    enum { N = 8 };
    loom_kernel *k = rows_kernel(64, 4, N);
    float x[64 * N] = {0}, bias[N] = {0}, out[64 * N];
    int grid[3] = {1, 1, 1};
    targ over[] = {TA_I32(68), TA_ARR(x), TA_ARR(bias), TA_ARR(out)};
    cr_assert_eq(t_run(k, grid, over, 4), LOOM_ERR_INVALID);
    cr_assert(strstr(t_last_error, "'B'") && strstr(t_last_error, "1 to 64"), "%s", t_last_error);
    targ zero[] = {TA_I32(0), TA_ARR(x), TA_ARR(bias), TA_ARR(out)};
    cr_assert_eq(t_run(k, grid, zero, 4), LOOM_ERR_INVALID, "%s", t_last_error);
    targ odd[] = {TA_I32(6), TA_ARR(x), TA_ARR(bias), TA_ARR(out)};
    cr_assert_eq(t_run(k, grid, odd, 4), LOOM_ERR_INVALID);
    cr_assert(strstr(t_last_error, "multiple of 4"), "%s", t_last_error);
    /* 8 rows need 256 bytes of x; a buffer of 7 rows is refused, naming x */
    targ shortx[] = {TA_I32(8), TA_BUF(x, 7 * N * 4), TA_ARR(bias), TA_ARR(out)};
    cr_assert_eq(t_run(k, grid, shortx, 4), LOOM_ERR_INVALID);
    cr_assert(strstr(t_last_error, "'x'") && strstr(t_last_error, "256 bytes"), "%s", t_last_error);
    /* and what the launch's B needs is all it needs */
    targ fits[] = {TA_I32(8), TA_BUF(x, 8 * N * 4), TA_ARR(bias), TA_BUF(out, 8 * N * 4)};
    int g2[3] = {2, 1, 1};
    T_RUN_OK(k, g2, fits, 4);
    loom_kernel_destroy(k);
}

Test(dyn_dims, declarations_that_cannot_work_are_refused_at_their_line)
{
    loom_kernel *k = loom_kernel_create("dyn_bad", 1);
    int l1 = __LINE__ + 1;
    loom_arg_dim(k, "A", 0, 1);
    int l2 = __LINE__ + 1;
    loom_arg_dim(k, "C", 100, 7);
    loom_val B = loom_arg_dim(k, "B", 100, 1);
    int l3 = __LINE__ + 1;
    loom_arg_tensor(k, "inner", LOOM_F32, LOOM_SHAPE2(4, LOOM_DIM(B)), LOOM_IN);
    int l4 = __LINE__ + 1;
    loom_arg_tensor(k, "bogus", LOOM_F32, LOOM_SHAPE2(-5, 4), LOOM_IN);
    int l6 = __LINE__ + 1;
    loom_arg_tensor(k, "huge", LOOM_F32, LOOM_SHAPE1(INT64_MIN), LOOM_IN); /* no handle: refused, not negated */
    loom_val s = loom_arg_scalar(k, "s", LOOM_I32);
    int l5 = __LINE__ + 1;
    loom_arg_tensor(k, "notdim", LOOM_F32, LOOM_SHAPE1(LOOM_DIM(s)), LOOM_IN);
    cr_assert_neq(loom_verify(k), LOOM_OK);
    const char *e = loom_kernel_errors(k);
    cr_assert(t_names_line(e, __FILE__, l1) && strstr(e, "max is 0"), "%s", e);
    cr_assert(t_names_line(e, __FILE__, l2) && strstr(e, "divide max"), "%s", e);
    cr_assert(t_names_line(e, __FILE__, l3) && strstr(e, "only dim 0"), "%s", e);
    cr_assert(t_names_line(e, __FILE__, l4) && strstr(e, "'bogus'"), "%s", e);
    cr_assert(t_names_line(e, __FILE__, l5) && strstr(e, "'notdim'"), "%s", e);
    cr_assert(t_names_line(e, __FILE__, l6) && strstr(e, "'huge': dimension 0 is -9223372036854775808"), "%s", e);
    loom_kernel_destroy(k);
    /* a dim of another kernel is not this kernel's */
    loom_kernel *a = loom_kernel_create("dyn_a", 1), *b = loom_kernel_create("dyn_b", 1);
    loom_val Ba = loom_arg_dim(a, "B", 10, 1);
    loom_arg_tensor(b, "x", LOOM_F32, LOOM_SHAPE1(LOOM_DIM(Ba)), LOOM_IN);
    cr_assert_neq(loom_verify(b), LOOM_OK);
    cr_assert(strstr(loom_kernel_errors(b), "LOOM_DIM"), "%s", loom_kernel_errors(b));
    loom_kernel_destroy(a);
    loom_kernel_destroy(b);
}

/* The maximum is not part of the code: the printed IR (the module cache's key) of two
 * kernels that differ only in max is the same, and names the dim. */
Test(dyn_dims, the_maximum_is_not_part_of_the_module)
{
    loom_kernel *a = rows_kernel(64, 1, 8), *b = rows_kernel(4096, 1, 8), *c = rows_kernel(64, 4, 8);
    cr_assert_str_eq(loom_print(a), loom_print(b));
    cr_assert(strstr(loom_print(a), "%x: tensor<f32[%Bx8]>"), "%s", loom_print(a));
    cr_assert(strstr(loom_print(a), "%B: i32 dim"), "%s", loom_print(a));
    cr_assert(strstr(loom_print(c), "%B: i32 dim multiple=4"), "%s", loom_print(c));
    loom_arg_info ai;
    cr_assert(loom_kernel_arg_info(b, 1, &ai));
    cr_assert_eq(ai.dim_of[0], 0);
    cr_assert_eq(ai.dim_of[1], -1);
    cr_assert_eq(ai.shape.dim[0], 4096);
    cr_assert_eq(ai.min_bytes, (size_t)4096 * 8 * 4);
    loom_arg la[4] = {LOOM_ARG_I32(5)};
    loom_shape sh;
    size_t bytes;
    cr_assert(loom_kernel_arg_shape(b, 3, la, &sh, &bytes));
    cr_assert_eq(sh.dim[0], 5);
    cr_assert_eq(bytes, (size_t)5 * 8 * 4);
    loom_kernel_destroy(a);
    loom_kernel_destroy(b);
    loom_kernel_destroy(c);
}

Test(dyn_dims, the_ptx_of_a_run_time_dim_kernel_assembles)
{
    loom_kernel *k = rows_kernel(1 << 20, 8, 64);
    char *ptx = NULL, err[2048] = "";
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert(strstr(ptx, "dyn_rows_param_0"), "B is the kernel's first parameter");
    cr_assert(t_ptxas_ok(ptx, "sm_90a", "dyn_rows"));
    free(ptx);
    loom_kernel_destroy(k);
}
