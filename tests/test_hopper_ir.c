/*
 * test_hopper_ir.c -- the Hopper machinery's type rules, whole-kernel checks and PTX.
 *
 * The interpreter's semantics of these ops are tested in test_hopper_interp.c; here:
 * every mistake the verifier catches statically is reported at the user's line, and each
 * op lowers to the instructions it promises (checked on the PTX text, which CI also
 * assembles with ptxas through `loomc emit --all`).
 */
#include "loom.h"
#include "testutil.h"
#include "gpu.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static char *ptx_of(loom_kernel *k)
{
    char *ptx = NULL, err[4096];
    size_t smem = 0;
    loom_status st = loom_compile_ptx(k, "sm_90a", &ptx, &smem, err, sizeof err);
    cr_assert_eq(st, LOOM_OK, "compile failed: %s", err);
    return ptx;
}

static char *template_ptx(const char *name, const char *shape, const char *config)
{
    const loom_template *t = loom_template_find(name);
    cr_assert_not_null(t);
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char err[512];
    cr_assert_eq(loom_params_parse(t->shape, t->nshape, shape, sh, err, sizeof err), 0, "%s", err);
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, config, cf, err, sizeof err), 0, "%s", err);
    loom_kernel *k = t->build(sh, cf, err, sizeof err);
    cr_assert_not_null(k, "%s", err);
    char *ptx = ptx_of(k);
    loom_kernel_destroy(k);
    return ptx;
}

OP_COVERED(smem_alloc)
OP_COVERED(smem_slot)
OP_COVERED(mbar_alloc)
OP_COVERED(mbar_expect)
OP_COVERED(mbar_arrive)
OP_COVERED(mbar_wait)
OP_COVERED(tma_load)
OP_COVERED(wgmma)
OP_COVERED(wgmma_commit)
OP_COVERED(wgmma_wait)
OP_COVERED(task)
Test(hopper_ptx, gemm_is_warp_specialized_with_tma_and_wgmma)
{
    char *p = template_ptx("gemm", "M=4096,N=4096,K=4096", "BM=128,BN=256,cwarps=8,tmastore=0");
    cr_expect(strstr(p, "setmaxnreg.dec.sync.aligned.u32 40;") != NULL, "producer gives registers back");
    cr_expect(strstr(p, "setmaxnreg.inc.sync.aligned.u32 232;") != NULL, "consumers take them");
    cr_expect(strstr(p, ".maxntid 384, 1, 1") != NULL);
    cr_expect(t_count(p, "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes") == 5,
              "one box of A and four 128-byte chunks of B per k step");
    cr_expect(strstr(p, "mbarrier.arrive.expect_tx.shared::cta.b64") != NULL);
    cr_expect(strstr(p, "mbarrier.try_wait.parity.shared::cta.b64") != NULL);
    cr_expect(t_count(p, "mbarrier.init.shared::cta.b64") == 8, "4 full and 4 empty barriers");
    cr_expect(t_count(p, "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16") == 4,
              "BK=64: four k16 steps, one m64 block per warp group");
    cr_expect(strstr(p, "wgmma.commit_group.sync.aligned;") != NULL);
    cr_expect(strstr(p, "wgmma.wait_group.sync.aligned 1;") != NULL);
    cr_expect(strstr(p, "wgmma.wait_group.sync.aligned 0;") != NULL);
    cr_expect(strstr(p, ".param .align 64 .b8 gemm_param_5[128]") != NULL,
              "TMA descriptors by value, after M, batch, A, B, C");
    cr_expect(t_count(p, "bar.sync") == 1, "the epilogue stores from the accumulator layout: no conversion");
    free(p);
}

/* One consumer warp group owning 128x128 tiles (two m64 blocks), the epilogue through
 * shared memory and TMA, and the tile's last slot given back in the asm of the wait that
 * frees it. */
