/*
 * layout.c -- which thread holds which tile element: the layout algebra (blocked layouts,
 * slices, expand_dims, transposes, extensions, direct maps) and the wgmma layouts.  The
 * pass that gives every value of a kernel its layout is layout_pass.c (what the uses want:
 * layout_prefer.c); the divisibility and axis analyses are layout_axis.c.  The files'
 * shared internals are in layout.h.
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
 */
#include "layout.h"

#include <stdio.h>
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
    if (l->nreg >= CG_REGBITS_LIMIT)
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

bool cg_part(const cg_layout *p, int dim, int64_t size, cg_layout *out)
{
    int lgs = cg_lg(size);
    for (int i = 0; i < 5; i++)
        if (p->lane[i].dim == dim && p->lane[i].bit >= lgs)
            return false;
    for (int i = 0; i < p->nwarp; i++)
        if (p->warp[i].dim == dim && p->warp[i].bit >= lgs)
            return false;
    cg_layout l = *p;
    l.shape[dim] = size;
    l.lg[dim] = (int8_t)lgs;
    l.parent = -1;
    l.nreg = 0;
    for (int i = 0; i < p->nreg; i++)
        if (p->reg[i].dim != dim || p->reg[i].bit < lgs)
            l.reg[l.nreg++] = p->reg[i];
    *out = l;
    return true;
}

bool cg_widen(cg_ctx *cg, const cg_layout *r, int dim, int64_t full, cg_layout *out)
{
    cg_layout l = *r;
    l.shape[dim] = full;
    l.lg[dim] = (int8_t)cg_lg(full);
    l.parent = -1;
    for (int b = r->lg[dim]; b < l.lg[dim]; b++)
        if (!push_reg(cg, &l, dim, b))
            return false;
    *out = l;
    return true;
}

static bool direct_map(const cg_layout *src, const cg_layout *dst, const int8_t *feed, const int64_t *off,
                       int32_t *regmap);

bool cg_part_map(const cg_layout *src, const cg_layout *dst, int dim, int64_t start, int32_t *regmap)
{
    if (src->rank != dst->rank)
        return false;
    int8_t feed[LOOM_MAX_RANK];
    int64_t off[LOOM_MAX_RANK] = {0};
    for (int d = 0; d < src->rank; d++)
        feed[d] = (int8_t)d;
    off[dim] = start;
    return direct_map(src, dst, feed, off, regmap);
}

cg_layout cg_rowproj(const cg_layout *p)
{
    cg_layout l = *p;
    for (int d = p->rank - 1; d >= 1; d--)
        l = cg_slice(&l, -1, d);
    l.parent = -1;
    return l;
}

/* cg_direct_map with src's coordinates shifted by off (per src dim; NULL: none). */
static bool direct_map(const cg_layout *src, const cg_layout *dst, const int8_t *feed, const int64_t *off,
                       int32_t *regmap)
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
            c[s] = (feed[s] >= 0 ? cg_reg_coord(dst, j, feed[s]) : 0) + (off ? off[s] : 0);
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

