/*
 * hoist.c -- epilogue loads started before the tensor-core loop.
 *
 * The obvious epilogue reads its small operands after the mainloop: a bias row, a scale
 * column, an index.  Written there, the loads go out when the accumulator is complete and
 * every thread waits a global-memory latency with nothing else to do; at a shape of one
 * wave, where no other tile's mainloop hides it, that wait is all of the bias's cost.  This
 * pass starts such a load before the loop, so its latency passes under the loop's:
 *   - a load that holds few registers (at most HOIST_LOOP_REGS a thread for all the loads
 *     moved above one loop, one register an element below 32 bits: f16 and bf16 tiles are
 *     held as f32) is moved above the loop;
 *   - a larger one (a bias row of 256 is 64 registers a thread of a warp-group accumulator's
 *     slice: too many to hold across the loop beside the accumulator) stays where it is,
 *     and its box's lines are prefetched into L1 just before the loop (one line a thread,
 *     codegen/lower_mem.c, lw_prefetch_lines), at most PREFETCH_MAX_BYTES a loop: the load
 *     then finds them in L1.  Its last dim must have stride 1, its box at most 2 dims, and
 *     its lines no more than the threads that run it.
 *
 * A load L is started early when
 *   - L reads a tensor argument declared LOOM_IN (read-only for the whole launch: the rules
 *     refuse any store or atomic to it, and it is read with ld.global.nc), so nothing the
 *     loop does can change what L reads;
 *   - the loop is the nearest loop before L in L's block with a tensor-core op (wgmma, or a
 *     dot) in its body (not in a nested loop: nothing is held across a persistent loop);
 *   - each operand of L is defined before the loop, or by a pure scalar op between the loop
 *     and L whose own operands are (such ops move above the loop, in their order).
 * Nothing else moves.  The layouts are already chosen (this pass runs after the layout
 * pass; a value's layout does not depend on where it is).  The interpreter never sees
 * this: it runs the user's kernel in the user's order, and a read of read-only memory gives
 * the same values wherever it happens.  LOOM_DUMP_AFTER=hoist prints the IR after it (a
 * prefetch is not an op: the dump does not show it).
 */
#include "cg.h"

#include <stdlib.h>
#include <string.h>

#define HOIST_LOOP_REGS 8       /* registers a thread held across one loop by the loads moved above it */
#define PREFETCH_MAX_BYTES 8192 /* bytes of L1 lines prefetched before one loop */
#define HOIST_MAX_CHAIN 16 /* pure scalar ops moved with one load */

/* Does the region op o hold a tensor-core op in its body, or in an if of it (not in a
 * nested loop: a load moved above a persistent tile loop would be held across every tile
 * and hide nothing)? */
static bool holds_mma(const loom_kernel *k, uint32_t o)
{
    const ir_op *op = &k->ops[o];
    for (int r = 0; r < op->nreg; r++) {
        const ir_block *b = &k->blocks[op->reg[r]];
        for (uint32_t i = 0; i < b->nops; i++) {
            const ir_op *x = &k->ops[b->ops[i]];
            if (x->kind == IR_WGMMA || x->kind == IR_DOT)
                return true;
            if (x->nreg && x->kind != IR_FOR && holds_mma(k, b->ops[i]))
                return true;
        }
    }
    return false;
}

typedef struct hoist {
    const loom_kernel *k;
    const ir_block *b;
    uint32_t *pos;   /* per op of b: its index in b (UINT32_MAX: not in b) */
    uint32_t at;     /* the loop's index in b */
    uint32_t chain[HOIST_MAX_CHAIN];
    int nchain;
} hoist;

/* Is value v available before the loop, counting the pure scalar ops already put in the
 * chain?  Adds the ops it needs to the chain (operands first). */
static bool available(hoist *h, uint32_t v, int depth)
{
    const ir_value *val = &h->k->vals[v];
    if (val->kind != IR_V_RESULT)
        return true; /* an argument, or a block argument of b or of a block around it */
    uint32_t d = val->def;
    if (h->pos[d] == UINT32_MAX || h->pos[d] < h->at)
        return true; /* defined around b (dominates b), or in b before the loop */
    for (int i = 0; i < h->nchain; i++)
        if (h->chain[i] == d)
            return true;
    const ir_op *op = &h->k->ops[d];
    if (depth > 8 || h->nchain >= HOIST_MAX_CHAIN || op->nreg || !(ir_opdescs[op->kind].flags & IRF_PURE) ||
        op->nres != 1 || h->k->vals[op->res[0]].type.kind != IR_T_TILE || h->k->vals[op->res[0]].type.shape.rank)
        return false; /* only pure scalar ops move with a load */
    for (int i = 0; i < op->nopnd; i++)
        if (!available(h, op->opnd[i], depth + 1))
            return false;
    h->chain[h->nchain++] = d;
    return true;
}

/* Registers a thread holds of load o's result: one an element (a 16-bit element is
 * unpacked from its pair at the load), two for a 64-bit one. */
static int64_t regs_of(const cg_ctx *cg, const ir_op *op)
{
    uint32_t r = op->res[0];
    const ir_type *t = &cg->k->vals[r].type;
    int64_t n = !t->shape.rank || cg->vlay[r] < 0 ? 1 : cg_layout_regs(cg_lay(cg, cg->vlay[r]));
    return cg_elsize(t->dtype) > 4 ? 2 * n : n;
}



