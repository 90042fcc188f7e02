/*
 * fp8.c -- the FP8 element types e4m3 and e5m2: encoding from f32 and decoding, written
 * once for the interpreter, the constant folder and the tests.
 *
 * The formats (OCP 8-bit floating point, as the PTX ISA's "Alternate Floating-Point Data
 * Formats" describes them):
 *
 *   e4m3  S.EEEE.MMM, bias 7.  No infinity; S.1111.111 is NaN (both signs), so the largest
 *         finite value is S.1111.110 = 448.  Subnormals (E = 0) are M * 2^-9: the
 *         smallest is 2^-9, the smallest normal 2^-6.
 *   e5m2  S.EEEEE.MM, bias 15: the top byte of an f16.  S.11111.00 is infinity,
 *         S.11111.{01,10,11} NaN; the largest finite value is 57344.  Subnormals are
 *         M * 2^-16, the smallest normal 2^-14.
 *
 * Encoding is what Hopper's cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 does (PTX ISA, "Data
 * Movement and Conversion Instructions: cvt", the .satfinite modifier): round to nearest
 * even; a NaN gives NaN; a value whose magnitude is beyond the largest finite one
 * (infinities included) gives the largest finite value of its sign.  Subnormal results
 * are kept (no flush to zero), and a value that rounds to zero keeps its sign (-1e-9
 * gives -0).  The ISA does not say which NaN code comes out; on an H100 every NaN of f32,
 * f16 and bf16, of either sign and any payload, gives 0x7f in both formats (0.1111.111 in
 * e4m3, 0.11111.11 in e5m2: a positive NaN), and so does this encoder.  tests/test_fp8.c
 * (suite fp8_gpu) checks every rule here against the instruction on a GPU: all 65536 f16
 * and bf16 patterns and about 1.05M f32 values, bit for bit.
 *
 * Decoding is exact (every code is an f16 value, so also an f32 one).  A NaN code
 * decodes to an f32 NaN of its sign whose encoding is the same code again.
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

/* An 8-bit float of `mbits` mantissa bits and exponent bias `bias` from f32 bits, round
 * to nearest even, saturating to the code `maxmag` (its largest finite magnitude). */
static uint8_t encode(float f, int mbits, int bias, int maxmag)
{
    uint32_t x = f2u(f);
    int sign = (int)((x >> 24) & 0x80);
    float a = fabsf(f);
    if (isinf(a))
        return (uint8_t)(sign | maxmag);
    int emin = 1 - bias; /* the smallest normal exponent */
    int e = (int)((x >> 23) & 0xff) - 127;
    if (e < emin)
        e = emin; /* f32 subnormals too: far below the format's subnormals */
    int q = e - mbits; /* the exponent of one unit in the last place */
    /* a * 2^-q is exact (a power-of-two scaling well inside f32's range); nearbyintf
     * rounds it to nearest even in the default rounding mode */
    int r = (int)nearbyintf(ldexpf(a, -q));
    if (r >= 2 << mbits) { /* rounding carried into the next binade */
        r >>= 1;
        q++;
    }
    int code = r >= 1 << mbits ? ((q + mbits + bias) << mbits) | (r - (1 << mbits)) : r; /* normal : subnormal */
    if (code > maxmag)
        code = maxmag;
    return (uint8_t)(sign | code);
}

uint8_t ir_f32_to_fp8(loom_dtype t, float f)
{
    if (isnan(f)) /* the hardware's one NaN code, whatever the sign and payload */
        return 0x7f;
    return t == LOOM_E4M3 ? encode(f, 3, 7, 0x7e) : encode(f, 2, 15, 0x7b);
}

float ir_fp8_to_f32(loom_dtype t, uint8_t b)
{
    if (t == LOOM_E5M2)
        return ir_f16_to_f32((uint16_t)(b << 8));
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7)
        return ir_f16_to_f32((uint16_t)(s << 15 | 0x7fff)); /* NaN of its sign */
    float v = e ? ldexpf((float)(8 + m), e - 10) : ldexpf((float)m, -9);
    return s ? -v : v;
}
