/*
 * ikbo_lce_api.c -- the C API of IKBO linear compression (include/loom.h): prepare once
 * per shape, run many times, any of the co-design stages.
 *
 * What each stage launches per run (kernels from templates/ikbo_lce.c unless noted):
 *   0 materialized   gather E_cat[b] = [E_user[u(b)]; E_cand[b]], then the gemm template
 *                    over K = Ku + Kc with the concatenated weights (padded at prepare)
 *   1 decomposed     pad both weights, user GEMM (f16 user_res), candidate GEMM (f16),
 *                    the broadcast-add template
 *   2 K aligned      as 1, the weights padded once at prepare
 *   3 fused epilogue user GEMM (user_res as hi + lo planes of the dtype), candidate GEMM
 *                    adding user_res[u(b)] (its planes come through the ring as more k
 *                    steps, added on the tensor cores)
 *   4 persistent     one kernel; its counter of user tiles done grows every launch, so
 *                    each run passes the next epoch instead of clearing it
 *
 * Bad input is refused before anything runs, with a message naming the argument
 * (docs/errors.md): NULL pointers, a stage or shape the kernels cannot serve, a shape whose
 * buffers would not fit in 2^62 bytes, buffers smaller than the shape needs, and entries of
 * cand_to_user outside [0, U).  That last check reads cand_to_user back to the host: on
 * the interpreter always, on the GPU (where it costs a copy and a wait) with
 * LOOM_CHECK_INDEX=1.
 *
 * LOOM_IKBO_AUTO (ops/ikbo_lce_auto.c): the stage is picked by timing stages 0, 2, 3 and 4
 * at the shape, and the pick cached with the config.
 */
#include "lce_op.h"
#include "rt.h"
#include "../util/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct loom_ikbo_lce {
    loom_runtime *rt;
    loom_ikbo_lce_shape s;
    loom_ikbo_stage stage;
    loom_ikbo_lce_config cfg;
    ik_stage run;                 /* what a run launches (lce_op.h) */
    loom_buffer *buf[IK_NBUF];    /* the owned buffers (the caller's four slots stay NULL) */
    int64_t flag_base; /* stage 4: the flags' counter after the last run */
    /* Bucketed (nbuckets > 0): requests with B in (top[i-1], top[i]] run child[i], a whole
     * prepared object of its own stage and config, made at B = top[i] (the last top is the
     * prepared B); children with the same stage and config are one object (the larger
     * bucket's), and none of the fields above but rt, s and desc is used. */
    int nbuckets;
    int64_t top[40];
    loom_ikbo_lce *child[40];
    int32_t *index; /* the host copy of cand_to_user when runs check it (else NULL) */
    char desc[1536];
};

/* The transposed product on 224 x 128 tiles (at M = 433), two consumer warp groups, W
 * multicast over pairs of CTAs: the fastest at the headline (bench/RESULTS.md, session 8). */
static const loom_ikbo_lce_config default_cfg = {LOOM_IKBO_LCE_CONFIG(LOOM_DEFAULT)}; /* the table's (loom_ikbo.h) */
/* Plain GEMMs (stage 0's baseline, stages 1 and 2) with a transposed config: one consumer
 * warp group on 64 x 256 tiles, the fastest gemm config at the IKBO shapes (a transposed
 * tile stores through its plane steps' ring slots, which plain GEMMs do not have, so it
 * would store from registers). */
static const loom_ikbo_lce_config gemm_cfg = {
    .bm = 64, .bn = 256, .stages = 4, .cwarps = 4, .ctas = 132, .consumers = 0, .trans = 0, .cluster = 1};

loom_ikbo_lce_config ik_default_config(void) { return default_cfg; }

/* Without a config, before any tuning (and where none runs: the interpreter): the table's
 * defaults, as the template's heuristic adjusts them (e4m3: tiles whose epilogue fits the
 * registers, templates/ikbo_lce_registry.c); f16 and bf16 take the defaults as they are. */
static loom_ikbo_lce_config untuned_config(const loom_ikbo_lce_shape *s)
{
    const loom_template *t = loom_template_find("ikbo_lce");
    if (!t)
        return default_cfg;
    int64_t shape[LOOM_MAX_PARAMS], c[LOOM_MAX_PARAMS];
    ik_shape_vector(s, shape);
    loom_template_untuned_config(t, shape, c);
    return ik_config_of(c);
}

const loom_ikbo_lce_config *ik_stage_config(loom_ikbo_stage stage, const loom_ikbo_lce_config *cfg)
{
    return stage <= LOOM_IKBO_K_ALIGNED && cfg->trans ? &gemm_cfg : cfg;
}

const char *loom_ikbo_stage_name(loom_ikbo_stage s)
{
    switch (s) {
    case LOOM_IKBO_MATERIALIZED: return "materialized";
    case LOOM_IKBO_DECOMPOSED: return "decomposed";
    case LOOM_IKBO_K_ALIGNED: return "K aligned";
    case LOOM_IKBO_FUSED_EPILOGUE: return "fused epilogue";
    case LOOM_IKBO_PERSISTENT: return "persistent";
    case LOOM_IKBO_AUTO: return "auto";
    }
    return "?";
}

/* p's failure: the message into its runtime's error, the status returned. */
#define fail(p, st, ...) tpl_fail((p)->rt, (st), __VA_ARGS__)

#define dev(p, bytes, st) tpl_zeroed_buffer((p)->rt, (bytes), (st))

/* ---------------------------------------------------------------- the stage's run, as data */

/* The spec of one of the stage's kernels; planes: user_res's (ikbo_lce.h: 1 for the plain
 * GEMMs of stages 1 and 2, which take gemm_cfg's tiles where the config is transposed). */
static ik_spec spec_of(const loom_ikbo_lce_shape *s, const loom_ikbo_lce_config *cfg, ik_mode mode, int planes)
{
    const loom_ikbo_lce_config *c = planes == 1 && cfg->trans ? &gemm_cfg : cfg;
    ik_spec sp = {.mode = mode, .planes = planes, .B = s->B, .U = s->U, .M = s->M, .N = s->N, .Ku = s->Ku,
                  .Kc = s->Kc, .dt = s->dtype, .odt = ik_odt_of(s)};
    LOOM_COPY(LOOM_IKBO_LCE_CONFIG, &sp, c);
    return sp;
}

/* The knobs as the table spells them (LOOM_IKBO_LCE_CONFIG), trans and cluster only when
 * transposed: the text of an untransposed config predates them, and tuning caches hold it. */
