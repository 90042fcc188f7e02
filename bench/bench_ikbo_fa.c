/*
 * bench_ikbo_fa.c -- IKBO flash attention on the GPU, against the materialized broadcast
 * measured in the same run.
 *
 *   bench_ikbo_fa                  the headline: B=2048, H=2, n_seed=64, D=128, U=32, S=1024
 *                                  and 2048, f16, contiguous and shuffled users
 *   bench_ikbo_fa --sweep          also S from 512 to 16384, the ratio B/U (1, 10, 64, 1000),
 *                                  D=64, and per-user lengths (varlen)
 *   bench_ikbo_fa --lowreuse       issue 37's low-reuse sweep (B/U in 1, 2, 4; D 64, 128; H 1-8;
 *                                  n_seed 16-128; S 500-4096; each factor moved from a base, and
 *                                  the corners; --lowreuse-all: all 384 combinations), each row
 *                                  against the roofline (bytes at the copy bandwidth, or FLOPs
 *                                  at the tensor peak where they take longer)
 *   bench_ikbo_fa --shape B=..,U=..,S=..,H=..,D=..,n_seed=..[,varlen=1][,shuffle=1][,bf16=1]
 *   --config BN=..,stages=..,ctas=..,sched=..,turns=..   the ikbo_fa template's keys (default:
 *                                  the C API's default config; --tune: the tuner's pick)
 *   --fp8                          issue 38's FP8 rows: at the headline (S=1024 and 2048; or
 *                                  --shape's), the e4m3 kernel through the C API
 *                                  (loom_ikbo_fa_launch_scaled: Q, K, Vt in e4m3, per-head
 *                                  scales, out f16) and the f16 kernel on the same values,
 *                                  timed in the same interleaved rounds, both TFLOP/s, the
 *                                  issue's targets (700 at S=1024, 850 at S=2048) met or not,
 *                                  and the FP8 output's error against the f16 kernel's and
 *                                  the f32 device reference's (relative RMS, largest |diff|);
 *                                  each FP8 output checked at sampled rows (below); with
 *                                  --config, both kernels take it (BN=128 for FP8), or the f16
 *                                  one its untuned config where it refuses it (stages=4 at
 *                                  D=128: no room), said in a line.  Alone,
 *                                  only these rows; with --sweep, after it
 *   --check-all                    check every row (default: the headline rows and the
 *                                  varlen ones)
 *   --bound-stats                  with each check, the bounds' median and largest, the
 *                                  reference's median magnitude, how many elements differ
 *                                  from it and by how much at most (the output downloaded)
 *   without a GPU: the C API on the interpreter at small odd shapes, checked against the
 *   CPU reference in double within the error model's bound (fa_bound); with --fp8, the
 *   FP8 C API at a small odd shape against fa_fp8_reference within its bound, and its
 *   difference from the f16 C API and from the exact attention (fa_reference) printed
 *
 * Baselines, each row: "materialized" gathers K and V per candidate (K_b[b] = K[u(b)], a
 * copy at full bandwidth) and runs loom's attention over the broadcast tensors as a plain
 * batched attention (U = B, the identity mapping); "no gather" is that attention alone
 * (the broadcast made beforehand, not timed).  The checks, by the error model
 * (docs/checks.md): every output element within its own bound of the ikbo_fa template's
 * device reference (a naive f32 SIMT attention over the plan's row blocks, loom's SIMT path:
 * no TMA, wgmma or warp specialization), the bound from fa_bound's terms computed in the
 * same pass on the device (twice the model's error, the reference's own included, plus an
 * ulp), compared by the tuner's comparison kernel; NaN or an element left unwritten (the
 * output is poisoned with NaN first) fails.  (Until session 20 a fixed atol + rtol |ref|.)  TFLOP/s = 4 * H * n_seed * D * (sum over
 * candidates of their user's keys) / time.  Timing: loom_time_work, median of 20 runs
 * each after an L2 flush.  Exit status 1 if any check fails.
 *
 * The FP8 rows (--fp8): Q, K and Vt are e4m3 made on the host (uniform in [-1, 1],
 * rounded), the scales per head q 0.75 or 1.25, k 1.5, v 0.5 or 1.25 (at most 3
 * significant bits, so the e4m3 values times them are exact in f16: fa_fp8_dequant gives
 * the f16 kernel the same inputs).  The f16 output is checked by the model as above, and
 * its device reference (f32 sums, rounded to f16) is the FP8 row's "f32 ref".  The FP8
 * output is checked against fa_fp8_reference (templates/ikbo_fa_plan.c: the kernel's
 * computation in double, P rounded to e4m3 as the kernel rounds it) within its bound for
 * the GPU's FP8 wgmma sums (docs/checks.md, "ikbo_fa in FP8"; tests/test_ikbo_fa_fp8.c
 * checks the same way), at FP8_SAMPLE query rows spread over every candidate and every
 * position of a 64-row block, both heads (the reference in double takes about 2 ms a row
 * and head at S = 2048 on a core: the whole headline would take minutes of all cores);
 * an element NaN anywhere (one left unwritten: the output is poisoned first) fails too.  Its difference from the f16
 * kernel is P's rounding to e4m3 (2^-4 relative a P) and the FP8 sums, not the inputs,
 * which the two kernels share.  Timing: time_rounds (bench/contenders.c): 5 rounds, each
 * running the FP8 and the f16 launch 20 times after L2 flushes, the median of the
 * rounds' medians.
 */
#include "contenders.h"
#include "fa_ref.h"
#include "gpu.h"
#include "ikbo_fa.h"
#include "ikbo_lce.h" /* ik_mapping */
#include "rt.h"
#include "../tune/tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DIE(...)                                                                                    \
    do {                                                                                            \
        fprintf(stderr, "bench_ikbo_fa: " __VA_ARGS__);                                             \
        fprintf(stderr, "\n");                                                                      \
        exit(2);                                                                                    \
    } while (0)

typedef struct fa_case {
    int64_t B, U, S, H, D, nseed;
    int shuffle, varlen, bf16;
} fa_case;

static int failures;
static int bound_stats; /* --bound-stats */
/* --lowreuse: no materialized baseline; each row's time against the roofline: the larger
 * of the bytes of Q, K, V and O at the copy bandwidth measured at the start of the run and
 * the FLOPs at the tensor cores' peak */
static int lowreuse;
static int untuned; /* neither --config nor --tune: each shape's untuned config (loom_ikbo_fa_untuned_config) */
static double copy_gbs;
static int refused, below; /* --lowreuse rows the C API refused, and rows under 0.70 of the roofline */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Per-user lengths: uniform in [S/8, S]. */
static void lengths(const fa_case *c, int32_t *lens, uint64_t seed)
{
    for (int64_t u = 0; u < c->U; u++)
        lens[u] = (int32_t)(c->S / 8 + (int64_t)(tpl_rand(&seed) % (uint64_t)(c->S - c->S / 8 + 1)));
}

