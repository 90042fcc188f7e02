/*
 * test_ops.c -- every op of dsl/ops.h run through the interpreter and compared with
 * plain C.
 *
 * Each test builds a small kernel with the DSL, runs it with loom_launch on the
 * interpreter (tests/testutil.h: t_run) and checks the result: elementwise ops on
 * integers and f32 bit-exactly (NaN payloads aside), f16/bf16 rounding against known
 * bit patterns, casts between every pair of element types, reductions along each axis,
 * dot, every memory op with masked tails, fill values and out-of-bounds reports that
 * name this file and the builder line, loops with carried values, if/else and the grid.
 * OP_COVERED(name) records which op each test covers (checked by test_optable.c).
 */
#include "ir.h"
#include "testutil.h"

#include <float.h>
#include <limits.h>

#define INF INFINITY

typedef loom_val (*bin_fn)(loom_src, loom_kernel *, loom_val, loom_val);
typedef loom_val (*un_fn)(loom_src, loom_kernel *, loom_val);

/* One element of any dtype, as the tests hold it: floats as f32, the rest as int64. */
typedef struct elem {
    float f;
    int64_t i;
} elem;

static int is_float(loom_dtype dt)
{
    return dt == LOOM_F16 || dt == LOOM_BF16 || dt == LOOM_F32 || dt == LOOM_E4M3 || dt == LOOM_E5M2;
}

/* Write element e of dtype dt to p[idx] (f16/bf16 rounded to nearest even). */
static void put_elem(void *p, loom_dtype dt, int idx, elem e)
{
    unsigned char *b = (unsigned char *)p + (size_t)idx * loom_dtype_size(dt);
    switch (dt) {
    case LOOM_F16: { uint16_t h = ir_f32_to_f16(e.f); memcpy(b, &h, 2); break; }
    case LOOM_BF16: { uint16_t h = ir_f32_to_bf16(e.f); memcpy(b, &h, 2); break; }
    case LOOM_F32: memcpy(b, &e.f, 4); break;
    case LOOM_I32: { int32_t x = (int32_t)(uint32_t)(uint64_t)e.i; memcpy(b, &x, 4); break; }
    case LOOM_I64: memcpy(b, &e.i, 8); break;
    case LOOM_E4M3:
    case LOOM_E5M2: b[0] = ir_f32_to_fp8(dt, e.f); break; /* tests/test_fp8.c checks it */
    default: b[0] = e.i != 0; break;
    }
}

static elem get_elem(const void *p, loom_dtype dt, int idx)
{
    const unsigned char *b = (const unsigned char *)p + (size_t)idx * loom_dtype_size(dt);
    elem e = {0, 0};
    uint16_t h;
    int32_t x;
    switch (dt) {
    case LOOM_F16: memcpy(&h, b, 2); e.f = ir_f16_to_f32(h); break;
    case LOOM_BF16: memcpy(&h, b, 2); e.f = ir_bf16_to_f32(h); break;
    case LOOM_F32: memcpy(&e.f, b, 4); break;
    case LOOM_I32: memcpy(&x, b, 4); e.i = x; break;
    case LOOM_I64: memcpy(&e.i, b, 8); break;
    case LOOM_E4M3:
    case LOOM_E5M2: e.f = ir_fp8_to_f32(dt, b[0]); break;
    default: e.i = b[0]; break;
    }
    return e;
}

static loom_val zero_i32(loom_kernel *k) { return loom_const_i(k, LOOM_I32, 0); }

/* A kernel over n elements: inputs x, y[, w] of dtype dt loaded whole; out of dtype rdt.
 * The caller builds the op between them. */
typedef struct ew {
    loom_kernel *k;
    loom_val a, b, c, out, zero;
} ew;

static ew ew_begin(loom_dtype dt, loom_dtype rdt, int n, int nin)
{
    ew e = {0};
    e.k = loom_kernel_create("ew", 4);
    loom_val in[3] = {0};
    static const char *names[3] = {"x", "y", "w"};
    for (int i = 0; i < nin; i++)
        in[i] = loom_arg_tensor(e.k, names[i], dt, LOOM_SHAPE1(n), LOOM_IN);
    e.out = loom_arg_tensor(e.k, "out", rdt, LOOM_SHAPE1(n), LOOM_OUT);
    e.zero = zero_i32(e.k);
    loom_val *dst[3] = {&e.a, &e.b, &e.c};
    for (int i = 0; i < nin; i++)
        *dst[i] = loom_load(e.k, in[i], &e.zero, LOOM_SHAPE1(n), LOOM_NONE, 0);
    return e;
}

static void ew_end(ew *e, loom_val r) { loom_store(e->k, e->out, &e->zero, r, LOOM_NONE); }

/* Run a two-input elementwise kernel: out = f(x, y). */
static void run_bin(loom_dtype dt, loom_dtype rdt, int n, bin_fn f, void *x, void *y, void *out)
{
    ew e = ew_begin(dt, rdt, n, 2);
    ew_end(&e, f(LOOM_HERE, e.k, e.a, e.b));
    targ args[] = {TA_BUF(x, (size_t)n * loom_dtype_size(dt)), TA_BUF(y, (size_t)n * loom_dtype_size(dt)),
                   TA_BUF(out, (size_t)n * loom_dtype_size(rdt))};
    T_RUN_OK(e.k, NULL, args, 3);
    loom_kernel_destroy(e.k);
}

static void run_un(loom_dtype dt, int n, un_fn f, void *x, void *out)
{
    ew e = ew_begin(dt, dt, n, 1);
    ew_end(&e, f(LOOM_HERE, e.k, e.a));
    targ args[] = {TA_BUF(x, (size_t)n * loom_dtype_size(dt)), TA_BUF(out, (size_t)n * loom_dtype_size(dt))};
    T_RUN_OK(e.k, NULL, args, 2);
    loom_kernel_destroy(e.k);
}

/* ================================================================ f32 elementwise */

static const float fvals[] = {0.0f,   -0.0f, 1.0f,    -1.0f,  1.5f,   3.0f,    1e-45f, -1e-40f,
                              1e38f,  -1e38f, INF,    -INF,   NAN,    0.1f,    7.0f,   -2.5f,
                              3.4e38f, FLT_MIN, 16777217.0f, 0.3333333f};
#define NF ((int)(sizeof fvals / sizeof fvals[0]))
#define NFF (NF * NF)

static void f32_pairs(float *x, float *y)
{
    for (int i = 0; i < NF; i++)
        for (int j = 0; j < NF; j++) {
            x[i * NF + j] = fvals[i];
            y[i * NF + j] = fvals[j];
        }
}

static float ref_fmin(float a, float b) { return isnan(a) || isnan(b) ? NAN : (a < b ? a : b); }
static float ref_fmax(float a, float b) { return isnan(a) || isnan(b) ? NAN : (a > b ? a : b); }

static float ref_fbin(ir_opkind op, float a, float b)
{
    switch (op) {
    case IR_ADD: return a + b;
    case IR_SUB: return a - b;
    case IR_MUL: return a * b;
    case IR_DIV: return a / b;
    case IR_MIN: return ref_fmin(a, b);
    default: return ref_fmax(a, b);
    }
}

static void check_f32_bin(ir_opkind op, bin_fn f)
{
    static float x[NFF], y[NFF], out[NFF];
    f32_pairs(x, y);
    run_bin(LOOM_F32, LOOM_F32, NFF, f, x, y, out);
    for (int i = 0; i < NFF; i++) {
        float want = ref_fbin(op, x[i], y[i]);
        int ok = t_same_f32(out[i], want) || (out[i] == 0 && want == 0 && (op == IR_MIN || op == IR_MAX));
        cr_expect(ok, "%s(%g, %g) = %g (0x%08x), want %g (0x%08x)", ir_opdescs[op].name, x[i], y[i],
                  out[i], t_f2u(out[i]), want, t_f2u(want));
    }
}

