/*
 * bench_obvious -- issue 36's benchmark: kernels written the obvious way, from the docs,
 * against loom's own tuned forms, cuBLAS, the copy ceiling and PyTorch, in one run.
 *
 * The three kernels are written here the way a user writes them after reading
 * docs/dsl.md, with no trick the docs do not show:
 *
 *   gemm_bias_gelu  C = gelu_tanh(A @ B + bias), A [M, K] and B [K, N] f16, bias [N] f16,
 *                   C [M, N] f16, f32 accumulation.  The warp-specialized persistent GEMM of
 *                   docs/kernels.md ("A warp-specialized fused GEMM": a ring of A and B tiles
 *                   filled by a producer warp group, the pipeline layer's mainloop, tiles in
 *                   grouped order), with the tile config loom's gemm template runs untuned
 *                   at the shape (loom_template_untuned_config: BM, BN, BK, stages, cwarps,
 *                   ctas, group, consumers, tmastore), in its consumer form: cooperative (one
 *                   task) or split (two warp-group replicas, each its half of the rows,
 *                   handing the staging tile over).  The epilogue, the plain way: the bias
 *                   loaded as a [BN] row, cast to f32, expand_dims + broadcast, added to the
 *                   wgmma accumulator; gelu_tanh(x) = 0.5 x (1 + tanh(0.79788456 (x + 0.044715
 *                   x^3))) with loom_tanh; cast to f16; stored through the staging tile and a
 *                   TMA store (tmastore=1, as the template) or from the registers.
 *   rmsnorm         y = x * rsqrt(mean(x^2) + eps) * w over rows of x [R, N]: one program a
 *                   row, the row one 1-D tile (N rounded up to a power of two, the tail
 *                   loaded as 0), computed in f32, loom_reduce_sum for the sum of squares.
 *   softmax         y = exp(x - max) / sum over rows: one program a row, loom_reduce_max,
 *                   loom_exp, loom_reduce_sum, loom_div (the tail loaded as -inf).
 *
 * Each kernel's cost report (loom_kernel_explain, include/loom_runtime.h section 4) is printed:
 * the GEMM must have no layout conversion (a conversion is reported as a failure, with the
 * report); a row kernel's reduction across warps is "other scratch", printed too.
 *
 * On a GPU (H100 for issue 36's figures), at GEMM 4096^3 and 2048^3 f16, RMSNorm f16 and
 * softmax f16 and f32 at 16384 x 4096:
 *   - every output is checked against a CPU reference by the error model (docs/checks.md:
 *     loom_f32_sum_error, loom_error_bound): the GEMMs at 65 sampled rows (one in each of 64
 *     tile rows spread over M, and the last; every column), the row kernels at every element;
 *   - each is timed with loom_time_work (every run after an L2 flush; the median), in
 *     rounds that run every contender of a row in turn, the figure the median of the
 *     rounds' medians;
 *   - GEMM rows: TFLOP/s of gemm_bias_gelu beside loom's gemm template at the same shape and
 *     config without an epilogue, and cuBLAS's plain GEMM (support/cublas_dl.c); the ratio
 *     gemm time / ours and issue 36's verdict: within 5% of the gemm (ours <= 1.05 x its
 *     time);
 *   - row kernels: GB/s (x read once, y written once) beside a device-to-device copy of
 *     the same bytes timed the same way, the ratio and the verdict: at least 0.95 of copy.
 *     Softmax also times the row_softmax template (its default config) beside it.
 *   - with --torch SCRIPT (bench/torch_obvious.py; scripts/gpu.sh passes it where PyTorch
 *     imports): the script runs after loom's rows, in this run, timing PyTorch eager and
 *     torch.compile (default mode and max-autotune-no-cudagraphs) at the same shapes with
 *     CUDA events (L2 flushed, median); its lines are printed, and for the GEMM rows the
 *     speed-up of gemm_bias_gelu over the faster torch.compile, with issue 36's verdict:
 *     at least 1.15x.
 * Without a GPU (or with --interpret): each kernel runs on the interpreter at a small odd
 * shape (masked edges, a persistent GEMM with more tiles than programs) and is checked
 * against the same references, ok or FAIL per kernel; then the GPU run's kernels are
 * compiled for sm_90a as far as their cost reports (about 2 s in all; scripts/test.sh runs
 * it, and ptxas over the PTX).
 *
 * Usage: bench_obvious [--interpret] [--ptx DIR] [--torch SCRIPT] [--warps N] [--reps N] [--variants]
 *   --ptx DIR   write each kernel's PTX into DIR (made if missing), for ptxas -v
 *   --warps N   warps of the row kernels (default 4)
 *   --reps N    runs a round of each contender (default 20; 5 rounds)
 *   --variants  also the GEMM with the bias and no GELU, and with GELU written with FMAs,
 *               checked and timed beside (where the epilogue's time goes)
 * Exit status 1 when a check fails, a kernel converts through scratch or something does
 * not run; a missed speed target is printed, not an exit status.
 */
#include "contenders.h"
#include "ir.h"
#include "loom_pipe.h"
#include "gpu.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CI(v) loom_const_i(k, LOOM_I32, (v))
#define CF(v) loom_const_f(k, LOOM_F32, (v))

static int failures;
static const char *ptx_dir;

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t pow2_at_least(int64_t n)
{
    int64_t p = 1;
    while (p < n)
        p *= 2;
    return p;
}

/* ---------------------------------------------------------------- the kernels */

/* The gemm template's config at a shape: what loom's gemm runs there untuned (its
 * heuristic, loom_template_untuned_config).  The obvious kernel writes the two consumer
 * forms the heuristic takes at square shapes: cooperative (one task of cwarps warps) and
 * split (two warp-group replicas, each its own half of a tile's rows). */
typedef struct gcfg {
    int bm, bn, bk, stages, cwarps, ctas, group, consumers, tmastore;
} gcfg;
enum { COOPERATIVE = 0, SPLIT = 2 };

static void gcfg_text(const gcfg *c, char *text, size_t n)
{
    snprintf(text, n, "BM=%d,BN=%d,BK=%d,stages=%d,cwarps=%d,ctas=%d,group=%d,consumers=%d,tmastore=%d", c->bm, c->bn,
             c->bk, c->stages, c->cwarps, c->ctas, c->group, c->consumers, c->tmastore);
}

