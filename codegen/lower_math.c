/*
 * lower_math.c -- the arithmetic of the lowering: elementwise ops, reductions and dot
 * on SIMT FMA (mma.sync is lowered in lower_mma.c, wgmma in lower_wgmma.c).
 *
 * Elementwise ops are computed element by element over the registers of the result's
 * layout, each operand fetched in that layout.  lw_emit_ew makes one element; lower.c
 * uses it too, to recompute a remat value where it is used.  Floats are f32 in
 * registers: an f16 or bf16 result is rounded back to its type (round_to) by every op
 * that makes one.
 *
 * Reductions: in-thread first, then butterfly shuffles (shfl.sync.bfly) over the lane
 * bits of the reduced dim, then across warps through shared memory when warps split
 * it.  Float sums accumulate in f32 (the order differs from the interpreter's
 * sequential order, so sums may differ in the last bits); max/min use llvm.maximum /
 * minimum (max.NaN.f32: NaN propagates; the sign of a zero result may differ from the
 * interpreter's when comparing -0 with +0).  A dot on SIMT FMA (f32 operands, or shapes
 * the tensor cores do not take: the layout pass decides, cg->dot_mma) stages A and B
 * through shared memory and each thread runs llvm.fma.f32 over k in order for its
 * accumulator elements: bit-identical to the interpreter on f32, f16 and bf16 inputs.
 * The others run on the tensor cores (lower_mma.c).
 *
 * Accuracy vs the interpreter (dsl/ew.c defines each op; docs/dsl.md, "Where the GPU
 * differs from the interpreter", gives every bound and tests/test_math.c checks them on a
 * GPU).  Exact, bit for bit: add sub mul fma min max neg abs, div (IEEE div.rn.f32, which
 * ptxas makes a fast path plus a rarely taken slow path), sqrt (sqrt.rn.f32), the integer
 * ops, shifts (a count outside [0, width) is clamped, as PTX's shl/shr do, never LLVM's
 * poison), casts.  Approximate, with the fast hardware forms:
 *   exp2, log2, rsqrt  ex2.approx.ftz, lg2.approx, rsqrt.approx (exp2 flushes subnormal
 *                      results to +0, as the interpreter does: the plain ex2.approx.f32
 *                      costs ptxas a compare and two predicated multiplies around each
 *                      MUFU.EX2, on a softmax's critical path)
 *   exp                ex2.approx.ftz of x*log2(e) split into a rounded product and its
 *                      error (fexp), so large |x| loses nothing to the product's rounding
 *   log                lg2.approx times ln(2)
 *   tanh               tanh.approx.f32 (sm_75 and newer; older targets use fexp and
 *                      rcp.approx)
 *   erf                a minimax polynomial in fma below |x| = 0.9277, 1 - exp(poly) above
 *   sigmoid            rcp.approx.ftz(1 + fexp(-x))
 *   rcp                rcp.approx.ftz.f32
 *   div_fast           div.full.ftz.f32 (2 ulp over the full range; div.approx.f32 returns
 *                      0 for divisors beyond 2^126)
 * Integer division by zero is undefined on the GPU (the interpreter reports it); here it
 * yields the dividend and never traps.  INT_MIN / -1 wraps like the interpreter.
 */
#include "lower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- elementwise */

/* ---------------------------------------------------------------- FP8 */

/* FP8 values are held in f32 registers as their exact value, like f16 and bf16.  A cast
 * to FP8 is cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 (the semantics of dsl/fp8.c: nearest
 * even, saturating to the largest finite value, NaN kept), or the .f16x2 form where both
 * values are f16 (a loaded f16, a cast to f16: one rounding from the same value, and no
 * f16 -> f32 widening of a NaN on the way); back is cvt.rn.f16x2.{e4m3x2,e5m2x2} (exact),
 * then f16 -> f32.  They are inline PTX (LLVM 19 has no NVPTX intrinsic for the f16x2
 * forms), pure, so LLVM drops one whose result is unused and merges equal ones.  Stores
 * convert two registers with one instruction (lw_fp8_bytes) and find where each came
 * from: the value a cast rounded (converted again from it, in a pair: a cast followed by
 * a store is one cvt a pair) or the byte a load decoded (stored as it is). */
enum { FP8_UNPACK, FP8_PACK, FP8_PACK16 };

static LLVMTypeRef fp8_asm_type(L *l, int form)
{
    if (form == FP8_UNPACK)
        return LLVMFunctionType(l->t_i32, &l->t_i16, 1, 0);
    LLVMTypeRef t = form == FP8_PACK ? l->t_f32 : l->t_f16;
    return LLVMFunctionType(l->t_i16, (LLVMTypeRef[]){t, t}, 2, 0);
}

/* $1 the low byte's value, $2 the high byte's (cvt puts a in d[15:8], b in d[7:0]). */
static const char *fp8_cons[3] = {"=r,h", "=h,f,f", "=h,h,h"};

static void fp8_text(loom_dtype dt, int form, char *text, size_t n)
{
    const char *f = dt == LOOM_E4M3 ? "e4m3x2" : "e5m2x2";
    if (form == FP8_PACK)
        snprintf(text, n, "cvt.rn.satfinite.%s.f32 $0, $2, $1;", f);
    else if (form == FP8_PACK16)
        snprintf(text, n, "{\n\t.reg .b32 t;\n\tmov.b32 t, {$1, $2};\n\tcvt.rn.satfinite.%s.f16x2 $0, t;\n\t}", f);
    else
        snprintf(text, n, "cvt.rn.f16x2.%s $0, $1;", f);
}

/* The inline asm value of a form: LLVM uniques them, so a call's callee is compared with
 * it to find our conversions again. */
static LLVMValueRef fp8_asm(L *l, loom_dtype dt, int form)
{
    char text[160];
    fp8_text(dt, form, text, sizeof text);
    return LLVMGetInlineAsm(fp8_asm_type(l, form), text, strlen(text), fp8_cons[form], strlen(fp8_cons[form]), 0, 0,
                            LLVMInlineAsmDialectATT, 0);
}

