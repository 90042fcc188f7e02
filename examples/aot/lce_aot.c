/*
 * lce_aot -- the IKBO linear compression's headline, run from `loomc aot`'s output alone:
 * lce.h and lce.c, generated at build time by loom_add_aot (CMakeLists.txt here), are all
 * of loom this program has.  It links neither libloom nor LLVM nor libcuda, and includes
 * no cuda.h: the generated code dlopens the CUDA driver for its kernels, and this program
 * dlopens it too, for the few calls it makes itself (device memory, copies, events).
 *
 *   out[b] = W_cand @ E_cand[b] + W_user @ E_user[u(b)]     u(b) = b * U / B
 *   B=1024 candidates, U=15 users, M=433, N=256, Ku=1178, Kc=866, f16, stage 4
 *
 * The steps, in order:
 *   1. the weights (small, host arrays) are made and lce_ikbo_lce_prepare uploads them;
 *      that first call also loads the driver and makes device 0's primary context current
 *      on this thread (none was).  Without a driver or a GPU it fails with LCE_ERR_NO_GPU:
 *      the program prints "no GPU: <why>" and exits 0, so CI runs it anywhere;
 *   2. the program's own driver table (dlopen, dlsym) and its calls, in the context
 *      prepare made current (cuCtxGetCurrent says which; the program checks there is one);
 *   3. the inputs, deterministic: every element a counter-based hash of (tensor, index),
 *      so any element can be recomputed alone; E in [-1, 1), W in [-1/32, 1/32), so an
 *      output, a sum of Ku + Kc = 2044 products, is about 0.5 (at most about 3): far inside
 *      f16's range, and large enough that its rounding is that of f16 normals;
 *   4. one run on an output poisoned with 0xFF bytes (f16 NaN), then the check: every
 *      output is not NaN (an element no tile wrote stays NaN), and 12 candidates (b = 0,
 *      b = B - 1 and ten between them, across the users), every m and n, are within
 *      tolerance of a double reference computed here from the unpadded weights;
 *   5. only then the timing: warm-up runs, then 20 runs, each after an untimed write of
 *      256 MiB (an L2 flush, as bench_ikbo_lce times stage 4), timed by CUDA events; the
 *      median is printed as "aot lce stage 4: X.XXX ms";
 *   6. the check again on one more poisoned run, after the timed ones (stage 4 keeps a
 *      counter across runs, the epoch: this shows run 27 is as right as run 1).
 *
 * Exit status: 0 when the checks pass or there is no GPU, 1 on a failed check or an error.
 */
#define _POSIX_C_SOURCE 200809L /* dlfcn.h with -std=c11 */
#include "lce.h"

#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the shape */

/* dtype 0: f16 (lce.h lists the codes) */
static const lce_ikbo_lce_shape SHAPE = {.B = 1024, .U = 15, .M = 433, .N = 256, .Ku = 1178, .Kc = 866, .dtype = 0};

enum { NSAMPLE = 12, WARMUP = 5, REPS = 20 };
#define FLUSH_BYTES ((size_t)256 << 20) /* more than twice the L2 of an H100 (50 MB) or H200 (60 MB) */

/* The check's tolerance, |out - ref| <= ATOL + RTOL |ref|.  The kernel multiplies f16 inputs
 * with f32 accumulation in its own order and writes f16: for outputs up to about 3 the
 * rounding to f16 alone is up to 2^-11 |ref| (1.5e-3) and the f32 sums add far less, so
 * 2e-2 (loom's own check of this template uses atol 2e-2) leaves a wide margin for correct
 * results, while a tile of the wrong candidate or user is off by about an output (~0.5). */
#define ATOL 2e-2
#define RTOL 2e-2

/* ---------------------------------------------------------------- f16, in plain C */

/* IEEE binary16 bits to float (exact: every half is a float). */
static float half_to_float(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    int m = h & 0x3ff;
    float v;
    if (e == 0)
        v = ldexpf((float)m, -24); /* zero and subnormals: m * 2^-24 */
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexpf((float)(m | 0x400), e - 25); /* 1.m * 2^(e-15) */
    return (h & 0x8000) ? -v : v;
}

