/*
 * module_cache.c -- the module cache's host side: keys, the cache file format, atomic
 * disk writes, and the in-memory table (see module_cache.h).
 *
 * Compiling a kernel (code generation + PTX->cubin) takes tens of milliseconds; loading
 * a cubin takes well under one.  So each compiled cubin is kept twice: in memory, per
 * rt_gpu (a CUmodule/CUfunction per key), and on disk as <dir>/<key hex>.cubin so a new
 * process starts warm without calling the code generator.
 *
 * The key hashes everything that determines the cubin: the printed IR (which includes
 * every shape, dtype and constant), the target arch, LOOM_VERSION, num_warps, and the
 * identity of the loom binary (so a changed code generator never reuses a stale cubin).
 *
 * Besides the cubin, a file keeps what a launch needs from the code generator that the
 * cubin does not say: the dynamic shared memory and the list of TMA descriptors the
 * kernel takes after its own parameters (module_cache.h: mc_meta), so a warm start launches
 * without running the code generator.
 *
 * A cache file is trusted only after its header checks out: magic, format version, the
 * full key, the payload size and a checksum of the payload, and a checksum of the header
 * itself; then the TMA list must be well formed.  Anything else (a truncated write, a flipped bit, another program's file) is
 * deleted and rebuilt.  Files are written to a temporary name in the same directory,
 * fsync'ed, then renamed over the final name: rename is atomic, so concurrent writers
 * and readers only ever see a whole file.
 *
 * The caches keep only regular files, in places they own.  Something else at a cache
 * path (a FIFO, a device, a directory, a socket: LOOM_TUNE_CACHE=/dev/null, say) is
 * never opened (a FIFO's open blocks, a device's may do anything), never renamed over
 * and gets no lock file beside it: it is refused with a message naming it, and a module
 * cache lookup treats it as a miss.  A temporary file carries its writer's pid
 * (.<name>.tmp.<pid>.XXXXXX), so a writer killed before its rename leaves one that a
 * later process removes (mc_remove_stale_temps) while a live writer's is kept.
 *
 * Hashing uses xxHash (XXH3, header-only via XXH_INLINE_ALL, no link dependency); where
 * xxhash.h is missing a built-in XXH64 pair stands in (keys then differ, which only
 * means a cold cache).
 */
#define _GNU_SOURCE
#include "module_cache.h"
#include "../util/util.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<xxhash.h>) && !defined(LOOM_NO_XXHASH)
#define LOOM_HAVE_XXHASH 1
#endif
#endif

#ifdef LOOM_HAVE_XXHASH
#define XXH_INLINE_ALL
#include <xxhash.h>
#else
/* XXH64 (reference algorithm by Yann Collet), used only when xxhash.h is missing. */
static const uint64_t P1 = 11400714785074694791ULL, P2 = 14029467366897019727ULL,
                      P3 = 1609587929392839161ULL, P4 = 9650029242287828579ULL,
                      P5 = 2870177450012600261ULL;
static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t xround(uint64_t acc, uint64_t in) { return rotl64(acc + in * P2, 31) * P1; }
static uint64_t xmerge(uint64_t acc, uint64_t v) { return (acc ^ xround(0, v)) * P1 + P4; }
static uint64_t xxh64(const void *data, size_t len, uint64_t seed)
{
    const uint8_t *p = data, *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
        do {
            v1 = xround(v1, rd64(p));
            v2 = xround(v2, rd64(p + 8));
            v3 = xround(v3, rd64(p + 16));
            v4 = xround(v4, rd64(p + 24));
            p += 32;
        } while (p + 32 <= end);
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xmerge(h, v1);
        h = xmerge(h, v2);
        h = xmerge(h, v3);
        h = xmerge(h, v4);
    } else {
        h = seed + P5;
    }
    h += (uint64_t)len;
    while (p + 8 <= end) {
        h ^= xround(0, rd64(p));
        h = rotl64(h, 27) * P1 + P4;
        p += 8;
    }
    if (p + 4 <= end) {
        h ^= (uint64_t)rd32(p) * P1;
        h = rotl64(h, 23) * P2 + P3;
        p += 4;
    }
    while (p < end) {
        h ^= (*p++) * P5;
        h = rotl64(h, 11) * P1;
    }
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}
#endif

uint64_t mc_hash64(const void *p, size_t n)
{
#ifdef LOOM_HAVE_XXHASH
    return XXH3_64bits(p, n);
#else
    return xxh64(p, n, 0);
#endif
}

