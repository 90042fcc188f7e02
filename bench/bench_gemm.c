/*
 * bench_gemm -- loom's gemm template against cuBLAS, measured in the same run.
 *
 * For C = A @ B at 2048^3, 4096^3, 8192^3 and the skinny batched shapes of IKBO (M=433,
 * N=256, K in {872, 1184}, batch 1024, one A shared by the batch), bf16 and fp16 inputs,
 * fp32 accumulation, output in the input's dtype, print loom's TFLOP/s, cuBLAS's and the
 * ratio.  Both results are checked first against a naive fp32 reference kernel compiled
 * with NVRTC (runtime/nvrtc_ref.c, nvref_gemm_*), with a tolerance made of the output's
 * rounding and a summation-order term that grows with K; loom's is also compared with
 * cuBLAS's.  A check that fails is printed and makes the exit status 1.
 *
 * Layout: row-major, A [M,K] (batch 1, or shared) or [batch,M,K], B [batch,K,N],
 * C [batch,M,N] (rank 2 when batch is 1).  cuBLAS is column-major, so the row-major
 * C = A @ B is computed as the column-major C^T = B^T A^T: the same bytes, with B as the
 * first operand.  Batches go through cublasGemmStridedBatchedEx, with A's stride 0 when
 * A is shared.  cuBLAS is loaded with dlopen (LOOM_CUBLAS_LIB, else libcublas.so.13, else
 * .so.12) and called with its default algorithm, which uses tensor cores.
 *
 * Timing: inputs are random (a device-side fill, never zeros); each measurement runs
 * warm-up launches, then repetitions each preceded by an L2 flush (a memset of 4x the L2)
 * outside the timed events, and reports the median, like Triton's do_bench that measured
 * the cuBLAS figures in ../shared/BENCH.md.
 *
 * loom's kernel comes from the registry: loom_template_find("gemm") with the shape keys
 * M, N, K, batch, dtype, odtype, ashared and the template's default config (or
 * --config k=v,...).  Until the template exists this prints "loom gemm: not built yet"
 * and still measures and checks cuBLAS.
 *
 * Usage: bench_gemm [--config k=v,...] [--only NAME]    (skips cleanly without a GPU)
 */
#include "gpu.h"
#include "nvrtc_ref.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- cuBLAS by hand */

typedef int cublasStatus_t; /* CUBLAS_STATUS_SUCCESS = 0 */
typedef struct cublasContext *cublasHandle_t;
enum { CUBLAS_OP_N = 0 };
enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 }; /* cudaDataType */
enum { CUBLAS_COMPUTE_32F = 68 };
enum { CUBLAS_GEMM_DEFAULT = -1 };

static struct {
    void *lib;
    char path[256];
    cublasStatus_t (*Create)(cublasHandle_t *);
    cublasStatus_t (*Destroy)(cublasHandle_t);
    cublasStatus_t (*GetVersion)(cublasHandle_t, int *);
    const char *(*GetStatusString)(cublasStatus_t);
    cublasStatus_t (*GemmEx)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, int,
                             const void *, int, int, const void *, void *, int, int, int, int);
    cublasStatus_t (*GemmStridedBatchedEx)(cublasHandle_t, int, int, int, int, int, const void *,
                                           const void *, int, int, long long, const void *, int, int,
                                           long long, const void *, void *, int, int, long long, int, int,
                                           int);
    cublasHandle_t h;
    int version;
} cb;

