/*
 * link.c -- PTX -> cubin (driver.h: rt_link_ptx).
 *
 * Two linkers turn PTX into a cubin: the driver's JIT (cuLink*) and nvJitLink, the
 * toolkit's library (libnvJitLink.so.13 or .12, dlopen'ed on first use; LOOM_NVJITLINK_LIB
 * names another file).  Both run the same ptxas inside; LOOM_LINKER=driver|nvjitlink
 * picks one, and the default is the driver (see want_nvjitlink for why).  nvJitLink
 * falls back to the driver where it is missing, fails, or makes a cubin the driver will
 * not load (a toolkit newer than the driver: module.c finds out, and
 * rt_link_reject_nvjitlink turns nvJitLink off for the rest of the process).
 *
 * PTX that uses setmaxnreg is not linked at all (rt_link_ptx says why): the image is the
 * PTX, which the module load compiles as a whole program.  A failed link returns the JIT
 * log in the error message.
 */
#include "driver.h"
#include "../util/util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Set when a cubin nvJitLink made would not load: the driver is older than the toolkit,
 * and every later link goes to the driver. */
static atomic_bool jl_cubins_rejected;

void rt_link_reject_nvjitlink(void) { jl_cubins_rejected = true; }

/* Which linker LOOM_LINKER asks for: true for nvJitLink.
 *
 * Why the driver by default: both run the same ptxas, so a kernel's link takes the same
 * time either way (measured on an H200 host: bench_compile prints both), while nvJitLink
 * first costs a dlopen of a 100 MB library and its own start-up, which a process pays on
 * its first compile. */
static bool want_nvjitlink(void)
{
    const char *v = getenv("LOOM_LINKER");
    return v && !strcmp(v, "nvjitlink") && !jl_cubins_rejected;
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
     * PTX is the image itself: cuModuleLoadDataEx (load_image, module.c) compiles it as a whole
     * program, which honours setmaxnreg (and the driver's JIT cache keeps the result). */
    if (strstr(ptx, "setmaxnreg")) {
        size_t len = strlen(ptx) + 1;
        if (!(*cubin = malloc(len))) {
            snprintf(err, errlen, "out of host memory");
            return LOOM_ERR_NOMEM;
        }
        memcpy(*cubin, ptx, len);
        *n = len;
        *linker = "PTX load";
        (void)g;
        (void)what;
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
