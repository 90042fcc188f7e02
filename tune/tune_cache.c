/*
 * tune_cache.c -- the autotuner's persistent cache: one JSON file of tuned configs.
 *
 * A service tunes its shapes when it starts and expects the next start to find them, so
 * the cache must survive everything a fleet of processes does to a file: several of them
 * tuning at once, one killed in the middle, a disk that filled up, a stray edit.  The
 * design answers each:
 *
 *   - Readers take no lock.  Writers never edit the file in place: they write the whole
 *     new content to a temporary file in the same directory, fsync it, and rename it
 *     over the old name.  rename is atomic, so a reader sees the old file or the new
 *     one, never a mix; a writer killed at any point leaves the old file intact (and at
 *     most an orphaned temporary file, which the next writer deletes).
 *   - Writers serialize with flock on a separate <file>.lock (never on the data file,
 *     which is replaced), and read the file again under the lock before merging their
 *     entry in: two processes tuning different shapes at once both keep their results.
 *     flock is released by the kernel when a process dies, so a killed writer blocks
 *     nobody.
 *   - The cache path must name a regular file (or nothing yet).  A FIFO, a device, a
 *     directory or a socket there (LOOM_TUNE_CACHE=/dev/null) is refused with a message
 *     naming it: never opened (a FIFO would block the reader), never replaced by the
 *     rename, and no <file>.lock is made beside it.
 *   - Anything that does not parse as this format (a truncated or hand-broken file,
 *     another program's JSON, another format version) is ignored with a warning and
 *     rebuilt by the next write.  A malformed entry is skipped alone.
 *
 * The file is {"loom_tune_cache": 1, "entries": {KEY: ENTRY, ...}}.  KEY is a readable
 * string naming everything the decision depends on: template, shape bucket, GPU name and
 * SM count, driver version, loom version, and a hash of the template's candidate space
 * (knob names, defaults, candidates), so a template whose knobs change is tuned again.
 * ENTRY holds the config by knob name, the winner's time, how many configs were
 * considered, and (for people reading the file) the shape, bucket and device fields.
 * JSON goes through cJSON rather than a parser of our own.
 */
#define _GNU_SOURCE
#include "rt.h"
#include "module_cache.h" /* mc_path_refused */
#include "../util/util.h"
#include "tune.h"

#include <cjson/cJSON.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TC_FORMAT 1
#define TC_MAX_BYTES (64 << 20) /* a larger file is not ours */

/* ---------------------------------------------------------------- paths and keys */

bool tc_path(char *buf, size_t n)
{
    const char *p = util_env_str("LOOM_TUNE_CACHE");
    if (p) {
        int w = snprintf(buf, n, "%s", p);
        return w > 0 && (size_t)w < n;
    }
    char dir[4096];
    if (!mc_disk_dir(dir, sizeof dir))
        return false;
    int w = snprintf(buf, n, "%s/tune.json", dir);
    return w > 0 && (size_t)w < n;
}

/* "k=v,k=v" over a parameter list; dtype parameters by name. */
static void params_text(const loom_param *ps, int np, const int64_t *v, char *buf, size_t n)
{
    loom_params_format(ps, np, v, buf, n);
}

void tc_key(const loom_template *t, const int64_t *bucket, const tc_device *dev, char *buf,
            size_t n)
{
    /* the candidate space, hashed: knob names, defaults and candidate values */
    char space[4096];
    size_t p = 0;
    for (int i = 0; i < t->nconfig && p < sizeof space; i++) {
        const loom_param *c = &t->config[i];
        p += (size_t)snprintf(space + p, sizeof space - p, "%s=%lld:", c->key, (long long)c->def);
        for (int j = 0; j < c->ncand && p < sizeof space; j++)
            p += (size_t)snprintf(space + p, sizeof space - p, "%lld,", (long long)c->cand[j]);
        if (p < sizeof space)
            space[p++] = ';';
    }
    if (p >= sizeof space)
        p = sizeof space - 1;
    char shape[1024];
    params_text(t->shape, t->nshape, bucket, shape, sizeof shape);
    snprintf(buf, n, "%s|%s|%s|sm=%d|driver=%d|loom=%s|space=%016llx", t->name, shape, dev->gpu,
             dev->sm_count, dev->driver, LOOM_VERSION, (unsigned long long)mc_hash64(space, p));
}

