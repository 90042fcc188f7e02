/*
 * lower_hopper.c -- the Hopper half of the lowering: shared-memory rings, mbarriers,
 * TMA, wgmma and warp-group tasks, and the flags, atomic adds and cluster ops that go with
 * them.  It works on the lowering state of lower.h; lower.c calls its kernel-level parts
 * (lw_hopper_collect_tma, lw_hopper_kernel_attrs, lw_hopper_entry, lw_cluster_sync)
 * while it makes the kernel function.
 *
 * smem_load and smem_store begin with the task's barrier: a tile is read or written by
 * all of the task's threads together, so the DSL's "the load sees the store" holds.
 *
 * Shared memory.  Every allocation has a fixed byte offset in loom_smem (codegen/smem.c);
 * a ring, a slot view or a barrier array is held as one i32: its offset from loom_smem.
 * Inline PTX wants shared-window addresses, which are loom_smem's address plus that.
 * A swizzled tile whose rows are wider than the swizzle span is stored as column chunks
 * of one span each ([rows][span] contiguous, chunk after chunk): that is what one TMA box
 * per chunk deposits and what wgmma's descriptors describe (K-major: SBO = 8 rows of a
 * span; MN-major: LBO = the chunk size, SBO = 8 rows).  Within a chunk the swizzle XORs
 * byte-address bits 4.. with bits 7.. (128 B: 3 bits, 64 B: 2, 32 B: 1), which
 * smem_load / smem_store apply element by element.
 *
 * Tasks.  The kernel body runs on every thread up to the first task (allocations,
 * scalars; thread 0 initialises the mbarriers, then a fence and bar.sync 0).  Each task
 * is a branch on the warp index; inside it a replica index and a task-local warp index
 * replace the CTA's, layouts are those of the task's warp count (codegen/layout.c), the
 * scratch region is the replica's own, and the internal barriers of conversions and
 * reductions are the replica's named barrier (ids 1..7; the user's named barriers 0..7
 * are hardware ids 8..15).  A register budget becomes setmaxnreg (inc or dec from the
 * count every thread starts with, which launch bounds fix: 64K / threads).
 *
 * One thread per task replica issues what is issued once (TMA copies, expect-bytes,
 * cluster stores: st.async into each CTA's view, completing on its barrier);
 * every warp's lane 0 arrives on an mbarrier, after bar.warp.sync (so the hardware
 * arrival count of a barrier array is, per arriving task, replicas * warps for arrive and
 * replicas for expect, where replicas are those arriving in one phase: all, or one where
 * they take turns; the DSL counts replicas and the compiler scales); every thread waits.
 * A one-element tile in shared memory (a scheduler's hand-over word) is stored by the
 * elected thread and read by each warp's lane 0, which passes it on with shfl.sync: the
 * threads that touch the word are the threads that arrive, so compute-sanitizer's
 * racecheck sees the barriers order every access.  wgmma is issued by
 * the whole task (warp group g computes rows g*M/G ..); its accumulator registers pass
 * through wgmma_wait as tied asm operands, so LLVM never reads them while in flight.  An A
 * in registers is held in the A fragment's layout (the accumulator layout of its shape, so
 * an accumulator cast to f16/bf16 is one as it stands) and packed in pairs into b32
 * registers that pass through the wgmma.fence as tied operands (a_fragments).
 */
#include "lower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

static LLVMValueRef *one_reg(L *l, LLVMValueRef x)
{
    LLVMValueRef *r = lw_regs_alloc(l, 1);
    if (r)
        r[0] = x;
    return r;
}

/* Hold a shared-memory value (ring, view, barriers): its byte offset in loom_smem. */
static bool set_smem(L *l, uint32_t v, LLVMValueRef off)
{
    LLVMValueRef *r = one_reg(l, off);
    if (!r)
        return false;
    l->vals[v].lay = -1;
    l->vals[v].n = 1;
    l->vals[v].r = r;
    return true;
}

static LLVMValueRef smem_off(L *l, uint32_t v) { return l->vals[v].r[0]; }
static LLVMValueRef saddr(L *l, LLVMValueRef off) { return LLVMBuildAdd(l->B, l->smem_base32, off, ""); }
static LLVMValueRef scal(L *l, uint32_t v) { return l->vals[v].r[0]; }

/* Run `text` (no results) with i32/i64 operands. */
static void asm_void(L *l, const char *text, const char *cons, LLVMValueRef *args, int n)
{
    lw_asm_call(l, l->t_void, text, cons, args, n, false);
}

/* Every thread of every CTA of the cluster arrives, then waits (nothing without clusters):
 * after the barriers are initialised (peers arrive on them and multicast into this CTA)
 * and before a CTA exits (peers may still arrive on its barriers). */
void lw_cluster_sync(L *l)
{
    if (l->k->cluster > 1)
        asm_void(l, "barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;", "~{memory}", NULL, 0);
}

/* if (cond) { ... }: returns the merge block; the builder is placed in the then block. */
static LLVMBasicBlockRef if_begin(L *l, LLVMValueRef cond)
{
    LLVMBasicBlockRef t = LLVMAppendBasicBlockInContext(l->C, l->fn, "one");
    LLVMBasicBlockRef m = LLVMAppendBasicBlockInContext(l->C, l->fn, "one.end");
    LLVMBuildCondBr(l->B, cond, t, m);
    LLVMPositionBuilderAtEnd(l->B, t);
    return m;
}

static void if_end(L *l, LLVMBasicBlockRef m)
{
    LLVMBuildBr(l->B, m);
    LLVMPositionBuilderAtEnd(l->B, m);
}

static LLVMValueRef elected(L *l)
{
    LLVMValueRef t = l->tid_local ? l->tid_local : l->tid;
    return LLVMBuildICmp(l->B, LLVMIntEQ, t, ci32(l, 0), "");
}

/* ---------------------------------------------------------------- layout of a view */

typedef struct vgeom {
    int rank;
    int64_t dim[3];  /* stored shape (not transposed) */
    int es, swz;     /* element bytes, swizzle span (0: none) */
    int64_t span;    /* bytes of one stored row within a chunk */
    int64_t rows;    /* rows over all leading dims */
    bool trans;
} vgeom;

static vgeom geom(L *l, uint32_t v)
{
    const ir_type *t = vty(l, v);
    vgeom g = {0};
    g.rank = t->shape.rank;
    for (int d = 0; d < g.rank; d++)
        g.dim[d] = t->shape.dim[d];
    g.trans = t->trans;
    if (g.trans) { /* stored the other way round */
        g.dim[0] = t->shape.dim[1];
        g.dim[1] = t->shape.dim[0];
    }
    g.es = (int)loom_dtype_size((loom_dtype)t->dtype);
    g.swz = t->swizzle;
    int64_t inner = g.dim[g.rank - 1] * g.es;
    g.span = g.swz && inner > g.swz ? g.swz : inner;
    g.rows = 1;
    for (int d = 0; d < g.rank - 1; d++)
        g.rows *= g.dim[d];
    return g;
}

/* Byte offset (i32) within the view of stored element (row, col) where row flattens the
 * leading dims. */
static LLVMValueRef elem_off(L *l, const vgeom *g, LLVMValueRef row, LLVMValueRef col)
{
    LLVMValueRef b = LLVMBuildMul(l->B, col, ci32(l, g->es), "");
    LLVMValueRef chunk = LLVMBuildUDiv(l->B, b, ci32(l, g->span), "");
    LLVMValueRef inb = LLVMBuildURem(l->B, b, ci32(l, g->span), "");
    LLVMValueRef off = LLVMBuildAdd(
        l->B, LLVMBuildMul(l->B, chunk, ci32(l, g->rows * g->span), ""),
        LLVMBuildAdd(l->B, LLVMBuildMul(l->B, row, ci32(l, g->span), ""), inb, ""), "");
    if (g->swz) {
        LLVMValueRef x = LLVMBuildAnd(l->B, LLVMBuildLShr(l->B, off, ci32(l, 7), ""), ci32(l, g->swz / 16 - 1), "");
        off = LLVMBuildXor(l->B, off, LLVMBuildShl(l->B, x, ci32(l, 4), ""), "");
    }
    return off;
}

/* The stored (row, col) of register j of a tile in layout id seen through view geometry g. */
static void view_rc(L *l, const vgeom *g, int32_t id, int j, LLVMValueRef *row, LLVMValueRef *col)
{
    int r = g->rank;
    LLVMValueRef c[3];
    for (int d = 0; d < r; d++)
        c[d] = lw_coord(l, id, j, d);
    if (g->trans) { /* logical (i, j) is stored at (j, i) */
        LLVMValueRef t = c[0];
        c[0] = c[1];
        c[1] = t;
    }
    LLVMValueRef rr = ci32(l, 0);
    for (int d = 0; d < r - 1; d++)
        rr = LLVMBuildAdd(l->B, LLVMBuildMul(l->B, rr, ci32(l, g->dim[d]), ""), c[d], "");
    *row = rr;
    *col = c[r - 1];
}

static LLVMValueRef sm_abs_ptr(L *l, LLVMValueRef off)
{
    return LLVMBuildGEP2(l->B, l->t_i8, l->smem, &off, 1, "");
}

/* The shared address of register j of a tile in layout id, in the view at byte offset base
 * with geometry g. */
static LLVMValueRef reg_ptr(L *l, const vgeom *g, int32_t id, LLVMValueRef base, int j)
{
    LLVMValueRef row, col;
    view_rc(l, g, id, j, &row, &col);
    return sm_abs_ptr(l, LLVMBuildAdd(l->B, base, elem_off(l, g, row, col), ""));
}

/* ---------------------------------------------------------------- shared memory ops */

bool lower_smem_alloc(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    return set_smem(l, op->res[0], ci32(l, (int64_t)l->cg->val_off[op->res[0]]));
}

bool lower_smem_slot(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    const ir_type *t = vty(l, op->opnd[0]);
    int64_t slot = ir_shape_numel(&t->shape) * (int64_t)loom_dtype_size((loom_dtype)t->dtype);
    LLVMValueRef off = LLVMBuildAdd(l->B, smem_off(l, op->opnd[0]),
                                    LLVMBuildMul(l->B, scal(l, op->opnd[1]), ci32(l, slot), ""), "");
    return set_smem(l, op->res[0], off);
}

bool lower_smem_trans(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    return set_smem(l, op->res[0], smem_off(l, op->opnd[0]));
}

/* A part is a tile of its own: whole column chunks (dim 1), or rows of a view one chunk
 * wide (dim 0); see rule_smem_part. */
bool lower_smem_part(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    const ir_type *t = vty(l, op->opnd[0]);
    int64_t es = (int64_t)loom_dtype_size((loom_dtype)t->dtype), inner = t->shape.dim[1] * es;
    int64_t bytes = op->iattr[0] == 0 ? op->iattr[1] * inner
                                      : op->iattr[1] * es / t->swizzle * t->shape.dim[0] * t->swizzle;
    return set_smem(l, op->res[0], LLVMBuildAdd(l->B, smem_off(l, op->opnd[0]), ci32(l, bytes), ""));
}

static LLVMValueRef load_elem(L *l, loom_dtype dt, LLVMValueRef p)
{
    switch (dt) {
    case LOOM_F16:
        return LLVMBuildFPExt(l->B, LLVMBuildLoad2(l->B, l->t_f16, p, ""), l->t_f32, "");
    case LOOM_BF16: {
        LLVMValueRef h = LLVMBuildZExt(l->B, LLVMBuildLoad2(l->B, l->t_i16, p, ""), l->t_i32, "");
        return LLVMBuildBitCast(l->B, LLVMBuildShl(l->B, h, ci32(l, 16), ""), l->t_f32, "");
    }
    default:
        return LLVMBuildLoad2(l->B, reg_type(l, dt), p, "");
    }
}

static void store_elem(L *l, loom_dtype dt, LLVMValueRef p, LLVMValueRef v)
{
    switch (dt) {
    case LOOM_F16:
        LLVMBuildStore(l->B, LLVMBuildFPTrunc(l->B, v, l->t_f16, ""), p);
        break;
    case LOOM_BF16: { /* the value is already rounded to bf16: its top half */
        LLVMValueRef b = LLVMBuildLShr(l->B, LLVMBuildBitCast(l->B, v, l->t_i32, ""), ci32(l, 16), "");
        LLVMBuildStore(l->B, LLVMBuildTrunc(l->B, b, l->t_i16, ""), p);
        break;
    }
    default:
        LLVMBuildStore(l->B, v, p);
    }
}

static bool runs_in_rows(const cg_layout *lay, const vgeom *g, int bits, bool whole);

