/*
 * test_harden_cache.c -- the on-disk caches and the ptxas child process under hostile
 * conditions (issue 41): what a cache path names, what killed writers leave, a ptxas
 * that hangs or fails.
 *
 * Without a GPU:
 *   - a tuning cache path that is a FIFO, a character device (a copy of /dev/null made
 *     with mknod in a temporary directory, never the real one), a directory or a socket
 *     is refused with a message naming it; nothing blocks (an alarm guards every such
 *     test); the node is still of its kind afterwards and no .lock is made beside it;
 *   - a module cache directory holding such a node at a key's path: a miss, the node
 *     left alone, and a store over it refused;
 *   - temporary files of writers that are gone are removed by a later process, a live
 *     writer's are kept; the same for ptxas's private directories;
 *   - a ptxas that hangs returns LOOM_ERR_TIMEOUT after about LOOM_PTXAS_TIMEOUT_MS,
 *     with what it started killed and its directory removed; every other failure removes
 *     it too;
 *   - LOOM_CACHE reads as a switch that is on unless set off.
 * With a GPU (skipped otherwise): a setmaxnreg kernel compiled while ptxas fails is loaded
 * from its PTX and not cached; the next runtime, with a working ptxas, compiles and caches
 * the cubin; a PTX image an older loom cached under the cubin's key is dropped.
 */
#include <criterion/criterion.h>

#include "loom.h"
#include "testutil.h"

#include "../templates/tpl.h"
#include "../util/util.h"
#include "gpu.h"
#include "module_cache.h"
#include "tune.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- helpers */

static char *temp_dir(void) { return t_temp_dir("loom-harden-test"); }
#define remove_dir t_remove_dir

/* A SIGALRM kills the test (a failure) instead of letting a blocked open hang the suite. */
static void guard(unsigned seconds) { alarm(seconds); }

enum node { N_FIFO, N_CHAR, N_DIR, N_SOCK };
static const char *const node_words[] = {"a FIFO", "a character device", "a directory", "a socket"};

/* Make a node of kind at path: false (the test skips) only for a device mknod refuses. */
static bool make_node(const char *path, enum node kind)
{
    switch (kind) {
    case N_FIFO: cr_assert_eq(mkfifo(path, 0644), 0, "mkfifo %s: %s", path, strerror(errno)); return true;
    case N_CHAR: return mknod(path, S_IFCHR | 0666, makedev(1, 3)) == 0; /* a /dev/null of our own */
    case N_DIR: cr_assert_eq(mkdir(path, 0755), 0, "mkdir %s", path); return true;
    case N_SOCK: {
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        cr_assert_geq(s, 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        cr_assert_lt(strlen(path), sizeof a.sun_path);
        snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
        cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0, "bind %s: %s", path, strerror(errno));
        close(s); /* the socket file stays */
        return true;
    }
    }
    return false;
}

static bool is_kind(const char *path, enum node kind)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return false;
    switch (kind) {
    case N_FIFO: return S_ISFIFO(sb.st_mode);
    case N_CHAR: return S_ISCHR(sb.st_mode) && sb.st_rdev == makedev(1, 3);
    case N_DIR: return S_ISDIR(sb.st_mode);
    case N_SOCK: return S_ISSOCK(sb.st_mode);
    }
    return false;
}

/* Entries of dir (without . and ..) whose name contains part (NULL: all). */
static int count_entries(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    cr_assert(d, "%s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && (!part || strstr(e->d_name, part)))
            n++;
    closedir(d);
    return n;
}

static void defaults(const loom_param *p, int n, int64_t *v)
{
    char err[256];
    memset(v, 0, LOOM_MAX_PARAMS * sizeof *v);
    cr_assert_eq(loom_params_parse(p, n, NULL, v, err, sizeof err), 0);
}

static const tc_device dev_a = {"NVIDIA Test GPU", 132, 13000};

/* Store one entry in the tuning cache at path: the status, the message in err. */
static loom_status tune_store(const char *path, char *err, size_t errlen)
{
    const loom_template *t = loom_template_find("ikbo_broadcast_add");
    cr_assert(t);
    int64_t sh[LOOM_MAX_PARAMS];
    defaults(t->shape, t->nshape, sh);
    tc_record rec = {.ms = 1};
    defaults(t->config, t->nconfig, rec.config);
    return tc_store(path, "k", t, sh, sh, &dev_a, &rec, err, errlen);
}

/* A pid that no longer exists: a child's, reaped. */
static pid_t dead_pid(void)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(0);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    return pid;
}