OP_COVERED(add) OP_COVERED(sub) OP_COVERED(mul) OP_COVERED(div) OP_COVERED(min) OP_COVERED(max)
Test(ops_f32, binary_ops_bit_exact_min_max_propagate_nan)
{
    static const struct { ir_opkind op; bin_fn f; } t[] = {{IR_ADD, loom_add_at}, {IR_SUB, loom_sub_at},
        {IR_MUL, loom_mul_at}, {IR_DIV, loom_div_at}, {IR_MIN, loom_min_at}, {IR_MAX, loom_max_at}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        check_f32_bin(t[i].op, t[i].f);
}

OP_COVERED(fma)
Test(ops_f32, fma_is_fused)
{
    enum { N = 5 };
    /* (1+2^-12)^2 - 1 loses the 2^-24 term unless fused */
    float e = 1.0f + 0x1p-12f;
    float x[N] = {e, 2, NAN, INF, 1e30f}, y[N] = {e, 3, 1, 0, 1e30f}, w[N] = {-1, 1, 0, 1, -INF};
    float out[N];
    ew k = ew_begin(LOOM_F32, LOOM_F32, N, 3);
    ew_end(&k, loom_fma(k.k, k.a, k.b, k.c));
    targ args[] = {TA_ARR(x), TA_ARR(y), TA_ARR(w), TA_ARR(out)};
    T_RUN_OK(k.k, NULL, args, 4);
    for (int i = 0; i < N; i++)
        cr_expect(t_same_f32(out[i], fmaf(x[i], y[i], w[i])), "fma %d: %a vs %a", i, out[i],
                  fmaf(x[i], y[i], w[i]));
    cr_expect_eq(out[0], 0x1p-11f + 0x1p-24f);
    loom_kernel_destroy(k.k);
}

static float ref_fun(ir_opkind op, float a)
{
    switch (op) {
    case IR_NEG: return -a;
    case IR_ABS: return fabsf(a);
    case IR_EXP2: return exp2f(a) < FLT_MIN ? 0.0f : exp2f(a); /* subnormal results flushed */
    case IR_LOG2: return log2f(a);
    default: return 1.0f / sqrtf(a);
    }
}

static void check_f32_un(ir_opkind op, un_fn f)
{
    float in[NF], out[NF];
    memcpy(in, fvals, sizeof in); /* t_run writes its arguments back */
    run_un(LOOM_F32, NF, f, in, out);
    for (int i = 0; i < NF; i++) {
        float want = ref_fun(op, fvals[i]);
        cr_expect(t_same_f32(out[i], want), "%s(%g) = %g (0x%08x), want %g (0x%08x)",
                  ir_opdescs[op].name, fvals[i], out[i], t_f2u(out[i]), want, t_f2u(want));
    }
}

OP_COVERED(neg) OP_COVERED(abs) OP_COVERED(exp2) OP_COVERED(log2) OP_COVERED(rsqrt)
Test(ops_f32, unary_ops_bit_exact)
{
    static const struct { ir_opkind op; un_fn f; } t[] = {{IR_NEG, loom_neg_at}, {IR_ABS, loom_abs_at},
        {IR_EXP2, loom_exp2_at}, {IR_LOG2, loom_log2_at}, {IR_RSQRT, loom_rsqrt_at}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        check_f32_un(t[i].op, t[i].f);
}

Test(ops_f32, special_values_of_exp2_log2_rsqrt)
{
    float x[] = {NAN, INF, -INF, 0.0f, -0.0f, -1.0f, 1.0f, 4.0f, -126.0f, -130.0f, -149.0f};
    enum { N = sizeof x / sizeof x[0] };
    float e[N], l[N], r[N];
    run_un(LOOM_F32, N, loom_exp2_at, x, e);
    run_un(LOOM_F32, N, loom_log2_at, x, l);
    run_un(LOOM_F32, N, loom_rsqrt_at, x, r);
    cr_expect(isnan(e[0]) && isnan(l[0]) && isnan(r[0]), "NaN in gives NaN out");
    cr_expect(e[1] == INF && e[2] == 0.0f && e[3] == 1.0f && e[7] == 16.0f);
    cr_expect(e[8] == FLT_MIN && e[9] == 0.0f && e[10] == 0.0f && !signbit(e[10]),
              "exp2 keeps 2^-126 and flushes subnormal results to +0 (the GPU's ex2.approx.ftz)");
    cr_expect(l[1] == INF && isnan(l[2]) && l[3] == -INF && l[4] == -INF && isnan(l[5]) && l[7] == 2.0f);
    cr_expect(r[1] == 0.0f && isnan(r[2]) && r[3] == INF && r[4] == -INF && isnan(r[5]) && r[7] == 0.5f);
}

Test(ops_f32, scalar_operand_is_splatted)
{
    enum { N = 6 };
    float x[N] = {0, 1, 2, 3, -4, NAN}, out[N];
    ew e = ew_begin(LOOM_F32, LOOM_F32, N, 1);
    ew_end(&e, loom_sub(e.k, loom_const_f(e.k, LOOM_F32, 0.5), e.a)); /* scalar first */
    targ args[] = {TA_ARR(x), TA_ARR(out)};
    T_RUN_OK(e.k, NULL, args, 2);
    for (int i = 0; i < N; i++)
        cr_expect(t_same_f32(out[i], 0.5f - x[i]), "%d: %g", i, out[i]);
    loom_kernel_destroy(e.k);
}

/* ================================================================ integers */

static const int64_t i32vals[] = {0, 1, -1, 2, -2, 7, -7, INT32_MAX, INT32_MIN, 12345, -99999, 65536, 46341};
#define NI ((int)(sizeof i32vals / sizeof i32vals[0]))
static const int64_t i64vals[] = {0, 1, -1, 3, -3, INT64_MAX, INT64_MIN, (int64_t)1 << 40, -((int64_t)1 << 33) - 5, INT32_MAX, 4294967296LL};
#define NL ((int)(sizeof i64vals / sizeof i64vals[0]))

/* Plain C two's-complement reference for dtype dt (i32 or i64). */
static int64_t wrap(loom_dtype dt, uint64_t v) { return dt == LOOM_I32 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v; }

static int64_t ref_ibin(loom_dtype dt, ir_opkind op, int64_t a, int64_t b)
{
    int64_t minv = dt == LOOM_I32 ? INT32_MIN : INT64_MIN;
    switch (op) {
    case IR_ADD: return wrap(dt, (uint64_t)a + (uint64_t)b);
    case IR_SUB: return wrap(dt, (uint64_t)a - (uint64_t)b);
    case IR_MUL: return wrap(dt, (uint64_t)a * (uint64_t)b);
    case IR_DIV: return (a == minv && b == -1) ? minv : a / b;
    case IR_REM: return b == -1 ? 0 : a % b;
    case IR_MIN: return a < b ? a : b;
    case IR_MAX: return a > b ? a : b;
    case IR_AND: return a & b;
    default: return a | b;
    }
}

static void check_int_bin(loom_dtype dt, ir_opkind op, bin_fn f)
{
    const int64_t *v = dt == LOOM_I32 ? i32vals : i64vals;
    int nv = dt == LOOM_I32 ? NI : NL, n = 0;
    static int64_t x[NL * NL + NI * NI], y[NL * NL + NI * NI], out[NL * NL + NI * NI];
    static unsigned char bx[sizeof x], by[sizeof x], bo[sizeof x];
    for (int i = 0; i < nv; i++)
        for (int j = 0; j < nv; j++) {
            if ((op == IR_DIV || op == IR_REM) && v[j] == 0)
                continue;
            x[n] = v[i];
            y[n] = v[j];
            put_elem(bx, dt, n, (elem){0, x[n]});
            put_elem(by, dt, n, (elem){0, y[n]});
            n++;
        }
    run_bin(dt, dt, n, f, bx, by, bo);
    for (int i = 0; i < n; i++) {
        out[i] = get_elem(bo, dt, i).i;
        int64_t want = ref_ibin(dt, op, x[i], y[i]);
        cr_expect_eq(out[i], want, "%s %s(%lld, %lld) = %lld, want %lld", loom_dtype_name(dt),
                     ir_opdescs[op].name, (long long)x[i], (long long)y[i], (long long)out[i],
                     (long long)want);
    }
}

Test(ops_int, add_wraps) { check_int_bin(LOOM_I32, IR_ADD, loom_add_at); check_int_bin(LOOM_I64, IR_ADD, loom_add_at); }
Test(ops_int, sub_wraps) { check_int_bin(LOOM_I32, IR_SUB, loom_sub_at); check_int_bin(LOOM_I64, IR_SUB, loom_sub_at); }
Test(ops_int, mul_wraps) { check_int_bin(LOOM_I32, IR_MUL, loom_mul_at); check_int_bin(LOOM_I64, IR_MUL, loom_mul_at); }
Test(ops_int, div_truncates) { check_int_bin(LOOM_I32, IR_DIV, loom_div_at); check_int_bin(LOOM_I64, IR_DIV, loom_div_at); }
OP_COVERED(rem)
Test(ops_int, rem_truncates) { check_int_bin(LOOM_I32, IR_REM, loom_rem_at); check_int_bin(LOOM_I64, IR_REM, loom_rem_at); }
Test(ops_int, min_max) { check_int_bin(LOOM_I32, IR_MIN, loom_min_at); check_int_bin(LOOM_I64, IR_MAX, loom_max_at); }
OP_COVERED(and)
OP_COVERED(or)
Test(ops_int, and_or)
{
    check_int_bin(LOOM_I32, IR_AND, loom_and_at);
    check_int_bin(LOOM_I32, IR_OR, loom_or_at);
    check_int_bin(LOOM_I64, IR_AND, loom_and_at);
    check_int_bin(LOOM_I64, IR_OR, loom_or_at);
}

Test(ops_int, spot_values)
{
    /* a few results spelled out, independent of the reference function */
    int32_t x[] = {INT32_MAX, INT32_MIN, -7, 7, -7, INT32_MIN}, y[] = {1, -1, 2, -2, -2, 2};
    int32_t out[6];
    run_bin(LOOM_I32, LOOM_I32, 6, loom_add_at, x, y, out);
    cr_expect_eq(out[0], INT32_MIN);
    cr_expect_eq(out[1], INT32_MAX);
    run_bin(LOOM_I32, LOOM_I32, 6, loom_div_at, x, y, out);
    cr_expect(out[2] == -3 && out[3] == -3 && out[4] == 3 && out[1] == INT32_MIN, "div truncates");
    run_bin(LOOM_I32, LOOM_I32, 6, loom_rem_at, x, y, out);
    cr_expect(out[2] == -1 && out[3] == 1 && out[4] == -1 && out[1] == 0, "rem has the dividend's sign");
    run_bin(LOOM_I32, LOOM_I32, 6, loom_mul_at, x, y, out);
    cr_expect(out[0] == INT32_MAX && out[5] == 0 && out[1] == INT32_MIN, "mul wraps");
}

static void check_int_un(loom_dtype dt, ir_opkind op, un_fn f)
{
    const int64_t *v = dt == LOOM_I32 ? i32vals : i64vals;
    int nv = dt == LOOM_I32 ? NI : NL;
    unsigned char bx[NL * 8 + NI * 8], bo[sizeof bx];
    for (int i = 0; i < nv; i++)
        put_elem(bx, dt, i, (elem){0, v[i]});
    run_un(dt, nv, f, bx, bo);
    for (int i = 0; i < nv; i++) {
        int64_t want = op == IR_NEG ? wrap(dt, 0 - (uint64_t)v[i])
                                    : (v[i] < 0 ? wrap(dt, 0 - (uint64_t)v[i]) : v[i]);
        cr_expect_eq(get_elem(bo, dt, i).i, want, "%s %s(%lld)", loom_dtype_name(dt), ir_opdescs[op].name,
                     (long long)v[i]);
    }
}

Test(ops_int, neg_abs_wrap)
{
    check_int_un(LOOM_I32, IR_NEG, loom_neg_at);
    check_int_un(LOOM_I32, IR_ABS, loom_abs_at);
    check_int_un(LOOM_I64, IR_NEG, loom_neg_at);
    check_int_un(LOOM_I64, IR_ABS, loom_abs_at);
    int32_t x[1] = {INT32_MIN}, out[1];
    run_un(LOOM_I32, 1, loom_abs_at, x, out);
    cr_expect_eq(out[0], INT32_MIN, "abs(INT32_MIN) wraps to itself");
}

/* Integer division by zero stops the run with LOOM_ERR_RUNTIME naming the op's line. */
static void check_div_zero(bin_fn f, const char *opname)
{
    int32_t x[4] = {1, 2, 3, 4}, y[4] = {1, 1, 0, 1}, out[4];
    ew e = ew_begin(LOOM_I32, LOOM_I32, 4, 2);
    int line = __LINE__; loom_val q = f((loom_src){__FILE__, __LINE__}, e.k, e.a, e.b);
    ew_end(&e, q);
    targ args[] = {TA_ARR(x), TA_ARR(y), TA_ARR(out)};
    cr_assert_eq(t_run(e.k, NULL, args, 3), LOOM_ERR_RUNTIME, "%s by zero: %s", opname, t_last_error);
    cr_expect(strstr(t_last_error, t_loc(__FILE__, line)), "message names the op's line: %s", t_last_error);
    cr_expect(strstr(t_last_error, opname) && strstr(t_last_error, "division by zero"), "%s", t_last_error);
    loom_kernel_destroy(e.k);
}

Test(ops_int, div_by_zero_is_runtime_error) { check_div_zero(loom_div_at, "div"); }
Test(ops_int, rem_by_zero_is_runtime_error) { check_div_zero(loom_rem_at, "rem"); }

Test(ops_f32, float_div_by_zero_is_inf)
{
    float x[3] = {1, -1, 0}, y[3] = {0, 0, 0}, out[3];
    run_bin(LOOM_F32, LOOM_F32, 3, loom_div_at, x, y, out);
    cr_expect(out[0] == INF && out[1] == -INF && isnan(out[2]));
}

/* ================================================================ f16 / bf16 rounding */

/* out = f(x, y) in dt (f16 or bf16) must give the bits w (any NaN where w is a NaN). */
static void check_bin16(loom_dtype dt, bin_fn f, const uint16_t *x, const uint16_t *y, const uint16_t *w, int n)
{
    uint16_t xs[16], ys[16], out[16];
    cr_assert_leq(n, 16);
    memcpy(xs, x, (size_t)n * 2);
    memcpy(ys, y, (size_t)n * 2);
    run_bin(dt, dt, n, f, xs, ys, out);
    for (int i = 0; i < n; i++) {
        if (isnan(get_elem(w, dt, i).f))
            cr_expect(isnan(get_elem(out, dt, i).f), "%d: want NaN, got 0x%04x", i, out[i]);
        else
            cr_expect_eq(out[i], w[i], "%s %d: f(0x%04x, 0x%04x) = 0x%04x, want 0x%04x", loom_dtype_name(dt), i, x[i],
                         y[i], out[i], w[i]);
    }
}

Test(ops_f16, add_rounds_to_nearest_even)
{
    /* x + y in f16:                      want */
    uint16_t x[] = {0x3c00, 0x3c01, 0x7bff, 0x7bff, 0x0001, 0x0001, 0xfbff, 0x7c00, 0x7e00, 0x3c00};
    uint16_t y[] = {0x1000, 0x1000, 0x4c00, 0x4b80, 0x8000, 0x0001, 0xcc00, 0xfc00, 0x3c00, 0x0400};
    uint16_t w[] = {0x3c00, 0x3c02, 0x7c00, 0x7bff, 0x0001, 0x0002, 0xfc00, 0x7e00, 0x7e00, 0x3c00};
    /* 1 + 2^-11 ties to even 1; (1+2^-10) + 2^-11 ties up to 1+2^-9; 65504 + 16 = 65520 -> inf;
     * 65504 + 15 -> 65504; subnormal 2^-24 stays exact; 2^-24 + 2^-24 = 2^-23; -65504 - 16
     * -> -inf; inf + -inf = NaN; NaN stays NaN; 1 + 2^-14 (smallest normal) rounds to 1 */
    check_bin16(LOOM_F16, loom_add_at, x, y, w, (int)(sizeof x / sizeof x[0]));
}

Test(ops_f16, mul_subnormals_and_overflow)
{
    /* 2^-24 * 0.5 = 2^-25 ties to even 0; 3*2^-24 * 0.5 = 1.5*2^-24 ties up to 2^-23;
     * 5*2^-24 * 0.5 = 2.5*2^-24 ties down to 2^-23; 256 * 256 -> inf; -2^-24 * 0.25 -> -0 */
    uint16_t x[] = {0x0001, 0x0003, 0x0005, 0x5c00, 0x8001, 0x3555};
    uint16_t y[] = {0x3800, 0x3800, 0x3800, 0x5c00, 0x3400, 0x4200};
    uint16_t w[] = {0x0000, 0x0002, 0x0002, 0x7c00, 0x8000, 0x3c00};
    check_bin16(LOOM_F16, loom_mul_at, x, y, w, (int)(sizeof x / sizeof x[0]));
}

Test(ops_bf16, add_rounds_to_nearest_even)
{
    /* 1 + 2^-8 ties to even 1; (1+2^-7) + 2^-8 ties up to 1+2^-6; max + max -> inf;
     * max + half an ulp (2^119) -> inf (ties to even, and max's mantissa is odd) */
    uint16_t x[] = {0x3f80, 0x3f81, 0x7f7f, 0x7f7f, 0x3f80};
    uint16_t y[] = {0x3b80, 0x3b80, 0x7f7f, 0x7b00, 0x3380};
    uint16_t w[] = {0x3f80, 0x3f82, 0x7f80, 0x7f80, 0x3f80};
    check_bin16(LOOM_BF16, loom_add_at, x, y, w, (int)(sizeof x / sizeof x[0]));
}

Test(ops_f16, conversions_known_bits)
{
    /* the reference conversions every test above relies on */
    cr_expect_eq(ir_f32_to_f16(65520.0f), 0x7c00);
    cr_expect_eq(ir_f32_to_f16(65519.996f), 0x7bff);
    cr_expect_eq(ir_f32_to_f16(-65520.0f), 0xfc00);
    cr_expect_eq(ir_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    cr_expect_eq(ir_f32_to_f16(1.0f + 0x1p-10f + 0x1p-11f), 0x3c02);
    cr_expect_eq(ir_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    cr_expect_eq(ir_f32_to_f16(0x1p-24f), 0x0001);
    cr_expect_eq(ir_f32_to_f16(0x1p-25f), 0x0000);
    cr_expect_eq(ir_f32_to_f16(0x1.8p-24f), 0x0002);
    cr_expect_eq(ir_f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400); /* rounds up into the normals */
    cr_expect_eq(ir_f32_to_f16(-0.0f), 0x8000);
    cr_expect_eq(ir_f32_to_f16(INF), 0x7c00);
    cr_expect_eq(ir_f32_to_f16(NAN) & 0x7e00, 0x7e00);
    cr_expect_eq(ir_f16_to_f32(0x0001), 0x1p-24f);
    cr_expect_eq(ir_f16_to_f32(0x7bff), 65504.0f);
    cr_expect_eq(ir_f16_to_f32(0xfc00), -INF);
    cr_expect_eq(ir_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    cr_expect_eq(ir_f32_to_bf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82);
    cr_expect_eq(ir_f32_to_bf16(t_u2f(0x7f7fffff)), 0x7f80);
    cr_expect_eq(ir_f32_to_bf16(t_u2f(0x00010000)), 0x0001); /* subnormal stays */
    cr_expect_eq(ir_f32_to_bf16(NAN) & 0x7fc0, 0x7fc0);
    cr_expect_eq(ir_bf16_to_f32(0x3f80), 1.0f);
}

OP_COVERED(const)
Test(ops_const, every_dtype_rounds_or_wraps)
{
    loom_kernel *k = loom_kernel_create("consts", 1);
    loom_dtype dts[] = {LOOM_F16, LOOM_F16, LOOM_F16, LOOM_BF16, LOOM_F32, LOOM_I32, LOOM_I64, LOOM_I1, LOOM_I32};
    enum { N = sizeof dts / sizeof dts[0] };
    loom_val outs[N], z;
    char name[8];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "o%d", i);
        outs[i] = loom_arg_tensor(k, name, dts[i], LOOM_SHAPE1(1), LOOM_OUT);
    }
    z = zero_i32(k);
    loom_val c[N] = {
        loom_const_f(k, LOOM_F16, 65520.0),          /* -> inf */
        loom_const_f(k, LOOM_F16, 1.0 + 0x1p-11),    /* ties to even -> 1 */
        loom_const_f(k, LOOM_F16, 0x1.8p-24),        /* subnormal tie -> 2^-23 */
        loom_const_f(k, LOOM_BF16, 1.0 + 0x1p-7 + 0x1p-8),
        loom_const_f(k, LOOM_F32, 0.1),
        loom_const_i(k, LOOM_I32, 0x100000005LL),    /* wraps to 5 */
        loom_const_i(k, LOOM_I64, INT64_MIN),
        loom_const_i(k, LOOM_I1, 2),                 /* != 0 -> 1 */
        loom_const_f(k, LOOM_I32, -7.9),             /* const_f of an int type truncates */
    };
    for (int i = 0; i < N; i++)
        loom_store(k, outs[i], &z, loom_splat(k, c[i], LOOM_SHAPE1(1)), LOOM_NONE);
    uint16_t h[4];
    float f;
    int32_t i32[2];
    int64_t i64;
    uint8_t b;
    targ args[N] = {TA_BUF(&h[0], 2), TA_BUF(&h[1], 2), TA_BUF(&h[2], 2), TA_BUF(&h[3], 2), TA_BUF(&f, 4),
                    TA_BUF(&i32[0], 4), TA_BUF(&i64, 8), TA_BUF(&b, 1), TA_BUF(&i32[1], 4)};
    T_RUN_OK(k, NULL, args, N);
    cr_expect_eq(h[0], 0x7c00);
    cr_expect_eq(h[1], 0x3c00);
    cr_expect_eq(h[2], 0x0002);
    cr_expect_eq(h[3], 0x3f82);
    cr_expect_eq(f, 0.1f);
    cr_expect_eq(i32[0], 5);
    cr_expect_eq(i64, INT64_MIN);
    cr_expect_eq(b, 1);
    cr_expect_eq(i32[1], -7);
    loom_kernel_destroy(k);
}

/* const_f rounds the double once to f16/bf16 (loom.h: "rounds to the dtype (nearest even)").
 * 1 + 2^-11 + 2^-30 is above the f16 midpoint between 1 and 1+2^-10, so it must round up. */
Test(ops_const, const_f_rounds_double_once)
{
    loom_kernel *k = loom_kernel_create("const_dr", 1);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F16, LOOM_SHAPE1(1), LOOM_OUT);
    loom_val z = zero_i32(k);
    loom_store(k, o, &z, loom_splat(k, loom_const_f(k, LOOM_F16, 1.0 + 0x1p-11 + 0x1p-30), LOOM_SHAPE1(1)),
               LOOM_NONE);
    uint16_t h = 0;
    targ args[] = {TA_BUF(&h, 2)};
    T_RUN_OK(k, NULL, args, 1);
    cr_expect_eq(h, 0x3c01, "got 0x%04x", h);
    loom_kernel_destroy(k);
}

/* ================================================================ cmp, select, not */

static const char *pred_names[] = {"eq", "ne", "lt", "le", "gt", "ge"};

static int ref_cmp_f(int p, float a, float b)
{
    switch (p) {
    case LOOM_EQ: return a == b;
    case LOOM_NE: return !(a == b);
    case LOOM_LT: return a < b;
    case LOOM_LE: return a <= b;
    case LOOM_GT: return a > b;
    default: return a >= b;
    }
}

OP_COVERED(cmp)
Test(ops_cmp, f32_all_predicates_with_nan)
{
    static float x[NFF], y[NFF];
    static uint8_t out[NFF];
    f32_pairs(x, y);
    for (int p = LOOM_EQ; p <= LOOM_GE; p++) {
        ew e = ew_begin(LOOM_F32, LOOM_I1, NFF, 2);
        ew_end(&e, loom_cmp(e.k, (loom_cmp_pred)p, e.a, e.b));
        targ args[] = {TA_ARR(x), TA_ARR(y), TA_ARR(out)};
        T_RUN_OK(e.k, NULL, args, 3);
        for (int i = 0; i < NFF; i++)
            cr_expect_eq(out[i], ref_cmp_f(p, x[i], y[i]), "%s(%g, %g) = %d", pred_names[p], x[i], y[i], out[i]);
        loom_kernel_destroy(e.k);
    }
    /* spelled out: NaN compares false except with ne */
    float nx[1] = {NAN}, ny[1] = {NAN};
    uint8_t r[1];
    for (int p = LOOM_EQ; p <= LOOM_GE; p++) {
        ew e = ew_begin(LOOM_F32, LOOM_I1, 1, 2);
        ew_end(&e, loom_cmp(e.k, (loom_cmp_pred)p, e.a, e.b));
        targ args[] = {TA_ARR(nx), TA_ARR(ny), TA_ARR(r)};
        T_RUN_OK(e.k, NULL, args, 3);
        cr_expect_eq(r[0], p == LOOM_NE, "NaN %s NaN = %d", pred_names[p], r[0]);
        loom_kernel_destroy(e.k);
    }
}

Test(ops_cmp, int_all_predicates)
{
    static int64_t x[NL * NL], y[NL * NL];
    static uint8_t out[NL * NL];
    for (int i = 0; i < NL; i++)
        for (int j = 0; j < NL; j++) {
            x[i * NL + j] = i64vals[i];
            y[i * NL + j] = i64vals[j];
        }
    for (int p = LOOM_EQ; p <= LOOM_GE; p++) {
        ew e = ew_begin(LOOM_I64, LOOM_I1, NL * NL, 2);
        ew_end(&e, loom_cmp(e.k, (loom_cmp_pred)p, e.a, e.b));
        targ args[] = {TA_ARR(x), TA_ARR(y), TA_ARR(out)};
        T_RUN_OK(e.k, NULL, args, 3);
        for (int i = 0; i < NL * NL; i++) {
            int64_t a = x[i], b = y[i];
            int want = p == LOOM_EQ ? a == b : p == LOOM_NE ? a != b : p == LOOM_LT ? a < b
                     : p == LOOM_LE ? a <= b : p == LOOM_GT ? a > b : a >= b;
            cr_expect_eq(out[i], want, "%s(%lld, %lld)", pred_names[p], (long long)a, (long long)b);
        }
        loom_kernel_destroy(e.k);
    }
}

OP_COVERED(select)
Test(ops_select, tile_and_scalar_conditions)
{
    enum { N = 6 };
    uint8_t c[N] = {1, 0, 1, 0, 1, 1};
    float a[N] = {1, 2, NAN, 4, -0.0f, INF}, b[N] = {-1, -2, -3, NAN, 0, 6}, out[N], out2[N];
    int32_t ia[N] = {1, 2, 3, 4, 5, 6}, ib[N] = {-1, -2, -3, -4, -5, -6}, iout[N];
    loom_kernel *k = loom_kernel_create("sel", 4);
    loom_val tc = loom_arg_tensor(k, "c", LOOM_I1, LOOM_SHAPE1(N), LOOM_IN);
    loom_val ta = loom_arg_tensor(k, "a", LOOM_F32, LOOM_SHAPE1(N), LOOM_IN);
    loom_val tb = loom_arg_tensor(k, "b", LOOM_F32, LOOM_SHAPE1(N), LOOM_IN);
    loom_val tia = loom_arg_tensor(k, "ia", LOOM_I32, LOOM_SHAPE1(N), LOOM_IN);
    loom_val tib = loom_arg_tensor(k, "ib", LOOM_I32, LOOM_SHAPE1(N), LOOM_IN);
    loom_val to = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE1(N), LOOM_OUT);
    loom_val to2 = loom_arg_tensor(k, "o2", LOOM_F32, LOOM_SHAPE1(N), LOOM_OUT);
    loom_val tio = loom_arg_tensor(k, "io", LOOM_I32, LOOM_SHAPE1(N), LOOM_OUT);
    loom_val z = zero_i32(k);
    loom_val vc = loom_load(k, tc, &z, LOOM_SHAPE1(N), LOOM_NONE, 0);
    loom_val va = loom_load(k, ta, &z, LOOM_SHAPE1(N), LOOM_NONE, 0);
    loom_val vb = loom_load(k, tb, &z, LOOM_SHAPE1(N), LOOM_NONE, 0);
    loom_store(k, to, &z, loom_select(k, vc, va, vb), LOOM_NONE);
    /* scalar condition (false) picks b everywhere */
    loom_val sc = loom_cmp(k, LOOM_GT, z, loom_const_i(k, LOOM_I32, 0));
    loom_store(k, to2, &z, loom_select(k, sc, va, vb), LOOM_NONE);
    loom_val via = loom_load(k, tia, &z, LOOM_SHAPE1(N), LOOM_NONE, 0);
    loom_val vib = loom_load(k, tib, &z, LOOM_SHAPE1(N), LOOM_NONE, 0);
    loom_store(k, tio, &z, loom_select(k, vc, via, vib), LOOM_NONE);
    targ args[] = {TA_ARR(c), TA_ARR(a), TA_ARR(b), TA_ARR(ia), TA_ARR(ib), TA_ARR(out), TA_ARR(out2), TA_ARR(iout)};
    T_RUN_OK(k, NULL, args, 8);
    for (int i = 0; i < N; i++) {
        cr_expect(t_same_f32(out[i], c[i] ? a[i] : b[i]), "%d", i);
        cr_expect(t_same_f32(out2[i], b[i]), "%d", i);
        cr_expect_eq(iout[i], c[i] ? ia[i] : ib[i]);
    }
    loom_kernel_destroy(k);
}

OP_COVERED(not)
Test(ops_bool, not_and_or_on_i1)
{
    enum { N = 4 };
    uint8_t x[N] = {0, 0, 1, 1}, y[N] = {0, 1, 0, 1}, n[N], a[N], o[N];
    run_un(LOOM_I1, N, loom_not_at, x, n);
    run_bin(LOOM_I1, LOOM_I1, N, loom_and_at, x, y, a);
    run_bin(LOOM_I1, LOOM_I1, N, loom_or_at, x, y, o);
    for (int i = 0; i < N; i++) {
        cr_expect_eq(n[i], !x[i]);
        cr_expect_eq(a[i], x[i] && y[i]);
        cr_expect_eq(o[i], x[i] || y[i]);
    }
}

/* ================================================================ casts */

static const float cast_f[] = {0.0f, -0.0f, 1.5f, -2.5f, 7.99f, -7.99f, 100.0f, 2049.0f, 65519.0f, 1e-8f,
                               3e9f, -3e9f, 1e19f, -1e19f, NAN, INF, -INF, 0.5f};
static const int64_t cast_i[] = {0, 1, -1, 7, -8, 2049, 2051, 65519, 65520, INT32_MAX, INT32_MIN, 300,
                                 (int64_t)1 << 40, -((int64_t)1 << 40) - 3, INT64_MAX, INT64_MIN, 16777217, 2};
#define NC ((int)(sizeof cast_f / sizeof cast_f[0]))

/* Source element i of dtype dt, as the kernel sees it after loading. */
static elem cast_src(loom_dtype dt, int i)
{
    unsigned char tmp[8];
    elem e = is_float(dt) ? (elem){cast_f[i], 0} : (elem){0, cast_i[i]};
    put_elem(tmp, dt, 0, e);
    return get_elem(tmp, dt, 0);
}

/* The documented cast, written independently of the interpreter. */
static elem ref_cast(loom_dtype from, loom_dtype to, elem s)
{
    elem r = {0, 0};
    if (to == LOOM_I1) {
        r.i = is_float(from) ? s.f != 0 : s.i != 0;
    } else if (is_float(to)) {
        float f = is_float(from) ? s.f : (float)s.i;
        unsigned char tmp[4];
        put_elem(tmp, to, 0, (elem){f, 0});
        r = get_elem(tmp, to, 0);
    } else if (is_float(from)) {
        double lo = to == LOOM_I32 ? -2147483648.0 : -9223372036854775808.0;
        int64_t lov = to == LOOM_I32 ? INT32_MIN : INT64_MIN, hiv = to == LOOM_I32 ? INT32_MAX : INT64_MAX;
        if (isnan(s.f))
            r.i = 0;
        else if (s.f <= lo)
            r.i = lov;
        else if (s.f >= -lo) /* 2^31 or 2^63 and above */
            r.i = hiv;
        else
            r.i = (int64_t)s.f; /* C truncates toward zero */
    } else {
        r.i = to == LOOM_I32 ? (int64_t)(int32_t)(uint32_t)(uint64_t)s.i : s.i;
    }
    return r;
}

OP_COVERED(cast)
Test(ops_cast, every_pair_of_dtypes)
{
    for (int from = 0; from < LOOM_DTYPE_COUNT; from++)
        for (int to = 0; to < LOOM_DTYPE_COUNT; to++) {
            unsigned char in[NC * 8], out[NC * 8];
            for (int i = 0; i < NC; i++)
                put_elem(in, (loom_dtype)from, i, is_float((loom_dtype)from) ? (elem){cast_f[i], 0} : (elem){0, cast_i[i]});
            ew e = ew_begin((loom_dtype)from, (loom_dtype)to, NC, 1);
            ew_end(&e, loom_cast(e.k, e.a, (loom_dtype)to));
            targ args[] = {TA_BUF(in, NC * loom_dtype_size((loom_dtype)from)), TA_BUF(out, NC * loom_dtype_size((loom_dtype)to))};
            T_RUN_OK(e.k, NULL, args, 2);
            for (int i = 0; i < NC; i++) {
                elem s = cast_src((loom_dtype)from, i), w = ref_cast((loom_dtype)from, (loom_dtype)to, s);
                elem g = get_elem(out, (loom_dtype)to, i);
                if (is_float((loom_dtype)to))
                    cr_expect(t_same_f32(g.f, w.f), "cast %s->%s of element %d (%g / %lld): got %a, want %a",
                              loom_dtype_name((loom_dtype)from), loom_dtype_name((loom_dtype)to), i, s.f,
                              (long long)s.i, g.f, w.f);
                else
                    cr_expect_eq(g.i, w.i, "cast %s->%s of element %d (%g / %lld): got %lld, want %lld",
                                 loom_dtype_name((loom_dtype)from), loom_dtype_name((loom_dtype)to), i, s.f,
                                 (long long)s.i, (long long)g.i, (long long)w.i);
            }
            loom_kernel_destroy(e.k);
        }
}

Test(ops_cast, spot_values)
{
    float x[] = {2.7f, -2.7f, NAN, 3e9f, -3e9f, INF, 65520.0f, 1.0f + 0x1p-11f};
    enum { N = sizeof x / sizeof x[0] };
    int32_t i[N];
    uint16_t h[N];
    ew e = ew_begin(LOOM_F32, LOOM_I32, N, 1);
    ew_end(&e, loom_cast(e.k, e.a, LOOM_I32));
    targ args[] = {TA_ARR(x), TA_ARR(i)};
    T_RUN_OK(e.k, NULL, args, 2);
    loom_kernel_destroy(e.k);
    cr_expect(i[0] == 2 && i[1] == -2 && i[2] == 0 && i[3] == INT32_MAX && i[4] == INT32_MIN && i[5] == INT32_MAX,
              "%d %d %d %d %d %d", i[0], i[1], i[2], i[3], i[4], i[5]);
    e = ew_begin(LOOM_F32, LOOM_F16, N, 1);
    ew_end(&e, loom_cast(e.k, e.a, LOOM_F16));
    targ args2[] = {TA_ARR(x), TA_ARR(h)};
    T_RUN_OK(e.k, NULL, args2, 2);
    loom_kernel_destroy(e.k);
    cr_expect_eq(h[6], 0x7c00, "65520 -> inf in f16");
    cr_expect_eq(h[7], 0x3c00, "1+2^-11 ties to even");
    cr_expect_eq(h[0], 0x4166, "2.7 -> 0x4166");
}

/* i32 -> bf16 must round once: 2^25 + 2^17 + 1 is just above the bf16 midpoint between
 * 2^25 (0x4c00) and 2^25 + 2^18 (0x4c01). */
Test(ops_cast, int_to_bf16_rounds_once)
{
    int32_t x[1] = {(1 << 25) + (1 << 17) + 1};
    uint16_t h[1];
    ew e = ew_begin(LOOM_I32, LOOM_BF16, 1, 1);
    ew_end(&e, loom_cast(e.k, e.a, LOOM_BF16));
    targ args[] = {TA_ARR(x), TA_ARR(h)};
    T_RUN_OK(e.k, NULL, args, 2);
    cr_expect_eq(h[0], 0x4c01, "got 0x%04x", h[0]);
    loom_kernel_destroy(e.k);
}

/* ================================================================ shapes */

OP_COVERED(arange)
OP_COVERED(splat)
Test(ops_shape, arange_and_splat)
{
    int32_t a[7], b[4], s[5];
    loom_kernel *k = loom_kernel_create("ar", 1);
    loom_val ta = loom_arg_tensor(k, "a", LOOM_I32, LOOM_SHAPE1(7), LOOM_OUT);
    loom_val tb = loom_arg_tensor(k, "b", LOOM_I32, LOOM_SHAPE1(4), LOOM_OUT);
    loom_val ts = loom_arg_tensor(k, "s", LOOM_I32, LOOM_SHAPE1(5), LOOM_OUT);
    loom_val z = zero_i32(k);
    loom_store(k, ta, &z, loom_arange(k, 3, 10), LOOM_NONE);
    loom_store(k, tb, &z, loom_arange(k, -5, -1), LOOM_NONE);
    loom_store(k, ts, &z, loom_splat(k, loom_const_i(k, LOOM_I32, -9), LOOM_SHAPE1(5)), LOOM_NONE);
    targ args[] = {TA_ARR(a), TA_ARR(b), TA_ARR(s)};
    T_RUN_OK(k, NULL, args, 3);
    for (int i = 0; i < 7; i++)
        cr_expect_eq(a[i], 3 + i);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(b[i], -5 + i);
    for (int i = 0; i < 5; i++)
        cr_expect_eq(s[i], -9);
    loom_kernel_destroy(k);
}

OP_COVERED(broadcast)
OP_COVERED(expand_dims)
Test(ops_shape, broadcast_and_expand_dims)
{
    /* v = [0..4); row = expand_dims(v, 0) [1,4]; col = expand_dims(v, 1) [4,1];
     * out1 = broadcast(row, [3,4]), out2 = broadcast(col, [4,3]), out3 = broadcast(v, [2,4]),
     * out4 = row*10 + col as [4,4] via broadcasts of both */
    int32_t o1[3][4], o2[4][3], o3[2][4], o4[4][4];
    loom_kernel *k = loom_kernel_create("bc", 1);
    loom_val t1 = loom_arg_tensor(k, "o1", LOOM_I32, LOOM_SHAPE2(3, 4), LOOM_OUT);
    loom_val t2 = loom_arg_tensor(k, "o2", LOOM_I32, LOOM_SHAPE2(4, 3), LOOM_OUT);
    loom_val t3 = loom_arg_tensor(k, "o3", LOOM_I32, LOOM_SHAPE2(2, 4), LOOM_OUT);
    loom_val t4 = loom_arg_tensor(k, "o4", LOOM_I32, LOOM_SHAPE2(4, 4), LOOM_OUT);
    loom_val z = zero_i32(k), zz[2] = {z, z};
    loom_val v = loom_arange(k, 0, 4);
    loom_val row = loom_expand_dims(k, v, 0), col = loom_expand_dims(k, v, 1);
    loom_store(k, t1, zz, loom_broadcast(k, row, LOOM_SHAPE2(3, 4)), LOOM_NONE);
    loom_store(k, t2, zz, loom_broadcast(k, col, LOOM_SHAPE2(4, 3)), LOOM_NONE);
    loom_store(k, t3, zz, loom_broadcast(k, v, LOOM_SHAPE2(2, 4)), LOOM_NONE);
    loom_val r4 = loom_broadcast(k, row, LOOM_SHAPE2(4, 4)), c4 = loom_broadcast(k, col, LOOM_SHAPE2(4, 4));
    loom_store(k, t4, zz, loom_add(k, loom_mul(k, r4, loom_const_i(k, LOOM_I32, 10)), c4), LOOM_NONE);
    targ args[] = {TA_ARR(o1), TA_ARR(o2), TA_ARR(o3), TA_ARR(o4)};
    T_RUN_OK(k, NULL, args, 4);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            if (i < 3)
                cr_expect_eq(o1[i][j], j);
            if (j < 3)
                cr_expect_eq(o2[i][j], i);
            if (i < 2)
                cr_expect_eq(o3[i][j], j);
            cr_expect_eq(o4[i][j], j * 10 + i);
        }
    loom_kernel_destroy(k);
}

