/*
 * loom_pipe_epilogue.h -- the pipeline layer's epilogues (loom_pipe.h includes it), for the
 * authors of warp-specialized kernels: how an output tile leaves a consumer's registers
 * for global memory (straight; through a staging tile stored by TMA, lazily, in turns or
 * handed over; or through a borrowed ring slot), and an epilogue function of yours run
 * on the accumulator tile first (bias, activation, cast) with the tile's coordinates at
 * hand (loom_tile_at).  In libloom: pipe/pipe.c (the stores), pipe/mainloop.c (the visitor).
 */
#include "loom_pipe.h" /* first, outside the guard: the pieces this builds on */
#ifndef INCLUDE_LOOM_PIPE_EPILOGUE_H
#define INCLUDE_LOOM_PIPE_EPILOGUE_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---------------------------------------------------------------- epilogues */

/* How an output tile leaves a consumer's registers. */
typedef enum loom_epilogue_kind {
    LOOM_EPI_REGISTERS, /* loom_store straight from the registers (masked at the edges) */
    LOOM_EPI_STAGED,    /* through a staging tile and one TMA store, which runs on during
                           the next mainloop: the writer waits for it lazily, before it
                           writes the staging tile again (the issuing thread waits, then
                           the writing threads meet at the epilogue's named barrier) */
    LOOM_EPI_TURNS,     /* task replicas share one staging tile (or one each): each writes
                           it, TMA-stores it and waits until the store has read it */
    LOOM_EPI_HANDOVER,  /* two replicas share one staging tile in turn, replica 0 first,
                           handing it over by mbarriers (so one's epilogue overlaps the
                           other's mainloop) */
    LOOM_EPI_PARTS,     /* each replica its tile in parts of the staging tile's rows (or
                           of its columns, where it has all the tile's rows), through
                           two staging slots of its own in turn: a part is written once
                           the store two parts back has read its slot, a tile's first
                           once every earlier store has (the issuing thread waits with
                           cp.async.bulk.wait_group.read, the replica's threads meet), so
                           no replica waits for another and a part's store runs while the
                           next part is written */
} loom_epilogue_kind;

typedef struct loom_epilogue {
    loom_epilogue_kind kind;
    loom_val out;   /* the output tensor */
    loom_val stage; /* the staging ring (LOOM_NONE for LOOM_EPI_REGISTERS) */
    loom_val hand;  /* LOOM_EPI_HANDOVER: hand[r] is "replica r is done with the tile" */
    loom_sync sync; /* the threads that fill the staging tile together */
    loom_shape part; /* LOOM_EPI_PARTS: a part's shape (the staging tile's) */
} loom_epilogue;

/* An epilogue writing tensor `out`.  Staged kinds allocate the staging ring: `slots`
 * tiles of dtype and shape (one a replica for LOOM_EPI_TURNS when they may overlap;
 * LOOM_EPI_PARTS: `slots` is the replicas, each given two slots of a part's shape);
 * `threads` is how many threads fill one tile (one replica's, or the task's). */
#define loom_epilogue_create(p, kind, out, dtype, shape, slots, threads) \
    loom_epilogue_create_at(LOOM_HERE, p, kind, out, dtype, shape, slots, threads)
loom_epilogue loom_epilogue_create_at(loom_src at, loom_pipe *p, loom_epilogue_kind kind, loom_val out,
                                      loom_dtype dtype, loom_shape shape, int slots, int threads);
/* Store tile v at out[offs] through staging slot `slot` (an i32; LOOM_NONE: 0).  A v of
 * fewer columns than the staging tile (whole swizzle chunks of it) goes through the
 * staging tile's first columns.
 * LOOM_EPI_HANDOVER: rep is the replica and j its tile count (for the hand parities).
 * LOOM_EPI_PARTS: v's rows (or columns) a whole number of parts (the staging tile's),
 * stored into out's last two dims; rep is the replica (LOOM_NONE: 0), j unused. */
#define loom_epilogue_store(k, e, offs, v, slot) loom_epilogue_store_at(LOOM_HERE, k, e, offs, v, slot, LOOM_NONE, LOOM_NONE)
#define loom_epilogue_store_turn(k, e, offs, v, rep, j) \
    loom_epilogue_store_at(LOOM_HERE, k, e, offs, v, LOOM_NONE, rep, j)
void loom_epilogue_store_at(loom_src at, loom_kernel *k, const loom_epilogue *e, const loom_val *offs, loom_val v,
                            loom_val slot, loom_val rep, loom_val j);
/* LOOM_EPI_HANDOVER: a replica with nothing to store this tile still takes its turn:
 * wait for it (loom_epilogue_turn_wait), then hand the tile on (loom_epilogue_turn_done). */
#define loom_epilogue_turn_wait(k, e, rep, j) loom_epilogue_turn_wait_at(LOOM_HERE, k, e, rep, j)
#define loom_epilogue_turn_done(k, e, rep) loom_epilogue_turn_done_at(LOOM_HERE, k, e, rep)
void loom_epilogue_turn_wait_at(loom_src at, loom_kernel *k, const loom_epilogue *e, loom_val rep, loom_val j);
void loom_epilogue_turn_done_at(loom_src at, loom_kernel *k, const loom_epilogue *e, loom_val rep);
/* LOOM_EPI_STAGED with a staging tile of 1/parts of a tile's columns (2-D, stored into the
 * last two dims of out; offs: out's rank offsets, the tile's first column last): the tile
 * goes out part by part, each part written once the last part's TMA store has read the
 * staging tile (as every LOOM_EPI_STAGED store waits).  part(ctx, k, j) builds part j,
 * the tile's columns [j c, (j + 1) c) (c = the staging tile's), stored at offs' last + j c;
 * it is called right before its store, so what it builds is live one part at a time: a
 * loom_slice of a tile made whole, or the part made from the parts of its operands (the
 * automatic warp specialization's: a residual tile loaded a part at a time). */