typedef struct launch_ctx {
    loom_ikbo_fa *p;
    loom_buffer *q, *k, *v, *out;
    loom_buffer *scales; /* FP8: [3, H] f32 (v is then Vt); NULL for f16 and bf16 */
    /* the materialized baseline: the gather before the attention */
    fa_ref *ref;
    loom_buffer *ksrc, *vsrc, *map;
    int64_t B, slab;
} launch_ctx;

static loom_status fa_once(void *c)
{
    launch_ctx *x = c;
    return loom_ikbo_fa_launch_scaled(x->p, x->q, x->k, x->v, x->scales, x->out);
}

static loom_status gather_and_fa(void *c)
{
    launch_ctx *x = c;
    char err[512];
    loom_status st;
    if ((st = faref_gather(x->ref, rt_buffer_dptr(x->ksrc), rt_buffer_dptr(x->map), rt_buffer_dptr(x->k), x->B,
                           x->slab, err, sizeof err)) != LOOM_OK ||
        (st = faref_gather(x->ref, rt_buffer_dptr(x->vsrc), rt_buffer_dptr(x->map), rt_buffer_dptr(x->v), x->B,
                           x->slab, err, sizeof err)) != LOOM_OK)
        fprintf(stderr, "bench_ikbo_fa: gather: %s\n", err);
    return st != LOOM_OK ? st : fa_once(c);
}

static loom_buffer *buf(loom_runtime *rt, size_t bytes)
{
    loom_buffer *b = loom_buffer_create(rt, bytes ? bytes : 1);
    if (!b)
        DIE("allocating %zu bytes: %s", bytes, loom_runtime_error(rt));
    return b;
}

/* The check by the error model (docs/checks.md), on the device: support/fa_ref.c's
 * faref_model (the ikbo_fa template's device reference and bound kernels, the tuner's
 * comparison with that bound), shared with tests/test_ikbo_fa.c. */
static void model_open(faref_model *m, loom_runtime *rt, fa_ref *fr, const fa_case *c, loom_buffer *q,
                       loom_buffer *k, loom_buffer *v, const int32_t *map, const int32_t *lens)
{
    loom_ikbo_fa_shape sh = {c->B, c->U, c->S, c->H, c->D, c->nseed, c->bf16 ? LOOM_BF16 : LOOM_F16, c->varlen,
                             c->bf16 ? LOOM_BF16 : LOOM_F16};
    char err[512];
    if (faref_model_open(rt, fr, &sh, q, k, v, map, lens, m, err, sizeof err) != LOOM_OK)
        DIE("the device reference: %s", err);
}

/* Check out against the model: a verdict, and failures counted. */
static void check(faref_model *m, loom_buffer *out, char *verdict, size_t n)
{
    double two[2];
    char err[512];
    if (faref_model_check(m, out, &two[0], &two[1], err, sizeof err) != LOOM_OK)
        DIE("compare: %s", err);
    bool ok = two[0] == 0;
    failures += !ok;
    int w = snprintf(verdict, n, "%s: %.0f past their bound, max |err| %.3g", ok ? "ok" : "FAIL", two[0], two[1]);
    if (bound_stats && w > 0 && (size_t)w < n && m->n < INT32_MAX) { /* the spread */
        size_t e = loom_dtype_size(m->dt);
        void *o = malloc((size_t)m->n * e), *r = malloc((size_t)m->n * e);
        float *b = malloc((size_t)m->n * 4);
        double *q = malloc((size_t)m->n * sizeof *q), *x = malloc((size_t)m->n * sizeof *x);
        if (!o || !r || !b || !q || !x || loom_buffer_download(out, o, (size_t)m->n * e) ||
            loom_buffer_download(m->ref, r, (size_t)m->n * e) || loom_buffer_download(m->bound, b, (size_t)m->n * 4))
            DIE("bound stats: %s", loom_runtime_error(m->rt));
        int64_t diff = 0;
        double emax = 0;
        for (int64_t i = 0; i < m->n; i++) {
            double d = fabs(tpl_get(o, m->dt, i) - tpl_get(r, m->dt, i));
            diff += d > 0;
            emax = fmax(emax, d);
            q[i] = b[i];
            x[i] = fabs(tpl_get(r, m->dt, i));
        }
        double bmed = tune_median(q, (int)m->n), bmax = q[m->n - 1], rmed = tune_median(x, (int)m->n);
        snprintf(verdict + w, n - (size_t)w, " [bound median %.3g, max %.3g; |ref| median %.3g; %lld of %lld differ, "
                 "max |err| %.3g]", bmed, bmax, rmed, (long long)diff, (long long)m->n, emax);
        free(o), free(r), free(b), free(q), free(x);
    }
}

