/*
 * interp_tasks.c -- who runs when in the interpreter's Hopper machinery: the task
 * replicas of a CTA as coroutines, their scheduler and deadlock reports, and the programs
 * that run side by side (flag waits, clusters).
 *
 * How it works.  A CTA first runs its kernel body (dsl/interp.c): allocations reset the
 * CTA's rings and barriers, scalars are computed, and each task op spawns one record per
 * replica.  Then every replica runs as its own coroutine (ucontext, on its own stack)
 * with its own value slots; the slots of top-level values are shared with the body and
 * only read.  A round-robin scheduler, in task then replica order, runs one coroutine
 * until it blocks (an mbar_wait whose phase has not completed, a named barrier not yet
 * complete, a flag) or finishes, then the next one that can run.  The order is
 * deterministic, so a failing run fails the same way every time.  When every unfinished
 * replica is blocked the CTA has deadlocked: the report lists each one, what it waits on
 * and the state of that barrier.
 *
 * Programs side by side.  A kernel with flag waits runs all its programs at once, and a
 * kernel with clusters one cluster's programs at once: each program is a coroutine with
 * its own slots and Hopper state, and a round-robin over them lets one program's flag add
 * or cluster arrival release another's wait.  A round in which every unfinished program
 * stays blocked and nothing changed is a deadlock, reported with each wait.  A kernel
 * with atomic adds (work claimed from a counter) runs its programs side by side too, and
 * a program gives way after each add, so the programs' claims interleave.
 */
#include "interp_hw.h"
#include "../util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---------------------------------------------------------------- tasks */

/* The interp whose coroutine is being started (makecontext passes no pointer). */
static _Thread_local interp *boot;

const char *interp_task_name(const task *t, char *buf, size_t n)
{
    return ir_words_task(buf, n, file_of(t->op), t->op->src.line, t->replica);
}

void interp_task_free(interp *in, task *t)
{
    if (t->env)
        for (uint32_t v = 1; v < in->k->nvals; v++)
            if (in->k->vals[v].block != 1) { /* top-level slots belong to the kernel body */
                free(t->env[v].f);
                free(t->env[v].i);
            }
    free(t->env);
    free(t->seen);
    free(t->arrived);
    free(t->reads);
    if (t->stack)
        munmap(t->stack, t->stack_bytes);
    free(t);
}

void interp_block(interp *in, task *t)
{
    t->state = T_BLOCKED;
    swapcontext(&t->ctx, &in->hw->sched);
}

static task *task_record(interp *in, int i)
{
    interp_hw *hw = in->hw;
    if (i >= hw->captasks) {
        int old = hw->captasks;
        if (!interp_grow((void **)&hw->tasks, &hw->captasks, i + 1, sizeof(task *)))
            return NULL;
        memset(hw->tasks + old, 0, (size_t)(hw->captasks - old) * sizeof(task *));
    }
    if (hw->tasks[i])
        return hw->tasks[i];
    task *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    hw->tasks[i] = t;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    t->stack_bytes = STACK_BYTES + page;
    t->stack = mmap(NULL, t->stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t->stack == MAP_FAILED) {
        t->stack = NULL;
        return NULL;
    }
    mprotect(t->stack, page, PROT_NONE); /* an overflow faults instead of corrupting memory */
    t->env = calloc(in->k->nvals, sizeof(tv));
    t->seen = calloc((size_t)hw->nbars + 1, sizeof(int64_t));
    t->arrived = calloc(((size_t)hw->nbars + 1) * CLUSTER_MAX, sizeof(int64_t));
    if (!t->env || !t->seen || !t->arrived)
        return NULL;
    return t;
}

