/*
 * test_pipe.c -- the pipeline layer (include/loom_pipe.h) on the interpreter.
 *
 * One small persistent warp-specialized GEMM, C = A @ Bt^T, is written with the layer
 * only (no raw mbarrier or named-barrier call): a ring of 2 to 5 slots fed by the
 * producer, a static schedule in grouped order over fewer programs than tiles (so the
 * ring's phases wrap many times and carry across tiles), one consumer task or two
 * ping-pong replicas, clusters of 2 multicasting the shared B tile, and each epilogue
 * kind.  Every run is checked bit for bit against a C fma loop (the interpreter's
 * wgmma accumulates in k order, in f32).  Then deliberate misuses, each reported by the
 * interpreter at the line of this file that made the wrong call: a consumer that never
 * releases its slots (a deadlock at the producer's loom_ring_produce), a consumer that
 * reads a slot it did not consume (an unsynchronized read at its wgmma), and a kernel
 * that asks for more named barriers than there are.
 */
#include "ir.h"
#include "loom_pipe.h"
#include "testutil.h"

#include <math.h>

#define I32(k, v) loom_const_i(k, LOOM_I32, v)

/* Does the text (the last error) name line `line` of this file? */
#define NAMES(text, line) t_names_line(text, __FILE__, line)

enum { PLANT_NONE, PLANT_NO_RELEASE, PLANT_NO_CONSUME };

typedef struct pk {
    int M, N, K;     /* C [M, N] = A [M, K] @ Bt [N, K]^T */
    int BN, slots;   /* tile columns (BM = 64, BK = 16), ring slots */
    int programs;    /* the persistent grid (clusters: CTAs) */
    int pingpong;    /* two consumer replicas taking turns on whole tiles */
    int cluster;     /* 2: pairs of CTAs take two tiles stacked along M, sharing B */
    int dynamic;     /* units claimed from a counter (launches: how many, on one counter) */
    loom_epilogue_kind epi;
    int part_rows, part_cols; /* LOOM_EPI_PARTS: a part's rows and columns (0: BN) */
    int plant;
} pk;

typedef struct pk_lines {
    int produce, wgmma, sync;
} pk_lines;

enum { BM = 64, BK = 16 };

static int64_t units_of(const pk *c) { return ((c->M + BM * c->cluster - 1) / (BM * c->cluster)) * ((c->N + c->BN - 1) / c->BN); }

/* The unit's first row (this CTA's tile of it) and first column, in grouped order. */
static void coords(loom_kernel *k, const pk *c, loom_val t, loom_val *m0, loom_val *n0)
{
    int64_t tm = (c->M + BM * c->cluster - 1) / (BM * c->cluster), tn = (c->N + c->BN - 1) / c->BN;
    loom_val b, tr, tc;
    loom_sched_grouped(k, t, tm, tn, 2, &b, &tr, &tc);
    *m0 = loom_mul(k, tr, I32(k, BM * c->cluster));
    if (c->cluster > 1)
        *m0 = loom_add(k, *m0, loom_mul(k, loom_cluster_rank(k), I32(k, BM)));
    *n0 = loom_mul(k, tc, I32(k, c->BN));
}

