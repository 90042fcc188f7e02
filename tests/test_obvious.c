/*
 * test_obvious.c -- the obvious way to write a kernel compiles to the fast form, and where
 * it cannot, loom says so with the user's line and the cost (issue 36).
 *
 * Each kernel here is written the plain way a user would: a bias row or a per-row scale
 * loaded as a vector, expand_dims + broadcast to the tile, added to a wgmma accumulator or
 * to a loaded (blocked) tile; running sums and maxima started with loom_splat and carried
 * by a loop (the reduction idiom of docs/dsl.md, online softmax); a residual add; an
 * activation epilogue.  Each is checked twice:
 *   1. on the interpreter, against a reference computed here;
 *   2. compiled, through loom_kernel_explain (include/loom_runtime.h, section 4): no layout
 *      conversion and no other use of shared-memory scratch, the bar.sync count in the
 *      PTX, no f64 arithmetic in the PTX, and ptxas without spills.
 * Then the explain API's report for a form that still needs a conversion (it names the
 * line and the bytes), LOOM_DUMP_AFTER=layouts, and the shared-memory refusal, which lists
 * what uses the memory with each line.
 */
#include "loom_pipe.h"
#include "ir.h"
#include "testutil.h"

#include <math.h>

#define I32(k, v) loom_const_i(k, LOOM_I32, v)

/* ---------------------------------------------------------------- helpers */

typedef struct costs {
    int n, convert, scratch, smem, mbar, arith;
    int barriers;         /* of conversions and other scratch, each counted once */
    size_t convert_bytes; /* the largest conversion */
    char first[1024];     /* the first conversion's line of text */
    int first_line;
} costs;

static void on_cost(void *ctx, const loom_cost *c)
{
    costs *s = ctx;
    s->n++;
    cr_assert(c->file && c->op && c->text && c->line > 0, "a cost names its op and line");
    switch (c->kind) {
    case LOOM_COST_CONVERT:
        if (!s->convert++) {
            snprintf(s->first, sizeof s->first, "%s", c->text);
            s->first_line = c->line;
        }
        if (c->bytes > s->convert_bytes)
            s->convert_bytes = c->bytes;
        s->barriers += c->barriers;
        break;
    case LOOM_COST_SCRATCH:
        s->scratch++;
        s->barriers += c->barriers;
        break;
    case LOOM_COST_SMEM: s->smem++; break;
    case LOOM_COST_MBAR: s->mbar++; break;
    case LOOM_COST_ARITH: s->arith++; break;
    }
}

static costs explain(loom_kernel *k, char **text)
{
    costs s = {0};
    char err[4096];
    loom_status st = loom_kernel_explain(k, "sm_90a", on_cost, &s, text, err, sizeof err);
    cr_assert_eq(st, LOOM_OK, "%s: explain: %s: %s", loom_kernel_name(k), loom_status_name(st), err);
    return s;
}

/* Compiled, k has no conversion and no other scratch, `bars` bar.sync in its PTX (-1: not
 * checked), no f64 arithmetic, and ptxas takes it without spills. */
static void expect_fast(loom_kernel *k, int bars)
{
    char *text = NULL;
    costs s = explain(k, &text);
    cr_expect_eq(s.convert, 0, "%s: %d conversions:\n%s", loom_kernel_name(k), s.convert, text);
    cr_expect_eq(s.scratch, 0, "%s: %d other uses of scratch:\n%s", loom_kernel_name(k), s.scratch, text);
    cr_expect(strstr(text, "0 conversions, 0 other uses of scratch"), "%s: totals:\n%s", loom_kernel_name(k), text);
    free(text);
    char *ptx = NULL, err[4096];
    size_t smem = 0;
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, &smem, err, sizeof err), LOOM_OK, "%s", err);
    if (bars >= 0)
        cr_expect_eq(t_count(ptx, "bar.sync"), bars, "%s: %d bar.sync, want %d", loom_kernel_name(k),
                     t_count(ptx, "bar.sync"), bars);
    cr_expect_eq(t_count(ptx, ".f64"), 0, "%s: f64 in the PTX", loom_kernel_name(k));
    t_ptxas_ok(ptx, "sm_90a", loom_kernel_name(k));
    free(ptx);
}

static void fill(float *v, int64_t n, unsigned seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
    }
}

/* f16 bits of x, and x rounded to f16 in *r. */
static uint16_t to_f16(float x, float *r)
{
    uint16_t h = ir_f32_to_f16(x);
    *r = ir_f16_to_f32(h);
    return h;
}

static void expect_close(const char *what, const float *got, const float *want, int64_t n, float tol)
{
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabsf(got[i] - want[i]) <= tol * (1 + fabsf(want[i])), "%s[%lld] = %g, want %g", what,
                  (long long)i, got[i], want[i]);
}

/* ---------------------------------------------------------------- epilogues on a wgmma accumulator */

/* C [M, N] f32 = epilogue(A [M, K] @ B [K, N]), one BM-row tile a program: a producer task
 * TMAs A and B, a consumer task runs one wgmma and the epilogue, written the plain way. */
enum { EPI_BIAS_ROW, EPI_BIAS_ROW2D, EPI_SCALE_COL, EPI_RESIDUAL, EPI_BIAS_RELU, EPI_BIAS_F16, EPI_PLANES };
enum { WM = 64, WK = 64, WN = 128 };

/* The bias (EPI_BIAS_ROW, EPI_BIAS_F16) has nb elements (WN unless given) and is read at
 * column boff + n (0 unless given): past its end the load's fill, 0. */
static int64_t acc_nb = WN, acc_boff = 0;

