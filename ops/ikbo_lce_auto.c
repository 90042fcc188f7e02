/*
 * ikbo_lce_auto.c -- LOOM_IKBO_AUTO: the IKBO linear compression's stage picked by timing
 * at the shape (the rest of the operation is ops/ikbo_lce_api.c).
 *
 * Which stage is fastest depends on the shape: at B=509 U=509 M=433 N=72 Ku=1025 Kc=1023
 * stage 4 took 0.344 ms and stages 0-2 about 0.93 on an H100, while at B=1000 U=7 M=200
 * N=136 Ku=64 Kc=8 (small K) stage 4 took 0.113 ms and the framework's three launches
 * 0.075 (issue 21).  So auto times the candidates at the shape and keeps the fastest:
 * stage 0 (loom's own version of the framework's index_select + cat + GEMM, so the pick
 * is never slower than that path), 2 (decomposed, the broadcast-add), 3 (the fused
 * epilogue) and 4 (persistent).  Stage 1 is stage 2 plus two pad kernels a run, never
 * faster, so it is not timed.
 *
 * On the GPU the pick is the tuner's (tune_pick, tune/pick.c): the candidates are its
 * alternatives, each prepared with the config (stage 4's tuned one; stages 0-2 take their
 * plain-GEMM tiles where it is transposed) and run on inputs made here on the device (the
 * tuner's fill kernels, a contiguous mapping, as the tuner's ikbo_lce default); their
 * outputs are checked against one another by the error model, with ik_pair_bound_kernel's
 * bound (two right stages' f32 sums, rounded halves and final roundings) -- ties go to
 * the earlier stage, stage 0, the framework's algorithm, first -- and timed side by side;
 * the fastest is kept, the others freed.
 *
 * The pick goes into the tuning cache (tune/tune_cache.c) under the stage-4 config's key
 * plus "|pick=stage|cfg=<config>" ("cfg=tuned" where the config was left to the tuner),
 * as an entry of template "ikbo_lce_stage" whose "config" holds the stage and each
 * candidate's time in ns (0: dropped); the file's format is unchanged.  A warm prepare
 * reads it and times nothing; LOOM_TUNE_FORCE=1 times again; LOOM_TUNE=0 times nothing (a
 * cached pick is still used).  Without a GPU, or with LOOM_IKBO_AUTO=0, nothing is timed:
 * stage 4, or the first stage of auto_untimed the config serves.
 */
#include "lce_op.h"
#include "tune.h"
#include "../util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const loom_ikbo_stage auto_stages[] = {LOOM_IKBO_MATERIALIZED, LOOM_IKBO_K_ALIGNED, LOOM_IKBO_FUSED_EPILOGUE,
                                              LOOM_IKBO_PERSISTENT};
enum { AUTO_N = 4 };
/* untimed, the stages in order of preference: fewest launches and buffers first */
static const loom_ikbo_stage auto_untimed[] = {LOOM_IKBO_PERSISTENT, LOOM_IKBO_FUSED_EPILOGUE, LOOM_IKBO_K_ALIGNED,
                                               LOOM_IKBO_MATERIALIZED};
static const char auto_skip1[] = "stage 1 not timed (stage 2 plus two pad kernels a run)";

/* The message of a failed prepare or run, without its "loom_ikbo_lce_prepare: " prefix. */
static void why_from(loom_runtime *rt, char *why, size_t n)
{
    const char *e = loom_runtime_error(rt), *c = strstr(e, ": ");
    snprintf(why, n, "%s", !strncmp(e, "loom_ikbo_lce_", 14) && c ? c + 2 : e);
}

/* No timing: stage 4, or the first of auto_untimed the config serves.  because: why
 * nothing is timed. */
static loom_status auto_untimed_pick(loom_runtime *rt, const loom_ikbo_lce_shape *s, const void *wu, const void *wc,
                                     const float *su, const float *sc, const loom_ikbo_lce_config *cfg, bool tuned,
                                     const char *because, loom_ikbo_lce **out)
{
    char first[300] = "";
    loom_status st = LOOM_ERR_INVALID;
    for (int i = 0; i < AUTO_N; i++) {
        if (s->dtype == LOOM_E4M3 && !ik_e4m3_serves(auto_untimed[i]))
            break; /* e4m3: stages 3 and 4 only (auto_untimed lists them first) */
        if ((st = ik_prepare_stage(rt, s, auto_untimed[i], wu, wc, su, sc, cfg, tuned, out)) == LOOM_OK) {
            ik_desc_add(*out, "; auto (not timed: %s): stage %d", because, (int)auto_untimed[i]);
            if (i)
                ik_desc_add(*out, ", as stage 4 cannot serve the config (%s)", first);
            return LOOM_OK;
        }
        if (!i)
            why_from(rt, first, sizeof first);
    }
    return tpl_fail(rt, st, "loom_ikbo_lce_prepare: auto: no stage serves the shape and config; stage 4: %s", first);
}

