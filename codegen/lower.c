/*
 * lower.c -- loom IR to LLVM IR (NVPTX flavour), through the LLVM C API.
 *
 * How it works.  The kernel becomes one function with the PTX kernel calling
 * convention.  Every register tile is held per thread as an array of SSA values, one
 * per element the thread owns in the tile's layout (codegen/layout.c); tiles are small
 * and everything is unrolled, so LLVM sees straight-line code it optimizes well.
 * Scalars are uniform: every thread holds the value.  Element types in registers:
 * f32 for every float type (f16 and bf16 values are held already rounded, and every
 * op rounds its result back to its type, which gives exactly the interpreter's
 * round-to-nearest-even results), i32, i64, i1.
 *
 * The coordinate of register j of a layout in this thread is a per-thread part (from
 * the lane and warp ids; computed once in the entry block per layout and dim) plus a
 * compile-time constant.  An operand is fetched "in the layout the op wants" (get()):
 * the same layout is free, a register permutation is free, a remat value (splat,
 * arange and elementwise expressions of them) is recomputed element by element in the
 * wanted layout, and anything else is converted through shared memory.
 *
 * Memory ops compute, per element, the tile coordinate, its bounds predicate (tiled
 * dims are masked against the tensor's compile-time shape, leading offsets checked
 * too so a bad offset never faults) and its address.  Accesses are emitted as inline
 * PTX (predicated ld/st with the fill value moved in first, as Triton does): 16-byte
 * vectors (ld.global.nc.v4.b32 for LOOM_IN tensors) when the last dim has stride 1,
 * the thread's registers are contiguous there, and the divisibility of the offsets,
 * strides and shape proves alignment and a predicate uniform over the vector (an
 * explicit mask too: cg_axis_info must show it constant over each vector); otherwise
 * narrower vectors or single elements.  Never wider than exact: no element a mask or
 * a bound excludes is read or written.
 *
 * Reductions: in-thread first, then butterfly shuffles (shfl.sync.bfly) over the lane
 * bits of the reduced dim, then across warps through shared memory when warps split
 * it.  Float sums accumulate in f32 (the order differs from the interpreter's
 * sequential order, so sums may differ in the last bits); max/min use llvm.maximum /
 * minimum (max.NaN.f32: NaN propagates; the sign of a zero result may differ from the
 * interpreter's when comparing -0 with +0).  Dot stages A and B through shared memory
 * and each thread runs llvm.fma.f32 over k in order for its accumulator elements:
 * bit-identical to the interpreter on f32, f16 and bf16 inputs.
 *
 * Accuracy vs the interpreter: exp2/log2/rsqrt use ex2.approx / lg2.approx /
 * rsqrt.approx (a few ulp of f32; the interpreter uses libm).  Float division is
 * correctly rounded (through f64, branch-free: fdiv_rn), bit for bit the interpreter's.  Integer division by
 * zero is undefined on the GPU (the interpreter reports it); here it yields the
 * dividend and never traps.  INT_MIN / -1 wraps like the interpreter.
 *
 * The dispatch table is generated from dsl/ops.h, so an op without a lowering does not
 * link.
 */
#include "cg.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- state */

typedef struct lv {
    int32_t lay;
    int n;
    LLVMValueRef *r;
} lv;

typedef struct chunk {
    struct chunk *next;
    long double align; /* what follows the header is aligned for anything */
} chunk;

typedef struct L {
    cg_ctx *cg;
    loom_kernel *k;
    LLVMContextRef C;
    LLVMModuleRef M;
    LLVMBuilderRef B, PB; /* body builder, prologue (entry block) builder */
    LLVMValueRef fn;
    LLVMBasicBlockRef entry;
    LLVMTypeRef t_i1, t_i8, t_i16, t_i32, t_i64, t_f32, t_f16, t_gptr, t_sptr, t_void;
    LLVMValueRef smem;
    LLVMValueRef lane, warp;
    LLVMValueRef tid;          /* threadIdx.x */
    LLVMValueRef smem_base32;  /* shared-window address of loom_smem (i32), for inline PTX */
    LLVMValueRef scratch_base; /* byte offset of this code's scratch region in loom_smem (i32) */
    /* inside a task: the task-local thread index, the replica, the internal barrier */
    LLVMValueRef tid_local, replica, bar_id;
    int bar_threads; /* 0: the whole CTA (bar.sync 0) */
    bool barriers_ready;
    LLVMValueRef tma_param[16]; /* generic address of each TMA descriptor parameter */
    int *op_tma;                /* per op: its first descriptor index (TMA ops) */
    LLVMValueRef (*tcoord)[LOOM_MAX_RANK]; /* per layout id */
    int ntcoord;
    lv *vals;
    uint32_t cur_op;
    chunk *mem;
} L;

