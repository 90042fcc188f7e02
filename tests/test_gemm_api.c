/*
 * test_gemm_api.c -- loom_gemm_prepare / loom_gemm_run (templates/gemm_api.c) on the
 * interpreter: shapes whose rows TMA cannot address (K or N not a multiple of 8), where
 * each run copies the operand into a padded buffer first, checked element by element
 * against a double-precision reference by the gemm's error model (t_model.h: gamma_K
 * sum |a b| and one ulp of the output), an element planted just past its bound caught;
 * and the refusals, each naming its argument.
 * The GPU runs of the same API are in test_gemm_gpu.c.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"
#include "t_model.h"
#include "testutil.h"
#include "tpl.h"

static loom_runtime *interp(void)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt && loom_runtime_status(rt) == LOOM_OK);
    return rt;
}

static loom_buffer *upload(loom_runtime *rt, const void *host, size_t bytes)
{
    loom_buffer *b = loom_buffer_create(rt, bytes);
    cr_assert_not_null(b);
    cr_assert_eq(loom_buffer_upload(b, host, bytes), LOOM_OK);
    return b;
}

/* Run s through the API with config (NULL: the tuner's pick, the default on the
 * interpreter) and compare every output element with the reference. */
static void check(const loom_gemm_shape *s, const char *config, uint64_t seed)
{
    loom_runtime *rt = interp();
    int64_t na = (s->batch > 1 && !s->a_shared ? s->batch : 1) * s->M * s->K, nb = s->batch * s->K * s->N;
    int64_t nc = s->batch * s->M * s->N;
    size_t e = loom_dtype_size(s->dtype), oe = loom_dtype_size(s->odtype);
    void *a = malloc((size_t)na * e), *b = malloc((size_t)nb * e), *c = malloc((size_t)nc * oe);
    cr_assert(a && b && c);
    tpl_fill(a, s->dtype, na, -1, 1, &seed);
    tpl_fill(b, s->dtype, nb, -1, 1, &seed);
    loom_gemm *p = NULL;
    cr_assert_eq(loom_gemm_prepare(rt, s, config, &p), LOOM_OK, "%s", loom_runtime_error(rt));
    if (s->K % 8 || s->N % 8)
        cr_expect(strstr(loom_gemm_describe(p), "copied"), "%s", loom_gemm_describe(p));
    loom_buffer *ba = upload(rt, a, (size_t)na * e), *bb = upload(rt, b, (size_t)nb * e);
    loom_buffer *bc = loom_buffer_create(rt, (size_t)nc * oe);
    cr_assert_not_null(bc);
    cr_assert_eq(loom_buffer_fill(bc, 0xff), LOOM_OK); /* NaN until written */
    cr_assert_eq(loom_gemm_run(p, ba, bb, bc), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_download(bc, c, (size_t)nc * oe), LOOM_OK);
    double *da = malloc((size_t)na * sizeof *da), *db = malloc((size_t)nb * sizeof *db);
    double *ref = malloc((size_t)nc * sizeof *ref), *mag = malloc((size_t)nc * sizeof *mag);
    cr_assert(da && db && ref && mag);
    for (int64_t i = 0; i < na; i++)
        da[i] = tpl_get(a, s->dtype, i);
    for (int64_t i = 0; i < nb; i++)
        db[i] = tpl_get(b, s->dtype, i);
    t_gemm_ref(s, da, db, ref, mag);
    t_verdict v = t_gemm_check(s->odtype, s->K, c, ref, mag, nc);
    cr_expect_eq(v.bad, 0,
                 "M=%lld N=%lld K=%lld batch=%lld [%s]: %lld of %lld past their bound (worst |err|/bound %.3g), "
                 "first at %lld: %.9g, want %.9g +- %.3g",
                 (long long)s->M, (long long)s->N, (long long)s->K, (long long)s->batch, config ? config : "tuned",
                 (long long)v.bad, (long long)nc, v.worst, (long long)v.first, v.got, v.ref, v.bound);
    /* and the check catches a wrong element: the first, the last and a middle one moved
     * to the nearest value of odtype just past its bound (up and down), or NaN */
    int64_t at[3] = {0, nc - 1, nc / 2};
    for (int w = 0; w < 3 && v.bad == 0; w++)
        for (int kind = 0; kind < 3; kind++) {
            double keep = tpl_get(c, s->odtype, at[w]), r, bnd;
            t_gemm_expected(s->odtype, s->K, ref[at[w]], mag[at[w]], &r, &bnd);
            double x = kind == 0   ? t_just_past(s->odtype, r, bnd, 1)
                       : kind == 1 ? t_just_past(s->odtype, r, bnd, -1)
                                   : NAN;
            tpl_set(c, s->odtype, at[w], x);
            t_verdict pv = t_gemm_check(s->odtype, s->K, c, ref, mag, nc);
            cr_expect(pv.bad == 1 && pv.first == at[w], "C[%lld] = %.9g (reference %.9g, bound %.3g): %lld reported",
                      (long long)at[w], x, r, bnd, (long long)pv.bad);
            tpl_set(c, s->odtype, at[w], keep);
        }
    free(da), free(db), free(ref), free(mag);
    loom_buffer_destroy(ba), loom_buffer_destroy(bb), loom_buffer_destroy(bc);
    loom_gemm_destroy(p);
    loom_runtime_destroy(rt);
    free(a), free(b), free(c);
}

