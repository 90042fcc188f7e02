/*
 * test_ikbo_lce.c -- IKBO linear compression through its C API, every stage.
 *
 * Each stage (materialized, decomposed, K aligned, fused epilogue, persistent) runs on
 * the interpreter at small odd shapes -- M not a multiple of the tile, K not a multiple
 * of 8, one candidate per user, more users than candidates, a shuffled mapping -- and is
 * checked by the error model (docs/checks.md), element by element: |out - (c + u)| within
 * ik_lce_bound_dt, where c = W_cand E_cand[b] and u = W_user E_user[u(b)] are the halves
 * in double with their magnitudes (sums of |w e|), and the bound holds any stage's f32
 * sums over Ku + Kc + 2 terms, a rounding of each half to the dtype (a decomposed stage
 * stores them) and the final rounding.  An element moved just past its bound, NaN or
 * infinite is caught.  The GPU test runs the same at larger odd shapes (skipped without a
 * GPU).  Bad arguments are refused with messages naming them.
 */
#include "gpu.h"
#include "ikbo_lce.h"
#include "nvrtc_ref.h"
#include "rt.h"
#include "t_model.h"
#include "tpl_device.h" /* ik_lce_bound_dt */
#include "../util/util.h"
#include "testutil.h"

typedef struct lce_case {
    int64_t B, U, M, N, Ku, Kc;
    int shuffle;
} lce_case;

/* The inputs, the last output downloaded, and the reference ref [B, M, N] = c + u in
 * double with each element's bound bnd (ik_lce_bound_dt of the halves c = W_cand E_cand[b]
 * and u = W_user E_user[u(b)] and their sums of |w e|). */
typedef struct host_io {
    void *wu, *wc, *eu, *ec, *out;
    int32_t *map;
    double *ref, *bnd;
} host_io;

static host_io make_inputs(const lce_case *c, loom_dtype dt, uint64_t seed)
{
    host_io h;
    size_t e = loom_dtype_size(dt);
    h.wu = malloc((size_t)(c->M * c->Ku) * e);
    h.wc = malloc((size_t)(c->M * c->Kc) * e);
    h.eu = malloc((size_t)(c->U * c->Ku * c->N) * e);
    h.ec = malloc((size_t)(c->B * c->Kc * c->N) * e);
    h.out = malloc((size_t)(c->B * c->M * c->N) * e);
    h.map = malloc((size_t)c->B * 4);
    h.ref = malloc((size_t)(c->B * c->M * c->N) * sizeof(double));
    h.bnd = malloc((size_t)(c->B * c->M * c->N) * sizeof(double));
    cr_assert(h.wu && h.wc && h.eu && h.ec && h.out && h.map && h.ref && h.bnd);
    tpl_fill(h.wu, dt, c->M * c->Ku, -1, 1, &seed);
    tpl_fill(h.wc, dt, c->M * c->Kc, -1, 1, &seed);
    tpl_fill(h.eu, dt, c->U * c->Ku * c->N, -1, 1, &seed);
    tpl_fill(h.ec, dt, c->B * c->Kc * c->N, -1, 1, &seed);
    ik_mapping(c->B, c->U, c->shuffle, seed, h.map);
    /* the halves and their magnitudes in double: the user halves once per user, rows
     * accumulated with j innermost (fast enough for the GPU test's headline-sized M, N
     * and K) */
    int64_t mn = c->M * c->N;
    double *ev = malloc((size_t)((c->U * c->Ku > c->Kc ? c->U * c->Ku : c->Kc) * c->N) * sizeof(double));
    double *uh = calloc((size_t)(c->U * mn), sizeof(double)), *au = calloc((size_t)(c->U * mn), sizeof(double));
    double *row = malloc((size_t)c->N * sizeof(double)), *arow = malloc((size_t)c->N * sizeof(double));
    cr_assert(ev && uh && au && row && arow);
    for (int64_t i = 0; i < c->U * c->Ku * c->N; i++)
        ev[i] = tpl_get(h.eu, dt, i);
    for (int64_t x = 0; x < c->U; x++)
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t q = 0; q < c->Ku; q++) {
                double a = tpl_get(h.wu, dt, m * c->Ku + q);
                const double *er = ev + (x * c->Ku + q) * c->N;
                double *ur = uh + x * mn + m * c->N, *ar = au + x * mn + m * c->N;
                for (int64_t j = 0; j < c->N; j++)
                    ur[j] += a * er[j], ar[j] += fabs(a * er[j]);
            }
    for (int64_t b = 0; b < c->B; b++) {
        for (int64_t i = 0; i < c->Kc * c->N; i++)
            ev[i] = tpl_get(h.ec, dt, b * c->Kc * c->N + i);
        for (int64_t m = 0; m < c->M; m++) {
            memset(row, 0, (size_t)c->N * sizeof(double));
            memset(arow, 0, (size_t)c->N * sizeof(double));
            for (int64_t q = 0; q < c->Kc; q++) {
                double a = tpl_get(h.wc, dt, m * c->Kc + q);
                for (int64_t j = 0; j < c->N; j++)
                    row[j] += a * ev[q * c->N + j], arow[j] += fabs(a * ev[q * c->N + j]);
            }
            for (int64_t j = 0; j < c->N; j++) {
                int64_t i = b * mn + m * c->N + j, ui = h.map[b] * mn + m * c->N + j;
                h.ref[i] = row[j] + uh[ui];
                h.bnd[i] = ik_lce_bound_dt(dt, row[j], uh[ui], arow[j], au[ui], c->Ku, c->Kc);
            }
        }
    }
    free(ev), free(uh), free(au), free(row), free(arow);
    return h;
}

