/*
 * lower.c -- loom IR to LLVM IR (NVPTX flavour), through the LLVM C API: the kernel
 * function, registers and coordinates, operands, shape ops and control flow.  The ops of
 * other kinds are lowered in lower_math.c, lower_mem.c and the Hopper files (lower.h says
 * how the files divide the work).
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
 * Control flow: a for is a loop whose carried values are phis, register by register; an
 * if is a diamond with phis where its branches meet.  The yields of their regions are
 * read by the op that owns them, in the layouts of its results.
 *
 * The dispatch table is generated from dsl/ops.h, so an op without a lowering does not
 * link.
 */
#include "lower.h"

#include <llvm-c/Analysis.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the arena */

void *lw_alloc(L *l, size_t n)
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

LLVMValueRef *lw_regs_alloc(L *l, int n) { return lw_alloc(l, (size_t)n * sizeof(LLVMValueRef)); }

/* ---------------------------------------------------------------- helpers */

LLVMValueRef lw_to_i64(L *l, LLVMValueRef x)
{
    return LLVMTypeOf(x) == l->t_i64 ? x : LLVMBuildSExt(l->B, x, l->t_i64, "");
}

LLVMValueRef lw_call_intr(L *l, LLVMBuilderRef B, const char *name, LLVMTypeRef *tys, int nty,
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

void lw_add_fn_attr_call(L *l, LLVMValueRef call, const char *name, uint64_t val)
{
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    if (kind)
        LLVMAddCallSiteAttribute(call, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(l->C, kind, val));
}

/* Inline PTX.  pure: no side effects and no memory access (may be CSE'd / hoisted). */
LLVMValueRef lw_asm_call(L *l, LLVMTypeRef ret, const char *text, const char *cons, LLVMValueRef *args,
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
        lw_add_fn_attr_call(l, c, "nounwind", 0);
        lw_add_fn_attr_call(l, c, "memory", 0); /* memory(none) */
        lw_add_fn_attr_call(l, c, "willreturn", 0);
    } else {
        /* barriers, .aligned and .sync instructions: LLVM must not duplicate them into
         * divergent paths (tail merging once split a bar.sync between an elected thread
         * and the rest of its warp, which deadlocks) */
        lw_add_fn_attr_call(l, c, "convergent", 0);
    }
    return c;
}

void lw_barrier(L *l)
{
    if (l->bar_threads) { /* inside a task: its replica's own named barrier */
        char t[64];
        snprintf(t, sizeof t, "bar.sync $0, %d;", l->bar_threads);
        LLVMTypeRef at = l->t_i32;
        LLVMTypeRef ft = LLVMFunctionType(l->t_void, &at, 1, 0);
        const char *c = "r,~{memory}";
        LLVMValueRef a = LLVMGetInlineAsm(ft, t, strlen(t), c, strlen(c), 1, 0, LLVMInlineAsmDialectATT, 0);
        lw_add_fn_attr_call(l, LLVMBuildCall2(l->B, ft, a, &l->bar_id, 1, ""), "convergent", 0);
        return;
    }
    LLVMTypeRef ft = LLVMFunctionType(l->t_void, NULL, 0, 0);
    const char *t = "bar.sync 0;", *c = "~{memory}";
    LLVMValueRef a = LLVMGetInlineAsm(ft, t, strlen(t), c, strlen(c), 1, 0, LLVMInlineAsmDialectATT, 0);
    lw_add_fn_attr_call(l, LLVMBuildCall2(l->B, ft, a, NULL, 0, ""), "convergent", 0);
}

LLVMBasicBlockRef lw_if_begin(L *l, LLVMValueRef cond)
{
    LLVMBasicBlockRef t = LLVMAppendBasicBlockInContext(l->C, l->fn, "one");
    LLVMBasicBlockRef m = LLVMAppendBasicBlockInContext(l->C, l->fn, "one.end");
    LLVMBuildCondBr(l->B, cond, t, m);
    LLVMPositionBuilderAtEnd(l->B, t);
    return m;
}

void lw_if_end(L *l, LLVMBasicBlockRef m)
{
    LLVMBuildBr(l->B, m);
    LLVMPositionBuilderAtEnd(l->B, m);
}

static LLVMValueRef sreg(L *l, const char *name)
{
    return lw_call_intr(l, l->PB, name, NULL, 0, NULL, 0);
}

