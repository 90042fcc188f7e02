/*
 * bench_ikbo_lce.c -- IKBO linear compression on the GPU: every stage of the co-design
 * against two materialized-broadcast baselines, all measured in the same run.
 *
 *   bench_ikbo_lce                 the headline shape (B=1024, U=15, M=433, N=256, Ku=1178,
 *                                  Kc=866, f16), contiguous and shuffled users
 *   bench_ikbo_lce --sweep         also B from 512 to 4096 at ratio 70, and the ratio B/U from
 *                                  2 to 1000 at B=1024
 *   bench_ikbo_lce --grid          issue 21's grid of small, skinny and large shapes (one
 *                                  factor at a time, and the corners), with the default
 *                                  config (--tuned: the tuner's per shape): every stage, the
 *                                  framework and loom's pick, then a table (run_grid);
 *                                  --grid-rows FIRST-LAST runs part of it (from 1)
 *   bench_ikbo_lce --placement [--shape ...]   issue 40's experiment: two objects each of
 *                                  stages 3 and 4 timed on input sets allocated apart (and
 *                                  mixed: which input's placement matters), side by side
 *   bench_ikbo_lce --fp8 [--shape ...]   issue 38's FP8 LCE (dtype e4m3: fp8_bench) beside the
 *                                  f16 LCE at the headline (Ku, Kc padded to 16: 1184, 880),
 *                                  shuffled users: stages 3, 4 and auto of each, checked, the
 *                                  ratio f16 / e4m3 of each, and the FP8 output's error
 *                                  against the f16 kernel's (relative RMS, max)
 *   bench_ikbo_lce --shape B=..,U=..,M=..,N=..,Ku=..,Kc=..   one shape (contiguous, shuffled)
 *   --sets N                       the pick check's input sets (1 to 16, default 8), each set's
 *                                  time printed
 *   --objects N                    the pick check's objects a stage (1 to 4, default 1)
 *   --config BM=..,BN=..,stages=..,cwarps=..,ctas=..,consumers=..,trans=..   skip tuning, use this config
 *                                  (keys of the ikbo_lce template; those left out keep their defaults)
 *   without a GPU: every stage on the interpreter at a small odd shape, checked the same
 *   way, and each stage's kernels written as PTX (--ptx DIR, default build/ptx/ikbo_lce)
 *
 * The baselines.  "framework" is what PyTorch runs for the materialized broadcast with K
 * padded (../shared/BENCH.md's 1.45 ms on an H200):
 *   Eg = E_user.index_select(0, u)               [B, Ku, N]        a copy kernel
 *   E_cat = cat([Eg, E_cand], dim=1)             [B, Kpu + Kpc, N] a copy kernel
 *   out = cat([W_user, W_cand], dim=1) @ E_cat   cuBLAS strided batched, W's stride 0
 * (Kpu, Kpc: Ku, Kc padded to multiples of 8 with zero rows, and the weights with zero
 * columns; the weights' concatenation and E_cat's zero rows are written once, untimed).
 * The copies are CUDA C compiled with NVRTC, written for full bandwidth (16-byte vector
 * accesses, coalesced) so that they are no slower than PyTorch's; cuBLAS is loaded with
 * dlopen (support/cublas_dl.c), fp16 in and out, fp32 compute, its default algorithm.
 * Without cuBLAS the row says "skipped" and why.  The framework and the check below live in
 * bench/lce_common.c, which bench_serving shares.
 * Stage 0 "materialized" is loom's stronger version of it: one gather kernel writing E_cat,
 * then loom's gemm template over K = pad8(Ku + Kc).  Every stage prints its speed-up over
 * both.
 *
 * Each shape is tuned once (loom_tune over the ikbo_lce template, cached); every stage runs
 * with that tile config.  Correctness, on every shape, for the stages and the framework
 * alike, element by element by the error model (docs/checks.md): |out - ref32| within the
 * element's bound (ik_lce_bound), where ref32 = refc + refu comes from the NVRTC naive f32
 * GEMMs (support/nvrtc_ref.c) of the candidate and user halves, which also give the sums of
 * |w e| the bound scales with.  (Until session 18 the rule compared two maxima, max |out -
 * ref32| <= max |ref16 - ref32|, which said nothing about any one element and failed right
 * stages.)  Inputs are made on the device (the weights, a few hundred KB, on the host: the
 * C API takes host weights), and the check runs there too: a loom kernel (ik_check_kernel,
 * templates/ikbo_lce_registry.c) counts the elements past their bound and the worst |err| /
 * bound per block of a candidate and a second one (tune_reduce2_kernel) folds them, so 8
 * bytes come back, not the output.  (--check-all is the default and kept as a no-op.)  Timing: loom_time_work, median of runs each after an L2
 * flush.  Exit status 1 if any check fails.
 *
 * After the stages, a row "auto -> N": loom_ikbo_lce_prepare with LOOM_IKBO_AUTO and the
 * rows' config, its pick measured like the rows above, with its ratio to the framework,
 * then the prepare's time and what auto says it did (the stages' times when it timed them,
 * "cached" when the tuning cache had the shape: the shuffled run of a shape reads the
 * contiguous run's pick; LOOM_TUNE_FORCE=1 times every time).  Then "pick:": every stage
 * and auto's object timed side by side (pick_check: interleaved rounds, since rows timed
 * one after another drift more than stages differ), the picked stage's time over the
 * fastest stage's, PICK OFF where it is more than 1.02 (issue 40), and auto's object beside
 * its stage's row; the last line says whether every shape's pick was within 2%.
 */
#include "ikbo_lce.h"
#include "lce_common.h"
#include "../ops/lce_op.h"
#include "tpl_device.h"
#include "../tune/tune.h"
#include "../util/util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The elements past their bound (ik_lce_bound) and the worst |out - ref| / bound. */
static void check(const float *refc, const float *refu, const float *absc, const float *absu, const int32_t *map,
                  const uint16_t *out, const lce_shape *s, double *bad, double *worst)
{
    int64_t mn = s->M * s->N;
    double nb = 0, w = 0;
    for (int64_t b = 0; b < s->B; b++) {
        int64_t cu = (int64_t)map[b] * mn;
        for (int64_t i = 0; i < mn; i++) {
            double c = refc[b * mn + i], u = refu[cu + i];
            double bound = ik_lce_bound(c, u, absc[b * mn + i], absu[cu + i], s->Ku, s->Kc);
            double d = fabs(h2f(out[b * mn + i]) - (c + u));
            nb += !(d <= bound);
            w = isnan(d) ? INFINITY : fmax(w, d / bound);
        }
    }
    *bad = nb;
    *worst = w;
}

/* Check one run of work, which writes out, against r (when r->on) into verdict, then time
 * it: the stages and the framework are measured by this one function. */
static double measure(loom_runtime *rt, loom_status (*work)(void *), void *ctx, const lce_ref *r, loom_buffer *out,
                      const char *what, char *verdict, size_t n)
{
    verdict[0] = 0;
    if (r->on) {
        if (loom_buffer_fill(out, 0xff) || work(ctx))
            DIE("%s: %s", what, loom_runtime_error(rt));
        double bad, worst;
        lce_ref_check(rt, r, out, r->s.B, r->s.U, what, &bad, &worst);
        bool ok = bad == 0;
        failures += !ok;
        snprintf(verdict, n, "%s: %.0f past their bound, worst |err|/bound %.3g", ok ? "ok" : "FAIL", bad, worst);
    }
    double ms = 0;
    if (loom_time_work(rt, work, ctx, 3, 20, &ms) != LOOM_OK)
        DIE("timing %s: %s", what, loom_runtime_error(rt));
    return ms;
}

