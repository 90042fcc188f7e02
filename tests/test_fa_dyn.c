/*
 * test_fa_dyn.c -- the IKBO flash attention at run-time shapes: one prepared operation (B
 * and U its maxima) runs requests of many B, U and per-user lengths with
 * loom_ikbo_fa_run_at, building and compiling nothing; each output is compared element by
 * element with the reference computed in double for that request, within the error model
 * (fa_bound).  On the interpreter, with and without varlen, and round-robin and claimed
 * schedules.  Requests past the maxima are refused with messages naming them.
 */
#include "ikbo_fa.h"
#include "ikbo_lce.h" /* ik_mapping */
#include "testutil.h"

#include <math.h>

enum { S = 40, H = 2, D = 64, NSEED = 3, BMAX = 12, UMAX = 4 };

/* One request: inputs at its own shape, the reference and its bound, run through p. */
static void request(loom_runtime *rt, loom_ikbo_fa *p, int64_t B, int64_t U, int varlen, uint64_t seed)
{
    fa_spec s = {.B = B, .U = U, .S = S, .H = H, .D = D, .nseed = NSEED, .dt = LOOM_F16, .varlen = varlen};
    int64_t qn = B * NSEED * H * D, kn = U * S * H * D;
    void *q = malloc((size_t)qn * 2), *k = malloc((size_t)kn * 2), *v = malloc((size_t)kn * 2);
    void *ref = malloc((size_t)qn * 2), *got = malloc((size_t)qn * 2);
    double *bnd = malloc((size_t)qn * sizeof(double));
    int32_t *map = malloc((size_t)B * 4), lens[UMAX];
    cr_assert(q && k && v && ref && got && bnd && map);
    tpl_fill(q, LOOM_F16, qn, -1, 1, &seed);
    tpl_fill(k, LOOM_F16, kn, -1, 1, &seed);
    tpl_fill(v, LOOM_F16, kn, -1, 1, &seed);
    ik_mapping(B, U, 1, seed, map);
    for (int64_t u = 0; u < U; u++) /* one user with no keys when there are several */
        lens[u] = !varlen ? S : u == 1 ? 0 : (int32_t)(1 + tpl_rand(&seed) % S);
    fa_reference(&s, q, k, v, map, varlen ? lens : NULL, ref);
    fa_bound(&s, q, k, v, map, varlen ? lens : NULL, ref, bnd);
    loom_buffer *bq = loom_buffer_create(rt, (size_t)qn * 2), *bk = loom_buffer_create(rt, (size_t)kn * 2);
    loom_buffer *bv = loom_buffer_create(rt, (size_t)kn * 2), *bo = loom_buffer_create(rt, (size_t)qn * 2);
    loom_buffer *bm = loom_buffer_create(rt, (size_t)B * 4), *bl = loom_buffer_create(rt, (size_t)U * 4);
    cr_assert(bq && bk && bv && bo && bm && bl);
    cr_assert_eq(loom_buffer_upload(bq, q, (size_t)qn * 2), LOOM_OK);
    cr_assert_eq(loom_buffer_upload(bk, k, (size_t)kn * 2), LOOM_OK);
    cr_assert_eq(loom_buffer_upload(bv, v, (size_t)kn * 2), LOOM_OK);
    cr_assert_eq(loom_buffer_upload(bm, map, (size_t)B * 4), LOOM_OK);
    cr_assert_eq(loom_buffer_upload(bl, lens, (size_t)U * 4), LOOM_OK);
    cr_assert_eq(loom_buffer_fill(bo, 0xff), LOOM_OK);
    loom_status st = loom_ikbo_fa_run_at(p, B, U, bq, bk, bv, bm, varlen ? bl : NULL, bo);
    cr_assert_eq(st, LOOM_OK, "B=%lld U=%lld: %s", (long long)B, (long long)U, loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_download(bo, got, (size_t)qn * 2), LOOM_OK);
    for (int64_t i = 0; i < qn; i++) {
        double g = tpl_get(got, LOOM_F16, i), r = tpl_get(ref, LOOM_F16, i);
        cr_assert(fabs(g - r) <= bnd[i], "B=%lld U=%lld varlen=%d: out[%lld] = %g, the reference %g (bound %g)",
                  (long long)B, (long long)U, varlen, (long long)i, g, r, bnd[i]);
    }
    loom_buffer_destroy(bq), loom_buffer_destroy(bk), loom_buffer_destroy(bv), loom_buffer_destroy(bo);
    loom_buffer_destroy(bm), loom_buffer_destroy(bl);
    free(q), free(k), free(v), free(ref), free(got), free(bnd), free(map);
}

