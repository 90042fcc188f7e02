/*
 * ikbo_lce.h -- the IKBO linear-compression kernels (templates/ikbo_lce.c) and what the
 * registry entry and the operation above (ops/ikbo_lce_api.c, through templates/tpl.h)
 * need of them (internal).  Prefix: ik_.
 */
#ifndef LOOM_IKBO_LCE_H
#define LOOM_IKBO_LCE_H

#include <stdbool.h>
#include "tpl.h"

typedef enum ik_mode {
    IK_USER,       /* user_res[u] = W_user @ E_user[u] */
    IK_CAND,       /* out[b] = W_cand @ E_cand[b] */
    IK_CAND_FUSED, /* out[b] = W_cand @ E_cand[b] + user_res[u(b)] (the user tile fetched by the producer) */
    IK_FUSED,      /* both in one persistent kernel, the user tiles handed over by flags */
} ik_mode;

/* The registry entry's shape keys (its table, loom_tune.h "A template's table"; the
 * config's is LOOM_IKBO_LCE_CONFIG, loom_ikbo.h). */
#define IK_SHAPE(X)                                                                                         \
    X(B, B, int64_t, 1024, "candidates (run-time: at most this)", .runtime = 1)                            \
    X(U, U, int64_t, 15, "users (run-time: at most this)", .runtime = 1)                                   \
    X(M, M, int64_t, 433, "rows of the weights and of out")                                                \
    X(N, N, int64_t, 256, "columns of E and out (a multiple of 8)")                                        \
    X(Ku, Ku, int64_t, 1178, "user K (any; the weights are padded to a multiple of 8)")                    \
    X(Kc, Kc, int64_t, 866, "candidate K (any)")                                                           \
    X(dtype, dt, loom_dtype, LOOM_F16, "f16, bf16 or e4m3 (FP8: E given transposed, K a multiple of 16)")  \
    X(shuffle, shuffle, int, 0, "check inputs: 0 contiguous users, 1 shuffled", .inputs_only = 1)          \
    X(odtype, odt, loom_dtype, LOOM_F16, "out with dtype e4m3: f16 or bf16 (f16/bf16 inputs: out is theirs)")

/* One kernel of a stage: its mode and user_res's planes, then the shape (K as the user
 * gives it; the weights are padded, ik_kpad; dt f16 or bf16: inputs, user_res and out;
 * dt e4m3: the inputs, with odt out's type, below; shuffle: the check inputs' mapping) and
 * the config (loom_ikbo_lce_config's fields):
 *   planes     user_res [U, M, N] rounded to dt (1: stages 1, 2), or [U, 2, M, N] as hi + lo
 *              planes of dt (2: stages 3, 4; IK_CAND_FUSED and IK_FUSED need it)
 *   consumers  IK_COOPERATIVE: one task of cwarps warps shares each BM x BN tile;
 *              IK_PINGPONG: two warp groups take turns on whole tiles (BM rows each);
 *              IK_SPLIT: two warp groups share each 128-row tile, 64 rows each
 *   trans      1: the transposed product out[b]^T = E[b]^T @ W^T (with IK_SPLIT, BN = 128:
 *              each warp group owns 64 columns of out and every row of the tile; the tile's
 *              rows, on wgmma's N side, are M split evenly into tiles of at most BM rows, a
 *              multiple of 8: 224 at M = 433)
 *   cluster    trans: 2 runs the programs in pairs taking a tile's two column halves
 *              (tiles n0 and n0 + BN), each multicasting half of the W tile to both */
/* FP8 (dt e4m3, stages 3 and 4: modes IK_USER, IK_CAND_FUSED, IK_FUSED).  FP8 wgmma reads
 * both operands K-major, so E comes transposed: E_user^T [U, N, Ku] and E_cand^T [B, N,
 * Kc], K innermost, Ku and Kc multiples of 16 (TMA's 16-byte rows); a k step is 128
 * elements of K (a 128-byte row, like f16's 64).  Each kernel takes f32 scales after its
 * tensors: the weights' per row, W_user's [M] and W_cand's [M], then the embeddings' per
 * user [U] and per candidate [B] (IK_USER: w_user_scale, e_user_scale; IK_CAND_FUSED:
 * w_cand_scale, e_cand_scale; IK_FUSED: all four, in the order IKA_SWU.. below).  A user
 * tile stores swu[m] seu[u] (Wu @ Eu[u]) as f32, one plane, laid out as its accumulator
 * lies (trans: user_res [U, N, M], else [U, M, N]); a candidate tile adds it in its
 * epilogue, loaded in the accumulator's layout: out = round_odt(swc[m] sec[b] acc +
 * user_res[u(b)]).  No plane steps: an FP8 product's scales differ by row and candidate,
 * which an f16 plane step on the tensor cores cannot apply to the FP8 part of the sum. */
typedef struct ik_spec {
    ik_mode mode;
    int planes;
    IK_SHAPE(LOOM_FIELD)
    LOOM_IKBO_LCE_CONFIG(LOOM_FIELD)
} ik_spec;

enum { IK_COOPERATIVE = TPL_COOPERATIVE, IK_PINGPONG = TPL_PINGPONG, IK_SPLIT = TPL_SPLIT };