/* ---------------------------------------------------------------- keys */

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void mc_key_make(const char *ir_text, const char *arch, int num_warps, const char *build,
                 mc_key *out)
{
    /* Fields are separated by NUL bytes (none can contain one), so no two different
     * tuples serialize alike. */
    char head[512];
    int hn = snprintf(head, sizeof head, "loom-cubin%c%s%c%s%c%d%c%s%c", 0, LOOM_VERSION, 0,
                      arch ? arch : "", 0, num_warps, 0, build ? build : "", 0);
    if (hn < 0)
        hn = 0;
    if ((size_t)hn >= sizeof head)
        hn = (int)sizeof head - 1;
    const char *ir = ir_text ? ir_text : "";
    size_t irn = strlen(ir);
#ifdef LOOM_HAVE_XXHASH
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, head, (size_t)hn);
    XXH3_128bits_update(&st, ir, irn);
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    put_u64(out->b, h.high64);
    put_u64(out->b + 8, h.low64);
#else
    uint64_t a = xxh64(head, (size_t)hn, 0x6c6f6f6d), b = xxh64(head, (size_t)hn, 0x6b65726e);
    put_u64(out->b, xxh64(ir, irn, a));
    put_u64(out->b + 8, xxh64(ir, irn, b));
#endif
}

void mc_key_hex(const mc_key *k, char out[33])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[k->b[i] >> 4];
        out[2 * i + 1] = hex[k->b[i] & 15];
    }
    out[32] = 0;
}

static char build_id[600];
static pthread_once_t build_id_once = PTHREAD_ONCE_INIT;

static void build_id_init(void)
{
    char *id = build_id;
    Dl_info info;
    struct stat sb;
    if (dladdr((const void *)build_id, &info) && info.dli_fname && stat(info.dli_fname, &sb) == 0)
        snprintf(id, sizeof build_id, "%s|%lld|%lld.%09ld", info.dli_fname, (long long)sb.st_size,
                 (long long)sb.st_mtim.tv_sec, (long)sb.st_mtim.tv_nsec);
    else
        snprintf(id, sizeof build_id, "loom %s built %s %s", LOOM_VERSION, __DATE__, __TIME__);
}

/* Computed once (pthread_once): the autotuner compiles on several threads at a time. */
const char *mc_build_id(void)
{
    pthread_once(&build_id_once, build_id_init);
    return build_id;
}

/* ---------------------------------------------------------------- file format */

/* A TMA spec a launch can use: what the code generator may produce (rt_tma_plan_make
 * checks the rest against the tensor at launch). */
static bool tma_spec_sane(const rt_tma_spec *t)
{
    if (t->arg < 0 || t->arg >= LOOM_MAX_ARGS || t->rank < 1 || t->rank > RT_TMA_MAX_RANK)
        return false;
    if (t->swizzle != 0 && t->swizzle != 32 && t->swizzle != 64 && t->swizzle != 128)
        return false;
    for (int d = 0; d < t->rank; d++)
        if (t->box[d] < 1 || t->box[d] > 256)
            return false;
    return true;
}

loom_status mc_encode(const mc_key *key, const void *cubin, size_t n, const mc_meta *meta,
                      void **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if ((!cubin && n) || !meta || meta->ntma < 0 || meta->ntma > RT_TMA_MAX_SPECS)
        return LOOM_ERR_INVALID;
    for (int i = 0; i < meta->ntma; i++)
        if (!tma_spec_sane(&meta->tma[i]))
            return LOOM_ERR_INVALID;
    size_t tlen = 4 + (size_t)meta->ntma * MC_TMA_RECORD, plen = tlen + n;
    uint8_t *f = malloc(MC_HEADER_BYTES + plen);
    if (!f)
        return LOOM_ERR_NOMEM;
    uint8_t *p = f + MC_HEADER_BYTES;
    put_u32(p, (uint32_t)meta->ntma);
    for (int i = 0; i < meta->ntma; i++) {
        const rt_tma_spec *t = &meta->tma[i];
        uint8_t *r = p + 4 + (size_t)i * MC_TMA_RECORD;
        put_u32(r, (uint32_t)t->arg);
        put_u32(r + 4, (uint32_t)t->rank);
        for (int d = 0; d < RT_TMA_MAX_RANK; d++)
            put_u64(r + 8 + 8 * d, d < t->rank ? (uint64_t)t->box[d] : 0);
        put_u32(r + 48, (uint32_t)t->swizzle);
    }
    if (n)
        memcpy(p + tlen, cubin, n);
    memcpy(f, MC_MAGIC, 8);
    put_u32(f + 8, MC_FORMAT);
    put_u32(f + 12, MC_HEADER_BYTES);
    memcpy(f + 16, key->b, 16);
    put_u64(f + 32, (uint64_t)plen);
    put_u64(f + 40, mc_hash64(p, plen));
    put_u64(f + 48, meta->smem_bytes);
    put_u64(f + 56, mc_hash64(f, 56));
    *out = f;
    *outlen = MC_HEADER_BYTES + plen;
    return LOOM_OK;
}

