/*
 * test_hopper_interp.c -- the interpreter's Hopper machinery (include/loom_hopper.h).
 *
 * Each op group is run through the interpreter and its result checked against plain C:
 * shared-memory views (slots, transposed views, zeroed per CTA), mbarrier phases and
 * parities, arrivals and expected bytes, named barriers ordering two tasks, per-replica
 * values, TMA boxes with zero fill and stores that skip the outside, wgmma against a C
 * fma loop.  Then a whole warp-specialized GEMM (a producer task feeding consumer tasks
 * through a ring) at odd shapes, bit for bit against a C matmul, and the faults the
 * interpreter must name with their source lines: a deadlock (which task waits on which
 * barrier at which phase), a read of a slot no wait made visible, a write-after-read
 * race, an arrival overflow, bytes no expect announced, a missing fence.
 */
#include "ir.h"
#include "testutil.h"

#define I32(k, v) loom_const_i(k, LOOM_I32, v)

/* "test_hopper_interp.c:123" for a line of this file, as messages name it. */
static const char *at(int line)
{
    static char buf[8][96];
    static int next;
    const char *base = strrchr(__FILE__, '/');
    char *b = buf[next++ & 7];
    snprintf(b, sizeof buf[0], "%s:%d", base ? base + 1 : __FILE__, line);
    return b;
}

/* Does the last error contain s, once this file's directory is dropped from the paths
 * in it (builder calls record __FILE__, which may be absolute)? */
static int has(const char *s)
{
    static char norm[sizeof t_last_error];
    const char *base = strrchr(__FILE__, '/');
    size_t dl = base ? (size_t)(base + 1 - __FILE__) : 0, n = 0;
    for (const char *p = t_last_error; *p && n + 1 < sizeof norm;)
        if (dl && strncmp(p, __FILE__, dl) == 0)
            p += dl;
        else
            norm[n++] = *p++;
    norm[n] = 0;
    return strstr(norm, s) != NULL;
}

/* "task at test_hopper_interp.c:L (replica r)" */
static const char *task_at(int line, int replica)
{
    static char buf[4][128];
    static int next;
    char *b = buf[next++ & 3];
    snprintf(b, sizeof buf[0], "task at %s (replica %d)", at(line), replica);
    return b;
}

static void fill_f32(float *x, int n, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
    }
}

/* Random values in [-1, 1] rounded to f16 or bf16: host bits and the values they hold. */
static void fill_half(loom_dtype dt, uint16_t *h, float *v, int n, unsigned seed)
{
    fill_f32(v, n, seed);
    for (int i = 0; i < n; i++) {
        h[i] = dt == LOOM_F16 ? ir_f32_to_f16(v[i]) : ir_f32_to_bf16(v[i]);
        v[i] = dt == LOOM_F16 ? ir_f16_to_f32(h[i]) : ir_bf16_to_f32(h[i]);
    }
}

/* ================================================================ shared memory */

OP_COVERED(smem_alloc)
OP_COVERED(smem_slot)
OP_COVERED(smem_trans)
OP_COVERED(smem_load)
OP_COVERED(smem_store)

/* Slots, transposed views both ways, an untouched (zero) slot. */
Test(hopper_interp, smem_views_round_trip)
{
    loom_kernel *k = loom_kernel_create("smem", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(8, 16), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE3(4, 8, 16), LOOM_OUT);
    loom_val ot = loom_arg_tensor(k, "ot", LOOM_F32, LOOM_SHAPE2(16, 8), LOOM_OUT);
    loom_val ring = loom_smem_alloc(k, LOOM_F32, LOOM_SHAPE2(8, 16), 3, LOOM_SWIZZLE_NONE);
    loom_val z = I32(k, 0);
    loom_val xt = loom_load(k, x, ((loom_val[]){z, z}), LOOM_SHAPE2(8, 16), LOOM_NONE, 0);
    loom_val s0 = loom_smem_slot(k, ring, I32(k, 0)), s1 = loom_smem_slot(k, ring, I32(k, 1));
    loom_val s2 = loom_smem_slot(k, ring, I32(k, 2));
    loom_smem_store(k, s1, xt);
    loom_smem_store(k, loom_smem_trans(k, s2), loom_trans(k, xt)); /* x again, through a transposed view */
    loom_val outs[4] = {loom_smem_load(k, s1), loom_smem_load(k, s0), loom_smem_load(k, s2),
                        loom_smem_load(k, loom_smem_trans(k, loom_smem_trans(k, s1)))};
    for (int i = 0; i < 4; i++)
        loom_store(k, o, ((loom_val[]){I32(k, i), z, z}), outs[i], LOOM_NONE);
    loom_store(k, ot, ((loom_val[]){z, z}), loom_smem_load(k, loom_smem_trans(k, s1)), LOOM_NONE);

    float xs[8][16], os[4][8][16], ots[16][8];
    fill_f32(&xs[0][0], 128, 7);
    memset(os, 0xff, sizeof os);
    memset(ots, 0xff, sizeof ots);
    targ args[] = {TA_ARR(xs), TA_ARR(os), TA_ARR(ots)};
    T_RUN_OK(k, NULL, args, 3);
    for (int r = 0; r < 8; r++)
        for (int c = 0; c < 16; c++) {
            cr_assert_eq(os[0][r][c], xs[r][c], "slot 1 at %d,%d", r, c);
            cr_assert_eq(os[1][r][c], 0.0f, "an unwritten slot reads zero");
            cr_assert_eq(os[2][r][c], xs[r][c], "stored through a transposed view at %d,%d", r, c);
            cr_assert_eq(os[3][r][c], xs[r][c], "transposed twice at %d,%d", r, c);
            cr_assert_eq(ots[c][r], xs[r][c], "read through a transposed view at %d,%d", c, r);
        }
    loom_kernel_destroy(k);
}

/* Each CTA gets its own zeroed shared memory: CTA 1 does not see what CTA 0 stored. */
Test(hopper_interp, smem_is_zeroed_per_cta)
{
    loom_kernel *k = loom_kernel_create("smem_cta", 4);
    loom_val o = loom_arg_tensor(k, "o", LOOM_BF16, LOOM_SHAPE2(2, 32), LOOM_OUT);
    loom_val ring = loom_smem_alloc(k, LOOM_BF16, LOOM_SHAPE1(32), 1, LOOM_SWIZZLE_NONE);
    loom_val pid = loom_program_id(k, 0);
    loom_region_op i = loom_if_begin(k, loom_cmp(k, LOOM_EQ, pid, I32(k, 0)), 0);
    loom_smem_store(k, ring, loom_splat(k, loom_const_f(k, LOOM_BF16, 1.0 / 3), LOOM_SHAPE1(32)));
    loom_if_end(k, i, 0, NULL);
    loom_store(k, o, ((loom_val[]){pid, I32(k, 0)}), loom_smem_load(k, ring), LOOM_NONE);
    uint16_t os[2][32];
    memset(os, 0xff, sizeof os);
    targ args[] = {TA_ARR(os)};
    T_RUN_OK(k, ((int[]){2, 1, 1}), args, 1);
    for (int c = 0; c < 32; c++) {
        cr_assert_eq(os[0][c], ir_f32_to_bf16(1.0f / 3), "CTA 0 reads its store, rounded to bf16");
        cr_assert_eq(os[1][c], 0, "CTA 1 starts from zeroed shared memory");
    }
    loom_kernel_destroy(k);
}

