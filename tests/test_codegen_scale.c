/*
 * test_codegen_scale.c -- the code generator's work is linear in the kernel's size.
 *
 * What can go wrong: a walk that recurses once per op (a stack overflow past some tens of
 * thousands of ops), a value recomputed at every use of every use (x = x + x repeated
 * doubles the work per step), a quadratic scan over uses, and LLVM handed a function so
 * large that its backend runs for minutes or aborts the process on an allocation
 * failure.  So: chains of 100,000 ops are refused with a message before LLVM (never a
 * crash); chains of reuse 30 deep compile to PTX whose instruction count grows linearly
 * with the depth; a chain long enough to cross the recompute limit (CG_REMAT_MAX) many
 * times compiles, assembles with ptxas, and on a GPU gives the interpreter's bits.
 */
#include <criterion/criterion.h>

#include "loom.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 128

enum src { SRC_ARG, SRC_LOAD, SRC_ARANGE };
enum step { STEP_ADD_CONST, STEP_SELF };

/* out[i] = f(x0) where x0 is a splat of the scalar argument, a load of `in`, or arange
 * (as f32), and each of the n steps is x = x + 0.5 or x = x + x. */
static loom_kernel *chain(enum src src, enum step step, int n)
{
    loom_kernel *k = loom_kernel_create("chain", 4);
    loom_val out = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE1(N), LOOM_OUT);
    loom_val in = loom_arg_tensor(k, "in", LOOM_F32, LOOM_SHAPE1(N), LOOM_IN);
    loom_val s = loom_arg_scalar(k, "s", LOOM_F32);
    loom_val zero = loom_const_i(k, LOOM_I32, 0);
    loom_val x = src == SRC_ARG    ? loom_splat(k, s, LOOM_SHAPE1(N))
                 : src == SRC_LOAD ? loom_load(k, in, (loom_val[]){zero}, LOOM_SHAPE1(N), LOOM_NONE, 0.0)
                                   : loom_cast(k, loom_arange(k, 0, N), LOOM_F32);
    loom_val half = loom_splat(k, loom_const_f(k, LOOM_F32, 0.5), LOOM_SHAPE1(N));
    for (int i = 0; i < n; i++)
        x = step == STEP_SELF ? loom_add(k, x, x) : loom_add(k, x, half);
    loom_store(k, out, (loom_val[]){zero}, x, LOOM_NONE);
    return k;
}

/* Lines of the PTX that are f32 adds. */
static int count_adds(const char *ptx)
{
    int n = 0;
    for (const char *p = strstr(ptx, "add.rn.f32"); p; p = strstr(p + 1, "add.rn.f32"))
        n++;
    for (const char *p = strstr(ptx, "add.f32"); p; p = strstr(p + 1, "add.f32"))
        n++;
    return n;
}

Test(codegen_scale, chain_of_100000_ops_refused_with_a_message, .timeout = 120)
{
    for (int src = SRC_ARG; src <= SRC_LOAD; src++) {
        loom_kernel *k = chain((enum src)src, STEP_ADD_CONST, 100000);
        char *ptx = NULL, err[1024] = "";
        loom_status st = loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err);
        cr_expect_eq(st, LOOM_ERR_UNSUPPORTED, "source %d: %s", src, loom_status_name(st));
        cr_expect(strstr(err, "LLVM instructions") && strstr(err, "LOOM_CODEGEN_MAX_INSTRUCTIONS") &&
                      strstr(err, "'chain'"),
                  "source %d: %s", src, err);
        cr_expect_null(ptx);
        free(ptx);
        loom_kernel_destroy(k);
    }
}

Test(codegen_scale, limit_is_the_environment_variable)
{
    loom_kernel *k = chain(SRC_LOAD, STEP_ADD_CONST, 400); /* about 1600 instructions */
    char *ptx = NULL, err[1024] = "";
    setenv("LOOM_CODEGEN_MAX_INSTRUCTIONS", "1000", 1);
    loom_status st = loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err);
    unsetenv("LOOM_CODEGEN_MAX_INSTRUCTIONS");
    cr_expect_eq(st, LOOM_ERR_UNSUPPORTED, "%s: %s", loom_status_name(st), err);
    cr_expect(strstr(err, "more than the 1000"), "%s", err);
    free(ptx);
    ptx = NULL;
    st = loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err);
    cr_expect_eq(st, LOOM_OK, "the default limit: %s", err);
    free(ptx);
    loom_kernel_destroy(k);
}

/* x = x + x, 30 deep: 2^30 uses of the first value if each use recomputed it. */
Test(codegen_scale, reuse_30_deep_compiles_linearly, .timeout = 120)
{
    for (int src = SRC_ARG; src <= SRC_ARANGE; src++) {
        int adds[2];
        for (int d = 0; d < 2; d++) {
            int depth = d ? 30 : 15;
            loom_kernel *k = chain((enum src)src, STEP_SELF, depth);
            char *ptx = NULL, err[1024] = "";
            loom_status st = loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err);
            cr_assert_eq(st, LOOM_OK, "source %d, depth %d: %s", src, depth, err);
            adds[d] = count_adds(ptx);
            /* at most one add per step per register a thread holds (4 here), plus the
             * recomputed prefix of at most CG_REMAT_MAX ops at each of the few uses */
            cr_expect_leq(adds[d], depth * 4 + 4 * 64, "source %d, depth %d: %d adds", src, depth, adds[d]);
            if (d)
                cr_expect(t_ptxas_ok(ptx, "sm_90a", "reuse30"), "ptxas refused the PTX");
            free(ptx);
            loom_kernel_destroy(k);
        }
        cr_expect_leq(adds[1], 2 * adds[0] + 4 * 64, "source %d: 15 deep %d adds, 30 deep %d", src, adds[0],
                      adds[1]);
    }
}

