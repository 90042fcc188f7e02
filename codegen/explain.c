/*
 * explain.c -- what a kernel costs, in words: the layouts the layout pass chose and the
 * uses of shared memory the plan found (codegen/smem.c records them in cg->costs).
 *
 * The obvious way to write a kernel should compile to the fast form; where it cannot,
 * loom says so with the user's line and the cost.  Three readers:
 *
 *   - LOOM_EXPLAIN=1 prints the report to stderr at every compile (codegen/pipeline.c);
 *   - loom_kernel_explain (include/loom_runtime.h, section 4) hands each use to a callback as a
 *     loom_cost and the whole report as text, for tests and tools;
 *   - the refusal of a kernel that needs more shared memory than the GPU has lists the
 *     same lines, so the message says what to shrink.
 *
 * A line names the op's source line (the builder call), the op, what it is, its bytes,
 * its bar.sync count and how often it runs: once a program, or once an iteration of the
 * innermost loop around it (named by its line).  LOOM_DUMP_AFTER=layouts also prints
 * each tile value's layout (cg_dump_layouts), in words and as the linear layout's bits.
 */
#include "cg.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* A growing string (NULL data once out of memory). */
typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void sput(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sput(sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->n + (size_t)w < b->cap) {
            b->n += (size_t)w;
            return;
        }
        size_t nc = (b->cap ? b->cap * 2 : 256) + (size_t)w;
        char *n = realloc(b->s, nc);
        if (!n) {
            b->oom = true;
            return;
        }
        b->s = n;
        b->cap = nc;
        if (b->n == 0)
            b->s[0] = 0;
    }
}

/* ---------------------------------------------------------------- layouts in words */

static void put_bits(sbuf *b, const char *what, const cg_bit *bits, int n)
{
    sput(b, " %s[", what);
    for (int i = 0; i < n; i++)
        if (bits[i].dim < 0)
            sput(b, "%s-", i ? " " : "");
        else
            sput(b, "%sd%d.%d", i ? " " : "", bits[i].dim, bits[i].bit);
    sput(b, "]");
}

/* "wgmma accumulator", "blocked", "slice of #3 (wgmma accumulator)", ... */
static void layout_kind(cg_ctx *cg, int32_t id, sbuf *b, int depth)
{
    const cg_layout *l = cg_lay(cg, id);
    if (id < (int32_t)sizeof cg->is_mma && cg->is_mma[id]) {
        sput(b, "wgmma accumulator");
        return;
    }
    if (l->rank == 0) {
        sput(b, "scalar");
        return;
    }
    loom_shape s = {l->rank, {0}};
    for (int d = 0; d < l->rank; d++)
        s.dim[d] = l->shape[d];
    int saved = cg->warp_bits;
    cg->warp_bits = l->nwarp;
    for (int es = 1; es <= 8; es *= 2) {
        cg_layout bl;
        loom_status st = cg->st;
        if (cg_blocked(cg, &s, es, &bl) && cg_layout_eq(&bl, l)) {
            cg->warp_bits = saved;
            sput(b, "blocked");
            return;
        }
        cg->st = st; /* a refused shape here is only "not blocked" */
    }
    cg->warp_bits = saved;
    if (l->parent >= 0 && depth < 4) {
        sput(b, "a slice of #%d (", l->parent);
        layout_kind(cg, l->parent, b, depth + 1);
        sput(b, ")");
        return;
    }
    sput(b, "linear");
}

const char *cg_layout_str(cg_ctx *cg, int32_t id, char *buf, size_t n)
{
    if (id < 0) {
        snprintf(buf, n, "none");
        return buf;
    }
    const cg_layout *l = cg_lay(cg, id);
    sbuf b = {0};
    sput(&b, "#%d ", id);
    layout_kind(cg, id, &b, 0);
    sput(&b, " [");
    for (int d = 0; d < l->rank; d++)
        sput(&b, "%s%lld", d ? "x" : "", (long long)l->shape[d]);
    sput(&b, "], %d reg%s a thread,", cg_layout_regs(l), cg_layout_regs(l) == 1 ? "" : "s");
    put_bits(&b, "reg", l->reg, l->nreg);
    put_bits(&b, "lane", l->lane, 5);
    put_bits(&b, "warp", l->warp, l->nwarp);
    snprintf(buf, n, "%s", b.s ? b.s : "?");
    free(b.s);
    return buf;
}

