/*
 * test_aot.c -- the files `loomc aot` writes (aot/), for every template at two shapes or
 * more, generated at build time into this binary (CMakeLists.txt: loom_add_aot, prefixes
 * ta_*).
 *
 * On the CPU (CI): each dispatch table gives each shape the config loomc picked (the
 * template's default, or the cost model's best valid one: what loom_tune takes without
 * timing), refuses a shape it was not generated for with a message naming the shapes it
 * has, and refuses NULLs; a template with run-time keys (row_softmax's R, the
 * broadcast-add's B and U) serves every value up to the largest generated at its other
 * keys, from the row of the smallest bucket that holds it, and refuses a value above that
 * naming the key, the value and the maximum; the generator refuses bad requests with a
 * message.
 * On a GPU: each template's AOT launch writes output bit-identical to loom's own launch of
 * the same kernel on the same inputs; the files of run-time keys launched at 20 random
 * batches each match a plain C reference; the AOT IKBO LCE operation matches
 * loom_ikbo_lce_run bit for bit and the CPU reference, and loom_ikbo_lce_run_at at requests
 * below its maxima (TMA descriptors at the request's dims); the AOT IKBO FA operation
 * matches loom_ikbo_fa_run.
 */
#include "ikbo_fa.h"
#include "ikbo_lce.h"
#include "tpl_device.h" /* ik_lce_bound */
#include "rt.h"
#include "t_model.h"
#include "testutil.h"

#include "ta_badd.h"
#include "ta_fa.h"
#include "ta_gemm.h"
#include "ta_lce.h"
#include "ta_plain.h"
#include "ta_softmax.h"

/* The shapes the build generated (CMakeLists.txt), per template. */
static const char *const gemm_shapes[] = {"M=256,N=256,K=256", "M=200,N=136,K=72,odtype=f32"};
static const char *const softmax_shapes[] = {"R=64,N=1000", "R=33,N=77", "R=2,N=16", "R=64,N=16"};
static const char *const badd_shapes[] = {"B=64,U=5,M=33,N=64", "B=10,U=10,M=8,N=256", "B=1000,U=5,M=33,N=64"};
static const char *const lce_shapes[] = {"B=64,U=5,M=100,N=64,Ku=40,Kc=24", "B=1024,U=15,M=433,N=256,Ku=1178,Kc=866"};
static const char *const fa_shapes[] = {"B=64,U=5,S=200,H=2,D=64,n_seed=3,varlen=1",
                                        "B=128,U=4,S=256,H=2,D=128,n_seed=64"};

static void parse_shape(const loom_template *t, const char *text, int64_t *shape)
{
    char err[300];
    cr_assert_eq(loom_params_parse(t->shape, t->nshape, text, shape, err, sizeof err), 0, "%s", err);
}

static int64_t key(const loom_template *t, const int64_t *shape, const char *k)
{
    for (int i = 0; i < t->nshape; i++)
        if (!strcmp(t->shape[i].key, k))
            return shape[i];
    cr_assert_fail("%s has no shape key %s", t->name, k);
    return 0;
}

/* ---------------------------------------------------------------- each template's adapter
 * From a shape vector: the generated shape struct, its config function and its launch
 * (v: the launch function's arguments in order, the kernel's but its run-time dims, which
 * the launch takes from the shape: device pointers, and scalars as their values). */

#define K(name) key(t, sh, #name)

static const char *gemm_config(const loom_template *t, const int64_t *sh)
{
    ta_gemm_gemm_shape s = {K(M), K(N), K(K), K(batch), K(dtype), K(odtype), K(ashared), K(lda), K(ldb), K(btrans),
                            K(promote), K(scaled)};
    return ta_gemm_gemm_config(&s);
}
static int gemm_launch(const loom_template *t, const int64_t *sh, const uint64_t *v)
{
    ta_gemm_gemm_shape s = {K(M), K(N), K(K), K(batch), K(dtype), K(odtype), K(ashared), K(lda), K(ldb), K(btrans),
                            K(promote), K(scaled)};
    return ta_gemm_gemm_launch(&s, v[0], v[1], v[2], NULL);
}

static const char *softmax_config(const loom_template *t, const int64_t *sh)
{
    ta_softmax_row_softmax_shape s = {K(R), K(N), K(dtype)};
    return ta_softmax_row_softmax_config(&s);
}
static int softmax_launch(const loom_template *t, const int64_t *sh, const uint64_t *v)
{
    ta_softmax_row_softmax_shape s = {K(R), K(N), K(dtype)};
    return ta_softmax_row_softmax_launch(&s, v[0], v[1], NULL);
}

static const char *badd_config(const loom_template *t, const int64_t *sh)
{
    ta_badd_ikbo_broadcast_add_shape s = {K(B), K(U), K(M), K(N), K(dtype)};
    return ta_badd_ikbo_broadcast_add_config(&s);
}
static int badd_launch(const loom_template *t, const int64_t *sh, const uint64_t *v)
{
    ta_badd_ikbo_broadcast_add_shape s = {K(B), K(U), K(M), K(N), K(dtype)};
    return ta_badd_ikbo_broadcast_add_launch(&s, v[0], v[1], v[2], v[3], NULL);
}

static ta_lce_ikbo_lce_shape lce_shape(const loom_template *t, const int64_t *sh)
{
    return (ta_lce_ikbo_lce_shape){K(B), K(U), K(M), K(N), K(Ku), K(Kc), K(dtype), K(odtype)};
}
static const char *lce_config(const loom_template *t, const int64_t *sh)
{
    ta_lce_ikbo_lce_shape s = lce_shape(t, sh);
    return ta_lce_ikbo_lce_config(&s);
}
static int lce_launch(const loom_template *t, const int64_t *sh, const uint64_t *v)
{
    ta_lce_ikbo_lce_shape s = lce_shape(t, sh);
    return ta_lce_ikbo_lce_launch(&s, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], (int32_t)v[8], v[9], NULL);
}

static ta_fa_ikbo_fa_shape fa_shape(const loom_template *t, const int64_t *sh)
{
    return (ta_fa_ikbo_fa_shape){K(B), K(U), K(S), K(H), K(D), K(n_seed), K(dtype), K(varlen), K(odt), K(vtrans)};
}
static const char *fa_config(const loom_template *t, const int64_t *sh)
{
    ta_fa_ikbo_fa_shape s = fa_shape(t, sh);
    return ta_fa_ikbo_fa_config(&s);
}
static int fa_launch(const loom_template *t, const int64_t *sh, const uint64_t *v)
{
    ta_fa_ikbo_fa_shape s = fa_shape(t, sh);
    return ta_fa_ikbo_fa_launch(&s, v[0], v[1], v[2], v[3], v[4], v[5], (int32_t)v[6], v[7], NULL);
}
static const char *plain_config(const loom_template *t, const int64_t *sh)
{
    ta_plain_gemm_plain_shape s = {K(M), K(N), K(K)};
    return ta_plain_gemm_plain_config(&s);
}
static int plain_launch(const loom_template *t, const int64_t *sh, const uint64_t *v)
{
    ta_plain_gemm_plain_shape s = {K(M), K(N), K(K)};
    return ta_plain_gemm_plain_launch(&s, v[0], v[1], v[2], NULL);
}
#undef K

