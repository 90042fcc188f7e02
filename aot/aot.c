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
 * The generator's files (their shared internals in aot/gen.h):
 *   aot.c        loom_aot_write: the request checked, the kernels compiled (step 1), the
 *                files opened and written in order, an operation's view of the file
 *   gen_c.c      the C of steps 2 and 3: the kernels' tables, a template's dispatch table
 *                and its launch function
 *   gen_ops.c    the operations of the built-in IKBO templates (step 3's operations)
 *   gen_torch.c  --torch: the operations' entry points for PyTorch, and DIR/P_torch.py
 *
 * Prefixes: aot_ (the embedded run-time code, loom's entry points), gen_ (the generator's
 * own, shared between its files).
 */
#include "gen.h"
#include "../pipe/autows.h" /* pipe_autows_on: a persistent kernel takes the grid */
#include "../runtime/gpu.h" /* rt_ptxas_compile */

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

loom_status gen_fail(gen *g, loom_status st, const char *fmt, ...)
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

void gen_shape_text(const gen *g, const int64_t *shape, char *buf, size_t n)
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
int gen_kern_add(gen *g, loom_kernel *k, const char *what)
{
    if (loom_verify(k) != LOOM_OK) {
        gen_fail(g, LOOM_ERR_VERIFY, "%s: %s", what, loom_kernel_errors(k));
        return -1;
    }
    kern nk;
    memset(&nk, 0, sizeof nk);
    snprintf(nk.name, sizeof nk.name, "%s", loom_kernel_name(k));
    snprintf(nk.what, sizeof nk.what, "%s", what);
    nk.threads = (unsigned)loom_kernel_num_warps(k) * 32u;
    nk.persistent = pipe_autows_on(k);
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
            gen_fail(g, LOOM_ERR_UNSUPPORTED, "%s: argument '%s' is a %s scalar, which a launch cannot pass", what,
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
            gen_fail(g, st, "%s: compiling for %s: %s", what, g->arch[a], err);
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
                    gen_fail(g, st, "%s: %s", what, err);
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
            gen_fail(g, st, "%s: the cubin for %s: %s (loomc aot needs the CUDA toolkit's ptxas: LOOM_PTXAS names it)",
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
            gen_fail(g, LOOM_ERR_NOMEM, "out of host memory");
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
        gen_fail(g, LOOM_ERR_INVALID, "%s: %s", what, why && *why ? why : "the build failed");
        return -1;
    }
    int i = gen_kern_add(g, k, what);
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

/* ---------------------------------------------------------------- the files */

FILE *gen_open_out(gen *g, const char *dir, const char *name, char *path, size_t n)
{
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        gen_fail(g, LOOM_ERR_INVALID, "cannot write %s: %s", path, strerror(errno));
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
        return gen_fail(g, LOOM_ERR_INVALID, "cannot create %s: %s", r->dir, strerror(errno));
    char hname[300], cname[300];
    snprintf(hname, sizeof hname, "%s.h", P);
    snprintf(cname, sizeof cname, "%s.c", P);
    FILE *h = gen_open_out(g, r->dir, hname, hpath, sizeof hpath);
    if (!h)
        return LOOM_ERR_INVALID;
    FILE *f = gen_open_out(g, r->dir, cname, cpath, sizeof cpath);
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
        gen_shape_text(g, r->shapes[i], s, sizeof s);
        loom_params_format(g->t->config, g->t->nconfig, r->configs[i], c, sizeof c);
        fprintf(f, " *   %s\n *     %s\n", s, c);
    }
    fprintf(f, " * Architectures:");
    for (int a = 0; a < g->narch; a++)
        fprintf(f, " %s", g->arch[a]);
    fprintf(f, "\n */\n#define _POSIX_C_SOURCE 200809L\n#include \"%s\"\n\n", hname);
    fputs((const char *)aot_text_rt, f);
    gen_put_kernels(g, f);
    fprintf(f, "\nconst char *%s_last_error(void) { return aot_error(); }\n\n"
               "void %s_unload(void) { aot_unload(aot_states, %d); }\n",
            P, P, g->nk);
    loom_status st = gen_put_template(g, h, f);
    if (st == LOOM_OK && g->op && g->op->write) {
        g->err[0] = 0;
        if ((st = g->op->write(g, g->op_state, h, f, g->err, g->errlen)) != LOOM_OK && !g->err[0])
            gen_fail(g, st, "%s: the operation's write hook (loom_template.aot) failed without a message", T);
    }
    if (st == LOOM_OK && g->torch)
        aot_torch_c(g, h, f);
    fprintf(h, "\n#ifdef __cplusplus\n}\n#endif\n#endif\n");
    bool bad = ferror(h) || ferror(f);
    bad |= fclose(h) != 0;
    bad |= fclose(f) != 0;
    if (st == LOOM_OK && bad)
        st = gen_fail(g, LOOM_ERR_INVALID, "writing %s or %s failed: %s", hpath, cpath, strerror(errno));
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
                return gen_fail(g, LOOM_ERR_INVALID, "%s: the kernel's run-time dim '%s' has maximum %lld, not the "
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
                return gen_fail(g, LOOM_ERR_INVALID, "%s: the grid rule depends on '%s', which shapes only a check's "
                             "inputs (a template bug)", what, r->t->shape[p].key);
    int rg[3];
    if (loom_grid_rule_eval(gr, r->shapes[i], rg) || memcmp(rg, g->row_grid[i], sizeof rg))
        return gen_fail(g, LOOM_ERR_INVALID, "%s: the grid rule gives %dx%dx%d but the grid is %dx%dx%d (a template bug)",
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
                gen_dyn_names(&g, dn, sizeof dn);
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
        gen_shape_text(&g, r->shapes[i], s, sizeof s);
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
            gen_fail(&g, st, "%s: the operation's compile hook (loom_template.aot) failed without a message",
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
    int i = gen_kern_add(f, k, what ? what : loom_kernel_name(k));
    if (i < 0 && err && errlen && err != f->err)
        snprintf(err, errlen, "%s", f->err);
    return i;
}
