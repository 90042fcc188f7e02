/*
 * test_plugin.c -- a user's templates from a plugin (loom_plugin_load, loom_tune.h section 4)
 * and loomc's help.
 *
 * The plugins are built by CMake from tests/plugins/ into test_plugins/ beside this
 * binary, as a user builds one (loom.h only; loom's symbols left to the program that loads
 * them).  Each way a plugin can fail to load must be refused with a message naming the
 * plugin and what is wrong (dlopen's text, the missing symbol, the other version, the
 * template and its field), leaving the registry as it was; the plugin that loads must
 * then work as a built-in does: found, checked on the interpreter, compiled to PTX, tuned
 * and written by loom_aot_write with its operation's hooks.  Criterion runs each test in
 * its own process, so each starts from the built-ins alone.
 */
#include "loomc_test.h"
#include "loom_ikbo.h" /* the IKBO config tables */
#include "testutil.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>


/* loom_plugin_load must fail, leaving the registry as it was; the message in err. */
static void load_fails(const char *path, char *err, size_t n)
{
    int before = loom_template_count(), count = -1;
    err[0] = 0;
    cr_assert_eq(loom_plugin_load(path, &count, err, n), LOOM_ERR_INVALID, "%s loaded", path);
    cr_expect_eq(count, 0);
    cr_expect_eq(loom_template_count(), before, "a refused plugin added templates");
    cr_expect(strstr(err, path), "the message does not name the plugin: %s", err);
}

/* ---------------------------------------------------------------- help */

Test(plugin, help)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert(f);
    cr_assert_eq(loomc_help(f, NULL), 0);
    fclose(f);
    const char *cmds[] = {"list", "show", "ir", "emit", "run", "tune", "aot", "help"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char want[32];
        snprintf(want, sizeof want, "  loomc %s", cmds[i]);
        cr_expect(strstr(text, want), "the page lacks %s:\n%s", cmds[i], text);
        cr_expect(loomc_command_known(cmds[i]), "%s", cmds[i]);
    }
    cr_expect(strstr(text, "--plugin LIB.so"), "%s", text);
    free(text);
    /* a command's page: its synopsis and each of its options, and the common ones */
    f = open_memstream(&text, &len);
    cr_assert_eq(loomc_help(f, "aot"), 0);
    fclose(f);
    const char *opts[] = {"usage: loomc aot NAME", "--shape", "--config", "--tuned", "--stage", "--arch", "--prefix",
                          "-o DIR", "--plugin", "--help"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        cr_expect(strstr(text, opts[i]), "aot's page lacks %s:\n%s", opts[i], text);
    free(text);
    f = open_memstream(&text, &len);
    cr_assert_eq(loomc_help(f, "run"), 0);
    fclose(f);
    cr_expect(strstr(text, "--interpret") && strstr(text, "--seed") && !strstr(text, "--prefix"), "%s", text);
    free(text);
    /* no such command: -1 and nothing written */
    f = open_memstream(&text, &len);
    cr_expect_eq(loomc_help(f, "frobnicate"), -1);
    fclose(f);
    cr_expect_eq(len, 0);
    free(text);
    cr_expect(!loomc_command_known("frobnicate") && !loomc_command_known("--help") && !loomc_command_known(NULL));
}

Test(plugin, args)
{
    loomc_opts o;
    char err[512];
    cr_assert_eq(t_loomc("run gemm --help", &o, err, sizeof err), 0, "%s", err);
    cr_expect(o.help && !strcmp(o.name, "gemm"));
    cr_assert_eq(t_loomc("aot -h", &o, err, sizeof err), 0, "%s", err);
    cr_expect(o.help);
    cr_assert_eq(t_loomc("emit mine --plugin a.so --plugin /x/b.so -o k.ptx", &o, err, sizeof err), 0, "%s", err);
    cr_expect_eq(o.nplugins, 2);
    cr_expect(!strcmp(o.plugins[0], "a.so") && !strcmp(o.plugins[1], "/x/b.so") && !strcmp(o.name, "mine"));
    cr_expect_eq(t_loomc("run mine --plugin", &o, err, sizeof err), -1);
    cr_expect(strstr(err, "--plugin needs a shared object"), "%s", err);
    char many[2048] = "list";
    for (int i = 0; i <= LOOMC_MAX_PLUGINS; i++)
        strcat(many, " --plugin p.so");
    cr_expect_eq(t_loomc(many, &o, err, sizeof err), -1);
    cr_expect(strstr(err, "at most 16 --plugin"), "%s", err);
}

