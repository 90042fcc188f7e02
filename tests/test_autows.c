/*
 * test_autows.c -- automatic warp specialization (issue 42): a plain tile loop with
 * loom_dot becomes the producer / consumer wgmma kernel (pipe/autows.c).
 *
 * The kernels are examples/kernels/plain.c's, written the Triton way: a GEMM, a GEMM with
 * a bias + GELU epilogue, the IKBO linear compression's fused stage (the candidate GEMM
 * plus user_res[cand_to_user[b]] in the epilogue) and one head of attention (two dots and
 * an online softmax).  For each:
 *   - on the interpreter, the kernel as written (its semantics) and its specialized form
 *     (the passes' kernel, run persistently over fewer CTAs than programs, under the
 *     interpreter's deadlock and race checks) are each checked against a reference in
 *     double, element by element, by the error model (tests/t_model.h);
 *   - compiled, its PTX assembles with ptxas for sm_90a without spills, and it has no
 *     layout conversion;
 *   - on the GPU (skipped without one), its launch is checked the same way.
 * Then what the passes refuse, each with the user's line, and LOOM_DUMP_AFTER's view of
 * each pass.
 */
#include "../pipe/autows.h"
#include "ikbo_fa.h"
#include "plain.h"
#include "t_model.h"
#include "testutil.h"

#include <math.h>
#include <unistd.h>

#define I32(k, v) loom_const_i(k, LOOM_I32, v)

/* ---------------------------------------------------------------- data and references */

static void fill(void *p, loom_dtype dt, int64_t n, uint64_t seed, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(seed >> 11) * 0x1p-53;
        tpl_set(p, dt, i, lo + (hi - lo) * u);
    }
}

/* C = A @ B in double, and the products' magnitudes (M x N). */
static void gemm_ref(const void *a, const void *b, loom_dtype dt, int64_t M, int64_t N, int64_t K, double *ref,
                     double *mag)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0, g = 0;
            for (int64_t k = 0; k < K; k++) {
                double p = tpl_get(a, dt, m * K + k) * tpl_get(b, dt, k * N + n);
                s += p;
                g += fabs(p);
            }
            ref[m * N + n] = s;
            mag[m * N + n] = g;
        }
}

/* The specialized form of k (the passes' kernel), or a failed test. */
static loom_kernel *specialized(loom_kernel *k)
{
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    loom_kernel *ws = NULL;
    char err[2048] = "";
    loom_status st = pipe_autows(k, NULL, &ws, err, sizeof err);
    cr_assert_eq(st, LOOM_OK, "autows: %s", err);
    cr_assert(ws);
    return ws;
}

/* Run k on the interpreter over grid (the user's); with ws, run its specialized form
 * instead: `ctas` persistent CTAs taking the grid's programs, the grid passed after the
 * arguments. */
static void run_interp(loom_kernel *k, bool ws, const int grid[3], int ctas, targ *args, int n)
{
    if (!ws) {
        T_RUN_OK(k, grid, args, n);
        return;
    }
    loom_kernel *s = specialized(k);
    targ all[LOOM_MAX_ARGS];
    for (int i = 0; i < n; i++)
        all[i] = args[i];
    for (int i = 0; i < 3; i++)
        all[n + i] = TA_I32(grid[i]);
    int g[3] = {ctas, 1, 1};
    T_RUN_OK(s, g, all, n + 3);
    loom_kernel_destroy(s);
}