static loom_kernel *acc_kernel(int64_t M, int epi)
{
    static const char *names[] = {"bias_row", "bias_row2d", "scale_col", "residual", "bias_relu", "bias_f16",
                                  "residual_planes"};
    loom_kernel *k = loom_kernel_create(names[epi], 8);
    loom_val A = loom_arg_tensor(k, "A", LOOM_F16, LOOM_SHAPE2(M, WK), LOOM_IN);
    loom_val B = loom_arg_tensor(k, "B", LOOM_F16, LOOM_SHAPE2(WK, WN), LOOM_IN);
    loom_val V = epi == EPI_SCALE_COL    ? loom_arg_tensor(k, "scale", LOOM_F32, LOOM_SHAPE1(M), LOOM_IN)
                 : epi == EPI_RESIDUAL   ? loom_arg_tensor(k, "R", LOOM_F32, LOOM_SHAPE2(M, WN), LOOM_IN)
                 : epi == EPI_BIAS_ROW2D ? loom_arg_tensor(k, "bias", LOOM_F32, LOOM_SHAPE2(1, WN), LOOM_IN)
                 : epi == EPI_BIAS_F16   ? loom_arg_tensor(k, "bias", LOOM_F16, LOOM_SHAPE1(acc_nb), LOOM_IN)
                 : epi == EPI_PLANES     ? loom_arg_tensor(k, "planes", LOOM_F16, LOOM_SHAPE3(2, M, WN), LOOM_IN)
                                         : loom_arg_tensor(k, "bias", LOOM_F32, LOOM_SHAPE1(acc_nb), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F32, LOOM_SHAPE2(M, WN), LOOM_OUT);
    loom_val as = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(WM, WK), 1, LOOM_SWIZZLE_128);
    loom_val bs = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(WK, WN), 1, LOOM_SWIZZLE_128);
    loom_val full = loom_mbar_alloc(k, 1, 1);
    loom_val m0 = loom_mul(k, loom_program_id(k, 0), I32(k, WM)), zero = I32(k, 0);

    loom_region_op pt = loom_task_begin(k, 4, 40, 1);
    loom_mbar_expect(k, full, zero, (WM * WK + WK * WN) * 2);
    loom_tma_load(k, A, ((loom_val[]){m0, zero}), loom_smem_slot(k, as, zero), full, zero);
    loom_tma_load(k, B, ((loom_val[]){zero, zero}), loom_smem_slot(k, bs, zero), full, zero);
    loom_task_end(k, pt);

    loom_region_op ct = loom_task_begin(k, 4, 232, 1);
    loom_mbar_wait(k, full, zero, zero);
    loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(WM, WN));
    loom_val acc = loom_wgmma(k, loom_smem_slot(k, as, zero), loom_smem_slot(k, bs, zero), acc0);
    loom_wgmma_commit(k);
    loom_region_op wt = loom_wgmma_wait(k, 0, 1, &acc);
    acc = loom_wgmma_result(k, wt, 0);
    loom_shape tile = LOOM_SHAPE2(WM, WN);
    loom_val out;
    switch (epi) {
    case EPI_BIAS_ROW2D: { /* bias [1, BN]: a broadcast of the row */
        loom_val b = loom_load(k, V, ((loom_val[]){zero, zero}), LOOM_SHAPE2(1, WN), LOOM_NONE, 0.0);
        out = loom_add(k, acc, loom_broadcast(k, b, tile));
        break;
    }
    case EPI_SCALE_COL: { /* a per-row scale [BM]: expand_dims on axis 1 */
        loom_val s = loom_load(k, V, ((loom_val[]){m0}), LOOM_SHAPE1(WM), LOOM_NONE, 0.0);
        out = loom_mul(k, loom_broadcast(k, loom_expand_dims(k, s, 1), tile), acc);
        break;
    }
    case EPI_RESIDUAL: {
        loom_val r = loom_load(k, V, ((loom_val[]){m0, zero}), tile, LOOM_NONE, 0.0);
        out = loom_add(k, r, acc);
        break;
    }
    case EPI_PLANES: { /* a residual kept as two f16 planes (hi, lo), cast and added first */
        loom_val hi = loom_load(k, V, ((loom_val[]){zero, m0, zero}), tile, LOOM_NONE, 0.0);
        loom_val lo = loom_load(k, V, ((loom_val[]){I32(k, 1), m0, zero}), tile, LOOM_NONE, 0.0);
        out = loom_add(k, acc, loom_add(k, loom_cast(k, hi, LOOM_F32), loom_cast(k, lo, LOOM_F32)));
        break;
    }
    case EPI_BIAS_F16: { /* an f16 bias, cast after the broadcast */
        loom_val b = loom_load(k, V, ((loom_val[]){I32(k, acc_boff)}), LOOM_SHAPE1(WN), LOOM_NONE, 0.0);
        out = loom_add(k, loom_cast(k, loom_broadcast(k, loom_expand_dims(k, b, 0), tile), LOOM_F32), acc);
        break;
    }
    default: { /* bias [BN], expand_dims on axis 0, broadcast, add (then relu) */
        loom_val b = loom_load(k, V, ((loom_val[]){I32(k, acc_boff)}), LOOM_SHAPE1(WN), LOOM_NONE, 0.0);
        out = loom_add(k, acc, loom_broadcast(k, loom_expand_dims(k, b, 0), tile));
        if (epi == EPI_BIAS_RELU)
            out = loom_max(k, out, loom_splat(k, loom_const_f(k, LOOM_F32, 0), tile));
        break;
    }
    }
    loom_store(k, C, ((loom_val[]){m0, zero}), out, LOOM_NONE);
    loom_task_end(k, ct);
    return k;
}

/* The kernel of epi run on rt (NULL: the interpreter) against the reference. */
static void acc_run(int epi, loom_runtime *rt)
{
    const int64_t M = 130; /* three tiles, the last with 2 rows */
    loom_kernel *k = acc_kernel(M, epi);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    bool bias = epi == EPI_BIAS_ROW || epi == EPI_BIAS_F16 || epi == EPI_BIAS_RELU;
    int64_t nb = bias ? acc_nb : WN; /* the bias's elements */
    uint16_t *a = malloc(M * WK * 2), *b = malloc(WK * WN * 2), *v16 = malloc(nb * 2);
    float *af = malloc(M * WK * 4), *bf = malloc(WK * WN * 4), *v = malloc(M * WN * 4), *c = calloc(M * WN, 4),
          *ref = calloc(M * WN, 4);
    fill(af, M * WK, 1);
    fill(bf, WK * WN, 2);
    fill(v, M * WN, 3);
    for (int64_t i = 0; i < M * WK; i++)
        a[i] = to_f16(af[i], &af[i]);
    for (int64_t i = 0; i < WK * WN; i++)
        b[i] = to_f16(bf[i], &bf[i]);
    for (int64_t i = 0; i < nb; i++)
        v16[i] = to_f16(v[i], &v[i]);
    uint16_t *planes = malloc(2 * M * WN * 2);
    for (int64_t i = 0; epi == EPI_PLANES && i < M * WN; i++) { /* v becomes hi + lo */
        float hi, lo;
        planes[i] = to_f16(v[i], &hi);
        planes[M * WN + i] = to_f16(v[i] - hi, &lo);
        v[i] = hi + lo;
    }
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < WN; n++) {
            float s = 0;
            for (int64_t q = 0; q < WK; q++)
                s += af[m * WK + q] * bf[q * WN + n];
            float bn = acc_boff + n < nb ? v[acc_boff + n] : 0; /* past the bias: the fill */
            float r = epi == EPI_SCALE_COL                      ? s * v[m]
                      : epi == EPI_RESIDUAL || epi == EPI_PLANES ? s + v[m * WN + n]
                                                                 : s + bn;
            ref[m * WN + n] = epi == EPI_BIAS_RELU && r < 0 ? 0 : r;
        }
    int grid[3] = {3, 1, 1};
    int64_t vbytes = epi == EPI_SCALE_COL  ? M * 4
                     : epi == EPI_RESIDUAL ? M * WN * 4
                     : epi == EPI_PLANES   ? 2 * M * WN * 2
                     : epi == EPI_BIAS_F16 ? nb * 2
                                           : nb * 4;
    void *vp = epi == EPI_BIAS_F16 ? (void *)v16 : epi == EPI_PLANES ? (void *)planes : (void *)v;
    targ args[] = {TA_BUF(a, M * WK * 2), TA_BUF(b, WK * WN * 2), TA_BUF(vp, vbytes), TA_BUF(c, M * WN * 4)};
    if (rt) {
        loom_status st = t_run_on(rt, k, grid, args, 4);
        cr_assert_eq(st, LOOM_OK, "GPU launch: %s", loom_runtime_error(rt));
    } else
        T_RUN_OK(k, grid, args, 4);
    expect_close(loom_kernel_name(k), c, ref, M * WN, 1e-3f);
    /* the PTX's one bar.sync: the mbarrier inits made visible before the tasks start */
    expect_fast(k, 1);
    free(a), free(b), free(v16), free(planes), free(af), free(bf), free(v), free(c), free(ref);
    loom_kernel_destroy(k);
}

static void acc_check(int epi) { acc_run(epi, NULL); }

Test(obvious, bias_row_on_the_accumulator) { acc_check(EPI_BIAS_ROW); }
Test(obvious, bias_row_2d_on_the_accumulator) { acc_check(EPI_BIAS_ROW2D); }
Test(obvious, per_row_scale_on_the_accumulator) { acc_check(EPI_SCALE_COL); }
Test(obvious, residual_add_on_the_accumulator) { acc_check(EPI_RESIDUAL); }
Test(obvious, bias_and_relu_epilogue) { acc_check(EPI_BIAS_RELU); }
Test(obvious, f16_bias_cast_after_the_broadcast) { acc_check(EPI_BIAS_F16); }
/* the planes' add decides nothing of its own: both loads take the accumulator's layout */
Test(obvious, residual_as_two_f16_planes_added_first) { acc_check(EPI_PLANES); }

