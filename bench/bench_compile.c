/*
 * bench_compile -- how long a kernel takes from the first builder call to a loaded module.
 *
 * For every template at its default shape: a cold compile (empty disk cache: build the IR,
 * verify, LLVM to PTX, link to cubin, load) and a warm start (a fresh runtime, as a new
 * process would have: the cubin comes from the disk cache and LLVM does not run).  The
 * same for the kernel of every example.
 */
#include "loom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    const char *name;
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

/* Cold (from the first builder call, empty cache) and warm (fresh runtime, disk cache). */
static int measure(loom_runtime *rt, const job *j)
{
    double t0 = now_ms();
    loom_kernel *k = build(j);
    loom_compile_info cold = {0}, warm = {0};
    loom_status st = k ? loom_prepare(rt, k, &cold) : LOOM_ERR_INVALID;
    double cold_ms = now_ms() - t0;
    loom_kernel_destroy(k);
    if (st != LOOM_OK) {
        printf("%-22s failed: %s\n", j->name, loom_runtime_error(rt));
        return 1;
    }
    loom_runtime *rt2 = loom_runtime_create(LOOM_TARGET_GPU);
    t0 = now_ms();
    k = build(j);
    st = loom_prepare(rt2, k, &warm);
    double warm_ms = now_ms() - t0;
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt2);
    static const char *src[] = {"compiled", "memory", "disk"};
    printf("%-22s %10.2f %10.2f %10.2f %10.2f | %10.2f %8s%s\n", j->name, cold_ms, cold.codegen_ms,
           cold.link_ms, cold.load_ms, warm_ms, st == LOOM_OK ? src[warm.source] : "FAILED",
           cold.source != 0 ? "  (cold run was not cold: clear LOOM_CACHE_DIR)" : "");
    return st != LOOM_OK;
}

int main(void)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        printf("bench_compile: skipped: %s\n", rt ? loom_runtime_error(rt) : "no runtime");
        loom_runtime_destroy(rt);
        return 0;
    }
    printf("bench_compile on %s (disk cache: LOOM_CACHE_DIR=%s)\n", loom_runtime_device_name(rt),
           getenv("LOOM_CACHE_DIR") ? getenv("LOOM_CACHE_DIR") : "(default)");
    printf("%-22s %10s %10s %10s %10s | %10s %8s\n", "kernel", "cold ms", "codegen", "link", "load",
           "warm ms", "source");
    int fails = 0;
    for (int i = 0; i < loom_template_count(); i++)
        fails += measure(rt, &(job){loom_template_at(i)->name, loom_template_at(i), 0});
    fails += measure(rt, &(job){"example vector_add", NULL, 1});
    fails += measure(rt, &(job){"example row_softmax", NULL, 2});
    fails += measure(rt, &(job){"example matmul", NULL, 3});
    loom_runtime_destroy(rt);
    return fails != 0;
}
