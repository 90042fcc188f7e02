/*
 * builder.c -- the DSL: one function per builder call of include/loom.h.
 *
 * Every call follows the same three steps: check the operand handles (begin), set the
 * op's attributes, and run its type rule (finish).  A failing rule has already recorded
 * an error naming the caller's line; the op is then removed and the call returns
 * LOOM_NONE.  A LOOM_NONE operand that stems from an earlier error is passed on
 * silently, so one mistake gives one message, not a cascade.
 */
#include "ir.h"

#include <math.h>
#include <string.h>

/* Is value v visible from block b: defined in b or in a block enclosing it? */
bool ir_visible(loom_kernel *k, uint32_t v, uint32_t b);
bool ir_visible(loom_kernel *k, uint32_t v, uint32_t b)
{
    uint32_t def = k->vals[v].block;
    while (b) {
        if (b == def)
            return true;
        uint32_t parent = k->blocks[b].parent;
        b = parent ? k->ops[parent].block : 0;
    }
    return false;
}

/* A region op's handle: its op index (0: none). */
static loom_region_op region(uint32_t o) { return (loom_region_op){o}; }

static uint32_t cur_block(loom_kernel *k) { return k->nopen ? k->open[k->nopen - 1] : 0; }

/* Check operand handles (the API's, ir.h: made plain indices here); create the op.  0
 * when an operand is bad. */
static uint32_t begin(loom_kernel *k, loom_src at, ir_opkind kind, const loom_val *handles, int n)
{
    if (!k)
        return 0;
    const char *name = ir_opdescs[kind].name;
    uint32_t opnd[64];
    if (n > 64) {
        ir_error(k, at, name, "internal: %d operands", n);
        return 0;
    }
    /* inside the placeholder body of a loop or if whose header failed: that error is
     * reported already, and nothing built here can run */
    if (k->nopen > 1 && ir_blk(k, cur_block(k))->parent == 0)
        return 0;
    for (int i = 0; i < n; i++) {
        if (handles[i] == 0) {
            if (k->ndiags == 0 && !k->oom)
                ir_error(k, at, name, "operand %d is LOOM_NONE (no value)", i);
            return 0;
        }
        if (!(opnd[i] = ir_unhandle(k, handles[i]))) {
            ir_error(k, at, name, "operand %d (handle 0x%08x) is not a value of kernel '%s'%s", i, handles[i],
                     k->name, ir_handle_foreign(k, handles[i]) ? ": it is a handle of another kernel" : "");
            return 0;
        }
        if (!ir_visible(k, opnd[i], cur_block(k))) {
            ir_error(k, at, name,
                     "operand %d (%%%u) is used outside its scope: it was defined inside a loop "
                     "or if body that has ended (use the region's results instead)",
                     i, opnd[i]);
            return 0;
        }
    }
    if (k->nopen == 0 || ir_blk(k, cur_block(k))->closed) {
        ir_error(k, at, name, "no open block to add the op to");
        return 0;
    }
    return ir_op_new(k, at, kind, opnd, n);
}

static loom_val finish(loom_kernel *k, uint32_t o)
{
    if (!o)
        return LOOM_NONE;
    ir_type out[4];
    int nout = 0;
    if (!ir_rule(k, o, out, &nout, 4)) {
        ir_op_unlink(k, o);
        return LOOM_NONE;
    }
    loom_val first = LOOM_NONE;
    for (int i = 0; i < nout; i++) {
        loom_val v = ir_handle(k, ir_op_add_result(k, o, out[i]));
        if (i == 0)
            first = v;
    }
    return nout ? first : ir_handle(k, o); /* ops without results return their op id (non-zero) */
}

static loom_val build0(loom_kernel *k, loom_src at, ir_opkind kind, int64_t i0, int64_t i1)
{
    uint32_t o = begin(k, at, kind, NULL, 0);
    if (!o)
        return LOOM_NONE;
    ir_opp(k, o)->iattr[0] = i0;
    ir_opp(k, o)->iattr[1] = i1;
    return finish(k, o);
}

static loom_val build1(loom_kernel *k, loom_src at, ir_opkind kind, loom_val a, int64_t i0)
{
    uint32_t o = begin(k, at, kind, &a, 1);
    if (!o)
        return LOOM_NONE;
    ir_opp(k, o)->iattr[0] = i0;
    return finish(k, o);
}

static loom_val build2(loom_kernel *k, loom_src at, ir_opkind kind, loom_val a, loom_val b,
                       int64_t i0)
{
    loom_val ops[2] = {a, b};
    uint32_t o = begin(k, at, kind, ops, 2);
    if (!o)
        return LOOM_NONE;
    ir_opp(k, o)->iattr[0] = i0;
    return finish(k, o);
}