static void *lalloc(L *l, size_t n)
{
    chunk *c = calloc(1, sizeof(chunk) + n);
    if (!c) {
        cg_fail(l->cg, LOOM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    c->next = l->mem;
    l->mem = c;
    return c + 1;
}

static LLVMValueRef *regs_alloc(L *l, int n) { return lalloc(l, (size_t)n * sizeof(LLVMValueRef)); }

static const ir_type *vty(L *l, uint32_t v) { return &l->k->vals[v].type; }
static loom_dtype vdt(L *l, uint32_t v) { return (loom_dtype)l->k->vals[v].type.dtype; }

static LLVMTypeRef reg_type(L *l, loom_dtype dt)
{
    switch (dt) {
    case LOOM_I32: return l->t_i32;
    case LOOM_I64: return l->t_i64;
    case LOOM_I1: return l->t_i1;
    default: return l->t_f32;
    }
}

static LLVMValueRef ci32(L *l, int64_t v) { return LLVMConstInt(l->t_i32, (unsigned long long)v, 1); }
static LLVMValueRef ci64(L *l, int64_t v) { return LLVMConstInt(l->t_i64, (unsigned long long)v, 1); }

/* ---------------------------------------------------------------- helpers */

static LLVMValueRef call_intr(L *l, LLVMBuilderRef B, const char *name, LLVMTypeRef *tys, int nty,
                              LLVMValueRef *args, int nargs)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    if (!id) {
        CG_BUG(l->cg, "this LLVM has no intrinsic %s", name);
        return LLVMGetUndef(l->t_i32);
    }
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(l->M, id, tys, (size_t)nty);
    LLVMTypeRef ft = LLVMIntrinsicGetType(l->C, id, tys, (size_t)nty);
    return LLVMBuildCall2(B, ft, f, args, (unsigned)nargs, "");
}

static void add_fn_attr_call(L *l, LLVMValueRef call, const char *name, uint64_t val)
{
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    if (kind)
        LLVMAddCallSiteAttribute(call, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(l->C, kind, val));
}

/* Inline PTX.  pure: no side effects and no memory access (may be CSE'd / hoisted). */
static LLVMValueRef asm_call(L *l, LLVMTypeRef ret, const char *text, const char *cons, LLVMValueRef *args,
                             int nargs, bool pure)
{
    LLVMTypeRef at[16];
    for (int i = 0; i < nargs; i++)
        at[i] = LLVMTypeOf(args[i]);
    LLVMTypeRef ft = LLVMFunctionType(ret, at, (unsigned)nargs, 0);
    LLVMValueRef a = LLVMGetInlineAsm(ft, text, strlen(text), cons, strlen(cons), !pure, 0,
                                      LLVMInlineAsmDialectATT, 0);
    LLVMValueRef c = LLVMBuildCall2(l->B, ft, a, args, (unsigned)nargs, "");
    if (pure) {
        add_fn_attr_call(l, c, "nounwind", 0);
        add_fn_attr_call(l, c, "memory", 0); /* memory(none) */
        add_fn_attr_call(l, c, "willreturn", 0);
    } else {
        /* barriers, .aligned and .sync instructions: LLVM must not duplicate them into
         * divergent paths (tail merging once split a bar.sync between an elected thread
         * and the rest of its warp, which deadlocks) */
        add_fn_attr_call(l, c, "convergent", 0);
    }
    return c;
}

static void barrier(L *l)
{
    if (l->bar_threads) { /* inside a task: its replica's own named barrier */
        char t[64];
        snprintf(t, sizeof t, "bar.sync $0, %d;", l->bar_threads);
        LLVMTypeRef at = l->t_i32;
        LLVMTypeRef ft = LLVMFunctionType(l->t_void, &at, 1, 0);
        const char *c = "r,~{memory}";
        LLVMValueRef a = LLVMGetInlineAsm(ft, t, strlen(t), c, strlen(c), 1, 0, LLVMInlineAsmDialectATT, 0);
        add_fn_attr_call(l, LLVMBuildCall2(l->B, ft, a, &l->bar_id, 1, ""), "convergent", 0);
        return;
    }
    LLVMTypeRef ft = LLVMFunctionType(l->t_void, NULL, 0, 0);
    const char *t = "bar.sync 0;", *c = "~{memory}";
    LLVMValueRef a = LLVMGetInlineAsm(ft, t, strlen(t), c, strlen(c), 1, 0, LLVMInlineAsmDialectATT, 0);
    add_fn_attr_call(l, LLVMBuildCall2(l->B, ft, a, NULL, 0, ""), "convergent", 0);
}

static LLVMValueRef sreg(L *l, const char *name)
{
    return call_intr(l, l->PB, name, NULL, 0, NULL, 0);
}

/* The per-thread part of the coordinate of layout id along dim d (i32, in the entry block). */
static LLVMValueRef tcoord(L *l, int32_t id, int d)
{
    if (id >= l->ntcoord) {
        int n = l->cg->nlays + 16;
        void *p = realloc(l->tcoord, (size_t)n * sizeof *l->tcoord);
        if (!p) {
            cg_fail(l->cg, LOOM_ERR_NOMEM, "out of memory");
            return ci32(l, 0);
        }
        l->tcoord = p;
        memset(l->tcoord + l->ntcoord, 0, (size_t)(n - l->ntcoord) * sizeof *l->tcoord);
        l->ntcoord = n;
    }
    if (l->tcoord[id][d])
        return l->tcoord[id][d];
    const cg_layout *lay = cg_lay(l->cg, id);
    LLVMValueRef acc = NULL;
    /* a run of lane (or warp) bits i..i+n-1 that lands on coordinate bits b..b+n-1 is one
     * field: ((src >> i) & (2^n - 1)) << b (less IR for LLVM to chew on than bit by bit) */
    for (int i = 0; i < 5 + lay->nwarp;) {
        cg_bit b = i < 5 ? lay->lane[i] : lay->warp[i - 5];
        if (b.dim != d) {
            i++;
            continue;
        }
        int n = 1, lim = i < 5 ? 5 : 5 + lay->nwarp;
        while (i + n < lim) {
            cg_bit c = i + n < 5 ? lay->lane[i + n] : lay->warp[i + n - 5];
            if (c.dim != d || c.bit != b.bit + n)
                break;
            n++;
        }
        LLVMValueRef src = i < 5 ? l->lane : l->warp;
        int sb = i < 5 ? i : i - 5;
        LLVMValueRef x = sb ? LLVMBuildLShr(l->PB, src, ci32(l, sb), "") : src;
        x = LLVMBuildAnd(l->PB, x, ci32(l, (1 << n) - 1), "");
        if (b.bit)
            x = LLVMBuildShl(l->PB, x, ci32(l, b.bit), "");
        acc = acc ? LLVMBuildOr(l->PB, acc, x, "") : x;
        i += n;
    }
    if (!acc)
        acc = ci32(l, 0);
    l->tcoord[id][d] = acc;
    return acc;
}

/* Coordinate of register j of layout id along dim d, as an i32 value. */
static LLVMValueRef coord(L *l, int32_t id, int j, int d)
{
    LLVMValueRef t = tcoord(l, id, d);
    int64_t c = cg_reg_coord(cg_lay(l->cg, id), j, d);
    return c ? LLVMBuildOr(l->B, t, ci32(l, c), "") : t;
}

/* Is register j's element inside the real (unpadded) tile along dim d?  NULL: always. */
static LLVMValueRef in_tile(L *l, int32_t id, int j, int d)
{
    const cg_layout *lay = cg_lay(l->cg, id);
    if (lay->shape[d] == (INT64_C(1) << lay->lg[d]))
        return NULL;
    return LLVMBuildICmp(l->B, LLVMIntULT, coord(l, id, j, d), ci32(l, lay->shape[d]), "");
}

static LLVMValueRef and_pred(L *l, LLVMValueRef a, LLVMValueRef b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    return LLVMBuildAnd(l->B, a, b, "");
}

/* Linear index of register j in a row-major scratch array over the padded dims. */
static LLVMValueRef lin_index(L *l, int32_t id, int j)
{
    const cg_layout *lay = cg_lay(l->cg, id);
    LLVMValueRef idx = ci32(l, 0);
    int shift = 0;
    for (int d = lay->rank - 1; d >= 0; d--) {
        LLVMValueRef c = coord(l, id, j, d);
        idx = LLVMBuildOr(l->B, idx, shift ? LLVMBuildShl(l->B, c, ci32(l, shift), "") : c, "");
        shift += lay->lg[d];
    }
    return idx;
}

/* Scratch: byte_off within this code's scratch region. */
static LLVMValueRef smem_ptr(L *l, LLVMValueRef byte_off)
{
    if (l->scratch_base)
        byte_off = LLVMBuildAdd(l->B, byte_off, l->scratch_base, "");
    return LLVMBuildGEP2(l->B, l->t_i8, l->smem, &byte_off, 1, "");
}

static bool check_scratch(L *l, size_t bytes)
{
    if (!l->smem || bytes > l->cg->op_scratch[l->cur_op])
        return CG_BUG(l->cg, "op %u uses %zu bytes of scratch but the plan gave it %zu", l->cur_op, bytes,
                      l->smem ? l->cg->op_scratch[l->cur_op] : 0);
    return true;
}

static void smem_store(L *l, LLVMValueRef byte_off, LLVMValueRef v)
{
    if (LLVMTypeOf(v) == l->t_i1)
        v = LLVMBuildZExt(l->B, v, l->t_i8, "");
    LLVMBuildStore(l->B, v, smem_ptr(l, byte_off));
}

static LLVMValueRef smem_load(L *l, LLVMValueRef byte_off, LLVMTypeRef t)
{
    bool b = t == l->t_i1;
    LLVMValueRef v = LLVMBuildLoad2(l->B, b ? l->t_i8 : t, smem_ptr(l, byte_off), "");
    if (b)
        v = LLVMBuildICmp(l->B, LLVMIntNE, v, LLVMConstInt(l->t_i8, 0, 0), "");
    return v;
}

/* ---------------------------------------------------------------- elementwise */

static LLVMValueRef round_to(L *l, loom_dtype dt, LLVMValueRef f)
{
    if (dt == LOOM_F16) {
        LLVMValueRef h = LLVMBuildFPTrunc(l->B, f, l->t_f16, "");
        return LLVMBuildFPExt(l->B, h, l->t_f32, "");
    }
    if (dt == LOOM_BF16) {
        LLVMValueRef u = LLVMBuildBitCast(l->B, f, l->t_i32, "");
        LLVMValueRef lsb = LLVMBuildAnd(l->B, LLVMBuildLShr(l->B, u, ci32(l, 16), ""), ci32(l, 1), "");
        LLVMValueRef r = LLVMBuildAdd(l->B, LLVMBuildAdd(l->B, u, ci32(l, 0x7fff), ""), lsb, "");
        r = LLVMBuildAnd(l->B, r, ci32(l, (int32_t)0xffff0000), "");
        LLVMValueRef nanv = LLVMBuildOr(l->B, LLVMBuildAnd(l->B, u, ci32(l, (int32_t)0xffff0000), ""),
                                        ci32(l, 0x00400000), "");
        LLVMValueRef isnan = LLVMBuildFCmp(l->B, LLVMRealUNO, f, f, "");
        return LLVMBuildBitCast(l->B, LLVMBuildSelect(l->B, isnan, nanv, r, ""), l->t_f32, "");
    }
    return f;
}

static LLVMValueRef fintr1(L *l, const char *name, LLVMValueRef a)
{
    LLVMTypeRef t = l->t_f32;
    return call_intr(l, l->B, name, &t, 1, &a, 1);
}

static LLVMValueRef fintr2(L *l, const char *name, LLVMValueRef a, LLVMValueRef b)
{
    LLVMTypeRef t = l->t_f32;
    LLVMValueRef args[2] = {a, b};
    return call_intr(l, l->B, name, &t, 1, args, 2);
}

static LLVMValueRef approx(L *l, const char *insn, LLVMValueRef a)
{
    char text[64];
    snprintf(text, sizeof text, "%s.approx.f32 $0, $1;", insn);
    return asm_call(l, l->t_f32, text, "=f,f", &a, 1, true);
}

/* a / b for f32 a and b, correctly rounded, without a branch.  div.rn.f32 becomes a fast
 * path plus a slow-path branch per division in ptxas, and a tile of divisions (a softmax's
 * x / sum) made ptxas a third slower.  Here the quotient is computed in f64, where every
 * f32 input is normal and no result can overflow or underflow: an approximate reciprocal,
 * two Newton steps (error about 2^-52), one multiply, one rounding to f32.  That is the
 * correctly rounded f32 quotient: a quotient of two 24-bit significands is either exact
 * or at least 2^-49 (relative) away from a midpoint between f32 neighbours, far more
 * than the f64 error, so rounding the f64 value to f32 lands on the right neighbour (the
 * denormal and overflow ranges of f32 included).  b = +-0 and +-inf, where the Newton
 * steps would give NaN, use the exact reciprocal (+-inf, +-0) instead; a NaN b stays NaN.
 * The reciprocal depends on b alone, so a division of many values by one (a broadcast
 * sum) computes it once. */
static LLVMValueRef fdiv_rn(L *l, LLVMValueRef a, LLVMValueRef b)
{
    LLVMTypeRef d = LLVMDoubleTypeInContext(l->C);
    LLVMValueRef db = LLVMBuildFPExt(l->B, b, d, "");
    LLVMValueRef r = asm_call(l, d, "rcp.approx.ftz.f64 $0, $1;", "=d,d", &db, 1, true);
    LLVMValueRef nb = LLVMBuildFNeg(l->B, db, ""), one = LLVMConstReal(d, 1.0);
    for (int i = 0; i < 2; i++) {
        LLVMValueRef e = call_intr(l, l->B, "llvm.fma", &d, 1, (LLVMValueRef[]){nb, r, one}, 3);
        r = call_intr(l, l->B, "llvm.fma", &d, 1, (LLVMValueRef[]){r, e, r}, 3);
    }
    LLVMValueRef ab = fintr1(l, "llvm.fabs", b);
    LLVMValueRef zero = LLVMBuildFCmp(l->B, LLVMRealOEQ, ab, LLVMConstReal(l->t_f32, 0.0), "");
    LLVMValueRef inf = LLVMBuildFCmp(l->B, LLVMRealOEQ, ab, LLVMConstReal(l->t_f32, __builtin_inf()), "");
    LLVMValueRef exact = LLVMBuildSelect(l->B, zero, LLVMConstReal(d, __builtin_inf()), LLVMConstReal(d, 0.0), "");
    exact = call_intr(l, l->B, "llvm.copysign", &d, 1, (LLVMValueRef[]){exact, db}, 2);
    r = LLVMBuildSelect(l->B, LLVMBuildOr(l->B, zero, inf, ""), exact, r, "");
    LLVMValueRef q = LLVMBuildFMul(l->B, LLVMBuildFPExt(l->B, a, d, ""), r, "");
    return LLVMBuildFPTrunc(l->B, q, l->t_f32, "");
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
        return call_intr(l, l->B, "llvm.fptosi.sat", tys, 2, &x, 1);
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
static LLVMValueRef emit_ew(L *l, const ir_op *op, LLVMValueRef *x)
{
    loom_dtype in = vdt(l, op->opnd[op->kind == IR_SELECT ? 1 : 0]);
    loom_dtype out = vdt(l, op->res[0]);
    bool f = ir_dtype_is_float(in);
    LLVMBuilderRef B = l->B;
    switch (op->kind) {
    case IR_ADD: return f ? round_to(l, out, LLVMBuildFAdd(B, x[0], x[1], "")) : LLVMBuildAdd(B, x[0], x[1], "");
    case IR_SUB: return f ? round_to(l, out, LLVMBuildFSub(B, x[0], x[1], "")) : LLVMBuildSub(B, x[0], x[1], "");
    case IR_MUL: return f ? round_to(l, out, LLVMBuildFMul(B, x[0], x[1], "")) : LLVMBuildMul(B, x[0], x[1], "");
    case IR_DIV: return f ? round_to(l, out, fdiv_rn(l, x[0], x[1])) : int_divrem(l, false, x[0], x[1]);
    case IR_REM: return int_divrem(l, true, x[0], x[1]);
    case IR_MIN: return f ? fintr2(l, "llvm.minimum", x[0], x[1]) : imin_max(l, false, x[0], x[1]);
    case IR_MAX: return f ? fintr2(l, "llvm.maximum", x[0], x[1]) : imin_max(l, true, x[0], x[1]);
    case IR_AND: return LLVMBuildAnd(B, x[0], x[1], "");
    case IR_OR: return LLVMBuildOr(B, x[0], x[1], "");
    case IR_FMA: {
        LLVMTypeRef t = l->t_f32;
        return round_to(l, out, call_intr(l, B, "llvm.fma", &t, 1, x, 3));
    }
    case IR_NEG: return f ? LLVMBuildFNeg(B, x[0], "") : LLVMBuildSub(B, LLVMConstNull(LLVMTypeOf(x[0])), x[0], "");
    case IR_ABS:
        if (f)
            return fintr1(l, "llvm.fabs", x[0]);
        return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, x[0], LLVMConstNull(LLVMTypeOf(x[0])), ""),
                               LLVMBuildSub(B, LLVMConstNull(LLVMTypeOf(x[0])), x[0], ""), x[0], "");
    case IR_EXP2: return round_to(l, out, approx(l, "ex2", x[0]));
    case IR_LOG2: return round_to(l, out, approx(l, "lg2", x[0]));
    case IR_RSQRT: return round_to(l, out, approx(l, "rsqrt", x[0]));
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

/* ---------------------------------------------------------------- operands */

/* Element of remat value v at the given coordinates (i32 values, one per dim). */
static LLVMValueRef remat_elem(L *l, uint32_t v, LLVMValueRef *c)
{
    const ir_type *t = vty(l, v);
    if (t->shape.rank == 0 || !l->cg->remat[v])
        return l->vals[v].r ? l->vals[v].r[0] : LLVMGetUndef(reg_type(l, (loom_dtype)t->dtype));
    const ir_op *op = &l->k->ops[l->k->vals[v].def];
    LLVMValueRef sc[LOOM_MAX_RANK];
    switch (op->kind) {
    case IR_SPLAT: return remat_elem(l, op->opnd[0], NULL);
    case IR_ARANGE: return LLVMBuildAdd(l->B, c[0], ci32(l, op->iattr[0]), "");
    case IR_BROADCAST: {
        const ir_type *st = vty(l, op->opnd[0]);
        int off = t->shape.rank - st->shape.rank;
        for (int d = 0; d < st->shape.rank; d++)
            sc[d] = st->shape.dim[d] == t->shape.dim[d + off] ? c[d + off] : ci32(l, 0);
        return remat_elem(l, op->opnd[0], sc);
    }
    case IR_EXPAND_DIMS: {
        int a = (int)op->iattr[0];
        for (int d = 0, n = 0; d < t->shape.rank; d++)
            if (d != a)
                sc[n++] = c[d];
        return remat_elem(l, op->opnd[0], sc);
    }
    case IR_TRANS:
        sc[0] = c[1];
        sc[1] = c[0];
        return remat_elem(l, op->opnd[0], sc);
    default: {
        LLVMValueRef x[3];
        for (int i = 0; i < op->nopnd && i < 3; i++)
            x[i] = remat_elem(l, op->opnd[i], c);
        return emit_ew(l, op, x);
    }
    }
}

static LLVMValueRef *convert(L *l, uint32_t v, int32_t want);

/* The registers of value v in layout `want` (regs(want) of them). */
static LLVMValueRef *get(L *l, uint32_t v, int32_t want)
{
    const cg_layout *wl = cg_lay(l->cg, want);
    int n = cg_layout_regs(wl);
    const ir_type *t = vty(l, v);
    LLVMValueRef *out;
    if (t->shape.rank == 0) {
        if (!(out = regs_alloc(l, n)))
            return NULL;
        for (int j = 0; j < n; j++)
            out[j] = l->vals[v].r[0];
        return out;
    }
    if (l->cg->remat[v]) {
        if (!(out = regs_alloc(l, n)))
            return NULL;
        for (int j = 0; j < n; j++) {
            LLVMValueRef c[LOOM_MAX_RANK];
            for (int d = 0; d < wl->rank; d++)
                c[d] = coord(l, want, j, d);
            out[j] = remat_elem(l, v, c);
        }
        return out;
    }
    lv *x = &l->vals[v];
    if (!x->r) {
        CG_BUG(l->cg, "value %%%u used before it was lowered", v);
        return NULL;
    }
    if (x->lay == want)
        return x->r;
    int32_t *map = lalloc(l, (size_t)n * sizeof *map);
    if (!map)
        return NULL;
    if (cg_direct_same(cg_lay(l->cg, x->lay), wl, map)) {
        if (!(out = regs_alloc(l, n)))
            return NULL;
        for (int j = 0; j < n; j++)
            out[j] = x->r[map[j]];
        return out;
    }
    return convert(l, v, want);
}

/* Convert through shared memory: bar; store in the source layout; bar; load in want. */
static LLVMValueRef *convert(L *l, uint32_t v, int32_t want)
{
    lv *x = &l->vals[v];
    loom_dtype dt = vdt(l, v);
    size_t eb = cg_reg_bytes(dt);
    const cg_layout *wl = cg_lay(l->cg, want);
    if (!check_scratch(l, (size_t)cg_layout_padded_numel(wl) * eb))
        return NULL;
    barrier(l);
    for (int j = 0; j < x->n; j++)
        smem_store(l, LLVMBuildMul(l->B, lin_index(l, x->lay, j), ci32(l, (int64_t)eb), ""), x->r[j]);
    barrier(l);
    int n = cg_layout_regs(wl);
    LLVMValueRef *out = regs_alloc(l, n);
    if (!out)
        return NULL;
    for (int j = 0; j < n; j++)
        out[j] = smem_load(l, LLVMBuildMul(l->B, lin_index(l, want, j), ci32(l, (int64_t)eb), ""), reg_type(l, dt));
    return out;
}

static LLVMValueRef *opnd_regs(L *l, uint32_t o, int i)
{
    int32_t w = cg_want(l->cg, o, i);
    if (w < 0) {
        CG_BUG(l->cg, "operand %d of op %u has no layout", i, o);
        return NULL;
    }
    return get(l, l->k->ops[o].opnd[i], w);
}

static bool set_result(L *l, uint32_t v, int32_t lay, LLVMValueRef *r)
{
    if (!r)
        return false;
    l->vals[v].lay = lay;
    l->vals[v].n = cg_layout_regs(cg_lay(l->cg, lay));
    l->vals[v].r = r;
    return true;
}

static bool set_scalar(L *l, uint32_t v, LLVMValueRef x)
{
    LLVMValueRef *r = regs_alloc(l, 1);
    if (!r)
        return false;
    r[0] = x;
    return set_result(l, v, l->cg->scalar_layout, r);
}

/* ---------------------------------------------------------------- ops: grid, constants, shapes */

typedef bool (*lower_fn)(L *, uint32_t, ir_op *);

static bool lower_program_id(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    static const char *n[] = {"llvm.nvvm.read.ptx.sreg.ctaid.x", "llvm.nvvm.read.ptx.sreg.ctaid.y",
                              "llvm.nvvm.read.ptx.sreg.ctaid.z"};
    return set_scalar(l, op->res[0], call_intr(l, l->B, n[op->iattr[0]], NULL, 0, NULL, 0));
}

static bool lower_num_programs(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    static const char *n[] = {"llvm.nvvm.read.ptx.sreg.nctaid.x", "llvm.nvvm.read.ptx.sreg.nctaid.y",
                              "llvm.nvvm.read.ptx.sreg.nctaid.z"};
    return set_scalar(l, op->res[0], call_intr(l, l->B, n[op->iattr[0]], NULL, 0, NULL, 0));
}

static bool lower_const(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    loom_dtype dt = (loom_dtype)op->iattr[0];
    LLVMValueRef c = ir_dtype_is_float(dt) ? LLVMConstReal(l->t_f32, op->fattr)
                                            : LLVMConstInt(reg_type(l, dt), (unsigned long long)op->iattr[1], 1);
    return set_scalar(l, op->res[0], c);
}

/* Ops whose tile results are always remat (recomputed at each use) or plain copies. */
static bool lower_shape_like(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    uint32_t rv = op->res[0];
    if (l->cg->remat[rv])
        return true;
    const ir_type *rt = vty(l, rv);
    if (rt->shape.rank == 0) /* a rank-0 splat/broadcast: the scalar itself */
        return set_scalar(l, rv, l->vals[op->opnd[0]].r[0]);
    uint32_t s = op->opnd[0];
    const ir_type *st = vty(l, s);
    if (st->shape.rank == 0) {
        int32_t id = l->cg->vlay[rv];
        return set_result(l, rv, id, get(l, s, id));
    }
    int8_t feed[LOOM_MAX_RANK];
    if (op->kind == IR_BROADCAST) {
        int off = rt->shape.rank - st->shape.rank;
        for (int d = 0; d < st->shape.rank; d++)
            feed[d] = st->shape.dim[d] == rt->shape.dim[d + off] ? (int8_t)(d + off) : -1;
    } else if (op->kind == IR_EXPAND_DIMS) {
        int a = (int)op->iattr[0];
        for (int d = 0; d < st->shape.rank; d++)
            feed[d] = (int8_t)(d < a ? d : d + 1);
    } else { /* trans */
        feed[0] = 1;
        feed[1] = 0;
    }
    int32_t id = l->cg->vlay[rv];
    int n = cg_layout_regs(cg_lay(l->cg, id));
    int32_t *map = lalloc(l, (size_t)n * sizeof *map);
    LLVMValueRef *out = regs_alloc(l, n);
    if (!map || !out)
        return false;
    const lv *x = &l->vals[s];
    if (!cg_direct_map(cg_lay(l->cg, x->lay), cg_lay(l->cg, id), feed, map))
        return CG_BUG(l->cg, "op '%s' needs data movement its layout was chosen to avoid",
                      ir_opdescs[op->kind].name);
    for (int j = 0; j < n; j++)
        out[j] = x->r[map[j]];
    return set_result(l, rv, id, out);
}

#define lower_arange lower_shape_like
#define lower_splat lower_shape_like
#define lower_broadcast lower_shape_like
#define lower_expand_dims lower_shape_like
#define lower_trans lower_shape_like

/* ---------------------------------------------------------------- elementwise ops */

static bool lower_elementwise(L *l, uint32_t o, ir_op *op)
{
    uint32_t rv = op->res[0];
    if (l->cg->remat[rv])
        return true;
    int32_t id = l->cg->vlay[rv];
    int n = cg_layout_regs(cg_lay(l->cg, id));
    LLVMValueRef *ins[3] = {0};
    for (int i = 0; i < op->nopnd && i < 3; i++)
        if (!(ins[i] = opnd_regs(l, o, i)))
            return false;
    LLVMValueRef *out = regs_alloc(l, n);
    if (!out)
        return false;
    for (int j = 0; j < n; j++) {
        LLVMValueRef x[3];
        for (int i = 0; i < op->nopnd && i < 3; i++)
            x[i] = vty(l, op->opnd[i])->shape.rank == 0 ? ins[i][0] : ins[i][j];
        out[j] = emit_ew(l, op, x);
    }
    return set_result(l, rv, id, out);
}

#define lower_add lower_elementwise
#define lower_sub lower_elementwise
#define lower_mul lower_elementwise
#define lower_div lower_elementwise
#define lower_rem lower_elementwise
#define lower_min lower_elementwise
#define lower_max lower_elementwise
#define lower_and lower_elementwise
#define lower_or lower_elementwise
#define lower_fma lower_elementwise
#define lower_neg lower_elementwise
#define lower_abs lower_elementwise
#define lower_exp2 lower_elementwise
#define lower_log2 lower_elementwise
#define lower_rsqrt lower_elementwise
#define lower_not lower_elementwise
#define lower_cmp lower_elementwise
#define lower_select lower_elementwise
#define lower_cast lower_elementwise

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
    return call_intr(l, l->B, f ? "llvm.nvvm.shfl.sync.bfly.f32" : "llvm.nvvm.shfl.sync.bfly.i32", NULL, 0,
                     args, 4);
}

static bool lower_reduce(L *l, uint32_t o, ir_op *op)
{
    cg_ctx *cg = l->cg;
    uint32_t src = op->opnd[0], rv = op->res[0];
    int ax = (int)op->iattr[0];
    loom_dtype dt = vdt(l, src);
    int32_t sid = cg->vlay[src], rid = cg->vlay[rv];
    LLVMValueRef *in = opnd_regs(l, o, 0);
    if (!in)
        return false;
    const cg_layout *sl = cg_lay(cg, sid);
    int ns = cg_layout_regs(sl), nr = cg_layout_regs(cg_lay(cg, rid));
    LLVMValueRef *acc = regs_alloc(l, nr);
    if (!acc)
        return false;
    /* in-thread: source register j -> result register compress(j) */
    for (int j = 0; j < ns; j++) {
        int jr = 0, nb = 0;
        for (int i = 0; i < sl->nreg; i++)
            if (sl->reg[i].dim != ax)
                jr |= ((j >> i) & 1) << nb++;
        LLVMValueRef x = in[j];
        LLVMValueRef ok = in_tile(l, sid, j, ax);
        if (ok)
            x = LLVMBuildSelect(l->B, ok, x, red_identity(l, op->kind, dt), "");
        acc[jr] = acc[jr] ? red_combine(l, op->kind, dt, acc[jr], x) : x;
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
        if (!check_scratch(l, ((size_t)1 << nwb) * (size_t)pn * eb))
            return false;
        LLVMValueRef wa = ci32(l, 0);
        for (int t = 0; t < nwb; t++) {
            LLVMValueRef bit = LLVMBuildAnd(l->B, LLVMBuildLShr(l->B, l->warp, ci32(l, wb[t]), ""), ci32(l, 1), "");
            wa = LLVMBuildOr(l->B, wa, LLVMBuildShl(l->B, bit, ci32(l, t), ""), "");
        }
        barrier(l);
        LLVMValueRef *idx = regs_alloc(l, nr);
        if (!idx)
            return false;
        for (int j = 0; j < nr; j++) {
            idx[j] = lin_index(l, rid, j);
            LLVMValueRef slot = LLVMBuildAdd(l->B, LLVMBuildMul(l->B, wa, ci32(l, pn), ""), idx[j], "");
            smem_store(l, LLVMBuildMul(l->B, slot, ci32(l, (int64_t)eb), ""), acc[j]);
        }
        barrier(l);
        for (int j = 0; j < nr; j++) {
            LLVMValueRef a = NULL;
            for (int w = 0; w < (1 << nwb); w++) {
                LLVMValueRef slot = LLVMBuildAdd(l->B, ci32(l, (int64_t)w * pn), idx[j], "");
                LLVMValueRef x = smem_load(l, LLVMBuildMul(l->B, slot, ci32(l, (int64_t)eb), ""), reg_type(l, dt));
                a = a ? red_combine(l, op->kind, dt, a, x) : x;
            }
            acc[j] = a;
        }
    }
    if (op->kind == IR_REDUCE_SUM)
        for (int j = 0; j < nr; j++)
            acc[j] = round_to(l, dt, acc[j]);
    return set_result(l, rv, rid, acc);
}

#define lower_reduce_sum lower_reduce
#define lower_reduce_max lower_reduce
#define lower_reduce_min lower_reduce

/* ---------------------------------------------------------------- dot */

static bool lower_dot(L *l, uint32_t o, ir_op *op)
{
    cg_ctx *cg = l->cg;
    uint32_t a = op->opnd[0], b = op->opnd[1], rv = op->res[0];
    int64_t M = vty(l, a)->shape.dim[0], K = vty(l, a)->shape.dim[1], N = vty(l, b)->shape.dim[1];
    int64_t pm = INT64_C(1) << cg_lg(M), pk = INT64_C(1) << cg_lg(K), pn = INT64_C(1) << cg_lg(N);
    int64_t boff = (pm * pk * 4 + 15) & ~INT64_C(15);
    LLVMValueRef *ar = opnd_regs(l, o, 0), *br = opnd_regs(l, o, 1), *cr = opnd_regs(l, o, 2);
    if (!ar || !br || !cr)
        return false;
    if (!check_scratch(l, (size_t)(boff + pk * pn * 4)))
        return false;
    int32_t la = cg->vlay[a], lb = cg->vlay[b], rid = cg->vlay[rv];
    int lgk = cg_lg(K), lgn = cg_lg(N);
    barrier(l);
    for (int j = 0; j < cg_layout_regs(cg_lay(cg, la)); j++) {
        LLVMValueRef idx = LLVMBuildOr(l->B, LLVMBuildShl(l->B, coord(l, la, j, 0), ci32(l, lgk), ""),
                                       coord(l, la, j, 1), "");
        smem_store(l, LLVMBuildShl(l->B, idx, ci32(l, 2), ""), ar[j]);
    }
    for (int j = 0; j < cg_layout_regs(cg_lay(cg, lb)); j++) {
        LLVMValueRef idx = LLVMBuildOr(l->B, LLVMBuildShl(l->B, coord(l, lb, j, 0), ci32(l, lgn), ""),
                                       coord(l, lb, j, 1), "");
        smem_store(l, LLVMBuildAdd(l->B, LLVMBuildShl(l->B, idx, ci32(l, 2), ""), ci32(l, boff), ""), br[j]);
    }
    barrier(l);
    const cg_layout *rl = cg_lay(cg, rid);
    int n = cg_layout_regs(rl);
    LLVMValueRef *acc = regs_alloc(l, n);
    int *mu = lalloc(l, (size_t)n * sizeof(int) * 2);
    int64_t *um = lalloc(l, (size_t)n * sizeof(int64_t) * 2);
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
    LLVMValueRef tm = tcoord(l, rid, 0), tn = tcoord(l, rid, 1);
    LLVMValueRef abase = smem_ptr(l, LLVMBuildShl(l->B, tm, ci32(l, lgk + 2), ""));
    LLVMValueRef bbase = smem_ptr(l, LLVMBuildAdd(l->B, LLVMBuildShl(l->B, tn, ci32(l, 2), ""), ci32(l, boff), ""));
    LLVMValueRef *av = regs_alloc(l, cm), *bv = regs_alloc(l, cn);
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
    LLVMValueRef *phi = regs_alloc(l, n);
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
            acc[j] = call_intr(l, l->B, "llvm.fma", &ft, 1, args, 3);
        }
    }
    LLVMValueRef knext = LLVMBuildAdd(l->B, kv, ci32(l, unroll), "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(l->B);
    LLVMBuildCondBr(l->B, LLVMBuildICmp(l->B, LLVMIntSLT, knext, ci32(l, K), ""), body, exit);
    LLVMBasicBlockRef from[2] = {pre, latch};
    LLVMValueRef inc[2] = {ci32(l, 0), knext};
    LLVMAddIncoming(kv, inc, from, 2);
    for (int j = 0; j < n; j++) {
        inc[0] = cr[j];
        inc[1] = acc[j];
        LLVMAddIncoming(phi[j], inc, from, 2);
    }
    LLVMPositionBuilderAtEnd(l->B, exit);
    /* the exit's only predecessor is the loop block: its last fmas are the results */
    return set_result(l, rv, rid, acc);
}

