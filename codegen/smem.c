/*
 * smem.c -- the shared-memory plan.
 *
 * Five things need shared memory as scratch: a layout conversion (a value stored in
 * its layout and read back in another), a reduction whose reduced dim is split across
 * warps (each warp leaves its partial result there), a dot (A and B are staged so
 * every thread can read the rows and columns its accumulator elements need, or, on the
 * tensor cores, the fragments ldmatrix reads), an
 * atomic_add run by more than one warp (the elected thread leaves the old value there
 * for the others), and an smem_store_cluster whose tile thread 0 does not hold whole
 * (every thread leaves its elements there for the one that writes).  The
 * lowering emits each of them as "bar.sync; write; bar.sync; read", so no two of them
 * are ever live at once: one scratch region sized to the largest need serves them all,
 * reused in program order.  This pass computes each op's need with the same queries the
 * lowering uses (cg_want / cg_needs_convert), records it per op (the lowering checks
 * that it never uses more), and reports the maximum as the kernel's dynamic shared
 * memory size.  Sizes are rounded up to 16 bytes.
 *
 * Every use it finds (each conversion with its operand and layouts, each other scratch
 * use, each allocation) is also recorded in cg->costs, in program order: what
 * LOOM_EXPLAIN and loom_kernel_explain report (codegen/explain.c) and what the refusal of
 * a kernel that needs more than the GPU has lists, each with the line that built it.
 */
#include "cg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

int cg_op_warps(const loom_kernel *k, uint32_t o)
{
    uint32_t t = ir_task_of(k, o);
    return t ? (int)k->ops[t].iattr[0] : k->num_warps;
}

bool cg_thread0_regs(const cg_layout *l, int32_t *reg_of, int64_t n)
{
    int nr = cg_layout_regs(l);
    for (int64_t e = 0; e < n; e++) {
        int64_t c[LOOM_MAX_RANK], x = e;
        for (int d = l->rank - 1; d >= 0; d--) {
            c[d] = x % l->shape[d];
            x /= l->shape[d];
        }
        reg_of[e] = -1;
        for (int j = 0; j < nr && reg_of[e] < 0; j++) {
            bool same = true;
            for (int d = 0; d < l->rank && same; d++)
                same = cg_reg_coord(l, j, d) == c[d];
            if (same)
                reg_of[e] = j;
        }
        if (reg_of[e] < 0)
            return false;
    }
    return true;
}

bool cg_cost_add(cg_ctx *cg, const cg_cost *c)
{
    if (cg->ncosts == cg->capcosts) {
        int nc = cg->capcosts ? cg->capcosts * 2 : 16;
        cg_cost *n = realloc(cg->costs, (size_t)nc * sizeof *n);
        if (!n)
            return cg_fail(cg, LOOM_ERR_NOMEM, "out of memory");
        cg->costs = n;
        cg->capcosts = nc;
    }
    cg->costs[cg->ncosts++] = *c;
    return true;
}

/* A use of scratch by op o (not a conversion): recorded for the report. */
static void scratch_use(cg_ctx *cg, uint32_t o, size_t bytes, const char *why)
{
    cg_cost_add(cg, &(cg_cost){.kind = LOOM_COST_SCRATCH, .op = o, .opnd = -1, .from = -1, .to = -1,
                               .bytes = up16(bytes), .barriers = 2, .copies = cg->plan_copies, .why = why});
}

/* A dot's staging of its operands, recorded with what it runs on: the tensor cores
 * (lower_mma.c: A and B in their own 16-bit type, rows padded) or SIMT FMA (lower_dot: as
 * f32, for every thread), and then why not the tensor cores.  Returns its bytes. */
