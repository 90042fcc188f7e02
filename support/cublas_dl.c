/*
 * cublas_dl.c -- cuBLAS by hand, through dlopen (see cublas_dl.h).
 */
#include "cublas_dl.h"
#include "rt.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Entry point `name` of lib into lib's struct field `field` (obj->lib, obj->path), or
 * return -1 from the loader with the reason in err. */
#define DL_SYM(obj, field, name)                                                                   \
    if (!(*(void **)&(obj)->field = dlsym((obj)->lib, name))) {                                    \
        snprintf(err, errlen, "%s has no %s", (obj)->path, name);                                  \
        return -1;                                                                                 \
    }

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
#define SYM(field, name) DL_SYM(cb, field, name)
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

/* ---------------------------------------------------------------- cuBLASLt, FP8 */

enum { CUBLAS_OP_T = 1 };
enum { CUDA_R_8F_E4M3 = 28, CUDA_R_8F_E5M2 = 29 };
enum { DESC_SCALE_TYPE = 1, DESC_TRANSA = 3, DESC_TRANSB = 4, DESC_A_SCALE = 17, DESC_B_SCALE = 18,
       DESC_FAST_ACCUM = 25 }; /* cublasLtMatmulDescAttributes_t */
enum { PREF_MAX_WORKSPACE_BYTES = 1 };
enum { HEUR_WS_OFFSET = 64 / 8 }; /* cublasLtMatmulHeuristicResult_t: algo (64 bytes), workspaceSize */

int cublaslt_dl_open(cublaslt_dl *lt, char *err, size_t errlen)
{
    const char *names[3] = {"libcublasLt.so.13", "libcublasLt.so.12", "/usr/local/cuda/lib64/libcublasLt.so"};
    char first[384];
    memset(lt, 0, sizeof *lt);
    lt->lib = rt_dlopen_first(names, 3, "LOOM_CUBLASLT_LIB", lt->path, sizeof lt->path, first, sizeof first);
    if (!lt->lib) {
        snprintf(err, errlen, "cannot load cuBLASLt (%s)", first);
        return -1;
    }
#define SYM(field, name) DL_SYM(lt, field, name)
    SYM(Create, "cublasLtCreate")
    SYM(Destroy, "cublasLtDestroy")
    SYM(GetVersion, "cublasLtGetVersion")
    SYM(GetStatusString, "cublasLtGetStatusString")
    SYM(DescCreate, "cublasLtMatmulDescCreate")
    SYM(DescDestroy, "cublasLtMatmulDescDestroy")
    SYM(DescSet, "cublasLtMatmulDescSetAttribute")
    SYM(LayoutCreate, "cublasLtMatrixLayoutCreate")
    SYM(LayoutDestroy, "cublasLtMatrixLayoutDestroy")
    SYM(PrefCreate, "cublasLtMatmulPreferenceCreate")
    SYM(PrefDestroy, "cublasLtMatmulPreferenceDestroy")
    SYM(PrefSet, "cublasLtMatmulPreferenceSetAttribute")
    SYM(Heuristic, "cublasLtMatmulAlgoGetHeuristic")
    SYM(Matmul, "cublasLtMatmul")
#undef SYM
    cublasStatus_t s = lt->Create(&lt->h);
    if (s != 0) {
        snprintf(err, errlen, "cublasLtCreate failed: %s", lt->GetStatusString(s));
        lt->h = NULL;
        return -1;
    }
    lt->version = lt->GetVersion();
    return 0;
}

void cublaslt_dl_close(cublaslt_dl *lt)
{
    if (lt->h)
        lt->Destroy(lt->h);
    lt->h = NULL;
}

void cublaslt_dl_fp8_release(cublaslt_fp8 *p)
{
    if (!p->lt)
        return;
    if (p->desc)
        p->lt->DescDestroy(p->desc);
    void *lays[3] = {p->la, p->lb, p->lc};
    for (int i = 0; i < 3; i++)
        if (lays[i])
            p->lt->LayoutDestroy(lays[i]);
    memset(p, 0, sizeof *p);
}

int cublaslt_dl_fp8_plan(cublaslt_dl *lt, loom_dtype in, loom_dtype odt, int64_t M, int64_t N, int64_t K,
                         uint64_t scale_a, uint64_t scale_b, int fast_accum, uint64_t ws, size_t ws_bytes,
                         cublaslt_fp8 *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    p->lt = lt;
    p->ws = ws;
    p->ws_bytes = ws_bytes;
    int ti = in == LOOM_E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3, to = cuda_type(odt), f32 = CUDA_R_32F;
    int opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    int8_t fast = fast_accum != 0;
    void *pa = (void *)(uintptr_t)scale_b, *pb = (void *)(uintptr_t)scale_a; /* cuBLAS's A is Bt, its B is A */
    void *pref = NULL;
    int got = 0;
    cublasStatus_t s = lt->DescCreate(&p->desc, CUBLAS_COMPUTE_32F, f32);
    if (!s) s = lt->DescSet(p->desc, DESC_SCALE_TYPE, &f32, sizeof f32);
    if (!s) s = lt->DescSet(p->desc, DESC_TRANSA, &opT, sizeof opT);
    if (!s) s = lt->DescSet(p->desc, DESC_TRANSB, &opN, sizeof opN);
    if (!s) s = lt->DescSet(p->desc, DESC_FAST_ACCUM, &fast, sizeof fast);
    if (!s && pa) s = lt->DescSet(p->desc, DESC_A_SCALE, &pa, sizeof pa);
    if (!s && pb) s = lt->DescSet(p->desc, DESC_B_SCALE, &pb, sizeof pb);
    if (!s) s = lt->LayoutCreate(&p->la, ti, (uint64_t)K, (uint64_t)N, K);
    if (!s) s = lt->LayoutCreate(&p->lb, ti, (uint64_t)K, (uint64_t)M, K);
    if (!s) s = lt->LayoutCreate(&p->lc, to, (uint64_t)N, (uint64_t)M, N);
    if (!s) s = lt->PrefCreate(&pref);
    if (!s) s = lt->PrefSet(pref, PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
    if (!s) s = lt->Heuristic(lt->h, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, p->heur, &got);
    if (pref)
        lt->PrefDestroy(pref);
    if (s || got < 1) {
        snprintf(err, errlen, "cuBLASLt FP8 %s -> %s at %lldx%lldx%lld: %s", loom_dtype_name(in), loom_dtype_name(odt),
                 (long long)M, (long long)N, (long long)K, s ? lt->GetStatusString(s) : "no algorithm");
        cublaslt_dl_fp8_release(p);
        return -1;
    }
    return 0;
}

loom_status cublaslt_dl_fp8_run(cublaslt_fp8 *p, uint64_t A, uint64_t Bt, uint64_t C, char *err, size_t errlen)
{
    float alpha = 1.0f, beta = 0.0f;
    size_t need = (size_t)p->heur[HEUR_WS_OFFSET];
    cublasStatus_t s = p->lt->Matmul(p->lt->h, p->desc, &alpha, (const void *)(uintptr_t)Bt, p->la,
                                     (const void *)(uintptr_t)A, p->lb, &beta, (const void *)(uintptr_t)C, p->lc,
                                     (void *)(uintptr_t)C, p->lc, p->heur, (void *)(uintptr_t)p->ws,
                                     need <= p->ws_bytes ? need : p->ws_bytes, NULL);
    if (s != 0) {
        snprintf(err, errlen, "cublasLtMatmul (FP8) failed: %s", p->lt->GetStatusString(s));
        return LOOM_ERR_CUDA;
    }
    return LOOM_OK;
}
