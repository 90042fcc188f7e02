/*
 * loomc -- loom's command-line front end.
 *
 *   loomc list                                   every kernel template, one a line
 *   loomc show NAME                              its shape and config keys, defaults, docs
 *   loomc ir NAME [--shape k=v,..] [--config k=v,..]        print the kernel's IR
 *   loomc emit NAME [--shape ..] [--config ..] [--arch sm_90a] -o FILE.ptx
 *   loomc emit --all [--arch sm_90a] -o DIR       one DIR/NAME.ptx per template at defaults
 *   loomc run NAME [--shape ..] [--config ..] [--interpret] [--seed N]
 *       random inputs, checked against the template's reference; on the GPU where there
 *       is one (and then also on the interpreter, to show that they agree), else on the
 *       interpreter.
 *   loomc aot NAME --shape ..  [--shape ..]... [--config .. | --tuned] [--stage N]
 *             [--arch sm_90a[,sm_80]] [--torch] --prefix P -o DIR
 *       DIR/P.h and DIR/P.c: the kernels at those shapes as cubins and PTX with a C launcher
 *       that needs neither loom nor libcuda at link time (docs/aot.md); each shape's config
 *       is --config, the tuner's with --tuned, else the template's default (the cost
 *       model's best valid config where the default cannot serve the shape).  A template's
 *       run-time keys (B, U, R, ...) are maxima: a launch may ask for any value from 1 up to
 *       them, served by the kernel of the smallest bucket that holds it.  --torch also
 *       writes DIR/P_torch.py: the operations as PyTorch custom ops (docs/torch.md).
 *   loomc tune NAME [--shape ..]... [--force] [--max N] [--threads N] [--report FILE.svg]
 *       the autotuner (tune/) for each --shape (repeatable; none: the default
 *       shape): every config's fate and time, the pick, and with --report an SVG plot of
 *       every config's time (--report re-tunes, so that every config is timed).
 *
 *   loomc help [CMD]   (or loomc --help, loomc CMD --help): the commands, or CMD's options
 *
 * Every command takes --plugin LIB.so (repeatable): a user's shared object whose templates
 * then work as the built-ins do (loom_plugin_load; docs/kernels.md).
 *
 * Exit status: 0 on success, 1 on a failed check or compile, 2 on a usage error (a plugin
 * that does not load among them).
 */
#include "../aot/aot.h" /* loom_aot_write_torch: --torch */
#include "loom.h"
#include "loomc_args.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A usage error's page: the commands, on stderr; exit status 2. */
static int usage(void)
{
    loomc_help(stderr, NULL);
    return 2;
}

typedef loomc_opts opts;

/* The options after the command (tools/loomc_args.c); prints the message on a usage error. */
static int parse(int argc, char **argv, opts *o)
{
    char err[512];
    if (loomc_parse_args(argc, argv, o, err, sizeof err)) {
        fprintf(stderr, "loomc: %s\n", err);
        return -1;
    }
    return 0;
}

static const loom_template *find(const char *name)
{
    if (!name) {
        fprintf(stderr, "loomc: which kernel? (loomc list shows them)\n");
        return NULL;
    }
    const loom_template *t = loom_template_find(name);
    if (!t) {
        fprintf(stderr, "loomc: unknown kernel '%s'; known:", name);
        for (int i = 0; i < loom_template_count(); i++)
            fprintf(stderr, " %s", loom_template_at(i)->name);
        fprintf(stderr, " (a plugin's templates are known after --plugin LIB.so)\n");
    }
    return t;
}

/* The shape and config of a command (--shape and --config over the template's defaults);
 * -1 with a message on stderr when they do not parse. */
static int params(const loom_template *t, const opts *o, int64_t *shape, int64_t *config)
{
    char err[600];
    if (loomc_template_params(t, o->shape, o->config, shape, config, err, sizeof err)) {
        fprintf(stderr, "loomc: %s\n", err);
        return -1;
    }
    return 0;
}

/* Without --config: where the template's default cannot serve the shape (gemm's TMA store
 * at an N not a multiple of 8, say), the config loom_tune takes without timing, the cost
 * model's best valid one, with a note on stderr (loomc aot does the same for each of its
 * shapes).  Where there is none, the build refuses with the default's reason. */
