/*
 * gemm_api.c -- C[b] = A[b] @ B[b] at any shape (include/loom.h, section 10): the gemm
 * template (templates/gemm.c) behind a prepare-once, run-many C API.
 *
 * The template reads A and B by TMA, which needs 16-byte aligned rows: A's rows lda and
 * B's ldb elements apart, multiples of 8.  A caller's contiguous operand whose K (for A)
 * or N (for B) is not a multiple of 8 is copied by each run into a padded buffer made once
 * at prepare (pad_kernel: rows of K, or N, elements to rows of the next multiple of 8);
 * the gemm then runs on the padded operand with lda (or ldb) set to match.  C is
 * the caller's own buffer: where N is not a multiple of 8 the epilogue stores it from the
 * registers (tmastore=0), since the TMA store needs aligned rows as well.
 *
 * M and batch are run-time dims of the gemm kernel (templates/gemm.c): prepare builds it
 * for the shape's M and batch as maxima, and loom_gemm_run_at runs it at any M and batch
 * from 1 to them, the grid from the template's grid rule and the copies' rows at the
 * request's dims (the copy kernels here take their rows at run time too), so no request
 * compiles.  In a batch the products of A (when not shared) and C keep the prepared
 * layout, M_max rows apart; a request reads and writes the first M rows of each.
 *
 * Bad input is refused with a message naming the argument, before anything runs: NULL or
 * too small buffers (at the request's M and batch), buffers of another runtime, C given as
 * A or B, and M or batch outside 1 .. the prepared maximum.
 */
#include "rt.h"
#include "tpl.h"
#include "../util/util.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OP_A, OP_B, NOPS };

/* One operand the runs copy into an aligned buffer. */
typedef struct padded {
    loom_kernel *k; /* NULL: the operand is used as it is */
    int64_t ld;     /* the padded row */
    loom_buffer *buf;
} padded;

struct loom_gemm {
    loom_runtime *rt;
    loom_gemm_shape s; /* M and batch: the most a run takes */
    loom_tuned tuned;  /* the gemm: tuned, or built from the caller's config (released alike) */
    loom_grid_rule rule; /* the gemm's grid at a run's M and batch */
    int key_m, key_batch; /* the template's shape keys M and batch */
    padded pad[NOPS];
    char desc[512];
};

/* Does A hold a product of its own for each of the batch (else one A serves them all)? */
static bool a_batched(const loom_gemm_shape *s) { return s->batch > 1 && !s->a_shared; }

/* Rows of A as the runs hold them: one A shared by the batch, or one per product. */
static int64_t a_rows(const loom_gemm_shape *s) { return (a_batched(s) ? s->batch : 1) * s->M; }

/* The rows of an operand a run at M and batch reads, and of C it writes: the products
 * stay M_max (the prepared M) rows apart, the last one's first M rows end them. */
static int64_t rows_at(const loom_gemm_shape *s, bool batched, int64_t M, int64_t batch)
{
    return batched ? (batch - 1) * s->M + M : M;
}

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

