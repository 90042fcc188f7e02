/*
 * test_gemm_gpu.c -- the gemm template on the GPU against its plain-C reference, in every
 * consumer scheme: cooperative (the consumer warp groups split a tile), ping-pong (two
 * warp groups take turns on whole tiles) and split (two share each tile by rows), each with the epilogue storing from registers or
 * through shared memory and TMA (tmastore=1), at shapes with tails in M, N and K, batches with
 * A shared or not, every output dtype, and CTA counts that leave one replica a tile short
 * (ctas=2, 3, 5 below).  Then the public API (loom_gemm_prepare / loom_gemm_run) at shapes
 * whose K or N is not a multiple of 8, where each run copies an operand into a padded
 * buffer first.  Skipped without a GPU; the interpreter runs the same template in
 * test_hopper_ir.c and the same API in test_gemm_api.c.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"
#include "t_nvref.h"
#include "rt.h"
#include "t_model.h"
#include "testutil.h"
#include "tpl.h"

static void check(loom_runtime *rt, const char *shape, const char *config, uint64_t seed)
{
    const loom_template *t = loom_template_find("gemm");
    cr_assert(t);
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char err[512], rep[1024];
    cr_assert_eq(loom_params_parse(t->shape, t->nshape, shape, sh, err, sizeof err), 0, "%s", err);
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, config, cf, err, sizeof err), 0, "%s", err);
    if (!t->valid(sh, cf, err, sizeof err)) /* e.g. an f32 staging buffer that does not fit */
        return;
    loom_status st = loom_template_check(rt, t, sh, cf, seed, rep, sizeof rep);
    cr_expect_eq(st, LOOM_OK, "gemm [%s] [%s]: %s", shape, config, rep);
}

static const char *const shapes[] = {
    "M=300,N=200,K=136",
    "M=433,N=256,K=872,batch=6,dtype=bf16",
    "M=77,N=72,K=40,batch=5,dtype=bf16,odtype=f32,ashared=0",
    "M=600,N=520,K=392,odtype=f32",
};

/* Every config at every shape (the inputs' seed: seed + the shape's index). */
static void check_configs(const char *const *configs, size_t n, uint64_t seed)
{
    loom_runtime *rt = t_gpu_or_skip();
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (size_t c = 0; c < n; c++)
            check(rt, shapes[s], configs[c], seed + s);
    loom_runtime_destroy(rt);
}

Test(gemm_gpu, cooperative)
{
    static const char *const configs[] = {"", "BM=128,BN=256,cwarps=8,tmastore=0", "BM=128,cwarps=8,BN=128,stages=3,ctas=3,tmastore=0",
                                          "BM=64,cwarps=4,BN=64,stages=2,ctas=0,tmastore=0",
                                          "BM=128,BN=256,cwarps=8,tmastore=1,stages=3", "BM=64,cwarps=4,BN=256,tmastore=1,ctas=0"};
    check_configs(configs, sizeof configs / sizeof *configs, 100);
}

Test(gemm_gpu, pingpong)
{
    static const char *const configs[] = {"BM=128,cwarps=8,consumers=1,BN=128", "BM=128,cwarps=8,consumers=1,BN=128,ctas=2,stages=6",
                                          "cwarps=8,consumers=1,BM=64,BN=256,stages=5,ctas=5",
                                          "cwarps=8,consumers=1,BM=64,BN=64,stages=2,ctas=3",
                                          "cwarps=8,consumers=1,BM=64,BN=256,stages=4,tmastore=1",
                                          "BM=128,cwarps=8,consumers=1,BN=128,stages=5,ctas=3,tmastore=1",
                                          "BM=128,cwarps=8,consumers=1,BN=128,stages=2,ctas=2,tmastore=1"};
    check_configs(configs, sizeof configs / sizeof *configs, 200);
}

Test(gemm_gpu, split)
{
    static const char *const configs[] = {"BM=128,BN=256,cwarps=8,consumers=2", "BM=128,BN=256,cwarps=8,consumers=2,tmastore=1", "BM=128,BN=256,cwarps=8,consumers=2,tmastore=1,ctas=3,stages=2",
                                          "cwarps=8,consumers=2,BM=256,BN=128,tmastore=1,ctas=5",
                                          "BM=128,cwarps=8,consumers=2,BN=64,stages=3,ctas=0"};
    check_configs(configs, sizeof configs / sizeof *configs, 300);
}