/* A --grid row: the framework against loom's pick (LOOM_IKBO_AUTO) at one shape. */
typedef struct grid_row {
    lce_shape s;
    double fw_ms, auto_ms;
    double pick; /* the picked stage's time over the fastest stage's, side by side (0: not measured) */
    int stage, ok;
} grid_row;

/* The stages 0 to 4, then LOOM_IKBO_AUTO's pick; pick_sets input sets (--sets, at most
 * PICK_PLACES) and pick_objs objects a stage (--objects, at most PICK_OBJS). */
enum { PICK_AUTO = LOOM_IKBO_PERSISTENT + 1, PICK_N, PICK_ROUNDS = 7, PICK_REPS = 5, PICK_PLACES = 16, PICK_OBJS = 4 };
#define PICK_WITHIN 1.02 /* issue 40: the pick within 2% of the fastest stage */
static int picks_off, pick_sets = 8, pick_objs = 1, sets_shown;

/* LOOM_IKBO_AUTO's pick against every stage, timed side by side: PICK_ROUNDS rounds, each a
 * loom_time_work of every prepared object on every input set in turn (runs after an L2
 * flush each, median; PICK_REPS of them, more for a short kernel so that a round covers
 * about 2 ms).  An object's time on a set is the median of its rounds' (rows timed one
 * after another drift more than stages differ), and a stage's time the mean over its
 * objects and the sets: where E_cand lies against an object's own buffers moves a stage by
 * up to 25% at a narrow N (--placement), an object slow on some sets and not on others, a
 * second object of the same stage on others, so one object on a few sets is a draw, not
 * the stage (bench/RESULTS.md, sessions 22 and 27); auto picks by the mean over its own
 * sets.  xs[j][i][o]: object o of stage i on set j (sets of the same values, allocated
 * apart; auto, i = PICK_AUTO, has its one object).  The pick's quality is its stage's row
 * over the fastest row (the same kernels that auto chose between); auto's own object (the
 * one a user runs) is printed beside its row.  Returns the pick's ratio (0 when not
 * measured) and counts one over 1.02. */
static double pick_check(loom_runtime *rt, run_ctx xs[][PICK_N][PICK_OBJS], int nsets, int picked,
                         const double *est_ms)
{
    static double t[PICK_N][PICK_OBJS][PICK_PLACES][PICK_ROUNDS];
    double med[PICK_N] = {0}, lo[PICK_N], hi[PICK_N];
    int reps[PICK_N], nobj[PICK_N];
    for (int i = 0; i < PICK_N; i++) {
        double est = est_ms[i < PICK_AUTO ? i : picked];
        reps[i] = est > 0 && 2.0 / est > PICK_REPS ? (2.0 / est < 50 ? (int)(2.0 / est) : 50) : PICK_REPS;
        for (nobj[i] = 0; nobj[i] < PICK_OBJS && xs[0][i][nobj[i]].p; nobj[i]++)
            ;
    }
    for (int r = 0; r < PICK_ROUNDS; r++)
        for (int j = 0; j < nsets; j++)
            for (int i = 0; i < PICK_N; i++)
                for (int o = 0; o < nobj[i]; o++)
                    if (loom_time_work(rt, run_once, &xs[j][i][o], r == 0 ? 1 : 0, reps[i], &t[i][o][j][r]) != LOOM_OK)
                        DIE("timing %s: %s", i == PICK_AUTO ? "auto" : "a stage", loom_runtime_error(rt));
    int fastest = -1;
    for (int i = 0; i < PICK_N; i++) {
        if (!nobj[i])
            continue;
        lo[i] = INFINITY, hi[i] = 0;
        for (int o = 0; o < nobj[i]; o++)
            for (int j = 0; j < nsets; j++) {
                double m = tune_median(t[i][o][j], PICK_ROUNDS);
                med[i] += m / (nsets * nobj[i]), lo[i] = fmin(lo[i], m), hi[i] = fmax(hi[i], m);
            }
        if (i != PICK_AUTO && (fastest < 0 || med[i] < med[fastest]))
            fastest = i;
    }
    if (fastest < 0 || picked < 0 || picked >= PICK_AUTO || !nobj[picked])
        return 0;
    double ratio = med[picked] / med[fastest];
    bool ok = ratio <= PICK_WITHIN;
    picks_off += !ok;
    printf("  pick: stage %d %.4f ms, the fastest stage %d %.4f ms: pick / fastest %.3f, %s; auto's object %.4f ms "
           "(%.3f of its stage's row); side by side, %d rounds of %d+ runs on each of %d input sets, %d objects a "
           "stage, their mean; stages (mean, [fastest object and set, slowest])",
           picked, med[picked], fastest, med[fastest], ratio, ok ? "within 2%" : "PICK OFF by more than 2%",
           med[PICK_AUTO], med[PICK_AUTO] / med[picked], PICK_ROUNDS, PICK_REPS, nsets, nobj[fastest]);
    for (int i = 0; i < PICK_AUTO; i++)
        if (nobj[i])
            printf(" %d: %.4f [%.4f, %.4f]", i, med[i], lo[i], hi[i]);
    printf(" ms\n");
    if (sets_shown) /* --sets: each object's time on each set, to see how placement spreads them */
        for (int i = 0; i < PICK_N; i++)
            for (int o = 0; o < nobj[i]; o++) {
                if (i == PICK_AUTO)
                    printf("    auto's object by set:");
                else
                    printf("    stage %d object %d by set:", i, o);
                for (int j = 0; j < nsets; j++)
                    printf(" %.4f", tune_median(t[i][o][j], PICK_ROUNDS));
                printf("\n");
            }
    return ratio;
}

/* The host's weights (uniform in [-1, 1), from seed, which they advance) and a mapping
 * (contiguous, or shuffled), as prepare and the reference take them. */
static void host_inputs(const lce_shape *s, uint64_t *seed, int shuffle, uint16_t **wu, uint16_t **wc, int32_t **map)
{
    *wu = malloc((size_t)(s->M * s->Ku) * 2), *wc = malloc((size_t)(s->M * s->Kc) * 2);
    *map = malloc((size_t)s->B * 4);
    if (!*wu || !*wc || !*map)
        DIE("out of host memory");
    tpl_fill(*wu, LOOM_F16, s->M * s->Ku, -1, 1, seed);
    tpl_fill(*wc, LOOM_F16, s->M * s->Kc, -1, 1, seed);
    ik_mapping(s->B, s->U, shuffle, *seed, *map);
}

/* E_user and E_cand uniform in [-1, 1) on the device (seeds su and sc): 0, or non-zero with
 * the reason in err. */
static int fill_e(nvref_gemm *ref, const lce_shape *s, loom_buffer *eu, loom_buffer *ec, uint64_t su, uint64_t sc,
                  char *err, size_t n)
{
    return nvref_gemm_fill(ref, rt_buffer_dptr(eu), LOOM_F16, s->U * s->Ku * s->N, su, -1, 1, err, n) ||
           nvref_gemm_fill(ref, rt_buffer_dptr(ec), LOOM_F16, s->B * s->Kc * s->N, sc, -1, 1, err, n);
}