static int gcfg_at(int64_t M, int64_t N, int64_t K, gcfg *c, char *text, size_t n)
{
    const loom_template *t = loom_template_find("gemm");
    char st[200], err[300];
    int64_t shape[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    snprintf(st, sizeof st, "M=%lld,N=%lld,K=%lld,dtype=f16,odtype=f16", (long long)M, (long long)N, (long long)K);
    if (!t || loom_params_parse(t->shape, t->nshape, st, shape, err, sizeof err)) {
        fprintf(stderr, "bench_obvious: %s\n", t ? err : "no gemm template");
        return -1;
    }
    loom_template_untuned_config(t, shape, cf);
    static const char *keys[] = {"BM", "BN", "BK", "stages", "cwarps", "ctas", "group", "consumers", "tmastore"};
    int *dst[] = {&c->bm, &c->bn, &c->bk, &c->stages, &c->cwarps, &c->ctas, &c->group, &c->consumers, &c->tmastore};
    enum { NKEYS = sizeof keys / sizeof *keys };
    bool seen[NKEYS] = {0};
    for (int j = 0; j < t->nconfig; j++) {
        int i = 0;
        while (i < NKEYS && strcmp(t->config[j].key, keys[i]))
            i++;
        if (i < NKEYS)
            *dst[i] = (int)cf[j], seen[i] = true;
        else if (cf[j] != t->config[j].def) { /* a form the obvious kernel does not write: not like for like */
            fprintf(stderr, "bench_obvious: gemm's untuned config at %s sets %s=%lld, which the obvious kernel does not write\n",
                    st, t->config[j].key, (long long)cf[j]);
            return -1;
        }
    }
    for (int i = 0; i < NKEYS; i++)
        if (!seen[i]) {
            fprintf(stderr, "bench_obvious: the gemm template has no config key %s\n", keys[i]);
            return -1;
        }
    if (c->consumers != COOPERATIVE && c->consumers != SPLIT) {
        fprintf(stderr, "bench_obvious: gemm's untuned config at %s takes consumers=%d (the obvious kernel writes 0 and 2)\n",
                st, c->consumers);
        return -1;
    }
    gcfg_text(c, text, n);
    return 0;
}

/* gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x f32 (docs/dsl.md's helper
 * form: errors name the caller's line). */
#define gelu_tanh(k, x) gelu_tanh_at(LOOM_HERE, k, x)
static loom_val gelu_tanh_at(loom_src at, loom_kernel *k, loom_val x)
{
    loom_val x3 = loom_mul_at(at, k, loom_mul_at(at, k, x, x), x);
    loom_val inner = loom_add_at(at, k, x, loom_mul_at(at, k, loom_const_f_at(at, k, LOOM_F32, 0.044715), x3));
    loom_val t = loom_tanh_at(at, k, loom_mul_at(at, k, loom_const_f_at(at, k, LOOM_F32, 0.7978845608028654), inner));
    loom_val half_x = loom_mul_at(at, k, loom_const_f_at(at, k, LOOM_F32, 0.5), x);
    return loom_mul_at(at, k, half_x, loom_add_at(at, k, loom_const_f_at(at, k, LOOM_F32, 1.0), t));
}

/* gelu_tanh with the polynomial and the final blend as FMAs: with c0 = sqrt(2/pi) and c1 =
 * 0.044715 c0, u = x fma(x^2, c1, c0) and y = fma(x/2, tanh(u), x/2): five f32 ops and a
 * tanh an element where the form above takes eight.  loom rounds every op as written
 * (the interpreter's semantics), so it does not contract a mul and an add into an fma. */
#define gelu_tanh_fma(k, x) gelu_tanh_fma_at(LOOM_HERE, k, x)
static loom_val gelu_tanh_fma_at(loom_src at, loom_kernel *k, loom_val x)
{
    loom_val c0 = loom_const_f_at(at, k, LOOM_F32, 0.7978845608028654);
    loom_val c1 = loom_const_f_at(at, k, LOOM_F32, 0.044715 * 0.7978845608028654);
    loom_val u = loom_mul_at(at, k, x, loom_fma_at(at, k, loom_mul_at(at, k, x, x), c1, c0));
    loom_val half_x = loom_mul_at(at, k, loom_const_f_at(at, k, LOOM_F32, 0.5), x);
    return loom_fma_at(at, k, half_x, loom_tanh_at(at, k, u), half_x);
}

/* What --variants adds beside the obvious kernel, to tell where the time goes: the same
 * kernel with the bias alone, without GELU, and with GELU written with FMAs. */
enum { OBVIOUS, BIAS_ONLY, GELU_FMA };

/* C = gelu_tanh(A @ B + bias): the persistent warp-specialized GEMM of docs/kernels.md on
 * the pipeline layer (a producer filling the ring, the layer's mainloop, a staged epilogue),
 * in the consumer form of the config: cooperative (one task; its warp groups split every
 * tile by rows) or split (two replicas of one warp group, each its half of the tile's rows
 * with its own accumulator; they hand the staging tile over, so one's epilogue overlaps
 * the other's mainloop).  The epilogue, the plain way, on each accumulator. */
static loom_kernel *gemm_bias_gelu(int64_t M, int64_t N, int64_t K, const gcfg *c, int variant)
{
    static const char *names[] = {"gemm_bias_gelu", "gemm_bias_only", "gemm_bias_gelu_fma"};
    bool split = c->consumers == SPLIT;
    int reps = split ? 2 : 1, rows = c->bm / reps; /* each consumer's rows of a tile */
    loom_kernel *k = loom_kernel_create(names[variant], LOOM_PIPE_PRODUCER_WARPS + c->cwarps);
    loom_pipe p = loom_pipe_create(k);
    loom_val A = loom_arg_tensor(k, "A", LOOM_F16, LOOM_SHAPE2(M, K), LOOM_IN);
    loom_val B = loom_arg_tensor(k, "B", LOOM_F16, LOOM_SHAPE2(K, N), LOOM_IN);
    loom_val bias = loom_arg_tensor(k, "bias", LOOM_F16, LOOM_SHAPE1(N), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F16, LOOM_SHAPE2(M, N), LOOM_OUT);

    /* a ring of A [rows, BK] (a part a consumer) and B [BK, BN] tiles, released by every consumer */
    loom_ring_tile tiles[2] = {{LOOM_F16, LOOM_SHAPE2(rows, c->bk), reps, c->bk == 32 ? LOOM_SWIZZLE_64 : LOOM_SWIZZLE_128},
                               {LOOM_F16, LOOM_SHAPE2(c->bk, c->bn), 1, LOOM_SWIZZLE_128}};
    loom_ring ring = loom_ring_create(&p, c->stages, reps, 2, tiles);
    int64_t tm = cdiv(M, c->bm), tn = cdiv(N, c->bn), nk = cdiv(K, c->bk);
    loom_sched sched = loom_sched_static(&p, tm * tn, 1);
    loom_shape tile = LOOM_SHAPE2(rows, c->bn);
    loom_epilogue_kind ek = !c->tmastore ? LOOM_EPI_REGISTERS : split ? LOOM_EPI_HANDOVER : LOOM_EPI_STAGED;
    loom_epilogue epi = loom_epilogue_create(&p, ek, C, LOOM_F16, tile, 1, split ? 128 : 32 * c->cwarps);
    loom_mainloop ml = {.ring = &ring, .a_tile = 0, .b_tile = 1, .a_split = split, .rows = rows, .cols = c->bn,
                        .steps = nk};
    loom_val zero = CI(0), one = CI(1);

    /* the producer: for each tile, for each k step, the slot's A (in its parts) and B */
    loom_region_op pt = loom_producer_begin(k);
    {
        loom_sched_loop tl = loom_sched_begin(k, &sched, LOOM_SCHED_PRODUCER, LOOM_NONE, 1, &zero);
        loom_val b, tr, tc;
        loom_sched_grouped(k, loom_sched_unit(&tl), tm, tn, c->group, &b, &tr, &tc);
        loom_val m0 = loom_mul(k, tr, CI(c->bm)), n0 = loom_mul(k, tc, CI(c->bn)), it0 = loom_sched_arg(&tl, 0);
        loom_region_op kl = loom_for_begin(k, zero, CI(nk), one, 0, NULL);
        {
            loom_val kk = loom_for_iv(k, kl), k0 = loom_mul(k, kk, CI(c->bk));
            loom_val s = loom_ring_produce(k, &ring, loom_add(k, it0, kk), -1);
            for (int h = 0; h < reps; h++)
                loom_ring_load(k, &ring, s, 0, h, A, ((loom_val[]){loom_add(k, m0, CI(h * rows)), k0}));
            loom_ring_load(k, &ring, s, 1, 0, B, ((loom_val[]){k0, n0}));
        }
        loom_for_end(k, kl, 0, NULL);
        loom_val next = loom_add(k, it0, CI(nk));
        loom_sched_end(k, &tl, &next);
    }
    loom_task_end(k, pt);

    /* the consumers: the mainloop, then the epilogue */
    loom_region_op ct = loom_consumers_begin(k, split ? 4 : c->cwarps, reps);
    {
        loom_val rep = split ? loom_task_replica(k) : LOOM_NONE;
        loom_sched_loop tl = loom_sched_begin(k, &sched, LOOM_SCHED_CONSUMER, LOOM_NONE, 1, &zero);
        loom_val b, tr, tc;
        loom_sched_grouped(k, loom_sched_unit(&tl), tm, tn, c->group, &b, &tr, &tc);
        loom_val m0 = loom_mul(k, tr, CI(c->bm)), n0 = loom_mul(k, tc, CI(c->bn)), it0 = loom_sched_arg(&tl, 0);
        if (split) /* this replica's rows */
            m0 = loom_add(k, m0, loom_mul(k, rep, CI(rows)));
        loom_val acc = loom_mainloop_run(k, &ml, it0, rep, LOOM_NONE, 0);
        acc = loom_mainloop_finish(k, &ml, acc, loom_mainloop_last(k, &ml, it0));

        /* the epilogue: + bias (a [BN] row), gelu_tanh, f16 */
        loom_val bv = loom_cast(k, loom_load(k, bias, &n0, LOOM_SHAPE1(c->bn), LOOM_NONE, 0.0), LOOM_F32);
        loom_val x = loom_add(k, acc, loom_broadcast(k, loom_expand_dims(k, bv, 0), tile));
        loom_val y = loom_cast(k, variant == BIAS_ONLY ? x : variant == GELU_FMA ? gelu_tanh_fma(k, x) : gelu_tanh(k, x),
                               LOOM_F16);
        if (split) /* in this replica's turn: its j-th tile */
            loom_epilogue_store_turn(k, &epi, ((loom_val[]){m0, n0}), y, rep, loom_div(k, it0, CI(nk)));
        else
            loom_epilogue_store(k, &epi, ((loom_val[]){m0, n0}), y, LOOM_NONE);
        loom_val next = loom_add(k, it0, CI(nk));
        loom_sched_end(k, &tl, &next);
        loom_epilogue_finish(k, &epi);
    }
    loom_task_end(k, ct);
    return k;
}

#define RMS_EPS 1e-6

/* y = x * rsqrt(mean(x^2) + eps) * w, a row a program. */
static loom_kernel *rmsnorm(int64_t R, int64_t N, loom_dtype dt, int warps)
{
    int64_t bn = pow2_at_least(N);
    loom_kernel *k = loom_kernel_create("rmsnorm", warps);
    loom_val X = loom_arg_tensor(k, "x", dt, LOOM_SHAPE2(R, N), LOOM_IN);
    loom_val W = loom_arg_tensor(k, "w", dt, LOOM_SHAPE1(N), LOOM_IN);
    loom_val Y = loom_arg_tensor(k, "y", dt, LOOM_SHAPE2(R, N), LOOM_OUT);
    loom_val offs[2] = {loom_program_id(k, 0), CI(0)};
    loom_val x = loom_cast(k, loom_load(k, X, offs, LOOM_SHAPE1(bn), LOOM_NONE, 0.0), LOOM_F32);
    loom_val w = loom_cast(k, loom_load(k, W, &offs[1], LOOM_SHAPE1(bn), LOOM_NONE, 0.0), LOOM_F32);
    loom_val mean = loom_mul(k, loom_reduce_sum(k, loom_mul(k, x, x), 0), CF(1.0 / (double)N));
    loom_val inv = loom_rsqrt(k, loom_add(k, mean, CF(RMS_EPS)));
    loom_store(k, Y, offs, loom_cast(k, loom_mul(k, loom_mul(k, x, inv), w), dt), LOOM_NONE);
    return k;
}

/* y = exp(x - max) / sum, a row a program. */
static loom_kernel *softmax(int64_t R, int64_t N, loom_dtype dt, int warps)
{
    int64_t bn = pow2_at_least(N);
    loom_kernel *k = loom_kernel_create("softmax", warps);
    loom_val X = loom_arg_tensor(k, "x", dt, LOOM_SHAPE2(R, N), LOOM_IN);
    loom_val Y = loom_arg_tensor(k, "y", dt, LOOM_SHAPE2(R, N), LOOM_OUT);
    loom_val offs[2] = {loom_program_id(k, 0), CI(0)};
    loom_val x = loom_cast(k, loom_load(k, X, offs, LOOM_SHAPE1(bn), LOOM_NONE, -INFINITY), LOOM_F32);
    loom_val e = loom_exp(k, loom_sub(k, x, loom_reduce_max(k, x, 0)));
    loom_store(k, Y, offs, loom_cast(k, loom_div(k, e, loom_reduce_sum(k, e, 0)), dt), LOOM_NONE);
    return k;
}
#undef CI
#undef CF

/* ---------------------------------------------------------------- what each kernel costs */


/* Print loom_kernel_explain's report of k; a conversion is a failure for the GEMM (issue
 * 36: the obvious epilogue moves nothing through shared memory).  With --ptx, write its
 * PTX as DIR/<tag>.ptx. */
static void explain(loom_kernel *k, const char *tag, bool conversion_fails)
{
    bench_costs s = {0};
    char *text = NULL, err[4096];
    loom_status st = loom_kernel_explain(k, "sm_90a", bench_on_cost, &s, &text, err, sizeof err);
    printf("explain %s (loom_kernel_explain, sm_90a):\n", tag);
    if (st != LOOM_OK) {
        printf("  FAIL: %s: %s\n", loom_status_name(st), err);
        failures++;
    } else {
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
            printf("  %s\n", line);
        printf("  => %s: %d conversion%s through scratch, %d other use%s of scratch%s\n", tag, s.convert, s.convert == 1 ? "" : "s",
               s.scratch, s.scratch == 1 ? "" : "s",
               s.convert && conversion_fails ? ": FAIL (the obvious form converts)" : s.convert ? "" : ": no conversion");
        failures += s.convert && conversion_fails;
    }
    free(text);
    if (!ptx_dir)
        return;
    char *ptx = NULL, path[1024];
    size_t smem = 0;
    if (loom_compile_ptx(k, "sm_90a", &ptx, &smem, err, sizeof err) != LOOM_OK) {
        printf("  PTX: FAIL: %s\n", err);
        failures++;
        return;
    }
    snprintf(path, sizeof path, "%s/%s.ptx", ptx_dir, tag);
    FILE *f = fopen(path, "w");
    if (!f || fputs(ptx, f) < 0 || fclose(f) != 0) {
        printf("  PTX: cannot write %s\n", path);
        failures++;
    } else
        printf("  PTX: %s (%zu bytes of dynamic shared memory)\n", path, smem);
    free(ptx);
}

/* ---------------------------------------------------------------- inputs and references */

static double rnd(uint64_t *s) /* uniform in [-1, 1) */
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*s >> 11) * 0x1p-52 - 1.0;
}

