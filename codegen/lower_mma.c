/*
 * lower_mma.c -- a dot on the tensor cores: mma.sync.aligned.m16n8k16.row.col.f32 with
 * f16 or bf16 operands, mma.sync.aligned.m16n8k32.row.col.f32 with e4m3 / e5m2 operands
 * (in any mix) where the target has it of its own (cg_fp8_mma_native: sm_89, sm_120),
 * for the dots the layout pass put there (cg->dot_mma: operands of those types, M a
 * multiple of 16, N of 8, K of 16 (f16/bf16) or 32 (FP8), sm_80 or later (FP8: sm_89);
 * every other dot runs on SIMT FMA, lower_dot in lower_math.c, and LOOM_EXPLAIN says
 * why).  On other targets (sm_90, sm_100) an FP8 dot is an f16 dot of the same values:
 * FP8 values are exact in f16, and the 16-bit path below stages them as f16, a loaded
 * pair's decode (cvt.rn.f16x2.{e4m3x2,e5m2x2}) as it is (f16_halves).
 *
 * The dot's result is in the mma accumulator's layout (cg_dot_mma_layout): each warp
 * holds some 16x8 tiles of it, four registers a tile (c0..c3), so the accumulators are
 * the result's registers and the acc operand, fetched in that layout, is their start.
 * A and B come in whatever layouts their producers gave them, so they are staged through
 * the op's scratch (cg_mma_stage_of: each row 16 bytes longer than its elements, so the 8
 * rows one ldmatrix reads fall in distinct banks), two or more elements a store where a
 * thread holds them side by side:
 *
 *   bar.sync; every thread stores its A and B elements; bar.sync;
 *   for each k step: each warp reads the A fragments of its tiles' rows (ldmatrix.x4), the
 *   B fragments of its tiles' columns (.x4 for two 8-column blocks side by side, else
 *   .x2), and issues one mma a tile.
 *
 * 16-bit operands are staged as they are in memory, row by row: A [M, K], B [K, N].  An
 * ldmatrix.x4 of A gives the m16n8k16 A fragment (16 rows by 16 k); B, [K, N] row-major,
 * is read with ldmatrix.trans.
 *
 * FP8 operands of m16n8k32 are staged as bytes, both K-major: A [M, K] and B transposed,
 * [N, K].  Its 8-bit fragments give a thread four consecutive k a register: A's a0..a3
 * are row g, k 4t .. 4t+3 of the first 16 k, rows g and g+8 and the two 16-k halves in
 * its four registers; B's b0, b1 column g, k 4t .. 4t+3 of each half (g =
 * lane / 4, t = lane % 4).  A non-transposed ldmatrix of an 8x8 matrix of b16 gives lane
 * l the two b16 of row l / 4 at columns 2t, 2t+1: bytes 4t .. 4t+3 of a 16-byte row.  So
 * with both operands K-major the same ldmatrix.x4 (A: rows 0-7 / 8-15 by k 0-15 / 16-31,
 * the addresses of the 16-bit case in bytes) and ldmatrix.x4 / .x2 without .trans (B^T:
 * n 0-7 by k 0-15 / 16-31, then n 8-15) read the fragments whole; no byte moves in
 * registers.  (ldmatrix has no byte transpose: B staged [K, N] would need four byte loads
 * a register.)  A thread stores its B elements at (n, k): where its registers run along
 * B's k (a loom_trans of a loaded [N, K] tile, as attention's K^T) they go out 4 to 16
 * bytes a store, else (a [K, N] tile loaded row by row) a byte at a time.
 *
 * The sum differs from the interpreter's: each mma adds 16 (32) products to the
 * accumulator in an order (and with internal roundings) the ISA does not specify, where
 * the interpreter runs fma over k in order.  The products are exact in f32 either way, so
 * for f16/bf16 the error model of an f32 sum (docs/checks.md: gamma_K sum |a b|, u = 2^-23)
 * covers both; FP8's adds keep fewer bits (docs/checks.md, "FP8": loom_fp8_mma_sum_error,
 * u = 2^-13, as FP8 wgmma); docs/dsl.md, "Dot", says so.
 */
#include "lower.h"

#include <stdio.h>
#include <string.h>

/* The shared-window address of the current op's scratch (i32), for inline PTX. */
static LLVMValueRef scratch_addr(L *l)
{
    return l->scratch_base ? LLVMBuildAdd(l->B, l->smem_base32, l->scratch_base, "") : l->smem_base32;
}

