/*
 * ir.h -- loom's internal IR, shared by dsl/, codegen/ and runtime/.
 *
 * A kernel owns three growable tables (values, ops, blocks) and an arena for everything
 * else (names, operand lists).  Handles are 32-bit indices into those tables; index 0 of
 * each table is a sentinel, so 0 means "none" everywhere.  Destroying the kernel frees
 * it all at once.
 *
 * Structure: the kernel body is block 1.  A block is an ordered list of op ids.  An op
 * may own regions (a for-loop owns its body, an if owns its two branches); each region
 * is one block whose last op is a yield.  A for body's block arguments are the
 * induction variable followed by the carried values.
 *
 * Prefixes: ir_ (this layer's internals), rule_ (type rules), interp_ (interpreter).
 */
#ifndef LOOM_IR_H
#define LOOM_IR_H

#include "loom.h"
#include "../util/util.h" /* environment switches and checked sizes, for every layer that reads the IR */

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

/* ---------------------------------------------------------------- op table */

enum {
    IRF_PURE = 1 << 0,        /* no side effects; may be folded or removed when unused */
    IRF_FOLD = 1 << 1,        /* elementwise, folded on constants (codegen/fold.c) */
    IRF_READS = 1 << 2,       /* reads global memory */
    IRF_WRITES = 1 << 3,      /* writes global memory */
    IRF_REGION = 1 << 4,      /* owns regions */
    IRF_TERMINATOR = 1 << 5,  /* ends a region */
    IRF_ALLOC = 1 << 6,       /* declares shared memory or barriers (top level only) */
    IRF_SMEM = 1 << 7,        /* reads or writes shared memory */
    IRF_SYNC = 1 << 8,        /* synchronizes (barriers, fences, waits): never moved */
};

typedef enum ir_opkind {
    IR_INVALID = 0,
#define LOOM_OP(E, n, nop, nreg, rule, fl, sem, lay, pr, attrs) IR_##E,
#include "ops.h"
#undef LOOM_OP
    IR_OP_COUNT
} ir_opkind;

typedef struct ir_opdesc {
    const char *name;
    int nopnd; /* -1: variadic */
    int nreg;
    unsigned flags;
} ir_opdesc;
extern const ir_opdesc ir_opdescs[IR_OP_COUNT];

/* ---------------------------------------------------------------- types */

typedef enum ir_typekind {
    IR_T_NONE = 0,
    IR_T_TILE,   /* a register tile; rank 0 is a scalar */
    IR_T_TENSOR, /* a global tensor argument */
    IR_T_SMEM,   /* shared memory: a ring of `slots` tiles of `shape` (a view: slots 1) */
    IR_T_MBAR,   /* an array of shape[0] mbarriers */
} ir_typekind;

typedef struct ir_type {
    uint8_t kind;  /* ir_typekind */
    uint8_t dtype; /* loom_dtype */
    uint8_t swizzle; /* IR_T_SMEM: 0, 32, 64, 128 */
    uint8_t trans;   /* IR_T_SMEM: a transposed view of a 2-D tile (shape is the seen one) */
    uint16_t slots;  /* IR_T_SMEM: ring size; 1 for a view */
    loom_shape shape;
} ir_type;

bool ir_type_eq(const ir_type *a, const ir_type *b);
bool ir_shape_eq(const loom_shape *a, const loom_shape *b);
int64_t ir_shape_numel(const loom_shape *s);
/* "f16[64x128]", "i32" for a scalar, "tensor<f16[4x8]>"; buf must hold 64 bytes. */
const char *ir_type_str(const ir_type *t, char *buf, size_t n);
/* Held as a float (f32 in the interpreter and in registers): f16, bf16, f32 and the FP8
 * types.  The FP8 types are storage only: the rules refuse arithmetic on them. */
