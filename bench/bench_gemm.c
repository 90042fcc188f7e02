/*
 * bench_gemm -- loom's gemm template against cuBLAS, measured in the same run.
 *
 * For C = A @ B at 2048^3, 4096^3, 8192^3, 3072^3, 5120^3 and the skinny batched shapes of
 * IKBO (M=433, N=256, K in {872, 1184}, batch 1024, one A shared by the batch), bf16 and fp16 inputs,
 * fp32 accumulation, output in the input's dtype, print loom's TFLOP/s, cuBLAS's and the
 * ratio.  Both results are checked first against a naive fp32 reference kernel compiled
 * with NVRTC (support/nvrtc_ref.c, nvref_gemm_*), each element within its bound by the
 * error model (docs/checks.md): the f32 sums of the kernel and of the reference, gamma_K
 * sum |a b| each, and one ulp of the output; loom's is also compared with cuBLAS's by the
 * same bound (the model's two sides: both sums off by gamma_K sum |a b|, both rounded).
 * A check that fails is printed and makes the exit status 1.
 *
 * Layout: row-major, A [M,K] (batch 1, or shared) or [batch,M,K], B [batch,K,N],
 * C [batch,M,N] (rank 2 when batch is 1).  cuBLAS is column-major, so the row-major
 * C = A @ B is computed as the column-major C^T = B^T A^T: the same bytes, with B as the
 * first operand.  Batches go through cublasGemmStridedBatchedEx, with A's stride 0 when
 * A is shared.  cuBLAS is loaded with dlopen (support/cublas_dl.c: LOOM_CUBLAS_LIB, else
 * libcublas.so.13, else .so.12) and called with its default algorithm, which uses tensor
 * cores.
 *
 * Timing: inputs are random (a device-side fill, never zeros).  cuBLAS and every loom
 * config of a case are timed interleaved: each round runs every contender once, each run
 * preceded by an L2 flush (a memset of 4x the L2) outside its timed events, so a change of
 * clock or temperature during the measurement hits all of them alike.  After warm-up
 * rounds, rounds run until each contender has about 300 ms of kernel time (at least 30,
 * at most 400); each figure is the median of its runs, and the spread printed beside it
 * is the half-width of the middle half of its runs (interquartile range / 2 / median).
 * This is Triton's do_bench (which measured the cuBLAS figures in ../shared/BENCH.md)
 * with the contenders interleaved.
 *
 * loom's kernel comes from the registry: loom_template_find("gemm") with the shape keys
 * M, N, K, batch, dtype, odtype, ashared and the untuned config (below; or
 * --config k=v,...; --config may be given up to 8 times: every config is checked and
 * timed in the same rounds, one row each); its kernel takes the run-time dims M and batch
 * (at the case's values, which are its maxima) before A, B and C.  Until the template exists this prints
 * "loom gemm: not built yet" and still measures and checks cuBLAS.
 *
 * Odd shapes (--odd, or --shape with K or N not a multiple of 8): TMA cannot address rows
 * of A (or B) that are not 16-byte aligned, so loom's contender is what a user of the
 * public API runs: loom_gemm_prepare with the same config text ("" for the defaults; the
 * API sets tmastore=0 where N is not a multiple of 8) and loom_gemm_run, whose every run
 * first copies the unaligned operand into a padded buffer.  That copy is timed with the
 * gemm (its cost is the user's); the check column ends with loom_gemm_describe (the config
 * run and the copies).  A, B and loom's C are loom_buffers of a GPU loom_runtime for every
 * case (the runtime's rt_gpu serves the rest); aligned shapes launch the template's kernel
 * on their device pointers as before.
 *
 * Usage: bench_gemm [--config k=v,...]... [--only NAME[,NAME...]] [--dtype bf16|f16]
 *                   [--ms MS] [--odd] [--grid]     (skips cleanly without a GPU)
 *        --odd                    also the odd cases (K or N not a multiple of 8; any one of
 *                                 them also runs when --only names it)
 *        --grid                   issue 21's small and skinny shapes instead (the IKBO LCE's
 *                                 candidate GEMMs over M, N, K and batch; with --odd, both)
 *        --config tuned           a contender that is the API's own pick: loom_gemm_prepare
 *                                 with config NULL (loom_tune at the shape, cached)
 *        --config untuned         (the contender when no --config is given) what runs when
 *                                 nothing is timed: the template's defaults adjusted by its
 *                                 heuristic for the shape (loom_template_untuned_config; the
 *                                 check column names the config); the API's defaults at the
 *                                 odd shapes.  "" is the template's defaults as they are.
 *        --shape MxNxK[xBATCH]    that shape alone instead (A shared when BATCH > 1); any
 *                                 M, N, K >= 1
 */
