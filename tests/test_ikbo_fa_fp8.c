/*
 * test_ikbo_fa_fp8.c -- the IKBO flash attention in FP8 (templates/ikbo_fa.c, dtype e4m3):
 * Q, K and Vt in e4m3 with per-head scales, P rounded to e4m3 (scaled by 2^8) for P V on
 * the register-A FP8 wgmma, out in f16 or bf16.
 *
 *   interpreter  small odd shapes (S not a multiple of the 128-key tile, two heads, a
 *                shuffled mapping, lengths with a user of none, n_seed 3 and 64, D 64 and
 *                128) against the CPU reference computed from the same e4m3 inputs with
 *                the same P rounding (fa_fp8_reference), element by element within its
 *                bound for f32 sums (docs/checks.md, "ikbo_fa in FP8"), and within the
 *                GPU's bound (FP8 wgmma sums) too; errors planted at the first, a middle
 *                and the last element are caught
 *   c_api        loom_ikbo_fa_prepare of an e4m3 shape and loom_ikbo_fa_run_scaled on the
 *                interpreter (a whole request with the mapping on the device, then one of
 *                its own B and U by set_request and launch_scaled, bf16 out and D 64), against
 *                the same reference within its bound; its refusals, each naming the field
 *                or argument (odtype, BN, S, xunit, e5m2; scales NULL, too small or given
 *                to f16; vt and out too small; the plain entry points on an e4m3 handle)
 *   refusals     the template's: e4m3 without vtrans, vtrans with f16, BN other than 128, S
 *                not a multiple of 16 (Vt's TMA stride), odt not f16 or bf16, xunit with
 *                e4m3, e5m2
 *   ptx          the headline (B=2048 U=32 S=2048 H=2 D=128 n_seed=64) assembles with
 *                ptxas -v without spills, P V's A from registers (m64n128k32 e4m3 with
 *                four A registers); so do the C API's default kernels at D 64 (bf16 out)
 *                and D 128 with varlen
 *   gpu          a small shape against the same reference within the GPU's bound, and
 *                its error against the f16 kernel's output at the same inputs reported;
 *                the C API the same way, its config the tuner's (cfg NULL); skipped
 *                without a GPU
 */
#include "cg.h"
#include "ikbo_fa.h"
#include "ikbo_lce.h" /* ik_mapping */
#include "ir.h"
#include "t_model.h"
#include "testutil.h"

#include <math.h>

typedef struct fp8_case {
    int64_t B, U, S, H, D, nseed;
    int shuffle, varlen;
    loom_dtype odt;
} fp8_case;

static fa_spec fp8_spec(const fp8_case *c)
{
    return (fa_spec){.B = c->B, .U = c->U, .S = c->S, .H = c->H, .D = c->D, .nseed = c->nseed, .dt = LOOM_E4M3,
                     .varlen = c->varlen, .odt = c->odt, .vtrans = 1, .bn = 128, .stages = 2, .ctas = 8,
                     .overlap = 1, .tmastore = 1};
}

/* The inputs of a case: e4m3 Q, K, Vt in [-1, 1], scales, the mapping, lengths, plan. */
typedef struct fp8_in {
    uint8_t *q, *k, *vt;
    float scales[3 * 8];
    int32_t *map, *lens, *plan;
    int64_t units, qn, kn;
} fp8_in;

static fp8_in fp8_inputs(const fa_spec *s, int shuffle, uint64_t seed)
{
    fp8_in in = {.qn = fa_rows(s) * s->H * s->D, .kn = s->U * s->S * s->H * s->D};
    in.q = malloc((size_t)in.qn), in.k = malloc((size_t)in.kn), in.vt = malloc((size_t)in.kn);
    in.map = malloc((size_t)s->B * 4), in.lens = malloc((size_t)s->U * 4);
    in.plan = malloc((size_t)fa_max_units(s) * FA_UNIT_FIELDS * 4);
    cr_assert(in.q && in.k && in.vt && in.map && in.lens && in.plan && s->H <= 8);
    tpl_fill(in.q, LOOM_E4M3, in.qn, -1, 1, &seed);
    tpl_fill(in.k, LOOM_E4M3, in.kn, -1, 1, &seed);
    tpl_fill(in.vt, LOOM_E4M3, in.kn, -1, 1, &seed);
    for (int64_t h = 0; h < s->H; h++) /* per head: q_scale, k_scale, v_scale */
        in.scales[h] = 0.75f + 0.5f * (float)h, in.scales[s->H + h] = 1.5f, in.scales[2 * s->H + h] = 0.25f + (float)h;
    ik_mapping(s->B, s->U, shuffle, 3, in.map);
    for (int64_t u = 0; u < s->U; u++)
        in.lens[u] = !s->varlen ? (int32_t)s->S : u == 0 && s->U > 1 ? 0 : (int32_t)(1 + tpl_rand(&seed) % s->S);
    char err[200];
    in.units = fa_plan(s, in.map, s->varlen ? in.lens : NULL, in.plan, err, sizeof err);
    cr_assert(in.units >= 0, "%s", err);
    return in;
}

