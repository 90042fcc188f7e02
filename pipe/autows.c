/*
 * autows.c -- automatic warp specialization: the passes that turn a plain tile loop with
 * loom_dot into the warp-specialized kernel the explicit templates write by hand.
 *
 * The kernel a user writes the plain way (docs/dsl.md, "Two levels"):
 *
 *     acc = splat(0)
 *     for kk in lo..hi step s:          the loop (top level, carrying acc)
 *         a = load(A, offsets(kk))      tiles of tensor arguments, f16 / bf16 / FP8
 *         b = load(B, offsets(kk))
 *         acc = dot(a, b, acc)          (or trans(b), several dots, math between them;
 *                                        FP8: B must be trans of an [N, K] tile, K-major)
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
 *                group); N and K must be wgmma's (N a multiple of 8 up to 256, K of 16,
 *                FP8: 32, both operands K-major).
 *   ws-channels  code partition: the channels become tiles of one ring of shared-memory
 *                slots (pipeline layer, include/loom_pipe.h) with its full/empty
 *                barriers, each tile swizzled by its row's bytes; its tensor must suit TMA.
 *                A tile loaded before the loop that only dots read as A, and the first
 *                tile loaded after it (the epilogue's), get rings of their own, loaded by
 *                the producer once a program.
 *   ws-pipeline  stages (the ring's slots) and how a dot waits: the loop of a single dot
 *                that carries its accumulator keeps one wgmma group in flight and gives
 *                the previous step's slot back (loom_mainloop_step); a loop whose dot
 *                results are read by other ops waits for each dot and gives the slot back
 *                at the end of the step.  The store after the loop is staged for one TMA
 *                store, in a tile of its own or in the last k step's slot.  Register
 *                budgets (setmaxnreg) come from the roles: the producer keeps
 *                LOOM_PIPE_PRODUCER_REGS, the consumers share the rest.
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
#include "autows_passes.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- small helpers */

bool aw_fail(aw *w, loom_src at, const char *fmt, ...)
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

/* "file:line" of op o into buf. */
const char *aw_where(aw *w, uint32_t o, char *buf, size_t n)
{
    loom_src s = aw_op(w, o)->src;
    snprintf(buf, n, "%s:%d", s.file ? s.file : "?", s.line);
    return buf;
}

/* How many live ops read value v (anywhere in the kernel); *user: one of them. */
int aw_uses_of(aw *w, uint32_t v, uint32_t *user)
{
    int n = 0;
    for (uint32_t o = 1; o < w->src->nops; o++) {
        ir_op *op = aw_op(w, o);
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
        ir_op *op = aw_op(w, top->ops[i]);
        if (op->kind == IR_TASK || op->kind == IR_SMEM_ALLOC || op->kind == IR_MBAR_ALLOC)
            return aw_fail(w, op->src, "the kernel has explicit %s ops; automatic warp specialization takes a plain "
                                    "kernel (leave it as written: drop loom_kernel_set_autows)",
                           ir_opdescs[op->kind].name);
    }
    for (uint32_t o = 1; o < k->nops; o++) {
        ir_op *op = aw_op(w, o);
        if (op->block && (op->kind == IR_FLAG_ADD || op->kind == IR_FLAG_WAIT || op->kind == IR_ATOMIC_ADD))
            return aw_fail(w, op->src, "the kernel has a %s: its programs run persistently once specialized (each "
                                    "CTA takes several programs in turn), which programs that wait on each other "
                                    "or claim work cannot",
                           ir_opdescs[op->kind].name);
        if (!op->block || op->kind != IR_DOT)
            continue;
        uint32_t parent = k->blocks[op->block].parent;
        if (!parent || aw_op(w, parent)->kind != IR_FOR || aw_op(w, parent)->block != 1)
            return aw_fail(w, op->src, "this dot is not directly in a loop at the kernel's top level: the passes "
                                    "pipeline the dots of one such loop");
        if (w->loop && w->loop != parent)
            return aw_fail(w, op->src, "a second loop with dots (the first at line %d): the passes pipeline one loop",
                           aw_op(w, w->loop)->src.line);
        w->loop = parent;
    }
    if (!w->loop)
        return aw_fail(w, w->src->ws_at, "the kernel has no loom_dot in a loop: nothing to specialize");
    w->body = aw_op(w, w->loop)->reg[0];
    return true;
}

/* The load of the loop body that produced value v, seen through one trans; 0 if none. */
static uint32_t channel_load(aw *w, uint32_t v, bool *trans)
{
    uint32_t d = aw_def_of(w->src, v);
    *trans = false;
    if (d && aw_op(w, d)->kind == IR_TRANS) {
        *trans = true;
        d = aw_def_of(w->src, aw_op(w, d)->opnd[0]);
    }
    if (!d || aw_op(w, d)->kind != IR_LOAD || aw_op(w, d)->block != w->body)
        return 0;
    return d;
}

static int add_channel(aw *w, uint32_t load)
{
    for (int i = 0; i < w->nch; i++)
        if (w->ch[i].load == load)
            return i;
    if (w->nch == LOOM_RING_MAX_TILES)
        return aw_fail(w, aw_op(w, load)->src, "more than %d tiles a step feed the dots (the ring's tiles)",
                       LOOM_RING_MAX_TILES),
               -1;
    w->ch[w->nch] = (aw_chan){.load = load, .val = aw_op(w, load)->res[0]};
    return w->nch++;
}

/* Every use of a channel's tile is a dot operand, directly or through a trans that only
 * dots read: then the ring slot's view can stand for it. */