/* ---------------------------------------------------------------- the candidates, as the tuner's alternatives */

typedef struct auto_ctx {
    loom_runtime *rt;
    const loom_ikbo_lce_shape *s, *hs; /* the prepare's shape, and its largest (a bucket's is smaller) */
    const void *wu, *wc;               /* the host's weights [M, K] */
    const loom_ikbo_lce_config *cfg;
    bool tuned;
    loom_ikbo_lce *p[AUTO_N];
    loom_buffer *eu, *ec, *map; /* the inputs run reads: one set of eus and ecs */
    int places;                 /* the most sets the pick may time on */
    loom_buffer *eus[TUNE_PICK_PLACES], *ecs[TUNE_PICK_PLACES]; /* made as the pick asks for them */
    loom_kernel *fill[2];       /* E_user's and E_cand's fill kernels, kept for the sets made later */
    int fg[2][3];
} auto_ctx;

/* The elements of E_user (n[0]) and E_cand (n[1]) at hs, the prepare's largest shape (the
 * same kernels in every bucket). */
static void e_elements(const loom_ikbo_lce_shape *hs, int64_t n[2])
{
    n[0] = hs->U * hs->Ku * hs->N, n[1] = hs->B * hs->Kc * hs->N;
}

/* Input set j: E_user and E_cand at hs, allocated apart from the other sets, uniform in
 * [-1, 1) by the tuner's fill kernel with the same seeds, so every set holds the same
 * values. */
static loom_status set_make(auto_ctx *a, int j)
{
    size_t e = loom_dtype_size(a->s->dtype);
    int64_t n[2];
    e_elements(a->hs, n);
    loom_status st = LOOM_OK;
    if (!(a->eus[j] = tpl_zeroed_buffer(a->rt, (size_t)n[0] * e, &st)) ||
        !(a->ecs[j] = tpl_zeroed_buffer(a->rt, (size_t)n[1] * e, &st))) {
        loom_buffer_destroy(a->eus[j]);
        a->eus[j] = NULL;
        return st;
    }
    for (int i = 0; i < 2 && st == LOOM_OK; i++) {
        loom_arg args[6];
        tune_fill_args(i ? a->ecs[j] : a->eus[j], 0x1b2c3d4e5full + (uint64_t)i, -1.0, 1.0, 0, 0, n[i], args);
        st = loom_launch(a->rt, a->fill[i], a->fg[i], args, 6);
    }
    if (st != LOOM_OK) { /* not made: a later ask makes it again */
        loom_buffer_destroy(a->eus[j]);
        loom_buffer_destroy(a->ecs[j]);
        a->eus[j] = a->ecs[j] = NULL;
    }
    return st;
}

/* The first input set and the mapping (contiguous runs of candidates, b * U / B, at s).
 * More sets come when the pick asks for them (auto_place): a stage's time depends on
 * where E_cand lies (up to 25% at a narrow N; docs/tuning.md), so each is timed on
 * several. */
static loom_status inputs_make(auto_ctx *a)
{
    loom_runtime *rt = a->rt;
    const loom_ikbo_lce_shape *s = a->s, *hs = a->hs;
    int64_t n[2];
    e_elements(hs, n);
    for (int i = 0; i < 2; i++) {
        a->fg[i][0] = a->fg[i][1] = a->fg[i][2] = 1;
        if (!(a->fill[i] = tune_fill_kernel(s->dtype, n[i], &a->fg[i][0])))
            return tpl_fail(rt, LOOM_ERR_UNSUPPORTED, "%lld elements cannot be filled on the device", (long long)n[i]);
    }
    loom_status st = loom_prepare_many(rt, a->fill, 2, 0); /* both compiled at once */
    if (st != LOOM_OK || (st = set_make(a, 0)) != LOOM_OK)
        return st;
    a->eu = a->eus[0], a->ec = a->ecs[0];
    if (!(a->map = tpl_zeroed_buffer(rt, (size_t)hs->B * 4, &st)))
        return st;
    int32_t *map = malloc((size_t)s->B * sizeof *map);
    if (!map)
        return tpl_fail(rt, LOOM_ERR_NOMEM, "out of host memory");
    ik_mapping(s->B, s->U, 0, 0, map);
    st = loom_buffer_upload(a->map, map, (size_t)s->B * sizeof *map);
    free(map);
    return st;
}