static double get(const void *p, loom_dtype dt, int64_t i)
{
    return dt == LOOM_F32 ? ((const float *)p)[i] : ir_f16_to_f32(((const uint16_t *)p)[i]);
}

static void set(void *p, loom_dtype dt, int64_t i, double v)
{
    if (dt == LOOM_F32)
        ((float *)p)[i] = (float)v;
    else
        ((uint16_t *)p)[i] = ir_f32_to_f16((float)v);
}

/* v rounded to dt (as a reference stored in dt). */
static double rounded(loom_dtype dt, double v) { return dt == LOOM_F32 ? (double)(float)v : ir_f16_to_f32(ir_f32_to_f16((float)v)); }

typedef struct verdict {
    int64_t checked, bad;
    double worst; /* largest |out - ref| / bound */
    char first[256];
} verdict;

static void judge(verdict *v, const char *what, int64_t r, int64_t j, double got, double ref, double bound)
{
    double e = fabs(got - ref);
    v->checked++;
    if (bound > 0 && e / bound > v->worst)
        v->worst = e / bound;
    if (!(e <= bound) && !(isnan(got) && isnan(ref)) && v->bad++ == 0)
        snprintf(v->first, sizeof v->first, "%s[%lld, %lld] = %.6g, want %.6g +- %.3g", what, (long long)r, (long long)j,
                 got, ref, bound);
}