void ik_config_text(const loom_ikbo_lce_config *c, char *buf, size_t n)
{
    static const char *const keys[] = {LOOM_IKBO_LCE_CONFIG(LOOM_KEY)};
    int64_t v[LOOM_MAX_PARAMS];
    LOOM_PACK(LOOM_IKBO_LCE_CONFIG, v, c);
    size_t w = 0;
    if (n)
        buf[0] = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && w < n; i++) {
        if (!c->trans && (!strcmp(keys[i], "trans") || !strcmp(keys[i], "cluster")))
            continue;
        int k = snprintf(buf + w, n - w, "%s%s=%lld", w ? "," : "", keys[i], (long long)v[i]);
        if (k < 0)
            break;
        w += (size_t)k;
    }
}

/* A grid that does not change with B and U. */
static loom_grid_rule rule_fixed(const int g[3])
{
    loom_grid_rule r;
    memset(&r, 0, sizeof r);
    for (int d = 0; d < 3; d++)
        r.c[d] = g[d], r.div[d] = r.mult[d] = 1;
    return r;
}

/* Template t's grid at shape sh and config cf as a rule over {B, U}: its run-time keys kb
 * and ku (-1: none) become B and U, the others fold into the constant.  *fixed: t has no
 * grid rule (its kernel serves the prepared shape alone). */
static loom_grid_rule rule_of_template(const loom_template *t, const int64_t *sh, const int64_t *cf, int kb, int ku,
                                       bool *fixed)
{
    *fixed = !t->grid_rule;
    if (!t->grid_rule) {
        int g[3];
        t->grid(sh, cf, g);
        return rule_fixed(g);
    }
    loom_grid_rule r, out;
    t->grid_rule(sh, cf, &r);
    out = r;
    for (int d = 0; d < 3; d++) {
        memset(out.per[d], 0, sizeof out.per[d]);
        for (int i = 0; i < t->nshape; i++)
            if (i == kb)
                out.per[d][IK_RULE_B] += r.per[d][i];
            else if (i == ku)
                out.per[d][IK_RULE_U] += r.per[d][i];
            else
                out.c[d] += r.per[d][i] * sh[i];
    }
    return out;
}

/* Append a launch of k (NULL: the build failed, err says why) on the grid rule; args are
 * the sources of its arguments other than run-time dims, in order.  Its run-time dims
 * (its first arguments) take the request's value of the dim they name: B (or a gemm's
 * batch, stage 0's B), U, or M (the shape's).  fixed: its grid and kernel serve the
 * prepared B and U alone. */
static loom_status add_step_rule(ik_stage *st, loom_kernel *k, const loom_grid_rule *grid, bool fixed,
                                 const int *args, int nargs, const char *why, char *err, size_t errlen)
{
    if (!k) {
        snprintf(err, errlen, "%s", why && *why ? why : "out of memory");
        return LOOM_ERR_INVALID;
    }
    ik_step *s = &st->step[st->nsteps++];
    s->k = k;
    s->grid = *grid;
    s->fixed = fixed;
    int n = 0, j = 0;
    for (int i = 0; i < loom_kernel_num_args(k); i++) {
        loom_arg_info ai;
        loom_kernel_arg_info(k, i, &ai);
        if (ai.is_dim) {
            int src = !strcmp(ai.name, "B") || !strcmp(ai.name, "batch") ? IK_SRC_B
                      : !strcmp(ai.name, "U")                              ? IK_SRC_U
                      : !strcmp(ai.name, "M")                              ? IK_SRC_M
                                                                           : -1;
            if (src < 0) {
                snprintf(err, errlen, "kernel '%s': its run-time dim '%s' is none of B, U, M", loom_kernel_name(k),
                         ai.name);
                return LOOM_ERR_INVALID;
            }
            s->arg[n++] = src;
        } else if (j < nargs) {
            s->arg[n++] = args[j++];
        } else {
            n = -1;
            break;
        }
    }
    if (n < 0 || j != nargs) {
        snprintf(err, errlen, "kernel '%s' takes %d arguments; the stage gives %d and its run-time dims",
                 loom_kernel_name(k), loom_kernel_num_args(k), nargs);
        return LOOM_ERR_INVALID;
    }
    s->nargs = n;
    return LOOM_OK;
}

static loom_status add_step(ik_stage *st, loom_kernel *k, const int grid[3], const int *args, int nargs,
                            const char *why, char *err, size_t errlen)
{
    loom_grid_rule r = rule_fixed(grid);
    return add_step_rule(st, k, &r, false, args, nargs, why, err, errlen);
}

#define ARGS(...) (const int[]){__VA_ARGS__}, (int)(sizeof((const int[]){__VA_ARGS__}) / sizeof(int))

/* A GEMM kernel of the stage, with its arguments' sources. */
static loom_status add_gemm(ik_stage *st, const loom_ikbo_lce_shape *s, const loom_ikbo_lce_config *cfg, ik_mode mode,
                            int planes, const int *args, int nargs, char *err, size_t errlen)
{
    ik_spec sp = spec_of(s, cfg, mode, planes);
    char why[256] = "";
    loom_grid_rule g;
    ik_grid_rule(&sp, IK_RULE_B, IK_RULE_U, &g);
    return add_step_rule(st, ik_build(&sp, why, sizeof why), &g, false, args, nargs, why, err, errlen);
}

/* Stage 0's GEMM (W_cat [M, kt] shared by the batch, E_cat [B, kt, N]) as the gemm
 * template's shape. */
void ik_baseline_gemm_shape(const loom_ikbo_lce_shape *s, int64_t *gs)
{
    int64_t v[] = {s->M, s->N, tpl_pad8(s->Ku + s->Kc), s->B, s->dtype, s->dtype, 1};
    memset(gs, 0, LOOM_MAX_PARAMS * sizeof *gs);
    memcpy(gs, v, sizeof v);
}

/* Stage 0's GEMM: the gemm template at gemm_pick (its tuner's pick) or with its own
 * defaults and the tile config set by name; then its TMA-store epilogue is dropped when
 * the ring leaves no shared memory for it. */
static loom_status add_baseline_gemm(ik_stage *st, const loom_ikbo_lce_shape *s, const int64_t *gemm_pick, char *err,
                                     size_t errlen)
{
    const loom_template *gt = loom_template_find("gemm");
    int64_t gs[LOOM_MAX_PARAMS], gc[LOOM_MAX_PARAMS];
    ik_baseline_gemm_shape(s, gs);
    char why[256] = "";
    if (gemm_pick) {
        memcpy(gc, gemm_pick, sizeof gc);
        loom_params_format(gt->config, gt->nconfig, gc, st->config, sizeof st->config);
    } else if (loom_params_parse(gt->config, gt->nconfig, st->config, gc, why, sizeof why) != 0) {
        snprintf(err, errlen, "the baseline gemm's config: %s", why);
        return LOOM_ERR_INVALID;
    }
    loom_kernel *k = gt->build(gs, gc, why, sizeof why);
    for (int i = 0; !k && i < gt->nconfig; i++)
        if (!strcmp(gt->config[i].key, "tmastore") && gc[i]) {
            gc[i] = 0;
            k = gt->build(gs, gc, why, sizeof why);
        }
    bool fixed;
    loom_grid_rule g = rule_of_template(gt, gs, gc, 3 /* batch */, -1, &fixed);
    return add_step_rule(st, k, &g, fixed, ARGS(IK_WU, IK_ECAT, IK_OUT), why, err, errlen);
}

