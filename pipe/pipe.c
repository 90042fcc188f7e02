/*
 * pipe.c -- the pipeline layer (include/loom_pipe.h): the Hopper producer/consumer
 * protocol written once, with builder calls only.
 *
 * Everything here expands into ops a template could have built by hand, at the
 * template's source line (each function passes its caller's `at` to the builder's `_at`
 * forms), so the verifier, the interpreter's deadlock and race reports and the lowering
 * treat a kernel built with the layer exactly as one built without it.  What the layer
 * owns is the protocol's arithmetic, so no template repeats it:
 *
 *   - ring phases.  Use `it` of an N-slot ring is slot it % N; its consumers wait on
 *     full[slot] for parity (it / N) & 1 (the phase the producer's expect and the TMA
 *     bytes complete), and its producer waits on empty[slot] for the opposite parity:
 *     use it's slot was last released in the phase of use it - N, and a fresh barrier
 *     counts as having completed the phase before phase 0, so the first N waits pass.
 *   - barrier counts.  empty counts one arrival per releasing replica per CTA of the
 *     cluster (a release in a cluster arrives on every CTA's barrier, since every CTA's
 *     multicast filled the slot); full counts the one expect of the producer.
 *   - named-barrier ids, handed out by the loom_pipe in order, so two helpers never
 *     meet at one id by accident.
 *   - register budgets from the kernel's warps.
 */
#include "loom_pipe.h"

#include <stdbool.h>
#include <string.h>

#define CI(v) loom_const_i_at(at, k, LOOM_I32, (v))

loom_pipe loom_pipe_create(loom_kernel *k) { return (loom_pipe){k, 0}; }

/* ---------------------------------------------------------------- roles */

int loom_pipe_consumer_regs(const loom_kernel *k)
{
    int cons_threads = (loom_kernel_num_warps(k) - LOOM_PIPE_PRODUCER_WARPS) * 32;
    if (cons_threads <= 0)
        return LOOM_PIPE_CONSUMER_REGS_MAX;
    int r = (65536 - LOOM_PIPE_PRODUCER_WARPS * 32 * LOOM_PIPE_PRODUCER_REGS) / cons_threads / 8 * 8;
    return r > LOOM_PIPE_CONSUMER_REGS_MAX ? LOOM_PIPE_CONSUMER_REGS_MAX : r;
}

loom_region_op loom_producer_begin_at(loom_src at, loom_kernel *k)
{
    return loom_task_begin_at(at, k, LOOM_PIPE_PRODUCER_WARPS, LOOM_PIPE_PRODUCER_REGS, 1);
}

loom_region_op loom_consumers_begin_at(loom_src at, loom_kernel *k, int warps, int replicas)
{
    return loom_task_begin_at(at, k, warps, loom_pipe_consumer_regs(k), replicas);
}

/* ---------------------------------------------------------------- named barriers */

loom_sync loom_sync_create_at(loom_src at, loom_pipe *p, int threads, int per_replica)
{
    int n = per_replica > 1 ? per_replica : 1;
    loom_sync s = {p->next_barrier, threads, n};
    if (p->next_barrier + n > LOOM_PIPE_BARRIERS) {
        /* the builder reports an id out of range at the caller's line when it is used */
        s.id = LOOM_PIPE_BARRIERS;
        (void)at;
    }
    p->next_barrier += n;
    return s;
}

void loom_sync_wait_at(loom_src at, loom_kernel *k, loom_sync s, loom_val rep)
{
    if (s.per_replica <= 1 || !rep) {
        loom_named_barrier_at(at, k, s.id, s.threads);
        return;
    }
    /* replica r meets at id + r: an if chain over the replicas */
    loom_region_op br[LOOM_PIPE_BARRIERS];
    int n = s.per_replica > LOOM_PIPE_BARRIERS ? LOOM_PIPE_BARRIERS : s.per_replica;
    for (int r = 0; r < n - 1; r++) {
        br[r] = loom_if_begin_at(at, k, loom_cmp_at(at, k, LOOM_EQ, rep, CI(r)), 0);
        loom_named_barrier_at(at, k, s.id + r, s.threads);
        loom_else_at(at, k, br[r], 0, NULL);
    }
    loom_named_barrier_at(at, k, s.id + n - 1, s.threads);
    for (int r = n - 2; r >= 0; r--)
        loom_if_end_at(at, k, br[r], 0, NULL);
}

/* ---------------------------------------------------------------- rings */

static int64_t tile_bytes(const loom_ring_tile *t)
{
    int64_t n = (int64_t)loom_dtype_size(t->dtype);
    for (int d = 0; d < t->shape.rank; d++)
        n *= t->shape.dim[d];
    return n;
}