OP_COVERED(trans)
Test(ops_shape, trans_f32_and_i32)
{
    float x[2][3] = {{1, 2, 3}, {4, 5, 6}}, y[3][2];
    int32_t iy[3][2];
    loom_kernel *k = loom_kernel_create("tr", 1);
    loom_val tx = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(2, 3), LOOM_IN);
    loom_val ty = loom_arg_tensor(k, "y", LOOM_F32, LOOM_SHAPE2(3, 2), LOOM_OUT);
    loom_val tiy = loom_arg_tensor(k, "iy", LOOM_I32, LOOM_SHAPE2(3, 2), LOOM_OUT);
    loom_val z = zero_i32(k), zz[2] = {z, z};
    loom_val v = loom_load(k, tx, zz, LOOM_SHAPE2(2, 3), LOOM_NONE, 0);
    loom_store(k, ty, zz, loom_trans(k, v), LOOM_NONE);
    loom_store(k, tiy, zz, loom_trans(k, loom_cast(k, v, LOOM_I32)), LOOM_NONE);
    targ args[] = {TA_ARR(x), TA_ARR(y), TA_ARR(iy)};
    T_RUN_OK(k, NULL, args, 3);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            cr_expect_eq(y[i][j], x[j][i]);
            cr_expect_eq(iy[i][j], (int32_t)x[j][i]);
        }
    loom_kernel_destroy(k);
}