loom_status ik_stage_make(const loom_ikbo_lce_shape *s, loom_ikbo_stage stage, const loom_ikbo_lce_config *cfg,
                          const int64_t *gemm_pick, ik_stage *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    size_t e = loom_dtype_size(s->dtype);
    int64_t kpu = ik_kpad(s->dtype, s->Ku), kpc = ik_kpad(s->dtype, s->Kc);
    ik_config_text(ik_stage_config(stage, cfg), st->config, sizeof st->config);
    loom_status rc = LOOM_OK;
    /* the padded weights of stages 2 to 4 (stage 1 pads them on every run) */
    const ik_fill wu = {IK_WU, 0, kpu, 0}, wc = {IK_WC, 1, kpc, 0};
    if (s->dtype == LOOM_E4M3) { /* stages 3 and 4 (ikbo_lce.h, "FP8"): user_res one f32 plane */
        if (!ik_e4m3_serves(stage)) {
            snprintf(err, errlen, "stage %d (%s) " IK_E4M3_STAGES, (int)stage, loom_ikbo_stage_name(stage));
            return LOOM_ERR_UNSUPPORTED;
        }
        st->bytes[IK_WU] = (size_t)(s->M * kpu);
        st->bytes[IK_WC] = (size_t)(s->M * kpc);
        st->fill[st->nfill++] = wu;
        st->fill[st->nfill++] = wc;
        st->bytes[IK_SWU] = st->bytes[IK_SWC] = (size_t)s->M * sizeof(float);
        st->bytes[IK_URES] = (size_t)(s->U * s->M * s->N) * sizeof(float);
        if (stage == LOOM_IKBO_PERSISTENT) {
            st->bytes[IK_FLAGS] = 4;
            st->bytes[IK_CLAIMS] = 8;
            ik_spec sp = spec_of(s, cfg, IK_FUSED, 2);
            st->blocks_per_user = ik_blocks_per_user(&sp);
            rc = add_gemm(st, s, cfg, IK_FUSED, 2,
                          ARGS(IK_WU, IK_E_USER, IK_WC, IK_E_CAND, IK_MAP, IK_URES, IK_FLAGS, IK_CLAIMS, IK_FLAG_BASE,
                               IK_OUT, IK_SWU, IK_SWC, IK_SEU, IK_SEC),
                          err, errlen);
        } else if ((rc = add_gemm(st, s, cfg, IK_USER, 2, ARGS(IK_WU, IK_E_USER, IK_URES, IK_SWU, IK_SEU), err,
                                  errlen)) == LOOM_OK) {
            rc = add_gemm(st, s, cfg, IK_CAND_FUSED, 2,
                          ARGS(IK_WC, IK_E_CAND, IK_MAP, IK_URES, IK_OUT, IK_SWC, IK_SEC), err, errlen);
        }
        if (rc != LOOM_OK)
            ik_stage_free(st);
        return rc;
    }
    switch (stage) {
    case LOOM_IKBO_MATERIALIZED: {
        int64_t kt = tpl_pad8(s->Ku + s->Kc);
        st->bytes[IK_WU] = (size_t)(s->M * kt) * e;
        st->fill[st->nfill++] = (ik_fill){IK_WU, 0, kt, 0};
        st->fill[st->nfill++] = (ik_fill){IK_WU, 1, kt, s->Ku};
        st->bytes[IK_ECAT] = (size_t)(s->B * kt * s->N) * e;
        ik_spec sp = spec_of(s, cfg, IK_CAND, 1);
        loom_grid_rule g = rule_fixed((const int[]){(int)TPL_CDIV(kt, 16), 0, 1}); /* (K blocks, B, 1) */
        g.per[1][IK_RULE_B] = 1;
        if ((rc = add_step_rule(st, ik_gather_kernel(&sp), &g, false, ARGS(IK_E_USER, IK_E_CAND, IK_MAP, IK_ECAT),
                                NULL, err, errlen)) == LOOM_OK)
            rc = add_baseline_gemm(st, s, gemm_pick, err, errlen);
        break;
    }
    case LOOM_IKBO_DECOMPOSED:
    case LOOM_IKBO_K_ALIGNED:
        st->bytes[IK_WU] = (size_t)(s->M * kpu) * e;
        st->bytes[IK_WC] = (size_t)(s->M * kpc) * e;
        if (stage == LOOM_IKBO_DECOMPOSED) {
            st->bytes[IK_WU_RAW] = (size_t)(s->M * s->Ku) * e;
            st->bytes[IK_WC_RAW] = (size_t)(s->M * s->Kc) * e;
            st->fill[st->nfill++] = (ik_fill){IK_WU_RAW, 0, s->Ku, 0};
            st->fill[st->nfill++] = (ik_fill){IK_WC_RAW, 1, s->Kc, 0};
            int gu[3], gc[3];
            tpl_pad_rows_grid(s->M, kpu, gu);
            tpl_pad_rows_grid(s->M, kpc, gc);
            if ((rc = add_step(st, tpl_pad_rows_kernel("ikbo_pad_weights", s->M, s->Ku, kpu, s->dtype), gu,
                               ARGS(IK_WU_RAW, IK_WU), NULL, err, errlen)) == LOOM_OK)
                rc = add_step(st, tpl_pad_rows_kernel("ikbo_pad_weights", s->M, s->Kc, kpc, s->dtype), gc,
                              ARGS(IK_WC_RAW, IK_WC), NULL, err, errlen);
        } else {
            st->fill[st->nfill++] = wu;
            st->fill[st->nfill++] = wc;
        }
        st->bytes[IK_URES] = (size_t)(s->U * s->M * s->N) * e;
        st->bytes[IK_CANDRES] = (size_t)(s->B * s->M * s->N) * e;
        if (rc == LOOM_OK)
            rc = add_gemm(st, s, cfg, IK_USER, 1, ARGS(IK_WU, IK_E_USER, IK_URES), err, errlen);
        if (rc == LOOM_OK)
            rc = add_gemm(st, s, cfg, IK_CAND, 1, ARGS(IK_WC, IK_E_CAND, IK_CANDRES), err, errlen);
        if (rc == LOOM_OK) {
            tpl_broadcast_add_shape bs = {s->B, s->U, s->M, s->N, s->dtype};
            const int64_t bsh[LOOM_MAX_PARAMS] = {s->B, s->U, s->M, s->N, s->dtype}, bcf[LOOM_MAX_PARAMS] = {8, 256, 4};
            bool fixed;
            loom_grid_rule g = rule_of_template(loom_template_find("ikbo_broadcast_add"), bsh, bcf, 0, 1, &fixed);
            rc = add_step_rule(st, tpl_broadcast_add(&bs, 8, 256, 4), &g, fixed,
                               ARGS(IK_CANDRES, IK_URES, IK_MAP, IK_OUT), NULL, err, errlen);
        }
        break;
    case LOOM_IKBO_FUSED_EPILOGUE:
    case LOOM_IKBO_PERSISTENT:
        st->bytes[IK_WU] = (size_t)(s->M * kpu) * e;
        st->bytes[IK_WC] = (size_t)(s->M * kpc) * e;
        st->fill[st->nfill++] = wu;
        st->fill[st->nfill++] = wc;
        st->bytes[IK_URES] = (size_t)(s->U * 2 * s->M * s->N) * e; /* hi and lo planes */
        if (stage == LOOM_IKBO_PERSISTENT) {
            st->bytes[IK_FLAGS] = 4;  /* the counter of user tiles done */
            st->bytes[IK_CLAIMS] = 8; /* the tile schedule's counter (back at zero after each run) */
            ik_spec sp = spec_of(s, cfg, IK_FUSED, 2);
            st->blocks_per_user = ik_blocks_per_user(&sp);
            rc = add_gemm(st, s, cfg, IK_FUSED, 2,
                          ARGS(IK_WU, IK_E_USER, IK_WC, IK_E_CAND, IK_MAP, IK_URES, IK_FLAGS, IK_CLAIMS, IK_FLAG_BASE,
                               IK_OUT),
                          err, errlen);
            break;
        }
        if ((rc = add_gemm(st, s, cfg, IK_USER, 2, ARGS(IK_WU, IK_E_USER, IK_URES), err, errlen)) == LOOM_OK)
            rc = add_gemm(st, s, cfg, IK_CAND_FUSED, 2, ARGS(IK_WC, IK_E_CAND, IK_MAP, IK_URES, IK_OUT), err, errlen);
        break;
    default:
        snprintf(err, errlen, "stage %d is not 0 to 4", (int)stage);
        rc = LOOM_ERR_INVALID;
    }
    if (rc != LOOM_OK)
        ik_stage_free(st);
    return rc;
}