static void value_words(cg_ctx *cg, uint32_t v, char *buf, size_t n)
{
    const loom_kernel *k = cg->k;
    const ir_value *x = &k->vals[v];
    char ty[64];
    ir_type_str(&x->type, ty, sizeof ty);
    if (x->kind == IR_V_RESULT) {
        const ir_op *d = &k->ops[x->def];
        snprintf(buf, n, "%s%s%s (%s at %s:%d)", x->name ? x->name : "", x->name ? " " : "", ty,
                 ir_opdescs[d->kind].name, d->src.file ? d->src.file : "?", d->src.line);
    } else if (x->kind == IR_V_BLOCKARG) {
        const ir_op *p = &k->ops[k->blocks[x->def].parent];
        snprintf(buf, n, "%s (carried by the loop at %s:%d)", ty, p->src.file ? p->src.file : "?", p->src.line);
    } else {
        snprintf(buf, n, "%s", ty);
    }
}

void cg_dump_layouts(cg_ctx *cg, FILE *f)
{
    loom_kernel *k = cg->k;
    fprintf(f, "// layouts of %s (each tile value: where it is made, its layout)\n", loom_kernel_name(k));
    char w[256], lay[512];
    for (uint32_t v = 1; v < k->nvals; v++) {
        const ir_value *x = &k->vals[v];
        if (x->type.kind != IR_T_TILE || x->type.shape.rank == 0 || cg->vlay[v] < 0)
            continue;
        if (x->kind == IR_V_RESULT && !k->ops[x->def].block)
            continue; /* an op the builder rejected */
        value_words(cg, v, w, sizeof w);
        fprintf(f, "  %%%u %s: %s%s%s\n", v, w, cg_layout_str(cg, cg->vlay[v], lay, sizeof lay),
                cg->remat[v] ? " (recomputed at each use)" : "", cg->soft[v] ? " (a splat start: the loop's layout)" : "");
    }
}

/* ---------------------------------------------------------------- costs in words */

/* Whether for loop p walks the programs (a persistent kernel's, or the loop the warp
 * specialization passes put around a plain kernel's program, built at the line of the
 * user's loop): its step is the number of programs, or a multiple of it. */
static bool programs_loop(const loom_kernel *k, uint32_t p)
{
    const ir_value *st = &k->vals[k->ops[p].opnd[2]];
    if (st->kind != IR_V_RESULT)
        return false;
    const ir_op *d = &k->ops[st->def];
    if (d->kind == IR_NUM_PROGRAMS)
        return true;
    for (int i = 0; d->kind == IR_MUL && i < d->nopnd; i++) {
        const ir_value *x = &k->vals[d->opnd[i]];
        if (x->kind == IR_V_RESULT && k->ops[x->def].kind == IR_NUM_PROGRAMS)
            return true;
    }
    return false;
}

/* The innermost for loop around op o inside its program, or 0. */
static uint32_t loop_of(const loom_kernel *k, uint32_t o)
{
    uint32_t b = k->ops[o].block;
    while (b > 1) {
        uint32_t p = k->blocks[b].parent;
        if (!p)
            break;
        if (k->ops[p].kind == IR_FOR)
            return programs_loop(k, p) ? 0 : p;
        b = k->ops[p].block;
    }
    return 0;
}

