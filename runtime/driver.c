/*
 * driver.c -- the CUDA driver through dlopen: the function table, error messages, and
 * opening a device (driver.h; rt.h and gpu.h for the rest of loom).
 *
 * libcuda is opened with dlopen ("libcuda.so.1", then "libcuda.so"; LOOM_CUDA_LIB names
 * another file) and every entry point is looked up by its versioned symbol name, so
 * libloom neither needs cuda.h to build nor libcuda to start: without a driver, a stub
 * driver or a device, rt_gpu_open returns LOOM_ERR_NO_GPU with the reason.  The driver
 * is loaded once per process and never unloaded (unloading libcuda is not safe while its
 * threads run).  cuTensorMapEncodeTiled is looked up apart from the other entry points:
 * a driver without it (before CUDA 12) still runs every kernel that uses no TMA.
 *
 * Each rt_gpu holds the primary context of device LOOM_DEVICE (default 0), made current
 * on the calling thread by every call (cu_enter), so any thread may use it.
 *
 * Every CUDA error reads "<call> failed: <NAME> (<text>)" (cu_fail); a sticky fault also
 * names the last kernel launched: launches are asynchronous, so the call that reports a
 * fault is often not the one that caused it.  Where a kernel compiled with the hang
 * check trapped, the error opens with its report instead (hang.c): which program, task
 * and thread waited past the bound on which barrier, with the source lines.
 */
#define _GNU_SOURCE
#include "codegen.h"
#include "driver.h"
#include "../util/util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the driver table */

cu_driver cu;
static pthread_mutex_t cu_lock = PTHREAD_MUTEX_INITIALIZER;

void *rt_dlopen_first(const char *const *names, int n, const char *env_override, char *path,
                      size_t pathlen, char *why, size_t whylen)
{
    const char *env = env_override ? util_env_str(env_override) : NULL;
    if (env) {
        names = &env; /* an explicit override is the only one tried */
        n = 1;
    }
    why[0] = 0;
    for (int i = 0; i < n; i++) {
        if (!names[i] || !*names[i])
            continue;
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            if (path)
                snprintf(path, pathlen, "%s", names[i]);
            return lib;
        }
        if (!why[0]) {
            const char *e = dlerror();
            snprintf(why, whylen, "%s", e ? e : names[i]);
        }
    }
    return NULL;
}

loom_status cu_load(char *err, size_t errlen)
{
    loom_status st = LOOM_OK;
    pthread_mutex_lock(&cu_lock);
    if (cu.lib)
        goto out;
    static const char *const names[2] = {"libcuda.so.1", "libcuda.so"};
    char first_err[512];
    void *lib = rt_dlopen_first(names, 2, "LOOM_CUDA_LIB", cu.path, sizeof cu.path, first_err,
                                sizeof first_err);
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
void cu_describe(CUresult r, char *buf, size_t n)
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

/* ---------------------------------------------------------------- errors, the current context */

/* Write "<what> failed: NAME (text)" and, for a sticky fault, the last kernel launched. */
loom_status cu_fail(rt_gpu *g, CUresult r, char *err, size_t errlen, const char *fmt, ...)
{
    char what[512], desc[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    cu_describe(r, desc, sizeof desc);
    bool fault = r == CUDA_ERROR_ILLEGAL_ADDRESS || r == CUDA_ERROR_LAUNCH_FAILED ||
                 r == CUDA_ERROR_LAUNCH_TIMEOUT || (r >= 710 && r <= 720);
    char hang[1024];
    if (g && rt_hang_report(g, hang, sizeof hang)) /* a stuck wait trapped: the context is dead */
        snprintf(err, errlen, "%s (LOOM_HANG_CHECK: the kernel trapped, so %s failed: %s)", hang, what, desc);
    else if (fault && g && g->last_kernel[0] && !g->sync_each)
        snprintf(err, errlen,
                 "%s failed: %s; the last kernel launched was '%s' (launches are asynchronous: "
                 "set LOOM_SYNC=1 to check each one)",
                 what, desc, g->last_kernel);
    else
        snprintf(err, errlen, "%s failed: %s", what, desc);
    return LOOM_ERR_CUDA;
}

loom_status cu_enter(rt_gpu *g, char *err, size_t errlen)
{
    /* a launch's path: reading the thread's context is cheaper than setting it */
    CUcontext cur = NULL;
    if (cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == g->ctx)
        return LOOM_OK;
    CHECK(g, cu.cuCtxSetCurrent(g->ctx), "cuCtxSetCurrent");
    return LOOM_OK;
}

/* ---------------------------------------------------------------- devices */

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
    loom_status st = cu_load(err, errlen);
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
    const char *env = util_env_str("LOOM_DEVICE");
    if (env) {
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
    g->sync_each = util_env_on("LOOM_SYNC"); /* read once: a launch should not scan the environment */
    g->hang_ms = cg_hang_check_ms();          /* so every kernel of g is compiled and keyed alike */
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
    if (g->hang_ms > 0 && (st = rt_hang_open(g, err, errlen)) != LOOM_OK) {
        pthread_mutex_destroy(&g->modules_lock);
        cu.cuDevicePrimaryCtxRelease_v2(g->dev);
        free(g);
        return st;
    }
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
    rt_hang_close(g);
    pthread_mutex_destroy(&g->modules_lock);
    cu.cuDevicePrimaryCtxRelease_v2(g->dev);
    free(g);
}

const char *rt_gpu_name(const rt_gpu *g) { return g ? g->props.name : ""; }
const rt_gpu_props *rt_gpu_properties(const rt_gpu *g) { return g ? &g->props : NULL; }