typedef struct aot_case {
    const char *tname;
    const char *const *shapes;
    int nshapes;
    const char *(*config)(const loom_template *, const int64_t *);
    int (*launch)(const loom_template *, const int64_t *, const uint64_t *);
    const char *(*last_error)(void);
} aot_case;

#define SHAPES(a) a, (int)(sizeof a / sizeof a[0])
static const aot_case cases[] = {
    {"gemm", SHAPES(gemm_shapes), gemm_config, gemm_launch, ta_gemm_last_error},
    {"row_softmax", SHAPES(softmax_shapes), softmax_config, softmax_launch, ta_softmax_last_error},
    {"ikbo_broadcast_add", SHAPES(badd_shapes), badd_config, badd_launch, ta_badd_last_error},
    {"ikbo_lce", SHAPES(lce_shapes), lce_config, lce_launch, ta_lce_last_error},
    {"ikbo_fa", SHAPES(fa_shapes), fa_config, fa_launch, ta_fa_last_error},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* The config loomc aot picks without --config or --tuned: loom_tune's without timing. */
static void expected_config(const loom_template *t, const int64_t *shape, char *buf, size_t n)
{
    setenv("LOOM_TUNE", "0", 1);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_tune_opts o = {0};
    o.quiet = 1;
    loom_tuned r;
    loom_tune(rt, t, shape, 1, &o, &r);
    cr_assert_neq(r.source, LOOM_TUNE_NONE, "%s: %s", t->name, r.note);
    loom_params_format(t->config, t->nconfig, r.config, buf, n);
    loom_tuned_release(&r, 1);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- on the CPU */

Test(aot, dispatch_tables_give_each_shape_its_config)
{
    for (int c = 0; c < NCASES; c++) {
        const loom_template *t = loom_template_find(cases[c].tname);
        cr_assert(t);
        for (int i = 0; i < cases[c].nshapes; i++) {
            int64_t sh[LOOM_MAX_PARAMS];
            char want[512];
            parse_shape(t, cases[c].shapes[i], sh);
            expected_config(t, sh, want, sizeof want);
            const char *got = cases[c].config(t, sh);
            cr_assert(got, "%s at %s: %s", t->name, cases[c].shapes[i], cases[c].last_error());
            cr_expect_str_eq(got, want, "%s at %s", t->name, cases[c].shapes[i]);
        }
    }
}

Test(aot, a_shape_not_generated_is_refused_naming_those_there_are)
{
    /* N is a static key of gemm (M and batch may be run-time: the rows then show their maxima) */
    ta_gemm_gemm_shape s = {256, 512, 256, 1, 0, 0, 1, 0, 0, 0, 0, 0};
    cr_assert_null(ta_gemm_gemm_config(&s));
    const char *e = ta_gemm_last_error();
    cr_expect(strstr(e, "ta_gemm_gemm_config: no kernel was generated for shape M=256,N=512,K=256"), "%s", e);
    cr_expect(strstr(e, "256,N=256,K=256,batch") && strstr(e, "1,dtype=0,odtype=0,ashared=1,lda=0,ldb=0,btrans=0,promote=0,scaled=0}"), "%s", e);
    cr_expect(strstr(e, "loomc aot gemm --shape"), "%s", e);
    cr_expect_eq(ta_gemm_gemm_launch(&s, 256, 256, 256, NULL), TA_GEMM_ERR_INVALID);
    cr_assert_null(ta_gemm_gemm_config(NULL));
    cr_expect(strstr(ta_gemm_last_error(), "shape is NULL"), "%s", ta_gemm_last_error());
    /* the operations' NULL arguments, before any GPU is needed */
    ta_lce_ikbo_lce *op = (ta_lce_ikbo_lce *)1;
    ta_lce_ikbo_lce_shape ls = {64, 5, 100, 64, 40, 24, 0, LOOM_F16};
    cr_expect_eq(ta_lce_ikbo_lce_prepare(&ls, NULL, &ls, &op), TA_LCE_ERR_INVALID);
    cr_expect(strstr(ta_lce_last_error(), "w_user is NULL"), "%s", ta_lce_last_error());
    cr_expect_null(op);
    cr_expect_eq(ta_lce_ikbo_lce_run(NULL, 1, 1, 1, 1, NULL), TA_LCE_ERR_INVALID);
    cr_expect_eq(ta_fa_ikbo_fa_run_mapped(NULL, 16, 16, 16, 16, NULL), TA_FA_ERR_INVALID);
    cr_expect(strstr(ta_fa_last_error(), "op is NULL"), "%s", ta_fa_last_error());
}

Test(aot, launch_arguments_are_checked_before_the_driver)
{
    ta_gemm_gemm_shape s = {256, 256, 256, 1, 0, 0, 1, 0, 0, 0, 0, 0};
    cr_expect_eq(ta_gemm_gemm_launch(&s, 0, 4096, 4096, NULL), TA_GEMM_ERR_INVALID);
    cr_expect(strstr(ta_gemm_last_error(), "argument 'A' is NULL"), "%s", ta_gemm_last_error());
    cr_expect_eq(ta_gemm_gemm_launch(&s, 4096, 4100, 4096, NULL), TA_GEMM_ERR_INVALID);
    cr_expect(strstr(ta_gemm_last_error(), "argument 'B' is at 0x1004, not 16-byte aligned"), "%s",
              ta_gemm_last_error());
}

/* row_softmax's file has, at N=16, a row for R up to 2 and one for R up to 64, each with
 * the config picked at its shape: every R takes the row of the smallest bucket that holds
 * it, and an R above 64 is refused naming R, its value and the maximum. */
Test(aot, a_run_time_key_takes_the_row_of_its_bucket)
{
    const loom_template *t = loom_template_find("row_softmax");
    int64_t sh[LOOM_MAX_PARAMS];
    char small[512], large[512];
    parse_shape(t, "R=2,N=16", sh);
    expected_config(t, sh, small, sizeof small);
    parse_shape(t, "R=64,N=16", sh);
    expected_config(t, sh, large, sizeof large);
    cr_assert_str_neq(small, large, "the two rows need two configs for the test to tell them apart");
    for (int64_t R = 1; R <= 64; R++) {
        ta_softmax_row_softmax_shape s = {R, 16, LOOM_F32};
        const char *got = ta_softmax_row_softmax_config(&s);
        cr_assert(got, "R=%lld: %s", (long long)R, ta_softmax_last_error());
        cr_expect_str_eq(got, R <= 2 ? small : large, "R=%lld", (long long)R);
    }
    /* at N=1000 one row, R up to 64 */
    for (int64_t R = 1; R <= 64; R++)
        cr_expect(ta_softmax_row_softmax_config(&(ta_softmax_row_softmax_shape){R, 1000, LOOM_F32}), "R=%lld: %s",
                  (long long)R, ta_softmax_last_error());
    ta_softmax_row_softmax_shape over = {65, 16, LOOM_F32};
    cr_expect_null(ta_softmax_row_softmax_config(&over));
    const char *e = ta_softmax_last_error();
    cr_expect(strstr(e, "ta_softmax_row_softmax_config: R=65 is above this file's maximum R=64 (at N=16,dtype=2)"),
              "%s", e);
    cr_expect(strstr(e, "loomc aot row_softmax --shape ...,R=65 or more"), "%s", e);
    /* the launch refuses it before any driver call */
    cr_expect_eq(ta_softmax_row_softmax_launch(&over, 4096, 8192, NULL), TA_SOFTMAX_ERR_INVALID);
    cr_expect(strstr(ta_softmax_last_error(), "ta_softmax_row_softmax_launch: R=65 is above this file's maximum R=64"),
              "%s", ta_softmax_last_error());
    ta_softmax_row_softmax_shape zero = {0, 16, LOOM_F32};
    cr_expect_null(ta_softmax_row_softmax_config(&zero));
    cr_expect(strstr(ta_softmax_last_error(), "R=0: a run-time dim is at least 1"), "%s", ta_softmax_last_error());
    /* static keys no row has: the rows with their maxima */
    ta_softmax_row_softmax_shape other = {8, 17, LOOM_F32};
    cr_expect_null(ta_softmax_row_softmax_config(&other));
    e = ta_softmax_last_error();
    cr_expect(strstr(e, "no kernel was generated for shape R=8,N=17,dtype=2"), "%s", e);
    cr_expect(strstr(e, "{R<=64,N=1000,dtype=2}, {R<=33,N=77,dtype=2}, {R<=2,N=16,dtype=2}, {R<=64,N=16,dtype=2}"),
              "%s", e);
}

/* The broadcast-add's file has, at M=33 and N=64, rows for B up to 64 and up to 1000 (U up
 * to 5), and at M=8, N=256 one row for B and U up to 10: every B from 1 to the maximum is
 * served, each key above its maximum refused by name. */
Test(aot, every_batch_up_to_the_maximum_is_served)
{
    const loom_template *t = loom_template_find("ikbo_broadcast_add");
    int64_t sh[LOOM_MAX_PARAMS];
    char want[512];
    parse_shape(t, "B=1000,U=5,M=33,N=64", sh);
    expected_config(t, sh, want, sizeof want);
    for (int64_t B = 1; B <= 1000; B++)
        for (int64_t U = 1; U <= 5; U += 4) {
            ta_badd_ikbo_broadcast_add_shape s = {B, U, 33, 64, LOOM_F16};
            const char *got = ta_badd_ikbo_broadcast_add_config(&s);
            cr_assert(got, "B=%lld U=%lld: %s", (long long)B, (long long)U, ta_badd_last_error());
            cr_expect_str_eq(got, want, "B=%lld", (long long)B);
        }
    for (int64_t B = 1; B <= 10; B++)
        cr_expect(ta_badd_ikbo_broadcast_add_config(&(ta_badd_ikbo_broadcast_add_shape){B, 10, 8, 256, LOOM_F16}),
                  "B=%lld: %s", (long long)B, ta_badd_last_error());
    struct {
        ta_badd_ikbo_broadcast_add_shape s;
        const char *msg;
    } bad[] = {
        {{1001, 5, 33, 64, LOOM_F16}, "B=1001 is above this file's maximum B=1000 (at M=33,N=64,dtype=0)"},
        {{64, 6, 33, 64, LOOM_F16}, "U=6 is above this file's maximum U=5 (at M=33,N=64,dtype=0)"},
        {{11, 10, 8, 256, LOOM_F16}, "B=11 is above this file's maximum B=10 (at M=8,N=256,dtype=0)"},
        {{-4, 1, 8, 256, LOOM_F16}, "B=-4: a run-time dim is at least 1"},
        {{5, 5, 33, 64, LOOM_F32}, "no kernel was generated for shape B=5,U=5,M=33,N=64,dtype=2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_null(ta_badd_ikbo_broadcast_add_config(&bad[i].s), "case %zu", i);
        cr_expect(strstr(ta_badd_last_error(), bad[i].msg), "case %zu: %s", i, ta_badd_last_error());
        cr_expect_eq(ta_badd_ikbo_broadcast_add_launch(&bad[i].s, 4096, 4096, 4096, 4096, NULL), TA_BADD_ERR_INVALID);
        cr_expect(strstr(ta_badd_last_error(), bad[i].msg), "case %zu: %s", i, ta_badd_last_error());
    }
    /* a served shape still checks its pointers before the driver */
    ta_badd_ikbo_broadcast_add_shape s = {700, 3, 33, 64, LOOM_F16};
    cr_expect_eq(ta_badd_ikbo_broadcast_add_launch(&s, 4096, 0, 4096, 4096, NULL), TA_BADD_ERR_INVALID);
    cr_expect(strstr(ta_badd_last_error(), "argument 'user' is NULL"), "%s", ta_badd_last_error());
}

/* ikbo_fa in FP8 is refused as an AOT operation, pointing to the C API, and no file is
 * left behind. */
Test(aot, ikbo_fa_e4m3_is_refused_pointing_to_the_c_api)
{
    const loom_template *t = loom_template_find("ikbo_fa");
    int64_t sh[1][LOOM_MAX_PARAMS], cf[1][LOOM_MAX_PARAMS];
    parse_shape(t, "B=4,U=2,S=128,H=1,D=64,n_seed=64,dtype=e4m3,vtrans=1", sh[0]);
    char err[600];
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, "ctas=8", cf[0], err, sizeof err), 0, "%s", err);
    char dir[] = "/tmp/loom-aot-test-XXXXXX";
    cr_assert(mkdtemp(dir));
    loom_aot_request r = {t, 1, (const int64_t(*)[LOOM_MAX_PARAMS])sh, (const int64_t(*)[LOOM_MAX_PARAMS])cf, 0,
                          "sm_90a", "fa8", dir, NULL};
    cr_expect_eq(loom_aot_write(&r, err, sizeof err), LOOM_ERR_UNSUPPORTED, "%s", err);
    cr_expect(strstr(err, "ikbo_fa with dtype e4m3 (V transposed, per-head scales) is not an AOT operation yet: "
                          "loom's C API serves it") && strstr(err, "loom_ikbo_fa_run_scaled"),
              "%s", err);
    char path[600];
    snprintf(path, sizeof path, "%s/fa8.c", dir);
    cr_expect_neq(access(path, F_OK), 0, "%s was left behind", path);
    snprintf(path, sizeof path, "%s/fa8.h", dir);
    cr_expect_neq(access(path, F_OK), 0, "%s was left behind", path);
    rmdir(dir);
}

/* row_softmax's grid rule, one program too many: the generator must refuse it. */
static void off_by_one_rule(const int64_t *shape, const int64_t *config, loom_grid_rule *r)
{
    loom_template_find("row_softmax")->grid_rule(shape, config, r);
    r->c[0] += 1;
}

Test(aot, the_generator_refuses_bad_requests)
{
    const loom_template *t = loom_template_find("gemm");
    int64_t sh[1][LOOM_MAX_PARAMS], cf[1][LOOM_MAX_PARAMS];
    parse_shape(t, "M=64,N=64,K=64", sh[0]);
    char err[600];
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, NULL, cf[0], err, sizeof err), 0);
    char dir[] = "/tmp/loom-aot-test-XXXXXX";
    cr_assert(mkdtemp(dir));
    loom_aot_request r = {t, 1, (const int64_t(*)[LOOM_MAX_PARAMS])sh, (const int64_t(*)[LOOM_MAX_PARAMS])cf, 4,
                          "sm_90a", "9bad", dir, NULL};
    cr_expect_eq(loom_aot_write(&r, err, sizeof err), LOOM_ERR_INVALID);
    cr_expect(strstr(err, "prefix '9bad' is not a C identifier"), "%s", err);
    r.prefix = "ok";
    r.archs = "sm_90a,sm_9x";
    cr_expect_eq(loom_aot_write(&r, err, sizeof err), LOOM_ERR_INVALID);
    cr_expect(strstr(err, "'sm_9x' is not an architecture"), "%s", err);
    r.archs = NULL;
    int64_t two[2][LOOM_MAX_PARAMS], twoc[2][LOOM_MAX_PARAMS];
    memcpy(two[0], sh[0], sizeof sh[0]), memcpy(two[1], sh[0], sizeof sh[0]);
    memcpy(twoc[0], cf[0], sizeof cf[0]), memcpy(twoc[1], cf[0], sizeof cf[0]);
    r.nshapes = 2, r.shapes = (const int64_t(*)[LOOM_MAX_PARAMS])two, r.configs = (const int64_t(*)[LOOM_MAX_PARAMS])twoc;
    cr_expect_eq(loom_aot_write(&r, err, sizeof err), LOOM_ERR_INVALID);
    cr_expect(strstr(err, "shapes 1 and 2 are the same shape"), "%s", err);
    /* a shape the template refuses: named, and no file left behind */
    r.nshapes = 1, r.shapes = (const int64_t(*)[LOOM_MAX_PARAMS])sh, r.configs = (const int64_t(*)[LOOM_MAX_PARAMS])cf;
    sh[0][1] = 60; /* N not a multiple of 8 */
    cr_expect_neq(loom_aot_write(&r, err, sizeof err), LOOM_OK);
    cr_expect(strstr(err, "gemm at M=64,N=60"), "%s", err);
    char path[600];
    snprintf(path, sizeof path, "%s/ok.c", dir);
    cr_expect_neq(access(path, F_OK), 0, "%s was left behind", path);
    /* run-time keys: two shapes whose run-time keys share their buckets are one row */
    const loom_template *sm = loom_template_find("row_softmax");
    parse_shape(sm, "R=40,N=100", two[0]);
    parse_shape(sm, "R=64,N=100", two[1]);
    cr_assert_eq(loom_params_parse(sm->config, sm->nconfig, NULL, twoc[0], err, sizeof err), 0);
    memcpy(twoc[1], twoc[0], sizeof twoc[0]);
    r.t = sm, r.nshapes = 2, r.shapes = (const int64_t(*)[LOOM_MAX_PARAMS])two;
    r.configs = (const int64_t(*)[LOOM_MAX_PARAMS])twoc;
    cr_expect_eq(loom_aot_write(&r, err, sizeof err), LOOM_ERR_INVALID);
    cr_expect(strstr(err, "shapes 1 and 2 differ only in run-time keys (R) of the same buckets"), "%s", err);
    /* a template with run-time keys and no grid rule cannot be written */
    loom_template nogrid = *sm;
    nogrid.grid_rule = NULL;
    r.t = &nogrid, r.nshapes = 1;
    cr_expect_eq(loom_aot_write(&r, err, sizeof err), LOOM_ERR_INVALID);
    cr_expect(strstr(err, "row_softmax has run-time shape keys but no grid_rule"), "%s", err);
    /* nor one whose grid rule does not give its grid */
    loom_template badrule = *sm;
    badrule.grid_rule = off_by_one_rule;
    r.t = &badrule;
    cr_expect_eq(loom_aot_write(&r, err, sizeof err), LOOM_ERR_INVALID);
    cr_expect(strstr(err, "the grid rule gives 41x1x1 but the grid is 40x1x1 (a template bug)"), "%s", err);
    cr_expect_neq(access(path, F_OK), 0, "%s was left behind", path);
    /* a kernel whose run-time dims are not the run-time keys by name cannot take them from a
     * request: the file serves the shapes generated exactly, and says so */
    loom_template nodim = *sm;
    nodim.shape[1].runtime = 1; /* N: the kernel has no dim argument 'N' */
    r.t = &nodim;
    cr_expect_eq(loom_aot_write(&r, err, sizeof err), LOOM_OK, "%s", err);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    cr_expect(strstr(text, "row_softmax's run-time keys are served as these exact shapes") &&
                  strstr(text, "shape key 'N' is run-time, but the kernel has no run-time dim argument 'N'"),
              "the file does not say why its shapes are exact");
    cr_expect(strstr(text, "aot_row_softmax_dims[aot_row_softmax_ROWS][3] = {\n    {40, 0, 0},"),
              "the launch does not pass R at the shape's value");
    remove(path);
    snprintf(path, sizeof path, "%s/ok.h", dir);
    remove(path);
    rmdir(dir);
}

