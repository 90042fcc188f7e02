/*
 * test_atomic.c -- work claimed from a counter in global memory (loom_atomic_add), and
 * the claimed index handed from a producer task to consumer tasks through a one-word
 * shared-memory ring: the parts of a dynamic persistent tile scheduler.
 *
 * Two kernels.  `claim` is a plain kernel whose programs take items from a counter until
 * it runs past the end, counting each item's hits with another atomic add and recording
 * who took it: every item must be taken exactly once, and the interpreter, which runs the
 * programs side by side and lets each give way after every add, must spread the items
 * over several programs.  `claim_ring` is warp-specialized: a producer task claims and
 * stores each index (or -1 past the end) into slot i of a ring of [1] tiles, arriving
 * on full[i]; two consumer replicas wait on full[i], load the tile, turn it into a scalar
 * (loom_reduce_max of a [1] tile) and release the slot on empty[i], then write their half
 * of the item.  Both count up across launches: the counter is never cleared, and a launch
 * subtracts epoch * (items + programs), each program's producer making exactly one claim
 * past the end.  Rings of 2 and 3 slots see the phases wrap many times.  Producers of one
 * warp (the result passes by shuffle) and of four (through the replica's scratch word)
 * are both run.
 *
 * Then what goes wrong: a consumer replica that never releases its slot deadlocks,
 * reported with the producer's wait line; offsets outside the counter are out of bounds
 * with the op's line; the rules refuse a non-i32 or read-only tensor, a wrong number of
 * offsets and a non-i32 value.  The PTX assembles with ptxas and no spills, with one atom
 * per atomic_add, issued by one thread; the GPU tests (skipped without a GPU) run the
 * same kernels and checks.
 */
#include "ir.h"
#include "testutil.h"

#define I32(k, v) loom_const_i(k, LOOM_I32, v)

OP_COVERED(atomic_add)

enum { NI = 23 }; /* items */

/* ---------------------------------------------------------------- the kernels */

/* Each program claims items from counter[0] until one is past the end; item i adds 1 to
 * hits[i] and records the program in who[i].  A program takes at most NI items, so the
 * loop has NI turns, each running only while the current claim is an item. */
static loom_kernel *claim_kernel(int warps, int n)
{
    loom_kernel *k = loom_kernel_create("claim", warps);
    loom_val cnt = loom_arg_tensor(k, "counter", LOOM_I32, LOOM_SHAPE1(1), LOOM_INOUT);
    loom_val hits = loom_arg_tensor(k, "hits", LOOM_I32, LOOM_SHAPE1(n), LOOM_INOUT);
    loom_val who = loom_arg_tensor(k, "who", LOOM_I32, LOOM_SHAPE1(n), LOOM_OUT);
    loom_val epoch = loom_arg_scalar(k, "epoch", LOOM_I32);
    loom_val pid = loom_program_id(k, 0);
    loom_val base = loom_mul(k, epoch, loom_add(k, I32(k, n), loom_num_programs(k, 0)));
    loom_val zero = I32(k, 0), one = I32(k, 1);
    loom_val first = loom_sub(k, loom_atomic_add(k, cnt, &zero, one), base);
    loom_region_op loop = loom_for_begin(k, zero, I32(k, n), one, 1, &first);
    {
        loom_val item = loom_for_arg(k, loop, 0);
        loom_region_op br = loom_if_begin(k, loom_cmp(k, LOOM_LT, item, I32(k, n)), 1);
        {
            loom_atomic_add(k, hits, &item, one);
            loom_store(k, who, &item, loom_splat(k, pid, LOOM_SHAPE1(1)), LOOM_NONE);
            loom_val next = loom_sub(k, loom_atomic_add(k, cnt, &zero, one), base);
            loom_else(k, br, 1, &next);
        }
        loom_if_end(k, br, 1, &item);
        loom_val y = loom_if_result(k, br, 0);
        loom_for_end(k, loop, 1, &y);
    }
    return k;
}

typedef struct ring_lines {
    int producer_wait, consumer_wait;
} ring_lines;

