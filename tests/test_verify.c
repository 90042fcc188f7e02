/*
 * test_verify.c -- every builder/verifier rejection, with its message and location.
 *
 * Each test builds a kernel with one mistake, captures __LINE__ on the line of the
 * offending builder call, and checks that loom_verify() fails with exactly the expected
 * number of errors, one of them naming "test_verify.c:<line>:" and containing the
 * expected text.  Covers type and shape mismatches, scoping, read-only stores,
 * loop-carried types, reductions, dot, masks, non-tensor memory operands, unbalanced
 * control flow and cascades (one mistake, one message).  The end of the file checks
 * what loom_launch refuses: unverified kernels, too-small buffers, wrong argument counts
 * and scalar/buffer mix-ups, each with a message naming the argument.
 */
#include "testutil.h"

/* A kernel with a few arguments to make mistakes with. */
typedef struct fx {
    loom_kernel *k;
    loom_val x, y, i, o, oi, s, z;
    loom_val vx, vy, vi; /* x [4] f32, y [5] f32, i [4] i32 loaded whole */
} fx;

static fx mk(void)
{
    fx f;
    f.k = loom_kernel_create("bad", 4);
    f.x = loom_arg_tensor(f.k, "x", LOOM_F32, LOOM_SHAPE1(4), LOOM_IN);
    f.y = loom_arg_tensor(f.k, "y", LOOM_F32, LOOM_SHAPE1(5), LOOM_IN);
    f.i = loom_arg_tensor(f.k, "i", LOOM_I32, LOOM_SHAPE1(4), LOOM_IN);
    f.o = loom_arg_tensor(f.k, "o", LOOM_F32, LOOM_SHAPE1(4), LOOM_OUT);
    f.oi = loom_arg_tensor(f.k, "oi", LOOM_I32, LOOM_SHAPE1(4), LOOM_INOUT);
    f.s = loom_arg_scalar(f.k, "s", LOOM_I32);
    f.z = loom_const_i(f.k, LOOM_I32, 0);
    f.vx = loom_load(f.k, f.x, &f.z, LOOM_SHAPE1(4), LOOM_NONE, 0);
    f.vy = loom_load(f.k, f.y, &f.z, LOOM_SHAPE1(5), LOOM_NONE, 0);
    f.vi = loom_load(f.k, f.i, &f.z, LOOM_SHAPE1(4), LOOM_NONE, 0);
    cr_assert_eq(loom_kernel_num_errors(f.k), 0, "%s", loom_kernel_errors(f.k));
    return f;
}

/* k fails to verify with exactly n errors (n < 0: any number); the one at `line` contains
 * `what`. */
static void expect_errors(loom_kernel *k, int line, const char *what, int n)
{
    cr_assert_eq(loom_verify(k), LOOM_ERR_VERIFY, "the kernel verified, but should fail with '%s'", what);
    const char *errs = loom_kernel_errors(k);
    if (n >= 0)
        cr_expect_eq(loom_kernel_num_errors(k), n, "want %d error(s), got:\n%s", n, errs);
    const char *loc = t_loc(__FILE__, line);
    const char *at = strstr(errs, loc);
    cr_assert(at, "no error at %s; errors:\n%s", loc, errs);
    const char *eol = strchr(at, '\n');
    size_t len = eol ? (size_t)(eol - at) : strlen(at);
    char one[1024];
    snprintf(one, sizeof one, "%.*s", (int)len, at);
    cr_expect(strstr(one, what), "the error at %s should contain '%s':\n%s", loc, what, one);
    cr_expect(strstr(one, ": error: "), "format is 'file:line: error: ...': %s", one);
    loom_kernel_destroy(k);
}

#define expect_error(k, line, what) expect_errors(k, line, what, 1)

/* ================================================================ types and shapes */

Test(verify, dtype_mismatch)
{
    fx f = mk();
    int L = __LINE__; loom_val r = loom_add(f.k, f.vx, f.vi);
    cr_expect_eq(r, LOOM_NONE, "a rejected op returns LOOM_NONE");
    expect_error(f.k, L, "op 'add': type mismatch");
}

Test(verify, shape_mismatch)
{
    fx f = mk();
    int L = __LINE__; loom_mul(f.k, f.vx, f.vy);
    expect_error(f.k, L, "shape mismatch");
}

