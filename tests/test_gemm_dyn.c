/*
 * test_gemm_dyn.c -- the gemm template with M and batch at run time (templates/gemm.c:
 * the kernel's first two arguments).  On the interpreter: one kernel, built once, launched
 * at many (M, batch) requests up to the built shape in every consumer scheme (cooperative
 * with a TMA store or a register store, one CTA a unit, ping-pong, split, clusters sharing
 * B or A), each output compared with the plain C reference (t_gemm_ref) of the request
 * element by element by the gemm's error model (t_model.h),
 * with buffers of exactly the request's extent and the rows between a batch's products
 * left alone; launches at dims past the built shape refused naming the dim; the grid rule
 * giving the template's grid at the built shape and covering every unit below it; the
 * built M left out of the module (one module serves every maximum); the PTX of each
 * scheme assembling with ptxas.  Then the public API: loom_gemm_run_at at many requests
 * of one prepared gemm, building and compiling nothing, and its refusals.  With a GPU:
 * one prepared gemm at 10 random requests, and the template's schemes at random requests,
 * against the reference.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"
#include "t_model.h"
#include "testutil.h"
#include "tpl.h"

/* ---------------------------------------------------------------- the template's kernel */

/* A gemm kernel built once at its shape (M and batch its maxima). */
typedef struct dyn_gemm {
    const loom_template *t;
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    loom_kernel *k;
    loom_gemm_shape s; /* the built shape: M and batch the maxima */
    int64_t lda, ldb;
    const char *text;  /* "shape | config", for messages */
} dyn_gemm;

/* The index of key `key` among n params (the template's shape or config keys). */
static int param_index(const loom_param *ps, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(ps[i].key, key))
            return i;
    cr_assert_fail("gemm has no key %s", key);
    return -1;
}

static int key_of(const loom_template *t, const char *key) { return param_index(t->shape, t->nshape, key); }
static int cfg_key(const loom_template *t, const char *key) { return param_index(t->config, t->nconfig, key); }

static dyn_gemm dyn_build(const char *shape, const char *config)
{
    dyn_gemm g = {.t = loom_template_find("gemm")};
    cr_assert_not_null(g.t);
    char err[512];
    cr_assert_eq(loom_params_parse(g.t->shape, g.t->nshape, shape, g.sh, err, sizeof err), 0, "%s", err);
    cr_assert_eq(loom_params_parse(g.t->config, g.t->nconfig, config, g.cf, err, sizeof err), 0, "%s", err);
    g.k = g.t->build(g.sh, g.cf, err, sizeof err);
    cr_assert_not_null(g.k, "%s | %s: %s", shape, config, err);
    cr_assert_eq(loom_verify(g.k), LOOM_OK, "%s", loom_kernel_errors(g.k));
    const int64_t *v = g.sh;
    g.s = (loom_gemm_shape){v[key_of(g.t, "M")],
                            v[key_of(g.t, "N")],
                            v[key_of(g.t, "K")],
                            v[key_of(g.t, "batch")],
                            (loom_dtype)v[key_of(g.t, "dtype")],
                            (loom_dtype)v[key_of(g.t, "odtype")],
                            (int)v[key_of(g.t, "ashared")]};
    g.lda = v[key_of(g.t, "lda")] ? v[key_of(g.t, "lda")] : tpl_pad8(g.s.K);
    g.ldb = v[key_of(g.t, "ldb")] ? v[key_of(g.t, "ldb")] : tpl_pad8(g.s.N);
    static char text[8][300];
    static int next;
    g.text = text[next++ & 7];
    snprintf(text[(next - 1) & 7], sizeof text[0], "%s | %s", shape, config);
    return g;
}

/* The grid of a launch at (M, batch): the template's rule at the request's dims. */
static void dyn_grid(const dyn_gemm *g, int64_t M, int64_t batch, int grid[3])
{
    cr_assert_not_null(g->t->grid_rule, "the gemm template has no grid rule");
    loom_grid_rule r;
    g->t->grid_rule(g->sh, g->cf, &r);
    int64_t sh[LOOM_MAX_PARAMS];
    memcpy(sh, g->sh, sizeof sh);
    sh[key_of(g->t, "M")] = M;
    sh[key_of(g->t, "batch")] = batch;
    cr_assert_eq(loom_grid_rule_eval(&r, sh, grid), 0, "%s: the grid at M=%lld batch=%lld", g->text, (long long)M,
                 (long long)batch);
}

/* One request's host data at the built layout: a product of A (when batched) and of C
 * every M_max rows, the request's first M rows of each. */
typedef struct dyn_req {
    int64_t M, batch;
    int64_t na, nb, nc; /* elements of A, B, C the request reaches (its buffers' extents) */
    void *a, *b, *c;
    double *ref;        /* [batch, M, N] */
    double *mag;        /* [batch, M, N]: sum_k |a b| */
} dyn_req;

static bool a_batched(const loom_gemm_shape *s) { return s->batch > 1 && !s->a_shared; }

