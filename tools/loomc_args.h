/*
 * loomc_args.h -- loomc's command line, parsed without printing (tools/loomc_args.c), so
 * that loomc and its fuzzer (tests/fuzz/fuzz_loomc_args.c) run the same code.
 */
#ifndef LOOMC_ARGS_H
#define LOOMC_ARGS_H

#include "loom.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define LOOMC_MAX_SHAPES 64
#define LOOMC_MAX_PLUGINS 16
typedef struct loomc_opts {
    const char *name, *shape, *config, *arch, *out, *report;
    const char *prefix;     /* aot: the generated files' name and functions' prefix */
    int all, interpret, force, max_configs, threads;
    int tuned;              /* aot: each shape's config from the tuner (or its cache) */
    int stage;              /* aot: ikbo_lce's operation stage (default 4) */
    int torch;              /* aot: P_torch.py too, the operations as PyTorch custom ops */
    uint64_t seed;
    const char *shapes[LOOMC_MAX_SHAPES]; /* every --shape, for tune and aot */
    int nshapes;
    const char *plugins[LOOMC_MAX_PLUGINS]; /* every --plugin, in order */
    int nplugins;
    int help;               /* --help (or -h) after the command: its help page */
} loomc_opts;

/* Parse argv[2..argc-1] (argv[1] is the command) into o; the strings stay argv's.  Returns
 * 0, or -1 with the message (without the "loomc: " prefix) in err. */
int loomc_parse_args(int argc, char **argv, loomc_opts *o, char *err, size_t errlen);

/* Whether cmd is one of loomc's commands (help among them). */
int loomc_command_known(const char *cmd);

/* The help page: loomc's commands and the options every command takes (cmd NULL), or
 * command cmd's with its options, written to f.  0, or -1 (nothing written) when cmd is no
 * command. */
int loomc_help(FILE *f, const char *cmd);

/* Parse a template's --shape and --config texts (NULL: the defaults) into shape and config
 * (LOOM_MAX_PARAMS each).  Returns 0, or -1 with the message in err ("--shape for NAME: ..."). */
int loomc_template_params(const loom_template *t, const char *shape_text, const char *config_text,
                          int64_t *shape, int64_t *config, char *err, size_t errlen);

#endif /* LOOMC_ARGS_H */