/* loomc itself (beside this binary, as the build makes it): "CMD" run with stdout and
 * stderr into out; returns the exit status. */
static int run_loomc(const char *args, char *out, size_t n)
{
    char exe[PATH_MAX] = "", cmd[PATH_MAX + 1024];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    cr_assert(len > 0);
    exe[len] = 0;
    snprintf(strrchr(exe, '/'), sizeof exe - (size_t)(strrchr(exe, '/') - exe), "/loomc");
    if (access(exe, X_OK) != 0)
        cr_skip_test("%s is missing: loomc is built beside loom_tests", exe);
    snprintf(cmd, sizeof cmd, "%s %s", exe, args);
    int st = t_sh(cmd, out, n);
    cr_assert(st >= 0, "loomc %s did not exit", args);
    return st;
}

Test(plugin, loomc_cli)
{
    static char out[1 << 16];
    /* the page, on stdout, exit status 0: --help, -h, help, help CMD, CMD --help */
    cr_expect_eq(run_loomc("--help", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "commands:") && strstr(out, "  loomc aot NAME"), "%s", out);
    cr_expect_eq(run_loomc("-h", out, sizeof out), 0, "%s", out);
    cr_expect_eq(run_loomc("help", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "options of every command:"), "%s", out);
    cr_expect_eq(run_loomc("help tune", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "usage: loomc tune NAME") && strstr(out, "--report FILE.svg"), "%s", out);
    cr_expect_eq(run_loomc("emit --help", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "usage: loomc emit NAME") && strstr(out, "       loomc emit --all"), "%s", out);
    /* usage errors: status 2 and a message */
    cr_expect_eq(run_loomc("frobnicate", out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "loomc: unknown command 'frobnicate' (loomc --help lists them)"), "%s", out);
    cr_expect_eq(run_loomc("help frobnicate", out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "loomc help: unknown command 'frobnicate'"), "%s", out);
    cr_expect_eq(run_loomc("help aot run", out, sizeof out), 2, "%s", out);
    cr_expect_eq(run_loomc("run tp_scale --plugin /nonexistent/libmine.so --interpret", out, sizeof out), 2, "%s",
                 out);
    cr_expect(strstr(out, "loomc: plugin /nonexistent/libmine.so: cannot load it: "), "%s", out);
    cr_expect_eq(run_loomc("show tp_scale", out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "unknown kernel 'tp_scale'") && strstr(out, "--plugin LIB.so"), "%s", out);
    /* show writes a dtype's default by name, as --shape takes it */
    cr_expect_eq(run_loomc("show gemm", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "\n  dtype           f16  ") && strstr(out, "\n  odtype          f16  ") &&
                  strstr(out, "\n  M               512  "),
              "%s", out);
    /* a plugin's template in loomc's commands */
    char args[PATH_MAX + 200];
    snprintf(args, sizeof args, "run tp_scale --plugin %s --shape N=300 --interpret", t_plugin_path("ok"));
    cr_expect_eq(run_loomc(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "tp_scale: ok on interpreter"), "%s", out);
    char ok[PATH_MAX + 64]; /* plugin() returns one buffer */
    snprintf(ok, sizeof ok, "%s", t_plugin_path("ok"));
    snprintf(args, sizeof args, "list --plugin %s --plugin %s", ok, t_plugin_path("bad"));
    cr_expect_eq(run_loomc(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "ikbo_fa\ntp_scale\ntp_other\n"), "%s", out);
}

/* ---------------------------------------------------------------- loading errors */

