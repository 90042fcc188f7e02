/*
 * test_bad_input.c -- bad input through the public APIs, one test a row of docs/errors.md:
 * loom_launch and the buffers, loom_compile_ptx, the IKBO linear compression's C API and
 * loomc's command line.  Each case must be refused with its status and a message naming
 * the argument, before anything runs out of bounds.  Everything runs on the interpreter;
 * the rows that only the GPU backend has skip without a GPU.
 */
#include "codegen.h"
#include "loom_ikbo.h"
#include "loomc_test.h"
#include "tpl.h"
#include "rt.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- loom_launch */

/* The broadcast-add at B=4, U=2, M=N=8, f32: the dims B and U, then cand, user,
 * cand_to_user, out (b[i] is argument i + 2's buffer). */
typedef struct bcast {
    loom_runtime *rt;
    loom_kernel *k;
    tpl_broadcast_add_shape s;
    loom_buffer *b[4];
    loom_arg a[6];
    int grid[3];
} bcast;

static void bcast_make(bcast *x)
{
    memset(x, 0, sizeof *x);
    x->rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    x->s = (tpl_broadcast_add_shape){4, 2, 8, 8, LOOM_F32};
    x->k = tpl_broadcast_add(&x->s, 8, 8, 1);
    cr_assert(x->rt && x->k);
    size_t bytes[4] = {4 * 64 * 4, 2 * 64 * 4, 4 * 4, 4 * 64 * 4};
    for (int i = 0; i < 4; i++) {
        x->b[i] = loom_buffer_create(x->rt, bytes[i]);
        cr_assert(x->b[i]);
        x->a[i + 2] = LOOM_ARG_BUF(x->b[i]);
    }
    x->a[0] = LOOM_ARG_I32(4);
    x->a[1] = LOOM_ARG_I32(2);
    int32_t map[4] = {0, 1, 1, 0};
    cr_assert_eq(loom_buffer_upload(x->b[2], map, sizeof map), LOOM_OK);
    tpl_broadcast_add_grid(&x->s, 8, 8, x->grid);
}

static void bcast_free(bcast *x)
{
    for (int i = 0; i < 4; i++)
        loom_buffer_destroy(x->b[i]);
    loom_kernel_destroy(x->k);
    loom_runtime_destroy(x->rt);
}

Test(bad_input, launch_good_baseline)
{
    bcast x;
    bcast_make(&x);
    cr_assert_eq(loom_launch(x.rt, x.k, x.grid, x.a, 6), LOOM_OK, "%s", loom_runtime_error(x.rt));
    bcast_free(&x);
}

Test(bad_input, launch_null_runtime_or_kernel)
{
    bcast x;
    bcast_make(&x);
    cr_assert_eq(loom_launch(NULL, x.k, x.grid, x.a, 6), LOOM_ERR_INVALID);
    REFUSED(x.rt, loom_launch(x.rt, NULL, x.grid, x.a, 6), LOOM_ERR_INVALID, "launch: kernel is NULL");
    bcast_free(&x);
}

Test(bad_input, launch_unverified_kernel)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_kernel *k = loom_kernel_create("bad", 1);
    loom_val a = loom_const_f(k, LOOM_F32, 1.0);
    loom_add(k, a, loom_const_i(k, LOOM_I32, 1)); /* f32 + i32 */
    int grid[3] = {1, 1, 1};
    REFUSED(rt, loom_launch(rt, k, grid, NULL, 0), LOOM_ERR_VERIFY, "kernel 'bad' failed verification");
    cr_assert(strstr(loom_runtime_error(rt), "type mismatch"));
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}

Test(bad_input, launch_grid_null_zero_negative_over_limit)
{
    bcast x;
    bcast_make(&x);
    REFUSED(x.rt, loom_launch(x.rt, x.k, NULL, x.a, 6), LOOM_ERR_INVALID, "grid is NULL");
    int zero[3] = {0, 4, 1}, neg[3] = {1, -1, 1}, over[3] = {1, 4, 65536};
    REFUSED(x.rt, loom_launch(x.rt, x.k, zero, x.a, 6), LOOM_ERR_INVALID,
            "grid[0] is 0; it must be between 1 and 2147483647");
    REFUSED(x.rt, loom_launch(x.rt, x.k, neg, x.a, 6), LOOM_ERR_INVALID, "grid[1] is -1; it must be between 1 and 65535");
    REFUSED(x.rt, loom_launch(x.rt, x.k, over, x.a, 6), LOOM_ERR_INVALID,
            "grid[2] is 65536; it must be between 1 and 65535");
    bcast_free(&x);
}