/* ---------------------------------------------------------------- memory */

typedef struct macc {
    uint32_t o;
    ir_op *op;
    const ir_arg *arg;
    LLVMValueRef base;     /* the tensor parameter */
    int trank, srank, lead;
    LLVMValueRef offs[LOOM_MAX_RANK]; /* i64 */
    uint32_t offv[LOOM_MAX_RANK];     /* the offset values (for divisibility) */
    int32_t lay;
    LLVMValueRef *mask; /* per register, or NULL */
    uint32_t maskv;     /* the mask value (when mask) */
    LLVMValueRef *rows; /* load_rows: per register row (i64), or NULL */
    LLVMValueRef *vals; /* store: per register */
    bool store;
} macc;

static LLVMValueRef to_i64(L *l, LLVMValueRef x)
{
    return LLVMTypeOf(x) == l->t_i64 ? x : LLVMBuildSExt(l->B, x, l->t_i64, "");
}

static LLVMValueRef clamp64(L *l, LLVMValueRef x, int64_t lo, int64_t hi)
{
    x = LLVMBuildSelect(l->B, LLVMBuildICmp(l->B, LLVMIntSLT, x, ci64(l, lo), ""), ci64(l, lo), x, "");
    x = LLVMBuildSelect(l->B, LLVMBuildICmp(l->B, LLVMIntSGT, x, ci64(l, hi), ""), ci64(l, hi), x, "");
    return LLVMBuildTrunc(l->B, x, l->t_i32, "");
}

