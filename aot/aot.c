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
 *      function; for a template with an operation of several kernels (a loom_aot_op:
 *      its loom_template.aot; ikbo_lce's and ikbo_fa's are this file's, aot_op_of, made
 *      from the descriptions loom's C API runs: ik_stage; fa_units) also the whole
 *      operation, its kernels compiled after the template's.  A template whose shape has
 *      run-time keys (loom_param.runtime: its kernel takes them as run-time dims) gets a
 *      table keyed on its static keys and the buckets of its run-time keys: a row per
 *      shape asked for, its kernel built with the run-time keys' maxima at the values
 *      asked for, the launch's row the one of the smallest buckets whose maxima hold the
 *      request's values, the dim arguments taken from the request's shape and the grid
 *      computed per launch from the template's grid_rule, written out as data;
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
#include "codegen.h"
#include "lce_op.h" /* ik_stage: what the LCE operation runs; through tpl.h, the IKBO kernels */

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
    int tma_dim_arg[CG_MAX_TMA][CG_TMA_MAX_RANK]; /* per driver dim: the dim argument giving it, or -1 */
    bool is_dim[LOOM_MAX_ARGS];                   /* a run-time dim (loom_arg_dim) */
    int64_t dim_max[LOOM_MAX_ARGS], dim_multiple[LOOM_MAX_ARGS];
    int ndims;
} kern;

enum { ARG_PTR, ARG_I32, ARG_I64, ARG_F32 }; /* aot_rt.c's AOT_ARG_* */

