/*
 * loom.h -- the public header of loom, a kernel compiler written in C: the DSL and the
 * runtime.
 *
 * A C program describes a GPU kernel with the builder calls below (the DSL), then
 * runs it with loom_launch() on the GPU or on the CPU interpreter.  Sections:
 *
 *   1. status codes and source locations
 *   2. element types and tile shapes
 *   3. kernels and arguments            (dsl/ir.c)
 *   4. builder calls: the DSL           (dsl/builder.c; ops listed in dsl/ops.h)
 *   5. structured control flow          (dsl/builder.c)
 *   6. verify, print, errors            (dsl/verify.c, dsl/print.c)
 *   6b. what a kernel costs             (codegen/explain.c)
 *   7. runtime: buffers and launch      (runtime/)
 *   8. templates and the autotuner      (templates/registry.c, tune/)
 *   9. ahead of time                    (aot/)
 *  10. gemm, any shape                  (templates/gemm_api.c)
 *  11. plugins: a user's templates      (templates/registry.c)
 *
 * The IKBO operations built on it (the linear compression's C API, the broadcast-add
 * template) are in loom_ikbo.h.
 *
 * Every builder call is a macro that records the caller's __FILE__ and __LINE__, so an
 * error names the line of user code that built the bad op.  A builder call never fails
 * loudly: a mistake is recorded in the kernel and the call returns LOOM_NONE; once the
 * kernel holds an error, every later call that receives LOOM_NONE quietly returns
 * LOOM_NONE too (before that, a LOOM_NONE operand is itself reported).  loom_verify()
 * then reports the first cause of each chain.  A helper of your own that builds ops
 * can pass its caller's location with the `_at` forms: loom_add_at(here, k, a, b).
 *
 * The library never exits or aborts the process on a user's error.
 *
 * Threads (docs/errors.md, "Threads"):
 *   - a kernel is built (every builder call, loom_name, loom_kernel_set_cluster) by one
 *     thread at a time.  Once built, one kernel may be used from several threads at once
 *     by the calls that only read it: loom_verify, loom_kernel_errors, loom_print (the
 *     text is kept until the kernel changes), loom_compile_ptx, loom_prepare and
 *     loom_launch (each thread on its own runtime).  loom_kernel_destroy must come after
 *     every other thread is done with it.
 *   - a runtime, and its buffers, are used by one thread at a time (its last error, among
 *     other state, is one per runtime).  To compile on several threads, use
 *     loom_prepare_many; different runtimes may be used on different threads.
 *   - the autotuner (loom_tune) and the template APIs (loom_gemm_*, loom_ikbo_*) run on a
 *     runtime, so the same rule holds; the tuner compiles on its own threads inside one
 *     call.  Templates (loom_template_find) are constant and may be read from any thread.
 *   - a value handle (loom_val) belongs to the kernel that made it: another kernel's is
 *     refused, naming the op.
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
    LOOM_DTYPE_COUNT
} loom_dtype;

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

/* A run-time dimension: an i32 scalar argument whose value, given at each launch, is a
 * tensor dimension (a batch's candidates B, its users U, a row count), so one compiled
 * kernel serves every value.  Put it in a tensor argument's shape as LOOM_DIM(d) and use
 * d as any i32 scalar (loop bounds, masks, program-id arithmetic); the host computes the
 * grid from it.  A launch refuses a value outside [1, max] or not a multiple of
 * `multiple` (a hint the code generator may use: with multiple = 8, a row of 8 f16
 * elements stays one 16-byte access).  max (up to 2^31 - 1) sizes nothing in the code:
 * kernels that differ only in max compile to one module.  With row-major strides (no
 * strides given) only dim 0 may be run-time; with given strides any dim may (the strides
 * are static).  Accesses past the launch's value of a dim are masked or reported exactly
 * as past a static dim.  docs/dsl.md, "Run-time dimensions". */
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
 * dims of 1 stretch).  expand_dims inserts a dim of 1.  trans swaps a 2-D tile. */
#define loom_splat(k, v, shape) loom_splat_at(LOOM_HERE, k, v, shape)
#define loom_broadcast(k, v, shape) loom_broadcast_at(LOOM_HERE, k, v, shape)
#define loom_expand_dims(k, v, axis) loom_expand_dims_at(LOOM_HERE, k, v, axis)
#define loom_trans(k, v) loom_trans_at(LOOM_HERE, k, v)
loom_val loom_splat_at(loom_src at, loom_kernel *k, loom_val v, loom_shape shape);
loom_val loom_broadcast_at(loom_src at, loom_kernel *k, loom_val v, loom_shape shape);
loom_val loom_expand_dims_at(loom_src at, loom_kernel *k, loom_val v, int axis);
loom_val loom_trans_at(loom_src at, loom_kernel *k, loom_val v);

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

/* for (iv = lo; iv < hi; iv += step) with carried values.  lo, hi, step are i32 scalars
 * (step > 0).  Inside the body, loom_for_iv() is the induction variable and
 * loom_for_arg(i) the i-th carried value; loom_for_end() yields the next carried values
 * (same types as the initial ones); after it, loom_for_result(i) is the final value. */
typedef uint32_t loom_region_op; /* handle of a for or if op; 0 is none */
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

/* ---------------------------------------------------------------- 5b. Hopper machinery
 *
 * The level of Meta's TLX: the kernel author says where data lives (shared memory rings),
 * which warp group moves it (TMA into a ring slot, completing on an mbarrier) and which
 * computes (wgmma from shared memory or registers into f32 accumulators); loom makes each
 * statement one or a few instructions and checks what it can.  Everything here is also
 * defined by the interpreter, which runs each task as its own thread and reports deadlocks
 * and reads of ring slots that no wait has made visible.  See docs/dsl.md, "Hopper
 * machinery".
 *
 * Shared memory.  loom_smem_alloc() declares a ring of `slots` buffers, each a tile of
 * `shape` (rank 1 to 3) and dtype, with a swizzle mode (bytes: 0, 32, 64, 128; the
 * innermost dim times the element size must be a multiple of the swizzle span, and the
 * swizzle is what TMA and wgmma see).  The compiler places and aligns it (1024 bytes for
 * swizzled rings).  A ring's value is used through views: loom_smem_slot(ring, i) is
 * slot i (an i32 scalar; a ring of one slot can be used as a view directly);
 * loom_smem_trans(view) is the same memory seen as the transposed 2-D tile (a wgmma
 * operand stored the other way round).  Allocations go at the top of the kernel, before
 * any task. */