static uint64_t fill_bits(loom_dtype dt, double f)
{
    float x = (float)f;
    uint32_t u;
    switch (dt) {
    case LOOM_F32: memcpy(&u, &x, 4); return u;
    case LOOM_F16: return ir_f32_to_f16(x);
    case LOOM_BF16: return ir_f32_to_bf16(x);
    case LOOM_I32: return (uint32_t)(int32_t)f;
    case LOOM_I64: return (uint64_t)(int64_t)f;
    case LOOM_I1: return f != 0;
    default: return 0;
    }
}

/* Element bits (iE, E = 8*elsize) from a register value. */
static LLVMValueRef to_bits(L *l, loom_dtype dt, LLVMValueRef x)
{
    switch (dt) {
    case LOOM_F32: return LLVMBuildBitCast(l->B, x, l->t_i32, "");
    case LOOM_F16: return LLVMBuildBitCast(l->B, LLVMBuildFPTrunc(l->B, x, l->t_f16, ""), l->t_i16, "");
    case LOOM_BF16:
        return LLVMBuildTrunc(l->B, LLVMBuildLShr(l->B, LLVMBuildBitCast(l->B, x, l->t_i32, ""), ci32(l, 16), ""),
                              l->t_i16, "");
    case LOOM_I1: return LLVMBuildZExt(l->B, x, l->t_i8, "");
    default: return x;
    }
}

