/*
 * loom.h -- the public header of loom, a kernel compiler written in C.  Including it
 * declares the whole API; this file holds the DSL core, for anyone who writes a kernel:
 * a C program describes a GPU kernel with the builder calls below, then runs it with
 * loom_launch() (loom_runtime.h) on the GPU or on the CPU interpreter.  Sections:
 *
 *   1. status codes and source locations
 *   2. element types and tile shapes
 *   3. kernels and arguments            (dsl/ir.c)
 *   4. builder calls: the DSL           (dsl/builder.c; ops listed in dsl/ops.h)
 *   5. structured control flow          (dsl/builder.c)
 *   6. verify, print, errors            (dsl/verify.c, dsl/print.c)
 *
 * The rest of the API, a header an audience, each included at the end of this one:
 *
 *   loom_runtime.h  running kernels: runtimes, buffers, launch, compile, timing, costs
 *   loom_hopper.h   Hopper: shared memory, mbarriers, TMA, clusters, wgmma, tasks, flags
 *   loom_tune.h     templates (a kernel per shape and config), checks, tuner, plugins
 *   loom_aot.h      ahead of time: a template's kernels as plain C files (loomc aot)
 *   loom_gemm.h     gemm at any shape, prepared once and run per request
 *
 * Included on their own: loom_pipe.h, the pipeline layer for warp-specialized kernels
 * (rings, schedulers, roles, mainloops, epilogues), and loom_ikbo.h, the IKBO operations.
 *
 * Every builder call is a macro that records the caller's __FILE__ and __LINE__, so an
 * error names the line of user code that built the bad op (a helper of your own passes
 * its caller's on with the `_at` forms: loom_add_at(here, k, a, b)).  A mistake is
 * recorded in the kernel and the call returns LOOM_NONE; once the kernel holds an error,
 * later calls given LOOM_NONE quietly return it too (before, a LOOM_NONE operand is
 * itself reported); loom_verify() reports the first cause of each chain.  The library
 * never exits or aborts the process on a user's error.
 *
 * Threads (docs/errors.md, "Threads"; loom_runtime.h for runtimes): a kernel is built by
 * one thread at a time; once built, the calls that only read it (loom_verify,
 * loom_kernel_errors, loom_print, loom_compile_ptx, loom_prepare, loom_launch) may run on
 * several at once, and loom_kernel_destroy comes after them all.  A value handle
 * (loom_val) belongs to the kernel that made it: another kernel's is refused.
 */
#ifndef LOOM_H
#define LOOM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported from libloom; everything else is hidden. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define LOOM_VERSION "0.1.0"
#define LOOM_MAX_RANK 4
#define LOOM_MAX_ARGS 32

/* ---------------------------------------------------------------- 1. status, locations */

typedef enum loom_status {
    LOOM_OK = 0,
    LOOM_ERR_INVALID,   /* a bad argument to an API call */
    LOOM_ERR_VERIFY,    /* the kernel failed verification */
    LOOM_ERR_BOUNDS,    /* the interpreter caught an out-of-bounds access */
    LOOM_ERR_RUNTIME,   /* the interpreter caught another fault (division by zero, ...) */
    LOOM_ERR_NO_GPU,    /* no CUDA driver or no device */
    LOOM_ERR_CUDA,      /* a CUDA driver call failed */
    LOOM_ERR_COMPILE,   /* lowering to PTX or loading the module failed */
    LOOM_ERR_NOMEM,
    LOOM_ERR_UNSUPPORTED,
    LOOM_ERR_TIMEOUT,   /* loom_runtime_sync's bound passed before the GPU work was done */
    LOOM_ERR_NOT_TUNED, /* loom_tune: a shape could not be tuned on the GPU (no candidate ran
                           correctly, or none could be set up); its kernel, the default
                           config's, is ready all the same (loom_tuned.source: FELL_BACK) */
} loom_status;

