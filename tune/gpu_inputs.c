/*
 * gpu_inputs.c -- inputs made on the device, and reductions that bring back one number.
 *
 * Tuning a template at a benchmark shape needs hundreds of megabytes of inputs (ikbo_lce
 * at its headline: 454 MB of E_cand alone).  Made on the host they cost seconds of CPU
 * time that the compile pool wants, and an upload; made on the device they cost a
 * millisecond.  So the inputs a template names (templates/tpl_device.h) are filled on the
 * device by a counter-based hash written in loom's own DSL (tune_fill_kernel): element i
 * of a fill with seed s is a function of (s, i) alone, so any range can be made by any
 * program, a copy of the arguments is made by running the fill again, and the host can
 * compute the same values (tune_fill_host) to test the kernel on the interpreter.  No
 * curand, no NVRTC: the kernel is ordinary loom IR, compiled with the candidates.
 *
 * The hash is Chris Wellons' lowbias32 (two multiply-xorshift rounds) of the index plus
 * the seed, both taken to 32 bits (the seed through splitmix64 on the host):
 *
 *     h = mix32(lo32(i) + seed32(s))
 *     v = fma(float(h >> 8) * 2^-24, hi - lo, lo)       (f32, then rounded to the dtype)
 *
 * so fills of more than 2^32 elements repeat (8 GB of f16).  The DSL has no xor and no
 * shifts, so the kernel computes in i64 on values kept in [0, 2^32): a ^ b = (a | b) -
 * (a & b), x >> s = x / 2^s (x is never negative), and a 32-bit product is the 64-bit one
 * masked to its low 32 bits (loom's integer products wrap, on the interpreter as on the
 * GPU).  The value is one fma in f32, so the host, the interpreter and the GPU agree bit
 * for bit.  One round of mixing, not two: the code generator rematerializes integer
 * values derived from arange at each use, so its time doubles with every level of a value
 * used twice (each xor uses its operands twice; two rounds took 1.5 s to compile, one
 * takes a few ms).
 *
 * The reductions: tune_maxdiff_kernel writes, per program of TUNE_RED_BLOCK elements, the
 * largest |a - b| (a NaN on either side counts as infinity), and tune_reduce2_kernel folds
 * two arrays of such per-program results into two numbers (each a sum or a max) in one
 * program, so a check of an output of any size brings back 8 bytes.
 */
#include "../util/util.h"
#include "tpl.h"
#include "tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the hash, on the host */

static uint32_t mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

uint32_t tune_seed32(uint64_t seed)
{
    uint64_t z = seed + 0x9e3779b97f4a7c15ull; /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)(z ^ (z >> 31));
}

uint32_t tune_hash(uint64_t seed, int64_t i) { return mix32((uint32_t)(uint64_t)i + tune_seed32(seed)); }

float tune_fill_value(uint64_t seed, int64_t i, float lo, float hi)
{
    float u = (float)(tune_hash(seed, i) >> 8) * 0x1p-24f;
    return fmaf(u, hi - lo, lo);
}

void tune_fill_host(void *p, loom_dtype dt, int64_t n, uint64_t seed, float lo, float hi, int64_t ld, int64_t cols)
{
    for (int64_t i = 0; i < n; i++)
        tpl_set(p, dt, i, ld > 0 && i % ld >= cols ? 0.0f : tune_fill_value(seed, i, lo, hi));
}

/* ---------------------------------------------------------------- the fill kernel */

#define CI64(v) loom_const_i(k, LOOM_I64, (int64_t)(v))

/* a ^ b of values in [0, 2^32) */
static loom_val xor32(loom_kernel *k, loom_val a, loom_val b)
{
    return loom_sub(k, loom_or(k, a, b), loom_and(k, a, b));
}

/* x ^ (x >> s), x in [0, 2^32) */
static loom_val xorshift(loom_kernel *k, loom_val x, int s)
{
    return xor32(k, x, loom_div(k, x, CI64(INT64_C(1) << s)));
}

/* the low 32 bits of x * c */
static loom_val mul32(loom_kernel *k, loom_val x, uint32_t c)
{
    return loom_and(k, loom_mul(k, x, CI64(c)), CI64(0xffffffffu));
}