/* Is v the instruction `opcode` with the constant c as its second operand? */
static bool is_op_c(LLVMValueRef v, LLVMOpcode opcode, unsigned long long c)
{
    return v && LLVMIsAInstruction(v) && LLVMGetInstructionOpcode(v) == opcode &&
           LLVMIsAConstantInt(LLVMGetOperand(v, 1)) && LLVMConstIntGetZExtValue(LLVMGetOperand(v, 1)) == c;
}

/* The i16 that register x of a 16-bit type dt was decoded from (a global load's: f16
 * fpext(bitcast i16), bf16 bitcast(shl(zext i16, 16)); lower_mem.c, from_bits), or NULL. */
static LLVMValueRef bits_of(L *l, loom_dtype dt, LLVMValueRef x)
{
    LLVMValueRef h = NULL;
    if (dt == LOOM_F16 && LLVMIsAFPExtInst(x) && LLVMIsABitCastInst(LLVMGetOperand(x, 0)))
        h = LLVMGetOperand(LLVMGetOperand(x, 0), 0);
    if (dt == LOOM_BF16 && LLVMIsABitCastInst(x) && is_op_c(LLVMGetOperand(x, 0), LLVMShl, 16) &&
        LLVMIsAZExtInst(LLVMGetOperand(LLVMGetOperand(x, 0), 0)))
        h = LLVMGetOperand(LLVMGetOperand(LLVMGetOperand(x, 0), 0), 0);
    return h && LLVMTypeOf(h) == l->t_i16 ? h : NULL;
}

/* The loaded word registers x[j], x[j + 1] of a 16-bit type are the low and high halves
 * of (trunc(w), trunc(w >> 16)), or NULL: then their bits are stored as they came, not
 * rounded and packed again. */
static LLVMValueRef loaded_word(L *l, loom_dtype dt, const LLVMValueRef *x, int j)
{
    LLVMValueRef lo = bits_of(l, dt, x[j]), hi = bits_of(l, dt, x[j + 1]);
    if (!lo || !hi || !LLVMIsATruncInst(lo) || !LLVMIsATruncInst(hi))
        return NULL;
    LLVMValueRef w = LLVMGetOperand(lo, 0), sh = LLVMGetOperand(hi, 0);
    if (LLVMTypeOf(w) != l->t_i32 || !is_op_c(sh, LLVMLShr, 16) || LLVMGetOperand(sh, 0) != w)
        return NULL;
    return w;
}

/* The i32 w whose halves, as f16, f32 registers x[j], x[j + 1] widen (fpext(bitcast(trunc
 * w)) and of w >> 16: the two values of one FP8 pair's decode, cvt.rn.f16x2.{e4m3x2,
 * e5m2x2}, lower_math.c), or NULL. */
static LLVMValueRef f16_halves(L *l, const LLVMValueRef *x, int j)
{
    LLVMValueRef t[2];
    for (int i = 0; i < 2; i++) {
        LLVMValueRef h = LLVMIsAFPExtInst(x[j + i]) ? LLVMGetOperand(x[j + i], 0) : NULL;
        LLVMValueRef b = h && LLVMTypeOf(h) == l->t_f16 && LLVMIsABitCastInst(h) ? LLVMGetOperand(h, 0) : NULL;
        t[i] = b && LLVMIsATruncInst(b) ? LLVMGetOperand(b, 0) : NULL;
        if (!t[i])
            return NULL;
    }
    if (LLVMTypeOf(t[0]) != l->t_i32 || !is_op_c(t[1], LLVMLShr, 16) || LLVMGetOperand(t[1], 0) != t[0])
        return NULL;
    return t[0];
}

/* Registers j, j + 1 of tile x (of type dt, staged as st) as one b32 of two 16-bit
 * elements: a loaded word as it came, an FP8 pair's f16x2 decode as it is. */
static LLVMValueRef pair(L *l, loom_dtype dt, loom_dtype st, const lv *src, const LLVMValueRef *x, int j)
{
    LLVMValueRef w = ir_dtype_is_fp8(dt) ? f16_halves(l, x, j) : loaded_word(l, dt, x, j);
    return w ? w : lw_pack_pair(l, st, src, x, j);
}

/* Store tile v (f16/bf16, or FP8 as f16: exact; registers x in layout id) as 16-bit
 * elements: (r, c) at byte base + r * row + 2 c of the scratch.  Where register bits 0..
 * run along the columns, a thread's 2, 4 or 8 neighbours go in one store of packed
 * pairs. */
