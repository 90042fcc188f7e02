/*
 * ikbo_fa.c -- IKBO flash attention: out[b] = softmax(Q[b] K[u(b)]^T * scale) V[u(b)].
 *
 * Per head, non-causal.  Q and out [B * nseed, H, D] (a candidate's nseed query rows side
 * by side), K and V [U * S, H, D] (each user's keys padded to S rows), u = cand_to_user;
 * f16 or bf16 in and out, the softmax state in f32.  With varlen, keys past seq_len[u]
 * are masked.  Candidates never see a copy of their user's K/V: they read it by index.
 *
 * The work comes as a plan (templates/ikbo_fa_plan.c, made from the mapping): units of
 * two 64-row blocks of query rows that belong to one user.  One program takes a unit
 * (one head of it), and its two consumer warp groups, one block each, read the same
 * K/V tiles: one load of a tile feeds 128 query rows however the candidates are ordered.
 * The kernel, on the pipeline layer (include/loom_pipe.h):
 *
 *   rings     Q: one slot of two [64, D] parts (a warp group's block each); K/V: `stages`
 *             slots of a K tile and a V tile [BN, D], 128-byte swizzled
 *   schedule  persistent programs over (head, unit): the head outermost (horder=0), so
 *             that programs side by side share a user's K/V in L2, or innermost (horder=1),
 *             so that where a user has one or two units, programs side by side read the
 *             heads' parts of the same K/V rows (whole rows of memory, not every other
 *             piece); round-robin, or claimed from a counter (dynamic: the load balances
 *             itself when users' lengths differ)
 *   producer  per unit: the two Q blocks by TMA, then the user's K/V tiles, as many as
 *             its length needs (TMA reads rows past S as zero)
 *   consumers two warp groups, one Q block each.  For each K/V tile: S = Q K^T (both from
 *             shared memory), the online softmax in base 2 with the scale folded into
 *             one FMA (m = max(m, rowmax(S) * c), P = exp2(S * c - m), l and O rescaled
 *             by exp2(m_old - m)), then O += P V with P cast straight from the
 *             accumulator's registers into the A operand (no shared-memory round trip).
 *             With `turns`, the groups take turns to issue their GEMMs (loom_turns), so
 *             one's softmax runs while the other's GEMMs keep the tensor cores busy.
 *   epilogue  O / l cast to the dtype and, where every block is 64 whole rows
 *             (tmastore), TMA-stored through the group's part of the Q slot (FP8:
 *             through two staging slots of its own, below); else stored from the
 *             registers, the block's rows past its candidate's masked off (a block may
 *             end inside a candidate's rows)
 *
 * FP8 (dtype e4m3): Q, K and V^T (vtrans=1: [U, H, D, S], keys innermost, as FP8 wgmma
 * reads B K-major) in e4m3, out in odt; scales [3, H] gives each head's q_scale and
 * k_scale (folded into the softmax factor c) and v_scale (into 1 / l).  P = exp2(S c - m
 * + 8), 256 times the f16 kernel's, so that it fills e4m3's range; cast to e4m3 it is P V's
 * register A (codegen/lower_wgmma.c, fp8_step); l sums the unrounded P and the 2^8
 * cancels in O / l.  BN is 128; out goes out in [64, 64] column parts through two
 * staging slots a group (the Q slot is too small for an f16 block); xunit is not built.
 *
 * The measurements behind the defaults are in bench/RESULTS.md.
 */
#include "ikbo_fa.h"
#include "loom_pipe.h"
#include "../util/util.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

#define CI(v) loom_const_i(k, LOOM_I32, (v))
#define CF(v) loom_const_f(k, LOOM_F32, (v))

/* Shared memory the tiles of a CTA may take: 227 KiB less room for the barriers. */
#define FA_SMEM (226 * 1024)

int64_t fa_rows(const fa_spec *s) { return s->B * s->nseed; }
bool fa_fp8(const fa_spec *s) { return s->dt == LOOM_E4M3; }
loom_dtype fa_out_dt(const fa_spec *s) { return fa_fp8(s) ? s->odt : s->dt; }

/* Each candidate's rows split into blocks (consecutive candidates of one user share
 * blocks, so this bounds any mapping), and every block a unit of its own at worst. */
int64_t fa_max_units(const fa_spec *s) { return fa_units_max(s->B, s->nseed); }

static int64_t esz(const fa_spec *s) { return (int64_t)loom_dtype_size(s->dt); }
static int64_t q_bytes(const fa_spec *s) { return 2 * FA_BLOCK * s->D * esz(s); }
static int64_t kv_bytes(const fa_spec *s) { return (int64_t)s->stages * 2 * s->bn * s->D * esz(s); }
/* Every block of query rows is 64 full rows (a run of candidates of one user is a whole
 * number of blocks): the epilogue may TMA-store whole blocks. */
static bool full_blocks(const fa_spec *s) { return s->nseed % FA_BLOCK == 0; }
/* The output goes out by TMA through the Q slot (tmastore=1, full blocks; not with FP8,
 * whose Q slot is half an f16 block's bytes). */
static bool store_q(const fa_spec *s) { return s->tmastore && full_blocks(s) && !fa_fp8(s); }
/* FP8 (its Q slot too small for an f16 block): the output goes out by TMA through staging
 * slots of each warp group's own, [64, 64] column parts of a block, two a group
 * (LOOM_EPI_PARTS), not from the registers (4-byte stores: 7.7% of the consumers' stall
 * samples at the headline). */
