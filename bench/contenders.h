/*
 * contenders.h -- what a bench times side by side (bench_obvious, bench_examples,
 * bench_gemm_fp8, bench_ikbo_fa --fp8): a contender is a short list of steps (a loom
 * launch, cuBLAS's GEMM, cuBLASLt's FP8 GEMM, a device-to-device copy, a call of an
 * operation's own launch function) run in order; time_rounds times several in
 * interleaved rounds.
 */
#ifndef LOOM_BENCH_CONTENDERS_H
#define LOOM_BENCH_CONTENDERS_H

#include "cublas_dl.h"
#include "loom.h"

#include <stddef.h>

enum { STEP_LAUNCH, STEP_CUBLAS, STEP_COPY, STEP_CUBLASLT_FP8, STEP_CALL };
typedef struct step {
    int kind;
    loom_kernel *k;
    int grid[3], nargs;
    loom_arg args[LOOM_MAX_ARGS];
    int64_t M, N, K;        /* cuBLAS: C = A @ B, f16 */
    loom_buffer *a, *b, *c; /* cuBLAS's operands; a copy's src = a, dst = c */
    size_t bytes;           /* a copy's bytes */
    cublaslt_fp8 *fp8;      /* cuBLASLt's FP8 GEMM, planned: C = A @ b^T (b is Bt [N, K]) */
    loom_status (*call)(void *ctx); /* a call: an operation's launch (a C API's), its failure in rt's error */
    void *ctx;
} step;

/* A contender: its steps, run in order, and its time. */
typedef struct work {
    const char *name;
    loom_runtime *rt;
    cublas_dl *cb;
    int n;
    step s[2];
    double ms; /* time_rounds: the median of its rounds' medians */
} work;

step launch_step(loom_kernel *k, const int grid[3], const loom_arg *args, int nargs);
step cublas_step(int64_t M, int64_t N, int64_t K, loom_buffer *a, loom_buffer *b, loom_buffer *c);
step copy_step(loom_buffer *src, loom_buffer *dst, size_t bytes);
step cublaslt_fp8_step(cublaslt_fp8 *plan, loom_buffer *a, loom_buffer *bt, loom_buffer *c);
step call_step(loom_status (*call)(void *ctx), void *ctx);
/* cuBLAS loaded into cb and said so, or cb->h NULL and why it is not measured. */
void bench_cublas_open(cublas_dl *cb);
/* One run of w's steps (no wait): a failure's message is in w->rt's error. */
loom_status run_work(void *w);
/* Time ws[0..n) in `rounds` rounds (at most 16), each running every one in turn
 * (loom_time_work of `reps` runs: an L2 flush before each, the median), so a clock or
 * temperature change hits all alike; each ws[i].ms is the median of its rounds' medians.
 * 0, or -1 with the failure printed. */
int time_rounds(loom_runtime *rt, work *ws, int n, int rounds, int reps);

/* Template `name`'s kernel at the shape given as text ("M=..,N=..") and config text (""
 * or NULL: the template's untuned config at the shape, loom_template_untuned_config), and
 * its grid; the config it took, formatted, in resolved (NULL: not wanted).  NULL with the
 * reason ("loom: ...") in why. */
loom_kernel *bench_template_build(const char *name, const char *shape, const char *config, int grid[3],
                                  char *resolved, size_t rlen, char *why, size_t n);

/* What loom_kernel_explain reports of a kernel, counted: conversions through shared
 * memory and other uses of scratch (bench_on_cost is the callback, ctx a bench_costs). */
typedef struct bench_costs {
    int convert, scratch;
} bench_costs;
void bench_on_cost(void *ctx, const loom_cost *c);

#endif