/* Every candidate stage's kernels compiled at once (loom_prepare_many), before the stages
 * are prepared one by one (which then find them in memory): the compiles overlap instead
 * of adding up.  Stage 0 with its GEMM left to the tuner is left out: the tuner compiles
 * its candidates in parallel itself.  A failure here is not reported: the stage's own
 * prepare meets it again and says so. */
static void auto_precompile(loom_runtime *rt, const loom_ikbo_lce_shape *s, const loom_ikbo_lce_config *cfg,
                            bool tuned)
{
    if (!loom_runtime_is_gpu(rt))
        return;
    ik_stage runs[AUTO_N];
    loom_kernel *ks[AUTO_N * IK_MAX_STEPS];
    int n = 0;
    memset(runs, 0, sizeof runs);
    for (int i = 0; i < AUTO_N; i++) {
        char err[300];
        if ((tuned && auto_stages[i] == LOOM_IKBO_MATERIALIZED) ||
            ik_stage_make(s, auto_stages[i], cfg, NULL, &runs[i], err, sizeof err) != LOOM_OK)
            continue;
        for (int j = 0; j < runs[i].nsteps; j++)
            ks[n++] = runs[i].step[j].k;
    }
    (void)loom_prepare_many(rt, ks, n, 0);
    for (int i = 0; i < AUTO_N; i++)
        ik_stage_free(&runs[i]);
}

/* tune_pick_spec.setup: the inputs, then the candidates' kernels compiled. */
static loom_status auto_setup(void *ctx)
{
    auto_ctx *a = ctx;
    loom_status st = inputs_make(a);
    if (st == LOOM_OK)
        auto_precompile(a->rt, a->s, a->cfg, a->tuned);
    return st;
}

static loom_status auto_prepare_one(void *ctx, int i)
{
    auto_ctx *a = ctx;
    return ik_prepare_stage(a->rt, a->s, auto_stages[i], a->wu, a->wc, NULL, NULL, a->cfg, a->tuned, &a->p[i]);
}

static loom_status auto_run(void *ctx, int i, loom_buffer *out)
{
    auto_ctx *a = ctx;
    return loom_ikbo_lce_run(a->p[i], a->eu, a->ec, a->map, out);
}

/* tune_pick_spec.place: set j current, made on its first use. */
static loom_status auto_place(void *ctx, int j)
{
    auto_ctx *a = ctx;
    loom_status st = a->eus[j] ? LOOM_OK : set_make(a, j);
    if (st == LOOM_OK)
        a->eu = a->eus[j], a->ec = a->ecs[j];
    return st;
}

static void auto_release(void *ctx, int i)
{
    auto_ctx *a = ctx;
    loom_ikbo_lce_destroy(a->p[i]);
    a->p[i] = NULL;
}

/* tune_pick_spec.bound: the pair bound of two stages' outputs (ik_pair_bound_kernel,
 * templates/tpl_device.h) at hs, computed once from the inputs and the host's weights. */
static loom_status auto_bound(void *ctx, loom_buffer *bound)
{
    auto_ctx *a = ctx;
    loom_runtime *rt = a->rt;
    const loom_ikbo_lce_shape *s = a->hs;
    int bg[3];
    loom_kernel *bk = ik_pair_bound_kernel(s->B, s->U, s->M, s->N, s->Ku, s->Kc, s->dtype, bg);
    if (!bk)
        return tpl_fail(rt, LOOM_ERR_UNSUPPORTED, "outputs of %lld elements cannot be compared",
                        (long long)(s->B * s->M * s->N));
    size_t e = loom_dtype_size(s->dtype);
    loom_buffer *wu = NULL, *wc = NULL;
    loom_status st = LOOM_OK;
    if ((wu = tpl_zeroed_buffer(rt, (size_t)(s->M * s->Ku) * e, &st)) &&
        (wc = tpl_zeroed_buffer(rt, (size_t)(s->M * s->Kc) * e, &st)) &&
        (st = loom_buffer_upload(wu, a->wu, (size_t)(s->M * s->Ku) * e)) == LOOM_OK &&
        (st = loom_buffer_upload(wc, a->wc, (size_t)(s->M * s->Kc) * e)) == LOOM_OK) {
        loom_arg args[6] = {LOOM_ARG_BUF(wu),    LOOM_ARG_BUF(a->eu), LOOM_ARG_BUF(wc),
                            LOOM_ARG_BUF(a->ec), LOOM_ARG_BUF(a->map), LOOM_ARG_BUF(bound)};
        st = loom_launch(rt, bk, bg, args, 6);
    }
    loom_buffer_destroy(wu);
    loom_buffer_destroy(wc);
    loom_kernel_destroy(bk);
    return st;
}

/* ---------------------------------------------------------------- the pick */

