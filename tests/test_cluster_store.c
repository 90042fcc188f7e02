/*
 * test_cluster_store.c -- loom_smem_store_cluster: a small register tile written into the
 * same view of every CTA of a cluster, its bytes completing on each CTA's barrier, as a
 * multicast TMA load's do.  It is how a dynamic persistent tile scheduler on clusters
 * hands the tile it claimed to every CTA of the cluster.
 *
 * The kernel under test is that scheduler, cut to its hand-over: clusters of two CTAs;
 * rank 0's producer claims items from a counter (loom_atomic_add) and stores each index
 * (-1 past the end) into slot s of a ring of [1] i32 tiles in both CTAs.  In each CTA the
 * producer announces the 4 bytes on its own full[s] (loom_mbar_expect), and both of its
 * tasks (the producer, which learns when to stop from the slot as rank 1's must, and the
 * consumer) wait on full[s], read the index (loom_smem_load + loom_reduce_max of the [1]
 * tile) and give the slot back with loom_mbar_arrive_cluster on empty[s], which counts
 * every reader of both CTAs.  Each CTA's consumer writes its rank's half of the item's
 * output row (the program id), and counts the item in `hits`: every item must be taken
 * once, its two halves by the two ranks of one cluster.  The counter counts up across
 * launches (launch e subtracts e * (items + clusters): each cluster's producer claims
 * once past the end).  The same kernel without clusters stores into its own CTA only.
 * A second kernel hands over tiles of every dtype and of shapes up to 16 bytes ([4] i32,
 * [3] f32, [2] i64, [2, 2] i32, [2, 4] f16, [2] bf16): each CTA gets rank 0's tile whole.
 *
 * Then what goes wrong: a CTA whose producer announces no bytes (bytes no expect
 * announced), an expect of 8 bytes for a 4-byte store (a deadlock naming the waits and the
 * 4 bytes still pending), a read of the slot before a wait on its barrier (the visibility
 * check names the store), a barrier index outside the array (the store's line), the
 * static expect-bytes check (a cluster store counts its bytes once per CTA), and the
 * rules' refusals with their lines.  The PTX carries one st.async a CTA with mapa'ed
 * addresses of the view and the barrier, and assembles with ptxas -v without spills.  On
 * the GPU (skipped without one) the same kernels run and are checked the same way.
 */
#include "ir.h"
#include "testutil.h"

#define I32(k, v) loom_const_i(k, LOOM_I32, v)

OP_COVERED(smem_store_cluster)

enum { NI = 23 }; /* items */

/* ---------------------------------------------------------------- the scheduler kernel */

typedef enum { SC_OK, SC_NO_EXPECT, SC_WRONG_EXPECT } sc_variant;

typedef struct sc_lines {
    int store, prod_wait, cons_wait, bare_arrive;
} sc_lines;

/* Clusters of cl CTAs (1 or 2), a ring of `slots` [1] i32 tiles; see the top of the file.
 * The loops have NI + 1 turns: the most steps one cluster can take.  SC_NO_EXPECT: rank
 * 1's producer arrives on full without announcing the bytes; SC_WRONG_EXPECT: every
 * producer announces 8. */