loom_ring loom_ring_create_at(loom_src at, loom_pipe *p, int slots, int releasers, int ntiles,
                              const loom_ring_tile *tiles)
{
    loom_kernel *k = p->k;
    loom_ring r;
    memset(&r, 0, sizeof r);
    r.slots = slots;
    r.cluster = loom_kernel_cluster(k);
    r.ntiles = ntiles < 0 ? 0 : ntiles > LOOM_RING_MAX_TILES ? LOOM_RING_MAX_TILES : ntiles;
    for (int i = 0; i < r.ntiles; i++) {
        r.tile[i] = tiles[i];
        if (r.tile[i].parts < 1)
            r.tile[i].parts = 1;
        r.buf[i] = loom_smem_alloc_at(at, k, tiles[i].dtype, tiles[i].shape, slots * r.tile[i].parts, tiles[i].swizzle);
        r.bytes += tile_bytes(&r.tile[i]) * r.tile[i].parts;
    }
    r.full = loom_mbar_alloc_at(at, k, slots, 1);
    r.empty = loom_mbar_alloc_at(at, k, slots, releasers * r.cluster);
    return r;
}

loom_val loom_ring_produce_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val it, int64_t bytes)
{
    loom_val s = loom_ring_slot_at(at, k, it, r->slots);
    loom_mbar_wait_at(at, k, r->empty, s, loom_sub_at(at, k, CI(1), loom_ring_phase_at(at, k, it, r->slots)));
    loom_mbar_expect_at(at, k, r->full, s, bytes < 0 ? r->bytes : bytes);
    return s;
}

/* Slot `slot`'s buffer of part `part` of tile `tile`: buffer slot * parts + part. */
loom_val loom_ring_view_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val slot, int tile, loom_val part)
{
    int parts = r->tile[tile].parts;
    if (parts == 1)
        return loom_smem_slot_at(at, k, r->buf[tile], slot);
    loom_val i = loom_mul_at(at, k, slot, CI(parts));
    return loom_smem_slot_at(at, k, r->buf[tile], part ? loom_add_at(at, k, i, part) : i);
}

void loom_ring_load_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val slot, int tile, int part, loom_val t,
                       const loom_val *offs)
{
    loom_val v = loom_ring_view_at(at, k, r, slot, tile, r->tile[tile].parts > 1 ? CI(part) : LOOM_NONE);
    loom_tma_load_at(at, k, t, offs, v, r->full, slot);
}

void loom_ring_load_multicast_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val slot, int tile, int dim,
                                 loom_val t, const loom_val *offs)
{
    if (r->cluster <= 1) {
        loom_ring_load_at(at, k, r, slot, tile, 0, t, offs);
        return;
    }
    const loom_ring_tile *tt = &r->tile[tile];
    int trank = loom_val_shape(k, t).rank; /* the tensor's rank: how many offsets */
    if (trank < tt->shape.rank)
        trank = tt->shape.rank; /* not a tensor: the builder reports it */
    int64_t n = tt->shape.dim[dim] / r->cluster;
    int tdim = trank - tt->shape.rank + dim; /* the view's dims are right-aligned to the tensor's */
    loom_val rank = loom_cluster_rank_at(at, k);
    for (int q = 0; q < r->cluster; q++) {
        loom_region_op mine = loom_if_begin_at(at, k, loom_cmp_at(at, k, LOOM_EQ, rank, CI(q)), 0);
        loom_val o[LOOM_MAX_RANK];
        for (int d = 0; d < trank && d < LOOM_MAX_RANK; d++)
            o[d] = d == tdim ? loom_add_at(at, k, offs[d], CI(q * n)) : offs[d];
        loom_val part = loom_smem_part_at(at, k, loom_ring_view_at(at, k, r, slot, tile, LOOM_NONE), dim, q * n, n);
        loom_tma_load_multicast_at(at, k, t, o, part, r->full, slot);
        loom_if_end_at(at, k, mine, 0, NULL);
    }
}

loom_val loom_ring_consume_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val it)
{
    loom_val s = loom_ring_slot_at(at, k, it, r->slots);
    loom_mbar_wait_at(at, k, r->full, s, loom_ring_phase_at(at, k, it, r->slots));
    return s;
}

void loom_ring_release_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val slot)
{
    if (r->cluster > 1)
        loom_mbar_arrive_cluster_at(at, k, r->empty, slot);
    else
        loom_mbar_arrive_at(at, k, r->empty, slot);
}

void loom_ring_pass_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val it)
{
    loom_ring_release_at(at, k, r, loom_ring_consume_at(at, k, r, it));
}

/* ---------------------------------------------------------------- tile schedulers */

loom_sched loom_sched_static(loom_pipe *p, int64_t units, int persistent)
{
    loom_sched s;
    memset(&s, 0, sizeof s);
    s.units = units;
    s.cluster = loom_kernel_cluster(p->k);
    s.persistent = persistent != 0;
    return s;
}