/* The per-thread part of the coordinate of layout id along dim d (i32, in the entry block). */
LLVMValueRef lw_tcoord(L *l, int32_t id, int d)
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
LLVMValueRef lw_coord(L *l, int32_t id, int j, int d)
{
    LLVMValueRef t = lw_tcoord(l, id, d);
    int64_t c = cg_reg_coord(cg_lay(l->cg, id), j, d);
    return c ? LLVMBuildOr(l->B, t, ci32(l, c), "") : t;
}

/* Is register j's element inside the real (unpadded) tile along dim d?  NULL: always. */
LLVMValueRef lw_in_tile(L *l, int32_t id, int j, int d)
{
    const cg_layout *lay = cg_lay(l->cg, id);
    if (lay->shape[d] == (INT64_C(1) << lay->lg[d]))
        return NULL;
    return LLVMBuildICmp(l->B, LLVMIntULT, lw_coord(l, id, j, d), ci32(l, lay->shape[d]), "");
}

LLVMValueRef lw_and_pred(L *l, LLVMValueRef a, LLVMValueRef b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    return LLVMBuildAnd(l->B, a, b, "");
}

/* Linear index of register j in a row-major scratch array over the padded dims. */
LLVMValueRef lw_lin_index(L *l, int32_t id, int j)
{
    const cg_layout *lay = cg_lay(l->cg, id);
    LLVMValueRef idx = ci32(l, 0);
    int shift = 0;
    for (int d = lay->rank - 1; d >= 0; d--) {
        LLVMValueRef c = lw_coord(l, id, j, d);
        idx = LLVMBuildOr(l->B, idx, shift ? LLVMBuildShl(l->B, c, ci32(l, shift), "") : c, "");
        shift += lay->lg[d];
    }
    return idx;
}

/* Scratch: byte_off within this code's scratch region. */
LLVMValueRef lw_smem_ptr(L *l, LLVMValueRef byte_off)
{
    if (l->scratch_base)
        byte_off = LLVMBuildAdd(l->B, byte_off, l->scratch_base, "");
    return LLVMBuildGEP2(l->B, l->t_i8, l->smem, &byte_off, 1, "");
}

void lw_close_loop(L *l, LLVMBasicBlockRef pre, LLVMBasicBlockRef body, LLVMBasicBlockRef exit, LLVMValueRef kv,
                   LLVMValueRef knext, int64_t limit, LLVMValueRef *phis, LLVMValueRef *start, LLVMValueRef *now,
                   int n)
{
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(l->B);
    LLVMBuildCondBr(l->B, LLVMBuildICmp(l->B, LLVMIntSLT, knext, ci32(l, limit), ""), body, exit);
    LLVMBasicBlockRef from[2] = {pre, latch};
    LLVMValueRef inc[2] = {ci32(l, 0), knext};
    LLVMAddIncoming(kv, inc, from, 2);
    for (int j = 0; j < n; j++) {
        inc[0] = start[j];
        inc[1] = now[j];
        LLVMAddIncoming(phis[j], inc, from, 2);
    }
    LLVMPositionBuilderAtEnd(l->B, exit);
}

bool lw_check_scratch(L *l, size_t bytes)
{
    if (!l->smem || bytes > l->cg->op_scratch[l->cur_op])
        return CG_BUG(l->cg, "op %u uses %zu bytes of scratch but the plan gave it %zu", l->cur_op, bytes,
                      l->smem ? l->cg->op_scratch[l->cur_op] : 0);
    return true;
}

void lw_smem_store(L *l, LLVMValueRef byte_off, LLVMValueRef v)
{
    if (LLVMTypeOf(v) == l->t_i1)
        v = LLVMBuildZExt(l->B, v, l->t_i8, "");
    LLVMBuildStore(l->B, v, lw_smem_ptr(l, byte_off));
}

LLVMValueRef lw_smem_load(L *l, LLVMValueRef byte_off, LLVMTypeRef t)
{
    bool b = t == l->t_i1;
    LLVMValueRef v = LLVMBuildLoad2(l->B, b ? l->t_i8 : t, lw_smem_ptr(l, byte_off), "");
    if (b)
        v = LLVMBuildICmp(l->B, LLVMIntNE, v, LLVMConstInt(l->t_i8, 0, 0), "");
    return v;
}

