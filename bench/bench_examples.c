/*
 * bench_examples -- issue 35 item 5: the example plugin's templates (examples/kernels/)
 * timed beside their peers, in one run, every output checked.
 *
 * The templates are linked in from examples/kernels/ (the plugin's own sources: the pack
 * carries this binary alone), built, launched and checked through the template API as
 * `loomc run --plugin` does:
 *
 *   gemm_bias_act        C = act(A @ B + bias) at 4096^3 and 2048^3 f16 (act silu unless
 *                        --act), beside
 *                          - loom's gemm template (its default config) without an
 *                            epilogue: issue 35's done-when, the example within 5% of it
 *                            at 4096^3;
 *                          - cuBLAS's GEMM (support/cublas_dl.c) followed by a separate
 *                            bias + activation kernel (a loom elementwise kernel over C,
 *                            written here): what a framework runs;
 *                          - cuBLAS's GEMM alone, for reference.
 *                        Checked at 65 sampled rows (every column) by the template's
 *                        error model; the peers by theirs (cuBLAS's C rounded to f16
 *                        before the epilogue adds half an ulp).
 *   rmsnorm              16384 x 4096 f16, beside a device-to-device copy of the same
 *                        bytes (x read once, y written once): the ratio is the fraction
 *                        of copy bandwidth.  Checked at every element.
 *   ikbo_gather_softmax  B=2048 candidates, U=32 users, S=256 keys, D=128 (and B=4096,
 *                        U=64, S=512, D=64), f16, beside
 *                          - a copy of its bytes: q, the distinct users' K read once,
 *                            cand_to_user and out (what an ideal kernel moves);
 *                          - the materialized form: an index_select kernel writing
 *                            K[cand_to_user[b]] for every candidate ([B, S, D]), then the
 *                            same template over it with the identity mapping (U = B).
 *                        Both checked at every element against the template's reference
 *                        and bound; its cost report (loom_kernel_explain) printed, a
 *                        layout conversion through shared memory a failure.
 *
 * Timing: loom_time_work (an L2 flush before each run; the median), in 5 rounds that run
 * every contender of a case in turn, each figure the median of its rounds' medians.  The
 * ratio is peer time / ours (above 1: ours is faster).  The configs are each template's
 * default (gemm_bias_act's keys may be given: --gemm-config pingpong=1,stages=3), or with
 * --tuned the tuner's pick (loom_tune: timed now or read from the cache;
 * gemm_bias_act at 4096^3 has more outputs than LOOM_TUNE_REF_MAX, so its candidates are
 * compared with the default config's output, exactly: the template gives no tolerance).
 *
 * Without a GPU (or with --interpret) it says so, checks each template on the
 * interpreter at a small odd shape, and prints the cost report of the GPU run's
 * ikbo_gather_softmax kernels and of the peers' epilogue and index_select kernels
 * (compiled for sm_90a as far as that); exit status 0 unless a check fails.
 *
 * Usage: bench_examples [--interpret] [--tuned] [--act 0|1|2] [--reps N]
 * Exit status 1 when a check fails, a kernel converts through scratch or something does
 * not run; a missed target is printed, not an exit status.
 */
#include "contenders.h"
#include "gpu.h"
#include "kernels.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CI(v) loom_const_i(k, LOOM_I32, (v))
#define CF(v) loom_const_f(k, LOOM_F32, (v))

static int failures, reps_per_round = 20, tuned, act = 2;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "bench_examples: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static loom_buffer *device(loom_runtime *rt, size_t bytes)
{
    loom_buffer *b = loom_buffer_create(rt, bytes);
    if (!b || loom_buffer_fill(b, 0xff) != LOOM_OK) {
        fprintf(stderr, "bench_examples: a buffer of %zu bytes: %s\n", bytes, loom_runtime_error(rt));
        exit(1);
    }
    return b;
}

/* ---------------------------------------------------------------- the peers' kernels */

/* act(x) in f32, as gemm_bias_act.c writes it: none, relu, or silu x * sigmoid(x). */
static loom_val activation(loom_kernel *k, loom_val x, int which)
{
    if (which == 1)
        return loom_max(k, x, CF(0));
    if (which == 2)
        return loom_mul(k, x, loom_sigmoid(k, x));
    return x;
}

enum { EPI_M = 16, EPI_N = 256 };

/* The framework's epilogue after cuBLAS: C = act(Z + bias) over Z [M, N] f16, bias [N] f32:
 * one [16, 256] tile a program, grid (cdiv(N, 256), cdiv(M, 16)). */