/* A slot index outside the ring: LOOM_ERR_BOUNDS at the smem_slot's line. */
Test(hopper_interp, smem_slot_out_of_range)
{
    for (int bad = -1; bad <= 3; bad += 4) {
        loom_kernel *k = loom_kernel_create("smem_oob", 4);
        loom_val si = loom_arg_scalar(k, "si", LOOM_I32);
        loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE1(16), LOOM_OUT);
        loom_val ring = loom_name(k, loom_smem_alloc(k, LOOM_F32, LOOM_SHAPE1(16), 3, LOOM_SWIZZLE_NONE), "ring");
        int line = __LINE__; loom_val v = loom_smem_slot(k, ring, si);
        loom_store(k, o, ((loom_val[]){I32(k, 0)}), loom_smem_load(k, v), LOOM_NONE);
        float os[16];
        targ args[] = {TA_I32(bad), TA_ARR(os)};
        cr_assert_eq(t_run(k, NULL, args, 2), LOOM_ERR_BOUNDS, "slot %d: %s", bad, t_last_error);
        cr_expect(has(at(line)) && has("op 'smem_slot'") && has("%ring.") && has("3 slots"), "%s",
                  t_last_error);
        loom_kernel_destroy(k);
    }
}

/* ================================================================ tasks, named barriers */

OP_COVERED(task)
OP_COVERED(task_replica)
OP_COVERED(named_barrier)
OP_COVERED(named_barrier_arrive)

/* Replicas run the same ops with their own values: each computes 10*r + 7, all meet at a
 * named barrier (so their runs interleave), then each stores its own value. */
Test(hopper_interp, replicas_have_their_own_values)
{
    loom_kernel *k = loom_kernel_create("replicas", 12);
    loom_val o = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(3), LOOM_OUT);
    loom_val seven = I32(k, 7); /* top level: shared by every replica */
    loom_region_op t = loom_task_begin(k, 4, 0, 3);
    loom_val rep = loom_task_replica(k);
    loom_val v = loom_add(k, loom_mul(k, rep, I32(k, 10)), seven);
    loom_named_barrier(k, 0, 3 * 4 * 32);
    loom_store(k, o, &rep, loom_splat(k, v, LOOM_SHAPE1(1)), LOOM_NONE);
    loom_task_end(k, t);
    int32_t os[3] = {-1, -1, -1};
    targ args[] = {TA_ARR(os)};
    T_RUN_OK(k, NULL, args, 1);
    for (int r = 0; r < 3; r++)
        cr_assert_eq(os[r], 10 * r + 7, "replica %d stored %d", r, os[r]);
    loom_kernel_destroy(k);
}

/* Two tasks: the first waits at named barrier 1 and then reads what the second stored
 * before reaching it.  Without the barrier blocking, the first would read zeros. */
static loom_kernel *nb_kernel(int threads_a, int threads_b, int *line_a, int *line_b, int *ta, int *tb)
{
    loom_kernel *k = loom_kernel_create("named", 8);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(64), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE1(64), LOOM_OUT);
    loom_val buf = loom_smem_alloc(k, LOOM_F32, LOOM_SHAPE1(64), 1, LOOM_SWIZZLE_NONE);
    loom_val z = I32(k, 0);
    *ta = __LINE__; loom_region_op a = loom_task_begin(k, 4, 0, 1);
    *line_a = __LINE__; loom_named_barrier(k, 1, threads_a);
    loom_store(k, o, &z, loom_smem_load(k, buf), LOOM_NONE);
    loom_task_end(k, a);
    *tb = __LINE__; loom_region_op b = loom_task_begin(k, 4, 0, 1);
    loom_smem_store(k, buf, loom_load(k, x, &z, LOOM_SHAPE1(64), LOOM_NONE, 0));
    *line_b = __LINE__; loom_named_barrier(k, 1, threads_b);
    loom_task_end(k, b);
    return k;
}

Test(hopper_interp, named_barrier_orders_tasks)
{
    int la, lb, ta, tb;
    loom_kernel *k = nb_kernel(256, 256, &la, &lb, &ta, &tb);
    float xs[64], os[64];
    fill_f32(xs, 64, 3);
    memset(os, 0, sizeof os);
    targ args[] = {TA_ARR(xs), TA_ARR(os)};
    T_RUN_OK(k, NULL, args, 2);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(os[i], xs[i], "element %d: the reader ran before the writer's store", i);
    loom_kernel_destroy(k);
}

/* The writer only signals (arrive) after its store; the reader waits (sync) before its
 * load, so it sees the values; the writer does not wait for the reader.  The PTX says
 * bar.arrive for the signal and bar.sync for the wait (hardware ids are 8 + id). */
Test(hopper_interp, named_barrier_arrive_signals_without_waiting)
{
    loom_kernel *k = loom_kernel_create("arrive", 8);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(64), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE1(64), LOOM_OUT);
    loom_val buf = loom_smem_alloc(k, LOOM_F32, LOOM_SHAPE1(64), 1, LOOM_SWIZZLE_NONE);
    loom_val z = I32(k, 0);
    loom_region_op a = loom_task_begin(k, 4, 0, 1);
    loom_named_barrier(k, 2, 256);
    loom_store(k, o, &z, loom_smem_load(k, buf), LOOM_NONE);
    loom_task_end(k, a);
    loom_region_op b = loom_task_begin(k, 4, 0, 1);
    loom_smem_store(k, buf, loom_load(k, x, &z, LOOM_SHAPE1(64), LOOM_NONE, 0));
    loom_named_barrier_arrive(k, 2, 256);
    loom_task_end(k, b);
    float xs[64], os[64];
    fill_f32(xs, 64, 5);
    memset(os, 0, sizeof os);
    targ args[] = {TA_ARR(xs), TA_ARR(os)};
    T_RUN_OK(k, NULL, args, 2);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(os[i], xs[i], "element %d: the reader ran before the writer's store", i);
    char *ptx = NULL;
    size_t smem;
    if (loom_compile_ptx(k, "sm_90a", &ptx, &smem, NULL, 0) == LOOM_OK) {
        cr_expect(strstr(ptx, "bar.arrive 10, 256;") && strstr(ptx, "bar.sync 10, 256;"), "PTX:\n%s", ptx);
        free(ptx);
    }
    loom_kernel_destroy(k);
}

/* An arrival that no bar.sync completes is left in the barrier at exit: reported. */
Test(hopper_interp, named_barrier_left_half_arrived_at_exit)
{
    loom_kernel *k = loom_kernel_create("stray", 8);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE1(64), LOOM_OUT);
    loom_val z = I32(k, 0);
    loom_region_op a = loom_task_begin(k, 4, 0, 1);
    loom_store(k, o, &z, loom_splat(k, loom_const_f(k, LOOM_F32, 1), LOOM_SHAPE1(64)), LOOM_NONE);
    loom_task_end(k, a);
    loom_region_op b = loom_task_begin(k, 4, 0, 1);
    loom_named_barrier_arrive(k, 3, 256); /* the other task never waits on it */
    loom_task_end(k, b);
    float os[64];
    targ args[] = {TA_ARR(os)};
    cr_assert_eq(t_run(k, NULL, args, 1), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_expect(strstr(t_last_error, "ends with named barrier 3 holding 128 of its 256 threads"), "%s", t_last_error);
    loom_kernel_destroy(k);
}

/* 256 threads reach a barrier that waits for 384: both tasks are reported. */
Test(hopper_interp, named_barrier_deadlock)
{
    int la, lb, ta, tb;
    loom_kernel *k = nb_kernel(384, 384, &la, &lb, &ta, &tb);
    float xs[64] = {0}, os[64];
    targ args[] = {TA_ARR(xs), TA_ARR(os)};
    cr_assert_eq(t_run(k, NULL, args, 2), LOOM_ERR_RUNTIME, "%s", t_last_error);
    char want[256];
    snprintf(want, sizeof want, "%s waits on named barrier 1 at %s, threads arrived 256 of 384",
             task_at(ta, 0), at(la));
    cr_expect(has("deadlock") && has(want), "want \"%s\" in:\n%s", want, t_last_error);
    snprintf(want, sizeof want, "%s waits on named barrier 1 at %s", task_at(tb, 0), at(lb));
    cr_expect(has(want), "want \"%s\" in:\n%s", want, t_last_error);
    loom_kernel_destroy(k);
}

