/*
 * test_codegen.c -- the code generator: every op and the example kernels compile to PTX
 * that ptxas accepts without spills.
 *
 * Each test builds a kernel with the DSL, compiles it with cg_compile for sm_90a
 * and sm_80, checks the PTX names the entry, and assembles it with `ptxas -v` (found
 * through $PTXAS, /usr/local/cuda/bin/ptxas or PATH; the ptxas step is skipped when
 * there is none).  Kernel-specific checks look at the PTX text: 16-byte vector
 * accesses in the broadcast-add, shuffles in the row softmax.  No GPU is needed; the
 * GPU tests (tests/test_gpu.c) check the numbers.
 *
 * The fold tests run the interpreter before and after folding and compare.
 */
#include "testutil.h"

#include "loom_ikbo.h"

#include "cg.h" /* the fold test runs cg_fold itself */
#include "ir.h"

#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- helpers */

static char *compile(loom_kernel *k, const char *arch, size_t *smem)
{
    char err[4096];
    cg_result r;
    loom_status st = cg_compile(k, arch, &r, err, sizeof err);
    char *ptx = r.ptx;
    size_t sm = r.smem_bytes;
    cr_assert_eq(st, LOOM_OK, "cg_compile(%s, %s): %s: %s", loom_kernel_name(k), arch, loom_status_name(st), err);
    cr_assert(ptx);
    char entry[256];
    snprintf(entry, sizeof entry, ".entry %s", loom_kernel_name(k));
    cr_assert(strstr(ptx, entry), "PTX has no '%s'", entry);
    if (smem)
        *smem = sm;
    return ptx;
}

/* Compile for sm_90a and sm_80 and assemble both; returns the sm_90a PTX (caller frees). */
static char *check_kernel(loom_kernel *k)
{
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    char *ptx80 = compile(k, "sm_80", NULL);
    t_ptxas_ok(ptx80, "sm_80", loom_kernel_name(k));
    free(ptx80);
    char *ptx = compile(k, "sm_90a", NULL);
    t_ptxas_ok(ptx, "sm_90a", loom_kernel_name(k));
    return ptx;
}

static void check_and_free(loom_kernel *k)
{
    free(check_kernel(k));
    loom_kernel_destroy(k);
}

static loom_val ci(loom_kernel *k, int64_t v) { return loom_const_i(k, LOOM_I32, v); }

/* ---------------------------------------------------------------- kernels of the examples */

static loom_kernel *vector_add(int64_t n, int block, loom_dtype dt, int masked)
{
    loom_kernel *k = loom_kernel_create("vector_add", 4);
    loom_val x = loom_arg_tensor(k, "x", dt, LOOM_SHAPE1(n), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", dt, LOOM_SHAPE1(n), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "out", dt, LOOM_SHAPE1(n), LOOM_OUT);
    loom_val off = loom_mul(k, loom_program_id(k, 0), ci(k, block));
    loom_val mask = LOOM_NONE;
    if (masked) {
        loom_val idx = loom_add(k, loom_splat(k, off, LOOM_SHAPE1(block)), loom_arange(k, 0, block));
        mask = loom_cmp(k, LOOM_LT, idx, ci(k, n));
    }
    loom_val a = loom_load(k, x, &off, LOOM_SHAPE1(block), mask, 0.0);
    loom_val b = loom_load(k, y, &off, LOOM_SHAPE1(block), mask, 0.0);
    loom_store(k, o, &off, loom_add(k, a, b), mask);
    return k;
}

static loom_kernel *row_softmax(int64_t r, int64_t n, int br, int bn, int warps)
{
    loom_kernel *k = loom_kernel_create("row_softmax", warps);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(r, n), LOOM_IN);
    loom_val out = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE2(r, n), LOOM_OUT);
    loom_val offs[2] = {loom_mul(k, loom_program_id(k, 0), ci(k, br)), ci(k, 0)};
    loom_val v = loom_load(k, x, offs, LOOM_SHAPE2(br, bn), LOOM_NONE, -INFINITY);
    loom_val mx = loom_broadcast(k, loom_expand_dims(k, loom_reduce_max(k, v, 1), 1), LOOM_SHAPE2(br, bn));
    loom_val e = loom_exp2(k, loom_mul(k, loom_sub(k, v, mx), loom_const_f(k, LOOM_F32, 1.4426950408889634)));
    loom_val sum = loom_broadcast(k, loom_expand_dims(k, loom_reduce_sum(k, e, 1), 1), LOOM_SHAPE2(br, bn));
    loom_store(k, out, offs, loom_div(k, e, sum), LOOM_NONE);
    return k;
}

static loom_kernel *matmul(int64_t m, int64_t n, int64_t kk, int bm, int bn, int bk, loom_dtype dt, int masked)
{
    loom_kernel *k = loom_kernel_create("matmul", 4);
    loom_val a = loom_arg_tensor(k, "a", dt, LOOM_SHAPE2(m, kk), LOOM_IN);
    loom_val b = loom_arg_tensor(k, "b", dt, LOOM_SHAPE2(kk, n), LOOM_IN);
    loom_val c = loom_arg_tensor(k, "c", LOOM_F32, LOOM_SHAPE2(m, n), LOOM_OUT);
    loom_val m0 = loom_mul(k, loom_program_id(k, 0), ci(k, bm));
    loom_val n0 = loom_mul(k, loom_program_id(k, 1), ci(k, bn));
    loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0.0), LOOM_SHAPE2(bm, bn));
    loom_region_op loop = loom_for_begin(k, ci(k, 0), ci(k, kk), ci(k, bk), 1, &acc0);
    loom_val k0 = loom_for_iv(k, loop);
    loom_val ma = LOOM_NONE, mb = LOOM_NONE;
    if (masked) { /* explicit K mask on top of the bounds masks */
        loom_val kr = loom_add(k, loom_splat(k, k0, LOOM_SHAPE1(bk)), loom_arange(k, 0, bk));
        loom_val kin = loom_cmp(k, LOOM_LT, kr, ci(k, kk));
        ma = loom_broadcast(k, loom_expand_dims(k, kin, 0), LOOM_SHAPE2(bm, bk));
        mb = loom_broadcast(k, loom_expand_dims(k, kin, 1), LOOM_SHAPE2(bk, bn));
    }
    loom_val ta = loom_load(k, a, ((loom_val[]){m0, k0}), LOOM_SHAPE2(bm, bk), ma, 0.0);
    loom_val tb = loom_load(k, b, ((loom_val[]){k0, n0}), LOOM_SHAPE2(bk, bn), mb, 0.0);
    loom_val acc = loom_dot(k, ta, tb, loom_for_arg(k, loop, 0));
    loom_for_end(k, loop, 1, &acc);
    loom_store(k, c, ((loom_val[]){m0, n0}), loom_for_result(k, loop, 0), LOOM_NONE);
    return k;
}

Test(codegen, broadcast_add_f32_vectorized)
{
    tpl_broadcast_add_shape s = {.B = 8, .U = 2, .M = 64, .N = 256, .dtype = LOOM_F32};
    loom_kernel *k = tpl_broadcast_add(&s, 32, 128, 4);
    char *ptx = check_kernel(k);
    cr_assert(strstr(ptx, "ld.global.nc.v4.b32"), "no 16-byte loads:\n%s", ptx);
    cr_assert(strstr(ptx, "st.global.v4.b32"), "no 16-byte stores:\n%s", ptx);
    free(ptx);
    loom_kernel_destroy(k);
}

Test(codegen, broadcast_add_f16_vectorized)
{
    tpl_broadcast_add_shape s = {.B = 4, .U = 3, .M = 40, .N = 128, .dtype = LOOM_F16};
    loom_kernel *k = tpl_broadcast_add(&s, 16, 64, 4);
    char *ptx = check_kernel(k);
    cr_assert(strstr(ptx, "ld.global.nc.v4.b32"), "no 16-byte loads:\n%s", ptx);
    cr_assert(strstr(ptx, "st.global.v4.b32"), "no 16-byte stores:\n%s", ptx);
    free(ptx);
    loom_kernel_destroy(k);
}