static loom_kernel *epilogue_kernel(int64_t M, int64_t N, int which)
{
    loom_kernel *k = loom_kernel_create("bias_act_epilogue", 4);
    loom_val Z = loom_arg_tensor(k, "Z", LOOM_F16, LOOM_SHAPE2(M, N), LOOM_IN);
    loom_val bias = loom_arg_tensor(k, "bias", LOOM_F32, LOOM_SHAPE1(N), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F16, LOOM_SHAPE2(M, N), LOOM_OUT);
    loom_shape tile = LOOM_SHAPE2(EPI_M, EPI_N);
    loom_val o[2] = {loom_mul(k, loom_program_id(k, 1), CI(EPI_M)), loom_mul(k, loom_program_id(k, 0), CI(EPI_N))};
    loom_val b = loom_load(k, bias, &o[1], LOOM_SHAPE1(EPI_N), LOOM_NONE, 0);
    loom_val x = loom_add(k, loom_cast(k, loom_load(k, Z, o, tile, LOOM_NONE, 0), LOOM_F32),
                          loom_broadcast(k, loom_expand_dims(k, b, 0), tile));
    loom_store(k, C, o, loom_cast(k, activation(k, x, which), LOOM_F16), LOOM_NONE);
    return k;
}

enum { SEL_BLOCK = 2048 };

/* The materialized broadcast, index_select: Kb[b, :] = K[cand_to_user[b], :] over K viewed
 * as [U, S * D]; a program copies SEL_BLOCK elements of one candidate's row, grid
 * (cdiv(S * D, SEL_BLOCK), B). */
static loom_kernel *index_select_kernel(int64_t B, int64_t U, int64_t row, loom_dtype dt)
{
    loom_kernel *k = loom_kernel_create("index_select", 4);
    loom_val K = loom_arg_tensor(k, "K", dt, LOOM_SHAPE2(U, row), LOOM_IN);
    loom_val map = loom_arg_tensor(k, "cand_to_user", LOOM_I32, LOOM_SHAPE1(B), LOOM_IN);
    loom_val Kb = loom_arg_tensor(k, "Kb", dt, LOOM_SHAPE2(B, row), LOOM_OUT);
    loom_val b = loom_program_id(k, 1), c0 = loom_mul(k, loom_program_id(k, 0), CI(SEL_BLOCK));
    loom_val u = loom_load_scalar(k, map, &b);
    loom_val v = loom_load(k, K, ((loom_val[]){u, c0}), LOOM_SHAPE1(SEL_BLOCK), LOOM_NONE, 0);
    loom_store(k, Kb, ((loom_val[]){b, c0}), v, LOOM_NONE);
    return k;
}

/* ---------------------------------------------------------------- contenders and timing */

/* Run w once and wait: 0, or -1 with the failure printed and counted. */
static int run_once(work *w)
{
    if (run_work(w) == LOOM_OK && loom_runtime_sync(w->rt, 0) == LOOM_OK)
        return 0;
    printf("  %s: FAIL: %s\n", w->name, loom_runtime_error(w->rt));
    failures++;
    return -1;
}

/* time_rounds (contenders.h) over 5 rounds: 0, or -1 with the failure printed and counted. */
static int time_all(loom_runtime *rt, work *ws, int n)
{
    if (time_rounds(rt, ws, n, 5, reps_per_round) == 0)
        return 0;
    failures++;
    return -1;
}

/* ---------------------------------------------------------------- the summary */

/* One row of the summary: an example beside one peer. */
typedef struct result {
    char example[64], peer[48], unit[8], verdict[64];
    double ms, peer_ms, rate, peer_rate;
} result;

static result results[32];
static int nresults;

/* Record ours (ws[0]) beside peer ws[i]; work is FLOP (TF/s) or bytes (GB/s). */
static void record(const char *example, const work *ours, const work *peer, double amount, bool flop,
                   const char *verdict)
{
    if (nresults == (int)(sizeof results / sizeof *results))
        return;
    result *r = &results[nresults++];
    snprintf(r->example, sizeof r->example, "%s", example);
    snprintf(r->peer, sizeof r->peer, "%s", peer->name);
    snprintf(r->unit, sizeof r->unit, "%s", flop ? "TF/s" : "GB/s");
    snprintf(r->verdict, sizeof r->verdict, "%s", verdict ? verdict : "");
    r->ms = ours->ms, r->peer_ms = peer->ms;
    double scale = flop ? 1e-9 : 1e-6;
    r->rate = amount / ours->ms * scale, r->peer_rate = amount / peer->ms * scale;
}