/* Two uses of one barrier id with different thread counts. */
Test(hopper_interp, named_barrier_thread_count_mismatch)
{
    int la, lb, ta, tb;
    loom_kernel *k = nb_kernel(256, 384, &la, &lb, &ta, &tb);
    float xs[64] = {0}, os[64];
    targ args[] = {TA_ARR(xs), TA_ARR(os)};
    cr_assert_eq(t_run(k, NULL, args, 2), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_expect(has(at(lb)) && has("op 'named_barrier'") && has(task_at(tb, 0)) && has("384") &&
                  has("256"),
              "%s", t_last_error);
    loom_kernel_destroy(k);
}

/* ================================================================ mbarriers */

OP_COVERED(mbar_alloc)
OP_COVERED(mbar_arrive)
OP_COVERED(mbar_wait)
OP_COVERED(mbar_expect)

/* One task walks a barrier through its phases: a fresh barrier passes a wait on parity
 * 1; each arrival (arrivals = 1) completes a phase, flipping the parity that passes (a
 * wait on parity P passes unless P is the parity of the phase in progress).
 * With `stall`, a last wait on a parity whose phase has not come deadlocks. */
static loom_kernel *phase_kernel(bool stall, int *tline, int *wline)
{
    loom_kernel *k = loom_kernel_create("phases", 4);
    loom_val o = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(4), LOOM_OUT);
    loom_val bars = loom_name(k, loom_mbar_alloc(k, 2, 1), "bars");
    loom_val zero = I32(k, 0), one = I32(k, 1);
    *tline = __LINE__; loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_mbar_wait(k, bars, one, one); /* fresh: parity 1 passes */
    loom_store(k, o, &zero, loom_splat(k, I32(k, 1), LOOM_SHAPE1(1)), LOOM_NONE);
    loom_mbar_arrive(k, bars, zero); /* phase 0 completes */
    loom_mbar_wait(k, bars, zero, zero);
    loom_store(k, o, &one, loom_splat(k, I32(k, 2), LOOM_SHAPE1(1)), LOOM_NONE);
    loom_mbar_arrive(k, bars, zero); /* phase 1 completes */
    loom_mbar_wait(k, bars, zero, one);
    loom_mbar_wait(k, bars, zero, one); /* still passes: phase 2 (parity 0) is in progress */
    loom_store(k, o, ((loom_val[]){I32(k, 2)}), loom_splat(k, I32(k, 3), LOOM_SHAPE1(1)), LOOM_NONE);
    if (stall) {
        loom_mbar_wait(k, bars, one, one); /* barrier 1 is still fresh: fine */
        *wline = __LINE__; loom_mbar_wait(k, bars, one, zero); /* nobody arrives on barrier 1 */
    }
    loom_store(k, o, ((loom_val[]){I32(k, 3)}), loom_splat(k, I32(k, 4), LOOM_SHAPE1(1)), LOOM_NONE);
    loom_task_end(k, t);
    return k;
}

Test(hopper_interp, mbar_phases_and_parity)
{
    int tl, wl;
    loom_kernel *k = phase_kernel(false, &tl, &wl);
    int32_t os[4] = {0};
    targ args[] = {TA_ARR(os)};
    T_RUN_OK(k, NULL, args, 1);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(os[i], i + 1, "store %d after the waits", i);
    loom_kernel_destroy(k);
}

Test(hopper_interp, mbar_wait_deadlock_names_task_barrier_phase)
{
    int tl, wl;
    loom_kernel *k = phase_kernel(true, &tl, &wl);
    int32_t os[4] = {0};
    targ args[] = {TA_ARR(os)};
    cr_assert_eq(t_run(k, NULL, args, 1), LOOM_ERR_RUNTIME, "%s", t_last_error);
    char want[300];
    snprintf(want, sizeof want,
             "%s waits on barrier %%bars.0[1] for phase parity 0 at %s, barrier completed 0 "
             "phases (arrivals 0 of 1, bytes pending 0)",
             task_at(tl, 0), at(wl));
    cr_expect(has("deadlock in program (0,0,0)") && has(want), "want \"%s\" in:\n%s", want,
              t_last_error);
    cr_expect_eq(os[2], 3, "the ops before the deadlock ran");
    cr_expect_eq(os[3], 0, "the op after the deadlock did not");
    loom_kernel_destroy(k);
}

/* Arrivals = 2 from a task of two replicas: each waits for the other's arrival.  With
 * `only_first`, replica 1 never arrives: the deadlock shows 1 of 2 arrivals. */
static loom_kernel *two_arrivals(bool only_first, int *tline, int *wline)
{
    *tline = __LINE__; loom_src task_at = LOOM_HERE;
    *wline = __LINE__; loom_src wait_at = LOOM_HERE;
    return t_two_arrivals(task_at, wait_at, "two", only_first);
}

Test(hopper_interp, mbar_counts_every_replica)
{
    int tl, wl;
    loom_kernel *k = two_arrivals(false, &tl, &wl);
    int32_t os[2] = {0};
    targ args[] = {TA_ARR(os)};
    T_RUN_OK(k, NULL, args, 1);
    cr_assert(os[0] == 1 && os[1] == 2, "%d %d", os[0], os[1]);
    loom_kernel_destroy(k);
}

Test(hopper_interp, mbar_missing_arrival_deadlock)
{
    int tl, wl;
    loom_kernel *k = two_arrivals(true, &tl, &wl);
    int32_t os[2] = {0};
    targ args[] = {TA_ARR(os)};
    cr_assert_eq(t_run(k, NULL, args, 1), LOOM_ERR_RUNTIME, "%s", t_last_error);
    for (int r = 0; r < 2; r++) {
        char want[300];
        snprintf(want, sizeof want,
                 "%s waits on barrier %%bar.0[0] for phase parity 0 at %s, barrier completed 0 "
                 "phases (arrivals 1 of 2, bytes pending 0)",
                 task_at(tl, r), at(wl));
        cr_expect(has(want), "want \"%s\" in:\n%s", want, t_last_error);
    }
    loom_kernel_destroy(k);
}

/* An expect whose bytes never land: the wait deadlocks with the bytes still pending. */
Test(hopper_interp, mbar_expect_waits_for_bytes)
{
    loom_kernel *k = loom_kernel_create("expect", 4);
    loom_val bar = loom_name(k, loom_mbar_alloc(k, 1, 1), "full");
    loom_val zero = I32(k, 0);
    int tl = __LINE__; loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_mbar_expect(k, bar, zero, 1024);
    int wl = __LINE__; loom_mbar_wait(k, bar, zero, zero);
    loom_task_end(k, t);
    cr_assert_eq(t_run(k, NULL, NULL, 0), LOOM_ERR_RUNTIME, "%s", t_last_error);
    char want[300];
    snprintf(want, sizeof want,
             "%s waits on barrier %%full.0[0] for phase parity 0 at %s, barrier completed 0 phases "
             "(arrivals 1 of 1, bytes pending 1024)",
             task_at(tl, 0), at(wl));
    cr_expect(has(want), "want \"%s\" in:\n%s", want, t_last_error);
    loom_kernel_destroy(k);
}

