/*
 * test_fp8.c -- the FP8 element types e4m3 and e5m2 (docs/dsl.md, "FP8").
 *
 *   fp8        the library's encoding (dsl/fp8.c) against a reference written here in a
 *              different way (the nearest of the format's values by search, ties to the
 *              even code, beyond the largest finite value saturated), bit for bit, on
 *              every f16 and bf16 pattern and about a million f32 patterns (every
 *              value, midpoint and neighbour of a midpoint of both formats, f32
 *              subnormals, infinities, NaNs of both signs and several payloads, and a
 *              stride over all 2^32 patterns); decoding of all 256 codes of each format;
 *              kernels that load FP8, cast, compute in f32, cast back and store, run on
 *              the interpreter; their PTX assembled by ptxas; the rules' refusals.
 *   fp8_gpu    the same conversions on the GPU (loom's code generator, the hardware's
 *              cvt) against the interpreter, bit for bit: all 65536 f16 and bf16
 *              patterns and the f32 sweep encoded to e4m3 and e5m2, all 256 codes of
 *              each decoded to f16, f32, bf16 and the other FP8 type.  It skips without
 *              a GPU.
 */
#include "ir.h"
#include "testutil.h"

#include "cg.h"

#include <float.h>

/* ---------------------------------------------------------------- the reference */

/* The value of a code, from the format's definition (NAN for NaN codes; e5m2 has
 * infinities). */
static double ref_value(loom_dtype dt, unsigned c)
{
    int mb = dt == LOOM_E4M3 ? 3 : 2, bias = dt == LOOM_E4M3 ? 7 : 15, emax = dt == LOOM_E4M3 ? 15 : 31;
    unsigned mag = c & 0x7f, e = mag >> mb, m = mag & ((1u << mb) - 1);
    double s = c & 0x80 ? -1.0 : 1.0;
    if (dt == LOOM_E4M3 && mag == 0x7f)
        return NAN;
    if (dt == LOOM_E5M2 && e == (unsigned)emax)
        return m ? NAN : s * INFINITY;
    double frac = (double)m / (double)(1u << mb);
    return e == 0 ? s * frac * ldexp(1.0, 1 - bias) : s * (1.0 + frac) * ldexp(1.0, (int)e - bias);
}

static unsigned ref_maxmag(loom_dtype dt) { return dt == LOOM_E4M3 ? 0x7e : 0x7b; }

/* Nearest even with saturation, by searching the positive codes (their values grow with
 * the code); NaN: 0x7f in both formats, the code an H100's cvt gives every NaN. */
