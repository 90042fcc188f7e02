/*
 * autows_code.c -- ws-code, the last pass of automatic warp specialization (pipe/autows.c
 * has the others and what they decide): the new kernel, built on the pipeline layer's
 * calls.  The same arguments and then the user's grid (three i32); one ring of the
 * channels' tiles; a producer task that computes the producer slice and, for each program
 * of the user's grid it takes (persistently) and each step of the loop, produces a slot
 * and TMA-loads the channels into it; a consumer task (one of 4 x groups warps, or two
 * replicas in ping-pong) that runs the kernel's other ops in their order, each program in
 * turn, with the dots as wgmma out of the slot's views and the store after the loop
 * staged for one TMA store where the passes chose it.  Every op keeps the line of the
 * user's op it comes from.
 */
#include "autows_passes.h"

#include <stdlib.h>

static uint32_t mapped(aw *w, uint32_t v)
{
    uint32_t m = w->map[v];
    if (!m && w->st == LOOM_OK) {
        uint32_t d = aw_def_of(w->src, v);
        aw_fail(w, d ? aw_op(w, d)->src : w->src->ws_at, "internal: a value the task needs was not built (%s)",
                d ? ir_opdescs[aw_op(w, d)->kind].name : "an argument");
    }
    return m;
}

static loom_val H(aw *w, uint32_t v) { return ir_handle(w->dst, mapped(w, v)); }
/* The rank of the tensor a store writes. */
static int k_rank(aw *w, const ir_op *st) { return w->src->vals[st->opnd[0]].type.shape.rank; }
static uint32_t U(aw *w, loom_val h) { return ir_unhandle(w->dst, h); }

/* The arguments, in the same order (the launch passes the same list). */
static void clone_args(aw *w, uint32_t *map)
{
    loom_kernel *k = w->src, *d = w->dst;
    for (int i = 0; i < k->nargs; i++) {
        const ir_arg *a = &k->args[i];
        loom_src at = {__FILE__, __LINE__};
        loom_val h;
        if (a->is_dim)
            h = loom_arg_dim_at(at, d, a->name, a->dim_max, a->dim_multiple);
        else if (!a->is_tensor)
            h = loom_arg_scalar_at(at, d, a->name, a->dtype);
        else {
            loom_shape s = a->shape;
            for (int j = 0; j < s.rank; j++)
                if (a->dyn[j])
                    s.dim[j] = LOOM_DIM(ir_handle(d, map[k->args[a->dyn[j] - 1].value]));
            h = loom_arg_tensor_at(at, d, a->name, a->dtype, s, a->strides, a->access);
        }
        map[a->value] = ir_unhandle(d, h);
    }
    static const char *const names[3] = {PIPE_AUTOWS_GRID_X, PIPE_AUTOWS_GRID_Y, PIPE_AUTOWS_GRID_Z};
    for (int i = 0; i < 3; i++)
        w->grid[i] = loom_arg_scalar_at(k->ws_at, d, names[i], LOOM_I32);
}

static void clone_block(aw *w, uint32_t b, bool producer);

static void clone_plain(aw *w, uint32_t o);

/* Which ops are elementwise: the op table's layout column (dsl/ops.h). */
enum { AW_LAY_NONE, AW_LAY_EW, AW_LAY_SHAPE, AW_LAY_REDUCE, AW_LAY_LOAD, AW_LAY_DOT, AW_LAY_MMA, AW_LAY_REGION };
static const uint8_t aw_lay[IR_OP_COUNT] = {
#define LOOM_OP(E, n, nop, nreg, rule, fl, sem, lay, pr, attrs) [IR_##E] = AW_LAY_##lay,
#include "ops.h"
#undef LOOM_OP
};

/* Columns [start, start + size) of the 2-D tile x (the stored value or a tile it is made
 * of), made from the same columns of what x is made of: an elementwise op of its operands'
 * parts, an unmasked load of the tile's part, the epilogue channel's tile read from its
 * part of the slot (so a residual comes in a part at a time and only that part's
 * registers are live beside the accumulator, in the accumulator part's layout), anything
 * else (the accumulator: a part of its registers) a loom_slice of x as built. */
static loom_val part_of(aw *w, uint32_t x, int64_t start, int64_t size, int depth)
{
    loom_kernel *d = w->dst;
    const ir_value *xv = &w->src->vals[x];
    if (xv->type.kind != IR_T_TILE || xv->type.shape.rank != 2)
        return H(w, x); /* a scalar operand */
    ir_op *op = xv->kind == IR_V_RESULT ? aw_op(w, xv->def) : NULL;
    loom_src at = op ? op->src : w->src->ws_at;
    if (op && depth < 16 && aw_lay[op->kind] == AW_LAY_EW && op->nopnd <= 3 && op->nres == 1) {
        uint32_t p[3], save[3], res = w->map[op->res[0]];
        for (int i = 0; i < op->nopnd; i++)
            p[i] = U(w, part_of(w, op->opnd[i], start, size, depth + 1));
        for (int i = 0; i < op->nopnd; i++) {
            save[i] = w->map[op->opnd[i]];
            w->map[op->opnd[i]] = p[i];
        }
        clone_plain(w, xv->def); /* the op on the parts (its type from their shapes) */
        loom_val r = H(w, op->res[0]);
        w->map[op->res[0]] = res;
        for (int i = op->nopnd - 1; i >= 0; i--)
            w->map[op->opnd[i]] = save[i];
        return r;
    }
    if (op && xv->def == w->epil && w->eview) { /* the epilogue's tile: its part of the slot's view */
        int64_t es = (int64_t)loom_dtype_size((loom_dtype)xv->type.dtype), span = w->epil_swz / es;
        if (span && start % span == 0 && size % span == 0)
            return loom_smem_load_at(at, d, loom_smem_part_at(at, d, w->eview, 1, start, size));
    }
    int rank = op && op->kind == IR_LOAD ? w->src->vals[op->opnd[0]].type.shape.rank : 0;
    if (op && op->kind == IR_LOAD && xv->def != w->epil && op->nopnd == 1 + rank) {
        loom_val offs[LOOM_MAX_RANK];
        for (int i = 1; i < op->nopnd; i++)
            offs[i - 1] = H(w, op->opnd[i]);
        offs[rank - 1] = loom_add_at(at, d, offs[rank - 1], loom_const_i_at(at, d, LOOM_I32, start));
        return loom_load_at(at, d, H(w, op->opnd[0]), offs, LOOM_SHAPE2(xv->type.shape.dim[0], size), LOOM_NONE,
                            op->fattr);
    }
    return loom_slice_at(at, d, H(w, x), 1, start, size);
}