const char *loom_status_name(loom_status s);

/* Where a builder call was made; LOOM_HERE captures the caller's file and line. */
typedef struct loom_src {
    const char *file;
    int line;
} loom_src;
#define LOOM_HERE ((loom_src){__FILE__, __LINE__})

/* ---------------------------------------------------------------- 2. types */

typedef enum loom_dtype {
    LOOM_F16,
    LOOM_BF16,
    LOOM_F32,
    LOOM_I32,
    LOOM_I64,
    LOOM_I1,
    LOOM_E4M3, /* FP8: 1 sign, 4 exponent, 3 mantissa bits; no infinity; largest 448 */
    LOOM_E5M2, /* FP8: 1 sign, 5 exponent, 2 mantissa bits; IEEE-like; largest 57344 */
    LOOM_DTYPE_COUNT
} loom_dtype; /* values are stored in caches and AOT files: new dtypes go at the end */

const char *loom_dtype_name(loom_dtype t);
size_t loom_dtype_size(loom_dtype t); /* bytes in memory (i1 is stored as one byte) */

/* A tile shape: rank 0 is a scalar.  Every dimension is a compile-time constant. */
typedef struct loom_shape {
    int rank;
    int64_t dim[LOOM_MAX_RANK];
} loom_shape;

#define LOOM_SCALAR ((loom_shape){0, {0}})
#define LOOM_SHAPE1(a) ((loom_shape){1, {(a)}})
#define LOOM_SHAPE2(a, b) ((loom_shape){2, {(a), (b)}})
#define LOOM_SHAPE3(a, b, c) ((loom_shape){3, {(a), (b), (c)}})

/* Values are 32-bit handles owned by their kernel; 0 is "no value". */
typedef uint32_t loom_val;
#define LOOM_NONE ((loom_val)0)

/* ---------------------------------------------------------------- 3. kernels, arguments */

typedef struct loom_kernel loom_kernel;

/* Create an empty kernel; num_warps is the CTA size in warps (1..32) for GPU lowering. */
#define loom_kernel_create(name, num_warps) loom_kernel_create_at(LOOM_HERE, name, num_warps)
loom_kernel *loom_kernel_create_at(loom_src at, const char *name, int num_warps);
void loom_kernel_destroy(loom_kernel *k);
const char *loom_kernel_name(const loom_kernel *k);
int loom_kernel_num_warps(const loom_kernel *k);
/* The shape of a value: a tile's, a tensor argument's, a shared view's (LOOM_SCALAR for a
 * scalar or an invalid handle).  For helpers that build ops over values of any rank. */
loom_shape loom_val_shape(const loom_kernel *k, loom_val v);

/* Global tensor arguments: dtype, shape, and strides in elements (NULL: row-major
 * contiguous).  An input tensor is read-only: storing to it is a verifier error. */
typedef enum loom_access { LOOM_IN = 1, LOOM_OUT = 2, LOOM_INOUT = 3 } loom_access;

#define loom_arg_tensor(k, name, dtype, shape, access) \
    loom_arg_tensor_at(LOOM_HERE, k, name, dtype, shape, NULL, access)
#define loom_arg_tensor_strided(k, name, dtype, shape, strides, access) \
    loom_arg_tensor_at(LOOM_HERE, k, name, dtype, shape, strides, access)
loom_val loom_arg_tensor_at(loom_src at, loom_kernel *k, const char *name, loom_dtype dt,
                            loom_shape shape, const int64_t *strides, loom_access access);

/* A scalar argument (i32, i64, f32) passed by value at launch. */
#define loom_arg_scalar(k, name, dtype) loom_arg_scalar_at(LOOM_HERE, k, name, dtype)
loom_val loom_arg_scalar_at(loom_src at, loom_kernel *k, const char *name, loom_dtype dt);

