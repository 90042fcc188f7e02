/*
 * loomc_args.c -- loomc's argument parser (loomc_args.h).  It prints nothing: loomc prints
 * the message it returns, and the fuzzer calls it on arbitrary argument vectors.
 */
#include "loomc_args.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) return snprintf(err, errlen, __VA_ARGS__), -1

int loomc_parse_args(int argc, char **argv, loomc_opts *o, char *err, size_t errlen)
{
    *o = (loomc_opts){.arch = "sm_90a", .seed = 1, .stage = 4};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
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
            if (*end || v < 1 || v > 1 << 30)
                FAIL("%s needs a positive integer, not '%s'", a, argv[i]);
            *(a[2] == 'm' ? &o->max_configs : &o->threads) = (int)v;
        } else if (!strcmp(a, "--all"))
            o->all = 1;
        else if (!strcmp(a, "--interpret"))
            o->interpret = 1;
        else if (!strcmp(a, "--seed")) {
            if (i + 1 >= argc)
                FAIL("--seed needs a value");
            o->seed = strtoull(argv[++i], NULL, 0);
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

int loomc_template_params(const loom_template *t, const char *shape_text, const char *config_text,
                          int64_t *shape, int64_t *config, char *err, size_t errlen)
{
    char why[512];
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
