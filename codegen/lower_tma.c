/*
 * lower_tma.c -- TMA and clusters: the kernel's TMA descriptors (one per tensor, swizzle
 * and box: lw_hopper_collect_tma, before the function is made), TMA loads (multicast to
 * the cluster too), stores and their wait, the cluster's stores into every CTA's view
 * (smem_store_cluster), the CTA's rank in its cluster, and the cluster barrier.
 *
 * One thread per task replica issues what is issued once: TMA copies, one box per chunk
 * of the view (lower_smem.c says how a view is stored), and cluster stores (st.async
 * into each CTA's view, completing on its barrier).  A kernel launched without clusters
 * has no peers: no mapa, plain stores and loads.
 */
#include "lower.h"

#include <stdio.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- clusters */

/* Every thread of every CTA of the cluster arrives, then waits (nothing without clusters):
 * after the barriers are initialised (peers arrive on them and multicast into this CTA)
 * and before a CTA exits (peers may still arrive on its barriers). */
void lw_cluster_sync(L *l)
{
    if (l->k->cluster > 1)
        lw_asm_void(l, "barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;", "~{memory}", NULL, 0);
}

bool lower_cluster_rank(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    if (l->k->cluster <= 1)
        return lw_set_scalar(l, op->res[0], ci32(l, 0));
    return lw_set_scalar(l, op->res[0], lw_asm_call(l, l->t_i32, "mov.u32 $0, %cluster_ctarank;", "=r", NULL, 0, true));
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
    case LOOM_E4M3:
    case LOOM_E5M2: {
        LLVMValueRef b;
        lw_fp8_bytes(l, dt, &v, 1, &b);
        return LLVMBuildZExt(l->B, b, l->t_i32, "");
    }
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
        else if (es == 1) /* FP8: four bytes a word, the first lowest */
            for (int b = 0; b < 4; b++) {
                LLVMValueRef x = elem_bits(l, dt, el[4 * i + b]);
                w[i] = b ? LLVMBuildOr(l->B, w[i], LLVMBuildShl(l->B, x, ci32(l, 8 * b), ""), "") : x;
            }
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
    LLVMValueRef view = saddr(l, smem_off(l, op->opnd[0])), bar = lw_bar_addr(l, op, 2);
    LLVMBasicBlockRef m = lw_if_begin(l, lw_elected(l));
    if (l->k->cluster <= 1) { /* no cluster launch: no mapa; plain stores, released to the
                               * barrier's waiters by a fence before completing the bytes */
        for (int i = 0; i < nw; i++) {
            LLVMValueRef a[2] = {i ? LLVMBuildAdd(l->B, view, ci32(l, 4 * i), "") : view, w[i]};
            lw_asm_void(l, "st.shared.b32 [$0], $1;", "r,r,~{memory}", a, 2);
        }
        LLVMValueRef b[2] = {bar, ci32(l, 4 * nw)};
        lw_asm_void(l, "fence.acq_rel.cta;\n\tmbarrier.complete_tx.relaxed.cta.shared::cta.b64 [$0], $1;",
                    "r,r,~{memory}", b, 2);
        lw_if_end(l, m);
        return true;
    }
    for (int q = 0; q < l->k->cluster; q++)
        for (int i = 0; i < nw; i += per) {
            LLVMValueRef args[7] = {i ? LLVMBuildAdd(l->B, view, ci32(l, 4 * i), "") : view, bar, ci32(l, q)};
            for (int j = 0; j < per; j++)
                args[3 + j] = w[i + j];
            lw_asm_void(l, text, cons, args, 3 + per);
        }
    lw_if_end(l, m);
    return true;
}

/* ---------------------------------------------------------------- TMA */

/* The boxes of one TMA op: one per chunk of the view (lower_smem.c: how a view is stored). */
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
    LLVMValueRef bar = load ? lw_bar_addr(l, op, 2 + r) : NULL;
    LLVMBasicBlockRef m = lw_if_begin(l, lw_elected(l));
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
        lw_asm_void(l, text, cons, args, n);
    }
    if (!load)
        lw_asm_void(l, "cp.async.bulk.commit_group;", "~{memory}", NULL, 0);
    lw_if_end(l, m);
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
    LLVMBasicBlockRef m = lw_if_begin(l, lw_elected(l));
    lw_asm_void(l, t, "~{memory}", NULL, 0);
    lw_if_end(l, m);
    return true;
}
