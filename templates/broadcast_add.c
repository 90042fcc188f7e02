/*
 * broadcast_add.c -- the IKBO broadcast-add: out[b,m,n] = cand[b,m,n] + user[u(b),m,n].
 *
 * Frameworks materialize user[u(b)] for every candidate b (a copy B/U times larger than
 * user).  Here each program reads the index u(b) once and loads the user tile by that
 * index, so the broadcast never exists in memory.  Grid: (tiles of M x N, B).
 *
 * B and U are run-time dims (loom_arg_dim; the shape's B and U are their maxima), so one
 * kernel serves every batch up to them: the arguments are B, U, cand, user,
 * cand_to_user, out, and the grid follows B (grid_rule).  M, N and the dtype are
 * compile-time constants.
 *
 * Tuning: BM x BN tiles and the CTA's warps, 196 combinations; valid() keeps those whose
 * tile is not mostly masked, gives each thread whole 16-byte vectors and fits in
 * registers; cost() ranks them by bytes moved; bucket() shares one config among shapes
 * that differ only in B and U.
 */
#include "tpl.h"
#include "tpl_device.h"
#include "../util/util.h"

#include <math.h>
#include <string.h>

/* The kernel's arguments: B, U, cand, user, cand_to_user, out (the reference kernels of
 * the tuner's device path take the same). */
typedef struct ba_args {
    loom_val B, U, cand, user, map, out;
} ba_args;

static ba_args ba_declare(loom_kernel *k, const tpl_broadcast_add_shape *s)
{
    ba_args a;
    /* the batch's candidates and users, given at each launch (at most s->B and s->U) */
    a.B = loom_arg_dim(k, "B", s->B, 1);
    a.U = loom_arg_dim(k, "U", s->U, 1);
    a.cand = loom_arg_tensor(k, "cand", s->dtype, LOOM_SHAPE3(LOOM_DIM(a.B), s->M, s->N), LOOM_IN);
    a.user = loom_arg_tensor(k, "user", s->dtype, LOOM_SHAPE3(LOOM_DIM(a.U), s->M, s->N), LOOM_IN);
    a.map = loom_arg_tensor(k, "cand_to_user", LOOM_I32, LOOM_SHAPE1(LOOM_DIM(a.B)), LOOM_IN);
    a.out = loom_arg_tensor(k, "out", s->dtype, LOOM_SHAPE3(LOOM_DIM(a.B), s->M, s->N), LOOM_OUT);
    return a;
}

loom_kernel *tpl_broadcast_add(const tpl_broadcast_add_shape *s, int bm, int bn, int warps)
{
    loom_kernel *k = loom_kernel_create("ikbo_broadcast_add", warps);
    ba_args a = ba_declare(k, s);
    loom_val user = a.user, map = a.map, cand = a.cand, out = a.out;

    /* which tile of [M, N] and which candidate this program handles */
    int64_t tiles_n = TPL_CDIV(s->N, bn);
    loom_val tile = loom_program_id(k, 0);
    loom_val b = loom_program_id(k, 1);
    loom_val tn = loom_const_i(k, LOOM_I32, tiles_n);
    loom_val cbm = loom_const_i(k, LOOM_I32, bm);
    loom_val cbn = loom_const_i(k, LOOM_I32, bn);
    loom_val m0 = loom_mul(k, loom_div(k, tile, tn), cbm);
    loom_val n0 = loom_mul(k, loom_rem(k, tile, tn), cbn);

    /* the broadcast by index: read u(b), then user[u(b)]'s tile */
    loom_val u = loom_name(k, loom_load_scalar(k, map, (loom_val[]){b}), "u");
    loom_val c = loom_load(k, cand, ((loom_val[]){b, m0, n0}), LOOM_SHAPE2(bm, bn), LOOM_NONE, 0.0);
    loom_val x = loom_load(k, user, ((loom_val[]){u, m0, n0}), LOOM_SHAPE2(bm, bn), LOOM_NONE, 0.0);
    loom_store(k, out, ((loom_val[]){b, m0, n0}), loom_add(k, c, x), LOOM_NONE);
    return k;
}

/* ---------------------------------------------------------------- registry entry */

