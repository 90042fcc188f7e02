/*
 * module_cache.h -- the module cache's host side (runtime/module_cache.c): keys, the
 * cache file format, the disk cache, and an rt_gpu's in-memory table; and the file
 * helpers the module and tuning caches share.
 *
 * runtime/module_cache.c keeps compiled kernels: in memory per rt_gpu, and on disk as
 * <key>.cubin files with a checked header.  Its disk functions take and return bytes, so
 * tests exercise them without a GPU.  The lookup that uses them is runtime/module.c.
 *
 * A kernel that reads tensors through TMA takes descriptors after its own parameters
 * (runtime/tma.h): the code generator lists them (cg_compile), and the module cache
 * keeps that list with the cubin (in memory and on disk).
 *
 * Prefix: mc_.  The directory, hash and file helpers it shares with the tuning cache
 * are declared in rt.h.
 */
#ifndef LOOM_MODULE_CACHE_H
#define LOOM_MODULE_CACHE_H

#include "hang.h"
#include "loom.h"
#include "rt.h"
#include "tma.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- keys */

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

/* ---------------------------------------------------------------- disk */

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


/* Write <dir>/<hex>.cubin atomically (temporary file in dir, fsync, rename), creating dir
 * when missing.  Refused (LOOM_ERR_RUNTIME, the path named in err) when dir is not a
 * directory or the file's path holds something that is not a regular file. */
loom_status mc_disk_store(const char *dir, const mc_key *key, const void *cubin, size_t n,
                          const mc_meta *meta, char *err, size_t errlen);

typedef enum mc_lookup {
    MC_MISS = 0,     /* no file; or one that is not a regular file (left alone, why says so) */
    MC_HIT,          /* *cubin (malloc'ed) and *meta filled */
    MC_REJECTED,     /* a corrupt or foreign file: deleted; the reason is in why */
} mc_lookup;
mc_lookup mc_disk_load(const char *dir, const mc_key *key, void **cubin, size_t *n,
                       mc_meta *meta, char *why, size_t whylen);
/* Delete key's file in dir when it is a regular file (one that decoded but must not be
 * used: a PTX image an older loom cached as a cubin). */
void mc_disk_drop(const char *dir, const mc_key *key);

/* Whether an image is a cubin (an ELF file) rather than PTX text: only cubins are
 * cached, so a PTX fallback (ptxas failed) never stands in for the cubin of its key. */
bool mc_image_is_cubin(const void *image, size_t n);

/* ---------------------------------------------------------------- file hygiene
 * Shared with the tuning cache (tune/tune_cache.c). */

/* "a FIFO", "a directory", "a character device", ... for a st_mode, in messages. */
const char *mc_file_kind(unsigned mode);
/* True when something exists at path (links followed) that is not a regular file, with
 * "<path> is a FIFO, not a regular file" in why: the caches neither open, replace nor
 * lock beside such a path.  False for a regular file and for nothing at all. */
bool mc_path_refused(const char *path, char *why, size_t whylen);

/* Temporary files (mc_replace_file) are named .<base>.tmp.<pid>.XXXXXX.  A temporary
 * older than this is removed whatever its pid: no write takes that long. */
#define MC_TEMP_MAX_AGE_S (10 * 60)
/* Remove the temporaries in dir of writers killed before their rename: those whose pid
 * is gone, and any older than MC_TEMP_MAX_AGE_S (a live writer's young one is kept).
 * Returns how many were removed.  The disk cache calls it once per process and
 * directory, on its first lookup or store there. */
int mc_remove_stale_temps(const char *dir);

/* ---------------------------------------------------------------- memory */

/* An entry of an rt_gpu's in-memory cache; module and function are CUmodule/CUfunction.
 * tma holds the kernel's TMA specs and their encoded descriptors (NULL: none); hang the
 * wait sites of a kernel compiled with the hang check (NULL: none; hang.h), hang_tag the
 * tag its records carry (0: none).  The entry owns tma and hang (mc_table_free destroys
 * them); hang is made from the launching kernel, never kept on disk. */
typedef struct mc_entry {
    mc_key key;
    void *module;
    void *function;
    uint64_t smem_bytes;
    rt_tma_cache *tma;
    rt_hang_sites *hang;
    uint32_t hang_tag;
} mc_entry;

typedef struct mc_table {
    mc_entry *e;
    size_t n, cap;
} mc_table;

mc_entry *mc_table_find(mc_table *t, const mc_key *key);
/* Add an entry (a copy); returns it, or NULL when out of memory. */
mc_entry *mc_table_add(mc_table *t, const mc_entry *e);
void mc_table_free(mc_table *t); /* frees the table, TMA caches and hang sites: unload modules first */


#endif /* LOOM_MODULE_CACHE_H */
