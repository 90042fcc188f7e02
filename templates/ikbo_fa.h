/*
 * ikbo_fa.h -- the IKBO flash attention kernel (templates/ikbo_fa.c), its work plan
 * (templates/ikbo_fa_plan.c) and what the registry entry (templates/ikbo_fa_registry.c)
 * and the operation above (ops/ikbo_fa_api.c, through templates/tpl.h) need of them
 * (internal).  Prefix: fa_.
 */
#ifndef LOOM_IKBO_FA_H
#define LOOM_IKBO_FA_H

#include "ikbo_fa_units.h" /* FA_BLOCK, the plan's fields, fa_units */
#include "tpl.h"

#include <math.h>
#include <stdbool.h>

/* The registry entry's shape keys (its table, loom_tune.h "A template's table"; the
 * config's is LOOM_IKBO_FA_CONFIG, loom_ikbo.h). */
#define FA_SHAPE(X)                                                                                         \
    X(B, B, int64_t, 2048, "candidates (the kernel takes B * n_seed rows at run time, at most this many)") \
    X(U, U, int64_t, 32, "users (the kernel takes them at run time, at most this many)")                   \
    X(S, S, int64_t, 1024, "keys a user (padded)")                                                         \
    X(H, H, int64_t, 2, "heads")                                                                           \
    X(D, D, int64_t, 128, "head dim (64 or 128)")                                                          \
    X(n_seed, nseed, int64_t, 64, "query rows a candidate")                                                \
    X(dtype, dt, loom_dtype, LOOM_F16, "f16 or bf16")                                                      \
    X(varlen, varlen, int, 0, "1: per-user lengths seq_len[U] mask the keys past them")                    \
    X(shuffle, shuffle, int, 0, "check inputs: 0 contiguous users, 1 shuffled", .inputs_only = 1)          \
    X(odt, odt, loom_dtype, LOOM_F16, "out with dtype e4m3: f16 or bf16 (f16/bf16 inputs: out is theirs)")   \
    X(vtrans, vtrans, int, 0, "1: V comes transposed, [U, H, D, S] (keys innermost): needed by e4m3")

/* A shape and config: candidates, users, padded keys a user, heads, head dim, queries a
 * candidate; dt f16 or bf16 (Q, K, V and out) or e4m3 (Q, K, V; out odt, f16 or bf16);
 * varlen 1: keys past seq_len[u] are masked; shuffle: the check inputs' mapping; vtrans 1:
 * V is given transposed (FP8 wgmma reads its B K-major: keys innermost).  Then the config (loom_ikbo_fa_config's fields): bn
 * keys a K/V tile; stages K/V ring slots; ctas persistent programs; sched 1: units claimed
 * from a counter, 0: round-robin; turns 1: the two warp groups take turns on the tensor
 * cores; overlap 1: a tile's softmax overlaps the previous tile's P V; tmastore 1: full
 * 64-row blocks go out by TMA through the Q slot; xunit 1: the next unit's first S = Q K^T
 * is issued beside this one's last P V. */
typedef struct fa_spec {
    FA_SHAPE(LOOM_FIELD)
    LOOM_IKBO_FA_CONFIG(LOOM_FIELD)
} fa_spec;

/* Rows of Q (and out): B * nseed. */
int64_t fa_rows(const fa_spec *s);
/* Q, K and V are e4m3; out's type (dt, or odt with e4m3). */
bool fa_fp8(const fa_spec *s);
loom_dtype fa_out_dt(const fa_spec *s);
/* The fixed scale of P before its cast to e4m3 (P in [0, 1] to [0, 256]: docs/kernels.md,
 * "FP8 attention"), as the power of two added to the exponent. */
#define FA_FP8_P_LOG2 8
/* The most units of work of one head a plan can hold (the plan tensor's rows). */
int64_t fa_max_units(const fa_spec *s);
/* Why the spec cannot be built, or NULL. */
const char *fa_why_not(const fa_spec *s, char *buf, size_t n);
/* The kernel's arguments, in order: Q, K, V [strided, below], plan [max units, 8] i32,
 * seq_len [U] i32, claims [2] i32 (INOUT, zero), units (i32: the plan's units of one head),
 * out, and with e4m3 scales [3, H] f32 (q_scale, k_scale, v_scale of each head).  Q and
 * out are [H, B * nseed, D] with strides (D, H * D, 1) over memory laid out [B * nseed, H,
 * D]; K and V [H, U, S, D] with strides (D, S * H * D, H * D, 1) over [U * S, H, D]; with
 * vtrans V is [H, U, D, S] with strides (D * S, H * D * S, S, 1) over [U, H, D, S]. */