Test(codegen, broadcast_add_unaligned_n_falls_back)
{
    /* N = 100 is not a multiple of 8 f16 elements: the rows are not 16-byte aligned */
    tpl_broadcast_add_shape s = {.B = 2, .U = 1, .M = 8, .N = 100, .dtype = LOOM_F16};
    loom_kernel *k = tpl_broadcast_add(&s, 8, 64, 2);
    char *ptx = check_kernel(k);
    cr_assert(!strstr(ptx, ".v4.b32"), "16-byte access where rows are not aligned:\n%s", ptx);
    free(ptx);
    loom_kernel_destroy(k);
}

Test(codegen, vector_add)
{
    check_and_free(vector_add(100000, 1024, LOOM_F32, 0));
    check_and_free(vector_add(1000, 256, LOOM_F32, 1));
    check_and_free(vector_add(4096, 512, LOOM_F16, 0));
    check_and_free(vector_add(4096, 512, LOOM_BF16, 0));
}

Test(codegen, row_softmax_uses_shuffles)
{
    loom_kernel *k = row_softmax(100, 1000, 2, 1024, 4);
    char *ptx = check_kernel(k);
    cr_assert(strstr(ptx, "shfl.sync.bfly"), "no warp shuffles:\n%s", ptx);
    cr_assert(strstr(ptx, "max.NaN.f32"), "max does not propagate NaN:\n%s", ptx);
    free(ptx);
    loom_kernel_destroy(k);
    /* one row across all warps: the reduction crosses warps through shared memory */
    k = row_softmax(64, 2048, 1, 2048, 8);
    size_t smem = 0;
    ptx = compile(k, "sm_90a", &smem);
    t_ptxas_ok(ptx, "sm_90a", "row_softmax");
    cr_assert_gt(smem, 0);
    cr_assert(strstr(ptx, "bar.sync"));
    free(ptx);
    loom_kernel_destroy(k);
}

Test(codegen, matmul_dot_in_loop)
{
    check_and_free(matmul(256, 256, 256, 64, 64, 32, LOOM_F16, 0));
    check_and_free(matmul(100, 72, 50, 32, 32, 16, LOOM_F16, 1));
    check_and_free(matmul(64, 64, 64, 32, 32, 16, LOOM_F32, 0));
    check_and_free(matmul(64, 64, 64, 32, 32, 16, LOOM_BF16, 1));
}

Test(codegen, cold_compile_time)
{
    struct {
        const char *name;
        loom_kernel *k;
    } ks[] = {
        {"broadcast_add", tpl_broadcast_add(&(tpl_broadcast_add_shape){8, 2, 64, 256, LOOM_F16}, 32, 128, 4)},
        {"vector_add", vector_add(1 << 20, 1024, LOOM_F32, 1)},
        {"row_softmax", row_softmax(512, 1000, 2, 1024, 4)},
        {"matmul", matmul(512, 512, 512, 64, 64, 32, LOOM_F16, 1)},
    };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        struct timespec t0, t1;
        char err[1024];
        cg_result r;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        loom_status st = cg_compile(ks[i].k, "sm_90a", &r, err, sizeof err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        char *ptx = r.ptx;
        size_t smem = r.smem_bytes;
        cr_assert_eq(st, LOOM_OK, "%s", err);
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        printf("codegen: %-14s builder IR -> PTX %7.2f ms (%zu bytes of PTX, %zu bytes smem)\n", ks[i].name, ms,
               strlen(ptx), smem);
        free(ptx);
        loom_kernel_destroy(ks[i].k);
    }
}

/* ---------------------------------------------------------------- every op */

/* Elementwise float ops on one dtype; every result is stored. */
static loom_kernel *float_ops_x(loom_dtype dt, int64_t r, int64_t c, int exact)
{
    loom_kernel *k = loom_kernel_create("float_ops", 4);
    loom_val x = loom_arg_tensor(k, "x", dt, LOOM_SHAPE2(r, c), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", dt, LOOM_SHAPE2(r, c), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", dt, LOOM_SHAPE3(16, r, c), LOOM_OUT);
    loom_val s = loom_arg_scalar(k, "s", LOOM_F32);
    loom_val z = ci(k, 0);
    loom_val a = loom_load(k, x, ((loom_val[]){z, z}), LOOM_SHAPE2(r, c), LOOM_NONE, 0);
    loom_val b = loom_load(k, y, ((loom_val[]){z, z}), LOOM_SHAPE2(r, c), LOOM_NONE, 1);
    loom_val sc = loom_cast(k, s, dt);
    loom_val res[16] = {
        loom_add(k, a, b), loom_sub(k, a, b), loom_mul(k, a, sc), loom_div(k, a, b),
        loom_min(k, a, b), loom_max(k, a, b), loom_fma(k, a, b, a), loom_neg(k, a),
        loom_abs(k, a),
        exact ? loom_add(k, a, a) : loom_exp2(k, a),
        exact ? loom_sub(k, b, a) : loom_log2(k, b),
        exact ? loom_mul(k, b, b) : loom_rsqrt(k, b),
        loom_select(k, loom_cmp(k, LOOM_LT, a, b), a, b),
        loom_select(k, loom_not(k, loom_cmp(k, LOOM_NE, a, b)), a, sc),
        loom_cast(k, loom_cast(k, a, LOOM_I32), dt),
        loom_cast(k, loom_cast(k, loom_cast(k, a, LOOM_I64), LOOM_F32), dt),
    };
    for (int i = 0; i < 16; i++)
        loom_store(k, o, ((loom_val[]){ci(k, i), z, z}), res[i], LOOM_NONE);
    return k;
}

static loom_kernel *float_ops(loom_dtype dt, int64_t r, int64_t c) { return float_ops_x(dt, r, c, 0); }

OP_COVERED(add)
OP_COVERED(sub)
OP_COVERED(mul)
OP_COVERED(div)
OP_COVERED(min)
OP_COVERED(max)
OP_COVERED(fma)
OP_COVERED(neg)
OP_COVERED(abs)
OP_COVERED(exp2)
OP_COVERED(log2)
OP_COVERED(rsqrt)
OP_COVERED(cmp)
OP_COVERED(select)
OP_COVERED(not)
OP_COVERED(cast)
Test(codegen, float_elementwise)
{
    check_and_free(float_ops(LOOM_F32, 16, 64));
    check_and_free(float_ops(LOOM_F16, 8, 64));
    check_and_free(float_ops(LOOM_BF16, 8, 32));
    check_and_free(float_ops(LOOM_F32, 3, 10)); /* padded, unvectorized */
}

/* A bf16 result is rounded by the hardware (cvt.rn.bf16.f32; cvt.rn.bf16x2.f32 where a pair
 * is stored), as f16's: not by integer arithmetic and a NaN test (8 instructions an element,
 * which spilled the bf16 LCE's consumers).  Bit for bit the interpreter's rounding on the
 * GPU: codegen_gpu/float_ops_exact. */
Test(codegen, bf16_rounding_is_the_hardware_cvt)
{
    loom_kernel *k = float_ops(LOOM_BF16, 8, 32), *k16 = float_ops(LOOM_F16, 8, 32);
    char *ptx = check_kernel(k), *ptx16 = check_kernel(k16);
    cr_expect_gt(t_count(ptx, "cvt.rn.bf16"), 0, "no cvt.rn.bf16 in the PTX");
    /* the NaN tests of the float-to-integer casts (NaN gives 0), no more than f16 has */
    cr_expect_eq(t_count(ptx, "setp.nan"), t_count(ptx16, "setp.nan"), "bf16 rounded in software: %d NaN tests, f16 %d",
                 t_count(ptx, "setp.nan"), t_count(ptx16, "setp.nan"));
    free(ptx), free(ptx16);
    loom_kernel_destroy(k), loom_kernel_destroy(k16);
}