/* A run-time dimension: an i32 scalar argument whose value, given at each launch (1 to
 * max, up to 2^31 - 1; a multiple of `multiple`, a hint the code generator may use), is
 * a tensor dimension, so one compiled kernel serves every value.  Put it in a tensor
 * argument's shape as LOOM_DIM(d) and use d as any i32 scalar.  With row-major strides
 * only dim 0 may be run-time.  docs/dsl.md, "Run-time dimensions", has the rules. */
#define loom_arg_dim(k, name, max, multiple) loom_arg_dim_at(LOOM_HERE, k, name, max, multiple)
loom_val loom_arg_dim_at(loom_src at, loom_kernel *k, const char *name, int64_t max, int64_t multiple);
/* A run-time dim d (loom_arg_dim's value) as a tensor argument's dimension. */
#define LOOM_DIM(d) (-(int64_t)(uint32_t)(d))

int loom_kernel_num_args(const loom_kernel *k);
/* Describe argument i; returns 0 if i is out of range.  is_tensor says which kind. */
typedef struct loom_arg_info {
    const char *name;
    int is_tensor;
    loom_dtype dtype;
    loom_shape shape;
    int64_t strides[LOOM_MAX_RANK];
    loom_access access;
    size_t min_bytes; /* smallest buffer that holds every element the strides reach (run-time
                         dims at their maxima) */
    int dim_of[LOOM_MAX_RANK]; /* tensor: the dim argument of dim d (-1: static; else shape.dim[d]
                                  holds that dim's max) */
    int is_dim;                /* a run-time dim (loom_arg_dim) */
    int64_t dim_max, dim_multiple;
} loom_arg_info;
int loom_kernel_arg_info(const loom_kernel *k, int i, loom_arg_info *out);

/* ---------------------------------------------------------------- 4. builder calls */

/* Grid position: scalars of type i32. */
#define loom_program_id(k, axis) loom_program_id_at(LOOM_HERE, k, axis)
#define loom_num_programs(k, axis) loom_num_programs_at(LOOM_HERE, k, axis)
loom_val loom_program_id_at(loom_src at, loom_kernel *k, int axis);
loom_val loom_num_programs_at(loom_src at, loom_kernel *k, int axis);

/* Constants are scalars.  const_f rounds to the dtype (nearest even). */
#define loom_const_f(k, dtype, v) loom_const_f_at(LOOM_HERE, k, dtype, v)
#define loom_const_i(k, dtype, v) loom_const_i_at(LOOM_HERE, k, dtype, v)
loom_val loom_const_f_at(loom_src at, loom_kernel *k, loom_dtype dt, double v);
loom_val loom_const_i_at(loom_src at, loom_kernel *k, loom_dtype dt, int64_t v);

/* arange(start, end): the i32 tile [start, start+1, ..., end-1]. */
#define loom_arange(k, start, end) loom_arange_at(LOOM_HERE, k, start, end)
loom_val loom_arange_at(loom_src at, loom_kernel *k, int64_t start, int64_t end);

/* Shape ops.  splat: scalar -> tile.  broadcast: numpy rules (right-aligned; source
 * dims of 1 stretch).  expand_dims inserts a dim of 1.  trans swaps a 2-D tile.  slice:
 * the elements [start, start + size) of v along dim, the other dims whole; size a power
 * of two and start a multiple of it (a part of the tile's registers on the GPU, where the
 * layout allows, e.g. a column half of an accumulator; else moved through shared memory). */
#define loom_splat(k, v, shape) loom_splat_at(LOOM_HERE, k, v, shape)
#define loom_broadcast(k, v, shape) loom_broadcast_at(LOOM_HERE, k, v, shape)
#define loom_expand_dims(k, v, axis) loom_expand_dims_at(LOOM_HERE, k, v, axis)
#define loom_trans(k, v) loom_trans_at(LOOM_HERE, k, v)
#define loom_slice(k, v, dim, start, size) loom_slice_at(LOOM_HERE, k, v, dim, start, size)
loom_val loom_splat_at(loom_src at, loom_kernel *k, loom_val v, loom_shape shape);
loom_val loom_broadcast_at(loom_src at, loom_kernel *k, loom_val v, loom_shape shape);
loom_val loom_expand_dims_at(loom_src at, loom_kernel *k, loom_val v, int axis);
loom_val loom_trans_at(loom_src at, loom_kernel *k, loom_val v);
loom_val loom_slice_at(loom_src at, loom_kernel *k, loom_val v, int dim, int64_t start, int64_t size);