OP_COVERED(slice)
Test(ops_shape, slice_along_each_dim)
{
    /* x [2, 4, 8] f32 (element i = i); s0 = x[1:2], s1 = x[:, 2:4], s2 = x[:, :, 4:8] and
     * an i32 slice of an arange */
    float x[2][4][8], s0[1][4][8], s1[2][2][8], s2[2][4][4];
    int32_t ia[4];
    for (int i = 0; i < 64; i++)
        (&x[0][0][0])[i] = (float)i;
    loom_kernel *k = loom_kernel_create("sl", 1);
    loom_val tx = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE3(2, 4, 8), LOOM_IN);
    loom_val t0 = loom_arg_tensor(k, "s0", LOOM_F32, LOOM_SHAPE3(1, 4, 8), LOOM_OUT);
    loom_val t1 = loom_arg_tensor(k, "s1", LOOM_F32, LOOM_SHAPE3(2, 2, 8), LOOM_OUT);
    loom_val t2 = loom_arg_tensor(k, "s2", LOOM_F32, LOOM_SHAPE3(2, 4, 4), LOOM_OUT);
    loom_val ti = loom_arg_tensor(k, "ia", LOOM_I32, LOOM_SHAPE1(4), LOOM_OUT);
    loom_val z = zero_i32(k), zz[3] = {z, z, z};
    loom_val v = loom_load(k, tx, zz, LOOM_SHAPE3(2, 4, 8), LOOM_NONE, 0);
    loom_store(k, t0, zz, loom_slice(k, v, 0, 1, 1), LOOM_NONE);
    loom_store(k, t1, zz, loom_slice(k, v, 1, 2, 2), LOOM_NONE);
    loom_store(k, t2, zz, loom_slice(k, v, 2, 4, 4), LOOM_NONE);
    loom_store(k, ti, zz, loom_slice(k, loom_arange(k, 10, 26), 0, 12, 4), LOOM_NONE);
    targ args[] = {TA_ARR(x), TA_ARR(s0), TA_ARR(s1), TA_ARR(s2), TA_ARR(ia)};
    T_RUN_OK(k, NULL, args, 5);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 8; c++) {
                if (a == 0)
                    cr_expect_eq(s0[0][b][c], x[1][b][c]);
                if (b < 2)
                    cr_expect_eq(s1[a][b][c], x[a][2 + b][c]);
                if (c < 4)
                    cr_expect_eq(s2[a][b][c], x[a][b][4 + c]);
            }
    for (int i = 0; i < 4; i++)
        cr_expect_eq(ia[i], 22 + i);
    loom_kernel_destroy(k);
}