Test(verify, rule_messages_of_elementwise_ops)
{
    struct { const char *what; } w[] = {{"rem takes integers"}, {"arithmetic needs numbers"}, {"not takes i1"},
                                        {"this op takes floats"}, {"use loom_not on i1"}, {"bitwise ops take integers"},
                                        {"fma takes floats"}, {"it must be i1"}};
    for (int c = 0; c < 8; c++) {
        fx f = mk();
        loom_val b = loom_cmp(f.k, LOOM_LT, f.vi, f.z);
        int L = 0;
        switch (c) {
        case 0: L = __LINE__; loom_rem(f.k, f.vx, f.vx); break;
        case 1: L = __LINE__; loom_add(f.k, b, b); break;
        case 2: L = __LINE__; loom_not(f.k, f.vx); break;
        case 3: L = __LINE__; loom_exp2(f.k, f.vi); break;
        case 4: L = __LINE__; loom_neg(f.k, b); break;
        case 5: L = __LINE__; loom_and(f.k, f.vx, f.vx); break;
        case 6: L = __LINE__; loom_fma(f.k, f.vi, f.vi, f.vi); break;
        default: L = __LINE__; loom_select(f.k, f.vx, f.vx, f.vx); break;
        }
        expect_error(f.k, L, w[c].what);
    }
}

Test(verify, rule_messages_of_shape_ops)
{
    const char *w[] = {"splat takes a scalar", "only dims of 1 stretch", "trans takes a 2-D tile",
                       "axis 3 is out of range", "end must be greater than start", "axis 3 is not 0, 1 or 2",
                       "fewer dims"};
    for (int c = 0; c < 7; c++) {
        fx f = mk();
        int L = 0;
        switch (c) {
        case 0: L = __LINE__; loom_splat(f.k, f.vx, LOOM_SHAPE2(2, 4)); break;
        case 1: L = __LINE__; loom_broadcast(f.k, f.vx, LOOM_SHAPE2(2, 5)); break;
        case 2: L = __LINE__; loom_trans(f.k, f.vx); break;
        case 3: L = __LINE__; loom_expand_dims(f.k, f.vx, 3); break;
        case 4: L = __LINE__; loom_arange(f.k, 4, 4); break;
        case 5: L = __LINE__; loom_program_id(f.k, 3); break;
        default: L = __LINE__; loom_broadcast(f.k, loom_expand_dims(f.k, f.vx, 0), LOOM_SHAPE1(4)); break;
        }
        expect_error(f.k, L, w[c]);
    }
}

Test(verify, rule_messages_of_slice)
{
    const char *w[] = {"dim 1 is out of range", "size 3 is not a power of two", "start 1 is not a multiple",
                       "the elements [4, 6) along dim 0 are outside", "slice takes a tile of rank 1"};
    for (int c = 0; c < 5; c++) {
        fx f = mk();
        int L = 0;
        switch (c) {
        case 0: L = __LINE__; loom_slice(f.k, f.vx, 1, 0, 2); break;
        case 1: L = __LINE__; loom_slice(f.k, f.vx, 0, 0, 3); break;
        case 2: L = __LINE__; loom_slice(f.k, f.vx, 0, 1, 2); break;
        case 3: L = __LINE__; loom_slice(f.k, f.vx, 0, 4, 2); break;
        default: L = __LINE__; loom_slice(f.k, f.s, 0, 0, 1); break;
        }
        expect_error(f.k, L, w[c]);
    }
}

Test(verify, reduction_over_missing_axis)
{
    fx f = mk();
    int L = __LINE__; loom_reduce_sum(f.k, f.vx, 1);
    expect_error(f.k, L, "axis 1 does not exist in f32[4]");
    f = mk();
    L = __LINE__; loom_reduce_max(f.k, loom_reduce_min(f.k, f.vx, 0), 0);
    expect_error(f.k, L, "there is no axis to reduce");
    f = mk();
    L = __LINE__; loom_reduce_min(f.k, f.vx, -1);
    expect_error(f.k, L, "does not exist");
}