/* ---------------------------------------------------------------- reading */

struct tc_file {
    cJSON *root;     /* the whole document (NULL: empty cache) */
    cJSON *entries;  /* its "entries" object */
};

/* Parse the cache text; NULL (and the reason in why) when it is not a cache of ours. */
static cJSON *parse_cache(const char *text, size_t len, char *why, size_t wn)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        snprintf(why, wn, "not valid JSON (at byte %lld)",
                 end ? (long long)(end - text) : -1LL);
        return NULL;
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "loom_tune_cache");
    const cJSON *ent = cJSON_GetObjectItemCaseSensitive(root, "entries");
    if (!cJSON_IsObject(root) || !cJSON_IsNumber(fmt) || !cJSON_IsObject(ent)) {
        snprintf(why, wn, "not a loom tuning cache (no \"loom_tune_cache\" and \"entries\")");
        cJSON_Delete(root);
        return NULL;
    }
    if (cJSON_GetNumberValue(fmt) != TC_FORMAT) { /* (a double: (int) of 1e12 is undefined) */
        snprintf(why, wn, "format %g, this loom reads format %d", cJSON_GetNumberValue(fmt), TC_FORMAT);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

tc_file *tc_open(const char *path, char *warn, size_t wn)
{
    if (warn && wn)
        warn[0] = 0;
    tc_file *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    size_t len = 0;
    char why[4200];
    if (mc_path_refused(path, why, sizeof why)) { /* checked before any open */
        if (warn && wn)
            snprintf(warn, wn, "tuning cache %s: ignored (loom reads and writes only regular files)", why);
        return f;
    }
    char *text = path ? mc_read_file(path, TC_MAX_BYTES, &len) : NULL;
    if (!text) {
        int e = errno;
        if (!path || e == ENOENT || !warn || !wn)
            return f;
        if (e == EFBIG && mc_path_refused(path, why, sizeof why)) /* it changed since */
            snprintf(warn, wn, "tuning cache %s: ignored (loom reads and writes only regular files)", why);
        else if (e == EFBIG)
            snprintf(warn, wn, "tuning cache %s is larger than %d MiB: ignored", path, TC_MAX_BYTES >> 20);
        else
            snprintf(warn, wn, "tuning cache %s cannot be read (%s): ignored", path, strerror(e));
        return f;
    }
    f->root = parse_cache(text, len, why, sizeof why);
    free(text);
    if (!f->root) {
        if (warn && wn)
            snprintf(warn, wn, "tuning cache %s is %s: ignored; the next tuning rewrites it", path, why);
        return f;
    }
    f->entries = cJSON_GetObjectItemCaseSensitive(f->root, "entries");
    return f;
}

void tc_close(tc_file *f)
{
    if (!f)
        return;
    cJSON_Delete(f->root);
    free(f);
}

int tc_count(const tc_file *f) { return f && f->entries ? cJSON_GetArraySize(f->entries) : 0; }

static bool get_num(const cJSON *o, const char *key, double *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x))
        return false;
    *v = cJSON_GetNumberValue(x);
    return true;
}

/* A count or config value: a number that converts to int32 without undefined behaviour
 * (a hand-edited 1e300 is malformed, not a crash). */
static bool get_int(const cJSON *o, const char *key, int64_t *v)
{
    double d;
    if (!get_num(o, key, &d) || !(d >= INT32_MIN && d <= INT32_MAX) || d != (double)(int64_t)d)
        return false;
    *v = (int64_t)d;
    return true;
}