static bool store_parts(const fa_spec *s) { return s->tmastore && full_blocks(s) && fa_fp8(s); }
static int64_t out_bytes(const fa_spec *s)
{
    return store_parts(s) ? 2 * 2 * FA_BLOCK * 64 * (int64_t)loom_dtype_size(fa_out_dt(s)) : 0;
}
/* Q slots: two where they fit (the next unit's Q comes in during this one's end), else one. */
static int q_slots(const fa_spec *s) { return 2 * q_bytes(s) + kv_bytes(s) + out_bytes(s) <= FA_SMEM ? 2 : 1; }
/* The Q slot an output block went out through goes back during the next unit's first
 * S = Q K^T, not right after the store: waiting there for the TMA store to read the slot
 * stalls the warp group's next GEMMs.  Needs the second Q slot (the next unit's Q is in
 * it) and the overlapped steps (first_tile); xunit takes the next unit's Q early. */
static bool defer_q(const fa_spec *s) { return store_q(s) && s->overlap && !s->xunit && q_slots(s) == 2; }
/* A tile's swizzle: 128 bytes, or a row's bytes where it is less (an FP8 row of 64). */
static loom_swizzle swz_of(const fa_spec *s, int64_t cols)
{
    int64_t b = cols * esz(s);
    return b >= 128 ? LOOM_SWIZZLE_128 : b == 64 ? LOOM_SWIZZLE_64 : LOOM_SWIZZLE_32;
}
/* Keys a tile reads that may be past the user's length: masked by column. */
static bool masked(const fa_spec *s) { return s->varlen || s->S % s->bn; }

/* The FP8 form's own rules (dtype e4m3), or NULL. */
static const char *fp8_why_not(const fa_spec *s)
{
    if (s->vtrans != 0 && s->vtrans != 1)
        return "vtrans must be 0 or 1";
    if (!fa_fp8(s))
        return s->vtrans ? "vtrans=1 (V given transposed) is for dtype e4m3, whose wgmma reads V K-major; f16 and "
                           "bf16 read V [U * S, H, D] as it is"
                         : NULL;
    if (!s->vtrans)
        return "dtype e4m3 needs vtrans=1: FP8 wgmma reads its B operand K-major (keys innermost), so V must come "
               "transposed, [U, H, D, S]";
    if (s->odt != LOOM_F16 && s->odt != LOOM_BF16)
        return "odt (out's type with e4m3 inputs) must be f16 or bf16";
    if (s->D % 32 || s->bn % 32)
        return "with e4m3, D and BN must be multiples of 32 (FP8 wgmma's k32 steps over D and over a tile's keys)";
    if (s->S % 16) /* Vt's rows are S keys: a TMA stride */
        return "with vtrans=1, S must be a multiple of 16 (a row of Vt is S e4m3 keys, and TMA takes strides of "
               "multiples of 16 bytes); pad each user's keys";
    if (s->bn != 128) /* P is quantized against the running max of 128-key tiles (fa_reference) */
        return "with e4m3, BN must be 128 (P's quantization to e4m3 follows the running max of 128-key tiles, as "
               "the reference computes it)";
    return NULL;
}

const char *fa_why_not(const fa_spec *s, char *buf, size_t n)
{
    if (s->dt != LOOM_F16 && s->dt != LOOM_BF16 && s->dt != LOOM_E4M3)
        return "dtype must be f16, bf16 (the tensor-core inputs) or e4m3 (FP8, with vtrans=1)";
    const char *f = fp8_why_not(s);
    if (f)
        return f;
    if (s->B < 1 || s->U < 1 || s->S < 1 || s->H < 1 || s->nseed < 1)
        return "B, U, S, H and n_seed must be positive";
    /* before any product of them: dims past 2^31 would overflow the checks below */
    const int64_t dims[] = {s->B, s->U, s->S, s->H, s->nseed};
    static const char *const dim_names[] = {"B", "U", "S", "H", "n_seed"};
    for (int i = 0; i < 5; i++)
        if (dims[i] > INT32_MAX) {
            snprintf(buf, n, "%s is %lld; each of B, U, S, H and n_seed must be between 1 and 2^31 - 1", dim_names[i],
                     (long long)dims[i]);
            return buf;
        }
    if (s->D != 64 && s->D != 128)
        return "D (the head dim) must be 64 or 128";
    if (s->varlen != 0 && s->varlen != 1)
        return "varlen must be 0 or 1";
    if (s->bn != 64 && s->bn != 128)
        return "BN (keys a tile) must be 64 or 128";
    if (s->stages < 2 || s->stages > 8)
        return "stages must be 2 to 8";
    if (q_bytes(s) + kv_bytes(s) + out_bytes(s) > FA_SMEM) {
        snprintf(buf, n, "the Q tiles (%lld bytes), the K/V ring (%lld) and the output's staging (%lld) need over "
                 "226 KiB of shared memory; use fewer stages or a smaller BN", (long long)q_bytes(s),
                 (long long)kv_bytes(s), (long long)out_bytes(s));
        return buf;
    }
    if (s->ctas < 1 || s->ctas > 1024)
        return "ctas (persistent programs) must be 1 to 1024";
    if (s->xunit && q_slots(s) < 2) /* the next unit's Q is taken before this unit's slot goes back */
        return "xunit=1 needs two Q slots: with this K/V ring only one fits in shared memory; use fewer stages";
    if (s->sched != 0 && s->sched != 1)
        return "sched must be 0 (round-robin) or 1 (dynamic)";
    if (s->turns != 0 && s->turns != 1)
        return "turns must be 0 or 1";
    if (s->overlap != 0 && s->overlap != 1)
        return "overlap must be 0 or 1";
    if (s->tmastore != 0 && s->tmastore != 1)
        return "tmastore must be 0 or 1";
    if (s->xunit != 0 && s->xunit != 1)
        return "xunit must be 0 or 1";
    if (s->xunit && fa_fp8(s)) /* the next unit's first softmax would need its head's scales */
        return "xunit=1 is not built for e4m3";
    if (s->horder != 0 && s->horder != 1)
        return "horder must be 0 or 1";
    if (s->xunit && (s->sched || !s->overlap || s->turns))
        return "xunit=1 (the next unit started beside this one's last P V) needs sched=0, overlap=1 and turns=0";
    /* each factor is below 2^31 here, their products may pass 2^63: checked (util.h) */
    const int64_t fq[] = {s->B, s->nseed, s->H, s->D}, fk[] = {s->U, s->S, s->H, s->D};
    int64_t units = 0, qn = 0, kn = 0;
    if (!util_mul_i64(fa_max_units(s), s->H, &units) || units > INT32_MAX / 2 || !util_prod_i64(fq, 4, &qn) ||
        qn > INT32_MAX || !util_prod_i64(fk, 4, &kn) || kn > INT32_MAX)
        return "the tensors are too large for 32-bit element offsets (q is B * n_seed * H * D elements, k and v "
               "U * S * H * D: each must be below 2^31, and the units times H below 2^30)";
    return NULL;
}