Test(verify, dot_shapes_and_types)
{
    const char *w[] = {"inner dims differ", "it must be f32", "dot takes 2-D tiles", "the same float type",
                       "the accumulator is f32[4x4] but a @ b is 4x5"};
    for (int c = 0; c < 5; c++) {
        fx f = mk();
        loom_val a = loom_broadcast(f.k, f.vx, LOOM_SHAPE2(4, 4));  /* f32[4x4] */
        loom_val b = loom_broadcast(f.k, f.vy, LOOM_SHAPE2(4, 5));  /* f32[4x5] */
        loom_val b5 = loom_broadcast(f.k, f.vy, LOOM_SHAPE2(5, 5)); /* f32[5x5] */
        loom_val acc = loom_broadcast(f.k, loom_const_f(f.k, LOOM_F32, 0), LOOM_SHAPE2(4, 5));
        loom_val acc44 = loom_broadcast(f.k, loom_const_f(f.k, LOOM_F32, 0), LOOM_SHAPE2(4, 4));
        int L = 0;
        switch (c) {
        case 0: L = __LINE__; loom_dot(f.k, a, b5, acc); break;
        case 1: L = __LINE__; loom_dot(f.k, a, b, loom_cast(f.k, acc, LOOM_F16)); break;
        case 2: L = __LINE__; loom_dot(f.k, f.vx, b, acc); break;
        case 3: L = __LINE__; loom_dot(f.k, loom_cast(f.k, a, LOOM_F16), b, acc); break;
        default: L = __LINE__; loom_dot(f.k, a, b, acc44); break;
        }
        expect_error(f.k, L, w[c]);
    }
}

/* ================================================================ memory ops */

Test(verify, store_to_input_tensor)
{
    fx f = mk();
    int L = __LINE__; loom_store(f.k, f.x, &f.z, f.vx, LOOM_NONE);
    expect_error(f.k, L, "argument 'x' is read-only (declared LOOM_IN)");
}

Test(verify, store_value_of_wrong_dtype)
{
    fx f = mk();
    int L = __LINE__; loom_store(f.k, f.o, &f.z, f.vi, LOOM_NONE);
    expect_error(f.k, L, "use loom_cast");
}

Test(verify, bad_mask_types)
{
    const char *w[] = {"the mask is i32[4]", "the mask is i1[5]", "the mask is f32[4]", "i1 tile shaped like the value"};
    for (int c = 0; c < 4; c++) {
        fx f = mk();
        loom_val m5 = loom_cmp(f.k, LOOM_GT, f.vy, f.vy);
        int L = 0;
        switch (c) {
        case 0: L = __LINE__; loom_load(f.k, f.x, &f.z, LOOM_SHAPE1(4), f.vi, 0); break;
        case 1: L = __LINE__; loom_load(f.k, f.x, &f.z, LOOM_SHAPE1(4), m5, 0); break;
        case 2: L = __LINE__; loom_store(f.k, f.o, &f.z, f.vx, f.vx); break;
        default: L = __LINE__; loom_store(f.k, f.o, &f.z, f.vx, m5); break;
        }
        expect_error(f.k, L, w[c]);
    }
}

Test(verify, memory_op_on_a_non_tensor)
{
    for (int c = 0; c < 4; c++) {
        fx f = mk();
        int L = 0;
        switch (c) {
        case 0: L = __LINE__; loom_load(f.k, f.vx, &f.z, LOOM_SHAPE1(4), LOOM_NONE, 0); break;
        case 1: L = __LINE__; loom_store(f.k, f.s, &f.z, f.vx, LOOM_NONE); break;
        case 2: L = __LINE__; loom_load_scalar(f.k, f.z, &f.z); break;
        default: L = __LINE__; loom_load_rows(f.k, f.vi, f.vi, &f.z, LOOM_SHAPE1(4), 0); break;
        }
        expect_error(f.k, L, "not a global tensor argument");
    }
}

Test(verify, offsets_and_tile_shapes)
{
    const char *w[] = {"offsets are i32 or i64 scalars", "offsets are i32 or i64 scalars", "tile rank 2 must be between 1",
                       "must be a 1-D i32 or i64 tile", "offsets is NULL", "must be between 1 and 2^20"};
    for (int c = 0; c < 6; c++) {
        fx f = mk();
        loom_val fz = loom_const_f(f.k, LOOM_F32, 0);
        int L = 0;
        switch (c) {
        case 0: L = __LINE__; loom_load(f.k, f.x, &fz, LOOM_SHAPE1(4), LOOM_NONE, 0); break;
        case 1: L = __LINE__; loom_load_scalar(f.k, f.x, &f.vi); break;
        case 2: L = __LINE__; loom_load(f.k, f.x, &f.z, LOOM_SHAPE2(2, 2), LOOM_NONE, 0); break;
        case 3: L = __LINE__; loom_load_rows(f.k, f.x, f.vx, &f.z, LOOM_SHAPE1(4), 0); break;
        case 4: L = __LINE__; loom_load(f.k, f.x, NULL, LOOM_SHAPE1(4), LOOM_NONE, 0); break;
        default: L = __LINE__; loom_load(f.k, f.x, &f.z, LOOM_SHAPE1(0), LOOM_NONE, 0); break;
        }
        expect_error(f.k, L, w[c]);
    }
}