/* ---------------------------------------------------------------- configs */

/* --gemm-config: gemm_bias_act's config keys given (the others keep their defaults). */
static const char *gemm_config;

/* Template t's config at shape: its default (gemm_bias_act: with --gemm-config's keys), or
 * with --tuned the tuner's pick. */
static void pick_config(loom_runtime *rt, const loom_template *t, const int64_t *sh, int64_t *cf, char *text, size_t n)
{
    char err[256];
    const char *given = t == &gemm_bias_act_template ? gemm_config : NULL;
    if (loom_params_parse(t->config, t->nconfig, given, cf, err, sizeof err) != 0) {
        fprintf(stderr, "bench_examples: --gemm-config: %s\n", err);
        exit(2);
    }
    if (tuned) {
        loom_tune_opts o = {.quiet = 1};
        loom_tuned r = {0};
        loom_status st = loom_tune(rt, t, sh, 1, &o, &r);
        if (st == LOOM_OK || st == LOOM_ERR_NOT_TUNED)
            memcpy(cf, r.config, LOOM_MAX_PARAMS * sizeof *cf);
        printf("  tuned (%s): %s\n", loom_status_name(st), r.note);
        loom_tuned_release(&r, 1);
    }
    loom_params_format(t->config, t->nconfig, cf, text, n);
}

static bool make_instance(loom_runtime *rt, const loom_template *t, const char *shape, int64_t *sh, int64_t *cf,
                          char *cfg_text, size_t n, loom_instance *in)
{
    char err[1024];
    if (loom_params_parse(t->shape, t->nshape, shape, sh, err, sizeof err)) {
        printf("  FAIL: %s --shape %s: %s\n", t->name, shape, err);
        failures++;
        return false;
    }
    pick_config(rt, t, sh, cf, cfg_text, n);
    if (loom_instance_create(rt, t, sh, cf, 42, in, err, sizeof err) != LOOM_OK) {
        printf("  FAIL: %s --shape %s --config %s: %s\n", t->name, shape, cfg_text, err);
        failures++;
        return false;
    }
    return true;
}

static void *download(loom_buffer *b, size_t bytes)
{
    void *h = xmalloc(bytes);
    if (loom_buffer_download(b, h, bytes) != LOOM_OK) {
        printf("  FAIL: a download of %zu bytes\n", bytes);
        failures++;
        memset(h, 0xff, bytes);
    }
    return h;
}

/* ---------------------------------------------------------------- checks */

typedef struct verdict {
    int64_t checked, bad;
    double worst; /* largest |out - ref| / bound */
    char first[200];
} verdict;

static void judge(verdict *v, int64_t r, int64_t j, double got, double ref, double bound)
{
    double e = fabs(got - ref);
    v->checked++;
    if (bound > 0 && e / bound > v->worst)
        v->worst = e / bound;
    if (!(e <= bound) && v->bad++ == 0)
        snprintf(v->first, sizeof v->first, "[%lld, %lld] = %.6g, want %.6g +- %.3g", (long long)r, (long long)j, got,
                 ref, bound);
}

static void report(const char *what, const char *how, const verdict *v)
{
    if (v->bad)
        printf("  check %-22s (%s): FAIL: %lld of %lld past their bound; first %s\n", what, how, (long long)v->bad,
               (long long)v->checked, v->first);
    else
        printf("  check %-22s (%s): ok (%lld checked, worst |err|/bound %.3f)\n", what, how, (long long)v->checked,
               v->worst);
    failures += v->bad != 0;
}

static double act_exact(double z)
{
    return act == 1 ? fmax(z, 0) : act == 2 ? z / (1 + exp(-z)) : z;
}

static double f16_round(double v) { return (double)(_Float16)v; }

/* The GEMMs' outputs at 65 sampled rows (one in each of 64 row blocks spread over M, and
 * the last), every column, against A @ B (+ bias, act) in double:
 *   kind 0  gemm_bias_act: the template's model, the K products and the bias summed in f32
 *           (gamma_(K+1)), the activation's slope at most 1.1, silu's sigmoid (5 ulp) and
 *           product;
 *   kind 1  cuBLAS then the epilogue: A @ B summed in f32 (gamma_K) and rounded to f16 (half
 *           an ulp), then the bias added in f32 and the activation as above;
 *   kind 2  loom's gemm, A @ B alone: gamma_K. */
