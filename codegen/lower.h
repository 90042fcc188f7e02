/*
 * lower.h -- internals of the lowering (loom IR to LLVM IR), shared by its files.
 *
 * The lowering state.  cg_lower (lower.c) builds the kernel as one LLVM function and
 * carries an L through every op: the LLVM context and module, two builders (the body's,
 * and the prologue's, which puts per-thread values such as the lane and warp ids and
 * the coordinates made from them into the entry block, once), and per IR value an lv:
 * its registers, one SSA value per element the thread holds in the value's layout
 * (codegen/layout.c), or a single one for a scalar or a shared-memory value.  A task
 * (lower_task.c) swaps the per-thread fields for its own (warp id, thread index,
 * replica, barrier, scratch region, prologue builder, coordinate cache) while its body
 * is lowered.  Register arrays and the lowering's other scratch come from an arena
 * (lw_alloc: a list of chunks, freed together at the end), so they are passed around
 * freely and never freed one by one.
 *
 * The files.  Each op of dsl/ops.h has a function lower_<name>, declared at the end of
 * this header from the op table itself (lower.c's dispatch table is built from the same
 * list), in the file of its kind:
 *   lower.c         the arena, coordinates, operands in the layout an op wants
 *                   (conversions through shared memory), grid ids, constants and shape
 *                   ops, control flow, the dispatch, the kernel function and cg_lower
 *   lower_math.c    elementwise ops, reductions, dot (on SIMT FMA)
 *   lower_mma.c     dot on the tensor cores: mma.sync m16n8k16 from staged operands
 *   lower_mem.c     global memory: load, load_rows, store, load_scalar
 *   lower_smem.c    shared-memory views and tiles (smem_load, smem_store), 16-bit packing
 *   lower_sync.c    mbarriers, named barriers, fences, flags, atomic adds, the hang check
 *   lower_tma.c     TMA descriptors, loads and stores; clusters (stores into every CTA's
 *                   view, the rank, the cluster barrier)
 *   lower_wgmma.c   wgmma, its commit and wait; A operands in registers (packed pairs)
 *   lower_task.c    warp-group tasks, register budgets, and the Hopper kernel-level parts
 *                   (launch bounds, TMA descriptor parameters, the entry block's values)
 * The helpers more than one file uses are declared here, prefixed lw_ (the small
 * accessors are inline here); every other helper is static in its file.
 *
 * Only the lower*.c files include this header.
 */
#ifndef LOOM_LOWER_H
#define LOOM_LOWER_H

#include "cg.h"

#include <llvm-c/Core.h>

/* ---------------------------------------------------------------- state */

typedef struct lv {
    int32_t lay;
    int n;
    LLVMValueRef *r;
} lv;

typedef struct chunk {
    struct chunk *next;
    long double align; /* what follows the header is aligned for anything */
} chunk;

typedef struct L {
    cg_ctx *cg;
    loom_kernel *k;
    LLVMContextRef C;
    LLVMModuleRef M;
    LLVMBuilderRef B, PB; /* body builder, prologue (entry block) builder */
    LLVMValueRef fn;
    LLVMBasicBlockRef entry;
    LLVMTypeRef t_i1, t_i8, t_i16, t_i32, t_i64, t_f32, t_f16, t_gptr, t_sptr, t_void;
    LLVMValueRef smem;
    LLVMValueRef lane, warp;
    LLVMValueRef tid;          /* threadIdx.x */
    LLVMValueRef smem_base32;  /* shared-window address of loom_smem (i32), for inline PTX */
    LLVMValueRef scratch_base; /* byte offset of this code's scratch region in loom_smem (i32) */
    /* inside a task: the task-local thread index, the replica, the internal barrier */
    LLVMValueRef tid_local, replica, bar_id;
    int bar_threads; /* 0: the whole CTA (bar.sync 0) */
    bool barriers_ready;
    LLVMValueRef tma_param[16]; /* generic address of each TMA descriptor parameter */
    int *op_tma;                /* per op: its first descriptor index (TMA ops) */
    LLVMValueRef (*tcoord)[LOOM_MAX_RANK]; /* per layout id */
    int ntcoord;
    lv *vals;
    uint32_t cur_op;
    chunk *mem;
    /* per value: 1 for an f16/bf16 tile that only ever becomes wgmma's A operand (through
     * loop carries): its registers hold packed pairs (register 2i: the pair 2i, 2i + 1 as
     * b32 bits, register 2i + 1 unused), half the registers across a loop (lw_find_packed) */
    uint8_t *packed;
} L;