void fa_grid(const fa_spec *s, int grid[3])
{
    int64_t units = fa_max_units(s) * s->H;
    grid[0] = (int)(s->ctas < units ? s->ctas : units);
    grid[1] = grid[2] = 1;
}


/* Everything the tasks share. */
typedef struct fa {
    loom_kernel *k;
    const fa_spec *s;
    loom_val q, kt, vt, plan, lens, units, out, scales;
    loom_val c, vs; /* FP8: the unit's head's softmax factor and v_scale (LOOM_NONE otherwise) */
    loom_ring qring, kr, vr; /* Q blocks; K and V tiles, each its own ring (a K tile is done before its V) */
    loom_mainloop qk, pv;    /* S = Q K^T over the K ring, O += P V over the V ring */
    loom_sched sched;
    loom_turns turns;
    loom_sync wg; /* one consumer warp group's threads (per replica) */
    loom_epilogue oepi; /* store_parts: each group's staging slots */
} fa;

/* Unit t of the schedule: its head, its plan entry and its user's length and K/V tiles. */
typedef struct unit_at {
    loom_val h, i, user, len, tiles;
} unit_at;

static unit_at unit_of(const fa *g, loom_val t)
{
    loom_kernel *k = g->k;
    unit_at a;
    if (g->s->horder) { /* a unit's heads side by side */
        a.h = loom_rem(k, t, CI(g->s->H));
        a.i = loom_div(k, t, CI(g->s->H));
    } else {
        a.h = loom_div(k, t, g->units);
        a.i = loom_rem(k, t, g->units);
    }
    a.user = loom_load_scalar(k, g->plan, ((loom_val[]){a.i, CI(FA_U_USER)}));
    a.len = loom_load_scalar(k, g->lens, &a.user);
    a.tiles = loom_div(k, loom_add(k, a.len, CI(g->s->bn - 1)), CI(g->s->bn));
    return a;
}

/* Plan field f of entry i. */
static loom_val field(const fa *g, loom_val i, loom_val f)
{
    return loom_load_scalar(g->k, g->plan, ((loom_val[]){i, f}));
}

/* Producer: unit a's two Q blocks into Q ring use qit. */
static void load_q(const fa *g, const unit_at *a, loom_val qit)
{
    loom_kernel *k = g->k;
    loom_val qs = loom_ring_produce(k, &g->qring, qit, -1);
    for (int b = 0; b < 2; b++) {
        loom_val q0 = field(g, a->i, CI(b ? FA_U_Q1 : FA_U_Q0));
        loom_ring_load(k, &g->qring, qs, 0, b, g->q, ((loom_val[]){a->h, q0, CI(0)}));
    }
}

/* Producer: per unit, the user's K/V tiles (ring uses it, it + 1, ... carried over units;
 * qit counts the units) and the two Q blocks right after the first K/V tile: that tile
 * need not wait until the consumers give the Q slot back, which they do at the end of
 * the previous unit. */
static void producer(const fa *g)
{
    loom_kernel *k = g->k;
    loom_val zero = CI(0), one = CI(1);
    loom_region_op pt = loom_producer_begin(k);
    {
        loom_val init[2] = {zero, zero};
        loom_sched_loop l = loom_sched_begin(k, &g->sched, LOOM_SCHED_PRODUCER, LOOM_NONE, 2, init);
        unit_at a = unit_of(g, loom_sched_unit(&l));
        loom_val it = loom_sched_arg(&l, 0), qit = loom_sched_arg(&l, 1);
        loom_region_op kl = loom_for_begin(k, zero, a.tiles, one, 0, NULL);
        {
            loom_val j = loom_for_iv(k, kl);
            loom_val offs[4] = {a.h, a.user, loom_mul(k, j, CI(g->s->bn)), zero};
            loom_ring_load(k, &g->kr, loom_ring_produce(k, &g->kr, loom_add(k, it, j), -1), 0, 0, g->kt, offs);
            loom_val voffs[4] = {a.h, a.user, zero, offs[2]}; /* vtrans: [D, BN] of Vt */
            loom_ring_load(k, &g->vr, loom_ring_produce(k, &g->vr, loom_add(k, it, j), -1), 0, 0, g->vt,
                           g->s->vtrans ? voffs : offs);
            loom_region_op first = loom_if_begin(k, loom_cmp(k, LOOM_EQ, j, zero), 0);
            load_q(g, &a, qit);
            loom_if_end(k, first, 0, NULL);
        }
        loom_for_end(k, kl, 0, NULL);
        loom_region_op none = loom_if_begin(k, loom_cmp(k, LOOM_EQ, a.tiles, zero), 0); /* no keys: Q all the same */
        load_q(g, &a, qit);
        loom_if_end(k, none, 0, NULL);
        loom_val next[2] = {loom_add(k, it, a.tiles), loom_add(k, qit, one)};
        loom_sched_end(k, &l, next);
    }
    loom_task_end(k, pt);
}

/* The online softmax state of a warp group's 64 rows. */
typedef struct softmax_state {
    loom_val m, l, o; /* running max (scaled, base 2) [64], sum [64], output [64, D] */
} softmax_state;

