/*
 * test_harden_input.c -- the cases of issue 41 (items 4 and 8), one test a row of
 * docs/errors.md: sizes whose products would overflow are refused naming the range
 * instead of wrapping; a value handle of another kernel, an unknown target, a kernel
 * named `_`, loomc's repeated options and keys, a seed that is not a number, and an
 * output that aliases an input are refused with a message; environment variables that
 * cannot be read fall back to their default with one warning; and one finished kernel is
 * verified and launched from several threads at once.  Everything runs on the interpreter.
 */
#include "loom_ikbo.h"
#include "loomc_test.h"
#include "tune.h"
#include "testutil.h"
#include "../util/util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The kernel fails verification and its errors say `want`. */
#define KERNEL_REFUSED(k, want)                                                                            \
    do {                                                                                                   \
        cr_assert_eq(loom_verify(k), LOOM_ERR_VERIFY, "%s", loom_kernel_errors(k));                        \
        cr_assert(strstr(loom_kernel_errors(k), want), "errors '%s' do not say '%s'", loom_kernel_errors(k), \
                  want);                                                                                   \
    } while (0)

/* ---------------------------------------------------------------- stderr */

/* What the calls between cap_begin and cap_end write on stderr. */
typedef struct cap {
    int saved;
    FILE *f;
} cap;

static void cap_begin(cap *c)
{
    fflush(stderr);
    c->f = tmpfile();
    cr_assert(c->f);
    c->saved = dup(2);
    dup2(fileno(c->f), 2);
}

static const char *cap_end(cap *c)
{
    static char text[8192];
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    rewind(c->f);
    size_t n = fread(text, 1, sizeof text - 1, c->f);
    text[n] = 0;
    fclose(c->f);
    return text;
}

/* ---------------------------------------------------------------- sizes */

Test(harden_input, fa_prepare_dims_past_2_31_name_the_range)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_ikbo_fa *p = NULL;
    const loom_ikbo_fa_shape ok = {4, 2, 64, 1, 64, 1, LOOM_F16, 0, LOOM_F16};
    loom_ikbo_fa_shape s = ok;
    s.U = s.S = INT64_C(1) << 32; /* U * S * H * D overflowed int (UBSan) and wrapped */
    REFUSED(rt, loom_ikbo_fa_prepare(rt, &s, NULL, &p), LOOM_ERR_INVALID,
            "U is 4294967296; each of B, U, S, H and n_seed must be between 1 and 2^31 - 1");
    s = ok;
    s.B = s.n_seed = INT64_C(1) << 40; /* was "buffers for 0 units" */
    REFUSED(rt, loom_ikbo_fa_prepare(rt, &s, NULL, &p), LOOM_ERR_INVALID, "B is 1099511627776; each of");
    s = ok;
    s.H = INT64_C(1) << 62; /* was "it must be positive" */
    REFUSED(rt, loom_ikbo_fa_prepare(rt, &s, NULL, &p), LOOM_ERR_INVALID, "H is 4611686018427387904; each of");
    s = ok;
    s.B = s.n_seed = INT64_C(1) << 30; /* each in range, their products far past 2^31 */
    REFUSED(rt, loom_ikbo_fa_prepare(rt, &s, NULL, &p), LOOM_ERR_INVALID,
            "the tensors are too large for 32-bit element offsets");
    cr_assert_null(p);
    loom_runtime_destroy(rt);
}

Test(harden_input, gemm_prepare_batch_times_m_past_2_63)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_gemm *p = NULL;
    loom_gemm_shape s = {.M = INT64_C(1) << 62, .N = 8, .K = 8, .batch = INT64_C(1) << 62, .dtype = LOOM_F16,
                         .odtype = LOOM_F16};
    REFUSED(rt, loom_gemm_prepare(rt, &s, NULL, &p), LOOM_ERR_INVALID, "has 2^31 rows or columns or more");
    cr_assert_null(p);
    loom_runtime_destroy(rt);
}

Test(harden_input, lce_prepare_dims_past_2_31)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_ikbo_lce *p = NULL;
    uint16_t w[64] = {0};
    loom_ikbo_lce_shape s = {INT64_C(1) << 62, 2, 16, 16, 8, 8, LOOM_F16, LOOM_F16};
    REFUSED(rt, loom_ikbo_lce_prepare(rt, &s, 2, w, w, NULL, &p), LOOM_ERR_INVALID,
            "each of B, U, M, N, Ku and Kc must be below 2^31");
    cr_assert_null(p);
    loom_runtime_destroy(rt);
}