static inline const ir_type *vty(L *l, uint32_t v) { return &l->k->vals[v].type; }
static inline loom_dtype vdt(L *l, uint32_t v) { return (loom_dtype)l->k->vals[v].type.dtype; }

/* The LLVM type of a register holding an element of dt (f32 for every float type). */
static inline LLVMTypeRef reg_type(L *l, loom_dtype dt)
{
    switch (dt) {
    case LOOM_I32: return l->t_i32;
    case LOOM_I64: return l->t_i64;
    case LOOM_I1: return l->t_i1;
    default: return l->t_f32;
    }
}

static inline LLVMValueRef ci32(L *l, int64_t v) { return LLVMConstInt(l->t_i32, (unsigned long long)v, 1); }
static inline LLVMValueRef ci64(L *l, int64_t v) { return LLVMConstInt(l->t_i64, (unsigned long long)v, 1); }

/* ---------------------------------------------------------------- helpers (lower.c) */

/* n zeroed bytes from the arena; NULL (with the error recorded) when out of memory. */
void *lw_alloc(L *l, size_t n);
LLVMValueRef *lw_regs_alloc(L *l, int n);
LLVMValueRef lw_to_i64(L *l, LLVMValueRef x); /* sign-extends an i32 */

LLVMValueRef lw_call_intr(L *l, LLVMBuilderRef B, const char *name, LLVMTypeRef *tys, int nty,
                          LLVMValueRef *args, int nargs);
void lw_add_fn_attr_call(L *l, LLVMValueRef call, const char *name, uint64_t val);
LLVMValueRef lw_asm_call(L *l, LLVMTypeRef ret, const char *text, const char *cons, LLVMValueRef *args,
                         int nargs, bool pure);
void lw_barrier(L *l); /* the CTA's bar.sync 0, or inside a task its replica's named barrier */

/* coordinates of register j of layout id along dim d (i32) */
LLVMValueRef lw_tcoord(L *l, int32_t id, int d); /* the per-thread part */
LLVMValueRef lw_coord(L *l, int32_t id, int j, int d);
LLVMValueRef lw_in_tile(L *l, int32_t id, int j, int d); /* inside the unpadded tile? NULL: always */
LLVMValueRef lw_and_pred(L *l, LLVMValueRef a, LLVMValueRef b); /* NULL is true */
LLVMValueRef lw_lin_index(L *l, int32_t id, int j); /* in a row-major array over the padded dims */

/* scratch: the shared memory the plan (codegen/smem.c) gave the current op */
LLVMValueRef lw_smem_ptr(L *l, LLVMValueRef byte_off);
bool lw_check_scratch(L *l, size_t bytes);
/* Close a counted loop built at the insert point: branch back to body while knext <
 * limit, else to exit; the counter phi kv takes 0 from pre and knext from the latch, and
 * each of the n phis[j] takes start[j] from pre and now[j] from the latch.  The builder
 * ends at exit, whose only predecessor is the loop: now[] are the results there. */
void lw_close_loop(L *l, LLVMBasicBlockRef pre, LLVMBasicBlockRef body, LLVMBasicBlockRef exit, LLVMValueRef kv,
                   LLVMValueRef knext, int64_t limit, LLVMValueRef *phis, LLVMValueRef *start, LLVMValueRef *now,
                   int n);