/* Part j of the staged store's tile (loom_epilogue_store_parts' callback). */
static loom_val stored_part(void *ctx, loom_kernel *k, int j)
{
    aw *w = ctx;
    (void)k;
    int64_t cols = w->src->vals[w->part_val].type.shape.dim[1] / w->parts;
    return part_of(w, w->part_val, j * cols, cols, 0);
}

/* Does op a come before op b in the kernel's top block? */
static bool before_in_top(aw *w, uint32_t a, uint32_t b)
{
    const ir_block *top = &w->src->blocks[1];
    for (uint32_t i = 0; i < top->nops; i++)
        if (top->ops[i] == a || top->ops[i] == b)
            return top->ops[i] == a && a != b;
    return false;
}

/* A copy of plain op o in the innermost open block of dst. */
static void clone_plain(aw *w, uint32_t o)
{
    loom_kernel *d = w->dst;
    ir_op *op = aw_op(w, o);
    if (op->kind == IR_PROGRAM_ID || op->kind == IR_NUM_PROGRAMS) { /* the program of the user's grid */
        int axis = (int)op->iattr[0];
        w->map[op->res[0]] = U(w, op->kind == IR_PROGRAM_ID ? w->vpid[axis] : w->grid[axis]);
        return;
    }
    if (o == w->epil) { /* the epilogue's tile, from its slot (given back once read: with parts, after the last) */
        loom_val slot = loom_ring_consume_at(op->src, d, &w->ering, w->pi);
        loom_val view = loom_ring_view_at(op->src, d, &w->ering, slot, 0, LOOM_NONE);
        loom_val v = loom_smem_load_at(op->src, d, view);
        if (w->parts > 1 && before_in_top(w, o, w->staged)) /* the store reads it a part at a time */
            w->eslot = slot, w->eview = view;
        else
            loom_ring_release_at(op->src, d, &w->ering, slot);
        w->map[op->res[0]] = U(w, v);
        return;
    }
    if (o == w->staged && w->coal) { /* masked: through shared memory and back, stored by rows */
        int r = k_rank(w, op);
        loom_val offs[LOOM_MAX_RANK], v = H(w, op->opnd[1 + r]), mask = H(w, op->opnd[2 + r]);
        for (int i = 0; i < r; i++)
            offs[i] = H(w, op->opnd[1 + i]);
        loom_region_op h = LOOM_NO_REGION;
        loom_val slot = LOOM_NONE, view;
        if (w->borrow) { /* (no k step, no slot: from registers; no value leaves the if, whose two
                          * layouts would meet in a conversion) */
            if (!w->runs)
                h = loom_if_begin_at(op->src, d, w->held, 0);
            slot = loom_ring_slot_at(op->src, d, w->held_use, w->ring.slots);
            view = loom_ring_view_at(op->src, d, &w->ring, slot, w->borrow - 1, LOOM_NONE);
        } else
            view = loom_smem_slot_at(op->src, d, w->epi.stage, loom_const_i_at(op->src, d, LOOM_I32, 0));
        loom_smem_store_at(op->src, d, view, v);
        loom_val back = loom_smem_load_at(op->src, d, view);
        if (w->borrow) { /* the slot to the producer once read (its next TMA write after these
                          * accesses), before the stores to global memory */
            loom_fence_async_at(op->src, d);
            loom_ring_release_at(op->src, d, &w->ring, slot);
        }
        loom_store_at(op->src, d, H(w, op->opnd[0]), offs, back, mask);
        if (w->borrow && !w->runs) {
            loom_else_at(op->src, d, h, 0, NULL);
            loom_store_at(op->src, d, H(w, op->opnd[0]), offs, v, mask);
            loom_if_end_at(op->src, d, h, 0, NULL);
        }
        return;
    }
    if (o == w->staged && w->borrow) { /* through the held slot, else (no k step) from registers */
        loom_val offs[LOOM_MAX_RANK], v = H(w, op->opnd[op->nopnd - 1]);
        for (int i = 1; i + 1 < op->nopnd; i++)
            offs[i - 1] = H(w, op->opnd[i]);
        loom_region_op h = w->runs ? LOOM_NO_REGION : loom_if_begin_at(op->src, d, w->held, 0);
        loom_val slot = loom_ring_slot_at(op->src, d, w->held_use, w->ring.slots);
        loom_val view = loom_ring_view_at(op->src, d, &w->ring, slot, w->borrow - 1, LOOM_NONE);
        loom_epilogue_store_borrowed_at(op->src, d, H(w, op->opnd[0]), offs, v, view, w->bsync, LOOM_NONE);
        if (!w->runs) {
            loom_else_at(op->src, d, h, 0, NULL);
            loom_store_at(op->src, d, H(w, op->opnd[0]), offs, v, LOOM_NONE);
            loom_if_end_at(op->src, d, h, 0, NULL);
        }
        if (w->defer) /* back during the next program's first steps, once its store has read it */
            w->pend_next = loom_select_at(op->src, d, w->held, w->held_use, loom_const_i_at(op->src, d, LOOM_I32, -1));
        else
            loom_epilogue_return_slot_at(op->src, d, &w->ring, w->held, w->held_use);
        return;
    }
    if (o == w->staged) {
        loom_val offs[LOOM_MAX_RANK];
        for (int i = 1; i + 1 < op->nopnd; i++)
            offs[i - 1] = H(w, op->opnd[i]);
        if (w->parts > 1) {
            w->part_val = op->opnd[op->nopnd - 1];
            loom_epilogue_store_parts_at(op->src, d, &w->epi, offs, op->nopnd - 2, w->parts, stored_part, w);
            if (w->eslot) /* every part of the epilogue's tile read */
                loom_ring_release_at(op->src, d, &w->ering, w->eslot);
            w->eslot = w->eview = LOOM_NONE;
        }
        else
            loom_epilogue_store_at(op->src, d, &w->epi, offs, H(w, op->opnd[op->nopnd - 1]), w->rep, LOOM_NONE,
                                   LOOM_NONE);
        return;
    }
    uint32_t opnd[64];
    for (int i = 0; i < op->nopnd; i++)
        if (!(opnd[i] = mapped(w, op->opnd[i])))
            return;
    uint32_t n = ir_op_new(d, op->src, (ir_opkind)op->kind, opnd, op->nopnd);
    if (!n) {
        w->st = LOOM_ERR_NOMEM;
        return;
    }
    ir_op *no = &d->ops[n];
    memcpy(no->iattr, op->iattr, sizeof no->iattr);
    no->fattr = op->fattr;
    no->shape = op->shape;
    ir_type out[4];
    int nout = 0;
    if (!ir_rule(d, n, out, &nout, 4) || nout != op->nres) {
        aw_fail(w, op->src, "internal: the copy of this %s does not type (%s)", ir_opdescs[op->kind].name,
                loom_kernel_errors(d));
        return;
    }
    for (int r = 0; r < nout; r++) {
        uint32_t v = ir_op_add_result(d, n, out[r]);
        w->map[op->res[r]] = v;
        if (w->src->vals[op->res[r]].name)
            d->vals[v].name = ir_arena_strdup(&d->arena, w->src->vals[op->res[r]].name);
    }
}