static void one_shape(loom_runtime *rt, nvref_gemm *ref, lce_fw *fw, const lce_shape *s, int shuffle, int do_check,
                      const loom_ikbo_lce_config *fixed, grid_row *row)
{
    int failed_before = failures;
    char err[1024];
    size_t e = 2;
    uint64_t seed = 1234 + (uint64_t)s->B * 7 + (uint64_t)s->U;
    /* weights on the host (prepare takes host arrays) and on the device (the reference) */
    uint16_t *wu, *wc;
    int32_t *map;
    host_inputs(s, &seed, shuffle, &wu, &wc, &map);
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
    if (fill_e(ref, s, eu, ec, seed + 1, seed + 2, err, sizeof err))
        DIE("fill: %s", err);

    /* the reference halves, f32, kept on the device with what checks against them */
    lce_ref r = {.on = false};
    if (do_check)
        lce_ref_open(rt, ref, s, dwu, dwc, eu, ec, dmap, &r);

    loom_ikbo_lce_shape ls = {s->B, s->U, s->M, s->N, s->Ku, s->Kc, LOOM_F16, LOOM_F16};
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
           "BM=%d,BN=%d,stages=%d,cwarps=%d,ctas=%d,consumers=%d,trans=%d,cluster=%d\n",
           (long long)s->B, (long long)s->U, (double)s->B / (double)s->U, (long long)s->M, (long long)s->N,
           (long long)s->Ku, (long long)s->Kc, shuffle ? "shuffled" : "contiguous", cfg.bm, cfg.bn, cfg.stages,
           cfg.cwarps, cfg.ctas, cfg.consumers, cfg.trans, cfg.cluster);
    double gflop = 2.0 * (double)s->M * (double)s->N * ((double)s->B * (double)s->Kc + (double)s->U * (double)s->Ku) / 1e9;
    char verdict[160];
    /* the framework first: every stage's row says its speed-up over it */
    double fw_ms = 0;
    lce_fw_ctx fx = {.rt = rt, .f = fw, .s = s, .eu = eu, .ec = ec, .map = dmap, .out = out};
    const char *why = lce_fw_prepare(&fx, wu, wc);
    if (why) {
        printf("  framework  skipped: %s\n", why);
    } else {
        fw_ms = measure(rt, lce_fw_once, &fx, &r, out, "framework", verdict, sizeof verdict);
        printf("  framework %-13s %8.3f ms %7.1f TF/s  %s\n", "copies+cuBLAS", fw_ms, gflop / fw_ms, verdict);
        lce_fw_release(&fx); /* before the stages allocate their own */
    }
    fflush(stdout);
    /* every stage, kept for the pick's check below */
    loom_ikbo_lce *ps[PICK_N] = {NULL};
    for (int st = LOOM_IKBO_MATERIALIZED; st <= LOOM_IKBO_PERSISTENT; st++) {
        if (loom_ikbo_lce_prepare(rt, &ls, (loom_ikbo_stage)st, wu, wc, &cfg, &ps[st]) != LOOM_OK) {
            printf("  stage %d %-15s refused: %s\n", st, loom_ikbo_stage_name((loom_ikbo_stage)st),
                   loom_runtime_error(rt));
            failures++;
            continue;
        }
        run_ctx x = {ps[st], eu, ec, dmap, out};
        char what[16], vs_fw[40] = "";
        snprintf(what, sizeof what, "stage %d", st);
        ms[st] = measure(rt, run_once, &x, &r, out, what, verdict, sizeof verdict);
        if (fw_ms > 0)
            snprintf(vs_fw, sizeof vs_fw, "  x%.2f vs framework", fw_ms / ms[st]);
        printf("  stage %d %-15s %8.3f ms %7.1f TF/s  x%.2f vs materialized%s  %s\n", st,
               loom_ikbo_stage_name((loom_ikbo_stage)st), ms[st], gflop / ms[st], ms[0] / ms[st], vs_fw, verdict);
        if (getenv("LCE_BENCH_DESCRIBE"))
            printf("    %s\n", loom_ikbo_lce_describe(ps[st]));
        fflush(stdout);
    }
    /* LOOM_IKBO_AUTO, as a user calls it (with the rows' config): the stage it picks (timed
     * at the shape the first time, then from the tuning cache: the shuffled run of a shape
     * reads the contiguous run's pick) against the framework, then against every row timed
     * beside it (pick_check) */
    double t0 = util_now_ms();
    if (loom_ikbo_lce_prepare(rt, &ls, LOOM_IKBO_AUTO, wu, wc, &cfg, &ps[PICK_AUTO]) != LOOM_OK) {
        printf("  auto                    refused: %s\n", loom_runtime_error(rt));
        failures++;
    } else {
        double prep = util_now_ms() - t0;
        int st = loom_ikbo_lce_stage_of(ps[PICK_AUTO]);
        run_ctx x = {ps[PICK_AUTO], eu, ec, dmap, out};
        char vs_fw[40] = "";
        double am = measure(rt, run_once, &x, &r, out, "auto", verdict, sizeof verdict);
        if (fw_ms > 0)
            snprintf(vs_fw, sizeof vs_fw, "  x%.2f vs framework", fw_ms / am);
        printf("  auto -> %d %-13s %8.3f ms %7.1f TF/s%s  %s\n", st, loom_ikbo_stage_name((loom_ikbo_stage)st), am,
               gflop / am, vs_fw, verdict);
        printf("    prepare %.0f ms; %s\n", prep, loom_ikbo_lce_describe(ps[PICK_AUTO]));
        fflush(stdout);
        /* the input sets: this one, and pick_sets - 1 more of the same values allocated
         * apart (as many as there is memory for) */
        loom_buffer *seu[PICK_PLACES] = {eu}, *sec[PICK_PLACES] = {ec};
        int nsets = 1;
        for (; nsets < pick_sets; nsets++) {
            seu[nsets] = loom_buffer_create(rt, loom_buffer_size(eu));
            sec[nsets] = loom_buffer_create(rt, loom_buffer_size(ec));
            if (!seu[nsets] || !sec[nsets] ||
                fill_e(ref, s, seu[nsets], sec[nsets], seed + 1, seed + 2, err, sizeof err)) {
                loom_buffer_destroy(seu[nsets]);
                loom_buffer_destroy(sec[nsets]);
                break;
            }
        }
        /* pick_objs - 1 more objects of each stage (the row's is the first) */
        static loom_ikbo_lce *more[PICK_OBJS][PICK_AUTO];
        for (int o = 1; o < pick_objs; o++)
            for (int i = 0; i < PICK_AUTO; i++)
                if (ps[i] && loom_ikbo_lce_prepare(rt, &ls, (loom_ikbo_stage)i, wu, wc, &cfg, &more[o][i]) != LOOM_OK)
                    DIE("stage %d, object %d: %s", i, o, loom_runtime_error(rt));
        static run_ctx xs[PICK_PLACES][PICK_N][PICK_OBJS];
        memset(xs, 0, sizeof xs);
        for (int j = 0; j < nsets; j++)
            for (int i = 0; i < PICK_N; i++)
                for (int o = 0; o < (i == PICK_AUTO ? 1 : pick_objs) && ps[i]; o++)
                    xs[j][i][o] = (run_ctx){o ? more[o][i] : ps[i], seu[j], sec[j], dmap, out};
        double ratio = pick_check(rt, xs, nsets, st, ms);
        for (int o = 1; o < pick_objs; o++)
            for (int i = 0; i < PICK_AUTO; i++) {
                loom_ikbo_lce_destroy(more[o][i]);
                more[o][i] = NULL;
            }
        for (int j = 1; j < nsets; j++) {
            loom_buffer_destroy(seu[j]);
            loom_buffer_destroy(sec[j]);
        }
        if (row)
            row->auto_ms = am, row->stage = st, row->pick = ratio;
    }
    for (int i = 0; i < PICK_N; i++)
        loom_ikbo_lce_destroy(ps[i]);
    fflush(stdout);
    if (row) {
        row->s = *s;
        row->fw_ms = fw_ms;
        row->ok = failures == failed_before;
    }
    free(wu);
    free(wc);
    free(map);
    lce_ref_close(&r);
    loom_buffer *bs[] = {dwu, dwc, eu, ec, dmap, out};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        loom_buffer_destroy(bs[i]);
}