static bool channel_uses_ok(aw *w, const aw_chan *c)
{
    for (uint32_t o = 1; o < w->src->nops; o++) {
        ir_op *op = aw_op(w, o);
        if (!op->block)
            continue;
        for (int i = 0; i < op->nopnd; i++) {
            if (op->opnd[i] != c->val)
                continue;
            if (op->kind == IR_DOT && i < 2)
                continue;
            if (op->kind == IR_TRANS) {
                uint32_t user = 0;
                int n = aw_uses_of(w, op->res[0], &user);
                bool dots_only = true;
                for (uint32_t u = 1; u < w->src->nops && dots_only; u++) {
                    ir_op *uo = aw_op(w, u);
                    for (int j = 0; uo->block && j < uo->nopnd; j++)
                        if (uo->opnd[j] == op->res[0] && !(uo->kind == IR_DOT && j < 2))
                            dots_only = false;
                }
                if (n && dots_only)
                    continue;
            }
            char wb[256];
            return aw_fail(w, op->src,
                           "the tile loaded at %s feeds a dot and also this %s: a tile the producer loads into "
                           "shared memory can only be read by dots (load it a second time for the other use)",
                           aw_where(w, c->load, wb, sizeof wb), ir_opdescs[op->kind].name);
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
        return aw_fail(w, aw_op(w, why)->src,
                       "an offset or bound here depends on a value the loop carries (or an inner region's), which "
                       "the producer does not have (the load at %s)",
                       aw_where(w, why, wb, sizeof wb));
    }
    uint32_t d = val->def;
    if (w->prod[d])
        return true;
    ir_op *op = aw_op(w, d);
    bool scalar = true;
    for (int r = 0; r < op->nres; r++)
        if (k->vals[op->res[r]].type.kind != IR_T_TILE || k->vals[op->res[r]].type.shape.rank != 0)
            scalar = false;
    bool ok_kind = op->kind == IR_LOAD_SCALAR || (ir_opdescs[op->kind].flags & IRF_PURE) ||
                   op->kind == IR_DIV || op->kind == IR_REM;
    if (!scalar || !ok_kind || op->nreg || (op->block != 1 && op->block != w->body)) {
        char wb[256];
        return aw_fail(w, op->src,
                       "the producer needs this %s for the offsets or bounds of the loop at %s, but it is %s; the "
                       "producer computes only scalars (program ids, constants, arithmetic, load_scalar) from the "
                       "kernel's top level and the loop body",
                       ir_opdescs[op->kind].name, aw_where(w, w->loop, wb, sizeof wb),
                       !scalar ? "a tile" : op->nreg ? "a region" : "not such an op");
    }
    w->prod[d] = 1;
    for (int i = 0; i < op->nopnd; i++)
        if (!slice(w, op->opnd[i], why))
            return false;
    return true;
}

/* The outer channel: a dot's A from a tile loaded at the top level before the loop (a
 * 2-D f16/bf16/FP8 tile, unmasked, fill 0) that only dots' A operands read.  The producer
 * loads it once a program into a ring of its own, so the consumers' wgmma reads it from
 * shared memory as the template's Q is (in registers, the instructions that keep it
 * there make ptxas serialize the wgmmas of a pipelined step).  false only on an error. */
static bool outer_channel(aw *w)
{
    loom_kernel *k = w->src;
    uint32_t ld = 0;
    for (int i = 0; i < w->ndot; i++) {
        if (w->dot[i].a_chan >= 0)
            continue;
        uint32_t d = aw_def_of(k, aw_op(w, w->dot[i].op)->opnd[0]);
        if (!d || aw_op(w, d)->kind != IR_LOAD || aw_op(w, d)->block != 1 || (ld && d != ld))
            continue;
        ir_op *op = aw_op(w, d);
        const ir_type *t = &k->vals[op->res[0]].type;
        int rank = k->vals[op->opnd[0]].type.shape.rank;
        if (op->nopnd != 1 + rank || op->fattr != 0.0 || t->shape.rank != 2 ||
            (t->dtype != LOOM_F16 && t->dtype != LOOM_BF16 && !ir_dtype_is_fp8((loom_dtype)t->dtype)))
            continue;
        bool dots_only = true;
        for (uint32_t o = 1; o < k->nops && dots_only; o++) {
            ir_op *u = aw_op(w, o);
            for (int j = 0; u->block && j < u->nopnd; j++)
                if (u->opnd[j] == op->res[0] && !(u->kind == IR_DOT && j == 0))
                    dots_only = false;
        }
        if (!dots_only)
            continue;
        ld = d;
    }
    if (!ld)
        return true;
    for (int i = 1; i < aw_op(w, ld)->nopnd; i++)
        if (!slice(w, aw_op(w, ld)->opnd[i], ld)) { /* the producer cannot address it: registers */
            w->st = LOOM_OK;
            if (w->err && w->errlen)
                w->err[0] = 0;
            return true;
        }
    for (int i = 0; i < w->ndot; i++)
        if (w->dot[i].a_chan < 0 && aw_op(w, w->dot[i].op)->opnd[0] == aw_op(w, ld)->res[0])
            w->dot[i].a_chan = AW_OUTER;
    w->outer = ld;
    w->skip[ld] = 1;
    return true;
}

/* The epilogue channel: a tile loaded at the top level after the loop (2-D, f32, f16 or
 * bf16, unmasked, fill 0) at offsets the producer can compute.  Read from global memory
 * by the consumers after their k steps, its latency and its bytes (at L2's rate an SM's
 * share) come after the mainloop, on every program; loaded by the producer during the
 * k steps, they come off the critical path.  Only the first such load; none with
 * ping-pong.  pass_channels checks TMA can address it and pass_pipeline that it fits; a
 * load that cannot be a channel stays in registers.  false only on an error. */
static bool epilogue_channel(aw *w)
{
    loom_kernel *k = w->src;
    ir_block *top = &k->blocks[1];
    bool after = false;
    for (uint32_t i = 0; i < top->nops; i++) {
        uint32_t o = top->ops[i];
        ir_op *op = aw_op(w, o);
        after = after || o == w->loop;
        if (!after || op->kind != IR_LOAD)
            continue;
        const ir_type *t = &k->vals[op->res[0]].type;
        int rank = k->vals[op->opnd[0]].type.shape.rank;
        if (op->nopnd != 1 + rank || op->fattr != 0.0 || t->shape.rank != 2 ||
            (t->dtype != LOOM_F32 && t->dtype != LOOM_F16 && t->dtype != LOOM_BF16))
            continue;
        bool ok = true;
        for (int j = 1; j < op->nopnd && ok; j++)
            ok = slice(w, op->opnd[j], o);
        if (!ok) { /* the producer cannot address it: registers */
            w->st = LOOM_OK;
            if (w->err && w->errlen)
                w->err[0] = 0;
            continue;
        }
        w->epil = o;
        w->skip[o] = 1;
        return true;
    }
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
        if (aw_op(w, o)->kind != IR_DOT)
            continue;
        if (w->ndot == AW_MAX_DOTS)
            return aw_fail(w, aw_op(w, o)->src, "more than %d dots in the loop", AW_MAX_DOTS);
        aw_dot *d = &w->dot[w->ndot++];
        *d = (aw_dot){.op = o, .a_chan = -1, .b_chan = -1};
        uint32_t la = channel_load(w, aw_op(w, o)->opnd[0], &d->a_trans);
        uint32_t lb = channel_load(w, aw_op(w, o)->opnd[1], &d->b_trans);
        if (la && (d->a_chan = add_channel(w, la)) < 0)
            return false;
        if (!lb)
            return aw_fail(w, aw_op(w, o)->src,
                           "the dot's B operand is not a tile loaded in the loop (or its trans): wgmma reads B from "
                           "shared memory, which the producer fills from a load in the loop");
        if ((d->b_chan = add_channel(w, lb)) < 0)
            return false;
        if (!la)
            d->a_trans = false;
    }
    if (!w->pingpong && (!outer_channel(w) || !epilogue_channel(w)))
        return false;
    for (int c = 0; c < w->nch; c++) {
        ir_op *ld = aw_op(w, w->ch[c].load);
        if (!channel_uses_ok(w, &w->ch[c]))
            return false;
        int rank = k->vals[ld->opnd[0]].type.shape.rank;
        if (ld->nopnd != 1 + rank)
            return aw_fail(w, ld->src, "this load has a mask: the producer's TMA loads whole boxes (zeros outside "
                                    "the tensor); drop the mask, the dot needs none at the edges");
        if (ld->fattr != 0.0)
            return aw_fail(w, ld->src, "this load fills with %g outside the tensor; TMA fills with 0 (use fill 0)",
                           ld->fattr);
        for (int i = 1; i < ld->nopnd; i++)
            if (!slice(w, ld->opnd[i], w->ch[c].load))
                return false;
        w->skip[w->ch[c].load] = 1;
    }
    /* the trans ops that only turn a channel's tile go too: the views are transposed */
    for (uint32_t i = 0; i < body->nops; i++) {
        ir_op *op = aw_op(w, body->ops[i]);
        if (op->kind == IR_TRANS)
            for (int c = 0; c < w->nch; c++)
                if (op->opnd[0] == w->ch[c].val)
                    w->skip[body->ops[i]] = 1;
    }
    ir_op *lp = aw_op(w, w->loop);
    for (int i = 0; i < 3; i++)
        if (!slice(w, lp->opnd[i], w->loop))
            return false;
    if (aw_dumping(w, "ws-tasks")) {
        char wb[256];
        fprintf(stderr, "// autows ws-tasks: kernel '%s', the loop at %s\n", k->name,
                aw_where(w, w->loop, wb, sizeof wb));
        for (int c = 0; c < w->nch; c++)
            fprintf(stderr, "//   producer: load at %s (a channel: only dots read it)\n",
                    aw_where(w, w->ch[c].load, wb, sizeof wb));
        for (uint32_t o = 1; o < k->nops; o++)
            if (w->prod[o])
                fprintf(stderr, "//   producer and consumers: %s at %s (the producer slice)\n",
                        ir_opdescs[aw_op(w, o)->kind].name, aw_where(w, o, wb, sizeof wb));
        if (w->epil)
            fprintf(stderr, "//   producer: load at %s (the epilogue's tile, loaded during the k steps)\n",
                    aw_where(w, w->epil, wb, sizeof wb));
        for (int d = 0; d < w->ndot; d++)
            fprintf(stderr, "//   consumers: dot at %s\n", aw_where(w, w->dot[d].op, wb, sizeof wb));
        fprintf(stderr, "//   consumers: every other op of the kernel\n");
    }
    return true;
}

