/*
 * module.c -- a kernel's module: found in memory, read from the disk cache, or compiled
 * (driver.h: rt_get_function; gpu.h: rt_gpu_prepare); raw modules; compile statistics.
 *
 * A launch finds its CUfunction by key (module_cache.h): the in-memory table, else a
 * cubin from the disk cache, else cg_compile + rt_link_ptx (PTX -> cubin at -O3, link.c),
 * whose cubin goes to the disk cache.  Only a cubin goes there: the PTX image that stands
 * in when ptxas fails (link.c) is loaded but not stored under the cubin's key, and one an
 * older loom stored is dropped when read, so a later process with a working ptxas makes
 * and caches the cubin.  Several threads may compile at once (the
 * autotuner's pool): the table is read and extended under a mutex, entries are copied
 * out (the table may grow and move), and compiling itself runs outside the lock; when
 * two threads build the same key, the first entry added wins and the other module is
 * unloaded.  Load errors carry the JIT log.
 *
 * A kernel that reads tensors with TMA takes descriptors after its own parameters: the
 * code generator lists their specs, and the entry keeps them (and the disk file, so a
 * warm start has them) in an rt_tma_cache that each launch encodes through (launch.c).
 *
 * With the hang check on (LOOM_HANG_CHECK, read when g opened: g->hang_ms), kernels are
 * compiled with bounded wait loops, the key adds the bound and the wait sites' source
 * lines (hang.h), each loaded module's CG_HANG_GLOBAL is pointed at g's record with a tag
 * of its own, and the entry keeps the sites made from the kernel (never from the disk
 * file, whose format is unchanged).
 *
 * Raw modules are PTX or cubins made outside loom's compile path (the NVRTC reference
 * kernels of support/): linked and loaded the same way, launched by function name.
 *
 * Every lookup is recorded in process-wide statistics (gpu.h: rt_gpu_stats): how the
 * kernel was found and what each step cost.  rt_gpu_prepare also hands its own lookup's
 * record to the caller, as a loom_compile_info.
 */
#include "codegen.h"
#include "driver.h"
#include "../util/util.h"
#include "../dsl/ir.h" /* a kernel's uid and gen: its IR, unchanged since it was last hashed */

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A launch's lookup that found its function in memory (a launch's path, so no clock and
 * no formatting). */
static void stats_memory_hit(const char *name)
{
    rt_gpu_stats hit = {.result = RT_CACHE_MEMORY};
    memcpy(hit.kernel, name, strnlen(name, sizeof hit.kernel - 1));
    stats_record(&hit);
}

/* The entry of key in g's table (under modules_lock): at the index the kernel's recent
 * slot remembers, else by a search, whose index the slot then remembers. */
static mc_entry *find_entry(rt_gpu *g, unsigned slot, const mc_key *key)
{
    size_t i = g->recent[slot].index;
    if (i < g->modules.n && memcmp(g->modules.e[i].key.b, key->b, sizeof key->b) == 0)
        return &g->modules.e[i];
    mc_entry *e = mc_table_find(&g->modules, key);
    if (e)
        g->recent[slot].index = (size_t)(e - g->modules.e);
    return e;
}

/* ---------------------------------------------------------------- loading */

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
    uint32_t tag = 0;
    st = rt_hang_attach(g, mod, name, &tag, err, errlen);
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
    e->hang_tag = tag;
    return LOOM_OK;
}

/* ---------------------------------------------------------------- lookup */

/* The table's entry of an unchanged kernel (its key remembered in its recent slot),
 * copied to *out: true when there is one.  *known: the slot had k's key (now in *key). */
static bool find_known(rt_gpu *g, loom_kernel *k, unsigned slot, mc_key *key, mc_entry *out, bool *known)
{
    pthread_mutex_lock(&g->modules_lock);
    *known = g->recent[slot].uid == k->uid && g->recent[slot].gen == k->gen;
    mc_entry *hit = NULL;
    if (*known) {
        *key = g->recent[slot].key;
        if ((hit = find_entry(g, slot, key)))
            *out = *hit;
    }
    pthread_mutex_unlock(&g->modules_lock);
    return hit != NULL;
}

/* k's key, made once (its IR hashed, with the arch, the warps and the build: loom's,
 * LOOM_PTXAS_OPTS, the hang check's bound and wait sites) and remembered in k's recent
 * slot; the table's entry of it copied to *out: true when there is one. */
