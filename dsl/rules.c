/*
 * rules.c -- the type rule of every op.
 *
 * A rule looks at an op's operands and attributes and either computes its result
 * types or records an error that names the op and the user's source line.  The
 * builder runs the rule when it creates the op (so errors appear at the line that
 * built the op) and the verifier runs it again over the finished kernel (so IR built
 * or changed by other means is checked the same way).  The dispatch table is made
 * from dsl/ops.h: an op without a rule does not link.
 */
#include "ir.h"

#include <string.h>

typedef struct rule_ctx {
    loom_kernel *k;
    uint32_t o;
    ir_op *op;
    const char *name;
    ir_type *out;
    int nout, maxout;
} rule_ctx;

#define FAIL(...)                                                     \
    do {                                                              \
        ir_error(c->k, c->op->src, c->name, __VA_ARGS__);             \
        return false;                                                 \
    } while (0)

static const ir_type *T(rule_ctx *c, int i) { return &c->k->vals[c->op->opnd[i]].type; }

static char *ts(const ir_type *t, char *buf) { return (char *)ir_type_str(t, buf, 64); }

static bool emit(rule_ctx *c, ir_type t)
{
    if (c->nout >= c->maxout)
        return false;
    c->out[c->nout++] = t;
    return true;
}

static ir_type tile(loom_dtype dt, loom_shape s)
{
    return (ir_type){.kind = IR_T_TILE, .dtype = (uint8_t)dt, .shape = s};
}

static bool is_tile(const ir_type *t) { return t->kind == IR_T_TILE; }
static bool is_scalar(const ir_type *t) { return t->kind == IR_T_TILE && t->shape.rank == 0; }

static bool want_nopnd(rule_ctx *c, int n)
{
    if (c->op->nopnd != n)
        FAIL("takes %d operands, got %d", n, c->op->nopnd);
    return true;
}

static bool want_tiles(rule_ctx *c, int from, int to)
{
    char b[64];
    for (int i = from; i < to; i++)
        if (!is_tile(T(c, i)))
            FAIL("operand %d is %s; a register tile or scalar is needed", i, ts(T(c, i), b));
    return true;
}

static bool check_shape(rule_ctx *c, const loom_shape *s, const char *what)
{
    if (s->rank < 0 || s->rank > LOOM_MAX_RANK)
        FAIL("%s rank %d is not between 0 and %d", what, s->rank, LOOM_MAX_RANK);
    for (int i = 0; i < s->rank; i++)
        if (s->dim[i] < 1 || s->dim[i] > (1 << 20))
            FAIL("%s dimension %d is %lld; it must be between 1 and 2^20", what, i,
                 (long long)s->dim[i]);
    if (ir_shape_numel(s) > (1 << 20))
        FAIL("%s has %lld elements; a tile holds at most 2^20", what, (long long)ir_shape_numel(s));
    return true;
}

/* Elementwise operands: one dtype, and one shape up to scalars. */
static bool ew_common(rule_ctx *c, int from, int to, loom_shape *shape)
{
    char b1[64], b2[64];
    *shape = (loom_shape){0, {0}};
    int first = -1;
    for (int i = from; i < to; i++) {
        const ir_type *t = T(c, i);
        if (t->shape.rank == 0)
            continue;
        if (first < 0) {
            *shape = t->shape;
            first = i;
        } else if (!ir_shape_eq(shape, &t->shape)) {
            FAIL("shape mismatch: operand %d is %s but operand %d is %s; use loom_broadcast to "
                 "match shapes",
                 i, ts(t, b1), first, ts(T(c, first), b2));
        }
    }
    return true;
}

static bool same_dtype(rule_ctx *c, int from, int to)
{
    char b1[64], b2[64];
    for (int i = from + 1; i < to; i++)
        if (T(c, i)->dtype != T(c, from)->dtype)
            FAIL("type mismatch: operand %d is %s but operand %d is %s; use loom_cast", from,
                 ts(T(c, from), b1), i, ts(T(c, i), b2));
    return true;
}

