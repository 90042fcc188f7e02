/*
 * ikbo_fa_api.c -- the C API of the IKBO flash attention (include/loom_ikbo.h): prepare
 * once per shape, then per request the mapping (made into a work plan on the host,
 * templates/ikbo_fa_plan.c) and one launch of the kernel of templates/ikbo_fa.c.  FP8
 * (dtype e4m3) is the same kernel built with vtrans=1 and the scales argument: its runs
 * go through the _scaled entry points, which pass the scales; the others are them with
 * scales NULL.
 */
#include "tpl.h" /* ikbo_fa.h: the kernel, its plan */
#include "../util/util.h"

#include <stdlib.h>
#include <string.h>

struct loom_ikbo_fa {
    loom_runtime *rt;
    loom_ikbo_fa_shape s;
    loom_ikbo_fa_config cfg;
    fa_spec spec;
    loom_kernel *k;
    int grid[3];
    loom_buffer *plan, *lens, *claims; /* owned: the plan, the lengths (S each without varlen), the counter */
    int32_t *hplan, *hmap, *hlens;     /* host copies: the plan, and run's read-back of the mapping */
    int64_t units;                     /* the current plan's units (-1: no mapping set) */
    int64_t B, U;                      /* the current request's (the mapping set last) */
    char desc[256];
};


/* p's failure: the message into its runtime's error, the status returned. */
#define fail(p, st, ...) tpl_fail((p)->rt, (st), __VA_ARGS__)

static fa_spec spec_of(const loom_ikbo_fa_shape *s, const loom_ikbo_fa_config *c)
{
    int64_t v[LOOM_MAX_PARAMS];
    fa_shape_vector(s, v); /* FP8's odt and vtrans too */
    fa_spec sp = fa_spec_of_shape(v);
    LOOM_COPY(LOOM_IKBO_FA_CONFIG, &sp, c);
    return sp;
}

static bool fp8(const loom_ikbo_fa *p) { return p->s.dtype == LOOM_E4M3; }

/* The table's defaults (LOOM_IKBO_FA_CONFIG, loom_ikbo.h: 128-key tiles, two slots each
 * of the K and V rings and two Q slots, a persistent CTA an SM taking units round-robin,
 * each tile's softmax overlapping the previous tile's P V) as the template's heuristic
 * adapts them to the shape (templates/ikbo_fa_registry.c). */
loom_ikbo_fa_config loom_ikbo_fa_untuned_config(const loom_ikbo_fa_shape *s)
{
    if (!s)
        return (loom_ikbo_fa_config){LOOM_IKBO_FA_CONFIG(LOOM_DEFAULT)};
    int64_t shape[LOOM_MAX_PARAMS], c[LOOM_MAX_PARAMS];
    fa_shape_vector(s, shape);
    loom_template_untuned_config(loom_template_find("ikbo_fa"), shape, c);
    return fa_config_of(c);
}

/* The config the tuner picks for this shape (cached on disk). */
static loom_status tuned_config(loom_ikbo_fa *p)
{
    const loom_template *t = loom_template_find("ikbo_fa");
    const loom_ikbo_fa_shape *s = &p->s;
    int64_t shape[LOOM_MAX_PARAMS];
    fa_shape_vector(s, shape);
    loom_tune_opts o = {0};
    o.quiet = 1;
    loom_tuned r;
    loom_status st = loom_tune(p->rt, t, shape, 1, &o, &r);
    if (st == LOOM_ERR_NOT_TUNED) /* the default config's kernel is ready: run it, and say so */
        st = tpl_not_tuned("loom_ikbo_fa_prepare", &r);
    if (st == LOOM_OK)
        p->cfg = fa_config_of(r.config);
    loom_tuned_release(&r, 1);
    return st;
}

#define dev(p, bytes, st) tpl_zeroed_buffer((p)->rt, (bytes), (st))