static void one_case(loom_runtime *rt, fa_ref *fr, nvref_gemm *fill, const fa_case *c, const loom_ikbo_fa_config *cfg,
                     int do_check)
{
    rt_gpu *g = rt_runtime_gpu(rt);
    loom_dtype dt = c->bf16 ? LOOM_BF16 : LOOM_F16;
    size_t e = loom_dtype_size(dt);
    int64_t qn = c->B * c->nseed * c->H * c->D, kn = c->U * c->S * c->H * c->D;
    char err[1024];
    loom_buffer *q = buf(rt, (size_t)qn * e), *k = buf(rt, (size_t)kn * e), *v = buf(rt, (size_t)kn * e);
    loom_buffer *out = buf(rt, (size_t)qn * e), *mapb = buf(rt, (size_t)c->B * 4), *lensb = buf(rt, (size_t)c->U * 4);
    if (nvref_gemm_fill(fill, rt_buffer_dptr(q), dt, qn, 1, -1, 1, err, sizeof err) ||
        nvref_gemm_fill(fill, rt_buffer_dptr(k), dt, kn, 2, -1, 1, err, sizeof err) ||
        nvref_gemm_fill(fill, rt_buffer_dptr(v), dt, kn, 3, -1, 1, err, sizeof err))
        DIE("fill: %s", err);
    int32_t *map = malloc((size_t)c->B * 4), *lens = malloc((size_t)c->U * 4);
    if (!map || !lens)
        DIE("out of host memory");
    ik_mapping(c->B, c->U, c->shuffle, 7, map); /* b * U / B, shuffled on request */
    lengths(c, lens, 11);
    double keys = 0; /* sum over candidates of their user's keys */
    for (int64_t b = 0; b < c->B; b++)
        keys += (double)(c->varlen ? lens[map[b]] : c->S);
    double flops = 4.0 * (double)c->H * (double)c->nseed * (double)c->D * keys;
    if (loom_buffer_upload(mapb, map, (size_t)c->B * 4) || loom_buffer_upload(lensb, lens, (size_t)c->U * 4))
        DIE("upload: %s", loom_runtime_error(rt));

    loom_ikbo_fa_shape sh = {c->B, c->U, c->S, c->H, c->D, c->nseed, dt, c->varlen, dt};
    loom_ikbo_fa_config dcfg;
    if (untuned) { /* the C API's untuned config for the shape */
        dcfg = loom_ikbo_fa_untuned_config(&sh);
        cfg = &dcfg;
    } else if (cfg && cfg->bn != c->D) { /* a tile of D keys (the C API's default for D=64: 4 stages) */
        dcfg = *cfg;
        dcfg.bn = (int)c->D;
        dcfg.stages = c->D == 64 ? 4 : dcfg.stages;
        cfg = &dcfg;
    }
    loom_ikbo_fa *p;
    if (loom_ikbo_fa_prepare(rt, &sh, cfg, &p) != LOOM_OK) {
        if (!lowreuse)
            DIE("prepare: %s", loom_runtime_error(rt));
        printf("%5lld %5lld %6lld %2lld %4lld %4lld REFUSED: %s\n", (long long)c->B, (long long)c->U, (long long)c->S,
               (long long)c->H, (long long)c->D, (long long)c->nseed, loom_runtime_error(rt));
        refused++;
        goto release;
    }
    double t0 = now_ms();
    if (loom_ikbo_fa_set_mapping(p, map, c->varlen ? lens : NULL) != LOOM_OK)
        DIE("set_mapping: %s", loom_runtime_error(rt));
    double plan_ms = now_ms() - t0;
    launch_ctx x = {p, q, k, v, out, NULL, fr, NULL, NULL, NULL, 0, 0};
    faref_model mdl = {0};
    char verdict[256] = "not checked";
    if (do_check) {
        model_open(&mdl, rt, fr, c, q, k, v, map, lens);
        if (loom_buffer_fill(out, 0xff) || loom_ikbo_fa_run(p, q, k, v, mapb, c->varlen ? lensb : NULL, out))
            DIE("run: %s", loom_runtime_error(rt));
        check(&mdl, out, verdict, sizeof verdict);
    }
    double ms = 0;
    if (loom_time_work(rt, fa_once, &x, 3, 20, &ms) != LOOM_OK)
        DIE("timing: %s", loom_runtime_error(rt));

    /* the materialized broadcast: K_b, V_b [B * S, H, D] and the attention at U = B */
    double mat_ms = NAN, nog_ms = NAN;
    size_t kb = (size_t)(c->B * c->S * c->H * c->D) * e;
    char mverdict[384] = "";
    if (lowreuse) { /* the roofline instead of the materialized baseline */
        /* memory: the bytes of Q, K, V and O at the copy bandwidth; compute: the FLOPs at the
         * dense f16/bf16 tensor peak (4096 FLOP a clock an SM on sm_90, at the clock the
         * driver reports, its highest); the roofline is the larger */
        const rt_gpu_props *gp = rt_gpu_properties(g);
        double bytes = (double)e * (2.0 * (double)qn + 2.0 * (double)kn), mem_ms = bytes / (copy_gbs * 1e6);
        double peak = (double)gp->sm_count * 4096.0 * (double)gp->clock_khz * 1e3; /* FLOP/s */
        double flop_ms = peak > 0 ? flops / peak * 1e3 : 0, floor_ms = fmax(mem_ms, flop_ms), roof = floor_ms / ms;
        below += roof < 0.70;
        snprintf(mverdict, sizeof mverdict,
                 "no materialized baseline (--lowreuse); roofline %.4f ms (memory %.4f, compute %.4f at %.0f TF/s): "
                 "%.2f of it%s; %s", floor_ms, mem_ms, flop_ms, peak * 1e-12, roof, roof < 0.70 ? " (BELOW 0.70)" : "",
                 loom_ikbo_fa_describe(p));
        goto print;
    }
    if (!c->varlen && 2 * kb < rt_gpu_properties(g)->total_mem / 3) {
        loom_ikbo_fa_shape bs = {c->B, c->B, c->S, c->H, c->D, c->nseed, dt, 0, dt};
        loom_ikbo_fa *pb;
        if (loom_ikbo_fa_prepare(rt, &bs, cfg, &pb) != LOOM_OK) { /* e.g. past 32-bit offsets: no baseline */
            snprintf(mverdict, sizeof mverdict, "no materialized baseline: %s", loom_runtime_error(rt));
            goto print;
        }
        int32_t *id = malloc((size_t)c->B * 4);
        if (!id)
            DIE("out of host memory");
        for (int64_t b = 0; b < c->B; b++)
            id[b] = (int32_t)b;
        loom_buffer *kbuf = buf(rt, kb), *vbuf = buf(rt, kb);
        if (loom_ikbo_fa_set_mapping(pb, id, NULL) != LOOM_OK)
            DIE("set_mapping (materialized): %s", loom_runtime_error(rt));
        launch_ctx y = {pb, q, kbuf, vbuf, out, NULL, fr, k, v, mapb, c->B, (int64_t)(c->S * c->H * c->D * (int64_t)e)};
        if (do_check) {
            if (loom_buffer_fill(out, 0xff) || gather_and_fa(&y))
                DIE("materialized: %s", loom_runtime_error(rt));
            check(&mdl, out, mverdict, sizeof mverdict);
        }
        if (loom_time_work(rt, gather_and_fa, &y, 3, 20, &mat_ms) != LOOM_OK ||
            loom_time_work(rt, fa_once, &y, 3, 20, &nog_ms) != LOOM_OK)
            DIE("timing (materialized): %s", loom_runtime_error(rt));
        loom_buffer_destroy(kbuf), loom_buffer_destroy(vbuf);
        loom_ikbo_fa_destroy(pb);
        free(id);
    }
print:
    printf("%5lld %5lld %6lld %2lld %4lld %4lld %-4s %-8s %-6s | %8.4f %6.1f | %8.4f %6.1f %5.2fx | %8.4f %5.2fx | %6.3f | "
           "%s%s%s%s\n",
           (long long)c->B, (long long)c->U, (long long)c->S, (long long)c->H, (long long)c->D, (long long)c->nseed,
           c->bf16 ? "bf16" : "f16", c->shuffle ? "shuffled" : "sorted", c->varlen ? "varlen" : "-", ms,
           flops / ms / 1e9, mat_ms, flops / mat_ms / 1e9, mat_ms / ms, nog_ms, nog_ms / ms, plan_ms, verdict,
           *mverdict ? "; " : "", *mverdict && strncmp(mverdict, "no ", 3) ? "materialized " : "", mverdict);
    fflush(stdout);
    if (do_check)
        faref_model_close(&mdl);
    loom_ikbo_fa_destroy(p);
release:;
    loom_buffer *bs_[] = {q, k, v, out, mapb, lensb};
    for (size_t i = 0; i < sizeof bs_ / sizeof bs_[0]; i++)
        loom_buffer_destroy(bs_[i]);
    free(map), free(lens);
}

/* Issue 37's low-reuse sweep: candidates that share their user with few others (B/U in
 * 1, 2, 4), so K and V are read about once a candidate and bytes, not FLOPs, bound the
 * time.  B=512 candidates; ratio, D, H, n_seed and S each moved from the base (ratio 1,
 * D=128, H=2, n_seed=64, S=1024), plus the corners; --lowreuse-all: every combination
 * (384 rows).  Every row checked by the model, its time against the memory roofline. */
