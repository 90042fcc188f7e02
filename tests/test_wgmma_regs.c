/*
 * test_wgmma_regs.c -- wgmma with A in registers, and what attention builds around it.
 *
 * The wgmma accumulator layout of S [64, N] (one warp group), cast to f16/bf16, is the
 * A operand layout of an [64, N] A for the next wgmma, each k16 chunk of A a 16-column
 * slice of the accumulator (codegen/layout.c, cg_mma_a_layout).  So attention's
 * P = exp2(S * scale - rowmax) feeds O = P @ V from registers, and the row max and sum
 * of S, broadcast back over its rows, stay in the accumulator layout: each row is held by
 * a quad of threads, reduced in registers and by shuffles within the quad.  Three kernels,
 * each one task of one warp group that brings its shared-memory operands in by TMA:
 *
 *   plain      C = A @ B, A loaded from global memory straight into the A fragment's
 *              layout, B a view: K of one to four k16 chunks (48: padded to 64), two
 *              m64 blocks a warp group, two warp groups, and an A also stored elsewhere,
 *              which wgmma then converts through shared memory;
 *   rowstats   S = Q @ K^T from views, its row max and row sum, and exp2(S - rowmax);
 *   attention  flash attention's forward loop over K/V blocks: S = Q @ K^T, the online
 *              softmax (running max m and sum l, O rescaled by exp2(m_old - m_new)),
 *              O += cast(P) @ V with P from registers, then O / l.
 *
 * Each runs on the interpreter against a double-precision reference; its PTX must have
 * wgmma.mma_async with a register A operand where A is a tile, no st.shared / ld.shared at
 * all (the operands arrive by TMA, the rest never leaves registers; but for the converted
 * A), no conversion scratch in the shared memory it asks for, and ptxas -v must assemble
 * it without spills.  On a
 * GPU (skipped without one) the same kernels are checked against the same references.
 */
#include "ir.h"
#include "testutil.h"

#include <math.h>

#define I32(k, v) loom_const_i(k, LOOM_I32, v)

enum { BM = 64, D = 64, BN = 64 };

/* ---------------------------------------------------------------- kernels */

/* The plain kernels' shapes: A [M, K], B [K, N], `warps` in the task (M / 64 / warp
 * groups m64 blocks a warp group); `copy`: A is also stored to A2.  A store takes any layout,
 * so A is still loaded in the A fragment's layout and stored from it: no conversion
 * (before issue 36's layout work it was loaded in the default layout and wgmma converted
 * it through shared memory). */
typedef struct plain_cfg {
    int64_t M, K, N;
    int warps, copy;
} plain_cfg;

static const plain_cfg plain_cfgs[] = {
    {64, 16, 64, 4, 0},  {64, 64, 64, 4, 0}, {64, 48, 64, 4, 0}, /* K' padded to 64 */
    {128, 32, 64, 4, 0},                                          /* two m64 blocks a group */
    {128, 32, 64, 8, 0},                                          /* two warp groups */
    {64, 32, 64, 4, 1},                                           /* A converted */
};

/* C [M, N] f32 = A [M, K] @ B [K, N]: A from global memory into registers, B by TMA. */
static loom_kernel *plain_kernel(loom_dtype dt, plain_cfg c)
{
    loom_kernel *k = loom_kernel_create("wgmma_regs_plain", c.warps);
    loom_val A = loom_arg_tensor(k, "A", dt, LOOM_SHAPE2(c.M, c.K), LOOM_IN);
    loom_val B = loom_arg_tensor(k, "B", dt, LOOM_SHAPE2(c.K, c.N), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F32, LOOM_SHAPE2(c.M, c.N), LOOM_OUT);
    loom_val A2 = loom_arg_tensor(k, "A2", dt, LOOM_SHAPE2(c.M, c.K), LOOM_OUT);
    loom_val bs = loom_smem_alloc(k, dt, LOOM_SHAPE2(c.K, c.N), 1, LOOM_SWIZZLE_128);
    loom_val full = loom_mbar_alloc(k, 1, 1);
    loom_val z = I32(k, 0);
    loom_region_op t = loom_task_begin(k, c.warps, 0, 1);
    loom_mbar_expect(k, full, z, c.K * c.N * 2);
    loom_tma_load(k, B, ((loom_val[]){z, z}), bs, full, z);
    loom_val a = loom_load(k, A, ((loom_val[]){z, z}), LOOM_SHAPE2(c.M, c.K), LOOM_NONE, 0);
    if (c.copy)
        loom_store(k, A2, ((loom_val[]){z, z}), a, LOOM_NONE);
    loom_mbar_wait(k, full, z, z);
    loom_val acc = loom_wgmma(k, a, bs, loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(c.M, c.N)));
    loom_wgmma_commit(k);
    loom_region_op w = loom_wgmma_wait(k, 0, 1, &acc);
    loom_store(k, C, ((loom_val[]){z, z}), loom_wgmma_result(k, w, 0), LOOM_NONE);
    loom_task_end(k, t);
    return k;
}

