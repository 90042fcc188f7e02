/*
 * bench_gemm_fp8 -- loom's FP8 gemm against cuBLASLt's FP8 GEMM, measured in the same run
 * (issue 38, item 4).
 *
 * C [M, N] = A [M, K] @ B, A and B e4m3 (or e5m2 with --e5m2), B given K-major as Bt
 * [N, K] (the layout FP8's wgmma needs, and cuBLASLt's "TN"), f32 accumulation, C bf16 (or
 * --odtype f16|f32), at 2048^3, 4096^3 and 8192^3 (or --shape MxNxK).  Print each
 * contender's TFLOP/s and loom's ratio to cuBLASLt.
 *
 * The check, exact: the inputs are integers uniform in [-2, 2] (nvref_gemm_fill_ints), so
 * every product is an integer of at most 4 in magnitude and every partial sum an integer
 * far inside the exact integers of the FP8 tensor cores' reduced-precision adder (at K =
 * 8192 a partial sum would need 4096 same-signed products of 4 to reach 2^14; the random
 * sums stay within about 6 standard deviations, 2 sqrt(K) each, of zero).  Any order and
 * precision of the adds then gives the exact sum, which the NVRTC reference (cuda_fp8.h's
 * conversions, f32 sums of exact products: exact too) computes; each output element must
 * equal it within its final rounding to the output type (nvref_gemm_compare_gamma with
 * gamma 0: one ulp).  A check that fails is printed and makes the exit status 1.  (Random
 * real inputs have no useful bound: docs/checks.md, "FP8".)
 *
 * cuBLASLt (support/cublas_dl.c, loaded with dlopen): its first heuristic algorithm for the
 * problem with a 32 MiB workspace, fp32 compute, no scales (1.0), twice: with its default
 * promotion of the tensor cores' partial sums into f32, and with fast accumulation (none:
 * what loom's FP8 gemm does without --promote).  loom's ratio to each is printed.
 * loom: the gemm template from the registry with dtype=e4m3, btrans=1 and the untuned
 * config (the template's heuristic for the shape), or --config k=v,... (up to 4, one row
 * each); where the template refuses the shape the row says why and cuBLASLt is still
 * measured.  --promote P gives loom's shape promote=P (its partial sums promoted into f32
 * every P elements of K, as cuBLASLt's default form does; 128 as DeepGEMM; the untuned
 * config then takes 128 x 128 tiles), e.g. --promote 128 --config
 * BM=128,BN=128,cwarps=8,consumers=2,BK=128,group=8.  The check is the same: the integer
 * sums are exact either way.  Timing: time_rounds (bench/contenders.c): rounds running every contender in
 * turn, an L2 flush before each run, the median of the rounds' medians.
 *
 * --scaled S gives loom's shape scaled=S (1: per-tensor scales, 2: per row and column, 3:
 * block-wise with --promote 128), every scale 1.0, so the exact check holds and the row
 * shows what reading and applying the scales costs.
 *
 * Usage: bench_gemm_fp8 [--shape MxNxK] [--config k=v,...]... [--promote P] [--scaled S] [--e5m2]
 *                       [--odtype bf16|f16|f32] [--reps N]       (skips cleanly without a GPU)
 */
#include "contenders.h"
#include "cublas_dl.h"
#include "gpu.h"
#include "loom_tune.h"
#include "nvrtc_ref.h"
#include "rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXCFG = 4, NLT = 2, WS_BYTES = 32 << 20 };

typedef struct fp8_run {
    loom_runtime *rt;
    nvref_gemm *ref;
    cublaslt_dl *lt; /* NULL: cuBLASLt not measured */
    loom_dtype in, odt;
    const char *configs[MAXCFG];
    int nconfig, reps;
    int promote; /* the gemm shape's promote (elements of K; 0: fast accumulation) */
    int scaled;  /* the gemm shape's scaled (0 none; 1 per tensor; 2 rows and columns; 3 blocks), scales 1.0 */
} fp8_run;

/* A device buffer, or exit: a bench has nothing to do without its buffers. */
static loom_buffer *buf(loom_runtime *rt, size_t bytes)
{
    loom_buffer *b = loom_buffer_create(rt, bytes);
    if (!b) {
        fprintf(stderr, "bench_gemm_fp8: allocating %zu bytes: %s\n", bytes, loom_runtime_error(rt));
        exit(2);
    }
    return b;
}

