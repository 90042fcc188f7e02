/*
 * verify.c -- the verifier: is a kernel well formed?
 *
 * It walks every block from the kernel body down and checks, for each op: its operand
 * handles are values of this kernel, visible from the op's block (defined there or in
 * an enclosing block); its type rule (dsl/rules.c) accepts it and gives the result
 * types the op carries; every region was ended and ends in a yield.  Errors the
 * builder recorded while the kernel was built are kept and reported with these.  The
 * verifier never stops at the first error: the user sees them all, each with the
 * file:line of the builder call.
 *
 * The answer is cached until the kernel changes (gen), under the kernel's lock, so one
 * finished kernel may be verified (and so compiled and launched) from several threads.
 */
#include "ir.h"

bool ir_visible(loom_kernel *k, uint32_t v, uint32_t b);

static void verify_block(loom_kernel *k, uint32_t b)
{
    ir_block *blk = ir_blk(k, b);
    for (uint32_t i = 0; i < blk->nops; i++) {
        uint32_t o = blk->ops[i];
        ir_op *op = ir_opp(k, o);
        const char *name = ir_opdescs[op->kind].name;
        if (op->kind == IR_INVALID || op->kind >= IR_OP_COUNT) {
            ir_error(k, op->src, NULL, "internal: op %u has no kind", o);
            continue;
        }
        bool operands_ok = true;
        for (int j = 0; j < op->nopnd; j++) {
            uint32_t v = op->opnd[j];
            if (!ir_valid(k, v)) {
                ir_error(k, op->src, name, "operand %d is not a value of this kernel", j);
                operands_ok = false;
            } else if (!ir_visible(k, v, b)) {
                ir_error(k, op->src, name, "operand %d (%%%u) is used outside its scope", j, v);
                operands_ok = false;
            }
        }
        if (op->kind == IR_YIELD && i + 1 != blk->nops)
            ir_error(k, op->src, name, "yield is not the last op of its region");
        if ((op->kind == IR_FOR || op->kind == IR_IF) && op->iattr[1])
            continue; /* a loop or if whose building failed: already reported */
        if (op->kind == IR_TASK && op->iattr[3])
            continue; /* a task whose building failed: already reported */
        if (operands_ok) {
            ir_type out[64];
            int nout = 0;
            if (ir_rule(k, o, out, &nout, 64) && op->kind != IR_IF) {
                bool match = nout == op->nres;
                for (int r = 0; match && r < nout; r++)
                    match = ir_type_eq(&out[r], &k->vals[op->res[r]].type);
                if (!match)
                    ir_error(k, op->src, name, "internal: result types do not match the type rule");
            }
        }
        for (int r = 0; r < op->nreg; r++) {
            uint32_t rb = op->reg[r];
            if (!rb)
                continue;
            ir_block *reg = ir_blk(k, rb);
            if (!reg->closed) {
                ir_error(k, op->src, name,
                         "this %s was begun here but never ended (missing loom_%s)", name,
                         op->kind == IR_FOR    ? "for_end"
                         : op->kind == IR_TASK ? "task_end"
                         : (r == 0 ? "else or loom_if_end" : "if_end"));
                continue;
            }
            verify_block(k, rb);
            reg = ir_blk(k, rb);
            if (reg->nops == 0 || ir_opp(k, reg->ops[reg->nops - 1])->kind != IR_YIELD)
                if (k->ndiags == 0)
                    ir_error(k, op->src, name, "region %d does not end in a yield", r);
        }
    }
}

loom_status loom_verify(loom_kernel *k)
{
    if (!k)
        return LOOM_ERR_INVALID;
    /* under the kernel's lock: threads that share a finished kernel (launching it, say)
     * may all verify it, and the first one's answer (and errors) is every one's */
    pthread_mutex_lock(&k->lock);
    if (k->verified_gen != k->gen + 1) {
        verify_block(k, 1);
        if (k->ndiags == 0 && !k->oom)
            ir_check_async(k);
        k->verified = k->ndiags || k->oom ? LOOM_ERR_VERIFY : LOOM_OK;
        k->verified_gen = k->gen + 1; /* after verify_block: its errors bumped gen */
    }
    loom_status st = k->verified;
    pthread_mutex_unlock(&k->lock);
    return st;
}
