/*
 * interp_async.c -- the interpreter's Hopper machinery: shared-memory rings, mbarriers,
 * named barriers, TMA, wgmma and warp-group tasks (include/loom.h section 5b).
 *
 * How it works.  A CTA first runs its kernel body (dsl/interp.c): allocations reset the
 * CTA's rings and barriers, scalars are computed, and each task op spawns one record per
 * replica.  Then every replica runs as its own coroutine (ucontext, on its own stack)
 * with its own value slots; the slots of top-level values are shared with the body and
 * only read.  A round-robin scheduler, in task then replica order, runs one coroutine
 * until it blocks (an mbar_wait whose phase has not completed, a named barrier not yet
 * complete) or finishes, then the next one that can run.  The order is deterministic, so
 * a failing run fails the same way every time.  When every unfinished replica is
 * blocked the CTA has deadlocked: the report lists each one, what it waits on and the
 * state of that barrier.
 *
 * The interpreter is sequential, so asynchronous work completes when it is issued: a
 * TMA load copies its box and completes its bytes on the barrier at once, a wgmma
 * computes its result at once.  What the hardware leaves unordered is checked instead of
 * modelled:
 *   - visibility: each slot remembers the TMA load that last wrote it, the barrier it
 *     completes on and the phase its bytes landed in; a replica may read the slot (smem
 *     load, wgmma, TMA store) only after one of its own waits on that barrier observed
 *     that phase complete;
 *   - write-after-read: each replica keeps the slots its wgmma groups and TMA stores
 *     read until a wgmma_wait / tma_store_wait retires them; writing such a slot (TMA
 *     load, smem store) before then is a race, reported with both lines;
 *   - async proxy: a slot written by smem_store is read by wgmma or a TMA store only
 *     after the writing replica ran fence_async;
 *   - barrier accounting: an arrival beyond a phase's count, a replica arriving twice in
 *     one phase, and bytes landing that no expect announced are reported at once.
 *
 * Barrier model (per mbarrier): A arrivals a phase, `pending` arrivals still to come,
 * `tx` bytes still to land (negative while loads land before their expect), `completed`
 * phases.  A phase completes when pending == 0 and tx == 0; then completed++, pending =
 * A.  A wait on parity P passes when P != (completed & 1).
 */
#include "interp.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

/* ---------------------------------------------------------------- state */

typedef struct slot_meta {
    const ir_op *tma;  /* the last write was this tma_load ... */
    int bar;           /* ... completing on barrier `bar` (index into hw->bars) ... */
    int64_t phase;     /* ... in its phase `phase` (the phases it had completed then) */
    const ir_op *st;   /* the last write was this smem_store ... */
    int st_task;       /* ... by task record st_task (-1: the kernel body) ... */
    int64_t st_fences; /* ... when that replica had run st_fences fences */
} slot_meta;

typedef struct ring {
    uint32_t val; /* the smem_alloc result, for messages */
    loom_dtype dt;
    loom_shape shape; /* of one slot */
    int slots;
    int64_t numel; /* elements of one slot */
    float *f;      /* slots * numel elements, as tiles hold them */
    int64_t *i;
    slot_meta *meta;
} ring;

typedef struct mbar {
    int64_t arrivals, pending, tx, completed;
    int64_t expected, landed; /* bytes announced and landed in this phase, for messages */
} mbar;

typedef struct mbar_arr {
    uint32_t val; /* the mbar_alloc result, for messages */
    int count, base;
} mbar_arr;

typedef struct nbar {
    int64_t target, arrived;
    uint64_t gen; /* completions so far */
} nbar;

/* A slot read by an asynchronous op that has not been retired yet. */
typedef struct rd {
    int ring;
    int64_t slot;
    const ir_op *op;
    int64_t seq;  /* wgmma: its group (commits before it); tma_store: its number */
    bool store;   /* a TMA store (else a wgmma) */
} rd;

typedef enum { T_READY, T_RUNNING, T_BLOCKED, T_DONE } task_state;

/* One task replica of the current CTA. */
typedef struct task {
    const ir_op *op;
    int replica, index;
    tv *env;
    void *stack; /* mmap'ed, a guard page at its low end */
    size_t stack_bytes;
    ucontext_t ctx;
    task_state state;
    /* what a blocked replica waits on: barrier wait_bar for parity wait_parity, or named
     * barrier wait_nb (>= 0) to complete past generation wait_gen */
    const ir_op *wait_op;
    int wait_bar, wait_parity, wait_nb;
    uint64_t wait_gen;
    int64_t *seen;    /* per barrier: the completed phases its waits have observed */
    int64_t *arrived; /* per cluster rank and barrier: completed + 1 at its last arrival there
                         (0: none) */
    rd *reads;
    int nreads, capreads;
    int64_t wg_committed, wg_retired; /* wgmma groups closed / retired by waits */
    int64_t st_issued, st_retired;    /* TMA stores issued / retired by waits */
    int64_t fences;
    /* a replica blocked on a flag waits for element foff of farg (buffer fbuf) >= ftarget */
    const interp_arg *fbuf;
    const ir_arg *farg;
    int64_t foff, ftarget;
} task;