/* S = Q [64, D] @ K [BN, D]^T from views; mx = rowmax(S), sm = rowsum(S), E = exp2(S - mx). */
static loom_kernel *rowstats_kernel(loom_dtype dt)
{
    loom_kernel *k = loom_kernel_create("wgmma_regs_rowstats", 4);
    loom_val Q = loom_arg_tensor(k, "Q", dt, LOOM_SHAPE2(BM, D), LOOM_IN);
    loom_val Kt = loom_arg_tensor(k, "K", dt, LOOM_SHAPE2(BN, D), LOOM_IN);
    loom_val MX = loom_arg_tensor(k, "mx", LOOM_F32, LOOM_SHAPE1(BM), LOOM_OUT);
    loom_val SM = loom_arg_tensor(k, "sm", LOOM_F32, LOOM_SHAPE1(BM), LOOM_OUT);
    loom_val E = loom_arg_tensor(k, "E", LOOM_F32, LOOM_SHAPE2(BM, BN), LOOM_OUT);
    loom_val qs = loom_smem_alloc(k, dt, LOOM_SHAPE2(BM, D), 1, LOOM_SWIZZLE_128);
    loom_val ks = loom_smem_alloc(k, dt, LOOM_SHAPE2(BN, D), 1, LOOM_SWIZZLE_128);
    loom_val full = loom_mbar_alloc(k, 1, 1);
    loom_val z = I32(k, 0);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_mbar_expect(k, full, z, (BM + BN) * D * 2);
    loom_tma_load(k, Q, ((loom_val[]){z, z}), qs, full, z);
    loom_tma_load(k, Kt, ((loom_val[]){z, z}), ks, full, z);
    loom_mbar_wait(k, full, z, z);
    loom_val s = loom_wgmma(k, qs, loom_smem_trans(k, ks),
                            loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(BM, BN)));
    loom_wgmma_commit(k);
    loom_region_op w = loom_wgmma_wait(k, 0, 1, &s);
    s = loom_wgmma_result(k, w, 0);
    loom_val mx = loom_reduce_max(k, s, 1);
    loom_val sm = loom_reduce_sum(k, s, 1);
    loom_val mxb = loom_broadcast(k, loom_expand_dims(k, mx, 1), LOOM_SHAPE2(BM, BN));
    loom_store(k, MX, ((loom_val[]){z}), mx, LOOM_NONE);
    loom_store(k, SM, ((loom_val[]){z}), sm, LOOM_NONE);
    loom_store(k, E, ((loom_val[]){z, z}), loom_exp2(k, loom_sub(k, s, mxb)), LOOM_NONE);
    loom_task_end(k, t);
    return k;
}

/* O [M, D] f32 = softmax(Q K^T / sqrt(D)) V, one 64-row block of Q a program, K and V
 * [Nk, D] in blocks of BN rows, with the online softmax in base 2. */
