/*
 * nvrtc_ref.c -- NVRTC through dlopen, and naive CUDA C reference kernels (see nvrtc_ref.h).
 *
 * GPU tests compare loom's generated kernels with these references, so the references
 * are written the plainest way possible (one thread per output, no shared memory, no
 * tricks): their correctness is easy to see by reading them, and they share no code
 * with loom's code generator.  NVRTC is loaded once per process and never unloaded;
 * compilation needs no GPU, so tests compile the references on any machine with NVRTC.
 *
 * The GEMM check (nvref_gemm_*) is the one place that says when a matrix product is
 * right on the device: a naive kernel computes each element of C in f32 with k in order,
 * plus the sum of the products' magnitudes, and a comparison kernel bounds each element by
 * the error model (docs/checks.md; templates/error_model.c computed the same way, in
 * double): the f32 sums of the kernel and of the reference, gamma_K sum |a b| each, and
 * one ulp of the output's dtype.  Inputs come from a device-side fill (random, never
 * zeros), so the benchmark and the GPU tests of the gemm template check big shapes
 * without moving gigabytes through the host.
 */
#define _GNU_SOURCE
#include "nvrtc_ref.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- NVRTC by hand */

typedef int nvrtcResult; /* NVRTC_SUCCESS = 0 */
typedef struct _nvrtcProgram *nvrtcProgram;

static struct {
    void *lib;
    char path[64];
    const char *(*GetErrorString)(nvrtcResult);
    nvrtcResult (*Version)(int *, int *);
    nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int,
                                 const char *const *, const char *const *);
    nvrtcResult (*DestroyProgram)(nvrtcProgram *);
    nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetPTX)(nvrtcProgram, char *);
    nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *); /* may be missing (old NVRTC) */
    nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
    nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
} nv;
static pthread_mutex_t nv_lock = PTHREAD_MUTEX_INITIALIZER;

loom_status nvref_available(char *err, size_t errlen)
{
    loom_status st = LOOM_OK;
    pthread_mutex_lock(&nv_lock);
    if (nv.lib)
        goto out;
    const char *names[3] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    char first_err[384];
    void *lib = rt_dlopen_first(names, 3, "LOOM_NVRTC_LIB", nv.path, sizeof nv.path, first_err, sizeof first_err);
    if (!lib) {
        snprintf(err, errlen, "NVRTC missing: cannot load libnvrtc (%s)", first_err);
        st = LOOM_ERR_UNSUPPORTED;
        goto out;
    }
#define SYM(field, name, required)                                                                 \
    *(void **)&nv.field = dlsym(lib, name);                                                        \
    if (!nv.field && required && st == LOOM_OK) {                                                  \
        snprintf(err, errlen, "NVRTC missing: %s has no %s", nv.path, name);                      \
        st = LOOM_ERR_UNSUPPORTED;                                                                 \
    }
    SYM(GetErrorString, "nvrtcGetErrorString", 1)
    SYM(Version, "nvrtcVersion", 1)
    SYM(CreateProgram, "nvrtcCreateProgram", 1)
    SYM(DestroyProgram, "nvrtcDestroyProgram", 1)
    SYM(CompileProgram, "nvrtcCompileProgram", 1)
    SYM(GetPTXSize, "nvrtcGetPTXSize", 1)
    SYM(GetPTX, "nvrtcGetPTX", 1)
    SYM(GetCUBINSize, "nvrtcGetCUBINSize", 0)
    SYM(GetCUBIN, "nvrtcGetCUBIN", 0)
    SYM(GetProgramLogSize, "nvrtcGetProgramLogSize", 1)
    SYM(GetProgramLog, "nvrtcGetProgramLog", 1)
#undef SYM
    if (st != LOOM_OK) {
        dlclose(lib);
        memset(&nv, 0, sizeof nv);
        goto out;
    }
    nv.lib = lib;
out:
    pthread_mutex_unlock(&nv_lock);
    return st;
}