typedef enum loom_swizzle { LOOM_SWIZZLE_NONE = 0, LOOM_SWIZZLE_32 = 32, LOOM_SWIZZLE_64 = 64,
                            LOOM_SWIZZLE_128 = 128 } loom_swizzle;
#define loom_smem_alloc(k, dtype, shape, slots, swizzle) \
    loom_smem_alloc_at(LOOM_HERE, k, dtype, shape, slots, swizzle)
#define loom_smem_slot(k, ring, i) loom_smem_slot_at(LOOM_HERE, k, ring, i)
#define loom_smem_trans(k, view) loom_smem_trans_at(LOOM_HERE, k, view)
#define loom_smem_part(k, view, dim, start, size) loom_smem_part_at(LOOM_HERE, k, view, dim, start, size)
#define loom_smem_load(k, view) loom_smem_load_at(LOOM_HERE, k, view)
#define loom_smem_store(k, view, v) loom_smem_store_at(LOOM_HERE, k, view, v)
loom_val loom_smem_alloc_at(loom_src at, loom_kernel *k, loom_dtype dt, loom_shape shape, int slots,
                            loom_swizzle swizzle);
loom_val loom_smem_slot_at(loom_src at, loom_kernel *k, loom_val ring, loom_val i);
loom_val loom_smem_trans_at(loom_src at, loom_kernel *k, loom_val view);
/* A part of a 2-D view that is itself a plain tile in memory, so TMA can fill it (each CTA
 * of a cluster multicasting its part of a shared operand): along dim 1, `size` columns
 * from `start`, both multiples of the swizzle span (a 128-byte swizzled [64, 256] f16
 * tile has parts of 64, 128 or 192 columns); along dim 0, rows of a view whose rows are
 * at most one span, `start` a multiple of 8 when swizzled. */
loom_val loom_smem_part_at(loom_src at, loom_kernel *k, loom_val view, int dim, int64_t start, int64_t size);
/* Register tile <-> shared view (the tile has the view's shape and dtype). */
loom_val loom_smem_load_at(loom_src at, loom_kernel *k, loom_val view);
void loom_smem_store_at(loom_src at, loom_kernel *k, loom_val view, loom_val v);

/* Barriers.  loom_mbar_alloc() declares `count` mbarriers, each completing a phase when
 * `arrivals` arrivals have been made and every byte it expects has landed.  An arrival is
 * made by one task replica executing loom_mbar_arrive() or loom_mbar_expect() (the latter
 * also expects `bytes` more bytes of TMA traffic in this phase); the compiler checks that
 * the tasks arriving on a barrier array add up to `arrivals`.  loom_mbar_wait(bars, i,
 * phase) blocks until the phase of parity `phase` (an i32 0 or 1) of barrier i has
 * completed; a fresh barrier is in phase 0, so waiting on parity 1 passes at once (the
 * usual start of a producer waiting for empty slots).  For the k-th use (k = 0, 1, ...) of
 * an N-slot ring, loom_ring_slot() is k % N and loom_ring_phase() is (k / N) & 1.
 * Named barriers: loom_named_barrier(id, threads) blocks until `threads` threads (whole
 * task replicas, 32 per warp) have reached barrier id (0..7; each task replica also has
 * its own internal ones).  loom_named_barrier_arrive(id, threads) counts this task
 * replica's threads toward barrier id without waiting (a signal to the tasks that wait
 * there: one side arrives, the other waits, as producer and consumer warp groups hand
 * turns over).  loom_fence_async() orders this task's shared-memory writes
 * before later async-proxy reads (wgmma, TMA store) of them. */
#define loom_mbar_alloc(k, count, arrivals) loom_mbar_alloc_at(LOOM_HERE, k, count, arrivals)
#define loom_mbar_expect(k, bars, i, bytes) loom_mbar_expect_at(LOOM_HERE, k, bars, i, bytes)
#define loom_mbar_arrive(k, bars, i) loom_mbar_arrive_at(LOOM_HERE, k, bars, i)
#define loom_mbar_wait(k, bars, i, phase) loom_mbar_wait_at(LOOM_HERE, k, bars, i, phase)
#define loom_ring_slot(k, iter, n) loom_ring_slot_at(LOOM_HERE, k, iter, n)
#define loom_ring_phase(k, iter, n) loom_ring_phase_at(LOOM_HERE, k, iter, n)
#define loom_named_barrier(k, id, threads) loom_named_barrier_at(LOOM_HERE, k, id, threads)
#define loom_named_barrier_arrive(k, id, threads) loom_named_barrier_arrive_at(LOOM_HERE, k, id, threads)
#define loom_fence_async(k) loom_fence_async_at(LOOM_HERE, k)
loom_val loom_mbar_alloc_at(loom_src at, loom_kernel *k, int count, int arrivals);
void loom_mbar_expect_at(loom_src at, loom_kernel *k, loom_val bars, loom_val i, int64_t bytes);
void loom_mbar_arrive_at(loom_src at, loom_kernel *k, loom_val bars, loom_val i);
void loom_mbar_wait_at(loom_src at, loom_kernel *k, loom_val bars, loom_val i, loom_val phase);
loom_val loom_ring_slot_at(loom_src at, loom_kernel *k, loom_val iter, int n);
loom_val loom_ring_phase_at(loom_src at, loom_kernel *k, loom_val iter, int n);
void loom_named_barrier_at(loom_src at, loom_kernel *k, int id, int threads);
void loom_named_barrier_arrive_at(loom_src at, loom_kernel *k, int id, int threads);
void loom_fence_async_at(loom_src at, loom_kernel *k);