static LLVMValueRef from_bits(L *l, loom_dtype dt, LLVMValueRef b)
{
    switch (dt) {
    case LOOM_F32: return LLVMBuildBitCast(l->B, b, l->t_f32, "");
    case LOOM_F16: return LLVMBuildFPExt(l->B, LLVMBuildBitCast(l->B, b, l->t_f16, ""), l->t_f32, "");
    case LOOM_BF16:
        return LLVMBuildBitCast(l->B, LLVMBuildShl(l->B, LLVMBuildZExt(l->B, b, l->t_i32, ""), ci32(l, 16), ""),
                                l->t_f32, "");
    case LOOM_I1: return LLVMBuildICmp(l->B, LLVMIntNE, b, LLVMConstInt(l->t_i8, 0, 0), "");
    default: return b;
    }
}

static LLVMTypeRef bits_type(L *l, int elsize)
{
    switch (elsize) {
    case 1: return l->t_i8;
    case 2: return l->t_i16;
    case 8: return l->t_i64;
    default: return l->t_i32;
    }
}

/* Split v element-bit values (each iE) into the words of a `bytes`-wide access. */
static int pack_words(L *l, LLVMValueRef *eb, int v, int elsize, LLVMValueRef *w)
{
    int bytes = v * elsize;
    if (bytes == 1) {
        w[0] = LLVMBuildZExt(l->B, eb[0], l->t_i32, ""); /* st.u8 from a 32-bit register */
        return 1;
    }
    if (bytes == 2) {
        if (elsize == 2)
            w[0] = eb[0];
        else /* two bytes in one b16 */
            w[0] = LLVMBuildOr(l->B, LLVMBuildZExt(l->B, eb[0], l->t_i16, ""),
                               LLVMBuildShl(l->B, LLVMBuildZExt(l->B, eb[1], l->t_i16, ""),
                                            LLVMConstInt(l->t_i16, 8, 0), ""), "");
        return 1;
    }
    int nw = bytes / 4;
    for (int i = 0; i < nw; i++)
        w[i] = ci32(l, 0);
    for (int e = 0; e < v; e++) {
        if (elsize == 8) {
            w[2 * e] = LLVMBuildTrunc(l->B, eb[e], l->t_i32, "");
            w[2 * e + 1] = LLVMBuildTrunc(l->B, LLVMBuildLShr(l->B, eb[e], ci64(l, 32), ""), l->t_i32, "");
            continue;
        }
        int per = 4 / elsize, wi = e / per, sh = (e % per) * elsize * 8;
        LLVMValueRef z = LLVMBuildZExt(l->B, eb[e], l->t_i32, "");
        if (elsize == 4)
            z = eb[e];
        w[wi] = sh ? LLVMBuildOr(l->B, w[wi], LLVMBuildShl(l->B, z, ci32(l, sh), ""), "")
                   : (elsize == 4 ? z : LLVMBuildOr(l->B, w[wi], z, ""));
    }
    return nw;
}

static void unpack_words(L *l, LLVMValueRef *w, int v, int elsize, LLVMValueRef *eb)
{
    int bytes = v * elsize;
    if (bytes == 1) {
        eb[0] = LLVMBuildTrunc(l->B, w[0], l->t_i8, "");
        return;
    }
    if (bytes == 2) {
        if (elsize == 2) {
            eb[0] = w[0];
        } else {
            eb[0] = LLVMBuildTrunc(l->B, w[0], l->t_i8, "");
            eb[1] = LLVMBuildTrunc(l->B, LLVMBuildLShr(l->B, w[0], LLVMConstInt(l->t_i16, 8, 0), ""), l->t_i8, "");
        }
        return;
    }
    for (int e = 0; e < v; e++) {
        if (elsize == 8) {
            LLVMValueRef lo = LLVMBuildZExt(l->B, w[2 * e], l->t_i64, "");
            LLVMValueRef hi = LLVMBuildShl(l->B, LLVMBuildZExt(l->B, w[2 * e + 1], l->t_i64, ""), ci64(l, 32), "");
            eb[e] = LLVMBuildOr(l->B, lo, hi, "");
            continue;
        }
        int per = 4 / elsize, wi = e / per, sh = (e % per) * elsize * 8;
        LLVMValueRef x = sh ? LLVMBuildLShr(l->B, w[wi], ci32(l, sh), "") : w[wi];
        eb[e] = elsize == 4 ? x : LLVMBuildTrunc(l->B, x, bits_type(l, elsize), "");
    }
}