static const char *describe(const verdict *v, char *buf, size_t n)
{
    if (v->bad)
        snprintf(buf, n, "FAIL: %lld of %lld past their bound; first %s", (long long)v->bad, (long long)v->checked,
                 v->first);
    else
        snprintf(buf, n, "ok (%lld checked, worst |err|/bound %.3f)", (long long)v->checked, v->worst);
    return buf;
}

/* Row m of A @ B in double (acc) and the sum of the products' magnitudes (mag). */
static void gemm_row(const uint16_t *A, const uint16_t *B, int64_t N, int64_t K, int64_t m, double *acc, double *mag)
{
    for (int64_t j = 0; j < N; j++)
        acc[j] = mag[j] = 0;
    for (int64_t q = 0; q < K; q++) {
        double a = ir_f16_to_f32(A[m * K + q]);
        if (a == 0)
            continue;
        const uint16_t *brow = B + q * N;
        for (int64_t j = 0; j < N; j++) {
            double t = a * ir_f16_to_f32(brow[j]);
            acc[j] += t;
            mag[j] += fabs(t);
        }
    }
}

/* The error model of gemm_bias_gelu at z = acc + bias (docs/checks.md): z is a sum of K + 1
 * terms in f32 (the bias the last); gelu_tanh's slope is at most 1.13; its arithmetic
 * (x^3, the polynomial, 1 + t, the products: a few f32 roundings, carried through tanh's
 * slope 1 - t^2) and tanh.approx (relative 2^-10.9, docs/dsl.md); then f16. */
static double gelu_exact(double z, double *t)
{
    *t = tanh(0.7978845608028654 * (z + 0.044715 * z * z * z));
    return 0.5 * z * (1 + *t);
}

static double gelu_err(double z, double mag, int64_t K)
{
    const double u = 0x1p-24;
    double t, y = gelu_exact(z, &t), az = fabs(z);
    double inner = 0.7978845608028654 * (az + 0.044715 * az * az * az);
    double arith = 0.5 * az * ((1 - t * t) * 5 * u * inner + exp2(-10.9) * fabs(t) + 4 * u) + 2 * u * fabs(y);
    return 1.13 * loom_f32_sum_error(K + 1, mag) + arith;
}

/* The rows checked: every row up to 256, else one in each of 64 tile rows spread over M
 * (at a different offset in each tile) and the last. */
static int sample_rows(int64_t M, int bm, int64_t *rows)
{
    int n = 0;
    if (M <= 256) {
        for (int64_t m = 0; m < M; m++)
            rows[n++] = m;
        return n;
    }
    int64_t tm = cdiv(M, bm);
    for (int i = 0; i < 64; i++) {
        int64_t t = tm * i / 64, m = t * bm + (i * 37) % bm;
        rows[n++] = m < M ? m : M - 1;
    }
    rows[n++] = M - 1;
    return n;
}

/* One GEMM output to check (a host copy): what it computes, and the verdict. */
enum { OUT_GELU, OUT_BIAS, OUT_PLAIN };
typedef struct gout {
    const uint16_t *c;
    int kind; /* gelu_tanh(A @ B + bias), A @ B + bias, A @ B */
    verdict v;
} gout;

/* Check the GEMMs' outputs at the sampled rows (every column). */
static void check_gemm(const uint16_t *A, const uint16_t *B, const uint16_t *bias, int64_t M, int64_t N, int64_t K, int bm,
                       gout *outs, int nout)
{
    int64_t rows[300];
    int nrows = sample_rows(M, bm, rows);
    double *acc = malloc((size_t)N * sizeof *acc), *mag = malloc((size_t)N * sizeof *mag);
    if (!acc || !mag) {
        fprintf(stderr, "bench_obvious: out of memory\n");
        exit(1);
    }
    for (int o = 0; o < nout; o++)
        memset(&outs[o].v, 0, sizeof outs[o].v);
    for (int i = 0; i < nrows; i++) {
        int64_t m = rows[i];
        gemm_row(A, B, N, K, m, acc, mag);
        for (int64_t j = 0; j < N; j++) {
            double bj = ir_f16_to_f32(bias[j]), z = acc[j] + bj, t;
            for (int o = 0; o < nout; o++) {
                double ref, err;
                if (outs[o].kind == OUT_GELU)
                    ref = rounded(LOOM_F16, gelu_exact(z, &t)), err = gelu_err(z, mag[j] + fabs(bj), K);
                else if (outs[o].kind == OUT_BIAS)
                    ref = rounded(LOOM_F16, z), err = loom_f32_sum_error(K + 1, mag[j] + fabs(bj));
                else
                    ref = rounded(LOOM_F16, acc[j]), err = loom_f32_sum_error(K, mag[j]);
                judge(&outs[o].v, "C", m, j, ir_f16_to_f32(outs[o].c[m * N + j]), ref,
                      loom_error_bound(LOOM_F16, ref, err));
            }
        }
    }
    free(acc);
    free(mag);
}

/* RMSNorm's reference and bound at every element (examples/kernels/rmsnorm.c's model: the
 * sum of N squares in f32, halved by the square root; rsqrt within 2^-21; a few f32
 * roundings; then dt). */