void loom_sched_set_count(loom_sched *s, loom_val count) { s->count = count; }

/* The units of a launch: the runtime count where one was set, else all of them. */
static loom_val units_of(loom_kernel *k, const loom_sched *s)
{
    return s->count ? s->count : loom_const_i(k, LOOM_I32, s->units);
}

loom_sched loom_sched_dynamic_at(loom_src at, loom_pipe *p, int64_t units, loom_val counter, int slots,
                                 int readers)
{
    loom_kernel *k = p->k;
    loom_sched s = loom_sched_static(p, units, 1);
    s.dynamic = 1;
    s.counter = counter;
    s.slots = slots;
    s.slot_ring = loom_smem_alloc_at(at, k, LOOM_I32, LOOM_SHAPE1(1), slots, LOOM_SWIZZLE_NONE);
    s.full = loom_mbar_alloc_at(at, k, slots, 1);
    /* a cluster's producers read the units too (rank 0's delivers them to every CTA) */
    s.empty = loom_mbar_alloc_at(at, k, slots, (readers + (s.cluster > 1)) * s.cluster);
    return s;
}

void loom_sched_range_at(loom_src at, loom_kernel *k, const loom_sched *s, loom_val *first, loom_val *step)
{
    *first = loom_program_id_at(at, k, 0);
    *step = s->persistent ? loom_num_programs_at(at, k, 0) : CI(s->units);

    if (s->cluster > 1) { /* a cluster's CTAs take the same units */
        *first = loom_div_at(at, k, *first, CI(s->cluster));
        if (s->persistent)
            *step = loom_div_at(at, k, *step, CI(s->cluster));
    }
}

/* A static schedule's loop over this program's units: a for whose induction variable is
 * the unit (replica: every other unit, from the replica's first). */
static loom_region_op sched_for(loom_src at, loom_kernel *k, const loom_sched *s, loom_val replica, int n,
                                const loom_val *init)
{
    loom_val first, step;
    loom_sched_range_at(at, k, s, &first, &step);
    if (replica) {
        first = loom_add_at(at, k, first, loom_mul_at(at, k, replica, step));
        step = loom_mul_at(at, k, step, CI(2));
    }
    return loom_for_begin_at(at, k, first, units_of(k, s), step, n, init);
}

/* Claims of a dynamic schedule in a block of the claim loop. */
enum { CLAIM_BLOCK = 16 };

/* Adds v to counter[i]; returns the old value. */
static loom_val count(loom_src at, loom_kernel *k, const loom_sched *s, int i, loom_val v)
{
    return loom_atomic_add_at(at, k, s->counter, (loom_val[]){CI(i)}, v);
}

/* In a cluster only rank 0 claims: an i1 for "this CTA claims". */
static loom_val claimer(loom_src at, loom_kernel *k)
{
    return loom_cmp_at(at, k, LOOM_EQ, loom_cluster_rank_at(at, k), CI(0));
}

/* The next unit from the counter (in a cluster rank 0's; the others get 0, unused). */
static loom_val claim(loom_src at, loom_kernel *k, const loom_sched *s)
{
    if (s->cluster <= 1)
        return count(at, k, s, 0, CI(1));
    loom_region_op r0 = loom_if_begin_at(at, k, claimer(at, k), 1);
    loom_val v = count(at, k, s, 0, CI(1));
    loom_else_at(at, k, r0, 1, &v);
    loom_val z = CI(0);
    loom_if_end_at(at, k, r0, 1, &z);
    return loom_if_result(k, r0, 0);
}

/* After a producer's last claim: count the program finished; the last of them puts both
 * counters back to zero (every claim of the launch is made by then: units + P). */
static void finish_claims(loom_src at, loom_kernel *k, const loom_sched *s)
{
    loom_region_op r0 = s->cluster > 1 ? loom_if_begin_at(at, k, claimer(at, k), 0) : LOOM_NO_REGION;
    loom_val progs = loom_num_programs_at(at, k, 0);
    if (s->cluster > 1)
        progs = loom_div_at(at, k, progs, CI(s->cluster));
    loom_val f = count(at, k, s, 1, CI(1));
    loom_region_op last = loom_if_begin_at(at, k, loom_cmp_at(at, k, LOOM_EQ, f, loom_sub_at(at, k, progs, CI(1))), 0);
    count(at, k, s, 0, loom_neg_at(at, k, loom_add_at(at, k, progs, units_of(k, s))));
    count(at, k, s, 1, loom_neg_at(at, k, progs));
    loom_if_end_at(at, k, last, 0, NULL);
    if (!loom_region_is_none(r0))
        loom_if_end_at(at, k, r0, 0, NULL);
}

/* Hand-over use j: the producer writes unit `t` (a cluster's rank 0 into every CTA)
 * and, in a cluster, every producer reads it back; a consumer reads it.  Returns the
 * unit. */
