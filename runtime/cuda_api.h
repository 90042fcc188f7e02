/*
 * cuda_api.h -- the small part of the CUDA driver API that loom uses, declared by hand.
 *
 * loom loads libcuda with dlopen at run time (runtime/driver.c), so it must build on a
 * machine with no CUDA toolkit and run on one with no driver (LOOM_ERR_NO_GPU).  This
 * header therefore declares its own copies of the driver's types, the enum values it
 * passes, and one function-pointer type per entry point.  Every value below was checked
 * against cuda.h of CUDA 13.0 (CUDA_VERSION 13000); they are ABI and never change.
 * Names match cuda.h, so this header must never be included together with cuda.h.
 *
 * Entry points are looked up under the versioned symbol names that cuda.h maps the
 * plain names to (cuMemAlloc -> cuMemAlloc_v2, ...): those are the ABI the driver keeps.
 */
#ifndef LOOM_CUDA_API_H
#define LOOM_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef CUDA_VERSION
#error "cuda_api.h must not be included together with cuda.h"
#endif

/* ---------------------------------------------------------------- handles and scalars */

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 on 64-bit hosts */
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUlinkState_st *CUlinkState;

/* ---------------------------------------------------------------- CUresult values */

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_STUB_LIBRARY = 34,
    CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
    CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
    CUDA_ERROR_LAUNCH_TIMEOUT = 702,
    CUDA_ERROR_LAUNCH_FAILED = 719,
};

/* ---------------------------------------------------------------- enums passed in */

typedef int CUdevice_attribute;
enum {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
    CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
    CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,
    CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};