static bool key_and_find(rt_gpu *g, loom_kernel *k, unsigned slot, const rt_hang_sites *sites, mc_key *key,
                         mc_entry *out)
{
    char build[1024];
    const char *popts = util_env_str("LOOM_PTXAS_OPTS"); /* other cubins than -O3's */
    snprintf(build, sizeof build, "%s%s%s", mc_build_id(), popts ? "|ptxas " : "", popts ? popts : "");
    if (sites) { /* bounded waits, and whose lines: not in the IR text */
        size_t bn = strlen(build);
        build[bn++] = '|';
        rt_hang_sites_key(sites, g->hang_ms, build + bn, sizeof build - bn);
    }
    mc_key_make(loom_print(k), g->props.arch, loom_kernel_num_warps(k), build, key);
    pthread_mutex_lock(&g->modules_lock);
    g->recent[slot].uid = k->uid;
    g->recent[slot].gen = k->gen;
    g->recent[slot].key = *key;
    mc_entry *hit = find_entry(g, slot, key);
    if (hit)
        *out = *hit;
    pthread_mutex_unlock(&g->modules_lock);
    return hit != NULL;
}

/* The hang check's wait sites of k in *sites (with the check on, where not made yet):
 * false, with the message, when out of memory. */
static bool make_sites(rt_gpu *g, loom_kernel *k, rt_hang_sites **sites, char *err, size_t errlen)
{
    if (g->hang_ms > 0 && !*sites && !(*sites = rt_hang_sites_make(k))) {
        snprintf(err, errlen, "out of host memory for the wait sites of kernel '%s'", loom_kernel_name(k));
        return false;
    }
    return true;
}

/* The cubin of key from the disk cache in dir, loaded into *e: true when it is there and
 * loads (lp says how it went); else the caller compiles. */
static bool load_cached(rt_gpu *g, const char *name, const char *dir, const mc_key *key, mc_entry *e,
                        rt_gpu_stats *lp, char *err, size_t errlen)
{
    void *cubin = NULL;
    size_t cubin_n = 0;
    mc_meta meta;
    memset(&meta, 0, sizeof meta);
    char why[512];
    double t0 = util_now_ms();
    mc_lookup lk = mc_disk_load(dir, key, &cubin, &cubin_n, &meta, why, sizeof why);
    lp->disk_ms = util_now_ms() - t0;
    if (lk == MC_REJECTED) {
        lp->disk_rejected = 1;
        if (util_env_on("LOOM_CACHE_VERBOSE"))
            fprintf(stderr, "loom: rejected cache file %s\n", why);
    }
    if (lk == MC_MISS && why[0] && util_env_on("LOOM_CACHE_VERBOSE"))
        fprintf(stderr, "loom: module cache: %s\n", why); /* not a regular file */
    if (lk == MC_HIT && !mc_image_is_cubin(cubin, cubin_n)) {
        /* a PTX fallback an older loom cached under the cubin's key: compile again */
        free(cubin);
        cubin = NULL;
        mc_disk_drop(dir, key);
        lp->disk_rejected = 1;
        lk = MC_MISS;
        if (util_env_on("LOOM_CACHE_VERBOSE"))
            fprintf(stderr, "loom: rejected cache file of kernel '%s': PTX, not a cubin\n", name);
    }
    if (lk != MC_HIT)
        return false;
    lp->cubin_bytes = cubin_n;
    t0 = util_now_ms();
    loom_status st = make_entry(g, cubin, name, &meta, e, err, errlen);
    lp->load_ms = util_now_ms() - t0;
    free(cubin);
    if (st == LOOM_OK) {
        lp->result = RT_CACHE_DISK;
        return true;
    }
    /* A cubin that passed its checks but does not load (another driver, say): rebuilt by
     * the caller, which overwrites the file. */
    lp->disk_rejected = 1;
    return false;
}

/* PTX -> cubin (rt_link_ptx, *cubin: the caller frees it) -> *e.  A cubin the driver does
 * not load, from a toolkit newer than the driver, is linked again another way. */
