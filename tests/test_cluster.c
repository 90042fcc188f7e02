/*
 * test_cluster.c -- clusters of CTAs (include/loom.h, "Clusters"): cluster ranks, parts of
 * shared views, TMA loads multicast to every CTA of the cluster, arrivals on the barrier
 * of every CTA.
 *
 * The kernel under test is the pattern the GEMM template uses: a cluster of two CTAs
 * computes two row tiles that share their B operand; each CTA loads its own A, multicasts
 * one column half of B into both CTAs' ring slot, and its consumer releases the slot in
 * both CTAs (both halves were written by the pair).  The interpreter runs each cluster's
 * programs side by side and must give the C matmul's result; a CTA that skips its half is
 * a deadlock naming the waiting task and barrier; a local arrival where the pair must
 * release is caught by the arrival-count check.  The PTX carries .reqnctapercluster,
 * multicast loads, mapa'ed remote arrivals and cluster barriers, and assembles.  On the
 * GPU (skipped without one) the result is checked against the same reference.
 */
#include "ir.h"
#include "testutil.h"

#include <unistd.h>

#define I32(k, v) loom_const_i(k, LOOM_I32, v)

OP_COVERED(cluster_rank)
OP_COVERED(smem_part)
OP_COVERED(tma_load_multicast)
OP_COVERED(mbar_arrive_cluster)

enum { BM = 64, BK = 64 };

typedef enum { MC_OK, MC_SKIP_HALF, MC_LOCAL_ARRIVE } mc_variant;

/* C [M, N] f32 = A [M, K] @ B [K, N] (f16), one 64-row tile a program, clusters of two
 * along the row tiles, a ring of S slots.  N is 128 (two 64-column chunks of B). */
static loom_kernel *mc_gemm(int64_t M, int64_t N, int64_t K, int S, mc_variant v, int *wait_line)
{
    loom_kernel *k = loom_kernel_create("mc_gemm", 8);
    loom_kernel_set_cluster(k, 2);
    loom_val A = loom_arg_tensor(k, "A", LOOM_F16, LOOM_SHAPE2(M, K), LOOM_IN);
    loom_val B = loom_arg_tensor(k, "B", LOOM_F16, LOOM_SHAPE2(K, N), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F32, LOOM_SHAPE2(M, N), LOOM_OUT);
    loom_val as = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(BM, BK), S, LOOM_SWIZZLE_128);
    loom_val bs = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(BK, N), S, LOOM_SWIZZLE_128);
    loom_val full = loom_mbar_alloc(k, S, 1);
    loom_val empty = loom_mbar_alloc(k, S, 2); /* the consumers of both CTAs */
    loom_val m0 = loom_mul(k, loom_program_id(k, 0), I32(k, BM));
    loom_val nk = I32(k, (K + BK - 1) / BK), zero = I32(k, 0), one = I32(k, 1);

    loom_region_op pt = loom_task_begin(k, 4, 40, 1);
    {
        loom_val rank = loom_cluster_rank(k);
        loom_region_op kl = loom_for_begin(k, zero, nk, one, 0, NULL);
        loom_val kk = loom_for_iv(k, kl);
        loom_val sl = loom_ring_slot(k, kk, S);
        loom_mbar_wait(k, empty, sl, loom_sub(k, one, loom_ring_phase(k, kk, S)));
        loom_val k0 = loom_mul(k, kk, I32(k, BK));
        loom_mbar_expect(k, full, sl, (BM * BK + BK * N) * 2);
        loom_tma_load(k, A, ((loom_val[]){m0, k0}), loom_smem_slot(k, as, sl), full, sl);
        /* rank q multicasts columns [64q, 64q + 64) of B's k step */
        for (int q = 0; q < 2; q++) {
            loom_val mine = loom_cmp(k, LOOM_EQ, rank, I32(k, q));
            if (v == MC_SKIP_HALF && q == 1)
                mine = loom_const_i(k, LOOM_I1, 0);
            loom_region_op br = loom_if_begin(k, mine, 0);
            loom_val half = loom_smem_part(k, loom_smem_slot(k, bs, sl), 1, 64 * q, 64);
            loom_tma_load_multicast(k, B, ((loom_val[]){k0, I32(k, 64 * q)}), half, full, sl);
            loom_if_end(k, br, 0, NULL);
        }
        loom_for_end(k, kl, 0, NULL);
    }
    loom_task_end(k, pt);

    loom_region_op ct = loom_task_begin(k, 4, 232, 1);
    {
        loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(BM, N));
        loom_region_op kl = loom_for_begin(k, zero, nk, one, 1, &acc0);
        loom_val kk = loom_for_iv(k, kl);
        loom_val sl = loom_ring_slot(k, kk, S);
        *wait_line = __LINE__ + 1;
        loom_mbar_wait(k, full, sl, loom_ring_phase(k, kk, S));
        loom_val acc = loom_wgmma(k, loom_smem_slot(k, as, sl), loom_smem_slot(k, bs, sl), loom_for_arg(k, kl, 0));
        loom_wgmma_commit(k);
        loom_region_op wt = loom_wgmma_wait(k, 0, 1, &acc);
        if (v == MC_LOCAL_ARRIVE)
            loom_mbar_arrive(k, empty, sl);
        else
            loom_mbar_arrive_cluster(k, empty, sl);
        loom_val r = loom_wgmma_result(k, wt, 0);
        loom_for_end(k, kl, 1, &r);
        loom_store(k, C, ((loom_val[]){m0, zero}), loom_for_result(k, kl, 0), LOOM_NONE);
    }
    loom_task_end(k, ct);
    return k;
}

