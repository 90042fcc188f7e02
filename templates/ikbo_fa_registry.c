/*
 * ikbo_fa_registry.c -- the IKBO flash attention as a registry template (what `loomc tune
 * ikbo_fa` tunes and `loomc check` runs): shape and config vectors as specs, the cost
 * model, inputs (a mapping and its plan) and the CPU reference.  The kernel is built in
 * templates/ikbo_fa.c.
 */
#include "ikbo_fa.h"
#include "ikbo_lce.h" /* ik_mapping: the check inputs' mapping */
#include "tpl_device.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FA_SHAPE(LOOM_S_INDEX) S_COUNT };
enum { LOOM_IKBO_FA_CONFIG(LOOM_C_INDEX) C_COUNT };
/* The kernel's arguments (templates/ikbo_fa.h). */
enum { A_ROWS, A_U, A_Q, A_K, A_V, A_PLAN, A_LENS, A_CLAIMS, A_UNITS, A_OUT, A_SCALES }; /* fa_build's (scales: e4m3) */

fa_spec fa_spec_of(const int64_t *sh, const int64_t *cf)
{
    fa_spec s;
    LOOM_UNPACK(FA_SHAPE, &s, sh);
    LOOM_UNPACK(LOOM_IKBO_FA_CONFIG, &s, cf);
    return s;
}

fa_spec fa_spec_of_shape(const int64_t *sh)
{
    fa_spec s = {LOOM_IKBO_FA_CONFIG(LOOM_DEFAULT)};
    LOOM_UNPACK(FA_SHAPE, &s, sh);
    return s;
}

void fa_shape_vector(const loom_ikbo_fa_shape *s, int64_t *v)
{
    /* FP8: V given transposed (the only form e4m3 builds), out of odtype; f16 and bf16 keep
     * the keys' defaults (vtrans=0, odt f16), so their tuning cache entries are unchanged */
    bool e4m3 = s->dtype == LOOM_E4M3;
    fa_spec sp = {.B = s->B, .U = s->U, .S = s->S, .H = s->H, .D = s->D, .nseed = s->n_seed, .dt = s->dtype,
                  .varlen = s->varlen, .odt = e4m3 ? s->odtype : LOOM_F16, .vtrans = e4m3};
    memset(v, 0, LOOM_MAX_PARAMS * sizeof *v);
    LOOM_PACK(FA_SHAPE, v, &sp);
}

loom_ikbo_fa_config fa_config_of(const int64_t *cf)
{
    loom_ikbo_fa_config c;
    LOOM_UNPACK(LOOM_IKBO_FA_CONFIG, &c, cf);
    return c;
}

/* fa_why_not, the build's check too (fa_build refuses what it refuses). */
static int valid(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    fa_spec s = fa_spec_of(sh, cf);
    char buf[300];
    return tpl_valid(fa_why_not(&s, buf, sizeof buf), why, n);
}

static loom_kernel *build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    fa_spec s = fa_spec_of(sh, cf);
    return fa_build(&s, err, n);
}

/* A program a unit and head, at most ctas: the units at most B blocks of rows a candidate. */
static void grid_rule(const int64_t *sh, const int64_t *cf, loom_grid_rule *r)
{
    fa_spec s = fa_spec_of(sh, cf);
    memset(r, 0, sizeof *r);
    for (int d = 0; d < 3; d++)
        r->div[d] = r->mult[d] = 1;
    r->c[1] = r->c[2] = 1;
    r->per[0][S_B] = fa_units_max(1, s.nseed) * s.H;
    r->cap[0] = s.ctas;
}

/* B and U tuned by bucket (the power of two at or above each): the kernel takes its rows
 * (B * n_seed, a dim of its own) and U at run time, so a config serves its bucket.  They
 * are not the registry's run-time keys, whose dim argument is named by the key. */
static void bucket(const int64_t *sh, int64_t *bk)
{
    bk[S_B] = loom_dim_bucket(sh[S_B]);
    bk[S_U] = loom_dim_bucket(sh[S_U]);
}

static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    loom_grid_rule r;
    grid_rule(sh, cf, &r);
    loom_grid_rule_eval(&r, sh, g);
}

/* The order of units that suits the shape (horder): a unit's heads side by side where a
 * user has at most two units on average (B * n_seed / U rows: K and V are read about once
 * a unit, and programs side by side then read whole rows of them), head by head where
 * more units share a user's K/V in L2.  Measured in bench/RESULTS.md (session 29). */