static loom_val hand_over(loom_src at, loom_kernel *k, const loom_sched *s, int role, loom_val j, loom_val t)
{
    loom_val sl = loom_ring_slot_at(at, k, j, s->slots), ph = loom_ring_phase_at(at, k, j, s->slots);
    loom_val view = loom_smem_slot_at(at, k, s->slot_ring, sl);
    if (role == LOOM_SCHED_PRODUCER) {
        loom_mbar_wait_at(at, k, s->empty, sl, loom_sub_at(at, k, CI(1), ph));
        if (s->cluster <= 1) { /* the store, then the arrival that releases it */
            loom_smem_store_at(at, k, view, loom_splat_at(at, k, t, LOOM_SHAPE1(1)));
            loom_mbar_arrive_at(at, k, s->full, sl);
            return t;
        }
        loom_mbar_expect_at(at, k, s->full, sl, 4);
        loom_region_op r0 = loom_if_begin_at(at, k, loom_cmp_at(at, k, LOOM_EQ, loom_cluster_rank_at(at, k), CI(0)), 0);
        loom_smem_store_cluster_at(at, k, view, t, s->full, sl);
        loom_if_end_at(at, k, r0, 0, NULL);
    }
    loom_mbar_wait_at(at, k, s->full, sl, ph);
    loom_val u = loom_reduce_max_at(at, k, loom_smem_load_at(at, k, view), 0);
    if (s->cluster > 1)
        loom_mbar_arrive_cluster_at(at, k, s->empty, sl);
    else
        loom_mbar_arrive_at(at, k, s->empty, sl);
    return u;
}

loom_sched_loop loom_sched_begin_at(loom_src at, loom_kernel *k, const loom_sched *s, int role, loom_val replica,
                                    int n, const loom_val *init)
{
    loom_sched_loop l;
    memset(&l, 0, sizeof l);
    l.s = s;
    l.role = role;
    l.n = n < 0 ? 0 : n > LOOM_SCHED_MAX_CARRIED ? LOOM_SCHED_MAX_CARRIED : n;
    if (!s->dynamic) {
        l.loop = sched_for(at, k, s, replica, l.n, init);
        l.unit = loom_for_iv(k, l.loop);
        for (int i = 0; i < l.n; i++)
            l.args[i] = loom_for_arg(k, l.loop, i);
        return l;
    }
    /* carried: the caller's n, then ended? (i32), the claim ahead, the hand-over use */
    int m = l.n + 3;
    loom_val c[LOOM_SCHED_MAX_CARRIED + 3], zero = CI(0);
    for (int i = 0; i < l.n; i++)
        c[i] = init[i];
    c[l.n] = zero;
    c[l.n + 1] = role == LOOM_SCHED_PRODUCER ? claim(at, k, s) : zero;
    c[l.n + 2] = zero;
    /* units + 1 claims at most: blocks of them up to a launch's count where it is run-time */
    loom_val blocks = s->count ? loom_div_at(at, k, loom_add_at(at, k, s->count, CI(CLAIM_BLOCK)), CI(CLAIM_BLOCK))
                               : CI((s->units + CLAIM_BLOCK) / CLAIM_BLOCK);
    l.outer = loom_for_begin_at(at, k, zero, blocks, CI(1), m, c);
    for (int i = 0; i < m; i++)
        c[i] = loom_for_arg(k, l.outer, i);
    l.ifo = loom_if_begin_at(at, k, loom_cmp_at(at, k, LOOM_EQ, c[l.n], zero), m);
    l.inner = loom_for_begin_at(at, k, zero, CI(CLAIM_BLOCK), CI(1), m, c);
    for (int i = 0; i < m; i++)
        c[i] = loom_for_arg(k, l.inner, i);
    l.ifi = loom_if_begin_at(at, k, loom_cmp_at(at, k, LOOM_EQ, c[l.n], zero), m);
    l.next = c[l.n + 1];
    l.use = c[l.n + 2];
    l.unit = hand_over(at, k, s, role, l.use, l.next);
    l.done = loom_select_at(at, k, loom_cmp_at(at, k, LOOM_GE, l.unit, units_of(k, s)), CI(1), zero);
    l.ift = loom_if_begin_at(at, k, loom_cmp_at(at, k, LOOM_LT, l.unit, units_of(k, s)), l.n + 1);
    l.claim = role == LOOM_SCHED_PRODUCER ? claim(at, k, s) : l.next; /* the next, before this one's work */
    for (int i = 0; i < l.n; i++)
        l.args[i] = c[i];
    return l;
}

