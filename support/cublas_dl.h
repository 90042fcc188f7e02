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

#endif /* LOOM_CUBLAS_DL_H */
