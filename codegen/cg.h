/*
 * cg.h -- internals of the code generator (codegen/): the pass context, the layout
 * algebra (codegen/layout.c) and the passes codegen/pipeline.c runs in order:
 *
 *   verify -> fold -> layouts -> smem plan -> LLVM IR -> opt -> PTX
 *
 * Only files of codegen/ (and white-box tests) include it; the rest of loom goes
 * through codegen.h.
 */
#ifndef LOOM_CG_H
#define LOOM_CG_H

#include "codegen.h"
#include "ir.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>


/* ---------------------------------------------------------------- layouts
 *
 * A layout says which thread holds which element of a register tile, and in which of
 * its registers.  Every layout loom makes is a "linear" one over padded power-of-two
 * dims: each bit of the register index, of the lane id (5 bits) and of the warp id
 * maps to one bit of one tile coordinate, or to nothing (then threads or registers
 * that differ in that bit hold the same element: duplication).  The coordinate of
 * register j in thread (lane, warp) is the OR (= sum) of the targets of its set bits.
 * Blocked layouts (Triton's), slices of them (reduction results), expand_dims and
 * broadcasts of slices and transposes are all of this form, and the algebra below
 * keeps them exact.  See codegen/layout.c. */
#define CG_MAXREGBITS 12 /* at most 4096 registers of one tile per thread */
/* The register bits a layout the passes build may take: 1024 registers of one tile a
 * thread (a tile past it is refused, with a message, or left to other layouts). */
#define CG_REGBITS_LIMIT 10
#define CG_MAXWARPBITS 5
/* The largest expression (ops, each use of an operand counted) recomputed at every use of
 * its value; a larger one is computed once (codegen/layout.c). */
#define CG_REMAT_MAX 64
/* The default limit on a lowered kernel's LLVM instructions (pipeline.c): about 20 times
 * loom's largest template, about 10 s in LLVM's backend on the build machine. */
#define CG_MAX_INSTRUCTIONS_DEFAULT 200000

typedef struct cg_bit {
    int8_t dim; /* -1: no coordinate (duplication) */
    int8_t bit;
} cg_bit;

typedef struct cg_layout {
    int rank;
    int64_t shape[LOOM_MAX_RANK]; /* the tile's real shape */
    int8_t lg[LOOM_MAX_RANK];     /* log2 of the padded (power-of-two) dims */
    int nreg, nwarp;              /* register bits, warp bits (lanes: always 5) */
    cg_bit reg[CG_MAXREGBITS];
    cg_bit lane[5];
    cg_bit warp[CG_MAXWARPBITS];
    int32_t parent; /* slice / expand_dims chains: the blocked layout they came from, or -1 */
} cg_layout;

/* ---------------------------------------------------------------- the pass context */