loom_status loom_ikbo_fa_prepare(loom_runtime *rt, const loom_ikbo_fa_shape *shape, const loom_ikbo_fa_config *cfg,
                                 loom_ikbo_fa **out)
{
    if (!rt)
        return LOOM_ERR_INVALID;
    if (!out || !shape) {
        loom_runtime_set_error(rt, "loom_ikbo_fa_prepare: %s is NULL", !out ? "out" : "shape");
        return LOOM_ERR_INVALID;
    }
    *out = NULL;
    loom_ikbo_fa *p = calloc(1, sizeof *p);
    if (!p)
        return LOOM_ERR_NOMEM;
    p->rt = rt;
    p->s = *shape;
    p->cfg = cfg ? *cfg : loom_ikbo_fa_untuned_config(shape);
    p->units = -1;
    p->spec = spec_of(shape, &p->cfg);
    char buf[300], err[300] = "";
    const char *why = shape->dtype == LOOM_E4M3 && shape->odtype != LOOM_F16 && shape->odtype != LOOM_BF16
                          ? "shape->odtype (out's type with e4m3 inputs) must be LOOM_F16 or LOOM_BF16"
                          : fa_why_not(&p->spec, buf, sizeof buf);
    loom_status st = LOOM_OK;
    if (why)
        st = fail(p, LOOM_ERR_INVALID, "loom_ikbo_fa_prepare: %s", why);
    if (st == LOOM_OK && !cfg && loom_runtime_is_gpu(rt)) {
        if ((st = tuned_config(p)) != LOOM_OK)
            st = fail(p, st, "loom_ikbo_fa_prepare: tuning: %s", loom_runtime_error(rt));
        p->spec = spec_of(shape, &p->cfg);
    }
    int64_t maxu = st == LOOM_OK ? fa_max_units(&p->spec) : 0; /* a product: only of a shape fa_why_not took */
    if (st == LOOM_OK) {
        p->plan = dev(p, (size_t)(maxu * FA_UNIT_FIELDS) * 4, &st);
        p->lens = dev(p, (size_t)shape->U * 4, &st);
        p->claims = dev(p, 8, &st);
        p->hplan = malloc((size_t)(maxu * FA_UNIT_FIELDS) * 4);
        p->hmap = malloc((size_t)shape->B * 4);
        p->hlens = malloc((size_t)shape->U * 4);
        if (st == LOOM_OK && (!p->hplan || !p->hmap || !p->hlens))
            st = LOOM_ERR_NOMEM;
        if (st != LOOM_OK)
            st = fail(p, st, "loom_ikbo_fa_prepare: buffers for %lld units: %s", (long long)maxu,
                      loom_runtime_error(rt));
    }
    if (st == LOOM_OK && !shape->varlen) { /* every user has S keys */
        for (int64_t u = 0; u < shape->U; u++)
            p->hlens[u] = (int32_t)shape->S;
        st = loom_buffer_upload(p->lens, p->hlens, (size_t)shape->U * 4);
    }
    if (st == LOOM_OK) {
        p->k = fa_build(&p->spec, err, sizeof err);
        fa_grid(&p->spec, p->grid);
        loom_compile_info info;
        if (!p->k)
            st = fail(p, LOOM_ERR_INVALID, "loom_ikbo_fa_prepare: %s", err);
        else if ((st = loom_prepare(rt, p->k, &info)) != LOOM_OK)
            st = fail(p, st, "loom_ikbo_fa_prepare: kernel '%s': %s", loom_kernel_name(p->k), loom_runtime_error(rt));
    }
    if (st != LOOM_OK) {
        loom_ikbo_fa_destroy(p);
        return st;
    }
    const loom_ikbo_fa_config *c = &p->cfg;
    snprintf(p->desc, sizeof p->desc,
             "BN=%d,stages=%d,ctas=%d,sched=%d,turns=%d,overlap=%d,tmastore=%d,xunit=%d,horder=%d; %s%s%s", c->bn,
             c->stages, c->ctas, c->sched, c->turns, c->overlap, c->tmastore, c->xunit, c->horder, loom_kernel_name(p->k),
             fp8(p) ? "; e4m3 (Vt, per-head scales), out " : "", fp8(p) ? loom_dtype_name(shape->odtype) : "");
    *out = p;
    return LOOM_OK;
}