static loom_kernel *attention_kernel(loom_dtype dt, int64_t M, int64_t Nk)
{
    loom_kernel *k = loom_kernel_create("wgmma_regs_attention", 4);
    loom_val Q = loom_arg_tensor(k, "Q", dt, LOOM_SHAPE2(M, D), LOOM_IN);
    loom_val Kt = loom_arg_tensor(k, "K", dt, LOOM_SHAPE2(Nk, D), LOOM_IN);
    loom_val V = loom_arg_tensor(k, "V", dt, LOOM_SHAPE2(Nk, D), LOOM_IN);
    loom_val O = loom_arg_tensor(k, "O", LOOM_F32, LOOM_SHAPE2(M, D), LOOM_OUT);
    loom_val qs = loom_smem_alloc(k, dt, LOOM_SHAPE2(BM, D), 1, LOOM_SWIZZLE_128);
    loom_val ks = loom_smem_alloc(k, dt, LOOM_SHAPE2(BN, D), 1, LOOM_SWIZZLE_128);
    loom_val vs = loom_smem_alloc(k, dt, LOOM_SHAPE2(BN, D), 1, LOOM_SWIZZLE_128);
    loom_val qbar = loom_mbar_alloc(k, 1, 1), kvbar = loom_mbar_alloc(k, 1, 1);
    loom_val z = I32(k, 0), one = I32(k, 1);
    loom_region_op t = loom_task_begin(k, 4, 0, 1);
    loom_val m0 = loom_mul(k, loom_program_id(k, 0), I32(k, BM));
    loom_mbar_expect(k, qbar, z, BM * D * 2);
    loom_tma_load(k, Q, ((loom_val[]){m0, z}), qs, qbar, z);
    loom_mbar_wait(k, qbar, z, z);
    loom_val scale = loom_const_f(k, LOOM_F32, 1.4426950408889634 / sqrt((double)D));
    loom_val init[3] = {loom_splat(k, loom_const_f(k, LOOM_F32, -INFINITY), LOOM_SHAPE1(BM)),
                        loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE1(BM)),
                        loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(BM, D))};
    loom_region_op f = loom_for_begin(k, z, I32(k, Nk / BN), one, 3, init);
    {
        loom_val j = loom_for_iv(k, f), m = loom_for_arg(k, f, 0), l = loom_for_arg(k, f, 1);
        loom_val o = loom_for_arg(k, f, 2);
        loom_val n0 = loom_mul(k, j, I32(k, BN));
        loom_mbar_expect(k, kvbar, z, 2 * BN * D * 2);
        loom_tma_load(k, Kt, ((loom_val[]){n0, z}), ks, kvbar, z);
        loom_tma_load(k, V, ((loom_val[]){n0, z}), vs, kvbar, z);
        loom_mbar_wait(k, kvbar, z, loom_ring_phase(k, j, 1));
        loom_val s = loom_wgmma(k, qs, loom_smem_trans(k, ks),
                                loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(BM, BN)));
        loom_wgmma_commit(k);
        loom_region_op w = loom_wgmma_wait(k, 0, 1, &s);
        s = loom_wgmma_result(k, w, 0);
        /* m_new = max(m, rowmax(S) * scale); P = exp2(S * scale - m_new) */
        loom_val m_new = loom_max(k, m, loom_mul(k, loom_reduce_max(k, s, 1), scale));
        loom_val mb = loom_broadcast(k, loom_expand_dims(k, m_new, 1), LOOM_SHAPE2(BM, BN));
        loom_val p = loom_exp2(k, loom_sub(k, loom_mul(k, s, scale), mb));
        /* l = l * alpha + rowsum(P); O = O * alpha, alpha = exp2(m - m_new) by row */
        loom_val alpha = loom_exp2(k, loom_sub(k, m, m_new));
        loom_val l_new = loom_add(k, loom_mul(k, l, alpha), loom_reduce_sum(k, p, 1));
        loom_val ob = loom_mul(k, o, loom_broadcast(k, loom_expand_dims(k, alpha, 1), LOOM_SHAPE2(BM, D)));
        /* O += P @ V with P from registers */
        loom_val o2 = loom_wgmma(k, loom_cast(k, p, dt), vs, ob);
        loom_wgmma_commit(k);
        loom_region_op w2 = loom_wgmma_wait(k, 0, 1, &o2);
        loom_val ys[3] = {m_new, l_new, loom_wgmma_result(k, w2, 0)};
        loom_for_end(k, f, 3, ys);
    }
    loom_val lb = loom_broadcast(k, loom_expand_dims(k, loom_for_result(k, f, 1), 1), LOOM_SHAPE2(BM, D));
    loom_store(k, O, ((loom_val[]){m0, z}), loom_div(k, loom_for_result(k, f, 2), lb), LOOM_NONE);
    loom_task_end(k, t);
    return k;
}