bool tc_find(const tc_file *f, const char *key, const loom_template *t, tc_record *out)
{
    if (!f || !f->entries || !key)
        return false;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(f->entries, key);
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(e, "config");
    if (!cJSON_IsObject(e) || !cJSON_IsObject(cfg))
        return false;
    tc_record r;
    memset(&r, 0, sizeof r);
    for (int i = 0; i < t->nconfig; i++)
        if (!get_int(cfg, t->config[i].key, &r.config[i]))
            return false;
    double x;
    int64_t n;
    if (get_num(e, "ms", &x))
        r.ms = x;
    if (get_int(e, "candidates", &n))
        r.ncand = (int)n;
    if (get_int(e, "valid", &n))
        r.nvalid = (int)n;
    if (get_num(e, "tune_ms", &x))
        r.tune_ms = x;
    *out = r;
    return true;
}

/* ---------------------------------------------------------------- writing */

/* mkdir -p of the directory part of path. */
static int make_parent_dirs(const char *path)
{
    char p[4096];
    int w = snprintf(p, sizeof p, "%s", path);
    if (w <= 0 || (size_t)w >= sizeof p)
        return -1;
    char *slash = strrchr(p, '/');
    if (!slash || slash == p)
        return 0;
    *slash = 0;
    return rt_make_dirs(p);
}

/* Split path into its directory ("." when none) and base name. */
static void split_path(const char *path, char *dir, size_t dn, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, dn, ".");
        *base = path;
    } else if (slash == path) {
        snprintf(dir, dn, "/");
        *base = slash + 1;
    } else {
        snprintf(dir, dn, "%.*s", (int)(slash - path), path);
        *base = slash + 1;
    }
}

/* Delete temporary files of earlier writers that died before their rename
 * (.<base>.tmp.<pid>.XXXXXX, or .<base>.tmp.XXXXXX of an older loom).  Only lock holders
 * create them, and we hold the lock, so any that exist are orphans. */
static void remove_orphans(const char *dir, const char *base)
{
    char prefix[512];
    snprintf(prefix, sizeof prefix, ".%s.tmp.", base);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix)) != 0)
            continue;
        char p[4600];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
}

static cJSON *params_object(const loom_param *ps, int np, const int64_t *v)
{
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; o && i < np; i++)
        if (!cJSON_AddNumberToObject(o, ps[i].key, (double)v[i])) {
            cJSON_Delete(o);
            return NULL;
        }
    return o;
}