/* A file being written: loom.h's loom_aot_file, which an operation's hooks receive. */
typedef struct loom_aot_file {
    const loom_aot_request *r;
    const loom_template *t;
    int narch;
    char arch[MAX_ARCH][16];
    int sm[MAX_ARCH];
    kern *k;
    int nk, capk;
    int nkeys;          /* the template's kernel-shaping shape keys */
    int key[LOOM_MAX_PARAMS]; /* their indices into the shape vector */
    int ndyn;           /* how many of them are run-time (loom_param.runtime) */
    int *row_kernel;    /* per shape: the template kernel's index */
    int (*row_grid)[3];
    loom_grid_rule *row_rule; /* per shape: the grid as a rule (templates with run-time keys) */
    int64_t (*row_dims)[LOOM_MAX_ARGS]; /* per shape: its kernel's run-time dims' maxima, by argument */
    char fixed[300];    /* why a template's run-time keys are served as exact shapes ("": they are not) */
    char upper[80];     /* the prefix in capitals: the status constants' */
    const loom_aot_op *op; /* the template's operation (NULL: none) */
    void *op_state;     /* what its compile kept for its write */
    int torch;          /* --torch: P_torch.py too, and the entry points it calls (aot_torch_c) */
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

/* Whether kernels a and b (of the same PTX) launch alike: the same arguments, run-time
 * dims (their maxima aside) and TMA descriptors (the run-time dims' maxima aside). */
static bool same_launch(const kern *a, const kern *b)
{
    if (a->nargs != b->nargs || a->ntma != b->ntma || a->smem != b->smem || a->threads != b->threads)
        return false;
    for (int i = 0; i < a->nargs; i++)
        if (strcmp(a->argname[i], b->argname[i]) || a->kind[i] != b->kind[i] || a->is_dim[i] != b->is_dim[i] ||
            (a->is_dim[i] && a->dim_multiple[i] != b->dim_multiple[i]))
            return false;
    for (int t = 0; t < a->ntma; t++) {
        const rt_tma_plan *p = &a->tma[t], *q = &b->tma[t];
        if (a->tma_arg[t] != b->tma_arg[t] || p->dtype != q->dtype || p->rank != q->rank ||
            memcmp(p->strides, q->strides, sizeof p->strides) || memcmp(p->box, q->box, sizeof p->box) ||
            memcmp(p->elem_strides, q->elem_strides, sizeof p->elem_strides) || p->interleave != q->interleave ||
            p->swizzle != q->swizzle || p->l2_promotion != q->l2_promotion || p->oob_fill != q->oob_fill ||
            memcmp(a->tma_dim_arg[t], b->tma_dim_arg[t], sizeof a->tma_dim_arg[t]))
            return false;
        for (uint32_t d = 0; d < p->rank; d++)
            if (a->tma_dim_arg[t][d] < 0 && p->dims[d] != q->dims[d])
                return false;
    }
    return true;
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
        if (ai.is_dim) {
            nk.is_dim[i] = true;
            nk.dim_max[i] = ai.dim_max;
            nk.dim_multiple[i] = ai.dim_multiple > 0 ? ai.dim_multiple : 1;
            nk.ndims++;
        }
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
            nk.smem = (unsigned)res.smem_bytes;
            nk.ntma = res.ntma;
            for (int t = 0; t < res.ntma; t++) {
                loom_arg_info ai;
                loom_kernel_arg_info(k, res.tma[t].arg, &ai);
                nk.tma_arg[t] = res.tma[t].arg;
                for (int d = 0; d < CG_TMA_MAX_RANK; d++) /* driver dim d is the tensor's rank-1-d */
                    nk.tma_dim_arg[t][d] = d < ai.shape.rank ? ai.dim_of[ai.shape.rank - 1 - d] : -1;
                if ((st = rt_tma_plan_make(&res.tma[t], &ai, 0, &nk.tma[t], err, sizeof err)) != LOOM_OK) {
                    gfail(g, st, "%s: %s", what, err);
                    cg_result_free(&res);
                    return -1;
                }
            }
            /* the same PTX and launch tables: the same kernel (kernels that differ only in
             * the maxima of their run-time dims are one: it serves the largest) */
            for (int i = 0; i < g->nk; i++)
                if (!strcmp(g->k[i].img[0].ptx, res.ptx) && same_launch(&g->k[i], &nk)) {
                    for (int j = 0; j < nk.nargs; j++)
                        if (nk.is_dim[j] && nk.dim_max[j] > g->k[i].dim_max[j])
                            g->k[i].dim_max[j] = nk.dim_max[j];
                    for (int t = 0; t < nk.ntma; t++)
                        for (uint32_t d = 0; d < nk.tma[t].rank; d++)
                            if (nk.tma_dim_arg[t][d] >= 0 && nk.tma[t].dims[d] > g->k[i].tma[t].dims[d])
                                g->k[i].tma[t].dims[d] = nk.tma[t].dims[d];
                    cg_result_free(&res);
                    return i;
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
    free(g->row_rule);
    free(g->row_dims);
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
        !strcmp(out, "args") || !strcmp(out, "fn") || !strcmp(out, "want") || !strcmp(out, "grid"))
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
                       "swizzle, L2 promotion, out-of-bounds fill, the arguments of run-time dims} */\n"
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
                fprintf(f, "}, %d, %d, %d, %d, {", p->interleave, p->swizzle, p->l2_promotion, p->oob_fill);
                for (int d = 0; d < 5; d++)
                    fprintf(f, "%s%d", d ? ", " : "", d < CG_TMA_MAX_RANK ? k->tma_dim_arg[t][d] : -1);
                fprintf(f, "}},\n");
            }
            fprintf(f, "};\n");
        }
        if (k->ndims) {
            fprintf(f, "/* per argument: {maximum, multiple} of a run-time dim ({0, 0}: not one) */\n"
                       "static const int64_t aot_k%d_dims[][2] = {", i);
            for (int a = 0; a < k->nargs; a++)
                fprintf(f, "%s{%lld, %lld}", a ? ", " : "", (long long)(k->is_dim[a] ? k->dim_max[a] : 0),
                        (long long)(k->is_dim[a] ? k->dim_multiple[a] : 0));
            fprintf(f, "};\n");
        }
    }
    fprintf(f, "\n/* {PTX entry, images, threads a CTA, dynamic shared memory, arguments, TMA descriptors, "
               "run-time dims} */\n"
               "static const aot_kernel aot_kernels[%d] = {\n", g->nk);
    for (int i = 0; i < g->nk; i++) {
        const kern *k = &g->k[i];
        fprintf(f, "    {\"%s\", %d, aot_k%d_images, %u, %u, %d, aot_k%d_arg_names, aot_k%d_arg_kinds, %d, ", k->name,
                k->nimg, i, k->threads, k->smem, k->nargs, i, i, k->ntma);
        if (k->ntma)
            fprintf(f, "aot_k%d_tma, ", i);
        else
            fprintf(f, "NULL, ");
        if (k->ndims)
            fprintf(f, "aot_k%d_dims},\n", i);
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

/* The argument list of the template's kernel: ", CUdeviceptr A, ..." (its run-time dims
 * are not in it: a launch takes them from the shape). */
static void put_params(FILE *f, const kern *k)
{
    for (int a = 0; a < k->nargs; a++) {
        if (k->is_dim[a])
            continue;
        char id[80];
        c_ident(k->argname[a], id, sizeof id);
        fprintf(f, ", %s %s", kind_c(k->kind[a]), id);
    }
}

/* The names of the run-time keys, "B, U", for comments. */
static void dyn_names(const gen *g, char *buf, size_t n)
{
    size_t w = 0;
    buf[0] = 0;
    for (int i = 0; i < g->nkeys && w < n; i++)
        if (g->t->shape[g->key[i]].runtime) {
            int c = snprintf(buf + w, n - w, "%s%s", w ? ", " : "", g->t->shape[g->key[i]].key);
            if (c < 0)
                break;
            w += (size_t)c;
        }
}

/* The head of the generated aot_T_row(fn, shape): its comment (what, then how it fails),
 * the NULL check and the shape's keys as want[]; the caller writes the rest. */
static void put_row_head(const gen *g, FILE *f, const char *P, const char *T, const char *what)
{
    fprintf(f, "\n/* %s, or -1 with the message set (fn names the caller). */\n"
               "static int aot_%s_row(const char *fn, const %s_%s_shape *shape)\n{\n"
               "    if (!shape)\n        return aot_fail(AOT_ERR_INVALID, \"%%s: shape is NULL\", fn), -1;\n"
               "    const int64_t want[aot_%s_KEYS] = {",
            what, T, P, T, T);
    for (int i = 0; i < g->nkeys; i++)
        fprintf(f, "%sshape->%s", i ? ", " : "", g->t->shape[g->key[i]].key);
}

/* The launch's argument array: each run-time dim's aot_dN (the caller declares them), the
 * other arguments by their parameter's name. */
static void put_launch_args(FILE *f, const kern *k0)
{
    fprintf(f, "    void *args[] = {");
    for (int a = 0; a < k0->nargs; a++) {
        char id[80];
        if (k0->is_dim[a])
            snprintf(id, sizeof id, "aot_d%d", a);
        else
            c_ident(k0->argname[a], id, sizeof id);
        fprintf(f, "%s&%s", a ? ", " : "", id);
    }
}

/* The dispatch table's rows' configs ("k=v,...") and kernels, after the table before them
 * (its closing brace is written first). */
static void put_configs_and_kernels(const gen *g, FILE *f, const char *T)
{
    const loom_aot_request *r = g->r;
    const loom_template *t = g->t;
    fprintf(f, "};\nstatic const char *const aot_%s_configs[aot_%s_ROWS] = {\n", T, T);
    for (int i = 0; i < r->nshapes; i++) {
        char c[512];
        loom_params_format(t->config, t->nconfig, r->configs[i], c, sizeof c);
        fprintf(f, "    \"%s\",\n", c);
    }
    fprintf(f, "};\nstatic const int aot_%s_kernel[aot_%s_ROWS] = {", T, T);
    for (int i = 0; i < r->nshapes; i++)
        fprintf(f, "%s%d", i ? ", " : "", g->row_kernel[i]);
}

/* A template with run-time keys: the table keyed on the static keys and the run-time keys'
 * buckets (aot_rt.c's aot_find_dyn_row), each row's grid as a rule evaluated per launch,
 * the kernel's run-time dims passed from the request's shape. */
static loom_status put_template_dyn(gen *g, FILE *h, FILE *f, const kern *k0)
{
    const loom_aot_request *r = g->r;
    const loom_template *t = g->t;
    const char *P = r->prefix, *T = t->name, *U = g->upper;
    char dn[200];
    dyn_names(g, dn, sizeof dn);
    put_shape_struct(g, h, P);
    fprintf(h, "/* The config of the kernel that serves *shape (\"k=v,...\"), or NULL with the reason in\n"
               " * %s_last_error() when none does.  Needs no GPU. */\n"
               "const char *%s_%s_config(const %s_%s_shape *shape);\n",
            P, P, T, P, T);
    fprintf(h, "/* Launch %s's kernel at *shape on stream (NULL: the default stream); asynchronous.  The\n"
               " * run-time keys (%s) may be anything from 1 to the largest value this file was\n"
               " * generated for at the same other keys: the kernel of the smallest bucket that holds\n"
               " * them runs, with its grid computed from *shape.  The arguments are the kernel's but its\n"
               " * run-time dims, which come from *shape: device pointers of at least the sizes *shape\n"
               " * needs, 16-byte aligned. */\n"
               "%s_status %s_%s_launch(const %s_%s_shape *shape",
            T, dn, P, P, T, P, T);
    put_params(h, k0);
    fprintf(h, ", CUstream stream);\n");

    fprintf(f, "\n/* ================================================================ %s\n"
               " * The dispatch table.  %s are run-time keys: a row per shape generated holds its\n"
               " * other keys and, for these, the most a launch may ask (the kernel's maxima; their buckets\n"
               " * are the powers of two at or above them).  A launch takes the row of its other keys whose\n"
               " * maxima hold its values, of the smallest buckets; the row gives the config, the kernel\n"
               " * and the grid as a rule over the shape. */\n",
            T, dn);
    fprintf(f, "enum { aot_%s_ROWS = %d, aot_%s_KEYS = %d };\n", T, r->nshapes, T, g->nkeys);
    fprintf(f, "static const char *const aot_%s_keys[aot_%s_KEYS] = {", T, T);
    for (int i = 0; i < g->nkeys; i++)
        fprintf(f, "%s\"%s\"", i ? ", " : "", t->shape[g->key[i]].key);
    fprintf(f, "};\n/* 1: a run-time key */\nstatic const unsigned char aot_%s_dyn[aot_%s_KEYS] = {", T, T);
    for (int i = 0; i < g->nkeys; i++)
        fprintf(f, "%s%d", i ? ", " : "", t->shape[g->key[i]].runtime ? 1 : 0);
    fprintf(f, "};\nstatic const int64_t aot_%s_shapes[aot_%s_ROWS][aot_%s_KEYS] = {\n", T, T, T);
    for (int i = 0; i < r->nshapes; i++) {
        int64_t v[LOOM_MAX_PARAMS];
        key_values(g, r->shapes[i], v);
        fprintf(f, "    ");
        put_i64s(f, v, g->nkeys);
        fprintf(f, ",\n");
    }
    fprintf(f, "};\n/* the multiples the kernels need of the run-time keys (1: any value) */\n"
               "static const int64_t aot_%s_mults[aot_%s_ROWS][aot_%s_KEYS] = {\n", T, T, T);
    for (int i = 0; i < r->nshapes; i++) {
        const kern *k = &g->k[g->row_kernel[i]];
        int64_t v[LOOM_MAX_PARAMS];
        for (int j = 0; j < g->nkeys; j++) {
            v[j] = 1;
            for (int a = 0; a < k->nargs; a++)
                if (k->is_dim[a] && !strcmp(k->argname[a], t->shape[g->key[j]].key))
                    v[j] = k->dim_multiple[a];
        }
        fprintf(f, "    ");
        put_i64s(f, v, g->nkeys);
        fprintf(f, ",\n");
    }
    put_configs_and_kernels(g, f, T);
    fprintf(f, "};\n/* grid[d] = mult[d] * cdiv(c[d] + sum of per[d][key] * shape[key], div[d]), at most cap[d]:\n"
               " * {c, div, mult, cap, per key for x, y, z} */\n"
               "static const aot_grid_rule aot_%s_grid[aot_%s_ROWS] = {\n",
            T, T);
    for (int i = 0; i < r->nshapes; i++) {
        const loom_grid_rule *gr = &g->row_rule[i];
        fprintf(f, "    {");
        const int64_t *parts[4] = {gr->c, gr->div, gr->mult, gr->cap};
        for (int q = 0; q < 4; q++) {
            fprintf(f, "%s", q ? ", " : "");
            put_i64s(f, parts[q], 3);
        }
        fprintf(f, ", {");
        for (int d = 0; d < 3; d++) {
            int64_t v[LOOM_MAX_PARAMS];
            for (int j = 0; j < g->nkeys; j++)
                v[j] = gr->per[d][g->key[j]];
            fprintf(f, "%s", d ? ", " : "");
            put_i64s(f, v, g->nkeys);
        }
        fprintf(f, "}},\n");
    }
    fprintf(f, "};\n");

    put_row_head(g, f, P, T, "The row that serves *shape");
    fprintf(f, "};\n    return aot_find_dyn_row(fn, \"%s\", &aot_%s_shapes[0][0], &aot_%s_mults[0][0], aot_%s_ROWS, "
               "want, aot_%s_dyn, aot_%s_keys, aot_%s_KEYS);\n}\n",
            T, T, T, T, T, T, T);
    fprintf(f, "\nconst char *%s_%s_config(const %s_%s_shape *shape)\n{\n"
               "    int r = aot_%s_row(\"%s_%s_config\", shape);\n    return r < 0 ? NULL : aot_%s_configs[r];\n}\n",
            P, T, P, T, T, P, T, T);
    fprintf(f, "\n%s_status %s_%s_launch(const %s_%s_shape *shape", P, P, T, P, T);
    put_params(f, k0);
    fprintf(f, ", CUstream stream)\n{\n    const char *fn = \"%s_%s_launch\";\n    int r = aot_%s_row(fn, shape);\n"
               "    if (r < 0)\n        return %s_ERR_INVALID;\n    const int64_t want[aot_%s_KEYS] = {",
            P, T, T, U, T);
    for (int i = 0; i < g->nkeys; i++)
        fprintf(f, "%sshape->%s", i ? ", " : "", t->shape[g->key[i]].key);
    fprintf(f, "};\n    unsigned grid[3];\n"
               "    if (aot_grid_eval(fn, \"%s\", &aot_%s_grid[r], want, aot_%s_KEYS, grid) != 0)\n"
               "        return %s_ERR_INVALID;\n",
            T, T, T, U);
    /* the run-time dims, from the shape (the row holds them: each is 1 to its maximum, below 2^31) */
    for (int a = 0; a < k0->nargs; a++)
        if (k0->is_dim[a])
            fprintf(f, "    int32_t aot_d%d = (int32_t)shape->%s;\n", a, k0->argname[a]);
    put_launch_args(f, k0);
    fprintf(f, "};\n    int k = aot_%s_kernel[r];\n"
               "    return (%s_status)aot_launch(fn, &aot_kernels[k], &aot_states[k], grid, args, stream);\n}\n",
            T, P);
    return LOOM_OK;
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
            same = !strcmp(ki->argname[a], k0->argname[a]) && ki->kind[a] == k0->kind[a] &&
                   ki->is_dim[a] == k0->is_dim[a];
        if (!same)
            return gfail(g, LOOM_ERR_UNSUPPORTED,
                         "the kernels of %s at shape 1 and shape %d take different arguments, so one launch "
                         "function cannot serve both: generate them into two files (two prefixes)",
                         T, i + 1);
    }
    if (g->ndyn)
        return put_template_dyn(g, h, f, k0);
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
    if (g->fixed[0])
        fprintf(f, "/* %s's run-time keys are served as these exact shapes, their kernels' run-time dims at the\n"
                   " * shapes' values: %s. */\n",
                T, g->fixed);
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
    put_configs_and_kernels(g, f, T);
    fprintf(f, "};\nstatic const unsigned aot_%s_grid[aot_%s_ROWS][3] = {", T, T);
    for (int i = 0; i < r->nshapes; i++)
        fprintf(f, "%s{%d, %d, %d}", i ? ", " : "", g->row_grid[i][0], g->row_grid[i][1], g->row_grid[i][2]);
    fprintf(f, "};\n");
    if (k0->ndims) {
        fprintf(f, "/* per row, per argument: the value of a run-time dim (the kernel's maximum) */\n"
                   "static const int32_t aot_%s_dims[aot_%s_ROWS][%d] = {\n",
                T, T, k0->nargs);
        for (int i = 0; i < r->nshapes; i++) {
            fprintf(f, "    {");
            for (int a = 0; a < k0->nargs; a++)
                fprintf(f, "%s%lld", a ? ", " : "", (long long)g->row_dims[i][a]);
            fprintf(f, "},\n");
        }
        fprintf(f, "};\n");
    }

    put_row_head(g, f, P, T, "The row of *shape");
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
               "    if (r < 0)\n        return %s_ERR_INVALID;\n",
            T, P, T, U);
    for (int a = 0; a < k0->nargs; a++)
        if (k0->is_dim[a])
            fprintf(f, "    int32_t aot_d%d = aot_%s_dims[r][%d];\n", a, T, a);
    put_launch_args(f, k0);
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

