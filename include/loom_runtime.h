/*
 * loom_runtime.h -- running kernels: for every program that launches a kernel loom built
 * (its own, a template's) on the GPU or on the CPU interpreter.  Included by loom.h.
 * Sections:
 *
 *   1. runtimes and buffers                          (runtime/)
 *   2. launch, on the runtime's stream or yours
 *   3. compile (prepare, PTX) and time
 *   4. what a kernel costs: layout conversions and shared memory, line by line
 *                                                    (codegen/explain.c)
 *
 * Threads (docs/errors.md, "Threads"; loom.h for kernels): a runtime, and its buffers,
 * are used by one thread at a time (its last error, among other state, is one per
 * runtime).  To compile on several threads, use loom_prepare_many; different runtimes may
 * be used on different threads.  The autotuner (loom_tune) and the template APIs
 * (loom_gemm_*, loom_ikbo_*) run on a runtime, so the same rule holds; the tuner compiles
 * on its own threads inside one call.  Templates (loom_template_find) are constant and
 * may be read from any thread.
 */
#include "loom.h" /* first, outside the guard: loom.h declares every part of the API in order */
#ifndef INCLUDE_LOOM_RUNTIME_H
#define INCLUDE_LOOM_RUNTIME_H

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported from libloom (loom.h says more). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---------------------------------------------------------------- 1. runtimes, buffers */

typedef struct loom_runtime loom_runtime;
typedef struct loom_buffer loom_buffer;

/* Where a runtime runs kernels.  The targets are named for what runs them (the GPU, the
 * interpreter); the environment variable LOOM_INTERPRET=1 (docs/env.md) is a request:
 * interpret, on a runtime created with LOOM_TARGET_AUTO. */
typedef enum loom_target {
    LOOM_TARGET_AUTO,        /* the GPU if there is one, else the interpreter; LOOM_INTERPRET=1
                                forces the interpreter */
    LOOM_TARGET_INTERPRETER, /* the CPU interpreter */
    LOOM_TARGET_GPU,         /* the GPU, or LOOM_ERR_NO_GPU */
} loom_target;

/* Create a runtime.  Returns NULL only when out of memory; otherwise check
 * loom_runtime_status() (LOOM_ERR_NO_GPU for TARGET_GPU without a GPU; LOOM_ERR_INVALID
 * for a target that is none of the three, and then every call on it is refused).  One
 * thread at a time uses a runtime (see "Threads" at the top). */
loom_runtime *loom_runtime_create(loom_target target);
loom_status loom_runtime_status(const loom_runtime *rt);
void loom_runtime_destroy(loom_runtime *rt);
int loom_runtime_is_gpu(const loom_runtime *rt);
const char *loom_runtime_device_name(const loom_runtime *rt);
/* The last error message of this runtime ("" if none). */
const char *loom_runtime_error(const loom_runtime *rt);
/* Record a message as the runtime's last error (for layers built on the runtime, such as
 * the IKBO API). */
