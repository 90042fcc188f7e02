/*
 * test_refusals.c -- the op table's promise between the rules, the interpreter and the
 * code generator: every op has interpreter semantics and a lowering, and a kernel the
 * rules accept either lowers or is refused by the code generator with one of the reasons
 * docs/dsl.md lists ("What the code generator refuses"), naming the user's line.  One
 * test per documented refusal: the kernel verifies, and cg_compile refuses it with the
 * documented message.
 */
#include "testutil.h"

#include <stdarg.h>

#include "cg.h"
#include "ir.h"

static const char *const op_names[] = {
#define LOOM_OP(E, n, nop, nreg, rule, fl, sem, lay, pr, attrs) #n,
#include "ops.h"
#undef LOOM_OP
};

Test(refusals, every_op_has_semantics_and_a_lowering)
{
    for (int kind = 1; kind < IR_OP_COUNT; kind++) {
        cr_expect(interp_has_semantics(kind), "op '%s' has no interpreter semantics", op_names[kind - 1]);
        cr_expect(cg_op_lowered(kind), "op '%s' has no lowering", op_names[kind - 1]);
    }
}

/* k verifies, and cg_compile refuses it with LOOM_ERR_UNSUPPORTED and a message holding
 * each fragment (NULL-terminated). */
static void expect_refused(loom_kernel *k, ...)
{
    cr_assert_eq(loom_verify(k), LOOM_OK, "the rules should accept it: %s", loom_kernel_errors(k));
    char err[1024];
    cg_result r;
    loom_status st = cg_compile(k, "sm_90a", &r, err, sizeof err);
    cr_assert_eq(st, LOOM_ERR_UNSUPPORTED, "%s: %s", loom_status_name(st), err);
    cr_assert_null(r.ptx);
    va_list ap;
    va_start(ap, k);
    for (const char *frag; (frag = va_arg(ap, const char *));)
        cr_expect(strstr(err, frag), "'%s' not in: %s", frag, err);
    va_end(ap);
    loom_kernel_destroy(k);
}

static void line_of(int line, char *buf, size_t n) { snprintf(buf, n, "test_refusals.c:%d", line); }

Test(refusals, wgmma_without_swizzle)
{
    loom_kernel *k = loom_kernel_create("wgmma_plain", 4);
    loom_val as = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(64, 16), 1, LOOM_SWIZZLE_NONE);
    loom_val bs = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(16, 8), 1, LOOM_SWIZZLE_NONE);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_smem_store(k, as, loom_splat(k, loom_const_f(k, LOOM_F16, 1), LOOM_SHAPE2(64, 16)));
    loom_smem_store(k, bs, loom_splat(k, loom_const_f(k, LOOM_F16, 2), LOOM_SHAPE2(16, 8)));
    loom_fence_async(k);
    loom_val c = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(64, 8));
    int wl = __LINE__; loom_val acc = loom_wgmma(k, as, bs, c);
    loom_wgmma_commit(k);
    loom_wgmma_wait(k, 0, 1, &acc);
    loom_task_end(k, t);
    /* the interpreter runs it: the refusal is the lowering's alone */
    cr_assert_eq(t_run(k, NULL, NULL, 0), LOOM_OK, "%s", t_last_error);
    char at[64];
    line_of(wl, at, sizeof at);
    expect_refused(k, at, "need a swizzle mode", NULL);
}

Test(refusals, more_than_7_task_replicas)
{
    loom_kernel *k = loom_kernel_create("replicas", 8);
    int tl = __LINE__; loom_region_op t = loom_task_begin(k, 1, 0, 8);
    loom_task_end(k, t);
    char at[64];
    line_of(tl, at, sizeof at);
    expect_refused(k, at, "at most 7 task replicas", NULL);
}

Test(refusals, more_than_227_kib_of_shared_memory)
{
    loom_kernel *k = loom_kernel_create("big_ring", 4);
    loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(128, 128), 8, LOOM_SWIZZLE_128); /* 256 KiB */
    expect_refused(k, "kernel 'big_ring' needs 262", "more than 227 KiB", NULL);
}

Test(refusals, register_tile_too_large)
{
    loom_kernel *k = loom_kernel_create("huge_tile", 1);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(256, 256), LOOM_OUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_store(k, x, ((loom_val[]){z, z}), loom_splat(k, loom_const_f(k, LOOM_F32, 1), LOOM_SHAPE2(256, 256)),
               LOOM_NONE);
    expect_refused(k, "more than 1024 registers per thread", NULL);
}

Test(refusals, wgmma_accumulator_smaller_than_a_warp_group_needs)
{
    /* 8 warps are two warp groups: each needs 64 rows, a 64-row accumulator has one */
    loom_kernel *k = loom_kernel_create("wgmma_small", 8);
    loom_val as = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(64, 64), 1, LOOM_SWIZZLE_128);
    loom_val bs = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(64, 64), 1, LOOM_SWIZZLE_128);
    loom_region_op t = loom_task_begin(k, 8, 0, 1);
    loom_val c = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(64, 64));
    loom_val acc = loom_wgmma(k, as, bs, c);
    loom_wgmma_commit(k);
    loom_wgmma_wait(k, 0, 1, &acc);
    loom_task_end(k, t);
    expect_refused(k, "too small for 2 warp groups", NULL);
}
