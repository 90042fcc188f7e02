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

/* FP8 values are storage: loads, stores, casts and moves take them, and loom_dot (the
 * tensor cores multiply them); other arithmetic does not (docs/dsl.md, "FP8"). */
static bool no_fp8(rule_ctx *c, int from, int to)
{
    char b[64];
    for (int i = from; i < to; i++)
        if (ir_dtype_is_fp8((loom_dtype)T(c, i)->dtype))
            FAIL("operand %d is %s; FP8 values are for loads, stores, casts and loom_dot only: loom_cast to f16 "
                 "or f32 first (and back to FP8 to store)",
                 i, ts(T(c, i), b));
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

static bool rule_slice(rule_ctx *c)
{
    char b[64];
    if (!want_nopnd(c, 1) || !want_tiles(c, 0, 1))
        return false;
    loom_shape s = T(c, 0)->shape;
    int64_t dim = c->op->iattr[0], start = c->op->iattr[1], size = c->op->iattr[2];
    if (s.rank == 0)
        FAIL("operand is %s; slice takes a tile of rank 1 or more", ts(T(c, 0), b));
    if (dim < 0 || dim >= s.rank)
        FAIL("dim %lld is out of range for %s (0..%d)", (long long)dim, ts(T(c, 0), b), s.rank - 1);
    if (size < 1 || (size & (size - 1)))
        FAIL("size %lld is not a power of two (a slice is a part of the tile's registers)", (long long)size);
    if (start < 0 || start % size)
        FAIL("start %lld is not a multiple of the size %lld (a slice is an aligned part of the tile)",
             (long long)start, (long long)size);
    if (start + size > s.dim[dim])
        FAIL("the elements [%lld, %lld) along dim %lld are outside %s", (long long)start,
             (long long)(start + size), (long long)dim, ts(T(c, 0), b));
    s.dim[dim] = size;
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, s));
}

static bool rule_arith(rule_ctx *c)
{
    char b[64];
    loom_shape s;
    if (!want_nopnd(c, 2) || !want_tiles(c, 0, 2) || !same_dtype(c, 0, 2) || !ew_common(c, 0, 2, &s) ||
        !no_fp8(c, 0, 2))
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

/* div_fast: two floats (integer division is loom_div's). */
static bool rule_arith_float(rule_ctx *c)
{
    char b[64];
    loom_shape s;
    if (!want_nopnd(c, 2) || !want_tiles(c, 0, 2) || !same_dtype(c, 0, 2) || !ew_common(c, 0, 2, &s) ||
        !no_fp8(c, 0, 2))
        return false;
    if (!ir_dtype_is_float((loom_dtype)T(c, 0)->dtype))
        FAIL("operands are %s; this op takes floats (loom_div divides integers)", ts(T(c, 0), b));
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, s));
}

/* shl, shr: an integer and a shift count of the same dtype. */
static bool rule_shift(rule_ctx *c)
{
    char b[64];
    loom_shape s;
    if (!want_nopnd(c, 2) || !want_tiles(c, 0, 2) || !same_dtype(c, 0, 2) || !ew_common(c, 0, 2, &s))
        return false;
    if (!ir_dtype_is_int((loom_dtype)T(c, 0)->dtype))
        FAIL("operands are %s; shifts take i32 or i64 (the count of the same dtype)", ts(T(c, 0), b));
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, s));
}

static bool rule_fma(rule_ctx *c)
{
    char b[64];
    loom_shape s;
    if (!want_nopnd(c, 3) || !want_tiles(c, 0, 3) || !same_dtype(c, 0, 3) || !ew_common(c, 0, 3, &s) ||
        !no_fp8(c, 0, 3))
        return false;
    if (!ir_dtype_is_float((loom_dtype)T(c, 0)->dtype))
        FAIL("operands are %s; fma takes floats", ts(T(c, 0), b));
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, s));
}