static void free_inputs(host_io *h)
{
    free(h->wu);
    free(h->wc);
    free(h->eu);
    free(h->ec);
    free(h->out);
    free(h->map);
    free(h->ref);
    free(h->bnd);
}

/* out [B, M, N] (dtype dt, on the host) against h's reference, element by element. */
static t_verdict lce_check(const lce_case *c, loom_dtype dt, const host_io *h, const void *out)
{
    t_verdict v = T_VERDICT_INIT;
    for (int64_t i = 0; i < c->B * c->M * c->N; i++)
        t_verdict_add(&v, i, tpl_get(out, dt, i), h->ref[i], h->bnd[i]);
    return v;
}

/* Run the prepared p twice on rt and check each output by the error model; returns the
 * worst |out - ref| / bound. */
static double run_prepared(loom_runtime *rt, const lce_case *c, loom_dtype dt, loom_ikbo_lce *p, host_io *h)
{
    size_t e = loom_dtype_size(dt);
    loom_ikbo_stage st = loom_ikbo_lce_stage_of(p);
    loom_status r;
    size_t neu = (size_t)(c->U * c->Ku * c->N) * e, nec = (size_t)(c->B * c->Kc * c->N) * e;
    size_t nout = (size_t)(c->B * c->M * c->N) * e;
    loom_buffer *eu = loom_buffer_create(rt, neu), *ec = loom_buffer_create(rt, nec);
    loom_buffer *map = loom_buffer_create(rt, (size_t)c->B * 4), *out = loom_buffer_create(rt, nout);
    cr_assert(eu && ec && map && out);
    cr_assert_eq(loom_buffer_upload(eu, h->eu, neu), LOOM_OK);
    cr_assert_eq(loom_buffer_upload(ec, h->ec, nec), LOOM_OK);
    cr_assert_eq(loom_buffer_upload(map, h->map, (size_t)c->B * 4), LOOM_OK);
    double worst = 0;
    for (int rep = 0; rep < 2; rep++) { /* a second run reuses what the first left behind */
        cr_assert_eq(loom_buffer_fill(out, 0xff), LOOM_OK);
        r = loom_ikbo_lce_run(p, eu, ec, map, out);
        cr_assert_eq(r, LOOM_OK, "run stage %d: %s", (int)st, loom_runtime_error(rt));
        cr_assert_eq(loom_buffer_download(out, h->out, nout), LOOM_OK, "%s", loom_runtime_error(rt));
        t_verdict v = lce_check(c, dt, h, h->out);
        cr_assert(v.bad == 0, "stage %d (%s) B=%lld U=%lld M=%lld N=%lld Ku=%lld Kc=%lld: %lld elements past their "
                  "bound, worst |err|/bound %.3g; the first out[%lld] = %.9g, the reference %.9g, bound %.3g",
                  (int)st, loom_ikbo_lce_describe(p), (long long)c->B, (long long)c->U, (long long)c->M,
                  (long long)c->N, (long long)c->Ku, (long long)c->Kc, (long long)v.bad, v.worst, (long long)v.first,
                  v.got, v.ref, v.bound);
        worst = fmax(worst, v.worst);
    }
    loom_buffer_destroy(eu);
    loom_buffer_destroy(ec);
    loom_buffer_destroy(map);
    loom_buffer_destroy(out);
    return worst;
}

/* Run one stage on rt and check it by the error model; returns the worst |out - ref| / bound. */
static double run_stage(loom_runtime *rt, const lce_case *c, loom_dtype dt, loom_ikbo_stage st,
                        const loom_ikbo_lce_config *cfg, host_io *h)
{
    loom_ikbo_lce_shape s = {c->B, c->U, c->M, c->N, c->Ku, c->Kc, dt, LOOM_F16};
    loom_ikbo_lce *p = NULL;
    loom_status r = loom_ikbo_lce_prepare(rt, &s, st, h->wu, h->wc, cfg, &p);
    cr_assert_eq(r, LOOM_OK, "prepare stage %d: %s", (int)st, loom_runtime_error(rt));
    double worst = run_prepared(rt, c, dt, p, h);
    loom_ikbo_lce_destroy(p);
    return worst;
}

static const lce_case small_cases[] = {
    {9, 4, 77, 64, 37, 21, 0},   /* M, Ku, Kc odd; contiguous users */
    {6, 6, 70, 64, 19, 45, 1},   /* one candidate per user, shuffled */
    {5, 7, 65, 128, 8, 13, 1},   /* more users than candidates (some unused), shuffled */
    {7, 3, 66, 64, 70, 333, 1},  /* 6 k steps: the user tile's planes join mid-mainloop */
    {4, 2, 64, 64, 130, 100, 0}, /* 2 and 3 k steps */
    {3, 2, 40, 64, 9, 150, 1},   /* 3 k steps */
    {5, 3, 130, 64, 20, 70, 1},  /* split: the second tile's second group has no rows */
};
enum { NSMALL = sizeof small_cases / sizeof small_cases[0] };

static void all_stages_on(loom_runtime *rt, const lce_case *cs, int ncase, const loom_ikbo_lce_config *cfg,
                          loom_dtype dt)
{
    for (int i = 0; i < ncase; i++) {
        host_io h = make_inputs(&cs[i], dt, 7 + (uint64_t)i);
        /* stage 4 claims its tiles as it goes: no ping-pong there (refused, tested below) */
        int last = cfg->consumers == 1 ? LOOM_IKBO_FUSED_EPILOGUE : LOOM_IKBO_PERSISTENT;
        for (int st = LOOM_IKBO_MATERIALIZED; st <= last; st++)
            run_stage(rt, &cs[i], dt, (loom_ikbo_stage)st, cfg, &h);
        free_inputs(&h);
    }
}

