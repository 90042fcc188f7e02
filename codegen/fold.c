/*
 * fold.c -- constant folding and algebraic simplification on the loom IR.
 *
 * How it works.  One walk over the kernel in program order (regions included).  An op
 * the table marks IRF_FOLD (dsl/ops.h: the elementwise ops whose GPU result is exact;
 * not exp2, exp, tanh and the others the GPU computes approximately, whose folded value
 * would differ from the GPU's) whose operands are all scalar constants is evaluated here
 * by the interpreter's own scalar semantics (ew_eval in dsl/ew.c: integers wrap,
 * f16/bf16 round to nearest even after each op, integer division truncates, INT_MIN / -1
 * wraps) and rewritten in place into a const op: the op keeps its result value, so every
 * use still refers to it, and the
 * printed IR and the interpreter see an ordinary const.  Division by a zero constant
 * is left alone (the interpreter reports it at run time).
 *
 * Algebraic identities replace an op's uses by one of its operands when that operand
 * has exactly the op's type (a scalar x * tile-of-ones is not x):
 *     x * 1, 1 * x, x / 1                 (integers and floats)
 *     x + 0, 0 + x, x - 0                 (integers; floats only for x - (+0) and
 *                                          x + (-0), because -0 + +0 is +0)
 *     x | 0, x & -1 and their mirrors      (integers, i1)
 * and x % 1, x % -1 (scalar integers) become the constant 0.  The replaced op stays in
 * its block, unused: it is pure, the lowering emits nothing LLVM keeps for it.  Uses
 * are rewritten only where the operand is visible, which always holds because an
 * op's operands dominate its uses.
 */
#include "cg.h"
#include "ew.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void make_const(ir_op *op, loom_dtype dt, ir_const r)
{
    op->kind = IR_CONST;
    op->nopnd = 0;
    op->iattr[0] = dt;
    if (ir_dtype_is_float(dt)) {
        op->iattr[1] = 0;
        op->fattr = ir_round_to(dt, (float)r.f);
    } else {
        op->iattr[1] = ir_wrap_int(dt, r.i);
        op->fattr = (double)op->iattr[1];
    }
}

/* Evaluate an IRF_FOLD op on constants with the interpreter's scalar semantics
 * (dsl/ew.c); false if it must not be folded. */
static bool eval(const ir_op *op, loom_dtype in, loom_dtype out, const ir_const *x, ir_const *r)
{
    ew_val v[3] = {{0, 0}, {0, 0}, {0, 0}}, z;
    for (int j = 0; j < op->nopnd && j < 3; j++) {
        v[j].f = (float)x[j].f; /* a float constant is already rounded to its dtype */
        v[j].i = x[j].i;
    }
    if (ew_eval((ir_opkind)op->kind, op->iattr[0], in, out, v, &z) != EW_OK)
        return false; /* a zero integer divisor: the interpreter reports it at run time */
    r->isf = ir_dtype_is_float(out);
    r->f = z.f;
    r->i = z.i;
    return true;
}

static void replace_uses(loom_kernel *k, uint32_t from, uint32_t to)
{
    for (uint32_t o = 1; o < k->nops; o++) {
        ir_op *op = &k->ops[o];
        if (op->kind == IR_INVALID)
            continue;
        for (int i = 0; i < op->nopnd; i++)
            if (op->opnd[i] == from)
                op->opnd[i] = to;
    }
}

static bool kis(const ir_const *c, double f, int64_t i, bool neg_zero)
{
    if (c->isf)
        return c->f == f && (!neg_zero || signbit(c->f)) && (neg_zero || f != 0 || !signbit(c->f));
    return c->i == i;
}

/* Algebraic identities: returns the value that replaces the op's result, or 0. */
static uint32_t identity(loom_kernel *k, const ir_op *op)
{
    if (op->nopnd != 2)
        return 0;
    uint32_t a = op->opnd[0], b = op->opnd[1], r = op->res[0];
    const ir_type *rt = &k->vals[r].type;
    bool f = ir_dtype_is_float((loom_dtype)rt->dtype);
    ir_const ca = {0}, cb = {0}; /* (read only where is_const filled them; GCC -O3 cannot tell) */
    bool ka = ir_scalar_const(k, a, &ca), kb = ir_scalar_const(k, b, &cb);
    bool a_ok = ir_type_eq(&k->vals[a].type, rt), b_ok = ir_type_eq(&k->vals[b].type, rt);
    switch (op->kind) {
    case IR_MUL:
        if (kb && a_ok && kis(&cb, 1, 1, false))
            return a;
        if (ka && b_ok && kis(&ca, 1, 1, false))
            return b;
        break;
    case IR_DIV:
        if (kb && a_ok && kis(&cb, 1, 1, false))
            return a;
        break;
    case IR_ADD:
        if (kb && a_ok && (f ? kis(&cb, 0, 0, true) : cb.i == 0))
            return a;
        if (ka && b_ok && (f ? kis(&ca, 0, 0, true) : ca.i == 0))
            return b;
        break;
    case IR_SUB:
        if (kb && a_ok && (f ? kis(&cb, 0, 0, false) : cb.i == 0))
            return a;
        break;
    case IR_OR:
        if (kb && a_ok && cb.i == 0)
            return a;
        if (ka && b_ok && ca.i == 0)
            return b;
        break;
    case IR_AND: {
        int64_t ones = rt->dtype == LOOM_I1 ? 1 : -1;
        if (kb && a_ok && cb.i == ones)
            return a;
        if (ka && b_ok && ca.i == ones)
            return b;
        break;
    }
    default:
        break;
    }
    return 0;
}

static void fold_block(cg_ctx *cg, uint32_t b)
{
    loom_kernel *k = cg->k;
    ir_block *blk = &k->blocks[b];
    for (uint32_t i = 0; i < blk->nops; i++) {
        uint32_t o = blk->ops[i];
        ir_op *op = &k->ops[o];
        for (int r = 0; r < op->nreg; r++)
            if (op->reg[r])
                fold_block(cg, op->reg[r]);
        if (!(ir_opdescs[op->kind].flags & IRF_FOLD) || op->nres != 1)
            continue;
        uint32_t rv = op->res[0];
        loom_dtype out = (loom_dtype)k->vals[rv].type.dtype;
        loom_dtype in = (loom_dtype)k->vals[op->opnd[op->kind == IR_SELECT ? 1 : 0]].type.dtype;
        ir_const x[3];
        bool all = op->nopnd <= 3;
        for (int j = 0; all && j < op->nopnd; j++)
            all = ir_scalar_const(k, op->opnd[j], &x[j]);
        ir_const r = {0};
        if (all && k->vals[rv].type.shape.rank == 0 && eval(op, in, out, x, &r)) {
            make_const(op, out, r);
            continue;
        }
        if (op->kind == IR_REM && k->vals[rv].type.shape.rank == 0 && ir_scalar_const(k, op->opnd[1], &x[1]) &&
            (x[1].i == 1 || x[1].i == -1)) {
            make_const(op, out, (ir_const){false, 0, 0});
            continue;
        }
        uint32_t with = identity(k, op);
        if (with)
            replace_uses(k, rv, with);
    }
}

loom_status cg_fold(cg_ctx *cg)
{
    if (util_env_on("LOOM_NO_FOLD"))
        return LOOM_OK;
    fold_block(cg, 1);
    cg->k->gen++; /* the IR changed in place: cached verify/print answers are stale */
    return cg->st;
}