bool ir_dtype_is_float(loom_dtype t);
bool ir_dtype_is_fp8(loom_dtype t); /* e4m3, e5m2 */
bool ir_dtype_is_int(loom_dtype t); /* i32, i64 (not i1) */

/* ---------------------------------------------------------------- values, ops, blocks */

typedef enum ir_valkind { IR_V_NONE = 0, IR_V_ARG, IR_V_RESULT, IR_V_BLOCKARG } ir_valkind;

typedef struct ir_value {
    ir_type type;
    uint8_t kind;    /* ir_valkind */
    uint32_t def;    /* the op (RESULT), the block (BLOCKARG), or the argument index (ARG) */
    uint32_t index;  /* result number / block argument number */
    uint32_t block;  /* block where the value is defined (1 for args) */
    const char *name;
} ir_value;

typedef struct ir_arg {
    const char *name;
    uint32_t value;
    bool is_tensor;
    loom_dtype dtype;
    loom_shape shape;
    int64_t strides[LOOM_MAX_RANK];
    loom_access access;
    size_t min_bytes; /* at the run-time dims' maxima */
    /* A run-time dimension (loom_arg_dim): an i32 scalar whose value is in [1, dim_max]
     * and a multiple of dim_multiple. */
    bool is_dim;
    int64_t dim_max, dim_multiple;
    /* A tensor's run-time dims: dyn[d] is the dim argument's index + 1 (0: dim d is
     * static); shape.dim[d] holds that argument's maximum. */
    uint8_t dyn[LOOM_MAX_RANK];
} ir_arg;

/* Tensor argument i's shape and smallest buffer at a launch whose i32 scalar arguments
 * are dimval[0..nargs) (only the dim arguments' entries are read): each run-time dim
 * replaced by its value. */
void ir_arg_shape_at(const loom_kernel *k, int i, const int32_t *dimval, loom_shape *shape, size_t *bytes);
/* Whether the dim arguments' values at a launch are in range (1 to max, a multiple of
 * the hint); false with the message in err. */
bool ir_dims_check(const loom_kernel *k, const int32_t *dimval, char *err, size_t errlen);
/* Does any argument of k have a run-time dim? */
bool ir_has_dyn(const loom_kernel *k);

typedef struct ir_op {
    uint16_t kind;  /* ir_opkind */
    uint16_t nopnd;
    uint16_t nres;
    uint16_t nreg;
    uint32_t *opnd;
    uint32_t *res;
    uint32_t reg[2];   /* region blocks */
    uint32_t block;    /* the block that holds this op */
    loom_src src;
    /* attributes (meaning depends on the op; see the printer) */
    int64_t iattr[4];  /* axis, pred, start/end, dtype, has_mask, ... */
    double fattr;      /* const value (floats), fill value */
    loom_shape shape;  /* load/arange/splat/broadcast target shape */
} ir_op;

typedef struct ir_block {
    uint32_t parent;   /* owning op (0 for the kernel body) */
    uint32_t *ops;
    uint32_t nops, capops;
    uint32_t *args;    /* block argument values */
    uint32_t nargs;
    bool closed;       /* its yield has been built */
} ir_block;

typedef struct ir_diag {
    loom_src src;
    char *msg; /* full line "file:line: error: ..." */
} ir_diag;

typedef struct ir_arena_chunk ir_arena_chunk;
typedef struct ir_arena {
    ir_arena_chunk *head;
} ir_arena;
void *ir_arena_alloc(ir_arena *a, size_t bytes); /* zeroed, 16-aligned; NULL if no memory */
char *ir_arena_strdup(ir_arena *a, const char *s);
void ir_arena_free(ir_arena *a);