static void check_rmsnorm(const void *x, const void *w, const void *y, int64_t R, int64_t N, loom_dtype dt, verdict *v)
{
    memset(v, 0, sizeof *v);
    for (int64_t r = 0; r < R; r++) {
        double ss = 0;
        for (int64_t j = 0; j < N; j++)
            ss += get(x, dt, r * N + j) * get(x, dt, r * N + j);
        double inv = 1 / sqrt(ss / (double)N + RMS_EPS);
        double rel = (ss > 0 ? 0.5 * loom_f32_sum_error(N, ss) / ss : 0) + 0x1p-21 + 8 * 0x1p-24;
        for (int64_t j = 0; j < N; j++) {
            double ye = get(x, dt, r * N + j) * inv * get(w, dt, j), ref = rounded(dt, ye);
            judge(v, "y", r, j, get(y, dt, r * N + j), ref, loom_error_bound(dt, ref, rel * fabs(ye)));
        }
    }
}

/* Softmax's reference and bound at every element: x - max rounded in f32, exp within 3 ulp
 * (docs/dsl.md), the sum of N positive terms in f32, the IEEE division; then dt. */
static void check_softmax(const void *x, const void *y, int64_t R, int64_t N, loom_dtype dt, verdict *v)
{
    const double u = 0x1p-24;
    memset(v, 0, sizeof *v);
    for (int64_t r = 0; r < R; r++) {
        double mx = -INFINITY, sum = 0, dmax = 0;
        for (int64_t j = 0; j < N; j++)
            mx = fmax(mx, get(x, dt, r * N + j));
        for (int64_t j = 0; j < N; j++) {
            double d = get(x, dt, r * N + j) - mx;
            sum += exp(d);
            dmax = fmax(dmax, fabs(d) * u + 8 * u);
        }
        double sigma = dmax + loom_f32_sum_error(N, 1.0) * (1 + dmax); /* the sum's relative error */
        for (int64_t j = 0; j < N; j++) {
            double d = get(x, dt, r * N + j) - mx, ye = exp(d) / sum, ref = rounded(dt, ye);
            double rel = (1 + fabs(d) * u + 8 * u) * (1 + u) / (1 - sigma) - 1;
            judge(v, "y", r, j, get(y, dt, r * N + j), ref, loom_error_bound(dt, ref, rel * ye));
        }
    }
}

/* ---------------------------------------------------------------- buffers and launches */

static loom_buffer *upload(loom_runtime *rt, const void *host, size_t bytes)
{
    loom_buffer *b = loom_buffer_create(rt, bytes);
    if (!b || (host && loom_buffer_upload(b, host, bytes) != LOOM_OK) || (!host && loom_buffer_fill(b, 0xff) != LOOM_OK)) {
        fprintf(stderr, "bench_obvious: buffer of %zu bytes: %s\n", bytes, loom_runtime_error(rt));
        exit(1);
    }
    return b;
}

static int reps_per_round = 20;

/* time_rounds (contenders.h): 0, or -1 with the failure printed and counted. */
static int time_all(loom_runtime *rt, work *ws, int n, int rounds)
{
    if (time_rounds(rt, ws, n, rounds, reps_per_round) == 0)
        return 0;
    failures++;
    return -1;
}

/* ---------------------------------------------------------------- the GEMM rows */

/* One result row of the summary. */
typedef struct result {
    char key[64];    /* as torch_obvious.py names it: "gemm_bias_gelu 4096x4096x4096 f16" */
    int gemm;        /* 1: a GEMM row (TFLOP/s, the 5% and 1.15x verdicts); 0: a row kernel (GB/s) */
    double ms, flop, bytes;
    double peer_ms;  /* loom's gemm / the copy */
    double cublas_ms;
    double torch_ms; /* the faster torch.compile, from --torch (0: none) */
    char torch_mode[40];
} result;

static result results[16];
static int nresults;

static loom_kernel *template_gemm(int64_t M, int64_t N, int64_t K, const char *config, int grid[3])
{
    char text[200], why[1100];
    snprintf(text, sizeof text, "M=%lld,N=%lld,K=%lld,dtype=f16,odtype=f16", (long long)M, (long long)N, (long long)K);
    loom_kernel *k = bench_template_build("gemm", text, config, grid, NULL, 0, why, sizeof why);
    if (!k)
        printf("  loom gemm: %s\n", why);
    return k;
}

static void fill_gemm_inputs(uint16_t *A, uint16_t *B, uint16_t *bias, int64_t M, int64_t N, int64_t K, uint64_t seed)
{
    /* A in [-1, 1), B in [-s, s) with s = 4 / sqrt(K) so that z = A @ B + bias is about 1.3
     * wide: gelu's curved part, not only its linear tail, is checked */
    double s = 4 / sqrt((double)K);
    for (int64_t i = 0; i < M * K; i++)
        A[i] = ir_f32_to_f16((float)rnd(&seed));
    for (int64_t i = 0; i < K * N; i++)
        B[i] = ir_f32_to_f16((float)(s * rnd(&seed)));
    for (int64_t i = 0; i < N; i++)
        bias[i] = ir_f32_to_f16((float)rnd(&seed));
}

static int variants; /* --variants */

/* gemm_bias_gelu at M x N x K with config `at` (NULL: gemm's untuned config at the
 * shape): checked; on a GPU timed beside loom's gemm at the same
 * config and cuBLAS (and with --variants the diagnostic kernels). */
