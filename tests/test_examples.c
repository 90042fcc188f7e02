/*
 * test_examples.c -- the examples' kernels at small and awkward shapes on the interpreter.
 *
 * Each example (examples/vector_add.c, row_softmax.c, matmul.c) keeps its kernel builder
 * and its check against plain C in prefixed static functions and guards main() with
 * LOOM_EXAMPLE_NO_MAIN, so the examples are included here as they are and their own
 * checks run: vadd_run, smax_run, mm_run return the number of elements outside the
 * example's documented tolerance.
 */
#define LOOM_EXAMPLE_NO_MAIN
#include "../examples/matmul.c"
#include "../examples/row_softmax.c"
#include "../examples/vector_add.c"

#include "testutil.h"

static loom_runtime *interp(void)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt);
    return rt;
}

Test(examples, vector_add_tails)
{
    loom_runtime *rt = interp();
    /* one element; exactly one block; one past a block; many blocks with a tail */
    int64_t sizes[][2] = {{1, 64}, {64, 64}, {65, 64}, {1000, 128}, {4099, 256}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        cr_expect_eq(vadd_run(rt, sizes[i][0], (int)sizes[i][1]), 0, "vector_add N=%lld block=%lld",
                     (long long)sizes[i][0], (long long)sizes[i][1]);
    loom_runtime_destroy(rt);
}

Test(examples, row_softmax_odd_shapes)
{
    loom_runtime *rt = interp();
    /* rows not a multiple of the row block; N not a power of two; N = 1 (all ones) */
    int64_t shapes[][3] = {{5, 37, 4}, {9, 100, 2}, {1, 1, 4}, {3, 64, 1}, {7, 129, 4}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        double max_rel = -1;
        cr_expect_eq(smax_run(rt, shapes[i][0], shapes[i][1], (int)shapes[i][2], &max_rel), 0,
                     "row_softmax R=%lld N=%lld BR=%lld", (long long)shapes[i][0], (long long)shapes[i][1],
                     (long long)shapes[i][2]);
        cr_expect(max_rel >= 0 && max_rel <= SMAX_RTOL(shapes[i][1]), "max relative error %g", max_rel);
    }
    loom_runtime_destroy(rt);
}

Test(examples, matmul_masked_tails)
{
    loom_runtime *rt = interp();
    struct { int64_t m, n, k; mm_cfg c; } cases[] = {
        {77, 45, 50, {16, 16, 16}}, /* tails in M, N and K */
        {1, 1, 1, {16, 16, 16}},
        {16, 32, 48, {16, 16, 16}}, /* no tails */
        {33, 17, 5, {32, 16, 8}},   /* K smaller than one step */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double max_err = -1;
        cr_expect_eq(mm_run(rt, cases[i].m, cases[i].n, cases[i].k, cases[i].c, &max_err), 0,
                     "matmul %lldx%lldx%lld", (long long)cases[i].m, (long long)cases[i].n, (long long)cases[i].k);
        /* the interpreter sums in the reference's order: bit-exact */
        cr_expect_eq(max_err, 0.0, "matmul %lldx%lldx%lld on the interpreter: error %g", (long long)cases[i].m,
                     (long long)cases[i].n, (long long)cases[i].k, max_err);
    }
    loom_runtime_destroy(rt);
}
