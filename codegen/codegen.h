/*
 * codegen.h -- the door into the code generator: a verified loom kernel in, PTX and what a
 * launch must pass out.
 *
 * cg_compile() is the one entry point; the runtime (runtime/) calls it, and nothing here
 * knows the runtime.  The types below are the kernel ABI the code generator decides and
 * a launcher follows:
 *   - the PTX entry is named loom_kernel_name(k);
 *   - parameters in argument order: a tensor is a `ptr addrspace(1)` (a .u64 global
 *     address; noalias, and readonly for LOOM_IN), a scalar is passed by value as
 *     .s32 / .s64 / .f32;
 *   - then one TMA descriptor per cg_tma_spec in cg_result.tma, in order
 *     (`.param .align 64 .b8 NAME[128]`, grid-constant), encoded by the host from the
 *     buffer of the argument the spec names;
 *   - block = loom_kernel_num_warps(k) * 32 threads in x (.maxntid is set), grid as
 *     loom_launch() was given it (program_id(a) is ctaid.{x,y,z}), cluster dims as
 *     loom_kernel_set_cluster() set them;
 *   - cg_result.smem_bytes of dynamic shared memory (the `extern .shared` array
 *     loom_smem) must be given at launch (0 when the kernel needs none);
 *   - tensor base pointers are assumed 16-byte aligned (the runtime refuses others at
 *     launch): 16-byte vector accesses rely on it.
 *
 * The passes behind the door are declared in codegen/cg.h (internal to codegen/).
 *
 * Prefix: cg_.
 */
#ifndef LOOM_CODEGEN_H
#define LOOM_CODEGEN_H

#include "loom.h"

#include <stdbool.h>

#include <stddef.h>
#include <stdint.h>

#define CG_MAX_TMA 16     /* the most TMA descriptors one kernel takes */
#define CG_TMA_MAX_RANK 5 /* the most dims a descriptor describes */

/* One TMA descriptor a kernel takes after its own parameters. */
typedef struct cg_tma_spec {
    int arg;                      /* index of the tensor argument it describes */
    int rank;                     /* 1..5: the tensor's rank (outermost first, as loom's) */
    int64_t box[CG_TMA_MAX_RANK]; /* the box (the shared tile) per dim, outermost first */
    int swizzle;                  /* 0, 32, 64 or 128 (bytes) */
} cg_tma_spec;

/* What a compile gives the launcher. */
typedef struct cg_result {
    char *ptx;                    /* NUL-terminated PTX text (cg_result_free frees it) */
    size_t smem_bytes;            /* dynamic shared memory the launch must provide */
    int ntma;                     /* TMA descriptors after the kernel's own parameters */
    cg_tma_spec tma[CG_MAX_TMA];
} cg_result;

/* Compile kernel k (verified first) to PTX for arch ("sm_90a" when NULL or empty, or
 * "sm_80", "sm_89", ...).  On success *out is filled (free it with cg_result_free); on
 * failure *out is empty and the message is in err: LOOM_ERR_VERIFY with the verifier's
 * list for a user's mistake, another status for what the code generator refuses.  The
 * user's kernel is not changed (the passes work on a copy). */
loom_status cg_compile(loom_kernel *k, const char *arch, cg_result *out, char *err, size_t errlen);
void cg_result_free(cg_result *r);
/* Is arch ("sm_90a", ...) an NVPTX processor the linked LLVM knows?  cg_compile refuses
 * one it does not (LLVM would abort the process on it). */
bool cg_arch_known(const char *arch);

#endif /* LOOM_CODEGEN_H */
