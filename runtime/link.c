/*
 * link.c -- PTX -> cubin (driver.h: rt_link_ptx).
 *
 * Two linkers turn PTX into a cubin: the driver's JIT (cuLink*) and nvJitLink, the
 * toolkit's library (libnvJitLink.so.13 or .12, dlopen'ed on first use; LOOM_NVJITLINK_LIB
 * names another file).  Both run the same ptxas inside; LOOM_LINKER=driver|nvjitlink
 * picks one, and the default is the driver (see want_nvjitlink for why).  nvJitLink
 * falls back to the driver where it is missing, fails, or makes a cubin the driver will
 * not load (a toolkit newer than the driver: module.c finds out, and
 * rt_link_reject turns nvJitLink off for the rest of the process).
 *
 * PTX that uses setmaxnreg cannot go through either (rt_link_ptx says why): it is
 * compiled by the toolkit's ptxas as a whole program (a child process: LOOM_PTXAS names
 * it, else $CUDA_HOME/bin, /usr/local/cuda/bin, then PATH), and where there is no ptxas,
 * or it fails, or its cubin does not load, the image is the PTX itself, which the module
 * load compiles as a whole program in the driver (never cached by loom: module.c keeps
 * only cubins, so a later process with a working ptxas makes and caches the cubin).  A
 * failed link returns the JIT log in the error message.
 *
 * ptxas runs under a time limit (LOOM_PTXAS_TIMEOUT_MS, default 120 s; the largest
 * kernels take a few seconds): past it, ptxas and whatever it started (its own process
 * group) are killed and reaped, and the call fails saying so.  Its private directory
 * ($TMPDIR/loom-ptxas-<pid>-XXXXXX) is removed on every path out, and one left by a
 * process that was killed meanwhile is removed by the next process that runs ptxas.
 */
#include "driver.h"
#include "../util/util.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---------------------------------------------------------------- the driver's JIT */