int64_t ik_tile_rows(const ik_spec *s); /* rows of out a tile covers */
int64_t ik_tiles_mn(const ik_spec *s);  /* tiles of one [M, N] output */
int64_t ik_tiles(const ik_spec *s);    /* tiles of the whole kernel */
/* The 64 x 64 blocks of user_res: stage 4's counter of user tiles done grows by this
 * much a launch (ik_blocks_per_user for each of the launch's U users). */
int64_t ik_user_blocks(const ik_spec *s);
int64_t ik_blocks_per_user(const ik_spec *s);
/* The run-time dims of a mode's kernel, its first arguments (B, then U, where it has
 * them); their maxima are the spec's B and U. */
enum { IK_DIM_B = 1, IK_DIM_U = 2 };
static inline int ik_dims_of(ik_mode m)
{
    return m == IK_USER ? IK_DIM_U : m == IK_CAND ? IK_DIM_B : IK_DIM_B | IK_DIM_U;
}
/* The stage-4 kernel's (IK_FUSED's) arguments, the registry template's. */
enum { IKA_B, IKA_U, IKA_WU, IKA_EU, IKA_WC, IKA_EC, IKA_MAP, IKA_URES, IKA_FLAGS, IKA_CLAIMS, IKA_BASE, IKA_OUT,
       IKA_SWU, IKA_SWC, IKA_SEU, IKA_SEC, /* e4m3 only: the f32 scales */
       IKA_COUNT };
/* FP8 (dt e4m3), its output type (dt for f16 and bf16), and K as the weights are padded
 * (rows of 16 bytes: a multiple of 8 elements of f16 or bf16, of 16 of e4m3). */
static inline bool ik_fp8(const ik_spec *s) { return s->dt == LOOM_E4M3; }
static inline loom_dtype ik_out_dt(const ik_spec *s) { return ik_fp8(s) ? s->odt : s->dt; }
static inline int64_t ik_kpad(loom_dtype dt, int64_t K) { return dt == LOOM_E4M3 ? (K + 15) / 16 * 16 : tpl_pad8(K); }
/* The C API shape's odt key: its odtype with e4m3; f16 and bf16 keep the key's default
 * (their out is their own), so their tuning cache entries are those of before the key. */
static inline loom_dtype ik_odt_of(const loom_ikbo_lce_shape *s)
{
    return s->dtype == LOOM_E4M3 ? s->odtype : LOOM_F16;
}
/* The kernel's grid at the spec's (maximum) B and U, and as a rule over a shape whose
 * B and U are at indices ib and iu. */
void ik_grid(const ik_spec *s, int grid[3]);
void ik_grid_rule(const ik_spec *s, int ib, int iu, loom_grid_rule *r);
/* Why the spec cannot be built, or NULL. */
const char *ik_why_not(const ik_spec *s, char *buf, size_t n);
loom_kernel *ik_build(const ik_spec *s, char *err, size_t errlen);
/* E_cat [B, pad8(Ku + Kc), N] = [E_user[u(b)]; E_cand[b]]: grid (cdiv(pad8(Ku+Kc), 16), B, 1). */
loom_kernel *ik_gather_kernel(const ik_spec *s);

/* The registry entry's config vector (BM, BN, stages, cwarps, ctas, consumers, trans) as the
 * C API's config. */
loom_ikbo_lce_config ik_config_of(const int64_t *config);
/* The registry entry's shape and config vectors as a spec of the given mode (user_res in
 * two planes); the shape's with the default config (for what depends on the shape alone:
 * inputs, references, bounds). */
ik_spec ik_spec_of(ik_mode mode, const int64_t *shape, const int64_t *config);
ik_spec ik_spec_of_shape(ik_mode mode, const int64_t *shape);
/* The C API's shape as the registry entry's shape vector (LOOM_MAX_PARAMS values; the
 * inputs-only keys 0). */
void ik_shape_vector(const loom_ikbo_lce_shape *s, int64_t *shape);
/* The user of each candidate: b * U / B, shuffled by a permutation when shuffle is set. */
void ik_mapping(int64_t B, int64_t U, int shuffle, uint64_t seed, int32_t *map);
/* FP8: out [B, M, N] (of odt) computed in double from the e4m3 values and the scales
 * (weights padded [M, ik_kpad(K)], E transposed, ikbo_lce.h "FP8"); with bnd (not NULL),
 * each element's error bound (docs/checks.md, "ikbo_lce in FP8"). */
void ik_fp8_reference(const ik_spec *s, const void *wu, const void *wc, const void *eu, const void *ec,
                      const float *swu, const float *swc, const float *seu, const float *sec, const int32_t *map,
                      void *out, double *bnd);
/* out (and ures, when not NULL: [U, 2, M, N] hi and lo planes of the dtype) computed in
 * double from padded weights (W_user [M, pad8(Ku)], W_cand [M, pad8(Kc)]). */
void ik_reference(const ik_spec *s, const void *wu, const void *wc, const void *eu, const void *ec,
                  const int32_t *map, void *ures, void *out);

#endif