static size_t dot_use(cg_ctx *cg, uint32_t o)
{
    loom_kernel *k = cg->k;
    const ir_op *op = &k->ops[o];
    const loom_shape *a = &k->vals[op->opnd[0]].type.shape, *b = &k->vals[op->opnd[1]].type.shape;
    cg_cost c = {.kind = LOOM_COST_SCRATCH, .op = o, .opnd = -1, .from = -1, .to = -1, .barriers = 2,
                 .copies = cg->plan_copies};
    if (cg->dot_mma[o]) {
        loom_dtype adt = (loom_dtype)k->vals[op->opnd[0]].type.dtype, bdt = (loom_dtype)k->vals[op->opnd[1]].type.dtype;
        bool fp8 = ir_dtype_is_fp8(adt), native = fp8 && cg_fp8_mma_native(cg->arch);
        c.bytes = up16((size_t)cg_mma_stage_of(a, b, native).bytes);
        if (native)
            snprintf(c.note, sizeof c.note,
                     "a dot on the tensor cores (mma.sync m16n8k32): A staged as %s, B as %s, transposed (K-major)",
                     loom_dtype_name(adt), loom_dtype_name(bdt));
        else if (fp8)
            snprintf(c.note, sizeof c.note,
                     "a dot on the tensor cores (mma.sync m16n8k16 in f16: %s has no FP8 mma.sync of its own): A and "
                     "B staged as f16, from %s and %s (exact)",
                     cg->arch, loom_dtype_name(adt), loom_dtype_name(bdt));
        else
            snprintf(c.note, sizeof c.note, "a dot on the tensor cores (mma.sync m16n8k16): A and B staged as %s",
                     loom_dtype_name(adt));
    } else {
        size_t pm = (size_t)1 << cg_lg(a->dim[0]), pk = (size_t)1 << cg_lg(a->dim[1]),
               pn = (size_t)1 << cg_lg(b->dim[1]);
        c.bytes = up16(up16(pm * pk * 4) + pk * pn * 4);
        int w = 0;
        while ((2 << w) <= cg_op_warps(k, o) && w < CG_MAXWARPBITS)
            w++;
        char buf[160];
        const char *why = cg_dot_mma_unfit(cg, op, w, buf, sizeof buf);
        snprintf(c.note, sizeof c.note, "a dot on SIMT FMA, not the tensor cores (%s): its operands staged as f32 "
                 "for every thread", why ? why : "?");
    }
    cg_cost_add(cg, &c);
    return c.bytes;
}

static size_t op_need(cg_ctx *cg, uint32_t o)
{
    loom_kernel *k = cg->k;
    ir_op *op = &k->ops[o];
    size_t need = 0;
    for (int i = 0; i < op->nopnd; i++) {
        uint32_t v = op->opnd[i];
        int32_t want = cg_want(cg, o, i);
        if (cg->st != LOOM_OK)
            return 0;
        if (cg_needs_convert(cg, v, want)) {
            size_t b = (size_t)cg_layout_padded_numel(cg_lay(cg, want)) *
                       cg_reg_bytes((loom_dtype)k->vals[v].type.dtype);
            if (b > need)
                need = b;
            /* lower.c's convert: bar.sync, store, bar.sync, load */
            cg_cost_add(cg, &(cg_cost){.kind = LOOM_COST_CONVERT, .op = o, .opnd = i, .from = cg->vlay[v],
                                       .to = want, .bytes = up16(b), .barriers = 2, .copies = cg->plan_copies,
                                       .why = "a layout conversion"});
        }
    }
    switch (op->kind) {
    case IR_REDUCE_SUM:
    case IR_REDUCE_MAX:
    case IR_REDUCE_MIN: {
        const cg_layout *src = cg_lay(cg, cg->vlay[op->opnd[0]]);
        int ax = (int)op->iattr[0], nb = 0;
        for (int i = 0; i < src->nwarp; i++)
            if (src->warp[i].dim == ax)
                nb++;
        if (nb) {
            size_t b = ((size_t)1 << nb) * (size_t)cg_layout_padded_numel(cg_lay(cg, cg->vlay[op->res[0]])) *
                       cg_reg_bytes((loom_dtype)k->vals[op->res[0]].type.dtype);
            if (b > need)
                need = b;
            scratch_use(cg, o, b, "a reduction across warps (each warp's partial result)");
        }
        break;
    }
    case IR_ATOMIC_ADD: /* the old value's word, for the replica's threads to read */
        if (cg_op_warps(k, o) > 1) {
            if (need < 4)
                need = 4;
            scratch_use(cg, o, 4, "an atomic add's old value, for the other warps");
        }
        break;
    case IR_SMEM_STORE_CLUSTER: { /* the tile, when thread 0 does not hold all of it */
        int32_t id = cg_want(cg, o, 1), reg_of[16];
        const cg_layout *lay = id >= 0 ? cg_lay(cg, id) : NULL;
        size_t b = lay ? (size_t)cg_layout_padded_numel(lay) * cg_reg_bytes((loom_dtype)k->vals[op->opnd[1]].type.dtype)
                       : 0;
        int64_t n = ir_shape_numel(&k->vals[op->opnd[1]].type.shape); /* at most 8 (rule_smem_store_cluster) */
        if (lay && n <= 16 && !cg_thread0_regs(lay, reg_of, n)) {
            if (b > need)
                need = b;
            scratch_use(cg, o, b, "a cluster store's tile, gathered for the thread that writes it");
        }
        break;
    }
    case IR_DOT: {
        size_t bytes = dot_use(cg, o);
        if (bytes > need)
            need = bytes;
        break;
    }
    default:
        break;
    }
    return up16(need);
}

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* Place the allocations (in program order) from offset 0. */
static bool plan_allocs(cg_ctx *cg)
{
    loom_kernel *k = cg->k;
    free(cg->val_off);
    cg->val_off = calloc(k->nvals, sizeof *cg->val_off);
    if (!cg->val_off)
        return cg_fail(cg, LOOM_ERR_NOMEM, "out of memory");
    size_t off = 0;
    const ir_block *body = &k->blocks[1];
    /* rings first (largest alignment), then barriers */
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < body->nops; i++) {
            const ir_op *op = &k->ops[body->ops[i]];
            if (op->kind != (pass ? IR_MBAR_ALLOC : IR_SMEM_ALLOC) || !op->nres)
                continue;
            const ir_type *t = &k->vals[op->res[0]].type;
            size_t bytes, al;
            if (pass) {
                bytes = (size_t)t->shape.dim[0] * 8;
                al = 8;
            } else {
                bytes = (size_t)ir_shape_numel(&t->shape) * loom_dtype_size((loom_dtype)t->dtype) * t->slots;
                al = t->swizzle ? 1024 : 128;
            }
            off = align_up(off, al);
            cg->val_off[op->res[0]] = off;
            off += bytes;
            cg_cost_add(cg, &(cg_cost){.kind = pass ? LOOM_COST_MBAR : LOOM_COST_SMEM, .op = body->ops[i], .opnd = -1,
                                       .from = -1, .to = -1, .bytes = bytes, .copies = 1,
                                       .why = pass ? "mbarriers" : t->slots > 1 ? "ring slots" : "a shared tile"});
        }
    cg->scratch_off = align_up(off, 128);
    return true;
}