static void touch(const char *path, time_t age_s)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0, "%s", path);
    cr_assert_eq(write(fd, "x", 1), 1);
    close(fd);
    if (age_s) {
        struct timeval tv[2];
        gettimeofday(&tv[0], NULL);
        tv[0].tv_sec -= age_s;
        tv[1] = tv[0];
        cr_assert_eq(utimes(path, tv), 0);
    }
}

static bool exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* ---------------------------------------------------------------- the tuning cache */

/* LOOM_TUNE_CACHE naming a node that is not a regular file: tc_open warns with its path
 * and kind (not "File too large") and reads nothing, tc_store refuses it: the node is as
 * it was, with no lock file or temporary beside it. */
static void tune_cache_refuses(enum node kind)
{
    char *dir = temp_dir(), path[256], lock[300], warn[8192], err[8192];
    snprintf(path, sizeof path, "%s/tune.json", dir);
    snprintf(lock, sizeof lock, "%s.lock", path);
    if (!make_node(path, kind)) {
        remove_dir(dir);
        cr_skip_test("mknod refused here: %s", strerror(errno));
    }
    guard(20);
    tc_file *f = tc_open(path, warn, sizeof warn);
    cr_assert(f);
    cr_expect_eq(tc_count(f), 0);
    tc_close(f);
    cr_expect(strstr(warn, path) && strstr(warn, node_words[kind]) && strstr(warn, "not a regular file"),
              "warning: %s", warn);
    cr_expect_null(strstr(warn, "File too large"), "%s", warn);
    cr_expect_eq(tune_store(path, err, sizeof err), LOOM_ERR_RUNTIME);
    cr_expect(strstr(err, path) && strstr(err, node_words[kind]), "error: %s", err);
    cr_expect(is_kind(path, kind), "the %s was replaced", node_words[kind]);
    cr_expect_not(exists(lock), "a lock file was made beside %s", node_words[kind]);
    cr_expect_eq(count_entries(dir, NULL), 1, "something was left beside the node");
    /* the cache's path through tc_path, as loom_tune takes it */
    setenv("LOOM_TUNE_CACHE", path, 1);
    char p2[256];
    cr_expect(tc_path(p2, sizeof p2));
    cr_expect_str_eq(p2, path);
    unsetenv("LOOM_TUNE_CACHE");
    alarm(0);
    remove_dir(dir);
}

Test(harden_cache, tune_cache_fifo_is_refused) { tune_cache_refuses(N_FIFO); }
Test(harden_cache, tune_cache_char_device_is_refused) { tune_cache_refuses(N_CHAR); }
Test(harden_cache, tune_cache_directory_is_refused) { tune_cache_refuses(N_DIR); }
Test(harden_cache, tune_cache_socket_is_refused) { tune_cache_refuses(N_SOCK); }

/* A symbolic link to a device is refused like the device; the link stays. */
Test(harden_cache, tune_cache_link_to_a_device_is_refused)
{
    char *dir = temp_dir(), node[256], path[256], err[8192], warn[8192];
    snprintf(node, sizeof node, "%s/null", dir);
    snprintf(path, sizeof path, "%s/tune.json", dir);
    if (!make_node(node, N_CHAR)) {
        remove_dir(dir);
        cr_skip_test("mknod refused here");
    }
    cr_assert_eq(symlink(node, path), 0);
    guard(20);
    tc_close(tc_open(path, warn, sizeof warn));
    cr_expect(strstr(warn, "a character device"), "%s", warn);
    cr_expect_eq(tune_store(path, err, sizeof err), LOOM_ERR_RUNTIME);
    struct stat sb;
    cr_expect(lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode), "the link was replaced");
    cr_expect(is_kind(node, N_CHAR));
    cr_expect_eq(count_entries(dir, NULL), 2);
    remove_dir(dir);
}

