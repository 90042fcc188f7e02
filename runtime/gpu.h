/*
 * gpu.h -- internals of the GPU backend beyond rt.h: device properties, timing, compile
 * statistics, raw modules (for NVRTC references), and the module cache's host side.
 *
 * The backend (runtime/driver.c) opens libcuda with dlopen and uses the device's primary
 * context, so every rt_gpu opened on the same device shares one context: device pointers
 * of a loom_runtime's buffers are valid for an rt_gpu a benchmark opens itself, and
 * events recorded there time kernels launched through loom_launch.
 *
 * runtime/module_cache.c keeps compiled kernels: in memory per rt_gpu, and on disk as
 * <key>.cubin files with a checked header.  Its disk functions take and return bytes, so
 * tests exercise them without a GPU.
 *
 * A kernel that reads tensors through TMA takes descriptors after its own parameters
 * (runtime/tma.h): the code generator lists them (cg_compile), the module cache
 * keeps that list with the cubin (in memory and on disk), and each launch encodes them
 * from the arguments' buffers (cached per base address) and appends them.
 *
 * Prefixes: rt_gpu_ (driver.c), mc_ (module_cache.c).
 */
#ifndef LOOM_GPU_H
#define LOOM_GPU_H

#include "rt.h"
#include "tma.h"

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
/* Atomically replace path with len bytes of data (temporary file in dir named after
 * base, fsync, rename, fsync of dir); shared by the module and tuning caches. */
loom_status mc_replace_file(const char *dir, const char *base, const char *path, const void *data,
                            size_t len, char *err, size_t errlen);
/* Read the whole regular file at path, at most max bytes, into a malloc'ed buffer with a
 * 0 byte after the data (*len: the bytes read).  NULL with errno set: ENOENT and the
 * like from open, EFBIG when it is not a regular file or is larger than max, ENOMEM;
 * shared by the module and tuning caches. */
char *mc_read_file(const char *path, size_t max, size_t *len);
/* The median of `reps` such runs after `warmup` untimed ones (prep before each). */
loom_status rt_gpu_time_each_ms(rt_gpu *g, rt_gpu_work_fn prep, rt_gpu_work_fn work, void *ctx,
                                int warmup, int reps, double *median_ms, char *err, size_t errlen);

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
    const char *linker;       /* "driver" (cuLink*), "nvJitLink" or "PTX load" (setmaxnreg; miss only) */
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

/* ---------------------------------------------------------------- module cache: keys */

typedef struct mc_key {
    uint8_t b[16];
} mc_key;

/* key = XXH3-128 of (IR text, arch, LOOM_VERSION, num_warps, build).  build names the
 * loom build (mc_build_id()), so a rebuilt code generator never reuses stale cubins. */
void mc_key_make(const char *ir_text, const char *arch, int num_warps, const char *build,
                 mc_key *out);
/* 32 lowercase hex digits + NUL. */
void mc_key_hex(const mc_key *k, char out[33]);
/* Identity of the loom binary: path, size and mtime of the object holding this code. */
const char *mc_build_id(void);
/* 64-bit checksum of bytes (XXH3-64). */
uint64_t mc_hash64(const void *p, size_t n);

/* ---------------------------------------------------------------- module cache: disk */

/* What a launch needs besides the cubin, kept with it: the dynamic shared memory and the
 * TMA descriptors the kernel takes after its own parameters. */
typedef struct mc_meta {
    uint64_t smem_bytes;
    int ntma;
    rt_tma_spec tma[RT_TMA_MAX_SPECS];
} mc_meta;

/* The cache file: a 64-byte little-endian header, then the payload: the TMA list, then
 * the cubin.
 *   0 magic "LOOMCUBN"   8 u32 format version   12 u32 header size (64)
 *  16 key[16]           32 u64 payload size     40 u64 XXH3-64 of the payload
 *  48 u64 smem bytes    56 u64 XXH3-64 of bytes 0..55
 * payload: u32 ntma, then ntma records of MC_TMA_RECORD bytes
 *   (i32 arg, i32 rank, i64 box[5] outermost first, i32 swizzle), then the cubin.
 * Format 2 added the TMA list; files of format 1 are rejected (and rebuilt). */
#define MC_MAGIC "LOOMCUBN"
#define MC_FORMAT 2u
#define MC_HEADER_BYTES 64
#define MC_TMA_RECORD 52

/* Encode a file image (malloc'ed into *out); LOOM_ERR_INVALID for a bad meta. */
loom_status mc_encode(const mc_key *key, const void *cubin, size_t n, const mc_meta *meta,
                      void **out, size_t *outlen);
/* Check a file image against key; on success point *cubin into it and fill *meta.  On
 * failure return false and say why in why (when given). */
bool mc_decode(const mc_key *key, const void *file, size_t n, const void **cubin, size_t *cubin_len,
               mc_meta *meta, char *why, size_t whylen);

/* The cache directory: LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else ~/.cache/loom.
 * Returns false when LOOM_CACHE=0 or no directory can be named. */
bool mc_disk_dir(char *buf, size_t n);

/* Write <dir>/<hex>.cubin atomically (temporary file in dir, fsync, rename), creating dir
 * when missing. */
loom_status mc_disk_store(const char *dir, const mc_key *key, const void *cubin, size_t n,
                          const mc_meta *meta, char *err, size_t errlen);

typedef enum mc_lookup {
    MC_MISS = 0,     /* no file */
    MC_HIT,          /* *cubin (malloc'ed) and *meta filled */
    MC_REJECTED,     /* a corrupt or foreign file: deleted; the reason is in why */
} mc_lookup;
mc_lookup mc_disk_load(const char *dir, const mc_key *key, void **cubin, size_t *n,
                       mc_meta *meta, char *why, size_t whylen);

/* ---------------------------------------------------------------- module cache: memory */

/* An entry of an rt_gpu's in-memory cache; module and function are CUmodule/CUfunction.
 * tma holds the kernel's TMA specs and their encoded descriptors (NULL: none); the entry
 * owns it (mc_table_free destroys it). */
typedef struct mc_entry {
    mc_key key;
    void *module;
    void *function;
    uint64_t smem_bytes;
    rt_tma_cache *tma;
} mc_entry;

typedef struct mc_table {
    mc_entry *e;
    size_t n, cap;
} mc_table;

mc_entry *mc_table_find(mc_table *t, const mc_key *key);
/* Add an entry (a copy); returns it, or NULL when out of memory. */
mc_entry *mc_table_add(mc_table *t, const mc_entry *e);
void mc_table_free(mc_table *t); /* frees the table and TMA caches: unload modules first */

#endif /* LOOM_GPU_H */
