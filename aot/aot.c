/*
 * aot.c -- ahead of time: a template at a list of shapes, each with its config, written out
 * as one C file and its header that launch the kernels without loom (loom.h:
 * loom_aot_write; `loomc aot` is its command line; docs/aot.md the generated API).
 *
 * The path of a file:
 *   1. every kernel is built, verified, lowered to PTX for each architecture asked for
 *      (codegen/, cg_compile) and assembled by the toolkit's ptxas as a whole program, so
 *      the cubin keeps setmaxnreg (runtime/, rt_ptxas_compile); kernels whose PTX is the
 *      same are one kernel in the file (the LCE's stage 4 is the template's own kernel);
 *   2. what a launch needs of a kernel is written as tables: its images (cubin and PTX per
 *      architecture), threads, shared memory, arguments, and per TMA descriptor every
 *      argument of cuTensorMapEncodeTiled but the base address (runtime/tma.c checks and
 *      orders them: rt_tma_plan_make, the same code a JIT launch runs);
 *   3. per template, a dispatch table (shape -> config, kernel, grid) and its launch
 *      function; for ikbo_lce and ikbo_fa also the whole operation, from the same
 *      descriptions loom's C API runs (ik_stage; fa_units);
 *   4. the run-time code, which is not generated but copied in: aot/aot_rt.c (driver,
 *      modules, launches), aot/aot_lce.c, templates/ikbo_fa_units.h and aot/aot_fa.c.  The
 *      build embeds their text (aot_text.c, made by cmake/embed.cmake), so that what is
 *      copied is what the tests compiled.
 *
 * Prefix: aot_.
 */
#include "aot.h"
#include "../runtime/gpu.h"
#include "../runtime/tma.h"
#include "../templates/ikbo_fa.h"
#include "../templates/ikbo_lce.h"
#include "codegen.h"

#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_ARCH 4

typedef struct image {
    int sm;         /* 90 for sm_90a */
    char *ptx;
    void *cubin;
    size_t ncubin;
} image;

/* A kernel of the file. */
typedef struct kern {
    char name[128];
    char what[200]; /* for its comment: the template or step and the shape */
    int nimg;
    image img[MAX_ARCH];
    unsigned threads, smem;
    int nargs;
    char argname[LOOM_MAX_ARGS][64];
    unsigned char kind[LOOM_MAX_ARGS]; /* AOT_ARG_* of aot_rt.c */
    int ntma;
    rt_tma_plan tma[CG_MAX_TMA];
    int tma_arg[CG_MAX_TMA];
} kern;

enum { ARG_PTR, ARG_I32, ARG_I64, ARG_F32 }; /* aot_rt.c's AOT_ARG_* */

typedef struct gen {
    const loom_aot_request *r;
    const loom_template *t;
    int narch;
    char arch[MAX_ARCH][16];
    int sm[MAX_ARCH];
    kern *k;
    int nk, capk;
    int nkeys;          /* the template's kernel-shaping shape keys */
    int key[LOOM_MAX_PARAMS]; /* their indices into the shape vector */
    int *row_kernel;    /* per shape: the template kernel's index */
    int (*row_grid)[3];
    char upper[80];     /* the prefix in capitals: the status constants' */
    ik_stage *lce;      /* ikbo_lce: each shape's stage, as data */
    int (*lce_kernel)[IK_MAX_STEPS]; /* and its steps' kernels */
    char *err;
    size_t errlen;
} gen;

static loom_status gfail(gen *g, loom_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static loom_status gfail(gen *g, loom_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, g->errlen, fmt, ap);
    va_end(ap);
    return st;
}

/* ---------------------------------------------------------------- compiling */

/* "sm_90a" -> 90; -1 when it is not an architecture name. */
static int arch_sm(const char *a)
{
    if (strncmp(a, "sm_", 3) || !isdigit((unsigned char)a[3]) || !isdigit((unsigned char)a[4]))
        return -1;
    if (a[5] && !(a[5] == 'a' && !a[6]))
        return -1;
    return (a[3] - '0') * 10 + (a[4] - '0');
}

static void shape_text(const gen *g, const int64_t *shape, char *buf, size_t n)
{
    loom_params_format(g->t->shape, g->t->nshape, shape, buf, n);
}

/* Add kernel k (verified and compiled here; destroyed by the caller) and return its index,
 * or -1 with the message in g->err.  A kernel with the PTX of one already in the file is
 * that one. */
