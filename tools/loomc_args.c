/*
 * loomc_args.c -- loomc's argument parser (loomc_args.h).  It prints nothing: loomc prints
 * the message it returns, and the fuzzer calls it on arbitrary argument vectors.
 *
 * Nothing is taken silently: an option given twice is refused (the last one winning would
 * hide a typo), except --shape for tune and aot, which take a list of shapes; a key given
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
                                   "--force", "--max", "--threads", "--all", "--interpret", "--seed"};
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
