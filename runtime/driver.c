/*
 * driver.c -- the GPU backend: the CUDA driver API through dlopen (see rt.h, gpu.h).
 *
 * libcuda is opened with dlopen ("libcuda.so.1", then "libcuda.so"; LOOM_CUDA_LIB names
 * another file) and every entry point is looked up by its versioned symbol name, so
 * libloom neither needs cuda.h to build nor libcuda to start: without a driver, a stub
 * driver or a device, rt_gpu_open returns LOOM_ERR_NO_GPU with the reason.  The driver
 * is loaded once per process and never unloaded (unloading libcuda is not safe while its
 * threads run).
 *
 * Each rt_gpu holds the primary context of device LOOM_DEVICE (default 0), made current
 * on the calling thread by every call, so any thread may use it.  All work goes to the
 * default stream: copies are synchronous, launches are asynchronous unless LOOM_SYNC=1.
 *
 * A launch finds its CUfunction by key (gpu.h): the in-memory table, else a cubin from
 * the disk cache, else cg_compile + cuLink* (PTX -> cubin at -O3), whose cubin goes
 * to the disk cache.  Several threads may compile at once (the autotuner's pool): the
 * table is read and extended under a mutex, entries are copied out (the table may
 * grow and move), and compiling itself runs outside the lock; when two threads build
 * the same key, the first entry added wins and the other module is unloaded.  Every CUDA error reads "<call> failed: <NAME> (<text>)"; launch
 * errors name the kernel, load errors carry the JIT log.
 *
 * A kernel that reads tensors with TMA takes one descriptor per rt_tma_spec after its own
 * parameters: the code generator lists the specs, the cache entry keeps them (and the
 * disk file, so a warm start has them), and each launch appends the descriptors, encoded
 * from the arguments' buffers through the entry's rt_tma_cache (runtime/tma.c).
 * cuTensorMapEncodeTiled is looked up apart from the other entry points: a driver
 * without it (before CUDA 12) still runs every kernel that uses no TMA.
 *
 * Two linkers turn PTX into a cubin: the driver's JIT (cuLink*) and nvJitLink, the
 * toolkit's library (libnvJitLink.so.13 or .12, dlopen'ed on first use; LOOM_NVJITLINK_LIB
 * names another file).  Both run the same ptxas inside; LOOM_LINKER=driver|nvjitlink
 * picks one, and the default is the driver (see link_ptx for why).  nvJitLink falls back
 * to the driver where it is missing, fails, or makes a cubin the driver will not load
 * (a toolkit newer than the driver).
 */
#define _GNU_SOURCE
#include "cuda_api.h"
#include "../util/util.h"
#include "codegen.h"
#include "gpu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- the driver table */

#define CU_FUNCS(X)                                                                                \
    X(cuInit, "cuInit")                                                                            \
    X(cuDriverGetVersion, "cuDriverGetVersion")                                                    \
    X(cuGetErrorName, "cuGetErrorName")                                                            \
    X(cuGetErrorString, "cuGetErrorString")                                                        \
    X(cuDeviceGetCount, "cuDeviceGetCount")                                                        \
    X(cuDeviceGet, "cuDeviceGet")                                                                  \
    X(cuDeviceGetName, "cuDeviceGetName")                                                          \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute")                                                \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem_v2")                                                  \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                                        \
    X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease_v2")                                \
    X(cuCtxSetCurrent, "cuCtxSetCurrent")                                                          \
    X(cuCtxSynchronize, "cuCtxSynchronize")                                                        \
    X(cuMemAlloc_v2, "cuMemAlloc_v2")                                                              \
    X(cuMemFree_v2, "cuMemFree_v2")                                                                \
    X(cuMemcpyHtoD_v2, "cuMemcpyHtoD_v2")                                                          \
    X(cuMemcpyDtoH_v2, "cuMemcpyDtoH_v2")                                                          \
    X(cuMemcpyDtoD_v2, "cuMemcpyDtoD_v2")                                                          \
    X(cuMemsetD8_v2, "cuMemsetD8_v2")                                                              \
    X(cuLinkCreate_v2, "cuLinkCreate_v2")                                                          \
    X(cuLinkAddData_v2, "cuLinkAddData_v2")                                                        \
    X(cuLinkComplete, "cuLinkComplete")                                                            \
    X(cuLinkDestroy, "cuLinkDestroy")                                                              \
    X(cuModuleLoadDataEx, "cuModuleLoadDataEx")                                                    \
    X(cuModuleUnload, "cuModuleUnload")                                                            \
    X(cuModuleGetFunction, "cuModuleGetFunction")                                                  \
    X(cuFuncSetAttribute, "cuFuncSetAttribute")                                                    \
    X(cuFuncGetAttribute, "cuFuncGetAttribute")                                                    \
    X(cuLaunchKernelEx, "cuLaunchKernelEx")                                                        \
    X(cuEventCreate, "cuEventCreate")                                                              \
    X(cuEventDestroy_v2, "cuEventDestroy_v2")                                                      \
    X(cuEventRecord, "cuEventRecord")                                                              \
    X(cuEventSynchronize, "cuEventSynchronize")

static struct {
    void *lib;
    char path[256];
#define DECL(fn, sym) PFN_##fn fn;
    CU_FUNCS(DECL)
#undef DECL
    PFN_cuEventElapsedTime cuEventElapsedTime; /* _v2 where the driver has it */
    PFN_cuTensorMapEncodeTiled cuTensorMapEncodeTiled; /* NULL before CUDA 12 */
} cu;
static pthread_mutex_t cu_lock = PTHREAD_MUTEX_INITIALIZER;

/* Load libcuda and its entry points once per process.  A failure is not remembered, so a
 * later call (after LOOM_CUDA_LIB changed, say) tries again. */
static loom_status load_driver(char *err, size_t errlen)
{
    loom_status st = LOOM_OK;
    pthread_mutex_lock(&cu_lock);
    if (cu.lib)
        goto out;
    const char *names[3] = {getenv("LOOM_CUDA_LIB"), "libcuda.so.1", "libcuda.so"};
    void *lib = NULL;
    char first_err[512] = "";
    for (int i = 0; i < 3 && !lib; i++) {
        if (!names[i] || !*names[i])
            continue;
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            snprintf(cu.path, sizeof cu.path, "%s", names[i]);
        } else if (!first_err[0]) {
            const char *e = dlerror();
            snprintf(first_err, sizeof first_err, "%s", e ? e : names[i]);
        }
        if (i == 0 && names[0] && *names[0])
            break; /* an explicit LOOM_CUDA_LIB is the only one tried */
    }
    if (!lib) {
        snprintf(err, errlen, "no CUDA driver: cannot load libcuda.so.1 (%s)", first_err);
        st = LOOM_ERR_NO_GPU;
        goto out;
    }
#define LOOKUP(fn, sym)                                                                            \
    *(void **)&cu.fn = dlsym(lib, sym);                                                            \
    if (!cu.fn) {                                                                                  \
        snprintf(err, errlen, "the CUDA driver %s is too old: it has no %s", cu.path, sym);       \
        st = LOOM_ERR_NO_GPU;                                                                      \
    }
    CU_FUNCS(LOOKUP)