/* Barrier index out of range (arrive, wait, and TMA's barrier): LOOM_ERR_BOUNDS. */
Test(hopper_interp, mbar_index_out_of_range)
{
    for (int which = 0; which < 3; which++) {
        loom_kernel *k = loom_kernel_create("bar_oob", 4);
        loom_val bi = loom_arg_scalar(k, "bi", LOOM_I32);
        loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(16), LOOM_IN);
        loom_val bars = loom_name(k, loom_mbar_alloc(k, 2, 1), "bars");
        loom_val buf = loom_smem_alloc(k, LOOM_F32, LOOM_SHAPE1(16), 1, LOOM_SWIZZLE_NONE);
        loom_val zero = I32(k, 0);
        loom_region_op t = loom_task_begin(k, 4, 0, 1);
        int line = 0;
        if (which == 0) {
            line = __LINE__; loom_mbar_arrive(k, bars, bi);
        } else if (which == 1) {
            line = __LINE__; loom_mbar_wait(k, bars, bi, zero);
        } else {
            loom_mbar_expect(k, bars, zero, 64);
            line = __LINE__; loom_tma_load(k, x, &zero, buf, bars, bi);
        }
        loom_task_end(k, t);
        float xs[16] = {0};
        targ args[] = {TA_I32(2), TA_ARR(xs)};
        cr_assert_eq(t_run(k, NULL, args, 2), LOOM_ERR_BOUNDS, "case %d: %s", which, t_last_error);
        cr_expect(has(at(line)) && has("barrier index 2") && has("%bars.") && has("2 barriers"),
                  "case %d: %s", which, t_last_error);
        loom_kernel_destroy(k);
    }
}