static void fp8_inputs_free(fp8_in *in)
{
    free(in->q), free(in->k), free(in->vt), free(in->map), free(in->lens), free(in->plan);
}

/* Run the kernel of s on rt over in; out (fa_out_dt) downloaded into ho. */
static void fp8_run(loom_runtime *rt, const fa_spec *s, const fp8_in *in, void *ho)
{
    char err[600];
    loom_kernel *k = fa_build(s, err, sizeof err);
    cr_assert(k, "%s", err);
    size_t ob = (size_t)in->qn * loom_dtype_size(fa_out_dt(s));
    size_t bytes[8] = {(size_t)in->qn, (size_t)in->kn, (size_t)in->kn,
                       (size_t)fa_max_units(s) * FA_UNIT_FIELDS * 4, (size_t)s->U * 4, 8, ob, sizeof in->scales};
    const void *host[8] = {in->q, in->k, in->vt, in->plan, in->lens, NULL, NULL, in->scales};
    loom_buffer *b[8];
    for (int i = 0; i < 8; i++) {
        b[i] = loom_buffer_create(rt, bytes[i]);
        cr_assert(b[i], "%s", loom_runtime_error(rt));
        cr_assert_eq(host[i] ? loom_buffer_upload(b[i], host[i], bytes[i]) : loom_buffer_fill(b[i], i == 5 ? 0 : 0xff),
                     LOOM_OK);
    }
    loom_arg a[11] = {LOOM_ARG_I32((int32_t)fa_rows(s)), LOOM_ARG_I32((int32_t)s->U), LOOM_ARG_BUF(b[0]),
                      LOOM_ARG_BUF(b[1]), LOOM_ARG_BUF(b[2]), LOOM_ARG_BUF(b[3]), LOOM_ARG_BUF(b[4]),
                      LOOM_ARG_BUF(b[5]), LOOM_ARG_I32((int32_t)in->units), LOOM_ARG_BUF(b[6]), LOOM_ARG_BUF(b[7])};
    int grid[3];
    fa_grid(s, grid);
    cr_assert_eq(loom_launch(rt, k, grid, a, 11), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_download(b[6], ho, ob), LOOM_OK);
    for (int i = 0; i < 8; i++)
        loom_buffer_destroy(b[i]);
    loom_kernel_destroy(k);
}

/* Elements of out past their bound. */
static t_verdict fp8_check(const fa_spec *s, const void *out, const void *ref, const double *bnd, int64_t n)
{
    t_verdict x = T_VERDICT_INIT;
    for (int64_t i = 0; i < n; i++)
        t_verdict_add(&x, i, tpl_get(out, fa_out_dt(s), i), tpl_get(ref, fa_out_dt(s), i), bnd[i]);
    return x;
}

/* The reference and both bounds (f32 sums: the interpreter's; FP8 wgmma sums: the GPU's). */
typedef struct fp8_ref {
    void *out;
    double *b32, *b8;
} fp8_ref;

static fp8_ref fp8_reference(const fa_spec *s, const fp8_in *in)
{
    size_t n = (size_t)in->qn;
    fp8_ref r = {malloc(n * 2), malloc(n * sizeof(double)), malloc(n * sizeof(double))};
    cr_assert(r.out && r.b32 && r.b8);
    const int32_t *lens = s->varlen ? in->lens : NULL;
    fa_fp8_reference(s, in->q, in->k, in->vt, in->scales, in->map, lens, false, r.out, r.b32);
    fa_fp8_reference(s, in->q, in->k, in->vt, in->scales, in->map, lens, true, r.out, r.b8);
    return r;
}

static void fp8_ref_free(fp8_ref *r) { free(r->out), free(r->b32), free(r->b8); }

static const fp8_case interp_cases[] = {
    {6, 3, 208, 2, 128, 3, 1, 1, LOOM_F16},  /* shuffled, odd lengths, n_seed 3: short blocks, two tiles */
    {4, 2, 144, 2, 64, 64, 0, 0, LOOM_BF16}, /* full blocks, D 64 (64-byte rows), bf16 out, masked keys */
    {3, 3, 80, 1, 128, 64, 1, 1, LOOM_F16},  /* one tile, masked keys */
};

