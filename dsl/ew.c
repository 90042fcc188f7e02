/*
 * ew.c -- the scalar semantics of every elementwise op: the one place they are written.
 *
 * How it works.  ew_eval takes one element of each operand, as the interpreter holds
 * them (floats of every width as f32 values already rounded to their dtype, integers as
 * int64 values already wrapped to their width), and computes one element of the result:
 *
 *   - Floats are computed in f32 and rounded to the result's dtype (f16/bf16: nearest
 *     even) after each op.  add, sub, mul, div, fma and sqrt are the IEEE operation on
 *     the f32 values (div never faults: x/0 is +-inf, 0/0 NaN).  For f16 and bf16 this is
 *     the correctly rounded result too: f32 has more than twice their precision plus
 *     two bits, so the second rounding never changes the answer of these operations.
 *   - The transcendental ops (exp, log, tanh, erf, sigmoid) are computed in double and
 *     rounded once to f32: the correctly rounded value for all but rare inputs (the
 *     double result lies within one double ulp of a midpoint of two floats).  exp2, log2
 *     and rsqrt keep the f32 C library functions they have always used (exp2f, log2f,
 *     1/sqrtf), which the tests pin bit for bit.
 *   - Flush to zero: exp2, exp and sigmoid flush a result below 2^-126 (an f32
 *     subnormal) to +0; rcp and div_fast flush subnormal operands and results to zero
 *     of the same sign.  These follow the GPU instructions they lower to (ex2.approx.ftz,
 *     rcp.approx.ftz, div.full.ftz), so that the interpreter and the GPU agree on which
 *     results are zero.  Every other op keeps subnormals.
 *   - Integers wrap (two's complement).  div and rem truncate toward zero; a zero
 *     divisor is EW_DIV_BY_ZERO; INT_MIN / -1 wraps, INT_MIN % -1 is 0.  shl and shr take
 *     the count from the second operand: a count outside [0, width) (negative counts
 *     included) shifts every bit out, as PTX's shl/shr clamp their count to the width: shl
 *     gives 0, shr (arithmetic: loom's integers are signed) gives 0 or -1 by the sign.
 *
 * docs/dsl.md ("Elementwise arithmetic") is the user's account of these rules; the GPU's
 * differences from them are in its section "Where the GPU differs from the interpreter".
 */
#include "ew.h"

#include <float.h>
#include <math.h>

static float fmin_nan(float a, float b) { return isnan(a) || isnan(b) ? NAN : (a < b ? a : b); }
static float fmax_nan(float a, float b) { return isnan(a) || isnan(b) ? NAN : (a > b ? a : b); }

/* A subnormal f32 becomes zero of its sign (what .ftz instructions do to operands and
 * results). */
static float ftz(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }

/* A positive result below 2^-126 becomes +0 (ex2.approx.ftz and what is built on it). */
static float flush_pos(float x) { return x < FLT_MIN ? 0.0f : x; }

static int width(loom_dtype dt) { return dt == LOOM_I64 ? 64 : dt == LOOM_I32 ? 32 : 1; }

static ew_status eval_float(ir_opkind kind, loom_dtype out, const ew_val *x, ew_val *r)
{
    float a = x[0].f, b = x[1].f, z;
    double d = a;
    switch (kind) {
    case IR_ADD: z = a + b; break;
    case IR_SUB: z = a - b; break;
    case IR_MUL: z = a * b; break;
    case IR_DIV: z = a / b; break;
    case IR_DIV_FAST: z = ftz(ftz(a) / ftz(b)); break;
    case IR_MIN: z = fmin_nan(a, b); break;
    case IR_MAX: z = fmax_nan(a, b); break;
    case IR_FMA: z = fmaf(a, b, x[2].f); break;
    case IR_NEG: z = -a; break;
    case IR_ABS: z = fabsf(a); break;
    case IR_EXP2: z = flush_pos(exp2f(a)); break;
    case IR_LOG2: z = log2f(a); break;
    case IR_RSQRT: z = 1.0f / sqrtf(a); break;
    case IR_EXP: z = flush_pos((float)exp(d)); break;
    case IR_LOG: z = (float)log(d); break;
    case IR_TANH: z = (float)tanh(d); break;
    case IR_ERF: z = (float)erf(d); break;
    case IR_SIGMOID: z = flush_pos((float)(1.0 / (1.0 + exp(-d)))); break;
    case IR_SQRT: z = sqrtf(a); break;
    case IR_RCP: z = ftz(1.0f / ftz(a)); break;
    default: return EW_NOT_ELEMENTWISE;
    }
    r->f = ir_round_to(out, z);
    return EW_OK;
}

