/*
 * row_softmax.c -- softmax over each row of a [R, N] matrix.
 *
 * One program handles BM rows; the whole row (N padded to a power of two, the tail masked
 * with -inf so it contributes exp2(-inf) = 0) is one tile, so every element is read once
 * and written once: the kernel is bound by memory bandwidth.  Computed in f32 whatever the
 * storage type: y = exp2((x - max) * log2 e) * (1 / sum).
 *
 * One reciprocal per row and a multiply per element, not a division per element: at f16
 * an element is 4 bytes of traffic, and at the copy's 4.2 TB/s an H200 has about 25
 * instructions per element to spend; a correctly rounded division alone takes 8-10 of
 * them (with its conversions, the exp2, the max and the sum the kernel ran out of issue
 * slots and reached 0.75 of the copy).  The multiply adds at most one f32 rounding, far
 * below the f16/bf16 output's.  With BM = warps each warp owns a row: the reductions are
 * shuffles only, without a barrier or shared memory.
 *
 * R is a run-time dim (loom_arg_dim; the shape's R is its maximum), so one kernel serves
 * every row count up to it: the arguments are R, x, y, and the grid follows R
 * (grid_rule).  N and the dtype are compile-time constants.
 */
#include "tpl.h"
#include "../util/util.h"

#include <math.h>
#include <string.h>

/* The template's table (loom_tune.h, "A template's table"): X(KEY, FIELD, TYPE, DEFAULT,
 * DOC, candidates or loom_param fields). */
#define SMAX_SHAPE(X)                                                                                       \
    X(R, R, int64_t, 4096, "rows (run-time: at most this)", .runtime = 1)                                  \
    X(N, N, int64_t, 1000, "columns")                                                                      \
    X(dtype, dt, loom_dtype, LOOM_F32, "element type")
#define SMAX_CONFIG(X)                                                                                      \
    X(BM, bm, int64_t, 1, "rows per program", 1, 2, 4, 8, 16, 32)                                          \
    X(warps, warps, int64_t, 4, "warps per CTA", 1, 2, 4, 8, 16, 32)

enum { SMAX_SHAPE(LOOM_S_INDEX) S_COUNT };
enum { SMAX_CONFIG(LOOM_C_INDEX) C_COUNT };
enum { A_R, A_X, A_Y }; /* the kernel's arguments */

/* A shape and config unpacked. */
typedef struct smax_cfg {
    SMAX_SHAPE(LOOM_FIELD)
    SMAX_CONFIG(LOOM_FIELD)
} smax_cfg;

static smax_cfg cfg_of(const int64_t *sh, const int64_t *cf)
{
    smax_cfg c;
    LOOM_UNPACK(SMAX_SHAPE, &c, sh);
    LOOM_UNPACK(SMAX_CONFIG, &c, cf);
    return c;
}

/* Why the kernel cannot be built at (shape, config), or NULL (buf holds a message made
 * here): what build refuses, and the first thing valid() checks. */
static const char *why_not_built(const smax_cfg *c, char *buf, size_t n)
{
    if (c->dt != LOOM_F16 && c->dt != LOOM_BF16 && c->dt != LOOM_F32)
        return "dtype must be f16, bf16 or f32";
    if (c->R < 1 || c->N < 1 || c->R > INT32_MAX)
        return "R and N must be positive (R < 2^31)";
    if (c->bm < 1)
        return "BM must be positive";
    int64_t np = tpl_pow2_at_least(c->N), elems;
    if (!util_mul_i64(c->bm, np, &elems) || elems > 65536) {
        snprintf(buf, n, "BM x pow2(N) = %lld x %lld exceeds a 65536-element tile", (long long)c->bm, (long long)np);
        return buf;
    }
    return NULL;
}