/* ptxas accepts the kernel's PTX with no spills, and the plan has no layout conversion. */
static void compiles_clean(loom_kernel *k)
{
    char *ptx = NULL, err[4096];
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect(strstr(ptx, "wgmma.mma_async"), "the dots run on the tensor cores");
    cr_expect(strstr(ptx, "cp.async.bulk.tensor"), "the producer loads by TMA");
    cr_expect(strstr(ptx, "setmaxnreg"), "the roles have register budgets");
    cr_expect(t_ptxas_ok(ptx, "sm_90a", loom_kernel_name(k)), "ptxas refuses or spills");
    free(ptx);
    char *text = NULL;
    cr_assert_eq(loom_kernel_explain(k, "sm_90a", NULL, NULL, &text, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect(strstr(text, " 0 conversions"), "%s", text);
    free(text);
}

/* ---------------------------------------------------------------- GEMM */

typedef struct gemm_case {
    int64_t Mmax, M, N, K;
    plain_cfg c;
} gemm_case;

static int gemm_grid(const gemm_case *g, int grid[3])
{
    grid[0] = (int)(((g->M + g->c.bm - 1) / g->c.bm) * ((g->N + g->c.bn - 1) / g->c.bn));
    grid[1] = grid[2] = 1;
    return grid[0];
}

/* A GEMM kernel's launch on (M, A, B, C) with the host arrays a, b and c (bytes given; c
 * comes back): on the GPU where rt is one, else on the interpreter over 3 programs. */
static void run_gemm_args(loom_runtime *rt, loom_kernel *k, bool ws, const int grid[3], int64_t M, void *a,
                          size_t na, void *b, size_t nb, void *c, size_t nc)
{
    if (!rt) {
        targ args[4] = {TA_I32((int32_t)M), TA_BUF(a, na), TA_BUF(b, nb), TA_BUF(c, nc)};
        run_interp(k, ws, grid, 3, args, 4);
        return;
    }
    loom_buffer *ba = loom_buffer_create(rt, na), *bb = loom_buffer_create(rt, nb), *bc = loom_buffer_create(rt, nc);
    loom_buffer_upload(ba, a, na);
    loom_buffer_upload(bb, b, nb);
    loom_buffer_upload(bc, c, nc);
    loom_arg args[4] = {LOOM_ARG_I32((int32_t)M), LOOM_ARG_BUF(ba), LOOM_ARG_BUF(bb), LOOM_ARG_BUF(bc)};
    loom_status st = loom_launch(rt, k, grid, args, 4);
    cr_assert_eq(st, LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_runtime_sync(rt, 60000), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_buffer_download(bc, c, nc);
    loom_buffer_destroy(ba), loom_buffer_destroy(bb), loom_buffer_destroy(bc);
}

/* Run a GEMM case (as written or specialized) and check every element by the model;
 * returns the verdict of a copy of C with one element moved just past its bound too. */
static void gemm_run_check(loom_runtime *rt, const gemm_case *g, bool ws)
{
    loom_dtype dt = LOOM_F16;
    int64_t M = g->M, N = g->N, K = g->K;
    size_t es = loom_dtype_size(dt);
    void *a = malloc(M * K * es), *b = malloc(K * N * es), *c = malloc(g->Mmax * N * es);
    double *ref = malloc(M * N * sizeof *ref), *mag = malloc(M * N * sizeof *mag);
    fill(a, dt, M * K, 1, -1, 1);
    fill(b, dt, K * N, 2, -1, 1);
    memset(c, 0xff, g->Mmax * N * es); /* NaN until written */
    gemm_ref(a, b, dt, M, N, K, ref, mag);
    loom_kernel *k = plain_gemm(g->Mmax, N, K, dt, &g->c);
    int grid[3];
    gemm_grid(g, grid);
    run_gemm_args(rt, k, ws, grid, M, a, M * K * es, b, K * N * es, c, g->Mmax * N * es);
    t_verdict v = t_gemm_check(dt, K, c, ref, mag, M * N);
    cr_expect_eq(v.bad, 0, "%s: %lld of %lld elements past the bound; first [%lld] %g, reference %g, bound %g",
                 ws ? "specialized" : "as written", (long long)v.bad, (long long)(M * N), (long long)v.first, v.got,
                 v.ref, v.bound);
    /* the check catches an element just past its bound */
    double r0, b0;
    t_gemm_expected(dt, K, ref[7], mag[7], &r0, &b0);
    tpl_set(c, dt, 7, t_just_past(dt, r0, b0, 1));
    cr_expect_eq(t_gemm_check(dt, K, c, ref, mag, M * N).bad, 1, "a planted error is caught");
    loom_kernel_destroy(k);
    free(a), free(b), free(c), free(ref), free(mag);
}

static const gemm_case gemm_small[] = {
    /* one consumer warp group; M at the launch below the built one, not a tile multiple */
    {256, 200, 256, 192, {64, 128, 64, 1, 2, 0, 0}},
    /* two warp groups sharing 128 rows, the grouped order, 3 stages */
    {256, 256, 256, 128, {128, 64, 64, 2, 3, 2, 0}},
    /* ping-pong: two warp groups taking every other program whole */
    {256, 250, 256, 192, {64, 128, 64, 2, 2, 0, 1}},
    /* 128 x 256 with 4 stages: the tile goes out in two column halves through one staging
     * tile (the whole does not fit beside the ring) */
    {256, 200, 512, 256, {128, 256, 64, 2, 4, 0, 0}},
};

Test(autows, gemm_as_written_and_specialized_on_the_interpreter, .timeout = 240)
{
    for (size_t i = 0; i < sizeof gemm_small / sizeof *gemm_small; i++) {
        gemm_run_check(NULL, &gemm_small[i], false);
        gemm_run_check(NULL, &gemm_small[i], true);
    }
}

Test(autows, specialized_kernels_compile_clean)
{
    /* (an epilogue of 128 accumulator registers a thread and GELU's temporaries spills: the
     * fused epilogue takes 128 x 128 tiles) */
    plain_cfg g1 = {64, 256, 64, 1, 4, 8, 0}, g2 = {128, 256, 64, 2, 3, 8, 0}, gg = {128, 128, 64, 2, 4, 8, 0},
              gi = {128, 128, 64, 2, 4, 0, 0}, ga = {128, 64, 64, 2, 2, 0, 0};
    loom_kernel *ks[] = {plain_gemm(4096, 4096, 4096, LOOM_F16, &g1), plain_gemm(4096, 4096, 4096, LOOM_BF16, &g2),
                         plain_gemm_bias_gelu(2048, 2048, 2048, LOOM_F16, &gg),
                         plain_ikbo_fused(433, 256, 1184, 1024, 64, LOOM_F16, LOOM_F32, &gi),
                         plain_attention(4096, 4096, 128, LOOM_F16, 1.0 / sqrt(128.0), &ga)};
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        compiles_clean(ks[i]);
        loom_kernel_destroy(ks[i]);
    }
}

/* ---------------------------------------------------------------- FP8 GEMM */

/* The plain FP8 GEMM (plain_gemm_fp8: A [M, K], B stored [N, K] and dotted as the trans of
 * its tile) in dtypes adt x bdt -> odt.  Its reference is the exact sum in double.  The
 * interpreter sums the exact products in f32 (the gemm model, t_gemm_check); the GPU's FP8
 * wgmma adds with fewer bits (docs/checks.md, "FP8": loom_fp8_mma_sum_error, then the
 * output's rounding).  With ints the inputs are integers in [-2, 2]: every partial sum is
 * a small integer, exact in any order and precision of adds, so the result must be the
 * exact sum rounded once to odt (bound: the rounding alone). */
typedef struct fp8_case {
    int64_t Mmax, M, N, K;
    loom_dtype adt, bdt, odt;
    plain_cfg c;
} fp8_case;

static void fp8_gemm_run_check(loom_runtime *rt, const fp8_case *g, bool ws, bool ints)
{
    int64_t M = g->M, N = g->N, K = g->K;
    size_t os = loom_dtype_size(g->odt);
    void *a = malloc(M * K), *b = malloc(N * K), *c = malloc(g->Mmax * N * os);
    double *ref = malloc(M * N * sizeof *ref), *mag = malloc(M * N * sizeof *mag);
    fill(a, g->adt, M * K, 11, ints ? -2.5 : -1, ints ? 2.5 : 1);
    fill(b, g->bdt, N * K, 12, ints ? -2.5 : -1, ints ? 2.5 : 1);
    if (ints) /* whole numbers (the fill rounds to the type: -2.5 .. 2.5 to the nearest of its values) */
        for (int64_t i = 0; i < M * K || i < N * K; i++) {
            if (i < M * K)
                tpl_set(a, g->adt, i, nearbyint(tpl_get(a, g->adt, i)));
            if (i < N * K)
                tpl_set(b, g->bdt, i, nearbyint(tpl_get(b, g->bdt, i)));
        }
    memset(c, 0xff, g->Mmax * N * os); /* NaN until written */
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double sum = 0, mg = 0;
            for (int64_t x = 0; x < K; x++) {
                double p = tpl_get(a, g->adt, m * K + x) * tpl_get(b, g->bdt, n * K + x);
                sum += p, mg += fabs(p);
            }
            ref[m * N + n] = sum, mag[m * N + n] = mg;
        }
    loom_kernel *k = plain_gemm_fp8(g->Mmax, N, K, g->adt, g->bdt, g->odt, &g->c);
    int grid[3];
    grid[0] = (int)(((M + g->c.bm - 1) / g->c.bm) * ((N + g->c.bn - 1) / g->c.bn)), grid[1] = grid[2] = 1;
    run_gemm_args(rt, k, ws, grid, M, a, M * K, b, N * K, c, g->Mmax * N * os);
    t_verdict v = T_VERDICT_INIT;
    for (int64_t i = 0; i < M * N; i++) {
        double r = tpl_round(g->odt, ref[i]);
        double sum_err = ints ? 0 : rt ? loom_fp8_mma_sum_error(K, mag[i]) : loom_f32_sum_error(K, mag[i]);
        t_verdict_add(&v, i, tpl_get(c, g->odt, i), r, loom_error_bound(g->odt, r, sum_err));
    }
    cr_expect_eq(v.bad, 0,
                 "%s x %s -> %s, %s%s%s: %lld of %lld elements past the bound; first [%lld] %g, reference %g, "
                 "bound %g", loom_dtype_name(g->adt), loom_dtype_name(g->bdt), loom_dtype_name(g->odt),
                 rt ? "GPU" : "interpreter", ws ? ", specialized" : ", as written", ints ? ", integer inputs" : "",
                 (long long)v.bad, (long long)(M * N), (long long)v.first, v.got, v.ref, v.bound);
    cr_log_info("FP8 GEMM %s x %s -> %s %lldx%lldx%lld (%s%s): worst error / bound %.3g", loom_dtype_name(g->adt),
                loom_dtype_name(g->bdt), loom_dtype_name(g->odt), (long long)M, (long long)N, (long long)K,
                rt ? "GPU" : "interpreter", ints ? ", integer inputs" : "", v.worst);
    if (!ints) { /* the check catches an element just past its bound */
        double r0 = tpl_round(g->odt, ref[7]);
        double e0 = rt ? loom_fp8_mma_sum_error(K, mag[7]) : loom_f32_sum_error(K, mag[7]);
        double b0 = loom_error_bound(g->odt, r0, e0);
        tpl_set(c, g->odt, 7, t_just_past(g->odt, r0, b0, 1));
        t_verdict p = T_VERDICT_INIT;
        for (int64_t i = 0; i < M * N; i++) {
            double r = tpl_round(g->odt, ref[i]);
            double sum_err = rt ? loom_fp8_mma_sum_error(K, mag[i]) : loom_f32_sum_error(K, mag[i]);
            t_verdict_add(&p, i, tpl_get(c, g->odt, i), r, loom_error_bound(g->odt, r, sum_err));
        }
        cr_expect_eq(p.bad, v.bad + 1, "a planted error is caught");
    }
    loom_kernel_destroy(k);
    free(a), free(b), free(c), free(ref), free(mag);
}

static const fp8_case fp8_small[] = {
    /* e4m3 into f32, one consumer group, M below the built one and not a tile multiple */
    {256, 200, 256, 256, LOOM_E4M3, LOOM_E4M3, LOOM_F32, {64, 128, 128, 1, 2, 0, 0}},
    /* e4m3 x e5m2 into bf16, two groups sharing 128 rows, 64-wide k steps (64-byte swizzle) */
    {256, 256, 256, 192, LOOM_E4M3, LOOM_E5M2, LOOM_BF16, {128, 64, 64, 2, 3, 2, 0}},
    /* e5m2 x e4m3 into f16, ping-pong, 32-wide k steps (32-byte swizzle) */
    {256, 250, 128, 128, LOOM_E5M2, LOOM_E4M3, LOOM_F16, {64, 128, 32, 2, 2, 0, 1}},
};

Test(autows, fp8_gemm_as_written_and_specialized_on_the_interpreter, .timeout = 240)
{
    for (size_t i = 0; i < sizeof fp8_small / sizeof *fp8_small; i++) {
        fp8_gemm_run_check(NULL, &fp8_small[i], false, false);
        fp8_gemm_run_check(NULL, &fp8_small[i], true, false);
    }
    fp8_gemm_run_check(NULL, &fp8_small[0], true, true);
}

/* The specialized FP8 GEMM: FP8 wgmma (k32, both operands' descriptors K-major), no
 * spills; B as the trans of its [N, K] slot, so no transpose bit. */
Test(autows, fp8_gemm_compiles_to_fp8_wgmma)
{
    plain_cfg c1 = {128, 256, 128, 2, 3, 8, 0}, c2 = {128, 128, 128, 2, 4, 8, 0}, c3 = {64, 256, 128, 2, 4, 8, 1};
    loom_kernel *ks[] = {plain_gemm_fp8(4096, 4096, 4096, LOOM_E4M3, LOOM_E4M3, LOOM_BF16, &c1),
                         plain_gemm_fp8(4096, 4096, 4096, LOOM_E4M3, LOOM_E5M2, LOOM_F32, &c2),
                         plain_gemm_fp8(4096, 4096, 4096, LOOM_E5M2, LOOM_E5M2, LOOM_F16, &c3)};
    const char *insn[] = {"wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3",
                          "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2",
                          "wgmma.mma_async.sync.aligned.m64n256k32.f32.e5m2.e5m2"};
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        compiles_clean(ks[i]);
        char *ptx = NULL, err[4096];
        cr_assert_eq(loom_compile_ptx(ks[i], "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
        cr_expect(strstr(ptx, insn[i]), "%zu: no %s", i, insn[i]);
        cr_expect(!strstr(ptx, "mma.sync"), "%zu: the loop's dot is on wgmma", i);
        free(ptx);
        loom_kernel_destroy(ks[i]);
    }
}

/* The staged epilogue: the plain store becomes one TMA store where the staging tile fits
 * beside the ring; where it does not, the store stays in registers and the dump says why. */
static void compile_dump(void *arg)
{
    char *ptx = NULL, err[2048];
    cr_assert_eq(loom_compile_ptx(arg, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    free(ptx);
}

/* What LOOM_DUMP_AFTER=pass prints while k compiles (free it). */
static char *dump_after(loom_kernel *k, const char *pass)
{
    setenv("LOOM_DUMP_AFTER", pass, 1);
    char *out = t_capture_stderr(compile_dump, k);
    unsetenv("LOOM_DUMP_AFTER");
    return out;
}


Test(autows, dump_after_shows_each_pass)
{
    plain_cfg c = {128, 256, 64, 2, 4, 8, 0};
    loom_kernel *k = plain_gemm(4096, 4096, 4096, LOOM_F16, &c);
    char *out = dump_after(k, "all");
    cr_expect(strstr(out, "// autows ws-tasks: kernel 'gemm_plain'") && strstr(out, "producer: load at "), "%s", out);
    cr_expect(strstr(out, "// autows ws-data: 2 consumer warp groups") && strstr(out, "each group its 64 rows"),
              "%s", out);
    cr_expect(strstr(out, "// autows ws-channels: one ring, a slot holds 2 tiles") &&
                  strstr(out, "f16[128x64] swizzle 128, TMA from 'A'") && strstr(out, "f16[64x256] swizzle 128"),
              "%s", out);
    cr_expect(strstr(out, "// autows ws-pipeline: 4 stages") && strstr(out, "one wgmma group in flight"), "%s", out);
    /* 4 stages of 48 KiB leave no room for a 64 KiB staging tile: it goes in halves, said
     * with the line */
    cr_expect(strstr(out, "the store at ") && strstr(out, "staged in shared memory in 2 column parts"), "%s", out);
    cr_expect(strstr(out, "// loom IR after ws-code") && strstr(out, "task warps=4 regs=40") &&
                  strstr(out, "task warps=8 regs=232") && strstr(out, "tma_load %A"),
              "%s", out);
    free(out);
    loom_kernel_destroy(k);
    /* with 3 stages it fits: one TMA store */
    c.stages = 3;
    k = plain_gemm(4096, 4096, 4096, LOOM_F16, &c);
    out = dump_after(k, "ws-code");
    cr_expect(strstr(out, "tma_store %C"), "%s", out);
    cr_expect(!strstr(out, "autows ws-tasks"), "only the pass asked for: %s", out);
    free(out);
    loom_kernel_destroy(k);
}

static void count_arith(void *ctx, const loom_cost *c) { *(int *)ctx += c->kind == LOOM_COST_ARITH; }

/* Attention: its two dots software-pipelined by a step, and Q (loaded before the loop,
 * read only as the first dot's A) through a ring of its own. */
Test(autows, attention_is_pipelined_and_q_goes_through_shared_memory)
{
    plain_cfg c = {128, 128, 64, 2, 2, 0, 0};
    loom_kernel *k = plain_attention(4096, 4096, 128, LOOM_F16, 0.088, &c);
    char *out = dump_after(k, "all");
    cr_expect(strstr(out, "software-pipelined by a step"), "%s", out);
    cr_expect(strstr(out, "and a ring for the tile loaded before the loop at "), "%s", out);
    /* the IR: Q's ring of its own (two slots), TMA'd by the producer, its view read by wgmma */
    cr_expect(strstr(out, "smem_alloc f16[128x128] slots=2"), "%s", out);
    cr_expect(strstr(out, "wgmma_wait") && strstr(out, "pending=1"), "a step's first dot waited with one group left");
    free(out);
    char *ptx = NULL, err[2048];
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect(t_ptxas_ok(ptx, "sm_90a", "attention_plain"), "ptxas refuses or spills");
    free(ptx);
    /* written as Triton's tutorial writes it (the scale in one fma, a reciprocal a row):
     * no arithmetic that a rewrite would make cheaper */
    int hints = 0;
    char *text = NULL;
    cr_assert_eq(loom_kernel_explain(k, "sm_90a", count_arith, &hints, &text, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect_eq(hints, 0, "%s", text);
    free(text);
    loom_kernel_destroy(k);
}

/* The IKBO fused stage's epilogue reads user_res[u(b)]'s tile: the producer loads it into a
 * slot of its own during the program's k steps and the epilogue reads it from shared
 * memory (from global memory after the loop it cost the plain kernel 0.14 ms of 0.51 at
 * the headline, bench/RESULTS.md); where the tile does not fit, it stays in registers
 * and the dump says why. */
Test(autows, a_store_too_large_to_stage_goes_out_in_column_parts)
{
    /* 128 x 256 f16 with 4 stages: the ring takes 192 KiB, so the 64 KiB staging tile does
     * not fit; a 32 KiB half does */
    plain_cfg c = {128, 256, 64, 2, 4, 8, 0};
    loom_kernel *k = plain_gemm(4096, 4096, 4096, LOOM_F16, &c);
    char *out = dump_after(k, "all");
    cr_expect(strstr(out, "staged in shared memory in 2 column parts"), "%s", out);
    /* the IR: a [128 x 128] staging tile, the accumulator's halves sliced into it */
    cr_expect(strstr(out, "smem_alloc f16[128x128]") && strstr(out, "dim=1 start=128 size=128"), "%s", out);
    free(out);
    compiles_clean(k);
    loom_kernel_destroy(k);
    /* with a residual added: each half of it loaded on its own, beside its half of the
     * accumulator (no spill: the whole residual is never live) */
    plain_cfg f = {128, 256, 64, 2, 4, 0, 0};
    k = plain_ikbo_fused(433, 256, 866, 1024, 15, LOOM_F16, LOOM_F16, &f);
    out = dump_after(k, "ws-code");
    cr_expect(strstr(out, "load %user_res") && strstr(out, "shape=[128x128] fill=0 : f16[128x128]"), "%s", out);
    free(out);
    compiles_clean(k);
    loom_kernel_destroy(k);
    /* 3 stages: the residual's tile through shared memory beside the ring, the store in
     * quarters, each quarter of the residual read from its part of the slot in the
     * accumulator part's layout (compiles_clean: no conversion) */
    f.stages = 3;
    k = plain_ikbo_fused(433, 256, 866, 1024, 15, LOOM_F16, LOOM_F16, &f);
    out = dump_after(k, "ws-code");
    cr_expect(strstr(out, "smem_part") && strstr(out, "dim=1 start=192 size=64"), "%s", out);
    free(out);
    compiles_clean(k);
    loom_kernel_destroy(k);
}

Test(autows, the_epilogue_tile_goes_through_shared_memory)
{
    plain_cfg c = {64, 256, 64, 1, 3, 0, 0};
    loom_kernel *k = plain_ikbo_fused(433, 256, 866, 1024, 15, LOOM_F16, LOOM_F32, &c);
    char *out = dump_after(k, "all");
    cr_expect(strstr(out, "(the epilogue's tile, loaded during the k steps)"), "%s", out);
    cr_expect(strstr(out, "and a ring of one slot for the epilogue's tile loaded at ") && strstr(out, "(f32[64x256])"),
              "%s", out);
    cr_expect(strstr(out, "loaded by the producer after the first 3 k steps of each program"), "%s", out);
    /* the IR: its slot, TMA'd from user_res by the producer, read by smem_load */
    cr_expect(strstr(out, "smem_alloc f32[64x256]") && strstr(out, "tma_load %user_res") && strstr(out, "smem_load"),
              "%s", out);
    /* and the staging tile still fits beside it: one TMA store */
    cr_expect(strstr(out, "tma_store %out"), "%s", out);
    free(out);
    compiles_clean(k);
    loom_kernel_destroy(k);
    /* 4 stages: no room for a staging tile beside the ring and the epilogue's tile, so the
     * store goes through the last k step's slot (its [64 x 256] B tile) */
    c.stages = 4;
    k = plain_ikbo_fused(433, 256, 866, 1024, 15, LOOM_F16, LOOM_F32, &c);
    out = dump_after(k, "ws-pipeline");
    cr_expect(strstr(out, "one slot of its own, loaded by the producer after the first 4 k steps") &&
                  strstr(out, "staged in the last k step's slot (its tile 1), one TMA store") &&
                  strstr(out, "the slot goes back once the store has read it, during the next program's first k steps"),
              "%s", out);
    free(out);
    compiles_clean(k);
    loom_kernel_destroy(k);
    /* 128 x 256: the f32 tile is 128 KiB, past the room beside the ring */
    plain_cfg big = {128, 256, 64, 2, 3, 0, 0};
    k = plain_ikbo_fused(433, 256, 866, 1024, 15, LOOM_F16, LOOM_F32, &big);
    out = dump_after(k, "ws-pipeline");
    cr_expect(strstr(out, "stays in registers: its 131072-byte tile does not fit beside the ring"), "%s", out);
    free(out);
    loom_kernel_destroy(k);
    /* transposed, 4 stages: no room to stage the tile, and a tile turned by trans has its
     * columns in other threads (no column parts): from registers, said with the line */
    plain_cfg t4 = {224, 128, 64, 2, 4, 0, 0};
    k = plain_ikbo_fused_t(433, 256, 866, 1024, 15, LOOM_F16, LOOM_F32, &t4);
    out = dump_after(k, "ws-pipeline");
    cr_expect(strstr(out, "goes from registers: its 57344-byte staging tile does not fit"), "%s", out);
    free(out);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- GEMM + bias + GELU */

/* gelu(x) with x = acc + bias: the bound of the output from the sum's error (through
 * gelu's slope, at most 1.13), the GPU's tanh (relative 2^-10.9, on 0.5 |x|), the f32
 * arithmetic of the activation (eight roundings of terms up to |x| (1 + 0.045 x^2)) and
 * the output's rounding. */
static double gelu_bound(loom_dtype dt, double ref, double x, double sum_err)
{
    double ax = fabs(x), ops = 8 * 0x1p-24 * ax * (1 + 0.045 * ax * ax);
    return loom_error_bound(dt, ref, 1.13 * sum_err + 0.5 * ax * exp2(-10.9) + ops);
}

static double gelu(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

static void gelu_run_check(loom_runtime *rt, bool ws)
{
    loom_dtype dt = LOOM_F16;
    int64_t Mmax = 192, M = 150, N = 256, K = 128;
    plain_cfg c = {64, 128, 64, 1, 2, 0, 0};
    size_t es = 2;
    void *a = malloc(M * K * es), *b = malloc(K * N * es), *out = malloc(Mmax * N * es);
    float *bias = malloc(N * sizeof *bias);
    double *ref = malloc(M * N * sizeof *ref), *mag = malloc(M * N * sizeof *mag);
    fill(a, dt, M * K, 3, -1, 1);
    fill(b, dt, K * N, 4, -1, 1);
    fill(bias, LOOM_F32, N, 5, -2, 2);
    memset(out, 0xff, Mmax * N * es);
    gemm_ref(a, b, dt, M, N, K, ref, mag);
    loom_kernel *k = plain_gemm_bias_gelu(Mmax, N, K, dt, &c);
    int grid[3] = {(int)(((M + 63) / 64) * (N / 128)), 1, 1};
    if (rt) {
        loom_buffer *bufs[4] = {loom_buffer_create(rt, M * K * es), loom_buffer_create(rt, K * N * es),
                                loom_buffer_create(rt, N * 4), loom_buffer_create(rt, Mmax * N * es)};
        loom_buffer_upload(bufs[0], a, M * K * es);
        loom_buffer_upload(bufs[1], b, K * N * es);
        loom_buffer_upload(bufs[2], bias, N * 4);
        loom_buffer_upload(bufs[3], out, Mmax * N * es);
        loom_arg args[5] = {LOOM_ARG_I32((int32_t)M), LOOM_ARG_BUF(bufs[0]), LOOM_ARG_BUF(bufs[1]),
                            LOOM_ARG_BUF(bufs[2]), LOOM_ARG_BUF(bufs[3])};
        cr_assert_eq(loom_launch(rt, k, grid, args, 5), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_assert_eq(loom_runtime_sync(rt, 60000), LOOM_OK, "%s", loom_runtime_error(rt));
        loom_buffer_download(bufs[3], out, Mmax * N * es);
        for (int i = 0; i < 4; i++)
            loom_buffer_destroy(bufs[i]);
    } else {
        targ args[5] = {TA_I32((int32_t)M), TA_BUF(a, M * K * es), TA_BUF(b, K * N * es), TA_BUF(bias, N * 4),
                        TA_BUF(out, Mmax * N * es)};
        run_interp(k, ws, grid, 2, args, 5);
    }
    t_verdict v = T_VERDICT_INIT;
    for (int64_t i = 0; i < M * N; i++) {
        double x = ref[i] + bias[i % N], r = tpl_round(dt, gelu(x));
        double sum_err = loom_f32_sum_error(K + 1, mag[i] + fabs(bias[i % N]));
        t_verdict_add(&v, i, tpl_get(out, dt, i), r, gelu_bound(dt, r, x, sum_err));
    }
    cr_expect_eq(v.bad, 0, "%s: %lld elements past the bound; first [%lld] %g, reference %g, bound %g",
                 ws ? "specialized" : "as written", (long long)v.bad, (long long)v.first, v.got, v.ref, v.bound);
    loom_kernel_destroy(k);
    free(a), free(b), free(out), free(bias), free(ref), free(mag);
}

Test(autows, gemm_bias_gelu_on_the_interpreter, .timeout = 240)
{
    gelu_run_check(NULL, false);
    gelu_run_check(NULL, true);
}

/* ---------------------------------------------------------------- the IKBO fused stage */

/* user_res in rdt: f32, or f16 (rounded as the framework rounds it). */
static void ikbo_run_check_r(loom_runtime *rt, bool ws, int64_t M, int64_t N, int64_t K, int64_t B, int64_t U,
                             const plain_cfg *c, bool transposed, loom_dtype rdt)
{
    loom_dtype dt = LOOM_F16;
    size_t es = 2, rs = rdt == LOOM_F32 ? 4 : 2;
    void *w = malloc(M * K * es), *e = malloc(B * K * N * es), *out = malloc(B * M * N * es);
    void *res = malloc(U * M * N * rs);
    int32_t *map = malloc(B * sizeof *map);
    double *ref = malloc(M * N * sizeof *ref), *mag = malloc(M * N * sizeof *mag);
    fill(w, dt, M * K, 6, -1, 1);
    fill(e, dt, B * K * N, 7, -1, 1);
    fill(res, rdt, U * M * N, 8, -4, 4);
    for (int64_t b = 0; b < B; b++)
        map[b] = (int32_t)((b * 7 + 3) % U);
    memset(out, 0xff, B * M * N * es);
    loom_kernel *k = (transposed ? plain_ikbo_fused_t : plain_ikbo_fused)(M, N, K, B, U, dt, rdt, c);
    int grid[3] = {(int)(((M + c->bm - 1) / c->bm) * ((N + c->bn - 1) / c->bn)), (int)B, 1};
    if (rt) {
        size_t sz[5] = {M * K * es, B * K * N * es, B * 4, U * M * N * rs, B * M * N * es};
        void *host[5] = {w, e, map, res, out};
        loom_buffer *bufs[5];
        loom_arg args[6] = {LOOM_ARG_I32((int32_t)M)};
        for (int i = 0; i < 5; i++) {
            bufs[i] = loom_buffer_create(rt, sz[i]);
            loom_buffer_upload(bufs[i], host[i], sz[i]);
            args[1 + i] = LOOM_ARG_BUF(bufs[i]);
        }
        cr_assert_eq(loom_launch(rt, k, grid, args, 6), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_assert_eq(loom_runtime_sync(rt, 60000), LOOM_OK, "%s", loom_runtime_error(rt));
        loom_buffer_download(bufs[4], out, sz[4]);
        for (int i = 0; i < 5; i++)
            loom_buffer_destroy(bufs[i]);
    } else {
        targ args[6] = {TA_I32((int32_t)M), TA_BUF(w, M * K * es), TA_BUF(e, B * K * N * es), TA_BUF(map, B * 4),
                        TA_BUF(res, U * M * N * rs), TA_BUF(out, B * M * N * es)};
        run_interp(k, ws, grid, 3, args, 6);
    }
    t_verdict v = T_VERDICT_INIT;
    for (int64_t b = 0; b < B; b++) {
        gemm_ref(w, (char *)e + b * K * N * es, dt, M, N, K, ref, mag);
        for (int64_t i = 0; i < M * N; i++) {
            double u = tpl_get(res, rdt, map[b] * M * N + i), r = tpl_round(dt, ref[i] + u);
            /* the add is one more term of the f32 sum */
            t_verdict_add(&v, b * M * N + i, tpl_get(out, dt, b * M * N + i), r,
                          loom_error_bound(dt, r, loom_f32_sum_error(K + 1, mag[i] + fabs(u))));
        }
    }
    cr_expect_eq(v.bad, 0, "%s: %lld elements past the bound; first [%lld] %g, reference %g, bound %g",
                 ws ? "specialized" : "as written", (long long)v.bad, (long long)v.first, v.got, v.ref, v.bound);
    loom_kernel_destroy(k);
    free(w), free(e), free(out), free(res), free(map), free(ref), free(mag);
}

static void ikbo_run_check(loom_runtime *rt, bool ws, int64_t M, int64_t N, int64_t K, int64_t B, int64_t U,
                           const plain_cfg *c, bool transposed)
{
    ikbo_run_check_r(rt, ws, M, N, K, B, U, c, transposed, LOOM_F32);
}

Test(autows, ikbo_fused_stage_on_the_interpreter, .timeout = 240)
{
    plain_cfg c = {64, 128, 64, 1, 2, 0, 0};
    ikbo_run_check(NULL, false, 100, 128, 128, 3, 2, &c, false);
    ikbo_run_check(NULL, true, 100, 128, 128, 3, 2, &c, false);
    plain_cfg pp = {64, 128, 64, 2, 2, 0, 1};
    ikbo_run_check(NULL, true, 100, 128, 128, 3, 2, &pp, false);
    /* the epilogue's tile loaded after the first step (stages 1) and after the loop (K 64) */
    plain_cfg e1 = {64, 128, 64, 1, 1, 0, 0};
    ikbo_run_check(NULL, true, 100, 128, 128, 3, 2, &e1, false);
    ikbo_run_check(NULL, true, 100, 128, 64, 3, 2, &c, false);
    /* the store staged through the last k step's slot: beside the epilogue's tile (4
     * stages: the tile loaded after the loop, K = 192 being 3 steps), and alone (5) */
    plain_cfg b4 = {64, 256, 64, 1, 4, 0, 0}, b5 = {64, 256, 64, 1, 5, 0, 0};
    ikbo_run_check(NULL, true, 100, 256, 192, 3, 2, &b4, false);
    ikbo_run_check(NULL, true, 100, 256, 320, 3, 2, &b5, false);
    /* the held slot goes back during the next program's second k step, or, with one k
     * step a program (K 64), after it */
    ikbo_run_check(NULL, true, 100, 256, 64, 3, 2, &b4, false);
    /* 128 x 256 with 4 stages: the tile goes out in column halves, each half's user_res
     * loaded on its own (f32 and f16) */
    plain_cfg h4 = {128, 256, 64, 2, 4, 0, 0};
    ikbo_run_check(NULL, true, 100, 256, 320, 3, 2, &h4, false);
    ikbo_run_check_r(NULL, true, 100, 256, 320, 3, 2, &h4, false, LOOM_F16);
    /* 3 stages, user_res in f16: its tile through shared memory, the store in quarters,
     * each quarter of the tile read from its part of the slot (given back after the last) */
    plain_cfg h3 = {128, 256, 64, 2, 3, 0, 0};
    ikbo_run_check_r(NULL, true, 100, 256, 320, 3, 2, &h3, false, LOOM_F16);
    /* user_res in f16: its tile (half the bytes) beside a 4-stage ring and the staging tile */
    ikbo_run_check_r(NULL, true, 100, 256, 320, 3, 2, &b4, false, LOOM_F16);
    /* transposed: tiles of 64 rows of N by 112 of M, one group */
    plain_cfg t = {112, 64, 64, 1, 2, 0, 0};
    ikbo_run_check(NULL, false, 100, 128, 128, 3, 2, &t, true);
    ikbo_run_check(NULL, true, 100, 128, 128, 3, 2, &t, true);
}

/* ---------------------------------------------------------------- attention */

static void attention_run_check(loom_runtime *rt, bool ws, int64_t M, int64_t S, int64_t D, const plain_cfg *c)
{
    loom_dtype dt = LOOM_F16;
    size_t es = 2;
    void *q = malloc(M * D * es), *kk = malloc(S * D * es), *vv = malloc(S * D * es), *o = malloc(M * D * es),
         *ref = malloc(M * D * es);
    double *bound = malloc(M * D * sizeof *bound);
    fill(q, dt, M * D, 9, -1, 1);
    fill(kk, dt, S * D, 10, -1, 1);
    fill(vv, dt, S * D, 11, -1, 1);
    memset(o, 0xff, M * D * es);
    double scale = 1.0 / sqrt((double)D);
    loom_kernel *k = plain_attention(M, S, D, dt, scale, c);
    int grid[3] = {(int)((M + c->bm - 1) / c->bm), 1, 1};
    if (rt) {
        void *host[4] = {q, kk, vv, o};
        size_t sz[4] = {M * D * es, S * D * es, S * D * es, M * D * es};
        loom_buffer *bufs[4];
        loom_arg args[5] = {LOOM_ARG_I32((int32_t)M)};
        for (int i = 0; i < 4; i++) {
            bufs[i] = loom_buffer_create(rt, sz[i]);
            loom_buffer_upload(bufs[i], host[i], sz[i]);
            args[1 + i] = LOOM_ARG_BUF(bufs[i]);
        }
        cr_assert_eq(loom_launch(rt, k, grid, args, 5), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_assert_eq(loom_runtime_sync(rt, 60000), LOOM_OK, "%s", loom_runtime_error(rt));
        loom_buffer_download(bufs[3], o, sz[3]);
        for (int i = 0; i < 4; i++)
            loom_buffer_destroy(bufs[i]);
    } else {
        targ args[5] = {TA_I32((int32_t)M), TA_BUF(q, M * D * es), TA_BUF(kk, S * D * es), TA_BUF(vv, S * D * es),
                        TA_BUF(o, M * D * es)};
        run_interp(k, ws, grid, 2, args, 5);
    }
    /* the reference and bound of ikbo_fa's model: one user, one head, M queries */
    fa_spec s = {.B = 1, .U = 1, .S = S, .H = 1, .D = D, .nseed = M, .dt = dt, .bn = c->bn};
    int32_t map0 = 0;
    fa_reference(&s, q, kk, vv, &map0, NULL, ref);
    fa_bound(&s, q, kk, vv, &map0, NULL, ref, bound);
    t_verdict v = T_VERDICT_INIT;
    for (int64_t i = 0; i < M * D; i++)
        t_verdict_add(&v, i, tpl_get(o, dt, i), tpl_get(ref, dt, i), bound[i]);
    cr_expect_eq(v.bad, 0, "%s: %lld elements past the bound; first [%lld] %g, reference %g, bound %g",
                 ws ? "specialized" : "as written", (long long)v.bad, (long long)v.first, v.got, v.ref, v.bound);
    loom_kernel_destroy(k);
    free(q), free(kk), free(vv), free(o), free(ref), free(bound);
}

/* IKBO attention in units (plain_ikbo_attention_units): runs of candidates of one user, two
 * a unit where they come in pairs, so a unit of one candidate stores nseed of its tile's
 * rows (the store's mask) and must leave the next unit's rows alone.  Candidates 0-1 and
 * 3-4 are pairs and 2 and 5 are alone; out starts as NaN, and every row is checked. */
static void units_run_check(loom_runtime *rt, bool ws, int64_t S, const plain_cfg *c)
{
    loom_dtype dt = LOOM_F16;
    int64_t B = 6, U = 3, H = 2, D = 128, nseed = c->bm / 2, R = B * nseed;
    size_t es = 2, nq = R * H * D, nk = U * S * H * D;
    int32_t map[6] = {0, 0, 1, 2, 2, 0}, plan[18];
    int64_t P = 0;
    for (int64_t b = 0; b < B;) {
        int64_t n = b + 1 < B && map[b + 1] == map[b] ? 2 : 1;
        plan[3 * P] = map[b], plan[3 * P + 1] = (int32_t)(b * nseed), plan[3 * P + 2] = (int32_t)(n * nseed);
        P++, b += n;
    }
    void *q = malloc(nq * es), *kk = malloc(nk * es), *vv = malloc(nk * es), *o = malloc(nq * es), *ref = malloc(nq * es);
    double *bound = malloc(nq * sizeof *bound);
    fill(q, dt, nq, 12, -1, 1);
    fill(kk, dt, nk, 13, -1, 1);
    fill(vv, dt, nk, 14, -1, 1);
    memset(o, 0xff, nq * es);
    loom_kernel *k = plain_ikbo_attention_units(B, U, S, H, D, nseed, P, dt, c);
    int grid[3] = {(int)P, (int)H, 1};
    if (rt) {
        void *host[5] = {q, kk, vv, plan, o};
        size_t sz[5] = {nq * es, nk * es, nk * es, (size_t)P * 12, nq * es};
        loom_buffer *bufs[5];
        loom_arg args[5];
        for (int i = 0; i < 5; i++) {
            bufs[i] = loom_buffer_create(rt, sz[i]);
            loom_buffer_upload(bufs[i], host[i], sz[i]);
            args[i] = LOOM_ARG_BUF(bufs[i]);
        }
        cr_assert_eq(loom_launch(rt, k, grid, args, 5), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_assert_eq(loom_runtime_sync(rt, 60000), LOOM_OK, "%s", loom_runtime_error(rt));
        loom_buffer_download(bufs[4], o, sz[4]);
        for (int i = 0; i < 5; i++)
            loom_buffer_destroy(bufs[i]);
    } else {
        targ args[5] = {TA_BUF(q, nq * es), TA_BUF(kk, nk * es), TA_BUF(vv, nk * es), TA_BUF(plan, (size_t)P * 12),
                        TA_BUF(o, nq * es)};
        run_interp(k, ws, grid, 2, args, 5);
    }
    fa_spec s = {.B = B, .U = U, .S = S, .H = H, .D = D, .nseed = nseed, .dt = dt, .bn = c->bn};
    fa_reference(&s, q, kk, vv, map, NULL, ref);
    fa_bound(&s, q, kk, vv, map, NULL, ref, bound);
    t_verdict v = T_VERDICT_INIT;
    for (int64_t i = 0; i < (int64_t)nq; i++)
        t_verdict_add(&v, i, tpl_get(o, dt, i), tpl_get(ref, dt, i), bound[i]);
    cr_expect_eq(v.bad, 0, "%s: %lld elements past the bound; first [%lld] %g, reference %g, bound %g",
                 ws ? "specialized" : "as written", (long long)v.bad, (long long)v.first, v.got, v.ref, v.bound);
    loom_kernel_destroy(k);
    free(q), free(kk), free(vv), free(o), free(ref), free(bound);
}

/* The masked store of the units kernel goes through shared memory and back to registers
 * in rows (a staging tile of its own at 2 stages; the last step's K or V slot at 3, where
 * no staging tile fits). */
Test(autows, masked_store_goes_through_shared_memory_on_the_interpreter, .timeout = 240)
{
    plain_cfg own = {128, 128, 64, 2, 2, 0, 0}, held = {128, 128, 64, 2, 3, 0, 0};
    units_run_check(NULL, false, 200, &own);
    units_run_check(NULL, true, 200, &own);
    units_run_check(NULL, true, 256, &held);
    loom_kernel *k = plain_ikbo_attention_units(2048, 32, 1024, 2, 128, 64, 1024, LOOM_F16, &held);
    char *out = dump_after(k, "ws-pipeline");
    cr_expect(strstr(out, "it has a mask, so the tile goes through the last k step's slot (held until read)"), "%s",
              out);
    free(out);
    compiles_clean(k);
    loom_kernel_destroy(k);
}

Test(autows, attention_on_the_interpreter, .timeout = 240)
{
    /* keys not a multiple of the tile: the last tile's keys past S score -inf */
    plain_cfg c = {64, 64, 64, 1, 2, 0, 0};
    attention_run_check(NULL, false, 96, 150, 64, &c);
    attention_run_check(NULL, true, 96, 150, 64, &c);
    plain_cfg pp = {64, 64, 64, 2, 2, 0, 1};
    attention_run_check(NULL, true, 200, 150, 64, &pp);
}

/* ---------------------------------------------------------------- on the GPU */

Test(autows_gpu, plain_kernels_specialized_match_their_references, .timeout = 300)
{
    loom_runtime *rt = t_gpu_or_skip();
    if (!rt)
        return;
    gemm_case g1 = {2048, 1999, 1024, 1000, {64, 256, 64, 1, 4, 8, 0}};
    gemm_case g2 = {1024, 1024, 768, 512, {128, 256, 64, 2, 3, 4, 0}};
    gemm_case g3 = {2048, 2000, 2048, 1024, {128, 256, 64, 2, 4, 8, 0}}; /* the store in column halves */
    gemm_run_check(rt, &g1, true);
    gemm_run_check(rt, &g2, true);
    gemm_run_check(rt, &g3, true);
    gelu_run_check(rt, true);
    gemm_case gb = {2048, 1999, 1024, 1000, {64, 256, 64, 1, 5, 8, 0}};
    gemm_run_check(rt, &gb, true);
    plain_cfg ca = {128, 128, 64, 2, 2, 0, 0};
    attention_run_check(rt, true, 1000, 1500, 128, &ca);
    plain_cfg uown = {128, 128, 64, 2, 2, 0, 0}, uheld = {128, 128, 64, 2, 3, 0, 0};
    units_run_check(rt, true, 1000, &uown);
    units_run_check(rt, true, 1000, &uheld);
    loom_runtime_destroy(rt);
}

/* The plain IKBO fused stage specialized, each way its epilogue can go. */
Test(autows_gpu, plain_ikbo_fused_stage_matches_its_reference, .timeout = 300)
{
    loom_runtime *rt = t_gpu_or_skip();
    if (!rt)
        return;
    plain_cfg ci = {128, 128, 64, 2, 4, 0, 0};
    ikbo_run_check(rt, true, 433, 256, 296, 40, 5, &ci, false);
    plain_cfg ct = {224, 128, 64, 2, 4, 0, 0};
    ikbo_run_check(rt, true, 433, 256, 296, 40, 5, &ct, true);
    /* the epilogue's tile through shared memory: loaded after 3 k steps, and (K = 96, two
     * steps) after the loop */
    plain_cfg ce = {64, 256, 64, 1, 3, 0, 0};
    ikbo_run_check(rt, true, 433, 256, 296, 40, 5, &ce, false);
    ikbo_run_check(rt, true, 433, 256, 96, 40, 5, &ce, false);
    /* and the store through the last k step's slot, with it (4 stages) and alone (5) */
    plain_cfg cb4 = {64, 256, 64, 1, 4, 0, 0}, cb5 = {64, 256, 64, 1, 5, 0, 0};
    ikbo_run_check(rt, true, 433, 256, 296, 40, 5, &cb4, false);
    ikbo_run_check(rt, true, 433, 256, 296, 40, 5, &cb5, false);
    ikbo_run_check_r(rt, true, 433, 256, 296, 40, 5, &cb4, false, LOOM_F16);
    /* 128 x 256, 4 stages: the store in column halves, each half's user_res loaded on its own */
    plain_cfg h4 = {128, 256, 64, 2, 4, 0, 0};
    ikbo_run_check(rt, true, 433, 256, 296, 40, 5, &h4, false);
    ikbo_run_check_r(rt, true, 433, 256, 296, 40, 5, &h4, false, LOOM_F16);
    plain_cfg h3 = {128, 256, 64, 2, 3, 0, 0}; /* user_res' tile through shared memory, the store in quarters */
    ikbo_run_check_r(rt, true, 433, 256, 296, 40, 5, &h3, false, LOOM_F16);
    loom_runtime_destroy(rt);
}

/* The plain FP8 GEMM specialized (FP8 wgmma): random inputs by the FP8 bound, integer
 * inputs exactly (K = 1024 and 4096, where the FP8 bound says little or nothing). */
Test(autows_gpu, fp8_gemm_specialized_matches_the_exact_sum, .timeout = 300)
{
    loom_runtime *rt = t_gpu_or_skip();
    if (!rt)
        return;
    fp8_case g[] = {
        {2048, 1999, 1024, 512, LOOM_E4M3, LOOM_E4M3, LOOM_F32, {128, 256, 128, 2, 3, 8, 0}},
        {1024, 1000, 768, 1024, LOOM_E4M3, LOOM_E5M2, LOOM_BF16, {128, 128, 128, 2, 4, 4, 0}},
        {1024, 1024, 512, 4096, LOOM_E5M2, LOOM_E4M3, LOOM_F32, {64, 256, 128, 2, 4, 8, 1}},
        {512, 500, 256, 256, LOOM_E4M3, LOOM_E4M3, LOOM_F16, {64, 128, 64, 1, 4, 0, 0}},
    };
    for (size_t i = 0; i < sizeof g / sizeof *g; i++) {
        if (g[i].K <= 1024)
            fp8_gemm_run_check(rt, &g[i], true, false);
        fp8_gemm_run_check(rt, &g[i], true, true);
    }
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- docs/dsl.md's example */

/* docs/dsl.md, "Two levels": the plain GEMM there, line for line. */
static loom_kernel *docs_gemm(void)
{
loom_kernel *k = loom_kernel_create("gemm", 4);
loom_val m = loom_arg_dim(k, "M", 4096, 1);
loom_val A = loom_arg_tensor(k, "A", LOOM_F16, LOOM_SHAPE2(LOOM_DIM(m), 4096), LOOM_IN);
loom_val B = loom_arg_tensor(k, "B", LOOM_F16, LOOM_SHAPE2(4096, 4096), LOOM_IN);
loom_val C = loom_arg_tensor(k, "C", LOOM_F16, LOOM_SHAPE2(LOOM_DIM(m), 4096), LOOM_OUT);
loom_val pid = loom_program_id(k, 0), c16 = loom_const_i(k, LOOM_I32, 16);
loom_val m0 = loom_mul(k, loom_div(k, pid, c16), loom_const_i(k, LOOM_I32, 64));
loom_val n0 = loom_mul(k, loom_rem(k, pid, c16), loom_const_i(k, LOOM_I32, 256));
loom_val acc = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(64, 256));
loom_region_op l = loom_for_begin(k, loom_const_i(k, LOOM_I32, 0), loom_const_i(k, LOOM_I32, 4096),
                                  loom_const_i(k, LOOM_I32, 64), 1, &acc);
loom_val kk = loom_for_iv(k, l);
loom_val a = loom_load(k, A, ((loom_val[]){m0, kk}), LOOM_SHAPE2(64, 64), LOOM_NONE, 0);
loom_val b = loom_load(k, B, ((loom_val[]){kk, n0}), LOOM_SHAPE2(64, 256), LOOM_NONE, 0);
acc = loom_dot(k, a, b, loom_for_arg(k, l, 0));
loom_for_end(k, l, 1, &acc);
loom_store(k, C, ((loom_val[]){m0, n0}), loom_cast(k, loom_for_result(k, l, 0), LOOM_F16), LOOM_NONE);
loom_kernel_set_autows(k, 1, 4, 0); /* one consumer warp group, a 4-slot ring, no ping-pong */
    return k;
}

Test(autows, the_docs_example_compiles_to_the_fast_form)
{
    loom_kernel *k = docs_gemm();
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    compiles_clean(k);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- refusals */

/* Compile k expecting the passes' refusal naming `line` of this file and saying `what`. */
static void refused(loom_kernel *k, int line, const char *what)
{
    char *ptx = NULL, err[2048] = "";
    loom_status st = loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err);
    cr_expect_eq(st, LOOM_ERR_UNSUPPORTED, "%s: %s", loom_status_name(st), err);
    cr_expect(t_names_line(err, __FILE__, line), "names line %d: %s", line, err);
    cr_expect(strstr(err, what), "says '%s': %s", what, err);
    free(ptx);
    loom_kernel_destroy(k);
}

/* A one-tile GEMM loop with a choice of mistakes. */
enum { BAD_NONE, BAD_MASK, BAD_F32, BAD_B_REG, BAD_EXTRA_USE, BAD_NO_LOOP, BAD_FP8_B_KN };

static loom_kernel *bad_gemm(int bad, int *line)
{
    loom_dtype dt = bad == BAD_F32 ? LOOM_F32 : bad == BAD_FP8_B_KN ? LOOM_E4M3 : LOOM_F16;
    loom_kernel *k = loom_kernel_create("bad", 4);
    loom_val A = loom_arg_tensor(k, "A", dt, LOOM_SHAPE2(128, 128), LOOM_IN);
    loom_val B = loom_arg_tensor(k, "B", dt, LOOM_SHAPE2(128, 128), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F32, LOOM_SHAPE2(128, 128), LOOM_OUT);
    loom_val z = I32(k, 0), acc = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(64, 128));
    loom_val mask = loom_splat(k, loom_cmp(k, LOOM_LT, z, I32(k, 1)), LOOM_SHAPE2(64, 64));
    if (bad == BAD_NO_LOOP) {
        loom_val a = loom_load(k, A, ((loom_val[]){z, z}), LOOM_SHAPE2(64, 64), LOOM_NONE, 0);
        loom_val b = loom_load(k, B, ((loom_val[]){z, z}), LOOM_SHAPE2(64, 128), LOOM_NONE, 0);
        *line = __LINE__ + 1;
        acc = loom_dot(k, a, b, acc);
    } else {
        loom_region_op l = loom_for_begin(k, z, I32(k, 128), I32(k, 64), 1, &acc);
        loom_val kk = loom_for_iv(k, l);
        if (bad == BAD_MASK)
            *line = __LINE__ + 1;
        loom_val a = loom_load(k, A, ((loom_val[]){z, kk}), LOOM_SHAPE2(64, 64), bad == BAD_MASK ? mask : LOOM_NONE, 0);
        loom_val b = loom_load(k, B, ((loom_val[]){kk, z}), LOOM_SHAPE2(64, 128), LOOM_NONE, 0);
        if (bad == BAD_B_REG)
            b = loom_mul(k, b, b);
        if (bad == BAD_EXTRA_USE) {
            *line = __LINE__ + 1;
            loom_store(k, C, ((loom_val[]){z, z}), loom_cast(k, a, LOOM_F32), LOOM_NONE);
        }
        if (bad == BAD_F32 || bad == BAD_B_REG || bad == BAD_FP8_B_KN)
            *line = __LINE__ + 1;
        acc = loom_dot(k, a, b, loom_for_arg(k, l, 0));
        loom_for_end(k, l, 1, &acc);
        acc = loom_for_result(k, l, 0);
    }
    loom_store(k, C, ((loom_val[]){z, z}), acc, LOOM_NONE);
    loom_kernel_set_autows(k, 1, 2, 0);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    return k;
}

Test(autows, refusals_name_the_line_and_the_reason)
{
    int line = 0;
    loom_kernel *k = bad_gemm(BAD_MASK, &line);
    refused(k, line, "this load has a mask");
    k = bad_gemm(BAD_F32, &line);
    refused(k, line, "the tensor cores take f16, bf16, e4m3 or e5m2");
    k = bad_gemm(BAD_B_REG, &line);
    refused(k, line, "the dot's B operand is not a tile loaded in the loop");
    k = bad_gemm(BAD_EXTRA_USE, &line);
    refused(k, line, "can only be read by dots");
    k = bad_gemm(BAD_NO_LOOP, &line);
    refused(k, line, "not directly in a loop");
    k = bad_gemm(BAD_FP8_B_KN, &line);
    refused(k, line, "the dot's B is e4m3[64x128], a [K, N] tile as loaded (N-major); FP8 wgmma reads B K-major: "
                     "store B as [N, K], load its [128 x 64] tile and pass loom_trans of it to the dot");
    /* the good one compiles */
    k = bad_gemm(BAD_NONE, &line);
    char *ptx = NULL, err[2048];
    cr_expect_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    free(ptx);
    loom_kernel_destroy(k);
}

Test(autows, knobs_are_checked_and_printed)
{
    loom_kernel *k = loom_kernel_create("knobs", 4);
    int line = __LINE__ + 1;
    loom_kernel_set_autows(k, 3, 2, 0);
    cr_expect(t_names_line(loom_kernel_errors(k), __FILE__, line) && strstr(loom_kernel_errors(k), "1 or 2"), "%s",
              loom_kernel_errors(k));
    loom_kernel_destroy(k);
    k = loom_kernel_create("knobs", 4);
    loom_kernel_set_autows(k, 2, 9, 0);
    cr_expect(strstr(loom_kernel_errors(k), "1 to 8 slots"), "%s", loom_kernel_errors(k));
    loom_kernel_destroy(k);
    k = loom_kernel_create("knobs", 4);
    loom_kernel_set_autows(k, 2, 4, 0);
    cr_expect_eq(loom_kernel_num_warps(k), 12, "a producer warp group and two consumer groups");
    cr_expect(strstr(loom_print(k), "autows=(consumers=2 stages=4 pingpong=0)"), "%s", loom_print(k));
    loom_kernel_destroy(k);
}