/* TMA.  loom_tma_load copies the box of global tensor t at element offsets offs (one per
 * tensor dim; the box is the view's shape, right-aligned to the tensor's dims, leading
 * dims of 1) into the view, asynchronously: it completes on barrier i of bars, counting
 * the whole box's bytes; elements outside the tensor read as zero.  loom_tma_store copies
 * a view to the tensor (elements outside it are skipped); loom_tma_store_wait(pending)
 * waits until at most `pending` of this task's stores still read shared memory.  The
 * tensor needs a 16-byte aligned base and strides that are multiples of 16 bytes (except
 * the innermost, which must be 1); a launch that breaks that is refused. */
#define loom_tma_load(k, t, offs, view, bars, i) loom_tma_load_at(LOOM_HERE, k, t, offs, view, bars, i)
#define loom_tma_store(k, t, offs, view) loom_tma_store_at(LOOM_HERE, k, t, offs, view)
#define loom_tma_store_wait(k, pending) loom_tma_store_wait_at(LOOM_HERE, k, pending)
void loom_tma_load_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs, loom_val view,
                      loom_val bars, loom_val i);
void loom_tma_store_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs, loom_val view);
void loom_tma_store_wait_at(loom_src at, loom_kernel *k, int pending);

/* Clusters.  loom_kernel_set_cluster(k, n) launches the kernel's programs in clusters of
 * n (2, 4 or 8) along grid x: programs x = c*n .. c*n+n-1 run at once on SMs of one GPC and
 * can reach each other's shared memory; the grid's x must be a multiple of n (a launch
 * refuses it otherwise).  loom_cluster_rank() is the program's rank in its cluster (an i32,
 * program_id(0) % n).  loom_tma_load_multicast is loom_tma_load delivering the box to the
 * same view in every CTA of the cluster, each completing on its own barrier i of bars:
 * when each of the n CTAs multicasts 1/n of a shared operand, every barrier sees the whole
 * operand's bytes, and the checker counts a multicast as n times its box.
 * loom_mbar_arrive_cluster(bars, i) arrives on barrier i in every CTA of the cluster (a
 * consumer releasing a ring slot that its peers' multicasts fill): a barrier array that
 * receives these counts n arrivals per arriving task replica.  The compiler synchronizes
 * the cluster after the barriers are initialised and before any CTA exits.
 * loom_smem_store_cluster(view, v, bars, i) writes the register tile v (the view's dtype
 * and shape; a scalar is splatted to it) into the same view of every CTA of the cluster,
 * asynchronously, and completes the written bytes on barrier i of bars in each of those
 * CTAs, as loom_tma_load_multicast completes its box's: each receiving CTA announces the
 * bytes with loom_mbar_expect on its own barrier (the checker counts the op as n times
 * its bytes), and reads the view only after a wait on that barrier (the interpreter
 * reports a read before it).  It is done once per task replica (one thread writes) and
 * is meant for a few scalars, such as the tile a dynamic scheduler's producer claimed
 * with loom_atomic_add, handed to every CTA of the cluster: the view holds at most 16
 * bytes, a whole number of 4-byte words (an i32 [1] to [4]).  Without clusters it writes
 * this CTA's view and completes on its barrier. */
#define loom_cluster_rank(k) loom_cluster_rank_at(LOOM_HERE, k)
#define loom_tma_load_multicast(k, t, offs, view, bars, i) \
    loom_tma_load_multicast_at(LOOM_HERE, k, t, offs, view, bars, i)
#define loom_mbar_arrive_cluster(k, bars, i) loom_mbar_arrive_cluster_at(LOOM_HERE, k, bars, i)
#define loom_smem_store_cluster(k, view, v, bars, i) loom_smem_store_cluster_at(LOOM_HERE, k, view, v, bars, i)
#define loom_kernel_set_cluster(k, n) loom_kernel_set_cluster_at(LOOM_HERE, k, n)
void loom_kernel_set_cluster_at(loom_src at, loom_kernel *k, int n);
int loom_kernel_cluster(const loom_kernel *k); /* 1 without clusters */
loom_val loom_cluster_rank_at(loom_src at, loom_kernel *k);
void loom_tma_load_multicast_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs, loom_val view,
                                loom_val bars, loom_val i);
void loom_mbar_arrive_cluster_at(loom_src at, loom_kernel *k, loom_val bars, loom_val i);
void loom_smem_store_cluster_at(loom_src at, loom_kernel *k, loom_val view, loom_val v, loom_val bars,
                                loom_val i);

/* Automatic warp specialization: the plain tile loop, Triton's way (docs/dsl.md, "Two
 * levels").  A kernel written without tasks -- a loop whose body loads f16/bf16 tiles of
 * its tensor arguments and feeds them to loom_dot, an epilogue after it -- compiles, with
 * this set, to the structure the explicit templates have: a producer warp group TMA-loads
 * the loop's tiles into a ring of `stages` slots, `consumers` warp groups (1 or 2; each
 * owns its share of the accumulator's rows) run the dots as wgmma out of the ring, and
 * the epilogue stays in their registers.  pingpong=1 (consumers=2) makes the two groups
 * replicas that take every other program of a CTA whole (64-row tiles; the loop's bounds
 * the same in every program), so one's epilogue or softmax runs beside the other's
 * wgmmas.  The kernel is persistent: one CTA an SM takes the programs of the grid you
 * launch in turn (the launch passes the grid; you launch as before).  The kernel's warps become
 * 4 * (1 + consumers).  The interpreter runs the kernel as written (loom_dot's f32 fma
 * order); the GPU's wgmma sums the products of a k step in another order, within the
 * dot's error model.  A kernel the passes cannot specialize is refused at compile with
 * the line and the reason; LOOM_DUMP_AFTER shows each pass (docs/env.md). */
#define loom_kernel_set_autows(k, consumers, stages, pingpong) \
    loom_kernel_set_autows_at(LOOM_HERE, k, consumers, stages, pingpong)
void loom_kernel_set_autows_at(loom_src at, loom_kernel *k, int consumers, int stages, int pingpong);

