/*
 * mainloop.c -- the consumer's k loop and the epilogue visitor of the pipeline layer
 * (include/loom_pipe.h, "the mainloop" and "epilogues").
 *
 * A warp-specialized GEMM's consumer does the same thing at every k step: wait until
 * the ring slot of use `it` is full, issue acc += A @ B from the slot's views, commit the
 * group, wait until one group is left in flight (so the previous step's wgmma is done
 * with its slot) and give that previous slot back.  The first step of a tile gives
 * nothing back (the previous tile's last slot went back in its finish); the finish waits
 * for the last group and gives the last slot back (right after the wait: the code
 * generator issues the two together).  templates/gemm.c and templates/ikbo_lce.c build
 * their k loops with it, and their PTX did not change when they moved here: the ops come
 * out in the order each template built by hand.  The two orders (`order`, 0 gemm's and 1
 * ikbo_lce's) differ only in where the slot-index arithmetic and the views are built
 * (order 1: B's view before A's, the previous use's index and its i1 before the consume,
 * the finish's slot index after its wait); LLVM schedules the same operations
 * differently (other register numbers and counts in the PTX).  Neither is measured faster;
 * once one is, the other goes.
 *
 * The epilogue visitor is the other half of a GEMM a user writes: a function of the
 * accumulator tile and its coordinates (loom_tile_at), whose result goes out through an
 * epilogue of pipe.c.  The coordinate helpers load row and column vectors (a bias row, a
 * per-row scale) as [cols] / [rows] vectors broadcast to the tile: the layout pass loads
 * them in the accumulator's slice, so they cost no conversion (docs/dsl.md, "What costs
 * what").
 */
#include "loom_pipe.h"
#include "ir.h"

#include <stdbool.h>

#define CI(v) loom_const_i_at(at, k, LOOM_I32, (v))

/* ---------------------------------------------------------------- the mainloop */

/* wgmma's A in slot s: the slot's A tile (replica rep's part of it where split). */
static loom_val a_of(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val s, loom_val rep)
{
    loom_val v = loom_ring_view_at(at, k, ml->ring, s, ml->a_tile, ml->a_split ? rep : LOOM_NONE);
    return ml->a_trans ? loom_smem_trans_at(at, k, v) : v;
}

static loom_val b_of(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val s)
{
    loom_val v = loom_ring_view_at(at, k, ml->ring, s, ml->b_tile, LOOM_NONE);
    if (ml->b_part)
        v = loom_smem_part_at(at, k, v, ml->b_trans ? 0 : 1, 0, ml->b_part);
    return ml->b_trans ? loom_smem_trans_at(at, k, v) : v;
}

static int pending(const loom_mainloop *ml) { return ml->in_flight < 0 ? 0 : ml->in_flight ? ml->in_flight : 1; }

loom_val loom_mainloop_issue_at(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val s, loom_val a,
                                loom_val acc, loom_val rep)
{
    loom_val bv = ml->order ? b_of(at, k, ml, s) : LOOM_NONE;
    loom_val av = a ? a : a_of(at, k, ml, s, rep);
    bv = bv ? bv : b_of(at, k, ml, s);
    acc = loom_wgmma_at(at, k, av, bv, acc ? acc : loom_mainloop_zero_at(at, k, ml));
    loom_wgmma_commit_at(at, k);
    return acc;
}

loom_val loom_mainloop_retire_at(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val acc, int left,
                                 loom_val s)
{
    loom_region_op w = loom_wgmma_wait_at(at, k, left, 1, &acc);
    if (s)
        loom_ring_release_at(at, k, ml->ring, s);
    return loom_wgmma_result(k, w, 0);
}

/* Consume use it, issue, commit, wait down to the groups in flight: the wait's region
 * (its result is the accumulator). */