Test(hopper_interp, mbar_wait_parity_must_be_a_bit)
{
    loom_kernel *k = loom_kernel_create("parity", 4);
    loom_val bar = loom_mbar_alloc(k, 1, 1);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    int line = __LINE__; loom_mbar_wait(k, bar, I32(k, 0), I32(k, 2));
    loom_task_end(k, t);
    cr_assert_eq(t_run(k, NULL, NULL, 0), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_expect(has(at(line)) && has("parity is 2"), "%s", t_last_error);
    loom_kernel_destroy(k);
}

/* A replica arriving twice in one phase takes another replica's arrival. */
Test(hopper_interp, mbar_arrival_overflow)
{
    loom_kernel *k = loom_kernel_create("overflow", 8);
    loom_val bar = loom_name(k, loom_mbar_alloc(k, 1, 2), "bar");
    loom_val zero = I32(k, 0);
    int tl = __LINE__; loom_region_op t = loom_task_begin(k, 4, 0, 2);
    loom_mbar_arrive(k, bar, zero);
    int line = __LINE__; loom_mbar_arrive(k, bar, zero);
    loom_task_end(k, t);
    cr_assert_eq(t_run(k, NULL, NULL, 0), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_expect(has(at(line)) && has("arrival overflow on barrier %bar.0[0]") &&
                  has(task_at(tl, 0)) && has("second time in its phase 0"),
              "%s", t_last_error);
    loom_kernel_destroy(k);
}

/* ================================================================ TMA */

OP_COVERED(tma_load)
OP_COVERED(tma_store)
OP_COVERED(tma_store_wait)
OP_COVERED(fence_async)

/* A box of [8, 8] from a [3, 10, 24] tensor at (d0, r0, c0): leading box dims of 1,
 * everything outside the tensor reads 0.  With `load_first` the load lands before the
 * expect that announces it (tx goes negative for a while, as on the hardware). */
static void tma_box_case(int d0, int r0, int c0, bool load_first)
{
    loom_kernel *k = loom_kernel_create("tma_box", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE3(3, 10, 24), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE2(8, 8), LOOM_OUT);
    loom_val buf = loom_smem_alloc(k, LOOM_F32, LOOM_SHAPE2(8, 8), 1, LOOM_SWIZZLE_NONE);
    loom_val bar = loom_mbar_alloc(k, 1, 1);
    loom_val z = I32(k, 0);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_val offs[3] = {I32(k, d0), I32(k, r0), I32(k, c0)};
    if (!load_first)
        loom_mbar_expect(k, bar, z, 8 * 8 * 4);
    loom_tma_load(k, x, offs, buf, bar, z);
    if (load_first)
        loom_mbar_expect(k, bar, z, 8 * 8 * 4);
    loom_mbar_wait(k, bar, z, z);
    loom_store(k, o, ((loom_val[]){z, z}), loom_smem_load(k, buf), LOOM_NONE);
    loom_task_end(k, t);
    static float xs[3][10][24];
    float os[8][8];
    fill_f32(&xs[0][0][0], 3 * 10 * 24, 11);
    memset(os, 0xff, sizeof os);
    targ args[] = {TA_ARR(xs), TA_ARR(os)};
    T_RUN_OK(k, NULL, args, 2);
    for (int r = 0; r < 8; r++)
        for (int c = 0; c < 8; c++) {
            int R = r0 + r, C = c0 + c;
            bool in = d0 >= 0 && d0 < 3 && R >= 0 && R < 10 && C >= 0 && C < 24;
            cr_assert_eq(os[r][c], in ? xs[d0][R][C] : 0.0f, "box at (%d,%d,%d) element %d,%d", d0,
                         r0, c0, r, c);
        }
    loom_kernel_destroy(k);
}

Test(hopper_interp, tma_load_box_and_zero_fill)
{
    tma_box_case(1, 0, 0, false);   /* inside */
    tma_box_case(2, 6, 20, false);  /* past the end of rows and columns */
    tma_box_case(0, -3, -5, false); /* before the start */
    tma_box_case(3, 0, 0, false);   /* a leading coordinate outside: all zero */
    tma_box_case(1, 4, 8, true);    /* bytes land before the expect */
}

/* A TMA store of a slot written with smem_store: fenced, it writes the part of the box
 * inside the tensor and leaves the rest; unfenced, it is reported. */
static loom_kernel *tma_store_kernel(int variant, int *sline, int *tline, int *wline)
{
    /* variant 0: fenced, waited, the task's threads met, written again; 1: no fence;
     * 2: smem_store before tma_store_wait; 3: the task ends with the store in flight;
     * 4: written again after the wait with no barrier (only the issuing thread waited) */
    loom_kernel *k = loom_kernel_create("tma_store", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(8, 8), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE2(12, 12), LOOM_OUT);
    loom_val buf = loom_name(k, loom_smem_alloc(k, LOOM_F32, LOOM_SHAPE2(8, 8), 1, LOOM_SWIZZLE_NONE), "buf");
    loom_val z = I32(k, 0);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_val v = loom_load(k, x, ((loom_val[]){z, z}), LOOM_SHAPE2(8, 8), LOOM_NONE, 0);
    *sline = __LINE__; loom_smem_store(k, buf, v);
    if (variant != 1)
        loom_fence_async(k);
    *tline = __LINE__; loom_tma_store(k, o, ((loom_val[]){I32(k, 6), I32(k, -2)}), buf);
    if (variant == 2) {
        *wline = __LINE__; loom_smem_store(k, buf, v);
    }
    if (variant != 3)
        loom_tma_store_wait(k, 0);
    if (variant == 0)
        loom_named_barrier(k, 1, 128); /* the threads meet the one that waited */
    if (variant == 0 || variant == 4) {
        *wline = __LINE__; loom_smem_store(k, buf, v); /* retired: the slot may be written again */
    }
    loom_task_end(k, t);
    return k;
}

Test(hopper_interp, tma_store_skips_the_outside)
{
    int sl, tl, wl;
    loom_kernel *k = tma_store_kernel(0, &sl, &tl, &wl);
    float xs[8][8], os[12][12];
    fill_f32(&xs[0][0], 64, 5);
    for (int i = 0; i < 144; i++)
        (&os[0][0])[i] = 42.0f;
    targ args[] = {TA_ARR(xs), TA_ARR(os)};
    T_RUN_OK(k, NULL, args, 2);
    for (int r = 0; r < 12; r++)
        for (int c = 0; c < 12; c++) {
            int br = r - 6, bc = c + 2; /* box element that lands here */
            bool in = br >= 0 && br < 8 && bc >= 0 && bc < 8;
            cr_assert_eq(os[r][c], in ? xs[br][bc] : 42.0f, "o[%d][%d]", r, c);
        }
    loom_kernel_destroy(k);
}

Test(hopper_interp, tma_store_needs_a_fence_after_smem_store)
{
    int sl, tl, wl;
    loom_kernel *k = tma_store_kernel(1, &sl, &tl, &wl);
    float xs[8][8] = {{0}}, os[12][12];
    targ args[] = {TA_ARR(xs), TA_ARR(os)};
    cr_assert_eq(t_run(k, NULL, args, 2), LOOM_ERR_RUNTIME, "%s", t_last_error);
    char want[200];
    snprintf(want, sizeof want, "written by smem_store at %s by this task with no loom_fence_async",
             at(sl));
    cr_expect(has(at(tl)) && has("op 'tma_store'") && has("%buf.") && has(want), "%s", t_last_error);
    loom_kernel_destroy(k);
}

Test(hopper_interp, tma_store_in_flight_is_a_war_race)
{
    int sl, tl, wl;
    loom_kernel *k = tma_store_kernel(2, &sl, &tl, &wl);
    float xs[8][8] = {{0}}, os[12][12];
    targ args[] = {TA_ARR(xs), TA_ARR(os)};
    cr_assert_eq(t_run(k, NULL, args, 2), LOOM_ERR_RUNTIME, "%s", t_last_error);
    char want[200];
    snprintf(want, sizeof want, "while the tma_store at %s", at(tl));
    cr_expect(has(at(wl)) && has("op 'smem_store'") && has(want) && has("write-after-read"), "%s",
              t_last_error);
    loom_kernel_destroy(k);
}

Test(hopper_interp, tma_store_waited_in_one_thread_needs_a_barrier_before_the_slot_is_written)
{
    int sl, tl, wl;
    loom_kernel *k = tma_store_kernel(4, &sl, &tl, &wl);
    float xs[8][8] = {{0}}, os[12][12];
    targ args[] = {TA_ARR(xs), TA_ARR(os)};
    cr_assert_eq(t_run(k, NULL, args, 2), LOOM_ERR_RUNTIME, "%s", t_last_error);
    char want[200];
    snprintf(want, sizeof want, "which the tma_store at %s may still read", at(tl));
    cr_expect(has(at(wl)) && has("op 'smem_store'") && has(want) && has("named barrier") &&
                  has("write-after-read"),
              "%s", t_last_error);
    loom_kernel_destroy(k);
}

/* Parts of one slot (loom_smem_part): while a TMA store reads rows 0-3, writing rows 4-7
 * is no race and the stores land; writing rows 0-3 again before the wait is (overlap: 1). */
static loom_kernel *parts_store_kernel(int overlap, int *wline, int *tline)
{
    loom_kernel *k = loom_kernel_create("parts_store", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(8, 8), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE2(8, 8), LOOM_OUT);
    loom_val buf = loom_name(k, loom_smem_alloc(k, LOOM_F32, LOOM_SHAPE2(8, 8), 1, LOOM_SWIZZLE_NONE), "buf");
    loom_val z = I32(k, 0), four = I32(k, 4);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_val top = loom_smem_part(k, buf, 0, 0, 4), bottom = loom_smem_part(k, buf, 0, 4, 4);
    loom_smem_store(k, top, loom_load(k, x, ((loom_val[]){z, z}), LOOM_SHAPE2(4, 8), LOOM_NONE, 0));
    loom_fence_async(k);
    *tline = __LINE__; loom_tma_store(k, o, ((loom_val[]){z, z}), top);
    loom_val second = overlap ? top : bottom;
    *wline = __LINE__; loom_smem_store(k, second, loom_load(k, x, ((loom_val[]){four, z}), LOOM_SHAPE2(4, 8), LOOM_NONE, 0));
    loom_fence_async(k);
    loom_tma_store(k, o, ((loom_val[]){four, z}), second);
    loom_tma_store_wait(k, 0);
    loom_task_end(k, t);
    return k;
}

Test(hopper_interp, disjoint_parts_of_a_slot_do_not_race)
{
    int wl, tl;
    loom_kernel *k = parts_store_kernel(0, &wl, &tl);
    float xs[8][8], os[8][8];
    fill_f32(&xs[0][0], 64, 9);
    targ args[] = {TA_ARR(xs), TA_ARR(os)};
    T_RUN_OK(k, NULL, args, 2);
    for (int r = 0; r < 8; r++)
        for (int c = 0; c < 8; c++)
            cr_assert_eq(os[r][c], xs[r][c], "o[%d][%d]", r, c);
    loom_kernel_destroy(k);
    k = parts_store_kernel(1, &wl, &tl);
    cr_assert_eq(t_run(k, NULL, args, 2), LOOM_ERR_RUNTIME, "%s", t_last_error);
    char want[200];
    snprintf(want, sizeof want, "while the tma_store at %s", at(tl));
    cr_expect(has(at(wl)) && has(want) && has("write-after-read"), "%s", t_last_error);
    loom_kernel_destroy(k);
}

Test(hopper_interp, tma_store_must_be_waited_before_the_end)
{
    int sl, tl, wl;
    loom_kernel *k = tma_store_kernel(3, &sl, &tl, &wl);
    float xs[8][8] = {{0}}, os[12][12];
    targ args[] = {TA_ARR(xs), TA_ARR(os)};
    cr_assert_eq(t_run(k, NULL, args, 2), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_expect(has(at(tl)) && has("loom_tma_store_wait(0)"), "%s", t_last_error);
    loom_kernel_destroy(k);
}

/* Strides a TMA descriptor cannot hold are refused at launch, as on the GPU. */
Test(hopper_interp, tma_refuses_unaligned_strides)
{
    loom_kernel *k = loom_kernel_create("tma_stride", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F16, LOOM_SHAPE2(16, 20), LOOM_IN); /* 40-byte rows */
    loom_val buf = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(16, 8), 1, LOOM_SWIZZLE_NONE);
    loom_val bar = loom_mbar_alloc(k, 1, 1);
    loom_val z = I32(k, 0);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_mbar_expect(k, bar, z, 16 * 8 * 2);
    int line = __LINE__; loom_tma_load(k, x, ((loom_val[]){z, z}), buf, bar, z);
    loom_mbar_wait(k, bar, z, z);
    loom_task_end(k, t);
    uint16_t xs[16 * 20] = {0};
    targ args[] = {TA_ARR(xs)};
    cr_assert_eq(t_run(k, NULL, args, 1), LOOM_ERR_INVALID, "%s", t_last_error);
    cr_expect(has(at(line)) && has("'x'") && has("40 bytes") && has("multiples of 16"), "%s",
              t_last_error);
    loom_kernel_destroy(k);
}

/* More bytes land than the phase's expect announced (the load sits in another block, so
 * the static check cannot count it). */
Test(hopper_interp, tma_bytes_no_expect_announced)
{
    loom_kernel *k = loom_kernel_create("tx_over", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(8, 8), LOOM_IN);
    loom_val buf = loom_smem_alloc(k, LOOM_F32, LOOM_SHAPE2(8, 8), 1, LOOM_SWIZZLE_NONE);
    loom_val bar = loom_name(k, loom_mbar_alloc(k, 1, 1), "full");
    loom_val z = I32(k, 0);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_mbar_expect(k, bar, z, 128);
    loom_region_op i = loom_if_begin(k, loom_cmp(k, LOOM_EQ, z, z), 0);
    int line = __LINE__; loom_tma_load(k, x, ((loom_val[]){z, z}), buf, bar, z);
    loom_if_end(k, i, 0, NULL);
    loom_task_end(k, t);
    float xs[64] = {0};
    targ args[] = {TA_ARR(xs)};
    cr_assert_eq(t_run(k, NULL, args, 1), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_expect(has(at(line)) && has("barrier %full.1[0]: 256 bytes landed in its phase 0") &&
                  has("announced 128"),
              "%s", t_last_error);
    loom_kernel_destroy(k);
}

/* A slot a TMA load wrote, read by a task that never waited on its barrier. */
Test(hopper_interp, read_without_wait_is_reported)
{
    for (int reader = 0; reader < 2; reader++) { /* 0: another task, 1: the loading task */
        loom_kernel *k = loom_kernel_create("no_wait", 8);
        loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(64), LOOM_IN);
        loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE1(64), LOOM_OUT);
        loom_val ring = loom_name(k, loom_smem_alloc(k, LOOM_F32, LOOM_SHAPE1(64), 2, LOOM_SWIZZLE_NONE), "ring");
        loom_val bars = loom_name(k, loom_mbar_alloc(k, 2, 1), "full");
        loom_val z = I32(k, 0), one = I32(k, 1);
        int tl = __LINE__; loom_region_op p = loom_task_begin(k, 4, 0, 1);
        loom_mbar_expect(k, bars, one, 256);
        int ll = __LINE__; loom_tma_load(k, x, &z, loom_smem_slot(k, ring, one), bars, one);
        int rl = 0;
        if (reader == 1) {
            rl = __LINE__; loom_store(k, o, &z, loom_smem_load(k, loom_smem_slot(k, ring, one)), LOOM_NONE);
        }
        loom_task_end(k, p);
        int cl = __LINE__; loom_region_op c = loom_task_begin(k, 4, 0, 1);
        loom_mbar_wait(k, bars, z, one); /* a wait, but on another barrier */
        if (reader == 0) {
            rl = __LINE__; loom_store(k, o, &z, loom_smem_load(k, loom_smem_slot(k, ring, one)), LOOM_NONE);
        }
        loom_task_end(k, c);
        float xs[64] = {0}, os[64];
        targ args[] = {TA_ARR(xs), TA_ARR(os)};
        cr_assert_eq(t_run(k, NULL, args, 2), LOOM_ERR_RUNTIME, "%s", t_last_error);
        char want[200];
        snprintf(want, sizeof want,
                 "reads %%ring.0 slot 1 (written by tma_load at %s) that no wait has made visible "
                 "to this task",
                 at(ll));
        cr_expect(has(at(rl)) && has("op 'smem_load'") && has(want) &&
                      has(task_at(reader ? tl : cl, 0)) && has("%full.1[1]"),
                  "reader %d, want \"%s\" in:\n%s", reader, want, t_last_error);
        loom_kernel_destroy(k);
    }
}

/* ================================================================ wgmma */

OP_COVERED(wgmma)
OP_COVERED(wgmma_commit)
OP_COVERED(wgmma_wait)

/* C = C0 + A @ B with A [64, 32] and B [32, 24] (B stored [24, 32] and seen transposed
 * when b_trans), both from shared memory, C0 loaded.  (A in registers:
 * tests/test_wgmma_regs.c.) */
static void wgmma_case(loom_dtype dt, bool b_trans)
{
    enum { M = 64, K = 32, N = 24 };
    loom_kernel *k = loom_kernel_create("wgmma", 4);
    loom_val A = loom_arg_tensor(k, "A", dt, LOOM_SHAPE2(M, K), LOOM_IN);
    loom_val B = loom_arg_tensor(k, "B", dt, b_trans ? LOOM_SHAPE2(N, K) : LOOM_SHAPE2(K, N), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F32, LOOM_SHAPE2(M, N), LOOM_INOUT);
    loom_val as = loom_smem_alloc(k, dt, LOOM_SHAPE2(M, K), 1, LOOM_SWIZZLE_64);
    loom_val bs = loom_smem_alloc(k, dt, b_trans ? LOOM_SHAPE2(N, K) : LOOM_SHAPE2(K, N), 1, LOOM_SWIZZLE_NONE);
    loom_val z = I32(k, 0);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_val a = loom_load(k, A, ((loom_val[]){z, z}), LOOM_SHAPE2(M, K), LOOM_NONE, 0);
    loom_smem_store(k, as, a);
    loom_smem_store(k, bs, loom_load(k, B, ((loom_val[]){z, z}), b_trans ? LOOM_SHAPE2(N, K) : LOOM_SHAPE2(K, N), LOOM_NONE, 0));
    loom_fence_async(k);
    loom_val c0 = loom_load(k, C, ((loom_val[]){z, z}), LOOM_SHAPE2(M, N), LOOM_NONE, 0);
    loom_val acc = loom_wgmma(k, as, b_trans ? loom_smem_trans(k, bs) : bs, c0);
    loom_wgmma_commit(k);
    loom_region_op w = loom_wgmma_wait(k, 0, 1, &acc);
    loom_store(k, C, ((loom_val[]){z, z}), loom_wgmma_result(k, w, 0), LOOM_NONE);
    loom_task_end(k, t);

    static uint16_t ah[M * K], bh[K * N];
    static float av[M * K], bv[K * N], cs[M * N], want[M * N];
    fill_half(dt, ah, av, M * K, 21);
    fill_half(dt, bh, bv, K * N, 22);
    fill_f32(cs, M * N, 23);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float s = cs[m * N + n];
            for (int kk = 0; kk < K; kk++)
                s = fmaf(av[m * K + kk], b_trans ? bv[n * K + kk] : bv[kk * N + n], s);
            want[m * N + n] = s;
        }
    targ args[] = {TA_ARR(ah), TA_ARR(bh), TA_ARR(cs)};
    T_RUN_OK(k, NULL, args, 3);
    for (int i = 0; i < M * N; i++)
        cr_assert(t_same_f32(cs[i], want[i]), "%s b_trans=%d: element %d is %g, want %g",
                  loom_dtype_name(dt), b_trans, i, cs[i], want[i]);
    loom_kernel_destroy(k);
}

