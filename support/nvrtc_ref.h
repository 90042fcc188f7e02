/*
 * nvrtc_ref.h -- independent CUDA C reference kernels, compiled with NVRTC, for GPU tests.
 *
 * A GPU test checks a loom kernel against a naive CUDA C kernel written without loom:
 * the source is compiled by NVRTC (loaded with dlopen, so its absence is a clean
 * LOOM_ERR_UNSUPPORTED "NVRTC missing" status), loaded through the GPU backend, and
 * launched with explicit parameters.  Reference kernels are extern "C", so their names
 * are the plain names below.
 *
 * Prefix: nvref_.
 */
#ifndef LOOM_NVRTC_REF_H
#define LOOM_NVRTC_REF_H

#include "gpu.h"

/* LOOM_OK when NVRTC can be loaded (libnvrtc.so.13, .so.12, .so; LOOM_NVRTC_LIB names
 * another file); else LOOM_ERR_UNSUPPORTED with "NVRTC missing: ..." in err. */
loom_status nvref_available(char *err, size_t errlen);
/* NVRTC's version, e.g. 13 0; LOOM_OK or as nvref_available. */
loom_status nvref_version(int *major, int *minor, char *err, size_t errlen);

/* Compile CUDA C `src` for `arch` ("sm_90a", "sm_80", ...).  want_cubin = false gives
 * PTX (for compute_XX, NUL-terminated), true a cubin (for sm_XX).  *out is malloc'ed.
 * Includes resolve against $CUDA_HOME/include (default /usr/local/cuda/include).  On a
 * compile error the NVRTC log is in err and the status is LOOM_ERR_COMPILE. */
loom_status nvref_compile(const char *src, const char *what, const char *arch, bool want_cubin,
                          void **out, size_t *outlen, char *err, size_t errlen);

/* Compile src for g's device and load it (a cubin; PTX through the driver's JIT when this
 * NVRTC cannot emit a cubin for the device). */
loom_status nvref_load(rt_gpu *g, const char *src, const char *what, rt_gpu_module **out, char *err,
                       size_t errlen);

/* ---------------------------------------------------------------- reference sources */

/* loom_ref_vector_add_f32(const float *a, const float *b, float *c, long long n)
 *   c[i] = a[i] + b[i]; one thread per element, any 1-D grid. */
extern const char nvref_src_vector_add_f32[];

/* loom_ref_broadcast_add_f32(const float *cand, const float *user, const int *cand_to_user,
 *                            float *out, long long B, long long M, long long N)
 * loom_ref_broadcast_add_f16(const __half *cand, const __half *user, const int *cand_to_user,
 *                            __half *out, long long B, long long M, long long N)
 *   out[b,m,n] = cand[b,m,n] + user[cand_to_user[b],m,n] (contiguous, row-major; f16 adds
 *   in f32 and rounds to nearest even); one thread per element of out. */
extern const char nvref_src_broadcast_add[];

/* loom_ref_softmax_f32(const float *x, float *y, int rows, int cols)
 *   y[r,:] = softmax(x[r,:]) with the row max subtracted; one thread per row. */
extern const char nvref_src_softmax_f32[];

/* loom_ref_matmul_f16_f32(const __half *a, const __half *b, float *c, int M, int N, int K)
 *   c[M,N] = a[M,K] @ b[K,N], row-major, f32 accumulation in k order; one thread per
 *   element of c, x over N and y over M. */
extern const char nvref_src_matmul_f16_f32[];

/* ---------------------------------------------------------------- GEMM reference and check */

/* C = A @ B per batch, row-major: A [M,K] shared by every batch (a_shared) or
 * [batch,M,K], B [batch,K,N] (or with b_trans given transposed, [batch,N,K]: FP8's
 * K-major operand), C [batch,M,N]; A and B f16, bf16, e4m3 or e5m2. */
typedef struct nvref_gemm_shape {
    int64_t M, N, K, batch;
    int a_shared;
    loom_dtype in; /* LOOM_F16, LOOM_BF16, LOOM_E4M3 or LOOM_E5M2 */
    int b_trans;   /* 1: B is [batch, N, K] */
} nvref_gemm_shape;

/* What a comparison found. */
typedef struct nvref_gemm_report {
    uint64_t checked;    /* elements compared */
    uint64_t bad;        /* elements past their bound (non-finite ones included) */
    uint64_t nonfinite;  /* NaN or Inf outputs */
    double worst;        /* max over elements of |out - ref| / bound (<= 1 passes; inf for NaN) */
    int64_t first_bad;   /* flat index of the first bad element, -1 when none */
    double first_out, first_ref, first_bound;
} nvref_gemm_report;