/* ---------------------------------------------------------------- ws-data */

/* Does value v come from the same scalars in every program (no program id, nothing read
 * from memory)?  Ping-pong's replicas count each other's ring uses by it. */
static bool same_everywhere(aw *w, uint32_t v)
{
    uint32_t d = aw_def_of(w->src, v);
    if (!d)
        return w->src->vals[v].kind == IR_V_ARG;
    ir_op *op = aw_op(w, d);
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
    ir_op *lp = aw_op(w, w->loop);
    for (int i = 0; i < 3; i++)
        if (!same_everywhere(w, lp->opnd[i]))
            return aw_fail(w, lp->src, "with pingpong=1 the loop's bounds must be the same in every program (the two "
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
        ir_op *op = aw_op(w, d->op);
        ir_type *a = &k->vals[op->opnd[0]].type, *b = &k->vals[op->opnd[1]].type, *acc = &k->vals[op->opnd[2]].type;
        bool fp8 = ir_dtype_is_fp8((loom_dtype)a->dtype);
        if (a->dtype != LOOM_F16 && a->dtype != LOOM_BF16 && !fp8)
            return aw_fail(w, op->src, "the dot's operands are %s: the tensor cores take f16, bf16, e4m3 or e5m2 here "
                                    "(an f32 dot stays on FMA: drop loom_kernel_set_autows)",
                           loom_dtype_name((loom_dtype)a->dtype));
        d->m = acc->shape.dim[0];
        d->n = acc->shape.dim[1];
        d->kk = a->shape.dim[1];
        char tb[64];
        /* FP8 wgmma has no transpose: A and B both K-major in shared memory (docs/dsl.md,
         * "FP8 wgmma"), A an [M, K] tile as loaded, B the trans of a loaded [N, K] tile */
        if (fp8 && !d->b_trans)
            return aw_fail(w, op->src,
                           "the dot's B is %s, a [K, N] tile as loaded (N-major); FP8 wgmma reads B K-major: "
                           "store B as [N, K], load its [%lld x %lld] tile and pass loom_trans of it to the dot",
                           ir_type_str(b, tb, sizeof tb), (long long)b->shape.dim[1], (long long)b->shape.dim[0]);
        if (fp8 && d->a_chan >= 0 && d->a_trans)
            return aw_fail(w, op->src,
                           "the dot's A is the trans of a loaded [K, M] tile (M-major); FP8 wgmma reads A K-major: "
                           "store A as [M, K] and pass its loaded [%lld x %lld] tile as it is",
                           (long long)a->shape.dim[0], (long long)a->shape.dim[1]);
        if (fp8 && d->kk % 32)
            return aw_fail(w, op->src, "the dot's k is %lld: FP8 wgmma takes a multiple of 32", (long long)d->kk);
        int parts = w->pingpong ? 1 : w->groups; /* ping-pong: each group whole programs */
        int64_t per = d->m / parts;
        if (d->m % parts || per % 64)
            return aw_fail(w, op->src,
                           "the dot's accumulator has %lld rows: %d consumer warp group%s sharing it need a multiple "
                           "of %d (64 rows a group, wgmma's)%s",
                           (long long)d->m, parts, parts > 1 ? "s" : "", 64 * parts,
                           parts > 1 ? "; pingpong=1 gives each group whole programs of 64 rows" : "");
        if (d->n % 8 || d->n > 256)
            return aw_fail(w, op->src, "the dot's accumulator has %lld columns: wgmma takes a multiple of 8 up to 256",
                           (long long)d->n);
        if (d->kk % 16)
            return aw_fail(w, op->src, "the dot's k is %lld: wgmma takes a multiple of 16", (long long)d->kk);
    }
    if (aw_dumping(w, "ws-data")) {
        char wb[256];
        if (w->pingpong)
            fprintf(stderr, "// autows ws-data: 2 consumer warp groups as two replicas, each taking every other "
                            "program of the CTA whole (ping-pong)\n");
        else
            fprintf(stderr, "// autows ws-data: %d consumer warp group%s in one task (cooperative)\n", w->groups,
                    w->groups > 1 ? "s" : "");
        for (int i = 0; i < w->ndot; i++) {
            aw_dot *d = &w->dot[i];
            fprintf(stderr,
                    "//   dot at %s: [%lld x %lld] += [%lld x %lld] @ [%lld x %lld]; each group its %lld rows\n",
                    aw_where(w, d->op, wb, sizeof wb), (long long)d->m, (long long)d->n, (long long)d->m,
                    (long long)d->kk, (long long)d->kk, (long long)d->n,
                    (long long)(d->m / (w->pingpong ? 1 : w->groups)));
        }
    }
    return true;
}