static void stage(L *l, uint32_t v, const LLVMValueRef *x, int32_t id, int64_t base, int64_t row)
{
    const cg_layout *lay = cg_lay(l->cg, id);
    loom_dtype dt = vdt(l, v), st = ir_dtype_is_fp8(dt) ? LOOM_F16 : dt;
    const lv *src = ir_dtype_is_fp8(dt) ? NULL : lw_cast_source(l, v, id); /* an FP8 cast's source is unrounded */
    int vb = 0;
    while (vb < 3 && vb < lay->nreg && lay->reg[vb].dim == 1 && lay->reg[vb].bit == vb)
        vb++;
    int w = 1 << vb;
    for (int j = 0; j < cg_layout_regs(lay); j += w) {
        LLVMValueRef r = LLVMBuildMul(l->B, lw_coord(l, id, j, 0), ci32(l, row), "");
        LLVMValueRef c = LLVMBuildShl(l->B, lw_coord(l, id, j, 1), ci32(l, 1), "");
        LLVMValueRef off = LLVMBuildAdd(l->B, LLVMBuildAdd(l->B, r, c, ""), ci32(l, base), "");
        if (w == 1) {
            LLVMValueRef two[2] = {x[j], x[j]};
            lw_smem_store(l, off, LLVMBuildTrunc(l->B, lw_pack_pair(l, st, NULL, two, 0), l->t_i16, ""));
            continue;
        }
        if (w == 2) {
            lw_smem_store(l, off, pair(l, dt, st, src, x, j));
            continue;
        }
        LLVMValueRef vec = LLVMGetUndef(LLVMVectorType(l->t_i32, (unsigned)(w / 2)));
        for (int p = 0; p < w / 2; p++)
            vec = LLVMBuildInsertElement(l->B, vec, pair(l, dt, st, src, x, j + 2 * p), ci32(l, p), "");
        lw_smem_store(l, off, vec);
    }
}

/* Store FP8 tile v (registers x in layout id, each the exact value of an e4m3 / e5m2) as
 * bytes: (r, c) at byte base + r * s0 + c * s1 of the scratch, where one of s0, s1 is 1
 * (that dim contiguous).  Where register bits 0.. run along the contiguous dim, a
 * thread's 2 to 16 neighbours go in one store; the bytes come two registers a cvt
 * (lw_fp8_bytes: a loaded register gives its byte back). */
static bool stage8(L *l, uint32_t v, const LLVMValueRef *x, int32_t id, int64_t base, int64_t s0, int64_t s1)
{
    const cg_layout *lay = cg_lay(l->cg, id);
    loom_dtype dt = vdt(l, v);
    int cd = s1 == 1 ? 1 : 0, n = cg_layout_regs(lay), vb = 0;
    while (vb < 4 && vb < lay->nreg && lay->reg[vb].dim == cd && lay->reg[vb].bit == vb)
        vb++;
    int w = 1 << vb;
    LLVMValueRef *eb = lw_regs_alloc(l, n);
    if (!eb)
        return false;
    lw_fp8_bytes(l, dt, x, n, eb);
    for (int j = 0; j < n; j += w) {
        LLVMValueRef r = LLVMBuildMul(l->B, lw_coord(l, id, j, 0), ci32(l, s0), "");
        LLVMValueRef c = LLVMBuildMul(l->B, lw_coord(l, id, j, 1), ci32(l, s1), "");
        LLVMValueRef off = LLVMBuildAdd(l->B, LLVMBuildAdd(l->B, r, c, ""), ci32(l, base), "");
        if (w == 1) {
            lw_smem_store(l, off, eb[j]);
            continue;
        }
        int nw = w < 4 ? 1 : w / 4; /* words of 4 bytes (w = 2: one i16) */
        LLVMTypeRef wt = w == 2 ? l->t_i16 : l->t_i32;
        LLVMValueRef vec = nw > 1 ? LLVMGetUndef(LLVMVectorType(l->t_i32, (unsigned)nw)) : NULL, word = NULL;
        for (int q = 0; q < nw; q++) {
            word = LLVMConstInt(wt, 0, 0);
            for (int e = 0; e < (w < 4 ? w : 4); e++) {
                LLVMValueRef by = LLVMBuildZExt(l->B, eb[j + 4 * q + e], wt, "");
                word = LLVMBuildOr(l->B, word, LLVMBuildShl(l->B, by, LLVMConstInt(wt, 8 * (unsigned)e, 0), ""), "");
            }
            if (vec)
                vec = LLVMBuildInsertElement(l->B, vec, word, ci32(l, q), "");
        }
        lw_smem_store(l, off, vec ? vec : word);
    }
    return true;
}

