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

#endif /* LOOM_NVRTC_REF_H */