static LLVMValueRef fp8_call(L *l, loom_dtype dt, int form, LLVMValueRef *args, int n)
{
    char text[160];
    fp8_text(dt, form, text, sizeof text);
    return lw_asm_call(l, form == FP8_UNPACK ? l->t_i32 : l->t_i16, text, fp8_cons[form], args, n, true);
}

/* The f16 that f32 register x widens, or NULL. */
static LLVMValueRef half_of(L *l, LLVMValueRef x)
{
    LLVMValueRef h = LLVMIsAFPExtInst(x) ? LLVMGetOperand(x, 0) : NULL;
    return h && LLVMTypeOf(h) == l->t_f16 ? h : NULL;
}

/* One i16: lo's code in the low byte, hi's (+0 where hi is NULL) in the high byte.  The
 * .f16x2 form takes pairs only: a lone f16 goes through f32 (the same code; and a tile
 * stored byte by byte kept every f16 alive in a 16-bit register until its store, which
 * spilled ptxas's predicates in a 32-element masked tile). */
static LLVMValueRef fp8_pack(L *l, loom_dtype dt, LLVMValueRef lo, LLVMValueRef hi)
{
    LLVMValueRef hl = half_of(l, lo), hh = hi ? half_of(l, hi) : NULL;
    if (hl && hh)
        return fp8_call(l, dt, FP8_PACK16, (LLVMValueRef[]){hl, hh}, 2);
    return fp8_call(l, dt, FP8_PACK, (LLVMValueRef[]){lo, hi ? hi : LLVMConstReal(l->t_f32, 0)}, 2);
}

/* The two values of the codes in i16 w (low byte first), as f32. */
static void fp8_unpack(L *l, loom_dtype dt, LLVMValueRef w, LLVMValueRef *lo, LLVMValueRef *hi)
{
    LLVMValueRef h2 = fp8_call(l, dt, FP8_UNPACK, &w, 1);
    LLVMValueRef a = LLVMBuildTrunc(l->B, h2, l->t_i16, "");
    *lo = LLVMBuildFPExt(l->B, LLVMBuildBitCast(l->B, a, l->t_f16, ""), l->t_f32, "");
    if (hi) {
        LLVMValueRef b = LLVMBuildTrunc(l->B, LLVMBuildLShr(l->B, h2, ci32(l, 16), ""), l->t_i16, "");
        *hi = LLVMBuildFPExt(l->B, LLVMBuildBitCast(l->B, b, l->t_f16, ""), l->t_f32, "");
    }
}

static bool is_call_to(LLVMValueRef v, LLVMValueRef callee)
{
    return v && LLVMIsACallInst(v) && LLVMGetCalledValue(v) == callee;
}

static bool fp8_origin1(L *l, loom_dtype dt, LLVMValueRef x, LLVMValueRef *src, LLVMValueRef *byte)
{
    *src = *byte = NULL;
    LLVMValueRef h = LLVMIsAFPExtInst(x) ? LLVMGetOperand(x, 0) : NULL;
    LLVMValueRef t = h && LLVMIsABitCastInst(h) ? LLVMGetOperand(h, 0) : NULL;
    LLVMValueRef w = t && LLVMIsATruncInst(t) ? LLVMGetOperand(t, 0) : NULL;
    bool high = false;
    if (w && LLVMIsAInstruction(w) && LLVMGetInstructionOpcode(w) == LLVMLShr) {
        LLVMValueRef c = LLVMGetOperand(w, 1);
        if (!LLVMIsAConstantInt(c) || LLVMConstIntGetZExtValue(c) != 16)
            return false;
        high = true;
        w = LLVMGetOperand(w, 0);
    }
    if (!is_call_to(w, fp8_asm(l, dt, FP8_UNPACK)))
        return false;
    LLVMValueRef codes = LLVMGetOperand(w, 0); /* the i16 the unpack read */
    if (is_call_to(codes, fp8_asm(l, dt, FP8_PACK))) {
        *src = LLVMGetOperand(codes, high ? 1 : 0);
        return true;
    }
    if (is_call_to(codes, fp8_asm(l, dt, FP8_PACK16))) {
        *src = LLVMBuildFPExt(l->B, LLVMGetOperand(codes, high ? 1 : 0), l->t_f32, "");
        return true;
    }
    if (high)
        codes = LLVMBuildLShr(l->B, codes, LLVMConstInt(l->t_i16, 8, 0), "");
    *byte = LLVMBuildTrunc(l->B, codes, l->t_i8, "");
    return true;
}

/* Where register x came from: the value a cast rounded (*src), or the byte a load decoded
 * (*byte); false for any other register.  A cast of a value of the same type is seen
 * through (a copy stores the loaded bytes). */
static bool fp8_origin(L *l, loom_dtype dt, LLVMValueRef x, LLVMValueRef *src, LLVMValueRef *byte)
{
    *src = *byte = NULL;
    for (int depth = 0; depth < 8; depth++) {
        LLVMValueRef s, b;
        if (!fp8_origin1(l, dt, x, &s, &b))
            return *src != NULL;
        if (b) {
            *src = NULL;
            *byte = b;
            return true;
        }
        *src = x = s;
    }
    return true;
}