/* Elementwise arithmetic.  Operands have the same dtype and the same shape, except that a
 * scalar operand is splatted to the other's shape.  Integers wrap (two's complement);
 * integer div and rem truncate toward zero, and a zero divisor is a runtime error in the
 * interpreter.  f16/bf16 results are rounded to nearest even after each op. */
#define loom_add(k, a, b) loom_add_at(LOOM_HERE, k, a, b)
#define loom_sub(k, a, b) loom_sub_at(LOOM_HERE, k, a, b)
#define loom_mul(k, a, b) loom_mul_at(LOOM_HERE, k, a, b)
#define loom_div(k, a, b) loom_div_at(LOOM_HERE, k, a, b)
#define loom_rem(k, a, b) loom_rem_at(LOOM_HERE, k, a, b)
#define loom_min(k, a, b) loom_min_at(LOOM_HERE, k, a, b)
#define loom_max(k, a, b) loom_max_at(LOOM_HERE, k, a, b)
#define loom_and(k, a, b) loom_and_at(LOOM_HERE, k, a, b)
#define loom_or(k, a, b) loom_or_at(LOOM_HERE, k, a, b)
#define loom_xor(k, a, b) loom_xor_at(LOOM_HERE, k, a, b)
#define loom_shl(k, a, n) loom_shl_at(LOOM_HERE, k, a, n)
#define loom_shr(k, a, n) loom_shr_at(LOOM_HERE, k, a, n)
#define loom_div_fast(k, a, b) loom_div_fast_at(LOOM_HERE, k, a, b)
#define loom_fma(k, a, b, c) loom_fma_at(LOOM_HERE, k, a, b, c)
#define loom_neg(k, a) loom_neg_at(LOOM_HERE, k, a)
#define loom_abs(k, a) loom_abs_at(LOOM_HERE, k, a)
#define loom_exp2(k, a) loom_exp2_at(LOOM_HERE, k, a)
#define loom_log2(k, a) loom_log2_at(LOOM_HERE, k, a)
#define loom_rsqrt(k, a) loom_rsqrt_at(LOOM_HERE, k, a)
#define loom_exp(k, a) loom_exp_at(LOOM_HERE, k, a)
#define loom_log(k, a) loom_log_at(LOOM_HERE, k, a)
#define loom_tanh(k, a) loom_tanh_at(LOOM_HERE, k, a)
#define loom_erf(k, a) loom_erf_at(LOOM_HERE, k, a)
#define loom_sigmoid(k, a) loom_sigmoid_at(LOOM_HERE, k, a)
#define loom_sqrt(k, a) loom_sqrt_at(LOOM_HERE, k, a)
#define loom_rcp(k, a) loom_rcp_at(LOOM_HERE, k, a)
#define loom_not(k, a) loom_not_at(LOOM_HERE, k, a)
loom_val loom_add_at(loom_src at, loom_kernel *k, loom_val a, loom_val b);
loom_val loom_sub_at(loom_src at, loom_kernel *k, loom_val a, loom_val b);
loom_val loom_mul_at(loom_src at, loom_kernel *k, loom_val a, loom_val b);
/* Float div is IEEE (correctly rounded, div.rn.f32 on the GPU).  div_fast is the opt-in
 * fast float division: within 2 ulp, subnormal operands and results flushed to zero
 * (div.full.ftz.f32); floats only. */
