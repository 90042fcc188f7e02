/*
 * bench_autows -- the plain (Triton-style) kernels of examples/kernels/plain.c, specialized
 * by loom's automatic warp specialization (issue 42), against the hand-written templates
 * they stand for, measured in the same run on the GPU.  (The plain GEMM against the gemm
 * template and cuBLAS: bench_gemm --config plain:...)
 *
 *   IKBO linear compression, the headline shape (B=1024, U=15, M=433, N=256, Ku=1178,
 *   Kc=866, f16, contiguous users): stage 3 (LOOM_IKBO_FUSED_EPILOGUE: the user GEMM, then
 *   the candidate GEMM adding user_res[u(b)] in its epilogue) against the same two steps
 *   written plain: plain_batched_gemm for user_res, plain_ikbo_fused for out.  user_res
 *   in f32 keeps stage 3's precision (its two f16 planes hold the f32 sum); in f16 it is
 *   rounded as the framework rounds it (the error model allows half an ulp of each half),
 *   half the bytes.  Every plain config of the list is checked and timed; the best of each
 *   precision is its ratio.  Beside
 *   each: its candidate kernel alone, and the same GEMM without the user add
 *   (plain_batched_gemm into out), which is what the add costs.
 *
 *   IKBO attention, the headline (B=2048, H=2, n_seed=64, D=128, U=32, S=1024 and 2048,
 *   f16, contiguous users): ikbo_fa (the C API's default config) against
 *   plain_ikbo_attention, a program a candidate and head.
 *
 * Checks, by the error model (docs/checks.md), on the device: the LCE outputs by
 * bench/lce_common.c's check (ik_lce_bound against the NVRTC f32 references of both
 * halves), the attention outputs by support/fa_ref.c's model check.  Any failure makes the
 * exit status 1.  Timing: loom_time_work (each run after an L2 flush), the contenders in
 * alternating rounds, the median of the rounds' medians.
 *
 * Usage: bench_autows [--only lce|fa] [--reps N]    (skips cleanly without a GPU)
 */
#include "fa_ref.h"
#include "ir.h"
#include "gpu.h"
#include "lce_common.h"
#include "loom_ikbo.h"
#include "nvrtc_ref.h"
#include "plain.h"
#include "rt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, reps = 20;

#define ROUNDS 5

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median over ROUNDS alternating rounds of each contender's median of `reps` runs. */
static void time_rounds(loom_runtime *rt, int n, loom_status (*const *work)(void *), void *const *ctx, double *ms)
{
    double t[8][ROUNDS];
    for (int r = 0; r < ROUNDS; r++)
        for (int i = 0; i < n; i++) {
            if (loom_time_work(rt, work[i], ctx[i], 3, reps, &t[i][r]) != LOOM_OK)
                lce_die("timing: %s", loom_runtime_error(rt));
        }
    for (int i = 0; i < n; i++) {
        qsort(t[i], ROUNDS, sizeof(double), cmp_dbl);
        ms[i] = t[i][ROUNDS / 2];
    }
}

static loom_buffer *buffer(loom_runtime *rt, size_t bytes)
{
    loom_buffer *b = loom_buffer_create(rt, bytes);
    if (!b)
        lce_die("buffer of %zu bytes: %s", bytes, loom_runtime_error(rt));
    return b;
}

/* ---------------------------------------------------------------- the LCE */

typedef struct lce_run {
    loom_runtime *rt;
    loom_ikbo_lce *tpl;                /* the template's stage 3 */
    loom_kernel *user, *cand;          /* the plain pair */
    loom_kernel *gemm;                 /* the candidate GEMM alone, no user add (where the time goes) */
    int gu[3], gc[3];
    loom_buffer *wu, *wc, *eu, *ec, *map, *res, *out;
    int64_t M;
} lce_run;

static loom_status run_template(void *p)
{
    lce_run *x = p;
    return loom_ikbo_lce_run(x->tpl, x->eu, x->ec, x->map, x->out);
}

