/*
 * lce_common.c -- the framework baseline and the on-device check of the IKBO linear
 * compression benchmarks (lce_common.h says what each does; bench_ikbo_lce.c and
 * bench_serving.c use them).
 */
#include "lce_common.h"

#include "tpl_device.h"
#include "../tune/tune.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *lce_prog = "lce";

void lce_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", lce_prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

/* ---------------------------------------------------------------- the framework baseline */

/* PyTorch's two copies (index_select, cat) in CUDA C, at full bandwidth so that the
 * baseline is not slowed by them.  A thread moves 16 bytes (uint4) at a time; a block of
 * 256 threads moves 1024 consecutive units of one slab, each thread 4 of them 256 apart,
 * loads first so that four are in flight: each access of a warp covers 512 contiguous
 * bytes. */
static const char fw_src[] =
    "__device__ void copy_units(const uint4 *__restrict__ src, uint4 *__restrict__ dst, long long n)\n"
    "{\n"
    "    long long i = (long long)blockIdx.x * 1024 + threadIdx.x;\n"
    "    uint4 r[4];\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < 4; j++)\n"
    "        if (i + 256 * j < n)\n"
    "            r[j] = src[i + 256 * j];\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < 4; j++)\n"
    "        if (i + 256 * j < n)\n"
    "            dst[i + 256 * j] = r[j];\n"
    "}\n"
    "/* Eg[b] = E_user[u(b)], slabs of n units; grid (cdiv(n, 1024), B), blocks of 256 */\n"
    "extern \"C\" __global__ void __launch_bounds__(256) ikfw_index_select(const uint4 *eu, const int *map,\n"
    "        uint4 *eg, long long n)\n"
    "{\n"
    "    long long b = blockIdx.y;\n"
    "    copy_units(eu + map[b] * n, eg + b * n, n);\n"
    "}\n"
    "/* E_cat[b] = [Eg[b] (nu units) at unit 0; E_cand[b] (nc units) at unit c0], ld units a\n"
    " * candidate (the zero rows between are not touched); grid (cdiv(max(nu, nc), 1024), B, 2),\n"
    " * z picks the input, as PyTorch's batched cat copies every input in one launch */\n"
    "extern \"C\" __global__ void __launch_bounds__(256) ikfw_cat(const uint4 *eg, const uint4 *ec,\n"
    "        uint4 *ecat, long long nu, long long nc, long long c0, long long ld)\n"
    "{\n"
    "    long long b = blockIdx.y;\n"
    "    if (blockIdx.z == 0)\n"
    "        copy_units(eg + b * nu, ecat + b * ld, nu);\n"
    "    else\n"
    "        copy_units(ec + b * nc, ecat + b * ld + c0, nc);\n"
    "}\n";

void lce_fw_open(loom_runtime *rt, lce_fw *f)
{
    char err[2048];
    memset(f, 0, sizeof *f);
    if (nvref_load(rt_runtime_gpu(rt), fw_src, "ikbo_framework.cu", &f->m, err, sizeof err) != LOOM_OK)
        lce_die("the framework's copy kernels: %s", err);
    f->have_cublas = cublas_dl_open(&f->cb, f->why, sizeof f->why) == 0;
}

void lce_fw_close(loom_runtime *rt, lce_fw *f)
{
    rt_gpu_module_unload(rt_runtime_gpu(rt), f->m);
    if (f->have_cublas)
        cublas_dl_close(&f->cb);
}