static unsigned ref_encode(loom_dtype dt, float x)
{
    uint32_t u = t_f2u(x);
    unsigned sign = (u >> 24) & 0x80;
    if (isnan(x))
        return 0x7f;
    double a = fabs((double)x);
    unsigned top = ref_maxmag(dt);
    if (a >= ref_value(dt, top))
        return sign | top;
    unsigned lo = 0, hi = top; /* value(lo) <= a < value(hi) */
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (ref_value(dt, mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - ref_value(dt, lo), dh = ref_value(dt, hi) - a;
    unsigned c = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return sign | c;
}

static bool is_nan_code(loom_dtype dt, unsigned c)
{
    return dt == LOOM_E4M3 ? (c & 0x7f) == 0x7f : (c & 0x7f) > 0x7c;
}

/* ---------------------------------------------------------------- inputs */

static uint32_t *f32_sweep(int *count)
{
    int cap = 1 << 21, n = 0;
    uint32_t *v = malloc((size_t)cap * sizeof *v);
    cr_assert(v);
#define PUT(x) (v[n++] = (x))
    static const loom_dtype dts[2] = {LOOM_E4M3, LOOM_E5M2};
    for (int d = 0; d < 2; d++)
        for (unsigned c = 0; c < 0x7f; c++) {
            double a = ref_value(dts[d], c), b = ref_value(dts[d], c + 1);
            if (!isfinite(a))
                continue;
            float fa = (float)a;
            PUT(t_f2u(fa));
            PUT(t_f2u(nextafterf(fa, INFINITY)));
            PUT(t_f2u(nextafterf(fa, 0)));
            double mid = isfinite(b) ? (a + b) / 2 : a + (a - ref_value(dts[d], c - 1)) / 2; /* past the top too */
            float fm = (float)mid;                                                          /* exact: a tie */
            PUT(t_f2u(fm));
            PUT(t_f2u(nextafterf(fm, INFINITY)));
            PUT(t_f2u(nextafterf(fm, 0)));
        }
    static const float specials[] = {0.0f, INFINITY, FLT_MAX, FLT_MIN, 1e-45f, 1e-40f, 448.0f, 449.0f,
                                     464.0f, 465.0f, 480.0f, 57344.0f, 61439.0f, 61440.0f, 65504.0f, 1e9f,
                                     0x1p-9f, 0x1p-10f, 0x1.000002p-10f, 0x1p-16f, 0x1p-17f, 0x1.000002p-17f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        PUT(t_f2u(specials[i]));
    static const uint32_t nans[] = {0x7fc00000u, 0x7fffffffu, 0x7f800001u, 0x7fa00000u, 0x7f900000u, 0x7fe00000u,
                                    0x7fbfffffu, 0x7fdfffffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++)
        PUT(nans[i]);
    for (uint64_t u = 0; u < (UINT64_C(1) << 31); u += 4099) /* positive patterns, all exponents */
        PUT((uint32_t)u);
    int half = n;
    for (int i = 0; i < half; i++) /* and each negated */
        PUT(v[i] ^ 0x80000000u);
#undef PUT
    cr_assert(n <= cap);
    *count = n;
    return v;
}

/* ---------------------------------------------------------------- encoding and decoding */

Test(fp8, decode_every_code_exactly)
{
    static const loom_dtype dts[2] = {LOOM_E4M3, LOOM_E5M2};
    for (int d = 0; d < 2; d++)
        for (unsigned c = 0; c < 256; c++) {
            double want = ref_value(dts[d], c);
            float got = ir_fp8_to_f32(dts[d], (uint8_t)c);
            if (isnan(want)) {
                cr_expect(isnan(got) && !!signbit(got) == (int)(c >> 7), "%s 0x%02x: %a, want a NaN of its sign",
                          loom_dtype_name(dts[d]), c, got);
                continue;
            }
            cr_expect((double)got == want && !!signbit(got) == !!signbit(want), "%s 0x%02x: %a, want %a",
                      loom_dtype_name(dts[d]), c, got, want);
            /* every value is also an f16 value */
            cr_expect(t_f2u(ir_f16_to_f32(ir_f32_to_f16(got))) == t_f2u(got));
        }
    cr_expect(ir_fp8_to_f32(LOOM_E4M3, 0x7e) == 448.0f && ir_fp8_to_f32(LOOM_E5M2, 0x7b) == 57344.0f);
    cr_expect(ir_fp8_to_f32(LOOM_E4M3, 0x01) == 0x1p-9f && ir_fp8_to_f32(LOOM_E5M2, 0x01) == 0x1p-16f);
    cr_expect(ir_fp8_to_f32(LOOM_E4M3, 0x08) == 0x1p-6f && ir_fp8_to_f32(LOOM_E5M2, 0x04) == 0x1p-14f);
}

Test(fp8, encode_round_trips_every_code)
{
    static const loom_dtype dts[2] = {LOOM_E4M3, LOOM_E5M2};
    for (int d = 0; d < 2; d++)
        for (unsigned c = 0; c < 256; c++) {
            unsigned back = ir_f32_to_fp8(dts[d], ir_fp8_to_f32(dts[d], (uint8_t)c));
            if (dts[d] == LOOM_E5M2 && (c & 0x7f) == 0x7c) /* infinity: saturates */
                cr_expect_eq(back, (c & 0x80) | 0x7b, "e5m2 0x%02x -> 0x%02x", c, back);
            else if (is_nan_code(dts[d], c)) /* every NaN comes back as the one NaN code */
                cr_expect_eq(back, 0x7f, "%s 0x%02x -> 0x%02x", loom_dtype_name(dts[d]), c, back);
            else
                cr_expect_eq(back, c, "%s 0x%02x -> 0x%02x", loom_dtype_name(dts[d]), c, back);
        }
}

static void check_encode(loom_dtype dt, float x, int *bad)
{
    unsigned want = ref_encode(dt, x), got = ir_f32_to_fp8(dt, x);
    if (got != want && (*bad)++ < 10)
        cr_expect_eq(got, want, "%s(%a = 0x%08x): 0x%02x, want 0x%02x", loom_dtype_name(dt), x, t_f2u(x), got, want);
}

Test(fp8, encode_every_f16_and_bf16_pattern)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        check_encode(LOOM_E4M3, ir_f16_to_f32((uint16_t)h), &bad);
        check_encode(LOOM_E5M2, ir_f16_to_f32((uint16_t)h), &bad);
        check_encode(LOOM_E4M3, ir_bf16_to_f32((uint16_t)h), &bad);
        check_encode(LOOM_E5M2, ir_bf16_to_f32((uint16_t)h), &bad);
    }
    cr_expect_eq(bad, 0, "%d mismatches", bad);
}

Test(fp8, encode_f32_sweep)
{
    int n, bad = 0;
    uint32_t *v = f32_sweep(&n);
    cr_assert_gt(n, 1000000);
    for (int i = 0; i < n; i++) {
        check_encode(LOOM_E4M3, t_u2f(v[i]), &bad);
        check_encode(LOOM_E5M2, t_u2f(v[i]), &bad);
    }
    free(v);
    cr_expect_eq(bad, 0, "%d mismatches", bad);
}

/* The rules spelled out, one value each. */
Test(fp8, encode_rules_spelled_out)
{
    struct {
        loom_dtype dt;
        float x;
        unsigned want;
    } c[] = {
        {LOOM_E4M3, 1.0f, 0x38},          {LOOM_E4M3, -1.0f, 0xb8},          {LOOM_E4M3, 448.0f, 0x7e},
        {LOOM_E4M3, 464.0f, 0x7e},        {LOOM_E4M3, 1e6f, 0x7e},           {LOOM_E4M3, INFINITY, 0x7e},
        {LOOM_E4M3, -INFINITY, 0xfe},     {LOOM_E4M3, NAN, 0x7f},            {LOOM_E4M3, -NAN, 0x7f},
        {LOOM_E4M3, -0.0f, 0x80},         {LOOM_E4M3, 0x1p-10f, 0x00},       {LOOM_E4M3, 0x1.8p-9f, 0x02},
        {LOOM_E4M3, 0x1.000002p-10f, 0x01}, {LOOM_E4M3, -1e-9f, 0x80},       {LOOM_E4M3, 1.0625f, 0x38},
        {LOOM_E4M3, 1.1875f, 0x3a},       {LOOM_E5M2, 57344.0f, 0x7b},       {LOOM_E5M2, 61440.0f, 0x7b},
        {LOOM_E5M2, INFINITY, 0x7b},      {LOOM_E5M2, -INFINITY, 0xfb},      {LOOM_E5M2, 0x1p-16f, 0x01},
        {LOOM_E5M2, 0x1p-17f, 0x00},      {LOOM_E5M2, 1.125f, 0x3c},         {LOOM_E5M2, 1.375f, 0x3e},
        {LOOM_E5M2, t_u2f(0x7fc00000u), 0x7f}, {LOOM_E5M2, t_u2f(0x7fe00000u), 0x7f},
        {LOOM_E5M2, t_u2f(0xffffffffu), 0x7f},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        cr_expect_eq(ir_f32_to_fp8(c[i].dt, c[i].x), c[i].want, "%s(%a): 0x%02x, want 0x%02x",
                     loom_dtype_name(c[i].dt), c[i].x, ir_f32_to_fp8(c[i].dt, c[i].x), c[i].want);
    cr_expect_str_eq(loom_dtype_name(LOOM_E4M3), "e4m3");
    cr_expect_str_eq(loom_dtype_name(LOOM_E5M2), "e5m2");
    cr_expect_eq(loom_dtype_size(LOOM_E4M3), 1);
    cr_expect_eq(loom_dtype_size(LOOM_E5M2), 1);
    cr_expect_eq(LOOM_E4M3, 6, "dtype values are stored in caches and AOT files: new ones go at the end");
    cr_expect_eq(LOOM_E5M2, 7);
}

/* ---------------------------------------------------------------- kernels */

/* Each of n inputs x (dtype `from`) cast to each dtype of to[] and stored, one output
 * row per target: o[t][i] = cast(x[i]).  Tiles of `block`, the last one masked. */
static loom_kernel *cast_kernel(const char *name, loom_dtype from, const loom_dtype *to, int nto, int64_t n, int block)
{
    loom_kernel *k = loom_kernel_create(name, 4);
    loom_val x = loom_arg_tensor(k, "x", from, LOOM_SHAPE1(n), LOOM_IN);
    loom_val o[4];
    for (int t = 0; t < nto; t++) {
        char nm[8];
        snprintf(nm, sizeof nm, "o%d", t);
        o[t] = loom_arg_tensor(k, nm, to[t], LOOM_SHAPE1(n), LOOM_OUT);
    }
    loom_val off = loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, block));
    loom_val idx = loom_add(k, loom_arange(k, 0, block), loom_splat(k, off, LOOM_SHAPE1(block)));
    loom_val m = loom_cmp(k, LOOM_LT, idx, loom_splat(k, loom_const_i(k, LOOM_I32, (int64_t)n), LOOM_SHAPE1(block)));
    loom_val v = loom_load(k, x, &off, LOOM_SHAPE1(block), m, 0);
    for (int t = 0; t < nto; t++)
        loom_store(k, o[t], &off, loom_cast(k, v, to[t]), m);
    return k;
}