loom_val loom_div_at(loom_src at, loom_kernel *k, loom_val a, loom_val b);
loom_val loom_div_fast_at(loom_src at, loom_kernel *k, loom_val a, loom_val b);
loom_val loom_rem_at(loom_src at, loom_kernel *k, loom_val a, loom_val b);
/* min/max of floats: if either operand is NaN the result is NaN. */
loom_val loom_min_at(loom_src at, loom_kernel *k, loom_val a, loom_val b);
loom_val loom_max_at(loom_src at, loom_kernel *k, loom_val a, loom_val b);
/* Bitwise and/or on integers and i1. */
loom_val loom_and_at(loom_src at, loom_kernel *k, loom_val a, loom_val b);
loom_val loom_or_at(loom_src at, loom_kernel *k, loom_val a, loom_val b);
/* Bitwise xor on integers; on i1 it is logical xor (a != b). */
loom_val loom_xor_at(loom_src at, loom_kernel *k, loom_val a, loom_val b);
/* Shifts of i32/i64 by a count n of the same dtype.  shr is arithmetic (the integers are
 * signed: the sign bit fills in).  A count outside [0, width), negative counts included,
 * shifts every bit out: shl gives 0, shr 0 or -1 by the sign (PTX clamps counts too). */
loom_val loom_shl_at(loom_src at, loom_kernel *k, loom_val a, loom_val n);
loom_val loom_shr_at(loom_src at, loom_kernel *k, loom_val a, loom_val n);
loom_val loom_fma_at(loom_src at, loom_kernel *k, loom_val a, loom_val b, loom_val c);
loom_val loom_neg_at(loom_src at, loom_kernel *k, loom_val a);
loom_val loom_abs_at(loom_src at, loom_kernel *k, loom_val a);
/* exp2, log2, rsqrt: floats only; computed in f32 (see docs/dsl.md for accuracy). */
loom_val loom_exp2_at(loom_src at, loom_kernel *k, loom_val a);
loom_val loom_log2_at(loom_src at, loom_kernel *k, loom_val a);
loom_val loom_rsqrt_at(loom_src at, loom_kernel *k, loom_val a);
/* exp, log, tanh, erf, sigmoid (1 / (1 + exp(-x))), sqrt, rcp (1 / x, fast): floats only;
 * computed in f32 and rounded to f16/bf16.  The interpreter computes them (but rcp)
 * correctly rounded; the GPU within the bounds docs/dsl.md gives per op (sqrt is exact,
 * IEEE sqrt.rn; rcp is within 1 ulp, subnormals flushed). */
loom_val loom_exp_at(loom_src at, loom_kernel *k, loom_val a);
loom_val loom_log_at(loom_src at, loom_kernel *k, loom_val a);
loom_val loom_tanh_at(loom_src at, loom_kernel *k, loom_val a);
loom_val loom_erf_at(loom_src at, loom_kernel *k, loom_val a);
loom_val loom_sigmoid_at(loom_src at, loom_kernel *k, loom_val a);
loom_val loom_sqrt_at(loom_src at, loom_kernel *k, loom_val a);
loom_val loom_rcp_at(loom_src at, loom_kernel *k, loom_val a);
/* Logical not of an i1 tile. */
loom_val loom_not_at(loom_src at, loom_kernel *k, loom_val a);

/* Comparison -> i1.  Float comparisons are ordered: any NaN operand gives false, except
 * LOOM_NE, which gives true. */
typedef enum loom_cmp_pred { LOOM_EQ, LOOM_NE, LOOM_LT, LOOM_LE, LOOM_GT, LOOM_GE } loom_cmp_pred;
#define loom_cmp(k, pred, a, b) loom_cmp_at(LOOM_HERE, k, pred, a, b)
loom_val loom_cmp_at(loom_src at, loom_kernel *k, loom_cmp_pred p, loom_val a, loom_val b);