static int kern_add(gen *g, loom_kernel *k, const char *what)
{
    if (loom_verify(k) != LOOM_OK) {
        gfail(g, LOOM_ERR_VERIFY, "%s: %s", what, loom_kernel_errors(k));
        return -1;
    }
    kern nk;
    memset(&nk, 0, sizeof nk);
    snprintf(nk.name, sizeof nk.name, "%s", loom_kernel_name(k));
    snprintf(nk.what, sizeof nk.what, "%s", what);
    nk.threads = (unsigned)loom_kernel_num_warps(k) * 32u;
    nk.nargs = loom_kernel_num_args(k);
    for (int i = 0; i < nk.nargs; i++) {
        loom_arg_info ai;
        loom_kernel_arg_info(k, i, &ai);
        snprintf(nk.argname[i], sizeof nk.argname[i], "%s", ai.name ? ai.name : "arg");
        if (ai.is_tensor)
            nk.kind[i] = ARG_PTR;
        else if (ai.dtype == LOOM_I32)
            nk.kind[i] = ARG_I32;
        else if (ai.dtype == LOOM_I64)
            nk.kind[i] = ARG_I64;
        else if (ai.dtype == LOOM_F32)
            nk.kind[i] = ARG_F32;
        else {
            gfail(g, LOOM_ERR_UNSUPPORTED, "%s: argument '%s' is a %s scalar, which a launch cannot pass", what,
                  nk.argname[i], loom_dtype_name(ai.dtype));
            return -1;
        }
    }
    char err[4096];
    for (int a = 0; a < g->narch; a++) {
        cg_result res;
        /* no hang check (LOOM_HANG_CHECK, debug builds): its record is set up by loom's
         * runtime, which a generated file does not have */
        const cg_options opt = {.hang_check_ms = 0};
        loom_status st = cg_compile_opts(k, g->arch[a], &opt, &res, err, sizeof err);
        if (st != LOOM_OK) {
            gfail(g, st, "%s: compiling for %s: %s", what, g->arch[a], err);
            for (int j = 0; j < a; j++)
                free(nk.img[j].ptx), free(nk.img[j].cubin);
            return -1;
        }
        if (a == 0) {
            /* the same PTX: the same kernel */
            for (int i = 0; i < g->nk; i++)
                if (!strcmp(g->k[i].img[0].ptx, res.ptx)) {
                    cg_result_free(&res);
                    return i;
                }
            nk.smem = (unsigned)res.smem_bytes;
            nk.ntma = res.ntma;
            for (int t = 0; t < res.ntma; t++) {
                loom_arg_info ai;
                loom_kernel_arg_info(k, res.tma[t].arg, &ai);
                nk.tma_arg[t] = res.tma[t].arg;
                if ((st = rt_tma_plan_make(&res.tma[t], &ai, 0, &nk.tma[t], err, sizeof err)) != LOOM_OK) {
                    gfail(g, st, "%s: %s", what, err);
                    cg_result_free(&res);
                    return -1;
                }
            }
        }
        image *im = &nk.img[nk.nimg++];
        im->sm = g->sm[a];
        im->ptx = res.ptx;
        res.ptx = NULL;
        cg_result_free(&res);
        if ((st = rt_ptxas_compile(im->ptx, g->arch[a], &im->cubin, &im->ncubin, err, sizeof err)) != LOOM_OK) {
            gfail(g, st, "%s: the cubin for %s: %s (loomc aot needs the CUDA toolkit's ptxas: LOOM_PTXAS names it)",
                  what, g->arch[a], err);
            for (int j = 0; j < nk.nimg; j++)
                free(nk.img[j].ptx), free(nk.img[j].cubin);
            return -1;
        }
    }
    if (g->nk == g->capk) {
        int cap = g->capk ? 2 * g->capk : 8;
        kern *nkp = realloc(g->k, (size_t)cap * sizeof *nkp);
        if (!nkp) {
            gfail(g, LOOM_ERR_NOMEM, "out of host memory");
            return -1;
        }
        g->k = nkp, g->capk = cap;
    }
    g->k[g->nk] = nk;
    return g->nk++;
}

/* Build (template build function), add, destroy. */
static int kern_build_add(gen *g, loom_kernel *k, const char *why, const char *what)
{
    if (!k) {
        gfail(g, LOOM_ERR_INVALID, "%s: %s", what, why && *why ? why : "the build failed");
        return -1;
    }
    int i = kern_add(g, k, what);
    loom_kernel_destroy(k);
    return i;
}

static void gen_free(gen *g)
{
    for (int i = 0; i < g->nk; i++)
        for (int j = 0; j < g->k[i].nimg; j++)
            free(g->k[i].img[j].ptx), free(g->k[i].img[j].cubin);
    free(g->k);
    free(g->row_kernel);
    free(g->row_grid);
    for (int i = 0; g->lce && i < g->r->nshapes; i++)
        ik_stage_free(&g->lce[i]);
    free(g->lce);
    free(g->lce_kernel);
}

/* ---------------------------------------------------------------- writing: helpers */

/* A C identifier from an argument name: other characters become '_', and the names the
 * launch functions use themselves get a trailing '_'. */
static void c_ident(const char *s, char *out, size_t n)
{
    size_t w = 0;
    if (!isalpha((unsigned char)*s) && *s != '_' && w + 1 < n)
        out[w++] = 'a';
    for (; *s && w + 2 < n; s++)
        out[w++] = isalnum((unsigned char)*s) ? *s : '_';
    out[w] = 0;
    if (!strcmp(out, "shape") || !strcmp(out, "stream") || !strcmp(out, "r") || !strcmp(out, "k") ||
        !strcmp(out, "args"))
        snprintf(out + w, n - w, "_");
}

static void put_bytes(FILE *f, const char *name, const unsigned char *p, size_t n, int nul)
{
    fprintf(f, "static const _Alignas(16) unsigned char %s[%zu] = {", name, n + (nul ? 1 : 0));
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s%u,", i % 24 ? "" : "\n    ", p[i]);
    if (nul)
        fprintf(f, "0,");
    fprintf(f, "\n};\n");
}

static void put_i64s(FILE *f, const int64_t *v, int n)
{
    fputc('{', f);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%lld", i ? ", " : "", (long long)v[i]);
    fputc('}', f);
}

/* Each argument kind's C type in a launch function and its name in aot_rt.c's tables. */
static const struct {
    const char *c, *name;
} kinds[] = {[ARG_PTR] = {"CUdeviceptr", "AOT_ARG_PTR"},
             [ARG_I32] = {"int32_t", "AOT_ARG_I32"},
             [ARG_I64] = {"int64_t", "AOT_ARG_I64"},
             [ARG_F32] = {"float", "AOT_ARG_F32"}};

static const char *kind_c(int kind) { return kinds[kind].c; }
static const char *kind_name(int kind) { return kinds[kind].name; }

/* ---------------------------------------------------------------- writing: kernels */

