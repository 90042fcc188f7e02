/*
 * bench_ikbo_lce.c -- IKBO linear compression on the GPU: every stage of the co-design
 * against the materialized-broadcast baseline, all measured in the same run.
 *
 *   bench_ikbo_lce                 the headline shape (B=1024, U=15, M=433, N=256, Ku=1178,
 *                                  Kc=866, f16), contiguous and shuffled users
 *   bench_ikbo_lce --sweep         also B from 512 to 4096 at ratio 70, and the ratio B/U from
 *                                  2 to 1000 at B=1024
 *   bench_ikbo_lce --shape B=..,U=..,M=..,N=..,Ku=..,Kc=..   one shape (contiguous, shuffled)
 *   --config BM=..,BN=..,stages=..,cwarps=..,ctas=..,consumers=..   skip tuning, use this config
 *                                  (keys of the ikbo_lce template; those left out keep their defaults)
 *   without a GPU: every stage on the interpreter at a small odd shape, checked the same
 *   way, and each stage's kernels written as PTX (--ptx DIR, default build/ptx/ikbo_lce)
 *
 * Each shape is tuned once (loom_tune over the ikbo_lce template, cached); every stage runs
 * with that tile config.  Correctness, by the rule, on the headline shapes (and on
 * every shape with --check-all): max |out - ref32| <= max |ref16 - ref32|, where ref32 comes
 * from the NVRTC naive f32 GEMMs (runtime/nvrtc_ref.c) of the user and candidate halves,
 * and ref16 rounds each half to f16 and then their sum, as the decomposed f16 computation
 * does.  Timing: loom_time_work, median of runs each after an L2 flush.  Exit status 1 if
 * any check fails.
 */
#include "gpu.h"
#include "ikbo_lce.h"
#include "nvrtc_ref.h"
#include "rt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lce_shape {
    int64_t B, U, M, N, Ku, Kc;
} lce_shape;

typedef struct run_ctx {
    loom_ikbo_lce *p;
    loom_buffer *eu, *ec, *map, *out;
} run_ctx;

static loom_status run_once(void *c)
{
    run_ctx *x = c;
    return loom_ikbo_lce_run(x->p, x->eu, x->ec, x->map, x->out);
}

static int failures;

#define DIE(...)                                                                                    \
    do {                                                                                            \
        fprintf(stderr, "bench_ikbo_lce: " __VA_ARGS__);                                            \
        fprintf(stderr, "\n");                                                                      \
        exit(2);                                                                                    \
    } while (0)

static float h2f(uint16_t h) { return tpl_get(&h, LOOM_F16, 0); }

/* max |out - ref32| and max |ref16 - ref32| over every element */
static void check(const float *refc, const float *refu, const int32_t *map, const uint16_t *out, const lce_shape *s,
                  double *err, double *tol)
{
    int64_t mn = s->M * s->N;
    double e = 0, t = 0;
    for (int64_t b = 0; b < s->B; b++) {
        const float *c = refc + b * mn, *u = refu + (int64_t)map[b] * mn;
        const uint16_t *o = out + b * mn;
        for (int64_t i = 0; i < mn; i++) {
            double r32 = (double)c[i] + (double)u[i];
            double r16 = tpl_round(LOOM_F16, tpl_round(LOOM_F16, c[i]) + tpl_round(LOOM_F16, u[i]));
            double d = fabs(h2f(o[i]) - r32);
            if (!(d <= e))
                e = d;
            if (fabs(r16 - r32) > t)
                t = fabs(r16 - r32);
        }
    }
    *err = e;
    *tol = t;
}