static loom_val build3(loom_kernel *k, loom_src at, ir_opkind kind, loom_val a, loom_val b,
                       loom_val c)
{
    loom_val ops[3] = {a, b, c};
    return finish(k, begin(k, at, kind, ops, 3));
}

static loom_val build_shape(loom_kernel *k, loom_src at, ir_opkind kind, loom_val a, loom_shape s)
{
    uint32_t o = begin(k, at, kind, &a, 1);
    if (!o)
        return LOOM_NONE;
    ir_opp(k, o)->shape = s;
    return finish(k, o);
}

/* ---------------------------------------------------------------- grid, constants */

loom_val loom_program_id_at(loom_src at, loom_kernel *k, int axis)
{
    return build0(k, at, IR_PROGRAM_ID, axis, 0);
}

loom_val loom_num_programs_at(loom_src at, loom_kernel *k, int axis)
{
    return build0(k, at, IR_NUM_PROGRAMS, axis, 0);
}

loom_val loom_const_f_at(loom_src at, loom_kernel *k, loom_dtype dt, double v)
{
    uint32_t o = begin(k, at, IR_CONST, NULL, 0);
    if (!o)
        return LOOM_NONE;
    ir_op *op = ir_opp(k, o);
    op->iattr[0] = dt;
    if (ir_dtype_is_float(dt)) {
        op->fattr = ir_round_to_d(dt, v);
    } else if (isnan(v)) {
        ir_error(k, at, "const", "NaN has no %s value", loom_dtype_name(dt));
        ir_op_unlink(k, o);
        return LOOM_NONE;
    } else {
        op->iattr[1] = ir_wrap_int(dt, (int64_t)v);
        op->fattr = (double)op->iattr[1];
    }
    return finish(k, o);
}

loom_val loom_const_i_at(loom_src at, loom_kernel *k, loom_dtype dt, int64_t v)
{
    uint32_t o = begin(k, at, IR_CONST, NULL, 0);
    if (!o)
        return LOOM_NONE;
    ir_op *op = ir_opp(k, o);
    op->iattr[0] = dt;
    if (ir_dtype_is_float(dt)) {
        op->fattr = dt == LOOM_F32 ? (double)(float)v : ir_round_to_d(dt, (double)v);
    } else {
        op->iattr[1] = ir_wrap_int(dt, v);
        op->fattr = (double)op->iattr[1];
    }
    return finish(k, o);
}

loom_val loom_arange_at(loom_src at, loom_kernel *k, int64_t start, int64_t end)
{
    return build0(k, at, IR_ARANGE, start, end);
}

/* ---------------------------------------------------------------- shapes */

loom_val loom_splat_at(loom_src at, loom_kernel *k, loom_val v, loom_shape s)
{
    return build_shape(k, at, IR_SPLAT, v, s);
}

loom_val loom_broadcast_at(loom_src at, loom_kernel *k, loom_val v, loom_shape s)
{
    return build_shape(k, at, IR_BROADCAST, v, s);
}

loom_val loom_expand_dims_at(loom_src at, loom_kernel *k, loom_val v, int axis)
{
    return build1(k, at, IR_EXPAND_DIMS, v, axis);
}

loom_val loom_trans_at(loom_src at, loom_kernel *k, loom_val v) { return build1(k, at, IR_TRANS, v, 0); }

/* An op of one operand that takes a part of it: dim, start and size its attributes. */
static loom_val build_part(loom_kernel *k, loom_src at, ir_opkind kind, loom_val v, int dim, int64_t start,
                           int64_t size)
{
    uint32_t o = begin(k, at, kind, &v, 1);
    if (!o)
        return LOOM_NONE;
    ir_op *op = ir_opp(k, o);
    op->iattr[0] = dim;
    op->iattr[1] = start;
    op->iattr[2] = size;
    return finish(k, o);
}

loom_val loom_slice_at(loom_src at, loom_kernel *k, loom_val v, int dim, int64_t start, int64_t size)
{
    return build_part(k, at, IR_SLICE, v, dim, start, size);
}

/* ---------------------------------------------------------------- elementwise */

#define BINARY(fn, KIND)                                                      \
    loom_val fn(loom_src at, loom_kernel *k, loom_val a, loom_val b)          \
    {                                                                         \
        return build2(k, at, KIND, a, b, 0);                                  \
    }
BINARY(loom_add_at, IR_ADD)
BINARY(loom_sub_at, IR_SUB)
BINARY(loom_mul_at, IR_MUL)
BINARY(loom_div_at, IR_DIV)
BINARY(loom_rem_at, IR_REM)
BINARY(loom_min_at, IR_MIN)
BINARY(loom_max_at, IR_MAX)
BINARY(loom_and_at, IR_AND)
BINARY(loom_or_at, IR_OR)
BINARY(loom_xor_at, IR_XOR)
BINARY(loom_shl_at, IR_SHL)
BINARY(loom_shr_at, IR_SHR)
BINARY(loom_div_fast_at, IR_DIV_FAST)
#undef BINARY

