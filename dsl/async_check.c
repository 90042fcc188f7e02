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
 *   - the tasks that arrive on a barrier array add up to its arrival count: each task
 *     replica arrives once a phase (the model the DSL documents), or, where the barrier
 *     index of a task's arrivals depends on loom_task_replica, its replicas may take
 *     turns instead (one of them arrives a phase: a ring whose slots the replicas consume
 *     alternately, or a barrier per replica); see ir_mbar_arrivals;
 *   - an mbar_expect's byte count equals the bytes of the TMA loads (and cluster stores)
 *     that complete on the same barrier in the same block (when there are any there to
 *     count; a multicast or a cluster store counts once per CTA of the cluster, each CTA
 *     sending its own);
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

uint32_t ir_task_of(const loom_kernel *k, uint32_t o)
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

/* dep[v] != 0 when value v depends on loom_task_replica: a forward pass over the ops,
 * through results, loop-carried values and yields, repeated until nothing changes. */
static uint8_t *replica_deps(const loom_kernel *k)
{
    uint8_t *dep = calloc(k->nvals + 1, 1);
    if (!dep)
        return NULL;
    bool changed = true;
#define MARK(v)                                                                                    \
    do {                                                                                           \
        if (!dep[v]) {                                                                             \
            dep[v] = 1;                                                                            \
            changed = true;                                                                        \
        }                                                                                          \
    } while (0)
    for (int round = 0; changed && round < 64; round++) {
        changed = false;
        for (uint32_t o = 1; o < k->nops; o++) {
            const ir_op *op = &k->ops[o];
            if (!op->block)
                continue;
            bool in = op->kind == IR_TASK_REPLICA;
            for (int j = 0; j < op->nopnd && !in; j++)
                in = dep[op->opnd[j]];
            if (in)
                for (int r = 0; r < op->nres; r++)
                    MARK(op->res[r]);
            if (op->kind == IR_FOR) {
                const ir_block *body = &k->blocks[op->reg[0]];
                if (body->nargs && (dep[op->opnd[0]] || dep[op->opnd[2]]))
                    MARK(body->args[0]);
                for (int j = 3; j < op->nopnd && (uint32_t)(j - 2) < body->nargs; j++)
                    if (dep[op->opnd[j]])
                        MARK(body->args[j - 2]);
            }
            if (op->kind == IR_YIELD) {
                uint32_t p = k->blocks[op->block].parent;
                if (!p)
                    continue;
                const ir_op *par = &k->ops[p];
                for (int j = 0; j < op->nopnd && j < par->nres; j++)
                    if (dep[op->opnd[j]]) {
                        MARK(par->res[j]);
                        if (par->kind == IR_FOR && (uint32_t)(1 + j) < k->blocks[par->reg[0]].nargs)
                            MARK(k->blocks[par->reg[0]].args[1 + j]);
                    }
            }
        }
    }
#undef MARK
    return dep;
}

/* The tasks that arrive on barrier array `bars`, their replicas, and whether they may take
 * turns (the barrier index of one of their arrivals depends on loom_task_replica).
 * Returns the number of tasks (at most 64), or -1 when an arrival sits outside any task. */
typedef struct arrivers {
    uint32_t task[64];
    int64_t replicas[64]; /* arrivals a phase when every replica arrives */
    int64_t one[64];      /* ... and when the replicas take turns */
    bool turns[64];
} arrivers;

static int find_arrivers(const loom_kernel *k, uint32_t bars, const uint8_t *dep, arrivers *a)
{
    int nt = 0;
    for (uint32_t o = 1; o < k->nops; o++) {
        const ir_op *op = &k->ops[o];
        if (!ir_is_arrival(op->kind) ||
            !op->block || op->opnd[0] != bars)
            continue;
        uint32_t t = ir_task_of(k, o);
        if (!t)
            return -1;
        int i = 0;
        while (i < nt && a->task[i] != t)
            i++;
        if (i == nt) {
            if (nt == 64)
                continue;
            a->task[nt] = t;
            a->replicas[nt] = k->ops[t].iattr[2];
            a->one[nt] = 1;
            a->turns[nt] = false;
            nt++;
        }
        /* an arrival on the barrier in every CTA of the cluster: each barrier receives the
         * task's arrivals from all of them */
        if (op->kind == IR_MBAR_ARRIVE_CLUSTER && a->one[i] == 1 && k->cluster > 1) {
            a->replicas[i] *= k->cluster;
            a->one[i] = k->cluster;
        }
        if (dep && dep[op->opnd[1]] && a->replicas[i] > 1)
            a->turns[i] = true;
    }
    return nt;
}

int64_t ir_mbar_arrivals(const loom_kernel *k, uint32_t bars, uint32_t task)
{
    const ir_op *al = &k->ops[k->vals[bars].def];
    uint8_t *dep = replica_deps(k);
    arrivers a;
    int nt = find_arrivers(k, bars, dep, &a);
    free(dep);
    int64_t all = 0, turns = 0, mine = -1;
    for (int i = 0; i < nt; i++) {
        all += a.replicas[i];
        turns += a.turns[i] ? a.one[i] : a.replicas[i];
    }
    for (int i = 0; i < nt; i++)
        if (a.task[i] == task)
            mine = al->kind == IR_MBAR_ALLOC && al->iattr[1] != all && al->iattr[1] == turns && a.turns[i]
                       ? a.one[i]
                       : a.replicas[i];
    return mine < 0 ? 0 : mine;
}

/* The barrier operand of an op whose bytes complete on a barrier (ir_completes_bytes):
 * a TMA load's tensor, offsets..., view, bars, index; smem_store_cluster's view, value,
 * bars, index. */