Test(ikbo_lce, every_stage_on_the_interpreter_at_odd_shapes)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_ikbo_lce_config cfg = {64, 64, 2, 4, 5, 0, 0, 1};
    all_stages_on(rt, small_cases, NSMALL, &cfg, LOOM_F16);
    loom_ikbo_lce_config deep = {64, 64, 4, 4, 3, 0, 0, 1}; /* the ring deeper than some tiles' k steps */
    all_stages_on(rt, small_cases + 3, 2, &deep, LOOM_F16);
    /* two consumer warp groups, bf16 */
    loom_ikbo_lce_config two = {128, 64, 3, 8, 3, 0, 0, 1};
    all_stages_on(rt, small_cases, 1, &two, LOOM_BF16);
    all_stages_on(rt, small_cases + 3, 1, &two, LOOM_BF16);
    /* ping-pong: two warp groups take turns on whole tiles; 5 programs leave some with an
     * odd number of tiles, 7 with one tile or none */
    loom_ikbo_lce_config pp = {64, 64, 3, 8, 5, 1, 0, 1}, pp7 = {64, 64, 2, 8, 7, 1, 0, 1}, pp128 = {128, 64, 2, 8, 3, 1, 0, 1};
    all_stages_on(rt, small_cases, NSMALL, &pp, LOOM_F16);
    all_stages_on(rt, small_cases + 1, 2, &pp7, LOOM_F16);
    all_stages_on(rt, small_cases + 3, 1, &pp128, LOOM_BF16);
    /* split: two warp groups share each 128-row tile (64 rows each; a group whose rows are
     * all past M, as at M = 40, 64 and 130, only passes the ring on) */
    loom_ikbo_lce_config sp = {128, 64, 2, 8, 5, 2, 0, 1}, sp3 = {128, 64, 3, 8, 2, 2, 0, 1};
    all_stages_on(rt, small_cases, NSMALL, &sp, LOOM_F16);
    all_stages_on(rt, small_cases + 4, 3, &sp3, LOOM_BF16);
    /* a ring that leaves no room for the staging tile: the fused kernels store through the
     * slot of the tile's last plane step, the unfused ones from registers */
    loom_ikbo_lce_config deep5 = {64, 256, 5, 4, 3, 0, 0, 1};
    all_stages_on(rt, small_cases + 2, 1, &deep5, LOOM_F16);
    all_stages_on(rt, small_cases + 3, 1, &deep5, LOOM_BF16);
    /* split 128 x 256 with 4 stages: no room for the staging tile either, each group
     * stores through its lo step's slot (M=130: the second tile's second group has none) */
    loom_ikbo_lce_config sp4 = {128, 256, 4, 8, 3, 2, 0, 1};
    all_stages_on(rt, small_cases + 5, 2, &sp4, LOOM_F16);
    all_stages_on(rt, small_cases + 3, 1, &sp4, LOOM_BF16);
    loom_runtime_destroy(rt);
}

/* The check catches a wrong output: in each stage's right output (f16 and bf16), an
 * element moved to the nearest value of the dtype just past its bound (up and down), NaN
 * or infinite, at the first, the last and a middle element, is the one element reported. */
Test(ikbo_lce, the_check_catches_an_element_past_its_bound)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_ikbo_lce_config cfg = {64, 64, 2, 4, 5, 0, 0, 1};
    const lce_case *c = &small_cases[1];
    static const loom_dtype dts[] = {LOOM_F16, LOOM_BF16};
    for (int d = 0; d < 2; d++) {
        host_io h = make_inputs(c, dts[d], 17 + (uint64_t)d);
        for (int st = LOOM_IKBO_MATERIALIZED; st <= LOOM_IKBO_PERSISTENT; st++) {
            run_stage(rt, c, dts[d], (loom_ikbo_stage)st, &cfg, &h); /* right: nothing past its bound */
            int64_t n = c->B * c->M * c->N, at[3] = {0, n - 1, n / 2 + 7};
            for (int w = 0; w < 3; w++)
                for (int kind = 0; kind < 4; kind++) {
                    double keep = tpl_get(h.out, dts[d], at[w]), r = h.ref[at[w]], b = h.bnd[at[w]];
                    double v = kind == 0 ? t_just_past(dts[d], r, b, 1) : kind == 1 ? t_just_past(dts[d], r, b, -1)
                               : kind == 2 ? NAN : INFINITY;
                    tpl_set(h.out, dts[d], at[w], v);
                    t_verdict got = lce_check(c, dts[d], &h, h.out);
                    cr_expect(got.bad == 1 && got.first == at[w],
                              "%s stage %d: out[%lld] = %.9g (reference %.9g, bound %.3g): %lld reported, the first "
                              "at %lld", loom_dtype_name(dts[d]), st, (long long)at[w], v, r, b, (long long)got.bad,
                              (long long)got.first);
                    tpl_set(h.out, dts[d], at[w], keep);
                }
        }
        free_inputs(&h);
    }
    loom_runtime_destroy(rt);
}

/* The transposed product (trans=1): two warp groups of 64 columns each, a tile's rows (M
 * split evenly, on wgmma's N side) stored transposed through the slots of their plane
 * steps; cluster=2: pairs of CTAs take a tile's two column halves and multicast W.  N = 64
 * leaves a tile's second group (and with clusters the pair's second tile) past N. */