static loom_status run_plain(void *p)
{
    lce_run *x = p;
    loom_arg ua[4] = {LOOM_ARG_I32((int32_t)x->M), LOOM_ARG_BUF(x->wu), LOOM_ARG_BUF(x->eu), LOOM_ARG_BUF(x->res)};
    loom_status st = loom_launch(x->rt, x->user, x->gu, ua, 4);
    if (st != LOOM_OK)
        return st;
    loom_arg ca[6] = {LOOM_ARG_I32((int32_t)x->M), LOOM_ARG_BUF(x->wc), LOOM_ARG_BUF(x->ec), LOOM_ARG_BUF(x->map),
                      LOOM_ARG_BUF(x->res), LOOM_ARG_BUF(x->out)};
    return loom_launch(x->rt, x->cand, x->gc, ca, 6);
}

static loom_status run_cand(void *p)
{
    lce_run *x = p;
    loom_arg ca[6] = {LOOM_ARG_I32((int32_t)x->M), LOOM_ARG_BUF(x->wc), LOOM_ARG_BUF(x->ec), LOOM_ARG_BUF(x->map),
                      LOOM_ARG_BUF(x->res), LOOM_ARG_BUF(x->out)};
    return loom_launch(x->rt, x->cand, x->gc, ca, 6);
}

static loom_status run_gemm_alone(void *p)
{
    lce_run *x = p;
    loom_arg ca[4] = {LOOM_ARG_I32((int32_t)x->M), LOOM_ARG_BUF(x->wc), LOOM_ARG_BUF(x->ec), LOOM_ARG_BUF(x->out)};
    return loom_launch(x->rt, x->gemm, x->gc, ca, 4);
}

/* Host weights [M, K] f16 in rows pad8(K) apart (zero columns past K), for the plain
 * kernels' TMA. */
static loom_buffer *padded(loom_runtime *rt, const uint16_t *w, int64_t M, int64_t K)
{
    int64_t ld = (K + 7) / 8 * 8;
    uint16_t *p = calloc((size_t)(M * ld), 2);
    for (int64_t m = 0; m < M; m++)
        memcpy(p + m * ld, w + m * K, (size_t)K * 2);
    loom_buffer *b = buffer(rt, (size_t)(M * ld) * 2);
    loom_buffer_upload(b, p, (size_t)(M * ld) * 2);
    free(p);
    return b;
}

