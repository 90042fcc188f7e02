/*
 * interp.c -- the interpreter: the executable definition of the DSL.
 *
 * How it works: the kernel runs once per program of the grid, in order (x fastest).
 * Every SSA value has one slot holding a whole tile (its shape is static, so the
 * buffer is allocated once and reused when a loop runs the op again).  Floats of every
 * width are held as f32 values that are already rounded to their dtype; integers as
 * int64 values already wrapped to their width.  An op reads its operands' slots and
 * writes its results'; a yield copies into the loop's carried slots or the if's
 * results.
 *
 * Memory is touched only through the buffers given to interp_run, element by element,
 * after a bounds check: an access outside a buffer, or a leading-dimension offset or
 * gathered row outside the tensor, stops the run with LOOM_ERR_BOUNDS and a message
 * naming the op's source line and the offending index.  Elements of the tiled
 * (trailing) dims that fall outside the tensor are masked, as the DSL says.
 *
 * Each op's semantics is interp_<name>() below (every elementwise op is `elementwise`,
 * which takes each element's value from the scalar semantics of dsl/ew.c, shared with
 * the constant folder), or, for the ops whose `sem` column in dsl/ops.h is hopper, in
 * the Hopper machinery (shared memory, barriers, TMA, wgmma,
 * tasks: dsl/interp_smem.c, interp_async.c, interp_tasks.c; each task replica of a CTA
 * runs as its own coroutine after the kernel body).  The dispatch table is generated
 * from dsl/ops.h, so an op without semantics does not link.  dsl/interp.h is what the
 * files share.
 */
#include "interp.h"

#include "ew.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

bool interp_fail(interp *in, loom_status st, const ir_op *op, const char *fmt, ...)
{
    if (in->st != LOOM_OK)
        return false;
    char body[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    in->st = st;
    char task[300] = "";
    if (in->task_op)
        snprintf(task, sizeof task, ", task at %s:%d (replica %d)",
                 in->task_op->src.file ? in->task_op->src.file : "?", in->task_op->src.line,
                 in->task_replica);
    if (in->err && in->errlen)
        snprintf(in->err, in->errlen, "%s:%d: error: op '%s' in program (%d,%d,%d)%s: %s",
                 op->src.file ? op->src.file : "?", op->src.line, ir_opdescs[op->kind].name,
                 in->pid[0], in->pid[1], in->pid[2], task, body);
    return false;
}

static bool is_f(uint8_t dt) { return ir_dtype_is_float((loom_dtype)dt); }

/* The slot of value v, allocated on first use (shared-memory and barrier values hold
 * references, set by the op that defines them). */
tv *interp_slot(interp *in, uint32_t v)
{
    tv *t = &in->env[v];
    if (!t->init) {
        const ir_type *ty = &in->k->vals[v].type;
        t->dt = ty->dtype;
        t->kind = ty->kind;
        t->shape = ty->shape;
        if (ty->kind == IR_T_SMEM || ty->kind == IR_T_MBAR) {
            t->n = 0;
            t->init = true;
            return t;
        }
        t->n = ir_shape_numel(&ty->shape);
        if (is_f(t->dt))
            t->f = calloc((size_t)t->n, sizeof(float));
        else
            t->i = calloc((size_t)t->n, sizeof(int64_t));
        if (!t->f && !t->i)
            return NULL;
        t->init = true;
    }
    return t;
}

void interp_copy_tv(tv *dst, const tv *src)
{
    if (dst->kind == IR_T_SMEM || dst->kind == IR_T_MBAR) {
        dst->obj = src->obj;
        dst->sidx = src->sidx;
        dst->trans = src->trans;
        dst->poff = src->poff;
        dst->prows = src->prows;
        dst->pcols = src->pcols;
    } else if (dst->f) {
        memcpy(dst->f, src->f, (size_t)dst->n * sizeof(float));
    } else {
        memcpy(dst->i, src->i, (size_t)dst->n * sizeof(int64_t));
    }
}

static float fval(const tv *t, int64_t e) { return t->f[t->n == 1 ? 0 : e]; }

/* ---------------------------------------------------------------- grid, constants, shapes */

typedef bool (*interp_fn)(interp *, const ir_op *);

static bool interp_program_id(interp *in, const ir_op *op)
{
    interp_res(in, op, 0)->i[0] = in->pid[op->iattr[0]];
    return true;
}

static bool interp_num_programs(interp *in, const ir_op *op)
{
    interp_res(in, op, 0)->i[0] = in->grid[op->iattr[0]];
    return true;
}

static bool interp_const(interp *in, const ir_op *op)
{
    tv *r = interp_res(in, op, 0);
    if (r->f)
        r->f[0] = (float)op->fattr;
    else
        r->i[0] = op->iattr[1];
    return true;
}

static bool interp_arange(interp *in, const ir_op *op)
{
    tv *r = interp_res(in, op, 0);
    for (int64_t e = 0; e < r->n; e++)
        r->i[e] = op->iattr[0] + e;
    return true;
}

static bool interp_splat(interp *in, const ir_op *op)
{
    tv *a = interp_opnd(in, op, 0), *r = interp_res(in, op, 0);
    for (int64_t e = 0; e < r->n; e++) {
        if (r->f)
            r->f[e] = a->f[0];
        else
            r->i[e] = a->i[0];
    }
    return true;
}

static bool interp_broadcast(interp *in, const ir_op *op)
{
    tv *a = interp_opnd(in, op, 0), *r = interp_res(in, op, 0);
    int64_t idx[LOOM_MAX_RANK];
    int off = r->shape.rank - a->shape.rank;
    for (int64_t e = 0; e < r->n; e++) {
        interp_unravel(&r->shape, e, idx);
        int64_t src = 0;
        for (int d = 0; d < a->shape.rank; d++)
            src = src * a->shape.dim[d] + (a->shape.dim[d] == 1 ? 0 : idx[off + d]);
        if (r->f)
            r->f[e] = a->f[src];
        else
            r->i[e] = a->i[src];
    }
    return true;
}

static bool interp_expand_dims(interp *in, const ir_op *op)
{
    interp_copy_tv(interp_res(in, op, 0), interp_opnd(in, op, 0)); /* same elements, same order */
    return true;
}

static bool interp_trans(interp *in, const ir_op *op)
{
    tv *a = interp_opnd(in, op, 0), *r = interp_res(in, op, 0);
    int64_t R = a->shape.dim[0], C = a->shape.dim[1];
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) {
            if (r->f)
                r->f[j * R + i] = a->f[i * C + j];
            else
                r->i[j * R + i] = a->i[i * C + j];
        }
    return true;
}

