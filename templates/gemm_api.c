/*
 * gemm_api.c -- C[b] = A[b] @ B[b] at any shape (include/loom.h, section 10): the gemm
 * template (templates/gemm.c) behind a prepare-once, run-many C API.
 *
 * The template reads A and B by TMA, which needs 16-byte aligned rows: A's rows lda and
 * B's ldb elements apart, multiples of 8.  A caller's contiguous operand whose K (for A)
 * or N (for B) is not a multiple of 8 is copied by each run into a padded buffer made once
 * at prepare (tpl_pad_rows_kernel: rows of K, or N, elements to rows of the next multiple
 * of 8); the gemm then runs on the padded operand with lda (or ldb) set to match.  C is
 * the caller's own buffer: where N is not a multiple of 8 the epilogue stores it from the
 * registers (tmastore=0), since the TMA store needs aligned rows as well.
 *
 * Bad input is refused with a message naming the argument, before anything runs: NULL or
 * too small buffers, buffers of another runtime, and C given as A or B.
 */
#include "rt.h"
#include "tpl.h"
#include "../util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OP_A, OP_B, NOPS };

/* One operand the runs copy into an aligned buffer. */
typedef struct padded {
    loom_kernel *k; /* NULL: the operand is used as it is */
    int grid[3];
    loom_buffer *buf;
} padded;

struct loom_gemm {
    loom_runtime *rt;
    loom_gemm_shape s;
    loom_tuned tuned; /* the gemm: tuned, or built from the caller's config (released alike) */
    padded pad[NOPS];
    char desc[512];
};

/* Rows of A as the runs hold them: one A shared by the batch, or one per product. */
static int64_t a_rows(const loom_gemm_shape *s) { return (s->batch > 1 && !s->a_shared ? s->batch : 1) * s->M; }

static const char *shape_error(const loom_gemm_shape *s, char *buf, size_t n)
{
    if (s->dtype != LOOM_F16 && s->dtype != LOOM_BF16)
        return "dtype must be f16 or bf16";
    if (s->odtype != LOOM_F16 && s->odtype != LOOM_BF16 && s->odtype != LOOM_F32)
        return "odtype must be f16, bf16 or f32";
    if (s->M < 1 || s->N < 1 || s->K < 1 || s->batch < 1) {
        snprintf(buf, n, "M, N, K and batch must be >= 1 (got M=%lld N=%lld K=%lld batch=%lld)", (long long)s->M,
                 (long long)s->N, (long long)s->K, (long long)s->batch);
        return buf;
    }
    if (s->a_shared != 0 && s->a_shared != 1)
        return "a_shared must be 0 or 1";
    /* rows the copies index with 32-bit offsets below 2^31; every element count the runs
     * compute, padded ones included, below 2^40 */
    int64_t arows = 0;
    if (!util_mul_i64(s->batch > 1 && !s->a_shared ? s->batch : 1, s->M, &arows) || arows >= INT64_C(1) << 31 ||
        s->batch * (double)s->K >= 2147483648.0 || s->N >= INT64_C(1) << 31) {
        snprintf(buf, n, "the shape M=%lld N=%lld K=%lld batch=%lld has 2^31 rows or columns or more in an operand",
                 (long long)s->M, (long long)s->N, (long long)s->K, (long long)s->batch);
        return buf;
    }
    const int64_t lim = LOOM_PARAM_MAX;
    if (s->M >= lim || s->N >= lim || s->K >= lim || s->batch >= lim || s->M > lim / tpl_pad8(s->K) ||
        a_rows(s) > lim / tpl_pad8(s->K) || s->batch > lim / s->K / tpl_pad8(s->N) || s->batch > lim / s->M / s->N) {
        snprintf(buf, n, "the shape M=%lld N=%lld K=%lld batch=%lld has operands of 2^40 elements or more",
                 (long long)s->M, (long long)s->N, (long long)s->K, (long long)s->batch);
        return buf;
    }
    return NULL;
}

/* The gemm template's shape parameters for s (A and B at their padded strides). */
static void template_shape(const loom_gemm_shape *s, int64_t *sh)
{
    memset(sh, 0, LOOM_MAX_PARAMS * sizeof *sh);
    int64_t v[] = {s->M, s->N, s->K, s->batch, s->dtype, s->odtype, s->a_shared || s->batch == 1, tpl_pad8(s->K),
                   tpl_pad8(s->N)};
    memcpy(sh, v, sizeof v);
}

