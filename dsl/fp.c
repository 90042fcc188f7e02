/*
 * fp.c -- f16 and bf16 conversions with round-to-nearest-even, and integer wrapping.
 *
 * These are the reference rounding rules of loom: the interpreter rounds with them
 * wherever a value is stored or cast to a 16-bit float, and the GPU's cvt.rn
 * instructions give the same bits.  NaN stays NaN (quiet), infinities stay infinite,
 * values beyond the largest finite f16 round to infinity as IEEE 754 says.  The FP8
 * types' rules are in fp8.c; ir_round_to and ir_round_to_d take them too.
 */
#include "ir.h"

#include <math.h>
#include <string.h>

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t ir_f32_to_f16(float f)
{
    uint32_t x = f2u(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffff;
    if (ax > 0x7f800000) /* NaN: keep it quiet */
        return sign | 0x7e00 | (uint16_t)((ax >> 13) & 0x3ff);
    if (ax >= 0x477ff000) /* >= 65520 rounds to inf */
        return sign | 0x7c00;
    if (ax < 0x38800000) { /* below the smallest normal f16 (2^-14): subnormal or zero */
        /* value = ax as float; subnormal f16 unit is 2^-24 */
        float a = u2f(ax);
        /* scale so that one f16 subnormal ulp is 1.0, then round to nearest even */
        float s = a * 16777216.0f; /* 2^24, exact */
        float r = nearbyintf(s);   /* current rounding mode: nearest even by default */
        return sign | (uint16_t)r;
    }
    /* normal: rebias the exponent and round the 13 dropped mantissa bits */
    uint32_t mant = ax & 0x7fffff;
    uint32_t exp = (ax >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++; /* may carry into the exponent: still right (and may become inf) */
    return sign | (uint16_t)h;
}

float ir_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        float v = (float)mant * (1.0f / 16777216.0f); /* mant * 2^-24, exact */
        return sign ? -v : v;
    }
    if (exp == 31)
        return u2f(sign | 0x7f800000 | (mant << 13));
    return u2f(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t ir_f32_to_bf16(float f)
{
    uint32_t x = f2u(f);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    uint32_t lsb = (x >> 16) & 1;
    x += 0x7fff + lsb;
    return (uint16_t)(x >> 16);
}

float ir_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

/* double -> float rounded to odd: when inexact, the result's last bit is set.  Rounding
 * that to f16/bf16 (at least 2 bits shorter) then gives the correctly rounded result of
 * the double, with no double-rounding error. */
static float to_float_odd(double d)
{
    float f = (float)d;
    if (isnan(d) || isinf(d) || (double)f == d)
        return f;
    if (fabs((double)f) > fabs(d))
        f = nextafterf(f, 0.0f);
    uint32_t u = f2u(f) | 1u;
    return u2f(u);
}

float ir_round_to_d(loom_dtype t, double d)
{
    switch (t) {
    case LOOM_F16: return ir_f16_to_f32(ir_f32_to_f16(to_float_odd(d)));
    case LOOM_BF16: return ir_bf16_to_f32(ir_f32_to_bf16(to_float_odd(d)));
    case LOOM_E4M3:
    case LOOM_E5M2: return ir_fp8_to_f32(t, ir_f32_to_fp8(t, to_float_odd(d)));
    default: return (float)d;
    }
}

float ir_round_to(loom_dtype t, float f)
{
    switch (t) {
    case LOOM_F16: return ir_f16_to_f32(ir_f32_to_f16(f));
    case LOOM_BF16: return ir_bf16_to_f32(ir_f32_to_bf16(f));
    case LOOM_E4M3:
    case LOOM_E5M2: return ir_fp8_to_f32(t, ir_f32_to_fp8(t, f));
    default: return f;
    }
}

int64_t ir_wrap_int(loom_dtype t, int64_t v)
{
    switch (t) {
    case LOOM_I32: return (int64_t)(int32_t)(uint32_t)(uint64_t)v;
    case LOOM_I1: return v != 0;
    default: return v;
    }
}

int64_t ir_float_to_int(loom_dtype dt, float x)
{
    if (dt == LOOM_I1)
        return x != 0; /* NaN != 0: true */
    if (isnan(x))
        return 0;
    double lo = dt == LOOM_I32 ? -2147483648.0 : -9223372036854775808.0;
    double hi = dt == LOOM_I32 ? 2147483647.0 : 9223372036854775807.0;
    double t = trunc((double)x);
    if (t <= lo)
        return dt == LOOM_I32 ? INT32_MIN : INT64_MIN;
    if (t >= hi)
        return dt == LOOM_I32 ? INT32_MAX : INT64_MAX;
    return (int64_t)t;
}