/* A bias row in the accumulator's slice layout is 16 vectors a thread at 128 columns.
 * Where the bias's size and the column it is read at are multiples of the tile's 128, the
 * tile lies wholly inside or wholly past it: read unpredicated from the tile's start (or,
 * past it, from the bias's), the fill chosen after the load by one uniform compare
 * (codegen/lower_mem.c, dim_bounds).  Otherwise it is read unpredicated too, each vector's
 * index clamped into the tensor and the fill chosen after the load (clamped_load).  On the
 * GPU, on the interpreter too: the whole row inside the bias, its end inside the tile (a
 * multiple of the vector and an odd one of pairs), the tile starting inside and running
 * past it, a tile wholly past it (every column the fill), and the two whole cases (the
 * bias's second tile, and the tile just past it). */
Test(obvious_gpu, bias_row_read_clamped_at_its_edges)
{
    loom_runtime *rt = t_gpu_or_skip();
    static const int64_t cases[][2] = {{WN, 0},   {104, 0},     {98, 0},     {200, 96},
                                       {64, 96},  {2 * WN, WN}, {WN, WN}}; /* {elements, first column} */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int e = 0; e < 2; e++) {
            acc_nb = cases[i][0], acc_boff = cases[i][1];
            acc_run(e ? EPI_BIAS_F16 : EPI_BIAS_ROW, rt);
            acc_run(e ? EPI_BIAS_F16 : EPI_BIAS_ROW, NULL);
        }
    acc_nb = WN, acc_boff = 0;
    loom_runtime_destroy(rt);
}

/* The whole-tile read's code: no bounds per vector (no clamp, no predicated load), one
 * select of the fill a register; the clamped read where the bias's size is not a multiple
 * of the tile. */
Test(obvious, bias_row_at_a_multiple_of_its_tile_is_read_without_per_element_bounds)
{
    for (int w = 0; w < 2; w++) {
        acc_nb = w ? 2 * WN : 104, acc_boff = w ? WN : 0;
        loom_kernel *k = acc_kernel(130, EPI_BIAS_ROW);
        char *ptx = NULL, err[4096];
        size_t smem = 0;
        cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, &smem, err, sizeof err), LOOM_OK, "%s", err);
        int pld = 0, imm = 0; /* global loads predicated; at a register plus a constant */
        for (const char *p = ptx; (p = strstr(p, "ld.global")); p++) {
            const char *line = p, *end = strchr(p, '\n');
            while (line > ptx && line[-1] != '\n')
                line--;
            pld += memchr(line, '@', (size_t)(p - line)) != NULL;
            const char *br = strchr(p, '[');
            imm += br && end && br < end && memchr(br, '+', (size_t)(end - br)) != NULL;
        }
        cr_expect_eq(pld, 0, "%s: %d predicated global loads", w ? "whole" : "clamped", pld);
        if (w) /* the thread's address once, each vector at a constant from it */
            cr_expect_eq(imm, 15, "the whole tile: 16 vectors, 15 at constants past the first (%d)", imm);
        else /* each vector at its own clamped address */
            cr_expect_eq(imm, 0, "a bias of 104 read clamped (%d at constant offsets)", imm);
        t_ptxas_ok(ptx, "sm_90a", loom_kernel_name(k));
        free(ptx);
        loom_kernel_destroy(k);
    }
    acc_nb = WN, acc_boff = 0;
}

/* ---------------------------------------------------------------- a pipelined GEMM with a bias */

/* The persistent, warp-specialized GEMM of docs/dsl.md ("Writing a warp-specialized
 * kernel"): BN = 256, 3 ring slots of BK = 64, an f16 output staged for TMA stores in two
 * slots (tiles alternate between them), and a bias row added in the epilogue.  With the
 * bias converted through scratch (64 KiB: the [64, 256] f32 tile) it needed more shared
 * memory than the GPU has and was refused; in the accumulator's column slice it needs
 * none. */
enum { PM = 192, PN = 256, PK = 128, PBM = 64, PBN = 256, PBK = 64, PSLOTS = 3 };

static loom_kernel *pipe_bias_gemm(void)
{
    loom_kernel *k = loom_kernel_create("pipe_bias_gemm", LOOM_PIPE_PRODUCER_WARPS + 4);
    loom_pipe p = loom_pipe_create(k);
    loom_val A = loom_arg_tensor(k, "A", LOOM_F16, LOOM_SHAPE2(PM, PK), LOOM_IN);
    loom_val Bt = loom_arg_tensor(k, "Bt", LOOM_F16, LOOM_SHAPE2(PN, PK), LOOM_IN);
    loom_val bias = loom_arg_tensor(k, "bias", LOOM_F32, LOOM_SHAPE1(PN), LOOM_IN);
    loom_val C = loom_arg_tensor(k, "C", LOOM_F16, LOOM_SHAPE2(PM, PN), LOOM_OUT);
    loom_ring_tile tiles[2] = {{LOOM_F16, LOOM_SHAPE2(PBM, PBK), 1, LOOM_SWIZZLE_128},
                               {LOOM_F16, LOOM_SHAPE2(PBN, PBK), 1, LOOM_SWIZZLE_128}};
    loom_ring ring = loom_ring_create(&p, PSLOTS, 1, 2, tiles);
    int64_t tm = PM / PBM, tn = PN / PBN, nk = PK / PBK;
    loom_sched sched = loom_sched_static(&p, tm * tn, 1);
    loom_epilogue epi = loom_epilogue_create(&p, LOOM_EPI_STAGED, C, LOOM_F16, LOOM_SHAPE2(PBM, PBN), 2, 128);
    loom_val zero = I32(k, 0), one = I32(k, 1);

    loom_region_op pt = loom_producer_begin(k);
    {
        loom_sched_loop tl = loom_sched_begin(k, &sched, LOOM_SCHED_PRODUCER, LOOM_NONE, 1, &zero);
        loom_val b, tr, tc;
        loom_sched_grouped(k, loom_sched_unit(&tl), tm, tn, 2, &b, &tr, &tc);
        loom_val m0 = loom_mul(k, tr, I32(k, PBM)), n0 = loom_mul(k, tc, I32(k, PBN)), it0 = loom_sched_arg(&tl, 0);
        loom_region_op kl = loom_for_begin(k, zero, I32(k, nk), one, 0, NULL);
        loom_val kk = loom_for_iv(k, kl), k0 = loom_mul(k, kk, I32(k, PBK));
        loom_val s = loom_ring_produce(k, &ring, loom_add(k, it0, kk), -1);
        loom_ring_load(k, &ring, s, 0, 0, A, ((loom_val[]){m0, k0}));
        loom_ring_load_multicast(k, &ring, s, 1, 0, Bt, ((loom_val[]){n0, k0}));
        loom_for_end(k, kl, 0, NULL);
        loom_val next = loom_add(k, it0, I32(k, nk));
        loom_sched_end(k, &tl, &next);
    }
    loom_task_end(k, pt);

    loom_region_op ct = loom_consumers_begin(k, 4, 1);
    {
        loom_val init[2] = {zero, zero};
        loom_sched_loop tl = loom_sched_begin(k, &sched, LOOM_SCHED_CONSUMER, LOOM_NONE, 2, init);
        loom_val b, tr, tc;
        loom_sched_grouped(k, loom_sched_unit(&tl), tm, tn, 2, &b, &tr, &tc);
        loom_val m0 = loom_mul(k, tr, I32(k, PBM)), n0 = loom_mul(k, tc, I32(k, PBN));
        loom_val it0 = loom_sched_arg(&tl, 0), slot = loom_sched_arg(&tl, 1);
        loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(PBM, PBN));
        loom_region_op kl = loom_for_begin(k, zero, I32(k, nk), one, 1, &acc0);
        {
            loom_val s = loom_ring_consume(k, &ring, loom_add(k, it0, loom_for_iv(k, kl)));
            loom_val acc = loom_wgmma(k, loom_ring_view(k, &ring, s, 0, LOOM_NONE),
                                      loom_smem_trans(k, loom_ring_view(k, &ring, s, 1, LOOM_NONE)),
                                      loom_for_arg(k, kl, 0));
            loom_wgmma_commit(k);
            loom_region_op w = loom_wgmma_wait(k, 0, 1, &acc);
            loom_ring_release(k, &ring, s);
            loom_val r = loom_wgmma_result(k, w, 0);
            loom_for_end(k, kl, 1, &r);
        }
        /* the epilogue, the plain way: bias row, broadcast, add, cast */
        loom_val bv = loom_load(k, bias, ((loom_val[]){n0}), LOOM_SHAPE1(PBN), LOOM_NONE, 0.0);
        loom_val y = loom_add(k, loom_for_result(k, kl, 0),
                              loom_broadcast(k, loom_expand_dims(k, bv, 0), LOOM_SHAPE2(PBM, PBN)));
        loom_epilogue_store(k, &epi, ((loom_val[]){m0, n0}), loom_cast(k, y, LOOM_F16), slot);
        loom_val next[2] = {loom_add(k, it0, I32(k, nk)), loom_sub(k, one, slot)};
        loom_sched_end(k, &tl, next);
        loom_epilogue_finish(k, &epi);
    }
    loom_task_end(k, ct);
    return k;
}