static loom_kernel *build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    smax_cfg c = cfg_of(sh, cf);
    char buf[200];
    const char *w = why_not_built(&c, buf, sizeof buf);
    if (w)
        return tpl_refuse(err, n, "%s", w);
    loom_dtype dt = c.dt;
    int64_t bm = c.bm, np = tpl_pow2_at_least(sh[S_N]);
    loom_kernel *k = loom_kernel_create("row_softmax", (int)cf[C_warps]);
    loom_val R = loom_arg_dim(k, "R", sh[S_R], 1); /* the launch's rows, at most the shape's */
    loom_val x = loom_arg_tensor(k, "x", dt, LOOM_SHAPE2(LOOM_DIM(R), sh[S_N]), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", dt, LOOM_SHAPE2(LOOM_DIM(R), sh[S_N]), LOOM_OUT);
    loom_shape tile = LOOM_SHAPE2(bm, np);

    loom_val r0 = loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, bm));
    loom_val c0 = loom_const_i(k, LOOM_I32, 0);
    loom_val v = loom_cast(k, loom_load(k, x, ((loom_val[]){r0, c0}), tile, LOOM_NONE, -INFINITY),
                           LOOM_F32);
    /* row max, broadcast back over the row */
    loom_val mx = loom_broadcast(k, loom_expand_dims(k, loom_reduce_max(k, v, 1), 1), tile);
    loom_val log2e = loom_const_f(k, LOOM_F32, 1.4426950408889634);
    loom_val e = loom_exp2(k, loom_mul(k, loom_sub(k, v, mx), log2e));
    loom_val inv = loom_div(k, loom_const_f(k, LOOM_F32, 1.0), loom_reduce_sum(k, e, 1));
    loom_val out = loom_cast(k, loom_mul(k, e, loom_broadcast(k, loom_expand_dims(k, inv, 1), tile)), dt);
    loom_store(k, y, ((loom_val[]){r0, c0}), out, LOOM_NONE);
    return k;
}

/* ---------------------------------------------------------------- tuning */

/* Worth timing: the [BM, pow2(N)] tile fits the compiler's limit, its rows are not mostly
 * masked off, every thread holds at least one element, its f32 tiles (the input, the
 * exponentials, the result) fit in registers, and the cross-warp reductions' scratch
 * fits in shared memory. */
static int valid(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    smax_cfg c = cfg_of(sh, cf);
    char buf[200];
    const char *w = why_not_built(&c, buf, sizeof buf);
    if (w)
        return !!tpl_refuse(why, n, "%s", w);
    int64_t bm = c.bm, warps = c.warps, tile = bm * tpl_pow2_at_least(c.N), threads = 32 * warps;
    if (warps < 1 || warps > 32)
        return !!tpl_refuse(why, n, "warps must be 1 to 32");
    if (bm > tpl_pow2_at_least(sh[S_R]))
        return !!tpl_refuse(why, n, "BM=%lld is above R=%lld rounded up to a power of two: rows would be masked off",
                            (long long)bm, (long long)sh[S_R]);
    if (threads > tile)
        return !!tpl_refuse(why, n, "%lld threads for a %lld-element tile: some would hold no element",
                            (long long)threads, (long long)tile);
    int64_t regs = 3 * (tile / threads) + 16;
    if (regs > 255)
        return !!tpl_refuse(why, n, "about %lld registers per thread for three f32 tiles of %lld elements (255 at "
                            "most: it would spill)", (long long)regs, (long long)(tile / threads));
    int64_t smem = 2 * bm * warps * 4;
    if (smem > 48 * 1024)
        return !!tpl_refuse(why, n, "%lld bytes of shared memory for the cross-warp reductions (48 KiB at most "
                            "without opt-in)", (long long)smem);
    return 1;
}

/* Memory-bound: bytes read and written over the bandwidth, inflated by padding (N up to
 * a power of two, R up to a multiple of BM), plus a cost per CTA and per cross-warp
 * reduction step (two reductions of log2(warps) steps, each with a barrier). */
static double cost(const int64_t *sh, const int64_t *cf)
{
    double R = (double)sh[S_R], N = (double)sh[S_N], es = (double)loom_dtype_size((loom_dtype)sh[S_dtype]);
    double bm = (double)cf[C_BM], warps = (double)cf[C_warps], np = (double)tpl_pow2_at_least(sh[S_N]);
    double progs = ceil(R / bm);
    double lanes = (R * N) / (progs * bm * np);
    double per = bm * np / (32 * warps);
    double vec_eff = per >= 16 / es ? 1.0 : per / (16 / es);
    double t_mem = 2 * R * N * es / 3.0e12 / (lanes * (0.5 + 0.5 * vec_eff));
    double t_cta = progs * (0.5e-9 + 0.2e-9 * log2(warps) * 2);
    return (t_mem + t_cta) * 1e3;
}

/* One config per row width: R is bucketed to the power of two at or above it. */
static void bucket(const int64_t *sh, int64_t *bk) { bk[S_R] = tpl_pow2_at_least(sh[S_R]); }