static bool rule_unary(rule_ctx *c)
{
    char b[64];
    if (!want_nopnd(c, 1) || !want_tiles(c, 0, 1) || !no_fp8(c, 0, 1))
        return false;
    if (T(c, 0)->dtype == LOOM_I1)
        FAIL("operand is %s; use loom_not on i1", ts(T(c, 0), b));
    return emit(c, *T(c, 0));
}

static bool rule_unary_float(rule_ctx *c)
{
    char b[64];
    if (!want_nopnd(c, 1) || !want_tiles(c, 0, 1) || !no_fp8(c, 0, 1))
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
    if (!want_nopnd(c, 2) || !want_tiles(c, 0, 2) || !same_dtype(c, 0, 2) || !ew_common(c, 0, 2, &s) ||
        !no_fp8(c, 0, 2))
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
    if (!want_nopnd(c, 1) || !want_tiles(c, 0, 1) || !no_fp8(c, 0, 1))
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
    bool fp8 = ir_dtype_is_fp8((loom_dtype)a->dtype) && ir_dtype_is_fp8((loom_dtype)bb->dtype);
    if ((a->dtype != bb->dtype && !fp8) || !ir_dtype_is_float((loom_dtype)a->dtype))
        FAIL("a is %s and b is %s; they must be the same float type (f16, bf16, f32) or both FP8 (e4m3, e5m2, "
             "in any mix)",
             ts(a, b1), ts(bb, b2));
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

/* ---------------------------------------------------------------- Hopper machinery */

static bool is_view(const ir_type *t) { return t->kind == IR_T_SMEM && t->slots == 1; }

static bool want_i32_scalar(rule_ctx *c, int i, const char *what)
{
    char b[64];
    if (!is_scalar(T(c, i)) || T(c, i)->dtype != LOOM_I32)
        FAIL("%s is %s; an i32 scalar is needed", what, ts(T(c, i), b));
    return true;
}

static bool want_view(rule_ctx *c, int i, const char *what)
{
    char b[64];
    if (!is_view(T(c, i)))
        FAIL("%s is %s; a shared-memory view is needed (loom_smem_slot of a ring, or a ring "
             "of one slot)", what, ts(T(c, i), b));
    return true;
}

/* Allocations sit in the kernel body, before any task. */
static bool top_level(rule_ctx *c)
{
    if (c->op->block != 1)
        FAIL("allocations go at the top level of the kernel, not inside a loop, if or task");
    return true;
}

static bool in_task(rule_ctx *c)
{
    for (uint32_t b = c->op->block; b;) {
        uint32_t p = c->k->blocks[b].parent;
        if (!p)
            break;
        if (c->k->ops[p].kind == IR_TASK)
            return true;
        b = c->k->ops[p].block;
    }
    FAIL("only inside a task (loom_task_begin)");
}

static bool rule_smem_alloc(rule_ctx *c)
{
    ir_type r = {.kind = IR_T_SMEM, .dtype = (uint8_t)c->op->iattr[2], .shape = c->op->shape};
    if (!top_level(c) || !check_shape(c, &r.shape, "shared tile shape"))
        return false;
    if (r.shape.rank < 1 || r.shape.rank > 3)
        FAIL("a shared tile has rank 1 to 3, not %d", r.shape.rank);
    if (r.dtype >= LOOM_DTYPE_COUNT || r.dtype == LOOM_I1)
        FAIL("dtype %d cannot live in shared memory", r.dtype);
    int64_t slots = c->op->iattr[0], swz = c->op->iattr[1];
    if (slots < 1 || slots > 64)
        FAIL("a ring has 1 to 64 slots, not %lld", (long long)slots);
    if (swz != 0 && swz != 32 && swz != 64 && swz != 128)
        FAIL("swizzle %lld is not 0, 32, 64 or 128 bytes", (long long)swz);
    int64_t row = r.shape.dim[r.shape.rank - 1] * (int64_t)loom_dtype_size((loom_dtype)r.dtype);
    if (swz && row % swz)
        FAIL("the innermost dim is %lld bytes; with a %lld-byte swizzle it must be a multiple "
             "of %lld bytes", (long long)row, (long long)swz, (long long)swz);
    if (swz && ir_shape_numel(&r.shape) * (int64_t)loom_dtype_size((loom_dtype)r.dtype) % 1024)
        FAIL("a swizzled slot must be a multiple of 1024 bytes (8 rows of the swizzle span)");
    r.slots = (uint16_t)slots;
    r.swizzle = (uint8_t)swz;
    return emit(c, r);
}

static bool rule_smem_slot(rule_ctx *c)
{
    char b[64];
    if (T(c, 0)->kind != IR_T_SMEM || T(c, 0)->trans)
        FAIL("operand 0 is %s; a shared-memory ring is needed", ts(T(c, 0), b));
    if (!want_i32_scalar(c, 1, "the slot index"))
        return false;
    ir_type r = *T(c, 0);
    r.slots = 1;
    return emit(c, r);
}

static bool rule_smem_trans(rule_ctx *c)
{
    char b[64];
    if (!want_view(c, 0, "operand 0"))
        return false;
    if (T(c, 0)->shape.rank != 2)
        FAIL("operand 0 is %s; only a 2-D view can be transposed", ts(T(c, 0), b));
    ir_type r = *T(c, 0);
    r.trans = !r.trans;
    r.shape.dim[0] = T(c, 0)->shape.dim[1];
    r.shape.dim[1] = T(c, 0)->shape.dim[0];
    return emit(c, r);
}

/* A part of a 2-D view that is a plain tile in memory (see loom_smem_part in loom.h). */
static bool rule_smem_part(rule_ctx *c)
{
    char b[64];
    if (!want_view(c, 0, "operand 0"))
        return false;
    const ir_type *v = T(c, 0);
    if (v->trans)
        FAIL("operand 0 is a transposed view; take the part of the view as stored, then transpose it");
    if (v->shape.rank != 2)
        FAIL("operand 0 is %s; parts are taken of 2-D views", ts(v, b));
    int64_t dim = c->op->iattr[0], start = c->op->iattr[1], size = c->op->iattr[2];
    if (dim != 0 && dim != 1)
        FAIL("dim %lld is not 0 or 1", (long long)dim);
    if (start < 0 || size < 1 || start > v->shape.dim[dim] || size > v->shape.dim[dim] - start)
        FAIL("the part of %lld elements from %lld along dim %lld is outside the view %s", (long long)size,
             (long long)start, (long long)dim, ts(v, b));
    int64_t es = (int64_t)loom_dtype_size((loom_dtype)v->dtype), inner = v->shape.dim[1] * es;
    if (dim == 1) {
        if (!v->swizzle || inner <= v->swizzle)
            FAIL("columns of %s are not stored apart: a column part needs a swizzled view whose rows "
                 "span several %d-byte chunks (each chunk is its own tile)",
                 ts(v, b), v->swizzle ? v->swizzle : 128);
        int64_t cc = v->swizzle / es;
        if (start % cc || size % cc)
            FAIL("columns [%lld, %lld) do not fall on the view's %lld-column chunks (its %d-byte swizzle span)",
                 (long long)start, (long long)(start + size), (long long)cc, v->swizzle);
    } else {
        if (v->swizzle && inner > v->swizzle)
            FAIL("rows of %s are split over %lld column chunks of %d bytes, so a row part is not one "
                 "tile; take a column part first",
                 ts(v, b), (long long)(inner / v->swizzle), v->swizzle);
        if (v->swizzle && start % 8)
            FAIL("row %lld: a part of a swizzled view starts on a multiple of 8 rows (the swizzle's period)",
                 (long long)start);
    }
    ir_type r = *v;
    r.shape.dim[dim] = size;
    return emit(c, r);
}

static bool rule_smem_load(rule_ctx *c)
{
    if (!want_view(c, 0, "operand 0"))
        return false;
    return emit(c, tile((loom_dtype)T(c, 0)->dtype, T(c, 0)->shape));
}

static bool rule_smem_store(rule_ctx *c)
{
    char b1[64], b2[64];
    if (!want_view(c, 0, "operand 0"))
        return false;
    const ir_type *v = T(c, 1), *s = T(c, 0);
    if (v->kind != IR_T_TILE || v->dtype != s->dtype || !ir_shape_eq(&v->shape, &s->shape))
        FAIL("the value is %s but the view is %s; they need the same dtype and shape%s", ts(v, b1),
             ts(s, b2), v->dtype != s->dtype ? " (use loom_cast)" : "");
    return true;
}

static bool rule_mbar_alloc(rule_ctx *c)
{
    if (!top_level(c))
        return false;
    int64_t n = c->op->iattr[0], arr = c->op->iattr[1];
    if (n < 1 || n > 64)
        FAIL("an mbarrier array holds 1 to 64 barriers, not %lld", (long long)n);
    if (arr < 1 || arr > 1024)
        FAIL("the arrival count is %lld; it must be between 1 and 1024", (long long)arr);
    return emit(c, (ir_type){.kind = IR_T_MBAR, .shape = LOOM_SHAPE1(n)});
}

static bool want_bar(rule_ctx *c, int i)
{
    char b[64];
    if (T(c, i)->kind != IR_T_MBAR)
        FAIL("operand %d is %s; an mbarrier array (loom_mbar_alloc) is needed", i, ts(T(c, i), b));
    return want_i32_scalar(c, i + 1, "the barrier index");
}

static bool rule_mbar_arrive(rule_ctx *c)
{
    if (!want_bar(c, 0) || !in_task(c))
        return false;
    if (c->op->kind == IR_MBAR_EXPECT && (c->op->iattr[0] < 0 || c->op->iattr[0] >= (1 << 20)))
        FAIL("expects %lld bytes; a phase can expect 0 to 2^20-1 bytes", (long long)c->op->iattr[0]);
    return true;
}

static bool rule_mbar_wait(rule_ctx *c)
{
    return want_bar(c, 0) && want_i32_scalar(c, 2, "the phase") && in_task(c);
}

/* smem_store_cluster: view, value (the view's dtype and shape; the builder splats a
 * scalar), bars, index.  One st.async of 4-byte words per CTA: at most 16 bytes, a whole
 * number of words, at an address aligned to a word. */
static bool rule_smem_store_cluster(rule_ctx *c)
{
    char b1[64], b2[64];
    if (!want_view(c, 0, "the view"))
        return false;
    const ir_type *v = T(c, 1), *s = T(c, 0);
    if (s->trans)
        FAIL("the view is transposed; store into the view as the slot holds it");
    if (v->kind != IR_T_TILE || v->dtype != s->dtype || !ir_shape_eq(&v->shape, &s->shape))
        FAIL("the value is %s but the view is %s; they need the same dtype and shape%s", ts(v, b1),
             ts(s, b2), v->dtype != s->dtype ? " (use loom_cast)" : "");
    int64_t bytes = ir_shape_numel(&s->shape) * (int64_t)loom_dtype_size((loom_dtype)s->dtype);
    if (bytes > 16)
        FAIL("the view %s is %lld bytes; loom_smem_store_cluster writes at most 16 (one st.async a CTA: "
             "an index or a few scalars; move tiles with loom_tma_load_multicast)",
             ts(s, b1), (long long)bytes);
    if (bytes % 4)
        FAIL("the view %s is %lld bytes; st.async writes whole 4-byte words, so the view must be 4, 8, "
             "12 or 16 bytes", ts(s, b1), (long long)bytes);
    if (ir_view_align(c->k, c->op->opnd[0]) < 4)
        FAIL("the view %s may start off a 4-byte boundary (a part of its slot); st.async writes "
             "aligned 4-byte words", ts(s, b1));
    return want_bar(c, 2) && in_task(c);
}

static bool rule_named_barrier(rule_ctx *c)
{
    int64_t id = c->op->iattr[0], th = c->op->iattr[1];
    if (id < 0 || id > 7)
        FAIL("named barrier id %lld is not between 0 and 7", (long long)id);
    if (th < 32 || th % 32 || th > 1024)
        FAIL("named barrier thread count %lld must be a multiple of 32 up to 1024", (long long)th);
    return in_task(c);
}

/* flag_add / flag_wait: an i32 tensor declared LOOM_INOUT, one offset per dim, an i32
 * scalar (the value to add, or the target to wait for) */
static bool rule_flag(rule_ctx *c)
{
    char b[64];
    if (!check_tensor(c))
        return false;
    int r = T(c, 0)->shape.rank;
    if (c->op->nopnd != 2 + r)
        FAIL("takes the flags, %d offsets and %s; got %d operands", r,
             c->op->kind == IR_FLAG_ADD ? "the value to add" : "the target", c->op->nopnd);
    const ir_arg *a = &c->k->args[c->k->vals[c->op->opnd[0]].def];
    if (T(c, 0)->dtype != LOOM_I32)
        FAIL("the flags '%s' are %s; flags are an i32 tensor", a->name, ts(T(c, 0), b));
    if ((a->access & (LOOM_IN | LOOM_OUT)) != (LOOM_IN | LOOM_OUT))
        FAIL("the flags '%s' must be declared LOOM_INOUT (they are read and written)", a->name);
    if (!check_offsets(c, 1, r))
        return false;
    return want_i32_scalar(c, 1 + r, c->op->kind == IR_FLAG_ADD ? "the value to add" : "the target");
}

/* atomic_add: an i32 tensor declared LOOM_INOUT, one offset per dim, the i32 scalar to
 * add; the result is the element's old value, an i32 scalar */
static bool rule_atomic(rule_ctx *c)
{
    char b[64];
    if (!check_tensor(c))
        return false;
    int r = T(c, 0)->shape.rank;
    const ir_arg *a = &c->k->args[c->k->vals[c->op->opnd[0]].def];
    if (T(c, 0)->dtype != LOOM_I32)
        FAIL("the tensor '%s' is %s; atomic_add takes an i32 tensor", a->name, ts(T(c, 0), b));
    if ((a->access & (LOOM_IN | LOOM_OUT)) != (LOOM_IN | LOOM_OUT))
        FAIL("the tensor '%s' must be declared LOOM_INOUT (atomic_add reads and writes it)", a->name);
    if (c->op->nopnd != 2 + r)
        FAIL("takes the tensor, %d offset%s (one per dim of '%s') and the value to add; got %d operands", r,
             r == 1 ? "" : "s", a->name, c->op->nopnd);
    if (!check_offsets(c, 1, r) || !want_i32_scalar(c, 1 + r, "the value to add"))
        return false;
    return emit(c, tile(LOOM_I32, LOOM_SCALAR));
}

static bool rule_no_result(rule_ctx *c)
{
    if (c->op->kind == IR_TMA_STORE_WAIT || c->op->kind == IR_WGMMA_WAIT)
        if (c->op->iattr[0] < 0 || c->op->iattr[0] > 7)
            FAIL("pending %lld is not between 0 and 7", (long long)c->op->iattr[0]);
    return in_task(c);
}

/* tensor, offsets (one per tensor dim), view[, bars, index] */
static bool tma_common(rule_ctx *c, int extra)
{
    char b1[64], b2[64];
    if (!check_tensor(c))
        return false;
    int r = T(c, 0)->shape.rank;
    if (c->op->nopnd != 2 + r + extra)
        FAIL("takes the tensor, %d offsets, the view%s; got %d operands", r,
             extra ? ", the barriers and the barrier index" : "", c->op->nopnd);
    if (!check_offsets(c, 1, r) || !want_view(c, 1 + r, "the view"))
        return false;
    const ir_type *v = T(c, 1 + r), *t = T(c, 0);
    if (v->trans)
        FAIL("TMA copies a view as stored; a transposed view cannot be its target");
    if (v->dtype != t->dtype)
        FAIL("the view is %s but the tensor is %s", ts(v, b1), ts(t, b2));
    if (v->shape.rank > r)
        FAIL("the view %s has more dims than the tensor %s", ts(v, b1), ts(t, b2));
    for (int i = 0; i < v->shape.rank; i++)
        if (v->shape.dim[i] > 256)
            FAIL("the view %s has a dim over 256, the most a TMA box can hold", ts(v, b1));
    if (v->shape.dim[v->shape.rank - 1] * (int64_t)loom_dtype_size((loom_dtype)v->dtype) % 16)
        FAIL("the view's innermost dim is %lld bytes; TMA needs a multiple of 16",
             (long long)(v->shape.dim[v->shape.rank - 1] * (int64_t)loom_dtype_size((loom_dtype)v->dtype)));
    const ir_arg *a = &c->k->args[c->k->vals[c->op->opnd[0]].def];
    if (a->strides[r - 1] != 1)
        FAIL("argument '%s' has stride %lld in its innermost dim; TMA needs 1", a->name,
             (long long)a->strides[r - 1]);
    return in_task(c);
}

static bool rule_tma_load(rule_ctx *c)
{
    int r = c->op->nopnd >= 1 && T(c, 0)->kind == IR_T_TENSOR ? T(c, 0)->shape.rank : 0;
    return tma_common(c, 2) && want_bar(c, 2 + r);
}

static bool rule_tma_store(rule_ctx *c)
{
    if (!tma_common(c, 0))
        return false;
    const ir_arg *a = &c->k->args[c->k->vals[c->op->opnd[0]].def];
    if (!(a->access & LOOM_OUT))
        FAIL("argument '%s' is read-only (declared LOOM_IN)", a->name);
    return true;
}

/* FP8 wgmma (wgmma.mma_async ... .f32.{e4m3,e5m2}.{e4m3,e5m2}) reads B K-major from
 * shared memory: the ISA has no transpose bits for 8-bit types.  A is a view of an [M, K]
 * slot as stored, or a register tile [M, K] (the code generator rearranges it into the
 * fragment of four 8-bit elements a register: codegen/lower_wgmma.c, fp8_step); B the
 * transpose of an [N, K] slot. */
static bool wgmma_fp8_operands(rule_ctx *c, const ir_type *a, const ir_type *bb)
{
    char b1[64];
    if (a->trans)
        FAIL("a is %s, an M-major view (loom_smem_trans of a [K, M] slot); FP8 wgmma reads A K-major: "
             "store A as [M, K] and pass the view itself", ts(a, b1));
    if (!bb->trans)
        FAIL("b is %s, an N-major view (a [K, N] slot as stored); FP8 wgmma reads B K-major: "
             "store B as [N, K] and pass loom_smem_trans of it", ts(bb, b1));
    return true;
}

static bool rule_wgmma(rule_ctx *c)
{
    char b1[64], b2[64], b3[64];
    const ir_type *a = T(c, 0), *bb = T(c, 1), *acc = T(c, 2);
    /* A is a view or a register tile (an f16/bf16 cast of an accumulator, say: P of
     * attention); B always a view */
    if (a->kind != IR_T_TILE && !is_view(a))
        FAIL("a is %s; a shared-memory view (loom_smem_slot of a ring, or a ring of one slot) "
             "or a register tile is needed", ts(a, b1));
    if (!want_view(c, 1, "b"))
        return false;
    if (acc->kind != IR_T_TILE || acc->dtype != LOOM_F32 || acc->shape.rank != 2)
        FAIL("the accumulator is %s; an f32 2-D tile is needed", ts(acc, b3));
    if (a->shape.rank != 2 || bb->shape.rank != 2)
        FAIL("a is %s and b is %s; wgmma takes 2-D operands", ts(a, b1), ts(bb, b2));
    bool fp8 = ir_dtype_is_fp8((loom_dtype)a->dtype) && ir_dtype_is_fp8((loom_dtype)bb->dtype);
    if (!fp8 && (a->dtype != bb->dtype || (a->dtype != LOOM_F16 && a->dtype != LOOM_BF16)))
        FAIL("a is %s and b is %s; both must be f16, both bf16, or each e4m3 or e5m2", ts(a, b1), ts(bb, b2));
    if (fp8 && !wgmma_fp8_operands(c, a, bb))
        return false;
    int64_t M = a->shape.dim[0], K = a->shape.dim[1], N = bb->shape.dim[1];
    if (bb->shape.dim[0] != K)
        FAIL("inner dims differ: a is %s, b is %s", ts(a, b1), ts(bb, b2));
    if (acc->shape.dim[0] != M || acc->shape.dim[1] != N)
        FAIL("the accumulator is %s but a @ b is %lldx%lld", ts(acc, b3), (long long)M, (long long)N);
    if (M % 64)
        FAIL("M is %lld; wgmma needs a multiple of 64 rows", (long long)M);
    if (K % (fp8 ? 32 : 16))
        FAIL("K is %lld; wgmma needs a multiple of %d%s", (long long)K, fp8 ? 32 : 16, fp8 ? " with FP8 operands" : "");
    if (N % 8 || N > 256)
        FAIL("N is %lld; wgmma needs a multiple of 8 up to 256", (long long)N);
    if (!in_task(c))
        return false;
    return emit(c, *acc);
}

static bool rule_wgmma_wait(rule_ctx *c)
{
    if (!rule_no_result(c))
        return false;
    for (int i = 0; i < c->op->nopnd; i++) {
        char b[64];
        if (T(c, i)->kind != IR_T_TILE || T(c, i)->dtype != LOOM_F32)
            FAIL("operand %d is %s; wgmma_wait takes f32 accumulators", i, ts(T(c, i), b));
        if (!emit(c, *T(c, i)))
            FAIL("too many accumulators");
    }
    return true;
}

static bool rule_task(rule_ctx *c)
{
    int64_t w = c->op->iattr[0], regs = c->op->iattr[1], rep = c->op->iattr[2];
    if (c->op->block != 1)
        FAIL("a task goes at the top level of the kernel, not inside a loop, if or task");
    if (w < 1 || w > 32)
        FAIL("a task has 1 to 32 warps, not %lld", (long long)w);
    if (rep < 1 || rep > 8)
        FAIL("a task has 1 to 8 replicas, not %lld", (long long)rep);
    if (regs && (regs < 24 || regs > 256 || regs % 8))
        FAIL("register budget %lld must be 0 (none) or a multiple of 8 from 24 to 256",
             (long long)regs);
    if (regs && w % 4)
        FAIL("a register budget needs whole warp groups: %lld warps is not a multiple of 4",
             (long long)w);
    return true;
}

static bool rule_task_replica(rule_ctx *c)
{
    return in_task(c) && emit(c, tile(LOOM_I32, LOOM_SCALAR));
}

static bool rule_cluster_rank(rule_ctx *c)
{
    return want_nopnd(c, 0) && emit(c, tile(LOOM_I32, LOOM_SCALAR));
}

/* ---------------------------------------------------------------- dispatch */

typedef bool (*rule_fn)(rule_ctx *);
static const rule_fn rules[IR_OP_COUNT] = {
#define LOOM_OP(E, n, nop, nreg, rule, fl, sem, lay, pr, attrs) [IR_##E] = rule_##rule,
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