/* ---------------------------------------------------------------- --fp8 */

typedef struct fp8_ctx {
    loom_ikbo_lce *p;
    int64_t B, U;
    loom_buffer *eu, *ec, *seu, *sec, *map, *out;
} fp8_ctx;

static loom_status fp8_once(void *c)
{
    fp8_ctx *x = c;
    return loom_ikbo_lce_run_scaled(x->p, x->B, x->U, x->eu, x->ec, x->seu, x->sec, x->map, x->out);
}

/* Rows [rows, K] of f16 quantized to e4m3 with one scale a row (amax / 448, 1 where a row
 * is all zero): q[r][k] = e4m3(x[r][k] / scale[r]). */
static void quantize_rows(const uint16_t *x, int64_t rows, int64_t K, uint8_t *q, float *scale)
{
    for (int64_t r = 0; r < rows; r++) {
        double amax = 0;
        for (int64_t k = 0; k < K; k++)
            amax = fmax(amax, fabs(tpl_get(x, LOOM_F16, r * K + k)));
        scale[r] = amax > 0 ? (float)(amax / 448.0) : 1.0f;
        for (int64_t k = 0; k < K; k++)
            tpl_set(q, LOOM_E4M3, r * K + k, tpl_get(x, LOOM_F16, r * K + k) / scale[r]);
    }
}

/* E [n, K, N] of f16 to E^T [n, N, K] of e4m3 with one scale an entry (amax / 448). */
static void quantize_entries(const uint16_t *e, int64_t n, int64_t K, int64_t N, uint8_t *q, float *scale)
{
    for (int64_t x = 0; x < n; x++) {
        const uint16_t *ex = e + x * K * N;
        double amax = 0;
        for (int64_t i = 0; i < K * N; i++)
            amax = fmax(amax, fabs(tpl_get(ex, LOOM_F16, i)));
        scale[x] = amax > 0 ? (float)(amax / 448.0) : 1.0f;
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++)
                tpl_set(q, LOOM_E4M3, (x * N + j) * K + k, tpl_get(ex, LOOM_F16, k * N + j) / scale[x]);
    }
}

/* The FP8 output's sampled candidates against ik_fp8_reference (double, from the e4m3
 * values and the scales) and its bound (docs/checks.md, "ikbo_lce in FP8"): elements past
 * their bound, the worst |err| / bound. */
static void fp8_check(const lce_shape *s, const uint8_t *wu, const uint8_t *wc, const uint8_t *eu, const uint8_t *ec,
                      const float *swu, const float *swc, const float *seu, const float *sec, const int32_t *map,
                      const uint16_t *out, int nsample, double *bad, double *worst)
{
    size_t per = (size_t)(s->N * s->Kc), mn = (size_t)(s->M * s->N);
    uint8_t *ecs = malloc(per * (size_t)nsample);
    float *secs = malloc((size_t)nsample * sizeof *secs);
    int32_t *maps = malloc((size_t)nsample * sizeof *maps);
    uint16_t *ref = malloc(mn * (size_t)nsample * 2);
    double *bnd = malloc(mn * (size_t)nsample * sizeof *bnd);
    int64_t *rows = malloc((size_t)nsample * sizeof *rows);
    if (!ecs || !secs || !maps || !ref || !bnd || !rows)
        DIE("out of host memory");
    for (int i = 0; i < nsample; i++) { /* spread over the batch, the last candidate included */
        rows[i] = nsample > 1 ? i * (s->B - 1) / (nsample - 1) : 0;
        memcpy(ecs + per * (size_t)i, ec + per * (size_t)rows[i], per);
        secs[i] = sec[rows[i]];
        maps[i] = map[rows[i]];
    }
    ik_spec sp = {.B = nsample, .U = s->U, .M = s->M, .N = s->N, .Ku = s->Ku, .Kc = s->Kc, .dt = LOOM_E4M3,
                  .odt = LOOM_F16};
    ik_fp8_reference(&sp, wu, wc, eu, ecs, swu, swc, seu, secs, maps, ref, bnd);
    double nb = 0, w = 0;
    for (int i = 0; i < nsample; i++)
        for (size_t e = 0; e < mn; e++) {
            double got = h2f(out[(size_t)rows[i] * mn + e]), want = h2f(ref[(size_t)i * mn + e]);
            double d = fabs(got - want), b = bnd[(size_t)i * mn + e];
            nb += !(d <= b);
            w = isnan(d) ? INFINITY : fmax(w, d / b);
        }
    *bad = nb;
    *worst = w;
    free(ecs), free(secs), free(maps), free(ref), free(bnd), free(rows);
}

/* --fp8: the LCE with e4m3 weights and embeddings (loom_ikbo_lce_prepare_scaled) beside
 * the f16 LCE at one shape (K a multiple of 16: the headline's Ku and Kc padded), on the
 * same values: f16 inputs uniform in [-1, 1), quantized per row of the weights and per
 * entry of the embeddings (amax / 448).  Stages 3, 4 and auto of each, the f16 ones checked
 * on the device against the f32 reference (lce_ref) and the FP8 ones on sampled candidates
 * against ik_fp8_reference by its bound; then the ratio f16 / FP8 of each, and the error
 * of the FP8 output against the f16 kernel's (auto's each): relative RMS and the largest
 * |difference| over the largest |f16 output|. */