/* The elements [start, start + size) along dim: the tile as [outer, n, inner] (n its
 * extent along dim), each outer block's run of size * inner elements from start * inner. */
static bool interp_slice(interp *in, const ir_op *op)
{
    tv *a = interp_opnd(in, op, 0), *r = interp_res(in, op, 0);
    int dim = (int)op->iattr[0];
    int64_t start = op->iattr[1], size = op->iattr[2], outer = 1, inner = 1, n = a->shape.dim[dim];
    for (int d = 0; d < dim; d++)
        outer *= a->shape.dim[d];
    for (int d = dim + 1; d < a->shape.rank; d++)
        inner *= a->shape.dim[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < size * inner; i++) {
            int64_t from = (o * n + start) * inner + i, to = o * size * inner + i;
            if (r->f)
                r->f[to] = a->f[from];
            else
                r->i[to] = a->i[from];
        }
    return true;
}

/* ---------------------------------------------------------------- elementwise */

/* Every elementwise op: one element of the result from one element of each operand (a
 * scalar operand is splatted), by the scalar semantics of dsl/ew.c. */
static bool elementwise(interp *in, const ir_op *op)
{
    tv *r = interp_res(in, op, 0);
    const tv *a[3] = {0};
    int n = op->nopnd < 3 ? op->nopnd : 3;
    for (int i = 0; i < n; i++)
        a[i] = interp_opnd(in, op, i);
    loom_dtype din = (loom_dtype)a[op->kind == IR_SELECT ? 1 : 0]->dt, dout = (loom_dtype)r->dt;
    for (int64_t e = 0; e < r->n; e++) {
        ew_val x[3] = {{0, 0}, {0, 0}, {0, 0}}, z;
        for (int i = 0; i < n; i++) {
            if (a[i]->f)
                x[i].f = fval(a[i], e);
            else
                x[i].i = interp_ival(a[i], e);
        }
        ew_status st = ew_eval((ir_opkind)op->kind, op->iattr[0], din, dout, x, &z);
        if (st == EW_DIV_BY_ZERO)
            return interp_fail(in, LOOM_ERR_RUNTIME, op, "integer division by zero at element %lld", (long long)e);
        if (st != EW_OK)
            return interp_fail(in, LOOM_ERR_RUNTIME, op, "internal: not an elementwise op");
        if (r->f)
            r->f[e] = z.f;
        else
            r->i[e] = z.i;
    }
    return true;
}