typedef struct cg_ctx {
    loom_kernel *k;
    const char *arch;
    char *err;
    size_t errlen;
    loom_status st;
    int warp_bits; /* floor(log2(num_warps)): warps beyond that duplicate work */

    /* layouts (codegen/layout.c, the algebra; layout_pass.c, the pass) */
    cg_layout *lays;
    int nlays, caplays;
    int32_t *vlay;  /* per value: its layout id, -1 for tensors */
    uint8_t *remat; /* per value: a tile recomputed in whatever layout a use wants: the
                     * size of its expression (1..CG_REMAT_MAX), 0 when it is not one */
    int32_t scalar_layout;
    uint8_t is_mma[256]; /* per layout id (< 256): a wgmma accumulator layout */
    int32_t *prefer;     /* per value: the layout its uses want (codegen/layout_prefer.c):
                          * a load takes it, a broadcast takes it where no data moves (-1: none) */
    uint8_t *soft;       /* per value: a loop-carried tile that starts as a splat (made of
                          * scalars): its layout is the loop body's to choose, so an
                          * elementwise op takes another operand's first */
    uint8_t *dot_mma;    /* per op: a dot the layout pass put on the tensor cores (mma.sync;
                          * its result in cg_dot_mma_layout), 0 for SIMT FMA */

    /* shared memory plan (codegen/smem.c): the kernel's allocations (smem rings, then
     * mbarriers) from offset 0, then scratch: one region for a kernel without tasks, one
     * per task replica otherwise (tasks run concurrently, so they cannot share it) */
    size_t *op_scratch; /* per op: scratch bytes it needs */
    size_t smem_bytes;
    size_t *val_off;    /* per smem_alloc / mbar_alloc result: its byte offset */
    size_t scratch_off; /* the kernel's (or the first task's) scratch region */
    size_t task_scratch_off[64], task_scratch_size[64]; /* per task (index in order), per replica */

    /* what uses shared memory, in program order (codegen/smem.c fills it; LOOM_EXPLAIN,
     * loom_kernel_explain and the refusal of a kernel that needs too much report it) */
    struct cg_cost *costs;
    int ncosts, capcosts;
    int plan_copies; /* while planning: the task replicas that each hold the scratch */

    /* TMA descriptors the kernel takes as extra parameters after its arguments, in order */
    int ntma;
    cg_tma_spec tma[CG_MAX_TMA];

    /* divisibility (codegen/layout_axis.c): per value, the largest known power-of-two
     * divisor of an integer scalar (0: not computed yet) */
    int64_t *div;
    /* per tile value and dim, what cg_axis_info found (allocated on first use) */
    struct cg_axis *axis;

    /* the hang check's bound in ms (0: none; codegen.h) */
    int hang_ms;

    /* debug */
    bool verify_passes;
    const char *dump_after;
} cg_ctx;

/* One use of shared memory (a loom_cost of include/loom.h, before it is put in words). */
typedef struct cg_cost {
    int kind;        /* loom_cost_kind */
    uint32_t op;     /* the op that pays (an smem_alloc or mbar_alloc for an allocation) */
    int opnd;        /* LOOM_COST_CONVERT: the operand converted; else -1 */
    int32_t from, to; /* LOOM_COST_CONVERT: the layouts */
    size_t bytes;    /* scratch it needs, or the allocation's bytes */
    int barriers;    /* bar.sync each time it runs */
    int copies;      /* task replicas that each hold it (1 outside tasks) */
    const char *why; /* the use in words ("a reduction across warps", ...), or NULL: note */
    char note[256];  /* the use in words where they depend on the op (a dot's fallback) */
    size_t elements; /* LOOM_COST_ARITH: the elements the op computes each time it runs */
} cg_cost;
bool cg_cost_add(cg_ctx *cg, const cg_cost *c); /* codegen/smem.c */
/* codegen/explain.c: the costs in words, one a line ("" when none; malloc'ed, NULL when out
 * of memory), and the layout of value v in words (into buf). */
char *cg_explain_text(cg_ctx *cg);
/* codegen/explain.c: the arithmetic a rewrite would make cheaper (LOOM_COST_ARITH), added to
 * cg->costs after the uses of shared memory. */
void cg_arith_hints(cg_ctx *cg);
void cg_cost_fill(cg_ctx *cg, const cg_cost *c, loom_cost *out, char *text, size_t textlen);
const char *cg_layout_str(cg_ctx *cg, int32_t id, char *buf, size_t n);
void cg_dump_layouts(cg_ctx *cg, FILE *f);

