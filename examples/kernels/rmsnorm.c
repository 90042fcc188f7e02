/*
 * rmsnorm.c -- RMSNorm over each row of x [R, N]: y = x / sqrt(mean(x^2) + eps) * w.
 *
 * One program normalizes BM rows; a row (N padded to a power of two, the padding loaded
 * as 0, which adds nothing to the sum of squares) is one tile, so x is read once and y
 * written once.  Computed in f32 whatever the storage type.  BM and warps are the
 * tuner's knobs (valid() keeps the pairs that fit).
 *
 * The template is one table (docs/kernels.md, "A template's table"): each shape key and
 * config knob is a row of RMSNORM_SHAPE or RMSNORM_CONFIG, written once; the index enums,
 * the struct the vectors unpack into and the registry entry's parameters come from them,
 * and one check, why_not, serves both valid() and build.
 */
#include "kernels.h"

#include <math.h>
#include <stdio.h>

/* X(KEY, FIELD, TYPE, DEFAULT, DOC, then a config knob's candidates) */
#define RMSNORM_SHAPE(X)                                                                                    \
    X(R, R, int64_t, 4096, "rows")                                                                         \
    X(N, N, int64_t, 4096, "columns")                                                                      \
    X(dtype, dt, loom_dtype, LOOM_F16, "element type (f16 or f32)")
#define RMSNORM_CONFIG(X)                                                                                   \
    X(BM, bm, int64_t, 1, "rows a program", 1, 2, 4, 8)                                                    \
    X(warps, warps, int64_t, 4, "warps a CTA", 1, 2, 4, 8)

enum { RMSNORM_SHAPE(LOOM_S_INDEX) S_COUNT };  /* S_R, S_N, S_dtype */
enum { RMSNORM_CONFIG(LOOM_C_INDEX) C_COUNT }; /* C_BM, C_warps */
enum { A_X, A_W, A_Y };                         /* the kernel's arguments */

/* A shape and config unpacked: R, N, dt, bm, warps. */
typedef struct rms {
    RMSNORM_SHAPE(LOOM_FIELD)
    RMSNORM_CONFIG(LOOM_FIELD)
} rms;

static rms rms_of(const int64_t *sh, const int64_t *cf)
{
    rms c;
    LOOM_UNPACK(RMSNORM_SHAPE, &c, sh);
    LOOM_UNPACK(RMSNORM_CONFIG, &c, cf);
    return c;
}
#define EPS 1e-6

static int64_t pow2_at_least(int64_t n)
{
    int64_t p = 1;
    while (p < n)
        p *= 2;
    return p;
}

/* The one check: why the config cannot serve the shape (a message, in buf where it is
 * made here), or NULL when it can.  valid() and build both ask it. */
static const char *why_not(const rms *c, char *buf, size_t n)
{
    int64_t np = pow2_at_least(c->N), threads = 32 * c->warps;
    if (c->dt != LOOM_F16 && c->dt != LOOM_F32)
        return "dtype must be f16 or f32";
    if (c->R < 1 || c->N < 1 || c->N > 65536)
        return "R and N must be positive, N at most 65536";
    if (c->bm < 1 || c->bm * np > 65536) {
        snprintf(buf, n, "BM x pow2(N) = %lld x %lld exceeds a 65536-element tile", (long long)c->bm, (long long)np);
        return buf;
    }
    if (c->warps < 1 || c->warps > 32 || threads > c->bm * np)
        return "warps must be 1 to 32, and each thread must hold an element";
    return NULL;
}

static int valid(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    rms c = rms_of(sh, cf);
    char buf[200];
    const char *w = why_not(&c, buf, sizeof buf);
    if (w)
        snprintf(why, n, "%s", w);
    return w == NULL;
}

