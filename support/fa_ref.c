/*
 * fa_ref.c -- what the IKBO flash attention is checked and compared with (see fa_ref.h):
 * the check by the error model, made of the ikbo_fa template's device reference and bound
 * kernels (templates/ikbo_fa_registry.c) and the tuner's comparison kernel; and the gather
 * of the materialized baseline, written the plainest way in CUDA C.
 */
#include "fa_ref.h"
#include "rt.h"
#include "../templates/ikbo_fa.h"
#include "../templates/tpl_device.h"
#include "../tune/tune.h"

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
    "/* the independent reference: one thread per (row, head), rows fastest so that a warp's\n"
    " * rows share their user's keys; an online softmax in f32 (expf), no loom code */\n"
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
    "/* the device reference (dt) against the independent one (f32) within the bound: stats\n"
    " * [0] elements past it (NaN: past), [1] the first of them (min) */\n"
    "extern \"C\" __global__ void faref_agree(const void *dref, const float *ref32, const float *bound, long long n,\n"
    "        int dt, unsigned long long *stats)\n"
    "{\n"
    "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
    "         i += (long long)gridDim.x * blockDim.x) {\n"
    "        float e = fabsf(ld(dref, dt, i) - ref32[i]);\n"
    "        if (!(e <= bound[i])) { atomicAdd(&stats[0], 1ull); atomicMin(&stats[1], (unsigned long long)i); }\n"
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
    if (r->m)
        rt_gpu_module_unload(r->g, r->m);
    free(r);
}

loom_status faref_gather(fa_ref *r, uint64_t src, uint64_t map, uint64_t dst, int64_t B, int64_t bytes, char *err,
                         size_t errlen)
{
    long long n = (long long)(bytes / 16);
    void *params[] = {&src, &map, &dst, &n};
    unsigned grid[3] = {(unsigned)((n + 1023) / 1024), (unsigned)B, 1}, block[3] = {256, 1, 1};
    return rt_gpu_module_launch(r->g, r->m, "faref_gather", grid, block, 0, params, err, errlen);
}

/* ---------------------------------------------------------------- the check by the model */

static loom_buffer *model_buffer(faref_model *m, size_t bytes, char *err, size_t errlen)
{
    loom_buffer *b = loom_buffer_create(m->rt, bytes ? bytes : 1);
    if (!b)
        snprintf(err, errlen, "allocating %zu bytes: %s", bytes, loom_runtime_error(m->rt));
    return b;
}

/* The device reference against the NVRTC attention (no loom code) within the bound: the
 * model's reference is itself checked by an independent one at every use. */
static loom_status cross_check(fa_ref *r, faref_model *m, const loom_ikbo_fa_shape *sh, loom_buffer *q,
                               loom_buffer *k, loom_buffer *v, const int32_t *map, const int32_t *lens, char *err,
                               size_t errlen)
{
    rt_gpu *g = r->g;
    uint64_t ref32 = 0, dmap = 0, dlens = 0, stats = 0;
    long long rows = (long long)(sh->B * sh->n_seed), n = (long long)m->n;
    int U = (int)sh->U, S = (int)sh->S, H = (int)sh->H, D = (int)sh->D, ns = (int)sh->n_seed;
    int dt = m->dt == LOOM_F16 ? 0 : 1;
    unsigned long long host[2] = {0, ~0ull};
    loom_status st = LOOM_OK;
    if (sh->D > 256) {
        snprintf(err, errlen, "the NVRTC attention takes D up to 256, not %lld", (long long)sh->D);
        return LOOM_ERR_INVALID;
    }
    if ((st = rt_gpu_alloc(g, (size_t)n * 4, &ref32, err, errlen)) != LOOM_OK ||
        (st = rt_gpu_alloc(g, (size_t)sh->B * 4, &dmap, err, errlen)) != LOOM_OK ||
        (sh->varlen && (st = rt_gpu_alloc(g, (size_t)sh->U * 4, &dlens, err, errlen)) != LOOM_OK) ||
        (st = rt_gpu_alloc(g, sizeof host, &stats, err, errlen)) != LOOM_OK ||
        (st = rt_gpu_htod(g, dmap, map, (size_t)sh->B * 4, err, errlen)) != LOOM_OK ||
        (sh->varlen && (st = rt_gpu_htod(g, dlens, lens, (size_t)sh->U * 4, err, errlen)) != LOOM_OK) ||
        (st = rt_gpu_htod(g, stats, host, sizeof host, err, errlen)) != LOOM_OK)
        goto done;
    uint64_t dq = rt_buffer_dptr(q), dk = rt_buffer_dptr(k), dv = rt_buffer_dptr(v);
    uint64_t dref = rt_buffer_dptr(m->ref), dbound = rt_buffer_dptr(m->bound);
    void *pa[] = {&dq, &dk, &dv, &dmap, &dlens, &ref32, &rows, &U, &S, &H, &D, &ns, &dt};
    unsigned ga[3] = {(unsigned)((rows * H + 127) / 128), 1, 1}, ba[3] = {128, 1, 1};
    void *pc[] = {&dref, &ref32, &dbound, &n, &dt, &stats};
    unsigned gc[3] = {1024, 1, 1}, bc[3] = {256, 1, 1};
    if ((st = rt_gpu_module_launch(g, r->m, "faref_attention", ga, ba, 0, pa, err, errlen)) != LOOM_OK ||
        (st = rt_gpu_module_launch(g, r->m, "faref_agree", gc, bc, 0, pc, err, errlen)) != LOOM_OK ||
        (st = rt_gpu_dtoh(g, host, stats, sizeof host, err, errlen)) != LOOM_OK)
        goto done;
    if (host[0]) {
        snprintf(err, errlen, "the device reference differs from the independent NVRTC attention at %llu elements "
                 "past their bound (the first %llu): a bug in the reference", host[0], host[1]);
        st = LOOM_ERR_RUNTIME;
    }
done:
    if (ref32)
        rt_gpu_free(g, ref32);
    if (dmap)
        rt_gpu_free(g, dmap);
    if (dlens)
        rt_gpu_free(g, dlens);
    if (stats)
        rt_gpu_free(g, stats);
    return st;
}