/* ldmatrix of n 8x8 matrices (.trans: transposed) at the lane's row address: out[0..n). */
static void ldsm(L *l, int n, bool trans, LLVMValueRef addr, LLVMValueRef *out)
{
    char text[128];
    snprintf(text, sizeof text, "ldmatrix.sync.aligned.m8n8.x%d%s.shared.b16 {%s}, [$%d];", n, trans ? ".trans" : "",
             n == 4 ? "$0, $1, $2, $3" : "$0, $1", n);
    LLVMTypeRef el[4] = {l->t_i32, l->t_i32, l->t_i32, l->t_i32};
    LLVMTypeRef st = LLVMStructTypeInContext(l->C, el, (unsigned)n, 0);
    LLVMValueRef r = lw_asm_call(l, st, text, n == 4 ? "=r,=r,=r,=r,r" : "=r,=r,r", &addr, 1, false);
    for (int i = 0; i < n; i++)
        out[i] = LLVMBuildExtractValue(l->B, r, (unsigned)i, "");
}

/* The operands' types as the mma takes them: A's and B's (the same for f16 / bf16; FP8
 * in any mix). */
typedef struct mma_types {
    loom_dtype a, b;
} mma_types;

/* One mma of a 16x8 tile: c[0..3] += a[0..3] (A fragment) times b[0..1] (B fragment):
 * k16 for f16 / bf16, k32 for FP8. */
static void mma(L *l, mma_types dt, const LLVMValueRef *a, const LLVMValueRef *b, LLVMValueRef *c)
{
    char text[192];
    snprintf(text, sizeof text,
             "mma.sync.aligned.m16n8k%d.row.col.f32.%s.%s.f32 {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, "
             "{$10, $11, $12, $13};",
             ir_dtype_is_fp8(dt.a) ? 32 : 16, loom_dtype_name(dt.a), loom_dtype_name(dt.b));
    LLVMValueRef args[10] = {a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], c[2], c[3]};
    LLVMTypeRef el[4] = {l->t_f32, l->t_f32, l->t_f32, l->t_f32};
    LLVMTypeRef st = LLVMStructTypeInContext(l->C, el, 4, 0);
    LLVMValueRef r = lw_asm_call(l, st, text, "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3", args, 10, true);
    for (int i = 0; i < 4; i++)
        c[i] = LLVMBuildExtractValue(l->B, r, (unsigned)i, "");
}

/* The warp's 16x8 tiles: tile t (registers 4t .. 4t + 3 of the result) is at rows um[mu[t]]
 * and columns un[nu[t]] beyond the warp's own (the register part of the coordinates). */
typedef struct tiles {
    int n, cm, cn;
    int *mu, *nu;
    int64_t *um, *un;
} tiles;

static int index_of(int64_t *list, int *count, int64_t x)
{
    int i = 0;
    while (i < *count && list[i] != x)
        i++;
    if (i == *count)
        list[(*count)++] = x;
    return i;
}

static bool tiles_of(L *l, const cg_layout *rl, tiles *t)
{
    t->n = cg_layout_regs(rl) / 4;
    t->cm = t->cn = 0;
    t->mu = lw_alloc(l, (size_t)t->n * 2 * sizeof(int));
    t->um = lw_alloc(l, (size_t)t->n * 2 * sizeof(int64_t));
    if (!t->mu || !t->um)
        return false;
    t->nu = t->mu + t->n;
    t->un = t->um + t->n;
    for (int i = 0; i < t->n; i++) {
        t->mu[i] = index_of(t->um, &t->cm, cg_reg_coord(rl, 4 * i, 0));
        t->nu[i] = index_of(t->un, &t->cn, cg_reg_coord(rl, 4 * i, 1));
    }
    return true;
}

/* k step ks (i32: of 16, FP8 32) from the lane's addresses aaddr, baddr (staged as g
 * says): the fragments of every tile's rows and columns, then its mma.  A k step is 32
 * bytes of an A row either way; of B 16 rows ([K, N]) or 32 bytes of an n row (FP8's
 * [N, K]). */