#define UNARY(fn, KIND)                                          \
    loom_val fn(loom_src at, loom_kernel *k, loom_val a)         \
    {                                                            \
        return build1(k, at, KIND, a, 0);                        \
    }
UNARY(loom_neg_at, IR_NEG)
UNARY(loom_abs_at, IR_ABS)
UNARY(loom_exp2_at, IR_EXP2)
UNARY(loom_log2_at, IR_LOG2)
UNARY(loom_rsqrt_at, IR_RSQRT)
UNARY(loom_exp_at, IR_EXP)
UNARY(loom_log_at, IR_LOG)
UNARY(loom_tanh_at, IR_TANH)
UNARY(loom_erf_at, IR_ERF)
UNARY(loom_sigmoid_at, IR_SIGMOID)
UNARY(loom_sqrt_at, IR_SQRT)
UNARY(loom_rcp_at, IR_RCP)
UNARY(loom_not_at, IR_NOT)
#undef UNARY

loom_val loom_fma_at(loom_src at, loom_kernel *k, loom_val a, loom_val b, loom_val c)
{
    return build3(k, at, IR_FMA, a, b, c);
}

loom_val loom_cmp_at(loom_src at, loom_kernel *k, loom_cmp_pred p, loom_val a, loom_val b)
{
    return build2(k, at, IR_CMP, a, b, p);
}

loom_val loom_select_at(loom_src at, loom_kernel *k, loom_val c, loom_val a, loom_val b)
{
    return build3(k, at, IR_SELECT, c, a, b);
}

loom_val loom_cast_at(loom_src at, loom_kernel *k, loom_val v, loom_dtype dt)
{
    return build1(k, at, IR_CAST, v, dt);
}

loom_val loom_reduce_sum_at(loom_src at, loom_kernel *k, loom_val v, int axis)
{
    return build1(k, at, IR_REDUCE_SUM, v, axis);
}

loom_val loom_reduce_max_at(loom_src at, loom_kernel *k, loom_val v, int axis)
{
    return build1(k, at, IR_REDUCE_MAX, v, axis);
}

loom_val loom_reduce_min_at(loom_src at, loom_kernel *k, loom_val v, int axis)
{
    return build1(k, at, IR_REDUCE_MIN, v, axis);
}

loom_val loom_dot_at(loom_src at, loom_kernel *k, loom_val a, loom_val b, loom_val acc)
{
    return build3(k, at, IR_DOT, a, b, acc);
}

/* ---------------------------------------------------------------- memory */

/* The tensor's rank, or -1 (with an error) when t is not a tensor argument. */
static int tensor_rank(loom_kernel *k, loom_src at, const char *opname, loom_val t)
{
    if (!k)
        return -1;
    if (t == 0) {
        if (k->ndiags == 0)
            ir_error(k, at, opname, "the tensor is LOOM_NONE (no value)");
        return -1;
    }
    uint32_t v = ir_unhandle(k, t);
    if (!v || k->vals[v].type.kind != IR_T_TENSOR) {
        ir_error(k, at, opname, "operand 0 is not a global tensor argument%s",
                 ir_handle_foreign(k, t) ? " of this kernel: it is a handle of another kernel" : "");
        return -1;
    }
    return k->vals[v].type.shape.rank;
}

/* A load's fill value, as the tensor's dtype holds it. */
static double fill_value(loom_kernel *k, loom_val t, double fill)
{
    loom_dtype dt = (loom_dtype)k->vals[ir_unhandle(k, t)].type.dtype;
    return ir_dtype_is_float(dt) ? ir_round_to_d(dt, fill) : (double)ir_wrap_int(dt, (int64_t)fill);
}

static bool offsets_given(loom_kernel *k, loom_src at, const char *opname, const loom_val *offs)
{
    if (!offs) {
        ir_error(k, at, opname, "offsets is NULL; pass one offset per tensor dim");
        return false;
    }
    return true;
}

loom_val loom_load_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs,
                      loom_shape shape, loom_val mask, double fill)
{
    int r = tensor_rank(k, at, "load", t);
    if (r < 0 || !offsets_given(k, at, "load", offs))
        return LOOM_NONE;
    loom_val ops[2 + LOOM_MAX_RANK];
    int n = 0;
    ops[n++] = t;
    for (int i = 0; i < r; i++)
        ops[n++] = offs[i];
    if (mask)
        ops[n++] = mask;
    uint32_t o = begin(k, at, IR_LOAD, ops, n);
    if (!o)
        return LOOM_NONE;
    ir_op *op = ir_opp(k, o);
    op->shape = shape;
    op->iattr[0] = mask ? 1 : 0;
    op->fattr = fill_value(k, t, fill);
    return finish(k, o);
}