/* S = Q K^T of K ring slot sl, from zero (issued and committed, not waited for). */
static loom_val qk(const fa *g, loom_val qv, loom_val sl)
{
    return loom_mainloop_issue(g->k, &g->qk, sl, qv, LOOM_NONE, LOOM_NONE);
}

/* The online softmax of S (keys j0 ..; those past len masked where the tiles can reach
 * past a user's keys): m = max(m, rowmax(S) * c), P = exp2(S * c - m), l = l * alpha +
 * rowsum(P) with alpha = exp2(m_old - m).  Returns P (f32) and, in *alpha, the factor O
 * still has to be scaled by; st's m and l are updated, its o is left alone. */
static loom_val online_softmax(const fa *g, loom_val sc, loom_val j0, loom_val len, softmax_state *st,
                               loom_val *alpha)
{
    loom_kernel *k = g->k;
    const fa_spec *s = g->s;
    loom_shape sh = LOOM_SHAPE2(FA_BLOCK, s->bn);
    loom_val c = g->c ? g->c : CF(fa_softmax_factor(s->D));
    if (masked(s)) { /* keys j0 + col past the user's length: -inf */
        loom_val col = loom_add(k, loom_arange(k, 0, s->bn), j0);
        loom_val keep = loom_broadcast(k, loom_expand_dims(k, loom_cmp(k, LOOM_LT, col, len), 0), sh);
        sc = loom_select(k, keep, sc, loom_splat(k, CF(-INFINITY), sh));
    }
    loom_val m_new = loom_max(k, st->m, loom_mul(k, loom_reduce_max(k, sc, 1), c));
    loom_val off = loom_neg(k, m_new); /* FP8: P scaled by 2^8 (added to the exponent), for e4m3's range */
    if (fa_fp8(s))
        off = loom_add(k, off, loom_splat(k, CF((double)FA_FP8_P_LOG2), LOOM_SHAPE1(FA_BLOCK)));
    loom_val p = loom_exp2(k, loom_fma(k, sc, loom_splat(k, c, sh), loom_broadcast(k, loom_expand_dims(k, off, 1), sh)));
    *alpha = loom_exp2(k, loom_sub(k, st->m, m_new));
    st->l = loom_fma(k, st->l, *alpha, loom_reduce_sum(k, p, 1));
    st->m = m_new;
    return p;
}

static loom_val scale_rows(loom_kernel *k, loom_val o, loom_val by)
{
    return loom_mul(k, o, loom_broadcast(k, loom_expand_dims(k, by, 1), loom_val_shape(k, o)));
}

/* A turn on the tensor cores (turns=1): the groups issue their GEMMs one after the
 * other, so that one's softmax runs beside the other's GEMMs. */
static void turn_begin(const fa *g)
{
    if (g->s->turns)
        loom_turns_begin(g->k, &g->turns);
}
static void turn_issued(const fa *g)
{
    if (g->s->turns)
        loom_turns_end(g->k, &g->turns);
}

/* The K/V steps below run two of the pipeline layer's mainloops (pipe/mainloop.c) by
 * their halves, issue and retire, rather than as k loops: a K/V tile is two GEMMs on two
 * rings with the online softmax between them.  S = Q K^T (g->qk) starts from zero every
 * tile and is retired at once (the softmax needs it); O += P V (g->pv) takes P from the
 * registers and O rescaled between steps; the overlapped form keeps one GEMM of each kind
 * in flight across tiles (S retired with one group left: the P V issued after it). */

/* One K/V tile (ring use `use`, its first key j0), one GEMM after the other: S = Q K^T,
 * the online softmax, O += P V; the slot goes back once both are done.  With turns the
 * groups take turns to issue S = Q K^T. */
static softmax_state kv_step(const fa *g, loom_val qv, loom_val use, loom_val j0, loom_val len, softmax_state st)
{
    loom_kernel *k = g->k;
    loom_val sk = loom_ring_consume(k, &g->kr, use), alpha;
    turn_begin(g);
    loom_val sc = qk(g, qv, sk);
    turn_issued(g);
    sc = loom_mainloop_retire(k, &g->qk, sc, 0, sk);
    loom_val p = online_softmax(g, sc, j0, len, &st, &alpha);
    loom_val sv = loom_ring_consume(k, &g->vr, use);
    loom_val o = loom_mainloop_issue(k, &g->pv, sv, loom_cast(k, p, g->s->dt), scale_rows(k, st.o, alpha), LOOM_NONE);
    st.o = loom_mainloop_retire(k, &g->pv, o, 0, sv);
    return st;
}

/* defer_q: where pend (i32) is a Q ring use (not -1), wait until the store through its
 * slot has read it, then give the slot back. */
static void give_back_q(const fa *g, loom_val pend)
{
    loom_kernel *k = g->k;
    loom_epilogue_return_slot(k, &g->qring, loom_cmp(k, LOOM_GE, pend, CI(0)), pend);
}

/* Tile 0 of a unit (K ring use `use`): S = Q K^T and its softmax from the state st (the K
 * slot goes back once S is done); returns P in the dtype, st's m and l updated.  pend
 * (defer_q, else LOOM_NONE): the previous unit's Q slot, given back while S is computed. */
static loom_val first_tile(const fa *g, loom_val qv, loom_val use, loom_val len, softmax_state *st, loom_val pend)
{
    loom_kernel *k = g->k;
    loom_val alpha;
    loom_val sk0 = loom_ring_consume(k, &g->kr, use);
    turn_begin(g);
    loom_val sc = qk(g, qv, sk0);
    turn_issued(g);
    if (pend)
        give_back_q(g, pend);
    sc = loom_mainloop_retire(k, &g->qk, sc, 0, sk0);
    return loom_cast(k, online_softmax(g, sc, CI(0), len, st, &alpha), g->s->dt);
}

/* Tiles 1 .. tiles - 1 of a unit (ring uses it + 1 ..), tile 0's P (p0) and statistics in
 * st: tile j's S = Q K^T and tile j-1's O += P V are issued together, and the softmax of
 * tile j runs while P V is still on the tensor cores; O is rescaled once that is done.
 * Returns the loop: its results are m, l, O (without the last tile's P V) and the last
 * tile's P. */