/* Link PTX into a cubin with the driver's JIT at -O3.  *cubin is malloc'ed. */
static loom_status link_driver(rt_gpu *g, const char *ptx, const char *what, void **cubin, size_t *n,
                               char *err, size_t errlen)
{
    *cubin = NULL;
    *n = 0;
    char *elog = calloc(1, JIT_LOG_BYTES);
    if (!elog) {
        snprintf(err, errlen, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    CUjit_option opts[3] = {CU_JIT_OPTIMIZATION_LEVEL, CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[3] = {(void *)(uintptr_t)3, elog, (void *)(uintptr_t)(JIT_LOG_BYTES - 1)};
    CUlinkState ls = NULL;
    loom_status st = LOOM_OK;
    CUresult r = cu.cuLinkCreate_v2(3, opts, vals, &ls);
    if (r != CUDA_SUCCESS) {
        st = cu_fail(g, r, err, errlen, "cuLinkCreate_v2 for %s", what);
        goto done;
    }
    r = cu.cuLinkAddData_v2(ls, CU_JIT_INPUT_PTX, (void *)ptx, strlen(ptx) + 1, what, 0, NULL, NULL);
    const char *step = "cuLinkAddData_v2 (PTX -> SASS)";
    void *img = NULL;
    size_t imgn = 0;
    if (r == CUDA_SUCCESS) {
        step = "cuLinkComplete";
        r = cu.cuLinkComplete(ls, &img, &imgn);
    }
    if (r != CUDA_SUCCESS) {
        char desc[256];
        cu_describe(r, desc, sizeof desc);
        snprintf(err, errlen,
                 "%s failed for %s: %s\nJIT log:\n%s\n(LOOM_DUMP_PTX=1 prints the PTX)", step,
                 what, desc, elog[0] ? elog : "(empty)");
        st = LOOM_ERR_COMPILE;
        goto done;
    }
    *cubin = malloc(imgn ? imgn : 1);
    if (!*cubin) {
        snprintf(err, errlen, "out of host memory for a %zu-byte cubin", imgn);
        st = LOOM_ERR_NOMEM;
        goto done;
    }
    memcpy(*cubin, img, imgn);
    *n = imgn;
done:
    if (ls)
        cu.cuLinkDestroy(ls);
    free(elog);
    return st;
}

/* ---------------------------------------------------------------- nvJitLink */

/* The few nvJitLink entry points and values used (nvJitLink.h declares them; loom builds
 * without the toolkit).  Results are 0 on success. */
typedef int (*PFN_nvJitLinkCreate)(void **handle, uint32_t nopts, const char **opts);
typedef int (*PFN_nvJitLinkDestroy)(void **handle);
typedef int (*PFN_nvJitLinkAddData)(void *handle, int type, const void *data, size_t size, const char *name);
typedef int (*PFN_nvJitLinkComplete)(void *handle);
typedef int (*PFN_nvJitLinkGetSize)(void *handle, size_t *size);
typedef int (*PFN_nvJitLinkGetData)(void *handle, void *out);
#define NVJITLINK_INPUT_PTX 2

#define JL_FUNCS(X)                                                                                \
    X(PFN_nvJitLinkCreate, create, "nvJitLinkCreate")                                              \
    X(PFN_nvJitLinkDestroy, destroy, "nvJitLinkDestroy")                                           \
    X(PFN_nvJitLinkAddData, add_data, "nvJitLinkAddData")                                          \
    X(PFN_nvJitLinkComplete, complete, "nvJitLinkComplete")                                        \
    X(PFN_nvJitLinkGetSize, cubin_size, "nvJitLinkGetLinkedCubinSize")                             \
    X(PFN_nvJitLinkGetData, cubin, "nvJitLinkGetLinkedCubin")                                      \
    X(PFN_nvJitLinkGetSize, log_size, "nvJitLinkGetErrorLogSize")                                  \
    X(PFN_nvJitLinkGetData, log, "nvJitLinkGetErrorLog")

static struct {
    int state; /* 0: not tried, 1: loaded, -1: unusable (why says why) */
    char why[256];
#define DECL(type, field, sym) type field;
    JL_FUNCS(DECL)
#undef DECL
} jl;
static pthread_mutex_t jl_lock = PTHREAD_MUTEX_INITIALIZER;

/* Load nvJitLink once per process; false (with jl.why) where it cannot be used. */
static bool jl_load(void)
{
    pthread_mutex_lock(&jl_lock);
    if (jl.state == 0) {
        /* LOOM_NVJITLINK_LIB is tried first, not alone (unlike LOOM_CUDA_LIB): where it
         * does not load, the toolkit's own names follow */
        const char *names[4] = {getenv("LOOM_NVJITLINK_LIB"), "libnvJitLink.so.13", "libnvJitLink.so.12",
                                "libnvJitLink.so"};
        char why[200];
        void *lib = rt_dlopen_first(names, 4, NULL, NULL, 0, why, sizeof why);
        jl.state = lib ? 1 : -1;
        if (!lib)
            snprintf(jl.why, sizeof jl.why, "no libnvJitLink.so.13 or .12 (%s)", why);
#define LOOKUP(type, field, sym)                                                                   \
    if (lib && !(*(void **)&jl.field = dlsym(lib, sym))) {                                         \
        jl.state = -1;                                                                             \
        snprintf(jl.why, sizeof jl.why, "libnvJitLink has no %s", sym);                            \
    }
        JL_FUNCS(LOOKUP)
#undef LOOKUP
    }
    bool ok = jl.state == 1;
    pthread_mutex_unlock(&jl_lock);
    return ok;
}

/* Link PTX into a cubin with nvJitLink at -O3 for g's arch.  *cubin is malloc'ed. */
static loom_status link_nvjitlink(rt_gpu *g, const char *ptx, const char *what, void **cubin, size_t *n,
                                  char *err, size_t errlen)
{
    *cubin = NULL;
    *n = 0;
    char arch[32];
    snprintf(arch, sizeof arch, "-arch=%s", g->props.arch);
    const char *opts[2] = {arch, "-O3"};
    void *h = NULL;
    const char *step = "nvJitLinkCreate";
    int r = jl.create(&h, 2, opts);
    if (r == 0) {
        step = "nvJitLinkAddData (PTX -> SASS)";
        r = jl.add_data(h, NVJITLINK_INPUT_PTX, ptx, strlen(ptx) + 1, what);
    }
    if (r == 0) {
        step = "nvJitLinkComplete";
        r = jl.complete(h);
    }
    size_t sz = 0;
    if (r == 0) {
        step = "nvJitLinkGetLinkedCubin";
        r = jl.cubin_size(h, &sz);
    }
    if (r == 0 && !(*cubin = malloc(sz ? sz : 1))) {
        jl.destroy(&h);
        snprintf(err, errlen, "out of host memory for a %zu-byte cubin", sz);
        return LOOM_ERR_NOMEM;
    }
    if (r == 0)
        r = jl.cubin(h, *cubin);
    if (r != 0) {
        char log[JIT_LOG_BYTES] = "";
        size_t ln = 0;
        if (h && jl.log_size(h, &ln) == 0 && ln > 0 && ln < sizeof log)
            jl.log(h, log);
        snprintf(err, errlen, "%s failed for %s: nvJitLink error %d\nJIT log:\n%s\n(LOOM_DUMP_PTX=1 prints the PTX)",
                 step, what, r, log[0] ? log : "(empty)");
        free(*cubin);
        *cubin = NULL;
        if (h)
            jl.destroy(&h);
        return LOOM_ERR_COMPILE;
    }
    *n = sz;
    jl.destroy(&h);
    return LOOM_OK;
}

/* ---------------------------------------------------------------- ptxas */

/* The ptxas to run: LOOM_PTXAS (a path; "0" turns ptxas off), else $CUDA_HOME/bin/ptxas,
 * /usr/local/cuda/bin/ptxas, then "ptxas" on PATH.  Returns false when turned off. */
static bool ptxas_path(char *buf, size_t n)
{
    const char *v = util_env_str("LOOM_PTXAS");
    if (v) {
        snprintf(buf, n, "%s", v);
        return strcmp(v, "0") != 0;
    }
    const char *home = util_env_str("CUDA_HOME");
    if (home && snprintf(buf, n, "%s/bin/ptxas", home) < (int)n && access(buf, X_OK) == 0)
        return true;
    if (access("/usr/local/cuda/bin/ptxas", X_OK) == 0) {
        snprintf(buf, n, "/usr/local/cuda/bin/ptxas");
        return true;
    }
    snprintf(buf, n, "ptxas"); /* posix_spawnp searches PATH */
    return true;
}

/* Write len bytes to path; false with errno set. */
static bool write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

/* ptxas's time limit in ms: LOOM_PTXAS_TIMEOUT_MS (1 ms to an hour), else two minutes,
 * far above the few seconds of the largest kernels. */
#define PTXAS_TIMEOUT_MS_DEFAULT 120000
static int64_t ptxas_timeout_ms(void)
{
    return util_env_int("LOOM_PTXAS_TIMEOUT_MS", PTXAS_TIMEOUT_MS_DEFAULT, 1, 3600000);
}

/* Remove dir and the files in it (ptxas's directory holds no subdirectories; an empty
 * one a custom ptxas made goes too). */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *de; (de = readdir(d));)
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
                unlinkat(dirfd(d), de->d_name, 0) != 0 && errno == EISDIR)
                unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
        closedir(d);
    }
    rmdir(dir);
}