/* A program per BM rows of the launch's R. */
static void grid_rule(const int64_t *sh, const int64_t *cf, loom_grid_rule *r)
{
    (void)sh; /* N and the dtype do not change the grid */
    memset(r, 0, sizeof *r);
    for (int d = 0; d < 3; d++)
        r->div[d] = r->mult[d] = 1;
    r->per[0][S_R] = 1;
    r->div[0] = cf[C_BM] > 0 ? cf[C_BM] : 1;
    r->c[1] = r->c[2] = 1;
}

static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    loom_grid_rule r;
    grid_rule(sh, cf, &r);
    loom_grid_rule_eval(&r, sh, g);
}

static void init(const int64_t *sh, void *const *host, uint64_t seed)
{
    *(int32_t *)host[A_R] = (int32_t)sh[S_R]; /* the run-time dim at the shape's value */
    tpl_fill(host[A_X], (loom_dtype)sh[S_dtype], sh[S_R] * sh[S_N], -8, 8, &seed);
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    loom_dtype dt = (loom_dtype)sh[S_dtype];
    int64_t N = sh[S_N];
    for (int64_t r = 0; r < sh[S_R]; r++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < N; j++)
            mx = fmax(mx, tpl_get(host[A_X], dt, r * N + j));
        for (int64_t j = 0; j < N; j++)
            sum += exp(tpl_get(host[A_X], dt, r * N + j) - mx);
        for (int64_t j = 0; j < N; j++)
            tpl_set(ref[A_Y], dt, r * N + j, exp(tpl_get(host[A_X], dt, r * N + j) - mx) / sum);
    }
}

/* The error model (docs/checks.md) of y = exp2((x - max) * log2 e) * (1 / sum): the
 * exponent off by three f32 roundings, exp2 on the SFU (2^-21 relative at most), the sum
 * of N terms in f32, the reciprocal (two roundings) and the product, then dtype. */
static void bound(const int64_t *sh, void *const *host, void *const *ref, double *const *bnd)
{
    loom_dtype dt = (loom_dtype)sh[S_dtype];
    int64_t N = sh[S_N];
    const double u = 0x1p-23, log2e = 1.4426950408889634;
    if (!bnd[A_Y])
        return;
    for (int64_t r = 0; r < sh[S_R]; r++) {
        double mx = -INFINITY, dmax = 0, sum = 0;
        for (int64_t j = 0; j < N; j++)
            mx = fmax(mx, tpl_get(host[A_X], dt, r * N + j));
        for (int64_t j = 0; j < N; j++) {
            double a = fabs(tpl_get(host[A_X], dt, r * N + j) - mx) * log2e;
            dmax = fmax(dmax, (1 + expm1(3 * u * a * M_LN2)) * (1 + 0x1p-21) - 1);
            sum += exp(tpl_get(host[A_X], dt, r * N + j) - mx);
        }
        double sigma = dmax + loom_f32_sum_error(N, 1.0) * (1 + dmax);
        for (int64_t j = 0; j < N; j++) {
            double x = tpl_get(host[A_X], dt, r * N + j), a = fabs(x - mx) * log2e;
            double dj = (1 + expm1(3 * u * a * M_LN2)) * (1 + 0x1p-21) - 1;
            double rel = sigma < 0.5 ? (1 + dj) * (1 + u) * (1 + 2 * u) / (1 - sigma) - 1 : INFINITY;
            double y = exp(x - mx) / sum;
            bnd[A_Y][r * N + j] = loom_error_bound(dt, tpl_get(ref[A_Y], dt, r * N + j), rel * y);
        }
    }
}

const loom_template tpl_def_row_softmax = {
    .name = "row_softmax",
    .doc = "softmax over each row of x [R, N]",
    .nshape = LOOM_COUNT(SMAX_SHAPE),
    .shape = {SMAX_SHAPE(LOOM_SHAPE_PARAM)},
    .nconfig = LOOM_COUNT(SMAX_CONFIG),
    .config = {SMAX_CONFIG(LOOM_CONFIG_PARAM)},
    .build = build,
    .grid = grid,
    .grid_rule = grid_rule,
    .init = init,
    .reference = reference,
    .atol = 1e-6,
    .rtol = 1e-2, /* f32: ~1e-6 in practice; f16/bf16 outputs: one rounding (bf16: 2^-8) */
    .valid = valid,
    .cost = cost,
    .bucket = bucket,
    .bound = bound,
};