void loom_runtime_set_error(loom_runtime *rt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Buffers live where the runtime runs kernels (device memory, or host memory for the
 * interpreter).  Upload/download copy whole byte ranges. */
loom_buffer *loom_buffer_create(loom_runtime *rt, size_t bytes);
void loom_buffer_destroy(loom_buffer *b);
size_t loom_buffer_size(const loom_buffer *b);
loom_status loom_buffer_upload(loom_buffer *b, const void *src, size_t bytes);
loom_status loom_buffer_download(const loom_buffer *b, void *dst, size_t bytes);
/* Fill every byte with `byte` (used to poison outputs). */
loom_status loom_buffer_fill(loom_buffer *b, unsigned char byte);

/* ---------------------------------------------------------------- 2. launch */

/* One launch argument, in the kernel's argument order. */
typedef struct loom_arg {
    loom_buffer *buf; /* tensor arguments */
    union {
        int32_t i32;
        int64_t i64;
        float f32;
    } s;              /* scalar arguments */
} loom_arg;

/* Tensor argument i's shape and smallest buffer at the launch arguments args (its
 * run-time dims at their values there; args may be NULL for a kernel without run-time
 * dims).  Returns 0 when i is not a tensor argument. */
int loom_kernel_arg_shape(const loom_kernel *k, int i, const loom_arg *args, loom_shape *shape, size_t *bytes);
#define LOOM_ARG_BUF(b) ((loom_arg){.buf = (b)})
#define LOOM_ARG_I32(v) ((loom_arg){.buf = NULL, .s.i32 = (v)})
#define LOOM_ARG_I64(v) ((loom_arg){.buf = NULL, .s.i64 = (v)})
#define LOOM_ARG_F32(v) ((loom_arg){.buf = NULL, .s.f32 = (v)})

/* Run kernel k over grid[0] x grid[1] x grid[2] programs.  The kernel is verified first;
 * buffers smaller than their tensor's extent are refused with a message naming the
 * argument.  With LOOM_DUMP_IR=1 the IR is printed to stderr first. */
loom_status loom_launch(loom_runtime *rt, loom_kernel *k, const int grid[3], const loom_arg *args,
                        int nargs);
/* loom_launch on a CUDA stream of the caller's: `stream` is a CUstream (NULL: the default
 * stream), taken as void * so this header needs no cuda.h; the interpreter ignores it.
 * After a kernel's first launch (which compiles and loads it) nothing in a launch
 * synchronizes or allocates, so launches can be captured into a CUDA graph on a capturing
 * stream and replayed.  A launch of an unchanged kernel finds its function without
 * re-hashing its IR. */
loom_status loom_launch_stream(loom_runtime *rt, loom_kernel *k, const int grid[3], const loom_arg *args,
                               int nargs, void *stream);

/* What this process has built and compiled so far, for a service (or a test) to check that
 * its request path builds and compiles nothing: kernels created (loom_kernel_create), and
 * kernels compiled from loom IR to PTX (LLVM runs; a kernel found in the module cache, in
 * memory or on disk, is not compiled again). */
typedef struct loom_stats {
    uint64_t kernels_built;
    uint64_t compiles;
} loom_stats;
void loom_stats_get(loom_stats *out);

/* Wait until the work launched through rt on the default stream is done (on the legacy
 * default stream that is every launch of the process's blocking streams too; a
 * caller's non-blocking stream is not waited for).  LOOM_OK, or the error of a kernel
 * that faulted, the hang check's report among them (LOOM_HANG_CHECK, docs/env.md).
 * timeout_ms > 0 bounds the wait instead of blocking forever: past it, LOOM_ERR_TIMEOUT
 * with a message naming the last kernel launched, and the work goes on (loom_runtime_sync again
 * to wait more).  timeout_ms <= 0 waits as long as it takes.  On the interpreter every
 * launch has finished when it returns: LOOM_OK at once. */
loom_status loom_runtime_sync(loom_runtime *rt, int timeout_ms);

/* ---------------------------------------------------------------- 3. compile, time */

/* Compile and load k for the runtime's device without launching it (the module cache in
 * memory, then on disk, is consulted first).  On the interpreter this only verifies. */
typedef struct loom_compile_info {
    int source;        /* 0: compiled now, 1: found in memory, 2: loaded from the disk cache */
    double codegen_ms; /* loom IR -> PTX (LLVM), when compiled */
    double link_ms;    /* PTX -> cubin, when compiled */
    double load_ms;    /* module load */
    double total_ms;   /* the whole call */
    const char *linker; /* what made the cubin when compiled: "driver" or "nvJitLink" (LOOM_LINKER) */
} loom_compile_info;
loom_status loom_prepare(loom_runtime *rt, loom_kernel *k, loom_compile_info *info);
/* loom_prepare of ks[0 .. n) at once, on up to `threads` threads (0: one per core, at most
 * one per kernel): the compiles (LLVM, then ptxas or the driver's JIT) of a service's
 * kernels overlap instead of adding up.  Each kernel is verified first, on the calling
 * thread; every kernel is compiled even when another fails, and the first failure in the
 * order of ks is returned, its message naming the kernel.  A kernel given twice is
 * prepared once.  Where no thread can be started the kernels compile one by one on the
 * calling thread. */
loom_status loom_prepare_many(loom_runtime *rt, loom_kernel *const *ks, int n, int threads);

/* Timing on the GPU (LOOM_ERR_NO_GPU on the interpreter): run `warmup` times, then `reps`
 * times back to back with device events between runs, and return the median in ms. */
loom_status loom_time_launch(loom_runtime *rt, loom_kernel *k, const int grid[3],
                             const loom_arg *args, int nargs, int warmup, int reps,
                             double *median_ms);
/* The same for a device-to-device copy of `bytes` from src to dst (the bandwidth ceiling). */
loom_status loom_time_copy(loom_runtime *rt, loom_buffer *dst, const loom_buffer *src, size_t bytes,
                           int warmup, int reps, double *median_ms);

/* Lower a kernel to PTX text for arch ("sm_90a", "sm_80", ...; NULL: sm_90a).  *ptx is
 * malloc'ed (free it); *smem_bytes (may be NULL) receives the dynamic shared memory the
 * launch needs.  On failure the message is in err. */
loom_status loom_compile_ptx(loom_kernel *k, const char *arch, char **ptx, size_t *smem_bytes,
                             char *err, size_t errlen);


/* ---------------------------------------------------------------- 4. what a kernel costs
 *
 * The code generator gives every register tile a layout (which thread holds which
 * element); where two ops want a tile in different layouts, it converts the tile through
 * shared-memory scratch: two bar.sync and a store and a load of the whole tile, each time
 * the op runs.  A few other ops use scratch too (a reduction across warps, a dot's operand
 * staging, an atomic add run by several warps, a cluster store).  loom_kernel_explain says
 * where each of them is, with the line of your code that built the op, and what the
 * kernel's shared memory holds (ring slots and staging tiles, mbarriers): compile k for
 * arch (NULL: sm_90a) as far as the shared-memory plan, then
 *   - call fn(ctx, cost) for each use, in program order (fn may be NULL);
 *   - set *text (when text is not NULL) to the whole report, one line a use and a last
 *     line of totals, malloc'ed (free it): what LOOM_EXPLAIN=1 prints at compile.
 * After the uses of shared memory come the arithmetic hints (LOOM_COST_ARITH), in program
 * order too.  Returns LOOM_OK, or the compile's error (in err): a kernel refused for its
 * shared memory still has its uses reported (what the refusal lists).  A kernel written
 * the plain way (docs/dsl.md, "What costs what") has no LOOM_COST_CONVERT at all. */
typedef enum loom_cost_kind {
    LOOM_COST_CONVERT, /* a layout conversion through scratch */
    LOOM_COST_SCRATCH, /* other scratch: a reduction across warps, a dot's staging, ... */
    LOOM_COST_SMEM,    /* a shared-memory allocation: ring slots or a staging tile */
    LOOM_COST_MBAR,    /* an array of mbarriers */
    LOOM_COST_ARITH,   /* arithmetic a rewrite makes cheaper: an f32 mul whose only use is an
                          add or sub (loom rounds each op as written and does not contract
                          them: loom_fma does both in one instruction), an f32 div by a value
                          the same along a dim (a correctly rounded division an element) */
} loom_cost_kind;

typedef struct loom_cost {
    loom_cost_kind kind;
    const char *file; /* the line of the builder call of the op that pays */
    int line;
    const char *op;   /* that op's name: "add", "reduce_sum", "smem_alloc", ... */
    size_t bytes;     /* CONVERT, SCRATCH: the scratch it needs (one region, sized to the
                         largest need, serves them all in turn); SMEM, MBAR: the allocation */
    int copies;       /* task replicas that each hold that scratch (1 outside tasks) */
    int barriers;     /* bar.sync it executes each time it runs (CONVERT, SCRATCH) */
    const char *loop_file; /* the innermost loop it runs in (once an iteration), or NULL: */
    int loop_line;         /* once a program (a tile) */
    const char *text; /* the report's line for it */
    size_t elements;  /* ARITH: the elements the op computes each time it runs */
} loom_cost;

typedef void (*loom_explain_fn)(void *ctx, const loom_cost *cost);
loom_status loom_kernel_explain(loom_kernel *k, const char *arch, loom_explain_fn fn, void *ctx, char **text,
                                char *err, size_t errlen);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* INCLUDE_LOOM_RUNTIME_H */