Test(hopper_ptx, gemm_one_consumer_warp_group)
{
    char *p = template_ptx("gemm", "M=4096,N=4096,K=4096", "BM=128,BN=128");
    cr_expect(strstr(p, ".maxntid 256, 1, 1") != NULL, "a producer and one consumer warp group");
    cr_expect(strstr(p, "setmaxnreg.dec.sync.aligned.u32 40;") != NULL);
    cr_expect(strstr(p, "setmaxnreg.dec.sync.aligned.u32 232;") != NULL, "256 threads start with 255");
    cr_expect_eq(t_count(p, "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"), 8,
                 "two m64 blocks of four k16 steps");
    cr_expect_eq(t_count(p, "cvt.rn.f16x2.f32"), 64, "128 accumulators a thread, two a cvt");
    cr_expect_eq(t_count(p, "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"), 2,
                 "a 128x128 tile leaves in two 64-column TMA stores");
    cr_expect(strstr(p, "wgmma.wait_group.sync.aligned 0;\n\t@p mbarrier.arrive.shared::cta.b64") != NULL);
    cr_expect(t_count(p, "st.global") == 0);
    free(p);
}

Test(hopper_ptx, gemm_bf16_batched_uses_3d_boxes)
{
    char *p = template_ptx("gemm", "M=433,N=256,K=872,batch=4,dtype=bf16,odtype=f32,ashared=0", "BN=128,stages=3");
    cr_expect(strstr(p, "cp.async.bulk.tensor.3d.shared::cluster.global") != NULL);
    cr_expect(strstr(p, "m64n128k16.f32.bf16.bf16") != NULL);
    free(p);
}

OP_COVERED(smem_trans)
OP_COVERED(smem_load)
OP_COVERED(smem_store)
OP_COVERED(named_barrier)
OP_COVERED(fence_async)
OP_COVERED(tma_store)
OP_COVERED(tma_store_wait)
OP_COVERED(task_replica)
Test(hopper_ptx, staging_through_shared_memory_and_tma_store)
{
    loom_kernel *k = loom_kernel_create("stage", 8);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F16, LOOM_SHAPE2(128, 64), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", LOOM_F16, LOOM_SHAPE2(128, 64), LOOM_OUT);
    loom_val buf = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(64, 64), 2, LOOM_SWIZZLE_128);
    loom_region_op t = loom_task_begin(k, 4, 0, 2);
    {
        loom_val r = loom_task_replica(k);
        loom_val row = loom_mul(k, r, loom_const_i(k, LOOM_I32, 64));
        loom_val col = loom_const_i(k, LOOM_I32, 0);
        loom_val v = loom_load(k, x, ((loom_val[]){row, col}), LOOM_SHAPE2(64, 64), LOOM_NONE, 0.0);
        loom_val slot = loom_smem_slot(k, buf, r);
        loom_smem_store(k, slot, v);
        loom_val back = loom_smem_load(k, loom_smem_trans(k, slot));
        loom_smem_store(k, slot, loom_trans(k, back));
        loom_fence_async(k);
        loom_named_barrier(k, 0, 128);
        loom_tma_store(k, y, ((loom_val[]){row, col}), slot);
        loom_tma_store_wait(k, 0);
    }
    loom_task_end(k, t);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    char *p = ptx_of(k);
    cr_expect(strstr(p, "fence.proxy.async.shared::cta;") != NULL);
    cr_expect(strstr(p, "bar.sync 8, 128;") != NULL, "user barrier 0 is hardware barrier 8");
    cr_expect(strstr(p, "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") != NULL);
    cr_expect(strstr(p, "cp.async.bulk.wait_group.read 0;") != NULL);
    cr_expect(strstr(p, "st.shared") != NULL && strstr(p, "ld.shared") != NULL);
    free(p);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- static checks */

static void expect_error(loom_kernel *k, const char *needle, int line)
{
    cr_assert_eq(loom_verify(k), LOOM_ERR_VERIFY, "expected an error containing '%s'", needle);
    const char *e = loom_kernel_errors(k);
    cr_expect(strstr(e, needle) != NULL, "error text: %s", e);
    char at[64];
    snprintf(at, sizeof at, "test_hopper_ir.c:%d:", line);
    cr_expect(strstr(e, at) != NULL, "the error names line %d: %s", line, e);
}

Test(hopper_checks, tasks_must_fill_the_cta)
{
    loom_kernel *k = loom_kernel_create("t", 12);
    int line = __LINE__ + 1;
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_task_end(k, t);
    expect_error(k, "the tasks use 4 warps", line);
    loom_kernel_destroy(k);
}