static void put_kernels(gen *g, FILE *f)
{
    fprintf(f, "\n/* ================================================================ the kernels\n"
               " * Each kernel's images (a cubin per architecture, and the PTX it came from), then what a\n"
               " * launch needs: threads a CTA, dynamic shared memory, the arguments, and the TMA\n"
               " * descriptors it takes after them (cuTensorMapEncodeTiled's arguments but the base). */\n");
    for (int i = 0; i < g->nk; i++) {
        const kern *k = &g->k[i];
        fprintf(f, "\n/* kernel %d: '%s', %s */\n", i, k->name, k->what);
        for (int j = 0; j < k->nimg; j++) {
            char nm[64];
            snprintf(nm, sizeof nm, "aot_k%d_sm%d_cubin", i, k->img[j].sm);
            put_bytes(f, nm, k->img[j].cubin, k->img[j].ncubin, 0);
            snprintf(nm, sizeof nm, "aot_k%d_sm%d_ptx", i, k->img[j].sm);
            put_bytes(f, nm, (const unsigned char *)k->img[j].ptx, strlen(k->img[j].ptx), 1);
        }
        fprintf(f, "static const aot_image aot_k%d_images[] = {\n", i);
        for (int j = 0; j < k->nimg; j++)
            fprintf(f, "    {%d, aot_k%d_sm%d_cubin, sizeof aot_k%d_sm%d_cubin, aot_k%d_sm%d_ptx},\n", k->img[j].sm,
                    i, k->img[j].sm, i, k->img[j].sm, i, k->img[j].sm);
        fprintf(f, "};\nstatic const char *const aot_k%d_arg_names[] = {", i);
        for (int a = 0; a < k->nargs; a++)
            fprintf(f, "%s\"%s\"", a ? ", " : "", k->argname[a]);
        fprintf(f, "};\nstatic const unsigned char aot_k%d_arg_kinds[] = {", i);
        for (int a = 0; a < k->nargs; a++)
            fprintf(f, "%s%s", a ? ", " : "", kind_name(k->kind[a]));
        fprintf(f, "};\n");
        if (k->ntma) {
            fprintf(f, "/* {argument, data type, rank, dims, byte strides, box, element strides, interleave, "
                       "swizzle, L2 promotion, out-of-bounds fill} */\n"
                       "static const aot_tma aot_k%d_tma[] = {\n", i);
            for (int t = 0; t < k->ntma; t++) {
                const rt_tma_plan *p = &k->tma[t];
                fprintf(f, "    {%d, %d, %u, {", k->tma_arg[t], p->dtype, p->rank);
                for (uint32_t d = 0; d < p->rank; d++)
                    fprintf(f, "%s%llu", d ? ", " : "", (unsigned long long)p->dims[d]);
                fprintf(f, "}, {");
                for (uint32_t d = 0; d + 1 < p->rank; d++)
                    fprintf(f, "%s%llu", d ? ", " : "", (unsigned long long)p->strides[d]);
                fprintf(f, "%s}, {", p->rank > 1 ? "" : "0");
                for (uint32_t d = 0; d < p->rank; d++)
                    fprintf(f, "%s%u", d ? ", " : "", p->box[d]);
                fprintf(f, "}, {");
                for (uint32_t d = 0; d < p->rank; d++)
                    fprintf(f, "%s%u", d ? ", " : "", p->elem_strides[d]);
                fprintf(f, "}, %d, %d, %d, %d},\n", p->interleave, p->swizzle, p->l2_promotion, p->oob_fill);
            }
            fprintf(f, "};\n");
        }
    }
    fprintf(f, "\n/* {PTX entry, images, threads a CTA, dynamic shared memory, arguments, TMA descriptors} */\n"
               "static const aot_kernel aot_kernels[%d] = {\n", g->nk);
    for (int i = 0; i < g->nk; i++) {
        const kern *k = &g->k[i];
        fprintf(f, "    {\"%s\", %d, aot_k%d_images, %u, %u, %d, aot_k%d_arg_names, aot_k%d_arg_kinds, %d, ", k->name,
                k->nimg, i, k->threads, k->smem, k->nargs, i, i, k->ntma);
        if (k->ntma)
            fprintf(f, "aot_k%d_tma},\n", i);
        else
            fprintf(f, "NULL},\n");
    }
    fprintf(f, "};\nstatic aot_kstate aot_states[%d];\n", g->nk);
}

/* ---------------------------------------------------------------- writing: a template */

static void key_values(const gen *g, const int64_t *shape, int64_t *out)
{
    for (int i = 0; i < g->nkeys; i++)
        out[i] = shape[g->key[i]];
}

/* The shape struct's declaration, in the header. */
static void put_shape_struct(const gen *g, FILE *h, const char *P)
{
    const loom_template *t = g->t;
    fprintf(h, "\n/* ---------------------------------------------------------------- %s\n * %s\n */\n", t->name,
            t->doc ? t->doc : "");
    fprintf(h, "typedef struct %s_%s_shape {\n", P, t->name);
    for (int i = 0; i < g->nkeys; i++) {
        const loom_param *p = &t->shape[g->key[i]];
        fprintf(h, "    int64_t %s; /* %s", p->key, p->doc ? p->doc : "");
        if (!strcmp(p->key, "dtype") || !strcmp(p->key, "odtype")) /* loom_dtype's values */
            for (int d = 0; d < LOOM_DTYPE_COUNT; d++)
                fprintf(h, "%s%d: %s%s", d ? ", " : " (", d, loom_dtype_name((loom_dtype)d), d + 1 < LOOM_DTYPE_COUNT ? "" : ")");
        fprintf(h, " */\n");
    }
    fprintf(h, "} %s_%s_shape;\n", P, t->name);
}

/* The argument list of the template's kernel: ", CUdeviceptr A, ..." */
static void put_params(FILE *f, const kern *k)
{
    for (int a = 0; a < k->nargs; a++) {
        char id[80];
        c_ident(k->argname[a], id, sizeof id);
        fprintf(f, ", %s %s", kind_c(k->kind[a]), id);
    }
}

