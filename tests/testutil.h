/*
 * testutil.h -- shared helpers of loom's Criterion tests.
 *
 *   OP_COVERED(name)   records, before main() runs, that a test covers op `name` of
 *                      dsl/ops.h; tests/test_optable.c fails for any op nobody covers.
 *   t_run()            runs a kernel on the interpreter with host arrays as arguments
 *                      (uploaded before, downloaded after), keeping the runtime's error;
 *                      t_run_on() on a given runtime (the GPU's too).
 *   bit helpers        f32/u32 views and NaN-aware bit-exact comparison.
 *   t_ptxas_ok()       assembles PTX with ptxas -v (found through $PTXAS, the CUDA
 *                      toolkit or PATH) and checks it has no spills.
 *   KNOWN_BUG()        skips a test that documents a reported library bug, unless
 *                      LOOM_TEST_KNOWN_BUGS=1 is set (then it runs and shows the failure).
 */
#ifndef LOOM_TESTUTIL_H
#define LOOM_TESTUTIL_H

#include "loom.h"

#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---------------------------------------------------------------- op coverage registry */

#define LOOM_TEST_MAX_COVERED 512
/* Defined in tests/test_optable.c. */
extern const char *loom_test_covered_ops[LOOM_TEST_MAX_COVERED];
extern int loom_test_num_covered;

static inline void loom_test_register_op(const char *name)
{
    if (loom_test_num_covered < LOOM_TEST_MAX_COVERED)
        loom_test_covered_ops[loom_test_num_covered++] = name;
}

#define OP_COVERED_CAT2(a, b) a##b
#define OP_COVERED_CAT(a, b) OP_COVERED_CAT2(a, b)
/* Use at file scope next to the test(s) that exercise the op. */
#define OP_COVERED(op)                                                                        \
    __attribute__((constructor)) static void OP_COVERED_CAT(opcov_##op##_, __LINE__)(void) \
    {                                                                                      \
        loom_test_register_op(#op);                                                        \
    }

/* ---------------------------------------------------------------- known bugs */

#define KNOWN_BUG(why)                                                                   \
    do {                                                                                 \
        const char *kb_env_ = getenv("LOOM_TEST_KNOWN_BUGS");                           \
        if (!kb_env_ || strcmp(kb_env_, "1") != 0)                                       \
            cr_skip_test("known library bug (set LOOM_TEST_KNOWN_BUGS=1 to run): %s", why); \
    } while (0)

/* ---------------------------------------------------------------- a planted deadlock */

/* A kernel `name` of 8 warps: a barrier of two arrivals, one task of two replicas of 4
 * warps that each arrive and then wait, and store replica + 1 into o[replica].  With
 * `only_first`, replica 1 never arrives (the arrive count is wrong by one: every replica
 * waits forever).  The task is recorded at `task_at`, the wait at `wait_at` (callers pass
 * LOOM_HERE lines of their own file, which reports then name). */
static inline loom_kernel *t_two_arrivals(loom_src task_at, loom_src wait_at, const char *name, bool only_first)
{
    loom_kernel *k = loom_kernel_create(name, 8);
    loom_val o = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(2), LOOM_OUT);
    loom_val bar = loom_name(k, loom_mbar_alloc(k, 1, 2), "bar");
    loom_val zero = loom_const_i(k, LOOM_I32, 0);
    loom_region_op t = loom_task_begin_at(task_at, k, 4, 0, 2);
    loom_val rep = loom_task_replica(k);
    loom_region_op i = LOOM_NO_REGION;
    if (only_first)
        i = loom_if_begin(k, loom_cmp(k, LOOM_EQ, rep, zero), 0);
    loom_mbar_arrive(k, bar, zero);
    if (only_first)
        loom_if_end(k, i, 0, NULL);
    loom_mbar_wait_at(wait_at, k, bar, zero, zero);
    loom_store(k, o, &rep, loom_splat(k, loom_add(k, rep, loom_const_i(k, LOOM_I32, 1)), LOOM_SHAPE1(1)), LOOM_NONE);
    loom_task_end(k, t);
    return k;
}

/* ---------------------------------------------------------------- refusals */

/* The status and that the runtime's message holds `want`. */
#define REFUSED(rt, call, status, want)                                                                  \
    do {                                                                                                  \
        loom_status st_ = (call);                                                                         \
        cr_assert_eq(st_, status, "%s gave %s (%s), not %s", #call, loom_status_name(st_),                \
                     loom_runtime_error(rt), loom_status_name(status));                                   \
        cr_assert(strstr(loom_runtime_error(rt), want), "message '%s' does not say '%s'",                \
                  loom_runtime_error(rt), want);                                                          \
    } while (0)

/* ---------------------------------------------------------------- scratch directories */

/* A new directory /tmp/<prefix>-XXXXXX (one of 8 buffers in turn: the path stays valid
 * for the next 7 calls). */
static inline char *t_temp_dir(const char *prefix)
{
    static char buf[8][96];
    static int next;
    char *d = buf[next++ & 7];
    snprintf(d, sizeof buf[0], "/tmp/%s-XXXXXX", prefix);
    cr_assert(mkdtemp(d), "mkdtemp %s", d);
    return d;
}

/* Remove directory d and everything in it. */
static inline void t_remove_dir(const char *d)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    cr_assert_eq(system(cmd), 0);
}