static void gemm_case(loom_runtime *rt, cublas_dl *cb, int64_t M, int64_t N, int64_t K, const gcfg *at, bool gpu)
{
    char buf[600], tag[64], cfg_text[256];
    gcfg own;
    if (gcfg_at(M, N, K, &own, cfg_text, sizeof cfg_text) != 0) {
        failures++;
        return;
    }
    if (at) {
        own = *at;
        gcfg_text(&own, cfg_text, sizeof cfg_text);
    }
    const gcfg *cfg = &own;
    printf("\n== gemm_bias_gelu %lldx%lldx%lld f16 [%s]\n", (long long)M, (long long)N, (long long)K, cfg_text);
    loom_kernel *k = gemm_bias_gelu(M, N, K, cfg, OBVIOUS);
    if (loom_verify(k) != LOOM_OK) {
        printf("  FAIL: the obvious kernel fails verification:\n%s", loom_kernel_errors(k));
        failures++;
        loom_kernel_destroy(k);
        return;
    }
    snprintf(tag, sizeof tag, "gemm_bias_gelu_%lld", (long long)M);
    explain(k, tag, true);
    size_t na = (size_t)(M * K), nb = (size_t)(K * N), nc = (size_t)(M * N);
    uint16_t *A = malloc(na * 2), *B = malloc(nb * 2), *bias = malloc((size_t)N * 2);
    if (!A || !B || !bias) {
        fprintf(stderr, "bench_obvious: out of memory\n");
        exit(1);
    }
    fill_gemm_inputs(A, B, bias, M, N, K, 1000 + (uint64_t)M);
    loom_buffer *bA = upload(rt, A, na * 2), *bB = upload(rt, B, nb * 2), *bbias = upload(rt, bias, (size_t)N * 2);

    /* the contenders: ours; on a GPU loom's gemm (same config, no epilogue), cuBLAS, and with
     * --variants the diagnostic kernels; each writes its own C */
    enum { MAXW = 5 };
    work ws[MAXW];
    gout outs[MAXW];
    loom_kernel *owned[MAXW] = {0};
    loom_buffer *cbuf[MAXW] = {0};
    memset(ws, 0, sizeof ws);
    memset(outs, 0, sizeof outs);
    int n = 0;
    int64_t units = cdiv(M, cfg->bm) * cdiv(N, cfg->bn);
    int ours_grid = (int)(cfg->ctas && cfg->ctas < units ? cfg->ctas : units);
    for (int v = OBVIOUS; v <= (variants ? GELU_FMA : OBVIOUS); v++) {
        loom_kernel *kv = v == OBVIOUS ? k : gemm_bias_gelu(M, N, K, cfg, v);
        if (v != OBVIOUS && loom_verify(kv) != LOOM_OK) {
            printf("  FAIL: %s fails verification:\n%s", loom_kernel_name(kv), loom_kernel_errors(kv));
            failures++;
            loom_kernel_destroy(kv);
            continue;
        }
        if (v != OBVIOUS) {
            snprintf(tag, sizeof tag, "%s_%lld", loom_kernel_name(kv), (long long)M);
            explain(kv, tag, false);
        }
        static const char *names[] = {"gemm_bias_gelu", "(bias, no gelu)", "(gelu with fma)"};
        owned[n] = kv;
        cbuf[n] = upload(rt, NULL, nc * 2);
        loom_arg args[4] = {LOOM_ARG_BUF(bA), LOOM_ARG_BUF(bB), LOOM_ARG_BUF(bbias), LOOM_ARG_BUF(cbuf[n])};
        ws[n] = (work){.name = names[v], .rt = rt, .n = 1, .s = {launch_step(kv, (int[3]){ours_grid, 1, 1}, args, 4)}};
        outs[n++].kind = v == BIAS_ONLY ? OUT_BIAS : OUT_GELU;
    }
    int gemm_at = -1, cublas_at = -1, tgrid[3];
    loom_kernel *kg = gpu ? template_gemm(M, N, K, cfg_text, tgrid) : NULL;
    if (kg) {
        owned[n] = kg;
        cbuf[n] = upload(rt, NULL, nc * 2);
        loom_arg args[5] = {LOOM_ARG_I32((int32_t)M), LOOM_ARG_I32(1), LOOM_ARG_BUF(bA), LOOM_ARG_BUF(bB),
                            LOOM_ARG_BUF(cbuf[n])};
        ws[n] = (work){.name = "loom gemm", .rt = rt, .n = 1, .s = {launch_step(kg, tgrid, args, 5)}};
        outs[n].kind = OUT_PLAIN;
        gemm_at = n++;
    } else if (gpu)
        failures++;
    if (gpu && cb && cb->h) {
        cbuf[n] = upload(rt, NULL, nc * 2);
        ws[n] = (work){.name = "cuBLAS", .rt = rt, .cb = cb, .n = 1, .s = {cublas_step(M, N, K, bA, bB, cbuf[n])}};
        outs[n].kind = OUT_PLAIN;
        cublas_at = n++;
    }

    /* one run of each, checked at the sampled rows */
    uint16_t *host[MAXW] = {0};
    gout chk[MAXW];
    int chk_of[MAXW], nchk = 0;
    bool all_ran = true;
    for (int i = 0; i < n; i++) {
        host[i] = malloc(nc * 2);
        if (!host[i] || run_work(&ws[i]) != LOOM_OK || loom_runtime_sync(rt, 0) != LOOM_OK ||
            loom_buffer_download(cbuf[i], host[i], nc * 2) != LOOM_OK) {
            printf("  %s: FAIL: %s\n", ws[i].name, host[i] ? loom_runtime_error(rt) : "out of memory");
            failures++;
            all_ran = false;
            continue;
        }
        chk[nchk] = outs[i];
        chk[nchk].c = host[i];
        chk_of[nchk++] = i;
    }
    check_gemm(A, B, bias, M, N, K, cfg->bm, chk, nchk);
    for (int c = 0; c < nchk; c++) {
        printf("  check %-16s (%s, every column): %s\n", ws[chk_of[c]].name, M <= 256 ? "every row" : "65 sampled rows",
               describe(&chk[c].v, buf, sizeof buf));
        failures += chk[c].v.bad != 0;
    }

    if (gpu && all_ran && time_all(rt, ws, n, 5) == 0) {
        double flop = 2.0 * (double)M * (double)N * (double)K;
        result *r = &results[nresults++];
        memset(r, 0, sizeof *r);
        snprintf(r->key, sizeof r->key, "gemm_bias_gelu %lldx%lldx%lld f16", (long long)M, (long long)N, (long long)K);
        r->gemm = 1;
        r->ms = ws[0].ms;
        r->flop = flop;
        r->peer_ms = gemm_at >= 0 ? ws[gemm_at].ms : 0;
        r->cublas_ms = cublas_at >= 0 ? ws[cublas_at].ms : 0;
        for (int i = 0; i < n; i++)
            printf("  %-20s %8.4f ms  %7.1f TFLOP/s\n", ws[i].name, ws[i].ms, flop / ws[i].ms * 1e-9);
        if (r->peer_ms > 0)
            printf("  gemm_bias_gelu / loom gemm: %.3f of its speed (time %.3fx): %s\n", r->peer_ms / r->ms,
                   r->ms / r->peer_ms, r->ms <= 1.05 * r->peer_ms ? "within 5% (issue 36: met)" : "NOT within 5% (issue 36: missed)");
    }
    for (int i = 0; i < MAXW; i++) {
        loom_kernel_destroy(owned[i]);
        loom_buffer_destroy(cbuf[i]);
        free(host[i]);
    }
    loom_buffer_destroy(bA);
    loom_buffer_destroy(bB);
    loom_buffer_destroy(bbias);
    free(A), free(B), free(bias);
}

/* ---------------------------------------------------------------- the row kernels */

enum { ROW_RMSNORM, ROW_SOFTMAX };

/* RMSNorm or softmax at R x N of dt: checked; on a GPU timed beside a copy of the same bytes
 * (and, for softmax, the row_softmax template). */