static bool reject(char *why, size_t whylen, const char *msg)
{
    if (why && whylen)
        snprintf(why, whylen, "%s", msg);
    return false;
}

bool mc_decode(const mc_key *key, const void *file, size_t n, const void **cubin, size_t *cubin_len,
               mc_meta *meta, char *why, size_t whylen)
{
    const uint8_t *f = file;
    if (!f || n < MC_HEADER_BYTES)
        return reject(why, whylen, "file shorter than the header");
    if (memcmp(f, MC_MAGIC, 8) != 0)
        return reject(why, whylen, "not a loom cubin cache file (bad magic)");
    if (get_u32(f + 8) != MC_FORMAT || get_u32(f + 12) != MC_HEADER_BYTES)
        return reject(why, whylen, "cache file of another format version");
    if (get_u64(f + 56) != mc_hash64(f, 56))
        return reject(why, whylen, "header checksum mismatch");
    if (memcmp(f + 16, key->b, 16) != 0)
        return reject(why, whylen, "file holds another key");
    uint64_t len = get_u64(f + 32);
    if (len != n - MC_HEADER_BYTES)
        return reject(why, whylen, "payload size mismatch (truncated file?)");
    if (get_u64(f + 40) != mc_hash64(f + MC_HEADER_BYTES, (size_t)len))
        return reject(why, whylen, "payload checksum mismatch");
    const uint8_t *p = f + MC_HEADER_BYTES;
    if (len < 4)
        return reject(why, whylen, "payload shorter than its TMA list");
    uint32_t ntma = get_u32(p);
    if (ntma > RT_TMA_MAX_SPECS || len < 4 + (uint64_t)ntma * MC_TMA_RECORD)
        return reject(why, whylen, "bad TMA descriptor count");
    memset(meta, 0, sizeof *meta);
    for (uint32_t i = 0; i < ntma; i++) {
        const uint8_t *r = p + 4 + (size_t)i * MC_TMA_RECORD;
        rt_tma_spec *t = &meta->tma[i];
        t->arg = (int32_t)get_u32(r);
        t->rank = (int32_t)get_u32(r + 4);
        for (int d = 0; d < RT_TMA_MAX_RANK; d++)
            t->box[d] = (int64_t)get_u64(r + 8 + 8 * d);
        t->swizzle = (int32_t)get_u32(r + 48);
        if (!tma_spec_sane(t))
            return reject(why, whylen, "bad TMA descriptor record");
    }
    size_t tlen = 4 + (size_t)ntma * MC_TMA_RECORD;
    meta->ntma = (int)ntma;
    meta->smem_bytes = get_u64(f + 48);
    *cubin = p + tlen;
    *cubin_len = (size_t)len - tlen;
    return true;
}

/* ---------------------------------------------------------------- disk */

/* LOOM_CACHE: a switch that is on unless set off. */
static bool cache_on(void) { return util_env_switch("LOOM_CACHE", true); }

bool mc_disk_dir(char *buf, size_t n)
{
    if (!cache_on())
        return false;
    const char *d;
    int w;
    if ((d = util_env_str("LOOM_CACHE_DIR"))) {
        w = snprintf(buf, n, "%s", d);
    } else if ((d = util_env_str("XDG_CACHE_HOME"))) {
        w = snprintf(buf, n, "%s/loom", d);
    } else if ((d = util_env_str("HOME"))) {
        w = snprintf(buf, n, "%s/.cache/loom", d);
    } else {
        return false;
    }
    return w > 0 && (size_t)w < n;
}

