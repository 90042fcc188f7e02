/*
 * aot_rt.c -- the run-time part of every file `loomc aot` writes (aot/aot.c copies this
 * text in, after the generated header's #include and before the generated tables).
 *
 * It is plain C11 plus dlopen and pthreads, and declares the few CUDA driver types and
 * values it uses itself (their ABI values, as cuda.h has them), so a program that links
 * the generated file needs neither cuda.h, libcuda at link time, nor loom.  It does:
 *   - the driver: dlopen'ed on first use (libcuda.so.1, then libcuda.so), its entry points
 *     looked up once, under a mutex;
 *   - the context: the one current on the calling thread, else device 0's primary context
 *     (which is also what loom's own runtime uses, so the two can share buffers);
 *   - kernels: each kernel's module is loaded the first time it launches (the cubin of the
 *     GPU's architecture where there is one, else the PTX, which the driver compiles),
 *     once, under the mutex; aot_unload unloads them all;
 *   - launches: arguments checked (tensor pointers not NULL and 16-byte aligned, run-time
 *     dims between 1 and the kernel's maximum), TMA descriptors encoded from the pointers
 *     and the launch's run-time dims (and kept per pointer and dims, so repeated launches
 *     on the same buffers at the same dims encode nothing), then cuLaunchKernelEx on the
 *     caller's stream;
 *   - dispatch: a table's row for a request's shape, either the row of the exact shape
 *     (kernels whose shapes are all compile-time) or, for kernels with run-time dims, the
 *     row of the smallest bucket whose maxima hold the request's values; and the grid, as
 *     a rule over the request's shape (loom_grid_rule's arithmetic);
 *   - errors: every call returns a status and leaves a message naming the function, the
 *     argument or the CUDA call in a per-thread buffer (aot_error); nothing exits.
 *
 * Identifiers here are static and start with aot_; the generated file adds the public
 * functions, whose names start with the prefix given to loomc.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the driver's types */

typedef int aot_CUresult;
typedef int aot_CUdevice;
typedef struct CUctx_st *aot_CUcontext;
typedef struct CUmod_st *aot_CUmodule;
typedef struct CUfunc_st *aot_CUfunction;

/* cuLaunchKernelEx's configuration (CUlaunchConfig); no attributes are passed: a kernel's
 * cluster shape is part of its code (.reqnctapercluster). */
typedef struct aot_launch_config {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    void *attrs;
    unsigned numAttrs;
} aot_launch_config;

