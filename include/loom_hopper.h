/*
 * loom_hopper.h -- the Hopper machinery of loom's DSL, for the authors of warp-specialized
 * kernels on sm_90a: the builder calls that say where data lives and which warps move and
 * compute it.  Included by loom.h.
 *
 * The level of Meta's TLX: the kernel author says where data lives (shared memory rings),
 * which warp group moves it (TMA into a ring slot, completing on an mbarrier) and which
 * computes (wgmma from shared memory or registers into f32 accumulators); loom makes each
 * statement one or a few instructions and checks what it can.  Everything here is also
 * defined by the interpreter, which runs each task as its own thread and reports deadlocks
 * and reads of ring slots that no wait has made visible.  See docs/dsl.md, "Hopper
 * machinery".
 *
 * Sections:
 *
 *   1. shared memory: rings of tiles, slots, views      (dsl/builder.c; ops in dsl/ops.h)
 *   2. barriers: mbarriers, named barriers, fences
 *   3. TMA: bulk copies between global and shared memory
 *   4. clusters: multicast, cluster-wide arrivals and stores
 *   5. wgmma: the tensor cores, asynchronously
 *   6. warp-group tasks and their register budgets
 *   7. flags: one program hands data to another
 *   8. atomics: work claimed from a counter
 *   9. automatic warp specialization: a plain tile loop made into such a kernel
 *      (pipe/autows.c)
 *
 * They are lowered in codegen/ and interpreted in dsl/ (dsl/interp_hw.h); the pipeline
 * layer built on them, which writes their protocol once, is loom_pipe.h.
 */
#include "loom.h" /* first, outside the guard: loom.h declares every part of the API in order */
#ifndef INCLUDE_LOOM_HOPPER_H
#define INCLUDE_LOOM_HOPPER_H

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported from libloom (loom.h says more). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---------------------------------------------------------------- 1. shared memory */

/* Shared memory.  loom_smem_alloc() declares a ring of `slots` buffers, each a tile of
 * `shape` (rank 1 to 3) and dtype, with a swizzle mode (bytes: 0, 32, 64, 128; the
 * innermost dim times the element size must be a multiple of the swizzle span, and the
 * swizzle is what TMA and wgmma see).  The compiler places and aligns it (1024 bytes for
 * swizzled rings).  A ring's value is used through views: loom_smem_slot(ring, i) is
 * slot i (an i32 scalar; a ring of one slot can be used as a view directly);
 * loom_smem_trans(view) is the same memory seen as the transposed 2-D tile (a wgmma
 * operand stored the other way round).  Allocations go at the top of the kernel, before
 * any task. */
typedef enum loom_swizzle { LOOM_SWIZZLE_NONE = 0, LOOM_SWIZZLE_32 = 32, LOOM_SWIZZLE_64 = 64,
                            LOOM_SWIZZLE_128 = 128 } loom_swizzle;
#define loom_smem_alloc(k, dtype, shape, slots, swizzle) \
    loom_smem_alloc_at(LOOM_HERE, k, dtype, shape, slots, swizzle)
#define loom_smem_slot(k, ring, i) loom_smem_slot_at(LOOM_HERE, k, ring, i)
#define loom_smem_trans(k, view) loom_smem_trans_at(LOOM_HERE, k, view)
#define loom_smem_part(k, view, dim, start, size) loom_smem_part_at(LOOM_HERE, k, view, dim, start, size)
#define loom_smem_load(k, view) loom_smem_load_at(LOOM_HERE, k, view)
#define loom_smem_store(k, view, v) loom_smem_store_at(LOOM_HERE, k, view, v)
loom_val loom_smem_alloc_at(loom_src at, loom_kernel *k, loom_dtype dt, loom_shape shape, int slots,
                            loom_swizzle swizzle);
loom_val loom_smem_slot_at(loom_src at, loom_kernel *k, loom_val ring, loom_val i);
loom_val loom_smem_trans_at(loom_src at, loom_kernel *k, loom_val view);
/* A part of a 2-D view that is itself a plain tile in memory, so TMA can fill it (each CTA
 * of a cluster multicasting its part of a shared operand): along dim 1, `size` columns
 * from `start`, both multiples of the swizzle span (a 128-byte swizzled [64, 256] f16
 * tile has parts of 64, 128 or 192 columns); along dim 0, rows of a view whose rows are
 * at most one span, `start` a multiple of 8 when swizzled. */