Test(ikbo_lce, transposed_product_on_the_interpreter_at_odd_shapes)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    static const lce_case wide[] = {
        {7, 9, 40, 200, 33, 66, 1},    /* more users than candidates; N = 200: a group half past N */
        {3, 2, 433, 256, 70, 130, 0},  /* the headline's M and N: 224-row tiles */
    };
    loom_ikbo_lce_config tr = {256, 128, 4, 8, 5, 2, 1, 1}, tc = {256, 128, 3, 8, 4, 2, 1, 2},
                         tc64 = {64, 128, 2, 8, 6, 2, 1, 2}; /* 2 stages: stores from registers */
    all_stages_on(rt, small_cases, NSMALL, &tr, LOOM_F16);
    all_stages_on(rt, small_cases, NSMALL, &tc, LOOM_F16);
    all_stages_on(rt, small_cases + 3, 2, &tc, LOOM_BF16);
    all_stages_on(rt, small_cases + 1, 2, &tc64, LOOM_F16);
    all_stages_on(rt, wide, 2, &tc, LOOM_F16);
    all_stages_on(rt, wide, 1, &tr, LOOM_BF16);
    loom_runtime_destroy(rt);
}

/* The transposed kernel's PTX: wgmma m64n224, the epilogues by stmatrix.trans (14 a warp
 * and tile: 224 rows by 16 columns in 16 x 16 blocks; a candidate tile's one, a user
 * tile's hi and lo), the user tiles then read back and stored 16 bytes at a time (14 a
 * thread and plane), W multicast, no spills. */
Test(ikbo_lce, transposed_product_ptx)
{
    const loom_template *t = loom_template_find("ikbo_lce");
    cr_assert(t);
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char why[256];
    for (int i = 0; i < t->nshape; i++)
        sh[i] = t->shape[i].def;
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, "BM=256,BN=128,stages=4,cwarps=8,consumers=2,trans=1,"
                                   "cluster=2", cf, why, sizeof why), 0, "%s", why);
    loom_kernel *k = t->build(sh, cf, why, sizeof why);
    cr_assert(k, "%s", why);
    char *ptx = NULL, err[2048];
    size_t smem = 0;
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, &smem, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect(t_count(ptx, "wgmma.mma_async.sync.aligned.m64n224k16") > 0);
    cr_expect_eq(t_count(ptx, "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16"), 3 * 14, "%d",
                 t_count(ptx, "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
    cr_expect_eq(t_count(ptx, "ld.shared.v4.u32"), 2 * 14, "%d", t_count(ptx, "ld.shared.v4.u32"));
    cr_expect_eq(t_count(ptx, "st.global.v4.b32"), 2 * 14, "%d", t_count(ptx, "st.global.v4.b32"));
    cr_expect_eq(t_count(ptx, "st.global.b16"), 0, "%d", t_count(ptx, "st.global.b16"));
    cr_expect(t_count(ptx, ".multicast::cluster") > 0);
    t_ptxas_ok(ptx, "sm_90a", "ikbo_lce trans=1 cluster=2");
    free(ptx);
    loom_kernel_destroy(k);
}

Test(ikbo_lce, refuses_bad_shapes_configs_and_buffers)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    lce_case c = {4, 2, 40, 64, 9, 11, 0};
    host_io h = make_inputs(&c, LOOM_F16, 1);
    loom_ikbo_lce *p = NULL;
    loom_ikbo_lce_shape bad = {4, 2, 40, 60, 9, 11, LOOM_F16, LOOM_F16};
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &bad, LOOM_IKBO_PERSISTENT, h.wu, h.wc, NULL, &p), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "N must be a multiple of 8"), "%s", loom_runtime_error(rt));
    cr_assert_null(p);
    loom_ikbo_lce_shape s = {4, 2, 40, 64, 9, 11, LOOM_F16, LOOM_F16};
    loom_ikbo_lce_config cfg = {64, 64, 2, 4, 0, 0, 0, 1};
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_PERSISTENT, h.wu, h.wc, &cfg, &p), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "persistent: ctas must be"), "%s", loom_runtime_error(rt));
    loom_ikbo_lce_config roomless = {128, 256, 5, 8, 2, 0, 0, 1}; /* the ring alone is over the shared memory */
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_FUSED_EPILOGUE, h.wu, h.wc, &roomless, &p), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "the ring needs 245760 bytes of shared memory (over 226 KiB)"), "%s",
              loom_runtime_error(rt));
    loom_ikbo_lce_config split64 = {64, 64, 2, 8, 2, 2, 0, 1}; /* split needs 64 rows a group */
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_PERSISTENT, h.wu, h.wc, &split64, &p), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "BM must be 64 or 128 rows per consumer warp group"), "%s",
              loom_runtime_error(rt));
    loom_ikbo_lce_config trans64 = {256, 64, 4, 8, 2, 2, 1, 1}; /* trans: 64 columns a warp group */
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_PERSISTENT, h.wu, h.wc, &trans64, &p), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "trans=1 needs consumers=2, cwarps=8 and BN=128"), "%s",
              loom_runtime_error(rt));
    loom_ikbo_lce_config pair = {64, 256, 4, 4, 2, 0, 0, 2}; /* a cluster shares W of a transposed tile */
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_PERSISTENT, h.wu, h.wc, &pair, &p), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "cluster=2 needs trans=1"), "%s", loom_runtime_error(rt));
    loom_ikbo_lce_config odd = {256, 128, 4, 8, 3, 2, 1, 2};
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_PERSISTENT, h.wu, h.wc, &odd, &p), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "cluster=2 needs an even number of CTAs"), "%s", loom_runtime_error(rt));
    loom_ikbo_lce_config turns = {64, 64, 2, 8, 2, 1, 0, 1}; /* stage 4 claims its tiles: no ping-pong */
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_PERSISTENT, h.wu, h.wc, &turns, &p), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "ping-pong's turns need the tiles known ahead"), "%s", loom_runtime_error(rt));
    loom_ikbo_lce_config lone = {64, 64, 2, 4, 2, 1, 0, 1}; /* ping-pong with one warp group */
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_PERSISTENT, h.wu, h.wc, &lone, &p), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "consumers=1 and 2 need cwarps=8"), "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, (loom_ikbo_stage)9, h.wu, h.wc, &cfg, &p), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "stage 9 is not 0 to 4"), "%s", loom_runtime_error(rt));
    cfg.ctas = 2;
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_PERSISTENT, h.wu, h.wc, &cfg, &p), LOOM_OK, "%s",
                 loom_runtime_error(rt));
    loom_buffer *small = loom_buffer_create(rt, 16), *big = loom_buffer_create(rt, 1 << 20);
    cr_assert_eq(loom_ikbo_lce_run(p, small, big, big, big), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "e_user has 16 bytes; it must hold [2, 9, 64]"), "%s",
              loom_runtime_error(rt));
    cr_assert_eq(loom_ikbo_lce_run(p, big, big, big, NULL), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "out is NULL"), "%s", loom_runtime_error(rt));
    loom_buffer_destroy(small);
    loom_buffer_destroy(big);
    loom_ikbo_lce_destroy(p);
    free_inputs(&h);
    loom_runtime_destroy(rt);
}