static loom_region_op kv_rest(const fa *g, loom_val qv, loom_val it, loom_val tiles, loom_val len, softmax_state st,
                              loom_val p0)
{
    loom_kernel *k = g->k;
    const fa_spec *s = g->s;
    loom_val one = CI(1), alpha;
    loom_val init[4] = {st.m, st.l, st.o, p0};
    loom_region_op kl = loom_for_begin(k, one, tiles, one, 4, init);
    {
        loom_val j = loom_for_iv(k, kl);
        softmax_state cur = {loom_for_arg(k, kl, 0), loom_for_arg(k, kl, 1), loom_for_arg(k, kl, 2)};
        loom_val use = loom_add(k, it, j);
        loom_val sk = loom_ring_consume(k, &g->kr, use);
        loom_val sv = loom_ring_consume(k, &g->vr, loom_sub(k, use, one)); /* the previous tile's V */
        turn_begin(g);
        loom_val sj = qk(g, qv, sk);
        loom_val o = loom_mainloop_issue(k, &g->pv, sv, loom_for_arg(k, kl, 3), cur.o, LOOM_NONE);
        turn_issued(g);
        sj = loom_mainloop_retire(k, &g->qk, sj, 1, sk); /* the P V still in flight */
        loom_val pj = online_softmax(g, sj, loom_mul(k, j, CI(s->bn)), len, &cur, &alpha);
        o = loom_mainloop_retire(k, &g->pv, o, 0, sv);
        loom_val ys[4] = {cur.m, cur.l, scale_rows(k, o, alpha), loom_cast(k, pj, s->dt)};
        loom_for_end(k, kl, 4, ys);
    }
    return kl;
}

/* The last tile's O += P V (V ring use `use`); returns O. */
static loom_val last_pv(const fa *g, loom_val use, loom_val p, loom_val o)
{
    loom_kernel *k = g->k;
    loom_val last = loom_ring_consume(k, &g->vr, use);
    turn_begin(g);
    loom_val acc = loom_mainloop_issue(k, &g->pv, last, p, o, LOOM_NONE);
    turn_issued(g);
    return loom_mainloop_retire(k, &g->pv, acc, 0, last);
}

/* A unit's K/V tiles 0 .. tiles - 1 (ring uses it ..), the GEMMs overlapped with the
 * softmax (overlap=1, kv_rest).  Where qs is given, the Q slot goes back as soon as the
 * last S = Q K^T is done; pend: first_tile's (a unit with no keys gives it back at once). */
static softmax_state kv_pipelined(const fa *g, loom_val qv, loom_val qs, loom_val it, loom_val tiles, loom_val len,
                                  softmax_state st, loom_val pend)
{
    loom_kernel *k = g->k;
    loom_val zero = CI(0), one = CI(1);
    loom_val none[3] = {st.m, st.l, st.o}; /* a user with no keys: the state as it came */
    loom_region_op any = loom_if_begin(k, loom_cmp(k, LOOM_GT, tiles, zero), 3);
    {
        loom_val p0 = first_tile(g, qv, it, len, &st, pend);
        loom_region_op kl = kv_rest(g, qv, it, tiles, len, st, p0);
        if (qs)
            loom_ring_release(k, &g->qring, qs);
        loom_val o = last_pv(g, loom_add(k, it, loom_sub(k, tiles, one)), loom_for_result(k, kl, 3),
                             loom_for_result(k, kl, 2));
        loom_val ys[3] = {loom_for_result(k, kl, 0), loom_for_result(k, kl, 1), o};
        loom_else(k, any, 3, ys);
    }
    if (qs)
        loom_ring_release(k, &g->qring, qs);
    if (pend)
        give_back_q(g, pend);
    loom_if_end(k, any, 3, none);
    return (softmax_state){loom_if_result(k, any, 0), loom_if_result(k, any, 1), loom_if_result(k, any, 2)};
}

/* What a unit hands the next one (xunit=1): whether the next unit's tile 0 is done
 * (pend, i32), and if so its softmax statistics and P. */
typedef struct xunit_carry {
    loom_val pend, m, l, p;
} xunit_carry;

/* The state of a new block of rows: max -inf, sum 0, O 0. */
static softmax_state fresh_state(const fa *g)
{
    loom_kernel *k = g->k;
    return (softmax_state){loom_splat(k, CF(-INFINITY), LOOM_SHAPE1(FA_BLOCK)), loom_splat(k, CF(0), LOOM_SHAPE1(FA_BLOCK)),
                           loom_splat(k, CF(0), LOOM_SHAPE2(FA_BLOCK, g->s->D))};
}

/* xunit=1: kv_pipelined across units.  Tile 0 comes from the previous unit (in `in`) or
 * is computed here; at the end, where this program has a next unit with keys, its tile 0
 * S = Q' K'^T is issued just before this unit's last P V, and its softmax runs while that
 * P V is on the tensor cores, so the tensor cores do not wait for this unit's epilogue
 * and the next unit's first softmax.  The next unit's Q (ring use qit + 1) and K (use it
 * + tiles) are taken here; it takes them again (their phases are done, so the waits
 * pass) but computes no tile 0.  Returns this unit's state; *out what goes to the next. */