/* The index of template t's shape key `key`, or -1. */
static int shape_key(const loom_template *t, const char *key)
{
    for (int i = 0; i < t->nshape; i++)
        if (!strcmp(t->shape[i].key, key))
            return i;
    return -1;
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

/* The copy of rows of an operand to wider, aligned rows: dst [rows, ld] = src [rows, cols]
 * with zeros in the columns past cols, rows a run-time dim (the kernel's first argument,
 * up to max_rows), so one copy serves every request.  Programs take PAD_ROWS rows by
 * pad_width(ld) columns (pad_grid).  tpl_pad_rows_kernel with its rows at run time. */
enum { PAD_ROWS = 16, PAD_COLS = 256 };

static int64_t pad_width(int64_t ld) { return ld < PAD_COLS ? tpl_pow2_at_least(ld) : PAD_COLS; }

static loom_kernel *pad_kernel(const char *name, int64_t max_rows, int64_t cols, int64_t ld, loom_dtype dt)
{
    int64_t w = pad_width(ld);
    loom_kernel *k = loom_kernel_create(name, 4);
    if (!k)
        return NULL;
    loom_val rows = loom_arg_dim(k, "rows", max_rows, 1);
    loom_val src = loom_arg_tensor(k, "src", dt, LOOM_SHAPE2(LOOM_DIM(rows), cols), LOOM_IN);
    loom_val dst = loom_arg_tensor(k, "dst", dt, LOOM_SHAPE2(LOOM_DIM(rows), ld), LOOM_OUT);
    loom_val o[2] = {loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, PAD_ROWS)),
                     loom_mul(k, loom_program_id(k, 1), loom_const_i(k, LOOM_I32, w))};
    /* columns past src's read as zero; dst's own bounds (rows at the launch's) mask the store */
    loom_val x = loom_load(k, src, o, LOOM_SHAPE2(PAD_ROWS, w), LOOM_NONE, 0.0);
    loom_store(k, dst, o, x, LOOM_NONE);
    return k;
}

static void pad_grid(int64_t rows, int64_t ld, int grid[3])
{
    grid[0] = (int)TPL_CDIV(rows, PAD_ROWS);
    grid[1] = (int)TPL_CDIV(ld, pad_width(ld));
    grid[2] = 1;
}