static loom_kernel *pk_build(const pk *c, pk_lines *L)
{
    int reps = c->pingpong ? 2 : 1;
    loom_kernel *k = loom_kernel_create("pipe_gemm", LOOM_PIPE_PRODUCER_WARPS + 4 * reps);
    if (c->cluster > 1)
        loom_kernel_set_cluster(k, c->cluster);
    loom_pipe p = loom_pipe_create(k);
    loom_val A = loom_arg_tensor(k, "A", LOOM_F16, LOOM_SHAPE2(c->M, c->K), LOOM_IN);
    loom_val Bt = loom_arg_tensor(k, "Bt", LOOM_F16, LOOM_SHAPE2(c->N, c->K), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F32, LOOM_SHAPE2(c->M, c->N), LOOM_OUT);
    loom_val counter = c->dynamic ? loom_arg_tensor(k, "counter", LOOM_I32, LOOM_SHAPE1(2), LOOM_INOUT) : LOOM_NONE;
    loom_ring_tile tiles[2] = {{LOOM_F16, LOOM_SHAPE2(BM, BK), 1, LOOM_SWIZZLE_32},
                               {LOOM_F16, LOOM_SHAPE2(c->BN, BK), 1, LOOM_SWIZZLE_32}};
    loom_ring ring = loom_ring_create(&p, c->slots, 1, 2, tiles);
    loom_sched sched = c->dynamic ? loom_sched_dynamic(&p, units_of(c), counter, 2, reps)
                                  : loom_sched_static(&p, units_of(c), 1);
    loom_pingpong pp = c->pingpong ? loom_pingpong_create(&p) : (loom_pingpong){0};
    bool parts = c->epi == LOOM_EPI_PARTS;
    loom_epilogue epi = loom_epilogue_create(&p, c->epi, C, LOOM_F32,
                                             LOOM_SHAPE2(parts ? c->part_rows : BM, c->part_cols ? c->part_cols : c->BN),
                                             (c->pingpong && c->epi == LOOM_EPI_STAGED) || parts ? reps : 1, 128);
    int64_t nk = (c->K + BK - 1) / BK;
    loom_val zero = I32(k, 0), one = I32(k, 1);

    loom_region_op pt = loom_producer_begin(k);
    {
        loom_sched_loop tl = loom_sched_begin(k, &sched, LOOM_SCHED_PRODUCER, LOOM_NONE, 1, &zero);
        loom_val m0, n0;
        coords(k, c, loom_sched_unit(&tl), &m0, &n0);
        loom_val it0 = loom_sched_arg(&tl, 0);
        loom_region_op kl = loom_for_begin(k, zero, I32(k, nk), one, 0, NULL);
        {
            loom_val kk = loom_for_iv(k, kl);
            L->produce = __LINE__; loom_val s = loom_ring_produce(k, &ring, loom_add(k, it0, kk), -1);
            loom_val k0 = loom_mul(k, kk, I32(k, BK));
            loom_val ao[2] = {m0, k0}, bo[2] = {n0, k0};
            loom_ring_load(k, &ring, s, 0, 0, A, ao);
            loom_ring_load_multicast(k, &ring, s, 1, 0, Bt, bo);
        }
        loom_for_end(k, kl, 0, NULL);
        loom_val next = loom_add(k, it0, I32(k, nk));
        loom_sched_end(k, &tl, &next);
    }
    loom_task_end(k, pt);

    loom_region_op ct = loom_consumers_begin(k, 4, reps);
    {
        loom_val rep = c->pingpong ? loom_pingpong_start(k, &pp) : LOOM_NONE;
        loom_val first = c->pingpong ? loom_mul(k, rep, I32(k, nk)) : zero;
        loom_sched_loop tl = loom_sched_begin(k, &sched, LOOM_SCHED_CONSUMER, rep, 1, &first);
        loom_val m0, n0;
        coords(k, c, loom_sched_unit(&tl), &m0, &n0);
        loom_val it0 = loom_sched_arg(&tl, 0);
        if (c->pingpong)
            loom_pingpong_mma_begin(k, &pp);
        loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(BM, c->BN));
        loom_region_op kl = loom_for_begin(k, zero, I32(k, nk), one, 1, &acc0);
        {
            loom_val it = loom_add(k, it0, loom_for_iv(k, kl));
            loom_val s = c->plant == PLANT_NO_CONSUME ? loom_ring_slot_of(k, &ring, it) : loom_ring_consume(k, &ring, it);
            loom_val a = loom_ring_view(k, &ring, s, 0, LOOM_NONE);
            loom_val b = loom_smem_trans(k, loom_ring_view(k, &ring, s, 1, LOOM_NONE));
            L->wgmma = __LINE__; loom_val acc = loom_wgmma(k, a, b, loom_for_arg(k, kl, 0));
            loom_wgmma_commit(k);
            loom_region_op w = loom_wgmma_wait(k, 0, 1, &acc);
            if (c->plant != PLANT_NO_RELEASE)
                loom_ring_release(k, &ring, s);
            loom_val r = loom_wgmma_result(k, w, 0);
            loom_for_end(k, kl, 1, &r);
        }
        if (c->pingpong)
            loom_pingpong_mma_end(k, &pp);
        loom_val o[2] = {m0, n0};
        if (parts)
            loom_epilogue_store_turn(k, &epi, o, loom_for_result(k, kl, 0), rep, LOOM_NONE);
        else
            loom_epilogue_store(k, &epi, o, loom_for_result(k, kl, 0),
                                c->pingpong && c->epi == LOOM_EPI_STAGED ? rep : LOOM_NONE);
        if (c->pingpong)
            loom_pingpong_tile_end(k, &pp);
        loom_val next = loom_add(k, it0, I32(k, reps * nk)); /* and the other replica's tile */
        loom_sched_end(k, &tl, &next);
        if (c->pingpong)
            loom_pingpong_finish(k, &pp, loom_sched_odd(k, &sched));
        loom_epilogue_finish(k, &epi);
    }
    loom_task_end(k, ct);
    return k;
}

