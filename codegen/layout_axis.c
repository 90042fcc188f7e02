/*
 * layout_axis.c -- what the lowering may assume of a value's elements: the divisibility
 * analysis (cg_divisor) and the axis analysis of tiles (cg_axis_info).
 *
 * The divisibility analysis (cg_divisor) tracks the largest power of two known to
 * divide an integer scalar; the lowering uses it to prove 16-byte alignment of vector
 * accesses.  Its counterpart for tiles (cg_axis_info, after Triton's axis analysis)
 * tells, per dim, over how many aligned elements a value is constant, over how many it
 * counts up by one, and what divides the first of those: arange is contiguous, a splat
 * or a broadcast dim is constant, contiguous + constant stays contiguous, and
 * `contiguous < bound` is constant over blocks of g when the block starts and the bound
 * are multiples of g.  That proves an explicit mask such as `offs + arange < n` (n a
 * multiple of the vector width) or a mask on the rows only is the same for every
 * element of a 16-byte vector, so masked accesses stay vectorized.
 */
#include "layout.h"

#include <stdlib.h>

/* ---------------------------------------------------------------- divisibility */

static int64_t ctz_div(int64_t c)
{
    if (c == 0)
        return INT64_C(1) << 30;
    int64_t d = 1;
    while (!(c & d) && d < (INT64_C(1) << 30))
        d <<= 1;
    return d;
}

static int64_t dmin(int64_t a, int64_t b) { return a < b ? a : b; }

int64_t cg_divisor(cg_ctx *cg, uint32_t v)
{
    loom_kernel *k = cg->k;
    if (cg->div[v])
        return cg->div[v];
    cg->div[v] = 1; /* cycles (loop arguments) see 1 */
    const ir_value *val = &k->vals[v];
    int64_t d = 1;
    if (val->kind == IR_V_RESULT) {
        const ir_op *op = &k->ops[val->def];
        switch (op->kind) {
        case IR_CONST:
            d = ir_dtype_is_int((loom_dtype)op->iattr[0]) ? ctz_div(op->iattr[1]) : 1;
            break;
        case IR_MUL: {
            int64_t p = cg_divisor(cg, op->opnd[0]) * cg_divisor(cg, op->opnd[1]);
            d = dmin(p, INT64_C(1) << 30);
            break;
        }
        case IR_ADD:
        case IR_SUB:
        case IR_MIN:
        case IR_MAX:
            d = dmin(cg_divisor(cg, op->opnd[0]), cg_divisor(cg, op->opnd[1]));
            break;
        case IR_NEG:
        case IR_ABS:
            d = cg_divisor(cg, op->opnd[0]);
            break;
        case IR_SELECT:
            d = dmin(cg_divisor(cg, op->opnd[1]), cg_divisor(cg, op->opnd[2]));
            break;
        case IR_CAST:
            d = ir_dtype_is_int((loom_dtype)vty(cg, op->opnd[0])->dtype) ? cg_divisor(cg, op->opnd[0]) : 1;
            if ((loom_dtype)op->iattr[0] == LOOM_I32)
                d = dmin(d, INT64_C(1) << 30);
            break;
        default:
            d = 1;
        }
    } else if (val->kind == IR_V_ARG && k->args[val->def].is_dim) {
        d = ctz_div(k->args[val->def].dim_multiple); /* the dim's hint */
    } else if (val->kind == IR_V_BLOCKARG) {
        const ir_block *b = &k->blocks[val->def];
        const ir_op *p = &k->ops[b->parent];
        if (p->kind == IR_FOR && val->index == 0)
            d = dmin(cg_divisor(cg, p->opnd[0]), cg_divisor(cg, p->opnd[2]));
    }
    cg->div[v] = d;
    return d;
}

/* ---------------------------------------------------------------- axis info */

/* The padded length of dim d of v: the largest block any fact can be about. */
static int64_t axis_cap(cg_ctx *cg, uint32_t v, int d)
{
    return INT64_C(1) << cg_lg(vty(cg, v)->shape.dim[d]);
}

/* The largest power of two dividing every element of v (a scalar's divisor for rank 0). */
static int64_t elem_div(cg_ctx *cg, uint32_t v)
{
    const ir_type *t = vty(cg, v);
    if (!ir_dtype_is_int((loom_dtype)t->dtype))
        return 1;
    if (t->shape.rank == 0)
        return cg_divisor(cg, v);
    int64_t d = 1;
    for (int i = 0; i < t->shape.rank; i++) {
        cg_axis a = cg_axis_info(cg, v, i);
        if (a.contig > 1)
            return 1; /* neighbours differ by one */
        if (a.div > d)
            d = a.div;
    }
    return d;
}

/* Operand x of an op whose result is v, along the result's dim d: a scalar operand is
 * constant everywhere, with its own divisor. */
static cg_axis operand_axis(cg_ctx *cg, uint32_t x, uint32_t v, int d)
{
    if (vty(cg, x)->shape.rank == 0)
        return (cg_axis){axis_cap(cg, v, d), 1, elem_div(cg, x)};
    return cg_axis_info(cg, x, d);
}

/* The divisor of the element at each multiple of g along the dim (g a power of two). */
static int64_t div_at(cg_axis a, int64_t g)
{
    return a.contig > 1 && g < a.contig ? dmin(a.div, g) : a.div;
}

/* x < y (or x >= y) for x contiguous and y constant over aligned blocks of g: the same
 * answer over each block when x's first element and y are multiples of g. */