static dyn_req dyn_req_make(const loom_gemm_shape *s, int64_t lda, int64_t ldb, int64_t M, int64_t batch, uint64_t seed)
{
    dyn_req r = {.M = M, .batch = batch};
    bool bat = s->batch > 1;
    int64_t arows = a_batched(s) ? (batch - 1) * s->M + M : M;
    r.na = (arows - 1) * lda + s->K;
    r.nb = bat ? (batch - 1) * s->K * ldb + (s->K - 1) * ldb + s->N : (s->K - 1) * ldb + s->N;
    r.nc = (bat ? (batch - 1) * s->M + M : M) * s->N;
    size_t e = loom_dtype_size(s->dtype), oe = loom_dtype_size(s->odtype);
    r.a = malloc((size_t)r.na * e), r.b = malloc((size_t)r.nb * e), r.c = malloc((size_t)r.nc * oe);
    cr_assert(r.a && r.b && r.c);
    /* every element, the padding of rows and the rows between products too: the kernel
     * must read none of those */
    tpl_fill(r.a, s->dtype, r.na, -1, 1, &seed);
    tpl_fill(r.b, s->dtype, r.nb, -1, 1, &seed);
    memset(r.c, 0xff, (size_t)r.nc * oe); /* NaN (or -1) until written */
    /* the reference from the request's rows, contiguous */
    int64_t nap = a_batched(s) ? batch : 1;
    double *da = malloc((size_t)(nap * M * s->K) * sizeof *da), *db = malloc((size_t)(batch * s->K * s->N) * sizeof *db);
    r.ref = malloc((size_t)(batch * M * s->N) * sizeof *r.ref);
    r.mag = malloc((size_t)(batch * M * s->N) * sizeof *r.mag);
    cr_assert(da && db && r.ref && r.mag);
    for (int64_t q = 0; q < nap; q++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t k = 0; k < s->K; k++)
                da[(q * M + m) * s->K + k] = tpl_get(r.a, s->dtype, (q * s->M + m) * lda + k);
    for (int64_t q = 0; q < batch; q++)
        for (int64_t k = 0; k < s->K; k++)
            for (int64_t n = 0; n < s->N; n++)
                db[(q * s->K + k) * s->N + n] = tpl_get(r.b, s->dtype, (q * s->K + k) * ldb + n);
    loom_gemm_shape rs = *s;
    rs.M = M, rs.batch = batch;
    t_gemm_ref(&rs, da, db, r.ref, r.mag);
    free(da), free(db);
    return r;
}

static void dyn_req_free(dyn_req *r) { free(r->a), free(r->b), free(r->c), free(r->ref), free(r->mag); }

/* r's output (C at the built layout) against its reference: every element of the request
 * within its bound by the gemm's error model (t_model.h: gamma_K sum |a b| and one ulp of
 * the output; NaN fails), and the rows between products (past M in each but the last)
 * not written. */
static void dyn_req_check(const loom_gemm_shape *s, const dyn_req *r, const char *what)
{
    size_t oe = loom_dtype_size(s->odtype);
    int64_t touched = 0;
    t_verdict v = T_VERDICT_INIT;
    for (int64_t q = 0; q < r->batch; q++)
        for (int64_t m = 0; m < s->M; m++) {
            int64_t row = q * s->M + m;
            if (row * s->N >= r->nc)
                break;
            for (int64_t n = 0; n < s->N; n++) {
                int64_t i = row * s->N + n;
                if (m >= r->M) { /* between products: still poisoned */
                    const unsigned char *p = (const unsigned char *)r->c + (size_t)i * oe;
                    for (size_t x = 0; x < oe; x++)
                        touched += p[x] != 0xff;
                    continue;
                }
                int64_t ri = (q * r->M + m) * s->N + n;
                double w, b;
                t_gemm_expected(s->odtype, s->K, r->ref[ri], r->mag[ri], &w, &b);
                t_verdict_add(&v, ri, tpl_get(r->c, s->odtype, i), w, b);
            }
        }
    long long fb = v.first / (r->M * s->N), fm = v.first / s->N % r->M, fn = v.first % s->N;
    cr_expect_eq(v.bad, 0,
                 "%s at M=%lld batch=%lld: %lld past their bound (worst |err|/bound %.3g), first at b=%lld m=%lld "
                 "n=%lld: %.9g, want %.9g +- %.3g",
                 what, (long long)r->M, (long long)r->batch, (long long)v.bad, v.worst, fb, fm, fn, v.got, v.ref,
                 v.bound);
    cr_expect_eq(touched, 0, "%s at M=%lld batch=%lld: %lld bytes between the products written", what,
                 (long long)r->M, (long long)r->batch, (long long)touched);
}

/* Launch g's kernel at each (M, batch) of reqs on the interpreter, with buffers of exactly
 * the request's extent, and check each output; nothing is built meanwhile. */
static void dyn_run_requests(const dyn_gemm *g, const int64_t (*reqs)[2], int n, uint64_t seed)
{
    loom_stats before, after;
    loom_stats_get(&before);
    size_t e = loom_dtype_size(g->s.dtype), oe = loom_dtype_size(g->s.odtype);
    for (int i = 0; i < n; i++) {
        int64_t M = reqs[i][0], batch = reqs[i][1];
        dyn_req r = dyn_req_make(&g->s, g->lda, g->ldb, M, batch, seed + (uint64_t)i);
        int grid[3];
        dyn_grid(g, M, batch, grid);
        targ args[] = {TA_I32((int32_t)M), TA_I32((int32_t)batch), TA_BUF(r.a, (size_t)r.na * e),
                       TA_BUF(r.b, (size_t)r.nb * e), TA_BUF(r.c, (size_t)r.nc * oe)};
        loom_status st = t_run(g->k, grid, args, 5);
        cr_assert_eq(st, LOOM_OK, "%s at M=%lld batch=%lld: %s: %s", g->text, (long long)M, (long long)batch,
                     loom_status_name(st), t_last_error);
        dyn_req_check(&g->s, &r, g->text);
        dyn_req_free(&r);
    }
    loom_stats_get(&after);
    cr_expect_eq(after.kernels_built, before.kernels_built, "%s: %llu kernels built while serving the requests",
                 g->text, (unsigned long long)(after.kernels_built - before.kernels_built));
}

#define NREQ(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* A batch whose products each have their own A, at M and batch from 1 to the maxima (M
 * across tile edges: 63, 64, 65 rows with BM=64). */
static const char *const batched_shape = "M=130,N=72,K=36,batch=3,dtype=f16,odtype=f32,ashared=0";
static const int64_t batched_reqs[][2] = {{130, 3}, {1, 1}, {64, 2}, {65, 3}, {77, 1}, {129, 2}, {63, 3}};

/* A batch sharing one A (the IKBO weights case), batch odd and even (share=1 pairs). */
static const char *const shared_shape = "M=77,N=64,K=40,batch=5,dtype=bf16";
static const int64_t shared_reqs[][2] = {{77, 5}, {1, 1}, {33, 2}, {64, 3}, {65, 4}, {77, 1}};

/* No batch: M alone. */
static const char *const plain_shape = "M=200,N=72,K=40";
static const int64_t plain_reqs[][2] = {{200, 1}, {1, 1}, {63, 1}, {64, 1}, {65, 1}, {128, 1}, {150, 1}, {199, 1}};