static void fill(uint16_t *h, float *v, int n, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        h[i] = ir_f32_to_f16((float)((seed >> 8) % 2001) / 1000.0f - 1.0f);
        v[i] = ir_f16_to_f32(h[i]);
    }
}

/* Build and run c; returns the status, with C checked against the fma loop when OK. */
static loom_status pk_run(const pk *c, pk_lines *L)
{
    loom_kernel *k = pk_build(c, L);
    loom_status vs = loom_verify(k);
    if (vs != LOOM_OK) {
        snprintf(t_last_error, sizeof t_last_error, "%s", loom_kernel_errors(k));
        loom_kernel_destroy(k);
        return vs;
    }
    size_t na = (size_t)c->M * c->K, nb = (size_t)c->N * c->K, nc = (size_t)c->M * c->N;
    uint16_t *ah = malloc(na * 2), *bh = malloc(nb * 2);
    float *av = malloc(na * 4), *bv = malloc(nb * 4), *cc = malloc(nc * 4);
    cr_assert(ah && bh && av && bv && cc);
    fill(ah, av, (int)na, 11);
    fill(bh, bv, (int)nb, 22);
    memset(cc, 0xff, nc * 4); /* poisoned: NaN */
    int grid[3] = {c->programs, 1, 1};
    int32_t counter[2] = {0, 0};
    loom_status st = LOOM_OK;
    for (int e = 1; e <= (c->dynamic ? c->dynamic : 1) && st == LOOM_OK; e++) { /* launches on one counter */
        memset(cc, 0xff, nc * 4);
        targ args[] = {TA_BUF(ah, na * 2), TA_BUF(bh, nb * 2), TA_BUF(cc, nc * 4), TA_ARR(counter)};
        st = t_run(k, grid, args, c->dynamic ? 4 : 3);
        /* the last program to finish put the counter back */
        cr_expect(counter[0] == 0 && counter[1] == 0, "launch %d left the counter at %d, %d", e, counter[0], counter[1]);
    }
    loom_kernel_destroy(k);
    for (int m = 0; st == LOOM_OK && m < c->M; m++)
        for (int n = 0; n < c->N; n++) {
            float s = 0;
            for (int q = 0; q < c->K; q++)
                s = fmaf(av[m * c->K + q], bv[n * c->K + q], s);
            cr_assert_eq(cc[m * c->N + n], s, "slots=%d programs=%d pingpong=%d cluster=%d epi=%d: C[%d][%d] is %g, want %g",
                         c->slots, c->programs, c->pingpong, c->cluster, c->epi, m, n, cc[m * c->N + n], s);
        }
    free(ah);
    free(bh);
    free(av);
    free(bv);
    free(cc);
    return st;
}

static void pk_ok(pk c)
{
    if (c.cluster < 1)
        c.cluster = 1;
    pk_lines L;
    cr_assert_eq(pk_run(&c, &L), LOOM_OK, "slots=%d: %s", c.slots, t_last_error);
}

/* Rings of 2 to 5 slots; 3 programs over 12 tiles of 3 k steps each: every program's
 * ring uses run on across its tiles, so the phases wrap at every slot count. */
Test(pipe, ring_phases_wrap_across_persistent_tiles)
{
    for (int slots = 2; slots <= 5; slots++)
        pk_ok((pk){.M = 190, .N = 120, .K = 48, .BN = 32, .slots = slots, .programs = 3, .epi = LOOM_EPI_REGISTERS});
}

/* The staged epilogue: a TMA store that runs on during the next tile, waited for lazily. */
Test(pipe, staged_epilogue)
{
    pk_ok((pk){.M = 130, .N = 72, .K = 40, .BN = 32, .slots = 3, .programs = 2, .epi = LOOM_EPI_STAGED});
}

/* A tile in parts through two staging slots a replica: 4 parts of its rows a tile (the
 * slots in turn), 1 part (the same slot every tile, once the last tile's store read it),
 * ping-pong's two replicas each through slots of its own, and parts of its columns. */
Test(pipe, epilogue_in_parts)
{
    pk_ok((pk){.M = 190, .N = 64, .K = 40, .BN = 64, .slots = 3, .programs = 2, .epi = LOOM_EPI_PARTS,
               .part_rows = 64, .part_cols = 32});
    pk_ok((pk){.M = 190, .N = 72, .K = 40, .BN = 32, .slots = 3, .programs = 2, .epi = LOOM_EPI_PARTS,
               .part_rows = 16});
    pk_ok((pk){.M = 190, .N = 72, .K = 40, .BN = 32, .slots = 3, .programs = 2, .epi = LOOM_EPI_PARTS,
               .part_rows = 64});
    pk_ok((pk){.M = 190, .N = 64, .K = 48, .BN = 32, .slots = 4, .programs = 2, .pingpong = 1,
               .epi = LOOM_EPI_PARTS, .part_rows = 32});
}

