/*
 * test_dot_mma.c -- loom_dot on the tensor cores (issue 42, item 1): an f16 or bf16 dot
 * whose shape is made of m16n8k16 steps lowers to mma.sync (codegen/lower_mma.c), any
 * other to SIMT FMA, and LOOM_EXPLAIN / loom_kernel_explain says which, with the dot's
 * line and, for a fallback, why.
 *
 * Each case is a plain kernel: C = C0 + A @ B over tiles of [M, N], the accumulator
 * started from a loaded C0 tile (the dot's acc operand), one dot a program or a loop over
 * K (not warp-specialized).  Checked:
 *   - the PTX has one mma.sync a warp's 16x8 tile and k16 step where the dot is on the
 *     tensor cores, none (and SIMT fma) where it falls back; ptxas takes it without
 *     spills; the explain report names the dot's line, what it runs on and, for a
 *     fallback, the reason, and has no layout conversion;
 *   - the interpreter's result is its definition, unchanged: fma over k in order from C0,
 *     bit for bit against the same loop written here;
 *   - (dot_mma_gpu, skipped without a GPU) the GPU's result against the interpreter's,
 *     element by element, by the error model (docs/checks.md): each is an f32 sum of K + 1
 *     exact terms (C0 and the products) whose magnitudes sum to mag, within
 *     gamma_(K+1) mag of the exact value, so they differ by at most twice that; a
 *     fallback is the interpreter's bit for bit.
 */
#include "testutil.h"

#include "t_model.h"

#include <math.h>

/* How A and B reach the dot. */
enum {
    FORM_PLAIN, /* loaded tiles of the dot's dtype */
    FORM_CAST,  /* A loaded as f32 and cast (its f32 registers are packed straight) */
    FORM_TRANS, /* B stored [N, K], loaded [BN, BK] and transposed (attention's K^T) */
};

typedef struct dcase {
    const char *name;
    loom_dtype dt;
    int64_t M, N, K;   /* the tensors */
    int bm, bn, bk;    /* a program's tile; bk < K: a loop over K */
    int warps, form;
    const char *why;   /* NULL: on the tensor cores; else the fallback's reason, in part */
} dcase;

static const dcase cases[] = {
    {"f16_64x64x32", LOOM_F16, 128, 128, 32, 64, 64, 32, 4, FORM_PLAIN, NULL},
    {"bf16_64x64x32", LOOM_BF16, 128, 128, 32, 64, 64, 32, 4, FORM_PLAIN, NULL},
    {"f16_128x128x64_w4", LOOM_F16, 128, 256, 64, 128, 128, 64, 4, FORM_PLAIN, NULL},
    {"bf16_128x128x64_w8", LOOM_BF16, 256, 128, 64, 128, 128, 64, 8, FORM_PLAIN, NULL},
    {"f16_loop_over_k", LOOM_F16, 64, 128, 256, 64, 64, 32, 4, FORM_PLAIN, NULL},
    {"bf16_loop_over_k_w2", LOOM_BF16, 96, 64, 192, 32, 64, 64, 2, FORM_PLAIN, NULL},
    {"f16_cast_a", LOOM_F16, 64, 64, 64, 64, 64, 32, 4, FORM_CAST, NULL},
    {"bf16_trans_b", LOOM_BF16, 64, 128, 64, 64, 64, 64, 4, FORM_TRANS, NULL},
    {"f16_16x8x16_w4", LOOM_F16, 32, 16, 16, 16, 8, 16, 4, FORM_PLAIN, NULL},
    {"f16_48x40x16_padded", LOOM_F16, 48, 80, 32, 48, 40, 16, 4, FORM_PLAIN, NULL},
    {"f16_k24_falls_back", LOOM_F16, 64, 64, 48, 32, 32, 24, 4, FORM_PLAIN, "32x32x24 is not made of m16n8k16 steps"},
    {"f16_m24_falls_back", LOOM_F16, 48, 64, 32, 24, 32, 32, 4, FORM_PLAIN, "24x32x32 is not made of m16n8k16 steps"},
    {"f32_falls_back", LOOM_F32, 64, 64, 32, 32, 32, 16, 4, FORM_PLAIN, "its operands are f32"},
};
#define NCASES ((int)(sizeof cases / sizeof *cases))

static loom_src dot_at; /* the dot's line, as loom_dot records it */

