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

enum { MAXK = 8 };

struct loom_ikbo_lce {
    loom_runtime *rt;
    loom_ikbo_lce_shape s;
    loom_ikbo_stage stage;
    loom_ikbo_lce_config cfg;
    int nk;
    loom_kernel *k[MAXK];
    int grid[MAXK][3];
    /* device buffers this object owns */
    loom_buffer *wu_raw, *wc_raw; /* stage 1: the weights as given */
    loom_buffer *wu, *wc;         /* padded weights (stage 0: wu holds the concatenation) */
    loom_buffer *ures, *cand, *flags, *claims, *ecat;
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

static size_t es(const loom_ikbo_lce *p) { return loom_dtype_size(p->s.dtype); }

#define dev(p, bytes, st) tpl_zeroed_buffer((p)->rt, (bytes), (st))

/* Upload host weights [M, K] as [M, Kp] (columns K..Kp-1 zero), at column offset col0
 * of a [M, ld] buffer. */
static void pad_into(unsigned char *dst, int64_t ld, int64_t col0, const void *src, int64_t M, int64_t K, size_t e)
{
    for (int64_t m = 0; m < M; m++)
        memcpy(dst + (size_t)(m * ld + col0) * e, (const unsigned char *)src + (size_t)(m * K) * e, (size_t)K * e);
}

static loom_status upload_padded(loom_ikbo_lce *p, loom_buffer **out, const void *const *w, const int64_t *K,
                                 int nw, int64_t ld)
{
    size_t e = es(p), bytes = (size_t)(p->s.M * ld) * e;
    unsigned char *h = calloc(1, bytes ? bytes : 1);
    if (!h)
        return LOOM_ERR_NOMEM;
    int64_t col = 0;
    for (int i = 0; i < nw; i++) {
        pad_into(h, ld, col, w[i], p->s.M, K[i], e);
        col += K[i];
    }
    loom_status st = LOOM_OK;
    *out = dev(p, bytes, &st);
    if (st == LOOM_OK)
        st = loom_buffer_upload(*out, h, bytes);
    free(h);
    return st;
}

static loom_status add_kernel(loom_ikbo_lce *p, loom_kernel *k, const int grid[3], const char *err)
{
    if (!k)
        return fail(p, LOOM_ERR_INVALID, "loom_ikbo_lce_prepare: %s", err && *err ? err : "out of memory");
    p->k[p->nk] = k;
    memcpy(p->grid[p->nk], grid, sizeof p->grid[0]);
    p->nk++;
    loom_compile_info info;
    loom_status st = loom_prepare(p->rt, k, &info);
    if (st != LOOM_OK)
        return fail(p, st, "loom_ikbo_lce_prepare: kernel '%s': %s", loom_kernel_name(k), loom_runtime_error(p->rt));
    return LOOM_OK;
}

/* The spec of one of the stage's kernels; planes: user_res's (ikbo_lce.h: 1 for the plain
 * GEMMs of stages 1 and 2, which take gemm_cfg's tiles where the config is transposed). */
static ik_spec spec_of(const loom_ikbo_lce *p, ik_mode mode, int planes)
{
    const loom_ikbo_lce_shape *s = &p->s;
    const loom_ikbo_lce_config *c = planes == 1 && p->cfg.trans ? &gemm_cfg : &p->cfg;
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

/* A GEMM kernel of the stage. */
static loom_status add_gemm(loom_ikbo_lce *p, ik_mode mode, int planes)
{
    ik_spec sp = spec_of(p, mode, planes);
    char err[256] = "";
    int g[3];
    ik_grid(&sp, g);
    return add_kernel(p, ik_build(&sp, err, sizeof err), g, err);
}

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

static loom_status build_stage(loom_ikbo_lce *p, const void *w_user, const void *w_cand)
{
    const loom_ikbo_lce_shape *s = &p->s;
    size_t e = es(p);
    loom_status st = LOOM_OK;
    int64_t kpu = ik_pad8(s->Ku), kpc = ik_pad8(s->Kc);
    char err[256] = "";
    switch (p->stage) {
    case LOOM_IKBO_MATERIALIZED: {
        int64_t kt = ik_pad8(s->Ku + s->Kc);
        const void *w[2] = {w_user, w_cand};
        const int64_t K[2] = {s->Ku, s->Kc};
        if ((st = upload_padded(p, &p->wu, w, K, 2, kt)) != LOOM_OK)
            return fail(p, st, "loom_ikbo_lce_prepare: uploading the weights: %s", loom_runtime_error(p->rt));
        p->ecat = dev(p, (size_t)(s->B * kt * s->N) * e, &st);
        if (st != LOOM_OK)
            return fail(p, st, "loom_ikbo_lce_prepare: the materialized E (%lld bytes): %s",
                        (long long)(s->B * kt * s->N * (int64_t)e), loom_runtime_error(p->rt));
        ik_spec sp = spec_of(p, IK_CAND, 1);
        int g[3] = {(int)TPL_CDIV(kt, 16), (int)s->B, 1};
        if ((st = add_kernel(p, ik_gather_kernel(&sp), g, NULL)) != LOOM_OK)
            return st;
        /* the gemm template with its own defaults, the tile config set by name; its TMA-store
         * epilogue is dropped when the ring leaves no shared memory for it */
        const loom_template *gt = loom_template_find("gemm");
        int64_t gs[LOOM_MAX_PARAMS] = {s->M, s->N, kt, s->B, s->dtype, s->dtype, 1}, gc[LOOM_MAX_PARAMS];
        char text[160];
        /* (the gemm template has no transposed product: then its tiles are the defaults) */
        config_text(p->cfg.trans ? &gemm_cfg : &p->cfg, text, sizeof text);
        if (loom_params_parse(gt->config, gt->nconfig, text, gc, err, sizeof err) != 0)
            return fail(p, LOOM_ERR_INVALID, "loom_ikbo_lce_prepare: the baseline gemm's config: %s", err);
        loom_kernel *k = gt->build(gs, gc, err, sizeof err);
        for (int i = 0; !k && i < gt->nconfig; i++)
            if (!strcmp(gt->config[i].key, "tmastore") && gc[i]) {
                gc[i] = 0;
                k = gt->build(gs, gc, err, sizeof err);
            }
        gt->grid(gs, gc, g);
        return add_kernel(p, k, g, err);
    }
    case LOOM_IKBO_DECOMPOSED:
    case LOOM_IKBO_K_ALIGNED: {
        if (p->stage == LOOM_IKBO_DECOMPOSED) {
            /* the weights as given; padded into wu/wc on every run */
            p->wu_raw = dev(p, (size_t)(s->M * s->Ku) * e, &st);
            p->wc_raw = dev(p, (size_t)(s->M * s->Kc) * e, &st);
            p->wu = dev(p, (size_t)(s->M * kpu) * e, &st);
            p->wc = dev(p, (size_t)(s->M * kpc) * e, &st);
            if (st == LOOM_OK)
                st = loom_buffer_upload(p->wu_raw, w_user, (size_t)(s->M * s->Ku) * e);
            if (st == LOOM_OK)
                st = loom_buffer_upload(p->wc_raw, w_cand, (size_t)(s->M * s->Kc) * e);
            int g[3] = {(int)s->M, 1, 1};
            if (st == LOOM_OK && (st = add_kernel(p, ik_pad_kernel(s->M, s->Ku, s->dtype), g, NULL)) == LOOM_OK)
                st = add_kernel(p, ik_pad_kernel(s->M, s->Kc, s->dtype), g, NULL);
        } else {
            if ((st = upload_padded(p, &p->wu, &w_user, &s->Ku, 1, kpu)) == LOOM_OK)
                st = upload_padded(p, &p->wc, &w_cand, &s->Kc, 1, kpc);
        }
        p->ures = dev(p, (size_t)(s->U * s->M * s->N) * e, &st);
        p->cand = dev(p, (size_t)(s->B * s->M * s->N) * e, &st);
        if (st != LOOM_OK)
            return fail(p, st, "loom_ikbo_lce_prepare: buffers: %s", loom_runtime_error(p->rt));
        if ((st = add_gemm(p, IK_USER, 1)) != LOOM_OK || (st = add_gemm(p, IK_CAND, 1)) != LOOM_OK)
            return st;
        tpl_broadcast_add_shape bs = {s->B, s->U, s->M, s->N, s->dtype};
        int g[3];
        tpl_broadcast_add_grid(&bs, 8, 256, g);
        return add_kernel(p, tpl_broadcast_add(&bs, 8, 256, 4), g, NULL);
    }
    case LOOM_IKBO_FUSED_EPILOGUE:
    case LOOM_IKBO_PERSISTENT: {
        if ((st = upload_padded(p, &p->wu, &w_user, &s->Ku, 1, kpu)) == LOOM_OK)
            st = upload_padded(p, &p->wc, &w_cand, &s->Kc, 1, kpc);
        p->ures = dev(p, (size_t)(s->U * 2 * s->M * s->N) * e, &st); /* hi and lo planes */
        if (p->stage == LOOM_IKBO_PERSISTENT) {
            p->flags = dev(p, 4, &st);  /* the counter of user tiles done */
            p->claims = dev(p, 8, &st); /* the tile schedule's counter (back at zero after each run) */
        }
        if (st != LOOM_OK)
            return fail(p, st, "loom_ikbo_lce_prepare: buffers: %s", loom_runtime_error(p->rt));
        if (p->stage == LOOM_IKBO_PERSISTENT)
            return add_gemm(p, IK_FUSED, 2);
        if ((st = add_gemm(p, IK_USER, 2)) != LOOM_OK)
            return st;
        return add_gemm(p, IK_CAND_FUSED, 2);
    }
    }
    return fail(p, LOOM_ERR_INVALID, "loom_ikbo_lce_prepare: stage %d is not 0 to 4", (int)p->stage);
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
    ik_spec sp = spec_of(p, stage == LOOM_IKBO_PERSISTENT ? IK_FUSED : IK_CAND_FUSED, 2);
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
    char text[160];
    config_text(stage <= LOOM_IKBO_K_ALIGNED && p->cfg.trans ? &gemm_cfg : &p->cfg, text, sizeof text);
    int n = snprintf(p->desc, sizeof p->desc, "stage %d (%s): %s;", (int)stage, loom_ikbo_stage_name(stage), text);
    for (int i = 0; i < p->nk && n > 0 && (size_t)n < sizeof p->desc; i++)
        n += snprintf(p->desc + n, sizeof p->desc - (size_t)n, " %s", loom_kernel_name(p->k[i]));
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

static loom_status launch(loom_ikbo_lce *p, int i, const loom_arg *a, int n)
{
    loom_status st = loom_launch(p->rt, p->k[i], p->grid[i], a, n);
    if (st != LOOM_OK && !strstr(loom_runtime_error(p->rt), "loom_ikbo_lce_run"))
        return fail(p, st, "loom_ikbo_lce_run (%s): %s", loom_kernel_name(p->k[i]), loom_runtime_error(p->rt));
    return st;
}

loom_status loom_ikbo_lce_run(loom_ikbo_lce *p, loom_buffer *e_user, loom_buffer *e_cand, loom_buffer *cand_to_user,
                              loom_buffer *out)
{
    if (!p)
        return LOOM_ERR_INVALID;
    const loom_ikbo_lce_shape *s = &p->s;
    size_t e = es(p);
    loom_status st;
    if ((st = check_buf(p, e_user, "e_user", s->U, s->Ku, s->N, e)) != LOOM_OK ||
        (st = check_buf(p, e_cand, "e_cand", s->B, s->Kc, s->N, e)) != LOOM_OK ||
        (st = check_buf(p, cand_to_user, "cand_to_user", s->B, 1, 1, 4)) != LOOM_OK ||
        (st = check_buf(p, out, "out", s->B, s->M, s->N, e)) != LOOM_OK)
        return st;
    if (p->index && (st = check_index(p, cand_to_user)) != LOOM_OK)
        return st;
#define B_(x) LOOM_ARG_BUF(x)
    switch (p->stage) {
    case LOOM_IKBO_MATERIALIZED: {
        loom_arg g[] = {B_(e_user), B_(e_cand), B_(cand_to_user), B_(p->ecat)};
        loom_arg m[] = {B_(p->wu), B_(p->ecat), B_(out)};
        if ((st = launch(p, 0, g, 4)) == LOOM_OK)
            st = launch(p, 1, m, 3);
        return st;
    }
    case LOOM_IKBO_DECOMPOSED:
    case LOOM_IKBO_K_ALIGNED: {
        int i = 0;
        if (p->stage == LOOM_IKBO_DECOMPOSED) {
            loom_arg pu[] = {B_(p->wu_raw), B_(p->wu)}, pc[] = {B_(p->wc_raw), B_(p->wc)};
            if ((st = launch(p, i++, pu, 2)) != LOOM_OK || (st = launch(p, i++, pc, 2)) != LOOM_OK)
                return st;
        }
        loom_arg u[] = {B_(p->wu), B_(e_user), B_(p->ures)};
        loom_arg c[] = {B_(p->wc), B_(e_cand), B_(p->cand)};
        loom_arg a[] = {B_(p->cand), B_(p->ures), B_(cand_to_user), B_(out)};
        if ((st = launch(p, i, u, 3)) == LOOM_OK && (st = launch(p, i + 1, c, 3)) == LOOM_OK)
            st = launch(p, i + 2, a, 4);
        return st;
    }
    case LOOM_IKBO_FUSED_EPILOGUE: {
        loom_arg u[] = {B_(p->wu), B_(e_user), B_(p->ures)};
        loom_arg c[] = {B_(p->wc), B_(e_cand), B_(cand_to_user), B_(p->ures), B_(out)};
        if ((st = launch(p, 0, u, 3)) == LOOM_OK)
            st = launch(p, 1, c, 5);
        return st;
    }
    case LOOM_IKBO_PERSISTENT: {
        ik_spec sp = spec_of(p, IK_FUSED, 2);
        if ((int64_t)(p->epoch + 1) * ik_user_blocks(&sp) > INT32_MAX) { /* the counter grows every launch: start
                                                                         over before it wraps */
            if ((st = loom_buffer_fill(p->flags, 0)) != LOOM_OK)
                return fail(p, st, "loom_ikbo_lce_run: clearing the flags: %s", loom_runtime_error(p->rt));
            p->epoch = 0;
        }
        loom_arg a[] = {B_(p->wu),    B_(e_user),   B_(p->wc),     B_(e_cand),
                        B_(cand_to_user), B_(p->ures), B_(p->flags), B_(p->claims),
                        LOOM_ARG_I32(p->epoch + 1), B_(out)};
        if ((st = launch(p, 0, a, 10)) == LOOM_OK)
            p->epoch++;
        return st;
    }
    }
#undef B_
    return LOOM_ERR_INVALID;
}

const char *loom_ikbo_lce_describe(const loom_ikbo_lce *p) { return p ? p->desc : ""; }

loom_ikbo_lce_config loom_ikbo_lce_config_of(const loom_ikbo_lce *p)
{
    return p ? p->cfg : (loom_ikbo_lce_config){0, 0, 0, 0, 0, 0, 0, 0};
}

loom_kernel *loom_ikbo_lce_kernel(const loom_ikbo_lce *p, int i, int grid[3])
{
    if (!p || i < 0 || i >= p->nk)
        return NULL;
    if (grid)
        memcpy(grid, p->grid[i], sizeof p->grid[i]);
    return p->k[i];
}

void loom_ikbo_lce_destroy(loom_ikbo_lce *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->nk; i++)
        loom_kernel_destroy(p->k[i]);
    loom_buffer *bs[] = {p->wu_raw, p->wc_raw, p->wu, p->wc, p->ures, p->cand, p->flags, p->claims, p->ecat};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        loom_buffer_destroy(bs[i]);
    free(p->index);
    free(p);
}