/* ---------------------------------------------------------------- operands */

static LLVMValueRef remat_op(L *l, uint32_t v, LLVMValueRef *c);

/* Element of value v at the given coordinates (i32 values, one per dim): recomputed when
 * v is remat, else v is a scalar (remat values are made of scalars and remat values). */
static LLVMValueRef remat_elem(L *l, uint32_t v, LLVMValueRef *c)
{
    const ir_type *t = vty(l, v);
    if (t->shape.rank == 0 || !l->cg->remat[v])
        return l->vals[v].r ? l->vals[v].r[0] : LLVMGetUndef(reg_type(l, (loom_dtype)t->dtype));
    return remat_op(l, v, c);
}

/* Element of v's defining op at the given coordinates, its operands recomputed.  The
 * recursion is as deep as the expression, which the layout pass bounds (CG_REMAT_MAX). */
static LLVMValueRef remat_op(L *l, uint32_t v, LLVMValueRef *c)
{
    const ir_type *t = vty(l, v);
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
    case IR_SLICE:
        for (int d = 0; d < t->shape.rank; d++)
            sc[d] = d == op->iattr[0] ? LLVMBuildAdd(l->B, c[d], ci32(l, op->iattr[1]), "") : c[d];
        return remat_elem(l, op->opnd[0], sc);
    default: {
        LLVMValueRef x[3];
        for (int i = 0; i < op->nopnd && i < 3; i++)
            x[i] = remat_elem(l, op->opnd[i], c);
        return lw_emit_ew(l, op, x);
    }
    }
}

/* The registers of v in layout `want`, each recomputed from v's defining op: a remat
 * value at a use, or a value too large to be remat at its definition (operands remat). */
static LLVMValueRef *remat_regs(L *l, uint32_t v, int32_t want)
{
    const cg_layout *wl = cg_lay(l->cg, want);
    int n = cg_layout_regs(wl);
    LLVMValueRef *out = lw_regs_alloc(l, n);
    if (!out)
        return NULL;
    if (l->k->ops[l->k->vals[v].def].kind == IR_SPLAT) { /* one value, no coordinates */
        LLVMValueRef x = remat_op(l, v, NULL);
        for (int j = 0; j < n; j++)
            out[j] = x;
        return out;
    }
    for (int j = 0; j < n; j++) {
        LLVMValueRef c[LOOM_MAX_RANK];
        for (int d = 0; d < wl->rank; d++)
            c[d] = lw_coord(l, want, j, d);
        out[j] = remat_op(l, v, c);
    }
    return out;
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
        if (!(out = lw_regs_alloc(l, n)))
            return NULL;
        for (int j = 0; j < n; j++)
            out[j] = l->vals[v].r[0];
        return out;
    }
    if (l->cg->remat[v])
        return remat_regs(l, v, want);
    lv *x = &l->vals[v];
    if (!x->r) {
        CG_BUG(l->cg, "value %%%u used before it was lowered", v);
        return NULL;
    }
    if (x->lay == want)
        return x->r;
    int32_t *map = lw_alloc(l, (size_t)n * sizeof *map);
    if (!map)
        return NULL;
    if (cg_direct_same(cg_lay(l->cg, x->lay), wl, map)) {
        if (!(out = lw_regs_alloc(l, n)))
            return NULL;
        for (int j = 0; j < n; j++)
            out[j] = x->r[map[j]];
        return out;
    }
    return convert(l, v, want);
}

/* The elements per shared-memory access of a conversion (<= 16 bytes): registers j ..
 * j + v - 1 of layout lay sit at consecutive, v-aligned places of the row-major scratch
 * array when the layout's first register bits are the innermost dim's first bits (no
 * lane or warp bit lands below them).  loom makes these vectors itself: LLVM's
 * load/store vectorizer, which found them before, is off (codegen/emit.c). */
static int smem_vec(const cg_layout *lay, loom_dtype dt, size_t eb)
{
    if (dt == LOOM_I1) /* stored as bytes */
        return 1;
    int b = 0;
    while (b < lay->nreg && lay->reg[b].dim == lay->rank - 1 && lay->reg[b].bit == b)
        b++;
    int v = 1 << b;
    while (v > 1 && (size_t)v * eb > 16)
        v /= 2;
    return v;
}

