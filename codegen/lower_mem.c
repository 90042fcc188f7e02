/*
 * lower_mem.c -- global memory: load, load_rows (a gather of rows), store and
 * load_scalar.
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
 * a bound excludes is read or written (a clamped load, clamped_load, reads an element
 * inside the tensor in its place and selects the fill).
 *
 * One planner serves the three tile ops: a macc describes the access (tensor, offsets,
 * layout, mask, the rows of a gather, the values of a store) and block_access emits it:
 * the uniform part of the offset and the leading dims' checks once, the valid range of
 * each tiled dim, the vector width (vec_width), then one predicated access per vector
 * (gaccess for a load; stores go several to an asm statement, sb_store).  load_scalar,
 * uniform, is a plain load.
 */
#include "lower.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- the access planner */

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

static LLVMValueRef clamp64(L *l, LLVMValueRef x, int64_t lo, int64_t hi)
{
    x = LLVMBuildSelect(l->B, LLVMBuildICmp(l->B, LLVMIntSLT, x, ci64(l, lo), ""), ci64(l, lo), x, "");
    x = LLVMBuildSelect(l->B, LLVMBuildICmp(l->B, LLVMIntSGT, x, ci64(l, hi), ""), ci64(l, hi), x, "");
    return LLVMBuildTrunc(l->B, x, l->t_i32, "");
}