Test(plugin, missing_file)
{
    char err[2048];
    load_fails("/nonexistent/libmine.so", err, sizeof err);
    cr_expect(strstr(err, "cannot load it") && strstr(err, "No such file"), "%s", err);
    /* a file that is no shared object: dlopen's reason */
    char path[] = "/tmp/loom_tp_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, "not an ELF file\n", 16), 16);
    close(fd);
    load_fails(path, err, sizeof err);
    cr_expect(strstr(err, "cannot load it: "), "%s", err);
    unlink(path);
    cr_expect_eq(loom_plugin_load(NULL, NULL, err, sizeof err), LOOM_ERR_INVALID);
    cr_expect(strstr(err, "no path"), "%s", err);
}

Test(plugin, missing_entry_point)
{
    char err[2048];
    const char *p = t_plugin_path("noentry");
    load_fails(p, err, sizeof err);
    cr_expect(strstr(err, "no entry point 'loom_plugin_init'") && strstr(err, "undefined symbol: loom_plugin_init") &&
                  strstr(err, "LOOM_PLUGIN_INIT"),
              "%s", err);
}

Test(plugin, not_a_plugin)
{
    /* a shared object that is no loom plugin (no loom_plugin_version): libm */
    char err[2048];
    load_fails("libm.so.6", err, sizeof err);
    cr_expect(strstr(err, "no symbol 'loom_plugin_version'") && strstr(err, "is it a loom plugin?"), "%s", err);
}

Test(plugin, version_mismatch)
{
    /* refused before its entry point (which aborts) is called */
    char err[2048];
    const char *p = t_plugin_path("oldversion");
    load_fails(p, err, sizeof err);
    char want[200];
    snprintf(want, sizeof want, "was built against loom 0.0.1; this is loom %s", LOOM_VERSION);
    cr_expect(strstr(err, want) && strstr(err, "rebuild it"), "%s", err);
}

Test(plugin, missing_field)
{
    char err[2048];
    setenv("LOOM_TP_FAULT", "nofield", 1);
    load_fails(t_plugin_path("bad"), err, sizeof err);
    cr_expect(strstr(err, "template 'tp_nofield': field 'reference' is NULL (required)"), "%s", err);
    /* all or nothing: tp_other, registered first and good, is not in the registry either */
    cr_expect_null(loom_template_find("tp_other"));
    cr_expect_null(loom_template_find("tp_nofield"));
}

Test(plugin, duplicate_name)
{
    char err[2048];
    setenv("LOOM_TP_FAULT", "dup", 1);
    load_fails(t_plugin_path("bad"), err, sizeof err);
    cr_expect(strstr(err, "template 'tp_other': field 'name': 'tp_other' is taken by another template of this plugin"),
              "%s", err);
    setenv("LOOM_TP_FAULT", "builtin", 1);
    load_fails(t_plugin_path("bad"), err, sizeof err);
    cr_expect(strstr(err, "template 'gemm': field 'name': 'gemm' is taken by a built-in template"), "%s", err);
    cr_expect_eq(loom_template_find("gemm")->build != NULL, 1);
    /* a plugin loaded twice: its templates' names are taken the second time */
    unsetenv("LOOM_TP_FAULT");
    cr_assert_eq(loom_plugin_load(t_plugin_path("bad"), NULL, err, sizeof err), LOOM_OK, "%s", err);
    load_fails(t_plugin_path("bad"), err, sizeof err);
    cr_expect(strstr(err, "'tp_other' is taken by a template of a plugin loaded before"), "%s", err);
    cr_expect_not_null(loom_template_find("tp_other"), "the first load's template went away");
}