/* A FIFO where the lock file goes: refused, nothing written, no block. */
Test(harden_cache, tune_cache_lock_fifo_is_refused)
{
    char *dir = temp_dir(), path[256], lock[300], err[8192];
    snprintf(path, sizeof path, "%s/tune.json", dir);
    snprintf(lock, sizeof lock, "%s.lock", path);
    make_node(lock, N_FIFO);
    guard(20);
    cr_expect_eq(tune_store(path, err, sizeof err), LOOM_ERR_RUNTIME);
    cr_expect(strstr(err, lock) && strstr(err, "a FIFO"), "%s", err);
    cr_expect(is_kind(lock, N_FIFO));
    cr_expect_not(exists(path));
    remove_dir(dir);
}

/* A regular file still round-trips, and the store leaves no temporary. */
Test(harden_cache, tune_cache_regular_file_still_works)
{
    char *dir = temp_dir(), path[256], err[8192], warn[8192];
    snprintf(path, sizeof path, "%s/sub/tune.json", dir);
    cr_assert_eq(tune_store(path, err, sizeof err), LOOM_OK, "%s", err);
    tc_file *f = tc_open(path, warn, sizeof warn);
    cr_expect_str_empty(warn);
    cr_expect_eq(tc_count(f), 1);
    tc_close(f);
    char sub[256];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    cr_expect_eq(count_entries(sub, ".tmp."), 0);
    remove_dir(dir);
}

/* ---------------------------------------------------------------- the module cache */

/* A node at a key's path: a miss that names it, the node left alone, a store refused. */
static void module_cache_leaves_alone(enum node kind)
{
    char *dir = temp_dir(), path[256], hex[33], why[8192], err[8192];
    mc_key k;
    mc_key_make("harden", "sm_90a", 4, "b", &k);
    mc_key_hex(&k, hex);
    snprintf(path, sizeof path, "%s/%s.cubin", dir, hex);
    if (!make_node(path, kind)) {
        remove_dir(dir);
        cr_skip_test("mknod refused here");
    }
    guard(20);
    void *c = NULL;
    size_t n = 0;
    mc_meta meta;
    cr_expect_eq(mc_disk_load(dir, &k, &c, &n, &meta, why, sizeof why), MC_MISS);
    cr_expect_null(c);
    cr_expect(strstr(why, path) && strstr(why, node_words[kind]), "why: %s", why);
    mc_meta m0 = {0};
    cr_expect_neq(mc_disk_store(dir, &k, "\x7f" "ELF....", 8, &m0, err, sizeof err), LOOM_OK);
    cr_expect(strstr(err, path) && strstr(err, node_words[kind]), "error: %s", err);
    cr_expect(is_kind(path, kind), "the %s was replaced", node_words[kind]);
    cr_expect_eq(count_entries(dir, NULL), 1, "a temporary was left");
    remove_dir(dir);
}

Test(harden_cache, module_cache_fifo_is_a_miss_left_alone) { module_cache_leaves_alone(N_FIFO); }
Test(harden_cache, module_cache_char_device_is_a_miss_left_alone) { module_cache_leaves_alone(N_CHAR); }
Test(harden_cache, module_cache_directory_is_a_miss_left_alone) { module_cache_leaves_alone(N_DIR); }
Test(harden_cache, module_cache_socket_is_a_miss_left_alone) { module_cache_leaves_alone(N_SOCK); }

/* LOOM_CACHE_DIR naming a FIFO: a miss, and a store says the directory is a FIFO. */
Test(harden_cache, module_cache_dir_that_is_a_fifo)
{
    char *dir = temp_dir(), path[256], err[8192], why[8192];
    snprintf(path, sizeof path, "%s/cache", dir);
    make_node(path, N_FIFO);
    guard(20);
    mc_key k;
    mc_key_make("harden", "sm_90a", 4, "b", &k);
    void *c;
    size_t n;
    mc_meta meta, m0 = {0};
    cr_expect_eq(mc_disk_load(path, &k, &c, &n, &meta, why, sizeof why), MC_MISS);
    cr_expect_neq(mc_disk_store(path, &k, "x", 1, &m0, err, sizeof err), LOOM_OK);
    cr_expect(strstr(err, path) && strstr(err, "a FIFO, not a directory"), "%s", err);
    cr_expect(is_kind(path, N_FIFO));
    remove_dir(dir);
}

