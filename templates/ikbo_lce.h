/*
 * ikbo_lce.h -- the IKBO linear-compression kernels (templates/ikbo_lce.c) and what the
 * C API (templates/ikbo_lce_api.c) and the registry entry need of them (internal).
 * Prefix: ik_.
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

typedef struct ik_spec {
    ik_mode mode;
    int64_t B, U, M, N, Ku, Kc; /* K as the user gives it; the weights are padded (tpl_pad8) */
    loom_dtype dt;              /* f16 or bf16: inputs, user_res and out */
    int planes;                 /* user_res [U, M, N] rounded to dt (1: stages 1, 2), or
                                   [U, 2, M, N] as hi + lo planes of dt (2: stages 3, 4;
                                   IK_CAND_FUSED and IK_FUSED need it) */
    int bm, bn, stages, cwarps, ctas;
    int consumers; /* IK_COOPERATIVE: one task of cwarps warps shares each BM x BN tile;
                      IK_PINGPONG: two warp groups take turns on whole tiles (BM rows each);
                      IK_SPLIT: two warp groups share each 128-row tile, 64 rows each */
    int trans;     /* 1: the transposed product out[b]^T = E[b]^T @ W^T (with IK_SPLIT, BN = 128:
                      each warp group owns 64 columns of out and every row of the tile; the
                      tile's rows, on wgmma's N side, are M split evenly into tiles of at most
                      BM rows, a multiple of 8: 224 at M = 433) */
    int cluster;   /* trans: 2 runs the programs in pairs taking a tile's two column halves
                      (tiles n0 and n0 + BN), each multicasting half of the W tile to both */
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
       IKA_COUNT };
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
/* The registry entry's shape and config vectors as a spec of the given mode. */
ik_spec ik_spec_of(ik_mode mode, const int64_t *shape, const int64_t *config);
/* The user of each candidate: b * U / B, shuffled by a permutation when shuffle is set. */
void ik_mapping(int64_t B, int64_t U, int shuffle, uint64_t seed, int32_t *map);
/* out (and ures, when not NULL: [U, 2, M, N] hi and lo planes of the dtype) computed in
 * double from padded weights (W_user [M, pad8(Ku)], W_cand [M, pad8(Kc)]). */
void ik_reference(const ik_spec *s, const void *wu, const void *wc, const void *eu, const void *ec,
                  const int32_t *map, void *ures, void *out);

/* ---------------------------------------------------------------- a stage's run
 * What one run of a stage does, as data (templates/ikbo_lce_api.c makes it): the buffers
 * the prepared object owns and how the host weights fill them, and the kernels in launch
 * order with each argument's source.  The C API runs it; `loomc aot` writes it out as
 * tables that the generated launcher runs the same way (aot/aot_lce.c). */
enum ik_buf {
    IK_E_USER, IK_E_CAND, IK_MAP, IK_OUT, /* the caller's, in run's argument order */
    IK_WU_RAW, IK_WC_RAW,                 /* stage 1: the weights as given */
    IK_WU, IK_WC,                         /* the padded weights (stage 0: wu is the concatenation) */
    IK_URES, IK_CANDRES,                  /* user_res, and stages 1-2's candidate result */
    IK_FLAGS, IK_CLAIMS,                  /* stage 4: user tiles done (grows by epoch), tile counter */
    IK_ECAT,                              /* stage 0: the materialized E */
    IK_NBUF,
    /* argument sources that are no buffer: i32 scalars of the run */
    IK_FLAG_BASE = IK_NBUF,               /* stage 4: the flags' counter before the launch */
    IK_SRC_B, IK_SRC_U,                   /* the request's B and U (run-time dims) */
    IK_SRC_M,                             /* the shape's M (stage 0's gemm takes it as a dim) */
};
/* The grid rules of a stage's steps are over the vector {B, U}. */
enum { IK_RULE_B, IK_RULE_U };
#define IK_CALLER_BUFS 4
#define IK_MAX_STEPS 5
#define IK_MAX_FILLS 2

/* Host weight `weight` (0: w_user [M, Ku], 1: w_cand [M, Kc]) goes into buffer buf, laid
 * out [M, ld], at column col0; the rest of the buffer is zero. */
typedef struct ik_fill {
    int buf, weight;
    int64_t ld, col0;
} ik_fill;

typedef struct ik_step {
    loom_kernel *k;
    loom_grid_rule grid; /* over {B, U} (IK_RULE_B, IK_RULE_U) */
    bool fixed;          /* the kernel serves the prepared B and U alone (its template has no run-time dims) */
    int nargs;
    int arg[LOOM_MAX_ARGS]; /* an ik_buf, or one of the scalar sources after IK_NBUF */
} ik_step;

typedef struct ik_stage {
    size_t bytes[IK_NBUF]; /* the owned buffers' sizes (0: not used; the caller's: 0) */
    int nfill;
    ik_fill fill[IK_MAX_FILLS];
    int nsteps;
    ik_step step[IK_MAX_STEPS];
    /* stage 4: a launch adds U * blocks_per_user to the flags' counter; a run passes the
     * counter's value before it (IK_FLAG_BASE) and, where the sum would pass INT32_MAX,
     * clears the flags and starts at 0 */
    int64_t blocks_per_user;
    char config[160]; /* "BM=..,BN=..,..": the tile config the GEMM kernels were built with */
} ik_stage;

/* Build the stage's kernels for shape and cfg and describe its run; on failure the reason
 * is in err and nothing is left allocated.  ik_stage_free destroys the kernels. */
loom_status ik_stage_make(const loom_ikbo_lce_shape *s, loom_ikbo_stage stage, const loom_ikbo_lce_config *cfg,
                          const int64_t *gemm_pick, ik_stage *out, char *err, size_t errlen);
/* Stage 0's GEMM as the gemm template's shape (gemm_pick above: a config of it, or NULL
 * for the tile config of cfg). */
void ik_baseline_gemm_shape(const loom_ikbo_lce_shape *s, int64_t *gs);
void ik_stage_free(ik_stage *st);
/* The GEMM tile config the stage's kernels take: cfg, or for the plain GEMMs of stages 0-2
 * the non-transposed default where cfg is transposed. */
const loom_ikbo_lce_config *ik_stage_config(loom_ikbo_stage stage, const loom_ikbo_lce_config *cfg);
/* The tuned (or, without a GPU, default) config of the persistent kernel at the shape. */
loom_ikbo_lce_config ik_default_config(void);

#endif