loom_status nvref_version(int *major, int *minor, char *err, size_t errlen)
{
    loom_status st = nvref_available(err, errlen);
    if (st != LOOM_OK)
        return st;
    nvrtcResult r = nv.Version(major, minor);
    if (r != 0) {
        snprintf(err, errlen, "nvrtcVersion failed: %s", nv.GetErrorString(r));
        return LOOM_ERR_UNSUPPORTED;
    }
    return LOOM_OK;
}

loom_status nvref_compile(const char *src, const char *what, const char *arch, bool want_cubin,
                          void **out, size_t *outlen, char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    loom_status st = nvref_available(err, errlen);
    if (st != LOOM_OK)
        return st;
    if (!src || !arch || strncmp(arch, "sm_", 3) != 0) {
        snprintf(err, errlen, "nvref_compile: arch must look like sm_90a (got %s)", arch ? arch : "NULL");
        return LOOM_ERR_INVALID;
    }
    if (want_cubin && (!nv.GetCUBINSize || !nv.GetCUBIN)) {
        snprintf(err, errlen, "%s cannot emit cubins", nv.path);
        return LOOM_ERR_UNSUPPORTED;
    }
    char archopt[64], incopt[1100];
    /* sm_XX: real code (cubin); compute_XX: PTX only */
    snprintf(archopt, sizeof archopt, "-arch=%s%s", want_cubin ? "sm_" : "compute_", arch + 3);
    const char *home = getenv("CUDA_HOME");
    snprintf(incopt, sizeof incopt, "-I%s/include", home && *home ? home : "/usr/local/cuda");
    const char *opts[] = {archopt, incopt, "-default-device", "--std=c++17"};
    nvrtcProgram prog = NULL;
    nvrtcResult r = nv.CreateProgram(&prog, src, what ? what : "ref.cu", 0, NULL, NULL);
    if (r != 0) {
        snprintf(err, errlen, "nvrtcCreateProgram failed for %s: %s", what, nv.GetErrorString(r));
        return LOOM_ERR_COMPILE;
    }
    r = nv.CompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
    if (r != 0) {
        size_t ln = 0;
        char *log = NULL;
        if (nv.GetProgramLogSize(prog, &ln) == 0 && ln && (log = calloc(1, ln + 1)))
            nv.GetProgramLog(prog, log);
        snprintf(err, errlen, "NVRTC failed to compile %s for %s: %s\n%s", what, archopt,
                 nv.GetErrorString(r), log ? log : "");
        free(log);
        nv.DestroyProgram(&prog);
        return LOOM_ERR_COMPILE;
    }
    size_t n = 0;
    r = want_cubin ? nv.GetCUBINSize(prog, &n) : nv.GetPTXSize(prog, &n);
    char *buf = r == 0 ? malloc(n + 1) : NULL;
    if (buf)
        r = want_cubin ? nv.GetCUBIN(prog, buf) : nv.GetPTX(prog, buf);
    nv.DestroyProgram(&prog);
    if (r != 0 || !buf) {
        free(buf);
        snprintf(err, errlen, "NVRTC could not return the %s of %s: %s", want_cubin ? "cubin" : "PTX",
                 what, r != 0 ? nv.GetErrorString(r) : "out of memory");
        return r != 0 ? LOOM_ERR_COMPILE : LOOM_ERR_NOMEM;
    }
    buf[n] = 0;
    *out = buf;
    *outlen = n;
    return LOOM_OK;
}

loom_status nvref_load(rt_gpu *g, const char *src, const char *what, rt_gpu_module **out, char *err,
                       size_t errlen)
{
    *out = NULL;
    const rt_gpu_props *p = rt_gpu_properties(g);
    if (!p) {
        snprintf(err, errlen, "nvref_load: no GPU");
        return LOOM_ERR_NO_GPU;
    }
    void *img = NULL;
    size_t n = 0;
    loom_status st = nvref_compile(src, what, p->arch, true, &img, &n, err, errlen);
    bool is_ptx = false;
    if (st == LOOM_ERR_UNSUPPORTED || st == LOOM_ERR_COMPILE) {
        /* No cubin for this device from this NVRTC: let the driver JIT the PTX. */
        char err2[256];
        if (nvref_compile(src, what, p->arch, false, &img, &n, err2, sizeof err2) == LOOM_OK) {
            st = LOOM_OK;
            is_ptx = true;
        }
    }
    if (st != LOOM_OK)
        return st;
    st = rt_gpu_module_load(g, img, n, is_ptx, what, out, err, errlen);
    free(img);
    return st;
}