/* ---------------------------------------------------------------- rules */

static bool rule_grid(rule_ctx *c)
{
    if (!want_nopnd(c, 0))
        return false;
    if (c->op->iattr[0] < 0 || c->op->iattr[0] > 2)
        FAIL("axis %lld is not 0, 1 or 2", (long long)c->op->iattr[0]);
    return emit(c, tile(LOOM_I32, LOOM_SCALAR));
}

static bool rule_const(rule_ctx *c)
{
    if (!want_nopnd(c, 0))
        return false;
    if (c->op->iattr[0] < 0 || c->op->iattr[0] >= LOOM_DTYPE_COUNT)
        FAIL("unknown dtype %lld", (long long)c->op->iattr[0]);
    return emit(c, tile((loom_dtype)c->op->iattr[0], LOOM_SCALAR));
}

static bool rule_arange(rule_ctx *c)
{
    if (!want_nopnd(c, 0))
        return false;
    int64_t s = c->op->iattr[0], e = c->op->iattr[1];
    if (e <= s)
        FAIL("arange(%lld, %lld) is empty; end must be greater than start", (long long)s,
             (long long)e);
    if (s < INT32_MIN || e - 1 > INT32_MAX)
        FAIL("arange(%lld, %lld) does not fit in i32", (long long)s, (long long)e);
    loom_shape sh = LOOM_SHAPE1(e - s);
    if (!check_shape(c, &sh, "arange"))
        return false;
    return emit(c, tile(LOOM_I32, sh));
}

static bool rule_splat(rule_ctx *c)
{
    char b[64];
    if (!want_nopnd(c, 1) || !want_tiles(c, 0, 1))
        return false;
    if (!is_scalar(T(c, 0)))
        FAIL("operand is %s; splat takes a scalar (use loom_broadcast for tiles)", ts(T(c, 0), b));
    if (!check_shape(c, &c->op->shape, "target shape"))
        return false;
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, c->op->shape));
}

static bool rule_broadcast(rule_ctx *c)
{
    char b[64];
    if (!want_nopnd(c, 1) || !want_tiles(c, 0, 1))
        return false;
    const loom_shape *src = &T(c, 0)->shape, *dst = &c->op->shape;
    if (!check_shape(c, dst, "target shape"))
        return false;
    if (src->rank > dst->rank)
        FAIL("cannot broadcast %s to rank %d: the target has fewer dims", ts(T(c, 0), b), dst->rank);
    for (int i = 0; i < src->rank; i++) {
        int64_t s = src->dim[src->rank - 1 - i], d = dst->dim[dst->rank - 1 - i];
        if (s != d && s != 1)
            FAIL("cannot broadcast %s: source dim %d is %lld but the target's is %lld (only dims "
                 "of 1 stretch)",
                 ts(T(c, 0), b), src->rank - 1 - i, (long long)s, (long long)d);
    }
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, *dst));
}

static bool rule_expand_dims(rule_ctx *c)
{
    char b[64];
    if (!want_nopnd(c, 1) || !want_tiles(c, 0, 1))
        return false;
    loom_shape s = T(c, 0)->shape;
    int ax = (int)c->op->iattr[0];
    if (ax < 0 || ax > s.rank)
        FAIL("axis %d is out of range for %s (0..%d)", ax, ts(T(c, 0), b), s.rank);
    if (s.rank == LOOM_MAX_RANK)
        FAIL("%s already has the largest rank (%d)", ts(T(c, 0), b), LOOM_MAX_RANK);
    for (int i = s.rank; i > ax; i--)
        s.dim[i] = s.dim[i - 1];
    s.dim[ax] = 1;
    s.rank++;
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, s));
}