static ew_status eval_int(ir_opkind kind, loom_dtype dt, const ew_val *x, ew_val *r)
{
    int64_t a = x[0].i, b = x[1].i, z;
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    switch (kind) {
    case IR_ADD: z = (int64_t)(ua + ub); break;
    case IR_SUB: z = (int64_t)(ua - ub); break;
    case IR_MUL: z = (int64_t)(ua * ub); break;
    case IR_DIV:
    case IR_REM:
        if (b == 0)
            return EW_DIV_BY_ZERO;
        if (b == -1) /* INT_MIN / -1 wraps; INT_MIN % -1 is 0 */
            z = kind == IR_DIV ? (int64_t)(0 - ua) : 0;
        else
            z = kind == IR_DIV ? a / b : a % b;
        break;
    case IR_MIN: z = a < b ? a : b; break;
    case IR_MAX: z = a > b ? a : b; break;
    case IR_AND: z = a & b; break;
    case IR_OR: z = a | b; break;
    case IR_XOR: z = a ^ b; break;
    case IR_SHL: z = ub >= (uint64_t)width(dt) ? 0 : (int64_t)(ua << ub); break;
    case IR_SHR: /* a is sign-extended from its width: shifting the int64 is shifting it */
        z = ub >= (uint64_t)width(dt) ? (a < 0 ? -1 : 0) : (a < 0 ? ~(~a >> ub) : a >> ub);
        break;
    case IR_NEG: z = (int64_t)(0 - ua); break;
    case IR_ABS: z = a < 0 ? (int64_t)(0 - ua) : a; break;
    case IR_NOT: z = !a; break;
    default: return EW_NOT_ELEMENTWISE;
    }
    r->i = ir_wrap_int(dt, z);
    return EW_OK;
}

static bool cmp_holds(int64_t pred, int c, bool unordered)
{
    switch (pred) {
    case LOOM_EQ: return !unordered && c == 0;
    case LOOM_NE: return unordered || c != 0; /* unordered: true with NaN */
    case LOOM_LT: return !unordered && c < 0;
    case LOOM_LE: return !unordered && c <= 0;
    case LOOM_GT: return !unordered && c > 0;
    case LOOM_GE: return !unordered && c >= 0;
    default: return false;
    }
}

ew_status ew_eval(ir_opkind kind, int64_t attr, loom_dtype in, loom_dtype out, const ew_val *x, ew_val *r)
{
    *r = (ew_val){0, 0};
    switch (kind) {
    case IR_SELECT:
        *r = x[0].i ? x[1] : x[2];
        return EW_OK;
    case IR_CMP:
        if (ir_dtype_is_float(in)) {
            float a = x[0].f, b = x[1].f;
            r->i = cmp_holds(attr, a < b ? -1 : a > b ? 1 : 0, isnan(a) || isnan(b));
        } else {
            r->i = cmp_holds(attr, x[0].i < x[1].i ? -1 : x[0].i > x[1].i ? 1 : 0, false);
        }
        return EW_OK;
    case IR_CAST:
        if (ir_dtype_is_float(in) && ir_dtype_is_float(out))
            r->f = ir_round_to(out, x[0].f);
        else if (ir_dtype_is_float(in))
            r->i = ir_float_to_int(out, x[0].f);
        else if (ir_dtype_is_float(out)) /* rounds once: directly for f32, via an exact double else */
            r->f = out == LOOM_F32 ? (float)x[0].i : ir_round_to_d(out, (double)x[0].i);
        else
            r->i = ir_wrap_int(out, x[0].i);
        return EW_OK;
    default:
        return ir_dtype_is_float(in) ? eval_float(kind, out, x, r) : eval_int(kind, out, x, r);
    }
}
