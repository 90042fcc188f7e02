/*
 * plain.c -- the kernels of plain.h, each written the way a Triton user writes it: loads
 * of tiles in a loop, loom_dot, an epilogue.  loom_kernel_set_autows (when the config's
 * consumers is not 0) asks the compiler for the producer / consumer form.
 */
#include "plain.h"

#include <math.h>

#define I32(v) loom_const_i(k, LOOM_I32, (v))
#define CDIV(a, b) (((a) + (b) - 1) / (b))

static void specialize(loom_kernel *k, const plain_cfg *c)
{
    if (c->consumers)
        loom_kernel_set_autows(k, c->consumers, c->stages, c->pingpong);
}

/* The tile (pid_m, pid_n) of program pid: row-major, or `group` tile rows at a time
 * (Triton's grouped order: programs side by side share B's columns and A's rows in L2). */
static void tile_of(loom_kernel *k, loom_val pid, loom_val tiles_m, int64_t tiles_n, int group, loom_val *pm,
                    loom_val *pn)
{
    if (!group) {
        *pm = loom_div(k, pid, I32(tiles_n));
        *pn = loom_rem(k, pid, I32(tiles_n));
        return;
    }
    loom_val per_group = I32(group * tiles_n);
    loom_val first = loom_mul(k, loom_div(k, pid, per_group), I32(group));
    loom_val rows = loom_min(k, loom_sub(k, tiles_m, first), I32(group));
    loom_val in = loom_rem(k, pid, per_group);
    *pm = loom_add(k, first, loom_rem(k, in, rows));
    *pn = loom_div(k, in, rows);
}

/* acc = A[m0.., :] @ B[b, :, n0..] over K (b: B's leading offset, or LOOM_NONE for a 2-D
 * B): the loop every GEMM here shares. */
static loom_val mainloop(loom_kernel *k, loom_val A, loom_val B, loom_val b, loom_val m0, loom_val n0, int64_t K,
                         const plain_cfg *c)
{
    loom_val acc = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(c->bm, c->bn));
    loom_region_op l = loom_for_begin(k, I32(0), I32(K), I32(c->bk), 1, &acc);
    {
        loom_val kk = loom_for_iv(k, l), bo[3] = {b, kk, n0};
        loom_val a = loom_load(k, A, ((loom_val[]){m0, kk}), LOOM_SHAPE2(c->bm, c->bk), LOOM_NONE, 0);
        loom_val e = loom_load(k, B, b ? bo : bo + 1, LOOM_SHAPE2(c->bk, c->bn), LOOM_NONE, 0);
        acc = loom_dot(k, a, e, loom_for_arg(k, l, 0));
    }
    loom_for_end(k, l, 1, &acc);
    return loom_for_result(k, l, 0);
}