void ik_stage_free(ik_stage *st)
{
    for (int i = 0; i < st->nsteps; i++)
        loom_kernel_destroy(st->step[i].k);
    st->nsteps = 0;
}

/* ---------------------------------------------------------------- prepare */

/* The config template `name` has the tuner pick for shape (cached on disk), into cfg. */
static loom_status tune_config(loom_runtime *rt, const char *name, const int64_t *shape, int64_t *cfg)
{
    loom_tune_opts o = {0};
    o.quiet = 1;
    loom_tuned r;
    loom_status st = loom_tune(rt, loom_template_find(name), shape, 1, &o, &r);
    if (st == LOOM_ERR_NOT_TUNED) /* the default config's kernel is ready: run it, and say so */
        st = tpl_not_tuned("loom_ikbo_lce_prepare", &r);
    if (st == LOOM_OK)
        memcpy(cfg, r.config, sizeof r.config);
    loom_tuned_release(&r, 1);
    return st;
}

/* The config of the persistent kernel the tuner picks for this shape. */
static loom_status tuned_config(loom_runtime *rt, const loom_ikbo_lce_shape *s, loom_ikbo_lce_config *cfg)
{
    int64_t shape[LOOM_MAX_PARAMS], c[LOOM_MAX_PARAMS];
    ik_shape_vector(s, shape);
    loom_status st = tune_config(rt, "ikbo_lce", shape, c);
    if (st == LOOM_OK)
        *cfg = ik_config_of(c);
    return st;
}

/* Allocate the owned buffers (zeroed), upload the weights as the fills lay them out, and
 * load the kernels. */
static loom_status build_stage(loom_ikbo_lce *p, const void *w_user, const void *w_cand, const float *w_user_scale,
                               const float *w_cand_scale, const int64_t *gemm_pick)
{
    const loom_ikbo_lce_shape *s = &p->s;
    ik_stage *run = &p->run;
    char err[300] = "";
    loom_status st = ik_stage_make(s, p->stage, &p->cfg, gemm_pick, run, err, sizeof err);
    if (st != LOOM_OK)
        return fail(p, st, "loom_ikbo_lce_prepare: %s", err);
    for (int b = IK_CALLER_BUFS; b < IK_NBUF && st == LOOM_OK; b++)
        if (run->bytes[b] && !(p->buf[b] = dev(p, run->bytes[b], &st)))
            return fail(p, st, "loom_ikbo_lce_prepare: a buffer of %zu bytes: %s", run->bytes[b],
                        loom_runtime_error(p->rt));
    size_t e = loom_dtype_size(s->dtype);
    const void *w[2] = {w_user, w_cand};
    const int64_t K[2] = {s->Ku, s->Kc};
    for (int b = IK_CALLER_BUFS; b < IK_NBUF; b++) { /* each filled buffer, whole, in one upload */
        unsigned char *h = NULL;
        for (int i = 0; i < run->nfill; i++) {
            const ik_fill *f = &run->fill[i];
            if (f->buf != b)
                continue;
            if (!h && !(h = calloc(1, run->bytes[b])))
                return fail(p, LOOM_ERR_NOMEM, "loom_ikbo_lce_prepare: no host memory for the weights");
            for (int64_t m = 0; m < s->M; m++)
                memcpy(h + (size_t)(m * f->ld + f->col0) * e,
                       (const unsigned char *)w[f->weight] + (size_t)(m * K[f->weight]) * e, (size_t)K[f->weight] * e);
        }
        if (h) {
            st = loom_buffer_upload(p->buf[b], h, run->bytes[b]);
            free(h);
            if (st != LOOM_OK)
                return fail(p, st, "loom_ikbo_lce_prepare: uploading the weights: %s", loom_runtime_error(p->rt));
        }
    }
    /* e4m3: the weights' scales, [M] f32 each */
    const float *scale[2] = {w_user_scale, w_cand_scale};
    const int sbuf[2] = {IK_SWU, IK_SWC};
    for (int i = 0; i < 2; i++)
        if (run->bytes[sbuf[i]] && (st = loom_buffer_upload(p->buf[sbuf[i]], scale[i], run->bytes[sbuf[i]])) != LOOM_OK)
            return fail(p, st, "loom_ikbo_lce_prepare: uploading the weights' scales: %s", loom_runtime_error(p->rt));
    loom_kernel *ks[IK_MAX_STEPS];
    for (int i = 0; i < run->nsteps; i++)
        ks[i] = run->step[i].k;
    if ((st = loom_prepare_many(p->rt, ks, run->nsteps, 0)) != LOOM_OK)
        return fail(p, st, "loom_ikbo_lce_prepare: %s", loom_runtime_error(p->rt));
    return LOOM_OK;
}