void lw_fp8_bytes(L *l, loom_dtype dt, const LLVMValueRef *x, int n, LLVMValueRef *eb)
{
    for (int e = 0; e < n; e += 2) {
        int m = n - e >= 2 ? 2 : 1;
        LLVMValueRef src[2] = {NULL, NULL}, byte[2] = {NULL, NULL};
        for (int i = 0; i < m; i++)
            if (!fp8_origin(l, dt, x[e + i], &src[i], &byte[i]))
                src[i] = x[e + i];
        if (byte[0] && (m == 1 || byte[1])) {
            for (int i = 0; i < m; i++)
                eb[e + i] = byte[i];
            continue;
        }
        for (int i = 0; i < m; i++)
            if (!src[i])
                src[i] = x[e + i]; /* a loaded byte's exact value: converted back to the same code */
        LLVMValueRef w = fp8_pack(l, dt, src[0], m == 2 ? src[1] : NULL);
        eb[e] = LLVMBuildTrunc(l->B, w, l->t_i8, "");
        if (m == 2)
            eb[e + 1] = LLVMBuildTrunc(l->B, LLVMBuildLShr(l->B, w, LLVMConstInt(l->t_i16, 8, 0), ""), l->t_i8, "");
    }
}

void lw_fp8_decode(L *l, loom_dtype dt, const LLVMValueRef *eb, int n, LLVMValueRef *out)
{
    for (int e = 0; e < n; e += 2) {
        int m = n - e >= 2 ? 2 : 1;
        if (LLVMIsAConstantInt(eb[e]) && (m == 1 || LLVMIsAConstantInt(eb[e + 1]))) { /* a fill */
            for (int i = 0; i < m; i++)
                out[e + i] = LLVMConstReal(l->t_f32, ir_fp8_to_f32(dt, (uint8_t)LLVMConstIntGetZExtValue(eb[e + i])));
            continue;
        }
        LLVMValueRef w = LLVMBuildZExt(l->B, eb[e], l->t_i16, "");
        if (m == 2)
            w = LLVMBuildOr(l->B, w, LLVMBuildShl(l->B, LLVMBuildZExt(l->B, eb[e + 1], l->t_i16, ""),
                                                  LLVMConstInt(l->t_i16, 8, 0), ""), "");
        fp8_unpack(l, dt, w, &out[e], m == 2 ? &out[e + 1] : NULL);
    }
}

static LLVMValueRef round_to(L *l, loom_dtype dt, LLVMValueRef f)
{
    if (ir_dtype_is_fp8(dt)) {
        LLVMValueRef r;
        fp8_unpack(l, dt, fp8_pack(l, dt, f, NULL), &r, NULL);
        return r;
    }
    if (dt == LOOM_F16) {
        LLVMValueRef h = LLVMBuildFPTrunc(l->B, f, l->t_f16, "");
        return LLVMBuildFPExt(l->B, h, l->t_f32, "");
    }
    if (dt == LOOM_BF16) { /* cvt.rn.bf16.f32, then back: exact */
        LLVMValueRef h = LLVMBuildFPTrunc(l->B, f, LLVMBFloatTypeInContext(l->C), "");
        return LLVMBuildFPExt(l->B, h, l->t_f32, "");
    }
    return f;
}

static LLVMValueRef fintr1(L *l, const char *name, LLVMValueRef a)
{
    LLVMTypeRef t = l->t_f32;
    return lw_call_intr(l, l->B, name, &t, 1, &a, 1);
}

static LLVMValueRef fintr2(L *l, const char *name, LLVMValueRef a, LLVMValueRef b)
{
    LLVMTypeRef t = l->t_f32;
    LLVMValueRef args[2] = {a, b};
    return lw_call_intr(l, l->B, name, &t, 1, args, 2);
}

static LLVMValueRef approx(L *l, const char *insn, LLVMValueRef a)
{
    char text[64];
    snprintf(text, sizeof text, "%s $0, $1;", insn);
    return lw_asm_call(l, l->t_f32, text, "=f,f", &a, 1, true);
}

static LLVMValueRef cf(L *l, double v) { return LLVMConstReal(l->t_f32, v); }

static LLVMValueRef ffma(L *l, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
    LLVMTypeRef t = l->t_f32;
    return lw_call_intr(l, l->B, "llvm.fma", &t, 1, (LLVMValueRef[]){a, b, c}, 3);
}

/* The target's sm number: 90 for sm_90a. */
static int sm_of(L *l) { return atoi(l->cg->arch + 3); }

/* exp(x) for f32 x: 2^(x log2 e) with the product split in two, th + tl, th the rounded
 * product and tl its error (exact by fma) plus x times log2(e)'s own rounding error, then
 * 2^th * 2^tl = e + e * tl ln 2 (tl is below 2^-17: the square term is far below an ulp).
 * A plain ex2.approx(x * log2 e) loses up to |x| * 1.2 ulp to the product's rounding.
 * Error: ex2.approx's 2 ulp plus half an ulp.  x is clamped to [-104, 89] (NaN stays
 * NaN) so tl stays finite for infinite x; results below 2^-126 flush to +0 (the ftz
 * fma, as ex2.approx.ftz does); an infinite e is the result as it is (e * tl could be
 * -inf). */
static LLVMValueRef fexp(L *l, LLVMValueRef x)
{
    const double log2e = 1.4426950408889634;
    float hi = (float)log2e, lo = (float)(log2e - (double)hi);
    LLVMValueRef xc = fintr2(l, "llvm.maximum", fintr2(l, "llvm.minimum", x, cf(l, 89.0)), cf(l, -104.0));
    LLVMValueRef th = LLVMBuildFMul(l->B, xc, cf(l, hi), "");
    LLVMValueRef tl = ffma(l, xc, cf(l, hi), LLVMBuildFNeg(l->B, th, ""));
    tl = ffma(l, xc, cf(l, lo), tl);
    LLVMValueRef e = approx(l, "ex2.approx.ftz.f32", th);
    LLVMValueRef c = LLVMBuildFMul(l->B, tl, cf(l, 0.6931471805599453), "");
    LLVMValueRef args[3] = {e, c, e};
    LLVMValueRef r = lw_asm_call(l, l->t_f32, "fma.rn.ftz.f32 $0, $1, $2, $3;", "=f,f,f,f", args, 3, true);
    LLVMValueRef inf = LLVMBuildFCmp(l->B, LLVMRealOEQ, e, cf(l, __builtin_inf()), "");
    return LLVMBuildSelect(l->B, inf, e, r, "");
}

