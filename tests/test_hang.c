/*
 * test_hang.c -- the hang check without a GPU (its GPU half is tests/test_hang_gpu.c).
 *
 * With LOOM_HANG_CHECK unset (or 0) the wait loops are what they always were: a
 * template's PTX is the same text whether the bound is off by the environment or by the
 * caller, and holds no %globaltimer.  With a bound, every mbarrier wait and flag wait
 * reads %globaltimer, carries the bound in ns, a record written with system-scope stores
 * and a trap; the PTX assembles with ptxas for sm_90a.  The host side names a record in
 * the interpreter's words: the same "on barrier %bar.0[0] for phase parity 0 at
 * FILE:LINE" the interpreter's deadlock report prints for the same kernel.  The module
 * key of a hang-check kernel covers the bound and the waits' source lines.
 */
#include "codegen.h"
#include "hang.h"
#include "testutil.h"

#define I32(k, v) loom_const_i(k, LOOM_I32, v)

/* A barrier of two arrivals, a task of two replicas; with `only_first` replica 1 never
 * arrives (the arrive count is wrong by one: every replica then waits forever). */
static loom_kernel *two_arrivals(bool only_first, int *tline, int *wline)
{
    *tline = __LINE__; loom_src task_at = LOOM_HERE;
    *wline = __LINE__; loom_src wait_at = LOOM_HERE;
    return t_two_arrivals(task_at, wait_at, "hang_two", only_first);
}

/* Program 0 waits for flags[1] >= target, which nobody sets. */
static loom_kernel *flag_waiter(int *wline)
{
    loom_kernel *k = loom_kernel_create("hang_flag", 4);
    loom_val flags = loom_arg_tensor(k, "flags", LOOM_I32, LOOM_SHAPE1(2), LOOM_INOUT);
    loom_val target = loom_arg_scalar(k, "target", LOOM_I32);
    *wline = __LINE__; loom_flag_wait(k, flags, (loom_val[]){I32(k, 1)}, target);
    loom_flag_add(k, flags, (loom_val[]){I32(k, 0)}, I32(k, 1));
    return k;
}

static char *ptx_of(loom_kernel *k, int hang_ms)
{
    cg_result r;
    char err[4096];
    cr_assert_eq(cg_compile_opts(k, "sm_90a", &(cg_options){.hang_check_ms = hang_ms}, &r, err, sizeof err), LOOM_OK,
                 "%s", err);
    char *p = r.ptx;
    r.ptx = NULL;
    cg_result_free(&r);
    return p;
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

/* A template at its default shape and config. */
static loom_kernel *template_kernel(const char *name)
{
    const loom_template *t = loom_template_find(name);
    cr_assert(t, "no template %s", name);
    int64_t shape[LOOM_MAX_PARAMS], config[LOOM_MAX_PARAMS];
    for (int i = 0; i < t->nshape; i++)
        shape[i] = t->shape[i].def;
    for (int i = 0; i < t->nconfig; i++)
        config[i] = t->config[i].def;
    char err[512];
    loom_kernel *k = t->build(shape, config, err, sizeof err);
    cr_assert(k, "%s: %s", name, err);
    return k;
}

Test(hang, the_environment_sets_the_bound)
{
    setenv("LOOM_HANG_CHECK", "250", 1);
    cr_assert_eq(cg_hang_check_ms(), 250);
    setenv("LOOM_HANG_CHECK", "0", 1);
    cr_assert_eq(cg_hang_check_ms(), 0);
    unsetenv("LOOM_HANG_CHECK");
    int def = cg_hang_check_ms();
#ifdef NDEBUG
    cr_assert_eq(def, 0, "off by default outside debug builds");
#else
    cr_assert_eq(def, 10000, "on by default in debug builds");
#endif
    setenv("LOOM_HANG_CHECK", "soon", 1);
    cr_assert_eq(cg_hang_check_ms(), def, "not a number: the default");
    setenv("LOOM_HANG_CHECK", "-5", 1);
    cr_assert_eq(cg_hang_check_ms(), def, "negative: the default");
}

/* Off, the loops are the plain ones: the same text however the bound is off. */
Test(hang, off_the_ptx_is_unchanged)
{
    const char *names[] = {"gemm", "ikbo_lce", "ikbo_fa"};
    for (int i = 0; i < 3; i++) {
        loom_kernel *k = template_kernel(names[i]);
        setenv("LOOM_HANG_CHECK", "0", 1);
        char *ptx_env = NULL, err[4096];
        cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx_env, NULL, err, sizeof err), LOOM_OK, "%s", err);
        char *ptx_off = ptx_of(k, 0);
        cr_assert_str_eq(ptx_env, ptx_off, "%s: LOOM_HANG_CHECK=0 and a bound of 0 differ", names[i]);
        cr_assert(strstr(ptx_off, "mbarrier.try_wait.parity"), "%s waits on mbarriers", names[i]);
        cr_assert(!strstr(ptx_off, "%globaltimer") && !strstr(ptx_off, CG_HANG_GLOBAL) && !strstr(ptx_off, "trap;"),
                  "%s: no trace of the check when it is off", names[i]);
#ifdef NDEBUG
        unsetenv("LOOM_HANG_CHECK");
        char *ptx_unset = NULL;
        cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx_unset, NULL, err, sizeof err), LOOM_OK, "%s", err);
        cr_assert_str_eq(ptx_unset, ptx_off, "%s: unset and off differ", names[i]);
        free(ptx_unset);