static void untimed_config(const loom_template *t, const opts *o, const int64_t *shape, int64_t *config)
{
    char err[600];
    if (o->config || !t->valid || t->valid(shape, config, err, sizeof err))
        return;
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER); /* no GPU: nothing timed or cached */
    loom_tuned r;
    loom_tune_opts to = {.quiet = 1};
    if (rt && loom_tune(rt, t, shape, 1, &to, &r) == LOOM_OK && r.source != LOOM_TUNE_NONE) {
        char c[512];
        memcpy(config, r.config, sizeof r.config);
        loom_params_format(t->config, t->nconfig, config, c, sizeof c);
        fprintf(stderr, "loomc: %s: the default config cannot serve this shape (%s); using %s\n", t->name, err, c);
    }
    if (rt)
        loom_tuned_release(&r, 1);
    loom_runtime_destroy(rt);
}

/* The shape and config a command builds one kernel at: params, then untimed_config. */
static int build_params(const loom_template *t, const opts *o, int64_t *shape, int64_t *config)
{
    if (params(t, o, shape, config))
        return -1;
    untimed_config(t, o, shape, config);
    return 0;
}

static loom_kernel *build(const loom_template *t, const int64_t *shape, const int64_t *config)
{
    char err[1024] = "";
    loom_kernel *k = t->build(shape, config, err, sizeof err);
    if (!k) {
        fprintf(stderr, "loomc: %s: %s\n", t->name, err);
        return NULL;
    }
    if (loom_verify(k) != LOOM_OK) {
        fprintf(stderr, "%s", loom_kernel_errors(k));
        loom_kernel_destroy(k);
        return NULL;
    }
    return k;
}

static int emit_one(const loom_template *t, const int64_t *shape, const int64_t *config,
                    const char *arch, const char *path)
{
    loom_kernel *k = build(t, shape, config);
    if (!k)
        return 1;
    char *ptx = NULL, err[4096] = "";
    size_t smem = 0;
    loom_status st = loom_compile_ptx(k, arch, &ptx, &smem, err, sizeof err);
    loom_kernel_destroy(k);
    if (st != LOOM_OK) {
        fprintf(stderr, "loomc: %s: %s\n", t->name, err);
        return 1;
    }
    FILE *f = fopen(path, "w");
    if (!f || fputs(ptx, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "loomc: cannot write %s: %s\n", path, strerror(errno));
        free(ptx);
        return 1;
    }
    printf("%s -> %s (%zu bytes of dynamic shared memory)\n", t->name, path, smem);
    free(ptx);
    return 0;
}

static int cmd_emit(const opts *o)
{
    if (!o->out) {
        fprintf(stderr, "loomc emit: -o is required\n");
        return 2;
    }
    int64_t shape[LOOM_MAX_PARAMS], config[LOOM_MAX_PARAMS];
    if (o->all) {
        if (mkdir(o->out, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "loomc: cannot create %s: %s\n", o->out, strerror(errno));
            return 1;
        }
        int rc = 0;
        for (int i = 0; i < loom_template_count(); i++) {
            const loom_template *t = loom_template_at(i);
            params(t, &(opts){0}, shape, config);
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.ptx", o->out, t->name);
            rc |= emit_one(t, shape, config, o->arch, path);
        }
        return rc;
    }
    const loom_template *t = find(o->name);
    if (!t)
        return 2;
    if (build_params(t, o, shape, config))
        return 2;
    return emit_one(t, shape, config, o->arch, o->out);
}