/* ---------------------------------------------------------------- bits */

/* A GPU runtime, or skip the test (with the reason) where there is none. */
/* Run shell command cmd with its stdout and stderr into out (n bytes, NUL-terminated);
 * returns its exit status, or -1 when it did not exit. */
static inline int t_sh(const char *cmd, char *out, size_t n)
{
    char log[] = "/tmp/loom_t_sh_XXXXXX", full[8192];
    int fd = mkstemp(log);
    cr_assert(fd >= 0);
    close(fd);
    snprintf(full, sizeof full, "( %s ) >%s 2>&1", cmd, log);
    int st = system(full);
    FILE *f = fopen(log, "r");
    cr_assert(f);
    out[fread(out, 1, n - 1, f)] = 0;
    fclose(f);
    unlink(log);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static inline loom_runtime *t_gpu_or_skip(void)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    cr_assert(rt);
    if (loom_runtime_status(rt) != LOOM_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "no GPU: %s", loom_runtime_error(rt));
        loom_runtime_destroy(rt);
        cr_skip_test("%s", msg);
    }
    return rt;
}

static inline uint32_t t_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float t_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Bit-exact, except that any NaN equals any NaN (NaN payloads are not specified). */
static inline int t_same_f32(float a, float b)
{
    return (isnan(a) && isnan(b)) || t_f2u(a) == t_f2u(b);
}

/* ---------------------------------------------------------------- running kernels */

/* One launch argument: a host array (uploaded, and downloaded back after the run) or a
 * scalar. */
typedef struct targ {
    void *host;
    size_t bytes;
    int is_scalar;
    loom_arg scalar;
} targ;
#define TA_BUF(p, nbytes) ((targ){.host = (p), .bytes = (nbytes)})
#define TA_ARR(a) TA_BUF((a), sizeof(a))
#define TA_I32(v) ((targ){.is_scalar = 1, .scalar = LOOM_ARG_I32(v)})
#define TA_I64(v) ((targ){.is_scalar = 1, .scalar = LOOM_ARG_I64(v)})
#define TA_F32(v) ((targ){.is_scalar = 1, .scalar = LOOM_ARG_F32(v)})

/* The runtime's message after the last t_run ("" if none). */
static char t_last_error[2048];