static void fp8_bench(loom_runtime *rt, nvref_gemm *ref, const lce_shape *s0, const loom_ikbo_lce_config *fixed)
{
    lce_shape sh = *s0, *s = &sh;
    s->Ku = (s->Ku + 15) / 16 * 16, s->Kc = (s->Kc + 15) / 16 * 16;
    uint64_t seed = 4321;
    size_t nwu = (size_t)(s->M * s->Ku), nwc = (size_t)(s->M * s->Kc), neu = (size_t)(s->U * s->Ku * s->N),
           nec = (size_t)(s->B * s->Kc * s->N), nout = (size_t)(s->B * s->M * s->N);
    uint16_t *wu, *wc, *eu16 = malloc(neu * 2), *ec16 = malloc(nec * 2), *o16 = malloc(nout * 2),
                       *o8 = malloc(nout * 2);
    int32_t *map;
    host_inputs(s, &seed, 1, &wu, &wc, &map);
    uint8_t *qwu = malloc(nwu), *qwc = malloc(nwc), *qeu = malloc(neu), *qec = malloc(nec);
    float *swu = malloc((size_t)s->M * 4), *swc = malloc((size_t)s->M * 4), *seu = malloc((size_t)s->U * 4),
          *sec = malloc((size_t)s->B * 4);
    if (!eu16 || !ec16 || !o16 || !o8 || !qwu || !qwc || !qeu || !qec || !swu || !swc || !seu || !sec)
        DIE("out of host memory");
    tpl_fill(eu16, LOOM_F16, (int64_t)neu, -1, 1, &seed);
    tpl_fill(ec16, LOOM_F16, (int64_t)nec, -1, 1, &seed);
    quantize_rows(wu, s->M, s->Ku, qwu, swu);
    quantize_rows(wc, s->M, s->Kc, qwc, swc);
    quantize_entries(eu16, s->U, s->Ku, s->N, qeu, seu);
    quantize_entries(ec16, s->B, s->Kc, s->N, qec, sec);
    loom_buffer *dwu = loom_buffer_create(rt, nwu * 2), *dwc = loom_buffer_create(rt, nwc * 2);
    loom_buffer *deu = loom_buffer_create(rt, neu * 2), *dec = loom_buffer_create(rt, nec * 2);
    loom_buffer *qdeu = loom_buffer_create(rt, neu), *qdec = loom_buffer_create(rt, nec);
    loom_buffer *dseu = loom_buffer_create(rt, (size_t)s->U * 4), *dsec = loom_buffer_create(rt, (size_t)s->B * 4);
    loom_buffer *dmap = loom_buffer_create(rt, (size_t)s->B * 4), *out = loom_buffer_create(rt, nout * 2);
    loom_buffer *out8 = loom_buffer_create(rt, nout * 2);
    if (!dwu || !dwc || !deu || !dec || !qdeu || !qdec || !dseu || !dsec || !dmap || !out || !out8)
        DIE("device buffers: %s", loom_runtime_error(rt));
    if (loom_buffer_upload(dwu, wu, nwu * 2) || loom_buffer_upload(dwc, wc, nwc * 2) ||
        loom_buffer_upload(deu, eu16, neu * 2) || loom_buffer_upload(dec, ec16, nec * 2) ||
        loom_buffer_upload(qdeu, qeu, neu) || loom_buffer_upload(qdec, qec, nec) ||
        loom_buffer_upload(dseu, seu, (size_t)s->U * 4) || loom_buffer_upload(dsec, sec, (size_t)s->B * 4) ||
        loom_buffer_upload(dmap, map, (size_t)s->B * 4))
        DIE("upload: %s", loom_runtime_error(rt));
    lce_ref r = {.on = false};
    lce_ref_open(rt, ref, s, dwu, dwc, deu, dec, dmap, &r);
    printf("FP8 B=%lld U=%lld M=%lld N=%lld Ku=%lld Kc=%lld shuffled: e4m3 weights (a scale a row) and embeddings "
           "(a scale an entry), out f16, beside the f16 LCE on the same values\n",
           (long long)s->B, (long long)s->U, (long long)s->M, (long long)s->N, (long long)s->Ku, (long long)s->Kc);
    double gflop = 2.0 * (double)s->M * (double)s->N * ((double)s->B * (double)s->Kc + (double)s->U * (double)s->Ku) / 1e9;
    const loom_ikbo_stage sts[3] = {LOOM_IKBO_FUSED_EPILOGUE, LOOM_IKBO_PERSISTENT, LOOM_IKBO_AUTO};
    loom_ikbo_lce_shape l16 = {s->B, s->U, s->M, s->N, s->Ku, s->Kc, LOOM_F16, LOOM_F16};
    loom_ikbo_lce_shape l8 = {s->B, s->U, s->M, s->N, s->Ku, s->Kc, LOOM_E4M3, LOOM_F16};
    char verdict[160];
    for (int i = 0; i < 3; i++) {
        const char *name = sts[i] == LOOM_IKBO_AUTO ? "auto" : loom_ikbo_stage_name(sts[i]);
        double ms16 = 0, ms8 = 0;
        loom_ikbo_lce *p16 = NULL, *p8 = NULL;
        if (loom_ikbo_lce_prepare(rt, &l16, sts[i], wu, wc, fixed, &p16) != LOOM_OK) {
            printf("  f16 %-15s refused: %s\n", name, loom_runtime_error(rt));
            failures++;
        } else {
            run_ctx x = {p16, deu, dec, dmap, out};
            ms16 = measure(rt, run_once, &x, &r, out, "f16", verdict, sizeof verdict);
            printf("  f16 %-15s %8.3f ms %7.1f TF/s  %s\n    %s\n", name, ms16, gflop / ms16, verdict,
                   loom_ikbo_lce_describe(p16));
            if (sts[i] == LOOM_IKBO_AUTO && loom_buffer_download(out, o16, nout * 2))
                DIE("download: %s", loom_runtime_error(rt));
        }
        /* FP8: the tuner's config (the same as f16's given --config where e4m3 takes it) */
        if (loom_ikbo_lce_prepare_scaled(rt, &l8, sts[i], qwu, qwc, swu, swc, fixed, &p8) != LOOM_OK) {
            printf("  e4m3 %-14s refused: %s\n", name, loom_runtime_error(rt));
            if (fixed && loom_ikbo_lce_prepare_scaled(rt, &l8, sts[i], qwu, qwc, swu, swc, NULL, &p8) == LOOM_OK)
                printf("  e4m3 %-14s with its own config instead\n", name);
            else
                failures++;
        }
        if (p8) {
            fp8_ctx x = {p8, s->B, s->U, qdeu, qdec, dseu, dsec, dmap, out8};
            if (loom_buffer_fill(out8, 0xff) || fp8_once(&x) || loom_buffer_download(out8, o8, nout * 2))
                DIE("e4m3 %s: %s", name, loom_runtime_error(rt));
            double bad, worst;
            fp8_check(s, qwu, qwc, qeu, qec, swu, swc, seu, sec, map, o8, 8, &bad, &worst);
            failures += bad != 0;
            if (loom_time_work(rt, fp8_once, &x, 3, 20, &ms8) != LOOM_OK)
                DIE("timing e4m3 %s: %s", name, loom_runtime_error(rt));
            char vs[40] = "";
            if (ms16 > 0)
                snprintf(vs, sizeof vs, "  x%.2f vs f16", ms16 / ms8);
            printf("  e4m3 %-14s %8.3f ms %7.1f TF/s%s  %s: %.0f past their bound, worst |err|/bound %.3g (8 "
                   "candidates against ik_fp8_reference)\n    %s\n",
                   name, ms8, gflop / ms8, vs, bad == 0 ? "ok" : "FAIL", bad, worst, loom_ikbo_lce_describe(p8));
            if (sts[i] == LOOM_IKBO_AUTO && ms16 > 0) { /* FP8 against the f16 kernel's output */
                double d2 = 0, r2 = 0, dmax = 0, rmax = 0;
                for (size_t e = 0; e < nout; e++) {
                    double a = h2f(o16[e]), d = h2f(o8[e]) - a;
                    d2 += d * d, r2 += a * a, dmax = fmax(dmax, fabs(d)), rmax = fmax(rmax, fabs(a));
                }
                printf("  e4m3 against f16 (auto's outputs, every element): relative RMS %.3g, max |diff| %.3g "
                       "(%.3g of max |f16| %.3g)\n",
                       sqrt(d2 / r2), dmax, dmax / rmax, rmax);
            }
        }
        fflush(stdout);
        loom_ikbo_lce_destroy(p16);
        loom_ikbo_lce_destroy(p8);
    }
    lce_ref_close(&r);
    loom_buffer *bs[] = {dwu, dwc, deu, dec, qdeu, qdec, dseu, dsec, dmap, out, out8};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        loom_buffer_destroy(bs[i]);
    free(wu), free(wc), free(map), free(eu16), free(ec16), free(o16), free(o8);
    free(qwu), free(qwc), free(qeu), free(qec), free(swu), free(swc), free(seu), free(sec);
}

