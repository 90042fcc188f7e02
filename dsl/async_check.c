/*
 * async_check.c -- whole-kernel checks of the Hopper machinery.
 *
 * The type rules (dsl/rules.c) see one op at a time.  What can only be judged over the
 * whole kernel is checked here, statically, where it is provable:
 *
 *   - tasks fill the CTA exactly (sum of warps * replicas == num_warps), start on a
 *     warp-group boundary when they carry a register budget, and their budgets fit the
 *     register file (64K 32-bit registers per SM, one CTA);
 *   - with tasks, the top level holds only allocations, scalar arithmetic and tasks;
 *   - the tasks that arrive on a barrier array add up to its arrival count (each task
 *     replica arrives once per phase: the model the DSL documents);
 *   - an mbar_expect's byte count equals the bytes of the TMA loads that complete on the
 *     same barrier in the same block (when there are any there to count);
 *   - an accumulator produced by wgmma is read by other ops only after a wgmma_wait with
 *     pending = 0 (in flight, its registers still belong to the tensor cores).
 *
 * What cannot be proved statically (a wait on the wrong phase, a slot read before its
 * data landed) the interpreter reports when it happens.
 */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

int ir_tasks(const loom_kernel *k, ir_task_info *out, int max)
{
    int n = 0, warp = 0;
    const ir_block *body = &k->blocks[1];
    for (uint32_t i = 0; i < body->nops; i++) {
        const ir_op *op = &k->ops[body->ops[i]];
        if (op->kind != IR_TASK)
            continue;
        if (n < max)
            out[n] = (ir_task_info){body->ops[i], warp, (int)op->iattr[0], (int)op->iattr[1],
                                    (int)op->iattr[2]};
        warp += (int)(op->iattr[0] * op->iattr[2]);
        n++;
    }
    return n;
}

/* The task op enclosing op o, or 0. */
static uint32_t task_of(const loom_kernel *k, uint32_t o)
{
    for (uint32_t b = k->ops[o].block; b;) {
        uint32_t p = k->blocks[b].parent;
        if (!p)
            return 0;
        if (k->ops[p].kind == IR_TASK)
            return p;
        b = k->ops[p].block;
    }
    return 0;
}

static int64_t view_bytes(const loom_kernel *k, uint32_t v)
{
    const ir_type *t = &k->vals[v].type;
    return ir_shape_numel(&t->shape) * (int64_t)loom_dtype_size((loom_dtype)t->dtype);
}

static void check_tasks(loom_kernel *k)
{
    ir_task_info t[64];
    int n = ir_tasks(k, t, 64);
    if (n == 0)
        return;
    if (n > 64) {
        ir_error(k, k->ops[t[0].op].src, "task", "a kernel holds at most 64 tasks, not %d", n);
        return;
    }
    int warps = t[n - 1].first_warp + t[n - 1].warps * t[n - 1].replicas;
    if (warps != k->num_warps)
        ir_error(k, k->ops[t[0].op].src, "task",
                 "the tasks use %d warps (sum of warps * replicas) but kernel '%s' was created "
                 "with %d; make them equal",
                 warps, k->name, k->num_warps);
    int threads = k->num_warps * 32;
    int entry = threads ? (65536 / threads) & ~7 : 0;
    if (entry > 255)
        entry = 255;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const ir_op *op = &k->ops[t[i].op];
        if (t[i].regs && t[i].first_warp % 4)
            ir_error(k, op->src, "task",
                     "a task with a register budget must start on a warp-group boundary; this "
                     "one starts at warp %d (put the tasks with budgets first, or pad with whole "
                     "warp groups)",
                     t[i].first_warp);
        total += (int64_t)(t[i].regs ? t[i].regs : entry) * t[i].warps * t[i].replicas * 32;
    }
    if (total > 65536) {
        char list[512] = "";
        size_t p = 0;
        for (int i = 0; i < n && p < sizeof list; i++)
            p += (size_t)snprintf(list + p, sizeof list - p, "%s%d warps x %d x %d regs",
                                  i ? " + " : "", t[i].warps, t[i].replicas,
                                  t[i].regs ? t[i].regs : entry);
        ir_error(k, k->ops[t[0].op].src, "task",
                 "register budgets need %lld registers (%s, 32 threads a warp) but an SM has "
                 "65536",
                 (long long)total, list);
    }
    /* the top level: allocations, scalars and tasks */
    const ir_block *body = &k->blocks[1];
    for (uint32_t i = 0; i < body->nops; i++) {
        const ir_op *op = &k->ops[body->ops[i]];
        unsigned fl = ir_opdescs[op->kind].flags;
        if (op->kind == IR_TASK || (fl & IRF_ALLOC) || op->kind == IR_YIELD)
            continue;
        bool scalar = (fl & IRF_PURE) && op->nres == 1 &&
                      k->vals[op->res[0]].type.kind == IR_T_TILE &&
                      k->vals[op->res[0]].type.shape.rank == 0;
        if (!scalar && op->kind != IR_LOAD_SCALAR)
            ir_error(k, op->src, ir_opdescs[op->kind].name,
                     "a kernel with tasks holds only allocations, scalar values and tasks at its "
                     "top level; move this op into a task");
    }
}

