/*
 * layout.c -- which thread holds which tile element: the layout algebra and the pass.
 *
 * How layouts work.  A register tile is spread over the CTA: each thread holds some of
 * its elements as an array of SSA values.  Following Triton, the default is a BLOCKED
 * layout: along the last (contiguous) dim each thread holds a vector of 16 bytes where
 * the shape allows, lanes go along the last dim first and then the dims before it,
 * warps go over the leading dims (then the last), and what is left of each dim repeats
 * in registers.  All of this is expressed as a "linear" layout over power-of-two
 * padded dims (see codegen.h): every register/lane/warp bit names one coordinate bit
 * or none.  That single representation makes the operations exact and cheap:
 *
 *   - slice (a reduction's result): drop the register bits of the reduced dim and make
 *     its lane/warp bits "none", so threads that shared a row now share its result;
 *   - expand_dims inserts a dim no bit points to; broadcast of such a value back to its
 *     parent's shape uses the parent layout, and every thread already holds what it
 *     needs (reduce -> expand_dims -> broadcast moves no data: a row softmax);
 *   - trans swaps two dims in the bit targets (no data movement either);
 *   - cg_direct_map() decides whether a value can be re-read in another layout from
 *     the thread's own registers; when not, the lowering converts through shared
 *     memory (store in the source layout, bar.sync, load in the destination layout).
 *
 * Tile dims that are not powers of two are padded: padded coordinates hold garbage
 * that loads fill, stores skip and reductions ignore.
 *
 * The pass walks the kernel in order and gives every tile value a layout by its op's
 * layout class (the `layout` column of dsl/ops.h): loads are the anchors (blocked for
 * their dtype), elementwise ops take one operand's layout (an accumulator's first, then a
 * row of one, then a tile not made by a broadcast, then a broadcast, a splat-started loop
 * value last: the others are converted), reductions slice, dots keep their accumulator's
 * layout, wgmma results take the accumulator layout, loop-carried values keep their
 * initial value's, or, started as a splat, the layout the body yields them in.  Then each
 * value's uses are asked which layout they want (prefer_loads: back through elementwise
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
 * there loads in that layout (prefer_mma_loads).
 *
 * The divisibility analysis (cg_divisor) tracks the largest power of two known to
 * divide an integer scalar; the lowering uses it to prove 16-byte alignment of vector
 * accesses.  Its counterpart for tiles (cg_axis_info, after Triton's axis analysis)
 * tells, per dim, over how many aligned elements a value is constant, over how many it
 * counts up by one, and what divides the first of those: arange is contiguous, a splat
 * or a broadcast dim is constant, contiguous + constant stays contiguous, and
 * `contiguous < bound` is constant over blocks of g when the block starts and the bound
 * are multiples of g.  That proves an explicit mask such as `offs + arange < n` (n a
 * multiple of the vector width) or a mask on the rows only is the same for every
 * element of a 16-byte vector, so masked accesses stay vectorized.
 */
#include "cg.h"

#include <stdlib.h>
#include <string.h>

int cg_lg(int64_t n)
{
    int b = 0;
    while ((INT64_C(1) << b) < n)
        b++;
    return b;
}

int cg_elsize(loom_dtype dt) { return (int)loom_dtype_size(dt); }

size_t cg_reg_bytes(loom_dtype dt)
{
    switch (dt) {
    case LOOM_I64: return 8;
    case LOOM_I1: return 1;
    default: return 4; /* f16/bf16 are held as f32 */
    }
}

bool cg_layout_eq(const cg_layout *a, const cg_layout *b)
{
    if (a->rank != b->rank || a->nreg != b->nreg || a->nwarp != b->nwarp)
        return false;
    for (int d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d] || a->lg[d] != b->lg[d])
            return false;
    for (int i = 0; i < a->nreg; i++)
        if (a->reg[i].dim != b->reg[i].dim || a->reg[i].bit != b->reg[i].bit)
            return false;
    for (int i = 0; i < 5; i++)
        if (a->lane[i].dim != b->lane[i].dim || a->lane[i].bit != b->lane[i].bit)
            return false;
    for (int i = 0; i < a->nwarp; i++)
        if (a->warp[i].dim != b->warp[i].dim || a->warp[i].bit != b->warp[i].bit)
            return false;
    return true;
}

