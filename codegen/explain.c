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

/* The innermost for loop around op o, or 0. */
static uint32_t loop_of(const loom_kernel *k, uint32_t o)
{
    uint32_t b = k->ops[o].block;
    while (b > 1) {
        uint32_t p = k->blocks[b].parent;
        if (!p)
            break;
        if (k->ops[p].kind == IR_FOR)
            return p;
        b = k->ops[p].block;
    }
    return 0;
}

void cg_cost_fill(cg_ctx *cg, const cg_cost *c, loom_cost *out, char *text, size_t textlen)
{
    const loom_kernel *k = cg->k;
    const ir_op *op = &k->ops[c->op];
    uint32_t lp = c->kind == LOOM_COST_CONVERT || c->kind == LOOM_COST_SCRATCH ? loop_of(k, c->op) : 0;
    *out = (loom_cost){.kind = (loom_cost_kind)c->kind,
                       .file = op->src.file ? op->src.file : "?",
                       .line = op->src.line,
                       .op = ir_opdescs[op->kind].name,
                       .bytes = c->bytes,
                       .copies = c->copies,
                       .barriers = c->barriers,
                       .loop_file = lp ? (k->ops[lp].src.file ? k->ops[lp].src.file : "?") : NULL,
                       .loop_line = lp ? k->ops[lp].src.line : 0,
                       .text = text};
    char often[256] = "";
    if (c->kind == LOOM_COST_CONVERT || c->kind == LOOM_COST_SCRATCH) {
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
    int nconv = 0, nscr = 0;
    for (int i = 0; i < cg->ncosts; i++) {
        char line[1024];
        loom_cost c;
        cg_cost_fill(cg, &cg->costs[i], &c, line, sizeof line);
        sput(&b, "  %s\n", line);
        if (c.kind == LOOM_COST_CONVERT)
            nconv++;
        else if (c.kind == LOOM_COST_SCRATCH)
            nscr++;
    }
    size_t alloc = cg->scratch_off < cg->smem_bytes ? cg->scratch_off : cg->smem_bytes;
    sput(&b, "  kernel '%s': %zu bytes of shared memory: %zu for allocations, %zu of scratch; %d conversion%s, %d other "
             "use%s of scratch\n",
         loom_kernel_name(cg->k), cg->smem_bytes, alloc, cg->smem_bytes - alloc, nconv,
         nconv == 1 ? "" : "s", nscr, nscr == 1 ? "" : "s");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