/* erf(x) for f32 x: below |x| = 0.927734375 an odd minimax polynomial x + x p(x^2); above
 * it 1 - exp(q(|x|)) with the sign of x (q: a polynomial in |x| of degree 7).  The same
 * coefficients in f32 fma, with the host's expf for exp, are within 0.994 ulp of erf over
 * every f32 (checked exhaustively); the GPU's fexp adds at most 0.7 ulp above the
 * threshold (exp(q) is below 0.19 there).  Both branches are computed and one selected:
 * no divergence. */
static LLVMValueRef ferf(L *l, LLVMValueRef a)
{
    LLVMValueRef t = fintr1(l, "llvm.fabs", a), s = LLVMBuildFMul(l->B, a, a, "");
    /* |x| > 0.927734375 */
    LLVMValueRef r = ffma(l, cf(l, -1.72853470e-5f), t, cf(l, 3.83197126e-4f));
    LLVMValueRef u = ffma(l, cf(l, -3.88396438e-3f), t, cf(l, 2.42546219e-2f));
    r = ffma(l, r, s, u);
    r = ffma(l, r, t, cf(l, -1.06777877e-1f));
    r = ffma(l, r, t, cf(l, -6.34846687e-1f));
    r = ffma(l, r, t, cf(l, -1.28717512e-1f));
    r = ffma(l, r, t, LLVMBuildFNeg(l->B, t, ""));
    LLVMValueRef big = LLVMBuildFSub(l->B, cf(l, 1.0), fexp(l, r), "");
    big = lw_call_intr(l, l->B, "llvm.copysign", &l->t_f32, 1, (LLVMValueRef[]){big, a}, 2);
    /* |x| <= 0.927734375 (and NaN) */
    LLVMValueRef p = cf(l, -5.96761703e-4f);
    static const float c[] = {4.99119423e-3f, -2.67681349e-2f, 1.12819925e-1f, -3.76125336e-1f, 1.28379166e-1f};
    for (int i = 0; i < 5; i++)
        p = ffma(l, p, s, cf(l, c[i]));
    LLVMValueRef small = ffma(l, p, a, a);
    LLVMValueRef is_big = LLVMBuildFCmp(l->B, LLVMRealOGT, t, cf(l, 0.927734375), "");
    return LLVMBuildSelect(l->B, is_big, big, small, "");
}

/* tanh(x): tanh.approx.f32 from sm_75 on.  Older targets: x itself below |x| = 2^-10
 * (the error x^3/3 is below 2^-21 relative), else 1 - 2 / (exp(2|x|) + 1) with the sign
 * of x (absolute error about 2^-23, below 2^-11 relative above 2^-10). */
static LLVMValueRef ftanh(L *l, LLVMValueRef x)
{
    if (sm_of(l) >= 75)
        return approx(l, "tanh.approx.f32", x);
    LLVMValueRef ax = fintr1(l, "llvm.fabs", x);
    LLVMValueRef e = fexp(l, LLVMBuildFMul(l->B, ax, cf(l, 2.0), ""));
    LLVMValueRef q = approx(l, "rcp.approx.ftz.f32", LLVMBuildFAdd(l->B, e, cf(l, 1.0), ""));
    LLVMValueRef t = ffma(l, cf(l, -2.0), q, cf(l, 1.0));
    t = lw_call_intr(l, l->B, "llvm.copysign", &l->t_f32, 1, (LLVMValueRef[]){t, x}, 2);
    LLVMValueRef tiny = LLVMBuildFCmp(l->B, LLVMRealOLT, ax, cf(l, 0x1p-10), "");
    return LLVMBuildSelect(l->B, tiny, x, t, "");
}

/* Integer shifts with PTX's clamp: a count outside [0, width) (unsigned compare, so
 * negative counts too) gives 0 for shl, the sign fill for shr. */
static LLVMValueRef ishift(L *l, bool left, LLVMValueRef a, LLVMValueRef n)
{
    LLVMTypeRef t = LLVMTypeOf(a);
    unsigned w = LLVMGetIntTypeWidth(t);
    LLVMValueRef ok = LLVMBuildICmp(l->B, LLVMIntULT, n, LLVMConstInt(t, w, 0), "");
    if (!left)
        return LLVMBuildAShr(l->B, a, LLVMBuildSelect(l->B, ok, n, LLVMConstInt(t, w - 1, 0), ""), "");
    LLVMValueRef sh = LLVMBuildShl(l->B, a, LLVMBuildSelect(l->B, ok, n, LLVMConstNull(t), ""), "");
    return LLVMBuildSelect(l->B, ok, sh, LLVMConstNull(t), "");
}

static LLVMValueRef asm2(L *l, const char *text, LLVMValueRef a, LLVMValueRef b)
{
    LLVMValueRef args[2] = {a, b};
    return lw_asm_call(l, l->t_f32, text, "=f,f,f", args, 2, true);
}

static LLVMValueRef imin_max(L *l, bool is_max, LLVMValueRef a, LLVMValueRef b)
{
    LLVMValueRef c = LLVMBuildICmp(l->B, is_max ? LLVMIntSGT : LLVMIntSLT, a, b, "");
    return LLVMBuildSelect(l->B, c, a, b, "");
}