void lw_smem_store(L *l, LLVMValueRef byte_off, LLVMValueRef v);
LLVMValueRef lw_smem_load(L *l, LLVMValueRef byte_off, LLVMTypeRef t);

/* operands (in the layout op o wants for operand i) and results */
LLVMValueRef *lw_opnd_regs(L *l, uint32_t o, int i);
bool lw_set_result(L *l, uint32_t v, int32_t lay, LLVMValueRef *r);
bool lw_set_scalar(L *l, uint32_t v, LLVMValueRef x);
bool lw_lower_block(L *l, uint32_t b); /* the ops of block b, in order */

/* the kernel function's metadata and attributes */
void lw_annotate(L *l, const char *key, int val);
void lw_add_param_attr(L *l, unsigned idx, const char *name, uint64_t val);

/* ---------------------------------------------------------------- lower_math.c */

LLVMValueRef lw_emit_ew(L *l, const ir_op *op, LLVMValueRef *x); /* one element of an elementwise op */
/* FP8 (e4m3, e5m2) values live in f32 registers holding their exact value.  lw_fp8_bytes
 * gives the stored bytes (i8) of n such registers, a pair to one cvt.rn.satfinite
 * ...x2.f32 (a register that is a cast's result is converted from the cast's operand,
 * one that was loaded gives its byte back); lw_fp8_decode the registers of n bytes, a
 * pair to one cvt.rn.f16x2.{e4m3x2,e5m2x2}. */
void lw_fp8_bytes(L *l, loom_dtype dt, const LLVMValueRef *x, int n, LLVMValueRef *eb);
void lw_fp8_decode(L *l, loom_dtype dt, const LLVMValueRef *eb, int n, LLVMValueRef *out);

/* ---------------------------------------------------------------- the Hopper files' shared parts */

/* A shared-memory value (ring, view, barrier array) is held as one i32 register: its byte
 * offset in loom_smem (lower_smem.c); inline PTX wants the shared-window address. */
static inline LLVMValueRef smem_off(L *l, uint32_t v) { return l->vals[v].r[0]; }
static inline LLVMValueRef saddr(L *l, LLVMValueRef off) { return LLVMBuildAdd(l->B, l->smem_base32, off, ""); }
static inline LLVMValueRef scal(L *l, uint32_t v) { return l->vals[v].r[0]; } /* a scalar's register */

/* Run `text` (no results) with i32/i64 operands. */
static inline void lw_asm_void(L *l, const char *text, const char *cons, LLVMValueRef *args, int n)
{
    lw_asm_call(l, l->t_void, text, cons, args, n, false);
}

/* Is this the thread that issues what is issued once (thread 0 of the task replica, or of
 * the CTA outside tasks)? */
static inline LLVMValueRef lw_elected(L *l)
{
    LLVMValueRef t = l->tid_local ? l->tid_local : l->tid;
    return LLVMBuildICmp(l->B, LLVMIntEQ, t, ci32(l, 0), "");
}

/* if (cond) { ... } (lower.c): lw_if_begin places the builder in the then block and
 * returns the merge block, which lw_if_end closes it into. */
LLVMBasicBlockRef lw_if_begin(L *l, LLVMValueRef cond);
void lw_if_end(L *l, LLVMBasicBlockRef m);

/* The geometry of a shared-memory view as stored (lower_smem.c says how). */
typedef struct vgeom {
    int rank;
    int64_t dim[3];  /* stored shape (not transposed) */
    int es, swz;     /* element bytes, swizzle span (0: none) */
    int64_t span;    /* bytes of one stored row within a chunk */
    int64_t rows;    /* rows over all leading dims */
    bool trans;
} vgeom;

/* lower_smem.c */
bool lw_set_smem(L *l, uint32_t v, LLVMValueRef off); /* hold v as the byte offset off */
vgeom lw_geom(L *l, uint32_t v);                       /* of view value v */
/* The f32 registers the f16/bf16 tile x (in layout id) was cast from, or NULL. */
const lv *lw_cast_source(L *l, uint32_t x, int32_t id);
/* Registers j, j + 1 of tile x of dt as one packed b32 (from src, its cast's f32 registers,
 * where not NULL). */