static void check_gemm(const loom_instance *in, int64_t M, int64_t N, int64_t K, const _Float16 *c, int kind, verdict *v)
{
    const _Float16 *A = in->host[0], *B = in->host[1];
    const float *bias = in->host[2];
    double *acc = xmalloc((size_t)N * sizeof *acc), *mag = xmalloc((size_t)N * sizeof *mag);
    memset(v, 0, sizeof *v);
    for (int i = 0; i <= 64; i++) {
        int64_t m = i == 64 ? M - 1 : (M * i / 64 + (i * 37) % 64) % M;
        for (int64_t j = 0; j < N; j++)
            acc[j] = mag[j] = 0;
        for (int64_t q = 0; q < K; q++) {
            double a = (double)A[m * K + q];
            for (int64_t j = 0; j < N; j++) {
                double t = a * (double)B[q * N + j];
                acc[j] += t, mag[j] += fabs(t);
            }
        }
        for (int64_t j = 0; j < N; j++) {
            double z = acc[j] + bias[j], y = act_exact(z), ref, err;
            if (kind == 2)
                ref = f16_round(acc[j]), err = loom_f32_sum_error(K, mag[j]);
            else {
                ref = f16_round(y);
                double sum = kind == 0 ? loom_f32_sum_error(K + 1, mag[j] + fabs(bias[j]))
                                       : loom_f32_sum_error(K, mag[j]) +
                                             0.5 * loom_ulp(LOOM_F16, fabs(acc[j]) + loom_f32_sum_error(K, mag[j])) +
                                             0x1p-23 * (fabs(z) + 1);
                err = 1.1 * sum + (act == 2 ? (5 * 0x1p-23 + 0x1p-24) * fabs(y) : 0); /* silu: gemm_bias_act.c's */
            }
            judge(v, m, j, (double)c[m * N + j], ref, loom_error_bound(LOOM_F16, ref, err));
        }
    }
    free(acc);
    free(mag);
}

/* RMSNorm at every element, by rmsnorm.c's model (the sum of N squares in f32, halved by
 * the square root; rsqrt within 2^-21; a few f32 roundings; then dt), row by row. */
static void check_rmsnorm(const loom_instance *in, int64_t R, int64_t N, loom_dtype dt, const void *y, verdict *v)
{
    memset(v, 0, sizeof *v);
    for (int64_t r = 0; r < R; r++) {
        double ss = 0;
        for (int64_t j = 0; j < N; j++)
            ss += kernels_get(in->host[0], dt, r * N + j) * kernels_get(in->host[0], dt, r * N + j);
        double inv = 1 / sqrt(ss / (double)N + 1e-6);
        double rel = (ss > 0 ? 0.5 * loom_f32_sum_error(N, ss) / ss : 0) + 0x1p-21 + 8 * 0x1p-24;
        for (int64_t j = 0; j < N; j++) {
            double ye = kernels_get(in->host[0], dt, r * N + j) * inv * kernels_get(in->host[1], dt, j);
            double ref = dt == LOOM_F16 ? f16_round(ye) : (double)(float)ye;
            judge(v, r, j, kernels_get(y, dt, r * N + j), ref, loom_error_bound(dt, ref, rel * fabs(ye)));
        }
    }
}

/* ---------------------------------------------------------------- gemm_bias_act */

