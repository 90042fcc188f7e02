/*
 * driver.h -- what the files of the GPU backend share, and nothing the rest of loom sees
 * (that is rt.h and gpu.h): the driver's function table, struct rt_gpu, the formatting
 * every CUDA error goes through, and the few calls one file makes into another.
 *
 * The backend, one concern a file:
 *   driver.c   libcuda through dlopen, the function table, error messages, device open
 *              and close, device properties
 *   memory.c   allocations, copies, memset, waiting for the device
 *   link.c     PTX -> cubin: the driver's JIT (cuLink*) or nvJitLink, and which one
 *   module.c   a kernel's module: memory cache, disk cache, else code generator + link;
 *              raw modules (NVRTC references); compile statistics
 *   launch.c   launches, and the TMA descriptors appended to them
 *   timing.c   event timing
 *   hang.c     the hang check's record and report (hang.h)
 * over module_cache.c (keys, cache files, the in-memory table; module_cache.h) and tma.c
 * (descriptor checks and their cache; tma.h).
 *
 * Only the files of runtime/ include this header.  Prefixes: cu_ for the driver's table
 * and its errors (driver.c), rt_ for the rest.
 */
#ifndef LOOM_DRIVER_H
#define LOOM_DRIVER_H

#include "cuda_api.h"
#include "gpu.h"
#include "module_cache.h"

#include <pthread.h>
#include <stddef.h>

/* ---------------------------------------------------------------- the driver table (driver.c) */

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
    X(cuCtxGetCurrent, "cuCtxGetCurrent")                                                          \
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
    X(cuLaunchKernel, "cuLaunchKernel")                                                            \
    X(cuEventCreate, "cuEventCreate")                                                              \
    X(cuEventDestroy_v2, "cuEventDestroy_v2")                                                      \
    X(cuEventRecord, "cuEventRecord")                                                              \
    X(cuEventSynchronize, "cuEventSynchronize")                                                    \
    X(cuEventQuery, "cuEventQuery")                                                                \
    X(cuMemHostAlloc, "cuMemHostAlloc")                                                            \
    X(cuMemHostGetDevicePointer_v2, "cuMemHostGetDevicePointer_v2")                                \
    X(cuMemFreeHost, "cuMemFreeHost")                                                              \
    X(cuModuleGetGlobal_v2, "cuModuleGetGlobal_v2")                                                \
    X(cuStreamCreate, "cuStreamCreate")                                                            \
    X(cuStreamDestroy_v2, "cuStreamDestroy_v2")                                                    \
    X(cuStreamSynchronize, "cuStreamSynchronize")                                                  \
    X(cuStreamBeginCapture_v2, "cuStreamBeginCapture_v2")                                          \
    X(cuStreamEndCapture, "cuStreamEndCapture")                                                    \
    X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags")                                  \
    X(cuGraphLaunch, "cuGraphLaunch")                                                              \
    X(cuGraphExecDestroy, "cuGraphExecDestroy")                                                    \
    X(cuGraphDestroy, "cuGraphDestroy")

/* The loaded driver: filled once per process by cu_load, read without a lock after. */
enum { RT_RECENT_KEYS = 32 };

typedef struct cu_driver {
    void *lib;
    char path[256];
#define DECL(fn, sym) PFN_##fn fn;
    CU_FUNCS(DECL)
#undef DECL
    PFN_cuEventElapsedTime cuEventElapsedTime; /* _v2 where the driver has it */
    PFN_cuTensorMapEncodeTiled cuTensorMapEncodeTiled; /* NULL before CUDA 12 */
} cu_driver;
extern cu_driver cu;

/* Load libcuda and its entry points once per process.  A failure is not remembered, so a
 * later call (after LOOM_CUDA_LIB changed, say) tries again. */
loom_status cu_load(char *err, size_t errlen);


/* ---------------------------------------------------------------- rt_gpu and errors (driver.c) */