/* Temporaries: a gone writer's are removed, a live one's kept unless older than any write
 * takes; an older loom's (no pid) only when old. */
Test(harden_cache, stale_temporaries_of_gone_writers_are_removed)
{
    char *dir = temp_dir(), p[8][300];
    pid_t gone = dead_pid(), live = getpid();
    const char *hex = "0123456789abcdef0123456789abcdef";
    snprintf(p[0], sizeof p[0], "%s/.%s.tmp.%d.AbC123", dir, hex, (int)gone);     /* removed */
    snprintf(p[1], sizeof p[1], "%s/.%s.tmp.%d.AbC123", dir, hex, (int)live);     /* kept */
    snprintf(p[2], sizeof p[2], "%s/.%s.tmp.%d.XyZ789", dir, hex, (int)live);     /* old: removed */
    snprintf(p[3], sizeof p[3], "%s/.%s.tmp.QwE456", dir, hex);                   /* kept */
    snprintf(p[4], sizeof p[4], "%s/.%s.tmp.RtY456", dir, hex);                   /* old: removed */
    snprintf(p[5], sizeof p[5], "%s/.tune.json.tmp.%d.AbC123", dir, (int)gone);  /* removed */
    snprintf(p[6], sizeof p[6], "%s/%s.cubin", dir, hex);                         /* kept: no temp */
    snprintf(p[7], sizeof p[7], "%s/.notes.tmp.%d.AbC123x", dir, (int)gone);     /* kept: no temp */
    for (int i = 0; i < 8; i++)
        touch(p[i], i == 2 || i == 4 ? MC_TEMP_MAX_AGE_S + 60 : 0);
    /* a later process: its first lookup in the directory sweeps it */
    void *c;
    size_t n;
    mc_meta meta;
    char why[512];
    mc_key k;
    mc_key_make("other", "sm_90a", 4, "b", &k);
    cr_assert_eq(mc_disk_load(dir, &k, &c, &n, &meta, why, sizeof why), MC_MISS);
    const bool kept[8] = {false, true, false, true, false, false, true, true};
    for (int i = 0; i < 8; i++)
        cr_expect_eq(exists(p[i]), kept[i], "%s: %s", p[i], kept[i] ? "removed" : "kept");
    cr_expect_eq(mc_remove_stale_temps(dir), 0, "swept already");
    remove_dir(dir);
}

/* Writers killed mid-store (SIGKILL, no clean-up) leave temporaries; the next process
 * that looks in the directory removes them all, and the cache file is whole. */
Test(harden_cache, killed_cubin_writers_leave_nothing_behind)
{
    char *dir = temp_dir(), why[512];
    mc_key k;
    mc_key_make("killed", "sm_90a", 4, "b", &k);
    enum { BYTES = 4 << 20 };
    char *payload = malloc(BYTES);
    cr_assert(payload);
    memset(payload, 0x5a, BYTES);
    mc_meta m0 = {.smem_bytes = 1};
    int left = 0;
    for (int round = 0; round < 12; round++) {
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            char err[512];
            for (;;)
                mc_disk_store(dir, &k, payload, BYTES, &m0, err, sizeof err);
        }
        struct timespec ts = {0, (long)(3 + 5 * round) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        cr_assert_eq(waitpid(pid, NULL, 0), pid);
        left += count_entries(dir, ".tmp.") > 0;
    }
    cr_log_info("%d of 12 kills left a temporary", left);
    void *c = NULL;
    size_t n;
    mc_meta meta;
    mc_lookup lk = mc_disk_load(dir, &k, &c, &n, &meta, why, sizeof why);
    cr_expect(lk == MC_HIT || lk == MC_MISS, "%s", why);
    if (lk == MC_HIT)
        cr_expect(n == BYTES && meta.smem_bytes == 1);
    free(c);
    cr_expect_eq(count_entries(dir, ".tmp."), 0, "temporaries of killed writers were left");
    free(payload);
    remove_dir(dir);
}

/* ---------------------------------------------------------------- ptxas */

