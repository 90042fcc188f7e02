/*
 * loom_pipe.h -- the pipeline layer, for the authors of warp-specialized Hopper kernels:
 * rings, tile schedulers, roles, turns and ping-pong, mainloops and (loom_pipe_epilogue.h,
 * included at the end) epilogues as building blocks.
 *
 * The raw Hopper ops of loom_hopper.h say everything a kernel does, but a
 * warp-specialized kernel written with them alone re-invents the same protocol each
 * time: ring slots with full/empty mbarriers and phase parities, the producer's inverted
 * wait, named-barrier ids, register budgets, staged TMA-store epilogues.  This layer
 * writes that protocol once, with the builder calls only, so a kernel built with it is
 * checked by the verifier and run by the interpreter (which reports deadlocks and
 * unsynchronized ring reads) like any other; and every call takes the caller's source
 * location (the `_at` forms), so a report names the line of the template, not of this
 * layer.  docs/dsl.md, "Writing a warp-specialized kernel", builds a kernel step by step.
 *
 *   loom_pipe        the kernel's pipeline context: hands out named-barrier ids
 *   roles            loom_producer_begin / loom_consumers_begin: tasks with register
 *                    budgets derived from the kernel's warps
 *   loom_sync        a named barrier over some threads
 *   loom_ring        N slots of shared tiles with their full/empty barriers, used through
 *                    a running count `it` of its uses (slot it % N, phase (it / N) & 1):
 *                    produce, load (or load_multicast over a cluster); consume, view,
 *                    release
 *   loom_sched       which units of work (tiles) a program takes, static or claimed from
 *                    a counter, and the one loop over them (loom_sched_begin / _end)
 *   loom_turns       two consumer replicas taking turns to issue; loom_pingpong, two
 *                    taking turns on whole tiles
 *   loom_mainloop    a consumer's k loop over a ring (consume, wgmma, commit, wait with
 *                    groups in flight, give the previous slot back) and its finish
 *   loom_epilogue    an output tile from registers to global memory (loom_pipe_epilogue.h)
 *
 * The first argument, one rule: a call that makes a piece (loom_ring_create,
 * loom_sched_static, loom_sched_dynamic, loom_sync_create, loom_turns_create,
 * loom_pingpong_create, loom_epilogue_create) takes the pipeline context, loom_pipe *p,
 * which knows the kernel and hands out its named barriers; every other call builds ops
 * into the kernel, or reads it, and takes loom_kernel *k, as loom.h's builder calls do.
 * Accessors of a piece's own fields (loom_sched_unit, loom_sched_arg,
 * loom_sched_set_count) take the piece alone; loom_pipe_create(k) makes the context.
 *
 * Prefixes: loom_pipe_, loom_ring_, loom_sched_, loom_sync_, loom_turns_, loom_pingpong_,
 * loom_mainloop_, loom_tile_, loom_epilogue_.  Every function here is in libloom (pipe/).
 */
#include "loom.h" /* first, outside the guard, as every header of loom */
#ifndef LOOM_PIPE_H
#define LOOM_PIPE_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---------------------------------------------------------------- the pipeline context */

/* Named barrier ids 0..LOOM_PIPE_BARRIERS-1 are handed out in order (loom_named_barrier's
 * range); a kernel that asks for more gets an error on its kernel naming the line. */
#define LOOM_PIPE_BARRIERS 8

typedef struct loom_pipe {
    loom_kernel *k;
    int next_barrier; /* the next free named-barrier id */
} loom_pipe;

loom_pipe loom_pipe_create(loom_kernel *k);

/* ---------------------------------------------------------------- roles */

/* The producer is one warp group (4 warps) that only issues TMA: it keeps the fewest
 * registers that hold its loop state, and gives the rest to the consumers. */
#define LOOM_PIPE_PRODUCER_WARPS 4
#define LOOM_PIPE_PRODUCER_REGS 40
/* A consumer thread never gets more than this (the budget loom's kernels were measured
 * with: with two consumer warp groups it is also what the register file allows). */
#define LOOM_PIPE_CONSUMER_REGS_MAX 232

/* The register budget of each consumer thread of kernel k: the register file (64K a
 * CTA, one CTA an SM) less the producer's, shared by the kernel's other warps, rounded
 * down to a multiple of 8 and capped at LOOM_PIPE_CONSUMER_REGS_MAX. */