Test(obvious, pipelined_gemm_with_a_bias_fits_and_converts_nothing)
{
    loom_kernel *k = pipe_bias_gemm();
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    uint16_t *a = malloc(PM * PK * 2), *bt = malloc(PN * PK * 2), *c = calloc(PM * PN, 2);
    float *af = malloc(PM * PK * 4), *bf = malloc(PN * PK * 4), *bias = malloc(PN * 4), *ref = malloc(PM * PN * 4),
          *got = malloc(PM * PN * 4);
    fill(af, PM * PK, 4);
    fill(bf, PN * PK, 5);
    fill(bias, PN, 6);
    for (int64_t i = 0; i < PM * PK; i++)
        a[i] = to_f16(af[i], &af[i]);
    for (int64_t i = 0; i < PN * PK; i++)
        bt[i] = to_f16(bf[i], &bf[i]);
    for (int64_t m = 0; m < PM; m++)
        for (int64_t n = 0; n < PN; n++) {
            float s = bias[n];
            for (int64_t q = 0; q < PK; q++)
                s += af[m * PK + q] * bf[n * PK + q];
            ref[m * PN + n] = ir_f16_to_f32(ir_f32_to_f16(s));
        }
    int grid[3] = {2, 1, 1}; /* persistent: 3 tiles over 2 programs */
    targ args[] = {TA_BUF(a, PM * PK * 2), TA_BUF(bt, PN * PK * 2), TA_BUF(bias, PN * 4), TA_BUF(c, PM * PN * 2)};
    T_RUN_OK(k, grid, args, 4);
    for (int64_t i = 0; i < PM * PN; i++)
        got[i] = ir_f16_to_f32(c[i]);
    expect_close("C", got, ref, PM * PN, 4e-3f);
    expect_fast(k, -1);
    char *ptx = NULL, err[4096];
    size_t smem = 0;
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, &smem, err, sizeof err), LOOM_OK, "%s", err);
    size_t tiles = (size_t)PSLOTS * (PBM + PBN) * PBK * 2 + 2 * PBM * PBN * 2;
    cr_expect(smem <= tiles + 1024, "%zu bytes of shared memory for %zu of ring and staging", smem, tiles);
    free(ptx);
    free(a), free(bt), free(c), free(af), free(bf), free(bias), free(ref), free(got);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- on a loaded (blocked) tile */

enum { XR = 40, XC = 96, XBM = 16, XBN = 128 }; /* a tile larger than the tensor: masked edges */

/* y = x * scale[r] + bias[c] (+ x, the residual, and relu), the row and column vectors
 * loaded as vectors and broadcast; `order` puts the broadcast operand first. */
static loom_kernel *blocked_kernel(int order)
{
    loom_kernel *k = loom_kernel_create(order ? "blocked_bias_first" : "blocked_bias", 4);
    loom_val X = loom_arg_tensor(k, "x", LOOM_F16, LOOM_SHAPE2(XR, XC), LOOM_IN);
    loom_val S = loom_arg_tensor(k, "scale", LOOM_F32, LOOM_SHAPE1(XR), LOOM_IN);
    loom_val Bv = loom_arg_tensor(k, "bias", LOOM_F32, LOOM_SHAPE1(XC), LOOM_IN);
    loom_val Y = loom_arg_tensor(k, "y", LOOM_F32, LOOM_SHAPE2(XR, XC), LOOM_OUT);
    loom_val r0 = loom_mul(k, loom_program_id(k, 0), I32(k, XBM)), zero = I32(k, 0);
    loom_shape tile = LOOM_SHAPE2(XBM, XBN);
    loom_val x = loom_cast(k, loom_load(k, X, ((loom_val[]){r0, zero}), tile, LOOM_NONE, 0.0), LOOM_F32);
    loom_val s = loom_broadcast(k, loom_expand_dims(k, loom_load(k, S, ((loom_val[]){r0}), LOOM_SHAPE1(XBM), LOOM_NONE, 0.0), 1), tile);
    loom_val b = loom_broadcast(k, loom_expand_dims(k, loom_load(k, Bv, ((loom_val[]){zero}), LOOM_SHAPE1(XBN), LOOM_NONE, 0.0), 0), tile);
    loom_val y = order ? loom_add(k, b, loom_mul(k, s, x)) : loom_add(k, loom_mul(k, x, s), b);
    y = loom_add(k, y, x);
    y = loom_max(k, y, loom_splat(k, loom_const_f(k, LOOM_F32, 0), tile));
    loom_store(k, Y, ((loom_val[]){r0, zero}), y, LOOM_NONE);
    return k;
}

Test(obvious, row_and_column_vectors_on_a_blocked_tile)
{
    for (int order = 0; order < 2; order++) {
        loom_kernel *k = blocked_kernel(order);
        cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
        uint16_t x16[XR * XC];
        float x[XR * XC], s[XR], b[XC], y[XR * XC], ref[XR * XC];
        fill(x, XR * XC, 7);
        fill(s, XR, 8);
        fill(b, XC, 9);
        for (int i = 0; i < XR * XC; i++)
            x16[i] = to_f16(x[i], &x[i]);
        for (int r = 0; r < XR; r++)
            for (int c = 0; c < XC; c++) {
                float v = x[r * XC + c] * s[r] + b[c] + x[r * XC + c];
                ref[r * XC + c] = v < 0 ? 0 : v;
            }
        int grid[3] = {(XR + XBM - 1) / XBM, 1, 1};
        targ args[] = {TA_ARR(x16), TA_ARR(s), TA_ARR(b), TA_ARR(y)};
        T_RUN_OK(k, grid, args, 4);
        expect_close("y", y, ref, XR * XC, 1e-5f);
        expect_fast(k, 0);
        loom_kernel_destroy(k);
    }
}

/* ---------------------------------------------------------------- loop-carried splat starts */

enum { SR = 48, SC = 200, SBM = 16, SBN = 32 };

/* Row sums of x [SR, SC] in steps of SBN columns, the docs' reduction idiom: the running
 * sum starts as a splat of 0 and is carried by the loop. */
static loom_kernel *rowsum_kernel(void)
{
    loom_kernel *k = loom_kernel_create("rowsum", 4);
    loom_val X = loom_arg_tensor(k, "x", LOOM_F16, LOOM_SHAPE2(SR, SC), LOOM_IN);
    loom_val Y = loom_arg_tensor(k, "y", LOOM_F32, LOOM_SHAPE1(SR), LOOM_OUT);
    loom_val r0 = loom_mul(k, loom_program_id(k, 0), I32(k, SBM));
    loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0.0), LOOM_SHAPE1(SBM));
    loom_region_op loop = loom_for_begin(k, I32(k, 0), I32(k, SC), I32(k, SBN), 1, &acc0);
    {
        loom_val c0 = loom_for_iv(k, loop);
        loom_val t = loom_load(k, X, ((loom_val[]){r0, c0}), LOOM_SHAPE2(SBM, SBN), LOOM_NONE, 0.0);
        loom_val s = loom_reduce_sum(k, loom_cast(k, t, LOOM_F32), 1);
        loom_val next = loom_add(k, loom_for_arg(k, loop, 0), s);
        loom_for_end(k, loop, 1, &next);
    }
    loom_store(k, Y, ((loom_val[]){r0}), loom_for_result(k, loop, 0), LOOM_NONE);
    return k;
}

