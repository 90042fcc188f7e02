/*
 * test_print.c -- golden tests of the printer (loom_print).
 *
 * The kernels below never pass two op-building calls as arguments of one call: C leaves
 * the order of argument evaluation unspecified (gcc and clang differ), and the printed
 * value numbers follow the order the ops were built.
 *
 * Each test builds a kernel and compares loom_print()'s text with tests/golden/<name>.ir,
 * found next to this source file (through __FILE__).  On a mismatch both texts and the
 * first differing line are shown.  To accept a deliberate change of the text form, run
 * the tests with LOOM_UPDATE_GOLDEN=1: the golden files are rewritten instead of checked
 * (then review the diff before committing).
 */
#include "ir.h"
#include "testutil.h"

#include "loom_ikbo.h"

/* tests/golden/<name>.ir, relative to this file's directory: where LOOM_UPDATE_GOLDEN=1
 * writes. */
static void golden_path(const char *name, char *buf, size_t n)
{
    const char *slash = strrchr(__FILE__, '/');
    int dir = slash ? (int)(slash - __FILE__) : 0;
    snprintf(buf, n, "%.*s%sgolden/%s.ir", dir, __FILE__, slash ? "/" : "", name);
}

/* The golden files as built into the test binary (CMakeLists.txt embeds every tests/golden .ir file
 * with cmake/embed.cmake), so the suite reads nothing from the source tree. */
extern const unsigned char golden_broadcast_add[], golden_for_loop[], golden_if_else[], golden_masked_load_store[],
    golden_hopper_ops[];
static const struct {
    const char *name;
    const unsigned char *text;
} goldens[] = {{"broadcast_add", golden_broadcast_add}, {"for_loop", golden_for_loop}, {"if_else", golden_if_else},
               {"masked_load_store", golden_masked_load_store}, {"hopper_ops", golden_hopper_ops}};

static const char *golden_text(const char *name)
{
    for (size_t i = 0; i < sizeof goldens / sizeof *goldens; i++)
        if (strcmp(goldens[i].name, name) == 0)
            return (const char *)goldens[i].text;
    return NULL;
}

/* The first line where a and b differ (1-based). */
static int first_diff_line(const char *a, const char *b)
{
    int line = 1;
    for (; *a && *a == *b; a++, b++)
        line += *a == '\n';
    return line;
}

static void check_golden(loom_kernel *k, const char *name)
{
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    const char *got = loom_print(k);
    char path[1024];
    golden_path(name, path, sizeof path);
    const char *upd = getenv("LOOM_UPDATE_GOLDEN");
    if (upd && strcmp(upd, "1") == 0) {
        FILE *f = fopen(path, "wb");
        cr_assert(f, "cannot write %s", path);
        fputs(got, f);
        fclose(f);
        cr_log_warn("updated %s", path);
    } else {
        const char *want = golden_text(name);
        cr_assert(want, "no golden file %s is built in (add it to tests/golden/, run with LOOM_UPDATE_GOLDEN=1 to "
                        "create it, then rebuild); printed:\n%s", path, got);
        cr_expect(strcmp(got, want) == 0, "%s differs from the printed IR at line %d\n--- expected (%s):\n%s--- got:\n%s",
                  name, first_diff_line(got, want), path, want, got);
    }
    /* printing is stable: a second print gives the same text */
    char *again = strdup(got);
    cr_expect_str_eq(loom_print(k), again);
    free(again);
    loom_kernel_destroy(k);
}


Test(print, broadcast_add_template)
{
    tpl_broadcast_add_shape s = {.B = 4, .U = 2, .M = 5, .N = 7, .dtype = LOOM_F32};
    check_golden(tpl_broadcast_add(&s, 4, 8, 4), "broadcast_add");
}

Test(print, for_loop)
{
    /* row sums of x[6][16] by tiles of 4 columns, accumulator and a counter carried */
    loom_kernel *k = loom_kernel_create("row_sum", 2);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(6, 16), LOOM_IN);
    loom_val out = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE1(6), LOOM_OUT);
    loom_val row = loom_name(k, loom_program_id(k, 0), "row");
    loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE1(1));
    loom_val init[2] = {acc0, loom_const_i(k, LOOM_I32, 0)};
    loom_val lo = loom_const_i(k, LOOM_I32, 0);
    loom_val hi = loom_const_i(k, LOOM_I32, 16);
    loom_val step = loom_const_i(k, LOOM_I32, 4);
    loom_region_op loop = loom_for_begin(k, lo, hi, step, 2, init);
    loom_val c = loom_for_iv(k, loop);
    loom_val t = loom_load(k, x, ((loom_val[]){row, c}), LOOM_SHAPE1(4), LOOM_NONE, 0);
    loom_val s = loom_add(k, loom_for_arg(k, loop, 0), loom_expand_dims(k, loom_reduce_sum(k, t, 0), 0));
    loom_val one = loom_const_i(k, LOOM_I32, 1);
    loom_val next[2] = {s, loom_add(k, loom_for_arg(k, loop, 1), one)};
    loom_for_end(k, loop, 2, next);
    loom_store(k, out, &row, loom_name(k, loom_for_result(k, loop, 0), "total"), LOOM_NONE);
    check_golden(k, "for_loop");
}