static loom_status link_and_load(rt_gpu *g, const char *ptx, const char *name, const mc_meta *meta, mc_entry *e,
                                 void **cubin, size_t *cubin_n, rt_gpu_stats *lp, char *err, size_t errlen)
{
    char what[160];
    snprintf(what, sizeof what, "kernel '%s' (%s)", name, g->props.arch);
    double t0 = util_now_ms();
    loom_status st = rt_link_ptx(g, ptx, what, cubin, cubin_n, &lp->linker, err, errlen);
    lp->link_ms = util_now_ms() - t0;
    if (st != LOOM_OK)
        return st;
    lp->cubin_bytes = *cubin_n;
    t0 = util_now_ms();
    st = make_entry(g, *cubin, name, meta, e, err, errlen);
    lp->load_ms = util_now_ms() - t0;
    if (st != LOOM_OK && rt_link_reject(lp->linker)) {
        free(*cubin);
        *cubin = NULL;
        t0 = util_now_ms();
        st = rt_link_ptx(g, ptx, what, cubin, cubin_n, &lp->linker, err, errlen);
        lp->link_ms += util_now_ms() - t0;
        if (st == LOOM_OK) {
            lp->cubin_bytes = *cubin_n;
            t0 = util_now_ms();
            st = make_entry(g, *cubin, name, meta, e, err, errlen);
            lp->load_ms = util_now_ms() - t0;
        }
    }
    return st;
}

/* Write a cubin to the disk cache in dir (a failure only counted, and told with
 * LOOM_CACHE_VERBOSE). */
static void store_cached(const char *dir, const mc_key *key, const void *cubin, size_t n, const mc_meta *meta,
                         rt_gpu_stats *lp)
{
    char werr[512];
    double t0 = util_now_ms();
    if (mc_disk_store(dir, key, cubin, n, meta, werr, sizeof werr) != LOOM_OK) {
        lp->disk_write_failures = 1;
        if (util_env_on("LOOM_CACHE_VERBOSE"))
            fprintf(stderr, "loom: module cache: %s\n", werr);
    }
    lp->disk_ms += util_now_ms() - t0;
}

/* Compile k (the code generator, then the linker) and load it into *e; its cubin goes to
 * the disk cache in dir (NULL: none).  Only a cubin: the PTX loaded because ptxas failed
 * is no stand-in for the cubin. */
static loom_status compile_entry(rt_gpu *g, loom_kernel *k, const mc_key *key, const char *dir, mc_entry *e,
                                 rt_gpu_stats *lp, char *err, size_t errlen)
{
    const char *name = loom_kernel_name(k);
    mc_meta meta;
    memset(&meta, 0, sizeof meta);
    lp->result = RT_CACHE_MISS;
    double t0 = util_now_ms();
    cg_result cr;
    loom_status st = cg_compile_opts(k, g->props.arch, &(cg_options){.hang_check_ms = g->hang_ms}, &cr, err, errlen);
    char *ptx = cr.ptx; /* this function frees it */
    meta.smem_bytes = cr.smem_bytes;
    meta.ntma = cr.ntma;
    memcpy(meta.tma, cr.tma, sizeof meta.tma);
    lp->codegen_ms = util_now_ms() - t0;
    if (st != LOOM_OK) {
        free(ptx);
        return st;
    }
    if (!ptx) {
        snprintf(err, errlen, "code generator returned no PTX for kernel '%s'", name);
        return LOOM_ERR_COMPILE;
    }
    lp->ptx_bytes = strlen(ptx); /* (LOOM_DUMP_PTX is printed by the code generator) */
    void *cubin = NULL;
    size_t cubin_n = 0;
    st = link_and_load(g, ptx, name, &meta, e, &cubin, &cubin_n, lp, err, errlen);
    free(ptx);
    if (st == LOOM_OK && dir && mc_image_is_cubin(cubin, cubin_n))
        store_cached(dir, key, cubin, cubin_n, &meta, lp);
    free(cubin);
    return st;
}

/* Add e to g's table and copy the table's entry to *out: another thread's where it built
 * the same kernel meanwhile (e's module is then unloaded). */
static loom_status add_entry(rt_gpu *g, const mc_key *key, const mc_entry *e, mc_entry *out, char *err,
                             size_t errlen)
{
    pthread_mutex_lock(&g->modules_lock);
    mc_entry *had = mc_table_find(&g->modules, key), *added = NULL;
    if (had)
        *out = *had; /* another thread built the same kernel meanwhile: keep its module */
    else if ((added = mc_table_add(&g->modules, e)))
        *out = *added;
    pthread_mutex_unlock(&g->modules_lock);
    if (!added) {
        cu.cuModuleUnload((CUmodule)e->module);
        rt_tma_cache_destroy(e->tma);
        rt_hang_sites_free(e->hang);
        if (!had) {
            snprintf(err, errlen, "out of host memory for the module cache");
            return LOOM_ERR_NOMEM;
        }
    }
    return LOOM_OK;
}