/* ================================================================ reductions */

enum { RA = 2, RB = 3, RC = 4 };

/* Reduce x[RA][RB][RC] of dtype dt along axis with op; out holds the reduced [..] tile. */
static void run_reduce(loom_dtype dt, ir_opkind op, int axis, const void *x, void *out)
{
    loom_kernel *k = loom_kernel_create("red", 1);
    int64_t d[3] = {RA, RB, RC}, od[2];
    for (int i = 0, j = 0; i < 3; i++)
        if (i != axis)
            od[j++] = d[i];
    loom_val tx = loom_arg_tensor(k, "x", dt, LOOM_SHAPE3(RA, RB, RC), LOOM_IN);
    loom_val to = loom_arg_tensor(k, "o", dt, LOOM_SHAPE2(od[0], od[1]), LOOM_OUT);
    loom_val z = zero_i32(k), zz[3] = {z, z, z};
    loom_val v = loom_load(k, tx, zz, LOOM_SHAPE3(RA, RB, RC), LOOM_NONE, 0);
    loom_val r = op == IR_REDUCE_SUM ? loom_reduce_sum(k, v, axis)
                 : op == IR_REDUCE_MAX ? loom_reduce_max(k, v, axis) : loom_reduce_min(k, v, axis);
    loom_store(k, to, zz, r, LOOM_NONE);
    size_t es = loom_dtype_size(dt);
    targ args[] = {TA_BUF((void *)x, RA * RB * RC * es), TA_BUF(out, (size_t)(od[0] * od[1]) * es)};
    T_RUN_OK(k, NULL, args, 2);
    loom_kernel_destroy(k);
}

/* Plain C: fold x[RA][RB][RC] (f32 or i32) along axis in index order, starting from the
 * first element; integer sums wrap. */
static elem ref_fold(loom_dtype dt, ir_opkind op, elem acc, elem v)
{
    if (dt == LOOM_F32)
        acc.f = op == IR_REDUCE_SUM ? acc.f + v.f : op == IR_REDUCE_MAX ? ref_fmax(acc.f, v.f) : ref_fmin(acc.f, v.f);
    else
        acc.i = op == IR_REDUCE_SUM ? wrap(dt, (uint64_t)acc.i + (uint64_t)v.i)
                : op == IR_REDUCE_MAX ? (v.i > acc.i ? v.i : acc.i) : (v.i < acc.i ? v.i : acc.i);
    return acc;
}

static void ref_reduce(loom_dtype dt, ir_opkind op, int axis, const void *x, void *out)
{
    int d[3] = {RA, RB, RC}, n = 0;
    for (int e = 0; e < RA * RB * RC; e++) {
        int idx[3] = {e / (RB * RC), e / RC % RB, e % RC};
        if (idx[axis] != 0)
            continue;
        elem acc = get_elem(x, dt, e);
        for (int j = 1; j < d[axis]; j++) {
            idx[axis] = j;
            acc = ref_fold(dt, op, acc, get_elem(x, dt, (idx[0] * RB + idx[1]) * RC + idx[2]));
        }
        put_elem(out, dt, n++, acc);
    }
}

OP_COVERED(reduce_sum)
OP_COVERED(reduce_max)
OP_COVERED(reduce_min)
Test(ops_reduce, f32_every_axis_with_nan)
{
    float x[RA * RB * RC], out[RA * RB * RC], want[RA * RB * RC];
    for (int i = 0; i < RA * RB * RC; i++)
        x[i] = (float)((i * 7) % 11) - 5.25f + (float)i * 0.1f;
    x[5] = NAN; /* (0,1,1): poisons one line along each axis */
    x[14] = -INF;
    ir_opkind ops[3] = {IR_REDUCE_SUM, IR_REDUCE_MAX, IR_REDUCE_MIN};
    for (int o = 0; o < 3; o++)
        for (int axis = 0; axis < 3; axis++) {
            run_reduce(LOOM_F32, ops[o], axis, x, out);
            ref_reduce(LOOM_F32, ops[o], axis, x, want);
            int nout = RA * RB * RC / (axis == 0 ? RA : axis == 1 ? RB : RC), nnan = 0;
            for (int i = 0; i < nout; i++) {
                nnan += isnan(out[i]);
                cr_expect(t_same_f32(out[i], want[i]), "%s axis %d [%d]: %g vs %g", ir_opdescs[ops[o]].name,
                          axis, i, out[i], want[i]);
            }
            cr_expect_eq(nnan, 1, "%s axis %d: exactly one line holds the NaN", ir_opdescs[ops[o]].name, axis);
        }
}