/* Run k on runtime rt over `grid` (NULL: one program) with n arguments. */
static inline loom_status t_run_on(loom_runtime *rt, loom_kernel *k, const int *grid, targ *args, int n)
{
    static const int one[3] = {1, 1, 1};
    loom_buffer *bufs[LOOM_MAX_ARGS] = {0};
    loom_arg la[LOOM_MAX_ARGS] = {0};
    for (int i = 0; i < n; i++) {
        if (args[i].is_scalar) {
            la[i] = args[i].scalar;
            continue;
        }
        bufs[i] = loom_buffer_create(rt, args[i].bytes);
        cr_assert(bufs[i], "buffer %d: %s", i, loom_runtime_error(rt));
        cr_assert_eq(loom_buffer_upload(bufs[i], args[i].host, args[i].bytes), LOOM_OK);
        la[i] = LOOM_ARG_BUF(bufs[i]);
    }
    loom_status st = loom_launch(rt, k, grid ? grid : one, la, n);
    snprintf(t_last_error, sizeof t_last_error, "%s", loom_runtime_error(rt));
    for (int i = 0; i < n; i++) {
        if (!bufs[i])
            continue;
        cr_assert_eq(loom_buffer_download(bufs[i], args[i].host, args[i].bytes), LOOM_OK);
        loom_buffer_destroy(bufs[i]);
    }
    return st;
}

/* Run k on the interpreter over `grid` (NULL: one program) with n arguments. */
static inline loom_status t_run(loom_kernel *k, const int *grid, targ *args, int n)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt, "loom_runtime_create failed");
    loom_status st = t_run_on(rt, k, grid, args, n);
    loom_runtime_destroy(rt);
    return st;
}

/* Like t_run, but the launch must succeed. */
#define T_RUN_OK(k, grid, args, n)                                                             \
    do {                                                                                       \
        loom_status st_ = t_run((k), (grid), (args), (n));                                    \
        cr_assert_eq(st_, LOOM_OK, "launch: %s: %s\n%s", loom_status_name(st_), t_last_error, \
                     loom_kernel_errors(k));                                                   \
    } while (0)

/* tests/plugins' tp_NAME.so, beside this binary (LOOM_TEST_PLUGIN_DIR overrides). */
static inline const char *t_plugin_path(const char *name)
{
    static char path[PATH_MAX + 64];
    char dir[PATH_MAX] = "";
    const char *env = getenv("LOOM_TEST_PLUGIN_DIR");
    if (env) {
        snprintf(dir, sizeof dir, "%s", env);
    } else {
        ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
        cr_assert(n > 0, "cannot read /proc/self/exe");
        dir[n] = 0;
        char *slash = strrchr(dir, '/');
        cr_assert(slash);
        snprintf(slash, sizeof dir - (size_t)(slash - dir), "/test_plugins");
    }
    snprintf(path, sizeof path, "%s/tp_%s.so", dir, name);
    /* the build makes them beside loom_tests (CMake target tp_NAME), always; a copy of
     * loom_tests elsewhere (a GPU pack) may come without them */
    if (access(path, R_OK) != 0)
        cr_skip_test("%s is missing: the test plugins are built beside loom_tests (CMake targets tp_*); "
                     "LOOM_TEST_PLUGIN_DIR names another directory", path);
    return path;
}

/* Run fn(arg) with stderr sent to a file; return what it printed (malloc'ed; free it). */
static inline char *t_capture_stderr(void (*fn)(void *), void *arg)
{
    fflush(stderr);
    char path[] = "/tmp/loom-stderr-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    int saved = dup(2);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    off_t n = lseek(fd, 0, SEEK_END);
    char *s = calloc((size_t)n + 1, 1);
    cr_assert(s);
    cr_assert_eq(pread(fd, s, (size_t)n, 0), n);
    close(fd);
    unlink(path);
    return s;
}

/* "<file>:<line>:" -- what an error message built at `line` of `file` contains. */
static inline const char *t_loc(const char *file, int line)
{
    static char buf[4][256];
    static int next;
    const char *base = strrchr(file, '/');
    char *b = buf[next++ & 3];
    snprintf(b, sizeof buf[0], "%s:%d:", base ? base + 1 : file, line);
    return b;
}

/* Does text name line `line` of `file` ("<base>:<line>" not followed by a digit), with
 * whatever directory the message gave the file? */
static inline int t_names_line(const char *text, const char *file, int line)
{
    const char *base = strrchr(file, '/');
    char want[256];
    snprintf(want, sizeof want, "%s:%d", base ? base + 1 : file, line);
    for (const char *p = strstr(text, want); p; p = strstr(p + 1, want))
        if (p[strlen(want)] < '0' || p[strlen(want)] > '9')
            return 1;
    return 0;
}

