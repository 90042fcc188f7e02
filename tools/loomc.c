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
 *
 * Exit status: 0 on success, 1 on a failed check or compile, 2 on a usage error.
 */
#include "loom.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int usage(void)
{
    fprintf(stderr,
            "usage: loomc list\n"
            "       loomc show NAME\n"
            "       loomc ir NAME [--shape k=v,...] [--config k=v,...]\n"
            "       loomc emit NAME [--shape k=v,...] [--config k=v,...] [--arch sm_90a] -o FILE.ptx\n"
            "       loomc emit --all [--arch sm_90a] -o DIR\n"
            "       loomc run NAME [--shape k=v,...] [--config k=v,...] [--interpret] [--seed N]\n");
    return 2;
}

typedef struct opts {
    const char *name, *shape, *config, *arch, *out;
    int all, interpret;
    uint64_t seed;
} opts;

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.arch = "sm_90a", .seed = 1};
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
        else if (!strcmp(a, "--all"))
            o->all = 1;
        else if (!strcmp(a, "--interpret"))
            o->interpret = 1;
        else if (!strcmp(a, "--seed")) {
            if (i + 1 >= argc)
                return fprintf(stderr, "loomc: --seed needs a value\n"), -1;
            o->seed = strtoull(argv[++i], NULL, 0);
        } else if (a[0] == '-') {
            return fprintf(stderr, "loomc: unknown option '%s'\n", a), -1;
        } else if (!o->name) {
            o->name = a;
        } else {
            return fprintf(stderr, "loomc: unexpected argument '%s'\n", a), -1;
        }
        if (dst) {
            if (i + 1 >= argc)
                return fprintf(stderr, "loomc: %s needs a value\n", a), -1;
            *dst = argv[++i];
        }
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
        fprintf(stderr, "\n");
    }
    return t;
}

static int params(const loom_template *t, const opts *o, int64_t *shape, int64_t *config)
{
    char err[512];
    if (loom_params_parse(t->shape, t->nshape, o->shape, shape, err, sizeof err)) {
        fprintf(stderr, "loomc: --shape for %s: %s\n", t->name, err);
        return -1;
    }
    if (loom_params_parse(t->config, t->nconfig, o->config, config, err, sizeof err)) {
        fprintf(stderr, "loomc: --config for %s: %s\n", t->name, err);
        return -1;
    }
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
    if (params(t, o, shape, config))
        return 2;
    return emit_one(t, shape, config, o->arch, o->out);
}

static int cmd_run(const opts *o)
{
    const loom_template *t = find(o->name);
    int64_t shape[LOOM_MAX_PARAMS], config[LOOM_MAX_PARAMS];
    if (!t)
        return 2;
    if (params(t, o, shape, config))
        return 2;
    int rc = 0;
    char report[1024];
    loom_runtime *rt = loom_runtime_create(o->interpret ? LOOM_TARGET_INTERPRET : LOOM_TARGET_AUTO);
    if (!rt)
        return 1;
    if (!o->interpret && !loom_runtime_is_gpu(rt))
        printf("no GPU here (%s)\n", loom_runtime_error(rt));
    rc |= loom_template_check(rt, t, shape, config, o->seed, report, sizeof report) != LOOM_OK;
    printf("%s\n", report);
    if (loom_runtime_is_gpu(rt)) {
        loom_runtime *ri = loom_runtime_create(LOOM_TARGET_INTERPRET);
        rc |= loom_template_check(ri, t, shape, config, o->seed, report, sizeof report) != LOOM_OK;
        printf("%s\n", report);
        loom_runtime_destroy(ri);
    }
    loom_runtime_destroy(rt);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    opts o;
    if (parse(argc, argv, &o))
        return 2;
    const char *cmd = argv[1];
    if (!strcmp(cmd, "list")) {
        for (int i = 0; i < loom_template_count(); i++)
            printf("%s\n", loom_template_at(i)->name);
        return 0;
    }
    if (!strcmp(cmd, "show")) {
        const loom_template *t = find(o.name);
        if (!t)
            return 2;
        printf("%s: %s\nshape:\n", t->name, t->doc);
        for (int i = 0; i < t->nshape; i++)
            printf("  %-10s %8lld  %s\n", t->shape[i].key, (long long)t->shape[i].def, t->shape[i].doc);
        printf("config:\n");
        for (int i = 0; i < t->nconfig; i++)
            printf("  %-10s %8lld  %s\n", t->config[i].key, (long long)t->config[i].def, t->config[i].doc);
        return 0;
    }
    if (!strcmp(cmd, "ir")) {
        const loom_template *t = find(o.name);
        int64_t shape[LOOM_MAX_PARAMS], config[LOOM_MAX_PARAMS];
        if (!t || params(t, &o, shape, config))
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
    fprintf(stderr, "loomc: unknown command '%s'\n", cmd);
    return usage();
}