/* ================================================================ scopes and control flow */

Test(verify, value_used_outside_its_scope)
{
    fx f = mk();
    loom_region_op loop = loom_for_begin(f.k, f.z, f.s, loom_const_i(f.k, LOOM_I32, 1), 0, NULL);
    loom_val inner = loom_add(f.k, f.vx, loom_const_f(f.k, LOOM_F32, 1));
    loom_for_end(f.k, loop, 0, NULL);
    int L = __LINE__; loom_store(f.k, f.o, &f.z, inner, LOOM_NONE);
    expect_error(f.k, L, "used outside its scope");
}

Test(verify, if_branch_value_used_in_other_branch)
{
    fx f = mk();
    loom_region_op br = loom_if_begin(f.k, loom_cmp(f.k, LOOM_EQ, f.s, f.z), 0);
    loom_val t = loom_neg(f.k, f.vx);
    loom_else(f.k, br, 0, NULL);
    int L = __LINE__; loom_store(f.k, f.o, &f.z, t, LOOM_NONE);
    loom_if_end(f.k, br, 0, NULL);
    expect_error(f.k, L, "used outside its scope");
}

Test(verify, loop_carried_type_mismatch)
{
    fx f = mk();
    loom_region_op loop = loom_for_begin(f.k, f.z, f.s, loom_const_i(f.k, LOOM_I32, 1), 1, &f.vi);
    loom_val y = f.vx; /* f32[4] yielded for an i32[4] carried value */
    int L = __LINE__; loom_for_end(f.k, loop, 1, &y);
    expect_error(f.k, L, "value 0 is f32[4] but the enclosing for's carried value 0 is i32[4]");
}

Test(verify, loop_yield_count_mismatch)
{
    fx f = mk();
    loom_region_op loop = loom_for_begin(f.k, f.z, f.s, loom_const_i(f.k, LOOM_I32, 1), 1, &f.vi);
    loom_val y[2] = {f.vi, f.vi};
    int L = __LINE__; loom_for_end(f.k, loop, 2, y);
    expect_error(f.k, L, "yields 2 values but the enclosing for has 1 carried values");
}

Test(verify, loop_bounds_must_be_i32_scalars)
{
    fx f = mk();
    int L = __LINE__; loom_region_op loop = loom_for_begin(f.k, f.z, loom_const_i(f.k, LOOM_I64, 4), f.z, 0, NULL);
    loom_val x = loom_neg(f.k, f.vx); /* the body of a broken loop reports nothing more */
    loom_store(f.k, f.o, &f.z, x, LOOM_NONE);
    loom_for_end(f.k, loop, 0, NULL);
    expect_error(f.k, L, "hi is i64; loop bounds are i32 scalars");
}

Test(verify, if_condition_must_be_i1_scalar)
{
    fx f = mk();
    int L = __LINE__; loom_region_op br = loom_if_begin(f.k, loom_cmp(f.k, LOOM_LT, f.vx, f.vx), 0);
    loom_if_end(f.k, br, 0, NULL);
    expect_error(f.k, L, "it must be an i1 scalar");
}

Test(verify, if_with_results_needs_else)
{
    fx f = mk();
    loom_region_op br = loom_if_begin(f.k, loom_cmp(f.k, LOOM_EQ, f.s, f.z), 1);
    loom_val t = loom_neg(f.k, f.vx);
    int L = __LINE__; loom_if_end(f.k, br, 1, &t);
    expect_error(f.k, L, "an if with results needs loom_else");
}

static void else_count_mismatch(int nerrors)
{
    fx f = mk();
    loom_region_op br = loom_if_begin(f.k, loom_cmp(f.k, LOOM_EQ, f.s, f.z), 1);
    int L = __LINE__; loom_else(f.k, br, 0, NULL);
    loom_if_end(f.k, br, 0, NULL);
    expect_errors(f.k, L, "the then-branch yields 0 values but the if declares 1 results", nerrors);
}

Test(verify, else_yield_count_must_match_results) { else_count_mismatch(-1); }

