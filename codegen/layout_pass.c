/*
 * layout_pass.c -- the layout pass (cg_layouts): every tile value of the kernel gets a
 * layout of the algebra of layout.c, and the queries the later passes ask of the result
 * (cg_want: the layout an op wants an operand in; cg_needs_convert).
 *
 * The pass walks the kernel in order and gives every tile value a layout by its op's
 * layout class (the `layout` column of dsl/ops.h): loads are the anchors (blocked for
 * their dtype), elementwise ops take one operand's layout (an accumulator's first, then a
 * row of one, then a tile not made by a broadcast, then a broadcast, a splat-started loop
 * value last: the others are converted), reductions slice, a dot on the tensor cores takes
 * the mma.sync accumulator's layout and one on SIMT FMA its accumulator's, wgmma results
 * take the accumulator layout, loop-carried values keep their initial value's, or,
 * started as a splat, the layout the body yields them in (a dot's on the tensor cores
 * from the start, as a wgmma's).  Then each value's uses are asked which layout they want (layout_prefer.c: back through elementwise
 * ops, expand_dims and broadcasts, to the loads, whose layout is free), and the kernel is
 * laid out again with each load in the layout its uses agree on: a bias row broadcast to
 * an accumulator is loaded in the accumulator's column slice, a per-row scale in its row
 * slice, a residual in the accumulator's layout, so no conversion is left.  Cheap values
 * built from scalars (splat, arange, broadcasts and elementwise ops of those: masks,
 * offsets) are marked `remat`: the lowering recomputes them directly in whatever
 * layout a use wants, so they never force a conversion.
 *
 * The wgmma accumulator layout spreads through what is computed from it, so attention's
 * softmax moves no data: an elementwise op takes an accumulator's layout first, then a
 * row of one (a reduction's slice); a row max broadcast back is the accumulator's layout
 * again, and a row broadcast to another accumulator's shape (attention's alpha from S
 * [64, BN] scaling O [64, D]) is that shape's accumulator layout; a loop-carried tile
 * that starts as a splat (a running max or sum) takes the layout the loop body yields it
 * in when that is one of these (relayout_carried).  A wgmma
 * whose A is a register tile wants it in the A fragment's layout, which is the
 * accumulator layout of the A tile's shape (cg_mma_a_layout): a cast of an accumulator
 * S [64, N] to f16 is the A operand of P @ V as it stands, and a load whose uses all end
 * there loads in that layout (layout_prefer.c).
 */
#include "layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the pass */

static int32_t add_blocked(cg_ctx *cg, const loom_shape *s, loom_dtype dt)
{
    cg_layout l;
    if (!cg_blocked(cg, s, cg_elsize(dt), &l))
        return -1;
    return cg_layout_add(cg, &l);
}

/* The layout class of each op: the `layout` column of dsl/ops.h, which says what each
 * class means (NONE first, so the invalid op 0 has none). */
const uint8_t cg_lay_class[IR_OP_COUNT] = {
#define LOOM_OP(E, n, nop, nreg, rule, fl, sem, lay, pr, attrs) [IR_##E] = LAY_##lay,
#include "ops.h"
#undef LOOM_OP
};

/* A layout made from an accumulator's by reductions and expand_dims (a row of it). */
static bool mma_row(const cg_ctx *cg, int32_t id)
{
    return id >= 0 && cg_is_mma(cg, cg->lays[id].parent);
}