#define interp_add elementwise
#define interp_sub elementwise
#define interp_mul elementwise
#define interp_div elementwise
#define interp_div_fast elementwise
#define interp_rem elementwise
#define interp_min elementwise
#define interp_max elementwise
#define interp_and elementwise
#define interp_or elementwise
#define interp_xor elementwise
#define interp_shl elementwise
#define interp_shr elementwise
#define interp_fma elementwise
#define interp_neg elementwise
#define interp_abs elementwise
#define interp_exp2 elementwise
#define interp_log2 elementwise
#define interp_rsqrt elementwise
#define interp_exp elementwise
#define interp_log elementwise
#define interp_tanh elementwise
#define interp_erf elementwise
#define interp_sigmoid elementwise
#define interp_sqrt elementwise
#define interp_rcp elementwise
#define interp_not elementwise
#define interp_cmp elementwise
#define interp_select elementwise
#define interp_cast elementwise

/* ---------------------------------------------------------------- reductions, dot */

static bool reduce(interp *in, const ir_op *op)
{
    tv *a = interp_opnd(in, op, 0), *r = interp_res(in, op, 0);
    int ax = (int)op->iattr[0];
    int64_t outer = 1, len = a->shape.dim[ax], inner = 1;
    for (int d = 0; d < ax; d++)
        outer *= a->shape.dim[d];
    for (int d = ax + 1; d < a->shape.rank; d++)
        inner *= a->shape.dim[d];
    /* combined by the elementwise add / max / min; floats in f32, rounded once at the end */
    ir_opkind comb = op->kind == IR_REDUCE_SUM ? IR_ADD : op->kind == IR_REDUCE_MAX ? IR_MAX : IR_MIN;
    loom_dtype acc_dt = a->f ? LOOM_F32 : (loom_dtype)r->dt;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * len * inner + i;
            ew_val acc = {a->f ? a->f[base] : 0, a->f ? 0 : a->i[base]};
            for (int64_t j = 1; j < len; j++) {
                ew_val x[2] = {acc, {a->f ? a->f[base + j * inner] : 0, a->f ? 0 : a->i[base + j * inner]}};
                ew_eval(comb, 0, acc_dt, acc_dt, x, &acc); /* add, max, min: never an error */
            }
            if (a->f)
                r->f[o * inner + i] = ir_round_to((loom_dtype)r->dt, acc.f);
            else
                r->i[o * inner + i] = acc.i;
        }
    return true;
}

#define interp_reduce_sum reduce
#define interp_reduce_max reduce
#define interp_reduce_min reduce

static bool interp_dot(interp *in, const ir_op *op)
{
    tv *a = interp_opnd(in, op, 0), *b = interp_opnd(in, op, 1), *c = interp_opnd(in, op, 2), *r = interp_res(in, op, 0);
    int64_t M = a->shape.dim[0], K = a->shape.dim[1], N = b->shape.dim[1];
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float acc = c->f[m * N + n];
            for (int64_t kk = 0; kk < K; kk++)
                acc = fmaf(a->f[m * K + kk], b->f[kk * N + n], acc);
            r->f[m * N + n] = acc;
        }
    return true;
}

/* ---------------------------------------------------------------- memory */

