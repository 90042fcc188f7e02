/*
 * nvrtc_ref.c -- NVRTC through dlopen, and naive CUDA C reference kernels (see nvrtc_ref.h).
 *
 * GPU tests compare loom's generated kernels with these references, so the references
 * are written the plainest way possible (one thread per output, no shared memory, no
 * tricks): their correctness is easy to see by reading them, and they share no code
 * with loom's code generator.  NVRTC is loaded once per process and never unloaded;
 * compilation needs no GPU, so tests compile the references on any machine with NVRTC.
 */
#define _GNU_SOURCE
#include "nvrtc_ref.h"

#include <dlfcn.h>
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
    const char *names[4] = {getenv("LOOM_NVRTC_LIB"), "libnvrtc.so.13", "libnvrtc.so.12",
                            "libnvrtc.so"};
    void *lib = NULL;
    char first_err[384] = "";
    for (int i = 0; i < 4 && !lib; i++) {
        if (!names[i] || !*names[i])
            continue;
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            snprintf(nv.path, sizeof nv.path, "%s", names[i]);
        } else if (!first_err[0]) {
            const char *e = dlerror();
            snprintf(first_err, sizeof first_err, "%s", e ? e : names[i]);
        }
        if (i == 0 && names[0] && *names[0])
            break;
    }
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