void cg_cost_fill(cg_ctx *cg, const cg_cost *c, loom_cost *out, char *text, size_t textlen)
{
    const loom_kernel *k = cg->k;
    const ir_op *op = &k->ops[c->op];
    bool runs = c->kind == LOOM_COST_CONVERT || c->kind == LOOM_COST_SCRATCH || c->kind == LOOM_COST_ARITH;
    uint32_t lp = runs ? loop_of(k, c->op) : 0;
    *out = (loom_cost){.kind = (loom_cost_kind)c->kind,
                       .file = op->src.file ? op->src.file : "?",
                       .line = op->src.line,
                       .op = ir_opdescs[op->kind].name,
                       .bytes = c->bytes,
                       .copies = c->copies,
                       .barriers = c->barriers,
                       .loop_file = lp ? (k->ops[lp].src.file ? k->ops[lp].src.file : "?") : NULL,
                       .loop_line = lp ? k->ops[lp].src.line : 0,
                       .text = text,
                       .elements = c->elements};
    char often[256] = "";
    if (runs) {
        if (lp)
            snprintf(often, sizeof often, ", each iteration of the loop at %s:%d", out->loop_file, out->loop_line);
        else
            snprintf(often, sizeof often, ", once a program");
    }
    char copies[64] = "";
    if (c->copies > 1)
        snprintf(copies, sizeof copies, " (in each of %d task replicas)", c->copies);
    switch (c->kind) {
    case LOOM_COST_CONVERT: {
        char v[256], from[256], to[256];
        value_words(cg, op->opnd[c->opnd], v, sizeof v);
        sbuf a = {0}, b = {0};
        layout_kind(cg, c->from, &a, 0);
        layout_kind(cg, c->to, &b, 0);
        snprintf(from, sizeof from, "#%d %s", c->from, a.s ? a.s : "?");
        snprintf(to, sizeof to, "#%d %s", c->to, b.s ? b.s : "?");
        free(a.s);
        free(b.s);
        snprintf(text, textlen,
                 "%s:%d: %s: converts operand %d, %s, from layout %s to %s through shared memory: %zu bytes of "
                 "scratch%s, %d bar.sync%s",
                 out->file, out->line, out->op, c->opnd, v, from, to, c->bytes, copies, c->barriers, often);
        break;
    }
    case LOOM_COST_SCRATCH:
        snprintf(text, textlen, "%s:%d: %s: %s: %zu bytes of scratch%s, %d bar.sync%s", out->file, out->line, out->op,
                 c->why ? c->why : c->note, c->bytes, copies, c->barriers, often);
        break;
    case LOOM_COST_ARITH:
        snprintf(text, textlen, "%s:%d: %s: %s%s", out->file, out->line, out->op, c->note, often);
        break;
    case LOOM_COST_SMEM: {
        const ir_type *t = &k->vals[op->res[0]].type;
        ir_type tile = {.kind = IR_T_TILE, .dtype = t->dtype, .shape = t->shape};
        char ty[64];
        ir_type_str(&tile, ty, sizeof ty);
        if (t->slots > 1)
            snprintf(text, textlen, "%s:%d: %s: %s: %d x %s = %zu bytes", out->file, out->line, out->op, c->why,
                     (int)t->slots, ty, c->bytes);
        else
            snprintf(text, textlen, "%s:%d: %s: %s: %s = %zu bytes", out->file, out->line, out->op, c->why, ty,
                     c->bytes);
        break;
    }
    default:
        snprintf(text, textlen, "%s:%d: %s: %lld %s = %zu bytes", out->file, out->line, out->op,
                 (long long)k->vals[op->res[0]].type.shape.dim[0], c->why, c->bytes);
        break;
    }
}