static int cmd_run(const opts *o)
{
    const loom_template *t = find(o->name);
    int64_t shape[LOOM_MAX_PARAMS], config[LOOM_MAX_PARAMS];
    if (!t)
        return 2;
    if (build_params(t, o, shape, config))
        return 2;
    int rc = 0;
    char report[1024];
    loom_runtime *rt = loom_runtime_create(o->interpret ? LOOM_TARGET_INTERPRETER : LOOM_TARGET_AUTO);
    if (!rt)
        return 1;
    if (!o->interpret && !loom_runtime_is_gpu(rt))
        printf("no GPU here (%s)\n", loom_runtime_error(rt));
    rc |= loom_template_check(rt, t, shape, config, o->seed, report, sizeof report) != LOOM_OK;
    printf("%s\n", report);
    if (loom_runtime_is_gpu(rt)) {
        loom_runtime *ri = loom_runtime_create(LOOM_TARGET_INTERPRETER);
        rc |= loom_template_check(ri, t, shape, config, o->seed, report, sizeof report) != LOOM_OK;
        printf("%s\n", report);
        loom_runtime_destroy(ri);
    }
    loom_runtime_destroy(rt);
    return rc;
}

/* ---------------------------------------------------------------- aot */

/* The whole command line, for the generated files' comments. */
static void command_line(int argc, char **argv, char *buf, size_t n)
{
    size_t w = 0;
    buf[0] = 0;
    for (int i = 0; i < argc && w + 1 < n; i++) {
        int k = snprintf(buf + w, n - w, "%s%s", i ? " " : "", i ? argv[i] : "loomc");
        if (k < 0)
            break;
        w += (size_t)k;
    }
}