void loom_store_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs, loom_val v,
                   loom_val mask)
{
    int r = tensor_rank(k, at, "store", t);
    if (r < 0 || !offsets_given(k, at, "store", offs))
        return;
    loom_val ops[3 + LOOM_MAX_RANK];
    int n = 0;
    ops[n++] = t;
    for (int i = 0; i < r; i++)
        ops[n++] = offs[i];
    ops[n++] = v;
    if (mask)
        ops[n++] = mask;
    uint32_t o = begin(k, at, IR_STORE, ops, n);
    if (!o)
        return;
    ir_opp(k, o)->iattr[0] = mask ? 1 : 0;
    finish(k, o);
}

loom_val loom_load_scalar_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs)
{
    int r = tensor_rank(k, at, "load_scalar", t);
    if (r < 0 || !offsets_given(k, at, "load_scalar", offs))
        return LOOM_NONE;
    loom_val ops[1 + LOOM_MAX_RANK];
    ops[0] = t;
    for (int i = 0; i < r; i++)
        ops[1 + i] = offs[i];
    return finish(k, begin(k, at, IR_LOAD_SCALAR, ops, 1 + r));
}

loom_val loom_load_rows_at(loom_src at, loom_kernel *k, loom_val t, loom_val rows,
                           const loom_val *offs, loom_shape shape, double fill)
{
    int r = tensor_rank(k, at, "load_rows", t);
    if (r < 0 || !offsets_given(k, at, "load_rows", offs))
        return LOOM_NONE;
    loom_val ops[2 + LOOM_MAX_RANK];
    ops[0] = t;
    ops[1] = rows;
    /* offs[0] is ignored by the semantics; the row index takes its place.  It is kept
     * as an operand so every memory op has one offset per dim. */
    ops[2] = offs[0] ? offs[0] : (r > 1 ? offs[1] : 0);
    for (int i = 1; i < r; i++)
        ops[2 + i] = offs[i];
    if (!ops[2])
        ops[2] = loom_const_i_at(at, k, LOOM_I32, 0);
    uint32_t o = begin(k, at, IR_LOAD_ROWS, ops, 2 + r);
    if (!o)
        return LOOM_NONE;
    ir_op *op = ir_opp(k, o);
    op->shape = shape;
    op->fattr = fill_value(k, t, fill);
    return finish(k, o);
}

/* ---------------------------------------------------------------- control flow */

static bool push_block(loom_kernel *k, loom_src at, uint32_t b)
{
    if (k->nopen == (int)(sizeof k->open / sizeof k->open[0])) {
        ir_error(k, at, NULL, "control flow nested deeper than %d levels",
                 (int)(sizeof k->open / sizeof k->open[0]));
        return false;
    }
    k->open[k->nopen++] = b;
    return true;
}

loom_region_op loom_for_begin_at(loom_src at, loom_kernel *k, loom_val lo, loom_val hi,
                                 loom_val step, int n, const loom_val *init)
{
    if (!k)
        return LOOM_NO_REGION;
    if (n < 0 || n > 60 || (n > 0 && !init)) {
        ir_error(k, at, "for", "bad carried-value count %d (0..60, with init values)", n);
        return LOOM_NO_REGION;
    }
    loom_val ops[64];
    ops[0] = lo;
    ops[1] = hi;
    ops[2] = step;
    for (int i = 0; i < n; i++)
        ops[3 + i] = init[i];
    uint32_t o = begin(k, at, IR_FOR, ops, 3 + n);
    if (!o) {
        /* keep the builder's block stack balanced: open a detached body so that the
         * matching loom_for_end pops it */
        uint32_t b = ir_block_new(k, 0);
        push_block(k, at, b);
        return LOOM_NO_REGION;
    }
    ir_type out[64];
    int nout = 0;
    bool ok = ir_rule(k, o, out, &nout, 64);
    if (ok)
        for (int i = 0; i < nout; i++)
            ir_op_add_result(k, o, out[i]);
    uint32_t body = ir_block_new(k, o);
    ir_opp(k, o)->reg[0] = body;
    ir_opp(k, o)->nreg = 1;
    ir_block_add_arg(k, body, (ir_type){.kind = IR_T_TILE, .dtype = LOOM_I32});
    for (int i = 0; i < nout; i++)
        ir_block_add_arg(k, body, out[i]);
    push_block(k, at, body);
    if (!ok) {
        ir_opp(k, o)->iattr[1] = 1; /* broken: its results stay LOOM_NONE */
        return LOOM_NO_REGION;
    }
    return region(o);
}

loom_val loom_for_iv(loom_kernel *k, loom_region_op loop)
{
    uint32_t o = loop.id;
    if (!k || !o || o >= k->nops || k->ops[o].kind != IR_FOR)
        return LOOM_NONE;
    return ir_handle(k, k->blocks[k->ops[o].reg[0]].args[0]);
}