/* One predicated global access of `bytes` bytes at addr + imm (imm a constant byte offset,
 * written into the instruction: PTX's [reg+imm] addressing). */
static void gaccess(L *l, bool store, bool nc, int bytes, LLVMValueRef addr, int64_t imm, LLVMValueRef pred,
                    LLVMValueRef *w, uint64_t fill_word, uint16_t fill16)
{
    char text[512], cons[128], disp[32] = "";
    if (imm)
        snprintf(disp, sizeof disp, "+%lld", (long long)imm);
    int nw = bytes <= 2 ? 1 : bytes / 4;
    const char *ty = bytes == 1 ? "u8" : bytes == 2 ? "b16" : "b32";
    const char *rc = bytes == 2 ? "h" : "r";
    char vec[16] = "";
    if (nw > 1)
        snprintf(vec, sizeof vec, ".v%d", nw);
    int p = 0, c = 0;
    if (!pred)
        pred = LLVMConstInt(l->t_i1, 1, 0);
    if (store) {
        p += snprintf(text + p, sizeof text - (size_t)p, "@$%d st.global%s.%s [$0%s], %s", nw + 1, vec, ty, disp,
                      nw > 1 ? "{" : "");
        for (int i = 0; i < nw; i++)
            p += snprintf(text + p, sizeof text - (size_t)p, "%s$%d", i ? ", " : "", i + 1);
        snprintf(text + p, sizeof text - (size_t)p, "%s;", nw > 1 ? "}" : "");
        c += snprintf(cons + c, sizeof cons - (size_t)c, "l");
        for (int i = 0; i < nw; i++)
            c += snprintf(cons + c, sizeof cons - (size_t)c, ",%s", rc);
        snprintf(cons + c, sizeof cons - (size_t)c, ",b");
        LLVMValueRef args[8];
        args[0] = addr;
        for (int i = 0; i < nw; i++)
            args[1 + i] = w[i];
        args[nw + 1] = pred;
        asm_call(l, l->t_void, text, cons, args, nw + 2, false);
        return;
    }
    for (int i = 0; i < nw; i++) {
        if (bytes == 2)
            p += snprintf(text + p, sizeof text - (size_t)p, "mov.b16 $%d, 0x%04x; ", i, fill16);
        else
            p += snprintf(text + p, sizeof text - (size_t)p, "mov.b32 $%d, 0x%08x; ", i,
                          (unsigned)(bytes == 8 || bytes == 16 ? (i & 1 ? fill_word >> 32 : fill_word) : fill_word) &
                              0xffffffffu);
    }
    p += snprintf(text + p, sizeof text - (size_t)p, "@$%d ld.global%s%s.%s %s", nw + 1, nc ? ".nc" : "", vec, ty,
                  nw > 1 ? "{" : "");
    for (int i = 0; i < nw; i++)
        p += snprintf(text + p, sizeof text - (size_t)p, "%s$%d", i ? ", " : "", i);
    snprintf(text + p, sizeof text - (size_t)p, "%s, [$%d%s];", nw > 1 ? "}" : "", nw, disp);
    for (int i = 0; i < nw; i++)
        c += snprintf(cons + c, sizeof cons - (size_t)c, "%s=%s", i ? "," : "", rc);
    snprintf(cons + c, sizeof cons - (size_t)c, ",l,b");
    LLVMTypeRef wt = bytes == 2 ? l->t_i16 : l->t_i32;
    LLVMTypeRef rt = wt;
    if (nw > 1) {
        LLVMTypeRef el[4] = {wt, wt, wt, wt};
        rt = LLVMStructTypeInContext(l->C, el, (unsigned)nw, 0);
    }
    LLVMValueRef args[2] = {addr, pred};
    LLVMValueRef r = asm_call(l, rt, text, cons, args, 2, nc);
    for (int i = 0; i < nw; i++)
        w[i] = nw > 1 ? LLVMBuildExtractValue(l->B, r, (unsigned)i, "") : r;
}

/* The vector width (elements) for this access. */
static int vec_width(L *l, const macc *a)
{
    const cg_layout *lay = cg_lay(l->cg, a->lay);
    int es = cg_elsize(a->arg->dtype), last = a->srank - 1, tl = a->trank - 1;
    int lv = 0;
    while (lv < lay->nreg && lay->reg[lv].dim == last && lay->reg[lv].bit == lv)
        lv++;
    int v = 16 / es;
    if (v > (1 << lv))
        v = 1 << lv;
    /* an explicit mask must be the same over each vector (one predicate per access) */
    if (a->mask) {
        int64_t c = cg_axis_info(l->cg, a->maskv, last).cnst;
        while (v > c)
            v /= 2;
    }
    for (; v > 1; v /= 2) {
        if (a->arg->strides[tl] != 1 || a->arg->shape.dim[tl] % v || lay->shape[last] % v)
            continue;
        if (cg_divisor(l->cg, a->offv[tl]) % v)
            continue;
        bool ok = true;
        for (int d = 0; d < tl; d++)
            if (a->arg->strides[d] % v)
                ok = false;
        if (ok)
            break;
    }
    return v;
}

/* Emit a block access (load, store, load_rows); for loads fills out[] (per register). */
static bool block_access(L *l, macc *a, LLVMValueRef *out)
{
    const cg_layout *lay = cg_lay(l->cg, a->lay);
    loom_dtype dt = a->arg->dtype;
    int es = cg_elsize(dt);
    int n = cg_layout_regs(lay);
    bool gather = a->rows != NULL;
    /* uniform part: byte offset and leading-dim validity */
    LLVMValueRef uoff = ci64(l, 0), upred = NULL;
    for (int d = 0; d < a->trank; d++) {
        if (gather && d == 0)
            continue;
        uoff = LLVMBuildAdd(l->B, uoff, LLVMBuildMul(l->B, a->offs[d], ci64(l, a->arg->strides[d] * es), ""), "");
        if (d < a->lead) {
            LLVMValueRef ok = LLVMBuildICmp(l->B, LLVMIntULT, a->offs[d], ci64(l, a->arg->shape.dim[d]), "");
            upred = and_pred(l, upred, ok);
        }
    }
    LLVMValueRef base = LLVMBuildGEP2(l->B, l->t_i8, a->base, &uoff, 1, "");
    /* per tiled dim: valid coordinate range [lo, hi) */
    LLVMValueRef lo[LOOM_MAX_RANK], hi[LOOM_MAX_RANK];
    int64_t span = 0;
    for (int s = 0; s < a->srank; s++) {
        int td = a->lead + s;
        lo[s] = hi[s] = NULL;
        span += ((INT64_C(1) << lay->lg[s]) - 1) * (a->arg->strides[td] < 0 ? -a->arg->strides[td] : a->arg->strides[td]);
        if (gather && td == 0)
            continue;
        lo[s] = clamp64(l, LLVMBuildNeg(l->B, a->offs[td], ""), -1, INT64_C(1) << 21);
        hi[s] = clamp64(l, LLVMBuildSub(l->B, ci64(l, a->arg->shape.dim[td]), a->offs[td], ""), -1, INT64_C(1) << 21);
    }
    bool wide = span * es >= (INT64_C(1) << 31);
    int v = gather ? 1 : vec_width(l, a);
    if (gather) { /* vectors along the last dim are fine for gathers too */
        macc b = *a;
        b.rows = NULL;
        v = vec_width(l, &b);
    }
    uint64_t fb = fill_bits(dt, a->op->fattr);
    /* the fill repeated over 64 bits: each 32-bit word of a vector gets its half */
    uint64_t fword = fb;
    if (es == 1)
        fword = fb * UINT64_C(0x0101010101010101);
    else if (es == 2)
        fword = fb * UINT64_C(0x0001000100010001);
    else if (es == 4)
        fword = fb | (fb << 32);
    bool nc = !a->store && a->arg->access == LOOM_IN;
    /* Below 2^31 bytes of span, an element's offset is the thread's part (from its lane
     * and warp, computed once) plus its register's constant part, which goes into the
     * instruction as an immediate: no address arithmetic per access. */
    LLVMValueRef toff = NULL;
    if (!wide) {
        LLVMValueRef t = ci32(l, 0);
        for (int s = 0; s < a->srank; s++) {
            int td = a->lead + s;
            if (gather && td == 0)
                continue;
            LLVMValueRef st = ci32(l, a->arg->strides[td] * es);
            t = LLVMBuildAdd(l->B, t, LLVMBuildMul(l->B, tcoord(l, a->lay, s), st, ""), "");
        }
        toff = LLVMBuildSExt(l->B, t, l->t_i64, "");
    }
    for (int j0 = 0; j0 < n; j0 += v) {
        LLVMValueRef pred = upred;
        LLVMValueRef off = ci64(l, 0); /* wide: the whole offset, computed here */
        int64_t imm = 0;
        for (int s = 0; s < a->srank; s++) {
            int td = a->lead + s;
            LLVMValueRef c = coord(l, a->lay, j0, s);
            pred = and_pred(l, pred, in_tile(l, a->lay, j0, s));
            if (lo[s]) {
                pred = and_pred(l, pred, LLVMBuildICmp(l->B, LLVMIntSGE, c, lo[s], ""));
                pred = and_pred(l, pred, LLVMBuildICmp(l->B, LLVMIntSLT, c, hi[s], ""));
            }
            if (gather && td == 0)
                continue;
            if (!wide) {
                imm += cg_reg_coord(lay, j0, s) * a->arg->strides[td] * es;
                continue;
            }
            LLVMValueRef cc = LLVMBuildZExt(l->B, c, l->t_i64, "");
            off = LLVMBuildAdd(l->B, off, LLVMBuildMul(l->B, cc, ci64(l, a->arg->strides[td] * es), ""), "");
        }
        LLVMValueRef off64 = wide ? off : toff;
        if (gather) {
            LLVMValueRef row = a->rows[j0];
            pred = and_pred(l, pred, LLVMBuildICmp(l->B, LLVMIntULT, row, ci64(l, a->arg->shape.dim[0]), ""));
            off64 = LLVMBuildAdd(l->B, off64, LLVMBuildMul(l->B, row, ci64(l, a->arg->strides[0] * es), ""), "");
        }
        if (a->mask)
            pred = and_pred(l, pred, a->mask[j0]);
        LLVMValueRef addr = LLVMBuildGEP2(l->B, l->t_i8, base, &off64, 1, "");
        LLVMValueRef w[4], eb[16];
        if (a->store) {
            for (int e = 0; e < v; e++)
                eb[e] = to_bits(l, dt, a->vals[j0 + e]);
            pack_words(l, eb, v, es, w);
            gaccess(l, true, false, v * es, addr, imm, pred, w, 0, 0);
        } else {
            gaccess(l, false, nc, v * es, addr, imm, pred, w, fword, (uint16_t)fb);
            unpack_words(l, w, v, es, eb);
            for (int e = 0; e < v; e++)
                out[j0 + e] = from_bits(l, dt, eb[e]);
        }
    }
    return true;
}