static void bench_lce(loom_runtime *rt, nvref_gemm *ref)
{
    const lce_shape s = {1024, 15, 433, 256, 1178, 866};
    loom_ikbo_lce_shape ls = {s.B, s.U, s.M, s.N, s.Ku, s.Kc, LOOM_F16, LOOM_F16};
    rt_gpu *g = rt_runtime_gpu(rt);
    char err[1024];
    /* inputs: host weights (the C API takes them), E on the device */
    uint16_t *wu = malloc((size_t)(s.M * s.Ku) * 2), *wc = malloc((size_t)(s.M * s.Kc) * 2);
    uint64_t seed = 42;
    for (int64_t i = 0; i < s.M * s.Ku; i++)
        wu[i] = ir_f32_to_f16((float)((double)((seed = seed * 6364136223846793005ull + 1) >> 11) * 0x1p-53 * 2 - 1));
    for (int64_t i = 0; i < s.M * s.Kc; i++)
        wc[i] = ir_f32_to_f16((float)((double)((seed = seed * 6364136223846793005ull + 1) >> 11) * 0x1p-53 * 2 - 1));
    lce_run x = {.rt = rt, .M = s.M};
    x.eu = buffer(rt, (size_t)(s.U * s.Ku * s.N) * 2);
    x.ec = buffer(rt, (size_t)(s.B * s.Kc * s.N) * 2);
    x.map = buffer(rt, (size_t)s.B * 4);
    x.out = buffer(rt, (size_t)(s.B * s.M * s.N) * 2);
    x.res = buffer(rt, (size_t)(s.U * s.M * s.N) * 4);
    if (nvref_gemm_fill(ref, rt_buffer_dptr(x.eu), LOOM_F16, s.U * s.Ku * s.N, 1, -1, 1, err, sizeof err) ||
        nvref_gemm_fill(ref, rt_buffer_dptr(x.ec), LOOM_F16, s.B * s.Kc * s.N, 2, -1, 1, err, sizeof err))
        lce_die("fill: %s", err);
    int32_t *map = malloc((size_t)s.B * 4);
    for (int64_t b = 0; b < s.B; b++)
        map[b] = (int32_t)(b * s.U / s.B); /* contiguous users */
    loom_buffer_upload(x.map, map, (size_t)s.B * 4);
    /* the references and the check (the unpadded device weights) */
    loom_buffer *dwu = buffer(rt, (size_t)(s.M * s.Ku) * 2), *dwc = buffer(rt, (size_t)(s.M * s.Kc) * 2);
    loom_buffer_upload(dwu, wu, (size_t)(s.M * s.Ku) * 2);
    loom_buffer_upload(dwc, wc, (size_t)(s.M * s.Kc) * 2);
    lce_ref chk;
    lce_ref_open(rt, ref, &s, dwu, dwc, x.eu, x.ec, x.map, &chk);
    x.wu = padded(rt, wu, s.M, s.Ku);
    x.wc = padded(rt, wc, s.M, s.Kc);

    if (loom_ikbo_lce_prepare(rt, &ls, LOOM_IKBO_FUSED_EPILOGUE, wu, wc, NULL, &x.tpl) != LOOM_OK)
        lce_die("stage 3: %s", loom_runtime_error(rt));
    double bad, worst;
    loom_buffer_fill(x.out, 0xff);
    if (run_template(&x) != LOOM_OK)
        lce_die("stage 3: %s", loom_runtime_error(rt));
    lce_ref_check(rt, &chk, x.out, s.B, s.U, "stage 3", &bad, &worst);
    failures += bad != 0;
    printf("lce %lldx%lldx%lldx%lldx%lldx%lld f16: stage 3 [%s]: check %s (worst %.2f of the bound)\n",
           (long long)s.B, (long long)s.U, (long long)s.M, (long long)s.N, (long long)s.Ku, (long long)s.Kc,
           loom_ikbo_lce_describe(x.tpl), bad ? "FAIL" : "ok", worst);
    /* the user half (U x M x N: a few programs) keeps one config; the candidate kernel's
     * are compared, the plain form and the transposed one (t) */
    static const plain_cfg cu0 = {64, 256, 64, 1, 4, 0, 0};
    static const struct {
        plain_cfg c;
        int t;     /* the transposed form */
        int r16;   /* user_res in f16 (the framework's rounding), else f32 */
    } cands[] = {
        {{64, 256, 64, 1, 4, 0, 0}, 0, 0},  {{64, 256, 64, 1, 3, 0, 0}, 0, 0}, {{64, 256, 64, 1, 5, 0, 0}, 0, 0},
        {{64, 256, 64, 2, 3, 0, 1}, 0, 0},  {{128, 256, 64, 2, 3, 0, 0}, 0, 0}, {{128, 128, 64, 2, 4, 0, 0}, 0, 0},
        {{224, 128, 64, 2, 4, 0, 0}, 1, 0}, {{224, 128, 64, 2, 3, 0, 0}, 1, 0}, {{224, 128, 64, 2, 2, 0, 0}, 1, 0},
        {{64, 256, 64, 1, 4, 0, 0}, 0, 1},  {{128, 256, 64, 2, 3, 0, 0}, 0, 1}, {{128, 128, 64, 2, 4, 0, 0}, 0, 1},
        {{128, 256, 64, 2, 4, 0, 0}, 0, 0}, {{128, 256, 64, 2, 4, 0, 0}, 0, 1}, /* the store in column halves */
    };
    int ncfg = (int)(sizeof cands / sizeof *cands);
    double best[2] = {0, 0}, tbest[2] = {0, 0};
    for (int i = 0; i < ncfg; i++) {
        const plain_cfg *cu = &cu0, *cc = &cands[i].c;
        loom_dtype rdt = cands[i].r16 ? LOOM_F16 : LOOM_F32;
        x.user = plain_batched_gemm(s.M, s.N, s.Ku, s.U, LOOM_F16, rdt, cu);
        x.cand = (cands[i].t ? plain_ikbo_fused_t : plain_ikbo_fused)(s.M, s.N, s.Kc, s.B, s.U, LOOM_F16, rdt, cc);
        x.gemm = cands[i].t ? NULL : plain_batched_gemm(s.M, s.N, s.Kc, s.B, LOOM_F16, LOOM_F16, cc);
        x.gu[0] = (int)(((s.M + cu->bm - 1) / cu->bm) * ((s.N + cu->bn - 1) / cu->bn)), x.gu[1] = (int)s.U;
        x.gc[0] = (int)(((s.M + cc->bm - 1) / cc->bm) * ((s.N + cc->bn - 1) / cc->bn)), x.gc[1] = (int)s.B;
        x.gu[2] = x.gc[2] = 1;
        loom_buffer_fill(x.out, 0xff);
        loom_buffer_fill(x.res, 0xff);
        loom_status st = run_plain(&x);
        if (st == LOOM_OK)
            st = loom_runtime_sync(rt, 60000);
        if (st != LOOM_OK) {
            printf("  plain bm=%d bn=%d consumers=%d stages=%d: FAIL: %s\n", cc->bm, cc->bn, cc->consumers,
                   cc->stages, loom_runtime_error(rt));
            failures++;
        } else {
            lce_ref_check(rt, &chk, x.out, s.B, s.U, "plain", &bad, &worst);
            failures += bad != 0;
            loom_status (*const work[2])(void *) = {run_template, run_plain};
            void *const ctx[2] = {&x, &x};
            double ms[2];
            time_rounds(rt, 2, work, ctx, ms);
            double cand_ms = 0, gemm_ms = 0;
            if (loom_time_work(rt, run_cand, &x, 3, reps, &cand_ms) != LOOM_OK ||
                (x.gemm && loom_time_work(rt, run_gemm_alone, &x, 3, reps, &gemm_ms) != LOOM_OK))
                lce_die("timing: %s", loom_runtime_error(rt));
            printf("  plain%s, user_res %s, bm=%d bn=%d consumers=%d stages=%d pingpong=%d: %.4f ms (its candidate "
                   "kernel %.4f",
                   cands[i].t ? " (transposed)" : "", cands[i].r16 ? "f16" : "f32", cc->bm, cc->bn, cc->consumers,
                   cc->stages, cc->pingpong, ms[1], cand_ms);
            if (x.gemm)
                printf(", the same GEMM without the user add %.4f", gemm_ms);
            printf("); stage 3 %.4f ms: %.3fx of stage 3's speed; check %s (worst %.2f)\n", ms[0], ms[0] / ms[1],
                   bad ? "FAIL" : "ok", worst);
            int r = cands[i].r16;
            if (!bad && ms[0] / ms[1] > best[r])
                best[r] = ms[0] / ms[1], tbest[r] = ms[1];
        }
        loom_kernel_destroy(x.user);
        loom_kernel_destroy(x.cand);
        if (x.gemm)
            loom_kernel_destroy(x.gemm);
    }
    printf("lce: the best plain pair with user_res in f32 (stage 3's precision) %.4f ms, %.3fx of stage 3's speed; "
           "in f16 (the framework's) %.4f ms, %.3fx (target 0.9x)\n\n",
           tbest[0], best[0], tbest[1], best[1]);
    (void)g;
    lce_ref_close(&chk);
    loom_ikbo_lce_destroy(x.tpl);
    loom_buffer *all[] = {x.wu, x.wc, x.eu, x.ec, x.map, x.res, x.out, dwu, dwc};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        loom_buffer_destroy(all[i]);
    free(wu), free(wc), free(map);
}

