/*
 * ikbo_gather_softmax.c -- the IKBO gather + softmax: each candidate scores its user's keys,
 * read by index, and softmaxes the scores.
 *
 *   candidates b in [0, B) each have a query row q[b, :] of D elements;
 *   users u in [0, U) each have S keys K[u, s, :] of D elements;
 *   cand_to_user[b] (i32, in [0, U)) is candidate b's user;
 *   out[b, s] = exp(x[b, s] - max_s' x[b, s']) / sum_s' exp(x[b, s'] - max_s' x[b, s'])
 *     where x[b, s] = scale * dot(q[b, :], K[cand_to_user[b], s, :]), scale = 1 / sqrt(D).
 *
 * q, K and out are of one dtype (f16 or f32); the dots are summed and the softmax computed
 * in f32.  Frameworks materialize K[cand_to_user[b]] for every candidate (a copy B/U times
 * the size of K) before a batched kernel; here the kernel reads the user's keys by index,
 * so the broadcast never exists in memory.
 *
 * Written the obvious way, on plain tiles: a program takes BB candidates, loads their
 * users (a [BB] tile of cand_to_user) and, in steps of BD along D, gathers the users' keys
 * (loom_load_rows: a [BB, pow2(S), BD] tile, row i of it K[u_i]), multiplies them by the
 * candidates' q [BB, BD] broadcast along S, and sums over D into the scores [BB, pow2(S)]
 * (a loop-carried f32 tile).  Then the row softmax of templates/row_softmax.c, in base 2:
 * the scores times scale * log2 e, the padding of S set to -inf, the row max, exp2, the
 * row sum, one reciprocal a row and a multiply an element.  Every op keeps the layout its
 * operands have (the scores are the slice of the gathered tile's layout, the row
 * statistics the slice of theirs), so nothing is converted through shared memory; the
 * reductions across warps are the only uses of scratch (LOOM_EXPLAIN=1 shows them).
 *
 * B and U are run-time dims (loom_arg_dim; the shape's B and U are their maxima), so one
 * kernel serves every batch up to them: the arguments are B, U, q, K, cand_to_user, out,
 * and the grid, cdiv(B, BB) programs along x, follows B (grid_rule).  S, D and the dtype
 * are compile-time constants.  BB, BD and warps are the tuner's knobs; valid() keeps the
 * tiles that fit the compiler's limit and the registers.
 */
#include "kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { S_B, S_U, S_S, S_D, S_DTYPE, S_SHUFFLE };
enum { C_BB, C_BD, C_WARPS };
enum { A_B, A_U, A_Q, A_K, A_MAP, A_OUT }; /* the kernel's arguments */

static int64_t pow2_at_least(int64_t n)
{
    int64_t p = 1;
    while (p < n)
        p *= 2;
    return p;
}

/* Why the shape cannot be served at all (into why), or 0 when it can. */
static int shape_refused(const int64_t *sh, char *why, size_t n)
{
    loom_dtype dt = (loom_dtype)sh[S_DTYPE];
    if (dt != LOOM_F16 && dt != LOOM_F32)
        return snprintf(why, n, "dtype must be f16 or f32"), 1;
    if (sh[S_B] < 1 || sh[S_U] < 1 || sh[S_B] > INT32_MAX || sh[S_U] > INT32_MAX)
        return snprintf(why, n, "B and U must be 1 to 2^31 - 1 (run-time dims: i32 arguments)"), 1;
    if (sh[S_S] < 1 || sh[S_D] < 1 || sh[S_S] > 65536 || sh[S_D] > 65536)
        return snprintf(why, n, "S and D must be 1 to 65536"), 1;
    return 0;
}