Test(ops_reduce, i32_every_axis_wraps)
{
    int32_t x[RA * RB * RC], out[RA * RB * RC], want[RA * RB * RC];
    for (int i = 0; i < RA * RB * RC; i++)
        x[i] = (i % 3 == 0) ? INT32_MAX - i : -(i * 1000003);
    ir_opkind ops[3] = {IR_REDUCE_SUM, IR_REDUCE_MAX, IR_REDUCE_MIN};
    for (int o = 0; o < 3; o++)
        for (int axis = 0; axis < 3; axis++) {
            run_reduce(LOOM_I32, ops[o], axis, x, out);
            ref_reduce(LOOM_I32, ops[o], axis, x, want);
            int nout = RA * RB * RC / (axis == 0 ? RA : axis == 1 ? RB : RC);
            for (int i = 0; i < nout; i++)
                cr_expect_eq(out[i], want[i], "%s axis %d [%d]", ir_opdescs[ops[o]].name, axis, i);
        }
}

Test(ops_reduce, f16_sum_accumulates_in_f32)
{
    /* 2048 + 1 + 1 + 1: rounding to f16 after every step would stay at 2048; one rounding
     * of 2051 ties to even 2052 (0x6802). */
    uint16_t x[4] = {0x6800, 0x3c00, 0x3c00, 0x3c00}, out[1];
    loom_kernel *k = loom_kernel_create("r16", 1);
    loom_val tx = loom_arg_tensor(k, "x", LOOM_F16, LOOM_SHAPE1(4), LOOM_IN);
    loom_val to = loom_arg_tensor(k, "o", LOOM_F16, LOOM_SHAPE1(1), LOOM_OUT);
    loom_val z = zero_i32(k);
    loom_val s = loom_reduce_sum(k, loom_load(k, tx, &z, LOOM_SHAPE1(4), LOOM_NONE, 0), 0);
    loom_store(k, to, &z, loom_expand_dims(k, s, 0), LOOM_NONE);
    targ args[] = {TA_ARR(x), TA_ARR(out)};
    T_RUN_OK(k, NULL, args, 2);
    cr_expect_eq(out[0], 0x6802, "got 0x%04x", out[0]);
    loom_kernel_destroy(k);
}

/* ================================================================ dot */

enum { DM = 3, DK = 4, DN = 5 };

/* out = acc + a @ b with a, b of dtype dt (given as f32 values, rounded on upload). */
static void run_dot(loom_dtype dt, const float *a, const float *b, const float *acc, float *out)
{
    unsigned char ba[DM * DK * 4], bb[DK * DN * 4];
    for (int i = 0; i < DM * DK; i++)
        put_elem(ba, dt, i, (elem){a[i], 0});
    for (int i = 0; i < DK * DN; i++)
        put_elem(bb, dt, i, (elem){b[i], 0});
    loom_kernel *k = loom_kernel_create("dot", 4);
    loom_val ta = loom_arg_tensor(k, "a", dt, LOOM_SHAPE2(DM, DK), LOOM_IN);
    loom_val tb = loom_arg_tensor(k, "b", dt, LOOM_SHAPE2(DK, DN), LOOM_IN);
    loom_val tc = loom_arg_tensor(k, "c", LOOM_F32, LOOM_SHAPE2(DM, DN), LOOM_IN);
    loom_val to = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE2(DM, DN), LOOM_OUT);
    loom_val z = zero_i32(k), zz[2] = {z, z};
    loom_val va = loom_load(k, ta, zz, LOOM_SHAPE2(DM, DK), LOOM_NONE, 0);
    loom_val vb = loom_load(k, tb, zz, LOOM_SHAPE2(DK, DN), LOOM_NONE, 0);
    loom_val vc = loom_load(k, tc, zz, LOOM_SHAPE2(DM, DN), LOOM_NONE, 0);
    loom_store(k, to, zz, loom_dot(k, va, vb, vc), LOOM_NONE);
    targ args[] = {TA_BUF(ba, DM * DK * loom_dtype_size(dt)), TA_BUF(bb, DK * DN * loom_dtype_size(dt)),
                   TA_BUF((void *)acc, DM * DN * 4), TA_BUF(out, DM * DN * 4)};
    T_RUN_OK(k, NULL, args, 4);
    loom_kernel_destroy(k);
}

OP_COVERED(dot)
Test(ops_dot, small_integers_exact_for_every_input_type)
{
    float a[DM * DK], b[DK * DN], acc[DM * DN], out[DM * DN];
    for (int i = 0; i < DM * DK; i++)
        a[i] = (float)(i % 7 - 3);
    for (int i = 0; i < DK * DN; i++)
        b[i] = (float)(i % 5 - 2);
    for (int i = 0; i < DM * DN; i++)
        acc[i] = (float)(100 * i);
    loom_dtype dts[3] = {LOOM_F16, LOOM_BF16, LOOM_F32};
    for (int t = 0; t < 3; t++) {
        run_dot(dts[t], a, b, acc, out);
        for (int m = 0; m < DM; m++)
            for (int n = 0; n < DN; n++) {
                int64_t want = (int64_t)acc[m * DN + n];
                for (int kk = 0; kk < DK; kk++)
                    want += (int64_t)a[m * DK + kk] * (int64_t)b[kk * DN + n];
                cr_expect_eq(out[m * DN + n], (float)want, "%s dot [%d,%d]: %g vs %lld",
                             loom_dtype_name(dts[t]), m, n, out[m * DN + n], (long long)want);
            }
    }
}

Test(ops_dot, f16_inputs_sum_in_f32_in_k_order)
{
    float a[DM * DK], b[DK * DN], acc[DM * DN], out[DM * DN];
    for (int i = 0; i < DM * DK; i++)
        a[i] = ir_round_to(LOOM_F16, 0.1f * (float)(i + 1) - 0.37f);
    for (int i = 0; i < DK * DN; i++)
        b[i] = ir_round_to(LOOM_F16, 1.0f / (float)(i + 3));
    for (int i = 0; i < DM * DN; i++)
        acc[i] = 0.3f * (float)i;
    run_dot(LOOM_F16, a, b, acc, out);
    for (int m = 0; m < DM; m++)
        for (int n = 0; n < DN; n++) {
            float want = acc[m * DN + n];
            for (int kk = 0; kk < DK; kk++)
                want += a[m * DK + kk] * b[kk * DN + n]; /* f16 products are exact in f32 */
            cr_expect(t_same_f32(out[m * DN + n], want), "[%d,%d]: %a vs %a", m, n, out[m * DN + n], want);
        }
}

/* ================================================================ memory */

OP_COVERED(load)
OP_COVERED(store)
Test(ops_mem, tail_of_1d_tile_is_masked)
{
    /* x has 10 elements; tiles of 4 at 8 and at -2 reach outside it: loads give the fill,
     * stores skip (the buffers are bigger than the tensors, so a stray write would show) */
    float x[12], o[12];
    for (int i = 0; i < 12; i++) {
        x[i] = (float)i;
        o[i] = -1;
    }
    loom_kernel *k = loom_kernel_create("tail", 1);
    loom_val tx = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(10), LOOM_IN);
    loom_val to = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE1(10), LOOM_OUT);
    loom_val off = loom_const_i(k, LOOM_I32, 8), neg = loom_const_i(k, LOOM_I64, -2);
    loom_val v = loom_load(k, tx, &off, LOOM_SHAPE1(4), LOOM_NONE, 42.5);
    loom_val w = loom_load(k, tx, &neg, LOOM_SHAPE1(4), LOOM_NONE, -INF);
    loom_store(k, to, &off, loom_add(k, v, loom_const_f(k, LOOM_F32, 100)), LOOM_NONE);
    loom_store(k, to, &neg, w, LOOM_NONE);
    targ args[] = {TA_ARR(x), TA_ARR(o)};
    T_RUN_OK(k, NULL, args, 2);
    float want[12] = {0, 1, -1, -1, -1, -1, -1, -1, 108, 109, -1, -1};
    for (int i = 0; i < 12; i++)
        cr_expect_eq(o[i], want[i], "o[%d] = %g", i, o[i]);
    loom_kernel_destroy(k);
}

Test(ops_mem, load_fill_values_reach_the_output)
{
    /* the fill itself, seen through a store that covers the whole tile in a bigger tensor */
    int32_t x[5] = {1, 2, 3, 4, 5}, o[8];
    float fx[3] = {1, 2, 3}, fo[4];
    loom_kernel *k = loom_kernel_create("fill", 1);
    loom_val tx = loom_arg_tensor(k, "x", LOOM_I32, LOOM_SHAPE1(5), LOOM_IN);
    loom_val tfx = loom_arg_tensor(k, "fx", LOOM_F32, LOOM_SHAPE1(3), LOOM_IN);
    loom_val to = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(8), LOOM_OUT);
    loom_val tfo = loom_arg_tensor(k, "fo", LOOM_F32, LOOM_SHAPE1(4), LOOM_OUT);
    loom_val z = zero_i32(k);
    loom_store(k, to, &z, loom_load(k, tx, &z, LOOM_SHAPE1(8), LOOM_NONE, -7), LOOM_NONE);
    loom_store(k, tfo, &z, loom_load(k, tfx, &z, LOOM_SHAPE1(4), LOOM_NONE, -INFINITY), LOOM_NONE);
    targ args[] = {TA_ARR(x), TA_ARR(fx), TA_ARR(o), TA_ARR(fo)};
    T_RUN_OK(k, NULL, args, 4);
    int32_t want[8] = {1, 2, 3, 4, 5, -7, -7, -7};
    for (int i = 0; i < 8; i++)
        cr_expect_eq(o[i], want[i]);
    cr_expect(fo[0] == 1 && fo[2] == 3 && fo[3] == -INF);
    loom_kernel_destroy(k);
}

Test(ops_mem, tail_of_2d_tile_is_masked_in_both_dims)
{
    enum { R = 5, C = 7 };
    float x[R][C], o[R][C];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            x[i][j] = (float)(10 * i + j);
            o[i][j] = -1;
        }
    /* a 4x4 tile at (4, 4) holds x[4][4..6] and the fill elsewhere; reduce it to check the
     * fill, then store x*2 through a tile at (3, 5) */
    float sums[4];
    loom_kernel *k = loom_kernel_create("tail2", 1);
    loom_val tx = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(R, C), LOOM_IN);
    loom_val to = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE2(R, C), LOOM_OUT);
    loom_val ts = loom_arg_tensor(k, "s", LOOM_F32, LOOM_SHAPE1(4), LOOM_OUT);
    loom_val four = loom_const_i(k, LOOM_I32, 4), z = zero_i32(k);
    loom_val v = loom_load(k, tx, ((loom_val[]){four, four}), LOOM_SHAPE2(4, 4), LOOM_NONE, 1000);
    loom_store(k, ts, &z, loom_reduce_sum(k, v, 1), LOOM_NONE);
    loom_val at[2] = {loom_const_i(k, LOOM_I32, 3), loom_const_i(k, LOOM_I32, 5)};
    loom_val w = loom_load(k, tx, at, LOOM_SHAPE2(4, 4), LOOM_NONE, 0);
    loom_store(k, to, at, loom_mul(k, w, loom_const_f(k, LOOM_F32, 2)), LOOM_NONE);
    targ args[] = {TA_ARR(x), TA_ARR(o), TA_ARR(sums)};
    T_RUN_OK(k, NULL, args, 3);
    cr_expect_eq(sums[0], 44 + 45 + 46 + 1000);
    cr_expect_eq(sums[1], 4000);
    cr_expect_eq(sums[3], 4000);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            cr_expect_eq(o[i][j], (i >= 3 && j >= 5) ? 2 * x[i][j] : -1, "o[%d][%d] = %g", i, j, o[i][j]);
    loom_kernel_destroy(k);
}