Test(ikbo_fa_fp8, interpreter_matches_the_reference_within_its_bound)
{
    for (size_t i = 0; i < sizeof interp_cases / sizeof *interp_cases; i++) {
        const fp8_case *c = &interp_cases[i];
        fa_spec s = fp8_spec(c);
        fp8_in in = fp8_inputs(&s, c->shuffle, 11 + i);
        fp8_ref r = fp8_reference(&s, &in);
        void *out = malloc((size_t)in.qn * 2);
        cr_assert(out);
        loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
        cr_assert(rt);
        fp8_run(rt, &s, &in, out);
        t_verdict x32 = fp8_check(&s, out, r.out, r.b32, in.qn), x8 = fp8_check(&s, out, r.out, r.b8, in.qn);
        double worst_b = 0, mean_b = 0, mean_abs = 0;
        for (int64_t e = 0; e < in.qn; e++) {
            cr_expect(r.b32[e] <= r.b8[e], "element %lld: the f32-sum bound is past the FP8-sum one", (long long)e);
            worst_b = fmax(worst_b, r.b32[e]), mean_b += r.b32[e] / (double)in.qn;
            mean_abs += fabs(tpl_get(r.out, c->odt, e)) / (double)in.qn;
        }
        printf("ikbo_fa_fp8: case %zu: worst |err|/bound %.3g (f32 sums), %.3g (FP8 sums); bound mean %.3g, "
               "largest %.3g, mean |out| %.3g\n", i, x32.worst, x8.worst, mean_b, worst_b, mean_abs);
        cr_expect_eq(x32.bad, 0, "case %zu: %lld past their bound, the first out[%lld] = %.9g, want %.9g +- %.3g", i,
                     (long long)x32.bad, (long long)x32.first, x32.got, x32.ref, x32.bound);
        cr_expect_eq(x8.bad, 0, "case %zu: %lld past the GPU's bound", i, (long long)x8.bad);
        /* planted errors: just past the bound at the first, a middle and the last element */
        int64_t at[3] = {0, in.qn / 2, in.qn - 1};
        for (int j = 0; j < 3; j++) {
            double want = tpl_get(r.out, c->odt, at[j]);
            tpl_set(out, c->odt, at[j], want + 2 * r.b32[at[j]] + loom_ulp(c->odt, want));
        }
        t_verdict xp = fp8_check(&s, out, r.out, r.b32, in.qn);
        cr_expect_eq(xp.bad, 3, "case %zu: %lld of 3 planted errors caught", i, (long long)xp.bad);
        loom_runtime_destroy(rt);
        free(out);
        fp8_ref_free(&r);
        fp8_inputs_free(&in);
    }
}

/* The reference itself: a changed V code moves the rows that read it, and the bound for
 * f32 sums is far below the output's magnitude (the check says something). */
Test(ikbo_fa_fp8, reference_sees_a_changed_input_and_its_bound_is_tight)
{
    fp8_case c = {2, 1, 144, 1, 64, 3, 0, 0, LOOM_F16};
    fa_spec s = fp8_spec(&c);
    fp8_in in = fp8_inputs(&s, 0, 5);
    fp8_ref a = fp8_reference(&s, &in);
    in.vt[7] = in.vt[7] == 0x38 ? 0x40 : 0x38; /* key 7 of column 0: 1.0 or 2.0 */
    fp8_ref b = fp8_reference(&s, &in);
    int moved = 0;
    double rel = 0;
    for (int64_t e = 0; e < in.qn; e++) {
        moved += tpl_get(a.out, LOOM_F16, e) != tpl_get(b.out, LOOM_F16, e);
        rel = fmax(rel, a.b32[e] / fmax(fabs(tpl_get(a.out, LOOM_F16, e)), 1e-3));
    }
    cr_expect(moved >= 1, "no output moved");
    cr_expect(rel < 0.05, "the f32-sum bound is %.3g of an output", rel);
    fp8_ref_free(&a), fp8_ref_free(&b);
    fp8_inputs_free(&in);
}

/* ---------------------------------------------------------------- refusals */

static void expect_refused(fa_spec s, const char *msg)
{
    char buf[300], err[600];
    const char *w = fa_why_not(&s, buf, sizeof buf);
    cr_expect(w && strstr(w, msg), "want '%s', got '%s'", msg, w ? w : "(accepted)");
    cr_expect_null(fa_build(&s, err, sizeof err));
    cr_expect(strstr(err, msg), "build: %s", err);
}

Test(ikbo_fa_fp8, what_fp8_cannot_serve_is_refused_by_name)
{
    fp8_case c = {4, 2, 256, 2, 128, 64, 0, 0, LOOM_F16};
    fa_spec s = fp8_spec(&c), t = s;
    t.vtrans = 0;
    expect_refused(t, "dtype e4m3 needs vtrans=1");
    t = s, t.dt = LOOM_F16;
    expect_refused(t, "vtrans=1 (V given transposed) is for dtype e4m3");
    t = s, t.bn = 64;
    expect_refused(t, "with e4m3, BN must be 128");
    t = s, t.odt = LOOM_E4M3;
    expect_refused(t, "odt (out's type with e4m3 inputs) must be f16 or bf16");
    t = s, t.xunit = 1;
    expect_refused(t, "xunit=1 is not built for e4m3");
    t = s, t.S = 200;
    expect_refused(t, "with vtrans=1, S must be a multiple of 16");
    t = s, t.dt = LOOM_E5M2;
    expect_refused(t, "dtype must be f16, bf16");
    char buf[300];
    cr_expect_null(fa_why_not(&s, buf, sizeof buf), "the FP8 form itself: %s", fa_why_not(&s, buf, sizeof buf));
}

