/*
 * ew.h -- the scalar semantics of the elementwise ops, written once (dsl/ew.c).
 *
 * ew_eval computes one element of an elementwise op (the ops whose layout column in
 * dsl/ops.h is EW) from one element of each operand.  The interpreter (dsl/interp.c)
 * runs every elementwise op through it, element by element, and the constant folder
 * (codegen/fold.c) evaluates the IRF_FOLD ops on constants with it, so the two cannot
 * disagree.  The GPU lowering (codegen/lower_math.c) is the other implementation; where
 * it only approximates the value computed here, docs/dsl.md ("Where the GPU differs
 * from the interpreter") gives the bound, and tests/test_math.c checks it on a GPU.
 */
#ifndef LOOM_EW_H
#define LOOM_EW_H

#include "ir.h"

/* One element as the interpreter holds it: a float of any width in f (already rounded
 * to its dtype), an integer or i1 in i (already wrapped to its width). */
typedef struct ew_val {
    float f;
    int64_t i;
} ew_val;

typedef enum ew_status {
    EW_OK,
    EW_DIV_BY_ZERO,      /* integer div or rem by 0: the interpreter reports it, fold leaves it */
    EW_NOT_ELEMENTWISE,  /* an internal error: the op is not one ew_eval knows */
} ew_status;

/* One element of op `kind`: x[] holds its operands' elements, `attr` the op's iattr[0]
 * (cmp's predicate), `in` the dtype of operand 0 (operand 1 for select), `out` the
 * result's dtype.  *r gets the result, rounded or wrapped to `out`. */
ew_status ew_eval(ir_opkind kind, int64_t attr, loom_dtype in, loom_dtype out, const ew_val *x, ew_val *r);

#endif