/* Two neighbouring 16-bit elements of a row, loaded as one 32-bit word w, widened to f32. */
static void unpack_pair(L *l, loom_dtype dt, LLVMValueRef w, LLVMValueRef *a, LLVMValueRef *b)
{
    if (dt == LOOM_F16) {
        LLVMValueRef v = LLVMBuildBitCast(l->B, w, LLVMVectorType(l->t_f16, 2), "");
        *a = LLVMBuildFPExt(l->B, LLVMBuildExtractElement(l->B, v, ci32(l, 0), ""), l->t_f32, "");
        *b = LLVMBuildFPExt(l->B, LLVMBuildExtractElement(l->B, v, ci32(l, 1), ""), l->t_f32, "");
        return;
    }
    /* bf16: the low half is the first element */
    *a = LLVMBuildBitCast(l->B, LLVMBuildShl(l->B, w, ci32(l, 16), ""), l->t_f32, "");
    *b = LLVMBuildBitCast(l->B, LLVMBuildAnd(l->B, w, ci32(l, (int32_t)0xffff0000), ""), l->t_f32, "");
}

/* A tile of one element (a scheduler's hand-over word): one thread's value is everyone's. */
static bool one_element(L *l, uint32_t v) { return ir_shape_numel(&vty(l, v)->shape) == 1; }

bool lower_smem_load(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    vgeom g = geom(l, op->opnd[0]);
    int32_t id = l->cg->vlay[op->res[0]];
    int n = cg_layout_regs(cg_lay(l->cg, id));
    LLVMValueRef *out = lw_regs_alloc(l, n);
    if (!out)
        return false;
    loom_dtype dt = vdt(l, op->res[0]);
    LLVMValueRef base = smem_off(l, op->opnd[0]);
    lw_barrier(l); /* tile semantics: every thread's earlier writes of the view are visible */
    if (one_element(l, op->res[0]) && n == 1 && (dt == LOOM_I32 || dt == LOOM_F32)) {
        /* Lane 0 reads the word and passes it to its warp (shfl.sync): the lane that reads
         * is the lane that arrives on a barrier afterwards (lower_mbar_arrive), so the read
         * is ordered before the arrival that lets a writer reuse the word. */
        LLVMValueRef a[2] = {l->lane, saddr(l, base)};
        LLVMValueRef w = lw_asm_call(l, l->t_i32,
                                     "{\n\t.reg .pred p;\n\t.reg .b32 v;\n\tmov.b32 v, 0;\n\t"
                                     "setp.eq.u32 p, $1, 0;\n\t@p ld.shared.b32 v, [$2];\n\t"
                                     "shfl.sync.idx.b32 $0, v, 0, 31, -1;\n\t}",
                                     "=r,r,r,~{memory}", a, 2, false);
        out[0] = dt == LOOM_F32 ? LLVMBuildBitCast(l->B, w, l->t_f32, "") : w;
        return lw_set_result(l, op->res[0], id, out);
    }
    if ((dt == LOOM_F16 || dt == LOOM_BF16) && runs_in_rows(cg_lay(l->cg, id), &g, 3, false) &&
        n % 8 == 0 && g.span % 16 == 0) {
        /* eight neighbouring elements of a row a thread (a tile read to be stored 16 bytes
         * at a time): they start at a multiple of 8 and a swizzle moves whole 16-byte
         * units, so each eight is one 16-byte load.  An eight in a padded row (past the
         * tile's rows) is all padded, and its registers are never used, as the scalar
         * loads' below */
        LLVMTypeRef v4 = LLVMVectorType(l->t_i32, 4);
        for (int j = 0; j < n; j += 8) {
            LLVMValueRef w = LLVMBuildLoad2(l->B, v4, reg_ptr(l, &g, id, base, j), "");
            LLVMSetAlignment(w, 16);
            for (int q = 0; q < 4; q++)
                unpack_pair(l, dt, LLVMBuildExtractElement(l->B, w, ci32(l, q), ""), &out[j + 2 * q], &out[j + 2 * q + 1]);
        }
        return lw_set_result(l, op->res[0], id, out);
    }
    if ((dt == LOOM_F16 || dt == LOOM_BF16) && runs_in_rows(cg_lay(l->cg, id), &g, 1, true) && n % 2 == 0) {
        /* the accumulator's layout (a tile read "like" one): a pair never straddles a
         * swizzle unit or a chunk, so each is one 32-bit load */
        for (int j = 0; j < n; j += 2) {
            unpack_pair(l, dt, LLVMBuildLoad2(l->B, l->t_i32, reg_ptr(l, &g, id, base, j), ""), &out[j], &out[j + 1]);
        }
        return lw_set_result(l, op->res[0], id, out);
    }
    for (int j = 0; j < n; j++) {
        out[j] = load_elem(l, dt, reg_ptr(l, &g, id, base, j)); /* padded coordinates read garbage they never use */
    }
    return lw_set_result(l, op->res[0], id, out);
}

/* Registers j .. j + 2^bits - 1 (j a multiple of 2^bits) of layout lay hold neighbouring
 * elements of a row, and every register is inside the tile's rows (whole: inside the
 * tile).  bits 1: the wgmma accumulator layout, where each thread holds column pairs (such
 * a tile is stored two elements at a time); bits 3: eight, 16 bytes of a 16-bit type. */
static bool runs_in_rows(const cg_layout *lay, const vgeom *g, int bits, bool whole)
{
    if (g->trans || lay->nreg < bits)
        return false;
    for (int b = 0; b < bits; b++)
        if (lay->reg[b].dim != lay->rank - 1 || lay->reg[b].bit != b)
            return false;
    for (int d = whole ? 0 : lay->rank - 1; d < lay->rank; d++)
        if (lay->shape[d] != (INT64_C(1) << lay->lg[d]))
            return false;
    return true;
}

/* Two elements (already rounded to dt) as one i32 (16-bit types) or <2 x float> (f32). */
/* y where x is fpext(fptrunc(y)) to f16 and back (the f32 register of a cast to f16), else x. */
static LLVMValueRef unrounded(L *l, LLVMValueRef x)
{
    LLVMValueRef h = LLVMIsAFPExtInst(x) ? LLVMGetOperand(x, 0) : NULL;
    if (h && LLVMTypeOf(h) == l->t_f16 && LLVMIsAFPTruncInst(h) && LLVMTypeOf(LLVMGetOperand(h, 0)) == l->t_f32)
        return LLVMGetOperand(h, 0);
    return x;
}

static LLVMValueRef pack2(L *l, loom_dtype dt, LLVMValueRef a, LLVMValueRef b)
{
    if (dt == LOOM_F32) {
        LLVMValueRef v = LLVMGetUndef(LLVMVectorType(l->t_f32, 2));
        v = LLVMBuildInsertElement(l->B, v, a, ci32(l, 0), "");
        return LLVMBuildInsertElement(l->B, v, b, ci32(l, 1), "");
    }
    if (dt == LOOM_F16) {
        /* one cvt.rn.f16x2.f32 (as pack_pair): a <2 x half> bitcast to i32 would be a
         * ProxyReg machine instruction for LLVM 19, whose eraser walks the whole function
         * once per instance (lower_mem.c, f16_bits).  Rounding an element that is already
         * an f16 value is exact; one that is the f32 of an f16 rounding is rounded from
         * its source instead, so that rounding and the conversion back are dead. */
        LLVMValueRef ab[2] = {unrounded(l, b), unrounded(l, a)}; /* the first fills the upper half */
        return lw_asm_call(l, l->t_i32, "cvt.rn.f16x2.f32 $0, $1, $2;", "=r,f,f", ab, 2, true);
    }
    /* bf16: the top halves of the rounded f32 values */
    LLVMValueRef lo = LLVMBuildLShr(l->B, LLVMBuildBitCast(l->B, a, l->t_i32, ""), ci32(l, 16), "");
    LLVMValueRef hi = LLVMBuildAnd(l->B, LLVMBuildBitCast(l->B, b, l->t_i32, ""), ci32(l, (int32_t)0xffff0000), "");
    return LLVMBuildOr(l->B, lo, hi, "");
}

/* The f32 registers tile x (f16/bf16, in layout id) was cast from, when that tile is held
 * in the same layout (an epilogue's, or attention's P = cast(exp2(...))), else NULL: then
 * a pair of x's elements rounds and packs with one cvt.rn.{f16,bf16}x2.f32 from them
 * (round to nearest even, as the cast; the cast's own rounding is then dead). */
static const lv *cast_source(L *l, uint32_t x, int32_t id)
{
    const ir_value *xv = &l->k->vals[x];
    loom_dtype dt = vdt(l, x);
    const ir_op *def = xv->kind == IR_V_RESULT ? &l->k->ops[xv->def] : NULL;
    const lv *src = def && def->kind == IR_CAST && dt != LOOM_F32 && vdt(l, def->opnd[0]) == LOOM_F32
                        ? &l->vals[def->opnd[0]]
                        : NULL;
    if (src && (src->lay != id || !src->r))
        src = NULL;
    return src;
}

/* ---------------------------------------------------------------- packed A operands */

/* Is v an f16/bf16 tile whose every use is wgmma's A operand (in the layout that wgmma
 * wants), directly or through loop carries whose other ends are such tiles too?  Then it
 * is kept as packed pairs from its cast on: a P tile carried from one iteration to the
 * next takes half the registers (which keeps ptxas from reusing the registers an A
 * operand still in flight is read from, and waiting for its group). */
static bool packable_type(L *l, uint32_t v)
{
    const ir_type *t = vty(l, v);
    return v && t->kind == IR_T_TILE && t->shape.rank == 2 && (t->dtype == LOOM_F16 || t->dtype == LOOM_BF16) &&
           !l->cg->remat[v] && l->cg->vlay[v] >= 0;
}

bool lw_find_packed(L *l)
{
    loom_kernel *k = l->k;
    bool any = false;
    for (uint32_t o = 1; o < k->nops && !any; o++)
        any = k->ops[o].kind == IR_WGMMA && vty(l, k->ops[o].opnd[0])->kind == IR_T_TILE;
    if (!any)
        return true;
    uint8_t *p = l->packed = calloc(k->nvals, 1);
    if (!p) {
        cg_fail(l->cg, LOOM_ERR_NOMEM, "out of memory");
        return false;
    }
    /* candidates: casts from f32, and the carried values and results of loops */
    for (uint32_t o = 1; o < k->nops; o++) {
        const ir_op *op = &k->ops[o];
        if (op->kind == IR_CAST && vdt(l, op->opnd[0]) == LOOM_F32 && packable_type(l, op->res[0]))
            p[op->res[0]] = 1;
        if (op->kind == IR_FOR)
            for (int j = 0; j < op->nres; j++) {
                uint32_t arg = k->blocks[op->reg[0]].args[1 + j];
                if (packable_type(l, op->res[j]) && packable_type(l, arg))
                    p[op->res[j]] = p[arg] = 1;
            }
    }
    /* drop every candidate with another use, or linked to a value that is not one */
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t o = 1; o < k->nops; o++) {
            const ir_op *op = &k->ops[o];
            const ir_op *par = op->kind == IR_YIELD && k->blocks[op->block].parent
                                   ? &k->ops[k->blocks[op->block].parent]
                                   : NULL;
            for (int i = 0; i < op->nopnd; i++) {
                uint32_t v = op->opnd[i];
                if (!p[v])
                    continue;
                bool ok;
                if (op->kind == IR_WGMMA)
                    ok = i == 0 && l->cg->vlay[v] == cg_want(l->cg, o, 0);
                else if (op->kind == IR_FOR && i >= 3)
                    ok = p[op->res[i - 3]] && p[k->blocks[op->reg[0]].args[i - 2]];
                else if (par && par->kind == IR_FOR)
                    ok = p[par->res[i]] && p[k->blocks[par->reg[0]].args[1 + i]];
                else
                    ok = false;
                if (!ok)
                    p[v] = 0, changed = true;
            }
            if (op->kind == IR_FOR) /* a carried value: its init and its yield packed too */
                for (int j = 0; j < op->nres; j++) {
                    uint32_t arg = k->blocks[op->reg[0]].args[1 + j];
                    const ir_block *body = &k->blocks[op->reg[0]];
                    const ir_op *y = body->nops ? &k->ops[body->ops[body->nops - 1]] : NULL;
                    bool ok = p[op->opnd[3 + j]] && y && y->kind == IR_YIELD && p[y->opnd[j]];
                    if ((p[op->res[j]] || p[arg]) && !ok)
                        p[op->res[j]] = p[arg] = 0, changed = true;
                }
        }
    }
    return true;
}

void lw_cast_packed(L *l, loom_dtype dt, const LLVMValueRef *src, LLVMValueRef *out, int n)
{
    const char *cvt = dt == LOOM_BF16 ? "cvt.rn.bf16x2.f32 $0, $1, $2;" : "cvt.rn.f16x2.f32 $0, $1, $2;";
    for (int j = 0; j + 1 < n; j += 2) {
        LLVMValueRef ab[2] = {src[j + 1], src[j]}; /* the first operand fills the upper half */
        out[j] = LLVMBuildBitCast(l->B, lw_asm_call(l, l->t_i32, cvt, "=r,f,f", ab, 2, true), l->t_f32, "");
        out[j + 1] = LLVMGetUndef(l->t_f32);
    }
}

