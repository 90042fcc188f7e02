/*
 * bench_aot.c -- the IKBO LCE headline run by loom (loom_ikbo_lce_run, JIT) and by the
 * files `loomc aot` wrote for it (ba_lce_ikbo_lce_run, generated at build time:
 * CMakeLists.txt), in one process on the same buffers and the same config: the outputs
 * must be bit-identical, and the times are printed side by side (issue: AOT within 2% of
 * the JIT path).
 *
 *   bench_aot [--reps N]    N timed runs a round (default 50); three rounds, alternating
 *
 * Each round is loom_time_work's median (an L2 flush before every run, none timed).  The
 * figure per path is the median of its rounds.  Without a GPU it says so and exits 0.
 */
#include "loom.h"
#include "loom_ikbo.h"
#include "rt.h"

#include "ba_lce.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIE(...) (fprintf(stderr, "bench_aot: " __VA_ARGS__), fputc('\n', stderr), exit(1))

static const loom_ikbo_lce_shape S = {1024, 15, 433, 256, 1178, 866, LOOM_F16, LOOM_F16};

typedef struct ctx {
    loom_ikbo_lce *jit;
    ba_lce_ikbo_lce *aot;
    loom_buffer *eu, *ec, *map, *out;
    loom_runtime *rt;
} ctx;

static loom_status run_jit(void *p)
{
    ctx *c = p;
    return loom_ikbo_lce_run(c->jit, c->eu, c->ec, c->map, c->out);
}

static loom_status run_aot(void *p)
{
    ctx *c = p;
    if (ba_lce_ikbo_lce_run(c->aot, rt_buffer_dptr(c->eu), rt_buffer_dptr(c->ec), rt_buffer_dptr(c->map),
                            rt_buffer_dptr(c->out), NULL) != BA_LCE_OK) {
        loom_runtime_set_error(c->rt, "ba_lce_ikbo_lce_run: %s", ba_lce_last_error());
        return LOOM_ERR_CUDA;
    }
    return LOOM_OK;
}

/* f16 bits of a value in [-scale, scale) from a counter hash: deterministic, never zero
 * everywhere. */
static void fill_f16(uint16_t *p, size_t n, uint64_t seed, float scale)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull + seed;
        x ^= x >> 31, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 29;
        float f = scale * ((float)(x >> 40) / (float)(1u << 24) * 2 - 1);
        /* f16 of f: |f| < 1, so a normal or subnormal half; round to nearest by the float's bits */
        uint32_t u;
        memcpy(&u, &f, 4);
        uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
        int e = (int)((u >> 23) & 0xff) - 127 + 15;
        uint32_t m = u & 0x7fffff;
        p[i] = e <= 0 ? sign : (uint16_t)(sign | (e << 10) | ((m + 0x1000) >> 13));
    }
}