static int64_t horder_of(const fa_spec *s)
{
    /* in double: the shape is not checked yet (a prepare refuses dims past 2^31 after this) */
    return (double)s->B * (double)s->nseed <= 4.0 * FA_BLOCK * (double)s->U;
}

/* The config to run untuned: at D=64 a ring of 4 and 64-key tiles (e4m3 builds 128-key
 * tiles only); e4m3 a ring of 4 at either D (its K/V tiles are half an f16 tile's bytes:
 * 1% faster than 2 at the FP8 headline, bench/RESULTS.md session 33); and the order of
 * units for the shape. */
static void heuristic(const int64_t *sh, int64_t *cf)
{
    fa_spec s = fa_spec_of(sh, cf);
    if (s.D == 64)
        cf[C_BN] = fa_fp8(&s) ? 128 : 64;
    if (s.D == 64 || fa_fp8(&s))
        cf[C_stages] = 4;
    cf[C_horder] = horder_of(&s);
}

/* Rank configs: waves of units over the CTAs (full 128-row units of S keys), the keys
 * computed past S, a deeper ring, taking turns, and the order of units. */
static double cost(const int64_t *sh, const int64_t *cf)
{
    fa_spec s = fa_spec_of(sh, cf);
    double units = (double)TPL_CDIV(fa_rows(&s), 2 * FA_BLOCK) * (double)s.H;
    double waves = units / s.ctas, w = (double)(int64_t)waves + (waves > (double)(int64_t)waves ? 1 : 0);
    double keys = (double)TPL_CDIV(s.S, s.bn) * s.bn;
    return w * keys * (1.0 + 48.0 / s.bn) / (s.stages >= 3 ? 1.05 : 1.0) / (s.overlap ? 1.3 : s.turns ? 0.85 : 1.0) *
           (s.horder == horder_of(&s) ? 1.0 : 1.1);
}

/* The lengths of the check inputs (varlen): 1 to S, the first user's 0 when there are
 * several (a user with no history). */
static void lengths(const fa_spec *s, int32_t *lens, uint64_t *seed)
{
    for (int64_t u = 0; u < s->U; u++)
        lens[u] = !s->varlen ? (int32_t)s->S : u == 0 && s->U > 1 ? 0 : (int32_t)(1 + tpl_rand(seed) % s->S);
}

static void init(const int64_t *sh, void *const *host, uint64_t seed)
{
    fa_spec s = fa_spec_of_shape(sh);
    int64_t qn = fa_rows(&s) * s.H * s.D, kn = s.U * s.S * s.H * s.D;
    *(int32_t *)host[A_ROWS] = (int32_t)fa_rows(&s); /* the run-time dims at the shape's values */
    *(int32_t *)host[A_U] = (int32_t)s.U;
    if (host[A_Q]) /* (NULL where the tuner fills them on the device: tpl_device) */
        tpl_fill(host[A_Q], s.dt, qn, -1, 1, &seed);
    if (host[A_K])
        tpl_fill(host[A_K], s.dt, kn, -1, 1, &seed);
    if (host[A_V])
        tpl_fill(host[A_V], s.dt, kn, -1, 1, &seed);
    if (fa_fp8(&s)) /* per head: q_scale, k_scale, v_scale in [0.5, 2] */
        tpl_fill(host[A_SCALES], LOOM_F32, 3 * s.H, 0.5, 2, &seed);
    int32_t *map = malloc((size_t)s.B * sizeof *map);
    if (!map)
        return;
    ik_mapping(s.B, s.U, (int)sh[S_shuffle], seed, map);
    lengths(&s, host[A_LENS], &seed);
    char err[200];
    int64_t n = fa_plan(&s, map, host[A_LENS], host[A_PLAN], err, sizeof err);
    *(int32_t *)host[A_UNITS] = (int32_t)(n < 0 ? 0 : n);
    free(map);
}

/* The mapping back from the plan (every candidate's rows are in some block); NULL when
 * out of memory. */
