/*
 * interp_hw.h -- the per-CTA state of the interpreter's Hopper machinery (internal to the
 * three files that implement it).
 *
 * The machinery of include/loom_hopper.h is split along three seams:
 *   - dsl/interp_smem.c   the state of a run (set up, reset per CTA, freed), the
 *                         shared-memory rings and their views, and the checks on what the
 *                         hardware leaves unordered there (visibility, async-proxy
 *                         fences, write-after-read);
 *   - dsl/interp_async.c  the asynchronous ops' semantics: mbarriers and their phase
 *                         accounting, named barriers, fences, TMA loads and stores, wgmma;
 *   - dsl/interp_tasks.c  who runs when: the task replicas of a CTA as coroutines, their
 *                         scheduler and deadlock reports, and the programs that run side by
 *                         side (flag waits, clusters).
 *
 * The interpreter is sequential, so asynchronous work completes when it is issued: a TMA
 * load copies its box and completes its bytes on the barrier at once, a wgmma computes
 * its result at once.  What the hardware leaves unordered is checked instead of modelled,
 * with the state below: each ring slot remembers its last writer (slot_meta), each task
 * replica the phases its waits observed, its arrivals, and the slots its unretired wgmma
 * groups and TMA stores still read (rd).
 */
#ifndef LOOM_INTERP_HW_H
#define LOOM_INTERP_HW_H

#include "interp.h"

#include <ucontext.h>

typedef struct slot_meta {
    const ir_op *tma;  /* the last write was this tma_load (or smem_store_cluster) ... */
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

/* Where in its slot a view lies, as stored: rows [r0, r1) by columns [c0, c1) (the whole
 * slot, or a loom_smem_part window), so that disjoint windows of one slot do not race. */
typedef struct win {
    int64_t r0, r1, c0, c1;
} win;

/* A slot read by an asynchronous op that has not been retired yet. */
typedef struct rd {
    int ring;
    int64_t slot;
    win w;        /* the part of the slot it reads */
    const ir_op *op;
    int64_t seq;  /* wgmma: its group (commits before it); tma_store: its number */
    bool store;   /* a TMA store (else a wgmma) */
} rd;
/* A TMA store's read that a loom_tma_store_wait retired stays in its replica's list until
 * the replica's threads meet (a named barrier or an mbarrier wait of them all): the wait
 * runs in the one thread that issued the store (cp.async.bulk.wait_group.read), so until
 * then the replica's other threads may not write the slot (interp_check_overwrite). */

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

/* The running task replica (NULL in the kernel body). */
static inline task *cur(interp *in) { return in->task_op ? in->hw->tasks[in->hw->running] : NULL; }
static inline uint32_t op_id(interp *in, const ir_op *op) { return (uint32_t)(op - in->k->ops); }
static inline const char *file_of(const ir_op *op) { return op->src.file ? op->src.file : "?"; }
static inline ring *ring_of(interp *in, const tv *v) { return &in->hw->rings[v->obj]; }
static inline int64_t slot_of(const tv *v) { return v->sidx < 0 ? 0 : v->sidx; }
/* Does the read still hold its slot (no wait has retired it)? */
static inline bool rd_live(const task *t, const rd *e)
{
    return e->store ? e->seq >= t->st_retired : e->seq >= t->wg_retired;
}

/* ---------------------------------------------------------------- dsl/interp_smem.c */

/* Grow *p (*cap elements of elem bytes) to hold `need`; false when out of memory. */
bool interp_grow(void **p, int *cap, int need, size_t elem);
/* "%ring.0": the value name of ring r, for messages. */
const char *interp_ring_name(interp *in, int r, char *buf, size_t n);
/* Where element e (row-major over view v's shape as seen) lives in its slot of ring g. */
int64_t interp_view_index(const ring *g, const tv *v, int64_t e);
/* The checks on an asynchronous access of view v by op (each reports and returns false):
 * a slot a TMA load wrote is read only after a wait of the reader made it visible; an
 * async-proxy read (wgmma, TMA store) sees an smem_store only after the writer fenced; a
 * write of view v over a part of its slot that an unretired read holds is a race. */
bool interp_check_visible(interp *in, const ir_op *op, const tv *v);
bool interp_check_fenced(interp *in, const ir_op *op, const tv *v);
bool interp_check_overwrite(interp *in, const ir_op *op, const tv *v);
/* Record that replica t's async op reads view v until a wait retires `seq` (its wgmma
 * group, or its number among the TMA stores); forget the reads waits have retired. */
bool interp_add_read(interp *in, const ir_op *op, task *t, const tv *v, int64_t seq, bool store);
void interp_prune_reads(task *t);
/* Replica t's threads met: forget its retired TMA store reads too. */
void interp_sync_reads(task *t);

/* ---------------------------------------------------------------- dsl/interp_async.c */

/* "%full[1]": barrier gb (an index into hw->bars) by its array's value name. */
const char *interp_bar_name(interp *in, int gb, char *buf, size_t n);

/* ---------------------------------------------------------------- dsl/interp_tasks.c */

/* "task at file:line (replica r)" */
const char *interp_task_name(const task *t, char *buf, size_t n);
/* Hand control back to the scheduler until it resumes replica t. */
void interp_block(interp *in, task *t);
void interp_task_free(interp *in, task *t);
/* The interpreter of the CTA of rank q in this one's cluster (this one without clusters). */
interp *interp_peer(interp *in, int q);
/* After an op of `in` changed CTA dst: an error there is this program's error; a change
 * to another program is progress for the side-by-side scheduler.  Returns ok, or false. */
bool interp_from_peer(interp *in, interp *dst, bool ok);

#endif /* LOOM_INTERP_HW_H */
