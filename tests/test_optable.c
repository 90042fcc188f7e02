/*
 * test_optable.c -- every op of dsl/ops.h has at least one test.
 *
 * Op tests register what they cover with OP_COVERED(name) (tests/testutil.h); this file
 * owns the registry and walks the op table, so adding an op to ops.h without a test
 * fails here, naming the op.
 */
#include "ir.h"
#include "testutil.h"

const char *loom_test_covered_ops[LOOM_TEST_MAX_COVERED];
int loom_test_num_covered;

static const char *const all_ops[] = {
#define LOOM_OP(E, n, nop, nreg, rule, fl) #n,
#include "ops.h"
#undef LOOM_OP
};

static int covered(const char *name)
{
    for (int i = 0; i < loom_test_num_covered; i++)
        if (strcmp(loom_test_covered_ops[i], name) == 0)
            return 1;
    return 0;
}

Test(optable, every_op_has_a_test)
{
    int nops = (int)(sizeof all_ops / sizeof all_ops[0]);
    cr_assert_eq(nops, IR_OP_COUNT - 1, "the op list and the op enum disagree");
    char missing[1024] = "";
    int nmissing = 0;
    for (int i = 0; i < nops; i++)
        if (!covered(all_ops[i])) {
            nmissing++;
            strncat(missing, " ", sizeof missing - strlen(missing) - 1);
            strncat(missing, all_ops[i], sizeof missing - strlen(missing) - 1);
        }
    cr_assert_eq(nmissing, 0, "%d op(s) of dsl/ops.h have no test (add one with OP_COVERED):%s",
                 nmissing, missing);
}

Test(optable, registered_names_are_ops)
{
    /* a typo in OP_COVERED(...) would otherwise cover nothing silently */
    cr_assert_gt(loom_test_num_covered, 0);
    for (int i = 0; i < loom_test_num_covered; i++) {
        int found = 0;
        for (size_t j = 0; j < sizeof all_ops / sizeof all_ops[0]; j++)
            found |= strcmp(all_ops[j], loom_test_covered_ops[i]) == 0;
        cr_assert(found, "OP_COVERED(%s) names no op of dsl/ops.h", loom_test_covered_ops[i]);
    }
}

Test(optable, names_match_descs)
{
    for (int i = 1; i < IR_OP_COUNT; i++)
        cr_assert_str_eq(ir_opdescs[i].name, all_ops[i - 1]);
}