static int32_t *map_of_plan(const fa_spec *s, void *const *host)
{
    int32_t *map = calloc((size_t)s->B, sizeof *map);
    if (!map)
        return NULL;
    const int32_t *plan = host[A_PLAN];
    for (int64_t i = 0; i < *(const int32_t *)host[A_UNITS]; i++) {
        const int32_t *e = plan + i * FA_UNIT_FIELDS;
        for (int b = 0; b < 2; b++) {
            int32_t q0 = e[b ? FA_U_Q1 : FA_U_Q0], n = e[b ? FA_U_N1 : FA_U_N0];
            for (int32_t r = q0; r < q0 + n; r++)
                map[r / s->nseed] = e[FA_U_USER];
        }
    }
    return map;
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    fa_spec s = fa_spec_of_shape(sh);
    int32_t *map = map_of_plan(&s, host);
    if (map && fa_fp8(&s))
        fa_fp8_reference(&s, host[A_Q], host[A_K], host[A_V], host[A_SCALES], map, host[A_LENS], true, ref[A_OUT],
                         NULL);
    else if (map)
        fa_reference(&s, host[A_Q], host[A_K], host[A_V], map, host[A_LENS], ref[A_OUT]);
    free(map);
}

/* out: fa_bound (FP8: fa_fp8_reference's, for the GPU's FP8 wgmma sums, which bound the
 * interpreter's too); the claims come back to zero, exactly. */
static void bound(const int64_t *sh, void *const *host, void *const *ref, double *const *bnd)
{
    fa_spec s = fa_spec_of_shape(sh);
    int32_t *map = map_of_plan(&s, host);
    void *out = map && bnd[A_OUT] && fa_fp8(&s) ? malloc((size_t)(fa_rows(&s) * s.H * s.D) * 2) : NULL;
    if (out) /* (the same reference as ref[A_OUT]) */
        fa_fp8_reference(&s, host[A_Q], host[A_K], host[A_V], host[A_SCALES], map, host[A_LENS], true, out,
                         bnd[A_OUT]);
    else if (map && bnd[A_OUT] && !fa_fp8(&s))
        fa_bound(&s, host[A_Q], host[A_K], host[A_V], map, host[A_LENS], ref[A_OUT], bnd[A_OUT]);
    free(out);
    if (bnd[A_CLAIMS])
        bnd[A_CLAIMS][0] = bnd[A_CLAIMS][1] = 0;
    free(map);
}

const loom_template tpl_def_ikbo_fa = {
    .name = "ikbo_fa",
    .doc = "IKBO flash attention out[b] = softmax(Q[b] K[u(b)]^T / sqrt(D)) V[u(b)]: candidates read their user's "
           "K/V by index; a producer warp group and two consumer warp groups sharing each K/V tile",
    .nshape = LOOM_COUNT(FA_SHAPE),
    .shape = {FA_SHAPE(LOOM_SHAPE_PARAM)},
    .nconfig = LOOM_COUNT(LOOM_IKBO_FA_CONFIG),
    .config = {LOOM_IKBO_FA_CONFIG(LOOM_CONFIG_PARAM)},
    .valid = valid,
    .cost = cost,
    .heuristic = heuristic,
    .build = build,
    .grid = grid,
    .grid_rule = grid_rule,
    .bucket = bucket,
    .init = init,
    .reference = reference,
    .atol = 2e-2,
    .rtol = 2e-2,
    .bound = bound,
};

/* ---------------------------------------------------------------- the tuner's device reference */

/* A program: FR_ROWS query rows of one of a unit's two row blocks (FR_SUBS programs a
 * unit), one head; keys FR_KEYS at a time. */
enum { FR_ROWS = 16, FR_KEYS = 32, FR_SUBS = 2 * FA_BLOCK / FR_ROWS, FR_HALF = FR_SUBS / 2 };

#define CI(x) loom_const_i(k, LOOM_I32, (x))
#define CF(x, shape) loom_splat(k, loom_const_f(k, LOOM_F32, (x)), (shape))

/* A [FR_ROWS] vector as [FR_ROWS, n] (each row its value). */
static loom_val fr_rows(loom_kernel *k, loom_val v, int64_t n)
{
    return loom_broadcast(k, loom_expand_dims(k, v, 1), LOOM_SHAPE2(FR_ROWS, n));
}

/* The reference (bound false: out = softmax(Q K^T / sqrt(D)) V in f32, online over the
 * keys, rounded once) or the error model's bound of each element of out, which then holds
 * the reference (fa_bound's terms from the same pass: the largest |S| and the largest
 * error of an S, the row max, A = sum p |v| / l; twice the model's error, since the
 * reference sums in f32 and takes exp2 on the SFU too, then one ulp of out's type from
 * tpl_device_ulp_ub; the result scaled up by 2^-20 for the bound's own f32 arithmetic). */
