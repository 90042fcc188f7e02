/*
 * lower_smem.c -- shared-memory views and tiles: allocations, slots, transposed views and
 * parts (each held as one i32, its byte offset in loom_smem), and smem_load /
 * smem_store, which move a register tile to and from a view.  The packing of 16-bit pairs
 * (lw_pack_pair, from a cast's f32 registers where the tile is one: lw_cast_source) is
 * here too: the wgmma A fragments (lower_wgmma.c) pack the same way.
 *
 * smem_load and smem_store begin with the task's barrier: a tile is read or written by
 * all of the task's threads together, so the DSL's "the load sees the store" holds.  A
 * load of an allocation no thread writes (a ring tile only TMA fills, read after its
 * mbarrier wait: a block's scales) needs no barrier and has none.
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
 * A one-element tile in shared memory (a scheduler's hand-over word) is stored by the
 * elected thread and read by each warp's lane 0, which passes it on with shfl.sync: the
 * threads that touch the word are the threads that arrive (lower_sync.c), so
 * compute-sanitizer's racecheck sees the barriers order every access.
 */
#include "lower.h"

/* ---------------------------------------------------------------- shared-memory values */

static LLVMValueRef *one_reg(L *l, LLVMValueRef x)
{
    LLVMValueRef *r = lw_regs_alloc(l, 1);
    if (r)
        r[0] = x;
    return r;
}

/* Hold a shared-memory value (ring, view, barriers): its byte offset in loom_smem. */
bool lw_set_smem(L *l, uint32_t v, LLVMValueRef off)
{
    LLVMValueRef *r = one_reg(l, off);
    if (!r)
        return false;
    l->vals[v].lay = -1;
    l->vals[v].n = 1;
    l->vals[v].r = r;
    return true;
}

/* ---------------------------------------------------------------- layout of a view */

vgeom lw_geom(L *l, uint32_t v)
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
 * with geometry g, computed whole. */
static LLVMValueRef reg_ptr(L *l, const vgeom *g, int32_t id, LLVMValueRef base, int j)
{
    LLVMValueRef row, col;
    view_rc(l, g, id, j, &row, &col);
    return sm_abs_ptr(l, LLVMBuildAdd(l->B, base, elem_off(l, g, row, col), ""));
}

/* The shared addresses of a tile's registers in a view, each the sum of a part the thread
 * computes once and a constant (so that an op of n registers keeps a few address
 * registers live, not n: computed whole for each register, LLVM hoists n of them out of a
 * persistent kernel's loop and ptxas spills them).
 *
 * Register j's stored (row, col) is the thread's coordinates OR the register's constant
 * ones (a layout maps each coordinate bit to one lane, warp or register bit).  For a 2-D
 * view whose span is a power of two, elem_off is then
 *     lin(row_t, col_t) + lin(row_j, col_j) + (P_t ^ Q_j)
 * with lin = chunk * rows * span + row * span (chunk = col * es / span) and P, Q = the
 * offset in the span (col * es % span) XOR the swizzle's (row * span >> 7 & m) << 4, as
 * long as the chunk term leaves the swizzle's bits (rows * span a multiple of 2^(7+log2
 * m+1)).  The bits of Q_j no thread bit reaches (tmask) add like the linear part; each
 * distinct rest of Q_j is one thread register, base + lin_t + (P_t ^ Qx).  Where the view
 * is not of that form, each address is computed whole (elem_off). */
typedef struct reg_addr {
    const vgeom *g;
    int32_t id;
    LLVMValueRef base;
    bool split;
    int dr, dc;        /* the layout dims of the stored row and column */
    int64_t tmask;     /* the bits of P a thread may set */
    LLVMValueRef lin_t, p_t;
    int64_t qx[64];    /* the thread registers made so far: base + lin_t + (p_t ^ qx[i]) */
    LLVMValueRef v[64];
    int nv;
} reg_addr;

static bool pow2(int64_t x) { return x > 0 && !(x & (x - 1)); }