Test(bad_input, launch_cluster_grid_not_a_multiple)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_kernel *k = loom_kernel_create("clustered", 1);
    loom_kernel_set_cluster(k, 2);
    loom_cluster_rank(k);
    int grid[3] = {3, 1, 1};
    REFUSED(rt, loom_launch(rt, k, grid, NULL, 0), LOOM_ERR_INVALID, "grid[0] is 3, not a multiple of 2");
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}

Test(bad_input, launch_wrong_argument_count)
{
    bcast x;
    bcast_make(&x);
    REFUSED(x.rt, loom_launch(x.rt, x.k, x.grid, x.a, 5), LOOM_ERR_INVALID, "5 arguments given, the kernel takes 6");
    REFUSED(x.rt, loom_launch(x.rt, x.k, x.grid, x.a, -1), LOOM_ERR_INVALID, "-1 arguments given, the kernel takes 6");
    REFUSED(x.rt, loom_launch(x.rt, x.k, x.grid, NULL, 6), LOOM_ERR_INVALID, "args is NULL");
    bcast_free(&x);
}

Test(bad_input, launch_wrong_argument_kind)
{
    bcast x;
    bcast_make(&x);
    loom_arg a[6] = {x.a[0], x.a[1], x.a[2], LOOM_ARG_I32(3), x.a[4], x.a[5]};
    REFUSED(x.rt, loom_launch(x.rt, x.k, x.grid, a, 6), LOOM_ERR_INVALID,
            "argument 3 ('user') is a tensor but no buffer was given");
    loom_kernel *k = loom_kernel_create("scalar", 1);
    loom_arg_scalar(k, "n", LOOM_I32);
    loom_program_id(k, 0);
    int g[3] = {1, 1, 1};
    REFUSED(x.rt, loom_launch(x.rt, k, g, x.a + 2, 1), LOOM_ERR_INVALID,
            "argument 0 ('n') is a scalar but a buffer was given");
    loom_kernel_destroy(k);
    bcast_free(&x);
}

Test(bad_input, launch_buffer_smaller_than_shape)
{
    bcast x;
    bcast_make(&x);
    loom_buffer *small = loom_buffer_create(x.rt, 4 * 64 * 4 - 1);
    loom_arg a[6] = {x.a[0], x.a[1], x.a[2], x.a[3], x.a[4], LOOM_ARG_BUF(small)};
    REFUSED(x.rt, loom_launch(x.rt, x.k, x.grid, a, 6), LOOM_ERR_INVALID,
            "argument 5 ('out') needs 1024 bytes (f32 tensor of that shape) but its buffer has 1023");
    loom_buffer_destroy(small);
    bcast_free(&x);
}

Test(bad_input, launch_buffer_of_another_runtime)
{
    bcast x;
    bcast_make(&x);
    loom_runtime *other = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_buffer *b = loom_buffer_create(other, 4 * 64 * 4);
    loom_arg a[6] = {x.a[0], x.a[1], LOOM_ARG_BUF(b), x.a[3], x.a[4], x.a[5]};
    REFUSED(x.rt, loom_launch(x.rt, x.k, x.grid, a, 6), LOOM_ERR_INVALID,
            "argument 2 ('cand') is a buffer of another runtime");
    loom_buffer_destroy(b);
    loom_runtime_destroy(other);
    bcast_free(&x);
}

Test(bad_input, launch_index_out_of_range_interpreter)
{
    bcast x;
    bcast_make(&x);
    int32_t bad[2][4] = {{0, 1, 2, 0}, {0, -1, 1, 0}}; /* U = 2 */
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(loom_buffer_upload(x.b[2], bad[i], sizeof bad[i]), LOOM_OK);
        REFUSED(x.rt, loom_launch(x.rt, x.k, x.grid, x.a, 6), LOOM_ERR_BOUNDS, "'user'");
        cr_assert(strstr(loom_runtime_error(x.rt), "broadcast_add.c"), "%s", loom_runtime_error(x.rt));
    }
    bcast_free(&x);
}