/* Spawn the replicas of a task; they run after the kernel body (interp_hw_run_tasks). */
bool interp_task(interp *in, const ir_op *op)
{
    interp_hw *hw = in->hw;
    for (int r = 0; r < op->iattr[2]; r++) {
        task *t = task_record(in, hw->ntasks);
        if (!t)
            return interp_fail(in, LOOM_ERR_NOMEM, op, "out of memory for a task replica");
        t->op = op;
        t->replica = r;
        t->index = hw->ntasks++;
        t->state = T_READY;
        t->wait_op = NULL;
        t->wait_nb = -1;
        t->fbuf = NULL;
        memset(t->seen, 0, ((size_t)hw->nbars + 1) * sizeof(int64_t));
        memset(t->arrived, 0, ((size_t)hw->nbars + 1) * CLUSTER_MAX * sizeof(int64_t));
        t->nreads = 0;
        t->wg_committed = t->wg_retired = t->st_issued = t->st_retired = t->fences = 0;
    }
    return true;
}

bool interp_task_replica(interp *in, const ir_op *op)
{
    interp_res(in, op, 0)->i[0] = in->task_replica;
    return true;
}

static void task_entry(void)
{
    interp *in = boot;
    task *t = in->hw->tasks[in->hw->running];
    if (!interp_exec_block(in, t->op->reg[0]) && in->st == LOOM_OK)
        in->st = LOOM_ERR_NOMEM;
    t->state = T_DONE;
    /* returning resumes the scheduler (uc_link) */
}

/* An i32 flag element (its bounds were checked when the wait began). */
static int64_t flag_value(const interp_arg *buf, int64_t off)
{
    int32_t x;
    memcpy(&x, (const unsigned char *)buf->data + (size_t)off * 4, 4);
    return x;
}

static void prog_yield(struct prog *p);

static bool can_run(const interp_hw *hw, const task *t)
{
    if (t->state == T_READY)
        return true;
    if (t->state != T_BLOCKED)
        return false;
    if (t->fbuf)
        return flag_value(t->fbuf, t->foff) >= t->ftarget;
    if (t->wait_nb >= 0)
        return hw->nb[t->wait_nb].gen != t->wait_gen;
    return (hw->bars[t->wait_bar].completed & 1) != t->wait_parity;
}

/* What blocked replica t waits on, as "task ... waits on ... at file:line, ..."; false
 * for a replica that waits on nothing. */
static bool describe_wait(interp *in, const task *t, char *buf, size_t n)
{
    const interp_hw *hw = in->hw;
    char tb[160], bb[128], wb[320];
    const ir_op *w = t->wait_op;
    if (!w)
        return false;
    if (t->fbuf)
        snprintf(buf, n, "%s waits %s", interp_task_name(t, tb, sizeof tb),
                 ir_words_flag_wait(wb, sizeof wb, file_of(w), w->src.line, t->farg->name, (long long)t->foff,
                                    (long long)t->ftarget, (long long)flag_value(t->fbuf, t->foff)));
    else if (t->wait_nb >= 0)
        snprintf(buf, n, "%s waits on named barrier %d at %s:%d, threads arrived %lld of %lld",
                 interp_task_name(t, tb, sizeof tb), t->wait_nb, file_of(w), w->src.line,
                 (long long)hw->nb[t->wait_nb].arrived, (long long)hw->nb[t->wait_nb].target);
    else {
        const mbar *b = &hw->bars[t->wait_bar];
        snprintf(buf, n, "%s waits %s, barrier completed %lld phases (arrivals %lld of %lld, bytes pending %lld)",
                 interp_task_name(t, tb, sizeof tb),
                 ir_words_mbar_wait(wb, sizeof wb, interp_bar_name(in, t->wait_bar, bb, sizeof bb), t->wait_parity,
                                    file_of(w), w->src.line),
                 (long long)b->completed, (long long)(b->arrivals - b->pending), (long long)b->arrivals,
                 (long long)b->tx);
    }
    return true;
}

