/*
 * fuzz_loomc_args.c -- loomc's command line (tools/loomc_args.c) and what it feeds: the
 * --shape and --config texts parsed against a template's parameters
 * (loom_params_parse), then, as `loomc ir` and `loomc run` would, the template's build,
 * verify, print and grid at the parsed values.
 *
 * The input is the argument vector, one argument a line: the first line is the command,
 * the rest its options ("ir\ngemm\n--shape\nM=64,N=64\n").  Whatever the values (zero,
 * negative, huge, not numbers), a template builds a kernel or refuses with a message.
 */
#include "loomc_args.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGV 256

static void fail(const char *what, const char *name)
{
    fprintf(stderr, "fuzz_loomc_args: %s (%s)\n", what, name);
    abort();
}

static void try_template(const loom_template *t, const char *shape_text, const char *config_text, bool build)
{
    int64_t shape[LOOM_MAX_PARAMS], config[LOOM_MAX_PARAMS];
    char err[1024] = "";
    if (loomc_template_params(t, shape_text, config_text, shape, config, err, sizeof err) != 0) {
        if (!err[0])
            fail("a refused --shape or --config left no message", t->name);
        return;
    }
    char text[1024];
    loom_params_format(t->shape, t->nshape, shape, text, sizeof text);
    loom_params_format(t->config, t->nconfig, config, text, sizeof text);
    if (!build)
        return;
    char why[512] = "";
    if (t->valid)
        t->valid(shape, config, why, sizeof why);
    err[0] = 0;
    loom_kernel *k = t->build(shape, config, err, sizeof err);
    if (!k) {
        if (!err[0])
            fail("a template refused a shape or config with no message", t->name);
        return;
    }
    if (loom_verify(k) == LOOM_OK) {
        int grid[3];
        t->grid(shape, config, grid);
        if (t->cost)
            t->cost(shape, config);
    }
    loom_print(k);
    loom_kernel_destroy(k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    char *argv[MAX_ARGV + 1];
    int argc = 0;
    argv[argc++] = "loomc";
    for (char *p = text; argc < MAX_ARGV;) {
        argv[argc++] = p;
        char *nl = memchr(p, '\n', (size_t)(text + size - p));
        if (!nl)
            break;
        *nl = 0;
        p = nl + 1;
    }
    argv[argc] = NULL;
    loomc_opts o;
    char err[512] = "";
    if (loomc_parse_args(argc, argv, &o, err, sizeof err) != 0) {
        if (!err[0])
            fail("a refused command line left no message", "");
        free(text);
        return 0;
    }
    const loom_template *t = o.name ? loom_template_find(o.name) : NULL;
    if (!t) /* an unknown name is loomc's to report; try the input's text on some template */
        t = loom_template_at((int)(size % (size_t)loom_template_count()));
    /* `loomc ir`, `emit`, `run` build at the last --shape; `tune` parses every --shape */
    bool build = !strcmp(argv[1], "ir") || !strcmp(argv[1], "emit") || !strcmp(argv[1], "run");
    try_template(t, o.shape, o.config, build);
    for (int i = 0; i + 1 < o.nshapes && i < 4; i++)
        try_template(t, o.shapes[i], NULL, false);
    free(text);
    return 0;
}