static bool rule_trans(rule_ctx *c)
{
    char b[64];
    if (!want_nopnd(c, 1) || !want_tiles(c, 0, 1))
        return false;
    loom_shape s = T(c, 0)->shape;
    if (s.rank != 2)
        FAIL("operand is %s; trans takes a 2-D tile", ts(T(c, 0), b));
    int64_t t = s.dim[0];
    s.dim[0] = s.dim[1];
    s.dim[1] = t;
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, s));
}

static bool rule_arith(rule_ctx *c)
{
    char b[64];
    loom_shape s;
    if (!want_nopnd(c, 2) || !want_tiles(c, 0, 2) || !same_dtype(c, 0, 2) || !ew_common(c, 0, 2, &s))
        return false;
    if (T(c, 0)->dtype == LOOM_I1)
        FAIL("operands are %s; arithmetic needs numbers (use loom_and/loom_or on i1)", ts(T(c, 0), b));
    if (c->op->kind == IR_REM && !ir_dtype_is_int((loom_dtype)T(c, 0)->dtype))
        FAIL("operands are %s; rem takes integers", ts(T(c, 0), b));
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, s));
}

static bool rule_bitwise(rule_ctx *c)
{
    char b[64];
    loom_shape s;
    if (!want_nopnd(c, 2) || !want_tiles(c, 0, 2) || !same_dtype(c, 0, 2) || !ew_common(c, 0, 2, &s))
        return false;
    if (ir_dtype_is_float((loom_dtype)T(c, 0)->dtype))
        FAIL("operands are %s; bitwise ops take integers or i1", ts(T(c, 0), b));
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, s));
}

static bool rule_fma(rule_ctx *c)
{
    char b[64];
    loom_shape s;
    if (!want_nopnd(c, 3) || !want_tiles(c, 0, 3) || !same_dtype(c, 0, 3) || !ew_common(c, 0, 3, &s))
        return false;
    if (!ir_dtype_is_float((loom_dtype)T(c, 0)->dtype))
        FAIL("operands are %s; fma takes floats", ts(T(c, 0), b));
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, s));
}

static bool rule_unary(rule_ctx *c)
{
    char b[64];
    if (!want_nopnd(c, 1) || !want_tiles(c, 0, 1))
        return false;
    if (T(c, 0)->dtype == LOOM_I1)
        FAIL("operand is %s; use loom_not on i1", ts(T(c, 0), b));
    return emit(c, *T(c, 0));
}

static bool rule_unary_float(rule_ctx *c)
{
    char b[64];
    if (!want_nopnd(c, 1) || !want_tiles(c, 0, 1))
        return false;
    if (!ir_dtype_is_float((loom_dtype)T(c, 0)->dtype))
        FAIL("operand is %s; this op takes floats (loom_cast first)", ts(T(c, 0), b));
    return emit(c, *T(c, 0));
}

static bool rule_unary_bool(rule_ctx *c)
{
    char b[64];
    if (!want_nopnd(c, 1) || !want_tiles(c, 0, 1))
        return false;
    if (T(c, 0)->dtype != LOOM_I1)
        FAIL("operand is %s; not takes i1", ts(T(c, 0), b));
    return emit(c, *T(c, 0));
}

static bool rule_cmp(rule_ctx *c)
{
    loom_shape s;
    if (!want_nopnd(c, 2) || !want_tiles(c, 0, 2) || !same_dtype(c, 0, 2) || !ew_common(c, 0, 2, &s))
        return false;
    if (c->op->iattr[0] < LOOM_EQ || c->op->iattr[0] > LOOM_GE)
        FAIL("unknown predicate %lld", (long long)c->op->iattr[0]);
    return emit(c, tile(LOOM_I1, s));
}