const char *lce_fw_prepare(lce_fw_ctx *x, const uint16_t *wu, const uint16_t *wc)
{
    const lce_shape *s = x->s;
    if (!x->f->have_cublas)
        return x->f->why;
    if ((s->Ku * s->N) % 8 || (s->Kc * s->N) % 8)
        return "Ku*N and Kc*N must be multiples of 8 (its copies move 16 bytes a thread)";
    if (s->B > 65535)
        return "B is over 65535 (its copies' grid has a row of blocks a candidate)";
    int64_t kpu = tpl_pad8(s->Ku);
    x->kt = kpu + tpl_pad8(s->Kc);
    x->nu = s->Ku * s->N / 8;
    x->nc = s->Kc * s->N / 8;
    x->c0 = kpu * s->N / 8;
    x->ld = x->kt * s->N / 8;
    x->B = s->B;
    uint16_t *w = calloc((size_t)(s->M * x->kt), 2);
    if (!w)
        lce_die("out of host memory");
    for (int64_t m = 0; m < s->M; m++) {
        memcpy(w + m * x->kt, wu + m * s->Ku, (size_t)s->Ku * 2);
        memcpy(w + m * x->kt + kpu, wc + m * s->Kc, (size_t)s->Kc * 2);
    }
    x->wcat = loom_buffer_create(x->rt, (size_t)(s->M * x->kt) * 2);
    x->eg = loom_buffer_create(x->rt, (size_t)(s->B * s->Ku * s->N) * 2);
    x->ecat = loom_buffer_create(x->rt, (size_t)(s->B * x->kt * s->N) * 2);
    bool ok = x->wcat && x->eg && x->ecat && loom_buffer_upload(x->wcat, w, loom_buffer_size(x->wcat)) == LOOM_OK &&
              loom_buffer_fill(x->ecat, 0) == LOOM_OK;
    free(w);
    if (!ok)
        lce_die("the framework's buffers: %s", loom_runtime_error(x->rt));
    return NULL;
}

void lce_fw_release(lce_fw_ctx *x)
{
    loom_buffer_destroy(x->wcat);
    loom_buffer_destroy(x->eg);
    loom_buffer_destroy(x->ecat);
    x->wcat = x->eg = x->ecat = NULL;
}

loom_status lce_fw_once(void *c)
{
    lce_fw_ctx *x = c;
    const lce_shape *s = x->s;
    if (x->B < 1 || x->B > s->B) {
        loom_runtime_set_error(x->rt, "the framework baseline: B=%lld is outside 1 to %lld (its buffers' B)",
                               (long long)x->B, (long long)s->B);
        return LOOM_ERR_INVALID;
    }
    rt_gpu *g = rt_runtime_gpu(x->rt);
    uint64_t eu = rt_buffer_dptr(x->eu), ec = rt_buffer_dptr(x->ec), map = rt_buffer_dptr(x->map);
    uint64_t eg = rt_buffer_dptr(x->eg), ecat = rt_buffer_dptr(x->ecat);
    unsigned block[3] = {256, 1, 1};
    unsigned gi[3] = {(unsigned)((x->nu + 1023) / 1024), (unsigned)x->B, 1};
    unsigned gc[3] = {(unsigned)(((x->nu > x->nc ? x->nu : x->nc) + 1023) / 1024), (unsigned)x->B, 2};
    void *pi[] = {&eu, &map, &eg, &x->nu};
    void *pc[] = {&eg, &ec, &ecat, &x->nu, &x->nc, &x->c0, &x->ld};
    char err[1024];
    loom_status st = rt_gpu_module_launch(g, x->f->m, "ikfw_index_select", gi, block, 0, pi, err, sizeof err);
    if (st == LOOM_OK)
        st = rt_gpu_module_launch(g, x->f->m, "ikfw_cat", gc, block, 0, pc, err, sizeof err);
    if (st == LOOM_OK)
        st = cublas_dl_gemm(&x->f->cb, LOOM_F16, s->M, s->N, x->kt, x->B, rt_buffer_dptr(x->wcat), 1, ecat,
                            rt_buffer_dptr(x->out), err, sizeof err);
    if (st != LOOM_OK)
        loom_runtime_set_error(x->rt, "the framework baseline: %s", err);
    return st;
}

/* ---------------------------------------------------------------- the check */

