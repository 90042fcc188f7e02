/*
 * bench_compile -- how long a kernel takes from the first builder call to a loaded module.
 *
 * Every template at its default shape and the kernel of every example, each measured in a
 * fresh process (fork, before anything touched CUDA), so a cold compile pays what a
 * program's first compile pays: LLVM's set-up and the driver's JIT start-up included.
 * In that process, with an empty loom disk cache (a fresh LOOM_CACHE_DIR) and the
 * driver's JIT cache off (CUDA_CACHE_DISABLE=1):
 *
 *   cold     build the IR, verify, key, LLVM to PTX (codegen), PTX to cubin (link), load;
 *   again    the same kernel built anew after the process compiled another kernel (a
 *            vector add): the cold cost without the process's one-time set-up;
 *   warm     a fresh runtime, as a new process would have: the cubin comes from the disk
 *            cache and LLVM does not run.
 *
 * Then the link alone with each linker (LOOM_LINKER=driver, nvjitlink), to compare them.
 *
 * Usage: bench_compile            (skips with a message where there is no GPU)
 */
#define _GNU_SOURCE
#include "loom.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* the examples' kernels, built by the examples' own functions (their run/check helpers
 * are not used here) */
#pragma GCC diagnostic ignored "-Wunused-function"
#define LOOM_EXAMPLE_NO_MAIN
#include "../examples/matmul.c"
#include "../examples/row_softmax.c"
#include "../examples/vector_add.c"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* One kernel to build: a template at its defaults, or an example's builder. */
typedef struct job {
    char name[40];
    const loom_template *t;
    int example; /* 1 vector_add, 2 row_softmax, 3 matmul */
} job;

static loom_kernel *build(const job *j)
{
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char err[512];
    switch (j->example) {
    case 1: return vadd_build(100003, 1024);
    case 2: return smax_build(333, 781, 4);
    case 3: return mm_build(77, 45, 50, (mm_cfg){32, 32, 16});
    default:
        loom_params_parse(j->t->shape, j->t->nshape, NULL, sh, err, sizeof err);
        loom_params_parse(j->t->config, j->t->nconfig, NULL, cf, err, sizeof err);
        return j->t->build(sh, cf, err, sizeof err);
    }
}

/* What a child reports. */
typedef struct result {
    int ok;                /* 1: measured; 0: failed (msg); -1: no GPU (msg) */
    char msg[256];
    char linker[16]; /* what linked the cold compile's cubin */
    double cold_ms, again_ms, warm_ms;
    loom_compile_info cold, again, warm;
} result;

/* Build and prepare j on rt; the time from the first builder call. */
static loom_status timed_prepare(loom_runtime *rt, const job *j, loom_compile_info *info, double *ms)
{
    double t0 = now_ms();
    loom_kernel *k = build(j);
    loom_status st = k ? loom_prepare(rt, k, info) : LOOM_ERR_INVALID;
    *ms = now_ms() - t0;
    loom_kernel_destroy(k);
    return st;
}

static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[4096];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(dir);
}

/* In the child: measure j cold, again (after another kernel) and warm, each with an empty
 * cache directory of its own. */
static void measure(const job *j, result *r)
{
    memset(r, 0, sizeof *r);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        r->ok = -1;
        snprintf(r->msg, sizeof r->msg, "%s", rt ? loom_runtime_error(rt) : "no runtime");
        loom_runtime_destroy(rt);
        return;
    }
    char dir[] = "/tmp/loom_bench_compile_XXXXXX";
    if (!mkdtemp(dir)) {
        snprintf(r->msg, sizeof r->msg, "mkdtemp failed");
        loom_runtime_destroy(rt);
        return;
    }
    setenv("LOOM_CACHE_DIR", dir, 1);
    loom_status st = timed_prepare(rt, j, &r->cold, &r->cold_ms);
    if (st == LOOM_OK) { /* warm: a fresh runtime finds the cubin on disk */
        loom_runtime *rt2 = loom_runtime_create(LOOM_TARGET_GPU);
        st = timed_prepare(rt2, j, &r->warm, &r->warm_ms);
        if (st != LOOM_OK)
            snprintf(r->msg, sizeof r->msg, "warm: %s", loom_runtime_error(rt2));
        loom_runtime_destroy(rt2);
    } else {
        snprintf(r->msg, sizeof r->msg, "cold: %s", loom_runtime_error(rt));
    }
    rm_dir(dir);
    if (st == LOOM_OK && mkdtemp(strcpy(dir, "/tmp/loom_bench_compile_XXXXXX"))) {
        /* again: the process has compiled something else first */
        setenv("LOOM_CACHE_DIR", dir, 1);
        loom_runtime *rt3 = loom_runtime_create(LOOM_TARGET_GPU);
        loom_kernel *other = vadd_build(777, 256);
        st = loom_prepare(rt3, other, NULL);
        loom_kernel_destroy(other);
        if (st == LOOM_OK)
            st = timed_prepare(rt3, j, &r->again, &r->again_ms);
        if (st != LOOM_OK)
            snprintf(r->msg, sizeof r->msg, "again: %s", loom_runtime_error(rt3));
        loom_runtime_destroy(rt3);
        rm_dir(dir);
    }
    r->ok = st == LOOM_OK;
    snprintf(r->linker, sizeof r->linker, "%s", r->cold.linker ? r->cold.linker : "-");
    r->cold.linker = r->again.linker = r->warm.linker = NULL; /* pointers into this process */
    loom_runtime_destroy(rt);
}