int rt_make_dirs(const char *dir)
{
    char p[4096];
    int w = snprintf(p, sizeof p, "%s", dir);
    if (w <= 0 || (size_t)w >= sizeof p)
        return -1;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        return -1;
    struct stat sb;
    if (stat(p, &sb) != 0)
        return -1;
    if (!S_ISDIR(sb.st_mode)) { /* EEXIST for a file of another kind */
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

const char *mc_file_kind(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a file";
    }
}

bool mc_path_refused(const char *path, char *why, size_t whylen)
{
    struct stat sb;
    /* stat, not lstat: a link to a regular file is read (and the link replaced), a link to
     * a device or a FIFO is refused like the node itself */
    if (!path || stat(path, &sb) != 0 || S_ISREG(sb.st_mode))
        return false;
    if (why && whylen)
        snprintf(why, whylen, "%s is %s, not a regular file", path, mc_file_kind((unsigned)sb.st_mode));
    return true;
}

/* ---------------------------------------------------------------- temporaries */

/* The pid in a temporary file's name ".<base>.tmp.<pid>.XXXXXX": > 0, 0 for a name of
 * that shape without a pid (a loom before pids were added), -1 for any other name. */
static long temp_pid(const char *name)
{
    size_t n = strlen(name);
    if (name[0] != '.' || n < 12 || name[n - 7] != '.')
        return -1;
    const char *x = name + n - 7; /* ".XXXXXX" */
    if (x - name >= 5 && !strncmp(x - 4, ".tmp", 4))
        return 0;
    const char *d = x;
    while (d > name && d[-1] >= '0' && d[-1] <= '9')
        d--;
    if (d == x || x - d > 10 || d - name < 6 || strncmp(d - 5, ".tmp.", 5) != 0)
        return -1;
    return strtol(d, NULL, 10);
}

/* True when process pid is gone (kill(0) says no such process).  In another pid
 * namespace sharing the directory a live writer may look gone; the worst that does is
 * fail that writer's rename: a cache write lost, never a partial file. */
static bool pid_gone(long pid)
{
    return pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int mc_remove_stale_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    time_t now = time(NULL);
    for (struct dirent *de; (de = readdir(d));) {
        long pid = temp_pid(de->d_name);
        if (pid < 0)
            continue;
        struct stat sb;
        if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
            continue;
        /* a dead writer's; or one this old whatever its name says (a pid reused by a
         * process that lives on, a loom that wrote no pid): no write takes minutes */
        bool old = now - sb.st_mtime > MC_TEMP_MAX_AGE_S;
        if ((pid_gone(pid) || old) && unlinkat(dirfd(d), de->d_name, 0) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

/* Sweep dir's stale temporaries once per process and directory (the last one swept is
 * remembered): a start pays one readdir, not every lookup. */
static void sweep_once(const char *dir)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char swept[4096];
    pthread_mutex_lock(&mu);
    bool first = strncmp(swept, dir, sizeof swept) != 0;
    if (first)
        snprintf(swept, sizeof swept, "%s", dir);
    pthread_mutex_unlock(&mu);
    if (first)
        mc_remove_stale_temps(dir);
}

static int file_path(const char *dir, const mc_key *key, char *buf, size_t n)
{
    char hex[33];
    mc_key_hex(key, hex);
    int w = snprintf(buf, n, "%s/%s.cubin", dir, hex);
    return (w > 0 && (size_t)w < n) ? 0 : -1;
}

/* Write len bytes to a temporary file in dir (named after base), fsync it and rename it
 * to path, then fsync dir: readers see the old file or the whole new one, never a part. */
loom_status mc_replace_file(const char *dir, const char *base, const char *path, const void *data,
                            size_t len, char *err, size_t errlen)
{
    char tmp[4600], why[4200];
    if (mc_path_refused(path, why, sizeof why)) { /* never replace a device, a FIFO, ... */
        snprintf(err, errlen, "%s: not replaced (loom writes only regular files)", why);
        return LOOM_ERR_RUNTIME;
    }
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld.XXXXXX", dir, base, (long)getpid());
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create a temporary file in %s: %s", dir, strerror(errno));
        return LOOM_ERR_RUNTIME;
    }
    size_t left = len;
    const char *p = data;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        p += w;
        left -= (size_t)w;
    }
    int saved = errno;
    if (left || fsync(fd) != 0) {
        if (!left)
            saved = errno;
        close(fd);
        unlink(tmp);
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(saved));
        return LOOM_ERR_RUNTIME;
    }
    (void)fchmod(fd, 0644);
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        saved = errno;
        unlink(tmp);
        snprintf(err, errlen, "cannot move %s to %s: %s", tmp, path, strerror(saved));
        return LOOM_ERR_RUNTIME;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd); /* make the rename durable (best effort) */
        close(dfd);
    }
    return LOOM_OK;
}