enum {
    AOT_CUDA_SUCCESS = 0,
    AOT_CUDA_ERROR_NOT_READY = 600,
    AOT_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    AOT_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    AOT_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    AOT_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

/* The statuses every function returns; the generated header names them with its prefix
 * (P_OK, P_ERR_INVALID, ...), with these values. */
enum { AOT_OK = 0, AOT_ERR_INVALID = 1, AOT_ERR_NO_GPU = 2, AOT_ERR_CUDA = 3, AOT_ERR_NOMEM = 4 };

/* A TMA descriptor: 128 bytes, 64-byte aligned, passed by value. */
typedef struct aot_tmap {
    _Alignas(64) unsigned char bytes[128];
} aot_tmap;

static struct aot_driver {
    void *lib;
    aot_CUresult (*cuInit)(unsigned);
    aot_CUresult (*cuGetErrorString)(aot_CUresult, const char **);
    aot_CUresult (*cuDeviceGet)(aot_CUdevice *, int);
    aot_CUresult (*cuDeviceGetAttribute)(int *, int, aot_CUdevice);
    aot_CUresult (*cuCtxGetCurrent)(aot_CUcontext *);
    aot_CUresult (*cuCtxSetCurrent)(aot_CUcontext);
    aot_CUresult (*cuCtxGetDevice)(aot_CUdevice *);
    aot_CUresult (*cuDevicePrimaryCtxRetain)(aot_CUcontext *, aot_CUdevice);
    aot_CUresult (*cuModuleLoadData)(aot_CUmodule *, const void *);
    aot_CUresult (*cuModuleUnload)(aot_CUmodule);
    aot_CUresult (*cuModuleGetFunction)(aot_CUfunction *, aot_CUmodule, const char *);
    aot_CUresult (*cuFuncSetAttribute)(aot_CUfunction, int, int);
    aot_CUresult (*cuLaunchKernelEx)(const aot_launch_config *, aot_CUfunction, void **, void **);
    aot_CUresult (*cuTensorMapEncodeTiled)(void *, int, unsigned, void *, const uint64_t *, const uint64_t *,
                                           const unsigned *, const unsigned *, int, int, int, int);
    aot_CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    aot_CUresult (*cuMemFree)(CUdeviceptr);
    aot_CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
    aot_CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    aot_CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    aot_CUresult (*cuStreamSynchronize)(CUstream);
} aot_cu;

static pthread_mutex_t aot_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int aot_driver_state; /* 0: not tried, 1: loaded, -1: failed */
static aot_CUcontext aot_ctx;       /* the context the modules were loaded in */
static int aot_cc;                  /* its device's compute capability, major * 10 + minor */
static int aot_sms;                 /* and its SMs (a persistent kernel's CTAs) */

static _Thread_local char aot_err[1024];

/* Not every generated file calls every helper below (a file without the IKBO operations
 * allocates no memory), so they are marked to keep -Wunused-function quiet. */
#if defined(__GNUC__)
#define AOT_UNUSED __attribute__((unused))
#else
#define AOT_UNUSED
#endif

/* Set the calling thread's message and return st. */
static int aot_fail(int st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int aot_fail(int st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(aot_err, sizeof aot_err, fmt, ap);
    va_end(ap);
    return st;
}

AOT_UNUSED static const char *aot_error(void) { return aot_err; }

/* "what: CUDA error 700 (an illegal memory access was encountered)" into the message. */
static int aot_cuda_fail(aot_CUresult r, const char *what)
{
    const char *s = NULL;
    if (!aot_cu.cuGetErrorString || aot_cu.cuGetErrorString(r, &s) != AOT_CUDA_SUCCESS || !s)
        s = "no description";
    return aot_fail(AOT_ERR_CUDA, "%s: CUDA error %d (%s)", what, r, s);
}

/* Open the driver and look its entry points up (once). */
static int aot_driver_locked(void)
{
    static const char *const libs[] = {"libcuda.so.1", "libcuda.so"};
    char why[512] = "";
    for (size_t i = 0; !aot_cu.lib && i < sizeof libs / sizeof libs[0]; i++)
        if (!(aot_cu.lib = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL)) && !why[0]) { /* the first failure says most */
            const char *e = dlerror();
            snprintf(why, sizeof why, "%s", e ? e : "(no message)");
        }
    if (!aot_cu.lib)
        return aot_fail(AOT_ERR_NO_GPU, "no CUDA driver: dlopen(libcuda.so.1) failed: %s", why);
    static const struct {
        const char *name;
        size_t offset;
    } syms[] = {
#define AOT_SYM(field, name) {name, offsetof(struct aot_driver, field)}
        AOT_SYM(cuInit, "cuInit"),
        AOT_SYM(cuGetErrorString, "cuGetErrorString"),
        AOT_SYM(cuDeviceGet, "cuDeviceGet"),
        AOT_SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute"),
        AOT_SYM(cuCtxGetCurrent, "cuCtxGetCurrent"),
        AOT_SYM(cuCtxSetCurrent, "cuCtxSetCurrent"),
        AOT_SYM(cuCtxGetDevice, "cuCtxGetDevice"),
        AOT_SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
        AOT_SYM(cuModuleLoadData, "cuModuleLoadData"),
        AOT_SYM(cuModuleUnload, "cuModuleUnload"),
        AOT_SYM(cuModuleGetFunction, "cuModuleGetFunction"),
        AOT_SYM(cuFuncSetAttribute, "cuFuncSetAttribute"),
        AOT_SYM(cuLaunchKernelEx, "cuLaunchKernelEx"),
        AOT_SYM(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled"),
        AOT_SYM(cuMemAlloc, "cuMemAlloc_v2"),
        AOT_SYM(cuMemFree, "cuMemFree_v2"),
        AOT_SYM(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
        AOT_SYM(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
        AOT_SYM(cuMemsetD8Async, "cuMemsetD8Async"),
        AOT_SYM(cuStreamSynchronize, "cuStreamSynchronize"),
#undef AOT_SYM
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *f = dlsym(aot_cu.lib, syms[i].name);
        if (!f)
            return aot_fail(AOT_ERR_NO_GPU, "the CUDA driver has no %s (CUDA 12 or newer is needed)", syms[i].name);
        memcpy((char *)&aot_cu + syms[i].offset, &f, sizeof f);
    }
    aot_CUresult r = aot_cu.cuInit(0);
    if (r != AOT_CUDA_SUCCESS)
        return aot_cuda_fail(r, "no usable GPU: cuInit");
    return AOT_OK;
}

/* Make sure the driver is loaded and a context is current on this thread: the caller's,
 * else device 0's primary context.  The first context seen is the one kernels load in. */
static int aot_enter(void)
{
    if (atomic_load(&aot_driver_state) == 0) {
        pthread_mutex_lock(&aot_mu);
        if (atomic_load(&aot_driver_state) == 0)
            atomic_store(&aot_driver_state, aot_driver_locked() == AOT_OK ? 1 : -1);
        pthread_mutex_unlock(&aot_mu);
        if (atomic_load(&aot_driver_state) < 0)
            return AOT_ERR_NO_GPU; /* this thread's message says why */
    }
    if (atomic_load(&aot_driver_state) < 0)
        return aot_fail(AOT_ERR_NO_GPU, "no usable CUDA driver (an earlier call found none)");
    aot_CUcontext cur = NULL;
    aot_CUresult r = aot_cu.cuCtxGetCurrent(&cur);
    if (r != AOT_CUDA_SUCCESS)
        return aot_cuda_fail(r, "cuCtxGetCurrent");
    if (cur)
        return AOT_OK;
    aot_CUdevice dev;
    if ((r = aot_cu.cuDeviceGet(&dev, 0)) != AOT_CUDA_SUCCESS)
        return aot_cuda_fail(r, "no usable GPU: cuDeviceGet(0)");
    if ((r = aot_cu.cuDevicePrimaryCtxRetain(&cur, dev)) != AOT_CUDA_SUCCESS)
        return aot_cuda_fail(r, "cuDevicePrimaryCtxRetain(device 0)");
    if ((r = aot_cu.cuCtxSetCurrent(cur)) != AOT_CUDA_SUCCESS)
        return aot_cuda_fail(r, "cuCtxSetCurrent");
    return AOT_OK;
}

/* ---------------------------------------------------------------- kernels */

/* One compiled form of a kernel: a cubin for one architecture, and the PTX it came from. */
typedef struct aot_image {
    int sm;                     /* 90 for sm_90a: the compute capability the cubin runs on */
    const unsigned char *cubin; /* ELF, loaded as is */
    size_t cubin_bytes;
    const unsigned char *ptx;   /* NUL-terminated PTX, JIT-compiled by the driver where no cubin fits */
} aot_image;

/* One TMA descriptor a kernel takes after its own parameters: every argument of
 * cuTensorMapEncodeTiled but the base address, which is kernel argument `arg`'s pointer,
 * and the dims that are run-time, which are the values of kernel arguments dim_arg[]. */
typedef struct aot_tma {
    int arg;
    int dtype;     /* CUtensorMapDataType */
    unsigned rank;
    uint64_t dims[5];    /* elements, innermost first (a run-time dim: its maximum) */
    uint64_t strides[4]; /* bytes, of dims 1 .. rank-1 */
    unsigned box[5], elem_strides[5];
    int interleave, swizzle, l2_promotion, oob_fill;
    int dim_arg[5];      /* per dim: the int32_t kernel argument that gives it at a launch, or -1 */
} aot_tma;

enum { AOT_ARG_PTR, AOT_ARG_I32, AOT_ARG_I64, AOT_ARG_F32 };
#define AOT_MAX_TMA 16
#define AOT_MAX_ARGS 32
#define AOT_MAX_KEYS 16 /* loom's LOOM_MAX_PARAMS: the most shape keys a table has */

/* A kernel: its images, launch shape and arguments. */
typedef struct aot_kernel {
    const char *name;          /* the PTX entry */
    int nimages;
    const aot_image *images;
    unsigned threads, smem;    /* threads a CTA, dynamic shared memory in bytes */
    int nargs;
    const char *const *arg_names;
    const unsigned char *arg_kinds; /* AOT_ARG_* */
    int ntma;
    const aot_tma *tma;
    /* per argument {maximum, multiple} of a run-time dim (an int32_t argument a launch
     * must give between 1 and the maximum, a multiple of the multiple), {0, 0} for the
     * others; NULL: the kernel has no run-time dims */
    const int64_t (*dims)[2];
    /* 1: a kernel of loom's automatic warp specialization (loom_kernel_set_autows): the
     * launch's grid follows the arguments as three int32_t, and one CTA an SM takes its
     * programs in turn */
    int persistent;
} aot_kernel;

/* What loading and launching a kernel keeps. */
typedef struct aot_kstate {
    _Atomic(aot_CUfunction) fn;
    aot_CUmodule mod;
    const char *loaded; /* "cubin sm_90" or "PTX" */
    uint64_t tma_base[AOT_MAX_TMA];
    uint64_t tma_dims[AOT_MAX_TMA][5]; /* the dims the descriptor was encoded at */
    aot_tmap tma_desc[AOT_MAX_TMA];
    int tma_valid[AOT_MAX_TMA];
} aot_kstate;

/* The cubin for the current device's compute capability, else the PTX (the newest whose
 * architecture is not above the device's); loaded under aot_mu. */
static int aot_load_locked(const aot_kernel *k, aot_kstate *s)
{
    aot_CUcontext cur = NULL;
    aot_cu.cuCtxGetCurrent(&cur);
    if (!aot_ctx) {
        aot_CUdevice dev;
        int major = 0, minor = 0;
        aot_CUresult r = aot_cu.cuCtxGetDevice(&dev);
        if (r == AOT_CUDA_SUCCESS)
            r = aot_cu.cuDeviceGetAttribute(&major, AOT_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
        if (r == AOT_CUDA_SUCCESS)
            r = aot_cu.cuDeviceGetAttribute(&minor, AOT_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
        if (r == AOT_CUDA_SUCCESS)
            r = aot_cu.cuDeviceGetAttribute(&aot_sms, AOT_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
        if (r != AOT_CUDA_SUCCESS)
            return aot_cuda_fail(r, "the GPU's compute capability and SM count");
        aot_ctx = cur;
        aot_cc = major * 10 + minor;
    } else if (cur != aot_ctx) {
        return aot_fail(AOT_ERR_INVALID,
                        "kernel '%s': the current CUDA context is not the one this file's kernels were loaded in "
                        "(call the unload function before switching contexts)",
                        k->name);
    }
    aot_CUmodule mod = NULL;
    aot_CUresult r = -1;
    const char *how = NULL;
    for (int i = 0; i < k->nimages && !mod; i++)
        if (k->images[i].sm == aot_cc && k->images[i].cubin) {
            r = aot_cu.cuModuleLoadData(&mod, k->images[i].cubin);
            how = "cubin";
        }
    const aot_image *ptx = NULL;
    for (int i = 0; i < k->nimages; i++)
        if (k->images[i].ptx && k->images[i].sm <= aot_cc && (!ptx || k->images[i].sm > ptx->sm))
            ptx = &k->images[i];
    if (!mod && ptx) {
        r = aot_cu.cuModuleLoadData(&mod, ptx->ptx);
        how = "PTX";
    }
    if (!mod) {
        if (!how)
            return aot_fail(AOT_ERR_INVALID,
                            "kernel '%s' has no cubin or PTX for this GPU (compute capability %d.%d); regenerate "
                            "it with loomc aot --arch for this GPU",
                            k->name, aot_cc / 10, aot_cc % 10);
        char what[200];
        snprintf(what, sizeof what, "loading kernel '%s' (%s, compute capability %d.%d)", k->name, how, aot_cc / 10,
                 aot_cc % 10);
        return aot_cuda_fail(r, what);
    }
    aot_CUfunction fn = NULL;
    if ((r = aot_cu.cuModuleGetFunction(&fn, mod, k->name)) != AOT_CUDA_SUCCESS) {
        aot_cu.cuModuleUnload(mod);
        return aot_cuda_fail(r, "cuModuleGetFunction");
    }
    if (k->smem > 48 * 1024 &&
        (r = aot_cu.cuFuncSetAttribute(fn, AOT_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)k->smem)) !=
            AOT_CUDA_SUCCESS) {
        aot_cu.cuModuleUnload(mod);
        char what[200];
        snprintf(what, sizeof what, "kernel '%s' needs %u bytes of shared memory: cuFuncSetAttribute", k->name,
                 k->smem);
        return aot_cuda_fail(r, what);
    }
    s->mod = mod;
    s->loaded = how;
    memset(s->tma_valid, 0, sizeof s->tma_valid);
    atomic_store(&s->fn, fn);
    return AOT_OK;
}

/* The kernel's function, loading its module the first time. */
static int aot_function(const aot_kernel *k, aot_kstate *s, aot_CUfunction *fn)
{
    int st = aot_enter();
    if (st != AOT_OK)
        return st;
    if ((*fn = atomic_load(&s->fn)))
        return AOT_OK;
    pthread_mutex_lock(&aot_mu);
    st = atomic_load(&s->fn) ? AOT_OK : aot_load_locked(k, s);
    pthread_mutex_unlock(&aot_mu);
    *fn = atomic_load(&s->fn);
    return st;
}

/* Unload every kernel of states[0..n) (none may be running). */
AOT_UNUSED static void aot_unload(aot_kstate *states, int n)
{
    pthread_mutex_lock(&aot_mu);
    for (int i = 0; i < n; i++) {
        if (states[i].mod && aot_cu.cuModuleUnload)
            aot_cu.cuModuleUnload(states[i].mod);
        states[i].mod = NULL;
        atomic_store(&states[i].fn, (aot_CUfunction)NULL);
    }
    aot_ctx = NULL;
    pthread_mutex_unlock(&aot_mu);
}

/* Descriptor t of kernel k for the tensor at base with the launch's dims (innermost
 * first; kept per base and dims; under aot_mu). */
static int aot_tma_desc(const aot_kernel *k, aot_kstate *s, int t, uint64_t base, const uint64_t *dims, aot_tmap *out)
{
    const aot_tma *m = &k->tma[t];
    if (base % 16)
        return aot_fail(AOT_ERR_INVALID,
                        "kernel '%s': argument '%s' is at 0x%llx, not 16-byte aligned (TMA needs 16-byte aligned "
                        "tensors)",
                        k->name, k->arg_names[m->arg], (unsigned long long)base);
    pthread_mutex_lock(&aot_mu);
    int st = AOT_OK;
    if (!s->tma_valid[t] || s->tma_base[t] != base || memcmp(s->tma_dims[t], dims, m->rank * sizeof *dims)) {
        aot_CUresult r = aot_cu.cuTensorMapEncodeTiled(&s->tma_desc[t], m->dtype, m->rank, (void *)(uintptr_t)base,
                                                        dims, m->strides, m->box, m->elem_strides, m->interleave,
                                                        m->swizzle, m->l2_promotion, m->oob_fill);
        if (r != AOT_CUDA_SUCCESS) {
            char what[200];
            snprintf(what, sizeof what, "kernel '%s': the TMA descriptor of argument '%s' (cuTensorMapEncodeTiled)",
                     k->name, k->arg_names[m->arg]);
            st = aot_cuda_fail(r, what);
            s->tma_valid[t] = 0;
        } else {
            s->tma_base[t] = base;
            memcpy(s->tma_dims[t], dims, m->rank * sizeof *dims);
            s->tma_valid[t] = 1;
        }
    }
    if (st == AOT_OK)
        *out = s->tma_desc[t];
    pthread_mutex_unlock(&aot_mu);
    return st;
}

/* Launch kernel k on grid with its arguments (args[i] points at argument i's value: a
 * CUdeviceptr, int32_t, int64_t or float, as arg_kinds says) on stream; `fn` names the
 * public function in messages. */
static int aot_launch(const char *fn_name, const aot_kernel *k, aot_kstate *s, const unsigned grid[3], void **args,
                      CUstream stream)
{
    for (int i = 0; i < k->nargs; i++)
        if (k->arg_kinds[i] == AOT_ARG_PTR) {
            CUdeviceptr p = *(const CUdeviceptr *)args[i];
            if (!p)
                return aot_fail(AOT_ERR_INVALID, "%s: argument '%s' is NULL", fn_name, k->arg_names[i]);
            if (p % 16)
                return aot_fail(AOT_ERR_INVALID,
                                "%s: argument '%s' is at 0x%llx, not 16-byte aligned (the kernel's vector accesses "
                                "need it)",
                                fn_name, k->arg_names[i], (unsigned long long)p);
        } else if (k->dims && k->dims[i][0] > 0) {
            int32_t v = *(const int32_t *)args[i];
            if (v < 1 || v > k->dims[i][0] || v % k->dims[i][1])
                return aot_fail(AOT_ERR_INVALID,
                                "%s: run-time dim '%s' = %d is outside what kernel '%s' serves (1 to %lld, a multiple "
                                "of %lld)",
                                fn_name, k->arg_names[i], (int)v, k->name, (long long)k->dims[i][0],
                                (long long)k->dims[i][1]);
        }
    aot_CUfunction fn;
    int st = aot_function(k, s, &fn);
    if (st != AOT_OK)
        return st;
    void *params[AOT_MAX_ARGS + 3 + AOT_MAX_TMA];
    aot_tmap descs[AOT_MAX_TMA];
    for (int i = 0; i < k->nargs; i++)
        params[i] = args[i];
    int32_t vgrid[3] = {(int32_t)grid[0], (int32_t)grid[1], (int32_t)grid[2]};
    unsigned g[3] = {grid[0], grid[1], grid[2]};
    int extra = 0;
    if (k->persistent) { /* the grid as given after the arguments; at most one CTA an SM */
        uint64_t n = (uint64_t)grid[0] * grid[1] * grid[2];
        for (int i = 0; i < 3; i++)
            params[k->nargs + i] = &vgrid[i];
        extra = 3;
        g[0] = (unsigned)(n < (uint64_t)(aot_sms > 0 ? aot_sms : 1) ? n : (uint64_t)(aot_sms > 0 ? aot_sms : 1));
        g[1] = g[2] = 1;
    }
    for (int t = 0; t < k->ntma; t++) {
        const aot_tma *m = &k->tma[t];
        uint64_t dims[5] = {0};
        for (unsigned d = 0; d < m->rank && d < 5; d++) /* a run-time dim at the launch's value (checked above) */
            dims[d] = m->dim_arg[d] >= 0 ? (uint64_t)*(const int32_t *)args[m->dim_arg[d]] : m->dims[d];
        if ((st = aot_tma_desc(k, s, t, *(const CUdeviceptr *)args[m->arg], dims, &descs[t])) != AOT_OK)
            return st;
        params[k->nargs + extra + t] = &descs[t];
    }
    aot_launch_config cfg = {g[0], g[1], g[2], k->threads, 1, 1, k->smem, stream, NULL, 0};
    aot_CUresult r = aot_cu.cuLaunchKernelEx(&cfg, fn, params, NULL);
    if (r != AOT_CUDA_SUCCESS) {
        char what[300];
        snprintf(what, sizeof what, "%s: cuLaunchKernelEx of kernel '%s' (grid %ux%ux%u, %u threads, %u bytes of "
                 "shared memory)", fn_name, k->name, grid[0], grid[1], grid[2], k->threads, k->smem);
        return aot_cuda_fail(r, what);
    }
    return AOT_OK;
}

/* How the kernel was loaded ("cubin", "PTX"), or NULL before its first launch. */
AOT_UNUSED static const char *aot_loaded_as(const aot_kstate *s) { return atomic_load(&s->fn) ? s->loaded : NULL; }

/* ---------------------------------------------------------------- shapes */

/* The row of a dispatch table rows[nrows][nkeys] that is `shape` (nkeys values), or -1.
 * Kernels are built for their shapes (loom's shapes are compile-time constants), so only
 * the same shape can take a row's kernel. */
AOT_UNUSED static int aot_find_row(const int64_t *rows, int nrows, const int64_t *shape, int nkeys)
{
    for (int r = 0; r < nrows; r++)
        if (!memcmp(rows + (size_t)r * (size_t)nkeys, shape, (size_t)nkeys * sizeof *shape))
            return r;
    return -1;
}

/* "M=512,N=512", for messages; with dyn (may be NULL), the keys it marks as "B<=64" (a
 * row's maximum) and, with skip, those keys left out. */
AOT_UNUSED static void aot_shape_text_dyn(char *buf, size_t n, const char *const *names, const int64_t *v,
                                          int nkeys, const unsigned char *dyn, int skip)
{
    size_t w = 0;
    buf[0] = 0;
    for (int i = 0; i < nkeys && w < n; i++) {
        if (skip && dyn && dyn[i])
            continue;
        int k = snprintf(buf + w, n - w, "%s%s%s%lld", w ? "," : "", names[i], dyn && dyn[i] ? "<=" : "=",
                         (long long)v[i]);
        if (k < 0)
            break;
        w += (size_t)k;
    }
}

AOT_UNUSED static void aot_shape_text(char *buf, size_t n, const char *const *names, const int64_t *v, int nkeys)
{
    aot_shape_text_dyn(buf, n, names, v, nkeys, NULL, 0);
}

/* A request's B and U against an operation's maxima: AOT_OK, or the refusal naming them. */
AOT_UNUSED static int aot_check_request(const char *fn, int64_t B, int64_t U, int64_t Bmax, int64_t Umax)
{
    if (B < 1 || B > Bmax)
        return aot_fail(AOT_ERR_INVALID, "%s: B is %lld; this file serves 1 to %lld", fn, (long long)B, (long long)Bmax);
    if (U < 1 || U > Umax)
        return aot_fail(AOT_ERR_INVALID, "%s: U is %lld; this file serves 1 to %lld", fn, (long long)U, (long long)Umax);
    return AOT_OK;
}

/* The message for a shape not in a table: the shape asked for and those there are (with
 * dyn, may be NULL: the run-time keys it marks as each row's maximum). */
AOT_UNUSED static int aot_no_row_dyn(const char *fn_name, const char *tname, const int64_t *rows, int nrows,
                                     const int64_t *shape, const char *const *names, int nkeys,
                                     const unsigned char *dyn)
{
    char want[256], have[512] = "";
    aot_shape_text(want, sizeof want, names, shape, nkeys);
    size_t w = 0;
    for (int r = 0; r < nrows && w + 4 < sizeof have; r++) {
        char one[256];
        aot_shape_text_dyn(one, sizeof one, names, rows + (size_t)r * (size_t)nkeys, nkeys, dyn, 0);
        int k = snprintf(have + w, sizeof have - w, "%s{%s}", r ? ", " : "", one);
        if (k < 0)
            break;
        w += (size_t)k;
    }
    return aot_fail(AOT_ERR_INVALID,
                    "%s: no kernel was generated for shape %s (this file has %s); add it with loomc aot %s --shape "
                    "... and regenerate",
                    fn_name, want, have, tname);
}

AOT_UNUSED static int aot_no_row(const char *fn_name, const char *tname, const int64_t *rows, int nrows,
                                 const int64_t *shape, const char *const *names, int nkeys)
{
    return aot_no_row_dyn(fn_name, tname, rows, nrows, shape, names, nkeys, NULL);
}

/* The bucket of a run-time dim's value: the power of two at or above it (loom_dim_bucket). */
AOT_UNUSED static int64_t aot_bucket(int64_t v)
{
    int64_t b = 1;
    while (b < v && b < ((int64_t)1 << 62))
        b *= 2;
    return b;
}

AOT_UNUSED static int aot_log2(int64_t pow2)
{
    int l = 0;
    while (pow2 > 1)
        pow2 /= 2, l++;
    return l;
}

/* The row of a dispatch table whose kernels take run-time dims, for `shape` (nkeys values;
 * dyn[i] marks the run-time keys).  rows[nrows][nkeys] holds each row's static keys and,
 * for its run-time keys, the most a launch may ask (the maxima its kernel was built
 * with); mults[nrows][nkeys] the multiples the kernel needs of them (1: any).  A row
 * serves a shape whose static keys are its own and whose run-time values are 1 to its
 * maxima (so at most its buckets); of those the row of the smallest buckets (the least
 * sum of their log2; ties: the first) is taken.  -1 with the message set when none does:
 * a value below 1, a shape none of whose rows has the static keys, a value above every
 * maximum of those rows (naming the key, the value and the maximum), or values that no
 * single row holds at once. */
AOT_UNUSED static int aot_find_dyn_row(const char *fn_name, const char *tname, const int64_t *rows,
                                       const int64_t *mults, int nrows, const int64_t *shape, const unsigned char *dyn,
                                       const char *const *names, int nkeys)
{
    for (int i = 0; i < nkeys; i++)
        if (dyn[i] && shape[i] < 1)
            return aot_fail(AOT_ERR_INVALID, "%s: %s=%lld: a run-time dim is at least 1", fn_name, names[i],
                            (long long)shape[i]),
                   -1;
    int best = -1, best_w = 0, matched = 0, mult_key = -1;
    int64_t top[AOT_MAX_KEYS] = {0}; /* per key: the largest maximum of the rows with the static keys */
    for (int r = 0; r < nrows; r++) {
        const int64_t *row = rows + (size_t)r * (size_t)nkeys, *mult = mults + (size_t)r * (size_t)nkeys;
        int same = 1, over = 0, odd = -1, w = 0;
        for (int i = 0; i < nkeys && same; i++)
            same = dyn[i] || row[i] == shape[i];
        if (!same)
            continue;
        matched = 1;
        for (int i = 0; i < nkeys && i < AOT_MAX_KEYS; i++) {
            if (!dyn[i])
                continue;
            if (row[i] > top[i])
                top[i] = row[i];
            over |= shape[i] > row[i];
            if (shape[i] % mult[i] && odd < 0)
                odd = i;
            w += aot_log2(aot_bucket(row[i]));
        }
        if (!over && odd >= 0) /* the row holds the values but its kernel needs other multiples */
            mult_key = odd;
        if (!over && odd < 0 && (best < 0 || w < best_w))
            best = r, best_w = w;
    }
    if (best >= 0)
        return best;
    char want[256];
    aot_shape_text(want, sizeof want, names, shape, nkeys);
    if (!matched) {
        aot_no_row_dyn(fn_name, tname, rows, nrows, shape, names, nkeys, dyn);
        return -1;
    }
    char statics[256];
    aot_shape_text_dyn(statics, sizeof statics, names, shape, nkeys, dyn, 1);
    for (int i = 0; i < nkeys && i < AOT_MAX_KEYS; i++)
        if (dyn[i] && shape[i] > top[i])
            return aot_fail(AOT_ERR_INVALID,
                            "%s: %s=%lld is above this file's maximum %s=%lld (at %s); regenerate with loomc aot %s "
                            "--shape ...,%s=%lld or more",
                            fn_name, names[i], (long long)shape[i], names[i], (long long)top[i], statics, tname,
                            names[i], (long long)shape[i]),
                   -1;
    if (mult_key >= 0)
        return aot_fail(AOT_ERR_INVALID, "%s: %s=%lld is not a multiple of what the kernel for it needs (at %s)",
                        fn_name, names[mult_key], (long long)shape[mult_key], statics),
               -1;
    char have[512] = "";
    size_t w = 0;
    for (int r = 0; r < nrows && w + 4 < sizeof have; r++) {
        char one[256];
        const int64_t *row = rows + (size_t)r * (size_t)nkeys;
        int same = 1;
        for (int i = 0; i < nkeys && same; i++)
            same = dyn[i] || row[i] == shape[i];
        if (!same)
            continue;
        aot_shape_text_dyn(one, sizeof one, names, row, nkeys, dyn, 0);
        int k = snprintf(have + w, sizeof have - w, "%s{%s}", w ? ", " : "", one);
        if (k < 0)
            break;
        w += (size_t)k;
    }
    return aot_fail(AOT_ERR_INVALID,
                    "%s: no kernel of this file serves %s at once (its kernels at %s serve %s); regenerate with "
                    "loomc aot %s --shape ... for it",
                    fn_name, want, statics, have, tname),
           -1;
}

/* A grid as a rule over a shape (loom_grid_rule's, over the nkeys keys of the table):
 *   grid[d] = mult[d] * cdiv(c[d] + sum_i per[d][i] * shape[i], div[d]), at most cap[d]
 *             (cap[d] 0: no cap). */
typedef struct aot_grid_rule {
    int64_t c[3], div[3], mult[3], cap[3];
    int64_t per[3][AOT_MAX_KEYS];
} aot_grid_rule;

/* a * b + acc, or INT64_MAX / 4 where it would overflow (then far above any grid limit) */
AOT_UNUSED static int64_t aot_mul_add(int64_t acc, int64_t a, int64_t b)
{
    const int64_t big = INT64_MAX / 4;
    if (a == 0 || b == 0)
        return acc;
    if (acc >= big || (a > 0 ? a : -a) > big / (b > 0 ? b : -b))
        return big;
    int64_t p = a * b;
    return p > 0 && acc > big - p ? big : acc + p;
}

/* The grid rule r gives at shape; -1 with the message set when a dim is outside [1, 2^31 - 1]
 * (x) or [1, 65535] (y, z). */
AOT_UNUSED static int aot_grid_eval(const char *fn_name, const char *tname, const aot_grid_rule *r,
                                    const int64_t *shape, int nkeys, unsigned grid[3])
{
    for (int d = 0; d < 3; d++) {
        int64_t x = r->c[d];
        for (int i = 0; i < nkeys && i < AOT_MAX_KEYS; i++)
            x = aot_mul_add(x, r->per[d][i], shape[i]);
        int64_t dv = r->div[d] > 0 ? r->div[d] : 1, m = r->mult[d] > 0 ? r->mult[d] : 1;
        x = x <= 0 ? 0 : x / dv + (x % dv != 0);
        x = x > INT64_MAX / 4 / m ? INT64_MAX / 4 : x * m;
        if (r->cap[d] > 0 && x > r->cap[d])
            x = r->cap[d];
        int64_t hi = d == 0 ? INT32_MAX : 65535;
        if (x < 1 || x > hi)
            return aot_fail(AOT_ERR_INVALID, "%s: %s's grid[%d] at this shape would be %lld, outside 1 to %lld",
                            fn_name, tname, d, (long long)x, (long long)hi),
                   -1;
        grid[d] = (unsigned)x;
    }
    return 0;
}

/* ---------------------------------------------------------------- memory, for the operations */

AOT_UNUSED static int aot_alloc(CUdeviceptr *p, size_t bytes, const char *what)
{
    int st = aot_enter();
    if (st != AOT_OK)
        return st;
    aot_CUresult r = aot_cu.cuMemAlloc(p, bytes ? bytes : 1);
    if (r != AOT_CUDA_SUCCESS) {
        char w[200];
        snprintf(w, sizeof w, "cuMemAlloc of %zu bytes for %s", bytes, what);
        *p = 0;
        return aot_cuda_fail(r, w);
    }
    return AOT_OK;
}

AOT_UNUSED static void aot_free(CUdeviceptr p)
{
    if (p && aot_cu.cuMemFree)
        aot_cu.cuMemFree(p);
}

AOT_UNUSED static int aot_upload(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream, const char *what)
{
    aot_CUresult r = aot_cu.cuMemcpyHtoDAsync(dst, src, bytes, stream);
    if (r == AOT_CUDA_SUCCESS)
        r = aot_cu.cuStreamSynchronize(stream); /* src may be freed once this returns */
    if (r != AOT_CUDA_SUCCESS) {
        char w[200];
        snprintf(w, sizeof w, "uploading %s (%zu bytes)", what, bytes);
        return aot_cuda_fail(r, w);
    }
    return AOT_OK;
}

AOT_UNUSED static int aot_download(void *dst, CUdeviceptr src, size_t bytes, CUstream stream, const char *what)
{
    aot_CUresult r = aot_cu.cuMemcpyDtoHAsync(dst, src, bytes, stream);
    if (r == AOT_CUDA_SUCCESS)
        r = aot_cu.cuStreamSynchronize(stream);
    if (r != AOT_CUDA_SUCCESS) {
        char w[200];
        snprintf(w, sizeof w, "reading %s back (%zu bytes)", what, bytes);
        return aot_cuda_fail(r, w);
    }
    return AOT_OK;
}

AOT_UNUSED static int aot_zero(CUdeviceptr dst, size_t bytes, CUstream stream, const char *what)
{
    aot_CUresult r = aot_cu.cuMemsetD8Async(dst, 0, bytes, stream);
    if (r == AOT_CUDA_SUCCESS)
        r = aot_cu.cuStreamSynchronize(stream); /* done before any other stream's kernel reads it */
    if (r != AOT_CUDA_SUCCESS) {
        char w[200];
        snprintf(w, sizeof w, "clearing %s (%zu bytes)", what, bytes);
        return aot_cuda_fail(r, w);
    }
    return AOT_OK;
}
