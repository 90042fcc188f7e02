/*
 * autows_passes.h -- what pipe/autows.c (the analysis passes) and pipe/autows_code.c
 * (ws-code: the new kernel) share: the passes' state and a few helpers.  Internal to
 * pipe/; codegen's door is pipe/autows.h.
 */
#ifndef LOOM_PIPE_AUTOWS_PASSES_H
#define LOOM_PIPE_AUTOWS_PASSES_H

#include "autows.h"
#include "loom_pipe.h"

#include <stdbool.h>
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
    int acc_arg;        /* mainloop, rotate: the accumulator's index among the carried values */
    /* rotate: two dots, the second carrying the accumulator, software-pipelined by one
     * step (the next step's first dot and the math on its result run beside this step's
     * second dot); cat[o] is a body op's part (AW_CAT_*) */
    bool rotate;
    uint8_t *cat;
    /* an outer channel: a tile loaded before the loop that only dots read as A (attention's
     * Q), loaded by the producer once a program into a ring of its own */
    uint32_t outer;
    int qslots;         /* its ring's slots: 2 (the next program's loads ahead) or 1 */
    loom_swizzle outer_swz;
    loom_ring qring;
    loom_val pi, qview, qslot; /* the task's program count (qring's and ering's use), the consumers' view and slot */
    /* an epilogue channel: a tile loaded after the loop (a gathered residual, a bias tile),
     * loaded by the producer once a program into a ring of its own while the consumers'
     * k steps run, and read from shared memory by the epilogue */
    uint32_t epil;
    loom_swizzle epil_swz;
    loom_ring ering;
    int groups, stages, pingpong;
    const char *dump;
    char *err;
    size_t errlen;
    loom_status st;
    uint32_t *map;      /* src value -> dst value (plain indices) of the task being built */
    loom_ring ring;
    uint32_t staged;    /* the store the epilogue stages for one TMA store (0: none) */
    int borrow;         /* staged through the last k step's slot (ring tile borrow - 1), not a
                         * staging tile of its own (0: no) */
    int parts;          /* the staging tile holds 1 / parts of the stored tile's columns (1: all):
                         * the tile goes out part by part where the whole does not fit */
    uint32_t part_val;  /* parts: the stored tile (a value of the source kernel) */
    loom_val eslot, eview; /* the epilogue channel's slot and view in the consumers, while held:
                            * with parts its tile is read a part at a time, the slot given back
                            * after the last part */
    loom_sync bsync;    /* borrow: the consumer threads that write the slot */
    loom_val held, held_use; /* borrow: the consumers hold a slot (i1), and its ring use */
    bool defer;         /* borrow in the mainloop form: the held slot goes back during the next
                         * program's first k steps, not right after its store (below) */
    loom_val pend;      /* defer: the ring use of the slot the last program's store holds (-1:
                         * none), carried by the consumers' loop over programs */
    loom_val pend_next; /* defer: the same after this program's epilogue */
    bool runs;          /* the loop's bounds are constants and it takes a step at least */
    bool coal;          /* the staged store has a mask: the tile goes into shared memory and back
                         * to registers in a layout whose threads store whole 16-byte runs of a
                         * row (masked), not by TMA */
    loom_pipe pipe;     /* the new kernel's named barriers */
    loom_epilogue epi;  /* its staging tile */
    loom_pingpong pp;   /* ping-pong's turns */
    loom_val grid[3];   /* the launch's grid as the user gave it (the kernel's last arguments) */
    loom_val vpid[3];   /* the task's current program of that grid (its tile loop's) */
    loom_val rep, trips; /* ping-pong: the consumer replica, and the steps a program takes */
} aw;

/* A loop body op's part in the rotated (software-pipelined) loop: recomputed where needed
 * (no dot result, no accumulator in it), after the first dot, or on the accumulator. */
enum { AW_CAT_PRE = 0, AW_CAT_AFTER1 = 1, AW_CAT_ACC = 2, AW_CAT_FEED = 3 };
/* (FEED: AFTER1 ops that only make the second dot's A, such as its cast: they run after
 * that dot's wait, so no instruction writes an in-flight wgmma's A registers) */
/* aw_dot.a_chan of an A read from the outer channel */
enum { AW_OUTER = 100 };

/* ---------------------------------------------------------------- helpers both files use */

/* Record the passes' refusal at `at` (the user's line): "file:line: error: autows (kernel
 * 'name'): ..."; returns false. */
bool aw_fail(aw *w, loom_src at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "file:line" of op o into buf. */
const char *aw_where(aw *w, uint32_t o, char *buf, size_t n);
/* How many live ops read value v (anywhere in the kernel); *user: one of them. */
int aw_uses_of(aw *w, uint32_t v, uint32_t *user);
/* The last pass: the new kernel (w->dst). */
bool aw_pass_code(aw *w);

static inline ir_op *aw_op(aw *w, uint32_t o) { return &w->src->ops[o]; }
/* The op that defines value v (0: an argument or a block argument). */
static inline uint32_t aw_def_of(const loom_kernel *k, uint32_t v)
{
    return k->vals[v].kind == IR_V_RESULT ? k->vals[v].def : 0;
}
static inline bool aw_dumping(const aw *w, const char *pass)
{
    return w->dump && (!strcmp(w->dump, "all") || !strcmp(w->dump, pass));
}
/* Bytes of a tile of type t. */
static inline int64_t aw_tile_bytes(const ir_type *t)
{
    return ir_shape_numel(&t->shape) * (int64_t)loom_dtype_size((loom_dtype)t->dtype);
}

#endif /* LOOM_PIPE_AUTOWS_PASSES_H */