/* Arrivals on each barrier array; bytes expected vs TMA loads. */
static void check_barriers(loom_kernel *k)
{
    for (uint32_t o = 1; o < k->nops; o++) {
        ir_op *al = &k->ops[o];
        if (al->kind != IR_MBAR_ALLOC || !al->nres || !al->block)
            continue;
        uint32_t bars = al->res[0];
        uint32_t tasks[64];
        int nt = 0;
        bool outside = false;
        for (uint32_t a = 1; a < k->nops; a++) {
            ir_op *op = &k->ops[a];
            if ((op->kind != IR_MBAR_ARRIVE && op->kind != IR_MBAR_EXPECT) || !op->block ||
                op->opnd[0] != bars)
                continue;
            uint32_t t = task_of(k, a);
            if (!t) {
                outside = true;
                continue;
            }
            bool seen = false;
            for (int i = 0; i < nt; i++)
                seen |= tasks[i] == t;
            if (!seen && nt < 64)
                tasks[nt++] = t;
        }
        if (outside || nt == 0)
            continue;
        int64_t sum = 0;
        char list[512] = "";
        size_t p = 0;
        for (int i = 0; i < nt && p < sizeof list; i++) {
            sum += k->ops[tasks[i]].iattr[2];
            p += (size_t)snprintf(list + p, sizeof list - p, "%sthe task at line %d (%lld replica%s)",
                                  i ? ", " : "", k->ops[tasks[i]].src.line,
                                  (long long)k->ops[tasks[i]].iattr[2],
                                  k->ops[tasks[i]].iattr[2] == 1 ? "" : "s");
        }
        if (sum != al->iattr[1])
            ir_error(k, al->src, "mbar_alloc",
                     "these barriers expect %lld arrivals a phase, but %lld task replicas arrive "
                     "on them: %s",
                     (long long)al->iattr[1], (long long)sum, list);
    }
    /* expect-bytes vs the TMA loads of the same block on the same barrier */
    for (uint32_t o = 1; o < k->nops; o++) {
        ir_op *ex = &k->ops[o];
        if (ex->kind != IR_MBAR_EXPECT || !ex->block)
            continue;
        const ir_block *b = &k->blocks[ex->block];
        int64_t bytes = 0;
        int nloads = 0;
        for (uint32_t i = 0; i < b->nops; i++) {
            ir_op *ld = &k->ops[b->ops[i]];
            if (ld->kind != IR_TMA_LOAD)
                continue;
            int r = k->vals[ld->opnd[0]].type.shape.rank;
            if (ld->opnd[2 + r] != ex->opnd[0] || ld->opnd[3 + r] != ex->opnd[1])
                continue;
            bytes += view_bytes(k, ld->opnd[1 + r]);
            nloads++;
        }
        if (nloads && bytes != ex->iattr[0])
            ir_error(k, ex->src, "mbar_expect",
                     "expects %lld bytes but the %d TMA load%s of this block on the same barrier "
                     "bring %lld (a TMA load always counts its whole box)",
                     (long long)ex->iattr[0], nloads, nloads == 1 ? "" : "s", (long long)bytes);
    }
}

/* ---------------------------------------------------------------- accumulators in flight */

typedef struct acc_state {
    uint8_t *pending; /* per value */
    bool changed;
} acc_state;

static void acc_block(loom_kernel *k, acc_state *s, uint32_t b, bool report);

static void mark(acc_state *s, uint32_t v)
{
    if (!s->pending[v]) {
        s->pending[v] = 1;
        s->changed = true;
    }
}

static void acc_block(loom_kernel *k, acc_state *s, uint32_t b, bool report)
{
    ir_block *blk = &k->blocks[b];
    for (uint32_t i = 0; i < blk->nops; i++) {
        uint32_t o = blk->ops[i];
        ir_op *op = &k->ops[o];
        switch (op->kind) {
        case IR_WGMMA:
            if (op->nres)
                mark(s, op->res[0]);
            continue;
        case IR_WGMMA_WAIT:
            if (op->iattr[0] > 0)
                for (int r = 0; r < op->nres; r++)
                    if (s->pending[op->opnd[r]])
                        mark(s, op->res[r]);
            continue;
        case IR_YIELD: {
            uint32_t p = blk->parent;
            if (!p)
                continue;
            ir_op *par = &k->ops[p];
            for (int j = 0; j < op->nopnd && j < par->nres; j++)
                if (s->pending[op->opnd[j]]) {
                    mark(s, par->res[j]);
                    if (par->kind == IR_FOR)
                        mark(s, k->blocks[par->reg[0]].args[1 + j]);
                }
            continue;
        }
        case IR_FOR:
            for (int j = 3; j < op->nopnd; j++)
                if (s->pending[op->opnd[j]])
                    mark(s, k->blocks[op->reg[0]].args[j - 2]);
            break;
        default:
            break;
        }
        if (report)
            for (int j = 0; j < op->nopnd; j++) {
                if (op->kind == IR_FOR && j >= 3)
                    continue;
                if (!s->pending[op->opnd[j]])
                    continue;
                ir_error(k, op->src, ir_opdescs[op->kind].name,
                         "operand %d is an accumulator that wgmma may still be writing; pass it "
                         "through loom_wgmma_wait with pending=0 first",
                         j);
                s->pending[op->opnd[j]] = 0; /* report each value once */
            }
        for (int r = 0; r < op->nreg; r++)
            if (op->reg[r])
                acc_block(k, s, op->reg[r], report);
    }
}

static void check_accumulators(loom_kernel *k)
{
    bool any = false;
    for (uint32_t o = 1; o < k->nops && !any; o++)
        any = k->ops[o].kind == IR_WGMMA;
    if (!any)
        return;
    acc_state s = {calloc(k->nvals, 1), false};
    if (!s.pending) {
        k->oom = true;
        return;
    }
    /* propagate through loops until nothing changes, then report once */
    for (int round = 0; round < 8; round++) {
        s.changed = false;
        acc_block(k, &s, 1, false);
        if (!s.changed)
            break;
    }
    acc_block(k, &s, 1, true);
    free(s.pending);
}

void ir_check_async(loom_kernel *k)
{
    check_tasks(k);
    check_barriers(k);
    check_accumulators(k);
}
