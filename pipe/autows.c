/*
 * autows.c -- automatic warp specialization: the passes that turn a plain tile loop with
 * loom_dot into the warp-specialized kernel the explicit templates write by hand.
 *
 * The kernel a user writes the plain way (docs/dsl.md, "Two levels"):
 *
 *     acc = splat(0)
 *     for kk in lo..hi step s:          the loop (top level, carrying acc)
 *         a = load(A, offsets(kk))      tiles of tensor arguments, f16 / bf16
 *         b = load(B, offsets(kk))
 *         acc = dot(a, b, acc)          (or trans(b), several dots, math between them)
 *     epilogue(acc)                     bias, activation, a gather by index, cast, store
 *
 * becomes, through five passes (each printed by LOOM_DUMP_AFTER=<name>):
 *
 *   ws-tasks     task partition: a load in the loop whose tile feeds only dots (directly
 *                or through trans) is a channel, loaded by the producer; the scalar ops
 *                its offsets and the loop's bounds need (the producer slice) are computed
 *                by the producer too; everything else is the consumers'.
 *   ws-data      data partition: each dot's accumulator [M, N] is split by rows over the
 *                consumer warp groups (M / groups a multiple of 64, wgmma's rows a warp
 *                group); N and K must be wgmma's (N a multiple of 8 up to 256, K of 16).
 *   ws-channels  code partition: the channels become tiles of one ring of shared-memory
 *                slots (pipeline layer, include/loom_pipe.h) with its full/empty
 *                barriers, each tile swizzled by its row's bytes; its tensor must suit TMA.
 *   ws-pipeline  stages (the ring's slots) and how a dot waits: the loop of a single dot
 *                that carries its accumulator keeps one wgmma group in flight and gives
 *                the previous step's slot back (loom_mainloop_step); a loop whose dot
 *                results are read by other ops waits for each dot and gives the slot back
 *                at the end of the step.  Register budgets (setmaxnreg) come from the
 *                roles: the producer keeps LOOM_PIPE_PRODUCER_REGS, the consumers share
 *                the rest.
 *   ws-code      the new kernel, built with the pipeline layer's calls: the same
 *                arguments, a producer task (its slice, then for each step: produce the
 *                slot, TMA each channel), a consumer task (the kernel's other ops in their
 *                order, the dots as wgmma out of the slot's views, the epilogue in
 *                registers).  Each op keeps the line of the user's op it comes from.
 *
 * The result is ordinary IR: the verifier, the interpreter (its deadlock and race
 * reports) and the lowering see it as if written by hand.  The user's kernel is not
 * changed; codegen/pipeline.c compiles the new one in its place.
 */
#include "autows.h"
#include "loom_pipe.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { AW_MAX_DOTS = 8 };

/* A channel: a load in the loop whose tile only dots read, carried by the ring. */
typedef struct aw_chan {
    uint32_t load;     /* the load op */
    uint32_t val;      /* its tile */
    loom_swizzle swz;  /* the ring tile's swizzle */
} aw_chan;

/* A dot of the loop: where its operands come from. */
typedef struct aw_dot {
    uint32_t op;
    int a_chan, b_chan;  /* the channel read (or -1: A from registers) */
    bool a_trans, b_trans;
    int64_t m, n, kk;
} aw_dot;

typedef struct aw {
    loom_kernel *src, *dst;
    uint32_t loop, body;
    aw_chan ch[LOOM_RING_MAX_TILES];
    int nch;
    aw_dot dot[AW_MAX_DOTS];
    int ndot;
    uint8_t *prod;      /* per src op: 1 in the producer slice */
    uint8_t *skip;      /* per src op: 1 a channel's load or trans (the ring replaces it) */
    uint8_t *bounds;    /* per src op: 1 where the loop's bounds need it (ping-pong: once a task) */
    bool mainloop;      /* one dot carrying its accumulator: one group in flight */
    int acc_arg;        /* mainloop: the accumulator's index among the carried values */
    int groups, stages, pingpong;
    const char *dump;
    char *err;
    size_t errlen;
    loom_status st;
    uint32_t *map;      /* src value -> dst value (plain indices) of the task being built */
    loom_ring ring;
    uint32_t staged;    /* the store the epilogue stages for one TMA store (0: none) */
    loom_pipe pipe;     /* the new kernel's named barriers */
    loom_epilogue epi;  /* its staging tile */
    loom_pingpong pp;   /* ping-pong's turns */
    loom_val grid[3];   /* the launch's grid as the user gave it (the kernel's last arguments) */
    loom_val vpid[3];   /* the task's current program of that grid (its tile loop's) */
    loom_val rep, trips; /* ping-pong: the consumer replica, and the steps a program takes */
} aw;

/* ---------------------------------------------------------------- small helpers */

