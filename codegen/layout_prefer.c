/*
 * layout_prefer.c -- what the uses of each value want of its layout, and the loads (and
 * broadcasts) that take it (cg_prefer_loads), for the layout pass's second round
 * (layout_pass.c, cg_layouts).
 *
 * After a first assignment, each value's uses are asked which layout they want it in, and
 * the answers flow backward through the ops that can take any layout their result needs
 * (Triton's backward rematerialization, in loom's terms):
 *
 *   - an elementwise op wants an operand in the result's layout when another operand
 *     decided it (an accumulator, a tile a dot made); when the operand itself decided it
 *     (a cast, or the other operands are splats or are made of loads only, whose layout
 *     is as free as its own), what the result's uses want;
 *   - expand_dims wants its source in the slice of what its result's uses want, and a
 *     broadcast its source in that layout with the stretched dims' bits made duplicates:
 *     a row `bias[BN]` broadcast to [BM, BN] and added to an accumulator wants the
 *     accumulator's column slice, which every thread holds for its own registers;
 *   - a wgmma wants its register A operand in the A fragment's layout, a dot on the tensor
 *     cores its accumulator in the mma.sync accumulator's, and a loop the start of a value
 *     such a dot carries in that layout too; the start and the next value of another
 *     carried value, what the body's uses of it want;
 *   - a store takes any layout; any other use wants the layout the value has.
 *
 * A load, whose layout is free (it can read any element into any register), then takes
 * the layout its uses agree on, and a broadcast the one its uses want where no data moves
 * (layout_pass.c, layout_broadcast); the kernel is laid out again with these
 * preferences.  The result: a bias row or a per-row scale is loaded straight into the
 * registers that need it, a residual tile is loaded in the accumulator's layout, and no
 * conversion is left.
 */
#include "layout.h"

#include <stdlib.h>
#include <string.h>

/* Every use of every value, in op order: the uses of v are use[first[v] .. first[v+1]),
 * each an op and an operand index (built once, so the walk below is linear). */
typedef struct use_list {
    uint32_t *first; /* nvals + 1 */
    uint32_t *op;
    uint16_t *opnd;
} use_list;

static bool uses_build(cg_ctx *cg, use_list *u)
{
    loom_kernel *k = cg->k;
    size_t n = 0;
    u->first = calloc((size_t)k->nvals + 1, sizeof *u->first);
    if (!u->first)
        return false;
    for (uint32_t o = 1; o < k->nops; o++)
        if (k->ops[o].block)
            for (int i = 0; i < k->ops[o].nopnd; i++, n++)
                u->first[k->ops[o].opnd[i] + 1]++;
    for (uint32_t v = 0; v < k->nvals; v++)
        u->first[v + 1] += u->first[v];
    u->op = malloc((n ? n : 1) * sizeof *u->op);
    u->opnd = malloc((n ? n : 1) * sizeof *u->opnd);
    uint32_t *fill = malloc(((size_t)k->nvals + 1) * sizeof *fill);
    if (!u->op || !u->opnd || !fill) {
        free(fill);
        return false;
    }
    memcpy(fill, u->first, ((size_t)k->nvals + 1) * sizeof *fill);
    for (uint32_t o = 1; o < k->nops; o++)
        if (k->ops[o].block)
            for (int i = 0; i < k->ops[o].nopnd; i++) {
                uint32_t at = fill[k->ops[o].opnd[i]]++;
                u->op[at] = o;
                u->opnd[at] = (uint16_t)i;
            }
    free(fill);
    return true;
}

static void uses_free(use_list *u)
{
    free(u->first);
    free(u->op);
    free(u->opnd);
}

enum { W_ANY = -1, W_NONE = -2 };

typedef struct want_walk {
    use_list u;
    uint8_t *state; /* per value: 0 not asked, 1 being asked (a cycle), 2 answered */
    int32_t *memo;  /* per value: the answer */
} want_walk;

static int32_t value_want(cg_ctx *cg, want_walk *w, uint32_t v, int depth);

/* The layout a broadcast's source (shape st) has when its result has layout `to` and no
 * data moves: to's bits of the dims the broadcast adds or stretches point nowhere. */