static loom_kernel *fr_kernel(const fa_spec *s, bool with_bound)
{
    loom_kernel *k = loom_kernel_create(with_bound ? "ikbo_fa_ref_bound" : "ikbo_fa_ref", 4);
    fa_args a = fa_declare(k, s); /* the kernel's own arguments; the claims come back to zero: untouched */
    loom_val bound = LOOM_NONE;
    int64_t D = s->D, qstr[3] = {D, s->H * D, 1};
    if (with_bound)
        bound = loom_arg_tensor_strided(k, "bound", LOOM_F32,
                                          LOOM_SHAPE3(s->H, LOOM_DIM(a.rows), D), qstr, LOOM_OUT);
    loom_shape tr = LOOM_SHAPE1(FR_ROWS), tq = LOOM_SHAPE2(FR_ROWS, D), ts = LOOM_SHAPE2(FR_ROWS, FR_KEYS);
    loom_shape tkv = LOOM_SHAPE2(FR_KEYS, D);
    loom_val pid = loom_program_id(k, 0), h = loom_program_id(k, 1);
    loom_val unit = loom_div(k, pid, CI(FR_SUBS)), sub = loom_rem(k, pid, CI(FR_SUBS));
    loom_val blk = loom_div(k, sub, CI(FR_HALF));
    loom_val fq = loom_add(k, CI(FA_U_Q0), loom_mul(k, blk, CI(FA_U_Q1 - FA_U_Q0)));
    loom_val user = loom_load_scalar(k, a.plan, ((loom_val[]){unit, CI(FA_U_USER)}));
    loom_val q0 = loom_load_scalar(k, a.plan, ((loom_val[]){unit, fq}));
    loom_val n = loom_load_scalar(k, a.plan, ((loom_val[]){unit, loom_add(k, fq, CI(1))}));
    loom_val r0 = loom_add(k, q0, loom_mul(k, loom_rem(k, sub, CI(FR_HALF)), CI(FR_ROWS)));
    loom_val rend = loom_add(k, q0, n);
    loom_val live = loom_and(k, loom_cmp(k, LOOM_LT, unit, a.units), loom_cmp(k, LOOM_LT, r0, rend));
    loom_region_op any = loom_if_begin(k, live, 0);
    {
        loom_val len = s->varlen ? loom_load_scalar(k, a.lens, &user) : CI((int32_t)s->S);
        loom_val rowv = loom_cmp(k, LOOM_LT, loom_add(k, loom_arange(k, 0, FR_ROWS), loom_splat(k, r0, tr)),
                                 loom_splat(k, rend, tr));
        loom_val qmask = fr_rows(k, rowv, D);
        loom_val q = loom_cast(k, loom_load(k, a.q, ((loom_val[]){h, r0, CI(0)}), tq, qmask, 0.0), LOOM_F32);
        double scale = 1.0 / sqrt((double)D), l2e = FA_LOG2E;
        loom_val init[6] = {CF(-INFINITY, tr), CF(0.0, tr), CF(0.0, tq), CF(0.0, tq), CF(0.0, tr), CF(0.0, tr)};
        int nc = with_bound ? 6 : 3; /* m, l, acc; and A, the largest S error, the largest |S| */
        loom_region_op kl = loom_for_begin(k, CI(0), len, CI(FR_KEYS), nc, init);
        {
            loom_val j0 = loom_for_iv(k, kl);
            loom_val m = loom_for_arg(k, kl, 0), l = loom_for_arg(k, kl, 1), acc = loom_for_arg(k, kl, 2);
            loom_val keyv = loom_cmp(k, LOOM_LT, loom_add(k, loom_arange(k, 0, FR_KEYS), loom_splat(k, j0, LOOM_SHAPE1(FR_KEYS))),
                                     loom_splat(k, len, LOOM_SHAPE1(FR_KEYS)));
            loom_val kvmask = loom_broadcast(k, loom_expand_dims(k, keyv, 1), tkv);
            loom_val smask = loom_broadcast(k, loom_expand_dims(k, keyv, 0), ts);
            loom_val kk = loom_cast(k, loom_load(k, a.kt, ((loom_val[]){h, user, j0, CI(0)}), tkv, kvmask, 0.0), LOOM_F32);
            loom_val vv = loom_cast(k, loom_load(k, a.vt, ((loom_val[]){h, user, j0, CI(0)}), tkv, kvmask, 0.0), LOOM_F32);
            loom_val sc = loom_mul(k, loom_dot(k, q, loom_trans(k, kk), CF(0.0, ts)), CF(scale, ts));
            sc = loom_select(k, smask, sc, CF(-INFINITY, ts));
            loom_val mn = loom_max(k, m, loom_reduce_max(k, sc, 1));
            loom_val p = loom_exp2(k, loom_mul(k, loom_sub(k, sc, fr_rows(k, mn, FR_KEYS)), CF(l2e, ts)));
            loom_val c = loom_exp2(k, loom_mul(k, loom_sub(k, m, mn), CF(l2e, tr)));
            loom_val next[6];
            next[0] = mn;
            next[1] = loom_add(k, loom_mul(k, l, c), loom_reduce_sum(k, p, 1));
            next[2] = loom_dot(k, p, vv, loom_mul(k, acc, fr_rows(k, c, D)));
            if (with_bound) {
                loom_val A = loom_for_arg(k, kl, 3), emax = loom_for_arg(k, kl, 4), smax = loom_for_arg(k, kl, 5);
                next[3] = loom_dot(k, p, loom_abs(k, vv), loom_mul(k, A, fr_rows(k, c, D)));
                loom_val mag = loom_dot(k, loom_abs(k, q), loom_trans(k, loom_abs(k, kk)), CF(0.0, ts));
                double ge = loom_f32_sum_error(D, 1.0) * scale * (1 + 0x1p-20); /* an S's error, per unit of mag */
                next[4] = loom_max(k, emax, loom_reduce_max(k, loom_mul(k, mag, CF(ge, ts)), 1));
                next[5] = loom_max(k, smax, loom_reduce_max(k, loom_select(k, smask, loom_abs(k, sc), CF(0.0, ts)), 1));
            }
            loom_for_end(k, kl, nc, next);
        }
        loom_val l = loom_for_result(k, kl, 1), acc = loom_for_result(k, kl, 2);
        loom_val lpos = fr_rows(k, loom_cmp(k, LOOM_GT, l, CF(0.0, tr)), D);
        loom_val lq = fr_rows(k, l, D);
        loom_val zero = CF(0.0, tq);
        if (!with_bound) {
            loom_val o = loom_select(k, lpos, loom_div(k, acc, lq), zero); /* no keys: 0 */
            loom_store(k, a.out, ((loom_val[]){h, r0, CI(0)}), loom_cast(k, o, s->dt), qmask);
        } else {
            loom_val m = loom_for_result(k, kl, 0), A = loom_for_result(k, kl, 3);
            loom_val emax = loom_for_result(k, kl, 4), smax = loom_for_result(k, kl, 5);
            /* fa_bound's row terms, each rounded up: arg = 2 emax log2e + 4u (smax + |mx|) log2e
             * in log2 units; delta = expm1(arg ln 2) (<= x + x^2 for x <= 1), with exp2's
             * 2^-21 and P's rounding; rho = delta + gamma_len (1 + delta) */
            double u = 0x1p-23, up = s->dt == LOOM_BF16 ? 0x1p-8 : 0x1p-11, up2 = 1 + 0x1p-20;
            double c0 = ((1 + 0x1p-21) * (1 + up) - 1) * up2;
            loom_val mx = loom_select(k, loom_cmp(k, LOOM_GT, l, CF(0.0, tr)), loom_abs(k, m), CF(0.0, tr));
            loom_val arg = loom_add(k, loom_mul(k, emax, CF(2 * l2e * up2, tr)),
                                    loom_mul(k, loom_add(k, smax, mx), CF(4 * u * l2e * up2, tr)));
            loom_val x = loom_mul(k, arg, CF(M_LN2 * up2, tr));
            loom_val em1 = loom_mul(k, loom_add(k, x, loom_mul(k, x, x)), CF(up2, tr));
            loom_val delta = loom_mul(k, loom_add(k, em1, loom_mul(k, loom_add(k, CF(1.0, tr), em1), CF(c0, tr))), CF(up2, tr));
            loom_val lenf = loom_cast(k, len, LOOM_F32);
            loom_val glen = loom_div(k, loom_mul(k, lenf, loom_const_f(k, LOOM_F32, u)),
                                     loom_sub(k, loom_const_f(k, LOOM_F32, 1.0), loom_mul(k, lenf, loom_const_f(k, LOOM_F32, u))));
            loom_val rho = loom_mul(k, loom_add(k, delta, loom_mul(k, loom_splat(k, glen, tr), loom_add(k, CF(1.0, tr), delta))),
                                    CF(up2, tr));
            loom_val ok = loom_and(k, loom_cmp(k, LOOM_LT, rho, CF(0.5, tr)), loom_cmp(k, LOOM_LE, x, CF(1.0, tr)));
            loom_val rel = loom_select(k, ok, loom_div(k, rho, loom_sub(k, CF(1.0, tr), rho)), CF(INFINITY, tr));
            /* the rescales (64-key tiles at least) and 1 / l: (2 ceil(len / 64) + 4) u */
            loom_val tiles = loom_div(k, loom_add(k, len, CI(63)), CI(64));
            loom_val rounds = loom_mul(k, loom_cast(k, loom_add(k, loom_mul(k, tiles, CI(2)), CI(4)), LOOM_F32),
                                       loom_const_f(k, LOOM_F32, u));
            loom_val fac = fr_rows(k, loom_mul(k, loom_add(k, rel, loom_splat(k, rounds, tr)), CF(up2 * up2, tr)), D);
            loom_val r = loom_cast(k, loom_load(k, a.out, ((loom_val[]){h, r0, CI(0)}), tq, qmask, 0.0), LOOM_F32);
            loom_val ar = loom_abs(k, r);
            loom_val aol = loom_select(k, lpos, loom_div(k, A, lq), zero);
            loom_val big = loom_add(k, loom_add(k, aol, ar), tpl_device_ulp_ub(k, s->dt, r, tq));
            loom_val tiny = loom_splat(k, loom_mul(k, lenf, loom_const_f(k, LOOM_F32, 0x1p-126)), tq);
            loom_val err = loom_mul(k, loom_add(k, loom_mul(k, fac, big), tiny), CF(2.0 * up2, tq)); /* kernel + reference */
            loom_val at = loom_add(k, loom_add(k, ar, loom_mul(k, CF(0.5, tq), tpl_device_ulp_ub(k, s->dt, r, tq))), err);
            loom_val bnd = loom_mul(k, loom_add(k, err, tpl_device_ulp_ub(k, s->dt, at, tq)), CF(up2, tq));
            loom_store(k, bound, ((loom_val[]){h, r0, CI(0)}), bnd, qmask);
        }
    }
    loom_if_end(k, any, 0, NULL);
    return k;
}