static bool fail(aw *w, loom_src at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(aw *w, loom_src at, const char *fmt, ...)
{
    if (w->st != LOOM_OK)
        return false;
    w->st = LOOM_ERR_UNSUPPORTED;
    char body[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    if (w->err && w->errlen)
        snprintf(w->err, w->errlen, "%s:%d: error: autows (kernel '%s'): %s", at.file ? at.file : "?", at.line,
                 w->src->name, body);
    return false;
}

static ir_op *sop(aw *w, uint32_t o) { return &w->src->ops[o]; }

/* The op that defines value v (0: an argument or a block argument). */
static uint32_t def_of(const loom_kernel *k, uint32_t v)
{
    return k->vals[v].kind == IR_V_RESULT ? k->vals[v].def : 0;
}

static bool dumping(const aw *w, const char *pass)
{
    return w->dump && (!strcmp(w->dump, "all") || !strcmp(w->dump, pass));
}

/* "file:line" of op o into buf. */
static const char *where(aw *w, uint32_t o, char *buf, size_t n)
{
    loom_src s = sop(w, o)->src;
    snprintf(buf, n, "%s:%d", s.file ? s.file : "?", s.line);
    return buf;
}

/* How many live ops read value v (anywhere in the kernel); *user: one of them. */
static int uses_of(aw *w, uint32_t v, uint32_t *user)
{
    int n = 0;
    for (uint32_t o = 1; o < w->src->nops; o++) {
        ir_op *op = sop(w, o);
        if (!op->block)
            continue;
        for (int i = 0; i < op->nopnd; i++)
            if (op->opnd[i] == v) {
                n++;
                if (user)
                    *user = o;
            }
    }
    return n;
}

/* ---------------------------------------------------------------- ws-tasks */

/* The top-level loop whose body holds the dots. */
static bool find_loop(aw *w)
{
    loom_kernel *k = w->src;
    ir_block *top = &k->blocks[1];
    for (uint32_t i = 0; i < top->nops; i++) {
        ir_op *op = sop(w, top->ops[i]);
        if (op->kind == IR_TASK || op->kind == IR_SMEM_ALLOC || op->kind == IR_MBAR_ALLOC)
            return fail(w, op->src, "the kernel has explicit %s ops; automatic warp specialization takes a plain "
                                    "kernel (leave it as written: drop loom_kernel_set_autows)",
                        ir_opdescs[op->kind].name);
    }
    for (uint32_t o = 1; o < k->nops; o++) {
        ir_op *op = sop(w, o);
        if (op->block && (op->kind == IR_FLAG_ADD || op->kind == IR_FLAG_WAIT || op->kind == IR_ATOMIC_ADD))
            return fail(w, op->src, "the kernel has a %s: its programs run persistently once specialized (each "
                                    "CTA takes several programs in turn), which programs that wait on each other "
                                    "or claim work cannot",
                        ir_opdescs[op->kind].name);
        if (!op->block || op->kind != IR_DOT)
            continue;
        uint32_t parent = k->blocks[op->block].parent;
        if (!parent || sop(w, parent)->kind != IR_FOR || sop(w, parent)->block != 1)
            return fail(w, op->src, "this dot is not directly in a loop at the kernel's top level: the passes "
                                    "pipeline the dots of one such loop");
        if (w->loop && w->loop != parent)
            return fail(w, op->src, "a second loop with dots (the first at line %d): the passes pipeline one loop",
                        sop(w, w->loop)->src.line);
        w->loop = parent;
    }
    if (!w->loop)
        return fail(w, w->src->ws_at, "the kernel has no loom_dot in a loop: nothing to specialize");
    w->body = sop(w, w->loop)->reg[0];
    return true;
}

/* The load of the loop body that produced value v, seen through one trans; 0 if none. */
static uint32_t channel_load(aw *w, uint32_t v, bool *trans)
{
    uint32_t d = def_of(w->src, v);
    *trans = false;
    if (d && sop(w, d)->kind == IR_TRANS) {
        *trans = true;
        d = def_of(w->src, sop(w, d)->opnd[0]);
    }
    if (!d || sop(w, d)->kind != IR_LOAD || sop(w, d)->block != w->body)
        return 0;
    return d;
}

static int add_channel(aw *w, uint32_t load)
{
    for (int i = 0; i < w->nch; i++)
        if (w->ch[i].load == load)
            return i;
    if (w->nch == LOOM_RING_MAX_TILES)
        return fail(w, sop(w, load)->src, "more than %d tiles a step feed the dots (the ring's tiles)",
                    LOOM_RING_MAX_TILES),
               -1;
    w->ch[w->nch] = (aw_chan){.load = load, .val = sop(w, load)->res[0]};
    return w->nch++;
}

/* Every use of a channel's tile is a dot operand, directly or through a trans that only
 * dots read: then the ring slot's view can stand for it. */
static bool channel_uses_ok(aw *w, const aw_chan *c)
{
    for (uint32_t o = 1; o < w->src->nops; o++) {
        ir_op *op = sop(w, o);
        if (!op->block)
            continue;
        for (int i = 0; i < op->nopnd; i++) {
            if (op->opnd[i] != c->val)
                continue;
            if (op->kind == IR_DOT && i < 2)
                continue;
            if (op->kind == IR_TRANS) {
                uint32_t user = 0;
                int n = uses_of(w, op->res[0], &user);
                bool dots_only = true;
                for (uint32_t u = 1; u < w->src->nops && dots_only; u++) {
                    ir_op *uo = sop(w, u);
                    for (int j = 0; uo->block && j < uo->nopnd; j++)
                        if (uo->opnd[j] == op->res[0] && !(uo->kind == IR_DOT && j < 2))
                            dots_only = false;
                }
                if (n && dots_only)
                    continue;
            }
            char wb[256];
            return fail(w, op->src,
                        "the tile loaded at %s feeds a dot and also this %s: a tile the producer loads into "
                        "shared memory can only be read by dots (load it a second time for the other use)",
                        where(w, c->load, wb, sizeof wb), ir_opdescs[op->kind].name);
        }
    }
    return true;
}

/* Mark the producer slice: the ops value v needs, which must be scalar work the producer
 * can do (no tiles, no side effects, nothing the loop carries). */
static bool slice(aw *w, uint32_t v, uint32_t why)
{
    loom_kernel *k = w->src;
    ir_value *val = &k->vals[v];
    if (val->kind == IR_V_ARG)
        return true;
    if (val->kind == IR_V_BLOCKARG) {
        if (val->block == w->body && val->index == 0)
            return true; /* the induction variable */
        char wb[256];
        return fail(w, sop(w, why)->src,
                    "an offset or bound here depends on a value the loop carries (or an inner region's), which "
                    "the producer does not have (the load at %s)",
                    where(w, why, wb, sizeof wb));
    }
    uint32_t d = val->def;
    if (w->prod[d])
        return true;
    ir_op *op = sop(w, d);
    bool scalar = true;
    for (int r = 0; r < op->nres; r++)
        if (k->vals[op->res[r]].type.kind != IR_T_TILE || k->vals[op->res[r]].type.shape.rank != 0)
            scalar = false;
    bool ok_kind = op->kind == IR_LOAD_SCALAR || (ir_opdescs[op->kind].flags & IRF_PURE) ||
                   op->kind == IR_DIV || op->kind == IR_REM;
    if (!scalar || !ok_kind || op->nreg || (op->block != 1 && op->block != w->body)) {
        char wb[256];
        return fail(w, op->src,
                    "the producer needs this %s for the offsets or bounds of the loop at %s, but it is %s; the "
                    "producer computes only scalars (program ids, constants, arithmetic, load_scalar) from the "
                    "kernel's top level and the loop body",
                    ir_opdescs[op->kind].name, where(w, w->loop, wb, sizeof wb),
                    !scalar ? "a tile" : op->nreg ? "a region" : "not such an op");
    }
    w->prod[d] = 1;
    for (int i = 0; i < op->nopnd; i++)
        if (!slice(w, op->opnd[i], why))
            return false;
    return true;
}

static bool pass_tasks(aw *w)
{
    if (!find_loop(w))
        return false;
    loom_kernel *k = w->src;
    ir_block *body = &k->blocks[w->body];
    for (uint32_t i = 0; i < body->nops; i++) {
        uint32_t o = body->ops[i];
        if (sop(w, o)->kind != IR_DOT)
            continue;
        if (w->ndot == AW_MAX_DOTS)
            return fail(w, sop(w, o)->src, "more than %d dots in the loop", AW_MAX_DOTS);
        aw_dot *d = &w->dot[w->ndot++];
        *d = (aw_dot){.op = o, .a_chan = -1, .b_chan = -1};
        uint32_t la = channel_load(w, sop(w, o)->opnd[0], &d->a_trans);
        uint32_t lb = channel_load(w, sop(w, o)->opnd[1], &d->b_trans);
        if (la && (d->a_chan = add_channel(w, la)) < 0)
            return false;
        if (!lb)
            return fail(w, sop(w, o)->src,
                        "the dot's B operand is not a tile loaded in the loop (or its trans): wgmma reads B from "
                        "shared memory, which the producer fills from a load in the loop");
        if ((d->b_chan = add_channel(w, lb)) < 0)
            return false;
        if (!la)
            d->a_trans = false;
    }
    for (int c = 0; c < w->nch; c++) {
        ir_op *ld = sop(w, w->ch[c].load);
        if (!channel_uses_ok(w, &w->ch[c]))
            return false;
        int rank = k->vals[ld->opnd[0]].type.shape.rank;
        if (ld->nopnd != 1 + rank)
            return fail(w, ld->src, "this load has a mask: the producer's TMA loads whole boxes (zeros outside "
                                    "the tensor); drop the mask, the dot needs none at the edges");
        if (ld->fattr != 0.0)
            return fail(w, ld->src, "this load fills with %g outside the tensor; TMA fills with 0 (use fill 0)",
                        ld->fattr);
        for (int i = 1; i < ld->nopnd; i++)
            if (!slice(w, ld->opnd[i], w->ch[c].load))
                return false;
        w->skip[w->ch[c].load] = 1;
    }
    /* the trans ops that only turn a channel's tile go too: the views are transposed */
    for (uint32_t i = 0; i < body->nops; i++) {
        ir_op *op = sop(w, body->ops[i]);
        if (op->kind == IR_TRANS)
            for (int c = 0; c < w->nch; c++)
                if (op->opnd[0] == w->ch[c].val)
                    w->skip[body->ops[i]] = 1;
    }
    ir_op *lp = sop(w, w->loop);
    for (int i = 0; i < 3; i++)
        if (!slice(w, lp->opnd[i], w->loop))
            return false;
    if (dumping(w, "ws-tasks")) {
        char wb[256];
        fprintf(stderr, "// autows ws-tasks: kernel '%s', the loop at %s\n", k->name, where(w, w->loop, wb, sizeof wb));
        for (int c = 0; c < w->nch; c++)
            fprintf(stderr, "//   producer: load at %s (a channel: only dots read it)\n",
                    where(w, w->ch[c].load, wb, sizeof wb));
        for (uint32_t o = 1; o < k->nops; o++)
            if (w->prod[o])
                fprintf(stderr, "//   producer and consumers: %s at %s (the producer slice)\n",
                        ir_opdescs[sop(w, o)->kind].name, where(w, o, wb, sizeof wb));
        for (int d = 0; d < w->ndot; d++)
            fprintf(stderr, "//   consumers: dot at %s\n", where(w, w->dot[d].op, wb, sizeof wb));
        fprintf(stderr, "//   consumers: every other op of the kernel\n");
    }
    return true;
}

/* ---------------------------------------------------------------- ws-data */

/* Does value v come from the same scalars in every program (no program id, nothing read
 * from memory)?  Ping-pong's replicas count each other's ring uses by it. */
static bool same_everywhere(aw *w, uint32_t v)
{
    uint32_t d = def_of(w->src, v);
    if (!d)
        return w->src->vals[v].kind == IR_V_ARG;
    ir_op *op = sop(w, d);
    if (op->kind == IR_PROGRAM_ID || op->kind == IR_NUM_PROGRAMS || op->kind == IR_LOAD_SCALAR)
        return false;
    w->bounds[d] = 1;
    for (int i = 0; i < op->nopnd; i++)
        if (!same_everywhere(w, op->opnd[i]))
            return false;
    return true;
}

static bool uniform_steps(aw *w)
{
    ir_op *lp = sop(w, w->loop);
    for (int i = 0; i < 3; i++)
        if (!same_everywhere(w, lp->opnd[i]))
            return fail(w, lp->src, "with pingpong=1 the loop's bounds must be the same in every program (the two "
                                    "consumer groups count each other's steps): this one's depend on the program "
                                    "or on memory");
    return true;
}

static bool pass_data(aw *w)
{
    loom_kernel *k = w->src;
    if (w->pingpong && !uniform_steps(w))
        return false;
    for (int i = 0; i < w->ndot; i++) {
        aw_dot *d = &w->dot[i];
        ir_op *op = sop(w, d->op);
        ir_type *a = &k->vals[op->opnd[0]].type, *acc = &k->vals[op->opnd[2]].type;
        if (a->dtype != LOOM_F16 && a->dtype != LOOM_BF16)
            return fail(w, op->src, "the dot's operands are %s: the tensor cores take f16 or bf16 here (an f32 dot "
                                    "stays on FMA: drop loom_kernel_set_autows)",
                        loom_dtype_name((loom_dtype)a->dtype));
        d->m = acc->shape.dim[0];
        d->n = acc->shape.dim[1];
        d->kk = a->shape.dim[1];
        int parts = w->pingpong ? 1 : w->groups; /* ping-pong: each group whole programs */
        int64_t per = d->m / parts;
        if (d->m % parts || per % 64)
            return fail(w, op->src,
                        "the dot's accumulator has %lld rows: %d consumer warp group%s sharing it need a multiple "
                        "of %d (64 rows a group, wgmma's)%s",
                        (long long)d->m, parts, parts > 1 ? "s" : "", 64 * parts,
                        parts > 1 ? "; pingpong=1 gives each group whole programs of 64 rows" : "");
        if (d->n % 8 || d->n > 256)
            return fail(w, op->src, "the dot's accumulator has %lld columns: wgmma takes a multiple of 8 up to 256",
                        (long long)d->n);
        if (d->kk % 16)
            return fail(w, op->src, "the dot's k is %lld: wgmma takes a multiple of 16", (long long)d->kk);
    }
    if (dumping(w, "ws-data")) {
        char wb[256];
        if (w->pingpong)
            fprintf(stderr, "// autows ws-data: 2 consumer warp groups as two replicas, each taking every other "
                            "program of the CTA whole (ping-pong)\n");
        else
            fprintf(stderr, "// autows ws-data: %d consumer warp group%s in one task (cooperative)\n", w->groups,
                    w->groups > 1 ? "s" : "");
        for (int i = 0; i < w->ndot; i++) {
            aw_dot *d = &w->dot[i];
            fprintf(stderr, "//   dot at %s: [%lld x %lld] += [%lld x %lld] @ [%lld x %lld]; each group its %lld rows\n",
                    where(w, d->op, wb, sizeof wb), (long long)d->m, (long long)d->n, (long long)d->m,
                    (long long)d->kk, (long long)d->kk, (long long)d->n,
                    (long long)(d->m / (w->pingpong ? 1 : w->groups)));
        }
    }
    return true;
}

/* ---------------------------------------------------------------- ws-channels */

static bool pass_channels(aw *w)
{
    loom_kernel *k = w->src;
    for (int c = 0; c < w->nch; c++) {
        ir_op *ld = sop(w, w->ch[c].load);
        ir_type *t = &k->vals[w->ch[c].val].type;
        if (t->shape.rank != 2)
            return fail(w, ld->src, "the tile is %d-D: a channel is a 2-D tile", t->shape.rank);
        int64_t row = t->shape.dim[1] * (int64_t)loom_dtype_size((loom_dtype)t->dtype);
        w->ch[c].swz = row % 128 == 0 ? LOOM_SWIZZLE_128 : row % 64 == 0 ? LOOM_SWIZZLE_64 : LOOM_SWIZZLE_32;
        if (row % 32)
            return fail(w, ld->src, "the tile's rows are %lld bytes: a swizzled shared tile needs a multiple of 32",
                        (long long)row);
        const ir_arg *arg = &k->args[k->vals[ld->opnd[0]].def];
        size_t es = loom_dtype_size(arg->dtype);
        int r = arg->shape.rank;
        if (arg->strides[r - 1] != 1)
            return fail(w, ld->src, "tensor '%s' is not contiguous in its last dim (stride %lld): TMA needs 1",
                        arg->name, (long long)arg->strides[r - 1]);
        for (int d = 0; d < r - 1; d++)
            if ((arg->strides[d] * (int64_t)es) % 16)
                return fail(w, ld->src,
                            "tensor '%s' has dim %d %lld bytes apart: TMA needs multiples of 16 (pad its rows, "
                            "loom_arg_tensor_strided)",
                            arg->name, d, (long long)(arg->strides[d] * (int64_t)es));
    }
    if (dumping(w, "ws-channels")) {
        char wb[256], tb[64];
        int64_t bytes = 0;
        fprintf(stderr, "// autows ws-channels: one ring, a slot holds %d tile%s\n", w->nch, w->nch > 1 ? "s" : "");
        for (int c = 0; c < w->nch; c++) {
            ir_type *t = &k->vals[w->ch[c].val].type;
            bytes += ir_shape_numel(&t->shape) * (int64_t)loom_dtype_size((loom_dtype)t->dtype);
            fprintf(stderr, "//   tile %d: %s swizzle %d, TMA from '%s' (the load at %s)\n", c,
                    ir_type_str(t, tb, sizeof tb), (int)w->ch[c].swz,
                    k->args[k->vals[sop(w, w->ch[c].load)->opnd[0]].def].name,
                    where(w, w->ch[c].load, wb, sizeof wb));
        }
        fprintf(stderr, "//   %lld bytes a slot; full and empty mbarriers a slot\n", (long long)bytes);
    }
    return true;
}

/* ---------------------------------------------------------------- ws-pipeline */

/* Bytes of a tile of type t. */
static int64_t tile_bytes(const ir_type *t)
{
    return ir_shape_numel(&t->shape) * (int64_t)loom_dtype_size((loom_dtype)t->dtype);
}

/* The store after the loop that the epilogue can stage for a TMA store: the top level's
 * only store, of a 2-D tile whose rows are whole 128-byte swizzle spans, unmasked, into
 * a tensor TMA can address, with room beside the ring.  0 (and why, for the dump) when
 * there is none. */
static uint32_t staged_store(aw *w, char *why, size_t n)
{
    loom_kernel *k = w->src;
    ir_block *top = &k->blocks[1];
    uint32_t st = 0, after = 0;
    for (uint32_t i = 0; i < top->nops; i++) {
        uint32_t o = top->ops[i];
        if (o == w->loop)
            after = 1;
        else if (after && sop(w, o)->kind == IR_STORE) {
            if (st)
                return snprintf(why, n, "two stores after the loop: both from registers"), 0;
            st = o;
        }
    }
    if (!st)
        return 0;
    ir_op *op = sop(w, st);
    char wb[200];
    where(w, st, wb, sizeof wb);
    const ir_arg *arg = &k->args[k->vals[op->opnd[0]].def];
    int r = arg->shape.rank;
    ir_type *v = &k->vals[op->opnd[op->nopnd - 1]].type;
    if (op->nopnd != 2 + r)
        return snprintf(why, n, "the store at %s goes from registers: it has a mask", wb), 0;
    if (v->shape.rank != 2 || (v->shape.dim[1] * (int64_t)loom_dtype_size((loom_dtype)v->dtype)) % 128)
        return snprintf(why, n, "the store at %s goes from registers: its tile's rows are not whole 128-byte spans",
                        wb), 0;
    size_t es = loom_dtype_size(arg->dtype);
    bool tma = arg->strides[r - 1] == 1;
    for (int d = 0; d < r - 1; d++)
        tma = tma && (arg->strides[d] * (int64_t)es) % 16 == 0;
    if (!tma)
        return snprintf(why, n, "the store at %s goes from registers: TMA cannot address '%s' (rows not 16-byte "
                                "multiples apart)", wb, arg->name), 0;
    int64_t ring = 0;
    for (int c = 0; c < w->nch; c++)
        ring += tile_bytes(&k->vals[w->ch[c].val].type);
    ring *= w->stages;
    int64_t need = ring + tile_bytes(v) * (w->pingpong ? 2 : 1) + 1024 + 64 * w->stages, limit = 227 * 1024;
    if (need > limit)
        return snprintf(why, n, "the store at %s goes from registers: its %lld-byte staging tile does not fit beside "
                                "the ring's %lld bytes (fewer stages or a smaller tile would)",
                        wb, (long long)tile_bytes(v), (long long)ring), 0;
    return st;
}

static bool pass_pipeline(aw *w)
{
    loom_kernel *k = w->src;
    ir_op *lp = sop(w, w->loop);
    ir_block *body = &k->blocks[w->body];
    uint32_t yield = body->ops[body->nops - 1];
    w->mainloop = false;
    if (w->ndot == 1) {
        ir_op *d = sop(w, w->dot[0].op);
        ir_value *acc = &k->vals[d->opnd[2]];
        if (acc->kind == IR_V_BLOCKARG && acc->block == w->body && acc->index >= 1) {
            int i = (int)acc->index - 1;
            uint32_t user = 0;
            w->mainloop = sop(w, yield)->opnd[i] == d->res[0] && uses_of(w, d->res[0], NULL) == 1 &&
                          uses_of(w, d->opnd[2], &user) == 1;
            w->acc_arg = i;
        }
    }
    (void)lp;
    char why[600] = "";
    w->staged = staged_store(w, why, sizeof why);
    if (dumping(w, "ws-pipeline")) {
        fprintf(stderr, "// autows ws-pipeline: %d stages (ring slots)\n", w->stages);
        if (w->mainloop)
            fprintf(stderr, "//   one dot carrying its accumulator: one wgmma group in flight, the previous step's "
                            "slot given back after it (loom_mainloop_step)\n");
        else
            fprintf(stderr, "//   the dots' results are read in the step: each dot waited for, the slot given back "
                            "at the end of the step\n");
        fprintf(stderr, "//   registers: producer %d a thread, consumers %d (setmaxnreg)\n", LOOM_PIPE_PRODUCER_REGS,
                loom_pipe_consumer_regs(w->src));
        char wb[256];
        if (w->staged)
            fprintf(stderr, "//   the store at %s: staged in shared memory, one TMA store (waited for before the next "
                            "program's)\n", where(w, w->staged, wb, sizeof wb));
        if (why[0])
            fprintf(stderr, "//   %s\n", why);
    }
    return true;
}

/* ---------------------------------------------------------------- ws-code */

static uint32_t mapped(aw *w, uint32_t v)
{
    uint32_t m = w->map[v];
    if (!m && w->st == LOOM_OK)
        fail(w, w->src->vals[v].kind == IR_V_RESULT ? sop(w, w->src->vals[v].def)->src : w->src->ws_at,
             "internal: a value the task needs was not built (%s)",
             w->src->vals[v].kind == IR_V_RESULT ? ir_opdescs[sop(w, w->src->vals[v].def)->kind].name : "argument");
    return m;
}

static loom_val H(aw *w, uint32_t v) { return ir_handle(w->dst, mapped(w, v)); }
static uint32_t U(aw *w, loom_val h) { return ir_unhandle(w->dst, h); }

/* The arguments, in the same order (the launch passes the same list). */
static void clone_args(aw *w, uint32_t *map)
{
    loom_kernel *k = w->src, *d = w->dst;
    for (int i = 0; i < k->nargs; i++) {
        const ir_arg *a = &k->args[i];
        loom_src at = {__FILE__, __LINE__};
        loom_val h;
        if (a->is_dim)
            h = loom_arg_dim_at(at, d, a->name, a->dim_max, a->dim_multiple);
        else if (!a->is_tensor)
            h = loom_arg_scalar_at(at, d, a->name, a->dtype);
        else {
            loom_shape s = a->shape;
            for (int j = 0; j < s.rank; j++)
                if (a->dyn[j])
                    s.dim[j] = LOOM_DIM(ir_handle(d, map[k->args[a->dyn[j] - 1].value]));
            h = loom_arg_tensor_at(at, d, a->name, a->dtype, s, a->strides, a->access);
        }
        map[a->value] = ir_unhandle(d, h);
    }
    static const char *const names[3] = {PIPE_AUTOWS_GRID_X, PIPE_AUTOWS_GRID_Y, PIPE_AUTOWS_GRID_Z};
    for (int i = 0; i < 3; i++)
        w->grid[i] = loom_arg_scalar_at(k->ws_at, d, names[i], LOOM_I32);
}

static void clone_block(aw *w, uint32_t b, bool producer);

/* A copy of plain op o in the innermost open block of dst. */
static void clone_plain(aw *w, uint32_t o)
{
    loom_kernel *d = w->dst;
    ir_op *op = sop(w, o);
    if (op->kind == IR_PROGRAM_ID || op->kind == IR_NUM_PROGRAMS) { /* the program of the user's grid */
        int axis = (int)op->iattr[0];
        w->map[op->res[0]] = U(w, op->kind == IR_PROGRAM_ID ? w->vpid[axis] : w->grid[axis]);
        return;
    }
    if (o == w->staged) {
        loom_val offs[LOOM_MAX_RANK];
        for (int i = 1; i + 1 < op->nopnd; i++)
            offs[i - 1] = H(w, op->opnd[i]);
        loom_epilogue_store_at(op->src, d, &w->epi, offs, H(w, op->opnd[op->nopnd - 1]), w->rep, LOOM_NONE,
                               LOOM_NONE);
        return;
    }
    uint32_t opnd[64];
    for (int i = 0; i < op->nopnd; i++)
        if (!(opnd[i] = mapped(w, op->opnd[i])))
            return;
    uint32_t n = ir_op_new(d, op->src, (ir_opkind)op->kind, opnd, op->nopnd);
    if (!n) {
        w->st = LOOM_ERR_NOMEM;
        return;
    }
    ir_op *no = &d->ops[n];
    memcpy(no->iattr, op->iattr, sizeof no->iattr);
    no->fattr = op->fattr;
    no->shape = op->shape;
    ir_type out[4];
    int nout = 0;
    if (!ir_rule(d, n, out, &nout, 4) || nout != op->nres) {
        fail(w, op->src, "internal: the copy of this %s does not type (%s)", ir_opdescs[op->kind].name,
             loom_kernel_errors(d));
        return;
    }
    for (int r = 0; r < nout; r++) {
        uint32_t v = ir_op_add_result(d, n, out[r]);
        w->map[op->res[r]] = v;
        if (w->src->vals[op->res[r]].name)
            d->vals[v].name = ir_arena_strdup(&d->arena, w->src->vals[op->res[r]].name);
    }
}

/* A copy of a for or if (its blocks copied in turn). */
static void clone_region(aw *w, uint32_t o, bool producer)
{
    loom_kernel *d = w->dst;
    ir_op *op = sop(w, o);
    if (op->kind == IR_FOR) {
        loom_val init[64];
        for (int i = 3; i < op->nopnd; i++)
            init[i - 3] = H(w, op->opnd[i]);
        loom_region_op l = loom_for_begin_at(op->src, d, H(w, op->opnd[0]), H(w, op->opnd[1]), H(w, op->opnd[2]),
                                             op->nopnd - 3, init);
        ir_block *b = &w->src->blocks[op->reg[0]];
        w->map[b->args[0]] = U(w, loom_for_iv(d, l));
        for (uint32_t i = 1; i < b->nargs; i++)
            w->map[b->args[i]] = U(w, loom_for_arg(d, l, (int)i - 1));
        clone_block(w, op->reg[0], producer);
        ir_op *y = sop(w, b->ops[b->nops - 1]);
        loom_val ys[64];
        for (int i = 0; i < y->nopnd; i++)
            ys[i] = H(w, y->opnd[i]);
        loom_for_end_at(y->src, d, l, y->nopnd, ys);
        for (int r = 0; r < op->nres; r++)
            w->map[op->res[r]] = U(w, loom_for_result(d, l, r));
        return;
    }
    /* if */
    loom_region_op c = loom_if_begin_at(op->src, d, H(w, op->opnd[0]), op->nres);
    for (int br = 0; br < 2; br++) {
        ir_block *b = &w->src->blocks[op->reg[br]];
        clone_block(w, op->reg[br], producer);
        ir_op *y = sop(w, b->ops[b->nops - 1]);
        loom_val ys[64];
        for (int i = 0; i < y->nopnd; i++)
            ys[i] = H(w, y->opnd[i]);
        if (br == 0)
            loom_else_at(y->src, d, c, y->nopnd, ys);
        else
            loom_if_end_at(y->src, d, c, y->nopnd, ys);
    }
    for (int r = 0; r < op->nres; r++)
        w->map[op->res[r]] = U(w, loom_if_result(d, c, r));
}

static void clone_op(aw *w, uint32_t o, bool producer)
{
    if (sop(w, o)->nreg)
        clone_region(w, o, producer);
    else
        clone_plain(w, o);
}

/* The ops of block b but its yield (the producer: only its slice). */
static void clone_block(aw *w, uint32_t b, bool producer)
{
    ir_block *blk = &w->src->blocks[b];
    for (uint32_t i = 0; i + 1 < blk->nops && w->st == LOOM_OK; i++) {
        uint32_t o = blk->ops[i];
        if ((producer && !w->prod[o]) || w->skip[o])
            continue;
        clone_op(w, o, producer);
    }
}

#define CI(v) loom_const_i_at(at, d, LOOM_I32, (v))

/* A task's loop over the programs of the user's grid: this CTA's first, then every
 * num_programs-th, each decoded into vpid (x fastest).  It carries the ring's use count
 * (*it: the uses before the program). */
static loom_region_op programs_begin(aw *w, loom_src at, loom_val *it)
{
    loom_kernel *d = w->dst;
    loom_val first = loom_program_id_at(at, d, 0), step = loom_num_programs_at(at, d, 0), it0 = CI(0);
    if (w->rep) { /* ping-pong: replica r takes the r-th of each two; the other's uses come between */
        first = loom_add_at(at, d, first, loom_mul_at(at, d, w->rep, step));
        step = loom_mul_at(at, d, step, CI(2));
        it0 = loom_mul_at(at, d, w->rep, w->trips);
    }
    loom_val total = loom_mul_at(at, d, loom_mul_at(at, d, w->grid[0], w->grid[1]), w->grid[2]);
    loom_region_op l = loom_for_begin_at(at, d, first, total, step, 1, &it0);
    loom_val t = loom_for_iv(d, l), r = loom_div_at(at, d, t, w->grid[0]);
    w->vpid[0] = loom_rem_at(at, d, t, w->grid[0]);
    w->vpid[1] = loom_rem_at(at, d, r, w->grid[1]);
    w->vpid[2] = loom_div_at(at, d, r, w->grid[1]);
    *it = loom_for_arg(d, l, 0);
    return l;
}

/* The producer: its slice of the top level, then the loop: for each step, produce the
 * slot of use `it` and TMA each channel's box into it. */
static void build_producer(aw *w)
{
    loom_kernel *d = w->dst;
    ir_op *lp = sop(w, w->loop);
    loom_src at = lp->src;
    loom_region_op t = loom_producer_begin_at(at, d);
    loom_val it0;
    loom_region_op pl = programs_begin(w, at, &it0);
    ir_block *top = &w->src->blocks[1];
    for (uint32_t i = 0; i < top->nops && w->st == LOOM_OK; i++)
        if (w->prod[top->ops[i]])
            clone_op(w, top->ops[i], true);
    loom_region_op l = loom_for_begin_at(at, d, H(w, lp->opnd[0]), H(w, lp->opnd[1]), H(w, lp->opnd[2]), 1, &it0);
    ir_block *b = &w->src->blocks[w->body];
    w->map[b->args[0]] = U(w, loom_for_iv(d, l));
    loom_val it = loom_for_arg(d, l, 0);
    clone_block(w, w->body, true);
    loom_val s = loom_ring_produce_at(at, d, &w->ring, it, -1);
    for (int c = 0; c < w->nch; c++) {
        ir_op *ld = sop(w, w->ch[c].load);
        loom_val offs[LOOM_MAX_RANK];
        for (int i = 1; i < ld->nopnd; i++)
            offs[i - 1] = H(w, ld->opnd[i]);
        loom_ring_load_at(ld->src, d, &w->ring, s, c, 0, H(w, ld->opnd[0]), offs);
    }
    loom_val next = loom_add_at(at, d, it, CI(1));
    loom_for_end_at(at, d, l, 1, &next);
    loom_val it_end = loom_for_result(d, l, 0);
    loom_for_end_at(at, d, pl, 1, &it_end);
    loom_task_end_at(at, d, t);
}

/* A dot's operand: the slot's view of its channel (transposed where the user's trans
 * was), or the register tile. */
static loom_val operand(aw *w, loom_val s, int chan, bool trans, uint32_t v, loom_src at)
{
    if (chan < 0)
        return H(w, v);
    loom_val view = loom_ring_view_at(at, w->dst, &w->ring, s, chan, LOOM_NONE);
    return trans ? loom_smem_trans_at(at, w->dst, view) : view;
}

static const aw_dot *dot_of(aw *w, uint32_t o)
{
    for (int i = 0; i < w->ndot; i++)
        if (w->dot[i].op == o)
            return &w->dot[i];
    return NULL;
}

/* The consumers' step, general form: consume the slot, the body's ops in order with each
 * dot a wgmma waited for, the slot back at the end. */
static void consumer_step(aw *w, loom_val it)
{
    loom_kernel *d = w->dst;
    loom_src at = sop(w, w->loop)->src;
    loom_val s = loom_ring_consume_at(at, d, &w->ring, it);
    ir_block *b = &w->src->blocks[w->body];
    for (uint32_t i = 0; i + 1 < b->nops && w->st == LOOM_OK; i++) {
        uint32_t o = b->ops[i];
        if (w->skip[o])
            continue;
        const aw_dot *dt = dot_of(w, o);
        if (!dt) {
            clone_op(w, o, false);
            continue;
        }
        ir_op *op = sop(w, o);
        loom_val a = operand(w, s, dt->a_chan, dt->a_trans, op->opnd[0], op->src);
        loom_val bb = operand(w, s, dt->b_chan, dt->b_trans, op->opnd[1], op->src);
        loom_val acc = loom_wgmma_at(op->src, d, a, bb, H(w, op->opnd[2]));
        loom_wgmma_commit_at(op->src, d);
        loom_region_op wt = loom_wgmma_wait_at(op->src, d, 0, 1, &acc);
        w->map[op->res[0]] = U(w, loom_wgmma_result(d, wt, 0));
    }
    loom_ring_release_at(at, d, &w->ring, s);
}

/* The consumers' step, mainloop form: the body's other ops, the dot as one k step of the
 * pipeline layer's mainloop (one group left in flight, the previous use's slot back). */
static void consumer_mainloop_step(aw *w, loom_val it, loom_val it0)
{
    loom_kernel *d = w->dst;
    const aw_dot *dt = &w->dot[0];
    ir_op *op = sop(w, dt->op);
    loom_src at = op->src;
    loom_mainloop ml = {.ring = &w->ring, .a_tile = dt->a_chan < 0 ? dt->b_chan : dt->a_chan, .b_tile = dt->b_chan,
                        .a_trans = dt->a_trans, .b_trans = dt->b_trans, .rows = dt->m, .cols = dt->n, .steps = 1};
    ir_block *b = &w->src->blocks[w->body];
    for (uint32_t i = 0; i + 1 < b->nops && w->st == LOOM_OK; i++) {
        uint32_t o = b->ops[i];
        if (w->skip[o])
            continue;
        if (o != dt->op) {
            clone_op(w, o, false);
            continue;
        }
        loom_val a = dt->a_chan < 0 ? H(w, op->opnd[0]) : LOOM_NONE;
        loom_val first = loom_cmp_at(at, d, LOOM_GT, it, it0); /* a program's first step gives none back */
        loom_val prev = loom_sub_at(at, d, it, CI(1));
        w->map[op->res[0]] = U(w, loom_mainloop_step_at(at, d, &ml, it, prev, first, a, H(w, op->opnd[2]), LOOM_NONE));
    }
}

/* After a mainloop of ring uses it0 .. it_end - 1: wait for the last group and give the
 * last use's slot back (when the loop ran at all). */
static loom_val mainloop_finish(aw *w, loom_val acc, loom_val it0, loom_val it_end)
{
    loom_kernel *d = w->dst;
    loom_src at = sop(w, w->dot[0].op)->src;
    loom_region_op wt = loom_wgmma_wait_at(at, d, 0, 1, &acc);
    loom_val done = loom_wgmma_result(d, wt, 0);
    loom_region_op any = loom_if_begin_at(at, d, loom_cmp_at(at, d, LOOM_GT, it_end, it0), 0);
    loom_ring_release_at(at, d, &w->ring, loom_ring_slot_at(at, d, loom_sub_at(at, d, it_end, CI(1)), w->ring.slots));
    loom_if_end_at(at, d, any, 0, NULL);
    return done;
}

/* The consumers: the top level before the loop, the loop (its carried values and the
 * ring's use count), the epilogue after it. */
static void build_consumers(aw *w)
{
    loom_kernel *d = w->dst;
    ir_op *lp = sop(w, w->loop);
    loom_src at = lp->src;
    loom_region_op t = loom_consumers_begin_at(at, d, w->pingpong ? 4 : 4 * w->groups, w->pingpong ? 2 : 1);
    ir_block *top = &w->src->blocks[1];
    if (w->pingpong) { /* the loop's bounds (the same for every program) and its step count */
        w->rep = loom_pingpong_start_at(at, d, &w->pp);
        for (uint32_t j = 0; j < top->nops && w->st == LOOM_OK; j++)
            if (w->bounds[top->ops[j]])
                clone_op(w, top->ops[j], false);
        loom_val lo = H(w, lp->opnd[0]), hi = H(w, lp->opnd[1]), st = H(w, lp->opnd[2]);
        loom_val span = loom_add_at(at, d, loom_sub_at(at, d, hi, lo), loom_sub_at(at, d, st, CI(1)));
        w->trips = loom_select_at(at, d, loom_cmp_at(at, d, LOOM_GT, hi, lo), loom_div_at(at, d, span, st), CI(0));
    }
    loom_val it0;
    loom_region_op pl = programs_begin(w, at, &it0);
    uint32_t i = 0;
    for (; i < top->nops && top->ops[i] != w->loop && w->st == LOOM_OK; i++)
        if (!w->pingpong || !w->bounds[top->ops[i]])
            clone_op(w, top->ops[i], false);
    int n = lp->nopnd - 3;
    loom_val init[64];
    for (int j = 0; j < n; j++)
        init[j] = H(w, lp->opnd[3 + j]);
    init[n] = it0;
    if (w->pingpong) /* the tensor cores (and the ring's waits) in turn */
        loom_pingpong_mma_begin_at(at, d, &w->pp);
    loom_region_op l = loom_for_begin_at(at, d, H(w, lp->opnd[0]), H(w, lp->opnd[1]), H(w, lp->opnd[2]), n + 1, init);
    ir_block *b = &w->src->blocks[w->body];
    w->map[b->args[0]] = U(w, loom_for_iv(d, l));
    for (uint32_t j = 1; j < b->nargs; j++)
        w->map[b->args[j]] = U(w, loom_for_arg(d, l, (int)j - 1));
    loom_val it = loom_for_arg(d, l, n);
    if (w->mainloop)
        consumer_mainloop_step(w, it, it0);
    else
        consumer_step(w, it);
    if (w->st != LOOM_OK)
        return;
    ir_op *y = sop(w, b->ops[b->nops - 1]);
    loom_val ys[64];
    for (int j = 0; j < y->nopnd; j++)
        ys[j] = H(w, y->opnd[j]);
    ys[n] = loom_add_at(at, d, it, CI(1));
    loom_for_end_at(y->src, d, l, n + 1, ys);
    for (int r = 0; r < lp->nres; r++)
        w->map[lp->res[r]] = U(w, loom_for_result(d, l, r));
    loom_val it_end = loom_for_result(d, l, n);
    if (w->pingpong)
        loom_pingpong_mma_end_at(at, d, &w->pp);
    if (w->mainloop)
        w->map[lp->res[w->acc_arg]] = U(w, mainloop_finish(w, loom_for_result(d, l, w->acc_arg), it0, it_end));
    for (i++; i < top->nops && w->st == LOOM_OK; i++)
        clone_op(w, top->ops[i], false);
    if (w->pingpong) { /* the epilogue's turn to the other; past the other replica's program */
        loom_pingpong_tile_end_at(at, d, &w->pp);
        it_end = loom_add_at(at, d, it_end, w->trips);
    }
    loom_for_end_at(at, d, pl, 1, &it_end);
    if (w->pingpong) { /* the replica with a program fewer takes an empty turn */
        loom_val nprog = loom_num_programs_at(at, d, 0);
        loom_val total = loom_mul_at(at, d, loom_mul_at(at, d, w->grid[0], w->grid[1]), w->grid[2]);
        loom_val left = loom_max_at(at, d, loom_sub_at(at, d, total, loom_program_id_at(at, d, 0)), CI(0));
        loom_val mine = loom_div_at(at, d, loom_sub_at(at, d, loom_add_at(at, d, left, nprog), CI(1)), nprog);
        loom_pingpong_finish_at(at, d, &w->pp, loom_cmp_at(at, d, LOOM_EQ, loom_rem_at(at, d, mine, CI(2)), CI(1)));
    }
    if (w->staged)
        loom_epilogue_finish_at(at, d, &w->epi);
    loom_task_end_at(at, d, t);
}

static bool pass_code(aw *w)
{
    loom_kernel *k = w->src;
    loom_kernel *d = w->dst = loom_kernel_create_at(k->ws_at, k->name, 4 * (1 + w->groups));
    if (!d)
        return w->st = LOOM_ERR_NOMEM, false;
    uint32_t *pmap = calloc(k->nvals, sizeof *pmap), *cmap = calloc(k->nvals, sizeof *cmap);
    if (!pmap || !cmap) {
        free(pmap);
        free(cmap);
        return w->st = LOOM_ERR_NOMEM, false;
    }
    w->map = pmap;
    clone_args(w, pmap);
    memcpy(cmap, pmap, k->nvals * sizeof *cmap);
    loom_ring_tile tiles[LOOM_RING_MAX_TILES];
    for (int c = 0; c < w->nch; c++) {
        ir_type *t = &k->vals[w->ch[c].val].type;
        tiles[c] = (loom_ring_tile){(loom_dtype)t->dtype, t->shape, 1, w->ch[c].swz};
    }
    loom_src at = sop(w, w->loop)->src;
    w->ring = loom_ring_create_at(at, d, w->stages, 1, w->nch, tiles);
    w->pipe = loom_pipe_create(d);
    if (w->pingpong)
        w->pp = loom_pingpong_create_at(at, &w->pipe);
    if (w->staged) {
        ir_op *st = sop(w, w->staged);
        ir_type *v = &k->vals[st->opnd[st->nopnd - 1]].type;
        w->epi = loom_epilogue_create_at(st->src, &w->pipe, LOOM_EPI_STAGED, H(w, st->opnd[0]), (loom_dtype)v->dtype,
                                         v->shape, w->pingpong ? 2 : 1, w->pingpong ? 128 : 128 * w->groups);
    }
    build_producer(w);
    w->map = cmap;
    if (w->st == LOOM_OK)
        build_consumers(w);
    free(pmap);
    free(cmap);
    w->map = NULL;
    if (w->st != LOOM_OK)
        return false;
    if (loom_verify(d) != LOOM_OK)
        return fail(w, k->ws_at, "internal: the warp-specialized kernel does not verify:\n%s", loom_kernel_errors(d));
    if (dumping(w, "ws-code"))
        fprintf(stderr, "// loom IR after ws-code (automatic warp specialization)\n%s\n", loom_print(d));
    return true;
}

/* ---------------------------------------------------------------- the passes */

loom_status pipe_autows(loom_kernel *k, const char *dump, loom_kernel **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!k->ws_consumers)
        return LOOM_OK;
    aw w = {.src = k, .groups = k->ws_consumers, .stages = k->ws_stages, .pingpong = k->ws_pingpong, .dump = dump,
            .err = err, .errlen = errlen};
    w.prod = calloc(k->nops, 1);
    w.skip = calloc(k->nops, 1);
    w.bounds = calloc(k->nops, 1);
    if (!w.prod || !w.skip || !w.bounds) {
        free(w.prod);
        free(w.skip);
        free(w.bounds);
        return LOOM_ERR_NOMEM;
    }
    bool ok = pass_tasks(&w) && pass_data(&w) && pass_channels(&w) && pass_pipeline(&w) && pass_code(&w);
    free(w.prod);
    free(w.skip);
    free(w.bounds);
    if (!ok) {
        loom_kernel_destroy(w.dst);
        return w.st != LOOM_OK ? w.st : LOOM_ERR_UNSUPPORTED;
    }
    *out = w.dst;
    return LOOM_OK;
}