/* The producer task (pwarps warps) claims items and hands each index (-1 past the end)
 * through an smem ring of `slots` [1] tiles; two consumer replicas of 4 warps each take
 * it, release the slot (unless `leak`: replica 1 never does) and write out[item, r] =
 * 10 * item + r, counting hits[item] once each.  The loops have NI + 1 turns: the most
 * claims one program's producer can make. */
static loom_kernel *ring_kernel(int slots, int pwarps, int n, bool leak, ring_lines *lines)
{
    loom_kernel *k = loom_kernel_create("claim_ring", pwarps + 8);
    loom_val cnt = loom_arg_tensor(k, "counter", LOOM_I32, LOOM_SHAPE1(1), LOOM_INOUT);
    loom_val hits = loom_arg_tensor(k, "hits", LOOM_I32, LOOM_SHAPE1(n), LOOM_INOUT);
    loom_val out = loom_arg_tensor(k, "out", LOOM_I32, LOOM_SHAPE2(n, 2), LOOM_OUT);
    loom_val epoch = loom_arg_scalar(k, "epoch", LOOM_I32);
    loom_val ring = loom_smem_alloc(k, LOOM_I32, LOOM_SHAPE1(1), slots, LOOM_SWIZZLE_NONE);
    loom_val fullb = loom_name(k, loom_mbar_alloc(k, slots, 1), "full");
    loom_val emptyb = loom_name(k, loom_mbar_alloc(k, slots, 2), "empty");
    loom_val base = loom_mul(k, epoch, loom_add(k, I32(k, n), loom_num_programs(k, 0)));
    loom_val zero = I32(k, 0), one = I32(k, 1), turns = I32(k, n + 1);

    loom_region_op prod = loom_task_begin(k, pwarps, 0, 1);
    {
        loom_region_op loop = loom_for_begin(k, zero, turns, one, 1, &one);
        loom_val it = loom_for_iv(k, loop), live = loom_for_arg(k, loop, 0);
        loom_region_op br = loom_if_begin(k, loom_cmp(k, LOOM_NE, live, zero), 1);
        {
            loom_val s = loom_ring_slot(k, it, slots), ph = loom_ring_phase(k, it, slots);
            lines->producer_wait = __LINE__ + 1;
            loom_mbar_wait(k, emptyb, s, loom_sub(k, one, ph));
            loom_val x = loom_sub(k, loom_atomic_add(k, cnt, &zero, one), base);
            loom_val ok = loom_cmp(k, LOOM_LT, x, I32(k, n));
            loom_val item = loom_select(k, ok, x, I32(k, -1));
            loom_smem_store(k, loom_smem_slot(k, ring, s), loom_splat(k, item, LOOM_SHAPE1(1)));
            loom_mbar_arrive(k, fullb, s);
            loom_val nl = loom_select(k, ok, one, zero);
            loom_else(k, br, 1, &nl);
        }
        loom_if_end(k, br, 1, &zero);
        loom_val y = loom_if_result(k, br, 0);
        loom_for_end(k, loop, 1, &y);
    }
    loom_task_end(k, prod);

    loom_region_op cons = loom_task_begin(k, 4, 0, 2);
    {
        loom_val r = loom_task_replica(k);
        loom_region_op loop = loom_for_begin(k, zero, turns, one, 1, &one);
        loom_val it = loom_for_iv(k, loop), live = loom_for_arg(k, loop, 0);
        loom_region_op br = loom_if_begin(k, loom_cmp(k, LOOM_NE, live, zero), 1);
        {
            loom_val s = loom_ring_slot(k, it, slots), ph = loom_ring_phase(k, it, slots);
            lines->consumer_wait = __LINE__ + 1;
            loom_mbar_wait(k, fullb, s, ph);
            loom_val item = loom_reduce_max(k, loom_smem_load(k, loom_smem_slot(k, ring, s)), 0);
            loom_region_op rel = loom_if_begin(k, leak ? loom_cmp(k, LOOM_EQ, r, zero) : loom_cmp(k, LOOM_GE, r, zero), 0);
            loom_mbar_arrive(k, emptyb, s);
            loom_if_end(k, rel, 0, NULL);
            loom_val ok = loom_cmp(k, LOOM_GE, item, zero);
            loom_region_op w = loom_if_begin(k, ok, 0);
            {
                loom_val v = loom_add(k, loom_mul(k, item, I32(k, 10)), r);
                loom_store(k, out, ((loom_val[]){item, r}), loom_splat(k, v, LOOM_SHAPE1(1)), LOOM_NONE);
                loom_atomic_add(k, hits, &item, one);
            }
            loom_if_end(k, w, 0, NULL);
            loom_val nl = loom_select(k, ok, one, zero);
            loom_else(k, br, 1, &nl);
        }
        loom_if_end(k, br, 1, &zero);
        loom_val y = loom_if_result(k, br, 0);
        loom_for_end(k, loop, 1, &y);
    }
    loom_task_end(k, cons);
    return k;
}

