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
 * user's kernel is not changed (the passes work on a copy).  The hang check is
 * cg_hang_check_ms()'s (LOOM_HANG_CHECK). */
loom_status cg_compile(loom_kernel *k, const char *arch, cg_result *out, char *err, size_t errlen);
/* Compiles started in this process (cg_compile and cg_compile_opts), for loom_stats_get. */
uint64_t cg_compile_count(void);

/* What a caller may decide instead of the environment. */
typedef struct cg_options {
    int hang_check_ms; /* > 0: bound every wait loop (below); 0: plain loops */
} cg_options;
/* cg_compile with options (NULL: cg_compile's). */
loom_status cg_compile_opts(loom_kernel *k, const char *arch, const cg_options *opt, cg_result *out, char *err,
                            size_t errlen);

/* ---------------------------------------------------------------- the hang check
 * With a bound of N ms, every wait loop the lowering emits (mbarrier try_wait, flag
 * waits) reads %globaltimer when its first try fails and after each failed try; past N
 * ms the thread records where it was stuck and executes `trap`.  Without one (the
 * default outside debug builds) the loops are exactly what they were: no cost.
 *
 * Where it records: the kernel holds a module-scope global CG_HANG_GLOBAL, two u64: the
 * generic address of a record (host-mapped memory, so the host reads it after the trap
 * has killed the context) and a tag the launcher gives the module; the launcher sets both
 * after loading the module (left 0, the kernel only traps).  The record is CG_HANG_WORDS
 * u32 words; the first thread to time out claims it (CAS of CG_HANG_STATE from 0 to
 * CG_HANG_WRITING), writes the rest with system-scope stores, fences, sets the state to
 * CG_HANG_DONE, fences again and traps; a thread that loses the claim sleeps until the
 * trap ends the grid.  CG_HANG_SITE is the wait op's index in the kernel's op table (the
 * user's kernel and the compiled copy number ops alike), from which the host names the
 * barrier, the task and the source lines; A, B and C depend on the op: an mbar_wait's
 * barrier index and parity, a flag wait's element offset, target and last value seen. */
#define CG_HANG_GLOBAL "loom_hang"
enum {
    CG_HANG_STATE,   /* 0 free, CG_HANG_WRITING, CG_HANG_DONE */
    CG_HANG_TAG,     /* the module's tag (the launcher's) */
    CG_HANG_SITE,    /* the wait op's index */
    CG_HANG_REPLICA, /* the task replica (0 outside tasks) */
    CG_HANG_CTA_X,   /* %ctaid.x, y, z: the program */
    CG_HANG_CTA_Y,
    CG_HANG_CTA_Z,
    CG_HANG_THREAD,  /* %tid.x */
    CG_HANG_A_LO,    /* A as a u64 (little-endian words) */
    CG_HANG_A_HI,
    CG_HANG_B,
    CG_HANG_C,
    CG_HANG_MS,      /* the bound it waited past */
    CG_HANG_WORDS = 16,
};
#define CG_HANG_WRITING 1u
#define CG_HANG_DONE 2u
/* LOOM_HANG_CHECK (milliseconds; 0 or unset: none), else the build's default: 10000 in a
 * build without NDEBUG (CMake's Debug), 0 otherwise (LOOM_HANG_CHECK_DEFAULT_MS at build
 * time overrides it).  A value that is not a whole number of ms in 0..3600000 counts as
 * unset (with one warning). */
int cg_hang_check_ms(void);
/* LOOM_CODEGEN_MAX_INSTRUCTIONS: the most LLVM instructions a lowered kernel may have
 * (default CG_MAX_INSTRUCTIONS_DEFAULT); cg_compile refuses a larger one with
 * LOOM_ERR_UNSUPPORTED before LLVM's optimizer and backend see it. */
size_t cg_max_instructions(void);
void cg_result_free(cg_result *r);
/* Is arch ("sm_90a", ...) an NVPTX processor the linked LLVM knows?  cg_compile refuses
 * one it does not (LLVM would abort the process on it). */
bool cg_arch_known(const char *arch);

#endif /* LOOM_CODEGEN_H */