Test(harden_input, tensor_dim_or_stride_past_2_40_names_the_range)
{
    loom_kernel *k = loom_kernel_create("big", 1);
    loom_arg_tensor(k, "t", LOOM_F32, LOOM_SHAPE2(4, (INT64_C(1) << 40) + 1), LOOM_IN);
    KERNEL_REFUSED(k, "argument 't': dimension 1 is 1099511627777; it must be at most 2^40");
    loom_kernel_destroy(k);
    k = loom_kernel_create("big", 1);
    loom_arg_tensor_strided(k, "t", LOOM_F32, LOOM_SHAPE2(4, 4), ((const int64_t[]){(INT64_C(1) << 40) + 1, 1}),
                            LOOM_IN);
    KERNEL_REFUSED(k, "argument 't': stride 0 is 1099511627777; it must be at most 2^40");
    loom_kernel_destroy(k);
    k = loom_kernel_create("big", 1);
    loom_arg_tensor(k, "t", LOOM_F32, LOOM_SHAPE2(4, -3), LOOM_IN);
    KERNEL_REFUSED(k, "argument 't': dimension 1 is -3, neither a size nor LOOM_DIM of a run-time dim");
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- handles, names, targets */

Test(harden_input, value_of_another_kernel_is_refused)
{
    loom_kernel *a = loom_kernel_create("a", 1), *b = loom_kernel_create("b", 1);
    loom_val ta = loom_arg_tensor(a, "x", LOOM_F32, LOOM_SHAPE1(4), LOOM_INOUT);
    loom_val tb = loom_arg_tensor(b, "x", LOOM_F32, LOOM_SHAPE1(4), LOOM_IN);
    loom_val ca = loom_const_i(a, LOOM_I32, 1);
    loom_val cb = loom_const_i(b, LOOM_I32, 1);
    cr_assert(ta && tb && ca && cb);
    /* the same index in both kernels: only the handle's kernel tells them apart */
    cr_assert_neq(ca, cb);
    cr_assert_eq(loom_val_shape(b, ta).rank, 0, "a handle of another kernel has no shape here");
    cr_assert_eq(loom_val_shape(a, ta).rank, 1);
    int L = __LINE__; loom_add(b, cb, ca);
    KERNEL_REFUSED(b, "operand 1 (handle 0x");
    cr_assert(strstr(loom_kernel_errors(b), "is not a value of kernel 'b': it is a handle of another kernel"), "%s",
              loom_kernel_errors(b));
    cr_assert(strstr(loom_kernel_errors(b), t_loc(__FILE__, L)), "%s", loom_kernel_errors(b));
    loom_kernel_destroy(b);
    b = loom_kernel_create("b", 1);
    loom_arg_tensor(b, "x", LOOM_F32, LOOM_SHAPE1(4), LOOM_IN);
    loom_val z = loom_const_i(b, LOOM_I32, 0);
    loom_load(b, ta, &z, LOOM_SHAPE1(4), LOOM_NONE, 0);
    KERNEL_REFUSED(b, "operand 0 is not a global tensor argument of this kernel: it is a handle of another kernel");
    /* kernel a is untouched and still good */
    loom_val za = loom_const_i(a, LOOM_I32, 0);
    loom_store(a, ta, &za, loom_load(a, ta, &za, LOOM_SHAPE1(4), LOOM_NONE, 0), LOOM_NONE);
    cr_assert_eq(loom_verify(a), LOOM_OK, "%s", loom_kernel_errors(a));
    loom_kernel_destroy(a);
    loom_kernel_destroy(b);
}

Test(harden_input, runtime_target_out_of_range)
{
    loom_runtime *rt = loom_runtime_create((loom_target)99);
    cr_assert(rt);
    cr_assert_eq(loom_runtime_status(rt), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "loom_runtime_create: target 99 is not LOOM_TARGET_AUTO (0), "
                                             "LOOM_TARGET_INTERPRETER (1) or LOOM_TARGET_GPU (2)"),
              "%s", loom_runtime_error(rt));
    cr_assert_null(loom_buffer_create(rt, 16));
    loom_kernel *k = loom_kernel_create("k", 1);
    loom_program_id(k, 0);
    cr_assert_eq(loom_launch(rt, k, (int[3]){1, 1, 1}, NULL, 0), LOOM_ERR_INVALID);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
    rt = loom_runtime_create((loom_target)-1);
    cr_assert_eq(loom_runtime_status(rt), LOOM_ERR_INVALID);
    cr_assert(strstr(loom_runtime_error(rt), "target -1 is not"), "%s", loom_runtime_error(rt));
    loom_runtime_destroy(rt);
}

