/*
 * ops.h -- the one op table of loom.
 *
 * Every op of the IR is one line here.  The file is an X-macro: it is included with
 * LOOM_OP defined in several places to build
 *   - the op enum and the descriptors            (dsl/ir.h, dsl/ir.c: name, counts, flags)
 *   - the type rule each op runs when built and when verified   (dsl/rules.c)
 *   - the interpreter's dispatch table           (dsl/interp.c: interp_<name>)
 *   - the prototypes of the Hopper semantics     (dsl/interp.h, from `sem`)
 *   - the printer's form and attribute names     (dsl/print.c: print_<print>, `attrs`)
 *   - the layout class of each op                (codegen/layout_pass.c, from `layout`)
 *   - the LLVM lowering's declarations and dispatch  (codegen/lower.h, lower.c: lower_<name>)
 *   - the test that every op has a test          (tests/test_optable.c)
 *   - the walk that every op has semantics and a lowering  (tests/test_refusals.c)
 * so adding an op is one line here plus its rule, semantics and lowering; a missing
 * function is a link error, never a silent gap.
 *
 * Columns:
 *   ENUM    suffix of the enum constant IR_<ENUM>
 *   name    printed name, also the suffix of interp_/lower_ functions
 *   nopnd   operand count, or -1 for variadic (checked by the rule)
 *   nreg    number of regions (for: 1 body, if: 2 branches)
 *   rule    the type rule: rule_<rule>() in dsl/rules.c computes the result type
 *   flags   IRF_* in dsl/ir.h; IRF_FOLD marks the elementwise ops codegen/fold.c
 *           evaluates on constants (with dsl/ew.c, the interpreter's own scalar
 *           semantics).  Only ops whose GPU result is bit for bit the interpreter's are
 *           folded: not exp2, log2, rsqrt, exp, log, tanh, erf, sigmoid, rcp, div_fast,
 *           which the GPU computes approximately (docs/dsl.md gives each bound), so a
 *           folded value would differ from the GPU's
 *   sem     where the semantics interp_<name>() live: core = static in dsl/interp.c;
 *           hopper = the Hopper machinery (dsl/interp_smem.c, interp_async.c,
 *           interp_tasks.c), whose prototypes dsl/interp.h makes from this column
 *   layout  how the layout pass (codegen/layout_pass.c) gives the result a register layout:
 *             EW      elementwise (result[i] from operands[i] alone): its operands' layout,
 *                     recomputed in any layout when made of scalars only
 *             SHAPE   splat, arange, broadcast, expand_dims, trans, slice: a rule of its own,
 *                     recomputed in any layout when made of scalars only
 *             REDUCE  the operand's layout sliced along the reduced axis
 *             LOAD    from memory: the anchors (blocked for the dtype, or an accumulator's
 *                     layout where every use ends in one)
 *             DOT     on the tensor cores (mma.sync), the mma accumulator's layout; on
 *                     SIMT FMA, its accumulator's
 *             MMA     the wgmma accumulator layout
 *             REGION  owns regions: its results take the layouts its blocks yield
 *             NONE    no register tile of rank > 0 (scalars take the scalar layout;
 *                     shared memory, barriers and side effects none)
 *   print   the text form, print_<print>() in dsl/print.c: opnds (the operands), axis,
 *           const, arange, cmp, access (tensor[offsets] ...), for, tile (dtype[shape]),
 *           to_shape (the operands, then "to [shape]")
 *   attrs   names of iattr[0], iattr[1], ... that print after the form as name=value;
 *           smem_alloc also keeps its dtype in iattr[2] (printed by its form)
 *
 * Operand layout of the memory ops:  load: tensor, offsets..., [mask]
 *   store: tensor, offsets..., value, [mask]      load_scalar: tensor, offsets...
 *   load_rows: tensor, rows, offsets...           for: lo, hi, step, inits...
 *   tma_load, tma_load_multicast: tensor, offsets..., view, bars, index
 *   smem_store_cluster: view, value, bars, index
 *   tma_store: tensor, offsets..., view
 *   flag_add: flags, offsets..., value            flag_wait: flags, offsets..., target
 *   atomic_add: tensor, offsets..., value (its result: the old element, an i32 scalar)
 *
 * Hopper machinery (include/loom_hopper.h).  smem_alloc keeps its dtype/shape in its
 * result type too.  Clusters (loom_kernel_set_cluster): cluster_rank, tma_load_multicast
 * (every CTA of the cluster receives the box and its barrier the bytes),
 * mbar_arrive_cluster (an arrival on the barrier in every CTA of the cluster),
 * smem_store_cluster (a small register tile written into the view of every CTA of the
 * cluster, its bytes completing on each CTA's barrier, as a multicast's do).
 */