loom_val loom_smem_part_at(loom_src at, loom_kernel *k, loom_val view, int dim, int64_t start, int64_t size);
/* Register tile <-> shared view (the tile has the view's shape and dtype). */
loom_val loom_smem_load_at(loom_src at, loom_kernel *k, loom_val view);
void loom_smem_store_at(loom_src at, loom_kernel *k, loom_val view, loom_val v);

/* ---------------------------------------------------------------- 2. barriers */

/* Barriers.  loom_mbar_alloc() declares `count` mbarriers, each completing a phase when
 * `arrivals` arrivals have been made and every byte it expects has landed.  An arrival is
 * made by one task replica executing loom_mbar_arrive() or loom_mbar_expect() (the latter
 * also expects `bytes` more bytes of TMA traffic in this phase); the compiler checks that
 * the tasks arriving on a barrier array add up to `arrivals`.  loom_mbar_wait(bars, i,
 * phase) blocks until the phase of parity `phase` (an i32 0 or 1) of barrier i has
 * completed; a fresh barrier is in phase 0, so waiting on parity 1 passes at once (the
 * usual start of a producer waiting for empty slots).  For the k-th use (k = 0, 1, ...) of
 * an N-slot ring, loom_ring_slot() is k % N and loom_ring_phase() is (k / N) & 1.
 * Named barriers: loom_named_barrier(id, threads) blocks until `threads` threads (whole
 * task replicas, 32 per warp) have reached barrier id (0..7; each task replica also has
 * its own internal ones).  loom_named_barrier_arrive(id, threads) counts this task
 * replica's threads toward barrier id without waiting (a signal to the tasks that wait
 * there: one side arrives, the other waits, as producer and consumer warp groups hand
 * turns over).  loom_fence_async() orders this task's shared-memory writes
 * before later async-proxy reads (wgmma, TMA store) of them. */
#define loom_mbar_alloc(k, count, arrivals) loom_mbar_alloc_at(LOOM_HERE, k, count, arrivals)
#define loom_mbar_expect(k, bars, i, bytes) loom_mbar_expect_at(LOOM_HERE, k, bars, i, bytes)
#define loom_mbar_arrive(k, bars, i) loom_mbar_arrive_at(LOOM_HERE, k, bars, i)
#define loom_mbar_wait(k, bars, i, phase) loom_mbar_wait_at(LOOM_HERE, k, bars, i, phase)
#define loom_ring_slot(k, iter, n) loom_ring_slot_at(LOOM_HERE, k, iter, n)
#define loom_ring_phase(k, iter, n) loom_ring_phase_at(LOOM_HERE, k, iter, n)
#define loom_named_barrier(k, id, threads) loom_named_barrier_at(LOOM_HERE, k, id, threads)
#define loom_named_barrier_arrive(k, id, threads) loom_named_barrier_arrive_at(LOOM_HERE, k, id, threads)
#define loom_fence_async(k) loom_fence_async_at(LOOM_HERE, k)
loom_val loom_mbar_alloc_at(loom_src at, loom_kernel *k, int count, int arrivals);
void loom_mbar_expect_at(loom_src at, loom_kernel *k, loom_val bars, loom_val i, int64_t bytes);
void loom_mbar_arrive_at(loom_src at, loom_kernel *k, loom_val bars, loom_val i);
void loom_mbar_wait_at(loom_src at, loom_kernel *k, loom_val bars, loom_val i, loom_val phase);
loom_val loom_ring_slot_at(loom_src at, loom_kernel *k, loom_val iter, int n);
loom_val loom_ring_phase_at(loom_src at, loom_kernel *k, loom_val iter, int n);
void loom_named_barrier_at(loom_src at, loom_kernel *k, int id, int threads);
void loom_named_barrier_arrive_at(loom_src at, loom_kernel *k, int id, int threads);
void loom_fence_async_at(loom_src at, loom_kernel *k);

/* ---------------------------------------------------------------- 3. TMA */