Test(print, if_else)
{
    /* out[p] = p is even ? x[p] * 2 : -x[p], for p < 8; odd programs also bump a counter */
    loom_kernel *k = loom_kernel_create("if_else", 1);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F16, LOOM_SHAPE1(8), LOOM_IN);
    loom_val out = loom_arg_tensor(k, "out", LOOM_F16, LOOM_SHAPE1(8), LOOM_OUT);
    loom_val p = loom_program_id(k, 0);
    loom_val v = loom_load(k, x, &p, LOOM_SHAPE1(1), LOOM_NONE, 0);
    loom_val two = loom_const_i(k, LOOM_I32, 2);
    loom_val zero = loom_const_i(k, LOOM_I32, 0);
    loom_val even = loom_cmp(k, LOOM_EQ, loom_rem(k, p, two), zero);
    loom_region_op br = loom_if_begin(k, even, 1);
    loom_val a = loom_mul(k, v, loom_const_f(k, LOOM_F16, 2.0));
    loom_else(k, br, 1, &a);
    loom_val b = loom_neg(k, v);
    loom_if_end(k, br, 1, &b);
    loom_store(k, out, &p, loom_if_result(k, br, 0), LOOM_NONE);
    check_golden(k, "if_else");
}

Test(print, masked_load_store)
{
    /* a 4x8 tile of a strided (column-major) 5x7 tensor, masked to its lower triangle,
     * -inf fill, stored under the same mask */
    int64_t strides[2] = {1, 5};
    loom_kernel *k = loom_kernel_create("masked", 4);
    loom_val x = loom_arg_tensor_strided(k, "x", LOOM_F32, LOOM_SHAPE2(5, 7), strides, LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", LOOM_BF16, LOOM_SHAPE2(5, 7), LOOM_INOUT);
    loom_val n = loom_arg_scalar(k, "n", LOOM_I64);
    loom_val pid = loom_program_id(k, 0);
    loom_val r0 = loom_mul(k, pid, loom_const_i(k, LOOM_I32, 4));
    loom_val r = loom_broadcast(k, loom_expand_dims(k, loom_arange(k, 0, 4), 1), LOOM_SHAPE2(4, 8));
    loom_val c = loom_broadcast(k, loom_expand_dims(k, loom_arange(k, 0, 8), 0), LOOM_SHAPE2(4, 8));
    loom_val m = loom_name(k, loom_cmp(k, LOOM_LE, c, r), "lower");
    loom_val offs[2] = {r0, loom_cast(k, n, LOOM_I32)};
    loom_val v = loom_load(k, x, offs, LOOM_SHAPE2(4, 8), m, -INFINITY);
    loom_store(k, y, offs, loom_cast(k, v, LOOM_BF16), m);
    check_golden(k, "masked_load_store");
}

/* The Hopper ops: a producer task brings a tile by TMA, a consumer multiplies it by its
 * transpose and stores half of the product by TMA.  Attributes print as name=value after
 * the operands (the `attrs` column of dsl/ops.h); smem_alloc prints dtype[shape] first. */
Test(print, hopper_ops)
{
    loom_kernel *k = loom_kernel_create("hopper_ops", 8);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F16, LOOM_SHAPE2(64, 64), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", LOOM_F16, LOOM_SHAPE2(32, 64), LOOM_OUT);
    loom_val ring = loom_name(k, loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(64, 64), 2, LOOM_SWIZZLE_128), "ring");
    loom_val out = loom_name(k, loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(64, 64), 1, LOOM_SWIZZLE_128), "out");
    loom_val full = loom_name(k, loom_mbar_alloc(k, 2, 1), "full");
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_val offs[2] = {z, z};
    loom_region_op prod = loom_task_begin(k, 4, 40, 1);
    loom_val dst = loom_smem_slot(k, ring, z);
    loom_mbar_expect(k, full, z, 8192);
    loom_tma_load(k, x, offs, dst, full, z);
    loom_task_end(k, prod);
    loom_region_op cons = loom_task_begin(k, 4, 232, 1);
    loom_name(k, loom_task_replica(k), "me");
    loom_val slot = loom_smem_slot(k, ring, z);
    loom_mbar_wait(k, full, z, z);
    loom_val zf = loom_const_f(k, LOOM_F32, 0);
    loom_val acc0 = loom_splat(k, zf, LOOM_SHAPE2(64, 64));
    loom_val bt = loom_smem_trans(k, slot);
    loom_val acc = loom_wgmma(k, slot, bt, acc0);
    loom_wgmma_commit(k);
    loom_region_op w = loom_wgmma_wait(k, 0, 1, &acc);
    loom_val h = loom_cast(k, loom_wgmma_result(k, w, 0), LOOM_F16);
    loom_smem_store(k, out, h);
    loom_fence_async(k);
    loom_named_barrier(k, 1, 128);
    loom_val top = loom_smem_part(k, out, 0, 0, 32);
    loom_tma_store(k, y, offs, top);
    loom_tma_store_wait(k, 0);
    loom_task_end(k, cons);
    check_golden(k, "hopper_ops");
}

/* ir_value_label (used by the interpreter's messages) names a value as the text does. */
Test(print, value_labels_match_the_text)
{
    loom_kernel *k = loom_kernel_create("labels", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(8), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE1(8), LOOM_OUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_val v = loom_load(k, x, &z, LOOM_SHAPE1(8), LOOM_NONE, 0);
    loom_name(k, v, "v");
    loom_val w = loom_add(k, v, v);
    loom_store(k, o, &z, w, LOOM_NONE);
    const char *text = loom_print(k);
    char b[64];
    cr_assert_str_eq(ir_value_label(k, x, b, sizeof b), "%x");
    cr_assert_str_eq(ir_value_label(k, z, b, sizeof b), "%0");
    cr_assert_str_eq(ir_value_label(k, v, b, sizeof b), "%v.1");
    cr_assert_str_eq(ir_value_label(k, w, b, sizeof b), "%2");
    cr_assert(strstr(text, "%v.1 = load %x[%0]") && strstr(text, "%2 = add %v.1, %v.1"), "%s", text);
    loom_kernel_destroy(k);
}