static void report_deadlock(interp *in)
{
    interp_hw *hw = in->hw;
    in->st = LOOM_ERR_RUNTIME;
    if (!in->err || !in->errlen)
        return;
    size_t p = 0, n = in->errlen;
#define PUT(...)                                                                \
    do {                                                                        \
        if (p < n) {                                                            \
            int w_ = snprintf(in->err + p, n - p, __VA_ARGS__);                 \
            p += w_ > 0 ? (size_t)w_ : 0;                                       \
        }                                                                       \
    } while (0)
    PUT("error: deadlock in program (%d,%d,%d): every unfinished task is blocked", in->pid[0],
        in->pid[1], in->pid[2]);
    for (int i = 0; i < hw->ntasks; i++) {
        char w[512];
        if (hw->tasks[i]->state != T_DONE && describe_wait(in, hw->tasks[i], w, sizeof w))
            PUT("\n  %s", w);
    }
#undef PUT
}

/* TMA stores still reading shared memory when the CTA ends read freed memory. */
static bool check_exit(interp *in)
{
    interp_hw *hw = in->hw;
    for (int i = 0; i < hw->ntasks; i++) {
        task *t = hw->tasks[i];
        for (int j = 0; j < t->nreads; j++) {
            const rd *e = &t->reads[j];
            if (!e->store || !rd_live(t, e))
                continue;
            in->task_op = t->op;
            in->task_replica = t->replica;
            return interp_fail(in, LOOM_ERR_RUNTIME, e->op,
                               "the task ends while this TMA store may still read shared memory; "
                               "call loom_tma_store_wait(0) before the end of the task");
        }
    }
    /* a named barrier part-way through a generation at exit: an arrival (bar.arrive) that
     * no bar.sync completed, whose threads the barrier's next use in a later launch on
     * the same SM would count */
    for (int id = 0; id < (int)(sizeof hw->nb / sizeof hw->nb[0]); id++)
        if (hw->nb[id].arrived && hw->ntasks) {
            in->task_op = hw->tasks[0]->op;
            in->task_replica = hw->tasks[0]->replica;
            return interp_fail(in, LOOM_ERR_RUNTIME, hw->tasks[0]->op,
                               "the program ends with named barrier %d holding %lld of its %lld threads: an "
                               "arrival that no bar.sync completed (count every loom_named_barrier_arrive "
                               "against the waits on that barrier)",
                               id, (long long)hw->nb[id].arrived, (long long)hw->nb[id].target);
        }
    return true;
}

bool interp_hw_run_tasks(interp *in)
{
    interp_hw *hw = in->hw;
    if (!hw || hw->ntasks == 0)
        return in->st == LOOM_OK;
    memset(hw->nb, 0, sizeof hw->nb);
    int n = hw->ntasks;
    for (int i = 0; i < n; i++) {
        task *t = hw->tasks[i];
        for (uint32_t v = 1; v < in->k->nvals; v++)
            if (in->k->vals[v].block == 1)
                t->env[v] = in->main_env[v]; /* shared, read-only */
        getcontext(&t->ctx);
        t->ctx.uc_stack.ss_sp = t->stack;
        t->ctx.uc_stack.ss_size = t->stack_bytes;
        t->ctx.uc_link = &hw->sched;
        makecontext(&t->ctx, task_entry, 0);
    }
    for (int next = 0; in->st == LOOM_OK;) {
        int pick = -1;
        for (int j = 0; j < n && pick < 0; j++)
            if (can_run(hw, hw->tasks[(next + j) % n]))
                pick = (next + j) % n;
        if (pick < 0) {
            /* every replica is blocked; one waiting on a flag, or on a barrier that the
             * cluster's other CTAs arrive on, may be released by another program: let the
             * others run */
            bool outside = false;
            for (int j = 0; j < n; j++)
                outside |= hw->tasks[j]->state == T_BLOCKED && (hw->tasks[j]->fbuf || in->k->cluster > 1);
            if (!outside || !in->prog)
                break;
            prog_yield(in->prog);
            continue;
        }
        task *t = hw->tasks[pick];
        t->state = T_RUNNING;
        hw->running = pick;
        in->env = t->env;
        in->task_op = t->op;
        in->task_replica = t->replica;
        boot = in;
        swapcontext(&hw->sched, &t->ctx);
        in->env = in->main_env;
        in->task_op = NULL;
        next = (pick + 1) % n;
    }
    if (in->st == LOOM_OK) {
        bool all_done = true;
        for (int i = 0; i < n; i++)
            all_done &= hw->tasks[i]->state == T_DONE;
        if (!all_done)
            report_deadlock(in);
        else
            check_exit(in);
    }
    in->task_op = NULL;
    hw->ntasks = 0;
    return in->st == LOOM_OK;
}