Test(ikbo_lce, every_stage_on_the_gpu_at_odd_shapes)
{
    loom_runtime *rt = t_gpu_or_skip();
    static const lce_case gpu_cases[] = {
        {40, 3, 433, 256, 1178, 866, 0},  /* the headline's M, N, K with fewer candidates */
        {67, 67, 433, 256, 99, 61, 1},    /* one candidate per user, shuffled */
        {130, 400, 129, 72, 37, 50, 1},   /* more users than candidates, N=72 */
    };
    /* the default config, two consumer warp groups sharing a tile, ping-pong, split
     * (M = 433 and 129: the last tile's second group has no rows), and rings with no room
     * for the staging tile (the fused kernels store through a borrowed ring slot, one
     * warp group or split; the others from registers) */
    loom_ikbo_lce_config cfg = {64, 256, 4, 4, 132, 0, 0, 1}, two = {128, 128, 4, 8, 132, 0, 0, 1},
                         narrow = {128, 64, 4, 8, 132, 0, 0, 1}, pp = {64, 256, 4, 8, 132, 1, 0, 1},
                         sp = {128, 256, 3, 8, 132, 2, 0, 1}, sp_narrow = {128, 64, 4, 8, 132, 2, 0, 1},
                         deep = {64, 256, 5, 4, 132, 0, 0, 1}, sp_deep = {128, 256, 4, 8, 132, 2, 0, 1},
                         tr = {256, 128, 4, 8, 132, 2, 1, 1}, tc = {256, 128, 4, 8, 132, 2, 1, 2};
    for (int i = 0; i < 3; i++) {
        host_io h = make_inputs(&gpu_cases[i], LOOM_F16, 11 + (uint64_t)i);
        for (int st = LOOM_IKBO_MATERIALIZED; st <= LOOM_IKBO_PERSISTENT; st++) {
            bool fused = st >= LOOM_IKBO_FUSED_EPILOGUE;
            run_stage(rt, &gpu_cases[i], LOOM_F16, (loom_ikbo_stage)st, i == 2 ? &narrow : &cfg, &h);
            if (i == 0 && fused)
                run_stage(rt, &gpu_cases[i], LOOM_F16, (loom_ikbo_stage)st, &two, &h);
            if (i < 2 && st == LOOM_IKBO_FUSED_EPILOGUE) /* stage 4 has no ping-pong */
                run_stage(rt, &gpu_cases[i], LOOM_F16, (loom_ikbo_stage)st, &pp, &h);
            if (i != 1 || fused)
                run_stage(rt, &gpu_cases[i], LOOM_F16, (loom_ikbo_stage)st, i == 2 ? &sp_narrow : &sp, &h);
            /* the transposed product (stages 0-2 take the plain GEMM tiles), alone and in
             * pairs multicasting W (N=72: the pair's second tile is past N) */
            run_stage(rt, &gpu_cases[i], LOOM_F16, (loom_ikbo_stage)st, &tc, &h);
            if (fused)
                run_stage(rt, &gpu_cases[i], LOOM_F16, (loom_ikbo_stage)st, &tr, &h);
            if (i == 0 && fused) {
                run_stage(rt, &gpu_cases[i], LOOM_F16, (loom_ikbo_stage)st, &deep, &h);
                run_stage(rt, &gpu_cases[i], LOOM_F16, (loom_ikbo_stage)st, &sp_deep, &h);
            }
        }
        free_inputs(&h);
    }
    loom_runtime_destroy(rt);
}

/* Forward progress of stage 4 on the GPU.  A kernel on another stream holds most SMs (one
 * CTA each, with more shared memory than leaves room for a stage-4 CTA beside it) and
 * spins for 3 s: all but four for the config without clusters, three quarters for the one
 * with clusters of two (a cluster needs two free SMs of one GPC, and which SMs the spinner
 * leaves is the hardware's choice); stage 4 then runs on what is left.  Its tiles are claimed by
 * the CTAs that are running, so it finishes long before the spinner lets go (a static
 * schedule would leave resident CTAs waiting on user tiles of CTAs that cannot start),
 * and its output is right. */