static void plan_block(cg_ctx *cg, uint32_t b)
{
    ir_block *blk = &cg->k->blocks[b];
    for (uint32_t i = 0; i < blk->nops && cg->st == LOOM_OK; i++) {
        uint32_t o = blk->ops[i];
        size_t n = op_need(cg, o);
        cg->op_scratch[o] = n;
        if (n > cg->smem_bytes)
            cg->smem_bytes = n;
        ir_op *op = &cg->k->ops[o];
        for (int r = 0; r < op->nreg; r++)
            if (op->reg[r])
                plan_block(cg, op->reg[r]);
    }
}

loom_status cg_smem(cg_ctx *cg)
{
    free(cg->op_scratch);
    cg->op_scratch = calloc(cg->k->nops, sizeof *cg->op_scratch);
    if (!cg->op_scratch)
        return cg_fail(cg, LOOM_ERR_NOMEM, "out of memory"), cg->st;
    cg->smem_bytes = 0;
    cg->ncosts = 0;
    if (!plan_allocs(cg))
        return cg->st;
    ir_task_info tasks[64];
    int nt = ir_tasks(cg->k, tasks, 64);
    cg->plan_copies = 1;
    if (nt == 0) {
        plan_block(cg, 1);
        cg->smem_bytes += cg->scratch_off;
    } else {
        /* the top level needs no scratch (scalars only); each task replica gets its own */
        size_t off = cg->scratch_off;
        for (int t = 0; t < nt && t < 64; t++) {
            cg->smem_bytes = 0;
            cg->plan_copies = tasks[t].replicas;
            plan_block(cg, cg->k->ops[tasks[t].op].reg[0]);
            size_t need = align_up(cg->smem_bytes, 128);
            cg->task_scratch_off[t] = off;
            cg->task_scratch_size[t] = need;
            off += need * (size_t)tasks[t].replicas;
        }
        cg->smem_bytes = off;
    }
    if (cg->st == LOOM_OK && cg->smem_bytes > (size_t)227 * 1024) {
        /* say what holds it: each allocation, and each task's scratch with the uses that
         * set its size (the largest ones), each with its line */
        char *what = cg_explain_text(cg);
        cg_fail(cg, LOOM_ERR_UNSUPPORTED,
                "kernel '%s' needs %zu bytes of shared memory (more than 227 KiB); use smaller tiles or fewer stages%s%s",
                loom_kernel_name(cg->k), cg->smem_bytes, what && *what ? ". What uses it:\n" : "", what ? what : "");
        free(what);
    }
    if (cg->st == LOOM_OK)
        cg_arith_hints(cg);
    return cg->st;
}