void loom_sched_peek_at(loom_src at, loom_kernel *k, const loom_sched_loop *l, loom_val *next, loom_val *has)
{
    if (l->s->dynamic) {
        *next = l->unit;
        *has = loom_const_i(k, LOOM_I1, 0);
        return;
    }
    loom_val first, step;
    loom_sched_range_at(at, k, l->s, &first, &step);
    *next = loom_add_at(at, k, l->unit, step);
    *has = loom_cmp_at(at, k, LOOM_LT, *next, units_of(k, l->s));
}

void loom_sched_end_at(loom_src at, loom_kernel *k, loom_sched_loop *l, const loom_val *yields)
{
    if (!l->s->dynamic) {
        loom_for_end_at(at, k, l->loop, l->n, yields);
        return;
    }
    int n = l->n, m = n + 3;
    loom_val y[LOOM_SCHED_MAX_CARRIED + 3];
    /* the unit's branch: the caller's yields and the claim made ahead; past the units,
     * what came in */
    for (int i = 0; i < n; i++)
        y[i] = yields[i];
    y[n] = l->claim;
    loom_else_at(at, k, l->ift, n + 1, y);
    for (int i = 0; i < n; i++)
        y[i] = l->args[i];
    y[n] = l->next;
    loom_if_end_at(at, k, l->ift, n + 1, y);
    /* the claim's branch: then the next hand-over use */
    for (int i = 0; i < n; i++)
        y[i] = loom_if_result(k, l->ift, i);
    y[n] = l->done;
    y[n + 1] = loom_if_result(k, l->ift, n);
    y[n + 2] = loom_add_at(at, k, l->use, CI(1));
    loom_else_at(at, k, l->ifi, m, y);
    for (int i = 0; i < m; i++)
        y[i] = loom_for_arg(k, l->inner, i);
    loom_if_end_at(at, k, l->ifi, m, y);
    for (int i = 0; i < m; i++)
        y[i] = loom_if_result(k, l->ifi, i);
    loom_for_end_at(at, k, l->inner, m, y);
    for (int i = 0; i < m; i++)
        y[i] = loom_for_result(k, l->inner, i);
    loom_else_at(at, k, l->ifo, m, y);
    for (int i = 0; i < m; i++)
        y[i] = loom_for_arg(k, l->outer, i);
    loom_if_end_at(at, k, l->ifo, m, y);
    for (int i = 0; i < m; i++)
        y[i] = loom_if_result(k, l->ifo, i);
    loom_for_end_at(at, k, l->outer, m, y);
    if (l->role == LOOM_SCHED_PRODUCER)
        finish_claims(at, k, l->s);
}

loom_val loom_sched_result(loom_kernel *k, const loom_sched_loop *l, int i)
{
    return l->s->dynamic ? loom_for_result(k, l->outer, i) : loom_for_result(k, l->loop, i);
}

loom_val loom_sched_odd_at(loom_src at, loom_kernel *k, const loom_sched *s)
{
    loom_val first, step;
    loom_sched_range_at(at, k, s, &first, &step);
    /* the program's units: (units - first + step - 1) / step when first < units */
    loom_val left = loom_max_at(at, k, loom_sub_at(at, k, units_of(k, s), first), CI(0));
    loom_val n = loom_div_at(at, k, loom_sub_at(at, k, loom_add_at(at, k, left, step), CI(1)), step);
    return loom_cmp_at(at, k, LOOM_EQ, loom_rem_at(at, k, n, CI(2)), CI(1));
}

void loom_sched_grouped_at(loom_src at, loom_kernel *k, loom_val t, int64_t tm, int64_t tn, int group, loom_val *b,
                           loom_val *tr, loom_val *tc)
{
    *b = loom_div_at(at, k, t, CI(tm * tn));
    loom_val r = loom_rem_at(at, k, t, CI(tm * tn));
    loom_val per_group = CI((int64_t)group * tn);
    loom_val first = loom_mul_at(at, k, loom_div_at(at, k, r, per_group), CI(group));
    loom_val gsize = loom_min_at(at, k, loom_sub_at(at, k, CI(tm), first), CI(group));
    loom_val in = loom_rem_at(at, k, r, per_group);
    *tr = loom_add_at(at, k, first, loom_rem_at(at, k, in, gsize));
    *tc = loom_div_at(at, k, in, gsize);
}

/* ---------------------------------------------------------------- turns */

/* Two warp groups meet at each barrier: the one whose turn it is waits (bar.sync), the
 * other signals (bar.arrive), 128 threads each. */
enum { TURN_THREADS = 256 };

loom_turns loom_turns_create_at(loom_src at, loom_pipe *p)
{
    loom_sync s = loom_sync_create_at(at, p, TURN_THREADS, 2);
    return (loom_turns){s.id, LOOM_NONE};
}