/* Read / write element at linear element offset `off` of a tensor, with a buffer check. */
bool interp_mem_read(interp *in, const ir_op *op, tref t, int64_t off, float *f, int64_t *i)
{
    size_t sz = loom_dtype_size(t.arg->dtype);
    if (off < 0 || (size_t)off * sz + sz > t.buf->bytes || !t.buf->data)
        return interp_fail(in, LOOM_ERR_BOUNDS, op,
                    "read of element %lld of '%s' is outside its buffer of %zu bytes", (long long)off,
                    t.arg->name, t.buf->bytes);
    const unsigned char *p = (const unsigned char *)t.buf->data + (size_t)off * sz;
    switch (t.arg->dtype) {
    case LOOM_F16: { uint16_t h; memcpy(&h, p, 2); *f = ir_f16_to_f32(h); break; }
    case LOOM_BF16: { uint16_t h; memcpy(&h, p, 2); *f = ir_bf16_to_f32(h); break; }
    case LOOM_F32: memcpy(f, p, 4); break;
    case LOOM_I32: { int32_t x; memcpy(&x, p, 4); *i = x; break; }
    case LOOM_I64: memcpy(i, p, 8); break;
    case LOOM_I1: *i = p[0] != 0; break;
    case LOOM_E4M3:
    case LOOM_E5M2: *f = ir_fp8_to_f32(t.arg->dtype, p[0]); break;
    default: break;
    }
    return true;
}

bool interp_mem_write(interp *in, const ir_op *op, tref t, int64_t off, float f, int64_t i)
{
    size_t sz = loom_dtype_size(t.arg->dtype);
    if (off < 0 || (size_t)off * sz + sz > t.buf->bytes || !t.buf->data)
        return interp_fail(in, LOOM_ERR_BOUNDS, op,
                    "write of element %lld of '%s' is outside its buffer of %zu bytes",
                    (long long)off, t.arg->name, t.buf->bytes);
    unsigned char *p = (unsigned char *)t.buf->data + (size_t)off * sz;
    switch (t.arg->dtype) {
    case LOOM_F16: { uint16_t h = ir_f32_to_f16(f); memcpy(p, &h, 2); break; }
    case LOOM_BF16: { uint16_t h = ir_f32_to_bf16(f); memcpy(p, &h, 2); break; }
    case LOOM_F32: memcpy(p, &f, 4); break;
    case LOOM_I32: { int32_t x = (int32_t)i; memcpy(p, &x, 4); break; }
    case LOOM_I64: memcpy(p, &i, 8); break;
    case LOOM_I1: p[0] = i != 0; break;
    case LOOM_E4M3:
    case LOOM_E5M2: p[0] = ir_f32_to_fp8(t.arg->dtype, f); break;
    default: break;
    }
    return true;
}

/* Check the leading (untiled) offsets of a block access: each must index the tensor. */
static bool check_leading(interp *in, const ir_op *op, tref t, const int64_t *base, int lead,
                          int first_dim)
{
    for (int d = first_dim; d < lead; d++)
        if (base[d] < 0 || base[d] >= t.arg->shape.dim[d])
            return interp_fail(in, LOOM_ERR_BOUNDS, op,
                        "offset %lld of dim %d is outside tensor '%s' of size %lld there",
                        (long long)base[d], d, t.arg->name, (long long)t.arg->shape.dim[d]);
    return true;
}

/* Element e of a block at base offsets: its tensor element offset, or -1 if masked. */
static int64_t block_elem(tref t, const loom_shape *ts, const int64_t *base, int64_t e,
                          int64_t row_override)
{
    int r = t.arg->shape.rank, lead = r - ts->rank;
    int64_t idx[LOOM_MAX_RANK];
    interp_unravel(ts, e, idx);
    int64_t off = 0;
    for (int d = 0; d < r; d++) {
        int64_t x;
        if (d < lead)
            x = base[d];
        else if (d == 0 && row_override >= 0)
            x = row_override;
        else
            x = base[d] + idx[d - lead];
        if (x < 0 || x >= t.arg->shape.dim[d])
            return -1;
        off += x * t.arg->strides[d];
    }
    return off;
}

static void read_offsets(interp *in, const ir_op *op, int first, int r, int64_t *base)
{
    for (int d = 0; d < r; d++)
        base[d] = interp_ival(interp_opnd(in, op, first + d), 0);
}