/* ---------------------------------------------------------------- the C API */

/* The C API's shape of case c (e4m3, odtype its odt). */
static loom_ikbo_fa_shape api_shape(const fp8_case *c)
{
    return (loom_ikbo_fa_shape){.B = c->B, .U = c->U, .S = c->S, .H = c->H, .D = c->D, .n_seed = c->nseed,
                                .dtype = LOOM_E4M3, .varlen = c->varlen, .odtype = c->odt};
}

/* A device buffer of `bytes` holding host (NULL: NaN bytes, an output to poison). */
static loom_buffer *dev_copy(loom_runtime *rt, const void *host, size_t bytes)
{
    loom_buffer *b = loom_buffer_create(rt, bytes);
    cr_assert(b, "%s", loom_runtime_error(rt));
    cr_assert_eq(host ? loom_buffer_upload(b, host, bytes) : loom_buffer_fill(b, 0xff), LOOM_OK);
    return b;
}

/* The inputs of s on rt: q, k, vt, scales, the mapping, the lengths, out (poisoned). */
typedef struct api_bufs {
    loom_buffer *q, *k, *vt, *scales, *map, *lens, *out;
} api_bufs;

static api_bufs api_upload(loom_runtime *rt, const fa_spec *s, const fp8_in *in)
{
    return (api_bufs){dev_copy(rt, in->q, (size_t)in->qn), dev_copy(rt, in->k, (size_t)in->kn),
                      dev_copy(rt, in->vt, (size_t)in->kn), dev_copy(rt, in->scales, (size_t)(3 * s->H) * 4),
                      dev_copy(rt, in->map, (size_t)s->B * 4), dev_copy(rt, in->lens, (size_t)s->U * 4),
                      dev_copy(rt, NULL, (size_t)in->qn * loom_dtype_size(fa_out_dt(s)))};
}

static void api_free(api_bufs *b)
{
    loom_buffer *all[] = {b->q, b->k, b->vt, b->scales, b->map, b->lens, b->out};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        loom_buffer_destroy(all[i]);
}

/* out (downloaded from b) against fa_fp8_reference of s within the bound (b8: the GPU's
 * FP8 sums, else the interpreter's f32 sums); the verdict. */
static t_verdict api_check(const fa_spec *s, const fp8_in *in, loom_buffer *out, bool b8, void *host_out)
{
    fp8_ref r = fp8_reference(s, in);
    cr_assert_eq(loom_buffer_download(out, host_out, (size_t)in->qn * loom_dtype_size(fa_out_dt(s))), LOOM_OK);
    t_verdict x = fp8_check(s, host_out, r.out, b8 ? r.b8 : r.b32, in->qn);
    fp8_ref_free(&r);
    return x;
}

Test(ikbo_fa_fp8, c_api_runs_fp8_on_the_interpreter_within_the_bound)
{
    /* shuffled, odd lengths (one user with none), n_seed 3; and full blocks, D 64, bf16 out */
    const fp8_case cases[] = {{6, 3, 208, 2, 128, 3, 1, 1, LOOM_F16}, {4, 2, 144, 2, 64, 64, 0, 0, LOOM_BF16}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const fp8_case *c = &cases[i];
        loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
        cr_assert(rt);
        loom_ikbo_fa_shape sh = api_shape(c);
        loom_ikbo_fa *p = NULL;
        /* cfg NULL: the defaults without a GPU (BN=128 for either D: the only one e4m3 builds) */
        cr_assert_eq(loom_ikbo_fa_prepare(rt, &sh, NULL, &p), LOOM_OK, "%s", loom_runtime_error(rt));
        cr_expect(strstr(loom_ikbo_fa_describe(p), "BN=128,") && strstr(loom_ikbo_fa_describe(p), "e4m3"),
                  "%s", loom_ikbo_fa_describe(p));
        fa_spec s = fp8_spec(c);
        fp8_in in = fp8_inputs(&s, c->shuffle, 31 + i);
        api_bufs b = api_upload(rt, &s, &in);
        void *out = malloc((size_t)in.qn * 2);
        cr_assert(out);
        cr_assert_eq(loom_ikbo_fa_run_scaled(p, c->B, c->U, b.q, b.k, b.vt, b.scales, b.map,
                                             c->varlen ? b.lens : NULL, b.out),
                     LOOM_OK, "%s", loom_runtime_error(rt));
        t_verdict x = api_check(&s, &in, b.out, false, out);
        cr_expect_eq(x.bad, 0, "case %zu (%s): %lld past their bound, the first out[%lld] = %.9g, want %.9g +- %.3g",
                     i, loom_ikbo_fa_describe(p), (long long)x.bad, (long long)x.first, x.got, x.ref, x.bound);
        /* a request of its own B and U (the first candidates and users): set_request, launch */
        fp8_case c2 = *c;
        c2.B = c->B - 1, c2.U = c->U - 1;
        fa_spec s2 = fp8_spec(&c2);
        fp8_in in2 = in; /* the same buffers' first elements: Vt [U, H, D, S] is user-major */
        in2.qn = fa_rows(&s2) * s2.H * s2.D, in2.kn = s2.U * s2.S * s2.H * s2.D;
        for (int64_t j = 0; j < c2.B; j++)
            in2.map[j] = in.map[j] % (int32_t)c2.U;
        char err[200];
        in2.units = fa_plan(&s2, in2.map, c2.varlen ? in2.lens : NULL, in2.plan, err, sizeof err);
        cr_assert(in2.units >= 0, "%s", err);
        cr_assert_eq(loom_ikbo_fa_set_request(p, c2.B, c2.U, in2.map, c2.varlen ? in2.lens : NULL), LOOM_OK, "%s",
                     loom_runtime_error(rt));
        cr_assert_eq(loom_buffer_fill(b.out, 0xff), LOOM_OK);
        cr_assert_eq(loom_ikbo_fa_launch_scaled(p, b.q, b.k, b.vt, b.scales, b.out), LOOM_OK, "%s",
                     loom_runtime_error(rt));
        x = api_check(&s2, &in2, b.out, false, out);
        cr_expect_eq(x.bad, 0, "case %zu at B=%lld U=%lld: %lld past their bound", i, (long long)c2.B,
                     (long long)c2.U, (long long)x.bad);
        free(out);
        api_free(&b);
        fp8_inputs_free(&in);
        loom_ikbo_fa_destroy(p);
        loom_runtime_destroy(rt);
    }
}