/* If v (a loop's yielded value) comes out of wgmma, the accumulator layout it will have. */
static int32_t mma_hint(cg_ctx *cg, uint32_t v, int depth)
{
    const ir_value *x = &cg->k->vals[v];
    if (depth > 8 || x->kind != IR_V_RESULT || x->type.kind != IR_T_TILE)
        return -1;
    const ir_op *op = &cg->k->ops[x->def];
    if (op->kind == IR_WGMMA)
        return cg_mma_layout(cg, &x->type.shape);
    char why[200];
    if (op->kind == IR_DOT && !cg_dot_mma_unfit(cg, op, cg->warp_bits, why, sizeof why))
        return cg_dot_mma_layout(cg, &x->type.shape);
    if (op->kind == IR_WGMMA_WAIT)
        return mma_hint(cg, op->opnd[x->index], depth + 1);
    if (op->kind == IR_FOR) {
        const ir_block *b = &cg->k->blocks[op->reg[0]];
        return mma_hint(cg, cg->k->ops[b->ops[b->nops - 1]].opnd[x->index], depth + 1);
    }
    return -1;
}

static bool set_layout(cg_ctx *cg, uint32_t v, int32_t id)
{
    if (id < 0)
        return false;
    cg->vlay[v] = id;
    return true;
}

static bool layout_block(cg_ctx *cg, uint32_t b);

/* A loop-carried tile whose initial value is made of scalars (a splat: the running max and
 * sum of an online softmax start at -inf and 0, a running row sum at 0) first took the
 * blocked layout, marked soft (elementwise ops take their other operands' layouts first);
 * if the body yields it in another layout (an accumulator's, a row of one, a reduction's
 * slice of a loaded tile), it takes that layout instead and the body is laid out again, so
 * the loop moves no data between threads: the splat start is made in that layout. */
static bool relayout_carried(cg_ctx *cg, const ir_op *op)
{
    loom_kernel *k = cg->k;
    const ir_block *body = &k->blocks[op->reg[0]];
    for (int round = 0; round < 4; round++) {
        bool again = false;
        const ir_op *y = &k->ops[body->ops[body->nops - 1]];
        for (int i = 0; i < op->nres; i++) {
            uint32_t init = op->opnd[3 + i], yv = y->opnd[i];
            int32_t want = cg->vlay[yv];
            if (vty(cg, init)->shape.rank == 0 || fixed(cg, init) || !fixed(cg, yv) || want < 0 ||
                want == cg->vlay[op->res[i]] || cg_direct_same(cg_lay(cg, want), cg_lay(cg, cg->vlay[op->res[i]]), NULL))
                continue;
            if (!set_layout(cg, body->args[1 + i], want) || !set_layout(cg, op->res[i], want))
                return false;
            again = true;
        }
        if (!again)
            return true;
        if (!layout_block(cg, op->reg[0]))
            return false;
    }
    return true;
}

/* Ops with regions: their blocks, and results in the layouts the blocks yield. */
static bool layout_region(cg_ctx *cg, const ir_op *op)
{
    loom_kernel *k = cg->k;
    if (op->kind == IR_TASK) {
        int saved = cg->warp_bits;
        cg->warp_bits = 0;
        while ((2 << cg->warp_bits) <= op->iattr[0] && cg->warp_bits < CG_MAXWARPBITS)
            cg->warp_bits++;
        bool ok = layout_block(cg, op->reg[0]);
        cg->warp_bits = saved;
        return ok;
    }
    if (op->kind == IR_FOR) {
        ir_block *body = &k->blocks[op->reg[0]];
        cg->vlay[body->args[0]] = cg->scalar_layout;
        for (int i = 0; i < op->nres; i++) {
            uint32_t init = op->opnd[3 + i];
            const ir_type *t = vty(cg, init);
            ir_block *bb = &k->blocks[op->reg[0]];
            int32_t hint = t->shape.rank ? mma_hint(cg, k->ops[bb->ops[bb->nops - 1]].opnd[i], 0) : -1;
            int32_t id = t->shape.rank == 0 ? cg->scalar_layout
                         : hint >= 0        ? hint
                         : fixed(cg, init)  ? cg->vlay[init]
                                            : add_blocked(cg, &t->shape, (loom_dtype)t->dtype);
            if (!set_layout(cg, body->args[1 + i], id) || !set_layout(cg, op->res[i], id))
                return false;
            /* a splat start: the body decides (relayout_carried) */
            cg->soft[body->args[1 + i]] = cg->soft[op->res[i]] = t->shape.rank && hint < 0 && !fixed(cg, init);
        }
        if (!layout_block(cg, op->reg[0]))
            return false;
        return relayout_carried(cg, op);
    }
    if (op->kind == IR_IF) {
        for (int r = 0; r < 2; r++)
            if (op->reg[r] && !layout_block(cg, op->reg[r]))
                return false;
        for (int i = 0; i < op->nres; i++) {
            const ir_type *t = vty(cg, op->res[i]);
            int32_t id = -1;
            if (t->shape.rank == 0)
                id = cg->scalar_layout;
            for (int r = 0; r < 2 && id < 0; r++) {
                ir_block *blk = &k->blocks[op->reg[r]];
                uint32_t y = blk->ops[blk->nops - 1];
                uint32_t yv = k->ops[y].opnd[i];
                if (fixed(cg, yv))
                    id = cg->vlay[yv];
            }
            if (id < 0)
                id = add_blocked(cg, &t->shape, (loom_dtype)t->dtype);
            if (!set_layout(cg, op->res[i], id))
                return false;
        }
        return true;
    }
    return CG_BUG(cg, "no layout rule for the regions of op '%s'", ir_opdescs[op->kind].name);
}

