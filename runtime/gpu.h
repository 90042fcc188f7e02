/*
 * gpu.h -- internals of the GPU backend beyond rt.h: device properties, more memory
 * calls, compiling without launching, timing, compile statistics, and raw modules (for
 * NVRTC references).
 *
 * The backend (runtime/driver.c and its neighbours; driver.h lists them) opens libcuda
 * with dlopen and uses the device's primary context, so every rt_gpu opened on the same
 * device shares one context: device pointers of a loom_runtime's buffers are valid for
 * an rt_gpu a benchmark opens itself, and events recorded there time kernels launched
 * through loom_launch.
 *
 * Compiled kernels are kept by the module cache (module_cache.h), in memory per rt_gpu
 * and on disk.  A kernel that reads tensors through TMA takes descriptors after its own
 * parameters (tma.h), which each launch encodes and appends.
 *
 * Prefixes: rt_gpu_, rt_cache_.
 */
#ifndef LOOM_GPU_H
#define LOOM_GPU_H

#include "rt.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- device properties */

typedef struct rt_gpu_props {
    char name[256];
    int ordinal;            /* the device index (LOOM_DEVICE) */
    int cc_major, cc_minor; /* compute capability */
    char arch[16];          /* "sm_90a" for 9.0, else "sm_XY" */
    int sm_count;
    int max_threads_per_block;
    int max_smem_per_block;       /* bytes, without opt-in (48 KiB) */
    int max_smem_per_block_optin; /* bytes, with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    int l2_bytes;
    int clock_khz, mem_clock_khz, mem_bus_bits; /* 0 when the driver does not report them */
    size_t total_mem;
    int driver_version; /* e.g. 13000 */
} rt_gpu_props;

const rt_gpu_props *rt_gpu_properties(const rt_gpu *g);

/* The arch string loom compiles for, given a compute capability: 9.0 -> "sm_90a". */
void rt_gpu_arch_name(int cc_major, int cc_minor, char *buf, size_t n);

/* Device-to-device copy on the default stream (asynchronous to the host). */
loom_status rt_gpu_dtod(rt_gpu *g, uint64_t dst, uint64_t src, size_t bytes, char *err, size_t errlen);

/* Find or compile verified kernel k without launching it (memory cache, disk cache, then
 * the code generator), and say where it came from and how long each step took. */
loom_status rt_gpu_prepare(rt_gpu *g, loom_kernel *k, loom_compile_info *info, char *err,
                           size_t errlen);

/* Wait for all work on the device; reports a fault of an earlier asynchronous launch. */
loom_status rt_gpu_sync(rt_gpu *g, char *err, size_t errlen);
/* Wait for the work on the default stream (loom_runtime_sync), at most timeout_ms when > 0:
 * then LOOM_ERR_TIMEOUT naming the last kernel launched, the work still running. */
loom_status rt_gpu_sync_timeout(rt_gpu *g, int timeout_ms, char *err, size_t errlen);

/* ---------------------------------------------------------------- timing */

/* One launch (or any GPU work) to time: returns LOOM_OK or an error (message in err). */
typedef loom_status (*rt_gpu_work_fn)(void *ctx, char *err, size_t errlen);

/* Run work `warmup` times, then `reps` times (1..100000) with an event recorded between
 * consecutive runs; return the median of the per-run times in milliseconds.  Runs are
 * back to back on the default stream, which loom launches use. */
loom_status rt_gpu_time_ms(rt_gpu *g, rt_gpu_work_fn work, void *ctx, int warmup, int reps,
                           double *median_ms, char *err, size_t errlen);

/* Run `before` (untimed: an L2 flush, say; may be NULL), then `work` between a pair of
 * events, `reps` times (1..100000); times_ms[i] receives run i's time.  The autotuner's
 * measurement: unlike rt_gpu_time_ms, what runs between two timed runs is not timed. */
loom_status rt_gpu_time_each(rt_gpu *g, rt_gpu_work_fn before, rt_gpu_work_fn work, void *ctx,
                             int reps, double *times_ms, char *err, size_t errlen);
/* The median of `reps` such runs after `warmup` untimed ones (prep before each). */
loom_status rt_gpu_time_each_ms(rt_gpu *g, rt_gpu_work_fn prep, rt_gpu_work_fn work, void *ctx,
                                int warmup, int reps, double *median_ms, char *err, size_t errlen);

/* Compile (runtime/link.c) PTX into a cubin (*cubin malloc'ed) with the toolkit's ptxas as a whole
 * program for arch (so setmaxnreg is honoured).  LOOM_ERR_UNSUPPORTED where no ptxas runs
 * or LOOM_PTXAS=0; LOOM_ERR_COMPILE with ptxas's messages when it fails. */
loom_status rt_ptxas_compile(const char *ptx, const char *arch, void **cubin, size_t *n, char *err,
                             size_t errlen);

/* ---------------------------------------------------------------- compile statistics */

