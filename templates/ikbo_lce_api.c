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
 */
#include "ikbo_lce.h"
#include "../util/util.h"

#include <stdlib.h>
#include <string.h>

struct loom_ikbo_lce {
    loom_runtime *rt;
    loom_ikbo_lce_shape s;
    loom_ikbo_stage stage;
    loom_ikbo_lce_config cfg;
    ik_stage run;                 /* what a run launches (ikbo_lce.h) */
    loom_buffer *buf[IK_NBUF];    /* the owned buffers (the caller's four slots stay NULL) */
    int32_t epoch;
    int32_t *index; /* the host copy of cand_to_user when runs check it (else NULL) */
    char desc[768];
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

/* Append a launch of k (NULL: the build failed, err says why) on grid with the arguments'
 * sources. */
static loom_status add_step(ik_stage *st, loom_kernel *k, const int grid[3], const int *args, int nargs,
                            const char *why, char *err, size_t errlen)
{
    if (!k) {
        snprintf(err, errlen, "%s", why && *why ? why : "out of memory");
        return LOOM_ERR_INVALID;
    }
    ik_step *s = &st->step[st->nsteps++];
    s->k = k;
    memcpy(s->grid, grid, sizeof s->grid);
    s->nargs = nargs;
    memcpy(s->arg, args, (size_t)nargs * sizeof *args);
    return LOOM_OK;
}

#define ARGS(...) (const int[]){__VA_ARGS__}, (int)(sizeof((const int[]){__VA_ARGS__}) / sizeof(int))

/* A GEMM kernel of the stage, with its arguments' sources. */
static loom_status add_gemm(ik_stage *st, const loom_ikbo_lce_shape *s, const loom_ikbo_lce_config *cfg, ik_mode mode,
                            int planes, const int *args, int nargs, char *err, size_t errlen)
{
    ik_spec sp = spec_of(s, cfg, mode, planes);
    char why[256] = "";
    int g[3];
    ik_grid(&sp, g);
    return add_step(st, ik_build(&sp, why, sizeof why), g, args, nargs, why, err, errlen);
}

/* Stage 0's GEMM: the gemm template with its own defaults, the tile config set by name; its
 * TMA-store epilogue is dropped when the ring leaves no shared memory for it. */
static loom_status add_baseline_gemm(ik_stage *st, const loom_ikbo_lce_shape *s, int64_t kt, char *err,
                                     size_t errlen)
{
    const loom_template *gt = loom_template_find("gemm");
    int64_t gs[LOOM_MAX_PARAMS] = {s->M, s->N, kt, s->B, s->dtype, s->dtype, 1}, gc[LOOM_MAX_PARAMS];
    char why[256] = "";
    if (loom_params_parse(gt->config, gt->nconfig, st->config, gc, why, sizeof why) != 0) {
        snprintf(err, errlen, "the baseline gemm's config: %s", why);
        return LOOM_ERR_INVALID;
    }
    loom_kernel *k = gt->build(gs, gc, why, sizeof why);
    for (int i = 0; !k && i < gt->nconfig; i++)
        if (!strcmp(gt->config[i].key, "tmastore") && gc[i]) {
            gc[i] = 0;
            k = gt->build(gs, gc, why, sizeof why);
        }
    int g[3];
    gt->grid(gs, gc, g);
    return add_step(st, k, g, ARGS(IK_WU, IK_ECAT, IK_OUT), why, err, errlen);
}

loom_status ik_stage_make(const loom_ikbo_lce_shape *s, loom_ikbo_stage stage, const loom_ikbo_lce_config *cfg,
                          ik_stage *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    size_t e = loom_dtype_size(s->dtype);
    int64_t kpu = ik_pad8(s->Ku), kpc = ik_pad8(s->Kc);
    config_text(ik_stage_config(stage, cfg), st->config, sizeof st->config);
    loom_status rc = LOOM_OK;
    /* the padded weights of stages 2 to 4 (stage 1 pads them on every run) */
    const ik_fill wu = {IK_WU, 0, kpu, 0}, wc = {IK_WC, 1, kpc, 0};
    switch (stage) {
    case LOOM_IKBO_MATERIALIZED: {
        int64_t kt = ik_pad8(s->Ku + s->Kc);
        st->bytes[IK_WU] = (size_t)(s->M * kt) * e;
        st->fill[st->nfill++] = (ik_fill){IK_WU, 0, kt, 0};
        st->fill[st->nfill++] = (ik_fill){IK_WU, 1, kt, s->Ku};
        st->bytes[IK_ECAT] = (size_t)(s->B * kt * s->N) * e;
        ik_spec sp = spec_of(s, cfg, IK_CAND, 1);
        int g[3] = {(int)TPL_CDIV(kt, 16), (int)s->B, 1};
        if ((rc = add_step(st, ik_gather_kernel(&sp), g, ARGS(IK_E_USER, IK_E_CAND, IK_MAP, IK_ECAT), NULL, err,
                           errlen)) == LOOM_OK)
            rc = add_baseline_gemm(st, s, kt, err, errlen);
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
            int g[3] = {(int)s->M, 1, 1};
            if ((rc = add_step(st, ik_pad_kernel(s->M, s->Ku, s->dtype), g, ARGS(IK_WU_RAW, IK_WU), NULL, err,
                               errlen)) == LOOM_OK)
                rc = add_step(st, ik_pad_kernel(s->M, s->Kc, s->dtype), g, ARGS(IK_WC_RAW, IK_WC), NULL, err, errlen);
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
            int g[3];
            tpl_broadcast_add_grid(&bs, 8, 256, g);
            rc = add_step(st, tpl_broadcast_add(&bs, 8, 256, 4), g, ARGS(IK_CANDRES, IK_URES, IK_MAP, IK_OUT), NULL,
                          err, errlen);
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
            st->epoch_step = ik_user_blocks(&sp);
            rc = add_gemm(st, s, cfg, IK_FUSED, 2,
                          ARGS(IK_WU, IK_E_USER, IK_WC, IK_E_CAND, IK_MAP, IK_URES, IK_FLAGS, IK_CLAIMS, IK_EPOCH,
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

/* The config of the persistent kernel the tuner picks for this shape (cached on disk). */
static loom_status tuned_config(loom_ikbo_lce *p)
{
    const loom_template *t = loom_template_find("ikbo_lce");
    int64_t shape[8] = {p->s.B, p->s.U, p->s.M, p->s.N, p->s.Ku, p->s.Kc, p->s.dtype, 0};
    loom_tune_opts o = {0};
    o.quiet = 1;
    loom_tuned r;
    loom_status st = loom_tune(p->rt, t, shape, 1, &o, &r);
    if (st == LOOM_OK)
        p->cfg = ik_config_of(r.config);
    loom_tuned_release(&r, 1);
    return st;
}

/* Allocate the owned buffers (zeroed), upload the weights as the fills lay them out, and
 * load the kernels. */
static loom_status build_stage(loom_ikbo_lce *p, const void *w_user, const void *w_cand)
{
    const loom_ikbo_lce_shape *s = &p->s;
    ik_stage *run = &p->run;
    char err[300] = "";
    loom_status st = ik_stage_make(s, p->stage, &p->cfg, run, err, sizeof err);
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
    for (int i = 0; i < run->nsteps; i++) {
        loom_compile_info info;
        if ((st = loom_prepare(p->rt, run->step[i].k, &info)) != LOOM_OK)
            return fail(p, st, "loom_ikbo_lce_prepare: kernel '%s': %s", loom_kernel_name(run->step[i].k),
                        loom_runtime_error(p->rt));
    }
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
            if (__builtin_mul_overflow(v, prods[i][j], &v) || v > ((int64_t)1 << 62))
                return "its buffers would hold more than 2^62 bytes";
    }
    return NULL;
}

loom_status loom_ikbo_lce_prepare(loom_runtime *rt, const loom_ikbo_lce_shape *shape, loom_ikbo_stage stage,
                                  const void *w_user, const void *w_cand, const loom_ikbo_lce_config *cfg,
                                  loom_ikbo_lce **out)
{
    if (!rt)
        return LOOM_ERR_INVALID;
    if (!out || !shape || !w_user || !w_cand) {
        loom_runtime_set_error(rt, "loom_ikbo_lce_prepare: %s is NULL",
                               !out ? "out" : !shape ? "shape" : !w_user ? "w_user" : "w_cand");
        return LOOM_ERR_INVALID;
    }
    *out = NULL;
    loom_ikbo_lce *p = calloc(1, sizeof *p);
    if (!p)
        return LOOM_ERR_NOMEM;
    p->rt = rt;
    p->s = *shape;
    p->stage = stage;
    p->cfg = cfg ? *cfg : default_cfg;
    if ((int)stage < 0 || stage > LOOM_IKBO_PERSISTENT) {
        fail(p, LOOM_ERR_INVALID, "loom_ikbo_lce_prepare: stage %d is not 0 to 4", (int)stage);
        free(p);
        return LOOM_ERR_INVALID;
    }
    /* the shape and config, checked before anything is allocated */
    const char *big = shape_too_big(shape);
    if (big) {
        fail(p, LOOM_ERR_INVALID, "loom_ikbo_lce_prepare: shape B=%lld, U=%lld, M=%lld, N=%lld, Ku=%lld, Kc=%lld: %s",
             (long long)shape->B, (long long)shape->U, (long long)shape->M, (long long)shape->N,
             (long long)shape->Ku, (long long)shape->Kc, big);
        free(p);
        return LOOM_ERR_INVALID;
    }
    ik_spec sp = spec_of(shape, &p->cfg, stage == LOOM_IKBO_PERSISTENT ? IK_FUSED : IK_CAND_FUSED, 2);
    char buf[300];
    const char *why = ik_why_not(&sp, buf, sizeof buf);
    loom_status st = LOOM_OK;
    if (why)
        st = fail(p, LOOM_ERR_INVALID, "loom_ikbo_lce_prepare: %s", why);
    if (st == LOOM_OK && !cfg && loom_runtime_is_gpu(rt) && (st = tuned_config(p)) != LOOM_OK)
        st = fail(p, st, "loom_ikbo_lce_prepare: tuning: %s", loom_runtime_error(rt));
    if (st == LOOM_OK)
        st = build_stage(p, w_user, w_cand);
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

static loom_status check_buf(loom_ikbo_lce *p, const loom_buffer *b, const char *name, int64_t d0, int64_t d1,
                             int64_t d2, size_t e)
{
    size_t need = (size_t)(d0 * d1 * d2) * e;
    if (!b)
        return fail(p, LOOM_ERR_INVALID, "loom_ikbo_lce_run: %s is NULL", name);
    if (loom_buffer_size(b) < need)
        return fail(p, LOOM_ERR_INVALID,
                    "loom_ikbo_lce_run: %s has %zu bytes; it must hold [%lld, %lld, %lld] elements of %zu bytes "
                    "(%zu bytes)",
                    name, loom_buffer_size(b), (long long)d0, (long long)d1, (long long)d2, e, need);
    return LOOM_OK;
}

/* Every entry of cand_to_user in [0, U): read back to the host (p->index). */
static loom_status check_index(loom_ikbo_lce *p, const loom_buffer *map)
{
    const int64_t B = p->s.B, U = p->s.U;
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

loom_status loom_ikbo_lce_run(loom_ikbo_lce *p, loom_buffer *e_user, loom_buffer *e_cand, loom_buffer *cand_to_user,
                              loom_buffer *out)
{
    if (!p)
        return LOOM_ERR_INVALID;
    const loom_ikbo_lce_shape *s = &p->s;
    const ik_stage *run = &p->run;
    size_t e = loom_dtype_size(s->dtype);
    loom_status st;
    if ((st = check_buf(p, e_user, "e_user", s->U, s->Ku, s->N, e)) != LOOM_OK ||
        (st = check_buf(p, e_cand, "e_cand", s->B, s->Kc, s->N, e)) != LOOM_OK ||
        (st = check_buf(p, cand_to_user, "cand_to_user", s->B, 1, 1, 4)) != LOOM_OK ||
        (st = check_buf(p, out, "out", s->B, s->M, s->N, e)) != LOOM_OK)
        return st;
    if (p->index && (st = check_index(p, cand_to_user)) != LOOM_OK)
        return st;
    /* stage 4: its counter of user tiles done grows every launch; start over before it wraps */
    if (run->epoch_step && (int64_t)(p->epoch + 1) * run->epoch_step > INT32_MAX) {
        if ((st = loom_buffer_fill(p->buf[IK_FLAGS], 0)) != LOOM_OK)
            return fail(p, st, "loom_ikbo_lce_run: clearing the flags: %s", loom_runtime_error(p->rt));
        p->epoch = 0;
    }
    loom_buffer *bufs[IK_NBUF];
    memcpy(bufs, p->buf, sizeof bufs);
    bufs[IK_E_USER] = e_user, bufs[IK_E_CAND] = e_cand, bufs[IK_MAP] = cand_to_user, bufs[IK_OUT] = out;
    for (int i = 0; i < run->nsteps; i++) {
        const ik_step *sp = &run->step[i];
        loom_arg a[LOOM_MAX_ARGS];
        for (int j = 0; j < sp->nargs; j++)
            a[j] = sp->arg[j] == IK_EPOCH ? LOOM_ARG_I32(p->epoch + 1) : LOOM_ARG_BUF(bufs[sp->arg[j]]);
        if ((st = loom_launch(p->rt, sp->k, sp->grid, a, sp->nargs)) != LOOM_OK) {
            if (!strstr(loom_runtime_error(p->rt), "loom_ikbo_lce_run"))
                fail(p, st, "loom_ikbo_lce_run (%s): %s", loom_kernel_name(sp->k), loom_runtime_error(p->rt));
            return st;
        }
    }
    if (run->epoch_step)
        p->epoch++;
    return LOOM_OK;
}

const char *loom_ikbo_lce_describe(const loom_ikbo_lce *p) { return p ? p->desc : ""; }

loom_ikbo_lce_config loom_ikbo_lce_config_of(const loom_ikbo_lce *p)
{
    return p ? p->cfg : (loom_ikbo_lce_config){0, 0, 0, 0, 0, 0, 0, 0};
}

loom_kernel *loom_ikbo_lce_kernel(const loom_ikbo_lce *p, int i, int grid[3])
{
    if (!p || i < 0 || i >= p->run.nsteps)
        return NULL;
    if (grid)
        memcpy(grid, p->run.step[i].grid, sizeof p->run.step[i].grid);
    return p->run.step[i].k;
}

void loom_ikbo_lce_destroy(loom_ikbo_lce *p)
{
    if (!p)
        return;
    ik_stage_free(&p->run);
    for (int b = 0; b < IK_NBUF; b++)
        loom_buffer_destroy(p->buf[b]);
    free(p->index);
    free(p);
}