/* ---------------------------------------------------------------- on the GPU */

/* Template c at its shape i: loom's launch and the AOT launch on the same inputs write the
 * same bytes. */
static void jit_equals_aot(loom_runtime *rt, const aot_case *c, int i)
{
    const loom_template *t = loom_template_find(c->tname);
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    parse_shape(t, c->shapes[i], sh);
    const char *ctext = c->config(t, sh);
    cr_assert(ctext, "%s", c->last_error());
    char err[600];
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, ctext, cf, err, sizeof err), 0, "%s", err);
    loom_instance in;
    cr_assert_eq(loom_instance_create(rt, t, sh, cf, 7, &in, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(loom_launch(rt, in.kernel, in.grid, in.args, in.nargs), LOOM_OK, "%s", loom_runtime_error(rt));
    uint64_t v[LOOM_MAX_ARGS] = {0}; /* the launch function's arguments: the run-time dims come from the shape */
    int nv = 0;
    void *jit[LOOM_MAX_ARGS] = {0};
    for (int a = 0; a < in.nargs; a++) {
        if (in.info[a].is_dim)
            continue;
        if (!in.info[a].is_tensor) {
            v[nv++] = (uint64_t)(in.info[a].dtype == LOOM_I32 ? in.args[a].s.i32 : in.args[a].s.i64);
            continue;
        }
        v[nv++] = rt_buffer_dptr(in.buf[a]);
        if (in.info[a].access != LOOM_OUT)
            continue;
        size_t n = in.info[a].min_bytes;
        jit[a] = malloc(n);
        cr_assert_eq(loom_buffer_download(in.buf[a], jit[a], n), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_assert_eq(loom_buffer_fill(in.buf[a], 0xff), LOOM_OK); /* unwritten bytes show */
    }
    cr_assert_eq(c->launch(t, sh, v), 0, "%s at %s: %s", t->name, c->shapes[i], c->last_error());
    for (int a = 0; a < in.nargs; a++)
        if (jit[a]) {
            size_t n = in.info[a].min_bytes;
            unsigned char *aot = malloc(n);
            cr_assert_eq(loom_buffer_download(in.buf[a], aot, n), LOOM_OK, "%s", loom_runtime_error(rt));
            size_t diff = 0;
            while (diff < n && aot[diff] == ((unsigned char *)jit[a])[diff])
                diff++;
            cr_expect_eq(diff, n, "%s at %s: argument '%s' differs from loom's launch first at byte %zu of %zu",
                         t->name, c->shapes[i], in.info[a].name, diff, n);
            free(aot), free(jit[a]);
        }
    loom_instance_destroy(&in);
}

Test(aot_gpu, every_template_matches_loom_bit_for_bit, .timeout = 300)
{
    loom_runtime *rt = t_gpu_or_skip();
    for (int c = 0; c < NCASES; c++)
        for (int i = 0; i < cases[c].nshapes; i++)
            jit_equals_aot(rt, &cases[c], i);
    loom_runtime_destroy(rt);
}

/* A user's template of automatic warp specialization, from the examples' plugin
 * (tp_kernels, which loomc aot read at build time): its kernel is persistent, so the
 * file's launch passes the grid after the arguments and starts one CTA an SM, as loom's
 * does; both write the same bytes, at a launch's M below the file's too. */
Test(aot_gpu, a_specialized_kernel_of_a_plugin_matches_loom, .timeout = 300)
{
    loom_runtime *rt = t_gpu_or_skip();
    char err[1024];
    if (!loom_template_find("gemm_plain"))
        cr_assert_eq(loom_plugin_load(t_plugin_path("kernels"), NULL, err, sizeof err), LOOM_OK, "%s", err);
    static const char *const plain_shapes[] = {"M=256,N=256,K=128", "M=200,N=512,K=256", "M=130,N=512,K=256"};
    const aot_case c = {"gemm_plain", SHAPES(plain_shapes), plain_config, plain_launch, ta_plain_last_error};
    for (int i = 0; i < c.nshapes; i++)
        jit_equals_aot(rt, &c, i);
    loom_runtime_destroy(rt);
}

/* Deterministic values in [-scale, scale) of the dtype. */
static void fill(void *p, loom_dtype dt, int64_t n, uint64_t seed, double scale)
{
    for (int64_t i = 0; i < n; i++) {
        uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull + seed;
        x ^= x >> 31, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 29;
        tpl_set(p, dt, i, scale * ((double)(x >> 11) / (double)(1ull << 53) * 2 - 1));
    }
}

static loom_buffer *upload(loom_runtime *rt, const void *h, size_t n)
{
    loom_buffer *b = loom_buffer_create(rt, n);
    cr_assert(b);
    cr_assert_eq(loom_buffer_upload(b, h, n), LOOM_OK);
    return b;
}

/* The broadcast-add's file at M=33, N=64 (f16; rows for B up to 64 and up to 1000, U up to
 * 5), launched at 20 batches (the ends of both rows, then random) on buffers sized for the
 * maximum: each output equals plain C's (one f16 rounding of the sum), and the rows past
 * the batch are untouched. */
static void badd_random_batches(loom_runtime *rt, uint64_t seed)
{
    enum { M = 33, N = 64, MN = M * N, UMAX = 5, BMAX = 1000 };
    const loom_dtype dt = LOOM_F16;
    uint16_t *cand = malloc((size_t)BMAX * MN * 2), *user = malloc((size_t)UMAX * MN * 2),
             *out = malloc((size_t)BMAX * MN * 2);
    int32_t *map = malloc((size_t)BMAX * 4);
    loom_buffer *bc = loom_buffer_create(rt, (size_t)BMAX * MN * 2), *bu = loom_buffer_create(rt, (size_t)UMAX * MN * 2),
                *bm = loom_buffer_create(rt, (size_t)BMAX * 4), *bo = loom_buffer_create(rt, (size_t)BMAX * MN * 2);
    cr_assert(cand && user && out && map && bc && bu && bm && bo);
    for (int it = 0; it < 20; it++) {
        static const int64_t ends[] = {1, 64, 65, BMAX};
        int64_t B = it < 4 ? ends[it] : 1 + (int64_t)(tpl_rand(&seed) % BMAX), U = 1 + (int64_t)(tpl_rand(&seed) % UMAX);
        fill(cand, dt, B * MN, seed + 1, 1), fill(user, dt, U * MN, seed + 2, 1);
        for (int64_t b = 0; b < B; b++)
            map[b] = (int32_t)(tpl_rand(&seed) % (uint64_t)U);
        cr_assert_eq(loom_buffer_upload(bc, cand, (size_t)(B * MN) * 2), LOOM_OK);
        cr_assert_eq(loom_buffer_upload(bu, user, (size_t)(U * MN) * 2), LOOM_OK);
        cr_assert_eq(loom_buffer_upload(bm, map, (size_t)B * 4), LOOM_OK);
        cr_assert_eq(loom_buffer_fill(bo, 0xff), LOOM_OK);
        ta_badd_ikbo_broadcast_add_shape s = {B, U, M, N, dt};
        cr_assert_eq(ta_badd_ikbo_broadcast_add_launch(&s, rt_buffer_dptr(bc), rt_buffer_dptr(bu), rt_buffer_dptr(bm),
                                                       rt_buffer_dptr(bo), NULL),
                     TA_BADD_OK, "B=%lld U=%lld: %s", (long long)B, (long long)U, ta_badd_last_error());
        cr_assert_eq(loom_buffer_download(bo, out, (size_t)BMAX * MN * 2), LOOM_OK, "%s", loom_runtime_error(rt));
        int64_t bad = 0, first = -1;
        for (int64_t b = 0; b < BMAX; b++)
            for (int64_t i = 0; i < MN; i++) {
                int64_t x = b * MN + i;
                bool ok;
                if (b < B) {
                    double ref = tpl_round(dt, tpl_get(cand, dt, x) + tpl_get(user, dt, map[b] * MN + i));
                    ok = tpl_get(out, dt, x) == ref;
                } else {
                    ok = out[x] == 0xffff; /* past the batch: not written */
                }
                if (!ok && !bad++)
                    first = x;
            }
        cr_expect_eq(bad, 0, "B=%lld U=%lld: %lld of %d elements wrong, the first at %lld (%g)", (long long)B,
                     (long long)U, (long long)bad, BMAX * MN, (long long)first, first >= 0 ? tpl_get(out, dt, first) : 0);
    }
    loom_buffer_destroy(bc), loom_buffer_destroy(bu), loom_buffer_destroy(bm), loom_buffer_destroy(bo);
    free(cand), free(user), free(out), free(map);
}

/* row_softmax's file at N (f32; R up to 64), launched at 20 row counts (1, 2, 3 and 64, then
 * random): each row is the softmax of plain C in double within (N + 16) 2^-24 relative, the
 * rows past R untouched. */
static void softmax_random_rows(loom_runtime *rt, int64_t N, uint64_t seed)
{
    enum { RMAX = 64 };
    float *x = malloc((size_t)(RMAX * N) * 4), *y = malloc((size_t)(RMAX * N) * 4);
    loom_buffer *bx = loom_buffer_create(rt, (size_t)(RMAX * N) * 4), *by = loom_buffer_create(rt, (size_t)(RMAX * N) * 4);
    cr_assert(x && y && bx && by);
    for (int it = 0; it < 20; it++) {
        static const int64_t ends[] = {1, 2, 3, RMAX};
        int64_t R = it < 4 ? ends[it] : 1 + (int64_t)(tpl_rand(&seed) % RMAX);
        fill(x, LOOM_F32, R * N, seed + 3, 8);
        cr_assert_eq(loom_buffer_upload(bx, x, (size_t)(R * N) * 4), LOOM_OK);
        cr_assert_eq(loom_buffer_fill(by, 0xff), LOOM_OK);
        ta_softmax_row_softmax_shape s = {R, N, LOOM_F32};
        cr_assert_eq(ta_softmax_row_softmax_launch(&s, rt_buffer_dptr(bx), rt_buffer_dptr(by), NULL), TA_SOFTMAX_OK,
                     "R=%lld N=%lld: %s", (long long)R, (long long)N, ta_softmax_last_error());
        cr_assert_eq(loom_buffer_download(by, y, (size_t)(RMAX * N) * 4), LOOM_OK, "%s", loom_runtime_error(rt));
        int64_t bad = 0;
        for (int64_t r = 0; r < RMAX; r++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; r < R && j < N; j++)
                mx = fmax(mx, x[r * N + j]);
            for (int64_t j = 0; r < R && j < N; j++)
                sum += exp((double)x[r * N + j] - mx);
            for (int64_t j = 0; j < N; j++) {
                uint32_t bits;
                memcpy(&bits, &y[r * N + j], 4);
                if (r >= R) {
                    bad += bits != 0xffffffffu;
                    continue;
                }
                double want = exp((double)x[r * N + j] - mx) / sum;
                bad += !(fabs(y[r * N + j] - want) <= 1e-9 + (double)(N + 16) * 0x1p-24 * want);
            }
        }
        cr_expect_eq(bad, 0, "R=%lld N=%lld: %lld elements wrong", (long long)R, (long long)N, (long long)bad);
    }
    loom_buffer_destroy(bx), loom_buffer_destroy(by);
    free(x), free(y);
}

Test(aot_gpu, files_of_run_time_keys_serve_random_batches, .timeout = 300)
{
    loom_runtime *rt = t_gpu_or_skip();
    badd_random_batches(rt, 2026);
    softmax_random_rows(rt, 16, 7);   /* two rows: R up to 2 and up to 64 */
    softmax_random_rows(rt, 1000, 8); /* one row */
    loom_runtime_destroy(rt);
}

Test(aot_gpu, the_lce_operation_matches_loom_and_the_reference, .timeout = 300)
{
    loom_runtime *rt = t_gpu_or_skip();
    const loom_ikbo_lce_shape s = {64, 5, 100, 64, 40, 24, LOOM_F16, LOOM_F16};
    ta_lce_ikbo_lce_shape as = {s.B, s.U, s.M, s.N, s.Ku, s.Kc, s.dtype, LOOM_F16};
    const loom_template *t = loom_template_find("ikbo_lce");
    int64_t cf[LOOM_MAX_PARAMS];
    char err[600];
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, ta_lce_ikbo_lce_config(&as), cf, err, sizeof err), 0);
    loom_ikbo_lce_config cfg = ik_config_of(cf);
    size_t e = 2, nwu = (size_t)(s.M * s.Ku), nwc = (size_t)(s.M * s.Kc), neu = (size_t)(s.U * s.Ku * s.N),
           nec = (size_t)(s.B * s.Kc * s.N), nout = (size_t)(s.B * s.M * s.N);
    void *wu = malloc(nwu * e), *wc = malloc(nwc * e), *eu = malloc(neu * e), *ec = malloc(nec * e);
    int32_t *map = malloc((size_t)s.B * 4);
    fill(wu, s.dtype, (int64_t)nwu, 1, 1.0 / 16), fill(wc, s.dtype, (int64_t)nwc, 2, 1.0 / 16);
    fill(eu, s.dtype, (int64_t)neu, 3, 1), fill(ec, s.dtype, (int64_t)nec, 4, 1);
    ik_mapping(s.B, s.U, 1, 5, map);
    loom_buffer *beu = upload(rt, eu, neu * e), *bec = upload(rt, ec, nec * e), *bmap = upload(rt, map, (size_t)s.B * 4);
    loom_buffer *out_jit = loom_buffer_create(rt, nout * e), *out_aot = loom_buffer_create(rt, nout * e);
    loom_ikbo_lce *jit;
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_PERSISTENT, wu, wc, &cfg, &jit), LOOM_OK, "%s",
                 loom_runtime_error(rt));
    ta_lce_ikbo_lce *aot;
    cr_assert_eq(ta_lce_ikbo_lce_prepare(&as, wu, wc, &aot), TA_LCE_OK, "%s", ta_lce_last_error());
    unsigned char *hj = malloc(nout * e), *ha = malloc(nout * e);
    for (int run = 0; run < 3; run++) { /* the epoch advances each run */
        cr_assert_eq(loom_buffer_fill(out_aot, 0xff), LOOM_OK);
        cr_assert_eq(loom_ikbo_lce_run(jit, beu, bec, bmap, out_jit), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_assert_eq(ta_lce_ikbo_lce_run(aot, rt_buffer_dptr(beu), rt_buffer_dptr(bec), rt_buffer_dptr(bmap),
                                         rt_buffer_dptr(out_aot), NULL),
                     TA_LCE_OK, "%s", ta_lce_last_error());
        cr_assert_eq(loom_buffer_download(out_jit, hj, nout * e), LOOM_OK);
        cr_assert_eq(loom_buffer_download(out_aot, ha, nout * e), LOOM_OK);
        cr_expect_eq(memcmp(hj, ha, nout * e), 0, "run %d: the AOT LCE differs from loom's", run);
    }
    /* requests below the maxima: the kernels' TMA descriptors at the request's B and U */
    static const int64_t at[][2] = {{37, 3}, {1, 1}, {64, 2}, {20, 5}};
    int32_t *amap = malloc((size_t)s.B * 4);
    for (size_t q = 0; q < sizeof at / sizeof at[0]; q++) {
        int64_t B = at[q][0], U = at[q][1];
        size_t n = (size_t)(B * s.M * s.N) * e;
        ik_mapping(B, U, 1, 11 + q, amap);
        cr_assert_eq(loom_buffer_upload(bmap, amap, (size_t)B * 4), LOOM_OK);
        cr_assert_eq(loom_buffer_fill(out_aot, 0xff), LOOM_OK);
        cr_assert_eq(loom_ikbo_lce_run_at(jit, B, U, beu, bec, bmap, out_jit), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_assert_eq(ta_lce_ikbo_lce_run_at(aot, B, U, rt_buffer_dptr(beu), rt_buffer_dptr(bec), rt_buffer_dptr(bmap),
                                            rt_buffer_dptr(out_aot), NULL),
                     TA_LCE_OK, "B=%lld U=%lld: %s", (long long)B, (long long)U, ta_lce_last_error());
        cr_assert_eq(loom_buffer_download(out_jit, hj, n), LOOM_OK);
        cr_assert_eq(loom_buffer_download(out_aot, ha, n), LOOM_OK);
        cr_expect_eq(memcmp(hj, ha, n), 0, "B=%lld U=%lld: the AOT LCE differs from loom's", (long long)B, (long long)U);
    }
    free(amap);
    /* back to the whole batch's mapping, for the reference below */
    cr_assert_eq(loom_buffer_upload(bmap, map, (size_t)s.B * 4), LOOM_OK);
    cr_assert_eq(ta_lce_ikbo_lce_run(aot, rt_buffer_dptr(beu), rt_buffer_dptr(bec), rt_buffer_dptr(bmap),
                                     rt_buffer_dptr(out_aot), NULL),
                 TA_LCE_OK, "%s", ta_lce_last_error());
    cr_assert_eq(loom_buffer_download(out_aot, ha, nout * e), LOOM_OK);
    /* and the reference, from the padded weights */
    ik_spec sp = ik_spec_of(IK_FUSED, (int64_t[]){s.B, s.U, s.M, s.N, s.Ku, s.Kc, s.dtype, 0}, cf);
    int64_t kpu = tpl_pad8(s.Ku), kpc = tpl_pad8(s.Kc);
    void *wup = calloc((size_t)(s.M * kpu), e), *wcp = calloc((size_t)(s.M * kpc), e), *ref = malloc(nout * e);
    for (int64_t m = 0; m < s.M; m++) {
        memcpy((char *)wup + (size_t)(m * kpu) * e, (char *)wu + (size_t)(m * s.Ku) * e, (size_t)s.Ku * e);
        memcpy((char *)wcp + (size_t)(m * kpc) * e, (char *)wc + (size_t)(m * s.Kc) * e, (size_t)s.Kc * e);
    }
    ik_reference(&sp, wup, wcp, eu, ec, map, NULL, ref);
    /* each element within the template's bound (the error model of stage 4: the user part's
     * f32 sum and its hi/lo split, the candidate's sum and the two adds, one ulp) */
    double *bnd = malloc(nout * sizeof *bnd);
    cr_assert(bnd);
    const int64_t tsh[8] = {s.B, s.U, s.M, s.N, s.Ku, s.Kc, s.dtype, 1};
    void *host[LOOM_MAX_ARGS] = {0}, *refs[LOOM_MAX_ARGS] = {0};
    double *bnds[LOOM_MAX_ARGS] = {0};
    host[IKA_WU] = wup, host[IKA_EU] = eu, host[IKA_WC] = wcp, host[IKA_EC] = ec, host[IKA_MAP] = map;
    refs[IKA_OUT] = ref, bnds[IKA_OUT] = bnd;
    t->bound(tsh, host, refs, bnds);
    t_verdict v = T_VERDICT_INIT;
    for (size_t i = 0; i < nout; i++)
        t_verdict_add(&v, (int64_t)i, tpl_get(ha, s.dtype, (int64_t)i), tpl_get(ref, s.dtype, (int64_t)i), bnd[i]);
    cr_expect_eq(v.bad, 0, "%lld of %zu elements of the AOT LCE past their bound (worst |err|/bound %.3g), the first "
                 "out[%lld] = %.9g, the reference %.9g, bound %.3g", (long long)v.bad, nout, v.worst,
                 (long long)v.first, v.got, v.ref, v.bound);
    free(bnd);
    ta_lce_ikbo_lce_destroy(aot);
    loom_ikbo_lce_destroy(jit);
    loom_buffer *bs[] = {beu, bec, bmap, out_jit, out_aot};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        loom_buffer_destroy(bs[i]);
    free(wu), free(wc), free(eu), free(ec), free(map), free(hj), free(ha), free(wup), free(wcp), free(ref);
    loom_runtime_destroy(rt);
}

Test(aot_gpu, the_fa_operation_matches_loom, .timeout = 300)
{
    loom_runtime *rt = t_gpu_or_skip();
    const loom_ikbo_fa_shape s = {64, 5, 200, 2, 64, 3, LOOM_F16, 1, LOOM_F16};
    ta_fa_ikbo_fa_shape as = {s.B, s.U, s.S, s.H, s.D, s.n_seed, s.dtype, s.varlen, LOOM_F16, 0};
    const loom_template *t = loom_template_find("ikbo_fa");
    int64_t cf[LOOM_MAX_PARAMS];
    char err[600];
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, ta_fa_ikbo_fa_config(&as), cf, err, sizeof err), 0);
    loom_ikbo_fa_config cfg = fa_config_of(cf);
    size_t e = 2, nq = (size_t)(s.B * s.n_seed * s.H * s.D), nk = (size_t)(s.U * s.S * s.H * s.D);
    void *q = malloc(nq * e), *k = malloc(nk * e), *v = malloc(nk * e);
    int32_t *map = malloc((size_t)s.B * 4), lens[5] = {200, 0, 17, 64, 129};
    fill(q, s.dtype, (int64_t)nq, 1, 1), fill(k, s.dtype, (int64_t)nk, 2, 1), fill(v, s.dtype, (int64_t)nk, 3, 1);
    ik_mapping(s.B, s.U, 1, 9, map);
    loom_buffer *bq = upload(rt, q, nq * e), *bk = upload(rt, k, nk * e), *bv = upload(rt, v, nk * e);
    loom_buffer *bmap = upload(rt, map, (size_t)s.B * 4), *blen = upload(rt, lens, sizeof lens);
    loom_buffer *oj = loom_buffer_create(rt, nq * e), *oa = loom_buffer_create(rt, nq * e);
    cr_assert_eq(loom_buffer_fill(oa, 0xff), LOOM_OK);
    loom_ikbo_fa *jit;
    cr_assert_eq(loom_ikbo_fa_prepare(rt, &s, &cfg, &jit), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_ikbo_fa_run(jit, bq, bk, bv, bmap, blen, oj), LOOM_OK, "%s", loom_runtime_error(rt));
    ta_fa_ikbo_fa *aot;
    cr_assert_eq(ta_fa_ikbo_fa_prepare(&as, &aot), TA_FA_OK, "%s", ta_fa_last_error());
    cr_assert_eq(ta_fa_ikbo_fa_run(aot, rt_buffer_dptr(bq), rt_buffer_dptr(bk), rt_buffer_dptr(bv),
                                   rt_buffer_dptr(bmap), rt_buffer_dptr(blen), rt_buffer_dptr(oa), NULL),
                 TA_FA_OK, "%s", ta_fa_last_error());
    unsigned char *hj = malloc(nq * e), *ha = malloc(nq * e);
    cr_assert_eq(loom_buffer_download(oj, hj, nq * e), LOOM_OK);
    cr_assert_eq(loom_buffer_download(oa, ha, nq * e), LOOM_OK);
    cr_expect_eq(memcmp(hj, ha, nq * e), 0, "the AOT FA differs from loom's");
    /* requests below the file's shape: the same bits as loom's run_at (the kernel at the
     * request's rows and users, its plan's grid) */
    static const int64_t at[][2] = {{1, 1}, {37, 3}, {64, 5}, {9, 2}, {50, 4}};
    for (size_t r = 0; r < sizeof at / sizeof at[0]; r++) {
        int64_t B = at[r][0], U = at[r][1];
        size_t n = (size_t)(B * s.n_seed * s.H * s.D) * e;
        int32_t *rmap = malloc((size_t)B * 4);
        ik_mapping(B, U, 1, 20 + r, rmap);
        cr_assert_eq(loom_buffer_upload(bmap, rmap, (size_t)B * 4), LOOM_OK);
        cr_assert_eq(loom_buffer_fill(oa, 0xff), LOOM_OK);
        cr_assert_eq(loom_ikbo_fa_run_at(jit, B, U, bq, bk, bv, bmap, blen, oj), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_assert_eq(ta_fa_ikbo_fa_run_at(aot, B, U, rt_buffer_dptr(bq), rt_buffer_dptr(bk), rt_buffer_dptr(bv),
                                          rt_buffer_dptr(bmap), rt_buffer_dptr(blen), rt_buffer_dptr(oa), NULL),
                     TA_FA_OK, "B=%lld U=%lld: %s", (long long)B, (long long)U, ta_fa_last_error());
        cr_assert_eq(loom_buffer_download(oj, hj, n), LOOM_OK);
        cr_assert_eq(loom_buffer_download(oa, ha, n), LOOM_OK);
        cr_expect_eq(memcmp(hj, ha, n), 0, "B=%lld U=%lld: the AOT FA differs from loom's", (long long)B, (long long)U);
        free(rmap);
    }
    cr_expect_eq(ta_fa_ikbo_fa_set_request(aot, 65, 1, map, lens, NULL), TA_FA_ERR_INVALID);
    cr_expect(strstr(ta_fa_last_error(), "B is 65; this file serves 1 to 64"), "%s", ta_fa_last_error());
    /* a bad mapping entry is refused, naming it */
    map[7] = 5;
    cr_expect_eq(ta_fa_ikbo_fa_set_mapping(aot, map, lens, NULL), TA_FA_ERR_INVALID);
    cr_expect(strstr(ta_fa_last_error(), "cand_to_user[7] = 5 is not a user"), "%s", ta_fa_last_error());
    ta_fa_ikbo_fa_destroy(aot);
    loom_ikbo_fa_destroy(jit);
    loom_buffer *bs[] = {bq, bk, bv, bmap, blen, oj, oa};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        loom_buffer_destroy(bs[i]);
    free(q), free(k), free(v), free(map), free(hj), free(ha);
    loom_runtime_destroy(rt);
}