/* Why a shape is too large for its buffers' sizes to be computed (NULL when it is not):
 * every dim is at most 2^31 - 1 (grids are int) and every buffer, E_cat of stage 0 the
 * largest, at most 2^62 bytes.  Non-positive dims are ik_why_not's to refuse. */
static const char *shape_too_big(const loom_ikbo_lce_shape *s)
{
    const int64_t d[] = {s->B, s->U, s->M, s->N, s->Ku, s->Kc};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (d[i] > INT32_MAX)
            return "each of B, U, M, N, Ku and Kc must be below 2^31";
    if (d[0] < 1 || d[1] < 1 || d[2] < 1 || d[3] < 1 || d[4] < 1 || d[5] < 1)
        return NULL;
    /* products of up to three dims below 2^31 and a factor of at most 2 * 8: below 2^97,
     * so each is checked step by step */
    const int64_t k = s->Ku + s->Kc + 16;
    const int64_t prods[][3] = {{s->B, k, s->N}, {s->B, s->M, s->N}, {s->U, s->Ku + 8, s->N}, {2 * s->U, s->M, s->N},
                                {s->M, k, 1}};
    for (size_t i = 0; i < sizeof prods / sizeof prods[0]; i++) {
        int64_t v = 16; /* the largest element, times two planes */
        for (int j = 0; j < 3; j++)
            if (!util_mul_i64(v, prods[i][j], &v) || v > ((int64_t)1 << 62))
                return "its buffers would hold more than 2^62 bytes";
    }
    return NULL;
}

loom_status ik_prepare_stage(loom_runtime *rt, const loom_ikbo_lce_shape *shape, loom_ikbo_stage stage,
                             const void *w_user, const void *w_cand, const float *w_user_scale,
                             const float *w_cand_scale, const loom_ikbo_lce_config *cfg, bool tuned,
                             loom_ikbo_lce **out)
{
    *out = NULL;
    loom_ikbo_lce *p = calloc(1, sizeof *p);
    if (!p)
        return tpl_fail(rt, LOOM_ERR_NOMEM, "loom_ikbo_lce_prepare: out of host memory");
    p->rt = rt;
    p->s = *shape;
    p->stage = stage;
    p->cfg = *cfg;
    loom_status st = LOOM_OK;
    bool tune_gemm = tuned && stage == LOOM_IKBO_MATERIALIZED && loom_runtime_is_gpu(rt);
    int64_t gs[LOOM_MAX_PARAMS], pick[LOOM_MAX_PARAMS];
    if (tune_gemm) {
        ik_baseline_gemm_shape(shape, gs);
        if ((st = tune_config(rt, "gemm", gs, pick)) != LOOM_OK)
            st = fail(p, st, "loom_ikbo_lce_prepare: tuning stage 0's gemm: %s", loom_runtime_error(rt));
    }
    if (st == LOOM_OK)
        st = build_stage(p, w_user, w_cand, w_user_scale, w_cand_scale, tune_gemm ? pick : NULL);
    if (st == LOOM_OK && (!loom_runtime_is_gpu(rt) || util_env_on("LOOM_CHECK_INDEX")) &&
        !(p->index = malloc((size_t)shape->B * sizeof *p->index)))
        st = fail(p, LOOM_ERR_NOMEM, "loom_ikbo_lce_prepare: no host memory for checking cand_to_user");
    if (st != LOOM_OK) {
        loom_ikbo_lce_destroy(p);
        return st;
    }
    int n = snprintf(p->desc, sizeof p->desc, "stage %d (%s): %s;", (int)stage, loom_ikbo_stage_name(stage),
                     p->run.config);
    for (int i = 0; i < p->run.nsteps && n > 0 && (size_t)n < sizeof p->desc; i++)
        n += snprintf(p->desc + n, sizeof p->desc - (size_t)n, " %s", loom_kernel_name(p->run.step[i].k));
    *out = p;
    return LOOM_OK;
}

/* One prepared object at shape (its B and U the most it serves): one stage, one config.
 * hs: the largest shape of the prepare (a bucket's is smaller), at which LOOM_IKBO_AUTO
 * makes its inputs and comparisons, so that their kernels are the same in every bucket
 * (compiled once). */
static loom_status prepare_one(loom_runtime *rt, const loom_ikbo_lce_shape *shape, const loom_ikbo_lce_shape *hs,
                               loom_ikbo_stage stage, const void *w_user, const void *w_cand, const float *su,
                               const float *sc, const loom_ikbo_lce_config *cfg, loom_ikbo_lce **out)
{
    if (!rt)
        return LOOM_ERR_INVALID;
    if (!out || !shape || !w_user || !w_cand) {
        loom_runtime_set_error(rt, "loom_ikbo_lce_prepare: %s is NULL",
                               !out ? "out" : !shape ? "shape" : !w_user ? "w_user" : "w_cand");
        return LOOM_ERR_INVALID;
    }
    *out = NULL;
    if ((int)stage < 0 || stage > LOOM_IKBO_AUTO)
        return tpl_fail(rt, LOOM_ERR_INVALID, "loom_ikbo_lce_prepare: stage %d is not 0 to 4 or LOOM_IKBO_AUTO (%d)",
                        (int)stage, (int)LOOM_IKBO_AUTO);
    if (shape->dtype == LOOM_E4M3 && !ik_e4m3_serves(stage) && stage != LOOM_IKBO_AUTO)
        return tpl_fail(rt, LOOM_ERR_UNSUPPORTED, "loom_ikbo_lce_prepare: stage %d (%s) " IK_E4M3_STAGES, (int)stage,
                        loom_ikbo_stage_name(stage));
    /* the shape and config, checked before anything is allocated */
    const char *big = shape_too_big(shape);
    if (big)
        return tpl_fail(rt, LOOM_ERR_INVALID,
                        "loom_ikbo_lce_prepare: shape B=%lld, U=%lld, M=%lld, N=%lld, Ku=%lld, Kc=%lld: %s",
                        (long long)shape->B, (long long)shape->U, (long long)shape->M, (long long)shape->N,
                        (long long)shape->Ku, (long long)shape->Kc, big);
    loom_ikbo_lce_config c = cfg ? *cfg : untuned_config(shape);
    /* auto: refused only when neither fused mode serves the config (stages 0-2 are checked
     * as stage 3, as when pinned); a stage the config cannot serve is left out later */
    bool fused = stage == LOOM_IKBO_PERSISTENT || stage == LOOM_IKBO_AUTO;
    ik_spec sp = spec_of(shape, &c, fused ? IK_FUSED : IK_CAND_FUSED, 2);
    char buf[300], buf3[300];
    const char *why = ik_why_not(&sp, buf, sizeof buf);
    if (why && stage == LOOM_IKBO_AUTO) {
        ik_spec s3 = spec_of(shape, &c, IK_CAND_FUSED, 2);
        if (!ik_why_not(&s3, buf3, sizeof buf3))
            why = NULL;
    }
    if (why)
        return tpl_fail(rt, LOOM_ERR_INVALID, "loom_ikbo_lce_prepare: %s", why);
    loom_status st;
    if (!cfg && loom_runtime_is_gpu(rt) && (st = tuned_config(rt, shape, &c)) != LOOM_OK)
        return tpl_fail(rt, st, "loom_ikbo_lce_prepare: tuning: %s", loom_runtime_error(rt));
    if (stage == LOOM_IKBO_AUTO)
        return ik_auto_prepare(rt, shape, hs ? hs : shape, w_user, w_cand, su, sc, &c, !cfg, out);
    return ik_prepare_stage(rt, shape, stage, w_user, w_cand, su, sc, &c, !cfg, out);
}