Test(obvious, splat_started_row_sums_in_a_loop)
{
    loom_kernel *k = rowsum_kernel();
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    static uint16_t x16[SR * SC];
    static float x[SR * SC];
    float y[SR], ref[SR];
    fill(x, SR * SC, 10);
    for (int i = 0; i < SR * SC; i++)
        x16[i] = to_f16(x[i], &x[i]);
    for (int r = 0; r < SR; r++) {
        double s = 0;
        for (int c = 0; c < SC; c++)
            s += x[r * SC + c];
        ref[r] = (float)s;
    }
    int grid[3] = {SR / SBM, 1, 1};
    targ args[] = {TA_ARR(x16), TA_ARR(y)};
    T_RUN_OK(k, grid, args, 2);
    expect_close("y", y, ref, SR, 1e-4f);
    expect_fast(k, 0);
    loom_kernel_destroy(k);
}

/* Online softmax over rows of x [SR, SC], one pass of SBN-column blocks: a running max
 * (splat of -inf) and a running sum (splat of 0) carried by the loop, rescaled as the
 * max grows; a second loop writes exp(x - max) / sum. */
static loom_kernel *online_softmax_kernel(void)
{
    loom_kernel *k = loom_kernel_create("online_softmax", 4);
    loom_val X = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(SR, SC), LOOM_IN);
    loom_val Y = loom_arg_tensor(k, "y", LOOM_F32, LOOM_SHAPE2(SR, SC), LOOM_OUT);
    loom_val r0 = loom_mul(k, loom_program_id(k, 0), I32(k, SBM));
    loom_shape row = LOOM_SHAPE1(SBM), tile = LOOM_SHAPE2(SBM, SBN);
    loom_val log2e = loom_const_f(k, LOOM_F32, 1.4426950408889634);
    loom_val init[2] = {loom_splat(k, loom_const_f(k, LOOM_F32, -INFINITY), row),
                        loom_splat(k, loom_const_f(k, LOOM_F32, 0.0), row)};
    loom_region_op loop = loom_for_begin(k, I32(k, 0), I32(k, SC), I32(k, SBN), 2, init);
    {
        loom_val c0 = loom_for_iv(k, loop), m = loom_for_arg(k, loop, 0), l = loom_for_arg(k, loop, 1);
        loom_val x = loom_load(k, X, ((loom_val[]){r0, c0}), tile, LOOM_NONE, -INFINITY);
        loom_val mn = loom_max(k, m, loom_reduce_max(k, x, 1));
        loom_val p = loom_exp2(k, loom_mul(k, loom_sub(k, x, loom_broadcast(k, loom_expand_dims(k, mn, 1), tile)),
                                           loom_splat(k, log2e, tile)));
        loom_val alpha = loom_exp2(k, loom_mul(k, loom_sub(k, m, mn), loom_splat(k, log2e, row)));
        loom_val ln = loom_add(k, loom_mul(k, l, alpha), loom_reduce_sum(k, p, 1));
        loom_for_end(k, loop, 2, ((loom_val[]){mn, ln}));
    }
    loom_val m = loom_for_result(k, loop, 0), l = loom_for_result(k, loop, 1);
    loom_val inv = loom_broadcast(k, loom_expand_dims(k, loom_div(k, loom_splat(k, loom_const_f(k, LOOM_F32, 1.0), row), l), 1), tile);
    loom_val mb = loom_broadcast(k, loom_expand_dims(k, m, 1), tile);
    loom_region_op out = loom_for_begin(k, I32(k, 0), I32(k, SC), I32(k, SBN), 0, NULL);
    {
        loom_val c0 = loom_for_iv(k, out);
        loom_val x = loom_load(k, X, ((loom_val[]){r0, c0}), tile, LOOM_NONE, -INFINITY);
        loom_val p = loom_exp2(k, loom_mul(k, loom_sub(k, x, mb), loom_splat(k, log2e, tile)));
        loom_store(k, Y, ((loom_val[]){r0, c0}), loom_mul(k, p, inv), LOOM_NONE);
        loom_for_end(k, out, 0, NULL);
    }
    return k;
}

