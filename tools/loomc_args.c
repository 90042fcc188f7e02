/*
 * loomc_args.c -- loomc's argument parser (loomc_args.h).  It prints nothing: loomc prints
 * the message it returns, and the fuzzer calls it on arbitrary argument vectors.
 *
 * Nothing is taken silently: an option given twice is refused (the last one winning would
 * hide a typo), except --shape for tune and aot, which take a list of shapes, and --plugin,
 * which loads each shared object it names; a key given
 * twice in one --shape or --config is refused too; numbers must parse whole and lie in
 * their range (docs/errors.md).
 */
#include "loomc_args.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) return snprintf(err, errlen, __VA_ARGS__), -1

/* The options that take no list: each may be given once. */
static const char *const once[] = {"--config", "--arch", "-o", "--report", "--prefix", "--tuned", "--stage",
                                   "--torch", "--force", "--max", "--threads", "--all", "--interpret", "--seed"};
#define NONCE ((int)(sizeof once / sizeof once[0]))

int loomc_parse_args(int argc, char **argv, loomc_opts *o, char *err, size_t errlen)
{
    *o = (loomc_opts){.arch = "sm_90a", .seed = 1, .stage = 4};
    const char *cmd = argc > 1 && argv[1] ? argv[1] : "";
    bool many_shapes = !strcmp(cmd, "tune") || !strcmp(cmd, "aot");
    bool seen[NONCE] = {false};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        for (int j = 0; j < NONCE; j++)
            if (!strcmp(a, once[j])) {
                if (seen[j])
                    FAIL("%s is given twice (each option once)", a);
                seen[j] = true;
            }
        if (!strcmp(a, "--shape") && o->nshapes > 0 && !many_shapes)
            FAIL("--shape is given twice (only tune and aot take several)");
        if (!strcmp(a, "--shape"))
            dst = &o->shape;
        else if (!strcmp(a, "--config"))
            dst = &o->config;
        else if (!strcmp(a, "--arch"))
            dst = &o->arch;
        else if (!strcmp(a, "-o"))
            dst = &o->out;
        else if (!strcmp(a, "--report"))
            dst = &o->report;
        else if (!strcmp(a, "--prefix"))
            dst = &o->prefix;
        else if (!strcmp(a, "--tuned"))
            o->tuned = 1;
        else if (!strcmp(a, "--torch"))
            o->torch = 1;
        else if (!strcmp(a, "--stage")) {
            if (i + 1 >= argc)
                FAIL("--stage needs a value");
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || v < 0 || v > 4)
                FAIL("--stage needs a stage from 0 to 4, not '%s'", argv[i]);
            o->stage = (int)v;
        }
        else if (!strcmp(a, "--force"))
            o->force = 1;
        else if (!strcmp(a, "--max") || !strcmp(a, "--threads")) {
            if (i + 1 >= argc)
                FAIL("%s needs a value", a);
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || v < 1 || v >= 1L << 30)
                FAIL("%s needs a positive integer below 2^30, not '%s'", a, argv[i]);
            *(a[2] == 'm' ? &o->max_configs : &o->threads) = (int)v;
        } else if (!strcmp(a, "--all"))
            o->all = 1;
        else if (!strcmp(a, "--interpret"))
            o->interpret = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            o->help = 1;
        else if (!strcmp(a, "--plugin")) {
            if (i + 1 >= argc)
                FAIL("--plugin needs a shared object (--plugin libmine.so)");
            if (o->nplugins == LOOMC_MAX_PLUGINS)
                FAIL("at most %d --plugin options", LOOMC_MAX_PLUGINS);
            o->plugins[o->nplugins++] = argv[++i];
        }
        else if (!strcmp(a, "--seed")) {
            if (i + 1 >= argc)
                FAIL("--seed needs a value");
            const char *v = argv[++i];
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 0);
            if (*end || end == v || errno || strchr(v, '-'))
                FAIL("--seed needs an integer from 0 to 2^64 - 1, not '%s'", v);
        } else if (a[0] == '-') {
            FAIL("unknown option '%s'", a);
        } else if (!o->name) {
            o->name = a;
        } else {
            FAIL("unexpected argument '%s'", a);
        }
        if (dst) {
            if (i + 1 >= argc)
                FAIL("%s needs a value", a);
            *dst = argv[++i];
            if (dst == &o->shape) {
                if (o->nshapes == LOOMC_MAX_SHAPES)
                    FAIL("at most %d --shape options", LOOMC_MAX_SHAPES);
                o->shapes[o->nshapes++] = *dst;
            }
        }
    }
    return 0;
}