/* ---------------------------------------------------------------- programs side by side */

/* One program of a side-by-side run: its own interpreter state on its own stack. */
typedef struct prog {
    interp in;
    struct side *side;
    void *stack;
    size_t stack_bytes;
    ucontext_t ctx;
    bool done;
    /* a wait of the kernel body (outside tasks): element woff of warg/wbuf >= wtarget */
    const ir_op *wait_op;
    const interp_arg *wbuf;
    const ir_arg *warg;
    int64_t woff, wtarget;
} prog;

typedef struct side {
    ucontext_t sched;
    uint64_t adds; /* flag adds so far: a round without one, and without a program ending,
                      changed nothing any wait depends on */
    prog *progs;
    int n;
} side;

enum { SIDE_MAX_PROGRAMS = 1024 };

static _Thread_local prog *pboot;

void interp_flag_added(interp *in)
{
    if (in->prog)
        in->prog->side->adds++;
}

static void prog_yield(prog *p) { swapcontext(&p->ctx, &p->side->sched); }

bool interp_flag_block(interp *in, const ir_op *op, tref t, int64_t off, int64_t target)
{
    prog *p = in->prog;
    if (!p)
        return interp_fail(in, LOOM_ERR_RUNTIME, op, "a flag wait outside a side-by-side run");
    task *tk = cur(in);
    if (tk) {
        tk->wait_op = op;
        tk->wait_nb = -1;
        tk->fbuf = t.buf;
        tk->farg = t.arg;
        tk->foff = off;
        tk->ftarget = target;
        interp_block(in, tk);
        tk->fbuf = NULL;
    } else {
        p->wait_op = op;
        p->wbuf = t.buf;
        p->warg = t.arg;
        p->woff = off;
        p->wtarget = target;
        prog_yield(p);
        p->wait_op = NULL;
    }
    return in->st == LOOM_OK;
}

bool interp_atomic_yield(interp *in)
{
    /* from a task replica too: its coroutine is saved as the program's, and resumes
     * where it stopped when the program's turn comes again */
    if (in->prog)
        prog_yield(in->prog);
    return in->st == LOOM_OK;
}

static void prog_entry(void)
{
    prog *p = pboot;
    interp *in = &p->in;
    if (!interp_exec_block(in, 1)) {
        if (in->st == LOOM_OK)
            in->st = LOOM_ERR_NOMEM;
    } else {
        if (in->k->cluster > 1) {
            /* the cluster barrier after the allocations: every CTA of the cluster has set
             * up its shared memory and barriers before any task runs (peers multicast into
             * them and arrive on them) */
            interp_flag_added(in);
            prog_yield(p);
        }
        interp_hw_run_tasks(in);
    }
    p->done = true;
}