static int cmd_aot(const opts *o, const char *cmdline)
{
    if (!o->out || !o->prefix) {
        fprintf(stderr, "loomc aot: %s is required\n", !o->out ? "-o DIR" : "--prefix P");
        return 2;
    }
    if (o->tuned && o->config) {
        fprintf(stderr, "loomc aot: --config and --tuned: give one\n");
        return 2;
    }
    const loom_template *t = find(o->name);
    if (!t)
        return 2;
    int n = o->nshapes ? o->nshapes : 1;
    int64_t(*shapes)[LOOM_MAX_PARAMS] = calloc((size_t)n, sizeof *shapes);
    int64_t(*configs)[LOOM_MAX_PARAMS] = calloc((size_t)n, sizeof *configs);
    if (!shapes || !configs) {
        free(shapes), free(configs);
        fprintf(stderr, "loomc aot: out of memory\n");
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        if (params(t, &(opts){.shape = o->nshapes ? o->shapes[i] : NULL, .config = o->config}, shapes[i],
                   configs[i]))
            rc = 2;
    /* without --config: the tuner's pick (--tuned), or what loom_tune takes without timing
     * anything: the default, or the cost model's best where the default cannot serve */
    if (!rc && !o->config) {
        if (!o->tuned)
            setenv("LOOM_TUNE", "0", 1);
        loom_runtime *rt = loom_runtime_create(o->tuned ? LOOM_TARGET_AUTO : LOOM_TARGET_INTERPRETER);
        int64_t *flat = calloc((size_t)n * (size_t)t->nshape, sizeof *flat);
        loom_tuned *res = calloc((size_t)n, sizeof *res);
        if (!rt || !flat || !res) {
            fprintf(stderr, "loomc aot: out of memory\n");
            rc = 1;
        } else {
            for (int i = 0; i < n; i++)
                memcpy(flat + (size_t)i * (size_t)t->nshape, shapes[i], (size_t)t->nshape * sizeof *flat);
            loom_tune_opts to = {0};
            to.quiet = 1;
            loom_tune(rt, t, flat, n, &to, res);
            for (int i = 0; i < n; i++) {
                char s[512], c[512];
                loom_params_format(t->shape, t->nshape, shapes[i], s, sizeof s);
                if (res[i].source == LOOM_TUNE_NONE || res[i].source == LOOM_TUNE_FELL_BACK) {
                    /* --tuned asks for tuned tables: a fallback is not one */
                    fprintf(stderr, "loomc aot: %s at %s: %s: %s\n", t->name, s,
                            res[i].source == LOOM_TUNE_NONE ? "no config" : "not tuned", res[i].note);
                    rc = 1;
                    continue;
                }
                memcpy(configs[i], res[i].config, sizeof configs[i]);
                loom_params_format(t->config, t->nconfig, configs[i], c, sizeof c);
                printf("%s at %s: %s (%s)\n", t->name, s, c,
                       res[i].source == LOOM_TUNE_TUNED    ? "tuned now"
                       : res[i].source == LOOM_TUNE_CACHED ? "from the tuning cache"
                                                           : "the default");
            }
            loom_tuned_release(res, n);
        }
        free(flat), free(res);
        loom_runtime_destroy(rt);
    }
    if (!rc) {
        char err[4096] = "";
        loom_aot_request r = {t, n, (const int64_t(*)[LOOM_MAX_PARAMS])shapes,
                              (const int64_t(*)[LOOM_MAX_PARAMS])configs, o->stage, o->arch, o->prefix, o->out,
                              cmdline};
        if ((o->torch ? loom_aot_write_torch(&r, err, sizeof err) : loom_aot_write(&r, err, sizeof err)) != LOOM_OK) {
            fprintf(stderr, "loomc aot: %s\n", err);
            rc = 1;
        } else {
            printf("%s: %d shape%s -> %s/%s.h, %s/%s.c", t->name, n, n == 1 ? "" : "s", o->out, o->prefix, o->out,
                   o->prefix);
            if (o->torch)
                printf(", %s/%s_torch.py", o->out, o->prefix);
            printf("\n");
        }
    }
    free(shapes), free(configs);
    return rc;
}

/* ---------------------------------------------------------------- tune */

/* Text with &, <, > and quotes escaped for SVG. */
static void svg_text(FILE *f, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
}

static int by_time(const void *a, const void *b)
{
    const loom_tune_result *x = a, *y = b;
    return (x->ms > y->ms) - (x->ms < y->ms);
}

/* One panel per tuned shape: a bar per timed config (fastest first, the pick in another
 * colour), a y axis in ms, then the configs that were not timed with their reasons. */
static int write_svg(const char *path, const loom_tuned *r, int n, const char *device)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "loomc: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    const int bar = 14, left = 70, plot_h = 260, top = 60, label_h = 150, line_h = 14;
    int width = 640, height = 20;
    for (int s = 0; s < n; s++) {
        int timed = 0, other = 0;
        for (int i = 0; i < r[s].nresults; i++) {
            const loom_tune_result *e = &r[s].results[i];
            if (e->verdict == LOOM_TUNE_TIMED && e->ms > 0) {
                timed++;
            } else if (other++ < 40) { /* a listed line: config, verdict, reason at ~7 px a character */
                int chars = 40 + (int)strlen(e->reason);
                if (20 + 7 * chars > width)
                    width = 20 + 7 * chars;
            }
        }
        if (left + timed * bar + 80 > width)
            width = left + timed * bar + 80;
        height += top + plot_h + label_h + 30 + (other > 40 ? 41 : other) * line_h;
    }
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"monospace\" font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            width, height);
    int y0 = 10;
    for (int s = 0; s < n; s++) {
        const loom_tuned *x = &r[s];
        char sh[512], cf[512];
        loom_params_format(x->t->shape, x->t->nshape, x->shape, sh, sizeof sh);
        loom_tune_result *v = malloc((size_t)(x->nresults ? x->nresults : 1) * sizeof *v);
        if (!v)
            break;
        int timed = 0;
        double worst = 0;
        for (int i = 0; i < x->nresults; i++)
            if (x->results[i].verdict == LOOM_TUNE_TIMED && x->results[i].ms > 0) {
                v[timed++] = x->results[i];
                if (x->results[i].ms > worst)
                    worst = x->results[i].ms;
            }
        qsort(v, (size_t)timed, sizeof *v, by_time);
        fprintf(f, "<text x=\"10\" y=\"%d\" font-size=\"14\">", y0 + 18);
        svg_text(f, x->t->name);
        fprintf(f, " ");
        svg_text(f, sh);
        fprintf(f, "</text>\n<text x=\"10\" y=\"%d\">", y0 + 36);
        snprintf(cf, sizeof cf, "%s: %d configs, %d valid, %d timed correct; picked ", device, x->ncand,
                 x->nvalid, timed);
        svg_text(f, cf);
        loom_params_format(x->t->config, x->t->nconfig, x->config, cf, sizeof cf);
        svg_text(f, cf);
        fprintf(f, " (%.4f ms)</text>\n", x->ms);
        int py = y0 + top, ph = plot_h;
        double ymax = worst > 0 ? worst * 1.1 : 1;
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left, py, left, py + ph);
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left, py + ph,
                left + timed * bar + 10, py + ph);
        for (int tck = 0; tck <= 4; tck++) {
            double val = ymax * tck / 4;
            int ty = py + ph - (int)(ph * tck / 4);
            fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>\n", left + 1, ty,
                    left + timed * bar + 10, ty);
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.3f</text>\n", left - 4, ty + 4, val);
        }
        fprintf(f, "<text x=\"12\" y=\"%d\" transform=\"rotate(-90 12 %d)\" text-anchor=\"middle\">ms (median)</text>\n",
                py + ph / 2, py + ph / 2);
        for (int i = 0; i < timed; i++) {
            int h = (int)(ph * v[i].ms / ymax), bx = left + 6 + i * bar;
            bool pick = !memcmp(v[i].config, x->config, sizeof x->config);
            loom_params_format(x->t->config, x->t->nconfig, v[i].config, cf, sizeof cf);
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"><title>", bx,
                    py + ph - h, bar - 3, h, pick ? "#d62728" : "#1f77b4");
            svg_text(f, cf);
            fprintf(f, ": %.4f ms</title></rect>\n", v[i].ms);
            fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"9\" transform=\"rotate(60 %d %d)\">", bx + 3,
                    py + ph + 10, bx + 3, py + ph + 10);
            svg_text(f, cf);
            fprintf(f, "</text>\n");
        }
        int ly = py + ph + label_h;
        int listed = 0;
        for (int i = 0; i < x->nresults; i++) {
            const loom_tune_result *e = &x->results[i];
            if (e->verdict == LOOM_TUNE_TIMED && e->ms > 0)
                continue;
            if (listed == 40) {
                fprintf(f, "<text x=\"10\" y=\"%d\">... and more (loomc tune prints them all)</text>\n", ly);
                ly += line_h;
                break;
            }
            loom_params_format(x->t->config, x->t->nconfig, e->config, cf, sizeof cf);
            fprintf(f, "<text x=\"10\" y=\"%d\" fill=\"#888\">", ly);
            svg_text(f, cf);
            fprintf(f, ": %s: ", loom_tune_verdict_name(e->verdict));
            svg_text(f, e->reason);
            fprintf(f, "</text>\n");
            ly += line_h;
            listed++;
        }
        y0 = ly + 30;
        free(v);
    }
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "loomc: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

