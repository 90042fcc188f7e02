/*
 * contenders.c -- running and timing a bench's contenders side by side (contenders.h).
 */
#include "contenders.h"
#include "gpu.h"
#include "rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bench_cublas_open(cublas_dl *cb)
{
    char err[512];
    memset(cb, 0, sizeof *cb);
    if (cublas_dl_open(cb, err, sizeof err) == 0)
        printf("cuBLAS %d (%s): cublasGemmEx, fp32 compute, default algorithm\n", cb->version, cb->path);
    else {
        printf("cuBLAS: not measured: %s\n", err);
        cb->h = NULL;
    }
}

step launch_step(loom_kernel *k, const int grid[3], const loom_arg *args, int nargs)
{
    step s = {.kind = STEP_LAUNCH, .k = k, .nargs = nargs};
    memcpy(s.grid, grid, sizeof s.grid);
    memcpy(s.args, args, (size_t)nargs * sizeof *args);
    return s;
}

step cublas_step(int64_t M, int64_t N, int64_t K, loom_buffer *a, loom_buffer *b, loom_buffer *c)
{
    return (step){.kind = STEP_CUBLAS, .M = M, .N = N, .K = K, .a = a, .b = b, .c = c};
}

step copy_step(loom_buffer *src, loom_buffer *dst, size_t bytes)
{
    return (step){.kind = STEP_COPY, .a = src, .c = dst, .bytes = bytes};
}

step cublaslt_fp8_step(cublaslt_fp8 *plan, loom_buffer *a, loom_buffer *bt, loom_buffer *c)
{
    return (step){.kind = STEP_CUBLASLT_FP8, .fp8 = plan, .a = a, .b = bt, .c = c};
}

step call_step(loom_status (*call)(void *ctx), void *ctx)
{
    return (step){.kind = STEP_CALL, .call = call, .ctx = ctx};
}

loom_status run_work(void *p)
{
    work *w = p;
    char err[512];
    for (int i = 0; i < w->n; i++) {
        step *s = &w->s[i];
        loom_status st = LOOM_OK;
        if (s->kind == STEP_COPY) {
            st = rt_gpu_dtod(rt_runtime_gpu(w->rt), rt_buffer_dptr(s->c), rt_buffer_dptr(s->a), s->bytes, err, sizeof err);
            if (st != LOOM_OK)
                loom_runtime_set_error(w->rt, "copy: %s", err);
        } else if (s->kind == STEP_CUBLASLT_FP8) {
            st = cublaslt_dl_fp8_run(s->fp8, rt_buffer_dptr(s->a), rt_buffer_dptr(s->b), rt_buffer_dptr(s->c), err,
                                     sizeof err);
            if (st != LOOM_OK)
                loom_runtime_set_error(w->rt, "cuBLASLt: %s", err);
        } else if (s->kind == STEP_CUBLAS) {
            st = cublas_dl_gemm(w->cb, LOOM_F16, s->M, s->N, s->K, 1, rt_buffer_dptr(s->a), 0, rt_buffer_dptr(s->b),
                                rt_buffer_dptr(s->c), err, sizeof err);
            if (st != LOOM_OK)
                loom_runtime_set_error(w->rt, "cuBLAS: %s", err);
        } else if (s->kind == STEP_CALL)
            st = s->call(s->ctx);
        else
            st = loom_launch(w->rt, s->k, s->grid, s->args, s->nargs);
        if (st != LOOM_OK)
            return st;
    }
    return LOOM_OK;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int time_rounds(loom_runtime *rt, work *ws, int n, int rounds, int reps)
{
    enum { MAX_ROUNDS = 16 };
    if (rounds < 1 || rounds > MAX_ROUNDS) {
        printf("  time_rounds: %d rounds (1 to %d)\n", rounds, MAX_ROUNDS);
        return -1;
    }
    double(*t)[MAX_ROUNDS] = calloc((size_t)n, sizeof *t);
    if (!t) {
        printf("  time_rounds: out of memory\n");
        return -1;
    }
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++)
            if (loom_time_work(rt, run_work, &ws[i], r == 0 ? 3 : 1, reps, &t[i][r]) != LOOM_OK) {
                printf("  %s: timing failed: %s\n", ws[i].name, loom_runtime_error(rt));
                free(t);
                return -1;
            }
    for (int i = 0; i < n; i++) {
        qsort(t[i], (size_t)rounds, sizeof t[i][0], cmp_dbl);
        ws[i].ms = rounds % 2 ? t[i][rounds / 2] : 0.5 * (t[i][rounds / 2 - 1] + t[i][rounds / 2]);
    }
    free(t);
    return 0;
}

void bench_on_cost(void *ctx, const loom_cost *c)
{
    bench_costs *s = ctx;
    s->convert += c->kind == LOOM_COST_CONVERT;
    s->scratch += c->kind == LOOM_COST_SCRATCH;
}

loom_kernel *bench_template_build(const char *name, const char *shape, const char *config, int grid[3],
                                  char *resolved, size_t rlen, char *why, size_t n)
{
    const loom_template *t = loom_template_find(name);
    char err[1024];
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    bool untuned = !config || !*config;
    if (!t || loom_params_parse(t->shape, t->nshape, shape, sh, err, sizeof err) ||
        loom_params_parse(t->config, t->nconfig, untuned ? "" : config, cf, err, sizeof err)) {
        snprintf(why, n, "loom: %.900s", t ? err : "no such template");
        return NULL;
    }
    if (untuned)
        loom_template_untuned_config(t, sh, cf);
    if (resolved)
        loom_params_format(t->config, t->nconfig, cf, resolved, rlen);
    loom_kernel *k = t->build(sh, cf, err, sizeof err);
    if (!k) {
        snprintf(why, n, "loom: the template refuses: %.900s", err);
        return NULL;
    }
    t->grid(sh, cf, grid);
    return k;
}