Test(bad_input, launch_on_a_runtime_that_failed)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (loom_runtime_status(rt) == LOOM_OK) {
        loom_runtime_destroy(rt);
        cr_skip_test("this machine has a GPU: a GPU runtime does not fail here");
    }
    loom_kernel *k = loom_kernel_create("k", 1);
    loom_program_id(k, 0);
    int grid[3] = {1, 1, 1};
    loom_status created = loom_runtime_status(rt);
    REFUSED(rt, loom_launch(rt, k, grid, NULL, 0), created, "");
    cr_assert(loom_runtime_error(rt)[0], "the creation's message is kept");
    cr_assert_null(loom_buffer_create(rt, 16));
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}

/* GPU only: a device address that is not 16-byte aligned (no public call makes one; a
 * caller of the backend can). */
Test(bad_input, launch_misaligned_device_pointer_gpu)
{
    loom_runtime *rt = t_gpu_or_skip();
    loom_kernel *k = loom_kernel_create("copy", 1);
    loom_val in = loom_arg_tensor(k, "in", LOOM_F32, LOOM_SHAPE1(32), LOOM_IN);
    loom_val out = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE1(32), LOOM_OUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_store(k, out, &z, loom_load(k, in, &z, LOOM_SHAPE1(32), LOOM_NONE, 0.0), LOOM_NONE);
    loom_buffer *b = loom_buffer_create(rt, 256);
    rt_launch_arg la[2] = {{.dptr = rt_buffer_dptr(b) + 4}, {.dptr = rt_buffer_dptr(b) + 128}};
    int grid[3] = {1, 1, 1};
    char err[1024] = "";
    cr_assert_eq(rt_gpu_launch(rt_runtime_gpu(rt), k, grid, la, err, sizeof err), LOOM_ERR_INVALID);
    cr_assert(strstr(err, "argument 0 ('in')") && strstr(err, "not 16-byte aligned"), "%s", err);
    loom_buffer_destroy(b);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}