/* wgmma.  acc' = acc + a @ b issued asynchronously on the tensor cores: a is a shared
 * view [M, K] or a register tile [M, K]; b a shared view [K, N] (loom_smem_trans of an
 * [N, K] view is the usual K-major B); f16 or bf16 (the same for both); acc an f32 tile
 * [M, N] with M a multiple of 64 per warp group of the task (each warp group owns M/G
 * rows), N a multiple of 8 up to 256, K a multiple of 16.  A register tile is read when
 * the wgmma is issued; it is held in the A fragment's layout, which is the accumulator
 * layout of its shape, so an accumulator S [M, N] cast to f16/bf16 is the A of the next
 * wgmma with no data moved (attention's P @ V), and row reductions of an accumulator
 * broadcast back over its rows stay in registers too (see docs/dsl.md, "Hopper
 * machinery").
 * loom_wgmma_commit() closes the group of wgmmas issued since the last commit;
 * loom_wgmma_wait(pending, n, accs) waits until at most `pending` groups are in flight and
 * returns the accumulators (results 0..n-1 via loom_wgmma_result).  An accumulator may be
 * read by other ops only after a wait with pending = 0 (the verifier checks it). */
#define loom_wgmma(k, a, b, acc) loom_wgmma_at(LOOM_HERE, k, a, b, acc)
#define loom_wgmma_commit(k) loom_wgmma_commit_at(LOOM_HERE, k)
#define loom_wgmma_wait(k, pending, n, accs) loom_wgmma_wait_at(LOOM_HERE, k, pending, n, accs)
loom_val loom_wgmma_at(loom_src at, loom_kernel *k, loom_val a, loom_val b, loom_val acc);
void loom_wgmma_commit_at(loom_src at, loom_kernel *k);
loom_region_op loom_wgmma_wait_at(loom_src at, loom_kernel *k, int pending, int n, const loom_val *accs);
loom_val loom_wgmma_result(loom_kernel *k, loom_region_op wait, int i);

/* Warp-group tasks.  The kernel body can be split into tasks, like TLX's async_tasks:
 * each task runs on its own `warps` warps (a multiple of 4 where it issues wgmma),
 * repeated `replicas` times side by side (loom_task_replica() is 0..replicas-1), with a
 * register budget per thread (setmaxnreg, 24..256, a multiple of 8; 0: leave it).  The
 * kernel's num_warps must equal the sum of warps * replicas; the compiler checks the
 * budgets against the register file (64K per SM) and sets launch bounds so ptxas honours
 * them.  Tasks follow the allocations at the top of the kernel. */
#define loom_task_begin(k, warps, regs, replicas) loom_task_begin_at(LOOM_HERE, k, warps, regs, replicas)
#define loom_task_end(k, task) loom_task_end_at(LOOM_HERE, k, task)
#define loom_task_replica(k) loom_task_replica_at(LOOM_HERE, k)
loom_region_op loom_task_begin_at(loom_src at, loom_kernel *k, int warps, int regs, int replicas);
void loom_task_end_at(loom_src at, loom_kernel *k, loom_region_op task);
loom_val loom_task_replica_at(loom_src at, loom_kernel *k);

/* Flags in global memory: one program hands data to another inside a kernel.  The writer
 * stores its results, then loom_flag_add(flags, offs, v) adds v to the i32 element
 * flags[offs] with release semantics (every thread of the task replica, or of the
 * program outside tasks, has finished its earlier stores when the add is seen; it is
 * done once per replica).  A reader calls loom_flag_wait(flags, offs, target), which
 * returns when flags[offs] >= target with acquire semantics: the writer's stores are then
 * visible to every thread of the replica, to its loads and to its TMA loads (the wait
 * ends with a fence of the async proxy).  The flags are an argument declared LOOM_INOUT;
 * counting up across launches (target = launches * adds) saves clearing them.
 * A wait on another program needs that program to be running: a kernel with flag waits
 * is launched with at most one program per SM (persistent), and the launch refuses a
 * larger grid.  The interpreter runs such kernels' programs side by side as coroutines
 * and reports a wait that can never be met, with its line and the flag's value. */
#define loom_flag_add(k, flags, offs, v) loom_flag_add_at(LOOM_HERE, k, flags, offs, v)
#define loom_flag_wait(k, flags, offs, target) loom_flag_wait_at(LOOM_HERE, k, flags, offs, target)
void loom_flag_add_at(loom_src at, loom_kernel *k, loom_val flags, const loom_val *offs, loom_val v);
void loom_flag_wait_at(loom_src at, loom_kernel *k, loom_val flags, const loom_val *offs, loom_val target);

/* An atomic add in global memory, for work claimed from a counter (a dynamic tile
 * scheduler: a persistent kernel takes the next tile from the counter, so it progresses
 * even when not all of its programs are resident).  loom_atomic_add(t, offs, v) adds the
 * i32 scalar v to the element t[offs] of an i32 tensor declared LOOM_INOUT (offsets: one
 * i32/i64 scalar per dim, in bounds) and returns the element's OLD value as an i32
 * scalar.  It is done once per task replica (or per program outside tasks), relaxed at
 * GPU scope (it orders nothing else: publish data with loom_flag_add), and every thread
 * of the replica receives the same value, so loop bounds computed from it stay uniform.
 * Counters count up across launches (claim = old - launch * claims per launch) instead
 * of being cleared.  The interpreter runs the programs of a kernel that adds atomically
 * side by side (up to 1024 of them), each giving way to the next after every add, so
 * claims interleave as they would on the GPU. */
#define loom_atomic_add(k, t, offs, v) loom_atomic_add_at(LOOM_HERE, k, t, offs, v)
loom_val loom_atomic_add_at(loom_src at, loom_kernel *k, loom_val t, const loom_val *offs, loom_val v);

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

/* ---------------------------------------------------------------- 6b. what a kernel costs
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
 * Returns LOOM_OK, or the compile's error (in err): a kernel refused for its shared memory
 * still has its uses reported (what the refusal lists).  A kernel written the plain way
 * (docs/dsl.md, "What costs what") has no LOOM_COST_CONVERT at all. */