/* A copy of a for or if (its blocks copied in turn). */
static void clone_region(aw *w, uint32_t o, bool producer)
{
    loom_kernel *d = w->dst;
    ir_op *op = aw_op(w, o);
    if (op->kind == IR_FOR) {
        loom_val init[64];
        for (int i = 3; i < op->nopnd; i++)
            init[i - 3] = H(w, op->opnd[i]);
        loom_region_op l = loom_for_begin_at(op->src, d, H(w, op->opnd[0]), H(w, op->opnd[1]), H(w, op->opnd[2]),
                                             op->nopnd - 3, init);
        ir_block *b = &w->src->blocks[op->reg[0]];
        w->map[b->args[0]] = U(w, loom_for_iv(d, l));
        for (uint32_t i = 1; i < b->nargs; i++)
            w->map[b->args[i]] = U(w, loom_for_arg(d, l, (int)i - 1));
        clone_block(w, op->reg[0], producer);
        ir_op *y = aw_op(w, b->ops[b->nops - 1]);
        loom_val ys[64];
        for (int i = 0; i < y->nopnd; i++)
            ys[i] = H(w, y->opnd[i]);
        loom_for_end_at(y->src, d, l, y->nopnd, ys);
        for (int r = 0; r < op->nres; r++)
            w->map[op->res[r]] = U(w, loom_for_result(d, l, r));
        return;
    }
    /* if */
    loom_region_op c = loom_if_begin_at(op->src, d, H(w, op->opnd[0]), op->nres);
    for (int br = 0; br < 2; br++) {
        ir_block *b = &w->src->blocks[op->reg[br]];
        clone_block(w, op->reg[br], producer);
        ir_op *y = aw_op(w, b->ops[b->nops - 1]);
        loom_val ys[64];
        for (int i = 0; i < y->nopnd; i++)
            ys[i] = H(w, y->opnd[i]);
        if (br == 0)
            loom_else_at(y->src, d, c, y->nopnd, ys);
        else
            loom_if_end_at(y->src, d, c, y->nopnd, ys);
    }
    for (int r = 0; r < op->nres; r++)
        w->map[op->res[r]] = U(w, loom_if_result(d, c, r));
}

static void clone_op(aw *w, uint32_t o, bool producer)
{
    if (aw_op(w, o)->nreg)
        clone_region(w, o, producer);
    else
        clone_plain(w, o);
}

/* The ops of block b but its yield (the producer: only its slice). */
static void clone_block(aw *w, uint32_t b, bool producer)
{
    ir_block *blk = &w->src->blocks[b];
    for (uint32_t i = 0; i + 1 < blk->nops && w->st == LOOM_OK; i++) {
        uint32_t o = blk->ops[i];
        if ((producer && !w->prod[o]) || w->skip[o])
            continue;
        clone_op(w, o, producer);
    }
}

#define CI(v) loom_const_i_at(at, d, LOOM_I32, (v))

/* defer: where `when` (an i1, or LOOM_NONE: always) holds and a slot is pending (use
 * pend >= 0), wait until the store that holds it has read it, then give it back. */
static void give_back_pending(aw *w, loom_src at, loom_val pend, loom_val when)
{
    loom_kernel *d = w->dst;
    loom_val held = loom_cmp_at(at, d, LOOM_GE, pend, CI(0));
    loom_epilogue_return_slot_at(at, d, &w->ring, when ? loom_and_at(at, d, when, held) : held, pend);
}

/* A task's loop over the programs of the user's grid: this CTA's first, then every
 * num_programs-th, each decoded into vpid (x fastest).  It carries the ring's use count
 * (*it: the uses before the program). */
static loom_region_op programs_begin(aw *w, loom_src at, loom_val *it, bool consumers)
{
    loom_kernel *d = w->dst;
    loom_val first = loom_program_id_at(at, d, 0), step = loom_num_programs_at(at, d, 0), it0 = CI(0);
    if (w->rep) { /* ping-pong: replica r takes the r-th of each two; the other's uses come between */
        first = loom_add_at(at, d, first, loom_mul_at(at, d, w->rep, step));
        step = loom_mul_at(at, d, step, CI(2));
        it0 = loom_mul_at(at, d, w->rep, w->trips);
    }
    loom_val total = loom_mul_at(at, d, loom_mul_at(at, d, w->grid[0], w->grid[1]), w->grid[2]);
    /* the ring's uses; the outer ring's (the programs so far); the consumers' held slot */
    bool per_program = w->outer || w->epil, pend = consumers && w->defer;
    loom_val init[3] = {it0, CI(0), CI(-1)};
    if (!per_program)
        init[1] = init[2];
    loom_region_op l = loom_for_begin_at(at, d, first, total, step, 1 + per_program + pend, init);
    w->pi = per_program ? loom_for_arg(d, l, 1) : LOOM_NONE;
    w->pend = pend ? loom_for_arg(d, l, 1 + per_program) : LOOM_NONE;
    loom_val t = loom_for_iv(d, l), r = loom_div_at(at, d, t, w->grid[0]);
    w->vpid[0] = loom_rem_at(at, d, t, w->grid[0]);
    w->vpid[1] = loom_rem_at(at, d, r, w->grid[1]);
    w->vpid[2] = loom_div_at(at, d, r, w->grid[1]);
    *it = loom_for_arg(d, l, 0);
    return l;
}

