/*
 * rt.h -- runtime internals: the GPU backend as the rest of loom sees it.
 *
 * runtime/runtime.c owns loom_runtime and loom_buffer and dispatches each launch to the
 * interpreter or to the GPU backend below.  The GPU backend (runtime/driver.c and its
 * neighbours; driver.h lists them) loads libcuda with dlopen, so a machine without a
 * driver gets LOOM_ERR_NO_GPU instead of a crash at start-up.
 *
 * Prefix: rt_.
 */
#ifndef LOOM_RT_H
#define LOOM_RT_H

#include "loom.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rt_gpu rt_gpu;

/* Open the driver, pick device 0 (or LOOM_DEVICE), make a context.  On failure return
 * LOOM_ERR_NO_GPU or LOOM_ERR_CUDA with a message in err. */
loom_status rt_gpu_open(rt_gpu **out, char *err, size_t errlen);
void rt_gpu_close(rt_gpu *g);
const char *rt_gpu_name(const rt_gpu *g);

loom_status rt_gpu_alloc(rt_gpu *g, size_t bytes, uint64_t *dptr, char *err, size_t errlen);
void rt_gpu_free(rt_gpu *g, uint64_t dptr);
loom_status rt_gpu_htod(rt_gpu *g, uint64_t dst, const void *src, size_t bytes, char *err, size_t errlen);
loom_status rt_gpu_dtoh(rt_gpu *g, void *dst, uint64_t src, size_t bytes, char *err, size_t errlen);
loom_status rt_gpu_memset8(rt_gpu *g, uint64_t dst, unsigned char byte, size_t bytes, char *err,
                           size_t errlen);

/* Compile (or find in the module cache) and launch verified kernel k.  args[i] is the
 * device pointer of tensor argument i or the scalar's bits. */
typedef struct rt_launch_arg {
    uint64_t dptr;
    union {
        int32_t i32;
        int64_t i64;
        float f32;
    } s;
} rt_launch_arg;
loom_status rt_gpu_launch(rt_gpu *g, loom_kernel *k, const int grid[3], const rt_launch_arg *args,
                          char *err, size_t errlen);
/* The same on a CUDA stream (a CUstream; NULL: the default stream). */
loom_status rt_gpu_launch_on(rt_gpu *g, loom_kernel *k, const int grid[3], const rt_launch_arg *args, void *stream,
                             char *err, size_t errlen);

/* The GPU backend of a runtime (runtime/runtime.c), or NULL on the interpreter. */
rt_gpu *rt_runtime_gpu(const loom_runtime *rt);
/* Set the runtime's error message (loom_runtime_error) and return st. */
loom_status rt_runtime_fail(loom_runtime *rt, loom_status st, const char *msg);
/* A GPU buffer's device address (0 on the interpreter). */
uint64_t rt_buffer_dptr(const loom_buffer *b);
/* The runtime a buffer belongs to. */
const loom_runtime *rt_buffer_runtime(const loom_buffer *b);

/* ---------------------------------------------------------------- optional libraries
 * libcuda, nvJitLink, and for tests and benchmarks NVRTC and cuBLAS, are all opened this
 * way (runtime/driver.c). */

/* dlopen (RTLD_NOW | RTLD_LOCAL) the first of names[0..n) that loads, skipping NULL and
 * empty names; where the environment variable env_override is set and not empty, its
 * value is the only name tried.  Returns the handle, with the name that loaded in path
 * (when given), or NULL with the first failure's dlerror in why. */
void *rt_dlopen_first(const char *const *names, int n, const char *env_override, char *path,
                      size_t pathlen, char *why, size_t whylen);

/* ---------------------------------------------------------------- cache files
 * The module cache's directory, hash and file primitives (runtime/module_cache.c), which
 * the tuning cache (tune/tune_cache.c) shares. */

/* The cache directory: LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else ~/.cache/loom.
 * Returns false when LOOM_CACHE=0 or no directory can be named. */
bool mc_disk_dir(char *buf, size_t n);
/* 64-bit checksum of bytes (XXH3-64). */
uint64_t mc_hash64(const void *p, size_t n);
/* Atomically replace path with len bytes of data (temporary file in dir named after
 * base, fsync, rename, fsync of dir); shared by the module and tuning caches. */
loom_status mc_replace_file(const char *dir, const char *base, const char *path, const void *data,
                            size_t len, char *err, size_t errlen);
/* Read the whole regular file at path, at most max bytes, into a malloc'ed buffer with a
 * 0 byte after the data (*len: the bytes read).  NULL with errno set: ENOENT and the
 * like from open, EFBIG when it is not a regular file or is larger than max, ENOMEM;
 * shared by the module and tuning caches. */
char *mc_read_file(const char *path, size_t max, size_t *len);
/* mkdir -p dir: 0, or -1 with errno set. */
int rt_make_dirs(const char *dir);

#endif /* LOOM_RT_H */
