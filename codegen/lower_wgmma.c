/*
 * lower_wgmma.c -- wgmma: its operands' descriptors, A in registers (packed pairs, kept
 * packed across loops where it only ever feeds wgmma: lw_find_packed), the one asm
 * statement that issues an op's steps (with its commit and wait where they follow it),
 * and wgmma_commit / wgmma_wait.
 *
 * wgmma is issued by the whole task (warp group g computes rows g*M/G ..); its
 * accumulator registers pass through wgmma_wait as tied asm operands, so LLVM never reads
 * them while in flight.  An A in registers is held in the A fragment's layout (the
 * accumulator layout of its shape, so an accumulator cast to f16/bf16 is one as it
 * stands) and packed in pairs into b32 registers that pass through the wgmma.fence as
 * tied operands (a_fragments).
 */
#include "lower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    for (int j = 0; j + 1 < n; j += 2) {
        out[j] = LLVMBuildBitCast(l->B, lw_cvt_pair(l, dt, src[j], src[j + 1]), l->t_f32, "");
        out[j + 1] = LLVMGetUndef(l->t_f32);
    }
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

/* ---------------------------------------------------------------- FP8 A in registers */

/* The m64nNk32 FP8 A fragment (PTX ISA, "Register Fragments", wgmma .m64nNk32; the same as
 * mma.m16n8k32's 8-bit A) gives thread (lane: group g = lane / 4, t = lane % 4) of each
 * warp four b32 registers of four consecutive-k bytes each: row g cols 4t .. 4t+3, row g+8
 * the same cols, then both rows at cols 16+4t .. 16+4t+3.  The tile in registers is in
 * the accumulator layout (cg_mma_a_layout), where the thread holds cols 2t, 2t+1 of each
 * 8-column chunk: other threads' bytes.  Per 16 columns (chunks 2H, 2H+1 of a k32 step)
 * the thread packs its eight bytes into X0 = chunk 2H's {row g pair, row g+8 pair} and X1 =
 * chunk 2H+1's; thread t needs chunk t/2's pairs of threads 2t%4 and 2t%4+1.  Two shuffles
 * within the quad bring them: in the first, thread t reads thread s1 = (t%2)*2 + t/2 and
 * in the second s2 = s1 ^ 1 (each a permutation of the quad), and thread s sends X(s%2)
 * in the first and X(1 - s%2) in the second, which is chunk t/2 for the one reader it
 * has.  A prmt then puts the row g pairs side by side, and the row g+8 pairs: the source
 * of the lower columns is x1 where t < 2, else x2.  4 shuffles and 4 prmt a k32 step. */
typedef struct fp8_quad {
    LLVMValueRef odd, s1, s2, sel_g, sel_g8; /* lane % 2 set; the shuffles' sources; prmt selectors */
} fp8_quad;

static fp8_quad fp8_quad_of(L *l)
{
    fp8_quad q;
    LLVMValueRef t = LLVMBuildAnd(l->B, l->lane, ci32(l, 3), "");
    LLVMValueRef lo = LLVMBuildAnd(l->B, t, ci32(l, 1), ""), hi = LLVMBuildLShr(l->B, t, ci32(l, 1), "");
    q.odd = LLVMBuildICmp(l->B, LLVMIntNE, lo, ci32(l, 0), "");
    q.s1 = LLVMBuildOr(l->B, LLVMBuildShl(l->B, lo, ci32(l, 1), ""), hi, "");
    q.s2 = LLVMBuildXor(l->B, q.s1, ci32(l, 1), "");
    LLVMValueRef up = LLVMBuildICmp(l->B, LLVMIntNE, hi, ci32(l, 0), ""); /* the lower cols come in x2 */
    q.sel_g = LLVMBuildSelect(l->B, up, ci32(l, 0x1054), ci32(l, 0x5410), "");
    q.sel_g8 = LLVMBuildSelect(l->B, up, ci32(l, 0x3276), ci32(l, 0x7632), "");
    return q;
}

/* Four f32 registers (already FP8 values, or the f32 a cast rounds) as one b32 of dt's
 * codes, the first in the low byte. */
