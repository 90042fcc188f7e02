/*
 * kernels.h -- the templates of this plugin (plugin.c registers them).
 */
#ifndef KERNELS_H
#define KERNELS_H

#include "loom.h"

extern const loom_template rmsnorm_template;       /* rmsnorm.c */
extern const loom_template gemm_bias_act_template; /* gemm_bias_act.c */
extern const loom_template gemm_plain_template;    /* gemm_plain.c (plain_gemm of plain.c) */
extern const loom_template ikbo_gather_softmax_template; /* ikbo_gather_softmax.c */

/* A reproducible uniform value in [-1, 1) (splitmix64 on a counter). */
static inline double kernels_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1p-52 - 1.0;
}

/* Element i of a host array of dtype dt (f16 or f32: what these templates take). */
static inline double kernels_get(const void *p, loom_dtype dt, int64_t i)
{
    return dt == LOOM_F16 ? (double)((const _Float16 *)p)[i] : (double)((const float *)p)[i];
}
static inline void kernels_set(void *p, loom_dtype dt, int64_t i, double v)
{
    if (dt == LOOM_F16)
        ((_Float16 *)p)[i] = (_Float16)v;
    else
        ((float *)p)[i] = (float)v;
}

#endif