typedef enum rt_cache_result {
    RT_CACHE_NONE = 0, /* no launch yet */
    RT_CACHE_MEMORY,   /* module found in this rt_gpu's memory cache */
    RT_CACHE_DISK,     /* cubin read from the disk cache (no code generation) */
    RT_CACHE_MISS,     /* compiled: cg_compile + link */
} rt_cache_result;

const char *rt_cache_result_name(rt_cache_result r);

/* Process-wide: the last kernel lookup and running counters. */
typedef struct rt_gpu_stats {
    char kernel[64];          /* name of the last kernel looked up */
    rt_cache_result result;   /* how it was found */
    double key_ms;            /* print IR + hash */
    double codegen_ms;        /* cg_compile (miss only) */
    double link_ms;           /* PTX -> cubin (miss only) */
    const char *linker;       /* "driver" (cuLink*), "nvJitLink", "ptxas" (setmaxnreg) or "PTX load" (setmaxnreg without ptxas); miss only */
    double disk_ms;           /* reading (hit) or writing (miss) the cache file */
    double load_ms;           /* cuModuleLoadData + cuModuleGetFunction */
    size_t ptx_bytes, cubin_bytes;
    uint64_t lookups, memory_hits, disk_hits, misses;
    uint64_t disk_rejected;   /* corrupt or foreign cache files deleted */
    uint64_t disk_write_failures;
} rt_gpu_stats;

void rt_gpu_stats_get(rt_gpu_stats *out);
void rt_gpu_stats_reset(void);

/* ---------------------------------------------------------------- raw modules */

/* A module loaded from PTX or a cubin outside loom's compile path (NVRTC references). */
typedef struct rt_gpu_module rt_gpu_module;

/* image is PTX text (NUL-terminated) or a cubin; PTX is linked with -O3 first.  On
 * failure the JIT log is in err. */
loom_status rt_gpu_module_load(rt_gpu *g, const void *image, size_t bytes, bool is_ptx,
                               const char *what, rt_gpu_module **out, char *err, size_t errlen);
void rt_gpu_module_unload(rt_gpu *g, rt_gpu_module *m);
/* Launch function `fn` of module m; params[i] points at the i-th kernel parameter. */
loom_status rt_gpu_module_launch(rt_gpu *g, rt_gpu_module *m, const char *fn, const unsigned grid[3],
                                 const unsigned block[3], unsigned smem_bytes, void **params,
                                 char *err, size_t errlen);

/* The same on stream `stream` (from rt_gpu_stream_create; NULL: the default stream). */
loom_status rt_gpu_module_launch_on(rt_gpu *g, rt_gpu_module *m, const char *fn, const unsigned grid[3],
                                    const unsigned block[3], unsigned smem_bytes, void **params, void *stream,
                                    char *err, size_t errlen);

/* ---------------------------------------------------------------- streams */

/* A stream that runs beside the default one (non-blocking: no implicit synchronization
 * with it), for work that must overlap loom's launches (tests of forward progress). */
loom_status rt_gpu_stream_create(rt_gpu *g, void **stream, char *err, size_t errlen);
loom_status rt_gpu_stream_sync(rt_gpu *g, void *stream, char *err, size_t errlen);
void rt_gpu_stream_destroy(rt_gpu *g, void *stream);

/* ---------------------------------------------------------------- graphs and raw launches */

/* Capture the launches made on `stream` (from rt_gpu_stream_create) between begin and
 * end into a CUDA graph, instantiated as *exec; replay it with rt_gpu_graph_launch. */
loom_status rt_gpu_capture_begin(rt_gpu *g, void *stream, char *err, size_t errlen);
loom_status rt_gpu_capture_end(rt_gpu *g, void *stream, void **exec, char *err, size_t errlen);
loom_status rt_gpu_graph_launch(rt_gpu *g, void *exec, void *stream, char *err, size_t errlen);
void rt_gpu_graph_destroy(rt_gpu *g, void *exec);

/* Kernel k's loaded function (compiled, or found in a cache, as a launch would) and its
 * dynamic shared memory: for comparing loom's launch path with the raw driver call. */
loom_status rt_gpu_kernel_function(rt_gpu *g, loom_kernel *k, void **function, unsigned *smem_bytes, char *err,
                                   size_t errlen);
/* cuLaunchKernelEx (raw_launch, the call loom makes) or cuLaunchKernel (raw_launch_legacy) of
 * a function from rt_gpu_kernel_function, nothing else. */
loom_status rt_gpu_raw_launch(rt_gpu *g, void *function, const unsigned grid[3], const unsigned block[3],
                              unsigned smem_bytes, void **params, void *stream);
loom_status rt_gpu_raw_launch_legacy(rt_gpu *g, void *function, const unsigned grid[3], const unsigned block[3],
                                     unsigned smem_bytes, void **params, void *stream);

#endif /* LOOM_GPU_H */