static int64_t swz_bits(const vgeom *g, int64_t row) { return g->swz ? ((row * g->span) >> 7) & (g->swz / 16 - 1) : 0; }

static reg_addr reg_addr_begin(L *l, const vgeom *g, int32_t id, LLVMValueRef base)
{
    reg_addr a = {.g = g, .id = id, .base = base};
    const cg_layout *lay = cg_lay(l->cg, id);
    a.dr = g->trans ? 1 : 0, a.dc = g->trans ? 0 : 1;
    int64_t inner = g->dim[1] * g->es;
    if (g->rank != 2 || lay->rank != 2 || !pow2(g->span) || !pow2(g->es) || inner % g->span ||
        (g->swz && (g->span < g->swz || (g->rows * g->span) % (INT64_C(128) * g->swz / 16))))
        return a;
    /* the thread's bits and the registers' never share a coordinate bit */
    int64_t tb[2] = {0, 0}, rb[2] = {0, 0};
    for (int i = 0; i < 5 + lay->nwarp; i++) {
        cg_bit b = i < 5 ? lay->lane[i] : lay->warp[i - 5];
        if (b.dim >= 0)
            tb[b.dim] |= INT64_C(1) << b.bit;
    }
    for (int i = 0; i < lay->nreg; i++)
        if (lay->reg[i].dim >= 0)
            rb[lay->reg[i].dim] |= INT64_C(1) << lay->reg[i].bit;
    if ((tb[0] & rb[0]) || (tb[1] & rb[1]))
        return a;
    for (int i = 0; i < 63; i++) { /* P of each thread bit alone (P is XOR-linear in them) */
        if ((tb[a.dc] >> i) & 1)
            a.tmask |= ((INT64_C(1) << i) * g->es) % g->span;
        if ((tb[a.dr] >> i) & 1)
            a.tmask |= swz_bits(g, INT64_C(1) << i) << 4;
    }
    LLVMValueRef row = lw_tcoord(l, id, a.dr), col = lw_tcoord(l, id, a.dc);
    LLVMValueRef b = LLVMBuildMul(l->B, col, ci32(l, g->es), "");
    LLVMValueRef chunk = LLVMBuildUDiv(l->B, b, ci32(l, g->span), "");
    LLVMValueRef rs = LLVMBuildMul(l->B, row, ci32(l, g->span), "");
    a.lin_t = LLVMBuildAdd(l->B, base,
                           LLVMBuildAdd(l->B, LLVMBuildMul(l->B, chunk, ci32(l, g->rows * g->span), ""), rs, ""), "");
    a.p_t = LLVMBuildURem(l->B, b, ci32(l, g->span), "");
    if (g->swz) {
        LLVMValueRef x = LLVMBuildAnd(l->B, LLVMBuildLShr(l->B, rs, ci32(l, 7), ""), ci32(l, g->swz / 16 - 1), "");
        a.p_t = LLVMBuildXor(l->B, a.p_t, LLVMBuildShl(l->B, x, ci32(l, 4), ""), "");
    }
    a.split = true;
    return a;
}

/* The shared address of register j (reg_addr_begin's tile and view). */
static LLVMValueRef reg_addr_of(L *l, reg_addr *a, int j)
{
    const vgeom *g = a->g;
    if (!a->split)
        return reg_ptr(l, g, a->id, a->base, j);
    const cg_layout *lay = cg_lay(l->cg, a->id);
    int64_t row = cg_reg_coord(lay, j, a->dr), bj = cg_reg_coord(lay, j, a->dc) * g->es;
    int64_t lin = bj / g->span * g->rows * g->span + row * g->span;
    int64_t q = (bj % g->span) ^ (swz_bits(g, row) << 4), qx = q & a->tmask;
    int i = 0;
    while (i < a->nv && a->qx[i] != qx)
        i++;
    if (i == a->nv) {
        if (a->nv == 64) { /* more than the cache holds: this one whole */
            LLVMValueRef p = LLVMBuildXor(l->B, a->p_t, ci32(l, qx), "");
            return sm_abs_ptr(l, LLVMBuildAdd(l->B, LLVMBuildAdd(l->B, a->lin_t, p, ""), ci32(l, lin + (q & ~a->tmask)), ""));
        }
        a->qx[i] = qx;
        a->v[i] = LLVMBuildAdd(l->B, a->lin_t, qx ? LLVMBuildXor(l->B, a->p_t, ci32(l, qx), "") : a->p_t, "");
        a->nv++;
    }
    return sm_abs_ptr(l, LLVMBuildAdd(l->B, a->v[i], ci32(l, lin + (q & ~a->tmask)), ""));
}