/* The gemm from the caller's config: "k=v,..." over the defaults (tmastore=0 first where
 * N is not a multiple of 8, so the caller's text can still set it). */
static loom_status build_given(loom_gemm *p, const loom_template *t, const int64_t *sh, const char *config)
{
    char text[1024], err[512] = "";
    snprintf(text, sizeof text, "%s%s%s", p->s.N % 8 ? "tmastore=0" : "", p->s.N % 8 && *config ? "," : "", config);
    int64_t cf[LOOM_MAX_PARAMS];
    if (loom_params_parse(t->config, t->nconfig, text, cf, err, sizeof err) != 0)
        return tpl_fail(p->rt, LOOM_ERR_INVALID, "loom_gemm_prepare: config: %s", err);
    loom_kernel *k = t->build(sh, cf, err, sizeof err);
    if (!k)
        return tpl_fail(p->rt, LOOM_ERR_INVALID, "loom_gemm_prepare: config \"%s\": %s", config, err);
    loom_status st = loom_prepare(p->rt, k, NULL);
    if (st != LOOM_OK) {
        loom_kernel_destroy(k);
        return st;
    }
    p->tuned.kernel = k;
    memcpy(p->tuned.config, cf, sizeof cf);
    memcpy(p->tuned.shape, sh, LOOM_MAX_PARAMS * sizeof *sh);
    t->grid(sh, cf, p->tuned.grid);
    return LOOM_OK;
}

/* The copy of operand op into its padded buffer, when its rows are not aligned. */
static loom_status make_pad(loom_gemm *p, int op)
{
    const loom_gemm_shape *s = &p->s;
    int64_t rows = op == OP_A ? a_rows(s) : s->batch * s->K, cols = op == OP_A ? s->K : s->N;
    if (cols % 8 == 0)
        return LOOM_OK;
    padded *d = &p->pad[op];
    /* not zeroed: every run's copy writes all of it, the padding columns as zeros */
    if (!(d->buf = loom_buffer_create(p->rt, (size_t)(rows * tpl_pad8(cols)) * loom_dtype_size(s->dtype))))
        return tpl_fail(p->rt, LOOM_ERR_NOMEM, "loom_gemm_prepare: the padded %s (%lld x %lld): %s", op ? "B" : "A",
                        (long long)rows, (long long)tpl_pad8(cols), loom_runtime_error(p->rt));
    d->k = tpl_pad_rows_kernel(op == OP_A ? "gemm_pad_a" : "gemm_pad_b", rows, cols, tpl_pad8(cols), s->dtype);
    if (!d->k)
        return tpl_fail(p->rt, LOOM_ERR_NOMEM, "loom_gemm_prepare: out of memory building the %s copy", op ? "B" : "A");
    tpl_pad_rows_grid(rows, tpl_pad8(cols), d->grid);
    return loom_prepare(p->rt, d->k, NULL);
}

loom_status loom_gemm_prepare(loom_runtime *rt, const loom_gemm_shape *s, const char *config, loom_gemm **out)
{
    if (!out)
        return rt ? tpl_fail(rt, LOOM_ERR_INVALID, "loom_gemm_prepare: out is NULL") : LOOM_ERR_INVALID;
    *out = NULL;
    if (!rt)
        return LOOM_ERR_INVALID;
    if (!s)
        return tpl_fail(rt, LOOM_ERR_INVALID, "loom_gemm_prepare: shape is NULL");
    char buf[256];
    const char *why = shape_error(s, buf, sizeof buf);
    if (why)
        return tpl_fail(rt, LOOM_ERR_INVALID, "loom_gemm_prepare: shape: %s", why);
    const loom_template *t = loom_template_find("gemm");
    if (!t)
        return tpl_fail(rt, LOOM_ERR_UNSUPPORTED, "loom_gemm_prepare: this loom has no gemm template");
    loom_gemm *p = calloc(1, sizeof *p);
    if (!p)
        return tpl_fail(rt, LOOM_ERR_NOMEM, "loom_gemm_prepare: out of memory");
    p->rt = rt;
    p->s = *s;
    int64_t sh[LOOM_MAX_PARAMS];
    template_shape(s, sh);
    loom_status st;
    if (config)
        st = build_given(p, t, sh, config);
    else {
        loom_tune_opts o = {.quiet = 1};
        st = loom_tune(rt, t, sh, 1, &o, &p->tuned);
        if (st == LOOM_ERR_NOT_TUNED) /* the default config's kernel is ready: run it, and say so */
            st = tpl_not_tuned("loom_gemm_prepare", &p->tuned);
        if (st != LOOM_OK)
            tpl_fail(rt, st, "loom_gemm_prepare: no gemm config: %s", p->tuned.note);
    }
    for (int op = 0; op < NOPS && st == LOOM_OK; op++)
        st = make_pad(p, op);
    if (st != LOOM_OK) {
        loom_gemm_destroy(p);
        return st;
    }
    char cfg[256];
    loom_params_format(t->config, t->nconfig, p->tuned.config, cfg, sizeof cfg);
    int w = snprintf(p->desc, sizeof p->desc, "gemm %s (%s)", cfg, !config ? "tuned" : *config ? "given" : "defaults");
    for (int op = 0; op < NOPS; op++)
        if (p->pad[op].k && w > 0 && (size_t)w < sizeof p->desc)
            w += snprintf(p->desc + w, sizeof p->desc - (size_t)w, "; %s copied to rows of %lld", op ? "B" : "A",
                          (long long)tpl_pad8(op ? s->N : s->K));
    *out = p;
    return LOOM_OK;
}