/* --placement (issue 40): does a prepared object's speed depend on where the caller's
 * inputs lie?  At one shape, PL_OBJ objects of each of stages 3 and 4 (each prepared on its
 * own, so its own buffers lie apart) run on PL_SETS input sets: E_user and E_cand
 * allocated anew for each set (same values), then mixed sets that say which buffer
 * matters: set 1's E_user with set 0's E_cand and the other way round, and sets 0 and 1
 * writing a second output buffer.  Every (object,
 * set) pair is timed side by side in interleaved rounds (median of rounds, each a
 * loom_time_work median after L2 flushes); each object's output is checked on set 0. */
enum { PL_OBJ = 3, PL_SETS = 6, PL_MIX = 4, PL_ROUNDS = 5 };
static void placement(loom_runtime *rt, nvref_gemm *ref, const lce_shape *s, const loom_ikbo_lce_config *fixed)
{
    char err[1024];
    size_t e = 2;
    uint64_t seed = 99;
    uint16_t *wu, *wc;
    int32_t *map;
    host_inputs(s, &seed, 0, &wu, &wc, &map);
    loom_buffer *dwu = loom_buffer_create(rt, (size_t)(s->M * s->Ku) * e);
    loom_buffer *dwc = loom_buffer_create(rt, (size_t)(s->M * s->Kc) * e);
    loom_buffer *dmap = loom_buffer_create(rt, (size_t)s->B * 4);
    loom_buffer *out = loom_buffer_create(rt, (size_t)(s->B * s->M * s->N) * e);
    loom_buffer *eu[PL_SETS], *ec[PL_SETS];
    for (int j = 0; j < PL_SETS; j++) {
        eu[j] = loom_buffer_create(rt, (size_t)(s->U * s->Ku * s->N) * e);
        ec[j] = loom_buffer_create(rt, (size_t)(s->B * s->Kc * s->N) * e);
        if (!eu[j] || !ec[j] || fill_e(ref, s, eu[j], ec[j], 7, 8, err, sizeof err))
            DIE("input set %d: %s %s", j, loom_runtime_error(rt), err);
    }
    if (!dwu || !dwc || !dmap || !out || loom_buffer_upload(dwu, wu, loom_buffer_size(dwu)) ||
        loom_buffer_upload(dwc, wc, loom_buffer_size(dwc)) || loom_buffer_upload(dmap, map, loom_buffer_size(dmap)))
        DIE("buffers: %s", loom_runtime_error(rt));
    lce_ref r = {.on = false};
    lce_ref_open(rt, ref, s, dwu, dwc, eu[0], ec[0], dmap, &r);
    loom_ikbo_lce_shape ls = {s->B, s->U, s->M, s->N, s->Ku, s->Kc, LOOM_F16, LOOM_F16};
    loom_ikbo_lce *obj[2 * PL_OBJ];
    const char *names[2 * PL_OBJ];
    static const char *const nm[] = {"stage 3 #0", "stage 3 #1", "stage 3 #2", "stage 4 #0", "stage 4 #1",
                                     "stage 4 #2"};
    for (int i = 0; i < 2 * PL_OBJ; i++) {
        loom_ikbo_stage st = i < PL_OBJ ? LOOM_IKBO_FUSED_EPILOGUE : LOOM_IKBO_PERSISTENT;
        if (loom_ikbo_lce_prepare(rt, &ls, st, wu, wc, fixed, &obj[i]) != LOOM_OK)
            DIE("prepare: %s", loom_runtime_error(rt));
        names[i] = nm[i];
        run_ctx x = {obj[i], eu[0], ec[0], dmap, out};
        char verdict[160];
        measure(rt, run_once, &x, &r, out, names[i], verdict, sizeof verdict);
        printf("  %s: %s; owns", names[i], verdict);
        static const char *const bn[IK_NBUF] = {"", "", "", "", "wu_raw", "wc_raw", "wu", "wc", "user_res",
                                                "cand_res", "flags", "claims", "ecat"};
        for (int b = IK_CALLER_BUFS; b < IK_NBUF; b++) {
            size_t n;
            uint64_t a = ik_owned_buffer(obj[i], b, &n);
            if (a)
                printf(" %s 0x%llx (%zu B)", bn[b], (unsigned long long)a, n);
        }
        printf("\n");
    }
    /* the mixed sets: E_user moved alone, E_cand moved alone, then sets 0 and 1 writing a
     * second output buffer (the output moved alone) */
    loom_buffer *out2 = loom_buffer_create(rt, loom_buffer_size(out));
    if (!out2)
        DIE("buffers: %s", loom_runtime_error(rt));
    enum { NSET = PL_SETS + PL_MIX };
    loom_buffer *set_u[NSET], *set_c[NSET], *set_o[NSET];
    for (int j = 0; j < PL_SETS; j++)
        set_u[j] = eu[j], set_c[j] = ec[j], set_o[j] = out;
    set_u[PL_SETS] = eu[1], set_c[PL_SETS] = ec[0], set_o[PL_SETS] = out;             /* E_user moved alone */
    set_u[PL_SETS + 1] = eu[0], set_c[PL_SETS + 1] = ec[1], set_o[PL_SETS + 1] = out; /* E_cand moved alone */
    set_u[PL_SETS + 2] = eu[0], set_c[PL_SETS + 2] = ec[0], set_o[PL_SETS + 2] = out2; /* the output moved alone */
    set_u[PL_SETS + 3] = eu[1], set_c[PL_SETS + 3] = ec[1], set_o[PL_SETS + 3] = out2;
    static const char *const mixed[PL_MIX] = {" (set 1's E_user, set 0's E_cand)", " (set 0's E_user, set 1's E_cand)",
                                              " (set 0's inputs, the second output)", " (set 1's inputs, the second output)"};
    for (int j = 0; j < NSET; j++)
        printf("  set %d: E_user at 0x%llx, E_cand at 0x%llx, out at 0x%llx%s\n", j,
               (unsigned long long)rt_buffer_dptr(set_u[j]), (unsigned long long)rt_buffer_dptr(set_c[j]),
               (unsigned long long)rt_buffer_dptr(set_o[j]), j >= PL_SETS ? mixed[j - PL_SETS] : "");
    static double t[2 * PL_OBJ][NSET][PL_ROUNDS];
    for (int rd = 0; rd < PL_ROUNDS; rd++)
        for (int i = 0; i < 2 * PL_OBJ; i++)
            for (int j = 0; j < NSET; j++) {
                run_ctx x = {obj[i], set_u[j], set_c[j], dmap, set_o[j]};
                if (loom_time_work(rt, run_once, &x, rd == 0 ? 1 : 0, 5, &t[i][j][rd]) != LOOM_OK)
                    DIE("timing: %s", loom_runtime_error(rt));
            }
    printf("  ms (median of %d interleaved rounds)", PL_ROUNDS);
    for (int j = 0; j < NSET; j++)
        printf(" | set %d", j);
    printf("\n");
    for (int i = 0; i < 2 * PL_OBJ; i++) {
        printf("  %-10s", names[i]);
        for (int j = 0; j < NSET; j++)
            printf(" | %.4f", tune_median(t[i][j], PL_ROUNDS));
        printf("\n");
    }
    for (int i = 0; i < 2 * PL_OBJ; i++)
        loom_ikbo_lce_destroy(obj[i]);
    lce_ref_close(&r);
    for (int j = 0; j < PL_SETS; j++)
        loom_buffer_destroy(eu[j]), loom_buffer_destroy(ec[j]);
    loom_buffer *bs[] = {dwu, dwc, dmap, out, out2};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        loom_buffer_destroy(bs[i]);
    free(wu);
    free(wc);
    free(map);
}