/* ---------------------------------------------------------------- data and references */

/* Random values in [-1, 1] rounded to dt: host bits and the values they hold. */
static void fill_half(loom_dtype dt, uint16_t *h, float *v, int64_t n, unsigned seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        float x = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
        h[i] = dt == LOOM_F16 ? ir_f32_to_f16(x) : ir_f32_to_bf16(x);
        v[i] = dt == LOOM_F16 ? ir_f16_to_f32(h[i]) : ir_bf16_to_f32(h[i]);
    }
}

/* |got - want| <= atol + rtol * |want| for each of n elements. */
static void expect_close(const char *what, const float *got, const double *want, int64_t n, double atol,
                         double rtol)
{
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i]), "%s[%lld] = %.7g, want %.7g", what,
                  (long long)i, got[i], want[i]);
}

typedef struct plain_io {
    plain_cfg c;
    uint16_t *a, *b, *a2;
    float *out;
    double *ref;
    size_t bytes[4]; /* A, B, C, A2 */
} plain_io;

static plain_io plain_make(loom_dtype dt, plain_cfg c)
{
    plain_io x = {.c = c};
    int64_t M = c.M, K = c.K, N = c.N;
    x.bytes[0] = x.bytes[3] = (size_t)(M * K) * 2;
    x.bytes[1] = (size_t)(K * N) * 2;
    x.bytes[2] = (size_t)(M * N) * 4;
    x.a = malloc(x.bytes[0]);
    x.b = malloc(x.bytes[1]);
    x.out = calloc(x.bytes[2], 1);
    x.a2 = calloc(x.bytes[3], 1);
    x.ref = calloc((size_t)(M * N), sizeof *x.ref);
    float *af = malloc((size_t)(M * K) * 4), *bf = malloc((size_t)(K * N) * 4);
    cr_assert(x.a && x.b && x.out && x.a2 && x.ref && af && bf);
    fill_half(dt, x.a, af, M * K, 11);
    fill_half(dt, x.b, bf, K * N, 12);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++)
            for (int64_t q = 0; q < K; q++)
                x.ref[m * N + n] += (double)af[m * K + q] * bf[q * N + n];
    free(af);
    free(bf);
    return x;
}

static void plain_check(const plain_io *x)
{
    expect_close("C", x->out, x->ref, x->c.M * x->c.N, 1e-4, 1e-5);
    if (x->c.copy)
        cr_expect(memcmp(x->a, x->a2, x->bytes[0]) == 0, "A2 is a copy of A");
}

static void plain_free(plain_io *x)
{
    free(x->a);
    free(x->b);
    free(x->out);
    free(x->a2);
    free(x->ref);
}

typedef struct stats_io {
    uint16_t *q, *k;
    float *mx, *sm, *e;
    double *rmx, *rsm, *re;
} stats_io;