/* TMA.  loom_tma_load copies the box of global tensor t at element offsets offs (one per
 * tensor dim; the box is the view's shape, right-aligned to the tensor's dims, leading
 * dims of 1) into the view, asynchronously: it completes on barrier i of bars, counting
 * the whole box's bytes; elements outside the tensor read as zero.  loom_tma_store copies
 * a view to the tensor (elements outside it are skipped); loom_tma_store_wait(pending)
 * waits until at most `pending` of this task's stores still read shared memory.  The
 * tensor needs a 16-byte aligned base and strides that are multiples of 16 bytes (except
 * the innermost, which must be 1); a launch that breaks that is refused. */
#define loom_tma_load(k, t, offs, view, bars, i) loom_tma_load_at(LOOM_HERE, k, t, offs, view, bars, i)
#define loom_tma_store(k, t, offs, view) loom_tma_store_at(LOOM_HERE, k, t, offs, view)
#define loom_tma_store_wait(k, pending) loom_tma_store_wait_at(LOOM_HERE, k, pending)
void loom_tma_load_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs, loom_val view,
                      loom_val bars, loom_val i);
void loom_tma_store_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs, loom_val view);
void loom_tma_store_wait_at(loom_src at, loom_kernel *k, int pending);

/* ---------------------------------------------------------------- 4. clusters */

/* Clusters.  loom_kernel_set_cluster(k, n) launches the kernel's programs in clusters of
 * n (2, 4 or 8) along grid x: programs x = c*n .. c*n+n-1 run at once on SMs of one GPC and
 * can reach each other's shared memory; the grid's x must be a multiple of n (a launch
 * refuses it otherwise).  loom_cluster_rank() is the program's rank in its cluster (an i32,
 * program_id(0) % n).  loom_tma_load_multicast is loom_tma_load delivering the box to the
 * same view in every CTA of the cluster, each completing on its own barrier i of bars:
 * when each of the n CTAs multicasts 1/n of a shared operand, every barrier sees the whole
 * operand's bytes, and the checker counts a multicast as n times its box.
 * loom_mbar_arrive_cluster(bars, i) arrives on barrier i in every CTA of the cluster (a
 * consumer releasing a ring slot that its peers' multicasts fill): a barrier array that
 * receives these counts n arrivals per arriving task replica.  The compiler synchronizes
 * the cluster after the barriers are initialised and before any CTA exits.
 * loom_smem_store_cluster(view, v, bars, i) writes the register tile v (the view's dtype
 * and shape; a scalar is splatted to it) into the same view of every CTA of the cluster,
 * asynchronously, and completes the written bytes on barrier i of bars in each of those
 * CTAs, as loom_tma_load_multicast completes its box's: each receiving CTA announces the
 * bytes with loom_mbar_expect on its own barrier (the checker counts the op as n times
 * its bytes), and reads the view only after a wait on that barrier (the interpreter
 * reports a read before it).  It is done once per task replica (one thread writes) and
 * is meant for a few scalars, such as the tile a dynamic scheduler's producer claimed
 * with loom_atomic_add, handed to every CTA of the cluster: the view holds at most 16
 * bytes, a whole number of 4-byte words (an i32 [1] to [4]).  Without clusters it writes
 * this CTA's view and completes on its barrier. */
#define loom_cluster_rank(k) loom_cluster_rank_at(LOOM_HERE, k)
#define loom_tma_load_multicast(k, t, offs, view, bars, i) \
    loom_tma_load_multicast_at(LOOM_HERE, k, t, offs, view, bars, i)
#define loom_mbar_arrive_cluster(k, bars, i) loom_mbar_arrive_cluster_at(LOOM_HERE, k, bars, i)
#define loom_smem_store_cluster(k, view, v, bars, i) loom_smem_store_cluster_at(LOOM_HERE, k, view, v, bars, i)
#define loom_kernel_set_cluster(k, n) loom_kernel_set_cluster_at(LOOM_HERE, k, n)
void loom_kernel_set_cluster_at(loom_src at, loom_kernel *k, int n);
int loom_kernel_cluster(const loom_kernel *k); /* 1 without clusters */
loom_val loom_cluster_rank_at(loom_src at, loom_kernel *k);
void loom_tma_load_multicast_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs, loom_val view,
                                loom_val bars, loom_val i);
