/*
 * test_aot.c -- the files `loomc aot` writes (aot/), for every template at two shapes,
 * generated at build time into this binary (CMakeLists.txt: loom_add_aot, prefixes ta_*).
 *
 * On the CPU (CI): each dispatch table gives each shape the config loomc picked (the
 * template's default, or the cost model's best valid one: what loom_tune takes without
 * timing), refuses a shape it was not generated for with a message naming the shapes it
 * has, and refuses NULLs; the generator refuses bad requests with a message.
 * On a GPU: each template's AOT launch writes output bit-identical to loom's own launch of
 * the same kernel on the same inputs; the AOT IKBO LCE operation matches loom_ikbo_lce_run
 * bit for bit and the CPU reference; the AOT IKBO FA operation matches loom_ikbo_fa_run.
 */
#include "ikbo_fa.h"
#include "ikbo_lce.h"
#include "rt.h"
#include "testutil.h"

#include "ta_badd.h"
#include "ta_fa.h"
#include "ta_gemm.h"
#include "ta_lce.h"
#include "ta_softmax.h"

/* The shapes the build generated (CMakeLists.txt), per template. */
static const char *const gemm_shapes[] = {"M=256,N=256,K=256", "M=200,N=136,K=72,odtype=f32"};
static const char *const softmax_shapes[] = {"R=64,N=1000", "R=33,N=77"};
static const char *const badd_shapes[] = {"B=64,U=5,M=33,N=64", "B=10,U=10,M=8,N=256"};
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
 * (p: the device pointers of the kernel's arguments, sc: its scalars, in argument order). */

#define K(name) key(t, sh, #name)

static const char *gemm_config(const loom_template *t, const int64_t *sh)
{
    ta_gemm_gemm_shape s = {K(M), K(N), K(K), K(batch), K(dtype), K(odtype), K(ashared), K(lda), K(ldb)};
    return ta_gemm_gemm_config(&s);
}
static int gemm_launch(const loom_template *t, const int64_t *sh, const uint64_t *p, const int64_t *sc)
{
    (void)sc;
    ta_gemm_gemm_shape s = {K(M), K(N), K(K), K(batch), K(dtype), K(odtype), K(ashared), K(lda), K(ldb)};
    return ta_gemm_gemm_launch(&s, p[0], p[1], p[2], NULL);
}

static const char *softmax_config(const loom_template *t, const int64_t *sh)
{
    ta_softmax_row_softmax_shape s = {K(R), K(N), K(dtype)};
    return ta_softmax_row_softmax_config(&s);
}
static int softmax_launch(const loom_template *t, const int64_t *sh, const uint64_t *p, const int64_t *sc)
{
    (void)sc;
    ta_softmax_row_softmax_shape s = {K(R), K(N), K(dtype)};
    return ta_softmax_row_softmax_launch(&s, p[0], p[1], NULL);
}

static const char *badd_config(const loom_template *t, const int64_t *sh)
{
    ta_badd_ikbo_broadcast_add_shape s = {K(B), K(U), K(M), K(N), K(dtype)};
    return ta_badd_ikbo_broadcast_add_config(&s);
}
static int badd_launch(const loom_template *t, const int64_t *sh, const uint64_t *p, const int64_t *sc)
{
    (void)sc;
    ta_badd_ikbo_broadcast_add_shape s = {K(B), K(U), K(M), K(N), K(dtype)};
    return ta_badd_ikbo_broadcast_add_launch(&s, p[0], p[1], p[2], p[3], NULL);
}

static ta_lce_ikbo_lce_shape lce_shape(const loom_template *t, const int64_t *sh)
{
    return (ta_lce_ikbo_lce_shape){K(B), K(U), K(M), K(N), K(Ku), K(Kc), K(dtype)};
}
static const char *lce_config(const loom_template *t, const int64_t *sh)
{
    ta_lce_ikbo_lce_shape s = lce_shape(t, sh);
    return ta_lce_ikbo_lce_config(&s);
}
static int lce_launch(const loom_template *t, const int64_t *sh, const uint64_t *p, const int64_t *sc)
{
    ta_lce_ikbo_lce_shape s = lce_shape(t, sh);
    return ta_lce_ikbo_lce_launch(&s, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], (int32_t)sc[8], p[9], NULL);
}