/* Without a GPU: every stage on the interpreter at a small odd shape, checked by the same
 * rule against a CPU reference, and each stage's kernels written as PTX into ptx_dir. */
static int interpreter_run(const char *ptx_dir)
{
    static const lce_shape s = {24, 5, 77, 64, 37, 229}; /* 4 candidate k steps */
    static const loom_ikbo_lce_config cfg = {64, 64, 2, 4, 6, 0, 0, 1};
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    size_t e = 2, nout = (size_t)(s.B * s.M * s.N);
    uint64_t seed = 99;
    uint16_t *wu = malloc((size_t)(s.M * s.Ku) * e), *wc = malloc((size_t)(s.M * s.Kc) * e);
    uint16_t *eu = malloc((size_t)(s.U * s.Ku * s.N) * e), *ec = malloc((size_t)(s.B * s.Kc * s.N) * e);
    uint16_t *out = malloc(nout * e);
    int32_t *map = malloc((size_t)s.B * 4);
    float *refc = malloc(nout * 4), *refu = malloc((size_t)(s.U * s.M * s.N) * 4);
    float *absc = malloc(nout * 4), *absu = malloc((size_t)(s.U * s.M * s.N) * 4);
    if (!rt || !wu || !wc || !eu || !ec || !out || !map || !refc || !refu || !absc || !absu)
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
                double acc = 0, mag = 0;
                for (int64_t q = 0; q < K; q++) {
                    double t = tpl_get(user ? wu : wc, LOOM_F16, m * K + q) *
                               tpl_get(user ? eu : ec, LOOM_F16, (b * K + q) * s.N + j);
                    acc += t;
                    mag += fabs(t);
                }
                (user ? refu : refc)[(b * s.M + m) * s.N + j] = (float)acc;
                (user ? absu : absc)[(b * s.M + m) * s.N + j] = (float)mag;
            }
    loom_ikbo_lce_shape ls = {s.B, s.U, s.M, s.N, s.Ku, s.Kc, LOOM_F16, LOOM_F16};
    if (rt_make_dirs(ptx_dir) != 0)
        DIE("cannot create the PTX folder %s: %s", ptx_dir, strerror(errno));
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
            double bad, worst;
            check(refc, refu, absc, absu, map, out, &s, &bad, &worst);
            failures += bad != 0;
            printf("  %s users, stage %d %-15s %s: %.0f past their bound, worst |err|/bound %.3g  (%s)\n",
                   shuffle ? "shuffled  " : "contiguous", st, loom_ikbo_stage_name((loom_ikbo_stage)st),
                   bad == 0 ? "ok  " : "FAIL", bad, worst, loom_ikbo_lce_describe(p));
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
        /* LOOM_IKBO_AUTO: nothing is timed on the interpreter (stage 4 with this config) */
        loom_ikbo_lce *p = NULL;
        if (loom_ikbo_lce_prepare(rt, &ls, LOOM_IKBO_AUTO, wu, wc, &cfg, &p) != LOOM_OK)
            DIE("auto: %s", loom_runtime_error(rt));
        run_ctx x = {p, deu, dec, dmap, dout};
        if (run_once(&x) || loom_buffer_download(dout, out, nout * e))
            DIE("auto: %s", loom_runtime_error(rt));
        double bad, worst;
        check(refc, refu, absc, absu, map, out, &s, &bad, &worst);
        failures += bad != 0;
        printf("  %s users, auto -> %d %-13s %s: %.0f past their bound, worst |err|/bound %.3g  (%s)\n",
               shuffle ? "shuffled  " : "contiguous", (int)loom_ikbo_lce_stage_of(p),
               loom_ikbo_stage_name(loom_ikbo_lce_stage_of(p)), bad == 0 ? "ok  " : "FAIL", bad, worst,
               loom_ikbo_lce_describe(p));
        loom_ikbo_lce_destroy(p);
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
    free(absc);
    free(absu);
    loom_runtime_destroy(rt);
    printf("bench_ikbo_lce: the stage pick within 2%% of the fastest stage at %s shape%s\n",
           picks_off ? "NOT every" : "every", picks_off ? "; see PICK OFF" : "");
    if (failures)
        printf("bench_ikbo_lce: %d FAILED\n", failures);
    return failures ? 1 : 0;
}

/* --grid: issue 21's shapes, one factor at a time from the headline (B, the ratio B/U, M,
 * N, Ku/Kc over the values) and the corners where all are small or skinny; per
 * shape the framework and loom's pick (auto), then one table. */