int loom_pipe_consumer_regs(const loom_kernel *k);

/* The producer task: LOOM_PIPE_PRODUCER_WARPS warps, LOOM_PIPE_PRODUCER_REGS registers. */
#define loom_producer_begin(k) loom_producer_begin_at(LOOM_HERE, k)
loom_region_op loom_producer_begin_at(loom_src at, loom_kernel *k);
/* A consumer task of `warps` warps repeated `replicas` times, with the derived budget. */
#define loom_consumers_begin(k, warps, replicas) loom_consumers_begin_at(LOOM_HERE, k, warps, replicas)
loom_region_op loom_consumers_begin_at(loom_src at, loom_kernel *k, int warps, int replicas);

/* ---------------------------------------------------------------- named barriers */

/* A named barrier that `threads` threads meet at; per_replica > 1 gives each of that
 * many task replicas its own barrier (ids id .. id + per_replica - 1). */
typedef struct loom_sync {
    int id, threads, per_replica;
} loom_sync;

#define loom_sync_create(p, threads) loom_sync_create_at(LOOM_HERE, p, threads, 1)
#define loom_sync_create_per_replica(p, threads, replicas) loom_sync_create_at(LOOM_HERE, p, threads, replicas)
loom_sync loom_sync_create_at(loom_src at, loom_pipe *p, int threads, int per_replica);
/* Meet at the barrier (per replica: at replica `rep`'s, rep an i32 value). */
#define loom_sync_wait(k, s, rep) loom_sync_wait_at(LOOM_HERE, k, s, rep)
void loom_sync_wait_at(loom_src at, loom_kernel *k, loom_sync s, loom_val rep);

/* ---------------------------------------------------------------- rings */

#define LOOM_RING_MAX_TILES 4

/* One shared tile of a ring slot: its dtype, shape and swizzle, and `parts` buffers of
 * it a slot (2: a tile loaded and consumed as two halves, each its own view). */
typedef struct loom_ring_tile {
    loom_dtype dtype;
    loom_shape shape;
    int parts;
    loom_swizzle swizzle;
} loom_ring_tile;

typedef struct loom_ring {
    int slots, ntiles, cluster;
    loom_val buf[LOOM_RING_MAX_TILES]; /* the shared rings: tile i has slots * parts buffers */
    loom_ring_tile tile[LOOM_RING_MAX_TILES];
    loom_val full, empty;              /* the barriers, one of each a slot */
    int64_t bytes;                     /* a whole slot's bytes: what a produce expects */
} loom_ring;

/* A ring of `slots` slots holding `ntiles` tiles each, released by `releasers` task
 * replicas a use (each of them calls loom_ring_release once a use; with clusters, of
 * every CTA of the cluster: the kernel's cluster must be set before).  Allocates the
 * tiles' shared memory and the barriers (at the top of the kernel, before any task). */
#define loom_ring_create(p, slots, releasers, ntiles, tiles) \
    loom_ring_create_at(LOOM_HERE, p, slots, releasers, ntiles, tiles)
loom_ring loom_ring_create_at(loom_src at, loom_pipe *p, int slots, int releasers, int ntiles,
                              const loom_ring_tile *tiles);

/* Producer: wait until use it's slot is free (the previous use's consumers released it;
 * the first N uses pass at once), expect `bytes` on its full barrier (-1: the whole
 * slot's), and return the slot (an i32). */
#define loom_ring_produce(k, r, it, bytes) loom_ring_produce_at(LOOM_HERE, k, r, it, bytes)
loom_val loom_ring_produce_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val it, int64_t bytes);
/* Producer: TMA the box of tensor t at offs into part `part` of tile `tile` of the slot. */
#define loom_ring_load(k, r, slot, tile, part, t, offs) loom_ring_load_at(LOOM_HERE, k, r, slot, tile, part, t, offs)
void loom_ring_load_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val slot, int tile, int part, loom_val t,
                       const loom_val *offs);
/* Producer, a tile every CTA of the cluster needs: rank q loads the q-th of n equal parts
 * along `dim` of the slot's view (offs moved to the part) and multicasts it into every
 * CTA's slot.  Without clusters, a plain load of the whole view. */
#define loom_ring_load_multicast(k, r, slot, tile, dim, t, offs) \
    loom_ring_load_multicast_at(LOOM_HERE, k, r, slot, tile, dim, t, offs)
