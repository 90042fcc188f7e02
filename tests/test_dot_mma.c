/*
 * test_dot_mma.c -- loom_dot on the tensor cores (issue 42, item 1): an f16 or bf16 dot
 * whose shape is made of m16n8k16 steps, or an FP8 one (e4m3 / e5m2 in any mix) made of
 * m16n8k32 steps, lowers to mma.sync (codegen/lower_mma.c), any other to SIMT FMA, and
 * LOOM_EXPLAIN / loom_kernel_explain says which, with the dot's line and, for a fallback,
 * why.
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
 *     fallback is the interpreter's bit for bit.  FP8's tensor cores add with fewer bits
 *     (docs/checks.md, "FP8"): the GPU within loom_fp8_mma_sum_error(K + 1, mag) of the
 *     exact sum, the interpreter within the f32 bound of it.  The FP8 cases run again
 *     with integer inputs in [-2, 2] (C0 in [-8, 8]): every partial sum is a small
 *     integer, exact in any order and precision of adds, so the GPU must give the exact
 *     sum, which a misplaced fragment element fails however small.
 *
 * The FP8 fragment layouts (m16n8k32: four bytes of consecutive k a register) cannot be
 * checked on the interpreter, which runs the dot as its definition; the compiled cases
 * (masked, padded and odd shapes, both FP8 types and both mixed pairs, B as [K, N] and as
 * the trans of an [N, K] tile) are why dot_mma_gpu exists.
 */
#include "testutil.h"

#include "t_model.h"

#include <math.h>

/* How A and B reach the dot. */
enum {
    FORM_PLAIN, /* loaded tiles of the dot's dtype */
    FORM_CAST,  /* A loaded as f32 and cast (its f32 registers are packed straight) */
    FORM_TRANS, /* B stored [N, K], loaded [BN, BK] and transposed (attention's K^T) */
    FORM_MASK,  /* A loaded with a mask, k <= m (causal), zeros above the diagonal */
};

typedef struct dcase {
    const char *name;
    loom_dtype dt;
    int64_t M, N, K;   /* the tensors */
    int bm, bn, bk;    /* a program's tile; bk < K: a loop over K */
    int warps, form;
    const char *why;   /* NULL: on the tensor cores; else the fallback's reason, in part */
    bool mix;          /* FP8: B is the other FP8 type */
} dcase;

static const dcase cases[] = {
    {"f16_64x64x32", LOOM_F16, 128, 128, 32, 64, 64, 32, 4, FORM_PLAIN, NULL, false},
    {"bf16_64x64x32", LOOM_BF16, 128, 128, 32, 64, 64, 32, 4, FORM_PLAIN, NULL, false},
    {"f16_128x128x64_w4", LOOM_F16, 128, 256, 64, 128, 128, 64, 4, FORM_PLAIN, NULL, false},
    {"bf16_128x128x64_w8", LOOM_BF16, 256, 128, 64, 128, 128, 64, 8, FORM_PLAIN, NULL, false},
    {"f16_loop_over_k", LOOM_F16, 64, 128, 256, 64, 64, 32, 4, FORM_PLAIN, NULL, false},
    {"bf16_loop_over_k_w2", LOOM_BF16, 96, 64, 192, 32, 64, 64, 2, FORM_PLAIN, NULL, false},
    {"f16_cast_a", LOOM_F16, 64, 64, 64, 64, 64, 32, 4, FORM_CAST, NULL, false},
    {"bf16_trans_b", LOOM_BF16, 64, 128, 64, 64, 64, 64, 4, FORM_TRANS, NULL, false},
    {"f16_16x8x16_w4", LOOM_F16, 32, 16, 16, 16, 8, 16, 4, FORM_PLAIN, NULL, false},
    {"f16_48x40x16_padded", LOOM_F16, 48, 80, 32, 48, 40, 16, 4, FORM_PLAIN, NULL, false},
    {"f16_k24_falls_back", LOOM_F16, 64, 64, 48, 32, 32, 24, 4, FORM_PLAIN, "32x32x24 is not made of m16n8k16 steps",
     false},
    {"f16_m24_falls_back", LOOM_F16, 48, 64, 32, 24, 32, 32, 4, FORM_PLAIN, "24x32x32 is not made of m16n8k16 steps",
     false},
    {"f32_falls_back", LOOM_F32, 64, 64, 32, 32, 32, 16, 4, FORM_PLAIN, "its operands are f32", false},
    /* FP8: mma.sync m16n8k32 */
    {"fp8_e4m3_64x64x64", LOOM_E4M3, 128, 128, 64, 64, 64, 64, 4, FORM_PLAIN, NULL, false},
    {"fp8_e5m2_trans_b", LOOM_E5M2, 64, 128, 128, 64, 64, 64, 4, FORM_TRANS, NULL, false},
    {"fp8_e4m3_e5m2_loop_over_k", LOOM_E4M3, 64, 128, 256, 64, 64, 64, 4, FORM_PLAIN, NULL, true},
    {"fp8_e5m2_e4m3_128x128x128_w8", LOOM_E5M2, 256, 128, 128, 128, 128, 128, 8, FORM_TRANS, NULL, true},
    {"fp8_e4m3_16x8x32_w4", LOOM_E4M3, 32, 16, 32, 16, 8, 32, 4, FORM_PLAIN, NULL, false},
    {"fp8_e4m3_48x40x32_padded", LOOM_E4M3, 48, 80, 64, 48, 40, 32, 4, FORM_PLAIN, NULL, false},
    {"fp8_e5m2_odd_tensor_100x72x80", LOOM_E5M2, 100, 72, 80, 64, 32, 32, 4, FORM_TRANS, NULL, false},
    {"fp8_e4m3_masked_a_w2", LOOM_E4M3, 96, 64, 96, 32, 64, 32, 2, FORM_MASK, NULL, false},
    {"fp8_e4m3_k24_falls_back", LOOM_E4M3, 64, 64, 48, 32, 32, 24, 4, FORM_PLAIN,
     "32x32x24 is not made of m16n8k16 steps", false},
};
#define NCASES ((int)(sizeof cases / sizeof *cases))

