/*
 * driver.c -- placeholder GPU backend: reports that no GPU backend is built yet.
 * (Replaced by the dlopen-based CUDA driver backend.)
 */
#include "rt.h"

#include <stdio.h>

loom_status rt_gpu_open(rt_gpu **out, char *err, size_t errlen)
{
    *out = NULL;
    snprintf(err, errlen, "this build has no GPU backend");
    return LOOM_ERR_NO_GPU;
}
void rt_gpu_close(rt_gpu *g) { (void)g; }
const char *rt_gpu_name(const rt_gpu *g) { (void)g; return ""; }
loom_status rt_gpu_alloc(rt_gpu *g, size_t b, uint64_t *d, char *e, size_t n) { (void)g; (void)b; (void)d; (void)e; (void)n; return LOOM_ERR_NO_GPU; }
void rt_gpu_free(rt_gpu *g, uint64_t d) { (void)g; (void)d; }
loom_status rt_gpu_htod(rt_gpu *g, uint64_t d, const void *s, size_t b, char *e, size_t n) { (void)g; (void)d; (void)s; (void)b; (void)e; (void)n; return LOOM_ERR_NO_GPU; }
loom_status rt_gpu_dtoh(rt_gpu *g, void *d, uint64_t s, size_t b, char *e, size_t n) { (void)g; (void)d; (void)s; (void)b; (void)e; (void)n; return LOOM_ERR_NO_GPU; }
loom_status rt_gpu_memset8(rt_gpu *g, uint64_t d, unsigned char c, size_t b, char *e, size_t n) { (void)g; (void)d; (void)c; (void)b; (void)e; (void)n; return LOOM_ERR_NO_GPU; }
loom_status rt_gpu_launch(rt_gpu *g, loom_kernel *k, const int grid[3], const rt_launch_arg *a, char *e, size_t n) { (void)g; (void)k; (void)grid; (void)a; (void)e; (void)n; return LOOM_ERR_NO_GPU; }