static loom_kernel *int_ops(loom_dtype dt)
{
    loom_kernel *k = loom_kernel_create("int_ops", 2);
    loom_val x = loom_arg_tensor(k, "x", dt, LOOM_SHAPE1(256), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", dt, LOOM_SHAPE1(256), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", dt, LOOM_SHAPE2(16, 256), LOOM_OUT);
    loom_val ob = loom_arg_tensor(k, "ob", LOOM_I1, LOOM_SHAPE2(2, 256), LOOM_OUT);
    loom_val n = loom_arg_scalar(k, "n", dt);
    loom_val z = ci(k, 0);
    loom_val a = loom_load(k, x, &z, LOOM_SHAPE1(256), LOOM_NONE, 0);
    loom_val b = loom_load(k, y, &z, LOOM_SHAPE1(256), LOOM_NONE, 1);
    loom_val lt = loom_cmp(k, LOOM_LT, a, b);
    loom_val res[16] = {
        loom_add(k, a, b), loom_sub(k, a, n), loom_mul(k, a, b), loom_div(k, a, b),
        loom_rem(k, a, b), loom_min(k, a, b), loom_max(k, a, b), loom_and(k, a, b),
        loom_or(k, a, b), loom_neg(k, a), loom_abs(k, a), loom_select(k, lt, a, b),
        loom_cast(k, loom_cast(k, a, LOOM_F32), dt), loom_cast(k, loom_cast(k, a, dt == LOOM_I32 ? LOOM_I64 : LOOM_I32), dt),
        loom_cast(k, lt, dt), loom_cast(k, loom_cast(k, a, LOOM_F16), dt),
    };
    for (int i = 0; i < 16; i++)
        loom_store(k, o, ((loom_val[]){ci(k, i), z}), res[i], LOOM_NONE);
    loom_val bits = loom_or(k, loom_and(k, lt, loom_cmp(k, LOOM_GE, a, n)), loom_not(k, loom_cast(k, a, LOOM_I1)));
    loom_store(k, ob, ((loom_val[]){z, z}), bits, LOOM_NONE);
    loom_store(k, ob, ((loom_val[]){ci(k, 1), z}), loom_cmp(k, LOOM_EQ, lt, loom_cmp(k, LOOM_LE, a, b)), LOOM_NONE);
    return k;
}

OP_COVERED(rem)
OP_COVERED(and)
OP_COVERED(or)
Test(codegen, int_elementwise)
{
    check_and_free(int_ops(LOOM_I32));
    check_and_free(int_ops(LOOM_I64));
}

OP_COVERED(program_id)
OP_COVERED(num_programs)
OP_COVERED(const)
OP_COVERED(arange)
OP_COVERED(splat)
OP_COVERED(broadcast)
OP_COVERED(expand_dims)
OP_COVERED(trans)
static loom_kernel *shape_ops(void)
{
    loom_kernel *k = loom_kernel_create("shapes", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(64, 32), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE3(8, 64, 32), LOOM_OUT);
    loom_val of = loom_arg_tensor(k, "of", LOOM_F32, LOOM_SHAPE3(4, 32, 64), LOOM_OUT);
    loom_val z = ci(k, 0);
    loom_val pid = loom_add(k, loom_program_id(k, 0), loom_mul(k, loom_program_id(k, 1), loom_num_programs(k, 2)));
    loom_val np = loom_num_programs(k, 0);
    loom_val row = loom_expand_dims(k, loom_arange(k, 0, 32), 0);                  /* [1,32] */
    loom_val col = loom_expand_dims(k, loom_arange(k, 5, 69), 1);                  /* [64,1] */
    loom_val grid = loom_add(k, loom_broadcast(k, row, LOOM_SHAPE2(64, 32)), loom_broadcast(k, col, LOOM_SHAPE2(64, 32)));
    loom_store(k, o, ((loom_val[]){z, z, z}), grid, LOOM_NONE);
    loom_store(k, o, ((loom_val[]){ci(k, 1), z, z}), loom_splat(k, loom_mul(k, pid, np), LOOM_SHAPE2(64, 32)), LOOM_NONE);
    loom_val t = loom_load(k, x, ((loom_val[]){z, z}), LOOM_SHAPE2(64, 32), LOOM_NONE, 0);
    loom_store(k, of, ((loom_val[]){z, z, z}), loom_trans(k, t), LOOM_NONE);
    /* a loaded tile with a broadcast of a loaded row: the row needs no conversion */
    loom_val r0 = loom_load(k, x, ((loom_val[]){ci(k, 3), z}), LOOM_SHAPE1(32), LOOM_NONE, 0);
    loom_val rb = loom_broadcast(k, loom_expand_dims(k, r0, 0), LOOM_SHAPE2(64, 32));
    loom_store(k, of, ((loom_val[]){ci(k, 1), z, z}), loom_trans(k, loom_add(k, t, rb)), LOOM_NONE);
    /* trans of a tile, then elementwise with a tile in the default layout: a conversion */
    loom_val tt = loom_load(k, x, ((loom_val[]){z, z}), LOOM_SHAPE2(32, 32), LOOM_NONE, 0);
    loom_store(k, of, ((loom_val[]){ci(k, 2), z, z}), loom_add(k, loom_trans(k, tt), tt), LOOM_NONE);
    /* rank-3 broadcast of a 1-D tile */
    loom_val b3 = loom_broadcast(k, r0, LOOM_SHAPE3(2, 16, 32));
    loom_store(k, of, ((loom_val[]){ci(k, 3), z, z}), loom_reduce_sum(k, b3, 0), LOOM_NONE);
    return k;
}

Test(codegen, grid_and_shape_ops) { check_and_free(shape_ops()); }

/* Slices: of a loaded tile along each dim (a part of the registers, or through shared
 * memory where the part lies in other threads), of an elementwise result, and of a
 * recomputed arange. */
OP_COVERED(slice)
static loom_kernel *slice_ops(void)
{
    loom_kernel *k = loom_kernel_create("slices", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(64, 64), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE3(7, 64, 64), LOOM_OUT);
    loom_val oi = loom_arg_tensor(k, "oi", LOOM_I32, LOOM_SHAPE1(16), LOOM_OUT);
    loom_val z = ci(k, 0);
    loom_val t = loom_load(k, x, ((loom_val[]){z, z}), LOOM_SHAPE2(64, 64), LOOM_NONE, 0);
    loom_store(k, o, ((loom_val[]){z, z, z}), loom_slice(k, t, 1, 32, 32), LOOM_NONE);
    loom_store(k, o, ((loom_val[]){ci(k, 1), z, z}), loom_slice(k, t, 0, 48, 16), LOOM_NONE);
    loom_store(k, o, ((loom_val[]){ci(k, 2), z, z}), loom_slice(k, t, 1, 4, 4), LOOM_NONE);
    loom_store(k, o, ((loom_val[]){ci(k, 3), z, z}), loom_slice(k, t, 0, 1, 1), LOOM_NONE);
    /* a slice added to another tile: its layout meets the other's */
    loom_val half = loom_load(k, x, ((loom_val[]){ci(k, 8), z}), LOOM_SHAPE2(32, 64), LOOM_NONE, 0);
    loom_val sum = loom_add(k, loom_slice(k, loom_mul(k, t, t), 0, 32, 32), half);
    loom_store(k, o, ((loom_val[]){ci(k, 4), z, z}), sum, LOOM_NONE);
    loom_store(k, o, ((loom_val[]){ci(k, 5), z, z}), loom_slice(k, sum, 1, 0, 16), LOOM_NONE);
    /* a load whose only use is a slice added to a tile: loaded in the layout that holds
     * the part (no conversion) */
    loom_val w = loom_load(k, x, ((loom_val[]){z, z}), LOOM_SHAPE2(64, 64), LOOM_NONE, 0);
    loom_val q = loom_load(k, x, ((loom_val[]){z, ci(k, 16)}), LOOM_SHAPE2(64, 32), LOOM_NONE, 0);
    loom_store(k, o, ((loom_val[]){ci(k, 6), z, z}), loom_add(k, loom_slice(k, w, 1, 32, 32), q), LOOM_NONE);
    loom_store(k, oi, &z, loom_slice(k, loom_arange(k, 3, 67), 0, 16, 16), LOOM_NONE);
    return k;
}