/* Open cuBLAS and make a handle (on the primary context that rt_gpu made current). */
static int cublas_open(char *err, size_t errlen)
{
    const char *names[4] = {getenv("LOOM_CUBLAS_LIB"), "libcublas.so.13", "libcublas.so.12",
                            "/usr/local/cuda/lib64/libcublas.so"};
    char first[384] = "";
    for (int i = 0; i < 4 && !cb.lib; i++) {
        if (!names[i] || !*names[i])
            continue;
        cb.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (cb.lib)
            snprintf(cb.path, sizeof cb.path, "%s", names[i]);
        else if (!first[0])
            snprintf(first, sizeof first, "%s", dlerror());
        if (i == 0 && names[0] && *names[0])
            break;
    }
    if (!cb.lib) {
        snprintf(err, errlen, "cannot load cuBLAS (%s)", first);
        return -1;
    }
#define SYM(field, name)                                                                           \
    if (!(*(void **)&cb.field = dlsym(cb.lib, name))) {                                            \
        snprintf(err, errlen, "%s has no %s", cb.path, name);                                      \
        return -1;                                                                                 \
    }
    SYM(Create, "cublasCreate_v2")
    SYM(Destroy, "cublasDestroy_v2")
    SYM(GetVersion, "cublasGetVersion_v2")
    SYM(GetStatusString, "cublasGetStatusString")
    SYM(GemmEx, "cublasGemmEx")
    SYM(GemmStridedBatchedEx, "cublasGemmStridedBatchedEx")
#undef SYM
    cublasStatus_t s = cb.Create(&cb.h);
    if (s != 0) {
        snprintf(err, errlen, "cublasCreate_v2 failed: %s", cb.GetStatusString(s));
        return -1;
    }
    if (cb.GetVersion(cb.h, &cb.version) != 0)
        cb.version = 0;
    return 0;
}

/* ---------------------------------------------------------------- one shape */

typedef struct gemm_case {
    const char *name;
    int64_t M, N, K, batch;
    int a_shared;
} gemm_case;

typedef struct bench_ctx {
    rt_gpu *g;
    const gemm_case *c;
    loom_dtype dt;
    uint64_t A, B, C;      /* the launch's output goes to C */
    uint64_t flush;
    size_t flush_bytes;
    loom_kernel *k;        /* loom's, when timing loom */
    int grid[3];
} bench_ctx;

static int cuda_type(loom_dtype dt) { return dt == LOOM_BF16 ? CUDA_R_16BF : dt == LOOM_F16 ? CUDA_R_16F : CUDA_R_32F; }