static void one_shape(loom_runtime *rt, nvref_gemm *ref, const lce_shape *s, int shuffle, int do_check,
                      const loom_ikbo_lce_config *fixed)
{
    rt_gpu *g = rt_runtime_gpu(rt);
    char err[1024];
    size_t e = 2;
    uint64_t seed = 1234 + (uint64_t)s->B * 7 + (uint64_t)s->U;
    /* weights on the host (prepare takes host arrays) and on the device (the reference) */
    uint16_t *wu = malloc((size_t)(s->M * s->Ku) * e), *wc = malloc((size_t)(s->M * s->Kc) * e);
    int32_t *map = malloc((size_t)s->B * 4);
    if (!wu || !wc || !map)
        DIE("out of host memory");
    tpl_fill(wu, LOOM_F16, s->M * s->Ku, -1, 1, &seed);
    tpl_fill(wc, LOOM_F16, s->M * s->Kc, -1, 1, &seed);
    ik_mapping(s->B, s->U, shuffle, seed, map);
    loom_buffer *dwu = loom_buffer_create(rt, (size_t)(s->M * s->Ku) * e);
    loom_buffer *dwc = loom_buffer_create(rt, (size_t)(s->M * s->Kc) * e);
    loom_buffer *eu = loom_buffer_create(rt, (size_t)(s->U * s->Ku * s->N) * e);
    loom_buffer *ec = loom_buffer_create(rt, (size_t)(s->B * s->Kc * s->N) * e);
    loom_buffer *dmap = loom_buffer_create(rt, (size_t)s->B * 4);
    loom_buffer *out = loom_buffer_create(rt, (size_t)(s->B * s->M * s->N) * e);
    if (!dwu || !dwc || !eu || !ec || !dmap || !out)
        DIE("device buffers: %s", loom_runtime_error(rt));
    if (loom_buffer_upload(dwu, wu, loom_buffer_size(dwu)) || loom_buffer_upload(dwc, wc, loom_buffer_size(dwc)) ||
        loom_buffer_upload(dmap, map, loom_buffer_size(dmap)))
        DIE("upload: %s", loom_runtime_error(rt));
    if (nvref_gemm_fill(ref, rt_buffer_dptr(eu), LOOM_F16, s->U * s->Ku * s->N, seed + 1, -1, 1, err, sizeof err) ||
        nvref_gemm_fill(ref, rt_buffer_dptr(ec), LOOM_F16, s->B * s->Kc * s->N, seed + 2, -1, 1, err, sizeof err))
        DIE("fill: %s", err);

    /* the reference halves, f32 on the device, then on the host */
    float *refc = NULL, *refu = NULL;
    uint16_t *hout = NULL;
    if (do_check) {
        size_t nc = (size_t)(s->B * s->M * s->N), nu = (size_t)(s->U * s->M * s->N);
        loom_buffer *rc = loom_buffer_create(rt, nc * 4), *ac = loom_buffer_create(rt, nc * 4);
        loom_buffer *ru = loom_buffer_create(rt, nu * 4), *au = loom_buffer_create(rt, nu * 4);
        refc = malloc(nc * 4);
        refu = malloc(nu * 4);
        hout = malloc(nc * e);
        if (!rc || !ac || !ru || !au || !refc || !refu || !hout)
            DIE("reference buffers: out of memory");
        nvref_gemm_shape cs = {s->M, s->N, s->Kc, s->B, 1, LOOM_F16}, us = {s->M, s->N, s->Ku, s->U, 1, LOOM_F16};
        if (nvref_gemm_reference(ref, &cs, rt_buffer_dptr(dwc), rt_buffer_dptr(ec), rt_buffer_dptr(rc),
                                 rt_buffer_dptr(ac), err, sizeof err) ||
            nvref_gemm_reference(ref, &us, rt_buffer_dptr(dwu), rt_buffer_dptr(eu), rt_buffer_dptr(ru),
                                 rt_buffer_dptr(au), err, sizeof err))
            DIE("reference: %s", err);
        if (loom_buffer_download(rc, refc, nc * 4) || loom_buffer_download(ru, refu, nu * 4))
            DIE("reference download: %s", loom_runtime_error(rt));
        loom_buffer_destroy(rc);
        loom_buffer_destroy(ac);
        loom_buffer_destroy(ru);
        loom_buffer_destroy(au);
    }

    loom_ikbo_lce_shape ls = {s->B, s->U, s->M, s->N, s->Ku, s->Kc, LOOM_F16};
    /* the tile config: given, or the tuner's for the persistent kernel */
    loom_ikbo_lce_config cfg;
    if (fixed) {
        cfg = *fixed;
    } else {
        loom_ikbo_lce *p = NULL;
        if (loom_ikbo_lce_prepare(rt, &ls, LOOM_IKBO_PERSISTENT, wu, wc, NULL, &p) != LOOM_OK)
            DIE("tuning: %s", loom_runtime_error(rt));
        cfg = loom_ikbo_lce_config_of(p);
        loom_ikbo_lce_destroy(p);
    }
    double ms[5] = {0};
    printf("B=%lld U=%lld (ratio %.0f) M=%lld N=%lld Ku=%lld Kc=%lld %s; "
           "BM=%d,BN=%d,stages=%d,cwarps=%d,ctas=%d,consumers=%d\n",
           (long long)s->B, (long long)s->U, (double)s->B / (double)s->U, (long long)s->M, (long long)s->N,
           (long long)s->Ku, (long long)s->Kc, shuffle ? "shuffled" : "contiguous", cfg.bm, cfg.bn, cfg.stages,
           cfg.cwarps, cfg.ctas, cfg.consumers);
    double gflop = 2.0 * (double)s->M * (double)s->N * ((double)s->B * (double)s->Kc + (double)s->U * (double)s->Ku) / 1e9;
    for (int st = LOOM_IKBO_MATERIALIZED; st <= LOOM_IKBO_PERSISTENT; st++) {
        loom_ikbo_lce *p = NULL;
        if (loom_ikbo_lce_prepare(rt, &ls, (loom_ikbo_stage)st, wu, wc, &cfg, &p) != LOOM_OK) {
            printf("  stage %d %-15s refused: %s\n", st, loom_ikbo_stage_name((loom_ikbo_stage)st),
                   loom_runtime_error(rt));
            failures++;
            continue;
        }
        run_ctx x = {p, eu, ec, dmap, out};
        char verdict[160] = "";
        if (do_check) {
            if (loom_buffer_fill(out, 0xff) || run_once(&x) || loom_buffer_download(out, hout, loom_buffer_size(out)))
                DIE("stage %d: %s", st, loom_runtime_error(rt));
            double er, tol;
            check(refc, refu, map, hout, s, &er, &tol);
            bool ok = er <= tol;
            failures += !ok;
            snprintf(verdict, sizeof verdict, "%s: max|out-ref32| %.3g, max|ref16-ref32| %.3g", ok ? "ok" : "FAIL", er,
                     tol);
        }
        if (loom_time_work(rt, run_once, &x, 3, 20, &ms[st]) != LOOM_OK)
            DIE("timing stage %d: %s", st, loom_runtime_error(rt));
        printf("  stage %d %-15s %8.3f ms %7.1f TF/s  x%.2f vs materialized  %s\n", st,
               loom_ikbo_stage_name((loom_ikbo_stage)st), ms[st], gflop / ms[st], ms[0] / ms[st], verdict);
        fflush(stdout);
        loom_ikbo_lce_destroy(p);
    }
    fflush(stdout);
    (void)g;
    free(wu);
    free(wc);
    free(map);
    free(refc);
    free(refu);
    free(hout);
    loom_buffer *bs[] = {dwu, dwc, eu, ec, dmap, out};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        loom_buffer_destroy(bs[i]);
}