/* The end of a task's loop over programs: the ring's uses after the program (and one
 * more use of the outer ring). */
static void programs_end(aw *w, loom_src at, loom_region_op pl, loom_val it_end, bool consumers)
{
    loom_kernel *d = w->dst;
    bool per_program = w->outer || w->epil, pend = consumers && w->defer;
    loom_val y[3] = {it_end, per_program ? loom_add_at(at, d, w->pi, CI(1)) : LOOM_NONE, w->pend_next};
    if (!per_program)
        y[1] = y[2];
    loom_for_end_at(at, d, pl, 1 + per_program + pend, y);
    if (pend) /* the last program's held slot: its store has read it before the kernel ends */
        give_back_pending(w, at, loom_for_result(d, pl, 1 + per_program), LOOM_NONE);
}

/* The producer: the epilogue channel's tile of the program into its slot. */
static void load_epilogue_tile(aw *w)
{
    ir_op *ld = aw_op(w, w->epil);
    loom_val offs[LOOM_MAX_RANK];
    for (int i = 1; i < ld->nopnd; i++)
        offs[i - 1] = H(w, ld->opnd[i]);
    loom_val es = loom_ring_produce_at(ld->src, w->dst, &w->ering, w->pi, -1);
    loom_ring_load_at(ld->src, w->dst, &w->ering, es, 0, 0, H(w, ld->opnd[0]), offs);
}

/* The producer: its slice of the top level, then the loop: for each step, produce the
 * slot of use `it` and TMA each channel's box into it.  The epilogue channel's tile goes
 * after the program's first `stages` steps (when the consumers have read the previous
 * one: they are past their previous epilogue once the ring has room for step `stages`),
 * or after the loop where it has no more steps. */
static void build_producer(aw *w)
{
    loom_kernel *d = w->dst;
    ir_op *lp = aw_op(w, w->loop);
    loom_src at = lp->src;
    loom_region_op t = loom_producer_begin_at(at, d);
    loom_val it0;
    loom_region_op pl = programs_begin(w, at, &it0, false);
    ir_block *top = &w->src->blocks[1];
    for (uint32_t i = 0; i < top->nops && w->st == LOOM_OK; i++)
        if (w->prod[top->ops[i]])
            clone_op(w, top->ops[i], true);
    if (w->outer) { /* the program's outer tile, once */
        ir_op *ld = aw_op(w, w->outer);
        loom_val offs[LOOM_MAX_RANK];
        for (int i = 1; i < ld->nopnd; i++)
            offs[i - 1] = H(w, ld->opnd[i]);
        loom_val qs = loom_ring_produce_at(ld->src, d, &w->qring, w->pi, -1);
        loom_ring_load_at(ld->src, d, &w->qring, qs, 0, 0, H(w, ld->opnd[0]), offs);
    }
    loom_val trigger = w->epil ? loom_add_at(at, d, H(w, lp->opnd[0]), loom_mul_at(at, d, H(w, lp->opnd[2]),
                                                                                      CI(w->stages)))
                               : LOOM_NONE;
    loom_region_op l = loom_for_begin_at(at, d, H(w, lp->opnd[0]), H(w, lp->opnd[1]), H(w, lp->opnd[2]), 1, &it0);
    ir_block *b = &w->src->blocks[w->body];
    w->map[b->args[0]] = U(w, loom_for_iv(d, l));
    loom_val it = loom_for_arg(d, l, 0);
    clone_block(w, w->body, true);
    loom_val s = loom_ring_produce_at(at, d, &w->ring, it, -1);
    for (int c = 0; c < w->nch; c++) {
        ir_op *ld = aw_op(w, w->ch[c].load);
        loom_val offs[LOOM_MAX_RANK];
        for (int i = 1; i < ld->nopnd; i++)
            offs[i - 1] = H(w, ld->opnd[i]);
        loom_ring_load_at(ld->src, d, &w->ring, s, c, 0, H(w, ld->opnd[0]), offs);
    }
    if (w->epil) {
        loom_region_op e = loom_if_begin_at(at, d, loom_cmp_at(at, d, LOOM_EQ, loom_for_iv(d, l), trigger), 0);
        load_epilogue_tile(w);
        loom_if_end_at(at, d, e, 0, NULL);
    }
    loom_val next = loom_add_at(at, d, it, CI(1));
    loom_for_end_at(at, d, l, 1, &next);
    loom_val it_end = loom_for_result(d, l, 0);
    if (w->epil) { /* no step `stages`: after the loop */
        loom_region_op e = loom_if_begin_at(at, d, loom_cmp_at(at, d, LOOM_GE, trigger, H(w, lp->opnd[1])), 0);
        load_epilogue_tile(w);
        loom_if_end_at(at, d, e, 0, NULL);
    }
    programs_end(w, at, pl, it_end, false);
    loom_task_end_at(at, d, t);
}

/* A dot's operand: the slot's view of its channel (transposed where the user's trans
 * was), or the register tile. */
static loom_val operand(aw *w, loom_val s, int chan, bool trans, uint32_t v, loom_src at)
{
    if (chan < 0)
        return H(w, v);
    if (chan == AW_OUTER)
        return trans ? loom_smem_trans_at(at, w->dst, w->qview) : w->qview;
    loom_val view = loom_ring_view_at(at, w->dst, &w->ring, s, chan, LOOM_NONE);
    return trans ? loom_smem_trans_at(at, w->dst, view) : view;
}