static void run_grid(loom_runtime *rt, nvref_gemm *ref, lce_fw *fw, const loom_ikbo_lce_config *fc, int from, int to)
{
    static const lce_shape shapes[] = {
        {1024, 15, 433, 256, 1184, 1023}, /* the base: the headline with the grid's K */
        {64, 1, 433, 256, 1184, 1023},    {509, 7, 433, 256, 1184, 1023},  {4096, 59, 433, 256, 1184, 1023},
        {1024, 1024, 433, 256, 1184, 1023}, {1024, 512, 433, 256, 1184, 1023}, {1024, 1, 433, 256, 1184, 1023},
        {1024, 15, 64, 256, 1184, 1023},  {1024, 15, 128, 256, 1184, 1023},
        {1024, 15, 433, 8, 1184, 1023},   {1024, 15, 433, 72, 1184, 1023}, {1024, 15, 433, 1000, 1184, 1023},
        {1024, 15, 433, 256, 8, 8},       {1024, 15, 433, 256, 64, 64},    {1024, 15, 433, 256, 1023, 1184},
        {1024, 15, 433, 256, 1184, 8},    {1024, 15, 433, 256, 8, 1184},
        {64, 64, 64, 8, 8, 8},            {64, 32, 64, 8, 64, 8},          {509, 509, 64, 72, 64, 64},
        {4096, 4, 64, 8, 1184, 8},        {509, 509, 433, 1000, 8, 64},  {1000, 7, 200, 136, 64, 8},
        {509, 509, 433, 72, 1025, 1023},
    };
    enum { NG = sizeof shapes / sizeof shapes[0] };
    grid_row rows[NG];
    memset(rows, 0, sizeof rows);
    if (to < 1 || to > NG)
        to = NG;
    for (int i = from - 1; i < to; i++) {
        printf("== grid %d of %d\n", i + 1, NG);
        one_shape(rt, ref, fw, &shapes[i], 0, 1, fc, &rows[i]);
    }
    int slower = 0;
    printf("\n== grid: loom's pick (LOOM_IKBO_AUTO) against the framework (index_select + cat + cuBLAS) and "
           "against the fastest stage timed beside it, same run\n");
    printf("%6s %6s %5s %5s %5s %5s | %10s %10s %6s %7s %13s %s\n", "B", "U", "M", "N", "Ku", "Kc", "framework",
           "loom ms", "stage", "loom/fw", "pick/fastest", "");
    for (int i = from - 1; i < to; i++) {
        const grid_row *r = &rows[i];
        double x = r->fw_ms > 0 && r->auto_ms > 0 ? r->fw_ms / r->auto_ms : 0;
        int slow = x > 0 && x < 1.0;
        slower += slow;
        printf("%6lld %6lld %5lld %5lld %5lld %5lld | %10.4f %10.4f %6d %6.2fx %13.3f %s%s%s\n", (long long)r->s.B,
               (long long)r->s.U, (long long)r->s.M, (long long)r->s.N, (long long)r->s.Ku, (long long)r->s.Kc,
               r->fw_ms, r->auto_ms, r->stage, x, r->pick, slow ? "SLOWER " : "",
               r->pick > PICK_WITHIN ? "PICK OFF " : "", r->ok ? "" : "CHECK FAILED");
    }
    printf("grid: %d of %d shapes (%d to %d) where loom's pick is slower than the framework\n", slower,
           to - from + 1, from, to);
}

/* The count an option takes, 1 to most; anything else ends the run with a message. */
static int count_arg(const char *opt, const char *text, int most)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (end == text || *end || v < 1 || v > most)
        DIE("%s takes 1 to %d, not '%s'", opt, most, text);
    return (int)v;
}

int main(int argc, char **argv)
{
    lce_prog = "bench_ikbo_lce";
    lce_shape head = {1024, 15, 433, 256, 1178, 866};
    int sweep = 0, grid = 0, have_cfg = 0, tuned = 0, gfrom = 1, gto = 0, place = 0, fp8 = 0;
    loom_ikbo_lce_config cfg = {0};
    lce_shape custom = head;
    int have_shape = 0;
    const char *ptx_dir = "build/ptx/ikbo_lce";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sweep"))
            sweep = 1;
        else if (!strcmp(argv[i], "--grid"))
            grid = 1;
        else if (!strcmp(argv[i], "--grid-rows") && i + 1 < argc) { /* FIRST-LAST, from 1: part of the grid */
            grid = 1;
            if (sscanf(argv[++i], "%d-%d", &gfrom, &gto) != 2 || gfrom < 1 || gto < gfrom)
                DIE("--grid-rows takes FIRST-LAST (from 1), not '%s'", argv[i]);
        }
        else if (!strcmp(argv[i], "--tuned"))
            tuned = 1;
        else if (!strcmp(argv[i], "--placement"))
            place = 1;
        else if (!strcmp(argv[i], "--sets") && i + 1 < argc) /* the pick check's input sets */
            pick_sets = count_arg("--sets", argv[++i], PICK_PLACES), sets_shown = 1;
        else if (!strcmp(argv[i], "--objects") && i + 1 < argc) /* the pick check's objects a stage */
            pick_objs = count_arg("--objects", argv[++i], PICK_OBJS);
        else if (!strcmp(argv[i], "--fp8"))
            fp8 = 1;
        else if (!strcmp(argv[i], "--ptx") && i + 1 < argc)
            ptx_dir = argv[++i];
        else if (!strcmp(argv[i], "--check-all"))
            ; /* every shape is checked now (on the device); kept for old command lines */
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
            fprintf(stderr, "usage: bench_ikbo_lce [--sweep | --grid | --grid-rows FIRST-LAST | --fp8] [--tuned] [--sets N] [--objects N] [--check-all] [--ptx DIR] [--shape B=..,U=..,M=..,N=..,Ku=..,Kc=..] "
                            "[--config BM=..,BN=..,stages=..,cwarps=..,ctas=..,consumers=..,trans=..]\n");
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
    lce_fw fw;
    lce_fw_open(rt, &fw);
    if (fw.have_cublas)
        printf("framework: index_select and cat copies (NVRTC), cuBLAS %d (%s) strided batched GEMM\n",
               fw.cb.version, fw.cb.path);
    if ((grid || place) && !have_cfg && !tuned) { /* the grid: the default config, as a service that has not tuned */
        const loom_template *t = loom_template_find("ikbo_lce");
        int64_t c[LOOM_MAX_PARAMS];
        for (int i = 0; i < t->nconfig; i++)
            c[i] = t->config[i].def;
        cfg = ik_config_of(c);
        have_cfg = 1;
        printf("grid: every shape with the default config (--tuned: the tuner's per shape)\n");
    }
    const loom_ikbo_lce_config *fc = have_cfg ? &cfg : NULL;
    lce_shape first = have_shape ? custom : head;
    if (place) {
        placement(rt, ref, &first, fc);
        sweep = 0;
    } else if (fp8) {
        fp8_bench(rt, ref, &first, fc);
        sweep = 0;
    } else if (grid) {
        run_grid(rt, ref, &fw, fc, gfrom, gto);
        sweep = 0;
    } else {
        one_shape(rt, ref, &fw, &first, 0, 1, fc, NULL);
        one_shape(rt, ref, &fw, &first, 1, 1, fc, NULL);
    }
    if (sweep) {
        printf("== B sweep at ratio 70\n");
        for (int64_t B = 512; B <= 4096; B *= 2) {
            lce_shape s = head;
            s.B = B;
            s.U = B / 70 > 0 ? (B + 35) / 70 : 1;
            if (B != 1024)
                one_shape(rt, ref, &fw, &s, 0, 1, fc, NULL);
        }
        printf("== ratio sweep at B=1024\n");
        static const int ratios[] = {2, 10, 200, 1000};
        for (int i = 0; i < 4; i++) {
            lce_shape s = head;
            s.U = (1024 + ratios[i] / 2) / ratios[i];
            s.U = s.U < 1 ? 1 : s.U;
            one_shape(rt, ref, &fw, &s, 0, 1, fc, NULL);
        }
    }
    lce_fw_close(rt, &fw);
    nvref_gemm_close(ref);
    loom_runtime_destroy(rt);
    printf("bench_ikbo_lce: the stage pick within 2%% of the fastest stage at %s shape%s\n",
           picks_off ? "NOT every" : "every", picks_off ? "; see PICK OFF" : "");
    if (failures)
        printf("bench_ikbo_lce: %d FAILED\n", failures);
    return failures ? 1 : 0;
}