Test(obvious, online_softmax_with_splat_starts)
{
    loom_kernel *k = online_softmax_kernel();
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    static float x[SR * SC], y[SR * SC], ref[SR * SC];
    fill(x, SR * SC, 11);
    for (int r = 0; r < SR; r++) {
        double mx = -INFINITY, s = 0;
        for (int c = 0; c < SC; c++)
            mx = fmax(mx, x[r * SC + c] * 3.0);
        for (int c = 0; c < SC; c++)
            s += exp(x[r * SC + c] * 3.0 - mx);
        for (int c = 0; c < SC; c++)
            ref[r * SC + c] = (float)(exp(x[r * SC + c] * 3.0 - mx) / s);
    }
    for (int i = 0; i < SR * SC; i++)
        x[i] *= 3.0f;
    int grid[3] = {SR / SBM, 1, 1};
    targ args[] = {TA_ARR(x), TA_ARR(y)};
    T_RUN_OK(k, grid, args, 2);
    expect_close("y", y, ref, SR * SC, 1e-4f);
    expect_fast(k, 0);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- arithmetic a rewrite makes cheaper */

/* y = (x * 0.125 + x) / l[row]: an f32 mul whose only use is an add (loom rounds both,
 * as the interpreter does, so it does not contract them), and a division by a row's value
 * broadcast along the row (a correctly rounded division an element).  With fma and a
 * reciprocal a row (rewritten), neither is reported. */
static loom_kernel *arith_kernel(bool rewritten, int *mul_line, int *add_line, int *div_line)
{
    loom_kernel *k = loom_kernel_create(rewritten ? "arith_rewritten" : "arith_obvious", 4);
    loom_shape tile = LOOM_SHAPE2(64, 64);
    loom_val X = loom_arg_tensor(k, "x", LOOM_F32, tile, LOOM_IN);
    loom_val L = loom_arg_tensor(k, "l", LOOM_F32, LOOM_SHAPE1(64), LOOM_IN);
    loom_val Y = loom_arg_tensor(k, "y", LOOM_F32, tile, LOOM_OUT);
    loom_val zero = I32(k, 0);
    loom_val x = loom_load(k, X, ((loom_val[]){zero, zero}), tile, LOOM_NONE, 0.0);
    loom_val l = loom_load(k, L, &zero, LOOM_SHAPE1(64), LOOM_NONE, 1.0);
    loom_val c = loom_splat(k, loom_const_f(k, LOOM_F32, 0.125), tile), y;
    if (rewritten) {
        loom_val inv = loom_div(k, loom_splat(k, loom_const_f(k, LOOM_F32, 1.0), LOOM_SHAPE1(64)), l);
        y = loom_mul(k, loom_fma(k, x, c, x), loom_broadcast(k, loom_expand_dims(k, inv, 1), tile));
    } else {
        *mul_line = __LINE__; loom_val s = loom_mul(k, x, c);
        *add_line = __LINE__; loom_val t = loom_add(k, s, x);
        *div_line = __LINE__; y = loom_div(k, t, loom_broadcast(k, loom_expand_dims(k, l, 1), tile));
    }
    loom_store(k, Y, ((loom_val[]){zero, zero}), y, LOOM_NONE);
    return k;
}

typedef struct arith_seen {
    int n, lines[4];
    char text[4][512];
    size_t elements[4];
} arith_seen;

static void on_arith(void *ctx, const loom_cost *c)
{
    arith_seen *a = ctx;
    if (c->kind != LOOM_COST_ARITH || a->n == 4)
        return;
    a->lines[a->n] = c->line, a->elements[a->n] = c->elements;
    snprintf(a->text[a->n++], sizeof a->text[0], "%s", c->text);
}

/* k verified and explained: its arithmetic hints in *a, the whole report returned (free it). */
static char *arith_explained(loom_kernel *k, arith_seen *a)
{
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    char *text = NULL, err[2048];
    *a = (arith_seen){0};
    cr_assert_eq(loom_kernel_explain(k, "sm_90a", on_arith, a, &text, err, sizeof err), LOOM_OK, "%s", err);
    return text;
}

Test(obvious, arithmetic_a_rewrite_makes_cheaper_is_named_with_its_line)
{
    int ml = 0, al = 0, dl = 0;
    loom_kernel *k = arith_kernel(false, &ml, &al, &dl);
    arith_seen a;
    char *text = arith_explained(k, &a), want[256];
    cr_assert_eq(a.n, 2, "%s", text);
    cr_expect_eq(a.lines[0], ml, "%s", text);
    snprintf(want, sizeof want, "the add at %s:%d", __FILE__, al);
    cr_expect(strstr(a.text[0], want) && strstr(a.text[0], "loom_fma") && strstr(a.text[0], "4096 fewer"), "%s",
              a.text[0]);
    cr_expect_eq(a.lines[1], dl, "%s", text);
    cr_expect(strstr(a.text[1], "4096 correctly rounded divisions") && strstr(a.text[1], "once a program"), "%s",
              a.text[1]);
    cr_expect(a.elements[0] == 4096 && a.elements[1] == 4096);
    cr_expect(strstr(text, "0 conversions, 0 other uses of scratch; 2 arithmetic hints"), "%s", text);
    free(text);
    loom_kernel_destroy(k);

    k = arith_kernel(true, NULL, NULL, NULL);
    text = arith_explained(k, &a);
    cr_expect_eq(a.n, 0, "the rewritten form: %s", text);
    cr_expect(!strstr(text, "arithmetic hint"), "%s", text);
    free(text);
    loom_kernel_destroy(k);
}

/* A loop that carries an e4m3 tile: each iteration stores the tile it was handed and
 * hands the next one 0.5 * x_i + 0.5 rounded to e4m3 (the obvious form), or carries the
 * f32 value and rounds it where it is stored (rewritten by hand: the same values, since a
 * cast is the same wherever it runs).  Carried as e4m3, each element would go to its code
 * and back at the cast (loom holds an FP8 value in an f32 register) and to its code again
 * at the store; carried as f32, the store's one cvt a pair is all. */
static loom_kernel *fp8_carry_kernel(bool rewritten)
{
    loom_kernel *k = loom_kernel_create(rewritten ? "fp8_carry_rewritten" : "fp8_carry_obvious", 4);
    loom_shape tile = LOOM_SHAPE2(64, 64);
    loom_val X = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE3(4, 64, 64), LOOM_IN);
    loom_val Y = loom_arg_tensor(k, "y", LOOM_E4M3, LOOM_SHAPE3(5, 64, 64), LOOM_OUT);
    loom_val zero = I32(k, 0), half = loom_splat(k, loom_const_f(k, LOOM_F32, 0.5), tile);
    loom_val z = loom_splat(k, loom_const_f(k, LOOM_F32, 0.0), tile);
    loom_val init = rewritten ? z : loom_cast(k, z, LOOM_E4M3);
    loom_region_op l = loom_for_begin(k, zero, I32(k, 4), I32(k, 1), 1, &init);
    {
        loom_val i = loom_for_iv(k, l), prev = loom_for_arg(k, l, 0);
        loom_store(k, Y, ((loom_val[]){i, zero, zero}), rewritten ? loom_cast(k, prev, LOOM_E4M3) : prev, LOOM_NONE);
        loom_val x = loom_load(k, X, ((loom_val[]){i, zero, zero}), tile, LOOM_NONE, 0.0);
        loom_val y = loom_fma(k, x, half, half);
        loom_val next = rewritten ? y : loom_cast(k, y, LOOM_E4M3);
        loom_for_end(k, l, 1, &next);
    }
    loom_val out = loom_for_result(k, l, 0);
    loom_store(k, Y, ((loom_val[]){I32(k, 4), zero, zero}), rewritten ? loom_cast(k, out, LOOM_E4M3) : out,
               LOOM_NONE);
    return k;
}

/* The obvious form compiles as the rewritten one (codegen/fold.c, carry_sources: the loop
 * carries the f32 its cast rounds): the same FP8 conversions in the PTX, and the same
 * outputs on the interpreter. */
Test(obvious, an_fp8_tile_a_loop_carries_is_carried_as_the_f32_it_rounds)
{
    loom_kernel *k = fp8_carry_kernel(false), *r = fp8_carry_kernel(true);
    char *p0 = NULL, *p1 = NULL, err[2048];
    size_t smem;
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &p0, &smem, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(loom_compile_ptx(r, "sm_90a", &p1, &smem, err, sizeof err), LOOM_OK, "%s", err);
    int enc0 = t_count(p0, "cvt.rn.satfinite.e4m3x2"), dec0 = t_count(p0, "cvt.rn.f16x2.e4m3x2");
    int enc1 = t_count(p1, "cvt.rn.satfinite.e4m3x2"), dec1 = t_count(p1, "cvt.rn.f16x2.e4m3x2");
    cr_expect(enc1 > 0 && dec1 == 0, "the rewritten form: %d codes, %d decodes", enc1, dec1);
    cr_expect(enc0 == enc1 && dec0 == dec1, "obvious: %d codes, %d decodes; rewritten: %d, %d", enc0, dec0, enc1,
              dec1);
    free(p0), free(p1);
    static float x[4 * 64 * 64];
    static uint8_t y0[5 * 64 * 64], y1[5 * 64 * 64];
    uint32_t seed = 7;
    for (int i = 0; i < 4 * 64 * 64; i++) /* values whose sums round: uniform in [-20, 20) */
        x[i] = (float)((seed = seed * 1664525u + 1013904223u) >> 8) / (float)(1 << 24) * 40.0f - 20.0f;
    targ a0[] = {TA_ARR(x), TA_ARR(y0)}, a1[] = {TA_ARR(x), TA_ARR(y1)};
    T_RUN_OK(k, NULL, a0, 2);
    T_RUN_OK(r, NULL, a1, 2);
    cr_expect_eq(memcmp(y0, y1, sizeof y0), 0, "the two forms' e4m3 outputs differ");
    loom_kernel_destroy(k);
    loom_kernel_destroy(r);
}

/* FP8 tiles through one loop, each stored by the next iteration: an e4m3 one made from f32
 * whose init is a cast from f16 (the rewrite casts that init to f32, exactly), an e5m2 one
 * cast from f16 (carried as f16), and with `loaded` a third, e4m3, whose init is a loaded
 * tile: it stays carried as e4m3 (a loaded NaN's sign would not survive a trip through a
 * wider float).  Its outputs y, z (and w). */