void loom_ring_load_multicast_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val slot, int tile, int dim,
                                 loom_val t, const loom_val *offs);
/* Consumer: wait until use it's slot is full and return the slot. */
#define loom_ring_consume(k, r, it) loom_ring_consume_at(LOOM_HERE, k, r, it)
loom_val loom_ring_consume_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val it);
/* The view of part `part` (an i32, LOOM_NONE: 0) of tile `tile` of the slot. */
#define loom_ring_view(k, r, slot, tile, part) loom_ring_view_at(LOOM_HERE, k, r, slot, tile, part)
loom_val loom_ring_view_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val slot, int tile, loom_val part);
/* Consumer: give the slot back to the producer (every CTA's, with clusters). */
#define loom_ring_release(k, r, slot) loom_ring_release_at(LOOM_HERE, k, r, slot)
void loom_ring_release_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val slot);
/* The slot of use it (it % N). */
#define loom_ring_slot_of(k, r, it) loom_ring_slot_at(LOOM_HERE, k, it, (r)->slots)
/* Consumer, a use this replica computes nothing on: wait until full, then release (so
 * its arrival counts toward the phase). */
#define loom_ring_pass(k, r, it) loom_ring_pass_at(LOOM_HERE, k, r, it)
void loom_ring_pass_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val it);

/* ---------------------------------------------------------------- tile schedulers */

/* Which units of work (tiles, or with clusters the units a cluster shares) the programs
 * take, and in what order.  Static (loom_sched_static): persistent programs take units
 * p, p + P, p + 2P, ... (P the programs, or clusters, of the grid); or one unit a
 * program.  Dynamic (loom_sched_dynamic): each program's producer (rank 0's, in a
 * cluster) claims units from a counter in global memory, one ahead, and hands each to its
 * consumers (and the cluster's other CTAs) through a small ring in shared memory, so a
 * kernel whose later units wait for earlier ones progresses however few of its programs
 * are resident.  docs/dsl.md ("Writing a warp-specialized kernel", "Dynamic schedules")
 * says how the counter returns to zero after every launch and how the claim loop is built. */
typedef struct loom_sched {
    int64_t units;
    int cluster;
    int persistent;
    int dynamic;
    loom_val counter;              /* dynamic: claims and finished programs (i32 [2], LOOM_INOUT, zero) */
    loom_val slot_ring, full, empty; /* dynamic: the hand-over ring of claimed units */
    int slots;
    loom_val count;                /* the units of a launch, an i32 at run time (LOOM_NONE: units) */
} loom_sched;

loom_sched loom_sched_static(loom_pipe *p, int64_t units, int persistent);

/* A launch whose work varies at run time (a request's mapping) takes only the first
 * `count` units (an i32 scalar, e.g. a kernel argument; count <= units, which stays the
 * bound the loops are built for).  Set it right after creating the schedule. */
void loom_sched_set_count(loom_sched *s, loom_val count);

/* A dynamic schedule over `units` units: counter is an i32 [2] tensor argument declared
 * LOOM_INOUT, zero before the first launch (and after every launch); `readers` is
 * how many consumer task replicas of a CTA take every unit (each calls
 * loom_sched_begin with LOOM_SCHED_CONSUMER); `slots` units may be claimed ahead of
 * them.  Allocates the hand-over ring (at the top of the kernel; set the cluster first). */
#define loom_sched_dynamic(p, units, counter, slots, readers) \
    loom_sched_dynamic_at(LOOM_HERE, p, units, counter, slots, readers)
loom_sched loom_sched_dynamic_at(loom_src at, loom_pipe *p, int64_t units, loom_val counter, int slots,
                                 int readers);

/* In the current task: this program's first unit and the stride to its next (static
 * schedules). */
#define loom_sched_range(k, s, first, step) loom_sched_range_at(LOOM_HERE, k, s, first, step)
void loom_sched_range_at(loom_src at, loom_kernel *k, const loom_sched *s, loom_val *first, loom_val *step);