static void lowreuse_sweep(loom_runtime *rt, fa_ref *fr, nvref_gemm *fill, const loom_ikbo_fa_config *fc, int all)
{
    size_t n = (size_t)1 << 30;
    loom_buffer *a = buf(rt, n), *b = buf(rt, n);
    double ms = 0;
    if (loom_buffer_fill(a, 0x3c) || loom_time_copy(rt, b, a, n, 5, 30, &ms) != LOOM_OK || ms <= 0)
        DIE("the copy: %s", loom_runtime_error(rt));
    loom_buffer_destroy(a), loom_buffer_destroy(b);
    copy_gbs = 2.0 * (double)n / ms * 1e-6;
    printf("== low reuse (issue 37): copy bandwidth %.0f GB/s (1 GiB read, 1 GiB written); roofline = the larger of "
           "the bytes of Q, K, V, O at it and the FLOPs at the tensor peak\n", copy_gbs);
    static const int64_t ratio[] = {1, 2, 4}, dd[] = {64, 128}, hh[] = {1, 2, 4, 8}, ns[] = {16, 32, 64, 128},
                         ss[] = {500, 1024, 2048, 4096};
    for (int ir = 0; ir < 3; ir++)
        for (int id = 0; id < 2; id++)
            for (int ih = 0; ih < 4; ih++)
                for (int in = 0; in < 4; in++)
                    for (int is = 0; is < 4; is++) {
                        /* the base: ratio 1, D=128, H=2, n_seed=64, S=1024 (indices 0, 1, 1, 2, 1) */
                        int moved = (ir != 0) + (id != 1) + (ih != 1) + (in != 2) + (is != 1);
                        int corner = (ir == 0 || ir == 2) && (ih == 0 || ih == 3) && (in == 0 || in == 3) &&
                                     (is == 0 || is == 3) && id == 1;
                        if (!all && moved > 1 && !corner)
                            continue;
                        fa_case c = {512, 512 / ratio[ir], ss[is], hh[ih], dd[id], ns[in], 0, 0, 0};
                        one_case(rt, fr, fill, &c, fc, 1);
                    }
    printf("low reuse: %d rows under 0.70 of the roofline, %d refused\n", below, refused);
}

/* ---------------------------------------------------------------- FP8 (--fp8) */

enum { FP8_SAMPLE = 4096, FP8_ROUNDS = 5, FP8_REPS = 20 }; /* FP8_SAMPLE: a row in 32 at the headline */

/* Issue 38's targets (item 5), TFLOP/s at the headline; 0 at other shapes. */
static double fp8_target(const fa_case *c)
{
    bool head = c->B == 2048 && c->U == 32 && c->H == 2 && c->D == 128 && c->nseed == 64 && !c->varlen;
    return !head ? 0 : c->S == 1024 ? 700 : c->S == 2048 ? 850 : 0;
}

/* Case c in e4m3 (out f16), for the references (they read no config but the 128-key tiles). */
static fa_spec fp8_spec_of(const fa_case *c)
{
    return (fa_spec){.B = c->B, .U = c->U, .S = c->S, .H = c->H, .D = c->D, .nseed = c->nseed, .dt = LOOM_E4M3,
                     .varlen = c->varlen, .odt = LOOM_F16, .vtrans = 1, .bn = 128};
}

/* An FP8 row's inputs on the host: e4m3 Q [rows, H, D], K [U * S, H, D], Vt [U, H, D, S];
 * the same values in f16 for the f16 kernel (V untransposed); scales [3, H]; the mapping
 * and the lengths (S each without varlen). */
typedef struct fp8_host {
    uint8_t *q, *k, *vt;
    uint16_t *q16, *k16, *v16;
    float *scales;
    int32_t *map, *lens;
} fp8_host;

static fp8_host fp8_host_make(const fa_spec *s, const fa_case *c)
{
    int64_t qn = fa_rows(s) * s->H * s->D, kn = s->U * s->S * s->H * s->D;
    fp8_host h = {malloc((size_t)qn), malloc((size_t)kn), malloc((size_t)kn), malloc((size_t)qn * 2),
                  malloc((size_t)kn * 2), malloc((size_t)kn * 2), malloc((size_t)(3 * s->H) * 4),
                  malloc((size_t)s->B * 4), malloc((size_t)s->U * 4)};
    if (!h.q || !h.k || !h.vt || !h.q16 || !h.k16 || !h.v16 || !h.scales || !h.map || !h.lens)
        DIE("out of host memory");
    uint64_t seed = 5;
    tpl_fill(h.q, LOOM_E4M3, qn, -1, 1, &seed);
    tpl_fill(h.k, LOOM_E4M3, kn, -1, 1, &seed);
    tpl_fill(h.vt, LOOM_E4M3, kn, -1, 1, &seed);
    for (int64_t x = 0; x < s->H; x++) /* at most 3 significant bits: e4m3 times them is exact in f16 */
        h.scales[x] = x % 2 ? 1.25f : 0.75f, h.scales[s->H + x] = 1.5f, h.scales[2 * s->H + x] = x % 2 ? 1.25f : 0.5f;
    ik_mapping(c->B, c->U, c->shuffle, 7, h.map);
    if (c->varlen)
        lengths(c, h.lens, 11);
    else
        for (int64_t u = 0; u < c->U; u++)
            h.lens[u] = (int32_t)c->S;
    fa_fp8_dequant(s, h.q, h.k, h.vt, h.scales, LOOM_F16, h.q16, h.k16, h.v16);
    return h;
}

static void fp8_host_free(fp8_host *h)
{
    free(h->q), free(h->k), free(h->vt), free(h->q16), free(h->k16), free(h->v16), free(h->scales), free(h->map),
        free(h->lens);
}

/* out (f16, [rows, H, D]) at n query rows, both heads, against fa_fp8_reference within its
 * bound (fp8_sums: the GPU's FP8 wgmma sums; else the interpreter's f32 sums): the rows
 * i * stride + (37 i) mod stride, so every part of the mapping and every position of a
 * 64-row block is sampled (n = all rows: every element).  Returns the elements past their
 * bound (NaN included); *worst the largest |err| / bound, *checked the elements. */