/* Move ops[0..n) (ops of block b, in b's order) to just before index at of b. */
static bool move_before(ir_block *b, const uint32_t *ops, int n, uint32_t at)
{
    uint32_t *nw = malloc(b->nops * sizeof *nw);
    if (!nw)
        return false;
    uint32_t m = 0;
    for (uint32_t i = 0; i < b->nops; i++) {
        if (i == at)
            for (int j = 0; j < n; j++)
                nw[m++] = ops[j];
        bool moved = false;
        for (int j = 0; j < n && !moved; j++)
            moved = b->ops[i] == ops[j];
        if (!moved)
            nw[m++] = b->ops[i];
    }
    memcpy(b->ops, nw, b->nops * sizeof *nw);
    free(nw);
    return true;
}

/* The L1 lines load op's box can touch, or 0 where it is not prefetched (codegen/lower_mem.c,
 * lw_prefetch_lines, touches them one a thread). */
static int64_t box_lines(const cg_ctx *cg, uint32_t o)
{
    const ir_op *op = &cg->k->ops[o];
    const ir_arg *arg = &cg->k->args[cg->k->vals[op->opnd[0]].def];
    int tr = arg->shape.rank, sr = op->shape.rank;
    if (op->kind != IR_LOAD || sr < 1 || sr > 2 || arg->strides[tr - 1] != 1)
        return 0;
    int64_t rows = sr == 2 ? op->shape.dim[0] : 1, cols = op->shape.dim[sr - 1];
    int64_t lines = rows * ((cols * cg_elsize(arg->dtype) + 127) / 128 + 1);
    return lines <= 32 * cg_op_warps(cg->k, o) ? lines : 0;
}

static bool prefetch_add(cg_ctx *cg, uint32_t loop, uint32_t load)
{
    if (cg->nprefetch % 16 == 0) {
        uint32_t(*p)[2] = realloc(cg->prefetch, (size_t)(cg->nprefetch + 16) * sizeof *p);
        if (!p)
            return false;
        cg->prefetch = p;
    }
    cg->prefetch[cg->nprefetch][0] = loop;
    cg->prefetch[cg->nprefetch++][1] = load;
    return true;
}

static bool hoist_block(cg_ctx *cg, uint32_t bi, uint32_t *pos)
{
    loom_kernel *k = cg->k;
    ir_block *b = &k->blocks[bi];
    for (uint32_t i = 0; i < b->nops; i++)
        pos[b->ops[i]] = i;
    uint32_t loop = UINT32_MAX; /* the index of the nearest tensor-core loop */
    int64_t held = 0, lines = 0; /* registers the loads moved above it hold; lines prefetched */
    bool ok = true;
    for (uint32_t i = 0; i < b->nops && ok; i++) {
        uint32_t o = b->ops[i];
        const ir_op *op = &k->ops[o];
        if (op->kind == IR_FOR && holds_mma(k, o)) {
            loop = i, held = lines = 0;
            continue;
        }
        if (loop == UINT32_MAX || (op->kind != IR_LOAD && op->kind != IR_LOAD_SCALAR) || op->nres != 1)
            continue;
        const ir_value *tv = &k->vals[op->opnd[0]];
        if (tv->kind != IR_V_ARG || k->args[tv->def].access != LOOM_IN || cg->remat[op->res[0]])
            continue;
        int64_t r = regs_of(cg, op), bl = 0;
        bool move = held + r <= HOIST_LOOP_REGS;
        if (!move && (!(bl = box_lines(cg, o)) || (lines + bl) * 128 > PREFETCH_MAX_BYTES))
            continue;
        hoist h = {.k = k, .b = b, .pos = pos, .at = loop};
        bool avail = true;
        for (int j = 1; j < op->nopnd && avail; j++)
            avail = available(&h, op->opnd[j], 0);
        if (!avail)
            continue;
        /* the chain in block order, then the load if it moves */
        uint32_t mv[HOIST_MAX_CHAIN + 1];
        int n = 0;
        for (uint32_t j = loop + 1; j < i; j++)
            for (int c = 0; c < h.nchain; c++)
                if (h.chain[c] == b->ops[j])
                    mv[n++] = b->ops[j];
        if (move)
            mv[n++] = o, held += r;
        else if (!(ok = prefetch_add(cg, b->ops[loop], o)))
            break;
        else
            lines += bl;
        if (n && !(ok = move_before(b, mv, n, loop)))
            break;
        for (uint32_t j = 0; j < b->nops; j++)
            pos[b->ops[j]] = j;
        loop += (uint32_t)n;
    }
    for (uint32_t i = 0; i < b->nops; i++)
        pos[b->ops[i]] = UINT32_MAX;
    return ok;
}

loom_status cg_hoist(cg_ctx *cg)
{
    loom_kernel *k = cg->k;
    uint32_t *pos = malloc((k->nops ? k->nops : 1) * sizeof *pos);
    if (!pos)
        return cg_fail(cg, LOOM_ERR_NOMEM, "out of memory"), cg->st;
    for (uint32_t o = 0; o < k->nops; o++)
        pos[o] = UINT32_MAX;
    for (uint32_t bi = 0; bi < k->nblocks; bi++)
        if (!hoist_block(cg, bi, pos)) {
            free(pos);
            return cg_fail(cg, LOOM_ERR_NOMEM, "out of memory"), cg->st;
        }
    free(pos);
    k->gen++;
    return LOOM_OK;
}