/* The loop over this program's units (the layer's one unit loop), carrying n values
 * (init, at most LOOM_SCHED_MAX_CARRIED), for either kind of schedule:
 *
 *     loom_sched_loop l = loom_sched_begin(k, &s, LOOM_SCHED_PRODUCER, LOOM_NONE, 1, &zero);
 *     loom_val unit = loom_sched_unit(&l), it = loom_sched_arg(&l, 0);
 *     ... the unit's work ...
 *     loom_sched_end(k, &l, &next_it);
 *     loom_val it_after = loom_sched_result(k, &l, 0);
 *
 * The producer task claims (dynamic), the consumer tasks receive.  With `replica` (an
 * i32 value, LOOM_NONE: all; static schedules only), two replicas take the program's
 * units alternately (ping-pong): replica r its units r, r + 2, ... */
enum { LOOM_SCHED_PRODUCER, LOOM_SCHED_CONSUMER };
#define LOOM_SCHED_MAX_CARRIED 8
typedef struct loom_sched_loop {
    const loom_sched *s;
    int role, n;
    loom_val unit;
    loom_val args[LOOM_SCHED_MAX_CARRIED];
    loom_region_op loop;                   /* static: the for */
    loom_region_op outer, ifo, inner, ifi, ift; /* dynamic: blocks of claims, a claim, a unit */
    loom_val done, next, use;              /* dynamic: in the claim: ended?, the claim ahead, hand-over use */
    loom_val claim;                        /* dynamic producer: the next claim, made before the unit's work */
} loom_sched_loop;

/* Inside the loop of a static schedule (loom_sched_begin, no replica): the unit this
 * program takes after the current one, and an i1, whether there is one (it is below the
 * launch's units).  A task can then start the next unit's work before this one's ends (a
 * pipeline across units: templates/ikbo_fa.c issues the next unit's first GEMM beside
 * this one's last).  A dynamic schedule learns its next unit only when it comes: *has is
 * then the constant false and *next the current unit. */
#define loom_sched_peek(k, l, next, has) loom_sched_peek_at(LOOM_HERE, k, l, next, has)
void loom_sched_peek_at(loom_src at, loom_kernel *k, const loom_sched_loop *l, loom_val *next, loom_val *has);

#define loom_sched_begin(k, s, role, replica, n, init) loom_sched_begin_at(LOOM_HERE, k, s, role, replica, n, init)
loom_sched_loop loom_sched_begin_at(loom_src at, loom_kernel *k, const loom_sched *s, int role, loom_val replica,
                                    int n, const loom_val *init);
static inline loom_val loom_sched_unit(const loom_sched_loop *l) { return l->unit; }
static inline loom_val loom_sched_arg(const loom_sched_loop *l, int i) { return l->args[i]; }
#define loom_sched_end(k, l, yields) loom_sched_end_at(LOOM_HERE, k, l, yields)
void loom_sched_end_at(loom_src at, loom_kernel *k, loom_sched_loop *l, const loom_val *yields);
loom_val loom_sched_result(loom_kernel *k, const loom_sched_loop *l, int i);

/* Taking units alternately: after the loop, does replica 0 have one more unit than
 * replica 1 (an i1)? */
#define loom_sched_odd(k, s) loom_sched_odd_at(LOOM_HERE, k, s)
loom_val loom_sched_odd_at(loom_src at, loom_kernel *k, const loom_sched *s);

/* The grouped (L2-friendly) order of a [batch][tm x tn] grid of tiles: unit t is batch
 * *b, tile row *tr, tile column *tc, taking `group` tile rows at a time so that programs
 * side by side share rows of A and columns of B. */
#define loom_sched_grouped(k, t, tm, tn, group, b, tr, tc) \
    loom_sched_grouped_at(LOOM_HERE, k, t, tm, tn, group, b, tr, tc)
void loom_sched_grouped_at(loom_src at, loom_kernel *k, loom_val t, int64_t tm, int64_t tn, int group, loom_val *b,
                           loom_val *tr, loom_val *tc);

/* ---------------------------------------------------------------- turns */

/* Two consumer replicas (one warp group each) that share every unit of work and take
 * turns to issue their tensor-core work, so that one's other work (a softmax) runs while
 * the other's GEMMs are on the tensor cores.  A turn is handed over by signalling (a
 * named-barrier arrive), so the replica that hands over never waits for the other: it
 * only waits, at its next turn, until the other has issued its own.
 *
 *   loom_turns_start     at the top of the consumer task (replica 1 lets replica 0 go first)
 *   loom_turns_begin     before issuing: wait for this replica's turn
 *   loom_turns_end       after issuing (and committing): the turn to the other
 *   loom_turns_finish    after the last turn (replica 0 takes the last hand-over)
 *
 * Both replicas must take the same number of turns. */