/* select(cond, a, b): cond is i1 (scalar or the same shape). */
#define loom_select(k, c, a, b) loom_select_at(LOOM_HERE, k, c, a, b)
loom_val loom_select_at(loom_src at, loom_kernel *k, loom_val c, loom_val a, loom_val b);

/* Cast between any two element types.  Into f16/bf16/f32: round to nearest even (once).
 * Float to i32/i64: truncate toward zero, NaN gives 0, out-of-range saturates.  Integer to
 * narrower integer: wrap.  To i1: value != 0 (so NaN gives 1). */
#define loom_cast(k, v, dtype) loom_cast_at(LOOM_HERE, k, v, dtype)
loom_val loom_cast_at(loom_src at, loom_kernel *k, loom_val v, loom_dtype dt);

/* Reductions along one axis; the axis is removed from the shape.  Float sums accumulate
 * in f32 whatever the input type and round once at the end; max/min propagate NaN. */
#define loom_reduce_sum(k, v, axis) loom_reduce_sum_at(LOOM_HERE, k, v, axis)
#define loom_reduce_max(k, v, axis) loom_reduce_max_at(LOOM_HERE, k, v, axis)
#define loom_reduce_min(k, v, axis) loom_reduce_min_at(LOOM_HERE, k, v, axis)
loom_val loom_reduce_sum_at(loom_src at, loom_kernel *k, loom_val v, int axis);
loom_val loom_reduce_max_at(loom_src at, loom_kernel *k, loom_val v, int axis);
loom_val loom_reduce_min_at(loom_src at, loom_kernel *k, loom_val v, int axis);

/* dot(a[M,K], b[K,N], acc[M,N]) = acc + a @ b, with a and b f16, bf16 or f32 (the same
 * dtype) and acc f32: for each k in order, acc = fma(a[m,k], b[k,n], acc) in f32 (the
 * products of f16/bf16 inputs are exact). */
#define loom_dot(k, a, b, acc) loom_dot_at(LOOM_HERE, k, a, b, acc)
loom_val loom_dot_at(loom_src at, loom_kernel *k, loom_val a, loom_val b, loom_val acc);

/* Memory.  A block access reads or writes the tile t[o0, ..., o_{r-1} + shape] where the
 * tile's shape covers the tensor's trailing dims and the leading dims are indexed by
 * their offset alone.  Offsets are i32 or i64 scalars.  Elements outside the tensor's
 * trailing (tiled) dims are masked: a load gives `fill` there and a store skips them.  A
 * leading offset outside the tensor is an out-of-bounds error (the interpreter reports it
 * with the op's source line).  `mask` is an optional i1 tile of the tile's shape (or
 * LOOM_NONE); masked-off elements behave like out-of-tensor ones. */
#define loom_load(k, t, offs, shape, mask, fill) \
    loom_load_at(LOOM_HERE, k, t, offs, shape, mask, fill)
#define loom_store(k, t, offs, v, mask) loom_store_at(LOOM_HERE, k, t, offs, v, mask)
loom_val loom_load_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs,
                      loom_shape shape, loom_val mask, double fill);
void loom_store_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs, loom_val v,
                   loom_val mask);

/* One element t[o0, ..., o_{r-1}] as a scalar (all offsets must be in bounds): for example
 * a user index u = map[b] read from a mapping table. */
#define loom_load_scalar(k, t, offs) loom_load_scalar_at(LOOM_HERE, k, t, offs)
loom_val loom_load_scalar_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs);

/* A load whose rows come from an index: for a 1-D i32/i64 tile rows[R] and a tensor of
 * rank r, result[i, j...] = t[rows[i], offs[1] + j, ...] with the trailing dims masked
 * like loom_load.  offs[0] is ignored.  A row index outside the tensor is an
 * out-of-bounds error.  shape has rank r with shape.dim[0] == R. */
#define loom_load_rows(k, t, rows, offs, shape, fill) \
    loom_load_rows_at(LOOM_HERE, k, t, rows, offs, shape, fill)