static LLVMValueRef int_divrem(L *l, bool rem, LLVMValueRef a, LLVMValueRef b)
{
    LLVMTypeRef t = LLVMTypeOf(a);
    LLVMValueRef m1 = LLVMConstAllOnes(t), zero = LLVMConstNull(t), one = LLVMConstInt(t, 1, 0);
    LLVMValueRef is_m1 = LLVMBuildICmp(l->B, LLVMIntEQ, b, m1, "");
    LLVMValueRef bad = LLVMBuildOr(l->B, is_m1, LLVMBuildICmp(l->B, LLVMIntEQ, b, zero, ""), "");
    LLVMValueRef safe = LLVMBuildSelect(l->B, bad, one, b, "");
    LLVMValueRef q = rem ? LLVMBuildSRem(l->B, a, safe, "") : LLVMBuildSDiv(l->B, a, safe, "");
    LLVMValueRef special = rem ? zero : LLVMBuildSub(l->B, zero, a, "");
    return LLVMBuildSelect(l->B, is_m1, special, q, "");
}

static LLVMValueRef cast_val(L *l, loom_dtype from, loom_dtype to, LLVMValueRef x)
{
    bool ff = ir_dtype_is_float(from), tf = ir_dtype_is_float(to);
    if (ff && tf)
        return round_to(l, to, x);
    if (ff) {
        if (to == LOOM_I1)
            return LLVMBuildFCmp(l->B, LLVMRealUNE, x, LLVMConstReal(l->t_f32, 0), "");
        LLVMTypeRef tys[2] = {reg_type(l, to), l->t_f32};
        return lw_call_intr(l, l->B, "llvm.fptosi.sat", tys, 2, &x, 1);
    }
    if (tf) {
        LLVMValueRef f = from == LOOM_I1 ? LLVMBuildUIToFP(l->B, x, l->t_f32, "")
                                         : LLVMBuildSIToFP(l->B, x, l->t_f32, "");
        return round_to(l, to, f);
    }
    if (to == LOOM_I1)
        return LLVMBuildICmp(l->B, LLVMIntNE, x, LLVMConstNull(LLVMTypeOf(x)), "");
    if (from == to)
        return x;
    if (from == LOOM_I1)
        return LLVMBuildZExt(l->B, x, reg_type(l, to), "");
    if (from == LOOM_I32)
        return LLVMBuildSExt(l->B, x, l->t_i64, "");
    return LLVMBuildTrunc(l->B, x, l->t_i32, "");
}

/* One element of an elementwise op: x[] are its operands' elements. */
LLVMValueRef lw_emit_ew(L *l, const ir_op *op, LLVMValueRef *x)
{
    loom_dtype in = vdt(l, op->opnd[op->kind == IR_SELECT ? 1 : 0]);
    loom_dtype out = vdt(l, op->res[0]);
    bool f = ir_dtype_is_float(in);
    LLVMBuilderRef B = l->B;
    switch (op->kind) {
    case IR_ADD: return f ? round_to(l, out, LLVMBuildFAdd(B, x[0], x[1], "")) : LLVMBuildAdd(B, x[0], x[1], "");
    case IR_SUB: return f ? round_to(l, out, LLVMBuildFSub(B, x[0], x[1], "")) : LLVMBuildSub(B, x[0], x[1], "");
    case IR_MUL: return f ? round_to(l, out, LLVMBuildFMul(B, x[0], x[1], "")) : LLVMBuildMul(B, x[0], x[1], "");
    case IR_DIV: return f ? round_to(l, out, LLVMBuildFDiv(B, x[0], x[1], "")) : int_divrem(l, false, x[0], x[1]);
    case IR_DIV_FAST: return round_to(l, out, asm2(l, "div.full.ftz.f32 $0, $1, $2;", x[0], x[1]));
    case IR_REM: return int_divrem(l, true, x[0], x[1]);
    case IR_MIN: return f ? fintr2(l, "llvm.minimum", x[0], x[1]) : imin_max(l, false, x[0], x[1]);
    case IR_MAX: return f ? fintr2(l, "llvm.maximum", x[0], x[1]) : imin_max(l, true, x[0], x[1]);
    case IR_AND: return LLVMBuildAnd(B, x[0], x[1], "");
    case IR_OR: return LLVMBuildOr(B, x[0], x[1], "");
    case IR_XOR: return LLVMBuildXor(B, x[0], x[1], "");
    case IR_SHL: return ishift(l, true, x[0], x[1]);
    case IR_SHR: return ishift(l, false, x[0], x[1]);
    case IR_FMA: {
        LLVMTypeRef t = l->t_f32;
        return round_to(l, out, lw_call_intr(l, B, "llvm.fma", &t, 1, x, 3));
    }
    case IR_NEG: return f ? LLVMBuildFNeg(B, x[0], "") : LLVMBuildSub(B, LLVMConstNull(LLVMTypeOf(x[0])), x[0], "");
    case IR_ABS:
        if (f)
            return fintr1(l, "llvm.fabs", x[0]);
        return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, x[0], LLVMConstNull(LLVMTypeOf(x[0])), ""),
                               LLVMBuildSub(B, LLVMConstNull(LLVMTypeOf(x[0])), x[0], ""), x[0], "");
    case IR_EXP2: return round_to(l, out, approx(l, "ex2.approx.ftz.f32", x[0]));
    case IR_LOG2: return round_to(l, out, approx(l, "lg2.approx.f32", x[0]));
    case IR_RSQRT: return round_to(l, out, approx(l, "rsqrt.approx.f32", x[0]));
    case IR_EXP: return round_to(l, out, fexp(l, x[0]));
    case IR_LOG: return round_to(l, out, LLVMBuildFMul(B, approx(l, "lg2.approx.f32", x[0]), cf(l, 0.6931471805599453), ""));
    case IR_TANH: return round_to(l, out, ftanh(l, x[0]));
    case IR_ERF: return round_to(l, out, ferf(l, x[0]));
    case IR_SIGMOID: {
        LLVMValueRef e = fexp(l, LLVMBuildFNeg(B, x[0], ""));
        return round_to(l, out, approx(l, "rcp.approx.ftz.f32", LLVMBuildFAdd(B, cf(l, 1.0), e, "")));
    }
    case IR_SQRT: return round_to(l, out, fintr1(l, "llvm.sqrt", x[0]));
    case IR_RCP: return round_to(l, out, approx(l, "rcp.approx.ftz.f32", x[0]));
    case IR_NOT: return LLVMBuildXor(B, x[0], LLVMConstInt(l->t_i1, 1, 0), "");
    case IR_CMP: {
        static const LLVMRealPredicate fp[] = {LLVMRealOEQ, LLVMRealUNE, LLVMRealOLT,
                                               LLVMRealOLE, LLVMRealOGT, LLVMRealOGE};
        static const LLVMIntPredicate sp[] = {LLVMIntEQ, LLVMIntNE, LLVMIntSLT, LLVMIntSLE, LLVMIntSGT, LLVMIntSGE};
        static const LLVMIntPredicate up[] = {LLVMIntEQ, LLVMIntNE, LLVMIntULT, LLVMIntULE, LLVMIntUGT, LLVMIntUGE};
        int p = (int)op->iattr[0];
        if (f)
            return LLVMBuildFCmp(B, fp[p], x[0], x[1], "");
        return LLVMBuildICmp(B, in == LOOM_I1 ? up[p] : sp[p], x[0], x[1], "");
    }
    case IR_SELECT: return LLVMBuildSelect(B, x[0], x[1], x[2], "");
    case IR_CAST: return cast_val(l, in, out, x[0]);
    default:
        CG_BUG(l->cg, "op '%s' is not elementwise", ir_opdescs[op->kind].name);
        return LLVMGetUndef(reg_type(l, out));
    }
}