/* On replica 0: barrier id + a0; on replica 1: id + a1; wait or signal. */
static void turn_barrier(loom_src at, loom_kernel *k, const loom_turns *t, int a0, int a1, bool wait)
{
    loom_region_op r = loom_if_begin_at(at, k, loom_cmp_at(at, k, LOOM_EQ, t->rep, CI(0)), 0);
    if (wait)
        loom_named_barrier_at(at, k, t->id + a0, TURN_THREADS);
    else
        loom_named_barrier_arrive_at(at, k, t->id + a0, TURN_THREADS);
    loom_else_at(at, k, r, 0, NULL);
    if (wait)
        loom_named_barrier_at(at, k, t->id + a1, TURN_THREADS);
    else
        loom_named_barrier_arrive_at(at, k, t->id + a1, TURN_THREADS);
    loom_if_end_at(at, k, r, 0, NULL);
}

loom_val loom_turns_start_at(loom_src at, loom_kernel *k, loom_turns *t)
{
    t->rep = loom_task_replica_at(at, k);
    loom_region_op r = loom_if_begin_at(at, k, loom_cmp_at(at, k, LOOM_EQ, t->rep, CI(1)), 0);
    loom_named_barrier_arrive_at(at, k, t->id, TURN_THREADS); /* replica 0 goes first */
    loom_if_end_at(at, k, r, 0, NULL);
    return t->rep;
}

void loom_turns_begin_at(loom_src at, loom_kernel *k, const loom_turns *t) { turn_barrier(at, k, t, 0, 1, true); }

void loom_turns_end_at(loom_src at, loom_kernel *k, const loom_turns *t) { turn_barrier(at, k, t, 1, 0, false); }

/* Replica 1 takes a turn with nothing to issue: it waits for its turn and hands it back
 * (the ping-pong's finish when replica 0 has one tile more). */
static void turn_pass_second(loom_src at, loom_kernel *k, const loom_turns *t)
{
    loom_named_barrier_at(at, k, t->id + 1, TURN_THREADS);
    loom_named_barrier_arrive_at(at, k, t->id, TURN_THREADS);
}

void loom_turns_finish_at(loom_src at, loom_kernel *k, const loom_turns *t)
{
    loom_region_op r = loom_if_begin_at(at, k, loom_cmp_at(at, k, LOOM_EQ, t->rep, CI(0)), 0);
    loom_named_barrier_at(at, k, t->id, TURN_THREADS);
    loom_if_end_at(at, k, r, 0, NULL);
}

/* ---------------------------------------------------------------- ping-pong */

/* The ping-pong is two loom_turns: `mma`, whose turn is the tensor cores (a tile's
 * mainloop), and `epi`, whose turn is the epilogue.  The epilogues take turns too because
 * the replicas share what an epilogue uses: its named barrier (one id, one replica's
 * threads) and, with one staging slot (LOOM_EPI_TURNS), the staging tile.  x[r] below is
 * the barrier replica r waits on for its turn of x (turns id + r).  On each of the four
 * barriers one replica only waits (bar.sync) and the other only arrives (bar.arrive),
 * 128 threads each: a generation is one arrive and one wait, and the two replicas never
 * both bar.sync one barrier from two places of the code.
 *
 *   start       replica 1 arrives on mma[0] and epi[0] (replica 0 goes first)
 *   mma_begin   wait on mma[rep]
 *   mma_end     arrive on mma[1 - rep]; wait on epi[rep]
 *   tile_end    arrive on epi[1 - rep]
 *   finish      odd: replica 1 takes an empty turn of each (wait on mma[1], arrive on
 *               mma[0], wait on epi[1], arrive on epi[0]); then replica 0 waits on mma[0]
 *               and on epi[0] (loom_turns_finish)
 *
 * So replica 1's j-th mainloop starts after replica 0's j-th has ended (mma[1]), replica
 * 0's (j+1)-th after replica 1's j-th (mma[0]), and the epilogues alternate in the same
 * order (epi), each beside the other replica's next mainloop.
 *
 * Every arrive is matched by a wait, so no barrier is left part-way when the kernel
 * exits.  With n0 tiles for replica 0 and n1 for replica 1 (odd = n0 - n1, 0 or 1):
 *
 *   barrier   arrivals (by the other replica)       waits
 *   mma[0]    1 (start) + n1 (mma_end) + odd        n0 (mma_begin) + 1 (finish)
 *   mma[1]    n0 (mma_end)                          n1 (mma_begin) + odd
 *   epi[0]    1 (start) + n1 (tile_end) + odd       n0 (mma_end) + 1 (finish)
 *   epi[1]    n0 (tile_end)                         n1 (mma_end) + odd
 *
 * Even (n0 = n1, odd = 0): 1 + n1 = n0 + 1 and n0 = n1.  Odd (n0 = n1 + 1): 1 + n1 + 1 =
 * n0 + 1 and n0 = n1 + 1.  A program with no tile: one arrive and one wait on mma[0] and
 * on epi[0].  Nor does a replica arrive twice on a barrier in one generation: replica 1's
 * next arrive on mma[0] comes after its wait on mma[1], which needs replica 0's arrive,
 * made after replica 0's wait completed mma[0]'s generation; so for the others. */