static bool setup_access(L *l, uint32_t o, ir_op *op, macc *a, int first_off, int32_t lay, int srank)
{
    memset(a, 0, sizeof *a);
    a->o = o;
    a->op = op;
    uint32_t t = op->opnd[0];
    const ir_value *tv = &l->k->vals[t];
    a->arg = &l->k->args[tv->def];
    a->base = LLVMGetParam(l->fn, tv->def);
    a->trank = a->arg->shape.rank;
    a->srank = srank;
    a->lead = a->trank - srank;
    a->lay = lay;
    for (int d = 0; d < a->trank; d++) {
        a->offv[d] = op->opnd[first_off + d];
        a->offs[d] = to_i64(l, l->vals[a->offv[d]].r[0]);
    }
    return true;
}

static bool lower_load(L *l, uint32_t o, ir_op *op)
{
    uint32_t rv = op->res[0];
    int32_t id = l->cg->vlay[rv];
    macc a;
    setup_access(l, o, op, &a, 1, id, op->shape.rank);
    if (op->iattr[0] && !(a.mask = opnd_regs(l, o, 1 + a.trank)))
        return false;
    a.maskv = op->iattr[0] ? op->opnd[1 + a.trank] : 0;
    LLVMValueRef *out = regs_alloc(l, cg_layout_regs(cg_lay(l->cg, id)));
    if (!out || !block_access(l, &a, out))
        return false;
    return set_result(l, rv, id, out);
}

static bool lower_load_rows(L *l, uint32_t o, ir_op *op)
{
    uint32_t rv = op->res[0];
    int32_t id = l->cg->vlay[rv];
    macc a;
    setup_access(l, o, op, &a, 2, id, op->shape.rank);
    LLVMValueRef *rows = opnd_regs(l, o, 1);
    if (!rows)
        return false;
    /* rows are in rowproj(layout): register j of the tile takes row register compress(j) */
    const cg_layout *lay = cg_lay(l->cg, id);
    int n = cg_layout_regs(lay);
    a.rows = regs_alloc(l, n);
    LLVMValueRef *out = regs_alloc(l, n);
    if (!a.rows || !out)
        return false;
    for (int j = 0; j < n; j++) {
        int jr = 0, nb = 0;
        for (int i = 0; i < lay->nreg; i++)
            if (lay->reg[i].dim == 0)
                jr |= ((j >> i) & 1) << nb++;
        a.rows[j] = to_i64(l, rows[jr]);
    }
    if (!block_access(l, &a, out))
        return false;
    return set_result(l, rv, id, out);
}

static bool lower_store(L *l, uint32_t o, ir_op *op)
{
    int r = vty(l, op->opnd[0])->shape.rank;
    uint32_t val = op->opnd[1 + r];
    macc a;
    int32_t id = cg_want(l->cg, o, 1 + r);
    setup_access(l, o, op, &a, 1, id, vty(l, val)->shape.rank);
    a.store = true;
    if (!(a.vals = opnd_regs(l, o, 1 + r)))
        return false;
    if (op->iattr[0] && !(a.mask = opnd_regs(l, o, 2 + r)))
        return false;
    a.maskv = op->iattr[0] ? op->opnd[2 + r] : 0;
    return block_access(l, &a, NULL);
}

static bool lower_load_scalar(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    uint32_t t = op->opnd[0];
    const ir_arg *arg = &l->k->args[l->k->vals[t].def];
    int es = cg_elsize(arg->dtype);
    LLVMValueRef off = ci64(l, 0);
    for (int d = 0; d < arg->shape.rank; d++)
        off = LLVMBuildAdd(l->B, off,
                           LLVMBuildMul(l->B, to_i64(l, l->vals[op->opnd[1 + d]].r[0]), ci64(l, arg->strides[d] * es), ""), "");
    LLVMValueRef p = LLVMBuildGEP2(l->B, l->t_i8, LLVMGetParam(l->fn, l->k->vals[t].def), &off, 1, "");
    LLVMValueRef x = LLVMBuildLoad2(l->B, bits_type(l, es), p, "");
    LLVMSetAlignment(x, (unsigned)es);
    return set_scalar(l, op->res[0], from_bits(l, arg->dtype, x));
}

/* ---------------------------------------------------------------- control flow */

static bool lower_block(L *l, uint32_t b);

/* Registers of the yield of block b, operand i, in the layout its parent wants. */
static LLVMValueRef *yield_regs(L *l, uint32_t b, int i)
{
    ir_block *blk = &l->k->blocks[b];
    uint32_t y = blk->ops[blk->nops - 1];
    l->cur_op = y;
    return opnd_regs(l, y, i);
}