static stats_io stats_make(loom_dtype dt)
{
    stats_io x;
    x.q = malloc(BM * D * 2);
    x.k = malloc(BN * D * 2);
    x.mx = calloc(BM, 4);
    x.sm = calloc(BM, 4);
    x.e = calloc(BM * BN, 4);
    x.rmx = calloc(BM, sizeof(double));
    x.rsm = calloc(BM, sizeof(double));
    x.re = calloc(BM * BN, sizeof(double));
    float *qf = malloc(BM * D * 4), *kf = malloc(BN * D * 4);
    double *s = malloc(BM * BN * sizeof(double));
    cr_assert(x.q && x.k && x.mx && x.sm && x.e && x.rmx && x.rsm && x.re && qf && kf && s);
    fill_half(dt, x.q, qf, BM * D, 21);
    fill_half(dt, x.k, kf, BN * D, 22);
    for (int m = 0; m < BM; m++) {
        x.rmx[m] = -INFINITY;
        for (int n = 0; n < BN; n++) {
            double a = 0;
            for (int d = 0; d < D; d++)
                a += (double)qf[m * D + d] * kf[n * D + d];
            s[m * BN + n] = a;
            x.rmx[m] = fmax(x.rmx[m], a);
            x.rsm[m] += a;
        }
        for (int n = 0; n < BN; n++)
            x.re[m * BN + n] = exp2(s[m * BN + n] - x.rmx[m]);
    }
    free(qf);
    free(kf);
    free(s);
    return x;
}

static void stats_check(const stats_io *x)
{
    expect_close("mx", x->mx, x->rmx, BM, 1e-4, 1e-5);
    expect_close("sm", x->sm, x->rsm, BM, 1e-3, 1e-5);
    expect_close("E", x->e, x->re, BM * BN, 1e-5, 1e-5);
}

static void stats_free(stats_io *x)
{
    void *p[] = {x->q, x->k, x->mx, x->sm, x->e, x->rmx, x->rsm, x->re};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        free(p[i]);
}

typedef struct attn_io {
    int64_t M, Nk;
    uint16_t *q, *k, *v;
    float *o;
    double *ref;
} attn_io;

static attn_io attn_make(loom_dtype dt, int64_t M, int64_t Nk)
{
    attn_io x = {.M = M, .Nk = Nk};
    x.q = malloc((size_t)(M * D) * 2);
    x.k = malloc((size_t)(Nk * D) * 2);
    x.v = malloc((size_t)(Nk * D) * 2);
    x.o = calloc((size_t)(M * D), 4);
    x.ref = calloc((size_t)(M * D), sizeof *x.ref);
    float *qf = malloc((size_t)(M * D) * 4), *kf = malloc((size_t)(Nk * D) * 4), *vf = malloc((size_t)(Nk * D) * 4);
    double *p = malloc((size_t)Nk * sizeof *p);
    cr_assert(x.q && x.k && x.v && x.o && x.ref && qf && kf && vf && p);
    /* Q a little larger, so the softmax is peaked enough for the online max to matter */
    fill_half(dt, x.q, qf, M * D, 31);
    for (int64_t i = 0; i < M * D; i++) {
        float y = 3 * qf[i];
        x.q[i] = dt == LOOM_F16 ? ir_f32_to_f16(y) : ir_f32_to_bf16(y);
        qf[i] = dt == LOOM_F16 ? ir_f16_to_f32(x.q[i]) : ir_bf16_to_f32(x.q[i]);
    }
    fill_half(dt, x.k, kf, Nk * D, 32);
    fill_half(dt, x.v, vf, Nk * D, 33);
    double scale = 1 / sqrt((double)D);
    for (int64_t m = 0; m < M; m++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t n = 0; n < Nk; n++) {
            double a = 0;
            for (int d = 0; d < D; d++)
                a += (double)qf[m * D + d] * kf[n * D + d];
            p[n] = a * scale;
            mx = fmax(mx, p[n]);
        }
        for (int64_t n = 0; n < Nk; n++) {
            p[n] = exp(p[n] - mx);
            sum += p[n];
        }
        for (int64_t n = 0; n < Nk; n++)
            for (int d = 0; d < D; d++)
                x.ref[m * D + d] += p[n] / sum * vf[n * D + d];
    }
    free(qf);
    free(kf);
    free(vf);
    free(p);
    return x;
}

/* P is rounded to dt before P @ V: about 2^-11 (f16) or 2^-8 (bf16) of each weight. */
static void attn_check(const attn_io *x, loom_dtype dt)
{
    double tol = dt == LOOM_F16 ? 1e-3 : 5e-3;
    expect_close("O", x->o, x->ref, x->M * D, tol, tol);
}

static void attn_free(attn_io *x)
{
    free(x->q);
    free(x->k);
    free(x->v);
    free(x->o);
    free(x->ref);
}