static const aw_dot *dot_of(aw *w, uint32_t o)
{
    for (int i = 0; i < w->ndot; i++)
        if (w->dot[i].op == o)
            return &w->dot[i];
    return NULL;
}

/* Dot i's (0 or 1) operands: B (and A where a channel) from slot s, its accumulator. */
static void dot_operands(aw *w, int i, loom_val s, loom_val *opnd)
{
    const aw_dot *dt = &w->dot[i];
    ir_op *op = aw_op(w, dt->op);
    opnd[0] = operand(w, s, dt->a_chan, dt->a_trans, op->opnd[0], op->src);
    opnd[1] = operand(w, s, dt->b_chan, dt->b_trans, op->opnd[1], op->src);
    opnd[2] = H(w, op->opnd[2]);
}

/* Issue dot i on operands made before (dot_operands); committed. */
static loom_val issue_on(aw *w, int i, const loom_val *opnd)
{
    ir_op *op = aw_op(w, w->dot[i].op);
    loom_val acc = loom_wgmma_at(op->src, w->dst, opnd[0], opnd[1], opnd[2]);
    loom_wgmma_commit_at(op->src, w->dst);
    return acc;
}

static loom_val issue_dot(aw *w, int i, loom_val s)
{
    loom_val opnd[3];
    dot_operands(w, i, s, opnd);
    return issue_on(w, i, opnd);
}

/* Wait until `pending` groups are left (dot i's line); acc, done. */
static loom_val wait_for(aw *w, int i, int pending, loom_val acc)
{
    loom_region_op wt = loom_wgmma_wait_at(aw_op(w, w->dot[i].op)->src, w->dst, pending, 1, &acc);
    return loom_wgmma_result(w->dst, wt, 0);
}

/* The consumers' step, general form: consume the slot, the body's ops in order with each
 * dot a wgmma waited for, the slot back at the end. */
static void consumer_step(aw *w, loom_val it)
{
    loom_kernel *d = w->dst;
    loom_src at = aw_op(w, w->loop)->src;
    loom_val s = loom_ring_consume_at(at, d, &w->ring, it);
    ir_block *b = &w->src->blocks[w->body];
    for (uint32_t i = 0; i + 1 < b->nops && w->st == LOOM_OK; i++) {
        uint32_t o = b->ops[i];
        if (w->skip[o])
            continue;
        const aw_dot *dt = dot_of(w, o);
        if (!dt) {
            clone_op(w, o, false);
            continue;
        }
        int di = (int)(dt - w->dot);
        w->map[aw_op(w, o)->res[0]] = U(w, wait_for(w, di, 0, issue_dot(w, di, s)));
    }
    loom_ring_release_at(at, d, &w->ring, s);
}

/* The step of a program at which the last program's held slot goes back: the second
 * (its store has had the first step's wgmma to be read), or the first with two stages
 * (the second step's loads need the slot back: use it0 + 1 is the held use + stages). */
static int defer_step(const aw *w) { return w->stages > 2 ? 1 : 0; }

/* The consumers' step, mainloop form: the body's other ops, the dot as one k step of the
 * pipeline layer's mainloop (one group left in flight, the previous use's slot back). */
static void consumer_mainloop_step(aw *w, loom_val it, loom_val it0)
{
    loom_kernel *d = w->dst;
    const aw_dot *dt = &w->dot[0];
    ir_op *op = aw_op(w, dt->op);
    loom_src at = op->src;
    loom_mainloop ml = {.ring = &w->ring, .a_tile = dt->a_chan < 0 ? dt->b_chan : dt->a_chan, .b_tile = dt->b_chan,
                        .a_trans = dt->a_trans, .b_trans = dt->b_trans, .rows = dt->m, .cols = dt->n, .steps = 1};
    ir_block *b = &w->src->blocks[w->body];
    for (uint32_t i = 0; i + 1 < b->nops && w->st == LOOM_OK; i++) {
        uint32_t o = b->ops[i];
        if (w->skip[o])
            continue;
        if (o != dt->op) {
            clone_op(w, o, false);
            continue;
        }
        loom_val a = dt->a_chan < 0 ? H(w, op->opnd[0]) : LOOM_NONE;
        loom_val first = loom_cmp_at(at, d, LOOM_GT, it, it0); /* a program's first step gives none back */
        loom_val prev = loom_sub_at(at, d, it, CI(1));
        w->map[op->res[0]] = U(w, loom_mainloop_step_at(at, d, &ml, it, prev, first, a, H(w, op->opnd[2]), LOOM_NONE));
        if (w->defer) /* the last program's held slot, once this program's wgmmas run (defer_step) */
            give_back_pending(w, at, w->pend, loom_cmp_at(at, d, LOOM_EQ, it, loom_add_at(at, d, it0, CI(defer_step(w)))));
    }
}

/* After a mainloop of ring uses it0 .. it_end - 1: wait for the last group and give the
 * last use's slot back (when the loop ran at all), or, where the epilogue's store borrows
 * it, keep it (w->held, w->held_use). */
static loom_val mainloop_finish(aw *w, loom_val acc, loom_val it0, loom_val it_end)
{
    loom_kernel *d = w->dst;
    loom_src at = aw_op(w, w->dot[0].op)->src;
    loom_region_op wt = loom_wgmma_wait_at(at, d, 0, 1, &acc);
    loom_val done = loom_wgmma_result(d, wt, 0);
    if (w->defer) /* a loop too short to reach defer_step: the last program's slot now */
        give_back_pending(w, at, w->pend,
                          loom_cmp_at(at, d, LOOM_LE, loom_sub_at(at, d, it_end, it0), CI(defer_step(w))));
    if (w->borrow) {
        w->held = loom_cmp_at(at, d, LOOM_GT, it_end, it0);
        w->held_use = loom_sub_at(at, d, it_end, CI(1));
        return done;
    }
    loom_region_op any = loom_if_begin_at(at, d, loom_cmp_at(at, d, LOOM_GT, it_end, it0), 0);
    loom_ring_release_at(at, d, &w->ring, loom_ring_slot_at(at, d, loom_sub_at(at, d, it_end, CI(1)), w->ring.slots));
    loom_if_end_at(at, d, any, 0, NULL);
    return done;
}