Test(plugin, bad_init)
{
    char err[2048];
    setenv("LOOM_TP_FAULT", "badkey", 1);
    load_fails(t_plugin_path("bad"), err, sizeof err);
    cr_expect(strstr(err, "template 'tp_badkey': field 'config[0].key' is 'block-size', not a C identifier"), "%s",
              err);
    setenv("LOOM_TP_FAULT", "fails", 1);
    load_fails(t_plugin_path("bad"), err, sizeof err);
    cr_expect(strstr(err, "loom_plugin_init returned 3 (not 0)"), "%s", err);
    setenv("LOOM_TP_FAULT", "none", 1);
    load_fails(t_plugin_path("bad"), err, sizeof err);
    cr_expect(strstr(err, "registered no template"), "%s", err);
}

/* loom_template_validate on each required field and malformed parameter. */
Test(plugin, validate)
{
    const loom_template *g = loom_template_find("row_softmax");
    char err[1024];
    for (int i = 0; i < loom_template_count(); i++)
        cr_expect_eq(loom_template_validate(loom_template_at(i), err, sizeof err), 0, "%s", err);
    static const struct {
        const char *field, *want;
    } cases[] = {
        {"name", "a template's field 'name' is NULL (required)"},
        {"name-ident", "template 'row softmax': field 'name' is not a C identifier"},
        {"build", "template 'row_softmax': field 'build' is NULL (required)"},
        {"grid", "field 'grid' is NULL (required)"},
        {"init", "field 'init' is NULL (required)"},
        {"reference", "field 'reference' is NULL (required)"},
        {"nshape", "field 'nshape' is 17 (0 to 16)"},
        {"key", "field 'shape[1].key' is NULL (required)"},
        {"dupkey", "field 'config[1].key': 'BM' is also config[0]'s key"},
        {"ncand", "field 'config[0].ncand' of 'BM' is 17 (0 to 16)"},
        {"grid_rule", "field 'grid_rule' is NULL, but shape parameter 'R' is run-time"},
        {"rtol", "field 'rtol' is -1 (0 or more)"},
        {"config-runtime", "field 'config[1].runtime' of 'warps' is set"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        loom_template t = *g;
        const char *f = cases[i].field;
        if (!strcmp(f, "name"))
            t.name = NULL;
        else if (!strcmp(f, "name-ident"))
            t.name = "row softmax";
        else if (!strcmp(f, "build"))
            t.build = NULL;
        else if (!strcmp(f, "grid"))
            t.grid = NULL;
        else if (!strcmp(f, "init"))
            t.init = NULL;
        else if (!strcmp(f, "reference"))
            t.reference = NULL;
        else if (!strcmp(f, "nshape"))
            t.nshape = 17;
        else if (!strcmp(f, "key"))
            t.shape[1].key = NULL;
        else if (!strcmp(f, "dupkey"))
            t.config[1].key = "BM";
        else if (!strcmp(f, "ncand"))
            t.config[0].ncand = 17;
        else if (!strcmp(f, "grid_rule"))
            t.grid_rule = NULL;
        else if (!strcmp(f, "rtol"))
            t.rtol = -1;
        else if (!strcmp(f, "config-runtime"))
            t.config[1].runtime = 1;
        cr_expect_eq(loom_template_validate(&t, err, sizeof err), -1, "%s passed", f);
        cr_expect(strstr(err, cases[i].want), "%s: %s", f, err);
    }
    /* optional fields may be left out */
    loom_template t = *g;
    t.doc = NULL, t.valid = NULL, t.cost = NULL, t.bucket = NULL, t.bound = NULL, t.aot = NULL, t.atol = t.rtol = 0;
    cr_expect_eq(loom_template_validate(&t, err, sizeof err), 0, "%s", err);
}

/* ---------------------------------------------------------------- a template's table */

/* A table (loom_tune.h, "A template's table"): the index enums, the struct, the unpacking
 * and packing, the defaults and the parameter tables all come from one row a key. */
#define TT_SHAPE(X)                                                                                         \
    X(R, rows, int64_t, 4096, "rows", .runtime = 1)                                                        \
    X(dtype, dt, loom_dtype, LOOM_BF16, "element type")                                                    \
    X(shuffle, shuffle, int, 0, "inputs", .inputs_only = 1)
#define TT_CONFIG(X)                                                                                        \
    X(BM, bm, int, 2, "rows a program", 1, 2, 4, 8)                                                        \
    X(warps, warps, int, 4, "warps a CTA")                                                                 \
    X(ctas, ctas, int64_t, 132, "CTAs", 132)

enum { TT_SHAPE(LOOM_S_INDEX) S_COUNT };
enum { TT_CONFIG(LOOM_C_INDEX) C_COUNT };
typedef struct tt {
    TT_SHAPE(LOOM_FIELD)
    TT_CONFIG(LOOM_FIELD)
} tt;
typedef struct tt_config {
    TT_CONFIG(LOOM_FIELD)
} tt_config;

Test(plugin, table_makes_the_parameters_the_struct_and_the_defaults)
{
    cr_expect_eq(S_R, 0);
    cr_expect_eq(S_shuffle, 2);
    cr_expect_eq(S_COUNT, LOOM_COUNT(TT_SHAPE));
    cr_expect_eq(C_ctas, 2);
    cr_expect_eq(C_COUNT, 3);
    static const loom_param shape[] = {TT_SHAPE(LOOM_SHAPE_PARAM)}, config[] = {TT_CONFIG(LOOM_CONFIG_PARAM)};
    cr_expect_str_eq(shape[S_R].key, "R");
    cr_expect_eq(shape[S_R].def, 4096);
    cr_expect_eq(shape[S_R].runtime, 1);
    cr_expect_eq(shape[S_dtype].def, LOOM_BF16);
    cr_expect_eq(shape[S_dtype].runtime + shape[S_dtype].inputs_only + shape[S_dtype].ncand, 0);
    cr_expect_eq(shape[S_shuffle].inputs_only, 1);
    cr_expect_str_eq(config[C_BM].doc, "rows a program");
    cr_expect_eq(config[C_BM].ncand, 4);
    cr_expect_eq(config[C_BM].cand[3], 8);
    cr_expect_eq(config[C_warps].ncand, 0, "no candidates: the default alone");
    cr_expect_eq(config[C_ctas].ncand, 1);
    cr_expect_eq(config[C_ctas].cand[0], 132);

    /* vectors -> fields -> vector */
    const int64_t sh[] = {100, LOOM_F16, 1}, cf[] = {8, 2, 66};
    tt x;
    LOOM_UNPACK(TT_SHAPE, &x, sh);
    LOOM_UNPACK(TT_CONFIG, &x, cf);
    cr_expect(x.rows == 100 && x.dt == LOOM_F16 && x.shuffle == 1 && x.bm == 8 && x.warps == 2 && x.ctas == 66);
    int64_t back[C_COUNT];
    LOOM_PACK(TT_CONFIG, back, &x);
    cr_expect(!memcmp(back, cf, sizeof cf));
    tt_config c = {TT_CONFIG(LOOM_DEFAULT)}, d;
    cr_expect(c.bm == 2 && c.warps == 4 && c.ctas == 132);
    LOOM_COPY(TT_CONFIG, &d, &x);
    cr_expect(d.bm == 8 && d.warps == 2 && d.ctas == 66);
    const int64_t defs[] = {TT_CONFIG(LOOM_DEFAULT_VALUE)};
    for (int i = 0; i < C_COUNT; i++)
        cr_expect_eq(defs[i], config[i].def);

    /* the built-ins' tables agree with the C API's defaults (loom_ikbo.h) */
    const loom_template *lce = loom_template_find("ikbo_lce"), *fa = loom_template_find("ikbo_fa");
    cr_assert(lce && fa);
    const loom_ikbo_lce_config lc = {LOOM_IKBO_LCE_CONFIG(LOOM_DEFAULT)};
    const loom_ikbo_fa_config fc = {LOOM_IKBO_FA_CONFIG(LOOM_DEFAULT)};
    int64_t lv[LOOM_MAX_PARAMS], fv[LOOM_MAX_PARAMS];
    LOOM_PACK(LOOM_IKBO_LCE_CONFIG, lv, &lc);
    LOOM_PACK(LOOM_IKBO_FA_CONFIG, fv, &fc);
    cr_expect_eq(lce->nconfig, LOOM_COUNT(LOOM_IKBO_LCE_CONFIG));
    cr_expect_eq(fa->nconfig, LOOM_COUNT(LOOM_IKBO_FA_CONFIG));
    for (int i = 0; i < lce->nconfig; i++)
        cr_expect_eq(lv[i], lce->config[i].def, "ikbo_lce %s", lce->config[i].key);
    for (int i = 0; i < fa->nconfig; i++)
        cr_expect_eq(fv[i], fa->config[i].def, "ikbo_fa %s", fa->config[i].key);
}

/* The example plugin's rmsnorm, written as one table (docs/kernels.md): its parameters,
 * a check on the interpreter, and one reason for a refused config from valid() and build. */
Test(plugin, rmsnorm_is_one_table, .timeout = 120)
{
    char err[1024], why[256], report[1024];
    cr_assert_eq(loom_plugin_load(t_plugin_path("kernels"), NULL, err, sizeof err), LOOM_OK, "%s", err);
    const loom_template *t = loom_template_find("rmsnorm");
    cr_assert(t);
    cr_expect_eq(loom_template_validate(t, err, sizeof err), 0, "%s", err);
    cr_assert_eq(t->nshape, 3);
    cr_assert_eq(t->nconfig, 2);
    cr_expect_str_eq(t->shape[2].key, "dtype");
    cr_expect_eq(t->shape[2].def, LOOM_F16);
    cr_expect_str_eq(t->config[1].key, "warps");
    cr_expect_eq(t->config[1].ncand, 4);
    cr_expect_eq(t->config[1].cand[3], 8);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt);
    const int64_t sh[] = {5, 37, LOOM_F32}, cf[] = {2, 1};
    cr_expect_eq(loom_template_check(rt, t, sh, cf, 3, report, sizeof report), LOOM_OK, "%s", report);
    const int64_t big[] = {2048, 1}; /* 2048 rows of 64 a program: over the 65536-element tile */
    cr_expect_eq(t->valid(sh, big, why, sizeof why), 0);
    cr_expect(strstr(why, "BM x pow2(N) = 2048 x 64 exceeds"), "%s", why);
    cr_expect_null(t->build(sh, big, err, sizeof err));
    cr_expect_str_eq(err, why, "build and valid() say the same");
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- docs/kernels.md's code */

/* Every C block of docs/kernels.md compiles (loom.h included first; a fragment may leave
 * things unused), with the C compiler that built loom (CC, else cc); a block that is a
 * whole plugin (LOOM_PLUGIN_INIT) is built as one and loaded, and each template it adds is
 * checked on the interpreter at its defaults. */
Test(plugin, docs_kernels_md_blocks_compile, .timeout = 300)
{
    char root[PATH_MAX];
    snprintf(root, sizeof root, "%s", __FILE__);
    char *slash = strstr(root, "/tests/test_plugin.c");
    if (!slash)
        cr_skip_test("the source tree is not known (__FILE__ is %s)", __FILE__);
    *slash = 0;
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/docs/kernels.md", root);
    FILE *f = fopen(path, "rb");
    if (!f)
        cr_skip_test("cannot read %s", path);
    static char doc[1 << 20];
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[n] = 0;
    const char *cc = getenv("CC") ? getenv("CC") : "cc";
    char cmd[2 * PATH_MAX + 512];
    snprintf(cmd, sizeof cmd, "%s --version >/dev/null 2>&1", cc);
    if (system(cmd) != 0)
        cr_skip_test("no C compiler (%s)", cc);
    char dir[] = "/tmp/loom_docs_XXXXXX";
    cr_assert(mkdtemp(dir));
    int blocks = 0;
    for (const char *p = strstr(doc, "```c\n"); p; p = strstr(p, "```c\n")) {
        p += 5;
        const char *end = strstr(p, "```");
        cr_assert(end, "an unclosed block in %s", path);
        char src[PATH_MAX], so[PATH_MAX];
        snprintf(src, sizeof src, "%s/block%d.c", dir, blocks);
        snprintf(so, sizeof so, "%s/libblock%d.so", dir, blocks);
        FILE *o = fopen(src, "wb");
        cr_assert(o);
        fprintf(o, "#include \"loom.h\"\n#line 1 \"docs/kernels.md block %d\"\n%.*s", blocks, (int)(end - p), p);
        fclose(o);
        char *text = strndup(p, (size_t)(end - p));
        cr_assert(text);
        bool plugin = strstr(text, "LOOM_PLUGIN_INIT") != NULL;
        free(text);
        int w = snprintf(cmd, sizeof cmd,
                 "%s -std=gnu11 -Wall -Wextra -Werror -Wno-unused-function -Wno-unused-variable "
                 "-Wno-unused-const-variable -I%s/include %s %s -o %s 2>&1",
                 cc, root, plugin ? "-shared -fPIC" : "-fsyntax-only", src, plugin ? so : "/dev/null");
        cr_assert(w > 0 && (size_t)w < sizeof cmd, "the command is too long");
        char out[4096] = "";
        FILE *pp = popen(cmd, "r");
        cr_assert(pp);
        size_t got = fread(out, 1, sizeof out - 1, pp);
        out[got] = 0;
        cr_expect_eq(pclose(pp), 0, "docs/kernels.md's block %d does not compile:\n%s", blocks, out);
        if (plugin) {
            char err[1024], report[1024];
            int before = loom_template_count(), count = 0;
            cr_assert_eq(loom_plugin_load(so, &count, err, sizeof err), LOOM_OK, "%s", err);
            loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
            for (int i = before; i < before + count; i++) {
                const loom_template *t = loom_template_at(i);
                int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
                for (int j = 0; j < t->nshape; j++)
                    sh[j] = t->shape[j].def;
                for (int j = 0; j < t->nconfig; j++)
                    cf[j] = t->config[j].def;
                cr_expect_eq(loom_template_check(rt, t, sh, cf, 1, report, sizeof report), LOOM_OK, "%s: %s",
                             t->name, report);
            }
            loom_runtime_destroy(rt);
        }
        blocks++;
        p = end + 3;
    }
    cr_expect_geq(blocks, 2, "docs/kernels.md has %d C blocks", blocks);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

/* ---------------------------------------------------------------- a plugin that loads */

Test(plugin, round_trip, .timeout = 120)
{
    char err[4096], report[1024];
    int n0 = loom_template_count(), count = 0;
    cr_assert_null(loom_template_find("tp_scale"));
    cr_assert_eq(loom_plugin_load(t_plugin_path("ok"), &count, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect_eq(count, 1);
    cr_assert_eq(loom_template_count(), n0 + 1);
    const loom_template *t = loom_template_find("tp_scale");
    cr_assert_not_null(t);
    cr_expect_eq(loom_template_at(n0), t, "a plugin's templates come after the built-ins");
    /* the built-ins are as they were */
    cr_expect_not_null(loom_template_find("gemm"));
    /* loomc's parameters, a check on the interpreter, PTX */
    int64_t shape[LOOM_MAX_PARAMS], config[LOOM_MAX_PARAMS];
    cr_assert_eq(loomc_template_params(t, "N=1000", "BLOCK=128", shape, config, err, sizeof err), 0, "%s", err);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    cr_assert(rt);
    cr_expect_eq(loom_template_check(rt, t, shape, config, 1, report, sizeof report), LOOM_OK, "%s", report);
    cr_expect(strstr(report, "tp_scale: ok"), "%s", report);
    loom_kernel *k = t->build(shape, config, err, sizeof err);
    cr_assert(k, "%s", err);
    char *ptx = NULL;
    cr_expect_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect(ptx && strstr(ptx, ".entry tp_scale"), "no entry tp_scale in the PTX");
    free(ptx);
    loom_kernel_destroy(k);
    /* the tuner on the interpreter: nothing timed, the default config, a ready kernel */
    loom_tuned r;
    loom_tune_opts to = {.quiet = 1};
    loom_tune(rt, t, shape, 1, &to, &r);
    cr_expect(r.source == LOOM_TUNE_DEFAULT && r.status == LOOM_OK && r.kernel, "%s", r.note);
    cr_expect_eq(r.config[0], 256);
    loom_tuned_release(&r, 1);
    loom_runtime_destroy(rt);

    /* loomc aot's files: the template's dispatch table and launch, then the operation's
     * hooks (tp_ok.c): a second kernel, and a function naming it */
    char dir[] = "/tmp/loom_tp_aot_XXXXXX";
    cr_assert(mkdtemp(dir));
    int64_t shapes[2][LOOM_MAX_PARAMS] = {{1000}, {4096}}, configs[2][LOOM_MAX_PARAMS] = {{256, 4}, {256, 4}};
    loom_aot_request q = {t, 2, (const int64_t(*)[LOOM_MAX_PARAMS])shapes, (const int64_t(*)[LOOM_MAX_PARAMS])configs,
                          4, "sm_90a", "mine", dir, "loomc aot tp_scale ..."};
    cr_assert_eq(loom_aot_write(&q, err, sizeof err), LOOM_OK, "%s", err);
    char path[256];
    static char text[1 << 21];
    snprintf(path, sizeof path, "%s/mine.h", dir);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    text[fread(text, 1, sizeof text - 1, f)] = 0;
    fclose(f);
    cr_expect(strstr(text, "mine_status mine_tp_scale_launch(const mine_tp_scale_shape *shape, CUdeviceptr x, "
                           "CUdeviceptr y, CUstream stream);") &&
                  strstr(text, "const char *mine_tp_scale_second(void);") && strstr(text, "row 0 launches kernel 0"),
              "%s", text);
    remove(path);
    snprintf(path, sizeof path, "%s/mine.c", dir);
    f = fopen(path, "r");
    cr_assert(f, "%s", path);
    text[fread(text, 1, sizeof text - 1, f)] = 0;
    fclose(f);
    /* a kernel a shape (N is in the code), and the operation's */
    cr_expect(strstr(text, "static aot_kstate aot_states[3];") &&
                  strstr(text, "const char *mine_tp_scale_second(void) { return aot_kernels[2].name; }") &&
                  strstr(text, "tp_scale's operation: BLOCK=128"),
              "the operation's kernel or function is missing");
    remove(path);
    rmdir(dir);
}

/* A template with no operation takes the generic path alone: no hook runs. */
Test(plugin, aot_generic, .timeout = 120)
{
    char err[4096];
    unsetenv("LOOM_TP_FAULT");
    cr_assert_eq(loom_plugin_load(t_plugin_path("bad"), NULL, err, sizeof err), LOOM_OK, "%s", err);
    const loom_template *t = loom_template_find("tp_other");
    cr_assert(t && !t->aot);
    char dir[] = "/tmp/loom_tp_aot_XXXXXX";
    cr_assert(mkdtemp(dir));
    int64_t shapes[1][LOOM_MAX_PARAMS] = {{1000}}, configs[1][LOOM_MAX_PARAMS] = {{256, 4}};
    loom_aot_request q = {t, 1, (const int64_t(*)[LOOM_MAX_PARAMS])shapes, (const int64_t(*)[LOOM_MAX_PARAMS])configs,
                          4, "sm_90a", "g", dir, NULL};
    cr_assert_eq(loom_aot_write(&q, err, sizeof err), LOOM_OK, "%s", err);
    char path[256];
    static char text[1 << 21];
    snprintf(path, sizeof path, "%s/g.c", dir);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    text[fread(text, 1, sizeof text - 1, f)] = 0;
    fclose(f);
    cr_expect(strstr(text, "static aot_kstate aot_states[1];") && strstr(text, "g_tp_other_launch("), "%s", path);
    remove(path);
    snprintf(path, sizeof path, "%s/g.h", dir);
    remove(path);
    rmdir(dir);
}