loom_val loom_load_rows_at(loom_src at, loom_kernel *k, loom_val t, loom_val rows,
                           const loom_val *offs, loom_shape shape, double fill);

/* Give a value a name for printed IR (and returns it). */
loom_val loom_name(loom_kernel *k, loom_val v, const char *name);

/* ---------------------------------------------------------------- 5. control flow */

/* The handle of a region op (a for, an if, a task; a wgmma wait): a type of its own, so
 * that it and a value (loom_val) cannot be passed one for the other.  LOOM_NO_REGION is
 * none (what a begin whose error is recorded returns); loom_region_is_none tests it. */
typedef struct loom_region_op {
    uint32_t id;
} loom_region_op;
#define LOOM_NO_REGION ((loom_region_op){0})
static inline int loom_region_is_none(loom_region_op r) { return r.id == 0; }

/* for (iv = lo; iv < hi; iv += step) with carried values.  lo, hi, step are i32 scalars
 * (step > 0).  Inside the body, loom_for_iv() is the induction variable and
 * loom_for_arg(i) the i-th carried value; loom_for_end() yields the next carried values
 * (same types as the initial ones); after it, loom_for_result(i) is the final value. */
#define loom_for_begin(k, lo, hi, step, n, init) \
    loom_for_begin_at(LOOM_HERE, k, lo, hi, step, n, init)
#define loom_for_end(k, loop, n, yields) loom_for_end_at(LOOM_HERE, k, loop, n, yields)
loom_region_op loom_for_begin_at(loom_src at, loom_kernel *k, loom_val lo, loom_val hi,
                                 loom_val step, int n, const loom_val *init);
loom_val loom_for_iv(loom_kernel *k, loom_region_op loop);
loom_val loom_for_arg(loom_kernel *k, loom_region_op loop, int i);
void loom_for_end_at(loom_src at, loom_kernel *k, loom_region_op loop, int n,
                     const loom_val *yields);
loom_val loom_for_result(loom_kernel *k, loom_region_op loop, int i);

/* if (cond) { then } else { else } with n results.  cond is an i1 scalar. */
#define loom_if_begin(k, cond, n) loom_if_begin_at(LOOM_HERE, k, cond, n)
#define loom_else(k, op, n, yields) loom_else_at(LOOM_HERE, k, op, n, yields)
#define loom_if_end(k, op, n, yields) loom_if_end_at(LOOM_HERE, k, op, n, yields)
loom_region_op loom_if_begin_at(loom_src at, loom_kernel *k, loom_val cond, int n_results);
void loom_else_at(loom_src at, loom_kernel *k, loom_region_op op, int n, const loom_val *yields);
void loom_if_end_at(loom_src at, loom_kernel *k, loom_region_op op, int n, const loom_val *yields);
loom_val loom_if_result(loom_kernel *k, loom_region_op op, int i);

/* ---------------------------------------------------------------- 6. verify, print */

/* Check the whole kernel.  LOOM_OK, or LOOM_ERR_VERIFY with every problem listed in
 * loom_kernel_errors(), one a line, as "file:line: error: op 'name': message" (errors not
 * tied to an op, such as argument declarations, omit the op part). */
loom_status loom_verify(loom_kernel *k);
const char *loom_kernel_errors(const loom_kernel *k); /* "" when there are none */
int loom_kernel_num_errors(const loom_kernel *k);

/* The stable text form of the IR.  Returns a string owned by the kernel (valid until the
 * next call that changes or prints it). */
const char *loom_print(loom_kernel *k);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

/* The rest of the API, one header an audience, in the order each builds on the ones
 * before (each includes loom.h first, so any of them may also be included alone). */
#include "loom_runtime.h"
#include "loom_hopper.h"
#include "loom_tune.h"
#include "loom_aot.h"
#include "loom_gemm.h"

#endif /* LOOM_H */