static void dyn_case(const char *shape, const char *config, const int64_t (*reqs)[2], int n, uint64_t seed)
{
    dyn_gemm g = dyn_build(shape, config);
    dyn_run_requests(&g, reqs, n, seed);
    loom_kernel_destroy(g.k);
}

Test(gemm_dyn, cooperative_tma_store_and_register_store)
{
    /* TMA loads, wgmma, the staged TMA store; the register store; one CTA a unit */
    static const char *const configs[] = {"BM=64,BN=64,cwarps=4,stages=2,ctas=3,tmastore=1",
                                          "BM=128,BN=64,cwarps=8,stages=3,ctas=2,tmastore=0",
                                          "BM=64,BN=64,cwarps=4,stages=2,ctas=0,tmastore=0"};
    for (int c = 0; c < 3; c++) {
        dyn_case(batched_shape, configs[c], batched_reqs, NREQ(batched_reqs), 100 + 10 * (uint64_t)c);
        dyn_case(plain_shape, configs[c], plain_reqs, NREQ(plain_reqs), 200 + 10 * (uint64_t)c);
    }
    dyn_case(shared_shape, "BM=64,BN=64,cwarps=4,stages=2,ctas=4", shared_reqs, NREQ(shared_reqs), 300);
}

/* The grouped order at every run-time count of unit rows: groups of 4 and 2 rows (full
 * ones, and a last one of 1 to 4 rows, its quotient by the tail's reciprocal), and groups
 * of 256 (the built shape too large for the reciprocal: a division). */
Test(gemm_dyn, grouped_order_with_full_and_last_groups)
{
    static const char *const configs[] = {"BM=64,BN=64,cwarps=4,stages=2,ctas=3,group=4",
                                          "BM=64,BN=64,cwarps=4,stages=2,ctas=0,group=2,tmastore=0",
                                          "BM=64,BN=64,cwarps=4,stages=2,ctas=2,group=256"};
    for (int c = 0; c < 3; c++) {
        dyn_case(plain_shape, configs[c], plain_reqs, NREQ(plain_reqs), 700 + 10 * (uint64_t)c);
        dyn_case(batched_shape, configs[c], batched_reqs, NREQ(batched_reqs), 750 + 10 * (uint64_t)c);
    }
}

/* Tiles of two widths (BN2): the BN-column tiles' loop, then the BN2-column ones', over
 * the launch's unit rows (W = unit rows * wide at run time): a request of one row, one
 * tile row, a ragged last tile row, several programs that wrap, a program a tile, the
 * register store; cooperative and split (its groups' parts, and from the registers). */
Test(gemm_dyn, two_tile_widths)
{
    static const char *const shape = "M=300,N=520,K=40";
    static const int64_t reqs[][2] = {{300, 1}, {1, 1}, {64, 1}, {128, 1}, {129, 1}, {250, 1}, {299, 1}};
    static const char *const configs[] = {
        "BM=128,BN=192,cwarps=8,stages=2,ctas=3,BN2=128,wide=2",
        "BM=64,BN=192,stages=2,ctas=0,BN2=64,wide=1,tmastore=0",
        "BM=128,BN=256,cwarps=8,stages=2,ctas=5,group=2,BN2=64,wide=1",
        "BM=128,BN=256,cwarps=8,consumers=2,stages=2,ctas=5,BN2=128,wide=1",
        "BM=128,BN=192,cwarps=8,consumers=2,stages=2,ctas=3,BN2=64,wide=2,tmastore=0",
    };
    for (int c = 0; c < 5; c++)
        dyn_case(shape, configs[c], reqs, NREQ(reqs), 900 + 10 * (uint64_t)c);
}

Test(gemm_dyn, pingpong)
{
    /* two replicas take a program's units alternately: the counts (odd, even, none) change
     * with every request */
    dyn_case(batched_shape, "cwarps=8,consumers=1,BM=64,BN=64,stages=2,ctas=3,tmastore=1", batched_reqs,
             NREQ(batched_reqs), 400);
    dyn_case(plain_shape, "BM=128,cwarps=8,consumers=1,BN=64,ctas=2,tmastore=0", plain_reqs, NREQ(plain_reqs), 410);
}

Test(gemm_dyn, split)
{
    dyn_case(batched_shape, "BM=128,cwarps=8,consumers=2,BN=64,tmastore=1,ctas=2,stages=2", batched_reqs,
             NREQ(batched_reqs), 500);
    dyn_case(plain_shape, "BM=128,cwarps=8,consumers=2,BN=64,tmastore=0,ctas=0,stages=3", plain_reqs,
             NREQ(plain_reqs), 510);
    /* 256 columns of f16: each group's [64, 256] in four column parts through its own two
     * staging slots (columns past N = 72 clipped by the TMA store) */
    dyn_case(plain_shape, "BM=128,cwarps=8,consumers=2,BN=256,tmastore=1,ctas=2,stages=2", plain_reqs,
             NREQ(plain_reqs), 520);
}

/* The transposed product: C^T = B^T A^T, each group 64 columns of C over BM rows (any
 * multiple of 8), stored transposed through the staging tile; rows and columns past the
 * request's M and N at its edges. */
Test(gemm_dyn, transposed)
{
    dyn_case(batched_shape, "BM=56,BN=128,cwarps=8,consumers=2,trans=1,ctas=2,stages=2", batched_reqs,
             NREQ(batched_reqs), 560);
    dyn_case(plain_shape, "BM=104,BN=128,cwarps=8,consumers=2,trans=1,ctas=0,stages=3", plain_reqs,
             NREQ(plain_reqs), 570);
    dyn_case(shared_shape, "BM=80,BN=128,cwarps=8,consumers=2,trans=1,ctas=3,stages=2,group=2", shared_reqs,
             NREQ(shared_reqs), 580);
    /* a cluster's pair of products, their one A tile multicast in row halves (odd batches:
     * the pair's second product past the request's) */
    dyn_case(shared_shape, "BM=80,BN=128,cwarps=8,consumers=2,trans=1,cluster=2,share=1,ctas=4,stages=2", shared_reqs,
             NREQ(shared_reqs), 590);
}