static loom_region_op issue(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val it, loom_val rep, loom_val a,
                            loom_val *acc)
{
    loom_val s = loom_ring_consume_at(at, k, ml->ring, it);
    *acc = loom_mainloop_issue_at(at, k, ml, s, a, *acc, rep);
    return loom_wgmma_wait_at(at, k, pending(ml), 1, acc);
}

/* Ring use prev's slot back, where give_back (LOOM_NONE: always). */
static void give_back_slot(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val prev, loom_val give_back)
{
    loom_region_op pb = give_back ? loom_if_begin_at(at, k, give_back, 0) : LOOM_NO_REGION;
    loom_ring_release_at(at, k, ml->ring, loom_ring_slot_at(at, k, prev, ml->ring->slots));
    if (give_back)
        loom_if_end_at(at, k, pb, 0, NULL);
}

loom_val loom_mainloop_step_at(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val it, loom_val prev,
                               loom_val give_back, loom_val a, loom_val acc, loom_val rep)
{
    loom_region_op w = issue(at, k, ml, it, rep, a, &acc);
    if (prev)
        give_back_slot(at, k, ml, prev, give_back);
    return loom_wgmma_result(k, w, 0);
}

loom_val loom_mainloop_zero_at(loom_src at, loom_kernel *k, const loom_mainloop *ml)
{
    return loom_splat_at(at, k, loom_const_f_at(at, k, LOOM_F32, 0), LOOM_SHAPE2(ml->rows, ml->cols));
}

loom_val loom_mainloop_uses_at(loom_src at, loom_kernel *k, const loom_mainloop *ml)
{
    return ml->nsteps ? ml->nsteps : CI(ml->steps);
}

loom_val loom_mainloop_last_at(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val it0)
{
    if (ml->nsteps)
        return loom_add_at(at, k, it0, loom_sub_at(at, k, ml->nsteps, CI(1)));
    return loom_add_at(at, k, it0, CI(ml->steps - 1));
}

/* k step kk (ring use it0 + kk) into acc (LOOM_NONE: from zero), waited down to the
 * groups in flight, and the previous use's slot given back (where kk > 0 when
 * maybe_first: a tile's first step has no slot of its own to give back, the previous
 * tile's last went back in its finish).  The ops come out in the order `order` says. */
static loom_val k_step(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val it0, loom_val kk, loom_val rep,
                       loom_val acc, bool maybe_first, loom_val zero, loom_val one)
{
    loom_val it = loom_add_at(at, k, it0, kk);
    loom_val first = LOOM_NONE, prev = LOOM_NONE;
    if (ml->order) {
        first = maybe_first ? loom_cmp_at(at, k, LOOM_GT, kk, zero) : LOOM_NONE;
        prev = loom_sub_at(at, k, it, one);
    }
    loom_region_op w = issue(at, k, ml, it, rep, LOOM_NONE, &acc);
    if (!ml->order) {
        first = maybe_first ? loom_cmp_at(at, k, LOOM_GT, kk, zero) : LOOM_NONE;
        prev = loom_sub_at(at, k, it, one);
    }
    give_back_slot(at, k, ml, prev, first);
    return loom_wgmma_result(k, w, 0);
}

loom_val loom_mainloop_promote_at(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val acc_tc,
                                  loom_val acc_f32)
{
    (void)ml;
    loom_region_op w = loom_wgmma_wait_at(at, k, 0, 1, &acc_tc);
    loom_val done = loom_wgmma_result(k, w, 0);
    return acc_f32 ? loom_add_at(at, k, acc_f32, done) : done;
}

/* Promotion (loom_pipe.h): a loop over blocks of `promote` k steps, carrying acc_f32.  A
 * block's first step starts the tensor cores' accumulator from zero (a zero splat: the
 * wgmma's scale-d is off, nothing is moved); its other steps, a loop of their own
 * (min(P, the steps left) - 1 of them), add onto it; the block's end waits for its groups
 * and adds it into acc_f32. */