static loom_status check_buf(loom_gemm *p, const loom_buffer *b, const char *name, int64_t elems, loom_dtype dt)
{
    size_t need = (size_t)elems * loom_dtype_size(dt);
    char msg[256];
    if (!b)
        snprintf(msg, sizeof msg, "loom_gemm_run: %s is NULL", name);
    else if (rt_buffer_runtime(b) != p->rt)
        snprintf(msg, sizeof msg, "loom_gemm_run: %s is a buffer of another runtime", name);
    else if (loom_buffer_size(b) < need)
        snprintf(msg, sizeof msg, "loom_gemm_run: %s has %zu bytes; the shape needs %lld %s elements (%zu bytes)",
                 name, loom_buffer_size(b), (long long)elems, loom_dtype_name(dt), need);
    else
        return LOOM_OK;
    return tpl_fail(p->rt, LOOM_ERR_INVALID, "%s", msg);
}

loom_status loom_gemm_run(loom_gemm *p, const loom_buffer *a, const loom_buffer *b, loom_buffer *c)
{
    if (!p)
        return LOOM_ERR_INVALID;
    const loom_gemm_shape *s = &p->s;
    loom_status st;
    if ((st = check_buf(p, a, "A", a_rows(s) * s->K, s->dtype)) != LOOM_OK ||
        (st = check_buf(p, b, "B", s->batch * s->K * s->N, s->dtype)) != LOOM_OK ||
        (st = check_buf(p, c, "C", s->batch * s->M * s->N, s->odtype)) != LOOM_OK)
        return st;
    if (c == a || c == b) /* the kernels read A and B while C is written */
        return tpl_fail(p->rt, LOOM_ERR_INVALID, "loom_gemm_run: C is also %s; the output needs a buffer of its own",
                        c == a ? "A" : "B");
    const loom_buffer *src[NOPS] = {a, b};
    loom_arg args[3];
    for (int op = 0; op < NOPS; op++) {
        const padded *d = &p->pad[op];
        args[op] = LOOM_ARG_BUF((loom_buffer *)(d->k ? d->buf : src[op]));
        if (!d->k)
            continue;
        loom_arg pa[2] = {LOOM_ARG_BUF((loom_buffer *)src[op]), LOOM_ARG_BUF(d->buf)};
        if ((st = loom_launch(p->rt, d->k, d->grid, pa, 2)) != LOOM_OK)
            return st;
    }
    args[2] = LOOM_ARG_BUF(c);
    return loom_launch(p->rt, p->tuned.kernel, p->tuned.grid, args, 3);
}

const char *loom_gemm_describe(const loom_gemm *p) { return p ? p->desc : ""; }

void loom_gemm_destroy(loom_gemm *p)
{
    if (!p)
        return;
    for (int op = 0; op < NOPS; op++) {
        loom_kernel_destroy(p->pad[op].k);
        loom_buffer_destroy(p->pad[op].buf);
    }
    loom_tuned_release(&p->tuned, 1);
    free(p);
}