typedef struct loom_turns {
    int id;      /* named barriers id (replica 0's turn) and id + 1 (replica 1's) */
    loom_val rep;
} loom_turns;

#define loom_turns_create(p) loom_turns_create_at(LOOM_HERE, p)
loom_turns loom_turns_create_at(loom_src at, loom_pipe *p);
#define loom_turns_start(k, t) loom_turns_start_at(LOOM_HERE, k, t)
#define loom_turns_begin(k, t) loom_turns_begin_at(LOOM_HERE, k, t)
#define loom_turns_end(k, t) loom_turns_end_at(LOOM_HERE, k, t)
#define loom_turns_finish(k, t) loom_turns_finish_at(LOOM_HERE, k, t)
/* Returns this replica (kept in t). */
loom_val loom_turns_start_at(loom_src at, loom_kernel *k, loom_turns *t);
void loom_turns_begin_at(loom_src at, loom_kernel *k, const loom_turns *t);
void loom_turns_end_at(loom_src at, loom_kernel *k, const loom_turns *t);
void loom_turns_finish_at(loom_src at, loom_kernel *k, const loom_turns *t);

/* ---------------------------------------------------------------- ping-pong */

/* Two consumer replicas that take turns on the tensor cores, in tile order, so that one's
 * epilogue overlaps the other's mainloop: replica r takes the program's tiles r, r + 2,
 * ...; the mainloops take turns, and so do the epilogues (which may then share a staging
 * tile and a named barrier).  Each replica calls loom_pingpong_mma_begin before its
 * tile's mainloop, loom_pingpong_mma_end after it and loom_pingpong_tile_end after its
 * epilogue; after its loop over units, loom_pingpong_finish (the replica with one tile
 * fewer takes an empty turn).  Two loom_turns, four named barriers; docs/dsl.md,
 * "Ping-pong", draws the timeline and says why the order keeps ring waits sound. */
typedef struct loom_pingpong {
    loom_turns mma, epi;  /* the turns of the mainloops and of the epilogues */
    loom_val rep, second; /* the replica, and "is it replica 1", set by loom_pingpong_start */
} loom_pingpong;

#define loom_pingpong_create(p) loom_pingpong_create_at(LOOM_HERE, p)
loom_pingpong loom_pingpong_create_at(loom_src at, loom_pipe *p);
/* In the consumer task: this replica (returned, and kept in pp). */
#define loom_pingpong_start(k, pp) loom_pingpong_start_at(LOOM_HERE, k, pp)
loom_val loom_pingpong_start_at(loom_src at, loom_kernel *k, loom_pingpong *pp);
#define loom_pingpong_mma_begin(k, pp) loom_pingpong_mma_begin_at(LOOM_HERE, k, pp)
#define loom_pingpong_mma_end(k, pp) loom_pingpong_mma_end_at(LOOM_HERE, k, pp)
#define loom_pingpong_tile_end(k, pp) loom_pingpong_tile_end_at(LOOM_HERE, k, pp)
#define loom_pingpong_finish(k, pp, odd) loom_pingpong_finish_at(LOOM_HERE, k, pp, odd)
void loom_pingpong_mma_begin_at(loom_src at, loom_kernel *k, const loom_pingpong *pp);
void loom_pingpong_mma_end_at(loom_src at, loom_kernel *k, const loom_pingpong *pp);
void loom_pingpong_tile_end_at(loom_src at, loom_kernel *k, const loom_pingpong *pp);
/* odd: does replica 0 have one more tile than replica 1 (loom_sched_odd). */
void loom_pingpong_finish_at(loom_src at, loom_kernel *k, const loom_pingpong *pp, loom_val odd);

/* ---------------------------------------------------------------- the mainloop */