/* Ping-pong: the replicas take the program's tiles alternately and hand the tensor cores
 * over; 5 tiles on 1 program (replica 0 has one more: the finish path) and 6 on 2, with
 * per-replica staging slots or one shared tile in turns. */
Test(pipe, pingpong_turns)
{
    pk_ok((pk){.M = 128, .N = 160, .K = 32, .BN = 64, .slots = 2, .programs = 1, .pingpong = 1,
               .epi = LOOM_EPI_REGISTERS});
    pk_ok((pk){.M = 190, .N = 64, .K = 48, .BN = 32, .slots = 4, .programs = 2, .pingpong = 1,
               .epi = LOOM_EPI_STAGED});
    pk_ok((pk){.M = 100, .N = 96, .K = 16, .BN = 32, .slots = 3, .programs = 2, .pingpong = 1, .epi = LOOM_EPI_TURNS});
}

/* Ping-pong at each count of tiles a program may get: odd (replica 0 has one more, and
 * replica 1 takes an empty turn in loom_pingpong_finish), even, and none (more programs
 * than tiles: only the start's hand-overs, taken by the finish).  Every hand-over is a
 * signal on one side and a wait on the other: a wait with no signal to match (replica 1
 * without its empty turn) is a deadlock report.  The epilogues take turns too, which the
 * shared staging tile of LOOM_EPI_TURNS needs. */
Test(pipe, pingpong_odd_and_even_tiles_per_program)
{
    static const struct {
        int M, N, programs; /* 64 x 32 tiles */
    } g[] = {
        {64, 32, 1},  /* 1 tile */
        {128, 32, 1}, /* 2 */
        {192, 32, 1}, /* 3 */
        {128, 64, 1}, /* 4 */
        {192, 32, 2}, /* 2 and 1 */
        {64, 64, 3},  /* 1, 1 and none */
    };
    static const loom_epilogue_kind kinds[] = {LOOM_EPI_REGISTERS, LOOM_EPI_STAGED, LOOM_EPI_TURNS};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        for (size_t e = 0; e < sizeof kinds / sizeof kinds[0]; e++)
            pk_ok((pk){.M = g[i].M, .N = g[i].N, .K = 32, .BN = 32, .slots = 2, .programs = g[i].programs,
                       .pingpong = 1, .epi = kinds[e]});
}

/* Clusters of 2: each CTA multicasts half of the B tile, releases go to both producers. */
Test(pipe, cluster_multicast)
{
    pk_ok((pk){.M = 250, .N = 64, .K = 48, .BN = 32, .slots = 2, .programs = 4, .cluster = 2,
               .epi = LOOM_EPI_REGISTERS});
    pk_ok((pk){.M = 128, .N = 96, .K = 32, .BN = 32, .slots = 3, .programs = 2, .cluster = 2,
               .epi = LOOM_EPI_STAGED});
}

/* The dynamic schedule: units claimed from a counter (one ahead) and handed to the
 * consumers through a shared ring of 2 slots, over several launches on one counter
 * (which each launch leaves at zero); more programs than units too. */
Test(pipe, dynamic_schedule_claims_every_unit_once)
{
    pk_ok((pk){.M = 190, .N = 120, .K = 48, .BN = 32, .slots = 3, .programs = 3, .dynamic = 3, .epi = LOOM_EPI_REGISTERS});
    pk_ok((pk){.M = 130, .N = 72, .K = 40, .BN = 32, .slots = 2, .programs = 5, .dynamic = 2, .epi = LOOM_EPI_STAGED});
    pk_ok((pk){.M = 64, .N = 32, .K = 16, .BN = 32, .slots = 2, .programs = 4, .dynamic = 1, .epi = LOOM_EPI_REGISTERS});
}

/* A consumer that never releases: the producer's wait for a free slot can never end;
 * the deadlock names the line of this file that called loom_ring_produce. */