/* The copy of operand op into its padded buffer, when its rows are not aligned. */
static loom_status make_pad(loom_gemm *p, int op)
{
    const loom_gemm_shape *s = &p->s;
    int64_t rows = op == OP_A ? a_rows(s) : s->batch * s->K, cols = op == OP_A ? s->K : s->N;
    if (cols % 8 == 0)
        return LOOM_OK;
    padded *d = &p->pad[op];
    d->ld = tpl_pad8(cols);
    /* not zeroed: a run's copy writes all the rows the gemm reads, the padding columns as zeros */
    if (!(d->buf = loom_buffer_create(p->rt, (size_t)(rows * d->ld) * loom_dtype_size(s->dtype))))
        return tpl_fail(p->rt, LOOM_ERR_NOMEM, "loom_gemm_prepare: the padded %s (%lld x %lld): %s", op ? "B" : "A",
                        (long long)rows, (long long)d->ld, loom_runtime_error(p->rt));
    d->k = pad_kernel(op == OP_A ? "gemm_pad_a" : "gemm_pad_b", rows, cols, d->ld, s->dtype);
    if (!d->k)
        return tpl_fail(p->rt, LOOM_ERR_NOMEM, "loom_gemm_prepare: out of memory building the %s copy", op ? "B" : "A");
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
    p->key_m = shape_key(t, "M"), p->key_batch = shape_key(t, "batch");
    if (st == LOOM_OK && (!t->grid_rule || p->key_m < 0 || p->key_batch < 0 || !t->shape[p->key_m].runtime ||
                          !t->shape[p->key_batch].runtime))
        st = tpl_fail(rt, LOOM_ERR_UNSUPPORTED, "loom_gemm_prepare: this gemm template does not take M and batch at "
                                                "run time (no grid rule, or the keys are not run-time)");
    if (st == LOOM_OK)
        t->grid_rule(p->tuned.shape, p->tuned.config, &p->rule);
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

static loom_status check_buf(loom_gemm *p, const char *fn, const loom_buffer *b, const char *name, int64_t elems,
                             loom_dtype dt)
{
    size_t need = (size_t)elems * loom_dtype_size(dt);
    char msg[256];
    if (!b)
        snprintf(msg, sizeof msg, "%s: %s is NULL", fn, name);
    else if (rt_buffer_runtime(b) != p->rt)
        snprintf(msg, sizeof msg, "%s: %s is a buffer of another runtime", fn, name);
    else if (loom_buffer_size(b) < need)
        snprintf(msg, sizeof msg, "%s: %s has %zu bytes; the shape needs %lld %s elements (%zu bytes)", fn, name,
                 loom_buffer_size(b), (long long)elems, loom_dtype_name(dt), need);
    else
        return LOOM_OK;
    return tpl_fail(p->rt, LOOM_ERR_INVALID, "%s", msg);
}

/* A run at M and batch (fn names the caller in messages): the dims and buffers checked,
 * the unaligned operands copied, then the gemm. */
static loom_status run_at(loom_gemm *p, const char *fn, int64_t M, int64_t batch, const loom_buffer *a,
                          const loom_buffer *b, loom_buffer *c)
{
    if (!p)
        return LOOM_ERR_INVALID;
    const loom_gemm_shape *s = &p->s;
    if (M < 1 || M > s->M)
        return tpl_fail(p->rt, LOOM_ERR_INVALID, "%s: M is %lld; this gemm was prepared for M from 1 to %lld", fn,
                        (long long)M, (long long)s->M);
    if (batch < 1 || batch > s->batch)
        return tpl_fail(p->rt, LOOM_ERR_INVALID, "%s: batch is %lld; this gemm was prepared for batch from 1 to %lld",
                        fn, (long long)batch, (long long)s->batch);
    bool bat = s->batch > 1; /* the kernel's B and C are batched (and A, unless shared) */
    int64_t arows = rows_at(s, a_batched(s), M, batch), crows = rows_at(s, bat, M, batch), brows = batch * s->K;
    loom_status st;
    if ((st = check_buf(p, fn, a, "A", arows * s->K, s->dtype)) != LOOM_OK ||
        (st = check_buf(p, fn, b, "B", brows * s->N, s->dtype)) != LOOM_OK ||
        (st = check_buf(p, fn, c, "C", crows * s->N, s->odtype)) != LOOM_OK)
        return st;
    if (c == a || c == b) /* the kernels read A and B while C is written */
        return tpl_fail(p->rt, LOOM_ERR_INVALID, "%s: C is also %s; the output needs a buffer of its own", fn,
                        c == a ? "A" : "B");
    int64_t sh[LOOM_MAX_PARAMS];
    memcpy(sh, p->tuned.shape, sizeof sh);
    sh[p->key_m] = M, sh[p->key_batch] = batch;
    int grid[3];
    if (loom_grid_rule_eval(&p->rule, sh, grid))
        return tpl_fail(p->rt, LOOM_ERR_INVALID, "%s: M=%lld batch=%lld: the grid is out of range", fn, (long long)M,
                        (long long)batch);
    const loom_buffer *src[NOPS] = {a, b};
    const int64_t rows[NOPS] = {arows, brows};
    loom_arg args[5] = {LOOM_ARG_I32((int32_t)M), LOOM_ARG_I32((int32_t)batch)};
    for (int op = 0; op < NOPS; op++) {
        const padded *d = &p->pad[op];
        args[2 + op] = LOOM_ARG_BUF((loom_buffer *)(d->k ? d->buf : src[op]));
        if (!d->k)
            continue;
        int pg[3];
        pad_grid(rows[op], d->ld, pg);
        loom_arg pa[3] = {LOOM_ARG_I32((int32_t)rows[op]), LOOM_ARG_BUF((loom_buffer *)src[op]), LOOM_ARG_BUF(d->buf)};
        if ((st = loom_launch(p->rt, d->k, pg, pa, 3)) != LOOM_OK)
            return st;
    }
    args[4] = LOOM_ARG_BUF(c);
    return loom_launch(p->rt, p->tuned.kernel, grid, args, 5);
}

loom_status loom_gemm_run(loom_gemm *p, const loom_buffer *a, const loom_buffer *b, loom_buffer *c)
{
    return p ? run_at(p, "loom_gemm_run", p->s.M, p->s.batch, a, b, c) : LOOM_ERR_INVALID;
}

loom_status loom_gemm_run_at(loom_gemm *p, int64_t M, int64_t batch, const loom_buffer *a, const loom_buffer *b,
                             loom_buffer *c)
{
    return run_at(p, "loom_gemm_run_at", M, batch, a, b, c);
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
