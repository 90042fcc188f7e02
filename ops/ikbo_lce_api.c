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
 * LOOM_IKBO_AUTO (the last section): the stage is picked by timing stages 0, 2, 3 and 4
 * at the shape, and the pick cached with the config.
 */
#include "lce_op.h"
#include "rt.h"
#include "tune.h"
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
static const loom_ikbo_lce_config default_cfg = {256, 128, 4, 8, 132, 2, 1, 2};
/* Plain GEMMs (stage 0's baseline, stages 1 and 2) with a transposed config: one consumer
 * warp group on 64 x 256 tiles, the fastest gemm config at the IKBO shapes (a transposed
 * tile stores through its plane steps' ring slots, which plain GEMMs do not have, so it
 * would store from registers). */
static const loom_ikbo_lce_config gemm_cfg = {64, 256, 4, 4, 132, 0, 0, 1};

loom_ikbo_lce_config ik_default_config(void) { return default_cfg; }

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
    return (ik_spec){mode, s->B, s->U, s->M, s->N, s->Ku, s->Kc, s->dtype, planes, c->bm, c->bn, c->stages, c->cwarps,
                     c->ctas, c->consumers, c->trans, c->cluster};
}

/* "BM=..,BN=..,stages=..,cwarps=..,ctas=..,consumers=.." */
static void config_text(const loom_ikbo_lce_config *c, char *buf, size_t n)
{
    int w = snprintf(buf, n, "BM=%d,BN=%d,stages=%d,cwarps=%d,ctas=%d,consumers=%d", c->bm, c->bn, c->stages,
                     c->cwarps, c->ctas, c->consumers);
    if (c->trans && w > 0 && (size_t)w < n)
        snprintf(buf + w, n - (size_t)w, ",trans=%d,cluster=%d", c->trans, c->cluster);
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
    int64_t kpu = tpl_pad8(s->Ku), kpc = tpl_pad8(s->Kc);
    config_text(ik_stage_config(stage, cfg), st->config, sizeof st->config);
    loom_status rc = LOOM_OK;
    /* the padded weights of stages 2 to 4 (stage 1 pads them on every run) */
    const ik_fill wu = {IK_WU, 0, kpu, 0}, wc = {IK_WC, 1, kpc, 0};
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
    int64_t shape[LOOM_MAX_PARAMS] = {s->B, s->U, s->M, s->N, s->Ku, s->Kc, s->dtype, 0}, c[LOOM_MAX_PARAMS];
    loom_status st = tune_config(rt, "ikbo_lce", shape, c);
    if (st == LOOM_OK)
        *cfg = ik_config_of(c);
    return st;
}

/* Allocate the owned buffers (zeroed), upload the weights as the fills lay them out, and
 * load the kernels. */
static loom_status build_stage(loom_ikbo_lce *p, const void *w_user, const void *w_cand, const int64_t *gemm_pick)
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

/* One stage, its config settled (given, tuned or the default): build, upload, load.
 * tuned: the config was left to the tuner, and so, on a GPU, is stage 0's GEMM's.  On
 * failure the reason is in loom_runtime_error(rt) and nothing is left allocated. */