loom_val loom_for_arg(loom_kernel *k, loom_region_op loop, int i)
{
    uint32_t o = loop.id;
    if (!k || !o || o >= k->nops || k->ops[o].kind != IR_FOR)
        return LOOM_NONE;
    ir_block *b = &k->blocks[k->ops[o].reg[0]];
    if (i < 0 || (uint32_t)i + 1 >= b->nargs)
        return LOOM_NONE;
    return ir_handle(k, b->args[1 + i]);
}

/* Build a yield closing the innermost block, which must be region `reg` of op o. */
static void close_region(loom_kernel *k, loom_src at, uint32_t o, int reg, int n, const loom_val *ys,
                         const char *what)
{
    if (k->nopen <= 1) {
        ir_error(k, at, what, "there is no open loop or if to end");
        return;
    }
    uint32_t b = k->open[k->nopen - 1];
    if (o && (o >= k->nops || k->ops[o].reg[reg] != b)) {
        ir_error(k, at, what, "does not match the innermost open region (regions must end in the order they began)");
        return;
    }
    if (n < 0 || n > 60 || (n > 0 && !ys)) {
        ir_error(k, at, what, "bad yield count %d", n);
        n = 0;
    }
    if (o) {
        loom_val ops[64];
        for (int i = 0; i < n; i++)
            ops[i] = ys[i];
        uint32_t y = begin(k, at, IR_YIELD, ops, n);
        if (y) {
            ir_type out[1];
            int nout;
            if (!ir_rule(k, y, out, &nout, 1))
                ir_op_unlink(k, y);
        }
    }
    k->blocks[b].closed = true;
    k->nopen--;
    k->gen++;
}

void loom_for_end_at(loom_src at, loom_kernel *k, loom_region_op loop, int n, const loom_val *ys)
{
    if (!k)
        return;
    uint32_t o = loop.id;
    if (o && (o >= k->nops || k->ops[o].kind != IR_FOR)) {
        ir_error(k, at, "for", "loom_for_end: handle %u is not a for loop", o);
        return;
    }
    close_region(k, at, o, 0, n, ys, "for");
}

loom_val loom_for_result(loom_kernel *k, loom_region_op loop, int i)
{
    uint32_t o = loop.id;
    if (!k || !o || o >= k->nops || k->ops[o].kind != IR_FOR)
        return LOOM_NONE;
    if (i < 0 || i >= k->ops[o].nres)
        return LOOM_NONE;
    return ir_handle(k, k->ops[o].res[i]);
}

loom_region_op loom_if_begin_at(loom_src at, loom_kernel *k, loom_val cond, int n_results)
{
    if (!k)
        return LOOM_NO_REGION;
    uint32_t o = begin(k, at, IR_IF, &cond, 1);
    if (!o) {
        push_block(k, at, ir_block_new(k, 0));
        return LOOM_NO_REGION;
    }
    ir_opp(k, o)->iattr[0] = n_results;
    ir_type out[1];
    int nout;
    bool ok = ir_rule(k, o, out, &nout, 1);
    uint32_t then = ir_block_new(k, o);
    ir_opp(k, o)->reg[0] = then;
    ir_opp(k, o)->nreg = 2;
    push_block(k, at, then);
    if (!ok || n_results < 0 || n_results > 60) {
        if (ok)
            ir_error(k, at, "if", "bad result count %d", n_results);
        return LOOM_NO_REGION;
    }
    return region(o);
}

void loom_else_at(loom_src at, loom_kernel *k, loom_region_op ifop, int n, const loom_val *ys)
{
    if (!k)
        return;
    uint32_t o = ifop.id;
    if (o && (o >= k->nops || k->ops[o].kind != IR_IF || k->ops[o].reg[1])) {
        ir_error(k, at, "if", "loom_else: handle %u is not an if whose then-branch is open", o);
        return;
    }
    if (o) {
        /* the then-branch's yield fixes the result types */
        ir_op *op = ir_opp(k, o);
        if (n != op->iattr[0]) {
            ir_error(k, at, "if", "the then-branch yields %d values but the if declares %lld results", n,
                     (long long)op->iattr[0]);
            op->iattr[1] = 1; /* broken: loom_if_end stays quiet */
            o = 0;
        } else {
            bool good = true;
            for (int i = 0; i < n; i++)
                if (!ys || !ir_unhandle(k, ys[i]))
                    good = false;
            if (good && op->nres == 0)
                for (int i = 0; i < n; i++)
                    ir_op_add_result(k, o, k->vals[ir_unhandle(k, ys[i])].type);
            else if (!good) {
                if (k->ndiags == 0)
                    ir_error(k, at, "if", "the then-branch yields LOOM_NONE");
                op->iattr[1] = 1;
                o = 0;
            }
        }
    }
    close_region(k, at, o, 0, n, ys, "if");
    if (o) {
        uint32_t els = ir_block_new(k, o);
        ir_opp(k, o)->reg[1] = els;
        push_block(k, at, els);
    } else {
        push_block(k, at, ir_block_new(k, 0));
    }
}