static int32_t bcast_source_layout(cg_ctx *cg, int32_t to, const loom_shape *st)
{
    cg_layout l = *cg_lay(cg, to);
    int off = l.rank - st->rank;
    for (int d = l.rank - 1; d >= 0; d--) {
        if (d < off) {
            l = cg_slice(&l, to, d);
        } else if (st->dim[d - off] != l.shape[d]) {
            l = cg_slice(&l, to, d);
            l = cg_expand(&l, d);
        }
    }
    return cg_layout_add(cg, &l);
}

/* Is loop op's carried value j the result of a dot on the tensor cores (its layout the
 * mma accumulator's from the start: layout_pass.c, mma_hint)? */
static bool mma_dot_carried(cg_ctx *cg, const ir_op *op, int j)
{
    const ir_block *body = &cg->k->blocks[op->reg[0]];
    const ir_value *y = &cg->k->vals[cg->k->ops[body->ops[body->nops - 1]].opnd[j]];
    return y->kind == IR_V_RESULT && cg->k->ops[y->def].kind == IR_DOT && cg->dot_mma[y->def];
}

/* Whether only loads decided x's layout: a load, or an elementwise op (a cast, an add) of
 * such values and scalars.  Where an op's operands are all such, none decides its layout:
 * like the loads, they can take whatever layout the op's result is wanted in (two f16
 * planes cast and added, then added to an accumulator: both planes loaded in the
 * accumulator's layout).  Beside anything else (a broadcast row), the load decides as
 * before. */
static bool load_made(cg_ctx *cg, uint32_t x, int depth)
{
    const ir_value *v = &cg->k->vals[x];
    if (v->kind != IR_V_RESULT || depth > 4)
        return false;
    const ir_op *d = &cg->k->ops[v->def];
    if (cg_lay_class[d->kind] == LAY_LOAD)
        return true;
    if (!is_ew(d->kind))
        return false;
    bool any = false;
    for (int j = 0; j < d->nopnd; j++) {
        if (!fixed(cg, d->opnd[j]))
            continue;
        if (!load_made(cg, d->opnd[j], depth + 1))
            return false;
        any = true;
    }
    return any;
}

/* What use i of op o wants of v's layout: a layout id, W_ANY or W_NONE (keep what it has). */
static int32_t use_want(cg_ctx *cg, want_walk *w, uint32_t o, int i, uint32_t v, int depth)
{
    const ir_op *op = &cg->k->ops[o];
    switch (op->kind) {
    case IR_STORE:
        return i == 1 + vty(cg, op->opnd[0])->shape.rank ? W_ANY : W_NONE;
    case IR_WGMMA:
        if (i == 0 && op->nres && cg->vlay[op->res[0]] >= 0)
            return cg_mma_a_layout(cg, cg->vlay[op->res[0]], &vty(cg, v)->shape);
        return W_NONE;
    case IR_DOT: /* a dot on the tensor cores: acc in the mma accumulator's layout */
        return i == 2 && cg->dot_mma[o] ? cg->vlay[op->res[0]] : W_NONE;
    case IR_FOR: /* the start of a value a dot on the tensor cores carries; of another, what the body's uses of
                    the carried value want (a vector loaded a block ahead and broadcast to an accumulator) */
        if (i < 3)
            return W_NONE;
        if (mma_dot_carried(cg, op, i - 3))
            return cg->vlay[op->res[i - 3]];
        return value_want(cg, w, cg->k->blocks[op->reg[0]].args[1 + (i - 3)], depth + 1);
    case IR_YIELD: { /* a loop's next value: as its start */
        const ir_block *blk = &cg->k->blocks[op->block];
        const ir_op *lp = blk->parent ? &cg->k->ops[blk->parent] : NULL;
        if (!lp || lp->kind != IR_FOR || &cg->k->blocks[lp->reg[0]] != blk || mma_dot_carried(cg, lp, i))
            return W_NONE;
        return value_want(cg, w, blk->args[1 + i], depth + 1);
    }
    case IR_EXPAND_DIMS: {
        int32_t to = value_want(cg, w, op->res[0], depth + 1);
        if (to < 0)
            return to;
        cg_layout l = cg_slice(cg_lay(cg, to), to, (int)op->iattr[0]);
        int32_t id = cg_layout_add(cg, &l);
        return id >= 0 ? id : W_NONE;
    }
    case IR_BROADCAST: {
        int32_t to = value_want(cg, w, op->res[0], depth + 1);
        if (to < 0)
            return to;
        int32_t id = bcast_source_layout(cg, to, &vty(cg, v)->shape);
        return id >= 0 ? id : W_NONE;
    }
    case IR_SLICE: { /* the whole tile in the layout whose registers hold the part as wanted */
        int32_t to = value_want(cg, w, op->res[0], depth + 1);
        if (to < 0)
            return to;
        const cg_layout *tl = cg_lay(cg, to);
        int dim = (int)op->iattr[0];
        int64_t full = vty(cg, v)->shape.dim[dim];
        cg_layout l;
        if (tl->nreg + cg_lg(full) - tl->lg[dim] > CG_REGBITS_LIMIT || !cg_widen(cg, tl, dim, full, &l))
            return W_NONE;
        int32_t id = cg_layout_add(cg, &l);
        return id >= 0 ? id : W_NONE;
    }
    default:
        break;
    }
    if (!is_ew(op->kind) || !op->nres)
        return W_NONE;
    int32_t r = cg->vlay[op->res[0]];
    bool other = false;
    for (int j = 0; j < op->nopnd; j++) {
        uint32_t x = op->opnd[j];
        if (j == i || x == v || !fixed(cg, x))
            continue;
        /* a splat-started loop value decides nothing, unless the loop carried it in a
         * wgmma accumulator's layout (the f32 accumulator of a promoted FP8 mainloop) */
        if (cg->soft[x] && !(cg->vlay[x] == r && cg_is_mma(cg, r)))
            continue;
        if (load_made(cg, x, 0) && load_made(cg, v, 0)) /* both follow the result's layout */
            continue;
        if (cg->vlay[x] == r)
            return r; /* another operand decided the result's layout */
        other = true;
    }
    return other ? W_NONE : value_want(cg, w, op->res[0], depth + 1);
}