int32_t cg_layout_add(cg_ctx *cg, const cg_layout *l)
{
    for (int i = 0; i < cg->nlays; i++)
        if (cg_layout_eq(&cg->lays[i], l) && cg->lays[i].parent == l->parent)
            return i;
    if (cg->nlays == cg->caplays) {
        int nc = cg->caplays ? cg->caplays * 2 : 32;
        cg_layout *n = realloc(cg->lays, (size_t)nc * sizeof *n);
        if (!n) {
            cg_fail(cg, LOOM_ERR_NOMEM, "out of memory");
            return -1;
        }
        cg->lays = n;
        cg->caplays = nc;
    }
    cg->lays[cg->nlays] = *l;
    return cg->nlays++;
}

int cg_layout_regs(const cg_layout *l) { return 1 << l->nreg; }

int64_t cg_layout_padded_numel(const cg_layout *l)
{
    int64_t n = 1;
    for (int d = 0; d < l->rank; d++)
        n <<= l->lg[d];
    return n;
}

int64_t cg_reg_coord(const cg_layout *l, int j, int d)
{
    int64_t c = 0;
    for (int i = 0; i < l->nreg; i++)
        if ((j >> i) & 1 && l->reg[i].dim == d)
            c |= INT64_C(1) << l->reg[i].bit;
    return c;
}

static cg_layout empty_layout(int rank, const int64_t *shape)
{
    cg_layout l;
    memset(&l, 0, sizeof l);
    l.rank = rank;
    l.parent = -1;
    for (int d = 0; d < rank; d++) {
        l.shape[d] = shape[d];
        l.lg[d] = (int8_t)cg_lg(shape[d]);
    }
    for (int i = 0; i < 5; i++)
        l.lane[i].dim = -1;
    for (int i = 0; i < CG_MAXWARPBITS; i++)
        l.warp[i].dim = -1;
    return l;
}

static bool push_reg(cg_ctx *cg, cg_layout *l, int dim, int bit)
{
    if (l->nreg >= 10)
        return cg_fail(cg, LOOM_ERR_UNSUPPORTED,
                       "a register tile needs more than 1024 registers per thread; use smaller tiles "
                       "or more warps");
    l->reg[l->nreg].dim = (int8_t)dim;
    l->reg[l->nreg].bit = (int8_t)bit;
    l->nreg++;
    return true;
}

bool cg_blocked(cg_ctx *cg, const loom_shape *s, int elsize, cg_layout *out)
{
    cg_layout l = empty_layout(s->rank, s->dim);
    l.nwarp = cg->warp_bits;
    int r = s->rank;
    if (r == 0) {
        *out = l;
        return true;
    }
    int next[LOOM_MAX_RANK] = {0};
    int last = r - 1;
    int vb = cg_lg(16 / (elsize > 0 ? elsize : 4));
    if (vb > l.lg[last])
        vb = l.lg[last];
    for (int b = 0; b < vb; b++)
        push_reg(cg, &l, last, b);
    next[last] = vb;
    for (int i = 0; i < 5; i++)
        for (int d = last; d >= 0; d--)
            if (next[d] < l.lg[d]) {
                l.lane[i] = (cg_bit){(int8_t)d, (int8_t)next[d]++};
                break;
            }
    for (int i = 0; i < l.nwarp; i++) {
        int order[LOOM_MAX_RANK], n = 0;
        for (int d = r - 2; d >= 0; d--)
            order[n++] = d;
        order[n++] = last;
        for (int t = 0; t < n; t++) {
            int d = order[t];
            if (next[d] < l.lg[d]) {
                l.warp[i] = (cg_bit){(int8_t)d, (int8_t)next[d]++};
                break;
            }
        }
    }
    for (int d = last; d >= 0; d--)
        while (next[d] < l.lg[d])
            if (!push_reg(cg, &l, d, next[d]++))
                return false;
    *out = l;
    return true;
}