struct rt_gpu {
    CUdevice dev;
    CUcontext ctx;
    bool sync_each; /* LOOM_SYNC=1 when the backend was opened: synchronize after every launch */
    rt_gpu_props props;
    mc_table modules;  /* kernels compiled through rt_gpu_launch */
    pthread_mutex_t modules_lock; /* guards modules: the autotuner compiles on several threads */
    /* the key of the kernels launched last, by (uid, gen) (under modules_lock): a launch
     * of an unchanged kernel finds its function without hashing its IR */
    struct {
        uint64_t uid, gen;
        mc_key key;
        size_t index; /* where the key's entry was last found in modules (a hint) */
    } recent[RT_RECENT_KEYS];
    char last_kernel[128]; /* last kernel launched: named when a later call reports a fault */
    /* the hang check (hang.c): its bound (LOOM_HANG_CHECK when opened; 0: off), the
     * record in host-mapped memory and its device address, the last module tag given */
    int hang_ms;
    void *hang_rec;
    CUdeviceptr hang_dptr;
    uint32_t hang_tags;
};

/* "CUDA_ERROR_X (text)" for a result code. */
void cu_describe(CUresult r, char *buf, size_t n);

/* Write "<what> failed: NAME (text)" and, for a sticky fault, the last kernel launched;
 * returns LOOM_ERR_CUDA.  g may be NULL. */
loom_status cu_fail(rt_gpu *g, CUresult r, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define CHECK(g, call, what)                                                                       \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return cu_fail(g, r_, err, errlen, "%s", what);                                        \
    } while (0)

/* Make g's context current on the calling thread: every call that reaches the device
 * starts here, so any thread may use an rt_gpu. */
loom_status cu_enter(rt_gpu *g, char *err, size_t errlen);

/* ---------------------------------------------------------------- across files */

/* Bytes kept of a JIT error log (link.c, module.c). */
#define JIT_LOG_BYTES 8192

/* link.c: link PTX into a cubin (*cubin malloc'ed) with the chosen linker; *linker names
 * the one that made it ("driver", "nvJitLink", "ptxas", or "PTX load": the image is the
 * PTX itself).  nvJitLink falls back to the driver, ptxas to the PTX image, where they
 * cannot be used or fail. */
loom_status rt_link_ptx(rt_gpu *g, const char *ptx, const char *what, void **cubin, size_t *n,
                        const char **linker, char *err, size_t errlen);
/* link.c: a cubin this linker ("nvJitLink" or "ptxas") made would not load (the driver is
 * older than the toolkit): the linker is not used again in this process.  False for a
 * linker that cannot be turned off (then there is nothing to retry with). */
bool rt_link_reject(const char *linker);

/* module.c: find or build the function for kernel k (memory cache, disk cache, code
 * generator); *out is a copy of the table's entry, *lastp (when given) says how it went. */
loom_status rt_get_function(rt_gpu *g, loom_kernel *k, mc_entry *out, rt_gpu_stats *lastp,
                            char *err, size_t errlen);

/* hang.c: the hang check's record (when g->hang_ms > 0): made and freed with g; a
 * loaded module's CG_HANG_GLOBAL pointed at it, with a new tag in *tag (0: the module
 * has no waits); the report of a record a kernel wrote (false: none). */
loom_status rt_hang_open(rt_gpu *g, char *err, size_t errlen);
void rt_hang_close(rt_gpu *g);
loom_status rt_hang_attach(rt_gpu *g, CUmodule mod, const char *name, uint32_t *tag, char *err, size_t errlen);
bool rt_hang_report(rt_gpu *g, char *buf, size_t n);

/* launch.c: launch fn on the default stream (synchronized when LOOM_SYNC=1), recording
 * its name for later fault reports. */
loom_status rt_launch_fn(rt_gpu *g, CUfunction fn, const char *name, const unsigned grid[3],
                         const unsigned block[3], unsigned smem, void **params, char *err,
                         size_t errlen);
/* cuLaunchKernelEx's configuration: the grid, the block, dynamic shared memory, stream. */
void rt_launch_config(CUlaunchConfig *cfg, const unsigned grid[3], const unsigned block[3], unsigned smem,
                      CUstream stream);
/* The same on a given stream (NULL: the default stream). */
loom_status rt_launch_fn_on(rt_gpu *g, CUfunction fn, const char *name, const unsigned grid[3],
                            const unsigned block[3], unsigned smem, void **params, CUstream stream, char *err,
                            size_t errlen);

#endif /* LOOM_DRIVER_H */