static bool rule_select(rule_ctx *c)
{
    char b[64];
    loom_shape s;
    if (!want_nopnd(c, 3) || !want_tiles(c, 0, 3) || !same_dtype(c, 1, 3) || !ew_common(c, 0, 3, &s))
        return false;
    if (T(c, 0)->dtype != LOOM_I1)
        FAIL("condition is %s; it must be i1", ts(T(c, 0), b));
    return emit(c, tile((loom_dtype)T(c, 1)->dtype, s));
}

static bool rule_cast(rule_ctx *c)
{
    if (!want_nopnd(c, 1) || !want_tiles(c, 0, 1))
        return false;
    if (c->op->iattr[0] < 0 || c->op->iattr[0] >= LOOM_DTYPE_COUNT)
        FAIL("unknown target dtype %lld", (long long)c->op->iattr[0]);
    return emit(c, tile((loom_dtype)c->op->iattr[0], T(c, 0)->shape));
}

static bool rule_reduce(rule_ctx *c)
{
    char b[64];
    if (!want_nopnd(c, 1) || !want_tiles(c, 0, 1))
        return false;
    loom_shape s = T(c, 0)->shape;
    int ax = (int)c->op->iattr[0];
    if (s.rank == 0)
        FAIL("operand is a scalar (%s); there is no axis to reduce", ts(T(c, 0), b));
    if (ax < 0 || ax >= s.rank)
        FAIL("axis %d does not exist in %s (axes 0..%d)", ax, ts(T(c, 0), b), s.rank - 1);
    if (T(c, 0)->dtype == LOOM_I1)
        FAIL("operand is %s; reductions take numbers", ts(T(c, 0), b));
    for (int i = ax; i < s.rank - 1; i++)
        s.dim[i] = s.dim[i + 1];
    s.rank--;
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, s));
}

static bool rule_dot(rule_ctx *c)
{
    char b1[64], b2[64], b3[64];
    if (!want_nopnd(c, 3) || !want_tiles(c, 0, 3))
        return false;
    const ir_type *a = T(c, 0), *bb = T(c, 1), *acc = T(c, 2);
    if (a->shape.rank != 2 || bb->shape.rank != 2 || acc->shape.rank != 2)
        FAIL("dot takes 2-D tiles: a is %s, b is %s, acc is %s", ts(a, b1), ts(bb, b2), ts(acc, b3));
    if (a->dtype != bb->dtype || !ir_dtype_is_float((loom_dtype)a->dtype))
        FAIL("a is %s and b is %s; they must be the same float type (f16, bf16, f32)", ts(a, b1),
             ts(bb, b2));
    if (acc->dtype != LOOM_F32)
        FAIL("the accumulator is %s; it must be f32", ts(acc, b3));
    if (a->shape.dim[1] != bb->shape.dim[0])
        FAIL("inner dims differ: a is %s, b is %s", ts(a, b1), ts(bb, b2));
    if (acc->shape.dim[0] != a->shape.dim[0] || acc->shape.dim[1] != bb->shape.dim[1])
        FAIL("the accumulator is %s but a @ b is %lldx%lld", ts(acc, b3), (long long)a->shape.dim[0],
             (long long)bb->shape.dim[1]);
    return emit(c, *acc);
}

/* Operands 1..rank of a memory op are i32/i64 scalar offsets into tensor operand 0. */
static bool check_offsets(rule_ctx *c, int first, int rank)
{
    char b[64];
    for (int i = 0; i < rank; i++) {
        const ir_type *t = T(c, first + i);
        if (!is_scalar(t) || !ir_dtype_is_int((loom_dtype)t->dtype))
            FAIL("offset %d is %s; offsets are i32 or i64 scalars", i, ts(t, b));
    }
    return true;
}

static bool check_tensor(rule_ctx *c)
{
    char b[64];
    if (c->op->nopnd < 1)
        FAIL("has no tensor operand");
    if (T(c, 0)->kind != IR_T_TENSOR)
        FAIL("operand 0 is %s; a global tensor argument is needed", ts(T(c, 0), b));
    return true;
}

