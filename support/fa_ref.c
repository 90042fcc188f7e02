/*
 * fa_ref.c -- the IKBO flash attention's GPU reference (see fa_ref.h), written the
 * plainest way: one thread per output row and head, no shared memory, no tensor cores.
 */
#include "fa_ref.h"
#include "rt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char src[] =
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "__device__ float ld(const void *p, int dt, long long i)\n"
    "{\n"
    "    return dt == 0 ? __half2float(((const __half *)p)[i]) : __bfloat162float(((const __nv_bfloat16 *)p)[i]);\n"
    "}\n"
    "/* one thread per (row, head): rows fastest, so a warp's rows share their user's keys */\n"
    "extern \"C\" __global__ void faref_attention(const void *q, const void *k, const void *v, const int *map,\n"
    "        const int *lens, float *ref, long long rows, int U, int S, int H, int D, int nseed, int dt)\n"
    "{\n"
    "    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (t >= rows * H) return;\n"
    "    long long r = t % rows; int h = (int)(t / rows);\n"
    "    int u = map[r / nseed], len = lens ? lens[u] : S;\n"
    "    float qv[256], o[256];\n"
    "    float scale = 1.0f / sqrtf((float)D);\n"
    "    for (int x = 0; x < D; x++) { qv[x] = ld(q, dt, (r * H + h) * D + x); o[x] = 0.0f; }\n"
    "    float m = -__int_as_float(0x7f800000), l = 0.0f;\n"
    "    for (int j = 0; j < len; j++) {\n"
    "        long long ko = (((long long)u * S + j) * H + h) * D;\n"
    "        float s = 0.0f;\n"
    "        for (int x = 0; x < D; x++) s += qv[x] * ld(k, dt, ko + x);\n"
    "        s *= scale;\n"
    "        float mn = fmaxf(m, s), c = expf(m - mn), p = expf(s - mn);\n"
    "        l = l * c + p;\n"
    "        for (int x = 0; x < D; x++) o[x] = o[x] * c + p * ld(v, dt, ko + x);\n"
    "        m = mn;\n"
    "    }\n"
    "    for (int x = 0; x < D; x++) ref[(r * H + h) * D + x] = len ? o[x] / l : 0.0f;\n"
    "}\n"
    "/* stats: [0] bad, [1] non-finite, [2] first bad (min), [3] worst ratio, [4] max err (float bits) */\n"
    "extern \"C\" __global__ void faref_compare(const void *out, const float *ref, long long n, int dt,\n"
    "        float atol, float rtol, unsigned long long *stats)\n"
    "{\n"
    "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
    "         i += (long long)gridDim.x * blockDim.x) {\n"
    "        float o = ld(out, dt, i), e = fabsf(o - ref[i]), tol = atol + rtol * fabsf(ref[i]);\n"
    "        bool fin = isfinite(o);\n"
    "        float ratio = fin ? e / tol : __int_as_float(0x7f800000);\n"
    "        if (!fin) atomicAdd(&stats[1], 1ull);\n"
    "        else atomicMax(&stats[4], (unsigned long long)__float_as_uint(e));\n"
    "        if (!fin || e > tol) { atomicAdd(&stats[0], 1ull); atomicMin(&stats[2], (unsigned long long)i); }\n"
    "        atomicMax(&stats[3], (unsigned long long)__float_as_uint(ratio));\n"
    "    }\n"
    "}\n"
    "/* dst[b] = src[map[b]], slabs of n 16-byte units; grid (cdiv(n, 1024), B), blocks of 256 */\n"
    "extern \"C\" __global__ void faref_gather(const uint4 *src, const int *map, uint4 *dst, long long n)\n"
    "{\n"
    "    long long b = blockIdx.y, i = (long long)blockIdx.x * 1024 + threadIdx.x;\n"
    "    const uint4 *s = src + map[b] * n; uint4 *d = dst + b * n; uint4 x[4];\n"
    "    for (int j = 0; j < 4; j++) if (i + 256 * j < n) x[j] = s[i + 256 * j];\n"
    "    for (int j = 0; j < 4; j++) if (i + 256 * j < n) d[i + 256 * j] = x[j];\n"
    "}\n";