/* ---------------------------------------------------------------- ws-channels */

/* Tensor argument t of a TMA load at `at`: contiguous rows 16-byte multiples apart. */
static bool tma_tensor_ok(aw *w, uint32_t t, loom_src at)
{
    const ir_arg *arg = &w->src->args[w->src->vals[t].def];
    size_t es = loom_dtype_size(arg->dtype);
    int r = arg->shape.rank;
    if (arg->strides[r - 1] != 1)
        return aw_fail(w, at, "tensor '%s' is not contiguous in its last dim (stride %lld): TMA needs 1", arg->name,
                       (long long)arg->strides[r - 1]);
    for (int d = 0; d < r - 1; d++)
        if ((arg->strides[d] * (int64_t)es) % 16)
            return aw_fail(w, at,
                           "tensor '%s' has dim %d %lld bytes apart: TMA needs multiples of 16 (pad its rows, "
                           "loom_arg_tensor_strided)",
                           arg->name, d, (long long)(arg->strides[d] * (int64_t)es));
    return true;
}

/* The swizzle of a shared tile whose rows are `row` bytes. */
static loom_swizzle swizzle_of(int64_t row)
{
    return row % 128 == 0 ? LOOM_SWIZZLE_128 : row % 64 == 0 ? LOOM_SWIZZLE_64 : LOOM_SWIZZLE_32;
}