static loom_src dot_at; /* the dot's line, as loom_dot records it */

/* B's dtype: A's, or for a mixed FP8 pair the other FP8 type. */
static loom_dtype bdt_of(const dcase *c)
{
    return !c->mix ? c->dt : c->dt == LOOM_E4M3 ? LOOM_E5M2 : LOOM_E4M3;
}

static bool is_fp8(const dcase *c) { return c->dt == LOOM_E4M3 || c->dt == LOOM_E5M2; }

static loom_kernel *build(const dcase *c)
{
    loom_kernel *k = loom_kernel_create(c->name, c->warps);
    loom_dtype adt = c->form == FORM_CAST ? LOOM_F32 : c->dt, bdt = bdt_of(c);
    loom_val A = loom_arg_tensor(k, "A", adt, LOOM_SHAPE2(c->M, c->K), LOOM_IN);
    loom_val B = c->form == FORM_TRANS ? loom_arg_tensor(k, "B", bdt, LOOM_SHAPE2(c->N, c->K), LOOM_IN)
                                       : loom_arg_tensor(k, "B", bdt, LOOM_SHAPE2(c->K, c->N), LOOM_IN);
    loom_val C0 = loom_arg_tensor(k, "C0", LOOM_F32, LOOM_SHAPE2(c->M, c->N), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F32, LOOM_SHAPE2(c->M, c->N), LOOM_OUT);
    loom_val m0 = loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, c->bm));
    loom_val n0 = loom_mul(k, loom_program_id(k, 1), loom_const_i(k, LOOM_I32, c->bn));
    loom_val acc = loom_load(k, C0, ((loom_val[]){m0, n0}), LOOM_SHAPE2(c->bm, c->bn), LOOM_NONE, 0.0);
    loom_region_op l = loom_for_begin(k, loom_const_i(k, LOOM_I32, 0), loom_const_i(k, LOOM_I32, c->K),
                                      loom_const_i(k, LOOM_I32, c->bk), 1, &acc);
    loom_val kk = loom_for_iv(k, l);
    loom_val mask = LOOM_NONE;
    if (c->form == FORM_MASK) { /* kk + j <= m0 + i */
        loom_val i = loom_add(k, loom_expand_dims(k, loom_arange(k, 0, c->bm), 1), m0);
        loom_val j = loom_add(k, loom_expand_dims(k, loom_arange(k, 0, c->bk), 0), kk);
        mask = loom_cmp(k, LOOM_LE, loom_broadcast(k, j, LOOM_SHAPE2(c->bm, c->bk)),
                        loom_broadcast(k, i, LOOM_SHAPE2(c->bm, c->bk)));
    }
    loom_val a = loom_load(k, A, ((loom_val[]){m0, kk}), LOOM_SHAPE2(c->bm, c->bk), mask, 0.0);
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

/* An integer in [-r, r]. */
static double irnd(unsigned *s, int r)
{
    *s = *s * 1103515245u + 12345u;
    return (double)((int)((*s >> 8) % (unsigned)(2 * r + 1)) - r);
}

/* Inputs in [-1, 1) (rounded to the tensors' types), or with ints integers in [-2, 2]
 * and C0 in [-8, 8], whose sums are exact in any order. */