Test(gemm_api, odd_k_and_n_are_padded_and_right)
{
    check(&(loom_gemm_shape){77, 13, 29, 1, LOOM_F16, LOOM_F16, 1}, NULL, 1);
    check(&(loom_gemm_shape){77, 13, 29, 1, LOOM_F16, LOOM_F16, 1}, "BK=32,stages=6,BM=128,BN=128,cwarps=8", 2);
    check(&(loom_gemm_shape){1, 1, 1, 1, LOOM_F16, LOOM_F16, 1}, "", 3);
    check(&(loom_gemm_shape){40, 8, 7, 1, LOOM_BF16, LOOM_BF16, 1}, "BM=64,BN=64", 4);      /* K odd only */
    check(&(loom_gemm_shape){40, 13, 8, 1, LOOM_F16, LOOM_F32, 1}, "BM=64,BN=64", 5);       /* N odd only */
}

Test(gemm_api, batches_with_odd_rows)
{
    check(&(loom_gemm_shape){65, 6, 24, 3, LOOM_F16, LOOM_F32, 0}, "BM=64,BN=64", 6);  /* A per product */
    check(&(loom_gemm_shape){33, 10, 19, 2, LOOM_BF16, LOOM_BF16, 1}, "BM=64,BN=64,consumers=1,cwarps=8,ctas=2", 7);
}

Test(gemm_api, aligned_shapes_copy_nothing)
{
    loom_runtime *rt = interp();
    loom_gemm *p = NULL;
    cr_assert_eq(loom_gemm_prepare(rt, &(loom_gemm_shape){64, 64, 64, 1, LOOM_F16, LOOM_F16, 1}, "", &p), LOOM_OK,
                 "%s", loom_runtime_error(rt));
    cr_expect_null(strstr(loom_gemm_describe(p), "copied"), "%s", loom_gemm_describe(p));
    loom_gemm_destroy(p);
    loom_runtime_destroy(rt);
    check(&(loom_gemm_shape){64, 72, 40, 1, LOOM_F16, LOOM_F16, 1}, "BM=64,BN=128", 8);
}

Test(gemm_api, bad_input_is_refused_naming_the_argument)
{
    loom_runtime *rt = interp();
    loom_gemm *p = NULL;
    loom_gemm_shape s = {20, 13, 9, 1, LOOM_F16, LOOM_F16, 1};
    cr_expect_eq(loom_gemm_prepare(rt, NULL, "", &p), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "shape is NULL"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_gemm_prepare(rt, &(loom_gemm_shape){20, 0, 9, 1, LOOM_F16, LOOM_F16, 1}, "", &p),
                 LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "N=0"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_gemm_prepare(rt, &(loom_gemm_shape){20, 8, 9, 1, LOOM_F32, LOOM_F16, 1}, "", &p),
                 LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "dtype"), "%s", loom_runtime_error(rt));
    /* the TMA store cannot write rows of 13 elements: the caller asked for it */
    cr_expect_eq(loom_gemm_prepare(rt, &s, "tmastore=1", &p), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "tmastore"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_gemm_prepare(rt, &s, "BM=7", &p), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "BM=7"), "%s", loom_runtime_error(rt));
    cr_expect_null(p);

    cr_assert_eq(loom_gemm_prepare(rt, &s, "", &p), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_buffer *a = loom_buffer_create(rt, 20 * 9 * 2), *b = loom_buffer_create(rt, 9 * 13 * 2);
    loom_buffer *c = loom_buffer_create(rt, 20 * 13 * 2 - 1), *c_ok = loom_buffer_create(rt, 20 * 13 * 2);
    cr_assert(a && b && c && c_ok);
    cr_expect_eq(loom_gemm_run(p, a, NULL, c_ok), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "B is NULL"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_gemm_run(p, a, b, c), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "C has 519 bytes"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_gemm_run(NULL, a, b, c_ok), LOOM_ERR_INVALID);
    loom_buffer *big = loom_buffer_create(rt, 20 * 13 * 2 + 20 * 9 * 2);
    cr_assert_not_null(big);
    cr_expect_eq(loom_gemm_run(p, big, b, big), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "C is also A"), "%s", loom_runtime_error(rt));
    loom_runtime *other = interp();
    loom_buffer *elsewhere = loom_buffer_create(other, 9 * 13 * 2);
    cr_assert_not_null(elsewhere);
    cr_expect_eq(loom_gemm_run(p, a, elsewhere, c_ok), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "B is a buffer of another runtime"), "%s", loom_runtime_error(rt));
    loom_buffer_destroy(elsewhere), loom_buffer_destroy(big);
    loom_runtime_destroy(other);
    loom_buffer_destroy(a), loom_buffer_destroy(b), loom_buffer_destroy(c), loom_buffer_destroy(c_ok);
    loom_gemm_destroy(p);
    loom_runtime_destroy(rt);
}