/* The pick's description after the prepared stage's own. */
static void auto_describe(const tune_pick_spec *sp, const tune_picked *r, loom_ikbo_lce *p)
{
    char list[2400];
    tune_pick_describe(sp, r, list, sizeof list);
    ik_desc_add(p, "; auto (%s):%s; %s", r->cached ? "cached" : "timed", list, auto_skip1);
    if (r->note[0])
        ik_desc_add(p, "; %s", r->note);
    if (r->store_err[0])
        ik_desc_add(p, "; not cached: %s", r->store_err);
}

loom_status ik_auto_prepare(loom_runtime *rt, const loom_ikbo_lce_shape *s, const loom_ikbo_lce_shape *hs,
                            const void *w_user, const void *w_cand, const float *w_user_scale,
                            const float *w_cand_scale, const loom_ikbo_lce_config *cfg, bool tuned,
                            loom_ikbo_lce **out)
{
    if (!util_env_switch("LOOM_IKBO_AUTO", true))
        return auto_untimed_pick(rt, s, w_user, w_cand, w_user_scale, w_cand_scale, cfg, tuned, "LOOM_IKBO_AUTO=0",
                                 out);
    if (!loom_runtime_is_gpu(rt))
        return auto_untimed_pick(rt, s, w_user, w_cand, w_user_scale, w_cand_scale, cfg, tuned, "no GPU", out);
    /* e4m3 serves stages 3 and 4 only; the timed pick's inputs, fills and pairwise bound
     * are f16 and bf16's, so e4m3 takes stage 4 (or 3 where the config cannot serve 4) */
    if (s->dtype == LOOM_E4M3)
        return auto_untimed_pick(rt, s, w_user, w_cand, w_user_scale, w_cand_scale, cfg, tuned,
                                 "e4m3, whose stages 3 and 4 are not timed", out);
    auto_ctx a = {.rt = rt, .s = s, .hs = hs, .wu = w_user, .wc = w_cand, .cfg = cfg, .tuned = tuned,
                  .places = (int)util_env_int("LOOM_IKBO_AUTO_PLACES", TUNE_PICK_PLACES, 1, TUNE_PICK_PLACES)};
    /* the key: ikbo_lce's at s (it has no bucket), then the config's text; "tuned" where the
     * config was left to the tuner, whose pick can change between two tunings whose best
     * configs time within noise of each other (keyed by its text, the stage pick would be
     * lost) */
    char variant[220] = "cfg=tuned";
    if (!tuned)
        ik_config_text(cfg, variant + 4, sizeof variant - 24);
    if (a.places > 1) /* a pick over placements is not the one-set pick of before */
        snprintf(variant + strlen(variant), sizeof variant - strlen(variant), "|places=%d", a.places);
    int64_t shape[LOOM_MAX_PARAMS];
    ik_shape_vector(s, shape);
    tune_pick_spec sp = {
        .fn = "loom_ikbo_lce_prepare: auto", .what = "stage", .strip = "loom_ikbo_lce_", .n = AUTO_N,
        .t = loom_template_find("ikbo_lce"), .shape = shape, .variant = variant, .entry = "ikbo_lce_stage",
        .doc = "the stage LOOM_IKBO_AUTO picked at the shape, and each candidate's time (ns; 0: dropped)",
        .def = LOOM_IKBO_PERSISTENT,
        .out_bytes = (size_t)(hs->B * hs->M * hs->N) * loom_dtype_size(hs->dtype), .dtype = hs->dtype,
        .nelem = hs->B * hs->M * hs->N, .rtol = ik_pair_rtol(hs->dtype),
        .ctx = &a, .setup = auto_setup, .prepare = auto_prepare_one, .run = auto_run, .release = auto_release,
        .places = a.places, .places_first = a.places < 3 ? a.places : 3, .place = auto_place,
        .bound = auto_bound,
    };
    for (int i = 0; i < AUTO_N; i++)
        sp.value[i] = auto_stages[i];
    tune_picked r;
    loom_status st = tune_pick(rt, &sp, &r);
    for (int j = 0; j < a.places; j++) {
        loom_buffer_destroy(a.eus[j]);
        loom_buffer_destroy(a.ecs[j]);
    }
    loom_buffer_destroy(a.map);
    for (int i = 0; i < 2; i++)
        loom_kernel_destroy(a.fill[i]);
    if (st != LOOM_OK)
        return st;
    if (r.best < 0)
        return auto_untimed_pick(rt, s, w_user, w_cand, NULL, NULL, cfg, tuned, r.untimed, out);
    auto_describe(&sp, &r, a.p[r.best]);
    *out = a.p[r.best];
    return LOOM_OK;
}