static loom_kernel *fp8_carry_many_kernel(bool loaded)
{
    loom_kernel *k = loom_kernel_create(loaded ? "fp8_carry_three" : "fp8_carry_two", 4);
    loom_shape tile = LOOM_SHAPE2(64, 64), outs = LOOM_SHAPE3(5, 64, 64);
    loom_val X = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE3(4, 64, 64), LOOM_IN);
    loom_val H = loom_arg_tensor(k, "h", LOOM_F16, LOOM_SHAPE3(4, 64, 64), LOOM_IN);
    loom_val G = loom_arg_tensor(k, "g", LOOM_F16, tile, LOOM_IN);
    loom_val E = loaded ? loom_arg_tensor(k, "e", LOOM_E4M3, tile, LOOM_IN) : LOOM_NONE;
    loom_val out[3] = {loom_arg_tensor(k, "y", LOOM_E4M3, outs, LOOM_OUT),
                       loom_arg_tensor(k, "z", LOOM_E5M2, outs, LOOM_OUT),
                       loaded ? loom_arg_tensor(k, "w", LOOM_E4M3, outs, LOOM_OUT) : LOOM_NONE};
    int n = loaded ? 3 : 2;
    loom_val zero = I32(k, 0), half = loom_splat(k, loom_const_f(k, LOOM_F32, 0.5), tile);
    loom_val g = loom_load(k, G, ((loom_val[]){zero, zero}), tile, LOOM_NONE, 0.0);
    loom_val init[3] = {loom_cast(k, g, LOOM_E4M3),
                        loom_cast(k, loom_splat(k, loom_const_f(k, LOOM_F16, 0.0), tile), LOOM_E5M2),
                        loaded ? loom_load(k, E, ((loom_val[]){zero, zero}), tile, LOOM_NONE, 0.0) : LOOM_NONE};
    loom_region_op l = loom_for_begin(k, zero, I32(k, 4), I32(k, 1), n, init);
    {
        loom_val i = loom_for_iv(k, l);
        for (int t = 0; t < n; t++)
            loom_store(k, out[t], ((loom_val[]){i, zero, zero}), loom_for_arg(k, l, t), LOOM_NONE);
        loom_val x = loom_load(k, X, ((loom_val[]){i, zero, zero}), tile, LOOM_NONE, 0.0);
        loom_val h = loom_load(k, H, ((loom_val[]){i, zero, zero}), tile, LOOM_NONE, 0.0);
        loom_val p = loom_cast(k, loom_fma(k, x, half, half), LOOM_E4M3);
        loom_val ys[3] = {p, loom_cast(k, h, LOOM_E5M2), p};
        loom_for_end(k, l, n, ys);
    }
    for (int t = 0; t < n; t++)
        loom_store(k, out[t], ((loom_val[]){I32(k, 4), zero, zero}), loom_for_result(k, l, t), LOOM_NONE);
    return k;
}

static int fp8_conversions(loom_kernel *k, bool fold)
{
    char *ptx = NULL, err[2048];
    size_t smem;
    setenv("LOOM_VERIFY_PASSES", "1", 1);
    if (!fold)
        setenv("LOOM_NO_FOLD", "1", 1);
    loom_status st = loom_compile_ptx(k, "sm_90a", &ptx, &smem, err, sizeof err);
    unsetenv("LOOM_NO_FOLD");
    unsetenv("LOOM_VERIFY_PASSES");
    cr_assert_eq(st, LOOM_OK, "%s", err);
    t_ptxas_ok(ptx, "sm_90a", loom_kernel_name(k));
    int n = t_count(ptx, "cvt.rn.satfinite.e4m3x2") + t_count(ptx, "cvt.rn.satfinite.e5m2x2") +
            t_count(ptx, "cvt.rn.f16x2.e4m3x2") + t_count(ptx, "cvt.rn.f16x2.e5m2x2");
    free(ptx);
    return n;
}

/* The rewritten IR verifies after every pass, assembles without spills, and has no
 * code-and-back left: under half the FP8 conversions of the fold pass off (128 against 258
 * when written). */
Test(obvious, fp8_tiles_a_loop_carries_from_f32_and_f16_are_rewritten)
{
    loom_kernel *k = fp8_carry_many_kernel(false);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    int with = fp8_conversions(k, true), without = fp8_conversions(k, false);
    cr_expect(with > 0 && 2 * with < without, "FP8 conversions in the PTX: %d with the rewrite, %d without", with,
              without);
    loom_kernel_destroy(k);
}

/* On the GPU the rewritten loops give the interpreter's bytes: every e4m3 code in E (both
 * NaNs, -0, the largest) through the loop that keeps its loaded init, f32 values past
 * e4m3's range (saturated), f16 NaNs, infinities and subnormals through the e5m2 one. */
Test(obvious_gpu, fp8_tiles_a_loop_carries_give_the_interpreters_bytes)
{
    loom_runtime *rt = t_gpu_or_skip();
    loom_kernel *k = fp8_carry_many_kernel(true);
    static float x[4 * 64 * 64];
    static uint16_t h[4 * 64 * 64], g[64 * 64];
    static uint8_t e[64 * 64], out[2][3][5 * 64 * 64];
    uint32_t seed = 11;
    for (int i = 0; i < 4 * 64 * 64; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / (float)(1 << 24) * 2000.0f - 1000.0f; /* beyond 448: saturates */
        seed = seed * 1664525u + 1013904223u;
        h[i] = (uint16_t)(seed >> 16); /* every f16 pattern: NaNs, infinities, subnormals */
    }
    for (int i = 0; i < 64 * 64; i++) {
        e[i] = (uint8_t)i; /* every e4m3 code, 0x7f and 0xff (NaN) among them */
        seed = seed * 1664525u + 1013904223u;
        g[i] = (uint16_t)(seed >> 16);
    }
    for (int on = 0; on < 2; on++) {
        targ a[] = {TA_ARR(x), TA_ARR(h), TA_ARR(g), TA_ARR(e), TA_ARR(out[on][0]), TA_ARR(out[on][1]),
                    TA_ARR(out[on][2])};
        loom_status st = on ? t_run_on(rt, k, NULL, a, 7) : t_run(k, NULL, a, 7);
        cr_assert_eq(st, LOOM_OK, "%s: %s", on ? "GPU" : "interpreter", t_last_error);
    }
    static const char *const names[3] = {"y (e4m3 from f32, init a cast from f16)", "z (e5m2 from f16)",
                                         "w (e4m3, init a loaded tile)"};
    for (int t = 0; t < 3; t++) {
        int bad = 0, first = -1;
        for (int i = 0; i < 5 * 64 * 64; i++)
            if (out[0][t][i] != out[1][t][i])
                bad++, first = first < 0 ? i : first;
        cr_expect_eq(bad, 0, "%s: %d bytes differ from the interpreter's, the first at %d (0x%02x against 0x%02x)",
                     names[t], bad, first, first < 0 ? 0 : out[1][t][first], first < 0 ? 0 : out[0][t][first]);
    }
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- what still converts */

/* x + x^T: the same loaded tile in two layouts, so one side must move; the report names
 * the add's line and the bytes. */
static loom_kernel *transpose_add_kernel(int *add_line)
{
    loom_kernel *k = loom_kernel_create("transpose_add", 4);
    loom_val X = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(64, 64), LOOM_IN);
    loom_val Y = loom_arg_tensor(k, "y", LOOM_F32, LOOM_SHAPE2(64, 64), LOOM_OUT);
    loom_val zero = I32(k, 0);
    loom_val x = loom_load(k, X, ((loom_val[]){zero, zero}), LOOM_SHAPE2(64, 64), LOOM_NONE, 0.0);
    *add_line = __LINE__; loom_val y = loom_add(k, x, loom_trans(k, x));
    loom_store(k, Y, ((loom_val[]){zero, zero}), y, LOOM_NONE);
    return k;
}

/* A loaded tile sliced and added to another tile: the load takes the layout whose
 * registers hold the slice as the add wants it, so nothing is converted (a blocked load
 * holds its columns' high bits in lanes: the slice took 16 KiB of scratch). */