static loom_status set_mapping(loom_ikbo_fa *p, const char *fn, int64_t B, int64_t U, const int32_t *cand_to_user,
                               const int32_t *seq_len)
{
    loom_status st = tpl_check_request(p->rt, fn, B, U, p->s.B, p->s.U);
    if (st != LOOM_OK)
        return st;
    if (!cand_to_user)
        return fail(p, LOOM_ERR_INVALID, "%s: cand_to_user is NULL", fn);
    if (!p->s.varlen && seq_len)
        return fail(p, LOOM_ERR_INVALID,
                    "%s: seq_len given, but the shape was prepared without varlen (every user has S keys)", fn);
    if (p->s.varlen && !seq_len)
        return fail(p, LOOM_ERR_INVALID, "%s: the shape has varlen=1: seq_len is needed", fn);
    char err[200];
    fa_spec at = p->spec; /* the request's B and U */
    at.B = B, at.U = U;
    int64_t n = fa_plan(&at, cand_to_user, seq_len, p->hplan, err, sizeof err);
    if (n < 0)
        return fail(p, LOOM_ERR_INVALID, "%s: %s", fn, err);
    /* the plan's units (the rest of the buffer is never read: the launch takes n of them) */
    st = loom_buffer_upload(p->plan, p->hplan, (size_t)(fa_max_units(&at) * FA_UNIT_FIELDS) * 4);
    if (st == LOOM_OK && seq_len)
        st = loom_buffer_upload(p->lens, seq_len, (size_t)U * 4);
    if (st != LOOM_OK)
        return fail(p, st, "%s: uploading the plan: %s", fn, loom_runtime_error(p->rt));
    p->units = n;
    p->B = B, p->U = U;
    return LOOM_OK;
}

loom_status loom_ikbo_fa_set_mapping(loom_ikbo_fa *p, const int32_t *cand_to_user, const int32_t *seq_len)
{
    if (!p)
        return LOOM_ERR_INVALID;
    return set_mapping(p, "loom_ikbo_fa_set_mapping", p->s.B, p->s.U, cand_to_user, seq_len);
}

loom_status loom_ikbo_fa_set_request(loom_ikbo_fa *p, int64_t B, int64_t U, const int32_t *cand_to_user,
                                     const int32_t *seq_len)
{
    if (!p)
        return LOOM_ERR_INVALID;
    return set_mapping(p, "loom_ikbo_fa_set_request", B, U, cand_to_user, seq_len);
}

/* b holds at least `elems` elements of e bytes. */
static loom_status check_buf(loom_ikbo_fa *p, const char *fn, const loom_buffer *b, const char *name, int64_t elems,
                             size_t e, const char *dims)
{
    size_t need = SIZE_MAX;
    util_mul_size((size_t)elems, e, &need); /* elems is below 2^31 (fa_why_not): it fits */
    if (!b)
        return fail(p, LOOM_ERR_INVALID, "%s: %s is NULL", fn, name);
    if (loom_buffer_size(b) < need)
        return fail(p, LOOM_ERR_INVALID, "%s: %s has %zu bytes; it must hold %s = %lld elements of %zu bytes (%zu)",
                    fn, name, loom_buffer_size(b), dims, (long long)elems, e, need);
    return LOOM_OK;
}

/* scales fit the handle's dtype: given for e4m3 (where the plain entry points, which
 * have none, point to the _scaled ones), absent for f16 and bf16. */
static loom_status check_scales(loom_ikbo_fa *p, const char *fn, const loom_buffer *scales, bool scaled)
{
    if (fp8(p) && !scales)
        return fail(p, LOOM_ERR_INVALID,
                    scaled ? "%s: scales is NULL: dtype e4m3 needs the per-head scales [3, H] f32 (q_scale, k_scale, "
                             "v_scale)"
                           : "%s: the shape's dtype is e4m3: its runs take the per-head scales [3, H] f32 and V "
                             "transposed [U, H, D, S]: use loom_ikbo_fa_run_scaled or loom_ikbo_fa_launch_scaled",
                    fn);
    if (!fp8(p) && scales)
        return fail(p, LOOM_ERR_INVALID,
                    "%s: scales given, but the shape's dtype is %s: scales are for e4m3 (pass NULL)", fn,
                    loom_dtype_name(p->s.dtype));
    return LOOM_OK;
}