static loom_val mix32_k(loom_kernel *k, loom_val x)
{
    x = mul32(k, xorshift(k, x, 16), 0x7feb352du);
    x = mul32(k, xorshift(k, x, 15), 0x846ca68bu);
    return xorshift(k, x, 16);
}

/* The element index of each of the program's TUNE_FILL_BLOCK elements, i64. */
static loom_val block_index(loom_kernel *k, int block, loom_val *off, bool wide)
{
    loom_val pid = loom_program_id(k, 0);
    loom_val base = loom_mul(k, loom_cast(k, pid, LOOM_I64), CI64(block));
    *off = wide ? base : loom_mul(k, pid, loom_const_i(k, LOOM_I32, block));
    return loom_add(k, loom_splat(k, base, LOOM_SHAPE1(block)), loom_cast(k, loom_arange(k, 0, block), LOOM_I64));
}

loom_kernel *tune_fill_kernel(loom_dtype dt, int64_t n, int *grid0)
{
    int64_t nprog = (n + TUNE_FILL_BLOCK - 1) / TUNE_FILL_BLOCK;
    if (n < 1 || nprog > INT32_MAX || !(dt == LOOM_F16 || dt == LOOM_BF16 || dt == LOOM_F32))
        return NULL;
    *grid0 = (int)nprog;
    loom_kernel *k = loom_kernel_create("loom_tune_fill", 4);
    loom_val out = loom_arg_tensor(k, "out", dt, LOOM_SHAPE1(n), LOOM_OUT);
    loom_val s32 = loom_arg_scalar(k, "seed32", LOOM_I64); /* tune_seed32(seed), in [0, 2^32) */
    loom_val lo = loom_arg_scalar(k, "lo", LOOM_F32);
    loom_val hi = loom_arg_scalar(k, "hi", LOOM_F32);
    loom_val ld = loom_arg_scalar(k, "ld", LOOM_I64); /* elements with i % ld >= cols are 0 */
    loom_val cols = loom_arg_scalar(k, "cols", LOOM_I64);

    loom_val off;
    loom_val i = block_index(k, TUNE_FILL_BLOCK, &off, n > INT32_MAX - TUNE_FILL_BLOCK);
    loom_val x = loom_and(k, loom_add(k, i, loom_splat(k, s32, LOOM_SHAPE1(TUNE_FILL_BLOCK))), CI64(0xffffffffu));
    loom_val h = mix32_k(k, x);
    loom_val u = loom_mul(k, loom_cast(k, loom_div(k, h, CI64(256)), LOOM_F32), loom_const_f(k, LOOM_F32, 0x1p-24));
    loom_val v = loom_fma(k, u, loom_splat(k, loom_sub(k, hi, lo), LOOM_SHAPE1(TUNE_FILL_BLOCK)),
                          loom_splat(k, lo, LOOM_SHAPE1(TUNE_FILL_BLOCK)));
    loom_val keep = loom_cmp(k, LOOM_LT, loom_rem(k, i, ld), loom_splat(k, cols, LOOM_SHAPE1(TUNE_FILL_BLOCK)));
    v = loom_select(k, keep, v, loom_const_f(k, LOOM_F32, 0.0));
    loom_store(k, out, &off, loom_cast(k, v, dt), LOOM_NONE);
    return k;
}

void tune_fill_args(loom_buffer *out, uint64_t seed, double lo, double hi, int64_t ld, int64_t cols, int64_t n,
                    loom_arg a[6])
{
    if (ld <= 0) /* no padding: every element is a value */
        ld = cols = n;
    a[0] = LOOM_ARG_BUF(out);
    a[1] = LOOM_ARG_I64((int64_t)tune_seed32(seed));
    a[2] = LOOM_ARG_F32((float)lo);
    a[3] = LOOM_ARG_F32((float)hi);
    a[4] = LOOM_ARG_I64(ld);
    a[5] = LOOM_ARG_I64(cols);
}

/* ---------------------------------------------------------------- reductions */