Test(hopper_interp, wgmma_matches_fma_loop)
{
    for (int dt = 0; dt < 2; dt++)
        for (int tr = 0; tr < 2; tr++)
            wgmma_case(dt ? LOOM_BF16 : LOOM_F16, tr);
}

/* wgmma reads shared memory through the async proxy: smem_store needs a fence first. */
Test(hopper_interp, wgmma_needs_a_fence_after_smem_store)
{
    loom_kernel *k = loom_kernel_create("wgmma_fence", 4);
    loom_val as = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(64, 16), 1, LOOM_SWIZZLE_NONE);
    loom_val bs = loom_name(k, loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(16, 8), 1, LOOM_SWIZZLE_NONE), "bs");
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_smem_store(k, as, loom_splat(k, loom_const_f(k, LOOM_F16, 1), LOOM_SHAPE2(64, 16)));
    loom_fence_async(k); /* A is fenced, B (stored after the fence) is not */
    int sl = __LINE__; loom_smem_store(k, bs, loom_splat(k, loom_const_f(k, LOOM_F16, 2), LOOM_SHAPE2(16, 8)));
    loom_val c = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(64, 8));
    int wl = __LINE__; loom_val acc = loom_wgmma(k, as, bs, c);
    loom_wgmma_commit(k);
    loom_wgmma_wait(k, 0, 1, &acc);
    loom_task_end(k, t);
    cr_assert_eq(t_run(k, NULL, NULL, 0), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_expect(has(at(wl)) && has("op 'wgmma'") && has(at(sl)) && has("no loom_fence_async") &&
                  has("%bs."),
              "%s", t_last_error);
    loom_kernel_destroy(k);
}

