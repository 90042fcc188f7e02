/*
 * print.c -- the stable text form of the IR.
 *
 * Golden tests compare this text, so it changes only on purpose.  Values are renumbered
 * in the order they are printed (%0, %1, ...) so the text does not depend on handles
 * left unused by rejected ops; arguments print by name, and a value named with
 * loom_name() prints as %name.N.  Example:
 *
 *   kernel vecadd(%x: tensor<f32[1000]> in, %out: tensor<f32[1000]> out) warps=4 {
 *     %0 = program_id 0 : i32
 *     %1 = load %x[%0] shape=[256] fill=0 : f32[256]
 *     store %out[%0], %1
 *   }
 */
#include "ir.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct pbuf {
    char *s;
    size_t n, cap;
    bool oom;
    uint32_t *num; /* value handle -> printed number + 1 */
    uint32_t next;
} pbuf;

static void put(pbuf *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(pbuf *p, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int w = vsnprintf(p->s ? p->s + p->n : NULL, p->cap - p->n, fmt, ap); /* (NULL + 0 is UB) */
        va_end(ap);
        if (w < 0)
            return;
        if (p->n + (size_t)w < p->cap) {
            p->n += (size_t)w;
            return;
        }
        size_t nc = (p->cap + (size_t)w) * 2;
        char *ns = realloc(p->s, nc);
        if (!ns) {
            p->oom = true;
            return;
        }
        p->s = ns;
        p->cap = nc;
    }
}

static void name_val(loom_kernel *k, pbuf *p, uint32_t v)
{
    if (v && v < k->nvals && !p->num[v])
        p->num[v] = ++p->next;
}

static void val(loom_kernel *k, pbuf *p, uint32_t v)
{
    if (!v || v >= k->nvals) {
        put(p, "%%<none>");
        return;
    }
    ir_value *x = ir_val(k, v);
    if (x->kind == IR_V_ARG)
        put(p, "%%%s", x->name);
    else if (x->name)
        put(p, "%%%s.%u", x->name, p->num[v] ? p->num[v] - 1 : 0);
    else
        put(p, "%%%u", p->num[v] ? p->num[v] - 1 : 0);
}

static void type(pbuf *p, const ir_type *t)
{
    char b[64];
    put(p, "%s", ir_type_str(t, b, sizeof b));
}

static void shape(pbuf *p, const loom_shape *s)
{
    put(p, "[");
    for (int i = 0; i < s->rank; i++)
        put(p, "%s%lld", i ? "x" : "", (long long)s->dim[i]);
    put(p, "]");
}

static void indent(pbuf *p, int depth)
{
    for (int i = 0; i < depth; i++)
        put(p, "  ");
}

static void fnum(pbuf *p, double x) { put(p, "%.9g", x); }

static void print_block(loom_kernel *k, pbuf *p, uint32_t b, int depth);

static const char *pred_name(int64_t p)
{
    static const char *n[] = {"eq", "ne", "lt", "le", "gt", "ge"};
    return p >= 0 && p < 6 ? n[p] : "?";
}

/* ---------------------------------------------------------------- ops */

/* What follows an op's name is its form, print_<form>() for the `print` column of
 * dsl/ops.h, then the attributes its `attrs` column names, as name=value. */

/* " %a, %b" */
static void print_opnds(loom_kernel *k, pbuf *p, const ir_op *op)
{
    for (int i = 0; i < op->nopnd; i++) {
        put(p, i ? ", " : " ");
        val(k, p, op->opnd[i]);
    }
}

/* "program_id 0", "reduce_sum %3, axis=1" */
static void print_axis(loom_kernel *k, pbuf *p, const ir_op *op)
{
    for (int i = 0; i < op->nopnd; i++) {
        put(p, " ");
        val(k, p, op->opnd[i]);
    }
    put(p, op->nopnd ? ", axis=%lld" : " %lld", (long long)op->iattr[0]);
}

static void print_const(loom_kernel *k, pbuf *p, const ir_op *op)
{
    (void)k;
    put(p, " ");
    if (ir_dtype_is_float((loom_dtype)op->iattr[0]))
        fnum(p, op->fattr);
    else
        put(p, "%lld", (long long)op->iattr[1]);
}

static void print_arange(loom_kernel *k, pbuf *p, const ir_op *op)
{
    (void)k;
    put(p, " %lld, %lld", (long long)op->iattr[0], (long long)op->iattr[1]);
}

static void print_cmp(loom_kernel *k, pbuf *p, const ir_op *op)
{
    put(p, " %s", pred_name(op->iattr[0]));
    print_opnds(k, p, op);
}

/* "load %x[%0, %1] shape=[...] mask=%m fill=F", "store %out[%0], %v", "load_rows %x[rows=%r,
 * %1] ..." */