/* prepare refuses sh (with cfg), its message holding msg. */
static void expect_prepare_refused(loom_runtime *rt, loom_ikbo_fa_shape sh, const loom_ikbo_fa_config *cfg,
                                   const char *msg)
{
    loom_ikbo_fa *p = NULL;
    cr_expect_eq(loom_ikbo_fa_prepare(rt, &sh, cfg, &p), LOOM_ERR_INVALID, "%s: accepted", msg);
    cr_expect(strstr(loom_runtime_error(rt), msg), "want '%s', got '%s'", msg, loom_runtime_error(rt));
    cr_expect_null(p);
    loom_ikbo_fa_destroy(p);
}

/* The call st failed with LOOM_ERR_INVALID and a message holding msg. */
#define expect_refused_call(rt, st, msg)                                                                   \
    do {                                                                                                   \
        cr_expect_eq((st), LOOM_ERR_INVALID, "%s: accepted", (msg));                                       \
        cr_expect(strstr(loom_runtime_error(rt), (msg)), "want '%s', got '%s'", (msg), loom_runtime_error(rt)); \
    } while (0)

Test(ikbo_fa_fp8, c_api_refusals_name_the_field_or_argument)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt);
    fp8_case c = {4, 2, 256, 2, 128, 64, 0, 0, LOOM_F16};
    loom_ikbo_fa_shape ok = api_shape(&c), sh = ok;
    loom_ikbo_fa_config cfg = {LOOM_IKBO_FA_CONFIG(LOOM_DEFAULT)};
    sh.odtype = LOOM_E4M3;
    expect_prepare_refused(rt, sh, NULL, "shape->odtype (out's type with e4m3 inputs) must be LOOM_F16 or LOOM_BF16");
    sh = ok, sh.S = 200;
    expect_prepare_refused(rt, sh, NULL, "S must be a multiple of 16");
    sh = ok, sh.dtype = LOOM_E5M2;
    expect_prepare_refused(rt, sh, NULL, "dtype must be f16, bf16");
    cfg.bn = 64;
    expect_prepare_refused(rt, ok, &cfg, "with e4m3, BN must be 128");
    cfg.bn = 128, cfg.xunit = 1;
    expect_prepare_refused(rt, ok, &cfg, "xunit=1 is not built for e4m3");

    loom_ikbo_fa *p = NULL;
    cr_assert_eq(loom_ikbo_fa_prepare(rt, &ok, NULL, &p), LOOM_OK, "%s", loom_runtime_error(rt));
    fa_spec s = fp8_spec(&c);
    fp8_in in = fp8_inputs(&s, 0, 3);
    api_bufs b = api_upload(rt, &s, &in);
    loom_buffer *small = loom_buffer_create(rt, 8), *half_out = loom_buffer_create(rt, (size_t)in.qn);
    cr_assert(small && half_out);
    /* the plain entry points have no scales: they point to the _scaled ones */
    expect_refused_call(rt, loom_ikbo_fa_run(p, b.q, b.k, b.vt, b.map, NULL, b.out),
                        "loom_ikbo_fa_run: the shape's dtype is e4m3: its runs take the per-head scales");
    expect_refused_call(rt, loom_ikbo_fa_run_at(p, 2, 1, b.q, b.k, b.vt, b.map, NULL, b.out),
                        "use loom_ikbo_fa_run_scaled or loom_ikbo_fa_launch_scaled");
    expect_refused_call(rt, loom_ikbo_fa_launch(p, b.q, b.k, b.vt, b.out),
                        "loom_ikbo_fa_launch: the shape's dtype is e4m3");
    expect_refused_call(rt, loom_ikbo_fa_run_scaled(p, 4, 2, b.q, b.k, b.vt, NULL, b.map, NULL, b.out),
                        "loom_ikbo_fa_run_scaled: scales is NULL: dtype e4m3 needs the per-head scales [3, H] f32");
    expect_refused_call(rt, loom_ikbo_fa_run_scaled(p, 4, 2, b.q, b.k, b.vt, small, b.map, NULL, b.out),
                        "scales has 8 bytes; it must hold [3, H] f32 = 6 elements of 4 bytes (24)");
    expect_refused_call(rt, loom_ikbo_fa_run_scaled(p, 4, 2, b.q, b.k, small, b.scales, b.map, NULL, b.out),
                        "vt has 8 bytes; it must hold [U, H, D, S]");
    expect_refused_call(rt, loom_ikbo_fa_run_scaled(p, 4, 2, b.q, b.k, b.vt, b.scales, b.map, NULL, half_out),
                        "out has 65536 bytes; it must hold [B * n_seed, H, D] = 65536 elements of 2 bytes");
    expect_refused_call(rt, loom_ikbo_fa_run_scaled(p, 5, 2, b.q, b.k, b.vt, b.scales, b.map, NULL, b.out),
                        "loom_ikbo_fa_run_scaled: B is 5; it must be 1 to 4");
    cr_expect_eq(loom_ikbo_fa_set_mapping(p, in.map, NULL), LOOM_OK, "%s", loom_runtime_error(rt));
    expect_refused_call(rt, loom_ikbo_fa_launch_scaled(p, b.q, b.k, b.vt, NULL, b.out),
                        "loom_ikbo_fa_launch_scaled: scales is NULL");
    loom_ikbo_fa_destroy(p);

    /* f16 takes no scales */
    loom_ikbo_fa_shape f16 = ok;
    f16.dtype = LOOM_F16;
    cr_assert_eq(loom_ikbo_fa_prepare(rt, &f16, NULL, &p), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_ikbo_fa_set_mapping(p, in.map, NULL), LOOM_OK, "%s", loom_runtime_error(rt));
    expect_refused_call(rt, loom_ikbo_fa_launch_scaled(p, b.out, b.out, b.out, b.scales, b.out),
                        "loom_ikbo_fa_launch_scaled: scales given, but the shape's dtype is f16: scales are for e4m3");
    loom_ikbo_fa_destroy(p);
    loom_buffer_destroy(small), loom_buffer_destroy(half_out);
    api_free(&b);
    fp8_inputs_free(&in);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- PTX */