#endif
        char *ptx_on = ptx_of(k, 250);
        cr_assert_str_neq(ptx_on, ptx_off, "%s: the bound changes the loops", names[i]);
        free(ptx_env);
        free(ptx_off);
        free(ptx_on);
        loom_kernel_destroy(k);
    }
}

/* On, each wait reads the timer, carries the bound (ns) and a record + trap; the
 * environment and the caller's option give the same PTX; ptxas takes it. */
Test(hang, on_every_wait_is_bounded_and_assembles)
{
    int tl, wl, fl;
    loom_kernel *k = two_arrivals(true, &tl, &wl);
    char *ptx = ptx_of(k, 250);
    cr_assert(strstr(ptx, "%globaltimer") && strstr(ptx, "250000000"), "%s", ptx);
    cr_assert(strstr(ptx, ".global .align 8 .b8 " CG_HANG_GLOBAL "[16]"), "the record's address: %s", ptx);
    cr_assert_eq(count(ptx, "atom.relaxed.sys.cas.b32"), 1, "one record write per wait: %s", ptx);
    cr_assert(strstr(ptx, "fence.sc.sys") && strstr(ptx, "trap;"), "%s", ptx);
    setenv("LOOM_HANG_CHECK", "250", 1);
    char *ptx_env = NULL, err[4096];
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx_env, NULL, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_str_eq(ptx_env, ptx, "LOOM_HANG_CHECK=250 is a bound of 250");
    t_ptxas_ok(ptx, "sm_90a", "the hang-check mbarrier wait");
    free(ptx_env);
    free(ptx);
    loom_kernel_destroy(k);

    k = flag_waiter(&fl);
    ptx = ptx_of(k, 250);
    cr_assert(strstr(ptx, "%globaltimer") && strstr(ptx, "ld.acquire.gpu.s32"), "%s", ptx);
    cr_assert_eq(count(ptx, "atom.relaxed.sys.cas.b32"), 1, "%s", ptx);
    t_ptxas_ok(ptx, "sm_90a", "the hang-check flag wait");
    free(ptx);
    loom_kernel_destroy(k);

    const char *names[] = {"gemm", "ikbo_lce", "ikbo_fa"};
    for (int i = 0; i < 3; i++) {
        k = template_kernel(names[i]);
        ptx = ptx_of(k, 10000);
        cr_assert_eq(count(ptx, "atom.relaxed.sys.cas.b32"), count(ptx, "mov.u64 t0, %globaltimer"),
                     "%s: a record write for each bounded loop", names[i]);
        t_ptxas_ok(ptx, "sm_90a", names[i]);
        free(ptx);
        loom_kernel_destroy(k);
    }
}

/* A record of the kernel the interpreter reports as deadlocked reads in the
 * interpreter's words: the same barrier, parity and line. */