/* A broadcast of a value that is not recomputed (rv, of type rt). */
static bool layout_broadcast(cg_ctx *cg, const ir_op *op, uint32_t rv, const ir_type *rt)
{
    uint32_t s = op->opnd[0];
    const cg_layout *sl = cg_lay(cg, cg->vlay[s]);
    const ir_type *st = vty(cg, s);
    int off = rt->shape.rank - st->shape.rank;
    int8_t feed[LOOM_MAX_RANK];
    for (int d = 0; d < st->shape.rank; d++)
        feed[d] = st->shape.dim[d] == rt->shape.dim[d + off] ? (int8_t)(d + off) : -1;
    /* 0: the layout the uses want (prefer_loads), if no data moves: a bias row loaded in
     * a slice of the accumulator's layout is that layout broadcast */
    int32_t pw = cg->prefer ? cg->prefer[rv] : -1;
    if (pw >= 0 && cg_direct_map(sl, cg_lay(cg, pw), feed, NULL))
        return set_layout(cg, rv, pw);
    /* 1: the parent of a slice (reduce -> expand_dims -> broadcast back) */
    if (sl->parent >= 0) {
        const cg_layout *pl = cg_lay(cg, sl->parent);
        bool same = pl->rank == rt->shape.rank;
        for (int d = 0; same && d < pl->rank; d++)
            same = pl->shape[d] == rt->shape.dim[d];
        if (same && cg_direct_map(sl, pl, feed, NULL))
            return set_layout(cg, rv, sl->parent);
    }
    /* 1b: a row of an accumulator broadcast to another accumulator's shape (attention's
     * alpha, a row of S [64, BN], scaling O [64, D] with BN != D): that shape's
     * accumulator layout holds the same rows in the same threads */
    char why[200];
    if (sl->parent >= 0 && cg_is_mma(cg, sl->parent) && !cg_mma_unfit(cg, &rt->shape, why, sizeof why)) {
        int32_t m = cg_mma_layout(cg, &rt->shape);
        if (m < 0)
            return false;
        sl = cg_lay(cg, cg->vlay[s]);
        if (cg_direct_map(sl, cg_lay(cg, m), feed, NULL))
            return set_layout(cg, rv, m);
    }
    /* 2: the default layout, if no data has to move */
    int32_t def = add_blocked(cg, &rt->shape, (loom_dtype)rt->dtype);
    if (def < 0)
        return false;
    sl = cg_lay(cg, cg->vlay[s]);
    if (cg_direct_map(sl, cg_lay(cg, def), feed, NULL))
        return set_layout(cg, rv, def);
    /* 3: extend the source's layout over the new dims */
    cg_layout ext;
    if (!cg_extend(cg, sl, &rt->shape, &ext))
        return false;
    return set_layout(cg, rv, cg_layout_add(cg, &ext));
}