Test(ikbo_fa_fp8, headline_ptx_assembles_without_spills)
{
    fp8_case c = {2048, 32, 2048, 2, 128, 64, 0, 0, LOOM_F16};
    fa_spec s = fp8_spec(&c);
    s.ctas = 132;
    char err[4096];
    loom_kernel *k = fa_build(&s, err, sizeof err);
    cr_assert(k, "%s", err);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    cg_result r;
    cr_assert_eq(cg_compile(k, "sm_90a", &r, err, sizeof err), LOOM_OK, "%s", err);
    /* S = Q K^T: four k32 steps over D from shared memory; P V: four over the keys, A in registers */
    cr_expect(t_count(r.ptx, "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3") >= 8);
    cr_expect(t_count(r.ptx, "}, {%r") >= 4, "P V does not read A from registers");
    cr_expect(t_count(r.ptx, "shfl.sync.idx.b32") >= 16, "no quad shuffles for P's fragment");
    cr_expect_eq(t_count(r.ptx, "k16."), 0, "a 16-bit wgmma");
    /* out (full blocks): by TMA in two [64, 64] column parts a block through the group's
     * own staging slots, not from the registers */
    cr_expect_eq(t_count(r.ptx, "cp.async.bulk.tensor.3d.global.shared::cta"), 2, "out's TMA stores");
    cr_expect_eq(t_count(r.ptx, "st.global"), 0, "out stored from the registers");
    t_ptxas_ok(r.ptx, "sm_90a", "ikbo_fa e4m3 headline");
    cg_result_free(&r);
    loom_kernel_destroy(k);
}

/* The kernels the C API builds for e4m3 without a config (its untuned config: BN=128 and
 * the ring four deep), at the headline's other sizes, assemble without spills. */