/* ---------------------------------------------------------------- the rotated loop */

/* The body's ops of the parts in `parts` (bits 1 << AW_CAT_*), in order, in the map's
 * present context (the dots and the channels' loads are the caller's). */
static void clone_parts(aw *w, unsigned parts)
{
    ir_block *b = &w->src->blocks[w->body];
    for (uint32_t i = 0; i + 1 < b->nops && w->st == LOOM_OK; i++) {
        uint32_t o = b->ops[i];
        if (w->skip[o] || o == w->dot[0].op || o == w->dot[1].op || !(parts & (1u << w->cat[o])))
            continue;
        clone_op(w, o, false);
    }
}

/* The map's context for the body's ops: the induction variable iv and the carried values
 * but the accumulator (vals[j] for block argument 1 + j). */
static void context(aw *w, loom_val iv, int n, const loom_val *vals)
{
    ir_block *b = &w->src->blocks[w->body];
    w->map[b->args[0]] = U(w, iv);
    for (int j = 0; j < n; j++)
        if (j != w->acc_arg)
            w->map[b->args[1 + j]] = U(w, vals[j]);
}

/* Step `iv`'s first dot's result (next), then its AFTER1 part (the step's state in
 * the context: the softmax), then, the accumulator `acc` (done) in hand, its ACC part:
 * the accumulator the step's second dot starts from. */
static loom_val first_half(aw *w, loom_val next, loom_val acc)
{
    ir_block *b = &w->src->blocks[w->body];
    w->map[aw_op(w, w->dot[0].op)->res[0]] = U(w, next);
    clone_parts(w, (1u << AW_CAT_AFTER1) | (1u << AW_CAT_FEED));
    w->map[b->args[1 + w->acc_arg]] = U(w, acc);
    clone_parts(w, 1u << AW_CAT_ACC);
    return H(w, aw_op(w, w->dot[1].op)->opnd[2]);
}

/* The loop of two dots software-pipelined by a step (aw.rotate; FA3's intra-warpgroup
 * overlap).  Steps 0 .. N-1 of ring uses it0 ..:
 *   step 0: its first dot, waited for; its AFTER1 part; its ACC part (the accumulator its
 *     second dot starts from);
 *   a loop over steps j = 0 .. N-2: issue step j+1's first dot, then step j's second dot;
 *     wait for the first (one group left) and run step j+1's AFTER1 part while the second
 *     runs; wait for it, give step j's slot back; step j+1's ACC part on its result;
 *   step N-1's second dot, waited for, its slot back.
 * The loop carries the accumulator the next second dot starts from, the other carried
 * values (the next step's state), that dot's A and the ring use; no step at all: the
 * initial values.  Sets the map of the user loop's results; returns the ring use after. */
static loom_val rotated_loop(aw *w, loom_val it0)
{
    loom_kernel *d = w->dst;
    ir_op *lp = aw_op(w, w->loop), *d2 = aw_op(w, w->dot[1].op);
    loom_src at = lp->src;
    ir_block *b = &w->src->blocks[w->body];
    ir_op *y = aw_op(w, b->ops[b->nops - 1]);
    int n = lp->nopnd - 3, ncar = n + 2;
    loom_val lo = H(w, lp->opnd[0]), hi = H(w, lp->opnd[1]), step = H(w, lp->opnd[2]), init[64];
    for (int j = 0; j < n; j++)
        init[j] = H(w, lp->opnd[3 + j]);
    loom_region_op g = loom_if_begin_at(at, d, loom_cmp_at(at, d, LOOM_GT, hi, lo), n + 1);
    /* step 0 */
    context(w, lo, n, init);
    clone_parts(w, 1u << AW_CAT_PRE);
    loom_val s0 = loom_ring_consume_at(at, d, &w->ring, it0);
    loom_val acc0 = first_half(w, wait_for(w, 0, 0, issue_dot(w, 0, s0)), init[w->acc_arg]);
    loom_val li[64];
    for (int j = 0; j < n; j++)
        li[j] = j == w->acc_arg ? acc0 : H(w, y->opnd[j]);
    li[n] = H(w, d2->opnd[0]);
    li[n + 1] = it0;
    /* steps 0 .. N-2's second dots, 1 .. N-1's first */
    loom_region_op l = loom_for_begin_at(at, d, lo, loom_sub_at(at, d, hi, step), step, ncar, li);
    {
        loom_val iv = loom_for_iv(d, l), a[64];
        for (int j = 0; j < ncar; j++)
            a[j] = loom_for_arg(d, l, j);
        loom_val it = a[n + 1], iv1 = loom_add_at(at, d, iv, step);
        /* step j's second dot's operands, from the carried accumulator and A (made before
         * the two issues: between them only wgmma may write a wgmma's registers) */
        w->map[d2->opnd[0]] = U(w, a[n]);
        w->map[d2->opnd[2]] = U(w, a[w->acc_arg]);
        loom_val sj = loom_ring_slot_at(at, d, it, w->ring.slots), o2[3], o1[3];
        dot_operands(w, 1, sj, o2);
        context(w, iv1, n, a); /* step j+1 */
        clone_parts(w, 1u << AW_CAT_PRE);
        loom_val s1 = loom_ring_consume_at(at, d, &w->ring, loom_add_at(at, d, it, CI(1)));
        dot_operands(w, 0, s1, o1);
        loom_val next = issue_on(w, 0, o1);
        loom_val pv = issue_on(w, 1, o2);
        loom_val s_next = wait_for(w, 0, 1, next); /* step j+1's first dot: the older group */
        w->map[aw_op(w, w->dot[0].op)->res[0]] = U(w, s_next);
        clone_parts(w, 1u << AW_CAT_AFTER1); /* beside step j's second dot */
        loom_val done = wait_for(w, 1, 0, pv);
        loom_ring_release_at(at, d, &w->ring, sj);
        w->map[b->args[1 + w->acc_arg]] = U(w, done);
        clone_parts(w, (1u << AW_CAT_FEED) | (1u << AW_CAT_ACC)); /* after the wait: A's registers are free */
        loom_val ys[64];
        for (int j = 0; j < n; j++)
            ys[j] = j == w->acc_arg ? H(w, d2->opnd[2]) : H(w, y->opnd[j]);
        ys[n] = H(w, d2->opnd[0]);
        ys[n + 1] = loom_add_at(at, d, it, CI(1));
        loom_for_end_at(y->src, d, l, ncar, ys);
    }
    /* step N-1's second dot; the outer tile (Q) is read by first dots only, all waited for
     * by now: back to the producer, which loads the next program's beside this dot and
     * the epilogue */
    if (w->outer)
        loom_ring_release_at(at, d, &w->qring, w->qslot);
    loom_val r[64];
    for (int j = 0; j < ncar; j++)
        r[j] = loom_for_result(d, l, j);
    w->map[d2->opnd[0]] = U(w, r[n]);
    w->map[d2->opnd[2]] = U(w, r[w->acc_arg]);
    loom_val sl = loom_ring_slot_at(at, d, r[n + 1], w->ring.slots);
    loom_val fin = wait_for(w, 1, 0, issue_dot(w, 1, sl));
    if (!w->borrow) /* else the epilogue's store holds it (consumers_end) */
        loom_ring_release_at(at, d, &w->ring, sl);
    loom_val yt[64];
    for (int j = 0; j < n; j++)
        yt[j] = j == w->acc_arg ? fin : r[j];
    yt[n] = loom_add_at(at, d, r[n + 1], CI(1));
    loom_else_at(at, d, g, n + 1, yt);
    if (w->outer) /* no step: the outer tile back at once */
        loom_ring_release_at(at, d, &w->qring, w->qslot);
    init[n] = it0;
    loom_if_end_at(at, d, g, n + 1, init);
    for (int j = 0; j < lp->nres; j++)
        w->map[lp->res[j]] = U(w, loom_if_result(d, g, j));
    return loom_if_result(d, g, n);
}