/* The interpreter's value, and the GPU's bits where there is one. */
static void run_both(loom_kernel *k, float s, const float *in, float *out_interp)
{
    float out[N];
    float inb[N];
    memcpy(inb, in, sizeof inb);
    for (int i = 0; i < N; i++)
        out[i] = -1.0f;
    targ a[] = {TA_ARR(out), TA_ARR(inb), TA_F32(s)};
    T_RUN_OK(k, NULL, a, 3);
    memcpy(out_interp, out, sizeof out);

    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        loom_runtime_destroy(rt);
        return;
    }
    loom_buffer *bo = loom_buffer_create(rt, sizeof out), *bi = loom_buffer_create(rt, sizeof inb);
    cr_assert(bo && bi);
    cr_assert_eq(loom_buffer_upload(bi, inb, sizeof inb), LOOM_OK);
    loom_arg la[] = {LOOM_ARG_BUF(bo), LOOM_ARG_BUF(bi), LOOM_ARG_F32(s)};
    static const int one[3] = {1, 1, 1};
    loom_status st = loom_launch(rt, k, one, la, 3);
    cr_assert_eq(st, LOOM_OK, "GPU launch: %s", loom_runtime_error(rt));
    float g[N];
    cr_assert_eq(loom_buffer_download(bo, g, sizeof g), LOOM_OK);
    for (int i = 0; i < N; i++)
        cr_expect(t_same_f32(g[i], out_interp[i]), "element %d: GPU %a, interpreter %a", i, g[i], out_interp[i]);
    loom_buffer_destroy(bo);
    loom_buffer_destroy(bi);
    loom_runtime_destroy(rt);
}

/* 3000 steps cross the recompute limit about 47 times: each crossing computes the value
 * once in registers and the chain goes on from there. */
Test(codegen_scale, long_chains_give_the_right_values, .timeout = 300)
{
    float in[N], out[N];
    for (int i = 0; i < N; i++)
        in[i] = (float)i - 40.0f;
    for (int src = SRC_ARG; src <= SRC_ARANGE; src++) {
        loom_kernel *k = chain((enum src)src, STEP_ADD_CONST, 3000);
        char *ptx = NULL, err[1024] = "";
        cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
        cr_expect(t_ptxas_ok(ptx, "sm_90a", "chain3000"), "ptxas refused the PTX");
        free(ptx);
        run_both(k, 3.0f, in, out);
        for (int i = 0; i < N; i++) {
            float x0 = src == SRC_ARG ? 3.0f : src == SRC_LOAD ? in[i] : (float)i;
            cr_expect_eq(out[i], x0 + 1500.0f, "source %d, element %d: %g", src, i, out[i]);
        }
        loom_kernel_destroy(k);
    }
    /* and 30 deep reuse: x * 2^30, exactly */
    for (int src = SRC_ARG; src <= SRC_ARANGE; src++) {
        loom_kernel *k = chain((enum src)src, STEP_SELF, 30);
        run_both(k, 3.0f, in, out);
        for (int i = 0; i < N; i++) {
            float x0 = src == SRC_ARG ? 3.0f : src == SRC_LOAD ? in[i] : (float)i;
            cr_expect_eq(out[i], x0 * 1073741824.0f, "source %d, element %d: %g", src, i, out[i]);
        }
        loom_kernel_destroy(k);
    }
}

/* 20,000 transposes of a recomputed 2-D tile: no recursion as deep as the chain. */
Test(codegen_scale, transpose_chain, .timeout = 120)
{
    loom_kernel *k = loom_kernel_create("trans_chain", 4);
    loom_val out = loom_arg_tensor(k, "out", LOOM_I32, LOOM_SHAPE2(16, 16), LOOM_OUT);
    loom_val r = loom_expand_dims(k, loom_arange(k, 0, 16), 1);
    loom_val c = loom_expand_dims(k, loom_arange(k, 0, 16), 0);
    loom_val x = loom_add(k, loom_mul(k, loom_broadcast(k, r, LOOM_SHAPE2(16, 16)),
                                      loom_splat(k, loom_const_i(k, LOOM_I32, 16), LOOM_SHAPE2(16, 16))),
                          loom_broadcast(k, c, LOOM_SHAPE2(16, 16)));
    for (int i = 0; i < 20000; i++)
        x = loom_trans(k, x);
    loom_val zero = loom_const_i(k, LOOM_I32, 0);
    loom_store(k, out, ((loom_val[]){zero, zero}), x, LOOM_NONE);
    char *ptx = NULL, err[1024] = "";
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect(t_ptxas_ok(ptx, "sm_90a", "trans_chain"), "ptxas refused the PTX");
    free(ptx);
    int32_t o[256];
    targ a[] = {TA_ARR(o)};
    T_RUN_OK(k, NULL, a, 1);
    for (int i = 0; i < 256; i++)
        cr_expect_eq(o[i], i, "element %d: %d (an even number of transposes is the identity)", i, o[i]);
    loom_kernel_destroy(k);
}
