/*
 * lce_op.h -- the IKBO linear compression operation's internals (ops/ikbo_lce_api.c and
 * ops/ikbo_lce_auto.c): a stage's run as data, which `loomc aot` writes out too (aot/),
 * and what the operation's two files share.  Its kernels come from templates/ikbo_lce.c
 * (through templates/tpl.h).  Prefix: ik_.
 */
#ifndef LOOM_LCE_OP_H
#define LOOM_LCE_OP_H

#include <stdbool.h>
#include "tpl.h"

/* ---------------------------------------------------------------- a stage's run
 * What one run of a stage does, as data (ops/ikbo_lce_api.c makes it): the buffers
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
    IK_SWU, IK_SWC,                       /* e4m3: the weights' scales [M] f32 (owned, uploaded at prepare) */
    IK_SEU, IK_SEC,                       /* e4m3: the embeddings' scales [U], [B] f32 (the caller's, per run) */
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

/* Dtype e4m3 serves stages 3 and 4 (ikbo_lce.h, "FP8"); what a refusal of another says. */
static inline bool ik_e4m3_serves(loom_ikbo_stage st)
{
    return st == LOOM_IKBO_FUSED_EPILOGUE || st == LOOM_IKBO_PERSISTENT;
}
#define IK_E4M3_STAGES "does not serve dtype e4m3: stages 3 and 4 do (LOOM_IKBO_AUTO takes 4, or 3 where the config cannot serve 4, untimed)"

/* ---------------------------------------------------------------- between the operation's files */

/* One stage, its config settled (given, tuned or the default): build, upload, load.
 * tuned: the config was left to the tuner, and so, on a GPU, is stage 0's GEMM's.  On
 * failure the reason is in loom_runtime_error(rt) and nothing is left allocated
 * (ops/ikbo_lce_api.c). */
loom_status ik_prepare_stage(loom_runtime *rt, const loom_ikbo_lce_shape *shape, loom_ikbo_stage stage,
                             const void *w_user, const void *w_cand, const float *w_user_scale,
                             const float *w_cand_scale, const loom_ikbo_lce_config *cfg, bool tuned,
                             loom_ikbo_lce **out);
/* "BM=..,BN=..,stages=..,cwarps=..,ctas=..,consumers=.." (and ",trans=..,cluster=.." where
 * transposed). */
void ik_config_text(const loom_ikbo_lce_config *c, char *buf, size_t n);
/* Append to p's description. */
void ik_desc_add(loom_ikbo_lce *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The device address and bytes of buffer `buf` (an ik_buf) that p's run at the prepared
 * B owns (0 where it owns none): where its buffers lie (bench_ikbo_lce --placement). */
uint64_t ik_owned_buffer(const loom_ikbo_lce *p, int buf, size_t *bytes);

/* LOOM_IKBO_AUTO: the stage picked by timing at shape s (ops/ikbo_lce_auto.c), the config
 * settled (tuned: left to the tuner); hs is the prepare's largest shape, at which the
 * inputs and the comparisons are made. */
loom_status ik_auto_prepare(loom_runtime *rt, const loom_ikbo_lce_shape *s, const loom_ikbo_lce_shape *hs,
                            const void *w_user, const void *w_cand, const float *w_user_scale,
                            const float *w_cand_scale, const loom_ikbo_lce_config *cfg, bool tuned,
                            loom_ikbo_lce **out);

#endif