struct interp_hw {
    int *objof; /* op id -> index of its ring or barrier array */
    ring *rings;
    int nrings;
    mbar_arr *arrs;
    int narrs;
    mbar *bars;
    int nbars;
    nbar nb[8];
    task **tasks; /* records are kept from CTA to CTA; ntasks are live in this one */
    int ntasks, captasks, running;
    ucontext_t sched;
};

enum { STACK_BYTES = 1 << 20, CLUSTER_MAX = 8 };

/* The interp whose coroutine is being started (makecontext passes no pointer). */
static _Thread_local interp *boot;

static task *cur(interp *in) { return in->task_op ? in->hw->tasks[in->hw->running] : NULL; }

static uint32_t op_id(interp *in, const ir_op *op) { return (uint32_t)(op - in->k->ops); }

static const char *file_of(const ir_op *op) { return op->src.file ? op->src.file : "?"; }

/* "%full[1]" */
static const char *bar_name(interp *in, int gb, char *buf, size_t n)
{
    for (int a = 0; a < in->hw->narrs; a++) {
        const mbar_arr *ar = &in->hw->arrs[a];
        if (gb >= ar->base && gb < ar->base + ar->count) {
            char v[96];
            snprintf(buf, n, "%s[%d]", ir_value_label(in->k, ar->val, v, sizeof v), gb - ar->base);
            return buf;
        }
    }
    snprintf(buf, n, "barrier #%d", gb);
    return buf;
}

static const char *ring_name(interp *in, int r, char *buf, size_t n)
{
    return ir_value_label(in->k, in->hw->rings[r].val, buf, n);
}

/* "task at file:line (replica r)" */
static const char *task_name(const task *t, char *buf, size_t n)
{
    snprintf(buf, n, "task at %s:%d (replica %d)", file_of(t->op), t->op->src.line, t->replica);
    return buf;
}

static bool need_task(interp *in, const ir_op *op)
{
    if (cur(in))
        return true;
    return interp_fail(in, LOOM_ERR_RUNTIME, op, "internal: runs outside a task");
}

/* ---------------------------------------------------------------- setup, teardown */

static bool grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return true;
    int nc = *cap ? *cap * 2 : 8;
    while (nc < need)
        nc *= 2;
    void *np = realloc(*p, (size_t)nc * elem);
    if (!np)
        return false;
    *p = np;
    *cap = nc;
    return true;
}

