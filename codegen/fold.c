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
 *
 * One rewrite adds ops: a loop that carries an FP8 tile its body yields as a cast of a
 * wider float carries that float, the cast moved to the carried value's uses
 * (carry_sources, below).
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

/* Every use of value `from` (but op `skip`'s, 0: none) made a use of `to`. */
static void replace_uses(loom_kernel *k, uint32_t from, uint32_t to, uint32_t skip)
{
    for (uint32_t o = 1; o < k->nops; o++) {
        ir_op *op = &k->ops[o];
        if (op->kind == IR_INVALID || o == skip)
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
            replace_uses(k, rv, with, 0);
    }
}

/* ---------------------------------------------------------------- FP8 carried as its source */

/* A new cast of v to dt at position pos of block b (built at `at`): its result, or 0. */
static uint32_t cast_at(loom_kernel *k, uint32_t b, uint32_t pos, uint32_t v, loom_dtype dt, loom_src at)
{
    if (k->nopen == (int)(sizeof k->open / sizeof k->open[0]))
        return 0;
    k->open[k->nopen++] = b;
    uint32_t o = ir_op_new(k, at, IR_CAST, &v, 1); /* appended to b */
    k->nopen--;
    if (!o)
        return 0;
    k->ops[o].iattr[0] = dt;
    ir_type t = k->vals[v].type;
    t.dtype = dt;
    uint32_t r = ir_op_add_result(k, o, t);
    ir_block *blk = &k->blocks[b];
    memmove(&blk->ops[pos + 1], &blk->ops[pos], (blk->nops - 1 - pos) * sizeof(uint32_t));
    blk->ops[pos] = o;
    return r;
}

/* The float value v is a cast of, with v's shape, or 0. */
static uint32_t cast_source(const loom_kernel *k, uint32_t v)
{
    const ir_value *d = &k->vals[v];
    if (d->kind != IR_V_RESULT || k->ops[d->def].kind != IR_CAST)
        return 0;
    uint32_t x = k->ops[d->def].opnd[0];
    const ir_type *t = &k->vals[x].type;
    return t->kind == IR_T_TILE && ir_dtype_is_float(t->dtype) && !ir_dtype_is_fp8(t->dtype) &&
                   ir_shape_eq(&t->shape, &d->type.shape)
               ? x
               : 0;
}

static uint32_t index_in_block(const loom_kernel *k, uint32_t o)
{
    const ir_block *blk = &k->blocks[k->ops[o].block];
    uint32_t i = 0;
    while (i < blk->nops && blk->ops[i] != o)
        i++;
    return i;
}

/* A loop that carries an FP8 tile its body yields as a cast of a wider float x carries x
 * instead, and the cast moves to the carried value's uses (a cast at the top of the body
 * and one after the loop): the same values, since a cast gives the same code wherever it
 * runs.  loom holds an FP8 value in an f32 register (codegen/lower_math.c), so the carried
 * tile takes the same registers either way; carried as FP8, each iteration took each
 * element to its code and back and its use made the codes again (an attention's P cast
 * where it is made and used by the next iteration's P V: 1.19x faster carried as f32,
 * bench/RESULTS.md session 33).  The loop's init must be a cast too (to any FP8 type): it
 * becomes the float its cast rounds where that is of x's type, else a cast of it to that
 * type (exact: every FP8 value is an f16, bf16 and f32 value, and a cast's NaN is the one
 * code 0x7f, which comes back as it was).  Another init (a loaded tile) is left carried
 * as it is: a NaN of its own sign or payload would come back as 0x7f. */
static void carry_sources(cg_ctx *cg)
{
    loom_kernel *k = cg->k;
    uint32_t nops = k->nops; /* the casts made below are no loops */
    for (uint32_t f = 1; f < nops && cg->st == LOOM_OK; f++) {
        if (k->ops[f].kind != IR_FOR)
            continue;
        uint32_t body = k->ops[f].reg[0];
        for (int j = 0; j < k->ops[f].nres; j++) {
            const ir_block *bb = &k->blocks[body];
            const ir_op *y = bb->nops ? &k->ops[bb->ops[bb->nops - 1]] : NULL;
            uint32_t r = k->ops[f].res[j], a = bb->args[1 + j];
            const ir_type t = k->vals[r].type;
            if (!y || y->kind != IR_YIELD || t.kind != IR_T_TILE || t.shape.rank == 0 || !ir_dtype_is_fp8(t.dtype))
                continue;
            uint32_t yv = y->opnd[j], x = cast_source(k, yv);
            if (!x)
                continue;
            loom_dtype wide = k->vals[x].type.dtype;
            loom_src at = k->ops[k->vals[yv].def].src;
            uint32_t init = k->ops[f].opnd[3 + j], x0 = cast_source(k, init);
            const ir_value *iv = &k->vals[init];
            if (iv->kind != IR_V_RESULT || k->ops[iv->def].kind != IR_CAST)
                continue;
            if (!x0 || k->vals[x0].type.dtype != wide)
                x0 = cast_at(k, k->ops[f].block, index_in_block(k, f), init, wide, at);
            uint32_t ca = x0 ? cast_at(k, body, 0, a, t.dtype, at) : 0;
            uint32_t cr = ca ? cast_at(k, k->ops[f].block, index_in_block(k, f) + 1, r, t.dtype, at) : 0;
            if (!cr) {
                cg_fail(cg, LOOM_ERR_NOMEM, "out of memory");
                return;
            }
            k->ops[f].opnd[3 + j] = x0;
            k->ops[k->blocks[body].ops[k->blocks[body].nops - 1]].opnd[j] = x;
            k->vals[a].type.dtype = wide;
            k->vals[r].type.dtype = wide;
            replace_uses(k, a, ca, k->vals[ca].def);
            replace_uses(k, r, cr, k->vals[cr].def);
        }
    }
}

loom_status cg_fold(cg_ctx *cg)
{
    if (util_env_on("LOOM_NO_FOLD"))
        return LOOM_OK;
    fold_block(cg, 1);
    carry_sources(cg);
    cg->k->gen++; /* the IR changed in place: cached verify/print answers are stale */
    return cg->st;
}