static loom_status run_cublas(void *p, char *err, size_t errlen)
{
    bench_ctx *x = p;
    const gemm_case *c = x->c;
    float alpha = 1.0f, beta = 0.0f;
    int t = cuda_type(x->dt), m = (int)c->N, n = (int)c->M, k = (int)c->K;
    cublasStatus_t s;
    /* column-major C^T [N,M] = B^T [N,K] @ A^T [K,M] */
    if (c->batch == 1)
        s = cb.GemmEx(cb.h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, (const void *)(uintptr_t)x->B, t, m,
                      (const void *)(uintptr_t)x->A, t, k, &beta, (void *)(uintptr_t)x->C, t, m,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    else
        s = cb.GemmStridedBatchedEx(cb.h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha,
                                    (const void *)(uintptr_t)x->B, t, m, (long long)(c->K * c->N),
                                    (const void *)(uintptr_t)x->A, t, k,
                                    c->a_shared ? 0LL : (long long)(c->M * c->K), &beta,
                                    (void *)(uintptr_t)x->C, t, m, (long long)(c->M * c->N), (int)c->batch,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != 0) {
        snprintf(err, errlen, "cuBLAS gemm failed: %s", cb.GetStatusString(s));
        return LOOM_ERR_CUDA;
    }
    return LOOM_OK;
}

static loom_status run_loom(void *p, char *err, size_t errlen)
{
    bench_ctx *x = p;
    rt_launch_arg la[3];
    memset(la, 0, sizeof la);
    la[0].dptr = x->A;
    la[1].dptr = x->B;
    la[2].dptr = x->C;
    return rt_gpu_launch(x->g, x->k, x->grid, la, err, errlen);
}

static loom_status flush_l2(void *p, char *err, size_t errlen)
{
    bench_ctx *x = p;
    return rt_gpu_memset8(x->g, x->flush, 0x5a, x->flush_bytes, err, errlen);
}

/* Median ms of `work` over enough repetitions for about 100 ms of kernel time. */
static loom_status time_it(bench_ctx *x, rt_gpu_work_fn work, double *ms, char *err, size_t errlen)
{
    double est = 0;
    loom_status st = rt_gpu_time_each_ms(x->g, flush_l2, work, x, 2, 3, &est, err, errlen);
    if (st != LOOM_OK)
        return st;
    int reps = est > 0 ? (int)(100.0 / est) : 300;
    reps = reps < 10 ? 10 : reps > 300 ? 300 : reps;
    return rt_gpu_time_each_ms(x->g, flush_l2, work, x, 5, reps, ms, err, errlen);
}

static void describe(char *buf, size_t n, const char *who, const nvref_gemm_report *r)
{
    if (!r->bad)
        snprintf(buf, n, "%s ok (worst %.2f of tol)", who, r->worst);
    else
        snprintf(buf, n, "%s FAIL: %llu of %llu bad (%llu not finite); first at %lld: %g, want %g +- %g", who,
                 (unsigned long long)r->bad, (unsigned long long)r->checked, (unsigned long long)r->nonfinite,
                 (long long)r->first_bad, r->first_out, r->first_ref, r->first_tol);
}

/* Build loom's kernel for the case, or say why not (into why). */
static loom_kernel *loom_gemm(const loom_template *t, const gemm_case *c, loom_dtype dt, const char *config,
                              int grid[3], size_t need[3], char *why, size_t whylen)
{
    char text[256], err[1024];
    int64_t shape[LOOM_MAX_PARAMS], cfg[LOOM_MAX_PARAMS];
    snprintf(text, sizeof text, "M=%lld,N=%lld,K=%lld,batch=%lld,dtype=%s,odtype=%s,ashared=%d",
             (long long)c->M, (long long)c->N, (long long)c->K, (long long)c->batch, loom_dtype_name(dt),
             loom_dtype_name(dt), c->a_shared);
    if (loom_params_parse(t->shape, t->nshape, text, shape, err, sizeof err) ||
        loom_params_parse(t->config, t->nconfig, config, cfg, err, sizeof err)) {
        snprintf(why, whylen, "loom: %s", err);
        return NULL;
    }
    loom_kernel *k = t->build(shape, cfg, err, sizeof err);
    if (!k) {
        snprintf(why, whylen, "loom: the template refuses: %s", err);
        return NULL;
    }
    if (loom_verify(k) != LOOM_OK) {
        snprintf(why, whylen, "loom: the kernel fails verification: %s", loom_kernel_errors(k));
        loom_kernel_destroy(k);
        return NULL;
    }
    static const char *names[3] = {"A", "B", "C"};
    for (int i = 0; i < 3; i++) {
        loom_arg_info ai;
        if (loom_kernel_num_args(k) != 3 || !loom_kernel_arg_info(k, i, &ai) || !ai.is_tensor ||
            ai.min_bytes > need[i]) {
            snprintf(why, whylen, "loom: the kernel's arguments are not A, B, C of this shape (argument %d%s%s)",
                     i, loom_kernel_num_args(k) == 3 ? " " : "", loom_kernel_num_args(k) == 3 ? names[i] : "");
            loom_kernel_destroy(k);
            return NULL;
        }
    }
    t->grid(shape, cfg, grid);
    return k;
}

typedef struct row {
    char shape[40];
    loom_dtype dt;
    double loom_tf, cublas_tf;
    char check[600];
} row;

static row rows[32];
static int nrows, failures;

static void bench_case(rt_gpu *g, nvref_gemm *ref, const loom_template *t, const char *config,
                       const gemm_case *c, loom_dtype dt, uint64_t flush, size_t flush_bytes, int have_cublas)
{
    char err[2048];
    row *w = &rows[nrows++];
    memset(w, 0, sizeof *w);
    snprintf(w->shape, sizeof w->shape, "%s", c->name);
    w->dt = dt;
    size_t es = loom_dtype_size(dt);
    int64_t na = (c->a_shared ? 1 : c->batch) * c->M * c->K, nb = c->batch * c->K * c->N, nc = c->batch * c->M * c->N;
    nvref_gemm_shape s = {c->M, c->N, c->K, c->batch, c->a_shared, dt};
    uint64_t A = 0, B = 0, Cb = 0, Cl = 0, R = 0, Rabs = 0;
    loom_kernel *k = NULL;
    double flop = 2.0 * (double)c->M * (double)c->N * (double)c->K * (double)c->batch;
    size_t need[3] = {(size_t)na * es, (size_t)nb * es, (size_t)nc * es};
    char cpart[700] = "", lpart[1400] = "";
    loom_status st = LOOM_OK;
#define TRY(call)                                                                                  \
    if (st == LOOM_OK && (st = (call)) != LOOM_OK)                                                 \
        snprintf(w->check, sizeof w->check, "error: %.560s", err);
    TRY(rt_gpu_alloc(g, need[0], &A, err, sizeof err));
    TRY(rt_gpu_alloc(g, need[1], &B, err, sizeof err));
    TRY(rt_gpu_alloc(g, need[2], &Cb, err, sizeof err));
    TRY(rt_gpu_alloc(g, need[2], &Cl, err, sizeof err));
    TRY(rt_gpu_alloc(g, (size_t)nc * 4, &R, err, sizeof err));
    TRY(rt_gpu_alloc(g, (size_t)nc * 4, &Rabs, err, sizeof err));
    TRY(nvref_gemm_fill(ref, A, dt, na, 1000 + (uint64_t)nrows, -1.0f, 1.0f, err, sizeof err));
    TRY(nvref_gemm_fill(ref, B, dt, nb, 2000 + (uint64_t)nrows, -1.0f, 1.0f, err, sizeof err));
    TRY(nvref_gemm_reference(ref, &s, A, B, R, Rabs, err, sizeof err));
    double rel, acc;
    nvref_gemm_tolerance(dt, c->K, &rel, &acc);
    bench_ctx x = {g, c, dt, A, B, Cb, flush, flush_bytes, NULL, {1, 1, 1}};
    nvref_gemm_report rc, rl, rlc;
    int cublas_ok = 0;

    if (st == LOOM_OK && have_cublas) {
        TRY(rt_gpu_memset8(g, Cb, 0xff, need[2], err, sizeof err)); /* NaN until written */
        TRY(run_cublas(&x, err, sizeof err));
        TRY(nvref_gemm_compare(ref, nc, Cb, dt, R, LOOM_F32, Rabs, rel, acc, &rc, err, sizeof err));
        if (st == LOOM_OK) {
            describe(cpart, sizeof cpart, "cuBLAS", &rc);
            cublas_ok = rc.bad == 0;
            failures += !cublas_ok;
            double ms = 0;
            TRY(time_it(&x, run_cublas, &ms, err, sizeof err));
            if (st == LOOM_OK)
                w->cublas_tf = flop / ms * 1e-9;
        }
    }
    if (st == LOOM_OK && t) {
        k = loom_gemm(t, c, dt, config, x.grid, need, lpart, sizeof lpart);
        if (k) {
            x.k = k;
            x.C = Cl;
            TRY(rt_gpu_memset8(g, Cl, 0xff, need[2], err, sizeof err));
            TRY(run_loom(&x, err, sizeof err));
            TRY(nvref_gemm_compare(ref, nc, Cl, dt, R, LOOM_F32, Rabs, rel, acc, &rl, err, sizeof err));
            if (st == LOOM_OK) {
                describe(lpart, sizeof lpart, "loom", &rl);
                failures += rl.bad != 0;
            }
            if (st == LOOM_OK && cublas_ok) { /* both rounded: twice the tolerance */
                TRY(nvref_gemm_compare(ref, nc, Cl, dt, Cb, dt, Rabs, 2 * rel, 2 * acc, &rlc, err, sizeof err));
                if (st == LOOM_OK) {
                    size_t l = strlen(lpart);
                    snprintf(lpart + l, sizeof lpart - l, "; vs cuBLAS %s", rlc.bad ? "FAIL" : "ok");
                    failures += rlc.bad != 0;
                }
            }
            double ms = 0;
            TRY(time_it(&x, run_loom, &ms, err, sizeof err));
            if (st == LOOM_OK)
                w->loom_tf = flop / ms * 1e-9;
        }
    }
    if (st == LOOM_OK)
        snprintf(w->check, sizeof w->check, "%s%s%s", cpart, cpart[0] && lpart[0] ? "; " : "", lpart);
    else
        failures++;
#undef TRY
    printf("  %-18s %-5s loom %7.1f  cuBLAS %7.1f TFLOP/s  %s\n", w->shape, loom_dtype_name(dt), w->loom_tf,
           w->cublas_tf, w->check);
    fflush(stdout);
    loom_kernel_destroy(k);
    rt_gpu_free(g, A);
    rt_gpu_free(g, B);
    rt_gpu_free(g, Cb);
    rt_gpu_free(g, Cl);
    rt_gpu_free(g, R);
    rt_gpu_free(g, Rabs);
    char serr[512];
    if (rt_gpu_sync(g, serr, sizeof serr) != LOOM_OK) {
        printf("bench_gemm: the device failed: %s\n", serr);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    const char *config = "", *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc)
            config = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_gemm [--config k=v,...] [--only SHAPE-NAME]\n");
            return 2;
        }
    }
    rt_gpu *g = NULL;
    char err[1024];
    if (rt_gpu_open(&g, err, sizeof err) != LOOM_OK) {
        printf("bench_gemm: skipped: %s\n", err);
        return 0;
    }
    const rt_gpu_props *p = rt_gpu_properties(g);
    nvref_gemm *ref = NULL;
    if (nvref_gemm_open(g, &ref, err, sizeof err) != LOOM_OK) {
        printf("bench_gemm: skipped: the reference cannot be built: %s\n", err);
        rt_gpu_close(g);
        return 0;
    }
    int have_cublas = cublas_open(err, sizeof err) == 0;
    printf("bench_gemm on %s (%d SMs, L2 %d MiB)\n", p->name, p->sm_count, p->l2_bytes >> 20);
    if (have_cublas)
        printf("cuBLAS %d (%s): cublasGemmEx / cublasGemmStridedBatchedEx, fp32 compute, default algorithm\n",
               cb.version, cb.path);
    else
        printf("cuBLAS: not measured: %s\n", err);
    const loom_template *t = loom_template_find("gemm");
    if (!t)
        printf("loom gemm: not built yet\n");
    else
        printf("loom gemm: template '%s', config '%s'\n", t->name, *config ? config : "(defaults)");

    size_t flush_bytes = (size_t)(p->l2_bytes > 0 ? p->l2_bytes : 64 << 20) * 4;
    uint64_t flush = 0;
    if (rt_gpu_alloc(g, flush_bytes, &flush, err, sizeof err) != LOOM_OK) {
        printf("bench_gemm: %s\n", err);
        return 1;
    }
    static const gemm_case cases[] = {
        {"2048^3", 2048, 2048, 2048, 1, 0},
        {"4096^3", 4096, 4096, 4096, 1, 0},
        {"8192^3", 8192, 8192, 8192, 1, 0},
        {"433x256x872x1024", 433, 256, 872, 1024, 1}, /* M x N x K x batch, A shared */
        {"433x256x1184x1024", 433, 256, 1184, 1024, 1},
    };
    static const loom_dtype dts[] = {LOOM_BF16, LOOM_F16};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (only && strcmp(only, cases[i].name))
            continue;
        for (size_t d = 0; d < 2; d++)
            bench_case(g, ref, t, config, &cases[i], dts[d], flush, flush_bytes, have_cublas);
    }

    printf("\n(MxNxKxbatch: the IKBO shapes, one A shared by the batch)\n%-18s %-5s %10s %12s %6s  %s\n", "shape", "dtype", "loom TF/s", "cuBLAS TF/s", "ratio", "check");
    for (int i = 0; i < nrows; i++) {
        char lt[16] = "-", ratio[16] = "-";
        if (rows[i].loom_tf > 0)
            snprintf(lt, sizeof lt, "%.1f", rows[i].loom_tf);
        if (rows[i].loom_tf > 0 && rows[i].cublas_tf > 0)
            snprintf(ratio, sizeof ratio, "%.3f", rows[i].loom_tf / rows[i].cublas_tf);
        printf("%-18s %-5s %10s %12.1f %6s  %s\n", rows[i].shape, loom_dtype_name(rows[i].dt), lt,
               rows[i].cublas_tf, ratio, rows[i].check);
    }
    rt_gpu_free(g, flush);
    nvref_gemm_close(ref);
    if (have_cublas)
        cb.Destroy(cb.h);
    rt_gpu_close(g);
    return failures ? 1 : 0;
}