/* The split groups store in parts through staging slots of their own, not by handing
 * one staging tile over: the transposed product's [224, 64] a group in seven 32-row parts
 * (a TMA store each), an untransposed [64, 256] of f16 in four 64-column parts; where
 * neither applies (BN=128 untransposed), the hand-over's one store a tile (its 256-byte
 * rows as two 128-byte column chunks). */
Test(gemm_dyn, split_groups_store_in_parts)
{
    static const struct {
        const char *shape, *config;
        int stores;
    } cases[] = {
        {"M=433,N=256,K=872,batch=1024", "BM=224,BN=128,cwarps=8,consumers=2,trans=1,cluster=2,share=1", 7},
        {"M=4096,N=4096,K=4096", "BM=128,BN=256,cwarps=8,consumers=2", 4},
        {"M=4096,N=4096,K=4096", "BM=128,BN=128,cwarps=8,consumers=2", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dyn_gemm g = dyn_build(cases[i].shape, cases[i].config);
        char *ptx = NULL, err[2048] = "";
        cr_assert_eq(loom_compile_ptx(g.k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s: %s", g.text, err);
        int n = t_count(ptx, "cp.async.bulk.tensor.2d.global.shared::cta") +
                t_count(ptx, "cp.async.bulk.tensor.3d.global.shared::cta");
        cr_expect_eq(n, cases[i].stores, "%s: %d TMA stores", g.text, n);
        free(ptx);
        loom_kernel_destroy(g.k);
    }
}

/* What trans=1 refuses, with the reason. */
Test(gemm_dyn, transposed_refusals)
{
    const loom_template *t = loom_template_find("gemm");
    static const char *const bad[][3] = {
        {"M=433,N=256,K=872", "BM=224,BN=256,cwarps=8,consumers=2,trans=1", "BN=128"},
        {"M=433,N=256,K=872", "BM=224,BN=128,cwarps=8,consumers=0,trans=1", "consumers=2"},
        {"M=433,N=256,K=872", "BM=220,BN=128,cwarps=8,consumers=2,trans=1", "multiple of 8"},
        {"M=433,N=256,K=872", "BM=224,BN=128,cwarps=8,consumers=2,trans=1,tmastore=0", "tmastore=1"},
        {"M=433,N=256,K=872,batch=8", "BM=224,BN=128,cwarps=8,consumers=2,trans=1,cluster=2", "share=1 only"},
        {"M=433,N=256,K=872,batch=8", "BM=232,BN=128,cwarps=8,consumers=2,trans=1,cluster=2,share=1", "multiple of 16"},
        {"M=433,N=256,K=872,btrans=1", "BM=224,BN=128,cwarps=8,consumers=2,trans=1", "btrans=0"},
        {"M=433,N=256,K=872", "BM=224,BN=128,cwarps=8,consumers=2,trans=2", "0 or 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
        char why[256] = "";
        t_params(t->shape, t->nshape, bad[i][0], sh);
        t_params(t->config, t->nconfig, bad[i][1], cf);
        cr_expect(!t->valid(sh, cf, why, sizeof why), "%s accepted", bad[i][1]);
        cr_expect(strstr(why, bad[i][2]), "%s: %s", bad[i][1], why);
    }
}

Test(gemm_dyn, clusters_sharing_b_or_a)
{
    /* pairs of tiles stacked along M (rank 1's rows past M at most requests); pairs of
     * consecutive products sharing A (the last pair's second product past an odd batch) */
    dyn_case(plain_shape, "BM=64,BN=128,cluster=2,ctas=4,stages=3", plain_reqs, NREQ(plain_reqs), 600);
    dyn_case(batched_shape, "BM=64,BN=128,cluster=2,ctas=0,stages=2,tmastore=0", batched_reqs, NREQ(batched_reqs),
             610);
    dyn_case(shared_shape, "BM=64,BN=64,cluster=2,share=1,ctas=4,stages=3", shared_reqs, NREQ(shared_reqs), 620);
    dyn_case(shared_shape, "cwarps=8,consumers=1,BM=64,BN=64,cluster=2,share=1,ctas=2,tmastore=0", shared_reqs,
             NREQ(shared_reqs), 630);
}

/* Dims past the built shape, or below 1, are refused naming the dim; a buffer short of the
 * request's extent is refused naming the buffer, and one of exactly it runs. */
Test(gemm_dyn, launches_past_the_built_dims_are_refused)
{
    dyn_gemm g = dyn_build(batched_shape, "BM=64,BN=64,cwarps=4,stages=2,ctas=3");
    size_t e = 2, oe = 4;
    dyn_req r = dyn_req_make(&g.s, g.lda, g.ldb, 130, 3, 7);
    int grid[3];
    dyn_grid(&g, 130, 3, grid);
    targ over_m[] = {TA_I32(131), TA_I32(3), TA_BUF(r.a, (size_t)r.na * e), TA_BUF(r.b, (size_t)r.nb * e),
                     TA_BUF(r.c, (size_t)r.nc * oe)};
    cr_expect_eq(t_run(g.k, grid, over_m, 5), LOOM_ERR_INVALID);
    cr_expect(strstr(t_last_error, "'M'") && strstr(t_last_error, "1 to 130"), "%s", t_last_error);
    targ over_b[] = {TA_I32(130), TA_I32(4), TA_BUF(r.a, (size_t)r.na * e), TA_BUF(r.b, (size_t)r.nb * e),
                     TA_BUF(r.c, (size_t)r.nc * oe)};
    cr_expect_eq(t_run(g.k, grid, over_b, 5), LOOM_ERR_INVALID);
    cr_expect(strstr(t_last_error, "'batch'") && strstr(t_last_error, "1 to 3"), "%s", t_last_error);
    targ zero[] = {TA_I32(0), TA_I32(1), TA_BUF(r.a, (size_t)r.na * e), TA_BUF(r.b, (size_t)r.nb * e),
                   TA_BUF(r.c, (size_t)r.nc * oe)};
    cr_expect_eq(t_run(g.k, grid, zero, 5), LOOM_ERR_INVALID);
    cr_expect(strstr(t_last_error, "'M'"), "%s", t_last_error);
    dyn_req_free(&r);
    /* at M=65, batch=2: C needs (130 + 65) rows of 72 f32; one element less is refused */
    r = dyn_req_make(&g.s, g.lda, g.ldb, 65, 2, 8);
    dyn_grid(&g, 65, 2, grid);
    cr_assert_eq(r.nc, (130 + 65) * 72);
    targ shortc[] = {TA_I32(65), TA_I32(2), TA_BUF(r.a, (size_t)r.na * e), TA_BUF(r.b, (size_t)r.nb * e),
                     TA_BUF(r.c, (size_t)(r.nc - 1) * oe)};
    cr_expect_eq(t_run(g.k, grid, shortc, 5), LOOM_ERR_INVALID);
    cr_expect(strstr(t_last_error, "'C'"), "%s", t_last_error);
    targ fits[] = {TA_I32(65), TA_I32(2), TA_BUF(r.a, (size_t)r.na * e), TA_BUF(r.b, (size_t)r.nb * e),
                   TA_BUF(r.c, (size_t)r.nc * oe)};
    cr_expect_eq(t_run(g.k, grid, fits, 5), LOOM_OK, "%s", t_last_error);
    dyn_req_check(&g.s, &r, g.text);
    dyn_req_free(&r);
    loom_kernel_destroy(g.k);
}

/* The kernel's arguments: M and batch first, then A, B, C. */
Test(gemm_dyn, the_kernel_takes_m_and_batch_first)
{
    dyn_gemm g = dyn_build(batched_shape, "BM=64,BN=64,cwarps=4,stages=2,ctas=3");
    static const char *const names[] = {"M", "batch", "A", "B", "C"};
    cr_assert_eq(loom_kernel_num_args(g.k), 5);
    for (int i = 0; i < 5; i++) {
        loom_arg_info ai;
        cr_assert(loom_kernel_arg_info(g.k, i, &ai));
        cr_expect_str_eq(ai.name, names[i]);
        cr_expect_eq(ai.is_dim, i < 2, "argument %d", i);
    }
    loom_arg_info c;
    cr_assert(loom_kernel_arg_info(g.k, 4, &c));
    cr_expect_eq(c.dim_of[0], 1, "C's dim 0 is batch");
    cr_expect_eq(c.dim_of[1], 0, "C's dim 1 is M");
    cr_expect_eq(c.strides[0], 130 * 72, "C's products are M_max rows apart");
    cr_expect_eq(c.min_bytes, (size_t)3 * 130 * 72 * 4);
    loom_kernel_destroy(g.k);
    for (int i = 0; i < g.t->nshape; i++)
        cr_expect_eq(g.t->shape[i].runtime, !strcmp(g.t->shape[i].key, "M") || !strcmp(g.t->shape[i].key, "batch"),
                     "shape key %s", g.t->shape[i].key);
}

/* The rule gives the template's grid at the built shape (what loom_template_check, the
 * tuner and loomc use), at most ctas, and below the built dims a program (a cluster) for
 * every unit of the request where the programs are not persistent. */
Test(gemm_dyn, the_grid_rule_gives_the_grid_and_covers_every_unit)
{
    static const char *const shapes[] = {"M=200,N=72,K=40", "M=4096,N=4096,K=64", "M=130,N=72,K=36,batch=3,ashared=0",
                                         "M=77,N=64,K=40,batch=5", "M=433,N=256,K=872,batch=1024"};
    static const char *const configs[] = {"", "BM=64,BN=64,ctas=0", "BM=64,BN=128,cluster=2,ctas=4",
                                          "BM=64,BN=128,cluster=2,ctas=0", "BM=64,BN=64,cluster=2,share=1,ctas=0",
                                          "BM=128,cwarps=8,consumers=1,BN=128,ctas=132",
                                          "BM=224,BN=128,cwarps=8,consumers=2,trans=1,cluster=2,share=1",
                                          "BM=128,BN=192,cwarps=8,BN2=128,wide=2,ctas=0"};
    const loom_template *t = loom_template_find("gemm");
    int checked = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (size_t c = 0; c < sizeof configs / sizeof *configs; c++) {
            int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
            char err[300];
            cr_assert_eq(loom_params_parse(t->shape, t->nshape, shapes[s], sh, err, sizeof err), 0, "%s", err);
            cr_assert_eq(loom_params_parse(t->config, t->nconfig, configs[c], cf, err, sizeof err), 0, "%s", err);
            if (!t->valid(sh, cf, err, sizeof err))
                continue; /* share=1 without a shared batch, say */
            checked++;
            int g[3], r[3];
            loom_grid_rule rule;
            t->grid(sh, cf, g);
            t->grid_rule(sh, cf, &rule);
            cr_assert_eq(loom_grid_rule_eval(&rule, sh, r), 0);
            cr_expect(g[0] == r[0] && g[1] == r[1] && g[2] == r[2], "%s | %s: grid %d,%d,%d, rule %d,%d,%d", shapes[s],
                      configs[c], g[0], g[1], g[2], r[0], r[1], r[2]);
            int64_t M = sh[key_of(t, "M")], nb = sh[key_of(t, "batch")], N = sh[key_of(t, "N")];
            int64_t ctas = cf[5], cluster = cf[9], share = cf[10], bm = cf[0], bn = cf[1];
            for (int64_t m = 1; m <= M; m += M / 7 + 1)
                for (int64_t b = 1; b <= nb; b += nb / 3 + 1) {
                    int64_t sq[LOOM_MAX_PARAMS];
                    memcpy(sq, sh, sizeof sq);
                    sq[key_of(t, "M")] = m, sq[key_of(t, "batch")] = b;
                    cr_assert_eq(loom_grid_rule_eval(&rule, sq, r), 0);
                    int64_t um = bm * (share ? 1 : cluster);
                    int64_t bn2 = cf[cfg_key(t, "BN2")], wide = cf[cfg_key(t, "wide")];
                    int64_t cols = bn2 ? wide + (N - wide * bn + bn2 - 1) / bn2 : (N + bn - 1) / bn;
                    int64_t units = (m + um - 1) / um * cols * (share ? (b + 1) / 2 : b);
                    if (ctas)
                        cr_expect(r[0] >= 1 && r[0] <= ctas, "%s | %s at M=%lld batch=%lld: %d programs", shapes[s],
                                  configs[c], (long long)m, (long long)b, r[0]);
                    else
                        cr_expect(r[0] >= units * cluster, "%s | %s at M=%lld batch=%lld: %d programs for %lld units",
                                  shapes[s], configs[c], (long long)m, (long long)b, r[0], (long long)units);
                    if (nb == 1)
                        cr_expect_eq(r[0], ctas && ctas < units * cluster ? ctas : units * cluster,
                                     "%s | %s at M=%lld: without a batch the grid follows M exactly", shapes[s],
                                     configs[c], (long long)m);
                }
        }
    cr_expect_gt(checked, 20);
}

/* M is not in the module of an unbatched persistent kernel: two kernels built for
 * different maxima print alike (one module, compiled once, serves both). */
Test(gemm_dyn, the_built_m_is_not_part_of_the_module)
{
    dyn_gemm a = dyn_build("M=200,N=72,K=40", "BM=64,BN=64,cwarps=4,stages=2,ctas=3");
    dyn_gemm b = dyn_build("M=8192,N=72,K=40", "BM=64,BN=64,cwarps=4,stages=2,ctas=3");
    cr_expect_str_eq(loom_print(a.k), loom_print(b.k));
    cr_expect(strstr(loom_print(a.k), "%M: i32 dim"), "%s", loom_print(a.k));
    loom_kernel_destroy(a.k);
    loom_kernel_destroy(b.k);
}

/* Every scheme's PTX with M and batch at run time assembles with ptxas without spills
 * (skipped checks where there is no ptxas): the producer keeps its 40 registers. */
Test(gemm_dyn, the_ptx_of_every_scheme_assembles)
{
    static const char *const cases[][2] = {
        {"M=4096,N=4096,K=4096", "BM=128,BN=256,cwarps=8,tmastore=0"},
        {"M=4096,N=4096,K=4096", "BM=128,BN=256,cwarps=8,tmastore=1,stages=3"},
        {"M=433,N=256,K=872,batch=64,dtype=bf16,odtype=f32,ashared=0", "BN=128,stages=3"},
        {"M=4096,N=4096,K=4096,dtype=bf16,odtype=bf16", "BM=128,cwarps=8,consumers=1,BN=128,tmastore=1"},
        {"M=433,N=256,K=872,batch=1024", "BM=128,BN=256,cwarps=8,consumers=2,tmastore=1"},
        {"M=433,N=256,K=872,batch=1024", "BM=64,BN=256,cluster=2,share=1,ctas=132"},
        {"M=4096,N=4096,K=4096", "BM=128,BN=256,cwarps=8,consumers=2,cluster=2,ctas=132"},
        {"M=512,N=512,K=512", "BM=64,BN=64,ctas=0,tmastore=0"},
        {"M=433,N=256,K=1184,batch=1024", "BM=224,BN=128,cwarps=8,consumers=2,trans=1"},
        {"M=433,N=72,K=866,batch=1024,dtype=bf16,odtype=bf16", "BM=224,BN=128,cwarps=8,consumers=2,trans=1,group=8"},
        {"M=433,N=256,K=872,batch=1024", "BM=224,BN=128,cwarps=8,consumers=2,trans=1,cluster=2,share=1,group=8"},
        {"M=4096,N=4096,K=4096", "BM=128,BN=192,cwarps=8,consumers=2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dyn_gemm g = dyn_build(cases[i][0], cases[i][1]);
        char *ptx = NULL, err[2048] = "";
        cr_assert_eq(loom_compile_ptx(g.k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s: %s", g.text, err);
        cr_expect(strstr(ptx, ".param .u32 gemm_param_0") || strstr(ptx, ".param .b32 gemm_param_0"),
                  "%s: M is the first parameter", g.text);
        t_ptxas_ok(ptx, "sm_90a", g.text);
        free(ptx);
        loom_kernel_destroy(g.k);
    }
}

/* ---------------------------------------------------------------- the public API */

static loom_runtime *interp(void)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt && loom_runtime_status(rt) == LOOM_OK);
    return rt;
}

/* Run one request through p on rt (buffers of exactly its extent) and check it. */
static void api_request(loom_runtime *rt, loom_gemm *p, const loom_gemm_shape *s, int64_t M, int64_t batch,
                        uint64_t seed, bool at_max_with_run)
{
    /* the API's operands are contiguous: rows of K and N elements */
    dyn_req r = dyn_req_make(s, s->K, s->N, M, batch, seed);
    size_t e = loom_dtype_size(s->dtype), oe = loom_dtype_size(s->odtype);
    loom_buffer *a = loom_buffer_create(rt, (size_t)r.na * e), *b = loom_buffer_create(rt, (size_t)r.nb * e);
    loom_buffer *c = loom_buffer_create(rt, (size_t)r.nc * oe);
    cr_assert(a && b && c, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_upload(a, r.a, (size_t)r.na * e), LOOM_OK);
    cr_assert_eq(loom_buffer_upload(b, r.b, (size_t)r.nb * e), LOOM_OK);
    cr_assert_eq(loom_buffer_upload(c, r.c, (size_t)r.nc * oe), LOOM_OK); /* poisoned */
    loom_status st = at_max_with_run ? loom_gemm_run(p, a, b, c) : loom_gemm_run_at(p, M, batch, a, b, c);
    cr_assert_eq(st, LOOM_OK, "M=%lld batch=%lld: %s", (long long)M, (long long)batch, loom_runtime_error(rt));
    cr_assert_eq(loom_runtime_sync(rt, 60000), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_download(c, r.c, (size_t)r.nc * oe), LOOM_OK);
    dyn_req_check(s, &r, loom_gemm_describe(p));
    loom_buffer_destroy(a), loom_buffer_destroy(b), loom_buffer_destroy(c);
    dyn_req_free(&r);
}

/* One prepared gemm (K and N not multiples of 8: both operands copied to padded rows by
 * each run, at the request's rows) serves requests at many M and batch, building and
 * compiling nothing; loom_gemm_run runs at the prepared maxima. */
Test(gemm_dyn, api_one_prepared_gemm_serves_every_request)
{
    static const loom_gemm_shape shapes[] = {
        {130, 13, 29, 3, LOOM_F16, LOOM_F32, 0}, /* A per product, both operands padded */
        {77, 24, 20, 4, LOOM_BF16, LOOM_BF16, 1}, /* A shared, K padded */
        {150, 40, 64, 1, LOOM_F16, LOOM_F16, 0},  /* no batch, nothing padded */
    };
    static const int64_t rq[3][6][2] = {
        {{130, 3}, {1, 1}, {64, 2}, {65, 3}, {100, 1}, {129, 2}},
        {{77, 4}, {1, 1}, {33, 2}, {64, 3}, {65, 4}, {77, 1}},
        {{150, 1}, {1, 1}, {63, 1}, {64, 1}, {65, 1}, {149, 1}},
    };
    loom_runtime *rt = interp();
    for (int s = 0; s < 3; s++) {
        loom_gemm *p = NULL;
        cr_assert_eq(loom_gemm_prepare(rt, &shapes[s], "BM=64,BN=64,cwarps=4,stages=2,ctas=3", &p), LOOM_OK, "%s",
                     loom_runtime_error(rt));
        loom_stats before, after;
        loom_stats_get(&before);
        for (int i = 0; i < 6; i++)
            api_request(rt, p, &shapes[s], rq[s][i][0], rq[s][i][1], 40 + (uint64_t)(10 * s + i), false);
        api_request(rt, p, &shapes[s], shapes[s].M, shapes[s].batch, 90 + (uint64_t)s, true);
        loom_stats_get(&after);
        cr_expect_eq(after.kernels_built, before.kernels_built, "%s: %llu kernels built by the requests",
                     loom_gemm_describe(p), (unsigned long long)(after.kernels_built - before.kernels_built));
        cr_expect_eq(after.compiles, before.compiles, "%s: %llu compiles by the requests", loom_gemm_describe(p),
                     (unsigned long long)(after.compiles - before.compiles));
        loom_gemm_destroy(p);
    }
    loom_runtime_destroy(rt);
}

/* A request past the maxima names the dim; buffers short of the request's extent name the
 * buffer; what the request needs is all it needs. */
Test(gemm_dyn, api_requests_past_the_maxima_are_refused)
{
    loom_runtime *rt = interp();
    loom_gemm_shape s = {130, 13, 29, 3, LOOM_F16, LOOM_F16, 0};
    loom_gemm *p = NULL;
    cr_assert_eq(loom_gemm_prepare(rt, &s, "BM=64,BN=64", &p), LOOM_OK, "%s", loom_runtime_error(rt));
    /* at M=10, batch=2: A (130 + 10) rows of 29, B 2 x 29 x 13, C (130 + 10) rows of 13 */
    size_t na = (130 + 10) * 29 * 2, nb = 2 * 29 * 13 * 2, nc = (130 + 10) * 13 * 2;
    loom_buffer *a = loom_buffer_create(rt, na), *b = loom_buffer_create(rt, nb), *c = loom_buffer_create(rt, nc);
    loom_buffer *c_short = loom_buffer_create(rt, nc - 1), *a_short = loom_buffer_create(rt, na - 2);
    cr_assert(a && b && c && c_short && a_short);
    cr_assert_eq(loom_buffer_fill(a, 0), LOOM_OK);
    cr_assert_eq(loom_buffer_fill(b, 0), LOOM_OK);
    cr_expect_eq(loom_gemm_run_at(p, 131, 1, a, b, c), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "loom_gemm_run_at: M is 131; this gemm was prepared for M from 1 to 130"),
              "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_gemm_run_at(p, 0, 1, a, b, c), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "M is 0"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_gemm_run_at(p, 10, 4, a, b, c), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "batch is 4; this gemm was prepared for batch from 1 to 3"), "%s",
              loom_runtime_error(rt));
    cr_expect_eq(loom_gemm_run_at(p, 10, -1, a, b, c), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "batch is -1"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_gemm_run_at(p, 10, 2, a, b, c_short), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "loom_gemm_run_at: C has 3639 bytes; the shape needs 1820 f16 elements"),
              "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_gemm_run_at(p, 10, 2, a_short, b, c), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "A has 8118 bytes"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_gemm_run_at(p, 10, 2, a, NULL, c), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "loom_gemm_run_at: B is NULL"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_gemm_run_at(p, 10, 2, a, b, (loom_buffer *)a), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "C is also A"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_gemm_run_at(NULL, 10, 2, a, b, c), LOOM_ERR_INVALID);
    /* the request's extent is enough; the prepared shape's is not required */
    cr_expect_eq(loom_gemm_run_at(p, 10, 2, a, b, c), LOOM_OK, "%s", loom_runtime_error(rt));
    unsigned char host[(130 + 10) * 13 * 2];
    cr_assert_eq(loom_buffer_download(c, host, nc), LOOM_OK);
    size_t nonzero = 0;
    for (size_t i = 0; i < nc; i++)
        nonzero += host[i] != 0;
    cr_expect_eq(nonzero, 0, "zeros in, zeros out: %zu bytes not zero", nonzero);
    /* and loom_gemm_run wants the prepared shape's */
    cr_expect_eq(loom_gemm_run(p, a, b, c), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "loom_gemm_run: A has"), "%s", loom_runtime_error(rt));
    loom_buffer_destroy(a), loom_buffer_destroy(b), loom_buffer_destroy(c);
    loom_buffer_destroy(c_short), loom_buffer_destroy(a_short);
    loom_gemm_destroy(p);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- on the GPU */

static int64_t rnd_in(uint64_t *s, int64_t lo, int64_t hi) { return lo + (int64_t)(tpl_rand(s) % (uint64_t)(hi - lo + 1)); }

/* One prepared gemm (its config: the defaults, tmastore=0 where N is odd; K odd: A
 * copied) at 10 random requests, each against the reference; nothing built or compiled
 * by the requests. */
Test(gemm_dyn_gpu, one_prepared_gemm_at_ten_random_requests, .timeout = 300)
{
    loom_runtime *rt = t_gpu_or_skip();
    static const loom_gemm_shape shapes[] = {
        {1000, 264, 200, 4, LOOM_F16, LOOM_F16, 0},  /* A per product */
        {433, 256, 872, 16, LOOM_BF16, LOOM_BF16, 1}, /* the IKBO weights' case: A shared */
        {2049, 13, 77, 1, LOOM_F16, LOOM_F32, 0},    /* no batch; N and K odd */
    };
    uint64_t seed = 33;
    for (int s = 0; s < 3; s++) {
        loom_gemm *p = NULL;
        cr_assert_eq(loom_gemm_prepare(rt, &shapes[s], "", &p), LOOM_OK, "%s", loom_runtime_error(rt));
        loom_stats before, after;
        loom_stats_get(&before);
        for (int i = 0; i < 10; i++) {
            int64_t M = i == 0 ? shapes[s].M : rnd_in(&seed, 1, shapes[s].M);
            int64_t batch = i == 0 ? shapes[s].batch : rnd_in(&seed, 1, shapes[s].batch);
            api_request(rt, p, &shapes[s], M, batch, 1000 + (uint64_t)(10 * s + i), false);
        }
        loom_stats_get(&after);
        cr_expect_eq(after.kernels_built, before.kernels_built, "%s: kernels built by the requests",
                     loom_gemm_describe(p));
        cr_expect_eq(after.compiles, before.compiles, "%s: compiles by the requests", loom_gemm_describe(p));
        loom_gemm_destroy(p);
    }
    loom_runtime_destroy(rt);
}

/* The template's kernel in each scheme on the GPU at random requests (its buffers of the
 * request's extent), against the reference. */
Test(gemm_dyn_gpu, every_scheme_at_random_requests, .timeout = 300)
{
    loom_runtime *rt = t_gpu_or_skip();
    static const char *const cases[][2] = {
        {"M=600,N=520,K=392,batch=3,ashared=0", ""},
        {"M=600,N=520,K=392,batch=3,ashared=0", "BM=128,BN=256,cwarps=8,tmastore=0"},
        {"M=1000,N=256,K=136", "BM=64,cwarps=4,BN=64,stages=2,ctas=0,tmastore=0"},
        {"M=1000,N=256,K=136,batch=5", "BM=128,cwarps=8,consumers=1,BN=128,ctas=3,tmastore=1"},
        {"M=600,N=520,K=392,odtype=f32", "BM=128,BN=256,cwarps=8,consumers=2,tmastore=1,ctas=3,stages=2"},
        {"M=433,N=256,K=872,batch=7", "BM=64,BN=128,cluster=2,share=1,ctas=6"},
        {"M=1000,N=256,K=136,batch=3", "BM=128,BN=256,cwarps=8,consumers=2,cluster=2,ctas=4"},
        {"M=433,N=200,K=872,batch=9", "BM=224,BN=128,cwarps=8,consumers=2,trans=1"},
        {"M=433,N=256,K=872,batch=9", "BM=224,BN=128,cwarps=8,consumers=2,trans=1,cluster=2,share=1,ctas=132"},
        {"M=300,N=72,K=136,batch=4,ashared=0,odtype=f32", "BM=152,BN=128,cwarps=8,consumers=2,trans=1,stages=3"},
        {"M=600,N=520,K=392,batch=3,ashared=0", "BM=128,BN=192,cwarps=8,ctas=5"},
        {"M=1000,N=400,K=136,odtype=f32", "BM=128,BN=192,cwarps=8,consumers=2,ctas=3,stages=3"},
    };
    uint64_t seed = 77;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dyn_gemm g = dyn_build(cases[i][0], cases[i][1]);
        size_t e = loom_dtype_size(g.s.dtype), oe = loom_dtype_size(g.s.odtype);
        for (int q = 0; q < 4; q++) {
            int64_t M = q == 0 ? g.s.M : rnd_in(&seed, 1, g.s.M), batch = q == 0 ? 1 : rnd_in(&seed, 1, g.s.batch);
            dyn_req r = dyn_req_make(&g.s, g.lda, g.ldb, M, batch, 2000 + (uint64_t)(10 * i + q));
            loom_buffer *a = loom_buffer_create(rt, (size_t)r.na * e), *b = loom_buffer_create(rt, (size_t)r.nb * e);
            loom_buffer *c = loom_buffer_create(rt, (size_t)r.nc * oe);
            cr_assert(a && b && c, "%s", loom_runtime_error(rt));
            cr_assert_eq(loom_buffer_upload(a, r.a, (size_t)r.na * e), LOOM_OK);
            cr_assert_eq(loom_buffer_upload(b, r.b, (size_t)r.nb * e), LOOM_OK);
            cr_assert_eq(loom_buffer_upload(c, r.c, (size_t)r.nc * oe), LOOM_OK);
            int grid[3];
            dyn_grid(&g, M, batch, grid);
            loom_arg args[] = {LOOM_ARG_I32((int32_t)M), LOOM_ARG_I32((int32_t)batch), LOOM_ARG_BUF(a), LOOM_ARG_BUF(b),
                               LOOM_ARG_BUF(c)};
            cr_assert_eq(loom_launch(rt, g.k, grid, args, 5), LOOM_OK, "%s: %s", g.text, loom_runtime_error(rt));
            cr_assert_eq(loom_runtime_sync(rt, 60000), LOOM_OK, "%s: %s", g.text, loom_runtime_error(rt));
            cr_assert_eq(loom_buffer_download(c, r.c, (size_t)r.nc * oe), LOOM_OK);
            dyn_req_check(&g.s, &r, g.text);
            loom_buffer_destroy(a), loom_buffer_destroy(b), loom_buffer_destroy(c);
            dyn_req_free(&r);
        }
        loom_kernel_destroy(g.k);
    }
    loom_runtime_destroy(rt);
}