static loom_status prepare_stage(loom_runtime *rt, const loom_ikbo_lce_shape *shape, loom_ikbo_stage stage,
                                 const void *w_user, const void *w_cand, const loom_ikbo_lce_config *cfg, bool tuned,
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
        st = build_stage(p, w_user, w_cand, tune_gemm ? pick : NULL);
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

static loom_status auto_prepare(loom_runtime *rt, const loom_ikbo_lce_shape *s, const loom_ikbo_lce_shape *hs,
                                const void *w_user, const void *w_cand, const loom_ikbo_lce_config *cfg, bool tuned,
                                loom_ikbo_lce **out);

/* One prepared object at shape (its B and U the most it serves): one stage, one config.
 * hs: the largest shape of the prepare (a bucket's is smaller), at which LOOM_IKBO_AUTO
 * makes its inputs and comparisons, so that their kernels are the same in every bucket
 * (compiled once). */
static loom_status prepare_one(loom_runtime *rt, const loom_ikbo_lce_shape *shape, const loom_ikbo_lce_shape *hs,
                               loom_ikbo_stage stage, const void *w_user, const void *w_cand,
                               const loom_ikbo_lce_config *cfg, loom_ikbo_lce **out)
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
    /* the shape and config, checked before anything is allocated */
    const char *big = shape_too_big(shape);
    if (big)
        return tpl_fail(rt, LOOM_ERR_INVALID,
                        "loom_ikbo_lce_prepare: shape B=%lld, U=%lld, M=%lld, N=%lld, Ku=%lld, Kc=%lld: %s",
                        (long long)shape->B, (long long)shape->U, (long long)shape->M, (long long)shape->N,
                        (long long)shape->Ku, (long long)shape->Kc, big);
    loom_ikbo_lce_config c = cfg ? *cfg : default_cfg;
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
        return auto_prepare(rt, shape, hs ? hs : shape, w_user, w_cand, &c, !cfg, out);
    return prepare_stage(rt, shape, stage, w_user, w_cand, &c, !cfg, out);
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
loom_status loom_ikbo_lce_prepare(loom_runtime *rt, const loom_ikbo_lce_shape *shape, loom_ikbo_stage stage,
                                  const void *w_user, const void *w_cand, const loom_ikbo_lce_config *cfg,
                                  loom_ikbo_lce **out)
{
    bool per_bucket = rt && shape && loom_runtime_is_gpu(rt) && (stage == LOOM_IKBO_AUTO || !cfg) &&
                      util_env_switch("LOOM_IKBO_BUCKETS", true) && shape->B > 1 && shape->B <= INT32_MAX;
    if (!per_bucket)
        return prepare_one(rt, shape, NULL, stage, w_user, w_cand, cfg, out);
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
        if ((st = prepare_one(rt, &b, shape, stage, w_user, w_cand, cfg, &c)) != LOOM_OK)
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

static loom_status run_at(loom_ikbo_lce *p, const char *fn, int64_t B, int64_t U, loom_buffer *e_user,
                          loom_buffer *e_cand, loom_buffer *cand_to_user, loom_buffer *out)
{
    if (p->nbuckets) { /* the request's bucket */
        if (B < 1 || B > p->s.B || U < 1 || U > p->s.U)
            return tpl_check_request(p->rt, fn, B, U, p->s.B, p->s.U);
        int i = 0;
        while (p->top[i] < B)
            i++;
        loom_status st = run_at(p->child[i], fn, B, U, e_user, e_cand, cand_to_user, out);
        return st;
    }
    const loom_ikbo_lce_shape *s = &p->s;
    const ik_stage *run = &p->run;
    size_t e = loom_dtype_size(s->dtype);
    loom_status st;
    if ((st = check_dims(p, fn, B, U)) != LOOM_OK)
        return st;
    if ((st = check_buf(p, fn, e_user, "e_user", U, s->Ku, s->N, e)) != LOOM_OK ||
        (st = check_buf(p, fn, e_cand, "e_cand", B, s->Kc, s->N, e)) != LOOM_OK ||
        (st = check_buf(p, fn, cand_to_user, "cand_to_user", B, 1, 1, 4)) != LOOM_OK ||
        (st = check_buf(p, fn, out, "out", B, s->M, s->N, e)) != LOOM_OK)
        return st;
    /* the kernels read the inputs while out is written (as loom_gemm_run refuses C = A) */
    const loom_buffer *ins[] = {e_user, e_cand, cand_to_user};
    static const char *const in_names[] = {"e_user", "e_cand", "cand_to_user"};
    for (int i = 0; i < 3; i++)
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
    return run_at(p, "loom_ikbo_lce_run", p->s.B, p->s.U, e_user, e_cand, cand_to_user, out);
}

loom_status loom_ikbo_lce_run_at(loom_ikbo_lce *p, int64_t B, int64_t U, loom_buffer *e_user, loom_buffer *e_cand,
                                 loom_buffer *cand_to_user, loom_buffer *out)
{
    if (!p)
        return LOOM_ERR_INVALID;
    return run_at(p, "loom_ikbo_lce_run_at", B, U, e_user, e_cand, cand_to_user, out);
}

const char *loom_ikbo_lce_describe(const loom_ikbo_lce *p) { return p ? p->desc : ""; }

/* The object that runs requests of the prepared B (the largest bucket's). */
static const loom_ikbo_lce *top_of(const loom_ikbo_lce *p) { return p && p->nbuckets ? p->child[p->nbuckets - 1] : p; }

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

/* ---------------------------------------------------------------- LOOM_IKBO_AUTO: the stage picked by timing
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
 * On the GPU: inputs made on the device (the tuner's fill kernels, a contiguous
 * mapping, as the tuner's ikbo_lce default); each candidate prepared with the config
 * (stage 4's tuned one; stages 0-2 take their plain-GEMM tiles where it is transposed)
 * and run once into its own output; the outputs compared pairwise on the device by the
 * error model (the tuner's comparison kernel with ik_pair_bound_kernel's bound: two right
 * stages' f32 sums, rounded halves and final roundings):
 * the largest group agreeing with one member stays, ties to the earlier stage (stage 0,
 * the framework's algorithm, first), the others are dropped with the count and size of
 * their differences; a lone survivor of several is no evidence, so prepare fails.  Then
 * AUTO_ROUNDS rounds, each a loom_time_work of every candidate in turn (AUTO_REPS runs
 * after an L2 flush each, median), so that each one's time (the median of its rounds')
 * is taken beside the others': the clock drifts by up to 13% under load (docs/tuning.md),
 * more than some stages differ.  The fastest is kept, the others freed.
 *
 * The pick goes into the tuning cache (tune/tune_cache.c) under the stage-4 config's key
 * plus "|pick=stage|cfg=<config>" ("cfg=tuned" where the config was left to the tuner),
 * as an entry of template "ikbo_lce_stage" whose "config" holds the stage and each candidate's time in ns (0: dropped); the file's
 * format is unchanged.  A warm prepare reads it and times nothing; LOOM_TUNE_FORCE=1
 * times again; LOOM_TUNE=0 times nothing (a cached pick is still used).
 */

static const loom_ikbo_stage auto_stages[] = {LOOM_IKBO_MATERIALIZED, LOOM_IKBO_K_ALIGNED, LOOM_IKBO_FUSED_EPILOGUE,
                                              LOOM_IKBO_PERSISTENT};
/* AUTO_ROUNDS rounds at least; while the two fastest are within AUTO_CLOSE of each other,
 * more, up to AUTO_ROUNDS_MAX: a close call gets the repetitions to tell them apart */
enum { AUTO_N = 4, AUTO_ROUNDS = 5, AUTO_ROUNDS_MAX = 15, AUTO_REPS = 5 };
#define AUTO_CLOSE 0.03
/* untimed, the stages in order of preference: fewest launches and buffers first */
static const loom_ikbo_stage auto_untimed[] = {LOOM_IKBO_PERSISTENT, LOOM_IKBO_FUSED_EPILOGUE, LOOM_IKBO_K_ALIGNED,
                                               LOOM_IKBO_MATERIALIZED};
static const char auto_skip1[] = "stage 1 not timed (stage 2 plus two pad kernels a run)";

typedef struct auto_cand {
    loom_ikbo_stage stage;
    loom_ikbo_lce *p;
    loom_buffer *out;
    double ms;     /* the median of its rounds' medians; 0: not timed */
    char why[256]; /* why it was dropped ("" while it is in) */
} auto_cand;

/* Append to p's description. */
static void desc_add(loom_ikbo_lce *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void desc_add(loom_ikbo_lce *p, const char *fmt, ...)
{
    size_t n = strlen(p->desc);
    if (n + 1 >= sizeof p->desc)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->desc + n, sizeof p->desc - n, fmt, ap);
    va_end(ap);
}

/* The message of a failed prepare or run, without its "loom_ikbo_lce_prepare: " prefix. */
static void why_from(loom_runtime *rt, char *why, size_t n)
{
    const char *e = loom_runtime_error(rt), *c = strstr(e, ": ");
    snprintf(why, n, "%s", !strncmp(e, "loom_ikbo_lce_", 14) && c ? c + 2 : e);
}

/* No timing: stage 4, or the first of auto_untimed the config serves.  because: why
 * nothing is timed. */
static loom_status auto_untimed_pick(loom_runtime *rt, const loom_ikbo_lce_shape *s, const void *wu, const void *wc,
                                     const loom_ikbo_lce_config *cfg, bool tuned, const char *because,
                                     loom_ikbo_lce **out)
{
    char first[300] = "";
    loom_status st = LOOM_ERR_INVALID;
    for (int i = 0; i < AUTO_N; i++) {
        if ((st = prepare_stage(rt, s, auto_untimed[i], wu, wc, cfg, tuned, out)) == LOOM_OK) {
            desc_add(*out, "; auto (not timed: %s): stage %d", because, (int)auto_untimed[i]);
            if (i)
                desc_add(*out, ", as stage 4 cannot serve the config (%s)", first);
            return LOOM_OK;
        }
        if (!i)
            why_from(rt, first, sizeof first);
    }
    return tpl_fail(rt, st, "loom_ikbo_lce_prepare: auto: no stage serves the shape and config; stage 4: %s", first);
}

/* ---- the cache */

/* The entry's layout: a template named "ikbo_lce_stage" with ikbo_lce's shape and, as its
 * config, the stage and each candidate's time in ns. */
static void pick_template(const loom_template *t, loom_template *pt)
{
    static const char *const keys[1 + AUTO_N] = {"stage", "stage0_ns", "stage2_ns", "stage3_ns", "stage4_ns"};
    memset(pt, 0, sizeof *pt);
    pt->name = "ikbo_lce_stage";
    pt->doc = "the stage LOOM_IKBO_AUTO picked at the shape, and each candidate's time (ns; 0: dropped)";
    pt->nshape = t->nshape;
    memcpy(pt->shape, t->shape, sizeof pt->shape);
    pt->nconfig = 1 + AUTO_N;
    for (int i = 0; i <= AUTO_N; i++)
        pt->config[i] = (loom_param){.key = keys[i], .def = i ? 0 : LOOM_IKBO_PERSISTENT};
}

typedef struct auto_cache {
    bool on; /* a GPU and a cache file */
    char path[4096], key[3072];
    const loom_template *t;
    loom_template pt;
    int64_t shape[LOOM_MAX_PARAMS];
    tc_device dev;
} auto_cache;

static void cache_open(loom_runtime *rt, const loom_ikbo_lce_shape *s, const loom_ikbo_lce_config *cfg, auto_cache *c)
{
    memset(c, 0, sizeof *c);
    rt_gpu *g = rt_runtime_gpu(rt);
    c->t = loom_template_find("ikbo_lce");
    if (!g || !c->t || !tc_path(c->path, sizeof c->path))
        return;
    const rt_gpu_props *pr = rt_gpu_properties(g);
    snprintf(c->dev.gpu, sizeof c->dev.gpu, "%s", pr->name);
    c->dev.sm_count = pr->sm_count;
    c->dev.driver = pr->driver_version;
    const int64_t sh[8] = {s->B, s->U, s->M, s->N, s->Ku, s->Kc, s->dtype, 0};
    memcpy(c->shape, sh, sizeof sh);
    char k[2048], ct[200] = "tuned";
    tc_key(c->t, c->shape, &c->dev, k, sizeof k); /* the config's key (ikbo_lce has no bucket) */
    /* cfg NULL: the caller left the config to the tuner, and the pick goes with whatever
     * it settles on (its pick can change between two tunings whose best configs time
     * within noise of each other: keyed by its text, the stage pick would be lost) */
    if (cfg)
        config_text(cfg, ct, sizeof ct);
    snprintf(c->key, sizeof c->key, "%s|pick=stage|cfg=%s", k, ct);
    pick_template(c->t, &c->pt);
    c->on = true;
}

/* The cached pick, prepared; false (why says why when there was one) when there is none
 * or it fails here. */
static bool cache_pick(loom_runtime *rt, const auto_cache *c, const loom_ikbo_lce_shape *s, const void *wu,
                       const void *wc, const loom_ikbo_lce_config *cfg, bool tuned, loom_ikbo_lce **out, char *why,
                       size_t wn)
{
    char warn[512];
    tc_file *f = tc_open(c->path, warn, sizeof warn);
    tc_record r;
    bool hit = f && tc_find(f, c->key, &c->pt, &r);
    tc_close(f);
    if (!hit)
        return false;
    int stage = (int)r.config[0], known = 0;
    for (int i = 0; i < AUTO_N; i++)
        known |= stage == (int)auto_stages[i];
    if (!known) {
        snprintf(why, wn, "the cached pick, stage %d, is not a candidate: timed again", stage);
        return false;
    }
    if (prepare_stage(rt, s, (loom_ikbo_stage)stage, wu, wc, cfg, tuned, out) != LOOM_OK) {
        char e[300];
        why_from(rt, e, sizeof e);
        snprintf(why, wn, "the cached pick, stage %d, fails here (%s): timed again", stage, e);
        return false;
    }
    desc_add(*out, "; auto (cached):");
    for (int i = 0; i < AUTO_N; i++) {
        if (r.config[1 + i] > 0)
            desc_add(*out, "%s stage %d %.3f ms%s", i ? "," : "", (int)auto_stages[i], (double)r.config[1 + i] * 1e-6,
                     (int)auto_stages[i] == stage ? " (picked)" : "");
        else
            desc_add(*out, "%s stage %d dropped", i ? "," : "", (int)auto_stages[i]);
    }
    desc_add(*out, "; %s", auto_skip1);
    return true;
}

static void cache_store(const auto_cache *c, const auto_cand *cand, int best, double tune_ms, loom_ikbo_lce *p)
{
    if (!c->on)
        return;
    tc_record r;
    memset(&r, 0, sizeof r);
    r.config[0] = cand[best].stage;
    for (int i = 0; i < AUTO_N; i++) {
        double ns = cand[i].ms * 1e6 + 0.5; /* (the cache reads int32: past 2.1 s, 2.1 s) */
        r.config[1 + i] = cand[i].why[0] ? 0 : ns < 1 ? 1 : ns < INT32_MAX ? (int64_t)ns : INT32_MAX;
        r.ncand++;
        r.nvalid += !cand[i].why[0];
    }
    r.ms = cand[best].ms;
    r.tune_ms = tune_ms;
    char err[1024];
    if (tc_store(c->path, c->key, &c->pt, c->shape, c->shape, &c->dev, &r, err, sizeof err) != LOOM_OK)
        desc_add(p, "; not cached: %s", err);
}

/* ---- timing */

typedef struct auto_inputs {
    loom_buffer *eu, *ec, *map;
} auto_inputs;

static void inputs_free(auto_inputs *in)
{
    loom_buffer_destroy(in->eu);
    loom_buffer_destroy(in->ec);
    loom_buffer_destroy(in->map);
}

/* E_user and E_cand uniform in [-1, 1) by the tuner's fill kernel (on the device), the
 * mapping contiguous runs of candidates (b * U / B) at s; the buffers and the fills at hs
 * (the prepare's largest shape: the same kernels in every bucket). */
static loom_status inputs_make(loom_runtime *rt, const loom_ikbo_lce_shape *s, const loom_ikbo_lce_shape *hs,
                               auto_inputs *in)
{
    memset(in, 0, sizeof *in);
    size_t e = loom_dtype_size(s->dtype);
    const int64_t n[2] = {hs->U * hs->Ku * hs->N, hs->B * hs->Kc * hs->N};
    loom_status st = LOOM_OK;
    if (!(in->eu = tpl_zeroed_buffer(rt, (size_t)n[0] * e, &st)) ||
        !(in->ec = tpl_zeroed_buffer(rt, (size_t)n[1] * e, &st)) ||
        !(in->map = tpl_zeroed_buffer(rt, (size_t)hs->B * 4, &st)))
        return st;
    loom_buffer *dst[2] = {in->eu, in->ec};
    loom_kernel *fill[2] = {NULL, NULL};
    int g[2][3] = {{1, 1, 1}, {1, 1, 1}};
    for (int i = 0; i < 2; i++)
        if (!(fill[i] = tune_fill_kernel(s->dtype, n[i], &g[i][0]))) {
            loom_kernel_destroy(fill[0]);
            return tpl_fail(rt, LOOM_ERR_UNSUPPORTED, "%lld elements cannot be filled on the device", (long long)n[i]);
        }
    st = loom_prepare_many(rt, fill, 2, 0); /* both compiled at once */
    for (int i = 0; i < 2 && st == LOOM_OK; i++) {
        loom_arg a[6];
        tune_fill_args(dst[i], 0x1b2c3d4e5full + (uint64_t)i, -1.0, 1.0, 0, 0, n[i], a);
        st = loom_launch(rt, fill[i], g[i], a, 6);
    }
    for (int i = 0; i < 2; i++)
        loom_kernel_destroy(fill[i]);
    int32_t *map = st == LOOM_OK ? malloc((size_t)s->B * sizeof *map) : NULL;
    if (st == LOOM_OK && !map)
        return tpl_fail(rt, LOOM_ERR_NOMEM, "out of host memory");
    if (map) {
        ik_mapping(s->B, s->U, 0, 0, map);
        st = loom_buffer_upload(in->map, map, (size_t)s->B * sizeof *map);
        free(map);
    }
    return st;
}

/* The comparison of two stages' outputs on the device by the error model: the tuner's
 * comparison kernel (per 2048 elements: those beyond rtol |a| + bound, the largest
 * difference) and its fold to two numbers, with the pair bound of ik_pair_bound_kernel
 * (templates/tpl_device.h) computed once from the inputs. */
typedef struct auto_cmp {
    loom_kernel *k, *fold;
    int grid[3];
    loom_buffer *bad, *maxerr, *two, *bound;
    double rtol;
} auto_cmp;

static void cmp_free(auto_cmp *c)
{
    loom_kernel_destroy(c->k);
    loom_kernel_destroy(c->fold);
    loom_buffer_destroy(c->bad);
    loom_buffer_destroy(c->maxerr);
    loom_buffer_destroy(c->two);
    loom_buffer_destroy(c->bound);
}

/* At s, the prepare's largest shape (the outputs are that large: the same kernels in every
 * bucket; rows past a bucket's B are the outputs' poison in both, NaN in both, which the
 * comparison takes as equal); w_user and w_cand the host's weights [M, K]. */
static loom_status cmp_make(loom_runtime *rt, const loom_ikbo_lce_shape *s, const void *w_user, const void *w_cand,
                            const auto_inputs *in, auto_cmp *c)
{
    memset(c, 0, sizeof *c);
    c->rtol = ik_pair_rtol(s->dtype);
    c->grid[1] = c->grid[2] = 1;
    int bg[3];
    loom_kernel *bk = ik_pair_bound_kernel(s->B, s->U, s->M, s->N, s->Ku, s->Kc, s->dtype, bg);
    loom_status st = LOOM_OK;
    if (!bk || !(c->k = tune_compare_kernel(s->dtype, s->B * s->M * s->N, true, &c->grid[0])) ||
        !(c->fold = tune_reduce2_kernel(c->grid[0], TUNE_RED_SUM, TUNE_RED_MAX))) {
        loom_kernel_destroy(bk);
        return tpl_fail(rt, LOOM_ERR_UNSUPPORTED, "outputs of %lld elements cannot be compared",
                        (long long)(s->B * s->M * s->N));
    }
    size_t e = loom_dtype_size(s->dtype);
    loom_buffer *wu = NULL, *wc = NULL;
    if (!(c->bad = tpl_zeroed_buffer(rt, (size_t)c->grid[0] * 4, &st)) ||
        !(c->maxerr = tpl_zeroed_buffer(rt, (size_t)c->grid[0] * 4, &st)) || !(c->two = tpl_zeroed_buffer(rt, 8, &st)) ||
        !(c->bound = tpl_zeroed_buffer(rt, (size_t)(s->B * s->M * s->N) * 4, &st)) ||
        !(wu = tpl_zeroed_buffer(rt, (size_t)(s->M * s->Ku) * e, &st)) ||
        !(wc = tpl_zeroed_buffer(rt, (size_t)(s->M * s->Kc) * e, &st)) ||
        (st = loom_buffer_upload(wu, w_user, (size_t)(s->M * s->Ku) * e)) != LOOM_OK ||
        (st = loom_buffer_upload(wc, w_cand, (size_t)(s->M * s->Kc) * e)) != LOOM_OK ||
        (st = loom_prepare_many(rt, (loom_kernel *[]){c->k, c->fold, bk}, 3, 0)) != LOOM_OK) {
        loom_buffer_destroy(wu);
        loom_buffer_destroy(wc);
        loom_kernel_destroy(bk);
        return st;
    }
    loom_arg a[6] = {LOOM_ARG_BUF(wu), LOOM_ARG_BUF(in->eu), LOOM_ARG_BUF(wc), LOOM_ARG_BUF(in->ec),
                     LOOM_ARG_BUF(in->map), LOOM_ARG_BUF(c->bound)};
    st = loom_launch(rt, bk, bg, a, 6);
    loom_buffer_destroy(wu);
    loom_buffer_destroy(wc);
    loom_kernel_destroy(bk);
    return st;
}

/* Elements of a past their bound of b, and the largest difference. */
static loom_status cmp_run(loom_runtime *rt, auto_cmp *c, loom_buffer *a, loom_buffer *b, double *nbad, double *worst)
{
    loom_arg x[7] = {LOOM_ARG_BUF(a), LOOM_ARG_BUF(b), LOOM_ARG_BUF(c->bound), LOOM_ARG_F32(0.0f),
                     LOOM_ARG_F32((float)c->rtol), LOOM_ARG_BUF(c->bad), LOOM_ARG_BUF(c->maxerr)};
    loom_arg f[3] = {LOOM_ARG_BUF(c->bad), LOOM_ARG_BUF(c->maxerr), LOOM_ARG_BUF(c->two)};
    static const int one[3] = {1, 1, 1};
    float two[2];
    loom_status st;
    if ((st = loom_launch(rt, c->k, c->grid, x, 7)) != LOOM_OK ||
        (st = loom_launch(rt, c->fold, one, f, 3)) != LOOM_OK ||
        (st = loom_buffer_download(c->two, two, sizeof two)) != LOOM_OK)
        return st;
    *nbad = two[0];
    *worst = two[1];
    return LOOM_OK;
}

typedef struct auto_work {
    loom_ikbo_lce *p;
    const auto_inputs *in;
    loom_buffer *out;
} auto_work;

static loom_status auto_run_once(void *ctx)
{
    auto_work *w = ctx;
    return loom_ikbo_lce_run(w->p, w->in->eu, w->in->ec, w->in->map, w->out);
}

/* Check the candidates that ran against one another; drop those outside the largest
 * agreeing group.  A failure (the reason in rt) when the check cannot run, or several
 * ran and no two agree. */
static loom_status auto_check(loom_runtime *rt, const loom_ikbo_lce_shape *hs, const void *w_user, const void *w_cand,
                              const auto_inputs *inputs, auto_cand *c)
{
    int in[AUTO_N], nin = 0;
    for (int i = 0; i < AUTO_N; i++)
        if (!c[i].why[0])
            in[nin++] = i;
    if (nin < 2)
        return LOOM_OK; /* nothing to compare with (stage 4's config was checked by the tuner) */
    auto_cmp cmp;
    loom_status st = cmp_make(rt, hs, w_user, w_cand, inputs, &cmp);
    double nbad[AUTO_N][AUTO_N] = {{0}}, worst[AUTO_N][AUTO_N] = {{0}};
    for (int a = 0; a < nin && st == LOOM_OK; a++)
        for (int b = a + 1; b < nin && st == LOOM_OK; b++) {
            int i = in[a], j = in[b];
            st = cmp_run(rt, &cmp, c[i].out, c[j].out, &nbad[i][j], &worst[i][j]);
            nbad[j][i] = nbad[i][j];
            worst[j][i] = worst[i][j];
        }
    cmp_free(&cmp);
    if (st != LOOM_OK)
        return tpl_fail(rt, st, "loom_ikbo_lce_prepare: auto: comparing the stages' outputs: %s",
                        loom_runtime_error(rt));
    int ref = -1, most = 0;
    for (int a = 0; a < nin; a++) {
        int agree = 1;
        for (int b = 0; b < nin; b++)
            agree += b != a && nbad[in[a]][in[b]] == 0;
        if (agree > most)
            most = agree, ref = in[a];
    }
    if (most < 2)
        return tpl_fail(rt, LOOM_ERR_RUNTIME,
                 "loom_ikbo_lce_prepare: auto: no two stages agree at this shape (stage %d vs %d: %.0f elements "
                 "past their error bound, max |diff| %.3g): a bug in loom, please report it; pin a stage meanwhile",
                        (int)c[in[0]].stage, (int)c[in[1]].stage, nbad[in[0]][in[1]], worst[in[0]][in[1]]);
    for (int a = 0; a < nin; a++) {
        int i = in[a];
        if (i != ref && nbad[i][ref] > 0)
            snprintf(c[i].why, sizeof c[i].why, "its output differs from stage %d's: %.0f elements past their error "
                     "bound, max |diff| %.3g", (int)c[ref].stage, nbad[i][ref], worst[i][ref]);
    }
    return LOOM_OK;
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

/* The ratio of the second fastest candidate still in to the fastest (0: fewer than two). */
static double auto_margin(const auto_cand *c)
{
    double a = 0, b = 0;
    for (int i = 0; i < AUTO_N; i++) {
        if (c[i].why[0] || !(c[i].ms > 0))
            continue;
        if (!a || c[i].ms < a)
            b = a, a = c[i].ms;
        else if (!b || c[i].ms < b)
            b = c[i].ms;
    }
    return a > 0 && b > 0 ? b / a : 0;
}

/* Time the candidates still in, side by side: rounds of one loom_time_work each in turn,
 * each one's time the median of its rounds'; AUTO_ROUNDS of them, and more (up to
 * AUTO_ROUNDS_MAX) while the two fastest are within AUTO_CLOSE.  *rounds gets the count. */
static void auto_time(loom_runtime *rt, const auto_inputs *in, loom_buffer *out, auto_cand *c, int *rounds)
{
    double ms[AUTO_N][AUTO_ROUNDS_MAX];
    int r = 0;
    for (; r < AUTO_ROUNDS_MAX; r++) {
        if (r >= AUTO_ROUNDS) {
            double m = auto_margin(c);
            if (!m || m > 1 + AUTO_CLOSE)
                break;
        }
        for (int i = 0; i < AUTO_N; i++) {
            if (c[i].why[0])
                continue;
            auto_work w = {c[i].p, in, out};
            if (loom_time_work(rt, auto_run_once, &w, r == 0 ? 1 : 0, AUTO_REPS, &ms[i][r]) != LOOM_OK) {
                snprintf(c[i].why, sizeof c[i].why, "timing failed: %s", loom_runtime_error(rt));
                continue;
            }
        }
        if (r + 1 >= AUTO_ROUNDS)
            for (int i = 0; i < AUTO_N; i++)
                if (!c[i].why[0])
                    c[i].ms = tune_median(ms[i], r + 1);
    }
    *rounds = r;
}

static loom_status auto_timed(loom_runtime *rt, const loom_ikbo_lce_shape *s, const loom_ikbo_lce_shape *hs,
                              const void *wu, const void *wc, const loom_ikbo_lce_config *cfg, bool tuned,
                              const auto_cache *cache, const char *note, loom_ikbo_lce **out)
{
    double t0 = util_now_ms();
    auto_cand c[AUTO_N];
    memset(c, 0, sizeof c);
    auto_inputs in;
    loom_status st = inputs_make(rt, s, hs, &in);
    if (st != LOOM_OK) {
        inputs_free(&in);
        return tpl_fail(rt, st, "loom_ikbo_lce_prepare: auto: making inputs to time the stages: %s",
                        loom_runtime_error(rt));
    }
    size_t nout = (size_t)(hs->B * hs->M * hs->N) * loom_dtype_size(hs->dtype);
    auto_precompile(rt, s, cfg, tuned);
    for (int i = 0; i < AUTO_N; i++) { /* build each, run it once into its own output */
        c[i].stage = auto_stages[i];
        loom_status cs = prepare_stage(rt, s, c[i].stage, wu, wc, cfg, tuned, &c[i].p);
        if (cs == LOOM_OK && !(c[i].out = tpl_zeroed_buffer(rt, nout, &cs)))
            cs = tpl_fail(rt, cs, "loom_ikbo_lce_prepare: its output: %s", loom_runtime_error(rt));
        if (cs == LOOM_OK && (cs = loom_buffer_fill(c[i].out, 0xff)) == LOOM_OK) {
            auto_work w = {c[i].p, &in, c[i].out};
            cs = auto_run_once(&w);
        }
        if (cs != LOOM_OK) {
            why_from(rt, c[i].why, sizeof c[i].why);
            if (!c[i].why[0]) /* (never empty: an empty reason would keep it in) */
                snprintf(c[i].why, sizeof c[i].why, "status %d", (int)cs);
        }
    }
    int best = -1, rounds = 0;
    if ((st = auto_check(rt, hs, wu, wc, &in, c)) == LOOM_OK) {
        loom_buffer *o = NULL;
        for (int i = 0; i < AUTO_N; i++) /* one output for the timed runs; the others go */
            if (!c[i].why[0] && !o)
                o = c[i].out, c[i].out = NULL;
        for (int i = 0; i < AUTO_N; i++) {
            loom_buffer_destroy(c[i].out);
            c[i].out = NULL;
        }
        auto_time(rt, &in, o, c, &rounds);
        loom_buffer_destroy(o);
        for (int i = 0; i < AUTO_N; i++)
            if (!c[i].why[0] && (best < 0 || c[i].ms < c[best].ms))
                best = i;
        if (best < 0) {
            char list[1200] = "";
            size_t n = 0;
            for (int i = 0; i < AUTO_N && n < sizeof list; i++)
                n += (size_t)snprintf(list + n, sizeof list - n, "; stage %d: %s", (int)c[i].stage, c[i].why);
            st = tpl_fail(rt, LOOM_ERR_INVALID, "loom_ikbo_lce_prepare: auto: no stage ran at this shape%s", list);
        }
    }
    for (int i = 0; i < AUTO_N; i++) {
        loom_buffer_destroy(c[i].out);
        if (i != best)
            loom_ikbo_lce_destroy(c[i].p);
    }
    inputs_free(&in);
    if (best < 0)
        return st;
    loom_ikbo_lce *p = c[best].p;
    desc_add(p, "; auto (timed):");
    for (int i = 0; i < AUTO_N; i++) {
        if (c[i].why[0])
            desc_add(p, "%s stage %d dropped (%s)", i ? "," : "", (int)c[i].stage, c[i].why);
        else
            desc_add(p, "%s stage %d %.3f ms%s", i ? "," : "", (int)c[i].stage, c[i].ms, i == best ? " (picked)" : "");
    }
    double margin = auto_margin(c);
    if (margin > 0)
        desc_add(p, "; margin %.1f%% to the next fastest, %d interleaved rounds of %d runs", 100 * (margin - 1), rounds,
                 AUTO_REPS);
    desc_add(p, "; %s", auto_skip1);
    if (note[0])
        desc_add(p, "; %s", note);
    cache_store(cache, c, best, util_now_ms() - t0, p);
    *out = p;
    return LOOM_OK;
}

static loom_status auto_prepare(loom_runtime *rt, const loom_ikbo_lce_shape *s, const loom_ikbo_lce_shape *hs,
                                const void *w_user, const void *w_cand, const loom_ikbo_lce_config *cfg, bool tuned,
                                loom_ikbo_lce **out)
{
    if (!util_env_switch("LOOM_IKBO_AUTO", true))
        return auto_untimed_pick(rt, s, w_user, w_cand, cfg, tuned, "LOOM_IKBO_AUTO=0", out);
    if (!loom_runtime_is_gpu(rt))
        return auto_untimed_pick(rt, s, w_user, w_cand, cfg, tuned, "no GPU", out);
    auto_cache cache;
    cache_open(rt, s, tuned ? NULL : cfg, &cache);
    char note[512] = "";
    if (cache.on && !util_env_on("LOOM_TUNE_FORCE") &&
        cache_pick(rt, &cache, s, w_user, w_cand, cfg, tuned, out, note, sizeof note))
        return LOOM_OK;
    if (!util_env_switch("LOOM_TUNE", true))
        return auto_untimed_pick(rt, s, w_user, w_cand, cfg, tuned, "LOOM_TUNE=0 and no pick cached", out);
    return auto_timed(rt, s, hs, w_user, w_cand, cfg, tuned, &cache, note, out);
}
