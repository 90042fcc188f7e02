/*
 * test_wgmma_fp8.c -- wgmma with FP8 operands (docs/dsl.md, "FP8" and "Hopper machinery").
 *
 *   wgmma_fp8      C = C0 + A @ B with A [M, K] and B [N, K] (seen transposed: both K-major)
 *                  of e4m3 and e5m2 in every mix, TMA-loaded into swizzled slots (128-, 64-
 *                  and 32-byte swizzle, one and two swizzle spans a row, one and two warp
 *                  groups): the interpreter against an fma loop over the decoded values
 *                  in k order, bit for bit; the PTX (m64nNk32 .e4m3/.e5m2 instructions, no
 *                  transpose operands) assembled by ptxas without spills; A also in
 *                  registers (loaded, or cast from f32 as attention's P: the fragment
 *                  rearranged within each quad by shuffles); the refusals (an M- or N-major
 *                  FP8 operand, K not a multiple of 32, FP8 beside f16) at the line that
 *                  builds the wgmma; the printer.
 *   wgmma_fp8_gpu  the same kernels on the GPU against the same loop, within the FP8
 *                  wgmma bound (loom_fp8_mma_sum_error: the GPU accumulates FP8 products
 *                  with reduced precision).  It skips without a GPU.
 */
#include "ir.h"
#include "testutil.h"

#include "cg.h"
#include "loom_tune.h"

/* One case: A's and B's types, the tile, the swizzle (the warps: one warp group a 64
 * rows), and where A comes from: 0 a slot (TMA), 1 registers (loaded from global memory
 * straight into the A fragment's layout), 2 registers cast from f32 (as attention's P). */
typedef struct fcase {
    loom_dtype ta, tb;
    int64_t M, N, K;
    loom_swizzle swz;
    int areg;
} fcase;