loom_kernel *plain_gemm(int64_t M, int64_t N, int64_t K, loom_dtype dt, const plain_cfg *c)
{
    loom_kernel *k = loom_kernel_create("gemm_plain", 4);
    loom_val m = loom_arg_dim(k, "M", M, 1);
    loom_val A = loom_arg_tensor(k, "A", dt, LOOM_SHAPE2(LOOM_DIM(m), K), LOOM_IN);
    loom_val B = loom_arg_tensor(k, "B", dt, LOOM_SHAPE2(K, N), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", dt, LOOM_SHAPE2(LOOM_DIM(m), N), LOOM_OUT);
    loom_val pm, pn, tiles_m = loom_div(k, loom_add(k, m, I32(c->bm - 1)), I32(c->bm));
    tile_of(k, loom_program_id(k, 0), tiles_m, CDIV(N, c->bn), c->group, &pm, &pn);
    loom_val m0 = loom_mul(k, pm, I32(c->bm)), n0 = loom_mul(k, pn, I32(c->bn));
    loom_val acc = mainloop(k, A, B, LOOM_NONE, m0, n0, K, c);
    loom_store(k, C, ((loom_val[]){m0, n0}), loom_cast(k, acc, dt), LOOM_NONE);
    specialize(k, c);
    return k;
}

loom_kernel *plain_gemm_fp8(int64_t M, int64_t N, int64_t K, loom_dtype adt, loom_dtype bdt, loom_dtype odt,
                           const plain_cfg *c)
{
    loom_kernel *k = loom_kernel_create("gemm_fp8_plain", 4);
    loom_val m = loom_arg_dim(k, "M", M, 1);
    loom_val A = loom_arg_tensor(k, "A", adt, LOOM_SHAPE2(LOOM_DIM(m), K), LOOM_IN);
    loom_val Bt = loom_arg_tensor(k, "Bt", bdt, LOOM_SHAPE2(N, K), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", odt, LOOM_SHAPE2(LOOM_DIM(m), N), LOOM_OUT);
    loom_val pm, pn, tiles_m = loom_div(k, loom_add(k, m, I32(c->bm - 1)), I32(c->bm));
    tile_of(k, loom_program_id(k, 0), tiles_m, CDIV(N, c->bn), c->group, &pm, &pn);
    loom_val m0 = loom_mul(k, pm, I32(c->bm)), n0 = loom_mul(k, pn, I32(c->bn));
    loom_val acc = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(c->bm, c->bn));
    loom_region_op l = loom_for_begin(k, I32(0), I32(K), I32(c->bk), 1, &acc);
    {
        loom_val kk = loom_for_iv(k, l);
        loom_val a = loom_load(k, A, ((loom_val[]){m0, kk}), LOOM_SHAPE2(c->bm, c->bk), LOOM_NONE, 0);
        loom_val bt = loom_load(k, Bt, ((loom_val[]){n0, kk}), LOOM_SHAPE2(c->bn, c->bk), LOOM_NONE, 0);
        acc = loom_dot(k, a, loom_trans(k, bt), loom_for_arg(k, l, 0)); /* B K-major, as FP8 wgmma reads it */
    }
    loom_for_end(k, l, 1, &acc);
    acc = loom_for_result(k, l, 0);
    loom_store(k, C, ((loom_val[]){m0, n0}), odt == LOOM_F32 ? acc : loom_cast(k, acc, odt), LOOM_NONE);
    specialize(k, c);
    return k;
}

loom_kernel *plain_gemm_bias_gelu(int64_t M, int64_t N, int64_t K, loom_dtype dt, const plain_cfg *c)
{
    loom_kernel *k = loom_kernel_create("gemm_bias_gelu_plain", 4);
    loom_val m = loom_arg_dim(k, "M", M, 1);
    loom_val A = loom_arg_tensor(k, "A", dt, LOOM_SHAPE2(LOOM_DIM(m), K), LOOM_IN);
    loom_val B = loom_arg_tensor(k, "B", dt, LOOM_SHAPE2(K, N), LOOM_IN);
    loom_val bias = loom_arg_tensor(k, "bias", LOOM_F32, LOOM_SHAPE1(N), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", dt, LOOM_SHAPE2(LOOM_DIM(m), N), LOOM_OUT);
    loom_val pm, pn, tiles_m = loom_div(k, loom_add(k, m, I32(c->bm - 1)), I32(c->bm));
    tile_of(k, loom_program_id(k, 0), tiles_m, CDIV(N, c->bn), c->group, &pm, &pn);
    loom_val m0 = loom_mul(k, pm, I32(c->bm)), n0 = loom_mul(k, pn, I32(c->bn));
    loom_val x = mainloop(k, A, B, LOOM_NONE, m0, n0, K, c);
    /* + bias row, then gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    loom_val brow = loom_load(k, bias, &n0, LOOM_SHAPE1(c->bn), LOOM_NONE, 0);
    x = loom_add(k, x, loom_broadcast(k, loom_expand_dims(k, brow, 0), LOOM_SHAPE2(c->bm, c->bn)));
    loom_val x3 = loom_mul(k, loom_mul(k, x, x), x);
    loom_val in = loom_mul(k, loom_fma(k, x3, loom_const_f(k, LOOM_F32, 0.044715), x),
                           loom_const_f(k, LOOM_F32, sqrt(2.0 / M_PI)));
    loom_val g = loom_mul(k, loom_mul(k, x, loom_const_f(k, LOOM_F32, 0.5)),
                          loom_add(k, loom_tanh(k, in), loom_const_f(k, LOOM_F32, 1.0)));
    loom_store(k, C, ((loom_val[]){m0, n0}), loom_cast(k, g, dt), LOOM_NONE);
    specialize(k, c);
    return k;
}

loom_kernel *plain_batched_gemm(int64_t M, int64_t N, int64_t K, int64_t batch, loom_dtype dt, loom_dtype odt,
                                const plain_cfg *c)
{
    loom_kernel *k = loom_kernel_create("batched_gemm_plain", 4);
    loom_val m = loom_arg_dim(k, "M", M, 1);
    int64_t ast[2] = {(K + 7) / 8 * 8, 1}, bst[3] = {K * N, N, 1}, cst[3] = {M * N, N, 1};
    loom_val A = loom_arg_tensor_strided(k, "A", dt, LOOM_SHAPE2(LOOM_DIM(m), K), ast, LOOM_IN);
    loom_val B = loom_arg_tensor_strided(k, "B", dt, LOOM_SHAPE3(batch, K, N), bst, LOOM_IN);
    loom_val C = loom_arg_tensor_strided(k, "C", odt, LOOM_SHAPE3(batch, LOOM_DIM(m), N), cst, LOOM_OUT);
    loom_val b = loom_program_id(k, 1), pm, pn;
    tile_of(k, loom_program_id(k, 0), I32(0), CDIV(N, c->bn), 0, &pm, &pn);
    loom_val m0 = loom_mul(k, pm, I32(c->bm)), n0 = loom_mul(k, pn, I32(c->bn));
    loom_val acc = mainloop(k, A, B, b, m0, n0, K, c);
    loom_store(k, C, ((loom_val[]){b, m0, n0}), odt == LOOM_F32 ? acc : loom_cast(k, acc, odt), LOOM_NONE);
    specialize(k, c);
    return k;
}

/* v of dtype dt in f32 (a cast where it is not) */
static loom_val f32(loom_kernel *k, loom_val v, loom_dtype dt)
{
    return dt == LOOM_F32 ? v : loom_cast(k, v, LOOM_F32);
}

/* The IKBO fused stage's arguments (both forms take the same) and the program's tile:
 * candidate b (y), rows m0 and columns n0 of out (x). */
typedef struct ikbo_io {
    loom_val W, E, map, R, O, b, m0, n0;
} ikbo_io;

static ikbo_io ikbo_declare(loom_kernel *k, int64_t M, int64_t N, int64_t K, int64_t B, int64_t U, loom_dtype dt,
                            loom_dtype rdt, const plain_cfg *c)
{
    ikbo_io a;
    loom_val m = loom_arg_dim(k, "M", M, 1);
    int64_t wst[2] = {(K + 7) / 8 * 8, 1}, est[3] = {K * N, N, 1}, ust[3] = {M * N, N, 1}, ost[3] = {M * N, N, 1};
    a.W = loom_arg_tensor_strided(k, "W", dt, LOOM_SHAPE2(LOOM_DIM(m), K), wst, LOOM_IN);
    a.E = loom_arg_tensor_strided(k, "E", dt, LOOM_SHAPE3(B, K, N), est, LOOM_IN);
    a.map = loom_arg_tensor(k, "cand_to_user", LOOM_I32, LOOM_SHAPE1(B), LOOM_IN);
    a.R = loom_arg_tensor_strided(k, "user_res", rdt, LOOM_SHAPE3(U, LOOM_DIM(m), N), ust, LOOM_IN);
    a.O = loom_arg_tensor_strided(k, "out", dt, LOOM_SHAPE3(B, LOOM_DIM(m), N), ost, LOOM_OUT);
    loom_val pm, pn;
    a.b = loom_program_id(k, 1);
    tile_of(k, loom_program_id(k, 0), I32(0), CDIV(N, c->bn), 0, &pm, &pn);
    a.m0 = loom_mul(k, pm, I32(c->bm));
    a.n0 = loom_mul(k, pn, I32(c->bn));
    return a;
}

loom_kernel *plain_ikbo_fused(int64_t M, int64_t N, int64_t K, int64_t B, int64_t U, loom_dtype dt,
                              loom_dtype rdt, const plain_cfg *c)
{
    loom_kernel *k = loom_kernel_create("ikbo_fused_plain", 4);
    ikbo_io a = ikbo_declare(k, M, N, K, B, U, dt, rdt, c);
    loom_val W = a.W, E = a.E, map = a.map, R = a.R, O = a.O, b = a.b, m0 = a.m0, n0 = a.n0;
    loom_val acc = mainloop(k, W, E, b, m0, n0, K, c);
    /* + the user's half, read by index: user_res[cand_to_user[b]] */
    loom_val u = loom_load_scalar(k, map, &b);
    loom_val r = loom_load(k, R, ((loom_val[]){u, m0, n0}), LOOM_SHAPE2(c->bm, c->bn), LOOM_NONE, 0);
    loom_store(k, O, ((loom_val[]){b, m0, n0}), loom_cast(k, loom_add(k, acc, f32(k, r, rdt)), dt), LOOM_NONE);
    specialize(k, c);
    return k;
}

/* Where the keys and values of one query tile are: tensors K and V, a key tile [bn, D] at
 * offsets lead..., n0, 0 (nlead leading offsets: the user and head of IKBO attention), S
 * keys, the ones past S masked when S is not a multiple of bn. */
typedef struct kv_at {
    loom_val K, V;
    loom_val lead[2];
    int nlead;
    int64_t S, D;
} kv_at;

/* O = softmax(q K^T * scale) V for the query tile q [rows, D]: the online softmax over the
 * key tiles, f32, normalized, written as Triton's tutorial writes it: scores in log2 units
 * with the scale folded into one FMA an element (m = max(m, rowmax(S) * c), P = exp2(S * c
 * - m)), the rows divided once at the end (a reciprocal a row, a multiply an element). */
static loom_val attention(loom_kernel *k, loom_val q, const kv_at *kv, int64_t rows, double scale, loom_dtype dt,
                          const plain_cfg *c)
{
    loom_shape rv = LOOM_SHAPE1(rows), st = LOOM_SHAPE2(rows, c->bn), ot = LOOM_SHAPE2(rows, kv->D);
    loom_val zero = I32(0), cf = loom_const_f(k, LOOM_F32, scale * M_LOG2E);
    loom_val init[3] = {loom_splat(k, loom_const_f(k, LOOM_F32, -INFINITY), rv),
                        loom_splat(k, loom_const_f(k, LOOM_F32, 0), rv), loom_splat(k, loom_const_f(k, LOOM_F32, 0), ot)};
    loom_region_op l = loom_for_begin(k, zero, I32(kv->S), I32(c->bn), 3, init);
    {
        loom_val n0 = loom_for_iv(k, l), mi = loom_for_arg(k, l, 0), li = loom_for_arg(k, l, 1), offs[4];
        for (int i = 0; i < kv->nlead; i++)
            offs[i] = kv->lead[i];
        offs[kv->nlead] = n0, offs[kv->nlead + 1] = zero;
        loom_val kt = loom_load(k, kv->K, offs, LOOM_SHAPE2(c->bn, kv->D), LOOM_NONE, 0);
        loom_val v = loom_load(k, kv->V, offs, LOOM_SHAPE2(c->bn, kv->D), LOOM_NONE, 0);
        loom_val s = loom_dot(k, q, loom_trans(k, kt), loom_splat(k, loom_const_f(k, LOOM_F32, 0), st));
        if (kv->S % c->bn) { /* keys past S score -inf */
            loom_val key = loom_add(k, loom_arange(k, 0, c->bn), loom_splat(k, n0, LOOM_SHAPE1(c->bn)));
            loom_val in = loom_broadcast(k, loom_expand_dims(k, loom_cmp(k, LOOM_LT, key, I32(kv->S)), 0), st);
            s = loom_select(k, in, s, loom_const_f(k, LOOM_F32, -INFINITY));
        }
        loom_val mn = loom_max(k, mi, loom_mul(k, loom_reduce_max(k, s, 1), cf));
        loom_val p = loom_exp2(k, loom_fma(k, s, loom_splat(k, cf, st),
                                           loom_broadcast(k, loom_expand_dims(k, loom_neg(k, mn), 1), st)));
        loom_val alpha = loom_exp2(k, loom_sub(k, mi, mn));
        loom_val ln = loom_fma(k, li, alpha, loom_reduce_sum(k, p, 1));
        loom_val acc = loom_mul(k, loom_for_arg(k, l, 2), loom_broadcast(k, loom_expand_dims(k, alpha, 1), ot));
        acc = loom_dot(k, loom_cast(k, p, dt), v, acc);
        loom_for_end(k, l, 3, ((loom_val[]){mn, ln, acc}));
    }
    loom_val inv = loom_div(k, loom_splat(k, loom_const_f(k, LOOM_F32, 1), rv), loom_for_result(k, l, 1));
    return loom_mul(k, loom_for_result(k, l, 2), loom_broadcast(k, loom_expand_dims(k, inv, 1), ot));
}

loom_kernel *plain_attention(int64_t M, int64_t S, int64_t D, loom_dtype dt, double scale, const plain_cfg *c)
{
    loom_kernel *k = loom_kernel_create("attention_plain", 4);
    loom_val m = loom_arg_dim(k, "M", M, 1);
    loom_val Q = loom_arg_tensor(k, "Q", dt, LOOM_SHAPE2(LOOM_DIM(m), D), LOOM_IN);
    loom_val Kt = loom_arg_tensor(k, "K", dt, LOOM_SHAPE2(S, D), LOOM_IN);
    loom_val V = loom_arg_tensor(k, "V", dt, LOOM_SHAPE2(S, D), LOOM_IN);
    loom_val O = loom_arg_tensor(k, "O", dt, LOOM_SHAPE2(LOOM_DIM(m), D), LOOM_OUT);
    loom_val m0 = loom_mul(k, loom_program_id(k, 0), I32(c->bm)), zero = I32(0);
    loom_val q = loom_load(k, Q, ((loom_val[]){m0, zero}), LOOM_SHAPE2(c->bm, D), LOOM_NONE, 0);
    kv_at kv = {.K = Kt, .V = V, .S = S, .D = D};
    loom_val o = attention(k, q, &kv, c->bm, scale, dt, c);
    loom_store(k, O, ((loom_val[]){m0, zero}), loom_cast(k, o, dt), LOOM_NONE);
    specialize(k, c);
    return k;
}

loom_kernel *plain_ikbo_fused_t(int64_t M, int64_t N, int64_t K, int64_t B, int64_t U, loom_dtype dt,
                                loom_dtype rdt, const plain_cfg *c)
{
    loom_kernel *k = loom_kernel_create("ikbo_fused_t_plain", 4);
    ikbo_io a = ikbo_declare(k, M, N, K, B, U, dt, rdt, c);
    loom_val W = a.W, E = a.E, map = a.map, R = a.R, O = a.O, b = a.b, m0 = a.m0, n0 = a.n0;
    /* acc [bn, bm] = E[b][:, n0..]^T @ W[m0.., :]^T */
    loom_val acc = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(c->bn, c->bm));
    loom_region_op l = loom_for_begin(k, I32(0), I32(K), I32(c->bk), 1, &acc);
    {
        loom_val kk = loom_for_iv(k, l);
        loom_val w = loom_load(k, W, ((loom_val[]){m0, kk}), LOOM_SHAPE2(c->bm, c->bk), LOOM_NONE, 0);
        loom_val e = loom_load(k, E, ((loom_val[]){b, kk, n0}), LOOM_SHAPE2(c->bk, c->bn), LOOM_NONE, 0);
        acc = loom_dot(k, loom_trans(k, e), loom_trans(k, w), loom_for_arg(k, l, 0));
    }
    loom_for_end(k, l, 1, &acc);
    /* + the user's half, read by index; the tile turned back to [bm, bn] */
    loom_val u = loom_load_scalar(k, map, &b);
    loom_val r = loom_load(k, R, ((loom_val[]){u, m0, n0}), LOOM_SHAPE2(c->bm, c->bn), LOOM_NONE, 0);
    loom_val out = loom_add(k, loom_trans(k, loom_for_result(k, l, 0)), f32(k, r, rdt));
    loom_store(k, O, ((loom_val[]){b, m0, n0}), loom_cast(k, out, dt), LOOM_NONE);
    specialize(k, c);
    return k;
}

loom_kernel *plain_ikbo_attention(int64_t B, int64_t U, int64_t S, int64_t H, int64_t D, int64_t nseed,
                                  loom_dtype dt, const plain_cfg *c)
{
    loom_kernel *k = loom_kernel_create("ikbo_attention_plain", 4);
    int64_t R = B * nseed;
    /* Q and out seen as [H, rows, D] and K, V as [U, H, S, D]: a tile [rows, D] of one head */
    int64_t qst[3] = {D, H * D, 1}, kst[4] = {S * H * D, D, H * D, 1};
    loom_val Q = loom_arg_tensor_strided(k, "Q", dt, LOOM_SHAPE3(H, R, D), qst, LOOM_IN);
    loom_val Kt = loom_arg_tensor_strided(k, "K", dt, ((loom_shape){4, {U, H, S, D}}), kst, LOOM_IN);
    loom_val V = loom_arg_tensor_strided(k, "V", dt, ((loom_shape){4, {U, H, S, D}}), kst, LOOM_IN);
    loom_val map = loom_arg_tensor(k, "cand_to_user", LOOM_I32, LOOM_SHAPE1(B), LOOM_IN);
    loom_val O = loom_arg_tensor_strided(k, "out", dt, LOOM_SHAPE3(H, R, D), qst, LOOM_OUT);
    loom_val b = loom_program_id(k, 0), h = loom_program_id(k, 1), zero = I32(0);
    loom_val u = loom_load_scalar(k, map, &b), r0 = loom_mul(k, b, I32(nseed));
    loom_val q = loom_load(k, Q, ((loom_val[]){h, r0, zero}), LOOM_SHAPE2(nseed, D), LOOM_NONE, 0);
    kv_at kv = {.K = Kt, .V = V, .lead = {u, h}, .nlead = 2, .S = S, .D = D};
    loom_val o = attention(k, q, &kv, nseed, 1.0 / sqrt((double)D), dt, c);
    loom_store(k, O, ((loom_val[]){h, r0, zero}), loom_cast(k, o, dt), LOOM_NONE);
    specialize(k, c);
    return k;
}

loom_kernel *plain_ikbo_attention_units(int64_t B, int64_t U, int64_t S, int64_t H, int64_t D, int64_t nseed,
                                        int64_t P, loom_dtype dt, const plain_cfg *c)
{
    loom_kernel *k = loom_kernel_create("ikbo_attention_units_plain", 4);
    int64_t R = B * nseed, bm = c->bm;
    int64_t qst[3] = {D, H * D, 1}, kst[4] = {S * H * D, D, H * D, 1};
    loom_val Q = loom_arg_tensor_strided(k, "Q", dt, LOOM_SHAPE3(H, R, D), qst, LOOM_IN);
    loom_val Kt = loom_arg_tensor_strided(k, "K", dt, ((loom_shape){4, {U, H, S, D}}), kst, LOOM_IN);
    loom_val V = loom_arg_tensor_strided(k, "V", dt, ((loom_shape){4, {U, H, S, D}}), kst, LOOM_IN);
    loom_val units = loom_arg_tensor(k, "units", LOOM_I32, LOOM_SHAPE2(P, 3), LOOM_IN);
    loom_val O = loom_arg_tensor_strided(k, "out", dt, LOOM_SHAPE3(H, R, D), qst, LOOM_OUT);
    loom_shape ot = LOOM_SHAPE2(bm, D);
    loom_val p = loom_program_id(k, 0), h = loom_program_id(k, 1), zero = I32(0);
    loom_val u = loom_load_scalar(k, units, ((loom_val[]){p, zero}));
    loom_val r0 = loom_load_scalar(k, units, ((loom_val[]){p, I32(1)}));
    loom_val nr = loom_load_scalar(k, units, ((loom_val[]){p, I32(2)}));
    /* the unit's rows: the rest of the tile (the next candidate's rows, or past the end:
     * zeros) is computed but never stored, so Q's tile loads whole */
    loom_val valid = loom_broadcast(k, loom_expand_dims(k, loom_cmp(k, LOOM_LT, loom_arange(k, 0, bm), nr), 1), ot);
    loom_val q = loom_load(k, Q, ((loom_val[]){h, r0, zero}), ot, LOOM_NONE, 0);
    kv_at kv = {.K = Kt, .V = V, .lead = {u, h}, .nlead = 2, .S = S, .D = D};
    loom_val o = attention(k, q, &kv, bm, 1.0 / sqrt((double)D), dt, c);
    loom_store(k, O, ((loom_val[]){h, r0, zero}), loom_cast(k, o, dt), valid);
    specialize(k, c);
    return k;
}