/* Can the tile load ld have a ring of its own (rows of a swizzle's multiple, a tensor TMA
 * can address; *swz its swizzle)?  Where not, it stays in registers: no error. */
static bool own_ring_ok(aw *w, uint32_t ld, loom_swizzle *swz)
{
    ir_op *op = aw_op(w, ld);
    ir_type *t = &w->src->vals[op->res[0]].type;
    int64_t row = t->shape.dim[1] * (int64_t)loom_dtype_size((loom_dtype)t->dtype);
    *swz = swizzle_of(row);
    if (row % 32 == 0 && tma_tensor_ok(w, op->opnd[0], op->src))
        return true;
    w->st = LOOM_OK;
    if (w->err && w->errlen)
        w->err[0] = 0;
    return false;
}

static bool pass_channels(aw *w)
{
    loom_kernel *k = w->src;
    if (w->outer && !own_ring_ok(w, w->outer, &w->outer_swz)) {
        for (int i = 0; i < w->ndot; i++)
            if (w->dot[i].a_chan == AW_OUTER)
                w->dot[i].a_chan = -1;
        w->skip[w->outer] = 0;
        w->outer = 0;
    }
    if (w->epil && !own_ring_ok(w, w->epil, &w->epil_swz)) {
        w->skip[w->epil] = 0;
        w->epil = 0;
    }
    for (int c = 0; c < w->nch; c++) {
        ir_op *ld = aw_op(w, w->ch[c].load);
        ir_type *t = &k->vals[w->ch[c].val].type;
        if (t->shape.rank != 2)
            return aw_fail(w, ld->src, "the tile is %d-D: a channel is a 2-D tile", t->shape.rank);
        int64_t row = t->shape.dim[1] * (int64_t)loom_dtype_size((loom_dtype)t->dtype);
        w->ch[c].swz = swizzle_of(row);
        if (row % 32)
            return aw_fail(w, ld->src, "the tile's rows are %lld bytes: a swizzled shared tile needs a multiple of 32",
                           (long long)row);
        if (!tma_tensor_ok(w, ld->opnd[0], ld->src))
            return false;
    }
    if (aw_dumping(w, "ws-channels")) {
        char wb[256], tb[64];
        int64_t bytes = 0;
        fprintf(stderr, "// autows ws-channels: one ring, a slot holds %d tile%s\n", w->nch, w->nch > 1 ? "s" : "");
        for (int c = 0; c < w->nch; c++) {
            ir_type *t = &k->vals[w->ch[c].val].type;
            bytes += ir_shape_numel(&t->shape) * (int64_t)loom_dtype_size((loom_dtype)t->dtype);
            fprintf(stderr, "//   tile %d: %s swizzle %d, TMA from '%s' (the load at %s)\n", c,
                    ir_type_str(t, tb, sizeof tb), (int)w->ch[c].swz,
                    k->args[k->vals[aw_op(w, w->ch[c].load)->opnd[0]].def].name,
                    aw_where(w, w->ch[c].load, wb, sizeof wb));
        }
        fprintf(stderr, "//   %lld bytes a slot; full and empty mbarriers a slot\n", (long long)bytes);
        if (w->outer)
            fprintf(stderr, "//   and a ring for the tile loaded before the loop at %s (a dot's A), loaded once a "
                            "program\n", aw_where(w, w->outer, wb, sizeof wb));
        if (w->epil)
            fprintf(stderr, "//   and a ring of one slot for the epilogue's tile loaded at %s (%s), loaded once a "
                            "program\n", aw_where(w, w->epil, wb, sizeof wb),
                    ir_type_str(&k->vals[aw_op(w, w->epil)->res[0]].type, tb, sizeof tb));
    }
    return true;
}

/* ---------------------------------------------------------------- ws-pipeline */

/* Is value v a block argument of the loop body carried by it (not the induction variable)
 * other than `except`? */
static bool carried_other(aw *w, uint32_t v, uint32_t except)
{
    const ir_value *val = &w->src->vals[v];
    return val->kind == IR_V_BLOCKARG && val->block == w->body && val->index >= 1 && v != except;
}

/* The software-pipelined form (FA3's intra-warpgroup overlap) of a loop of two dots: the
 * first's operands come from outside the step's math (a channel, a loop-invariant tile,
 * a zero), the second carries the accumulator and is the only op its result feeds (the
 * yield).  The body's other ops fall into parts: AFTER1 (they depend on the first dot's
 * result or on the other carried values, not on the accumulator: the softmax), ACC (on
 * the accumulator: its rescale), PRE (on neither: recomputed where used).  Step j+1's
 * first dot and AFTER1 part then run while step j's second dot is on the tensor cores,
 * and the ACC part of step j+1 follows that dot's wait, so nothing but wgmma writes a
 * wgmma's registers while the two are in flight (ptxas serializes them otherwise).  Needs
 * two ring slots (a step's and the next one's at once).  false (no rotation) where the
 * loop is not of that form. */