Test(hang, the_report_uses_the_interpreters_words)
{
    int tl, wl;
    loom_kernel *k = two_arrivals(true, &tl, &wl);
    int32_t os[2] = {0};
    targ args[] = {TA_ARR(os)};
    cr_assert_eq(t_run(k, NULL, args, 1), LOOM_ERR_RUNTIME, "%s", t_last_error);
    char words[512];
    snprintf(words, sizeof words, "on barrier %%bar.0[0] for phase parity 0 at %s:%d", __FILE__, wl);
    cr_assert(strstr(t_last_error, words), "want '%s' in the interpreter's: %s", words, t_last_error);

    rt_hang_sites *sites = rt_hang_sites_make(k);
    cr_assert(sites && sites->n == 1, "one wait site");
    cr_assert_str_eq(sites->kernel, "hang_two");
    uint32_t rec[CG_HANG_WORDS] = {0};
    rec[CG_HANG_STATE] = CG_HANG_DONE;
    rec[CG_HANG_SITE] = sites->s[0].op;
    rec[CG_HANG_REPLICA] = 1;
    rec[CG_HANG_CTA_X] = 3;
    rec[CG_HANG_THREAD] = 160;
    rec[CG_HANG_B] = 0; /* parity */
    rec[CG_HANG_MS] = 250;
    char msg[1024];
    cr_assert(rt_hang_format(sites, sites->kernel, rec, msg, sizeof msg));
    char want[1024];
    snprintf(want, sizeof want,
             "kernel 'hang_two' hung: program (3,0,0) task at %s:%d (replica 1), thread 160, waited more than "
             "250 ms %s",
             __FILE__, tl, words);
    cr_assert_str_eq(msg, want);
    cr_log_info("%s", msg);
    rec[CG_HANG_STATE] = CG_HANG_WRITING; /* a trap that came before the record was whole */
    cr_assert(!rt_hang_format(sites, sites->kernel, rec, msg, sizeof msg));
    rt_hang_sites_free(sites);
    loom_kernel_destroy(k);

    int fl;
    k = flag_waiter(&fl);
    sites = rt_hang_sites_make(k);
    cr_assert(sites && sites->n == 1);
    memset(rec, 0, sizeof rec);
    rec[CG_HANG_STATE] = CG_HANG_DONE;
    rec[CG_HANG_SITE] = sites->s[0].op;
    rec[CG_HANG_A_LO] = 1; /* the element */
    rec[CG_HANG_B] = 5;    /* the target */
    rec[CG_HANG_C] = 0;    /* the value seen */
    rec[CG_HANG_MS] = 250;
    cr_assert(rt_hang_format(sites, sites->kernel, rec, msg, sizeof msg));
    snprintf(want, sizeof want,
             "kernel 'hang_flag' hung: program (0,0,0) kernel body, thread 0, waited more than 250 ms at %s:%d for "
             "flags[1] >= 5; it is 0",
             __FILE__, fl);
    cr_assert_str_eq(msg, want);
    rt_hang_sites_free(sites);
    loom_kernel_destroy(k);
}

/* The same IR built at other lines, or with another bound, keys another module. */
Test(hang, the_key_covers_the_bound_and_the_lines)
{
    int tl, wl, tl2, wl2;
    loom_kernel *a = two_arrivals(true, &tl, &wl);
    loom_kernel *b = two_arrivals(true, &tl2, &wl2); /* the same lines */
    rt_hang_sites *sa = rt_hang_sites_make(a), *sb = rt_hang_sites_make(b);
    char ka[128], kb[128], kc[128];
    rt_hang_sites_key(sa, 250, ka, sizeof ka);
    rt_hang_sites_key(sb, 250, kb, sizeof kb);
    cr_assert_str_eq(ka, kb, "the same kernel at the same lines");
    rt_hang_sites_key(sa, 300, kc, sizeof kc);
    cr_assert_str_neq(ka, kc, "another bound");
    sb->s[0].line++; /* as if built one line lower */
    rt_hang_sites_key(sb, 250, kb, sizeof kb);
    cr_assert_str_neq(ka, kb, "another line");
    cr_assert(strstr(ka, "hang_check=250ms"), "%s", ka);
    rt_hang_sites_free(sa);
    rt_hang_sites_free(sb);
    loom_kernel_destroy(a);
    loom_kernel_destroy(b);
}

/* loom_runtime_sync: NULL is refused; on the interpreter every launch is done already. */
Test(hang, runtime_sync_null_and_on_the_interpreter)
{
    cr_assert_eq(loom_runtime_sync(NULL, 100), LOOM_ERR_INVALID);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt);
    cr_assert_eq(loom_runtime_sync(rt, 100), LOOM_OK);
    cr_assert_eq(loom_runtime_sync(rt, 0), LOOM_OK);
    cr_assert_str_eq(loom_status_name(LOOM_ERR_TIMEOUT), "timed out");
    loom_runtime_destroy(rt);
}
