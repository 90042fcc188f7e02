/*
 * tp_common.h -- the template the test plugins register (tests/test_plugin.c): y = 2 x + 1
 * over a vector of N f32, BLOCK elements a program.  A plugin has only loom.h, so its
 * helpers are its own.
 */
#ifndef LOOM_TP_COMMON_H
#define LOOM_TP_COMMON_H

#include "loom.h"

#include <stdio.h>

static loom_kernel *tp_build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    if (sh[0] < 1 || cf[0] < 1 || (cf[0] & (cf[0] - 1)))
        return snprintf(err, n, "N must be positive and BLOCK a power of two"), (loom_kernel *)NULL;
    loom_kernel *k = loom_kernel_create("tp_scale", (int)cf[1]);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(sh[0]), LOOM_IN);
    loom_val y = loom_arg_tensor(k, "y", LOOM_F32, LOOM_SHAPE1(sh[0]), LOOM_OUT);
    loom_val o = loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, cf[0]));
    loom_val v = loom_load(k, x, &o, LOOM_SHAPE1(cf[0]), LOOM_NONE, 0);
    loom_val r = loom_fma(k, v, loom_splat(k, loom_const_f(k, LOOM_F32, 2), LOOM_SHAPE1(cf[0])),
                          loom_splat(k, loom_const_f(k, LOOM_F32, 1), LOOM_SHAPE1(cf[0])));
    loom_store(k, y, &o, r, LOOM_NONE);
    return k;
}

static void tp_grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    g[0] = (int)((sh[0] + cf[0] - 1) / cf[0]), g[1] = g[2] = 1;
}

static void tp_init(const int64_t *sh, void *const *host, uint64_t seed)
{
    float *x = host[0];
    for (int64_t i = 0; i < sh[0]; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)(seed >> 40) / (float)(1 << 24) - 0.5f;
    }
}

static void tp_reference(const int64_t *sh, void *const *host, void *const *ref)
{
    const float *x = host[0];
    float *y = ref[1];
    for (int64_t i = 0; i < sh[0]; i++)
        y[i] = 2 * x[i] + 1; /* exact in f32 but for the add's rounding, as the kernel's fma */
}

#define TP_TEMPLATE(NAME)                                                                        \
    {                                                                                            \
        .name = NAME, .doc = "y = 2 x + 1 (a test plugin's template)", .nshape = 1,               \
        .shape = {{"N", 1000, "elements"}}, .nconfig = 2,                                        \
        .config = {{"BLOCK", 256, "elements a program", 3, {128, 256, 512}}, {"warps", 4, "warps a CTA"}}, \
        .build = tp_build, .grid = tp_grid, .init = tp_init, .reference = tp_reference, .atol = 0,  \
        .rtol = 0x1p-23,                                                                         \
    }

#endif