/* The reference kernels compiled for one rt_gpu (a module and a small stats buffer). */
typedef struct nvref_gemm nvref_gemm;

loom_status nvref_gemm_open(rt_gpu *g, nvref_gemm **out, char *err, size_t errlen);
void nvref_gemm_close(nvref_gemm *r);

/* Fill n elements of dtype dt (f16, bf16, f32, e4m3, e5m2) at device address p with values
 * uniform in [lo, hi), rounded to dt (FP8 by cuda_fp8.h's conversion: nearest even,
 * saturated); the same seed gives the same values. */
loom_status nvref_gemm_fill(nvref_gemm *r, uint64_t p, loom_dtype dt, int64_t n, uint64_t seed,
                            float lo, float hi, char *err, size_t errlen);

/* Fill n FP8 elements (dt e4m3 or e5m2) at p with integers uniform in [lo, hi] (within
 * [-16, 16], exact in both): products of two are integers up to 256, so a GEMM over them
 * sums exactly while its partial sums stay within the adder's exact integers, whatever
 * order and precision the GPU adds them in (the FP8 benches' exact check). */
loom_status nvref_gemm_fill_ints(nvref_gemm *r, uint64_t p, loom_dtype dt, int64_t n, uint64_t seed, int lo, int hi,
                                 char *err, size_t errlen);

/* The naive reference: ref[b,m,n] = sum_k A[b,m,k] * B[b,k,n] in f32, k in order (each
 * product of two f16, bf16 or FP8 values is exact in f32), and absref[b,m,n] = sum_k |A*B|, which
 * scales the error model's bound of the sums.  ref and absref: f32 [batch,M,N].  One thread
 * per element of C (grid: N/128 x M x batch; M and batch at most 65535). */
loom_status nvref_gemm_reference(nvref_gemm *r, const nvref_gemm_shape *s, uint64_t A, uint64_t B,
                                 uint64_t ref, uint64_t absref, char *err, size_t errlen);

/* Compare n elements of out (dtype out_dt) with ref (dtype ref_dt) on the device, by the
 * error model (docs/checks.md): element i passes when it is finite and
 *   |out - ref| <= loom_error_bound(out_dt, ref, 2 gamma_K (1 + gamma_K) absref[i])
 * gamma_K = loom_f32_sum_error(K, 1): out's f32 sum of K exact products and ref's (the
 * NVRTC reference's, or another kernel's rounded to out_dt such as cuBLAS's: the model's
 * two sides) each off by at most gamma_K sum |a b|; absref, an f32 sum of positive terms,
 * low by at most gamma_K of it; and one ulp of out_dt (out's final rounding and ref's).
 * The bound is computed in double on the device. */
loom_status nvref_gemm_compare(nvref_gemm *r, int64_t n, uint64_t out, loom_dtype out_dt, uint64_t ref,
                               loom_dtype ref_dt, uint64_t absref, int64_t K, nvref_gemm_report *rep, char *err,
                               size_t errlen);
/* The same with gamma given (the sums' relative error per unit of absref, each side):
 * another accumulation's model, or 0 where the sums are exact (one ulp of out_dt left). */
loom_status nvref_gemm_compare_gamma(nvref_gemm *r, int64_t n, uint64_t out, loom_dtype out_dt, uint64_t ref,
                                     loom_dtype ref_dt, uint64_t absref, double gamma, nvref_gemm_report *rep,
                                     char *err, size_t errlen);

/* All of it for a test: compute the reference of C = A @ B (device buffers of shape s),
 * compare out (dtype out_dt, [batch,M,N]) with it by nvref_gemm_compare, and fill rep.
 * LOOM_OK means the check ran; rep->bad == 0 means it passed. */
loom_status nvref_gemm_check(nvref_gemm *r, const nvref_gemm_shape *s, uint64_t A, uint64_t B,
                             uint64_t out, loom_dtype out_dt, nvref_gemm_report *rep, char *err,
                             size_t errlen);

/* loom_ref_gemm_f16 / loom_ref_gemm_bf16(const T *A, const T *B, float *ref, float *absref,
 *     int M, int N, int K, long long strideA, long long strideB)   (strides per batch,
 *     elements; strideA 0 when A is shared), loom_ref_fill_{f16,bf16,f32}(T *p, long long n,
 *     unsigned long long seed, float lo, float hi), loom_ref_gemm_compare(...): the
 *     sources nvref_gemm_open compiles. */
extern const char nvref_src_gemm[];

#endif /* LOOM_NVRTC_REF_H */