/* The operations of the built-in IKBO templates (loom_aot_op).  Their hooks are given the
 * file's own message buffer as err, so they report through gfail like the rest of this
 * file. */

/* ikbo_lce's: each shape's stage, as data, and its steps' kernels. */
typedef struct lce_op {
    int n;
    ik_stage *stage;
    int (*kernel)[IK_MAX_STEPS];
} lce_op;

static void lce_release(void *state)
{
    lce_op *o = state;
    if (!o)
        return;
    for (int i = 0; o->stage && i < o->n; i++)
        ik_stage_free(&o->stage[i]);
    free(o->stage);
    free(o->kernel);
    free(o);
}

/* ikbo_lce: each shape's stage as data, its kernels added to the file's. */
static loom_status lce_compile(loom_aot_file *g, void **state, char *err_, size_t errlen_)
{
    (void)err_, (void)errlen_; /* g->err */
    const loom_aot_request *r = g->r;
    if (r->stage < 0 || r->stage > LOOM_IKBO_PERSISTENT)
        return gfail(g, LOOM_ERR_INVALID, "--stage %d is not 0 to 4", r->stage);
    lce_op *o = calloc(1, sizeof *o);
    if (!o)
        return gfail(g, LOOM_ERR_NOMEM, "out of host memory");
    *state = o;
    o->n = r->nshapes;
    o->stage = calloc((size_t)(unsigned)r->nshapes, sizeof *o->stage);
    o->kernel = calloc((size_t)(unsigned)r->nshapes, sizeof *o->kernel);
    if (!o->stage || !o->kernel)
        return gfail(g, LOOM_ERR_NOMEM, "out of host memory");
    for (int i = 0; i < r->nshapes; i++) {
        const int64_t *sh = r->shapes[i];
        loom_ikbo_lce_shape s = {sval(g, sh, "B"),  sval(g, sh, "U"),  sval(g, sh, "M"),           sval(g, sh, "N"),
                                 sval(g, sh, "Ku"), sval(g, sh, "Kc"), (loom_dtype)sval(g, sh, "dtype")};
        loom_ikbo_lce_config c = ik_config_of(r->configs[i]);
        char err[400], text[400];
        shape_text(g, sh, text, sizeof text);
        loom_status st = ik_stage_make(&s, (loom_ikbo_stage)r->stage, &c, NULL, &o->stage[i], err, sizeof err);
        if (st != LOOM_OK)
            return gfail(g, st, "ikbo_lce stage %d at %s: %s", r->stage, text, err);
        for (int j = 0; j < o->stage[i].nsteps; j++) {
            char what[500];
            snprintf(what, sizeof what, "ikbo_lce stage %d, step %d at %s", r->stage, j + 1, text);
            if ((o->kernel[i][j] = kern_add(g, o->stage[i].step[j].k, what)) < 0)
                return LOOM_ERR_COMPILE;
        }
    }
    return LOOM_OK;
}