static data make(const dcase *c, unsigned seed, bool ints)
{
    data d = {0};
    loom_dtype adt = c->form == FORM_CAST ? LOOM_F32 : c->dt, bdt = bdt_of(c);
    int64_t M = c->M, N = c->N, K = c->K;
    d.abytes = (size_t)(M * K) * loom_dtype_size(adt);
    d.bbytes = (size_t)(K * N) * loom_dtype_size(bdt);
    d.cbytes = (size_t)(M * N) * 4;
    d.a = malloc(d.abytes), d.b = malloc(d.bbytes), d.c0 = malloc(d.cbytes), d.seq = malloc(d.cbytes);
    d.ref = malloc((size_t)(M * N) * sizeof(double)), d.mag = malloc((size_t)(M * N) * sizeof(double));
    cr_assert(d.a && d.b && d.c0 && d.seq && d.ref && d.mag);
    for (int64_t i = 0; i < M * K; i++)
        tpl_set(d.a, adt, i, ints ? irnd(&seed, 2) : rnd(&seed));
    for (int64_t i = 0; i < K * N; i++)
        tpl_set(d.b, bdt, i, ints ? irnd(&seed, 2) : rnd(&seed));
    for (int64_t i = 0; i < M * N; i++)
        d.c0[i] = (float)(ints ? irnd(&seed, 8) : 4 * rnd(&seed));
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float s = d.c0[m * N + n];
            double r = s, g = fabs(r);
            for (int64_t x = 0; x < K; x++) {
                double av = tpl_round(c->dt, tpl_get(d.a, adt, m * K + x)); /* FORM_CAST rounds A */
                if (c->form == FORM_MASK && x > m)
                    av = 0;
                double bv = tpl_get(d.b, bdt, c->form == FORM_TRANS ? n * K + x : x * N + n);
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
    grid[0] = (int)((c->M + c->bm - 1) / c->bm), grid[1] = (int)((c->N + c->bn - 1) / c->bn), grid[2] = 1;
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
 * dot (all of them up to 4, else a loop of one or two a trip). */
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
    int tiles = (pm / 16) * (pn / 8), steps = c->bk / 16; /* FP8 at sm_90a: f16 */
    if (steps > 4) /* a loop, two steps a trip where their count is even */
        steps = steps % 2 ? 1 : 2;
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
    char insn[256];
    const char *t = loom_dtype_name(c->dt), *tb = loom_dtype_name(bdt_of(c));
    /* sm_90a has no FP8 mma.sync of its own: an FP8 dot is an f16 dot of the same values */
    snprintf(insn, sizeof insn, "mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32", is_fp8(c) ? "f16" : t,
             is_fp8(c) ? "f16" : tb);
    if (!c->why) {
        cr_expect_eq(t_count(ptx, insn), mma_count(c), "%s: %d %s, want %d", c->name, t_count(ptx, insn), insn,
                     mma_count(c));
        cr_expect(strstr(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"), "%s: no ldmatrix for A", c->name);
        cr_expect(strstr(ptx, ".trans.shared.b16"), "%s: no ldmatrix.trans for B", c->name);
        if (is_fp8(c) && c->form == FORM_PLAIN) /* the loads' f16x2 decodes stored as they are: no repacking */
            cr_expect_eq(t_count(ptx, "cvt.rn.f16x2.f32"), 0, "%s: FP8 packed again through f32", c->name);
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
        if (is_fp8(c))
            snprintf(insn, sizeof insn,
                     "a dot on the tensor cores (mma.sync m16n8k16 in f16: sm_90a has no FP8 mma.sync of its own): A "
                     "and B staged as f16, from %s and %s (exact)",
                     t, tb);
        else
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
        data d = make(c, 7u + (unsigned)i, false);
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

/* An FP8 dot needs sm_89 (mma.sync m16n8k32 in e4m3 / e5m2, and the conversions sm_90a's
 * path makes): at sm_80 it falls back and says why; at sm_89 it runs on the FP8 mma.sync
 * itself, and ptxas takes it for that target. */
Test(dot_mma, fp8_needs_sm_89)
{
    const dcase *c = NULL;
    for (int i = 0; i < NCASES && !c; i++)
        if (!strcmp(cases[i].name, "fp8_e4m3_e5m2_loop_over_k"))
            c = &cases[i];
    cr_assert(c);
    loom_kernel *k = build(c);
    report r = {0};
    char err[4096], *text = NULL, *ptx = NULL;
    size_t smem = 0;
    cr_assert_eq(loom_kernel_explain(k, "sm_80", on_cost, &r, &text, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect(strstr(r.dot, "not the tensor cores (the target sm_80 is older than sm_89 (mma.sync m16n8k32"), "%s",
              text);
    cr_assert_eq(loom_compile_ptx(k, "sm_80", &ptx, &smem, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect_eq(t_count(ptx, "mma.sync"), 0);
    free(ptx);
    free(text);
    r = (report){0};
    cr_assert_eq(loom_kernel_explain(k, "sm_89", on_cost, &r, &text, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect(strstr(r.dot, "a dot on the tensor cores (mma.sync m16n8k32): A staged as e4m3, B as e5m2, transposed "
                            "(K-major)"),
              "%s", text);
    cr_assert_eq(loom_compile_ptx(k, "sm_89", &ptx, &smem, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect_eq(t_count(ptx, "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32"), mma_count(c) / 2); /* k32 */
    cr_expect(strstr(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"), "no ldmatrix for A");
    cr_expect(!strstr(ptx, ".trans.shared.b16"), "FP8's B is staged K-major: no ldmatrix.trans");
    cr_expect(strstr(ptx, ".version 8.4"), "FP8 mma.sync needs PTX ISA 8.4");
    t_ptxas_ok(ptx, "sm_89", c->name);
    free(ptx);
    free(text);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- on the GPU */

/* Case c on the GPU and the interpreter; ints: integer inputs (FP8 only), whose sums the
 * GPU must give exactly. */
static void check_gpu(loom_runtime *gpu, loom_runtime *cpu, const dcase *c, unsigned seed, bool ints)
{
    data d = make(c, seed, ints);
    float *g = malloc(d.cbytes), *s = malloc(d.cbytes);
    loom_kernel *k = build(c);
    run_on(gpu, k, c, &d, g);
    run_on(cpu, k, c, &d, s);
    t_verdict vs = T_VERDICT_INIT, ve = T_VERDICT_INIT;
    int64_t same = 0, n = c->M * c->N;
    bool fp8 = is_fp8(c) && !c->why;
    for (int64_t e = 0; e < n; e++) {
        double bi = loom_f32_sum_error(c->K + 1, d.mag[e]); /* the interpreter's: f32 adds */
        double bg = ints ? 0 : fp8 ? loom_fp8_mma_sum_error(c->K + 1, d.mag[e]) : bi; /* the GPU's */
        t_verdict_add(&vs, e, g[e], s[e], bg + bi);
        t_verdict_add(&ve, e, g[e], d.ref[e], bg);
        same += t_same_f32(g[e], s[e]);
    }
    const char *how = ints ? " (integer inputs: exact)" : "";
    if (c->why) /* SIMT FMA: the interpreter's order */
        cr_expect_eq(same, n, "%s falls back to FMA, but %lld of %lld elements differ from the interpreter's", c->name,
                     (long long)(n - same), (long long)n);
    cr_expect_eq(vs.bad, 0, "%s%s: %lld elements past the bound against the interpreter; first [%lld]: %.9g vs %.9g "
                 "(bound %.3g)", c->name, how, (long long)vs.bad, (long long)vs.first, vs.got, vs.ref, vs.bound);
    cr_expect_eq(ve.bad, 0, "%s%s: %lld elements past the bound against the exact sum; first [%lld]: %.9g vs %.9g "
                 "(bound %.3g)", c->name, how, (long long)ve.bad, (long long)ve.first, ve.got, ve.ref, ve.bound);
    cr_log_info("%s%s: worst |gpu - interpreter| / bound %.3g, %lld of %lld elements bit for bit", c->name, how,
                vs.worst, (long long)same, (long long)n);
    loom_kernel_destroy(k);
    free(g), free(s);
    drop(&d);
}

Test(dot_mma_gpu, matches_the_interpreter_by_the_error_model)
{
    loom_runtime *gpu = t_gpu_or_skip();
    loom_runtime *cpu = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    for (int i = 0; i < NCASES; i++)
        if (!is_fp8(&cases[i]))
            check_gpu(gpu, cpu, &cases[i], 100u + (unsigned)i, false);
    loom_runtime_destroy(cpu);
    loom_runtime_destroy(gpu);
}

/* The FP8 cases (mma.sync m16n8k32): random inputs by the FP8 bound, integer inputs
 * exactly. */
Test(dot_mma_gpu, fp8_matches_the_exact_sum)
{
    loom_runtime *gpu = t_gpu_or_skip();
    loom_runtime *cpu = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    for (int i = 0; i < NCASES; i++)
        if (is_fp8(&cases[i])) {
            check_gpu(gpu, cpu, &cases[i], 100u + (unsigned)i, false);
            check_gpu(gpu, cpu, &cases[i], 200u + (unsigned)i, true);
        }
    loom_runtime_destroy(cpu);
    loom_runtime_destroy(gpu);
}