struct loom_kernel {
    char *name;
    int num_warps;
    int cluster; /* CTAs per cluster along grid x (loom_kernel_set_cluster); 1: no clusters */
    /* automatic warp specialization (loom_kernel_set_autows): consumer warp groups (0: off),
     * ring stages, ping-pong; the line that asked for it */
    int ws_consumers, ws_stages, ws_pingpong;
    loom_src ws_at;
    ir_arena arena;
    ir_value *vals;
    uint32_t nvals, capvals;
    ir_op *ops;
    uint32_t nops, capops;
    ir_block *blocks;
    uint32_t nblocks, capblocks;
    ir_arg args[LOOM_MAX_ARGS];
    int nargs;
    /* builder state: the stack of open blocks (innermost last) */
    uint32_t open[64];
    int nopen;
    bool oom;
    /* Bumped by every change to the IR or its diagnostics; loom_verify and loom_print
     * reuse their last answer while it holds, so launching a kernel many times does not
     * re-verify or re-print it. */
    uint64_t gen;
    uint64_t verified_gen, printed_gen; /* gen + 1 of the cached answer; 0: none */
    /* A number no other kernel of the process has: with gen, it names this kernel's IR
     * exactly, so the runtime can remember its compiled function without re-hashing the
     * IR at every launch (an address can be reused by a later kernel; this cannot). */
    uint64_t uid;
    loom_status verified;
    /* diagnostics */
    ir_diag *diags;
    int ndiags, capdiags;
    char *errtext;
    uint64_t errtext_gen; /* gen + 1 of errtext; 0: none */
    char *printed;
    /* Guards the cached answers above (verified, errtext, printed) so that several
     * threads may verify, compile and launch one finished kernel at once; building stays
     * one thread's (include/loom.h, "Threads"). */
    pthread_mutex_t lock;
};

/* ---------------------------------------------------------------- handles
 * A loom_val the API hands out is the value's index in the low IR_HANDLE_BITS bits and a
 * tag of its kernel (1 to 255, from the kernel's uid) in the high bits, so a handle of
 * another kernel is refused instead of naming whatever value has its index here (two
 * kernels 255 apart in creation order share a tag: the check is cheap, not perfect).
 * Inside loom (ops' operands, the printer, codegen) values are plain indices; only the
 * builder's entry points and returns translate. */
#define IR_HANDLE_BITS 24
#define IR_MAX_VALUES ((uint32_t)1 << IR_HANDLE_BITS)
static inline uint32_t ir_handle_tag(const loom_kernel *k) { return (uint32_t)(1 + k->uid % 255) << IR_HANDLE_BITS; }
/* The public handle of value v (0 stays LOOM_NONE). */
static inline loom_val ir_handle(const loom_kernel *k, uint32_t v) { return v ? (loom_val)(v | ir_handle_tag(k)) : 0; }
/* Value h's index in k: 0 for LOOM_NONE, for a handle of another kernel or of no value. */
static inline uint32_t ir_unhandle(const loom_kernel *k, loom_val h)
{
    uint32_t v = h & (IR_MAX_VALUES - 1);
    return h && (h & ~(IR_MAX_VALUES - 1)) == ir_handle_tag(k) && v < k->nvals ? v : 0;
}
/* Is h tagged as a handle of some other kernel (for the message)? */
static inline bool ir_handle_foreign(const loom_kernel *k, loom_val h)
{
    return (h >> IR_HANDLE_BITS) != 0 && (h & ~(IR_MAX_VALUES - 1)) != ir_handle_tag(k);
}

/* loom_print(k) under the kernel's lock: the runtime fills the printed IR's cache this
 * way before a compile looks the kernel up, so threads sharing a kernel never print it
 * at once. */
const char *ir_print_shared(loom_kernel *k);

/* Kernels created in this process (loom_kernel_create and clones), for loom_stats_get. */
uint64_t ir_kernels_created(void);

/* A deep copy of kernel k for passes that rewrite IR; NULL when out of memory. */
loom_kernel *ir_kernel_clone(const loom_kernel *k);