/* loom's kernel for the shape and config text ("" or NULL: the untuned config), ready to
 * launch with (M, batch, A, Bt, C); NULL with the reason in why. */
static loom_kernel *build_loom(const fp8_run *r, int64_t M, int64_t N, int64_t K, const char *config, int grid[3],
                               char *why, size_t n)
{
    char text[256], cfg[256];
    snprintf(text, sizeof text, "M=%lld,N=%lld,K=%lld,dtype=%s,odtype=%s,btrans=1,promote=%d,scaled=%d", (long long)M,
             (long long)N, (long long)K, loom_dtype_name(r->in), loom_dtype_name(r->odt), r->promote, r->scaled);
    loom_kernel *k = bench_template_build("gemm", text, config, grid, cfg, sizeof cfg, why, n);
    if (k)
        snprintf(why, n, "gemm promote=%d scaled=%d %s", r->promote, r->scaled, cfg);
    return k;
}

/* Check out (odt, [M, N]) against the exact reference: a verdict; failures counted. */
static int check(const fp8_run *r, loom_buffer *out, loom_buffer *ref, loom_buffer *absref, int64_t n, char *v,
                 size_t vn)
{
    nvref_gemm_report rep;
    char err[512];
    if (nvref_gemm_compare_gamma(r->ref, n, rt_buffer_dptr(out), r->odt, rt_buffer_dptr(ref), LOOM_F32,
                                 rt_buffer_dptr(absref), 0.0, &rep, err, sizeof err) != LOOM_OK) {
        snprintf(v, vn, "check failed to run: %.260s", err);
        return 1;
    }
    if (!rep.bad) {
        snprintf(v, vn, "exact ok");
        return 0;
    }
    snprintf(v, vn, "FAIL: %llu of %llu wrong; first at %lld: %.9g, want %.9g", (unsigned long long)rep.bad,
             (unsigned long long)rep.checked, (long long)rep.first_bad, rep.first_out, rep.first_ref);
    return 1;
}