typedef struct mc_io {
    int64_t M, N, K;
    uint16_t *a, *b;
    float *af, *bf, *c, *ref;
} mc_io;

static void fill(uint16_t *h, float *f, int64_t n, unsigned seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        h[i] = ir_f32_to_f16((float)((seed >> 8) % 2001) / 1000.0f - 1.0f);
        f[i] = ir_f16_to_f32(h[i]);
    }
}

static mc_io mc_inputs(int64_t M, int64_t N, int64_t K)
{
    mc_io io = {.M = M, .N = N, .K = K};
    io.a = malloc((size_t)(M * K) * 2);
    io.b = malloc((size_t)(K * N) * 2);
    io.af = malloc((size_t)(M * K) * 4);
    io.bf = malloc((size_t)(K * N) * 4);
    io.c = calloc((size_t)(M * N), 4);
    io.ref = calloc((size_t)(M * N), 4);
    cr_assert(io.a && io.b && io.af && io.bf && io.c && io.ref);
    fill(io.a, io.af, M * K, 7);
    fill(io.b, io.bf, K * N, 11);
    for (int64_t m = 0; m < M; m++)
        for (int64_t q = 0; q < K; q++)
            for (int64_t j = 0; j < N; j++)
                io.ref[m * N + j] += io.af[m * K + q] * io.bf[q * N + j];
    return io;
}

static void mc_check(const mc_io *io, double tol)
{
    for (int64_t i = 0; i < io->M * io->N; i++)
        cr_assert(fabs(io->c[i] - io->ref[i]) <= tol, "C[%lld, %lld] = %g, want %g", (long long)(i / io->N),
                  (long long)(i % io->N), io->c[i], io->ref[i]);
}

static void mc_free(mc_io *io)
{
    free(io->a);
    free(io->b);
    free(io->af);
    free(io->bf);
    free(io->c);
    free(io->ref);
}

Test(cluster, multicast_gemm_on_the_interpreter)
{
    /* 4 row tiles (two clusters), the last one mostly past M; K not a multiple of the
     * k step (5 k steps through a 2-slot ring) */
    int wl;
    loom_kernel *k = mc_gemm(230, 128, 296, 2, MC_OK, &wl);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    mc_io io = mc_inputs(230, 128, 296);
    int grid[3] = {4, 1, 1};
    targ a[] = {TA_BUF(io.a, 230 * 296 * 2), TA_BUF(io.b, 296 * 128 * 2), TA_BUF(io.c, 230 * 128 * 4)};
    T_RUN_OK(k, grid, a, 3);
    mc_check(&io, 1e-3);
    mc_free(&io);
    loom_kernel_destroy(k);
}

Test(cluster, a_missing_half_is_a_deadlock)
{
    int wl;
    loom_kernel *k = mc_gemm(128, 128, 64, 2, MC_SKIP_HALF, &wl);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    mc_io io = mc_inputs(128, 128, 64);
    int grid[3] = {2, 1, 1};
    targ a[] = {TA_BUF(io.a, 128 * 64 * 2), TA_BUF(io.b, 64 * 128 * 2), TA_BUF(io.c, 128 * 128 * 4)};
    cr_assert_eq(t_run(k, grid, a, 3), LOOM_ERR_RUNTIME);
    cr_assert(strstr(t_last_error, "deadlock"), "%s", t_last_error);
    cr_assert(strstr(t_last_error, "cluster"), "%s", t_last_error);
    char where[64];
    snprintf(where, sizeof where, "test_cluster.c:%d", wl);
    cr_assert(strstr(t_last_error, where), "the consumer's wait at line %d is not named:\n%s", wl, t_last_error);
    cr_assert(strstr(t_last_error, "bytes pending 8192"), "the missing half's bytes:\n%s", t_last_error);
    mc_free(&io);
    loom_kernel_destroy(k);
}