static loom_kernel *build(const dcase *c)
{
    loom_kernel *k = loom_kernel_create(c->name, c->warps);
    loom_dtype adt = c->form == FORM_CAST ? LOOM_F32 : c->dt;
    loom_val A = loom_arg_tensor(k, "A", adt, LOOM_SHAPE2(c->M, c->K), LOOM_IN);
    loom_val B = c->form == FORM_TRANS ? loom_arg_tensor(k, "B", c->dt, LOOM_SHAPE2(c->N, c->K), LOOM_IN)
                                       : loom_arg_tensor(k, "B", c->dt, LOOM_SHAPE2(c->K, c->N), LOOM_IN);
    loom_val C0 = loom_arg_tensor(k, "C0", LOOM_F32, LOOM_SHAPE2(c->M, c->N), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F32, LOOM_SHAPE2(c->M, c->N), LOOM_OUT);
    loom_val m0 = loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, c->bm));
    loom_val n0 = loom_mul(k, loom_program_id(k, 1), loom_const_i(k, LOOM_I32, c->bn));
    loom_val acc = loom_load(k, C0, ((loom_val[]){m0, n0}), LOOM_SHAPE2(c->bm, c->bn), LOOM_NONE, 0.0);
    loom_region_op l = loom_for_begin(k, loom_const_i(k, LOOM_I32, 0), loom_const_i(k, LOOM_I32, c->K),
                                      loom_const_i(k, LOOM_I32, c->bk), 1, &acc);
    loom_val kk = loom_for_iv(k, l);
    loom_val a = loom_load(k, A, ((loom_val[]){m0, kk}), LOOM_SHAPE2(c->bm, c->bk), LOOM_NONE, 0.0);
    if (c->form == FORM_CAST)
        a = loom_cast(k, a, c->dt);
    loom_val b = c->form == FORM_TRANS
                     ? loom_trans(k, loom_load(k, B, ((loom_val[]){n0, kk}), LOOM_SHAPE2(c->bn, c->bk), LOOM_NONE, 0.0))
                     : loom_load(k, B, ((loom_val[]){kk, n0}), LOOM_SHAPE2(c->bk, c->bn), LOOM_NONE, 0.0);
    dot_at = LOOM_HERE;
    loom_val d = loom_dot_at(dot_at, k, a, b, loom_for_arg(k, l, 0));
    loom_for_end(k, l, 1, &d);
    loom_store(k, C, ((loom_val[]){m0, n0}), loom_for_result(k, l, 0), LOOM_NONE);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s: %s", c->name, loom_kernel_errors(k));
    return k;
}

/* ---------------------------------------------------------------- host data */

typedef struct data {
    void *a, *b;      /* as the kernel's tensors hold them */
    float *c0;
    double *ref, *mag; /* C0 + A @ B in double, |C0| + sum |a b| */
    float *seq;       /* fmaf over k in order from C0: the interpreter's definition */
    size_t abytes, bbytes, cbytes;
} data;

static double rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (double)((*s >> 8) % 2001) / 1000.0 - 1.0;
}

static data make(const dcase *c, unsigned seed)
{
    data d = {0};
    loom_dtype adt = c->form == FORM_CAST ? LOOM_F32 : c->dt;
    int64_t M = c->M, N = c->N, K = c->K;
    d.abytes = (size_t)(M * K) * loom_dtype_size(adt);
    d.bbytes = (size_t)(K * N) * loom_dtype_size(c->dt);
    d.cbytes = (size_t)(M * N) * 4;
    d.a = malloc(d.abytes), d.b = malloc(d.bbytes), d.c0 = malloc(d.cbytes), d.seq = malloc(d.cbytes);
    d.ref = malloc((size_t)(M * N) * sizeof(double)), d.mag = malloc((size_t)(M * N) * sizeof(double));
    cr_assert(d.a && d.b && d.c0 && d.seq && d.ref && d.mag);
    for (int64_t i = 0; i < M * K; i++)
        tpl_set(d.a, adt, i, rnd(&seed));
    for (int64_t i = 0; i < K * N; i++)
        tpl_set(d.b, c->dt, i, rnd(&seed));
    for (int64_t i = 0; i < M * N; i++)
        d.c0[i] = (float)(4 * rnd(&seed));
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float s = d.c0[m * N + n];
            double r = s, g = fabs(r);
            for (int64_t x = 0; x < K; x++) {
                double av = tpl_round(c->dt, tpl_get(d.a, adt, m * K + x)); /* FORM_CAST rounds A */
                double bv = tpl_get(d.b, c->dt, c->form == FORM_TRANS ? n * K + x : x * N + n);
                s = fmaf((float)av, (float)bv, s);
                r += av * bv;
                g += fabs(av * bv);
            }
            d.seq[m * N + n] = s, d.ref[m * N + n] = r, d.mag[m * N + n] = g;
        }
    return d;
}

