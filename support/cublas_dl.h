/*
 * cublas_dl.h -- cuBLAS for the benchmarks that time it beside loom (bench_gemm,
 * bench_ikbo_lce's framework baseline), loaded with dlopen so they build without the CUDA
 * toolkit and run, minus the cuBLAS figures, where it is missing.
 *
 * cuBLAS is column-major and loom's tensors are row-major, so cublas_dl_gemm computes the
 * row-major C = A @ B as the column-major C^T = B^T A^T: the same bytes, with B as the
 * first operand.  Batches go through cublasGemmStridedBatchedEx, with A's stride 0 when A
 * is shared by the batch; batch 1 through cublasGemmEx.  fp32 compute, cuBLAS's default
 * algorithm (which uses tensor cores), on the default stream, which loom launches use too.
 *
 * Prefix: cublas_dl_.
 */
#ifndef LOOM_CUBLAS_DL_H
#define LOOM_CUBLAS_DL_H

#include "loom.h"

#include <stddef.h>
#include <stdint.h>

typedef int cublasStatus_t; /* CUBLAS_STATUS_SUCCESS = 0 */
typedef struct cublasContext *cublasHandle_t;

/* The library, the entry points the benchmarks call, and one handle. */
typedef struct cublas_dl {
    void *lib;
    char path[256];
    cublasStatus_t (*Create)(cublasHandle_t *);
    cublasStatus_t (*Destroy)(cublasHandle_t);
    cublasStatus_t (*GetVersion)(cublasHandle_t, int *);
    const char *(*GetStatusString)(cublasStatus_t);
    cublasStatus_t (*GemmEx)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, int,
                             const void *, int, int, const void *, void *, int, int, int, int);
    cublasStatus_t (*GemmStridedBatchedEx)(cublasHandle_t, int, int, int, int, int, const void *,
                                           const void *, int, int, long long, const void *, int, int,
                                           long long, const void *, void *, int, int, long long, int, int,
                                           int);
    cublasHandle_t h;
    int version;
} cublas_dl;

/* Load cuBLAS (LOOM_CUBLAS_LIB, else libcublas.so.13, else .so.12, else the toolkit's) and
 * make a handle on the context current on this thread (the primary context that rt_gpu
 * makes current).  0, or -1 with the reason in err. */
int cublas_dl_open(cublas_dl *cb, char *err, size_t errlen);
/* Destroy the handle (the library stays loaded, as libcuda does). */
void cublas_dl_close(cublas_dl *cb);

/* Row-major C [batch, M, N] = A [M, K] (a_shared) or [batch, M, K] @ B [batch, K, N]
 * (rank 2 when batch is 1), device addresses; inputs and output of dtype dt (f16, bf16
 * or f32), fp32 accumulation.  Asynchronous; LOOM_ERR_CUDA with cuBLAS's reason in err. */
loom_status cublas_dl_gemm(cublas_dl *cb, loom_dtype dt, int64_t M, int64_t N, int64_t K, int64_t batch, uint64_t A,
                           int a_shared, uint64_t B, uint64_t C, char *err, size_t errlen);

/* ---------------------------------------------------------------- cuBLASLt, FP8 */

/* cuBLASLt (LOOM_CUBLASLT_LIB, else libcublasLt.so.13, .so.12, the toolkit's), for the FP8
 * GEMM loom's FP8 gemm is timed against (issue 38).  FP8 needs both operands K-major (the
 * "TN" layout): row-major A [M, K] and B given transposed as Bt [N, K].  The row-major
 * C [M, N] is the column-major C^T [N, M] = op_T(Bt) @ A^T, where Bt as stored is the
 * column-major K x N matrix (ld K) taken transposed and A as stored the column-major K x M
 * one (ld K) taken as it is.  fp32 compute and scale type; the
 * scales a and b (device f32 scalars, or 0: 1.0) multiply the product; fast_accum 0:
 * cuBLASLt promotes the FP8 tensor cores' partial sums into f32 every few k blocks
 * (CUBLASLT_MATMUL_DESC_FAST_ACCUM off, its default), 1: it accumulates on the tensor
 * cores throughout, as loom's FP8 gemm does today.
 * The algorithm: cuBLASLt's first heuristic pick for the problem, with a workspace. */
typedef struct cublaslt_dl {
    void *lib;
    char path[256];
    size_t version;
    void *h; /* cublasLtHandle_t */
    cublasStatus_t (*Create)(void **);
    cublasStatus_t (*Destroy)(void *);
    size_t (*GetVersion)(void);
    const char *(*GetStatusString)(cublasStatus_t);
    cublasStatus_t (*DescCreate)(void **, int, int);
    cublasStatus_t (*DescDestroy)(void *);
    cublasStatus_t (*DescSet)(void *, int, const void *, size_t);
    cublasStatus_t (*LayoutCreate)(void **, int, uint64_t, uint64_t, int64_t);
    cublasStatus_t (*LayoutDestroy)(void *);
    cublasStatus_t (*PrefCreate)(void **);
    cublasStatus_t (*PrefDestroy)(void *);
    cublasStatus_t (*PrefSet)(void *, int, const void *, size_t);
    cublasStatus_t (*Heuristic)(void *, void *, void *, void *, void *, void *, void *, int, void *, int *);
    cublasStatus_t (*Matmul)(void *, void *, const void *, const void *, void *, const void *, void *, const void *,
                             const void *, void *, void *, void *, const void *, void *, size_t, void *);
} cublaslt_dl;

/* One FP8 GEMM problem, its descriptors and algorithm made once (cublaslt_dl_fp8_plan),
 * run any number of times (cublaslt_dl_fp8_run). */
typedef struct cublaslt_fp8 {
    cublaslt_dl *lt;
    void *desc, *la, *lb, *lc; /* the matmul descriptor; Bt's, A's and C's (= D's) layouts */
    uint64_t heur[16];         /* a cublasLtMatmulHeuristicResult_t (96 bytes): algo first */
    uint64_t ws;               /* the workspace (device), ws_bytes long */
    size_t ws_bytes;
} cublaslt_fp8;

int cublaslt_dl_open(cublaslt_dl *lt, char *err, size_t errlen);
void cublaslt_dl_close(cublaslt_dl *lt);
/* Plan C [M, N] (odt: f16, bf16 or f32) = scale_a scale_b A [M, K] @ Bt [N, K]^T, A and Bt
 * of FP8 type in (e4m3 or e5m2; both the same here), fast accumulation or not, with the
 * workspace ws of ws_bytes (device).  scale_a, scale_b: device addresses of f32 scalars, or 0 for none.  0, or -1
 * with the reason (no algorithm for the problem, the library's status) in err. */
int cublaslt_dl_fp8_plan(cublaslt_dl *lt, loom_dtype in, loom_dtype odt, int64_t M, int64_t N, int64_t K,
                         uint64_t scale_a, uint64_t scale_b, int fast_accum, uint64_t ws, size_t ws_bytes,
                         cublaslt_fp8 *p, char *err, size_t errlen);
loom_status cublaslt_dl_fp8_run(cublaslt_fp8 *p, uint64_t A, uint64_t Bt, uint64_t C, char *err, size_t errlen);
void cublaslt_dl_fp8_release(cublaslt_fp8 *p);

#endif /* LOOM_CUBLAS_DL_H */