/*      ENUM                 name                 nopnd nreg rule           flags                  sem     layout  print     attrs */
LOOM_OP(PROGRAM_ID,          program_id,            0, 0, grid,          IRF_PURE,              core,   NONE,   axis,     "")
LOOM_OP(NUM_PROGRAMS,        num_programs,          0, 0, grid,          IRF_PURE,              core,   NONE,   axis,     "")
LOOM_OP(CONST,               const,                 0, 0, const,         IRF_PURE,              core,   NONE,   const,    "")
LOOM_OP(ARANGE,              arange,                0, 0, arange,        IRF_PURE,              core,   SHAPE,  arange,   "")
LOOM_OP(SPLAT,               splat,                 1, 0, splat,         IRF_PURE,              core,   SHAPE,  to_shape, "")
LOOM_OP(BROADCAST,           broadcast,             1, 0, broadcast,     IRF_PURE,              core,   SHAPE,  to_shape, "")
LOOM_OP(EXPAND_DIMS,         expand_dims,           1, 0, expand_dims,   IRF_PURE,              core,   SHAPE,  axis,     "")
LOOM_OP(TRANS,               trans,                 1, 0, trans,         IRF_PURE,              core,   SHAPE,  opnds,    "")
LOOM_OP(SLICE,               slice,                 1, 0, slice,         IRF_PURE,              core,   SHAPE,  opnds,    "dim start size")
LOOM_OP(ADD,                 add,                   2, 0, arith,         IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(SUB,                 sub,                   2, 0, arith,         IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(MUL,                 mul,                   2, 0, arith,         IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(DIV,                 div,                   2, 0, arith,         IRF_FOLD,              core,   EW,     opnds,    "")
LOOM_OP(REM,                 rem,                   2, 0, arith,         IRF_FOLD,              core,   EW,     opnds,    "")
LOOM_OP(MIN,                 min,                   2, 0, arith,         IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(MAX,                 max,                   2, 0, arith,         IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(AND,                 and,                   2, 0, bitwise,       IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(OR,                  or,                    2, 0, bitwise,       IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(XOR,                 xor,                   2, 0, bitwise,       IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(SHL,                 shl,                   2, 0, shift,         IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(SHR,                 shr,                   2, 0, shift,         IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(DIV_FAST,            div_fast,              2, 0, arith_float,   IRF_PURE,              core,   EW,     opnds,    "")
LOOM_OP(FMA,                 fma,                   3, 0, fma,           IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(NEG,                 neg,                   1, 0, unary,         IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(ABS,                 abs,                   1, 0, unary,         IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(EXP2,                exp2,                  1, 0, unary_float,   IRF_PURE,              core,   EW,     opnds,    "")
LOOM_OP(LOG2,                log2,                  1, 0, unary_float,   IRF_PURE,              core,   EW,     opnds,    "")
LOOM_OP(RSQRT,               rsqrt,                 1, 0, unary_float,   IRF_PURE,              core,   EW,     opnds,    "")
LOOM_OP(EXP,                 exp,                   1, 0, unary_float,   IRF_PURE,              core,   EW,     opnds,    "")
LOOM_OP(LOG,                 log,                   1, 0, unary_float,   IRF_PURE,              core,   EW,     opnds,    "")
LOOM_OP(TANH,                tanh,                  1, 0, unary_float,   IRF_PURE,              core,   EW,     opnds,    "")
LOOM_OP(ERF,                 erf,                   1, 0, unary_float,   IRF_PURE,              core,   EW,     opnds,    "")
LOOM_OP(SIGMOID,             sigmoid,               1, 0, unary_float,   IRF_PURE,              core,   EW,     opnds,    "")
LOOM_OP(SQRT,                sqrt,                  1, 0, unary_float,   IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(RCP,                 rcp,                   1, 0, unary_float,   IRF_PURE,              core,   EW,     opnds,    "")
LOOM_OP(NOT,                 not,                   1, 0, unary_bool,    IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(CMP,                 cmp,                   2, 0, cmp,           IRF_PURE | IRF_FOLD,   core,   EW,     cmp,      "")
LOOM_OP(SELECT,              select,                3, 0, select,        IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(CAST,                cast,                  1, 0, cast,          IRF_PURE | IRF_FOLD,   core,   EW,     opnds,    "")
LOOM_OP(REDUCE_SUM,          reduce_sum,            1, 0, reduce,        IRF_PURE,              core,   REDUCE, axis,     "")
LOOM_OP(REDUCE_MAX,          reduce_max,            1, 0, reduce,        IRF_PURE,              core,   REDUCE, axis,     "")
LOOM_OP(REDUCE_MIN,          reduce_min,            1, 0, reduce,        IRF_PURE,              core,   REDUCE, axis,     "")
LOOM_OP(DOT,                 dot,                   3, 0, dot,           IRF_PURE,              core,   DOT,    opnds,    "")
LOOM_OP(LOAD,                load,                 -1, 0, load,          IRF_READS,             core,   LOAD,   access,   "")
LOOM_OP(LOAD_SCALAR,         load_scalar,          -1, 0, load_scalar,   IRF_READS,             core,   LOAD,   access,   "")
LOOM_OP(LOAD_ROWS,           load_rows,            -1, 0, load_rows,     IRF_READS,             core,   LOAD,   access,   "")
LOOM_OP(STORE,               store,                -1, 0, store,         IRF_WRITES,            core,   NONE,   access,   "")
LOOM_OP(FOR,                 for,                  -1, 1, for,           IRF_REGION,            core,   REGION, for,      "")
LOOM_OP(IF,                  if,                   -1, 2, if,            IRF_REGION,            core,   REGION, opnds,    "")
LOOM_OP(YIELD,               yield,                -1, 0, yield,         IRF_TERMINATOR,        core,   NONE,   opnds,    "")
LOOM_OP(SMEM_ALLOC,          smem_alloc,            0, 0, smem_alloc,    IRF_ALLOC,             hopper, NONE,   tile,     "slots swizzle")
LOOM_OP(SMEM_SLOT,           smem_slot,             2, 0, smem_slot,     IRF_PURE,              hopper, NONE,   opnds,    "")
LOOM_OP(SMEM_TRANS,          smem_trans,            1, 0, smem_trans,    IRF_PURE,              hopper, NONE,   opnds,    "")
LOOM_OP(SMEM_PART,           smem_part,             1, 0, smem_part,     IRF_PURE,              hopper, NONE,   opnds,    "dim start size")
LOOM_OP(SMEM_LOAD,           smem_load,             1, 0, smem_load,     IRF_SMEM,              hopper, LOAD,   opnds,    "")
LOOM_OP(SMEM_STORE,          smem_store,            2, 0, smem_store,    IRF_SMEM,              hopper, NONE,   opnds,    "")
LOOM_OP(MBAR_ALLOC,          mbar_alloc,            0, 0, mbar_alloc,    IRF_ALLOC,             hopper, NONE,   opnds,    "count arrivals")
LOOM_OP(MBAR_EXPECT,         mbar_expect,           2, 0, mbar_arrive,   IRF_SYNC,              hopper, NONE,   opnds,    "bytes")
LOOM_OP(MBAR_ARRIVE,         mbar_arrive,           2, 0, mbar_arrive,   IRF_SYNC,              hopper, NONE,   opnds,    "")
LOOM_OP(MBAR_ARRIVE_CLUSTER, mbar_arrive_cluster,   2, 0, mbar_arrive,   IRF_SYNC,              hopper, NONE,   opnds,    "")
LOOM_OP(MBAR_WAIT,           mbar_wait,             3, 0, mbar_wait,     IRF_SYNC,              hopper, NONE,   opnds,    "")
LOOM_OP(NAMED_BARRIER,       named_barrier,         0, 0, named_barrier, IRF_SYNC,              hopper, NONE,   opnds,    "id threads")
LOOM_OP(NAMED_BARRIER_ARRIVE, named_barrier_arrive, 0, 0, named_barrier, IRF_SYNC,              hopper, NONE,   opnds,    "id threads")
LOOM_OP(FENCE_ASYNC,         fence_async,           0, 0, no_result,     IRF_SYNC,              hopper, NONE,   opnds,    "")
LOOM_OP(TMA_LOAD,            tma_load,             -1, 0, tma_load,      IRF_READS | IRF_SMEM,  hopper, NONE,   opnds,    "")
LOOM_OP(TMA_LOAD_MULTICAST,  tma_load_multicast,   -1, 0, tma_load,      IRF_READS | IRF_SMEM,  hopper, NONE,   opnds,    "")
LOOM_OP(SMEM_STORE_CLUSTER,  smem_store_cluster,    4, 0, smem_store_cluster, IRF_SMEM | IRF_SYNC, hopper, NONE, opnds,   "")
LOOM_OP(TMA_STORE,           tma_store,            -1, 0, tma_store,     IRF_WRITES | IRF_SMEM, hopper, NONE,   opnds,    "")
LOOM_OP(TMA_STORE_WAIT,      tma_store_wait,        0, 0, no_result,     IRF_SYNC,              hopper, NONE,   opnds,    "pending")
LOOM_OP(WGMMA,               wgmma,                 3, 0, wgmma,         IRF_SMEM,              hopper, MMA,    opnds,    "")
LOOM_OP(WGMMA_COMMIT,        wgmma_commit,          0, 0, no_result,     IRF_SYNC,              hopper, NONE,   opnds,    "")
LOOM_OP(WGMMA_WAIT,          wgmma_wait,           -1, 0, wgmma_wait,    IRF_SYNC,              hopper, MMA,    opnds,    "pending")
LOOM_OP(FLAG_ADD,            flag_add,             -1, 0, flag,          IRF_SYNC,              core,   NONE,   opnds,    "")
LOOM_OP(FLAG_WAIT,           flag_wait,            -1, 0, flag,          IRF_SYNC,              core,   NONE,   opnds,    "")
LOOM_OP(ATOMIC_ADD,          atomic_add,           -1, 0, atomic,        IRF_READS | IRF_WRITES | IRF_SYNC, core, NONE, opnds, "")
LOOM_OP(TASK,                task,                  0, 1, task,          IRF_REGION,            hopper, REGION, opnds,    "warps regs replicas")
LOOM_OP(TASK_REPLICA,        task_replica,          0, 0, task_replica,  IRF_PURE,              hopper, NONE,   opnds,    "")
LOOM_OP(CLUSTER_RANK,        cluster_rank,          0, 0, cluster_rank,  IRF_PURE,              hopper, NONE,   opnds,    "")