Test(harden_input, kernel_named_underscore_is_refused)
{
    loom_kernel *k = loom_kernel_create("_", 1);
    loom_program_id(k, 0);
    KERNEL_REFUSED(k, "kernel name '_' is not a PTX identifier");
    loom_kernel_destroy(k);
    /* names ptxas takes: a _ followed by more, letters and digits */
    const char *good[] = {"__", "_a", "_1", "a", "A_b9"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        k = loom_kernel_create(good[i], 1);
        loom_program_id(k, 0);
        cr_assert_eq(loom_verify(k), LOOM_OK, "%s: %s", good[i], loom_kernel_errors(k));
        char *ptx = NULL, err[512] = "";
        cr_assert_eq(loom_compile_ptx(k, "sm_80", &ptx, NULL, err, sizeof err), LOOM_OK, "%s: %s", good[i], err);
        cr_assert(t_ptxas_ok(ptx, "sm_80", good[i]), "ptxas refused kernel '%s'", good[i]);
        free(ptx);
        loom_kernel_destroy(k);
    }
}

/* ---------------------------------------------------------------- the IKBO LCE's output */

Test(harden_input, lce_run_out_aliasing_an_input)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_ikbo_lce_shape s = {4, 2, 16, 16, 8, 8, LOOM_F16, LOOM_F16};
    loom_ikbo_lce_config cfg = {64, 64, 2, 4, 5, 0, 0, 1};
    void *wu = calloc(16 * 8, 2), *wc = calloc(16 * 8, 2);
    loom_ikbo_lce *p = NULL;
    cr_assert_eq(loom_ikbo_lce_prepare(rt, &s, LOOM_IKBO_K_ALIGNED, wu, wc, &cfg, &p), LOOM_OK, "%s",
                 loom_runtime_error(rt));
    /* every buffer big enough for any role, so only the aliasing is wrong */
    loom_buffer *eu = loom_buffer_create(rt, 4 * 16 * 16 * 2), *ec = loom_buffer_create(rt, 4 * 16 * 16 * 2);
    loom_buffer *map = loom_buffer_create(rt, 4 * 16 * 16 * 2), *out = loom_buffer_create(rt, 4 * 16 * 16 * 2);
    int32_t m[4] = {0, 1, 1, 0};
    cr_assert_eq(loom_buffer_upload(map, m, sizeof m), LOOM_OK);
    REFUSED(rt, loom_ikbo_lce_run(p, eu, ec, map, eu), LOOM_ERR_INVALID,
            "loom_ikbo_lce_run: out is also e_user; the output needs a buffer of its own");
    REFUSED(rt, loom_ikbo_lce_run(p, eu, ec, map, ec), LOOM_ERR_INVALID, "out is also e_cand");
    REFUSED(rt, loom_ikbo_lce_run(p, eu, ec, map, map), LOOM_ERR_INVALID, "out is also cand_to_user");
    cr_assert_eq(loom_ikbo_lce_run(p, eu, ec, map, out), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_buffer *b[] = {eu, ec, map, out};
    for (int i = 0; i < 4; i++)
        loom_buffer_destroy(b[i]);
    loom_ikbo_lce_destroy(p);
    free(wu);
    free(wc);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- loomc */

#define loomc t_loomc

Test(harden_input, loomc_repeated_options_seed_and_max)
{
    loomc_opts o;
    char err[512];
    struct {
        const char *line, *msg;
    } bad[] = {
        {"ir gemm --config BM=64 --config BM=128", "--config is given twice (each option once)"},
        {"emit gemm -o a.ptx -o b.ptx", "-o is given twice (each option once)"},
        {"tune gemm --max 4 --max 8", "--max is given twice (each option once)"},
        {"run gemm --interpret --interpret", "--interpret is given twice (each option once)"},
        {"ir gemm --shape M=8 --shape M=16", "--shape is given twice (only tune and aot take several)"},
        {"run gemm --seed abc", "--seed needs an integer from 0 to 2^64 - 1, not 'abc'"},
        {"run gemm --seed 12x", "--seed needs an integer from 0 to 2^64 - 1, not '12x'"},
        {"run gemm --seed -1", "--seed needs an integer from 0 to 2^64 - 1, not '-1'"},
        {"run gemm --seed 99999999999999999999999", "--seed needs an integer from 0 to 2^64 - 1"},
        {"tune gemm --max 1073741824", "--max needs a positive integer below 2^30, not '1073741824'"},
        {"tune gemm --threads 1073741824", "--threads needs a positive integer below 2^30, not '1073741824'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(loomc(bad[i].line, &o, err, sizeof err), -1, "%s", bad[i].line);
        cr_assert(strstr(err, bad[i].msg), "%s: '%s' does not say '%s'", bad[i].line, err, bad[i].msg);
    }
    cr_assert_eq(loomc("tune gemm --shape M=8 --shape M=16 --max 1073741823", &o, err, sizeof err), 0, "%s", err);
    cr_assert_eq(o.nshapes, 2);
    cr_assert_eq(o.max_configs, 1073741823);
    cr_assert_eq(loomc("aot gemm --shape M=8 --shape M=16", &o, err, sizeof err), 0, "%s", err);
    cr_assert_eq(loomc("run gemm --seed 0x10", &o, err, sizeof err), 0, "%s", err);
    cr_assert_eq(o.seed, 16);
}

Test(harden_input, loomc_repeated_shape_or_config_key)
{
    const loom_template *t = loom_template_find("gemm");
    cr_assert(t);
    int64_t shape[LOOM_MAX_PARAMS], config[LOOM_MAX_PARAMS];
    char err[1024] = "";
    cr_assert_eq(loomc_template_params(t, "M=64,N=32,M=128", NULL, shape, config, err, sizeof err), -1);
    cr_assert(strstr(err, "--shape for gemm: key 'M' is given twice"), "%s", err);
    cr_assert_eq(loomc_template_params(t, NULL, "BM=64,BN=64,BM=128", shape, config, err, sizeof err), -1);
    cr_assert(strstr(err, "--config for gemm: key 'BM' is given twice"), "%s", err);
    /* a key that is a prefix of another is not a repeat */
    cr_assert_eq(loomc_template_params(t, "dtype=f16,odtype=f16,M=64", NULL, shape, config, err, sizeof err), 0,
                 "%s", err);
}

/* ---------------------------------------------------------------- environment */

Test(harden_input, tune_env_garbage_falls_back_with_one_warning)
{
    cap c;
    setenv("LOOM_TUNE_BUDGET_MS", "abc", 1);
    cap_begin(&c);
    double b1 = tune_budget_ms(), b2 = tune_budget_ms();
    const char *text = cap_end(&c);
    cr_assert_eq(b1, TUNE_BUDGET_DEFAULT_MS);
    cr_assert_eq(b2, TUNE_BUDGET_DEFAULT_MS);
    cr_assert(strstr(text, "loom: LOOM_TUNE_BUDGET_MS: 'abc' is not a number in [0, 1e+09]: the default 3000 is used"),
              "%s", text);
    cr_assert_eq(t_count(text, "LOOM_TUNE_BUDGET_MS"), 1, "one warning, not one a read: %s", text);
    setenv("LOOM_TUNE_BUDGET_MS", "250", 1);
    cr_assert_eq(tune_budget_ms(), 250.0);
    setenv("LOOM_TUNE", "abc", 1);
    cap_begin(&c);
    bool on = util_env_switch("LOOM_TUNE", true);
    text = cap_end(&c);
    cr_assert(on, "garbage keeps the default (on)");
    cr_assert(strstr(text, "LOOM_TUNE: 'abc' is not a switch (1/true/yes/on or 0/false/no/off): taken as on"), "%s",
              text);
    const char *offs[] = {"0", "off", "no", "FALSE"};
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        setenv("LOOM_IKBO_AUTO", offs[i], 1);
        cr_assert(!util_env_switch("LOOM_IKBO_AUTO", true), "%s", offs[i]);
    }
    setenv("LOOM_IKBO_AUTO", "-1", 1);
    cr_assert(util_env_switch("LOOM_IKBO_AUTO", true));
    unsetenv("LOOM_IKBO_AUTO");
    cr_assert(util_env_switch("LOOM_IKBO_AUTO", true));
}

/* The interpreter's LOOM_INTERP_RESIDENT and the code generator's LOOM_NO_FOLD: garbage is
 * the default (all programs resident; folding on), with one warning each. */
Test(harden_input, interp_resident_and_no_fold_garbage_warn)
{
    /* programs that add atomically run side by side, LOOM_INTERP_RESIDENT of them at once */
    loom_kernel *k = loom_kernel_create("resident", 1);
    loom_val o = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(4), LOOM_INOUT);
    loom_val pid = loom_program_id(k, 0);
    loom_atomic_add(k, o, &pid, loom_add(k, pid, loom_const_i(k, LOOM_I32, 0)));
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_buffer *b = loom_buffer_create(rt, 16);
    cr_assert_eq(loom_buffer_fill(b, 0), LOOM_OK);
    setenv("LOOM_INTERP_RESIDENT", "abc", 1);
    setenv("LOOM_NO_FOLD", "yes please", 1);
    cap c;
    cap_begin(&c);
    loom_status st = loom_launch(rt, k, (int[3]){4, 1, 1}, &LOOM_ARG_BUF(b), 1);
    char *ptx = NULL;
    loom_status pst = loom_compile_ptx(k, "sm_80", &ptx, NULL, NULL, 0);
    const char *text = cap_end(&c);
    cr_assert_eq(st, LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(pst, LOOM_OK);
    int32_t got[4];
    cr_assert_eq(loom_buffer_download(b, got, sizeof got), LOOM_OK);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(got[i], i);
    cr_assert(strstr(text, "LOOM_INTERP_RESIDENT: 'abc' is not an integer in [0, "), "%s", text);
    cr_assert(strstr(text, "LOOM_NO_FOLD: 'yes please' is not a switch"), "%s", text);
    free(ptx);
    loom_buffer_destroy(b);
    loom_runtime_destroy(rt);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- threads */

typedef struct shared {
    loom_kernel *good, *bad;
    loom_status good_st[8], bad_st[8], launch_st[8];
    const char *errs[8];
    int32_t got[8][4];
} shared;

typedef struct worker {
    shared *s;
    int i;
} worker;

static void *share_worker(void *arg)
{
    worker *w = arg;
    shared *s = w->s;
    s->good_st[w->i] = loom_verify(s->good);
    s->bad_st[w->i] = loom_verify(s->bad);
    s->errs[w->i] = loom_kernel_errors(s->bad);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER); /* a runtime is one thread's */
    loom_buffer *b = loom_buffer_create(rt, 16);
    s->launch_st[w->i] = loom_launch(rt, s->good, (int[3]){4, 1, 1}, &LOOM_ARG_BUF(b), 1);
    loom_buffer_download(b, s->got[w->i], sizeof s->got[w->i]);
    loom_buffer_destroy(b);
    loom_runtime_destroy(rt);
    return NULL;
}

/* One finished kernel verified, asked for its errors and launched from 8 threads at once
 * (helgrind reported the race on verified_gen that this exercises). */
Test(harden_input, one_kernel_shared_by_threads)
{
    shared s = {0};
    s.good = loom_kernel_create("good", 1);
    loom_val o = loom_arg_tensor(s.good, "o", LOOM_I32, LOOM_SHAPE1(4), LOOM_OUT);
    loom_val pid = loom_program_id(s.good, 0);
    loom_store(s.good, o, &pid, loom_splat(s.good, pid, LOOM_SHAPE1(1)), LOOM_NONE);
    s.bad = loom_kernel_create("bad", 1);
    loom_val x = loom_arg_scalar(s.bad, "x", LOOM_F32);
    loom_add(s.bad, x, loom_const_i(s.bad, LOOM_I32, 1)); /* f32 + i32: refused by the verifier */
    pthread_t th[8];
    worker w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (worker){&s, i};
        cr_assert_eq(pthread_create(&th[i], NULL, share_worker, &w[i]), 0);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(s.good_st[i], LOOM_OK);
        cr_assert_eq(s.bad_st[i], LOOM_ERR_VERIFY);
        cr_assert_eq(s.launch_st[i], LOOM_OK);
        cr_assert_eq(s.errs[i], s.errs[0], "every thread gets the one cached text");
        for (int j = 0; j < 4; j++)
            cr_assert_eq(s.got[i][j], j);
    }
    cr_assert_eq(loom_kernel_num_errors(s.bad), 1, "verified once: %s", loom_kernel_errors(s.bad));
    loom_kernel_destroy(s.good);
    loom_kernel_destroy(s.bad);
}