static void gemm_case(loom_runtime *rt, cublas_dl *cb, int64_t M, int64_t N, int64_t K)
{
    const loom_template *t = &gemm_bias_act_template;
    char shape[160], cfg[200], ex[64];
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    snprintf(shape, sizeof shape, "M=%lld,N=%lld,K=%lld,act=%d", (long long)M, (long long)N, (long long)K, act);
    printf("\n== gemm_bias_act %s\n", shape);
    loom_instance in;
    if (!make_instance(rt, t, shape, sh, cf, cfg, sizeof cfg, &in))
        return;
    printf("  config %s\n", cfg);
    size_t cbytes = (size_t)(M * N) * 2;
    work ws[4];
    memset(ws, 0, sizeof ws);
    int n = 0;
    ws[n++] = (work){.name = "gemm_bias_act", .rt = rt, .n = 1, .s = {launch_step(in.kernel, in.grid, in.args, in.nargs)}};

    /* loom's gemm without an epilogue, its default config, over the same A and B */
    const loom_template *g = loom_template_find("gemm");
    int64_t gsh[LOOM_MAX_PARAMS], gcf[LOOM_MAX_PARAMS];
    char gshape[160], gcfg[300], err[1024];
    snprintf(gshape, sizeof gshape, "M=%lld,N=%lld,K=%lld,dtype=f16,odtype=f16", (long long)M, (long long)N, (long long)K);
    loom_kernel *gk = NULL;
    loom_buffer *gc = device(rt, cbytes), *z = device(rt, cbytes), *c2 = device(rt, cbytes);
    if (g && !loom_params_parse(g->shape, g->nshape, gshape, gsh, err, sizeof err)) {
        pick_config(rt, g, gsh, gcf, gcfg, sizeof gcfg);
        if (!(gk = g->build(gsh, gcf, err, sizeof err)))
            printf("  loom gemm: the template refuses: %s\n", err), failures++;
        else {
            int grid[3];
            g->grid(gsh, gcf, grid);
            loom_arg args[] = {LOOM_ARG_I32((int32_t)M), LOOM_ARG_I32(1), LOOM_ARG_BUF(in.buf[0]), LOOM_ARG_BUF(in.buf[1]),
                               LOOM_ARG_BUF(gc)};
            ws[n++] = (work){.name = "loom gemm (no epilogue)", .rt = rt, .n = 1, .s = {launch_step(gk, grid, args, 5)}};
            printf("  loom gemm config %s\n", gcfg);
        }
    }
    /* cuBLAS's GEMM into Z, then the epilogue kernel Z -> C2 */
    loom_kernel *ek = epilogue_kernel(M, N, act);
    int cub_at = -1;
    if (cb->h) {
        step gemm = cublas_step(M, N, K, in.buf[0], in.buf[1], z);
        int egrid[3] = {(int)((N + EPI_N - 1) / EPI_N), (int)((M + EPI_M - 1) / EPI_M), 1};
        loom_arg eargs[] = {LOOM_ARG_BUF(z), LOOM_ARG_BUF(in.buf[2]), LOOM_ARG_BUF(c2)};
        cub_at = n;
        ws[n++] = (work){.name = "cuBLAS + epilogue kernel", .rt = rt, .cb = cb, .n = 2,
                         .s = {gemm, launch_step(ek, egrid, eargs, 3)}};
        ws[n++] = (work){.name = "cuBLAS GEMM alone", .rt = rt, .cb = cb, .n = 1, .s = {gemm}};
    } else
        printf("  cuBLAS: not measured (it did not load)\n");

    /* run each once and check */
    bool ran = true;
    for (int i = 0; i < n; i++)
        ran &= run_once(&ws[i]) == 0;
    if (!ran) {
        loom_instance_destroy(&in);
        return;
    }
    verdict v;
    _Float16 *c = download(in.buf[3], cbytes);
    check_gemm(&in, M, N, K, c, 0, &v);
    report("gemm_bias_act", "65 rows, every column", &v);
    free(c);
    if (gk) {
        c = download(gc, cbytes);
        check_gemm(&in, M, N, K, c, 2, &v);
        report("loom gemm", "65 rows, every column", &v);
        free(c);
    }
    if (cub_at >= 0) {
        c = download(c2, cbytes);
        check_gemm(&in, M, N, K, c, 1, &v);
        report("cuBLAS + epilogue", "65 rows, every column", &v);
        free(c);
    }

    if (time_all(rt, ws, n) == 0) {
        double flop = 2.0 * (double)M * (double)N * (double)K;
        for (int i = 0; i < n; i++)
            printf("  %-26s %9.4f ms  %7.1f TFLOP/s\n", ws[i].name, ws[i].ms, flop / ws[i].ms * 1e-9);
        snprintf(ex, sizeof ex, "gemm_bias_act %lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
        for (int i = 1; i < n; i++) {
            const char *verdict = NULL;
            if (ws[i].s[0].k == gk && gk)
                verdict = ws[0].ms <= 1.05 * ws[i].ms ? "within 5% (issue 35: met)" : "NOT within 5% (issue 35: missed)";
            record(ex, &ws[0], &ws[i], flop, true, verdict);
        }
    }
    loom_kernel_destroy(gk);
    loom_kernel_destroy(ek);
    loom_buffer_destroy(gc);
    loom_buffer_destroy(z);
    loom_buffer_destroy(c2);
    loom_instance_destroy(&in);
}

/* ---------------------------------------------------------------- rmsnorm */

static void rmsnorm_case(loom_runtime *rt, int64_t R, int64_t N)
{
    const loom_template *t = &rmsnorm_template;
    char shape[160], cfg[200], ex[64];
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    snprintf(shape, sizeof shape, "R=%lld,N=%lld,dtype=f16", (long long)R, (long long)N);
    printf("\n== rmsnorm %s\n", shape);
    loom_instance in;
    if (!make_instance(rt, t, shape, sh, cf, cfg, sizeof cfg, &in))
        return;
    printf("  config %s\n", cfg);
    size_t bytes = (size_t)(R * N) * 2;
    loom_buffer *src = device(rt, bytes), *dst = device(rt, bytes);
    work ws[2] = {{.name = "rmsnorm", .rt = rt, .n = 1, .s = {launch_step(in.kernel, in.grid, in.args, in.nargs)}},
                  {.name = "copy (same bytes)", .rt = rt, .n = 1,
                   .s = {copy_step(src, dst, bytes)}}};
    if (run_once(&ws[0]) == 0) {
        verdict v;
        void *y = download(in.buf[2], bytes);
        check_rmsnorm(&in, R, N, LOOM_F16, y, &v);
        report("rmsnorm", "every element", &v);
        free(y);
        if (time_all(rt, ws, 2) == 0) {
            double traffic = 2.0 * (double)bytes; /* x read once, y written once */
            for (int i = 0; i < 2; i++)
                printf("  %-26s %9.4f ms  %7.0f GB/s\n", ws[i].name, ws[i].ms, traffic / ws[i].ms * 1e-6);
            snprintf(ex, sizeof ex, "rmsnorm %lldx%lld f16", (long long)R, (long long)N);
            record(ex, &ws[0], &ws[1], traffic, false, NULL);
        }
    }
    loom_buffer_destroy(src);
    loom_buffer_destroy(dst);
    loom_instance_destroy(&in);
}

/* ---------------------------------------------------------------- ikbo_gather_softmax */


/* Print k's cost report; a conversion through scratch is a failure. */
static void explain(loom_kernel *k, const char *what)
{
    bench_costs s = {0};
    char *text = NULL, err[2048];
    if (loom_kernel_explain(k, "sm_90a", bench_on_cost, &s, &text, err, sizeof err) != LOOM_OK) {
        printf("  explain %s: FAIL: %s\n", what, err);
        failures++;
        return;
    }
    printf("  explain %s (sm_90a):\n", what);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        printf("    %s\n", line);
    printf("    => %d conversion%s through scratch%s, %d other use%s of scratch\n", s.convert, s.convert == 1 ? "" : "s",
           s.convert ? ": FAIL" : "", s.scratch, s.scratch == 1 ? "" : "s");
    failures += s.convert != 0;
    free(text);
}

enum { G_B, G_U, G_Q, G_K, G_MAP, G_OUT }; /* ikbo_gather_softmax's arguments */

static void gather_case(loom_runtime *rt, int64_t B, int64_t U, int64_t S, int64_t D)
{
    const loom_template *t = &ikbo_gather_softmax_template;
    char shape[160], cfg[200], ex[64], err[1024], rep[1024];
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS], msh[LOOM_MAX_PARAMS];
    snprintf(shape, sizeof shape, "B=%lld,U=%lld,S=%lld,D=%lld,dtype=f16", (long long)B, (long long)U, (long long)S,
             (long long)D);
    printf("\n== ikbo_gather_softmax %s\n", shape);
    loom_instance in;
    if (!make_instance(rt, t, shape, sh, cf, cfg, sizeof cfg, &in))
        return;
    printf("  config %s\n", cfg);
    explain(in.kernel, "ikbo_gather_softmax");
    size_t es = 2, obytes = (size_t)(B * S) * es;
    const int32_t *map = in.host[G_MAP];
    int64_t distinct = 0;
    char *seen = calloc((size_t)U, 1);
    for (int64_t b = 0; b < B && seen; b++)
        distinct += !seen[map[b]], seen[map[b]] = 1;
    free(seen);
    /* what an ideal kernel moves: q, the distinct users' keys once, the mapping, out */
    double traffic = (double)(B * D + distinct * S * D + B * S) * (double)es + 4.0 * (double)B;

    /* the materialized form: Kb = K[cand_to_user] ([B, S, D]), then the template over Kb with
     * the identity mapping (U = B) */
    loom_kernel *sel = index_select_kernel(B, U, S * D, LOOM_F16), *batched = NULL;
    loom_buffer *kb = device(rt, (size_t)(B * S * D) * es), *ident = device(rt, (size_t)B * 4);
    loom_buffer *out2 = device(rt, obytes);
    int32_t *id = xmalloc((size_t)B * 4);
    for (int64_t b = 0; b < B; b++)
        id[b] = (int32_t)b;
    loom_buffer_upload(ident, id, (size_t)B * 4);
    free(id);
    memcpy(msh, sh, sizeof msh);
    msh[G_U] = B;
    batched = t->build(msh, cf, err, sizeof err);
    size_t half = (size_t)(traffic / 2);
    loom_buffer *src = device(rt, half), *dst = device(rt, half);
    work ws[3];
    memset(ws, 0, sizeof ws);
    ws[0] = (work){.name = "ikbo_gather_softmax", .rt = rt, .n = 1, .s = {launch_step(in.kernel, in.grid, in.args, in.nargs)}};
    ws[1] = (work){.name = "copy (its bytes)", .rt = rt, .n = 1, .s = {copy_step(src, dst, half)}};
    int n = 2;
    if (!batched)
        printf("  materialized: FAIL: the template refuses U=B: %s\n", err), failures++;
    else {
        int sgrid[3] = {(int)((S * D + SEL_BLOCK - 1) / SEL_BLOCK), (int)B, 1};
        loom_arg sargs[] = {LOOM_ARG_BUF(in.buf[G_K]), LOOM_ARG_BUF(in.buf[G_MAP]), LOOM_ARG_BUF(kb)};
        loom_arg bargs[] = {LOOM_ARG_I32((int32_t)B), LOOM_ARG_I32((int32_t)B), LOOM_ARG_BUF(in.buf[G_Q]),
                            LOOM_ARG_BUF(kb),         LOOM_ARG_BUF(ident),       LOOM_ARG_BUF(out2)};
        ws[n++] = (work){.name = "materialized (select+batched)", .rt = rt, .n = 2,
                         .s = {launch_step(sel, sgrid, sargs, 3), launch_step(batched, in.grid, bargs, 6)}};
    }
    bool ran = true;
    for (int i = 0; i < n; i++)
        ran &= ws[i].s[0].kind == STEP_COPY || run_once(&ws[i]) == 0;
    loom_expected e;
    if (ran && loom_expected_create(t, sh, &in, &e) == LOOM_OK) {
        for (int i = 0; i < n; i += 2) { /* ours (0) and the materialized form (2) */
            void *got[LOOM_MAX_ARGS] = {0};
            got[G_OUT] = download(i == 0 ? in.buf[G_OUT] : out2, obytes);
            int64_t bad = loom_expected_compare(t, &in, &e, got, rep, sizeof rep);
            printf("  check %-22s (every element): %s%s\n", ws[i].name, bad ? "FAIL: " : "ok: ", rep);
            failures += bad != 0;
            free(got[G_OUT]);
        }
        loom_expected_destroy(&e);
        if (time_all(rt, ws, n) == 0) {
            for (int i = 0; i < n; i++)
                printf("  %-30s %9.4f ms  %7.0f GB/s of its bytes\n", ws[i].name, ws[i].ms, traffic / ws[i].ms * 1e-6);
            snprintf(ex, sizeof ex, "ikbo_gather_softmax B%lld U%lld S%lld D%lld", (long long)B, (long long)U,
                     (long long)S, (long long)D);
            for (int i = 1; i < n; i++)
                record(ex, &ws[0], &ws[i], traffic, false, NULL);
        }
    } else if (ran) {
        printf("  FAIL: out of memory for the reference\n");
        failures++;
    }
    loom_kernel_destroy(sel);
    loom_kernel_destroy(batched);
    loom_buffer *bs[] = {kb, ident, out2, src, dst};
    for (size_t i = 0; i < sizeof bs / sizeof *bs; i++)
        loom_buffer_destroy(bs[i]);
    loom_instance_destroy(&in);
}