static softmax_state kv_across_units(const fa *g, loom_sched_loop *l, loom_val qv, loom_val qs, loom_val it,
                                     loom_val qit, const unit_at *a, loom_val rep, xunit_carry in, xunit_carry *out)
{
    loom_kernel *k = g->k;
    loom_val zero = CI(0), one = CI(1);
    softmax_state st0 = fresh_state(g);
    loom_val none[7] = {st0.m, st0.l, st0.o, zero, in.m, in.l, in.p}; /* no keys: nothing started either */
    loom_region_op any = loom_if_begin(k, loom_cmp(k, LOOM_GT, a->tiles, zero), 7);
    {
        /* tile 0: here, unless the previous unit ran it */
        loom_region_op t0 = loom_if_begin(k, loom_cmp(k, LOOM_EQ, in.pend, zero), 3);
        {
            softmax_state st = st0;
            loom_val p0 = first_tile(g, qv, it, a->len, &st, LOOM_NONE);
            loom_val ys[3] = {st.m, st.l, p0};
            loom_else(k, t0, 3, ys);
        }
        loom_val carried[3] = {in.m, in.l, in.p};
        loom_if_end(k, t0, 3, carried);
        softmax_state st = {loom_if_result(k, t0, 0), loom_if_result(k, t0, 1), st0.o};
        loom_region_op kl = kv_rest(g, qv, it, a->tiles, a->len, st, loom_if_result(k, t0, 2));
        if (qs)
            loom_ring_release(k, &g->qring, qs);
        loom_val m = loom_for_result(k, kl, 0), lsum = loom_for_result(k, kl, 1), o = loom_for_result(k, kl, 2);
        loom_val p = loom_for_result(k, kl, 3);
        loom_val lastv = loom_add(k, it, loom_sub(k, a->tiles, one));
        /* the next unit, if it has keys: its tile 0 beside this unit's last P V */
        loom_val next, has;
        loom_sched_peek(k, l, &next, &has);
        unit_at b = unit_of(g, next);
        loom_val go = loom_and(k, has, loom_cmp(k, LOOM_GT, b.tiles, zero));
        loom_region_op x = loom_if_begin(k, go, 4);
        {
            loom_val qs2 = loom_ring_consume(k, &g->qring, loom_add(k, qit, one));
            loom_val qv2 = loom_ring_view(k, &g->qring, qs2, 0, rep);
            loom_val nk = loom_add(k, it, a->tiles);
            loom_val sk = loom_ring_consume(k, &g->kr, nk);
            loom_val sv = loom_ring_consume(k, &g->vr, lastv);
            loom_val sc = qk(g, qv2, sk);
            loom_val acc = loom_mainloop_issue(k, &g->pv, sv, p, o, LOOM_NONE);
            sc = loom_mainloop_retire(k, &g->qk, sc, 1, sk); /* the P V still in flight */
            softmax_state nst = st0;
            loom_val alpha;
            loom_val p2 = loom_cast(k, online_softmax(g, sc, zero, b.len, &nst, &alpha), g->s->dt);
            acc = loom_mainloop_retire(k, &g->pv, acc, 0, sv);
            loom_val ys[4] = {acc, nst.m, nst.l, p2};
            loom_else(k, x, 4, ys);
        }
        loom_val alone[4] = {last_pv(g, lastv, p, o), m, lsum, p}; /* (m, l, p: not read) */
        loom_if_end(k, x, 4, alone);
        loom_val ys[7] = {m, lsum, loom_if_result(k, x, 0), loom_select(k, go, one, zero), loom_if_result(k, x, 1),
                          loom_if_result(k, x, 2), loom_if_result(k, x, 3)};
        loom_else(k, any, 7, ys);
    }
    if (qs)
        loom_ring_release(k, &g->qring, qs);
    loom_if_end(k, any, 7, none);
    *out = (xunit_carry){loom_if_result(k, any, 3), loom_if_result(k, any, 4), loom_if_result(k, any, 5),
                         loom_if_result(k, any, 6)};
    return (softmax_state){loom_if_result(k, any, 0), loom_if_result(k, any, 1), loom_if_result(k, any, 2)};
}

/* A unit's second block may have no rows (an odd block of its user: the plan pairs it
 * with its own rows again, none stored).  In the low-reuse form (horder=1, where most of
 * a user's units are one block), with the overlapped steps and no turns (the groups wait
 * for each other's turns) or xunit, its group then computes nothing.  Not in the
 * head-by-head form: the branch around the unit's steps cost 5% at the headline on an H100
 * (bench/RESULTS.md, session 29), whose units are all pairs. */
static bool idle_partner(const fa_spec *s) { return s->horder && s->overlap && !s->turns && !s->xunit; }

/* The group with no rows in this unit: its K/V ring uses it .. it + tiles - 1 taken and
 * given back (each slot waits for both groups), the previous unit's Q slot given back
 * (pend, defer_q) and this one's as the group that computes gives its own. */
static void idle_unit(const fa *g, loom_val qs, loom_val it, loom_val qit, loom_val tiles, loom_val pend)
{
    loom_kernel *k = g->k;
    const fa_spec *s = g->s;
    if (pend)
        give_back_q(g, pend);
    loom_region_op kl = loom_for_begin(k, CI(0), tiles, CI(1), 0, NULL);
    {
        loom_val use = loom_add(k, it, loom_for_iv(k, kl));
        loom_ring_release(k, &g->kr, loom_ring_consume(k, &g->kr, use));
        loom_ring_release(k, &g->vr, loom_ring_consume(k, &g->vr, use));
    }
    loom_for_end(k, kl, 0, NULL);
    if (!store_q(s))
        loom_ring_release(k, &g->qring, qs);
    else if (!defer_q(s)) /* (nothing stored: the wait passes) */
        loom_epilogue_return_slot(k, &g->qring, loom_const_i(k, LOOM_I1, 1), qit);
}

/* FP8: head h's q_scale * k_scale folded into the softmax factor (log2(e) / sqrt(D) times
 * it: two f32 roundings) and its v_scale, for the unit's steps to read. */
static void head_scales(fa *g, loom_val h)
{
    loom_kernel *k = g->k;
    loom_val qs = loom_load_scalar(k, g->scales, ((loom_val[]){CI(0), h}));
    loom_val ks = loom_load_scalar(k, g->scales, ((loom_val[]){CI(1), h}));
    g->vs = loom_load_scalar(k, g->scales, ((loom_val[]){CI(2), h}));
    g->c = loom_mul(k, CF(fa_softmax_factor(g->s->D)), loom_mul(k, qs, ks));
}