Test(cluster, a_local_arrival_is_miscounted)
{
    int wl;
    loom_kernel *k = mc_gemm(128, 128, 64, 2, MC_LOCAL_ARRIVE, &wl);
    cr_assert_eq(loom_verify(k), LOOM_ERR_VERIFY);
    cr_assert(strstr(loom_kernel_errors(k), "expect 2 arrivals a phase, but 1 task replicas arrive"), "%s",
              loom_kernel_errors(k));
    loom_kernel_destroy(k);
}

Test(cluster, grid_must_hold_whole_clusters)
{
    int wl;
    loom_kernel *k = mc_gemm(128, 128, 64, 2, MC_OK, &wl);
    mc_io io = mc_inputs(128, 128, 64);
    int grid[3] = {3, 1, 1};
    targ a[] = {TA_BUF(io.a, 128 * 64 * 2), TA_BUF(io.b, 64 * 128 * 2), TA_BUF(io.c, 128 * 128 * 4)};
    cr_assert_eq(t_run(k, grid, a, 3), LOOM_ERR_INVALID);
    cr_assert(strstr(t_last_error, "clusters of 2 programs along x, but grid[0] is 3"), "%s", t_last_error);
    mc_free(&io);
    loom_kernel_destroy(k);
}

Test(cluster, ranks_and_sizes)
{
    loom_kernel *k = loom_kernel_create("ranks", 1);
    loom_kernel_set_cluster(k, 4);
    cr_assert_eq(loom_kernel_cluster(k), 4);
    loom_val out = loom_arg_tensor(k, "out", LOOM_I32, LOOM_SHAPE1(8), LOOM_OUT);
    loom_store(k, out, ((loom_val[]){loom_program_id(k, 0)}),
               loom_splat(k, loom_cluster_rank(k), LOOM_SHAPE1(1)), LOOM_NONE);
    int32_t r[8] = {0};
    int grid[3] = {8, 1, 1};
    targ a[] = {TA_ARR(r)};
    T_RUN_OK(k, grid, a, 1);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(r[i], i % 4);
    cr_assert(strstr(loom_print(k), "cluster=4"), "%s", loom_print(k));
    loom_kernel_set_cluster(k, 3);
    cr_assert(strstr(loom_kernel_errors(k), "cluster size 3"), "%s", loom_kernel_errors(k));
    loom_kernel_destroy(k);
    loom_kernel *one = loom_kernel_create("no_cluster", 1);
    cr_assert_eq(loom_kernel_cluster(one), 1);
    loom_kernel_destroy(one);
}

/* The parts a view can have, and the ones it cannot (not one tile in memory). */
Test(cluster, smem_part_rules)
{
    struct {
        loom_swizzle sw;
        int64_t rows, cols;
        int dim;
        int64_t start, size;
        const char *err; /* NULL: accepted */
    } c[] = {
        {LOOM_SWIZZLE_128, 64, 256, 1, 128, 128, NULL},
        {LOOM_SWIZZLE_128, 64, 256, 1, 0, 64, NULL},
        {LOOM_SWIZZLE_128, 64, 64, 0, 32, 32, NULL},
        {LOOM_SWIZZLE_NONE, 16, 32, 0, 3, 5, NULL},
        {LOOM_SWIZZLE_128, 64, 256, 1, 32, 64, "do not fall on the view's 64-column chunks"},
        {LOOM_SWIZZLE_NONE, 64, 256, 1, 0, 64, "are not stored apart"},
        {LOOM_SWIZZLE_128, 64, 256, 0, 0, 32, "take a column part first"},
        {LOOM_SWIZZLE_128, 64, 64, 0, 4, 8, "multiple of 8 rows"},
        {LOOM_SWIZZLE_128, 64, 64, 0, 60, 8, "is outside the view"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        loom_kernel *k = loom_kernel_create("parts", 4);
        loom_val r = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(c[i].rows, c[i].cols), 1, c[i].sw);
        loom_val p = loom_smem_part(k, r, c[i].dim, c[i].start, c[i].size);
        if (!c[i].err) {
            cr_assert_neq(p, LOOM_NONE, "case %zu: %s", i, loom_kernel_errors(k));
        } else {
            cr_assert_eq(p, LOOM_NONE, "case %zu accepted", i);
            cr_assert(strstr(loom_kernel_errors(k), c[i].err), "case %zu: %s", i, loom_kernel_errors(k));
            cr_assert(strstr(loom_kernel_errors(k), "test_cluster.c:"), "no source line: %s", loom_kernel_errors(k));
        }
        loom_kernel_destroy(k);
    }
}