static void drop(data *d)
{
    free(d->a), free(d->b), free(d->c0), free(d->seq), free(d->ref), free(d->mag);
}

static void grid_of(const dcase *c, int *grid)
{
    grid[0] = (int)(c->M / c->bm), grid[1] = (int)(c->N / c->bn), grid[2] = 1;
}

/* Run k on rt with d's inputs; C comes back in out. */
static void run_on(loom_runtime *rt, loom_kernel *k, const dcase *c, const data *d, float *out)
{
    const void *host[4] = {d->a, d->b, d->c0, NULL};
    size_t bytes[4] = {d->abytes, d->bbytes, d->cbytes, d->cbytes};
    loom_buffer *buf[4];
    loom_arg args[4];
    for (int i = 0; i < 4; i++) {
        buf[i] = loom_buffer_create(rt, bytes[i]);
        cr_assert(buf[i], "%s", loom_runtime_error(rt));
        if (host[i])
            cr_assert_eq(loom_buffer_upload(buf[i], host[i], bytes[i]), LOOM_OK);
        args[i] = LOOM_ARG_BUF(buf[i]);
    }
    int grid[3];
    grid_of(c, grid);
    loom_status st = loom_launch(rt, k, grid, args, 4);
    cr_assert_eq(st, LOOM_OK, "%s: %s", c->name, loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_download(buf[3], out, d->cbytes), LOOM_OK);
    for (int i = 0; i < 4; i++)
        loom_buffer_destroy(buf[i]);
}

/* ---------------------------------------------------------------- the compiled kernel */

/* mma.sync instructions the PTX has for case c: each warp's tiles (the warps split the
 * 16x8 tiles of the padded tile, warps beyond them duplicate) times the k16 steps of one
 * dot (all of them are unrolled up to 4). */
static int mma_count(const dcase *c)
{
    int w = 1;
    while (2 * w <= c->warps)
        w *= 2;
    int pm = 16, pn = 8; /* the tile's dims padded to powers of two, as its layout is */
    while (pm < c->bm)
        pm *= 2;
    while (pn < c->bn)
        pn *= 2;
    int tiles = (pm / 16) * (pn / 8), steps = c->bk / 16;
    return (tiles > w ? tiles / w : 1) * steps;
}

typedef struct report {
    int convert, scratch;
    char dot[1024]; /* the dot's line of text */
} report;

static void on_cost(void *ctx, const loom_cost *cost)
{
    report *r = ctx;
    if (cost->kind == LOOM_COST_CONVERT)
        r->convert++;
    if (cost->kind == LOOM_COST_SCRATCH) {
        r->scratch++;
        if (!strcmp(cost->op, "dot"))
            snprintf(r->dot, sizeof r->dot, "%s", cost->text);
    }
}

