/*
 * loom_ikbo.h -- loom's In-Kernel Broadcast Optimization (IKBO) operations for
 * recommendation inference, built on the DSL and runtime of loom.h: candidates read their
 * user's data by an index (cand_to_user) instead of a broadcast copied B/U times.
 *
 *   - the broadcast-add kernel template (templates/broadcast_add.c): the smallest IKBO
 *     kernel, and the README's first kernel;
 *   - the linear compression (LCE), prepared once per shape and run per request
 *     (templates/ikbo_lce.c builds its kernels, templates/ikbo_lce_api.c runs them);
 *   - the flash attention (FA), whose candidates read their user's K/V by index
 *     (templates/ikbo_fa.c, templates/ikbo_fa_api.c).
 *
 * Their templates are also in loom's registry (loom_template_find("ikbo_lce"), ...), so
 * loom_tune and loomc reach them by name.
 */
#ifndef LOOM_IKBO_H
#define LOOM_IKBO_H

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* IKBO broadcast-add: out[b,m,n] = cand[b,m,n] + user[cand_to_user[b],m,n].
 * Arguments: B and U (i32 run-time dims, at most the shape's), cand [B,M,N], user [U,M,N],
 * cand_to_user [B] i32, out [B,M,N]. */
typedef struct tpl_broadcast_add_shape {
    int64_t B, U, M, N;
    loom_dtype dtype;
} tpl_broadcast_add_shape;
loom_kernel *tpl_broadcast_add(const tpl_broadcast_add_shape *s, int bm, int bn, int warps);
void tpl_broadcast_add_grid(const tpl_broadcast_add_shape *s, int bm, int bn, int grid[3]);

/* IKBO linear compression: out[b] = W_cand @ E_cand[b] + W_user @ E_user[cand_to_user[b]].
 * W_user [M, Ku], W_cand [M, Kc], E_user [U, Ku, N], E_cand [B, Kc, N], cand_to_user [B]
 * i32 (each in [0, U)), out [B, M, N]; f16 or bf16, f32 accumulation; any B, U, M, Ku, Kc;
 * N a multiple of 8.  Prepare once per model (M, N, Ku, Kc, dtype; B and U the largest
 * request: the weights are uploaded and padded, the kernels built, tuned and loaded), then
 * run each request at its own B and U (loom_ikbo_lce_run_at) with no compile; the stages
 * are the steps of the IKBO co-design, each runnable on its own (templates/ikbo_lce.c has
 * the details). */
typedef struct loom_ikbo_lce_shape {
    int64_t B, U, M, N, Ku, Kc;
    loom_dtype dtype;  /* LOOM_F16, LOOM_BF16, or LOOM_E4M3 (FP8, below) */
    loom_dtype odtype; /* dtype e4m3: out's type, LOOM_F16 (0: the default) or LOOM_BF16; f16 and bf16
                          give out of their own type (odtype is not read).  Added last: an
                          initializer of the seven fields before it still compiles (odtype 0),
                          though -Wmissing-field-initializers names it; designated ones do not */
} loom_ikbo_lce_shape;

/* FP8 (dtype LOOM_E4M3): the weights and the embeddings in e4m3, each with f32 scales (the
 * dequantization factors: the real W_user[m][k] is w_user_scale[m] times its e4m3 value,
 * the real E_user[u] is e_user_scale[u] times its e4m3 values, and so the candidate's):
 *     out[b][m][n] = w_cand_scale[m] e_cand_scale[b] (W_cand @ E_cand[b])[m][n]
 *                  + w_user_scale[m] e_user_scale[u] (W_user @ E_user[u])[m][n],  u = cand_to_user[b]
 * the products summed by FP8 wgmma (whose adds keep about 13 bits: docs/checks.md, "FP8"),
 * scaled and added in f32, rounded once to odtype.  FP8 wgmma reads both operands K-major,
 * and E [.., K, N] is N-major, so the embeddings come transposed, K innermost:
 * E_user^T [U, N, Ku] and E_cand^T [B, N, Kc] (E_user^T[u][n][k] = E_user[u][k][n]), Ku and
 * Kc multiples of 16 (TMA reads 16-byte rows: pad K with zeros in E^T and the weights, as
 * bench_ikbo_lce --fp8 does; another K is refused, naming it).  The weights [M, Ku] and
 * [M, Kc] as for f16, with their scales [M] at prepare (loom_ikbo_lce_prepare_scaled); the
 * embeddings' scales [U] and [B] f32 device buffers with each request
 * (loom_ikbo_lce_run_scaled).  Stages 3 and 4 serve e4m3 (a candidate tile adds its user's
 * scaled f32 result in its epilogue, loaded in the accumulator's layout); LOOM_IKBO_AUTO
 * takes stage 4, or 3 where the config cannot serve 4, without timing them (the timed
 * pick's device references are f16/bf16 only); another stage is refused.  The tile config is the f16 one's (the
 * same table; a k step is 128 elements of e4m3, a 128-byte row as f16's 64). */

typedef enum loom_ikbo_stage {
    LOOM_IKBO_MATERIALIZED = 0,   /* the framework baseline: gather E_user[u] B times, one GEMM
                                     over the concatenated K */
    LOOM_IKBO_DECOMPOSED = 1,     /* user GEMM at U, candidate GEMM at B, broadcast-add (the
                                     weights padded to a multiple of 8 on every run) */
    LOOM_IKBO_K_ALIGNED = 2,      /* the same, with the weights padded once when prepared */
    LOOM_IKBO_FUSED_EPILOGUE = 3, /* user GEMM, then the candidate GEMM adding user_res[u(b)]
                                     in its epilogue */
    LOOM_IKBO_PERSISTENT = 4,     /* one persistent warp-specialized kernel: user tiles
                                     first, handed to the candidate tiles by flags */
    LOOM_IKBO_AUTO = 5,           /* the default to pass: prepare picks the stage (below) */
} loom_ikbo_stage;
/* "materialized", ..., "persistent", "auto" */
const char *loom_ikbo_stage_name(loom_ikbo_stage s);

/* The tile config of the stage's GEMM kernels (templates/ikbo_lce.c), as the "ikbo_lce"
 * template's table (loom_tune.h, "A template's table"): each knob's key, field, type,
 * default, doc and the candidates the tuner tries, written once here.  The struct's fields
 * are bm, bn, stages, cwarps, ctas, consumers, trans, cluster (ints, in that order);
 * (loom_ikbo_lce_config){LOOM_IKBO_LCE_CONFIG(LOOM_DEFAULT)} is the default config. */
#define LOOM_IKBO_LCE_CONFIG(X)                                                                             \
    X(BM, bm, int, 256, "tile rows (64 or 128 per consumer warp group; trans=1: at most BM, M split evenly)", \
      64, 128, 256)                                                                                        \
    X(BN, bn, int, 128, "tile columns", 64, 128, 256)                                                      \
    X(stages, stages, int, 4, "ring slots", 2, 3, 4)                                                       \
    X(cwarps, cwarps, int, 8, "consumer warps (4 or 8)", 4, 8)                                             \
    X(ctas, ctas, int, 132, "persistent CTAs (at most one per SM)", 132)                                   \
    X(consumers, consumers, int, 2,                                                                        \
      "0: one consumer task shares each tile; 1: ping-pong, two warp groups take turns on "                \
      "whole tiles (cwarps=8); 2: split, two warp groups share each 128-row tile "                         \
      "(cwarps=8, BM=128)", 0, 1, 2)                                                                       \
    X(trans, trans, int, 1,                                                                                \
      "1: the transposed product out^T = E^T @ W^T (consumers=2, cwarps=8, BN=128): each warp "            \
      "group owns 64 columns of out, a tile's rows (on wgmma's N side) are M split evenly "                \
      "into tiles of at most BM rows", 0, 1)                                                               \
    X(cluster, cluster, int, 2,                                                                            \
      "trans=1: 2 runs the CTAs in pairs that take a tile's two column halves, each "                      \
      "multicasting half of the W tile to both (half the L2 reads of W)", 1, 2)
typedef struct loom_ikbo_lce_config {
    LOOM_IKBO_LCE_CONFIG(LOOM_FIELD)
} loom_ikbo_lce_config;

typedef struct loom_ikbo_lce loom_ikbo_lce;
/* w_user [M, Ku] and w_cand [M, Kc] are host arrays of the dtype.  cfg NULL: the config
 * the tuner picks for this shape (loom_tune over the "ikbo_lce" template, cached on disk;
 * without a GPU, the default).  A shape or config that cannot be served is refused with
 * the reason in loom_runtime_error(rt).
 *
 * stage LOOM_IKBO_AUTO (docs/tuning.md, "Picking the stage"): on a GPU, stages 0, 2, 3
 * and 4 are built with that config, run once on inputs made on the device, checked
 * against one another (one that disagrees is dropped), timed side by side (L2 flushed,
 * medians) and the fastest is kept, the others freed; the pick is cached beside the
 * config (the tuning cache: a warm prepare times nothing; LOOM_TUNE_FORCE=1 times
 * again).  Without a GPU, with LOOM_TUNE=0 and nothing cached, or with
 * LOOM_IKBO_AUTO=0: nothing is timed and the stage is 4, or where the config cannot
 * serve stage 4, the first of 3, 2, 0 that can.  describe says which and why. */
loom_status loom_ikbo_lce_prepare(loom_runtime *rt, const loom_ikbo_lce_shape *shape, loom_ikbo_stage stage,
                                  const void *w_user, const void *w_cand, const loom_ikbo_lce_config *cfg,
                                  loom_ikbo_lce **out);
/* Launch the stage's kernels on device buffers (asynchronous on the GPU, like loom_launch)
 * at the prepared shape.  Buffers too small for the shape are refused with a message
 * naming them. */
loom_status loom_ikbo_lce_run(loom_ikbo_lce *p, loom_buffer *e_user, loom_buffer *e_cand,
                              loom_buffer *cand_to_user, loom_buffer *out);
/* One request at its own B and U (1 to the prepared B and U, which are maxima): e_user
 * [U, Ku, N], e_cand [B, Kc, N], cand_to_user [B], out [B, M, N].  Nothing is compiled: the
 * kernels take B and U at run time, and the request runs the stage and config picked for
 * its bucket at prepare (docs/tuning.md, "Run-time dims and buckets"). */
loom_status loom_ikbo_lce_run_at(loom_ikbo_lce *p, int64_t B, int64_t U, loom_buffer *e_user, loom_buffer *e_cand,
                                 loom_buffer *cand_to_user, loom_buffer *out);
/* FP8 (above): prepare with the weights' scales, w_user_scale [M] and w_cand_scale [M]
 * (host f32 arrays, uploaded with the e4m3 weights), then run each request with the
 * embeddings' scales (f32 device buffers: e_user_scale [U], e_cand_scale [B]), e_user the
 * transposed E_user^T [U, N, Ku] and e_cand E_cand^T [B, N, Kc] in e4m3, out [B, M, N] of
 * odtype; B and U as run_at's.  An e4m3 shape is refused by loom_ikbo_lce_prepare (it has
 * no scales) and an e4m3 handle by run and run_at; prepare_scaled with an f16 or bf16
 * shape takes NULL scales (it is then prepare), and run_scaled on an f16 or bf16 handle
 * is refused: each with a message saying which call to make. */
loom_status loom_ikbo_lce_prepare_scaled(loom_runtime *rt, const loom_ikbo_lce_shape *shape, loom_ikbo_stage stage,
                                         const void *w_user, const void *w_cand, const float *w_user_scale,
                                         const float *w_cand_scale, const loom_ikbo_lce_config *cfg,
                                         loom_ikbo_lce **out);
loom_status loom_ikbo_lce_run_scaled(loom_ikbo_lce *p, int64_t B, int64_t U, loom_buffer *e_user, loom_buffer *e_cand,
                                     loom_buffer *e_user_scale, loom_buffer *e_cand_scale, loom_buffer *cand_to_user,
                                     loom_buffer *out);
/* "stage 4 (persistent): BM=128,BN=256,...; ikbo_lce_fused"; picked by LOOM_IKBO_AUTO,
 * then how: "; auto (timed): stage 0 0.075 ms, stage 2 0.093 ms, stage 3 0.101 ms
 * (picked), stage 4 0.113 ms; ...", or "(cached)", or "not timed" and why. */
const char *loom_ikbo_lce_describe(const loom_ikbo_lce *p);
/* The stage p runs at the prepared B: the one given, or the one LOOM_IKBO_AUTO picked
 * (NULL p: LOOM_IKBO_AUTO); and the stage a request of B runs (LOOM_IKBO_AUTO for a B
 * outside 1 to the prepared B). */
loom_ikbo_stage loom_ikbo_lce_stage_of(const loom_ikbo_lce *p);
loom_ikbo_stage loom_ikbo_lce_stage_at(const loom_ikbo_lce *p, int64_t B);
/* The tile config the stage's kernels were built with (given, or the tuner's). */
loom_ikbo_lce_config loom_ikbo_lce_config_of(const loom_ikbo_lce *p);
/* The kernels a run launches, in order (for their PTX or IR): kernel i and its grid;
 * NULL past the last. */
loom_kernel *loom_ikbo_lce_kernel(const loom_ikbo_lce *p, int i, int grid[3]);
void loom_ikbo_lce_destroy(loom_ikbo_lce *p);

/* IKBO flash attention: out[b] = softmax(Q[b] K[u(b)]^T / sqrt(D)) V[u(b)] per head,
 * non-causal, u = cand_to_user.  Q and out [B * n_seed, H, D] (candidate b's n_seed query
 * rows), K and V [U * S, H, D] (each user's keys padded to S rows), f16 or bf16, the
 * softmax in f32.  With varlen, keys past seq_len[u] (each 0 to S) are masked; a user
 * with no keys gives zeros.  The padding rows are read but weigh zero, so they must hold
 * finite values (0 x NaN is NaN).  D is 64 or 128; any B, U, S, H, n_seed.
 *
 * FP8 (dtype LOOM_E4M3): Q and K as above in e4m3; V comes transposed, Vt [U, H, D, S]
 * e4m3 (Vt[(u * H + h) * D + d][j] = V[u * S + j][h][d]: user, head, then each column's
 * S keys innermost, as FP8 wgmma reads its B operand K-major), S a multiple of 16; out
 * [B * n_seed, H, D] in odtype (f16 or bf16).  Each head h has three f32 scales (the
 * dequantization factors: the real Q of head h is q_scale[h] times its e4m3 values, and
 * so K and V), a device buffer scales [3, H] f32: row 0 q_scale, row 1 k_scale, row 2
 * v_scale, read at each launch (so a request may bring its own):
 *     out = softmax(q_scale k_scale Q K^T / sqrt(D)) v_scale V
 * The kernel rounds P (scaled by 2^8) to e4m3 for P V and sums l from the unrounded P
 * (docs/checks.md, "ikbo_fa in FP8", has the error this adds).  Runs go through the
 * _scaled entry points below, which take the scales; BN is 128 and xunit 0. */
typedef struct loom_ikbo_fa_shape {
    int64_t B, U, S, H, D, n_seed;
    loom_dtype dtype;  /* LOOM_F16, LOOM_BF16, or LOOM_E4M3 (FP8) */
    int varlen;        /* 1: run takes per-user lengths */
    loom_dtype odtype; /* dtype e4m3: out's type, LOOM_F16 (0: the default) or LOOM_BF16; f16 and bf16
                          inputs give out of their own type (odtype is not read).  Added last: an
                          initializer of the eight fields before it still compiles (odtype 0),
                          though -Wmissing-field-initializers names it; designated ones do not */
} loom_ikbo_fa_shape;

/* The kernel's tile config (templates/ikbo_fa.c), as the "ikbo_fa" template's table
 * (loom_tune.h, "A template's table"), written once here.  The struct's fields are bn,
 * stages, ctas, sched, turns, overlap, tmastore, xunit, horder (ints, in that order);
 * (loom_ikbo_fa_config){LOOM_IKBO_FA_CONFIG(LOOM_DEFAULT)} is the default config. */
#define LOOM_IKBO_FA_CONFIG(X) \
    X(BN, bn, int, 128, "keys a K/V tile: 64 or 128 (either head dim)", 64, 128)                           \
    X(stages, stages, int, 2, "slots of the K ring and of the V ring (two Q slots where they fit)", 2, 3, 4) \
    X(ctas, ctas, int, 132, "persistent CTAs (at most one per SM)", 132)                                   \
    X(sched, sched, int, 0, "0: units round-robin; 1: claimed from a counter", 0, 1)                       \
    X(turns, turns, int, 0, "1: the two consumer warp groups take turns to issue their GEMMs", 0, 1)       \
    X(overlap, overlap, int, 1,                                                                            \
      "1: a K/V tile's softmax runs while the previous tile's P V is on the tensor cores", 0, 1)           \
    X(tmastore, tmastore, int, 1,                                                                          \
      "1: where n_seed is a multiple of 64, out goes out by TMA: through the Q tile with f16 or "          \
      "bf16 Q (the Q slot comes back after the store), through two [64, 64] staging slots a "              \
      "warp group with e4m3 (its Q slot is too small for an f16 block); 0: stored from the "               \
      "registers, the Q slot back after the last S = Q K^T", 0, 1)                                         \
    X(xunit, xunit, int, 0,                                                                                \
      "1: the next unit's first S = Q K^T and its softmax run beside this unit's last P V "                \
      "(sched=0, overlap=1, turns=0, two Q slots); measured slower (bench/RESULTS.md), so not "            \
      "tuned", 0)                                                                                           \
    X(horder, horder, int, 0,                                                                              \
      "the order programs take units in: 0 head by head (a user's units side by side share its "          \
      "K/V tiles in L2); 1 unit by unit, a unit's heads side by side (each program reads its head's "      \
      "part of K and V's rows, so programs side by side read whole rows: for users with few units), "      \
      "and with overlap=1, turns=0, xunit=0 a unit of one block (an odd block of its user) leaves its "    \
      "second warp group idle", 0, 1)
typedef struct loom_ikbo_fa_config {
    LOOM_IKBO_FA_CONFIG(LOOM_FIELD)
} loom_ikbo_fa_config;

/* The config run untuned at shape (without a GPU, LOOM_TUNE=0, or where tuning fell back):
 * the defaults above, as the template's rule for the shape adapts them (64-key tiles and a
 * ring of 4 at D=64 in f16 and bf16; horder 1 where the candidates average at most 256
 * query rows a user). */
loom_ikbo_fa_config loom_ikbo_fa_untuned_config(const loom_ikbo_fa_shape *shape);

typedef struct loom_ikbo_fa loom_ikbo_fa;
/* shape's B and U are the largest request's (loom_ikbo_fa_run_at serves any below).  cfg
 * NULL: the tuner's pick for this shape (cached on disk; without a GPU, the untuned config; for
 * e4m3 the tuner checks each candidate against the default config's output, as it has
 * no FP8 device reference: docs/tuning.md).  A shape or config that cannot be served is
 * refused with the reason in loom_runtime_error(rt), naming the field. */
loom_status loom_ikbo_fa_prepare(loom_runtime *rt, const loom_ikbo_fa_shape *shape, const loom_ikbo_fa_config *cfg,
                                 loom_ikbo_fa **out);
/* One request: the mapping (cand_to_user [B] i32) and, with varlen, seq_len [U] i32 (NULL
 * otherwise) are device buffers, read back to make the work plan (a few microseconds of
 * host time and one synchronization: use loom_ikbo_fa_set_mapping where the host has the
 * mapping).  Out-of-range entries are refused, naming the first.  f16 and bf16 only (an
 * e4m3 handle is refused: its runs take scales, loom_ikbo_fa_run_scaled). */
loom_status loom_ikbo_fa_run(loom_ikbo_fa *p, loom_buffer *q, loom_buffer *k, loom_buffer *v,
                             loom_buffer *cand_to_user, loom_buffer *seq_len, loom_buffer *out);
/* One request at its own B and U (1 to the prepared B and U, which are maxima: the kernel
 * takes the query rows and the users at run time, so nothing is compiled): q and out
 * [B * n_seed, H, D], k and v [U * S, H, D], cand_to_user [B], seq_len [U]. */
loom_status loom_ikbo_fa_run_at(loom_ikbo_fa *p, int64_t B, int64_t U, loom_buffer *q, loom_buffer *k, loom_buffer *v,
                                loom_buffer *cand_to_user, loom_buffer *seq_len, loom_buffer *out);
/* The same in two steps, the mapping from host memory: set it (the plan is made and
 * uploaded), then launch as often as it holds.  set_mapping is at the prepared B and U,
 * set_request at a request's. */
loom_status loom_ikbo_fa_set_mapping(loom_ikbo_fa *p, const int32_t *cand_to_user, const int32_t *seq_len);
loom_status loom_ikbo_fa_set_request(loom_ikbo_fa *p, int64_t B, int64_t U, const int32_t *cand_to_user,
                                     const int32_t *seq_len);
loom_status loom_ikbo_fa_launch(loom_ikbo_fa *p, loom_buffer *q, loom_buffer *k, loom_buffer *v, loom_buffer *out);
/* The entry points of every dtype, FP8's: run_at and launch with the per-head scales.
 * dtype e4m3: q [B * n_seed, H, D], k [U * S, H, D], vt [U, H, D, S] (V transposed, above),
 * all e4m3; scales [3, H] f32 (q_scale, k_scale, v_scale of each head), not NULL; out
 * [B * n_seed, H, D] of odtype.  f16 and bf16: scales NULL (then these are run_at and
 * launch, vt being V [U * S, H, D]).  B and U as run_at's. */
loom_status loom_ikbo_fa_run_scaled(loom_ikbo_fa *p, int64_t B, int64_t U, loom_buffer *q, loom_buffer *k,
                                    loom_buffer *vt, loom_buffer *scales, loom_buffer *cand_to_user,
                                    loom_buffer *seq_len, loom_buffer *out);
loom_status loom_ikbo_fa_launch_scaled(loom_ikbo_fa *p, loom_buffer *q, loom_buffer *k, loom_buffer *vt,
                                       loom_buffer *scales, loom_buffer *out);
/* "BN=128,stages=3,ctas=132,sched=0,turns=0,overlap=1,tmastore=1,xunit=1,horder=0; ikbo_fa"; e4m3
 * adds "; e4m3 (Vt, per-head scales), out f16". */
const char *loom_ikbo_fa_describe(const loom_ikbo_fa *p);
loom_ikbo_fa_config loom_ikbo_fa_config_of(const loom_ikbo_fa *p);
/* The kernel a launch runs and its grid. */
loom_kernel *loom_ikbo_fa_kernel(const loom_ikbo_fa *p, int grid[3]);
void loom_ikbo_fa_destroy(loom_ikbo_fa *p);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* LOOM_IKBO_H */