void loom_if_end_at(loom_src at, loom_kernel *k, loom_region_op ifop, int n, const loom_val *ys)
{
    if (!k)
        return;
    uint32_t o = ifop.id;
    if (o && (o >= k->nops || k->ops[o].kind != IR_IF)) {
        ir_error(k, at, "if", "loom_if_end: handle %u is not an if", o);
        return;
    }
    if (o && k->ops[o].iattr[1]) { /* broken in loom_else: already reported */
        close_region(k, at, 0, 1, 0, NULL, "if");
        return;
    }
    if (o && !k->ops[o].reg[1]) {
        /* no else: only allowed without results; an empty else is made */
        if (k->ops[o].iattr[0] != 0) {
            ir_error(k, at, "if", "an if with results needs loom_else");
            close_region(k, at, 0, 0, 0, NULL, "if");
            return;
        }
        loom_else_at(at, k, ifop, 0, NULL);
    }
    close_region(k, at, o, 1, n, ys, "if");
}

loom_val loom_if_result(loom_kernel *k, loom_region_op ifop, int i)
{
    uint32_t o = ifop.id;
    if (!k || !o || o >= k->nops || k->ops[o].kind != IR_IF)
        return LOOM_NONE;
    if (i < 0 || i >= k->ops[o].nres)
        return LOOM_NONE;
    return ir_handle(k, k->ops[o].res[i]);
}

/* ---------------------------------------------------------------- Hopper machinery */

loom_val loom_smem_alloc_at(loom_src at, loom_kernel *k, loom_dtype dt, loom_shape shape, int slots,
                            loom_swizzle swizzle)
{
    uint32_t o = begin(k, at, IR_SMEM_ALLOC, NULL, 0);
    if (!o)
        return LOOM_NONE;
    ir_op *op = ir_opp(k, o);
    op->iattr[0] = slots;
    op->iattr[1] = swizzle;
    op->iattr[2] = dt;
    op->shape = shape;
    return finish(k, o);
}

loom_val loom_smem_slot_at(loom_src at, loom_kernel *k, loom_val ring, loom_val i)
{
    return build2(k, at, IR_SMEM_SLOT, ring, i, 0);
}

loom_val loom_smem_trans_at(loom_src at, loom_kernel *k, loom_val view)
{
    return build1(k, at, IR_SMEM_TRANS, view, 0);
}

loom_val loom_smem_part_at(loom_src at, loom_kernel *k, loom_val view, int dim, int64_t start, int64_t size)
{
    return build_part(k, at, IR_SMEM_PART, view, dim, start, size);
}

loom_val loom_smem_load_at(loom_src at, loom_kernel *k, loom_val view)
{
    return build1(k, at, IR_SMEM_LOAD, view, 0);
}

void loom_smem_store_at(loom_src at, loom_kernel *k, loom_val view, loom_val v)
{
    build2(k, at, IR_SMEM_STORE, view, v, 0);
}

loom_val loom_mbar_alloc_at(loom_src at, loom_kernel *k, int count, int arrivals)
{
    return build0(k, at, IR_MBAR_ALLOC, count, arrivals);
}

void loom_mbar_expect_at(loom_src at, loom_kernel *k, loom_val bars, loom_val i, int64_t bytes)
{
    build2(k, at, IR_MBAR_EXPECT, bars, i, bytes);
}

void loom_mbar_arrive_at(loom_src at, loom_kernel *k, loom_val bars, loom_val i)
{
    build2(k, at, IR_MBAR_ARRIVE, bars, i, 0);
}

void loom_mbar_arrive_cluster_at(loom_src at, loom_kernel *k, loom_val bars, loom_val i)
{
    build2(k, at, IR_MBAR_ARRIVE_CLUSTER, bars, i, 0);
}

void loom_smem_store_cluster_at(loom_src at, loom_kernel *k, loom_val view, loom_val v, loom_val bars,
                                loom_val i)
{
    /* a scalar (a claimed tile index) is splatted to the view's shape */
    uint32_t vw = k ? ir_unhandle(k, view) : 0, vv = k ? ir_unhandle(k, v) : 0;
    if (vw && vv && k->vals[vw].type.kind == IR_T_SMEM && k->vals[vv].type.kind == IR_T_TILE &&
        k->vals[vv].type.shape.rank == 0)
        v = loom_splat_at(at, k, v, k->vals[vw].type.shape);
    loom_val ops[4] = {view, v, bars, i};
    finish(k, begin(k, at, IR_SMEM_STORE_CLUSTER, ops, 4));
}

void loom_mbar_wait_at(loom_src at, loom_kernel *k, loom_val bars, loom_val i, loom_val phase)
{
    build3(k, at, IR_MBAR_WAIT, bars, i, phase);
}