Test(verify, else_yield_count_mismatch_gives_one_message)
{
    else_count_mismatch(1);
}

Test(verify, else_branch_yield_type_must_match)
{
    fx f = mk();
    loom_region_op br = loom_if_begin(f.k, loom_cmp(f.k, LOOM_EQ, f.s, f.z), 1);
    loom_else(f.k, br, 1, &f.vx);
    int L = __LINE__; loom_if_end(f.k, br, 1, &f.vi);
    expect_error(f.k, L, "value 0 is i32[4] but the enclosing if's result 0 is f32[4]");
}

Test(verify, loop_begun_but_never_ended)
{
    fx f = mk();
    int L = __LINE__; loom_for_begin(f.k, f.z, f.s, loom_const_i(f.k, LOOM_I32, 1), 0, NULL);
    loom_store(f.k, f.o, &f.z, f.vx, LOOM_NONE);
    expect_error(f.k, L, "this for was begun here but never ended (missing loom_for_end)");
}

Test(verify, if_begun_but_never_ended)
{
    fx f = mk();
    int L = __LINE__; loom_if_begin(f.k, loom_cmp(f.k, LOOM_EQ, f.s, f.z), 0);
    expect_error(f.k, L, "never ended");
}

Test(verify, ending_a_region_that_is_not_open)
{
    fx f = mk();
    int L = __LINE__; loom_for_end(f.k, LOOM_NO_REGION, 0, NULL);
    expect_error(f.k, L, "there is no open loop or if to end");
}

/* A region op's handle is a type of its own: a loom_region_op where a loom_val is expected,
 * or the other way round, does not compile. */
_Static_assert(_Generic(LOOM_NO_REGION, loom_val: 0, default: 1), "loom_region_op is not loom_val");
_Static_assert(_Generic(LOOM_NONE, loom_region_op: 0, default: 1), "loom_val is not loom_region_op");

Test(verify, region_handles_none_and_some)
{
    fx f = mk();
    cr_assert(loom_region_is_none(LOOM_NO_REGION));
    loom_region_op br = loom_if_begin(f.k, loom_cmp(f.k, LOOM_EQ, f.s, f.z), 0);
    cr_assert(!loom_region_is_none(br), "a good if's handle is not none");
    loom_if_end(f.k, br, 0, NULL);
    /* a begin whose error is recorded (an i32 condition) returns none */
    loom_region_op bad = loom_if_begin(f.k, f.s, 0);
    cr_assert(loom_region_is_none(bad));
    loom_if_end(f.k, bad, 0, NULL);
    cr_assert_eq(loom_verify(f.k), LOOM_ERR_VERIFY);
    loom_kernel_destroy(f.k);
}

Test(verify, regions_must_end_in_order)
{
    fx f = mk();
    loom_val one = loom_const_i(f.k, LOOM_I32, 1);
    loom_region_op outer = loom_for_begin(f.k, f.z, f.s, one, 0, NULL);
    loom_region_op inner = loom_for_begin(f.k, f.z, f.s, one, 0, NULL);
    int L = __LINE__; loom_for_end(f.k, outer, 0, NULL);
    loom_for_end(f.k, inner, 0, NULL);
    loom_for_end(f.k, outer, 0, NULL);
    expect_error(f.k, L, "regions must end in the order they began");
}

/* ================================================================ cascades */

Test(verify, one_mistake_gives_one_message)
{
    fx f = mk();
    int L = __LINE__; loom_val bad = loom_add(f.k, f.vx, f.vy);
    loom_val m = loom_mul(f.k, bad, f.vx);
    loom_val n = loom_exp2(f.k, loom_neg(f.k, m));
    loom_val r = loom_reduce_sum(f.k, n, 0);
    loom_store(f.k, f.o, &f.z, loom_splat(f.k, r, LOOM_SHAPE1(4)), LOOM_NONE);
    loom_store(f.k, f.o, &f.z, n, loom_cmp(f.k, LOOM_GT, n, m));
    cr_expect_eq(r, LOOM_NONE);
    expect_errors(f.k, L, "shape mismatch", 1);
}