/* Convert through shared memory: bar; store in the source layout; bar; load in want. */
static LLVMValueRef *convert(L *l, uint32_t v, int32_t want)
{
    lv *x = &l->vals[v];
    loom_dtype dt = vdt(l, v);
    size_t eb = cg_reg_bytes(dt);
    const cg_layout *wl = cg_lay(l->cg, want);
    if (!lw_check_scratch(l, (size_t)cg_layout_padded_numel(wl) * eb))
        return NULL;
    LLVMTypeRef rt = reg_type(l, dt);
    lw_barrier(l);
    int vs = smem_vec(cg_lay(l->cg, x->lay), dt, eb);
    for (int j = 0; j < x->n; j += vs) {
        LLVMValueRef off = LLVMBuildMul(l->B, lw_lin_index(l, x->lay, j), ci32(l, (int64_t)eb), "");
        if (vs == 1) {
            lw_smem_store(l, off, x->r[j]);
            continue;
        }
        LLVMValueRef vec = LLVMGetUndef(LLVMVectorType(rt, (unsigned)vs));
        for (int e = 0; e < vs; e++)
            vec = LLVMBuildInsertElement(l->B, vec, x->r[j + e], ci32(l, e), "");
        LLVMSetAlignment(LLVMBuildStore(l->B, vec, lw_smem_ptr(l, off)), (unsigned)((size_t)vs * eb));
    }
    lw_barrier(l);
    int n = cg_layout_regs(wl);
    LLVMValueRef *out = lw_regs_alloc(l, n);
    if (!out)
        return NULL;
    int vl = smem_vec(wl, dt, eb);
    for (int j = 0; j < n; j += vl) {
        LLVMValueRef off = LLVMBuildMul(l->B, lw_lin_index(l, want, j), ci32(l, (int64_t)eb), "");
        if (vl == 1) {
            out[j] = lw_smem_load(l, off, rt);
            continue;
        }
        LLVMValueRef ld = LLVMBuildLoad2(l->B, LLVMVectorType(rt, (unsigned)vl), lw_smem_ptr(l, off), "");
        LLVMSetAlignment(ld, (unsigned)((size_t)vl * eb));
        for (int e = 0; e < vl; e++)
            out[j + e] = LLVMBuildExtractElement(l->B, ld, ci32(l, e), "");
    }
    return out;
}

LLVMValueRef *lw_opnd_regs(L *l, uint32_t o, int i)
{
    int32_t w = cg_want(l->cg, o, i);
    if (w < 0) {
        CG_BUG(l->cg, "operand %d of op %u has no layout", i, o);
        return NULL;
    }
    return get(l, l->k->ops[o].opnd[i], w);
}

bool lw_set_result(L *l, uint32_t v, int32_t lay, LLVMValueRef *r)
{
    if (!r)
        return false;
    l->vals[v].lay = lay;
    l->vals[v].n = cg_layout_regs(cg_lay(l->cg, lay));
    l->vals[v].r = r;
    return true;
}

bool lw_set_scalar(L *l, uint32_t v, LLVMValueRef x)
{
    LLVMValueRef *r = lw_regs_alloc(l, 1);
    if (!r)
        return false;
    r[0] = x;
    return lw_set_result(l, v, l->cg->scalar_layout, r);
}

/* ---------------------------------------------------------------- ops: grid, constants, shapes */

bool lower_program_id(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    static const char *n[] = {"llvm.nvvm.read.ptx.sreg.ctaid.x", "llvm.nvvm.read.ptx.sreg.ctaid.y",
                              "llvm.nvvm.read.ptx.sreg.ctaid.z"};
    return lw_set_scalar(l, op->res[0], lw_call_intr(l, l->B, n[op->iattr[0]], NULL, 0, NULL, 0));
}

bool lower_num_programs(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    static const char *n[] = {"llvm.nvvm.read.ptx.sreg.nctaid.x", "llvm.nvvm.read.ptx.sreg.nctaid.y",
                              "llvm.nvvm.read.ptx.sreg.nctaid.z"};
    return lw_set_scalar(l, op->res[0], lw_call_intr(l, l->B, n[op->iattr[0]], NULL, 0, NULL, 0));
}

bool lower_const(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    loom_dtype dt = (loom_dtype)op->iattr[0];
    LLVMValueRef c = ir_dtype_is_float(dt) ? LLVMConstReal(l->t_f32, op->fattr)
                                            : LLVMConstInt(reg_type(l, dt), (unsigned long long)op->iattr[1], 1);
    return lw_set_scalar(l, op->res[0], c);
}