static void row_case(loom_runtime *rt, int which, int64_t R, int64_t N, loom_dtype dt, int warps, bool gpu)
{
    const char *name = which == ROW_RMSNORM ? "rmsnorm" : "softmax";
    char buf[600], tag[64];
    printf("\n== %s %lldx%lld %s, %d warps, a row a program\n", name, (long long)R, (long long)N, loom_dtype_name(dt),
           warps);
    loom_kernel *k = which == ROW_RMSNORM ? rmsnorm(R, N, dt, warps) : softmax(R, N, dt, warps);
    if (loom_verify(k) != LOOM_OK) {
        printf("  FAIL: the obvious kernel fails verification:\n%s", loom_kernel_errors(k));
        failures++;
        loom_kernel_destroy(k);
        return;
    }
    snprintf(tag, sizeof tag, "%s_%s_%lld", name, loom_dtype_name(dt), (long long)N);
    explain(k, tag, true);
    size_t es = loom_dtype_size(dt), nx = (size_t)(R * N);
    void *x = malloc(nx * es), *w = malloc((size_t)N * es), *y = malloc(nx * es);
    if (!x || !w || !y) {
        fprintf(stderr, "bench_obvious: out of memory\n");
        exit(1);
    }
    uint64_t seed = 77 + (uint64_t)N + (uint64_t)which;
    for (size_t i = 0; i < nx; i++) /* rmsnorm: [-2, 2); softmax: [-8, 8) (rows with a clear max) */
        set(x, dt, (int64_t)i, (which == ROW_RMSNORM ? 2 : 8) * rnd(&seed));
    for (int64_t i = 0; i < N; i++)
        set(w, dt, i, 1 + 0.5 * rnd(&seed));
    loom_buffer *bx = upload(rt, x, nx * es), *bw = upload(rt, w, (size_t)N * es), *by = upload(rt, NULL, nx * es);
    work ws[3];
    memset(ws, 0, sizeof ws);
    loom_arg rargs[3] = {LOOM_ARG_BUF(bx), LOOM_ARG_BUF(bw), LOOM_ARG_BUF(by)}, sargs[2] = {LOOM_ARG_BUF(bx), LOOM_ARG_BUF(by)};
    ws[0] = (work){.name = name, .rt = rt, .n = 1,
                   .s = {which == ROW_RMSNORM ? launch_step(k, (int[3]){(int)R, 1, 1}, rargs, 3)
                                              : launch_step(k, (int[3]){(int)R, 1, 1}, sargs, 2)}};
    bool ok = run_work(&ws[0]) == LOOM_OK && loom_runtime_sync(rt, 0) == LOOM_OK &&
              loom_buffer_download(by, y, nx * es) == LOOM_OK;
    verdict v;
    if (!ok) {
        printf("  FAIL: %s\n", loom_runtime_error(rt));
        failures++;
    } else {
        if (which == ROW_RMSNORM)
            check_rmsnorm(x, w, y, R, N, dt, &v);
        else
            check_softmax(x, y, R, N, dt, &v);
        printf("  check %s (every element): %s\n", name, describe(&v, buf, sizeof buf));
        failures += v.bad != 0;
    }

    /* the traffic: x read once, y written once (w is N elements, in L2) */
    double bytes = 2.0 * (double)nx * (double)es;
    loom_buffer *src = NULL, *dst = NULL;
    loom_instance inst;
    bool have_tpl = false;
    if (gpu && ok) {
        int n = 0;
        n++;
        src = upload(rt, NULL, nx * es), dst = upload(rt, NULL, nx * es);
        ws[n++] = (work){.name = "copy", .rt = rt, .n = 1, .s = {copy_step(src, dst, nx * es)}};
        if (which == ROW_SOFTMAX) { /* the row_softmax template at its default config, checked at a small shape */
            const loom_template *t = loom_template_find("row_softmax");
            int64_t shape[LOOM_MAX_PARAMS], small[LOOM_MAX_PARAMS], cfg[LOOM_MAX_PARAMS];
            char text[128], stext[128], err[1024], rep[1024];
            snprintf(text, sizeof text, "R=%lld,N=%lld,dtype=%s", (long long)R, (long long)N, loom_dtype_name(dt));
            snprintf(stext, sizeof stext, "R=37,N=%lld,dtype=%s", (long long)N, loom_dtype_name(dt));
            if (t && !loom_params_parse(t->shape, t->nshape, text, shape, err, sizeof err) &&
                !loom_params_parse(t->shape, t->nshape, stext, small, err, sizeof err) &&
                !loom_params_parse(t->config, t->nconfig, "", cfg, err, sizeof err)) {
                if (loom_template_check(rt, t, small, cfg, 7, rep, sizeof rep) != LOOM_OK)
                    printf("  row_softmax template: check FAILED: %s\n", rep), failures++;
                else if (loom_instance_create(rt, t, shape, cfg, 42, &inst, err, sizeof err) != LOOM_OK)
                    printf("  row_softmax template: %s\n", err), failures++;
                else {
                    have_tpl = true;
                    ws[n++] = (work){.name = "row_softmax tpl", .rt = rt, .n = 1,
                                     .s = {launch_step(inst.kernel, inst.grid, inst.args, inst.nargs)}};
                }
            }
        }
        if (time_all(rt, ws, n, 5) == 0) {
            result *r = &results[nresults++];
            memset(r, 0, sizeof *r);
            snprintf(r->key, sizeof r->key, "%s %lldx%lld %s", name, (long long)R, (long long)N, loom_dtype_name(dt));
            r->ms = ws[0].ms;
            r->bytes = bytes;
            r->peer_ms = ws[1].ms;
            for (int i = 0; i < n; i++)
                printf("  %-16s %8.4f ms  %7.0f GB/s\n", ws[i].name, ws[i].ms, bytes / ws[i].ms * 1e-6);
            printf("  %s / copy: %.3f of copy bandwidth: %s\n", name, r->peer_ms / r->ms,
                   r->peer_ms / r->ms >= 0.95 ? "at least 0.95 (issue 36: met)" : "below 0.95 (issue 36: missed)");
        }
    }
    if (have_tpl)
        loom_instance_destroy(&inst);
    loom_kernel_destroy(k);
    loom_buffer *bs[] = {bx, bw, by, src, dst};
    for (size_t i = 0; i < sizeof bs / sizeof *bs; i++)
        loom_buffer_destroy(bs[i]);
    free(x), free(w), free(y);
}

/* ---------------------------------------------------------------- the PyTorch peer */

/* Run the script (python3 SCRIPT) and read its rows: "torch_obvious: KEY... | MODE | MS".
 * Every line is echoed; each result row takes the faster torch.compile's time. */
static void run_torch(const char *script)
{
    char cmd[1200], line[1024];
    snprintf(cmd, sizeof cmd, "python3 '%s' 2>&1", script);
    printf("\n== PyTorch peer: %s\n", cmd);
    fflush(stdout);
    FILE *f = popen(cmd, "r");
    if (!f) {
        printf("  cannot run it: %s\n", strerror(errno));
        return;
    }
    while (fgets(line, sizeof line, f)) {
        fputs("  ", stdout);
        fputs(line, stdout);
        char key[128], mode[64];
        double ms;
        if (sscanf(line, "torch_obvious: %127[^|]| %63[^|]| %lf", key, mode, &ms) != 3)
            continue;
        for (char *e = key + strlen(key); e > key && e[-1] == ' '; *--e = 0)
            ;
        for (char *e = mode + strlen(mode); e > mode && e[-1] == ' '; *--e = 0)
            ;
        if (strncmp(mode, "compile", 7) != 0 || !(ms > 0))
            continue;
        for (int i = 0; i < nresults; i++)
            if (!strcmp(results[i].key, key) && (results[i].torch_ms == 0 || ms < results[i].torch_ms)) {
                results[i].torch_ms = ms;
                snprintf(results[i].torch_mode, sizeof results[i].torch_mode, "%s", mode);
            }
    }
    int rc = pclose(f);
    if (rc != 0)
        printf("  (the script exited with status %d)\n", rc);
}

/* ---------------------------------------------------------------- without a GPU */