/* Clusters of two CTAs: tiles stacked along M sharing B (each multicasts half of it), and
 * share=1, the same tile of two consecutive products of a batch sharing one A (each
 * multicasts half of A's rows; batch=5 and 7: the last pair's second product is past the
 * batch), at batched shapes with one A and at shapes where the template refuses (skipped). */
Test(gemm_gpu, clusters)
{
    static const char *const cshapes[] = {"M=77,N=72,K=40,batch=5", "M=64,N=8,K=1184,batch=7,dtype=bf16",
                                          "M=433,N=256,K=872,batch=6", "M=300,N=200,K=136,odtype=f32"};
    static const char *const configs[] = {"BM=128,BN=256,cwarps=8,consumers=2,cluster=2,ctas=4",
                                          "BM=64,BN=128,cluster=2,ctas=6,stages=3,tmastore=0",
                                          "BM=64,BN=64,cluster=2,share=1,ctas=4",
                                          "BM=64,BN=64,cluster=2,share=1,ctas=6,stages=8,tmastore=0",
                                          "BM=128,BN=128,cwarps=8,consumers=1,cluster=2,share=1,ctas=4,tmastore=1",
                                          "BM=128,BN=256,cwarps=8,cluster=2,share=1,ctas=132"};
    loom_runtime *rt = t_gpu_or_skip();
    for (size_t s = 0; s < sizeof cshapes / sizeof *cshapes; s++)
        for (size_t c = 0; c < sizeof configs / sizeof *configs; c++)
            check(rt, cshapes[s], configs[c], 600 + s);
    loom_runtime_destroy(rt);
}

/* BK=32: A in 64-byte swizzled rows, twice the ring slots for the same shared memory */
Test(gemm_gpu, bk32)
{
    static const char *const configs[] = {"BM=128,BN=256,cwarps=8,BK=32,stages=8,tmastore=0", "BK=32,stages=6,BM=128,BN=256,cwarps=8,consumers=2,tmastore=1,ctas=3",
                                          "BK=32,stages=8,BN=256,cwarps=8,consumers=1,BM=64,tmastore=1",
                                          "BK=32,stages=9,BM=64,cwarps=4,BN=256,tmastore=1"};
    check_configs(configs, sizeof configs / sizeof *configs, 400);
}

/* ---------------------------------------------------------------- the public API
 * loom_gemm_prepare / loom_gemm_run (templates/gemm_api.c) on the GPU: shapes whose K or
 * N is not a multiple of 8 (each run copies the operand into a padded buffer first), small
 * ones against a double-precision host reference and a large one against the NVRTC
 * reference, and the run's refusals.  The interpreter runs the same API in
 * test_gemm_api.c. */

/* M, N, K, batch, dtype, odtype, a_shared */
static const loom_gemm_shape api_shapes[] = {
    {77, 13, 29, 1, LOOM_F16, LOOM_F16, 0},
    {1, 1, 1, 1, LOOM_F16, LOOM_F16, 0},
    {300, 8, 7, 1, LOOM_F16, LOOM_F16, 0},   /* K odd only */
    {300, 13, 8, 1, LOOM_F16, LOOM_F16, 0},  /* N odd only */
    {65, 6, 24, 1, LOOM_F16, LOOM_F32, 0},   /* N odd only, f32 out */
    {130, 130, 70, 3, LOOM_BF16, LOOM_BF16, 0}, /* A per product */
    {257, 301, 133, 1, LOOM_F16, LOOM_F32, 0},
    {200, 1001, 1000, 1, LOOM_BF16, LOOM_BF16, 0},
};

enum { API_GUARD = 256, API_REPEATS = 3 };

/* One shape's inputs on the host and the device, and its reference (double). */
typedef struct api_case {
    const loom_gemm_shape *s;
    int64_t na, nb, nc;
    void *c;         /* the download: nc outputs and the guard bytes after them */
    double *ref;     /* [batch, M, N] */
    double *mag;     /* [batch, M, N]: sum_k |a b|, the error model's scale */
    loom_buffer *A, *B, *C;
} api_case;