/* Remove, once per process, the ptxas directories in tmp of processes that are gone
 * (killed while their ptxas ran): loom-ptxas-<pid>-XXXXXX, ours, whose pid no longer
 * exists; and loom-ptxas-XXXXXX of an older loom (no pid) older than an hour. */
static void sweep_ptxas_dirs(void)
{
    const char *tmp = util_env_str("TMPDIR");
    if (!tmp)
        tmp = "/tmp";
    DIR *d = opendir(tmp);
    if (!d)
        return;
    time_t now = time(NULL);
    for (struct dirent *de; (de = readdir(d));) {
        const char *name = de->d_name;
        if (strncmp(name, "loom-ptxas-", 11) != 0)
            continue;
        char *end;
        long pid = strtol(name + 11, &end, 10);
        bool with_pid = end != name + 11 && *end == '-' && strlen(end) == 7;
        bool old_style = strlen(name) == 17;
        struct stat sb;
        if ((!with_pid && !old_style) || fstatat(dirfd(d), name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid())
            continue;
        bool stale = with_pid ? pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH
                              : now - sb.st_mtime > 3600;
        if (stale) {
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", tmp, name);
            remove_dir(p);
        }
    }
    closedir(d);
}

/* Wait for child pid at most limit_ms: 1 when it ended (*ws set), 0 when the limit
 * passed first, -1 when it cannot be waited for (SIGCHLD ignored: reaped already). */
static int wait_child(pid_t pid, int64_t limit_ms, int *ws)
{
    double end = util_now_ms() + (double)limit_ms;
    long nap_us = 100; /* short naps first: most runs end within a second */
    for (;;) {
        pid_t r = waitpid(pid, ws, WNOHANG);
        if (r == pid)
            return 1;
        if (r < 0 && errno != EINTR)
            return -1;
        double left = end - util_now_ms();
        if (left <= 0)
            return 0;
        long us = nap_us < (long)(left * 1000) + 1 ? nap_us : (long)(left * 1000) + 1;
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
        nanosleep(&ts, NULL);
        if (nap_us < 5000)
            nap_us *= 2;
    }
}

loom_status rt_ptxas_compile(const char *ptx, const char *arch, void **cubin, size_t *n, char *err,
                             size_t errlen)
{
    *cubin = NULL;
    *n = 0;
    char exe[1024];
    if (!ptxas_path(exe, sizeof exe)) {
        snprintf(err, errlen, "ptxas is turned off (LOOM_PTXAS=0)");
        return LOOM_ERR_UNSUPPORTED;
    }
    /* a private directory for the PTX, the cubin and the messages */
    char dir[4096], in[4160], out[4160], logp[4160], archopt[48];
    const char *tmp = util_env_str("TMPDIR");
    static pthread_once_t swept = PTHREAD_ONCE_INIT;
    pthread_once(&swept, sweep_ptxas_dirs);
    snprintf(dir, sizeof dir, "%s/loom-ptxas-%ld-XXXXXX", tmp ? tmp : "/tmp", (long)getpid());
    if (!mkdtemp(dir)) {
        snprintf(err, errlen, "ptxas: cannot make a temporary directory %s: %s", dir, strerror(errno));
        return LOOM_ERR_UNSUPPORTED;
    }
    snprintf(in, sizeof in, "%s/k.ptx", dir);
    snprintf(out, sizeof out, "%s/k.cubin", dir);
    snprintf(logp, sizeof logp, "%s/log", dir);
    snprintf(archopt, sizeof archopt, "-arch=%s", arch);
    loom_status st = LOOM_OK;
    if (!write_file(in, ptx, strlen(ptx))) {
        snprintf(err, errlen, "ptxas: cannot write %s: %s", in, strerror(errno));
        st = LOOM_ERR_UNSUPPORTED;
        goto done;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    /* the options: LOOM_PTXAS_OPTS (whitespace-separated; they key the module cache too,
     * module.c), else -O3 */
    char optbuf[256], *argv[16] = {exe, archopt};
    int na = 2;
    const char *ov = util_env_str("LOOM_PTXAS_OPTS");
    snprintf(optbuf, sizeof optbuf, "%s", ov ? ov : "-O3");
    for (char *save = NULL, *tok = strtok_r(optbuf, " \t", &save); tok && na < 12; tok = strtok_r(NULL, " \t", &save))
        argv[na++] = tok;
    argv[na++] = in;
    argv[na++] = "-o";
    argv[na++] = out;
    argv[na] = NULL;
    /* its own process group, so a timeout kills what it started too (a wrapper script's
     * children) */
    posix_spawnattr_t sa;
    posix_spawnattr_init(&sa);
    posix_spawnattr_setflags(&sa, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&sa, 0);
    int64_t limit = ptxas_timeout_ms();
    pid_t pid;
    int rc = posix_spawnp(&pid, exe, &fa, &sa, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&sa);
    if (rc != 0) {
        snprintf(err, errlen, "ptxas: cannot run %s: %s", exe, strerror(rc));
        st = LOOM_ERR_UNSUPPORTED;
        goto done;
    }
    int ws = 0, w = wait_child(pid, limit, &ws);
    if (w == 0) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
            ;
        snprintf(err, errlen, "%s %s ran past LOOM_PTXAS_TIMEOUT_MS=%lld ms: killed", exe, archopt,
                 (long long)limit);
        st = LOOM_ERR_TIMEOUT;
        goto done;
    }
    if (w < 0)
        ws = 0; /* reaped by someone else: its status is lost; the cubin file tells */
    size_t loglen = 0;
    char *log = mc_read_file(logp, 1 << 20, &loglen);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        /* 127: the child could not exec it (posix_spawnp reports that only here) */
        st = WIFEXITED(ws) && WEXITSTATUS(ws) == 127 ? LOOM_ERR_UNSUPPORTED : LOOM_ERR_COMPILE;
        snprintf(err, errlen, "%s %s %s failed (%s %d):\n%s", exe, archopt, ov ? ov : "-O3",
                 WIFEXITED(ws) ? "exit status" : "signal", WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws),
                 log && *log ? log : "(no messages)");
    } else if (log && strstr(log, "setmaxnreg") && strstr(log, "ignored")) {
        /* never expected of a whole-program compile; it would make every thread keep the
         * launch's registers, which is what this route exists to avoid */
        snprintf(err, errlen, "%s ignored setmaxnreg:\n%s", exe, log);
        st = LOOM_ERR_COMPILE;
    } else if (!(*cubin = mc_read_file(out, (size_t)1 << 30, n))) {
        snprintf(err, errlen, "ptxas: cannot read %s: %s", out, strerror(errno));
        st = LOOM_ERR_COMPILE;
    }
    free(log);