static bool layout_op(cg_ctx *cg, uint32_t o)
{
    ir_op *op = &cg->k->ops[o];
    uint8_t cls = cg_lay_class[op->kind];
    if (cls == LAY_REGION)
        return layout_region(cg, op);
    if (op->nres == 0)
        return true;
    uint32_t rv = op->res[0];
    const ir_type *rt = vty(cg, rv);
    if (rt->kind != IR_T_TILE)
        return true; /* shared memory and barriers: no registers */
    if (rt->shape.rank == 0)
        return set_layout(cg, rv, cg->scalar_layout);

    /* remat: made only of scalars and other remat values, and small enough to recompute
     * at every use (cg->remat holds the expression's size, operands counted once per
     * use); a larger one is computed once, in the blocked layout, so the lowering's work
     * and depth stay linear in the kernel's size whatever its reuse */
    if (cls == LAY_EW || cls == LAY_SHAPE) {
        bool rem = true;
        unsigned size = 1;
        for (int i = 0; i < op->nopnd; i++) {
            if (fixed(cg, op->opnd[i]))
                rem = false;
            else if (vty(cg, op->opnd[i])->kind == IR_T_TILE)
                size += cg->remat[op->opnd[i]];
        }
        if (rem) {
            cg->remat[rv] = size <= CG_REMAT_MAX ? (uint8_t)size : 0;
            return set_layout(cg, rv, add_blocked(cg, &rt->shape, (loom_dtype)rt->dtype));
        }
    }

    switch (cls) {
    case LAY_EW: {
        /* the operand whose layout the result takes (the others are converted when theirs
         * differs): an accumulator's first, epilogues then move no data; then a row of one
         * (a row max or sum of an accumulator); then a tile not made by a broadcast (the
         * broadcast's source is better loaded in the slice of the other's layout:
         * prefer_loads); then a broadcast; a loop-carried splat start last */
        int best = -1, bscore = -1;
        for (int i = 0; i < op->nopnd; i++) {
            uint32_t x = op->opnd[i];
            if (!fixed(cg, x) || cg->vlay[x] < 0)
                continue;
            const ir_value *xv = &cg->k->vals[x];
            int score = cg_is_mma(cg, cg->vlay[x])                                ? 5
                        : mma_row(cg, cg->vlay[x])                                ? 4
                        : cg->soft[x]                                             ? 0
                        : xv->kind == IR_V_RESULT && cg->k->ops[xv->def].kind == IR_BROADCAST ? 1
                                                                                  : 2;
            if (score > bscore) {
                best = i;
                bscore = score;
            }
        }
        if (best >= 0)
            return set_layout(cg, rv, cg->vlay[op->opnd[best]]);
        break;
    }
    case LAY_SHAPE: /* splat and arange are made of scalars: always recomputed */
        if (op->kind == IR_BROADCAST)
            return layout_broadcast(cg, op, rv, rt);
        if (op->kind == IR_EXPAND_DIMS) {
            cg_layout l = cg_expand(cg_lay(cg, cg->vlay[op->opnd[0]]), (int)op->iattr[0]);
            return set_layout(cg, rv, cg_layout_add(cg, &l));
        }
        if (op->kind == IR_TRANS) {
            cg_layout l = cg_trans(cg_lay(cg, cg->vlay[op->opnd[0]]));
            return set_layout(cg, rv, cg_layout_add(cg, &l));
        }
        if (op->kind == IR_SLICE) { /* a part of the operand's registers, else a tile of its own */
            cg_layout l;
            if (cg_part(cg_lay(cg, cg->vlay[op->opnd[0]]), (int)op->iattr[0], op->iattr[2], &l))
                return set_layout(cg, rv, cg_layout_add(cg, &l));
            return set_layout(cg, rv, add_blocked(cg, &rt->shape, (loom_dtype)rt->dtype));
        }
        break;
    case LAY_REDUCE: {
        int32_t sid = cg->vlay[op->opnd[0]];
        cg_layout l = cg_slice(cg_lay(cg, sid), sid, (int)op->iattr[0]);
        return set_layout(cg, rv, cg_layout_add(cg, &l));
    }
    case LAY_LOAD:
        if (cg->prefer && cg->prefer[rv] >= 0) /* also when relayout_carried lays it out again */
            return set_layout(cg, rv, cg->prefer[rv]); /* a load "like" an accumulator */
        return set_layout(cg, rv, add_blocked(cg, &rt->shape, (loom_dtype)rt->dtype));
    case LAY_DOT: {
        /* on the tensor cores: the mma.sync accumulator's layout (acc is converted to it,
         * once, where it has another); else SIMT FMA in the accumulator's layout */
        char why[200];
        cg->dot_mma[o] = !cg_dot_mma_unfit(cg, op, cg->warp_bits, why, sizeof why);
        if (cg->dot_mma[o])
            return set_layout(cg, rv, cg_dot_mma_layout(cg, &rt->shape));
        uint32_t acc = op->opnd[2];
        if (fixed(cg, acc))
            return set_layout(cg, rv, cg->vlay[acc]);
        return set_layout(cg, rv, add_blocked(cg, &rt->shape, LOOM_F32));
    }
    case LAY_MMA:
        if (op->kind == IR_WGMMA) {
            if (!set_layout(cg, rv, cg_mma_layout(cg, &rt->shape)))
                return false;
            /* A in registers: make its layout now (cg_want finds it) */
            const ir_type *at = vty(cg, op->opnd[0]);
            return at->kind != IR_T_TILE || cg_mma_a_layout(cg, cg->vlay[rv], &at->shape) >= 0;
        }
        for (int i = 0; i < op->nres; i++) /* wgmma_wait: its operands' layouts */
            if (!set_layout(cg, op->res[i], cg->vlay[op->opnd[i]] >= 0
                                                ? cg->vlay[op->opnd[i]]
                                                : cg_mma_layout(cg, &vty(cg, op->res[i])->shape)))
                return false;
        return true;
    default:
        break;
    }
    return CG_BUG(cg, "no layout rule for op '%s'", ir_opdescs[op->kind].name);
}

