/*
 * plain.h -- kernels written the plain way (Triton's): a tile loop of loads and loom_dot
 * and an epilogue, no tasks, no rings, no barriers.  loom_kernel_set_autows turns each
 * into a warp-specialized tensor-core kernel (docs/dsl.md, "Two levels"); without it,
 * each runs as written (the interpreter always does).
 *
 * Every kernel takes the rows M as a run-time dim (loom_arg_dim) up to the built value;
 * grids are in each function's comment.
 */
#ifndef LOOM_PLAIN_H
#define LOOM_PLAIN_H

#include "loom.h"

/* The tile sizes and the automatic passes' knobs (consumers 0: leave the kernel plain). */
typedef struct plain_cfg {
    int bm, bn, bk;
    int consumers, stages;
    int group;    /* tile rows a group of the grouped (L2-friendly) order; 0: row-major order */
    int pingpong; /* with consumers 2: each consumer group takes every other program whole */
} plain_cfg;

/* C[M, N] = A[M, K] @ B[K, N], dt in and out (f16 or bf16), f32 accumulation.
 * Arguments M, A, B, C; grid cdiv(M, bm) * cdiv(N, bn) programs along x. */
loom_kernel *plain_gemm(int64_t M, int64_t N, int64_t K, loom_dtype dt, const plain_cfg *c);

/* C[M, N] = A[M, K] @ Bt[N, K]^T in FP8: A adt and Bt bdt (e4m3 / e5m2, any mix), C odt
 * (f32, f16 or bf16), f32 accumulation.  B is stored [N, K] (a weight as nn.Linear keeps
 * it) and each step's [bn, bk] tile goes to the dot as loom_trans of it: FP8 wgmma reads
 * both operands K-major.  K and bk multiples of 32 (bk 128: a 128-byte swizzle row).
 * Arguments M, A, Bt, C; grid as plain_gemm's. */
loom_kernel *plain_gemm_fp8(int64_t M, int64_t N, int64_t K, loom_dtype adt, loom_dtype bdt, loom_dtype odt,
                           const plain_cfg *c);

/* C = gelu_tanh(A @ B + bias): bias [N] f32.  Arguments M, A, B, bias, C; grid as
 * plain_gemm's. */
loom_kernel *plain_gemm_bias_gelu(int64_t M, int64_t N, int64_t K, loom_dtype dt, const plain_cfg *c);

/* A batched GEMM with a shared A: C[b] = A[M, K] @ B[b] (B [batch, K, N]) in odt (dt or
 * f32).  A's rows are pad8(K) elements apart (TMA's 16-byte rows; the columns past K are
 * never read as data: TMA reads zeros there).  Arguments M, A, B, C; grid cdiv(M, bm) *
 * cdiv(N, bn) along x by batch along y.  (The IKBO user half: user_res[u] = W_user @
 * E_user[u] in f32.) */
loom_kernel *plain_batched_gemm(int64_t M, int64_t N, int64_t K, int64_t batch, loom_dtype dt, loom_dtype odt,
                                const plain_cfg *c);

/* The IKBO linear compression's fused stage: out[b] = W[M, K] @ E[b] (E [B, K, N]) +
 * user_res[u(b)] with u = cand_to_user[b] (i32), user_res [U, M, N] rdt, out [B, M, N] dt;
 * W's rows pad8(K) apart.  rdt f32 keeps the user half's f32 sum; rdt dt (the framework's
 * choice: user_res rounded to the I/O dtype) halves its bytes, and out = round(acc + u) is
 * then within half an ulp of u of the f32 form (the LCE error model allows it: docs/checks.md).
 * Arguments M, W, E, cand_to_user, user_res, out; grid cdiv(M, bm) * cdiv(N, bn) along x by
 * B along y. */
loom_kernel *plain_ikbo_fused(int64_t M, int64_t N, int64_t K, int64_t B, int64_t U, loom_dtype dt,
                              loom_dtype rdt, const plain_cfg *c);

/* One head of attention: O[M, D] = softmax(Q K^T * scale) V for Q [M, D], K and V [S, D]
 * (dt), the online softmax in f32 (bm query rows a program, bn keys a step).
 * Arguments M, Q, K, V, O; grid cdiv(M, bm) along x. */
loom_kernel *plain_attention(int64_t M, int64_t S, int64_t D, loom_dtype dt, double scale, const plain_cfg *c);

/* The same computed transposed, as cuBLAS runs a skinny-M GEMM (swap A and B): out[b]^T =
 * E[b]^T @ W^T, a tile of bn rows of N by bm columns of M (bm may be any multiple of 8
 * up to 256: 224 covers M = 433 in two tiles with 15 rows to spare, where 64-row tiles
 * would need 7 and 128-row ones waste 79).  The loads are the plain form's tiles; trans
 * makes the dot's operands and turns the tile back for the epilogue.  Arguments and grid
 * as plain_ikbo_fused's. */
loom_kernel *plain_ikbo_fused_t(int64_t M, int64_t N, int64_t K, int64_t B, int64_t U, loom_dtype dt,
                                loom_dtype rdt, const plain_cfg *c);

/* IKBO attention: each candidate b's nseed queries attend to its user's keys, head by
 * head: out[b nseed + i, h] = softmax(Q[b nseed + i, h] K[u, :, h]^T / sqrt(D)) V[u, :, h]
 * with u = cand_to_user[b]; Q and out [B nseed, H, D], K and V [U, S, H, D] (dt), bm = nseed
 * query rows a program.  Arguments Q, K, V, cand_to_user, out; grid B along x by H along
 * y. */
loom_kernel *plain_ikbo_attention(int64_t B, int64_t U, int64_t S, int64_t H, int64_t D, int64_t nseed,
                                  loom_dtype dt, const plain_cfg *c);

/* IKBO attention over a plan: program p takes the query rows units[p] = (user, first row,
 * rows) -- up to bm rows of consecutive candidates of one user, so that one K / V tile
 * feeds them all (two warp groups of 64 rows each at bm = 128) -- head by head (grid P
 * along x by H along y).  Q, K, V, out as plain_ikbo_attention's; units [P, 3] i32. */
loom_kernel *plain_ikbo_attention_units(int64_t B, int64_t U, int64_t S, int64_t H, int64_t D, int64_t nseed,
                                        int64_t P, loom_dtype dt, const plain_cfg *c);

#endif