/* The same stage with the same tile config of its kernels (stage 0's is its gemm's; the
 * LCE config it was prepared with does not matter then). */
static bool same_plan(const loom_ikbo_lce *a, const loom_ikbo_lce *b)
{
    return a->stage == b->stage && !strcmp(a->run.config, b->run.config);
}

/* The buckets (docs/tuning.md, "Run-time dims and buckets"): where the stage or the config
 * may differ with B (a GPU, and LOOM_IKBO_AUTO or a tuned config), each power of two below
 * the prepared B, and the prepared B, is prepared as a request of that B and of U the
 * smaller of B and the prepared U, from the largest down; a bucket whose pick is the
 * larger one's shares its object.  Otherwise one object at the prepared shape serves every
 * request (its kernels take B and U at run time). */
static loom_status prepare_buckets(loom_runtime *rt, const loom_ikbo_lce_shape *shape, loom_ikbo_stage stage,
                                   const void *w_user, const void *w_cand, const float *su, const float *sc,
                                   const loom_ikbo_lce_config *cfg, loom_ikbo_lce **out);

loom_status loom_ikbo_lce_prepare(loom_runtime *rt, const loom_ikbo_lce_shape *shape, loom_ikbo_stage stage,
                                  const void *w_user, const void *w_cand, const loom_ikbo_lce_config *cfg,
                                  loom_ikbo_lce **out)
{
    if (rt && shape && shape->dtype == LOOM_E4M3) {
        if (out)
            *out = NULL;
        return tpl_fail(rt, LOOM_ERR_INVALID,
                        "loom_ikbo_lce_prepare: dtype e4m3 takes the weights' per-row scales: call "
                        "loom_ikbo_lce_prepare_scaled (and run with loom_ikbo_lce_run_scaled)");
    }
    return prepare_buckets(rt, shape, stage, w_user, w_cand, NULL, NULL, cfg, out);
}

loom_status loom_ikbo_lce_prepare_scaled(loom_runtime *rt, const loom_ikbo_lce_shape *shape, loom_ikbo_stage stage,
                                         const void *w_user, const void *w_cand, const float *w_user_scale,
                                         const float *w_cand_scale, const loom_ikbo_lce_config *cfg,
                                         loom_ikbo_lce **out)
{
    if (!rt)
        return LOOM_ERR_INVALID;
    if (out)
        *out = NULL;
    if (shape && shape->dtype == LOOM_E4M3 && (!w_user_scale || !w_cand_scale))
        return tpl_fail(rt, LOOM_ERR_INVALID,
                        "loom_ikbo_lce_prepare_scaled: %s is NULL; dtype e4m3 needs each weight's per-row scales "
                        "(f32 [M])",
                        !w_user_scale ? "w_user_scale" : "w_cand_scale");
    if (shape && shape->dtype != LOOM_E4M3 && (w_user_scale || w_cand_scale))
        return tpl_fail(rt, LOOM_ERR_INVALID,
                        "loom_ikbo_lce_prepare_scaled: %s is given for dtype %s; scales are e4m3's (pass NULL, or "
                        "call loom_ikbo_lce_prepare)",
                        w_user_scale ? "w_user_scale" : "w_cand_scale", loom_dtype_name(shape->dtype));
    return prepare_buckets(rt, shape, stage, w_user, w_cand, w_user_scale, w_cand_scale, cfg, out);
}

static loom_status prepare_buckets(loom_runtime *rt, const loom_ikbo_lce_shape *shape, loom_ikbo_stage stage,
                                   const void *w_user, const void *w_cand, const float *su, const float *sc,
                                   const loom_ikbo_lce_config *cfg, loom_ikbo_lce **out)
{
    bool per_bucket = rt && shape && loom_runtime_is_gpu(rt) && (stage == LOOM_IKBO_AUTO || !cfg) &&
                      util_env_switch("LOOM_IKBO_BUCKETS", true) && shape->B > 1 && shape->B <= INT32_MAX;
    if (!per_bucket)
        return prepare_one(rt, shape, NULL, stage, w_user, w_cand, su, sc, cfg, out);
    loom_ikbo_lce *w = calloc(1, sizeof *w);
    if (!w)
        return tpl_fail(rt, LOOM_ERR_NOMEM, "loom_ikbo_lce_prepare: out of host memory");
    w->rt = rt;
    w->s = *shape;
    int n = 0;
    for (int64_t t = 1; t < shape->B; t *= 2)
        w->top[n++] = t;
    w->top[n++] = shape->B;
    loom_status st = LOOM_OK;
    for (int i = n - 1; i >= 0 && st == LOOM_OK; i--) {
        loom_ikbo_lce_shape b = *shape;
        b.B = w->top[i];
        b.U = shape->U < b.B ? shape->U : b.B;
        loom_ikbo_lce *c = NULL;
        if ((st = prepare_one(rt, &b, shape, stage, w_user, w_cand, su, sc, cfg, &c)) != LOOM_OK)
            break;
        w->nbuckets++;
        if (i < n - 1 && same_plan(c, w->child[i + 1])) {
            loom_ikbo_lce_destroy(c);
            c = w->child[i + 1];
        }
        w->child[i] = c;
    }
    if (st != LOOM_OK) {
        for (int i = n - w->nbuckets; i < n; i++) /* the prepared ones: the largest */
            if (i == n - 1 || w->child[i] != w->child[i + 1])
                loom_ikbo_lce_destroy(w->child[i]);
        w->nbuckets = 0;
        free(w);
        return st;
    }
    /* one plan for every bucket: that object alone */
    if (w->child[0] == w->child[n - 1]) {
        *out = w->child[n - 1];
        free(w);
        return LOOM_OK;
    }
    int len = snprintf(w->desc, sizeof w->desc, "%s; buckets:", w->child[n - 1]->desc);
    for (int i = 0; i < n && len > 0 && (size_t)len < sizeof w->desc; i++)
        if (i == n - 1 || w->child[i] != w->child[i + 1])
            len += snprintf(w->desc + len, sizeof w->desc - (size_t)len, " B<=%lld stage %d (%s)", (long long)w->top[i],
                            (int)w->child[i]->stage, w->child[i]->run.config);
    *out = w;
    return LOOM_OK;
}