/* A consumer's k loop over a ring, the part of a warp-specialized GEMM every kernel
 * writes the same way: for k step kk of a tile (ring use it = it0 + kk), wait until the
 * slot is full, issue acc += A @ B from its views, commit, wait until `in_flight` groups
 * are left (1: the previous step's group is done), and give the previous use's slot back
 * to the producer.  After the loop, loom_mainloop_finish waits for the last group and
 * gives the last slot back.
 *
 *     loom_mainloop ml = {&ring, .a_tile = 0, .b_tile = 1, .rows = 128, .cols = 256, .steps = nk};
 *     loom_val acc = loom_mainloop_run(k, &ml, it0, LOOM_NONE, LOOM_NONE, 0);
 *     acc = loom_mainloop_finish(k, &ml, acc, loom_mainloop_last(k, &ml, it0));
 *
 * The operands are views of the slot: A is ring tile a_tile ([rows, BK]; a_split: the
 * tile has one part a consumer replica and replica rep reads part rep, which is how two
 * replicas split a tile by rows), B ring tile b_tile ([BK, cols]); a_trans / b_trans view
 * them transposed (a K-major tile stored [rows, BK] as B is [cols, BK]).  Ping-pong needs
 * nothing of the loop: the replicas' turns go around it (loom_pingpong_mma_begin / _end)
 * and their ring uses skip each other's tiles (the caller's it0). */
typedef struct loom_mainloop {
    const loom_ring *ring;
    int a_tile, b_tile;   /* the ring tiles read as wgmma's A and B */
    int a_trans, b_trans; /* read transposed (loom_smem_trans) */
    int a_split;          /* A's tile has a part a replica: replica rep reads part rep */
    int64_t rows, cols;   /* the accumulator, f32 [rows, cols] */
    int64_t b_part;       /* B's tile read in part: its first b_part elements of wgmma's N (the
                             tile's rows where b_trans, else its columns: whole swizzle chunks);
                             0: the whole tile */
    int64_t steps;        /* k steps a tile ... */
    loom_val nsteps;      /* ... or, where set, a run-time i32 count of them */
    int in_flight;        /* wgmma groups left in flight after a step (0: 1; -1: none) */
    int order;            /* the order the same ops are built in: 0 (templates/gemm.c's) or 1
                             (templates/ikbo_lce.c's), kept so their PTX did not change when
                             they moved here (pipe/mainloop.c says what differs) */
    int promote;          /* FP8 promotion: 0 none; P > 0: every P k steps loom_mainloop_run adds the
                             tensor cores' partial sum into an f32 accumulator in registers and
                             the tensor-core accumulator restarts from zero (below) */
    /* Block scales (with promote): each block's partial sum is multiplied, row by row, by
     * the f32 vector [rows] block_scale returns (or element by element by an f32 [rows,
     * cols] tile) as it is added into acc_f32 (acc_f32 = fma(sum, scale, acc_f32), a vector
     * broadcast over the columns: block-wise FP8 scaling, a scale of each row's block of K
     * times one of B's block).  block_scale is called with a block's index (an i32: k
     * steps block * promote ..) and the replica once the block's first wgmma is issued
     * (its first ring use waited for: scales that come with it in the slot may be read
     * from it), so their reads overlap the block's wgmmas.  NULL: none. */
    loom_val (*block_scale)(void *ctx, loom_kernel *k, loom_val block, loom_val rep);
    void *block_ctx;
} loom_mainloop;

/* Promotion (promote = P > 0).  FP8 wgmma adds its products with about 14 significant bits,
 * not f32's (docs/dsl.md, "FP8"), so a long k loop on one tensor-core accumulator loses
 * precision as K grows.  With promotion, loom_mainloop_run keeps two accumulators: the
 * tensor cores' (acc_tc, the wgmmas' own) and an f32 one in registers (acc_f32).  Every P
 * k steps (a "block", P * BK elements of K; the last block may be shorter) it waits for
 * the block's groups, adds acc_tc into acc_f32 with f32 adds, and starts the next block's
 * first wgmma from zero (scale-d off: nothing is moved into acc_tc).  CUTLASS's default
 * FP8 kernels and DeepGEMM do the same every 128 elements of K (P = 1 at BK = 128).
 * Costs: a second accumulator (twice the accumulator registers: a caller refuses tiles
 * that do not fit), the block's f32 adds, and the wait at each block's end, which leaves
 * no group in flight across it (another warp group's wgmmas fill the tensor cores then).
 * loom_mainloop_run then returns acc_f32 with nothing in flight (its `acc`, where given,
 * is acc_f32's start) and takes from = 0 only; loom_mainloop_finish only gives the last
 * slot back.  On the interpreter the wgmma sums in f32 anyway: promotion changes only how
 * the same f32 adds are grouped.  A loop of one's own (step, issue, retire) promotes with
 * loom_mainloop_promote. */