loom_status faref_model_open(loom_runtime *rt, fa_ref *indep, const loom_ikbo_fa_shape *sh, loom_buffer *q,
                             loom_buffer *k, loom_buffer *v, const int32_t *map, const int32_t *lens, faref_model *m,
                             char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->rt = rt;
    m->dt = sh->dtype;
    const loom_template *t = loom_template_find("ikbo_fa");
    const tpl_device *d = t ? tpl_device_find(t) : NULL;
    if (!d || !d->bound) {
        snprintf(err, errlen, "the ikbo_fa template has no device reference and bound");
        return LOOM_ERR_INVALID;
    }
    /* the template's shape (shuffle only chooses a check's own mapping: not read here; the
     * keys after it, odt and vtrans, are 0: out in the inputs' type, V as [U, S, H, D]);
     * the reference has no config */
    int64_t shape[LOOM_MAX_PARAMS] = {sh->B, sh->U, sh->S, sh->H, sh->D, sh->n_seed, sh->dtype, sh->varlen, 0};
    fa_spec s = fa_spec_of_shape(shape);
    int rg[3], bg[3];
    loom_status st = LOOM_OK;
    int32_t *plan = NULL, *l = NULL;
    int64_t mu = fa_max_units(&s), units = 0;
    if (d->reference(shape, &m->refk, &rg, 1, err, errlen) != 1) {
        st = LOOM_ERR_INVALID;
        goto fail;
    }
    if (!(m->bndk = d->bound(shape, bg))) {
        snprintf(err, errlen, "the ikbo_fa device bound cannot serve the shape");
        st = LOOM_ERR_INVALID;
        goto fail;
    }
    m->n = fa_rows(&s) * s.H * s.D;
    if (!(m->cmp = tune_compare_kernel(m->dt, m->n, true, &m->cg)) ||
        (m->cg > 1 && !(m->red = tune_reduce2_kernel(m->cg, TUNE_RED_SUM, TUNE_RED_MAX)))) {
        snprintf(err, errlen, "the comparison kernels at %lld elements", (long long)m->n);
        st = LOOM_ERR_INVALID;
        goto fail;
    }
    plan = calloc((size_t)(mu * FA_UNIT_FIELDS), 4), l = malloc((size_t)sh->U * 4);
    if (!plan || !l) {
        snprintf(err, errlen, "out of host memory");
        st = LOOM_ERR_NOMEM;
        goto fail;
    }
    for (int64_t u = 0; u < sh->U; u++)
        l[u] = sh->varlen ? lens[u] : (int32_t)sh->S;
    if ((units = fa_plan(&s, map, l, plan, err, errlen)) < 0) {
        st = LOOM_ERR_INVALID;
        goto fail;
    }
    size_t e = loom_dtype_size(m->dt);
    if (!(m->plan = model_buffer(m, (size_t)(mu * FA_UNIT_FIELDS) * 4, err, errlen)) ||
        !(m->lens = model_buffer(m, (size_t)sh->U * 4, err, errlen)) ||
        !(m->claims = model_buffer(m, 8, err, errlen)) ||
        !(m->ref = model_buffer(m, (size_t)m->n * e, err, errlen)) ||
        !(m->bound = model_buffer(m, (size_t)m->n * 4, err, errlen)) ||
        !(m->cbad = model_buffer(m, (size_t)m->cg * 4, err, errlen)) ||
        !(m->cmax = model_buffer(m, (size_t)m->cg * 4, err, errlen)) || !(m->csum = model_buffer(m, 8, err, errlen))) {
        st = LOOM_ERR_NOMEM;
        goto fail;
    }
    /* the reference poisoned first: a row it leaves unwritten fails every check */
    if ((st = loom_buffer_upload(m->plan, plan, (size_t)(mu * FA_UNIT_FIELDS) * 4)) != LOOM_OK ||
        (st = loom_buffer_upload(m->lens, l, (size_t)sh->U * 4)) != LOOM_OK ||
        (st = loom_buffer_fill(m->claims, 0)) != LOOM_OK || (st = loom_buffer_fill(m->ref, 0xff)) != LOOM_OK) {
        snprintf(err, errlen, "the model's inputs: %s", loom_runtime_error(rt));
        goto fail;
    }
    /* the template kernel's arguments (rows, users, Q, K, V, plan, lens, claims, units, out),
     * then the bound kernel's bound */
    loom_arg a[] = {LOOM_ARG_I32((int32_t)fa_rows(&s)), LOOM_ARG_I32((int32_t)sh->U), LOOM_ARG_BUF(q),
                    LOOM_ARG_BUF(k), LOOM_ARG_BUF(v), LOOM_ARG_BUF(m->plan), LOOM_ARG_BUF(m->lens),
                    LOOM_ARG_BUF(m->claims), LOOM_ARG_I32((int32_t)units), LOOM_ARG_BUF(m->ref),
                    LOOM_ARG_BUF(m->bound)};
    if ((st = loom_launch(rt, m->refk, rg, a, 10)) != LOOM_OK ||
        (st = loom_launch(rt, m->bndk, bg, a, 11)) != LOOM_OK) {
        snprintf(err, errlen, "the device reference and its bound: %s", loom_runtime_error(rt));
        goto fail;
    }
    if (indep && (st = cross_check(indep, m, sh, q, k, v, map, lens, err, errlen)) != LOOM_OK)
        goto fail;
    free(plan), free(l);
    return LOOM_OK;
fail:
    free(plan), free(l);
    faref_model_close(m);
    return st;
}