static bool rotation(aw *w)
{
    loom_kernel *k = w->src;
    if (w->ndot != 2 || w->stages < 2 || w->pingpong)
        return false;
    ir_block *b = &k->blocks[w->body];
    ir_op *d1 = aw_op(w, w->dot[0].op), *d2 = aw_op(w, w->dot[1].op);
    ir_op *y = aw_op(w, b->ops[b->nops - 1]);
    int acc = -1;
    for (int i = 0; i < y->nopnd; i++)
        if (y->opnd[i] == d2->res[0])
            acc = i;
    if (acc < 0 || aw_uses_of(w, d2->res[0], NULL) != 1 || w->dot[1].b_chan < 0 || w->dot[0].b_chan < 0)
        return false;
    uint32_t accv = b->args[1 + acc];
    memset(w->cat, 0, k->nops);
    for (uint32_t i = 0; i + 1 < b->nops; i++) {
        uint32_t o = b->ops[i];
        ir_op *op = aw_op(w, o);
        if (o == w->dot[0].op || o == w->dot[1].op || w->skip[o])
            continue;
        if (op->nreg || (!(ir_opdescs[op->kind].flags & IRF_PURE) && op->kind != IR_DIV && op->kind != IR_REM))
            return false; /* stores, loads, regions: not moved */
        int c = AW_CAT_PRE;
        for (int j = 0; j < op->nopnd; j++) {
            uint32_t v = op->opnd[j], dv = aw_def_of(k, v);
            if (v == accv || (dv && w->cat[dv] == AW_CAT_ACC))
                c = AW_CAT_ACC;
            else if ((v == d1->res[0] || carried_other(w, v, accv) || (dv && w->cat[dv] == AW_CAT_AFTER1)) &&
                     c != AW_CAT_ACC)
                c = AW_CAT_AFTER1;
        }
        w->cat[o] = (uint8_t)c;
    }
    for (int j = 0; j < 3; j++) { /* the first dot reads none of the step's math */
        uint32_t dv = aw_def_of(k, d1->opnd[j]);
        if (d1->opnd[j] == accv || carried_other(w, d1->opnd[j], accv) || (dv && w->cat[dv] != AW_CAT_PRE))
            return false;
    }
    /* the second dot: A from the AFTER1 part, its accumulator the ACC part's (or the
     * accumulator itself) */
    uint32_t da = aw_def_of(k, d2->opnd[0]), dc = aw_def_of(k, d2->opnd[2]);
    if (!(d2->opnd[0] == d1->res[0] || (da && w->cat[da] == AW_CAT_AFTER1 && aw_op(w, da)->block == w->body)))
        return false;
    if (d2->opnd[2] != accv && !(dc && w->cat[dc] == AW_CAT_ACC && aw_op(w, dc)->block == w->body))
        return false;
    for (int i = 0; i < y->nopnd; i++) { /* the other carried values: not the accumulator's */
        uint32_t dv = aw_def_of(k, y->opnd[i]);
        if (i != acc && (y->opnd[i] == accv || (dv && w->cat[dv] == AW_CAT_ACC)))
            return false;
    }
    for (uint32_t i = 0; i + 1 < b->nops; i++) { /* the accumulator feeds ACC ops and the second dot */
        uint32_t o = b->ops[i];
        ir_op *op = aw_op(w, o);
        for (int j = 0; j < op->nopnd; j++)
            if (op->opnd[j] == accv && o != w->dot[1].op && w->cat[o] != AW_CAT_ACC)
                return false;
    }
    /* FEED: AFTER1 ops whose every use is the second dot's A or another FEED op */
    for (uint32_t i = b->nops - 1; i-- > 0;) {
        uint32_t o = b->ops[i];
        if (w->skip[o] || o == w->dot[0].op || o == w->dot[1].op || w->cat[o] != AW_CAT_AFTER1)
            continue;
        bool feed = aw_op(w, o)->nres == 1;
        for (uint32_t u = 1; feed && u < k->nops; u++) {
            ir_op *uo = aw_op(w, u);
            for (int j = 0; uo->block && j < uo->nopnd; j++)
                if (uo->opnd[j] == aw_op(w, o)->res[0] && !(u == w->dot[1].op && j == 0) &&
                    !(uo->block == w->body && w->cat[u] == AW_CAT_FEED))
                    feed = false;
        }
        if (feed)
            w->cat[o] = AW_CAT_FEED;
    }
    w->acc_arg = acc;
    return true;
}

/* The shared memory of the ring's slots and the epilogue channel's. */
static int64_t ring_bytes(aw *w)
{
    int64_t ring = 0;
    for (int c = 0; c < w->nch; c++)
        ring += aw_tile_bytes(&w->src->vals[w->ch[c].val].type);
    ring *= w->stages;
    return ring + (w->epil ? aw_tile_bytes(&w->src->vals[aw_op(w, w->epil)->res[0]].type) : 0);
}

/* The epilogue channel's slot beside the ring (and the outer ring's first slot), else
 * the load stays in registers (why: for the dump). */
static void epilogue_fits(aw *w, char *why, size_t n)
{
    if (!w->epil)
        return;
    int64_t q = w->outer ? aw_tile_bytes(&w->src->vals[aw_op(w, w->outer)->res[0]].type) : 0;
    int64_t need = ring_bytes(w) + q + 1024 + 64 * w->stages;
    if (need <= 227 * 1024)
        return;
    char wb[200];
    snprintf(why, n, "the load at %s stays in registers: its %lld-byte tile does not fit beside the ring (fewer "
                     "stages or a smaller tile would)",
             aw_where(w, w->epil, wb, sizeof wb),
             (long long)aw_tile_bytes(&w->src->vals[aw_op(w, w->epil)->res[0]].type));
    w->skip[w->epil] = 0;
    w->epil = 0;
}

/* Is tile v (of the source kernel) made with a trans on the way (its columns then lie in
 * other threads' registers, so a column part of it would move through shared memory)? */