/* The first key given twice in a key=value,... text, copied into key (n bytes); NULL when
 * none is. */
static const char *repeated_key(const char *text, char *key, size_t n)
{
    if (!text)
        return NULL;
    for (const char *a = text; *a; a += strcspn(a, ",") + (a[strcspn(a, ",")] ? 1 : 0)) {
        size_t la = strcspn(a, "=,");
        if (la == 0 || a[la] != '=')
            continue; /* not key=value: loom_params_parse says so */
        for (const char *b = a + strcspn(a, ","); *b;) {
            b++;
            size_t lb = strcspn(b, "=,");
            if (lb == la && b[lb] == '=' && !strncmp(a, b, la)) {
                snprintf(key, n, "%.*s", (int)la, a);
                return key;
            }
            b += strcspn(b, ",");
        }
    }
    return NULL;
}

int loomc_template_params(const loom_template *t, const char *shape_text, const char *config_text,
                          int64_t *shape, int64_t *config, char *err, size_t errlen)
{
    char why[512], key[128];
    if (repeated_key(shape_text, key, sizeof key))
        FAIL("--shape for %s: key '%s' is given twice", t->name, key);
    if (repeated_key(config_text, key, sizeof key))
        FAIL("--config for %s: key '%s' is given twice", t->name, key);
    if (loom_params_parse(t->shape, t->nshape, shape_text, shape, why, sizeof why))
        FAIL("--shape for %s: %s", t->name, why);
    if (loom_params_parse(t->config, t->nconfig, config_text, config, why, sizeof why))
        FAIL("--config for %s: %s", t->name, why);
    /* sizes and knobs are non-negative and, as grid and tile sizes are, below 2^31: a
     * template's arithmetic on them (products of dims, rounding up to powers of two) then
     * fits in 64 bits */
    for (int i = 0; i < t->nshape; i++)
        if (shape[i] < 0 || shape[i] > INT32_MAX)
            FAIL("--shape for %s: %s=%lld is out of range (0 to 2^31 - 1)", t->name, t->shape[i].key,
                 (long long)shape[i]);
    for (int i = 0; i < t->nconfig; i++)
        if (config[i] < 0 || config[i] > INT32_MAX)
            FAIL("--config for %s: %s=%lld is out of range (0 to 2^31 - 1)", t->name, t->config[i].key,
                 (long long)config[i]);
    return 0;
}

/* ---------------------------------------------------------------- help */

