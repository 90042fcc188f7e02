/* lower_hopper.c -- included by lower.c (see there). */
#define HOPPER_TODO(opname)                                                                   \
    static bool lower_##opname(L *l, uint32_t o, ir_op *op)                                  \
    {                                                                                       \
        (void)o;                                                                            \
        return cg_fail(l->cg, LOOM_ERR_UNSUPPORTED, "%s:%d: op '%s' is not lowered yet",   \
                       op->src.file, op->src.line, ir_opdescs[op->kind].name);              \
    }
HOPPER_TODO(smem_alloc)
HOPPER_TODO(smem_slot)
HOPPER_TODO(smem_trans)
HOPPER_TODO(smem_load)
HOPPER_TODO(smem_store)
HOPPER_TODO(mbar_alloc)
HOPPER_TODO(mbar_expect)
HOPPER_TODO(mbar_arrive)
HOPPER_TODO(mbar_wait)
HOPPER_TODO(named_barrier)
HOPPER_TODO(fence_async)
HOPPER_TODO(tma_load)
HOPPER_TODO(tma_store)
HOPPER_TODO(tma_store_wait)
HOPPER_TODO(wgmma)
HOPPER_TODO(wgmma_commit)
HOPPER_TODO(wgmma_wait)
HOPPER_TODO(task)
HOPPER_TODO(task_replica)