/* Find or build the function for kernel k (see the file comment); *out is a copy of the
 * table's entry.  In memory (by the key k's recent slot remembers, else by its key made
 * now), else from the disk cache, else compiled. */
loom_status rt_get_function(rt_gpu *g, loom_kernel *k, mc_entry *out, rt_gpu_stats *lastp,
                            char *err, size_t errlen)
{
    const char *name = loom_kernel_name(k);
    double t0 = lastp ? util_now_ms() : 0;
    mc_key key;
    unsigned slot = (unsigned)(k->uid % RT_RECENT_KEYS);
    bool known, hit = find_known(g, k, slot, &key, out, &known);
    if (hit && !lastp) { /* a launch of a kernel it has launched before */
        stats_memory_hit(name);
        return LOOM_OK;
    }
    rt_gpu_stats local, *lp = lastp ? lastp : &local;
    memset(lp, 0, sizeof *lp);
    snprintf(lp->kernel, sizeof lp->kernel, "%s", name);
    if (!lastp)
        t0 = util_now_ms();
    rt_hang_sites *sites = NULL; /* the hang check's: made from k, kept by the entry */
    if (!hit && !make_sites(g, k, &sites, err, errlen))
        return LOOM_ERR_NOMEM;
    if (!known)
        hit = key_and_find(g, k, slot, sites, &key, out);
    lp->key_ms = util_now_ms() - t0;
    if (hit) {
        rt_hang_sites_free(sites);
        lp->result = RT_CACHE_MEMORY;
        stats_record(lp);
        return LOOM_OK;
    }
    if (!make_sites(g, k, &sites, err, errlen))
        return LOOM_ERR_NOMEM;
    mc_entry e;
    memset(&e, 0, sizeof e);
    e.key = key;
    char dir[4096];
    bool disk = mc_disk_dir(dir, sizeof dir);
    loom_status st = LOOM_OK;
    if (!disk || !load_cached(g, name, dir, &key, &e, lp, err, errlen))
        st = compile_entry(g, k, &key, disk ? dir : NULL, &e, lp, err, errlen);
    if (st != LOOM_OK) {
        rt_hang_sites_free(sites);
        stats_record(lp);
        return st;
    }
    e.hang = sites;
    stats_record(lp);
    return add_entry(g, &key, &e, out, err, errlen);
}

loom_status rt_gpu_prepare(rt_gpu *g, loom_kernel *k, loom_compile_info *info, char *err,
                           size_t errlen)
{
    double t0 = util_now_ms();
    loom_compile_info local;
    if (!info)
        info = &local;
    memset(info, 0, sizeof *info);
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    mc_entry e;
    rt_gpu_stats last;
    st = rt_get_function(g, k, &e, &last, err, errlen);
    info->source = last.result == RT_CACHE_MEMORY ? 1 : last.result == RT_CACHE_DISK ? 2 : 0;
    info->codegen_ms = last.codegen_ms;
    info->link_ms = last.link_ms;
    info->load_ms = last.load_ms;
    info->linker = last.result == RT_CACHE_MISS ? last.linker : NULL;
    info->total_ms = util_now_ms() - t0;
    return st;
}

/* ---------------------------------------------------------------- raw modules */

struct rt_gpu_module {
    CUmodule mod;
};