static loom_status put_template(gen *g, FILE *h, FILE *f)
{
    const loom_aot_request *r = g->r;
    const loom_template *t = g->t;
    const char *P = r->prefix, *T = t->name, *U = g->upper;
    /* one argument list for every shape: the launch function has one signature */
    const kern *k0 = &g->k[g->row_kernel[0]];
    for (int i = 1; i < r->nshapes; i++) {
        const kern *ki = &g->k[g->row_kernel[i]];
        bool same = ki->nargs == k0->nargs;
        for (int a = 0; same && a < k0->nargs; a++)
            same = !strcmp(ki->argname[a], k0->argname[a]) && ki->kind[a] == k0->kind[a];
        if (!same)
            return gfail(g, LOOM_ERR_UNSUPPORTED,
                         "the kernels of %s at shape 1 and shape %d take different arguments, so one launch "
                         "function cannot serve both: generate them into two files (two prefixes)",
                         T, i + 1);
    }
    put_shape_struct(g, h, P);
    fprintf(h, "/* The config generated for *shape (\"k=v,...\"), or NULL with the reason in %s_last_error()\n"
               " * when the shape is not one of this file's.  Needs no GPU. */\n"
               "const char *%s_%s_config(const %s_%s_shape *shape);\n",
            P, P, T, P, T);
    fprintf(h, "/* Launch %s's kernel at *shape, one of the shapes this file was generated for, with its\n"
               " * arguments (device pointers of at least the sizes the shape needs, 16-byte aligned) on\n"
               " * stream (NULL: the default stream); asynchronous. */\n"
               "%s_status %s_%s_launch(const %s_%s_shape *shape",
            T, P, P, T, P, T);
    put_params(h, k0);
    fprintf(h, ", CUstream stream);\n");

    /* the table */
    fprintf(f, "\n/* ================================================================ %s\n"
               " * The dispatch table: a row per shape generated (loom builds a kernel per shape, so a\n"
               " * launch takes the row of its exact shape): its config, kernel and grid. */\n",
            T);
    fprintf(f, "enum { aot_%s_ROWS = %d, aot_%s_KEYS = %d };\n", T, r->nshapes, T, g->nkeys);
    fprintf(f, "static const char *const aot_%s_keys[aot_%s_KEYS] = {", T, T);
    for (int i = 0; i < g->nkeys; i++)
        fprintf(f, "%s\"%s\"", i ? ", " : "", t->shape[g->key[i]].key);
    fprintf(f, "};\nstatic const int64_t aot_%s_shapes[aot_%s_ROWS][aot_%s_KEYS] = {\n", T, T, T);
    for (int i = 0; i < r->nshapes; i++) {
        int64_t v[LOOM_MAX_PARAMS];
        key_values(g, r->shapes[i], v);
        fprintf(f, "    ");
        put_i64s(f, v, g->nkeys);
        fprintf(f, ",\n");
    }
    fprintf(f, "};\nstatic const char *const aot_%s_configs[aot_%s_ROWS] = {\n", T, T);
    for (int i = 0; i < r->nshapes; i++) {
        char c[512];
        loom_params_format(t->config, t->nconfig, r->configs[i], c, sizeof c);
        fprintf(f, "    \"%s\",\n", c);
    }
    fprintf(f, "};\nstatic const int aot_%s_kernel[aot_%s_ROWS] = {", T, T);
    for (int i = 0; i < r->nshapes; i++)
        fprintf(f, "%s%d", i ? ", " : "", g->row_kernel[i]);
    fprintf(f, "};\nstatic const unsigned aot_%s_grid[aot_%s_ROWS][3] = {", T, T);
    for (int i = 0; i < r->nshapes; i++)
        fprintf(f, "%s{%d, %d, %d}", i ? ", " : "", g->row_grid[i][0], g->row_grid[i][1], g->row_grid[i][2]);
    fprintf(f, "};\n");

    fprintf(f, "\n/* The row of *shape, or -1 with the message set (fn names the caller). */\n"
               "static int aot_%s_row(const char *fn, const %s_%s_shape *shape)\n{\n"
               "    if (!shape)\n        return aot_fail(AOT_ERR_INVALID, \"%%s: shape is NULL\", fn), -1;\n"
               "    const int64_t want[aot_%s_KEYS] = {",
            T, P, T, T);
    for (int i = 0; i < g->nkeys; i++)
        fprintf(f, "%sshape->%s", i ? ", " : "", t->shape[g->key[i]].key);
    fprintf(f, "};\n    int r = aot_find_row(&aot_%s_shapes[0][0], aot_%s_ROWS, want, aot_%s_KEYS);\n"
               "    if (r < 0)\n"
               "        aot_no_row(fn, \"%s\", &aot_%s_shapes[0][0], aot_%s_ROWS, want, aot_%s_keys, aot_%s_KEYS);\n"
               "    return r;\n}\n",
            T, T, T, T, T, T, T, T);
    fprintf(f, "\nconst char *%s_%s_config(const %s_%s_shape *shape)\n{\n"
               "    int r = aot_%s_row(\"%s_%s_config\", shape);\n    return r < 0 ? NULL : aot_%s_configs[r];\n}\n",
            P, T, P, T, T, P, T, T);
    fprintf(f, "\n%s_status %s_%s_launch(const %s_%s_shape *shape", P, P, T, P, T);
    put_params(f, k0);
    fprintf(f, ", CUstream stream)\n{\n    int r = aot_%s_row(\"%s_%s_launch\", shape);\n"
               "    if (r < 0)\n        return %s_ERR_INVALID;\n    void *args[] = {",
            T, P, T, U);
    for (int a = 0; a < k0->nargs; a++) {
        char id[80];
        c_ident(k0->argname[a], id, sizeof id);
        fprintf(f, "%s&%s", a ? ", " : "", id);
    }
    fprintf(f, "};\n    int k = aot_%s_kernel[r];\n"
               "    return (%s_status)aot_launch(\"%s_%s_launch\", &aot_kernels[k], &aot_states[k], aot_%s_grid[r], "
               "args, stream);\n}\n",
            T, P, P, T, T);
    return LOOM_OK;
}

/* ---------------------------------------------------------------- writing: the operations */

static int64_t sval(const gen *g, const int64_t *shape, const char *key)
{
    for (int i = 0; i < g->t->nshape; i++)
        if (!strcmp(g->t->shape[i].key, key))
            return shape[i];
    return 0;
}