/* The block's shape covers the trailing dims of the tensor. */
static bool check_block_shape(rule_ctx *c, const loom_shape *s, int trank)
{
    if (!check_shape(c, s, "tile shape"))
        return false;
    if (s->rank < 1 || s->rank > trank)
        FAIL("tile rank %d must be between 1 and the tensor's rank %d", s->rank, trank);
    return true;
}

static bool rule_load(rule_ctx *c)
{
    char b[64];
    if (!check_tensor(c))
        return false;
    int r = T(c, 0)->shape.rank;
    int has_mask = (int)c->op->iattr[0];
    if (c->op->nopnd != 1 + r + has_mask)
        FAIL("takes the tensor, %d offsets%s; got %d operands", r, has_mask ? " and a mask" : "",
             c->op->nopnd);
    if (!check_offsets(c, 1, r) || !check_block_shape(c, &c->op->shape, r))
        return false;
    if (has_mask) {
        const ir_type *m = T(c, 1 + r);
        if (m->kind != IR_T_TILE || m->dtype != LOOM_I1 || !ir_shape_eq(&m->shape, &c->op->shape))
            FAIL("the mask is %s; it must be an i1 tile of the loaded shape", ts(m, b));
    }
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, c->op->shape));
}

static bool rule_load_scalar(rule_ctx *c)
{
    if (!check_tensor(c))
        return false;
    int r = T(c, 0)->shape.rank;
    if (c->op->nopnd != 1 + r)
        FAIL("takes the tensor and %d offsets; got %d operands", r, c->op->nopnd);
    if (!check_offsets(c, 1, r))
        return false;
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, LOOM_SCALAR));
}

static bool rule_load_rows(rule_ctx *c)
{
    char b[64];
    if (!check_tensor(c))
        return false;
    int r = T(c, 0)->shape.rank;
    if (c->op->nopnd != 2 + r)
        FAIL("takes the tensor, a row index tile and %d offsets; got %d operands", r, c->op->nopnd);
    if (!check_offsets(c, 2, r) || !check_block_shape(c, &c->op->shape, r))
        return false;
    if (c->op->shape.rank != r)
        FAIL("tile rank %d must equal the tensor's rank %d", c->op->shape.rank, r);
    const ir_type *rows = T(c, 1);
    if (rows->kind != IR_T_TILE || rows->shape.rank != 1 ||
        !ir_dtype_is_int((loom_dtype)rows->dtype))
        FAIL("the row index is %s; it must be a 1-D i32 or i64 tile", ts(rows, b));
    if (rows->shape.dim[0] != c->op->shape.dim[0])
        FAIL("the row index has %lld rows but the tile has %lld", (long long)rows->shape.dim[0],
             (long long)c->op->shape.dim[0]);
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, c->op->shape));
}

static bool rule_store(rule_ctx *c)
{
    char b1[64], b2[64];
    if (!check_tensor(c))
        return false;
    int r = T(c, 0)->shape.rank;
    int has_mask = (int)c->op->iattr[0];
    if (c->op->nopnd != 2 + r + has_mask)
        FAIL("takes the tensor, %d offsets, the value%s; got %d operands", r,
             has_mask ? " and a mask" : "", c->op->nopnd);
    if (!check_offsets(c, 1, r))
        return false;
    const ir_arg *a = &c->k->args[c->k->vals[c->op->opnd[0]].def];
    if (!(a->access & LOOM_OUT))
        FAIL("argument '%s' is read-only (declared LOOM_IN); declare it LOOM_OUT or LOOM_INOUT to store to it",
             a->name);
    const ir_type *v = T(c, 1 + r);
    if (v->kind != IR_T_TILE)
        FAIL("the value is %s; a register tile is needed", ts(v, b1));
    if (v->dtype != T(c, 0)->dtype)
        FAIL("the value is %s but the tensor holds %s; use loom_cast", ts(v, b1),
             loom_dtype_name((loom_dtype)T(c, 0)->dtype));
    if (!check_block_shape(c, &v->shape, r))
        return false;
    if (has_mask) {
        const ir_type *m = T(c, 2 + r);
        if (m->kind != IR_T_TILE || m->dtype != LOOM_I1 || !ir_shape_eq(&m->shape, &v->shape))
            FAIL("the mask is %s; it must be an i1 tile shaped like the value %s", ts(m, b1),
                 ts(v, b2));
    }
    return true;
}