/* ---------------------------------------------------------------- the interpreter */

#define NCFG (int)(sizeof plain_cfgs / sizeof *plain_cfgs)

Test(wgmma_regs, plain_on_the_interpreter)
{
    for (int bf = 0; bf < 2; bf++)
        for (int i = 0; i < NCFG; i++) {
            loom_dtype dt = bf ? LOOM_BF16 : LOOM_F16;
            loom_kernel *k = plain_kernel(dt, plain_cfgs[i]);
            cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
            plain_io x = plain_make(dt, plain_cfgs[i]);
            targ a[] = {TA_BUF(x.a, x.bytes[0]), TA_BUF(x.b, x.bytes[1]), TA_BUF(x.out, x.bytes[2]),
                        TA_BUF(x.a2, x.bytes[3])};
            T_RUN_OK(k, NULL, a, 4);
            plain_check(&x);
            plain_free(&x);
            loom_kernel_destroy(k);
        }
}

Test(wgmma_regs, rowstats_on_the_interpreter)
{
    for (int bf = 0; bf < 2; bf++) {
        loom_dtype dt = bf ? LOOM_BF16 : LOOM_F16;
        loom_kernel *k = rowstats_kernel(dt);
        cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
        stats_io x = stats_make(dt);
        targ a[] = {TA_BUF(x.q, BM * D * 2), TA_BUF(x.k, BN * D * 2), TA_BUF(x.mx, BM * 4), TA_BUF(x.sm, BM * 4),
                    TA_BUF(x.e, BM * BN * 4)};
        T_RUN_OK(k, NULL, a, 5);
        stats_check(&x);
        stats_free(&x);
        loom_kernel_destroy(k);
    }
}

Test(wgmma_regs, attention_on_the_interpreter)
{
    const int64_t M = 128, Nk = 192; /* two programs, three K/V blocks each */
    for (int bf = 0; bf < 2; bf++) {
        loom_dtype dt = bf ? LOOM_BF16 : LOOM_F16;
        loom_kernel *k = attention_kernel(dt, M, Nk);
        cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
        attn_io x = attn_make(dt, M, Nk);
        int grid[3] = {(int)(M / BM), 1, 1};
        targ a[] = {TA_BUF(x.q, M * D * 2), TA_BUF(x.k, Nk * D * 2), TA_BUF(x.v, Nk * D * 2),
                    TA_BUF(x.o, M * D * 4)};
        T_RUN_OK(k, grid, a, 4);
        attn_check(&x, dt);
        attn_free(&x);
        loom_kernel_destroy(k);
    }
}

/* ---------------------------------------------------------------- the PTX */

/* Lower k and check: `regs_a` wgmma.mma_async instructions with A in registers (an A
 * operand "{%r..}" after the accumulator's braces) and `desc_a` with A from a
 * descriptor, no shared-memory loads or stores (TMA and mbarriers aside), no scratch
 * beyond the tiles and barriers, and ptxas without spills.  (`converts`: A is converted
 * through shared memory, so there are stores and loads, and scratch.) */
static void check_ptx_conv(loom_kernel *k, int regs_a, int desc_a, size_t tiles, bool converts)
{
    char *ptx = NULL, err[2048];
    size_t smem = 0;
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, &smem, err, sizeof err), LOOM_OK, "%s", err);
    int total = t_count(ptx, "wgmma.mma_async.sync.aligned."), with_regs = t_count(ptx, "}, {%r");
    cr_expect_eq(with_regs, regs_a, "%s: %d wgmma with A in registers, want %d", loom_kernel_name(k), with_regs,
                 regs_a);
    cr_expect_eq(total - with_regs, desc_a, "%s: %d wgmma with A from a descriptor, want %d", loom_kernel_name(k),
                 total - with_regs, desc_a);
    if (converts) {
        cr_expect(t_count(ptx, "st.shared") > 0 && t_count(ptx, "ld.shared") > 0, "%s: a conversion",
                  loom_kernel_name(k));
        cr_expect(smem > tiles + 1024, "%s: conversion scratch", loom_kernel_name(k));
    } else {
        cr_expect_eq(t_count(ptx, "st.shared"), 0, "%s: no shared-memory stores", loom_kernel_name(k));
        cr_expect_eq(t_count(ptx, "ld.shared"), 0, "%s: no shared-memory loads", loom_kernel_name(k));
        cr_expect(smem <= tiles + 1024, "%s: no conversion scratch: %zu bytes of shared memory for %zu of tiles",
                  loom_kernel_name(k), smem, tiles);
    }
    cr_expect(strstr(ptx, "wgmma.fence.sync.aligned"), "%s: wgmma.fence", loom_kernel_name(k));
    t_ptxas_ok(ptx, "sm_90a", loom_kernel_name(k));
    free(ptx);
}