Test(hopper_checks, register_budgets_must_fit)
{
    loom_kernel *k = loom_kernel_create("t", 12);
    int line = __LINE__ + 1;
    loom_region_op a = loom_task_begin(k, 4, 232, 1);
    loom_task_end(k, a);
    loom_region_op b = loom_task_begin(k, 8, 232, 1);
    loom_task_end(k, b);
    expect_error(k, "register budgets need", line);
    loom_kernel_destroy(k);
}

Test(hopper_checks, arrivals_must_match_the_arriving_tasks)
{
    loom_kernel *k = loom_kernel_create("t", 8);
    int line = __LINE__ + 1;
    loom_val bars = loom_mbar_alloc(k, 2, 1);
    loom_region_op t = loom_task_begin(k, 4, 0, 2);
    loom_mbar_arrive(k, bars, loom_const_i(k, LOOM_I32, 0));
    loom_task_end(k, t);
    expect_error(k, "expect 1 arrivals a phase, but 2 task replicas arrive", line);
    loom_kernel_destroy(k);
}

/* The hardware count of the barrier initialised by the n-th mbarrier.init (0-based): the
 * value of the mov into its count register, or the immediate. */
static long init_count(const char *p, int n)
{
    const char *at = p;
    for (int i = 0; i <= n; i++) {
        at = strstr(at, "mbarrier.init.shared::cta.b64 [");
        if (!at)
            return -1;
        at++;
    }
    const char *reg = strstr(at, "], ");
    if (!reg)
        return -1;
    reg += 3;
    char name[32];
    size_t len = strcspn(reg, ";");
    if (len >= sizeof name)
        return -1;
    memcpy(name, reg, len);
    name[len] = 0;
    if (name[0] != '%')
        return strtol(name, NULL, 10);
    char mov[64];
    snprintf(mov, sizeof mov, "mov.b32 \t%s, ", name);
    long v = -1;
    for (const char *q = p; (q = strstr(q, mov)) && q < at; q++)
        v = strtol(q + strlen(mov), NULL, 10);
    return v;
}

/* Replicas with a barrier each: the barrier index depends on loom_task_replica, so one
 * replica arrives a phase (count 1, four warps in hardware); counting both is also
 * accepted (every replica each phase, the model without turns). */
Test(hopper_checks, replicas_taking_turns_arrive_once_a_phase)
{
    for (int per_phase = 1; per_phase <= 2; per_phase++) {
        loom_kernel *k = loom_kernel_create("t", 8);
        loom_val bars = loom_mbar_alloc(k, 2, per_phase);
        loom_region_op t = loom_task_begin(k, 4, 0, 2);
        loom_val r = loom_task_replica(k);
        loom_mbar_arrive(k, bars, r);
        loom_mbar_wait(k, bars, r, loom_const_i(k, LOOM_I32, 0));
        loom_task_end(k, t);
        cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
        char *p = ptx_of(k);
        cr_expect_eq(init_count(p, 0), 4 * per_phase, "per phase %d: hardware count %ld", per_phase,
                     init_count(p, 0));
        free(p);
        loom_kernel_destroy(k);
    }
}

/* Turns taken through a loop: each replica walks every other use of a 2-slot ring, its
 * first use given by its replica index (the ping-pong GEMM's consumers). */