/* ---------------------------------------------------------------- attention */

typedef struct fa_run {
    loom_runtime *rt;
    loom_ikbo_fa *tpl;
    loom_kernel *k;
    int grid[3];
    loom_buffer *q, *kb, *vb, *map, *out;
    loom_buffer *units; /* plain_ikbo_attention_units' plan (NULL: the kernel a candidate) */
} fa_run;

static loom_status run_fa_template(void *p)
{
    fa_run *x = p;
    return loom_ikbo_fa_launch(x->tpl, x->q, x->kb, x->vb, x->out);
}

static loom_status run_fa_plain(void *p)
{
    fa_run *x = p;
    loom_arg a[5] = {LOOM_ARG_BUF(x->q), LOOM_ARG_BUF(x->kb), LOOM_ARG_BUF(x->vb),
                     LOOM_ARG_BUF(x->units ? x->units : x->map), LOOM_ARG_BUF(x->out)};
    return loom_launch(x->rt, x->k, x->grid, a, 5);
}

static void bench_fa(loom_runtime *rt, nvref_gemm *ref, fa_ref *indep, int64_t S)
{
    loom_ikbo_fa_shape s = {2048, 32, S, 2, 128, 64, LOOM_F16, 0, LOOM_F16};
    char err[1024];
    fa_run x = {.rt = rt};
    int64_t rows = s.B * s.n_seed;
    x.q = buffer(rt, (size_t)(rows * s.H * s.D) * 2);
    x.kb = buffer(rt, (size_t)(s.U * s.S * s.H * s.D) * 2);
    x.vb = buffer(rt, (size_t)(s.U * s.S * s.H * s.D) * 2);
    x.map = buffer(rt, (size_t)s.B * 4);
    x.out = buffer(rt, (size_t)(rows * s.H * s.D) * 2);
    if (nvref_gemm_fill(ref, rt_buffer_dptr(x.q), LOOM_F16, rows * s.H * s.D, 3, -1, 1, err, sizeof err) ||
        nvref_gemm_fill(ref, rt_buffer_dptr(x.kb), LOOM_F16, s.U * s.S * s.H * s.D, 4, -1, 1, err, sizeof err) ||
        nvref_gemm_fill(ref, rt_buffer_dptr(x.vb), LOOM_F16, s.U * s.S * s.H * s.D, 5, -1, 1, err, sizeof err))
        lce_die("fill: %s", err);
    int32_t *map = malloc((size_t)s.B * 4);
    for (int64_t b = 0; b < s.B; b++)
        map[b] = (int32_t)(b * s.U / s.B);
    loom_buffer_upload(x.map, map, (size_t)s.B * 4);
    faref_model m;
    if (faref_model_open(rt, indep, &s, x.q, x.kb, x.vb, map, NULL, &m, err, sizeof err) != LOOM_OK)
        lce_die("the attention reference: %s", err);
    if (loom_ikbo_fa_prepare(rt, &s, NULL, &x.tpl) != LOOM_OK ||
        loom_ikbo_fa_set_mapping(x.tpl, map, NULL) != LOOM_OK)
        lce_die("ikbo_fa: %s", loom_runtime_error(rt));
    double bad, maxerr;
    loom_buffer_fill(x.out, 0xff);
    if (run_fa_template(&x) != LOOM_OK || faref_model_check(&m, x.out, &bad, &maxerr, err, sizeof err) != LOOM_OK)
        lce_die("ikbo_fa: %s %s", loom_runtime_error(rt), err);
    failures += bad != 0;
    double flop = 4.0 * (double)s.H * (double)s.n_seed * (double)s.D * (double)s.S * (double)s.B;
    printf("fa B=%lld U=%lld S=%lld H=%lld D=%lld n_seed=%lld f16: ikbo_fa [%s] check %s\n", (long long)s.B,
           (long long)s.U, (long long)s.S, (long long)s.H, (long long)s.D, (long long)s.n_seed,
           loom_ikbo_fa_describe(x.tpl), bad ? "FAIL" : "ok");
    /* the plan of plain_ikbo_attention_units: runs of consecutive candidates of one user,
     * two candidates (128 rows) a unit */
    int32_t *plan = malloc((size_t)s.B * 3 * 4);
    int64_t P = 0;
    for (int64_t b = 0; b < s.B;) {
        int64_t n = b + 1 < s.B && map[b + 1] == map[b] ? 2 : 1;
        plan[3 * P] = map[b], plan[3 * P + 1] = (int32_t)(b * s.n_seed), plan[3 * P + 2] = (int32_t)(n * s.n_seed);
        P++, b += n;
    }
    x.units = buffer(rt, (size_t)P * 3 * 4);
    loom_buffer_upload(x.units, plan, (size_t)P * 3 * 4);
    static const struct {
        plain_cfg c;
        int units;
    } cfgs[] = {{{64, 128, 64, 1, 2, 0, 0}, 0},  {{64, 128, 64, 2, 2, 0, 1}, 0},  {{128, 128, 64, 2, 2, 0, 0}, 1},
                {{128, 64, 64, 2, 3, 0, 0}, 1},  {{128, 128, 64, 2, 3, 0, 0}, 1}, {{128, 64, 64, 2, 4, 0, 0}, 1}};
    double best = 0;
    loom_buffer *units = x.units;
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        const plain_cfg *c = &cfgs[i].c;
        x.units = cfgs[i].units ? units : NULL;
        x.k = x.units ? plain_ikbo_attention_units(s.B, s.U, s.S, s.H, s.D, s.n_seed, P, LOOM_F16, c)
                      : plain_ikbo_attention(s.B, s.U, s.S, s.H, s.D, s.n_seed, LOOM_F16, c);
        x.grid[0] = (int)(x.units ? P : s.B), x.grid[1] = (int)s.H, x.grid[2] = 1;
        loom_buffer_fill(x.out, 0xff);
        loom_status st = run_fa_plain(&x);
        if (st == LOOM_OK)
            st = loom_runtime_sync(rt, 60000);
        if (st != LOOM_OK || faref_model_check(&m, x.out, &bad, &maxerr, err, sizeof err) != LOOM_OK) {
            printf("  plain%s bn=%d stages=%d: FAIL: %s %s\n", x.units ? " (units)" : "", c->bn, c->stages,
                   loom_runtime_error(rt), err);
            failures++;
        } else {
            failures += bad != 0;
            loom_status (*const work[2])(void *) = {run_fa_template, run_fa_plain};
            void *const ctx[2] = {&x, &x};
            double ms[2];
            time_rounds(rt, 2, work, ctx, ms);
            printf("  plain%s bm=%d bn=%d stages=%d consumers=%d pingpong=%d: %.1f TF/s; ikbo_fa %.1f TF/s: %.3fx; "
                   "check %s\n", x.units ? " (units)" : "", c->bm, c->bn, c->stages, c->consumers, c->pingpong, flop / ms[1] * 1e-9, flop / ms[0] * 1e-9, ms[0] / ms[1], bad ? "FAIL" : "ok");
            if (!bad && ms[0] / ms[1] > best)
                best = ms[0] / ms[1];
        }
        loom_kernel_destroy(x.k);
    }
    printf("fa S=%lld: the best plain %.3fx of ikbo_fa (target 0.85x)\n\n", (long long)S, best);
    faref_model_close(&m);
    loom_ikbo_fa_destroy(x.tpl);
    loom_buffer *all[] = {x.q, x.kb, x.vb, x.map, x.out, units};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        loom_buffer_destroy(all[i]);
    free(map), free(plan);
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    lce_prog = "bench_autows";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_autows [--only lce|fa] [--reps N]\n");
            return 2;
        }
    }
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        printf("bench_autows: skipped: %s\n", rt ? loom_runtime_error(rt) : "out of host memory");
        loom_runtime_destroy(rt);
        return 0;
    }
    rt_gpu *g = rt_runtime_gpu(rt);
    char err[1024];
    nvref_gemm *ref = NULL;
    fa_ref *indep = NULL;
    if (nvref_gemm_open(g, &ref, err, sizeof err) != LOOM_OK || faref_open(g, &indep, err, sizeof err) != LOOM_OK)
        lce_die("the references: %s", err);
    printf("bench_autows on %s\n\n", rt_gpu_properties(g)->name);
    if (!only || !strcmp(only, "lce"))
        bench_lce(rt, ref);
    if (!only || !strcmp(only, "fa")) {
        bench_fa(rt, ref, indep, 1024);
        bench_fa(rt, ref, indep, 2048);
    }
    faref_close(indep);
    nvref_gemm_close(ref);
    loom_runtime_destroy(rt);
    printf("bench_autows: %s\n", failures ? "CHECK FAILURES" : "every check ok");
    return failures != 0;
}
