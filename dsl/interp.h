/*
 * interp.h -- what the interpreter's files share (internal to dsl/).
 *
 * dsl/interp.c holds the core: value slots, the op semantics of the SIMT subset, control
 * flow, the grid loop and the dispatch table made from dsl/ops.h.  Three files hold the
 * Hopper machinery (dsl/interp_hw.h says what each one does): interp_smem.c the per-CTA
 * state and shared-memory rings, interp_async.c mbarriers, named barriers, TMA and wgmma,
 * interp_tasks.c the warp-group tasks, each task replica run as its own coroutine, and
 * the programs run side by side.  This header gives them the core's value representation
 * and helpers, and the core the hooks that set up, run and free the per-CTA machinery
 * and the prototypes of the Hopper ops' semantics (made from dsl/ops.h).
 *
 * A value slot (tv) holds a whole tile: floats of every width as f32 values already
 * rounded to their dtype, integers as int64 values already wrapped to their width.
 * Shared-memory and barrier values hold no elements: they are references (obj, sidx,
 * trans) into the per-CTA state of the Hopper files.
 */
#ifndef LOOM_INTERP_H
#define LOOM_INTERP_H

#include "ir.h"

typedef struct tv {
    uint8_t dt;
    uint8_t kind;  /* ir_typekind of the value */
    bool init;     /* set up (buffers allocated, or a reference kind) */
    int64_t n;
    loom_shape shape;
    float *f;      /* float dtypes */
    int64_t *i;    /* integer dtypes and i1 */
    /* IR_T_SMEM: ring `obj`, slot `sidx` (-1: the whole ring), seen transposed if trans;
     * IR_T_MBAR: barrier array `obj`. */
    int obj;
    int64_t sidx;
    bool trans;
    /* a part of its slot (loom_smem_part): a [prows, pcols] window starting at element
     * poff of the slot; pcols == 0 for the whole slot */
    int64_t poff, prows, pcols;
} tv;

typedef struct interp_hw interp_hw; /* per-run Hopper state (dsl/interp_hw.h) */

typedef struct interp {
    loom_kernel *k;
    const interp_arg *args;
    const ir_arg *targs;     /* the kernel's arguments with their run-time dims at this launch's values */
    tv *env;       /* slots of the code running now: the kernel body's or a task replica's */
    tv *main_env;  /* the kernel body's slots (top-level values, shared by the tasks) */
    int pid[3], grid[3];
    loom_status st;
    char *err;
    size_t errlen;
    interp_hw *hw;           /* NULL for kernels without shared memory, barriers or tasks */
    const ir_op *task_op;    /* the task whose replica runs now (NULL outside tasks) */
    int task_replica;
    struct prog *prog;       /* this program's record when programs run side by side */
} interp;

/* Record the first error (later ones are dropped) as "file:line: error: op 'name' in
 * program (x,y,z)[, task at file:line (replica r)]: message"; returns false. */
bool interp_fail(interp *in, loom_status st, const ir_op *op, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The slot of value v in the current environment, set up on first use (NULL: no memory). */
tv *interp_slot(interp *in, uint32_t v);
/* Run block b; its last op (the yield), or NULL on an error. */
const ir_op *interp_exec_block(interp *in, uint32_t b);

static inline tv *interp_opnd(interp *in, const ir_op *op, int i) { return &in->env[op->opnd[i]]; }
static inline tv *interp_res(interp *in, const ir_op *op, int i) { return interp_slot(in, op->res[i]); }
/* Scalar (or element e of) a value as int64. */
static inline int64_t interp_ival(const tv *t, int64_t e)
{
    return t->i ? t->i[t->n == 1 ? 0 : e] : (int64_t)t->f[t->n == 1 ? 0 : e];
}
void interp_copy_tv(tv *dst, const tv *src);
/* Unravel a row-major linear index. */
static inline void interp_unravel(const loom_shape *s, int64_t e, int64_t *idx)
{
    for (int d = s->rank - 1; d >= 0; d--) {
        idx[d] = e % s->dim[d];
        e /= s->dim[d];
    }
}

/* A tensor argument and its buffer. */
typedef struct tref {
    const ir_arg *arg;
    const interp_arg *buf;
} tref;
static inline tref interp_tensor_of(interp *in, const ir_op *op)
{
    const ir_value *v = &in->k->vals[op->opnd[0]];
    return (tref){&in->targs[v->def], &in->args[v->def]};
}
/* Element `off` (linear, in elements) of a tensor, after a check against its buffer. */
bool interp_mem_read(interp *in, const ir_op *op, tref t, int64_t off, float *f, int64_t *i);
bool interp_mem_write(interp *in, const ir_op *op, tref t, int64_t off, float f, int64_t i);

/* ---------------------------------------------------------------- the Hopper machinery */

/* dsl/interp_smem.c: set up the Hopper state of a run (nothing for kernels that use
 * none); checks what a launch would refuse (TMA tensors' strides).  false: in->st says
 * why. */
bool interp_hw_init(interp *in);
void interp_hw_free(interp *in);

/* dsl/interp_tasks.c: after the kernel body of one CTA ran, run its task replicas to the
 * end, reporting a deadlock if they block for good.  Nothing to do without tasks. */
bool interp_hw_run_tasks(interp *in);

/* Flags (loom_flag_add / loom_flag_wait), dsl/interp_tasks.c.  A kernel with flag waits
 * runs its programs side by side, each a coroutine with its own slots and Hopper state,
 * so a program can wait for another's flag; a round in which every unfinished program
 * stays blocked and no flag changed is a deadlock, reported with each wait's line and the
 * flag's value. */
loom_status interp_run_side_by_side(interp *base);
/* Block the running program or task replica until flags element `off` may have reached
 * target (the caller re-reads it); false on an error or a deadlock. */
bool interp_flag_block(interp *in, const ir_op *op, tref t, int64_t off, int64_t target);
/* A flag changed: waits may be met now. */
void interp_flag_added(interp *in);
/* After an atomic_add: in a side-by-side run, the running program (from its body or one
 * of its task replicas) gives way to the next, so claims from a counter interleave;
 * elsewhere nothing.  A kernel that adds atomically runs side by side when its grid has
 * at most 1024 programs (one after another otherwise: also a schedule the GPU may take).
 * false on an error in another program. */
bool interp_atomic_yield(interp *in);

/* The semantics of the ops whose `sem` column in dsl/ops.h is hopper (defined in the
 * Hopper files); the core ones are static in dsl/interp.c. */
#define INTERP_SEM_core(name)
#define INTERP_SEM_hopper(name) bool interp_##name(interp *in, const ir_op *op);
#define LOOM_OP(E, n, nop, nreg, rule, fl, sem, lay, pr, attrs) INTERP_SEM_##sem(n)
#include "ops.h"
#undef LOOM_OP
#undef INTERP_SEM_hopper
#undef INTERP_SEM_core

#endif /* LOOM_INTERP_H */