typedef enum loom_cost_kind {
    LOOM_COST_CONVERT, /* a layout conversion through scratch */
    LOOM_COST_SCRATCH, /* other scratch: a reduction across warps, a dot's staging, ... */
    LOOM_COST_SMEM,    /* a shared-memory allocation: ring slots or a staging tile */
    LOOM_COST_MBAR,    /* an array of mbarriers */
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
} loom_cost;

typedef void (*loom_explain_fn)(void *ctx, const loom_cost *cost);
loom_status loom_kernel_explain(loom_kernel *k, const char *arch, loom_explain_fn fn, void *ctx, char **text,
                                char *err, size_t errlen);

/* ---------------------------------------------------------------- 7. runtime */

typedef struct loom_runtime loom_runtime;
typedef struct loom_buffer loom_buffer;

typedef enum loom_target {
    LOOM_TARGET_AUTO,      /* the GPU if there is one, else the interpreter; LOOM_INTERPRET=1
                              forces the interpreter */
    LOOM_TARGET_INTERPRET, /* the CPU interpreter */
    LOOM_TARGET_GPU,       /* the GPU, or LOOM_ERR_NO_GPU */
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

/* ---------------------------------------------------------------- 8. templates */

/* A template builds one kernel per (shape, config).  Shapes and configs are lists of named
 * integer parameters (a dtype parameter holds a loom_dtype).  The registry lists every
 * template loom ships; loomc and the autotuner work from it. */
#define LOOM_MAX_PARAMS 16
/* The largest magnitude loom_params_parse takes (2^40, as for tensor dims): beyond it a
 * template's size arithmetic could overflow. */
#define LOOM_PARAM_MAX (INT64_C(1) << 40)
#define LOOM_MAX_CANDIDATES 16
typedef struct loom_param {
    const char *key;
    int64_t def;      /* default value */
    const char *doc;
    /* Config knobs only: the values the autotuner tries (ncand == 0: def alone).  The
     * configs it considers are every combination of the knobs' candidates. */
    int ncand;
    int64_t cand[LOOM_MAX_CANDIDATES];
    /* Shape parameters only: 1 when it shapes a check run's inputs, not the kernel (the
     * order of a mapping, say); loomc aot leaves it out of a launch's shape. */
    int inputs_only;
    /* Shape parameters only: 1 when the template's kernel takes it as a run-time dim (an
     * argument of loom_arg_dim named by the key, its max the built shape's value), so one
     * kernel serves every value up to that.  The tuner tunes it by bucket (the power of two
     * at or above it), loomc aot dispatches on that bucket, and the template's grid_rule
     * says how the grid follows it (docs/tuning.md, "Run-time dims and buckets"). */
    int runtime;
} loom_param;

/* A grid as a rule over a shape, so the host (loom, or a file of loomc aot) computes each
 * launch's grid from the request's run-time dims without calling the template:
 *   grid[d] = mult[d] * cdiv(c[d] + sum_i per[d][i] * shape[i], div[d]), at most cap[d]
 *             (cap[d] 0: no cap; div[d] and mult[d] at least 1). */
typedef struct loom_grid_rule {
    int64_t c[3], div[3], mult[3], cap[3];
    int64_t per[3][LOOM_MAX_PARAMS];
} loom_grid_rule;
/* The grid rule r gives at shape; non-zero when a dim is outside [1, 2^31 - 1] (x) or
 * [1, 65535] (y, z). */
int loom_grid_rule_eval(const loom_grid_rule *r, const int64_t *shape, int grid[3]);
/* The bucket of a run-time dim's value v: the power of two at or above it. */
int64_t loom_dim_bucket(int64_t v);

/* A template's fields.  Required (loom_template_validate refuses a template without them):
 *   name       a C identifier of at most 63 characters (loomc aot names C types after it),
 *              unique among the templates of a process
 *   build, grid, init, reference
 *   nshape, nconfig (0 to LOOM_MAX_PARAMS) and each parameter's key: a C identifier,
 *              unique in its list; a default of at most LOOM_PARAM_MAX in magnitude; ncand
 *              0 to LOOM_MAX_CANDIDATES (config knobs only); runtime and inputs_only on
 *              shape parameters only
 *   grid_rule  where a shape parameter is run-time (loom_param.runtime)
 * Optional (0 or NULL when not given): doc, each parameter's doc, atol and rtol (0: exact;
 * not negative), valid, cost, bucket, unchecked, bound, aot.  A template of a user's
 * plugin (section 11) is held to the same rules as a built-in. */
struct loom_aot_op;
typedef struct loom_template {
    const char *name;
    const char *doc;
    int nshape;
    loom_param shape[LOOM_MAX_PARAMS];
    int nconfig;
    loom_param config[LOOM_MAX_PARAMS];
    /* Build the kernel, or return NULL with the reason in err (a shape or config the
     * template cannot serve). */
    loom_kernel *(*build)(const int64_t *shape, const int64_t *config, char *err, size_t errlen);
    void (*grid)(const int64_t *shape, const int64_t *config, int grid[3]);
    /* The grid as a rule (above); required where a shape parameter is run-time, and then
     * grid must give what the rule gives. */
    void (*grid_rule)(const int64_t *shape, const int64_t *config, loom_grid_rule *rule);
    /* Fill the inputs for a check run: host[i] is the host copy of kernel argument i
     * (scalars: a pointer to the value), sized by loom_kernel_arg_info's min_bytes. */
    void (*init)(const int64_t *shape, void *const *host, uint64_t seed);
    /* Compute the expected outputs: ref[i] for each output argument i (NULL for inputs),
     * in the argument's dtype, from the inputs in host. */
    void (*reference)(const int64_t *shape, void *const *host, void *const *ref);
    /* An output element passes when |out - ref| <= atol + rtol * |ref|. */
    double atol, rtol;

    /* ---- autotuning (tune/); every field below is optional */
    /* Can `config` serve `shape` well enough to be worth timing?  Return 1, or 0 with the
     * reason in why (shared memory, registers, divisibility, alignment: whatever limits
     * the template).  NULL: every config the build accepts is a candidate. */
    int (*valid)(const int64_t *shape, const int64_t *config, char *why, size_t n);
    /* An estimate of the config's run time at shape (any unit; lower is faster).  The
     * tuner compiles and times candidates in this order, keeps the best `max_configs`
     * of them when asked to, and without a GPU falls back on the best of it when the
     * default config is not valid for the shape. */
    double (*cost)(const int64_t *shape, const int64_t *config);
    /* Write the representative of shape's bucket into bucket[0..nshape-1]: shapes with
     * the same representative share one tuned config in the cache.  NULL: exact shape. */
    void (*bucket)(const int64_t *shape, int64_t *bucket);

    /* Outputs a check leaves alone (bit i: argument i): a workspace whose every use shows
     * in the outputs that are checked, and whose elements alone the reference cannot
     * predict (0: every output is compared). */
    uint32_t unchecked;

    /* The error model (docs/checks.md): after reference() filled ref, write into bound[i]
     * (one double per element of output argument i; NULL for the other arguments and for
     * unchecked outputs) the largest |out - ref| a right kernel can give at that element,
     * derived from the computation with loom_f32_sum_error and loom_error_bound.  Every
     * check compares element by element against it.  NULL: atol + rtol * |ref|. */
    void (*bound)(const int64_t *shape, void *const *host, void *const *ref, double *const *bound);

    /* ---- ahead of time (aot/; section 9); optional */
    /* An operation of several kernels that a file of loomc aot offers beside the template's
     * launch function (loom_aot_op).  NULL: the template's kernel and its launch alone. */
    const struct loom_aot_op *aot;
} loom_template;

/* ---- the error model (docs/checks.md) */
/* The spacing of dtype dt's values at magnitude |x| (the subnormal spacing below the
 * smallest normal; 0 for integer types, which are exact). */
double loom_ulp(loom_dtype dt, double x);
/* The largest error of a sum of k exact terms accumulated in f32 in any order, whose
 * magnitudes sum to `magnitude`: gamma_k * magnitude, gamma_k = k u / (1 - k u) with
 * u = 2^-23 (an add may be off by a whole ulp: the tensor cores do not promise to round
 * to nearest).  0 for k <= 1; infinite for k >= 2^23. */
double loom_f32_sum_error(int64_t k, double magnitude);
/* The bound at an element whose reference, stored in dt, is ref, when a right kernel's
 * value before its own final rounding to dt is within err of the exact result: err plus
 * one ulp of dt (half for the kernel's rounding, half for the reference's), taken at the
 * largest magnitude either value can have. */
double loom_error_bound(loom_dtype dt, double ref, double err);

int loom_template_count(void);
const loom_template *loom_template_at(int i);
const loom_template *loom_template_find(const char *name);
/* 0 when t has every required field (above) and each is well formed; else -1 with a
 * message in err naming the template and the field ("template 'x': field 'build' is
 * NULL (required)").  Says nothing about names other templates hold (loom_plugin_load
 * checks those). */
int loom_template_validate(const loom_template *t, char *err, size_t errlen);
/* Parse "k=v,k=v" over the defaults of a parameter list into vals; dtype values may be
 * written by name (f16, bf16, f32, ...).  Unknown keys or bad values: non-zero, message
 * in err naming the key. */
int loom_params_parse(const loom_param *params, int n, const char *text, int64_t *vals, char *err,
                      size_t errlen);
/* A template made ready to launch: its kernel, its grid, and a buffer per tensor argument
 * holding random inputs (the template's init, from `seed`) with outputs poisoned (every
 * byte 0xff).  host[i] keeps the host copy of argument i (scalars: scalars[i]). */
typedef struct loom_instance {
    loom_kernel *kernel;
    int nargs, grid[3];
    loom_arg args[LOOM_MAX_ARGS];
    loom_buffer *buf[LOOM_MAX_ARGS];
    void *host[LOOM_MAX_ARGS];
    int64_t scalars[LOOM_MAX_ARGS];
    loom_arg_info info[LOOM_MAX_ARGS];
    size_t bytes; /* every tensor's extent: the traffic of one read or write of each */
} loom_instance;
/* Build and set up an instance; on failure the reason is in err and nothing is left
 * allocated. */
loom_status loom_instance_create(loom_runtime *rt, const loom_template *t, const int64_t *shape,
                                 const int64_t *config, uint64_t seed, loom_instance *out,
                                 char *err, size_t errlen);
void loom_instance_destroy(loom_instance *in);

/* Run template t at (shape, config) on runtime rt with random inputs and check every
 * output element against its reference and its error bound (t->bound, docs/checks.md);
 * returns LOOM_OK when all pass.  A summary line is written into report. */
loom_status loom_template_check(loom_runtime *rt, const loom_template *t, const int64_t *shape,
                                const int64_t *config, uint64_t seed, char *report, size_t n);

/* What an instance's outputs must be: for each checked output i (an output not in
 * t->unchecked), ref[i] its reference in its dtype and bound[i] the largest |out - ref| a
 * right kernel gives at each element (t->bound, else atol + rtol * |ref|). */
typedef struct loom_expected {
    void *ref[LOOM_MAX_ARGS];
    double *bound[LOOM_MAX_ARGS];
} loom_expected;
/* The reference and bounds at the instance's inputs (host copies); LOOM_ERR_NOMEM. */
loom_status loom_expected_create(const loom_template *t, const int64_t *shape, const loom_instance *in,
                                 loom_expected *out);
void loom_expected_destroy(loom_expected *e);
/* Compare host copies got[i] of the outputs with e, element by element: |got - ref| <=
 * bound, or both NaN.  Returns the number of elements outside their bound; report gets
 * a summary (the count, the worst |err| / bound, the first bad element). */
int64_t loom_expected_compare(const loom_template *t, const loom_instance *in, const loom_expected *e,
                              void *const *got, char *report, size_t n);

/* ---- the autotuner (tune/; docs/tuning.md)
 *
 * loom_tune(rt, t, shapes, n, opts, out) gives, for each shape, a kernel built with the
 * best config and ready to launch.  Each shape is looked up in the tuning cache (a JSON
 * file keyed by template, shape bucket, GPU and SM count, driver and loom version); on
 * a miss every candidate config is checked for validity, compiled on a thread pool,
 * run once against a reference, and timed (L2 flushed and inputs rotated between runs),
 * and the fastest correct one is stored.  Without a GPU (or with LOOM_TUNE=0) nothing is
 * timed: the default config is used (or, if the default cannot serve the shape, the
 * cost model's best valid config), and the note says so. */

/* What became of one candidate config. */
typedef enum loom_tune_verdict {
    LOOM_TUNE_TIMED = 0,      /* correct and timed: ms holds its median */
    LOOM_TUNE_INVALID,        /* rejected by the template's valid(): reason says why */
    LOOM_TUNE_REFUSED,        /* the build refused it or it failed verification */
    LOOM_TUNE_COMPILE_FAILED, /* code generation, linking or loading failed */
    LOOM_TUNE_LAUNCH_FAILED,  /* the launch failed */
    LOOM_TUNE_WRONG,          /* its output differs from the reference beyond tolerance */
    LOOM_TUNE_SKIPPED,        /* beyond opts.max_configs (in cost order) */
} loom_tune_verdict;
const char *loom_tune_verdict_name(loom_tune_verdict v);

typedef struct loom_tune_result {
    int64_t config[LOOM_MAX_PARAMS];
    loom_tune_verdict verdict;
    double ms;    /* TIMED only: its final time if a finalist, else its first-pass time */
    double cost;  /* the cost model's estimate (0 without one) */
    char reason[200];
} loom_tune_result;

/* Where a shape's config came from. */
typedef enum loom_tune_source {
    LOOM_TUNE_NONE = 0,   /* nothing usable: status and note say why */
    LOOM_TUNE_TUNED,      /* timed now */
    LOOM_TUNE_CACHED,     /* found in the tuning cache */
    LOOM_TUNE_DEFAULT,    /* not tuned, by choice or for want of a GPU (LOOM_TUNE=0, the
                             interpreter): the default config; note says */
    LOOM_TUNE_FELL_BACK,  /* tuning ran on the GPU and failed (no candidate ran correctly, or
                             none could be set up): the default config, note says why, and
                             loom_tune returns LOOM_ERR_NOT_TUNED */
} loom_tune_source;

typedef struct loom_tuned {
    const loom_template *t;
    int64_t shape[LOOM_MAX_PARAMS];
    int64_t config[LOOM_MAX_PARAMS];
    loom_kernel *kernel;     /* built with config, verified, compiled and loaded (GPU) */
    int grid[3];
    loom_tune_source source;
    loom_status status;      /* LOOM_OK when kernel is ready */
    double ms;               /* the config's time (finalists' pass) when timed now or cached, else 0 */
    double tune_ms;          /* wall time spent on this shape */
    double compile_ms;       /* of which: compiling the candidates (on the pool) */
    double setup_ms;         /* making inputs and the reference (overlapping the compile) */
    double measure_ms;       /* checking and timing them (overlapping the compile) */
    int ncand, nvalid, ntimed; /* combinations, valid ones, timed correct ones */
    int nresults;            /* every candidate's fate (when tuned now) */
    loom_tune_result *results;
    char note[512];
} loom_tuned;

typedef struct loom_tune_opts {
    int force;        /* re-tune even when the cache has the shape (or LOOM_TUNE_FORCE=1) */
    int max_configs;  /* time at most this many valid configs, the cost model's best first;
                         0: all */
    int threads;      /* compile threads; 0: LOOM_TUNE_THREADS, else one per core */
    int warmup, reps; /* rounds of each first-pass group; 0: 1 and 5 (docs/tuning.md) */
    int quiet;        /* 0: a progress bar and a summary table on stderr when it is a
                         terminal; 1: neither; 2: the progress bar only (the caller prints
                         the table itself with loom_tune_print) */
    int verbose;      /* 1: print every config's fate and time (or LOOM_TUNE_VERBOSE=1) */
    uint64_t seed;    /* inputs of the correctness check; 0: 1 */
} loom_tune_opts;

/* Time any GPU work on rt -- a sequence of launches, say a whole IKBO stage: run work
 * `warmup` times, then `reps` times, each run after an untimed write of twice the L2 so
 * no run finds its inputs in cache; the median in ms.  work returns LOOM_OK or its
 * failure (which stops the timing).  LOOM_ERR_NO_GPU on the interpreter. */
loom_status loom_time_work(loom_runtime *rt, loom_status (*work)(void *ctx), void *ctx, int warmup, int reps,
                           double *median_ms);


/* Time a launch the way the tuner does: after a first (untimed) launch and `warmup` runs,
 * `reps` runs each preceded by an L2 flush (a buffer twice the L2 size is written,
 * outside the timed window); returns the median in ms.  GPU only (LOOM_ERR_NO_GPU). */
loom_status loom_time_launch_flushed(loom_runtime *rt, loom_kernel *k, const int grid[3],
                                     const loom_arg *args, int nargs, int warmup, int reps,
                                     double *median_ms);

/* Tune template t for nshapes shapes: shapes[i * t->nshape + j] is parameter j of shape i.
 * out[i] (nshapes of them) receives each result; release them with loom_tuned_release.
 * Returns LOOM_OK when every shape has a ready kernel that was tuned (or cached, or not
 * to be tuned: no GPU, LOOM_TUNE=0); LOOM_ERR_NOT_TUNED when every shape has a ready
 * kernel but the tuning of one fell back on the default config; else the first failure
 * (each out[i].note says what happened).  opts may be NULL. */
loom_status loom_tune(loom_runtime *rt, const loom_template *t, const int64_t *shapes, int nshapes,
                      const loom_tune_opts *opts, loom_tuned *out);
void loom_tuned_release(loom_tuned *r, int n);
/* The summary table (one line per shape; with every_config, each candidate too). */
void loom_tune_print(FILE *f, const loom_tuned *r, int n, int every_config);
/* "k=v,k=v" of a config (or shape) of template t's parameter list. */
void loom_params_format(const loom_param *params, int n, const int64_t *vals, char *buf, size_t len);

/* ---------------------------------------------------------------- 9. ahead of time
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

/* ---------------------------------------------------------------- 10. gemm, any shape
 * (templates/gemm_api.c)  C[b] = A[b] @ B[b], row-major and contiguous: A [M,K] (shared by
 * the batch) or [batch,M,K], B [batch,K,N], C [batch,M,N]; f16 or bf16 in, f16, bf16 or
 * f32 out, f32 accumulation; any M, N, K >= 1.  TMA needs rows of A and B 16-byte
 * aligned: where K (or N) is not a multiple of 8, prepare makes a padded copy of A (or B)
 * once, and every run first copies the operand into it (a kernel of its own, about one
 * read and one write of the operand), then runs the gemm template on it.  config NULL:
 * the config loom_tune picks at the shape (cached like any tuning); else "k=v,..." over
 * the gemm template's defaults (tmastore=0 when N is not a multiple of 8).
 *
 * M and batch are run-time: the shape given to prepare holds their maxima, and
 * loom_gemm_run_at runs one request at any M from 1 to that M and any batch from 1 to
 * that batch with the kernel prepare compiled (nothing is built or compiled per request).
 * N, K, the dtypes and a_shared are fixed at prepare.  In a batch, the products keep the
 * prepared layout: product b of C, and of A when A is not shared, starts at row b * M
 * (the prepared M), and a request at a smaller M reads and writes the first rows of each
 * (at batch 1, or at the prepared M, the buffers are plainly contiguous). */
typedef struct loom_gemm_shape {
    int64_t M, N, K, batch;  /* M and batch: the most a run takes.  batch 1: A, B, C are [M,K], [K,N], [M,N] */
    loom_dtype dtype, odtype;
    int a_shared;            /* batch > 1: 1 when one A [M,K] serves every product */
} loom_gemm_shape;
typedef struct loom_gemm loom_gemm;
loom_status loom_gemm_prepare(loom_runtime *rt, const loom_gemm_shape *s, const char *config, loom_gemm **out);
/* A run at the prepared shape (M and batch at their maxima).  Buffers too small for the
 * shape, or NULL, are refused with a message naming them. */
loom_status loom_gemm_run(loom_gemm *p, const loom_buffer *a, const loom_buffer *b, loom_buffer *c);
/* A run at a request's M and batch (1 to the prepared M and batch; other values are
 * refused with a message naming M or batch).  The buffers need only what the request
 * reads and writes: B batch*K*N elements, C ((batch-1)*M_max + M)*N (M*N at batch 1),
 * A the same rows of K when batched (a_shared 0), else M*K; nothing past them is touched. */
loom_status loom_gemm_run_at(loom_gemm *p, int64_t M, int64_t batch, const loom_buffer *a, const loom_buffer *b,
                             loom_buffer *c);
/* What a run launches: the config and the copies ("gemm BM=..., A padded to lda=..."). */
const char *loom_gemm_describe(const loom_gemm *p);
void loom_gemm_destroy(loom_gemm *p);

/* ---------------------------------------------------------------- 11. plugins
 * (templates/registry.c; docs/kernels.md)  A shared object of the user's that adds
 * templates to the registry, so that they work everywhere a built-in does: loomc's every
 * command (`loomc CMD --plugin libmine.so NAME ...`), loom_template_find, the tuner, loomc
 * aot.  A plugin has one entry point, written with LOOM_PLUGIN_INIT:
 *
 *     LOOM_PLUGIN_INIT(p)
 *     {
 *         return loom_plugin_register(p, &my_template);
 *     }
 *
 * The macro exports loom_plugin_init and, beside it, the version of loom.h the plugin was
 * compiled with (loom_plugin_version): a loom of another version refuses the plugin
 * before calling it, since loom_template's layout may differ.  A plugin uses loom from
 * the program that loads it (link it with loom::loom, or leave loom's symbols undefined). */
typedef struct loom_plugin loom_plugin;
#ifdef __cplusplus
#define LOOM_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))
#define LOOM_PLUGIN_EXTERN LOOM_PLUGIN_EXPORT
#else
#define LOOM_PLUGIN_EXPORT __attribute__((visibility("default")))
#define LOOM_PLUGIN_EXTERN LOOM_PLUGIN_EXPORT extern
#endif
#define LOOM_PLUGIN_INIT(p)                                                    \
    LOOM_PLUGIN_EXTERN const char loom_plugin_version[];                       \
    LOOM_PLUGIN_EXPORT const char loom_plugin_version[] = LOOM_VERSION;        \
    LOOM_PLUGIN_EXPORT int loom_plugin_init(loom_plugin *p);                   \
    LOOM_PLUGIN_EXPORT int loom_plugin_init(loom_plugin *p)
/* Called by a plugin's loom_plugin_init: add template t (which must live as long as the
 * process: a static object of the plugin).  Returns 0, or -1 when t is refused (a required
 * field missing or malformed: loom_template_validate; a name another template holds, a
 * built-in, one of an earlier plugin or of this one): loom_plugin_load then fails with
 * that message, and no template of the plugin is added. */
int loom_plugin_register(loom_plugin *p, const loom_template *t);
/* Load the plugin at path (dlopen; a path without '/' that names a file is taken from the
 * current directory, else dlopen's search), check its version, call its loom_plugin_init
 * and add every template it registered to the registry, after the built-ins and the
 * plugins loaded before.  LOOM_OK, or LOOM_ERR_INVALID with the reason in err (dlopen's
 * message, a missing entry point, another version, a refused template: the plugin is
 * unloaded and nothing is added).  *count (may be NULL) receives how many templates were
 * added.  A loaded plugin stays loaded.  Load plugins before other threads read the
 * registry. */
loom_status loom_plugin_load(const char *path, int *count, char *err, size_t errlen);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* LOOM_H */