/* Wait until no group is in flight and return acc_f32 + acc_tc (f32 adds; acc_f32
 * LOOM_NONE: acc_tc itself, finished). */
#define loom_mainloop_promote(k, ml, acc_tc, acc_f32) loom_mainloop_promote_at(LOOM_HERE, k, ml, acc_tc, acc_f32)
loom_val loom_mainloop_promote_at(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val acc_tc,
                                  loom_val acc_f32);

/* One k step at ring use `it` into acc, with wgmma's A `a` where given (a shared view
 * or a register tile: LOOM_NONE takes the slot's A view); then ring use prev's slot
 * goes back (prev LOOM_NONE: none), only where give_back (an i1; LOOM_NONE: always).
 * Returns the accumulator, its group still in flight. */
#define loom_mainloop_step(k, ml, it, prev, give_back, a, acc, rep) \
    loom_mainloop_step_at(LOOM_HERE, k, ml, it, prev, give_back, a, acc, rep)
loom_val loom_mainloop_step_at(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val it, loom_val prev,
                               loom_val give_back, loom_val a, loom_val acc, loom_val rep);
/* The loop: k steps `from` (0, or 1 after a first step of your own) to the end, of ring
 * uses it0 + kk, into acc (LOOM_NONE: a zero accumulator); rep: the replica (a_split).
 * The first step of the loop gives no slot back when from is 0.  Returns the accumulator
 * with the last group in flight (with promote: acc_f32, nothing in flight). */
#define loom_mainloop_run(k, ml, it0, rep, acc, from) loom_mainloop_run_at(LOOM_HERE, k, ml, it0, rep, acc, from)
loom_val loom_mainloop_run_at(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val it0, loom_val rep,
                              loom_val acc, int from);
/* The two halves of a step, for a loop that keeps GEMMs of several rings in flight at
 * once (a flash attention's S = Q K^T on the K ring and O += P V on the V ring, each a
 * mainloop of its own, issued together and waited for one after the other).  issue:
 * acc += A @ B from slot s's views (s from loom_ring_consume; A: `a` where given, else the
 * slot's A view of replica rep; acc LOOM_NONE: from zero), committed as a group of its own.
 * retire: wait until `pending` groups are left in flight (issued after this one), then
 * give slot s back (LOOM_NONE: the caller keeps it).  Returns the finished accumulator. */
#define loom_mainloop_issue(k, ml, s, a, acc, rep) loom_mainloop_issue_at(LOOM_HERE, k, ml, s, a, acc, rep)
loom_val loom_mainloop_issue_at(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val s, loom_val a,
                                loom_val acc, loom_val rep);
#define loom_mainloop_retire(k, ml, acc, pending, s) loom_mainloop_retire_at(LOOM_HERE, k, ml, acc, pending, s)
loom_val loom_mainloop_retire_at(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val acc, int pending,
                                 loom_val s);
/* A zero accumulator of the loop's shape. */
#define loom_mainloop_zero(k, ml) loom_mainloop_zero_at(LOOM_HERE, k, ml)
loom_val loom_mainloop_zero_at(loom_src at, loom_kernel *k, const loom_mainloop *ml);
/* The ring use of a tile's last k step, it0 + steps - 1. */
#define loom_mainloop_last(k, ml, it0) loom_mainloop_last_at(LOOM_HERE, k, ml, it0)
loom_val loom_mainloop_last_at(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val it0);
/* The uses a tile takes of the ring (an i32): steps. */
#define loom_mainloop_uses(k, ml) loom_mainloop_uses_at(LOOM_HERE, k, ml)
loom_val loom_mainloop_uses_at(loom_src at, loom_kernel *k, const loom_mainloop *ml);
/* Wait for acc's last group; give ring use last's slot back (LOOM_NONE: the caller keeps
 * it, e.g. to store through it).  Returns the finished accumulator.  With promote, the
 * run waited already: the slot alone goes back. */
#define loom_mainloop_finish(k, ml, acc, last) loom_mainloop_finish_at(LOOM_HERE, k, ml, acc, last)
loom_val loom_mainloop_finish_at(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val acc, loom_val last);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

/* The epilogues, which build on the pieces above. */
#include "loom_pipe_epilogue.h"

#endif /* LOOM_PIPE_H */