/* Registers j and j + 1 of a tile of dt (x) packed into one (pack2), from the f32 registers
 * of its cast (cast_source) where src is not NULL. */
static LLVMValueRef pack_pair(L *l, loom_dtype dt, const lv *src, const LLVMValueRef *x, int j)
{
    if (!src)
        return pack2(l, dt, x[j], x[j + 1]);
    const char *cvt = dt == LOOM_BF16 ? "cvt.rn.bf16x2.f32 $0, $1, $2;" : "cvt.rn.f16x2.f32 $0, $1, $2;";
    LLVMValueRef ab[2] = {src->r[j + 1], src->r[j]}; /* the first operand fills the upper half */
    return lw_asm_call(l, l->t_i32, cvt, "=r,f,f", ab, 2, true);
}

static bool same_bit(cg_bit a, int dim, int bit) { return a.dim == dim && a.bit == bit; }

/* Is lay the transpose of one warp group's wgmma accumulator [64, R] (codegen/layout.c,
 * cg_mma_layout), i.e. a tile [R, 64] whose register pairs run down the rows, R a
 * multiple of 16?  Per thread: reg bit 0 -> row 0, reg bit 1 -> col 3, reg bits 2.. ->
 * rows 3..; lane bits 0,1 -> rows 1,2 and 2..4 -> cols 0..2; warp bits -> cols 4,5. */
static bool acc_trans_layout(const cg_layout *lay)
{
    if (lay->rank != 2 || lay->nwarp != 2 || lay->lg[1] != 6 || lay->shape[1] != 64 || lay->shape[0] % 16 ||
        lay->nreg != 2 + lay->lg[0] - 3)
        return false;
    static const int8_t lane[5][2] = {{0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}};
    for (int i = 0; i < 5; i++)
        if (!same_bit(lay->lane[i], lane[i][0], lane[i][1]))
            return false;
    if (!same_bit(lay->warp[0], 1, 4) || !same_bit(lay->warp[1], 1, 5) || !same_bit(lay->reg[0], 0, 0) ||
        !same_bit(lay->reg[1], 1, 3))
        return false;
    for (int b = 2; b < lay->nreg; b++)
        if (!same_bit(lay->reg[b], 0, b + 1))
            return false;
    return true;
}

/* A transposed accumulator tile [R, 64] (acc_trans_layout) of a 16-bit dtype into a view
 * of that shape with rows of 128 bytes (128-byte swizzle): each 8 x 8 block of the
 * accumulator a thread group holds is one stmatrix fragment, stored transposed, four at a
 * time (stmatrix.x4.trans: 16 rows by both 8-column halves of the warp's 16 columns).
 * Thread t gives the address of row t % 8 of block t / 8; the blocks of one instruction
 * are 16 rows further on than the last's, so the address is one per thread plus a
 * constant (the swizzle XORs by row % 8, which 16 rows leave alone). */
static void store_acc_trans(L *l, const vgeom *g, LLVMValueRef base, const LLVMValueRef *x, loom_dtype dt,
                            int64_t rows)
{
    LLVMValueRef t = l->lane, blk = LLVMBuildLShr(l->B, t, ci32(l, 3), "");
    LLVMValueRef row = LLVMBuildOr(l->B, LLVMBuildShl(l->B, LLVMBuildLShr(l->B, blk, ci32(l, 1), ""), ci32(l, 3), ""),
                                   LLVMBuildAnd(l->B, t, ci32(l, 7), ""), "");
    LLVMValueRef col = LLVMBuildOr(l->B, LLVMBuildShl(l->B, LLVMBuildAnd(l->B, l->warp, ci32(l, 3), ""), ci32(l, 4), ""),
                                   LLVMBuildShl(l->B, LLVMBuildAnd(l->B, blk, ci32(l, 1), ""), ci32(l, 3), ""), "");
    LLVMValueRef at = LLVMBuildAdd(l->B, base, elem_off(l, g, row, col), "");
    /* The pairs are packed inside the statement: one asm statement a stmatrix instead of
     * five, the same instructions as pack2's.  f16: cvt.rn.f16x2.f32 (its first operand
     * fills the upper half) from the unrounded source of a cast; bf16: the upper halves of
     * the rounded f32 registers (prmt: a's bytes 2, 3, then b's). */
    const char *text = dt == LOOM_BF16
                           ? "{\n\t.reg .b32 q<4>;\n\tprmt.b32 q0, $1, $2, 0x7632;\n\tprmt.b32 q1, $3, $4, 0x7632;\n\t"
                             "prmt.b32 q2, $5, $6, 0x7632;\n\tprmt.b32 q3, $7, $8, 0x7632;\n\t"
                             "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [$0], {q0, q1, q2, q3};\n\t}"
                           : "{\n\t.reg .b32 q<4>;\n\tcvt.rn.f16x2.f32 q0, $2, $1;\n\tcvt.rn.f16x2.f32 q1, $4, $3;\n\t"
                             "cvt.rn.f16x2.f32 q2, $6, $5;\n\tcvt.rn.f16x2.f32 q3, $8, $7;\n\t"
                             "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [$0], {q0, q1, q2, q3};\n\t}";
    for (int64_t c = 0; c < rows / 16; c++) {
        LLVMValueRef a[9];
        a[0] = saddr(l, LLVMBuildAdd(l->B, at, ci32(l, c * 16 * g->span), ""));
        for (int i = 0; i < 4; i++) { /* block i: columns + 8 (i & 1), rows 16c + 8 (i >> 1) */
            int j = 2 * (i & 1) + 4 * (int)(2 * c + (i >> 1));
            a[1 + 2 * i] = dt == LOOM_F16 ? unrounded(l, x[j]) : x[j];
            a[2 + 2 * i] = dt == LOOM_F16 ? unrounded(l, x[j + 1]) : x[j + 1];
        }
        asm_void(l, text, "r,f,f,f,f,f,f,f,f,~{memory}", a, 9);
    }
}

bool lower_smem_store(L *l, uint32_t o, ir_op *op)
{
    vgeom g = geom(l, op->opnd[0]);
    int32_t id = cg_want(l->cg, o, 1);
    LLVMValueRef *x = lw_opnd_regs(l, o, 1);
    if (!x)
        return false;
    const cg_layout *lay = cg_lay(l->cg, id);
    int n = cg_layout_regs(lay);
    loom_dtype dt = vdt(l, op->opnd[1]);
    LLVMValueRef base = smem_off(l, op->opnd[0]);
    lw_barrier(l); /* tile semantics: every thread's earlier reads of the view are done */
    if ((dt == LOOM_F16 || dt == LOOM_BF16) && g.rank == 2 && !g.trans && g.es == 2 && g.swz == 128 &&
        g.span == 128 && g.dim[0] == lay->shape[0] && g.dim[1] == 64 && acc_trans_layout(lay)) {
        store_acc_trans(l, &g, base, x, dt, lay->shape[0]);
        return true;
    }
    if ((dt == LOOM_F16 || dt == LOOM_BF16 || dt == LOOM_F32) && runs_in_rows(lay, &g, 1, true) && n % 2 == 0) {
        /* The tile a cast from f32 made (an epilogue's): round and pack each pair with one
         * cvt from the f32 registers (cast_source).  bf16 has no cheaper rounding. */
        const lv *src = cast_source(l, op->opnd[1], id);
        /* a pair never straddles a swizzle unit (16 bytes) or a chunk: its column is even */
        for (int j = 0; j < n; j += 2) {
            LLVMValueRef p = reg_ptr(l, &g, id, base, j);
            LLVMValueRef v = pack_pair(l, dt, src, x, j);
            LLVMValueRef st = LLVMBuildStore(l->B, v, p);
            LLVMSetAlignment(st, (unsigned)(2 * g.es));
        }
        return true;
    }
    /* one element: the elected thread stores it (every thread holds it), and is the thread
     * whose arrival on a barrier next releases it (lower_mbar_arrive: lane 0 of warp 0) */
    LLVMBasicBlockRef one = one_element(l, op->opnd[1]) ? if_begin(l, elected(l)) : NULL;
    for (int j = 0; j < n; j++) {
        LLVMValueRef inb = NULL;
        for (int d = 0; d < lay->rank; d++)
            inb = lw_and_pred(l, inb, lw_in_tile(l, id, j, d));
        LLVMBasicBlockRef m = inb ? if_begin(l, inb) : NULL;
        store_elem(l, dt, reg_ptr(l, &g, id, base, j), x[j]);
        if (m)
            if_end(l, m);
    }
    if (one)
        if_end(l, one);
    return true;
}

/* ---------------------------------------------------------------- barriers */

/* The hardware arrival count of barrier array `bars`: per arriving task, the replicas that
 * arrive in one phase (all, or one where they take turns: ir_mbar_arrivals) times warps
 * (mbar_arrive: lane 0 of every warp) or once (mbar_expect: one thread). */
static int64_t hw_arrivals(L *l, uint32_t bars, int64_t dsl)
{
    loom_kernel *k = l->k;
    ir_task_info t[64];
    int nt = ir_tasks(k, t, 64);
    int64_t sum = 0;
    bool any = false;
    for (int i = 0; i < nt && i < 64; i++) {
        int kind = 0; /* 1 expect, 2 arrive */
        for (uint32_t o = 1; o < k->nops; o++) {
            const ir_op *op = &k->ops[o];
            if (!ir_is_arrival(op->kind) || !op->block || op->opnd[0] != bars)
                continue;
            if (ir_task_of(k, o) == t[i].op)
                kind |= op->kind == IR_MBAR_EXPECT ? 1 : 2;
        }
        if (kind == 3) {
            cg_fail(l->cg, LOOM_ERR_UNSUPPORTED,
                    "the task at %s:%d both arrives on and expects bytes on one barrier array; "
                    "use separate barrier arrays",
                    k->ops[t[i].op].src.file, k->ops[t[i].op].src.line);
            return 1;
        }
        if (kind) {
            any = true;
            sum += ir_mbar_arrivals(k, bars, t[i].op) * (kind == 2 ? t[i].warps : 1);
        }
    }
    return any ? sum : dsl;
}

bool lower_mbar_alloc(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    LLVMValueRef off = ci32(l, (int64_t)l->cg->val_off[op->res[0]]);
    if (!set_smem(l, op->res[0], off))
        return false;
    int64_t count = hw_arrivals(l, op->res[0], op->iattr[1]);
    LLVMBasicBlockRef m = if_begin(l, elected(l));
    for (int64_t i = 0; i < op->iattr[0]; i++) {
        LLVMValueRef a[2] = {saddr(l, LLVMBuildAdd(l->B, off, ci32(l, 8 * i), "")), ci32(l, count)};
        asm_void(l, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}", a, 2);
    }
    if_end(l, m);
    l->barriers_ready = false;
    return true;
}

static LLVMValueRef bar_addr(L *l, ir_op *op, int first)
{
    LLVMValueRef off = LLVMBuildAdd(l->B, smem_off(l, op->opnd[first]),
                                    LLVMBuildMul(l->B, scal(l, op->opnd[first + 1]), ci32(l, 8), ""), "");
    return saddr(l, off);
}