Test(pipe, missing_release_is_a_deadlock_at_the_callers_line)
{
    pk c = {.M = 64, .N = 32, .K = 64, .BN = 32, .slots = 2, .programs = 1, .epi = LOOM_EPI_REGISTERS,
            .plant = PLANT_NO_RELEASE};
    pk_lines L;
    c.cluster = 1;
    cr_assert_eq(pk_run(&c, &L), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_expect(strstr(t_last_error, "deadlock") && NAMES(t_last_error, L.produce), "want a deadlock at line %d in:\n%s",
              L.produce, t_last_error);
}

/* A consumer that reads a slot without consuming it (no wait on its full barrier): the
 * interpreter reports the unsynchronized read at the wgmma's line. */
Test(pipe, read_without_consume_is_reported_at_the_callers_line)
{
    pk c = {.M = 64, .N = 32, .K = 32, .BN = 32, .slots = 2, .programs = 1, .epi = LOOM_EPI_REGISTERS,
            .plant = PLANT_NO_CONSUME};
    pk_lines L;
    c.cluster = 1;
    cr_assert_eq(pk_run(&c, &L), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_expect(NAMES(t_last_error, L.wgmma), "want line %d in:\n%s", L.wgmma, t_last_error);
}

/* Register budgets come from the kernel's warps: two consumer warp groups share what
 * the producer leaves (232 each), one gets no more than the cap. */
Test(pipe, consumer_budget_is_derived_from_the_warps)
{
    loom_kernel *k = loom_kernel_create("b", 12);
    cr_expect_eq(loom_pipe_consumer_regs(k), 232);
    loom_kernel_destroy(k);
    k = loom_kernel_create("b", 8);
    cr_expect_eq(loom_pipe_consumer_regs(k), LOOM_PIPE_CONSUMER_REGS_MAX);
    loom_kernel_destroy(k);
    k = loom_kernel_create("b", 20); /* four consumer warp groups: 118 -> 112 */
    cr_expect_eq(loom_pipe_consumer_regs(k), 112);
    loom_kernel_destroy(k);
}

/* Named-barrier ids are handed out in order; one past the last is refused at the line
 * that meets at it. */
Test(pipe, named_barriers_run_out_with_a_message)
{
    loom_kernel *k = loom_kernel_create("bars", 4);
    loom_pipe p = loom_pipe_create(k);
    loom_sync s[LOOM_PIPE_BARRIERS + 1];
    for (int i = 0; i <= LOOM_PIPE_BARRIERS; i++)
        s[i] = loom_sync_create(&p, 128);
    for (int i = 0; i < LOOM_PIPE_BARRIERS; i++)
        cr_expect_eq(s[i].id, i);
    loom_sync_wait(k, s[0], LOOM_NONE);
    int line = __LINE__; loom_sync_wait(k, s[LOOM_PIPE_BARRIERS], LOOM_NONE);
    cr_assert_eq(loom_verify(k), LOOM_ERR_VERIFY);
    cr_expect(NAMES(loom_kernel_errors(k), line), "want line %d in:\n%s", line, loom_kernel_errors(k));
    loom_kernel_destroy(k);
}

/* The layer's kernels lower like hand-written ones: every variant above assembles with
 * ptxas for sm_90a without spills, with the budgets the layer derived. */
Test(pipe, every_variant_lowers_and_assembles)
{
    pk variants[] = {
        {.M = 190, .N = 120, .K = 48, .BN = 32, .slots = 4, .programs = 3, .cluster = 1, .epi = LOOM_EPI_REGISTERS},
        {.M = 130, .N = 72, .K = 40, .BN = 32, .slots = 3, .programs = 2, .cluster = 1, .epi = LOOM_EPI_STAGED},
        {.M = 190, .N = 64, .K = 48, .BN = 32, .slots = 4, .programs = 2, .cluster = 1, .pingpong = 1, .epi = LOOM_EPI_STAGED},
        {.M = 100, .N = 96, .K = 16, .BN = 32, .slots = 3, .programs = 2, .cluster = 1, .pingpong = 1, .epi = LOOM_EPI_TURNS},
        {.M = 128, .N = 96, .K = 32, .BN = 32, .slots = 3, .programs = 2, .cluster = 2, .epi = LOOM_EPI_STAGED},
        {.M = 190, .N = 64, .K = 48, .BN = 32, .slots = 4, .programs = 2, .cluster = 1, .pingpong = 1,
         .epi = LOOM_EPI_PARTS, .part_rows = 32},
    };
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        pk_lines L;
        loom_kernel *k = pk_build(&variants[i], &L);
        char *ptx = NULL, err[1024];
        cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "variant %zu: %s", i, err);
        cr_expect(strstr(ptx, "sync.aligned.u32 232;"), "variant %zu: the consumers' budget", i); /* inc or dec */
        cr_expect(strstr(ptx, "setmaxnreg.dec.sync.aligned.u32 40"), "variant %zu: the producer's budget", i);
        t_ptxas_ok(ptx, "sm_90a", "pipe_gemm");
        free(ptx);
        loom_kernel_destroy(k);
    }
}