/* ikbo_lce: each shape's stage as data, its kernels added to the file's. */
static loom_status lce_compile(gen *g)
{
    const loom_aot_request *r = g->r;
    if (r->stage < 0 || r->stage > LOOM_IKBO_PERSISTENT)
        return gfail(g, LOOM_ERR_INVALID, "--stage %d is not 0 to 4", r->stage);
    g->lce = calloc((size_t)(unsigned)r->nshapes, sizeof *g->lce);
    g->lce_kernel = calloc((size_t)(unsigned)r->nshapes, sizeof *g->lce_kernel);
    if (!g->lce || !g->lce_kernel)
        return gfail(g, LOOM_ERR_NOMEM, "out of host memory");
    for (int i = 0; i < r->nshapes; i++) {
        const int64_t *sh = r->shapes[i];
        loom_ikbo_lce_shape s = {sval(g, sh, "B"),  sval(g, sh, "U"),  sval(g, sh, "M"),           sval(g, sh, "N"),
                                 sval(g, sh, "Ku"), sval(g, sh, "Kc"), (loom_dtype)sval(g, sh, "dtype")};
        loom_ikbo_lce_config c = ik_config_of(r->configs[i]);
        char err[400], text[400];
        shape_text(g, sh, text, sizeof text);
        loom_status st = ik_stage_make(&s, (loom_ikbo_stage)r->stage, &c, NULL, &g->lce[i], err, sizeof err);
        if (st != LOOM_OK)
            return gfail(g, st, "ikbo_lce stage %d at %s: %s", r->stage, text, err);
        for (int j = 0; j < g->lce[i].nsteps; j++) {
            char what[500];
            snprintf(what, sizeof what, "ikbo_lce stage %d, step %d at %s", r->stage, j + 1, text);
            if ((g->lce_kernel[i][j] = kern_add(g, g->lce[i].step[j].k, what)) < 0)
                return LOOM_ERR_COMPILE;
        }
    }
    return LOOM_OK;
}

static loom_status put_lce(gen *g, FILE *h, FILE *f)
{
    const loom_aot_request *r = g->r;
    const char *P = r->prefix, *U = g->upper;
    ik_stage *runs = g->lce;
    int (*kidx)[IK_MAX_STEPS] = g->lce_kernel;
    fprintf(h, "\n/* The IKBO linear compression as an operation (stage %d, %s), as loom_ikbo_lce_prepare and\n"
               " * loom_ikbo_lce_run: prepare once per shape (the weights w_user [M, Ku] and w_cand [M, Kc],\n"
               " * host arrays of the dtype, are padded and uploaded; the operation's buffers allocated),\n"
               " * then run per request on device buffers e_user [U, Ku, N], e_cand [B, Kc, N],\n"
               " * cand_to_user [B] int32 (each in [0, U)) and out [B, M, N].  One operation is used by one\n"
               " * thread at a time. */\n"
               "typedef struct %s_ikbo_lce %s_ikbo_lce;\n"
               "%s_status %s_ikbo_lce_prepare(const %s_ikbo_lce_shape *shape, const void *w_user, const void "
               "*w_cand, %s_ikbo_lce **out);\n"
               "%s_status %s_ikbo_lce_run(%s_ikbo_lce *op, CUdeviceptr e_user, CUdeviceptr e_cand, CUdeviceptr "
               "cand_to_user, CUdeviceptr out, CUstream stream);\n"
               "void %s_ikbo_lce_destroy(%s_ikbo_lce *op);\n",
            r->stage, loom_ikbo_stage_name((loom_ikbo_stage)r->stage), P, P, P, P, P, P, P, P, P, P, P);
    fprintf(f, "\n/* ================================================================ the IKBO LCE operation */\n"
               "enum { AOT_LCE_NBUF = %d, AOT_LCE_CALLER = %d, AOT_LCE_FLAGS = %d, AOT_LCE_EPOCH = %d };\n",
            IK_NBUF, IK_CALLER_BUFS, IK_FLAGS, IK_EPOCH);
    fputs((const char *)aot_text_lce, f);
    fprintf(f, "\n/* Stage %d (%s) at each shape of the dispatch table, in its order: {M, Ku, Kc, bytes an\n"
               " * element, the owned buffers' bytes, the weights' fills {buffer, weight, ld, column}, the\n"
               " * kernels {kernel, grid, arguments' sources}, the epoch's step}.  Buffers: 0 e_user,\n"
               " * 1 e_cand, 2 cand_to_user, 3 out, then the operation's; source %d is the epoch. */\n"
               "static const aot_lce_plan aot_lce_plans[aot_ikbo_lce_ROWS] = {\n",
            r->stage, loom_ikbo_stage_name((loom_ikbo_stage)r->stage), IK_EPOCH);
    for (int i = 0; i < r->nshapes; i++) {
        const ik_stage *s = &runs[i];
        const int64_t *sh = r->shapes[i];
        fprintf(f, "    {%lld, %lld, %lld, %zu, {", (long long)sval(g, sh, "M"), (long long)sval(g, sh, "Ku"),
                (long long)sval(g, sh, "Kc"), loom_dtype_size((loom_dtype)sval(g, sh, "dtype")));
        for (int b = 0; b < IK_NBUF; b++)
            fprintf(f, "%s%zu", b ? ", " : "", s->bytes[b]);
        fprintf(f, "},\n     %d, {", s->nfill);
        for (int j = 0; j < s->nfill; j++)
            fprintf(f, "%s{%d, %d, %lld, %lld}", j ? ", " : "", s->fill[j].buf, s->fill[j].weight,
                    (long long)s->fill[j].ld, (long long)s->fill[j].col0);
        fprintf(f, "},\n     %d, {", s->nsteps);
        for (int j = 0; j < s->nsteps; j++) {
            fprintf(f, "%s{%d, {%d, %d, %d}, %d, {", j ? ",\n          " : "", kidx[i][j], s->step[j].grid[0],
                    s->step[j].grid[1], s->step[j].grid[2], s->step[j].nargs);
            for (int a = 0; a < s->step[j].nargs; a++)
                fprintf(f, "%s%d", a ? ", " : "", s->step[j].arg[a]);
            fprintf(f, "}}");
        }
        fprintf(f, "},\n     %lld},\n", (long long)s->epoch_step);
    }
    fprintf(f, "};\n");
    fprintf(f, "\nstruct %s_ikbo_lce {\n    struct aot_lce_op *op;\n};\n", P);
    fprintf(f, "\n%s_status %s_ikbo_lce_prepare(const %s_ikbo_lce_shape *shape, const void *w_user, const void "
               "*w_cand, %s_ikbo_lce **out)\n{\n"
               "    const char *fn = \"%s_ikbo_lce_prepare\";\n"
               "    if (out)\n        *out = NULL;\n"
               "    if (!out || !w_user || !w_cand)\n"
               "        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: %%s is NULL\", fn, !out ? \"out\" : "
               "!w_user ? \"w_user\" : \"w_cand\");\n"
               "    int r = aot_ikbo_lce_row(fn, shape);\n"
               "    if (r < 0)\n        return %s_ERR_INVALID;\n"
               "    %s_ikbo_lce *p = calloc(1, sizeof *p);\n"
               "    if (!p)\n        return (%s_status)aot_fail(AOT_ERR_NOMEM, \"%%s: out of host memory\", fn);\n"
               "    int st = aot_lce_prepare(fn, &aot_lce_plans[r], w_user, w_cand, &p->op);\n"
               "    if (st != AOT_OK) {\n        free(p);\n        return (%s_status)st;\n    }\n"
               "    *out = p;\n    return %s_OK;\n}\n",
            P, P, P, P, P, P, U, P, P, P, U);
    fprintf(f, "\n%s_status %s_ikbo_lce_run(%s_ikbo_lce *op, CUdeviceptr e_user, CUdeviceptr e_cand, CUdeviceptr "
               "cand_to_user, CUdeviceptr out, CUstream stream)\n{\n"
               "    const char *fn = \"%s_ikbo_lce_run\";\n"
               "    static const char *const names[AOT_LCE_CALLER] = {\"e_user\", \"e_cand\", \"cand_to_user\", "
               "\"out\"};\n"
               "    const CUdeviceptr caller[AOT_LCE_CALLER] = {e_user, e_cand, cand_to_user, out};\n"
               "    if (!op)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: op is NULL\", fn);\n"
               "    for (int i = 0; i < AOT_LCE_CALLER; i++)\n"
               "        if (!caller[i])\n"
               "            return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: %%s is NULL\", fn, names[i]);\n"
               "    return (%s_status)aot_lce_run(fn, op->op, aot_kernels, aot_states, caller, stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\nvoid %s_ikbo_lce_destroy(%s_ikbo_lce *op)\n{\n    if (!op)\n        return;\n"
               "    aot_lce_destroy(op->op);\n    free(op);\n}\n",
            P, P);
    return LOOM_OK;
}