cg_layout cg_slice(const cg_layout *p, int32_t pid, int axis)
{
    int64_t shape[LOOM_MAX_RANK];
    for (int d = 0, n = 0; d < p->rank; d++)
        if (d != axis)
            shape[n++] = p->shape[d];
    cg_layout l = empty_layout(p->rank - 1, shape);
    l.nwarp = p->nwarp;
    l.parent = p->parent >= 0 ? p->parent : pid;
#define SL(b) ((b).dim == axis || (b).dim < 0 ? (cg_bit){-1, 0} : (cg_bit){(int8_t)((b).dim > axis ? (b).dim - 1 : (b).dim), (b).bit})
    for (int i = 0; i < p->nreg; i++)
        if (p->reg[i].dim != axis)
            l.reg[l.nreg++] = SL(p->reg[i]);
    for (int i = 0; i < 5; i++)
        l.lane[i] = SL(p->lane[i]);
    for (int i = 0; i < p->nwarp; i++)
        l.warp[i] = SL(p->warp[i]);
#undef SL
    return l;
}

cg_layout cg_expand(const cg_layout *p, int axis)
{
    int64_t shape[LOOM_MAX_RANK];
    for (int d = 0, n = 0; d <= p->rank; d++)
        shape[d] = d == axis ? 1 : p->shape[n++];
    cg_layout l = empty_layout(p->rank + 1, shape);
    l.nwarp = p->nwarp;
    l.parent = p->parent;
#define EX(b) ((b).dim < 0 ? (b) : (cg_bit){(int8_t)((b).dim >= axis ? (b).dim + 1 : (b).dim), (b).bit})
    l.nreg = p->nreg;
    for (int i = 0; i < p->nreg; i++)
        l.reg[i] = EX(p->reg[i]);
    for (int i = 0; i < 5; i++)
        l.lane[i] = EX(p->lane[i]);
    for (int i = 0; i < p->nwarp; i++)
        l.warp[i] = EX(p->warp[i]);
#undef EX
    return l;
}

cg_layout cg_trans(const cg_layout *p)
{
    cg_layout l = *p;
    l.shape[0] = p->shape[1];
    l.shape[1] = p->shape[0];
    l.lg[0] = p->lg[1];
    l.lg[1] = p->lg[0];
    l.parent = -1;
#define TR(b) ((b).dim < 0 ? (b) : (cg_bit){(int8_t)(1 - (b).dim), (b).bit})
    for (int i = 0; i < p->nreg; i++)
        l.reg[i] = TR(p->reg[i]);
    for (int i = 0; i < 5; i++)
        l.lane[i] = TR(p->lane[i]);
    for (int i = 0; i < p->nwarp; i++)
        l.warp[i] = TR(p->warp[i]);
#undef TR
    return l;
}

bool cg_extend(cg_ctx *cg, const cg_layout *p, const loom_shape *t, cg_layout *out)
{
    cg_layout l = empty_layout(t->rank, t->dim);
    int off = t->rank - p->rank;
    l.nwarp = p->nwarp;
#define SH(b) ((b).dim < 0 ? (b) : (cg_bit){(int8_t)((b).dim + off), (b).bit})
    l.nreg = p->nreg;
    for (int i = 0; i < p->nreg; i++)
        l.reg[i] = SH(p->reg[i]);
    for (int i = 0; i < 5; i++)
        l.lane[i] = SH(p->lane[i]);
    for (int i = 0; i < p->nwarp; i++)
        l.warp[i] = SH(p->warp[i]);
#undef SH
    for (int d = t->rank - 1; d >= 0; d--) {
        bool stretched = d < off || p->shape[d - off] != t->dim[d];
        if (!stretched)
            continue;
        int b = 0;
        for (int i = 0; i < 5 && b < l.lg[d]; i++)
            if (l.lane[i].dim < 0)
                l.lane[i] = (cg_bit){(int8_t)d, (int8_t)b++};
        for (int i = 0; i < l.nwarp && b < l.lg[d]; i++)
            if (l.warp[i].dim < 0)
                l.warp[i] = (cg_bit){(int8_t)d, (int8_t)b++};
        while (b < l.lg[d])
            if (!push_reg(cg, &l, d, b++))
                return false;
    }
    *out = l;
    return true;
}

cg_layout cg_rowproj(const cg_layout *p)
{
    cg_layout l = *p;
    for (int d = p->rank - 1; d >= 1; d--)
        l = cg_slice(&l, -1, d);
    l.parent = -1;
    return l;
}