/* Without a GPU: every stage on the interpreter at a small odd shape, checked by the same
 * rule against a CPU reference, and each stage's kernels written as PTX into ptx_dir. */
static int interpreter_run(const char *ptx_dir)
{
    static const lce_shape s = {24, 5, 77, 64, 37, 229}; /* 4 candidate k steps */
    static const loom_ikbo_lce_config cfg = {64, 64, 2, 4, 6, 0};
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRET);
    size_t e = 2, nout = (size_t)(s.B * s.M * s.N);
    uint64_t seed = 99;
    uint16_t *wu = malloc((size_t)(s.M * s.Ku) * e), *wc = malloc((size_t)(s.M * s.Kc) * e);
    uint16_t *eu = malloc((size_t)(s.U * s.Ku * s.N) * e), *ec = malloc((size_t)(s.B * s.Kc * s.N) * e);
    uint16_t *out = malloc(nout * e);
    int32_t *map = malloc((size_t)s.B * 4);
    float *refc = malloc(nout * 4), *refu = malloc((size_t)(s.U * s.M * s.N) * 4);
    if (!rt || !wu || !wc || !eu || !ec || !out || !map || !refc || !refu)
        DIE("out of memory");
    tpl_fill(wu, LOOM_F16, s.M * s.Ku, -1, 1, &seed);
    tpl_fill(wc, LOOM_F16, s.M * s.Kc, -1, 1, &seed);
    tpl_fill(eu, LOOM_F16, s.U * s.Ku * s.N, -1, 1, &seed);
    tpl_fill(ec, LOOM_F16, s.B * s.Kc * s.N, -1, 1, &seed);
    for (int64_t x = 0; x < s.U + s.B; x++) /* the two halves, in double, kept as f32 */
        for (int64_t m = 0; m < s.M; m++)
            for (int64_t j = 0; j < s.N; j++) {
                bool user = x < s.U;
                int64_t b = user ? x : x - s.U, K = user ? s.Ku : s.Kc;
                double acc = 0;
                for (int64_t q = 0; q < K; q++)
                    acc += tpl_get(user ? wu : wc, LOOM_F16, m * K + q) *
                           tpl_get(user ? eu : ec, LOOM_F16, (b * K + q) * s.N + j);
                (user ? refu : refc)[(b * s.M + m) * s.N + j] = (float)acc;
            }
    loom_ikbo_lce_shape ls = {s.B, s.U, s.M, s.N, s.Ku, s.Kc, LOOM_F16};
    printf("no GPU: every IKBO LCE stage on the interpreter at B=%lld U=%lld M=%lld N=%lld Ku=%lld Kc=%lld "
           "(f16), PTX into %s\n", (long long)s.B, (long long)s.U, (long long)s.M, (long long)s.N, (long long)s.Ku,
           (long long)s.Kc, ptx_dir);
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        ik_mapping(s.B, s.U, shuffle, seed, map);
        loom_buffer *deu = loom_buffer_create(rt, (size_t)(s.U * s.Ku * s.N) * e);
        loom_buffer *dec = loom_buffer_create(rt, (size_t)(s.B * s.Kc * s.N) * e);
        loom_buffer *dmap = loom_buffer_create(rt, (size_t)s.B * 4), *dout = loom_buffer_create(rt, nout * e);
        if (!deu || !dec || !dmap || !dout || loom_buffer_upload(deu, eu, loom_buffer_size(deu)) ||
            loom_buffer_upload(dec, ec, loom_buffer_size(dec)) || loom_buffer_upload(dmap, map, loom_buffer_size(dmap)))
            DIE("buffers: %s", loom_runtime_error(rt));
        for (int st = LOOM_IKBO_MATERIALIZED; st <= LOOM_IKBO_PERSISTENT; st++) {
            loom_ikbo_lce *p = NULL;
            if (loom_ikbo_lce_prepare(rt, &ls, (loom_ikbo_stage)st, wu, wc, &cfg, &p) != LOOM_OK)
                DIE("stage %d: %s", st, loom_runtime_error(rt));
            run_ctx x = {p, deu, dec, dmap, dout};
            if (run_once(&x) || loom_buffer_download(dout, out, nout * e))
                DIE("stage %d: %s", st, loom_runtime_error(rt));
            double er, tol;
            check(refc, refu, map, out, &s, &er, &tol);
            failures += !(er <= tol);
            printf("  %s users, stage %d %-15s %s: max|out-ref32| %.3g, max|ref16-ref32| %.3g  (%s)\n",
                   shuffle ? "shuffled  " : "contiguous", st, loom_ikbo_stage_name((loom_ikbo_stage)st),
                   er <= tol ? "ok  " : "FAIL", er, tol, loom_ikbo_lce_describe(p));
            int grid[3];
            loom_kernel *k;
            for (int i = 0; shuffle == 0 && (k = loom_ikbo_lce_kernel(p, i, grid)) != NULL; i++) {
                char *ptx = NULL, perr[1024], path[512];
                size_t smem = 0;
                if (loom_compile_ptx(k, "sm_90a", &ptx, &smem, perr, sizeof perr) != LOOM_OK)
                    DIE("PTX of %s: %s", loom_kernel_name(k), perr);
                snprintf(path, sizeof path, "%s/stage%d_%s.ptx", ptx_dir, st, loom_kernel_name(k));
                FILE *f = fopen(path, "w");
                if (!f || fputs(ptx, f) < 0 || fclose(f) != 0)
                    DIE("cannot write %s", path);
                free(ptx);
            }
            loom_ikbo_lce_destroy(p);
        }
        loom_buffer *bs[] = {deu, dec, dmap, dout};
        for (size_t i = 0; i < 4; i++)
            loom_buffer_destroy(bs[i]);
    }
    free(wu);
    free(wc);
    free(eu);
    free(ec);
    free(out);
    free(map);
    free(refc);
    free(refu);
    loom_runtime_destroy(rt);
    if (failures)
        printf("bench_ikbo_lce: %d FAILED\n", failures);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    lce_shape head = {1024, 15, 433, 256, 1178, 866};
    int sweep = 0, check_all = 0, have_cfg = 0;
    loom_ikbo_lce_config cfg = {0};
    lce_shape custom = head;
    int have_shape = 0;
    const char *ptx_dir = "build/ptx/ikbo_lce";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sweep"))
            sweep = 1;
        else if (!strcmp(argv[i], "--ptx") && i + 1 < argc)
            ptx_dir = argv[++i];
        else if (!strcmp(argv[i], "--check-all"))
            check_all = 1;
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            char *q = argv[++i];
            for (char *t = strtok(q, ","); t; t = strtok(NULL, ",")) {
                long long v;
                char key[8];
                if (sscanf(t, "%7[^=]=%lld", key, &v) != 2)
                    DIE("bad --shape item '%s'", t);
                int64_t *f = !strcmp(key, "B") ? &custom.B : !strcmp(key, "U") ? &custom.U : !strcmp(key, "M") ? &custom.M
                           : !strcmp(key, "N") ? &custom.N : !strcmp(key, "Ku") ? &custom.Ku : !strcmp(key, "Kc") ? &custom.Kc : NULL;
                if (!f)
                    DIE("unknown --shape key '%s' (B, U, M, N, Ku, Kc)", key);
                *f = v;
            }
            have_shape = 1;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            /* the ikbo_lce template's keys; those not given keep their defaults */
            const loom_template *t = loom_template_find("ikbo_lce");
            int64_t c[LOOM_MAX_PARAMS];
            char why[256];
            if (loom_params_parse(t->config, t->nconfig, argv[++i], c, why, sizeof why) != 0)
                DIE("--config: %s", why);
            cfg = ik_config_of(c);
            have_cfg = 1;
        } else {
            fprintf(stderr, "usage: bench_ikbo_lce [--sweep] [--check-all] [--ptx DIR] [--shape B=..,U=..,M=..,N=..,Ku=..,Kc=..] "
                            "[--config BM=..,BN=..,stages=..,cwarps=..,ctas=..,consumers=..]\n");
            return 2;
        }
    }
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        printf("bench_ikbo_lce: no GPU here (%s)\n", rt ? loom_runtime_error(rt) : "no runtime");
        loom_runtime_destroy(rt);
        return interpreter_run(ptx_dir);
    }
    char err[1024];
    nvref_gemm *ref = NULL;
    if (nvref_gemm_open(rt_runtime_gpu(rt), &ref, err, sizeof err) != LOOM_OK)
        DIE("NVRTC reference: %s", err);
    printf("IKBO LCE on %s (f16; TF/s counts the decomposed FLOPs)\n", loom_runtime_device_name(rt));
    const loom_ikbo_lce_config *fc = have_cfg ? &cfg : NULL;
    lce_shape first = have_shape ? custom : head;
    one_shape(rt, ref, &first, 0, 1, fc);
    one_shape(rt, ref, &first, 1, 1, fc);
    if (sweep) {
        printf("== B sweep at ratio 70\n");
        for (int64_t B = 512; B <= 4096; B *= 2) {
            lce_shape s = head;
            s.B = B;
            s.U = B / 70 > 0 ? (B + 35) / 70 : 1;
            if (B != 1024)
                one_shape(rt, ref, &s, 0, check_all, fc);
        }
        printf("== ratio sweep at B=1024\n");
        static const int ratios[] = {2, 10, 200, 1000};
        for (int i = 0; i < 4; i++) {
            lce_shape s = head;
            s.U = (1024 + ratios[i] / 2) / ratios[i];
            s.U = s.U < 1 ? 1 : s.U;
            one_shape(rt, ref, &s, 0, check_all, fc);
        }
    }
    nvref_gemm_close(ref);
    loom_runtime_destroy(rt);
    if (failures)
        printf("bench_ikbo_lce: %d FAILED\n", failures);
    return failures ? 1 : 0;
}