static loom_status put_fa(gen *g, FILE *h, FILE *f)
{
    const loom_aot_request *r = g->r;
    const char *P = r->prefix, *U = g->upper;
    /* the operation's kernel is the template's: check it takes what aot_fa.c passes */
    static const char *const want[] = {"Q", "K", "V", "plan", "seq_len", "claims", "units", "out"};
    for (int i = 0; i < r->nshapes; i++) {
        const kern *k = &g->k[g->row_kernel[i]];
        bool same = k->nargs == (int)(sizeof want / sizeof want[0]);
        for (int a = 0; same && a < k->nargs; a++)
            same = !strcmp(k->argname[a], want[a]);
        if (!same)
            return gfail(g, LOOM_ERR_UNSUPPORTED,
                         "the ikbo_fa kernel's arguments are not Q, K, V, plan, seq_len, claims, units, out, as "
                         "aot/aot_fa.c passes them (a generator bug)");
    }
    fprintf(h, "\n/* The IKBO flash attention as an operation, as loom_ikbo_fa_prepare and its run, set_mapping\n"
               " * and launch: prepare once per shape; per request either run (reads cand_to_user [B] int32,\n"
               " * and seq_len [U] int32 with varlen=1, back from the GPU to make the work plan: one\n"
               " * synchronization of stream) or, where the host has the mapping, set_mapping then\n"
               " * run_mapped as often as it holds (loom_ikbo_fa_launch).  q and out [B * n_seed, H, D], k and v [U * S, H, D].  One\n"
               " * operation is used by one thread at a time. */\n"
               "typedef struct %s_ikbo_fa %s_ikbo_fa;\n"
               "%s_status %s_ikbo_fa_prepare(const %s_ikbo_fa_shape *shape, %s_ikbo_fa **out);\n"
               "%s_status %s_ikbo_fa_set_mapping(%s_ikbo_fa *op, const int32_t *cand_to_user, const int32_t "
               "*seq_len, CUstream stream);\n"
               "%s_status %s_ikbo_fa_run_mapped(%s_ikbo_fa *op, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, "
               "CUdeviceptr out, CUstream stream);\n"
               "%s_status %s_ikbo_fa_run(%s_ikbo_fa *op, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr "
               "cand_to_user, CUdeviceptr seq_len, CUdeviceptr out, CUstream stream);\n"
               "void %s_ikbo_fa_destroy(%s_ikbo_fa *op);\n",
            P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P);
    fprintf(f, "\n/* ================================================================ the IKBO FA operation */\n");
    fputs((const char *)aot_text_fa_units, f);
    fputs((const char *)aot_text_fa, f);
    fprintf(f, "\n/* At each shape of the dispatch table, in its order: {B, U, S, n_seed, varlen, kernel, grid} */\n"
               "static const aot_fa_plan aot_fa_plans[aot_ikbo_fa_ROWS] = {\n");
    for (int i = 0; i < r->nshapes; i++) {
        const int64_t *sh = r->shapes[i];
        fprintf(f, "    {%lld, %lld, %lld, %lld, %d, %d, {%d, %d, %d}},\n", (long long)sval(g, sh, "B"),
                (long long)sval(g, sh, "U"), (long long)sval(g, sh, "S"), (long long)sval(g, sh, "n_seed"),
                (int)sval(g, sh, "varlen"), g->row_kernel[i], g->row_grid[i][0], g->row_grid[i][1], g->row_grid[i][2]);
    }
    fprintf(f, "};\n\nstruct %s_ikbo_fa {\n    struct aot_fa_op *op;\n};\n", P);
    fprintf(f, "\n%s_status %s_ikbo_fa_prepare(const %s_ikbo_fa_shape *shape, %s_ikbo_fa **out)\n{\n"
               "    const char *fn = \"%s_ikbo_fa_prepare\";\n"
               "    if (!out)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: out is NULL\", fn);\n"
               "    *out = NULL;\n"
               "    int r = aot_ikbo_fa_row(fn, shape);\n"
               "    if (r < 0)\n        return %s_ERR_INVALID;\n"
               "    %s_ikbo_fa *p = calloc(1, sizeof *p);\n"
               "    if (!p)\n        return (%s_status)aot_fail(AOT_ERR_NOMEM, \"%%s: out of host memory\", fn);\n"
               "    int st = aot_fa_prepare(fn, &aot_fa_plans[r], &p->op);\n"
               "    if (st != AOT_OK) {\n        free(p);\n        return (%s_status)st;\n    }\n"
               "    *out = p;\n    return %s_OK;\n}\n",
            P, P, P, P, P, P, U, P, P, P, U);
    fprintf(f, "\n%s_status %s_ikbo_fa_set_mapping(%s_ikbo_fa *op, const int32_t *cand_to_user, const int32_t "
               "*seq_len, CUstream stream)\n{\n"
               "    if (!op)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%s_ikbo_fa_set_mapping: op is "
               "NULL\");\n"
               "    return (%s_status)aot_fa_set_mapping(\"%s_ikbo_fa_set_mapping\", op->op, cand_to_user, seq_len, "
               "stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\n%s_status %s_ikbo_fa_run_mapped(%s_ikbo_fa *op, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, "
               "CUdeviceptr out, CUstream stream)\n{\n"
               "    if (!op)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%s_ikbo_fa_run_mapped: op is NULL\");\n"
               "    return (%s_status)aot_fa_launch(\"%s_ikbo_fa_run_mapped\", op->op, aot_kernels, aot_states, q, k, v, "
               "out, stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\n%s_status %s_ikbo_fa_run(%s_ikbo_fa *op, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr "
               "cand_to_user, CUdeviceptr seq_len, CUdeviceptr out, CUstream stream)\n{\n"
               "    if (!op)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%s_ikbo_fa_run: op is NULL\");\n"
               "    return (%s_status)aot_fa_run(\"%s_ikbo_fa_run\", op->op, aot_kernels, aot_states, q, k, v, "
               "cand_to_user, seq_len, out, stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\nvoid %s_ikbo_fa_destroy(%s_ikbo_fa *op)\n{\n    if (!op)\n        return;\n"
               "    aot_fa_destroy(op->op);\n    free(op);\n}\n",
            P, P);
    return LOOM_OK;
}