#undef LOOKUP
    if (st == LOOM_OK) {
        *(void **)&cu.cuEventElapsedTime = dlsym(lib, "cuEventElapsedTime_v2");
        if (!cu.cuEventElapsedTime)
            *(void **)&cu.cuEventElapsedTime = dlsym(lib, "cuEventElapsedTime");
        if (!cu.cuEventElapsedTime) {
            snprintf(err, errlen, "the CUDA driver %s is too old: it has no cuEventElapsedTime",
                     cu.path);
            st = LOOM_ERR_NO_GPU;
        }
    }
    if (st != LOOM_OK) {
        dlclose(lib);
        memset(&cu, 0, sizeof cu);
        goto out;
    }
    *(void **)&cu.cuTensorMapEncodeTiled = dlsym(lib, "cuTensorMapEncodeTiled");
    cu.lib = lib;
out:
    pthread_mutex_unlock(&cu_lock);
    return st;
}

/* Names of the results loom itself expects, for a driver (a stub) that cannot name them. */
static const char *known_name(CUresult r)
{
    switch (r) {
#define N(x) case x: return #x;
    N(CUDA_ERROR_INVALID_VALUE) N(CUDA_ERROR_OUT_OF_MEMORY) N(CUDA_ERROR_NOT_INITIALIZED)
    N(CUDA_ERROR_STUB_LIBRARY) N(CUDA_ERROR_NO_DEVICE) N(CUDA_ERROR_INVALID_DEVICE)
    N(CUDA_ERROR_INVALID_IMAGE) N(CUDA_ERROR_NO_BINARY_FOR_GPU) N(CUDA_ERROR_INVALID_PTX)
    N(CUDA_ERROR_UNSUPPORTED_PTX_VERSION) N(CUDA_ERROR_NOT_FOUND) N(CUDA_ERROR_ILLEGAL_ADDRESS)
    N(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES) N(CUDA_ERROR_LAUNCH_FAILED)
    N(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH) N(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)
#undef N
    default: return NULL;
    }
}

/* "CUDA_ERROR_X (text)" for a result code. */
static void cu_describe(CUresult r, char *buf, size_t n)
{
    const char *name = NULL, *str = NULL;
    if (cu.cuGetErrorName && cu.cuGetErrorName(r, &name) != CUDA_SUCCESS)
        name = NULL;
    if (cu.cuGetErrorString && cu.cuGetErrorString(r, &str) != CUDA_SUCCESS)
        str = NULL;
    if (!name)
        name = known_name(r);
    if (name)
        snprintf(buf, n, "%s (%s)", name, str ? str : "the driver gives no description");
    else
        snprintf(buf, n, "CUDA error %d (unknown to this driver)", r);
}

/* ---------------------------------------------------------------- rt_gpu */

struct rt_gpu {
    CUdevice dev;
    CUcontext ctx;
    rt_gpu_props props;
    mc_table modules;  /* kernels compiled through rt_gpu_launch */
    pthread_mutex_t modules_lock; /* guards modules: the autotuner compiles on several threads */
    char last_kernel[128]; /* last kernel launched: named when a later call reports a fault */
};

struct rt_gpu_module {
    CUmodule mod;
};