/* The template's table (loom_tune.h, "A template's table"): X(KEY, FIELD, TYPE, DEFAULT,
 * DOC, candidates or loom_param fields). */
#define BA_SHAPE(X)                                                                                         \
    X(B, B, int64_t, 1024, "candidates (run-time: at most this)", .runtime = 1)                            \
    X(U, U, int64_t, 15, "users (run-time: at most this)", .runtime = 1)                                   \
    X(M, M, int64_t, 433, "rows per candidate")                                                            \
    X(N, N, int64_t, 256, "columns")                                                                       \
    X(dtype, dtype, loom_dtype, LOOM_F16, "element type")                                                  \
    X(shuffle, shuffle, int, 0, "1: shuffled candidate-to-user mapping", .inputs_only = 1)
#define BA_CONFIG(X)                                                                                        \
    X(BM, bm, int64_t, 8, "tile rows", 1, 2, 4, 8, 16, 32, 64)                                             \
    X(BN, bn, int64_t, 256, "tile columns", 8, 16, 32, 64, 128, 256, 512)                                  \
    X(warps, warps, int64_t, 4, "warps per CTA", 1, 2, 4, 8)

enum { BA_SHAPE(LOOM_S_INDEX) S_COUNT };
enum { BA_CONFIG(LOOM_C_INDEX) C_COUNT };

/* A shape and config unpacked. */
typedef struct ba_cfg {
    BA_SHAPE(LOOM_FIELD)
    BA_CONFIG(LOOM_FIELD)
} ba_cfg;

static ba_cfg cfg_of(const int64_t *sh, const int64_t *cf)
{
    ba_cfg c;
    LOOM_UNPACK(BA_SHAPE, &c, sh);
    LOOM_UNPACK(BA_CONFIG, &c, cf);
    return c;
}
enum { A_B, A_U, A_CAND, A_USER, A_MAP, A_OUT }; /* the kernel's arguments */

/* A program per tile of [M, N] (x) and per candidate (y): x is fixed by M, N and the
 * tile, y is the launch's B. */
static void grid_rule(const int64_t *sh, const int64_t *cf, loom_grid_rule *r)
{
    memset(r, 0, sizeof *r);
    for (int d = 0; d < 3; d++)
        r->div[d] = r->mult[d] = 1;
    r->c[0] = TPL_CDIV(sh[S_M], cf[C_BM]) * TPL_CDIV(sh[S_N], cf[C_BN]);
    r->per[1][S_B] = 1;
    r->c[2] = 1;
}

void tpl_broadcast_add_grid(const tpl_broadcast_add_shape *s, int bm, int bn, int grid[3])
{
    const int64_t sh[LOOM_MAX_PARAMS] = {[S_B] = s->B, [S_U] = s->U, [S_M] = s->M, [S_N] = s->N, [S_dtype] = s->dtype};
    const int64_t cf[LOOM_MAX_PARAMS] = {[C_BM] = bm, [C_BN] = bn};
    loom_grid_rule r;
    grid_rule(sh, cf, &r);
    loom_grid_rule_eval(&r, sh, grid);
}

static tpl_broadcast_add_shape shape_of(const int64_t *sh)
{
    ba_cfg c;
    LOOM_UNPACK(BA_SHAPE, &c, sh);
    return (tpl_broadcast_add_shape){c.B, c.U, c.M, c.N, c.dtype};
}

/* Why the kernel cannot be built at (shape, config), or NULL: what build refuses, and the
 * first thing valid() checks. */
static const char *why_not_built(const ba_cfg *c)
{
    if (c->dtype != LOOM_F16 && c->dtype != LOOM_BF16 && c->dtype != LOOM_F32)
        return "dtype must be f16, bf16 or f32";
    if (c->U < 1 || c->B < 1 || c->M < 1 || c->N < 1)
        return "B, U, M, N must be positive";
    if (c->B > INT32_MAX || c->U > INT32_MAX)
        return "B and U are run-time dims: at most 2^31 - 1";
    int64_t tile;
    if (c->bm < 1 || c->bn < 1 || !util_mul_i64(c->bm, c->bn, &tile) || tile > 65536)
        return "BM*BN must be between 1 and 65536";
    return NULL;
}