Test(codegen, slices) { check_and_free(slice_ops()); }

static loom_kernel *reduce_kernel(loom_dtype dt, int64_t r, int64_t c, int warps)
{
    loom_kernel *k = loom_kernel_create("reduce", warps);
    loom_val x = loom_arg_tensor(k, "x", dt, LOOM_SHAPE2(r, c), LOOM_IN);
    loom_val o0 = loom_arg_tensor(k, "o0", dt, LOOM_SHAPE2(3, c), LOOM_OUT);
    loom_val o1 = loom_arg_tensor(k, "o1", dt, LOOM_SHAPE2(3, r), LOOM_OUT);
    loom_val z = ci(k, 0);
    loom_val a = loom_load(k, x, ((loom_val[]){z, z}), LOOM_SHAPE2(r, c), LOOM_NONE, 0);
    loom_store(k, o0, ((loom_val[]){ci(k, 0), z}), loom_reduce_sum(k, a, 0), LOOM_NONE);
    loom_store(k, o0, ((loom_val[]){ci(k, 1), z}), loom_reduce_max(k, a, 0), LOOM_NONE);
    loom_store(k, o0, ((loom_val[]){ci(k, 2), z}), loom_reduce_min(k, a, 0), LOOM_NONE);
    loom_store(k, o1, ((loom_val[]){ci(k, 0), z}), loom_reduce_sum(k, a, 1), LOOM_NONE);
    loom_store(k, o1, ((loom_val[]){ci(k, 1), z}), loom_reduce_max(k, a, 1), LOOM_NONE);
    loom_store(k, o1, ((loom_val[]){ci(k, 2), z}), loom_reduce_min(k, a, 1), LOOM_NONE);
    return k;
}

OP_COVERED(reduce_sum)
OP_COVERED(reduce_max)
OP_COVERED(reduce_min)
Test(codegen, reductions)
{
    check_and_free(reduce_kernel(LOOM_F32, 64, 64, 4));
    check_and_free(reduce_kernel(LOOM_F16, 4, 1024, 4));
    check_and_free(reduce_kernel(LOOM_BF16, 128, 8, 8));
    check_and_free(reduce_kernel(LOOM_I32, 32, 32, 4));
    check_and_free(reduce_kernel(LOOM_I64, 16, 16, 1));
    check_and_free(reduce_kernel(LOOM_F32, 5, 37, 4)); /* padded dims */
}

OP_COVERED(dot)
OP_COVERED(for)
Test(codegen, dot_shapes)
{
    check_and_free(matmul(48, 40, 24, 16, 8, 8, LOOM_F32, 0)); /* small */
    check_and_free(matmul(96, 96, 40, 32, 32, 8, LOOM_F16, 0));
    check_and_free(matmul(30, 20, 10, 32, 32, 10, LOOM_F16, 0)); /* K tile not a power of two */
}

OP_COVERED(load)
OP_COVERED(store)
OP_COVERED(load_scalar)
OP_COVERED(load_rows)
static loom_kernel *memory_ops(void)
{
    loom_kernel *k = loom_kernel_create("memory", 4);
    int64_t st[2] = {40, 1};
    loom_val x = loom_arg_tensor_strided(k, "x", LOOM_F16, LOOM_SHAPE2(50, 33), st, LOOM_IN);
    loom_val idx = loom_arg_tensor(k, "idx", LOOM_I64, LOOM_SHAPE1(16), LOOM_IN);
    loom_val bits = loom_arg_tensor(k, "bits", LOOM_I1, LOOM_SHAPE2(16, 64), LOOM_INOUT);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F16, LOOM_SHAPE3(4, 16, 64), LOOM_OUT);
    loom_val lo = loom_arg_tensor(k, "lo", LOOM_I64, LOOM_SHAPE1(64), LOOM_OUT);
    loom_val off = loom_arg_scalar(k, "off", LOOM_I64);
    loom_val x3 = loom_arg_tensor(k, "x3", LOOM_F32, LOOM_SHAPE3(10, 8, 16), LOOM_IN);
    loom_val o3 = loom_arg_tensor(k, "o3", LOOM_F32, LOOM_SHAPE3(4, 8, 16), LOOM_OUT);
    loom_val z = ci(k, 0);
    loom_val r = loom_load(k, idx, &z, LOOM_SHAPE1(16), LOOM_NONE, 0);
    loom_val g = loom_load_rows(k, x, r, ((loom_val[]){z, ci(k, 8)}), LOOM_SHAPE2(16, 64), 0.5);
    loom_val m = loom_load(k, bits, ((loom_val[]){z, z}), LOOM_SHAPE2(16, 64), LOOM_NONE, 0);
    loom_store(k, o, ((loom_val[]){z, z, z}), g, m);
    loom_val one = loom_load_scalar(k, x, ((loom_val[]){ci(k, 3), loom_cast(k, off, LOOM_I32)}));
    loom_val t = loom_load(k, x, ((loom_val[]){off, z}), LOOM_SHAPE2(16, 64), loom_not(k, m), -2.0);
    loom_store(k, o, ((loom_val[]){ci(k, 1), z, z}), loom_mul(k, t, one), LOOM_NONE);
    loom_store(k, bits, ((loom_val[]){z, z}), loom_cmp(k, LOOM_GT, t, one), loom_not(k, m));
    loom_val u = loom_load_scalar(k, idx, &z);
    loom_store(k, lo, &z, loom_add(k, loom_splat(k, u, LOOM_SHAPE1(64)), loom_cast(k, loom_arange(k, 0, 64), LOOM_I64)),
               LOOM_NONE);
    /* i32 rows gathered from a rank-3 tensor, tile rank 3 */
    loom_val rows = loom_rem(k, loom_arange(k, 7, 11), ci(k, 10));
    loom_val g3 = loom_load_rows(k, x3, rows, ((loom_val[]){z, z, z}), LOOM_SHAPE3(4, 8, 16), 0);
    loom_store(k, o3, ((loom_val[]){z, z, z}), g3, LOOM_NONE);
    return k;
}

Test(codegen, memory_ops) { check_and_free(memory_ops()); }

/* Masked accesses.  x [R, C] -> o [3, R, C], tiles of [br, bc] at (pid0 * br, pid1 * bc):
 *   o[0] = load(x, mask rows < n), stored under the same mask (rows only: the
 *          non-contiguous dim, so each 16-byte vector is all in or all out)
 *   o[1] = load(x, mask cols < climit), stored under climit > cols (the contiguous dim:
 *          uniform over each vector when climit is a multiple of its width)
 *   o[2] = load(x, mask both), stored unmasked: the masked-off elements show the fill */