static int64_t api_a_elems(const loom_gemm_shape *s)
{
    return (s->batch > 1 && !s->a_shared ? s->batch : 1) * s->M * s->K;
}

/* Random inputs (uniform in [-1, 1), rounded to the dtype), uploaded; the reference in
 * double from the rounded values, with its magnitudes; C with API_GUARD bytes past the
 * outputs. */
static void api_case_make(loom_runtime *rt, api_case *x, const loom_gemm_shape *s, uint64_t seed)
{
    memset(x, 0, sizeof *x);
    x->s = s;
    x->na = api_a_elems(s);
    x->nb = s->batch * s->K * s->N;
    x->nc = s->batch * s->M * s->N;
    size_t e = loom_dtype_size(s->dtype), cbytes = (size_t)x->nc * loom_dtype_size(s->odtype) + API_GUARD;
    void *a = malloc((size_t)x->na * e), *b = malloc((size_t)x->nb * e);
    double *da = malloc((size_t)x->na * sizeof *da), *db = malloc((size_t)x->nb * sizeof *db);
    x->c = malloc(cbytes);
    x->ref = calloc((size_t)x->nc, sizeof *x->ref);
    x->mag = calloc((size_t)x->nc, sizeof *x->mag);
    cr_assert(a && b && da && db && x->c && x->ref && x->mag);
    tpl_fill(a, s->dtype, x->na, -1, 1, &seed);
    tpl_fill(b, s->dtype, x->nb, -1, 1, &seed);
    for (int64_t i = 0; i < x->na; i++)
        da[i] = tpl_get(a, s->dtype, i);
    for (int64_t i = 0; i < x->nb; i++)
        db[i] = tpl_get(b, s->dtype, i);
    t_gemm_ref(s, da, db, x->ref, x->mag);
    x->A = loom_buffer_create(rt, (size_t)x->na * e);
    x->B = loom_buffer_create(rt, (size_t)x->nb * e);
    x->C = loom_buffer_create(rt, cbytes);
    cr_assert(x->A && x->B && x->C, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_upload(x->A, a, (size_t)x->na * e), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_upload(x->B, b, (size_t)x->nb * e), LOOM_OK, "%s", loom_runtime_error(rt));
    free(a), free(b), free(da), free(db);
}

static void api_case_free(api_case *x)
{
    loom_buffer_destroy(x->A), loom_buffer_destroy(x->B), loom_buffer_destroy(x->C);
    free(x->c), free(x->ref), free(x->mag);
}

/* Prepare x's shape with config and run it API_REPEATS times, each into a poisoned C
 * (NaN until written): every output within its bound by the gemm's error model (t_model.h:
 * gamma_K sum |a b| and one ulp of the output), none left unwritten, no byte past the
 * outputs touched. */
