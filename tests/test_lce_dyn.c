/*
 * test_lce_dyn.c -- the IKBO linear compression at run-time shapes: one prepared operation
 * (B and U its maxima) runs requests of many B and U with loom_ikbo_lce_run_at, building
 * and compiling nothing, each output within the error model of the computation
 * (ik_lce_bound: the f32 sums of the kernel and of the reference, the dtype's roundings)
 * of the reference computed in double for that request.  Every stage, on the interpreter.
 * Requests outside the prepared maxima, or with buffers short of the request's shape, are
 * refused with messages naming them.  The GPU test does the same at 20 random requests.
 */
#include "ikbo_lce.h"
#include "lce_op.h" /* ik_default_config */
#include "testutil.h"
#include "tpl_device.h"

#include <math.h>

typedef struct model {
    int64_t M, N, Ku, Kc;
    void *wu, *wc; /* [M, Ku], [M, Kc] f16 */
} model;

/* One request's inputs, its reference parts (double: the candidate and user products and
 * their magnitudes, for the bound) and the operation's buffers. */
typedef struct request {
    int64_t B, U;
    void *eu, *ec;
    int32_t *map;
    double *c, *u, *ac, *au; /* [B, M, N], [U, M, N] */
} request;

static model make_model(int64_t M, int64_t N, int64_t Ku, int64_t Kc, uint64_t seed)
{
    model m = {M, N, Ku, Kc, malloc((size_t)(M * Ku) * 2), malloc((size_t)(M * Kc) * 2)};
    cr_assert(m.wu && m.wc);
    tpl_fill(m.wu, LOOM_F16, M * Ku, -1, 1, &seed);
    tpl_fill(m.wc, LOOM_F16, M * Kc, -1, 1, &seed);
    return m;
}

static request make_request(const model *m, int64_t B, int64_t U, int shuffle, uint64_t seed)
{
    int64_t mn = m->M * m->N;
    request r = {B, U, malloc((size_t)(U * m->Ku * m->N) * 2), malloc((size_t)(B * m->Kc * m->N) * 2),
                 malloc((size_t)B * 4), calloc((size_t)(B * mn), 8), calloc((size_t)(U * mn), 8),
                 calloc((size_t)(B * mn), 8), calloc((size_t)(U * mn), 8)};
    cr_assert(r.eu && r.ec && r.map && r.c && r.u && r.ac && r.au);
    tpl_fill(r.eu, LOOM_F16, U * m->Ku * m->N, -1, 1, &seed);
    tpl_fill(r.ec, LOOM_F16, B * m->Kc * m->N, -1, 1, &seed);
    ik_mapping(B, U, shuffle, seed, r.map);
    for (int64_t x = 0; x < U; x++)
        for (int64_t i = 0; i < m->M; i++)
            for (int64_t q = 0; q < m->Ku; q++) {
                double a = tpl_get(m->wu, LOOM_F16, i * m->Ku + q);
                for (int64_t j = 0; j < m->N; j++) {
                    double p = a * tpl_get(r.eu, LOOM_F16, (x * m->Ku + q) * m->N + j);
                    r.u[x * mn + i * m->N + j] += p;
                    r.au[x * mn + i * m->N + j] += fabs(p);
                }
            }
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < m->M; i++)
            for (int64_t q = 0; q < m->Kc; q++) {
                double a = tpl_get(m->wc, LOOM_F16, i * m->Kc + q);
                for (int64_t j = 0; j < m->N; j++) {
                    double p = a * tpl_get(r.ec, LOOM_F16, (b * m->Kc + q) * m->N + j);
                    r.c[b * mn + i * m->N + j] += p;
                    r.ac[b * mn + i * m->N + j] += fabs(p);
                }
            }
    return r;
}

static void free_request(request *r)
{
    free(r->eu), free(r->ec), free(r->map), free(r->c), free(r->u), free(r->ac), free(r->au);
}

/* Run request r on p (buffers sized exactly for it) and check every element of out
 * against the error model; returns the worst |err| / bound. */