static loom_kernel *build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    ba_cfg c = cfg_of(sh, cf);
    const char *w = why_not_built(&c);
    if (w)
        return tpl_refuse(err, n, "%s", w);
    tpl_broadcast_add_shape s = shape_of(sh);
    return tpl_broadcast_add(&s, (int)c.bm, (int)c.bn, (int)c.warps);
}

/* ---------------------------------------------------------------- tuning */

/* A config is worth timing when its tile fits the compiler's limits, is not mostly
 * masked off, gives every thread whole 16-byte vectors, and holds its two tiles in
 * registers without spilling. */
static int valid(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    ba_cfg c = cfg_of(sh, cf);
    const char *w = why_not_built(&c);
    if (w)
        return !!tpl_refuse(why, n, "%s", w);
    if (sh[S_B] > 65535)
        return !!tpl_refuse(why, n, "B=%lld candidates exceed the grid's y limit (65535)", (long long)sh[S_B]);
    int64_t bm = c.bm, bn = c.bn, warps = c.warps, tile = bm * bn;
    if (warps < 1 || warps > 32)
        return !!tpl_refuse(why, n, "warps must be 1 to 32");
    if (bm > tpl_pow2_at_least(sh[S_M]))
        return !!tpl_refuse(why, n, "BM=%lld is above M=%lld rounded up to a power of two: rows of every tile "
                            "would be masked off", (long long)bm, (long long)sh[S_M]);
    if (bn > tpl_pow2_at_least(sh[S_N]))
        return !!tpl_refuse(why, n, "BN=%lld is above N=%lld rounded up to a power of two: columns of every tile "
                            "would be masked off", (long long)bn, (long long)sh[S_N]);
    int64_t es = (int64_t)loom_dtype_size((loom_dtype)sh[S_dtype]), vec = 16 / es;
    if (bn % vec)
        return !!tpl_refuse(why, n, "BN=%lld is not a multiple of %lld (a 16-byte vector of %s)", (long long)bn,
                            (long long)vec, loom_dtype_name((loom_dtype)sh[S_dtype]));
    int64_t threads = warps * 32, per = tile / threads;
    if (per < vec)
        return !!tpl_refuse(why, n, "%lld threads for a %lld-element tile: each would hold %lld elements, less "
                            "than a 16-byte vector", (long long)threads, (long long)tile, (long long)per);
    int64_t regs = 2 * per * es / 4 + 16; /* the cand and user tiles, plus addressing */
    if (regs > 255)
        return !!tpl_refuse(why, n, "about %lld registers per thread for two %lld-element tiles (255 at most: "
                            "it would spill)", (long long)regs, (long long)per);
    if (regs * threads > 65536)
        return !!tpl_refuse(why, n, "%lld threads x %lld registers exceed the SM's 65536-register file",
                            (long long)threads, (long long)regs);
    return 1;
}

/* Memory-bound: the time is the bytes moved over the bandwidth, inflated by tile padding
 * (masked lanes issue but move nothing) and by accesses narrower than a 16-byte vector,
 * plus a small cost per CTA.  It ranks configs; it does not predict milliseconds. */
static double cost(const int64_t *sh, const int64_t *cf)
{
    double B = (double)sh[S_B], M = (double)sh[S_M], N = (double)sh[S_N];
    double es = (double)loom_dtype_size((loom_dtype)sh[S_dtype]);
    double bm = (double)cf[C_BM], bn = (double)cf[C_BN], threads = 32.0 * (double)cf[C_warps];
    double tm = ceil(M / bm), tn = ceil(N / bn);
    double lanes = (M * N) / (tm * bm * tn * bn);
    double per = bm * bn / threads, vec = 16 / es;
    double vec_eff = per >= vec ? 1.0 : per / vec;
    double bytes = 3 * B * M * N * es;
    double t_mem = bytes / 3.0e12 / (lanes * (0.5 + 0.5 * vec_eff));
    double t_cta = B * tm * tn * 0.5e-9;
    return (t_mem + t_cta) * 1e3;
}

/* The tile shape does not depend on how many candidates or users there are: B and U
 * are bucketed to the power of two at or above them. */