/* ---------------------------------------------------------------- reference sources */

const char nvref_src_vector_add_f32[] =
    "extern \"C\" __global__ void loom_ref_vector_add_f32(const float *a, const float *b,\n"
    "                                                    float *c, long long n)\n"
    "{\n"
    "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n)\n"
    "        c[i] = a[i] + b[i];\n"
    "}\n";

const char nvref_src_broadcast_add[] =
    "#include <cuda_fp16.h>\n"
    "extern \"C\" __global__ void loom_ref_broadcast_add_f32(const float *cand, const float *user,\n"
    "        const int *cand_to_user, float *out, long long B, long long M, long long N)\n"
    "{\n"
    "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i >= B * M * N)\n"
    "        return;\n"
    "    long long b = i / (M * N), mn = i % (M * N);\n"
    "    long long u = cand_to_user[b];\n"
    "    out[i] = cand[i] + user[u * M * N + mn];\n"
    "}\n"
    "extern \"C\" __global__ void loom_ref_broadcast_add_f16(const __half *cand, const __half *user,\n"
    "        const int *cand_to_user, __half *out, long long B, long long M, long long N)\n"
    "{\n"
    "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i >= B * M * N)\n"
    "        return;\n"
    "    long long b = i / (M * N), mn = i % (M * N);\n"
    "    long long u = cand_to_user[b];\n"
    "    float s = __half2float(cand[i]) + __half2float(user[u * M * N + mn]);\n"
    "    out[i] = __float2half_rn(s);\n"
    "}\n";

const char nvref_src_softmax_f32[] =
    "extern \"C\" __global__ void loom_ref_softmax_f32(const float *x, float *y, int rows, int cols)\n"
    "{\n"
    "    int r = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (r >= rows)\n"
    "        return;\n"
    "    const float *xr = x + (long long)r * cols;\n"
    "    float *yr = y + (long long)r * cols;\n"
    "    float m = __int_as_float(0xff800000); /* -inf */\n"
    "    for (int j = 0; j < cols; j++)\n"
    "        m = fmaxf(m, xr[j]);\n"
    "    float s = 0.0f;\n"
    "    for (int j = 0; j < cols; j++)\n"
    "        s += expf(xr[j] - m);\n"
    "    for (int j = 0; j < cols; j++)\n"
    "        yr[j] = expf(xr[j] - m) / s;\n"
    "}\n";

const char nvref_src_matmul_f16_f32[] =
    "#include <cuda_fp16.h>\n"
    "extern \"C\" __global__ void loom_ref_matmul_f16_f32(const __half *a, const __half *b, float *c,\n"
    "                                                   int M, int N, int K)\n"
    "{\n"
    "    int n = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    int m = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "    if (m >= M || n >= N)\n"
    "        return;\n"
    "    float acc = 0.0f;\n"
    "    for (int k = 0; k < K; k++) /* f16 x f16 is exact in f32: fmaf == add of the product */\n"
    "        acc = fmaf(__half2float(a[(long long)m * K + k]), __half2float(b[(long long)k * N + n]), acc);\n"
    "    c[(long long)m * N + n] = acc;\n"
    "}\n";

/* ---------------------------------------------------------------- GEMM reference */