#include "contenders.h"
#include "cublas_dl.h"
#include "gpu.h"
#include "nvrtc_ref.h"
#include "plain.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cublas_dl cb;

/* ---------------------------------------------------------------- one shape */

/* The sets of shapes: the default one, --odd's and --grid's. */
enum { SET_MAIN, SET_ODD, SET_GRID };

typedef struct gemm_case {
    const char *name;
    int64_t M, N, K, batch;
    int a_shared;
    int set;
} gemm_case;

enum { MAXCFG = 8 };

typedef struct bench_ctx {
    loom_runtime *rt;
    rt_gpu *g;                    /* rt's */
    const gemm_case *c;
    loom_dtype dt;
    uint64_t A, B, Cb, Cl; /* cuBLAS writes Cb, loom Cl */
    loom_buffer *bA, *bB, *bCl;   /* A, B and Cl as the API takes them */
    uint64_t flush;
    size_t flush_bytes;
    int nk;                       /* loom kernels built */
    loom_kernel *k[MAXCFG];       /* aligned shapes: the template's kernel */
    loom_gemm *api[MAXCFG];       /* odd shapes: the public API's plan (k[i] NULL) */
    int grid[MAXCFG][3];
    int ncont, who[MAXCFG + 1];   /* contenders: -1 cuBLAS, i loom config i */
    int turn;                     /* the next interleaved run */
} bench_ctx;

static loom_status run_cublas(bench_ctx *x, char *err, size_t errlen)
{
    const gemm_case *c = x->c;
    return cublas_dl_gemm(&cb, x->dt, c->M, c->N, c->K, c->batch, x->A, c->a_shared, x->B, x->Cb, err, errlen);
}

static loom_status run_loom(bench_ctx *x, int i, char *err, size_t errlen)
{
    if (x->api[i]) { /* the operands' copies, then the gemm */
        loom_status st = loom_gemm_run(x->api[i], x->bA, x->bB, x->bCl);
        if (st != LOOM_OK)
            snprintf(err, errlen, "loom: %s", loom_runtime_error(x->rt));
        return st;
    }
    rt_launch_arg la[5];
    memset(la, 0, sizeof la);
    if (loom_kernel_num_args(x->k[i]) == 4) { /* a plain kernel: M, A, B, C */
        la[0].s.i32 = (int32_t)x->c->M;
        la[1].dptr = x->A;
        la[2].dptr = x->B;
        la[3].dptr = x->Cl;
        return rt_gpu_launch(x->g, x->k[i], x->grid[i], la, err, errlen);
    }
    /* the kernel's run-time dims M and batch (at the case's, its maxima), then A, B, C */
    la[0].s.i32 = (int32_t)x->c->M;
    la[1].s.i32 = (int32_t)x->c->batch;
    la[2].dptr = x->A;
    la[3].dptr = x->B;
    la[4].dptr = x->Cl;
    return rt_gpu_launch(x->g, x->k[i], x->grid[i], la, err, errlen);
}

/* One run of the next contender in turn (the interleaved timing's work). */
static loom_status run_turn(void *p, char *err, size_t errlen)
{
    bench_ctx *x = p;
    int w = x->who[x->turn++ % x->ncont];
    return w < 0 ? run_cublas(x, err, errlen) : run_loom(x, w, err, errlen);
}