static LLVMValueRef imin(L *l, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(l->B, LLVMBuildICmp(l->B, LLVMIntSLT, a, b, ""), a, b, "");
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
    case LOOM_E4M3:
    case LOOM_E5M2: return ir_f32_to_fp8(dt, x);
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

/* The bits of one f16 element stored on its own, from its f32 register x.  LLVM 19 turns
 * every bitcast of a half to i16 into a ProxyReg machine instruction, and the pass that
 * erases them walks the whole function once per instance: a tile stored element by
 * element (a transposed store) spent a tenth of its PTX emission there.  cvt.rn.f16.f32
 * into a b16 register (llvm.nvvm.f2h.rn) gives the same bits without one.  A register
 * that is the f32 of an f16 rounding (a cast) is rounded from its source again, so no
 * f32 -> f16 -> f32 -> f16 chain is left for instcombine to fold. */
static LLVMValueRef f16_bits(L *l, LLVMValueRef x)
{
    static const char f2h[] = "llvm.nvvm.f2h.rn";
    if (!LLVMLookupIntrinsicID(f2h, sizeof f2h - 1)) /* an LLVM without it: the bitcast */
        return to_bits(l, LOOM_F16, x);
    LLVMValueRef h = LLVMIsAFPExtInst(x) ? LLVMGetOperand(x, 0) : NULL;
    if (h && LLVMTypeOf(h) != l->t_f16)
        h = NULL;
    if (h && !(LLVMIsAFPTruncInst(h) && LLVMTypeOf(LLVMGetOperand(h, 0)) == l->t_f32))
        return LLVMBuildBitCast(l->B, h, l->t_i16, ""); /* e.g. a loaded f16: its own bits */
    LLVMValueRef y = h ? LLVMGetOperand(h, 0) : x;
    return lw_call_intr(l, l->B, f2h, NULL, 0, &y, 1);
}

static bool const_is(LLVMValueRef c, unsigned long long v)
{
    return c && LLVMIsAConstantInt(c) && LLVMConstIntGetZExtValue(c) == v;
}

/* The 32-bit word that the registers a and b of a 16-bit type were unpacked from, a the
 * low half and b the high (a row read 16 bytes at a time from shared memory: lower_smem_load),
 * or NULL.  Storing that word moves the bits as they are, instead of rounding each element
 * again and packing them anew for instcombine to see through. */
static LLVMValueRef unpacked_from(L *l, loom_dtype dt, LLVMValueRef a, LLVMValueRef b)
{
    if (dt == LOOM_F16) {
        LLVMValueRef ea = LLVMIsAFPExtInst(a) ? LLVMGetOperand(a, 0) : NULL;
        LLVMValueRef eb = LLVMIsAFPExtInst(b) ? LLVMGetOperand(b, 0) : NULL;
        if (!ea || !eb || !LLVMIsAExtractElementInst(ea) || !LLVMIsAExtractElementInst(eb))
            return NULL;
        LLVMValueRef v = LLVMGetOperand(ea, 0);
        if (v != LLVMGetOperand(eb, 0) || !const_is(LLVMGetOperand(ea, 1), 0) || !const_is(LLVMGetOperand(eb, 1), 1) ||
            !LLVMIsABitCastInst(v) || LLVMTypeOf(LLVMGetOperand(v, 0)) != l->t_i32)
            return NULL;
        return LLVMGetOperand(v, 0);
    }
    if (dt == LOOM_BF16) { /* a = w << 16, b = w & 0xffff0000, each as f32 */
        LLVMValueRef sa = LLVMIsABitCastInst(a) ? LLVMGetOperand(a, 0) : NULL;
        LLVMValueRef sb = LLVMIsABitCastInst(b) ? LLVMGetOperand(b, 0) : NULL;
        if (!sa || !sb || LLVMGetInstructionOpcode(sa) != LLVMShl || LLVMGetInstructionOpcode(sb) != LLVMAnd)
            return NULL;
        LLVMValueRef w = LLVMGetOperand(sa, 0);
        if (w != LLVMGetOperand(sb, 0) || !const_is(LLVMGetOperand(sa, 1), 16) ||
            !const_is(LLVMGetOperand(sb, 1), 0xffff0000u))
            return NULL;
        return w;
    }
    return NULL;
}

/* The words that v registers x[0 .. v) of a 16-bit type were unpacked from, pair by pair
 * (unpacked_from), into w; false where one pair was not. */
static bool loaded_words(L *l, loom_dtype dt, const LLVMValueRef *x, int v, LLVMValueRef *w)
{
    if (v % 2 || (dt != LOOM_F16 && dt != LOOM_BF16))
        return false;
    for (int i = 0; i < v / 2; i++)
        if (!(w[i] = unpacked_from(l, dt, x[2 * i], x[2 * i + 1])))
            return false;
    return true;
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

/* Word i of the fill of a load of `bytes` bytes (the fill's bits repeated over 64 bits in
 * fill_word; fill16 for one 16-bit element): what a predicated load leaves where it reads
 * nothing. */
static uint32_t word_fill(int bytes, int i, uint64_t fill_word, uint16_t fill16)
{
    return bytes == 2 ? fill16 : (uint32_t)((bytes >= 8 && (i & 1) ? fill_word >> 32 : fill_word) & 0xffffffffu);
}

/* One predicated global load of `bytes` bytes at addr + imm (imm a constant byte offset,
 * written into the instruction: PTX's [reg+imm] addressing), the fill moved in first;
 * the words come back in w.  A predicate NULL or constant true: a plain load.  (Stores:
 * sb_store.) */
static void gaccess(L *l, bool nc, int bytes, LLVMValueRef addr, int64_t imm, LLVMValueRef pred, LLVMValueRef *w,
                    uint64_t fill_word, uint16_t fill16)
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
    bool always = !pred || (LLVMIsAConstantInt(pred) && LLVMConstIntGetZExtValue(pred)); /* no predicate */
    for (int i = 0; i < nw && !always; i++)
        p += snprintf(text + p, sizeof text - (size_t)p, bytes == 2 ? "mov.b16 $%d, 0x%04x; " : "mov.b32 $%d, 0x%08x; ", i,
                      (unsigned)word_fill(bytes, i, fill_word, fill16));
    if (!always)
        p += snprintf(text + p, sizeof text - (size_t)p, "@$%d ", nw + 1);
    p += snprintf(text + p, sizeof text - (size_t)p, "ld.global%s%s.%s %s", nc ? ".nc" : "", vec, ty, nw > 1 ? "{" : "");
    for (int i = 0; i < nw; i++)
        p += snprintf(text + p, sizeof text - (size_t)p, "%s$%d", i ? ", " : "", i);
    snprintf(text + p, sizeof text - (size_t)p, "%s, [$%d%s];", nw > 1 ? "}" : "", nw, disp);
    for (int i = 0; i < nw; i++)
        c += snprintf(cons + c, sizeof cons - (size_t)c, "%s=%s", i ? "," : "", rc);
    snprintf(cons + c, sizeof cons - (size_t)c, always ? ",l" : ",l,b");
    LLVMTypeRef wt = bytes == 2 ? l->t_i16 : l->t_i32;
    LLVMTypeRef rt = wt;
    if (nw > 1) {
        LLVMTypeRef el[4] = {wt, wt, wt, wt};
        rt = LLVMStructTypeInContext(l->C, el, (unsigned)nw, 0);
    }
    LLVMValueRef args[2] = {addr, pred};
    LLVMValueRef r = lw_asm_call(l, rt, text, cons, args, always ? 1 : 2, nc);
    for (int i = 0; i < nw; i++)
        w[i] = nw > 1 ? LLVMBuildExtractValue(l->B, r, (unsigned)i, "") : r;
}

/* Predicated stores, several to one asm statement.  A tile stored element by element
 * (a transposed tile, a masked tail) is a few hundred stores; as one statement each,
 * instruction selection spent more on the statements than on the stores.  Grouped, the
 * PTX is the same sequence of st.global instructions.  A store without a predicate is
 * not guarded. */
#define SB_MAX 16 /* stores per statement */
typedef struct stbatch {
    int n, nargs;
    size_t p, c;
    char text[SB_MAX * 96 + 16], cons[SB_MAX * 16 + 16];
    LLVMValueRef args[SB_MAX * 6];
} stbatch;

static void sb_flush(L *l, stbatch *b)
{
    if (b->n) { /* lw_asm_call takes at most 16 operands */
        LLVMTypeRef at[SB_MAX * 6];
        for (int i = 0; i < b->nargs; i++)
            at[i] = LLVMTypeOf(b->args[i]);
        LLVMTypeRef ft = LLVMFunctionType(l->t_void, at, (unsigned)b->nargs, 0);
        LLVMValueRef f = LLVMGetInlineAsm(ft, b->text, b->p, b->cons, b->c, 1, 0, LLVMInlineAsmDialectATT, 0);
        /* convergent, as every statement with side effects (lw_asm_call) */
        lw_add_fn_attr_call(l, LLVMBuildCall2(l->B, ft, f, b->args, (unsigned)b->nargs, ""), "convergent", 0);
    }
    b->n = b->nargs = 0;
    b->p = b->c = 0;
}

/* The operand number of x in the statement (one operand per distinct value). */
static int sb_operand(stbatch *b, LLVMValueRef x, const char *con)
{
    for (int i = 0; i < b->nargs; i++)
        if (b->args[i] == x)
            return i;
    b->c += (size_t)snprintf(b->cons + b->c, sizeof b->cons - b->c, "%s%s", b->nargs ? "," : "", con);
    b->args[b->nargs] = x;
    return b->nargs++;
}

static void sb_store(L *l, stbatch *b, int bytes, LLVMValueRef addr, int64_t imm, LLVMValueRef pred, LLVMValueRef *w)
{
    if (b->n == SB_MAX)
        sb_flush(l, b);
    int nw = bytes <= 2 ? 1 : bytes / 4;
    const char *ty = bytes == 1 ? "u8" : bytes == 2 ? "b16" : "b32", *rc = bytes == 2 ? "h" : "r";
    int a = sb_operand(b, addr, "l"), wi[4];
    for (int i = 0; i < nw; i++)
        wi[i] = sb_operand(b, w[i], rc);
    size_t n = sizeof b->text;
    if (pred && !(LLVMIsAConstantInt(pred) && LLVMConstIntGetZExtValue(pred)))
        b->p += (size_t)snprintf(b->text + b->p, n - b->p, "@$%d ", sb_operand(b, pred, "b"));
    b->p += (size_t)snprintf(b->text + b->p, n - b->p, "st.global");
    if (nw > 1)
        b->p += (size_t)snprintf(b->text + b->p, n - b->p, ".v%d", nw);
    b->p += (size_t)snprintf(b->text + b->p, n - b->p, ".%s [$%d", ty, a);
    if (imm)
        b->p += (size_t)snprintf(b->text + b->p, n - b->p, "+%lld", (long long)imm);
    b->p += (size_t)snprintf(b->text + b->p, n - b->p, "], %s", nw > 1 ? "{" : "");
    for (int i = 0; i < nw; i++)
        b->p += (size_t)snprintf(b->text + b->p, n - b->p, "%s$%d", i ? ", " : "", wi[i]);
    b->p += (size_t)snprintf(b->text + b->p, n - b->p, "%s;\n\t", nw > 1 ? "}" : "");
    b->n++;
}

/* Tensor argument arg's dim d as an i64: its size, or for a run-time dim the value of its
 * argument at this launch. */
static LLVMValueRef arg_dim(L *l, const ir_arg *arg, int d)
{
    if (!arg->dyn[d])
        return ci64(l, arg->shape.dim[d]);
    return LLVMBuildZExt(l->B, LLVMGetParam(l->fn, arg->dyn[d] - 1u), l->t_i64, "");
}

/* A number dim d of arg is known to be a multiple of: its size, or a run-time dim's hint. */
static int64_t dim_divisor(L *l, const ir_arg *arg, int d)
{
    return arg->dyn[d] ? l->k->args[arg->dyn[d] - 1].dim_multiple : arg->shape.dim[d];
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
        if (a->arg->strides[tl] != 1 || dim_divisor(l, a->arg, tl) % v || lay->shape[last] % v)
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

/* The bounds predicate of one tiled dim per register coordinate (its constant part). */
typedef struct dim_preds {
    int n;
    int64_t *k;
    LLVMValueRef *p;
} dim_preds;

static LLVMValueRef dim_pred_find(const dim_preds *d, int64_t k)
{
    for (int i = 0; i < d->n; i++)
        if (d->k[i] == k)
            return d->p[i];
    return NULL;
}

static void dim_pred_add(dim_preds *d, int64_t k, LLVMValueRef p)
{
    d->k[d->n] = k;
    d->p[d->n++] = p;
}

/* What block_access works out once per access, before its vectors. */
typedef struct abounds {
    LLVMValueRef upred; /* the leading dims' validity (NULL: always) */
    /* per tiled dim: the valid coordinates [lo, hi) (NULL: a gather's row dim); where
     * the thread has many coordinates, tlo = t - lo and rng = max(min(hi, tile) - lo, 0) */
    LLVMValueRef lo[LOOM_MAX_RANK], hi[LOOM_MAX_RANK], tlo[LOOM_MAX_RANK], rng[LOOM_MAX_RANK];
    /* per tiled dim where the tile lies wholly inside the tensor or wholly outside it: the
     * one uniform predicate of all its coordinates (else NULL) */
    LLVMValueRef whole[LOOM_MAX_RANK];
    dim_preds dp[LOOM_MAX_RANK]; /* per tiled dim: the predicates made so far */
} abounds;

/* The tensor's address at the uniform part of the offset (the leading dims and the tile's
 * start), and in b->upred the leading dims' validity. */
static LLVMValueRef uniform_base(L *l, const macc *a, abounds *b)
{
    int es = cg_elsize(a->arg->dtype);
    bool gather = a->rows != NULL;
    LLVMValueRef uoff = ci64(l, 0);
    b->upred = NULL;
    for (int d = 0; d < a->trank; d++) {
        if (gather && d == 0)
            continue;
        uoff = LLVMBuildAdd(l->B, uoff, LLVMBuildMul(l->B, a->offs[d], ci64(l, a->arg->strides[d] * es), ""), "");
        if (d < a->lead) {
            LLVMValueRef ok = LLVMBuildICmp(l->B, LLVMIntULT, a->offs[d], arg_dim(l, a->arg, d), "");
            b->upred = lw_and_pred(l, b->upred, ok);
        }
    }
    return LLVMBuildGEP2(l->B, l->t_i8, a->base, &uoff, 1, "");
}

/* Each tiled dim's valid coordinates (b->lo, hi, tlo, rng) for vectors of v elements;
 * returns the elements the tile spans in the tensor (the largest offset from its start). */
static int64_t dim_bounds(L *l, const macc *a, int v, abounds *b)
{
    const cg_layout *lay = cg_lay(l->cg, a->lay);
    bool gather = a->rows != NULL;
    int64_t span = 0;
    for (int s = 0; s < a->srank; s++) {
        int td = a->lead + s;
        b->lo[s] = b->hi[s] = b->rng[s] = NULL;
        span += ((INT64_C(1) << lay->lg[s]) - 1) * (a->arg->strides[td] < 0 ? -a->arg->strides[td] : a->arg->strides[td]);
        b->whole[s] = NULL;
        if (gather && td == 0)
            continue;
        /* A tile of T = 2^k coordinates (no padding) at an offset that is a multiple of T,
         * in a dim whose size is one too, lies wholly inside (0 <= offset < dim) or wholly
         * outside: one uniform compare for all its coordinates, no per-element bounds (a
         * bias row read at a tile's column: n0 a multiple of BN, N of BN). */
        int64_t T = lay->shape[s];
        if (T == (INT64_C(1) << lay->lg[s]) && dim_divisor(l, a->arg, td) % T == 0 &&
            cg_divisor(l->cg, a->offv[td]) % T == 0) {
            b->whole[s] = LLVMBuildICmp(l->B, LLVMIntULT, a->offs[td], arg_dim(l, a->arg, td), "");
            continue;
        }
        b->lo[s] = clamp64(l, LLVMBuildNeg(l->B, a->offs[td], ""), -1, INT64_C(1) << 21);
        b->hi[s] = clamp64(l, LLVMBuildSub(l->B, arg_dim(l, a->arg, td), a->offs[td], ""), -1, INT64_C(1) << 21);
        /* Where a thread has many coordinates along the dim, c (the thread's part t plus
         * the register's k, disjoint bits) is valid when lo <= c < min(hi, tile): (t - lo)
         * + k <u max(min(hi, tile) - lo, 0), one compare per coordinate instead of two
         * and an and (no wrap: all of it within +-2^21).  With few, the two compares
         * stay: instcombine often folds them with the clamps into one, where the bounds
         * here would cost a few instructions once. */
        int nb = 0;
        for (int i = 0; i < lay->nreg; i++)
            nb += lay->reg[i].dim == s;
        if ((1 << nb) < 8 * (s == a->srank - 1 ? v : 1))
            continue;
        LLVMValueRef h = b->hi[s];
        if (lay->shape[s] != (INT64_C(1) << lay->lg[s]))
            h = imin(l, h, ci32(l, lay->shape[s]));
        b->tlo[s] = LLVMBuildSub(l->B, lw_tcoord(l, a->lay, s), b->lo[s], "");
        LLVMValueRef r = LLVMBuildSub(l->B, h, b->lo[s], "");
        b->rng[s] = LLVMBuildSelect(l->B, LLVMBuildICmp(l->B, LLVMIntSGT, r, ci32(l, 0), ""), r, ci32(l, 0), "");
    }
    return span;
}

/* Below 2^31 bytes of span, an element's offset is the thread's part (from its lane and
 * warp, computed once: returned here, i64) plus its register's constant part, which goes
 * into the instruction as an immediate: no address arithmetic per access. */
static LLVMValueRef thread_offset(L *l, const macc *a)
{
    int es = cg_elsize(a->arg->dtype);
    LLVMValueRef t = ci32(l, 0);
    for (int s = 0; s < a->srank; s++) {
        int td = a->lead + s;
        if (a->rows && td == 0)
            continue;
        LLVMValueRef st = ci32(l, a->arg->strides[td] * es);
        t = LLVMBuildAdd(l->B, t, LLVMBuildMul(l->B, lw_tcoord(l, a->lay, s), st, ""), "");
    }
    return LLVMBuildSExt(l->B, t, l->t_i64, "");
}

/* The bounds of tiled dim s at register j0 (with the leading dims' check in dim 0's), made
 * once per coordinate: the registers of a tile share a few coordinates per dim. */
static LLVMValueRef dim_pred(L *l, const macc *a, abounds *b, int s, int j0)
{
    int64_t k = cg_reg_coord(cg_lay(l->cg, a->lay), j0, s);
    LLVMValueRef ps = dim_pred_find(&b->dp[s], k);
    if (ps)
        return ps;
    ps = s == 0 ? b->upred : NULL;
    if (b->whole[s])
        ps = lw_and_pred(l, ps, b->whole[s]);
    else if (b->rng[s]) /* lo <= c < hi, and inside the unpadded tile: one compare */
        ps = lw_and_pred(l, ps, LLVMBuildICmp(l->B, LLVMIntULT, LLVMBuildAdd(l->B, b->tlo[s], ci32(l, k), ""),
                                              b->rng[s], ""));
    else {
        LLVMValueRef c = lw_coord(l, a->lay, j0, s);
        ps = lw_and_pred(l, ps, lw_in_tile(l, a->lay, j0, s));
        if (b->lo[s]) {
            ps = lw_and_pred(l, ps, LLVMBuildICmp(l->B, LLVMIntSGE, c, b->lo[s], ""));
            ps = lw_and_pred(l, ps, LLVMBuildICmp(l->B, LLVMIntSLT, c, b->hi[s], ""));
        }
    }
    if (!ps)
        ps = LLVMConstInt(l->t_i1, 1, 0);
    dim_pred_add(&b->dp[s], k, ps);
    return ps;
}

/* The fill (its bits fb, of elements of es bytes) repeated over 64 bits: each 32-bit word
 * of a vector gets its half. */
static uint64_t fill_word(uint64_t fb, int es)
{
    if (es == 1)
        return fb * UINT64_C(0x0101010101010101);
    if (es == 2)
        return fb * UINT64_C(0x0001000100010001);
    if (es == 4)
        return fb | (fb << 32);
    return fb;
}

/* A load of many vectors from a 1-D tensor of a compile-time size (a bias row or column
 * in the accumulator's slice layout: 32 vectors a thread at 256 columns) is read without
 * predicates: each vector's element index clamped into [0, dim - v] (inside the tensor,
 * aligned as v divides dim and the offset), the fill selected after the load where the
 * element is out of bounds.  Predicated, ptxas hoists the loads together and needs every
 * predicate at once, more than its 7 predicate registers: the rest go to general
 * registers, which spilled the consumers of a split 128 x 256 GEMM with a bias row (36
 * bytes; none clamped).  A clamped read only ever touches elements of the tensor (never
 * past it); the values of an excluded element are never used. */
enum { CLAMP_MIN_VECTORS = 8, WHOLE_MAX_WORDS = 32 };
static bool clamped_load(const macc *a, int n, int v, bool wide)
{
    return !a->store && !a->rows && !a->mask && !wide && a->trank == 1 && a->srank == 1 && !a->arg->dyn[0] &&
           a->arg->shape.dim[0] >= v && a->arg->shape.dim[0] % v == 0 && n / v >= CLAMP_MIN_VECTORS;
}

/* Emit a block access (load, store, load_rows); for loads fills out[] (per register). */
static bool block_access(L *l, macc *a, LLVMValueRef *out)
{
    const cg_layout *lay = cg_lay(l->cg, a->lay);
    loom_dtype dt = a->arg->dtype;
    int es = cg_elsize(dt);
    int n = cg_layout_regs(lay);
    bool gather = a->rows != NULL;
    abounds b;
    LLVMValueRef base = uniform_base(l, a, &b);
    int v = gather ? 1 : vec_width(l, a);
    if (gather) { /* vectors along the last dim are fine for gathers too */
        macc g = *a;
        g.rows = NULL;
        v = vec_width(l, &g);
    }
    bool wide = dim_bounds(l, a, v, &b) * es >= (INT64_C(1) << 31);
    uint64_t fb = fill_bits(dt, a->op->fattr), fword = fill_word(fb, es);
    bool nc = !a->store && a->arg->access == LOOM_IN;
    LLVMValueRef toff = wide ? NULL : thread_offset(l, a);
    stbatch *sb = a->store ? lw_alloc(l, sizeof *sb) : NULL;
    for (int s = 0; s < a->srank; s++)
        if (!(b.dp[s].k = lw_alloc(l, (size_t)n * sizeof *b.dp[s].k)) || !(b.dp[s].p = lw_regs_alloc(l, n)))
            return false;
        else
            b.dp[s].n = 0;
    if (a->store && !sb)
        return false;
    if (!a->srank && b.upred) /* no tiled dim carries the leading dims' check */
        return CG_BUG(l->cg, "a block access without tiled dims");
    /* A load whose tiled dims all lie wholly inside or wholly outside (dim_bounds): read
     * unpredicated from the tile's start, or where it is outside from the tensor's (a tile
     * of this shape there is inside: every tiled dim is a multiple of its tile), the fill
     * selected after the load by the one uniform predicate.  Predicated instead, ptxas
     * issues every load of the tile at once and spilled the consumers of a split 128 x 256
     * GEMM with a bias row (36 bytes).  Unpredicated at constant offsets, it issues them at
     * once too: a load the clamped form would read (clamped_load) stays clamped where it
     * is more than WHOLE_MAX_WORDS words a thread (an f32 row of 256 in a split 128 x 256
     * GEMM's epilogue, 64 words: 4 bytes spilled; each clamped vector's address paces
     * them).  At 2048^3 the whole form took the f16 bias row's cost from 0.9 to 0.2-0.5 us
     * (bench/RESULTS.md, session 26). */
    bool clampable = clamped_load(a, n, v, wide);
    LLVMValueRef wpred = NULL;
    bool whole = !a->store && !gather && !a->mask && !wide && a->srank > 0 &&
                 !(clampable && (int64_t)n * es > 4 * WHOLE_MAX_WORDS);
    for (int s = 0; s < a->srank && whole; s++)
        whole = b.whole[s] != NULL;
    if (whole) {
        wpred = b.upred;
        for (int s = 0; s < a->srank; s++)
            wpred = lw_and_pred(l, wpred, b.whole[s]);
        base = LLVMBuildSelect(l->B, wpred, base, a->base, "");
    }
    bool clamped = clampable && !whole;
    /* a load's fill as a register value: for the padding, and past the bounds of a clamped load */
    LLVMValueRef fillv = a->store                ? NULL
                         : ir_dtype_is_fp8(dt) ? LLVMConstReal(l->t_f32, ir_fp8_to_f32(dt, (uint8_t)fb))
                                               : from_bits(l, dt, LLVMConstInt(bits_type(l, es), fb, 0));
    for (int j0 = 0; j0 < n; j0 += v) {
        /* a register of the padding (its coordinate past the tile for every thread: the
         * thread's bits only add to it) is never accessed: a load gives the fill */
        bool pad = false;
        for (int s = 0; s < a->srank; s++)
            pad |= cg_reg_coord(lay, j0, s) >= lay->shape[s];
        if (pad) {
            for (int e = 0; e < v && !a->store; e++)
                out[j0 + e] = fillv;
            continue;
        }
        LLVMValueRef pred = NULL;
        LLVMValueRef off = ci64(l, 0); /* wide: the whole offset, computed here */
        int64_t imm = 0;
        for (int s = 0; s < a->srank; s++) {
            int td = a->lead + s;
            LLVMValueRef ps = whole ? NULL : dim_pred(l, a, &b, s, j0);
            if (ps && !(LLVMIsAConstantInt(ps) && LLVMConstIntGetZExtValue(ps)))
                pred = lw_and_pred(l, pred, ps);
            if (gather && td == 0)
                continue;
            if (!wide) {
                imm += cg_reg_coord(lay, j0, s) * a->arg->strides[td] * es;
                continue;
            }
            LLVMValueRef cc = LLVMBuildZExt(l->B, lw_coord(l, a->lay, j0, s), l->t_i64, "");
            off = LLVMBuildAdd(l->B, off, LLVMBuildMul(l->B, cc, ci64(l, a->arg->strides[td] * es), ""), "");
        }
        LLVMValueRef off64 = wide ? off : toff;
        if (gather) {
            LLVMValueRef row = a->rows[j0];
            pred = lw_and_pred(l, pred, LLVMBuildICmp(l->B, LLVMIntULT, row, arg_dim(l, a->arg, 0), ""));
            off64 = LLVMBuildAdd(l->B, off64, LLVMBuildMul(l->B, row, ci64(l, a->arg->strides[0] * es), ""), "");
        }
        if (a->mask)
            pred = lw_and_pred(l, pred, a->mask[j0]);
        LLVMValueRef addr = clamped ? NULL : LLVMBuildGEP2(l->B, l->t_i8, base, &off64, 1, ""); /* clamped: its own */
        LLVMValueRef w[4], eb[16];
        if (a->store) {
            if (ir_dtype_is_fp8(dt)) { /* a pair to one cvt */
                lw_fp8_bytes(l, dt, a->vals + j0, v, eb);
                pack_words(l, eb, v, es, w);
            } else if (!loaded_words(l, dt, a->vals + j0, v, w)) { /* not all words as loaded: pack them */
                for (int e = 0; e < v; e++)
                    eb[e] = v == 1 && dt == LOOM_F16 ? f16_bits(l, a->vals[j0 + e]) : to_bits(l, dt, a->vals[j0 + e]);
                pack_words(l, eb, v, es, w);
            }
            sb_store(l, sb, v * es, addr, imm, pred, w);
        } else {
            if (clamped) { /* the element clamped into [0, dim - v], read unpredicated */
                LLVMValueRef el = LLVMBuildAdd(l->B, a->offs[0],
                                               LLVMBuildSExt(l->B, lw_coord(l, a->lay, j0, 0), l->t_i64, ""), "");
                el = LLVMBuildSelect(l->B, LLVMBuildICmp(l->B, LLVMIntSGT, el, ci64(l, 0), ""), el, ci64(l, 0), "");
                LLVMValueRef last = ci64(l, a->arg->shape.dim[0] - v);
                el = LLVMBuildSelect(l->B, LLVMBuildICmp(l->B, LLVMIntSLT, el, last, ""), el, last, "");
                LLVMValueRef eoff = LLVMBuildMul(l->B, el, ci64(l, es), "");
                gaccess(l, nc, v * es, LLVMBuildGEP2(l->B, l->t_i8, a->base, &eoff, 1, ""), 0, NULL, w, fword,
                        (uint16_t)fb);
            } else
                gaccess(l, nc, v * es, addr, imm, pred, w, fword, (uint16_t)fb);
            if (wpred) /* a whole tile outside: the fill, in place of the words (a value keeps
                        * being one that was loaded, for an FP8 store or a cast of it) */
                for (int i = 0; i < (v * es <= 2 ? 1 : v * es / 4); i++)
                    w[i] = LLVMBuildSelect(
                        l->B, wpred, w[i], LLVMConstInt(LLVMTypeOf(w[i]), word_fill(v * es, i, fword, (uint16_t)fb), 0), "");
            unpack_words(l, w, v, es, eb);
            if (ir_dtype_is_fp8(dt))
                lw_fp8_decode(l, dt, eb, v, out + j0); /* a pair to one cvt */
            else
                for (int e = 0; e < v; e++)
                    out[j0 + e] = from_bits(l, dt, eb[e]);
            if (clamped && pred) /* past the bounds: the fill, chosen after the load */
                for (int e = 0; e < v; e++)
                    out[j0 + e] = LLVMBuildSelect(l->B, pred, out[j0 + e], fillv, "");
        }
    }
    if (sb)
        sb_flush(l, sb);
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
        a->offs[d] = lw_to_i64(l, l->vals[a->offv[d]].r[0]);
    }
    return true;
}

/* ---------------------------------------------------------------- ops */

bool lower_load(L *l, uint32_t o, ir_op *op)
{
    uint32_t rv = op->res[0];
    int32_t id = l->cg->vlay[rv];
    macc a;
    setup_access(l, o, op, &a, 1, id, op->shape.rank);
    if (op->iattr[0] && !(a.mask = lw_opnd_regs(l, o, 1 + a.trank)))
        return false;
    a.maskv = op->iattr[0] ? op->opnd[1 + a.trank] : 0;
    LLVMValueRef *out = lw_regs_alloc(l, cg_layout_regs(cg_lay(l->cg, id)));
    if (!out || !block_access(l, &a, out))
        return false;
    return lw_set_result(l, rv, id, out);
}

bool lower_load_rows(L *l, uint32_t o, ir_op *op)
{
    uint32_t rv = op->res[0];
    int32_t id = l->cg->vlay[rv];
    macc a;
    setup_access(l, o, op, &a, 2, id, op->shape.rank);
    LLVMValueRef *rows = lw_opnd_regs(l, o, 1);
    if (!rows)
        return false;
    /* rows are in rowproj(layout): register j of the tile takes row register compress(j) */
    const cg_layout *lay = cg_lay(l->cg, id);
    int n = cg_layout_regs(lay);
    a.rows = lw_regs_alloc(l, n);
    LLVMValueRef *out = lw_regs_alloc(l, n);
    if (!a.rows || !out)
        return false;
    for (int j = 0; j < n; j++) {
        int jr = 0, nb = 0;
        for (int i = 0; i < lay->nreg; i++)
            if (lay->reg[i].dim == 0)
                jr |= ((j >> i) & 1) << nb++;
        a.rows[j] = lw_to_i64(l, rows[jr]);
    }
    if (!block_access(l, &a, out))
        return false;
    return lw_set_result(l, rv, id, out);
}

bool lower_store(L *l, uint32_t o, ir_op *op)
{
    int r = vty(l, op->opnd[0])->shape.rank;
    uint32_t val = op->opnd[1 + r];
    macc a;
    int32_t id = cg_want(l->cg, o, 1 + r);
    setup_access(l, o, op, &a, 1, id, vty(l, val)->shape.rank);
    a.store = true;
    if (!(a.vals = lw_opnd_regs(l, o, 1 + r)))
        return false;
    if (op->iattr[0] && !(a.mask = lw_opnd_regs(l, o, 2 + r)))
        return false;
    a.maskv = op->iattr[0] ? op->opnd[2 + r] : 0;
    return block_access(l, &a, NULL);
}

bool lower_load_scalar(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    uint32_t t = op->opnd[0];
    const ir_arg *arg = &l->k->args[l->k->vals[t].def];
    int es = cg_elsize(arg->dtype);
    LLVMValueRef off = ci64(l, 0);
    for (int d = 0; d < arg->shape.rank; d++)
        off = LLVMBuildAdd(l->B, off,
                           LLVMBuildMul(l->B, lw_to_i64(l, l->vals[op->opnd[1 + d]].r[0]), ci64(l, arg->strides[d] * es), ""), "");
    LLVMValueRef p = LLVMBuildGEP2(l->B, l->t_i8, LLVMGetParam(l->fn, l->k->vals[t].def), &off, 1, "");
    LLVMValueRef x = LLVMBuildLoad2(l->B, bits_type(l, es), p, "");
    LLVMSetAlignment(x, (unsigned)es);
    if (ir_dtype_is_fp8(arg->dtype)) {
        LLVMValueRef f;
        lw_fp8_decode(l, arg->dtype, &x, 1, &f);
        return lw_set_scalar(l, op->res[0], f);
    }
    return lw_set_scalar(l, op->res[0], from_bits(l, arg->dtype, x));
}