/* Forward progress.  Units 0 .. U0-1 publish through a flag, and every later unit waits
 * until all of them have: the shape of the IKBO stage-4 kernel (user tiles first, then
 * candidate tiles that add them).  With only one program resident at a time
 * (LOOM_INTERP_RESIDENT=1, a GPU whose SMs are held by another stream), the static
 * schedule deadlocks (program 0's later unit waits for program 1's early unit, and
 * program 1 cannot start before program 0 ends); the dynamic one cannot: a unit is only
 * waited on once a running program claimed it. */
static loom_kernel *progress_kernel(int dynamic, int64_t units, int64_t u0, int *wait_line)
{
    loom_kernel *k = loom_kernel_create("progress", LOOM_PIPE_PRODUCER_WARPS + 4);
    loom_pipe p = loom_pipe_create(k);
    loom_val out = loom_arg_tensor(k, "out", LOOM_I32, LOOM_SHAPE1(units), LOOM_OUT);
    loom_val flags = loom_arg_tensor(k, "flags", LOOM_I32, LOOM_SHAPE1(1), LOOM_INOUT);
    loom_val counter = loom_arg_tensor(k, "counter", LOOM_I32, LOOM_SHAPE1(2), LOOM_INOUT);
    loom_val epoch = loom_arg_scalar(k, "epoch", LOOM_I32);
    loom_sched s = dynamic ? loom_sched_dynamic(&p, units, counter, 2, 1) : loom_sched_static(&p, units, 1);
    loom_region_op pt = loom_producer_begin(k);
    {
        loom_sched_loop l = loom_sched_begin(k, &s, LOOM_SCHED_PRODUCER, LOOM_NONE, 0, NULL);
        loom_sched_end(k, &l, NULL);
    }
    loom_task_end(k, pt);
    loom_region_op ct = loom_consumers_begin(k, 4, 1);
    {
        loom_sched_loop l = loom_sched_begin(k, &s, LOOM_SCHED_CONSUMER, LOOM_NONE, 0, NULL);
        loom_val u = loom_sched_unit(&l), zero = I32(k, 0);
        loom_region_op early = loom_if_begin(k, loom_cmp(k, LOOM_LT, u, I32(k, u0)), 0);
        loom_store(k, out, &u, loom_splat(k, loom_add(k, u, I32(k, 1000)), LOOM_SHAPE1(1)), LOOM_NONE);
        loom_flag_add(k, flags, &zero, I32(k, 1));
        loom_else(k, early, 0, NULL);
        *wait_line = __LINE__; loom_flag_wait(k, flags, &zero, loom_mul(k, epoch, I32(k, u0)));
        loom_store(k, out, &u, loom_splat(k, u, LOOM_SHAPE1(1)), LOOM_NONE);
        loom_if_end(k, early, 0, NULL);
        loom_sched_end(k, &l, NULL);
    }
    loom_task_end(k, ct);
    return k;
}

static loom_status progress_run(int dynamic, int programs, int32_t *out, int64_t units, int64_t u0, int *line)
{
    loom_kernel *k = progress_kernel(dynamic, units, u0, line);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    int32_t flags[1] = {0}, counter[2] = {0, 0};
    int grid[3] = {programs, 1, 1};
    loom_status st = LOOM_OK;
    for (int e = 1; e <= 2 && st == LOOM_OK; e++) {
        for (int64_t i = 0; i < units; i++)
            out[i] = -1;
        targ args[] = {TA_BUF(out, (size_t)units * 4), TA_ARR(flags), TA_ARR(counter), TA_I32(e)};
        st = t_run(k, grid, args, 4);
    }
    loom_kernel_destroy(k);
    return st;
}