done:
    remove_dir(dir); /* k.ptx, k.cubin, log, and anything a custom ptxas left */
    return st;
}

/* ---------------------------------------------------------------- choosing */

/* Set when a cubin of that linker would not load: the driver is older than the toolkit,
 * and the linker is not used again. */
static atomic_bool jl_cubins_rejected, ptxas_cubins_rejected;

bool rt_link_reject(const char *linker)
{
    if (!strcmp(linker, "nvJitLink")) {
        jl_cubins_rejected = true; /* (clang refuses an atomic assignment as a bool return value) */
        return true;
    }
    if (!strcmp(linker, "ptxas")) {
        ptxas_cubins_rejected = true;
        return true;
    }
    return false;
}

/* Which linker LOOM_LINKER asks for: true for nvJitLink.
 *
 * Why the driver by default: both run the same ptxas, so a kernel's link takes the same
 * time either way (measured on an H200 host: bench_compile prints both), while nvJitLink
 * first costs a dlopen of a 100 MB library and its own start-up, which a process pays on
 * its first compile. */
static bool want_nvjitlink(void)
{
    static const char *const words[] = {"driver", "nvjitlink"};
    return util_env_choice("LOOM_LINKER", words, 2, 0) == 1 && !jl_cubins_rejected;
}

/* Link PTX into a cubin (*cubin malloc'ed) with the chosen linker; *linker names the one
 * that made it.  nvJitLink falls back to the driver where it cannot be loaded or fails. */