static void api_case_check(loom_runtime *rt, const api_case *x, const char *config)
{
    const loom_gemm_shape *s = x->s;
    loom_gemm *p = NULL;
    cr_assert_eq(loom_gemm_prepare(rt, s, config, &p), LOOM_OK, "M=%lld N=%lld K=%lld [%s]: %s", (long long)s->M,
                 (long long)s->N, (long long)s->K, config, loom_runtime_error(rt));
    const char *desc = loom_gemm_describe(p);
    if (s->K % 8 || s->N % 8)
        cr_expect(strstr(desc, "copied"), "%s", desc);
    if (s->N % 8)
        cr_expect(strstr(desc, "tmastore=0"), "%s", desc);
    size_t obytes = (size_t)x->nc * loom_dtype_size(s->odtype);
    for (int r = 0; r < API_REPEATS; r++) {
        cr_assert_eq(loom_buffer_fill(x->C, 0xff), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_assert_eq(loom_gemm_run(p, x->A, x->B, x->C), LOOM_OK, "[%s] %s", desc, loom_runtime_error(rt));
        cr_assert_eq(loom_runtime_sync(rt, 30000), LOOM_OK, "[%s] %s", desc, loom_runtime_error(rt));
        cr_assert_eq(loom_buffer_download(x->C, x->c, obytes + API_GUARD), LOOM_OK, "%s", loom_runtime_error(rt));
        int64_t nonfinite = 0;
        for (int64_t i = 0; i < x->nc; i++)
            nonfinite += !isfinite(tpl_get(x->c, s->odtype, i));
        t_verdict v = t_gemm_check(s->odtype, s->K, x->c, x->ref, x->mag, x->nc);
        int64_t bad = v.bad, first = v.first;
        int64_t guard = 0;
        for (size_t i = 0; i < API_GUARD; i++)
            guard += ((const unsigned char *)x->c)[obytes + i] != 0xff;
        long long fb = first < 0 ? 0 : first / (s->M * s->N), fm = first < 0 ? 0 : first / s->N % s->M,
                  fn = first < 0 ? 0 : first % s->N;
        cr_expect_eq(bad, 0,
                     "M=%lld N=%lld K=%lld batch=%lld %s->%s [%s] run %d: %lld of %lld past their bound (%lld not "
                     "finite; worst |err|/bound %.3g), first at b=%lld m=%lld n=%lld: %.9g, want %.9g +- %.3g",
                     (long long)s->M, (long long)s->N, (long long)s->K, (long long)s->batch,
                     loom_dtype_name(s->dtype), loom_dtype_name(s->odtype), desc, r, (long long)bad,
                     (long long)x->nc, (long long)nonfinite, v.worst, fb, fm, fn, v.got, v.ref, v.bound);
        cr_expect_eq(guard, 0, "M=%lld N=%lld K=%lld [%s] run %d: %lld bytes past C written", (long long)s->M,
                     (long long)s->N, (long long)s->K, desc, r, (long long)guard);
        if (bad || guard)
            break; /* one report is enough */
    }
    loom_gemm_destroy(p);
}

/* Every API shape with one config. */
static void api_check_config(const char *config, uint64_t seed)
{
    loom_runtime *rt = t_gpu_or_skip();
    for (size_t i = 0; i < sizeof api_shapes / sizeof *api_shapes; i++) {
        api_case x;
        api_case_make(rt, &x, &api_shapes[i], seed + i);
        api_case_check(rt, &x, config);
        api_case_free(&x);
    }
    loom_runtime_destroy(rt);
}

Test(gemm_gpu, api_odd_defaults) { api_check_config("", 500); }
Test(gemm_gpu, api_odd_pingpong) { api_check_config("BM=128,BN=128,cwarps=8,consumers=1,ctas=3", 600); }
Test(gemm_gpu, api_odd_split) { api_check_config("BM=128,BN=128,cwarps=8,consumers=2,stages=3", 700); }
/* the old design's intermittent race was at M=77 N=13 K=29 with BK=32, stages=6 */
Test(gemm_gpu, api_odd_bk32) { api_check_config("BK=32,stages=6,BM=128,BN=128,cwarps=8", 800); }

/* 4097x3001x1000 in f16 and bf16 (N odd: B copied to rows of 3008, C stored from the
 * registers), inputs filled on the device, checked against the NVRTC reference. */
Test(gemm_gpu, api_large_odd)
{
    loom_runtime *rt = t_gpu_or_skip();
    char err[1024];
    nvref_gemm *ref = t_nvref_or_skip(rt);
    static const loom_dtype dts[] = {LOOM_F16, LOOM_BF16};
    for (size_t d = 0; d < 2; d++) {
        loom_gemm_shape s = {4097, 3001, 1000, 1, dts[d], dts[d], 0};
        nvref_gemm_shape ns = {s.M, s.N, s.K, s.batch, s.a_shared, s.dtype, 0};
        size_t e = loom_dtype_size(s.dtype);
        loom_buffer *a = loom_buffer_create(rt, (size_t)(s.M * s.K) * e);
        loom_buffer *b = loom_buffer_create(rt, (size_t)(s.K * s.N) * e);
        loom_buffer *c = loom_buffer_create(rt, (size_t)(s.M * s.N) * e);
        cr_assert(a && b && c, "%s", loom_runtime_error(rt));
        cr_assert_eq(nvref_gemm_fill(ref, rt_buffer_dptr(a), s.dtype, s.M * s.K, 10 + d, -1, 1, err, sizeof err),
                     LOOM_OK, "%s", err);
        cr_assert_eq(nvref_gemm_fill(ref, rt_buffer_dptr(b), s.dtype, s.K * s.N, 20 + d, -1, 1, err, sizeof err),
                     LOOM_OK, "%s", err);
        loom_gemm *p = NULL;
        cr_assert_eq(loom_gemm_prepare(rt, &s, "", &p), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_expect(strstr(loom_gemm_describe(p), "B copied"), "%s", loom_gemm_describe(p));
        for (int r = 0; r < 2; r++) { /* the second run reuses the padded copy of B */
            cr_assert_eq(loom_buffer_fill(c, 0xff), LOOM_OK, "%s", loom_runtime_error(rt));
            cr_assert_eq(loom_gemm_run(p, a, b, c), LOOM_OK, "%s", loom_runtime_error(rt));
            nvref_gemm_report rep;
            cr_assert_eq(nvref_gemm_check(ref, &ns, rt_buffer_dptr(a), rt_buffer_dptr(b), rt_buffer_dptr(c), s.odtype,
                                          &rep, err, sizeof err),
                         LOOM_OK, "%s", err);
            cr_expect_eq(rep.bad, 0,
                         "4097x3001x1000 %s [%s] run %d: %llu of %llu past their bound (%llu not finite; worst "
                         "|err|/bound %.3g); first at %lld: %.9g, want %.9g +- %.3g",
                         loom_dtype_name(s.dtype), loom_gemm_describe(p), r, (unsigned long long)rep.bad,
                         (unsigned long long)rep.checked, (unsigned long long)rep.nonfinite, rep.worst,
                         (long long)rep.first_bad, rep.first_out, rep.first_ref, rep.first_bound);
        }
        loom_gemm_destroy(p);
        loom_buffer_destroy(a), loom_buffer_destroy(b), loom_buffer_destroy(c);
    }
    nvref_gemm_close(ref);
    loom_runtime_destroy(rt);
}

/* A run's bad buffers are refused, naming them, before anything is launched. */
Test(gemm_gpu, api_refusals)
{
    loom_runtime *rt = t_gpu_or_skip();
    loom_gemm_shape s = {77, 13, 29, 1, LOOM_F16, LOOM_F16, 0};
    loom_gemm *p = NULL;
    cr_assert_eq(loom_gemm_prepare(rt, &s, "", &p), LOOM_OK, "%s", loom_runtime_error(rt));
    size_t cbytes = 77 * 13 * 2;
    loom_buffer *a = loom_buffer_create(rt, 77 * 29 * 2), *b = loom_buffer_create(rt, 29 * 13 * 2);
    loom_buffer *c = loom_buffer_create(rt, cbytes - 1), *c_ok = loom_buffer_create(rt, cbytes);
    cr_assert(a && b && c && c_ok, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_fill(a, 0), LOOM_OK);
    cr_assert_eq(loom_buffer_fill(b, 0), LOOM_OK);
    cr_assert_eq(loom_buffer_fill(c, 0xff), LOOM_OK);
    cr_expect_eq(loom_gemm_run(p, a, b, c), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "C has 2001 bytes"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_gemm_run(p, a, NULL, c_ok), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "B is NULL"), "%s", loom_runtime_error(rt));
    /* nothing ran: the short C is as it was */
    cr_assert_eq(loom_runtime_sync(rt, 30000), LOOM_OK, "%s", loom_runtime_error(rt));
    unsigned char host[77 * 13 * 2];
    cr_assert_eq(loom_buffer_download(c, host, cbytes - 1), LOOM_OK);
    size_t touched = 0;
    for (size_t i = 0; i < cbytes - 1; i++)
        touched += host[i] != 0xff;
    cr_expect_eq(touched, 0, "%zu bytes of the refused C written", touched);
    /* and the plan still runs: zeros in, zeros out */
    cr_expect_eq(loom_gemm_run(p, a, b, c_ok), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_runtime_sync(rt, 30000), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_download(c_ok, host, cbytes), LOOM_OK);
    touched = 0;
    for (size_t i = 0; i < cbytes; i++)
        touched += host[i] != 0;
    cr_expect_eq(touched, 0, "%zu bytes of C not zero", touched);
    loom_buffer_destroy(a), loom_buffer_destroy(b), loom_buffer_destroy(c), loom_buffer_destroy(c_ok);
    loom_gemm_destroy(p);
    loom_runtime_destroy(rt);
}