bool cg_direct_map(const cg_layout *src, const cg_layout *dst, const int8_t *feed, int32_t *regmap)
{
    if (src->nwarp != dst->nwarp)
        return false;
    /* the dst dim -> src dim map (inverse of feed) */
    int8_t tosrc[LOOM_MAX_RANK];
    for (int d = 0; d < dst->rank; d++)
        tosrc[d] = -1;
    for (int s = 0; s < src->rank; s++)
        if (feed[s] >= 0)
            tosrc[feed[s]] = (int8_t)s;
#define IMG(b) ((b).dim < 0 || tosrc[(b).dim] < 0 ? (cg_bit){-1, 0} : (cg_bit){tosrc[(b).dim], (b).bit})
    for (int i = 0; i < 5; i++) {
        cg_bit e = IMG(dst->lane[i]);
        if (e.dim != src->lane[i].dim || (e.dim >= 0 && e.bit != src->lane[i].bit))
            return false;
    }
    for (int i = 0; i < dst->nwarp; i++) {
        cg_bit e = IMG(dst->warp[i]);
        if (e.dim != src->warp[i].dim || (e.dim >= 0 && e.bit != src->warp[i].bit))
            return false;
    }
#undef IMG
    int n = cg_layout_regs(dst);
    for (int j = 0; j < n; j++) {
        int64_t c[LOOM_MAX_RANK];
        for (int s = 0; s < src->rank; s++)
            c[s] = feed[s] >= 0 ? cg_reg_coord(dst, j, feed[s]) : 0;
        int jj = 0;
        for (int i = 0; i < src->nreg; i++)
            if (src->reg[i].dim >= 0 && (c[src->reg[i].dim] >> src->reg[i].bit) & 1)
                jj |= 1 << i;
        for (int s = 0; s < src->rank; s++)
            if (cg_reg_coord(src, jj, s) != c[s])
                return false;
        if (regmap)
            regmap[j] = jj;
    }
    return true;
}

bool cg_direct_same(const cg_layout *src, const cg_layout *dst, int32_t *regmap)
{
    if (src->rank != dst->rank)
        return false;
    int8_t feed[LOOM_MAX_RANK];
    for (int d = 0; d < src->rank; d++) {
        if (src->shape[d] != dst->shape[d])
            return false;
        feed[d] = (int8_t)d;
    }
    return cg_direct_map(src, dst, feed, regmap);
}

/* ---------------------------------------------------------------- the pass */

static const ir_type *vty(cg_ctx *cg, uint32_t v) { return &cg->k->vals[v].type; }

static int32_t add_blocked(cg_ctx *cg, const loom_shape *s, loom_dtype dt)
{
    cg_layout l;
    if (!cg_blocked(cg, s, cg_elsize(dt), &l))
        return -1;
    return cg_layout_add(cg, &l);
}

/* The layout class of each op: the `layout` column of dsl/ops.h, which says what each
 * class means (NONE first, so the invalid op 0 has none). */
enum { LAY_NONE, LAY_EW, LAY_SHAPE, LAY_REDUCE, LAY_LOAD, LAY_DOT, LAY_MMA, LAY_REGION };
static const uint8_t lay_class[IR_OP_COUNT] = {
#define LOOM_OP(E, n, nop, nreg, rule, fl, sem, lay, pr, attrs) [IR_##E] = LAY_##lay,
#include "ops.h"
#undef LOOM_OP
};

static bool is_ew(uint16_t kind) { return lay_class[kind] == LAY_EW; }

/* A value whose layout is decided by what it is made of (not recomputable). */
static bool fixed(cg_ctx *cg, uint32_t v)
{
    return vty(cg, v)->kind == IR_T_TILE && vty(cg, v)->shape.rank > 0 && !cg->remat[v];
}

/* Why shape s can have no wgmma accumulator layout in this task (in buf), or NULL when it
 * can: cg_mma_layout's checks, which layout_broadcast asks without failing. */