struct fa_ref {
    rt_gpu *g;
    rt_gpu_module *m;
    uint64_t stats; /* 5 x u64 */
};

loom_status faref_open(rt_gpu *g, fa_ref **out, char *err, size_t errlen)
{
    *out = NULL;
    fa_ref *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    r->g = g;
    loom_status st = nvref_load(g, src, "fa_ref.cu", &r->m, err, errlen);
    if (st == LOOM_OK)
        st = rt_gpu_alloc(g, 5 * sizeof(uint64_t), &r->stats, err, errlen);
    if (st != LOOM_OK) {
        faref_close(r);
        return st;
    }
    *out = r;
    return LOOM_OK;
}

void faref_close(fa_ref *r)
{
    if (!r)
        return;
    if (r->stats)
        rt_gpu_free(r->g, r->stats);
    if (r->m)
        rt_gpu_module_unload(r->g, r->m);
    free(r);
}

static int dt_code(loom_dtype dt) { return dt == LOOM_F16 ? 0 : 1; }

loom_status faref_reference(fa_ref *r, const faref_shape *s, uint64_t q, uint64_t k, uint64_t v, uint64_t map,
                            uint64_t lens, uint64_t ref, char *err, size_t errlen)
{
    if (s->D > 256 || (s->dt != LOOM_F16 && s->dt != LOOM_BF16)) {
        snprintf(err, errlen, "faref_reference: D %lld over 256 or dtype not f16/bf16", (long long)s->D);
        return LOOM_ERR_INVALID;
    }
    long long rows = (long long)(s->B * s->nseed);
    int U = (int)s->U, S = (int)s->S, H = (int)s->H, D = (int)s->D, ns = (int)s->nseed, dt = dt_code(s->dt);
    void *params[] = {&q, &k, &v, &map, &lens, &ref, &rows, &U, &S, &H, &D, &ns, &dt};
    unsigned grid[3] = {(unsigned)((rows * H + 127) / 128), 1, 1}, block[3] = {128, 1, 1};
    return rt_gpu_module_launch(r->g, r->m, "faref_attention", grid, block, 0, params, err, errlen);
}

loom_status faref_compare(fa_ref *r, uint64_t out, loom_dtype dt, uint64_t ref, int64_t n, double atol, double rtol,
                          faref_report *rep, char *err, size_t errlen)
{
    uint64_t init[5] = {0, 0, UINT64_MAX, 0, 0}, got[5];
    loom_status st = rt_gpu_htod(r->g, r->stats, init, sizeof init, err, errlen);
    long long nn = (long long)n;
    int d = dt_code(dt);
    float a = (float)atol, rt = (float)rtol;
    void *params[] = {&out, &ref, &nn, &d, &a, &rt, &r->stats};
    unsigned grid[3] = {1024, 1, 1}, block[3] = {256, 1, 1};
    if (st == LOOM_OK)
        st = rt_gpu_module_launch(r->g, r->m, "faref_compare", grid, block, 0, params, err, errlen);
    if (st == LOOM_OK)
        st = rt_gpu_dtoh(r->g, got, r->stats, sizeof got, err, errlen);
    if (st != LOOM_OK)
        return st;
    float worst, maxe;
    uint32_t wb = (uint32_t)got[3], mb = (uint32_t)got[4];
    memcpy(&worst, &wb, 4);
    memcpy(&maxe, &mb, 4);
    *rep = (faref_report){(uint64_t)n, got[0], got[1], maxe, worst, got[0] ? (int64_t)got[2] : -1};
    return LOOM_OK;
}

loom_status faref_gather(fa_ref *r, uint64_t src, uint64_t map, uint64_t dst, int64_t B, int64_t bytes, char *err,
                         size_t errlen)
{
    long long n = (long long)(bytes / 16);
    void *params[] = {&src, &map, &dst, &n};
    unsigned grid[3] = {(unsigned)((n + 1023) / 1024), (unsigned)B, 1}, block[3] = {256, 1, 1};
    return rt_gpu_module_launch(r->g, r->m, "faref_gather", grid, block, 0, params, err, errlen);
}