/* ---------------------------------------------------------------- the checks */

static void check_claims(const int32_t *hits, const int32_t *who, int32_t counter, int launches, int progs,
                         int per_item)
{
    cr_assert_eq(counter, launches * (NI + progs), "counter %d after %d launches of %d programs", counter, launches,
                 progs);
    for (int i = 0; i < NI; i++) {
        cr_assert_eq(hits[i], launches * per_item, "item %d was taken %d times in %d launches", i, hits[i], launches);
        if (who)
            cr_assert(who[i] >= 0 && who[i] < progs, "item %d taken by program %d", i, who[i]);
    }
}

static void check_out(const int32_t *out)
{
    for (int i = 0; i < NI; i++)
        for (int r = 0; r < 2; r++)
            cr_assert_eq(out[2 * i + r], 10 * i + r, "out[%d, %d] = %d", i, r, out[2 * i + r]);
}

/* ---------------------------------------------------------------- interpreter */

Test(atomic, programs_claim_each_item_once_and_interleave)
{
    for (int warps = 1; warps <= 4; warps += 3) {
        loom_kernel *k = claim_kernel(warps, NI);
        cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
        enum { P = 5 };
        int32_t counter[1] = {0}, hits[NI] = {0}, who[NI];
        int grid[3] = {P, 1, 1};
        for (int e = 0; e < 3; e++) {
            memset(who, 0xff, sizeof who);
            targ a[] = {TA_ARR(counter), TA_ARR(hits), TA_ARR(who), TA_I32(e)};
            T_RUN_OK(k, grid, a, 4);
            check_claims(hits, who, counter[0], e + 1, P, 1);
            /* side by side, each program gives way after an add: the items spread */
            int seen[P] = {0}, distinct = 0;
            for (int i = 0; i < NI; i++)
                distinct += !seen[who[i]]++;
            cr_assert_eq(distinct, P, "only %d of %d programs took items", distinct, P);
        }
        loom_kernel_destroy(k);
    }
}

Test(atomic, producer_hands_claims_to_consumers_through_an_smem_ring)
{
    for (int slots = 2; slots <= 3; slots++)
        for (int pw = 1; pw <= 4; pw += 3) {
            ring_lines ln;
            loom_kernel *k = ring_kernel(slots, pw, NI, false, &ln);
            cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
            for (int P = 1; P <= 3; P += 2) {
                int32_t counter[1] = {0}, hits[NI] = {0}, out[NI * 2];
                int grid[3] = {P, 1, 1};
                for (int e = 0; e < 3; e++) {
                    memset(out, 0xff, sizeof out);
                    targ a[] = {TA_ARR(counter), TA_ARR(hits), TA_ARR(out), TA_I32(e)};
                    T_RUN_OK(k, grid, a, 4);
                    check_claims(hits, NULL, counter[0], e + 1, P, 2);
                    check_out(out);
                }
            }
            loom_kernel_destroy(k);
        }
}