Test(verify, cascade_through_loop_and_if)
{
    /* a bad value used as a loop's initial value and an if's condition */
    fx f = mk();
    int L = __LINE__; loom_val bad = loom_sub(f.k, f.vi, f.vx);
    loom_region_op loop = loom_for_begin(f.k, f.z, f.s, loom_const_i(f.k, LOOM_I32, 1), 1, &bad);
    loom_val a = loom_for_arg(f.k, loop, 0);
    loom_val y = loom_add(f.k, a, f.vi);
    loom_for_end(f.k, loop, 1, &y);
    loom_val res = loom_for_result(f.k, loop, 0);
    loom_store(f.k, f.oi, &f.z, res, LOOM_NONE);
    loom_region_op br = loom_if_begin(f.k, loom_cmp(f.k, LOOM_EQ, loom_reduce_max(f.k, res, 0), f.z), 1);
    loom_else(f.k, br, 1, &res);
    loom_if_end(f.k, br, 1, &res);
    expect_errors(f.k, L, "type mismatch", 1);
}

Test(verify, cascade_into_the_body_of_a_broken_loop)
{
    /* The loop's bound is LOOM_NONE from an earlier mistake, so loom_for_begin fails; ops in
     * its body that use values from outside the loop must not add messages. */
    fx f = mk();
    int L = __LINE__; loom_val bad = loom_add(f.k, f.z, f.vx);
    loom_val hi = loom_reduce_sum(f.k, loom_cast(f.k, bad, LOOM_I32), 0);
    loom_region_op loop = loom_for_begin(f.k, f.z, hi, loom_const_i(f.k, LOOM_I32, 1), 0, NULL);
    loom_store(f.k, f.o, &f.z, loom_neg(f.k, f.vx), LOOM_NONE);
    loom_for_end(f.k, loop, 0, NULL);
    expect_errors(f.k, L, "op 'add'", 1);
}

Test(verify, none_passed_first_is_reported)
{
    fx f = mk();
    int L = __LINE__; loom_add(f.k, LOOM_NONE, f.vx);
    expect_error(f.k, L, "operand 0 is LOOM_NONE");
    f = mk();
    L = __LINE__; loom_load(f.k, LOOM_NONE, &f.z, LOOM_SHAPE1(4), LOOM_NONE, 0);
    expect_error(f.k, L, "the tensor is LOOM_NONE");
}

Test(verify, a_handle_of_no_value_is_reported)
{
    fx f = mk();
    int L = __LINE__; loom_neg(f.k, (loom_val)100000);
    expect_error(f.k, L, "is not a value of kernel 'bad'");
}

Test(verify, independent_mistakes_are_all_reported)
{
    fx f = mk();
    int L1 = __LINE__; loom_add(f.k, f.vx, f.vi);
    int L2 = __LINE__; loom_store(f.k, f.y, &f.z, f.vy, LOOM_NONE);
    int L3 = __LINE__; loom_for_begin(f.k, f.z, f.s, loom_const_i(f.k, LOOM_I32, 1), 0, NULL);
    cr_assert_eq(loom_verify(f.k), LOOM_ERR_VERIFY);
    const char *e = loom_kernel_errors(f.k);
    cr_expect(strstr(e, t_loc(__FILE__, L1)) && strstr(e, t_loc(__FILE__, L2)), "%s", e);
    expect_errors(f.k, L3, "never ended", 3);
}

/* ================================================================ kernels and arguments */

Test(verify, argument_mistakes)
{
    const char *w[] = {"declare every argument first", "is declared twice", "must be i32, i64 or f32",
                       "tensor rank 0", "it must be positive", "access must be"};
    for (int c = 0; c < 6; c++) {
        fx f = mk();
        loom_kernel *k = c == 0 ? f.k : loom_kernel_create("args", 4);
        if (c)
            loom_kernel_destroy(f.k);
        int L = 0;
        switch (c) {
        case 0: L = __LINE__; loom_arg_scalar(k, "late", LOOM_I32); break;
        case 1: loom_arg_scalar(k, "a", LOOM_I32); L = __LINE__; loom_arg_scalar(k, "a", LOOM_F32); break;
        case 2: L = __LINE__; loom_arg_scalar(k, "h", LOOM_F16); break;
        case 3: L = __LINE__; loom_arg_tensor(k, "t", LOOM_F32, LOOM_SCALAR, LOOM_IN); break;
        case 4: L = __LINE__; loom_arg_tensor(k, "t", LOOM_F32, LOOM_SHAPE2(3, 0), LOOM_IN); break;
        default: L = __LINE__; loom_arg_tensor(k, "t", LOOM_F32, LOOM_SHAPE1(3), (loom_access)0); break;
        }
        expect_error(k, L, w[c]);
    }
}