/* ---------------------------------------------------------------- elementwise ops */

bool lower_elementwise(L *l, uint32_t o, ir_op *op)
{
    uint32_t rv = op->res[0];
    if (l->cg->remat[rv])
        return true;
    int32_t id = l->cg->vlay[rv];
    int n = cg_layout_regs(cg_lay(l->cg, id));
    LLVMValueRef *ins[3] = {0};
    for (int i = 0; i < op->nopnd && i < 3; i++)
        if (!(ins[i] = lw_opnd_regs(l, o, i)))
            return false;
    LLVMValueRef *out = lw_regs_alloc(l, n);
    if (!out)
        return false;
    if (op->kind == IR_CAST && l->packed && l->packed[rv]) {
        lw_cast_packed(l, vdt(l, rv), ins[0], out, n);
        return lw_set_result(l, rv, id, out);
    }
    for (int j = 0; j < n; j++) {
        LLVMValueRef x[3];
        for (int i = 0; i < op->nopnd && i < 3; i++)
            x[i] = vty(l, op->opnd[i])->shape.rank == 0 ? ins[i][0] : ins[i][j];
        out[j] = lw_emit_ew(l, op, x);
    }
    return lw_set_result(l, rv, id, out);
}

/* ---------------------------------------------------------------- reductions */

static LLVMValueRef red_identity(L *l, uint16_t kind, loom_dtype dt)
{
    if (ir_dtype_is_float(dt)) {
        if (kind == IR_REDUCE_SUM)
            return LLVMConstReal(l->t_f32, 0.0);
        return LLVMConstReal(l->t_f32, kind == IR_REDUCE_MAX ? -__builtin_inf() : __builtin_inf());
    }
    LLVMTypeRef t = reg_type(l, dt);
    if (kind == IR_REDUCE_SUM)
        return LLVMConstNull(t);
    bool i64 = dt == LOOM_I64;
    int64_t mn = i64 ? INT64_MIN : INT32_MIN, mx = i64 ? INT64_MAX : INT32_MAX;
    return LLVMConstInt(t, (unsigned long long)(kind == IR_REDUCE_MAX ? mn : mx), 1);
}

static LLVMValueRef red_combine(L *l, uint16_t kind, loom_dtype dt, LLVMValueRef a, LLVMValueRef b)
{
    bool f = ir_dtype_is_float(dt);
    switch (kind) {
    case IR_REDUCE_SUM: return f ? LLVMBuildFAdd(l->B, a, b, "") : LLVMBuildAdd(l->B, a, b, "");
    case IR_REDUCE_MAX: return f ? fintr2(l, "llvm.maximum", a, b) : imin_max(l, true, a, b);
    default: return f ? fintr2(l, "llvm.minimum", a, b) : imin_max(l, false, a, b);
    }
}

static LLVMValueRef shfl_xor(L *l, LLVMValueRef v, int mask)
{
    LLVMTypeRef t = LLVMTypeOf(v);
    if (t == l->t_i64) {
        LLVMValueRef lo = LLVMBuildTrunc(l->B, v, l->t_i32, "");
        LLVMValueRef hi = LLVMBuildTrunc(l->B, LLVMBuildLShr(l->B, v, ci64(l, 32), ""), l->t_i32, "");
        lo = shfl_xor(l, lo, mask);
        hi = shfl_xor(l, hi, mask);
        return LLVMBuildOr(l->B, LLVMBuildZExt(l->B, lo, l->t_i64, ""),
                           LLVMBuildShl(l->B, LLVMBuildZExt(l->B, hi, l->t_i64, ""), ci64(l, 32), ""), "");
    }
    bool f = t == l->t_f32;
    LLVMValueRef args[4] = {ci32(l, -1), v, ci32(l, mask), ci32(l, 0x1f)};
    return lw_call_intr(l, l->B, f ? "llvm.nvvm.shfl.sync.bfly.f32" : "llvm.nvvm.shfl.sync.bfly.i32", NULL, 0,
                        args, 4);
}