/* Each command: its synopsis, what it does, and its options (one a line, "  OPTION  text"). */
static const struct cmd_help {
    const char *name, *synopsis, *what, *options;
} cmds[] = {
    {"list", "loomc list", "Print every kernel template, one a line: the built-ins, then the plugins'.", ""},
    {"show", "loomc show NAME",
     "Print template NAME's shape and config keys with their defaults and docs.", ""},
    {"ir", "loomc ir NAME [--shape k=v,...] [--config k=v,...]",
     "Print the IR of NAME's kernel at the shape and config (the template's defaults for keys not given).",
     "  --shape k=v,...      the shape's keys (loomc show NAME lists them)\n"
     "  --config k=v,...     the config's keys\n"},
    {"emit", "loomc emit NAME [--shape k=v,...] [--config k=v,...] [--arch sm_90a] -o FILE.ptx\n"
             "loomc emit --all [--arch sm_90a] -o DIR",
     "Lower NAME's kernel to PTX in FILE.ptx; with --all, one DIR/NAME.ptx per template at its defaults.",
     "  --shape k=v,...      the shape's keys\n"
     "  --config k=v,...     the config's keys\n"
     "  --arch ARCH          the GPU architecture (default sm_90a)\n"
     "  -o FILE | DIR        where to write (required)\n"
     "  --all                every template (the plugins' too)\n"},
    {"run", "loomc run NAME [--shape k=v,...] [--config k=v,...] [--interpret] [--seed N]",
     "Run NAME's kernel on random inputs and check every output against the template's reference and\n"
     "error bound: on the GPU where there is one (and then on the interpreter too, to show that they\n"
     "agree), else on the interpreter.  Exit status 1 when a check fails.",
     "  --shape k=v,...      the shape's keys\n"
     "  --config k=v,...     the config's keys\n"
     "  --interpret          the interpreter only\n"
     "  --seed N             the inputs' seed (default 1)\n"},
    {"tune", "loomc tune NAME [--shape k=v,...]... [--force] [--max N] [--threads N] [--report FILE.svg]",
     "Autotune NAME for each --shape (none: the default shape): every config's fate and time, and the\n"
     "pick, which the tuning cache keeps (docs/tuning.md).",
     "  --shape k=v,...      a shape to tune (repeatable)\n"
     "  --force              re-tune a shape the cache has\n"
     "  --max N              time at most N configs, the cost model's best first\n"
     "  --threads N          compile threads (default: one a core)\n"
     "  --report FILE.svg    a plot of every config's time (re-tunes)\n"
     "  --seed N             the check's inputs' seed\n"},
    {"aot", "loomc aot NAME --shape k=v,... [--shape k=v,...]... [--config k=v,... | --tuned] [--stage N]\n"
            "          [--arch sm_90a[,sm_80]] [--torch] --prefix P -o DIR",
     "Write DIR/P.h and DIR/P.c: NAME's kernels at those shapes as cubins and PTX with a C launcher that\n"
     "needs neither loom nor libcuda at link time (docs/aot.md).  Each shape's config is --config, the\n"
     "tuner's with --tuned, else the template's default (the cost model's best valid config where the\n"
     "default cannot serve the shape).  With --torch also DIR/P_torch.py: the operations as PyTorch\n"
     "custom ops, torch.ops.loom.* (docs/torch.md).",
     "  --shape k=v,...      a shape (repeatable; at least one)\n"
     "  --config k=v,...     every shape's config\n"
     "  --tuned              each shape's config from the tuner (or its cache)\n"
     "  --stage N            ikbo_lce: the operation's stage, 0 to 4 (default 4)\n"
     "  --arch A[,B]         the architectures (default sm_90a)\n"
     "  --torch              also P_torch.py: torch.library custom ops that build and load P.c\n"
     "  --prefix P           the files' names and the functions' prefix: a C identifier (required)\n"
     "  -o DIR               where to write (required)\n"},
    {"help", "loomc help [COMMAND]", "Print this page, or COMMAND's (as `loomc COMMAND --help` does).", ""},
};
#define NCMDS ((int)(sizeof cmds / sizeof cmds[0]))

static const char common[] = "  --plugin LIB.so      first load LIB.so's templates (repeatable; docs/kernels.md)\n"
                             "  --help, -h           this command's help\n";

int loomc_command_known(const char *cmd)
{
    for (int i = 0; cmd && i < NCMDS; i++)
        if (!strcmp(cmds[i].name, cmd))
            return 1;
    return 0;
}

/* A synopsis, its lines after the first each led by `lead` (the first line's own lead is
 * the caller's). */
static void put_synopsis(FILE *f, const char *syn, const char *lead)
{
    for (const char *l = syn; *l;) {
        size_t n = strcspn(l, "\n");
        fprintf(f, "%s%.*s\n", l == syn ? "" : lead, (int)n, l);
        l += n + (l[n] == '\n');
    }
}

int loomc_help(FILE *f, const char *cmd)
{
    if (!cmd) {
        fprintf(f, "loomc -- loom's command line: its kernel templates, built, run, tuned and written ahead of time.\n\n"
                   "usage: loomc COMMAND [NAME] [OPTIONS]\n\ncommands:\n");
        for (int i = 0; i < NCMDS; i++) {
            fprintf(f, "  ");
            put_synopsis(f, cmds[i].synopsis, "  ");
        }
        fprintf(f, "\noptions of every command:\n%s\n"
                   "`loomc help COMMAND` or `loomc COMMAND --help` shows a command's options.  Exit status: 0 on\n"
                   "success, 1 on a failed check or compile, 2 on a usage error.\n",
                common);
        return 0;
    }
    for (int i = 0; i < NCMDS; i++)
        if (!strcmp(cmds[i].name, cmd)) {
            fprintf(f, "usage: ");
            put_synopsis(f, cmds[i].synopsis, "       ");
            fprintf(f, "\n%s\n", cmds[i].what);
            if (strcmp(cmd, "help"))
                fprintf(f, "\noptions:\n%s%s", cmds[i].options, common);
            return 0;
        }
    return -1;
}