Test(verify, bad_num_warps)
{
    loom_kernel *k = loom_kernel_create("w", 0);
    cr_assert_eq(loom_verify(k), LOOM_ERR_VERIFY);
    cr_expect(strstr(loom_kernel_errors(k), "num_warps is 0"), "%s", loom_kernel_errors(k));
    loom_kernel_destroy(k);
}

Test(verify, a_good_kernel_has_no_errors)
{
    fx f = mk();
    loom_store(f.k, f.o, &f.z, loom_add(f.k, f.vx, f.vx), LOOM_NONE);
    cr_expect_eq(loom_verify(f.k), LOOM_OK, "%s", loom_kernel_errors(f.k));
    cr_expect_str_eq(loom_kernel_errors(f.k), "");
    cr_expect_eq(loom_kernel_num_errors(f.k), 0);
    loom_kernel_destroy(f.k);
}

/* ================================================================ launch refusals */

/* out[8] = x[8] * s: the kernel the launch tests misuse. */
static loom_kernel *scale_kernel(void)
{
    loom_kernel *k = loom_kernel_create("scale", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(8), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE1(8), LOOM_OUT);
    loom_val s = loom_arg_scalar(k, "s", LOOM_F32);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_store(k, o, &z, loom_mul(k, loom_load(k, x, &z, LOOM_SHAPE1(8), LOOM_NONE, 0), s), LOOM_NONE);
    return k;
}

typedef struct launch_fx {
    loom_runtime *rt;
    loom_buffer *x, *out, *small;
    loom_kernel *k;
} launch_fx;

static launch_fx launch_mk(void)
{
    launch_fx f;
    f.rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(f.rt);
    f.x = loom_buffer_create(f.rt, 8 * 4);
    f.out = loom_buffer_create(f.rt, 8 * 4);
    f.small = loom_buffer_create(f.rt, 7 * 4);
    f.k = scale_kernel();
    cr_assert(f.x && f.out && f.small);
    return f;
}

static void launch_free(launch_fx *f)
{
    loom_buffer_destroy(f->x);
    loom_buffer_destroy(f->out);
    loom_buffer_destroy(f->small);
    loom_kernel_destroy(f->k);
    loom_runtime_destroy(f->rt);
}

static void expect_refused(launch_fx *f, const loom_arg *args, int nargs, const int *grid, const char *what)
{
    static const int one[3] = {1, 1, 1};
    loom_status st = loom_launch(f->rt, f->k, grid ? grid : one, args, nargs);
    cr_expect_eq(st, LOOM_ERR_INVALID, "want LOOM_ERR_INVALID for '%s', got %s", what, loom_status_name(st));
    cr_expect(strstr(loom_runtime_error(f->rt), what), "message should contain '%s': %s", what,
              loom_runtime_error(f->rt));
}

Test(launch, good_launch_works)
{
    launch_fx f = launch_mk();
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, o[8];
    loom_buffer_upload(f.x, x, sizeof x);
    loom_arg args[] = {LOOM_ARG_BUF(f.x), LOOM_ARG_BUF(f.out), LOOM_ARG_F32(0.5f)};
    cr_assert_eq(loom_launch(f.rt, f.k, (int[3]){1, 1, 1}, args, 3), LOOM_OK, "%s", loom_runtime_error(f.rt));
    loom_buffer_download(f.out, o, sizeof o);
    for (int i = 0; i < 8; i++)
        cr_expect_eq(o[i], x[i] * 0.5f);
    launch_free(&f);
}

Test(launch, too_small_buffer_names_the_argument)
{
    launch_fx f = launch_mk();
    loom_arg a1[] = {LOOM_ARG_BUF(f.small), LOOM_ARG_BUF(f.out), LOOM_ARG_F32(1)};
    expect_refused(&f, a1, 3, NULL, "argument 0 ('x') needs 32 bytes");
    loom_arg a2[] = {LOOM_ARG_BUF(f.x), LOOM_ARG_BUF(f.small), LOOM_ARG_F32(1)};
    expect_refused(&f, a2, 3, NULL, "argument 1 ('out') needs 32 bytes");
    launch_free(&f);
}

Test(launch, wrong_argument_count)
{
    launch_fx f = launch_mk();
    loom_arg args[] = {LOOM_ARG_BUF(f.x), LOOM_ARG_BUF(f.out), LOOM_ARG_F32(1), LOOM_ARG_F32(1)};
    expect_refused(&f, args, 2, NULL, "2 arguments given, the kernel takes 3");
    expect_refused(&f, args, 4, NULL, "4 arguments given, the kernel takes 3");
    expect_refused(&f, NULL, 3, NULL, "args is NULL");
    launch_free(&f);
}