static LLVMValueRef fp8_pack4(L *l, loom_dtype dt, const LLVMValueRef *r)
{
    char text[200];
    const char *f = dt == LOOM_E5M2 ? "e5m2x2" : "e4m3x2";
    snprintf(text, sizeof text,
             "{\n\t.reg .b16 lo, hi;\n\tcvt.rn.satfinite.%s.f32 lo, $2, $1;\n\t"
             "cvt.rn.satfinite.%s.f32 hi, $4, $3;\n\tmov.b32 $0, {lo, hi};\n\t}", f, f);
    LLVMValueRef args[4] = {r[0], r[1], r[2], r[3]};
    return lw_asm_call(l, l->t_i32, text, "=r,f,f,f,f", args, 4, true);
}

static LLVMValueRef quad_shfl(L *l, LLVMValueRef v, LLVMValueRef src)
{
    /* c = 0x1c1f: segments of 4 lanes, src the lane within the segment */
    LLVMValueRef args[4] = {ci32(l, -1), v, src, ci32(l, 0x1c1f)};
    return lw_call_intr(l, l->B, "llvm.nvvm.shfl.sync.idx.i32", NULL, 0, args, 4);
}

static LLVMValueRef prmt(L *l, LLVMValueRef a, LLVMValueRef b, LLVMValueRef sel)
{
    LLVMValueRef args[3] = {a, b, sel};
    return lw_asm_call(l, l->t_i32, "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r", args, 3, true);
}

/* The four registers of a k32 step from the tile's registers r[0 .. 15] (its four
 * 8-column chunks, accumulator order), into out[0 .. 3]. */
static void fp8_step(L *l, loom_dtype dt, const fp8_quad *q, const LLVMValueRef *r, LLVMValueRef *out)
{
    for (int H = 0; H < 2; H++) {
        LLVMValueRef x0 = fp8_pack4(l, dt, r + 8 * H), x1 = fp8_pack4(l, dt, r + 8 * H + 4);
        LLVMValueRef v1 = quad_shfl(l, LLVMBuildSelect(l->B, q->odd, x1, x0, ""), q->s1);
        LLVMValueRef v2 = quad_shfl(l, LLVMBuildSelect(l->B, q->odd, x0, x1, ""), q->s2);
        out[2 * H] = prmt(l, v1, v2, q->sel_g);
        out[2 * H + 1] = prmt(l, v1, v2, q->sel_g8);
    }
}

/* A in registers, in the A fragment's layout (codegen/layout.c, cg_mma_a_layout): per m64
 * block mb and k16 chunk c, the fragment's a0..a7 are the tile's registers mb * K'/2 + 8c
 * .. 8c + 7 (K' the padded K), packed in pairs into four b32 registers {a0a1, a2a3, a4a5,
 * a6a7}, low half first (from the f32 registers of a cast where the tile is one, by cvt).
 * FP8: per k32 chunk, four registers of four bytes (fp8_step).  Returns the registers of
 * block mb, chunk c at [(mb * chunks + c) * 4], or NULL. */