Test(hopper_checks, replicas_taking_turns_through_a_loop)
{
    loom_kernel *k = loom_kernel_create("t", 12);
    loom_val bars = loom_mbar_alloc(k, 2, 1);
    loom_region_op p = loom_task_begin(k, 4, 0, 1);
    {
        loom_val z = loom_const_i(k, LOOM_I32, 0);
        loom_region_op l = loom_for_begin(k, z, loom_const_i(k, LOOM_I32, 8), loom_const_i(k, LOOM_I32, 1), 0, NULL);
        loom_val it = loom_for_iv(k, l);
        loom_mbar_wait(k, bars, loom_ring_slot(k, it, 2), loom_ring_phase(k, it, 2));
        loom_for_end(k, l, 0, NULL);
    }
    loom_task_end(k, p);
    loom_region_op c = loom_task_begin(k, 4, 0, 2);
    {
        loom_val first = loom_task_replica(k);
        loom_region_op l = loom_for_begin(k, loom_const_i(k, LOOM_I32, 0), loom_const_i(k, LOOM_I32, 4),
                                          loom_const_i(k, LOOM_I32, 1), 1, &first);
        loom_val it = loom_for_arg(k, l, 0);
        loom_mbar_arrive(k, bars, loom_ring_slot(k, it, 2));
        loom_val next = loom_add(k, it, loom_const_i(k, LOOM_I32, 2));
        loom_for_end(k, l, 1, &next);
    }
    loom_task_end(k, c);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    char *ptx = ptx_of(k);
    cr_expect_eq(init_count(ptx, 0), 4, "one replica's four warps a phase: %ld", init_count(ptx, 0));
    free(ptx);
    loom_kernel_destroy(k);
    /* the same count with every replica arriving at the same index is an error */
    k = loom_kernel_create("t", 8);
    int line = __LINE__ + 1;
    bars = loom_mbar_alloc(k, 2, 1);
    c = loom_task_begin(k, 4, 0, 2);
    loom_mbar_arrive(k, bars, loom_const_i(k, LOOM_I32, 1));
    loom_task_end(k, c);
    expect_error(k, "expect 1 arrivals a phase, but 2 task replicas arrive", line);
    loom_kernel_destroy(k);
    /* a count that fits neither model names both */
    k = loom_kernel_create("t", 12);
    line = __LINE__ + 1;
    bars = loom_mbar_alloc(k, 2, 2);
    c = loom_task_begin(k, 4, 0, 3);
    loom_mbar_arrive(k, bars, loom_ring_slot(k, loom_task_replica(k), 2));
    loom_task_end(k, c);
    expect_error(k, "expect 2 arrivals a phase, but 3 task replicas arrive on them (1 where replicas take turns)",
                 line);
    loom_kernel_destroy(k);
}

/* The ping-pong GEMM: two consumer replicas of one warp group take turns on whole tiles,
 * handing over by signal and wait on named barriers; the empty barriers count one
 * replica's four warps; the last slot of a tile is given back inside the asm of the wait
 * that frees it. */
Test(hopper_ptx, gemm_pingpong_takes_turns)
{
    char *p = template_ptx("gemm", "M=4096,N=4096,K=4096,dtype=bf16,odtype=bf16", "BM=128,cwarps=8,consumers=1,BN=128,stages=5");
    cr_expect(t_count(p, "mbarrier.init.shared::cta.b64") == 10, "5 full and 5 empty barriers");
    cr_expect_eq(init_count(p, 0), 1, "full: the producer's expect");
    cr_expect_eq(init_count(p, 5), 4, "empty: one consumer replica's 4 warps a phase, got %ld", init_count(p, 5));
    cr_expect(t_count(p, "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16") == 8,
              "BK=64, BM=128 by one warp group: two m64 blocks of four k16 steps");
    /* two turns (mainloops: user barriers 0 and 1, hardware 8 and 9; epilogues: 10 and
     * 11), each handed over by a bar.arrive on one side and waited for by a bar.sync on
     * the other */
    for (int b = 8; b <= 11; b++) {
        char sync[32], arrive[32];
        snprintf(sync, sizeof sync, "bar.sync %d, 256;", b);
        snprintf(arrive, sizeof arrive, "bar.arrive %d, 256;", b);
        cr_expect(t_count(p, sync) >= 1 && t_count(p, arrive) >= 1, "barrier %d: a wait and a signal", b);
    }
    cr_expect(strstr(p, "wgmma.wait_group.sync.aligned 0;\n\t@p mbarrier.arrive.shared::cta.b64") != NULL,
              "the last slot given back right after the wait");
    cr_expect(strstr(p, "setmaxnreg.inc.sync.aligned.u32 232;") != NULL);
    free(p);
}

/* The epilogue through shared memory: each pair of columns is rounded and packed by one
 * cvt from the f32 accumulator and written with one 32-bit shared store, then the tile
 * leaves with TMA stores (one per 128-byte column chunk) that the next tile's epilogue
 * waits for. */