static loom_status launch(loom_ikbo_fa *p, const char *fn, loom_buffer *q, loom_buffer *k, loom_buffer *v,
                          loom_buffer *scales, loom_buffer *out, bool scaled)
{
    const loom_ikbo_fa_shape *s = &p->s;
    size_t e = loom_dtype_size(s->dtype), eo = loom_dtype_size(fa_out_dt(&p->spec));
    /* each below 2^31, as prepare checked (fa_why_not) */
    int64_t qn = INT64_MAX, kn = INT64_MAX, B = p->units < 0 ? s->B : p->B, U = p->units < 0 ? s->U : p->U;
    util_prod_i64((const int64_t[]){B, s->n_seed, s->H, s->D}, 4, &qn);
    util_prod_i64((const int64_t[]){U, s->S, s->H, s->D}, 4, &kn);
    loom_status st;
    if ((st = check_scales(p, fn, scales, scaled)) != LOOM_OK ||
        (st = check_buf(p, fn, q, "q", qn, e, "[B * n_seed, H, D]")) != LOOM_OK ||
        (st = check_buf(p, fn, k, "k", kn, e, "[U * S, H, D]")) != LOOM_OK ||
        (st = check_buf(p, fn, v, fp8(p) ? "vt" : "v", kn, e, fp8(p) ? "[U, H, D, S]" : "[U * S, H, D]")) != LOOM_OK ||
        (scales && (st = check_buf(p, fn, scales, "scales", 3 * s->H, 4, "[3, H] f32")) != LOOM_OK) ||
        (st = check_buf(p, fn, out, "out", qn, eo, "[B * n_seed, H, D]")) != LOOM_OK)
        return st;
    if (p->units < 0)
        return fail(p, LOOM_ERR_INVALID, "%s: no mapping: call loom_ikbo_fa_set_mapping (or loom_ikbo_fa_run) first",
                    fn);
    loom_arg a[] = {LOOM_ARG_I32((int32_t)(B * s->n_seed)),
                    LOOM_ARG_I32((int32_t)U),
                    LOOM_ARG_BUF(q),
                    LOOM_ARG_BUF(k),
                    LOOM_ARG_BUF(v),
                    LOOM_ARG_BUF(p->plan),
                    LOOM_ARG_BUF(p->lens),
                    LOOM_ARG_BUF(p->claims),
                    LOOM_ARG_I32((int32_t)p->units),
                    LOOM_ARG_BUF(out),
                    LOOM_ARG_BUF(scales)}; /* the kernel's last argument with e4m3 */
    /* a program a unit and head of this plan, at most the config's CTAs */
    int64_t work = p->units * s->H;
    int grid[3] = {(int)(work < p->grid[0] ? (work > 0 ? work : 1) : p->grid[0]), 1, 1};
    st = loom_launch(p->rt, p->k, grid, a, (int)(sizeof a / sizeof a[0]) - !scales);
    if (st != LOOM_OK)
        return fail(p, st, "%s (%s): %s", fn, loom_kernel_name(p->k), loom_runtime_error(p->rt));
    return LOOM_OK;
}

loom_status loom_ikbo_fa_launch(loom_ikbo_fa *p, loom_buffer *q, loom_buffer *k, loom_buffer *v, loom_buffer *out)
{
    if (!p)
        return LOOM_ERR_INVALID;
    return launch(p, "loom_ikbo_fa_launch", q, k, v, NULL, out, false);
}

loom_status loom_ikbo_fa_launch_scaled(loom_ikbo_fa *p, loom_buffer *q, loom_buffer *k, loom_buffer *vt,
                                       loom_buffer *scales, loom_buffer *out)
{
    if (!p)
        return LOOM_ERR_INVALID;
    return launch(p, "loom_ikbo_fa_launch_scaled", q, k, vt, scales, out, true);
}

