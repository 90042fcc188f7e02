/*
 * test_optable.c -- every op of dsl/ops.h has at least one test, and the table's
 * columns agree with each other.
 *
 * Op tests register what they cover with OP_COVERED(name) (tests/testutil.h); this file
 * owns the registry and walks the op table, so adding an op to ops.h without a test
 * fails here, naming the op.  The compiler checks each column's values (a misspelled
 * rule, semantics group, layout class or print form does not build); the tests below
 * check that the columns agree with each other: regions, folding, attribute names.
 */
#include "ir.h"
#include "testutil.h"

const char *loom_test_covered_ops[LOOM_TEST_MAX_COVERED];
int loom_test_num_covered;

static const struct {
    const char *name, *layout, *attrs;
    int nreg;
    unsigned flags;
} rows[] = {
#define LOOM_OP(E, n, nop, nreg, rule, fl, sem, lay, pr, attrs) {#n, #lay, attrs, nreg, fl},
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
    int nops = (int)(sizeof rows / sizeof rows[0]);
    cr_assert_eq(nops, IR_OP_COUNT - 1, "the op list and the op enum disagree");
    char missing[1024] = "";
    int nmissing = 0;
    for (int i = 0; i < nops; i++)
        if (!covered(rows[i].name)) {
            nmissing++;
            strncat(missing, " ", sizeof missing - strlen(missing) - 1);
            strncat(missing, rows[i].name, sizeof missing - strlen(missing) - 1);
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
        for (size_t j = 0; j < sizeof rows / sizeof rows[0]; j++)
            found |= strcmp(rows[j].name, loom_test_covered_ops[i]) == 0;
        cr_assert(found, "OP_COVERED(%s) names no op of dsl/ops.h", loom_test_covered_ops[i]);
    }
}

Test(optable, names_match_descs)
{
    for (int i = 1; i < IR_OP_COUNT; i++)
        cr_assert_str_eq(ir_opdescs[i].name, rows[i - 1].name);
}

/* An op owns regions, is flagged IRF_REGION and takes its layouts from its blocks, or
 * none of the three. */
Test(optable, region_columns_agree)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        bool nreg = rows[i].nreg > 0, flag = (rows[i].flags & IRF_REGION) != 0;
        bool lay = strcmp(rows[i].layout, "REGION") == 0;
        cr_expect(nreg == flag && flag == lay, "%s: nreg %d, IRF_REGION %d, layout %s disagree",
                  rows[i].name, rows[i].nreg, flag, rows[i].layout);
    }
}

/* codegen/fold.c evaluates IRF_FOLD ops on scalar constants: elementwise ops only. */
Test(optable, folded_ops_are_elementwise)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].flags & IRF_FOLD)
            cr_expect_str_eq(rows[i].layout, "EW", "%s is IRF_FOLD but its layout class is %s",
                             rows[i].name, rows[i].layout);
}

/* The attrs column names iattr[0], iattr[1], ...: words of [a-z] separated by one space,
 * no more than an op has. */
Test(optable, attribute_names_fit)
{
    const ir_op none = {0};
    int max = (int)(sizeof none.iattr / sizeof none.iattr[0]);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *a = rows[i].attrs;
        int words = 0;
        for (const char *c = a; *c; c++) {
            cr_expect((*c >= 'a' && *c <= 'z') || (*c == ' ' && c > a && c[1] && c[1] != ' '),
                      "%s: attrs \"%s\" is not words separated by one space", rows[i].name, a);
            words += *c != ' ' && (c == a || c[-1] == ' ');
        }
        cr_expect_leq(words, max, "%s names %d attributes; an op has %d", rows[i].name, words, max);
    }
}