void loom_mbar_arrive_cluster_at(loom_src at, loom_kernel *k, loom_val bars, loom_val i);
void loom_smem_store_cluster_at(loom_src at, loom_kernel *k, loom_val view, loom_val v, loom_val bars,
                                loom_val i);

/* ---------------------------------------------------------------- 5. wgmma */

/* wgmma.  acc' = acc + a @ b issued asynchronously on the tensor cores: a is a shared
 * view [M, K] or a register tile [M, K]; b a shared view [K, N] (loom_smem_trans of an
 * [N, K] view is the usual K-major B); f16 or bf16 (the same for both); acc an f32 tile
 * [M, N] with M a multiple of 64 per warp group of the task (each warp group owns M/G
 * rows), N a multiple of 8 up to 256, K a multiple of 16.  FP8: A and B each e4m3 or
 * e5m2, K a multiple of 32, both K-major views (A an [M, K] view as stored, B
 * loom_smem_trans of an [N, K] view: 8-bit types have no transpose bits); the GPU adds
 * their products with about 14 significant bits, not f32's (docs/dsl.md, "FP8").  A register tile is read when
 * the wgmma is issued; it is held in the A fragment's layout, which is the accumulator
 * layout of its shape, so an accumulator S [M, N] cast to f16/bf16 is the A of the next
 * wgmma with no data moved (attention's P @ V), and row reductions of an accumulator
 * broadcast back over its rows stay in registers too (see docs/dsl.md, "Hopper
 * machinery").
 * loom_wgmma_commit() closes the group of wgmmas issued since the last commit;
 * loom_wgmma_wait(pending, n, accs) waits until at most `pending` groups are in flight and
 * returns the accumulators (results 0..n-1 via loom_wgmma_result).  An accumulator may be
 * read by other ops only after a wait with pending = 0 (the verifier checks it). */
#define loom_wgmma(k, a, b, acc) loom_wgmma_at(LOOM_HERE, k, a, b, acc)
#define loom_wgmma_commit(k) loom_wgmma_commit_at(LOOM_HERE, k)
#define loom_wgmma_wait(k, pending, n, accs) loom_wgmma_wait_at(LOOM_HERE, k, pending, n, accs)
loom_val loom_wgmma_at(loom_src at, loom_kernel *k, loom_val a, loom_val b, loom_val acc);
void loom_wgmma_commit_at(loom_src at, loom_kernel *k);
loom_region_op loom_wgmma_wait_at(loom_src at, loom_kernel *k, int pending, int n, const loom_val *accs);
loom_val loom_wgmma_result(loom_kernel *k, loom_region_op wait, int i);

/* ---------------------------------------------------------------- 6. warp-group tasks */

/* Warp-group tasks.  The kernel body can be split into tasks, like TLX's async_tasks:
 * each task runs on its own `warps` warps (a multiple of 4 where it issues wgmma),
 * repeated `replicas` times side by side (loom_task_replica() is 0..replicas-1), with a
 * register budget per thread (setmaxnreg, 24..256, a multiple of 8; 0: leave it).  The
 * kernel's num_warps must equal the sum of warps * replicas; the compiler checks the
 * budgets against the register file (64K per SM) and sets launch bounds so ptxas honours
 * them.  Tasks follow the allocations at the top of the kernel. */
#define loom_task_begin(k, warps, regs, replicas) loom_task_begin_at(LOOM_HERE, k, warps, regs, replicas)
#define loom_task_end(k, task) loom_task_end_at(LOOM_HERE, k, task)
#define loom_task_replica(k) loom_task_replica_at(LOOM_HERE, k)
loom_region_op loom_task_begin_at(loom_src at, loom_kernel *k, int warps, int regs, int replicas);
void loom_task_end_at(loom_src at, loom_kernel *k, loom_region_op task);
loom_val loom_task_replica_at(loom_src at, loom_kernel *k);

/* ---------------------------------------------------------------- 7. flags */