/* The smem_part of a part, and a part read back through smem_load. */
Test(cluster, smem_part_views_their_window)
{
    /* f32 [16, 128] swizzled 128 B: four 32-column chunks; rows 8..15 of the third */
    loom_kernel *k = loom_kernel_create("window", 4);
    loom_val out = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE2(8, 32), LOOM_OUT);
    loom_val in = loom_arg_tensor(k, "in", LOOM_F32, LOOM_SHAPE2(16, 128), LOOM_IN);
    loom_val r = loom_smem_alloc(k, LOOM_F32, LOOM_SHAPE2(16, 128), 1, LOOM_SWIZZLE_128);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_smem_store(k, r, loom_load(k, in, ((loom_val[]){I32(k, 0), I32(k, 0)}), LOOM_SHAPE2(16, 128), LOOM_NONE, 0));
    loom_val rows = loom_smem_part(k, loom_smem_part(k, r, 1, 64, 32), 0, 8, 8);
    loom_store(k, out, ((loom_val[]){I32(k, 0), I32(k, 0)}), loom_smem_load(k, rows), LOOM_NONE);
    loom_task_end(k, t);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    float src[16 * 128], got[8 * 32];
    for (int i = 0; i < 16 * 128; i++)
        src[i] = (float)i;
    targ a[] = {TA_ARR(got), TA_ARR(src)};
    T_RUN_OK(k, NULL, a, 2);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 32; j++)
            cr_assert_eq(got[i * 32 + j], src[(8 + i) * 128 + 64 + j], "[%d, %d]", i, j);
    loom_kernel_destroy(k);
}

Test(cluster, ptx_has_cluster_launch_multicast_and_remote_arrivals)
{
    int wl;
    loom_kernel *k = mc_gemm(256, 128, 256, 3, MC_OK, &wl);
    char *ptx = NULL, err[1024];
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert(strstr(ptx, ".reqnctapercluster 2, 1, 1"), "no cluster directive");
    cr_assert(strstr(ptx, ".multicast::cluster"), "no multicast load");
    cr_assert(strstr(ptx, "mapa.shared::cluster.u32"), "no mapa");
    cr_assert(strstr(ptx, "mbarrier.arrive.shared::cluster.b64"), "no remote arrival");
    cr_assert(strstr(ptx, "barrier.cluster.arrive"), "no cluster barrier");
    cr_assert(strstr(ptx, "%cluster_ctarank"), "no cluster rank");
    t_ptxas_ok(ptx, "sm_90a", "the cluster gemm");
    free(ptx);
    loom_kernel_destroy(k);
}

Test(cluster, multicast_gemm_on_the_gpu)
{
    loom_runtime *rt = t_gpu_or_skip();
    int wl;
    const int64_t M = 460, N = 128, K = 1000;
    loom_kernel *k = mc_gemm(M, N, K, 3, MC_OK, &wl);
    mc_io io = mc_inputs(M, N, K);
    loom_buffer *a = loom_buffer_create(rt, (size_t)(M * K) * 2), *b = loom_buffer_create(rt, (size_t)(K * N) * 2),
                *c = loom_buffer_create(rt, (size_t)(M * N) * 4);
    cr_assert(a && b && c, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_upload(a, io.a, (size_t)(M * K) * 2), LOOM_OK);
    cr_assert_eq(loom_buffer_upload(b, io.b, (size_t)(K * N) * 2), LOOM_OK);
    cr_assert_eq(loom_buffer_fill(c, 0xff), LOOM_OK); /* NaNs: every element must be written */
    int grid[3] = {8, 1, 1};
    loom_arg args[] = {LOOM_ARG_BUF(a), LOOM_ARG_BUF(b), LOOM_ARG_BUF(c)};
    for (int rep = 0; rep < 3; rep++)
        cr_assert_eq(loom_launch(rt, k, grid, args, 3), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_download(c, io.c, (size_t)(M * N) * 4), LOOM_OK, "%s", loom_runtime_error(rt));
    mc_check(&io, 2e-2);
    loom_buffer_destroy(a);
    loom_buffer_destroy(b);
    loom_buffer_destroy(c);
    mc_free(&io);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}