Test(obvious, a_slice_of_a_loaded_tile_moves_no_data)
{
    loom_kernel *k = loom_kernel_create("slice_add", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(64, 64), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", LOOM_F32, LOOM_SHAPE2(64, 32), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE2(64, 32), LOOM_OUT);
    loom_val z = loom_const_i(k, LOOM_I32, 0), zz[2] = {z, z};
    loom_val a = loom_load(k, x, zz, LOOM_SHAPE2(64, 64), LOOM_NONE, 0);
    loom_val b = loom_load(k, y, zz, LOOM_SHAPE2(64, 32), LOOM_NONE, 0);
    loom_store(k, o, zz, loom_add(k, loom_slice(k, a, 1, 32, 32), b), LOOM_NONE);
    expect_fast(k, 0);
    /* and it computes the same on the interpreter */
    float xs[64][64], ys[64][32], os[64][32];
    for (int i = 0; i < 64 * 64; i++)
        (&xs[0][0])[i] = (float)(i % 97);
    for (int i = 0; i < 64 * 32; i++)
        (&ys[0][0])[i] = (float)(i % 13);
    targ args[] = {TA_ARR(xs), TA_ARR(ys), TA_ARR(os)};
    T_RUN_OK(k, NULL, args, 3);
    for (int r = 0; r < 64; r++)
        for (int c = 0; c < 32; c++)
            cr_expect_eq(os[r][c], xs[r][32 + c] + ys[r][c], "o[%d][%d]", r, c);
    loom_kernel_destroy(k);
}

Test(obvious, a_conversion_that_remains_is_reported_with_its_line_and_bytes)
{
    int line = 0;
    loom_kernel *k = transpose_add_kernel(&line);
    static float x[64 * 64], y[64 * 64], ref[64 * 64];
    fill(x, 64 * 64, 12);
    for (int r = 0; r < 64; r++)
        for (int c = 0; c < 64; c++)
            ref[r * 64 + c] = x[r * 64 + c] + x[c * 64 + r];
    int grid[3] = {1, 1, 1};
    targ args[] = {TA_ARR(x), TA_ARR(y)};
    T_RUN_OK(k, grid, args, 2);
    expect_close("y", y, ref, 64 * 64, 0);
    char *text = NULL;
    costs s = explain(k, &text);
    cr_expect_eq(s.convert, 1, "one conversion:\n%s", text);
    cr_expect_eq(s.first_line, line, "at the add's line %d: %s", line, s.first);
    cr_expect(t_names_line(s.first, __FILE__, line), "the text names the line: %s", s.first);
    cr_expect_eq(s.convert_bytes, 64 * 64 * 4, "the f32 tile's bytes: %zu", s.convert_bytes);
    cr_expect(strstr(s.first, "16384 bytes of scratch") && strstr(s.first, "2 bar.sync") &&
                  strstr(s.first, "once a program") && strstr(s.first, "add: converts"),
              "bytes, barriers and how often: %s", s.first);
    cr_expect_eq(s.barriers, 2);
    cr_expect(strstr(text, "1 conversion,"), "totals:\n%s", text);
    free(text);
    /* the PTX has the conversion's two bar.sync */
    char *ptx = NULL, err[2048];
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect_eq(t_count(ptx, "bar.sync"), 2, "%d bar.sync", t_count(ptx, "bar.sync"));
    free(ptx);
    loom_kernel_destroy(k);
}

/* A conversion inside a loop is paid each iteration: the report says which loop. */
Test(obvious, a_conversion_in_a_loop_names_the_loop)
{
    loom_kernel *k = loom_kernel_create("transpose_loop", 4);
    loom_val X = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(64, 64), LOOM_IN);
    loom_val Y = loom_arg_tensor(k, "y", LOOM_F32, LOOM_SHAPE2(64, 64), LOOM_OUT);
    loom_val zero = I32(k, 0);
    int loop_line = __LINE__; loom_region_op l = loom_for_begin(k, zero, I32(k, 4), I32(k, 1), 0, NULL);
    loom_val x = loom_load(k, X, ((loom_val[]){zero, zero}), LOOM_SHAPE2(64, 64), LOOM_NONE, 0.0);
    int add_line = __LINE__; loom_val y = loom_add(k, x, loom_trans(k, x));
    loom_store(k, Y, ((loom_val[]){zero, zero}), y, LOOM_NONE);
    loom_for_end(k, l, 0, NULL);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    costs s = explain(k, NULL);
    cr_expect_eq(s.convert, 1);
    cr_expect(t_names_line(s.first, __FILE__, add_line), "%s", s.first);
    const char *at = strstr(s.first, "each iteration of the loop at ");
    cr_expect(at && t_names_line(at, __FILE__, loop_line), "the loop's line %d in: %s", loop_line, s.first);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- the refusal lists what uses the memory */

Test(obvious, the_shared_memory_refusal_lists_each_use_with_its_line)
{
    loom_kernel *k = loom_kernel_create("too_big", 4);
    loom_val X = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(64, 64), LOOM_IN);
    loom_val Y = loom_arg_tensor(k, "y", LOOM_F32, LOOM_SHAPE2(64, 64), LOOM_OUT);
    int ring_line = __LINE__; loom_val ring = loom_smem_alloc(k, LOOM_F16, LOOM_SHAPE2(64, 64), 27, LOOM_SWIZZLE_128);
    (void)ring;
    loom_val zero = I32(k, 0);
    loom_val x = loom_load(k, X, ((loom_val[]){zero, zero}), LOOM_SHAPE2(64, 64), LOOM_NONE, 0.0);
    int add_line = __LINE__; loom_val y = loom_add(k, x, loom_trans(k, x));
    loom_store(k, Y, ((loom_val[]){zero, zero}), y, LOOM_NONE);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    char *ptx = NULL, err[8192];
    loom_status st = loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err);
    cr_assert_eq(st, LOOM_ERR_UNSUPPORTED, "%s", err);
    cr_expect(strstr(err, "more than 227 KiB"), "%s", err);
    cr_expect(t_names_line(err, __FILE__, ring_line) && strstr(err, "ring slots: 27 x f16[64x64] = 221184 bytes"),
              "the ring, with its line: %s", err);
    cr_expect(t_names_line(err, __FILE__, add_line) && strstr(err, "16384 bytes of scratch"),
              "the conversion, with its line: %s", err);
    /* explain reports the same uses, and the refusal */
    costs s = {0};
    char *text = NULL;
    st = loom_kernel_explain(k, NULL, on_cost, &s, &text, err, sizeof err);
    cr_expect_eq(st, LOOM_ERR_UNSUPPORTED);
    cr_expect(s.smem == 1 && s.convert == 1, "%d allocations, %d conversions", s.smem, s.convert);
    cr_expect(text && t_names_line(text, __FILE__, ring_line), "%s", text ? text : "(none)");
    free(text);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- LOOM_DUMP_AFTER=layouts, LOOM_EXPLAIN */


static void compile_quiet(void *arg)
{
    char *ptx = NULL, err[2048];
    cr_assert_eq(loom_compile_ptx(arg, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    free(ptx);
}

Test(obvious, dump_after_layouts_prints_each_values_layout)
{
    loom_kernel *k = acc_kernel(64, EPI_BIAS_ROW);
    setenv("LOOM_DUMP_AFTER", "layouts", 1);
    char *out = t_capture_stderr(compile_quiet, k);
    unsetenv("LOOM_DUMP_AFTER");
    cr_expect(strstr(out, "// layouts of bias_row"), "%s", out);
    /* the accumulator, and the bias row in a slice of it, loaded where it is used */
    cr_expect(strstr(out, "(wgmma at ") && strstr(out, "wgmma accumulator [64x128]"), "%s", out);
    cr_expect(strstr(out, "f32[128] (load at ") && strstr(out, "a slice of #"), "%s", out);
    free(out);
    loom_kernel_destroy(k);
}

Test(obvious, loom_explain_prints_at_compile)
{
    int line = 0;
    loom_kernel *k = transpose_add_kernel(&line);
    setenv("LOOM_EXPLAIN", "1", 1);
    char *out = t_capture_stderr(compile_quiet, k);
    unsetenv("LOOM_EXPLAIN");
    cr_expect(strstr(out, "what kernel 'transpose_add' costs (LOOM_EXPLAIN)"), "%s", out);
    cr_expect(t_names_line(out, __FILE__, line) && strstr(out, "16384 bytes of scratch"), "%s", out);
    free(out);
    loom_kernel_destroy(k);
}
