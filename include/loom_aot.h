/*
 * loom_aot.h -- ahead of time, for a program that writes a template's kernels out as plain
 * C files (what `loomc aot` does) and for an operation of several kernels that adds its
 * own code to those files.  Included by loom.h.  docs/aot.md has the files' contents.
 */
#include "loom.h" /* first, outside the guard: loom.h declares every part of the API in order */
#ifndef INCLUDE_LOOM_AOT_H
#define INCLUDE_LOOM_AOT_H

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported from libloom (loom.h says more). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---------------------------------------------------------------- ahead of time
 * (aot/; docs/aot.md)  loom_aot_write writes template t at a list of shapes, each with its
 * config, as dir/prefix.h and dir/prefix.c: plain C11 that embeds each kernel's cubin (made
 * by the toolkit's ptxas) and PTX, opens the CUDA driver itself, and launches by shape from
 * a dispatch table; for ikbo_lce and ikbo_fa also the whole operation, as the C API of
 * loom_ikbo.h runs it.  A program links the two files without loom or LLVM.  `loomc aot`
 * is its command line. */
typedef struct loom_aot_request {
    const loom_template *t;
    int nshapes;
    const int64_t (*shapes)[LOOM_MAX_PARAMS];  /* shape i's parameters (t->shape order) */
    const int64_t (*configs)[LOOM_MAX_PARAMS]; /* and its config */
    int stage;           /* ikbo_lce: the stage the operation runs (0 to 4) */
    const char *archs;   /* "sm_90a" (NULL: that), or a comma list: "sm_90a,sm_80" */
    const char *prefix;  /* a C identifier: the files' names and the public functions' prefix */
    const char *dir;     /* made when missing */
    const char *command; /* the command line, quoted in the files' comments (NULL: none) */
} loom_aot_request;
/* LOOM_OK, or the reason in err (a shape or config the template refuses, a kernel that
 * does not compile, no ptxas, a file that cannot be written: no file is left then). */
loom_status loom_aot_write(const loom_aot_request *r, char *err, size_t errlen);

/* An operation's part of a file (loom_template.aot; docs/aot.md, "An operation of your
 * own").  Every file has the template's kernels, its dispatch table and its launch
 * function; a template whose work takes several kernels (ikbo_lce's stages, say) adds
 * them and the functions that run them through these hooks.  The file being written is
 * a loom_aot_file: its request, the kernel each row of the dispatch table launches, and
 * loom_aot_add_kernel for the operation's other kernels. */
typedef struct loom_aot_file loom_aot_file;
typedef struct loom_aot_op {
    /* After the template's kernels are compiled: compile the operation's own with
     * loom_aot_add_kernel, keeping what write needs in *state.  NULL: none. */
    loom_status (*compile)(loom_aot_file *f, void **state, char *err, size_t errlen);
    /* After the template's launch function: the operation's declarations into h (the
     * header) and its code into c (the C file, whose launches go through the run-time
     * code of aot/aot_rt.c: aot_launch on aot_kernels[i] and aot_states[i]). */
    loom_status (*write)(loom_aot_file *f, void *state, FILE *h, FILE *c, char *err, size_t errlen);
    /* Free state (called once compile has run, whatever happened after: state may be
     * NULL, or partly made when compile failed; NULL hook: nothing to free). */
    void (*release)(void *state);
} loom_aot_op;
/* The request the file is written for. */
const loom_aot_request *loom_aot_file_request(const loom_aot_file *f);
/* The index in aot_kernels of the kernel row `shape` of the dispatch table launches. */
int loom_aot_file_row_kernel(const loom_aot_file *f, int shape);
/* Verify, compile (for each architecture of the request) and add kernel k, which stays
 * the caller's; `what` names it in comments and messages.  Returns its index in
 * aot_kernels (a kernel of the same code and launch as one already added is that one), or
 * -1 with the reason in err. */
int loom_aot_add_kernel(loom_aot_file *f, loom_kernel *k, const char *what, char *err, size_t errlen);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* INCLUDE_LOOM_AOT_H */