static bool interp_load(interp *in, const ir_op *op)
{
    tref t = interp_tensor_of(in, op);
    int r = t.arg->shape.rank;
    int64_t base[LOOM_MAX_RANK];
    read_offsets(in, op, 1, r, base);
    tv *res0 = interp_res(in, op, 0);
    tv *mask = op->iattr[0] ? interp_opnd(in, op, 1 + r) : NULL;
    if (!check_leading(in, op, t, base, r - op->shape.rank, 0))
        return false;
    for (int64_t e = 0; e < res0->n; e++) {
        int64_t off = (mask && !mask->i[e]) ? -1 : block_elem(t, &op->shape, base, e, -1);
        float f = (float)op->fattr;
        int64_t i = (int64_t)op->fattr;
        if (off >= 0 && !interp_mem_read(in, op, t, off, &f, &i))
            return false;
        if (res0->f)
            res0->f[e] = f;
        else
            res0->i[e] = i;
    }
    return true;
}

static bool interp_load_scalar(interp *in, const ir_op *op)
{
    tref t = interp_tensor_of(in, op);
    int r = t.arg->shape.rank;
    int64_t base[LOOM_MAX_RANK];
    read_offsets(in, op, 1, r, base);
    if (!check_leading(in, op, t, base, r, 0))
        return false;
    int64_t off = 0;
    for (int d = 0; d < r; d++)
        off += base[d] * t.arg->strides[d];
    tv *r0 = interp_res(in, op, 0);
    float f = 0;
    int64_t i = 0;
    if (!interp_mem_read(in, op, t, off, &f, &i))
        return false;
    if (r0->f)
        r0->f[0] = f;
    else
        r0->i[0] = i;
    return true;
}

/* The flag element of a flag op (after the offsets' bounds check), or -1. */
static int64_t flag_elem(interp *in, const ir_op *op, tref t)
{
    int r = t.arg->shape.rank;
    int64_t base[LOOM_MAX_RANK], off = 0;
    read_offsets(in, op, 1, r, base);
    if (!check_leading(in, op, t, base, r, 0))
        return -1;
    for (int d = 0; d < r; d++)
        off += base[d] * t.arg->strides[d];
    return off;
}

/* Once per program or task replica: flags[offs] += v. */
static bool interp_flag_add(interp *in, const ir_op *op)
{
    tref t = interp_tensor_of(in, op);
    int64_t off = flag_elem(in, op, t), x = 0;
    float f = 0;
    if (off < 0 || !interp_mem_read(in, op, t, off, &f, &x))
        return false;
    x += interp_ival(interp_opnd(in, op, 1 + t.arg->shape.rank), 0);
    if (!interp_mem_write(in, op, t, off, 0, x))
        return false;
    interp_flag_added(in);
    return true;
}

/* Once per program or task replica: old = t[offs], t[offs] = old + v (wrapped), result old.
 * Programs run side by side are coroutines, so nothing runs between the read and the
 * write: the add is atomic.  Then the program gives way to the next (interp_atomic_yield),
 * so the claims of programs side by side interleave. */
static bool interp_atomic_add(interp *in, const ir_op *op)
{
    tref t = interp_tensor_of(in, op);
    int64_t off = flag_elem(in, op, t), x = 0;
    float f = 0;
    if (off < 0 || !interp_mem_read(in, op, t, off, &f, &x))
        return false;
    int64_t v = interp_ival(interp_opnd(in, op, 1 + t.arg->shape.rank), 0);
    if (!interp_mem_write(in, op, t, off, 0, x + v))
        return false;
    interp_res(in, op, 0)->i[0] = x;
    interp_flag_added(in);
    return interp_atomic_yield(in);
}

/* Until flags[offs] >= target: other programs run meanwhile (interp_flag_block). */
static bool interp_flag_wait(interp *in, const ir_op *op)
{
    tref t = interp_tensor_of(in, op);
    int64_t off = flag_elem(in, op, t);
    int64_t target = interp_ival(interp_opnd(in, op, 1 + t.arg->shape.rank), 0);
    for (;;) {
        int64_t x = 0;
        float f = 0;
        if (off < 0 || !interp_mem_read(in, op, t, off, &f, &x))
            return false;
        if (x >= target)
            return true;
        if (!interp_flag_block(in, op, t, off, target))
            return false;
    }
}