static void report_side_deadlock(interp *base, side *S)
{
    base->st = LOOM_ERR_RUNTIME;
    if (!base->err || !base->errlen)
        return;
    size_t at = 0, n = base->errlen;
    int shown = 0, more = 0;
#define PUT(...)                                                                \
    do {                                                                        \
        if (at < n) {                                                           \
            int w_ = snprintf(base->err + at, n - at, __VA_ARGS__);             \
            at += w_ > 0 ? (size_t)w_ : 0;                                      \
        }                                                                       \
    } while (0)
    if (base->k->cluster > 1)
        PUT("error: deadlock: every unfinished program of the cluster is blocked, on a barrier or a "
            "flag that no running program will change");
    else
        PUT("error: deadlock: every unfinished program waits on a flag that no running program "
            "will change");
    for (int i = 0; i < S->n; i++) {
        prog *p = &S->progs[i];
        if (p->done)
            continue;
        const interp_hw *hw = p->in.hw;
        for (int j = -1; j < (hw ? hw->ntasks : 0); j++) {
            const task *t = j >= 0 ? hw->tasks[j] : NULL;
            char w[512];
            if (t ? t->state != T_BLOCKED || !describe_wait(&p->in, t, w, sizeof w) : !p->wait_op)
                continue;
            if (!t) {
                char wb[320];
                snprintf(w, sizeof w, "waits %s",
                         ir_words_flag_wait(wb, sizeof wb, file_of(p->wait_op), p->wait_op->src.line, p->warg->name,
                                            (long long)p->woff, (long long)p->wtarget,
                                            (long long)flag_value(p->wbuf, p->woff)));
            }
            if (shown == 8) {
                more++;
                continue;
            }
            shown++;
            PUT("\n  program (%d,%d,%d) %s", p->in.pid[0], p->in.pid[1], p->in.pid[2], w);
        }
    }
    if (more)
        PUT("\n  ... and %d more waits", more);
#undef PUT
}

interp *interp_peer(interp *in, int q)
{
    int c = in->k->cluster;
    if (c <= 1 || !in->prog)
        return in;
    prog *p = in->prog;
    int me = in->pid[0] % c;
    return &p->side->progs[(p - p->side->progs) - me + q].in;
}

bool interp_from_peer(interp *in, interp *dst, bool ok)
{
    if (dst == in)
        return ok;
    if (!ok) {
        if (in->st == LOOM_OK)
            in->st = dst->st != LOOM_OK ? dst->st : LOOM_ERR_RUNTIME;
        return false;
    }
    interp_flag_added(in);
    return true;
}

bool interp_cluster_rank(interp *in, const ir_op *op)
{
    interp_res(in, op, 0)->i[0] = in->pid[0] % (in->k->cluster > 1 ? in->k->cluster : 1);
    return true;
}