/* load FP8 -> f32 -> y = x * s + b in f32 -> FP8 -> store; and the f32 result too. */
static loom_kernel *math_kernel(loom_dtype dt, int64_t n, int block)
{
    loom_kernel *k = loom_kernel_create("fp8_math", 4);
    loom_val x = loom_arg_tensor(k, "x", dt, LOOM_SHAPE1(n), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", dt, LOOM_SHAPE1(n), LOOM_OUT);
    loom_val z = loom_arg_tensor(k, "z", LOOM_F32, LOOM_SHAPE1(n), LOOM_OUT);
    loom_val s = loom_arg_scalar(k, "s", LOOM_F32);
    loom_val off = loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, block));
    loom_val idx = loom_add(k, loom_arange(k, 0, block), loom_splat(k, off, LOOM_SHAPE1(block)));
    loom_val m = loom_cmp(k, LOOM_LT, idx, loom_splat(k, loom_const_i(k, LOOM_I32, (int64_t)n), LOOM_SHAPE1(block)));
    loom_val v = loom_cast(k, loom_load(k, x, &off, LOOM_SHAPE1(block), m, 0), LOOM_F32);
    loom_val r = loom_fma(k, v, s, loom_const_f(k, LOOM_F32, 1.0));
    loom_store(k, z, &off, r, m);
    loom_store(k, y, &off, loom_cast(k, r, dt), m);
    return k;
}

Test(fp8, kernel_load_cast_math_cast_store)
{
    enum { N = 300 };
    static const loom_dtype dts[2] = {LOOM_E4M3, LOOM_E5M2};
    for (int d = 0; d < 2; d++) {
        loom_dtype dt = dts[d];
        uint8_t x[N], y[N];
        float z[N];
        for (int i = 0; i < N; i++)
            x[i] = (uint8_t)(i * 37 + 11);
        memset(y, 0xaa, sizeof y);
        loom_kernel *k = math_kernel(dt, N, 128);
        targ args[] = {TA_ARR(x), TA_ARR(y), TA_ARR(z), TA_F32(3.0f)};
        T_RUN_OK(k, ((int[]){3, 1, 1}), args, 4);
        for (int i = 0; i < N; i++) {
            float v = fmaf(ir_fp8_to_f32(dt, x[i]), 3.0f, 1.0f);
            cr_expect(t_same_f32(z[i], v), "%s z[%d] = %a, want %a", loom_dtype_name(dt), i, z[i], v);
            cr_expect_eq(y[i], ref_encode(dt, v), "%s y[%d] = 0x%02x, want 0x%02x (x 0x%02x)", loom_dtype_name(dt), i,
                         y[i], ref_encode(dt, v), x[i]);
        }
        loom_kernel_destroy(k);
    }
}