static loom_buffer *dev(loom_runtime *rt, const void *h, size_t n)
{
    loom_buffer *b = loom_buffer_create(rt, n);
    if (!b || (h && loom_buffer_upload(b, h, n) != LOOM_OK))
        DIE("a buffer of %zu bytes: %s", n, loom_runtime_error(rt));
    return b;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int reps = 50;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else
            DIE("usage: bench_aot [--reps N]");
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        printf("bench_aot: no GPU (%s)\n", rt ? loom_runtime_error(rt) : "out of memory");
        loom_runtime_destroy(rt);
        return 0;
    }
    ba_lce_ikbo_lce_shape as = {S.B, S.U, S.M, S.N, S.Ku, S.Kc, S.dtype, LOOM_F16};
    const char *ctext = ba_lce_ikbo_lce_config(&as);
    if (!ctext)
        DIE("%s", ba_lce_last_error());
    const loom_template *t = loom_template_find("ikbo_lce");
    int64_t cf[LOOM_MAX_PARAMS];
    char err[400];
    if (loom_params_parse(t->config, t->nconfig, ctext, cf, err, sizeof err))
        DIE("%s", err);
    loom_ikbo_lce_config cfg = {(int)cf[0], (int)cf[1], (int)cf[2], (int)cf[3], (int)cf[4], (int)cf[5], (int)cf[6],
                                (int)cf[7]};
    size_t nwu = (size_t)(S.M * S.Ku), nwc = (size_t)(S.M * S.Kc), neu = (size_t)(S.U * S.Ku * S.N),
           nec = (size_t)(S.B * S.Kc * S.N), nout = (size_t)(S.B * S.M * S.N);
    uint16_t *wu = malloc(nwu * 2), *wc = malloc(nwc * 2), *eu = malloc(neu * 2), *ec = malloc(nec * 2);
    int32_t *map = malloc((size_t)S.B * 4);
    if (!wu || !wc || !eu || !ec || !map)
        DIE("out of host memory");
    fill_f16(wu, nwu, 1, 1.f / 32), fill_f16(wc, nwc, 2, 1.f / 32), fill_f16(eu, neu, 3, 1), fill_f16(ec, nec, 4, 1);
    for (int64_t b = 0; b < S.B; b++)
        map[b] = (int32_t)(b * S.U / S.B);
    ctx c = {.rt = rt};
    c.eu = dev(rt, eu, neu * 2), c.ec = dev(rt, ec, nec * 2), c.map = dev(rt, map, (size_t)S.B * 4);
    c.out = dev(rt, NULL, nout * 2);
    if (loom_ikbo_lce_prepare(rt, &S, LOOM_IKBO_PERSISTENT, wu, wc, &cfg, &c.jit) != LOOM_OK)
        DIE("loom_ikbo_lce_prepare: %s", loom_runtime_error(rt));
    if (ba_lce_ikbo_lce_prepare(&as, wu, wc, &c.aot) != BA_LCE_OK)
        DIE("ba_lce_ikbo_lce_prepare: %s", ba_lce_last_error());
    /* the outputs, before any timing: bit-identical, and not all zero */
    uint16_t *hj = malloc(nout * 2), *ha = malloc(nout * 2);
    if (!hj || !ha)
        DIE("out of host memory");
    if (loom_buffer_fill(c.out, 0xff) || run_jit(&c) || loom_buffer_download(c.out, hj, nout * 2) ||
        loom_buffer_fill(c.out, 0xff) || run_aot(&c) || loom_buffer_download(c.out, ha, nout * 2))
        DIE("%s", loom_runtime_error(rt));
    size_t nonzero = 0, nan = 0;
    for (size_t i = 0; i < nout; i++)
        nonzero += (hj[i] & 0x7fff) != 0, nan += (hj[i] & 0x7c00) == 0x7c00;
    int same = !memcmp(hj, ha, nout * 2);
    double rj[3], ra[3];
    for (int r = 0; r < 3; r++) {
        if (loom_time_work(rt, run_jit, &c, 3, reps, &rj[r]) || loom_time_work(rt, run_aot, &c, 3, reps, &ra[r]))
            DIE("timing: %s", loom_runtime_error(rt));
    }
    qsort(rj, 3, sizeof rj[0], cmp_double), qsort(ra, 3, sizeof ra[0], cmp_double);
    printf("bench_aot: IKBO LCE stage 4 at B=%lld,U=%lld,M=%lld,N=%lld,Ku=%lld,Kc=%lld f16, %s, on %s\n",
           (long long)S.B, (long long)S.U, (long long)S.M, (long long)S.N, (long long)S.Ku, (long long)S.Kc, ctext,
           loom_runtime_device_name(rt));
    printf("  %-44s %8.4f ms  (rounds %.4f %.4f %.4f)\n", "loom_ikbo_lce_run (JIT)", rj[1], rj[0], rj[1], rj[2]);
    printf("  %-44s %8.4f ms  (rounds %.4f %.4f %.4f)\n", "ba_lce_ikbo_lce_run (loomc aot)", ra[1], ra[0], ra[1],
           ra[2]);
    printf("  aot / jit: %.4f;  outputs %s (%zu of %zu nonzero, %zu NaN or Inf)\n", ra[1] / rj[1],
           same ? "bit-identical" : "DIFFER", nonzero, nout, nan);
    ba_lce_ikbo_lce_destroy(c.aot);
    loom_ikbo_lce_destroy(c.jit);
    loom_buffer_destroy(c.eu), loom_buffer_destroy(c.ec), loom_buffer_destroy(c.map), loom_buffer_destroy(c.out);
    free(wu), free(wc), free(eu), free(ec), free(map), free(hj), free(ha);
    loom_runtime_destroy(rt);
    return same && nonzero && !nan ? 0 : 1;
}