bool lower_reduce(L *l, uint32_t o, ir_op *op)
{
    cg_ctx *cg = l->cg;
    uint32_t src = op->opnd[0], rv = op->res[0];
    int ax = (int)op->iattr[0];
    loom_dtype dt = vdt(l, src);
    int32_t sid = cg->vlay[src], rid = cg->vlay[rv];
    LLVMValueRef *in = lw_opnd_regs(l, o, 0);
    if (!in)
        return false;
    const cg_layout *sl = cg_lay(cg, sid);
    int ns = cg_layout_regs(sl), nr = cg_layout_regs(cg_lay(cg, rid));
    LLVMValueRef *acc = lw_regs_alloc(l, nr), *part = lw_regs_alloc(l, ns);
    int *to = lw_alloc(l, (size_t)ns * sizeof *to);
    if (!acc || !part || !to)
        return false;
    /* in-thread: source register j -> result register to[j] = compress(j), combined as a
     * balanced tree (log2 of the terms deep, not a chain as long as they are: with one
     * warp per scheduler, a softmax's row max and sum otherwise wait out each step's
     * latency) */
    for (int j = 0; j < ns; j++) {
        to[j] = 0;
        for (int i = 0, nb = 0; i < sl->nreg; i++)
            if (sl->reg[i].dim != ax)
                to[j] |= ((j >> i) & 1) << nb++;
    }
    for (int jr = 0; jr < nr; jr++) {
        int n = 0;
        for (int j = 0; j < ns; j++) {
            if (to[j] != jr)
                continue;
            LLVMValueRef x = in[j];
            LLVMValueRef ok = lw_in_tile(l, sid, j, ax);
            part[n++] = ok ? LLVMBuildSelect(l->B, ok, x, red_identity(l, op->kind, dt), "") : x;
        }
        for (; n > 1; n = (n + 1) / 2) {
            for (int i = 0; i < n / 2; i++)
                part[i] = red_combine(l, op->kind, dt, part[2 * i], part[2 * i + 1]);
            if (n & 1)
                part[n / 2] = part[n - 1];
        }
        acc[jr] = part[0];
    }
    /* across lanes */
    for (int i = 0; i < 5; i++)
        if (sl->lane[i].dim == ax)
            for (int j = 0; j < nr; j++)
                acc[j] = red_combine(l, op->kind, dt, acc[j], shfl_xor(l, acc[j], 1 << i));
    /* across warps */
    int wb[CG_MAXWARPBITS], nwb = 0;
    for (int i = 0; i < sl->nwarp; i++)
        if (sl->warp[i].dim == ax)
            wb[nwb++] = i;
    if (nwb) {
        size_t eb = cg_reg_bytes(dt);
        int64_t pn = cg_layout_padded_numel(cg_lay(cg, rid));
        if (!lw_check_scratch(l, ((size_t)1 << nwb) * (size_t)pn * eb))
            return false;
        LLVMValueRef wa = ci32(l, 0);
        for (int t = 0; t < nwb; t++) {
            LLVMValueRef bit = LLVMBuildAnd(l->B, LLVMBuildLShr(l->B, l->warp, ci32(l, wb[t]), ""), ci32(l, 1), "");
            wa = LLVMBuildOr(l->B, wa, LLVMBuildShl(l->B, bit, ci32(l, t), ""), "");
        }
        lw_barrier(l);
        LLVMValueRef *idx = lw_regs_alloc(l, nr);
        if (!idx)
            return false;
        for (int j = 0; j < nr; j++) {
            idx[j] = lw_lin_index(l, rid, j);
            LLVMValueRef slot = LLVMBuildAdd(l->B, LLVMBuildMul(l->B, wa, ci32(l, pn), ""), idx[j], "");
            lw_smem_store(l, LLVMBuildMul(l->B, slot, ci32(l, (int64_t)eb), ""), acc[j]);
        }
        lw_barrier(l);
        /* one partial per warp: they lie side by side from offset 0 (the scratch is
         * 128-byte aligned), read as vectors of up to 16 bytes (LLVM's load/store
         * vectorizer, which found these, is off: codegen/emit.c) */
        int W = 1 << nwb, vw = pn == 1 && dt != LOOM_I1 ? W : 1;
        while (vw > 1 && (size_t)vw * eb > 16)
            vw /= 2;
        for (int j = 0; j < nr; j++) {
            LLVMValueRef a = NULL;
            for (int w = 0; w < W; w += vw) {
                LLVMValueRef slot = LLVMBuildAdd(l->B, ci32(l, (int64_t)w * pn), idx[j], "");
                LLVMValueRef off = LLVMBuildMul(l->B, slot, ci32(l, (int64_t)eb), ""), x[16];
                if (vw == 1)
                    x[0] = lw_smem_load(l, off, reg_type(l, dt));
                else {
                    LLVMValueRef ld = LLVMBuildLoad2(l->B, LLVMVectorType(reg_type(l, dt), (unsigned)vw),
                                                     lw_smem_ptr(l, off), "");
                    LLVMSetAlignment(ld, (unsigned)((size_t)vw * eb));
                    for (int e = 0; e < vw; e++)
                        x[e] = LLVMBuildExtractElement(l->B, ld, ci32(l, e), "");
                }
                for (int e = 0; e < vw; e++)
                    a = a ? red_combine(l, op->kind, dt, a, x[e]) : x[e];
            }
            acc[j] = a;
        }
    }
    if (op->kind == IR_REDUCE_SUM)
        for (int j = 0; j < nr; j++)
            acc[j] = round_to(l, dt, acc[j]);
    return lw_set_result(l, rv, rid, acc);
}

/* ---------------------------------------------------------------- dot */