static loom_status flush_l2(void *p, char *err, size_t errlen)
{
    bench_ctx *x = p;
    return rt_gpu_memset8(x->g, x->flush, 0x5a, x->flush_bytes, err, errlen);
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Time every contender interleaved (see the top of the file): ms[i] the median of
 * contender i's runs, spread[i] half its interquartile range over the median. */
static loom_status time_all(bench_ctx *x, double target_ms, double *ms, double *spread, char *err, size_t errlen)
{
    int n = x->ncont, warm = 3;
    double *t = malloc(sizeof *t * (size_t)n * 400);
    double *one = malloc(sizeof *one * 400);
    if (!t || !one) {
        free(t);
        free(one);
        snprintf(err, errlen, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    x->turn = 0;
    loom_status st = rt_gpu_time_each(x->g, flush_l2, run_turn, x, warm * n, t, err, errlen);
    double est = 0;
    for (int i = 0; st == LOOM_OK && i < warm * n; i++)
        est = t[i] > est ? t[i] : est; /* the slowest contender's longest run */
    int rounds = est > 0 ? (int)(target_ms / est) : 400;
    rounds = rounds < 30 ? 30 : rounds > 400 ? 400 : rounds;
    x->turn = 0;
    if (st == LOOM_OK)
        st = rt_gpu_time_each(x->g, flush_l2, run_turn, x, rounds * n, t, err, errlen);
    for (int i = 0; st == LOOM_OK && i < n; i++) {
        for (int r = 0; r < rounds; r++)
            one[r] = t[r * n + i];
        qsort(one, (size_t)rounds, sizeof *one, cmp_dbl);
        ms[i] = rounds % 2 ? one[rounds / 2] : 0.5 * (one[rounds / 2 - 1] + one[rounds / 2]);
        spread[i] = ms[i] > 0 ? 0.5 * (one[(3 * rounds) / 4] - one[rounds / 4]) / ms[i] : 0;
    }
    free(t);
    free(one);
    return st;
}

static void describe(char *buf, size_t n, const char *who, const nvref_gemm_report *r)
{
    if (!r->bad)
        snprintf(buf, n, "%s ok (worst %.2f of the bound)", who, r->worst);
    else
        snprintf(buf, n, "%s FAIL: %llu of %llu past their bound (%llu not finite); first at %lld: %.9g, want %.9g +- "
                 "%.3g", who, (unsigned long long)r->bad, (unsigned long long)r->checked,
                 (unsigned long long)r->nonfinite, (long long)r->first_bad, r->first_out, r->first_ref, r->first_bound);
}

/* Build loom's kernel for the case, or say why not (into why). */
/* The plain tile loop of examples/kernels/plain.c (issue 42) with config
 * "plain:bm=..,bn=..,bk=..,consumers=..,stages=..,group=..": the automatic passes'
 * kernel, a contender beside the template's. */
static loom_kernel *build_plain(const gemm_case *c, loom_dtype dt, const char *config, int grid[3], char *why,
                               size_t whylen)
{
    plain_cfg pc = {128, 256, 64, 2, 4, 8, 0};
    const char *p = config + strlen("plain:");
    while (*p) {
        char key[32];
        long v;
        int n = 0;
        if (sscanf(p, "%31[a-z]=%ld%n", key, &v, &n) != 2) {
            snprintf(why, whylen, "loom: bad plain config '%s'", config);
            return NULL;
        }
        int *f = !strcmp(key, "bm") ? &pc.bm : !strcmp(key, "bn") ? &pc.bn : !strcmp(key, "bk") ? &pc.bk
               : !strcmp(key, "consumers") ? &pc.consumers : !strcmp(key, "stages") ? &pc.stages
               : !strcmp(key, "group") ? &pc.group : !strcmp(key, "pingpong") ? &pc.pingpong : NULL;
        if (!f) {
            snprintf(why, whylen, "loom: plain config key '%s' is none of bm bn bk consumers stages group pingpong", key);
            return NULL;
        }
        *f = (int)v;
        p += n;
        p += *p == ',';
    }
    if (c->batch != 1) {
        snprintf(why, whylen, "loom: the plain gemm takes batch 1");
        return NULL;
    }
    loom_kernel *k = plain_gemm(c->M, c->N, c->K, dt, &pc);
    if (loom_verify(k) != LOOM_OK) {
        snprintf(why, whylen, "loom: the plain kernel fails verification: %s", loom_kernel_errors(k));
        loom_kernel_destroy(k);
        return NULL;
    }
    grid[0] = (int)(((c->M + pc.bm - 1) / pc.bm) * ((c->N + pc.bn - 1) / pc.bn));
    grid[1] = grid[2] = 1;
    return k;
}

static loom_kernel *build_gemm(const loom_template *t, const gemm_case *c, loom_dtype dt, const char *config,
                              int grid[3], size_t need[3], char *why, size_t whylen, char *resolved, size_t rlen)
{
    char text[256];
    if (!strncmp(config, "plain:", 6))
        return build_plain(c, dt, config, grid, why, whylen);
    snprintf(text, sizeof text, "M=%lld,N=%lld,K=%lld,batch=%lld,dtype=%s,odtype=%s,ashared=%d",
             (long long)c->M, (long long)c->N, (long long)c->K, (long long)c->batch, loom_dtype_name(dt),
             loom_dtype_name(dt), c->a_shared);
    int untuned = !strcmp(config, "untuned"); /* what runs without timing: the template's heuristic */
    loom_kernel *k = bench_template_build(t->name, text, untuned ? "" : config, grid, untuned ? resolved : NULL,
                                          rlen, why, whylen);
    if (!k)
        return NULL;
    if (loom_verify(k) != LOOM_OK) {
        snprintf(why, whylen, "loom: the kernel fails verification: %s", loom_kernel_errors(k));
        loom_kernel_destroy(k);
        return NULL;
    }
    static const char *names[5] = {"M", "batch", "A", "B", "C"};
    for (int i = 0; i < 5; i++) {
        loom_arg_info ai;
        bool ok = loom_kernel_num_args(k) == 5 && loom_kernel_arg_info(k, i, &ai) && !strcmp(ai.name, names[i]);
        if (ok && i < 2) /* the run-time dims: their maxima are the case's */
            ok = ai.is_dim && ai.dim_max == (i ? c->batch : c->M);
        else if (ok)
            ok = ai.is_tensor && ai.min_bytes <= need[i - 2];
        if (!ok) {
            snprintf(why, whylen, "loom: the kernel's arguments are not M, batch, A, B, C of this shape (argument %d %s)",
                     i, names[i]);
            loom_kernel_destroy(k);
            return NULL;
        }
    }
    return k;
}

typedef struct row {
    char shape[40];
    loom_dtype dt;
    const char *config;
    double loom_tf, cublas_tf, loom_spread, cublas_spread;
    char check[900];
} row;

static row rows[256];
static int nrows, failures;

/* The public API's plan for an odd case, or NULL saying why not (into why).  A refused
 * config is reported like one the template refuses; any other failure counts. */
static loom_gemm *prepare_api(loom_runtime *rt, const gemm_case *c, loom_dtype dt, const char *config, char *why,
                              size_t whylen)
{
    loom_gemm_shape s = {c->M, c->N, c->K, c->batch, dt, dt, c->a_shared};
    loom_gemm *p = NULL;
    loom_status st = loom_gemm_prepare(rt, &s, config, &p);
    if (st == LOOM_OK)
        return p;
    snprintf(why, whylen, "loom %s: %s", st == LOOM_ERR_INVALID ? "refuses" : "FAIL", loom_runtime_error(rt));
    failures += st != LOOM_ERR_INVALID;
    return NULL;
}

/* A buffer of rt (for the API) and its device address (for everything else). */
static loom_status new_buffer(loom_runtime *rt, size_t bytes, loom_buffer **out, uint64_t *dptr, char *err,
                              size_t errlen)
{
    *out = loom_buffer_create(rt, bytes);
    if (!*out) {
        snprintf(err, errlen, "loom_buffer_create: %s", loom_runtime_error(rt));
        return LOOM_ERR_NOMEM;
    }
    *dptr = rt_buffer_dptr(*out);
    return LOOM_OK;
}

/* One case and dtype: cuBLAS and every config, checked, then timed together. */
static void bench_case(loom_runtime *rt, nvref_gemm *ref, const loom_template *t, const char *const *configs,
                       int nconfig, const gemm_case *c, loom_dtype dt, uint64_t flush, size_t flush_bytes,
                       int have_cublas, double target_ms)
{
    char err[2048];
    rt_gpu *g = rt_runtime_gpu(rt);
    if (nrows + nconfig > (int)(sizeof rows / sizeof *rows))
        return;
    row *w = &rows[nrows];
    nrows += nconfig;
    for (int i = 0; i < nconfig; i++) {
        memset(&w[i], 0, sizeof w[i]);
        snprintf(w[i].shape, sizeof w[i].shape, "%s", c->name);
        w[i].dt = dt;
        w[i].config = configs[i];
    }
    size_t es = loom_dtype_size(dt);
    int64_t na = (c->a_shared ? 1 : c->batch) * c->M * c->K, nb = c->batch * c->K * c->N, nc = c->batch * c->M * c->N;
    nvref_gemm_shape s = {c->M, c->N, c->K, c->batch, c->a_shared, dt, 0};
    uint64_t A = 0, B = 0, Cb = 0, Cl = 0, R = 0, Rabs = 0;
    loom_buffer *bA = NULL, *bB = NULL, *bCl = NULL;
    int odd = c->K % 8 || c->N % 8; /* rows TMA cannot address: loom through the API */
    double flop = 2.0 * (double)c->M * (double)c->N * (double)c->K * (double)c->batch;
    size_t need[3] = {(size_t)na * es, (size_t)nb * es, (size_t)nc * es};
    char cpart[700] = "", lpart[MAXCFG][1400];
    loom_status st = LOOM_OK;
#define TRY(call)                                                                                  \
    if (st == LOOM_OK && (st = (call)) != LOOM_OK)                                                 \
        snprintf(w->check, sizeof w->check, "error: %.560s", err);
    TRY(new_buffer(rt, need[0], &bA, &A, err, sizeof err));
    TRY(new_buffer(rt, need[1], &bB, &B, err, sizeof err));
    TRY(rt_gpu_alloc(g, need[2], &Cb, err, sizeof err));
    TRY(new_buffer(rt, need[2], &bCl, &Cl, err, sizeof err));
    TRY(rt_gpu_alloc(g, (size_t)nc * 4, &R, err, sizeof err));
    TRY(rt_gpu_alloc(g, (size_t)nc * 4, &Rabs, err, sizeof err));
    TRY(nvref_gemm_fill(ref, A, dt, na, 1000 + (uint64_t)nrows, -1.0f, 1.0f, err, sizeof err));
    TRY(nvref_gemm_fill(ref, B, dt, nb, 2000 + (uint64_t)nrows, -1.0f, 1.0f, err, sizeof err));
    TRY(nvref_gemm_reference(ref, &s, A, B, R, Rabs, err, sizeof err));
    bench_ctx x;
    memset(&x, 0, sizeof x);
    x.rt = rt;
    x.g = g;
    x.c = c;
    x.dt = dt;
    x.A = A;
    x.B = B;
    x.Cb = Cb;
    x.Cl = Cl;
    x.bA = bA;
    x.bB = bB;
    x.bCl = bCl;
    x.flush = flush;
    x.flush_bytes = flush_bytes;
    nvref_gemm_report rc, rl, rlc;
    int cublas_ok = 0, slot[MAXCFG]; /* config i's kernel, or -1 */

    if (st == LOOM_OK && have_cublas) {
        TRY(rt_gpu_memset8(g, Cb, 0xff, need[2], err, sizeof err)); /* NaN until written */
        TRY(run_cublas(&x, err, sizeof err));
        TRY(nvref_gemm_compare(ref, nc, Cb, dt, R, LOOM_F32, Rabs, c->K, &rc, err, sizeof err));
        if (st == LOOM_OK) {
            describe(cpart, sizeof cpart, "cuBLAS", &rc);
            cublas_ok = rc.bad == 0;
            failures += !cublas_ok;
            x.who[x.ncont++] = -1;
        }
    }
    for (int i = 0; i < nconfig; i++) {
        slot[i] = -1;
        lpart[i][0] = 0;
        if (st != LOOM_OK || !t)
            continue;
        loom_kernel *k = NULL;
        loom_gemm *api = NULL;
        char resolved[256] = ""; /* "untuned": the config it stands for */
        int tuned = !strcmp(configs[i], "tuned"); /* the API's own pick (loom_tune, cached) */
        if (odd || tuned)
            api = prepare_api(rt, c, dt, tuned ? NULL : !strcmp(configs[i], "untuned") ? "" : configs[i], lpart[i],
                              sizeof lpart[i]);
        else
            k = build_gemm(t, c, dt, configs[i], x.grid[x.nk], need, lpart[i], sizeof lpart[i], resolved,
                           sizeof resolved);
        if (!k && !api)
            continue;
        slot[i] = x.nk;
        x.api[x.nk] = api;
        x.k[x.nk++] = k;
        TRY(rt_gpu_memset8(g, Cl, 0xff, need[2], err, sizeof err));
        TRY(run_loom(&x, slot[i], err, sizeof err));
        TRY(nvref_gemm_compare(ref, nc, Cl, dt, R, LOOM_F32, Rabs, c->K, &rl, err, sizeof err));
        if (st == LOOM_OK) {
            describe(lpart[i], sizeof lpart[i], "loom", &rl);
            failures += rl.bad != 0;
        }
        if (st == LOOM_OK && cublas_ok) { /* the model's two sides: both sums off, both rounded */
            TRY(nvref_gemm_compare(ref, nc, Cl, dt, Cb, dt, Rabs, c->K, &rlc, err, sizeof err));
            if (st == LOOM_OK) {
                size_t l = strlen(lpart[i]);
                snprintf(lpart[i] + l, sizeof lpart[i] - l, "; vs cuBLAS %s", rlc.bad ? "FAIL" : "ok");
                failures += rlc.bad != 0;
            }
        }
        if (st == LOOM_OK && (api || *resolved)) { /* what the timed runs launch: the config, the copies */
            size_t l = strlen(lpart[i]);
            snprintf(lpart[i] + l, sizeof lpart[i] - l, "; %s%s", api ? loom_gemm_describe(api) : "gemm ", resolved);
        }
        if (st == LOOM_OK)
            x.who[x.ncont++] = slot[i];
    }
    double ms[MAXCFG + 1] = {0}, spread[MAXCFG + 1] = {0};
    if (st == LOOM_OK && x.ncont > 0)
        TRY(time_all(&x, target_ms, ms, spread, err, sizeof err));
    for (int i = 0; i < nconfig; i++) {
        for (int j = 0; st == LOOM_OK && j < x.ncont; j++) {
            if (x.who[j] == -1) {
                w[i].cublas_tf = flop / ms[j] * 1e-9;
                w[i].cublas_spread = spread[j];
            } else if (x.who[j] == slot[i]) {
                w[i].loom_tf = flop / ms[j] * 1e-9;
                w[i].loom_spread = spread[j];
            }
        }
        if (st == LOOM_OK)
            snprintf(w[i].check, sizeof w[i].check, "%.280s%s%.600s", cpart, cpart[0] && lpart[i][0] ? "; " : "",
                     lpart[i]);
        else if (i)
            memcpy(w[i].check, w->check, sizeof w[i].check);
        printf("  %-18s %-5s loom %7.1f  cuBLAS %7.1f TFLOP/s  [%s]  %s\n", w[i].shape, loom_dtype_name(dt),
               w[i].loom_tf, w[i].cublas_tf, *w[i].config ? w[i].config : "defaults", w[i].check);
    }
    if (st != LOOM_OK)
        failures++;
#undef TRY
    fflush(stdout);
    for (int i = 0; i < x.nk; i++) {
        loom_kernel_destroy(x.k[i]);
        loom_gemm_destroy(x.api[i]);
    }
    loom_buffer_destroy(bA);
    loom_buffer_destroy(bB);
    rt_gpu_free(g, Cb);
    loom_buffer_destroy(bCl);
    rt_gpu_free(g, R);
    rt_gpu_free(g, Rabs);
    char serr[512];
    if (rt_gpu_sync(g, serr, sizeof serr) != LOOM_OK) {
        printf("bench_gemm: the device failed: %s\n", serr);
        exit(1);
    }
}

/* Whether name is one of the comma-separated list (NULL: every name). */
static int listed(const char *list, const char *name)
{
    if (!list)
        return 1;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && !strncmp(p, name, n))
            return 1;
        p += l + (e ? 1 : 0);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *configs[MAXCFG], *only = NULL, *dtype = NULL, *extra = NULL;
    int nconfig = 0, want_odd = 0, want_grid = 0;
    double target_ms = 300;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc && nconfig < MAXCFG)
            configs[nconfig++] = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
            extra = argv[++i];
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc)
            dtype = argv[++i];
        else if (!strcmp(argv[i], "--ms") && i + 1 < argc)
            target_ms = atof(argv[++i]);
        else if (!strcmp(argv[i], "--odd"))
            want_odd = 1;
        else if (!strcmp(argv[i], "--grid"))
            want_grid = 1;
        else {
            fprintf(stderr, "usage: bench_gemm [--config k=v,...]... (at most %d) [--only SHAPE-NAME[,...]] "
                            "[--shape MxNxK[xBATCH]] [--dtype bf16|f16] [--ms MS] [--odd] [--grid]\n"
                            "  --odd: also the shapes whose K or N is not a multiple of 8 (loom through "
                            "loom_gemm_run, its operand copies timed)\n", MAXCFG);
            return 2;
        }
    }
    gemm_case mine = {0};
    if (extra) { /* one more shape, by itself; A is shared by a batch, as in IKBO */
        long long m, n, kk, b = 1;
        char tail;
        int got = sscanf(extra, "%lldx%lldx%lldx%lld%c", &m, &n, &kk, &b, &tail);
        if (got == 3) /* MxNxK: batch 1, nothing after K */
            got = sscanf(extra, "%lldx%lldx%lld%c", &m, &n, &kk, &tail) == 3 ? 4 : 0;
        if (got != 4 || m < 1 || n < 1 || kk < 1 || b < 1) {
            fprintf(stderr, "bench_gemm: --shape %s: expected MxNxK or MxNxKxBATCH, positive integers\n", extra);
            return 2;
        }
        mine = (gemm_case){extra, m, n, kk, b, b > 1, SET_MAIN};
        only = extra;
    }
    if (nconfig == 0)
        configs[nconfig++] = "untuned";
    /* A runtime for the API's buffers and runs; its rt_gpu (the runtime's: closed by
     * loom_runtime_destroy) serves the raw launches, cuBLAS and the references. */
    char err[1024];
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        printf("bench_gemm: skipped: %s\n", rt ? loom_runtime_error(rt) : "out of host memory");
        loom_runtime_destroy(rt);
        return 0;
    }
    rt_gpu *g = rt_runtime_gpu(rt);
    const rt_gpu_props *p = rt_gpu_properties(g);
    nvref_gemm *ref = NULL;
    if (nvref_gemm_open(g, &ref, err, sizeof err) != LOOM_OK) {
        printf("bench_gemm: skipped: the reference cannot be built: %s\n", err);
        loom_runtime_destroy(rt);
        return 0;
    }
    int have_cublas = cublas_dl_open(&cb, err, sizeof err) == 0;
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
        for (int i = 0; i < nconfig; i++)
            printf("loom gemm: template '%s', config '%s'\n", t->name, *configs[i] ? configs[i] : "(defaults)");

    size_t flush_bytes = (size_t)(p->l2_bytes > 0 ? p->l2_bytes : 64 << 20) * 4;
    uint64_t flush = 0;
    if (rt_gpu_alloc(g, flush_bytes, &flush, err, sizeof err) != LOOM_OK) {
        printf("bench_gemm: %s\n", err);
        nvref_gemm_close(ref);
        if (have_cublas)
            cublas_dl_close(&cb);
        loom_runtime_destroy(rt);
        return 1;
    }
    static const gemm_case cases[] = {
        {"2048^3", 2048, 2048, 2048, 1, 0, SET_MAIN},
        {"4096^3", 4096, 4096, 4096, 1, 0, SET_MAIN},
        {"8192^3", 8192, 8192, 8192, 1, 0, SET_MAIN},
        /* squares whose 128 x 256 tiles end in a part-filled wave (2.2 and 6.1 waves on 132
         * SMs): the untuned config's tiles of two widths (gemm's BN2) */
        {"3072^3", 3072, 3072, 3072, 1, 0, SET_MAIN},
        {"5120^3", 5120, 5120, 5120, 1, 0, SET_MAIN},
        {"433x256x872x1024", 433, 256, 872, 1024, 1, SET_MAIN}, /* M x N x K x batch, A shared */
        {"433x256x1184x1024", 433, 256, 1184, 1024, 1, SET_MAIN},
        /* --odd: rows TMA cannot address, K or N not a multiple of 8 */
        {"4097x3001x1000", 4097, 3001, 1000, 1, 0, SET_ODD},
        {"4096x4096x4095", 4096, 4096, 4095, 1, 0, SET_ODD},
        {"4096x4090x4096", 4096, 4090, 4096, 1, 0, SET_ODD},
        {"4097x3001x1001", 4097, 3001, 1001, 1, 0, SET_ODD},
        {"433x255x871x1024", 433, 255, 871, 1024, 1, SET_ODD},
        /* --grid: issue 21's small and skinny shapes, the candidate GEMM of the IKBO LCE
         * (W [M, Kc] shared, E [B, Kc, N]) with one factor at a time moved from the headline
         * (M=433, N=256, Kc=866, B=1024) over M {64, 128, 433}, N {8, 72, 256, 1000}, K {8,
         * 64, 1023, 1184}, batch {64, 509, 1024, 4096}, and the corners */
        {"g433x256x866x1024", 433, 256, 866, 1024, 1, SET_GRID},
        {"g433x256x866x64", 433, 256, 866, 64, 1, SET_GRID},
        {"g433x256x866x509", 433, 256, 866, 509, 1, SET_GRID},
        {"g433x256x866x4096", 433, 256, 866, 4096, 1, SET_GRID},
        {"g64x256x866x1024", 64, 256, 866, 1024, 1, SET_GRID},
        {"g128x256x866x1024", 128, 256, 866, 1024, 1, SET_GRID},
        {"g433x8x866x1024", 433, 8, 866, 1024, 1, SET_GRID},
        {"g433x72x866x1024", 433, 72, 866, 1024, 1, SET_GRID},
        {"g433x1000x866x1024", 433, 1000, 866, 1024, 1, SET_GRID},
        {"g433x256x8x1024", 433, 256, 8, 1024, 1, SET_GRID},
        {"g433x256x64x1024", 433, 256, 64, 1024, 1, SET_GRID},
        {"g433x256x1023x1024", 433, 256, 1023, 1024, 1, SET_GRID},
        {"g433x256x1184x1024", 433, 256, 1184, 1024, 1, SET_GRID},
        {"g64x8x8x64", 64, 8, 8, 64, 1, SET_GRID},
        {"g433x1000x8x509", 433, 1000, 8, 509, 1, SET_GRID},
        {"g200x136x8x1000", 200, 136, 8, 1000, 1, SET_GRID},
        {"g64x8x1184x4096", 64, 8, 1184, 4096, 1, SET_GRID},
        {"g433x1000x1184x64", 433, 1000, 1184, 64, 1, SET_GRID},
    };
    /* --only names any of them; else the default set runs unless --grid is given, --odd's
     * and --grid's when given */
    const int run_set[] = {!want_grid, want_odd, want_grid};
    static const loom_dtype dts[] = {LOOM_BF16, LOOM_F16};
    size_t ncase = sizeof cases / sizeof *cases;
    for (size_t i = 0; i <= ncase; i++) {
        const gemm_case *c = i < ncase ? &cases[i] : &mine;
        if (!c->M || (extra && c != &mine) || !listed(only, c->name))
            continue;
        if (c != &mine && !only && !run_set[c->set])
            continue;
        for (size_t d = 0; d < 2; d++)
            if (!dtype || !strcmp(dtype, loom_dtype_name(dts[d])))
                bench_case(rt, ref, t, configs, nconfig, c, dts[d], flush, flush_bytes, have_cublas, target_ms);
    }

    printf("\n(MxNxKxbatch: the IKBO shapes, one A shared by the batch; K or N not a multiple of 8: loom through "
           "loom_gemm_run, its operand copies timed; +-: half the interquartile range of the runs)\n"
           "%-18s %-5s %10s %6s %12s %6s %6s  %-28s %s\n",
           "shape", "dtype", "loom TF/s", "+-", "cuBLAS TF/s", "+-", "ratio", "config", "check");
    for (int i = 0; i < nrows; i++) {
        char lt[16] = "-", ratio[16] = "-";
        if (rows[i].loom_tf > 0)
            snprintf(lt, sizeof lt, "%.1f", rows[i].loom_tf);
        if (rows[i].loom_tf > 0 && rows[i].cublas_tf > 0)
            snprintf(ratio, sizeof ratio, "%.3f", rows[i].loom_tf / rows[i].cublas_tf);
        printf("%-18s %-5s %10s %5.1f%% %12.1f %5.1f%% %6s  %-28s %s\n", rows[i].shape, loom_dtype_name(rows[i].dt),
               lt, 100 * rows[i].loom_spread, rows[i].cublas_tf, 100 * rows[i].cublas_spread, ratio,
               *rows[i].config ? rows[i].config : "defaults", rows[i].check);
    }
    rt_gpu_free(g, flush);
    nvref_gemm_close(ref);
    if (have_cublas)
        cublas_dl_close(&cb);
    loom_runtime_destroy(rt); /* closes g */
    return failures ? 1 : 0;
}