loom_status faref_model_check(faref_model *m, loom_buffer *out, double *bad, double *maxerr, char *err,
                              size_t errlen)
{
    loom_arg ca[] = {LOOM_ARG_BUF(out),  LOOM_ARG_BUF(m->ref),  LOOM_ARG_BUF(m->bound), LOOM_ARG_F32(0.0f),
                     LOOM_ARG_F32(0.0f), LOOM_ARG_BUF(m->cbad), LOOM_ARG_BUF(m->cmax)};
    loom_arg ra[] = {LOOM_ARG_BUF(m->cbad), LOOM_ARG_BUF(m->cmax), LOOM_ARG_BUF(m->csum)};
    int cg[3] = {m->cg, 1, 1};
    static const int one[3] = {1, 1, 1};
    float two[2];
    loom_status st = loom_launch(m->rt, m->cmp, cg, ca, 7); /* atol = rtol = 0: the bound alone */
    if (st == LOOM_OK && m->red) {
        if ((st = loom_launch(m->rt, m->red, one, ra, 3)) == LOOM_OK)
            st = loom_buffer_download(m->csum, two, sizeof two);
    } else if (st == LOOM_OK) {
        if ((st = loom_buffer_download(m->cbad, &two[0], 4)) == LOOM_OK)
            st = loom_buffer_download(m->cmax, &two[1], 4);
    }
    if (st != LOOM_OK) {
        snprintf(err, errlen, "the comparison: %s", loom_runtime_error(m->rt));
        return st;
    }
    *bad = two[0];
    *maxerr = two[1];
    return LOOM_OK;
}

void faref_model_close(faref_model *m)
{
    loom_kernel *ks[] = {m->refk, m->bndk, m->cmp, m->red};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        loom_kernel_destroy(ks[i]);
    loom_buffer *bs[] = {m->plan, m->lens, m->claims, m->ref, m->bound, m->cbad, m->cmax, m->csum};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        loom_buffer_destroy(bs[i]);
    memset(m, 0, sizeof *m);
}