/* Why the config cannot build a kernel for the shape (into why), or 0 when it can. */
static int refused(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    if (shape_refused(sh, why, n))
        return 1;
    int64_t bb = cf[C_BB], bd = cf[C_BD], sp = pow2_at_least(sh[S_S]);
    if (bb < 1 || bd < 1 || (bb & (bb - 1)) || (bd & (bd - 1)))
        return snprintf(why, n, "BB and BD must be powers of two"), 1;
    if (bb > 65536 / sp || bb * sp > 65536 / bd)
        return snprintf(why, n, "BB x pow2(S) x BD = %lld x %lld x %lld exceeds a 65536-element tile", (long long)bb,
                        (long long)sp, (long long)bd), 1;
    if (cf[C_WARPS] < 1 || cf[C_WARPS] > 32)
        return snprintf(why, n, "warps must be 1 to 32"), 1;
    return 0;
}

static loom_kernel *build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    if (refused(sh, cf, err, n))
        return NULL;
    loom_dtype dt = (loom_dtype)sh[S_DTYPE];
    int64_t S = sh[S_S], D = sh[S_D], bb = cf[C_BB], bd = cf[C_BD], sp = pow2_at_least(S);
    loom_shape gathered = LOOM_SHAPE3(bb, sp, bd), scores = LOOM_SHAPE2(bb, sp);
    loom_kernel *k = loom_kernel_create("ikbo_gather_softmax", (int)cf[C_WARPS]);
    /* the batch's candidates and users, given at each launch (at most the shape's) */
    loom_val B = loom_arg_dim(k, "B", sh[S_B], 1);
    loom_val U = loom_arg_dim(k, "U", sh[S_U], 1);
    loom_val q = loom_arg_tensor(k, "q", dt, LOOM_SHAPE2(LOOM_DIM(B), D), LOOM_IN);
    loom_val keys = loom_arg_tensor(k, "K", dt, LOOM_SHAPE3(LOOM_DIM(U), S, D), LOOM_IN);
    loom_val map = loom_arg_tensor(k, "cand_to_user", LOOM_I32, LOOM_SHAPE1(LOOM_DIM(B)), LOOM_IN);
    loom_val out = loom_arg_tensor(k, "out", dt, LOOM_SHAPE2(LOOM_DIM(B), S), LOOM_OUT);

    /* this program's candidates and their users (past B: user 0, which exists; masked) */
    loom_val zero = loom_const_i(k, LOOM_I32, 0);
    loom_val b0 = loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, bb));
    loom_val users = loom_name(k, loom_load(k, map, &b0, LOOM_SHAPE1(bb), LOOM_NONE, 0), "users");

    /* the scores: x[i, s] = sum over d of q[b0 + i, d] * K[users[i], s, d], BD at a time */
    loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0), scores);
    loom_region_op dl = loom_for_begin(k, zero, loom_const_i(k, LOOM_I32, D), loom_const_i(k, LOOM_I32, bd), 1, &acc0);
    {
        loom_val d0 = loom_for_iv(k, dl);
        loom_val qt = loom_cast(k, loom_load(k, q, ((loom_val[]){b0, d0}), LOOM_SHAPE2(bb, bd), LOOM_NONE, 0), LOOM_F32);
        loom_val kt = loom_cast(k, loom_load_rows(k, keys, users, ((loom_val[]){LOOM_NONE, zero, d0}), gathered, 0),
                                LOOM_F32);
        loom_val prod = loom_mul(k, kt, loom_broadcast(k, loom_expand_dims(k, qt, 1), gathered));
        loom_val next = loom_add(k, loom_for_arg(k, dl, 0), loom_reduce_sum(k, prod, 2));
        loom_for_end(k, dl, 1, &next);
    }
    /* the softmax over s, in base 2; the padding of S past its end is -inf (exp2 gives 0) */
    loom_val x = loom_mul(k, loom_for_result(k, dl, 0), loom_const_f(k, LOOM_F32, 1.4426950408889634 / sqrt((double)D)));
    if (sp != S) {
        loom_val cols = loom_broadcast(k, loom_expand_dims(k, loom_arange(k, 0, (int32_t)sp), 0), scores);
        loom_val inside = loom_cmp(k, LOOM_LT, cols, loom_const_i(k, LOOM_I32, S));
        x = loom_select(k, inside, x, loom_const_f(k, LOOM_F32, -INFINITY));
    }
    loom_val mx = loom_broadcast(k, loom_expand_dims(k, loom_reduce_max(k, x, 1), 1), scores);
    loom_val e = loom_exp2(k, loom_sub(k, x, mx));
    loom_val inv = loom_div(k, loom_const_f(k, LOOM_F32, 1.0), loom_reduce_sum(k, e, 1));
    loom_val y = loom_mul(k, e, loom_broadcast(k, loom_expand_dims(k, inv, 1), scores));
    loom_store(k, out, ((loom_val[]){b0, zero}), loom_cast(k, y, dt), LOOM_NONE);
    return k;
}