static ta_fa_ikbo_fa_shape fa_shape(const loom_template *t, const int64_t *sh)
{
    return (ta_fa_ikbo_fa_shape){K(B), K(U), K(S), K(H), K(D), K(n_seed), K(dtype), K(varlen)};
}
static const char *fa_config(const loom_template *t, const int64_t *sh)
{
    ta_fa_ikbo_fa_shape s = fa_shape(t, sh);
    return ta_fa_ikbo_fa_config(&s);
}
static int fa_launch(const loom_template *t, const int64_t *sh, const uint64_t *p, const int64_t *sc)
{
    ta_fa_ikbo_fa_shape s = fa_shape(t, sh);
    return ta_fa_ikbo_fa_launch(&s, p[0], p[1], p[2], p[3], p[4], p[5], (int32_t)sc[6], p[7], NULL);
}
#undef K

typedef struct aot_case {
    const char *tname;
    const char *const *shapes; /* two */
    const char *(*config)(const loom_template *, const int64_t *);
    int (*launch)(const loom_template *, const int64_t *, const uint64_t *, const int64_t *);
    const char *(*last_error)(void);
} aot_case;

static const aot_case cases[] = {
    {"gemm", gemm_shapes, gemm_config, gemm_launch, ta_gemm_last_error},
    {"row_softmax", softmax_shapes, softmax_config, softmax_launch, ta_softmax_last_error},
    {"ikbo_broadcast_add", badd_shapes, badd_config, badd_launch, ta_badd_last_error},
    {"ikbo_lce", lce_shapes, lce_config, lce_launch, ta_lce_last_error},
    {"ikbo_fa", fa_shapes, fa_config, fa_launch, ta_fa_last_error},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* The config loomc aot picks without --config or --tuned: loom_tune's without timing. */
static void expected_config(const loom_template *t, const int64_t *shape, char *buf, size_t n)
{
    setenv("LOOM_TUNE", "0", 1);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRET);
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
        for (int i = 0; i < 2; i++) {
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
    ta_gemm_gemm_shape s = {512, 256, 256, 1, 0, 0, 1, 0, 0};
    cr_assert_null(ta_gemm_gemm_config(&s));
    const char *e = ta_gemm_last_error();
    cr_expect(strstr(e, "ta_gemm_gemm_config: no kernel was generated for shape M=512,N=256,K=256"), "%s", e);
    cr_expect(strstr(e, "{M=256,N=256,K=256,batch=1,dtype=0,odtype=0,ashared=1,lda=0,ldb=0}"), "%s", e);
    cr_expect(strstr(e, "loomc aot gemm --shape"), "%s", e);
    cr_expect_eq(ta_gemm_gemm_launch(&s, 256, 256, 256, NULL), TA_GEMM_ERR_INVALID);
    cr_assert_null(ta_gemm_gemm_config(NULL));
    cr_expect(strstr(ta_gemm_last_error(), "shape is NULL"), "%s", ta_gemm_last_error());
    /* the operations' NULL arguments, before any GPU is needed */
    ta_lce_ikbo_lce *op = (ta_lce_ikbo_lce *)1;
    ta_lce_ikbo_lce_shape ls = {64, 5, 100, 64, 40, 24, 0};
    cr_expect_eq(ta_lce_ikbo_lce_prepare(&ls, NULL, &ls, &op), TA_LCE_ERR_INVALID);
    cr_expect(strstr(ta_lce_last_error(), "w_user is NULL"), "%s", ta_lce_last_error());
    cr_expect_null(op);
    cr_expect_eq(ta_lce_ikbo_lce_run(NULL, 1, 1, 1, 1, NULL), TA_LCE_ERR_INVALID);
    cr_expect_eq(ta_fa_ikbo_fa_run_mapped(NULL, 16, 16, 16, 16, NULL), TA_FA_ERR_INVALID);
    cr_expect(strstr(ta_fa_last_error(), "op is NULL"), "%s", ta_fa_last_error());
}

Test(aot, launch_arguments_are_checked_before_the_driver)
{
    ta_gemm_gemm_shape s = {256, 256, 256, 1, 0, 0, 1, 0, 0};
    cr_expect_eq(ta_gemm_gemm_launch(&s, 0, 4096, 4096, NULL), TA_GEMM_ERR_INVALID);
    cr_expect(strstr(ta_gemm_last_error(), "argument 'A' is NULL"), "%s", ta_gemm_last_error());
    cr_expect_eq(ta_gemm_gemm_launch(&s, 4096, 4100, 4096, NULL), TA_GEMM_ERR_INVALID);
    cr_expect(strstr(ta_gemm_last_error(), "argument 'B' is at 0x1004, not 16-byte aligned"), "%s",
              ta_gemm_last_error());
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
    uint64_t p[LOOM_MAX_ARGS] = {0};
    int64_t sc[LOOM_MAX_ARGS] = {0};
    void *jit[LOOM_MAX_ARGS] = {0};
    for (int a = 0; a < in.nargs; a++) {
        if (!in.info[a].is_tensor) {
            sc[a] = in.info[a].dtype == LOOM_I32 ? in.args[a].s.i32 : in.args[a].s.i64;
            continue;
        }
        p[a] = rt_buffer_dptr(in.buf[a]);
        if (in.info[a].access != LOOM_OUT)
            continue;
        size_t n = in.info[a].min_bytes;
        jit[a] = malloc(n);
        cr_assert_eq(loom_buffer_download(in.buf[a], jit[a], n), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_assert_eq(loom_buffer_fill(in.buf[a], 0xff), LOOM_OK); /* unwritten bytes show */
    }
    cr_assert_eq(c->launch(t, sh, p, sc), 0, "%s at %s: %s", t->name, c->shapes[i], c->last_error());
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
        for (int i = 0; i < 2; i++)
            jit_equals_aot(rt, &cases[c], i);
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

Test(aot_gpu, the_lce_operation_matches_loom_and_the_reference, .timeout = 300)
{
    loom_runtime *rt = t_gpu_or_skip();
    const loom_ikbo_lce_shape s = {64, 5, 100, 64, 40, 24, LOOM_F16};
    ta_lce_ikbo_lce_shape as = {s.B, s.U, s.M, s.N, s.Ku, s.Kc, s.dtype};
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
    /* and the reference, from the padded weights */
    ik_spec sp = ik_spec_of(IK_FUSED, (int64_t[]){s.B, s.U, s.M, s.N, s.Ku, s.Kc, s.dtype, 0}, cf);
    int64_t kpu = tpl_pad8(s.Ku), kpc = tpl_pad8(s.Kc);
    void *wup = calloc((size_t)(s.M * kpu), e), *wcp = calloc((size_t)(s.M * kpc), e), *ref = malloc(nout * e);
    for (int64_t m = 0; m < s.M; m++) {
        memcpy((char *)wup + (size_t)(m * kpu) * e, (char *)wu + (size_t)(m * s.Ku) * e, (size_t)s.Ku * e);
        memcpy((char *)wcp + (size_t)(m * kpc) * e, (char *)wc + (size_t)(m * s.Kc) * e, (size_t)s.Kc * e);
    }
    ik_reference(&sp, wup, wcp, eu, ec, map, NULL, ref);
    int bad = 0;
    for (size_t i = 0; i < nout; i++) {
        double o = tpl_get(ha, s.dtype, (int64_t)i), r = tpl_get(ref, s.dtype, (int64_t)i);
        bad += !(fabs(o - r) <= t->atol + t->rtol * fabs(r));
    }
    cr_expect_eq(bad, 0, "%d of %zu elements of the AOT LCE differ from the reference", bad, nout);
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
    const loom_ikbo_fa_shape s = {64, 5, 200, 2, 64, 3, LOOM_F16, 1};
    ta_fa_ikbo_fa_shape as = {s.B, s.U, s.S, s.H, s.D, s.n_seed, s.dtype, s.varlen};
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