static loom_val ring_common(loom_src at, loom_kernel *k, loom_val iter, int n, bool phase)
{
    if (!k)
        return LOOM_NONE;
    if (n < 1) {
        ir_error(k, at, phase ? "ring_phase" : "ring_slot", "a ring has at least one slot, not %d", n);
        return LOOM_NONE;
    }
    loom_val nn = loom_const_i_at(at, k, LOOM_I32, n);
    if (!phase)
        return loom_rem_at(at, k, iter, nn);
    return loom_and_at(at, k, loom_div_at(at, k, iter, nn), loom_const_i_at(at, k, LOOM_I32, 1));
}

loom_val loom_ring_slot_at(loom_src at, loom_kernel *k, loom_val iter, int n)
{
    return ring_common(at, k, iter, n, false);
}

loom_val loom_ring_phase_at(loom_src at, loom_kernel *k, loom_val iter, int n)
{
    return ring_common(at, k, iter, n, true);
}

void loom_named_barrier_arrive_at(loom_src at, loom_kernel *k, int id, int threads)
{
    build0(k, at, IR_NAMED_BARRIER_ARRIVE, id, threads);
}

void loom_named_barrier_at(loom_src at, loom_kernel *k, int id, int threads)
{
    build0(k, at, IR_NAMED_BARRIER, id, threads);
}

void loom_fence_async_at(loom_src at, loom_kernel *k) { build0(k, at, IR_FENCE_ASYNC, 0, 0); }

static void tma_build(loom_src at, loom_kernel *k, ir_opkind kind, loom_val t, const loom_val *offs,
                      loom_val view, loom_val bars, loom_val i)
{
    const char *name = ir_opdescs[kind].name;
    int r = tensor_rank(k, at, name, t);
    if (r < 0 || !offsets_given(k, at, name, offs))
        return;
    loom_val ops[LOOM_MAX_RANK + 4];
    int n = 0;
    ops[n++] = t;
    for (int d = 0; d < r; d++)
        ops[n++] = offs[d];
    ops[n++] = view;
    if (kind != IR_TMA_STORE) {
        ops[n++] = bars;
        ops[n++] = i;
    }
    finish(k, begin(k, at, kind, ops, n));
}

void loom_tma_load_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs, loom_val view,
                      loom_val bars, loom_val i)
{
    tma_build(at, k, IR_TMA_LOAD, t, offs, view, bars, i);
}

void loom_tma_load_multicast_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs, loom_val view,
                                loom_val bars, loom_val i)
{
    tma_build(at, k, IR_TMA_LOAD_MULTICAST, t, offs, view, bars, i);
}

void loom_tma_store_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs, loom_val view)
{
    tma_build(at, k, IR_TMA_STORE, t, offs, view, 0, 0);
}

void loom_tma_store_wait_at(loom_src at, loom_kernel *k, int pending)
{
    build0(k, at, IR_TMA_STORE_WAIT, pending, 0);
}

loom_val loom_wgmma_at(loom_src at, loom_kernel *k, loom_val a, loom_val b, loom_val acc)
{
    return build3(k, at, IR_WGMMA, a, b, acc);
}

void loom_wgmma_commit_at(loom_src at, loom_kernel *k) { build0(k, at, IR_WGMMA_COMMIT, 0, 0); }

loom_region_op loom_wgmma_wait_at(loom_src at, loom_kernel *k, int pending, int n, const loom_val *accs)
{
    if (!k)
        return LOOM_NO_REGION;
    if (n < 0 || n > 16 || (n > 0 && !accs)) {
        ir_error(k, at, "wgmma_wait", "takes 0 to 16 accumulators, not %d", n);
        return LOOM_NO_REGION;
    }
    uint32_t o = begin(k, at, IR_WGMMA_WAIT, accs, n);
    if (!o)
        return LOOM_NO_REGION;
    ir_opp(k, o)->iattr[0] = pending;
    ir_type out[16];
    int nout = 0;
    if (!ir_rule(k, o, out, &nout, 16)) {
        ir_op_unlink(k, o);
        return LOOM_NO_REGION;
    }
    for (int i = 0; i < nout; i++)
        ir_op_add_result(k, o, out[i]);
    return region(o);
}

loom_val loom_wgmma_result(loom_kernel *k, loom_region_op w, int i)
{
    uint32_t wait = w.id;
    if (!k || !wait || wait >= k->nops || k->ops[wait].kind != IR_WGMMA_WAIT)
        return LOOM_NONE;
    if (i < 0 || i >= k->ops[wait].nres)
        return LOOM_NONE;
    return ir_handle(k, k->ops[wait].res[i]);
}