static LLVMValueRef *a_fragments(L *l, uint32_t o, ir_op *op, int64_t mblocks, int64_t K)
{
    int32_t id = cg_want(l->cg, o, 0);
    LLVMValueRef *x = lw_opnd_regs(l, o, 0);
    if (id < 0 || !x)
        return NULL;
    loom_dtype dt = vdt(l, op->opnd[0]);
    bool packed = l->packed && l->packed[op->opnd[0]];
    const lv *src = packed ? NULL : lw_cast_source(l, op->opnd[0], id);
    bool fp8 = ir_dtype_is_fp8(dt);
    int64_t half = (INT64_C(1) << cg_lay(l->cg, id)->lg[1]) / 2, chunks = K / (fp8 ? 32 : 16);
    LLVMValueRef *pk = lw_regs_alloc(l, (int)(mblocks * chunks * 4));
    if (!pk)
        return NULL;
    if (fp8) { /* k32 steps of 16 registers, rearranged across each quad (fp8_step) */
        fp8_quad q = fp8_quad_of(l);
        const LLVMValueRef *from = src ? src->r : x;
        for (int64_t mb = 0; mb < mblocks; mb++)
            for (int64_t c = 0; c < chunks; c++)
                fp8_step(l, dt, &q, from + mb * half + 16 * c, pk + (mb * chunks + c) * 4);
        return pk;
    }
    for (int64_t mb = 0; mb < mblocks; mb++)
        for (int64_t c = 0; c < chunks; c++)
            for (int q = 0; q < 4; q++)
            {
                int j = (int)(mb * half + 8 * c + 2 * q);
                pk[(mb * chunks + c) * 4 + q] =
                    packed ? LLVMBuildBitCast(l->B, x[j], l->t_i32, "") : lw_pack_pair(l, dt, src, x, j);
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

/* One wgmma op, as lower_wgmma issues it: its operands and shapes, and the operand
 * numbers of its asm statement (outputs, then A, B's low half, the scale-d input, the
 * fused arrive's lane and barrier, and the tied accumulators). */
typedef struct wg_plan {
    bool a_regs;       /* A a register tile, else a view */
    bool a_mn, b_mn;   /* the operand's M/N dim is its stored inner one */
    vgeom ga, gb;
    int64_t M, K, N, rows, mblocks; /* rows: a warp group's; mblocks: its m64 blocks */
    int64_t Np;        /* padded N: registers per m64 block = Np / 2 */
    const char *ty, *tyb; /* the input types of A and B */
    bool fp8;          /* FP8 operands: k32 steps, both K-major, no transpose bits */
    int kstep;         /* K of one instruction: 16, or 32 with FP8 */
    uint32_t w, fa;    /* the fused wait and the arrive fused after it (0: none) */
    int nr, ks;        /* registers of one m64 block, k steps */
    int nout;          /* the registers wgmma writes */
    int nain;          /* A's inputs: four registers a step, or a descriptor an m64 block */
    int bin, np;       /* the operand numbers of B's low half and of the scale-d input */
    bool zero;         /* the accumulator is zeros: the first step of each block skips it */
    int nfa;           /* the operand number of the fused arrive's lane */
} wg_plan;

/* The refusals (a documented one: docs/dsl.md, "What the code generator refuses": the
 * interpreter runs unswizzled operands, but wgmma's descriptors here describe swizzled
 * layouts only) and the plan of op o, but for zero and nfa, which wait for the
 * accumulator's registers. */
static bool wgmma_plan(L *l, uint32_t o, ir_op *op, const cg_layout *lay, wg_plan *p)
{
    cg_ctx *cg = l->cg;
    const ir_type *at = vty(l, op->opnd[0]), *bt = vty(l, op->opnd[1]);
    p->a_regs = at->kind == IR_T_TILE; /* else a view (rule_wgmma) */
    if (!p->a_regs && at->kind != IR_T_SMEM)
        return CG_BUG(cg, "wgmma at %s:%d: A is neither a view nor a register tile", op->src.file, op->src.line);
    if ((!p->a_regs && !at->swizzle) || !bt->swizzle)
        return cg_fail(cg, LOOM_ERR_UNSUPPORTED,
                       "%s:%d: wgmma operands in shared memory need a swizzle mode (LOOM_SWIZZLE_128, 64 or 32)",
                       op->src.file, op->src.line);
    p->M = at->shape.dim[0], p->K = at->shape.dim[1], p->N = bt->shape.dim[1];
    int64_t G = INT64_C(1) << (lay->nwarp - 2);
    p->rows = p->M / G, p->mblocks = p->rows / 64;
    p->Np = INT64_C(1) << lay->lg[1];
    p->ga = lw_geom(l, op->opnd[0]), p->gb = lw_geom(l, op->opnd[1]);
    p->a_mn = at->trans, p->b_mn = !bt->trans; /* B [K,N] stored as is: N contiguous */
    p->fp8 = ir_dtype_is_fp8((loom_dtype)at->dtype);
    p->ty = p->fp8 ? loom_dtype_name((loom_dtype)at->dtype) : at->dtype == LOOM_BF16 ? "bf16" : "f16";
    p->tyb = p->fp8 ? loom_dtype_name((loom_dtype)bt->dtype) : p->ty;
    p->kstep = p->fp8 ? 32 : 16;
    if (p->fp8 && (p->a_mn || p->b_mn)) /* rule_wgmma_fp8 refuses these */
        return CG_BUG(cg, "wgmma at %s:%d: an FP8 operand that is not K-major in shared memory", op->src.file,
                      op->src.line);
    p->w = wgmma_fused_wait(cg, o), p->fa = p->w ? arrive_after_wait(l->k, p->w) : 0;
    p->nr = (int)(p->N / 2), p->ks = (int)(p->K / p->kstep);
    p->nout = (int)p->mblocks * p->nr;
    p->nain = p->a_regs ? (int)p->mblocks * p->ks * 4 : (int)p->mblocks;
    p->bin = p->nout + p->nain;
    p->np = p->bin + 1;
    return true;
}

/* The text of the asm statement that issues op's steps (per m64 block, its K/kstep steps),
 * with its commit and wait where they are fused, and each step's descriptors: one add to
 * the low half of the operand's first (desc_lo) and a constant high half.  NULL on
 * failure, the error recorded. */
static char *wgmma_text(L *l, ir_op *op, const wg_plan *p)
{
    size_t tlen = (size_t)(p->mblocks * p->ks) * ((size_t)p->nr * 7 + 260) + 640;
    char *text = lw_alloc(l, tlen);
    if (!text)
        return NULL;
    size_t n = (size_t)snprintf(text, tlen, "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $%d, 0;\n\t", p->np);
    if (p->zero)
        n += (size_t)snprintf(text + n, tlen - n, ".reg .pred z;\n\tsetp.ne.b32 z, $%d, 0;\n\t", p->np + 1);
    /* each step's descriptors: the low half at its offset, the high half a constant */
    n += (size_t)snprintf(text + n, tlen - n, ".reg .b32 dl, dha, dhb;\n\t.reg .b64 da, db;\n\tmov.b32 dhb, %u;\n\t",
                          desc_hi(&p->gb));
    if (!p->a_regs)
        n += (size_t)snprintf(text + n, tlen - n, "mov.b32 dha, %u;\n\t", desc_hi(&p->ga));
    for (int64_t mb = 0; mb < p->mblocks; mb++)
        for (int s = 0; s < p->ks; s++) {
            int a0 = p->nout + (int)(mb * p->ks + s) * 4, r0 = (int)mb * p->nr; /* A's registers */
            const char *sd = p->zero && s == 0 ? "z" : "p";
            int64_t ks = (int64_t)s * p->kstep;
            int64_t da = op_off(&p->ga, p->a_mn, mb * 64, ks) - op_off(&p->ga, p->a_mn, mb * 64, 0);
            int64_t db = op_off(&p->gb, p->b_mn, 0, ks) - op_off(&p->gb, p->b_mn, 0, 0);
            if (da % 16 || db % 16 || da < 0 || db < 0)
                return CG_BUG(l->cg, "wgmma at %s:%d: a step's operand offset is not a multiple of 16 bytes",
                              op->src.file, op->src.line),
                       NULL;
            if (!p->a_regs)
                n += (size_t)snprintf(text + n, tlen - n, "add.s32 dl, $%d, %lld;\n\tmov.b64 da, {dl, dha};\n\t",
                                      p->nout + (int)mb, (long long)(da >> 4));
            n += (size_t)snprintf(text + n, tlen - n, "add.s32 dl, $%d, %lld;\n\tmov.b64 db, {dl, dhb};\n\t", p->bin,
                                  (long long)(db >> 4));
            n += (size_t)snprintf(text + n, tlen - n, "wgmma.mma_async.sync.aligned.m64n%lldk%d.f32.%s.%s {",
                                  (long long)p->N, p->kstep, p->ty, p->tyb);
            for (int i = 0; i < p->nr; i++)
                n += (size_t)snprintf(text + n, tlen - n, "%s$%d", i ? ", " : "", r0 + i);
            if (p->fp8 && p->a_regs) /* 8-bit types have no transpose operands */
                n += (size_t)snprintf(text + n, tlen - n, "}, {$%d, $%d, $%d, $%d}, db, %s, 1, 1;\n\t", a0, a0 + 1,
                                      a0 + 2, a0 + 3, sd);
            else if (p->fp8) /* both K-major */
                n += (size_t)snprintf(text + n, tlen - n, "}, da, db, %s, 1, 1;\n\t", sd);
            else if (p->a_regs) /* no transpose of A in registers */
                n += (size_t)snprintf(text + n, tlen - n, "}, {$%d, $%d, $%d, $%d}, db, %s, 1, 1, %d;\n\t", a0,
                                      a0 + 1, a0 + 2, a0 + 3, sd, p->b_mn ? 1 : 0);
            else
                n += (size_t)snprintf(text + n, tlen - n, "}, da, db, %s, 1, 1, %d, %d;\n\t", sd, p->a_mn ? 1 : 0,
                                      p->b_mn ? 1 : 0);
        }
    if (p->w) {
        n += (size_t)snprintf(text + n, tlen - n, "wgmma.commit_group.sync.aligned;\n\twgmma.wait_group.sync.aligned %d;\n\t",
                              (int)l->k->ops[p->w].iattr[0]);
        if (p->fa) /* lane 0 of each warp arrives right after the wait (lower_wgmma_wait) */
            n += (size_t)snprintf(text + n, tlen - n,
                                  "{\n\t.reg .pred q;\n\tsetp.eq.u32 q, $%d, 0;\n\t"
                                  "@q mbarrier.arrive.shared::cta.b64 _, [$%d];\n\t}\n\t",
                                  p->nfa, p->nfa + 1);
    }
    snprintf(text + n, tlen - n, "}");
    return text;
}

/* The statement's constraints: the accumulator outputs, A, B's low half, the scale-d
 * inputs, the fused arrive's, and the accumulators tied to the outputs. */
static char *wgmma_cons(L *l, const wg_plan *p)
{
    size_t clen = (size_t)p->nout * 9 + (size_t)(p->mblocks * p->ks) * 12 + 32;
    char *cons = lw_alloc(l, clen);
    if (!cons)
        return NULL;
    size_t q = 0;
    for (int i = 0; i < p->nout; i++)
        q += (size_t)snprintf(cons + q, clen - q, "%s=f", i ? "," : "");
    for (int i = 0; i < p->nain + 1; i++) /* A, then B's low half */
        q += (size_t)snprintf(cons + q, clen - q, ",r");
    q += (size_t)snprintf(cons + q, clen - q, p->zero ? ",r,r" : ",r");
    if (p->fa)
        q += (size_t)snprintf(cons + q, clen - q, ",r,r");
    for (int i = 0; i < p->nout; i++)
        q += (size_t)snprintf(cons + q, clen - q, ",%d", i);
    if (p->w)
        snprintf(cons + q, clen - q, ",~{memory}");
    return cons;
}

/* The statement's operands in *args (the count returned): the descriptors' low halves at
 * each operand's first step (A's per m64 block; afr, A in registers, instead), the scale-d
 * inputs, the fused arrive's lane and barrier, and the accumulators (out; undefined where
 * they are zeros).  g is this thread's warp group within the task. */
static int wgmma_args(L *l, ir_op *op, const wg_plan *p, LLVMValueRef g, LLVMValueRef *afr, const LLVMValueRef *out,
                      LLVMValueRef *args)
{
    LLVMValueRef a_base = smem_off(l, op->opnd[0]), b_base = smem_off(l, op->opnd[1]);
    const vgeom *ga = &p->ga;
    int na = 0;
    if (!p->a_regs)
        for (int64_t mb = 0; mb < p->mblocks; mb++) {
            /* a: rows g*rows + mb*64 .. */
            LLVMValueRef arow = LLVMBuildMul(l->B, g, ci32(l, p->rows), ""), aoff;
            if (!p->a_mn) /* rows are whole spans: the dynamic row moves by row * span */
                aoff = LLVMBuildAdd(l->B, a_base,
                                    LLVMBuildAdd(l->B, LLVMBuildMul(l->B, arow, ci32(l, ga->span), ""),
                                                 ci32(l, op_off(ga, false, mb * 64, 0)), ""), "");
            else { /* A stored [K][M]: the warp group's rows are columns: chunks of the span */
                LLVMValueRef col = LLVMBuildMul(l->B, arow, ci32(l, ga->es), "");
                LLVMValueRef chunk = LLVMBuildUDiv(l->B, col, ci32(l, ga->span), "");
                aoff = LLVMBuildAdd(l->B, a_base,
                                    LLVMBuildAdd(l->B, LLVMBuildMul(l->B, chunk, ci32(l, ga->rows * ga->span), ""),
                                                 ci32(l, op_off(ga, true, mb * 64, 0)), ""), "");
            }
            args[na++] = desc_lo(l, ga, aoff, p->a_mn);
        }
    else
        for (int64_t i = 0; i < p->mblocks * p->ks * 4; i++)
            args[na++] = afr[i];
    args[na++] = desc_lo(l, &p->gb, LLVMBuildAdd(l->B, b_base, ci32(l, op_off(&p->gb, p->b_mn, 0, 0)), ""), p->b_mn);
    args[na++] = ci32(l, 1);
    if (p->zero)
        args[na++] = ci32(l, 0);
    if (p->fa) {
        args[na++] = l->lane;
        args[na++] = lw_bar_addr(l, &l->k->ops[p->fa], 0);
    }
    for (int64_t mb = 0; mb < p->mblocks; mb++)
        for (int i = 0; i < p->nr; i++)
            args[na++] = p->zero ? LLVMGetUndef(l->t_f32) : out[mb * (p->Np / 2) + i];
    return na;
}

bool lower_wgmma(L *l, uint32_t o, ir_op *op)
{
    cg_ctx *cg = l->cg;
    int32_t id = cg->vlay[op->res[0]];
    const cg_layout *lay = cg_lay(cg, id);
    wg_plan p;
    if (!wgmma_plan(l, o, op, lay, &p))
        return false;
    LLVMValueRef *acc = lw_opnd_regs(l, o, 2);
    if (!acc)
        return false;
    int n = cg_layout_regs(lay);
    LLVMValueRef *out = lw_regs_alloc(l, n);
    if (!out)
        return false;
    memcpy(out, acc, (size_t)n * sizeof *out);
    /* warp group of this thread within the task: row offset g * rows */
    LLVMValueRef g = LLVMBuildLShr(l->B, l->warp, ci32(l, 2), "");
    LLVMValueRef *afr = NULL; /* A in registers: four b32 per m64 block and k step */
    if (p.a_regs) {
        if (!(afr = a_fragments(l, o, op, p.mblocks, p.K)) ||
            !fence_tied(l, afr, (int)(p.mblocks * p.ks * 4), out, n))
            return false;
    } else
        lw_asm_void(l, "wgmma.fence.sync.aligned;", "~{memory}", NULL, 0);
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
     * instructions (bench/RESULTS.md).
     *
     * An accumulator of zeros (a splat of 0: the first k step's) is not read: the first
     * step of each m64 block has scale-d off (predicate z) and the registers go in
     * undefined, as CUTLASS does it, instead of a mov of 0 per register. */
    p.zero = true;
    for (int64_t mb = 0; mb < p.mblocks; mb++)
        for (int i = 0; i < p.nr && p.zero; i++)
            p.zero = LLVMIsConstant(out[mb * (p.Np / 2) + i]) && LLVMIsNull(out[mb * (p.Np / 2) + i]);
    p.nfa = p.np + 1 + (p.zero ? 1 : 0);
    char *text = wgmma_text(l, op, &p), *cons = text ? wgmma_cons(l, &p) : NULL;
    int nargs = p.nfa + (p.fa ? 2 : 0) + p.nout;
    LLVMTypeRef *ft = lw_alloc(l, (size_t)p.nout * sizeof *ft);
    LLVMValueRef *args = lw_alloc(l, (size_t)nargs * sizeof *args);
    LLVMTypeRef *at = lw_alloc(l, (size_t)nargs * sizeof *at);
    if (!text || !cons || !ft || !args || !at)
        return false;
    int na = wgmma_args(l, op, &p, g, afr, out, args);
    for (int i = 0; i < p.nout; i++)
        ft[i] = l->t_f32;
    for (int i = 0; i < na; i++)
        at[i] = LLVMTypeOf(args[i]);
    LLVMTypeRef fty = LLVMFunctionType(asm_results(l, ft, p.nout), at, (unsigned)na, 0);
    LLVMValueRef ia = LLVMGetInlineAsm(fty, text, strlen(text), cons, strlen(cons), 1, 0, LLVMInlineAsmDialectATT, 0);
    LLVMValueRef call = LLVMBuildCall2(l->B, fty, ia, args, (unsigned)na, "");
    lw_add_fn_attr_call(l, call, "convergent", 0);
    for (int64_t mb = 0; mb < p.mblocks; mb++)
        for (int i = 0; i < p.nr; i++)
            out[mb * (p.Np / 2) + i] = LLVMBuildExtractValue(l->B, call, (unsigned)(mb * p.nr + i), "");
    /* the wait's result: the same registers (those past N, the padding of Np, pass
     * through unchanged: wgmma never writes them) */
    if (p.w) {
        LLVMValueRef *wr = lw_regs_alloc(l, n);
        if (!wr)
            return false;
        memcpy(wr, out, (size_t)n * sizeof *wr);
        if (!lw_set_result(l, l->k->ops[p.w].res[0], id, wr))
            return false;
    }
    return lw_set_result(l, op->res[0], id, out);
}

bool lower_wgmma_commit(L *l, uint32_t o, ir_op *op)
{
    (void)op;
    if (issued_by_wgmma(l->cg, o)) /* in the wgmma's statement */
        return true;
    lw_asm_void(l, "wgmma.commit_group.sync.aligned;", "~{memory}", NULL, 0);
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

bool lw_arrive_fused(const loom_kernel *k, uint32_t a)
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
        extra[1] = lw_bar_addr(l, &l->k->ops[fa], 0);
    }
    int ne = fa ? 2 : 0;
    if (total == 0) {
        lw_asm_void(l, t, fa ? "r,r,~{memory}" : "~{memory}", extra, ne);
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