static void serve(int varlen, int sched)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt);
    loom_ikbo_fa_shape shape = {BMAX, UMAX, S, H, D, NSEED, LOOM_F16, varlen, LOOM_F16};
    loom_ikbo_fa_config cfg = {64, 2, 6, sched, 0, 1, 1, 0, 0};
    loom_ikbo_fa *p = NULL;
    cr_assert_eq(loom_ikbo_fa_prepare(rt, &shape, &cfg, &p), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_stats before, after;
    loom_stats_get(&before);
    static const int64_t reqs[][2] = {{1, 1}, {12, 4}, {5, 2}, {7, 3}, {2, 2}, {11, 1}};
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++)
        request(rt, p, reqs[i][0], reqs[i][1], varlen, 31 + i);
    loom_stats_get(&after);
    cr_assert_eq(after.kernels_built, before.kernels_built, "the requests built no kernel");
    cr_assert_eq(after.compiles, before.compiles, "the requests compiled nothing");
    loom_ikbo_fa_destroy(p);
    loom_runtime_destroy(rt);
}

Test(fa_dyn, one_kernel_serves_every_request_shape, .timeout = 600) { serve(0, 0); }
Test(fa_dyn, varlen_requests_with_a_claimed_schedule, .timeout = 600) { serve(1, 1); }

Test(fa_dyn, requests_past_the_prepared_shape_are_refused)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_ikbo_fa_shape shape = {BMAX, UMAX, S, H, D, NSEED, LOOM_F16, 0, LOOM_F16};
    loom_ikbo_fa_config cfg = {64, 2, 6, 0, 0, 1, 1, 0, 0};
    loom_ikbo_fa *p = NULL;
    cr_assert_eq(loom_ikbo_fa_prepare(rt, &shape, &cfg, &p), LOOM_OK, "%s", loom_runtime_error(rt));
    int32_t map[BMAX + 1] = {0};
    REFUSED(rt, loom_ikbo_fa_set_request(p, BMAX + 1, 1, map, NULL), LOOM_ERR_INVALID, "B is 13; it must be 1 to 12");
    REFUSED(rt, loom_ikbo_fa_set_request(p, 3, UMAX + 1, map, NULL), LOOM_ERR_INVALID, "U is 5; it must be 1 to 4");
    map[1] = 2; /* a user past the request's U = 2 */
    REFUSED(rt, loom_ikbo_fa_set_request(p, 3, 2, map, NULL), LOOM_ERR_INVALID, "cand_to_user[1] = 2");
    /* buffers are checked at the request's shape: 2 candidates' rows need 2 * 3 * 2 * 64 elements */
    map[1] = 1;
    cr_assert_eq(loom_ikbo_fa_set_request(p, 2, 2, map, NULL), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_buffer *q = loom_buffer_create(rt, 2 * NSEED * H * D * 2 - 2), *kv = loom_buffer_create(rt, 2 * S * H * D * 2);
    REFUSED(rt, loom_ikbo_fa_launch(p, q, kv, kv, q), LOOM_ERR_INVALID, "q has 1534 bytes");
    loom_buffer_destroy(q), loom_buffer_destroy(kv);
    loom_ikbo_fa_destroy(p);
    loom_runtime_destroy(rt);
}