static int64_t cmp_block(cg_axis x, cg_axis y)
{
    int64_t g = dmin(x.contig, y.cnst);
    while (g > 1 && (div_at(x, g) % g || div_at(y, g) % g))
        g /= 2;
    return g;
}

static cg_axis axis_of(cg_ctx *cg, uint32_t v, int d)
{
    loom_kernel *k = cg->k;
    cg_axis none = {1, 1, 1};
    const ir_value *val = &k->vals[v];
    const ir_type *t = vty(cg, v);
    int64_t cap = axis_cap(cg, v, d);
    if (cap == 1) /* one element: constant, and as divisible as every element is */
        return none;
    if (val->kind != IR_V_RESULT)
        return none;
    const ir_op *op = &k->ops[val->def];
    bool is_int = ir_dtype_is_int((loom_dtype)t->dtype);
    switch (op->kind) {
    case IR_SPLAT:
        return (cg_axis){cap, 1, elem_div(cg, op->opnd[0])};
    case IR_ARANGE:
        return (cg_axis){1, cap, ctz_div(op->iattr[0])};
    case IR_BROADCAST: {
        uint32_t s = op->opnd[0];
        const ir_type *st = vty(cg, s);
        int sd = d - (t->shape.rank - st->shape.rank);
        if (sd >= 0 && st->shape.dim[sd] == t->shape.dim[d])
            return cg_axis_info(cg, s, sd);
        return (cg_axis){cap, 1, elem_div(cg, s)};
    }
    case IR_EXPAND_DIMS: {
        int a = (int)op->iattr[0];
        return cg_axis_info(cg, op->opnd[0], d < a ? d : d - 1); /* d == a has cap 1 */
    }
    case IR_TRANS:
        return cg_axis_info(cg, op->opnd[0], 1 - d);
    case IR_SLICE: { /* an aligned part: blocks no longer than it stay aligned in it */
        cg_axis s = cg_axis_info(cg, op->opnd[0], d);
        if (d != op->iattr[0])
            return s;
        bool in = s.contig <= cap;
        return (cg_axis){dmin(s.cnst, cap), in ? s.contig : 1, in ? s.div : 1};
    }
    default:
        break;
    }
    if (cg_lay_class[op->kind] == LAY_REDUCE) {
        /* combining values constant along d stays constant along d */
        int a = (int)op->iattr[0];
        cg_axis s = cg_axis_info(cg, op->opnd[0], d < a ? d : d + 1);
        return (cg_axis){s.cnst, 1, 1};
    }
    if (!is_ew(op->kind))
        return none;
    /* elementwise: constant inputs give a constant output */
    cg_axis x[3];
    int64_t cnst = cap;
    for (int i = 0; i < op->nopnd && i < 3; i++) {
        x[i] = operand_axis(cg, op->opnd[i], v, d);
        cnst = dmin(cnst, x[i].cnst);
    }
    cg_axis r = {cnst, 1, 1};
    switch (op->kind) {
    case IR_ADD:
    case IR_SUB:
        if (!is_int)
            break;
        /* contiguous + constant stays contiguous (x - constant too) */
        for (int i = 0; i < 2; i++) {
            if (op->kind == IR_SUB && i == 1)
                break;
            int64_t g = dmin(x[i].contig, x[1 - i].cnst);
            if (g > 1 && g > r.contig) {
                r.contig = g;
                r.div = dmin(div_at(x[i], g), div_at(x[1 - i], g));
            }
        }
        if (r.contig == 1)
            r.div = dmin(div_at(x[0], 1), div_at(x[1], 1));
        break;
    case IR_MUL:
        if (is_int)
            r.div = dmin(div_at(x[0], 1) * div_at(x[1], 1), INT64_C(1) << 30);
        break;
    case IR_NEG:
        if (is_int)
            r.div = div_at(x[0], 1);
        break;
    case IR_CAST:
        if (is_int && ir_dtype_is_int((loom_dtype)vty(cg, op->opnd[0])->dtype))
            r = x[0]; /* i32 <-> i64: a block starting at a multiple of g never wraps */
        break;
    case IR_CMP: {
        if (!ir_dtype_is_int((loom_dtype)vty(cg, op->opnd[0])->dtype))
            break;
        int p = (int)op->iattr[0];
        int64_t g = 1;
        if (p == LOOM_LT || p == LOOM_GE) /* contiguous x vs constant y */
            g = cmp_block(x[0], x[1]);
        else if (p == LOOM_GT || p == LOOM_LE) /* y > x is x < y; y <= x is x >= y */
            g = cmp_block(x[1], x[0]);
        if (g > r.cnst)
            r.cnst = g;
        break;
    }
    default:
        break;
    }
    return r;
}

cg_axis cg_axis_info(cg_ctx *cg, uint32_t v, int d)
{
    cg_axis none = {1, 1, 1};
    if (d < 0 || d >= LOOM_MAX_RANK || d >= vty(cg, v)->shape.rank)
        return none;
    if (!cg->axis) {
        cg->axis = calloc((size_t)cg->k->nvals * LOOM_MAX_RANK, sizeof *cg->axis);
        if (!cg->axis)
            return none; /* nothing known: every access stays correct, only narrower */
    }
    cg_axis *m = &cg->axis[(size_t)v * LOOM_MAX_RANK + d];
    if (m->div)
        return *m;
    *m = none; /* the analysis follows operands only, but be safe against cycles */
    cg_axis r = axis_of(cg, v, d);
    m = &cg->axis[(size_t)v * LOOM_MAX_RANK + d];
    *m = r;
    return r;
}