static void print_access(loom_kernel *k, pbuf *p, const ir_op *op)
{
    int t_rank = op->nopnd && ir_valid(k, op->opnd[0]) && ir_val(k, op->opnd[0])->type.kind == IR_T_TENSOR
                     ? ir_val(k, op->opnd[0])->type.shape.rank
                     : 0;
    int first = op->kind == IR_LOAD_ROWS ? 2 : 1;
    put(p, " ");
    val(k, p, op->opnd[0]);
    put(p, "[");
    for (int i = 0; i < t_rank; i++) {
        if (i)
            put(p, ", ");
        if (i == 0 && op->kind == IR_LOAD_ROWS) {
            put(p, "rows=");
            val(k, p, op->opnd[1]);
        } else {
            val(k, p, op->opnd[first + i]);
        }
    }
    put(p, "]");
    int rest = first + t_rank;
    if (op->kind == IR_STORE) {
        put(p, ", ");
        val(k, p, op->opnd[rest++]);
    }
    if (op->kind == IR_LOAD || op->kind == IR_LOAD_ROWS) {
        put(p, " shape=");
        shape(p, &op->shape);
    }
    if ((op->kind == IR_LOAD || op->kind == IR_STORE) && op->iattr[0]) {
        put(p, " mask=");
        val(k, p, op->opnd[rest]);
    }
    if (op->kind == IR_LOAD || op->kind == IR_LOAD_ROWS) {
        put(p, " fill=");
        fnum(p, op->fattr);
    }
}

/* "for %iv = %lo to %hi step %s iter(%arg = %init, ...)" */
static void print_for(loom_kernel *k, pbuf *p, const ir_op *op)
{
    ir_block *body = ir_blk(k, op->reg[0]);
    for (uint32_t i = 0; i < body->nargs; i++)
        name_val(k, p, body->args[i]);
    put(p, " ");
    if (body->nargs)
        val(k, p, body->args[0]);
    put(p, " = ");
    val(k, p, op->opnd[0]);
    put(p, " to ");
    val(k, p, op->opnd[1]);
    put(p, " step ");
    val(k, p, op->opnd[2]);
    if (op->nopnd > 3) {
        put(p, " iter(");
        for (int i = 3; i < op->nopnd; i++) {
            if (i > 3)
                put(p, ", ");
            if ((uint32_t)(i - 2) < body->nargs)
                val(k, p, body->args[i - 2]);
            put(p, " = ");
            val(k, p, op->opnd[i]);
        }
        put(p, ")");
    }
}

/* "smem_alloc f16[64x64] ..." (the dtype in iattr[2]) */
static void print_tile(loom_kernel *k, pbuf *p, const ir_op *op)
{
    (void)k;
    put(p, " %s", loom_dtype_name((loom_dtype)op->iattr[2]));
    shape(p, &op->shape);
}

/* "broadcast %3 to [64x64]" */
static void print_to_shape(loom_kernel *k, pbuf *p, const ir_op *op)
{
    print_opnds(k, p, op);
    put(p, " to ");
    shape(p, &op->shape);
}

typedef void (*print_fn)(loom_kernel *, pbuf *, const ir_op *);
static const struct {
    print_fn form;
    const char *attrs; /* names of iattr[0], iattr[1], ..., separated by spaces */
} forms[IR_OP_COUNT] = {
#define LOOM_OP(E, n, nop, nreg, rule, fl, sem, lay, pr, attrs) [IR_##E] = {print_##pr, attrs},
#include "ops.h"
#undef LOOM_OP
};

static void print_op(loom_kernel *k, pbuf *p, uint32_t o, int depth)
{
    ir_op *op = ir_opp(k, o);
    for (int i = 0; i < op->nres; i++)
        name_val(k, p, op->res[i]);
    indent(p, depth);
    for (int i = 0; i < op->nres; i++) {
        if (i)
            put(p, ", ");
        val(k, p, op->res[i]);
    }
    if (op->nres)
        put(p, " = ");
    put(p, "%s", ir_opdescs[op->kind].name);
    forms[op->kind].form(k, p, op);
    const char *names = forms[op->kind].attrs;
    for (int i = 0; *names; i++) {
        int len = (int)strcspn(names, " ");
        put(p, " %.*s=%lld", len, names, (long long)op->iattr[i]);
        names += len + (names[len] == ' ');
    }
    if (op->nres) {
        put(p, " : ");
        for (int i = 0; i < op->nres; i++) {
            if (i)
                put(p, ", ");
            type(p, &ir_val(k, op->res[i])->type);
        }
    }
    if (op->nreg) {
        put(p, " {\n");
        for (int r = 0; r < op->nreg; r++) {
            if (!op->reg[r])
                continue;
            if (r == 1) {
                indent(p, depth);
                put(p, "} else {\n");
            }
            print_block(k, p, op->reg[r], depth + 1);
        }
        indent(p, depth);
        put(p, "}");
    }
    put(p, "\n");
}