/* Flags in global memory: one program hands data to another inside a kernel.  The writer
 * stores its results, then loom_flag_add(flags, offs, v) adds v to the i32 element
 * flags[offs] with release semantics (every thread of the task replica, or of the
 * program outside tasks, has finished its earlier stores when the add is seen; it is
 * done once per replica).  A reader calls loom_flag_wait(flags, offs, target), which
 * returns when flags[offs] >= target with acquire semantics: the writer's stores are then
 * visible to every thread of the replica, to its loads and to its TMA loads (the wait
 * ends with a fence of the async proxy).  The flags are an argument declared LOOM_INOUT;
 * counting up across launches (target = launches * adds) saves clearing them.
 * A wait on another program needs that program to be running: a kernel with flag waits
 * is launched with at most one program per SM (persistent), and the launch refuses a
 * larger grid.  The interpreter runs such kernels' programs side by side as coroutines
 * and reports a wait that can never be met, with its line and the flag's value. */
#define loom_flag_add(k, flags, offs, v) loom_flag_add_at(LOOM_HERE, k, flags, offs, v)
#define loom_flag_wait(k, flags, offs, target) loom_flag_wait_at(LOOM_HERE, k, flags, offs, target)
void loom_flag_add_at(loom_src at, loom_kernel *k, loom_val flags, const loom_val *offs, loom_val v);
void loom_flag_wait_at(loom_src at, loom_kernel *k, loom_val flags, const loom_val *offs, loom_val target);

/* ---------------------------------------------------------------- 8. atomics */

/* An atomic add in global memory, for work claimed from a counter (a dynamic tile
 * scheduler: a persistent kernel takes the next tile from the counter, so it progresses
 * even when not all of its programs are resident).  loom_atomic_add(t, offs, v) adds the
 * i32 scalar v to the element t[offs] of an i32 tensor declared LOOM_INOUT (offsets: one
 * i32/i64 scalar per dim, in bounds) and returns the element's OLD value as an i32
 * scalar.  It is done once per task replica (or per program outside tasks), relaxed at
 * GPU scope (it orders nothing else: publish data with loom_flag_add), and every thread
 * of the replica receives the same value, so loop bounds computed from it stay uniform.
 * Counters count up across launches (claim = old - launch * claims per launch) instead
 * of being cleared.  The interpreter runs the programs of a kernel that adds atomically
 * side by side (up to 1024 of them), each giving way to the next after every add, so
 * claims interleave as they would on the GPU. */
#define loom_atomic_add(k, t, offs, v) loom_atomic_add_at(LOOM_HERE, k, t, offs, v)
loom_val loom_atomic_add_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs, loom_val v);

/* ---------------------------------------------------------------- 9. automatic warp specialization */

/* Automatic warp specialization: the plain tile loop, Triton's way (docs/dsl.md, "Two
 * levels").  A kernel written without tasks -- a loop whose body loads f16/bf16 tiles of
 * its tensor arguments and feeds them to loom_dot, an epilogue after it -- compiles, with
 * this set, to the structure the explicit templates have: a producer warp group TMA-loads
 * the loop's tiles into a ring of `stages` slots, `consumers` warp groups (1 or 2; each
 * owns its share of the accumulator's rows) run the dots as wgmma out of the ring, and
 * the epilogue stays in their registers.  pingpong=1 (consumers=2) makes the two groups
 * replicas that take every other program of a CTA whole (64-row tiles; the loop's bounds
 * the same in every program), so one's epilogue or softmax runs beside the other's
 * wgmmas.  The kernel is persistent: one CTA an SM takes the programs of the grid you
 * launch in turn (the launch passes the grid; you launch as before).  The kernel's warps become
 * 4 * (1 + consumers).  The interpreter runs the kernel as written (loom_dot's f32 fma
 * order); the GPU's wgmma sums the products of a k step in another order, within the
 * dot's error model.  A kernel the passes cannot specialize is refused at compile with
 * the line and the reason; LOOM_DUMP_AFTER shows each pass (docs/env.md). */
#define loom_kernel_set_autows(k, consumers, stages, pingpong) \
    loom_kernel_set_autows_at(LOOM_HERE, k, consumers, stages, pingpong)
void loom_kernel_set_autows_at(loom_src at, loom_kernel *k, int consumers, int stages, int pingpong);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* INCLUDE_LOOM_HOPPER_H */