static loom_status run_at(loom_ikbo_fa *p, const char *fn, int64_t B, int64_t U, loom_buffer *q, loom_buffer *k,
                          loom_buffer *v, loom_buffer *scales, loom_buffer *cand_to_user, loom_buffer *seq_len,
                          loom_buffer *out, bool scaled)
{
    if (B < 1 || B > p->s.B || U < 1 || U > p->s.U)
        return tpl_check_request(p->rt, fn, B, U, p->s.B, p->s.U);
    loom_status st = check_scales(p, fn, scales, scaled); /* before the mapping is read back */
    if (st != LOOM_OK || (st = check_buf(p, fn, cand_to_user, "cand_to_user", B, 4, "[B]")) != LOOM_OK)
        return st;
    if (seq_len && !p->s.varlen)
        return fail(p, LOOM_ERR_INVALID, "%s: seq_len given, but the shape was prepared without varlen", fn);
    if (!seq_len && p->s.varlen)
        return fail(p, LOOM_ERR_INVALID, "%s: the shape has varlen=1: seq_len is needed", fn);
    if (seq_len && (st = check_buf(p, fn, seq_len, "seq_len", U, 4, "[U]")) != LOOM_OK)
        return st;
    if ((st = loom_buffer_download(cand_to_user, p->hmap, (size_t)B * 4)) != LOOM_OK ||
        (seq_len && (st = loom_buffer_download(seq_len, p->hlens, (size_t)U * 4)) != LOOM_OK))
        return fail(p, st, "%s: reading the mapping back: %s", fn, loom_runtime_error(p->rt));
    if ((st = set_mapping(p, fn, B, U, p->hmap, seq_len ? p->hlens : NULL)) != LOOM_OK)
        return st;
    return launch(p, fn, q, k, v, scales, out, scaled);
}

loom_status loom_ikbo_fa_run(loom_ikbo_fa *p, loom_buffer *q, loom_buffer *k, loom_buffer *v,
                             loom_buffer *cand_to_user, loom_buffer *seq_len, loom_buffer *out)
{
    if (!p)
        return LOOM_ERR_INVALID;
    return run_at(p, "loom_ikbo_fa_run", p->s.B, p->s.U, q, k, v, NULL, cand_to_user, seq_len, out, false);
}

loom_status loom_ikbo_fa_run_at(loom_ikbo_fa *p, int64_t B, int64_t U, loom_buffer *q, loom_buffer *k, loom_buffer *v,
                                loom_buffer *cand_to_user, loom_buffer *seq_len, loom_buffer *out)
{
    if (!p)
        return LOOM_ERR_INVALID;
    return run_at(p, "loom_ikbo_fa_run_at", B, U, q, k, v, NULL, cand_to_user, seq_len, out, false);
}

loom_status loom_ikbo_fa_run_scaled(loom_ikbo_fa *p, int64_t B, int64_t U, loom_buffer *q, loom_buffer *k,
                                    loom_buffer *vt, loom_buffer *scales, loom_buffer *cand_to_user,
                                    loom_buffer *seq_len, loom_buffer *out)
{
    if (!p)
        return LOOM_ERR_INVALID;
    return run_at(p, "loom_ikbo_fa_run_scaled", B, U, q, k, vt, scales, cand_to_user, seq_len, out, true);
}

const char *loom_ikbo_fa_describe(const loom_ikbo_fa *p) { return p ? p->desc : ""; }

loom_ikbo_fa_config loom_ikbo_fa_config_of(const loom_ikbo_fa *p)
{
    return p ? p->cfg : (loom_ikbo_fa_config){0};
}

loom_kernel *loom_ikbo_fa_kernel(const loom_ikbo_fa *p, int grid[3])
{
    if (!p)
        return NULL;
    if (grid)
        memcpy(grid, p->grid, sizeof p->grid);
    return p->k;
}

void loom_ikbo_fa_destroy(loom_ikbo_fa *p)
{
    if (!p)
        return;
    loom_kernel_destroy(p->k);
    loom_buffer_destroy(p->plan);
    loom_buffer_destroy(p->lens);
    loom_buffer_destroy(p->claims);
    free(p->hplan), free(p->hmap), free(p->hlens);
    free(p);
}