loom_pingpong loom_pingpong_create_at(loom_src at, loom_pipe *p)
{
    loom_pingpong pp = {{0, LOOM_NONE}, {0, LOOM_NONE}, LOOM_NONE, LOOM_NONE};
    pp.mma = loom_turns_create_at(at, p);
    pp.epi = loom_turns_create_at(at, p);
    return pp;
}

loom_val loom_pingpong_start_at(loom_src at, loom_kernel *k, loom_pingpong *pp)
{
    pp->rep = loom_turns_start_at(at, k, &pp->mma);
    loom_turns_start_at(at, k, &pp->epi);
    pp->second = loom_cmp_at(at, k, LOOM_EQ, pp->rep, CI(1));
    return pp->rep;
}

/* Wait for this replica's turn on the tensor cores. */
void loom_pingpong_mma_begin_at(loom_src at, loom_kernel *k, const loom_pingpong *pp)
{
    loom_turns_begin_at(at, k, &pp->mma);
}

/* The tensor cores to the other replica; wait for this replica's epilogue turn (the
 * other's previous epilogue is done). */
void loom_pingpong_mma_end_at(loom_src at, loom_kernel *k, const loom_pingpong *pp)
{
    loom_turns_end_at(at, k, &pp->mma);
    loom_turns_begin_at(at, k, &pp->epi);
}

/* The epilogue turn to the other replica. */
void loom_pingpong_tile_end_at(loom_src at, loom_kernel *k, const loom_pingpong *pp)
{
    loom_turns_end_at(at, k, &pp->epi);
}

void loom_pingpong_finish_at(loom_src at, loom_kernel *k, const loom_pingpong *pp, loom_val odd)
{
    loom_region_op ex = loom_if_begin_at(at, k, loom_and_at(at, k, pp->second, odd), 0);
    turn_pass_second(at, k, &pp->mma);
    turn_pass_second(at, k, &pp->epi);
    loom_if_end_at(at, k, ex, 0, NULL);
    loom_turns_finish_at(at, k, &pp->mma);
    loom_turns_finish_at(at, k, &pp->epi);
}

/* ---------------------------------------------------------------- epilogues */

loom_epilogue loom_epilogue_create_at(loom_src at, loom_pipe *p, loom_epilogue_kind kind, loom_val out,
                                      loom_dtype dtype, loom_shape shape, int slots, int threads)
{
    loom_epilogue e;
    memset(&e, 0, sizeof e);
    e.kind = kind;
    e.out = out;
    if (kind == LOOM_EPI_REGISTERS)
        return e;
    bool parts = kind == LOOM_EPI_PARTS;
    e.part = shape;
    e.stage = loom_smem_alloc_at(at, p->k, dtype, shape, parts ? 2 * slots : slots, LOOM_SWIZZLE_128);
    if (kind == LOOM_EPI_HANDOVER)
        e.hand = loom_mbar_alloc_at(at, p->k, 2, 1);
    e.sync = loom_sync_create_at(at, p, threads, parts ? slots : 1); /* PARTS: a barrier a replica */
    return e;
}

void loom_epilogue_turn_wait_at(loom_src at, loom_kernel *k, const loom_epilogue *e, loom_val rep, loom_val j)
{
    /* replica rep's j-th turn: the other's "done" of parity (j + 1 - rep) % 2 (replica
     * 0's first wait passes on the fresh barrier) */
    loom_val other = loom_sub_at(at, k, CI(1), rep);
    loom_mbar_wait_at(at, k, e->hand, other, loom_rem_at(at, k, loom_add_at(at, k, j, other), CI(2)));
}

void loom_epilogue_turn_done_at(loom_src at, loom_kernel *k, const loom_epilogue *e, loom_val rep)
{
    loom_mbar_arrive_at(at, k, e->hand, rep);
}

/* LOOM_EPI_PARTS: tile v part by part (parts of the staging tile's rows, or of its
 * columns where it has all of v's rows), part c through replica rep's slot 2 rep + c % 2,
 * once the store two parts back has read it (the first part: once every earlier store
 * has; they went out a mainloop before). */