static int cmd_tune(const opts *o)
{
    const loom_template *t = find(o->name);
    if (!t)
        return 2;
    int n = o->nshapes ? o->nshapes : 1;
    int64_t *shapes = calloc((size_t)n * (size_t)t->nshape + 1, sizeof *shapes);
    loom_tuned *res = calloc((size_t)n, sizeof *res);
    if (!shapes || !res) {
        free(shapes);
        free(res);
        fprintf(stderr, "loomc: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        int64_t vals[LOOM_MAX_PARAMS], config[LOOM_MAX_PARAMS];
        char err[600];
        if (loomc_template_params(t, o->nshapes ? o->shapes[i] : NULL, NULL, vals, config, err, sizeof err)) {
            fprintf(stderr, "loomc: %s\n", err);
            free(shapes);
            free(res);
            return 2;
        }
        memcpy(shapes + (size_t)i * (size_t)t->nshape, vals, (size_t)t->nshape * sizeof *vals);
    }
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_AUTO);
    if (!rt) {
        free(shapes);
        free(res);
        return 1;
    }
    loom_tune_opts opt = {.force = o->force || o->report != NULL, .max_configs = o->max_configs,
                          .threads = o->threads, .quiet = 2, .seed = o->seed};
    loom_status st = loom_tune(rt, t, shapes, n, &opt, res);
    printf("on %s\n", loom_runtime_device_name(rt));
    loom_tune_print(stdout, res, n, 1);
    int rc = st != LOOM_OK;
    for (int i = 0; i < n; i++)
        if (res[i].source == LOOM_TUNE_FELL_BACK)
            fprintf(stderr, "loomc tune: %s was NOT tuned at shape %d (exit status 1): %s\n", t->name, i + 1,
                    res[i].note);
    if (o->report) {
        int any = 0;
        for (int i = 0; i < n; i++)
            any |= res[i].nresults > 0;
        if (!any) {
            fprintf(stderr, "loomc: no per-config times to plot (%s)\n", res[0].note);
            rc = 1;
        } else if (write_svg(o->report, res, n, loom_runtime_device_name(rt)) == 0) {
            printf("report: %s\n", o->report);
        } else {
            rc = 1;
        }
    }
    loom_tuned_release(res, n);
    loom_runtime_destroy(rt);
    free(shapes);
    free(res);
    return rc;
}