typedef loom_val (*loom_epilogue_part_fn)(void *ctx, loom_kernel *k, int j);
#define loom_epilogue_store_parts(k, e, offs, rank, parts, part, ctx) \
    loom_epilogue_store_parts_at(LOOM_HERE, k, e, offs, rank, parts, part, ctx)
void loom_epilogue_store_parts_at(loom_src at, loom_kernel *k, const loom_epilogue *e, const loom_val *offs, int rank,
                                  int parts, loom_epilogue_part_fn part, void *ctx);
/* Store v at out[offs] through a ring slot's view that the caller holds (a borrowed
 * slot: no staging memory of its own); `sync` is the threads that wrote the view; the
 * slot goes back with loom_epilogue_return_slot once the store has read it. */
#define loom_epilogue_store_borrowed(k, out, offs, v, view, sync, rep) \
    loom_epilogue_store_borrowed_at(LOOM_HERE, k, out, offs, v, view, sync, rep)
void loom_epilogue_store_borrowed_at(loom_src at, loom_kernel *k, loom_val out, const loom_val *offs, loom_val v,
                                     loom_val view, loom_sync sync, loom_val rep);
/* Where `held` (an i1) says a slot is held: wait until its store has read it, then
 * release ring use `use`'s slot. */
#define loom_epilogue_return_slot(k, r, held, use) loom_epilogue_return_slot_at(LOOM_HERE, k, r, held, use)
void loom_epilogue_return_slot_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val held, loom_val use);
/* Where an accumulator tile lies in the output, for an epilogue function: the tile
 * [rows, cols] of the accumulator starts at row m0 and column n0 of product b (b
 * LOOM_NONE: the output is not batched).  M and N are the output's rows and columns (i32
 * values, run-time or constant) where the function needs the valid part of the tile
 * (loom_tile_valid); `rep` is the consumer replica (LOOM_NONE: one).  `batch` (an i32, or
 * LOOM_NONE): a tile of a product past it stores nothing. */
typedef struct loom_tile_at {
    loom_val b, m0, n0;
    int64_t rows, cols;
    loom_val M, N;
    loom_val rep;
    loom_val batch;
} loom_tile_at;

/* The epilogue function: from the finished f32 accumulator to the tile to store (in the
 * output's dtype), built with any ops; ctx is yours. */
typedef loom_val (*loom_epilogue_fn)(void *ctx, loom_kernel *k, loom_val acc, const loom_tile_at *t);

/* The tile's row indices m0 + [0, rows) and column indices n0 + [0, cols) (i32 vectors;
 * with expand_dims and broadcast, masks or per-row / per-column values). */
#define loom_tile_rows(k, t) loom_tile_rows_at(LOOM_HERE, k, t)
#define loom_tile_cols(k, t) loom_tile_cols_at(LOOM_HERE, k, t)
loom_val loom_tile_rows_at(loom_src at, loom_kernel *k, const loom_tile_at *t);
loom_val loom_tile_cols_at(loom_src at, loom_kernel *k, const loom_tile_at *t);
/* A row vector v[N] at the tile's columns, broadcast to the tile (zero past the end):
 * bias[n0 .. n0 + cols), loaded straight into the accumulator's column slice.  Leading
 * offsets of a batched v ([B, N]): b. */
#define loom_tile_row_vector(k, t, v) loom_tile_row_vector_at(LOOM_HERE, k, t, v)
loom_val loom_tile_row_vector_at(loom_src at, loom_kernel *k, const loom_tile_at *t, loom_val v);
/* A column vector v[M] at the tile's rows, broadcast to the tile (a per-row scale). */
#define loom_tile_col_vector(k, t, v) loom_tile_col_vector_at(LOOM_HERE, k, t, v)
loom_val loom_tile_col_vector_at(loom_src at, loom_kernel *k, const loom_tile_at *t, loom_val v);
/* The tile's rows and columns inside the output: min(rows, M - m0), min(cols, N - n0). */
#define loom_tile_valid(k, t, rows, cols) loom_tile_valid_at(LOOM_HERE, k, t, rows, cols)
void loom_tile_valid_at(loom_src at, loom_kernel *k, const loom_tile_at *t, loom_val *rows, loom_val *cols);

/* The epilogue of one tile: v = fn(ctx, k, acc, t) (fn NULL: acc as it is), stored at
 * the tile's place by e's kind: through staging slot `slot` (LOOM_NONE: 0), or for
 * LOOM_EPI_HANDOVER in replica t->rep's turn, its j-th tile. */
#define loom_epilogue_visit(k, e, fn, ctx, acc, t, slot, j) \
    loom_epilogue_visit_at(LOOM_HERE, k, e, fn, ctx, acc, t, slot, j)
void loom_epilogue_visit_at(loom_src at, loom_kernel *k, const loom_epilogue *e, loom_epilogue_fn fn, void *ctx,
                            loom_val acc, const loom_tile_at *t, loom_val slot, loom_val j);

/* After the task's last tile: the last TMA store has read the staging memory. */
#define loom_epilogue_finish(k, e) loom_epilogue_finish_at(LOOM_HERE, k, e)
void loom_epilogue_finish_at(loom_src at, loom_kernel *k, const loom_epilogue *e);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* INCLUDE_LOOM_PIPE_EPILOGUE_H */