static bool lower_for(L *l, uint32_t o, ir_op *op)
{
    cg_ctx *cg = l->cg;
    int nc = op->nres;
    LLVMValueRef lo = l->vals[op->opnd[0]].r[0], hi = l->vals[op->opnd[1]].r[0], step = l->vals[op->opnd[2]].r[0];
    LLVMValueRef **init = lalloc(l, (size_t)(nc + 1) * sizeof *init);
    if (!init)
        return false;
    for (int i = 0; i < nc; i++)
        if (!(init[i] = opnd_regs(l, o, 3 + i)))
            return false;
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(l->B);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(l->C, l->fn, "for.head");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(l->C, l->fn, "for.body");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(l->C, l->fn, "for.exit");
    LLVMBuildBr(l->B, head);
    LLVMPositionBuilderAtEnd(l->B, head);
    LLVMValueRef iv = LLVMBuildPhi(l->B, l->t_i32, "iv");
    ir_block *bb = &l->k->blocks[op->reg[0]];
    LLVMValueRef **phis = lalloc(l, (size_t)(nc + 1) * sizeof *phis);
    if (!phis)
        return false;
    for (int i = 0; i < nc; i++) {
        int32_t id = cg->vlay[op->res[i]];
        int n = cg_layout_regs(cg_lay(cg, id));
        LLVMTypeRef t = reg_type(l, vdt(l, op->res[i]));
        if (!(phis[i] = regs_alloc(l, n)))
            return false;
        for (int j = 0; j < n; j++)
            phis[i][j] = LLVMBuildPhi(l->B, t, "");
        set_result(l, bb->args[1 + i], id, phis[i]);
        set_result(l, op->res[i], id, phis[i]);
    }
    set_scalar(l, bb->args[0], iv);
    LLVMValueRef cond = LLVMBuildICmp(l->B, LLVMIntSLT, iv, hi, "");
    LLVMBuildCondBr(l->B, cond, body, exit);
    LLVMPositionBuilderAtEnd(l->B, body);
    if (!lower_block(l, op->reg[0]))
        return false;
    LLVMValueRef **ys = lalloc(l, (size_t)(nc + 1) * sizeof *ys);
    if (!ys)
        return false;
    for (int i = 0; i < nc; i++)
        if (!(ys[i] = yield_regs(l, op->reg[0], i)))
            return false;
    LLVMValueRef next = LLVMBuildAdd(l->B, iv, step, "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(l->B);
    LLVMBuildBr(l->B, head);
    LLVMValueRef inc[2];
    LLVMBasicBlockRef from[2] = {pre, latch};
    inc[0] = lo;
    inc[1] = next;
    LLVMAddIncoming(iv, inc, from, 2);
    for (int i = 0; i < nc; i++) {
        int n = cg_layout_regs(cg_lay(cg, cg->vlay[op->res[i]]));
        for (int j = 0; j < n; j++) {
            inc[0] = init[i][j];
            inc[1] = ys[i][j];
            LLVMAddIncoming(phis[i][j], inc, from, 2);
        }
    }
    LLVMPositionBuilderAtEnd(l->B, exit);
    return true;
}

static bool lower_if(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    cg_ctx *cg = l->cg;
    int nr = op->nres;
    LLVMValueRef cond = l->vals[op->opnd[0]].r[0];
    LLVMBasicBlockRef bt = LLVMAppendBasicBlockInContext(l->C, l->fn, "if.then");
    LLVMBasicBlockRef be = LLVMAppendBasicBlockInContext(l->C, l->fn, "if.else");
    LLVMBasicBlockRef bm = LLVMAppendBasicBlockInContext(l->C, l->fn, "if.end");
    LLVMBuildCondBr(l->B, cond, bt, be);
    LLVMValueRef **ys[2];
    LLVMBasicBlockRef ends[2];
    LLVMBasicBlockRef starts[2] = {bt, be};
    for (int r = 0; r < 2; r++) {
        LLVMPositionBuilderAtEnd(l->B, starts[r]);
        ys[r] = lalloc(l, (size_t)(nr + 1) * sizeof(LLVMValueRef *));
        if (!ys[r])
            return false;
        if (op->reg[r]) {
            if (!lower_block(l, op->reg[r]))
                return false;
            for (int i = 0; i < nr; i++)
                if (!(ys[r][i] = yield_regs(l, op->reg[r], i)))
                    return false;
        }
        ends[r] = LLVMGetInsertBlock(l->B);
        LLVMBuildBr(l->B, bm);
    }
    LLVMPositionBuilderAtEnd(l->B, bm);
    for (int i = 0; i < nr; i++) {
        int32_t id = cg->vlay[op->res[i]];
        int n = cg_layout_regs(cg_lay(cg, id));
        LLVMValueRef *out = regs_alloc(l, n);
        if (!out)
            return false;
        for (int j = 0; j < n; j++) {
            out[j] = LLVMBuildPhi(l->B, reg_type(l, vdt(l, op->res[i])), "");
            LLVMValueRef inc[2] = {ys[0][i][j], ys[1][i][j]};
            LLVMAddIncoming(out[j], inc, ends, 2);
        }
        set_result(l, op->res[i], id, out);
    }
    return true;
}

static bool lower_yield(L *l, uint32_t o, ir_op *op)
{
    (void)l;
    (void)o;
    (void)op;
    return true; /* the enclosing for / if reads the yielded values */
}

/* The Hopper half of the lowering (shared memory, barriers, TMA, wgmma, tasks) is kept
 * in its own file for reading; it uses this file's state and helpers. */
#include "lower_hopper.c"

static const lower_fn lower_table[IR_OP_COUNT] = {
#define LOOM_OP(E, n, nop, nreg, rule, fl, sem, lay, pr, attrs) [IR_##E] = lower_##n,
#include "ops.h"
#undef LOOM_OP
};

static bool lower_block(L *l, uint32_t b)
{
    ir_block *blk = &l->k->blocks[b];
    for (uint32_t i = 0; i < blk->nops; i++) {
        uint32_t o = blk->ops[i];
        ir_op *op = &l->k->ops[o];
        l->cur_op = o;
        if (!lower_table[op->kind](l, o, op))
            return l->cg->st != LOOM_OK ? false
                                        : CG_BUG(l->cg, "lowering op '%s' failed", ir_opdescs[op->kind].name);
        if (l->cg->st != LOOM_OK)
            return false;
    }
    return true;
}

/* ---------------------------------------------------------------- the kernel function */

static void annotate(L *l, const char *key, int val)
{
    LLVMMetadataRef md[3] = {LLVMValueAsMetadata(l->fn), LLVMMDStringInContext2(l->C, key, strlen(key)),
                             LLVMValueAsMetadata(LLVMConstInt(l->t_i32, (unsigned long long)val, 0))};
    LLVMAddNamedMetadataOperand(l->M, "nvvm.annotations", LLVMMetadataAsValue(l->C, LLVMMDNodeInContext2(l->C, md, 3)));
}

static void add_param_attr(L *l, unsigned idx, const char *name, uint64_t val)
{
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    if (kind)
        LLVMAddAttributeAtIndex(l->fn, idx, LLVMCreateEnumAttribute(l->C, kind, val));
}

loom_status cg_lower(cg_ctx *cg, void *llvm_ctx, void **module_out)
{
    loom_kernel *k = cg->k;
    L l0 = {0}, *l = &l0;
    l->cg = cg;
    l->k = k;
    l->C = (LLVMContextRef)llvm_ctx;
    l->M = LLVMModuleCreateWithNameInContext(loom_kernel_name(k), l->C);
    LLVMSetTarget(l->M, "nvptx64-nvidia-cuda");
    l->B = LLVMCreateBuilderInContext(l->C);
    l->PB = LLVMCreateBuilderInContext(l->C);
    l->t_i1 = LLVMInt1TypeInContext(l->C);
    l->t_i8 = LLVMInt8TypeInContext(l->C);
    l->t_i16 = LLVMInt16TypeInContext(l->C);
    l->t_i32 = LLVMInt32TypeInContext(l->C);
    l->t_i64 = LLVMInt64TypeInContext(l->C);
    l->t_f32 = LLVMFloatTypeInContext(l->C);
    l->t_f16 = LLVMHalfTypeInContext(l->C);
    l->t_void = LLVMVoidTypeInContext(l->C);
    l->t_gptr = LLVMPointerTypeInContext(l->C, 1);
    l->t_sptr = LLVMPointerTypeInContext(l->C, 3);
    l->vals = calloc(k->nvals, sizeof *l->vals);
    if (!l->vals) {
        cg_fail(cg, LOOM_ERR_NOMEM, "out of memory");
        goto done;
    }

    if (!hopper_collect_tma(l))
        goto done;
    LLVMTypeRef pt[LOOM_MAX_ARGS + 16];
    for (int a = 0; a < k->nargs; a++)
        pt[a] = k->args[a].is_tensor ? l->t_gptr : reg_type(l, k->args[a].dtype);
    for (int t = 0; t < cg->ntma; t++)
        pt[k->nargs + t] = LLVMPointerTypeInContext(l->C, 0); /* byval [128 x i8] */
    LLVMTypeRef fty = LLVMFunctionType(l->t_void, pt, (unsigned)(k->nargs + cg->ntma), 0);
    l->fn = LLVMAddFunction(l->M, loom_kernel_name(k), fty);
    LLVMSetFunctionCallConv(l->fn, LLVMPTXKernelCallConv);
    int threads = loom_kernel_num_warps(k) * 32;
    char nt[32];
    snprintf(nt, sizeof nt, "%d", threads);
    LLVMAddAttributeAtIndex(l->fn, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(l->C, "nvvm.maxntid", 12, nt, (unsigned)strlen(nt)));
    annotate(l, "kernel", 1);
    annotate(l, "maxntidx", threads);
    hopper_kernel_attrs(l);
    for (int a = 0; a < k->nargs; a++) {
        LLVMSetValueName2(LLVMGetParam(l->fn, (unsigned)a), k->args[a].name, strlen(k->args[a].name));
        if (!k->args[a].is_tensor)
            continue;
        add_param_attr(l, (unsigned)a + 1, "noalias", 0);
        add_param_attr(l, (unsigned)a + 1, "align", 16);
        if (k->args[a].access == LOOM_IN)
            add_param_attr(l, (unsigned)a + 1, "readonly", 0);
    }
    if (cg->smem_bytes) {
        l->smem = LLVMAddGlobalInAddressSpace(l->M, LLVMArrayType2(l->t_i8, 0), "loom_smem", 3);
        LLVMSetLinkage(l->smem, LLVMExternalLinkage);
        LLVMSetAlignment(l->smem, 1024); /* swizzled rings need 1024-byte alignment */
    }

    l->entry = LLVMAppendBasicBlockInContext(l->C, l->fn, "entry");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(l->C, l->fn, "body");
    LLVMPositionBuilderAtEnd(l->PB, l->entry);
    LLVMPositionBuilderAtEnd(l->B, body);
    LLVMValueRef tid = sreg(l, "llvm.nvvm.read.ptx.sreg.tid.x");
    l->lane = LLVMBuildAnd(l->PB, tid, ci32(l, 31), "lane");
    l->warp = LLVMBuildAnd(l->PB, LLVMBuildLShr(l->PB, tid, ci32(l, 5), ""), ci32(l, (1 << cg->warp_bits) - 1), "warp");
    l->tid = tid;
    for (int a = 0; a < k->nargs; a++)
        if (!k->args[a].is_tensor)
            set_scalar(l, k->args[a].value, LLVMGetParam(l->fn, (unsigned)a));
    hopper_entry(l);

    if (lower_block(l, 1)) {
        cluster_sync(l);
        LLVMBuildRetVoid(l->B);
        LLVMBuildBr(l->PB, body);
        char *msg = NULL;
        if (LLVMVerifyModule(l->M, LLVMReturnStatusAction, &msg)) {
            CG_BUG(cg, "LLVM rejected the generated IR: %.300s", msg ? msg : "?");
        }
        LLVMDisposeMessage(msg);
    }
done:
    LLVMDisposeBuilder(l->B);
    LLVMDisposeBuilder(l->PB);
    free(l->vals);
    free(l->tcoord);
    free(l->op_tma);
    while (l->mem) {
        chunk *n = l->mem->next;
        free(l->mem);
        l->mem = n;
    }
    if (cg->st != LOOM_OK) {
        LLVMDisposeModule(l->M);
        *module_out = NULL;
        return cg->st;
    }
    *module_out = l->M;
    return LOOM_OK;
}