static loom_kernel *masks(loom_dtype dt, int64_t r, int64_t c, int br, int bc, int64_t climit)
{
    loom_kernel *k = loom_kernel_create("masks", 4);
    loom_val x = loom_arg_tensor(k, "x", dt, LOOM_SHAPE2(r, c), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", dt, LOOM_SHAPE3(3, r, c), LOOM_OUT);
    loom_val n = loom_arg_scalar(k, "n", LOOM_I32);
    loom_val r0 = loom_mul(k, loom_program_id(k, 0), ci(k, br));
    loom_val c0 = loom_mul(k, loom_program_id(k, 1), ci(k, bc));
    loom_shape tile = LOOM_SHAPE2(br, bc);
    loom_val rows = loom_add(k, loom_splat(k, r0, LOOM_SHAPE1(br)), loom_arange(k, 0, br));
    loom_val cols = loom_add(k, loom_splat(k, c0, LOOM_SHAPE1(bc)), loom_arange(k, 0, bc));
    loom_val mr = loom_broadcast(k, loom_expand_dims(k, loom_cmp(k, LOOM_LT, rows, n), 1), tile);
    loom_val mc = loom_broadcast(k, loom_expand_dims(k, loom_cmp(k, LOOM_LT, cols, ci(k, climit)), 0), tile);
    loom_val mc2 = loom_broadcast(k, loom_expand_dims(k, loom_cmp(k, LOOM_GT, ci(k, climit), cols), 0), tile);
    loom_val at[3] = {r0, c0};
    loom_val t0 = loom_load(k, x, at, tile, mr, -2.5);
    loom_store(k, o, ((loom_val[]){ci(k, 0), r0, c0}), t0, mr);
    loom_val t1 = loom_load(k, x, at, tile, mc, 1.5);
    loom_store(k, o, ((loom_val[]){ci(k, 1), r0, c0}), t1, mc2);
    loom_val t2 = loom_load(k, x, at, tile, loom_and(k, mr, mc), -2.5);
    loom_store(k, o, ((loom_val[]){ci(k, 2), r0, c0}), t2, LOOM_NONE);
    return k;
}

static int count_of(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

/* The IKBO LCE's default kernel (tiles 64 x 224 per warp group, K = 64 per ring slot) comes
 * out compact (issue 18): each wgmma op is one asm statement with its four k16 steps and,
 * where they follow it, its commit and wait; the zero accumulator of a tile's first step
 * is not moved into registers (scale-d off); the user_res planes go out through shared
 * memory, read back 16 bytes at a time (the layout's padded rows, 224 of 256, dropped:
 * 2 x 14 loads and stores per thread), no 2-byte store left. */
Test(codegen, ikbo_lce_ptx_is_compact)
{
    const loom_template *t = loom_template_find("ikbo_lce");
    cr_assert(t);
    int64_t shape[LOOM_MAX_PARAMS], config[LOOM_MAX_PARAMS];
    for (int i = 0; i < t->nshape; i++)
        shape[i] = t->shape[i].def;
    for (int i = 0; i < t->nconfig; i++)
        config[i] = t->config[i].def;
    char err[1024] = "";
    loom_kernel *k = t->build(shape, config, err, sizeof err);
    cr_assert(k, "%s", err);
    char *ptx = compile(k, "sm_90a", NULL); /* Hopper only */
    t_ptxas_ok(ptx, "sm_90a", loom_kernel_name(k));
    int mma = count_of(ptx, "wgmma.mma_async"), asms = count_of(ptx, "begin inline asm");
    cr_assert_eq(mma % 4, 0, "%s", ptx);
    /* every statement that issues wgmma issues four steps back to back, with only their
     * descriptors made in between (a low half plus the step's offset, then the pair) */
    int statements = 0;
    for (const char *p = strstr(ptx, "wgmma.mma_async"); p; p = strstr(p, "wgmma.mma_async")) {
        statements++;
        for (int i = 0; i < 4; i++) {
            while (!strncmp(p + strspn(p, " \t"), "add.s32 dl,", 11) || !strncmp(p + strspn(p, " \t"), "mov.b64 d", 9))
                p = strstr(p, "\n") + 1;
            cr_assert(!strncmp(p + strspn(p, " \t"), "wgmma.mma_async", 15), "a step outside its statement:\n%.400s", p);
            p = strstr(p, "\n") + 1;
        }
    }
    cr_assert_eq(statements * 4, mma);
    cr_assert_eq(count_of(ptx, "mov.b64 db, {dl, dhb}"), mma, "a descriptor not made in its statement:\n%s", ptx);
    /* each commit comes right after the last step of its wgmma */
    for (const char *p = strstr(ptx, "wgmma.commit_group"); p; p = strstr(p + 1, "wgmma.commit_group")) {
        const char *prev = p - 2; /* the previous line's last character */
        while (prev > ptx && prev[-1] != '\n')
            prev--;
        cr_assert(!strncmp(strchr(prev, 'w'), "wgmma.mma_async", 15), "a commit of its own:\n%.300s", prev);
    }
    cr_assert(strstr(ptx, "setp.ne.b32 z"), "no first step with scale-d off:\n%s", ptx);
    cr_assert_lt(count_of(ptx, "mov.f32"), 112, "the zero accumulator is moved in:\n%s", ptx);
    cr_assert_eq(count_of(ptx, "st.global.b16"), 0, "%s", ptx);
    cr_assert_eq(count_of(ptx, "ld.shared.v4.u32"), 2 * 14, "%s", ptx);
    cr_assert_eq(count_of(ptx, "st.global.v4.b32"), 2 * 14, "%s", ptx);
    /* (each stmatrix and each masked 16-byte store is a statement of its own) */
    cr_assert_lt(asms, 450, "%d asm statements:\n%s", asms, ptx);
    cr_assert_lt(count_of(ptx, "\n"), 3500, "%d lines:\n%s", count_of(ptx, "\n"), ptx);
    free(ptx);
    loom_kernel_destroy(k);
}

Test(codegen, masked_accesses_vectorized)
{
    /* vector_add with an explicit tail mask: n = 1000 is a multiple of 4 floats */
    loom_kernel *k = vector_add(1000, 256, LOOM_F32, 1);
    char *ptx = check_kernel(k);
    cr_assert(strstr(ptx, "ld.global.nc.v4.b32"), "masked loads not vectorized:\n%s", ptx);
    cr_assert(strstr(ptx, "st.global.v4.b32"), "masked stores not vectorized:\n%s", ptx);
    cr_assert(!strstr(ptx, "ld.global.nc.b32"), "a scalar load left:\n%s", ptx);
    free(ptx);
    loom_kernel_destroy(k);
    /* f16 masks on rows and on columns (48: a multiple of 8 halves), both directions */
    k = masks(LOOM_F16, 50, 72, 16, 64, 48);
    ptx = check_kernel(k);
    cr_assert_eq(count_of(ptx, "ld.global.nc.v4.b32"), 3 * 16 * 64 / 8 / 128, "loads:\n%s", ptx);
    cr_assert_eq(count_of(ptx, "st.global.v4.b32"), 3 * 16 * 64 / 8 / 128, "stores:\n%s", ptx);
    cr_assert(!strstr(ptx, "ld.global.nc.b16") && !strstr(ptx, "st.global.b16"), "a 2-byte access left:\n%s", ptx);
    /* masked-off halves take the fill in every word of the vector (-2.5: 0xc100, 1.5: 0x3e00) */
    cr_assert_eq(count_of(ptx, "0xc100c100"), 2 * 4, "%s", ptx);
    cr_assert_eq(count_of(ptx, "0x3e003e00"), 4, "%s", ptx);
    free(ptx);
    loom_kernel_destroy(k);
    /* the row softmax's auto-masked tail: N = 2000 halves padded to a 2048-wide tile */
    char why[256] = "";
    k = loom_template_find("row_softmax")->build((int64_t[]){64, 2000, LOOM_F16}, (int64_t[]){1, 4}, why, sizeof why);
    cr_assert(k, "%s", why);
    ptx = check_kernel(k);
    cr_assert_eq(count_of(ptx, "ld.global.nc.v4.b32"), 2, "%s", ptx);
    cr_assert_eq(count_of(ptx, "st.global.v4.b32"), 2, "%s", ptx);
    free(ptx);
    loom_kernel_destroy(k);
}

Test(codegen, masked_accesses_stay_exact)
{
    /* climit = 45 splits a vector of 8 halves: the column-masked accesses must not read or
     * write elements 45..47, so they go element by element; the row-masked ones (and the
     * unmasked store) stay wide */
    loom_kernel *k = masks(LOOM_F16, 50, 72, 16, 64, 45);
    char *ptx = check_kernel(k);
    cr_assert_eq(count_of(ptx, "ld.global.nc.v4.b32"), 16 * 64 / 8 / 128, "%s", ptx);
    cr_assert_eq(count_of(ptx, "st.global.v4.b32"), 2 * 16 * 64 / 8 / 128, "%s", ptx);
    cr_assert(strstr(ptx, "ld.global.nc.b16"), "%s", ptx);
    cr_assert(strstr(ptx, "st.global.b16"), "%s", ptx);
    free(ptx);
    loom_kernel_destroy(k);
    /* n = 1001 is not a multiple of 4: the tail mask is not uniform over a vector */
    k = vector_add(1001, 256, LOOM_F32, 1);
    ptx = check_kernel(k);
    cr_assert(!strstr(ptx, ".v4.b32"), "%s", ptx);
    free(ptx);
    loom_kernel_destroy(k);
    /* a mask loaded from memory says nothing about its neighbours */
    loom_kernel *m = loom_kernel_create("data_mask", 4);
    loom_val x = loom_arg_tensor(m, "x", LOOM_F32, LOOM_SHAPE1(512), LOOM_IN);
    loom_val b = loom_arg_tensor(m, "b", LOOM_I32, LOOM_SHAPE1(512), LOOM_IN);
    loom_val o = loom_arg_tensor(m, "o", LOOM_F32, LOOM_SHAPE1(512), LOOM_OUT);
    loom_val z = ci(m, 0);
    loom_val mk = loom_cmp(m, LOOM_NE, loom_load(m, b, &z, LOOM_SHAPE1(512), LOOM_NONE, 0), z);
    loom_store(m, o, &z, loom_load(m, x, &z, LOOM_SHAPE1(512), mk, 0), mk);
    ptx = check_kernel(m);
    cr_assert_eq(count_of(ptx, "ld.global.nc.v4.b32"), 1, "only b's load is wide:\n%s", ptx);
    cr_assert(strstr(ptx, "ld.global.nc.b32"), "%s", ptx);
    cr_assert(!strstr(ptx, "st.global.v4.b32"), "%s", ptx);
    free(ptx);
    loom_kernel_destroy(m);
}

OP_COVERED(if)
OP_COVERED(yield)
static loom_kernel *control_flow(void)
{
    loom_kernel *k = loom_kernel_create("control", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE2(64, 64), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE2(64, 64), LOOM_OUT);
    loom_val n = loom_arg_scalar(k, "n", LOOM_I32);
    loom_val z = ci(k, 0);
    loom_val init[3] = {loom_splat(k, loom_const_f(k, LOOM_F32, 0), LOOM_SHAPE2(16, 64)),
                        loom_const_i(k, LOOM_I32, 1), loom_splat(k, loom_const_f(k, LOOM_F32, 1), LOOM_SHAPE1(16))};
    loom_region_op loop = loom_for_begin(k, z, n, ci(k, 16), 3, init);
    loom_val iv = loom_for_iv(k, loop);
    loom_val t = loom_load(k, x, ((loom_val[]){iv, z}), LOOM_SHAPE2(16, 64), LOOM_NONE, 0);
    loom_region_op br = loom_if_begin(k, loom_cmp(k, LOOM_GT, iv, ci(k, 16)), 2);
    loom_val ythen[2] = {loom_add(k, loom_for_arg(k, loop, 0), t), loom_reduce_max(k, t, 1)};
    loom_else(k, br, 2, ythen);
    loom_val yelse[2] = {loom_sub(k, loom_for_arg(k, loop, 0), t), loom_for_arg(k, loop, 2)};
    loom_if_end(k, br, 2, yelse);
    loom_val next[3] = {loom_if_result(k, br, 0), loom_mul(k, loom_for_arg(k, loop, 1), ci(k, 3)),
                        loom_if_result(k, br, 1)};
    loom_for_end(k, loop, 3, next);
    loom_val acc = loom_for_result(k, loop, 0);
    loom_val sc = loom_cast(k, loom_for_result(k, loop, 1), LOOM_F32);
    loom_val rowv = loom_broadcast(k, loom_expand_dims(k, loom_for_result(k, loop, 2), 1), LOOM_SHAPE2(16, 64));
    loom_region_op w = loom_if_begin(k, loom_cmp(k, LOOM_GT, n, z), 0);
    loom_store(k, o, ((loom_val[]){z, z}), loom_mul(k, loom_add(k, acc, rowv), sc), LOOM_NONE);
    loom_if_end(k, w, 0, NULL);
    return k;
}

Test(codegen, control_flow) { check_and_free(control_flow()); }

static loom_kernel *odd_kernel(void)
{
    loom_kernel *k = loom_kernel_create("odd", 3);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(300), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE1(300), LOOM_OUT);
    loom_val z = ci(k, 0);
    loom_val a = loom_load(k, x, &z, LOOM_SHAPE1(300), LOOM_NONE, 0);
    loom_val s = loom_reduce_sum(k, a, 0);
    loom_store(k, o, &z, loom_div(k, a, s), LOOM_NONE);
    return k;
}

Test(codegen, odd_warps_and_scalars_only) { check_and_free(odd_kernel()); }

Test(codegen, bad_kernel_is_an_error_not_a_crash)
{
    loom_kernel *k = loom_kernel_create("bad", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(16), LOOM_IN);
    loom_val z = ci(k, 0);
    loom_store(k, x, &z, loom_load(k, x, &z, LOOM_SHAPE1(16), LOOM_NONE, 0), LOOM_NONE); /* stores to an input */
    char err[1024];
    cg_result r = {.ptx = (char *)1};
    cr_assert_eq(cg_compile(k, "sm_90a", &r, err, sizeof err), LOOM_ERR_VERIFY);
    cr_assert_null(r.ptx);
    cr_assert(strstr(err, "read-only"), "%s", err);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- fold */

Test(codegen, fold_constants_and_identities)
{
    loom_kernel *k = loom_kernel_create("fold", 1);
    loom_val o = loom_arg_tensor(k, "o", LOOM_I32, LOOM_SHAPE1(8), LOOM_OUT);
    loom_val of = loom_arg_tensor(k, "of", LOOM_F32, LOOM_SHAPE1(8), LOOM_OUT);
    loom_val z = ci(k, 0);
    loom_val pid = loom_program_id(k, 0);
    loom_val c = loom_add(k, loom_mul(k, ci(k, 6), ci(k, 7)), loom_div(k, ci(k, -7), ci(k, 2))); /* 42 + -3 */
    loom_val same = loom_mul(k, loom_add(k, pid, ci(k, 0)), ci(k, 1));                           /* pid */
    loom_val r = loom_rem(k, pid, ci(k, 1));                                                      /* 0 */
    loom_val f = loom_mul(k, loom_add(k, loom_const_f(k, LOOM_F32, 1.5), loom_const_f(k, LOOM_F32, 2)),
                          loom_const_f(k, LOOM_F32, 1)); /* 3.5 */
    loom_val t = loom_arange(k, 0, 8);
    loom_store(k, o, &z, loom_add(k, loom_mul(k, t, c), loom_add(k, same, r)), LOOM_NONE);
    loom_store(k, of, &z, loom_mul(k, loom_cast(k, t, LOOM_F32), f), LOOM_NONE);
    int32_t want[8], got[8];
    float wantf[8], gotf[8];
    targ a[] = {TA_ARR(want), TA_ARR(wantf)};
    T_RUN_OK(k, NULL, a, 2);
    /* compiling works on a copy: the user's kernel (and its printed text, the module
     * cache's key) is exactly as built */
    char *before = strdup(loom_print(k));
    char *ptx = check_kernel(k);
    free(ptx);
    cr_assert_str_eq(loom_print(k), before, "compiling changed the user's kernel");
    free(before);
    /* the fold pass itself, on a copy as the pipeline runs it */
    loom_kernel *w = ir_kernel_clone(k);
    cr_assert(w);
    cg_ctx cg = {.k = w};
    cr_assert_eq(cg_fold(&cg), LOOM_OK);
    const char *ir = loom_print(w);
    cr_assert(strstr(ir, "const 39"), "6*7 + -7/2 not folded:\n%s", ir);
    cr_assert(strstr(ir, "const 3.5"), "1.5+2 not folded:\n%s", ir);
    cr_assert_eq(loom_verify(w), LOOM_OK, "%s", loom_kernel_errors(w));
    targ b[] = {TA_ARR(got), TA_ARR(gotf)};
    T_RUN_OK(w, NULL, b, 2);
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(got[i], want[i]);
        cr_assert_eq(got[i], i * 39);
        cr_assert(t_same_f32(gotf[i], wantf[i]));
    }
    loom_kernel_destroy(w);
    loom_kernel_destroy(k);
}

/* ---------------------------------------------------------------- GPU against the interpreter */

/* How to fill a tensor argument: random values, small integers (sums of them are exact
 * in any order), integers in [lo, hi], or random bit patterns (f32: every class of value,
 * denormals, infinities and NaNs included). */
enum { FILL_RAND, FILL_SMALLINT, FILL_RANGE, FILL_BITS };
typedef struct dspec {
    int fill;
    int64_t lo, hi;
    loom_arg scalar;
} dspec;

static uint32_t rng_next(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void fill_elem(unsigned char *p, loom_dtype dt, double v)
{
    switch (dt) {
    case LOOM_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case LOOM_F16: { uint16_t h = ir_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
    case LOOM_BF16: { uint16_t h = ir_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
    case LOOM_I32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case LOOM_I64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    case LOOM_I1: p[0] = v != 0; break;
    default: break;
    }
}

/* ulp distance of two floats of dtype dt stored at a and b (NaN == NaN). */
static int64_t ulps(loom_dtype dt, const unsigned char *a, const unsigned char *b)
{
    double x, y;
    int64_t ia, ib;
    if (dt == LOOM_F32) {
        float fa, fb;
        memcpy(&fa, a, 4);
        memcpy(&fb, b, 4);
        if (isnan(fa) && isnan(fb))
            return 0;
        int32_t u, v;
        memcpy(&u, a, 4);
        memcpy(&v, b, 4);
        ia = u < 0 ? INT32_MIN - (int64_t)u : u;
        ib = v < 0 ? INT32_MIN - (int64_t)v : v;
        x = fa, y = fb;
    } else {
        uint16_t u, v;
        memcpy(&u, a, 2);
        memcpy(&v, b, 2);
        x = dt == LOOM_F16 ? ir_f16_to_f32(u) : ir_bf16_to_f32(u);
        y = dt == LOOM_F16 ? ir_f16_to_f32(v) : ir_bf16_to_f32(v);
        if (isnan(x) && isnan(y))
            return 0;
        ia = (u & 0x8000) ? -(int64_t)(u & 0x7fff) : u;
        ib = (v & 0x8000) ? -(int64_t)(v & 0x7fff) : v;
    }
    (void)x;
    (void)y;
    return ia > ib ? ia - ib : ib - ia;
}

/* Run k on the GPU and on the interpreter with the same inputs; every tensor must come
 * back the same (floats within max_ulps).  Skips without a GPU. */
static void gpu_vs_interp(loom_kernel *k, const int grid[3], const dspec *spec, int max_ulps)
{
    loom_runtime *g = loom_runtime_create(LOOM_TARGET_GPU);
    if (!g || loom_runtime_status(g) != LOOM_OK) {
        loom_runtime_destroy(g);
        loom_kernel_destroy(k);
        cr_skip_test("no GPU");
    }
    loom_runtime *c = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    int n = loom_kernel_num_args(k);
    loom_buffer *bg[LOOM_MAX_ARGS] = {0}, *bc[LOOM_MAX_ARGS] = {0};
    unsigned char *host[LOOM_MAX_ARGS] = {0}, *hg[LOOM_MAX_ARGS] = {0};
    loom_arg ag[LOOM_MAX_ARGS], ac[LOOM_MAX_ARGS];
    uint32_t seed = 12345;
    for (int i = 0; i < n; i++) {
        loom_arg_info info;
        loom_kernel_arg_info(k, i, &info);
        if (!info.is_tensor) {
            ag[i] = ac[i] = spec[i].scalar;
            continue;
        }
        size_t es = loom_dtype_size(info.dtype), cnt = info.min_bytes / es;
        host[i] = malloc(info.min_bytes);
        hg[i] = malloc(info.min_bytes);
        for (size_t e = 0; e < cnt; e++) {
            double v;
            uint32_t r = rng_next(&seed);
            bool fl = info.dtype == LOOM_F32 || info.dtype == LOOM_F16 || info.dtype == LOOM_BF16;
            if (spec[i].fill == FILL_BITS && es == 4 && (info.access & LOOM_IN)) {
                /* mostly raw bits; one in eight a special value or an all-ones significand */
                uint32_t bits = r << 8 | (rng_next(&seed) & 0xff);
                static const uint32_t special[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000,
                                                   0x00000001, 0x807fffff, 0x00800000, 0x7f7fffff, 0x3fffffff};
                if ((r & 7) == 0)
                    bits = special[(r >> 3) % 10];
                else if ((r & 7) == 1)
                    bits |= 0x007fffff;
                memcpy(host[i] + e * es, &bits, 4);
                continue;
            }
            if (!(info.access & LOOM_IN))
                v = 0;
            else if (spec[i].fill == FILL_RANGE)
                v = (double)(spec[i].lo + (int64_t)(r % (uint32_t)(spec[i].hi - spec[i].lo + 1)));
            else if (spec[i].fill == FILL_SMALLINT || info.dtype == LOOM_I1)
                v = info.dtype == LOOM_I1 ? (double)(r & 1) : (double)((int)(r % 17) - 8);
            else if (fl)
                v = ((double)(r % 1000000) / 1000000.0 - 0.5) * 8.0;
            else
                v = (double)((int)(r % 200) - 100 == 0 ? 7 : (int)(r % 200) - 100);
            fill_elem(host[i] + e * es, info.dtype, v);
        }
        if (!(info.access & LOOM_IN))
            memset(host[i], 0x55, info.min_bytes);
        bg[i] = loom_buffer_create(g, info.min_bytes);
        bc[i] = loom_buffer_create(c, info.min_bytes);
        cr_assert(bg[i] && bc[i]);
        loom_buffer_upload(bg[i], host[i], info.min_bytes);
        loom_buffer_upload(bc[i], host[i], info.min_bytes);
        ag[i] = LOOM_ARG_BUF(bg[i]);
        ac[i] = LOOM_ARG_BUF(bc[i]);
    }
    loom_status st = loom_launch(c, k, grid, ac, n);
    cr_assert_eq(st, LOOM_OK, "interpreter: %s", loom_runtime_error(c));
    st = loom_launch(g, k, grid, ag, n);
    cr_assert_eq(st, LOOM_OK, "GPU: %s", loom_runtime_error(g));
    for (int i = 0; i < n; i++) {
        loom_arg_info info;
        loom_kernel_arg_info(k, i, &info);
        if (!info.is_tensor)
            continue;
        loom_buffer_download(bg[i], hg[i], info.min_bytes);
        loom_buffer_download(bc[i], host[i], info.min_bytes);
        size_t es = loom_dtype_size(info.dtype), cnt = info.min_bytes / es;
        bool fl = info.dtype == LOOM_F32 || info.dtype == LOOM_F16 || info.dtype == LOOM_BF16;
        int bad = 0;
        for (size_t e = 0; e < cnt && bad < 5; e++) {
            const unsigned char *x = hg[i] + e * es, *y = host[i] + e * es;
            bool ok = fl ? ulps(info.dtype, x, y) <= max_ulps : memcmp(x, y, es) == 0;
            if (!ok) {
                bad++;
                uint64_t ux = 0, uy = 0;
                memcpy(&ux, x, es);
                memcpy(&uy, y, es);
                cr_expect(ok, "kernel %s: '%s' element %zu: GPU bits 0x%llx, interpreter 0x%llx", loom_kernel_name(k),
                          info.name, e, (unsigned long long)ux, (unsigned long long)uy);
            }
        }
        loom_buffer_destroy(bg[i]);
        loom_buffer_destroy(bc[i]);
        free(host[i]);
        free(hg[i]);
    }
    loom_runtime_destroy(g);
    loom_runtime_destroy(c);
    loom_kernel_destroy(k);
}

static const int ONE[3] = {1, 1, 1};
#define NOSPEC ((dspec[LOOM_MAX_ARGS]){{0}})

Test(codegen_gpu, float_ops_exact)
{
    dspec s[LOOM_MAX_ARGS] = {[3] = {.scalar = LOOM_ARG_F32(1.5f)}};
    gpu_vs_interp(float_ops_x(LOOM_F32, 16, 64, 1), ONE, s, 0);
    gpu_vs_interp(float_ops_x(LOOM_F16, 8, 64, 1), ONE, s, 0);
    gpu_vs_interp(float_ops_x(LOOM_BF16, 8, 32, 1), ONE, s, 0);
    gpu_vs_interp(float_ops_x(LOOM_F32, 3, 10, 1), ONE, s, 0);
}

Test(codegen_gpu, float_ops_approx)
{
    dspec s[LOOM_MAX_ARGS] = {[3] = {.scalar = LOOM_ARG_F32(-2.25f)}};
    /* lg2.approx's error is absolute (about 2^-22): near log2(x) = 0 that is many ulps */
    gpu_vs_interp(float_ops_x(LOOM_F32, 16, 64, 0), ONE, s, 256);
    gpu_vs_interp(float_ops_x(LOOM_F16, 8, 64, 0), ONE, s, 1);
}

Test(codegen_gpu, int_ops)
{
    dspec s[LOOM_MAX_ARGS] = {[4] = {.scalar = LOOM_ARG_I32(-3)}};
    gpu_vs_interp(int_ops(LOOM_I32), ONE, s, 0);
    dspec s64[LOOM_MAX_ARGS] = {[4] = {.scalar = LOOM_ARG_I64(5)}};
    gpu_vs_interp(int_ops(LOOM_I64), ONE, s64, 0);
}

Test(codegen_gpu, shapes) { gpu_vs_interp(shape_ops(), ONE, NOSPEC, 0); }

Test(codegen_gpu, slices) { gpu_vs_interp(slice_ops(), ONE, NOSPEC, 0); }

Test(codegen_gpu, reductions)
{
    dspec s[LOOM_MAX_ARGS] = {{.fill = FILL_SMALLINT}};
    gpu_vs_interp(reduce_kernel(LOOM_F32, 64, 64, 4), ONE, s, 0);
    gpu_vs_interp(reduce_kernel(LOOM_F16, 4, 1024, 4), ONE, s, 0);
    gpu_vs_interp(reduce_kernel(LOOM_BF16, 128, 8, 8), ONE, s, 0);
    gpu_vs_interp(reduce_kernel(LOOM_I32, 32, 32, 4), ONE, NOSPEC, 0);
    gpu_vs_interp(reduce_kernel(LOOM_I64, 16, 16, 1), ONE, NOSPEC, 0);
    gpu_vs_interp(reduce_kernel(LOOM_F32, 5, 37, 4), ONE, s, 0);
    gpu_vs_interp(reduce_kernel(LOOM_F32, 4, 1024, 8), ONE, s, 0); /* reduced dim split over warps */
}

/* The f16 and bf16 tile dots run on the tensor cores (mma.sync), which add in their own
 * order: their inputs are small integers (products up to 64, sums far below 2^24), so
 * every order gives the exact sum and the GPU must still match the interpreter bit for
 * bit, which checks the staging and the fragments element by element (dot_mma_gpu checks
 * real inputs by the error model).  The f32 dot and the K=10 one stay on SIMT FMA, in
 * the interpreter's order: real inputs, bit for bit. */
Test(codegen_gpu, matmul_bit_exact)
{
    int g1[3] = {4, 4, 1}, g2[3] = {4, 3, 1}, g3[3] = {2, 2, 1};
    dspec ints[LOOM_MAX_ARGS] = {{.fill = FILL_SMALLINT}, {.fill = FILL_SMALLINT}};
    gpu_vs_interp(matmul(256, 256, 256, 64, 64, 32, LOOM_F16, 0), g1, ints, 0);
    gpu_vs_interp(matmul(100, 72, 50, 32, 32, 16, LOOM_F16, 1), g2, ints, 0);
    gpu_vs_interp(matmul(64, 64, 64, 32, 32, 16, LOOM_F32, 0), g3, NOSPEC, 0);
    gpu_vs_interp(matmul(64, 64, 64, 32, 32, 16, LOOM_BF16, 1), g3, ints, 0);
    int g4[3] = {1, 1, 1};
    gpu_vs_interp(matmul(30, 20, 10, 32, 32, 10, LOOM_F16, 0), g4, NOSPEC, 0);
}

Test(codegen_gpu, memory_ops)
{
    dspec s[LOOM_MAX_ARGS] = {[1] = {.fill = FILL_RANGE, .lo = 0, .hi = 49}, [5] = {.scalar = LOOM_ARG_I64(5)}};
    gpu_vs_interp(memory_ops(), ONE, s, 0);
}

Test(codegen_gpu, control_flow)
{
    dspec s[LOOM_MAX_ARGS] = {[2] = {.scalar = LOOM_ARG_I32(64)}};
    gpu_vs_interp(control_flow(), ONE, s, 0);
    s[2].scalar = LOOM_ARG_I32(0);
    gpu_vs_interp(control_flow(), ONE, s, 0);
}

Test(codegen_gpu, examples)
{
    int g[3] = {98, 1, 1};
    gpu_vs_interp(vector_add(100000, 1024, LOOM_F32, 0), g, NOSPEC, 0);
    int g2[3] = {4, 1, 1};
    gpu_vs_interp(vector_add(1000, 256, LOOM_F32, 1), g2, NOSPEC, 0);
    gpu_vs_interp(vector_add(1000, 256, LOOM_BF16, 0), g2, NOSPEC, 0);
    int g3[3] = {8, 1, 1};
    dspec si[LOOM_MAX_ARGS] = {{.fill = FILL_SMALLINT}};
    gpu_vs_interp(odd_kernel(), ONE, si, 0);
    (void)g3;
}

Test(codegen_gpu, masked_accesses)
{
    /* rows past n = 37 and the tensor's own tails (R = 50, C = 72) in every block */
    int g[3] = {4, 2, 1};
    dspec s[LOOM_MAX_ARGS] = {[2] = {.scalar = LOOM_ARG_I32(37)}};
    gpu_vs_interp(masks(LOOM_F16, 50, 72, 16, 64, 48), g, s, 0); /* every access 16 bytes */
    gpu_vs_interp(masks(LOOM_F16, 50, 72, 16, 64, 45), g, s, 0); /* columns element by element */
    gpu_vs_interp(masks(LOOM_F32, 50, 72, 16, 64, 44), g, s, 0);
    gpu_vs_interp(masks(LOOM_BF16, 50, 72, 16, 64, 40), g, s, 0);
    int g2[3] = {4, 1, 1};
    gpu_vs_interp(vector_add(1000, 256, LOOM_F16, 1), g2, NOSPEC, 0);
    gpu_vs_interp(vector_add(1001, 256, LOOM_F32, 1), g2, NOSPEC, 0);
}

/* Float division bit for bit against the host's, over every class of f32 value. */
static loom_kernel *fdiv_kernel(int64_t n, int block)
{
    loom_kernel *k = loom_kernel_create("fdiv", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(n), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", LOOM_F32, LOOM_SHAPE1(n), LOOM_IN);
    loom_val o = loom_arg_tensor(k, "o", LOOM_F32, LOOM_SHAPE2(2, n), LOOM_OUT);
    loom_val off = loom_mul(k, loom_program_id(k, 0), ci(k, block));
    loom_val a = loom_load(k, x, &off, LOOM_SHAPE1(block), LOOM_NONE, 1.0);
    loom_val b = loom_load(k, y, &off, LOOM_SHAPE1(block), LOOM_NONE, 1.0);
    loom_store(k, o, ((loom_val[]){ci(k, 0), off}), loom_div(k, a, b), LOOM_NONE);
    /* one divisor for a whole row, as a softmax divides by its sum */
    loom_val s = loom_broadcast(k, loom_load(k, y, &off, LOOM_SHAPE1(1), LOOM_NONE, 1.0), LOOM_SHAPE1(block));
    loom_store(k, o, ((loom_val[]){ci(k, 1), off}), loom_div(k, a, s), LOOM_NONE);
    return k;
}

Test(codegen_gpu, division_correctly_rounded)
{
    int g[3] = {1024, 1, 1};
    dspec s[LOOM_MAX_ARGS] = {{.fill = FILL_BITS}, {.fill = FILL_BITS}};
    gpu_vs_interp(fdiv_kernel(1024 * 1024, 1024), g, s, 0);
}