/* ---------------------------------------------------------------- without a GPU */

static void interpreter_run(loom_runtime *rt)
{
    static const struct {
        const loom_template *t;
        const char *shape;
    } cases[] = {
        {&gemm_bias_act_template, "M=96,N=72,K=136,act=2"},
        {&rmsnorm_template, "R=8,N=1000,dtype=f16"},
        {&ikbo_gather_softmax_template, "B=13,U=4,S=37,D=40,shuffle=1"},
    };
    printf("each example on the interpreter at a small odd shape, checked against its reference and bound:\n");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const loom_template *t = cases[i].t;
        int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
        char err[512], rep[1024];
        if (loom_params_parse(t->shape, t->nshape, cases[i].shape, sh, err, sizeof err) ||
            loom_params_parse(t->config, t->nconfig, NULL, cf, err, sizeof err)) {
            printf("  %s: FAIL: %s\n", t->name, err);
            failures++;
            continue;
        }
        loom_status st = loom_template_check(rt, t, sh, cf, 7, rep, sizeof rep);
        printf("  %-20s %-32s %s: %s\n", t->name, cases[i].shape, st == LOOM_OK ? "ok" : "FAIL", rep);
        failures += st != LOOM_OK;
    }
    /* the GPU run's gather kernels, compiled as far as their cost report */
    printf("\n== the GPU run's ikbo_gather_softmax kernels and the peers' kernels, compiled (sm_90a)\n");
    static const char *shapes[] = {"B=2048,U=32,S=256,D=128", "B=4096,U=64,S=512,D=64"};
    for (int i = 0; i < 2; i++) {
        const loom_template *t = &ikbo_gather_softmax_template;
        int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
        char err[512];
        loom_params_parse(t->shape, t->nshape, shapes[i], sh, err, sizeof err);
        loom_params_parse(t->config, t->nconfig, NULL, cf, err, sizeof err);
        loom_kernel *k = t->build(sh, cf, err, sizeof err);
        if (!k) {
            printf("  %s: FAIL: %s\n", shapes[i], err);
            failures++;
            continue;
        }
        explain(k, shapes[i]);
        loom_kernel_destroy(k);
    }
    /* and the peers' kernels written here */
    loom_kernel *peers[2] = {epilogue_kernel(4096, 4096, act), index_select_kernel(2048, 32, 256 * 128, LOOM_F16)};
    for (int i = 0; i < 2; i++) {
        explain(peers[i], loom_kernel_name(peers[i]));
        loom_kernel_destroy(peers[i]);
    }
}