static const fcase cases[] = {
    {LOOM_E4M3, LOOM_E4M3, 64, 64, 128, LOOM_SWIZZLE_128, 0},  /* the gemm's BK=128: one span a row */
    {LOOM_E4M3, LOOM_E5M2, 64, 32, 256, LOOM_SWIZZLE_128, 0},  /* two spans a row */
    {LOOM_E5M2, LOOM_E4M3, 128, 32, 64, LOOM_SWIZZLE_64, 0},   /* two warp groups */
    {LOOM_E5M2, LOOM_E5M2, 64, 256, 32, LOOM_SWIZZLE_32, 0},   /* N at its largest */
    {LOOM_E4M3, LOOM_E4M3, 64, 64, 128, LOOM_SWIZZLE_128, 1}, /* A in registers: four k32 steps */
    {LOOM_E4M3, LOOM_E5M2, 128, 32, 64, LOOM_SWIZZLE_64, 2},  /* cast from f32, two warp groups */
    {LOOM_E5M2, LOOM_E4M3, 128, 128, 32, LOOM_SWIZZLE_32, 2}, /* two m64 blocks a warp group */
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* Warps of case c's task: one warp group a 64 rows (the last case: one for two). */
static int case_warps(const fcase *c) { return c->areg == 2 && c->N == 128 ? 4 : (int)(c->M / 16); }

/* A in bytes (f32 where it is cast in the kernel). */
static size_t a_bytes(const fcase *c) { return (size_t)(c->M * c->K) * (c->areg == 2 ? 4 : 1); }

/* C [M, N] f32 (in and out) += A [M, K] @ B^T, B [N, K]: B TMA-loaded into a slot, A too
 * or into registers (c->areg), one task. */
static loom_kernel *fp8_wgmma_kernel(const fcase *c)
{
    int warps = case_warps(c);
    loom_kernel *k = loom_kernel_create("wgmma_fp8", warps);
    loom_val A = loom_arg_tensor(k, "A", c->areg == 2 ? LOOM_F32 : c->ta, LOOM_SHAPE2(c->M, c->K), LOOM_IN);
    loom_val B = loom_arg_tensor(k, "B", c->tb, LOOM_SHAPE2(c->N, c->K), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F32, LOOM_SHAPE2(c->M, c->N), LOOM_INOUT);
    loom_val as = loom_smem_alloc(k, c->ta, LOOM_SHAPE2(c->M, c->K), 1, c->swz);
    loom_val bs = loom_smem_alloc(k, c->tb, LOOM_SHAPE2(c->N, c->K), 1, c->swz);
    loom_val bars = loom_mbar_alloc(k, 1, 1);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_region_op t = loom_task_begin(k, warps, 0, 1);
    loom_mbar_expect(k, bars, z, (c->areg ? 0 : c->M * c->K) + c->N * c->K);
    if (!c->areg)
        loom_tma_load(k, A, ((loom_val[]){z, z}), as, bars, z);
    loom_tma_load(k, B, ((loom_val[]){z, z}), bs, bars, z);
    loom_val a = as;
    if (c->areg) {
        a = loom_load(k, A, ((loom_val[]){z, z}), LOOM_SHAPE2(c->M, c->K), LOOM_NONE, 0);
        if (c->areg == 2)
            a = loom_cast(k, a, c->ta);
    }
    loom_mbar_wait(k, bars, z, z);
    loom_val c0 = loom_load(k, C, ((loom_val[]){z, z}), LOOM_SHAPE2(c->M, c->N), LOOM_NONE, 0);
    loom_val acc = loom_wgmma(k, a, loom_smem_trans(k, bs), c0);
    loom_wgmma_commit(k);
    loom_region_op w = loom_wgmma_wait(k, 0, 1, &acc);
    loom_store(k, C, ((loom_val[]){z, z}), loom_wgmma_result(k, w, 0), LOOM_NONE);
    loom_task_end(k, t);
    return k;
}

/* Random finite codes of dt (every exponent, both signs), and their values. */
static void fill_fp8(loom_dtype dt, uint8_t *code, float *val, int64_t n, uint32_t seed)
{
    for (int64_t i = 0; i < n; i++) {
        float v;
        uint8_t b;
        do {
            seed = seed * 1664525u + 1013904223u;
            b = (uint8_t)(seed >> 24);
            v = ir_fp8_to_f32(dt, b);
        } while (!isfinite(v));
        code[i] = b;
        val[i] = v;
    }
}

/* The inputs of case c, C0, and the loop's result: for each k in order
 * acc = fma(a, b, acc), and the magnitudes |C0| + sum |a b| for the GPU's bound. */
typedef struct fdata {
    uint8_t *a, *b;
    float *av, *bv, *c0, *want;
    double *mag;
} fdata;

static fdata fp8_data(const fcase *c, uint32_t seed)
{
    int64_t M = c->M, N = c->N, K = c->K;
    fdata d = {malloc((size_t)(M * K)), malloc((size_t)(N * K)), malloc((size_t)(M * K) * 4),
               malloc((size_t)(N * K) * 4), malloc((size_t)(M * N) * 4), malloc((size_t)(M * N) * 4),
               malloc((size_t)(M * N) * 8)};
    cr_assert(d.a && d.b && d.av && d.bv && d.c0 && d.want && d.mag);
    fill_fp8(c->ta, d.a, d.av, M * K, seed);
    fill_fp8(c->tb, d.b, d.bv, N * K, seed + 1);
    for (int64_t i = 0; i < M * N; i++) {
        seed = seed * 1664525u + 1013904223u;
        d.c0[i] = (float)((int32_t)seed >> 8) * 0x1p-12f;
    }
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float s = d.c0[m * N + n];
            double g = fabs((double)s);
            for (int64_t q = 0; q < K; q++) {
                s = fmaf(d.av[m * K + q], d.bv[n * K + q], s);
                g += fabs((double)d.av[m * K + q] * d.bv[n * K + q]);
            }
            d.want[m * N + n] = s;
            d.mag[m * N + n] = g;
        }
    return d;
}

static void fp8_data_free(fdata *d)
{
    free(d->a), free(d->b), free(d->av), free(d->bv), free(d->c0), free(d->want), free(d->mag);
}