Test(fp8, kernel_casts_between_every_float_type)
{
    enum { N = 256 };
    static const loom_dtype dts[2] = {LOOM_E4M3, LOOM_E5M2};
    for (int d = 0; d < 2; d++) {
        /* FP8 -> f16, bf16, f32, the other FP8 */
        loom_dtype to[4] = {LOOM_F16, LOOM_BF16, LOOM_F32, dts[1 - d]};
        uint8_t x[N], o3[N];
        uint16_t o0[N], o1[N];
        float o2[N];
        for (int i = 0; i < N; i++)
            x[i] = (uint8_t)i;
        loom_kernel *k = cast_kernel("fp8_from", dts[d], to, 4, N, 64);
        targ args[] = {TA_ARR(x), TA_ARR(o0), TA_ARR(o1), TA_ARR(o2), TA_ARR(o3)};
        T_RUN_OK(k, ((int[]){4, 1, 1}), args, 5);
        for (int i = 0; i < N; i++) {
            float v = ir_fp8_to_f32(dts[d], x[i]);
            cr_expect(t_same_f32(ir_f16_to_f32(o0[i]), v), "to f16 0x%02x", i);
            cr_expect(t_same_f32(ir_bf16_to_f32(o1[i]), v), "to bf16 0x%02x", i);
            cr_expect(t_same_f32(o2[i], v), "to f32 0x%02x", i);
            cr_expect_eq(o3[i], ref_encode(dts[1 - d], v), "%s 0x%02x to %s: 0x%02x", loom_dtype_name(dts[d]), i,
                         loom_dtype_name(dts[1 - d]), o3[i]);
        }
        loom_kernel_destroy(k);
        /* f16, bf16, f32 -> FP8, with an odd count (a masked tail) */
        static const loom_dtype from[3] = {LOOM_F16, LOOM_BF16, LOOM_F32};
        for (int f = 0; f < 3; f++) {
            enum { M = 999 };
            static uint8_t out[M];
            static unsigned char in[M * 4];
            uint32_t s = 12345;
            for (int i = 0; i < M; i++) {
                s = s * 1664525u + 1013904223u;
                uint32_t r = s;
                if (from[f] == LOOM_F32) {
                    r = (r & 0x8fffffffu) | 0x30000000u; /* exponents around FP8's range */
                    memcpy(in + 4 * i, &r, 4);
                } else {
                    uint16_t h = (uint16_t)(r >> 16);
                    memcpy(in + 2 * i, &h, 2);
                }
            }
            loom_kernel *kk = cast_kernel("fp8_to", from[f], &dts[d], 1, M, 128);
            targ a2[] = {TA_BUF(in, M * loom_dtype_size(from[f])), TA_ARR(out)};
            T_RUN_OK(kk, ((int[]){8, 1, 1}), a2, 2);
            for (int i = 0; i < M; i++) {
                float v;
                if (from[f] == LOOM_F32)
                    memcpy(&v, in + 4 * i, 4);
                else {
                    uint16_t h;
                    memcpy(&h, in + 2 * i, 2);
                    v = from[f] == LOOM_F16 ? ir_f16_to_f32(h) : ir_bf16_to_f32(h);
                }
                cr_expect_eq(out[i], ref_encode(dts[d], v), "%s %a to %s: 0x%02x", loom_dtype_name(from[f]), v,
                             loom_dtype_name(dts[d]), out[i]);
            }
            loom_kernel_destroy(kk);
        }
    }
}