void lce_ref_open(loom_runtime *rt, nvref_gemm *ref, const lce_shape *s, loom_buffer *dwu, loom_buffer *dwc,
                  loom_buffer *eu, loom_buffer *ec, loom_buffer *map, lce_ref *r)
{
    char err[1024];
    memset(r, 0, sizeof *r);
    r->on = true;
    r->s = *s;
    r->map = map;
    size_t nc = (size_t)(s->B * s->M * s->N), nu = (size_t)(s->U * s->M * s->N);
    r->refc = loom_buffer_create(rt, nc * 4);
    r->refu = loom_buffer_create(rt, nu * 4);
    r->absc = loom_buffer_create(rt, nc * 4);
    r->absu = loom_buffer_create(rt, nu * 4);
    r->k = ik_check_kernel(s->B, s->U, s->M, s->N, s->Ku, s->Kc, &r->grid0, &r->nparts);
    if (!r->refc || !r->refu || !r->absc || !r->absu || !r->k)
        lce_die("reference buffers: %s", r->k ? loom_runtime_error(rt) : "no check kernel for this shape");
    r->fold = tune_reduce2_kernel(r->nparts, TUNE_RED_SUM, TUNE_RED_MAX);
    r->bad = loom_buffer_create(rt, (size_t)r->nparts * 4);
    r->worst = loom_buffer_create(rt, (size_t)r->nparts * 4);
    r->two = loom_buffer_create(rt, 8);
    if (!r->fold || !r->bad || !r->worst || !r->two)
        lce_die("check buffers: %s", r->fold ? loom_runtime_error(rt) : "no fold kernel for this shape");
    if (loom_prepare(rt, r->k, NULL) != LOOM_OK || loom_prepare(rt, r->fold, NULL) != LOOM_OK)
        lce_die("the check kernels: %s", loom_runtime_error(rt));
    nvref_gemm_shape cs = {s->M, s->N, s->Kc, s->B, 1, LOOM_F16, 0}, us = {s->M, s->N, s->Ku, s->U, 1, LOOM_F16, 0};
    if (nvref_gemm_reference(ref, &cs, rt_buffer_dptr(dwc), rt_buffer_dptr(ec), rt_buffer_dptr(r->refc),
                             rt_buffer_dptr(r->absc), err, sizeof err) ||
        nvref_gemm_reference(ref, &us, rt_buffer_dptr(dwu), rt_buffer_dptr(eu), rt_buffer_dptr(r->refu),
                             rt_buffer_dptr(r->absu), err, sizeof err))
        lce_die("reference: %s", err);
    if (rt_gpu_sync(rt_runtime_gpu(rt), err, sizeof err) != LOOM_OK)
        lce_die("reference: %s", err);
}

void lce_ref_close(lce_ref *r)
{
    loom_kernel_destroy(r->k);
    loom_kernel_destroy(r->fold);
    loom_buffer *bs[] = {r->refc, r->refu, r->absc, r->absu, r->bad, r->worst, r->two};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        loom_buffer_destroy(bs[i]);
    memset(r, 0, sizeof *r);
}

void lce_ref_check(loom_runtime *rt, const lce_ref *r, loom_buffer *out, int64_t B, int64_t U, const char *what,
                   double *bad, double *worst)
{
    if (!r->on || B < 1 || B > r->s.B || U < 1 || U > r->s.U)
        lce_die("%s: the check cannot take B=%lld U=%lld (its references are for B=%lld U=%lld)", what,
                (long long)B, (long long)U, (long long)r->s.B, (long long)r->s.U);
    loom_arg a[8] = {LOOM_ARG_BUF(out),     LOOM_ARG_BUF(r->refc), LOOM_ARG_BUF(r->refu), LOOM_ARG_BUF(r->absc),
                     LOOM_ARG_BUF(r->absu), LOOM_ARG_BUF(r->map),  LOOM_ARG_BUF(r->bad),  LOOM_ARG_BUF(r->worst)};
    loom_arg f[3] = {LOOM_ARG_BUF(r->bad), LOOM_ARG_BUF(r->worst), LOOM_ARG_BUF(r->two)};
    static const int one[3] = {1, 1, 1};
    /* the first B candidates' blocks only: the others' results are cleared (bad 0, worst 0
     * add nothing to the fold's sum and max) */
    int grid[3] = {r->grid0, (int)B, 1};
    float two[2];
    if ((B < r->s.B && (loom_buffer_fill(r->bad, 0) || loom_buffer_fill(r->worst, 0))) ||
        loom_launch(rt, r->k, grid, a, 8) || loom_launch(rt, r->fold, one, f, 3) ||
        loom_buffer_download(r->two, two, sizeof two))
        lce_die("%s: the check: %s", what, loom_runtime_error(rt));
    *bad = two[0];
    *worst = two[1];
}