static bool layout_block(cg_ctx *cg, uint32_t b)
{
    ir_block *blk = &cg->k->blocks[b];
    for (uint32_t i = 0; i < blk->nops; i++)
        if (!layout_op(cg, blk->ops[i]) || cg->st != LOOM_OK)
            return false;
    return true;
}

loom_status cg_layouts(cg_ctx *cg)
{
    loom_kernel *k = cg->k;
    int w = loom_kernel_num_warps(k);
    cg->warp_bits = 0;
    while ((2 << cg->warp_bits) <= w && cg->warp_bits < CG_MAXWARPBITS)
        cg->warp_bits++;
    free(cg->vlay);
    free(cg->remat);
    free(cg->soft);
    free(cg->dot_mma);
    cg->vlay = malloc(k->nvals * sizeof *cg->vlay);
    cg->remat = calloc(k->nvals, 1);
    cg->soft = calloc(k->nvals, 1);
    cg->dot_mma = calloc(k->nops, 1);
    if (!cg->vlay || !cg->remat || !cg->soft || !cg->dot_mma)
        return cg_fail(cg, LOOM_ERR_NOMEM, "out of memory"), cg->st;
    for (uint32_t v = 0; v < k->nvals; v++)
        cg->vlay[v] = -1;
    free(cg->prefer);
    cg->prefer = malloc(k->nvals * sizeof *cg->prefer);
    if (!cg->prefer)
        return cg_fail(cg, LOOM_ERR_NOMEM, "out of memory"), cg->st;
    for (uint32_t v = 0; v < k->nvals; v++)
        cg->prefer[v] = -1;
    cg_layout sc;
    loom_shape s0 = LOOM_SCALAR;
    cg_blocked(cg, &s0, 4, &sc);
    cg->scalar_layout = cg_layout_add(cg, &sc);
    for (int a = 0; a < k->nargs; a++)
        if (!k->args[a].is_tensor)
            cg->vlay[k->args[a].value] = cg->scalar_layout;
    if (!layout_block(cg, 1) && cg->st == LOOM_OK)
        CG_BUG(cg, "layout assignment failed without a message");
    bool changed = false;
    if (cg->st != LOOM_OK || !cg_prefer_loads(cg, &changed) || !changed)
        return cg->st;
    /* again, with loads landing in the layouts their uses want */
    for (uint32_t v = 0; v < k->nvals; v++)
        cg->vlay[v] = -1;
    memset(cg->remat, 0, k->nvals);
    memset(cg->soft, 0, k->nvals);
    for (int a = 0; a < k->nargs; a++)
        if (!k->args[a].is_tensor)
            cg->vlay[k->args[a].value] = cg->scalar_layout;
    if (!layout_block(cg, 1) && cg->st == LOOM_OK)
        CG_BUG(cg, "layout assignment failed without a message");
    return cg->st;
}