/* Record an error (the first one wins); returns false so callers can `return cg_fail()`. */
bool cg_fail(cg_ctx *cg, loom_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define CG_BUG(cg, ...) cg_bug((cg), __FILE__, __LINE__, __VA_ARGS__)
bool cg_bug(cg_ctx *cg, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---------------------------------------------------------------- passes */

loom_status cg_fold(cg_ctx *cg);    /* codegen/fold.c */
loom_status cg_layouts(cg_ctx *cg); /* codegen/layout_pass.c */
loom_status cg_smem(cg_ctx *cg);    /* codegen/smem.c */
/* codegen/smem.c: the warps of the task replica (or CTA, outside tasks) that runs op o:
 * an atomic_add of one warp passes its result by shuffle, of more through scratch. */
int cg_op_warps(const loom_kernel *k, uint32_t o);
/* codegen/smem.c: which register of thread 0 (lane 0, warp 0) holds each of the first n
 * elements (row-major over the real shape) of a tile in layout l, in reg_of[]; false when
 * thread 0 lacks one.  smem_store_cluster's elected thread writes such a tile alone. */
bool cg_thread0_regs(const cg_layout *l, int32_t *reg_of, int64_t n);
/* codegen/lower.c: build the LLVM module (an LLVMModuleRef in an LLVMContextRef, both
 * returned as void * so this header needs no LLVM include). */
loom_status cg_lower(cg_ctx *cg, void *llvm_ctx, void **module_out);
/* Whether op kind `kind` has a lowering (codegen/lower.c's dispatch). */
bool cg_op_lowered(int kind);
/* codegen/emit.c */
loom_status cg_emit_init(cg_ctx *cg);
loom_status cg_optimize(cg_ctx *cg, void *module, void *tm);
loom_status cg_emit_ptx(cg_ctx *cg, void *module, void *tm, char **ptx_out);
void *cg_target_machine(cg_ctx *cg);  /* LLVMTargetMachineRef, or NULL with an error */
void cg_target_machine_free(void *tm);

/* ---------------------------------------------------------------- layout algebra */

int cg_lg(int64_t n); /* ceil(log2(n)) */
int32_t cg_layout_add(cg_ctx *cg, const cg_layout *l); /* dedup; -1 when out of memory */
static inline const cg_layout *cg_lay(const cg_ctx *cg, int32_t id) { return &cg->lays[id]; }
bool cg_layout_eq(const cg_layout *a, const cg_layout *b);
int cg_layout_regs(const cg_layout *l); /* registers per thread: 2^nreg */
int64_t cg_layout_padded_numel(const cg_layout *l);
/* Constant part of the coordinate of register j along dim d. */
int64_t cg_reg_coord(const cg_layout *l, int j, int d);
bool cg_blocked(cg_ctx *cg, const loom_shape *s, int elsize, cg_layout *out);
cg_layout cg_slice(const cg_layout *p, int32_t pid, int axis);
cg_layout cg_expand(const cg_layout *l, int axis);
cg_layout cg_trans(const cg_layout *l);
bool cg_extend(cg_ctx *cg, const cg_layout *l, const loom_shape *target, cg_layout *out);
cg_layout cg_rowproj(const cg_layout *l);
/* slice: p's part [start, start + size) along dim (size a power of two, start a multiple)
 * as a layout of its own, when that part is a subset of each thread's registers (p's bits
 * of dim from log2(size) up are register bits): *out keeps the rest; false otherwise.
 * cg_widen: the layout of the whole tile (dim `full` long) that holds r's part in
 * registers, its bits of dim from log2(size) up as new register bits (false: too many
 * registers, recorded).  cg_part_map: for each dst register, the src register holding
 * the same element (dst's coordinate along dim plus start); false where it is in another
 * thread. */
bool cg_part(const cg_layout *p, int dim, int64_t size, cg_layout *out);
bool cg_widen(cg_ctx *cg, const cg_layout *r, int dim, int64_t full, cg_layout *out);
bool cg_part_map(const cg_layout *src, const cg_layout *dst, int dim, int64_t start, int32_t *regmap);
/* Can every thread find, in its own registers of `src`, the element f(c) for each
 * element c it holds in `dst`?  feed[s] is the dst dim that source dim s takes its
 * coordinate from (-1: coordinate 0).  If so, fill regmap[j] (per dst register). */
bool cg_direct_map(const cg_layout *src, const cg_layout *dst, const int8_t *feed, int32_t *regmap);
bool cg_direct_same(const cg_layout *src, const cg_layout *dst, int32_t *regmap);

/* Layout analysis results used by smem and lower. */
int32_t cg_want(cg_ctx *cg, uint32_t o, int i); /* wanted layout of operand i of op o */
/* The wgmma accumulator layout of an f32 [M, N] tile over the current task's warps. */
int32_t cg_mma_layout(cg_ctx *cg, const loom_shape *s);
/* The layout of a wgmma A operand of shape a in registers, for accumulator layout acc: the
 * accumulator layout of an [M, K] tile (codegen/layout.c says why). */
int32_t cg_mma_a_layout(cg_ctx *cg, int32_t acc, const loom_shape *a);
/* Why dot op o cannot run on the tensor cores (mma.sync m16n8k16 for f16/bf16, m16n8k32
 * for FP8) over 2^warp_bits warps (in buf), or NULL when it can (layout.c).  The layout
 * pass decides (cg->dot_mma). */
const char *cg_dot_mma_unfit(const cg_ctx *cg, const ir_op *op, int warp_bits, char *buf, size_t n);
/* Has target arch mma.sync m16n8k32 with FP8 operands of its own?  sm_89 and sm_120 on
 * do; sm_90 and sm_100 take the PTX, but ptxas expands each one into more instructions
 * (its cubin of one such mma: 40 instructions at sm_90a and sm_100a, 24 at sm_89 and
 * sm_120a, ptxas 13.0), and small tiles spilled.  There an FP8 dot is an f16 dot of the
 * same values (FP8 values are exact in f16): lower_mma.c stages A and B as f16. */
static inline bool cg_fp8_mma_native(const char *arch)
{
    int v = atoi(arch + 3);
    return v == 89 || v >= 120;
}
/* The mma.sync accumulator layout of an f32 [M, N] tile over the current task's warps. */
int32_t cg_dot_mma_layout(cg_ctx *cg, const loom_shape *s);
/* A dot on the tensor cores stages A [M, K] and B [K, N] in scratch, row-major over the
 * padded dims, each row 16 bytes longer than its elements, so that the 8 rows of 16 bytes
 * one ldmatrix reads fall in distinct banks: A's rows from 0, B's from boff.  16-bit
 * operands (f16, bf16, and FP8 as f16 where the target has no FP8 mma.sync) as
 * 16-bit elements: A [M, K], B [K, N] (brow bytes a k row).  fp8 (FP8 operands of the
 * m16n8k32 mma) as bytes, both K-major, as its 8-bit fragments want them: A [M, K], B
 * transposed, [N, K] (brow bytes an n row).  The plan (smem.c) and the lowering
 * (lower_mma.c) both take it from here. */
typedef struct cg_mma_stage {
    int64_t arow, brow, boff, bytes;
} cg_mma_stage;
static inline cg_mma_stage cg_mma_stage_of(const loom_shape *a, const loom_shape *b, bool fp8)
{
    int64_t pm = INT64_C(1) << cg_lg(a->dim[0]), pk = INT64_C(1) << cg_lg(a->dim[1]);
    int64_t pn = INT64_C(1) << cg_lg(b->dim[1]);
    cg_mma_stage s;
    if (fp8) {
        s = (cg_mma_stage){.arow = pk + 16, .brow = pk + 16};
        s.boff = pm * s.arow;
        s.bytes = s.boff + pn * s.brow;
    } else {
        s = (cg_mma_stage){.arow = 2 * pk + 16, .brow = 2 * pn + 16};
        s.boff = pm * s.arow;
        s.bytes = s.boff + pk * s.brow;
    }
    return s;
}
bool cg_needs_convert(cg_ctx *cg, uint32_t v, int32_t want);
size_t cg_reg_bytes(loom_dtype dt); /* bytes of one register element in scratch */
int64_t cg_divisor(cg_ctx *cg, uint32_t v);
/* What is known of tile value v along its dim d.  Split the dim (padded to a power of
 * two) into aligned blocks of `cnst` elements: v is constant on each.  Into aligned
 * blocks of `contig` elements: v (an integer) grows by one from element to element in
 * each, and the first element of each block is a multiple of `div` (with contig 1:
 * every element is).  All three are powers of two; 1 means nothing is known.  A mask
 * whose cnst along the contiguous dim is at least a vector's width is uniform over each
 * vector, so a masked access can still be one 16-byte access per vector. */
typedef struct cg_axis {
    int64_t cnst, contig, div;
} cg_axis;
cg_axis cg_axis_info(cg_ctx *cg, uint32_t v, int d);
int cg_elsize(loom_dtype dt);


#endif /* LOOM_CG_H */
