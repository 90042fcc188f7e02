/*
 * smem.c -- the shared-memory plan.
 *
 * Four things need shared memory as scratch: a layout conversion (a value stored in
 * its layout and read back in another), a reduction whose reduced dim is split across
 * warps (each warp leaves its partial result there), a dot (A and B are staged so
 * every thread can read the rows and columns its accumulator elements need), and an
 * atomic_add run by more than one warp (the elected thread leaves the old value there
 * for the others).  The
 * lowering emits each of them as "bar.sync; write; bar.sync; read", so no two of them
 * are ever live at once: one scratch region sized to the largest need serves them all,
 * reused in program order.  This pass computes each op's need with the same queries the
 * lowering uses (cg_want / cg_needs_convert), records it per op (the lowering checks
 * that it never uses more), and reports the maximum as the kernel's dynamic shared
 * memory size.  Sizes are rounded up to 16 bytes.
 */
#include "cg.h"

#include <stdlib.h>

static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

int cg_op_warps(const loom_kernel *k, uint32_t o)
{
    uint32_t t = ir_task_of(k, o);
    return t ? (int)k->ops[t].iattr[0] : k->num_warps;
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
        }
        break;
    }
    case IR_ATOMIC_ADD: /* the old value's word, for the replica's threads to read */
        if (cg_op_warps(k, o) > 1 && need < 4)
            need = 4;
        break;
    case IR_DOT: {
        const loom_shape *a = &k->vals[op->opnd[0]].type.shape, *b = &k->vals[op->opnd[1]].type.shape;
        size_t pm = (size_t)1 << cg_lg(a->dim[0]), pk = (size_t)1 << cg_lg(a->dim[1]),
               pn = (size_t)1 << cg_lg(b->dim[1]);
        size_t bytes = up16(pm * pk * 4) + pk * pn * 4;
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
    if (!plan_allocs(cg))
        return cg->st;
    ir_task_info tasks[64];
    int nt = ir_tasks(cg->k, tasks, 64);
    if (nt == 0) {
        plan_block(cg, 1);
        cg->smem_bytes += cg->scratch_off;
    } else {
        /* the top level needs no scratch (scalars only); each task replica gets its own */
        size_t off = cg->scratch_off;
        for (int t = 0; t < nt && t < 64; t++) {
            cg->smem_bytes = 0;
            plan_block(cg, cg->k->ops[tasks[t].op].reg[0]);
            size_t need = align_up(cg->smem_bytes, 128);
            cg->task_scratch_off[t] = off;
            cg->task_scratch_size[t] = need;
            off += need * (size_t)tasks[t].replicas;
        }
        cg->smem_bytes = off;
    }
    if (cg->st == LOOM_OK && cg->smem_bytes > (size_t)227 * 1024)
        cg_fail(cg, LOOM_ERR_UNSUPPORTED,
                "kernel '%s' needs %zu bytes of shared memory (rings, barriers and scratch: more than 227 KiB); use smaller tiles or fewer stages",
                loom_kernel_name(cg->k), cg->smem_bytes);
    return cg->st;
}