Test(atomic, a_consumer_that_never_releases_deadlocks_at_the_producer_wait)
{
    ring_lines ln;
    loom_kernel *k = ring_kernel(2, 1, NI, true, &ln);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    int32_t counter[1] = {0}, hits[NI] = {0}, out[NI * 2];
    int grid[3] = {1, 1, 1};
    targ a[] = {TA_ARR(counter), TA_ARR(hits), TA_ARR(out), TA_I32(0)};
    cr_assert_eq(t_run(k, grid, a, 4), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_assert(strstr(t_last_error, "deadlock in program (0,0,0)"), "%s", t_last_error);
    /* the producer waits for slot 0 to come back: replica 1 never released it */
    char want[96];
    snprintf(want, sizeof want, "test_atomic.c:%d, barrier completed 0 phases (arrivals 1 of 2", ln.producer_wait);
    cr_assert(strstr(t_last_error, "waits on barrier %empty"), "%s", t_last_error);
    cr_assert(strstr(t_last_error, want), "want '%s' in:\n%s", want, t_last_error);
    snprintf(want, sizeof want, "test_atomic.c:%d, barrier completed 1 phases", ln.consumer_wait);
    cr_assert(strstr(t_last_error, want), "want '%s' in:\n%s", want, t_last_error);
    loom_kernel_destroy(k);
}

Test(atomic, an_offset_outside_the_counter_names_the_line)
{
    loom_kernel *k = loom_kernel_create("claim_oob", 1);
    loom_val cnt = loom_arg_tensor(k, "counter", LOOM_I32, LOOM_SHAPE1(4), LOOM_INOUT);
    loom_val at = loom_program_id(k, 0);
    int line = __LINE__ + 1;
    loom_atomic_add(k, cnt, &at, I32(k, 1));
    int32_t c[4] = {0};
    int grid[3] = {6, 1, 1};
    targ a[] = {TA_ARR(c)};
    cr_assert_eq(t_run(k, grid, a, 1), LOOM_ERR_BOUNDS, "%s", t_last_error);
    cr_assert(strstr(t_last_error, t_loc(__FILE__, line)), "%s", t_last_error);
    cr_assert(strstr(t_last_error, "op 'atomic_add'"), "%s", t_last_error);
    cr_assert(strstr(t_last_error, "offset 4 of dim 0 is outside tensor 'counter'"), "%s", t_last_error);
    loom_kernel_destroy(k);
}

Test(atomic, the_old_value_wraps_and_prints)
{
    loom_kernel *k = loom_kernel_create("claim_wrap", 1);
    loom_val cnt = loom_arg_tensor(k, "counter", LOOM_I32, LOOM_SHAPE1(1), LOOM_INOUT);
    loom_val res = loom_arg_tensor(k, "res", LOOM_I32, LOOM_SHAPE1(1), LOOM_OUT);
    loom_val z = I32(k, 0);
    loom_val old = loom_atomic_add(k, cnt, &z, I32(k, 5));
    loom_store(k, res, &z, loom_splat(k, old, LOOM_SHAPE1(1)), LOOM_NONE);
    cr_assert(strstr(loom_print(k), "atomic_add %counter[") || strstr(loom_print(k), "atomic_add %counter,"),
              "%s", loom_print(k));
    cr_assert(strstr(loom_print(k), ": i32"), "%s", loom_print(k));
    int32_t c[1] = {INT32_MAX - 1}, r[1] = {0};
    targ a[] = {TA_ARR(c), TA_ARR(r)};
    T_RUN_OK(k, NULL, a, 2);
    cr_assert_eq(r[0], INT32_MAX - 1);
    cr_assert_eq(c[0], INT32_MIN + 3, "%d", c[0]);
    loom_kernel_destroy(k);
}

Test(atomic, rules_refuse_what_no_counter_is)
{
    loom_kernel *k = loom_kernel_create("bad_atomic", 4);
    loom_val f = loom_arg_tensor(k, "f", LOOM_F32, LOOM_SHAPE1(4), LOOM_INOUT);
    loom_val g = loom_arg_tensor(k, "g", LOOM_I32, LOOM_SHAPE1(4), LOOM_IN);
    loom_val h = loom_arg_tensor(k, "h", LOOM_I32, LOOM_SHAPE2(4, 4), LOOM_INOUT);
    loom_val z = I32(k, 0), one = I32(k, 1);
    int l1 = __LINE__ + 1;
    cr_assert_eq(loom_atomic_add(k, f, &z, one), LOOM_NONE);
    int l2 = __LINE__ + 1;
    cr_assert_eq(loom_atomic_add(k, g, &z, one), LOOM_NONE);
    int l3 = __LINE__ + 1;
    cr_assert_eq(loom_atomic_add(k, h, ((loom_val[]){z, z}), loom_const_i(k, LOOM_I64, 1)), LOOM_NONE);
    int l4 = __LINE__ + 1;
    cr_assert_eq(loom_atomic_add(k, h, NULL, one), LOOM_NONE);
    /* one offset for a 2-D tensor: the builder takes one per dim, so build the op by hand */
    int l5 = __LINE__ + 1;
    uint32_t o = ir_op_new(k, LOOM_HERE, IR_ATOMIC_ADD, (uint32_t[]){h, z, one}, 3);
    cr_assert(o);
    cr_assert_eq(loom_verify(k), LOOM_ERR_VERIFY);
    const char *e = loom_kernel_errors(k);
    char want[256];
    snprintf(want, sizeof want, "%s error: op 'atomic_add': the tensor 'f' is tensor<f32[4]>; atomic_add takes an i32 tensor",
             t_loc(__FILE__, l1));
    cr_assert(strstr(e, want), "want '%s' in:\n%s", want, e);
    snprintf(want, sizeof want, "%s error: op 'atomic_add': the tensor 'g' must be declared LOOM_INOUT", t_loc(__FILE__, l2));
    cr_assert(strstr(e, want), "want '%s' in:\n%s", want, e);
    snprintf(want, sizeof want, "%s error: op 'atomic_add': the value to add is i64; an i32 scalar is needed",
             t_loc(__FILE__, l3));
    cr_assert(strstr(e, want), "want '%s' in:\n%s", want, e);
    snprintf(want, sizeof want, "%s error: op 'atomic_add': offsets is NULL", t_loc(__FILE__, l4));
    cr_assert(strstr(e, want), "want '%s' in:\n%s", want, e);
    snprintf(want, sizeof want,
             "%s error: op 'atomic_add': takes the tensor, 2 offsets (one per dim of 'h') and the value to add; got 3 operands",
             t_loc(__FILE__, l5));
    cr_assert(strstr(e, want), "want '%s' in:\n%s", want, e);
    loom_kernel_destroy(k);
}

Test(atomic, a_task_kernel_keeps_claims_inside_its_tasks)
{
    loom_kernel *k = loom_kernel_create("claim_top", 1);
    loom_val cnt = loom_arg_tensor(k, "counter", LOOM_I32, LOOM_SHAPE1(1), LOOM_INOUT);
    loom_val z = I32(k, 0);
    int line = __LINE__ + 1;
    loom_atomic_add(k, cnt, &z, I32(k, 1));
    loom_region_op t = loom_task_begin(k, 1, 0, 1);
    loom_task_end(k, t);
    cr_assert_eq(loom_verify(k), LOOM_ERR_VERIFY);
    cr_assert(strstr(loom_kernel_errors(k), t_loc(__FILE__, line)), "%s", loom_kernel_errors(k));
    cr_assert(strstr(loom_kernel_errors(k), "move this op into a task"), "%s", loom_kernel_errors(k));
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- PTX */

/* One atom per atomic_add op, assembled by ptxas without spills. */
static void check_ptx(loom_kernel *k, int atomics, bool shuffled, const char *name)
{
    char *ptx = NULL, err[1024];
    size_t smem = 0;
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, &smem, err, sizeof err), LOOM_OK, "%s: %s", name, err);
    cr_assert_eq(t_count(ptx, "atom."), atomics, "%s: %d atoms for %d atomic_add ops", name, t_count(ptx, "atom."),
                 atomics);
    cr_assert_eq(t_count(ptx, "atom.relaxed.gpu.add.s32"), atomics, "%s", name);
    if (shuffled) /* predicated on the elected lane, passed by shuffle */
        cr_assert_eq(t_count(ptx, "@p atom.relaxed.gpu.add.s32"), atomics, "%s", name);
    t_ptxas_ok(ptx, "sm_90a", name);
    free(ptx);
}