static const char spin_src[] =
    "extern \"C\" __global__ void loom_spin(unsigned long long ns, int *started)\n"
    "{\n"
    "    extern __shared__ char held[];\n"
    "    unsigned long long t0, t;\n"
    "    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t0));\n"
    "    if (threadIdx.x == 0) atomicAdd(started, 1);\n"
    "    do { __nanosleep(100000); asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); } while (t - t0 < ns);\n"
    "    held[threadIdx.x] = 0;\n"
    "}\n";

Test(ikbo_lce, stage4_makes_progress_beside_a_kernel_holding_most_sms, .timeout = 120)
{
    loom_runtime *rt = t_gpu_or_skip();
    rt_gpu *g = rt_runtime_gpu(rt);
    char err[2048];
    rt_gpu_module *m = NULL;
    cr_assert_eq(nvref_load(g, spin_src, "spin.cu", &m, err, sizeof err), LOOM_OK, "%s", err);
    const rt_gpu_props *pr = rt_gpu_properties(g);
    lce_case c = {256, 8, 433, 256, 1178, 866, 1};
    host_io h = make_inputs(&c, LOOM_F16, 5);
    /* the default (transposed, clusters of 2) and a split config without clusters */
    loom_ikbo_lce_config cfgs[2] = {{256, 128, 4, 8, 132, 2, 1, 2}, {128, 256, 4, 8, 132, 2, 0, 1}};
    for (int ci = 0; ci < 2; ci++) {
        cfgs[ci].ctas = pr->sm_count;
        void *stream = NULL;
        cr_assert_eq(rt_gpu_stream_create(g, &stream, err, sizeof err), LOOM_OK, "%s", err);
        loom_buffer *started = loom_buffer_create(rt, 4);
        cr_assert(started);
        cr_assert_eq(loom_buffer_fill(started, 0), LOOM_OK);
        /* warm: prepare (compile, load) before the spinner holds the SMs */
        loom_ikbo_lce_shape s = {c.B, c.U, c.M, c.N, c.Ku, c.Kc, LOOM_F16, LOOM_F16};
        loom_ikbo_lce *p = NULL;
        cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_PERSISTENT, h.wu, h.wc, &cfgs[ci], &p), LOOM_OK, "%s",
                     loom_runtime_error(rt));
        size_t e = 2, neu = (size_t)(c.U * c.Ku * c.N) * e, nec = (size_t)(c.B * c.Kc * c.N) * e;
        size_t nout = (size_t)(c.B * c.M * c.N) * e;
        loom_buffer *eu = loom_buffer_create(rt, neu), *ec = loom_buffer_create(rt, nec);
        loom_buffer *map = loom_buffer_create(rt, (size_t)c.B * 4), *out = loom_buffer_create(rt, nout);
        cr_assert(eu && ec && map && out);
        cr_assert_eq(loom_buffer_upload(eu, h.eu, neu), LOOM_OK);
        cr_assert_eq(loom_buffer_upload(ec, h.ec, nec), LOOM_OK);
        cr_assert_eq(loom_buffer_upload(map, h.map, (size_t)c.B * 4), LOOM_OK);
        cr_assert_eq(loom_buffer_fill(out, 0xff), LOOM_OK);
        cr_assert_eq(rt_gpu_sync(g, err, sizeof err), LOOM_OK, "%s", err);

        unsigned long long ns = 3000000000ull;
        uint64_t sp = rt_buffer_dptr(started);
        void *params[2] = {&ns, &sp};
        int held = cfgs[ci].cluster > 1 ? pr->sm_count * 3 / 4 : pr->sm_count - 4;
        unsigned grid[3] = {(unsigned)held, 1, 1}, block[3] = {128, 1, 1};
        unsigned smem = (unsigned)pr->max_smem_per_block_optin / 2 + 16384; /* one a SM, no stage-4 CTA beside */
        double t0 = util_now_ms();
        cr_assert_eq(rt_gpu_module_launch_on(g, m, "loom_spin", grid, block, smem, params, stream, err, sizeof err),
                     LOOM_OK, "%s", err);
        usleep(100000); /* the spinner is on its SMs */
        cr_assert_eq(loom_ikbo_lce_run(p, eu, ec, map, out), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_assert_eq(rt_gpu_stream_sync(g, NULL, err, sizeof err), LOOM_OK, "%s", err);
        double done = util_now_ms() - t0;
        int32_t nstarted = 0;
        cr_assert_eq(rt_gpu_stream_sync(g, stream, err, sizeof err), LOOM_OK, "%s", err);
        double all = util_now_ms() - t0;
        cr_assert_eq(loom_buffer_download(started, &nstarted, 4), LOOM_OK);
        cr_expect_eq(nstarted, (int)grid[0], "the spinner held %d SMs", nstarted);
        cr_log_info("stage 4 beside the spinner on %d of %d SMs, config %d: done after %.0f ms, the spinner after %.0f ms", held,
                    pr->sm_count, ci, done, all);
        cr_expect(done < 2000 && all >= 2900, "config %d: stage 4 done after %.0f ms, the spinner after %.0f ms", ci,
                  done, all);
        cr_assert_eq(loom_buffer_download(out, h.out, nout), LOOM_OK);
        t_verdict v = lce_check(&c, LOOM_F16, &h, h.out);
        cr_expect(v.bad == 0, "config %d: %lld elements past their bound (the first at %lld), worst |err|/bound "
                  "%.3g", ci, (long long)v.bad, (long long)v.first, v.worst);
        loom_buffer_destroy(eu);
        loom_buffer_destroy(ec);
        loom_buffer_destroy(map);
        loom_buffer_destroy(out);
        loom_buffer_destroy(started);
        loom_ikbo_lce_destroy(p);
        rt_gpu_stream_destroy(g, stream);
    }
    free_inputs(&h);
    rt_gpu_module_unload(g, m);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- LOOM_IKBO_AUTO */

