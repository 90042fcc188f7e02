/*
 * cublas_dl.c -- cuBLAS by hand, through dlopen (see cublas_dl.h).
 */
#include "cublas_dl.h"
#include "rt.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

enum { CUBLAS_OP_N = 0 };
enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 }; /* cudaDataType */
enum { CUBLAS_COMPUTE_32F = 68 };
enum { CUBLAS_GEMM_DEFAULT = -1 };

int cublas_dl_open(cublas_dl *cb, char *err, size_t errlen)
{
    const char *names[3] = {"libcublas.so.13", "libcublas.so.12", "/usr/local/cuda/lib64/libcublas.so"};
    char first[384];
    cb->lib = rt_dlopen_first(names, 3, "LOOM_CUBLAS_LIB", cb->path, sizeof cb->path, first, sizeof first);
    if (!cb->lib) {
        snprintf(err, errlen, "cannot load cuBLAS (%s)", first);
        return -1;
    }
#define SYM(field, name)                                                                           \
    if (!(*(void **)&cb->field = dlsym(cb->lib, name))) {                                          \
        snprintf(err, errlen, "%s has no %s", cb->path, name);                                     \
        return -1;                                                                                 \
    }
    SYM(Create, "cublasCreate_v2")
    SYM(Destroy, "cublasDestroy_v2")
    SYM(GetVersion, "cublasGetVersion_v2")
    SYM(GetStatusString, "cublasGetStatusString")
    SYM(GemmEx, "cublasGemmEx")
    SYM(GemmStridedBatchedEx, "cublasGemmStridedBatchedEx")
#undef SYM
    cublasStatus_t s = cb->Create(&cb->h);
    if (s != 0) {
        snprintf(err, errlen, "cublasCreate_v2 failed: %s", cb->GetStatusString(s));
        return -1;
    }
    if (cb->GetVersion(cb->h, &cb->version) != 0)
        cb->version = 0;
    return 0;
}

void cublas_dl_close(cublas_dl *cb)
{
    if (cb->h)
        cb->Destroy(cb->h);
    cb->h = NULL;
}

static int cuda_type(loom_dtype dt) { return dt == LOOM_BF16 ? CUDA_R_16BF : dt == LOOM_F16 ? CUDA_R_16F : CUDA_R_32F; }

loom_status cublas_dl_gemm(cublas_dl *cb, loom_dtype dt, int64_t M, int64_t N, int64_t K, int64_t batch, uint64_t A,
                           int a_shared, uint64_t B, uint64_t C, char *err, size_t errlen)
{
    float alpha = 1.0f, beta = 0.0f;
    int t = cuda_type(dt), m = (int)N, n = (int)M, k = (int)K;
    cublasStatus_t s;
    /* column-major C^T [N,M] = B^T [N,K] @ A^T [K,M] */
    if (batch == 1)
        s = cb->GemmEx(cb->h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, (const void *)(uintptr_t)B, t, m,
                       (const void *)(uintptr_t)A, t, k, &beta, (void *)(uintptr_t)C, t, m, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT);
    else
        s = cb->GemmStridedBatchedEx(cb->h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, (const void *)(uintptr_t)B, t,
                                     m, (long long)(K * N), (const void *)(uintptr_t)A, t, k,
                                     a_shared ? 0LL : (long long)(M * K), &beta, (void *)(uintptr_t)C, t, m,
                                     (long long)(M * N), (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != 0) {
        snprintf(err, errlen, "cuBLAS gemm failed: %s", cb->GetStatusString(s));
        return LOOM_ERR_CUDA;
    }
    return LOOM_OK;
}