/* ---------------------------------------------------------------- the files */

static FILE *open_out(gen *g, const char *dir, const char *name, char *path, size_t n)
{
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        gfail(g, LOOM_ERR_INVALID, "cannot write %s: %s", path, strerror(errno));
    return f;
}

static loom_status put_files(gen *g)
{
    const loom_aot_request *r = g->r;
    const char *P = r->prefix, *T = g->t->name;
    char hpath[4096], cpath[4096];
    const char *upper = g->upper;
    snprintf(g->upper, sizeof g->upper, "%s", P);
    for (char *c = g->upper; *c; c++)
        *c = (char)toupper((unsigned char)*c);
    if (mkdir(r->dir, 0777) != 0 && errno != EEXIST)
        return gfail(g, LOOM_ERR_INVALID, "cannot create %s: %s", r->dir, strerror(errno));
    char hname[300], cname[300];
    snprintf(hname, sizeof hname, "%s.h", P);
    snprintf(cname, sizeof cname, "%s.c", P);
    FILE *h = open_out(g, r->dir, hname, hpath, sizeof hpath);
    if (!h)
        return LOOM_ERR_INVALID;
    FILE *f = open_out(g, r->dir, cname, cpath, sizeof cpath);
    if (!f) {
        fclose(h);
        return LOOM_ERR_INVALID;
    }
    const char *cmd = r->command && *r->command ? r->command : "(loom_aot_write)";
    fprintf(h, "/*\n * %s.h -- %s ahead of time, written by loom %s's `loomc aot` (do not edit; regenerate\n"
               " * instead).  The command:\n *   %s\n"
               " * %s.c has the kernels (cubins and PTX) and launches them through the CUDA driver, which it\n"
               " * opens itself (dlopen): link it with -ldl -lpthread, no loom and no libcuda.\n"
               " * docs/aot.md in loom explains this API and how to regenerate for another GPU.\n */\n",
            P, T, LOOM_VERSION, cmd, P);
    fprintf(h, "#ifndef %s_AOT_H\n#define %s_AOT_H\n\n#include <stddef.h>\n#include <stdint.h>\n\n"
               "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
               "/* The CUDA driver's types, as cuda.h declares them (a C11 program may include both). */\n"
               "typedef unsigned long long CUdeviceptr;\ntypedef struct CUstream_st *CUstream;\n\n"
               "/* What every function returns; %s_last_error() says why when it is not %s_OK. */\n"
               "typedef enum %s_status {\n    %s_OK = 0,\n    %s_ERR_INVALID = 1, /* a bad argument or a shape "
               "not generated */\n    %s_ERR_NO_GPU = 2,  /* no CUDA driver or no GPU */\n"
               "    %s_ERR_CUDA = 3,    /* the driver refused a call (the message names it) */\n"
               "    %s_ERR_NOMEM = 4,   /* out of host memory */\n} %s_status;\n\n"
               "/* The calling thread's last error message (\"\" when there was none). */\n"
               "const char *%s_last_error(void);\n"
               "/* Unload every kernel of this file (none may be running); the next launch loads them again,\n"
               " * in the context then current. */\n"
               "void %s_unload(void);\n",
            upper, upper, P, upper, P, upper, upper, upper, upper, upper, P, P, P);

    fprintf(f, "/*\n * %s.c -- %s ahead of time, written by loom %s's `loomc aot` (do not edit; regenerate\n"
               " * instead).  The command:\n *   %s\n *\n * Shapes and their configs:\n",
            P, T, LOOM_VERSION, cmd);
    for (int i = 0; i < r->nshapes; i++) {
        char s[512], c[512];
        shape_text(g, r->shapes[i], s, sizeof s);
        loom_params_format(g->t->config, g->t->nconfig, r->configs[i], c, sizeof c);
        fprintf(f, " *   %s\n *     %s\n", s, c);
    }
    fprintf(f, " * Architectures:");
    for (int a = 0; a < g->narch; a++)
        fprintf(f, " %s", g->arch[a]);
    fprintf(f, "\n */\n#define _POSIX_C_SOURCE 200809L\n#include \"%s\"\n\n", hname);
    fputs((const char *)aot_text_rt, f);
    put_kernels(g, f);
    fprintf(f, "\nconst char *%s_last_error(void) { return aot_error(); }\n\n"
               "void %s_unload(void) { aot_unload(aot_states, %d); }\n",
            P, P, g->nk);
    loom_status st = put_template(g, h, f);
    if (st == LOOM_OK && !strcmp(T, "ikbo_lce"))
        st = put_lce(g, h, f);
    if (st == LOOM_OK && !strcmp(T, "ikbo_fa"))
        st = put_fa(g, h, f);
    fprintf(h, "\n#ifdef __cplusplus\n}\n#endif\n#endif\n");
    bool bad = ferror(h) || ferror(f);
    bad |= fclose(h) != 0;
    bad |= fclose(f) != 0;
    if (st == LOOM_OK && bad)
        st = gfail(g, LOOM_ERR_INVALID, "writing %s or %s failed: %s", hpath, cpath, strerror(errno));
    if (st != LOOM_OK)
        remove(hpath), remove(cpath);
    return st;
}