Test(pipe, dynamic_schedule_makes_progress_with_one_resident_program)
{
    enum { UNITS = 23, U0 = 7 };
    int32_t out[UNITS];
    int line = 0;
    setenv("LOOM_INTERP_RESIDENT", "1", 1);
    cr_assert_eq(progress_run(1, 4, out, UNITS, U0, &line), LOOM_OK, "%s", t_last_error);
    for (int i = 0; i < UNITS; i++)
        cr_expect_eq(out[i], i < U0 ? i + 1000 : i, "unit %d", i);
    /* the static schedule: program 0 waits for unit 1, which program 1 owns */
    cr_assert_eq(progress_run(0, 4, out, UNITS, U0, &line), LOOM_ERR_RUNTIME, "the static schedule deadlocks");
    cr_expect(strstr(t_last_error, "deadlock") && NAMES(t_last_error, line), "want a deadlock at line %d in:\n%s", line,
              t_last_error);
    /* every program resident: both schedules finish */
    unsetenv("LOOM_INTERP_RESIDENT");
    cr_assert_eq(progress_run(0, 4, out, UNITS, U0, &line), LOOM_OK, "%s", t_last_error);
    cr_assert_eq(progress_run(1, 4, out, UNITS, U0, &line), LOOM_OK, "%s", t_last_error);
}

/* ---------------------------------------------------------------- mainloop + epilogue visitor */

/* A warp-specialized GEMM with a fused epilogue, C = gelu_tanh(A @ Bt^T + bias) in f16,
 * written with loom_mainloop and loom_epilogue_visit: the kernel below is the user's
 * whole code (docs/dsl.md, "Writing a warp-specialized kernel", shows the same form).
 * Tiles of 64 x 64 over a [130, 72] output (partial tiles at both edges), 3 ring slots,
 * 2 persistent programs. */
enum { VM = 130, VN = 72, VK = 48, VBM = 64, VBN = 64, VBK = 16 };

/* gelu_tanh(acc + bias) in f16: the bias row at the tile's columns, in the accumulator's
 * column slice. */
static loom_val bias_gelu(void *bias, loom_kernel *k, loom_val acc, const loom_tile_at *t)
{
    loom_val x = loom_add(k, acc, loom_tile_row_vector(k, t, *(loom_val *)bias));
    loom_val u = loom_mul(k, loom_const_f(k, LOOM_F32, 0.7978845608028654),
                          loom_add(k, x, loom_mul(k, loom_const_f(k, LOOM_F32, 0.044715), loom_mul(k, loom_mul(k, x, x), x))));
    loom_val y = loom_mul(k, loom_mul(k, loom_const_f(k, LOOM_F32, 0.5), x),
                          loom_add(k, loom_const_f(k, LOOM_F32, 1.0), loom_tanh(k, u)));
    return loom_cast(k, y, LOOM_F16);
}

static loom_kernel *visit_gemm(void)
{
    loom_kernel *k = loom_kernel_create("visit_gemm", LOOM_PIPE_PRODUCER_WARPS + 4);
    loom_pipe p = loom_pipe_create(k);
    loom_val A = loom_arg_tensor(k, "A", LOOM_F16, LOOM_SHAPE2(VM, VK), LOOM_IN);
    loom_val Bt = loom_arg_tensor(k, "Bt", LOOM_F16, LOOM_SHAPE2(VN, VK), LOOM_IN);
    loom_val bias = loom_arg_tensor(k, "bias", LOOM_F32, LOOM_SHAPE1(VN), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F16, LOOM_SHAPE2(VM, VN), LOOM_OUT);
    loom_ring_tile tiles[2] = {{LOOM_F16, LOOM_SHAPE2(VBM, VBK), 1, LOOM_SWIZZLE_32},
                               {LOOM_F16, LOOM_SHAPE2(VBN, VBK), 1, LOOM_SWIZZLE_32}};
    loom_ring ring = loom_ring_create(&p, 3, 1, 2, tiles);
    int64_t tm = (VM + VBM - 1) / VBM, tn = (VN + VBN - 1) / VBN, nk = VK / VBK;
    loom_sched sched = loom_sched_static(&p, tm * tn, 1);
    loom_epilogue epi = loom_epilogue_create(&p, LOOM_EPI_STAGED, C, LOOM_F16, LOOM_SHAPE2(VBM, VBN), 1, 128);
    loom_mainloop ml = {.ring = &ring, .a_tile = 0, .b_tile = 1, .b_trans = 1, .rows = VBM, .cols = VBN, .steps = nk};
    loom_val zero = I32(k, 0), one = I32(k, 1), b, tr, tc;

    loom_region_op pt = loom_producer_begin(k);
    loom_sched_loop tl = loom_sched_begin(k, &sched, LOOM_SCHED_PRODUCER, LOOM_NONE, 1, &zero);
    loom_sched_grouped(k, loom_sched_unit(&tl), tm, tn, 2, &b, &tr, &tc);
    loom_val m0 = loom_mul(k, tr, I32(k, VBM)), n0 = loom_mul(k, tc, I32(k, VBN)), it0 = loom_sched_arg(&tl, 0);
    loom_region_op kl = loom_for_begin(k, zero, I32(k, nk), one, 0, NULL);
    loom_val kk = loom_for_iv(k, kl), k0 = loom_mul(k, kk, I32(k, VBK));
    loom_val s = loom_ring_produce(k, &ring, loom_add(k, it0, kk), -1);
    loom_ring_load(k, &ring, s, 0, 0, A, ((loom_val[]){m0, k0}));
    loom_ring_load(k, &ring, s, 1, 0, Bt, ((loom_val[]){n0, k0}));
    loom_for_end(k, kl, 0, NULL);
    loom_val next = loom_add(k, it0, loom_mainloop_uses(k, &ml));
    loom_sched_end(k, &tl, &next);
    loom_task_end(k, pt);

    loom_region_op ct = loom_consumers_begin(k, 4, 1);
    tl = loom_sched_begin(k, &sched, LOOM_SCHED_CONSUMER, LOOM_NONE, 1, &zero);
    loom_sched_grouped(k, loom_sched_unit(&tl), tm, tn, 2, &b, &tr, &tc);
    loom_tile_at t = {.m0 = loom_mul(k, tr, I32(k, VBM)), .n0 = loom_mul(k, tc, I32(k, VBN)), .rows = VBM, .cols = VBN};
    it0 = loom_sched_arg(&tl, 0);
    loom_val acc = loom_mainloop_run(k, &ml, it0, LOOM_NONE, LOOM_NONE, 0);
    acc = loom_mainloop_finish(k, &ml, acc, loom_mainloop_last(k, &ml, it0));
    loom_epilogue_visit(k, &epi, bias_gelu, &bias, acc, &t, LOOM_NONE, LOOM_NONE);
    next = loom_add(k, it0, loom_mainloop_uses(k, &ml));
    loom_sched_end(k, &tl, &next);
    loom_epilogue_finish(k, &epi);
    loom_task_end(k, ct);
    return k;
}