/* The dynamic schedule's hand-over word is touched only by threads that arrive on its
 * barriers: the producer's elected thread stores it, each consumer warp's lane 0 reads it
 * and passes it on with shfl.sync, and every lane-0 arrival comes after bar.warp.sync
 * (compute-sanitizer's racecheck reported the other lanes' accesses, bench/RESULTS.md,
 * session 14). */
Test(hopper_ptx, schedule_hand_over_is_touched_only_by_arriving_threads)
{
    char *p = template_ptx("ikbo_lce", "B=33,U=33,M=130,N=72,Ku=64,Kc=40", "BM=128,stages=3,ctas=6,trans=0,cluster=1");
    cr_expect(strstr(p, "@p ld.shared.b32 v, ["), "no lane-0 load of the hand-over word");
    cr_expect(strstr(p, "shfl.sync.idx.b32"), "the hand-over word is not passed on with shfl.sync");
    int syncs = t_count(p, "bar.warp.sync -1;"), arrivals = t_count(p, "\tmbarrier.arrive.shared::cta.b64 _, [");
    cr_expect(arrivals > 0 && syncs == arrivals, "%d lane-0 arrivals, %d warp syncs before them", arrivals, syncs);
    t_ptxas_ok(p, "sm_90a", "ikbo_lce trans=0 (dynamic schedule)");
    free(p);
}

Test(hopper_ptx, gemm_tma_store_epilogue)
{
    char *p = template_ptx("gemm", "M=4096,N=4096,K=4096,dtype=bf16,odtype=bf16", "BM=128,BN=256,cwarps=8,tmastore=1,stages=3");
    cr_expect_eq(t_count(p, "cvt.rn.bf16x2.f32"), 64, "128 accumulators a thread, two a cvt: %d",
                 t_count(p, "cvt.rn.bf16x2.f32"));
    cr_expect_eq(t_count(p, "st.shared.b32") + t_count(p, "st.shared.u32"), 64, "one 32-bit store a pair");
    cr_expect_eq(t_count(p, "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"), 4,
                 "a 128x256 tile in four 64-column chunks");
    cr_expect(strstr(p, "cp.async.bulk.wait_group.read 0;") != NULL);
    cr_expect(strstr(p, "fence.proxy.async.shared::cta;") != NULL);
    cr_expect(t_count(p, "st.global") == 0, "no store from registers");
    free(p);
    p = template_ptx("gemm", "M=4096,N=4096,K=4096,dtype=f16,odtype=f16", "BM=128,cwarps=8,consumers=1,BN=128,tmastore=1");
    cr_expect_eq(t_count(p, "cvt.rn.f16x2.f32"), 64);
    free(p);
}

Test(hopper_checks, expect_bytes_must_match_the_tma_loads)
{
    loom_kernel *k = loom_kernel_create("t", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F16, LOOM_SHAPE2(64, 64), LOOM_IN);
    loom_val buf = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(64, 64), 1, LOOM_SWIZZLE_128);
    loom_val bars = loom_mbar_alloc(k, 1, 1);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    int line = __LINE__ + 1;
    loom_mbar_expect(k, bars, z, 4096);
    loom_tma_load(k, x, ((loom_val[]){z, z}), buf, bars, z);
    loom_mbar_wait(k, bars, z, z);
    loom_task_end(k, t);
    expect_error(k, "expects 4096 bytes but the 1 TMA load of this block on the same barrier bring 8192", line);
    loom_kernel_destroy(k);
}

Test(hopper_checks, accumulator_read_before_the_wait)
{
    loom_kernel *k = loom_kernel_create("t", 4);
    loom_val out = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE2(64, 64), LOOM_OUT);
    loom_val a = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(64, 64), 1, LOOM_SWIZZLE_128);
    loom_val b = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(64, 64), 1, LOOM_SWIZZLE_128);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_val acc = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(64, 64));
    acc = loom_wgmma(k, a, b, acc);
    loom_wgmma_commit(k);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    int line = __LINE__ + 1;
    loom_store(k, out, ((loom_val[]){z, z}), acc, LOOM_NONE);
    loom_task_end(k, t);
    expect_error(k, "wgmma may still be writing", line);
    loom_kernel_destroy(k);
}