static void refuse(interp *in, const ir_op *op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void refuse(interp *in, const ir_op *op, const char *fmt, ...)
{
    char body[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    in->st = LOOM_ERR_INVALID;
    if (in->err && in->errlen)
        snprintf(in->err, in->errlen, "%s:%d: error: op '%s': launch refused: %s", file_of(op),
                 op->src.line, ir_opdescs[op->kind].name, body);
}

/* What a launch refuses on the GPU (the TMA descriptor cannot be encoded) is refused
 * here too, so a kernel that passes the interpreter can run. */
static bool check_tma_args(interp *in)
{
    loom_kernel *k = in->k;
    for (uint32_t o = 1; o < k->nops; o++) {
        const ir_op *op = &k->ops[o];
        if (!ir_is_tma_load(op->kind) && op->kind != IR_TMA_STORE)
            continue;
        uint32_t ai = k->vals[op->opnd[0]].def;
        const ir_arg *a = &k->args[ai];
        size_t sz = loom_dtype_size(a->dtype);
        for (int d = 0; d + 1 < a->shape.rank; d++)
            if ((a->strides[d] * (int64_t)sz) % 16) {
                refuse(in, op,
                       "argument '%s' has a stride of %lld elements (%lld bytes) in dim %d; a TMA "
                       "tensor needs strides that are multiples of 16 bytes",
                       a->name, (long long)a->strides[d], (long long)(a->strides[d] * (int64_t)sz), d);
                return false;
            }
        if ((uintptr_t)in->args[ai].data % 16) {
            refuse(in, op, "argument '%s' is not 16-byte aligned; a TMA tensor needs that", a->name);
            return false;
        }
    }
    return true;
}

bool interp_hw_init(interp *in)
{
    loom_kernel *k = in->k;
    bool any = false;
    for (uint32_t o = 1; o < k->nops && !any; o++)
        any = k->ops[o].kind == IR_SMEM_ALLOC || k->ops[o].kind == IR_MBAR_ALLOC ||
              k->ops[o].kind == IR_TASK;
    if (!any)
        return true;
    interp_hw *hw = calloc(1, sizeof *hw);
    if (!hw || !(hw->objof = calloc(k->nops, sizeof(int)))) {
        free(hw);
        in->st = LOOM_ERR_NOMEM;
        return false;
    }
    in->hw = hw;
    int caprings = 0, caparrs = 0;
    const ir_block *body = &k->blocks[1];
    for (uint32_t i = 0; i < body->nops; i++) {
        uint32_t o = body->ops[i];
        const ir_op *op = &k->ops[o];
        if (op->kind == IR_SMEM_ALLOC) {
            if (!grow((void **)&hw->rings, &caprings, hw->nrings + 1, sizeof(ring)))
                goto oom;
            ring *g = &hw->rings[hw->nrings];
            const ir_type *t = &k->vals[op->res[0]].type;
            *g = (ring){.val = op->res[0], .dt = (loom_dtype)t->dtype, .shape = t->shape,
                        .slots = t->slots, .numel = ir_shape_numel(&t->shape)};
            size_t n = (size_t)(g->slots * g->numel);
            if (ir_dtype_is_float(g->dt))
                g->f = malloc(n * sizeof(float));
            else
                g->i = malloc(n * sizeof(int64_t));
            g->meta = malloc((size_t)g->slots * sizeof(slot_meta));
            hw->objof[o] = hw->nrings++;
            if ((!g->f && !g->i) || !g->meta)
                goto oom;
        } else if (op->kind == IR_MBAR_ALLOC) {
            if (!grow((void **)&hw->arrs, &caparrs, hw->narrs + 1, sizeof(mbar_arr)))
                goto oom;
            hw->arrs[hw->narrs] = (mbar_arr){op->res[0], (int)op->iattr[0], hw->nbars};
            hw->nbars += (int)op->iattr[0];
            hw->objof[o] = hw->narrs++;
        }
    }
    if (hw->nbars && !(hw->bars = calloc((size_t)hw->nbars, sizeof(mbar))))
        goto oom;
    return check_tma_args(in);
oom:
    in->st = LOOM_ERR_NOMEM;
    return false;
}

static void free_task(interp *in, task *t)
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

void interp_hw_free(interp *in)
{
    interp_hw *hw = in->hw;
    if (!hw)
        return;
    for (int i = 0; i < hw->captasks; i++)
        if (hw->tasks[i])
            free_task(in, hw->tasks[i]);
    free(hw->tasks);
    for (int r = 0; r < hw->nrings; r++) {
        free(hw->rings[r].f);
        free(hw->rings[r].i);
        free(hw->rings[r].meta);
    }
    free(hw->rings);
    free(hw->arrs);
    free(hw->bars);
    free(hw->objof);
    free(hw);
    in->hw = NULL;
}

/* ---------------------------------------------------------------- shared memory */

static ring *ring_of(interp *in, const tv *v) { return &in->hw->rings[v->obj]; }
static int64_t slot_of(const tv *v) { return v->sidx < 0 ? 0 : v->sidx; }

/* Where element e (row-major over the view's shape as seen) lives in its slot: a
 * transposed view swaps its two dims; a part (loom_smem_part) is a window of the slot. */
static int64_t view_index(const ring *g, const tv *v, int64_t e)
{
    if (!v->trans && !v->pcols)
        return e;
    /* as stored; a transposed view is seen [cols, rows] */
    int64_t rows = v->pcols ? v->prows : g->shape.dim[0], cols = v->pcols ? v->pcols : g->shape.dim[1];
    int64_t x = v->trans ? (e % rows) * cols + e / rows : e;
    return v->pcols ? v->poff + (x / cols) * g->shape.dim[1] + x % cols : x;
}

static void copy_part(tv *t, const tv *v)
{
    t->poff = v->poff;
    t->prows = v->prows;
    t->pcols = v->pcols;
}

bool interp_smem_alloc(interp *in, const ir_op *op)
{
    int r = in->hw->objof[op_id(in, op)];
    ring *g = &in->hw->rings[r];
    size_t n = (size_t)(g->slots * g->numel);
    if (g->f)
        memset(g->f, 0, n * sizeof(float));
    else
        memset(g->i, 0, n * sizeof(int64_t));
    for (int s = 0; s < g->slots; s++)
        g->meta[s] = (slot_meta){.st_task = -1};
    tv *t = interp_res(in, op, 0);
    t->obj = r;
    t->sidx = g->slots == 1 ? 0 : -1;
    t->trans = false;
    t->poff = t->prows = t->pcols = 0;
    return true;
}

bool interp_smem_slot(interp *in, const ir_op *op)
{
    tv *ringv = interp_opnd(in, op, 0), *t = interp_res(in, op, 0);
    int64_t i = interp_ival(interp_opnd(in, op, 1), 0);
    int64_t n = ringv->sidx < 0 ? ring_of(in, ringv)->slots : 1; /* a view is a ring of one */
    if (i < 0 || i >= n) {
        char b[96];
        return interp_fail(in, LOOM_ERR_BOUNDS, op, "slot %lld is outside %s, a ring of %lld slot%s",
                           (long long)i, ring_name(in, ringv->obj, b, sizeof b), (long long)n,
                           n == 1 ? "" : "s");
    }
    t->obj = ringv->obj;
    t->sidx = ringv->sidx < 0 ? i : ringv->sidx;
    t->trans = false;
    copy_part(t, ringv);
    return true;
}

bool interp_smem_trans(interp *in, const ir_op *op)
{
    tv *v = interp_opnd(in, op, 0), *t = interp_res(in, op, 0);
    t->obj = v->obj;
    t->sidx = slot_of(v);
    t->trans = !v->trans;
    copy_part(t, v);
    return true;
}

bool interp_smem_part(interp *in, const ir_op *op)
{
    tv *v = interp_opnd(in, op, 0), *t = interp_res(in, op, 0);
    const ring *g = ring_of(in, v);
    int64_t rows = v->pcols ? v->prows : g->shape.dim[0], cols = v->pcols ? v->pcols : g->shape.dim[1];
    int64_t off = v->pcols ? v->poff : 0;
    if (op->iattr[0] == 0) {
        off += op->iattr[1] * g->shape.dim[1];
        rows = op->iattr[2];
    } else {
        off += op->iattr[1];
        cols = op->iattr[2];
    }
    t->obj = v->obj;
    t->sidx = slot_of(v);
    t->trans = false;
    t->poff = off;
    t->prows = rows;
    t->pcols = cols;
    return true;
}

/* A TMA write into slot s of ring r may be read by the calling replica only after one of
 * its waits observed the phase the bytes landed in complete. */
static bool check_visible(interp *in, const ir_op *op, const tv *v)
{
    task *t = cur(in);
    const slot_meta *m = &ring_of(in, v)->meta[slot_of(v)];
    if (!t || !m->tma || t->seen[m->bar] >= m->phase + 1)
        return true;
    char rb[96], bb[128];
    return interp_fail(in, LOOM_ERR_RUNTIME, op,
                       "reads %s slot %lld (written by tma_load at %s:%d) that no wait has made "
                       "visible to this task: its bytes land in phase %lld of barrier %s, and this "
                       "task's waits on that barrier have seen %lld phase%s complete (loom_mbar_wait "
                       "on it first)",
                       ring_name(in, v->obj, rb, sizeof rb), (long long)slot_of(v), file_of(m->tma),
                       m->tma->src.line, (long long)m->phase, bar_name(in, m->bar, bb, sizeof bb),
                       (long long)t->seen[m->bar], t->seen[m->bar] == 1 ? "" : "s");
}

/* Async-proxy reads (wgmma, TMA store) see a slot written by smem_store only after the
 * writing replica fenced. */
static bool check_fenced(interp *in, const ir_op *op, const tv *v)
{
    const slot_meta *m = &ring_of(in, v)->meta[slot_of(v)];
    if (!m->st || m->st_task < 0 || m->st_task >= in->hw->ntasks)
        return true;
    const task *w = in->hw->tasks[m->st_task];
    if (w->fences > m->st_fences)
        return true;
    char rb[96], who[200] = " by this task";
    if (w != cur(in)) {
        char tb[160];
        snprintf(who, sizeof who, " by the %s", task_name(w, tb, sizeof tb));
    }
    return interp_fail(in, LOOM_ERR_RUNTIME, op,
                       "reads %s slot %lld, written by smem_store at %s:%d%s with no loom_fence_async "
                       "after it: wgmma and TMA stores read shared memory through the async proxy, "
                       "which sees a task's stores only after it fences them",
                       ring_name(in, v->obj, rb, sizeof rb), (long long)slot_of(v), file_of(m->st),
                       m->st->src.line, who);
}

static bool rd_live(const task *t, const rd *e)
{
    return e->store ? e->seq >= t->st_retired : e->seq >= t->wg_retired;
}

/* Writing a slot that an unretired wgmma group or TMA store of any replica still reads
 * is a write-after-read race. */
static bool check_overwrite(interp *in, const ir_op *op, int r, int64_t s)
{
    interp_hw *hw = in->hw;
    for (int ti = 0; ti < hw->ntasks; ti++) {
        const task *t = hw->tasks[ti];
        for (int j = 0; j < t->nreads; j++) {
            const rd *e = &t->reads[j];
            if (e->ring != r || e->slot != s || !rd_live(t, e))
                continue;
            char rb[96], tb[160];
            return interp_fail(
                in, LOOM_ERR_RUNTIME, op,
                "overwrites %s slot %lld while the %s at %s:%d (%s) may still read it: %s (a "
                "write-after-read race)",
                ring_name(in, r, rb, sizeof rb), (long long)s, e->store ? "tma_store" : "wgmma",
                file_of(e->op), e->op->src.line, task_name(t, tb, sizeof tb),
                e->store ? "no loom_tma_store_wait has retired it"
                         : "no loom_wgmma_wait has retired its group");
        }
    }
    return true;
}

static bool add_read(interp *in, const ir_op *op, task *t, const tv *v, int64_t seq, bool store)
{
    if (!grow((void **)&t->reads, &t->capreads, t->nreads + 1, sizeof(rd)))
        return interp_fail(in, LOOM_ERR_NOMEM, op, "out of memory");
    t->reads[t->nreads++] = (rd){v->obj, slot_of(v), op, seq, store};
    return true;
}

/* Forget the reads that waits have retired. */
static void prune_reads(task *t)
{
    int n = 0;
    for (int j = 0; j < t->nreads; j++)
        if (rd_live(t, &t->reads[j]))
            t->reads[n++] = t->reads[j];
    t->nreads = n;
}

bool interp_smem_load(interp *in, const ir_op *op)
{
    tv *v = interp_opnd(in, op, 0), *r = interp_res(in, op, 0);
    if (!check_visible(in, op, v))
        return false;
    const ring *g = ring_of(in, v);
    int64_t base = slot_of(v) * g->numel;
    for (int64_t e = 0; e < r->n; e++) {
        int64_t x = base + view_index(g, v, e);
        if (r->f)
            r->f[e] = g->f[x];
        else
            r->i[e] = g->i[x];
    }
    return true;
}

bool interp_smem_store(interp *in, const ir_op *op)
{
    tv *v = interp_opnd(in, op, 0), *x = interp_opnd(in, op, 1);
    if (!check_overwrite(in, op, v->obj, slot_of(v)))
        return false;
    ring *g = ring_of(in, v);
    int64_t base = slot_of(v) * g->numel;
    for (int64_t e = 0; e < x->n; e++) {
        int64_t at = base + view_index(g, v, e);
        if (g->f)
            g->f[at] = x->f[e];
        else
            g->i[at] = x->i[e];
    }
    task *t = cur(in);
    g->meta[slot_of(v)] = (slot_meta){.st = op, .st_task = t ? t->index : -1,
                                      .st_fences = t ? t->fences : 0};
    return true;
}

/* ---------------------------------------------------------------- mbarriers */

/* Barrier `first+1` of array `first`, bounds-checked; its index into hw->bars in *gb. */
static mbar *bar_at(interp *in, const ir_op *op, int first, int *gb)
{
    const tv *b = interp_opnd(in, op, first);
    int64_t i = interp_ival(interp_opnd(in, op, first + 1), 0);
    const mbar_arr *a = &in->hw->arrs[b->obj];
    if (i < 0 || i >= a->count) {
        char v[96];
        interp_fail(in, LOOM_ERR_BOUNDS, op, "barrier index %lld is outside %s, an array of %d barriers",
                    (long long)i, ir_value_label(in->k, a->val, v, sizeof v), a->count);
        return NULL;
    }
    *gb = a->base + (int)i;
    return &in->hw->bars[*gb];
}

bool interp_mbar_alloc(interp *in, const ir_op *op)
{
    int a = in->hw->objof[op_id(in, op)];
    const mbar_arr *ar = &in->hw->arrs[a];
    for (int i = 0; i < ar->count; i++)
        in->hw->bars[ar->base + i] = (mbar){.arrivals = op->iattr[1], .pending = op->iattr[1]};
    interp_res(in, op, 0)->obj = a;
    return true;
}

/* Complete the phase if its arrivals are made and its bytes landed. */
static bool settle(interp *in, const ir_op *op, int gb)
{
    mbar *b = &in->hw->bars[gb];
    if (b->pending > 0 || b->tx > 0)
        return true;
    if (b->tx < 0) {
        char bb[128];
        return interp_fail(in, LOOM_ERR_RUNTIME, op,
                           "barrier %s: %lld bytes landed in its phase %lld but its %lld arrivals "
                           "announced %lld: bytes that no loom_mbar_expect announced (a TMA load "
                           "counts its whole box)",
                           bar_name(in, gb, bb, sizeof bb), (long long)b->landed,
                           (long long)b->completed, (long long)b->arrivals, (long long)b->expected);
    }
    b->completed++;
    b->pending = b->arrivals;
    b->tx = b->expected = b->landed = 0;
    return true;
}

static interp *peer(interp *in, int q);
static bool from_peer(interp *in, interp *dst, bool ok);

/* One arrival of the running replica on barrier gb of CTA dst (this one, or the peer of
 * rank q in its cluster). */
static bool arrive_on(interp *in, interp *dst, int q, const ir_op *op, int gb, int64_t bytes)
{
    task *t = cur(in);
    mbar *b = &dst->hw->bars[gb];
    int64_t *mark = &t->arrived[(int64_t)q * (in->hw->nbars + 1) + gb];
    char bb[128], tb[160];
    if (*mark == b->completed + 1)
        return interp_fail(in, LOOM_ERR_RUNTIME, op,
                           "arrival overflow on barrier %s: the %s arrives a second time in its "
                           "phase %lld (each task replica makes one arrival a phase; the barrier "
                           "counts %lld)",
                           bar_name(in, gb, bb, sizeof bb), task_name(t, tb, sizeof tb),
                           (long long)b->completed, (long long)b->arrivals);
    if (b->pending == 0)
        return interp_fail(in, LOOM_ERR_RUNTIME, op,
                           "arrival overflow on barrier %s: its phase %lld already has all %lld "
                           "arrivals (it waits for %lld more bytes)",
                           bar_name(in, gb, bb, sizeof bb), (long long)b->completed,
                           (long long)b->arrivals, (long long)b->tx);
    b->tx += bytes;
    b->expected += bytes;
    b->pending--;
    *mark = b->completed + 1;
    return from_peer(in, dst, settle(dst, op, gb));
}

static bool arrive(interp *in, const ir_op *op, int64_t bytes)
{
    int gb;
    if (!need_task(in, op) || !bar_at(in, op, 0, &gb))
        return false;
    return arrive_on(in, in, 0, op, gb, bytes);
}

bool interp_mbar_expect(interp *in, const ir_op *op) { return arrive(in, op, op->iattr[0]); }

bool interp_mbar_arrive(interp *in, const ir_op *op) { return arrive(in, op, 0); }

/* An arrival on barrier i in every CTA of the cluster. */
bool interp_mbar_arrive_cluster(interp *in, const ir_op *op)
{
    int gb;
    if (!need_task(in, op) || !bar_at(in, op, 0, &gb))
        return false;
    for (int q = 0; q < in->k->cluster; q++)
        if (!arrive_on(in, peer(in, q), q, op, gb, 0))
            return false;
    return true;
}

/* Hand control back to the scheduler until it resumes this replica. */
static void block(interp *in, task *t)
{
    t->state = T_BLOCKED;
    swapcontext(&t->ctx, &in->hw->sched);
}

bool interp_mbar_wait(interp *in, const ir_op *op)
{
    task *t = cur(in);
    int gb;
    mbar *b;
    if (!need_task(in, op) || !(b = bar_at(in, op, 0, &gb)))
        return false;
    int64_t p = interp_ival(interp_opnd(in, op, 2), 0);
    if (p != 0 && p != 1)
        return interp_fail(in, LOOM_ERR_RUNTIME, op,
                           "the phase parity is %lld; it must be 0 or 1 (loom_ring_phase gives it)",
                           (long long)p);
    while ((b->completed & 1) == p) {
        t->wait_op = op;
        t->wait_bar = gb;
        t->wait_parity = (int)p;
        t->wait_nb = -1;
        block(in, t);
    }
    if (b->completed > t->seen[gb])
        t->seen[gb] = b->completed;
    return true;
}

bool interp_named_barrier(interp *in, const ir_op *op)
{
    task *t = cur(in);
    if (!need_task(in, op))
        return false;
    int id = (int)op->iattr[0];
    int64_t want = op->iattr[1], mine = t->op->iattr[0] * 32;
    nbar *nb = &in->hw->nb[id];
    if (mine > want)
        return interp_fail(in, LOOM_ERR_RUNTIME, op,
                           "this task replica has %lld threads, more than the %lld named barrier %d "
                           "counts",
                           (long long)mine, (long long)want, id);
    if (nb->arrived && nb->target != want)
        return interp_fail(in, LOOM_ERR_RUNTIME, op,
                           "named barrier %d is used here for %lld threads, but the %lld threads "
                           "waiting on it now count %lld",
                           id, (long long)want, (long long)nb->arrived, (long long)nb->target);
    nb->target = want;
    nb->arrived += mine;
    if (nb->arrived > want)
        return interp_fail(in, LOOM_ERR_RUNTIME, op,
                           "named barrier %d: %lld threads arrived but it completes at %lld",
                           id, (long long)nb->arrived, (long long)want);
    if (nb->arrived == want) {
        nb->arrived = 0;
        nb->gen++;
        return true;
    }
    t->wait_op = op;
    t->wait_nb = id;
    t->wait_gen = nb->gen;
    while (nb->gen == t->wait_gen)
        block(in, t);
    t->wait_nb = -1;
    return true;
}

bool interp_fence_async(interp *in, const ir_op *op)
{
    if (!need_task(in, op))
        return false;
    cur(in)->fences++;
    return true;
}

/* ---------------------------------------------------------------- TMA */

/* Element e of the box at `base` (the view's shape right-aligned to the tensor's dims):
 * its linear offset in the tensor, or -1 when it falls outside. */
static int64_t box_elem(tref tr, const loom_shape *box, const int64_t *base, int64_t e)
{
    int r = tr.arg->shape.rank, lead = r - box->rank;
    int64_t idx[LOOM_MAX_RANK], off = 0;
    interp_unravel(box, e, idx);
    for (int d = 0; d < r; d++) {
        int64_t x = base[d] + (d >= lead ? idx[d - lead] : 0);
        if (x < 0 || x >= tr.arg->shape.dim[d])
            return -1;
        off += x * tr.arg->strides[d];
    }
    return off;
}

/* The box of a TMA load lands in view v of CTA dst (this one, or a peer in its cluster)
 * and completes on that CTA's barrier gb. */
static bool tma_land(interp *in, interp *dst, const ir_op *op, const tv *v, int gb)
{
    tref tr = interp_tensor_of(in, op);
    int r = tr.arg->shape.rank;
    int64_t base[LOOM_MAX_RANK];
    for (int d = 0; d < r; d++)
        base[d] = interp_ival(interp_opnd(in, op, 1 + d), 0);
    if (!from_peer(in, dst, check_overwrite(dst, op, v->obj, slot_of(v))))
        return false;
    ring *g = &dst->hw->rings[v->obj];
    mbar *b = &dst->hw->bars[gb];
    int64_t at = slot_of(v) * g->numel, n = ir_shape_numel(&v->shape);
    for (int64_t e = 0; e < n; e++) {
        int64_t off = box_elem(tr, &v->shape, base, e);
        float f = 0;
        int64_t i = 0;
        if (off >= 0 && !interp_mem_read(in, op, tr, off, &f, &i))
            return false;
        if (g->f)
            g->f[at + view_index(g, v, e)] = f;
        else
            g->i[at + view_index(g, v, e)] = i;
    }
    g->meta[slot_of(v)] = (slot_meta){.tma = op, .bar = gb, .phase = b->completed, .st_task = -1};
    int64_t bytes = n * (int64_t)loom_dtype_size(g->dt);
    b->tx -= bytes;
    b->landed += bytes;
    return from_peer(in, dst, settle(dst, op, gb));
}

bool interp_tma_load(interp *in, const ir_op *op)
{
    int r = interp_tensor_of(in, op).arg->shape.rank, gb;
    if (!bar_at(in, op, 2 + r, &gb))
        return false;
    return tma_land(in, in, op, interp_opnd(in, op, 1 + r), gb);
}

/* The box lands in the same view of every CTA of the cluster, on each one's barrier. */
bool interp_tma_load_multicast(interp *in, const ir_op *op)
{
    int r = interp_tensor_of(in, op).arg->shape.rank, gb;
    if (!bar_at(in, op, 2 + r, &gb))
        return false;
    for (int q = 0; q < in->k->cluster; q++)
        if (!tma_land(in, peer(in, q), op, interp_opnd(in, op, 1 + r), gb))
            return false;
    return true;
}

bool interp_tma_store(interp *in, const ir_op *op)
{
    task *t = cur(in);
    tref tr = interp_tensor_of(in, op);
    int r = tr.arg->shape.rank;
    int64_t base[LOOM_MAX_RANK];
    for (int d = 0; d < r; d++)
        base[d] = interp_ival(interp_opnd(in, op, 1 + d), 0);
    tv *v = interp_opnd(in, op, 1 + r);
    if (!need_task(in, op) || !check_visible(in, op, v) || !check_fenced(in, op, v))
        return false;
    const ring *g = ring_of(in, v);
    int64_t at = slot_of(v) * g->numel, n = ir_shape_numel(&v->shape);
    for (int64_t e = 0; e < n; e++) {
        int64_t off = box_elem(tr, &v->shape, base, e), x = at + view_index(g, v, e);
        if (off >= 0 && !interp_mem_write(in, op, tr, off, g->f ? g->f[x] : 0, g->i ? g->i[x] : 0))
            return false;
    }
    return add_read(in, op, t, v, t->st_issued++, true);
}

bool interp_tma_store_wait(interp *in, const ir_op *op)
{
    task *t = cur(in);
    if (!need_task(in, op))
        return false;
    if (t->st_issued - op->iattr[0] > t->st_retired)
        t->st_retired = t->st_issued - op->iattr[0];
    prune_reads(t);
    return true;
}

/* ---------------------------------------------------------------- wgmma */

/* Element (m, k) of a wgmma operand of `cols` columns: a register tile or a view. */
static float operand_at(interp *in, const tv *x, int64_t m, int64_t k, int64_t cols)
{
    int64_t e = m * cols + k;
    if (x->kind != IR_T_SMEM)
        return x->f[e];
    const ring *g = ring_of(in, x);
    return g->f[slot_of(x) * g->numel + view_index(g, x, e)];
}

bool interp_wgmma(interp *in, const ir_op *op)
{
    task *t = cur(in);
    tv *a = interp_opnd(in, op, 0), *b = interp_opnd(in, op, 1), *c = interp_opnd(in, op, 2);
    tv *r = interp_res(in, op, 0);
    if (!need_task(in, op))
        return false;
    if (a->kind == IR_T_SMEM && (!check_visible(in, op, a) || !check_fenced(in, op, a)))
        return false;
    if (!check_visible(in, op, b) || !check_fenced(in, op, b))
        return false;
    int64_t M = c->shape.dim[0], N = c->shape.dim[1], K = a->shape.dim[1];
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float acc = c->f[m * N + n];
            for (int64_t kk = 0; kk < K; kk++)
                acc = fmaf(operand_at(in, a, m, kk, K), operand_at(in, b, kk, n, N), acc);
            r->f[m * N + n] = acc;
        }
    if (a->kind == IR_T_SMEM && !add_read(in, op, t, a, t->wg_committed, false))
        return false;
    return add_read(in, op, t, b, t->wg_committed, false);
}

bool interp_wgmma_commit(interp *in, const ir_op *op)
{
    if (!need_task(in, op))
        return false;
    cur(in)->wg_committed++;
    return true;
}

bool interp_wgmma_wait(interp *in, const ir_op *op)
{
    task *t = cur(in);
    if (!need_task(in, op))
        return false;
    /* an accumulator of a wgmma no commit has closed is not covered by any wait */
    for (int j = 0; j < t->nreads; j++) {
        const rd *e = &t->reads[j];
        if (e->store || e->seq != t->wg_committed)
            continue;
        for (int i = 0; i < op->nopnd; i++)
            if (e->op->nres && op->opnd[i] == e->op->res[0])
                return interp_fail(in, LOOM_ERR_RUNTIME, op,
                                   "accumulator %d comes from the wgmma at %s:%d, which no "
                                   "loom_wgmma_commit has closed into a group, so no wait covers it",
                                   i, file_of(e->op), e->op->src.line);
    }
    if (t->wg_committed - op->iattr[0] > t->wg_retired)
        t->wg_retired = t->wg_committed - op->iattr[0];
    prune_reads(t);
    for (int i = 0; i < op->nres; i++)
        interp_copy_tv(interp_res(in, op, i), interp_opnd(in, op, i));
    return true;
}

/* ---------------------------------------------------------------- tasks */

static task *task_record(interp *in, int i)
{
    interp_hw *hw = in->hw;
    if (i >= hw->captasks) {
        int old = hw->captasks;
        if (!grow((void **)&hw->tasks, &hw->captasks, i + 1, sizeof(task *)))
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
    char tb[160], bb[128];
    const ir_op *w = t->wait_op;
    if (!w)
        return false;
    if (t->fbuf)
        snprintf(buf, n, "%s waits at %s:%d for %s[%lld] >= %lld; it is %lld", task_name(t, tb, sizeof tb),
                 file_of(w), w->src.line, t->farg->name, (long long)t->foff, (long long)t->ftarget,
                 (long long)flag_value(t->fbuf, t->foff));
    else if (t->wait_nb >= 0)
        snprintf(buf, n, "%s waits on named barrier %d at %s:%d, threads arrived %lld of %lld",
                 task_name(t, tb, sizeof tb), t->wait_nb, file_of(w), w->src.line,
                 (long long)hw->nb[t->wait_nb].arrived, (long long)hw->nb[t->wait_nb].target);
    else {
        const mbar *b = &hw->bars[t->wait_bar];
        snprintf(buf, n,
                 "%s waits on barrier %s for phase parity %d at %s:%d, barrier completed %lld "
                 "phases (arrivals %lld of %lld, bytes pending %lld)",
                 task_name(t, tb, sizeof tb), bar_name(in, t->wait_bar, bb, sizeof bb), t->wait_parity,
                 file_of(w), w->src.line, (long long)b->completed, (long long)(b->arrivals - b->pending),
                 (long long)b->arrivals, (long long)b->tx);
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

/* ---------------------------------------------------------------- flags: programs side by side */

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
        block(in, tk);
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
            if (!t)
                snprintf(w, sizeof w, "waits at %s:%d for %s[%lld] >= %lld; it is %lld", file_of(p->wait_op),
                         p->wait_op->src.line, p->warg->name, (long long)p->woff, (long long)p->wtarget,
                         (long long)flag_value(p->wbuf, p->woff));
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

/* The interpreter of the CTA of rank q in this one's cluster (this one without clusters). */
static interp *peer(interp *in, int q)
{
    int c = in->k->cluster;
    if (c <= 1 || !in->prog)
        return in;
    prog *p = in->prog;
    int me = in->pid[0] % c;
    return &p->side->progs[(p - p->side->progs) - me + q].in;
}

/* After an op of `in` changed CTA dst: an error there is this program's error; a change
 * to another program is progress for the side-by-side scheduler. */
static bool from_peer(interp *in, interp *dst, bool ok)
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
        p->in = (interp){.k = k, .args = base->args, .err = base->err, .errlen = base->errlen,
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
     * changes nothing */
    for (int left = S.n; st == LOOM_OK && left > 0;) {
        uint64_t adds0 = S.adds;
        int left0 = left;
        for (int i = 0; i < S.n && st == LOOM_OK; i++) {
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
 * one cluster's programs side by side at a time (both where both). */
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
