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
#include <string.h>

typedef struct run {
    loom_kernel *k;
    loom_buffer *buf[LOOM_MAX_ARGS];
    loom_arg args[LOOM_MAX_ARGS];
    int nargs, grid[3];
    size_t bytes; /* minimum traffic: every input read once, every output written once */
} run;

static void run_free(run *r)
{
    for (int i = 0; i < r->nargs; i++)
        loom_buffer_destroy(r->buf[i]);
    loom_kernel_destroy(r->k);
    memset(r, 0, sizeof *r);
}

/* Build template t at (shape, config), random inputs uploaded, outputs poisoned. */
static int run_setup(loom_runtime *rt, const loom_template *t, const int64_t *shape,
                     const int64_t *config, run *r)
{
    char err[512] = "";
    memset(r, 0, sizeof *r);
    r->k = t->build(shape, config, err, sizeof err);
    if (!r->k) {
        fprintf(stderr, "%s: %s\n", t->name, err);
        return -1;
    }
    r->nargs = loom_kernel_num_args(r->k);
    void *host[LOOM_MAX_ARGS] = {0};
    int64_t scal[LOOM_MAX_ARGS] = {0};
    loom_arg_info ai[LOOM_MAX_ARGS];
    for (int i = 0; i < r->nargs; i++) {
        loom_kernel_arg_info(r->k, i, &ai[i]);
        host[i] = ai[i].is_tensor ? calloc(1, ai[i].min_bytes) : &scal[i];
        if (!host[i])
            return -1;
    }
    t->init(shape, host, 42);
    int rc = 0;
    for (int i = 0; i < r->nargs; i++) {
        if (!ai[i].is_tensor) {
            memcpy(&r->args[i].s, &scal[i], sizeof r->args[i].s);
            continue;
        }
        r->bytes += ai[i].min_bytes;
        r->buf[i] = loom_buffer_create(rt, ai[i].min_bytes);
        if (!r->buf[i] || loom_buffer_upload(r->buf[i], host[i], ai[i].min_bytes) != LOOM_OK) {
            fprintf(stderr, "%s: %s\n", t->name, loom_runtime_error(rt));
            rc = -1;
        } else if (ai[i].access == LOOM_OUT) {
            loom_buffer_fill(r->buf[i], 0xff);
        }
        r->args[i] = LOOM_ARG_BUF(r->buf[i]);
        free(host[i]);
    }
    t->grid(shape, config, r->grid);
    return rc;
}

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
        run r;
        if (run_setup(rt, t, shape, config, &r) != 0) {
            run_free(&r);
            continue;
        }
        double ms = 0;
        loom_status st = loom_time_launch(rt, r.k, r.grid, r.args, r.nargs, 5, 30, &ms);
        if (st != LOOM_OK)
            printf("  %s [%s]: %s\n", tname, configs[c], loom_runtime_error(rt));
        else
            printf("  %-20s [%-22s] %8.3f ms  %7.0f GB/s\n", tname, configs[c], ms, r.bytes / ms * 1e-6);
        if (st == LOOM_OK && ms < best) {
            best = ms;
            snprintf(best_cfg, sizeof best_cfg, "%s", configs[c]);
        }
        bytes = r.bytes;
        run_free(&r);
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
    static const char *sm_cfgs[] = {"BM=1,warps=4", "BM=1,warps=8", "BM=2,warps=8", NULL};
    bench(rt, "row_softmax", "R=65536,N=4096,dtype=f32", sm_cfgs, "R=37,N=4096,dtype=f32");
    bench(rt, "row_softmax", "R=131072,N=2000,dtype=f16", sm_cfgs, "R=37,N=2000,dtype=f16");

    printf("\n%-70s %9s %9s %9s %6s\n", "kernel (best config)", "ms", "GB/s", "copy GB/s", "ratio");
    for (int i = 0; i < nrows; i++)
        printf("%-70s %9.3f %9.0f %9.0f %6.2f\n", rows[i].name, rows[i].ms, rows[i].gbs, rows[i].copy_gbs,
               rows[i].copy_gbs > 0 ? rows[i].gbs / rows[i].copy_gbs : 0);
    loom_runtime_destroy(rt);
    return 0;
}