Test(ops_mem, explicit_mask_on_load_and_store)
{
    enum { N = 8 };
    float x[N], o[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i + 1);
        o[i] = -1;
    }
    /* load where (i % 2 == 0) with fill 0.5; store where i < 5 */
    loom_kernel *k = loom_kernel_create("mask", 1);
    loom_val tx = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(N), LOOM_IN);
    loom_val to = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE1(N), LOOM_OUT);
    loom_val z = zero_i32(k), i = loom_arange(k, 0, N);
    loom_val even = loom_cmp(k, LOOM_EQ, loom_rem(k, i, loom_const_i(k, LOOM_I32, 2)), z);
    loom_val lt5 = loom_cmp(k, LOOM_LT, i, loom_const_i(k, LOOM_I32, 5));
    loom_val v = loom_load(k, tx, &z, LOOM_SHAPE1(N), even, 0.5);
    loom_store(k, to, &z, v, lt5);
    targ args[] = {TA_ARR(x), TA_ARR(o)};
    T_RUN_OK(k, NULL, args, 2);
    float want[N] = {1, 0.5f, 3, 0.5f, 5, -1, -1, -1};
    for (int j = 0; j < N; j++)
        cr_expect_eq(o[j], want[j], "o[%d] = %g", j, o[j]);
    loom_kernel_destroy(k);
}

Test(ops_mem, strided_tensor_reads_a_transposed_view)
{
    /* x is 3x2 viewed through strides {1, 3} of a row-major 2x3 array */
    float x[2][3] = {{1, 2, 3}, {4, 5, 6}}, o[3][2];
    int64_t strides[2] = {1, 3};
    loom_kernel *k = loom_kernel_create("strided", 1);
    loom_val tx = loom_arg_tensor_strided(k, "x", LOOM_F32, LOOM_SHAPE2(3, 2), strides, LOOM_IN);
    loom_val to = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE2(3, 2), LOOM_OUT);
    loom_val z = zero_i32(k), zz[2] = {z, z};
    loom_store(k, to, zz, loom_load(k, tx, zz, LOOM_SHAPE2(3, 2), LOOM_NONE, 0), LOOM_NONE);
    targ args[] = {TA_ARR(x), TA_ARR(o)};
    T_RUN_OK(k, NULL, args, 2);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++)
            cr_expect_eq(o[i][j], x[j][i]);
    loom_kernel_destroy(k);
}

/* A leading offset outside the tensor: LOOM_ERR_BOUNDS naming this file and the op's line. */
static void check_leading_oob(int store, int64_t bad)
{
    float x[3][4] = {{0}}, o[3][4] = {{0}};
    loom_kernel *k = loom_kernel_create("lead", 1);
    loom_val tx = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(3, 4), LOOM_IN);
    loom_val to = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE2(3, 4), LOOM_OUT);
    loom_val z = zero_i32(k), row = loom_const_i(k, LOOM_I32, bad), off[2] = {row, z};
    int line;
    if (store) {
        loom_val v = loom_load(k, tx, ((loom_val[]){z, z}), LOOM_SHAPE1(4), LOOM_NONE, 0);
        line = __LINE__; loom_store(k, to, off, v, LOOM_NONE);
    } else {
        line = __LINE__; loom_val v = loom_load(k, tx, off, LOOM_SHAPE1(4), LOOM_NONE, 0);
        loom_store(k, to, ((loom_val[]){z, z}), v, LOOM_NONE);
    }
    targ args[] = {TA_ARR(x), TA_ARR(o)};
    cr_assert_eq(t_run(k, NULL, args, 2), LOOM_ERR_BOUNDS, "%s row %lld: %s", store ? "store" : "load",
                 (long long)bad, t_last_error);
    cr_expect(strstr(t_last_error, t_loc(__FILE__, line)), "message names %s: %s", t_loc(__FILE__, line),
              t_last_error);
    cr_expect(strstr(t_last_error, store ? "op 'store'" : "op 'load'"), "%s", t_last_error);
    cr_expect(strstr(t_last_error, store ? "'o'" : "'x'"), "message names the tensor: %s", t_last_error);
    loom_kernel_destroy(k);
}

Test(ops_mem, leading_offset_out_of_range_is_bounds_error)
{
    check_leading_oob(0, 3);
    check_leading_oob(0, -1);
    check_leading_oob(1, 3);
    check_leading_oob(1, -5);
}

OP_COVERED(load_scalar)
Test(ops_mem, load_scalar_reads_one_element)
{
    int32_t t[3][4], o[2];
    int64_t t64[2] = {INT64_MIN, 77};
    for (int i = 0; i < 12; i++)
        t[i / 4][i % 4] = 100 + i;
    loom_kernel *k = loom_kernel_create("ls", 1);
    loom_val tt = loom_arg_tensor(k, "t", LOOM_I32, LOOM_SHAPE2(3, 4), LOOM_IN);
    loom_val tl = loom_arg_tensor(k, "l", LOOM_I64, LOOM_SHAPE1(2), LOOM_IN);
    loom_val to = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(2), LOOM_OUT);
    loom_val one = loom_const_i(k, LOOM_I64, 1);
    loom_val s = loom_load_scalar(k, tt, ((loom_val[]){loom_const_i(k, LOOM_I32, 2), one}));
    loom_val l = loom_cast(k, loom_load_scalar(k, tl, &one), LOOM_I32);
    /* the loaded value used as an offset: o[0..1] = t[2][1], l */
    loom_val both = loom_select(k, loom_cmp(k, LOOM_EQ, loom_arange(k, 0, 2), zero_i32(k)),
                                loom_splat(k, s, LOOM_SHAPE1(2)), loom_splat(k, l, LOOM_SHAPE1(2)));
    loom_store(k, to, ((loom_val[]){zero_i32(k)}), both, LOOM_NONE);
    targ args[] = {TA_ARR(t), TA_ARR(t64), TA_ARR(o)};
    T_RUN_OK(k, NULL, args, 3);
    cr_expect_eq(o[0], 109);
    cr_expect_eq(o[1], 77);
    loom_kernel_destroy(k);
}

Test(ops_mem, load_scalar_out_of_range_is_bounds_error)
{
    int32_t t[4] = {0}, o[1];
    loom_kernel *k = loom_kernel_create("ls_oob", 1);
    loom_val tt = loom_arg_tensor(k, "t", LOOM_I32, LOOM_SHAPE1(4), LOOM_IN);
    loom_val to = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(1), LOOM_OUT);
    int line = __LINE__; loom_val s = loom_load_scalar(k, tt, ((loom_val[]){loom_const_i(k, LOOM_I32, 4)}));
    loom_store(k, to, ((loom_val[]){zero_i32(k)}), loom_splat(k, s, LOOM_SHAPE1(1)), LOOM_NONE);
    targ args[] = {TA_ARR(t), TA_ARR(o)};
    cr_assert_eq(t_run(k, NULL, args, 2), LOOM_ERR_BOUNDS, "%s", t_last_error);
    cr_expect(strstr(t_last_error, t_loc(__FILE__, line)), "%s", t_last_error);
    loom_kernel_destroy(k);
}

/* Gather rows of t[3][5] (t = 10*r + c) into a [4][8] tile from column 2: trailing dims
 * beyond the tensor give the fill. */
static loom_status run_gather(loom_dtype rows_dt, const int64_t *rows, float *o, int *line)
{
    float t[3][5];
    for (int i = 0; i < 15; i++)
        t[i / 5][i % 5] = (float)(10 * (i / 5) + i % 5);
    unsigned char rb[4 * 8];
    for (int i = 0; i < 4; i++)
        put_elem(rb, rows_dt, i, (elem){0, rows[i]});
    loom_kernel *k = loom_kernel_create("gather", 1);
    loom_val tt = loom_arg_tensor(k, "t", LOOM_F32, LOOM_SHAPE2(3, 5), LOOM_IN);
    loom_val tr = loom_arg_tensor(k, "rows", rows_dt, LOOM_SHAPE1(4), LOOM_IN);
    loom_val to = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE2(4, 8), LOOM_OUT);
    loom_val z = zero_i32(k), zz[2] = {z, z};
    loom_val r = loom_load(k, tr, &z, LOOM_SHAPE1(4), LOOM_NONE, 0);
    loom_val offs[2] = {LOOM_NONE, loom_const_i(k, LOOM_I32, 2)}; /* offs[0] is ignored */
    *line = __LINE__; loom_val g = loom_load_rows(k, tt, r, offs, LOOM_SHAPE2(4, 8), -1.0);
    loom_store(k, to, zz, g, LOOM_NONE);
    targ args[] = {TA_ARR(t), TA_BUF(rb, 4 * loom_dtype_size(rows_dt)), TA_BUF(o, 4 * 8 * sizeof(float))};
    loom_status st = t_run(k, NULL, args, 3);
    cr_expect_eq(loom_kernel_num_errors(k), 0, "%s", loom_kernel_errors(k));
    loom_kernel_destroy(k);
    return st;
}

OP_COVERED(load_rows)
Test(ops_mem, load_rows_gathers_with_masked_columns)
{
    int64_t rows[4] = {2, 0, 2, 1};
    loom_dtype dts[2] = {LOOM_I32, LOOM_I64};
    for (int t = 0; t < 2; t++) {
        float o[4][8];
        int line;
        cr_assert_eq(run_gather(dts[t], rows, &o[0][0], &line), LOOM_OK, "%s", t_last_error);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 8; j++)
                cr_expect_eq(o[i][j], j + 2 < 5 ? (float)(10 * rows[i] + j + 2) : -1.0f, "%s rows: o[%d][%d] = %g",
                             loom_dtype_name(dts[t]), i, j, o[i][j]);
    }
}

Test(ops_mem, load_rows_out_of_range_row_is_bounds_error)
{
    int64_t bad[2][4] = {{0, 1, 3, 2}, {-1, 0, 0, 0}};
    for (int t = 0; t < 2; t++) {
        float o[4][8];
        int line;
        cr_assert_eq(run_gather(LOOM_I32, bad[t], &o[0][0], &line), LOOM_ERR_BOUNDS, "%s", t_last_error);
        cr_expect(strstr(t_last_error, t_loc(__FILE__, line)), "message names %s: %s", t_loc(__FILE__, line),
                  t_last_error);
        cr_expect(strstr(t_last_error, "load_rows") && strstr(t_last_error, "'t'"), "%s", t_last_error);
    }
}

/* ================================================================ control flow */

OP_COVERED(for)
OP_COVERED(yield)
Test(ops_for, carried_sum_and_store_in_body)
{
    /* s = sum of iv for iv in [lo, hi) step 3, f = product of 1.5; and o[iv] = iv*iv in the body */
    int32_t o[10], s[1];
    float f[1];
    for (int i = 0; i < 10; i++)
        o[i] = -1;
    loom_kernel *k = loom_kernel_create("for", 1);
    loom_val to = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(10), LOOM_OUT);
    loom_val ts = loom_arg_tensor(k, "s", LOOM_I32, LOOM_SHAPE1(1), LOOM_OUT);
    loom_val tf = loom_arg_tensor(k, "f", LOOM_F32, LOOM_SHAPE1(1), LOOM_OUT);
    loom_val lo = loom_arg_scalar(k, "lo", LOOM_I32);
    loom_val z = zero_i32(k);
    loom_val init[2] = {z, loom_const_f(k, LOOM_F32, 1.0)};
    loom_region_op loop = loom_for_begin(k, lo, loom_const_i(k, LOOM_I32, 10), loom_const_i(k, LOOM_I32, 3), 2, init);
    loom_val iv = loom_for_iv(k, loop);
    loom_store(k, to, &iv, loom_splat(k, loom_mul(k, iv, iv), LOOM_SHAPE1(1)), LOOM_NONE);
    loom_val next[2] = {loom_add(k, loom_for_arg(k, loop, 0), iv),
                        loom_mul(k, loom_for_arg(k, loop, 1), loom_const_f(k, LOOM_F32, 1.5))};
    loom_for_end(k, loop, 2, next);
    loom_store(k, ts, &z, loom_splat(k, loom_for_result(k, loop, 0), LOOM_SHAPE1(1)), LOOM_NONE);
    loom_store(k, tf, &z, loom_splat(k, loom_for_result(k, loop, 1), LOOM_SHAPE1(1)), LOOM_NONE);
    targ args[] = {TA_ARR(o), TA_ARR(s), TA_ARR(f), TA_I32(1)};
    T_RUN_OK(k, NULL, args, 4);
    cr_expect_eq(s[0], 1 + 4 + 7);
    cr_expect_eq(f[0], 1.5f * 1.5f * 1.5f);
    int32_t want[10] = {-1, 1, -1, -1, 16, -1, -1, 49, -1, -1};
    for (int i = 0; i < 10; i++)
        cr_expect_eq(o[i], want[i], "o[%d]", i);
    loom_kernel_destroy(k);
}