int main(int argc, char **argv)
{
    int interpret = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--interpret"))
            interpret = 1;
        else if (!strcmp(argv[i], "--tuned"))
            tuned = 1;
        else if (!strcmp(argv[i], "--act") && i + 1 < argc)
            act = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps_per_round = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gemm-config") && i + 1 < argc)
            gemm_config = argv[++i];
        else {
            fprintf(stderr, "usage: bench_examples [--interpret] [--tuned] [--act 0|1|2] [--reps N] [--gemm-config "
                            "K=V,..]\n");
            return 2;
        }
    }
    if (act < 0 || act > 2 || reps_per_round < 1 || reps_per_round > 10000) {
        fprintf(stderr, "bench_examples: --act is 0 (none), 1 (relu) or 2 (silu); --reps 1 to 10000\n");
        return 2;
    }
    loom_runtime *rt = interpret ? NULL : loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        printf("bench_examples: no GPU (%s): nothing timed\n",
               rt ? loom_runtime_error(rt) : interpret ? "--interpret" : "no runtime");
        loom_runtime_destroy(rt);
        rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
        if (!rt) {
            fprintf(stderr, "bench_examples: out of memory\n");
            return 1;
        }
        interpreter_run(rt);
        loom_runtime_destroy(rt);
        printf("\nbench_examples: %s\n", failures ? "FAILED" : "ok");
        return failures ? 1 : 0;
    }

    printf("bench_examples on %s (configs: %s)\n", loom_runtime_device_name(rt),
           tuned ? "tuned (loom_tune)" : "each template's default");
    cublas_dl cb;
    bench_cublas_open(&cb);
    gemm_case(rt, &cb, 4096, 4096, 4096);
    gemm_case(rt, &cb, 2048, 2048, 2048);
    rmsnorm_case(rt, 16384, 4096);
    gather_case(rt, 2048, 32, 256, 128);
    gather_case(rt, 4096, 64, 512, 64);
    if (cb.h)
        cublas_dl_close(&cb);
    if (loom_runtime_sync(rt, 0) != LOOM_OK) {
        printf("bench_examples: the device failed: %s\n", loom_runtime_error(rt));
        failures++;
    }

    printf("\n%-40s %9s %9s  %-30s %9s %9s %7s  %s\n", "example", "ms", "rate", "peer (same run)", "peer ms", "rate",
           "ratio", "");
    for (int i = 0; i < nresults; i++) {
        const result *r = &results[i];
        printf("%-40s %9.4f %9.1f  %-30s %9.4f %9.1f %7.3f  %s %s\n", r->example, r->ms, r->rate, r->peer, r->peer_ms,
               r->peer_rate, r->peer_ms / r->ms, r->unit, r->verdict);
    }
    printf("(ratio = peer time / ours: above 1, ours is faster; rates of the GEMMs in TFLOP/s, of the others in GB/s "
           "of the example's bytes: read and written once, the gather's distinct users' keys once)\n");
    loom_runtime_destroy(rt);
    printf("bench_examples: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