static void interpreter_run(loom_runtime *rt, int warps)
{
    gcfg big[2];
    char text[256];
    if (gcfg_at(4096, 4096, 4096, &big[0], text, sizeof text) || gcfg_at(2048, 2048, 2048, &big[1], text, sizeof text)) {
        failures++;
        return;
    }
    printf("no GPU: each kernel on the interpreter at a small odd shape, checked against the CPU reference\n");
    /* 4 x 2 tiles (partial at the M and N edges, K not a multiple of BK) over 3 persistent
     * programs: the config of the small shape itself (cooperative), then the GPU shapes'
     * (split at 4096^3) */
    gcfg small;
    if (gcfg_at(200, 320, 200, &small, text, sizeof text)) {
        failures++;
        return;
    }
    for (int i = 0; i < 2; i++) {
        gcfg c = i ? big[0] : small;
        c.ctas = 3;
        gemm_case(rt, NULL, 3 * c.bm + 8, c.bn + 64, 3 * c.bk + 8, &c, false);
    }
    row_case(rt, ROW_RMSNORM, 37, 1000, LOOM_F16, 4, false);
    row_case(rt, ROW_SOFTMAX, 37, 1000, LOOM_F16, 4, false);
    row_case(rt, ROW_SOFTMAX, 37, 1000, LOOM_F32, 4, false);

    /* the kernels the GPU run times, compiled for sm_90a as far as their cost report (and
     * their PTX, with --ptx): nothing of it needs a GPU */
    printf("\n== the GPU run's kernels, compiled (sm_90a)\n");
    loom_kernel *ks[5] = {gemm_bias_gelu(4096, 4096, 4096, &big[0], OBVIOUS), gemm_bias_gelu(2048, 2048, 2048, &big[1], OBVIOUS),
                          rmsnorm(16384, 4096, LOOM_F16, warps), softmax(16384, 4096, LOOM_F16, warps),
                          softmax(16384, 4096, LOOM_F32, warps)};
    static const char *tags[5] = {"gemm_bias_gelu_4096", "gemm_bias_gelu_2048", "rmsnorm_f16_4096",
                                  "softmax_f16_4096", "softmax_f32_4096"};
    for (int i = 0; i < 5; i++) {
        if (loom_verify(ks[i]) != LOOM_OK) {
            printf("  FAIL: %s fails verification:\n%s", tags[i], loom_kernel_errors(ks[i]));
            failures++;
        } else
            explain(ks[i], tags[i], true);
        loom_kernel_destroy(ks[i]);
    }
}

int main(int argc, char **argv)
{
    const char *torch = NULL;
    int warps = 4, interpret = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--interpret"))
            interpret = 1;
        else if (!strcmp(argv[i], "--ptx") && i + 1 < argc)
            ptx_dir = argv[++i];
        else if (!strcmp(argv[i], "--torch") && i + 1 < argc)
            torch = argv[++i];
        else if (!strcmp(argv[i], "--warps") && i + 1 < argc)
            warps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps_per_round = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--variants"))
            variants = 1;
        else {
            fprintf(stderr, "usage: bench_obvious [--interpret] [--ptx DIR] [--torch SCRIPT] [--warps N] [--reps N] [--variants]\n");
            return 2;
        }
    }
    if (warps < 1 || warps > 32 || reps_per_round < 1 || reps_per_round > 10000) {
        fprintf(stderr, "bench_obvious: --warps is 1 to 32, --reps 1 to 10000\n");
        return 2;
    }
    if (ptx_dir) { /* mkdir -p */
        char path[1024];
        snprintf(path, sizeof path, "%s", ptx_dir);
        for (char *q = path + 1;; q++)
            if (*q == '/' || !*q) {
                char c = *q;
                *q = 0;
                if (mkdir(path, 0777) != 0 && errno != EEXIST) {
                    fprintf(stderr, "bench_obvious: cannot create %s: %s\n", path, strerror(errno));
                    return 2;
                }
                if (!(*q = c))
                    break;
            }
    }
    loom_runtime *rt = interpret ? NULL : loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        if (rt)
            printf("bench_obvious: no GPU (%s)\n", loom_runtime_error(rt));
        loom_runtime_destroy(rt);
        rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
        if (!rt) {
            fprintf(stderr, "bench_obvious: out of memory\n");
            return 1;
        }
        interpreter_run(rt, warps);
        loom_runtime_destroy(rt);
        printf("\nbench_obvious: %s\n", failures ? "FAILED" : "ok");
        return failures ? 1 : 0;
    }

    printf("bench_obvious on %s\n", loom_runtime_device_name(rt));
    cublas_dl cb;
    bench_cublas_open(&cb);
    gemm_case(rt, &cb, 4096, 4096, 4096, NULL, true);
    gemm_case(rt, &cb, 2048, 2048, 2048, NULL, true);
    row_case(rt, ROW_RMSNORM, 16384, 4096, LOOM_F16, warps, true);
    row_case(rt, ROW_SOFTMAX, 16384, 4096, LOOM_F16, warps, true);
    row_case(rt, ROW_SOFTMAX, 16384, 4096, LOOM_F32, warps, true);
    if (cb.h)
        cublas_dl_close(&cb);
    if (loom_runtime_sync(rt, 0) != LOOM_OK) {
        printf("bench_obvious: the device failed: %s\n", loom_runtime_error(rt));
        failures++;
    }
    if (torch)
        run_torch(torch);

    printf("\n%-36s %9s %10s %9s %10s %9s %12s  %s\n", "kernel (written the obvious way)", "ms", "TF/s|GB/s",
           "peer ms", "peer", "ratio", "torch.compile", "issue 36");
    for (int i = 0; i < nresults; i++) {
        result *r = &results[i];
        double rate = r->gemm ? r->flop / r->ms * 1e-9 : r->bytes / r->ms * 1e-6;
        double peer = r->gemm ? r->flop / r->peer_ms * 1e-9 : r->bytes / r->peer_ms * 1e-6;
        char tc[48] = "-", verdict_s[160];
        if (r->torch_ms > 0)
            snprintf(tc, sizeof tc, "%.4f ms %.2fx", r->torch_ms, r->torch_ms / r->ms);
        if (r->gemm)
            snprintf(verdict_s, sizeof verdict_s, "%s of loom gemm (%s); %s", r->ms <= 1.05 * r->peer_ms ? "within 5%" : "NOT within 5%",
                     r->cublas_ms > 0 ? "cuBLAS timed beside" : "no cuBLAS",
                     r->torch_ms > 0 ? (r->torch_ms >= 1.15 * r->ms ? ">= 1.15x torch.compile" : "NOT 1.15x torch.compile")
                                     : "torch.compile not timed");
        else
            snprintf(verdict_s, sizeof verdict_s, "%s of copy", r->peer_ms / r->ms >= 0.95 ? ">= 0.95" : "BELOW 0.95");
        printf("%-36s %9.4f %10.1f %9.4f %10.1f %9.3f %12s  %s\n", r->key, r->ms, rate, r->peer_ms, peer, r->peer_ms / r->ms,
               tc, verdict_s);
        if (r->gemm && r->cublas_ms > 0)
            printf("%-36s %9.4f %10.1f   (cuBLAS plain GEMM; ours / cuBLAS speed %.3f)\n", "", r->cublas_ms,
                   r->flop / r->cublas_ms * 1e-9, r->cublas_ms / r->ms);
    }
    printf("(peer: loom's gemm template at the same config without an epilogue, TF/s; for the row kernels a "
           "device-to-device copy of the same bytes, GB/s; ratio = peer time / ours)\n");
    loom_runtime_destroy(rt);
    printf("bench_obvious: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