loom_status rt_gpu_module_load(rt_gpu *g, const void *image, size_t bytes, bool is_ptx,
                               const char *what, rt_gpu_module **out, char *err, size_t errlen)
{
    *out = NULL;
    (void)bytes;
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    void *cubin = NULL;
    size_t n = 0;
    if (is_ptx) {
        const char *linker;
        st = rt_link_ptx(g, image, what, &cubin, &n, &linker, err, errlen);
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
    return rt_gpu_module_launch_on(g, m, fn, grid, block, smem_bytes, params, NULL, err, errlen);
}

loom_status rt_gpu_module_launch_on(rt_gpu *g, rt_gpu_module *m, const char *fn, const unsigned grid[3],
                                    const unsigned block[3], unsigned smem_bytes, void **params, void *stream,
                                    char *err, size_t errlen)
{
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    CUfunction f = NULL;
    CUresult r = cu.cuModuleGetFunction(&f, m->mod, fn);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuModuleGetFunction(\"%s\")", fn);
    st = set_smem(g, f, smem_bytes, fn, err, errlen);
    if (st != LOOM_OK)
        return st;
    return rt_launch_fn_on(g, f, fn, grid, block, smem_bytes, params, (CUstream)stream, err, errlen);
}

loom_status rt_gpu_stream_create(rt_gpu *g, void **stream, char *err, size_t errlen)
{
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    CUstream s = NULL;
    CUresult r = cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuStreamCreate");
    *stream = s;
    return LOOM_OK;
}

loom_status rt_gpu_stream_sync(rt_gpu *g, void *stream, char *err, size_t errlen)
{
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    CUresult r = cu.cuStreamSynchronize((CUstream)stream);
    return r == CUDA_SUCCESS ? LOOM_OK : cu_fail(g, r, err, errlen, "cuStreamSynchronize");
}

void rt_gpu_stream_destroy(rt_gpu *g, void *stream)
{
    char e[64];
    if (stream && cu_enter(g, e, sizeof e) == LOOM_OK)
        cu.cuStreamDestroy_v2((CUstream)stream);
}

/* ---------------------------------------------------------------- graphs and raw launches */

loom_status rt_gpu_capture_begin(rt_gpu *g, void *stream, char *err, size_t errlen)
{
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    CUresult r = cu.cuStreamBeginCapture_v2((CUstream)stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    return r == CUDA_SUCCESS ? LOOM_OK : cu_fail(g, r, err, errlen, "cuStreamBeginCapture");
}

loom_status rt_gpu_capture_end(rt_gpu *g, void *stream, void **exec, char *err, size_t errlen)
{
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    CUgraph graph = NULL;
    CUresult r = cu.cuStreamEndCapture((CUstream)stream, &graph);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuStreamEndCapture");
    CUgraphExec ex = NULL;
    r = cu.cuGraphInstantiateWithFlags(&ex, graph, 0);
    cu.cuGraphDestroy(graph);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuGraphInstantiateWithFlags");
    *exec = ex;
    return LOOM_OK;
}

loom_status rt_gpu_graph_launch(rt_gpu *g, void *exec, void *stream, char *err, size_t errlen)
{
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    CUresult r = cu.cuGraphLaunch((CUgraphExec)exec, (CUstream)stream);
    return r == CUDA_SUCCESS ? LOOM_OK : cu_fail(g, r, err, errlen, "cuGraphLaunch");
}

void rt_gpu_graph_destroy(rt_gpu *g, void *exec)
{
    char e[64];
    if (exec && cu_enter(g, e, sizeof e) == LOOM_OK)
        cu.cuGraphExecDestroy((CUgraphExec)exec);
}

loom_status rt_gpu_kernel_function(rt_gpu *g, loom_kernel *k, void **function, unsigned *smem_bytes, char *err,
                                   size_t errlen)
{
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    mc_entry e;
    st = rt_get_function(g, k, &e, NULL, err, errlen);
    if (st != LOOM_OK)
        return st;
    *function = e.function;
    *smem_bytes = (unsigned)e.smem_bytes;
    return LOOM_OK;
}

loom_status rt_gpu_raw_launch(rt_gpu *g, void *function, const unsigned grid[3], const unsigned block[3],
                              unsigned smem_bytes, void **params, void *stream)
{
    (void)g;
    CUlaunchConfig cfg;
    rt_launch_config(&cfg, grid, block, smem_bytes, (CUstream)stream);
    return cu.cuLaunchKernelEx(&cfg, (CUfunction)function, params, NULL) == CUDA_SUCCESS ? LOOM_OK : LOOM_ERR_CUDA;
}

loom_status rt_gpu_raw_launch_legacy(rt_gpu *g, void *function, const unsigned grid[3], const unsigned block[3],
                                     unsigned smem_bytes, void **params, void *stream)
{
    (void)g;
    return cu.cuLaunchKernel((CUfunction)function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                             smem_bytes, (CUstream)stream, params, NULL) == CUDA_SUCCESS
               ? LOOM_OK
               : LOOM_ERR_CUDA;
}