loom_status loom_aot_write(const loom_aot_request *r, char *err, size_t errlen)
{
    char dummy[1];
    if (!err || !errlen)
        err = dummy, errlen = sizeof dummy;
    err[0] = 0;
    if (!r || !r->t || !r->prefix || !r->dir || r->nshapes < 1 || !r->shapes || !r->configs) {
        snprintf(err, errlen, "loom_aot_write: %s", !r ? "the request is NULL"
                                                  : !r->t ? "no template"
                                                  : !r->prefix ? "no prefix"
                                                  : !r->dir ? "no directory"
                                                            : "no shapes (or configs)");
        return LOOM_ERR_INVALID;
    }
    const char *p = r->prefix;
    bool ident = (isalpha((unsigned char)*p) || *p == '_') && strlen(p) < 64;
    for (; ident && *p; p++)
        ident = isalnum((unsigned char)*p) || *p == '_';
    if (!ident) {
        snprintf(err, errlen, "prefix '%s' is not a C identifier (of at most 63 characters)", r->prefix);
        return LOOM_ERR_INVALID;
    }
    gen g = {.r = r, .t = r->t, .err = err, .errlen = errlen};
    /* the architectures */
    const char *a = r->archs && *r->archs ? r->archs : "sm_90a";
    while (*a) {
        size_t n = strcspn(a, ",");
        if (g.narch == MAX_ARCH || n == 0 || n >= sizeof g.arch[0]) {
            snprintf(err, errlen, "--arch '%s': at most %d architectures, comma-separated (sm_90a,sm_80)", r->archs,
                     MAX_ARCH);
            return LOOM_ERR_INVALID;
        }
        memcpy(g.arch[g.narch], a, n);
        g.arch[g.narch][n] = 0;
        if ((g.sm[g.narch] = arch_sm(g.arch[g.narch])) < 0 || !cg_arch_known(g.arch[g.narch])) {
            snprintf(err, errlen, "--arch: '%s' is not an architecture loom compiles for (sm_90a, sm_80, ...)",
                     g.arch[g.narch]);
            return LOOM_ERR_INVALID;
        }
        for (int i = 0; i < g.narch; i++)
            if (g.sm[i] == g.sm[g.narch]) {
                snprintf(err, errlen, "--arch: two architectures of compute capability %d.%d", g.sm[i] / 10,
                         g.sm[i] % 10);
                return LOOM_ERR_INVALID;
            }
        g.narch++;
        a += n;
        if (*a == ',')
            a++;
    }
    /* the keys that shape a kernel (not those that only shape a check's inputs) */
    for (int i = 0; i < r->t->nshape; i++)
        if (!r->t->shape[i].inputs_only)
            g.key[g.nkeys++] = i;
    /* two shapes alike in every key would be two rows of which only the first is reachable */
    for (int i = 0; i < r->nshapes; i++)
        for (int j = 0; j < i; j++) {
            bool same = true;
            for (int k = 0; k < g.nkeys && same; k++)
                same = r->shapes[i][g.key[k]] == r->shapes[j][g.key[k]];
            if (same) {
                snprintf(err, errlen, "shapes %d and %d are the same shape", j + 1, i + 1);
                return LOOM_ERR_INVALID;
            }
        }
    size_t ns = (size_t)(unsigned)r->nshapes; /* >= 1, checked above */
    g.row_kernel = calloc(ns, sizeof *g.row_kernel);
    g.row_grid = calloc(ns, sizeof *g.row_grid);
    if (!g.row_kernel || !g.row_grid) {
        gen_free(&g);
        snprintf(err, errlen, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    loom_status st = LOOM_OK;
    for (int i = 0; i < r->nshapes && st == LOOM_OK; i++) {
        char why[1024] = "", what[1200], s[512], c[512];
        shape_text(&g, r->shapes[i], s, sizeof s);
        loom_params_format(r->t->config, r->t->nconfig, r->configs[i], c, sizeof c);
        snprintf(what, sizeof what, "%s at %s with %s", r->t->name, s, c);
        loom_kernel *k = r->t->build(r->shapes[i], r->configs[i], why, sizeof why);
        if ((g.row_kernel[i] = kern_build_add(&g, k, why, what)) < 0)
            st = LOOM_ERR_INVALID;
        else
            r->t->grid(r->shapes[i], r->configs[i], g.row_grid[i]);
    }
    if (st == LOOM_OK && !strcmp(r->t->name, "ikbo_lce"))
        st = lce_compile(&g);
    if (st == LOOM_OK)
        st = put_files(&g);
    gen_free(&g);
    return st;
}
