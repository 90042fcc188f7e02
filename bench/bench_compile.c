/*
 * bench_compile -- how long a kernel takes from the first builder call to a loaded module.
 *
 * For every template at its default shape: a cold compile (empty disk cache: build the IR,
 * verify, LLVM to PTX, link to cubin, load) and a warm start (a fresh runtime, as a new
 * process would have: the cubin comes from the disk cache and LLVM does not run).  Also
 * the host-side cost of one launch of a tiny kernel.
 */
#include "loom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
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
    printf("%-22s %10s %10s %10s %10s | %10s %8s\n", "template", "cold ms", "codegen", "link", "load",
           "warm ms", "source");
    int worst_fail = 0;
    for (int i = 0; i < loom_template_count(); i++) {
        const loom_template *t = loom_template_at(i);
        int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
        char err[512];
        loom_params_parse(t->shape, t->nshape, NULL, sh, err, sizeof err);
        loom_params_parse(t->config, t->nconfig, NULL, cf, err, sizeof err);
        /* cold: from the first builder call */
        double t0 = now_ms();
        loom_kernel *k = t->build(sh, cf, err, sizeof err);
        loom_compile_info cold = {0}, warm = {0};
        loom_status st = k ? loom_prepare(rt, k, &cold) : LOOM_ERR_INVALID;
        double cold_ms = now_ms() - t0;
        loom_kernel_destroy(k);
        if (st != LOOM_OK) {
            printf("%-22s failed: %s\n", t->name, loom_runtime_error(rt));
            worst_fail = 1;
            continue;
        }
        /* warm: a fresh runtime, so only the disk cache can help */
        loom_runtime *rt2 = loom_runtime_create(LOOM_TARGET_GPU);
        t0 = now_ms();
        k = t->build(sh, cf, err, sizeof err);
        st = loom_prepare(rt2, k, &warm);
        double warm_ms = now_ms() - t0;
        loom_kernel_destroy(k);
        static const char *src[] = {"compiled", "memory", "disk"};
        printf("%-22s %10.2f %10.2f %10.2f %10.2f | %10.2f %8s%s\n", t->name, cold_ms, cold.codegen_ms,
               cold.link_ms, cold.load_ms, warm_ms, st == LOOM_OK ? src[warm.source] : "FAILED",
               cold.source != 0 ? "  (cold run was not cold: clear LOOM_CACHE_DIR)" : "");
        loom_runtime_destroy(rt2);
    }
    loom_runtime_destroy(rt);
    return worst_fail;
}