typedef int CUfunction_attribute;
enum {
    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
    CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
    CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

typedef int CUjit_option;
enum {
    CU_JIT_MAX_REGISTERS = 0,
    CU_JIT_THREADS_PER_BLOCK = 1,
    CU_JIT_WALL_TIME = 2,
    CU_JIT_INFO_LOG_BUFFER = 3,
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
    CU_JIT_ERROR_LOG_BUFFER = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
    CU_JIT_OPTIMIZATION_LEVEL = 7,
    CU_JIT_TARGET_FROM_CUCONTEXT = 8,
    CU_JIT_TARGET = 9,
    CU_JIT_GENERATE_DEBUG_INFO = 11,
    CU_JIT_LOG_VERBOSE = 12,
    CU_JIT_GENERATE_LINE_INFO = 13,
};

typedef int CUjitInputType;
enum {
    CU_JIT_INPUT_CUBIN = 0,
    CU_JIT_INPUT_PTX = 1,
    CU_JIT_INPUT_FATBINARY = 2,
};

enum {
    CU_EVENT_DEFAULT = 0x0,
    CU_EVENT_BLOCKING_SYNC = 0x1,
    CU_EVENT_DISABLE_TIMING = 0x2,
};

/* pinned host memory the device reads and writes through (the hang check's record) */
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02

/* ---------------------------------------------------------------- cuLaunchKernelEx */

typedef int CUlaunchAttributeID;
enum { CU_LAUNCH_ATTRIBUTE_IGNORE = 0 };

typedef union CUlaunchAttributeValue_union {
    char pad[64]; /* the driver's union is padded to 64 bytes */
} CUlaunchAttributeValue;

typedef struct CUlaunchAttribute_st {
    CUlaunchAttributeID id;
    char pad[8 - sizeof(CUlaunchAttributeID)];
    CUlaunchAttributeValue value;
} CUlaunchAttribute;

typedef struct CUlaunchConfig_st {
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

_Static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute layout");
_Static_assert(sizeof(CUlaunchConfig) == 56, "CUlaunchConfig layout");

/* ---------------------------------------------------------------- TMA descriptors */

/* CUtensorMap: 128 opaque bytes, 64-byte aligned.  The enums it is encoded from
 * (CUtensorMapDataType, ...Interleave, ...Swizzle, ...L2promotion, ...FloatOOBfill) are
 * passed as ints; runtime/tma.c holds the values it uses. */
typedef struct CUtensorMap_st {
    _Alignas(64) unsigned long long opaque[16];
} CUtensorMap;
typedef unsigned int cuuint32_t;
typedef unsigned long long cuuint64_t;

_Static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap layout");

/* ---------------------------------------------------------------- entry points */

typedef CUresult (*PFN_cuInit)(unsigned int flags);
typedef CUresult (*PFN_cuDriverGetVersion)(int *version);
typedef CUresult (*PFN_cuGetErrorName)(CUresult error, const char **str);
typedef CUresult (*PFN_cuGetErrorString)(CUresult error, const char **str);
typedef CUresult (*PFN_cuDeviceGetCount)(int *count);
typedef CUresult (*PFN_cuDeviceGet)(CUdevice *dev, int ordinal);
typedef CUresult (*PFN_cuDeviceGetName)(char *name, int len, CUdevice dev);
typedef CUresult (*PFN_cuDeviceGetAttribute)(int *value, CUdevice_attribute attrib, CUdevice dev);
typedef CUresult (*PFN_cuDeviceTotalMem_v2)(size_t *bytes, CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxRelease_v2)(CUdevice dev);
typedef CUresult (*PFN_cuCtxSetCurrent)(CUcontext ctx);
typedef CUresult (*PFN_cuCtxGetCurrent)(CUcontext *ctx);
typedef CUresult (*PFN_cuCtxSynchronize)(void);
typedef CUresult (*PFN_cuMemAlloc_v2)(CUdeviceptr *dptr, size_t bytes);
typedef CUresult (*PFN_cuMemFree_v2)(CUdeviceptr dptr);
typedef CUresult (*PFN_cuMemcpyHtoD_v2)(CUdeviceptr dst, const void *src, size_t bytes);
typedef CUresult (*PFN_cuMemcpyDtoH_v2)(void *dst, CUdeviceptr src, size_t bytes);
typedef CUresult (*PFN_cuMemcpyDtoD_v2)(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
typedef CUresult (*PFN_cuMemsetD8_v2)(CUdeviceptr dst, unsigned char uc, size_t n);
typedef CUresult (*PFN_cuLinkCreate_v2)(unsigned int nopt, CUjit_option *opts, void **vals,
                                        CUlinkState *state);
typedef CUresult (*PFN_cuLinkAddData_v2)(CUlinkState state, CUjitInputType type, void *data,
                                         size_t size, const char *name, unsigned int nopt,
                                         CUjit_option *opts, void **vals);
typedef CUresult (*PFN_cuLinkComplete)(CUlinkState state, void **cubin, size_t *size);
typedef CUresult (*PFN_cuLinkDestroy)(CUlinkState state);
typedef CUresult (*PFN_cuModuleLoadDataEx)(CUmodule *mod, const void *image, unsigned int nopt,
                                           CUjit_option *opts, void **vals);
typedef CUresult (*PFN_cuModuleUnload)(CUmodule mod);
typedef CUresult (*PFN_cuModuleGetFunction)(CUfunction *fn, CUmodule mod, const char *name);
typedef CUresult (*PFN_cuFuncSetAttribute)(CUfunction fn, CUfunction_attribute attrib, int value);
typedef CUresult (*PFN_cuFuncGetAttribute)(int *value, CUfunction_attribute attrib, CUfunction fn);
typedef CUresult (*PFN_cuLaunchKernelEx)(const CUlaunchConfig *config, CUfunction fn,
                                         void **params, void **extra);
/* the older launch call, without attributes: bench_launch times it beside cuLaunchKernelEx */
typedef CUresult (*PFN_cuLaunchKernel)(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                       unsigned by, unsigned bz, unsigned smem, CUstream stream, void **params,
                                       void **extra);
typedef CUresult (*PFN_cuEventCreate)(CUevent *ev, unsigned int flags);
#define CU_STREAM_NON_BLOCKING 0x1 /* no implicit synchronization with the legacy stream */
typedef CUresult (*PFN_cuStreamCreate)(CUstream *stream, unsigned int flags);
typedef CUresult (*PFN_cuStreamDestroy_v2)(CUstream stream);
typedef CUresult (*PFN_cuStreamSynchronize)(CUstream stream);
/* CUDA graphs: a stream's launches captured once, replayed by one call */
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
#define CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1
typedef CUresult (*PFN_cuStreamBeginCapture_v2)(CUstream stream, int mode);
typedef CUresult (*PFN_cuStreamEndCapture)(CUstream stream, CUgraph *graph);
typedef CUresult (*PFN_cuGraphInstantiateWithFlags)(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
typedef CUresult (*PFN_cuGraphLaunch)(CUgraphExec exec, CUstream stream);
typedef CUresult (*PFN_cuGraphExecDestroy)(CUgraphExec exec);
typedef CUresult (*PFN_cuGraphDestroy)(CUgraph graph);
typedef CUresult (*PFN_cuEventDestroy_v2)(CUevent ev);
typedef CUresult (*PFN_cuEventRecord)(CUevent ev, CUstream stream);
typedef CUresult (*PFN_cuEventSynchronize)(CUevent ev);
typedef CUresult (*PFN_cuEventQuery)(CUevent ev);
typedef CUresult (*PFN_cuMemHostAlloc)(void **p, size_t bytes, unsigned int flags);
typedef CUresult (*PFN_cuMemHostGetDevicePointer_v2)(CUdeviceptr *dptr, void *p, unsigned int flags);
typedef CUresult (*PFN_cuMemFreeHost)(void *p);
typedef CUresult (*PFN_cuModuleGetGlobal_v2)(CUdeviceptr *dptr, size_t *bytes, CUmodule mod, const char *name);
typedef CUresult (*PFN_cuEventElapsedTime)(float *ms, CUevent start, CUevent end);
typedef CUresult (*PFN_cuTensorMapEncodeTiled)(CUtensorMap *map, int dtype, cuuint32_t rank,
                                               void *base, const cuuint64_t *dims,
                                               const cuuint64_t *strides, const cuuint32_t *box,
                                               const cuuint32_t *elem_strides, int interleave,
                                               int swizzle, int l2_promotion, int oob_fill);

#endif /* LOOM_CUDA_API_H */