static void check_ptx(loom_kernel *k, int regs_a, int desc_a, size_t tiles)
{
    check_ptx_conv(k, regs_a, desc_a, tiles, false);
}

Test(wgmma_regs, plain_ptx_reads_a_from_registers)
{
    for (int bf = 0; bf < 2; bf++)
        for (int i = 0; i < NCFG; i++) {
            plain_cfg c = plain_cfgs[i];
            loom_kernel *k = plain_kernel(bf ? LOOM_BF16 : LOOM_F16, c);
            /* one wgmma per k16 chunk and m64 block of a warp group */
            int per = (int)(c.K / 16 * (c.M / 64 / (c.warps / 4)));
            check_ptx_conv(k, per, 0, (size_t)(c.K * c.N * 2), false);
            loom_kernel_destroy(k);
        }
}

Test(wgmma_regs, rowstats_ptx_reduces_in_registers)
{
    for (int bf = 0; bf < 2; bf++) {
        loom_kernel *k = rowstats_kernel(bf ? LOOM_BF16 : LOOM_F16);
        char *ptx = NULL, err[2048];
        cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
        /* a row is a quad of threads: two butterflies (xor 1, 2) per row a thread holds (2),
         * for the max and for the sum */
        cr_expect_eq(t_count(ptx, "shfl.sync.bfly"), 8, "%d shuffles", t_count(ptx, "shfl.sync.bfly"));
        free(ptx);
        check_ptx(k, 0, D / 16, (size_t)(BM + BN) * D * 2);
        loom_kernel_destroy(k);
    }
}

Test(wgmma_regs, attention_ptx_keeps_p_in_registers)
{
    for (int bf = 0; bf < 2; bf++) {
        loom_dtype dt = bf ? LOOM_BF16 : LOOM_F16;
        loom_kernel *k = attention_kernel(dt, 128, 192);
        char *ptx = NULL, err[2048];
        cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
        /* P is rounded and packed from S's f32 registers, a pair per cvt */
        const char *cvt = bf ? "cvt.rn.bf16x2.f32" : "cvt.rn.f16x2.f32";
        cr_expect_eq(t_count(ptx, cvt), BN / 16 * 4, "%s: %d", cvt, t_count(ptx, cvt));
        free(ptx);
        /* S = Q @ K^T: D/16 from descriptors; O += P @ V: BN/16 with A in registers */
        check_ptx(k, BN / 16, D / 16, (size_t)(BM + 2 * BN) * D * 2);
        loom_kernel_destroy(k);
    }
}

/* ---------------------------------------------------------------- the GPU */

/* A buffer holding n bytes of host data (or poisoned with 0xff when src is NULL). */
static loom_buffer *buf(loom_runtime *rt, const void *src, size_t n)
{
    loom_buffer *b = loom_buffer_create(rt, n);
    cr_assert(b, "%s", loom_runtime_error(rt));
    cr_assert_eq(src ? loom_buffer_upload(b, src, n) : loom_buffer_fill(b, 0xff), LOOM_OK, "%s",
                 loom_runtime_error(rt));
    return b;
}

