/*
 * lower_task.c -- warp-group tasks and register budgets (setmaxnreg), the replica index,
 * and the Hopper kernel-level parts lower.c calls while it makes the kernel function:
 * launch bounds and the TMA descriptor parameters (lw_hopper_kernel_attrs), and the entry
 * block's shared-memory and descriptor values (lw_hopper_entry).
 *
 * Tasks.  The kernel body runs on every thread up to the first task (allocations,
 * scalars; thread 0 initialises the mbarriers, then a fence and bar.sync 0).  Each task
 * is a branch on the warp index; inside it a replica index and a task-local warp index
 * replace the CTA's, layouts are those of the task's warp count (codegen/layout.c), the
 * scratch region is the replica's own, and the internal barriers of conversions and
 * reductions are the replica's named barrier (ids 1..7; the user's named barriers 0..7
 * are hardware ids 8..15).  A register budget becomes setmaxnreg (inc or dec from the
 * count every thread starts with, which launch bounds fix: 64K / threads).
 */
#include "lower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        lw_asm_void(l, "fence.mbarrier_init.release.cluster;", "~{memory}", NULL, 0);
        lw_barrier(l);
        lw_cluster_sync(l); /* ... and to the cluster's other CTAs, which arrive on them */
        l->barriers_ready = true;
    }
    int warps = t[ti].warps, first = t[ti].first_warp;
    LLVMValueRef wg = LLVMBuildLShr(l->B, l->tid, ci32(l, 5), "");
    LLVMValueRef rel = LLVMBuildSub(l->B, wg, ci32(l, first), "");
    LLVMValueRef in = LLVMBuildICmp(l->B, LLVMIntULT, rel, ci32(l, warps * t[ti].replicas), "");
    LLVMBasicBlockRef m = lw_if_begin(l, in);
    /* a prologue block for the task's per-thread values (coordinates), then its body */
    LLVMBasicBlockRef pro = LLVMGetInsertBlock(l->B);
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(l->C, l->fn, "task.body");
    if (t[ti].regs) {
        int e = entry_regs(l->k);
        char txt[64];
        snprintf(txt, sizeof txt, "setmaxnreg.%s.sync.aligned.u32 %d;", t[ti].regs > e ? "inc" : "dec", t[ti].regs);
        if (t[ti].regs != e)
            lw_asm_void(l, txt, "~{memory}", NULL, 0);
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
    lw_if_end(l, m);
    return true;
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