static loom_kernel *sched_kernel(int cl, int slots, sc_variant v, sc_lines *ln)
{
    loom_kernel *k = loom_kernel_create("cluster_sched", 5);
    if (cl > 1)
        loom_kernel_set_cluster(k, cl);
    loom_val cnt = loom_arg_tensor(k, "counter", LOOM_I32, LOOM_SHAPE1(1), LOOM_INOUT);
    loom_val hits = loom_arg_tensor(k, "hits", LOOM_I32, LOOM_SHAPE1(NI), LOOM_INOUT);
    loom_val out = loom_arg_tensor(k, "out", LOOM_I32, LOOM_SHAPE2(NI, 2), LOOM_OUT);
    loom_val epoch = loom_arg_scalar(k, "epoch", LOOM_I32);
    loom_val ring = loom_name(k, loom_smem_alloc(k, LOOM_I32, LOOM_SHAPE1(1), slots, LOOM_SWIZZLE_NONE), "idx");
    loom_val full = loom_name(k, loom_mbar_alloc(k, slots, 1), "full");
    loom_val empty = loom_name(k, loom_mbar_alloc(k, slots, 2 * cl), "empty"); /* both tasks of every CTA */
    loom_val zero = I32(k, 0), one = I32(k, 1), turns = I32(k, NI + 1);
    loom_val rank = loom_cluster_rank(k), pid = loom_program_id(k, 0);

    loom_region_op prod = loom_task_begin(k, 1, 0, 1);
    {
        /* what earlier launches claimed (div may fault, so it sits in a task) */
        loom_val clusters = loom_div(k, loom_num_programs(k, 0), I32(k, cl));
        loom_val base = loom_mul(k, epoch, loom_add(k, I32(k, NI), clusters));
        loom_region_op loop = loom_for_begin(k, zero, turns, one, 1, &one);
        loom_val it = loom_for_iv(k, loop), live = loom_for_arg(k, loop, 0);
        loom_region_op br = loom_if_begin(k, loom_cmp(k, LOOM_NE, live, zero), 1);
        {
            loom_val s = loom_ring_slot(k, it, slots), ph = loom_ring_phase(k, it, slots);
            ln->prod_wait = __LINE__ + 1;
            loom_mbar_wait(k, empty, s, loom_sub(k, one, ph));
            if (v == SC_NO_EXPECT) {
                loom_region_op ex = loom_if_begin(k, loom_cmp(k, LOOM_EQ, rank, zero), 0);
                loom_mbar_expect(k, full, s, 4);
                loom_else(k, ex, 0, NULL);
                ln->bare_arrive = __LINE__ + 1;
                loom_mbar_arrive(k, full, s);
                loom_if_end(k, ex, 0, NULL);
            } else {
                loom_mbar_expect(k, full, s, v == SC_WRONG_EXPECT ? 8 : 4);
            }
            loom_region_op claim = loom_if_begin(k, loom_cmp(k, LOOM_EQ, rank, zero), 0);
            {
                loom_val x = loom_sub(k, loom_atomic_add(k, cnt, &zero, one), base);
                loom_val item = loom_select(k, loom_cmp(k, LOOM_LT, x, I32(k, NI)), x, I32(k, -1));
                ln->store = __LINE__ + 1;
                loom_smem_store_cluster(k, loom_smem_slot(k, ring, s), item, full, s);
            }
            loom_if_end(k, claim, 0, NULL);
            loom_mbar_wait(k, full, s, ph);
            loom_val item = loom_reduce_max(k, loom_smem_load(k, loom_smem_slot(k, ring, s)), 0);
            loom_mbar_arrive_cluster(k, empty, s);
            loom_val nl = loom_select(k, loom_cmp(k, LOOM_GE, item, zero), one, zero);
            loom_else(k, br, 1, &nl);
        }
        loom_if_end(k, br, 1, &zero);
        loom_val y = loom_if_result(k, br, 0);
        loom_for_end(k, loop, 1, &y);
    }
    loom_task_end(k, prod);

    loom_region_op cons = loom_task_begin(k, 4, 0, 1);
    {
        loom_region_op loop = loom_for_begin(k, zero, turns, one, 1, &one);
        loom_val it = loom_for_iv(k, loop), live = loom_for_arg(k, loop, 0);
        loom_region_op br = loom_if_begin(k, loom_cmp(k, LOOM_NE, live, zero), 1);
        {
            loom_val s = loom_ring_slot(k, it, slots), ph = loom_ring_phase(k, it, slots);
            ln->cons_wait = __LINE__ + 1;
            loom_mbar_wait(k, full, s, ph);
            loom_val item = loom_reduce_max(k, loom_smem_load(k, loom_smem_slot(k, ring, s)), 0);
            loom_mbar_arrive_cluster(k, empty, s);
            loom_val ok = loom_cmp(k, LOOM_GE, item, zero);
            loom_region_op w = loom_if_begin(k, ok, 0);
            {
                loom_store(k, out, ((loom_val[]){item, rank}), loom_splat(k, pid, LOOM_SHAPE1(1)), LOOM_NONE);
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

/* Every item taken once a launch, by one cluster, whose rank r wrote column r of its row
 * (the program id: rank 0's is a multiple of cl, rank 1's the next); without clusters,
 * column 1 stays as it was (-1).  Returns how many clusters took items. */
static int check_sched(const int32_t *hits, const int32_t *out, int32_t counter, int launches, int clusters, int cl)
{
    cr_assert_eq(counter, launches * (NI + clusters), "counter %d after %d launches of %d clusters", counter,
                 launches, clusters);
    int took[64] = {0}, distinct = 0;
    for (int i = 0; i < NI; i++) {
        cr_assert_eq(hits[i], launches * cl, "item %d was taken %d times in %d launches (%d CTAs a cluster)", i,
                     hits[i], launches, cl);
        int32_t r0 = out[2 * i], r1 = out[2 * i + 1];
        cr_assert(r0 >= 0 && r0 < clusters * cl && r0 % cl == 0, "item %d: column 0 written by program %d", i, r0);
        if (cl == 2)
            cr_assert_eq(r1, r0 + 1, "item %d: rank 0 of program %d wrote column 0 but column 1 is %d", i, r0, r1);
        else
            cr_assert_eq(r1, -1, "item %d: column 1 is %d without a peer", i, r1);
        distinct += !took[r0 / cl]++;
    }
    return distinct;
}

/* ---------------------------------------------------------------- tiles of every width */

typedef struct wcase {
    loom_dtype dt;
    loom_shape shape;
    const char *name;
} wcase;

static const wcase widths[] = {
    {LOOM_I32, LOOM_SHAPE1(1), "i32[1]"},      {LOOM_I32, LOOM_SHAPE1(4), "i32[4]"},
    {LOOM_F32, LOOM_SHAPE1(3), "f32[3]"},      {LOOM_I64, LOOM_SHAPE1(2), "i64[2]"},
    {LOOM_I32, LOOM_SHAPE2(2, 2), "i32[2x2]"}, {LOOM_F16, LOOM_SHAPE2(2, 4), "f16[2x4]"},
    {LOOM_BF16, LOOM_SHAPE1(2), "bf16[2]"},
};
enum { NW = sizeof widths / sizeof widths[0] };

/* Rank 0's producer loads src (a tile of the case's shape, in whatever layout a load
 * takes) and stores it into the one-slot ring of every CTA; each CTA's consumer waits,
 * loads the view and writes it to out[rank]. */
static loom_kernel *width_kernel(const wcase *w, int cl)
{
    loom_kernel *k = loom_kernel_create("cluster_store_width", 5);
    if (cl > 1)
        loom_kernel_set_cluster(k, cl);
    int r = w->shape.rank;
    loom_shape os = {.rank = r + 1};
    os.dim[0] = 2;
    for (int d = 0; d < r; d++)
        os.dim[1 + d] = w->shape.dim[d];
    loom_val src = loom_arg_tensor(k, "src", w->dt, w->shape, LOOM_IN);
    loom_val out = loom_arg_tensor(k, "out", w->dt, os, LOOM_OUT);
    loom_val ring = loom_smem_alloc(k, w->dt, w->shape, 1, LOOM_SWIZZLE_NONE);
    loom_val full = loom_mbar_alloc(k, 1, 1);
    loom_val zero = I32(k, 0), rank = loom_cluster_rank(k);
    int64_t bytes = ir_shape_numel(&w->shape) * (int64_t)loom_dtype_size(w->dt);
    loom_val zs[4] = {zero, zero, zero, zero};

    loom_region_op prod = loom_task_begin(k, 1, 0, 1);
    {
        loom_mbar_expect(k, full, zero, bytes);
        loom_region_op br = loom_if_begin(k, loom_cmp(k, LOOM_EQ, rank, zero), 0);
        loom_smem_store_cluster(k, ring, loom_load(k, src, zs, w->shape, LOOM_NONE, 0.0), full, zero);
        loom_if_end(k, br, 0, NULL);
    }
    loom_task_end(k, prod);
    loom_region_op cons = loom_task_begin(k, 4, 0, 1);
    {
        loom_mbar_wait(k, full, zero, zero);
        loom_val offs[4] = {rank, zero, zero, zero};
        loom_store(k, out, offs, loom_smem_load(k, ring), LOOM_NONE);
    }
    loom_task_end(k, cons);
    return k;
}

/* src: distinct values that use every bit width (i64 across its two words, floats exact
 * in their dtype), stored as the dtype holds them. */
static void width_src(const wcase *w, void *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        switch (w->dt) {
        case LOOM_I32: ((int32_t *)src)[i] = (int32_t)(0x01020304 * (i + 1)) ^ (int32_t)0x80000000; break;
        case LOOM_F32: ((float *)src)[i] = -1.5f - 0.25f * (float)i; break;
        case LOOM_I64: ((int64_t *)src)[i] = (INT64_C(0x0123456789) << (8 * i)) + i - INT64_C(5000000000) * i; break;
        case LOOM_F16: ((uint16_t *)src)[i] = ir_f32_to_f16(0.5f + (float)i - (i & 1 ? 3.0f : 0.0f)); break;
        case LOOM_BF16: ((uint16_t *)src)[i] = (uint16_t)(0x3f80 + 0x101 * (i + 1)); break; /* bf16 bit patterns */
        default: break;
        }
}

/* out[r] equals src for every rank of the cluster; the other row keeps its fill. */
static void width_check(const wcase *w, const uint8_t *src, const uint8_t *out, int cl)
{
    size_t b = (size_t)(ir_shape_numel(&w->shape) * (int64_t)loom_dtype_size(w->dt));
    for (int r = 0; r < 2; r++) {
        if (r < cl) {
            cr_assert(memcmp(out + r * b, src, b) == 0, "%s: rank %d's view differs from rank 0's tile", w->name, r);
        } else {
            for (size_t i = 0; i < b; i++)
                cr_assert_eq(out[r * b + i], 0xee, "%s: row %d written without a peer", w->name, r);
        }
    }
}

/* ---------------------------------------------------------------- interpreter */

Test(cluster_store, the_claimed_index_reaches_both_ctas_of_the_cluster)
{
    for (int slots = 2; slots <= 3; slots++) {
        sc_lines ln;
        loom_kernel *k = sched_kernel(2, slots, SC_OK, &ln);
        cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
        for (int C = 1; C <= 3; C += 2) {
            int32_t counter[1] = {0}, hits[NI] = {0}, out[NI * 2];
            int grid[3] = {2 * C, 1, 1};
            for (int e = 0; e < 3; e++) {
                memset(out, 0xff, sizeof out);
                targ a[] = {TA_ARR(counter), TA_ARR(hits), TA_ARR(out), TA_I32(e)};
                T_RUN_OK(k, grid, a, 4);
                int distinct = check_sched(hits, out, counter[0], e + 1, C, 2);
                /* the clusters run side by side, each giving way after a claim */
                cr_assert_eq(distinct, C, "%d slots: only %d of %d clusters took items", slots, distinct, C);
            }
        }
        loom_kernel_destroy(k);
    }
}

Test(cluster_store, without_a_cluster_it_stores_into_its_own_cta)
{
    sc_lines ln;
    loom_kernel *k = sched_kernel(1, 2, SC_OK, &ln);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    int32_t counter[1] = {0}, hits[NI] = {0}, out[NI * 2];
    int grid[3] = {3, 1, 1};
    for (int e = 0; e < 2; e++) {
        memset(out, 0xff, sizeof out);
        targ a[] = {TA_ARR(counter), TA_ARR(hits), TA_ARR(out), TA_I32(e)};
        T_RUN_OK(k, grid, a, 4);
        check_sched(hits, out, counter[0], e + 1, 3, 1);
    }
    loom_kernel_destroy(k);
}

Test(cluster_store, tiles_of_every_width_land_whole)
{
    for (int c = 0; c < NW; c++)
        for (int cl = 1; cl <= 2; cl++) {
            const wcase *w = &widths[c];
            loom_kernel *k = width_kernel(w, cl);
            cr_assert_eq(loom_verify(k), LOOM_OK, "%s: %s", w->name, loom_kernel_errors(k));
            int64_t n = ir_shape_numel(&w->shape);
            size_t b = (size_t)(n * (int64_t)loom_dtype_size(w->dt));
            _Alignas(16) uint8_t src[16], out[32];
            width_src(w, src, n);
            memset(out, 0xee, sizeof out);
            int grid[3] = {cl, 1, 1};
            targ a[] = {TA_BUF(src, b), TA_BUF(out, 2 * b)};
            T_RUN_OK(k, grid, a, 2);
            width_check(w, src, out, cl);
            loom_kernel_destroy(k);
        }
}

Test(cluster_store, it_prints_with_its_operands)
{
    sc_lines ln;
    loom_kernel *k = sched_kernel(2, 2, SC_OK, &ln);
    const char *p = loom_print(k);
    /* the scalar index is splatted to the view's [1] by the builder */
    cr_assert(strstr(p, "= splat %32 to [1] : i32[1]\n"), "%s", p);
    cr_assert(strstr(p, "smem_store_cluster %33, %34, %full.1, %20\n"), "%s", p);
    loom_kernel_destroy(k);
}

Test(cluster_store, bytes_no_expect_announced_are_reported)
{
    sc_lines ln;
    loom_kernel *k = sched_kernel(2, 2, SC_NO_EXPECT, &ln);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    int32_t counter[1] = {0}, hits[NI] = {0}, out[NI * 2];
    int grid[3] = {2, 1, 1};
    targ a[] = {TA_ARR(counter), TA_ARR(hits), TA_ARR(out), TA_I32(0)};
    cr_assert_eq(t_run(k, grid, a, 4), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_assert(strstr(t_last_error, "bytes that no loom_mbar_expect announced"), "%s", t_last_error);
    cr_assert(strstr(t_last_error, "barrier %full."), "%s", t_last_error);
    cr_assert(strstr(t_last_error, "4 bytes landed in its phase"), "%s", t_last_error);
    /* reported where rank 1's producer makes the phase's last arrival with the 4 bytes in */
    cr_assert(strstr(t_last_error, t_loc(__FILE__, ln.bare_arrive)) && strstr(t_last_error, "in program (1,0,0)"),
              "the CTA that announced nothing, at line %d: %s", ln.bare_arrive, t_last_error);
    loom_kernel_destroy(k);
}

Test(cluster_store, bytes_never_announced_whole_deadlock_at_the_waits)
{
    sc_lines ln;
    loom_kernel *k = sched_kernel(2, 2, SC_WRONG_EXPECT, &ln);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    int32_t counter[1] = {0}, hits[NI] = {0}, out[NI * 2];
    int grid[3] = {2, 1, 1};
    targ a[] = {TA_ARR(counter), TA_ARR(hits), TA_ARR(out), TA_I32(0)};
    cr_assert_eq(t_run(k, grid, a, 4), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_assert(strstr(t_last_error, "deadlock"), "%s", t_last_error);
    /* both CTAs' consumers wait on full[0]: 8 bytes announced, 4 landed */
    char want[160];
    snprintf(want, sizeof want, "%s barrier completed 0 phases (arrivals 1 of 1, bytes pending 4)",
             t_loc(__FILE__, ln.cons_wait));
    *strchr(want, ' ') = 0; /* "file:line:" -> "file:line," then the rest */
    want[strlen(want) - 1] = ',';
    want[strlen(want)] = ' ';
    cr_assert(strstr(t_last_error, "waits on barrier %full.1[0] for phase parity 0 at ") && strstr(t_last_error, want),
              "want '%s' in:\n%s", want, t_last_error);
    cr_assert_eq(t_count(t_last_error, want), 2, "both CTAs' consumers: %s", t_last_error);
    cr_assert(strstr(t_last_error, "program (0,0,0)") && strstr(t_last_error, "program (1,0,0)"), "%s", t_last_error);
    loom_kernel_destroy(k);
}

/* Rank 0 stores into both CTAs and then releases `go` in both; the consumers wait on go
 * (not on full) and read the slot: the store's bytes are there, but no wait of theirs has
 * made them visible. */
Test(cluster_store, a_read_before_a_wait_on_its_barrier_is_reported)
{
    int store_line, read_line;
    loom_kernel *k = loom_kernel_create("early_read", 5);
    loom_kernel_set_cluster(k, 2);
    loom_val out = loom_arg_tensor(k, "out", LOOM_I32, LOOM_SHAPE1(2), LOOM_OUT);
    loom_val ring = loom_smem_alloc(k, LOOM_I32, LOOM_SHAPE1(1), 1, LOOM_SWIZZLE_NONE);
    loom_val full = loom_name(k, loom_mbar_alloc(k, 1, 1), "full");
    loom_val go = loom_name(k, loom_mbar_alloc(k, 1, 2), "go"); /* both producers, over the cluster */
    loom_val zero = I32(k, 0);
    loom_val rank = loom_cluster_rank(k);
    loom_region_op prod = loom_task_begin(k, 1, 0, 1);
    {
        loom_mbar_expect(k, full, zero, 4);
        loom_region_op br = loom_if_begin(k, loom_cmp(k, LOOM_EQ, rank, zero), 0);
        store_line = __LINE__ + 1;
        loom_smem_store_cluster(k, ring, I32(k, 7), full, zero);
        loom_if_end(k, br, 0, NULL);
        loom_mbar_arrive_cluster(k, go, zero);
    }
    loom_task_end(k, prod);
    loom_region_op cons = loom_task_begin(k, 4, 0, 1);
    {
        loom_mbar_wait(k, go, zero, zero);
        read_line = __LINE__ + 1;
        loom_val v = loom_smem_load(k, ring);
        loom_store(k, out, &rank, v, LOOM_NONE);
    }
    loom_task_end(k, cons);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    int32_t o[2] = {0, 0};
    int grid[3] = {2, 1, 1};
    targ a[] = {TA_ARR(o)};
    cr_assert_eq(t_run(k, grid, a, 1), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_assert(strstr(t_last_error, t_loc(__FILE__, read_line)), "%s", t_last_error);
    char want[200];
    snprintf(want, sizeof want, "%s", t_loc(__FILE__, store_line));
    want[strlen(want) - 1] = ')'; /* "file:line)" */
    cr_assert(strstr(t_last_error, "(written by smem_store_cluster at ") && strstr(t_last_error, want),
              "want '%s' in:\n%s", want, t_last_error);
    cr_assert(strstr(t_last_error, "that no wait has made visible to this task"), "%s", t_last_error);
    cr_assert(strstr(t_last_error, "phase 0 of barrier %full."), "%s", t_last_error);
    loom_kernel_destroy(k);
}

Test(cluster_store, a_barrier_index_outside_the_array_names_the_line)
{
    loom_kernel *k = loom_kernel_create("bad_index", 1);
    loom_kernel_set_cluster(k, 2);
    loom_val ring = loom_smem_alloc(k, LOOM_I32, LOOM_SHAPE1(1), 1, LOOM_SWIZZLE_NONE);
    loom_val full = loom_name(k, loom_mbar_alloc(k, 2, 1), "full");
    loom_region_op t = loom_task_begin(k, 1, 0, 1);
    int line = __LINE__ + 1;
    loom_smem_store_cluster(k, ring, I32(k, 1), full, I32(k, 2));
    loom_task_end(k, t);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    int grid[3] = {2, 1, 1};
    cr_assert_eq(t_run(k, grid, NULL, 0), LOOM_ERR_BOUNDS, "%s", t_last_error);
    cr_assert(strstr(t_last_error, t_loc(__FILE__, line)), "%s", t_last_error);
    cr_assert(strstr(t_last_error, "op 'smem_store_cluster'"), "%s", t_last_error);
    cr_assert(strstr(t_last_error, "barrier index 2 is outside %full."), "%s", t_last_error);
    loom_kernel_destroy(k);
}

/* An expect in the block of a cluster store on the same barrier counts the store once per
 * CTA of the cluster: every CTA's replica stores into every CTA. */
Test(cluster_store, the_expect_check_counts_a_cluster_store_per_cta)
{
    for (int bytes = 4; bytes <= 8; bytes += 4) {
        loom_kernel *k = loom_kernel_create("expect_count", 1);
        loom_kernel_set_cluster(k, 2);
        loom_val ring = loom_smem_alloc(k, LOOM_I32, LOOM_SHAPE1(1), 1, LOOM_SWIZZLE_NONE);
        loom_val full = loom_mbar_alloc(k, 1, 1);
        loom_val zero = I32(k, 0);
        loom_region_op t = loom_task_begin(k, 1, 0, 1);
        int line = __LINE__ + 1;
        loom_mbar_expect(k, full, zero, bytes);
        loom_smem_store_cluster(k, ring, I32(k, 3), full, zero);
        loom_mbar_wait(k, full, zero, zero);
        loom_task_end(k, t);
        if (bytes == 8) {
            cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
            int grid[3] = {4, 1, 1};
            T_RUN_OK(k, grid, NULL, 0);
        } else {
            cr_assert_eq(loom_verify(k), LOOM_ERR_VERIFY);
            char want[300];
            snprintf(want, sizeof want,
                     "%s error: op 'mbar_expect': expects 4 bytes but the 1 TMA load or cluster store of this block "
                     "on the same barrier bring 8",
                     t_loc(__FILE__, line));
            cr_assert(strstr(loom_kernel_errors(k), want), "want '%s' in:\n%s", want, loom_kernel_errors(k));
        }
        loom_kernel_destroy(k);
    }
}

Test(cluster_store, rules_refuse_what_it_cannot_store)
{
    loom_kernel *k = loom_kernel_create("bad_store", 1);
    loom_kernel_set_cluster(k, 2);
    loom_val r2 = loom_smem_alloc(k, LOOM_I32, LOOM_SHAPE1(1), 2, LOOM_SWIZZLE_NONE);
    loom_val big = loom_smem_alloc(k, LOOM_I32, LOOM_SHAPE1(8), 1, LOOM_SWIZZLE_NONE);
    loom_val half = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE1(1), 1, LOOM_SWIZZLE_NONE);
    loom_val rows = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(4, 1), 1, LOOM_SWIZZLE_NONE);
    loom_val full = loom_mbar_alloc(k, 2, 1);
    loom_val zero = I32(k, 0);
    int l0 = __LINE__ + 1;
    loom_smem_store_cluster(k, loom_smem_slot(k, r2, zero), zero, full, zero); /* outside a task */
    loom_region_op t = loom_task_begin(k, 1, 0, 1);
    int l1 = __LINE__ + 1;
    loom_smem_store_cluster(k, r2, zero, full, zero);
    int l2 = __LINE__ + 1;
    loom_smem_store_cluster(k, big, zero, full, zero);
    int l3 = __LINE__ + 1;
    loom_smem_store_cluster(k, loom_smem_slot(k, r2, zero), loom_const_f(k, LOOM_F32, 1.0), full, zero);
    int l4 = __LINE__ + 1;
    loom_smem_store_cluster(k, half, loom_const_f(k, LOOM_F16, 1.0), full, zero);
    int l5 = __LINE__ + 1;
    loom_smem_store_cluster(k, loom_smem_slot(k, r2, zero), zero, r2, zero);
    int l6 = __LINE__ + 1;
    loom_smem_store_cluster(k, loom_smem_part(k, rows, 0, 1, 2), loom_const_f(k, LOOM_F16, 1.0), full, zero);
    loom_task_end(k, t);
    cr_assert_eq(loom_verify(k), LOOM_ERR_VERIFY);
    const char *e = loom_kernel_errors(k);
    struct {
        int line;
        const char *msg;
    } want[] = {
        {l0, "only inside a task"},
        {l1, "the view is smem<i32[1] x2>; a shared-memory view is needed"},
        {l2, "is 32 bytes; loom_smem_store_cluster writes at most 16"},
        {l3, "the value is f32[1] but the view is smem<i32[1]>; they need the same dtype and shape (use loom_cast)"},
        {l4, "is 2 bytes; st.async writes whole 4-byte words"},
        {l5, "operand 2 is smem<i32[1] x2>; an mbarrier array (loom_mbar_alloc) is needed"},
        {l6, "may start off a 4-byte boundary"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char w[300];
        snprintf(w, sizeof w, "%s error: op 'smem_store_cluster': ", t_loc(__FILE__, want[i].line));
        const char *at = strstr(e, w);
        cr_assert(at, "no error at line %d in:\n%s", want[i].line, e);
        const char *eol = strchr(at, '\n');
        cr_assert(strstr(at, want[i].msg) && (!eol || strstr(at, want[i].msg) < eol), "line %d: want '%s' in:\n%s",
                  want[i].line, want[i].msg, e);
    }
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- PTX */

static char *ptx_of(loom_kernel *k, const char *name)
{
    char *ptx = NULL, err[1024];
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s: %s", name, err);
    t_ptxas_ok(ptx, "sm_90a", name);
    return ptx;
}

/* One st.async a CTA of the cluster, through mapa'ed addresses of the view and the
 * barrier, issued by the elected thread; PTX ISA 8.1 (st.async's). */
Test(cluster_store, ptx_stores_into_every_cta_with_st_async_and_assembles)
{
    for (int cl = 1; cl <= 2; cl++) {
        sc_lines ln;
        loom_kernel *k = sched_kernel(cl, 2, SC_OK, &ln);
        char *ptx = ptx_of(k, cl == 2 ? "cluster_sched (clusters of 2)" : "cluster_sched (no cluster)");
        if (cl == 1) { /* launched without clusters: plain stores, a fence, complete_tx; no mapa */
            cr_assert(strstr(ptx, "mbarrier.complete_tx.relaxed.cta.shared::cta.b64"), "%s", ptx);
            cr_assert_eq(t_count(ptx, "st.async"), 0, "%s", ptx);
            cr_assert_eq(t_count(ptx, "mapa.shared::cluster.u32"), 0, "%s", ptx);
            free(ptx);
            loom_kernel_destroy(k);
            continue;
        }
        cr_assert(strstr(ptx, ".version 8.1"), "%.200s", ptx);
        cr_assert_eq(t_count(ptx, "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [ra], "), cl, "%s", ptx);
        const char *st = strstr(ptx, "st.async");
        const char *before = st - 200 > ptx ? st - 200 : ptx;
        cr_assert(strstr(before, "mapa.shared::cluster.u32 ra,") < st && strstr(before, "mapa.shared::cluster.u32 rb,") < st,
                  "no mapa before the st.async:\n%s", ptx);
        /* mapa: 2 per st.async, 1 per cluster arrival (two ops, cl ranks each) */
        cr_assert_eq(t_count(ptx, "mapa.shared::cluster.u32"), 2 * cl + 2 * cl, "%s", ptx);
        if (cl == 2)
            cr_assert(strstr(ptx, ".reqnctapercluster 2, 1, 1"));
        free(ptx);
        loom_kernel_destroy(k);
    }
}

Test(cluster_store, ptx_of_every_width_assembles)
{
    static const char *const form[NW] = {".b32", ".v4.b32", ".b32", ".v4.b32", ".v4.b32", ".v4.b32", ".b32"};
    static const int per_cta[NW] = {1, 1, 3, 1, 1, 1, 1};
    for (int c = 0; c < NW; c++) {
        loom_kernel *k = width_kernel(&widths[c], 2);
        char *ptx = ptx_of(k, widths[c].name);
        char want[128];
        snprintf(want, sizeof want, "mbarrier::complete_tx::bytes%s [ra], ", form[c]);
        cr_assert_eq(t_count(ptx, want), 2 * per_cta[c], "%s: want %d of '%s':\n%s", widths[c].name,
                     2 * per_cta[c], want, ptx);
        free(ptx);
        loom_kernel_destroy(k);
    }
}

/* Kernels without the op keep PTX ISA 8.0. */
Test(cluster_store, other_kernels_keep_ptx_8_0)
{
    loom_kernel *k = loom_kernel_create("plain", 1);
    loom_val o = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(1), LOOM_OUT);
    loom_val z = I32(k, 0);
    loom_store(k, o, &z, loom_splat(k, z, LOOM_SHAPE1(1)), LOOM_NONE);
    char *ptx = NULL, err[512];
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert(strstr(ptx, ".version 8.0"), "%.200s", ptx);
    free(ptx);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- GPU */

Test(cluster_store, gpu_the_claimed_index_reaches_both_ctas)
{
    loom_runtime *rt = t_gpu_or_skip();
    for (int cl = 1; cl <= 2; cl++) {
        enum { C = 6 };
        sc_lines ln;
        loom_kernel *k = sched_kernel(cl, 2, SC_OK, &ln);
        loom_buffer *c = loom_buffer_create(rt, 4), *h = loom_buffer_create(rt, NI * 4),
                    *o = loom_buffer_create(rt, NI * 2 * 4);
        cr_assert(c && h && o);
        cr_assert_eq(loom_buffer_fill(c, 0), LOOM_OK);
        cr_assert_eq(loom_buffer_fill(h, 0), LOOM_OK);
        int grid[3] = {C * cl, 1, 1};
        for (int e = 0; e < 3; e++) {
            cr_assert_eq(loom_buffer_fill(o, 0xff), LOOM_OK);
            loom_arg a[] = {LOOM_ARG_BUF(c), LOOM_ARG_BUF(h), LOOM_ARG_BUF(o), LOOM_ARG_I32(e)};
            cr_assert_eq(loom_launch(rt, k, grid, a, 4), LOOM_OK, "%s", loom_runtime_error(rt));
            int32_t counter, hits[NI], out[NI * 2];
            cr_assert_eq(loom_buffer_download(c, &counter, 4), LOOM_OK);
            cr_assert_eq(loom_buffer_download(h, hits, sizeof hits), LOOM_OK);
            cr_assert_eq(loom_buffer_download(o, out, sizeof out), LOOM_OK);
            check_sched(hits, out, counter, e + 1, C, cl);
        }
        loom_buffer_destroy(c);
        loom_buffer_destroy(h);
        loom_buffer_destroy(o);
        loom_kernel_destroy(k);
    }
    loom_runtime_destroy(rt);
}

Test(cluster_store, gpu_tiles_of_every_width_land_whole)
{
    loom_runtime *rt = t_gpu_or_skip();
    for (int c = 0; c < NW; c++)
        for (int cl = 1; cl <= 2; cl++) {
            const wcase *w = &widths[c];
            loom_kernel *k = width_kernel(w, cl);
            int64_t n = ir_shape_numel(&w->shape);
            size_t b = (size_t)(n * (int64_t)loom_dtype_size(w->dt));
            _Alignas(16) uint8_t src[16], out[32];
            width_src(w, src, n);
            loom_buffer *s = loom_buffer_create(rt, b), *o = loom_buffer_create(rt, 2 * b);
            cr_assert(s && o);
            cr_assert_eq(loom_buffer_upload(s, src, b), LOOM_OK);
            cr_assert_eq(loom_buffer_fill(o, 0xee), LOOM_OK);
            int grid[3] = {cl, 1, 1};
            loom_arg a[] = {LOOM_ARG_BUF(s), LOOM_ARG_BUF(o)};
            cr_assert_eq(loom_launch(rt, k, grid, a, 2), LOOM_OK, "%s: %s", w->name, loom_runtime_error(rt));
            cr_assert_eq(loom_buffer_download(o, out, 2 * b), LOOM_OK);
            width_check(w, src, out, cl);
            loom_buffer_destroy(s);
            loom_buffer_destroy(o);
            loom_kernel_destroy(k);
        }
    loom_runtime_destroy(rt);
}
