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
 *   --check-all                    check every row (default: the headline rows and the
 *                                  varlen ones)
 *   --bound-stats                  with each check, the bounds' median and largest, the
 *                                  reference's median magnitude, how many elements differ
 *                                  from it and by how much at most (the output downloaded)
 *   without a GPU: the C API on the interpreter at small odd shapes, checked against the
 *   CPU reference in double within the error model's bound (fa_bound)
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
 */
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
    /* the materialized baseline: the gather before the attention */
    fa_ref *ref;
    loom_buffer *ksrc, *vsrc, *map;
    int64_t B, slab;
} launch_ctx;

static loom_status fa_once(void *c)
{
    launch_ctx *x = c;
    return loom_ikbo_fa_launch(x->p, x->q, x->k, x->v, x->out);
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
    loom_ikbo_fa_shape sh = {c->B, c->U, c->S, c->H, c->D, c->nseed, c->bf16 ? LOOM_BF16 : LOOM_F16, c->varlen};
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

    loom_ikbo_fa_shape sh = {c->B, c->U, c->S, c->H, c->D, c->nseed, dt, c->varlen};
    loom_ikbo_fa_config dcfg;
    if (cfg && cfg->bn != c->D) { /* a tile of D keys (the C API's default for D=64: 4 stages) */
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
    launch_ctx x = {p, q, k, v, out, fr, NULL, NULL, NULL, 0, 0};
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
    char mverdict[256] = "";
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
                 "%.2f of it%s", floor_ms, mem_ms, flop_ms, peak * 1e-12, roof, roof < 0.70 ? " (BELOW 0.70)" : "");
        goto print;
    }
    if (!c->varlen && 2 * kb < rt_gpu_properties(g)->total_mem / 3) {
        loom_ikbo_fa_shape bs = {c->B, c->B, c->S, c->H, c->D, c->nseed, dt, 0};
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
        launch_ctx y = {pb, q, kbuf, vbuf, out, fr, k, v, mapb, c->B, (int64_t)(c->S * c->H * c->D * (int64_t)e)};
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
                     .tmastore = 1, .xunit = 0};
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
        loom_ikbo_fa_shape sh = {c->B, c->U, c->S, c->H, c->D, c->nseed, LOOM_F16, c->varlen};
        loom_ikbo_fa_config cfg = {64, 2, 8, 1, 0, 1, 1, 0};
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
    int sweep = 0, check_all = 0, have_shape = 0, tune = 0, have_cfg = 0;
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
            fprintf(stderr, "usage: bench_ikbo_fa [--sweep] [--lowreuse | --lowreuse-all] [--check-all] [--bound-stats] [--tune] [--shape B=..,U=..,S=..,H=..,D=..,"
                            "n_seed=..,varlen=..,shuffle=..,bf16=..] [--config BN=..,stages=..,ctas=..,sched=..,turns=..]\n");
            return 2;
        }
    }
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        printf("bench_ikbo_fa: no GPU here (%s)\n", rt ? loom_runtime_error(rt) : "no runtime");
        loom_runtime_destroy(rt);
        return interpreter_run();
    }
    char err[1024];
    fa_ref *fr;
    nvref_gemm *fill;
    if (faref_open(rt_runtime_gpu(rt), &fr, err, sizeof err) != LOOM_OK ||
        nvref_gemm_open(rt_runtime_gpu(rt), &fill, err, sizeof err) != LOOM_OK)
        DIE("NVRTC reference: %s", err);
    /* the config: given, the tuner's (--tune), or the C API's default */
    const loom_ikbo_fa_config *fc = have_cfg ? &cfg : NULL;
    if (!have_cfg && !tune) { /* the template's defaults (the C API's default config) */
        const loom_template *t = loom_template_find("ikbo_fa");
        int64_t cv[LOOM_MAX_PARAMS];
        if (loom_params_parse(t->config, t->nconfig, "", cv, err, sizeof err) != 0)
            DIE("default config: %s", err);
        cfg = fa_config_of(cv);
        fc = &cfg;
    }
    printf("IKBO flash attention on %s; config %s\n", loom_runtime_device_name(rt),
           fc ? "given or default" : "tuned per shape");
    if (fc)
        printf("config: BN=%d,stages=%d,ctas=%d,sched=%d,turns=%d,overlap=%d,tmastore=%d,xunit=%d\n", fc->bn,
               fc->stages, fc->ctas, fc->sched, fc->turns, fc->overlap, fc->tmastore, fc->xunit);
    printf("    B     U      S  H    D seed dt   mapping  lens   |  loom ms   TF/s | materialized ms TF/s  speedup | "
           "no-gather ms  x   | plan ms | check\n");
    if (lowreuse) {
        lowreuse_sweep(rt, fr, fill, fc, lowreuse == 2);
    } else if (have_shape) {
        one_case(rt, fr, fill, &custom, fc, 1);
    } else {
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
    faref_close(fr);
    nvref_gemm_close(fill);
    loom_runtime_destroy(rt);
    return failures ? 1 : 0;
}