static const char *mma_unfit(const cg_ctx *cg, const loom_shape *s, char *buf, size_t n)
{
    if (s->rank != 2 || cg->warp_bits < 2)
        return "wgmma needs a task of whole warp groups (4, 8, ... warps)";
    int gbits = cg->warp_bits - 2, lm = cg_lg(s->dim[0]), ln = cg_lg(s->dim[1]);
    int mbits = lm - 6 - gbits; /* m64 blocks per warp group */
    if (mbits < 0 || ln < 3) {
        snprintf(buf, n, "an accumulator of %lldx%lld is too small for %d warp groups (each needs 64 rows and 8 "
                 "columns)", (long long)s->dim[0], (long long)s->dim[1], 1 << gbits);
        return buf;
    }
    if (2 + (ln - 3) + mbits > CG_MAXREGBITS) /* the register bits cg_mma_layout assigns */
        return "accumulator too large for one thread";
    return NULL;
}

/* The wgmma accumulator layout of an f32 tile [M, N] over the current task's warps
 * (cg->warp_bits: 4 warps a warp group, G = 2^(warp_bits-2) groups, each owning M/G
 * consecutive rows, in m64 blocks).  Per m64 block the instruction gives thread (lane,
 * warp w of the group) its registers i = 0..N/2-1 at row 16w + lane/4 + 8*((i/2)%2)
 * and column 2*(lane%4) + i%2 + 8*(i/4): in linear form reg bit 0 -> col 0, reg bit 1 ->
 * row 3, reg bits 2.. -> col 3.., then the m64 blocks -> rows 6..; lane bits 0,1 -> col
 * 1,2 and 2..4 -> rows 0..2; warp bits 0,1 -> rows 4,5, then the groups.  Register
 * number i + (N/2) * block is what lower_wgmma writes. */
int32_t cg_mma_layout(cg_ctx *cg, const loom_shape *s)
{
    char buf[200];
    const char *why = mma_unfit(cg, s, buf, sizeof buf);
    if (why)
        return cg_fail(cg, LOOM_ERR_UNSUPPORTED, "%s", why), -1;
    int gbits = cg->warp_bits - 2;
    int lm = cg_lg(s->dim[0]), ln = cg_lg(s->dim[1]);
    int mbits = lm - 6 - gbits; /* m64 blocks per warp group */
    cg_layout l = {0};
    l.rank = 2;
    l.shape[0] = s->dim[0];
    l.shape[1] = s->dim[1];
    l.lg[0] = (int8_t)lm;
    l.lg[1] = (int8_t)ln;
    l.parent = -1;
    int r = 0;
    l.reg[r++] = (cg_bit){1, 0};
    l.reg[r++] = (cg_bit){0, 3};
    for (int b = 3; b < ln; b++)
        l.reg[r++] = (cg_bit){1, (int8_t)b};
    for (int b = 0; b < mbits; b++)
        l.reg[r++] = (cg_bit){0, (int8_t)(6 + b)};
    l.nreg = r;
    l.lane[0] = (cg_bit){1, 1};
    l.lane[1] = (cg_bit){1, 2};
    l.lane[2] = (cg_bit){0, 0};
    l.lane[3] = (cg_bit){0, 1};
    l.lane[4] = (cg_bit){0, 2};
    l.nwarp = cg->warp_bits;
    l.warp[0] = (cg_bit){0, 4};
    l.warp[1] = (cg_bit){0, 5};
    for (int b = 0; b < gbits; b++)
        l.warp[2 + b] = (cg_bit){0, (int8_t)(6 + mbits + b)};
    int32_t id = cg_layout_add(cg, &l);
    if (id >= 0 && id < (int32_t)sizeof cg->is_mma)
        cg->is_mma[id] = 1;
    return id;
}

/* The layout of a wgmma A operand [M, K] in registers, for the accumulator layout acc (which
 * says how many warps the task has).  The m64nNk16 A fragment gives thread (lane, warp w)
 * of a warp group, per k16 chunk c, the elements a0..a7 at row 16w + lane/4 + 8*((i/2)%2)
 * and column 16c + 2*(lane%4) + i%2 + 8*(i/4): exactly the accumulator layout of an [M, K]
 * tile, whose registers 8c .. 8c+7 of each m64 block are chunk c's a0..a7 (lower_wgmma
 * packs them in pairs into four b32 registers).  So an f32 accumulator S [M, N] cast to
 * f16/bf16 is already the A operand of a wgmma with K = N: no data moves. */