bool lower_mbar_expect(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    LLVMValueRef a[2] = {bar_addr(l, op, 0), ci32(l, op->iattr[0])};
    LLVMBasicBlockRef m = if_begin(l, elected(l));
    asm_void(l, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r,~{memory}", a, 2);
    if_end(l, m);
    return true;
}

static bool arrive_fused(const loom_kernel *k, uint32_t a);

/* Lane 0 arrives for its warp: first the warp synchronizes (bar.warp.sync orders every
 * lane's shared-memory accesses before lane 0's arrival, whose release then hands them to
 * the waiter; without it the other lanes' loads and stores of a slot are unordered with
 * the arrival, which compute-sanitizer's racecheck reported).  Opens the lane-0 branch. */
static LLVMBasicBlockRef lane0_arrival_begin(L *l)
{
    asm_void(l, "bar.warp.sync -1;", "~{memory}", NULL, 0);
    return if_begin(l, LLVMBuildICmp(l->B, LLVMIntEQ, l->lane, ci32(l, 0), ""));
}

bool lower_mbar_arrive(L *l, uint32_t o, ir_op *op)
{
    if (arrive_fused(l->k, o)) /* emitted by the wgmma_wait before it */
        return true;
    LLVMValueRef a = bar_addr(l, op, 0);
    LLVMBasicBlockRef m = lane0_arrival_begin(l);
    asm_void(l, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}", &a, 1);
    if_end(l, m);
    return true;
}

/* Lane 0 of every warp arrives on barrier i of each CTA of the cluster (its own included),
 * through the barrier's address in that CTA's shared window.  The arrival has the default
 * release at CTA scope: it orders this warp's reads of the slot (done: the wgmma wait
 * came first) before the peer's TMA overwrites it; release at cluster scope made every
 * arrival a memory fence and the cluster GEMM three times slower.  Launched without
 * clusters it is the plain arrival (no mapa outside a cluster launch). */
bool lower_mbar_arrive_cluster(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    LLVMValueRef a = bar_addr(l, op, 0);
    LLVMBasicBlockRef m = lane0_arrival_begin(l);
    if (l->k->cluster <= 1) { /* no cluster launch: this CTA's barrier, no mapa */
        asm_void(l, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}", &a, 1);
        if_end(l, m);
        return true;
    }
    for (int q = 0; q < l->k->cluster; q++) {
        LLVMValueRef args[2] = {a, ci32(l, q)};
        asm_void(l,
                 "{\n\t.reg .b32 ra;\n\tmapa.shared::cluster.u32 ra, $0, $1;\n\t"
                 "mbarrier.arrive.shared::cluster.b64 _, [ra];\n\t}",
                 "r,r,~{memory}", args, 2);
    }
    if_end(l, m);
    return true;
}

/* The n elements (row-major) of tile operand 1 of op o in thread 0 of the replica: its own
 * registers where they hold the whole tile (a small tile's blocked layout, a splat), else
 * through the replica's scratch (every thread stores what it holds, bar.sync, loads;
 * codegen/smem.c plans the bytes). */
static bool thread0_elems(L *l, uint32_t o, int64_t n, LLVMValueRef *el)
{
    ir_op *op = &l->k->ops[o];
    int32_t id = cg_want(l->cg, o, 1), reg_of[16];
    const cg_layout *lay = cg_lay(l->cg, id);
    LLVMValueRef *x = lw_opnd_regs(l, o, 1);
    if (!x)
        return false;
    if (cg_thread0_regs(lay, reg_of, n)) {
        for (int64_t e = 0; e < n; e++)
            el[e] = x[reg_of[e]];
        return true;
    }
    loom_dtype dt = vdt(l, op->opnd[1]);
    int64_t eb = (int64_t)cg_reg_bytes(dt);
    if (!lw_check_scratch(l, (size_t)(cg_layout_padded_numel(lay) * eb)))
        return false;
    lw_barrier(l);
    for (int j = 0; j < cg_layout_regs(lay); j++)
        lw_smem_store(l, LLVMBuildMul(l->B, lw_lin_index(l, id, j), ci32(l, eb), ""), x[j]);
    lw_barrier(l);
    for (int64_t e = 0; e < n; e++) {
        int64_t p = 0, r = e, stride = 1; /* e's index over the padded dims */
        for (int d = lay->rank - 1; d >= 0; d--) {
            p += (r % lay->shape[d]) * stride;
            r /= lay->shape[d];
            stride <<= lay->lg[d];
        }
        el[e] = lw_smem_load(l, ci32(l, p * eb), reg_type(l, dt));
    }
    return true;
}

/* An element as registers hold it -> its stored bits: an i32 (f32, i32; f16 and bf16 in
 * the low half), or an i64. */
static LLVMValueRef elem_bits(L *l, loom_dtype dt, LLVMValueRef v)
{
    switch (dt) {
    case LOOM_F32:
        return LLVMBuildBitCast(l->B, v, l->t_i32, "");
    case LOOM_F16:
        return LLVMBuildZExt(l->B, LLVMBuildBitCast(l->B, LLVMBuildFPTrunc(l->B, v, l->t_f16, ""), l->t_i16, ""),
                             l->t_i32, "");
    case LOOM_BF16: /* already rounded to bf16: its top half */
        return LLVMBuildLShr(l->B, LLVMBuildBitCast(l->B, v, l->t_i32, ""), ci32(l, 16), "");
    default:
        return v;
    }
}

/* Thread 0 of the replica writes the view's bytes, as 32-bit words, into the view of every
 * CTA of the cluster (this one included; without clusters, this one alone) with st.async,
 * which completes them on that CTA's barrier i: mapa gives the peer's address of the view
 * and of the barrier.  One st.async a CTA (.v2/.v4 where the view is aligned to it), or
 * one a word.  A kernel launched without clusters has no peers (and no mapa to ask):
 * plain stores, a fence, then mbarrier.complete_tx of the bytes.  The value comes from registers, so nothing needs ordering before it; the
 * receiver's wait on the barrier makes the bytes visible, as for a TMA load. */
bool lower_smem_store_cluster(L *l, uint32_t o, ir_op *op)
{
    const ir_type *vt = vty(l, op->opnd[0]);
    loom_dtype dt = (loom_dtype)vt->dtype;
    int es = (int)loom_dtype_size(dt);
    int64_t n = ir_shape_numel(&vt->shape);
    int nw = (int)(n * es / 4);
    LLVMValueRef el[16], w[4];
    if (n > 16 || nw > 4 || nw < 1)
        return CG_BUG(l->cg, "smem_store_cluster of %lld elements of %d bytes", (long long)n, es);
    if (!thread0_elems(l, o, n, el))
        return false;
    for (int i = 0; i < nw; i++) {
        if (es == 4)
            w[i] = elem_bits(l, dt, el[i]);
        else if (es == 8)
            w[i] = LLVMBuildTrunc(l->B, i % 2 ? LLVMBuildLShr(l->B, el[i / 2], ci64(l, 32), "") : el[i / 2], l->t_i32, "");
        else
            w[i] = LLVMBuildOr(l->B, elem_bits(l, dt, el[2 * i]),
                               LLVMBuildShl(l->B, elem_bits(l, dt, el[2 * i + 1]), ci32(l, 16), ""), "");
    }
    int64_t align = ir_view_align(l->k, op->opnd[0]);
    int per = nw == 4 && align >= 16 ? 4 : nw == 2 && align >= 8 ? 2 : 1; /* words a st.async */
    static const char *const vals[5] = {"", "$3", "{$3, $4}", "", "{$3, $4, $5, $6}"};
    char text[320], cons[64];
    snprintf(text, sizeof text,
             "{\n\t.reg .b32 ra, rb;\n\tmapa.shared::cluster.u32 ra, $0, $2;\n\tmapa.shared::cluster.u32 rb, $1, $2;\n\t"
             "st.async.shared::cluster.mbarrier::complete_tx::bytes%s.b32 [ra], %s, [rb];\n\t}",
             per == 4 ? ".v4" : per == 2 ? ".v2" : "", vals[per]);
    snprintf(cons, sizeof cons, "r,r,r%s,~{memory}", per == 4 ? ",r,r,r,r" : per == 2 ? ",r,r" : ",r");
    LLVMValueRef view = saddr(l, smem_off(l, op->opnd[0])), bar = bar_addr(l, op, 2);
    LLVMBasicBlockRef m = if_begin(l, elected(l));
    if (l->k->cluster <= 1) { /* no cluster launch: no mapa; plain stores, released to the
                               * barrier's waiters by a fence before completing the bytes */
        for (int i = 0; i < nw; i++) {
            LLVMValueRef a[2] = {i ? LLVMBuildAdd(l->B, view, ci32(l, 4 * i), "") : view, w[i]};
            asm_void(l, "st.shared.b32 [$0], $1;", "r,r,~{memory}", a, 2);
        }
        LLVMValueRef b[2] = {bar, ci32(l, 4 * nw)};
        asm_void(l, "fence.acq_rel.cta;\n\tmbarrier.complete_tx.relaxed.cta.shared::cta.b64 [$0], $1;", "r,r,~{memory}",
                 b, 2);
        if_end(l, m);
        return true;
    }
    for (int q = 0; q < l->k->cluster; q++)
        for (int i = 0; i < nw; i += per) {
            LLVMValueRef args[7] = {i ? LLVMBuildAdd(l->B, view, ci32(l, 4 * i), "") : view, bar, ci32(l, q)};
            for (int j = 0; j < per; j++)
                args[3 + j] = w[i + j];
            asm_void(l, text, cons, args, 3 + per);
        }
    if_end(l, m);
    return true;
}

/* ---------------------------------------------------------------- the hang check
 * (codegen.h).  A bounded loop tries once and leaves at once when that succeeds, as the
 * plain loop does; only a failed first try reads %globaltimer.  Past the bound it leaves
 * with "timed out", and hang_report (a cold block) writes the record and traps. */

/* The module's CG_HANG_GLOBAL: [record address, tag], set by the launcher after loading
 * (externally initialized: LLVM must not take the zeros for the value). */
static LLVMValueRef hang_global(L *l)
{
    LLVMValueRef g = LLVMGetNamedGlobal(l->M, CG_HANG_GLOBAL);
    if (g)
        return g;
    LLVMTypeRef t = LLVMArrayType2(l->t_i64, 2);
    g = LLVMAddGlobalInAddressSpace(l->M, t, CG_HANG_GLOBAL, 1);
    LLVMSetInitializer(g, LLVMConstNull(t));
    LLVMSetExternallyInitialized(g, 1);
    LLVMSetLinkage(g, LLVMExternalLinkage);
    LLVMSetAlignment(g, 8);
    return g;
}

/* The " .. + bound" operand text of a bounded loop: the bound in ns. */
static void hang_bound(L *l, char *buf, size_t n)
{
    snprintf(buf, n, "%lld", (long long)l->cg->hang_ms * 1000000LL);
}

/* if (timed_out) { record (op o; a, b, c as codegen.h says) and trap }: the first thread
 * to time out claims the record, fills it with system-scope stores and fences before
 * the trap (the trap kills the context: the host reads the record from its own memory
 * afterwards); the others sleep until the trap ends them. */
static void hang_report(L *l, uint32_t o, LLVMValueRef timed_out, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
    LLVMBasicBlockRef t = LLVMAppendBasicBlockInContext(l->C, l->fn, "hang");
    LLVMBasicBlockRef m = LLVMAppendBasicBlockInContext(l->C, l->fn, "hang.end");
    LLVMBuildCondBr(l->B, timed_out, t, m);
    LLVMPositionBuilderAtEnd(l->B, t);
    LLVMValueRef g = hang_global(l);
    LLVMTypeRef gt = LLVMArrayType2(l->t_i64, 2);
    LLVMValueRef rec = LLVMBuildLoad2(l->B, l->t_i64, g, "");
    LLVMSetVolatile(rec, 1);
    LLVMValueRef idx[2] = {ci32(l, 0), ci32(l, 1)};
    LLVMValueRef tag = LLVMBuildLoad2(l->B, l->t_i64, LLVMBuildGEP2(l->B, gt, g, idx, 2, ""), "");
    LLVMSetVolatile(tag, 1);
    char text[1600];
    snprintf(text, sizeof text,
             "{\n\t.reg .pred p;\n\t.reg .b32 old, x;\n\t"
             "setp.eq.u64 p, $0, 0;\n\t@p bra LOOM_HANG_TRAP_${:uid};\n\t"
             "atom.relaxed.sys.cas.b32 old, [$0], 0, %u;\n\t"
             "setp.ne.u32 p, old, 0;\n\t@p bra LOOM_HANG_LOST_${:uid};\n\t"
             "st.relaxed.sys.u32 [$0+%d], $1;\n\tst.relaxed.sys.u32 [$0+%d], %u;\n\t"
             "st.relaxed.sys.u32 [$0+%d], $2;\n\t"
             "mov.u32 x, %%ctaid.x;\n\tst.relaxed.sys.u32 [$0+%d], x;\n\t"
             "mov.u32 x, %%ctaid.y;\n\tst.relaxed.sys.u32 [$0+%d], x;\n\t"
             "mov.u32 x, %%ctaid.z;\n\tst.relaxed.sys.u32 [$0+%d], x;\n\t"
             "mov.u32 x, %%tid.x;\n\tst.relaxed.sys.u32 [$0+%d], x;\n\t"
             "st.relaxed.sys.u64 [$0+%d], $3;\n\tst.relaxed.sys.u32 [$0+%d], $4;\n\t"
             "st.relaxed.sys.u32 [$0+%d], $5;\n\tst.relaxed.sys.u32 [$0+%d], %d;\n\t"
             "fence.sc.sys;\n\tst.relaxed.sys.u32 [$0], %u;\n\tfence.sc.sys;\n\t"
             "bra LOOM_HANG_TRAP_${:uid};\n\t"
             "LOOM_HANG_LOST_${:uid}:\n\tnanosleep.u32 1000000;\n\tbra LOOM_HANG_LOST_${:uid};\n\t"
             "LOOM_HANG_TRAP_${:uid}:\n\t}",
             CG_HANG_WRITING, 4 * CG_HANG_TAG, 4 * CG_HANG_SITE, o, 4 * CG_HANG_REPLICA, 4 * CG_HANG_CTA_X,
             4 * CG_HANG_CTA_Y, 4 * CG_HANG_CTA_Z, 4 * CG_HANG_THREAD, 4 * CG_HANG_A_LO, 4 * CG_HANG_B,
             4 * CG_HANG_C, 4 * CG_HANG_MS, l->cg->hang_ms, CG_HANG_DONE);
    LLVMValueRef args[6] = {rec, LLVMBuildTrunc(l->B, tag, l->t_i32, ""), l->replica ? l->replica : ci32(l, 0),
                            a, b, c};
    asm_void(l, text, "l,r,r,l,r,r,~{memory}", args, 6);
    lw_call_intr(l, l->B, "llvm.trap", NULL, 0, NULL, 0);
    LLVMBuildUnreachable(l->B);
    LLVMPositionBuilderAtEnd(l->B, m);
}

bool lower_mbar_wait(L *l, uint32_t o, ir_op *op)
{
    LLVMValueRef a[2] = {bar_addr(l, op, 0), scal(l, op->opnd[2])};
    if (!l->cg->hang_ms) {
        asm_void(l,
                 "{\n\t.reg .pred p;\n\tLOOM_WAIT_${:uid}:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1;\n\t"
                 "@!p bra LOOM_WAIT_${:uid};\n\t}",
                 "r,r,~{memory}", a, 2);
        return true;
    }
    char bound[32], text[900];
    hang_bound(l, bound, sizeof bound);
    snprintf(text, sizeof text,
             "{\n\t.reg .pred p;\n\t.reg .b64 t0, t1;\n\tmov.u32 $0, 0;\n\t"
             "mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\n\t"
             "@p bra LOOM_WAIT_DONE_${:uid};\n\tmov.u64 t0, %%globaltimer;\n\t"
             "LOOM_WAIT_${:uid}:\n\t"
             "mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\n\t"
             "@p bra LOOM_WAIT_DONE_${:uid};\n\tmov.u64 t1, %%globaltimer;\n\t"
             "sub.u64 t1, t1, t0;\n\tsetp.lt.u64 p, t1, %s;\n\t@p bra LOOM_WAIT_${:uid};\n\t"
             "mov.u32 $0, 1;\n\tLOOM_WAIT_DONE_${:uid}:\n\t}",
             bound);
    LLVMValueRef late = lw_asm_call(l, l->t_i32, text, "=r,r,r,~{memory}", a, 2, false);
    hang_report(l, o, LLVMBuildICmp(l->B, LLVMIntNE, late, ci32(l, 0), ""),
                LLVMBuildZExt(l->B, scal(l, op->opnd[1]), l->t_i64, ""), a[1], ci32(l, 0));
    return true;
}

bool lower_named_barrier(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    char t[64];
    snprintf(t, sizeof t, "bar.sync %d, %d;", (int)op->iattr[0] + 8, (int)op->iattr[1]);
    asm_void(l, t, "~{memory}", NULL, 0);
    return true;
}

bool lower_named_barrier_arrive(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    char t[64];
    snprintf(t, sizeof t, "bar.arrive %d, %d;", (int)op->iattr[0] + 8, (int)op->iattr[1]);
    asm_void(l, t, "~{memory}", NULL, 0);
    return true;
}

bool lower_fence_async(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    (void)op;
    asm_void(l, "fence.proxy.async.shared::cta;", "~{memory}", NULL, 0);
    return true;
}

/* ---------------------------------------------------------------- flags */

/* The offset in elements of the flag element of a flag op (flags, offsets..., value), as i64. */
static LLVMValueRef flag_elem(L *l, ir_op *op)
{
    const ir_arg *arg = &l->k->args[l->k->vals[op->opnd[0]].def];
    LLVMValueRef off = ci64(l, 0);
    for (int d = 0; d < arg->shape.rank; d++)
        off = LLVMBuildAdd(l->B, off,
                           LLVMBuildMul(l->B, lw_to_i64(l, scal(l, op->opnd[1 + d])), ci64(l, arg->strides[d]), ""), "");
    return off;
}

/* The generic address of the flag element of a flag op, as i64 (the byte offset summed
 * as it always was: the plain loops' PTX stays what it was). */
static LLVMValueRef flag_addr(L *l, ir_op *op)
{
    uint32_t t = op->opnd[0];
    const ir_arg *arg = &l->k->args[l->k->vals[t].def];
    LLVMValueRef off = ci64(l, 0);
    for (int d = 0; d < arg->shape.rank; d++)
        off = LLVMBuildAdd(l->B, off,
                           LLVMBuildMul(l->B, lw_to_i64(l, scal(l, op->opnd[1 + d])), ci64(l, arg->strides[d] * 4), ""), "");
    LLVMValueRef p = LLVMBuildGEP2(l->B, l->t_i8, LLVMGetParam(l->fn, l->k->vals[t].def), &off, 1, "");
    return LLVMBuildPtrToInt(l->B, p, l->t_i64, "");
}

/* Every thread of the replica is past its stores (bar.sync), then one thread adds with
 * release semantics at GPU scope. */
bool lower_flag_add(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    LLVMValueRef a[2] = {flag_addr(l, op), scal(l, op->opnd[op->nopnd - 1])};
    lw_barrier(l);
    LLVMBasicBlockRef m = if_begin(l, elected(l));
    asm_void(l, "red.release.gpu.add.s32 [$0], $1;", "l,r,~{memory}", a, 2);
    if_end(l, m);
    return true;
}

/* One thread spins with acquire loads until the flag reaches the target and fences the
 * async proxy (so the TMA loads it issues next, from the same elected thread, see what
 * it acquired), then bar.sync makes that visible to the whole replica. */
bool lower_flag_wait(L *l, uint32_t o, ir_op *op)
{
    LLVMValueRef a[2] = {flag_addr(l, op), scal(l, op->opnd[op->nopnd - 1])};
    LLVMBasicBlockRef m = if_begin(l, elected(l));
    if (!l->cg->hang_ms)
        asm_void(l,
                 "{\n\t.reg .pred p;\n\t.reg .s32 v;\n\tLOOM_FLAG_${:uid}:\n\t"
                 "ld.acquire.gpu.s32 v, [$0];\n\tsetp.lt.s32 p, v, $1;\n\t"
                 "@p bra LOOM_FLAG_${:uid};\n\tfence.proxy.async.global;\n\t}",
                 "l,r,~{memory}", a, 2);
    else { /* bounded (the hang check): leaves with the last value read, below the
            * target only when it timed out */
        char bound[32], text[900];
        hang_bound(l, bound, sizeof bound);
        snprintf(text, sizeof text,
                 "{\n\t.reg .pred p;\n\t.reg .b64 t0, t1;\n\t"
                 "ld.acquire.gpu.s32 $0, [$1];\n\tsetp.lt.s32 p, $0, $2;\n\t"
                 "@!p bra LOOM_FLAG_DONE_${:uid};\n\tmov.u64 t0, %%globaltimer;\n\t"
                 "LOOM_FLAG_${:uid}:\n\t"
                 "ld.acquire.gpu.s32 $0, [$1];\n\tsetp.lt.s32 p, $0, $2;\n\t"
                 "@!p bra LOOM_FLAG_DONE_${:uid};\n\tmov.u64 t1, %%globaltimer;\n\t"
                 "sub.u64 t1, t1, t0;\n\tsetp.lt.u64 p, t1, %s;\n\t@p bra LOOM_FLAG_${:uid};\n\t"
                 "LOOM_FLAG_DONE_${:uid}:\n\tfence.proxy.async.global;\n\t}",
                 bound);
        LLVMValueRef v = lw_asm_call(l, l->t_i32, text, "=r,l,r,~{memory}", a, 2, false);
        hang_report(l, o, LLVMBuildICmp(l->B, LLVMIntSLT, v, a[1], ""), flag_elem(l, op), a[1], v);
    }
    if_end(l, m);
    lw_barrier(l);
    return true;
}

/* One thread of the replica adds (relaxed, GPU scope: the counter orders nothing else) and
 * every thread gets the old value, so what is computed from it stays uniform.  How the
 * value reaches the others:
 *   - a replica of one warp (a scheduler's producer): the adding lane passes it with
 *     shfl.sync, in the same asm as the add: no memory, no barrier;
 *   - a larger one: through a word of the replica's own scratch region (codegen/smem.c
 *     plans it like a conversion's), in the order every scratch user keeps: bar.sync (no
 *     thread still reads what the region held, an earlier claim included), the elected
 *     thread adds and stores the old value, bar.sync, every thread loads it.  Replicas
 *     have regions of their own, so they never see each other's claims. */
bool lower_atomic_add(L *l, uint32_t o, ir_op *op)
{
    LLVMValueRef a[2] = {flag_addr(l, op), scal(l, op->opnd[op->nopnd - 1])};
    if (cg_op_warps(l->k, o) == 1) {
        LLVMValueRef b[3] = {l->tid_local ? l->tid_local : l->tid, a[0], a[1]};
        LLVMValueRef v = lw_asm_call(l, l->t_i32,
                                     "{\n\t.reg .pred p;\n\t.reg .b32 v;\n\tmov.b32 v, 0;\n\t"
                                     "setp.eq.u32 p, $1, 0;\n\t@p atom.relaxed.gpu.add.s32 v, [$2], $3;\n\t"
                                     "shfl.sync.idx.b32 $0, v, 0, 31, -1;\n\t}",
                                     "=r,r,l,r,~{memory}", b, 3, false);
        return lw_set_scalar(l, op->res[0], v);
    }
    if (!lw_check_scratch(l, 4))
        return false;
    lw_barrier(l);
    LLVMBasicBlockRef m = if_begin(l, elected(l));
    LLVMValueRef old = lw_asm_call(l, l->t_i32, "atom.relaxed.gpu.add.s32 $0, [$1], $2;", "=r,l,r,~{memory}", a, 2,
                                   false);
    lw_smem_store(l, ci32(l, 0), old);
    if_end(l, m);
    lw_barrier(l);
    return lw_set_scalar(l, op->res[0], lw_smem_load(l, ci32(l, 0), l->t_i32));
}

/* ---------------------------------------------------------------- TMA */

/* The boxes of one TMA op: one per chunk of the view (see the top of this file). */
typedef struct tma_plan {
    int rank, nchunk;
    int64_t box[5];
    int64_t chunk_cols, chunk_bytes;
} tma_plan;

static tma_plan plan_tma(loom_kernel *k, const ir_op *op)
{
    tma_plan p = {0};
    const ir_type *tt = &k->vals[op->opnd[0]].type;
    int r = tt->shape.rank;
    const ir_type *vt = &k->vals[op->opnd[1 + r]].type;
    int v = vt->shape.rank, es = (int)loom_dtype_size((loom_dtype)vt->dtype);
    p.rank = r;
    for (int d = 0; d < r; d++)
        p.box[d] = d < r - v ? 1 : vt->shape.dim[d - (r - v)];
    int64_t inner = vt->shape.dim[v - 1] * es;
    p.nchunk = vt->swizzle && inner > vt->swizzle ? (int)(inner / vt->swizzle) : 1;
    p.chunk_cols = vt->shape.dim[v - 1] / p.nchunk;
    p.box[r - 1] = p.chunk_cols;
    p.chunk_bytes = ir_shape_numel(&vt->shape) * es / p.nchunk;
    return p;
}

bool lw_hopper_collect_tma(L *l)
{
    loom_kernel *k = l->k;
    cg_ctx *cg = l->cg;
    cg->ntma = 0;
    l->op_tma = calloc(k->nops, sizeof *l->op_tma);
    if (!l->op_tma)
        return cg_fail(cg, LOOM_ERR_NOMEM, "out of memory");
    for (uint32_t o = 1; o < k->nops; o++) {
        const ir_op *op = &k->ops[o];
        if ((!ir_is_tma_load(op->kind) && op->kind != IR_TMA_STORE) ||
            !op->block)
            continue;
        tma_plan p = plan_tma(k, op);
        const ir_value *tv = &k->vals[op->opnd[0]];
        int r = tv->type.shape.rank;
        int swz = k->vals[op->opnd[1 + r]].type.swizzle;
        int found = -1;
        for (int t = 0; t < cg->ntma && found < 0; t++) {
            bool same = cg->tma[t].arg == (int)tv->def && cg->tma[t].swizzle == swz && cg->tma[t].rank == r;
            for (int d = 0; same && d < r; d++)
                same = cg->tma[t].box[d] == p.box[d];
            if (same)
                found = t;
        }
        if (found < 0) {
            if (cg->ntma == CG_MAX_TMA)
                return cg_fail(cg, LOOM_ERR_UNSUPPORTED, "%s:%d: a kernel can use at most 16 TMA descriptors",
                               op->src.file, op->src.line);
            found = cg->ntma++;
            cg->tma[found].arg = (int)tv->def;
            cg->tma[found].rank = r;
            cg->tma[found].swizzle = swz;
            for (int d = 0; d < r; d++)
                cg->tma[found].box[d] = p.box[d];
        }
        l->op_tma[o] = found;
    }
    return true;
}

/* The coordinates operand list "{c_inner, ..., c_outer}" text for n dims from $first. */
static void coords_text(char *buf, size_t n, int rank, int first)
{
    size_t p = (size_t)snprintf(buf, n, "{");
    for (int d = 0; d < rank; d++)
        p += (size_t)snprintf(buf + p, n - p, "%s$%d", d ? ", " : "", first + d);
    snprintf(buf + p, n - p, "}");
}

static bool tma_common_lower(L *l, uint32_t o, ir_op *op, bool load, bool multicast)
{
    loom_kernel *k = l->k;
    int r = vty(l, op->opnd[0])->shape.rank;
    tma_plan p = plan_tma(k, op);
    LLVMValueRef desc = l->tma_param[l->op_tma[o]];
    LLVMValueRef dst = saddr(l, smem_off(l, op->opnd[1 + r]));
    LLVMValueRef bar = load ? bar_addr(l, op, 2 + r) : NULL;
    LLVMBasicBlockRef m = if_begin(l, elected(l));
    for (int c = 0; c < p.nchunk; c++) {
        LLVMValueRef args[10];
        int n = 0;
        args[n++] = LLVMBuildAdd(l->B, dst, ci32(l, c * p.chunk_bytes), "");
        args[n++] = desc;
        for (int d = r - 1; d >= 0; d--) { /* innermost first */
            LLVMValueRef x = scal(l, op->opnd[1 + d]);
            if (LLVMTypeOf(x) == l->t_i64)
                x = LLVMBuildTrunc(l->B, x, l->t_i32, "");
            if (d == r - 1 && c)
                x = LLVMBuildAdd(l->B, x, ci32(l, c * p.chunk_cols), "");
            args[n++] = x;
        }
        if (load)
            args[n++] = bar;
        if (multicast) /* every CTA of the cluster */
            args[n++] = LLVMConstInt(LLVMInt16TypeInContext(l->C), (1u << l->k->cluster) - 1, 0);
        char co[64], text[320], cons[64];
        coords_text(co, sizeof co, r, 2);
        char mask[16] = "";
        if (multicast)
            snprintf(mask, sizeof mask, ", $%d", 3 + r);
        if (load)
            snprintf(text, sizeof text,
                     "cp.async.bulk.tensor.%dd.shared::cluster.global.mbarrier::complete_tx::bytes%s [$0], [$1, %s], "
                     "[$%d]%s;",
                     r, multicast ? ".multicast::cluster" : "", co, 2 + r, mask);
        else
            snprintf(text, sizeof text, "cp.async.bulk.tensor.%dd.global.shared::cta.bulk_group [$1, %s], [$0];", r,
                     co);
        size_t q = (size_t)snprintf(cons, sizeof cons, "r,l");
        for (int d = 0; d < r; d++)
            q += (size_t)snprintf(cons + q, sizeof cons - q, ",r");
        snprintf(cons + q, sizeof cons - q, "%s%s,~{memory}", load ? ",r" : "", multicast ? ",h" : "");
        asm_void(l, text, cons, args, n);
    }
    if (!load)
        asm_void(l, "cp.async.bulk.commit_group;", "~{memory}", NULL, 0);
    if_end(l, m);
    return true;
}

bool lower_tma_load(L *l, uint32_t o, ir_op *op) { return tma_common_lower(l, o, op, true, false); }
bool lower_tma_store(L *l, uint32_t o, ir_op *op) { return tma_common_lower(l, o, op, false, false); }
bool lower_tma_load_multicast(L *l, uint32_t o, ir_op *op)
{
    return tma_common_lower(l, o, op, true, l->k->cluster > 1);
}

bool lower_tma_store_wait(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    char t[64];
    snprintf(t, sizeof t, "cp.async.bulk.wait_group.read %d;", (int)op->iattr[0]);
    LLVMBasicBlockRef m = if_begin(l, elected(l));
    asm_void(l, t, "~{memory}", NULL, 0);
    if_end(l, m);
    return true;
}

/* ---------------------------------------------------------------- wgmma */

static int swz_mode(int swz) { return swz == 128 ? 1 : swz == 64 ? 2 : swz == 32 ? 3 : 0; }

/* A wgmma operand's descriptor (view geometry g at shared byte offset off; mn_major: the
 * operand's M/N dim is the stored inner, contiguous one) as its two 32-bit halves.  The
 * low half holds the start address >> 4 and the leading byte offset: desc_lo.  The high
 * half, the stride byte offset and the swizzle mode, is the same for every step of an op:
 * desc_hi.  A shared address is below 2^18, so its start field (14 bits) never carries:
 * the descriptor at off + d (d a multiple of 16) is the low half plus d >> 4. */
static int64_t desc_lbo(const vgeom *g, bool mn_major) { return mn_major ? g->rows * g->span : 16; }

static LLVMValueRef desc_lo(L *l, const vgeom *g, LLVMValueRef off, bool mn_major)
{
    LLVMValueRef a = LLVMBuildAnd(l->B, LLVMBuildLShr(l->B, saddr(l, off), ci32(l, 4), ""), ci32(l, 0x3fff), "");
    return LLVMBuildOr(l->B, a, ci32(l, (int32_t)(((desc_lbo(g, mn_major) >> 4) & 0x3fff) << 16)), "");
}

static uint32_t desc_hi(const vgeom *g)
{
    return (uint32_t)(((8 * g->span) >> 4) & 0x3fff) | ((uint32_t)swz_mode(g->swz) << 30);
}

/* Byte offset within an operand view of element (mn, k) block starts: for a K-major
 * operand (k contiguous) and for an MN-major one; chunks of one span along the inner dim. */
static int64_t op_off(const vgeom *g, bool mn_major, int64_t mn, int64_t k)
{
    if (!mn_major) { /* stored [mn][k] */
        int64_t b = k * g->es;
        return (b / g->span) * g->rows * g->span + mn * g->span + b % g->span;
    }
    int64_t b = mn * g->es; /* stored [k][mn] */
    return (b / g->span) * g->rows * g->span + k * g->span + b % g->span;
}

/* A in registers, in the A fragment's layout (codegen/layout.c, cg_mma_a_layout): per m64
 * block mb and k16 chunk c, the fragment's a0..a7 are the tile's registers mb * K'/2 + 8c
 * .. 8c + 7 (K' the padded K), packed in pairs into four b32 registers {a0a1, a2a3, a4a5,
 * a6a7}, low half first (from the f32 registers of a cast where the tile is one, by cvt).
 * Returns the registers of block mb, chunk c at [(mb * K/16 + c) * 4], or NULL. */
static LLVMValueRef *a_fragments(L *l, uint32_t o, ir_op *op, int64_t mblocks, int64_t K)
{
    int32_t id = cg_want(l->cg, o, 0);
    LLVMValueRef *x = lw_opnd_regs(l, o, 0);
    if (id < 0 || !x)
        return NULL;
    loom_dtype dt = vdt(l, op->opnd[0]);
    bool packed = l->packed && l->packed[op->opnd[0]];
    const lv *src = packed ? NULL : cast_source(l, op->opnd[0], id);
    int64_t half = (INT64_C(1) << cg_lay(l->cg, id)->lg[1]) / 2, chunks = K / 16;
    LLVMValueRef *pk = lw_regs_alloc(l, (int)(mblocks * chunks * 4));
    if (!pk)
        return NULL;
    for (int64_t mb = 0; mb < mblocks; mb++)
        for (int64_t c = 0; c < chunks; c++)
            for (int q = 0; q < 4; q++)
            {
                int j = (int)(mb * half + 8 * c + 2 * q);
                pk[(mb * chunks + c) * 4 + q] =
                    packed ? LLVMBuildBitCast(l->B, x[j], l->t_i32, "") : pack_pair(l, dt, src, x, j);
            }
    return pk;
}

/* The result type of an asm statement with many register outputs (wgmma, its wait and
 * fence): a struct type of its own per statement.  With one literal type for all of them,
 * instcombine turns a loop's phis of the accumulator registers (each an extractvalue of a
 * wait in the preheader and of one in the latch) into one phi of the whole struct, and
 * instruction selection then copies all of that struct's registers out again for every
 * register extracted from it: 128 x 128 copies per loop for a 64x256 accumulator, a fifth
 * of ikbo_lce's PTX emission time.  Distinct types keep the phis per register. */
static LLVMTypeRef asm_results(L *l, LLVMTypeRef *ft, int n)
{
    LLVMTypeRef st = LLVMStructCreateNamed(l->C, "");
    LLVMStructSetBody(st, ft, (unsigned)n, 0);
    return st;
}

/* wgmma.fence with the A registers (na b32) and the accumulator (nc f32) passing through
 * it as tied operands, replaced in place by what comes out: LLVM then computes every one
 * of them before the fence and wgmma reads them after it, as the fence requires of
 * registers wgmma reads. */
static bool fence_tied(L *l, LLVMValueRef *a, int na, LLVMValueRef *c, int nc)
{
    int n = na + nc;
    char *cons = lw_alloc(l, (size_t)n * 8 + 16);
    LLVMTypeRef *ft = lw_alloc(l, (size_t)n * sizeof *ft);
    LLVMValueRef *args = lw_regs_alloc(l, n);
    if (!cons || !ft || !args)
        return false;
    size_t p = 0;
    for (int i = 0; i < n; i++) {
        p += (size_t)sprintf(cons + p, "%s=%c", i ? "," : "", i < na ? 'r' : 'f');
        ft[i] = i < na ? l->t_i32 : l->t_f32;
        args[i] = i < na ? a[i] : c[i - na];
    }
    for (int i = 0; i < n; i++)
        p += (size_t)sprintf(cons + p, ",%d", i);
    sprintf(cons + p, ",~{memory}");
    LLVMTypeRef st = asm_results(l, ft, n);
    LLVMTypeRef fty = LLVMFunctionType(st, ft, (unsigned)n, 0);
    const char *t = "wgmma.fence.sync.aligned;";
    LLVMValueRef ia = LLVMGetInlineAsm(fty, t, strlen(t), cons, strlen(cons), 1, 0, LLVMInlineAsmDialectATT, 0);
    LLVMValueRef call = LLVMBuildCall2(l->B, fty, ia, args, (unsigned)n, "");
    lw_add_fn_attr_call(l, call, "convergent", 0);
    for (int i = 0; i < n; i++) {
        LLVMValueRef x = LLVMBuildExtractValue(l->B, call, (unsigned)i, "");
        if (i < na)
            a[i] = x;
        else
            c[i - na] = x;
    }
    return true;
}

/* A wgmma directly followed in its block by wgmma_commit and a wgmma_wait of its result
 * alone (the k loop of every GEMM template) is issued together with them, in one asm
 * statement (lower_wgmma).  Returns the wait op fused into wgmma op g, or 0. */
static uint32_t wgmma_fused_wait(cg_ctx *cg, uint32_t g)
{
    const loom_kernel *k = cg->k;
    const ir_block *b = &k->blocks[k->ops[g].block];
    for (uint32_t i = 0; i + 2 < b->nops; i++) {
        if (b->ops[i] != g)
            continue;
        uint32_t c = b->ops[i + 1], w = b->ops[i + 2];
        const ir_op *wo = &k->ops[w];
        int32_t id = cg->vlay[k->ops[g].res[0]];
        bool ok = k->ops[c].kind == IR_WGMMA_COMMIT && wo->kind == IR_WGMMA_WAIT && wo->nopnd == 1 &&
                  wo->opnd[0] == k->ops[g].res[0] && cg_want(cg, w, 0) == id && cg->vlay[wo->res[0]] == id;
        return ok ? w : 0;
    }
    return 0;
}

/* The wgmma whose statement issued op o (a commit or a wait), or 0. */
static uint32_t issued_by_wgmma(cg_ctx *cg, uint32_t o)
{
    const loom_kernel *k = cg->k;
    const ir_block *b = &k->blocks[k->ops[o].block];
    int back = k->ops[o].kind == IR_WGMMA_COMMIT ? 1 : 2;
    for (uint32_t i = (uint32_t)back; i < b->nops; i++)
        if (b->ops[i] == o) {
            uint32_t g = b->ops[i - (uint32_t)back];
            return k->ops[g].kind == IR_WGMMA && wgmma_fused_wait(cg, g) == b->ops[i - (uint32_t)back + 2] ? g : 0;
        }
    return 0;
}

static uint32_t arrive_after_wait(const loom_kernel *k, uint32_t w);

bool lower_wgmma(L *l, uint32_t o, ir_op *op)
{
    cg_ctx *cg = l->cg;
    const ir_type *at = vty(l, op->opnd[0]), *bt = vty(l, op->opnd[1]);
    bool a_regs = at->kind == IR_T_TILE; /* else a view (rule_wgmma) */
    if (!a_regs && at->kind != IR_T_SMEM)
        return CG_BUG(cg, "wgmma at %s:%d: A is neither a view nor a register tile", op->src.file, op->src.line);
    /* a documented refusal (docs/dsl.md, "What the code generator refuses"): the
     * interpreter runs unswizzled operands, but wgmma's descriptors here describe
     * swizzled layouts only */
    if ((!a_regs && !at->swizzle) || !bt->swizzle)
        return cg_fail(cg, LOOM_ERR_UNSUPPORTED,
                       "%s:%d: wgmma operands in shared memory need a swizzle mode (LOOM_SWIZZLE_128, 64 or 32)",
                       op->src.file, op->src.line);
    int32_t id = cg->vlay[op->res[0]];
    const cg_layout *lay = cg_lay(cg, id);
    LLVMValueRef *acc = lw_opnd_regs(l, o, 2);
    if (!acc)
        return false;
    int n = cg_layout_regs(lay);
    LLVMValueRef *out = lw_regs_alloc(l, n);
    if (!out)
        return false;
    memcpy(out, acc, (size_t)n * sizeof *out);
    int64_t M = at->shape.dim[0], K = at->shape.dim[1], N = bt->shape.dim[1];
    int gbits = lay->nwarp - 2;
    int64_t G = INT64_C(1) << gbits, rows = M / G, mblocks = rows / 64;
    int64_t Np = INT64_C(1) << lay->lg[1]; /* padded N: registers per m64 block = Np / 2 */
    vgeom ga = geom(l, op->opnd[0]), gb = geom(l, op->opnd[1]);
    bool a_mn = at->trans, b_mn = !bt->trans; /* B [K,N] stored as is: N contiguous */
    const char *ty = at->dtype == LOOM_BF16 ? "bf16" : "f16";
    /* warp group of this thread within the task: row offset g * rows */
    LLVMValueRef g = LLVMBuildLShr(l->B, l->warp, ci32(l, 2), "");
    LLVMValueRef a_base = smem_off(l, op->opnd[0]), b_base = smem_off(l, op->opnd[1]);
    LLVMValueRef *afr = NULL; /* A in registers: four b32 per m64 block and k16 chunk */
    if (a_regs) {
        if (!(afr = a_fragments(l, o, op, mblocks, K)) || !fence_tied(l, afr, (int)(mblocks * K / 16 * 4), out, n))
            return false;
    } else
        asm_void(l, "wgmma.fence.sync.aligned;", "~{memory}", NULL, 0);
    /* One asm statement issues every wgmma instruction of the op (per m64 block, its K/16
     * steps) back to back on the same accumulator registers, as CUTLASS writes them, and,
     * where the op is followed by its commit and wait (wgmma_fused_wait), those too.  The
     * PTX is the sequence that one statement per step and per op gave, but LLVM sees the
     * accumulators pass through one call's tied operands instead of K/16 + 1 of them:
     * instruction selection, two-address lowering and the register coalescer, which all
     * scale with those operands, do a fraction of the work (most of a GEMM's PTX
     * emission time was there).  The statement also makes each step's descriptors: one
     * add to the low half of the operand's first (desc_lo) and a constant high half.
     * Computed in full for each step (shift, mask, or of a 64-bit value), they took a
     * fifth of the issue slots of flash attention's tile loop in uniform-datapath
     * instructions (bench/RESULTS.md). */
    uint32_t w = wgmma_fused_wait(cg, o), fa = w ? arrive_after_wait(l->k, w) : 0;
    int nr = (int)(N / 2), ks = (int)(K / 16);
    int nout = (int)mblocks * nr; /* the registers wgmma writes */
    /* inputs: A's four registers a step, or its descriptor's low half an m64 block; B's
     * low half (the statement adds each step's offset to them) */
    int nain = a_regs ? (int)mblocks * ks * 4 : (int)mblocks;
    int bin = nout + nain;  /* operand number of B's low half */
    int np = bin + 1;       /* operand number of the scale-d input */
    size_t tlen = (size_t)(mblocks * ks) * ((size_t)nr * 7 + 260) + 640;
    size_t clen = (size_t)nout * 9 + (size_t)(mblocks * ks) * 12 + 32;
    char *text = lw_alloc(l, tlen), *cons = lw_alloc(l, clen);
    if (!text || !cons)
        return false;
    /* An accumulator of zeros (a splat of 0: the first k step's) is not read: the first
     * step of each m64 block has scale-d off (predicate z) and the registers go in
     * undefined, as CUTLASS does it, instead of a mov of 0 per register. */
    bool zero = true;
    for (int64_t mb = 0; mb < mblocks; mb++)
        for (int i = 0; i < nr && zero; i++)
            zero = LLVMIsConstant(out[mb * (Np / 2) + i]) && LLVMIsNull(out[mb * (Np / 2) + i]);
    int nfa = np + 1 + (zero ? 1 : 0); /* the fused arrive's lane and barrier operands */
    size_t p = (size_t)snprintf(text, tlen, "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $%d, 0;\n\t", np);
    if (zero)
        p += (size_t)snprintf(text + p, tlen - p, ".reg .pred z;\n\tsetp.ne.b32 z, $%d, 0;\n\t", np + 1);
    /* each step's descriptors: the low half at its offset, the high half a constant */
    p += (size_t)snprintf(text + p, tlen - p, ".reg .b32 dl, dha, dhb;\n\t.reg .b64 da, db;\n\tmov.b32 dhb, %u;\n\t",
                          desc_hi(&gb));
    if (!a_regs)
        p += (size_t)snprintf(text + p, tlen - p, "mov.b32 dha, %u;\n\t", desc_hi(&ga));
    for (int64_t mb = 0; mb < mblocks; mb++)
        for (int s = 0; s < ks; s++) {
            int a0 = nout + (int)(mb * ks + s) * 4, r0 = (int)mb * nr; /* A's registers */
            const char *sd = zero && s == 0 ? "z" : "p";
            int64_t da = op_off(&ga, a_mn, mb * 64, s * 16) - op_off(&ga, a_mn, mb * 64, 0);
            int64_t db = op_off(&gb, b_mn, 0, s * 16) - op_off(&gb, b_mn, 0, 0);
            if (da % 16 || db % 16 || da < 0 || db < 0)
                return CG_BUG(cg, "wgmma at %s:%d: a step's operand offset is not a multiple of 16 bytes",
                              op->src.file, op->src.line);
            if (!a_regs)
                p += (size_t)snprintf(text + p, tlen - p, "add.s32 dl, $%d, %lld;\n\tmov.b64 da, {dl, dha};\n\t",
                                      nout + (int)mb, (long long)(da >> 4));
            p += (size_t)snprintf(text + p, tlen - p, "add.s32 dl, $%d, %lld;\n\tmov.b64 db, {dl, dhb};\n\t", bin,
                                  (long long)(db >> 4));
            p += (size_t)snprintf(text + p, tlen - p, "wgmma.mma_async.sync.aligned.m64n%lldk16.f32.%s.%s {",
                                  (long long)N, ty, ty);
            for (int i = 0; i < nr; i++)
                p += (size_t)snprintf(text + p, tlen - p, "%s$%d", i ? ", " : "", r0 + i);
            if (a_regs) /* no transpose of A in registers */
                p += (size_t)snprintf(text + p, tlen - p, "}, {$%d, $%d, $%d, $%d}, db, %s, 1, 1, %d;\n\t", a0,
                                      a0 + 1, a0 + 2, a0 + 3, sd, b_mn ? 1 : 0);
            else
                p += (size_t)snprintf(text + p, tlen - p, "}, da, db, %s, 1, 1, %d, %d;\n\t", sd, a_mn ? 1 : 0,
                                      b_mn ? 1 : 0);
        }
    if (w) {
        p += (size_t)snprintf(text + p, tlen - p, "wgmma.commit_group.sync.aligned;\n\twgmma.wait_group.sync.aligned %d;\n\t",
                              (int)l->k->ops[w].iattr[0]);
        if (fa) /* lane 0 of each warp arrives right after the wait (lower_wgmma_wait) */
            p += (size_t)snprintf(text + p, tlen - p,
                                  "{\n\t.reg .pred q;\n\tsetp.eq.u32 q, $%d, 0;\n\t"
                                  "@q mbarrier.arrive.shared::cta.b64 _, [$%d];\n\t}\n\t",
                                  nfa, nfa + 1);
    }
    snprintf(text + p, tlen - p, "}");
    size_t q = 0;
    for (int i = 0; i < nout; i++)
        q += (size_t)snprintf(cons + q, clen - q, "%s=f", i ? "," : "");
    for (int i = 0; i < nain + 1; i++) /* A, then B's low half */
        q += (size_t)snprintf(cons + q, clen - q, ",r");
    q += (size_t)snprintf(cons + q, clen - q, zero ? ",r,r" : ",r");
    if (fa)
        q += (size_t)snprintf(cons + q, clen - q, ",r,r");
    for (int i = 0; i < nout; i++)
        q += (size_t)snprintf(cons + q, clen - q, ",%d", i);
    if (w)
        snprintf(cons + q, clen - q, ",~{memory}");
    int nargs = nfa + (fa ? 2 : 0) + nout, na = 0;
    LLVMTypeRef *ft = lw_alloc(l, (size_t)nout * sizeof *ft);
    LLVMValueRef *args = lw_alloc(l, (size_t)nargs * sizeof *args);
    LLVMTypeRef *at2 = lw_alloc(l, (size_t)nargs * sizeof *at2);
    if (!ft || !args || !at2)
        return false;
    /* the descriptors: each operand's low half at its first step (A: per m64 block) */
    if (!a_regs)
        for (int64_t mb = 0; mb < mblocks; mb++) {
            /* a: rows g*rows + mb*64 .. */
            LLVMValueRef arow = LLVMBuildMul(l->B, g, ci32(l, rows), ""), aoff;
            if (!a_mn) /* rows are whole spans: the dynamic row moves by row * span */
                aoff = LLVMBuildAdd(l->B, a_base,
                                    LLVMBuildAdd(l->B, LLVMBuildMul(l->B, arow, ci32(l, ga.span), ""),
                                                 ci32(l, op_off(&ga, false, mb * 64, 0)), ""), "");
            else /* A stored [K][M]: the warp group's rows are columns: chunks of the span */
                aoff = LLVMBuildAdd(l->B, a_base,
                                    LLVMBuildAdd(l->B,
                                                 LLVMBuildMul(l->B, LLVMBuildUDiv(l->B, LLVMBuildMul(l->B, arow, ci32(l, ga.es), ""), ci32(l, ga.span), ""),
                                                              ci32(l, ga.rows * ga.span), ""),
                                                 ci32(l, op_off(&ga, true, mb * 64, 0)), ""), "");
            args[na++] = desc_lo(l, &ga, aoff, a_mn);
        }
    else
        for (int64_t i = 0; i < mblocks * ks * 4; i++)
            args[na++] = afr[i];
    args[na++] = desc_lo(l, &gb, LLVMBuildAdd(l->B, b_base, ci32(l, op_off(&gb, b_mn, 0, 0)), ""), b_mn);
    args[na++] = ci32(l, 1);
    if (zero)
        args[na++] = ci32(l, 0);
    if (fa) {
        args[na++] = l->lane;
        args[na++] = bar_addr(l, &l->k->ops[fa], 0);
    }
    for (int64_t mb = 0; mb < mblocks; mb++)
        for (int i = 0; i < nr; i++)
            args[na++] = zero ? LLVMGetUndef(l->t_f32) : out[mb * (Np / 2) + i];
    for (int i = 0; i < nout; i++)
        ft[i] = l->t_f32;
    for (int i = 0; i < na; i++)
        at2[i] = LLVMTypeOf(args[i]);
    LLVMTypeRef fty = LLVMFunctionType(asm_results(l, ft, nout), at2, (unsigned)na, 0);
    LLVMValueRef ia = LLVMGetInlineAsm(fty, text, strlen(text), cons, strlen(cons), 1, 0, LLVMInlineAsmDialectATT, 0);
    LLVMValueRef call = LLVMBuildCall2(l->B, fty, ia, args, (unsigned)na, "");
    lw_add_fn_attr_call(l, call, "convergent", 0);
    for (int64_t mb = 0; mb < mblocks; mb++)
        for (int i = 0; i < nr; i++)
            out[mb * (Np / 2) + i] = LLVMBuildExtractValue(l->B, call, (unsigned)(mb * nr + i), "");
    /* the wait's result: the same registers (those past N, the padding of Np, pass
     * through unchanged: wgmma never writes them) */
    if (w) {
        LLVMValueRef *wr = lw_regs_alloc(l, n);
        if (!wr)
            return false;
        memcpy(wr, out, (size_t)n * sizeof *wr);
        if (!lw_set_result(l, l->k->ops[w].res[0], id, wr))
            return false;
    }
    (void)Np;
    return lw_set_result(l, op->res[0], id, out);
}

bool lower_wgmma_commit(L *l, uint32_t o, ir_op *op)
{
    (void)op;
    if (issued_by_wgmma(l->cg, o)) /* in the wgmma's statement */
        return true;
    asm_void(l, "wgmma.commit_group.sync.aligned;", "~{memory}", NULL, 0);
    return true;
}

/* An mbar_arrive that directly follows a wgmma_wait in its block is emitted inside the
 * wait's asm.  ptxas schedules the arithmetic on the returned accumulators freely, and it
 * placed such an arrive (which nothing depends on) after all of an epilogue's arithmetic:
 * a ring slot given back a thousand instructions late, while the producer waits for it.
 * Inside the asm the arrive happens as soon as the wait returns.  Returns the arrive op
 * fused into wait op w, or 0. */
static uint32_t arrive_after_wait(const loom_kernel *k, uint32_t w)
{
    const ir_block *b = &k->blocks[k->ops[w].block];
    for (uint32_t i = 0; i + 1 < b->nops; i++)
        if (b->ops[i] == w)
            return k->ops[b->ops[i + 1]].kind == IR_MBAR_ARRIVE ? b->ops[i + 1] : 0;
    return 0;
}

static bool arrive_fused(const loom_kernel *k, uint32_t a)
{
    const ir_block *b = &k->blocks[k->ops[a].block];
    for (uint32_t i = 1; i < b->nops; i++)
        if (b->ops[i] == a)
            return k->ops[b->ops[i - 1]].kind == IR_WGMMA_WAIT;
    return false;
}

/* The accumulators flow through the wait as tied operands: LLVM cannot touch them before. */
bool lower_wgmma_wait(L *l, uint32_t o, ir_op *op)
{
    if (issued_by_wgmma(l->cg, o)) /* in the wgmma's statement, which set the result */
        return true;
    int total = 0;
    LLVMValueRef *regs[16];
    for (int i = 0; i < op->nopnd; i++) {
        if (!(regs[i] = lw_opnd_regs(l, o, i)))
            return false;
        total += cg_layout_regs(cg_lay(l->cg, l->cg->vlay[op->res[i]]));
    }
    uint32_t fa = arrive_after_wait(l->k, o);
    char t[256];
    if (fa) /* lane 0 of each warp arrives (lower_mbar_arrive), right after the wait */
        snprintf(t, sizeof t,
                 "{\n\t.reg .pred p;\n\tsetp.eq.u32 p, $%d, 0;\n\twgmma.wait_group.sync.aligned %d;\n\t"
                 "@p mbarrier.arrive.shared::cta.b64 _, [$%d];\n\t}",
                 2 * total, (int)op->iattr[0], 2 * total + 1); /* after the outputs and tied inputs */
    else
        snprintf(t, sizeof t, "wgmma.wait_group.sync.aligned %d;", (int)op->iattr[0]);
    LLVMValueRef extra[2] = {NULL, NULL};
    if (fa) {
        extra[0] = l->lane;
        extra[1] = bar_addr(l, &l->k->ops[fa], 0);
    }
    int ne = fa ? 2 : 0;
    if (total == 0) {
        asm_void(l, t, fa ? "r,r,~{memory}" : "~{memory}", extra, ne);
        return true;
    }
    char *cons = lw_alloc(l, (size_t)total * 8 + 32);
    LLVMTypeRef *ft = lw_alloc(l, (size_t)total * sizeof *ft);
    LLVMTypeRef *it = lw_alloc(l, (size_t)(total + 2) * sizeof *it);
    LLVMValueRef *args = lw_alloc(l, (size_t)(total + 2) * sizeof *args);
    if (!cons || !ft || !it || !args)
        return false;
    size_t q = 0;
    for (int i = 0; i < total; i++)
        q += (size_t)sprintf(cons + q, "%s=f", i ? "," : "");
    for (int i = 0; i < total; i++)
        q += (size_t)sprintf(cons + q, ",%d", i);
    sprintf(cons + q, "%s,~{memory}", fa ? ",r,r" : "");
    int a = 0;
    for (int i = 0; i < op->nopnd; i++) {
        int n = cg_layout_regs(cg_lay(l->cg, l->cg->vlay[op->res[i]]));
        for (int j = 0; j < n; j++)
            args[a++] = regs[i][j];
    }
    for (int i = 0; i < ne; i++)
        args[a++] = extra[i];
    for (int i = 0; i < total; i++)
        ft[i] = it[i] = l->t_f32;
    for (int i = 0; i < ne; i++)
        it[total + i] = l->t_i32;
    LLVMTypeRef st = asm_results(l, ft, total);
    LLVMTypeRef fty = LLVMFunctionType(st, it, (unsigned)(total + ne), 0);
    LLVMValueRef ia = LLVMGetInlineAsm(fty, t, strlen(t), cons, strlen(cons), 1, 0, LLVMInlineAsmDialectATT, 0);
    LLVMValueRef call = LLVMBuildCall2(l->B, fty, ia, args, (unsigned)(total + ne), "");
    lw_add_fn_attr_call(l, call, "convergent", 0);
    a = 0;
    for (int i = 0; i < op->nres; i++) {
        int32_t id = l->cg->vlay[op->res[i]];
        int n = cg_layout_regs(cg_lay(l->cg, id));
        LLVMValueRef *r = lw_regs_alloc(l, n);
        if (!r)
            return false;
        for (int j = 0; j < n; j++)
            r[j] = LLVMBuildExtractValue(l->B, call, (unsigned)a++, "");
        lw_set_result(l, op->res[i], id, r);
    }
    return true;
}

/* ---------------------------------------------------------------- tasks */

static int entry_regs(loom_kernel *k)
{
    int threads = loom_kernel_num_warps(k) * 32;
    int r = (65536 / threads) & ~7;
    return r > 255 ? 255 : r;
}

bool lower_task(L *l, uint32_t o, ir_op *op)
{
    cg_ctx *cg = l->cg;
    ir_task_info t[64];
    int nt = ir_tasks(l->k, t, 64), ti = -1, rep0 = 0;
    for (int i = 0; i < nt && i < 64; i++) {
        if (t[i].op == o)
            ti = i;
        if (ti < 0)
            rep0 += t[i].replicas;
    }
    if (ti < 0)
        return CG_BUG(cg, "task %u not found", o);
    if (rep0 + t[ti].replicas > 7)
        return cg_fail(cg, LOOM_ERR_UNSUPPORTED, "%s:%d: at most 7 task replicas in all (one hardware named barrier each)",
                       op->src.file, op->src.line);
    if (!l->barriers_ready) { /* mbarrier inits visible to every task before any starts */
        asm_void(l, "fence.mbarrier_init.release.cluster;", "~{memory}", NULL, 0);
        lw_barrier(l);
        lw_cluster_sync(l); /* ... and to the cluster's other CTAs, which arrive on them */
        l->barriers_ready = true;
    }
    int warps = t[ti].warps, first = t[ti].first_warp;
    LLVMValueRef wg = LLVMBuildLShr(l->B, l->tid, ci32(l, 5), "");
    LLVMValueRef rel = LLVMBuildSub(l->B, wg, ci32(l, first), "");
    LLVMValueRef in = LLVMBuildICmp(l->B, LLVMIntULT, rel, ci32(l, warps * t[ti].replicas), "");
    LLVMBasicBlockRef m = if_begin(l, in);
    /* a prologue block for the task's per-thread values (coordinates), then its body */
    LLVMBasicBlockRef pro = LLVMGetInsertBlock(l->B);
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(l->C, l->fn, "task.body");
    if (t[ti].regs) {
        int e = entry_regs(l->k);
        char txt[64];
        snprintf(txt, sizeof txt, "setmaxnreg.%s.sync.aligned.u32 %d;", t[ti].regs > e ? "inc" : "dec", t[ti].regs);
        if (t[ti].regs != e)
            asm_void(l, txt, "~{memory}", NULL, 0);
    }
    /* task-local state */
    L saved = *l;
    LLVMValueRef rep = LLVMBuildUDiv(l->B, rel, ci32(l, warps), "replica");
    LLVMValueRef lw = LLVMBuildSub(l->B, rel, LLVMBuildMul(l->B, rep, ci32(l, warps), ""), "");
    int wb = 0;
    while ((2 << wb) <= warps && wb < CG_MAXWARPBITS)
        wb++;
    l->warp = LLVMBuildAnd(l->B, lw, ci32(l, (1 << wb) - 1), "twarp");
    l->replica = rep;
    l->tid_local = LLVMBuildSub(l->B, l->tid, ci32(l, (first)*32), "");
    l->tid_local = LLVMBuildSub(l->B, l->tid_local, LLVMBuildMul(l->B, rep, ci32(l, warps * 32), ""), "tlocal");
    l->bar_id = LLVMBuildAdd(l->B, rep, ci32(l, 1 + rep0), "");
    l->bar_threads = warps * 32;
    l->scratch_base = LLVMBuildAdd(l->B, ci32(l, (int64_t)cg->task_scratch_off[ti]),
                                   LLVMBuildMul(l->B, rep, ci32(l, (int64_t)cg->task_scratch_size[ti]), ""), "");
    /* coordinates are per task (warp ids differ): a fresh cache, computed in the task */
    l->tcoord = NULL;
    l->ntcoord = 0;
    LLVMBuilderRef pb = l->PB;
    l->PB = LLVMCreateBuilderInContext(l->C);
    LLVMPositionBuilderAtEnd(l->PB, pro);
    LLVMPositionBuilderAtEnd(l->B, body);
    bool ok = lw_lower_block(l, op->reg[0]);
    LLVMBuildBr(l->PB, body);
    LLVMDisposeBuilder(l->PB);
    free(l->tcoord);
    LLVMBuilderRef b = l->B;
    l->PB = pb;
    l->warp = saved.warp;
    l->replica = saved.replica;
    l->tid_local = saved.tid_local;
    l->bar_id = saved.bar_id;
    l->bar_threads = saved.bar_threads;
    l->scratch_base = saved.scratch_base;
    l->tcoord = saved.tcoord;
    l->ntcoord = saved.ntcoord;
    l->B = b;
    if (!ok)
        return false;
    if_end(l, m);
    return true;
}

bool lower_cluster_rank(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    if (l->k->cluster <= 1)
        return lw_set_scalar(l, op->res[0], ci32(l, 0));
    return lw_set_scalar(l, op->res[0], lw_asm_call(l, l->t_i32, "mov.u32 $0, %cluster_ctarank;", "=r", NULL, 0, true));
}

bool lower_task_replica(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    return lw_set_scalar(l, op->res[0], l->replica ? l->replica : ci32(l, 0));
}

/* ---------------------------------------------------------------- kernel-level parts */

void lw_hopper_kernel_attrs(L *l)
{
    cg_ctx *cg = l->cg;
    if (ir_tasks(l->k, NULL, 0) > 0) {
        /* launch bounds fix the register count every thread starts with (64K / threads),
         * which setmaxnreg needs to know */
        lw_annotate(l, "minctasm", 1);
        LLVMAddAttributeAtIndex(l->fn, LLVMAttributeFunctionIndex,
                                LLVMCreateStringAttribute(l->C, "nvvm.minctasm", 13, "1", 1));
    }
    unsigned kb = LLVMGetEnumAttributeKindForName("byval", 5);
    LLVMTypeRef desc_t = LLVMArrayType2(l->t_i8, 128);
    for (int t = 0; t < cg->ntma; t++) {
        unsigned idx = (unsigned)(l->k->nargs + t);
        char name[32];
        snprintf(name, sizeof name, "loom_tma%d", t);
        LLVMSetValueName2(LLVMGetParam(l->fn, idx), name, strlen(name));
        LLVMAddAttributeAtIndex(l->fn, idx + 1, LLVMCreateTypeAttribute(l->C, kb, desc_t));
        lw_add_param_attr(l, idx + 1, "align", 64);
        LLVMAddAttributeAtIndex(l->fn, idx + 1, LLVMCreateStringAttribute(l->C, "nvvm.grid_constant", 18, "", 0));
    }
    if (cg->ntma) {
        LLVMMetadataRef idx[16];
        for (int t = 0; t < cg->ntma; t++)
            idx[t] = LLVMValueAsMetadata(LLVMConstInt(l->t_i32, (unsigned long long)(l->k->nargs + t + 1), 0));
        LLVMMetadataRef md[3] = {LLVMValueAsMetadata(l->fn), LLVMMDStringInContext2(l->C, "grid_constant", 13),
                                 LLVMMDNodeInContext2(l->C, idx, (size_t)cg->ntma)};
        LLVMAddNamedMetadataOperand(l->M, "nvvm.annotations",
                                    LLVMMetadataAsValue(l->C, LLVMMDNodeInContext2(l->C, md, 3)));
    }
}

void lw_hopper_entry(L *l)
{
    cg_ctx *cg = l->cg;
    if (l->smem) {
        LLVMValueRef p = LLVMBuildPtrToInt(l->PB, l->smem, l->t_i64, "");
        l->smem_base32 = LLVMBuildTrunc(l->PB, p, l->t_i32, "smem_base");
        if (cg->scratch_off && ir_tasks(l->k, NULL, 0) == 0)
            l->scratch_base = ci32(l, (int64_t)cg->scratch_off);
    }
    for (int t = 0; t < cg->ntma; t++)
        l->tma_param[t] = LLVMBuildPtrToInt(l->PB, LLVMGetParam(l->fn, (unsigned)(l->k->nargs + t)), l->t_i64, "");
    l->barriers_ready = true;
}