/* The corners of the shape space auto must serve: one candidate and one user, one user
 * for all, a user per candidate, one row of out, the narrowest N and K. */
static const lce_case corner_cases[] = {
    {1, 1, 77, 64, 37, 21, 0}, /* B = U = 1 */
    {7, 1, 65, 64, 19, 45, 0}, /* U = 1 */
    {6, 6, 70, 64, 19, 45, 1}, /* U = B, shuffled */
    {5, 3, 1, 64, 20, 70, 1},  /* M = 1 */
    {4, 2, 40, 8, 8, 8, 0},    /* N = Ku = Kc = 8 */
};
enum { NCORNER = sizeof corner_cases / sizeof corner_cases[0] };

/* Prepare c with LOOM_IKBO_AUTO (cfg may be NULL), check two runs by the rule, and
 * return the stage picked; *desc (when given) receives the description. */
static loom_ikbo_stage auto_case(loom_runtime *rt, const lce_case *c, loom_dtype dt, const loom_ikbo_lce_config *cfg,
                                 host_io *h, char *desc, size_t n, double *prepare_ms)
{
    loom_ikbo_lce_shape s = {c->B, c->U, c->M, c->N, c->Ku, c->Kc, dt, LOOM_F16};
    loom_ikbo_lce *p = NULL;
    double t0 = util_now_ms();
    loom_status r = loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_AUTO, h->wu, h->wc, cfg, &p);
    if (prepare_ms)
        *prepare_ms = util_now_ms() - t0;
    cr_assert_eq(r, LOOM_OK, "auto at B=%lld U=%lld M=%lld N=%lld Ku=%lld Kc=%lld: %s", (long long)c->B,
                 (long long)c->U, (long long)c->M, (long long)c->N, (long long)c->Ku, (long long)c->Kc,
                 loom_runtime_error(rt));
    loom_ikbo_stage st = loom_ikbo_lce_stage_of(p);
    cr_assert(st == LOOM_IKBO_MATERIALIZED || st == LOOM_IKBO_K_ALIGNED || st == LOOM_IKBO_FUSED_EPILOGUE ||
                  st == LOOM_IKBO_PERSISTENT, "auto picked stage %d", (int)st);
    const char *d = loom_ikbo_lce_describe(p);
    char head[32];
    snprintf(head, sizeof head, "stage %d (", (int)st);
    cr_assert(!strncmp(d, head, strlen(head)) && strstr(d, "; auto ("), "%s", d);
    if (desc)
        snprintf(desc, n, "%s", d);
    run_prepared(rt, c, dt, p, h);
    loom_ikbo_lce_destroy(p);
    return st;
}

/* Without a GPU nothing is timed: stage 4 with the given config (or the default one),
 * named in the description, right at every corner. */
Test(ikbo_lce, auto_on_the_interpreter_at_corner_shapes)
{
    unsetenv("LOOM_IKBO_AUTO");
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_ikbo_lce_config cfg = {64, 64, 2, 4, 5, 0, 0, 1}, sp = {128, 64, 2, 8, 3, 2, 0, 1};
    for (int i = 0; i < NCORNER; i++) {
        host_io h = make_inputs(&corner_cases[i], LOOM_F16, 31 + (uint64_t)i);
        char d[1600];
        cr_expect_eq(auto_case(rt, &corner_cases[i], LOOM_F16, &cfg, &h, d, sizeof d, NULL), LOOM_IKBO_PERSISTENT,
                     "%s", d);
        cr_expect(strstr(d, "; auto (not timed: no GPU): stage 4"), "%s", d);
        cr_expect_eq(auto_case(rt, &corner_cases[i], LOOM_F16, &sp, &h, NULL, 0, NULL), LOOM_IKBO_PERSISTENT);
        free_inputs(&h);
    }
    /* the default config (cfg NULL: transposed, pairs of CTAs) at two corners */
    for (int i = 0; i < NCORNER; i += 3) {
        host_io h = make_inputs(&corner_cases[i], LOOM_BF16, 41 + (uint64_t)i);
        cr_expect_eq(auto_case(rt, &corner_cases[i], LOOM_BF16, NULL, &h, NULL, 0, NULL), LOOM_IKBO_PERSISTENT);
        free_inputs(&h);
    }
    loom_runtime_destroy(rt);
}

/* A config stage 4 cannot take (ping-pong: its turns need the tiles known ahead) leaves
 * auto the next stage, with the reason; LOOM_IKBO_AUTO=0 says auto is off. */