bool cg_direct_map(const cg_layout *src, const cg_layout *dst, const int8_t *feed, int32_t *regmap)
{
    return direct_map(src, dst, feed, NULL, regmap);
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

/* ---------------------------------------------------------------- wgmma layouts */

/* Why shape s can have no wgmma accumulator layout in this task (in buf), or NULL when it
 * can: cg_mma_layout's checks, which layout_broadcast (layout_pass.c) asks without failing. */
const char *cg_mma_unfit(const cg_ctx *cg, const loom_shape *s, char *buf, size_t n)
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
    const char *why = cg_mma_unfit(cg, s, buf, sizeof buf);
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

/* ---------------------------------------------------------------- mma.sync layouts */

/* Register bits an mma.sync accumulator [M, N] takes a thread over 2^warp_bits warps. */
static int dot_mma_regbits(int64_t M, int64_t N, int warp_bits)
{
    int tile_bits = (cg_lg(M) - 4) + (cg_lg(N) - 3); /* the warp's m16n8 tiles: bits of their index */
    return 2 + tile_bits - (warp_bits < tile_bits ? warp_bits : tile_bits);
}

const char *cg_dot_mma_unfit(const cg_ctx *cg, const ir_op *op, int warp_bits, char *buf, size_t n)
{
    const ir_type *a = &cg->k->vals[op->opnd[0]].type, *b = &cg->k->vals[op->opnd[1]].type;
    long long M = a->shape.dim[0], K = a->shape.dim[1], N = b->shape.dim[1];
    bool fp8 = ir_dtype_is_fp8((loom_dtype)a->dtype);
    if (a->dtype != LOOM_F16 && a->dtype != LOOM_BF16 && !fp8)
        snprintf(buf, n, "its operands are %s; the tensor cores take f16, bf16, e4m3 and e5m2",
                 loom_dtype_name((loom_dtype)a->dtype));
    else if (!fp8 && atoi(cg->arch + 3) < 80)
        snprintf(buf, n, "the target %s is older than sm_80 (mma.sync m16n8k16 in f16 and bf16)", cg->arch);
    else if (fp8 && atoi(cg->arch + 3) < 89)
        snprintf(buf, n, "the target %s is older than sm_89 (mma.sync m16n8k32 in e4m3 and e5m2)", cg->arch);
    else if (fp8 && cg_fp8_mma_native(cg->arch) && (M % 16 || N % 8 || K % 32))
        snprintf(buf, n, "M x N x K = %lldx%lldx%lld is not made of m16n8k32 steps (M multiple of 16, N of 8, K of 32)",
                 M, N, K);
    else if (M % 16 || N % 8 || K % 16) /* FP8 where the target has no FP8 mma.sync: an f16 dot */
        snprintf(buf, n, "M x N x K = %lldx%lldx%lld is not made of m16n8k16 steps (M and K multiples of 16, N of 8)",
                 M, N, K);
    else if (dot_mma_regbits(M, N, warp_bits) > CG_REGBITS_LIMIT)
        snprintf(buf, n, "an accumulator of %lldx%lld takes more than 1024 registers a thread over %d warps", M, N,
                 1 << warp_bits);
    else
        return NULL;
    return buf;
}

/* The accumulator of mma.sync m16n8k16 gives lane l of a warp, in its registers c0..c3,
 * row l/4 + 8*(i/2) and column 2*(l%4) + i%2 of the warp's 16x8 tile: in linear form reg
 * bit 0 -> col 0, reg bit 1 -> row 3, lane bits 0,1 -> cols 1,2 and 2..4 -> rows 0..2.
 * The warps split the tile's 16-row blocks first (warp bits -> rows 4..), then its 8-column
 * blocks; the blocks left to a warp are its registers 4t.., columns first.  Warps beyond
 * the blocks duplicate.  Over 4 warps with M a multiple of 64, and over 8 with M = 128, this
 * is the wgmma accumulator's layout (cg_mma_layout). */
int32_t cg_dot_mma_layout(cg_ctx *cg, const loom_shape *s)
{
    cg_layout l = empty_layout(2, s->dim);
    int lm = l.lg[0], ln = l.lg[1], w = 0;
    for (int b = 4; b < lm && w < cg->warp_bits; b++)
        l.warp[w++] = (cg_bit){0, (int8_t)b};
    int mw = w; /* row bits 4 .. 4 + mw - 1 are the warps' */
    for (int b = 3; b < ln && w < cg->warp_bits; b++)
        l.warp[w++] = (cg_bit){1, (int8_t)b};
    int nw = w - mw;
    l.nwarp = cg->warp_bits;
    l.reg[l.nreg++] = (cg_bit){1, 0};
    l.reg[l.nreg++] = (cg_bit){0, 3};
    for (int b = 3 + nw; b < ln; b++)
        l.reg[l.nreg++] = (cg_bit){1, (int8_t)b};
    for (int b = 4 + mw; b < lm; b++)
        l.reg[l.nreg++] = (cg_bit){0, (int8_t)b};
    l.lane[0] = (cg_bit){1, 1};
    l.lane[1] = (cg_bit){1, 2};
    l.lane[2] = (cg_bit){0, 0};
    l.lane[3] = (cg_bit){0, 1};
    l.lane[4] = (cg_bit){0, 2};
    return cg_layout_add(cg, &l);
}