/* ---------------------------------------------------------------- tuning */

/* Worth timing: the tile builds, is not mostly masked off (BB within B, BD within D, each
 * rounded up to a power of two), every thread holds an element of the gathered tile, and
 * its tiles fit in registers: the gathered keys and their products (f32) and the scores. */
static int valid(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    if (refused(sh, cf, why, n))
        return 0;
    int64_t bb = cf[C_BB], bd = cf[C_BD], sp = pow2_at_least(sh[S_S]), threads = 32 * cf[C_WARPS];
    if (bb > pow2_at_least(sh[S_B]))
        return snprintf(why, n, "BB=%lld is above B=%lld rounded up to a power of two: rows would be masked off",
                        (long long)bb, (long long)sh[S_B]), 0;
    if (bd > pow2_at_least(sh[S_D]))
        return snprintf(why, n, "BD=%lld is above D=%lld rounded up to a power of two: columns would be masked off",
                        (long long)bd, (long long)sh[S_D]), 0;
    if (threads > bb * sp * bd)
        return snprintf(why, n, "%lld threads for a %lld-element tile: some would hold no element", (long long)threads,
                        (long long)(bb * sp * bd)), 0;
    int64_t per = bb * sp * bd / threads, regs = 2 * per + (bb * sp + threads - 1) / threads + 24;
    if (regs > 255)
        return snprintf(why, n, "about %lld registers a thread for the gathered keys, their products and the scores "
                        "(255 at most: it would spill)", (long long)regs), 0;
    return 1;
}

/* The keys come from L2 once per candidate (a user's keys are shared by its candidates
 * and stay in L2): bytes over L2's bandwidth, inflated by the padding of S, B and D, plus a
 * cost per CTA and per loop step.  It ranks configs; it does not predict milliseconds. */
static double cost(const int64_t *sh, const int64_t *cf)
{
    double B = (double)sh[S_B], S = (double)sh[S_S], D = (double)sh[S_D];
    double es = (double)loom_dtype_size((loom_dtype)sh[S_DTYPE]);
    double bb = (double)cf[C_BB], bd = (double)cf[C_BD], sp = (double)pow2_at_least(sh[S_S]);
    double progs = ceil(B / bb), steps = ceil(D / bd);
    double lanes = (B * S * D) / (progs * bb * sp * steps * bd);
    double per = bb * sp * bd / (32.0 * (double)cf[C_WARPS]);
    double vec_eff = per >= 16 / es ? 1.0 : per / (16 / es);
    double t_mem = B * (S * D + D + S) * es / 8.0e12 / (lanes * (0.5 + 0.5 * vec_eff));
    double t_cta = progs * (1e-9 + steps * 0.1e-9);
    return (t_mem + t_cta) * 1e3;
}

/* The tile does not depend on how many candidates or users there are: B and U are
 * bucketed to the power of two at or above them. */
static void bucket(const int64_t *sh, int64_t *bk)
{
    bk[S_B] = pow2_at_least(sh[S_B]);
    bk[S_U] = pow2_at_least(sh[S_U]);
}