/* ---------------------------------------------------------------- ptxas */

/* ptxas: $PTXAS, /usr/local/cuda/bin/ptxas or the PATH's; NULL where there is none. */
static inline const char *t_find_ptxas(void)
{
    static char path[512];
    const char *e = getenv("PTXAS");
    if (e && *e && access(e, X_OK) == 0)
        return e;
    if (access("/usr/local/cuda/bin/ptxas", X_OK) == 0)
        return "/usr/local/cuda/bin/ptxas";
    FILE *p = popen("command -v ptxas 2>/dev/null", "r");
    if (!p)
        return NULL;
    char *r = fgets(path, sizeof path, p);
    pclose(p);
    if (!r)
        return NULL;
    path[strcspn(path, "\n")] = 0;
    return path[0] ? path : NULL;
}

/* Assemble PTX with ptxas -v for arch: it must assemble, without spills.  Returns 0
 * (and checks nothing) where there is no ptxas. */
static inline int t_ptxas_ok(const char *ptx, const char *arch, const char *name)
{
    const char *ptxas = t_find_ptxas();
    if (!ptxas)
        return 0;
    char file[] = "/tmp/loom_ptx_XXXXXX";
    int fd = mkstemp(file);
    cr_assert(fd >= 0);
    size_t n = strlen(ptx);
    cr_assert_eq(write(fd, ptx, n), (ssize_t)n);
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s -arch=%s -v %s -o /dev/null 2>&1", ptxas, arch, file);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    static char out[65536];
    size_t got = fread(out, 1, sizeof out - 1, p);
    out[got] = 0;
    int rc = pclose(p);
    unlink(file);
    cr_assert_eq(rc, 0, "ptxas failed on %s (%s):\n%s", name, arch, out);
    cr_assert(strstr(out, "0 bytes spill stores"), "ptxas reports spills for %s (%s):\n%s", name, arch, out);
    return 1;
}

/* A shape or config vector from "k=v,..." text over a parameter list's defaults (the test
 * fails on text the list does not take). */
static inline void t_params(const loom_param *p, int n, const char *text, int64_t *v)
{
    char err[256];
    memset(v, 0, LOOM_MAX_PARAMS * sizeof *v);
    cr_assert_eq(loom_params_parse(p, n, text, v, err, sizeof err), 0, "'%s': %s", text ? text : "(the defaults)",
                 err);
}

/* How many times needle occurs in s (overlapping), e.g. an instruction in PTX text. */
static inline int t_count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* ref [batch, M, N] = A @ B in double for loom_gemm shape s, from A [M, K] (one per product
 * where batch > 1 and !a_shared) and B [batch, K, N] as doubles (row-major, contiguous):
 * the gemm tests' reference, independent of the template's; and mag [batch, M, N] (when
 * not NULL) the sums of the products' magnitudes, sum_k |a b|, that the error model
 * scales the accumulation's error by (t_model.h: t_gemm_bound). */
static inline void t_gemm_ref(const loom_gemm_shape *s, const double *a, const double *b, double *ref, double *mag)
{
    memset(ref, 0, (size_t)(s->batch * s->M * s->N) * sizeof *ref);
    if (mag)
        memset(mag, 0, (size_t)(s->batch * s->M * s->N) * sizeof *mag);
    for (int64_t q = 0; q < s->batch; q++)
        for (int64_t m = 0; m < s->M; m++) {
            const double *ar = a + (s->batch > 1 && !s->a_shared ? q * s->M * s->K : 0) + m * s->K;
            double *row = ref + (q * s->M + m) * s->N, *mrow = mag ? mag + (q * s->M + m) * s->N : NULL;
            for (int64_t k = 0; k < s->K; k++) {
                const double *br = b + (q * s->K + k) * s->N;
                for (int64_t n = 0; n < s->N; n++)
                    row[n] += ar[k] * br[n];
                if (mrow)
                    for (int64_t n = 0; n < s->N; n++)
                        mrow[n] += fabs(ar[k] * br[n]);
            }
        }
}

#endif /* LOOM_TESTUTIL_H */