Test(launch, scalar_and_buffer_mixups)
{
    launch_fx f = launch_mk();
    loom_arg a1[] = {LOOM_ARG_BUF(f.x), LOOM_ARG_BUF(f.out), LOOM_ARG_BUF(f.x)};
    expect_refused(&f, a1, 3, NULL, "argument 2 ('s') is a scalar but a buffer was given");
    loom_arg a2[] = {LOOM_ARG_F32(1), LOOM_ARG_BUF(f.out), LOOM_ARG_F32(1)};
    expect_refused(&f, a2, 3, NULL, "argument 0 ('x') is a tensor but no buffer was given");
    launch_free(&f);
}

Test(launch, buffer_of_another_runtime)
{
    launch_fx f = launch_mk();
    loom_runtime *other = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_buffer *b = loom_buffer_create(other, 64);
    loom_arg args[] = {LOOM_ARG_BUF(b), LOOM_ARG_BUF(f.out), LOOM_ARG_F32(1)};
    expect_refused(&f, args, 3, NULL, "argument 0 ('x') is a buffer of another runtime");
    loom_buffer_destroy(b);
    loom_runtime_destroy(other);
    launch_free(&f);
}

Test(launch, bad_grid)
{
    launch_fx f = launch_mk();
    loom_arg args[] = {LOOM_ARG_BUF(f.x), LOOM_ARG_BUF(f.out), LOOM_ARG_F32(1)};
    expect_refused(&f, args, 3, (int[3]){0, 1, 1}, "grid[0] is 0");
    expect_refused(&f, args, 3, (int[3]){1, 1, 70000}, "grid[2] is 70000");
    launch_free(&f);
}

Test(launch, kernel_with_errors_is_refused_without_running)
{
    /* each broken kernel: a bad op, an unended loop, an unended if, a store to an input */
    for (int c = 0; c < 4; c++) {
        loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
        loom_kernel *k = loom_kernel_create("broken", 4);
        loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(8), LOOM_IN);
        loom_val z = loom_const_i(k, LOOM_I32, 0);
        loom_val v = loom_load(k, x, &z, LOOM_SHAPE1(8), LOOM_NONE, 0);
        int L = __LINE__;
        switch (c) {
        case 0: L = __LINE__; loom_store(k, x, &z, loom_add(k, v, z), LOOM_NONE); break;
        case 1: L = __LINE__; loom_for_begin(k, z, z, z, 1, &v); break;
        case 2: L = __LINE__; loom_if_begin(k, loom_cmp(k, LOOM_EQ, z, z), 0); break;
        default: L = __LINE__; loom_store(k, x, &z, v, LOOM_NONE); break;
        }
        loom_buffer *b = loom_buffer_create(rt, 32);
        loom_arg args[] = {LOOM_ARG_BUF(b)};
        loom_status st = loom_launch(rt, k, (int[3]){1, 1, 1}, args, 1);
        cr_expect_eq(st, LOOM_ERR_VERIFY, "case %d: %s", c, loom_status_name(st));
        cr_expect(strstr(loom_runtime_error(rt), "kernel 'broken' failed verification"), "%s", loom_runtime_error(rt));
        cr_expect(strstr(loom_runtime_error(rt), t_loc(__FILE__, L)), "case %d names line %d: %s", c, L,
                  loom_runtime_error(rt));
        /* a second launch gives the same answer (nothing was half-run) */
        cr_expect_eq(loom_launch(rt, k, (int[3]){1, 1, 1}, args, 1), LOOM_ERR_VERIFY);
        loom_buffer_destroy(b);
        loom_kernel_destroy(k);
        loom_runtime_destroy(rt);
    }
}

Test(launch, null_arguments_do_not_crash)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_expect_eq(loom_launch(NULL, NULL, NULL, NULL, 0), LOOM_ERR_INVALID);
    cr_expect_eq(loom_launch(rt, NULL, (int[3]){1, 1, 1}, NULL, 0), LOOM_ERR_INVALID);
    loom_kernel *k = scale_kernel();
    cr_expect_eq(loom_launch(rt, k, NULL, NULL, 0), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "grid is NULL"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_verify(NULL), LOOM_ERR_INVALID);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}