Test(ikbo_lce, auto_without_timing_falls_back_and_can_be_turned_off)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    const lce_case *c = &small_cases[0];
    host_io h = make_inputs(c, LOOM_F16, 3);
    char d[1600];
    loom_ikbo_lce_config pp = {64, 64, 3, 8, 5, 1, 0, 1};
    unsetenv("LOOM_IKBO_AUTO");
    cr_expect_eq(auto_case(rt, c, LOOM_F16, &pp, &h, d, sizeof d, NULL), LOOM_IKBO_FUSED_EPILOGUE, "%s", d);
    cr_expect(strstr(d, "stage 3, as stage 4 cannot serve the config (") && strstr(d, "ping-pong"), "%s", d);
    setenv("LOOM_IKBO_AUTO", "0", 1);
    loom_ikbo_lce_config cfg = {64, 64, 2, 4, 5, 0, 0, 1};
    cr_expect_eq(auto_case(rt, c, LOOM_F16, &cfg, &h, d, sizeof d, NULL), LOOM_IKBO_PERSISTENT, "%s", d);
    cr_expect(strstr(d, "auto (not timed: LOOM_IKBO_AUTO=0): stage 4"), "%s", d);
    unsetenv("LOOM_IKBO_AUTO");
    /* names, the accessor, and a stage past AUTO */
    cr_expect_str_eq(loom_ikbo_stage_name(LOOM_IKBO_AUTO), "auto");
    cr_expect_eq(loom_ikbo_lce_stage_of(NULL), LOOM_IKBO_AUTO);
    loom_ikbo_lce_shape s = {c->B, c->U, c->M, c->N, c->Ku, c->Kc, LOOM_F16, LOOM_F16};
    loom_ikbo_lce *p = NULL;
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, (loom_ikbo_stage)6, h.wu, h.wc, &cfg, &p), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "stage 6 is not 0 to 4 or LOOM_IKBO_AUTO (5)"), "%s",
              loom_runtime_error(rt));
    cr_assert_null(p);
    /* a config no fused stage takes is refused with stage 4's reason */
    loom_ikbo_lce_config bad = {64, 64, 1, 4, 5, 0, 0, 1};
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_AUTO, h.wu, h.wc, &bad, &p), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "stages must be 2 to 8"), "%s", loom_runtime_error(rt));
    free_inputs(&h);
    loom_runtime_destroy(rt);
}

/* A private cache directory for the test (Criterion runs each test in its own process). */
static void private_cache(char *dir, size_t n)
{
    snprintf(dir, n, "/tmp/loom_ikbo_auto_XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp");
    setenv("LOOM_CACHE_DIR", dir, 1);
    unsetenv("LOOM_TUNE_CACHE");
    unsetenv("LOOM_TUNE_FORCE");
    unsetenv("LOOM_TUNE");
    unsetenv("LOOM_IKBO_AUTO");
}

/* On the GPU: auto times the stages at the shape and keeps the fastest, whose output is
 * right; a second prepare reads the pick from the cache and times nothing;
 * LOOM_TUNE_FORCE=1 times again.  The shapes: issue 21's small-K one (where the
 * framework's path beat stage 4), one user per candidate at the headline's M and K with
 * N = 72, and corners. */
Test(ikbo_lce, auto_on_the_gpu_picks_checks_and_caches, .timeout = 900)
{
    loom_runtime *rt = t_gpu_or_skip();
    char dir[64];
    private_cache(dir, sizeof dir);
    static const lce_case cases[] = {
        {1000, 7, 200, 136, 64, 8, 0},   /* small K */
        {48, 48, 433, 72, 1025, 1023, 1}, /* U = B */
        {1, 1, 77, 64, 37, 21, 0},        /* B = U = 1 */
        {7, 1, 65, 64, 19, 45, 0},        /* U = 1 */
        {5, 3, 1, 64, 20, 70, 1},         /* M = 1 */
        {4, 2, 40, 8, 8, 8, 0},           /* N = Ku = Kc = 8 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const lce_case *c = &cases[i];
        host_io h = make_inputs(c, LOOM_F16, 51 + (uint64_t)i);
        char d[1600], d2[1600];
        double cold, warm;
        loom_ikbo_stage st = auto_case(rt, c, LOOM_F16, NULL, &h, d, sizeof d, &cold);
        cr_expect(strstr(d, "; auto (timed):") && strstr(d, "(picked)"), "%s", d);
        /* every stage timed on 3 input sets, and up to LOOM_IKBO_AUTO_PLACES (default 8)
         * while the pick is not settled */
        const char *on = strstr(d, "on each of ");
        int places = 0;
        cr_expect(on && sscanf(on, "on each of %d input placements", &places) == 1 && places >= 3 && places <= 8,
                  "%s", d);
        cr_expect(places == 3 || strstr(d, "more than the first while the pick was not settled"), "%s", d);
        loom_ikbo_stage st2 = auto_case(rt, c, LOOM_F16, NULL, &h, d2, sizeof d2, &warm);
        cr_expect_eq(st2, st, "the cached pick %d is not the timed one %d", (int)st2, (int)st);
        cr_expect(strstr(d2, "; auto (cached):") && strstr(d2, "(picked)"), "%s", d2);
        cr_log_info("B=%lld U=%lld M=%lld N=%lld Ku=%lld Kc=%lld: prepare %.0f ms timed, %.1f ms cached: %s",
                    (long long)c->B, (long long)c->U, (long long)c->M, (long long)c->N, (long long)c->Ku,
                    (long long)c->Kc, cold, warm, d);
        if (i == 0) { /* LOOM_TUNE_FORCE=1: timed again */
            setenv("LOOM_TUNE_FORCE", "1", 1);
            auto_case(rt, c, LOOM_F16, NULL, &h, d2, sizeof d2, NULL);
            cr_expect(strstr(d2, "; auto (timed):"), "%s", d2);
            unsetenv("LOOM_TUNE_FORCE");
        }
        free_inputs(&h);
    }
    /* the picks sit in the tuning cache beside the configs */
    char path[128];
    snprintf(path, sizeof path, "%s/tune.json", dir);
    FILE *f = fopen(path, "r");
    cr_assert(f, "no tuning cache at %s", path);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    /* (cJSON writes a tab after a key's colon) */
    cr_expect(strstr(text, "\"ikbo_lce_stage\"") && strstr(text, "|pick=stage|cfg=") && strstr(text, "|places=8"),
              "%.2000s", text);
    loom_runtime_destroy(rt);
}
