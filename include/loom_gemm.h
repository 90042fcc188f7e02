/*
 * loom_gemm.h -- gemm at any shape, for a program that multiplies matrices with loom and
 * writes no kernel: prepared once per shape (tuned, compiled, loaded), then run per
 * request at any M and batch up to the prepared ones.  Included by loom.h.
 */
#include "loom.h" /* first, outside the guard: loom.h declares every part of the API in order */
#ifndef INCLUDE_LOOM_GEMM_H
#define INCLUDE_LOOM_GEMM_H

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported from libloom (loom.h says more). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---------------------------------------------------------------- gemm, any shape
 * (templates/gemm_api.c)  C[b] = A[b] @ B[b], row-major and contiguous: A [M,K] (shared by
 * the batch) or [batch,M,K], B [batch,K,N], C [batch,M,N]; f16 or bf16 in, f16, bf16 or
 * f32 out, f32 accumulation; any M, N, K >= 1.  TMA needs rows of A and B 16-byte
 * aligned: where K (or N) is not a multiple of 8, prepare makes a padded copy of A (or B)
 * once, and every run first copies the operand into it (a kernel of its own, about one
 * read and one write of the operand), then runs the gemm template on it.  config NULL:
 * the config loom_tune picks at the shape (cached like any tuning); else "k=v,..." over
 * the gemm template's defaults (tmastore=0 when N is not a multiple of 8).
 *
 * M and batch are run-time: the shape given to prepare holds their maxima, and
 * loom_gemm_run_at runs one request at any M from 1 to that M and any batch from 1 to
 * that batch with the kernel prepare compiled (nothing is built or compiled per request).
 * N, K, the dtypes and a_shared are fixed at prepare.  In a batch, the products keep the
 * prepared layout: product b of C, and of A when A is not shared, starts at row b * M
 * (the prepared M), and a request at a smaller M reads and writes the first rows of each
 * (at batch 1, or at the prepared M, the buffers are plainly contiguous). */
typedef struct loom_gemm_shape {
    int64_t M, N, K, batch;  /* M and batch: the most a run takes.  batch 1: A, B, C are [M,K], [K,N], [M,N] */
    loom_dtype dtype, odtype;
    int a_shared;            /* batch > 1: 1 when one A [M,K] serves every product */
} loom_gemm_shape;
typedef struct loom_gemm loom_gemm;
loom_status loom_gemm_prepare(loom_runtime *rt, const loom_gemm_shape *s, const char *config, loom_gemm **out);
/* A run at the prepared shape (M and batch at their maxima).  Buffers too small for the
 * shape, or NULL, are refused with a message naming them. */
loom_status loom_gemm_run(loom_gemm *p, const loom_buffer *a, const loom_buffer *b, loom_buffer *c);
/* A run at a request's M and batch (1 to the prepared M and batch; other values are
 * refused with a message naming M or batch).  The buffers need only what the request
 * reads and writes: B batch*K*N elements, C ((batch-1)*M_max + M)*N (M*N at batch 1),
 * A the same rows of K when batched (a_shared 0), else M*K; nothing past them is touched. */
loom_status loom_gemm_run_at(loom_gemm *p, int64_t M, int64_t batch, const loom_buffer *a, const loom_buffer *b,
                             loom_buffer *c);
/* What a run launches: the config and the copies ("gemm BM=..., A padded to lda=..."). */
const char *loom_gemm_describe(const loom_gemm *p);
void loom_gemm_destroy(loom_gemm *p);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* INCLUDE_LOOM_GEMM_H */