static loom_status cu_fail(rt_gpu *g, CUresult r, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Write "<what> failed: NAME (text)" and, for a sticky fault, the last kernel launched. */
static loom_status cu_fail(rt_gpu *g, CUresult r, char *err, size_t errlen, const char *fmt, ...)
{
    char what[512], desc[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    cu_describe(r, desc, sizeof desc);
    bool fault = r == CUDA_ERROR_ILLEGAL_ADDRESS || r == CUDA_ERROR_LAUNCH_FAILED ||
                 r == CUDA_ERROR_LAUNCH_TIMEOUT || (r >= 710 && r <= 720);
    if (fault && g && g->last_kernel[0])
        snprintf(err, errlen,
                 "%s failed: %s; the last kernel launched was '%s' (launches are asynchronous: "
                 "set LOOM_SYNC=1 to check each one)",
                 what, desc, g->last_kernel);
    else
        snprintf(err, errlen, "%s failed: %s", what, desc);
    return LOOM_ERR_CUDA;
}

#define CHECK(g, call, what)                                                                       \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return cu_fail(g, r_, err, errlen, "%s", what);                                        \
    } while (0)

static loom_status enter(rt_gpu *g, char *err, size_t errlen)
{
    CHECK(g, cu.cuCtxSetCurrent(g->ctx), "cuCtxSetCurrent");
    return LOOM_OK;
}



void rt_gpu_arch_name(int cc_major, int cc_minor, char *buf, size_t n)
{
    if (cc_major == 9 && cc_minor == 0)
        snprintf(buf, n, "sm_90a");
    else
        snprintf(buf, n, "sm_%d%d", cc_major, cc_minor);
}

static int dev_attr(CUdevice dev, CUdevice_attribute a)
{
    int v = 0;
    if (cu.cuDeviceGetAttribute(&v, a, dev) != CUDA_SUCCESS)
        return 0;
    return v;
}

loom_status rt_gpu_open(rt_gpu **out, char *err, size_t errlen)
{
    *out = NULL;
    loom_status st = load_driver(err, errlen);
    if (st != LOOM_OK)
        return st;
    char desc[256];
    CUresult r = cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        cu_describe(r, desc, sizeof desc);
        snprintf(err, errlen, "no usable GPU: cuInit failed: %s (driver %s)", desc, cu.path);
        return LOOM_ERR_NO_GPU;
    }
    int count = 0;
    r = cu.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count < 1) {
        if (r != CUDA_SUCCESS)
            cu_describe(r, desc, sizeof desc);
        snprintf(err, errlen, "no usable GPU: %s%s", r != CUDA_SUCCESS ? "cuDeviceGetCount failed: " : "",
                 r != CUDA_SUCCESS ? desc : "the driver reports no CUDA device");
        return LOOM_ERR_NO_GPU;
    }
    int ordinal = 0;
    const char *env = getenv("LOOM_DEVICE");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end || v < 0 || v >= count) {
            snprintf(err, errlen, "LOOM_DEVICE=%s: there %s %d CUDA device%s (0..%d)", env,
                     count == 1 ? "is" : "are", count, count == 1 ? "" : "s", count - 1);
            return LOOM_ERR_NO_GPU;
        }
        ordinal = (int)v;
    }
    rt_gpu *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    pthread_mutex_init(&g->modules_lock, NULL);
    r = cu.cuDeviceGet(&g->dev, ordinal);
    if (r != CUDA_SUCCESS) {
        free(g);
        return cu_fail(NULL, r, err, errlen, "cuDeviceGet(%d)", ordinal);
    }
    r = cu.cuDevicePrimaryCtxRetain(&g->ctx, g->dev);
    if (r != CUDA_SUCCESS) {
        free(g);
        return cu_fail(NULL, r, err, errlen, "cuDevicePrimaryCtxRetain(device %d)", ordinal);
    }
    r = cu.cuCtxSetCurrent(g->ctx);
    if (r != CUDA_SUCCESS) {
        cu.cuDevicePrimaryCtxRelease_v2(g->dev);
        free(g);
        return cu_fail(NULL, r, err, errlen, "cuCtxSetCurrent");
    }
    rt_gpu_props *p = &g->props;
    p->ordinal = ordinal;
    if (cu.cuDeviceGetName(p->name, (int)sizeof p->name, g->dev) != CUDA_SUCCESS)
        snprintf(p->name, sizeof p->name, "CUDA device %d", ordinal);
    p->cc_major = dev_attr(g->dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    p->cc_minor = dev_attr(g->dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    rt_gpu_arch_name(p->cc_major, p->cc_minor, p->arch, sizeof p->arch);
    p->sm_count = dev_attr(g->dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    p->max_threads_per_block = dev_attr(g->dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    p->max_smem_per_block = dev_attr(g->dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    p->max_smem_per_block_optin = dev_attr(g->dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    if (p->max_smem_per_block_optin < p->max_smem_per_block)
        p->max_smem_per_block_optin = p->max_smem_per_block;
    p->l2_bytes = dev_attr(g->dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    p->clock_khz = dev_attr(g->dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    p->mem_clock_khz = dev_attr(g->dev, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    p->mem_bus_bits = dev_attr(g->dev, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    if (cu.cuDeviceTotalMem_v2(&p->total_mem, g->dev) != CUDA_SUCCESS)
        p->total_mem = 0;
    if (cu.cuDriverGetVersion(&p->driver_version) != CUDA_SUCCESS)
        p->driver_version = 0;
    *out = g;
    return LOOM_OK;
}

void rt_gpu_close(rt_gpu *g)
{
    if (!g)
        return;
    cu.cuCtxSetCurrent(g->ctx);
    for (size_t i = 0; i < g->modules.n; i++)
        cu.cuModuleUnload((CUmodule)g->modules.e[i].module);
    mc_table_free(&g->modules);
    pthread_mutex_destroy(&g->modules_lock);
    cu.cuDevicePrimaryCtxRelease_v2(g->dev);
    free(g);
}

const char *rt_gpu_name(const rt_gpu *g) { return g ? g->props.name : ""; }
const rt_gpu_props *rt_gpu_properties(const rt_gpu *g) { return g ? &g->props : NULL; }

/* ---------------------------------------------------------------- memory */

loom_status rt_gpu_alloc(rt_gpu *g, size_t bytes, uint64_t *dptr, char *err, size_t errlen)
{
    *dptr = 0;
    loom_status st = enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    CUdeviceptr p = 0;
    CUresult r = cu.cuMemAlloc_v2(&p, bytes);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuMemAlloc_v2(%zu bytes)", bytes);
    *dptr = (uint64_t)p;
    return LOOM_OK;
}

void rt_gpu_free(rt_gpu *g, uint64_t dptr)
{
    if (!g || !dptr)
        return;
    /* Nothing to report to: a failure here means the context is already broken, which
     * the next call that can report will say. */
    if (cu.cuCtxSetCurrent(g->ctx) == CUDA_SUCCESS)
        cu.cuMemFree_v2((CUdeviceptr)dptr);
}

loom_status rt_gpu_htod(rt_gpu *g, uint64_t dst, const void *src, size_t bytes, char *err, size_t errlen)
{
    loom_status st = enter(g, err, errlen);
    if (st != LOOM_OK || !bytes)
        return st;
    CUresult r = cu.cuMemcpyHtoD_v2((CUdeviceptr)dst, src, bytes);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuMemcpyHtoD_v2(%zu bytes)", bytes);
    return LOOM_OK;
}

loom_status rt_gpu_dtoh(rt_gpu *g, void *dst, uint64_t src, size_t bytes, char *err, size_t errlen)
{
    loom_status st = enter(g, err, errlen);
    if (st != LOOM_OK || !bytes)
        return st;
    CUresult r = cu.cuMemcpyDtoH_v2(dst, (CUdeviceptr)src, bytes);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuMemcpyDtoH_v2(%zu bytes)", bytes);
    return LOOM_OK;
}

loom_status rt_gpu_memset8(rt_gpu *g, uint64_t dst, unsigned char byte, size_t bytes, char *err,
                           size_t errlen)
{
    loom_status st = enter(g, err, errlen);
    if (st != LOOM_OK || !bytes)
        return st;
    CUresult r = cu.cuMemsetD8_v2((CUdeviceptr)dst, byte, bytes);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuMemsetD8_v2(%zu bytes)", bytes);
    return LOOM_OK;
}

loom_status rt_gpu_dtod(rt_gpu *g, uint64_t dst, uint64_t src, size_t bytes, char *err, size_t errlen)
{
    loom_status st = enter(g, err, errlen);
    if (st != LOOM_OK || !bytes)
        return st;
    CUresult r = cu.cuMemcpyDtoD_v2((CUdeviceptr)dst, (CUdeviceptr)src, bytes);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuMemcpyDtoD_v2(%zu bytes)", bytes);
    return LOOM_OK;
}

loom_status rt_gpu_sync(rt_gpu *g, char *err, size_t errlen)
{
    loom_status st = enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    CHECK(g, cu.cuCtxSynchronize(), "cuCtxSynchronize");
    return LOOM_OK;
}

/* ---------------------------------------------------------------- TMA descriptors */

loom_status rt_gpu_tensor_map_encode(const rt_tma_plan *p, void *desc, char *err, size_t errlen)
{
    loom_status st = load_driver(err, errlen);
    if (st != LOOM_OK)
        return st;
    if (!cu.cuTensorMapEncodeTiled) {
        snprintf(err, errlen, "the CUDA driver %s has no cuTensorMapEncodeTiled (TMA needs CUDA 12 "
                 "or newer)", cu.path);
        return LOOM_ERR_UNSUPPORTED;
    }
    CUresult r = cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        char desc_s[256];
        cu_describe(r, desc_s, sizeof desc_s);
        snprintf(err, errlen, "no usable GPU: cuInit failed: %s", desc_s);
        return LOOM_ERR_NO_GPU;
    }
    cuuint64_t dims[RT_TMA_MAX_RANK], strides[RT_TMA_MAX_RANK];
    cuuint32_t box[RT_TMA_MAX_RANK], estr[RT_TMA_MAX_RANK];
    for (uint32_t i = 0; i < p->rank && i < RT_TMA_MAX_RANK; i++) {
        dims[i] = p->dims[i];
        box[i] = p->box[i];
        estr[i] = p->elem_strides[i];
        strides[i] = i + 1 < p->rank ? p->strides[i] : 0;
    }
    r = cu.cuTensorMapEncodeTiled((CUtensorMap *)desc, p->dtype, p->rank, (void *)(uintptr_t)p->base,
                                  dims, strides, box, estr, p->interleave, p->swizzle,
                                  p->l2_promotion, p->oob_fill);
    if (r != CUDA_SUCCESS)
        return cu_fail(NULL, r, err, errlen,
                       "cuTensorMapEncodeTiled (rank %u, base 0x%llx, swizzle mode %d)", p->rank,
                       (unsigned long long)p->base, p->swizzle);
    return LOOM_OK;
}

/* ---------------------------------------------------------------- statistics */

static rt_gpu_stats stats;
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;

const char *rt_cache_result_name(rt_cache_result r)
{
    switch (r) {
    case RT_CACHE_MEMORY: return "memory hit";
    case RT_CACHE_DISK: return "disk hit";
    case RT_CACHE_MISS: return "miss";
    default: return "none";
    }
}

void rt_gpu_stats_get(rt_gpu_stats *out)
{
    pthread_mutex_lock(&stats_lock);
    *out = stats;
    pthread_mutex_unlock(&stats_lock);
}

void rt_gpu_stats_reset(void)
{
    pthread_mutex_lock(&stats_lock);
    memset(&stats, 0, sizeof stats);
    pthread_mutex_unlock(&stats_lock);
}

static void stats_record(const rt_gpu_stats *last)
{
    pthread_mutex_lock(&stats_lock);
    memcpy(stats.kernel, last->kernel, sizeof stats.kernel);
    stats.result = last->result;
    stats.key_ms = last->key_ms;
    stats.codegen_ms = last->codegen_ms;
    stats.link_ms = last->link_ms;
    stats.linker = last->linker;
    stats.disk_ms = last->disk_ms;
    stats.load_ms = last->load_ms;
    stats.ptx_bytes = last->ptx_bytes;
    stats.cubin_bytes = last->cubin_bytes;
    stats.lookups++;
    stats.memory_hits += last->result == RT_CACHE_MEMORY;
    stats.disk_hits += last->result == RT_CACHE_DISK;
    stats.misses += last->result == RT_CACHE_MISS;
    stats.disk_rejected += last->disk_rejected;
    stats.disk_write_failures += last->disk_write_failures;
    pthread_mutex_unlock(&stats_lock);
}

/* ---------------------------------------------------------------- modules */

#define JIT_LOG_BYTES 8192

/* Link PTX into a cubin with the driver's JIT at -O3.  *cubin is malloc'ed. */
static loom_status link_driver(rt_gpu *g, const char *ptx, const char *what, void **cubin, size_t *n,
                               char *err, size_t errlen)
{
    *cubin = NULL;
    *n = 0;
    char *elog = calloc(1, JIT_LOG_BYTES);
    if (!elog) {
        snprintf(err, errlen, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    CUjit_option opts[3] = {CU_JIT_OPTIMIZATION_LEVEL, CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[3] = {(void *)(uintptr_t)3, elog, (void *)(uintptr_t)(JIT_LOG_BYTES - 1)};
    CUlinkState ls = NULL;
    loom_status st = LOOM_OK;
    CUresult r = cu.cuLinkCreate_v2(3, opts, vals, &ls);
    if (r != CUDA_SUCCESS) {
        st = cu_fail(g, r, err, errlen, "cuLinkCreate_v2 for %s", what);
        goto done;
    }
    r = cu.cuLinkAddData_v2(ls, CU_JIT_INPUT_PTX, (void *)ptx, strlen(ptx) + 1, what, 0, NULL, NULL);
    const char *step = "cuLinkAddData_v2 (PTX -> SASS)";
    void *img = NULL;
    size_t imgn = 0;
    if (r == CUDA_SUCCESS) {
        step = "cuLinkComplete";
        r = cu.cuLinkComplete(ls, &img, &imgn);
    }
    if (r != CUDA_SUCCESS) {
        char desc[256];
        cu_describe(r, desc, sizeof desc);
        snprintf(err, errlen,
                 "%s failed for %s: %s\nJIT log:\n%s\n(LOOM_DUMP_PTX=1 prints the PTX)", step,
                 what, desc, elog[0] ? elog : "(empty)");
        st = LOOM_ERR_COMPILE;
        goto done;
    }
    *cubin = malloc(imgn ? imgn : 1);
    if (!*cubin) {
        snprintf(err, errlen, "out of host memory for a %zu-byte cubin", imgn);
        st = LOOM_ERR_NOMEM;
        goto done;
    }
    memcpy(*cubin, img, imgn);
    *n = imgn;
done:
    if (ls)
        cu.cuLinkDestroy(ls);
    free(elog);
    return st;
}

/* ---------------------------------------------------------------- nvJitLink */

/* The few nvJitLink entry points and values used (nvJitLink.h declares them; loom builds
 * without the toolkit).  Results are 0 on success. */
typedef int (*PFN_nvJitLinkCreate)(void **handle, uint32_t nopts, const char **opts);
typedef int (*PFN_nvJitLinkDestroy)(void **handle);
typedef int (*PFN_nvJitLinkAddData)(void *handle, int type, const void *data, size_t size, const char *name);
typedef int (*PFN_nvJitLinkComplete)(void *handle);
typedef int (*PFN_nvJitLinkGetSize)(void *handle, size_t *size);
typedef int (*PFN_nvJitLinkGetData)(void *handle, void *out);
#define NVJITLINK_INPUT_PTX 2

#define JL_FUNCS(X)                                                                                \
    X(PFN_nvJitLinkCreate, create, "nvJitLinkCreate")                                              \
    X(PFN_nvJitLinkDestroy, destroy, "nvJitLinkDestroy")                                           \
    X(PFN_nvJitLinkAddData, add_data, "nvJitLinkAddData")                                          \
    X(PFN_nvJitLinkComplete, complete, "nvJitLinkComplete")                                        \
    X(PFN_nvJitLinkGetSize, cubin_size, "nvJitLinkGetLinkedCubinSize")                             \
    X(PFN_nvJitLinkGetData, cubin, "nvJitLinkGetLinkedCubin")                                      \
    X(PFN_nvJitLinkGetSize, log_size, "nvJitLinkGetErrorLogSize")                                  \
    X(PFN_nvJitLinkGetData, log, "nvJitLinkGetErrorLog")

static struct {
    int state; /* 0: not tried, 1: loaded, -1: unusable (why says why) */
    char why[256];
#define DECL(type, field, sym) type field;
    JL_FUNCS(DECL)
#undef DECL
} jl;
static pthread_mutex_t jl_lock = PTHREAD_MUTEX_INITIALIZER;

/* Load nvJitLink once per process; false (with jl.why) where it cannot be used. */
static bool jl_load(void)
{
    pthread_mutex_lock(&jl_lock);
    if (jl.state == 0) {
        const char *names[4] = {getenv("LOOM_NVJITLINK_LIB"), "libnvJitLink.so.13", "libnvJitLink.so.12",
                                "libnvJitLink.so"};
        void *lib = NULL;
        for (int i = 0; i < 4 && !lib; i++)
            if (names[i] && *names[i])
                lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        jl.state = lib ? 1 : -1;
        if (!lib)
            snprintf(jl.why, sizeof jl.why, "no libnvJitLink.so.13 or .12 (%s)", dlerror());
#define LOOKUP(type, field, sym)                                                                   \
    if (lib && !(*(void **)&jl.field = dlsym(lib, sym))) {                                         \
        jl.state = -1;                                                                             \
        snprintf(jl.why, sizeof jl.why, "libnvJitLink has no %s", sym);                            \
    }
        JL_FUNCS(LOOKUP)
#undef LOOKUP
    }
    bool ok = jl.state == 1;
    pthread_mutex_unlock(&jl_lock);
    return ok;
}

/* Link PTX into a cubin with nvJitLink at -O3 for g's arch.  *cubin is malloc'ed. */
static loom_status link_nvjitlink(rt_gpu *g, const char *ptx, const char *what, void **cubin, size_t *n,
                                  char *err, size_t errlen)
{
    *cubin = NULL;
    *n = 0;
    char arch[32];
    snprintf(arch, sizeof arch, "-arch=%s", g->props.arch);
    const char *opts[2] = {arch, "-O3"};
    void *h = NULL;
    const char *step = "nvJitLinkCreate";
    int r = jl.create(&h, 2, opts);
    if (r == 0) {
        step = "nvJitLinkAddData (PTX -> SASS)";
        r = jl.add_data(h, NVJITLINK_INPUT_PTX, ptx, strlen(ptx) + 1, what);
    }
    if (r == 0) {
        step = "nvJitLinkComplete";
        r = jl.complete(h);
    }
    size_t sz = 0;
    if (r == 0) {
        step = "nvJitLinkGetLinkedCubin";
        r = jl.cubin_size(h, &sz);
    }
    if (r == 0 && !(*cubin = malloc(sz ? sz : 1))) {
        jl.destroy(&h);
        snprintf(err, errlen, "out of host memory for a %zu-byte cubin", sz);
        return LOOM_ERR_NOMEM;
    }
    if (r == 0)
        r = jl.cubin(h, *cubin);
    if (r != 0) {
        char log[JIT_LOG_BYTES] = "";
        size_t ln = 0;
        if (h && jl.log_size(h, &ln) == 0 && ln > 0 && ln < sizeof log)
            jl.log(h, log);
        snprintf(err, errlen, "%s failed for %s: nvJitLink error %d\nJIT log:\n%s\n(LOOM_DUMP_PTX=1 prints the PTX)",
                 step, what, r, log[0] ? log : "(empty)");
        free(*cubin);
        *cubin = NULL;
        if (h)
            jl.destroy(&h);
        return LOOM_ERR_COMPILE;
    }
    *n = sz;
    jl.destroy(&h);
    return LOOM_OK;
}

/* Set when a cubin nvJitLink made would not load: the driver is older than the toolkit,
 * and every later link goes to the driver. */
static atomic_bool jl_cubins_rejected;

/* Which linker LOOM_LINKER asks for: true for nvJitLink.
 *
 * Why the driver by default: both run the same ptxas, so a kernel's link takes the same
 * time either way (measured on an H200 host: bench_compile prints both), while nvJitLink
 * first costs a dlopen of a 100 MB library and its own start-up, which a process pays on
 * its first compile. */
static bool want_nvjitlink(void)
{
    const char *v = getenv("LOOM_LINKER");
    return v && !strcmp(v, "nvjitlink") && !jl_cubins_rejected;
}

/* Link PTX into a cubin (*cubin malloc'ed) with the chosen linker; *linker names the one
 * that made it.  nvJitLink falls back to the driver where it cannot be loaded or fails. */
static loom_status link_ptx(rt_gpu *g, const char *ptx, const char *what, void **cubin, size_t *n,
                            const char **linker, char *err, size_t errlen)
{
    /* setmaxnreg (a task's register budget): both linkers compile PTX as a relocatable
     * unit, where ptxas drops it ("(C7504) 'setmaxnreg' ignored to maintain compatibility
     * across compilation units"), so every thread keeps the launch's 64K / threads
     * registers and a 384-thread kernel's consumers (232 wanted, 168 kept) spill.  Such
     * PTX is the image itself: cuModuleLoadDataEx (load_image) compiles it as a whole
     * program, which honours setmaxnreg (and the driver's JIT cache keeps the result). */
    if (strstr(ptx, "setmaxnreg")) {
        size_t len = strlen(ptx) + 1;
        if (!(*cubin = malloc(len))) {
            snprintf(err, errlen, "out of host memory");
            return LOOM_ERR_NOMEM;
        }
        memcpy(*cubin, ptx, len);
        *n = len;
        *linker = "PTX load";
        (void)g;
        (void)what;
        return LOOM_OK;
    }
    if (want_nvjitlink() && jl_load()) {
        if (link_nvjitlink(g, ptx, what, cubin, n, err, errlen) == LOOM_OK) {
            *linker = "nvJitLink";
            return LOOM_OK;
        }
        if (util_env_on("LOOM_CACHE_VERBOSE"))
            fprintf(stderr, "loom: nvJitLink failed, linking with the driver: %s\n", err);
    }
    *linker = "driver";
    return link_driver(g, ptx, what, cubin, n, err, errlen);
}

/* Load a cubin or PTX image as a module, with the JIT error log on failure. */
static loom_status load_image(rt_gpu *g, const void *image, const char *what, CUmodule *mod,
                              char *err, size_t errlen)
{
    char *elog = calloc(1, JIT_LOG_BYTES);
    if (!elog) {
        snprintf(err, errlen, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    CUjit_option opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[2] = {elog, (void *)(uintptr_t)(JIT_LOG_BYTES - 1)};
    CUresult r = cu.cuModuleLoadDataEx(mod, image, 2, opts, vals);
    loom_status st = LOOM_OK;
    if (r != CUDA_SUCCESS) {
        char desc[256];
        cu_describe(r, desc, sizeof desc);
        snprintf(err, errlen, "cuModuleLoadDataEx failed for %s: %s\nJIT log:\n%s", what, desc,
                 elog[0] ? elog : "(empty)");
        st = LOOM_ERR_COMPILE;
    }
    free(elog);
    (void)g;
    return st;
}

/* Give fn `smem` bytes of dynamic shared memory, refusing more than the device allows. */
static loom_status set_smem(rt_gpu *g, CUfunction fn, uint64_t smem, const char *name, char *err,
                            size_t errlen)
{
    if (smem > (uint64_t)g->props.max_smem_per_block_optin) {
        snprintf(err, errlen,
                 "kernel '%s' needs %llu bytes of shared memory; %s allows at most %d per block",
                 name, (unsigned long long)smem, g->props.name, g->props.max_smem_per_block_optin);
        return LOOM_ERR_UNSUPPORTED;
    }
    if (smem > 48 * 1024) {
        CUresult r = cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem);
        if (r != CUDA_SUCCESS)
            return cu_fail(g, r, err, errlen,
                           "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES=%llu) for kernel '%s'",
                           (unsigned long long)smem, name);
    }
    return LOOM_OK;
}

/* Load cubin, find function `name`, set its shared memory, make its TMA descriptor cache:
 * a ready mc_entry. */
static loom_status make_entry(rt_gpu *g, const void *cubin, const char *name, const mc_meta *meta,
                              mc_entry *e, char *err, size_t errlen)
{
    uint64_t smem = meta->smem_bytes;
    char what[160];
    snprintf(what, sizeof what, "kernel '%s'", name);
    CUmodule mod = NULL;
    loom_status st = load_image(g, cubin, what, &mod, err, errlen);
    if (st != LOOM_OK)
        return st;
    CUfunction fn = NULL;
    CUresult r = cu.cuModuleGetFunction(&fn, mod, name);
    if (r != CUDA_SUCCESS) {
        cu.cuModuleUnload(mod);
        return cu_fail(g, r, err, errlen, "cuModuleGetFunction(\"%s\")", name);
    }
    st = set_smem(g, fn, smem, name, err, errlen);
    if (st != LOOM_OK) {
        cu.cuModuleUnload(mod);
        return st;
    }
    rt_tma_cache *tc = NULL;
    if (meta->ntma > 0) {
        if (meta->ntma > RT_TMA_MAX_SPECS) {
            cu.cuModuleUnload(mod);
            snprintf(err, errlen, "kernel '%s' takes %d TMA descriptors; loom allows at most %d", name,
                     meta->ntma, RT_TMA_MAX_SPECS);
            return LOOM_ERR_UNSUPPORTED;
        }
        tc = rt_tma_cache_create(meta->tma, meta->ntma);
        if (!tc) {
            cu.cuModuleUnload(mod);
            snprintf(err, errlen, "out of host memory for the TMA descriptors of kernel '%s'", name);
            return LOOM_ERR_NOMEM;
        }
    }
    e->module = mod;
    e->function = fn;
    e->smem_bytes = smem;
    e->tma = tc;
    return LOOM_OK;
}

/* Find or build the function for kernel k (see the file comment); *out is a copy of the
 * table's entry. */
static loom_status get_function(rt_gpu *g, loom_kernel *k, mc_entry *out, rt_gpu_stats *lastp,
                                char *err, size_t errlen)
{
    rt_gpu_stats local, *lp = lastp ? lastp : &local;
    memset(lp, 0, sizeof *lp);
    const char *name = loom_kernel_name(k);
    snprintf(lp->kernel, sizeof lp->kernel, "%s", name);
    double t0 = util_now_ms();
    mc_key key;
    mc_key_make(loom_print(k), g->props.arch, loom_kernel_num_warps(k), mc_build_id(), &key);
    lp->key_ms = util_now_ms() - t0;

    pthread_mutex_lock(&g->modules_lock);
    mc_entry *hit = mc_table_find(&g->modules, &key);
    if (hit)
        *out = *hit;
    pthread_mutex_unlock(&g->modules_lock);
    if (hit) {
        lp->result = RT_CACHE_MEMORY;
        stats_record(lp);
        return LOOM_OK;
    }

    mc_entry e;
    memset(&e, 0, sizeof e);
    e.key = key;
    loom_status st;
    char dir[4096], why[512];
    bool disk = mc_disk_dir(dir, sizeof dir);
    void *cubin = NULL;
    size_t cubin_n = 0;
    mc_meta meta;
    memset(&meta, 0, sizeof meta);
    if (disk) {
        t0 = util_now_ms();
        mc_lookup lk = mc_disk_load(dir, &key, &cubin, &cubin_n, &meta, why, sizeof why);
        lp->disk_ms = util_now_ms() - t0;
        if (lk == MC_REJECTED) {
            lp->disk_rejected = 1;
            if (util_env_on("LOOM_CACHE_VERBOSE"))
                fprintf(stderr, "loom: rejected cache file %s\n", why);
        }
        if (lk == MC_HIT) {
            lp->cubin_bytes = cubin_n;
            t0 = util_now_ms();
            st = make_entry(g, cubin, name, &meta, &e, err, errlen);
            lp->load_ms = util_now_ms() - t0;
            free(cubin);
            cubin = NULL;
            if (st == LOOM_OK) {
                lp->result = RT_CACHE_DISK;
                goto add;
            }
            /* A cubin that passed its checks but does not load (another driver, say):
             * rebuild it below and overwrite the file. */
            lp->disk_rejected = 1;
        }
    }

    lp->result = RT_CACHE_MISS;
    memset(&meta, 0, sizeof meta);
    t0 = util_now_ms();
    cg_result cr;
    st = cg_compile(k, g->props.arch, &cr, err, errlen);
    char *ptx = cr.ptx; /* this function frees it */
    meta.smem_bytes = cr.smem_bytes;
    meta.ntma = cr.ntma;
    memcpy(meta.tma, cr.tma, sizeof meta.tma);
    lp->codegen_ms = util_now_ms() - t0;
    if (st != LOOM_OK) {
        free(ptx);
        stats_record(lp);
        return st;
    }
    if (!ptx) {
        snprintf(err, errlen, "code generator returned no PTX for kernel '%s'", name);
        stats_record(lp);
        return LOOM_ERR_COMPILE;
    }
    lp->ptx_bytes = strlen(ptx); /* (LOOM_DUMP_PTX is printed by the code generator) */
    char what[160];
    snprintf(what, sizeof what, "kernel '%s' (%s)", name, g->props.arch);
    t0 = util_now_ms();
    st = link_ptx(g, ptx, what, &cubin, &cubin_n, &lp->linker, err, errlen);
    lp->link_ms = util_now_ms() - t0;
    if (st != LOOM_OK) {
        free(ptx);
        stats_record(lp);
        return st;
    }
    lp->cubin_bytes = cubin_n;
    t0 = util_now_ms();
    st = make_entry(g, cubin, name, &meta, &e, err, errlen);
    lp->load_ms = util_now_ms() - t0;
    if (st != LOOM_OK && !strcmp(lp->linker, "nvJitLink")) {
        /* a toolkit newer than the driver: its cubins do not load; link with the driver */
        jl_cubins_rejected = true;
        free(cubin);
        cubin = NULL;
        t0 = util_now_ms();
        st = link_ptx(g, ptx, what, &cubin, &cubin_n, &lp->linker, err, errlen);
        lp->link_ms += util_now_ms() - t0;
        if (st == LOOM_OK) {
            lp->cubin_bytes = cubin_n;
            t0 = util_now_ms();
            st = make_entry(g, cubin, name, &meta, &e, err, errlen);
            lp->load_ms = util_now_ms() - t0;
        }
    }
    free(ptx);
    if (st == LOOM_OK && disk) {
        char werr[512];
        t0 = util_now_ms();
        if (mc_disk_store(dir, &key, cubin, cubin_n, &meta, werr, sizeof werr) != LOOM_OK) {
            lp->disk_write_failures = 1;
            if (util_env_on("LOOM_CACHE_VERBOSE"))
                fprintf(stderr, "loom: module cache: %s\n", werr);
        }
        lp->disk_ms += util_now_ms() - t0;
    }
    free(cubin);
    if (st != LOOM_OK) {
        stats_record(lp);
        return st;
    }
add:
    stats_record(lp);
    pthread_mutex_lock(&g->modules_lock);
    mc_entry *had = mc_table_find(&g->modules, &key), *added = NULL;
    if (had)
        *out = *had; /* another thread built the same kernel meanwhile: keep its module */
    else if ((added = mc_table_add(&g->modules, &e)))
        *out = *added;
    pthread_mutex_unlock(&g->modules_lock);
    if (!added) {
        cu.cuModuleUnload((CUmodule)e.module);
        rt_tma_cache_destroy(e.tma);
        if (!had) {
            snprintf(err, errlen, "out of host memory for the module cache");
            return LOOM_ERR_NOMEM;
        }
    }
    return LOOM_OK;
}

/* ---------------------------------------------------------------- launch */

static loom_status launch_fn(rt_gpu *g, CUfunction fn, const char *name, const unsigned grid[3],
                             const unsigned block[3], unsigned smem, void **params, char *err,
                             size_t errlen)
{
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = grid[0];
    cfg.gridDimY = grid[1];
    cfg.gridDimZ = grid[2];
    cfg.blockDimX = block[0];
    cfg.blockDimY = block[1];
    cfg.blockDimZ = block[2];
    cfg.sharedMemBytes = smem;
    cfg.hStream = NULL;
    snprintf(g->last_kernel, sizeof g->last_kernel, "%s", name);
    CUresult r = cu.cuLaunchKernelEx(&cfg, fn, params, NULL);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen,
                       "cuLaunchKernelEx of kernel '%s' (grid %ux%ux%u, block %ux%ux%u, %u bytes "
                       "of dynamic shared memory)",
                       name, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem);
    if (util_env_on("LOOM_SYNC")) {
        r = cu.cuCtxSynchronize();
        if (r != CUDA_SUCCESS)
            return cu_fail(NULL, r, err, errlen, "kernel '%s' (cuCtxSynchronize after launch)", name);
    }
    return LOOM_OK;
}

loom_status rt_gpu_launch(rt_gpu *g, loom_kernel *k, const int grid[3], const rt_launch_arg *args,
                          char *err, size_t errlen)
{
    const char *name = loom_kernel_name(k);
    int nargs = loom_kernel_num_args(k);
    if (nargs < 0 || nargs > LOOM_MAX_ARGS) {
        snprintf(err, errlen, "kernel '%s': bad argument count %d", name, nargs);
        return LOOM_ERR_INVALID;
    }
    void *params[LOOM_MAX_ARGS + RT_TMA_MAX_SPECS];
    for (int i = 0; i < nargs; i++) {
        loom_arg_info ai;
        if (!loom_kernel_arg_info(k, i, &ai)) {
            snprintf(err, errlen, "kernel '%s': no argument %d", name, i);
            return LOOM_ERR_INVALID;
        }
        if (ai.is_tensor) {
            /* the code generator issues 16-byte vector accesses where offsets allow,
             * so every tensor base must be 16-byte aligned (device allocations are) */
            size_t align = 16;
            if (args[i].dptr % align != 0) {
                snprintf(err, errlen,
                         "launch of '%s': argument %d ('%s') is at device address 0x%llx, not "
                         "16-byte aligned (loom's vector accesses need it; %s tensor)",
                         name, i, ai.name, (unsigned long long)args[i].dptr,
                         loom_dtype_name(ai.dtype));
                return LOOM_ERR_INVALID;
            }
            params[i] = (void *)&args[i].dptr;
        } else {
            switch (ai.dtype) {
            case LOOM_I32: params[i] = (void *)&args[i].s.i32; break;
            case LOOM_I64: params[i] = (void *)&args[i].s.i64; break;
            case LOOM_F32: params[i] = (void *)&args[i].s.f32; break;
            default:
                snprintf(err, errlen, "launch of '%s': argument %d ('%s') is a %s scalar, which the "
                         "GPU backend cannot pass", name, i, ai.name, loom_dtype_name(ai.dtype));
                return LOOM_ERR_UNSUPPORTED;
            }
        }
    }
    int warps = loom_kernel_num_warps(k);
    if (warps < 1 || warps * 32 > (g->props.max_threads_per_block ? g->props.max_threads_per_block : 1024)) {
        snprintf(err, errlen, "kernel '%s': %d warps per CTA is more than %s allows", name, warps,
                 g->props.name);
        return LOOM_ERR_INVALID;
    }
    loom_status st = enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    mc_entry e;
    st = get_function(g, k, &e, NULL, err, errlen);
    if (st != LOOM_OK)
        return st;
    /* TMA descriptors go after the kernel's own parameters, by value (the driver copies
     * them at the launch call, so stack storage is enough) */
    _Alignas(RT_TMA_DESC_ALIGN) unsigned char descs[RT_TMA_MAX_SPECS][RT_TMA_DESC_BYTES];
    int ntma = rt_tma_cache_count(e.tma);
    for (int t = 0; t < ntma; t++) {
        const rt_tma_spec *sp = rt_tma_cache_spec(e.tma, t);
        loom_arg_info ai;
        if (sp->arg < 0 || sp->arg >= nargs || !loom_kernel_arg_info(k, sp->arg, &ai)) {
            snprintf(err, errlen, "launch of '%s': TMA descriptor %d names argument %d; the kernel has "
                     "%d (a code generator bug)", name, t, sp->arg, nargs);
            return LOOM_ERR_INVALID;
        }
        char terr[512];
        st = rt_tma_cache_get(e.tma, t, &ai, args[sp->arg].dptr, descs[t], terr, sizeof terr);
        if (st != LOOM_OK) {
            snprintf(err, errlen, "launch of '%s': %s", name, terr);
            return st;
        }
        params[nargs + t] = descs[t];
    }
    unsigned gr[3] = {(unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2]};
    unsigned bl[3] = {(unsigned)warps * 32u, 1, 1};
    return launch_fn(g, (CUfunction)e.function, name, gr, bl, (unsigned)e.smem_bytes, params, err,
                     errlen);
}

loom_status rt_gpu_prepare(rt_gpu *g, loom_kernel *k, loom_compile_info *info, char *err,
                           size_t errlen)
{
    double t0 = util_now_ms();
    loom_compile_info local;
    if (!info)
        info = &local;
    memset(info, 0, sizeof *info);
    loom_status st = enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    mc_entry e;
    rt_gpu_stats last;
    st = get_function(g, k, &e, &last, err, errlen);
    info->source = last.result == RT_CACHE_MEMORY ? 1 : last.result == RT_CACHE_DISK ? 2 : 0;
    info->codegen_ms = last.codegen_ms;
    info->link_ms = last.link_ms;
    info->load_ms = last.load_ms;
    info->linker = last.result == RT_CACHE_MISS ? last.linker : NULL;
    info->total_ms = util_now_ms() - t0;
    return st;
}

/* ---------------------------------------------------------------- raw modules */

loom_status rt_gpu_module_load(rt_gpu *g, const void *image, size_t bytes, bool is_ptx,
                               const char *what, rt_gpu_module **out, char *err, size_t errlen)
{
    *out = NULL;
    (void)bytes;
    loom_status st = enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    void *cubin = NULL;
    size_t n = 0;
    if (is_ptx) {
        const char *linker;
        st = link_ptx(g, image, what, &cubin, &n, &linker, err, errlen);
        if (st != LOOM_OK)
            return st;
        image = cubin;
    }
    rt_gpu_module *m = calloc(1, sizeof *m);
    if (!m) {
        free(cubin);
        snprintf(err, errlen, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    st = load_image(g, image, what, &m->mod, err, errlen);
    free(cubin);
    if (st != LOOM_OK) {
        free(m);
        return st;
    }
    *out = m;
    return LOOM_OK;
}

void rt_gpu_module_unload(rt_gpu *g, rt_gpu_module *m)
{
    if (!g || !m)
        return;
    if (cu.cuCtxSetCurrent(g->ctx) == CUDA_SUCCESS)
        cu.cuModuleUnload(m->mod);
    free(m);
}

loom_status rt_gpu_module_launch(rt_gpu *g, rt_gpu_module *m, const char *fn, const unsigned grid[3],
                                 const unsigned block[3], unsigned smem_bytes, void **params,
                                 char *err, size_t errlen)
{
    loom_status st = enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    CUfunction f = NULL;
    CUresult r = cu.cuModuleGetFunction(&f, m->mod, fn);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuModuleGetFunction(\"%s\")", fn);
    st = set_smem(g, f, smem_bytes, fn, err, errlen);
    if (st != LOOM_OK)
        return st;
    return launch_fn(g, f, fn, grid, block, smem_bytes, params, err, errlen);
}

/* ---------------------------------------------------------------- timing */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

loom_status rt_gpu_time_ms(rt_gpu *g, rt_gpu_work_fn work, void *ctx, int warmup, int reps,
                           double *median_ms, char *err, size_t errlen)
{
    *median_ms = 0;
    if (!g || !work || reps < 1 || reps > 100000 || warmup < 0) {
        snprintf(err, errlen, "rt_gpu_time_ms: bad arguments (reps %d, warmup %d)", reps, warmup);
        return LOOM_ERR_INVALID;
    }
    loom_status st = enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    for (int i = 0; i < warmup; i++)
        if ((st = work(ctx, err, errlen)) != LOOM_OK)
            return st;
    CUevent *ev = calloc((size_t)reps + 1, sizeof *ev);
    double *t = calloc((size_t)reps, sizeof *t);
    int made = 0;
    if (!ev || !t) {
        snprintf(err, errlen, "out of host memory");
        st = LOOM_ERR_NOMEM;
        goto done;
    }
    for (; made <= reps; made++) {
        CUresult r = cu.cuEventCreate(&ev[made], CU_EVENT_DEFAULT);
        if (r != CUDA_SUCCESS) {
            st = cu_fail(g, r, err, errlen, "cuEventCreate");
            goto done;
        }
    }
    CUresult r = cu.cuEventRecord(ev[0], NULL);
    if (r != CUDA_SUCCESS) {
        st = cu_fail(g, r, err, errlen, "cuEventRecord");
        goto done;
    }
    for (int i = 0; i < reps; i++) {
        if ((st = work(ctx, err, errlen)) != LOOM_OK)
            goto done;
        /* the work may have made another context current */
        if ((st = enter(g, err, errlen)) != LOOM_OK)
            goto done;
        r = cu.cuEventRecord(ev[i + 1], NULL);
        if (r != CUDA_SUCCESS) {
            st = cu_fail(g, r, err, errlen, "cuEventRecord");
            goto done;
        }
    }
    r = cu.cuEventSynchronize(ev[reps]);
    if (r != CUDA_SUCCESS) {
        st = cu_fail(g, r, err, errlen, "cuEventSynchronize");
        goto done;
    }
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        r = cu.cuEventElapsedTime(&ms, ev[i], ev[i + 1]);
        if (r != CUDA_SUCCESS) {
            st = cu_fail(g, r, err, errlen, "cuEventElapsedTime");
            goto done;
        }
        t[i] = ms;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    *median_ms = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
done:
    for (int i = 0; i < made; i++)
        cu.cuEventDestroy_v2(ev[i]);
    free(ev);
    free(t);
    return st;
}

loom_status rt_gpu_time_each(rt_gpu *g, rt_gpu_work_fn before, rt_gpu_work_fn work, void *ctx,
                             int reps, double *times_ms, char *err, size_t errlen)
{
    if (!g || !work || !times_ms || reps < 1 || reps > 100000) {
        snprintf(err, errlen, "rt_gpu_time_each: bad arguments (reps %d)", reps);
        return LOOM_ERR_INVALID;
    }
    loom_status st = enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    CUevent *ev = calloc(2 * (size_t)reps, sizeof *ev);
    int made = 0;
    if (!ev) {
        snprintf(err, errlen, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    CUresult r = CUDA_SUCCESS;
    for (; made < 2 * reps; made++)
        if ((r = cu.cuEventCreate(&ev[made], CU_EVENT_DEFAULT)) != CUDA_SUCCESS) {
            st = cu_fail(g, r, err, errlen, "cuEventCreate");
            goto done;
        }
    for (int i = 0; i < reps; i++) {
        if (before && (st = before(ctx, err, errlen)) != LOOM_OK)
            goto done;
        if ((st = enter(g, err, errlen)) != LOOM_OK)
            goto done;
        if ((r = cu.cuEventRecord(ev[2 * i], NULL)) != CUDA_SUCCESS) {
            st = cu_fail(g, r, err, errlen, "cuEventRecord");
            goto done;
        }
        if ((st = work(ctx, err, errlen)) != LOOM_OK)
            goto done;
        if ((st = enter(g, err, errlen)) != LOOM_OK)
            goto done;
        if ((r = cu.cuEventRecord(ev[2 * i + 1], NULL)) != CUDA_SUCCESS) {
            st = cu_fail(g, r, err, errlen, "cuEventRecord");
            goto done;
        }
    }
    if ((r = cu.cuEventSynchronize(ev[2 * reps - 1])) != CUDA_SUCCESS) {
        st = cu_fail(g, r, err, errlen, "cuEventSynchronize");
        goto done;
    }
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        if ((r = cu.cuEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1])) != CUDA_SUCCESS) {
            st = cu_fail(g, r, err, errlen, "cuEventElapsedTime");
            goto done;
        }
        times_ms[i] = ms;
    }
done:
    for (int i = 0; i < made; i++)
        cu.cuEventDestroy_v2(ev[i]);
    free(ev);
    return st;
}

loom_status rt_gpu_time_each_ms(rt_gpu *g, rt_gpu_work_fn prep, rt_gpu_work_fn work, void *ctx,
                                int warmup, int reps, double *median_ms, char *err, size_t errlen)
{
    *median_ms = 0;
    if (warmup < 0 || reps < 1 || reps > 100000) {
        snprintf(err, errlen, "rt_gpu_time_each_ms: bad arguments (reps %d, warmup %d)", reps, warmup);
        return LOOM_ERR_INVALID;
    }
    loom_status st;
    for (int i = 0; i < warmup; i++) {
        if (prep && (st = prep(ctx, err, errlen)) != LOOM_OK)
            return st;
        if ((st = work(ctx, err, errlen)) != LOOM_OK)
            return st;
    }
    double *t = calloc((size_t)reps, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    st = rt_gpu_time_each(g, prep, work, ctx, reps, t, err, errlen);
    if (st == LOOM_OK) {
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        *median_ms = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    }
    free(t);
    return st;
}