static bool k_step(L *l, mma_types dt, const tiles *t, LLVMValueRef ks, LLVMValueRef aaddr, LLVMValueRef baddr,
                   const cg_mma_stage *g, LLVMValueRef *acc)
{
    bool fp8 = ir_dtype_is_fp8(dt.a);
    aaddr = LLVMBuildAdd(l->B, aaddr, LLVMBuildMul(l->B, ks, ci32(l, 32), ""), "");
    baddr = LLVMBuildAdd(l->B, baddr, LLVMBuildMul(l->B, ks, ci32(l, fp8 ? 32 : 16 * g->brow), ""), "");
    LLVMValueRef *af = lw_regs_alloc(l, 4 * t->cm), *bf = lw_regs_alloc(l, 2 * t->cn);
    bool *done = lw_alloc(l, (size_t)t->cn);
    if (!af || !bf || !done)
        return false;
    for (int x = 0; x < t->cm; x++)
        ldsm(l, 4, false, LLVMBuildAdd(l->B, aaddr, ci32(l, t->um[x] * g->arow), ""), af + 4 * x);
    for (int y = 0; y < t->cn; y++) {
        if (done[y])
            continue;
        int y2 = 0; /* the block 8 columns on, read by the same ldmatrix (lanes 16..31) */
        while (y2 < t->cn && (done[y2] || t->un[y2] != t->un[y] + 8))
            y2++;
        LLVMValueRef addr = LLVMBuildAdd(l->B, baddr, ci32(l, fp8 ? t->un[y] * g->brow : t->un[y] * 2), ""), four[4];
        if (y2 < t->cn) {
            ldsm(l, 4, !fp8, addr, four);
            bf[2 * y] = four[0], bf[2 * y + 1] = four[1];
            bf[2 * y2] = four[2], bf[2 * y2 + 1] = four[3];
            done[y2] = true;
        } else {
            ldsm(l, 2, !fp8, addr, bf + 2 * y);
        }
        done[y] = true;
    }
    for (int i = 0; i < t->n; i++)
        mma(l, dt, af + 4 * t->mu[i], bf + 2 * t->nu[i], acc + 4 * i);
    return true;
}

/* The k steps in a loop, two a trip where their count is even: the accumulators are
 * the loop's phis, from acc (the start) to acc (the result). */
static bool k_loop(L *l, mma_types dt, const tiles *t, int steps, LLVMValueRef aaddr, LLVMValueRef baddr,
                   const cg_mma_stage *g, LLVMValueRef *acc)
{
    int n = 4 * t->n, unroll = steps % 2 ? 1 : 2;
    LLVMValueRef *phi = lw_regs_alloc(l, n), *start = lw_regs_alloc(l, n);
    if (!phi || !start)
        return false;
    memcpy(start, acc, (size_t)n * sizeof *acc);
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(l->B);
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(l->C, l->fn, "mma.k");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(l->C, l->fn, "mma.done");
    LLVMBuildBr(l->B, body);
    LLVMPositionBuilderAtEnd(l->B, body);
    LLVMValueRef kv = LLVMBuildPhi(l->B, l->t_i32, "ks");
    for (int j = 0; j < n; j++)
        acc[j] = phi[j] = LLVMBuildPhi(l->B, l->t_f32, "");
    for (int u = 0; u < unroll; u++)
        if (!k_step(l, dt, t, LLVMBuildAdd(l->B, kv, ci32(l, u), ""), aaddr, baddr, g, acc))
            return false;
    LLVMValueRef knext = LLVMBuildAdd(l->B, kv, ci32(l, unroll), "");
    lw_close_loop(l, pre, body, exit, kv, knext, steps, phi, start, acc, n); /* acc: the results at exit */
    return true;
}

/* The lane's ldmatrix row addresses at k = 0: A's rows warp row + lane % 8 + (lane & 8),
 * bytes 16 (lane / 16) (the four 8x8 b16 matrices of a 16x16 f16 or 16x32 FP8 fragment);
 * B [K, N]'s rows lane % 16, columns warp column + 8 (lane / 16) (two 16x8 fragments side
 * by side); FP8's B^T [N, K]: rows (n) warp column + lane % 8 + 8 (lane / 16), bytes
 * 16 ((lane / 8) % 2) (two 8-column blocks of both 16-k halves). */