/* A wait does not cover a wgmma that no commit closed into a group. */
Test(hopper_interp, wgmma_wait_needs_a_commit)
{
    loom_kernel *k = loom_kernel_create("wgmma_commit", 4);
    loom_val as = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(64, 16), 1, LOOM_SWIZZLE_NONE);
    loom_val bs = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(16, 8), 1, LOOM_SWIZZLE_NONE);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_val c = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(64, 8));
    int gl = __LINE__; loom_val acc = loom_wgmma(k, as, bs, c);
    int wl = __LINE__; loom_wgmma_wait(k, 0, 1, &acc);
    loom_task_end(k, t);
    cr_assert_eq(t_run(k, NULL, NULL, 0), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_expect(has(at(wl)) && has("op 'wgmma_wait'") && has(at(gl)) && has("loom_wgmma_commit"), "%s",
              t_last_error);
    loom_kernel_destroy(k);
}

/* ================================================================ a warp-specialized GEMM */

/* C[M,N] = A[M,K] @ B[K,N] with B given K-major as Bt[N,K].  One producer task (a warp
 * group) waits for an empty ring slot, expects the bytes and issues the TMA loads of an A
 * tile per consumer replica and a B tile; the consumer task (one warp group per replica,
 * each owning BM rows) waits for a full slot, runs wgmma, commits, waits, and frees the
 * slot.  Planted bugs turn one line of the protocol wrong. */
enum { PLANT_NONE, PLANT_PARITY, PLANT_NO_WAIT, PLANT_WAR, PLANT_NO_ARRIVE };

typedef struct gemm {
    int M, N, K, BM, BN, BK, S, R;
    loom_dtype dt;
    loom_swizzle swz;
    int plant;
    bool pipelined; /* the consumer keeps one group in flight and frees the previous slot */
} gemm;

typedef struct gemm_lines {
    int ptask, ctask, pwait, cwait, tma_a, tma_b, wgmma;
} gemm_lines;

static loom_kernel *gemm_build(const gemm *g, gemm_lines *L)
{
    loom_kernel *k = loom_kernel_create("ws_gemm", 4 + 4 * g->R);
    loom_val A = loom_arg_tensor(k, "A", g->dt, LOOM_SHAPE2(g->M, g->K), LOOM_IN);
    loom_val Bt = loom_arg_tensor(k, "Bt", g->dt, LOOM_SHAPE2(g->N, g->K), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F32, LOOM_SHAPE2(g->M, g->N), LOOM_OUT);
    loom_val as = loom_name(k, loom_smem_alloc(k, g->dt, LOOM_SHAPE2(g->BM, g->BK), g->S * g->R, g->swz), "as");
    loom_val bs = loom_name(k, loom_smem_alloc(k, g->dt, LOOM_SHAPE2(g->BN, g->BK), g->S, g->swz), "bs");
    loom_val full = loom_name(k, loom_mbar_alloc(k, g->S, 1), "full");
    loom_val empty = loom_name(k, loom_mbar_alloc(k, g->S, g->R), "empty");
    loom_val pm = loom_mul(k, loom_program_id(k, 0), I32(k, g->BM * g->R));
    loom_val pn = loom_mul(k, loom_program_id(k, 1), I32(k, g->BN));
    loom_val zero = I32(k, 0), one = I32(k, 1), nk = I32(k, (g->K + g->BK - 1) / g->BK);
    int64_t esz = (int64_t)loom_dtype_size(g->dt);

    L->ptask = __LINE__; loom_region_op p = loom_task_begin(k, 4, 40, 1);
    {
        loom_region_op f = loom_for_begin(k, zero, nk, one, 0, NULL);
        loom_val it = loom_for_iv(k, f);
        loom_val s = loom_ring_slot(k, it, g->S), ph = loom_ring_phase(k, it, g->S);
        loom_val parity = g->plant == PLANT_PARITY ? ph : loom_sub(k, one, ph);
        L->pwait = __LINE__; loom_mbar_wait(k, empty, s, parity);
        loom_mbar_expect(k, full, s, (int64_t)(g->R * g->BM + g->BN) * g->BK * esz);
        loom_val kk = loom_mul(k, it, I32(k, g->BK));
        for (int r = 0; r < g->R; r++) {
            loom_val row = loom_add(k, pm, I32(k, r * g->BM));
            loom_val sa = loom_add(k, s, I32(k, r * g->S));
            L->tma_a = __LINE__; loom_tma_load(k, A, ((loom_val[]){row, kk}), loom_smem_slot(k, as, sa), full, s);
        }
        L->tma_b = __LINE__; loom_tma_load(k, Bt, ((loom_val[]){pn, kk}), loom_smem_slot(k, bs, s), full, s);
        loom_for_end(k, f, 0, NULL);
    }
    loom_task_end(k, p);

    L->ctask = __LINE__; loom_region_op c = loom_task_begin(k, 4, 232, g->R);
    {
        loom_val rep = loom_task_replica(k);
        loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(g->BM, g->BN));
        loom_region_op f = loom_for_begin(k, zero, nk, one, 1, &acc0);
        loom_val it = loom_for_iv(k, f);
        loom_val s = loom_ring_slot(k, it, g->S), ph = loom_ring_phase(k, it, g->S);
        if (g->plant != PLANT_NO_WAIT) {
            L->cwait = __LINE__; loom_mbar_wait(k, full, s, ph);
        }
        loom_val sa = loom_add(k, s, loom_mul(k, rep, I32(k, g->S)));
        loom_val a = loom_smem_slot(k, as, sa), b = loom_smem_trans(k, loom_smem_slot(k, bs, s));
        L->wgmma = __LINE__; loom_val acc = loom_wgmma(k, a, b, loom_for_arg(k, f, 0));
        loom_wgmma_commit(k);
        /* the WAR plant keeps one group in flight but frees the slot it still reads */
        bool one_in_flight = g->plant == PLANT_WAR || g->pipelined;
        loom_region_op w = loom_wgmma_wait(k, one_in_flight ? 1 : 0, 1, &acc);
        if (g->pipelined) { /* the group of the previous step is retired: free its slot */
            loom_region_op i = loom_if_begin(k, loom_cmp(k, LOOM_GT, it, zero), 0);
            loom_mbar_arrive(k, empty, loom_ring_slot(k, loom_sub(k, it, one), g->S));
            loom_if_end(k, i, 0, NULL);
        } else if (g->plant != PLANT_NO_ARRIVE) {
            loom_mbar_arrive(k, empty, s);
        }
        loom_val next = loom_wgmma_result(k, w, 0);
        loom_for_end(k, f, 1, &next);
        loom_val fin = loom_for_result(k, f, 0);
        if (one_in_flight) {
            loom_region_op w2 = loom_wgmma_wait(k, 0, 1, &fin);
            fin = loom_wgmma_result(k, w2, 0);
        }
        loom_val row = loom_add(k, pm, loom_mul(k, rep, I32(k, g->BM)));
        loom_store(k, C, ((loom_val[]){row, pn}), fin, LOOM_NONE);
    }
    loom_task_end(k, c);
    return k;
}

typedef struct gemm_io {
    uint16_t *ah, *bh;
    float *av, *bv, *c;
} gemm_io;

static loom_status gemm_run(const gemm *g, gemm_lines *L, gemm_io *io)
{
    loom_kernel *k = gemm_build(g, L);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    size_t na = (size_t)g->M * g->K, nb = (size_t)g->N * g->K, nc = (size_t)g->M * g->N;
    io->ah = malloc(na * 2);
    io->bh = malloc(nb * 2);
    io->av = malloc(na * 4);
    io->bv = malloc(nb * 4);
    io->c = malloc(nc * 4);
    cr_assert(io->ah && io->bh && io->av && io->bv && io->c);
    fill_half(g->dt, io->ah, io->av, (int)na, 101);
    fill_half(g->dt, io->bh, io->bv, (int)nb, 202);
    memset(io->c, 0xff, nc * 4); /* poisoned: NaN */
    int grid[3] = {(g->M + g->BM * g->R - 1) / (g->BM * g->R), (g->N + g->BN - 1) / g->BN, 1};
    targ args[] = {TA_BUF(io->ah, na * 2), TA_BUF(io->bh, nb * 2), TA_BUF(io->c, nc * 4)};
    loom_status st = t_run(k, grid, args, 3);
    loom_kernel_destroy(k);
    return st;
}