/* One file serves every batch up to B = 4096: the LCE operation prepared from its row at
 * B=4096, U=64 runs 20 requests (B 1 and 4096, then random; U random up to min(64, B)),
 * each checked element by element against the reference in double by the error model
 * (ik_lce_bound: the f32 sums of the kernel and of the reference, the f16 roundings). */
Test(aot_gpu, the_lce_file_serves_every_batch_up_to_4096, .timeout = 300)
{
    loom_runtime *rt = t_gpu_or_skip();
    enum { BMAX = 4096, UMAX = 64, M = 100, N = 64, KU = 40, KC = 24 };
    ta_lce_ikbo_lce_shape as = {BMAX, UMAX, M, N, KU, KC, LOOM_F16, LOOM_F16};
    size_t e = 2, mn = (size_t)M * N;
    void *wu = malloc((size_t)M * KU * e), *wc = malloc((size_t)M * KC * e);
    void *eu = malloc((size_t)UMAX * KU * N * e), *ec = malloc((size_t)BMAX * KC * N * e), *o = malloc(BMAX * mn * e);
    int32_t *map = malloc(BMAX * 4);
    double *c = malloc(BMAX * mn * sizeof(double)), *ac = malloc(BMAX * mn * sizeof(double));
    double *u = malloc(UMAX * mn * sizeof(double)), *au = malloc(UMAX * mn * sizeof(double));
    cr_assert(wu && wc && eu && ec && o && map && c && ac && u && au);
    fill(wu, LOOM_F16, M * KU, 1, 1.0 / 8), fill(wc, LOOM_F16, M * KC, 2, 1.0 / 8);
    ta_lce_ikbo_lce *op;
    cr_assert_eq(ta_lce_ikbo_lce_prepare(&as, wu, wc, &op), TA_LCE_OK, "%s", ta_lce_last_error());
    loom_buffer *beu = loom_buffer_create(rt, (size_t)UMAX * KU * N * e), *bec = loom_buffer_create(rt, BMAX * KC * N * e);
    loom_buffer *bmap = loom_buffer_create(rt, BMAX * 4), *bout = loom_buffer_create(rt, BMAX * mn * e);
    cr_assert(beu && bec && bmap && bout);
    uint64_t seed = 4242;
    double worst = 0;
    for (int q = 0; q < 20; q++) {
        int64_t B = q == 0 ? 1 : q == 1 ? BMAX : 1 + (int64_t)(tpl_rand(&seed) % BMAX);
        int64_t umax = B < UMAX ? B : UMAX, U = 1 + (int64_t)(tpl_rand(&seed) % (uint64_t)umax);
        fill(eu, LOOM_F16, U * KU * N, 10 + q, 1), fill(ec, LOOM_F16, B * KC * N, 50 + q, 1);
        ik_mapping(B, U, 1, 90 + q, map);
        cr_assert_eq(loom_buffer_upload(beu, eu, (size_t)(U * KU * N) * e), LOOM_OK);
        cr_assert_eq(loom_buffer_upload(bec, ec, (size_t)(B * KC * N) * e), LOOM_OK);
        cr_assert_eq(loom_buffer_upload(bmap, map, (size_t)B * 4), LOOM_OK);
        cr_assert_eq(loom_buffer_fill(bout, 0xff), LOOM_OK);
        cr_assert_eq(ta_lce_ikbo_lce_run_at(op, B, U, rt_buffer_dptr(beu), rt_buffer_dptr(bec), rt_buffer_dptr(bmap),
                                            rt_buffer_dptr(bout), NULL),
                     TA_LCE_OK, "B=%lld U=%lld: %s", (long long)B, (long long)U, ta_lce_last_error());
        cr_assert_eq(loom_buffer_download(bout, o, (size_t)B * mn * e), LOOM_OK);
        /* the two halves in double, and the magnitudes of their products */
        memset(c, 0, (size_t)B * mn * sizeof(double)), memset(ac, 0, (size_t)B * mn * sizeof(double));
        memset(u, 0, (size_t)U * mn * sizeof(double)), memset(au, 0, (size_t)U * mn * sizeof(double));
        for (int64_t x = 0; x < U; x++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t k = 0; k < KU; k++) {
                    double w = tpl_get(wu, LOOM_F16, m * KU + k);
                    for (int64_t j = 0; j < N; j++) {
                        double p = w * tpl_get(eu, LOOM_F16, (x * KU + k) * N + j);
                        u[x * (int64_t)mn + m * N + j] += p, au[x * (int64_t)mn + m * N + j] += fabs(p);
                    }
                }
        for (int64_t b = 0; b < B; b++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t k = 0; k < KC; k++) {
                    double w = tpl_get(wc, LOOM_F16, m * KC + k);
                    for (int64_t j = 0; j < N; j++) {
                        double p = w * tpl_get(ec, LOOM_F16, (b * KC + k) * N + j);
                        c[b * (int64_t)mn + m * N + j] += p, ac[b * (int64_t)mn + m * N + j] += fabs(p);
                    }
                }
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < (int64_t)mn; i++) {
                int64_t ci = b * (int64_t)mn + i, ui = map[b] * (int64_t)mn + i;
                double got = tpl_get(o, LOOM_F16, ci), bnd = ik_lce_bound(c[ci], u[ui], ac[ci], au[ui], KU, KC);
                double r = fabs(got - (c[ci] + u[ui])) / bnd;
                cr_assert(r <= 1.0, "B=%lld U=%lld: out[%lld][%lld] = %g, the reference %g (bound %g)", (long long)B,
                          (long long)U, (long long)b, (long long)i, got, c[ci] + u[ui], bnd);
                worst = r > worst ? r : worst;
            }
    }
    cr_assert_eq(ta_lce_ikbo_lce_run_at(op, BMAX + 1, 1, rt_buffer_dptr(beu), rt_buffer_dptr(bec),
                                        rt_buffer_dptr(bmap), rt_buffer_dptr(bout), NULL),
                 TA_LCE_ERR_INVALID);
    cr_assert(strstr(ta_lce_last_error(), "B is 4097; this file serves 1 to 4096"), "%s", ta_lce_last_error());
    cr_log_info("aot_gpu: the LCE file at 20 batches up to 4096: worst |err|/bound %.3f", worst);
    ta_lce_ikbo_lce_destroy(op);
    loom_buffer *bs[] = {beu, bec, bmap, bout};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        loom_buffer_destroy(bs[i]);
    free(wu), free(wc), free(eu), free(ec), free(o), free(map), free(c), free(ac), free(u), free(au);
    loom_runtime_destroy(rt);
}