static loom_status put_lce(loom_aot_file *g, void *state, FILE *h, FILE *f, char *err_, size_t errlen_)
{
    (void)err_, (void)errlen_; /* g->err */
    const loom_aot_request *r = g->r;
    const char *P = r->prefix, *U = g->upper;
    const lce_op *o = state;
    ik_stage *runs = o->stage;
    int (*kidx)[IK_MAX_STEPS] = o->kernel;
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
               "/* One request at its own B and U (1 to the prepared shape's: the buffers sized for them). */\n"
               "%s_status %s_ikbo_lce_run_at(%s_ikbo_lce *op, int64_t B, int64_t U, CUdeviceptr e_user, CUdeviceptr "
               "e_cand, CUdeviceptr cand_to_user, CUdeviceptr out, CUstream stream);\n"
               "void %s_ikbo_lce_destroy(%s_ikbo_lce *op);\n",
            r->stage, loom_ikbo_stage_name((loom_ikbo_stage)r->stage), P, P, P, P, P, P, P, P, P, P, P, P, P, P);
    fprintf(f, "\n/* ================================================================ the IKBO LCE operation */\n"
               "enum { AOT_LCE_NBUF = %d, AOT_LCE_CALLER = %d, AOT_LCE_FLAGS = %d, AOT_LCE_BASE = %d, AOT_LCE_B = %d, "
               "AOT_LCE_U = %d, AOT_LCE_M = %d };\n",
            IK_NBUF, IK_CALLER_BUFS, IK_FLAGS, IK_FLAG_BASE, IK_SRC_B, IK_SRC_U, IK_SRC_M);
    fputs((const char *)aot_text_lce, f);
    fprintf(f, "\n/* Stage %d (%s) at each shape of the dispatch table, in its order: {M, Ku, Kc, B, U (the\n"
               " * most a run asks for), bytes an element, the owned buffers' bytes, the weights' fills\n"
               " * {buffer, weight, ld, column}, the kernels {kernel, grid rule {c, div, mult, cap, per B,\n"
               " * per U}, arguments' sources}, the flags' blocks a user}.  Buffers: 0 e_user, 1 e_cand,\n"
               " * 2 cand_to_user, 3 out, then the operation's; sources from %d: the flags' base, B, U, M. */\n"
               "static const aot_lce_plan aot_lce_plans[aot_ikbo_lce_ROWS] = {\n",
            r->stage, loom_ikbo_stage_name((loom_ikbo_stage)r->stage), IK_FLAG_BASE);
    for (int i = 0; i < r->nshapes; i++) {
        const ik_stage *s = &runs[i];
        const int64_t *sh = r->shapes[i];
        fprintf(f, "    {%lld, %lld, %lld, %lld, %lld, %zu, {", (long long)sval(g, sh, "M"), (long long)sval(g, sh, "Ku"),
                (long long)sval(g, sh, "Kc"), (long long)sval(g, sh, "B"), (long long)sval(g, sh, "U"),
                loom_dtype_size((loom_dtype)sval(g, sh, "dtype")));
        for (int b = 0; b < IK_NBUF; b++)
            fprintf(f, "%s%zu", b ? ", " : "", s->bytes[b]);
        fprintf(f, "},\n     %d, {", s->nfill);
        for (int j = 0; j < s->nfill; j++)
            fprintf(f, "%s{%d, %d, %lld, %lld}", j ? ", " : "", s->fill[j].buf, s->fill[j].weight,
                    (long long)s->fill[j].ld, (long long)s->fill[j].col0);
        fprintf(f, "},\n     %d, {", s->nsteps);
        for (int j = 0; j < s->nsteps; j++) {
            const loom_grid_rule *gr = &s->step[j].grid;
            fprintf(f, "%s{%d, {", j ? ",\n          " : "", kidx[i][j]);
            const int64_t *parts[6] = {gr->c, gr->div, gr->mult, gr->cap};
            int64_t pb[3] = {gr->per[0][IK_RULE_B], gr->per[1][IK_RULE_B], gr->per[2][IK_RULE_B]};
            int64_t pu[3] = {gr->per[0][IK_RULE_U], gr->per[1][IK_RULE_U], gr->per[2][IK_RULE_U]};
            parts[4] = pb, parts[5] = pu;
            for (int q = 0; q < 6; q++)
                fprintf(f, "%s{%lld, %lld, %lld}", q ? ", " : "", (long long)parts[q][0], (long long)parts[q][1],
                        (long long)parts[q][2]);
            fprintf(f, "}, %d, {", s->step[j].nargs);
            for (int a = 0; a < s->step[j].nargs; a++)
                fprintf(f, "%s%d", a ? ", " : "", s->step[j].arg[a]);
            fprintf(f, "}}");
        }
        fprintf(f, "},\n     %lld},\n", (long long)s->blocks_per_user);
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
               "    return (%s_status)aot_lce_run(fn, op->op, aot_kernels, aot_states, caller, op->op->plan->B, "
               "op->op->plan->U, stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\n%s_status %s_ikbo_lce_run_at(%s_ikbo_lce *op, int64_t B, int64_t U, CUdeviceptr e_user, "
               "CUdeviceptr e_cand, CUdeviceptr cand_to_user, CUdeviceptr out, CUstream stream)\n{\n"
               "    const char *fn = \"%s_ikbo_lce_run_at\";\n"
               "    static const char *const names[AOT_LCE_CALLER] = {\"e_user\", \"e_cand\", \"cand_to_user\", "
               "\"out\"};\n"
               "    const CUdeviceptr caller[AOT_LCE_CALLER] = {e_user, e_cand, cand_to_user, out};\n"
               "    if (!op)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: op is NULL\", fn);\n"
               "    for (int i = 0; i < AOT_LCE_CALLER; i++)\n"
               "        if (!caller[i])\n"
               "            return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: %%s is NULL\", fn, names[i]);\n"
               "    return (%s_status)aot_lce_run(fn, op->op, aot_kernels, aot_states, caller, B, U, stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\nvoid %s_ikbo_lce_destroy(%s_ikbo_lce *op)\n{\n    if (!op)\n        return;\n"
               "    aot_lce_destroy(op->op);\n    free(op);\n}\n",
            P, P);
    return LOOM_OK;
}