static loom_val run_promoted(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val it0, loom_val rep,
                             loom_val acc)
{
    loom_val zero = CI(0), one = CI(1), P = CI(ml->promote);
    loom_val f = acc ? acc : loom_mainloop_zero_at(at, k, ml);
    loom_val uses = loom_mainloop_uses_at(at, k, ml);
    loom_val nb = ml->nsteps ? loom_div_at(at, k, loom_add_at(at, k, uses, CI(ml->promote - 1)), P)
                             : CI((ml->steps + ml->promote - 1) / ml->promote);
    bool bs = ml->block_scale != NULL;
    loom_region_op bl = loom_for_begin_at(at, k, zero, nb, one, 1, &f);
    {
        loom_val b = loom_for_iv(k, bl), k0 = loom_mul_at(at, k, b, P);
        loom_val tc = k_step(at, k, ml, it0, k0, rep, LOOM_NONE, true, zero, one);
        /* the block's scales, its first ring use waited for (they may come with it) */
        loom_val scale = bs ? ml->block_scale(ml->block_ctx, k, b, rep) : LOOM_NONE;
        if (ml->promote > 1) {
            loom_val end = loom_min_at(at, k, loom_add_at(at, k, k0, P), uses);
            loom_region_op il = loom_for_begin_at(at, k, loom_add_at(at, k, k0, one), end, one, 1, &tc);
            loom_val r = k_step(at, k, ml, it0, loom_for_iv(k, il), rep, loom_for_arg(k, il, 0), false, zero, one);
            loom_for_end_at(at, k, il, 1, &r);
            tc = loom_for_result(k, il, 0);
        }
        loom_val y;
        if (bs) { /* acc_f32 += (the block's sum) * its rows' (or elements') scales, one fma an element */
            loom_shape sh = LOOM_SHAPE2(ml->rows, ml->cols);
            loom_val s2 = loom_val_shape(k, scale).rank == 2
                              ? scale
                              : loom_broadcast_at(at, k, loom_expand_dims_at(at, k, scale, 1), sh);
            y = loom_fma_at(at, k, loom_mainloop_promote_at(at, k, ml, tc, LOOM_NONE), s2, loom_for_arg(k, bl, 0));
        } else
            y = loom_mainloop_promote_at(at, k, ml, tc, loom_for_arg(k, bl, 0));
        loom_for_end_at(at, k, bl, 1, &y);
    }
    return loom_for_result(k, bl, 0);
}

loom_val loom_mainloop_run_at(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val it0, loom_val rep,
                              loom_val acc, int from)
{
    if (ml->promote > 0 && from)
        ir_error(k, at, "mainloop", "promote=%d takes loom_mainloop_run from k step 0 (from = %d): a first step "
                 "of your own would be a block of its own; promote it with loom_mainloop_promote", ml->promote, from);
    if (ml->promote > 0)
        return run_promoted(at, k, ml, it0, rep, acc);
    loom_val zero = CI(0), one = CI(1);
    if (!acc)
        acc = loom_mainloop_zero_at(at, k, ml);
    loom_region_op kl = loom_for_begin_at(at, k, from ? one : zero, loom_mainloop_uses_at(at, k, ml), one, 1, &acc);
    {
        loom_val res = k_step(at, k, ml, it0, loom_for_iv(k, kl), rep, loom_for_arg(k, kl, 0), !from, zero, one);
        loom_for_end_at(at, k, kl, 1, &res);
    }
    return loom_for_result(k, kl, 0);
}

loom_val loom_mainloop_finish_at(loom_src at, loom_kernel *k, const loom_mainloop *ml, loom_val acc, loom_val last)
{
    if (ml->promote > 0) { /* the run waited for its last block */
        if (last)
            loom_ring_release_at(at, k, ml->ring, loom_ring_slot_at(at, k, last, ml->ring->slots));
        return acc;
    }
    loom_val s = last && !ml->order ? loom_ring_slot_at(at, k, last, ml->ring->slots) : LOOM_NONE;
    loom_region_op w = loom_wgmma_wait_at(at, k, 0, 1, &acc);
    if (last)
        loom_ring_release_at(at, k, ml->ring, s ? s : loom_ring_slot_at(at, k, last, ml->ring->slots));
    return loom_wgmma_result(k, w, 0);
}

