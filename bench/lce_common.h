/*
 * lce_common.h -- what the IKBO linear compression benchmarks share (bench_ikbo_lce,
 * bench_serving): the framework baseline and the on-device check by the error model.
 *
 * The framework baseline is what PyTorch runs for the materialized broadcast with K
 * padded:
 *   Eg = E_user.index_select(0, u)               [B, Ku, N]        a copy kernel
 *   E_cat = cat([Eg, E_cand], dim=1)             [B, Kpu + Kpc, N] a copy kernel
 *   out = cat([W_user, W_cand], dim=1) @ E_cat   cuBLAS strided batched, W's stride 0
 * (Kpu, Kpc: Ku, Kc padded to multiples of 8 with zero rows, and the weights with zero
 * columns; the weights' concatenation and E_cat's zero rows are written once, untimed).
 * The copies are CUDA C compiled with NVRTC, written for full bandwidth (16-byte vector
 * accesses, coalesced) so that they are no slower than PyTorch's; cuBLAS is loaded with
 * dlopen (support/cublas_dl.c), fp16 in and out, fp32 compute, its default algorithm.
 * Its buffers are made for the largest B (lce_fw_prepare); each run takes its request's
 * B (the copies' grids and the GEMM's batch count), reading the first B entries of the
 * mapping and rows of E_cand and writing the first B rows of out.
 *
 * The check (docs/checks.md): |out - ref32| within each element's bound (ik_lce_bound),
 * where ref32 = refc + refu comes from the NVRTC naive f32 GEMMs (support/nvrtc_ref.c) of
 * the candidate and user halves, which also give the sums of |w e| the bound scales with.
 * The references are computed once for the whole input buffers (lce_ref_open at the
 * largest B and U); a check of a request of B candidates launches the check kernel
 * (ik_check_kernel, built at the largest B) over its first B candidates only, after
 * clearing the per-block results of the others, so the fold (tune_reduce2_kernel) counts
 * the request's elements alone.  Candidate b is checked against refc[b] + refu[map[b]],
 * so the request's U is whatever its mapping names (every entry must be below the U the
 * references were made for).  8 bytes come back, not the output.
 *
 * Prefix: lce_.
 */
#ifndef LOOM_BENCH_LCE_COMMON_H
#define LOOM_BENCH_LCE_COMMON_H

#include "cublas_dl.h"
#include "gpu.h"
#include "nvrtc_ref.h"
#include "rt.h"

#include <stdbool.h>
#include <stdint.h>

/* An LCE shape: B candidates, U users, out [B, M, N] = W_cand [M, Kc] @ E_cand [B, Kc, N] +
 * W_user [M, Ku] @ E_user [U, Ku, N] by the mapping. */
typedef struct lce_shape {
    int64_t B, U, M, N, Ku, Kc;
} lce_shape;

/* The program's name in lce_die's messages (each main sets it). */
extern const char *lce_prog;
/* "<lce_prog>: <message>" on stderr, then exit(2): a set-up failure, not a check's. */
void lce_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* ---------------------------------------------------------------- the framework baseline */

/* Per process: the copies' module and cuBLAS (have_cublas 0: why says why not). */
typedef struct lce_fw {
    rt_gpu_module *m;
    cublas_dl cb;
    int have_cublas;
    char why[512];
} lce_fw;

/* Per shape: the inputs and output (s's shape: the largest request), the framework's own
 * buffers, the launch sizes in 16-byte units (nu, nc: a candidate's Eg and E_cand; c0:
 * where E_cand starts in E_cat[b]; ld: E_cat[b]'s size), and B, the candidates the next
 * run computes (1 to s->B; lce_fw_prepare sets it to s->B). */
typedef struct lce_fw_ctx {
    loom_runtime *rt;
    lce_fw *f;
    const lce_shape *s;
    loom_buffer *eu, *ec, *map, *out;
    loom_buffer *wcat, *eg, *ecat;
    int64_t kt;
    long long nu, nc, c0, ld;
    int64_t B;
} lce_fw_ctx;

/* Compile the copies (NVRTC) and load cuBLAS; dies when the copies do not compile. */
void lce_fw_open(loom_runtime *rt, lce_fw *f);
void lce_fw_close(loom_runtime *rt, lce_fw *f);
/* The framework's buffers for x's shape: W_cat [M, Kpu + Kpc] (uploaded from the host
 * weights wu [M, Ku], wc [M, Kc]), Eg and E_cat at s->B with E_cat's zero rows (written
 * here once: the copies never touch them).  NULL, or why the framework cannot run this
 * shape. */
const char *lce_fw_prepare(lce_fw_ctx *x, const uint16_t *wu, const uint16_t *wc);
void lce_fw_release(lce_fw_ctx *x);
/* One run of the framework at x->B: index_select, cat, the GEMM (the default stream, in
 * order, asynchronous).  A failure's message goes into loom_runtime_error(x->rt). */
loom_status lce_fw_once(void *x);

/* ---------------------------------------------------------------- the check */

/* What a run's output is checked against, on the device: the f32 halves (refc [B, M, N],
 * refu [U, M, N]) and their magnitudes at the shape lce_ref_open was given, the mapping
 * the checked run used, the check kernel (at that B and U) and its per-block results, and
 * the kernel that folds them into two numbers.  on: made (a bench may run unchecked). */
typedef struct lce_ref {
    bool on;
    lce_shape s;
    loom_buffer *refc, *refu, *absc, *absu, *map;
    loom_kernel *k, *fold;
    int grid0;
    int64_t nparts;
    loom_buffer *bad, *worst, *two;
} lce_ref;

/* The references of the candidate half (W_cand dwc @ E_cand ec, s->B candidates) and of
 * the user half (W_user dwu @ E_user eu, s->U users) on the device, the check and fold
 * kernels (compiled and loaded here, so a check later compiles nothing) and their
 * buffers; map is the mapping buffer the checked runs read.  Waits for the references.
 * Dies on any failure. */
void lce_ref_open(loom_runtime *rt, nvref_gemm *ref, const lce_shape *s, loom_buffer *dwu, loom_buffer *dwc,
                  loom_buffer *eu, loom_buffer *ec, loom_buffer *map, lce_ref *r);
void lce_ref_close(lce_ref *r);
/* The elements of out's first B candidates past their bound, and the worst |err| / bound,
 * for a run of B candidates (1 to r->s.B) whose mapping (in r->map) names users below
 * U (1 to r->s.U).  Dies when the check cannot run (what names the run checked). */
void lce_ref_check(loom_runtime *rt, const lce_ref *r, loom_buffer *out, int64_t B, int64_t U, const char *what,
                   double *bad, double *worst);

#endif /* LOOM_BENCH_LCE_COMMON_H */