/* A script at dir/name with body; its path in out. */
static void script(const char *dir, const char *name, const char *body, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", dir, name);
    FILE *f = fopen(out, "w");
    cr_assert(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    cr_assert_eq(chmod(out, 0755), 0);
}

static const char *const some_ptx = ".version 8.0\n.target sm_90a\n.address_size 64\n";

/* A ptxas that hangs: LOOM_ERR_TIMEOUT after about LOOM_PTXAS_TIMEOUT_MS, naming it; the
 * script and the sleep it started are killed; no loom-ptxas-* directory is left. */
Test(harden_cache, hanging_ptxas_times_out_and_cleans_up)
{
    char *dir = temp_dir(), *tmp = temp_dir(), exe[300], pidf[300], body[800];
    snprintf(pidf, sizeof pidf, "%s/sleep.pid", dir);
    snprintf(body, sizeof body, "sleep 60 &\necho $! > '%s'\nwait", pidf);
    script(dir, "ptxas", body, exe, sizeof exe);
    setenv("LOOM_PTXAS", exe, 1);
    setenv("LOOM_PTXAS_TIMEOUT_MS", "300", 1);
    setenv("TMPDIR", tmp, 1);
    guard(30);
    void *cubin = NULL;
    size_t n = 0;
    char err[8192];
    double t0 = util_now_ms();
    loom_status st = rt_ptxas_compile(some_ptx, "sm_90a", &cubin, &n, err, sizeof err);
    double ms = util_now_ms() - t0;
    cr_expect_eq(st, LOOM_ERR_TIMEOUT, "%s: %s", loom_status_name(st), err);
    cr_expect(strstr(err, "LOOM_PTXAS_TIMEOUT_MS=300") && strstr(err, exe), "%s", err);
    cr_expect(ms >= 290 && ms < 5000, "returned after %.0f ms", ms);
    cr_expect_null(cubin);
    cr_expect_eq(count_entries(tmp, "loom-ptxas-"), 0, "the ptxas directory was left");
    /* the script's own child was killed with it (gone, or a zombie of its new parent) */
    FILE *f = fopen(pidf, "r");
    int sp = 0;
    if (f) {
        cr_expect_eq(fscanf(f, "%d", &sp), 1);
        fclose(f);
    }
    if (sp > 0) {
        char statp[64], line[512] = "";
        snprintf(statp, sizeof statp, "/proc/%d/stat", sp);
        for (int i = 0; i < 100; i++) { /* its reaping may take a moment */
            FILE *s = fopen(statp, "r");
            if (!s)
                break;
            line[0] = 0;
            char *r = fgets(line, sizeof line, s);
            (void)r;
            fclose(s);
            char *close_paren = strrchr(line, ')');
            if (close_paren && close_paren[2] == 'Z')
                break;
            usleep(10000);
            line[0] = 0;
        }
        char *close_paren = strrchr(line, ')');
        cr_expect(!line[0] || (close_paren && close_paren[2] == 'Z'), "the sleep ptxas started still runs: %s", line);
    }
    unsetenv("LOOM_PTXAS");
    unsetenv("LOOM_PTXAS_TIMEOUT_MS");
    unsetenv("TMPDIR");
    remove_dir(dir);
    remove_dir(tmp);
}

/* Every failure of ptxas removes its directory: a non-zero exit, no cubin, extra files. */
Test(harden_cache, failing_ptxas_leaves_no_directory)
{
    char *dir = temp_dir(), *tmp = temp_dir(), exe[300];
    setenv("TMPDIR", tmp, 1);
    const char *bodies[] = {
        "echo 'ptxas fatal: planted failure' >&2; exit 3",
        "exit 0",                                                       /* no cubin */
        "d=$(dirname \"$3\"); touch \"$d/extra\"; mkdir \"$d/sub\"; exit 1", /* $3: the PTX file */
    };
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        char name[32];
        snprintf(name, sizeof name, "ptxas%zu", i);
        script(dir, name, bodies[i], exe, sizeof exe);
        setenv("LOOM_PTXAS", exe, 1);
        void *cubin = NULL;
        size_t n = 0;
        char err[8192] = "";
        loom_status st = rt_ptxas_compile(some_ptx, "sm_90a", &cubin, &n, err, sizeof err);
        cr_expect_neq(st, LOOM_OK, "script %zu", i);
        cr_expect_null(cubin);
        cr_expect_eq(count_entries(tmp, "loom-ptxas-"), 0, "script %zu left its directory (%s)", i, err);
        if (i == 0)
            cr_expect(strstr(err, "planted failure"), "%s", err);
    }
    unsetenv("LOOM_PTXAS");
    unsetenv("TMPDIR");
    remove_dir(dir);
    remove_dir(tmp);
}