loom_kernel *tune_maxdiff_kernel(loom_dtype da, loom_dtype db, int64_t n, int *grid0)
{
    int64_t nprog = (n + TUNE_RED_BLOCK - 1) / TUNE_RED_BLOCK;
    if (n < 1 || nprog > INT32_MAX)
        return NULL;
    *grid0 = (int)nprog;
    loom_kernel *k = loom_kernel_create("loom_tune_maxdiff", 4);
    loom_val a = loom_arg_tensor(k, "a", da, LOOM_SHAPE1(n), LOOM_IN);
    loom_val b = loom_arg_tensor(k, "b", db, LOOM_SHAPE1(n), LOOM_IN);
    loom_val part = loom_arg_tensor(k, "part", LOOM_F32, LOOM_SHAPE1(nprog), LOOM_OUT);
    loom_val pid = loom_program_id(k, 0);
    loom_val off = n > INT32_MAX - TUNE_RED_BLOCK
                       ? loom_mul(k, loom_cast(k, pid, LOOM_I64), CI64(TUNE_RED_BLOCK))
                       : loom_mul(k, pid, loom_const_i(k, LOOM_I32, TUNE_RED_BLOCK));
    loom_shape tile = LOOM_SHAPE1(TUNE_RED_BLOCK);
    /* past n both sides load 0: no difference */
    loom_val x = loom_cast(k, loom_load(k, a, &off, tile, LOOM_NONE, 0.0), LOOM_F32);
    loom_val y = loom_cast(k, loom_load(k, b, &off, tile, LOOM_NONE, 0.0), LOOM_F32);
    loom_val d = loom_abs(k, loom_sub(k, x, y));
    d = loom_select(k, loom_cmp(k, LOOM_NE, d, d), loom_const_f(k, LOOM_F32, INFINITY), d);
    loom_store(k, part, &pid, loom_splat(k, loom_reduce_max(k, d, 0), LOOM_SHAPE1(1)), LOOM_NONE);
    return k;
}

loom_kernel *tune_reduce2_kernel(int64_t n, tune_red op0, tune_red op1)
{
    if (n < 1 || n > INT32_MAX - TUNE_RED_BLOCK)
        return NULL;
    loom_kernel *k = loom_kernel_create("loom_tune_reduce2", 4);
    loom_val x[2];
    x[0] = loom_arg_tensor(k, "x0", LOOM_F32, LOOM_SHAPE1(n), LOOM_IN);
    x[1] = loom_arg_tensor(k, "x1", LOOM_F32, LOOM_SHAPE1(n), LOOM_IN);
    loom_val out = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE1(2), LOOM_OUT);
    tune_red op[2] = {op0, op1};
    loom_val zero = loom_const_f(k, LOOM_F32, 0.0);
    loom_val init[2] = {zero, zero}; /* sums start at 0; maxima too: every input is >= 0 */
    loom_region_op loop = loom_for_begin(k, loom_const_i(k, LOOM_I32, 0), loom_const_i(k, LOOM_I32, n),
                                         loom_const_i(k, LOOM_I32, TUNE_RED_BLOCK), 2, init);
    {
        loom_val iv = loom_for_iv(k, loop), next[2];
        for (int j = 0; j < 2; j++) {
            loom_val t = loom_load(k, x[j], &iv, LOOM_SHAPE1(TUNE_RED_BLOCK), LOOM_NONE, 0.0);
            loom_val acc = loom_for_arg(k, loop, j);
            next[j] = op[j] == TUNE_RED_SUM ? loom_add(k, acc, loom_reduce_sum(k, t, 0))
                                            : loom_max(k, acc, loom_reduce_max(k, t, 0));
        }
        loom_for_end(k, loop, 2, next);
    }
    loom_val zi = loom_const_i(k, LOOM_I32, 0), oi = loom_const_i(k, LOOM_I32, 1);
    loom_store(k, out, &zi, loom_splat(k, loom_for_result(k, loop, 0), LOOM_SHAPE1(1)), LOOM_NONE);
    loom_store(k, out, &oi, loom_splat(k, loom_for_result(k, loop, 1), LOOM_SHAPE1(1)), LOOM_NONE);
    return k;
}