bool lower_dot(L *l, uint32_t o, ir_op *op)
{
    cg_ctx *cg = l->cg;
    if (cg->dot_mma[o])
        return lw_dot_mma(l, o, op);
    uint32_t a = op->opnd[0], b = op->opnd[1], rv = op->res[0];
    int64_t M = vty(l, a)->shape.dim[0], K = vty(l, a)->shape.dim[1], N = vty(l, b)->shape.dim[1];
    int64_t pm = INT64_C(1) << cg_lg(M), pk = INT64_C(1) << cg_lg(K), pn = INT64_C(1) << cg_lg(N);
    int64_t boff = (pm * pk * 4 + 15) & ~INT64_C(15);
    LLVMValueRef *ar = lw_opnd_regs(l, o, 0), *br = lw_opnd_regs(l, o, 1), *cr = lw_opnd_regs(l, o, 2);
    if (!ar || !br || !cr)
        return false;
    if (!lw_check_scratch(l, (size_t)(boff + pk * pn * 4)))
        return false;
    int32_t la = cg->vlay[a], lb = cg->vlay[b], rid = cg->vlay[rv];
    int lgk = cg_lg(K), lgn = cg_lg(N);
    lw_barrier(l);
    for (int j = 0; j < cg_layout_regs(cg_lay(cg, la)); j++) {
        LLVMValueRef idx = LLVMBuildOr(l->B, LLVMBuildShl(l->B, lw_coord(l, la, j, 0), ci32(l, lgk), ""),
                                       lw_coord(l, la, j, 1), "");
        lw_smem_store(l, LLVMBuildShl(l->B, idx, ci32(l, 2), ""), ar[j]);
    }
    for (int j = 0; j < cg_layout_regs(cg_lay(cg, lb)); j++) {
        LLVMValueRef idx = LLVMBuildOr(l->B, LLVMBuildShl(l->B, lw_coord(l, lb, j, 0), ci32(l, lgn), ""),
                                       lw_coord(l, lb, j, 1), "");
        lw_smem_store(l, LLVMBuildAdd(l->B, LLVMBuildShl(l->B, idx, ci32(l, 2), ""), ci32(l, boff), ""), br[j]);
    }
    lw_barrier(l);
    const cg_layout *rl = cg_lay(cg, rid);
    int n = cg_layout_regs(rl);
    LLVMValueRef *acc = lw_regs_alloc(l, n);
    int *mu = lw_alloc(l, (size_t)n * sizeof(int) * 2);
    int64_t *um = lw_alloc(l, (size_t)n * sizeof(int64_t) * 2);
    if (!acc || !mu || !um)
        return false;
    int *nu = mu + n;
    int64_t *un = um + n;
    int cm = 0, cn = 0;
    for (int j = 0; j < n; j++) {
        int64_t m = cg_reg_coord(rl, j, 0), nn = cg_reg_coord(rl, j, 1);
        int x;
        for (x = 0; x < cm && um[x] != m; x++)
            ;
        if (x == cm)
            um[cm++] = m;
        mu[j] = x;
        for (x = 0; x < cn && un[x] != nn; x++)
            ;
        if (x == cn)
            un[cn++] = nn;
        nu[j] = x;
    }
    /* per-thread base pointers: row tm of A, column tn of B (coordinate bits of the
     * thread and of the registers are disjoint, so | is +) */
    LLVMValueRef tm = lw_tcoord(l, rid, 0), tn = lw_tcoord(l, rid, 1);
    LLVMValueRef abase = lw_smem_ptr(l, LLVMBuildShl(l->B, tm, ci32(l, lgk + 2), ""));
    LLVMValueRef bbase = lw_smem_ptr(l, LLVMBuildAdd(l->B, LLVMBuildShl(l->B, tn, ci32(l, 2), ""), ci32(l, boff), ""));
    LLVMValueRef *av = lw_regs_alloc(l, cm), *bv = lw_regs_alloc(l, cn);
    if (!av || !bv)
        return false;
    LLVMTypeRef ft = l->t_f32;
    /* k runs in a loop, `unroll` steps per iteration, in order: fma(a, b, acc) */
    int unroll = K % 4 == 0 ? 4 : K % 2 == 0 ? 2 : 1;
    if (K <= 8)
        unroll = (int)K;
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(l->B);
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(l->C, l->fn, "dot.k");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(l->C, l->fn, "dot.done");
    LLVMBuildBr(l->B, body);
    LLVMPositionBuilderAtEnd(l->B, body);
    LLVMValueRef kv = LLVMBuildPhi(l->B, l->t_i32, "k");
    LLVMValueRef *phi = lw_regs_alloc(l, n);
    if (!phi)
        return false;
    for (int j = 0; j < n; j++) {
        phi[j] = LLVMBuildPhi(l->B, ft, "");
        acc[j] = phi[j];
    }
    LLVMValueRef ak = LLVMBuildGEP2(l->B, l->t_i8, abase, (LLVMValueRef[]){LLVMBuildShl(l->B, kv, ci32(l, 2), "")}, 1, "");
    LLVMValueRef bk = LLVMBuildGEP2(l->B, l->t_i8, bbase,
                                    (LLVMValueRef[]){LLVMBuildShl(l->B, kv, ci32(l, lgn + 2), "")}, 1, "");
    for (int u = 0; u < unroll; u++) {
        for (int x = 0; x < cm; x++) {
            LLVMValueRef off = ci32(l, ((um[x] << lgk) + u) * 4);
            av[x] = LLVMBuildLoad2(l->B, ft, LLVMBuildGEP2(l->B, l->t_i8, ak, &off, 1, ""), "");
        }
        for (int x = 0; x < cn; x++) {
            LLVMValueRef off = ci32(l, (((int64_t)u << lgn) + un[x]) * 4);
            bv[x] = LLVMBuildLoad2(l->B, ft, LLVMBuildGEP2(l->B, l->t_i8, bk, &off, 1, ""), "");
        }
        for (int j = 0; j < n; j++) {
            LLVMValueRef args[3] = {av[mu[j]], bv[nu[j]], acc[j]};
            acc[j] = lw_call_intr(l, l->B, "llvm.fma", &ft, 1, args, 3);
        }
    }
    LLVMValueRef knext = LLVMBuildAdd(l->B, kv, ci32(l, unroll), "");
    lw_close_loop(l, pre, body, exit, kv, knext, K, phi, cr, acc, n);
    /* the exit's only predecessor is the loop block: its last fmas are the results */
    return lw_set_result(l, rv, rid, acc);
}