/* ---------------------------------------------------------------- shared memory ops */

bool lower_smem_alloc(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    return lw_set_smem(l, op->res[0], ci32(l, (int64_t)l->cg->val_off[op->res[0]]));
}

bool lower_smem_slot(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    const ir_type *t = vty(l, op->opnd[0]);
    int64_t slot = ir_shape_numel(&t->shape) * (int64_t)loom_dtype_size((loom_dtype)t->dtype);
    LLVMValueRef off = LLVMBuildAdd(l->B, smem_off(l, op->opnd[0]),
                                    LLVMBuildMul(l->B, scal(l, op->opnd[1]), ci32(l, slot), ""), "");
    return lw_set_smem(l, op->res[0], off);
}

bool lower_smem_trans(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    return lw_set_smem(l, op->res[0], smem_off(l, op->opnd[0]));
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
    return lw_set_smem(l, op->res[0], LLVMBuildAdd(l->B, smem_off(l, op->opnd[0]), ci32(l, bytes), ""));
}

static LLVMValueRef load_elem(L *l, loom_dtype dt, LLVMValueRef p)
{
    if (ir_dtype_is_fp8(dt)) {
        LLVMValueRef b = LLVMBuildLoad2(l->B, l->t_i8, p, ""), f;
        lw_fp8_decode(l, dt, &b, 1, &f);
        return f;
    }
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
    if (ir_dtype_is_fp8(dt)) {
        LLVMValueRef b;
        lw_fp8_bytes(l, dt, &v, 1, &b);
        LLVMBuildStore(l->B, b, p);
        return;
    }
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

/* The allocation a view (a slot, part or transpose of one) lies in: its op, or 0. */
static uint32_t alloc_of(const loom_kernel *k, uint32_t v)
{
    for (;;) {
        const ir_value *x = &k->vals[v];
        if (x->kind != IR_V_RESULT)
            return 0;
        const ir_op *d = &k->ops[x->def];
        if (d->kind == IR_SMEM_ALLOC)
            return x->def;
        if (d->kind != IR_SMEM_SLOT && d->kind != IR_SMEM_PART && d->kind != IR_SMEM_TRANS)
            return 0;
        v = d->opnd[0];
    }
}

/* Do threads write allocation a anywhere in the kernel (smem_store, a cluster store)?
 * Where only TMA writes it, what a thread reads was waited for on an mbarrier, which
 * makes it visible: no task barrier is needed for that. */
static bool thread_written(const loom_kernel *k, uint32_t a)
{
    for (uint32_t o = 1; o < k->nops; o++) {
        const ir_op *op = &k->ops[o];
        if ((op->kind == IR_SMEM_STORE || op->kind == IR_SMEM_STORE_CLUSTER) && op->nopnd &&
            alloc_of(k, op->opnd[0]) == a)
            return true;
    }
    return false;
}

/* A tile of one element (a scheduler's hand-over word): one thread's value is everyone's. */
static bool one_element(L *l, uint32_t v) { return ir_shape_numel(&vty(l, v)->shape) == 1; }

bool lower_smem_load(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    vgeom g = lw_geom(l, op->opnd[0]);
    int32_t id = l->cg->vlay[op->res[0]];
    int n = cg_layout_regs(cg_lay(l->cg, id));
    LLVMValueRef *out = lw_regs_alloc(l, n);
    if (!out)
        return false;
    loom_dtype dt = vdt(l, op->res[0]);
    LLVMValueRef base = smem_off(l, op->opnd[0]);
    uint32_t a = alloc_of(l->k, op->opnd[0]);
    if (!a || thread_written(l->k, a)) /* tile semantics: every thread's earlier writes of the view are visible */
        lw_barrier(l);
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
    reg_addr ra = reg_addr_begin(l, &g, id, base);
    if (dt == LOOM_F32 && runs_in_rows(cg_lay(l->cg, id), &g, 1, true) && n % 2 == 0) {
        /* the accumulator's layout: a pair of f32 is one 8-byte load (its column is even:
         * it never straddles a swizzle unit or a chunk) */
        LLVMTypeRef v2 = LLVMVectorType(l->t_f32, 2);
        for (int j = 0; j < n; j += 2) {
            LLVMValueRef w = LLVMBuildLoad2(l->B, v2, reg_addr_of(l, &ra, j), "");
            LLVMSetAlignment(w, 8);
            out[j] = LLVMBuildExtractElement(l->B, w, ci32(l, 0), "");
            out[j + 1] = LLVMBuildExtractElement(l->B, w, ci32(l, 1), "");
        }
        return lw_set_result(l, op->res[0], id, out);
    }
    for (int j = 0; j < n; j++) {
        out[j] = load_elem(l, dt, reg_addr_of(l, &ra, j)); /* padded coordinates read garbage they never use */
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

/* y where x is fpext(fptrunc(y)) to dt (f16 or bf16) and back (the f32 register of a
 * rounding to dt: a cast, an op's result), else x. */
static LLVMValueRef unrounded(L *l, loom_dtype dt, LLVMValueRef x)
{
    LLVMTypeRef ht = dt == LOOM_BF16 ? LLVMBFloatTypeInContext(l->C) : l->t_f16;
    LLVMValueRef h = LLVMIsAFPExtInst(x) ? LLVMGetOperand(x, 0) : NULL;
    if (h && LLVMTypeOf(h) == ht && LLVMIsAFPTruncInst(h) && LLVMTypeOf(LLVMGetOperand(h, 0)) == l->t_f32)
        return LLVMGetOperand(h, 0);
    return x;
}

/* The pack of cvt.rn.{f16,bf16}x2.f32 for dt (f16 or bf16), its first operand filling the
 * upper half. */
static const char *cvt_x2(loom_dtype dt) { return dt == LOOM_BF16 ? "cvt.rn.bf16x2.f32" : "cvt.rn.f16x2.f32"; }

LLVMValueRef lw_cvt_pair(L *l, loom_dtype dt, LLVMValueRef lo, LLVMValueRef hi)
{
    char text[48];
    snprintf(text, sizeof text, "%s $0, $1, $2;", cvt_x2(dt));
    LLVMValueRef ab[2] = {hi, lo}; /* the first operand fills the upper half */
    return lw_asm_call(l, l->t_i32, text, "=r,f,f", ab, 2, true);
}

/* Two elements (already rounded to dt) as one i32 (16-bit types) or <2 x float> (f32). */
static LLVMValueRef pack2(L *l, loom_dtype dt, LLVMValueRef a, LLVMValueRef b)
{
    if (dt == LOOM_F32) {
        LLVMValueRef v = LLVMGetUndef(LLVMVectorType(l->t_f32, 2));
        v = LLVMBuildInsertElement(l->B, v, a, ci32(l, 0), "");
        return LLVMBuildInsertElement(l->B, v, b, ci32(l, 1), "");
    }
    /* f16, bf16: one cvt.rn.{f16,bf16}x2.f32 (as lw_pack_pair): a <2 x half> bitcast to i32
     * would be a ProxyReg machine instruction for LLVM 19, whose eraser walks the whole
     * function once per instance (lower_mem.c, f16_bits).  Rounding an element that is
     * already a value of dt is exact; one that is the f32 of a rounding to dt is rounded
     * from its source instead, so that rounding and the conversion back are dead. */
    return lw_cvt_pair(l, dt, unrounded(l, dt, a), unrounded(l, dt, b));
}

/* The f32 registers tile x (f16/bf16, in layout id) was cast from, when that tile is held
 * in the same layout (an epilogue's, or attention's P = cast(exp2(...))), else NULL: then
 * a pair of x's elements rounds and packs with one cvt.rn.{f16,bf16}x2.f32 from them
 * (round to nearest even, as the cast; the cast's own rounding is then dead). */
const lv *lw_cast_source(L *l, uint32_t x, int32_t id)
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

/* Registers j and j + 1 of a tile of dt (x) packed into one (pack2), from the f32 registers
 * of its cast (lw_cast_source) where src is not NULL. */
LLVMValueRef lw_pack_pair(L *l, loom_dtype dt, const lv *src, const LLVMValueRef *x, int j)
{
    return src ? lw_cvt_pair(l, dt, src->r[j], src->r[j + 1]) : pack2(l, dt, x[j], x[j + 1]);
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
     * five, the same instructions as pack2's: cvt.rn.{f16,bf16}x2.f32 (its first operand
     * fills the upper half) from the unrounded source of a rounding. */
    char text[320];
    const char *cvt = cvt_x2(dt);
    snprintf(text, sizeof text,
             "{\n\t.reg .b32 q<4>;\n\t%s q0, $2, $1;\n\t%s q1, $4, $3;\n\t%s q2, $6, $5;\n\t%s q3, $8, $7;\n\t"
             "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [$0], {q0, q1, q2, q3};\n\t}",
             cvt, cvt, cvt, cvt);
    for (int64_t c = 0; c < rows / 16; c++) {
        LLVMValueRef a[9];
        a[0] = saddr(l, LLVMBuildAdd(l->B, at, ci32(l, c * 16 * g->span), ""));
        for (int i = 0; i < 4; i++) { /* block i: columns + 8 (i & 1), rows 16c + 8 (i >> 1) */
            int j = 2 * (i & 1) + 4 * (int)(2 * c + (i >> 1));
            a[1 + 2 * i] = unrounded(l, dt, x[j]);
            a[2 + 2 * i] = unrounded(l, dt, x[j + 1]);
        }
        lw_asm_void(l, text, "r,f,f,f,f,f,f,f,f,~{memory}", a, 9);
    }
}

bool lower_smem_store(L *l, uint32_t o, ir_op *op)
{
    vgeom g = lw_geom(l, op->opnd[0]);
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
         * cvt from the f32 registers (lw_cast_source). */
        const lv *src = lw_cast_source(l, op->opnd[1], id);
        /* a pair never straddles a swizzle unit (16 bytes) or a chunk: its column is even */
        for (int j = 0; j < n; j += 2) {
            LLVMValueRef p = reg_ptr(l, &g, id, base, j);
            LLVMValueRef v = lw_pack_pair(l, dt, src, x, j);
            LLVMValueRef st = LLVMBuildStore(l->B, v, p);
            LLVMSetAlignment(st, (unsigned)(2 * g.es));
        }
        return true;
    }
    /* one element: the elected thread stores it (every thread holds it), and is the thread
     * whose arrival on a barrier next releases it (lower_mbar_arrive: lane 0 of warp 0) */
    reg_addr ra = reg_addr_begin(l, &g, id, base);
    LLVMBasicBlockRef one = one_element(l, op->opnd[1]) ? lw_if_begin(l, lw_elected(l)) : NULL;
    for (int j = 0; j < n; j++) {
        LLVMValueRef inb = NULL;
        for (int d = 0; d < lay->rank; d++)
            inb = lw_and_pred(l, inb, lw_in_tile(l, id, j, d));
        LLVMValueRef p = reg_addr_of(l, &ra, j); /* outside the branch: later registers' share it */
        LLVMBasicBlockRef m = inb ? lw_if_begin(l, inb) : NULL;
        store_elem(l, dt, p, x[j]);
        if (m)
            lw_if_end(l, m);
    }
    if (one)
        lw_if_end(l, one);
    return true;
}