static int64_t fp8_sample_check(const fa_spec *s, const fp8_host *h, const uint16_t *out, int64_t n, bool fp8_sums,
                                double *worst, int64_t *checked)
{
    int64_t rows = fa_rows(s), HD = s->H * s->D;
    n = n < rows ? n : rows;
    int64_t stride = rows / n;
    fa_spec s1 = *s; /* the sampled rows as candidates of one row each */
    s1.B = n, s1.nseed = 1;
    uint8_t *q1 = malloc((size_t)(n * HD));
    int32_t *map1 = malloc((size_t)n * 4);
    int64_t *at = malloc((size_t)n * sizeof *at);
    uint16_t *ref = malloc((size_t)(n * HD) * 2);
    double *bnd = malloc((size_t)(n * HD) * sizeof *bnd);
    if (!q1 || !map1 || !at || !ref || !bnd)
        DIE("out of host memory");
    for (int64_t i = 0; i < n; i++) {
        at[i] = i * stride + (37 * i) % stride;
        memcpy(q1 + i * HD, h->q + at[i] * HD, (size_t)HD);
        map1[i] = h->map[at[i] / s->nseed];
    }
    fa_fp8_reference(&s1, q1, h->k, h->vt, h->scales, map1, s->varlen ? h->lens : NULL, fp8_sums, ref, bnd);
    int64_t bad = 0;
    *worst = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < HD; j++) {
            double got = tpl_get(out, LOOM_F16, at[i] * HD + j), want = tpl_get(ref, LOOM_F16, i * HD + j);
            double d = fabs(got - want), b = bnd[i * HD + j];
            bad += !(d <= b);
            *worst = fmax(*worst, d == 0 ? 0 : d <= b || d > b ? d / b : INFINITY); /* NaN: infinite */
        }
    *checked = n * HD;
    free(q1), free(map1), free(at), free(ref), free(bnd);
    return bad;
}

/* a against b (n elements of f16 and bdt): the relative RMS sqrt(sum (a - b)^2 / sum b^2)
 * and the largest |a - b|. */
static void diff_stats(const uint16_t *a, const void *b, loom_dtype bdt, int64_t n, double *rel_rms, double *maxabs)
{
    double d2 = 0, b2 = 0;
    *maxabs = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = tpl_get(a, LOOM_F16, i), y = tpl_get(b, bdt, i);
        d2 += (x - y) * (x - y), b2 += y * y;
        *maxabs = fmax(*maxabs, isnan(x - y) ? INFINITY : fabs(x - y));
    }
    *rel_rms = sqrt(d2 / fmax(b2, 1e-300));
}

/* One FP8 row: the e4m3 kernel and the f16 kernel on the same values, both through the C
 * API, checked, compared and timed in the same interleaved rounds. */
static void fp8_case(loom_runtime *rt, fa_ref *fr, const fa_case *c, const loom_ikbo_fa_config *fc)
{
    fa_spec s = fp8_spec_of(c);
    int64_t qn = fa_rows(&s) * s.H * s.D, kn = s.U * s.S * s.H * s.D;
    fp8_host h = fp8_host_make(&s, c);
    loom_buffer *q8 = buf(rt, (size_t)qn), *k8 = buf(rt, (size_t)kn), *vt8 = buf(rt, (size_t)kn);
    loom_buffer *sc = buf(rt, (size_t)(3 * s.H) * 4), *o8 = buf(rt, (size_t)qn * 2), *o16 = buf(rt, (size_t)qn * 2);
    loom_buffer *q16 = buf(rt, (size_t)qn * 2), *k16 = buf(rt, (size_t)kn * 2), *v16 = buf(rt, (size_t)kn * 2);
    if (loom_buffer_upload(q8, h.q, (size_t)qn) || loom_buffer_upload(k8, h.k, (size_t)kn) ||
        loom_buffer_upload(vt8, h.vt, (size_t)kn) || loom_buffer_upload(sc, h.scales, (size_t)(3 * s.H) * 4) ||
        loom_buffer_upload(q16, h.q16, (size_t)qn * 2) || loom_buffer_upload(k16, h.k16, (size_t)kn * 2) ||
        loom_buffer_upload(v16, h.v16, (size_t)kn * 2))
        DIE("upload: %s", loom_runtime_error(rt));
    double keys = 0; /* as the f16 rows count them */
    for (int64_t b = 0; b < c->B; b++)
        keys += (double)h.lens[h.map[b]];
    double flops = 4.0 * (double)c->H * (double)c->nseed * (double)c->D * keys;

    loom_ikbo_fa_shape sh16 = {.B = c->B, .U = c->U, .S = c->S, .H = c->H, .D = c->D, .n_seed = c->nseed,
                               .dtype = LOOM_F16, .varlen = c->varlen, .odtype = LOOM_F16};
    loom_ikbo_fa_shape sh8 = sh16;
    sh8.dtype = LOOM_E4M3;
    loom_ikbo_fa_config cfg16, cfg8;
    if (untuned) /* each type's untuned config for the shape */
        cfg16 = loom_ikbo_fa_untuned_config(&sh16), cfg8 = loom_ikbo_fa_untuned_config(&sh8);
    else if (fc) { /* f16: a tile of D keys as one_case takes it; e4m3 builds BN=128 only */
        cfg16 = cfg8 = *fc;
        cfg16.bn = (int)c->D, cfg16.stages = c->D == 64 ? 4 : cfg16.stages;
        cfg8.bn = 128;
    }
    loom_ikbo_fa *p8, *p16;
    if (loom_ikbo_fa_prepare(rt, &sh8, fc ? &cfg8 : NULL, &p8) != LOOM_OK)
        DIE("FP8 prepare: %s", loom_runtime_error(rt));
    if (loom_ikbo_fa_prepare(rt, &sh16, fc ? &cfg16 : NULL, &p16) != LOOM_OK) {
        if (!fc) /* an FP8-only config (stages=4 at D=128): the f16 row takes its own untuned one */
            DIE("f16 prepare: %s", loom_runtime_error(rt));
        printf("FP8   the f16 kernel refuses --config (%s): it runs its untuned config\n", loom_runtime_error(rt));
        cfg16 = loom_ikbo_fa_untuned_config(&sh16);
        if (loom_ikbo_fa_prepare(rt, &sh16, &cfg16, &p16) != LOOM_OK)
            DIE("f16 prepare: %s", loom_runtime_error(rt));
    }
    const int32_t *lens = c->varlen ? h.lens : NULL;
    if (loom_ikbo_fa_set_mapping(p8, h.map, lens) != LOOM_OK || loom_ikbo_fa_set_mapping(p16, h.map, lens) != LOOM_OK)
        DIE("set_mapping: %s", loom_runtime_error(rt));
    launch_ctx x8 = {.p = p8, .q = q8, .k = k8, .v = vt8, .out = o8, .scales = sc};
    launch_ctx x16 = {.p = p16, .q = q16, .k = k16, .v = v16, .out = o16};

    /* the outputs (poisoned first), the f16 one checked by the model, whose reference is
     * the f32 one here */
    if (loom_buffer_fill(o8, 0xff) || loom_buffer_fill(o16, 0xff) || fa_once(&x8) || fa_once(&x16))
        DIE("run: %s", loom_runtime_error(rt));
    faref_model mdl = {0};
    char v16s[256];
    fa_case c16 = *c;
    c16.bf16 = 0;
    model_open(&mdl, rt, fr, &c16, q16, k16, v16, h.map, h.lens);
    check(&mdl, o16, v16s, sizeof v16s);
    uint16_t *ho8 = malloc((size_t)qn * 2), *ho16 = malloc((size_t)qn * 2), *href = malloc((size_t)qn * 2);
    if (!ho8 || !ho16 || !href || loom_buffer_download(o8, ho8, (size_t)qn * 2) ||
        loom_buffer_download(o16, ho16, (size_t)qn * 2) || loom_buffer_download(mdl.ref, href, (size_t)qn * 2))
        DIE("download: %s", loom_runtime_error(rt));
    faref_model_close(&mdl);
    double worst, t0 = now_ms();
    int64_t checked, bad = fp8_sample_check(&s, &h, ho8, FP8_SAMPLE, true, &worst, &checked);
    double check_ms = now_ms() - t0;
    int64_t nan8 = 0; /* anywhere: an element left unwritten stays NaN (the output was poisoned) */
    for (int64_t i = 0; i < qn; i++)
        nan8 += !isfinite(tpl_get(ho8, LOOM_F16, i));
    failures += bad > 0 || nan8 > 0;
    double rr8_16, mx8_16, rr8_ref, mx8_ref, rr16_ref, mx16_ref;
    diff_stats(ho8, ho16, LOOM_F16, qn, &rr8_16, &mx8_16);
    diff_stats(ho8, href, LOOM_F16, qn, &rr8_ref, &mx8_ref);
    diff_stats(ho16, href, LOOM_F16, qn, &rr16_ref, &mx16_ref);

    work ws[2] = {{.name = "FP8", .rt = rt, .n = 1, .s = {call_step(fa_once, &x8)}},
                  {.name = "f16", .rt = rt, .n = 1, .s = {call_step(fa_once, &x16)}}};
    if (time_rounds(rt, ws, 2, FP8_ROUNDS, FP8_REPS) != 0)
        DIE("timing the FP8 and f16 kernels");
    double tf8 = flops / ws[0].ms / 1e9, tf16 = flops / ws[1].ms / 1e9, target = fp8_target(c);
    char goal[64] = "no target at this shape";
    if (target > 0)
        snprintf(goal, sizeof goal, "target >= %.0f TF/s: %s", target, tf8 >= target ? "met" : "NOT MET");
    printf("FP8 B=%lld U=%lld S=%lld H=%lld D=%lld n_seed=%lld %s%s | f16 %.4f ms %6.1f TF/s | FP8 %.4f ms %6.1f TF/s "
           "(%.2fx f16) | %s\n",
           (long long)c->B, (long long)c->U, (long long)c->S, (long long)c->H, (long long)c->D, (long long)c->nseed,
           c->shuffle ? "shuffled" : "sorted", c->varlen ? " varlen" : "", ws[1].ms, tf16, ws[0].ms, tf8,
           ws[1].ms / ws[0].ms, goal);
    printf("FP8   config: FP8 %s | f16 %s\n", loom_ikbo_fa_describe(p8), loom_ikbo_fa_describe(p16));
    printf("FP8   error: FP8 vs f16 kernel: rel RMS %.3g, max |diff| %.3g; FP8 vs f32 ref: rel RMS %.3g, max |diff| "
           "%.3g; (f16 vs f32 ref: rel RMS %.3g, max |diff| %.3g)\n",
           rr8_16, mx8_16, rr8_ref, mx8_ref, rr16_ref, mx16_ref);
    printf("FP8   check: FP8 at %lld sampled elements vs fa_fp8_reference (P rounded as the kernel does; bound for FP8 "
           "wgmma sums, docs/checks.md): %s: %lld past their bound, worst |err|/bound %.3g (%.0f ms); %lld of %lld "
           "elements NaN or unwritten; f16 %s\n",
           (long long)checked, bad || nan8 ? "FAIL" : "ok", (long long)bad, worst, check_ms, (long long)nan8,
           (long long)qn, v16s);
    fflush(stdout);
    loom_ikbo_fa_destroy(p8), loom_ikbo_fa_destroy(p16);
    loom_buffer *all[] = {q8, k8, vt8, sc, o8, o16, q16, k16, v16};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        loom_buffer_destroy(all[i]);
    free(ho8), free(ho16), free(href);
    fp8_host_free(&h);
}