static void check_compiled(const dcase *c)
{
    loom_kernel *k = build(c);
    char *ptx = NULL, err[4096];
    size_t smem = 0;
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, &smem, err, sizeof err), LOOM_OK, "%s: %s", c->name, err);
    char insn[96];
    const char *t = c->dt == LOOM_BF16 ? "bf16" : "f16";
    snprintf(insn, sizeof insn, "mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32", t, t);
    if (!c->why) {
        cr_expect_eq(t_count(ptx, insn), mma_count(c), "%s: %d %s, want %d", c->name, t_count(ptx, insn), insn,
                     mma_count(c));
        cr_expect(strstr(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"), "%s: no ldmatrix for A", c->name);
        cr_expect(strstr(ptx, ".trans.shared.b16"), "%s: no ldmatrix.trans for B", c->name);
    } else {
        cr_expect_eq(t_count(ptx, "mma.sync"), 0, "%s falls back, but its PTX has mma.sync", c->name);
        cr_expect(strstr(ptx, "fma.rn.f32"), "%s: no SIMT fma", c->name);
    }
    t_ptxas_ok(ptx, "sm_90a", c->name);
    free(ptx);

    report r = {0};
    char *text = NULL;
    cr_assert_eq(loom_kernel_explain(k, "sm_90a", on_cost, &r, &text, err, sizeof err), LOOM_OK, "%s", err);
    char at[256];
    snprintf(at, sizeof at, "%s:%d: dot: ", dot_at.file, dot_at.line);
    cr_expect(strstr(r.dot, at), "%s: the dot's line is not %s:\n%s", c->name, at, text);
    if (!c->why) {
        snprintf(insn, sizeof insn, "a dot on the tensor cores (mma.sync m16n8k16): A and B staged as %s", t);
        cr_expect(strstr(r.dot, insn), "%s:\n%s", c->name, text);
    } else {
        cr_expect(strstr(r.dot, "a dot on SIMT FMA, not the tensor cores") && strstr(r.dot, c->why), "%s:\n%s",
                  c->name, text);
    }
    /* C0 is loaded in the layout the dot wants it in: nothing converted */
    cr_expect_eq(r.convert, 0, "%s:\n%s", c->name, text);
    cr_expect_eq(r.scratch, 1, "%s:\n%s", c->name, text);
    free(text);
    loom_kernel_destroy(k);
}

OP_COVERED(dot)
Test(dot_mma, tensor_cores_where_the_shape_allows_fma_elsewhere)
{
    for (int i = 0; i < NCASES; i++)
        check_compiled(&cases[i]);
}

Test(dot_mma, interpreter_sums_in_k_order)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    for (int i = 0; i < NCASES; i++) {
        const dcase *c = &cases[i];
        data d = make(c, 7u + (unsigned)i);
        float *out = malloc(d.cbytes);
        loom_kernel *k = build(c);
        run_on(rt, k, c, &d, out);
        for (int64_t e = 0; e < c->M * c->N; e++)
            cr_assert(t_same_f32(out[e], d.seq[e]), "%s [%lld]: %.9g, fma in k order gives %.9g", c->name,
                      (long long)e, out[e], d.seq[e]);
        loom_kernel_destroy(k);
        free(out);
        drop(&d);
    }
    loom_runtime_destroy(rt);
}

/* An f16 dot at sm_75 falls back too, and says why. */
Test(dot_mma, older_targets_fall_back)
{
    loom_kernel *k = build(&cases[0]);
    report r = {0};
    char err[4096], *text = NULL;
    cr_assert_eq(loom_kernel_explain(k, "sm_75", on_cost, &r, &text, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect(strstr(r.dot, "not the tensor cores (the target sm_75 is older than sm_80"), "%s", text);
    char *ptx = NULL;
    size_t smem = 0;
    cr_assert_eq(loom_compile_ptx(k, "sm_75", &ptx, &smem, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect_eq(t_count(ptx, "mma.sync"), 0);
    free(ptx);
    free(text);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- on the GPU */

Test(dot_mma_gpu, matches_the_interpreter_by_the_error_model)
{
    loom_runtime *gpu = t_gpu_or_skip();
    loom_runtime *cpu = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    for (int i = 0; i < NCASES; i++) {
        const dcase *c = &cases[i];
        data d = make(c, 100u + (unsigned)i);
        float *g = malloc(d.cbytes), *s = malloc(d.cbytes);
        loom_kernel *k = build(c);
        run_on(gpu, k, c, &d, g);
        run_on(cpu, k, c, &d, s);
        t_verdict vs = T_VERDICT_INIT, ve = T_VERDICT_INIT;
        int64_t same = 0, n = c->M * c->N;
        for (int64_t e = 0; e < n; e++) {
            double b = loom_f32_sum_error(c->K + 1, d.mag[e]);
            t_verdict_add(&vs, e, g[e], s[e], 2 * b);
            t_verdict_add(&ve, e, g[e], d.ref[e], b);
            same += t_same_f32(g[e], s[e]);
        }
        if (c->why) /* SIMT FMA: the interpreter's order */
            cr_expect_eq(same, n, "%s falls back to FMA, but %lld of %lld elements differ from the interpreter's",
                         c->name, (long long)(n - same), (long long)n);
        cr_expect_eq(vs.bad, 0, "%s: %lld elements past the bound against the interpreter; first [%lld]: %.9g vs %.9g "
                     "(bound %.3g)", c->name, (long long)vs.bad, (long long)vs.first, vs.got, vs.ref, vs.bound);
        cr_expect_eq(ve.bad, 0, "%s: %lld elements past the bound against the exact sum; first [%lld]: %.9g vs %.9g "
                     "(bound %.3g)", c->name, (long long)ve.bad, (long long)ve.first, ve.got, ve.ref, ve.bound);
        cr_log_info("%s: worst |gpu - interpreter| / bound %.3g, %lld of %lld elements bit for bit", c->name,
                    vs.worst, (long long)same, (long long)n);
        loom_kernel_destroy(k);
        free(g), free(s);
        drop(&d);
    }
    loom_runtime_destroy(cpu);
    loom_runtime_destroy(gpu);
}
