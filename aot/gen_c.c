/*
 * gen_c.c -- the C that `loomc aot` writes for a template (aot/aot.c, steps 2 and 3):
 * the kernels' images and launch tables, the dispatch table of the shapes asked for and
 * the launch function over it.
 */
#include "gen.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- writing: helpers */

/* A C identifier from an argument name: other characters become '_', and the names the
 * launch functions use themselves get a trailing '_'. */
void gen_c_ident(const char *s, char *out, size_t n)
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

void gen_put_kernels(gen *g, FILE *f)
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
               "run-time dims, persistent} */\n"
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
            fprintf(f, "aot_k%d_dims, %d},\n", i, k->persistent);
        else
            fprintf(f, "NULL, %d},\n", k->persistent);
    }
    fprintf(f, "};\nstatic aot_kstate aot_states[%d];\n", g->nk);
}

/* ---------------------------------------------------------------- writing: a template */

void gen_key_values(const gen *g, const int64_t *shape, int64_t *out)
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
        gen_c_ident(k->argname[a], id, sizeof id);
        fprintf(f, ", %s %s", kind_c(k->kind[a]), id);
    }
}

/* The names of the run-time keys, "B, U", for comments. */
void gen_dyn_names(const gen *g, char *buf, size_t n)
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
            gen_c_ident(k0->argname[a], id, sizeof id);
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

/* The dispatch table's rows: each shape's key values, one row a line. */
static void put_shape_rows(FILE *f, const gen *g, const loom_aot_request *r)
{
    for (int i = 0; i < r->nshapes; i++) {
        int64_t v[LOOM_MAX_PARAMS];
        gen_key_values(g, r->shapes[i], v);
        fprintf(f, "    ");
        put_i64s(f, v, g->nkeys);
        fprintf(f, ",\n");
    }
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
    gen_dyn_names(g, dn, sizeof dn);
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
    put_shape_rows(f, g, r);
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

loom_status gen_put_template(gen *g, FILE *h, FILE *f)
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
            return gen_fail(g, LOOM_ERR_UNSUPPORTED,
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
    put_shape_rows(f, g, r);
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