loom_region_op loom_task_begin_at(loom_src at, loom_kernel *k, int warps, int regs, int replicas)
{
    if (!k)
        return LOOM_NO_REGION;
    uint32_t o = begin(k, at, IR_TASK, NULL, 0);
    if (o) {
        ir_op *op = ir_opp(k, o);
        op->iattr[0] = warps;
        op->iattr[1] = regs;
        op->iattr[2] = replicas;
        ir_type out[1];
        int nout;
        if (!ir_rule(k, o, out, &nout, 1))
            op->iattr[3] = 1; /* broken: reported; its body is kept but never checked again */
    }
    uint32_t body = ir_block_new(k, o);
    if (o) {
        ir_opp(k, o)->reg[0] = body;
        ir_opp(k, o)->nreg = 1;
    }
    push_block(k, at, body);
    return region(o);
}

void loom_task_end_at(loom_src at, loom_kernel *k, loom_region_op t)
{
    if (!k)
        return;
    uint32_t task = t.id;
    if (task && (task >= k->nops || k->ops[task].kind != IR_TASK)) {
        ir_error(k, at, "task", "loom_task_end: handle %u is not a task", task);
        return;
    }
    close_region(k, at, task, 0, 0, NULL, "task");
}

loom_val loom_task_replica_at(loom_src at, loom_kernel *k)
{
    return build0(k, at, IR_TASK_REPLICA, 0, 0);
}

/* flags, offsets (one per dim), value: flag_add and flag_wait share the operand layout */
static void flag_op(loom_kernel *k, loom_src at, ir_opkind kind, const char *name, loom_val flags,
                    const loom_val *offs, loom_val v)
{
    int r = tensor_rank(k, at, name, flags);
    if (r < 0 || !offsets_given(k, at, name, offs))
        return;
    loom_val ops[2 + LOOM_MAX_RANK];
    ops[0] = flags;
    for (int i = 0; i < r; i++)
        ops[1 + i] = offs[i];
    ops[1 + r] = v;
    finish(k, begin(k, at, kind, ops, 2 + r));
}

void loom_flag_add_at(loom_src at, loom_kernel *k, loom_val flags, const loom_val *offs, loom_val v)
{
    flag_op(k, at, IR_FLAG_ADD, "flag_add", flags, offs, v);
}

void loom_flag_wait_at(loom_src at, loom_kernel *k, loom_val flags, const loom_val *offs, loom_val target)
{
    flag_op(k, at, IR_FLAG_WAIT, "flag_wait", flags, offs, target);
}

/* tensor, offsets (one per dim), value: the flag ops' layout, with a result */
loom_val loom_atomic_add_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs, loom_val v)
{
    int r = tensor_rank(k, at, "atomic_add", t);
    if (r < 0 || !offsets_given(k, at, "atomic_add", offs))
        return LOOM_NONE;
    loom_val ops[2 + LOOM_MAX_RANK];
    ops[0] = t;
    for (int i = 0; i < r; i++)
        ops[1 + i] = offs[i];
    ops[1 + r] = v;
    return finish(k, begin(k, at, IR_ATOMIC_ADD, ops, 2 + r));
}

/* ---------------------------------------------------------------- clusters */

void loom_kernel_set_cluster_at(loom_src at, loom_kernel *k, int n)
{
    if (!k)
        return;
    if (n != 1 && n != 2 && n != 4 && n != 8) {
        ir_error(k, at, NULL, "cluster size %d: it must be 1, 2, 4 or 8 (the portable cluster sizes)", n);
        return;
    }
    k->cluster = n;
    k->gen++;
}

int loom_kernel_cluster(const loom_kernel *k) { return k && k->cluster > 1 ? k->cluster : 1; }

/* ---------------------------------------------------------------- automatic warp specialization */

void loom_kernel_set_autows_at(loom_src at, loom_kernel *k, int consumers, int stages, int pingpong)
{
    if (!k)
        return;
    if (consumers < 1 || consumers > 2) {
        ir_error(k, at, NULL, "autows: %d consumer warp groups; it must be 1 or 2", consumers);
        return;
    }
    if (stages < 1 || stages > 8) {
        ir_error(k, at, NULL, "autows: %d stages; the ring has 1 to 8 slots", stages);
        return;
    }
    if (pingpong != 0 && pingpong != 1) {
        ir_error(k, at, NULL, "autows: pingpong is %d; it must be 0 or 1", pingpong);
        return;
    }
    if (pingpong && consumers != 2) {
        ir_error(k, at, NULL, "autows: ping-pong takes turns between two consumer warp groups (consumers=2), "
                              "not %d", consumers);
        return;
    }
    k->ws_consumers = consumers;
    k->ws_stages = stages;
    k->ws_pingpong = pingpong;
    k->ws_at = at;
    k->num_warps = 4 * (1 + consumers); /* a producer warp group and the consumers */
    k->gen++;
}

loom_val loom_cluster_rank_at(loom_src at, loom_kernel *k) { return build0(k, at, IR_CLUSTER_RANK, 0, 0); }