/* --fp8 without a GPU: the FP8 C API on the interpreter at a small odd shape (shuffled,
 * per-user lengths, n_seed 3, two 128-key tiles), every element against
 * fa_fp8_reference within its bound for f32 sums (the interpreter's), and its difference
 * from the f16 C API on the same values and from the exact attention (fa_reference, in
 * double) printed. */
static int fp8_interpreter_run(void)
{
    fa_case c = {5, 2, 208, 2, 128, 3, 1, 1, 0};
    fa_spec s = fp8_spec_of(&c), s16 = s;
    s16.dt = LOOM_F16, s16.vtrans = 0;
    int64_t qn = fa_rows(&s) * s.H * s.D, kn = s.U * s.S * s.H * s.D;
    fp8_host h = fp8_host_make(&s, &c);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_buffer *q8 = buf(rt, (size_t)qn), *k8 = buf(rt, (size_t)kn), *vt8 = buf(rt, (size_t)kn);
    loom_buffer *sc = buf(rt, (size_t)(3 * s.H) * 4), *o8 = buf(rt, (size_t)qn * 2), *o16 = buf(rt, (size_t)qn * 2);
    loom_buffer *q16 = buf(rt, (size_t)qn * 2), *k16 = buf(rt, (size_t)kn * 2), *v16 = buf(rt, (size_t)kn * 2);
    loom_buffer *mb = buf(rt, (size_t)c.B * 4), *lb = buf(rt, (size_t)c.U * 4);
    loom_ikbo_fa_shape sh = {.B = c.B, .U = c.U, .S = c.S, .H = c.H, .D = c.D, .n_seed = c.nseed,
                             .dtype = LOOM_E4M3, .varlen = 1, .odtype = LOOM_F16}, sh16 = sh;
    sh16.dtype = LOOM_F16;
    loom_ikbo_fa_config cfg = {128, 2, 8, 1, 0, 1, 1, 0, 0}; /* 8 CTAs: fewer programs to interpret */
    loom_ikbo_fa *p8 = NULL, *p16 = NULL;
    uint16_t *ho8 = malloc((size_t)qn * 2), *ho16 = malloc((size_t)qn * 2), *hex = malloc((size_t)qn * 2);
    if (!ho8 || !ho16 || !hex || loom_ikbo_fa_prepare(rt, &sh, &cfg, &p8) ||
        loom_ikbo_fa_prepare(rt, &sh16, &cfg, &p16) || loom_buffer_upload(q8, h.q, (size_t)qn) ||
        loom_buffer_upload(k8, h.k, (size_t)kn) || loom_buffer_upload(vt8, h.vt, (size_t)kn) ||
        loom_buffer_upload(sc, h.scales, (size_t)(3 * s.H) * 4) || loom_buffer_upload(q16, h.q16, (size_t)qn * 2) ||
        loom_buffer_upload(k16, h.k16, (size_t)kn * 2) || loom_buffer_upload(v16, h.v16, (size_t)kn * 2) ||
        loom_buffer_upload(mb, h.map, (size_t)c.B * 4) || loom_buffer_upload(lb, h.lens, (size_t)c.U * 4) ||
        loom_buffer_fill(o8, 0xff) || loom_buffer_fill(o16, 0xff) ||
        loom_ikbo_fa_run_scaled(p8, c.B, c.U, q8, k8, vt8, sc, mb, lb, o8) ||
        loom_ikbo_fa_run(p16, q16, k16, v16, mb, lb, o16) || loom_buffer_download(o8, ho8, (size_t)qn * 2) ||
        loom_buffer_download(o16, ho16, (size_t)qn * 2))
        DIE("interpreter (FP8): %s", loom_runtime_error(rt));
    fa_reference(&s16, h.q16, h.k16, h.v16, h.map, h.lens, hex);
    double worst, rr16, mx16, rrex, mxex;
    int64_t checked, bad = fp8_sample_check(&s, &h, ho8, fa_rows(&s), false, &worst, &checked);
    diff_stats(ho8, ho16, LOOM_F16, qn, &rr16, &mx16);
    diff_stats(ho8, hex, LOOM_F16, qn, &rrex, &mxex);
    printf("interpreter FP8 (%s): B=%lld U=%lld S=%lld H=%lld D=%lld n_seed=%lld shuffled, varlen: %s: %lld of %lld "
           "past their bound (fa_fp8_reference, f32 sums), worst |err|/bound %.3g; vs the f16 C API: rel RMS %.3g, "
           "max |diff| %.3g; vs the exact attention: rel RMS %.3g, max |diff| %.3g\n",
           loom_ikbo_fa_describe(p8), (long long)c.B, (long long)c.U, (long long)c.S, (long long)c.H,
           (long long)c.D, (long long)c.nseed, bad ? "FAIL" : "ok", (long long)bad, (long long)checked, worst, rr16,
           mx16, rrex, mxex);
    loom_ikbo_fa_destroy(p8), loom_ikbo_fa_destroy(p16);
    loom_buffer *all[] = {q8, k8, vt8, sc, o8, o16, q16, k16, v16, mb, lb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        loom_buffer_destroy(all[i]);
    loom_runtime_destroy(rt);
    free(ho8), free(ho16), free(hex);
    fp8_host_free(&h);
    return bad ? 1 : 0;
}

/* Without a GPU: the C API on the interpreter at small odd shapes, against the CPU
 * reference in double. */
static int interpreter_run(void)
{
    const fa_case cases[] = {{5, 2, 50, 3, 64, 3, 1, 1, 0}, {4, 3, 200, 1, 64, 64, 0, 0, 0}};
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const fa_case *c = &cases[i];
        fa_spec s = {.B = c->B, .U = c->U, .S = c->S, .H = c->H, .D = c->D, .nseed = c->nseed, .dt = LOOM_F16,
                     .varlen = c->varlen, .bn = 64, .stages = 2, .ctas = 8, .sched = 1, .turns = 0, .overlap = 1,
                     .tmastore = 1, .xunit = 0, .horder = 0};
        int64_t qn = c->B * c->nseed * c->H * c->D, kn = c->U * c->S * c->H * c->D;
        uint16_t *hq = malloc((size_t)qn * 2), *hk = malloc((size_t)kn * 2), *hv = malloc((size_t)kn * 2);
        uint16_t *ho = malloc((size_t)qn * 2), *hr = malloc((size_t)qn * 2);
        int32_t map[8], lens[8];
        uint64_t seed = 5;
        tpl_fill(hq, LOOM_F16, qn, -1, 1, &seed);
        tpl_fill(hk, LOOM_F16, kn, -1, 1, &seed);
        tpl_fill(hv, LOOM_F16, kn, -1, 1, &seed);
        ik_mapping(c->B, c->U, c->shuffle, 3, map);
        lengths(c, lens, 4);
        fa_reference(&s, hq, hk, hv, map, c->varlen ? lens : NULL, hr);
        loom_ikbo_fa_shape sh = {c->B, c->U, c->S, c->H, c->D, c->nseed, LOOM_F16, c->varlen, LOOM_F16};
        loom_ikbo_fa_config cfg = {64, 2, 8, 1, 0, 1, 1, 0, 0};
        loom_ikbo_fa *p;
        loom_buffer *q = buf(rt, (size_t)qn * 2), *k = buf(rt, (size_t)kn * 2), *v = buf(rt, (size_t)kn * 2);
        loom_buffer *o = buf(rt, (size_t)qn * 2), *mb = buf(rt, sizeof map), *lb = buf(rt, sizeof lens);
        if (loom_ikbo_fa_prepare(rt, &sh, &cfg, &p) || loom_buffer_upload(q, hq, (size_t)qn * 2) ||
            loom_buffer_upload(k, hk, (size_t)kn * 2) || loom_buffer_upload(v, hv, (size_t)kn * 2) ||
            loom_buffer_upload(mb, map, sizeof map) || loom_buffer_upload(lb, lens, sizeof lens) ||
            loom_buffer_fill(o, 0xff) || loom_ikbo_fa_run(p, q, k, v, mb, c->varlen ? lb : NULL, o) ||
            loom_buffer_download(o, ho, (size_t)qn * 2))
            DIE("interpreter: %s", loom_runtime_error(rt));
        double worst = 0, *bnd = malloc((size_t)qn * sizeof *bnd);
        if (!bnd)
            DIE("out of host memory");
        fa_bound(&s, hq, hk, hv, map, c->varlen ? lens : NULL, hr, bnd); /* the error model */
        int64_t past = 0;
        for (int64_t j = 0; j < qn; j++) {
            double got = tpl_get(ho, LOOM_F16, j), want = tpl_get(hr, LOOM_F16, j);
            double r = fabs(got - want) / bnd[j];
            past += !(r <= 1);
            worst = isnan(got) ? INFINITY : r > worst ? r : worst;
        }
        free(bnd);
        printf("interpreter: B=%lld U=%lld S=%lld H=%lld D=%lld n_seed=%lld %s%s: %s: %lld past their bound, worst "
               "|err|/bound %.3g\n",
               (long long)c->B, (long long)c->U, (long long)c->S, (long long)c->H, (long long)c->D,
               (long long)c->nseed, c->shuffle ? "shuffled" : "sorted", c->varlen ? ", varlen" : "",
               past ? "FAIL" : "ok", (long long)past, worst);
        bad += past > 0;
        loom_ikbo_fa_destroy(p);
        loom_buffer *bs_[] = {q, k, v, o, mb, lb};
        for (size_t j = 0; j < sizeof bs_ / sizeof bs_[0]; j++)
            loom_buffer_destroy(bs_[j]);
        free(hq), free(hk), free(hv), free(ho), free(hr);
    }
    loom_runtime_destroy(rt);
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    fa_case head = {2048, 32, 1024, 2, 128, 64, 0, 0, 0}, custom = head;
    int sweep = 0, check_all = 0, have_shape = 0, tune = 0, have_cfg = 0, fp8 = 0;
    loom_ikbo_fa_config cfg = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sweep"))
            sweep = 1;
        else if (!strcmp(argv[i], "--check-all"))
            check_all = 1;
        else if (!strcmp(argv[i], "--bound-stats"))
            bound_stats = 1;
        else if (!strcmp(argv[i], "--tune"))
            tune = 1;
        else if (!strcmp(argv[i], "--fp8"))
            fp8 = 1;
        else if (!strcmp(argv[i], "--lowreuse"))
            lowreuse = 1;
        else if (!strcmp(argv[i], "--lowreuse-all"))
            lowreuse = 2;
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            for (char *t = strtok(argv[++i], ","); t; t = strtok(NULL, ",")) {
                long long v;
                char key[16];
                if (sscanf(t, "%15[^=]=%lld", key, &v) != 2)
                    DIE("bad --shape item '%s'", t);
                int64_t *f = !strcmp(key, "B") ? &custom.B : !strcmp(key, "U") ? &custom.U
                           : !strcmp(key, "S") ? &custom.S : !strcmp(key, "H") ? &custom.H
                           : !strcmp(key, "D") ? &custom.D : !strcmp(key, "n_seed") ? &custom.nseed : NULL;
                if (f)
                    *f = v;
                else if (!strcmp(key, "varlen"))
                    custom.varlen = (int)v;
                else if (!strcmp(key, "shuffle"))
                    custom.shuffle = (int)v;
                else if (!strcmp(key, "bf16"))
                    custom.bf16 = (int)v;
                else
                    DIE("unknown --shape key '%s' (B, U, S, H, D, n_seed, varlen, shuffle, bf16)", key);
            }
            have_shape = 1;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            const loom_template *t = loom_template_find("ikbo_fa");
            int64_t cv[LOOM_MAX_PARAMS];
            char why[256];
            if (loom_params_parse(t->config, t->nconfig, argv[++i], cv, why, sizeof why) != 0)
                DIE("--config: %s", why);
            cfg = fa_config_of(cv);
            have_cfg = 1;
        } else {
            fprintf(stderr, "usage: bench_ikbo_fa [--sweep] [--fp8] [--lowreuse | --lowreuse-all] [--check-all] [--bound-stats] [--tune] [--shape B=..,U=..,S=..,H=..,D=..,"
                            "n_seed=..,varlen=..,shuffle=..,bf16=..] [--config BN=..,stages=..,ctas=..,sched=..,turns=..]\n");
            return 2;
        }
    }
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        printf("bench_ikbo_fa: no GPU here (%s)\n", rt ? loom_runtime_error(rt) : "no runtime");
        loom_runtime_destroy(rt);
        int rc = fp8 && !sweep ? 0 : interpreter_run(); /* --fp8 alone: the FP8 rows alone */
        return fp8 ? fp8_interpreter_run() | rc : rc;
    }
    char err[1024];
    fa_ref *fr;
    nvref_gemm *fill;
    if (faref_open(rt_runtime_gpu(rt), &fr, err, sizeof err) != LOOM_OK ||
        nvref_gemm_open(rt_runtime_gpu(rt), &fill, err, sizeof err) != LOOM_OK)
        DIE("NVRTC reference: %s", err);
    /* the config: given, the tuner's (--tune), or the C API's default */
    const loom_ikbo_fa_config *fc = have_cfg ? &cfg : NULL;
    untuned = !have_cfg && !tune;
    if (untuned) /* (fc: what fp8_case starts from; one_case takes each shape's own) */
        cfg = loom_ikbo_fa_untuned_config(NULL), fc = &cfg;
    printf("IKBO flash attention on %s; config %s\n", loom_runtime_device_name(rt),
           untuned ? "untuned (loom_ikbo_fa_untuned_config: the defaults as the template's rule adapts them to each "
                     "shape)"
           : fc    ? "given"
                   : "tuned per shape");
    if (have_cfg)
        printf("config: BN=%d,stages=%d,ctas=%d,sched=%d,turns=%d,overlap=%d,tmastore=%d,xunit=%d,horder=%d\n",
               fc->bn, fc->stages, fc->ctas, fc->sched, fc->turns, fc->overlap, fc->tmastore, fc->xunit, fc->horder);
    printf("    B     U      S  H    D seed dt   mapping  lens   |  loom ms   TF/s | materialized ms TF/s  speedup | "
           "no-gather ms  x   | plan ms | check\n");
    if (lowreuse) {
        lowreuse_sweep(rt, fr, fill, fc, lowreuse == 2);
    } else if (have_shape) {
        if (!fp8)
            one_case(rt, fr, fill, &custom, fc, 1);
    } else if (!fp8 || sweep) { /* --fp8 alone: the FP8 rows alone */
        for (int64_t S = 1024; S <= 2048; S *= 2)
            for (int sh = 0; sh < 2; sh++) {
                fa_case c = head;
                c.S = S, c.shuffle = sh;
                one_case(rt, fr, fill, &c, fc, 1);
            }
    }
    if (sweep) {
        printf("== S sweep\n");
        for (int64_t S = 512; S <= 16384; S *= 2) {
            fa_case c = head;
            c.S = S;
            if (S != 1024 && S != 2048)
                one_case(rt, fr, fill, &c, fc, check_all || S <= 4096);
        }
        printf("== ratio B/U (S=1024)\n");
        const int64_t ratios[] = {1, 10, 1000};
        for (size_t i = 0; i < sizeof ratios / sizeof ratios[0]; i++)
            for (int sh = 0; sh < 2; sh++) {
                fa_case c = head;
                c.U = head.B / ratios[i] > 0 ? head.B / ratios[i] : 1;
                c.shuffle = sh;
                one_case(rt, fr, fill, &c, fc, check_all);
            }
        printf("== D=64, bf16, varlen (S=1024, 2048)\n");
        for (int64_t S = 1024; S <= 2048; S *= 2) {
            fa_case c = head;
            c.S = S, c.D = 64;
            one_case(rt, fr, fill, &c, fc, 1);
            c = head, c.S = S, c.bf16 = 1;
            one_case(rt, fr, fill, &c, fc, 1);
            c = head, c.S = S, c.varlen = 1;
            one_case(rt, fr, fill, &c, fc, 1);
            c.shuffle = 1;
            one_case(rt, fr, fill, &c, fc, 1);
        }
    }
    if (fp8 && !lowreuse) {
        printf("== FP8 (issue 38 item 5): e4m3 Q, K, Vt with per-head scales, out f16, through "
               "loom_ikbo_fa_launch_scaled; the f16 kernel on the same values; %d interleaved rounds of %d runs each "
               "(L2 flushed), the median of the rounds' medians\n", FP8_ROUNDS, FP8_REPS);
        if (have_shape)
            fp8_case(rt, fr, &custom, fc);
        else
            for (int64_t S = 1024; S <= 2048; S *= 2) {
                fa_case c = head;
                c.S = S;
                fp8_case(rt, fr, &c, fc);
            }
    }
    faref_close(fr);
    nvref_gemm_close(fill);
    loom_runtime_destroy(rt);
    return failures ? 1 : 0;
}