static const char *case_name(const fcase *c, char *buf, size_t n)
{
    static const char *const from[3] = {"", ", A in registers", ", A cast from f32 in registers"};
    snprintf(buf, n, "%s x %s, %lldx%lldx%lld, swizzle %d%s", loom_dtype_name(c->ta), loom_dtype_name(c->tb),
             (long long)c->M, (long long)c->N, (long long)c->K, (int)c->swz, from[c->areg]);
    return buf;
}

/* A's host buffer: the codes, or their values where the kernel casts from f32. */
static void *a_host(const fcase *c, const fdata *d) { return c->areg == 2 ? (void *)d->av : (void *)d->a; }

/* ---------------------------------------------------------------- the interpreter */

Test(wgmma_fp8, interpreter_matches_the_fma_loop_bit_for_bit)
{
    for (int i = 0; i < NCASES; i++) {
        const fcase *c = &cases[i];
        char nm[96];
        fdata d = fp8_data(c, 100 + (uint32_t)i);
        float *out = malloc((size_t)(c->M * c->N) * 4);
        cr_assert(out);
        memcpy(out, d.c0, (size_t)(c->M * c->N) * 4);
        loom_kernel *k = fp8_wgmma_kernel(c);
        targ args[] = {TA_BUF(a_host(c, &d), a_bytes(c)), TA_BUF(d.b, (size_t)(c->N * c->K)),
                       TA_BUF(out, (size_t)(c->M * c->N) * 4)};
        T_RUN_OK(k, NULL, args, 3);
        int bad = 0;
        for (int64_t e = 0; e < c->M * c->N && bad < 5; e++)
            if (!t_same_f32(out[e], d.want[e])) {
                cr_expect(false, "%s: element %lld is %a, want %a", case_name(c, nm, sizeof nm), (long long)e,
                          out[e], d.want[e]);
                bad++;
            }
        cr_expect_eq(bad, 0);
        free(out);
        fp8_data_free(&d);
        loom_kernel_destroy(k);
    }
}

/* The loop itself sees a wrong product: one code of A changed changes the result (the
 * comparison above is not vacuous). */