/* Ops whose tile results are always remat (recomputed at each use) or plain copies. */
bool lower_shape_like(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    uint32_t rv = op->res[0];
    if (l->cg->remat[rv])
        return true;
    const ir_type *rt = vty(l, rv);
    if (rt->shape.rank == 0) /* a rank-0 splat/broadcast: the scalar itself */
        return lw_set_scalar(l, rv, l->vals[op->opnd[0]].r[0]);
    uint32_t s = op->opnd[0];
    const ir_type *st = vty(l, s);
    if (st->shape.rank == 0) {
        int32_t id = l->cg->vlay[rv];
        return lw_set_result(l, rv, id, get(l, s, id));
    }
    if (l->cg->remat[s]) { /* a remat expression too large to recompute at every use */
        int32_t id = l->cg->vlay[rv];
        return lw_set_result(l, rv, id, remat_regs(l, rv, id));
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
    int32_t *map = lw_alloc(l, (size_t)n * sizeof *map);
    LLVMValueRef *out = lw_regs_alloc(l, n);
    if (!map || !out)
        return false;
    const lv *x = &l->vals[s];
    if (!cg_direct_map(cg_lay(l->cg, x->lay), cg_lay(l->cg, id), feed, map))
        return CG_BUG(l->cg, "op '%s' needs data movement its layout was chosen to avoid",
                      ir_opdescs[op->kind].name);
    for (int j = 0; j < n; j++)
        out[j] = x->r[map[j]];
    return lw_set_result(l, rv, id, out);
}

/* slice: the part of the operand's registers that holds [start, start + size) along dim,
 * the operand taken in the layout that holds it so (cg_want: a conversion through shared
 * memory where its own layout spreads that part over other threads). */
bool lower_slice(L *l, uint32_t o, ir_op *op)
{
    uint32_t rv = op->res[0];
    if (l->cg->remat[rv])
        return true; /* recomputed at each use */
    int32_t id = l->cg->vlay[rv], w = cg_want(l->cg, o, 0);
    LLVMValueRef *src = lw_opnd_regs(l, o, 0);
    if (!src)
        return false;
    int n = cg_layout_regs(cg_lay(l->cg, id));
    int32_t *map = lw_alloc(l, (size_t)n * sizeof *map);
    LLVMValueRef *out = lw_regs_alloc(l, n);
    if (!map || !out)
        return false;
    if (!cg_part_map(cg_lay(l->cg, w), cg_lay(l->cg, id), (int)op->iattr[0], op->iattr[1], map))
        return CG_BUG(l->cg, "slice: its operand's layout does not hold the part in registers");
    for (int j = 0; j < n; j++)
        out[j] = src[map[j]];
    return lw_set_result(l, rv, id, out);
}

/* ---------------------------------------------------------------- control flow */

/* Registers of the yield of block b, operand i, in the layout its parent wants. */
static LLVMValueRef *yield_regs(L *l, uint32_t b, int i)
{
    ir_block *blk = &l->k->blocks[b];
    uint32_t y = blk->ops[blk->nops - 1];
    l->cur_op = y;
    return lw_opnd_regs(l, y, i);
}

bool lower_for(L *l, uint32_t o, ir_op *op)
{
    cg_ctx *cg = l->cg;
    int nc = op->nres;
    LLVMValueRef lo = l->vals[op->opnd[0]].r[0], hi = l->vals[op->opnd[1]].r[0], step = l->vals[op->opnd[2]].r[0];
    LLVMValueRef **init = lw_alloc(l, (size_t)(nc + 1) * sizeof *init);
    if (!init)
        return false;
    for (int i = 0; i < nc; i++)
        if (!(init[i] = lw_opnd_regs(l, o, 3 + i)))
            return false;
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(l->B);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(l->C, l->fn, "for.head");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(l->C, l->fn, "for.body");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(l->C, l->fn, "for.exit");
    LLVMBuildBr(l->B, head);
    LLVMPositionBuilderAtEnd(l->B, head);
    LLVMValueRef iv = LLVMBuildPhi(l->B, l->t_i32, "iv");
    ir_block *bb = &l->k->blocks[op->reg[0]];
    LLVMValueRef **phis = lw_alloc(l, (size_t)(nc + 1) * sizeof *phis);
    if (!phis)
        return false;
    for (int i = 0; i < nc; i++) {
        int32_t id = cg->vlay[op->res[i]];
        int n = cg_layout_regs(cg_lay(cg, id));
        LLVMTypeRef t = reg_type(l, vdt(l, op->res[i]));
        if (!(phis[i] = lw_regs_alloc(l, n)))
            return false;
        for (int j = 0; j < n; j++)
            phis[i][j] = LLVMBuildPhi(l->B, t, "");
        lw_set_result(l, bb->args[1 + i], id, phis[i]);
        lw_set_result(l, op->res[i], id, phis[i]);
    }
    lw_set_scalar(l, bb->args[0], iv);
    LLVMValueRef cond = LLVMBuildICmp(l->B, LLVMIntSLT, iv, hi, "");
    LLVMBuildCondBr(l->B, cond, body, exit);
    LLVMPositionBuilderAtEnd(l->B, body);
    if (!lw_lower_block(l, op->reg[0]))
        return false;
    LLVMValueRef **ys = lw_alloc(l, (size_t)(nc + 1) * sizeof *ys);
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

bool lower_if(L *l, uint32_t o, ir_op *op)
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
        ys[r] = lw_alloc(l, (size_t)(nr + 1) * sizeof(LLVMValueRef *));
        if (!ys[r])
            return false;
        if (op->reg[r]) {
            if (!lw_lower_block(l, op->reg[r]))
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
        LLVMValueRef *out = lw_regs_alloc(l, n);
        if (!out)
            return false;
        for (int j = 0; j < n; j++) {
            out[j] = LLVMBuildPhi(l->B, reg_type(l, vdt(l, op->res[i])), "");
            LLVMValueRef inc[2] = {ys[0][i][j], ys[1][i][j]};
            LLVMAddIncoming(out[j], inc, ends, 2);
        }
        lw_set_result(l, op->res[i], id, out);
    }
    return true;
}

bool lower_yield(L *l, uint32_t o, ir_op *op)
{
    (void)l;
    (void)o;
    (void)op;
    return true; /* the enclosing for / if reads the yielded values */
}

static const lower_fn lower_table[IR_OP_COUNT] = {
#define LOOM_OP(E, n, nop, nreg, rule, fl, sem, lay, pr, attrs) [IR_##E] = lower_##n,
#include "ops.h"
#undef LOOM_OP
};

bool cg_op_lowered(int kind) { return kind > 0 && kind < IR_OP_COUNT && lower_table[kind] != NULL; }


bool lw_lower_block(L *l, uint32_t b)
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

void lw_annotate(L *l, const char *key, int val)
{
    LLVMMetadataRef md[3] = {LLVMValueAsMetadata(l->fn), LLVMMDStringInContext2(l->C, key, strlen(key)),
                             LLVMValueAsMetadata(LLVMConstInt(l->t_i32, (unsigned long long)val, 0))};
    LLVMAddNamedMetadataOperand(l->M, "nvvm.annotations", LLVMMetadataAsValue(l->C, LLVMMDNodeInContext2(l->C, md, 3)));
}

void lw_add_param_attr(L *l, unsigned idx, const char *name, uint64_t val)
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

    if (!lw_hopper_collect_tma(l) || !lw_find_packed(l))
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
    lw_annotate(l, "kernel", 1);
    lw_annotate(l, "maxntidx", threads);
    lw_hopper_kernel_attrs(l);
    for (int a = 0; a < k->nargs; a++) {
        LLVMSetValueName2(LLVMGetParam(l->fn, (unsigned)a), k->args[a].name, strlen(k->args[a].name));
        if (!k->args[a].is_tensor)
            continue;
        lw_add_param_attr(l, (unsigned)a + 1, "noalias", 0);
        lw_add_param_attr(l, (unsigned)a + 1, "align", 16);
        if (k->args[a].access == LOOM_IN)
            lw_add_param_attr(l, (unsigned)a + 1, "readonly", 0);
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
            lw_set_scalar(l, k->args[a].value, LLVMGetParam(l->fn, (unsigned)a));
    lw_hopper_entry(l);

    if (lw_lower_block(l, 1)) {
        lw_cluster_sync(l);
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
    free(l->packed);
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
