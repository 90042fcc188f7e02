/*
 * fa_ref.h -- what the IKBO flash attention's GPU tests and benchmark check and compare
 * it with:
 *
 *   faref_model_*   the check by the error model (docs/checks.md), on the device: the
 *                   ikbo_fa template's device reference (a naive f32 SIMT attention over
 *                   the plan's row blocks, loom's SIMT path: no TMA, wgmma or warp
 *                   specialization), the template's device bound kernel (fa_bound's terms
 *                   from the same pass, twice the model's error since the reference sums
 *                   in f32 too, plus an ulp), and the tuner's comparison kernel with that
 *                   bound, per element; the device reference itself checked against a
 *                   naive f32 attention in CUDA C (NVRTC, no loom code).  bench_ikbo_fa
 *                   and tests/test_ikbo_fa.c share it.
 *   faref_gather    the gather that materializes the broadcast for the baseline (NVRTC,
 *                   no loom code).
 *
 * Prefix: faref_.
 */
#ifndef LOOM_FA_REF_H
#define LOOM_FA_REF_H

#include "loom_ikbo.h"
#include "nvrtc_ref.h"

typedef struct fa_ref fa_ref;

loom_status faref_open(rt_gpu *g, fa_ref **out, char *err, size_t errlen);
void faref_close(fa_ref *r);
/* dst[b] = src[map[b]] for b < B, each a slab of `bytes` (a multiple of 16). */
loom_status faref_gather(fa_ref *r, uint64_t src, uint64_t map, uint64_t dst, int64_t B, int64_t bytes, char *err,
                         size_t errlen);

/* ---------------------------------------------------------------- the check by the model */

/* The reference and the bound of one ikbo_fa request (its inputs and mapping), made once
 * and compared with any number of outputs of that request. */
typedef struct faref_model {
    loom_runtime *rt;
    loom_dtype dt;
    int64_t n;                /* out's elements: B * n_seed * H * D */
    loom_buffer *ref, *bound; /* the reference (dt) and the bound (f32) of each element */
    /* internal */
    loom_kernel *refk, *bndk, *cmp, *red;
    int cg;
    loom_buffer *plan, *lens, *claims, *cbad, *cmax, *csum;
} faref_model;

/* The reference and the bound of shape s at device inputs q, k, v ([B * n_seed, H, D] and
 * [U * S, H, D], the dtype) with the host's mapping map [B] and lengths lens [U] (read
 * when s->varlen); on failure the reason is in err and nothing is left allocated.  With
 * indep (faref_open's), the device reference is first checked against an independent
 * one, a naive f32 attention in CUDA C (NVRTC, one thread a row and head, no loom code),
 * within the same bound: a wrong reference fails here instead of passing a wrong kernel. */
loom_status faref_model_open(loom_runtime *rt, fa_ref *indep, const loom_ikbo_fa_shape *s, loom_buffer *q,
                             loom_buffer *k, loom_buffer *v, const int32_t *map, const int32_t *lens, faref_model *m,
                             char *err, size_t errlen);
/* Compare out [B * n_seed, H, D] with the model: *bad the elements past their bound (a
 * NaN where the reference has a number among them: an element left unwritten in an output
 * poisoned with NaN fails), *maxerr the largest |out - ref| (infinite for a NaN). */
loom_status faref_model_check(faref_model *m, loom_buffer *out, double *bad, double *maxerr, char *err,
                              size_t errlen);
void faref_model_close(faref_model *m);

#endif