/* Record a user error at `at` for op `opname` (may be NULL). */
void ir_error(loom_kernel *k, loom_src at, const char *opname, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline ir_value *ir_val(loom_kernel *k, uint32_t v) { return &k->vals[v]; }
static inline ir_op *ir_opp(loom_kernel *k, uint32_t o) { return &k->ops[o]; }
static inline ir_block *ir_blk(loom_kernel *k, uint32_t b) { return &k->blocks[b]; }
static inline bool ir_valid(const loom_kernel *k, uint32_t v) { return v != 0 && v < k->nvals; }
/* An op that arrives on an mbarrier: arrive, arrive on every CTA of the cluster, expect-bytes. */
static inline bool ir_is_arrival(ir_opkind kind)
{
    return kind == IR_MBAR_ARRIVE || kind == IR_MBAR_EXPECT || kind == IR_MBAR_ARRIVE_CLUSTER;
}
/* A TMA load, plain or multicast. */
static inline bool ir_is_tma_load(ir_opkind kind) { return kind == IR_TMA_LOAD || kind == IR_TMA_LOAD_MULTICAST; }
/* An op whose bytes complete on an mbarrier (transaction bytes): a TMA load, plain or
 * multicast, or a store into the view of every CTA of the cluster. */
static inline bool ir_completes_bytes(ir_opkind kind)
{
    return ir_is_tma_load(kind) || kind == IR_SMEM_STORE_CLUSTER;
}

/* A scalar made by a const op: its value, as a float (isf: a float type) or an integer. */
typedef struct ir_const {
    bool isf;
    double f;
    int64_t i;
} ir_const;
/* Is value v a scalar const (*out its value)? */
bool ir_scalar_const(const loom_kernel *k, uint32_t v, ir_const *out);

/* Create an op in the innermost open block with the given operands and no results. */
uint32_t ir_op_new(loom_kernel *k, loom_src at, ir_opkind kind, const uint32_t *opnd, int nopnd);
/* Add a result of type t to op o; returns the value. */
uint32_t ir_op_add_result(loom_kernel *k, uint32_t o, ir_type t);
uint32_t ir_block_new(loom_kernel *k, uint32_t parent);
uint32_t ir_block_add_arg(loom_kernel *k, uint32_t b, ir_type t);
/* Remove op o from its block (its results become dangling: used only on a build error). */
void ir_op_unlink(loom_kernel *k, uint32_t o);

/* The name value v has in loom_print's text ("%3", "%acc.5", "%x" for an argument),
 * written into buf (n bytes); for error messages. */
const char *ir_value_label(loom_kernel *k, uint32_t v, char *buf, size_t n);

/* The words that say where a wait is stuck, shared by the interpreter's deadlock reports
 * (dsl/interp_tasks.c) and the GPU's hang reports (runtime/hang.c), so both read alike
 * (dsl/print.c).  Each writes into buf (n bytes) and returns it:
 *   ir_words_task:      "task at FILE:LINE (replica R)"
 *   ir_words_bar:       "LABEL[I]" (barrier I of the array LABEL)
 *   ir_words_mbar_wait: "on barrier BAR for phase parity P at FILE:LINE"
 *   ir_words_flag_wait: "at FILE:LINE for FLAGS[OFF] >= TARGET; it is VALUE" */
const char *ir_words_task(char *buf, size_t n, const char *file, int line, int replica);
const char *ir_words_bar(char *buf, size_t n, const char *label, long long i);
const char *ir_words_mbar_wait(char *buf, size_t n, const char *bar, int parity, const char *file, int line);
const char *ir_words_flag_wait(char *buf, size_t n, const char *file, int line, const char *flags, long long off,
                               long long target, long long value);
/* Does a live op (one still in a block) of this kind occur in the kernel? */
bool ir_uses_op(const loom_kernel *k, ir_opkind kind);
/* The alignment in bytes that shared view v's address is known to have (rings start on
 * 128 bytes; a slot or a part adds a multiple of its byte offset's lowest bit). */
int64_t ir_view_align(const loom_kernel *k, uint32_t v);

/* ---------------------------------------------------------------- type rules */

/* Run op o's type rule: on success fill `out` (the result types; *nout of them) and
 * return true; on failure record an error naming the op's source line and return false. */
bool ir_rule(loom_kernel *k, uint32_t o, ir_type *out, int *nout, int maxout);

/* The whole-kernel checks of the Hopper machinery (dsl/async_check.c), run by the
 * verifier once every op is well formed: tasks fill the CTA, register budgets fit, each
 * barrier's arrivals match the tasks that arrive, expected bytes match the TMA loads of
 * a phase, and accumulators are read only after a wgmma_wait(0).  Errors are recorded. */
void ir_check_async(loom_kernel *k);

/* Task layout of a kernel: for each task op in order, its first warp and size. */
typedef struct ir_task_info {
    uint32_t op;
    int first_warp, warps, regs, replicas;
} ir_task_info;
/* Fill up to max entries; returns the number of tasks (0: the kernel has none). */
int ir_tasks(const loom_kernel *k, ir_task_info *out, int max);
/* The task op enclosing op o, or 0. */
uint32_t ir_task_of(const loom_kernel *k, uint32_t o);
/* How many replicas of task op `task` arrive on barrier array `bars` (an mbar_alloc
 * result) in one phase: all of its replicas, or 1 where they take turns (the barrier
 * index of its arrivals depends on loom_task_replica and the array's arrival count is
 * met only that way); 0 when the task does not arrive on it. */
int64_t ir_mbar_arrivals(const loom_kernel *k, uint32_t bars, uint32_t task);

/* ---------------------------------------------------------------- numbers */

/* Round-to-nearest-even conversions, shared by the interpreter and tests. */
uint16_t ir_f32_to_f16(float f);
float ir_f16_to_f32(uint16_t h);
uint16_t ir_f32_to_bf16(float f);
float ir_bf16_to_f32(uint16_t h);
/* FP8 (dsl/fp8.c): f32 -> e4m3/e5m2 as the GPU's cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32
 * (nearest even; finite values and infinities beyond the largest finite saturate to it;
 * NaN stays NaN), and the exact value of a code (NaN codes give NaN of their sign). */
uint8_t ir_f32_to_fp8(loom_dtype t, float f);
float ir_fp8_to_f32(loom_dtype t, uint8_t b);
/* Round a float to the precision of dtype t (f16, bf16: nearest even; e4m3, e5m2: nearest
 * even, saturated; f32: identity). */
float ir_round_to(loom_dtype t, float f);
/* Round a double to dtype t's precision once (no double rounding through f32). */
float ir_round_to_d(loom_dtype t, double d);
/* Wrap an integer to dtype t's width (i32 wraps, i1 is != 0). */
int64_t ir_wrap_int(loom_dtype t, int64_t v);
/* Float to integer as loom_cast defines it: to i1 is x != 0 (NaN gives 1); to i32/i64
 * truncates toward zero, NaN gives 0, out of range saturates. */
int64_t ir_float_to_int(loom_dtype t, float x);

/* ---------------------------------------------------------------- interpreter */

/* One tensor argument as the interpreter sees it: host memory and its size. */
typedef struct interp_arg {
    void *data;
    size_t bytes;
    union {
        int32_t i32;
        int64_t i64;
        float f32;
    } s;
} interp_arg;

/* Run verified kernel k over the grid.  On an error, returns the status and writes a
 * message (naming the op's source line) into err. */
/* Whether the interpreter has semantics for op kind `kind` (dsl/interp.c's dispatch). */
bool interp_has_semantics(int kind);
loom_status interp_run(loom_kernel *k, const int grid[3], const interp_arg *args, char *err,
                       size_t errlen);

/* Bytes of the smallest buffer that holds tensor arg a. */
size_t ir_tensor_min_bytes(loom_dtype dt, const loom_shape *s, const int64_t *strides);

#endif /* LOOM_IR_H */