static loom_status put_fa(loom_aot_file *g, void *state, FILE *h, FILE *f, char *err_, size_t errlen_)
{
    (void)state, (void)err_, (void)errlen_; /* no state; g->err */
    const loom_aot_request *r = g->r;
    const char *P = r->prefix, *U = g->upper;
    /* the operation's kernel is the template's: check it takes what aot_fa.c passes */
    static const char *const want[] = {"rows", "U", "Q", "K", "V", "plan", "seq_len", "claims", "units", "out"};
    for (int i = 0; i < r->nshapes; i++) {
        const kern *k = &g->k[g->row_kernel[i]];
        bool same = k->nargs == (int)(sizeof want / sizeof want[0]);
        for (int a = 0; same && a < k->nargs; a++)
            same = !strcmp(k->argname[a], want[a]);
        if (!same)
            return gfail(g, LOOM_ERR_UNSUPPORTED,
                         "the ikbo_fa kernel's arguments are not rows, U, Q, K, V, plan, seq_len, claims, units, out, as "
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
               "/* A request of its own B and U (1 to the shape's: the kernel takes them at run time): its\n"
               " * mapping [B] (and lengths [U]) from the host, or read back from the GPU by run_at. */\n"
               "%s_status %s_ikbo_fa_set_request(%s_ikbo_fa *op, int64_t B, int64_t U, const int32_t *cand_to_user, "
               "const int32_t *seq_len, CUstream stream);\n"
               "%s_status %s_ikbo_fa_run_at(%s_ikbo_fa *op, int64_t B, int64_t U, CUdeviceptr q, CUdeviceptr k, "
               "CUdeviceptr v, CUdeviceptr cand_to_user, CUdeviceptr seq_len, CUdeviceptr out, CUstream stream);\n"
               "void %s_ikbo_fa_destroy(%s_ikbo_fa *op);\n",
            P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P);
    fprintf(f, "\n/* ================================================================ the IKBO FA operation */\n");
    fputs((const char *)aot_text_fa_units, f);
    fputs((const char *)aot_text_fa, f);
    fprintf(f, "\n/* At each shape of the dispatch table, in its order: {B, U, S, n_seed, H, varlen, kernel, grid} */\n"
               "static const aot_fa_plan aot_fa_plans[aot_ikbo_fa_ROWS] = {\n");
    for (int i = 0; i < r->nshapes; i++) {
        const int64_t *sh = r->shapes[i];
        fprintf(f, "    {%lld, %lld, %lld, %lld, %lld, %d, %d, {%d, %d, %d}},\n", (long long)sval(g, sh, "B"),
                (long long)sval(g, sh, "U"), (long long)sval(g, sh, "S"), (long long)sval(g, sh, "n_seed"),
                (long long)sval(g, sh, "H"), (int)sval(g, sh, "varlen"), g->row_kernel[i], g->row_grid[i][0],
                g->row_grid[i][1], g->row_grid[i][2]);
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
               "    return (%s_status)aot_fa_run(\"%s_ikbo_fa_run\", op->op, aot_kernels, aot_states, op->op->plan->B, "
               "op->op->plan->U, q, k, v, cand_to_user, seq_len, out, stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\n%s_status %s_ikbo_fa_set_request(%s_ikbo_fa *op, int64_t B, int64_t U, const int32_t *cand_to_user, "
               "const int32_t *seq_len, CUstream stream)\n{\n"
               "    if (!op)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%s_ikbo_fa_set_request: op is "
               "NULL\");\n"
               "    return (%s_status)aot_fa_set_request(\"%s_ikbo_fa_set_request\", op->op, B, U, cand_to_user, "
               "seq_len, stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\n%s_status %s_ikbo_fa_run_at(%s_ikbo_fa *op, int64_t B, int64_t U, CUdeviceptr q, CUdeviceptr k, "
               "CUdeviceptr v, CUdeviceptr cand_to_user, CUdeviceptr seq_len, CUdeviceptr out, CUstream stream)\n{\n"
               "    if (!op)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%s_ikbo_fa_run_at: op is NULL\");\n"
               "    return (%s_status)aot_fa_run(\"%s_ikbo_fa_run_at\", op->op, aot_kernels, aot_states, B, U, q, k, v, "
               "cand_to_user, seq_len, out, stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\nvoid %s_ikbo_fa_destroy(%s_ikbo_fa *op)\n{\n    if (!op)\n        return;\n"
               "    aot_fa_destroy(op->op);\n    free(op);\n}\n",
            P, P);
    return LOOM_OK;
}

/* The built-in templates' operations.  A template sits below aot/ (docs/architecture.md),
 * so a built-in cannot point at these writers itself: the pairing is made here, by the
 * template's address.  Any other template brings its own in loom_template.aot. */
extern const loom_template tpl_def_ikbo_lce, tpl_def_ikbo_fa;
static const loom_aot_op lce_aot_op = {lce_compile, put_lce, lce_release};
static const loom_aot_op fa_aot_op = {NULL, put_fa, NULL};

static const loom_aot_op *aot_op_of(const loom_template *t)
{
    if (t->aot)
        return t->aot;
    if (t == &tpl_def_ikbo_lce)
        return &lce_aot_op;
    if (t == &tpl_def_ikbo_fa)
        return &fa_aot_op;
    return NULL;
}

/* ---------------------------------------------------------------- --torch: PyTorch custom ops */

static FILE *open_out(gen *g, const char *dir, const char *name, char *path, size_t n);

/* With --torch (loom_aot_write_torch), the operations' entry points on the caller's buffers,
 * after the operation's own functions (whose static code and tables they reuse): the LCE
 * run with every buffer given (P_torch.py takes them from PyTorch's caching allocator), the
 * FA's plan made on the host into the caller's array and its launch with the caller's plan,
 * lengths and counter.  None of them allocates, copies from the host or synchronizes, so
 * a stream capture (a CUDA graph) can hold their launches.  A template without an
 * operation needs nothing more: its launch function takes every buffer already. */
static void aot_torch_c(gen *g, FILE *h, FILE *f)
{
    const char *P = g->r->prefix, *U = g->upper;
    if (g->op == &lce_aot_op) {
        fprintf(h, "\n/* The operation on the caller's buffers (loomc aot --torch; P_torch.py runs it on PyTorch's\n"
                   " * allocator).  %s_IKBO_LCE_NBUF buffers: the caller's e_user, e_cand, cand_to_user and out, then\n"
                   " * the operation's own (those prepare allocates).  %s_ikbo_lce_buffers gives, for a shape of the\n"
                   " * file, each one's bytes (0: unused, its pointer may be 0; the caller's four: 0) and how the\n"
                   " * weights fill them: fills[4 j .. 4 j + 3] = {buffer, weight (0: w_user [M, Ku], 1: w_cand\n"
                   " * [M, Kc]), ld, column}: the weight's rows at that column of rows of ld elements.  The\n"
                   " * operation's buffers must be zero when a run starts but for the fills (the stage-4 flags\n"
                   " * count from zero at each run).  run_buffers runs a request of B and U (1 to the shape's) on\n"
                   " * them on stream: launches alone, no allocation, no copy, no synchronization. */\n"
                   "enum { %s_IKBO_LCE_NBUF = %d };\n"
                   "%s_status %s_ikbo_lce_buffers(const %s_ikbo_lce_shape *shape, size_t bytes[%s_IKBO_LCE_NBUF], "
                   "int64_t fills[8], int *nfill);\n"
                   "%s_status %s_ikbo_lce_run_buffers(const %s_ikbo_lce_shape *shape, int64_t B, int64_t U, "
                   "const CUdeviceptr buffers[%s_IKBO_LCE_NBUF], CUstream stream);\n",
                U, P, U, IK_NBUF, P, P, P, U, P, P, P, U);
        fprintf(f, "\n/* ================================================================ the operation on the "
                   "caller's buffers (--torch) */\n"
                   "%s_status %s_ikbo_lce_buffers(const %s_ikbo_lce_shape *shape, size_t bytes[%s_IKBO_LCE_NBUF], "
                   "int64_t fills[8], int *nfill)\n{\n"
                   "    const char *fn = \"%s_ikbo_lce_buffers\";\n"
                   "    if (!bytes || !fills || !nfill)\n"
                   "        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: %%s is NULL\", fn, !bytes ? \"bytes\" : "
                   "!fills ? \"fills\" : \"nfill\");\n"
                   "    int r = aot_ikbo_lce_row(fn, shape);\n"
                   "    if (r < 0)\n        return %s_ERR_INVALID;\n"
                   "    const aot_lce_plan *pl = &aot_lce_plans[r];\n"
                   "    for (int i = 0; i < AOT_LCE_NBUF; i++)\n"
                   "        bytes[i] = i < AOT_LCE_CALLER ? 0 : pl->bytes[i];\n"
                   "    *nfill = pl->nfill;\n"
                   "    for (int j = 0; j < pl->nfill; j++) {\n"
                   "        const aot_lce_fill *fl = &pl->fill[j];\n"
                   "        fills[4 * j] = fl->buf, fills[4 * j + 1] = fl->weight, fills[4 * j + 2] = fl->ld, "
                   "fills[4 * j + 3] = fl->col0;\n"
                   "    }\n    return %s_OK;\n}\n",
                P, P, P, U, P, P, U, U);
        fprintf(f, "\n%s_status %s_ikbo_lce_run_buffers(const %s_ikbo_lce_shape *shape, int64_t B, int64_t U, "
                   "const CUdeviceptr buffers[%s_IKBO_LCE_NBUF], CUstream stream)\n{\n"
                   "    const char *fn = \"%s_ikbo_lce_run_buffers\";\n"
                   "    if (!buffers)\n"
                   "        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: buffers is NULL\", fn);\n"
                   "    int r = aot_ikbo_lce_row(fn, shape);\n"
                   "    if (r < 0)\n        return %s_ERR_INVALID;\n"
                   "    /* an operation of the caller's buffers, its flags' counter at zero (they are zero) */\n"
                   "    struct aot_lce_op op;\n"
                   "    memset(&op, 0, sizeof op);\n"
                   "    op.plan = &aot_lce_plans[r];\n"
                   "    for (int i = 0; i < AOT_LCE_NBUF; i++) {\n"
                   "        if ((i < AOT_LCE_CALLER || op.plan->bytes[i]) && !buffers[i])\n"
                   "            return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: buffers[%%d] is NULL (%%s)\", fn, i,\n"
                   "                                        i < AOT_LCE_CALLER ? \"the caller's\" : \"the operation's\");\n"
                   "        op.buf[i] = buffers[i];\n    }\n"
                   "    return (%s_status)aot_lce_run(fn, &op, aot_kernels, aot_states, buffers, B, U, stream);\n}\n",
                P, P, P, U, P, P, U, P, P);
    } else if (g->op == &fa_aot_op) {
        fprintf(h, "\n/* The operation on the caller's buffers (loomc aot --torch; P_torch.py runs it on PyTorch's\n"
                   " * allocator), split where its work plan is made on the host: plan_max gives the most units\n"
                   " * a plan of the shape has; make_plan writes the plan of a request of B and U (1 to the\n"
                   " * shape's) into units [plan_max][%s_IKBO_FA_UNIT_FIELDS] int32, host memory, and its count\n"
                   " * into *n (no GPU; a mapping entry or length out of range is refused by name); the caller\n"
                   " * copies it to the device.  launch_plan then launches on stream with that plan (n units),\n"
                   " * seq_len [U] int32 (S each without varlen) and claims (int32 [2], zero; the kernel leaves\n"
                   " * it zero): a launch alone, no allocation, no copy, no synchronization. */\n"
                   "enum { %s_IKBO_FA_UNIT_FIELDS = %d };\n"
                   "%s_status %s_ikbo_fa_plan_max(const %s_ikbo_fa_shape *shape, int64_t *units);\n"
                   "%s_status %s_ikbo_fa_make_plan(const %s_ikbo_fa_shape *shape, int64_t B, int64_t U, "
                   "const int32_t *cand_to_user, const int32_t *seq_len, int32_t *units, int64_t *n);\n"
                   "%s_status %s_ikbo_fa_launch_plan(const %s_ikbo_fa_shape *shape, int64_t B, int64_t U, "
                   "CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr plan, int64_t n, CUdeviceptr seq_len, "
                   "CUdeviceptr claims, CUdeviceptr out, CUstream stream);\n",
                U, U, FA_UNIT_FIELDS, P, P, P, P, P, P, P, P, P);
        fprintf(f, "\n/* ================================================================ the operation on the "
                   "caller's buffers (--torch) */\n"
                   "%s_status %s_ikbo_fa_plan_max(const %s_ikbo_fa_shape *shape, int64_t *units)\n{\n"
                   "    const char *fn = \"%s_ikbo_fa_plan_max\";\n"
                   "    if (!units)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: units is NULL\", fn);\n"
                   "    int r = aot_ikbo_fa_row(fn, shape);\n"
                   "    if (r < 0)\n        return %s_ERR_INVALID;\n"
                   "    *units = fa_units_max(aot_fa_plans[r].B, aot_fa_plans[r].nseed);\n"
                   "    return %s_OK;\n}\n",
                P, P, P, P, P, U, U);
        fprintf(f, "\n%s_status %s_ikbo_fa_make_plan(const %s_ikbo_fa_shape *shape, int64_t B, int64_t U, "
                   "const int32_t *cand_to_user, const int32_t *seq_len, int32_t *units, int64_t *n)\n{\n"
                   "    const char *fn = \"%s_ikbo_fa_make_plan\";\n"
                   "    if (!cand_to_user || !units || !n)\n"
                   "        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: %%s is NULL\", fn, !cand_to_user ? "
                   "\"cand_to_user\" : !units ? \"units\" : \"n\");\n"
                   "    int r = aot_ikbo_fa_row(fn, shape);\n"
                   "    if (r < 0)\n        return %s_ERR_INVALID;\n"
                   "    const aot_fa_plan *pl = &aot_fa_plans[r];\n"
                   "    int st = aot_check_request(fn, B, U, pl->B, pl->U);\n"
                   "    if (st != AOT_OK)\n        return (%s_status)st;\n"
                   "    if (pl->varlen != (seq_len != NULL))\n"
                   "        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: %%s\", fn, pl->varlen ? \"the shape has "
                   "varlen=1: seq_len is needed\" : \"seq_len given, but the shape has varlen=0 (every user has S "
                   "keys)\");\n"
                   "    char err[200];\n"
                   "    int64_t m = fa_units(B, U, pl->S, pl->nseed, cand_to_user, seq_len, units, err, sizeof err);\n"
                   "    if (m < 0)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: %%s\", fn, err);\n"
                   "    *n = m;\n    return %s_OK;\n}\n",
                P, P, P, P, P, U, P, P, P, U);
        fprintf(f, "\n%s_status %s_ikbo_fa_launch_plan(const %s_ikbo_fa_shape *shape, int64_t B, int64_t U, "
                   "CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr plan, int64_t n, CUdeviceptr seq_len, "
                   "CUdeviceptr claims, CUdeviceptr out, CUstream stream)\n{\n"
                   "    const char *fn = \"%s_ikbo_fa_launch_plan\";\n"
                   "    int r = aot_ikbo_fa_row(fn, shape);\n"
                   "    if (r < 0)\n        return %s_ERR_INVALID;\n"
                   "    const aot_fa_plan *pl = &aot_fa_plans[r];\n"
                   "    int st = aot_check_request(fn, B, U, pl->B, pl->U);\n"
                   "    if (st != AOT_OK)\n        return (%s_status)st;\n"
                   "    if (n < 0 || n > fa_units_max(B, pl->nseed))\n"
                   "        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: n = %%lld units; a plan of B = %%lld has 0 "
                   "to %%lld\", fn, (long long)n, (long long)B, (long long)fa_units_max(B, pl->nseed));\n"
                   "    /* an operation of the caller's plan, lengths and counter */\n"
                   "    struct aot_fa_op op;\n"
                   "    memset(&op, 0, sizeof op);\n"
                   "    op.plan = pl;\n"
                   "    op.units_dev = plan, op.lens = seq_len, op.claims = claims;\n"
                   "    op.units = n, op.B = B, op.U = U;\n"
                   "    return (%s_status)aot_fa_launch(fn, &op, aot_kernels, aot_states, q, k, v, out, stream);\n}\n",
                P, P, P, P, U, P, P, P);
    }
}

/* A Python identifier from a name: other characters become '_', and Python's keywords and
 * the module's own names get a trailing '_'. */
static void py_ident(const char *s, char *out, size_t n)
{
    static const char *const reserved[] = {"False", "None", "True", "and", "as", "assert", "async", "await",
                                           "break", "class", "continue", "def", "del", "elif", "else", "except",
                                           "finally", "for", "from", "global", "if", "import", "in", "is", "lambda",
                                           "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
                                           "with", "yield", "torch", "typing", "ctypes", "op"};
    c_ident(s, out, n);
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (!strcmp(out, reserved[i])) {
            size_t w = strlen(out);
            if (w + 2 < n)
                out[w] = '_', out[w + 1] = 0;
        }
}

/* The generic op's table: per row, each argument {name, kind, access, dtype, dims (a run-time
 * key's name where the kernel takes that dim at run time), strides}, from the kernel built
 * at the row's shape. */
static loom_status torch_generic_args(gen *g, FILE *py)
{
    const loom_aot_request *r = g->r;
    static const char *const kind_py[] = {[ARG_PTR] = "ptr", [ARG_I32] = "i32", [ARG_I64] = "i64", [ARG_F32] = "f32"};
    const kern *k0 = &g->k[g->row_kernel[0]];
    fprintf(py, "    \"generic\": {\n        \"dim_args\": [");
    for (int a = 0, n = 0; a < k0->nargs; a++)
        if (k0->is_dim[a])
            fprintf(py, "%s\"%s\"", n++ ? ", " : "", k0->argname[a]);
    fprintf(py, "],\n        \"args\": [\n");
    for (int i = 0; i < r->nshapes; i++) {
        char why[1024] = "";
        loom_kernel *k = r->t->build(r->shapes[i], r->configs[i], why, sizeof why);
        if (!k)
            return gfail(g, LOOM_ERR_INVALID, "%s: --torch: the kernel of shape %d does not build again: %s", r->t->name,
                         i + 1, why);
        fprintf(py, "            [\n");
        for (int a = 0; a < loom_kernel_num_args(k); a++) {
            loom_arg_info ai;
            loom_kernel_arg_info(k, a, &ai);
            int kind = g->k[g->row_kernel[i]].kind[a];
            fprintf(py, "                [\"%s\", \"%s\", \"%s\", \"%s\", [", ai.name ? ai.name : "arg", kind_py[kind],
                    ai.access == LOOM_OUT ? "out" : ai.access == LOOM_INOUT ? "inout" : "in",
                    loom_dtype_name(ai.dtype));
            for (int d = 0; ai.is_tensor && d < ai.shape.rank; d++) {
                loom_arg_info di;
                if (g->ndyn && ai.dim_of[d] >= 0 && loom_kernel_arg_info(k, ai.dim_of[d], &di))
                    fprintf(py, "%s\"%s\"", d ? ", " : "", di.name);
                else
                    fprintf(py, "%s%lld", d ? ", " : "", (long long)ai.shape.dim[d]);
            }
            fprintf(py, "], [");
            for (int d = 0; ai.is_tensor && d < ai.shape.rank; d++)
                fprintf(py, "%s%lld", d ? ", " : "", (long long)ai.strides[d]);
            fprintf(py, "]],\n");
        }
        fprintf(py, "            ],\n");
        loom_kernel_destroy(k);
    }
    fprintf(py, "        ],\n    },\n");
    return LOOM_OK;
}

/* The generic op of a template without an operation: its launch as loom::T, the arguments
 * the kernel's inputs (tensors read, scalars) in its order, then the run-time keys no input
 * tensor carries; it returns the kernel's outputs, allocated from the argument info, and
 * mutates its in-out tensors. */
static loom_status torch_generic_op(gen *g, FILE *py)
{
    const loom_aot_request *r = g->r;
    const char *T = r->t->name;
    const kern *k0 = &g->k[g->row_kernel[0]];
    char build_why[1024] = "";
    loom_kernel *k = r->t->build(r->shapes[0], r->configs[0], build_why, sizeof build_why);
    if (!k)
        return gfail(g, LOOM_ERR_INVALID, "%s: --torch: the kernel does not build again: %s", T, build_why);
    char params[4096] = "", names[4096] = "", dict[4096] = "", extra[1024] = "", muts[1024] = "", outs[1024] = "";
    size_t np = 0, nn = 0, nd = 0, ne = 0, nm = 0, no = 0;
    int nout = 0;
    bool carried[LOOM_MAX_PARAMS] = {false}; /* run-time keys: some input tensor's dim */
    for (int a = 0; a < k0->nargs; a++) {
        loom_arg_info ai;
        loom_kernel_arg_info(k, a, &ai);
        char id[80];
        py_ident(k0->argname[a], id, sizeof id);
        if (k0->is_dim[a])
            continue;
        if (ai.is_tensor && ai.access == LOOM_OUT) {
            no += (size_t)snprintf(outs + no, sizeof outs - no, "%s%s", nout ? ", " : "", k0->argname[a]);
            nout++;
            continue;
        }
        if (ai.is_tensor)
            for (int d = 0; d < ai.shape.rank; d++)
                for (int j = 0; j < g->nkeys && ai.dim_of[d] >= 0; j++) {
                    loom_arg_info di;
                    if (loom_kernel_arg_info(k, ai.dim_of[d], &di) && !strcmp(di.name, r->t->shape[g->key[j]].key))
                        carried[j] = true;
                }
        const char *type = ai.is_tensor ? "torch.Tensor" : k0->kind[a] == ARG_F32 ? "float" : "int";
        np += (size_t)snprintf(params + np, sizeof params - np, "%s%s: %s", np ? ", " : "", id, type);
        nn += (size_t)snprintf(names + nn, sizeof names - nn, "%s%s", nn ? ", " : "", id);
        nd += (size_t)snprintf(dict + nd, sizeof dict - nd, "%s\"%s\": %s", nd ? ", " : "", k0->argname[a], id);
        if (ai.is_tensor && ai.access == LOOM_INOUT)
            nm += (size_t)snprintf(muts + nm, sizeof muts - nm, "\"%s\", ", id);
    }
    for (int j = 0; j < g->nkeys && g->ndyn; j++) {
        const loom_param *p = &r->t->shape[g->key[j]];
        if (!p->runtime || carried[j])
            continue;
        char id[80];
        py_ident(p->key, id, sizeof id);
        for (int a = 0; a < k0->nargs; a++) /* a key named like an argument */
            if (!k0->is_dim[a] && !strcmp(k0->argname[a], p->key))
                snprintf(id + strlen(id), sizeof id - strlen(id), "_");
        np += (size_t)snprintf(params + np, sizeof params - np, "%s%s: int = 1", np ? ", " : "", id);
        nn += (size_t)snprintf(names + nn, sizeof names - nn, "%s%s=1", nn ? ", " : "", id);
        ne += (size_t)snprintf(extra + ne, sizeof extra - ne, "%s\"%s\": %s", ne ? ", " : "", p->key, id);
    }
    loom_kernel_destroy(k);
    if (np >= sizeof params || nd >= sizeof dict || ne >= sizeof extra || nm >= sizeof muts || no >= sizeof outs)
        return gfail(g, LOOM_ERR_UNSUPPORTED, "%s: --torch: too many arguments for the generated op", T);
    char ret[600];
    if (nout == 0)
        snprintf(ret, sizeof ret, "None");
    else if (nout == 1)
        snprintf(ret, sizeof ret, "torch.Tensor");
    else {
        size_t w = (size_t)snprintf(ret, sizeof ret, "typing.Tuple[");
        for (int i = 0; i < nout && w < sizeof ret; i++)
            w += (size_t)snprintf(ret + w, sizeof ret - w, "%storch.Tensor", i ? ", " : "");
        snprintf(ret + w, w < sizeof ret ? sizeof ret - w : 0, "]");
    }
    char fid[80];
    py_ident(T, fid, sizeof fid);
    fprintf(py, "\n\n# ---------------------------------------------------------------- loom::%s\n"
                "@torch.library.custom_op(\"loom::%s\", mutates_args=(%s), device_types=\"cuda\")\n"
                "def %s(%s) -> %s:\n"
                "    \"\"\"%s's kernel at a shape of this file, on torch's current stream: the kernel's inputs in\n"
                "    its order%s; returns %s (allocated here).\"\"\"\n"
                "    return _generic_run(\"loom::%s\", {%s}, {%s})\n\n\n"
                "@%s.register_fake\n"
                "def _(%s):\n"
                "    return _generic_fake(\"loom::%s\", {%s}, {%s})\n",
            T, T, muts, fid, params, ret, T, ne ? ", then the run-time keys no input carries" : "",
            nout ? outs : "nothing (its in-out tensors are updated)", T, dict, extra, fid, names, T, dict, extra);
    return LOOM_OK;
}

/* DIR/P_torch.py: the file's table (_LOOM), the run-time part (aot/aot_torch.py), and the
 * generic op of a template without an operation. */
static loom_status aot_torch_py(gen *g)
{
    const loom_aot_request *r = g->r;
    const loom_template *t = g->t;
    const char *P = r->prefix, *T = t->name;
    char path[4096], name[300];
    snprintf(name, sizeof name, "%s_torch.py", P);
    FILE *py = open_out(g, r->dir, name, path, sizeof path);
    if (!py)
        return LOOM_ERR_INVALID;
    const char *kind = g->op == &lce_aot_op ? "ikbo_lce" : g->op == &fa_aot_op ? "ikbo_fa" : "generic";
    const char *cmd = r->command && *r->command ? r->command : "(loom_aot_write_torch)";
    fprintf(py, "# %s_torch.py -- %s ahead of time as PyTorch custom ops (torch.ops.loom.*), written by loom %s's\n"
                "# `loomc aot --torch` (do not edit; regenerate instead).  The command:\n#   %s\n"
                "# Import it (it builds %s.c, beside it, with the system C compiler on first use) and call\n"
                "# the ops; docs/torch.md in loom explains them.\n\n"
                "# the file's shapes: the rows of %s.c's dispatch table\n"
                "_LOOM = {\n    \"prefix\": \"%s\",\n    \"template\": \"%s\",\n    \"op\": \"%s\",\n    \"keys\": [",
            P, T, LOOM_VERSION, cmd, P, P, P, T, kind);
    for (int j = 0; j < g->nkeys; j++)
        fprintf(py, "%s\"%s\"", j ? ", " : "", t->shape[g->key[j]].key);
    fprintf(py, "],\n    \"runtime\": [");
    bool op_request = g->op == &lce_aot_op || g->op == &fa_aot_op; /* run_at: B and U up to the row's */
    for (int j = 0; j < g->nkeys; j++)
        fprintf(py, "%s%d", j ? ", " : "", (op_request || g->ndyn) && t->shape[g->key[j]].runtime ? 1 : 0);
    fprintf(py, "],\n    \"rows\": [\n");
    for (int i = 0; i < r->nshapes; i++) {
        int64_t v[LOOM_MAX_PARAMS];
        key_values(g, r->shapes[i], v);
        fprintf(py, "        [");
        for (int j = 0; j < g->nkeys; j++)
            fprintf(py, "%s%lld", j ? ", " : "", (long long)v[j]);
        fprintf(py, "],\n");
    }
    fprintf(py, "    ],\n    \"dtype_names\": [");
    for (int d = 0; d < LOOM_DTYPE_COUNT; d++)
        fprintf(py, "%s\"%s\"", d ? ", " : "", loom_dtype_name((loom_dtype)d));
    fprintf(py, "],\n    \"lce_nbuf\": %d,\n    \"fa_fields\": %d,\n", IK_NBUF, FA_UNIT_FIELDS);
    loom_status st = LOOM_OK;
    if (!op_request)
        st = torch_generic_args(g, py);
    fprintf(py, "}\n\n");
    fputs((const char *)aot_text_torch, py);
    if (st == LOOM_OK && !op_request)
        st = torch_generic_op(g, py);
    bool bad = ferror(py) != 0;
    bad |= fclose(py) != 0;
    if (st == LOOM_OK && bad)
        st = gfail(g, LOOM_ERR_INVALID, "writing %s failed: %s", path, strerror(errno));
    if (st != LOOM_OK)
        remove(path);
    return st;
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
    if (st == LOOM_OK && g->op && g->op->write) {
        g->err[0] = 0;
        if ((st = g->op->write(g, g->op_state, h, f, g->err, g->errlen)) != LOOM_OK && !g->err[0])
            gfail(g, st, "%s: the operation's write hook (loom_template.aot) failed without a message", T);
    }
    if (st == LOOM_OK && g->torch)
        aot_torch_c(g, h, f);
    fprintf(h, "\n#ifdef __cplusplus\n}\n#endif\n#endif\n");
    bool bad = ferror(h) || ferror(f);
    bad |= fclose(h) != 0;
    bad |= fclose(f) != 0;
    if (st == LOOM_OK && bad)
        st = gfail(g, LOOM_ERR_INVALID, "writing %s or %s failed: %s", hpath, cpath, strerror(errno));
    if (st == LOOM_OK && g->torch)
        st = aot_torch_py(g);
    if (st != LOOM_OK)
        remove(hpath), remove(cpath);
    return st;
}

/* Whether the run-time dims of kernel k are the template's run-time keys by name: a dim
 * argument of each run-time key's name, and a run-time key of each dim argument's name.
 * Only then can a launch take the dims from a request's shape; where not (a dim derived
 * from the keys, as ikbo_fa's rows = B * n_seed), why says which. */
static bool dims_by_name(const gen *g, loom_kernel *k, char *why, size_t n)
{
    const loom_template *t = g->t;
    for (int j = 0; j < g->nkeys; j++) {
        const loom_param *p = &t->shape[g->key[j]];
        bool found = false;
        for (int a = 0; a < loom_kernel_num_args(k) && p->runtime && !found; a++) {
            loom_arg_info ai;
            loom_kernel_arg_info(k, a, &ai);
            found = ai.is_dim && !strcmp(ai.name, p->key);
        }
        if (p->runtime && !found) {
            snprintf(why, n, "shape key '%s' is run-time, but the kernel has no run-time dim argument '%s'", p->key,
                     p->key);
            return false;
        }
    }
    for (int a = 0; a < loom_kernel_num_args(k); a++) {
        loom_arg_info ai;
        loom_kernel_arg_info(k, a, &ai);
        bool found = !ai.is_dim;
        for (int j = 0; j < g->nkeys && !found; j++)
            found = t->shape[g->key[j]].runtime && !strcmp(t->shape[g->key[j]].key, ai.name);
        if (!found) {
            snprintf(why, n, "the kernel's run-time dim '%s' is no run-time shape key", ai.name);
            return false;
        }
    }
    return true;
}

/* Kernel k (built at shape): its run-time dims' maxima are the shape's values of their keys,
 * and, for a table of exact shapes, the values its launches pass (row_dims). */
static loom_status check_dims(gen *g, int row, loom_kernel *k, const int64_t *shape, const char *what)
{
    const loom_template *t = g->t;
    for (int a = 0; a < loom_kernel_num_args(k); a++) {
        loom_arg_info ai;
        loom_kernel_arg_info(k, a, &ai);
        if (!ai.is_dim)
            continue;
        g->row_dims[row][a] = ai.dim_max;
        for (int j = 0; j < g->nkeys && g->ndyn; j++)
            if (!strcmp(t->shape[g->key[j]].key, ai.name) && ai.dim_max != shape[g->key[j]])
                return gfail(g, LOOM_ERR_INVALID, "%s: the kernel's run-time dim '%s' has maximum %lld, not the "
                             "shape's %lld (a template bug)", what, ai.name, (long long)ai.dim_max,
                             (long long)shape[g->key[j]]);
    }
    return LOOM_OK;
}

/* Shape i's grid rule, which must give the template's grid at the shape and depend on no
 * key that only shapes a check's inputs. */
static loom_status row_rule(gen *g, int i, const char *what)
{
    const loom_aot_request *r = g->r;
    loom_grid_rule *gr = &g->row_rule[i];
    memset(gr, 0, sizeof *gr);
    r->t->grid_rule(r->shapes[i], r->configs[i], gr);
    for (int d = 0; d < 3; d++)
        for (int p = 0; p < r->t->nshape; p++)
            if (gr->per[d][p] && r->t->shape[p].inputs_only)
                return gfail(g, LOOM_ERR_INVALID, "%s: the grid rule depends on '%s', which shapes only a check's "
                             "inputs (a template bug)", what, r->t->shape[p].key);
    int rg[3];
    if (loom_grid_rule_eval(gr, r->shapes[i], rg) || memcmp(rg, g->row_grid[i], sizeof rg))
        return gfail(g, LOOM_ERR_INVALID, "%s: the grid rule gives %dx%dx%d but the grid is %dx%dx%d (a template bug)",
                     what, rg[0], rg[1], rg[2], g->row_grid[i][0], g->row_grid[i][1], g->row_grid[i][2]);
    return LOOM_OK;
}

static loom_status aot_write(const loom_aot_request *r, int torch, char *err, size_t errlen);

loom_status loom_aot_write(const loom_aot_request *r, char *err, size_t errlen)
{
    return aot_write(r, 0, err, errlen);
}

loom_status loom_aot_write_torch(const loom_aot_request *r, char *err, size_t errlen)
{
    return aot_write(r, 1, err, errlen);
}

static loom_status aot_write(const loom_aot_request *r, int torch, char *err, size_t errlen)
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
    gen g = {.r = r, .t = r->t, .err = err, .errlen = errlen, .torch = torch};
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
        if (!r->t->shape[i].inputs_only) {
            g.key[g.nkeys++] = i;
            g.ndyn += r->t->shape[i].runtime != 0;
        }
    if (g.ndyn && !r->t->grid_rule) {
        snprintf(err, errlen, "%s has run-time shape keys but no grid_rule: a file cannot compute its grid per "
                 "launch (a template bug)", r->t->name);
        return LOOM_ERR_INVALID;
    }
    if (g.ndyn) {
        /* the run-time dims come from a request's shape only where they are its keys; else
         * the file serves the shapes generated exactly, their dims at the shapes' values */
        char why[300] = "";
        loom_kernel *k0 = r->t->build(r->shapes[0], r->configs[0], why, sizeof why);
        if (k0 && !dims_by_name(&g, k0, why, sizeof why)) {
            snprintf(g.fixed, sizeof g.fixed, "%s", why);
            fprintf(stderr, "loom: warning: loomc aot %s: %s, so a launch cannot take its dims from the request's "
                    "shape: the file serves the shapes generated exactly\n", r->t->name, why);
            g.ndyn = 0;
        }
        loom_kernel_destroy(k0); /* a build that fails fails again below, with its reason */
    }
    /* two shapes alike in every static key, and in the bucket of every run-time key, would be
     * two rows of which only the first is reachable */
    for (int i = 0; i < r->nshapes; i++)
        for (int j = 0; j < i; j++) {
            bool same = true, equal = true;
            for (int k = 0; k < g.nkeys && same; k++) {
                int64_t a = r->shapes[i][g.key[k]], b = r->shapes[j][g.key[k]];
                equal &= a == b;
                same = g.ndyn && r->t->shape[g.key[k]].runtime ? loom_dim_bucket(a) == loom_dim_bucket(b) : a == b;
            }
            if (same && equal) {
                snprintf(err, errlen, "shapes %d and %d are the same shape", j + 1, i + 1);
                return LOOM_ERR_INVALID;
            }
            if (same) {
                char dn[200];
                dyn_names(&g, dn, sizeof dn);
                snprintf(err, errlen, "shapes %d and %d differ only in run-time keys (%s) of the same buckets (the "
                         "powers of two at or above them): one kernel serves both, up to the larger values; give "
                         "that one alone", j + 1, i + 1, dn);
                return LOOM_ERR_INVALID;
            }
        }
    size_t ns = (size_t)(unsigned)r->nshapes; /* >= 1, checked above */
    g.row_kernel = calloc(ns, sizeof *g.row_kernel);
    g.row_grid = calloc(ns, sizeof *g.row_grid);
    g.row_rule = calloc(ns, sizeof *g.row_rule);
    g.row_dims = calloc(ns, sizeof *g.row_dims);
    if (!g.row_kernel || !g.row_grid || !g.row_rule || !g.row_dims) {
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
        if (k && (st = check_dims(&g, i, k, r->shapes[i], what)) != LOOM_OK) {
            loom_kernel_destroy(k);
            break;
        }
        if ((g.row_kernel[i] = kern_build_add(&g, k, why, what)) < 0) {
            st = LOOM_ERR_INVALID;
            break;
        }
        r->t->grid(r->shapes[i], r->configs[i], g.row_grid[i]);
        if (g.ndyn && (st = row_rule(&g, i, what)) != LOOM_OK)
            break;
    }
    g.op = aot_op_of(r->t);
    bool compiled = false;
    if (st == LOOM_OK && g.op && g.op->compile) {
        compiled = true;
        err[0] = 0;
        if ((st = g.op->compile(&g, &g.op_state, err, errlen)) != LOOM_OK && !err[0])
            gfail(&g, st, "%s: the operation's compile hook (loom_template.aot) failed without a message",
                  r->t->name);
    }
    if (st == LOOM_OK)
        st = put_files(&g);
    if (compiled && g.op->release)
        g.op->release(g.op_state);
    gen_free(&g);
    return st;
}

/* ---------------------------------------------------------------- an operation's view of the file */

const loom_aot_request *loom_aot_file_request(const loom_aot_file *f) { return f ? f->r : NULL; }

int loom_aot_file_row_kernel(const loom_aot_file *f, int shape)
{
    return f && shape >= 0 && shape < f->r->nshapes ? f->row_kernel[shape] : -1;
}

int loom_aot_add_kernel(loom_aot_file *f, loom_kernel *k, const char *what, char *err, size_t errlen)
{
    if (!f || !k) {
        if (err && errlen)
            snprintf(err, errlen, "loom_aot_add_kernel: %s is NULL", !f ? "the file" : "the kernel");
        return -1;
    }
    int i = kern_add(f, k, what ? what : loom_kernel_name(k));
    if (i < 0 && err && errlen && err != f->err)
        snprintf(err, errlen, "%s", f->err);
    return i;
}