loom_status rt_link_ptx(rt_gpu *g, const char *ptx, const char *what, void **cubin, size_t *n,
                        const char **linker, char *err, size_t errlen)
{
    /* setmaxnreg (a task's register budget): both linkers compile PTX as a relocatable
     * unit, where ptxas drops it ("(C7504) 'setmaxnreg' ignored to maintain compatibility
     * across compilation units"), so every thread keeps the launch's 64K / threads
     * registers and a 384-thread kernel's consumers (232 wanted, 168 kept) spill.  Such
     * PTX goes to ptxas as a whole program instead: the cubin keeps setmaxnreg, and the
     * disk cache keeps the cubin, so a warm start runs no compiler at all.  Without ptxas
     * the image is the PTX itself: cuModuleLoadDataEx (load_image, module.c) compiles it
     * as a whole program too, but in every process that loads it. */
    if (strstr(ptx, "setmaxnreg")) {
        if (!ptxas_cubins_rejected) {
            loom_status pst = rt_ptxas_compile(ptx, g->props.arch, cubin, n, err, errlen);
            if (pst == LOOM_OK) {
                *linker = "ptxas";
                return LOOM_OK;
            }
            if (pst == LOOM_ERR_TIMEOUT) /* minutes lost: said whatever the verbosity */
                fprintf(stderr, "loom: warning: %s; loading the PTX of %s instead\n", err, what);
            else if (util_env_on("LOOM_CACHE_VERBOSE"))
                fprintf(stderr, "loom: ptxas not used for %s, loading the PTX: %s\n", what, err);
        }
        size_t len = strlen(ptx) + 1;
        if (!(*cubin = malloc(len))) {
            snprintf(err, errlen, "out of host memory");
            return LOOM_ERR_NOMEM;
        }
        memcpy(*cubin, ptx, len);
        *n = len;
        *linker = "PTX load";
        return LOOM_OK;
    }
    if (want_nvjitlink() && jl_load()) {
        if (link_nvjitlink(g, ptx, what, cubin, n, err, errlen) == LOOM_OK) {
            *linker = "nvJitLink";
            return LOOM_OK;
        }
        if (util_env_on("LOOM_CACHE_VERBOSE"))
            fprintf(stderr, "loom: nvJitLink failed, linking with the driver: %s\n", err);
    }
    *linker = "driver";
    return link_driver(g, ptx, what, cubin, n, err, errlen);
}