static loom_status check_buf(loom_ikbo_lce *p, const char *fn, const loom_buffer *b, const char *name, int64_t d0,
                             int64_t d1, int64_t d2, size_t e)
{
    /* each product is below 2^62 bytes (shape_too_big at prepare); checked all the same */
    int64_t elems = INT64_MAX;
    size_t need = SIZE_MAX;
    if (util_prod_i64((const int64_t[]){d0, d1, d2}, 3, &elems))
        util_mul_size((size_t)elems, e, &need);
    if (!b)
        return fail(p, LOOM_ERR_INVALID, "%s: %s is NULL", fn, name);
    if (loom_buffer_size(b) < need)
        return fail(p, LOOM_ERR_INVALID,
                    "%s: %s has %zu bytes; it must hold [%lld, %lld, %lld] elements of %zu bytes (%zu bytes)", fn,
                    name, loom_buffer_size(b), (long long)d0, (long long)d1, (long long)d2, e, need);
    return LOOM_OK;
}

/* Every entry of cand_to_user[0, B) in [0, U): read back to the host (p->index). */
static loom_status check_index(loom_ikbo_lce *p, const loom_buffer *map, int64_t B, int64_t U)
{
    loom_status st = loom_buffer_download(map, p->index, (size_t)B * sizeof *p->index);
    if (st != LOOM_OK)
        return fail(p, st, "loom_ikbo_lce_run: reading cand_to_user back to check it: %s", loom_runtime_error(p->rt));
    for (int64_t b = 0; b < B; b++)
        if (p->index[b] < 0 || p->index[b] >= U)
            return fail(p, LOOM_ERR_INVALID,
                        "loom_ikbo_lce_run: cand_to_user[%lld] is %d; every entry must be a user in [0, U) = [0, %lld)",
                        (long long)b, (int)p->index[b], (long long)U);
    return LOOM_OK;
}

/* The request's B and U: at least 1 and at most the prepared shape's. */
static loom_status check_dims(loom_ikbo_lce *p, const char *fn, int64_t B, int64_t U)
{
    loom_status st = tpl_check_request(p->rt, fn, B, U, p->s.B, p->s.U);
    if (st != LOOM_OK)
        return st;
    if (B != p->s.B || U != p->s.U)
        for (int i = 0; i < p->run.nsteps; i++)
            if (p->run.step[i].fixed)
                return fail(p, LOOM_ERR_UNSUPPORTED,
                            "%s: stage %d's kernel '%s' serves only the prepared B=%lld and U=%lld, not B=%lld U=%lld",
                            fn, (int)p->stage, loom_kernel_name(p->run.step[i].k), (long long)p->s.B,
                            (long long)p->s.U, (long long)B, (long long)U);
    return LOOM_OK;
}

/* seu, sec: e4m3's embedding scales (NULL for f16 and bf16); scaled: the caller is
 * loom_ikbo_lce_run_scaled. */
static loom_status run_at(loom_ikbo_lce *p, const char *fn, int64_t B, int64_t U, loom_buffer *e_user,
                          loom_buffer *e_cand, loom_buffer *seu, loom_buffer *sec, loom_buffer *cand_to_user,
                          loom_buffer *out, bool scaled)
{
    bool fp8 = p->s.dtype == LOOM_E4M3;
    if (fp8 != scaled)
        return fail(p, LOOM_ERR_INVALID,
                    fp8 ? "%s: the handle is dtype e4m3, whose runs take the embeddings' scales: call "
                          "loom_ikbo_lce_run_scaled"
                        : "%s: the handle is dtype %s, whose runs take no scales: call loom_ikbo_lce_run_at (scales "
                          "are e4m3's, loom_ikbo_lce_prepare_scaled)",
                    fn, loom_dtype_name(p->s.dtype));
    if (p->nbuckets) { /* the request's bucket */
        if (B < 1 || B > p->s.B || U < 1 || U > p->s.U)
            return tpl_check_request(p->rt, fn, B, U, p->s.B, p->s.U);
        int i = 0;
        while (p->top[i] < B)
            i++;
        loom_status st = run_at(p->child[i], fn, B, U, e_user, e_cand, seu, sec, cand_to_user, out, scaled);
        return st;
    }
    const loom_ikbo_lce_shape *s = &p->s;
    const ik_stage *run = &p->run;
    size_t e = loom_dtype_size(s->dtype), eo = fp8 ? loom_dtype_size(s->odtype) : e;
    loom_status st;
    if ((st = check_dims(p, fn, B, U)) != LOOM_OK)
        return st;
    if (fp8) { /* E^T [U, N, Ku], [B, N, Kc]; the scales [U], [B] */
        if ((st = check_buf(p, fn, e_user, "e_user (E_user^T)", U, s->N, s->Ku, e)) != LOOM_OK ||
            (st = check_buf(p, fn, e_cand, "e_cand (E_cand^T)", B, s->N, s->Kc, e)) != LOOM_OK ||
            (st = check_buf(p, fn, seu, "e_user_scale", U, 1, 1, 4)) != LOOM_OK ||
            (st = check_buf(p, fn, sec, "e_cand_scale", B, 1, 1, 4)) != LOOM_OK)
            return st;
    } else if ((st = check_buf(p, fn, e_user, "e_user", U, s->Ku, s->N, e)) != LOOM_OK ||
               (st = check_buf(p, fn, e_cand, "e_cand", B, s->Kc, s->N, e)) != LOOM_OK) {
        return st;
    }
    if ((st = check_buf(p, fn, cand_to_user, "cand_to_user", B, 1, 1, 4)) != LOOM_OK ||
        (st = check_buf(p, fn, out, "out", B, s->M, s->N, eo)) != LOOM_OK)
        return st;
    /* the kernels read the inputs while out is written (as loom_gemm_run refuses C = A) */
    const loom_buffer *ins[] = {e_user, e_cand, cand_to_user, seu, sec};
    static const char *const in_names[] = {"e_user", "e_cand", "cand_to_user", "e_user_scale", "e_cand_scale"};
    for (int i = 0; i < (fp8 ? 5 : 3); i++)
        if (out == ins[i])
            return fail(p, LOOM_ERR_INVALID, "%s: out is also %s; the output needs a buffer of its own", fn,
                        in_names[i]);
    if (p->index && (st = check_index(p, cand_to_user, B, U)) != LOOM_OK)
        return st;
    /* stage 4: its counter of user tiles done grows by U * blocks_per_user every launch;
     * start over before it wraps */
    int64_t adds = U * run->blocks_per_user;
    if (run->blocks_per_user && p->flag_base + adds > INT32_MAX) {
        if ((st = loom_buffer_fill(p->buf[IK_FLAGS], 0)) != LOOM_OK)
            return fail(p, st, "%s: clearing the flags: %s", fn, loom_runtime_error(p->rt));
        p->flag_base = 0;
    }
    loom_buffer *bufs[IK_NBUF];
    memcpy(bufs, p->buf, sizeof bufs);
    bufs[IK_E_USER] = e_user, bufs[IK_E_CAND] = e_cand, bufs[IK_MAP] = cand_to_user, bufs[IK_OUT] = out;
    bufs[IK_SEU] = seu, bufs[IK_SEC] = sec;
    const int64_t dims[LOOM_MAX_PARAMS] = {[IK_RULE_B] = B, [IK_RULE_U] = U};
    for (int i = 0; i < run->nsteps; i++) {
        const ik_step *sp = &run->step[i];
        loom_arg a[LOOM_MAX_ARGS];
        for (int j = 0; j < sp->nargs; j++)
            switch (sp->arg[j]) {
            case IK_FLAG_BASE: a[j] = LOOM_ARG_I32((int32_t)p->flag_base); break;
            case IK_SRC_B: a[j] = LOOM_ARG_I32((int32_t)B); break;
            case IK_SRC_U: a[j] = LOOM_ARG_I32((int32_t)U); break;
            case IK_SRC_M: a[j] = LOOM_ARG_I32((int32_t)s->M); break;
            default: a[j] = LOOM_ARG_BUF(bufs[sp->arg[j]]);
            }
        int grid[3];
        loom_grid_rule_eval(&sp->grid, dims, grid); /* B, U below 2^31 and prepared: in range */
        if ((st = loom_launch(p->rt, sp->k, grid, a, sp->nargs)) != LOOM_OK) {
            if (!strstr(loom_runtime_error(p->rt), fn))
                fail(p, st, "%s (%s): %s", fn, loom_kernel_name(sp->k), loom_runtime_error(p->rt));
            return st;
        }
    }
    p->flag_base += adds;
    return LOOM_OK;
}