Test(wgmma_fp8, a_changed_input_changes_the_result)
{
    const fcase *c = &cases[0];
    fdata d = fp8_data(c, 7);
    float *out = malloc((size_t)(c->M * c->N) * 4);
    cr_assert(out);
    memcpy(out, d.c0, (size_t)(c->M * c->N) * 4);
    uint8_t old = d.a[5];
    d.a[5] = d.a[5] == 0x38 ? 0x40 : 0x38; /* 1.0 or 2.0 in e4m3 */
    loom_kernel *k = fp8_wgmma_kernel(c);
    targ args[] = {TA_BUF(d.a, (size_t)(c->M * c->K)), TA_BUF(d.b, (size_t)(c->N * c->K)),
                   TA_BUF(out, (size_t)(c->M * c->N) * 4)};
    T_RUN_OK(k, NULL, args, 3);
    int differ = 0;
    for (int64_t n = 0; n < c->N; n++) /* row 0 reads A[0, 5] */
        differ += !t_same_f32(out[n], d.want[n]);
    cr_expect(differ > 0, "A[0,5] changed from 0x%02x and no element of row 0 moved", old);
    for (int64_t e = c->N; e < c->M * c->N; e++) /* the other rows do not */
        cr_assert(t_same_f32(out[e], d.want[e]), "element %lld moved", (long long)e);
    free(out);
    fp8_data_free(&d);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- PTX */

Test(wgmma_fp8, ptx_uses_k32_fp8_instructions_and_assembles)
{
    for (int i = 0; i < NCASES; i++) {
        const fcase *c = &cases[i];
        char nm[96], err[4096], want[96];
        loom_kernel *k = fp8_wgmma_kernel(c);
        cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
        cg_result r;
        loom_status st = cg_compile(k, "sm_90a", &r, err, sizeof err);
        cr_assert_eq(st, LOOM_OK, "%s: %s", case_name(c, nm, sizeof nm), err);
        snprintf(want, sizeof want, "wgmma.mma_async.sync.aligned.m64n%lldk32.f32.%s.%s", (long long)c->N,
                 loom_dtype_name(c->ta), loom_dtype_name(c->tb));
        /* one instruction per m64 block a warp group and k32 step: the warp groups split M */
        int mblocks = (int)(c->M / 64 / (case_warps(c) / 4)), steps = mblocks * (int)(c->K / 32);
        cr_expect_eq(t_count(r.ptx, want), steps, "%s: %d of '%s', want %d", case_name(c, nm, sizeof nm),
                     t_count(r.ptx, want), want, steps);
        cr_expect_eq(t_count(r.ptx, "k16."), 0, "%s: a k16 instruction", nm);
        /* both K-major: the FP8 forms end with the scales, no transpose operands */
        cr_expect(t_count(r.ptx, ", 1, 1;") >= steps, "%s: no FP8 operand form", nm);
        /* A in registers: four registers a step, rearranged within each quad by two
         * shuffles and two prmt a register pair (lower_wgmma.c, fp8_step); none from a slot */
        int shfl = t_count(r.ptx, "shfl.sync.idx.b32"), perm = t_count(r.ptx, "prmt.b32");
        cr_expect_eq(shfl, c->areg ? 4 * steps : 0, "%s: %d shuffles", nm, shfl);
        cr_expect_eq(perm >= 4 * steps, c->areg != 0, "%s: %d prmt", nm, perm);
        if (c->areg)
            cr_expect_eq(t_count(r.ptx, "}, {%r"), steps, "%s: not every step reads A from registers", nm);
        t_ptxas_ok(r.ptx, "sm_90a", case_name(c, nm, sizeof nm));
        cg_result_free(&r);
        loom_kernel_destroy(k);
    }
}

Test(wgmma_fp8, printer_shows_the_operand_types)
{
    loom_kernel *k = fp8_wgmma_kernel(&cases[1]);
    const char *t = loom_print(k);
    cr_expect(strstr(t, "smem_alloc e4m3[64x256] slots=1 swizzle=128"), "%s", t);
    cr_expect(strstr(t, "smem<e5m2[256x32] T swz128>"), "%s", t);
    cr_expect(strstr(t, "tensor<e5m2[32x256]>"), "%s", t);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- refusals */

/* A wgmma of A [64, ka] and B of the given form (0: [N, K] transposed, the right one; 1:
 * [K, N] as stored; 2: A transposed, from a [K, M] slot; 3: A an FP8 register tile) with
 * types ta and tb, at *line. */
static loom_kernel *bad_wgmma(loom_dtype ta, loom_dtype tb, int64_t K, int form, int *line)
{
    loom_kernel *k = loom_kernel_create("wgmma_fp8_bad", 4);
    loom_val as = loom_smem_alloc(k, ta, form == 2 ? LOOM_SHAPE2(K, 64) : LOOM_SHAPE2(64, K), 1, LOOM_SWIZZLE_NONE);
    loom_val bs = loom_smem_alloc(k, tb, form == 1 ? LOOM_SHAPE2(K, 32) : LOOM_SHAPE2(32, K), 1, LOOM_SWIZZLE_NONE);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_val a = form == 2 ? loom_smem_trans(k, as) : as;
    if (form == 3)
        a = loom_smem_load(k, as);
    loom_val b = form == 1 ? bs : loom_smem_trans(k, bs);
    loom_val c = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(64, 32));
    *line = __LINE__ + 1;
    loom_val acc = loom_wgmma(k, a, b, c);
    (void)acc;
    loom_task_end(k, t);
    return k;
}

static void expect_refused(loom_kernel *k, int line, const char *msg)
{
    cr_expect_eq(loom_verify(k), LOOM_ERR_VERIFY);
    const char *err = loom_kernel_errors(k);
    cr_expect(strstr(err, msg), "want '%s' in:\n%s", msg, err);
    cr_expect(t_names_line(err, __FILE__, line), "'%s' does not name line %d", err, line);
    loom_kernel_destroy(k);
}

Test(wgmma_fp8, operands_that_are_not_k_major_are_refused_at_the_line)
{
    int line = 0;
    loom_kernel *k;
    k = bad_wgmma(LOOM_E4M3, LOOM_E4M3, 64, 1, &line);
    expect_refused(k, line,
                   "b is smem<e4m3[64x32]>, an N-major view (a [K, N] slot as stored); FP8 wgmma reads B K-major: "
                   "store B as [N, K] and pass loom_smem_trans of it");
    k = bad_wgmma(LOOM_E5M2, LOOM_E4M3, 64, 2, &line);
    expect_refused(k, line,
                   "an M-major view (loom_smem_trans of a [K, M] slot); FP8 wgmma reads A K-major: store A as "
                   "[M, K] and pass the view itself");
    /* an FP8 A in registers is right (the fragment is built from the tile: fp8_step) */
    k = bad_wgmma(LOOM_E4M3, LOOM_E5M2, 64, 3, &line);
    cr_expect_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    loom_kernel_destroy(k);
}

Test(wgmma_fp8, k_and_types_are_checked)
{
    int line = 0;
    loom_kernel *k;
    k = bad_wgmma(LOOM_E4M3, LOOM_E5M2, 48, 0, &line);
    expect_refused(k, line,
                   "K is 48; wgmma needs a multiple of 32 with FP8 operands");
    k = bad_wgmma(LOOM_F16, LOOM_E4M3, 64, 0, &line);
    expect_refused(k, line,
                   "both must be f16, both bf16, or each e4m3 or e5m2");
    k = bad_wgmma(LOOM_E5M2, LOOM_BF16, 64, 0, &line);
    expect_refused(k, line,
                   "both must be f16, both bf16, or each e4m3 or e5m2");
    /* the right form verifies */
    k = bad_wgmma(LOOM_E5M2, LOOM_E4M3, 64, 0, &line);
    cr_expect_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- the GPU */

Test(wgmma_fp8_gpu, gpu_matches_the_loop_within_the_fp8_bound)
{
    loom_runtime *rt = t_gpu_or_skip();
    for (int i = 0; i < NCASES; i++) {
        const fcase *c = &cases[i];
        char nm[96];
        fdata d = fp8_data(c, 300 + (uint32_t)i);
        int64_t mn = c->M * c->N;
        float *out = malloc((size_t)mn * 4);
        cr_assert(out);
        loom_kernel *k = fp8_wgmma_kernel(c);
        size_t bytes[3] = {a_bytes(c), (size_t)(c->N * c->K), (size_t)mn * 4};
        void *host[3] = {a_host(c, &d), d.b, d.c0};
        loom_buffer *b[3];
        loom_arg a[3];
        for (int j = 0; j < 3; j++) {
            b[j] = loom_buffer_create(rt, bytes[j]);
            cr_assert(b[j], "%s", loom_runtime_error(rt));
            cr_assert_eq(loom_buffer_upload(b[j], host[j], bytes[j]), LOOM_OK);
            a[j] = LOOM_ARG_BUF(b[j]);
        }
        cr_assert_eq(loom_launch(rt, k, ((int[]){1, 1, 1}), a, 3), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_assert_eq(loom_buffer_download(b[2], out, bytes[2]), LOOM_OK);
        int bad = 0;
        double worst = 0;
        for (int64_t e = 0; e < mn; e++) {
            /* K products and C0: K + 1 terms, added by the tensor cores; the loop's own f32
             * roundings are within the same bound's u (2^-13 > 2^-23) */
            double bnd = loom_error_bound(LOOM_F32, d.want[e], 2 * loom_fp8_mma_sum_error(c->K + 1, d.mag[e]));
            double err = fabs((double)out[e] - d.want[e]);
            worst = fmax(worst, bnd > 0 ? err / bnd : err);
            if (!(err <= bnd) && bad++ < 5) {
                cr_expect(false, "%s: element %lld is %a, the loop's %a, bound %g", case_name(c, nm, sizeof nm),
                          (long long)e, out[e], d.want[e], bnd);
            }
        }
        printf("wgmma_fp8_gpu: %s: worst |err|/bound %.3g\n", case_name(c, nm, sizeof nm), worst);
        cr_expect_eq(bad, 0);
        for (int j = 0; j < 3; j++)
            loom_buffer_destroy(b[j]);
        free(out);
        fp8_data_free(&d);
        loom_kernel_destroy(k);
    }
    loom_runtime_destroy(rt);
}