static cJSON *make_entry(const loom_template *t, const int64_t *shape, const int64_t *bucket,
                         const tc_device *dev, const tc_record *rec)
{
    cJSON *e = cJSON_CreateObject();
    if (!e)
        return NULL;
    char when[64] = "";
    time_t now = time(NULL);
    struct tm tmv;
    if (gmtime_r(&now, &tmv))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    cJSON *cfg = params_object(t->config, t->nconfig, rec->config);
    cJSON *sh = params_object(t->shape, t->nshape, shape);
    cJSON *bk = params_object(t->shape, t->nshape, bucket);
    bool ok = cfg && sh && bk && cJSON_AddStringToObject(e, "template", t->name) &&
              cJSON_AddItemToObject(e, "config", cfg) && (cfg = NULL, 1) &&
              cJSON_AddNumberToObject(e, "ms", rec->ms) &&
              cJSON_AddNumberToObject(e, "candidates", rec->ncand) &&
              cJSON_AddNumberToObject(e, "valid", rec->nvalid) &&
              cJSON_AddNumberToObject(e, "tune_ms", rec->tune_ms) &&
              cJSON_AddItemToObject(e, "shape", sh) && (sh = NULL, 1) &&
              cJSON_AddItemToObject(e, "bucket", bk) && (bk = NULL, 1) &&
              cJSON_AddStringToObject(e, "gpu", dev->gpu) &&
              cJSON_AddNumberToObject(e, "sms", dev->sm_count) &&
              cJSON_AddNumberToObject(e, "driver", dev->driver) &&
              cJSON_AddStringToObject(e, "loom", LOOM_VERSION) &&
              cJSON_AddStringToObject(e, "tuned_at", when);
    cJSON_Delete(cfg);
    cJSON_Delete(sh);
    cJSON_Delete(bk);
    if (!ok) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

loom_status tc_store(const char *path, const char *key, const loom_template *t,
                     const int64_t *shape, const int64_t *bucket, const tc_device *dev,
                     const tc_record *rec, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (!path || !key || !t || !shape || !bucket || !dev || !rec) {
        snprintf(err, errlen, "tc_store: missing argument");
        return LOOM_ERR_INVALID;
    }
    char dir[4096], lock[4200], why[4300];
    snprintf(lock, sizeof lock, "%s.lock", path);
    /* before anything is made: no directory, no lock file beside a device */
    if (mc_path_refused(path, why, sizeof why)) {
        snprintf(err, errlen, "tuning cache %s: not written (loom reads and writes only regular files)", why);
        return LOOM_ERR_RUNTIME;
    }
    if (mc_path_refused(lock, why, sizeof why)) {
        snprintf(err, errlen, "tuning cache lock %s: not used (loom locks only regular files)", why);
        return LOOM_ERR_RUNTIME;
    }
    if (make_parent_dirs(path) != 0) {
        snprintf(err, errlen, "cannot create the directory of %s: %s", path, strerror(errno));
        return LOOM_ERR_RUNTIME;
    }
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
    if (lfd < 0) {
        snprintf(err, errlen, "cannot open the lock file %s: %s", lock, strerror(errno));
        return LOOM_ERR_RUNTIME;
    }
    struct stat lsb;
    if (fstat(lfd, &lsb) != 0 || !S_ISREG(lsb.st_mode)) { /* it changed since the check */
        close(lfd);
        snprintf(err, errlen, "tuning cache lock %s is not a regular file: not used", lock);
        return LOOM_ERR_RUNTIME;
    }
    while (flock(lfd, LOCK_EX) != 0) {
        if (errno == EINTR)
            continue;
        snprintf(err, errlen, "cannot lock %s: %s", lock, strerror(errno));
        close(lfd);
        return LOOM_ERR_RUNTIME;
    }
    remove_orphans(dir, base);

    /* read what is there now (other processes may have added entries) */
    loom_status st = LOOM_OK;
    size_t len = 0;
    char *text = mc_read_file(path, TC_MAX_BYTES, &len);
    cJSON *root = NULL;
    if (text) {
        char why[256];
        root = parse_cache(text, len, why, sizeof why);
        if (!root)
            fprintf(stderr, "loom: warning: tuning cache %s is %s: rebuilding it\n", path, why);
        free(text);
    }
    if (!root) {
        root = cJSON_CreateObject();
        if (!root || !cJSON_AddNumberToObject(root, "loom_tune_cache", TC_FORMAT) ||
            !cJSON_AddObjectToObject(root, "entries")) {
            st = LOOM_ERR_NOMEM;
            goto out;
        }
    }
    cJSON *entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
    cJSON *e = make_entry(t, shape, bucket, dev, rec);
    if (!e) {
        st = LOOM_ERR_NOMEM;
        goto out;
    }
    if (cJSON_HasObjectItem(entries, key))
        cJSON_ReplaceItemInObjectCaseSensitive(entries, key, e);
    else if (!cJSON_AddItemToObject(entries, key, e)) {
        cJSON_Delete(e);
        st = LOOM_ERR_NOMEM;
        goto out;
    }
    char *out = cJSON_Print(root);
    if (!out) {
        st = LOOM_ERR_NOMEM;
        goto out;
    }
    size_t on = strlen(out);
    char *withnl = realloc(out, on + 2);
    if (withnl) {
        withnl[on] = '\n';
        withnl[on + 1] = 0;
        out = withnl;
    }
    st = mc_replace_file(dir, base, path, out, strlen(out), err, errlen);
    free(out);
out:
    if (st == LOOM_ERR_NOMEM)
        snprintf(err, errlen, "out of memory writing the tuning cache");
    cJSON_Delete(root);
    flock(lfd, LOCK_UN);
    close(lfd);
    return st;
}