static void consumers_end(aw *w, loom_region_op pl, loom_region_op t, uint32_t i, loom_val it0, loom_val it_end);

/* The consumers: the top level before the loop, the loop (its carried values and the
 * ring's use count), the epilogue after it. */
static void build_consumers(aw *w)
{
    loom_kernel *d = w->dst;
    ir_op *lp = aw_op(w, w->loop);
    loom_src at = lp->src;
    loom_region_op t = loom_consumers_begin_at(at, d, w->pingpong ? 4 : 4 * w->groups, w->pingpong ? 2 : 1);
    ir_block *top = &w->src->blocks[1];
    if (w->pingpong) { /* the loop's bounds (the same for every program) and its step count */
        w->rep = loom_pingpong_start_at(at, d, &w->pp);
        for (uint32_t j = 0; j < top->nops && w->st == LOOM_OK; j++)
            if (w->bounds[top->ops[j]])
                clone_op(w, top->ops[j], false);
        loom_val lo = H(w, lp->opnd[0]), hi = H(w, lp->opnd[1]), st = H(w, lp->opnd[2]);
        loom_val span = loom_add_at(at, d, loom_sub_at(at, d, hi, lo), loom_sub_at(at, d, st, CI(1)));
        w->trips = loom_select_at(at, d, loom_cmp_at(at, d, LOOM_GT, hi, lo), loom_div_at(at, d, span, st), CI(0));
    }
    loom_val it0;
    loom_region_op pl = programs_begin(w, at, &it0, true);
    uint32_t i = 0;
    for (; i < top->nops && top->ops[i] != w->loop && w->st == LOOM_OK; i++)
        if (!w->pingpong || !w->bounds[top->ops[i]])
            clone_op(w, top->ops[i], false);
    loom_val qslot = LOOM_NONE;
    if (w->outer) { /* the program's outer tile, from its ring */
        qslot = loom_ring_consume_at(at, d, &w->qring, w->pi);
        w->qview = loom_ring_view_at(at, d, &w->qring, qslot, 0, LOOM_NONE);
    }
    w->qslot = qslot;
    int n = lp->nopnd - 3;
    loom_val init[64];
    for (int j = 0; j < n; j++)
        init[j] = H(w, lp->opnd[3 + j]);
    init[n] = it0;
    if (w->pingpong) /* the tensor cores (and the ring's waits) in turn */
        loom_pingpong_mma_begin_at(at, d, &w->pp);
    if (w->rotate) {
        loom_val it_end = rotated_loop(w, it0);
        consumers_end(w, pl, t, i, it0, it_end);
        return;
    }
    loom_region_op l = loom_for_begin_at(at, d, H(w, lp->opnd[0]), H(w, lp->opnd[1]), H(w, lp->opnd[2]), n + 1, init);
    ir_block *b = &w->src->blocks[w->body];
    w->map[b->args[0]] = U(w, loom_for_iv(d, l));
    for (uint32_t j = 1; j < b->nargs; j++)
        w->map[b->args[j]] = U(w, loom_for_arg(d, l, (int)j - 1));
    loom_val it = loom_for_arg(d, l, n);
    if (w->mainloop)
        consumer_mainloop_step(w, it, it0);
    else
        consumer_step(w, it);
    if (w->st != LOOM_OK)
        return;
    ir_op *y = aw_op(w, b->ops[b->nops - 1]);
    loom_val ys[64];
    for (int j = 0; j < y->nopnd; j++)
        ys[j] = H(w, y->opnd[j]);
    ys[n] = loom_add_at(at, d, it, CI(1));
    loom_for_end_at(y->src, d, l, n + 1, ys);
    for (int r = 0; r < lp->nres; r++)
        w->map[lp->res[r]] = U(w, loom_for_result(d, l, r));
    loom_val it_end = loom_for_result(d, l, n);
    consumers_end(w, pl, t, i, it0, it_end);
}

/* After the consumers' loop (it0 .. it_end its ring uses; i the loop's index in the top
 * block): its finish, the epilogue, the end of the programs' loop and of the task. */
