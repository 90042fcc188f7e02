/*
 * test_math.c -- the math ops (exp, log, tanh, erf, sigmoid, sqrt, rcp, div_fast) and the
 * integer ops xor, shl, shr: their interpreter semantics, their rules, what the constant
 * folder does with them, the PTX they lower to, and (suite math_gpu) the GPU against the
 * interpreter within the bounds docs/dsl.md documents.
 *
 * The interpreter tests compare with C computed here: the transcendental ops are
 * correctly rounded in the interpreter ((float) of the double function), with the
 * flush-to-zero rules of dsl/ew.c.  The PTX tests need no GPU (ptxas is run where it is
 * installed).  The GPU tests skip cleanly without a GPU; they print the largest error
 * they saw per op, so a bound that is too loose shows.
 */
#include "ir.h"
#include "testutil.h"

#include "cg.h"

#include <float.h>

#define INF INFINITY

typedef loom_val (*un_fn)(loom_src, loom_kernel *, loom_val);
typedef loom_val (*bin_fn)(loom_src, loom_kernel *, loom_val, loom_val);

/* ---------------------------------------------------------------- running one op */

/* out[i] = f(x[i]) (or f(x[i], y[i])) for n elements of dtype dt, on the interpreter. */
static void run_op(loom_dtype dt, int n, un_fn u, bin_fn b, void *x, void *y, void *out)
{
    loom_kernel *k = loom_kernel_create("math", 4);
    loom_val tx = loom_arg_tensor(k, "x", dt, LOOM_SHAPE1(n), LOOM_IN);
    loom_val ty = loom_arg_tensor(k, "y", dt, LOOM_SHAPE1(n), LOOM_IN);
    loom_val to = loom_arg_tensor(k, "out", dt, LOOM_SHAPE1(n), LOOM_OUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_val a = loom_load(k, tx, &z, LOOM_SHAPE1(n), LOOM_NONE, 0);
    loom_val c = loom_load(k, ty, &z, LOOM_SHAPE1(n), LOOM_NONE, 0);
    loom_store(k, to, &z, u ? u(LOOM_HERE, k, a) : b(LOOM_HERE, k, a, c), LOOM_NONE);
    size_t bytes = (size_t)n * loom_dtype_size(dt);
    void *dummy = y ? NULL : calloc(1, bytes);
    targ args[] = {TA_BUF(x, bytes), TA_BUF(y ? y : dummy, bytes), TA_BUF(out, bytes)};
    T_RUN_OK(k, NULL, args, 3);
    free(dummy);
    loom_kernel_destroy(k);
}

static void run_f32(un_fn f, const float *in, float *out, int n)
{
    float *x = malloc((size_t)n * 4);
    memcpy(x, in, (size_t)n * 4); /* t_run writes its arguments back */
    run_op(LOOM_F32, n, f, NULL, x, NULL, out);
    free(x);
}

static float flush_pos(float x) { return x < FLT_MIN ? 0.0f : x; }
static float ftz(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }

/* The interpreter's definition of each unary float op, written out again here. */
static float ref_un(ir_opkind op, float x)
{
    double d = x;
    switch (op) {
    case IR_EXP: return flush_pos((float)exp(d));
    case IR_LOG: return (float)log(d);
    case IR_TANH: return (float)tanh(d);
    case IR_ERF: return (float)erf(d);
    case IR_SIGMOID: return flush_pos((float)(1.0 / (1.0 + exp(-d))));
    case IR_SQRT: return sqrtf(x);
    case IR_RCP: return ftz(1.0f / ftz(x));
    default: cr_assert_fail("not a unary op"); return 0;
    }
}

static const struct {
    ir_opkind op;
    un_fn f;
} unary_ops[] = {{IR_EXP, loom_exp_at},         {IR_LOG, loom_log_at},   {IR_TANH, loom_tanh_at},
                 {IR_ERF, loom_erf_at},         {IR_SIGMOID, loom_sigmoid_at}, {IR_SQRT, loom_sqrt_at},
                 {IR_RCP, loom_rcp_at}};
#define NUNARY ((int)(sizeof unary_ops / sizeof unary_ops[0]))

static const float fvals[] = {0.0f,  -0.0f,   1.0f,     -1.0f,   0.5f,    2.0f,    1e-45f,   -1e-40f, 1e-30f,
                              1e38f, -1e38f,  INF,      -INF,    NAN,     0.1f,    7.0f,     -2.5f,   3.4e38f,
                              FLT_MIN, 88.7f, 88.8f,    -87.3f,  -87.4f,  -100.0f, -104.0f,  20.0f,   -20.0f,
                              0.9277f, 0.9278f, 3.9f,   -4.0f,   10.0f,   1e-5f,   16777217.0f, 0.3333333f};
#define NF ((int)(sizeof fvals / sizeof fvals[0]))

/* ---------------------------------------------------------------- interpreter: unary floats */

OP_COVERED(exp) OP_COVERED(log) OP_COVERED(tanh) OP_COVERED(erf) OP_COVERED(sigmoid) OP_COVERED(sqrt)
OP_COVERED(rcp)
Test(math, unary_ops_are_the_documented_definition)
{
    float out[NF];
    for (int o = 0; o < NUNARY; o++) {
        run_f32(unary_ops[o].f, fvals, out, NF);
        for (int i = 0; i < NF; i++) {
            float want = ref_un(unary_ops[o].op, fvals[i]);
            cr_expect(t_same_f32(out[i], want), "%s(%a) = %a, want %a", ir_opdescs[unary_ops[o].op].name,
                      fvals[i], out[i], want);
        }
    }
}

Test(math, exp_log_special_values)
{
    float x[] = {0.0f, -0.0f, 1.0f, INF, -INF, NAN, 88.72f, 88.73f, -87.33f, -87.34f, -100.0f, 2.0f, -1.0f, 1e-45f};
    enum { N = sizeof x / sizeof x[0] };
    float e[N], l[N];
    run_f32(loom_exp_at, x, e, N);
    run_f32(loom_log_at, x, l, N);
    cr_expect(e[0] == 1.0f && e[1] == 1.0f && e[2] == 2.71828183f && e[3] == INF && e[4] == 0.0f && isnan(e[5]));
    cr_expect(isfinite(e[6]) && e[6] > 3.3e38f && e[7] == INF, "exp overflows past 88.72: %a %a", e[6], e[7]);
    cr_expect(e[8] >= FLT_MIN && e[9] == 0.0f && !signbit(e[9]) && e[10] == 0.0f,
              "exp flushes results below 2^-126 to +0 (ex2.approx.ftz): %a %a", e[8], e[9]);
    cr_expect(l[0] == -INF && l[1] == -INF && l[2] == 0.0f && l[3] == INF && isnan(l[4]) && isnan(l[5]));
    cr_expect(l[11] == 0.693147182f && isnan(l[12]), "%a %a", l[11], l[12]);
    cr_expect(l[13] == (float)log(0x1p-149), "log of a subnormal is not flushed: %a", l[13]);
}

Test(math, tanh_erf_sigmoid_saturate)
{
    float x[] = {0.0f, -0.0f, INF, -INF, NAN, 10.0f, -10.0f, 1e30f, -1e30f, 1e-30f, -1e-40f, 100.0f, -100.0f, -87.0f};
    enum { N = sizeof x / sizeof x[0] };
    float t[N], e[N], s[N];
    run_f32(loom_tanh_at, x, t, N);
    run_f32(loom_erf_at, x, e, N);
    run_f32(loom_sigmoid_at, x, s, N);
    cr_expect(t[0] == 0.0f && !signbit(t[0]) && t[1] == 0.0f && signbit(t[1]));
    cr_expect(t[2] == 1.0f && t[3] == -1.0f && isnan(t[4]) && t[5] == 1.0f && t[6] == -1.0f && t[7] == 1.0f &&
              t[8] == -1.0f);
    cr_expect(t[9] == 1e-30f && t[10] == -1e-40f, "tanh(x) = x for tiny x, subnormals kept: %a %a", t[9], t[10]);
    cr_expect(e[0] == 0.0f && signbit(e[1]) && e[2] == 1.0f && e[3] == -1.0f && isnan(e[4]) && e[5] == 1.0f &&
              e[6] == -1.0f);
    cr_expect(e[9] == (float)(1e-30 * 1.1283791670955126), "erf(x) = 2x/sqrt(pi) for tiny x: %a", e[9]);
    cr_expect(s[0] == 0.5f && s[1] == 0.5f && s[2] == 1.0f && s[3] == 0.0f && isnan(s[4]) && s[5] == (float)(1 / (1 + exp(-10.0))));
    cr_expect(s[11] == 1.0f && s[12] == 0.0f && !signbit(s[12]), "sigmoid(-100) = 3.7e-44 flushes to +0: %a", s[12]);
    cr_expect(s[13] == (float)(1 / (1 + exp(87.0))) && s[13] >= FLT_MIN, "sigmoid(-87) = 1.6e-38 is normal: %a", s[13]);
}

Test(math, sqrt_is_ieee_and_rcp_flushes)
{
    float x[] = {4.0f, 2.0f, 0.0f, -0.0f, -1.0f, INF, NAN, 1e-40f, 3e38f, -3e38f, -INF, 0.1f};
    enum { N = sizeof x / sizeof x[0] };
    float s[N], r[N];
    run_f32(loom_sqrt_at, x, s, N);
    run_f32(loom_rcp_at, x, r, N);
    for (int i = 0; i < N; i++)
        cr_expect(t_same_f32(s[i], sqrtf(x[i])), "sqrt(%a) = %a", x[i], s[i]);
    cr_expect(s[0] == 2.0f && s[1] == 1.41421354f && signbit(s[3]) && isnan(s[4]) && s[5] == INF && s[7] > 0);
    cr_expect(r[0] == 0.25f && r[1] == 0.5f && r[2] == INF && r[3] == -INF && r[5] == 0.0f && isnan(r[6]));
    cr_expect(r[7] == INF, "a subnormal operand of rcp is zero: %a", r[7]);
    cr_expect(r[8] == 0.0f && !signbit(r[8]) && r[9] == 0.0f && signbit(r[9]),
              "1/3e38 is subnormal: flushed to a zero of its sign: %a %a", r[8], r[9]);
    cr_expect(r[11] == 1.0f / 0.1f);
}

OP_COVERED(div_fast)
Test(math, div_fast_is_the_quotient_with_subnormals_flushed)
{
    float x[] = {1.0f, -7.0f, 1.0f, 0.0f, 1e-40f, 1.0f, 1e-30f, 1e30f, INF, 5.0f, NAN, -1.0f};
    float y[] = {3.0f, 2.0f, 0.0f, 0.0f, 1.0f, 1e-40f, 1e10f, 1e-10f, INF, -INF, 1.0f, -0.0f};
    enum { N = sizeof x / sizeof x[0] };
    float out[N];
    run_op(LOOM_F32, N, NULL, loom_div_fast_at, x, y, out);
    cr_expect(out[0] == 1.0f / 3.0f && out[1] == -3.5f && out[2] == INF && isnan(out[3]));
    cr_expect(out[4] == 0.0f && out[5] == INF, "subnormal operands are zero: %a %a", out[4], out[5]);
    cr_expect(out[6] == 0.0f && out[7] == INF, "1e-40 flushes to 0, 1e40 overflows: %a %a", out[6], out[7]);
    cr_expect(isnan(out[8]) && out[9] == -0.0f && signbit(out[9]) && isnan(out[10]) && out[11] == INF);
}

Test(math, f16_and_bf16_round_the_f32_result)
{
    float x[] = {0.5f, 1.0f, -2.0f, 3.0f, 0.1f, 10.0f, -0.3f, 2.5f};
    enum { N = sizeof x / sizeof x[0] };
    loom_dtype dts[2] = {LOOM_F16, LOOM_BF16};
    for (int d = 0; d < 2; d++)
        for (int o = 0; o < NUNARY; o++) {
            uint16_t in[N], out[N];
            float xr[N];
            for (int i = 0; i < N; i++) {
                in[i] = dts[d] == LOOM_F16 ? ir_f32_to_f16(x[i]) : ir_f32_to_bf16(x[i]);
                xr[i] = dts[d] == LOOM_F16 ? ir_f16_to_f32(in[i]) : ir_bf16_to_f32(in[i]);
            }
            run_op(dts[d], N, unary_ops[o].f, NULL, in, NULL, out);
            for (int i = 0; i < N; i++) {
                float got = dts[d] == LOOM_F16 ? ir_f16_to_f32(out[i]) : ir_bf16_to_f32(out[i]);
                float want = ir_round_to(dts[d], ref_un(unary_ops[o].op, xr[i]));
                cr_expect(t_same_f32(got, want), "%s %s(%a) = %a, want %a", dts[d] == LOOM_F16 ? "f16" : "bf16",
                          ir_opdescs[unary_ops[o].op].name, xr[i], got, want);
            }
        }
}

/* ---------------------------------------------------------------- interpreter: integers */

static int64_t ref_int(ir_opkind op, loom_dtype dt, int64_t a, int64_t n)
{
    int w = dt == LOOM_I64 ? 64 : 32;
    uint64_t un = (uint64_t)n;
    int64_t r;
    switch (op) {
    case IR_XOR: r = a ^ n; break;
    case IR_SHL: r = un >= (uint64_t)w ? 0 : (int64_t)((uint64_t)a << un); break;
    default: r = un >= (uint64_t)w ? (a < 0 ? -1 : 0) : (a >> un); break; /* gcc: >> of a negative is arithmetic */
    }
    return dt == LOOM_I32 ? (int32_t)(uint32_t)(uint64_t)r : r;
}

static void check_int(loom_dtype dt, ir_opkind op, bin_fn f)
{
    static const int64_t av[] = {0, 1, -1, 5, -6, 0x12345678, INT32_MAX, INT32_MIN, INT64_C(0x123456789abc),
                                 INT64_MAX, INT64_MIN};
    static const int64_t nv[] = {0, 1, 4, 31, 32, 33, 63, 64, 65, -1, -32, 1000};
    enum { NA = sizeof av / sizeof av[0], NN = sizeof nv / sizeof nv[0], N = NA * NN };
    int64_t a64[N], n64[N], o64[N];
    int32_t a32[N], n32[N], o32[N];
    for (int i = 0; i < NA; i++)
        for (int j = 0; j < NN; j++) {
            int64_t a = dt == LOOM_I32 ? (int32_t)(uint32_t)(uint64_t)av[i] : av[i];
            a64[i * NN + j] = a, n64[i * NN + j] = nv[j];
            a32[i * NN + j] = (int32_t)a, n32[i * NN + j] = (int32_t)nv[j];
        }
    if (dt == LOOM_I32)
        run_op(dt, N, NULL, f, a32, n32, o32);
    else
        run_op(dt, N, NULL, f, a64, n64, o64);
    for (int e = 0; e < N; e++) {
        int64_t got = dt == LOOM_I32 ? o32[e] : o64[e];
        int64_t want = ref_int(op, dt, a64[e], n64[e]);
        cr_expect_eq(got, want, "%s %s(%lld, %lld) = %lld, want %lld", dt == LOOM_I32 ? "i32" : "i64",
                     ir_opdescs[op].name, (long long)a64[e], (long long)n64[e], (long long)got, (long long)want);
    }
}

OP_COVERED(xor) OP_COVERED(shl) OP_COVERED(shr)
Test(math, xor_shl_shr_on_i32_and_i64)
{
    loom_dtype dts[2] = {LOOM_I32, LOOM_I64};
    for (int d = 0; d < 2; d++) {
        check_int(dts[d], IR_XOR, loom_xor_at);
        check_int(dts[d], IR_SHL, loom_shl_at);
        check_int(dts[d], IR_SHR, loom_shr_at);
    }
}

Test(math, shift_edges_spelled_out)
{
    int32_t a[] = {1, 1, 1, -8, -8, -8, -8, 0x40000000, 7, -1}, n[] = {0, 31, 32, 1, 31, 32, -1, 1, 100, 0};
    enum { N = sizeof a / sizeof a[0] };
    int32_t l[N], r[N];
    run_op(LOOM_I32, N, NULL, loom_shl_at, a, n, l);
    run_op(LOOM_I32, N, NULL, loom_shr_at, a, n, r);
    cr_expect(l[0] == 1 && l[1] == INT32_MIN && l[2] == 0 && l[3] == -16 && l[6] == 0 && l[7] == INT32_MIN && l[8] == 0,
              "shl by 0, 31, 32 (clamped: 0), -1 (clamped), a carry into the sign");
    cr_expect(r[0] == 1 && r[1] == 0 && r[2] == 0 && r[3] == -4 && r[4] == -1 && r[5] == -1 && r[6] == -1 &&
                  r[8] == 0 && r[9] == -1,
              "shr is arithmetic; counts >= 32 or negative fill with the sign");
}

Test(math, xor_on_i1_is_logical)
{
    loom_kernel *k = loom_kernel_create("xor_i1", 1);
    loom_val o = loom_arg_tensor(k, "o", LOOM_I1, LOOM_SHAPE1(4), LOOM_OUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_val r = loom_arange(k, 0, 4);
    loom_val p = loom_cmp(k, LOOM_NE, loom_and(k, r, loom_const_i(k, LOOM_I32, 1)), z);
    loom_val q = loom_cmp(k, LOOM_GE, r, loom_const_i(k, LOOM_I32, 2));
    loom_store(k, o, &z, loom_xor(k, p, q), LOOM_NONE);
    uint8_t out[4];
    targ args[] = {TA_ARR(out)};
    T_RUN_OK(k, NULL, args, 1);
    cr_expect(out[0] == 0 && out[1] == 1 && out[2] == 1 && out[3] == 0);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- rules */

Test(math, rules_refuse_wrong_dtypes_naming_the_line)
{
    struct {
        loom_dtype dt;
        int which; /* 0 shl, 1 shr, 2 div_fast, 3 exp, 4 tanh */
        const char *want;
    } cases[] = {{LOOM_F32, 0, "shifts take i32 or i64"}, {LOOM_I1, 1, "shifts take i32 or i64"},
                 {LOOM_I32, 2, "takes floats (loom_div divides integers)"}, {LOOM_I32, 3, "takes floats"},
                 {LOOM_I64, 4, "takes floats"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        loom_kernel *k = loom_kernel_create("bad", 1);
        loom_val a = loom_arg_scalar(k, "a", cases[c].dt == LOOM_I1 ? LOOM_I32 : cases[c].dt);
        if (cases[c].dt == LOOM_I1) /* (an i1 scalar argument does not exist: make one) */
            a = loom_cmp(k, LOOM_LT, a, loom_const_i(k, LOOM_I32, 0));
        int line = 0;
        switch (cases[c].which) {
        case 0: line = __LINE__; loom_shl(k, a, a); break;
        case 1: line = __LINE__; loom_shr(k, a, a); break;
        case 2: line = __LINE__; loom_div_fast(k, a, a); break;
        case 3: line = __LINE__; loom_exp(k, a); break;
        default: line = __LINE__; loom_tanh(k, a); break;
        }
        const char *err = loom_kernel_errors(k);
        cr_expect(strstr(err, cases[c].want), "case %zu: '%s' does not say '%s'", c, err, cases[c].want);
        cr_expect(t_names_line(err, __FILE__, line), "case %zu: '%s' does not name line %d", c, err, line);
        loom_kernel_destroy(k);
    }
}

/* ---------------------------------------------------------------- fold */

/* The folder evaluates the exact ops (sqrt, xor, shl, shr) with the interpreter's own
 * semantics and leaves the approximate ones for the GPU to compute. */
Test(math, fold_exact_ops_only)
{
    loom_kernel *k = loom_kernel_create("fold_math", 1);
    loom_val o = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(3), LOOM_OUT);
    loom_val of = loom_arg_tensor(k, "of", LOOM_F32, LOOM_SHAPE1(2), LOOM_OUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_val i[3] = {loom_shl(k, loom_const_i(k, LOOM_I32, 3), loom_const_i(k, LOOM_I32, 40)),
                     loom_shr(k, loom_const_i(k, LOOM_I32, -1000), loom_const_i(k, LOOM_I32, 3)),
                     loom_xor(k, loom_const_i(k, LOOM_I32, 12), loom_const_i(k, LOOM_I32, 10))};
    loom_val f[2] = {loom_sqrt(k, loom_const_f(k, LOOM_F32, 2.0)), loom_exp(k, loom_const_f(k, LOOM_F32, 1.0))};
    for (int j = 0; j < 3; j++)
        loom_store(k, o, ((loom_val[]){loom_const_i(k, LOOM_I32, j)}), loom_splat(k, i[j], LOOM_SHAPE1(1)), LOOM_NONE);
    for (int j = 0; j < 2; j++)
        loom_store(k, of, ((loom_val[]){loom_const_i(k, LOOM_I32, j)}), loom_splat(k, f[j], LOOM_SHAPE1(1)), LOOM_NONE);
    (void)z;
    int32_t want[3], got[3];
    float wantf[2], gotf[2];
    targ a[] = {TA_ARR(want), TA_ARR(wantf)};
    T_RUN_OK(k, NULL, a, 2);
    cr_expect(want[0] == 0 && want[1] == -125 && want[2] == 6 && wantf[0] == sqrtf(2.0f));
    loom_kernel *w = ir_kernel_clone(k);
    cr_assert(w);
    cg_ctx cg = {.k = w};
    cr_assert_eq(cg_fold(&cg), LOOM_OK);
    const char *ir = loom_print(w);
    cr_expect(!strstr(ir, "shl") && !strstr(ir, "shr") && !strstr(ir, "xor") && !strstr(ir, "sqrt"),
              "exact ops left unfolded:\n%s", ir);
    cr_expect(strstr(ir, "exp"), "exp (approximate on the GPU) was folded:\n%s", ir);
    targ b[] = {TA_ARR(got), TA_ARR(gotf)};
    T_RUN_OK(w, NULL, b, 2);
    for (int j = 0; j < 3; j++)
        cr_expect_eq(got[j], want[j]);
    cr_expect(t_same_f32(gotf[0], wantf[0]) && t_same_f32(gotf[1], wantf[1]));
    loom_kernel_destroy(w);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- PTX */

/* The PTX of k for arch, assembled by ptxas where ptxas knows the arch (CUDA 13's does
 * not know sm_70: that PTX is only looked at). */
static char *ptx_of(loom_kernel *k, const char *arch)
{
    char err[4096];
    cg_result r;
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    loom_status st = cg_compile(k, arch, &r, err, sizeof err);
    cr_assert_eq(st, LOOM_OK, "cg_compile(%s): %s: %s", arch, loom_status_name(st), err);
    if (strcmp(arch, "sm_70") != 0)
        t_ptxas_ok(r.ptx, arch, loom_kernel_name(k));
    return r.ptx;
}

/* Every float op of this file (and div) on one tile; one output row per op. */
enum { NFLOAT_OPS = 10 };
static const char *const float_op_names[NFLOAT_OPS] = {"exp", "log", "tanh", "erf", "sigmoid",
                                                       "sqrt", "rcp", "div", "div_fast", "exp2"};

static loom_kernel *float_kernel(loom_dtype dt, int64_t n, int block)
{
    loom_kernel *k = loom_kernel_create("math_float", 4);
    loom_val x = loom_arg_tensor(k, "x", dt, LOOM_SHAPE1(n), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", dt, LOOM_SHAPE1(n), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", dt, LOOM_SHAPE2(NFLOAT_OPS, n), LOOM_OUT);
    loom_val off = loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, block));
    loom_val a = loom_load(k, x, &off, LOOM_SHAPE1(block), LOOM_NONE, 1.0);
    loom_val b = loom_load(k, y, &off, LOOM_SHAPE1(block), LOOM_NONE, 1.0);
    loom_val r[NFLOAT_OPS] = {loom_exp(k, a), loom_log(k, a),  loom_tanh(k, a),    loom_erf(k, a),
                              loom_sigmoid(k, a), loom_sqrt(k, a), loom_rcp(k, a), loom_div(k, a, b),
                              loom_div_fast(k, a, b), loom_exp2(k, a)};
    for (int i = 0; i < NFLOAT_OPS; i++)
        loom_store(k, o, ((loom_val[]){loom_const_i(k, LOOM_I32, i), off}), r[i], LOOM_NONE);
    return k;
}

static loom_kernel *int_kernel(loom_dtype dt, int64_t n, int block)
{
    loom_kernel *k = loom_kernel_create("math_int", 4);
    loom_val x = loom_arg_tensor(k, "x", dt, LOOM_SHAPE1(n), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", dt, LOOM_SHAPE1(n), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", dt, LOOM_SHAPE2(3, n), LOOM_OUT);
    loom_val off = loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, block));
    loom_val a = loom_load(k, x, &off, LOOM_SHAPE1(block), LOOM_NONE, 0);
    loom_val b = loom_load(k, y, &off, LOOM_SHAPE1(block), LOOM_NONE, 0);
    loom_val r[3] = {loom_xor(k, a, b), loom_shl(k, a, b), loom_shr(k, a, b)};
    for (int i = 0; i < 3; i++)
        loom_store(k, o, ((loom_val[]){loom_const_i(k, LOOM_I32, i), off}), r[i], LOOM_NONE);
    return k;
}

static loom_kernel *div_kernel(loom_dtype dt, bool fast)
{
    loom_kernel *k = loom_kernel_create("fdiv", 4);
    loom_val x = loom_arg_tensor(k, "x", dt, LOOM_SHAPE1(512), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", dt, LOOM_SHAPE1(512), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", dt, LOOM_SHAPE1(512), LOOM_OUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_val a = loom_load(k, x, &z, LOOM_SHAPE1(512), LOOM_NONE, 0);
    loom_val b = loom_load(k, y, &z, LOOM_SHAPE1(512), LOOM_NONE, 1);
    loom_store(k, o, &z, fast ? loom_div_fast(k, a, b) : loom_div(k, a, b), LOOM_NONE);
    return k;
}

Test(math, f32_div_is_div_rn_f32_without_f64)
{
    loom_dtype dts[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
    for (int d = 0; d < 3; d++) {
        loom_kernel *k = div_kernel(dts[d], false);
        char *ptx = ptx_of(k, "sm_90a");
        cr_expect(strstr(ptx, "div.rn.f32"), "no div.rn.f32:\n%s", ptx);
        cr_expect(!strstr(ptx, ".f64"), "an f64 instruction in a float division:\n%s", ptx);
        cr_expect(!strstr(ptx, "div.full") && !strstr(ptx, "div.approx") && !strstr(ptx, ".ftz"),
                  "loom_div is IEEE: no approximate division, no flush:\n%s", ptx);
        free(ptx);
        loom_kernel_destroy(k);
        k = div_kernel(dts[d], true);
        ptx = ptx_of(k, "sm_90a");
        cr_expect(strstr(ptx, "div.full.ftz.f32"), "div_fast is not div.full.ftz.f32:\n%s", ptx);
        cr_expect(!strstr(ptx, ".f64") && !strstr(ptx, "div.rn"), "%s", ptx);
        free(ptx);
        loom_kernel_destroy(k);
    }
}

Test(math, every_op_lowers_to_its_instruction)
{
    static const char *const want[] = {"ex2.approx.ftz.f32", "lg2.approx.f32", "tanh.approx.f32", "rcp.approx.ftz.f32",
                                       "sqrt.rn.f32",        "div.rn.f32",     "div.full.ftz.f32", "fma.rn.ftz.f32"};
    loom_dtype dts[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
    for (int d = 0; d < 3; d++) {
        loom_kernel *k = float_kernel(dts[d], 2048, 1024);
        char *ptx = ptx_of(k, "sm_90a");
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            cr_expect(strstr(ptx, want[i]), "no %s in the PTX", want[i]);
        cr_expect(!strstr(ptx, ".f64"), "an f64 instruction in f32 math:\n%s", ptx);
        free(ptx);
        ptx = ptx_of(k, "sm_80");
        cr_expect(strstr(ptx, "tanh.approx.f32") && !strstr(ptx, ".f64"));
        free(ptx);
        /* before sm_75 there is no tanh.approx: tanh is built from ex2 and rcp */
        ptx = ptx_of(k, "sm_70");
        cr_expect(!strstr(ptx, "tanh.approx") && !strstr(ptx, ".f64"), "%s", ptx);
        free(ptx);
        loom_kernel_destroy(k);
    }
    loom_dtype its[2] = {LOOM_I32, LOOM_I64};
    for (int d = 0; d < 2; d++) {
        loom_kernel *k = int_kernel(its[d], 2048, 1024);
        char *ptx = ptx_of(k, "sm_90a");
        const char *w = its[d] == LOOM_I32 ? "32" : "64";
        char xo[32], sl[32], sr[32];
        snprintf(xo, sizeof xo, "xor.b%s", w);
        snprintf(sl, sizeof sl, "shl.b%s", w);
        snprintf(sr, sizeof sr, "shr.s%s", w);
        cr_expect(strstr(ptx, xo) && strstr(ptx, sl) && strstr(ptx, sr), "no %s / %s / %s:\n%s", xo, sl, sr, ptx);
        free(ptx);
        loom_kernel_destroy(k);
    }
}

/* ---------------------------------------------------------------- GPU against the interpreter */

/* ulp distance on the flush-to-zero number line: every subnormal counts as a zero of its
 * sign and +-0 are one point, so 0 and 2^-126 are one step apart (an op that flushes a
 * result the other rounds up to 2^-126 is off by one ulp, not by 2^23). */
static int64_t ftz_key(float f)
{
    uint32_t u = t_f2u(f), a = u & 0x7fffffff;
    int64_t k = a < 0x00800000 ? 0 : (int64_t)a - 0x007fffff;
    return u >> 31 ? -k : k;
}

static int64_t ulp_dist(float a, float b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b) ? 0 : INT64_MAX;
    int64_t d = ftz_key(a) - ftz_key(b);
    return d < 0 ? -d : d;
}

/* The same on f16/bf16 bit patterns (subnormals of the narrow types are kept). */
static int64_t ulp_dist16(uint16_t a, uint16_t b, loom_dtype dt)
{
    float fa = dt == LOOM_F16 ? ir_f16_to_f32(a) : ir_bf16_to_f32(a);
    float fb = dt == LOOM_F16 ? ir_f16_to_f32(b) : ir_bf16_to_f32(b);
    if (isnan(fa) || isnan(fb))
        return isnan(fa) && isnan(fb) ? 0 : INT64_MAX;
    int64_t ka = (a & 0x8000) ? -(int64_t)(a & 0x7fff) : a, kb = (b & 0x8000) ? -(int64_t)(b & 0x7fff) : b;
    return ka > kb ? ka - kb : kb - ka;
}

/* The documented bound of each op of float_kernel (docs/dsl.md, "Where the GPU differs
 * from the interpreter"): f32 ulps; log's absolute error for x in [0.5, 2]; tanh's
 * relative error; ulps of f16/bf16 results. */
static const struct {
    int ulp32;
    double abs_near1, rel;
    int ulp16;
} bound[NFLOAT_OPS] = {
    /* exp */ {3, 0, 0, 1},     /* log */ {4, 0x1p-21, 0, 1},    /* tanh */ {0, 0, 5.2333e-4 /* 2^-10.9 */, 2},
    /* erf */ {2, 0, 0, 1},     /* sigmoid */ {5, 0, 0, 1},      /* sqrt */ {0, 0, 0, 0},
    /* rcp */ {1, 0, 0, 1},     /* div */ {0, 0, 0, 0},          /* div_fast */ {2, 0, 0, 1},
    /* exp2 */ {2, 0, 0, 1},
};

static uint32_t rng(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* n inputs: special values first, then by turns uniform in [-12, 12], a wide range
 * (sign * 2^[-130, 130] * [1, 2)), and raw bit patterns. */
static void fill_inputs(float *v, int n, uint32_t seed)
{
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, INF, -INF, NAN, FLT_MIN, -FLT_MIN, 1e-45f, -1e-40f,
                                    FLT_MAX, -FLT_MAX, 88.72f, 88.73f, -87.33f, -103.9f, -104.1f, 0.927734375f,
                                    0.92773443f, 0.5f, 2.0f, 0.99999994f, 1.0000001f, 3.92f, -9.0f, 9.0f, 1e-7f};
    int ns = (int)(sizeof special / sizeof special[0]);
    for (int i = 0; i < n; i++) {
        uint32_t r = rng(&seed), r2 = rng(&seed);
        if (i < ns)
            v[i] = special[i];
        else if (i % 3 == 0)
            v[i] = ((float)(r % 1000000) / 1000000.0f - 0.5f) * 24.0f;
        else if (i % 3 == 1)
            v[i] = (r & 1 ? -1.0f : 1.0f) * ldexpf(1.0f + (float)(r2 % 8388608) / 8388608.0f, (int)(r % 261) - 130);
        else
            v[i] = t_u2f(r << 8 | (r2 & 0xff));
    }
}

/* Run k on the GPU and on the interpreter with the same arguments (host arrays, uploaded
 * to both); outputs come back into gpu_out and cpu_out. */
static void run_both(loom_runtime *g, loom_kernel *k, int nblocks, void *x, void *y, size_t in_bytes, void *gpu_out,
                     void *cpu_out, size_t out_bytes)
{
    loom_runtime *c = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_runtime *rts[2] = {g, c};
    void *outs[2] = {gpu_out, cpu_out};
    int grid[3] = {nblocks, 1, 1};
    for (int t = 0; t < 2; t++) {
        loom_buffer *bx = loom_buffer_create(rts[t], in_bytes), *by = loom_buffer_create(rts[t], in_bytes);
        loom_buffer *bo = loom_buffer_create(rts[t], out_bytes);
        cr_assert(bx && by && bo, "%s", loom_runtime_error(rts[t]));
        cr_assert_eq(loom_buffer_upload(bx, x, in_bytes), LOOM_OK);
        cr_assert_eq(loom_buffer_upload(by, y, in_bytes), LOOM_OK);
        memset(outs[t], 0x55, out_bytes);
        cr_assert_eq(loom_buffer_upload(bo, outs[t], out_bytes), LOOM_OK);
        loom_arg a[3] = {LOOM_ARG_BUF(bx), LOOM_ARG_BUF(by), LOOM_ARG_BUF(bo)};
        loom_status st = loom_launch(rts[t], k, grid, a, 3);
        cr_assert_eq(st, LOOM_OK, "%s: %s", t ? "interpreter" : "GPU", loom_runtime_error(rts[t]));
        cr_assert_eq(loom_buffer_download(bo, outs[t], out_bytes), LOOM_OK);
        loom_buffer_destroy(bx);
        loom_buffer_destroy(by);
        loom_buffer_destroy(bo);
    }
    loom_runtime_destroy(c);
}

enum { GN = 8192, GBLOCK = 1024 };

static void gpu_float_ops(loom_runtime *g, loom_dtype dt)
{
    static float xf[GN], yf[GN], gf[NFLOAT_OPS * GN], cf[NFLOAT_OPS * GN];
    static uint16_t xh[GN], yh[GN], gh[NFLOAT_OPS * GN], ch[NFLOAT_OPS * GN];
    fill_inputs(xf, GN, 1);
    fill_inputs(yf, GN, 2);
    bool wide = dt == LOOM_F32;
    for (int i = 0; i < GN; i++) {
        xh[i] = dt == LOOM_F16 ? ir_f32_to_f16(xf[i]) : ir_f32_to_bf16(xf[i]);
        yh[i] = dt == LOOM_F16 ? ir_f32_to_f16(yf[i]) : ir_f32_to_bf16(yf[i]);
    }
    loom_kernel *k = float_kernel(dt, GN, GBLOCK);
    size_t es = loom_dtype_size(dt);
    if (wide)
        run_both(g, k, GN / GBLOCK, xf, yf, GN * es, gf, cf, NFLOAT_OPS * GN * es);
    else
        run_both(g, k, GN / GBLOCK, xh, yh, GN * es, gh, ch, NFLOAT_OPS * GN * es);
    for (int o = 0; o < NFLOAT_OPS; o++) {
        int64_t worst = 0;
        double worst_rel = 0, worst_abs = 0;
        int bad = 0;
        for (int i = 0; i < GN && bad < 5; i++) {
            size_t e = (size_t)o * GN + (size_t)i;
            bool ok;
            if (!wide) {
                int64_t d = ulp_dist16(gh[e], ch[e], dt);
                worst = d > worst ? d : worst;
                ok = d <= bound[o].ulp16;
                if (!ok) {
                    bad++;
                    cr_expect(ok, "%s %s(0x%04x): GPU 0x%04x, interpreter 0x%04x: %lld ulp > %d", loom_dtype_name(dt),
                              float_op_names[o], xh[i], gh[e], ch[e], (long long)d, bound[o].ulp16);
                }
                continue;
            }
            float a = gf[e], b = cf[e], x = xf[i];
            int64_t d = ulp_dist(a, b);
            if (bound[o].rel > 0) { /* tanh: relative error */
                double rel = isinf(b) || b == 0 ? (double)d : fabs((double)a - b) / fabs((double)b);
                ok = d == 0 || (fabsf(b) < FLT_MIN * 2 && d <= 1) || rel <= bound[o].rel;
                if (d != 0 && rel > worst_rel && isfinite(rel))
                    worst_rel = rel;
            } else if (bound[o].abs_near1 > 0 && x >= 0.5f && x <= 2.0f) { /* log near 1: absolute */
                double ad = fabs((double)a - b);
                ok = ad <= bound[o].abs_near1;
                worst_abs = ad > worst_abs ? ad : worst_abs;
            } else {
                ok = d <= bound[o].ulp32;
                worst = d > worst && d != INT64_MAX ? d : worst;
            }
            if (!ok) {
                bad++;
                cr_expect(ok, "f32 %s(%a): GPU %a, interpreter %a (%lld ulp)", float_op_names[o], x, a, b, (long long)d);
            }
        }
        printf("math_gpu: %-4s %-8s worst %lld ulp, relative %.3g (2^%.2f), absolute near 1 %.3g\n",
               loom_dtype_name(dt), float_op_names[o], (long long)worst, worst_rel,
               worst_rel > 0 ? log2(worst_rel) : 0.0, worst_abs);
    }
    loom_kernel_destroy(k);
}

Test(math_gpu, float_ops_within_documented_bounds)
{
    loom_runtime *g = t_gpu_or_skip();
    gpu_float_ops(g, LOOM_F32);
    gpu_float_ops(g, LOOM_F16);
    gpu_float_ops(g, LOOM_BF16);
    loom_runtime_destroy(g);
}

Test(math_gpu, int_ops_bit_exact)
{
    loom_runtime *g = t_gpu_or_skip();
    static int64_t x64[GN], y64[GN], g64[3 * GN], c64[3 * GN];
    static int32_t x32[GN], y32[GN], g32[3 * GN], c32[3 * GN];
    uint32_t s = 7;
    for (int i = 0; i < GN; i++) {
        uint64_t r = (uint64_t)rng(&s) << 40 ^ (uint64_t)rng(&s) << 20 ^ rng(&s);
        x64[i] = (int64_t)r;
        x32[i] = (int32_t)(uint32_t)r;
        y64[i] = (int64_t)(rng(&s) % 72) - 3; /* counts -3 .. 68: out of range both ways */
        y32[i] = (int32_t)(rng(&s) % 40) - 3;
        if (i % 5 == 0)
            y64[i] = y32[i] = (int32_t)(i / 5 % 3 == 0 ? 0 : i / 5 % 3 == 1 ? 31 : 63) & (i % 2 ? 31 : 63);
    }
    loom_kernel *k = int_kernel(LOOM_I32, GN, GBLOCK);
    run_both(g, k, GN / GBLOCK, x32, y32, sizeof x32, g32, c32, sizeof g32);
    loom_kernel_destroy(k);
    k = int_kernel(LOOM_I64, GN, GBLOCK);
    run_both(g, k, GN / GBLOCK, x64, y64, sizeof x64, g64, c64, sizeof g64);
    loom_kernel_destroy(k);
    static const char *names[3] = {"xor", "shl", "shr"};
    int bad = 0;
    for (int e = 0; e < 3 * GN && bad < 10; e++) {
        if (g32[e] != c32[e] && bad++ < 10)
            cr_expect_eq(g32[e], c32[e], "i32 %s(%d, %d): GPU %d, interpreter %d", names[e / GN], x32[e % GN],
                         y32[e % GN], g32[e], c32[e]);
        if (g64[e] != c64[e] && bad++ < 10)
            cr_expect_eq(g64[e], c64[e], "i64 %s(%lld, %lld): GPU %lld, interpreter %lld", names[e / GN],
                         (long long)x64[e % GN], (long long)y64[e % GN], (long long)g64[e], (long long)c64[e]);
    }
    loom_runtime_destroy(g);
}