#undef CF
#undef CI

static bool fr_grid(const int64_t *sh, fa_spec *s, int grid[3])
{
    *s = fa_spec_of_shape(sh);
    int64_t programs = fa_max_units(s) * FR_SUBS;
    if (programs > INT32_MAX || s->H > 65535 || (s->dt != LOOM_F16 && s->dt != LOOM_BF16))
        return false;
    grid[0] = (int)programs;
    grid[1] = (int)s->H;
    grid[2] = 1;
    return true;
}

static int fr_reference(const int64_t *sh, loom_kernel **k, int (*grid)[3], int max, char *err, size_t n)
{
    fa_spec s;
    if (max < 1 || !fr_grid(sh, &s, grid[0])) {
        if (fa_fp8(&s)) /* its check needs P rounded as the kernel rounds it: fa_fp8_reference, on the host */
            snprintf(err, n, "none for dtype e4m3 (the FP8 check rounds P as the kernel does: docs/checks.md, "
                     "\"ikbo_fa in FP8\")");
        else
            snprintf(err, n, "the reference kernel serves f16 and bf16, up to 65535 heads");
        return 0;
    }
    k[0] = fr_kernel(&s, false);
    return 1;
}

static loom_kernel *fr_bound(const int64_t *sh, int grid[3])
{
    fa_spec s;
    return fr_grid(sh, &s, grid) ? fr_kernel(&s, true) : NULL;
}

static int fr_fills(const int64_t *sh, tpl_device_fill *f, int max)
{
    /* e4m3: none, as there is no FP8 reference kernel (fr_reference says why): the tuner
     * makes the inputs on the host and checks against the CPU reference */
    if (max < 3 || fa_fp8(&(fa_spec){.dt = (loom_dtype)sh[S_dtype]}))
        return 0;
    f[0] = (tpl_device_fill){A_Q, -1, 1, 0, 0};
    f[1] = (tpl_device_fill){A_K, -1, 1, 0, 0};
    f[2] = (tpl_device_fill){A_V, -1, 1, 0, 0};
    return 3;
}

const tpl_device tpl_device_ikbo_fa = {
    .t = &tpl_def_ikbo_fa,
    .fills = fr_fills,
    .init_rest = init,
    .reference = fr_reference,
    .reference_doc = "a naive f32 SIMT attention (no TMA, wgmma or warp specialization)",
    .bound = fr_bound,
    .bound_arg = A_OUT, /* the claims come back to zero, exactly */
};