/* A program per BB candidates of the launch's B, along x. */
static void grid_rule(const int64_t *sh, const int64_t *cf, loom_grid_rule *r)
{
    (void)sh;
    memset(r, 0, sizeof *r);
    for (int d = 0; d < 3; d++)
        r->div[d] = r->mult[d] = 1;
    r->per[0][S_B] = 1;
    r->div[0] = cf[C_BB] > 0 ? cf[C_BB] : 1;
    r->c[1] = r->c[2] = 1;
}

static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    loom_grid_rule r;
    grid_rule(sh, cf, &r);
    loom_grid_rule_eval(&r, sh, g);
}

/* Inputs in [-2, 2) (scores spread over several units, so the softmax is not flat), and a
 * mapping of B / U candidates a user in order, or shuffled. */
static void init(const int64_t *sh, void *const *host, uint64_t seed)
{
    loom_dtype dt = (loom_dtype)sh[S_DTYPE];
    int64_t B = sh[S_B], U = sh[S_U];
    *(int32_t *)host[A_B] = (int32_t)B; /* the run-time dims at the shape's values */
    *(int32_t *)host[A_U] = (int32_t)U;
    for (int64_t i = 0; i < B * sh[S_D]; i++)
        kernels_set(host[A_Q], dt, i, 2 * kernels_rand(&seed));
    for (int64_t i = 0; i < U * sh[S_S] * sh[S_D]; i++)
        kernels_set(host[A_K], dt, i, 2 * kernels_rand(&seed));
    int32_t *map = host[A_MAP];
    for (int64_t b = 0; b < B; b++)
        map[b] = (int32_t)(b * U / B);
    if (sh[S_SHUFFLE])
        for (int64_t b = B - 1; b > 0; b--) {
            int64_t j = (int64_t)((kernels_rand(&seed) + 1) * 0.5 * (double)(b + 1));
            int32_t t = map[b];
            map[b] = map[j > b ? b : j];
            map[j > b ? b : j] = t;
        }
}

/* Candidate b's dots with its user's keys in double (x[s]) and their magnitudes
 * (mag[s] = sum over d of |q k|). */
static void dots(const int64_t *sh, void *const *host, int64_t b, double *x, double *mag)
{
    loom_dtype dt = (loom_dtype)sh[S_DTYPE];
    int64_t S = sh[S_S], D = sh[S_D], u = ((const int32_t *)host[A_MAP])[b];
    for (int64_t s = 0; s < S; s++) {
        x[s] = mag[s] = 0;
        for (int64_t d = 0; d < D; d++) {
            double t = kernels_get(host[A_Q], dt, b * D + d) * kernels_get(host[A_K], dt, (u * S + s) * D + d);
            x[s] += t, mag[s] += fabs(t);
        }
    }
}

/* out[b, :] in double from the dots x (y[s]); returns the row's largest dot. */
static double softmax_row(int64_t S, int64_t D, const double *x, double *y)
{
    double mx = -INFINITY, sum = 0, scale = 1 / sqrt((double)D);
    for (int64_t s = 0; s < S; s++)
        mx = fmax(mx, x[s]);
    for (int64_t s = 0; s < S; s++)
        sum += (y[s] = exp(scale * (x[s] - mx)));
    for (int64_t s = 0; s < S; s++)
        y[s] /= sum;
    return mx;
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    int64_t S = sh[S_S];
    double *x = malloc(3 * (size_t)S * sizeof *x);
    if (!x) /* (the check then finds the outputs unset: a failure, not a crash) */
        return;
    for (int64_t b = 0; b < sh[S_B]; b++) {
        dots(sh, host, b, x, x + S);
        softmax_row(S, sh[S_D], x, x + 2 * S);
        for (int64_t s = 0; s < S; s++)
            kernels_set(ref[A_OUT], (loom_dtype)sh[S_DTYPE], b * S + s, x[2 * S + s]);
    }
    free(x);
}