/* One shape: every contender checked, then timed side by side.  Returns the failures. */
static int one_shape(fp8_run *r, int64_t M, int64_t N, int64_t K)
{
    char err[1024];
    size_t es = loom_dtype_size(r->in), os = loom_dtype_size(r->odt);
    loom_buffer *A = buf(r->rt, (size_t)(M * K) * es), *Bt = buf(r->rt, (size_t)(N * K) * es);
    loom_buffer *ref = buf(r->rt, (size_t)(M * N) * 4), *absref = buf(r->rt, (size_t)(M * N) * 4);
    loom_buffer *C[MAXCFG + NLT];
    nvref_gemm_shape s = {M, N, K, 1, 0, r->in, 1};
    if (nvref_gemm_fill_ints(r->ref, rt_buffer_dptr(A), r->in, M * K, 1, -2, 2, err, sizeof err) ||
        nvref_gemm_fill_ints(r->ref, rt_buffer_dptr(Bt), r->in, N * K, 2, -2, 2, err, sizeof err) ||
        nvref_gemm_reference(r->ref, &s, rt_buffer_dptr(A), rt_buffer_dptr(Bt), rt_buffer_dptr(ref),
                             rt_buffer_dptr(absref), err, sizeof err)) {
        fprintf(stderr, "bench_gemm_fp8: inputs or reference: %s\n", err);
        exit(2);
    }
    work ws[MAXCFG + NLT];
    char what[MAXCFG + NLT][300], verdict[MAXCFG + NLT][300];
    loom_kernel *ks[MAXCFG] = {0};
    int nw = 0, failures = 0;
    cublaslt_fp8 plan[2] = {{0}};
    loom_buffer *wsb = NULL;
    for (int fast = 0; r->lt && fast < 2; fast++) { /* promoted (cuBLASLt's default), then fast accumulation */
        wsb = wsb ? wsb : buf(r->rt, WS_BYTES);
        if (cublaslt_dl_fp8_plan(r->lt, r->in, r->odt, M, N, K, 0, 0, fast, rt_buffer_dptr(wsb), WS_BYTES, &plan[fast],
                                 err, sizeof err) == 0) {
            C[nw] = buf(r->rt, (size_t)(M * N) * os);
            ws[nw] = (work){.name = fast ? "cuBLASLt-fast" : "cuBLASLt", .rt = r->rt, .n = 1,
                            .s = {cublaslt_fp8_step(&plan[fast], A, Bt, C[nw])}};
            snprintf(what[nw], sizeof what[nw], "cuBLASLt %zu, %s", r->lt->version,
                     fast ? "fast accumulation (no promotion)" : "partial sums promoted to f32");
            nw++;
        } else {
            printf("  %lldx%lldx%lld  cuBLASLt%s: %s\n", (long long)M, (long long)N, (long long)K,
                   fast ? " (fast accumulation)" : "", err);
        }
    }
    int first_loom = nw;
    /* --scaled: the scales, all 1.0 (the check's sums stay exact): two f32 scalars, or the
     * rows' and columns' vectors, or the blocks' (A's [cdiv(K,128), M], B's [cdiv(N,128),
     * cdiv(K,128)]) */
    int64_t kb = (K + 127) / 128, ns[4][2] = {{0, 0}, {0, 0}, {M, N}, {kb * M, (N + 127) / 128 * kb}};
    loom_buffer *sv[2] = {NULL, NULL};
    for (int j = 0; j < 2 && r->scaled >= 2; j++) {
        int64_t cnt = ns[r->scaled][j];
        float *one = malloc((size_t)cnt * sizeof *one);
        if (!one) {
            fprintf(stderr, "bench_gemm_fp8: out of host memory\n");
            exit(2);
        }
        for (int64_t e = 0; e < cnt; e++)
            one[e] = 1.0f;
        sv[j] = buf(r->rt, (size_t)cnt * sizeof *one);
        if (loom_buffer_upload(sv[j], one, (size_t)cnt * sizeof *one) != LOOM_OK) {
            fprintf(stderr, "bench_gemm_fp8: uploading the scales: %s\n", loom_runtime_error(r->rt));
            exit(2);
        }
        free(one);
    }
    for (int i = 0; i < r->nconfig; i++) {
        int grid[3];
        char why[300];
        loom_kernel *k = build_loom(r, M, N, K, r->configs[i], grid, why, sizeof why);
        if (!k) {
            printf("  %lldx%lldx%lld  %s\n", (long long)M, (long long)N, (long long)K, why);
            continue;
        }
        ks[i] = k;
        C[nw] = buf(r->rt, (size_t)(M * N) * os);
        loom_arg args[7] = {LOOM_ARG_I32((int32_t)M), LOOM_ARG_I32(1), LOOM_ARG_BUF(A), LOOM_ARG_BUF(Bt),
                            LOOM_ARG_BUF(C[nw]), LOOM_ARG_F32(1.0f), LOOM_ARG_F32(1.0f)};
        if (r->scaled >= 2)
            args[5] = LOOM_ARG_BUF(sv[0]), args[6] = LOOM_ARG_BUF(sv[1]);
        ws[nw] = (work){.name = "loom", .rt = r->rt, .n = 1, .s = {launch_step(k, grid, args, r->scaled ? 7 : 5)}};
        snprintf(what[nw], sizeof what[nw], "loom %.290s", why);
        nw++;
    }
    for (int i = 0; i < nw; i++) { /* each output poisoned, computed once and checked */
        if (loom_buffer_fill(C[i], 0xff) || run_work(&ws[i]) != LOOM_OK) {
            snprintf(verdict[i], sizeof verdict[i], "FAIL: did not run: %s", loom_runtime_error(r->rt));
            failures++;
            continue;
        }
        failures += check(r, C[i], ref, absref, M * N, verdict[i], sizeof verdict[i]);
    }
    double flop = 2.0 * (double)M * (double)N * (double)K;
    if (nw && time_rounds(r->rt, ws, nw, 5, r->reps) == 0)
        for (int i = 0; i < nw; i++) {
            printf("  %lldx%lldx%lld %s->%s  %-13s %8.1f TFLOP/s", (long long)M, (long long)N, (long long)K,
                   loom_dtype_name(r->in), loom_dtype_name(r->odt), ws[i].name, flop / ws[i].ms * 1e-9);
            for (int j = 0; i >= first_loom && j < first_loom; j++) /* the ratio to each cuBLASLt form */
                printf("  %.3fx %s", ws[j].ms / ws[i].ms, ws[j].name);
            printf("  [%s]  %s\n", what[i], verdict[i]);
        }
    fflush(stdout);
    cublaslt_dl_fp8_release(&plan[0]);
    cublaslt_dl_fp8_release(&plan[1]);
    for (int i = 0; i < MAXCFG; i++)
        loom_kernel_destroy(ks[i]);
    for (int i = 0; i < nw; i++)
        loom_buffer_destroy(C[i]);
    loom_buffer *all[] = {A, Bt, ref, absref, wsb, sv[0], sv[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        loom_buffer_destroy(all[i]);
    return failures;
}

int main(int argc, char **argv)
{
    fp8_run r = {.in = LOOM_E4M3, .odt = LOOM_BF16, .reps = 20};
    const char *shape = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc && r.nconfig < MAXCFG)
            r.configs[r.nconfig++] = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
            shape = argv[++i];
        else if (!strcmp(argv[i], "--promote") && i + 1 < argc)
            r.promote = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--scaled") && i + 1 < argc)
            r.scaled = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--e5m2"))
            r.in = LOOM_E5M2;
        else if (!strcmp(argv[i], "--odtype") && i + 1 < argc) {
            const char *o = argv[++i];
            r.odt = !strcmp(o, "f16") ? LOOM_F16 : !strcmp(o, "f32") ? LOOM_F32 : LOOM_BF16;
            if (strcmp(o, "f16") && strcmp(o, "f32") && strcmp(o, "bf16")) {
                fprintf(stderr, "bench_gemm_fp8: --odtype %s: bf16, f16 or f32\n", o);
                return 2;
            }
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            r.reps = atoi(argv[++i]) > 0 ? atoi(argv[i]) : 20;
        else {
            fprintf(stderr, "usage: bench_gemm_fp8 [--shape MxNxK] [--config k=v,...]... (at most %d) [--promote P] "
                            "[--scaled S] [--e5m2] [--odtype bf16|f16|f32] [--reps N]\n", MAXCFG);
            return 2;
        }
    }
    if (!r.nconfig)
        r.configs[r.nconfig++] = "";
    long long dims[3][3] = {{2048, 2048, 2048}, {4096, 4096, 4096}, {8192, 8192, 8192}};
    int nshape = 3;
    if (shape) {
        char tail;
        if (sscanf(shape, "%lldx%lldx%lld%c", &dims[0][0], &dims[0][1], &dims[0][2], &tail) != 3 || dims[0][0] < 1 ||
            dims[0][1] < 1 || dims[0][2] < 1) {
            fprintf(stderr, "bench_gemm_fp8: --shape %s: expected MxNxK, positive integers\n", shape);
            return 2;
        }
        nshape = 1;
    }
    char err[1024];
    r.rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (!r.rt || loom_runtime_status(r.rt) != LOOM_OK) {
        printf("bench_gemm_fp8: skipped: %s\n", r.rt ? loom_runtime_error(r.rt) : "out of host memory");
        loom_runtime_destroy(r.rt);
        return 0;
    }
    if (nvref_gemm_open(rt_runtime_gpu(r.rt), &r.ref, err, sizeof err) != LOOM_OK) {
        printf("bench_gemm_fp8: skipped: the reference cannot be built: %s\n", err);
        loom_runtime_destroy(r.rt);
        return 0;
    }
    cublaslt_dl lt;
    if (cublaslt_dl_open(&lt, err, sizeof err) == 0)
        r.lt = &lt;
    else
        printf("cuBLASLt: not measured: %s\n", err);
    printf("bench_gemm_fp8 on %s: C = A @ Bt^T, %s inputs (integers in [-2, 2]: exact sums), %s out\n",
           loom_runtime_device_name(r.rt), loom_dtype_name(r.in), loom_dtype_name(r.odt));
    int failures = 0;
    for (int i = 0; i < nshape; i++)
        failures += one_shape(&r, dims[i][0], dims[i][1], dims[i][2]);
    if (r.lt)
        cublaslt_dl_close(r.lt);
    nvref_gemm_close(r.ref);
    loom_runtime_destroy(r.rt);
    return failures ? 1 : 0;
}