/* Run programs first .. first+n-1 (linear ids, x fastest) side by side. */
static loom_status side_run(interp *base, int64_t first, int64_t n)
{
    loom_kernel *k = base->k;
    side S = {.n = (int)n};
    S.progs = calloc((size_t)n, sizeof(prog));
    if (!S.progs)
        return LOOM_ERR_NOMEM;
    volatile loom_status st = LOOM_OK; /* getcontext below */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < S.n && st == LOOM_OK; i++) {
        prog *p = &S.progs[i];
        p->side = &S;
        p->in = (interp){.k = k, .args = base->args, .targs = base->targs, .err = base->err, .errlen = base->errlen,
                         .prog = p};
        for (int d = 0; d < 3; d++)
            p->in.grid[d] = base->grid[d];
        int64_t id = first + i;
        p->in.pid[0] = (int)(id % base->grid[0]);
        p->in.pid[1] = (int)((id / base->grid[0]) % base->grid[1]);
        p->in.pid[2] = (int)(id / ((int64_t)base->grid[0] * base->grid[1]));
        p->in.env = p->in.main_env = calloc(k->nvals, sizeof(tv));
        p->stack_bytes = STACK_BYTES + page;
        p->stack = mmap(NULL, p->stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (!p->in.main_env || p->stack == MAP_FAILED) {
            p->stack = NULL;
            st = LOOM_ERR_NOMEM;
            break;
        }
        mprotect(p->stack, page, PROT_NONE);
        for (int a = 0; a < k->nargs && st == LOOM_OK; a++) {
            if (k->args[a].is_tensor)
                continue;
            tv *t = interp_slot(&p->in, k->args[a].value);
            if (!t)
                st = LOOM_ERR_NOMEM;
            else
                interp_copy_tv(t, &base->main_env[k->args[a].value]);
        }
        if (st == LOOM_OK && !interp_hw_init(&p->in))
            st = p->in.st;
        getcontext(&p->ctx);
        p->ctx.uc_stack.ss_sp = p->stack;
        p->ctx.uc_stack.ss_size = p->stack_bytes;
        p->ctx.uc_link = &S.sched;
        makecontext(&p->ctx, prog_entry, 0);
    }
    /* round-robin in program order until every program ends, one fails, or a round
     * changes nothing; with LOOM_INTERP_RESIDENT=r only r programs (whole clusters) are
     * resident at once, and the next starts when one ends, as on a GPU whose SMs hold
     * only r of the grid's CTAs */
    int c = k->cluster > 1 ? k->cluster : 1, resident = S.n;
    int64_t rs = util_env_int("LOOM_INTERP_RESIDENT", 0, 0, INT32_MAX / 16); /* 0: all of them */
    if (rs > 0)
        resident = (int)((rs + c - 1) / c * c);
    for (int left = S.n; st == LOOM_OK && left > 0;) {
        uint64_t adds0 = S.adds;
        int left0 = left;
        int ended = 0;
        for (int i = 0; i < S.n; i++)
            ended += S.progs[i].done;
        int started = ended + resident < S.n ? (ended / c) * c + resident : S.n;
        for (int i = 0; i < started && st == LOOM_OK; i++) {
            prog *p = &S.progs[i];
            if (p->done)
                continue;
            pboot = p;
            swapcontext(&S.sched, &p->ctx);
            st = p->in.st;
            left -= p->done;
        }
        if (st == LOOM_OK && left > 0 && left == left0 && S.adds == adds0) {
            report_side_deadlock(base, &S);
            st = base->st;
        }
    }
    for (int i = 0; i < S.n; i++) {
        prog *p = &S.progs[i];
        if (p->in.main_env) {
            interp_hw_free(&p->in);
            for (uint32_t v = 0; v < k->nvals; v++) {
                free(p->in.main_env[v].f);
                free(p->in.main_env[v].i);
            }
            free(p->in.main_env);
        }
        if (p->stack)
            munmap(p->stack, p->stack_bytes);
    }
    free(S.progs);
    return st;
}

/* Kernels with flag waits run all their programs side by side; kernels with clusters run
 * one cluster's programs side by side at a time (both where both); kernels with atomic
 * adds all their programs when there are at most SIDE_MAX_PROGRAMS, else one (or one
 * cluster) at a time. */
loom_status interp_run_side_by_side(interp *base)
{
    loom_kernel *k = base->k;
    int64_t n = (int64_t)base->grid[0] * base->grid[1] * base->grid[2];
    int c = k->cluster > 1 ? k->cluster : 1;
    if (base->grid[0] % c) {
        if (base->err && base->errlen)
            snprintf(base->err, base->errlen,
                     "error: the kernel runs in clusters of %d programs along x, but the grid's x is %d, "
                     "not a multiple of %d",
                     c, base->grid[0], c);
        return LOOM_ERR_INVALID;
    }
    if (!ir_uses_op(k, IR_FLAG_WAIT)) {
        if (ir_uses_op(k, IR_ATOMIC_ADD) && n <= SIDE_MAX_PROGRAMS)
            return side_run(base, 0, n); /* claims from a counter interleave */
        loom_status st = LOOM_OK;
        for (int64_t f = 0; f < n && st == LOOM_OK; f += c)
            st = side_run(base, f, c);
        return st;
    }
    if (n > SIDE_MAX_PROGRAMS) {
        if (base->err && base->errlen)
            snprintf(base->err, base->errlen,
                     "error: the kernel waits on flags, so the interpreter runs its programs side by "
                     "side; the grid has %lld programs, more than the %d it can run that way (on the "
                     "GPU such a kernel must also fit on the SMs at once: launch it persistent)",
                     (long long)n, SIDE_MAX_PROGRAMS);
        return LOOM_ERR_RUNTIME;
    }
    return side_run(base, 0, n);
}