/* Consumers: two warp groups, replica r the unit's block r. */
static void consumers(fa *g)
{
    loom_kernel *k = g->k;
    const fa_spec *s = g->s;
    loom_val zero = CI(0), one = CI(1);
    loom_region_op ct = loom_consumers_begin(k, 4, 2);
    {
        loom_val rep = s->turns ? loom_turns_start(k, &g->turns) : loom_task_replica(k);
        /* carried: the K/V and Q ring uses; with xunit, what the previous unit started
         * (nothing yet: pend 0, and m, l, P unread until it is 1); with defer_q, the Q use
         * whose slot the last store still holds (-1: none) */
        loom_val init[6] = {zero, zero};
        if (defer_q(s))
            init[2] = CI(-1);
        if (s->xunit) {
            init[2] = zero;
            init[3] = loom_splat(k, CF(-INFINITY), LOOM_SHAPE1(FA_BLOCK));
            init[4] = loom_splat(k, CF(0), LOOM_SHAPE1(FA_BLOCK));
            init[5] = loom_splat(k, loom_const_f(k, s->dt, 0), LOOM_SHAPE2(FA_BLOCK, s->bn));
        }
        int ncarry = s->xunit ? 6 : defer_q(s) ? 3 : 2;
        loom_sched_loop l = loom_sched_begin(k, &g->sched, LOOM_SCHED_CONSUMER, LOOM_NONE, ncarry, init);
        unit_at a = unit_of(g, loom_sched_unit(&l));
        loom_val it = loom_sched_arg(&l, 0), qit = loom_sched_arg(&l, 1);
        loom_val pend = defer_q(s) ? loom_sched_arg(&l, 2) : LOOM_NONE; /* the last store's Q use */
        xunit_carry next = {0};
        if (fa_fp8(s))
            head_scales(g, a.h);
        /* this group's block: fields Q0, N0 or Q1, N1 */
        loom_val fq = loom_add(k, CI(FA_U_Q0), loom_mul(k, rep, CI(FA_U_Q1 - FA_U_Q0)));
        loom_val q0 = field(g, a.i, fq), rows = field(g, a.i, loom_add(k, fq, one));
        loom_val qs = loom_ring_consume(k, &g->qring, qit);
        loom_val qv = loom_ring_view(k, &g->qring, qs, 0, rep);

        loom_val st0[3] = {loom_splat(k, CF(-INFINITY), LOOM_SHAPE1(FA_BLOCK)),
                           loom_splat(k, CF(0), LOOM_SHAPE1(FA_BLOCK)),
                           loom_splat(k, CF(0), LOOM_SHAPE2(FA_BLOCK, s->D))};
        softmax_state st = {st0[0], st0[1], st0[2]};
        /* an odd block's partner (no rows of its own, idle_partner): the unit's tiles are
         * taken and given back, nothing computed, so the other group has the tensor cores */
        loom_region_op work = {0};
        if (idle_partner(s)) {
            work = loom_if_begin(k, loom_cmp(k, LOOM_EQ, rows, zero), 0);
            idle_unit(g, qs, it, qit, a.tiles, pend);
            loom_else(k, work, 0, NULL);
        }
        if (s->xunit) {
            xunit_carry in = {loom_sched_arg(&l, 2), loom_sched_arg(&l, 3), loom_sched_arg(&l, 4),
                              loom_sched_arg(&l, 5)};
            st = kv_across_units(g, &l, qv, store_q(s) ? LOOM_NONE : qs, it, qit, &a, rep, in, &next);
        } else if (s->overlap) {
            st = kv_pipelined(g, qv, store_q(s) ? LOOM_NONE : qs, it, a.tiles, a.len, st, pend);
        } else {
            loom_region_op kl = loom_for_begin(k, zero, a.tiles, one, 3, st0);
            loom_val j = loom_for_iv(k, kl);
            softmax_state cur = {loom_for_arg(k, kl, 0), loom_for_arg(k, kl, 1), loom_for_arg(k, kl, 2)};
            cur = kv_step(g, qv, loom_add(k, it, j), loom_mul(k, j, CI(s->bn)), a.len, cur);
            loom_val ys[3] = {cur.m, cur.l, cur.o};
            loom_for_end(k, kl, 3, ys);
            st = (softmax_state){loom_for_result(k, kl, 0), loom_for_result(k, kl, 1), loom_for_result(k, kl, 2)};
        }
        /* epilogue: O / l (a user with no keys: l = 0, O = 0, out 0) */
        loom_val inv = loom_div(k, loom_splat(k, g->vs ? g->vs : CF(1), LOOM_SHAPE1(FA_BLOCK)),
                                loom_max(k, st.l, CF(1e-30f))); /* FP8: v_scale / l */
        loom_val o = loom_cast(k, scale_rows(k, st.o, inv), fa_out_dt(s));
        loom_val offs[3] = {a.h, q0, zero};
        if (store_q(s)) {
            /* every block is 64 rows of out: written into this group's part of the Q slot
             * (its GEMMs are done with it) and TMA-stored from there; the slot goes back
             * once the store has read it */
            loom_epilogue_store_borrowed(k, g->out, offs, o, qv, g->wg, rep);
            if (!defer_q(s)) /* (defer_q: during the next unit's first S, or after the last unit) */
                loom_epilogue_return_slot(k, &g->qring, loom_const_i(k, LOOM_I1, 1), qit);
        } else {
            if (!s->overlap)
                loom_ring_release(k, &g->qring, qs);
            if (store_parts(s)) { /* whole blocks, through the group's own staging slots */
                loom_epilogue_store_turn(k, &g->oepi, offs, o, rep, LOOM_NONE);
            } else { /* rows past the block's (it may end inside a candidate's rows) masked off */
                loom_shape osh = LOOM_SHAPE2(FA_BLOCK, s->D);
                loom_val live = loom_cmp(k, LOOM_LT, loom_arange(k, 0, FA_BLOCK), rows);
                loom_store(k, g->out, offs, o, loom_broadcast(k, loom_expand_dims(k, live, 1), osh));
            }
        }
        if (idle_partner(s))
            loom_if_end(k, work, 0, NULL);

        loom_val ys[6] = {loom_add(k, it, a.tiles), loom_add(k, qit, one), defer_q(s) ? qit : next.pend, next.m,
                          next.l, next.p};
        loom_sched_end(k, &l, ys);
        if (defer_q(s)) /* the last unit's slot */
            give_back_q(g, loom_sched_result(k, &l, 2));
        if (store_parts(s)) /* the last block's stores have read its staging slots */
            loom_epilogue_finish(k, &g->oepi);
        if (s->turns)
            loom_turns_finish(k, &g->turns);
    }
    loom_task_end(k, ct);
}