static void store_in_parts(loom_src at, loom_kernel *k, const loom_epilogue *e, const loom_val *offs, loom_val v,
                           loom_val rep)
{
    int rank = loom_val_shape(k, e->out).rank;
    loom_shape ts = loom_val_shape(k, v);
    int dim = e->part.dim[0] < ts.dim[0] ? 0 : 1;
    int64_t size = e->part.dim[dim];
    /* not a whole number of parts: the last part's slice is refused at the caller's line */
    int64_t n = size > 0 ? (ts.dim[dim] + size - 1) / size : 0;
    loom_val base = rep ? loom_mul_at(at, k, rep, CI(2)) : CI(0);
    loom_val o[LOOM_MAX_RANK];
    for (int d = 0; d < rank; d++)
        o[d] = offs[d];
    for (int64_t c = 0; c < n; c++) {
        loom_val view = loom_smem_slot_at(at, k, e->stage, loom_add_at(at, k, base, CI(c % 2)));
        /* the slot's last store has read it: its issuer waits, the replica's threads meet */
        loom_tma_store_wait_at(at, k, c ? 1 : 0);
        loom_sync_wait_at(at, k, e->sync, rep);
        loom_smem_store_at(at, k, view, n > 1 ? loom_slice_at(at, k, v, dim, c * size, size) : v);
        loom_fence_async_at(at, k);
        loom_sync_wait_at(at, k, e->sync, rep);
        o[rank - 2 + dim] = loom_add_at(at, k, offs[rank - 2 + dim], CI(c * size));
        loom_tma_store_at(at, k, e->out, o, view);
    }
}

void loom_epilogue_store_at(loom_src at, loom_kernel *k, const loom_epilogue *e, const loom_val *offs, loom_val v,
                            loom_val slot, loom_val rep, loom_val j)
{
    if (e->kind == LOOM_EPI_REGISTERS) {
        loom_store_at(at, k, e->out, offs, v, LOOM_NONE);
        return;
    }
    if (e->kind == LOOM_EPI_PARTS) {
        store_in_parts(at, k, e, offs, v, rep);
        return;
    }
    bool handover = e->kind == LOOM_EPI_HANDOVER && rep;
    if (handover)
        loom_epilogue_turn_wait_at(at, k, e, rep, j);
    loom_val view = loom_smem_slot_at(at, k, e->stage, slot ? slot : CI(0));
    loom_shape vs = loom_val_shape(k, v), ts = loom_val_shape(k, view);
    if (vs.rank == 2 && ts.rank == 2 && vs.dim[1] < ts.dim[1]) /* a narrower tile: the staging tile's first columns */
        view = loom_smem_part_at(at, k, view, 1, 0, vs.dim[1]);
    if (e->kind == LOOM_EPI_STAGED) {
        /* the previous tile's store has read the tile: the thread that issued it waits
         * (cp.async.bulk.wait_group.read), then the threads that write the tile meet */
        loom_tma_store_wait_at(at, k, 0);
        loom_sync_wait_at(at, k, e->sync, LOOM_NONE);
    }
    loom_smem_store_at(at, k, view, v);
    loom_fence_async_at(at, k);
    loom_sync_wait_at(at, k, e->sync, LOOM_NONE);
    loom_tma_store_at(at, k, e->out, offs, view);
    if (e->kind != LOOM_EPI_STAGED)
        loom_tma_store_wait_at(at, k, 0); /* the tile is the next writer's once read */
    if (handover)
        loom_epilogue_turn_done_at(at, k, e, rep);
}

void loom_epilogue_store_parts_at(loom_src at, loom_kernel *k, const loom_epilogue *e, const loom_val *offs, int rank,
                                  int parts, loom_epilogue_part_fn part, void *ctx)
{
    loom_val o[LOOM_MAX_RANK];
    for (int i = 0; i < rank; i++)
        o[i] = offs[i];
    for (int j = 0; j < parts; j++) { /* each part made, then stored once the last one's store read the tile */
        loom_val v = part(ctx, k, j);
        if (j)
            o[rank - 1] = loom_add_at(at, k, offs[rank - 1], CI(j * loom_val_shape(k, v).dim[1]));
        loom_epilogue_store_at(at, k, e, o, v, LOOM_NONE, LOOM_NONE, LOOM_NONE);
    }
}

void loom_epilogue_store_borrowed_at(loom_src at, loom_kernel *k, loom_val out, const loom_val *offs, loom_val v,
                                     loom_val view, loom_sync sync, loom_val rep)
{
    loom_smem_store_at(at, k, view, v);
    loom_fence_async_at(at, k);
    loom_sync_wait_at(at, k, sync, rep);
    loom_tma_store_at(at, k, out, offs, view);
}

void loom_epilogue_return_slot_at(loom_src at, loom_kernel *k, const loom_ring *r, loom_val held, loom_val use)
{
    loom_region_op w = loom_if_begin_at(at, k, held, 0);
    loom_tma_store_wait_at(at, k, 0);
    loom_ring_release_at(at, k, r, loom_ring_slot_at(at, k, use, r->slots));
    loom_if_end_at(at, k, w, 0, NULL);
}

void loom_epilogue_finish_at(loom_src at, loom_kernel *k, const loom_epilogue *e)
{
    if (e->kind != LOOM_EPI_REGISTERS)
        loom_tma_store_wait_at(at, k, 0);
}