/* The error model (docs/checks.md).  The exponent of element s, scale log2(e) times the
 * dot, is off by c E_s: the dot's f32 sum of D products (gamma_(D+1) sum |q k|, f32 inputs'
 * products rounded too), the product by the f32 constant c (two roundings: 2u |x|) and the
 * subtraction of the row max (u |x - max|); the max itself cancels.  exp2 on the SFU adds
 * 2^-21 relative.  So each exponential is off by a_s = 2^E_s (1 + 2^-21) - 1 relative, the
 * row sum of S of them by sigma = a_max + gamma_S (1 + a_max), and the reciprocal and the
 * product by a rounding each: (1 + a_s)(1 + u)(1 + 2u) / (1 - sigma) - 1 relative, then the
 * output's rounding; exp2 flushes results below 2^-126 to 0 (2^-125 absolute at most, the
 * sum being at least 1; S 2^-126 relative on the sum).  u = 2^-23, a whole ulp of f32, as the model's sums take it. */
static void bound(const int64_t *sh, void *const *host, void *const *ref, double *const *bnd)
{
    loom_dtype dt = (loom_dtype)sh[S_DTYPE];
    int64_t S = sh[S_S], D = sh[S_D];
    const double u = 0x1p-23, c = 1.4426950408889634 / sqrt((double)D);
    double *x = malloc(4 * (size_t)S * sizeof *x);
    if (!bnd[A_OUT] || !x) {
        free(x);
        return;
    }
    double *mag = x + S, *y = x + 2 * S, *e = x + 3 * S;
    for (int64_t b = 0; b < sh[S_B]; b++) {
        dots(sh, host, b, x, mag);
        double mx = softmax_row(S, D, x, y), emax = 0, spread = 0;
        for (int64_t s = 0; s < S; s++) { /* the exponent's error before the subtraction of the max */
            double dot_err = loom_f32_sum_error(D + 1, mag[s]);
            e[s] = c * dot_err + 2 * u * c * (fabs(x[s]) + dot_err);
            emax = fmax(emax, e[s]);
            spread = fmax(spread, c * (mx - x[s]));
        }
        double amax = exp2(emax + u * (spread + 2 * emax)) * (1 + 0x1p-21) - 1;
        double sigma = amax + loom_f32_sum_error(S, 1.0) * (1 + amax) + (double)S * 0x1p-126;
        for (int64_t s = 0; s < S; s++) {
            double es = e[s] + u * (c * (mx - x[s]) + 2 * emax);
            double as = exp2(es) * (1 + 0x1p-21) - 1;
            double rel = sigma < 0.5 ? (1 + as) * (1 + u) * (1 + 2 * u) / (1 - sigma) - 1 : INFINITY;
            bnd[A_OUT][b * S + s] = loom_error_bound(dt, kernels_get(ref[A_OUT], dt, b * S + s), rel * y[s] + 0x1p-125);
        }
    }
    free(x);
}

const loom_template ikbo_gather_softmax_template = {
    .name = "ikbo_gather_softmax",
    .doc = "IKBO gather + softmax: out[b] = softmax(q[b] . K[cand_to_user[b]]^T / sqrt(D)) (examples/kernels)",
    .nshape = 6,
    .shape = {{"B", 2048, "candidates (run-time: at most this)", .runtime = 1},
              {"U", 32, "users (run-time: at most this)", .runtime = 1},
              {"S", 256, "keys a user"},
              {"D", 128, "elements a query and a key"},
              {"dtype", LOOM_F16, "element type of q, K and out (f16 or f32)"},
              {"shuffle", 0, "1: shuffled candidate-to-user mapping", .inputs_only = 1}},
    .nconfig = 3,
    .config = {{"BB", 1, "candidates a program", 4, {1, 2, 4, 8}},
               {"BD", 32, "elements of D a step", 4, {16, 32, 64, 128}},
               {"warps", 4, "warps a CTA", 4, {1, 2, 4, 8}}},
    .build = build,
    .grid = grid,
    .grid_rule = grid_rule,
    .init = init,
    .reference = reference,
    .valid = valid,
    .cost = cost,
    .bucket = bucket,
    .bound = bound,
};