/* Run measure() in a child process with LOOM_LINKER=linker (NULL: the default). */
static void in_child(const job *j, const char *linker, result *r)
{
    memset(r, 0, sizeof *r);
    int fd[2];
    if (pipe(fd)) {
        snprintf(r->msg, sizeof r->msg, "pipe failed");
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        if (linker)
            setenv("LOOM_LINKER", linker, 1);
        result mine;
        measure(j, &mine);
        ssize_t w = write(fd[1], &mine, sizeof mine);
        _exit(w == (ssize_t)sizeof mine ? 0 : 1);
    }
    close(fd[1]);
    ssize_t got = pid > 0 ? read(fd[0], r, sizeof *r) : -1;
    close(fd[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    if (got != (ssize_t)sizeof *r) {
        memset(r, 0, sizeof *r);
        snprintf(r->msg, sizeof r->msg, "the measuring process died");
    }
}

int main(void)
{
    /* the driver's JIT cache would make a second run look cold when it is not */
    setenv("CUDA_CACHE_DISABLE", "1", 1);
    job jobs[32];
    int n = 0;
    for (int i = 0; i < loom_template_count() && n < 28; i++) {
        jobs[n] = (job){.t = loom_template_at(i)};
        snprintf(jobs[n++].name, sizeof jobs[0].name, "%s", loom_template_at(i)->name);
    }
    jobs[n++] = (job){"example vector_add", NULL, 1};
    jobs[n++] = (job){"example row_softmax", NULL, 2};
    jobs[n++] = (job){"example matmul", NULL, 3};

    result r[32];
    in_child(&jobs[0], NULL, &r[0]);
    if (r[0].ok < 0) {
        printf("bench_compile: skipped: %s\n", r[0].msg);
        return 0;
    }
    printf("bench_compile: each kernel in a fresh process, empty loom disk cache, CUDA_CACHE_DISABLE=1\n");
    printf("  cold = first builder call -> loaded module = build (builder calls) + codegen (verify, IR -> PTX\n"
           "  with LLVM) + link (PTX -> cubin) + rest (verify, key, module load, cache file write);\n"
           "  again = the same after the process compiled another kernel; warm = a fresh runtime loading\n"
           "  the cubin from the disk cache (LLVM not run)\n\n");
    printf("%-22s %9s %9s %9s %9s %9s %-10s | %9s %9s %9s | %9s %6s\n", "kernel", "cold ms", "build", "codegen",
           "link", "rest", "linker", "again ms", "codegen", "link", "warm ms", "source");
    int fails = 0;
    static const char *src[] = {"compiled", "memory", "disk"};
    for (int i = 0; i < n; i++) {
        if (i)
            in_child(&jobs[i], NULL, &r[i]);
        if (r[i].ok != 1) {
            printf("%-22s failed: %s\n", jobs[i].name, r[i].msg);
            fails++;
            continue;
        }
        const loom_compile_info *c = &r[i].cold;
        printf("%-22s %9.2f %9.2f %9.2f %9.2f %9.2f %-10s | %9.2f %9.2f %9.2f | %9.2f %6s%s\n", jobs[i].name,
               r[i].cold_ms, r[i].cold_ms - c->total_ms, c->codegen_ms, c->link_ms,
               c->total_ms - c->codegen_ms - c->link_ms, r[i].linker, r[i].again_ms, r[i].again.codegen_ms,
               r[i].again.link_ms, r[i].warm_ms, src[r[i].warm.source],
               c->source ? "  (cold run was not cold)" : "");
    }

    printf("\nlink (PTX -> cubin) by linker, each in a fresh process (cold ms in brackets)\n");
    printf("%-22s %22s %22s\n", "kernel", "driver (cuLink)", "nvJitLink");
    for (int i = 0; i < n; i++) {
        result d, v;
        in_child(&jobs[i], "driver", &d);
        in_child(&jobs[i], "nvjitlink", &v);
        char a[64], b[64];
        snprintf(a, sizeof a, d.ok == 1 ? "%.2f (%.2f)" : "failed", d.cold.link_ms, d.cold_ms);
        snprintf(b, sizeof b, v.ok == 1 ? "%.2f (%.2f)" : "failed", v.cold.link_ms, v.cold_ms);
        /* setmaxnreg kernels go to ptxas whatever LOOM_LINKER says; nvJitLink may be missing */
        char who[96] = "";
        if ((d.ok == 1 && strcmp(d.linker, "driver")) || (v.ok == 1 && strcmp(v.linker, "nvJitLink")))
            snprintf(who, sizeof who, "  (linked by %s / %s)", d.ok == 1 ? d.linker : "-", v.ok == 1 ? v.linker : "-");
        printf("%-22s %22s %22s%s\n", jobs[i].name, a, b, who);
    }
    return fails != 0;
}