Test(ikbo_fa_fp8, c_api_default_kernels_assemble_without_spills)
{
    const fp8_case cases[] = {{2048, 32, 1024, 2, 64, 64, 0, 0, LOOM_BF16},
                              {2048, 32, 2048, 2, 128, 64, 0, 1, LOOM_F16}};
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        loom_ikbo_fa_shape sh = api_shape(&cases[i]);
        loom_ikbo_fa *p = NULL;
        cr_assert_eq(loom_ikbo_fa_prepare(rt, &sh, NULL, &p), LOOM_OK, "%s", loom_runtime_error(rt));
        char err[4096], what[300];
        cg_result r;
        cr_assert_eq(cg_compile(loom_ikbo_fa_kernel(p, NULL), "sm_90a", &r, err, sizeof err), LOOM_OK, "%s", err);
        snprintf(what, sizeof what, "ikbo_fa e4m3 D=%lld%s (%s)", (long long)sh.D, sh.varlen ? " varlen" : "",
                 loom_ikbo_fa_describe(p));
        t_ptxas_ok(r.ptx, "sm_90a", what);
        cg_result_free(&r);
        loom_ikbo_fa_destroy(p);
    }
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- the GPU */

/* The f16 kernel's output at the same inputs (Q, K and V decoded from e4m3 and scaled by
 * their scales, V as [U * S, H, D]), as double. */
static void f16_output(loom_runtime *rt, const fa_spec *s8, const fp8_in *in, double *o16)
{
    fa_spec s = *s8;
    s.dt = LOOM_F16, s.vtrans = 0, s.bn = 128;
    uint16_t *q = malloc((size_t)in->qn * 2), *k = malloc((size_t)in->kn * 2), *v = malloc((size_t)in->kn * 2);
    uint16_t *out = malloc((size_t)in->qn * 2);
    cr_assert(q && k && v && out);
    fa_fp8_dequant(s8, in->q, in->k, in->vt, in->scales, LOOM_F16, q, k, v); /* the scales' products exact in f16 */
    fp8_in in16 = *in;
    in16.q = (uint8_t *)q, in16.k = (uint8_t *)k, in16.vt = (uint8_t *)v;
    in16.qn = in->qn * 2, in16.kn = in->kn * 2; /* bytes (fp8_run sizes the buffers by them) */
    char err[600];
    loom_kernel *kk = fa_build(&s, err, sizeof err);
    cr_assert(kk, "%s", err);
    size_t bytes[7] = {(size_t)in16.qn, (size_t)in16.kn, (size_t)in16.kn, (size_t)fa_max_units(&s) * FA_UNIT_FIELDS * 4,
                       (size_t)s.U * 4, 8, (size_t)in->qn * 2};
    const void *host[7] = {q, k, v, in->plan, in->lens, NULL, NULL};
    loom_buffer *b[7];
    for (int i = 0; i < 7; i++) {
        b[i] = loom_buffer_create(rt, bytes[i]);
        cr_assert(b[i]);
        cr_assert_eq(host[i] ? loom_buffer_upload(b[i], host[i], bytes[i]) : loom_buffer_fill(b[i], 0), LOOM_OK);
    }
    loom_arg a[10] = {LOOM_ARG_I32((int32_t)fa_rows(&s)), LOOM_ARG_I32((int32_t)s.U), LOOM_ARG_BUF(b[0]),
                      LOOM_ARG_BUF(b[1]), LOOM_ARG_BUF(b[2]), LOOM_ARG_BUF(b[3]), LOOM_ARG_BUF(b[4]),
                      LOOM_ARG_BUF(b[5]), LOOM_ARG_I32((int32_t)in->units), LOOM_ARG_BUF(b[6])};
    int grid[3];
    fa_grid(&s, grid);
    cr_assert_eq(loom_launch(rt, kk, grid, a, 10), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_download(b[6], out, bytes[6]), LOOM_OK);
    for (int64_t i = 0; i < in->qn; i++)
        o16[i] = tpl_get(out, LOOM_F16, i);
    for (int i = 0; i < 7; i++)
        loom_buffer_destroy(b[i]);
    loom_kernel_destroy(kk);
    free(q), free(k), free(v), free(out);
}

Test(ikbo_fa_fp8, gpu_matches_the_reference_and_reports_the_error_against_f16)
{
    loom_runtime *rt = t_gpu_or_skip();
    fp8_case c = {64, 4, 1008, 2, 128, 64, 1, 1, LOOM_F16};
    fa_spec s = fp8_spec(&c);
    s.ctas = 132;
    fp8_in in = fp8_inputs(&s, c.shuffle, 23);
    fp8_ref r = fp8_reference(&s, &in);
    void *out = malloc((size_t)in.qn * 2);
    double *o16 = malloc((size_t)in.qn * sizeof *o16);
    cr_assert(out && o16);
    fp8_run(rt, &s, &in, out);
    t_verdict x = fp8_check(&s, out, r.out, r.b8, in.qn);
    f16_output(rt, &s, &in, o16);
    double worst = 0, sum2 = 0, ref2 = 0;
    for (int64_t e = 0; e < in.qn; e++) {
        double d = tpl_get(out, LOOM_F16, e) - o16[e];
        worst = fmax(worst, fabs(d)), sum2 += d * d, ref2 += o16[e] * o16[e];
    }
    printf("ikbo_fa_fp8_gpu: B=64 U=4 S=1008 H=2 D=128 n_seed=64: worst |err|/bound %.3g against the FP8 "
           "reference; against the f16 kernel: largest |diff| %.3g, relative RMS %.3g\n",
           x.worst, worst, sqrt(sum2 / fmax(ref2, 1e-300)));
    cr_expect_eq(x.bad, 0, "%lld past their bound, the first out[%lld] = %.9g, want %.9g +- %.3g", (long long)x.bad,
                 (long long)x.first, x.got, x.ref, x.bound);
    free(out), free(o16);
    fp8_ref_free(&r);
    fp8_inputs_free(&in);
    loom_runtime_destroy(rt);
}