Test(hopper_checks, bad_operands_are_named_at_their_line)
{
    loom_kernel *k = loom_kernel_create("t", 4);
    int line = __LINE__ + 1;
    loom_val s = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(64, 32), 2, LOOM_SWIZZLE_128);
    cr_expect_eq(s, LOOM_NONE);
    expect_error(k, "with a 128-byte swizzle it must be a multiple of 128 bytes", line);
    loom_kernel_destroy(k);

    k = loom_kernel_create("t", 4);
    loom_val bars = loom_mbar_alloc(k, 1, 1);
    line = __LINE__ + 1;
    loom_mbar_wait(k, bars, loom_const_i(k, LOOM_I32, 0), loom_const_i(k, LOOM_I32, 0));
    expect_error(k, "only inside a task", line);
    loom_kernel_destroy(k);

    k = loom_kernel_create("t", 4);
    loom_val a = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(32, 64), 1, LOOM_SWIZZLE_128);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_val acc = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(32, 32));
    line = __LINE__ + 1;
    loom_wgmma(k, a, loom_smem_trans(k, a), acc);
    loom_task_end(k, t);
    expect_error(k, "M is 32; wgmma needs a multiple of 64 rows", line);
    loom_kernel_destroy(k);
}

/* A may be a register tile (tests/test_wgmma_regs.c runs it): the rule takes an f16/bf16
 * tile of a @ b's shape, and names what else it refuses at the builder's line. */
Test(hopper_checks, wgmma_takes_a_from_registers)
{
    loom_kernel *k = loom_kernel_create("t", 4);
    loom_val b = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(32, 16), 1, LOOM_SWIZZLE_32);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_val a = loom_splat(k, loom_const_f(k, LOOM_F16, 1), LOOM_SHAPE2(64, 32));
    loom_val acc = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(64, 16));
    loom_val r = loom_wgmma(k, a, b, acc);
    loom_wgmma_commit(k);
    loom_wgmma_wait(k, 0, 1, &r);
    loom_task_end(k, t);
    cr_expect_neq(r, LOOM_NONE);
    cr_expect_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    loom_kernel_destroy(k);

    /* an f32 tile: wgmma multiplies f16 or bf16 */
    k = loom_kernel_create("t", 4);
    b = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(32, 16), 1, LOOM_SWIZZLE_32);
    t = loom_task_begin(k, 4, 0, 1);
    a = loom_splat(k, loom_const_f(k, LOOM_F32, 1), LOOM_SHAPE2(64, 32));
    acc = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(64, 16));
    int line = __LINE__ + 1;
    r = loom_wgmma(k, a, b, acc);
    loom_task_end(k, t);
    cr_expect_eq(r, LOOM_NONE);
    expect_error(k, "op 'wgmma': a is f32[64x32] and b is ", line);
    expect_error(k, "both must be f16, both bf16, or each e4m3 or e5m2", line);
    loom_kernel_destroy(k);

    /* a tile of the wrong shape */
    k = loom_kernel_create("t", 4);
    b = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(32, 16), 1, LOOM_SWIZZLE_32);
    t = loom_task_begin(k, 4, 0, 1);
    a = loom_splat(k, loom_const_f(k, LOOM_F16, 1), LOOM_SHAPE2(64, 16));
    acc = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(64, 16));
    line = __LINE__ + 1;
    loom_wgmma(k, a, b, acc);
    loom_task_end(k, t);
    expect_error(k, "inner dims differ: a is f16[64x16]", line);
    loom_kernel_destroy(k);

    /* anything else is neither a view nor a register tile */
    k = loom_kernel_create("t", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F16, LOOM_SHAPE2(64, 32), LOOM_IN);
    b = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(32, 16), 1, LOOM_SWIZZLE_32);
    t = loom_task_begin(k, 4, 0, 1);
    acc = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(64, 16));
    line = __LINE__ + 1;
    loom_wgmma(k, x, b, acc);
    loom_task_end(k, t);
    expect_error(k, "a is tensor<f16[64x32]>; a shared-memory view (loom_smem_slot of a ring, or a ring of one "
                    "slot) or a register tile is needed", line);
    loom_kernel_destroy(k);
}