static void consumers_end(aw *w, loom_region_op pl, loom_region_op t, uint32_t i, loom_val it0, loom_val it_end)
{
    loom_kernel *d = w->dst;
    ir_op *lp = aw_op(w, w->loop);
    loom_src at = lp->src;
    ir_block *top = &w->src->blocks[1];
    if (w->pingpong)
        loom_pingpong_mma_end_at(at, d, &w->pp);
    if (w->mainloop) {
        loom_val acc = ir_handle(d, w->map[lp->res[w->acc_arg]]);
        w->map[lp->res[w->acc_arg]] = U(w, mainloop_finish(w, acc, it0, it_end));
    } else if (w->rotate && w->borrow) { /* the last step's slot, held (rotated_loop) */
        w->held = loom_cmp_at(at, d, LOOM_GT, it_end, it0);
        w->held_use = loom_sub_at(at, d, it_end, CI(1));
    }
    if (w->outer && !w->rotate) /* the loop's dots are done with the outer tile (rotated: given back sooner) */
        loom_ring_release_at(at, d, &w->qring, w->qslot);
    for (i++; i < top->nops && w->st == LOOM_OK; i++)
        clone_op(w, top->ops[i], false);
    if (w->pingpong) { /* the epilogue's turn to the other; past the other replica's program */
        loom_pingpong_tile_end_at(at, d, &w->pp);
        it_end = loom_add_at(at, d, it_end, w->trips);
    }
    programs_end(w, at, pl, it_end, true);
    if (w->pingpong) { /* the replica with a program fewer takes an empty turn */
        loom_val nprog = loom_num_programs_at(at, d, 0);
        loom_val total = loom_mul_at(at, d, loom_mul_at(at, d, w->grid[0], w->grid[1]), w->grid[2]);
        loom_val left = loom_max_at(at, d, loom_sub_at(at, d, total, loom_program_id_at(at, d, 0)), CI(0));
        loom_val mine = loom_div_at(at, d, loom_sub_at(at, d, loom_add_at(at, d, left, nprog), CI(1)), nprog);
        loom_pingpong_finish_at(at, d, &w->pp, loom_cmp_at(at, d, LOOM_EQ, loom_rem_at(at, d, mine, CI(2)), CI(1)));
    }
    if (w->staged && !w->borrow && !w->coal)
        loom_epilogue_finish_at(at, d, &w->epi);
    loom_task_end_at(at, d, t);
}

bool aw_pass_code(aw *w)
{
    loom_kernel *k = w->src;
    loom_kernel *d = w->dst = loom_kernel_create_at(k->ws_at, k->name, 4 * (1 + w->groups));
    if (!d)
        return w->st = LOOM_ERR_NOMEM, false;
    uint32_t *pmap = calloc(k->nvals, sizeof *pmap), *cmap = calloc(k->nvals, sizeof *cmap);
    if (!pmap || !cmap) {
        free(pmap);
        free(cmap);
        return w->st = LOOM_ERR_NOMEM, false;
    }
    w->map = pmap;
    clone_args(w, pmap);
    memcpy(cmap, pmap, k->nvals * sizeof *cmap);
    loom_ring_tile tiles[LOOM_RING_MAX_TILES];
    for (int c = 0; c < w->nch; c++) {
        ir_type *t = &k->vals[w->ch[c].val].type;
        tiles[c] = (loom_ring_tile){(loom_dtype)t->dtype, t->shape, 1, w->ch[c].swz};
    }
    loom_src at = aw_op(w, w->loop)->src;
    w->pipe = loom_pipe_create(d);
    w->ring = loom_ring_create_at(at, &w->pipe, w->stages, 1, w->nch, tiles);
    if (w->outer) {
        ir_type *t = &k->vals[aw_op(w, w->outer)->res[0]].type;
        loom_ring_tile q = {(loom_dtype)t->dtype, t->shape, 1, w->outer_swz};
        w->qring = loom_ring_create_at(aw_op(w, w->outer)->src, &w->pipe, w->qslots, 1, 1, &q);
    }
    if (w->epil) {
        ir_type *t = &k->vals[aw_op(w, w->epil)->res[0]].type;
        loom_ring_tile e = {(loom_dtype)t->dtype, t->shape, 1, w->epil_swz};
        w->ering = loom_ring_create_at(aw_op(w, w->epil)->src, &w->pipe, 1, 1, 1, &e);
    }
    if (w->pingpong)
        w->pp = loom_pingpong_create_at(at, &w->pipe);
    if (w->staged && w->borrow)
        w->bsync = loom_sync_create_at(aw_op(w, w->staged)->src, &w->pipe, 128 * w->groups, 1);
    else if (w->staged && w->coal) { /* a staging tile of its own, no TMA */
        ir_op *st = aw_op(w, w->staged);
        ir_type *v = &k->vals[st->opnd[st->nopnd - 2]].type;
        w->epi.stage = loom_smem_alloc_at(st->src, d, (loom_dtype)v->dtype, v->shape, 1, LOOM_SWIZZLE_128);
    } else if (w->staged) {
        ir_op *st = aw_op(w, w->staged);
        ir_type *v = &k->vals[st->opnd[st->nopnd - 1]].type;
        loom_shape part = v->shape;
        part.dim[1] /= w->parts;
        w->epi = loom_epilogue_create_at(st->src, &w->pipe, LOOM_EPI_STAGED, H(w, st->opnd[0]), (loom_dtype)v->dtype,
                                         part, w->pingpong ? 2 : 1, w->pingpong ? 128 : 128 * w->groups);
    }
    build_producer(w);
    w->map = cmap;
    if (w->st == LOOM_OK)
        build_consumers(w);
    free(pmap);
    free(cmap);
    w->map = NULL;
    if (w->st != LOOM_OK)
        return false;
    if (loom_verify(d) != LOOM_OK)
        return aw_fail(w, k->ws_at, "internal: the warp-specialized kernel does not verify:\n%s",
                       loom_kernel_errors(d));
    if (aw_dumping(w, "ws-code"))
        fprintf(stderr, "// loom IR after ws-code (automatic warp specialization)\n%s\n", loom_print(d));
    return true;
}