fa_args fa_declare(loom_kernel *k, const fa_spec *s)
{
    fa_args a;
    int64_t H = s->H, D = s->D;
    /* run-time dims: the query rows (B * n_seed) and the users; the plan's rows are at most
     * the maximum's units, and the launch takes its own count (units) */
    a.rows = loom_arg_dim(k, "rows", fa_rows(s), s->nseed);
    int64_t N = LOOM_DIM(a.rows), U = LOOM_DIM(loom_arg_dim(k, "U", s->U, 1));
    int64_t qstr[3] = {D, H * D, 1}, kstr[4] = {D, s->S * H * D, H * D, 1};
    a.q = loom_arg_tensor_strided(k, "Q", s->dt, LOOM_SHAPE3(H, N, D), qstr, LOOM_IN);
    a.kt = loom_arg_tensor_strided(k, "K", s->dt, ((loom_shape){4, {H, U, s->S, D}}), kstr, LOOM_IN);
    int64_t vtstr[4] = {D * s->S, H * D * s->S, s->S, 1}; /* vtrans: [U, H, D, S] */
    a.vt = s->vtrans ? loom_arg_tensor_strided(k, "V", s->dt, ((loom_shape){4, {H, U, D, s->S}}), vtstr, LOOM_IN)
                     : loom_arg_tensor_strided(k, "V", s->dt, ((loom_shape){4, {H, U, s->S, D}}), kstr, LOOM_IN);
    a.plan = loom_arg_tensor(k, "plan", LOOM_I32, LOOM_SHAPE2(fa_max_units(s), FA_UNIT_FIELDS), LOOM_IN);
    a.lens = loom_arg_tensor(k, "seq_len", LOOM_I32, LOOM_SHAPE1(U), LOOM_IN);
    a.claims = loom_arg_tensor(k, "claims", LOOM_I32, LOOM_SHAPE1(2), LOOM_INOUT);
    a.units = loom_arg_scalar(k, "units", LOOM_I32);
    a.out = loom_arg_tensor_strided(k, "out", fa_out_dt(s), LOOM_SHAPE3(H, N, D), qstr, LOOM_OUT);
    a.scales = fa_fp8(s) ? loom_arg_tensor(k, "scales", LOOM_F32, LOOM_SHAPE2(3, H), LOOM_IN) : LOOM_NONE;
    return a;
}

loom_kernel *fa_build(const fa_spec *s, char *err, size_t errlen)
{
    char buf[200];
    const char *w = fa_why_not(s, buf, sizeof buf);
    if (w)
        return tpl_refuse(err, errlen, "%s", w);
    loom_kernel *k = loom_kernel_create("ikbo_fa", LOOM_PIPE_PRODUCER_WARPS + 8);
    loom_pipe p = loom_pipe_create(k);
    fa g = {.k = k, .s = s};
    int64_t H = s->H, D = s->D;
    fa_args a = fa_declare(k, s);
    g.q = a.q, g.kt = a.kt, g.vt = a.vt, g.plan = a.plan, g.lens = a.lens, g.units = a.units, g.out = a.out;
    g.scales = a.scales;
    loom_val claims = a.claims;

    loom_ring_tile qt = {s->dt, LOOM_SHAPE2(FA_BLOCK, D), 2, swz_of(s, D)};
    g.qring = loom_ring_create(&p, q_slots(s), 2, 1, &qt);
    loom_ring_tile kvt = {s->dt, LOOM_SHAPE2(s->bn, D), 1, swz_of(s, D)};
    loom_ring_tile vtt = {s->dt, LOOM_SHAPE2(D, s->bn), 1, swz_of(s, s->bn)}; /* vtrans: keys innermost */
    g.kr = loom_ring_create(&p, s->stages, 2, 1, &kvt);
    g.vr = loom_ring_create(&p, s->stages, 2, 1, s->vtrans ? &vtt : &kvt);
    /* A comes from the caller in both: Q's view, P from the registers; FP8 reads V^T's
     * slot transposed (K-major) */
    g.qk = (loom_mainloop){&g.kr, .b_tile = 0, .b_trans = 1, .rows = FA_BLOCK, .cols = s->bn};
    g.pv = (loom_mainloop){&g.vr, .b_tile = 0, .b_trans = s->vtrans, .rows = FA_BLOCK, .cols = D};
    int64_t units = fa_max_units(s) * H;
    g.sched = s->sched ? loom_sched_dynamic(&p, units, claims, 2, 2) : loom_sched_static(&p, units, 1);
    loom_sched_set_count(&g.sched, loom_mul(k, g.units, CI(H)));
    if (s->turns)
        g.turns = loom_turns_create(&p);
    if (store_q(s))
        g.wg = loom_sync_create_per_replica(&p, 128, 2);
    if (store_parts(s))
        g.oepi = loom_epilogue_create(&p, LOOM_EPI_PARTS, a.out, fa_out_dt(s), LOOM_SHAPE2(FA_BLOCK, 64), 2, 128);

    producer(&g);
    consumers(&g);
    return k;
}