static void bucket(const int64_t *sh, int64_t *bk)
{
    bk[S_B] = tpl_pow2_at_least(sh[S_B]);
    bk[S_U] = tpl_pow2_at_least(sh[S_U]);
}

static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    loom_grid_rule r;
    grid_rule(sh, cf, &r);
    loom_grid_rule_eval(&r, sh, g);
}

static void init(const int64_t *sh, void *const *host, uint64_t seed)
{
    tpl_broadcast_add_shape s = shape_of(sh);
    *(int32_t *)host[A_B] = (int32_t)s.B; /* the run-time dims at the shape's values */
    *(int32_t *)host[A_U] = (int32_t)s.U;
    if (host[A_CAND]) /* (NULL where the tuner fills them on the device: tpl_device) */
        tpl_fill(host[A_CAND], s.dtype, s.B * s.M * s.N, -1, 1, &seed);
    if (host[A_USER])
        tpl_fill(host[A_USER], s.dtype, s.U * s.M * s.N, -1, 1, &seed);
    int32_t *map = host[A_MAP];
    for (int64_t b = 0; b < s.B; b++)
        map[b] = (int32_t)(b * s.U / s.B);
    if (sh[S_shuffle])
        for (int64_t b = s.B - 1; b > 0; b--) {
            int64_t j = (int64_t)(tpl_rand(&seed) % (uint64_t)(b + 1));
            int32_t t = map[b];
            map[b] = map[j];
            map[j] = t;
        }
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    tpl_broadcast_add_shape s = shape_of(sh);
    const int32_t *map = host[A_MAP];
    int64_t mn = s.M * s.N;
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t i = 0; i < mn; i++)
            tpl_set(ref[A_OUT], s.dtype, b * mn + i,
                    tpl_get(host[A_CAND], s.dtype, b * mn + i) + tpl_get(host[A_USER], s.dtype, map[b] * mn + i));
}

/* The error model (docs/checks.md): one f32 add, then the rounding to dtype. */
static void bound(const int64_t *sh, void *const *host, void *const *ref, double *const *bnd)
{
    tpl_broadcast_add_shape s = shape_of(sh);
    (void)host;
    if (!bnd[A_OUT])
        return;
    for (int64_t i = 0; i < s.B * s.M * s.N; i++) {
        double r = tpl_get(ref[A_OUT], s.dtype, i);
        bnd[A_OUT][i] = loom_error_bound(s.dtype, r, 0x1p-23 * (fabs(r) + loom_ulp(s.dtype, r)));
    }
}

const loom_template tpl_def_broadcast_add = {
    .name = "ikbo_broadcast_add",
    .doc = "IKBO broadcast-add by index: out[b] = cand[b] + user[cand_to_user[b]]",
    .nshape = LOOM_COUNT(BA_SHAPE),
    .shape = {BA_SHAPE(LOOM_SHAPE_PARAM)},
    .nconfig = LOOM_COUNT(BA_CONFIG),
    .config = {BA_CONFIG(LOOM_CONFIG_PARAM)},
    .build = build,
    .grid = grid,
    .grid_rule = grid_rule,
    .init = init,
    .reference = reference,
    .atol = 0,
    .rtol = 1e-3, /* f32: bit-exact in practice; f16/bf16: within one rounding */
    .valid = valid,
    .cost = cost,
    .bucket = bucket,
    .bound = bound,
};

/* ---------------------------------------------------------------- the tuner's device reference */

enum { BR_RM = 16, BR_RN = 64 };

/* The reference (out[b] = cand[b] + user[u(b)], one f32 add an element, rounded once) or,
 * with_bound, the error model's bound of each element of out, which then holds the
 * reference: the kernel's add and the reference's (u |r| each), then one ulp of out's type
 * (tpl_device_ulp_ub), scaled up by 2^-20 for the bound's own f32 arithmetic.  A program
 * a BR_RM x BR_RN tile of [M, N] (x) and a candidate (y). */