/* The whole warp-specialized GEMM template through the interpreter (CI has no GPU):
 * producer and consumer tasks, ring phases, TMA edges, the wgmma pipeline. */
Test(hopper_interp_template, gemm_runs_on_the_interpreter)
{
    const loom_template *t = loom_template_find("gemm");
    cr_assert_not_null(t);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    static const char *cases[][2] = {
        {"M=77,N=72,K=40,batch=3", "BM=64,cwarps=4,BN=64,stages=2"},
        {"M=130,N=64,K=200,dtype=bf16,odtype=f32", "BM=128,cwarps=8,BN=64,stages=3,ctas=2"},
        /* ping-pong: 3 tiles a CTA (replica 1 takes an empty turn after its last) */
        {"M=300,N=200,K=136", "BM=128,cwarps=8,consumers=1,BN=128,ctas=2"},
        {"M=77,N=72,K=40,batch=5,dtype=bf16,odtype=f32,ashared=0", "cwarps=8,consumers=1,BM=64,BN=64,stages=2,ctas=3"},
        {"M=200,N=256,K=72,batch=3", "cwarps=8,consumers=1,BM=64,BN=256,stages=3,ctas=4"},
        /* the epilogue through shared memory and a TMA store */
        {"M=130,N=200,K=72,dtype=bf16", "BM=128,BN=256,cwarps=8,tmastore=1,stages=2,ctas=2"},
        {"M=130,N=200,K=72", ""}, /* the default: one consumer warp group, 64x256 tiles, TMA store */
        {"M=77,N=72,K=40,batch=5,odtype=f32,ashared=0", "cwarps=8,consumers=1,BM=64,BN=64,stages=2,ctas=2,tmastore=1"},
        {"M=300,N=200,K=136,dtype=bf16", "BM=128,cwarps=8,consumers=1,BN=128,ctas=2,tmastore=1"},
        /* split: two replicas share each tile by rows and hand the staging buffer over */
        {"M=300,N=200,K=136", "BM=128,BN=256,cwarps=8,consumers=2,ctas=2,stages=2"},
        {"M=77,N=72,K=40,batch=5,dtype=bf16,odtype=f32,ashared=0", "BM=128,cwarps=8,consumers=2,BN=64,tmastore=1,ctas=2,stages=2"},
        {"M=200,N=256,K=72,batch=3", "cwarps=8,consumers=2,BM=256,BN=128,tmastore=1,ctas=3"},
        /* BK=32: A rows of one 64-byte swizzle span */
        {"M=130,N=72,K=200,dtype=bf16", "BM=128,BN=256,cwarps=8,BK=32,stages=6,ctas=2,tmastore=0"},
        /* clusters of two: tiles stacked along M sharing B; consecutive products sharing A
         * (an odd batch: the last pair's second product is past it) */
        {"M=200,N=256,K=72,batch=3", "BM=64,BN=128,cluster=2,ctas=4,stages=3"},
        {"M=77,N=8,K=100,batch=5", "BM=64,BN=64,cluster=2,share=1,ctas=4,stages=3"},
        {"M=130,N=72,K=40,batch=4,dtype=bf16", "cwarps=8,consumers=1,BM=64,BN=64,cluster=2,share=1,ctas=2,tmastore=1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
        char err[512], rep[512];
        cr_assert_eq(loom_params_parse(t->shape, t->nshape, cases[i][0], sh, err, sizeof err), 0, "%s", err);
        cr_assert_eq(loom_params_parse(t->config, t->nconfig, cases[i][1], cf, err, sizeof err), 0, "%s", err);
        loom_status st = loom_template_check(rt, t, sh, cf, 11 + i, rep, sizeof rep);
        cr_expect_eq(st, LOOM_OK, "%s | %s: %s", cases[i][0], cases[i][1], rep);
    }
    loom_runtime_destroy(rt);
}

/* The ping-pong GEMM on the interpreter at each count of tiles a program may get (the
 * replicas take them alternately): odd, where replica 1 takes an empty turn at the end,
 * even, and none; the hand-overs must balance or the interpreter reports a deadlock. */
Test(hopper_interp_template, gemm_pingpong_odd_and_even_tiles_per_program)
{
    const loom_template *t = loom_template_find("gemm");
    cr_assert_not_null(t);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    static const char *cases[][2] = {
        {"M=128,N=128,K=64", "BM=128,cwarps=8,consumers=1,BN=128,ctas=1"},          /* 1 tile */
        {"M=128,N=128,K=64", "BM=128,cwarps=8,consumers=1,BN=128,ctas=2"},          /* 1 and none */
        {"M=256,N=128,K=64", "BM=128,cwarps=8,consumers=1,BN=128,ctas=1"},          /* 2 */
        {"M=300,N=200,K=136", "BM=128,cwarps=8,consumers=1,BN=128,ctas=2"},         /* 3 each */
        {"M=300,N=200,K=136", "BM=128,cwarps=8,consumers=1,BN=128,ctas=3,tmastore=1"}, /* 2 each */
        {"M=300,N=200,K=136", "BM=128,cwarps=8,consumers=1,BN=128,ctas=4,stages=2"}, /* 2, 2, 1, 1 */
        {"M=200,N=192,K=40,batch=2", "cwarps=8,consumers=1,BM=64,BN=64,stages=2,ctas=5,tmastore=1"}, /* 5 or 4 */
        {"M=384,N=256,K=72", "BM=128,cwarps=8,consumers=1,BN=128,ctas=1,tmastore=1"}, /* 6 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
        char err[512], rep[512];
        cr_assert_eq(loom_params_parse(t->shape, t->nshape, cases[i][0], sh, err, sizeof err), 0, "%s", err);
        cr_assert_eq(loom_params_parse(t->config, t->nconfig, cases[i][1], cf, err, sizeof err), 0, "%s", err);
        loom_status st = loom_template_check(rt, t, sh, cf, 31 + i, rep, sizeof rep);
        cr_expect_eq(st, LOOM_OK, "%s | %s: %s", cases[i][0], cases[i][1], rep);
    }
    loom_runtime_destroy(rt);
}

/* The ptxas route of the module load (runtime/link.c): a setmaxnreg kernel compiled as a
 * whole program to a cubin the disk cache can keep; LOOM_PTXAS turns it off or names
 * another ptxas; ptxas's messages come back when it fails. */
Test(hopper_ptx, ptxas_compiles_setmaxnreg_kernels_whole)
{
    if (!t_find_ptxas())
        cr_skip_test("no ptxas on this machine");
    char *p = template_ptx("gemm", "M=512,N=512,K=512", "BM=128,BN=128,cwarps=8,consumers=1");
    cr_assert(strstr(p, "setmaxnreg") != NULL);
    char err[8192];
    void *cubin = NULL;
    size_t n = 0;
    cr_assert_eq(rt_ptxas_compile(p, "sm_90a", &cubin, &n, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect(n > 64 && !memcmp(cubin, "\x7f" "ELF", 4), "a cubin is an ELF image");
    free(cubin);

    setenv("LOOM_PTXAS", "0", 1);
    cr_expect_eq(rt_ptxas_compile(p, "sm_90a", &cubin, &n, err, sizeof err), LOOM_ERR_UNSUPPORTED);
    cr_expect(strstr(err, "LOOM_PTXAS=0"), "%s", err);
    setenv("LOOM_PTXAS", "/nonexistent/ptxas", 1);
    cr_expect_eq(rt_ptxas_compile(p, "sm_90a", &cubin, &n, err, sizeof err), LOOM_ERR_UNSUPPORTED);
    cr_expect(strstr(err, "/nonexistent/ptxas"), "%s", err);
    cr_expect_null(cubin);
    unsetenv("LOOM_PTXAS");

    cr_expect_eq(rt_ptxas_compile(".version 8.0\n.target sm_90a\nnot ptx\n", "sm_90a", &cubin, &n, err, sizeof err),
                 LOOM_ERR_COMPILE);
    cr_expect(strstr(err, "failed (exit status") && strstr(err, "syntax error"), "%s", err);
    free(p);
}