LLVMValueRef lw_pack_pair(L *l, loom_dtype dt, const lv *src, const LLVMValueRef *x, int j);
/* f32 lo and hi rounded to dt (f16 or bf16) and packed into one i32 by one
 * cvt.rn.{f16,bf16}x2.f32, lo in the lower half. */
LLVMValueRef lw_cvt_pair(L *l, loom_dtype dt, LLVMValueRef lo, LLVMValueRef hi);

/* lower_sync.c: the address of barrier opnd[first + 1] of the array opnd[first] of op */
LLVMValueRef lw_bar_addr(L *l, ir_op *op, int first);

/* lower_wgmma.c */
bool lw_find_packed(L *l); /* l->packed: the A-operand tiles kept as packed pairs */
/* A cast to f16/bf16 whose result is kept packed (l->packed): its registers from the f32
 * registers of its source. */
void lw_cast_packed(L *l, loom_dtype dt, const LLVMValueRef *src, LLVMValueRef *out, int n);
/* Is mbar_arrive op a emitted by the wgmma_wait just before it (inside its statement)? */
bool lw_arrive_fused(const loom_kernel *k, uint32_t a);

/* lower_mma.c: dot op o on the tensor cores (the layout pass chose it: cg->dot_mma) */
bool lw_dot_mma(L *l, uint32_t o, ir_op *op);

/* lower_tma.c */
bool lw_hopper_collect_tma(L *l); /* the TMA descriptors, before the function is made */
void lw_cluster_sync(L *l);       /* every CTA of the cluster arrives, then waits */

/* lower_task.c: kernel-level parts */
void lw_hopper_kernel_attrs(L *l); /* the function's launch bounds and descriptor params */
void lw_hopper_entry(L *l);        /* the entry block's shared-memory and descriptor values */

/* ---------------------------------------------------------------- op lowerings */

typedef bool (*lower_fn)(L *, uint32_t, ir_op *);

/* Ops that share a lowering function: their names stand for it here, before the
 * declarations below, which then declare the shared function. */
#define lower_arange lower_shape_like /* lower.c */
#define lower_splat lower_shape_like
#define lower_broadcast lower_shape_like
#define lower_expand_dims lower_shape_like
#define lower_trans lower_shape_like
#define lower_add lower_elementwise /* lower_math.c */
#define lower_sub lower_elementwise
#define lower_mul lower_elementwise
#define lower_div lower_elementwise
#define lower_rem lower_elementwise
#define lower_min lower_elementwise
#define lower_max lower_elementwise
#define lower_and lower_elementwise
#define lower_or lower_elementwise
#define lower_xor lower_elementwise
#define lower_shl lower_elementwise
#define lower_shr lower_elementwise
#define lower_div_fast lower_elementwise
#define lower_fma lower_elementwise
#define lower_neg lower_elementwise
#define lower_abs lower_elementwise
#define lower_exp2 lower_elementwise
#define lower_log2 lower_elementwise
#define lower_rsqrt lower_elementwise
#define lower_exp lower_elementwise
#define lower_log lower_elementwise
#define lower_tanh lower_elementwise
#define lower_erf lower_elementwise
#define lower_sigmoid lower_elementwise
#define lower_sqrt lower_elementwise
#define lower_rcp lower_elementwise
#define lower_not lower_elementwise
#define lower_cmp lower_elementwise
#define lower_select lower_elementwise
#define lower_cast lower_elementwise
#define lower_reduce_sum lower_reduce /* lower_math.c */
#define lower_reduce_max lower_reduce
#define lower_reduce_min lower_reduce

#define LOOM_OP(E, n, nop, nreg, rule, fl, sem, lay, pr, attrs) bool lower_##n(L *l, uint32_t o, ir_op *op);
#include "ops.h"
#undef LOOM_OP

#endif /* LOOM_LOWER_H */