Test(fp8, fill_const_select_and_load_scalar)
{
    loom_kernel *k = loom_kernel_create("fp8_misc", 1);
    loom_val x = loom_arg_tensor(k, "x", LOOM_E4M3, LOOM_SHAPE1(5), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_E4M3, LOOM_SHAPE1(8), LOOM_OUT);
    loom_val p = loom_arg_tensor(k, "p", LOOM_F32, LOOM_SHAPE1(1), LOOM_OUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_val v = loom_load(k, x, &z, LOOM_SHAPE1(8), LOOM_NONE, 1000.0); /* fill saturates to 448 */
    loom_val c = loom_const_f(k, LOOM_E4M3, 0.3);                          /* 0.3 -> 0.3125 */
    loom_val big = loom_cmp(k, LOOM_GT, loom_arange(k, 0, 8), loom_splat(k, loom_const_i(k, LOOM_I32, 5), LOOM_SHAPE1(8)));
    loom_store(k, o, &z, loom_select(k, big, loom_splat(k, c, LOOM_SHAPE1(8)), v), LOOM_NONE);
    loom_val one = loom_const_i(k, LOOM_I32, 1);
    loom_store(k, p, &z, loom_splat(k, loom_cast(k, loom_load_scalar(k, x, &one), LOOM_F32), LOOM_SHAPE1(1)), LOOM_NONE);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    cr_expect(strstr(loom_print(k), "const 0.3125 : e4m3"), "%s", loom_print(k));
    uint8_t xi[5] = {0x38, 0xb8, 0x01, 0x7f, 0x00}, out[8];
    float pf[1];
    targ args[] = {TA_ARR(xi), TA_ARR(out), TA_ARR(pf)};
    T_RUN_OK(k, NULL, args, 3);
    static const uint8_t want[8] = {0x38, 0xb8, 0x01, 0x7f, 0x00, 0x7e, 0x2a, 0x2a};
    for (int i = 0; i < 8; i++)
        cr_expect_eq(out[i], want[i], "o[%d] = 0x%02x, want 0x%02x", i, out[i], want[i]);
    cr_expect(pf[0] == -1.0f);
    loom_kernel_destroy(k);
}

Test(fp8, tensor_arguments_print_their_dtype)
{
    loom_kernel *k = loom_kernel_create("fp8_print", 1);
    loom_val x = loom_arg_tensor(k, "x", LOOM_E5M2, LOOM_SHAPE1(16), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F16, LOOM_SHAPE1(16), LOOM_OUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_store(k, o, &z, loom_cast(k, loom_load(k, x, &z, LOOM_SHAPE1(16), LOOM_NONE, 0), LOOM_F16), LOOM_NONE);
    const char *s = loom_print(k);
    cr_expect(strstr(s, "%x: tensor<e5m2[16]> in"), "%s", s);
    cr_expect(strstr(s, ": e5m2[16]"), "%s", s);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- refusals */

/* loom_dot takes FP8 operands, e4m3 and e5m2 in any mix, into an f32 accumulator; FP8 with
 * another type, or an FP8 accumulator, is refused at the dot's line. */
Test(fp8, dot_takes_fp8_operands_in_any_mix)
{
    static const loom_dtype pairs[4][2] = {
        {LOOM_E4M3, LOOM_E4M3}, {LOOM_E5M2, LOOM_E5M2}, {LOOM_E4M3, LOOM_E5M2}, {LOOM_E5M2, LOOM_E4M3}};
    for (int p = 0; p < 4; p++) {
        loom_kernel *k = loom_kernel_create("fp8_dot", 4);
        loom_val a = loom_arg_tensor(k, "a", pairs[p][0], LOOM_SHAPE2(16, 32), LOOM_IN);
        loom_val b = loom_arg_tensor(k, "b", pairs[p][1], LOOM_SHAPE2(32, 8), LOOM_IN);
        loom_val z = loom_const_i(k, LOOM_I32, 0);
        loom_val at = loom_load(k, a, ((loom_val[]){z, z}), LOOM_SHAPE2(16, 32), LOOM_NONE, 0);
        loom_val bt = loom_load(k, b, ((loom_val[]){z, z}), LOOM_SHAPE2(32, 8), LOOM_NONE, 0);
        loom_val d = loom_dot(k, at, bt, loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(16, 8)));
        cr_expect_eq(loom_verify(k), LOOM_OK, "%s x %s: %s", loom_dtype_name(pairs[p][0]),
                     loom_dtype_name(pairs[p][1]), loom_kernel_errors(k));
        loom_shape sh = loom_val_shape(k, d);
        cr_expect(sh.rank == 2 && sh.dim[0] == 16 && sh.dim[1] == 8);
        loom_kernel_destroy(k);
    }
    for (int which = 0; which < 2; which++) {
        loom_kernel *k = loom_kernel_create("fp8_dot_bad", 4);
        loom_val a = loom_arg_tensor(k, "a", LOOM_E4M3, LOOM_SHAPE2(16, 32), LOOM_IN);
        loom_val b = loom_arg_tensor(k, "b", which ? LOOM_E5M2 : LOOM_F16, LOOM_SHAPE2(32, 16), LOOM_IN);
        loom_val z = loom_const_i(k, LOOM_I32, 0);
        loom_val at = loom_load(k, a, ((loom_val[]){z, z}), LOOM_SHAPE2(16, 32), LOOM_NONE, 0);
        loom_val bt = loom_load(k, b, ((loom_val[]){z, z}), LOOM_SHAPE2(32, 16), LOOM_NONE, 0);
        loom_val acc = loom_splat(k, loom_const_f(k, which ? LOOM_E4M3 : LOOM_F32, 0), LOOM_SHAPE2(16, 16));
        int line = __LINE__ + 1;
        loom_dot(k, at, bt, acc);
        cr_expect_eq(loom_verify(k), LOOM_ERR_VERIFY);
        const char *err = loom_kernel_errors(k);
        cr_expect(strstr(err, which ? "the accumulator is e4m3[16x16]; it must be f32"
                                    : "a is e4m3[16x32] and b is f16[32x16]; they must be the same float type "
                                      "(f16, bf16, f32) or both FP8 (e4m3, e5m2, in any mix)"),
                  "case %d: %s", which, err);
        cr_expect(t_names_line(err, __FILE__, line), "case %d: '%s' does not name line %d", which, err, line);
        loom_kernel_destroy(k);
    }
}

Test(fp8, arithmetic_on_fp8_is_refused_naming_the_line)
{
    for (int which = 0; which < 7; which++) {
        loom_kernel *k = loom_kernel_create("fp8_bad", 4);
        loom_val x = loom_arg_tensor(k, "x", LOOM_E4M3, LOOM_SHAPE2(16, 16), LOOM_IN);
        loom_val z = loom_const_i(k, LOOM_I32, 0);
        loom_val v = loom_load(k, x, ((loom_val[]){z, z}), LOOM_SHAPE2(16, 16), LOOM_NONE, 0);
        int line = 0;
        switch (which) {
        case 0: line = __LINE__; loom_add(k, v, v); break;
        case 1: line = __LINE__; loom_exp(k, v); break;
        case 2: line = __LINE__; loom_reduce_sum(k, v, 1); break;
        case 3: line = __LINE__; loom_reduce_max(k, v, 0); break;
        case 4: line = __LINE__; loom_cmp(k, LOOM_LT, v, v); break;
        case 5: line = __LINE__; loom_fma(k, v, v, v); break;
        default: line = __LINE__; loom_neg(k, v); break;
        }
        cr_expect_eq(loom_verify(k), LOOM_ERR_VERIFY);
        const char *err = loom_kernel_errors(k);
        cr_expect(strstr(err, "e4m3[16x16]; FP8 values are for loads, stores, casts and loom_dot only: loom_cast "
                              "to f16 or f32"),
                  "case %d: %s", which, err);
        cr_expect(t_names_line(err, __FILE__, line), "case %d: '%s' does not name line %d", which, err, line);
        loom_kernel_destroy(k);
    }
    /* storing an f32 tile into an FP8 tensor needs the cast */
    loom_kernel *k = loom_kernel_create("fp8_bad_store", 1);
    loom_val o = loom_arg_tensor(k, "o", LOOM_E5M2, LOOM_SHAPE1(8), LOOM_OUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    int line = __LINE__ + 1;
    loom_store(k, o, &z, loom_splat(k, loom_const_f(k, LOOM_F32, 1), LOOM_SHAPE1(8)), LOOM_NONE);
    const char *err = loom_kernel_errors(k);
    cr_expect(strstr(err, "the value is f32[8] but the tensor holds e5m2; use loom_cast"), "%s", err);
    cr_expect(t_names_line(err, __FILE__, line), "%s", err);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- PTX */

static char *ptx_of(loom_kernel *k)
{
    char err[4096];
    cg_result r;
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    loom_status st = cg_compile(k, "sm_90a", &r, err, sizeof err);
    cr_assert_eq(st, LOOM_OK, "cg_compile: %s: %s", loom_status_name(st), err);
    t_ptxas_ok(r.ptx, "sm_90a", loom_kernel_name(k));
    return r.ptx;
}

Test(fp8, ptx_converts_in_pairs_and_assembles)
{
    static const loom_dtype dts[2] = {LOOM_E4M3, LOOM_E5M2};
    for (int d = 0; d < 2; d++) {
        const char *f = dts[d] == LOOM_E4M3 ? "e4m3x2" : "e5m2x2";
        char enc[64], dec[64];
        snprintf(enc, sizeof enc, "cvt.rn.satfinite.%s.f32", f);
        snprintf(dec, sizeof dec, "cvt.rn.f16x2.%s", f);
        /* f32 -> FP8, 1024 elements on 128 threads: 8 a thread, 4 pairs, one cvt each */
        loom_kernel *k = cast_kernel("fp8_enc", LOOM_F32, &dts[d], 1, 4096, 1024);
        char *ptx = ptx_of(k);
        cr_expect_eq(t_count(ptx, enc), 4, "%s: %d of %s\n%s", loom_dtype_name(dts[d]), t_count(ptx, enc), enc, ptx);
        cr_expect_eq(t_count(ptx, dec), 0, "a cast then a store decodes nothing");
        loom_kernel_destroy(k);
        /* f16 -> FP8: the .f16x2 form, a pair to one */
        k = cast_kernel("fp8_enc16", LOOM_F16, &dts[d], 1, 4096, 1024);
        ptx = ptx_of(k);
        char enc16[64];
        snprintf(enc16, sizeof enc16, "cvt.rn.satfinite.%s.f16x2", f);
        cr_expect(t_count(ptx, enc16) == 4 && t_count(ptx, enc) == 0 && t_count(ptx, "cvt.f32.f16") == 0,
                  "%d of %s, %d of %s\n%s", t_count(ptx, enc16), enc16, t_count(ptx, enc), enc, ptx);
        loom_kernel_destroy(k);
        /* FP8 -> f16 / f32: one cvt a pair (each element's f16 widened to f32 once; the
         * f16 output stores the f16 itself) */
        loom_dtype to[2] = {LOOM_F16, LOOM_F32};
        k = cast_kernel("fp8_dec", dts[d], to, 2, 4096, 1024);
        ptx = ptx_of(k);
        int pairs = t_count(ptx, dec), elems = t_count(ptx, "cvt.f32.f16");
        cr_expect(pairs >= 4 && elems == 2 * pairs, "%d of %s for %d elements\n%s", pairs, dec, elems, ptx);
        loom_kernel_destroy(k);
        /* a copy: no conversion at all */
        loom_dtype same = dts[d];
        k = cast_kernel("fp8_copy", dts[d], &same, 1, 4096, 1024);
        ptx = ptx_of(k);
        cr_expect_eq(t_count(ptx, "cvt.rn."), 0, "%s", ptx);
        loom_kernel_destroy(k);
        /* load, math in f32, store both; an odd count */
        k = math_kernel(dts[d], 333, 128);
        ptx_of(k);
        loom_kernel_destroy(k);
        /* bf16 <-> FP8 and FP8 <-> FP8 go through f32 */
        loom_dtype o2[2] = {LOOM_BF16, dts[1 - d]};
        k = cast_kernel("fp8_bf16", dts[d], o2, 2, 77, 32);
        ptx_of(k);
        loom_kernel_destroy(k);
        k = cast_kernel("bf16_fp8", LOOM_BF16, &dts[d], 1, 77, 32);
        ptx_of(k);
        loom_kernel_destroy(k);
        k = cast_kernel("f16_fp8", LOOM_F16, &dts[d], 1, 77, 32);
        ptx_of(k);
        loom_kernel_destroy(k);
    }
}


/* A shared-memory tile of FP8: stored from registers, read back, cast and stored (the
 * bytes go through shared memory as they are). */
static loom_kernel *smem_kernel(loom_dtype dt)
{
    loom_kernel *k = loom_kernel_create("fp8_smem", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(32, 64), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", dt, LOOM_SHAPE2(32, 64), LOOM_OUT);
    loom_val f = loom_arg_tensor(k, "f", LOOM_F32, LOOM_SHAPE2(32, 64), LOOM_OUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_val ring = loom_smem_alloc(k, dt, LOOM_SHAPE2(32, 64), 1, LOOM_SWIZZLE_NONE);
    loom_val v = loom_load(k, x, ((loom_val[]){z, z}), LOOM_SHAPE2(32, 64), LOOM_NONE, 0);
    loom_smem_store(k, loom_smem_slot(k, ring, z), loom_cast(k, v, dt));
    loom_val w = loom_smem_load(k, loom_smem_slot(k, ring, z));
    loom_store(k, o, ((loom_val[]){z, z}), w, LOOM_NONE);
    loom_store(k, f, ((loom_val[]){z, z}), loom_cast(k, w, LOOM_F32), LOOM_NONE);
    return k;
}

Test(fp8, shared_memory_tiles)
{
    static const loom_dtype dts[2] = {LOOM_E4M3, LOOM_E5M2};
    for (int d = 0; d < 2; d++) {
        static float x[32 * 64], f[32 * 64];
        static uint8_t o[32 * 64];
        uint32_t s = 99;
        for (int i = 0; i < 32 * 64; i++) {
            s = s * 1664525u + 1013904223u;
            x[i] = t_u2f((s & 0x8fffffffu) | 0x38000000u);
        }
        loom_kernel *k = smem_kernel(dts[d]);
        targ args[] = {TA_ARR(x), TA_ARR(o), TA_ARR(f)};
        T_RUN_OK(k, NULL, args, 3);
        for (int i = 0; i < 32 * 64; i++) {
            unsigned want = ref_encode(dts[d], x[i]);
            cr_expect_eq(o[i], want, "%s %a: 0x%02x, want 0x%02x", loom_dtype_name(dts[d]), x[i], o[i], want);
            cr_expect(t_same_f32(f[i], (float)ref_value(dts[d], want)));
        }
        ptx_of(k);
        loom_kernel_destroy(k);
    }
}


/* Integers and i1 to FP8 (through f32: one rounding, as every value past f32's exact
 * integers saturates anyway) and FP8 to integers (truncated toward zero). */
Test(fp8, casts_with_integers)
{
    enum { N = 64 };
    loom_kernel *k = loom_kernel_create("fp8_int", 1);
    loom_val x = loom_arg_tensor(k, "x", LOOM_I32, LOOM_SHAPE1(N), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_E4M3, LOOM_SHAPE1(N), LOOM_OUT);
    loom_val p = loom_arg_tensor(k, "p", LOOM_I32, LOOM_SHAPE1(N), LOOM_OUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0);
    loom_val v = loom_cast(k, loom_load(k, x, &z, LOOM_SHAPE1(N), LOOM_NONE, 0), LOOM_E4M3);
    loom_store(k, o, &z, v, LOOM_NONE);
    loom_store(k, p, &z, loom_cast(k, v, LOOM_I32), LOOM_NONE);
    int32_t xi[N], pi[N];
    uint8_t out[N];
    for (int i = 0; i < N; i++)
        xi[i] = i % 2 ? (i * 977) % 600 - 300 : (int32_t)(1u << (i % 31)) * (i % 4 ? 1 : -1);
    targ args[] = {TA_ARR(xi), TA_ARR(out), TA_ARR(pi)};
    T_RUN_OK(k, NULL, args, 3);
    for (int i = 0; i < N; i++) {
        unsigned want = ref_encode(LOOM_E4M3, (float)xi[i]);
        cr_expect_eq(out[i], want, "%d: 0x%02x, want 0x%02x", xi[i], out[i], want);
        cr_expect_eq(pi[i], (int32_t)ref_value(LOOM_E4M3, want), "%d: %d", xi[i], pi[i]);
    }
    ptx_of(k);
    loom_kernel_destroy(k);
}

/* Dtype names parse where parameters take them (loomc --shape dtype=e4m3). */
Test(fp8, dtype_names_parse)
{
    loom_param ps[1] = {{.key = "dtype", .def = LOOM_F16, .doc = "element type"}};
    int64_t v[1];
    char err[256];
    cr_assert_eq(loom_params_parse(ps, 1, "dtype=e4m3", v, err, sizeof err), 0, "%s", err);
    cr_expect_eq(v[0], LOOM_E4M3);
    cr_assert_eq(loom_params_parse(ps, 1, "dtype=e5m2", v, err, sizeof err), 0, "%s", err);
    cr_expect_eq(v[0], LOOM_E5M2);
}

/* The fp8_gpu suite's kernels assemble (here, without a GPU). */
Test(fp8, gpu_test_kernels_assemble)
{
    static const loom_dtype fp8s[2] = {LOOM_E4M3, LOOM_E5M2};
    static const loom_dtype from[3] = {LOOM_F16, LOOM_BF16, LOOM_F32};
    for (int f = 0; f < 3; f++) {
        loom_kernel *k = cast_kernel("fp8_gpu_enc", from[f], fp8s, 2, from[f] == LOOM_F32 ? 1050882 : 65536, 1024);
        ptx_of(k);
        loom_kernel_destroy(k);
    }
    for (int d = 0; d < 2; d++) {
        loom_dtype to[4] = {LOOM_F16, LOOM_F32, LOOM_BF16, fp8s[1 - d]};
        loom_kernel *k = cast_kernel("fp8_gpu_dec", fp8s[d], to, 4, 256, 128);
        ptx_of(k);
        loom_kernel_destroy(k);
    }
}

/* ---------------------------------------------------------------- GPU */

/* Launch k with the given buffers on runtime rt: arrays in[] uploaded, outputs
 * downloaded into out[] (bytes each). */
static void launch_on(loom_runtime *rt, loom_kernel *k, int nblocks, void **host, const size_t *bytes, int n)
{
    loom_buffer *b[8];
    loom_arg a[8];
    for (int i = 0; i < n; i++) {
        b[i] = loom_buffer_create(rt, bytes[i]);
        cr_assert(b[i], "%s", loom_runtime_error(rt));
        cr_assert_eq(loom_buffer_upload(b[i], host[i], bytes[i]), LOOM_OK);
        a[i] = LOOM_ARG_BUF(b[i]);
    }
    loom_status st = loom_launch(rt, k, ((int[]){nblocks, 1, 1}), a, n);
    cr_assert_eq(st, LOOM_OK, "%s", loom_runtime_error(rt));
    for (int i = 1; i < n; i++)
        cr_assert_eq(loom_buffer_download(b[i], host[i], bytes[i]), LOOM_OK);
    for (int i = 0; i < n; i++)
        loom_buffer_destroy(b[i]);
}

/* x (n elements of `from`) encoded to e4m3 and e5m2 on the GPU and on the interpreter:
 * every byte the same.  A NaN input must give a NaN code on both; where the NaN codes
 * differ (a sign or payload rule the hardware does not share), the count is printed and
 * the test fails, naming the first few. */
static void gpu_encode(loom_runtime *g, loom_runtime *c, loom_dtype from, const void *x, int n, const char *what)
{
    static const loom_dtype to[2] = {LOOM_E4M3, LOOM_E5M2};
    int block = 1024, nb = (n + block - 1) / block;
    size_t es = loom_dtype_size(from);
    loom_kernel *k = cast_kernel("fp8_gpu_enc", from, to, 2, n, block);
    uint8_t *go[2], *co[2];
    for (int t = 0; t < 2; t++) {
        go[t] = malloc((size_t)n);
        co[t] = malloc((size_t)n);
        cr_assert(go[t] && co[t]);
        memset(go[t], 0x55, (size_t)n);
        memset(co[t], 0x55, (size_t)n);
    }
    size_t bytes[3] = {(size_t)n * es, (size_t)n, (size_t)n};
    launch_on(g, k, nb, (void *[]){(void *)x, go[0], go[1]}, bytes, 3);
    launch_on(c, k, nb, (void *[]){(void *)x, co[0], co[1]}, bytes, 3);
    for (int t = 0; t < 2; t++) {
        int bad = 0, nan_diff = 0;
        for (int i = 0; i < n; i++) {
            if (go[t][i] == co[t][i])
                continue;
            float v = from == LOOM_F32    ? ((const float *)x)[i]
                      : from == LOOM_BF16 ? ir_bf16_to_f32(((const uint16_t *)x)[i])
                                          : ir_f16_to_f32(((const uint16_t *)x)[i]);
            if (isnan(v) && is_nan_code(to[t], go[t][i]) && is_nan_code(to[t], co[t][i])) {
                if (nan_diff++ < 4)
                    printf("fp8_gpu: %s %s: NaN 0x%08x gives 0x%02x on the GPU, 0x%02x in the interpreter\n", what,
                           loom_dtype_name(to[t]), t_f2u(v), go[t][i], co[t][i]);
                continue;
            }
            if (bad++ < 10)
                cr_expect_eq(go[t][i], co[t][i], "%s -> %s: %a (0x%08x): GPU 0x%02x, interpreter 0x%02x", what,
                             loom_dtype_name(to[t]), v, t_f2u(v), go[t][i], co[t][i]);
        }
        printf("fp8_gpu: %s -> %s: %d inputs, %d differ, %d NaN codes differ\n", what, loom_dtype_name(to[t]), n, bad,
               nan_diff);
        cr_expect_eq(bad, 0);
        cr_expect_eq(nan_diff, 0, "%s -> %s: the GPU's NaN codes are not the interpreter's (dsl/fp8.c)", what,
                     loom_dtype_name(to[t]));
        free(go[t]);
        free(co[t]);
    }
    loom_kernel_destroy(k);
}

Test(fp8_gpu, encode_every_f16_bf16_and_an_f32_sweep_as_the_interpreter)
{
    loom_runtime *g = t_gpu_or_skip();
    loom_runtime *c = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    static uint16_t h[65536];
    for (int i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    gpu_encode(g, c, LOOM_F16, h, 65536, "f16");
    gpu_encode(g, c, LOOM_BF16, h, 65536, "bf16");
    int n;
    uint32_t *v = f32_sweep(&n);
    gpu_encode(g, c, LOOM_F32, v, n, "f32");
    free(v);
    loom_runtime_destroy(c);
    loom_runtime_destroy(g);
}

Test(fp8_gpu, decode_every_code_as_the_interpreter)
{
    loom_runtime *g = t_gpu_or_skip();
    loom_runtime *c = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    static const loom_dtype dts[2] = {LOOM_E4M3, LOOM_E5M2};
    for (int d = 0; d < 2; d++) {
        loom_dtype to[4] = {LOOM_F16, LOOM_F32, LOOM_BF16, dts[1 - d]};
        loom_kernel *k = cast_kernel("fp8_gpu_dec", dts[d], to, 4, 256, 128);
        uint8_t x[256], go8[256], co8[256];
        uint16_t gh[256], ch[256], gb[256], cb[256];
        float gf[256], cf[256];
        for (int i = 0; i < 256; i++)
            x[i] = (uint8_t)i;
        size_t bytes[5] = {256, sizeof gh, sizeof gf, sizeof gb, sizeof go8};
        launch_on(g, k, 2, (void *[]){x, gh, gf, gb, go8}, bytes, 5);
        launch_on(c, k, 2, (void *[]){x, ch, cf, cb, co8}, bytes, 5);
        const char *n = loom_dtype_name(dts[d]);
        for (int i = 0; i < 256; i++) {
            bool nan = is_nan_code(dts[d], (unsigned)i);
            /* NaN: any NaN (loom does not specify a NaN's sign or payload); else bit for bit */
            cr_expect(nan ? isnan(ir_f16_to_f32(gh[i])) : gh[i] == ch[i], "%s 0x%02x to f16: GPU 0x%04x, interpreter 0x%04x",
                      n, i, gh[i], ch[i]);
            cr_expect(nan ? isnan(gf[i]) : t_f2u(gf[i]) == t_f2u(cf[i]), "%s 0x%02x to f32: GPU %a, interpreter %a", n, i,
                      gf[i], cf[i]);
            cr_expect(nan ? isnan(ir_bf16_to_f32(gb[i])) : gb[i] == cb[i],
                      "%s 0x%02x to bf16: GPU 0x%04x, interpreter 0x%04x", n, i, gb[i], cb[i]);
            cr_expect(nan ? is_nan_code(dts[1 - d], go8[i]) : go8[i] == co8[i],
                      "%s 0x%02x to %s: GPU 0x%02x, interpreter 0x%02x", n, i, loom_dtype_name(dts[1 - d]), go8[i], co8[i]);
        }
        loom_kernel_destroy(k);
    }
    loom_runtime_destroy(c);
    loom_runtime_destroy(g);
}