static bool made_with_trans(aw *w, uint32_t v, int depth)
{
    const ir_value *x = &w->src->vals[v];
    if (x->kind != IR_V_RESULT || depth > 16)
        return depth > 16;
    const ir_op *op = aw_op(w, x->def);
    if (op->kind == IR_TRANS)
        return true;
    for (int i = 0; i < op->nopnd; i++)
        if (w->src->vals[op->opnd[i]].type.kind == IR_T_TILE && w->src->vals[op->opnd[i]].type.shape.rank == 2 &&
            made_with_trans(w, op->opnd[i], depth + 1))
            return true;
    return false;
}

/* The store after the loop that the epilogue can stage for a TMA store: the top level's
 * only store, of a 2-D tile whose rows are whole 128-byte swizzle spans, unmasked, into
 * a tensor TMA can address, with room beside the ring.  0 (and why, for the dump) when
 * there is none; *room: the store could be staged but for the room. */
static uint32_t staged_store(aw *w, char *why, size_t n, uint32_t *room)
{
    *room = 0;
    loom_kernel *k = w->src;
    ir_block *top = &k->blocks[1];
    uint32_t st = 0, after = 0;
    for (uint32_t i = 0; i < top->nops; i++) {
        uint32_t o = top->ops[i];
        if (o == w->loop)
            after = 1;
        else if (after && aw_op(w, o)->kind == IR_STORE) {
            if (st)
                return snprintf(why, n, "two stores after the loop: both from registers"), 0;
            st = o;
        }
    }
    if (!st)
        return 0;
    ir_op *op = aw_op(w, st);
    char wb[200];
    aw_where(w, st, wb, sizeof wb);
    const ir_arg *arg = &k->args[k->vals[op->opnd[0]].def];
    int r = arg->shape.rank;
    ir_type *v = &k->vals[op->opnd[1 + r]].type; /* the tile (a mask may follow) */
    w->coal = op->nopnd != 2 + r;
    if (w->coal && w->pingpong)
        return snprintf(why, n, "the store at %s goes from registers: it has a mask (with ping-pong)", wb), 0;
    if (v->shape.rank != 2 || (v->shape.dim[1] * (int64_t)loom_dtype_size((loom_dtype)v->dtype)) % 128)
        return snprintf(why, n, "the store at %s goes from registers: its tile's rows are not whole 128-byte spans",
                        wb), 0;
    size_t es = loom_dtype_size(arg->dtype);
    bool tma = arg->strides[r - 1] == 1;
    for (int d = 0; d < r - 1; d++)
        tma = tma && (arg->strides[d] * (int64_t)es) % 16 == 0;
    if (!tma && !w->coal)
        return snprintf(why, n, "the store at %s goes from registers: TMA cannot address '%s' (rows not 16-byte "
                                "multiples apart)", wb, arg->name), 0;
    int64_t ring = ring_bytes(w);
    if (w->outer) { /* two slots where they fit beside the ring and the staging tile, else one */
        int64_t q = aw_tile_bytes(&k->vals[aw_op(w, w->outer)->res[0]].type);
        w->qslots = ring + 2 * q + aw_tile_bytes(v) + 2048 <= 227 * 1024 ? 2 : 1;
        ring += w->qslots * q;
    }
    int64_t fixed = ring + 1024 + 64 * w->stages, limit = 227 * 1024; /* beside a staging tile */
    int64_t need = fixed + aw_tile_bytes(v) * (w->pingpong ? 2 : 1);
    /* else in column parts (a half, a quarter), each a whole number of 128-byte spans a
     * row: one staging tile of a part, a TMA store each (one consumer task; ping-pong's
     * replicas stage whole tiles; not a tile turned by a trans, whose columns lie in
     * other threads) */
    w->parts = 1;
    bool split = !w->pingpong && !w->coal && !made_with_trans(w, op->opnd[1 + r], 0);
    for (int p = 2; need > limit && split && p <= 4; p *= 2) {
        int64_t cols = v->shape.dim[1] / p;
        if (v->shape.dim[1] % p || (cols & (cols - 1)) || (cols * (int64_t)es) % 128)
            break;
        if (fixed + aw_tile_bytes(v) / p <= limit) {
            w->parts = p;
            need = fixed + aw_tile_bytes(v) / p;
        }
    }
    if (need > limit) {
        *room = st;
        return snprintf(why, n, "the store at %s goes from registers: its %lld-byte staging tile does not fit beside "
                                "the rings' %lld bytes (fewer stages or a smaller tile would)",
                        wb, (long long)aw_tile_bytes(v), (long long)ring), 0;
    }
    return st;
}

/* A staged store with no room of its own (st) can go through the last k step's slot
 * where a channel's tile there has the stored tile's dtype and shape (a 64-row tile's
 * [64, BN] B tile; attention's K or V tile): the mainloop and the rotated forms, whose
 * consumers then hold that slot until the store has read it.  The channel's index + 1, or
 * 0. */
static int borrowable(aw *w, uint32_t st)
{
    if (!st || !(w->mainloop || w->rotate) || w->pingpong)
        return 0;
    ir_op *op = aw_op(w, st);
    ir_type *v = &w->src->vals[op->opnd[1 + w->src->vals[op->opnd[0]].type.shape.rank]].type;
    for (int c = 0; c < w->nch; c++) {
        ir_type *t = &w->src->vals[w->ch[c].val].type;
        if (t->dtype == v->dtype && ir_shape_eq(&t->shape, &v->shape) && w->ch[c].swz == LOOM_SWIZZLE_128)
            return c + 1;
    }
    return 0;
}

/* Is v a constant integer (*x)? */
static bool const_int(aw *w, uint32_t v, int64_t *x)
{
    ir_const c;
    if (!ir_scalar_const(w->src, v, &c) || c.isf)
        return false;
    *x = c.i;
    return true;
}