/* ---------------------------------------------------------------- the epilogue visitor */

static loom_val indices(loom_src at, loom_kernel *k, loom_val from, int64_t n)
{
    return loom_add_at(at, k, loom_arange_at(at, k, 0, n), loom_splat_at(at, k, from, LOOM_SHAPE1(n)));
}

loom_val loom_tile_rows_at(loom_src at, loom_kernel *k, const loom_tile_at *t)
{
    return indices(at, k, t->m0, t->rows);
}

loom_val loom_tile_cols_at(loom_src at, loom_kernel *k, const loom_tile_at *t)
{
    return indices(at, k, t->n0, t->cols);
}

/* v[.., from .. from + n) as a vector (a leading offset b where v has one more dim). */
static loom_val vector_at(loom_src at, loom_kernel *k, const loom_tile_at *t, loom_val v, loom_val from, int64_t n)
{
    loom_val o[2] = {from, LOOM_NONE};
    if (loom_val_shape(k, v).rank > 1)
        o[0] = t->b ? t->b : CI(0), o[1] = from;
    return loom_load_at(at, k, v, o, LOOM_SHAPE1(n), LOOM_NONE, 0.0);
}

loom_val loom_tile_row_vector_at(loom_src at, loom_kernel *k, const loom_tile_at *t, loom_val v)
{
    loom_val r = vector_at(at, k, t, v, t->n0, t->cols);
    return loom_broadcast_at(at, k, loom_expand_dims_at(at, k, r, 0), LOOM_SHAPE2(t->rows, t->cols));
}

loom_val loom_tile_col_vector_at(loom_src at, loom_kernel *k, const loom_tile_at *t, loom_val v)
{
    loom_val c = vector_at(at, k, t, v, t->m0, t->rows);
    return loom_broadcast_at(at, k, loom_expand_dims_at(at, k, c, 1), LOOM_SHAPE2(t->rows, t->cols));
}

void loom_tile_valid_at(loom_src at, loom_kernel *k, const loom_tile_at *t, loom_val *rows, loom_val *cols)
{
    if (rows)
        *rows = loom_min_at(at, k, CI(t->rows), loom_sub_at(at, k, t->M, t->m0));
    if (cols)
        *cols = loom_min_at(at, k, CI(t->cols), loom_sub_at(at, k, t->N, t->n0));
}

void loom_epilogue_visit_at(loom_src at, loom_kernel *k, const loom_epilogue *e, loom_epilogue_fn fn, void *ctx,
                            loom_val acc, const loom_tile_at *t, loom_val slot, loom_val j)
{
    loom_val v = fn ? fn(ctx, k, acc, t) : acc;
    loom_val o[3] = {t->b, t->m0, t->n0};
    const loom_val *offs = t->b ? o : o + 1;
    /* a register store's leading offset must index the output: a tile past the batch
     * stores nothing (a TMA store writes nothing there by itself) */
    bool guard = t->b && t->batch && e->kind == LOOM_EPI_REGISTERS;
    loom_region_op in =
        guard ? loom_if_begin_at(at, k, loom_cmp_at(at, k, LOOM_LT, t->b, t->batch), 0) : LOOM_NO_REGION;
    bool turn = e->kind == LOOM_EPI_HANDOVER || e->kind == LOOM_EPI_PARTS; /* a replica's own */
    loom_epilogue_store_at(at, k, e, offs, v, turn ? LOOM_NONE : slot, turn ? t->rep : LOOM_NONE, j);
    if (guard)
        loom_if_end_at(at, k, in, 0, NULL);
}
