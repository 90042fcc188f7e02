/*
 * loomc_test.h -- loomc's argument parser driven from a test: one command line as text.
 */
#ifndef LOOM_LOOMC_TEST_H
#define LOOM_LOOMC_TEST_H

#include "loomc_args.h"

#include <stdio.h>
#include <string.h>

/* Parse "cmd args..." as loomc does; returns loomc_parse_args's result, message in err. */
static inline int t_loomc(const char *line, loomc_opts *o, char *err, size_t n)
{
    static char buf[4096];
    static char *argv[200];
    snprintf(buf, sizeof buf, "%s", line);
    int argc = 0;
    argv[argc++] = "loomc";
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); t && argc < 199; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    argv[argc] = NULL;
    err[0] = 0;
    return loomc_parse_args(argc, argv, o, err, n);
}

#endif