/* `loomc help [CMD]`, `loomc --help`: the page on stdout, exit status 0; an unknown CMD is
 * a usage error. */
/* A line of `loomc show`: the key, the default written as --shape and --config take it (a
 * dtype by name, as loom_params_format writes it), the doc. */
static void show_param(const loom_param *p)
{
    char kv[160];
    loom_params_format(p, 1, &p->def, kv, sizeof kv);
    const char *v = strchr(kv, '=');
    printf("  %-10s %8s  %s\n", p->key, v ? v + 1 : kv, p->doc ? p->doc : "");
}

static int cmd_help(int argc, char **argv)
{
    if (argc > 3) {
        fprintf(stderr, "loomc help: unexpected argument '%s' (loomc help [COMMAND])\n", argv[3]);
        return 2;
    }
    if (argc == 3 && loomc_help(stdout, argv[2]) != 0) {
        fprintf(stderr, "loomc help: unknown command '%s'\n", argv[2]);
        return usage();
    }
    if (argc < 3)
        loomc_help(stdout, NULL);
    return 0;
}

/* Every --plugin, in order: its templates join the registry (loom_plugin_load). */
static int load_plugins(const opts *o)
{
    for (int i = 0; i < o->nplugins; i++) {
        char err[2048];
        if (loom_plugin_load(o->plugins[i], NULL, err, sizeof err) != LOOM_OK) {
            fprintf(stderr, "loomc: %s\n", err);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h"))
        return cmd_help(argc, argv);
    if (!loomc_command_known(cmd)) {
        fprintf(stderr, "loomc: unknown command '%s' (loomc --help lists them)\n", cmd);
        return usage();
    }
    opts o;
    if (parse(argc, argv, &o))
        return 2;
    if (o.help)
        return loomc_help(stdout, cmd), 0;
    if (load_plugins(&o))
        return 2;
    if (!strcmp(cmd, "list")) {
        for (int i = 0; i < loom_template_count(); i++)
            printf("%s\n", loom_template_at(i)->name);
        return 0;
    }
    if (!strcmp(cmd, "show")) {
        const loom_template *t = find(o.name);
        if (!t)
            return 2;
        printf("%s: %s\nshape:\n", t->name, t->doc ? t->doc : "");
        for (int i = 0; i < t->nshape; i++)
            show_param(&t->shape[i]);
        printf("config:\n");
        for (int i = 0; i < t->nconfig; i++)
            show_param(&t->config[i]);
        return 0;
    }
    if (!strcmp(cmd, "ir")) {
        const loom_template *t = find(o.name);
        int64_t shape[LOOM_MAX_PARAMS], config[LOOM_MAX_PARAMS];
        if (!t || build_params(t, &o, shape, config))
            return 2;
        loom_kernel *k = build(t, shape, config);
        if (!k)
            return 1;
        fputs(loom_print(k), stdout);
        loom_kernel_destroy(k);
        return 0;
    }
    if (!strcmp(cmd, "emit"))
        return cmd_emit(&o);
    if (!strcmp(cmd, "run"))
        return cmd_run(&o);
    if (!strcmp(cmd, "tune"))
        return cmd_tune(&o);
    if (!strcmp(cmd, "aot")) {
        char line[4096];
        command_line(argc, argv, line, sizeof line);
        return cmd_aot(&o, line);
    }
    fprintf(stderr, "loomc: internal error: command '%s' is in loomc_args.c's list but not handled here (a bug)\n",
            cmd);
    return 2;
}