static void print_block(loom_kernel *k, pbuf *p, uint32_t b, int depth)
{
    ir_block *blk = ir_blk(k, b);
    for (uint32_t i = 0; i < blk->nops; i++)
        print_op(k, p, blk->ops[i], depth);
}

const char *loom_print(loom_kernel *k)
{
    if (!k)
        return "";
    if (k->printed && k->printed_gen == k->gen + 1)
        return k->printed;
    pbuf p = {0};
    p.num = calloc(k->nvals + 1, sizeof(uint32_t));
    if (!p.num)
        return "<out of memory>";
    put(&p, "kernel %s(", k->name);
    static const char *acc[] = {"", "in", "out", "inout"};
    for (int i = 0; i < k->nargs; i++) {
        ir_arg *a = &k->args[i];
        put(&p, "%s%%%s: ", i ? ", " : "", a->name);
        bool dyn = false;
        for (int d = 0; a->is_tensor && d < a->shape.rank; d++)
            dyn = dyn || a->dyn[d];
        if (dyn) {
            /* run-time dims by their argument's name; their maxima are not part of the code */
            put(&p, "tensor<%s[", loom_dtype_name(a->dtype));
            for (int d = 0; d < a->shape.rank; d++)
                if (a->dyn[d])
                    put(&p, "%s%%%s", d ? "x" : "", k->args[a->dyn[d] - 1].name);
                else
                    put(&p, "%s%lld", d ? "x" : "", (long long)a->shape.dim[d]);
            put(&p, "]>");
        } else {
            type(&p, &ir_val(k, a->value)->type);
        }
        if (a->is_dim) {
            put(&p, " dim");
            if (a->dim_multiple > 1)
                put(&p, " multiple=%lld", (long long)a->dim_multiple);
        }
        if (a->is_tensor) {
            put(&p, " %s", acc[a->access & 3]);
            bool contiguous = true;
            int64_t st = 1;
            for (int d = a->shape.rank - 1; d >= 0; d--) {
                contiguous = contiguous && a->strides[d] == st;
                if (__builtin_mul_overflow(st, a->shape.dim[d], &st))
                    st = -1; /* dims past 2^63 elements: no stride is that */
            }
            if (!contiguous) {
                put(&p, " strides=[");
                for (int d = 0; d < a->shape.rank; d++)
                    put(&p, "%s%lld", d ? "," : "", (long long)a->strides[d]);
                put(&p, "]");
            }
        }
    }
    put(&p, ") warps=%d", k->num_warps);
    if (k->cluster > 1)
        put(&p, " cluster=%d", k->cluster);
    if (k->ws_consumers)
        put(&p, " autows=(consumers=%d stages=%d pingpong=%d)", k->ws_consumers, k->ws_stages, k->ws_pingpong);
    put(&p, " {\n");
    print_block(k, &p, 1, 1);
    put(&p, "}\n");
    free(p.num);
    if (p.oom) {
        free(p.s);
        return "<out of memory>";
    }
    free(k->printed);
    k->printed = p.s;
    k->printed_gen = k->gen + 1;
    return p.s ? p.s : "";
}

/* The printer numbers values in print order, so the name of one value is found by
 * numbering the whole kernel as loom_print does (used only for error messages). */
const char *ir_value_label(loom_kernel *k, uint32_t v, char *buf, size_t n)
{
    if (!n)
        return buf;
    snprintf(buf, n, "%%?");
    if (!k)
        return buf;
    v &= IR_MAX_VALUES - 1; /* an index, or a public handle (ir.h): its kernel tag dropped */
    pbuf p = {0};
    p.num = calloc(k->nvals + 1, sizeof(uint32_t));
    if (!p.num)
        return buf;
    print_block(k, &p, 1, 1);
    pbuf q = {0};
    q.num = p.num;
    val(k, &q, v);
    if (!q.oom && q.s)
        snprintf(buf, n, "%s", q.s);
    free(p.s);
    free(q.s);
    free(p.num);
    return buf;
}

/* ---------------------------------------------------------------- where a wait is stuck */

const char *ir_words_task(char *buf, size_t n, const char *file, int line, int replica)
{
    snprintf(buf, n, "task at %s:%d (replica %d)", file ? file : "?", line, replica);
    return buf;
}

const char *ir_words_bar(char *buf, size_t n, const char *label, long long i)
{
    snprintf(buf, n, "%s[%lld]", label, i);
    return buf;
}

const char *ir_words_mbar_wait(char *buf, size_t n, const char *bar, int parity, const char *file, int line)
{
    snprintf(buf, n, "on barrier %s for phase parity %d at %s:%d", bar, parity, file ? file : "?", line);
    return buf;
}

const char *ir_words_flag_wait(char *buf, size_t n, const char *file, int line, const char *flags, long long off,
                               long long target, long long value)
{
    snprintf(buf, n, "at %s:%d for %s[%lld] >= %lld; it is %lld", file ? file : "?", line, flags, off, target,
             value);
    return buf;
}