/* A loop whose body yields (b, a+b) or (b, a): results after hi-lo trips, from lo/hi given
 * at launch. */
static void run_swap_loop(int fib, int lo, int hi, int32_t *a, int32_t *b)
{
    loom_kernel *k = loom_kernel_create("swap", 1);
    loom_val to = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(2), LOOM_OUT);
    loom_val vlo = loom_arg_scalar(k, "lo", LOOM_I32), vhi = loom_arg_scalar(k, "hi", LOOM_I32);
    loom_val init[2] = {loom_const_i(k, LOOM_I32, 0), loom_const_i(k, LOOM_I32, 1)};
    loom_region_op loop = loom_for_begin(k, vlo, vhi, loom_const_i(k, LOOM_I32, 1), 2, init);
    loom_val x = loom_for_arg(k, loop, 0), y = loom_for_arg(k, loop, 1);
    loom_val next[2] = {y, fib ? loom_add(k, x, y) : x};
    loom_for_end(k, loop, 2, next);
    loom_val r = loom_select(k, loom_cmp(k, LOOM_EQ, loom_arange(k, 0, 2), loom_const_i(k, LOOM_I32, 0)),
                             loom_splat(k, loom_for_result(k, loop, 0), LOOM_SHAPE1(2)),
                             loom_splat(k, loom_for_result(k, loop, 1), LOOM_SHAPE1(2)));
    loom_store(k, to, ((loom_val[]){loom_const_i(k, LOOM_I32, 0)}), r, LOOM_NONE);
    int32_t o[2] = {-5, -5};
    targ args[] = {TA_ARR(o), TA_I32(lo), TA_I32(hi)};
    T_RUN_OK(k, NULL, args, 3);
    *a = o[0];
    *b = o[1];
    loom_kernel_destroy(k);
}

Test(ops_for, swapping_carried_values)
{
    int32_t a, b;
    run_swap_loop(0, 0, 3, &a, &b); /* odd trip count: swapped */
    cr_expect(a == 1 && b == 0, "%d %d", a, b);
    run_swap_loop(0, 0, 4, &a, &b);
    cr_expect(a == 0 && b == 1, "%d %d", a, b);
    run_swap_loop(1, 0, 10, &a, &b); /* Fibonacci: (F10, F11) */
    cr_expect(a == 55 && b == 89, "%d %d", a, b);
}

Test(ops_for, zero_trip_loops_give_the_initial_values)
{
    int32_t a, b;
    run_swap_loop(1, 5, 5, &a, &b);
    cr_expect(a == 0 && b == 1, "lo == hi: %d %d", a, b);
    run_swap_loop(1, 7, -3, &a, &b);
    cr_expect(a == 0 && b == 1, "lo > hi: %d %d", a, b);
}

Test(ops_for, nested_loops_carry_tiles)
{
    /* acc[4] += arange(0,4) * i * j for i < 3, j < i (tile carried through both loops) */
    int32_t o[4];
    loom_kernel *k = loom_kernel_create("nest", 1);
    loom_val to = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(4), LOOM_OUT);
    loom_val z = zero_i32(k), one = loom_const_i(k, LOOM_I32, 1);
    loom_val acc0 = loom_splat(k, z, LOOM_SHAPE1(4)), ar = loom_arange(k, 0, 4);
    loom_region_op outer = loom_for_begin(k, z, loom_const_i(k, LOOM_I32, 3), one, 1, &acc0);
    loom_val i = loom_for_iv(k, outer), a1 = loom_for_arg(k, outer, 0);
    loom_region_op inner = loom_for_begin(k, z, i, one, 1, &a1);
    loom_val j = loom_for_iv(k, inner);
    loom_val upd = loom_add(k, loom_for_arg(k, inner, 0), loom_mul(k, ar, loom_mul(k, i, j)));
    loom_for_end(k, inner, 1, &upd);
    loom_val r = loom_for_result(k, inner, 0);
    loom_for_end(k, outer, 1, &r);
    loom_store(k, to, &z, loom_for_result(k, outer, 0), LOOM_NONE);
    targ args[] = {TA_ARR(o)};
    T_RUN_OK(k, NULL, args, 1);
    for (int e = 0; e < 4; e++)
        cr_expect_eq(o[e], e * (1 * 0 + 2 * 0 + 2 * 1), "o[%d] = %d", e, o[e]);
    loom_kernel_destroy(k);
}

Test(ops_for, non_positive_step_is_runtime_error)
{
    loom_kernel *k = loom_kernel_create("step0", 1);
    loom_val step = loom_arg_scalar(k, "step", LOOM_I32);
    loom_val z = zero_i32(k);
    int line = __LINE__; loom_region_op loop = loom_for_begin(k, z, loom_const_i(k, LOOM_I32, 4), step, 0, NULL);
    loom_for_end(k, loop, 0, NULL);
    targ args[] = {TA_I32(0)};
    cr_assert_eq(t_run(k, NULL, args, 1), LOOM_ERR_RUNTIME, "%s", t_last_error);
    cr_expect(strstr(t_last_error, t_loc(__FILE__, line)) && strstr(t_last_error, "step"), "%s", t_last_error);
    loom_kernel_destroy(k);
}

OP_COVERED(if)
Test(ops_if, else_branch_results_and_if_without_else)
{
    /* per program p of a grid of 4: r = p < 2 ? p*10 : -p (an if with a result);
     * and if (p == 3) store 99 to flag[0] (an if without else and without results) */
    int32_t o[4] = {0}, flag[1] = {0};
    loom_kernel *k = loom_kernel_create("ifelse", 1);
    loom_val to = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(4), LOOM_OUT);
    loom_val tf = loom_arg_tensor(k, "flag", LOOM_I32, LOOM_SHAPE1(1), LOOM_OUT);
    loom_val p = loom_program_id(k, 0), z = zero_i32(k);
    loom_region_op br = loom_if_begin(k, loom_cmp(k, LOOM_LT, p, loom_const_i(k, LOOM_I32, 2)), 1);
    loom_val t = loom_splat(k, loom_mul(k, p, loom_const_i(k, LOOM_I32, 10)), LOOM_SHAPE1(1));
    loom_else(k, br, 1, &t);
    loom_val e = loom_splat(k, loom_neg(k, p), LOOM_SHAPE1(1));
    loom_if_end(k, br, 1, &e);
    loom_store(k, to, &p, loom_if_result(k, br, 0), LOOM_NONE);
    loom_region_op only = loom_if_begin(k, loom_cmp(k, LOOM_EQ, p, loom_const_i(k, LOOM_I32, 3)), 0);
    loom_store(k, tf, &z, loom_splat(k, loom_const_i(k, LOOM_I32, 99), LOOM_SHAPE1(1)), LOOM_NONE);
    loom_if_end(k, only, 0, NULL);
    targ args[] = {TA_ARR(o), TA_ARR(flag)};
    T_RUN_OK(k, ((int[3]){4, 1, 1}), args, 2);
    cr_expect(o[0] == 0 && o[1] == 10 && o[2] == -2 && o[3] == -3, "%d %d %d %d", o[0], o[1], o[2], o[3]);
    cr_expect_eq(flag[0], 99);
    loom_kernel_destroy(k);
}

Test(ops_if, nested_in_a_loop_with_carried_value)
{
    /* count of odd iv in [0, 9) computed with an if inside the loop */
    int32_t o[1];
    loom_kernel *k = loom_kernel_create("ifloop", 1);
    loom_val to = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(1), LOOM_OUT);
    loom_val z = zero_i32(k), one = loom_const_i(k, LOOM_I32, 1);
    loom_region_op loop = loom_for_begin(k, z, loom_const_i(k, LOOM_I32, 9), one, 1, &z);
    loom_val iv = loom_for_iv(k, loop), c = loom_for_arg(k, loop, 0);
    loom_region_op br = loom_if_begin(k, loom_cmp(k, LOOM_EQ, loom_rem(k, iv, loom_const_i(k, LOOM_I32, 2)), one), 1);
    loom_val inc = loom_add(k, c, one);
    loom_else(k, br, 1, &inc);
    loom_if_end(k, br, 1, &c);
    loom_val r = loom_if_result(k, br, 0);
    loom_for_end(k, loop, 1, &r);
    loom_store(k, to, &z, loom_splat(k, loom_for_result(k, loop, 0), LOOM_SHAPE1(1)), LOOM_NONE);
    targ args[] = {TA_ARR(o)};
    T_RUN_OK(k, NULL, args, 1);
    cr_expect_eq(o[0], 4);
    loom_kernel_destroy(k);
}

/* ================================================================ grid */

OP_COVERED(program_id)
OP_COVERED(num_programs)
Test(ops_grid, program_id_and_num_programs_over_3d_grid)
{
    enum { GX = 2, GY = 3, GZ = 4 };
    /* o[z][y][x][0..5] = (x, y, z, nx, ny, nz) */
    int32_t o[GZ][GY][GX][6];
    memset(o, 0xff, sizeof o);
    loom_kernel *k = loom_kernel_create("grid", 1);
    loom_val to = loom_arg_tensor(k, "o", LOOM_I32, ((loom_shape){4, {GZ, GY, GX, 6}}), LOOM_OUT);
    loom_val p[6];
    for (int a = 0; a < 3; a++) {
        p[a] = loom_program_id(k, a);
        p[3 + a] = loom_num_programs(k, a);
    }
    loom_val ar = loom_arange(k, 0, 6), v = loom_splat(k, loom_const_i(k, LOOM_I32, 0), LOOM_SHAPE1(6));
    for (int i = 0; i < 6; i++)
        v = loom_select(k, loom_cmp(k, LOOM_EQ, ar, loom_const_i(k, LOOM_I32, i)), loom_splat(k, p[i], LOOM_SHAPE1(6)), v);
    loom_store(k, to, ((loom_val[]){p[2], p[1], p[0], zero_i32(k)}), v, LOOM_NONE);
    targ args[] = {TA_ARR(o)};
    T_RUN_OK(k, ((int[3]){GX, GY, GZ}), args, 1);
    for (int z = 0; z < GZ; z++)
        for (int y = 0; y < GY; y++)
            for (int x = 0; x < GX; x++) {
                int32_t *r = o[z][y][x];
                cr_expect(r[0] == x && r[1] == y && r[2] == z && r[3] == GX && r[4] == GY && r[5] == GZ,
                          "program (%d,%d,%d): %d %d %d %d %d %d", x, y, z, r[0], r[1], r[2], r[3], r[4], r[5]);
            }
    loom_kernel_destroy(k);
}