static double gelu_tanh_ref(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

/* On the interpreter, each element within the error model: the accumulator within
 * loom_f32_sum_error(K, sum |a b|) of the exact sum, the bias add one f32 rounding, GELU's
 * slope at most 1.13 (the error carried through it), its f32 evaluation a few ulps of x
 * (8 allowed), then the f16 rounding (loom_error_bound). */
Test(pipe, mainloop_and_epilogue_visitor_gemm_bias_gelu)
{
    loom_kernel *k = visit_gemm();
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    size_t na = (size_t)VM * VK, nb = (size_t)VN * VK, nc = (size_t)VM * VN;
    uint16_t *ah = malloc(na * 2), *bh = malloc(nb * 2), *ch = malloc(nc * 2);
    float *av = malloc(na * 4), *bv = malloc(nb * 4), bias[VN];
    cr_assert(ah && bh && ch && av && bv);
    fill(ah, av, (int)na, 5);
    fill(bh, bv, (int)nb, 6);
    for (int n = 0; n < VN; n++)
        bias[n] = (float)((n * 37) % 23 - 11) / 8.0f;
    memset(ch, 0xff, nc * 2);
    int grid[3] = {2, 1, 1};
    targ args[] = {TA_BUF(ah, na * 2), TA_BUF(bh, nb * 2), TA_ARR(bias), TA_BUF(ch, nc * 2)};
    cr_assert_eq(t_run(k, grid, args, 4), LOOM_OK, "%s", t_last_error);
    for (int m = 0; m < VM; m++)
        for (int n = 0; n < VN; n++) {
            double s = 0, mag = 0;
            for (int q = 0; q < VK; q++) {
                s += (double)av[m * VK + q] * bv[n * VK + q];
                mag += fabs((double)av[m * VK + q] * bv[n * VK + q]);
            }
            double x = s + bias[n], ref = gelu_tanh_ref(x);
            double ex = loom_f32_sum_error(VK, mag) + loom_ulp(LOOM_F32, x);
            double err = 1.13 * ex + 8 * loom_ulp(LOOM_F32, fabs(x) + ex);
            double got = ir_f16_to_f32(ch[m * VN + n]), bound = loom_error_bound(LOOM_F16, ref, err);
            cr_assert(fabs(got - ref) <= bound, "C[%d][%d] is %.8g, want %.8g within %.3g", m, n, got, ref, bound);
        }
    char *ptx = NULL, err[1024];
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    t_ptxas_ok(ptx, "sm_90a", "visit_gemm");
    free(ptx);
    loom_kernel_destroy(k);
    free(ah);
    free(bh);
    free(ch);
    free(av);
    free(bv);
}