static loom_kernel *br_kernel(const tpl_broadcast_add_shape *s, bool with_bound)
{
    loom_kernel *k = loom_kernel_create(with_bound ? "ikbo_broadcast_add_ref_bound" : "ikbo_broadcast_add_ref", 4);
    ba_args a = ba_declare(k, s);
    loom_val cand = a.cand, user = a.user, map = a.map, out = a.out;
    loom_val bound = with_bound ? loom_arg_tensor(k, "bound", LOOM_F32, LOOM_SHAPE3(LOOM_DIM(a.B), s->M, s->N), LOOM_OUT)
                                : LOOM_NONE;
    loom_val tile = loom_program_id(k, 0), b = loom_program_id(k, 1);
    loom_val tn = loom_const_i(k, LOOM_I32, TPL_CDIV(s->N, BR_RN));
    loom_val m0 = loom_mul(k, loom_div(k, tile, tn), loom_const_i(k, LOOM_I32, BR_RM));
    loom_val n0 = loom_mul(k, loom_rem(k, tile, tn), loom_const_i(k, LOOM_I32, BR_RN));
    loom_shape t = LOOM_SHAPE2(BR_RM, BR_RN);
    loom_val at[3] = {b, m0, n0};
    if (!with_bound) {
        loom_val u = loom_load_scalar(k, map, &b);
        loom_val c = loom_cast(k, loom_load(k, cand, at, t, LOOM_NONE, 0.0), LOOM_F32);
        loom_val x = loom_cast(k, loom_load(k, user, ((loom_val[]){u, m0, n0}), t, LOOM_NONE, 0.0), LOOM_F32);
        loom_store(k, out, at, loom_cast(k, loom_add(k, c, x), s->dtype), LOOM_NONE);
        return k;
    }
#define C(v) loom_splat(k, loom_const_f(k, LOOM_F32, (v)), t)
    double up2 = 1 + 0x1p-20;
    loom_val r = loom_cast(k, loom_load(k, out, at, t, LOOM_NONE, 0.0), LOOM_F32), ar = loom_abs(k, r);
    loom_val err = loom_mul(k, loom_add(k, ar, tpl_device_ulp_ub(k, s->dtype, r, t)), C(2 * 0x1p-23 * up2));
    loom_val top = loom_add(k, loom_add(k, ar, loom_mul(k, C(0.5), tpl_device_ulp_ub(k, s->dtype, r, t))), err);
    loom_store(k, bound, at, loom_mul(k, loom_add(k, err, tpl_device_ulp_ub(k, s->dtype, top, t)), C(up2)), LOOM_NONE);
#undef C
    return k;
}

static bool br_grid(const int64_t *sh, tpl_broadcast_add_shape *s, int grid[3])
{
    *s = shape_of(sh);
    int64_t tiles = TPL_CDIV(s->M, BR_RM) * TPL_CDIV(s->N, BR_RN);
    if (tiles > INT32_MAX || s->B > 65535 ||
        (s->dtype != LOOM_F16 && s->dtype != LOOM_BF16 && s->dtype != LOOM_F32))
        return false;
    grid[0] = (int)tiles;
    grid[1] = (int)s->B;
    grid[2] = 1;
    return true;
}

static int br_reference(const int64_t *sh, loom_kernel **k, int (*grid)[3], int max, char *err, size_t n)
{
    tpl_broadcast_add_shape s;
    if (max < 1 || !br_grid(sh, &s, grid[0])) {
        snprintf(err, n, "the reference kernel serves B up to 65535 and f16, bf16 or f32");
        return 0;
    }
    k[0] = br_kernel(&s, false);
    return 1;
}

static loom_kernel *br_bound(const int64_t *sh, int grid[3])
{
    tpl_broadcast_add_shape s;
    return br_grid(sh, &s, grid) ? br_kernel(&s, true) : NULL;
}

static int br_fills(const int64_t *sh, tpl_device_fill *f, int max)
{
    (void)sh;
    if (max < 2)
        return 0;
    f[0] = (tpl_device_fill){A_CAND, -1, 1, 0, 0};
    f[1] = (tpl_device_fill){A_USER, -1, 1, 0, 0};
    return 2;
}

const tpl_device tpl_device_broadcast_add = {
    .t = &tpl_def_broadcast_add,
    .fills = br_fills,
    .init_rest = init,
    .reference = br_reference,
    .reference_doc = "one f32 add an element, a SIMT kernel",
    .bound = br_bound,
    .bound_arg = A_OUT,
};