/* Launch k on the GPU with n buffers, then download the output buffers (out[i] != NULL). */
static void gpu_run(loom_runtime *rt, loom_kernel *k, int gx, loom_buffer **b, void **out, const size_t *bytes,
                    int n)
{
    loom_arg args[8];
    for (int i = 0; i < n; i++)
        args[i] = LOOM_ARG_BUF(b[i]);
    int grid[3] = {gx, 1, 1};
    cr_assert_eq(loom_launch(rt, k, grid, args, n), LOOM_OK, "%s", loom_runtime_error(rt));
    for (int i = 0; i < n; i++) {
        if (out[i])
            cr_assert_eq(loom_buffer_download(b[i], out[i], bytes[i]), LOOM_OK, "%s", loom_runtime_error(rt));
        loom_buffer_destroy(b[i]);
    }
}

Test(wgmma_regs, plain_on_the_gpu)
{
    loom_runtime *rt = t_gpu_or_skip();
    for (int bf = 0; bf < 2; bf++)
        for (int i = 0; i < NCFG; i++) {
            loom_dtype dt = bf ? LOOM_BF16 : LOOM_F16;
            loom_kernel *k = plain_kernel(dt, plain_cfgs[i]);
            plain_io x = plain_make(dt, plain_cfgs[i]);
            loom_buffer *b[] = {buf(rt, x.a, x.bytes[0]), buf(rt, x.b, x.bytes[1]), buf(rt, NULL, x.bytes[2]),
                                buf(rt, NULL, x.bytes[3])};
            void *out[] = {NULL, NULL, x.out, plain_cfgs[i].copy ? x.a2 : NULL};
            gpu_run(rt, k, 1, b, out, x.bytes, 4);
            plain_check(&x);
            plain_free(&x);
            loom_kernel_destroy(k);
        }
    loom_runtime_destroy(rt);
}

Test(wgmma_regs, rowstats_on_the_gpu)
{
    loom_runtime *rt = t_gpu_or_skip();
    for (int bf = 0; bf < 2; bf++) {
        loom_dtype dt = bf ? LOOM_BF16 : LOOM_F16;
        loom_kernel *k = rowstats_kernel(dt);
        stats_io x = stats_make(dt);
        size_t bytes[] = {BM * D * 2, BN * D * 2, BM * 4, BM * 4, BM * BN * 4};
        loom_buffer *b[] = {buf(rt, x.q, bytes[0]), buf(rt, x.k, bytes[1]), buf(rt, NULL, bytes[2]),
                            buf(rt, NULL, bytes[3]), buf(rt, NULL, bytes[4])};
        void *out[] = {NULL, NULL, x.mx, x.sm, x.e};
        gpu_run(rt, k, 1, b, out, bytes, 5);
        /* the GPU's exp2 is ex2.approx: a few ulp */
        expect_close("mx", x.mx, x.rmx, BM, 1e-4, 1e-5);
        expect_close("sm", x.sm, x.rsm, BM, 1e-3, 1e-5);
        expect_close("E", x.e, x.re, BM * BN, 1e-5, 1e-5);
        stats_free(&x);
        loom_kernel_destroy(k);
    }
    loom_runtime_destroy(rt);
}

Test(wgmma_regs, attention_on_the_gpu)
{
    loom_runtime *rt = t_gpu_or_skip();
    const int64_t M = 128, Nk = 192;
    for (int bf = 0; bf < 2; bf++) {
        loom_dtype dt = bf ? LOOM_BF16 : LOOM_F16;
        loom_kernel *k = attention_kernel(dt, M, Nk);
        attn_io x = attn_make(dt, M, Nk);
        size_t bytes[] = {(size_t)(M * D) * 2, (size_t)(Nk * D) * 2, (size_t)(Nk * D) * 2, (size_t)(M * D) * 4};
        loom_buffer *b[] = {buf(rt, x.q, bytes[0]), buf(rt, x.k, bytes[1]), buf(rt, x.v, bytes[2]),
                            buf(rt, NULL, bytes[3])};
        void *out[] = {NULL, NULL, NULL, x.o};
        gpu_run(rt, k, (int)(M / BM), b, out, bytes, 4);
        attn_check(&x, dt);
        attn_free(&x);
        loom_kernel_destroy(k);
    }
    loom_runtime_destroy(rt);
}