/* float to IEEE binary16 bits, rounded to nearest even (as a GPU's cvt.rn.f16.f32). */
static uint16_t half_from_float(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: a quiet one */
        return sign | 0x7e00;
    if (ax >= 0x477ff000u) /* 65520 and up round to infinity (65504 is the largest half) */
        return sign | 0x7c00;
    if (ax < 0x38800000u) /* below 2^-14: a subnormal half, a multiple of 2^-24 */
        return sign | (uint16_t)rintf(fabsf(f) * 16777216.0f); /* exact product; rintf rounds to even */
    uint32_t r = ax - 0x38000000u; /* the exponent rebiased from 127 to 15, 23 mantissa bits */
    r += 0xfffu + ((r >> 13) & 1); /* round the 13 dropped bits to nearest even (a carry is right) */
    return sign | (uint16_t)(r >> 13);
}

/* ---------------------------------------------------------------- the inputs */

/* splitmix64's finalizer: a counter-based hash, so element i of a tensor needs no other. */
static uint64_t hash64(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Tensor t's element i, uniform in [-scale, scale), rounded to f16. */
static uint16_t input_value(uint64_t t, uint64_t i, float scale)
{
    uint64_t h = hash64(0x9e3779b97f4a7c15ull * (i + 1) + (t << 56));
    float u = (float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f; /* 24 bits: [-1, 1) exactly */
    return half_from_float(u * scale);
}

enum { T_W_USER, T_W_CAND, T_E_USER, T_E_CAND };

static void fill(uint16_t *dst, uint64_t t, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = input_value(t, i, scale);
}

/* The user of candidate b: contiguous runs of candidates per user. */
static int32_t user_of(const lce_ikbo_lce_shape *s, int64_t b) { return (int32_t)(b * s->U / s->B); }

/* ---------------------------------------------------------------- the check */

/* The sampled candidates: b = 0, b = B - 1 and n - 2 evenly between (so across the users). */
static int samples(const lce_ikbo_lce_shape *s, int64_t *b, int n)
{
    if (s->B < n)
        n = (int)s->B;
    for (int i = 0; i < n; i++)
        b[i] = n > 1 ? (int64_t)i * (s->B - 1) / (n - 1) : 0;
    return n;
}

/* ref[M, N] = W_cand @ E_cand[b] + W_user @ E_user[u(b)] in double, from the unpadded
 * weights (w_user [M, Ku], w_cand [M, Kc]) and the inputs as uploaded (f16). */
static int reference(const lce_ikbo_lce_shape *s, const uint16_t *wu, const uint16_t *wc, const uint16_t *eu,
                     const uint16_t *ec, int64_t b, double *ref)
{
    int64_t M = s->M, N = s->N, Kmax = s->Ku > s->Kc ? s->Ku : s->Kc;
    double *e = malloc((size_t)(Kmax * N) * sizeof *e);
    if (!e)
        return -1;
    for (int64_t i = 0; i < M * N; i++)
        ref[i] = 0;
    for (int half = 0; half < 2; half++) { /* the user's product, then the candidate's */
        int64_t K = half ? s->Kc : s->Ku;
        const uint16_t *w = half ? wc : wu;
        const uint16_t *x = half ? ec + b * s->Kc * N : eu + (int64_t)user_of(s, b) * s->Ku * N;
        for (int64_t i = 0; i < K * N; i++)
            e[i] = half_to_float(x[i]);
        for (int64_t m = 0; m < M; m++)
            for (int64_t q = 0; q < K; q++) {
                double a = half_to_float(w[m * K + q]);
                double *row = ref + m * N;
                const double *er = e + q * N;
                for (int64_t n = 0; n < N; n++)
                    row[n] += a * er[n];
            }
    }
    free(e);
    return 0;
}

/* Check out [B, M, N] (f16 bits): no NaN anywhere, and the sampled candidates within the
 * tolerance of ref[i] ([M, N] for sample i).  Prints one line; returns 1 when it passes. */
static int check(const char *what, const lce_ikbo_lce_shape *s, const uint16_t *out, const int64_t *b, int ns,
                 const double *ref)
{
    int64_t M = s->M, N = s->N, total = s->B * M * N, nan = 0, bad = 0;
    for (int64_t i = 0; i < total; i++)
        nan += isnan(half_to_float(out[i]));
    double maxerr = 0;
    for (int i = 0; i < ns; i++)
        for (int64_t e = 0; e < M * N; e++) {
            double r = ref[i * M * N + e], got = half_to_float(out[b[i] * M * N + e]), err = fabs(got - r);
            if (isnan(got))
                continue; /* counted above */
            if (err > maxerr)
                maxerr = err;
            if (err > ATOL + RTOL * fabs(r) && bad++ < 5)
                printf("  b=%lld m=%lld n=%lld: out %.6f, reference %.6f\n", (long long)b[i], (long long)(e / N),
                       (long long)(e % N), got, r);
        }
    int ok = nan == 0 && bad == 0;
    printf("%s: %d candidates x %lld x %lld vs a double reference: max |out - ref| %.3g, %lld outside "
           "%g + %g |ref|; %lld NaN of %lld outputs: %s\n",
           what, ns, (long long)M, (long long)N, maxerr, (long long)bad, ATOL, RTOL, (long long)nan,
           (long long)total, ok ? "ok" : "FAIL");
    return ok;
}

/* ---------------------------------------------------------------- the CUDA driver, by dlopen */

/* The driver's types this program uses, as cuda.h declares them (CUdeviceptr and CUstream
 * come from lce.h). */
typedef int cu_result; /* CUresult: 0 is CUDA_SUCCESS */
typedef int cu_device;
typedef struct CUctx_st *cu_context;
typedef struct CUevent_st *cu_event;

typedef struct driver {
    void *lib;
    cu_result (*cuCtxGetCurrent)(cu_context *);
    cu_result (*cuCtxGetDevice)(cu_device *);
    cu_result (*cuDeviceGetName)(char *, int, cu_device);
    cu_result (*cuCtxSynchronize)(void);
    cu_result (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
    cu_result (*cuMemFree_v2)(CUdeviceptr);
    cu_result (*cuMemcpyHtoD_v2)(CUdeviceptr, const void *, size_t);
    cu_result (*cuMemcpyDtoH_v2)(void *, CUdeviceptr, size_t);
    cu_result (*cuMemsetD8_v2)(CUdeviceptr, unsigned char, size_t);
    cu_result (*cuEventCreate)(cu_event *, unsigned);
    cu_result (*cuEventRecord)(cu_event, CUstream);
    cu_result (*cuEventSynchronize)(cu_event);
    cu_result (*cuEventElapsedTime)(float *, cu_event, cu_event);
    cu_result (*cuEventDestroy_v2)(cu_event);
    cu_result (*cuGetErrorName)(cu_result, const char **);
} driver;
static driver cu;

/* Open the driver (the same library the generated code opened: one driver state) and look
 * up the calls above.  Returns NULL or what failed. */
static const char *driver_open(void)
{
    static char why[256];
    cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cu.lib)
        cu.lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
    if (!cu.lib) {
        snprintf(why, sizeof why, "dlopen(libcuda.so.1): %s", dlerror());
        return why;
    }
    static const struct {
        const char *name;
        int v2; /* 1: NAME_v2 first, where the driver has it, as cuda.h maps NAME to it */
        size_t offset;
    } syms[] = {
#define SYM(f, v2) {#f, v2, offsetof(driver, f)}
        SYM(cuCtxGetCurrent, 0),    SYM(cuCtxGetDevice, 0),    SYM(cuDeviceGetName, 0), SYM(cuCtxSynchronize, 0),
        SYM(cuMemAlloc_v2, 0),      SYM(cuMemFree_v2, 0),      SYM(cuMemcpyHtoD_v2, 0), SYM(cuMemcpyDtoH_v2, 0),
        SYM(cuMemsetD8_v2, 0),      SYM(cuEventCreate, 0),     SYM(cuEventRecord, 0),   SYM(cuEventSynchronize, 0),
        SYM(cuEventElapsedTime, 1), SYM(cuEventDestroy_v2, 0), SYM(cuGetErrorName, 0), /* ElapsedTime_v2: CUDA 12.8 */
#undef SYM
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        char v2[64];
        snprintf(v2, sizeof v2, "%s_v2", syms[i].name);
        void *f = syms[i].v2 ? dlsym(cu.lib, v2) : NULL;
        if (!f)
            f = dlsym(cu.lib, syms[i].name);
        if (!f) {
            snprintf(why, sizeof why, "the CUDA driver has no %s", syms[i].name);
            return why;
        }
        memcpy((char *)&cu + syms[i].offset, &f, sizeof f);
    }
    return NULL;
}

/* Did driver call r succeed?  If not, say which call failed and how. */
static int cu_ok(cu_result r, const char *call)
{
    if (r == 0)
        return 1;
    const char *name = NULL;
    if (cu.cuGetErrorName(r, &name) != 0 || !name)
        name = "unknown error";
    fprintf(stderr, "lce_aot: %s failed: %s (%d)\n", call, name, r);
    return 0;
}
#define CU(call) cu_ok(cu.call, #call)

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* ---------------------------------------------------------------- the program */

/* One run on a poisoned output, downloaded into out. */
static int run_once(lce_ikbo_lce *op, const CUdeviceptr d[4], uint16_t *out, size_t out_bytes)
{
    lce_status st;
    memset(out, 0xff, out_bytes); /* f16 0xffff: NaN, left wherever the run writes nothing */
    if (!CU(cuMemcpyHtoD_v2(d[3], out, out_bytes)))
        return 0;
    if ((st = lce_ikbo_lce_run(op, d[0], d[1], d[2], d[3], NULL)) != LCE_OK) {
        fprintf(stderr, "lce_aot: lce_ikbo_lce_run: %s\n", lce_last_error());
        return 0;
    }
    return CU(cuCtxSynchronize()) && CU(cuMemcpyDtoH_v2(out, d[3], out_bytes));
}

/* Warm-up runs, then REPS runs each after an untimed L2 flush, timed by events; the median. */
static int time_runs(lce_ikbo_lce *op, const CUdeviceptr d[4], CUdeviceptr flush, double *median_ms)
{
    cu_event ev[2 * REPS];
    int made = 0, ok = 1;
    for (; made < 2 * REPS && ok; made++)
        ok = CU(cuEventCreate(&ev[made], 0));
    if (!ok)
        made--;
    for (int i = 0; i < WARMUP && ok; i++)
        if (lce_ikbo_lce_run(op, d[0], d[1], d[2], d[3], NULL) != LCE_OK) {
            fprintf(stderr, "lce_aot: lce_ikbo_lce_run: %s\n", lce_last_error());
            ok = 0;
        }
    for (int i = 0; i < REPS && ok; i++) {
        ok = CU(cuMemsetD8_v2(flush, (unsigned char)i, FLUSH_BYTES)) && CU(cuEventRecord(ev[2 * i], NULL));
        if (ok && lce_ikbo_lce_run(op, d[0], d[1], d[2], d[3], NULL) != LCE_OK) {
            fprintf(stderr, "lce_aot: lce_ikbo_lce_run: %s\n", lce_last_error());
            ok = 0;
        }
        ok = ok && CU(cuEventRecord(ev[2 * i + 1], NULL));
    }
    float ms[REPS];
    ok = ok && CU(cuEventSynchronize(ev[2 * REPS - 1]));
    for (int i = 0; i < REPS && ok; i++)
        ok = CU(cuEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    for (int i = 0; i < made; i++)
        cu.cuEventDestroy_v2(ev[i]);
    if (ok) {
        qsort(ms, REPS, sizeof ms[0], cmp_float);
        *median_ms = REPS % 2 ? ms[REPS / 2] : 0.5 * ((double)ms[REPS / 2 - 1] + ms[REPS / 2]);
    }
    return ok;
}

int main(void)
{
    const lce_ikbo_lce_shape *s = &SHAPE;
    int64_t B = s->B, U = s->U, M = s->M, N = s->N, Ku = s->Ku, Kc = s->Kc;
    const char *config = lce_ikbo_lce_config(s); /* needs no GPU */
    printf("lce_aot: ikbo_lce B=%lld U=%lld M=%lld N=%lld Ku=%lld Kc=%lld f16, stage 4, from loomc aot: %s\n",
           (long long)B, (long long)U, (long long)M, (long long)N, (long long)Ku, (long long)Kc,
           config ? config : lce_last_error());

    /* 1. the weights, unpadded (prepare pads them); prepare also finds the GPU, or not */
    uint16_t *wu = malloc((size_t)(M * Ku) * 2), *wc = malloc((size_t)(M * Kc) * 2);
    if (!wu || !wc) {
        fprintf(stderr, "lce_aot: out of host memory\n");
        return 1;
    }
    fill(wu, T_W_USER, (size_t)(M * Ku), 1.0f / 32);
    fill(wc, T_W_CAND, (size_t)(M * Kc), 1.0f / 32);
    lce_ikbo_lce *op = NULL;
    lce_status st = lce_ikbo_lce_prepare(s, wu, wc, &op);
    if (st == LCE_ERR_NO_GPU) {
        printf("no GPU: %s\n", lce_last_error());
        free(wu);
        free(wc);
        return 0;
    }
    if (st != LCE_OK) {
        fprintf(stderr, "lce_aot: lce_ikbo_lce_prepare: %s\n", lce_last_error());
        return 1;
    }

    /* 2. this program's driver calls, in the context prepare made current */
    const char *why = driver_open();
    if (why) {
        fprintf(stderr, "lce_aot: %s\n", why);
        return 1;
    }
    cu_context ctx = NULL;
    cu_device dev = 0;
    char name[128] = "?";
    if (!CU(cuCtxGetCurrent(&ctx)) || !ctx) {
        fprintf(stderr, "lce_aot: no current context after lce_ikbo_lce_prepare\n");
        return 1;
    }
    if (CU(cuCtxGetDevice(&dev)))
        CU(cuDeviceGetName(name, sizeof name, dev));
    printf("device %d: %s\n", dev, name);

    /* 3. the inputs */
    size_t n_eu = (size_t)(U * Ku * N), n_ec = (size_t)(B * Kc * N), n_out = (size_t)(B * M * N);
    uint16_t *eu = malloc(n_eu * 2), *ec = malloc(n_ec * 2), *out = malloc(n_out * 2);
    int32_t *map = malloc((size_t)B * sizeof *map);
    int64_t sb[NSAMPLE];
    int ns = samples(s, sb, NSAMPLE);
    double *ref = malloc((size_t)(ns * M * N) * sizeof *ref);
    if (!eu || !ec || !out || !map || !ref) {
        fprintf(stderr, "lce_aot: out of host memory\n");
        return 1;
    }
    fill(eu, T_E_USER, n_eu, 1.0f);
    fill(ec, T_E_CAND, n_ec, 1.0f);
    for (int64_t b = 0; b < B; b++)
        map[b] = user_of(s, b);
    const size_t bytes[4] = {n_eu * 2, n_ec * 2, (size_t)B * sizeof *map, n_out * 2};
    const void *host[4] = {eu, ec, map, NULL}; /* out: poisoned before each run */
    CUdeviceptr d[4] = {0}, flush = 0;
    int ok = 1;
    for (int i = 0; i < 4 && ok; i++)
        ok = CU(cuMemAlloc_v2(&d[i], bytes[i])) && (!host[i] || CU(cuMemcpyHtoD_v2(d[i], host[i], bytes[i])));

    /* 4. one run, checked */
    for (int i = 0; i < ns && ok; i++)
        if (reference(s, wu, wc, eu, ec, sb[i], ref + i * M * N) != 0) {
            fprintf(stderr, "lce_aot: out of host memory\n");
            ok = 0;
        }
    ok = ok && run_once(op, d, out, bytes[3]) && check("check", s, out, sb, ns, ref);

    /* 5. timed, only once it is right; 6. checked again after the timed runs */
    double med = 0;
    if (ok && CU(cuMemAlloc_v2(&flush, FLUSH_BYTES)) && time_runs(op, d, flush, &med)) {
        printf("aot lce stage 4: %.3f ms (median of %d runs, each after an L2 flush; %d warm-up runs)\n", med,
               REPS, WARMUP);
        ok = run_once(op, d, out, bytes[3]) && check("check after the timed runs", s, out, sb, ns, ref);
    } else {
        ok = 0;
    }

    if (flush)
        cu.cuMemFree_v2(flush);
    for (int i = 0; i < 4; i++)
        if (d[i])
            cu.cuMemFree_v2(d[i]);
    lce_ikbo_lce_destroy(op);
    lce_unload();
    free(wu);
    free(wc);
    free(eu);
    free(ec);
    free(out);
    free(map);
    free(ref);
    printf("lce_aot: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