char *cg_explain_text(cg_ctx *cg)
{
    sbuf b = {0};
    sput(&b, "%s", "");
    int nconv = 0, nscr = 0, nar = 0;
    for (int i = 0; i < cg->ncosts; i++) {
        char line[1024];
        loom_cost c;
        cg_cost_fill(cg, &cg->costs[i], &c, line, sizeof line);
        sput(&b, "  %s\n", line);
        nconv += c.kind == LOOM_COST_CONVERT;
        nscr += c.kind == LOOM_COST_SCRATCH;
        nar += c.kind == LOOM_COST_ARITH;
    }
    size_t alloc = cg->scratch_off < cg->smem_bytes ? cg->scratch_off : cg->smem_bytes;
    char hints[64] = "";
    if (nar)
        snprintf(hints, sizeof hints, "; %d arithmetic hint%s", nar, nar == 1 ? "" : "s");
    sput(&b, "  kernel '%s': %zu bytes of shared memory: %zu for allocations, %zu of scratch; %d conversion%s, %d other "
             "use%s of scratch%s\n",
         loom_kernel_name(cg->k), cg->smem_bytes, alloc, cg->smem_bytes - alloc, nconv,
         nconv == 1 ? "" : "s", nscr, nscr == 1 ? "" : "s", hints);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---------------------------------------------------------------- arithmetic hints */

/* Whether value v is the same along some dim of the tile it is an operand of: a scalar, a
 * splat, or a broadcast that stretches a dim of 1 (a row's value broadcast along the row). */
static bool uniform_along_a_dim(const loom_kernel *k, uint32_t v)
{
    const ir_value *x = &k->vals[v];
    if (x->type.shape.rank == 0) /* a scalar operand, splatted by the op */
        return true;
    if (x->kind != IR_V_RESULT)
        return false;
    const ir_op *d = &k->ops[x->def];
    if (d->kind == IR_SPLAT)
        return true;
    if (d->kind != IR_BROADCAST)
        return false;
    const loom_shape *from = &k->vals[d->opnd[0]].type.shape, *to = &x->type.shape;
    for (int i = 0; i < to->rank && from->rank == to->rank; i++)
        if (from->dim[i] == 1 && to->dim[i] > 1)
            return true;
    return false;
}

/* Where the obvious arithmetic costs more than a rewrite, with the user's line: loom rounds
 * every op as written (the interpreter's semantics), so it cannot contract an f32 mul and
 * the add or sub that is its only use into an fma, nor turn a division by a row's value
 * into a reciprocal and a multiply; both would change the results' last bits. */
void cg_arith_hints(cg_ctx *cg)
{
    const loom_kernel *k = cg->k;
    uint32_t *uses = calloc(k->nvals, sizeof *uses), *user = calloc(k->nvals, sizeof *user);
    if (!uses || !user) {
        free(uses), free(user);
        cg_fail(cg, LOOM_ERR_NOMEM, "out of memory");
        return;
    }
    for (uint32_t o = 1; o < k->nops; o++) {
        const ir_op *op = &k->ops[o];
        for (int i = 0; op->block && i < op->nopnd; i++)
            uses[op->opnd[i]]++, user[op->opnd[i]] = o;
    }
    for (uint32_t o = 1; o < k->nops && cg->st == LOOM_OK; o++) {
        const ir_op *op = &k->ops[o];
        if (!op->block || op->nres != 1)
            continue;
        const ir_type *t = &k->vals[op->res[0]].type;
        if (t->kind != IR_T_TILE || t->dtype != LOOM_F32 || t->shape.rank == 0)
            continue;
        size_t n = (size_t)ir_shape_numel(&t->shape);
        cg_cost c = {.kind = LOOM_COST_ARITH, .op = o, .opnd = -1, .from = -1, .to = -1, .copies = 1, .elements = n};
        uint32_t u = user[op->res[0]];
        if (op->kind == IR_MUL && uses[op->res[0]] == 1 &&
            (k->ops[u].kind == IR_ADD || k->ops[u].kind == IR_SUB) && k->vals[k->ops[u].res[0]].type.dtype == LOOM_F32) {
            const ir_op *a = &k->ops[u];
            snprintf(c.note, sizeof c.note,
                     "its only use is the %s at %s:%d, rounded apart (loom does not contract them); loom_fma does "
                     "both in one instruction: %zu fewer",
                     ir_opdescs[a->kind].name, a->src.file ? a->src.file : "?", a->src.line, n);
            cg_cost_add(cg, &c);
        } else if (op->kind == IR_DIV && uniform_along_a_dim(k, op->opnd[1])) {
            snprintf(c.note, sizeof c.note,
                     "%zu correctly rounded divisions (div.rn.f32: a reciprocal and about 8 more instructions each) by "
                     "a value the same along a dim; a loom_div of the value itself and a loom_mul an element (or "
                     "loom_div_fast) cost one instruction an element",
                     n);
            cg_cost_add(cg, &c);
        }
    }
    free(uses), free(user);
}