const char nvref_src_gemm[] =
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "#include <cuda_fp8.h>\n"
    "__device__ float ld(const __half *p, long long i) { return __half2float(p[i]); }\n"
    "__device__ float ld(const __nv_bfloat16 *p, long long i) { return __bfloat162float(p[i]); }\n"
    "__device__ float ld(const float *p, long long i) { return p[i]; }\n"
    "/* FP8, decoded and encoded by CUDA's own conversions (cuda_fp8.h), not loom's */\n"
    "__device__ float ld(const __nv_fp8_e4m3 *p, long long i) { return (float)p[i]; }\n"
    "__device__ float ld(const __nv_fp8_e5m2 *p, long long i) { return (float)p[i]; }\n"
    "__device__ void st(__nv_fp8_e4m3 *p, long long i, float v) { p[i] = __nv_fp8_e4m3(v); }\n"
    "__device__ void st(__nv_fp8_e5m2 *p, long long i, float v) { p[i] = __nv_fp8_e5m2(v); }\n"
    "__device__ void st(__half *p, long long i, float v) { p[i] = __float2half_rn(v); }\n"
    "__device__ void st(__nv_bfloat16 *p, long long i, float v) { p[i] = __float2bfloat16_rn(v); }\n"
    "__device__ void st(float *p, long long i, float v) { p[i] = v; }\n"
    "\n"
    "/* one thread per element of C: x over N, y over M, z over the batch */\n"
    "/* B's element (k, n) at B[b strideB + k bk + n bn]: bk = N, bn = 1 for B [K, N]; bk = 1,\n"
    " * bn = K for B given transposed, Bt [N, K] (FP8's K-major operand) */\n"
    "template <typename T>\n"
    "__device__ void gemm(const T *A, const T *B, float *ref, float *absref, int M, int N, int K,\n"
    "                     long long strideA, long long strideB, long long bk, long long bn)\n"
    "{\n"
    "    long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    long long m = blockIdx.y, b = blockIdx.z;\n"
    "    if (n >= N)\n"
    "        return;\n"
    "    const T *a = A + b * strideA + m * K;\n"
    "    const T *bb = B + b * strideB + n * bn;\n"
    "    float acc = 0.0f, mag = 0.0f;\n"
    "    for (int k = 0; k < K; k++) {\n"
    "        float p = ld(a, k) * ld(bb, (long long)k * bk); /* exact: 11+11, 8+8 or 4+4 bits */\n"
    "        acc += p;\n"
    "        mag += fabsf(p);\n"
    "    }\n"
    "    long long c = (b * M + m) * N + n;\n"
    "    ref[c] = acc;\n"
    "    absref[c] = mag;\n"
    "}\n"
    "#define REF_GEMM(name, T)                                                                 \\\n"
    "    extern \"C\" __global__ void name(const T *A, const T *B, float *ref, float *absref, int M, \\\n"
    "        int N, int K, long long strideA, long long strideB, long long bk, long long bn)          \\\n"
    "    { gemm(A, B, ref, absref, M, N, K, strideA, strideB, bk, bn); }\n"
    "REF_GEMM(loom_ref_gemm_f16, __half)\n"
    "REF_GEMM(loom_ref_gemm_bf16, __nv_bfloat16)\n"
    "REF_GEMM(loom_ref_gemm_e4m3, __nv_fp8_e4m3)\n"
    "REF_GEMM(loom_ref_gemm_e5m2, __nv_fp8_e5m2)\n"
    "\n"
    "/* 64 random bits from (seed, index): splitmix64's finalizer */\n"
    "__device__ unsigned long long mix(unsigned long long seed, long long i)\n"
    "{\n"
    "    unsigned long long x = seed + (unsigned long long)i * 0x9E3779B97F4A7C15ull;\n"
    "    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;\n"
    "    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;\n"
    "    return x ^ (x >> 31);\n"
    "}\n"
    "/* uniform in [lo, hi) from (seed, index), 24 bits */\n"
    "template <typename T>\n"
    "__device__ void fill(T *p, long long n, unsigned long long seed, float lo, float hi)\n"
    "{\n"
    "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
    "         i += (long long)gridDim.x * blockDim.x)\n"
    "        st(p, i, lo + (hi - lo) * ((float)(mix(seed, i) >> 40) * (1.0f / 16777216.0f)));\n"
    "}\n"
    "extern \"C\" __global__ void loom_ref_fill_f16(__half *p, long long n, unsigned long long seed,\n"
    "        float lo, float hi) { fill(p, n, seed, lo, hi); }\n"
    "extern \"C\" __global__ void loom_ref_fill_bf16(__nv_bfloat16 *p, long long n,\n"
    "        unsigned long long seed, float lo, float hi) { fill(p, n, seed, lo, hi); }\n"
    "extern \"C\" __global__ void loom_ref_fill_f32(float *p, long long n, unsigned long long seed,\n"
    "        float lo, float hi) { fill(p, n, seed, lo, hi); }\n"
    "/* integers uniform in [lo, hi] (each value (hi - lo + 1) ways), from (seed, index) */\n"
    "template <typename T>\n"
    "__device__ void fill_int(T *p, long long n, unsigned long long seed, float lo, float hi)\n"
    "{\n"
    "    unsigned long long span = (unsigned long long)(hi - lo) + 1;\n"
    "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
    "         i += (long long)gridDim.x * blockDim.x)\n"
    "        st(p, i, lo + (float)((mix(seed, i) >> 11) % span));\n"
    "}\n"
    "extern \"C\" __global__ void loom_ref_fill_int_e4m3(__nv_fp8_e4m3 *p, long long n,\n"
    "        unsigned long long seed, float lo, float hi) { fill_int(p, n, seed, lo, hi); }\n"
    "extern \"C\" __global__ void loom_ref_fill_int_e5m2(__nv_fp8_e5m2 *p, long long n,\n"
    "        unsigned long long seed, float lo, float hi) { fill_int(p, n, seed, lo, hi); }\n"
    "extern \"C\" __global__ void loom_ref_fill_e4m3(__nv_fp8_e4m3 *p, long long n,\n"
    "        unsigned long long seed, float lo, float hi) { fill(p, n, seed, lo, hi); }\n"
    "extern \"C\" __global__ void loom_ref_fill_e5m2(__nv_fp8_e5m2 *p, long long n,\n"
    "        unsigned long long seed, float lo, float hi) { fill(p, n, seed, lo, hi); }\n"
    "\n"
    "/* dtype codes are loom_dtype's: 0 f16, 1 bf16, 2 f32 */\n"
    "__device__ float ldt(const void *p, int dt, long long i)\n"
    "{\n"
    "    return dt == 0 ? ld((const __half *)p, i) : dt == 1 ? ld((const __nv_bfloat16 *)p, i)\n"
    "                                                       : ld((const float *)p, i);\n"
    "}\n"
    "/* The error model (templates/error_model.c), in double: loom_ulp and loom_error_bound */\n"
    "__device__ double ulp(int dt, double x)\n"
    "{\n"
    "    int mant = dt == 0 ? 10 : dt == 1 ? 7 : 23, emin = dt == 0 ? -14 : -126;\n"
    "    x = fabs(x);\n"
    "    if (!isfinite(x))\n"
    "        return __longlong_as_double(0x7ff0000000000000ll);\n"
    "    int e = x > 0 ? ilogb(x) : emin;\n"
    "    return ldexp(1.0, (e < emin ? emin : e) - mant);\n"
    "}\n"
    "__device__ double error_bound(int dt, double ref, double err)\n"
    "{\n"
    "    if (!isfinite(ref) || !isfinite(err))\n"
    "        return __longlong_as_double(0x7ff0000000000000ll);\n"
    "    double a = fabs(ref);\n"
    "    return err + ulp(dt, a + ulp(dt, a) / 2 + err);\n"
    "}\n"
    "/* Element i passes when out is finite and |out - ref| <= error_bound(out_dt, ref, err)\n"
    " * with err = 2 gamma_K (1 + gamma_K) absref[i]: two f32 sums of K exact products (out's\n"
    " * and ref's), each off by gamma_K sum |a b|, and absref itself an f32 sum of positive\n"
    " * terms, low by at most gamma_K of it.  gamma = gamma_K (u = 2^-23) from the host.\n"
    " * stats: [0] bad, [1] non-finite, [2] first bad index, [3] worst |out - ref| / bound (f32\n"
    " * bits; the bits of non-negative floats order like the floats) */\n"
    "extern \"C\" __global__ void loom_ref_gemm_compare(const void *out, int out_dt, const void *ref,\n"
    "        int ref_dt, const float *absref, long long n, double gamma,\n"
    "        unsigned long long *stats)\n"
    "{\n"
    "    unsigned long long bad = 0, nonfinite = 0, first = ~0ull;\n"
    "    float worst = 0.0f;\n"
    "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
    "         i += (long long)gridDim.x * blockDim.x) {\n"
    "        double o = ldt(out, out_dt, i), r = ldt(ref, ref_dt, i);\n"
    "        double bound = error_bound(out_dt, r, 2 * gamma * (1 + gamma) * (double)absref[i]);\n"
    "        double e = fabs(o - r);\n"
    "        bool fin = isfinite(o) && isfinite(r);\n"
    "        float q = fin ? (float)(e / bound) : __int_as_float(0x7f800000);\n"
    "        if (!(fin && e <= bound)) {\n"
    "            bad++;\n"
    "            nonfinite += !isfinite(o);\n"
    "            if ((unsigned long long)i < first)\n"
    "                first = (unsigned long long)i;\n"
    "        }\n"
    "        worst = fmaxf(worst, q);\n"
    "    }\n"
    "    if (bad) {\n"
    "        atomicAdd(&stats[0], bad);\n"
    "        atomicAdd(&stats[1], nonfinite);\n"
    "        atomicMin(&stats[2], first);\n"
    "    }\n"
    "    atomicMax(&stats[3], (unsigned long long)__float_as_uint(worst));\n"
    "}\n";