static void gemm_free(gemm_io *io)
{
    free(io->ah);
    free(io->bh);
    free(io->av);
    free(io->bv);
    free(io->c);
}

static void gemm_check(gemm g)
{
    gemm_lines L;
    gemm_io io;
    loom_status st = gemm_run(&g, &L, &io);
    cr_assert_eq(st, LOOM_OK, "M=%d N=%d K=%d R=%d: %s", g.M, g.N, g.K, g.R, t_last_error);
    for (int m = 0; m < g.M; m++)
        for (int n = 0; n < g.N; n++) {
            float s = 0;
            for (int kk = 0; kk < g.K; kk++)
                s = fmaf(io.av[m * g.K + kk], io.bv[n * g.K + kk], s);
            cr_assert_eq(io.c[m * g.N + n], s, "%s M=%d N=%d K=%d R=%d: C[%d][%d] is %g, want %g",
                         loom_dtype_name(g.dt), g.M, g.N, g.K, g.R, m, n, io.c[m * g.N + n], s);
        }
    gemm_free(&io);
}

/* Odd M and N (TMA zero fill at the edges, masked stores), K not a multiple of BK, more
 * k-steps than ring slots, several CTAs. */
Test(hopper_interp, ws_gemm_one_consumer)
{
    gemm_check((gemm){.M = 97, .N = 45, .K = 72, .BM = 64, .BN = 32, .BK = 16, .S = 2, .R = 1,
                      .dt = LOOM_F16, .swz = LOOM_SWIZZLE_32});
    gemm_check((gemm){.M = 64, .N = 8, .K = 16, .BM = 64, .BN = 8, .BK = 16, .S = 1, .R = 1,
                      .dt = LOOM_BF16, .swz = LOOM_SWIZZLE_NONE});
}

/* Two consumer replicas, each owning 64 rows of a 128-row tile; the empty barrier counts
 * both.  M = 161 leaves the second CTA row with one partial and one empty replica. */
Test(hopper_interp, ws_gemm_two_consumer_replicas)
{
    gemm_check((gemm){.M = 161, .N = 40, .K = 88, .BM = 64, .BN = 32, .BK = 32, .S = 2, .R = 2,
                      .dt = LOOM_BF16, .swz = LOOM_SWIZZLE_64});
    gemm_check((gemm){.M = 130, .N = 17, .K = 48, .BM = 64, .BN = 32, .BK = 16, .S = 3, .R = 2,
                      .dt = LOOM_F16, .swz = LOOM_SWIZZLE_32});
}

/* wgmma_wait(1) keeps the last group in flight; each step frees the slot of the step
 * before, whose group that wait retired: correct, so no race is reported. */
Test(hopper_interp, ws_gemm_pipelined_consumer)
{
    gemm_check((gemm){.M = 100, .N = 56, .K = 96, .BM = 64, .BN = 32, .BK = 16, .S = 2, .R = 1,
                      .dt = LOOM_F16, .swz = LOOM_SWIZZLE_32, .pipelined = true});
    gemm_check((gemm){.M = 128, .N = 64, .K = 80, .BM = 64, .BN = 64, .BK = 16, .S = 3, .R = 2,
                      .dt = LOOM_BF16, .swz = LOOM_SWIZZLE_NONE, .pipelined = true});
}

static const gemm small_gemm = {.M = 70, .N = 20, .K = 64, .BM = 64, .BN = 16, .BK = 16, .S = 2,
                                .R = 1, .dt = LOOM_F16, .swz = LOOM_SWIZZLE_NONE};

/* The producer waits on 'empty' with the consumer's parity: nobody can move. */
Test(hopper_interp, ws_gemm_planted_deadlock)
{
    gemm g = small_gemm;
    g.plant = PLANT_PARITY;
    gemm_lines L;
    gemm_io io;
    cr_assert_eq(gemm_run(&g, &L, &io), LOOM_ERR_RUNTIME, "%s", t_last_error);
    char want[2][300];
    snprintf(want[0], sizeof want[0],
             "%s waits on barrier %%empty.3[0] for phase parity 0 at %s, barrier completed 0 "
             "phases (arrivals 0 of 1, bytes pending 0)",
             task_at(L.ptask, 0), at(L.pwait));
    snprintf(want[1], sizeof want[1],
             "%s waits on barrier %%full.2[0] for phase parity 0 at %s, barrier completed 0 "
             "phases (arrivals 0 of 1, bytes pending 0)",
             task_at(L.ctask, 0), at(L.cwait));
    cr_expect(has("deadlock in program (0,0,0): every unfinished task is blocked"), "%s", t_last_error);
    for (int i = 0; i < 2; i++)
        cr_expect(has(want[i]), "want \"%s\" in:\n%s", want[i], t_last_error);
    gemm_free(&io);
}

/* The consumer never frees a slot: the producer stalls on its third load. */
Test(hopper_interp, ws_gemm_planted_missing_arrive)
{
    gemm g = small_gemm;
    g.plant = PLANT_NO_ARRIVE;
    gemm_lines L;
    gemm_io io;
    cr_assert_eq(gemm_run(&g, &L, &io), LOOM_ERR_RUNTIME, "%s", t_last_error);
    char want[300];
    snprintf(want, sizeof want,
             "%s waits on barrier %%empty.3[0] for phase parity 0 at %s, barrier completed 0 "
             "phases (arrivals 0 of 1, bytes pending 0)",
             task_at(L.ptask, 0), at(L.pwait));
    cr_expect(has(want), "want \"%s\" in:\n%s", want, t_last_error);
    cr_expect(has(task_at(L.ctask, 0)) && has("%full.2[0] for phase parity 1"), "%s", t_last_error);
    gemm_free(&io);
}

/* The consumer reads its slots without waiting on 'full'. */
Test(hopper_interp, ws_gemm_planted_missing_wait)
{
    gemm g = small_gemm;
    g.plant = PLANT_NO_WAIT;
    gemm_lines L;
    gemm_io io;
    cr_assert_eq(gemm_run(&g, &L, &io), LOOM_ERR_RUNTIME, "%s", t_last_error);
    char want[300];
    snprintf(want, sizeof want,
             "reads %%as.0 slot 0 (written by tma_load at %s) that no wait has made visible to "
             "this task",
             at(L.tma_a));
    cr_expect(has(at(L.wgmma)) && has("op 'wgmma'") && has(task_at(L.ctask, 0)) && has(want),
              "want \"%s\" in:\n%s", want, t_last_error);
    gemm_free(&io);
}

/* The consumer frees a slot while its wgmma group still reads it (wait(1) before the
 * arrive): the producer's next TMA load into that slot is a write-after-read race. */
Test(hopper_interp, ws_gemm_planted_war_race)
{
    gemm g = small_gemm;
    g.plant = PLANT_WAR;
    gemm_lines L;
    gemm_io io;
    cr_assert_eq(gemm_run(&g, &L, &io), LOOM_ERR_RUNTIME, "%s", t_last_error);
    char want[300];
    snprintf(want, sizeof want, "overwrites %%as.0 slot 1 while the wgmma at %s (%s) may still read it",
             at(L.wgmma), task_at(L.ctask, 0));
    cr_expect(has(at(L.tma_a)) && has("op 'tma_load'") && has(task_at(L.ptask, 0)) && has(want) &&
                  has("no loom_wgmma_wait has retired its group"),
              "want \"%s\" in:\n%s", want, t_last_error);
    gemm_free(&io);
}