loom_status loom_ikbo_lce_run(loom_ikbo_lce *p, loom_buffer *e_user, loom_buffer *e_cand, loom_buffer *cand_to_user,
                              loom_buffer *out)
{
    if (!p)
        return LOOM_ERR_INVALID;
    return run_at(p, "loom_ikbo_lce_run", p->s.B, p->s.U, e_user, e_cand, NULL, NULL, cand_to_user, out, false);
}

loom_status loom_ikbo_lce_run_at(loom_ikbo_lce *p, int64_t B, int64_t U, loom_buffer *e_user, loom_buffer *e_cand,
                                 loom_buffer *cand_to_user, loom_buffer *out)
{
    if (!p)
        return LOOM_ERR_INVALID;
    return run_at(p, "loom_ikbo_lce_run_at", B, U, e_user, e_cand, NULL, NULL, cand_to_user, out, false);
}

loom_status loom_ikbo_lce_run_scaled(loom_ikbo_lce *p, int64_t B, int64_t U, loom_buffer *e_user, loom_buffer *e_cand,
                                     loom_buffer *e_user_scale, loom_buffer *e_cand_scale, loom_buffer *cand_to_user,
                                     loom_buffer *out)
{
    if (!p)
        return LOOM_ERR_INVALID;
    return run_at(p, "loom_ikbo_lce_run_scaled", B, U, e_user, e_cand, e_user_scale, e_cand_scale, cand_to_user, out,
                  true);
}

const char *loom_ikbo_lce_describe(const loom_ikbo_lce *p) { return p ? p->desc : ""; }

void ik_desc_add(loom_ikbo_lce *p, const char *fmt, ...)
{
    size_t n = strlen(p->desc);
    if (n + 1 >= sizeof p->desc)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->desc + n, sizeof p->desc - n, fmt, ap);
    va_end(ap);
}

/* The object that runs requests of the prepared B (the largest bucket's). */
static const loom_ikbo_lce *top_of(const loom_ikbo_lce *p) { return p && p->nbuckets ? p->child[p->nbuckets - 1] : p; }

uint64_t ik_owned_buffer(const loom_ikbo_lce *p, int buf, size_t *bytes)
{
    p = top_of(p);
    const loom_buffer *b = p && buf >= 0 && buf < IK_NBUF ? p->buf[buf] : NULL;
    if (bytes)
        *bytes = b ? loom_buffer_size(b) : 0;
    return b ? rt_buffer_dptr(b) : 0;
}

loom_ikbo_stage loom_ikbo_lce_stage_of(const loom_ikbo_lce *p) { return p ? top_of(p)->stage : LOOM_IKBO_AUTO; }

loom_ikbo_stage loom_ikbo_lce_stage_at(const loom_ikbo_lce *p, int64_t B)
{
    if (!p || B < 1 || B > p->s.B)
        return LOOM_IKBO_AUTO;
    int i = 0;
    while (p->nbuckets && p->top[i] < B)
        i++;
    return p->nbuckets ? p->child[i]->stage : p->stage;
}

loom_ikbo_lce_config loom_ikbo_lce_config_of(const loom_ikbo_lce *p)
{
    return p ? top_of(p)->cfg : (loom_ikbo_lce_config){0, 0, 0, 0, 0, 0, 0, 0};
}

loom_kernel *loom_ikbo_lce_kernel(const loom_ikbo_lce *p, int i, int grid[3])
{
    p = top_of(p);
    if (!p || i < 0 || i >= p->run.nsteps)
        return NULL;
    if (grid)
        loom_grid_rule_eval(&p->run.step[i].grid, (const int64_t[LOOM_MAX_PARAMS]){p->s.B, p->s.U}, grid);
    return p->run.step[i].k;
}

void loom_ikbo_lce_destroy(loom_ikbo_lce *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->nbuckets; i++)
        if (i == p->nbuckets - 1 || p->child[i] != p->child[i + 1])
            loom_ikbo_lce_destroy(p->child[i]);
    ik_stage_free(&p->run);
    for (int b = 0; b < IK_NBUF; b++)
        loom_buffer_destroy(p->buf[b]);
    free(p->index);
    free(p);
}
