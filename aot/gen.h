/*
 * gen.h -- what the files of the ahead-of-time generator share (aot/aot.c says which does
 * what): a file being written (loom.h's loom_aot_file), its kernels, and the steps each
 * file offers the others.  Internal to aot/; tools/loomc.c includes aot/aot.h only.
 * Prefix: gen_.
 */
#ifndef LOOM_AOT_GEN_H
#define LOOM_AOT_GEN_H

#include "aot.h"
#include "../runtime/tma.h" /* rt_tma_plan */
#include "codegen.h"        /* CG_MAX_TMA, cg_compile */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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
    int persistent; /* automatic warp specialization: the launch passes the grid (aot_rt.c) */
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

/* ---------------------------------------------------------------- aot.c */

/* The file's failure: the message into its err, the status returned. */
loom_status gen_fail(gen *g, loom_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The shape as "k=v,..." (every key of the template's shape). */
void gen_shape_text(const gen *g, const int64_t *shape, char *buf, size_t n);
/* Add kernel k (verified and compiled for every architecture; destroyed by the caller)
 * and return its index, or -1 with the message in g->err.  A kernel with the PTX of one
 * already in the file is that one.  what: the template or step and the shape, for its
 * comment. */
int gen_kern_add(gen *g, loom_kernel *k, const char *what);
/* DIR/NAME opened for writing (its path into path), or NULL with the reason in g's err. */
FILE *gen_open_out(gen *g, const char *dir, const char *name, char *path, size_t n);

/* ---------------------------------------------------------------- gen_c.c */

/* A C identifier from an argument name (the launch functions' own names get a '_'). */
void gen_c_ident(const char *s, char *out, size_t n);
/* The kernels' images and launch tables. */
void gen_put_kernels(gen *g, FILE *f);
/* The values of the template's kernel-shaping keys (g->key) at shape, in order. */
void gen_key_values(const gen *g, const int64_t *shape, int64_t *out);
/* The names of the run-time keys, "B, U", for comments. */
void gen_dyn_names(const gen *g, char *buf, size_t n);
/* The template's dispatch table and launch function: its part of P.h and P.c. */
loom_status gen_put_template(gen *g, FILE *h, FILE *f);

/* ---------------------------------------------------------------- gen_ops.c */

/* The built-in operations (of ikbo_lce and ikbo_fa). */
extern const loom_aot_op gen_lce_op, gen_fa_op;
/* Template t's operation: its loom_template.aot, a built-in one, or NULL. */
const loom_aot_op *aot_op_of(const loom_template *t);

/* ---------------------------------------------------------------- gen_torch.c */

/* --torch: the operations' entry points on the caller's buffers, into P.h and P.c. */
void aot_torch_c(gen *g, FILE *h, FILE *f);
/* --torch: DIR/P_torch.py. */
loom_status aot_torch_py(gen *g);

#endif