static int tx_bars(const loom_kernel *k, const ir_op *op)
{
    return op->kind == IR_SMEM_STORE_CLUSTER ? 2 : 2 + k->vals[op->opnd[0]].type.shape.rank;
}

/* Arrivals on each barrier array; bytes expected vs TMA loads and cluster stores. */
static void check_barriers(loom_kernel *k)
{
    uint8_t *dep = replica_deps(k);
    if (!dep) {
        k->oom = true;
        return;
    }
    for (uint32_t o = 1; o < k->nops; o++) {
        ir_op *al = &k->ops[o];
        if (al->kind != IR_MBAR_ALLOC || !al->nres || !al->block)
            continue;
        arrivers a;
        int nt = find_arrivers(k, al->res[0], dep, &a);
        if (nt <= 0)
            continue;
        int64_t all = 0, turns = 0;
        bool any_turns = false;
        char list[512] = "";
        size_t p = 0;
        for (int i = 0; i < nt && p < sizeof list; i++) {
            all += a.replicas[i];
            turns += a.turns[i] ? a.one[i] : a.replicas[i];
            any_turns |= a.turns[i];
            p += (size_t)snprintf(list + p, sizeof list - p, "%sthe task at line %d (%lld replica%s%s%s)",
                                  i ? ", " : "", k->ops[a.task[i]].src.line, (long long)a.replicas[i],
                                  a.replicas[i] == 1 ? "" : "s", a.one[i] > 1 ? " over the cluster's CTAs" : "",
                                  a.turns[i] ? ", which may take turns" : "");
        }
        if (al->iattr[1] == all || (any_turns && al->iattr[1] == turns))
            continue;
        if (any_turns)
            ir_error(k, al->src, "mbar_alloc",
                     "these barriers expect %lld arrivals a phase, but %lld task replicas arrive on them "
                     "(%lld where replicas take turns): %s",
                     (long long)al->iattr[1], (long long)all, (long long)turns, list);
        else
            ir_error(k, al->src, "mbar_alloc",
                     "these barriers expect %lld arrivals a phase, but %lld task replicas arrive "
                     "on them: %s",
                     (long long)al->iattr[1], (long long)all, list);
    }
    free(dep);
    /* expect-bytes vs the TMA loads of the same block on the same barrier */
    for (uint32_t o = 1; o < k->nops; o++) {
        ir_op *ex = &k->ops[o];
        if (ex->kind != IR_MBAR_EXPECT || !ex->block)
            continue;
        const ir_block *b = &k->blocks[ex->block];
        int64_t bytes = 0;
        int nloads = 0;
        bool stores = false;
        for (uint32_t i = 0; i < b->nops; i++) {
            ir_op *ld = &k->ops[b->ops[i]];
            if (!ir_completes_bytes(ld->kind))
                continue;
            int at = tx_bars(k, ld);
            if (ld->opnd[at] != ex->opnd[0] || ld->opnd[at + 1] != ex->opnd[1])
                continue;
            /* every CTA of the cluster multicasts its part (or stores its value into every
             * CTA): the barrier receives n of them */
            bytes += view_bytes(k, ld->opnd[ld->kind == IR_SMEM_STORE_CLUSTER ? 0 : at - 1]) *
                     (ld->kind == IR_TMA_LOAD ? 1 : k->cluster);
            stores |= ld->kind == IR_SMEM_STORE_CLUSTER;
            nloads++;
        }
        /* loads on the same barrier inside branches of this block may or may not run:
         * nothing to prove (the interpreter checks the bytes as they land) */
        for (uint32_t o2 = 1; o2 < k->nops && nloads; o2++) {
            const ir_op *ld = &k->ops[o2];
            if (!ir_completes_bytes(ld->kind) || !ld->block ||
                ld->block == ex->block)
                continue;
            int at = tx_bars(k, ld);
            if (ld->opnd[at] == ex->opnd[0] && ld->opnd[at + 1] == ex->opnd[1])
                nloads = 0;
        }
        if (nloads && bytes != ex->iattr[0])
            ir_error(k, ex->src, "mbar_expect",
                     "expects %lld bytes but the %d %s%s of this block on the same barrier "
                     "bring %lld (a TMA load always counts its whole box%s)",
                     (long long)ex->iattr[0], nloads, stores ? "TMA load or cluster store" : "TMA load",
                     nloads == 1 ? "" : "s", (long long)bytes,
                     stores ? "; a cluster store counts its view once per CTA of the cluster" : "");
    }
}

/* ---------------------------------------------------------------- accumulators in flight */

typedef struct acc_state {
    uint8_t *pending; /* per value */
    bool changed;
} acc_state;

static void acc_block(loom_kernel *k, acc_state *s, uint32_t b, bool report);

/* Is accumulator v, waited for by the wait at position at of block blk with `pending`
 * groups allowed in flight, certainly complete?  Where v comes from a wgmma earlier in
 * the same block and its group's commit is followed by `pending` more commits before the
 * wait, its group is older than every group the wait lets run on. */
static bool group_done(loom_kernel *k, const ir_block *blk, uint32_t at, uint32_t v, int64_t pending)
{
    const ir_value *val = ir_val(k, v);
    if (val->kind != IR_V_RESULT || k->ops[val->def].kind != IR_WGMMA)
        return false;
    int64_t commits = -1; /* counting from the wgmma: its own group's commit, then later ones */
    bool seen = false;
    for (uint32_t i = 0; i < at; i++) {
        if (blk->ops[i] == val->def)
            seen = true, commits = 0;
        else if (seen && k->ops[blk->ops[i]].kind == IR_WGMMA_COMMIT)
            commits++;
    }
    return seen && commits > pending;
}

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
                    if (s->pending[op->opnd[r]] && !group_done(k, blk, i, op->opnd[r], op->iattr[0]))
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