int32_t cg_mma_a_layout(cg_ctx *cg, int32_t acc, const loom_shape *a)
{
    int saved = cg->warp_bits;
    cg->warp_bits = cg_lay(cg, acc)->nwarp;
    int32_t id = cg_mma_layout(cg, a);
    cg->warp_bits = saved;
    return id;
}

/* Layout id is a wgmma accumulator's. */
static bool mma_id(const cg_ctx *cg, int32_t id)
{
    return id >= 0 && id < (int32_t)sizeof cg->is_mma && cg->is_mma[id];
}

/* A layout made from an accumulator's by reductions and expand_dims (a row of it). */
static bool mma_row(const cg_ctx *cg, int32_t id)
{
    return id >= 0 && mma_id(cg, cg->lays[id].parent);
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
    if (sl->parent >= 0 && mma_id(cg, sl->parent) && !mma_unfit(cg, &rt->shape, why, sizeof why)) {
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
    uint8_t cls = lay_class[op->kind];
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
            int score = mma_id(cg, cg->vlay[x])                                   ? 5
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

/* ---------------------------------------------------------------- what the uses want
 *
 * After a first assignment, each value's uses are asked which layout they want it in, and
 * the answers flow backward through the ops that can take any layout their result needs
 * (Triton's backward rematerialization, in loom's terms):
 *
 *   - an elementwise op wants an operand in the result's layout when another operand
 *     decided it (an accumulator, a loaded tile); when the operand itself decided it (a
 *     cast, or the other operands are splats), what the result's uses want;
 *   - expand_dims wants its source in the slice of what its result's uses want, and a
 *     broadcast its source in that layout with the stretched dims' bits made duplicates:
 *     a row `bias[BN]` broadcast to [BM, BN] and added to an accumulator wants the
 *     accumulator's column slice, which every thread holds for its own registers;
 *   - a wgmma wants its register A operand in the A fragment's layout;
 *   - a store takes any layout; any other use wants the layout the value has.
 *
 * A load, whose layout is free (it can read any element into any register), then takes
 * the layout its uses agree on, and a broadcast the one its uses want where no data moves
 * (layout_broadcast); the kernel is laid out again with these preferences.  The result:
 * a bias row or a per-row scale is loaded straight into the registers that need it, a
 * residual tile is loaded in the accumulator's layout, and no conversion is left. */

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
    default:
        break;
    }
    if (!is_ew(op->kind) || !op->nres)
        return W_NONE;
    int32_t r = cg->vlay[op->res[0]];
    bool other = false;
    for (int j = 0; j < op->nopnd; j++) {
        uint32_t x = op->opnd[j];
        if (j == i || x == v || !fixed(cg, x) || cg->soft[x])
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
static bool prefer_loads(cg_ctx *cg, bool *changed)
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
        if (lay_class[kind] != LAY_LOAD && kind != IR_BROADCAST)
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
    cg->vlay = malloc(k->nvals * sizeof *cg->vlay);
    cg->remat = calloc(k->nvals, 1);
    cg->soft = calloc(k->nvals, 1);
    if (!cg->vlay || !cg->remat || !cg->soft)
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
    if (cg->st != LOOM_OK || !prefer_loads(cg, &changed) || !changed)
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

/* ---------------------------------------------------------------- divisibility */

static int64_t ctz_div(int64_t c)
{
    if (c == 0)
        return INT64_C(1) << 30;
    int64_t d = 1;
    while (!(c & d) && d < (INT64_C(1) << 30))
        d <<= 1;
    return d;
}

static int64_t dmin(int64_t a, int64_t b) { return a < b ? a : b; }

int64_t cg_divisor(cg_ctx *cg, uint32_t v)
{
    loom_kernel *k = cg->k;
    if (cg->div[v])
        return cg->div[v];
    cg->div[v] = 1; /* cycles (loop arguments) see 1 */
    const ir_value *val = &k->vals[v];
    int64_t d = 1;
    if (val->kind == IR_V_RESULT) {
        const ir_op *op = &k->ops[val->def];
        switch (op->kind) {
        case IR_CONST:
            d = ir_dtype_is_int((loom_dtype)op->iattr[0]) ? ctz_div(op->iattr[1]) : 1;
            break;
        case IR_MUL: {
            int64_t p = cg_divisor(cg, op->opnd[0]) * cg_divisor(cg, op->opnd[1]);
            d = dmin(p, INT64_C(1) << 30);
            break;
        }
        case IR_ADD:
        case IR_SUB:
        case IR_MIN:
        case IR_MAX:
            d = dmin(cg_divisor(cg, op->opnd[0]), cg_divisor(cg, op->opnd[1]));
            break;
        case IR_NEG:
        case IR_ABS:
            d = cg_divisor(cg, op->opnd[0]);
            break;
        case IR_SELECT:
            d = dmin(cg_divisor(cg, op->opnd[1]), cg_divisor(cg, op->opnd[2]));
            break;
        case IR_CAST:
            d = ir_dtype_is_int((loom_dtype)vty(cg, op->opnd[0])->dtype) ? cg_divisor(cg, op->opnd[0]) : 1;
            if ((loom_dtype)op->iattr[0] == LOOM_I32)
                d = dmin(d, INT64_C(1) << 30);
            break;
        default:
            d = 1;
        }
    } else if (val->kind == IR_V_ARG && k->args[val->def].is_dim) {
        d = ctz_div(k->args[val->def].dim_multiple); /* the dim's hint */
    } else if (val->kind == IR_V_BLOCKARG) {
        const ir_block *b = &k->blocks[val->def];
        const ir_op *p = &k->ops[b->parent];
        if (p->kind == IR_FOR && val->index == 0)
            d = dmin(cg_divisor(cg, p->opnd[0]), cg_divisor(cg, p->opnd[2]));
    }
    cg->div[v] = d;
    return d;
}

/* ---------------------------------------------------------------- axis info */

/* The padded length of dim d of v: the largest block any fact can be about. */
static int64_t axis_cap(cg_ctx *cg, uint32_t v, int d)
{
    return INT64_C(1) << cg_lg(vty(cg, v)->shape.dim[d]);
}

/* The largest power of two dividing every element of v (a scalar's divisor for rank 0). */
static int64_t elem_div(cg_ctx *cg, uint32_t v)
{
    const ir_type *t = vty(cg, v);
    if (!ir_dtype_is_int((loom_dtype)t->dtype))
        return 1;
    if (t->shape.rank == 0)
        return cg_divisor(cg, v);
    int64_t d = 1;
    for (int i = 0; i < t->shape.rank; i++) {
        cg_axis a = cg_axis_info(cg, v, i);
        if (a.contig > 1)
            return 1; /* neighbours differ by one */
        if (a.div > d)
            d = a.div;
    }
    return d;
}

/* Operand x of an op whose result is v, along the result's dim d: a scalar operand is
 * constant everywhere, with its own divisor. */
static cg_axis operand_axis(cg_ctx *cg, uint32_t x, uint32_t v, int d)
{
    if (vty(cg, x)->shape.rank == 0)
        return (cg_axis){axis_cap(cg, v, d), 1, elem_div(cg, x)};
    return cg_axis_info(cg, x, d);
}

/* The divisor of the element at each multiple of g along the dim (g a power of two). */
static int64_t div_at(cg_axis a, int64_t g)
{
    return a.contig > 1 && g < a.contig ? dmin(a.div, g) : a.div;
}

/* x < y (or x >= y) for x contiguous and y constant over aligned blocks of g: the same
 * answer over each block when x's first element and y are multiples of g. */
static int64_t cmp_block(cg_axis x, cg_axis y)
{
    int64_t g = dmin(x.contig, y.cnst);
    while (g > 1 && (div_at(x, g) % g || div_at(y, g) % g))
        g /= 2;
    return g;
}

static cg_axis axis_of(cg_ctx *cg, uint32_t v, int d)
{
    loom_kernel *k = cg->k;
    cg_axis none = {1, 1, 1};
    const ir_value *val = &k->vals[v];
    const ir_type *t = vty(cg, v);
    int64_t cap = axis_cap(cg, v, d);
    if (cap == 1) /* one element: constant, and as divisible as every element is */
        return none;
    if (val->kind != IR_V_RESULT)
        return none;
    const ir_op *op = &k->ops[val->def];
    bool is_int = ir_dtype_is_int((loom_dtype)t->dtype);
    switch (op->kind) {
    case IR_SPLAT:
        return (cg_axis){cap, 1, elem_div(cg, op->opnd[0])};
    case IR_ARANGE:
        return (cg_axis){1, cap, ctz_div(op->iattr[0])};
    case IR_BROADCAST: {
        uint32_t s = op->opnd[0];
        const ir_type *st = vty(cg, s);
        int sd = d - (t->shape.rank - st->shape.rank);
        if (sd >= 0 && st->shape.dim[sd] == t->shape.dim[d])
            return cg_axis_info(cg, s, sd);
        return (cg_axis){cap, 1, elem_div(cg, s)};
    }
    case IR_EXPAND_DIMS: {
        int a = (int)op->iattr[0];
        return cg_axis_info(cg, op->opnd[0], d < a ? d : d - 1); /* d == a has cap 1 */
    }
    case IR_TRANS:
        return cg_axis_info(cg, op->opnd[0], 1 - d);
    default:
        break;
    }
    if (lay_class[op->kind] == LAY_REDUCE) {
        /* combining values constant along d stays constant along d */
        int a = (int)op->iattr[0];
        cg_axis s = cg_axis_info(cg, op->opnd[0], d < a ? d : d + 1);
        return (cg_axis){s.cnst, 1, 1};
    }
    if (!is_ew(op->kind))
        return none;
    /* elementwise: constant inputs give a constant output */
    cg_axis x[3];
    int64_t cnst = cap;
    for (int i = 0; i < op->nopnd && i < 3; i++) {
        x[i] = operand_axis(cg, op->opnd[i], v, d);
        cnst = dmin(cnst, x[i].cnst);
    }
    cg_axis r = {cnst, 1, 1};
    switch (op->kind) {
    case IR_ADD:
    case IR_SUB:
        if (!is_int)
            break;
        /* contiguous + constant stays contiguous (x - constant too) */
        for (int i = 0; i < 2; i++) {
            if (op->kind == IR_SUB && i == 1)
                break;
            int64_t g = dmin(x[i].contig, x[1 - i].cnst);
            if (g > 1 && g > r.contig) {
                r.contig = g;
                r.div = dmin(div_at(x[i], g), div_at(x[1 - i], g));
            }
        }
        if (r.contig == 1)
            r.div = dmin(div_at(x[0], 1), div_at(x[1], 1));
        break;
    case IR_MUL:
        if (is_int)
            r.div = dmin(div_at(x[0], 1) * div_at(x[1], 1), INT64_C(1) << 30);
        break;
    case IR_NEG:
        if (is_int)
            r.div = div_at(x[0], 1);
        break;
    case IR_CAST:
        if (is_int && ir_dtype_is_int((loom_dtype)vty(cg, op->opnd[0])->dtype))
            r = x[0]; /* i32 <-> i64: a block starting at a multiple of g never wraps */
        break;
    case IR_CMP: {
        if (!ir_dtype_is_int((loom_dtype)vty(cg, op->opnd[0])->dtype))
            break;
        int p = (int)op->iattr[0];
        int64_t g = 1;
        if (p == LOOM_LT || p == LOOM_GE) /* contiguous x vs constant y */
            g = cmp_block(x[0], x[1]);
        else if (p == LOOM_GT || p == LOOM_LE) /* y > x is x < y; y <= x is x >= y */
            g = cmp_block(x[1], x[0]);
        if (g > r.cnst)
            r.cnst = g;
        break;
    }
    default:
        break;
    }
    return r;
}

cg_axis cg_axis_info(cg_ctx *cg, uint32_t v, int d)
{
    cg_axis none = {1, 1, 1};
    if (d < 0 || d >= LOOM_MAX_RANK || d >= vty(cg, v)->shape.rank)
        return none;
    if (!cg->axis) {
        cg->axis = calloc((size_t)cg->k->nvals * LOOM_MAX_RANK, sizeof *cg->axis);
        if (!cg->axis)
            return none; /* nothing known: every access stays correct, only narrower */
    }
    cg_axis *m = &cg->axis[(size_t)v * LOOM_MAX_RANK + d];
    if (m->div)
        return *m;
    *m = none; /* the analysis follows operands only, but be safe against cycles */
    cg_axis r = axis_of(cg, v, d);
    m = &cg->axis[(size_t)v * LOOM_MAX_RANK + d];
    *m = r;
    return r;
}