static int32_t value_want(cg_ctx *cg, want_walk *w, uint32_t v, int depth)
{
    if (w->state[v] == 2)
        return w->memo[v];
    if (w->state[v] == 1 || depth > 8 || vty(cg, v)->kind != IR_T_TILE || vty(cg, v)->shape.rank == 0)
        return W_NONE;
    w->state[v] = 1;
    int32_t want = W_ANY;
    for (uint32_t at = w->u.first[v]; at < w->u.first[v + 1] && cg->st == LOOM_OK; at++) {
        int32_t x = use_want(cg, w, w->u.op[at], w->u.opnd[at], v, depth);
        if (x == W_ANY)
            continue;
        if (x < 0 || (want >= 0 && want != x && !cg_layout_eq(cg_lay(cg, want), cg_lay(cg, x)))) {
            want = W_NONE;
            break;
        }
        want = x;
    }
    w->state[v] = 2;
    w->memo[v] = want;
    return want;
}

/* After a first assignment: each load (global, gathered or from shared memory) takes the
 * layout its uses agree on (a load "like" an accumulator: bias, residual, broadcast-index
 * rows, a tile TMA brought; a row vector in a slice of the tile it is broadcast to), and
 * each broadcast the layout its uses want.  Returns whether any of them changes, so the
 * kernel must be laid out again. */
bool cg_prefer_loads(cg_ctx *cg, bool *changed)
{
    loom_kernel *k = cg->k;
    want_walk w = {0};
    *changed = false;
    w.state = calloc(k->nvals ? k->nvals : 1, 1);
    w.memo = malloc((k->nvals ? k->nvals : 1) * sizeof *w.memo);
    if (!w.state || !w.memo || !uses_build(cg, &w.u)) {
        free(w.state);
        free(w.memo);
        uses_free(&w.u);
        return cg_fail(cg, LOOM_ERR_NOMEM, "out of memory");
    }
    for (uint32_t v = 1; v < k->nvals && cg->st == LOOM_OK; v++) {
        const ir_value *x = &k->vals[v];
        if (x->kind != IR_V_RESULT || x->type.kind != IR_T_TILE || x->type.shape.rank == 0)
            continue;
        uint16_t kind = k->ops[x->def].kind;
        if (cg_lay_class[kind] != LAY_LOAD && kind != IR_BROADCAST)
            continue;
        int32_t want = value_want(cg, &w, v, 0);
        if (want < 0 || (kind == IR_BROADCAST && !fixed(cg, v)))
            continue;
        cg->prefer[v] = want;
        if (cg->vlay[v] != want && !cg_direct_same(cg_lay(cg, cg->vlay[v]), cg_lay(cg, want), NULL))
            *changed = true;
    }
    free(w.state);
    free(w.memo);
    uses_free(&w.u);
    return cg->st == LOOM_OK;
}