/* A ptxas directory of a process that is gone is removed by the next ptxas run; one of a
 * live process is kept. */
Test(harden_cache, ptxas_directories_of_gone_processes_are_removed)
{
    char *dir = temp_dir(), *tmp = temp_dir(), exe[300], gone[400], live[400], f[500];
    snprintf(gone, sizeof gone, "%s/loom-ptxas-%d-aB3dE5", tmp, (int)dead_pid());
    snprintf(live, sizeof live, "%s/loom-ptxas-%d-fG7hI9", tmp, (int)getpid());
    cr_assert_eq(mkdir(gone, 0700), 0);
    cr_assert_eq(mkdir(live, 0700), 0);
    snprintf(f, sizeof f, "%s/k.ptx", gone);
    touch(f, 0);
    script(dir, "ptxas", "exit 1", exe, sizeof exe);
    setenv("LOOM_PTXAS", exe, 1);
    setenv("TMPDIR", tmp, 1);
    void *cubin = NULL;
    size_t n = 0;
    char err[8192];
    cr_expect_neq(rt_ptxas_compile(some_ptx, "sm_90a", &cubin, &n, err, sizeof err), LOOM_OK);
    cr_expect_not(exists(gone), "a gone process's directory was kept");
    cr_expect(exists(live), "a live process's directory was removed");
    unsetenv("LOOM_PTXAS");
    unsetenv("TMPDIR");
    remove_dir(dir);
    remove_dir(tmp);
}

/* The image a failed ptxas leaves (the PTX) is not a cubin, so it is never cached; what
 * a working ptxas makes is. */
Test(harden_cache, ptx_fallback_is_not_a_cubin)
{
    cr_expect_not(mc_image_is_cubin(some_ptx, strlen(some_ptx) + 1));
    cr_expect_not(mc_image_is_cubin("\x7f" "EL", 3));
    cr_expect(mc_image_is_cubin("\x7f" "ELF\x02\x01", 6));
    const char *ptxas = t_find_ptxas();
    if (!ptxas)
        cr_skip_test("no ptxas on this machine");
    const char *ptx = ".version 8.0\n.target sm_90a\n.address_size 64\n"
                      ".visible .entry k()\n{\n\tret;\n}\n";
    void *cubin = NULL;
    size_t n = 0;
    char err[8192];
    cr_assert_eq(rt_ptxas_compile(ptx, "sm_90a", &cubin, &n, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect(mc_image_is_cubin(cubin, n));
    free(cubin);
}

/* ---------------------------------------------------------------- switches */

Test(harden_cache, loom_cache_is_a_switch_on_by_default)
{
    char d[512];
    setenv("LOOM_CACHE_DIR", "/tmp/somewhere", 1);
    unsetenv("LOOM_CACHE");
    cr_expect(mc_disk_dir(d, sizeof d));
    /* "" is unset; "maybe" keeps the default, on, with a warning */
    const char *on[] = {"1", "yes", "on", "TRUE", "maybe"}, *off[] = {"0", "no", "off", "false", "OFF"};
    for (int i = 0; i < 5; i++) {
        setenv("LOOM_CACHE", on[i], 1);
        cr_expect(mc_disk_dir(d, sizeof d), "LOOM_CACHE=%s", on[i]);
        setenv("LOOM_CACHE", off[i], 1);
        cr_expect_not(mc_disk_dir(d, sizeof d), "LOOM_CACHE=%s", off[i]);
    }
    unsetenv("LOOM_CACHE");
    unsetenv("LOOM_CACHE_DIR");
}

/* ---------------------------------------------------------------- with a GPU */

static loom_kernel *setmaxnreg_kernel(void)
{
    const loom_template *t = loom_template_find("gemm");
    cr_assert_not_null(t);
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char err[512];
    cr_assert_eq(loom_params_parse(t->shape, t->nshape, "M=512,N=512,K=512", sh, err, sizeof err), 0, "%s", err);
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, "BM=128,BN=128,cwarps=8,consumers=1", cf, err, sizeof err),
                 0, "%s", err);
    loom_kernel *k = t->build(sh, cf, err, sizeof err);
    cr_assert_not_null(k, "%s", err);
    return k;
}