loom_kernel *fa_build(const fa_spec *s, char *err, size_t errlen);

/* The kernel's arguments, declared in k in fa_build's order: the run-time dims rows and U,
 * Q, K, V, the plan, seq_len, the claims, the unit count and out (the tuner's reference
 * kernels take the same). */
typedef struct fa_args {
    loom_val rows, q, kt, vt, plan, lens, claims, units, out, scales; /* scales: e4m3 only */
} fa_args;
fa_args fa_declare(loom_kernel *k, const fa_spec *s);
void fa_grid(const fa_spec *s, int grid[3]);

/* The work plan of one mapping: units of two 64-row blocks of query rows of one user
 * (rows of consecutive candidates of that user, split into blocks), so that the two
 * consumer warp groups of a program read the same K/V tiles.  units [max units][8] i32:
 * user, first row and rows of block 0, of block 1 (rows 0: no block); users with the
 * longest keys first.  Returns the units, or -1 with a message in err when the mapping
 * or the lengths are out of range (naming the first bad entry). */
int64_t fa_plan(const fa_spec *s, const int32_t *cand_to_user, const int32_t *seq_len, int32_t *units, char *err,
                size_t errlen);

/* out [B * nseed, H, D] (the dtype), in double, from host Q, K, V, the mapping and the
 * lengths (NULL: S each); rows of a user with no keys are zero. */
void fa_reference(const fa_spec *s, const void *q, const void *k, const void *v, const int32_t *map,
                  const int32_t *seq_len, void *out);
/* The error bound of each element of fa_reference's out (include/loom.h: the error
 * model), given that reference in ref. */
void fa_bound(const fa_spec *s, const void *q, const void *k, const void *v, const int32_t *map,
              const int32_t *seq_len, const void *ref, double *bound);

/* dtype e4m3: out [B * nseed, H, D] (odt) as the kernel computes it, in double, from host
 * Q, K (e4m3, [U * S, H, D]), Vt (e4m3, [U, H, D, S]), scales [3, H] (q, k, v), the
 * mapping and the lengths (NULL: S each): S = Q K^T exactly, m the running max of
 * 128-key tiles, P = 2^(S c - m + 8) rounded to e4m3 (dsl/fp8.c), l the sum of the
 * unrounded P, out = v_scale O / l.  Where bound is not NULL, each element's bound
 * (docs/checks.md, "ikbo_fa in FP8"): fp8_sums true takes the GPU's FP8 wgmma sums
 * (loom_fp8_mma_sum_error), false the interpreter's f32 sums. */
void fa_fp8_reference(const fa_spec *s, const void *q, const void *k, const void *v, const float *scales,
                      const int32_t *map, const int32_t *seq_len, bool fp8_sums, void *out, double *bound);

/* dtype e4m3's inputs as the f16 or bf16 kernel (dt) takes them: Q and K times their
 * heads' q_scale and k_scale, Vt [U, H, D, S] times v_scale and transposed back to V
 * [U * S, H, D]; q16 [rows, H, D], k16 and v16 [U * S, H, D].  The same values where a
 * scale's significand has at most 7 bits for f16 (e4m3 values have 4), 4 for bf16, and
 * the products stay in range: then the two kernels attend over the same inputs. */
void fa_fp8_dequant(const fa_spec *s, const void *q, const void *k, const void *vt, const float *scales,
                    loom_dtype dt, void *q16, void *k16, void *v16);

/* The registry entry's shape and config vectors as a spec; and the config as the C
 * API's. */
fa_spec fa_spec_of(const int64_t *shape, const int64_t *config);
/* The shape's spec with the default config (for what depends on the shape alone: inputs,
 * plans, references). */
fa_spec fa_spec_of_shape(const int64_t *shape);
/* The C API's shape as the registry entry's shape vector (LOOM_MAX_PARAMS values; the
 * inputs-only keys 0). */
void fa_shape_vector(const loom_ikbo_fa_shape *s, int64_t *shape);
loom_ikbo_fa_config fa_config_of(const int64_t *config);

/* The softmax runs in base 2: S times log2(e) / sqrt(D), then exp2 (the kernel, its device
 * reference, the CPU references and the bound all take this factor). */
#define FA_LOG2E 1.4426950408889634
static inline double fa_softmax_factor(int64_t D) { return FA_LOG2E / sqrt((double)D); }

#endif