/* The C API end to end on the GPU: prepare with cfg NULL (the tuner's pick for e4m3, whose
 * candidates it checks against the default config's output), run_scaled against the same
 * reference within the GPU's bound, and the f16 C API on the same inputs (dequantized:
 * fa_fp8_dequant, exact in f16 at these scales) beside it, the difference reported. */
Test(ikbo_fa_fp8, gpu_c_api_tuned_matches_the_reference_and_reports_the_f16_difference)
{
    loom_runtime *rt = t_gpu_or_skip();
    fp8_case c = {64, 4, 1008, 2, 128, 64, 1, 1, LOOM_F16};
    fa_spec s = fp8_spec(&c);
    fp8_in in = fp8_inputs(&s, c.shuffle, 41);
    loom_ikbo_fa_shape sh = api_shape(&c);
    loom_ikbo_fa *p = NULL, *p16 = NULL;
    cr_assert_eq(loom_ikbo_fa_prepare(rt, &sh, NULL, &p), LOOM_OK, "%s", loom_runtime_error(rt));
    api_bufs b = api_upload(rt, &s, &in);
    cr_assert_eq(loom_ikbo_fa_run_scaled(p, c.B, c.U, b.q, b.k, b.vt, b.scales, b.map, b.lens, b.out), LOOM_OK, "%s",
                 loom_runtime_error(rt));
    uint16_t *out = malloc((size_t)in.qn * 2), *o16 = malloc((size_t)in.qn * 2);
    uint16_t *q = malloc((size_t)in.qn * 2), *k = malloc((size_t)in.kn * 2), *v = malloc((size_t)in.kn * 2);
    cr_assert(out && o16 && q && k && v);
    t_verdict x = api_check(&s, &in, b.out, true, out);
    /* the f16 C API on the same values */
    fa_fp8_dequant(&s, in.q, in.k, in.vt, in.scales, LOOM_F16, q, k, v);
    loom_ikbo_fa_shape sh16 = sh;
    sh16.dtype = LOOM_F16;
    loom_ikbo_fa_config cfg16 = {LOOM_IKBO_FA_CONFIG(LOOM_DEFAULT)};
    cr_assert_eq(loom_ikbo_fa_prepare(rt, &sh16, &cfg16, &p16), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_buffer *bq = dev_copy(rt, q, (size_t)in.qn * 2), *bk = dev_copy(rt, k, (size_t)in.kn * 2);
    loom_buffer *bv = dev_copy(rt, v, (size_t)in.kn * 2), *bo = dev_copy(rt, NULL, (size_t)in.qn * 2);
    cr_assert_eq(loom_ikbo_fa_run(p16, bq, bk, bv, b.map, b.lens, bo), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_download(bo, o16, (size_t)in.qn * 2), LOOM_OK);
    double worst = 0, sum2 = 0, ref2 = 0;
    for (int64_t e = 0; e < in.qn; e++) {
        double a = tpl_get(out, LOOM_F16, e), r = tpl_get(o16, LOOM_F16, e);
        worst = fmax(worst, fabs(a - r)), sum2 += (a - r) * (a - r), ref2 += r * r;
    }
    printf("ikbo_fa_fp8_gpu: the C API (%s): worst |err|/bound %.3g against the FP8 reference; against the f16 C "
           "API: largest |diff| %.3g, relative RMS %.3g\n",
           loom_ikbo_fa_describe(p), x.worst, worst, sqrt(sum2 / fmax(ref2, 1e-300)));
    cr_expect_eq(x.bad, 0, "%lld past their bound, the first out[%lld] = %.9g, want %.9g +- %.3g", (long long)x.bad,
                 (long long)x.first, x.got, x.ref, x.bound);
    loom_buffer_destroy(bq), loom_buffer_destroy(bk), loom_buffer_destroy(bv), loom_buffer_destroy(bo);
    free(out), free(o16), free(q), free(k), free(v);
    api_free(&b);
    fp8_inputs_free(&in);
    loom_ikbo_fa_destroy(p16);
    loom_ikbo_fa_destroy(p);
    loom_runtime_destroy(rt);
}