/* The one .cubin file in dir ("" when none; fails for several). */
static void cubin_file(const char *dir, char *path, size_t n)
{
    path[0] = 0;
    DIR *d = opendir(dir);
    cr_assert(d);
    int found = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".cubin") && e->d_name[0] != '.') {
            snprintf(path, n, "%s/%s", dir, e->d_name);
            found++;
        }
    closedir(d);
    cr_assert_leq(found, 1);
}

/* Prepare k on a fresh GPU runtime: its compile info. */
static loom_compile_info prepare_fresh(loom_kernel *k)
{
    loom_runtime *rt = t_gpu_or_skip();
    loom_compile_info info;
    loom_status st = loom_prepare(rt, k, &info);
    cr_assert_eq(st, LOOM_OK, "%s", loom_runtime_error(rt));
    loom_runtime_destroy(rt);
    return info;
}

/* ptxas fails once: the PTX is loaded and nothing is cached.  Then ptxas works: the next
 * runtime compiles and caches the cubin, and the one after loads it from disk.  A PTX
 * image stored under the key (what an older loom did) is dropped and rebuilt. */
Test(harden_cache, ptx_fallback_is_never_cached_under_the_cubin_key)
{
    if (!t_find_ptxas())
        cr_skip_test("no ptxas on this machine");
    loom_runtime_destroy(t_gpu_or_skip()); /* skip before making anything */
    char *dir = temp_dir(), *sdir = temp_dir(), exe[300], path[512];
    setenv("LOOM_CACHE_DIR", dir, 1);
    unsetenv("LOOM_CACHE");
    unsetenv("LOOM_PTXAS_OPTS");
    script(sdir, "ptxas", "echo 'planted failure' >&2; exit 1", exe, sizeof exe);
    setenv("LOOM_PTXAS", exe, 1);
    loom_kernel *k = setmaxnreg_kernel();

    loom_compile_info info = prepare_fresh(k);
    cr_expect_eq(info.source, 0);
    cr_expect_str_eq(info.linker ? info.linker : "", "PTX load");
    cubin_file(dir, path, sizeof path);
    cr_expect_str_empty(path, "the PTX fallback was cached: %s", path);

    unsetenv("LOOM_PTXAS"); /* the toolkit's ptxas */
    info = prepare_fresh(k);
    cr_expect_eq(info.source, 0, "the second run did not compile");
    cr_expect_str_eq(info.linker ? info.linker : "", "ptxas");
    cubin_file(dir, path, sizeof path);
    cr_assert(path[0], "no cubin cached");
    info = prepare_fresh(k);
    cr_expect_eq(info.source, 2, "the cached cubin was not loaded");

    /* what an older loom left: the PTX under the cubin's key, in a valid file */
    size_t len = 0;
    char *file = mc_read_file(path, (size_t)1 << 30, &len);
    cr_assert(file && len > MC_HEADER_BYTES);
    mc_key key;
    memcpy(key.b, file + 16, 16);
    const void *cub;
    size_t cn;
    mc_meta meta;
    char why[256], err[512];
    cr_assert(mc_decode(&key, file, len, &cub, &cn, &meta, why, sizeof why), "%s", why);
    cr_assert(mc_image_is_cubin(cub, cn));
    cr_assert_eq(mc_disk_store(dir, &key, some_ptx, strlen(some_ptx) + 1, &meta, err, sizeof err), LOOM_OK, "%s", err);
    free(file);
    info = prepare_fresh(k);
    cr_expect_eq(info.source, 0, "a cached PTX image was loaded");
    cr_expect_str_eq(info.linker ? info.linker : "", "ptxas");
    void *c = NULL;
    size_t n = 0;
    cr_assert_eq(mc_disk_load(dir, &key, &c, &n, &meta, why, sizeof why), MC_HIT, "%s", why);
    cr_expect(mc_image_is_cubin(c, n), "the PTX image was not replaced by the cubin");
    free(c);
    loom_kernel_destroy(k);
    unsetenv("LOOM_CACHE_DIR");
    remove_dir(dir);
    remove_dir(sdir);
}