static void lane_addrs(L *l, int32_t rid, const cg_mma_stage *g, bool fp8, LLVMValueRef *aaddr, LLVMValueRef *baddr)
{
    LLVMValueRef base = scratch_addr(l), lane = l->lane;
    LLVMValueRef wm = LLVMBuildAnd(l->B, lw_tcoord(l, rid, 0), ci32(l, ~7), "");
    LLVMValueRef wn = LLVMBuildAnd(l->B, lw_tcoord(l, rid, 1), ci32(l, ~7), "");
    LLVMValueRef half = LLVMBuildShl(l->B, LLVMBuildLShr(l->B, lane, ci32(l, 4), ""), ci32(l, 3), "");
    LLVMValueRef ar = LLVMBuildAdd(l->B, wm, LLVMBuildAnd(l->B, lane, ci32(l, 15), ""), "");
    LLVMValueRef a = LLVMBuildAdd(l->B, LLVMBuildMul(l->B, ar, ci32(l, g->arow), ""),
                                  LLVMBuildShl(l->B, half, ci32(l, 1), ""), "");
    *aaddr = LLVMBuildAdd(l->B, base, a, "");
    if (fp8) {
        LLVMValueRef n = LLVMBuildAdd(l->B, wn, LLVMBuildAnd(l->B, lane, ci32(l, 7), ""), "");
        n = LLVMBuildAdd(l->B, n, half, "");
        LLVMValueRef kh = LLVMBuildAnd(l->B, LLVMBuildLShr(l->B, lane, ci32(l, 3), ""), ci32(l, 1), "");
        LLVMValueRef kb = LLVMBuildShl(l->B, kh, ci32(l, 4), "");
        LLVMValueRef b = LLVMBuildAdd(l->B, LLVMBuildMul(l->B, n, ci32(l, g->brow), ""), kb, "");
        *baddr = LLVMBuildAdd(l->B, base, LLVMBuildAdd(l->B, b, ci32(l, g->boff), ""), "");
        return;
    }
    LLVMValueRef br = LLVMBuildAnd(l->B, lane, ci32(l, 15), "");
    LLVMValueRef bc = LLVMBuildAdd(l->B, wn, half, "");
    LLVMValueRef b = LLVMBuildAdd(l->B, LLVMBuildMul(l->B, br, ci32(l, g->brow), ""),
                                  LLVMBuildShl(l->B, bc, ci32(l, 1), ""), "");
    *baddr = LLVMBuildAdd(l->B, base, LLVMBuildAdd(l->B, b, ci32(l, g->boff), ""), "");
}

bool lw_dot_mma(L *l, uint32_t o, ir_op *op)
{
    cg_ctx *cg = l->cg;
    uint32_t a = op->opnd[0], b = op->opnd[1], rv = op->res[0];
    mma_types dt = {vdt(l, a), vdt(l, b)};
    bool fp8 = ir_dtype_is_fp8(dt.a) && cg_fp8_mma_native(cg->arch); /* else an f16 dot of the same values */
    if (ir_dtype_is_fp8(dt.a) && !fp8)
        dt = (mma_types){LOOM_F16, LOOM_F16};
    int64_t K = vty(l, a)->shape.dim[1];
    cg_mma_stage g = cg_mma_stage_of(&vty(l, a)->shape, &vty(l, b)->shape, fp8);
    LLVMValueRef *ar = lw_opnd_regs(l, o, 0), *br = lw_opnd_regs(l, o, 1), *cr = lw_opnd_regs(l, o, 2);
    if (!ar || !br || !cr || !lw_check_scratch(l, (size_t)g.bytes))
        return false;
    int32_t rid = cg->vlay[rv];
    tiles t;
    if (!tiles_of(l, cg_lay(cg, rid), &t))
        return false;
    lw_barrier(l);
    if (fp8) { /* A [M, K], B^T [N, K]: B's (k, n) at n * brow + k */
        if (!stage8(l, a, ar, cg->vlay[a], 0, g.arow, 1) || !stage8(l, b, br, cg->vlay[b], g.boff, 1, g.brow))
            return false;
    } else {
        stage(l, a, ar, cg->vlay[a], 0, g.arow);
        stage(l, b, br, cg->vlay[b], g.boff, g.brow);
    }
    lw_barrier(l);
    LLVMValueRef aaddr, baddr;
    lane_addrs(l, rid, &g, fp8, &aaddr, &baddr);
    int steps = (int)(K / (fp8 ? 32 : 16)), n = 4 * t.n;
    LLVMValueRef *acc = lw_regs_alloc(l, n);
    if (!acc)
        return false;
    memcpy(acc, cr, (size_t)n * sizeof *acc);
    if (steps <= 4) { /* straight: every step */
        for (int s = 0; s < steps; s++)
            if (!k_step(l, dt, &t, ci32(l, s), aaddr, baddr, &g, acc))
                return false;
    } else if (!k_loop(l, dt, &t, steps, aaddr, baddr, &g, acc)) {
        return false;
    }
    return lw_set_result(l, rv, rid, acc);
}