static bool interp_load_rows(interp *in, const ir_op *op)
{
    tref t = interp_tensor_of(in, op);
    int r = t.arg->shape.rank;
    int64_t base[LOOM_MAX_RANK];
    read_offsets(in, op, 2, r, base);
    tv *rows = interp_opnd(in, op, 1), *r0 = interp_res(in, op, 0);
    int64_t per_row = r0->n / op->shape.dim[0];
    for (int64_t e = 0; e < r0->n; e++) {
        int64_t row = rows->i[e / per_row];
        if (row < 0 || row >= t.arg->shape.dim[0])
            return interp_fail(in, LOOM_ERR_BOUNDS, op,
                        "gathered row %lld (index element %lld) is outside tensor '%s' of %lld rows",
                        (long long)row, (long long)(e / per_row), t.arg->name,
                        (long long)t.arg->shape.dim[0]);
        int64_t off = block_elem(t, &op->shape, base, e, row);
        float f = (float)op->fattr;
        int64_t i = (int64_t)op->fattr;
        if (off >= 0 && !interp_mem_read(in, op, t, off, &f, &i))
            return false;
        if (r0->f)
            r0->f[e] = f;
        else
            r0->i[e] = i;
    }
    return true;
}

static bool interp_store(interp *in, const ir_op *op)
{
    tref t = interp_tensor_of(in, op);
    int r = t.arg->shape.rank;
    int64_t base[LOOM_MAX_RANK];
    read_offsets(in, op, 1, r, base);
    tv *v = interp_opnd(in, op, 1 + r);
    tv *mask = op->iattr[0] ? interp_opnd(in, op, 2 + r) : NULL;
    if (!check_leading(in, op, t, base, r - v->shape.rank, 0))
        return false;
    for (int64_t e = 0; e < v->n; e++) {
        if (mask && !mask->i[e])
            continue;
        int64_t off = block_elem(t, &v->shape, base, e, -1);
        if (off >= 0 && !interp_mem_write(in, op, t, off, v->f ? v->f[e] : 0, v->i ? v->i[e] : 0))
            return false;
    }
    return true;
}

/* ---------------------------------------------------------------- control flow */

static bool interp_for(interp *in, const ir_op *op)
{
    int64_t lo = interp_ival(interp_opnd(in, op, 0), 0), hi = interp_ival(interp_opnd(in, op, 1), 0),
            step = interp_ival(interp_opnd(in, op, 2), 0);
    if (step <= 0)
        return interp_fail(in, LOOM_ERR_RUNTIME, op, "loop step is %lld; it must be positive", (long long)step);
    const ir_block *body = &in->k->blocks[op->reg[0]];
    tv *iv = interp_slot(in, body->args[0]);
    int nc = op->nres;
    for (int i = 0; i < nc; i++)
        interp_copy_tv(interp_slot(in, body->args[1 + i]), interp_opnd(in, op, 3 + i));
    for (int64_t x = lo; x < hi; x += step) {
        iv->i[0] = x;
        const ir_op *y = interp_exec_block(in, op->reg[0]);
        if (!y)
            return false;
        /* two steps, so that yielding carried values in another order works */
        tv tmp[64];
        for (int i = 0; i < nc; i++) {
            tv *src = &in->env[y->opnd[i]];
            tmp[i] = *src;
            size_t bytes = (size_t)src->n * (src->f ? sizeof(float) : sizeof(int64_t));
            void *p = malloc(bytes);
            if (!p)
                return interp_fail(in, LOOM_ERR_NOMEM, op, "out of memory");
            memcpy(p, src->f ? (void *)src->f : (void *)src->i, bytes);
            if (src->f)
                tmp[i].f = p;
            else
                tmp[i].i = p;
        }
        for (int i = 0; i < nc; i++) {
            interp_copy_tv(&in->env[body->args[1 + i]], &tmp[i]);
            free(tmp[i].f ? (void *)tmp[i].f : (void *)tmp[i].i);
        }
    }
    for (int i = 0; i < nc; i++)
        interp_copy_tv(interp_res(in, op, i), &in->env[body->args[1 + i]]);
    return true;
}

static bool interp_if(interp *in, const ir_op *op)
{
    bool c = interp_ival(interp_opnd(in, op, 0), 0) != 0;
    uint32_t b = c ? op->reg[0] : op->reg[1];
    if (!b)
        return true;
    const ir_op *y = interp_exec_block(in, b);
    if (!y)
        return false;
    for (int i = 0; i < op->nres; i++)
        interp_copy_tv(interp_res(in, op, i), &in->env[y->opnd[i]]);
    return true;
}