static loom_kernel *build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    rms c = rms_of(sh, cf);
    if (!valid(sh, cf, err, n))
        return NULL;
    int64_t np = pow2_at_least(c.N);
    loom_shape tile = LOOM_SHAPE2(c.bm, np);
    loom_kernel *k = loom_kernel_create("rmsnorm", (int)c.warps);
    loom_val x = loom_arg_tensor(k, "x", c.dt, LOOM_SHAPE2(c.R, c.N), LOOM_IN);
    loom_val w = loom_arg_tensor(k, "w", c.dt, LOOM_SHAPE1(c.N), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", c.dt, LOOM_SHAPE2(c.R, c.N), LOOM_OUT);

    loom_val offs[2] = {loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, c.bm)),
                        loom_const_i(k, LOOM_I32, 0)};
    loom_val v = loom_cast(k, loom_load(k, x, offs, tile, LOOM_NONE, 0), LOOM_F32);
    /* 1 / sqrt(mean of squares + eps), one a row, broadcast back over the row */
    loom_val ms = loom_mul(k, loom_reduce_sum(k, loom_mul(k, v, v), 1), loom_const_f(k, LOOM_F32, 1.0 / c.N));
    loom_val inv = loom_rsqrt(k, loom_add(k, ms, loom_const_f(k, LOOM_F32, EPS)));
    loom_val scale = loom_broadcast(k, loom_expand_dims(k, inv, 1), tile);
    loom_val wv = loom_cast(k, loom_load(k, w, &offs[1], LOOM_SHAPE1(np), LOOM_NONE, 0), LOOM_F32);
    loom_val out = loom_mul(k, loom_mul(k, v, scale), loom_broadcast(k, loom_expand_dims(k, wv, 0), tile));
    loom_store(k, y, offs, loom_cast(k, out, c.dt), LOOM_NONE);
    return k;
}

static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    g[0] = (int)((sh[S_R] + cf[C_BM] - 1) / cf[C_BM]), g[1] = g[2] = 1;
}

static void init(const int64_t *sh, void *const *host, uint64_t seed)
{
    loom_dtype dt = (loom_dtype)sh[S_dtype];
    for (int64_t i = 0; i < sh[S_R] * sh[S_N]; i++)
        kernels_set(host[A_X], dt, i, 2 * kernels_rand(&seed));
    for (int64_t i = 0; i < sh[S_N]; i++)
        kernels_set(host[A_W], dt, i, 1 + 0.5 * kernels_rand(&seed));
}

/* The exact result (in double) of row r's element j. */
static double exact(const int64_t *sh, void *const *host, int64_t r, int64_t j, double *ss)
{
    loom_dtype dt = (loom_dtype)sh[S_dtype];
    int64_t N = sh[S_N];
    *ss = 0;
    for (int64_t q = 0; q < N; q++)
        *ss += kernels_get(host[A_X], dt, r * N + q) * kernels_get(host[A_X], dt, r * N + q);
    return kernels_get(host[A_X], dt, r * N + j) / sqrt(*ss / N + EPS) * kernels_get(host[A_W], dt, j);
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    double ss;
    for (int64_t r = 0; r < sh[S_R]; r++)
        for (int64_t j = 0; j < sh[S_N]; j++)
            kernels_set(ref[A_Y], (loom_dtype)sh[S_dtype], r * sh[S_N] + j, exact(sh, host, r, j, &ss));
}

/* The error model (docs/checks.md): the sum of N squares in f32 (relative error at most
 * gamma_N), halved by the square root; rsqrt within 2^-21; the squares, the mean, eps,
 * the products and the casts a few f32 roundings more; then the output's rounding. */
static void bound(const int64_t *sh, void *const *host, void *const *ref, double *const *bnd)
{
    loom_dtype dt = (loom_dtype)sh[S_dtype];
    for (int64_t r = 0; r < sh[S_R]; r++)
        for (int64_t j = 0; j < sh[S_N]; j++) {
            double ss, y = exact(sh, host, r, j, &ss);
            double rel = (ss > 0 ? 0.5 * loom_f32_sum_error(sh[S_N], ss) / ss : 0) + 0x1p-21 + 8 * 0x1p-24;
            bnd[A_Y][r * sh[S_N] + j] = loom_error_bound(dt, kernels_get(ref[A_Y], dt, r * sh[S_N] + j), rel * fabs(y));
        }
}

const loom_template rmsnorm_template = {
    .name = "rmsnorm",
    .doc = "RMSNorm over each row of x [R, N], scaled by w [N] (examples/kernels)",
    .nshape = LOOM_COUNT(RMSNORM_SHAPE),
    .shape = {RMSNORM_SHAPE(LOOM_SHAPE_PARAM)},
    .nconfig = LOOM_COUNT(RMSNORM_CONFIG),
    .config = {RMSNORM_CONFIG(LOOM_CONFIG_PARAM)},
    .build = build,
    .grid = grid,
    .init = init,
    .reference = reference,
    .valid = valid,
    .bound = bound,
};