static double run_and_check(loom_runtime *rt, loom_ikbo_lce *p, const model *m, const request *r)
{
    int64_t mn = m->M * m->N;
    size_t neu = (size_t)(r->U * m->Ku * m->N) * 2, nec = (size_t)(r->B * m->Kc * m->N) * 2, nout = (size_t)(r->B * mn) * 2;
    loom_buffer *eu = loom_buffer_create(rt, neu), *ec = loom_buffer_create(rt, nec);
    loom_buffer *map = loom_buffer_create(rt, (size_t)r->B * 4), *out = loom_buffer_create(rt, nout);
    cr_assert(eu && ec && map && out);
    cr_assert_eq(loom_buffer_upload(eu, r->eu, neu), LOOM_OK);
    cr_assert_eq(loom_buffer_upload(ec, r->ec, nec), LOOM_OK);
    cr_assert_eq(loom_buffer_upload(map, r->map, (size_t)r->B * 4), LOOM_OK);
    cr_assert_eq(loom_buffer_fill(out, 0xff), LOOM_OK);
    loom_status st = loom_ikbo_lce_run_at(p, r->B, r->U, eu, ec, map, out);
    cr_assert_eq(st, LOOM_OK, "B=%lld U=%lld: %s", (long long)r->B, (long long)r->U, loom_runtime_error(rt));
    cr_assert_eq(loom_runtime_sync(rt, 0), LOOM_OK, "%s", loom_runtime_error(rt));
    void *o = malloc(nout);
    cr_assert(o);
    cr_assert_eq(loom_buffer_download(out, o, nout), LOOM_OK);
    double worst = 0;
    for (int64_t b = 0; b < r->B; b++)
        for (int64_t e = 0; e < mn; e++) {
            int64_t ui = r->map[b] * mn + e, ci = b * mn + e;
            double got = tpl_get(o, LOOM_F16, ci), want = r->c[ci] + r->u[ui];
            double bnd = ik_lce_bound(r->c[ci], r->u[ui], r->ac[ci], r->au[ui], m->Ku, m->Kc);
            double q = fabs(got - want) / bnd;
            cr_assert(q <= 1.0, "stage %d, B=%lld U=%lld: out[%lld][%lld] = %g, the reference %g (bound %g)",
                      (int)loom_ikbo_lce_stage_of(p), (long long)r->B, (long long)r->U, (long long)b,
                      (long long)e, got, want, bnd);
            if (q > worst)
                worst = q;
        }
    free(o);
    loom_buffer_destroy(eu), loom_buffer_destroy(ec), loom_buffer_destroy(map), loom_buffer_destroy(out);
    return worst;
}

/* The requests of a stream: small, odd, one candidate, every user its own, the maxima. */
static const int64_t requests[][3] = {{1, 1, 0}, {24, 6, 1}, {5, 2, 0}, {17, 5, 1}, {2, 2, 0}, {13, 1, 0}, {24, 6, 0}};

static void serve_stage(loom_ikbo_stage stage)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt);
    model m = make_model(40, 24, 19, 13, 5);
    loom_ikbo_lce_shape shape = {24, 6, m.M, m.N, m.Ku, m.Kc, LOOM_F16, LOOM_F16};
    loom_ikbo_lce_config cfg = {64, 128, 3, 4, 0, 0, 0, 1}; /* small tiles: the interpreter's pace */
    if (stage >= LOOM_IKBO_FUSED_EPILOGUE)
        cfg.stages = 4;
    if (stage == LOOM_IKBO_PERSISTENT) /* persistent: a few programs take every tile */
        cfg.ctas = 6;
    loom_ikbo_lce *p = NULL;
    loom_stats before, after;
    loom_stats_get(&before);
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &shape, stage, m.wu, m.wc, &cfg, &p), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_stats_get(&after);
    int nk = 0;
    while (loom_ikbo_lce_kernel(p, nk, NULL))
        nk++;
    cr_assert_eq(after.kernels_built - before.kernels_built, (uint64_t)nk,
                 "prepare built each of the stage's %d kernels once", nk);
    loom_stats_get(&before);
    for (size_t i = 0; i < sizeof requests / sizeof requests[0]; i++) {
        request r = make_request(&m, requests[i][0], requests[i][1], (int)requests[i][2], 100 + i);
        run_and_check(rt, p, &m, &r);
        free_request(&r);
    }
    loom_stats_get(&after);
    cr_assert_eq(after.kernels_built, before.kernels_built, "the requests built no kernel");
    cr_assert_eq(after.compiles, before.compiles, "the requests compiled nothing");
    loom_ikbo_lce_destroy(p);
    free(m.wu), free(m.wc);
    loom_runtime_destroy(rt);
}

Test(lce_dyn, stage_4_serves_every_request_shape_with_one_kernel, .timeout = 600) { serve_stage(LOOM_IKBO_PERSISTENT); }
Test(lce_dyn, stage_3_serves_every_request_shape, .timeout = 600) { serve_stage(LOOM_IKBO_FUSED_EPILOGUE); }
Test(lce_dyn, stage_2_serves_every_request_shape, .timeout = 600) { serve_stage(LOOM_IKBO_K_ALIGNED); }
Test(lce_dyn, stage_1_serves_every_request_shape, .timeout = 600) { serve_stage(LOOM_IKBO_DECOMPOSED); }
Test(lce_dyn, stage_0_serves_every_request_shape, .timeout = 600) { serve_stage(LOOM_IKBO_MATERIALIZED); }