struct nvref_gemm {
    rt_gpu *g;
    rt_gpu_module *m;
    uint64_t stats; /* 4 x u64 on the device */
};

loom_status nvref_gemm_open(rt_gpu *g, nvref_gemm **out, char *err, size_t errlen)
{
    *out = NULL;
    nvref_gemm *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    r->g = g;
    loom_status st = nvref_load(g, nvref_src_gemm, "gemm_ref.cu", &r->m, err, errlen);
    if (st == LOOM_OK)
        st = rt_gpu_alloc(g, 4 * sizeof(uint64_t), &r->stats, err, errlen);
    if (st != LOOM_OK) {
        nvref_gemm_close(r);
        return st;
    }
    *out = r;
    return LOOM_OK;
}

void nvref_gemm_close(nvref_gemm *r)
{
    if (!r)
        return;
    rt_gpu_free(r->g, r->stats);
    rt_gpu_module_unload(r->g, r->m);
    free(r);
}

/* Blocks of 256 threads for a grid-stride loop over n elements. */
static unsigned stride_blocks(int64_t n)
{
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

loom_status nvref_gemm_fill(nvref_gemm *r, uint64_t p, loom_dtype dt, int64_t n, uint64_t seed,
                            float lo, float hi, char *err, size_t errlen)
{
    const char *fn = dt == LOOM_F16 ? "loom_ref_fill_f16" : dt == LOOM_BF16 ? "loom_ref_fill_bf16"
                   : dt == LOOM_F32 ? "loom_ref_fill_f32" : dt == LOOM_E4M3 ? "loom_ref_fill_e4m3"
                   : dt == LOOM_E5M2 ? "loom_ref_fill_e5m2" : NULL;
    if (!fn) {
        snprintf(err, errlen, "nvref_gemm_fill: dtype %s (f16, bf16, f32, e4m3, e5m2 only)", loom_dtype_name(dt));
        return LOOM_ERR_INVALID;
    }
    long long nn = (long long)n;
    unsigned long long sd = (unsigned long long)seed;
    void *params[] = {&p, &nn, &sd, &lo, &hi};
    unsigned grid[3] = {stride_blocks(n), 1, 1}, block[3] = {256, 1, 1};
    return rt_gpu_module_launch(r->g, r->m, fn, grid, block, 0, params, err, errlen);
}

loom_status nvref_gemm_fill_ints(nvref_gemm *r, uint64_t p, loom_dtype dt, int64_t n, uint64_t seed, int lo, int hi,
                                 char *err, size_t errlen)
{
    const char *fn = dt == LOOM_E4M3 ? "loom_ref_fill_int_e4m3" : dt == LOOM_E5M2 ? "loom_ref_fill_int_e5m2" : NULL;
    if (!fn || lo > hi || lo < -16 || hi > 16) {
        snprintf(err, errlen, "nvref_gemm_fill_ints: dtype %s, [%d, %d] (e4m3 or e5m2; integers within [-16, 16], "
                 "which both represent exactly)", loom_dtype_name(dt), lo, hi);
        return LOOM_ERR_INVALID;
    }
    long long nn = (long long)n;
    unsigned long long sd = (unsigned long long)seed;
    float l = (float)lo, h = (float)hi;
    void *params[] = {&p, &nn, &sd, &l, &h};
    unsigned grid[3] = {stride_blocks(n), 1, 1}, block[3] = {256, 1, 1};
    return rt_gpu_module_launch(r->g, r->m, fn, grid, block, 0, params, err, errlen);
}

loom_status nvref_gemm_reference(nvref_gemm *r, const nvref_gemm_shape *s, uint64_t A, uint64_t B,
                                 uint64_t ref, uint64_t absref, char *err, size_t errlen)
{
    if (s->M < 1 || s->N < 1 || s->K < 1 || s->batch < 1 || s->M > 65535 || s->batch > 65535 ||
        s->N > INT32_MAX || s->K > INT32_MAX ||
        (s->in != LOOM_F16 && s->in != LOOM_BF16 && s->in != LOOM_E4M3 && s->in != LOOM_E5M2)) {
        snprintf(err, errlen,
                 "nvref_gemm_reference: shape M=%lld N=%lld K=%lld batch=%lld %s is outside what the "
                 "reference serves (M, batch <= 65535; f16, bf16, e4m3 or e5m2)",
                 (long long)s->M, (long long)s->N, (long long)s->K, (long long)s->batch,
                 loom_dtype_name(s->in));
        return LOOM_ERR_INVALID;
    }
    int M = (int)s->M, N = (int)s->N, K = (int)s->K;
    long long sa = s->a_shared ? 0 : (long long)s->M * s->K, sb = (long long)s->K * s->N;
    long long bk = s->b_trans ? 1 : s->N, bn = s->b_trans ? s->K : 1; /* B [K, N] or Bt [N, K] */
    void *params[] = {&A, &B, &ref, &absref, &M, &N, &K, &sa, &sb, &bk, &bn};
    unsigned grid[3] = {(unsigned)((s->N + 127) / 128), (unsigned)s->M, (unsigned)s->batch};
    unsigned block[3] = {128, 1, 1};
    const char *fn = s->in == LOOM_F16 ? "loom_ref_gemm_f16" : s->in == LOOM_BF16 ? "loom_ref_gemm_bf16"
                   : s->in == LOOM_E4M3 ? "loom_ref_gemm_e4m3" : "loom_ref_gemm_e5m2";
    return rt_gpu_module_launch(r->g, r->m, fn, grid, block, 0, params, err, errlen);
}

/* The model's bound of an element, as the comparison kernel computes it. */
static double gemm_bound(loom_dtype out, double g, double ref, double absref)
{
    return loom_error_bound(out, ref, 2 * g * (1 + g) * absref);
}

/* One element of a device array as a double. */
static loom_status read_elem(rt_gpu *g, uint64_t p, loom_dtype dt, int64_t i, double *v, char *err,
                             size_t errlen)
{
    unsigned char b[4] = {0};
    size_t sz = loom_dtype_size(dt);
    loom_status st = rt_gpu_dtoh(g, b, p + (uint64_t)i * sz, sz, err, errlen);
    if (st != LOOM_OK)
        return st;
    uint32_t bits = dt == LOOM_F32 ? (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24
                                   : (uint32_t)b[0] | (uint32_t)b[1] << 8;
    float f;
    if (dt == LOOM_BF16) {
        bits <<= 16;
    } else if (dt == LOOM_F16) {
        uint32_t sign = (bits & 0x8000u) << 16, ex = (bits >> 10) & 31, man = bits & 0x3ff;
        if (ex == 31)
            bits = sign | 0x7f800000u | (man << 13);
        else if (ex)
            bits = sign | ((ex + 112) << 23) | (man << 13);
        else { /* zero or subnormal: value man * 2^-24 */
            f = (float)man * 0x1p-24f;
            *v = sign ? -f : f;
            return LOOM_OK;
        }
    }
    memcpy(&f, &bits, 4);
    *v = f;
    return LOOM_OK;
}

loom_status nvref_gemm_compare(nvref_gemm *r, int64_t n, uint64_t out, loom_dtype out_dt, uint64_t ref,
                               loom_dtype ref_dt, uint64_t absref, int64_t K, nvref_gemm_report *rep, char *err,
                               size_t errlen)
{
    return nvref_gemm_compare_gamma(r, n, out, out_dt, ref, ref_dt, absref, loom_f32_sum_error(K, 1.0), rep, err,
                                    errlen);
}

loom_status nvref_gemm_compare_gamma(nvref_gemm *r, int64_t n, uint64_t out, loom_dtype out_dt, uint64_t ref,
                                     loom_dtype ref_dt, uint64_t absref, double gamma, nvref_gemm_report *rep,
                                     char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    rep->first_bad = -1;
    if ((unsigned)out_dt > LOOM_F32 || (unsigned)ref_dt > LOOM_F32) {
        snprintf(err, errlen, "nvref_gemm_compare: f16, bf16 and f32 only");
        return LOOM_ERR_INVALID;
    }
    uint64_t init[4] = {0, 0, ~0ull, 0};
    loom_status st = rt_gpu_htod(r->g, r->stats, init, sizeof init, err, errlen);
    if (st != LOOM_OK)
        return st;
    int odt = (int)out_dt, rdt = (int)ref_dt;
    long long nn = (long long)n;
    void *params[] = {&out, &odt, &ref, &rdt, &absref, &nn, &gamma, &r->stats};
    unsigned grid[3] = {stride_blocks(n), 1, 1}, block[3] = {256, 1, 1};
    st = rt_gpu_module_launch(r->g, r->m, "loom_ref_gemm_compare", grid, block, 0, params, err, errlen);
    uint64_t res[4];
    if (st == LOOM_OK)
        st = rt_gpu_dtoh(r->g, res, r->stats, sizeof res, err, errlen);
    if (st != LOOM_OK)
        return st;
    rep->checked = (uint64_t)n;
    rep->bad = res[0];
    rep->nonfinite = res[1];
    uint32_t wb = (uint32_t)res[3];
    float w;
    memcpy(&w, &wb, 4);
    rep->worst = w;
    if (rep->bad) {
        rep->first_bad = (int64_t)res[2];
        double a = 0;
        if ((st = read_elem(r->g, out, out_dt, rep->first_bad, &rep->first_out, err, errlen)) != LOOM_OK ||
            (st = read_elem(r->g, ref, ref_dt, rep->first_bad, &rep->first_ref, err, errlen)) != LOOM_OK ||
            (st = read_elem(r->g, absref, LOOM_F32, rep->first_bad, &a, err, errlen)) != LOOM_OK)
            return st;
        rep->first_bound = gemm_bound(out_dt, gamma, rep->first_ref, a);
    }
    return LOOM_OK;
}

loom_status nvref_gemm_check(nvref_gemm *r, const nvref_gemm_shape *s, uint64_t A, uint64_t B,
                             uint64_t out, loom_dtype out_dt, nvref_gemm_report *rep, char *err,
                             size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    rep->first_bad = -1;
    int64_t n = s->batch * s->M * s->N;
    uint64_t ref = 0, absref = 0;
    loom_status st = rt_gpu_alloc(r->g, (size_t)n * 4, &ref, err, errlen);
    if (st == LOOM_OK)
        st = rt_gpu_alloc(r->g, (size_t)n * 4, &absref, err, errlen);
    if (st == LOOM_OK)
        st = nvref_gemm_reference(r, s, A, B, ref, absref, err, errlen);
    if (st == LOOM_OK)
        st = nvref_gemm_compare(r, n, out, out_dt, ref, LOOM_F32, absref, s->K, rep, err, errlen);
    rt_gpu_free(r->g, ref);
    rt_gpu_free(r->g, absref);
    return st;
}
