/*
 * bench_bandwidth -- memory-bound kernels against the device-to-device copy ceiling.
 *
 * For the IKBO broadcast-add by index and the row softmax, at sizes that move well over
 * 1 GB, print GB/s (bytes read + written, each once) beside a device-to-device copy of the
 * same byte count measured in the same run, and the ratio.  Inputs are random (never
 * zeros); each kernel is first checked against its reference at a small shape.
 *
 * Usage: bench_bandwidth            (skips with a message where there is no GPU)
 */
#include "loom.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct row {
    char name[96];
    double gbs, copy_gbs, ms;
} row;

static row rows[32];
static int nrows;

static void bench(loom_runtime *rt, const char *tname, const char *shape_s, const char *const *configs,
                  const char *check_shape)
{
    const loom_template *t = loom_template_find(tname);
    int64_t shape[LOOM_MAX_PARAMS], config[LOOM_MAX_PARAMS], small[LOOM_MAX_PARAMS];
    char err[512];
    if (loom_params_parse(t->shape, t->nshape, shape_s, shape, err, sizeof err) ||
        loom_params_parse(t->shape, t->nshape, check_shape, small, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", tname, err);
        exit(2);
    }
    double best = 1e30;
    char best_cfg[128] = "";
    size_t bytes = 0;
    for (int c = 0; configs[c]; c++) {
        if (loom_params_parse(t->config, t->nconfig, configs[c], config, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", tname, err);
            exit(2);
        }
        char rep[1024];
        if (loom_template_check(rt, t, small, config, 7, rep, sizeof rep) != LOOM_OK) {
            printf("  %s [%s]: check failed: %s\n", tname, configs[c], rep);
            continue;
        }
        loom_instance r;
        if (loom_instance_create(rt, t, shape, config, 42, &r, err, sizeof err) != LOOM_OK) {
            printf("  %s [%s]: %s\n", tname, configs[c], err);
            continue;
        }
        double ms = 0;
        loom_status st = loom_time_launch(rt, r.kernel, r.grid, r.args, r.nargs, 5, 30, &ms);
        if (st != LOOM_OK)
            printf("  %s [%s]: %s\n", tname, configs[c], loom_runtime_error(rt));
        else
            printf("  %-20s [%-22s] %8.3f ms  %7.0f GB/s\n", tname, configs[c], ms, r.bytes / ms * 1e-6);
        if (st == LOOM_OK && ms < best) {
            best = ms;
            snprintf(best_cfg, sizeof best_cfg, "%s", configs[c]);
        }
        bytes = r.bytes;
        loom_instance_destroy(&r);
    }
    if (best >= 1e30)
        return;
    /* the ceiling: a device-to-device copy of the same traffic (half read, half written) */
    loom_buffer *a = loom_buffer_create(rt, bytes / 2), *b = loom_buffer_create(rt, bytes / 2);
    double copy_ms = 0;
    if (a && b) {
        loom_buffer_fill(a, 0x3c);
        loom_time_copy(rt, b, a, bytes / 2, 5, 30, &copy_ms);
    }
    loom_buffer_destroy(a);
    loom_buffer_destroy(b);
    row *w = &rows[nrows++];
    snprintf(w->name, sizeof w->name, "%s %s [%s]", tname, shape_s, best_cfg);
    w->ms = best;
    w->gbs = bytes / best * 1e-6;
    w->copy_gbs = copy_ms > 0 ? bytes / copy_ms * 1e-6 : 0;
}

int main(void)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        printf("bench_bandwidth: skipped: %s\n", rt ? loom_runtime_error(rt) : "no runtime");
        loom_runtime_destroy(rt);
        return 0;
    }
    printf("bench_bandwidth on %s\n", loom_runtime_device_name(rt));
    static const char *bcast_cfgs[] = {"BM=8,BN=256,warps=4", "BM=16,BN=256,warps=4",
                                       "BM=32,BN=256,warps=8", "BM=4,BN=256,warps=2", NULL};
    bench(rt, "ikbo_broadcast_add", "B=2048,U=30,M=512,N=256,dtype=f16", bcast_cfgs,
          "B=70,U=3,M=37,N=300,dtype=f16,shuffle=1");
    bench(rt, "ikbo_broadcast_add", "B=2048,U=30,M=433,N=256,dtype=f16,shuffle=1", bcast_cfgs,
          "B=70,U=3,M=37,N=300,dtype=f16,shuffle=1");
    static const char *sm_cfgs[] = {"BM=1,warps=4", "BM=1,warps=8", "BM=2,warps=8", "BM=2,warps=2",
                                    "BM=4,warps=4", "BM=8,warps=8", NULL};
    bench(rt, "row_softmax", "R=65536,N=4096,dtype=f32", sm_cfgs, "R=37,N=4096,dtype=f32");
    bench(rt, "row_softmax", "R=131072,N=2000,dtype=f16", sm_cfgs, "R=37,N=2000,dtype=f16");

    printf("\n%-70s %9s %9s %9s %6s\n", "kernel (best config)", "ms", "GB/s", "copy GB/s", "ratio");
    for (int i = 0; i < nrows; i++)
        printf("%-70s %9.3f %9.0f %9.0f %6.2f\n", rows[i].name, rows[i].ms, rows[i].gbs, rows[i].copy_gbs,
               rows[i].copy_gbs > 0 ? rows[i].gbs / rows[i].copy_gbs : 0);
    loom_runtime_destroy(rt);
    return 0;
}