Test(lce_dyn, requests_outside_the_prepared_shape_are_refused)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    model m = make_model(16, 8, 8, 8, 9);
    loom_ikbo_lce_shape shape = {8, 3, m.M, m.N, m.Ku, m.Kc, LOOM_F16, LOOM_F16};
    loom_ikbo_lce_config cfg = {64, 128, 4, 4, 4, 0, 0, 1};
    loom_ikbo_lce *p = NULL;
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &shape, LOOM_IKBO_PERSISTENT, m.wu, m.wc, &cfg, &p), LOOM_OK, "%s",
                 loom_runtime_error(rt));
    loom_buffer *eu = loom_buffer_create(rt, 3 * 8 * 8 * 2), *ec = loom_buffer_create(rt, 8 * 8 * 8 * 2);
    loom_buffer *map = loom_buffer_create(rt, 8 * 4), *out = loom_buffer_create(rt, 8 * 16 * 8 * 2);
    REFUSED(rt, loom_ikbo_lce_run_at(p, 9, 3, eu, ec, map, out), LOOM_ERR_INVALID, "B is 9; it must be 1 to 8");
    REFUSED(rt, loom_ikbo_lce_run_at(p, 0, 1, eu, ec, map, out), LOOM_ERR_INVALID, "B is 0");
    REFUSED(rt, loom_ikbo_lce_run_at(p, 4, 4, eu, ec, map, out), LOOM_ERR_INVALID, "U is 4; it must be 1 to 3");
    /* the request's own shape is what the buffers must hold: 4 candidates need 1024 bytes of out */
    loom_buffer *small = loom_buffer_create(rt, 4 * 16 * 8 * 2 - 2);
    REFUSED(rt, loom_ikbo_lce_run_at(p, 4, 2, eu, ec, map, small), LOOM_ERR_INVALID, "out has 1022 bytes");
    /* an index past the request's U is refused (the interpreter checks the mapping) */
    int32_t bad[4] = {0, 1, 2, 0};
    cr_assert_eq(loom_buffer_upload(map, bad, sizeof bad), LOOM_OK);
    REFUSED(rt, loom_ikbo_lce_run_at(p, 4, 2, eu, ec, map, out), LOOM_ERR_INVALID, "cand_to_user[2] is 2");
    loom_buffer_destroy(small);
    loom_buffer_destroy(eu), loom_buffer_destroy(ec), loom_buffer_destroy(map), loom_buffer_destroy(out);
    loom_ikbo_lce_destroy(p);
    free(m.wu), free(m.wc);
    loom_runtime_destroy(rt);
}

/* On the GPU: one operation prepared at B=512, U=32 (the default config, the stage picked
 * per bucket by LOOM_IKBO_AUTO) serves 20 random requests, each checked (a model small
 * enough for the CPU reference). */
Test(lce_dyn_gpu, twenty_random_requests_from_one_prepared_operation, .timeout = 600)
{
    loom_runtime *rt = t_gpu_or_skip();
    model m = make_model(96, 64, 72, 40, 21);
    loom_ikbo_lce_shape shape = {512, 32, m.M, m.N, m.Ku, m.Kc, LOOM_F16, LOOM_F16};
    loom_ikbo_lce_config cfg = ik_default_config();
    loom_ikbo_lce *p = NULL;
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &shape, LOOM_IKBO_AUTO, m.wu, m.wc, &cfg, &p), LOOM_OK, "%s",
                 loom_runtime_error(rt));
    loom_stats before, after;
    loom_stats_get(&before);
    uint64_t seed = 77;
    double worst = 0;
    for (int i = 0; i < 20; i++) {
        int64_t B = 1 + (int64_t)(tpl_rand(&seed) % 512), U = 1 + (int64_t)(tpl_rand(&seed) % 32);
        if (i < 2) /* the corners */
            B = i ? 512 : 1;
        if (U > B)
            U = B;
        request r = make_request(&m, B, U, (int)(tpl_rand(&seed) % 2), seed);
        double q = run_and_check(rt, p, &m, &r);
        worst = q > worst ? q : worst;
        free_request(&r);
    }
    loom_stats_get(&after);
    cr_assert_eq(after.compiles, before.compiles, "the requests compiled nothing");
    cr_assert_eq(after.kernels_built, before.kernels_built, "the requests built no kernel");
    cr_log_info("lce_dyn_gpu: 20 requests, worst |err|/bound %.3f; %s", worst, loom_ikbo_lce_describe(p));
    loom_ikbo_lce_destroy(p);
    free(m.wu), free(m.wc);
    loom_runtime_destroy(rt);
}

/* ik_config_text spells the knobs as the table does (LOOM_IKBO_LCE_CONFIG), trans and
 * cluster only when transposed: the text tuning caches and loomc aot's files hold. */
Test(lce_dyn, config_text_is_the_tables_keys)
{
    char buf[200];
    loom_ikbo_lce_config c = ik_default_config();
    ik_config_text(&c, buf, sizeof buf);
    cr_expect_str_eq(buf, "BM=256,BN=128,stages=4,cwarps=8,ctas=132,consumers=2,trans=1,cluster=2");
    c = (loom_ikbo_lce_config){.bm = 128, .bn = 256, .stages = 3, .cwarps = 8, .ctas = 66, .consumers = 1, .cluster = 1};
    ik_config_text(&c, buf, sizeof buf);
    cr_expect_str_eq(buf, "BM=128,BN=256,stages=3,cwarps=8,ctas=66,consumers=1");
    ik_config_text(&c, buf, 8); /* cut short, still a string */
    cr_expect_str_eq(buf, "BM=128,");
}