static bool interp_yield(interp *in, const ir_op *op)
{
    (void)in;
    (void)op;
    return true; /* the enclosing for/if reads the yielded values */
}

/* The Hopper ops (sem column hopper) are declared in dsl/interp.h. */

static const interp_fn dispatch[IR_OP_COUNT] = {
#define LOOM_OP(E, n, nop, nreg, rule, fl, sem, lay, pr, attrs) [IR_##E] = interp_##n,
#include "ops.h"
#undef LOOM_OP
};

bool interp_has_semantics(int kind) { return kind > 0 && kind < IR_OP_COUNT && dispatch[kind] != NULL; }


/* Run block b; return its yield op (or a dummy for the body), NULL on error. */
const ir_op *interp_exec_block(interp *in, uint32_t b)
{
    static const ir_op none = {0};
    const ir_block *blk = &in->k->blocks[b];
    const ir_op *last = &none;
    for (uint32_t i = 0; i < blk->nops; i++) {
        const ir_op *op = &in->k->ops[blk->ops[i]];
        for (int r = 0; r < op->nres; r++)
            if (!interp_slot(in, op->res[r])) {
                interp_fail(in, LOOM_ERR_NOMEM, op, "out of memory for a tile");
                return NULL;
            }
        if (!dispatch[op->kind](in, op))
            return NULL;
        last = op;
    }
    return last;
}

loom_status interp_run(loom_kernel *k, const int grid[3], const interp_arg *args, char *err,
                       size_t errlen)
{
    /* the tensors' shapes at this launch's run-time dims */
    ir_arg targs[LOOM_MAX_ARGS];
    int32_t dimval[LOOM_MAX_ARGS] = {0};
    for (int a = 0; a < k->nargs; a++)
        dimval[a] = k->args[a].is_dim ? args[a].s.i32 : 0;
    for (int a = 0; a < k->nargs; a++) {
        targs[a] = k->args[a];
        if (targs[a].is_tensor)
            ir_arg_shape_at(k, a, dimval, &targs[a].shape, &targs[a].min_bytes);
    }
    interp in = {.k = k, .args = args, .targs = targs, .err = err, .errlen = errlen};
    if (err && errlen)
        err[0] = 0;
    in.env = in.main_env = calloc(k->nvals, sizeof(tv));
    if (!in.env)
        return LOOM_ERR_NOMEM;
    for (int d = 0; d < 3; d++)
        in.grid[d] = grid[d];
    /* scalar arguments */
    for (int a = 0; a < k->nargs && in.st == LOOM_OK; a++) {
        if (k->args[a].is_tensor)
            continue;
        tv *t = interp_slot(&in, k->args[a].value);
        if (!t) {
            in.st = LOOM_ERR_NOMEM;
            break;
        }
        if (k->args[a].dtype == LOOM_F32)
            t->f[0] = args[a].s.f32;
        else if (k->args[a].dtype == LOOM_I32)
            t->i[0] = args[a].s.i32;
        else
            t->i[0] = args[a].s.i64;
    }
    if (in.st == LOOM_OK && (ir_uses_op(k, IR_FLAG_WAIT) || k->cluster > 1 || ir_uses_op(k, IR_ATOMIC_ADD))) {
        in.st = interp_run_side_by_side(&in);
        goto done;
    }
    if (in.st == LOOM_OK)
        interp_hw_init(&in);
    /* one CTA after another; a CTA with tasks runs its body (allocations, scalars), then
     * its task replicas */
    for (int z = 0; z < grid[2] && in.st == LOOM_OK; z++)
        for (int y = 0; y < grid[1] && in.st == LOOM_OK; y++)
            for (int x = 0; x < grid[0] && in.st == LOOM_OK; x++) {
                in.pid[0] = x;
                in.pid[1] = y;
                in.pid[2] = z;
                if (!interp_exec_block(&in, 1)) {
                    if (in.st == LOOM_OK)
                        in.st = LOOM_ERR_NOMEM;
                } else {
                    interp_hw_run_tasks(&in);
                }
            }
    interp_hw_free(&in);
done:
    for (uint32_t v = 0; v < k->nvals; v++) {
        free(in.main_env[v].f);
        free(in.main_env[v].i);
    }
    free(in.main_env);
    return in.st;
}
