/*
 * fa_ref.h -- the IKBO flash attention's independent GPU reference (NVRTC, no loom code):
 * a naive f32 attention reading K/V through the mapping, a comparison kernel, and the
 * gather that materializes the broadcast for the baseline.  Prefix: faref_.
 */
#ifndef LOOM_FA_REF_H
#define LOOM_FA_REF_H

#include "nvrtc_ref.h"

typedef struct fa_ref fa_ref;

/* The shape: Q and out [B * nseed, H, D], K and V [U * S, H, D]; lens NULL: S each. */
typedef struct faref_shape {
    int64_t B, U, S, H, D, nseed;
    loom_dtype dt;
} faref_shape;

typedef struct faref_report {
    uint64_t checked, bad, nonfinite;
    double max_err;  /* max |out - ref| over the finite outputs */
    double worst;    /* max |out - ref| / (atol + rtol |ref|) (inf with a non-finite output) */
    int64_t first_bad;
} faref_report;

loom_status faref_open(rt_gpu *g, fa_ref **out, char *err, size_t errlen);
void faref_close(fa_ref *r);
/* ref [B * nseed, H, D] f32: softmax(q k^T / sqrt(D)) v per row and head, keys 0 ..
 * len(u) - 1 of user u = map[row / nseed] (len: lens[u], or S when lens is 0); rows of a
 * user with no keys are 0.  One thread per (row, head), an online softmax in f32. */
loom_status faref_reference(fa_ref *r, const faref_shape *s, uint64_t q, uint64_t k, uint64_t v, uint64_t map,
                            uint64_t lens, uint64_t ref, char *err, size_t errlen);
/* Compare out (the dtype) with ref (f32): |out - ref| <= atol + rtol |ref| each. */
loom_status faref_compare(fa_ref *r, uint64_t out, loom_dtype dt, uint64_t ref, int64_t n, double atol, double rtol,
                          faref_report *rep, char *err, size_t errlen);
/* dst[b] = src[map[b]] for b < B, each a slab of `bytes` (a multiple of 16). */
loom_status faref_gather(fa_ref *r, uint64_t src, uint64_t map, uint64_t dst, int64_t B, int64_t bytes, char *err,
                         size_t errlen);

#endif
