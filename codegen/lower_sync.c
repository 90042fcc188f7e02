/*
 * lower_sync.c -- synchronisation: mbarriers (init with the hardware arrival count,
 * expect-bytes, arrive, arrive on every CTA of the cluster, wait), named barriers, the
 * async-proxy fence, flags in global memory (flag_add, flag_wait), atomic adds, and the
 * hang check that bounds the wait loops (codegen.h).
 *
 * One thread per task replica issues what is issued once (expect-bytes, a flag's add);
 * every warp's lane 0 arrives on an mbarrier, after bar.warp.sync (so the hardware
 * arrival count of a barrier array is, per arriving task, replicas * warps for arrive and
 * replicas for expect, where replicas are those arriving in one phase: all, or one where
 * they take turns; the DSL counts replicas and the compiler scales); every thread waits.
 * An arrive right after a wgmma_wait is emitted inside the wait's statement instead
 * (lower_wgmma.c, lw_arrive_fused).
 */
#include "lower.h"

#include <stdio.h>

/* ---------------------------------------------------------------- mbarriers */

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
    if (!lw_set_smem(l, op->res[0], off))
        return false;
    int64_t count = hw_arrivals(l, op->res[0], op->iattr[1]);
    LLVMBasicBlockRef m = lw_if_begin(l, lw_elected(l));
    for (int64_t i = 0; i < op->iattr[0]; i++) {
        LLVMValueRef a[2] = {saddr(l, LLVMBuildAdd(l->B, off, ci32(l, 8 * i), "")), ci32(l, count)};
        lw_asm_void(l, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}", a, 2);
    }
    lw_if_end(l, m);
    l->barriers_ready = false;
    return true;
}

LLVMValueRef lw_bar_addr(L *l, ir_op *op, int first)
{
    LLVMValueRef off = LLVMBuildAdd(l->B, smem_off(l, op->opnd[first]),
                                    LLVMBuildMul(l->B, scal(l, op->opnd[first + 1]), ci32(l, 8), ""), "");
    return saddr(l, off);
}

bool lower_mbar_expect(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    LLVMValueRef a[2] = {lw_bar_addr(l, op, 0), ci32(l, op->iattr[0])};
    LLVMBasicBlockRef m = lw_if_begin(l, lw_elected(l));
    lw_asm_void(l, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r,~{memory}", a, 2);
    lw_if_end(l, m);
    return true;
}

/* Lane 0 arrives for its warp: first the warp synchronizes (bar.warp.sync orders every
 * lane's shared-memory accesses before lane 0's arrival, whose release then hands them to
 * the waiter; without it the other lanes' loads and stores of a slot are unordered with
 * the arrival, which compute-sanitizer's racecheck reported).  Opens the lane-0 branch. */
static LLVMBasicBlockRef lane0_arrival_begin(L *l)
{
    lw_asm_void(l, "bar.warp.sync -1;", "~{memory}", NULL, 0);
    return lw_if_begin(l, LLVMBuildICmp(l->B, LLVMIntEQ, l->lane, ci32(l, 0), ""));
}

bool lower_mbar_arrive(L *l, uint32_t o, ir_op *op)
{
    if (lw_arrive_fused(l->k, o)) /* emitted by the wgmma_wait before it */
        return true;
    LLVMValueRef a = lw_bar_addr(l, op, 0);
    LLVMBasicBlockRef m = lane0_arrival_begin(l);
    lw_asm_void(l, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}", &a, 1);
    lw_if_end(l, m);
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
    LLVMValueRef a = lw_bar_addr(l, op, 0);
    LLVMBasicBlockRef m = lane0_arrival_begin(l);
    if (l->k->cluster <= 1) { /* no cluster launch: this CTA's barrier, no mapa */
        lw_asm_void(l, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}", &a, 1);
        lw_if_end(l, m);
        return true;
    }
    for (int q = 0; q < l->k->cluster; q++) {
        LLVMValueRef args[2] = {a, ci32(l, q)};
        lw_asm_void(l,
                 "{\n\t.reg .b32 ra;\n\tmapa.shared::cluster.u32 ra, $0, $1;\n\t"
                 "mbarrier.arrive.shared::cluster.b64 _, [ra];\n\t}",
                 "r,r,~{memory}", args, 2);
    }
    lw_if_end(l, m);
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
    lw_asm_void(l, text, "l,r,r,l,r,r,~{memory}", args, 6);
    lw_call_intr(l, l->B, "llvm.trap", NULL, 0, NULL, 0);
    LLVMBuildUnreachable(l->B);
    LLVMPositionBuilderAtEnd(l->B, m);
}

bool lower_mbar_wait(L *l, uint32_t o, ir_op *op)
{
    LLVMValueRef a[2] = {lw_bar_addr(l, op, 0), scal(l, op->opnd[2])};
    if (!l->cg->hang_ms) {
        lw_asm_void(l,
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
    lw_asm_void(l, t, "~{memory}", NULL, 0);
    return true;
}

bool lower_named_barrier_arrive(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    char t[64];
    snprintf(t, sizeof t, "bar.arrive %d, %d;", (int)op->iattr[0] + 8, (int)op->iattr[1]);
    lw_asm_void(l, t, "~{memory}", NULL, 0);
    return true;
}

bool lower_fence_async(L *l, uint32_t o, ir_op *op)
{
    (void)o;
    (void)op;
    lw_asm_void(l, "fence.proxy.async.shared::cta;", "~{memory}", NULL, 0);
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
    LLVMBasicBlockRef m = lw_if_begin(l, lw_elected(l));
    lw_asm_void(l, "red.release.gpu.add.s32 [$0], $1;", "l,r,~{memory}", a, 2);
    lw_if_end(l, m);
    return true;
}

/* One thread spins with acquire loads until the flag reaches the target and fences the
 * async proxy (so the TMA loads it issues next, from the same elected thread, see what
 * it acquired), then bar.sync makes that visible to the whole replica. */
bool lower_flag_wait(L *l, uint32_t o, ir_op *op)
{
    LLVMValueRef a[2] = {flag_addr(l, op), scal(l, op->opnd[op->nopnd - 1])};
    LLVMBasicBlockRef m = lw_if_begin(l, lw_elected(l));
    if (!l->cg->hang_ms)
        lw_asm_void(l,
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
    lw_if_end(l, m);
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
    LLVMBasicBlockRef m = lw_if_begin(l, lw_elected(l));
    LLVMValueRef old = lw_asm_call(l, l->t_i32, "atom.relaxed.gpu.add.s32 $0, [$1], $2;", "=r,l,r,~{memory}", a, 2,
                                   false);
    lw_smem_store(l, ci32(l, 0), old);
    lw_if_end(l, m);
    lw_barrier(l);
    return lw_set_scalar(l, op->res[0], lw_smem_load(l, ci32(l, 0), l->t_i32));
}