static bool pass_pipeline(aw *w)
{
    loom_kernel *k = w->src;
    ir_op *lp = aw_op(w, w->loop);
    ir_block *body = &k->blocks[w->body];
    uint32_t yield = body->ops[body->nops - 1];
    w->mainloop = false;
    if (w->ndot == 1) {
        ir_op *d = aw_op(w, w->dot[0].op);
        ir_value *acc = &k->vals[d->opnd[2]];
        if (acc->kind == IR_V_BLOCKARG && acc->block == w->body && acc->index >= 1) {
            int i = (int)acc->index - 1;
            uint32_t user = 0;
            /* (one slot: a step's slot must come back before the next step's loads, so
             * each dot is waited for) */
            w->mainloop = w->stages > 1 && aw_op(w, yield)->opnd[i] == d->res[0] &&
                          aw_uses_of(w, d->res[0], NULL) == 1 && aw_uses_of(w, d->opnd[2], &user) == 1;
            w->acc_arg = i;
        }
    }
    (void)lp;
    w->rotate = !w->mainloop && rotation(w);
    int64_t lo, hi, step;
    w->runs = const_int(w, lp->opnd[0], &lo) && const_int(w, lp->opnd[1], &hi) && const_int(w, lp->opnd[2], &step) &&
              step > 0 && hi > lo;
    w->qslots = 2;
    char why[600] = "", ewhy[400] = "";
    epilogue_fits(w, ewhy, sizeof ewhy);
    uint32_t room;
    w->staged = staged_store(w, why, sizeof why, &room);
    if (!w->staged && (w->borrow = borrowable(w, room))) {
        w->staged = room;
        why[0] = 0;
    }
    /* the held slot back during the next program's first k steps: waiting for the store
     * to read it right after issuing it would hold the whole warp group (its wgmmas are
     * aligned) for the read */
    w->defer = w->borrow && w->mainloop && !w->coal;
    if (w->outer && !w->staged) { /* the outer ring's slots beside the ring alone */
        int64_t q = aw_tile_bytes(&w->src->vals[aw_op(w, w->outer)->res[0]].type);
        w->qslots = ring_bytes(w) + 2 * q + 2048 <= 227 * 1024 ? 2 : 1;
    }
    if (aw_dumping(w, "ws-pipeline")) {
        fprintf(stderr, "// autows ws-pipeline: %d stages (ring slots)\n", w->stages);
        if (w->mainloop)
            fprintf(stderr, "//   one dot carrying its accumulator: one wgmma group in flight, the previous step's "
                            "slot given back after it (loom_mainloop_step)\n");
        else if (w->rotate)
            fprintf(stderr, "//   two dots, the second carrying the accumulator: software-pipelined by a step (step "
                            "j + 1's first dot and the math on its result run beside step j's second dot)\n");
        else
            fprintf(stderr, "//   the dots' results are read in the step: each dot waited for, the slot given back "
                            "at the end of the step\n");
        fprintf(stderr, "//   registers: producer %d a thread, consumers %d (setmaxnreg)\n", LOOM_PIPE_PRODUCER_REGS,
                loom_pipe_consumer_regs(w->src));
        char wb[256];
        if (w->staged && w->coal)
            fprintf(stderr, "//   the store at %s: it has a mask, so the tile goes through %s and back to registers "
                            "in rows of 16-byte runs a thread, stored masked (no TMA)\n",
                    aw_where(w, w->staged, wb, sizeof wb),
                    w->borrow ? "the last k step's slot (held until read)" : "a staging tile");
        else if (w->staged && w->borrow)
            fprintf(stderr, "//   the store at %s: staged in the last k step's slot (its tile %d), one TMA store; "
                            "the slot goes back once the store has read it%s\n",
                    aw_where(w, w->staged, wb, sizeof wb), w->borrow - 1,
                    w->defer ? ", during the next program's first k steps" : "");
        else if (w->staged && w->parts > 1)
            fprintf(stderr, "//   the store at %s: staged in shared memory in %d column parts (the whole tile does not "
                            "fit beside the rings), a TMA store each, each part written once the last has been read\n",
                    aw_where(w, w->staged, wb, sizeof wb), w->parts);
        else if (w->staged)
            fprintf(stderr, "//   the store at %s: staged in shared memory, one TMA store (waited for before the next "
                            "program's)\n", aw_where(w, w->staged, wb, sizeof wb));
        if (w->epil)
            fprintf(stderr, "//   the load at %s: one slot of its own, loaded by the producer after the first %d k "
                            "steps of each program (its previous use read by then), read from shared memory by "
                            "the epilogue\n", aw_where(w, w->epil, wb, sizeof wb), w->stages);
        if (ewhy[0])
            fprintf(stderr, "//   %s\n", ewhy);
        if (why[0])
            fprintf(stderr, "//   %s\n", why);
    }
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
    w.cat = calloc(k->nops, 1);
    if (!w.prod || !w.skip || !w.bounds || !w.cat) {
        free(w.prod);
        free(w.skip);
        free(w.bounds);
        free(w.cat);
        return LOOM_ERR_NOMEM;
    }
    bool ok = pass_tasks(&w) && pass_data(&w) && pass_channels(&w) && pass_pipeline(&w) && aw_pass_code(&w);
    free(w.prod);
    free(w.skip);
    free(w.bounds);
    free(w.cat);
    if (!ok) {
        loom_kernel_destroy(w.dst);
        return w.st != LOOM_OK ? w.st : LOOM_ERR_UNSUPPORTED;
    }
    *out = w.dst;
    return LOOM_OK;
}