Test(atomic, ptx_has_one_atom_per_claim_and_assembles)
{
    for (int warps = 1; warps <= 4; warps += 3) {
        loom_kernel *k = claim_kernel(warps, NI);
        check_ptx(k, 3, warps == 1, warps == 1 ? "claim (1 warp)" : "claim (4 warps)");
        loom_kernel_destroy(k);
    }
    for (int slots = 2; slots <= 3; slots++)
        for (int pw = 1; pw <= 4; pw += 3) {
            ring_lines ln;
            loom_kernel *k = ring_kernel(slots, pw, NI, false, &ln);
            char name[64];
            snprintf(name, sizeof name, "claim_ring (%d slots, producer of %d warps)", slots, pw);
            check_ptx(k, 2, false, name);
            loom_kernel_destroy(k);
        }
}

/* The scalar hand-over: the store is before the arrival (a release), the load after the
 * wait (an acquire): both mbarrier ops have those semantics by default. */
Test(atomic, ptx_orders_the_handover_store_before_the_arrival)
{
    ring_lines ln;
    loom_kernel *k = ring_kernel(2, 1, NI, false, &ln);
    char *ptx = NULL, err[1024];
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    const char *st = strstr(ptx, "st.shared.u32");
    cr_assert(st, "no st.shared.u32 of the index:\n%s", ptx);
    const char *arr = strstr(st, "mbarrier.arrive.shared::cta.b64");
    cr_assert(arr, "no arrival after the store");
    free(ptx);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- GPU */

Test(atomic, gpu_claims_and_handover)
{
    loom_runtime *rt = t_gpu_or_skip();
    enum { P = 8 };
    int grid[3] = {P, 1, 1};
    for (int kind = 0; kind < 6; kind++) {
        ring_lines ln;
        int slots = 2 + (kind >= 4 ? 1 : 0), pw = kind % 2 ? 4 : 1;
        loom_kernel *k = kind < 2 ? claim_kernel(pw, NI) : ring_kernel(slots, pw, NI, false, &ln);
        loom_buffer *c = loom_buffer_create(rt, 4), *h = loom_buffer_create(rt, NI * 4),
                    *o = loom_buffer_create(rt, NI * 2 * 4);
        cr_assert(c && h && o);
        cr_assert_eq(loom_buffer_fill(c, 0), LOOM_OK);
        cr_assert_eq(loom_buffer_fill(h, 0), LOOM_OK);
        for (int e = 0; e < 3; e++) {
            cr_assert_eq(loom_buffer_fill(o, 0xff), LOOM_OK);
            loom_arg a[] = {LOOM_ARG_BUF(c), LOOM_ARG_BUF(h), LOOM_ARG_BUF(o), LOOM_ARG_I32(e)};
            cr_assert_eq(loom_launch(rt, k, grid, a, 4), LOOM_OK, "%s", loom_runtime_error(rt));
            int32_t counter, hits[NI], out[NI * 2];
            cr_assert_eq(loom_buffer_download(c, &counter, 4), LOOM_OK);
            cr_assert_eq(loom_buffer_download(h, hits, sizeof hits), LOOM_OK);
            cr_assert_eq(loom_buffer_download(o, out, sizeof out), LOOM_OK);
            check_claims(hits, kind < 2 ? out : NULL, counter, e + 1, P, kind < 2 ? 1 : 2);
            if (kind >= 2)
                check_out(out);
        }
        loom_buffer_destroy(c);
        loom_buffer_destroy(h);
        loom_buffer_destroy(o);
        loom_kernel_destroy(k);
    }
    loom_runtime_destroy(rt);
}