loom_status mc_disk_store(const char *dir, const mc_key *key, const void *cubin, size_t n,
                          const mc_meta *meta, char *err, size_t errlen)
{
    char path[4096], hex[33];
    if (file_path(dir, key, path, sizeof path) != 0) {
        snprintf(err, errlen, "cache directory name too long: %s", dir);
        return LOOM_ERR_INVALID;
    }
    if (rt_make_dirs(dir) != 0) {
        struct stat sb;
        if (errno == ENOTDIR && stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
            snprintf(err, errlen, "cache directory %s is %s, not a directory", dir,
                     mc_file_kind((unsigned)sb.st_mode));
        else
            snprintf(err, errlen, "cannot create cache directory %s: %s", dir, strerror(errno));
        return LOOM_ERR_RUNTIME;
    }
    sweep_once(dir);
    void *img;
    size_t len;
    loom_status st = mc_encode(key, cubin, n, meta, &img, &len);
    if (st != LOOM_OK) {
        snprintf(err, errlen, "cannot encode a %zu-byte cubin%s", n,
                 st == LOOM_ERR_INVALID ? " (bad TMA descriptor list)" : "");
        return st;
    }
    mc_key_hex(key, hex);
    st = mc_replace_file(dir, hex, path, img, len, err, errlen);
    free(img);
    return st;
}

char *mc_read_file(const char *path, size_t max, size_t *len)
{
    /* never open what is not a regular file: a FIFO's open blocks until a writer comes,
     * a device's open may do anything.  O_NONBLOCK covers a swap between stat and open. */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        errno = EFBIG;
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size > max) {
        close(fd);
        errno = EFBIG;
        return NULL;
    }
    size_t n = (size_t)sb.st_size, got = 0;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    *len = got;
    return buf;
}

mc_lookup mc_disk_load(const char *dir, const mc_key *key, void **cubin, size_t *n,
                       mc_meta *meta, char *why, size_t whylen)
{
    char path[4096];
    *cubin = NULL;
    *n = 0;
    if (why && whylen)
        why[0] = 0;
    if (file_path(dir, key, path, sizeof path) != 0)
        return MC_MISS;
    sweep_once(dir);
    char refused[4200];
    if (mc_path_refused(path, refused, sizeof refused)) {
        if (why && whylen)
            snprintf(why, whylen, "%s: treated as a miss and left alone", refused);
        return MC_MISS;
    }
    size_t got = 0;
    char *buf = mc_read_file(path, (size_t)1 << 30, &got);
    if (!buf) {
        if (errno == EFBIG && why && whylen)
            snprintf(why, whylen, "%s: not a regular file of a sane size", path);
        return MC_MISS; /* never delete something that is not ours to judge */
    }
    const void *payload;
    size_t plen;
    char reason[128];
    if (!mc_decode(key, buf, got, &payload, &plen, meta, reason, sizeof reason)) {
        free(buf);
        unlink(path);
        if (why && whylen)
            snprintf(why, whylen, "%s: %s", path, reason);
        return MC_REJECTED;
    }
    memmove(buf, payload, plen);
    *cubin = buf;
    *n = plen;
    return MC_HIT;
}

bool mc_image_is_cubin(const void *image, size_t n)
{
    return image && n >= 4 && memcmp(image, "\x7f" "ELF", 4) == 0;
}

void mc_disk_drop(const char *dir, const mc_key *key)
{
    char path[4096];
    struct stat sb;
    if (file_path(dir, key, path, sizeof path) == 0 && lstat(path, &sb) == 0 && S_ISREG(sb.st_mode))
        unlink(path);
}

/* ---------------------------------------------------------------- memory */

mc_entry *mc_table_find(mc_table *t, const mc_key *key)
{
    for (size_t i = 0; i < t->n; i++)
        if (memcmp(t->e[i].key.b, key->b, 16) == 0)
            return &t->e[i];
    return NULL;
}

mc_entry *mc_table_add(mc_table *t, const mc_entry *e)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        mc_entry *ne = realloc(t->e, cap * sizeof *ne);
        if (!ne)
            return NULL;
        t->e = ne;
        t->cap = cap;
    }
    t->e[t->n] = *e;
    return &t->e[t->n++];
}

void mc_table_free(mc_table *t)
{
    for (size_t i = 0; i < t->n; i++) {
        rt_tma_cache_destroy(t->e[i].tma);
        rt_hang_sites_free(t->e[i].hang);
    }
    free(t->e);
    t->e = NULL;
    t->n = t->cap = 0;
}