static bool rule_for(rule_ctx *c)
{
    char b[64];
    if (c->op->nopnd < 3)
        FAIL("takes lo, hi, step and the initial carried values");
    static const char *which[] = {"lo", "hi", "step"};
    for (int i = 0; i < 3; i++)
        if (!is_scalar(T(c, i)) || T(c, i)->dtype != LOOM_I32)
            FAIL("%s is %s; loop bounds are i32 scalars", which[i], ts(T(c, i), b));
    if (!want_tiles(c, 3, c->op->nopnd))
        return false;
    for (int i = 3; i < c->op->nopnd; i++)
        if (!emit(c, *T(c, i)))
            FAIL("too many carried values");
    return true;
}

static bool rule_if(rule_ctx *c)
{
    char b[64];
    if (c->op->nopnd != 1)
        FAIL("takes one condition");
    if (!is_scalar(T(c, 0)) || T(c, 0)->dtype != LOOM_I1)
        FAIL("the condition is %s; it must be an i1 scalar", ts(T(c, 0), b));
    /* results are typed by the then-branch's yield, which rule_yield checks */
    for (int i = 0; i < c->op->nres; i++)
        if (!emit(c, c->k->vals[c->op->res[i]].type))
            FAIL("too many results");
    return true;
}

static bool rule_yield(rule_ctx *c)
{
    char b1[64], b2[64];
    uint32_t parent = c->k->blocks[c->op->block].parent;
    if (!parent)
        FAIL("yield outside a loop or if");
    ir_op *p = &c->k->ops[parent];
    if (c->op->nopnd != p->nres)
        FAIL("yields %d values but the enclosing %s has %d %s", c->op->nopnd,
             ir_opdescs[p->kind].name, p->nres, p->kind == IR_FOR ? "carried values" : "results");
    for (int i = 0; i < c->op->nopnd; i++) {
        const ir_type *want = &c->k->vals[p->res[i]].type;
        if (!ir_type_eq(T(c, i), want))
            FAIL("value %d is %s but the enclosing %s's %s %d is %s", i, ts(T(c, i), b1),
                 ir_opdescs[p->kind].name, p->kind == IR_FOR ? "carried value" : "result", i,
                 ts(want, b2));
    }
    return true;
}

/* ---------------------------------------------------------------- dispatch */

typedef bool (*rule_fn)(rule_ctx *);
static const rule_fn rules[IR_OP_COUNT] = {
#define LOOM_OP(E, n, nop, nreg, rule, fl) [IR_##E] = rule_##rule,
#include "ops.h"
#undef LOOM_OP
};

bool ir_rule(loom_kernel *k, uint32_t o, ir_type *out, int *nout, int maxout)
{
    ir_op *op = &k->ops[o];
    rule_ctx c = {.k = k, .o = o, .op = op, .name = ir_opdescs[op->kind].name, .out = out,
                  .maxout = maxout};
    *nout = 0;
    if (op->kind == IR_INVALID || op->kind >= IR_OP_COUNT)
        return false;
    const ir_opdesc *d = &ir_opdescs[op->kind];
    if (d->nopnd >= 0 && op->nopnd != d->nopnd) {
        ir_error(k, op->src, d->name, "takes %d operands, got %d", d->nopnd, op->nopnd);
        return false;
    }
    bool ok = rules[op->kind](&c);
    *nout = c.nout;
    return ok;
}