/* GPU only: a kernel that waits on flags set by other programs needs all of them resident. */
Test(bad_input, launch_flag_wait_grid_over_sms_gpu)
{
    loom_runtime *rt = t_gpu_or_skip();
    loom_kernel *k = loom_kernel_create("waits", 1);
    loom_val flags = loom_arg_tensor(k, "flags", LOOM_I32, LOOM_SHAPE1(1), LOOM_INOUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_flag_wait(k, flags, &z, loom_const_i(k, LOOM_I32, 1));
    loom_buffer *b = loom_buffer_create(rt, 4);
    loom_arg a = LOOM_ARG_BUF(b);
    int grid[3] = {65535, 1, 1};
    REFUSED(rt, loom_launch(rt, k, grid, &a, 1), LOOM_ERR_INVALID, "all its programs must run at once");
    loom_buffer_destroy(b);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- buffers */

Test(bad_input, buffer_null_runtime_and_huge_size)
{
    cr_assert_null(loom_buffer_create(NULL, 16));
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert_null(loom_buffer_create(rt, SIZE_MAX / 2));
    cr_assert(strstr(loom_runtime_error(rt), "out of host memory for a"), "%s", loom_runtime_error(rt));
    loom_runtime_destroy(rt);
}

Test(bad_input, buffer_copies_null_and_too_long)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_buffer *b = loom_buffer_create(rt, 8);
    char host[16] = {0};
    cr_assert_eq(loom_buffer_upload(NULL, host, 8), LOOM_ERR_INVALID);
    cr_assert_eq(loom_buffer_download(NULL, host, 8), LOOM_ERR_INVALID);
    REFUSED(rt, loom_buffer_upload(b, NULL, 8), LOOM_ERR_INVALID, "upload of 8 bytes from a NULL host pointer");
    REFUSED(rt, loom_buffer_download(b, NULL, 8), LOOM_ERR_INVALID, "download of 8 bytes to a NULL host pointer");
    REFUSED(rt, loom_buffer_upload(b, host, 9), LOOM_ERR_INVALID, "upload of 9 bytes into a 8-byte buffer");
    REFUSED(rt, loom_buffer_download(b, host, 16), LOOM_ERR_INVALID, "download of 16 bytes from a 8-byte buffer");
    cr_assert_eq(loom_buffer_upload(b, NULL, 0), LOOM_OK); /* nothing to copy */
    loom_buffer_destroy(b);
    loom_runtime_destroy(rt);
}

Test(bad_input, buffer_host_pointer_of_any_alignment)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_buffer *b = loom_buffer_create(rt, 7);
    unsigned char src[16], dst[16] = {0};
    for (int i = 0; i < 16; i++)
        src[i] = (unsigned char)(i * 11);
    cr_assert_eq(loom_buffer_upload(b, src + 3, 7), LOOM_OK);
    cr_assert_eq(loom_buffer_download(b, dst + 1, 7), LOOM_OK);
    cr_assert_eq(memcmp(src + 3, dst + 1, 7), 0);
    loom_buffer_destroy(b);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- building, compiling */

Test(bad_input, tensor_extent_past_64_bits)
{
    loom_kernel *k = loom_kernel_create("big", 1);
    int64_t strides[2] = {(int64_t)1 << 40, 1};
    cr_assert_eq(loom_arg_tensor_strided(k, "t", LOOM_F32, LOOM_SHAPE2((int64_t)1 << 40, 4), strides, LOOM_IN),
                 LOOM_NONE);
    cr_assert(strstr(loom_kernel_errors(k), "argument 't': its extent (dims times strides) does not fit in 64 bits"),
              "%s", loom_kernel_errors(k));
    loom_kernel_destroy(k);
    k = loom_kernel_create("stride", 1);
    int64_t far[1] = {INT64_MAX};
    cr_assert_eq(loom_arg_tensor_strided(k, "t", LOOM_F32, LOOM_SHAPE1(1), far, LOOM_IN), LOOM_NONE);
    cr_assert(strstr(loom_kernel_errors(k), "argument 't': stride 0 is 9223372036854775807; it must be at most 2^40"),
              "%s", loom_kernel_errors(k));
    loom_kernel_destroy(k);
    /* four dims of 2^20 are 2^80 elements, not a tile of 0 (the product wrapped before) */
    k = loom_kernel_create("tile", 1);
    loom_splat(k, loom_const_f(k, LOOM_F32, 0.0), ((loom_shape){4, {1 << 20, 1 << 20, 1 << 20, 1 << 20}}));
    cr_assert(strstr(loom_kernel_errors(k), "a tile holds at most 2^20"), "%s", loom_kernel_errors(k));
    loom_kernel_destroy(k);
}

Test(bad_input, kernel_name_not_an_identifier)
{
    loom_kernel *k = loom_kernel_create("my kernel", 1);
    loom_program_id(k, 0);
    cr_assert_eq(loom_verify(k), LOOM_ERR_VERIFY);
    cr_assert(strstr(loom_kernel_errors(k), "kernel name 'my kernel' is not an identifier"), "%s", loom_kernel_errors(k));
    loom_kernel_destroy(k);
}

Test(bad_input, compile_ptx_null_and_unknown_arch)
{
    char *ptx = NULL, err[512] = "";
    cr_assert_eq(loom_compile_ptx(NULL, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_ERR_INVALID);
    cr_assert(strstr(err, "loom_compile_ptx: kernel is NULL"), "%s", err);
    loom_kernel *k = loom_kernel_create("k", 1);
    loom_program_id(k, 0);
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", NULL, NULL, err, sizeof err), LOOM_ERR_INVALID);
    cr_assert(strstr(err, "loom_compile_ptx: ptx is NULL"), "%s", err);
    const char *bad[] = {"bogus", "sm_100x", "sm_9", "compute_90"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(loom_compile_ptx(k, bad[i], &ptx, NULL, err, sizeof err), LOOM_ERR_INVALID, "%s", bad[i]);
        cr_assert(strstr(err, "is not an NVPTX processor this loom's LLVM knows"), "%s", err);
        cr_assert_null(ptx);
    }
    cr_assert_eq(loom_compile_ptx(k, "sm_80", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    free(ptx);
    /* the code generator itself refuses it too (the GPU path compiles for the device's arch) */
    cg_result r;
    cr_assert_eq(cg_compile(k, "sm_100x", &r, err, sizeof err), LOOM_ERR_UNSUPPORTED, "%s", err);
    cr_assert(strstr(err, "arch 'sm_100x' is not an NVPTX processor"), "%s", err);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- the IKBO LCE API */

typedef struct lce {
    loom_runtime *rt;
    loom_ikbo_lce_shape s;
    loom_ikbo_lce_config cfg;
    uint16_t *wu, *wc;
    loom_ikbo_lce *p;
    loom_buffer *eu, *ec, *map, *out;
} lce;

static void lce_make(lce *x)
{
    memset(x, 0, sizeof *x);
    x->rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    x->s = (loom_ikbo_lce_shape){.B = 4, .U = 2, .M = 16, .N = 16, .Ku = 8, .Kc = 8, .dtype = LOOM_F16};
    x->cfg = (loom_ikbo_lce_config){64, 64, 2, 4, 5, 0, 0, 1};
    x->wu = calloc(16 * 8, 2);
    x->wc = calloc(16 * 8, 2);
    cr_assert_eq(loom_ikbo_lce_prepare(x->rt, &x->s, LOOM_IKBO_K_ALIGNED, x->wu, x->wc, &x->cfg, &x->p), LOOM_OK,
                 "%s", loom_runtime_error(x->rt));
    x->eu = loom_buffer_create(x->rt, 2 * 8 * 16 * 2);
    x->ec = loom_buffer_create(x->rt, 4 * 8 * 16 * 2);
    x->map = loom_buffer_create(x->rt, 4 * 4);
    x->out = loom_buffer_create(x->rt, 4 * 16 * 16 * 2);
    int32_t m[4] = {0, 1, 1, 0};
    cr_assert_eq(loom_buffer_upload(x->map, m, sizeof m), LOOM_OK);
}

static void lce_free(lce *x)
{
    loom_buffer *b[] = {x->eu, x->ec, x->map, x->out};
    for (int i = 0; i < 4; i++)
        loom_buffer_destroy(b[i]);
    loom_ikbo_lce_destroy(x->p);
    free(x->wu);
    free(x->wc);
    loom_runtime_destroy(x->rt);
}

Test(bad_input, lce_good_baseline)
{
    lce x;
    lce_make(&x);
    cr_assert_eq(loom_ikbo_lce_run(x.p, x.eu, x.ec, x.map, x.out), LOOM_OK, "%s", loom_runtime_error(x.rt));
    lce_free(&x);
}

Test(bad_input, lce_prepare_null_arguments)
{
    lce x;
    lce_make(&x);
    loom_ikbo_lce *p = NULL;
    cr_assert_eq(loom_ikbo_lce_prepare(NULL, &x.s, 2, x.wu, x.wc, &x.cfg, &p), LOOM_ERR_INVALID);
    REFUSED(x.rt, loom_ikbo_lce_prepare(x.rt, &x.s, 2, x.wu, x.wc, &x.cfg, NULL), LOOM_ERR_INVALID,
            "loom_ikbo_lce_prepare: out is NULL");
    REFUSED(x.rt, loom_ikbo_lce_prepare(x.rt, NULL, 2, x.wu, x.wc, &x.cfg, &p), LOOM_ERR_INVALID,
            "loom_ikbo_lce_prepare: shape is NULL");
    REFUSED(x.rt, loom_ikbo_lce_prepare(x.rt, &x.s, 2, NULL, x.wc, &x.cfg, &p), LOOM_ERR_INVALID,
            "loom_ikbo_lce_prepare: w_user is NULL");
    REFUSED(x.rt, loom_ikbo_lce_prepare(x.rt, &x.s, 2, x.wu, NULL, &x.cfg, &p), LOOM_ERR_INVALID,
            "loom_ikbo_lce_prepare: w_cand is NULL");
    lce_free(&x);
}

Test(bad_input, lce_prepare_bad_stage_shape_config)
{
    lce x;
    lce_make(&x);
    loom_ikbo_lce *p = NULL;
    REFUSED(x.rt, loom_ikbo_lce_prepare(x.rt, &x.s, (loom_ikbo_stage)7, x.wu, x.wc, &x.cfg, &p), LOOM_ERR_INVALID,
            "stage 7 is not 0 to 4");
    REFUSED(x.rt, loom_ikbo_lce_prepare(x.rt, &x.s, (loom_ikbo_stage)-1, x.wu, x.wc, &x.cfg, &p), LOOM_ERR_INVALID,
            "stage -1 is not 0 to 4");
    loom_ikbo_lce_shape s = x.s;
    s.B = 0;
    REFUSED(x.rt, loom_ikbo_lce_prepare(x.rt, &s, 2, x.wu, x.wc, &x.cfg, &p), LOOM_ERR_INVALID,
            "B, U, M, N, Ku and Kc must be positive");
    s = x.s;
    s.N = 12;
    REFUSED(x.rt, loom_ikbo_lce_prepare(x.rt, &s, 2, x.wu, x.wc, &x.cfg, &p), LOOM_ERR_INVALID,
            "N must be a multiple of 8");
    s = x.s;
    s.dtype = LOOM_F32;
    REFUSED(x.rt, loom_ikbo_lce_prepare(x.rt, &s, 2, x.wu, x.wc, &x.cfg, &p), LOOM_ERR_INVALID,
            "dtype must be f16, bf16 or e4m3");
    s = x.s;
    s.B = (int64_t)1 << 31;
    REFUSED(x.rt, loom_ikbo_lce_prepare(x.rt, &s, 2, x.wu, x.wc, &x.cfg, &p), LOOM_ERR_INVALID,
            "each of B, U, M, N, Ku and Kc must be below 2^31");
    s = x.s;
    s.B = s.N = s.Kc = (int64_t)1 << 30;
    REFUSED(x.rt, loom_ikbo_lce_prepare(x.rt, &s, 2, x.wu, x.wc, &x.cfg, &p), LOOM_ERR_INVALID,
            "its buffers would hold more than 2^62 bytes");
    loom_ikbo_lce_config c = x.cfg;
    c.cwarps = 5;
    loom_ikbo_lce_prepare(x.rt, &x.s, 2, x.wu, x.wc, &c, &p);
    cr_assert_null(p);
    cr_assert(strstr(loom_runtime_error(x.rt), "loom_ikbo_lce_prepare: "), "%s", loom_runtime_error(x.rt));
    lce_free(&x);
}

Test(bad_input, lce_run_null_and_small_buffers)
{
    lce x;
    lce_make(&x);
    cr_assert_eq(loom_ikbo_lce_run(NULL, x.eu, x.ec, x.map, x.out), LOOM_ERR_INVALID);
    REFUSED(x.rt, loom_ikbo_lce_run(x.p, NULL, x.ec, x.map, x.out), LOOM_ERR_INVALID, "loom_ikbo_lce_run: e_user is NULL");
    REFUSED(x.rt, loom_ikbo_lce_run(x.p, x.eu, NULL, x.map, x.out), LOOM_ERR_INVALID, "loom_ikbo_lce_run: e_cand is NULL");
    REFUSED(x.rt, loom_ikbo_lce_run(x.p, x.eu, x.ec, NULL, x.out), LOOM_ERR_INVALID,
            "loom_ikbo_lce_run: cand_to_user is NULL");
    REFUSED(x.rt, loom_ikbo_lce_run(x.p, x.eu, x.ec, x.map, NULL), LOOM_ERR_INVALID, "loom_ikbo_lce_run: out is NULL");
    loom_buffer *small = loom_buffer_create(x.rt, 4 * 16 * 16 * 2 - 2);
    REFUSED(x.rt, loom_ikbo_lce_run(x.p, x.eu, x.ec, x.map, small), LOOM_ERR_INVALID,
            "loom_ikbo_lce_run: out has 2046 bytes; it must hold [4, 16, 16] elements of 2 bytes (2048 bytes)");
    loom_buffer *map3 = loom_buffer_create(x.rt, 3 * 4);
    REFUSED(x.rt, loom_ikbo_lce_run(x.p, x.eu, x.ec, map3, x.out), LOOM_ERR_INVALID,
            "loom_ikbo_lce_run: cand_to_user has 12 bytes; it must hold [4, 1, 1] elements of 4 bytes (16 bytes)");
    loom_buffer_destroy(small);
    loom_buffer_destroy(map3);
    lce_free(&x);
}

Test(bad_input, lce_run_buffer_of_another_runtime)
{
    lce x;
    lce_make(&x);
    loom_runtime *other = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_buffer *eu = loom_buffer_create(other, 2 * 8 * 16 * 2);
    REFUSED(x.rt, loom_ikbo_lce_run(x.p, eu, x.ec, x.map, x.out), LOOM_ERR_INVALID, "is a buffer of another runtime");
    cr_assert(strstr(loom_runtime_error(x.rt), "loom_ikbo_lce_run"), "%s", loom_runtime_error(x.rt));
    loom_buffer_destroy(eu);
    loom_runtime_destroy(other);
    lce_free(&x);
}

Test(bad_input, lce_run_index_out_of_range_interpreter)
{
    lce x;
    lce_make(&x);
    int32_t bad[2][4] = {{0, 1, 2, 0}, {0, 1, 1, -3}};
    REFUSED(x.rt, (loom_buffer_upload(x.map, bad[0], sizeof bad[0]), loom_ikbo_lce_run(x.p, x.eu, x.ec, x.map, x.out)),
            LOOM_ERR_INVALID, "loom_ikbo_lce_run: cand_to_user[2] is 2; every entry must be a user in [0, U) = [0, 2)");
    REFUSED(x.rt, (loom_buffer_upload(x.map, bad[1], sizeof bad[1]), loom_ikbo_lce_run(x.p, x.eu, x.ec, x.map, x.out)),
            LOOM_ERR_INVALID, "loom_ikbo_lce_run: cand_to_user[3] is -3");
    lce_free(&x);
}

/* GPU only: the same check, opt-in with LOOM_CHECK_INDEX=1 (read when prepared). */
Test(bad_input, lce_run_index_out_of_range_gpu_check_index)
{
    loom_runtime *rt = t_gpu_or_skip();
    setenv("LOOM_CHECK_INDEX", "1", 1);
    loom_ikbo_lce_shape s = {.B = 4, .U = 2, .M = 16, .N = 16, .Ku = 8, .Kc = 8, .dtype = LOOM_F16};
    loom_ikbo_lce_config cfg = {64, 64, 2, 4, 5, 0, 0, 1};
    uint16_t *w = calloc(16 * 8, 2);
    loom_ikbo_lce *p = NULL;
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_FUSED_EPILOGUE, w, w, &cfg, &p), LOOM_OK, "%s",
                 loom_runtime_error(rt));
    unsetenv("LOOM_CHECK_INDEX");
    loom_buffer *eu = loom_buffer_create(rt, 2 * 8 * 16 * 2), *ec = loom_buffer_create(rt, 4 * 8 * 16 * 2);
    loom_buffer *map = loom_buffer_create(rt, 16), *out = loom_buffer_create(rt, 4 * 16 * 16 * 2);
    int32_t bad[4] = {0, 1, 5, 0};
    cr_assert_eq(loom_buffer_upload(map, bad, sizeof bad), LOOM_OK);
    REFUSED(rt, loom_ikbo_lce_run(p, eu, ec, map, out), LOOM_ERR_INVALID, "cand_to_user[2] is 5");
    loom_buffer *bs[] = {eu, ec, map, out};
    for (int i = 0; i < 4; i++)
        loom_buffer_destroy(bs[i]);
    loom_ikbo_lce_destroy(p);
    free(w);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- loomc */

#define loomc t_loomc

Test(bad_input, loomc_options)
{
    loomc_opts o;
    char err[512];
    cr_assert_eq(loomc("ir gemm --shape M=64 --config BM=64", &o, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(o.name, "gemm");
    cr_assert_str_eq(o.shape, "M=64");
    struct {
        const char *line, *msg;
    } bad[] = {
        {"ir gemm --bogus", "unknown option '--bogus'"},
        {"ir gemm --shape", "--shape needs a value"},
        {"ir gemm --config", "--config needs a value"},
        {"emit gemm -o", "-o needs a value"},
        {"run gemm --seed", "--seed needs a value"},
        {"tune gemm --max 0", "--max needs a positive integer below 2^30, not '0'"},
        {"tune gemm --threads 4x", "--threads needs a positive integer below 2^30, not '4x'"},
        {"tune gemm --max 4294967297", "--max needs a positive integer below 2^30, not '4294967297'"},
        {"ir gemm row_softmax", "unexpected argument 'row_softmax'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(loomc(bad[i].line, &o, err, sizeof err), -1, "%s", bad[i].line);
        cr_assert_str_eq(err, bad[i].msg);
    }
    char many[4096] = "tune gemm";
    for (int i = 0; i < LOOMC_MAX_SHAPES + 1; i++)
        strcat(many, " --shape M=8");
    cr_assert_eq(loomc(many, &o, err, sizeof err), -1);
    cr_assert_str_eq(err, "at most 64 --shape options");
}

Test(bad_input, loomc_shape_and_config_values)
{
    const loom_template *t = loom_template_find("gemm");
    cr_assert(t);
    int64_t shape[LOOM_MAX_PARAMS], config[LOOM_MAX_PARAMS];
    char err[1024];
    cr_assert_eq(loomc_template_params(t, "M=64,dtype=bf16", "BM=128", shape, config, err, sizeof err), 0, "%s", err);
    struct {
        const char *shape, *config, *msg;
    } bad[] = {
        {"Q=1", NULL, "--shape for gemm: unknown key 'Q' (known: M N K batch dtype odtype ashared lda ldb btrans promote scaled)"},
        {"M=x", NULL, "--shape for gemm: bad value 'x' for key 'M' (an integer)"},
        {"M", NULL, "--shape for gemm: 'M' is not key=value"},
        {"dtype=f8", NULL, "--shape for gemm: bad value 'f8' for key 'dtype' (f16, bf16, f32, i32, i64 or i1)"},
        {"M=-1", NULL, "--shape for gemm: M=-1 is out of range (0 to 2^31 - 1)"},
        {"M=4611686018427387905", NULL, "--shape for gemm: M=4611686018427387905 is out of range (at most 2^40"},
        {NULL, "BM=2147483648", "--config for gemm: BM=2147483648 is out of range (0 to 2^31 - 1)"},
        {NULL, "warps=4", "--config for gemm: unknown key 'warps'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        cr_assert_eq(loomc_template_params(t, bad[i].shape, bad[i].config, shape, config, err, sizeof err), -1, "%s",
                     bad[i].msg);
        cr_assert(strstr(err, bad[i].msg), "'%s' does not say '%s'", err, bad[i].msg);
    }
}

/* Parameter text with values beyond any size is refused naming the key (templates' size
 * arithmetic would overflow), and the power-of-two helper saturates instead of looping. */
Test(bad_input, params_out_of_range)
{
    const loom_template *t = loom_template_find("gemm");
    cr_assert(t);
    int64_t v[LOOM_MAX_PARAMS];
    char err[256];
    cr_expect_neq(loom_params_parse(t->shape, t->nshape, "M=99999999999999999999", v, err, sizeof err), 0);
    cr_expect(strstr(err, "'99999999999999999999' for key 'M'") != NULL, "%s", err); /* past int64 */
    cr_expect_neq(loom_params_parse(t->shape, t->nshape, "N=4611686018427387905", v, err, sizeof err), 0);
    cr_expect(strstr(err, "out of range") != NULL, "%s", err);
    cr_expect_eq(loom_params_parse(t->shape, t->nshape, "N=1099511627776", v, err, sizeof err), 0, "%s", err);
    cr_expect_eq(tpl_pow2_at_least(INT64_MAX), INT64_C(1) << 62);
    cr_expect_eq(tpl_pow2_at_least(1000), 1024);
}