/* ---------------------------------------------------------------- queries */

int32_t cg_want(cg_ctx *cg, uint32_t o, int i)
{
    loom_kernel *k = cg->k;
    ir_op *op = &k->ops[o];
    uint32_t v = op->opnd[i];
    const ir_type *t = vty(cg, v);
    if (t->kind != IR_T_TILE)
        return -1;
    if (t->shape.rank == 0)
        return cg->scalar_layout;
    switch (op->kind) {
    case IR_LOAD:
        return cg->vlay[op->res[0]]; /* the mask */
    case IR_STORE: {
        int r = vty(cg, op->opnd[0])->shape.rank;
        if (i == 2 + r)
            return cg->vlay[op->opnd[1 + r]]; /* the mask, in the value's layout */
        return cg->vlay[v];
    }
    case IR_LOAD_ROWS: {
        cg_layout l = cg_rowproj(cg_lay(cg, cg->vlay[op->res[0]]));
        return cg_layout_add(cg, &l);
    }
    case IR_DOT:
        return i == 2 ? cg->vlay[op->res[0]] : cg->vlay[v];
    case IR_WGMMA: /* A in registers: the A fragment's layout; b is a view */
        if (i == 0)
            return cg_mma_a_layout(cg, cg->vlay[op->res[0]], &t->shape);
        return i == 2 ? cg->vlay[op->res[0]] : cg->vlay[v];
    case IR_WGMMA_WAIT:
        return cg->vlay[op->res[i]];
    case IR_SLICE: { /* the whole tile with the part's layout and the rest in registers */
        cg_layout l;
        if (!cg_widen(cg, cg_lay(cg, cg->vlay[op->res[0]]), (int)op->iattr[0], t->shape.dim[op->iattr[0]], &l))
            return -1;
        return cg_layout_add(cg, &l);
    }
    case IR_FOR:
        return i >= 3 ? cg->vlay[op->res[i - 3]] : cg->vlay[v];
    case IR_YIELD: {
        ir_op *p = &k->ops[k->blocks[op->block].parent];
        return cg->vlay[p->res[i]];
    }
    default:
        if (is_ew(op->kind))
            return cg->vlay[op->res[0]];
        return cg->vlay[v];
    }
}

bool cg_needs_convert(cg_ctx *cg, uint32_t v, int32_t want)
{
    if (want < 0 || !fixed(cg, v) || cg->vlay[v] == want)
        return false;
    return !cg_direct_same(cg_lay(cg, cg->vlay[v]), cg_lay(cg, want), NULL);
}
