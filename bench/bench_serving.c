/*
 * bench_serving.c -- the IKBO linear compression as a service sees it (../shared/BENCH.md,
 * "Serving: a stream of requests"): one model, prepared once, then a stream of requests,
 * each with its own number of candidates B, of users U and its own mapping, each timed on
 * loom and on the framework path in the same process.
 *
 *   bench_serving                      1000 requests of the headline model (M=433, N=256,
 *                                      Ku=1178, Kc=866, f16), B uniform in [1, 4096], U
 *                                      uniform in [1, min(64, B)], seed 1
 *   --requests N                       how many requests (1 to 100000)
 *   --bmax B, --umax U                 the largest B (1 to 65535) and U
 *   --shape M=..,N=..,Ku=..,Kc=..      another model (N a multiple of 8)
 *   --check K                          requests checked after the stream (default 32; 0: none)
 *   --seed S                           the requests' random seed
 *   --bucket-min K                     every bucket of B gets at least K requests (default 40;
 *                                      0: the uniform draw alone)
 *   --tuned                            loom's config left to the tuner (per bucket) instead
 *                                      of the default config
 *   without a GPU: says so and exits 0 (there is nothing to time)
 *
 * The requests: B uniform in [1, Bmax], U uniform in [1, min(Umax, B)], the mapping a
 * random user in [0, U) for each candidate with every user used at least once (users 0 to
 * U-1 take one candidate each, the rest draw at random, then the whole is shuffled); a
 * uniform draw leaves the small buckets of B nearly empty, so each bucket short of
 * --bucket-min requests gets more, of B uniform within it, and the stream is shuffled.  The inputs live on the device at the
 * maxima, filled once with random f16 in [-1, 1) (the weights on the host, as the C API
 * takes them): a request reads the first B candidates of E_cand and the first U users of
 * E_user, and writes the first B rows of out.  Its mapping is uploaded before its timed
 * region (untimed, the same for both paths).
 *
 * loom: loom_ikbo_lce_prepare once at the maxima with LOOM_IKBO_AUTO and the default config
 * (--tuned: no config, the tuner's per bucket), as a service calls it: on a GPU the stage
 * (and with --tuned the config) is picked per power-of-two bucket of B
 * (ops/ikbo_lce_api.c), so a cold start compiles each stage's kernels once.  Its wall time, the kernels it built and
 * compiled (loom_stats) and loom_ikbo_lce_describe are printed.  Each request then runs
 * loom_ikbo_lce_run_at(B, U): nothing may be built or compiled from the warm-up to the
 * end of the checks (counted with loom_stats; any compile fails the run).
 * The framework: bench/lce_common.c's index_select + cat copies and cuBLAS batched GEMM,
 * its buffers made once at Bmax, each run at the request's B.
 *
 * Timing: per request, each path's run between two CUDA events on the default stream,
 * synchronized per request (rt_gpu_time_each): the device time from the moment the host
 * starts issuing the request's launches to the end of its last kernel, so the host's
 * launch path counts.  The L2 is not flushed between requests (a stream of requests: what
 * one leaves in cache the next may find); the two paths take turns going first (even
 * requests loom first, odd ones the framework).  The table is the steady state of a
 * service that has seen its shapes: before the stream, the first request of each distinct
 * B runs once on both paths, timed but apart (cuBLAS loads a kernel the first time its
 * heuristic picks it, 2 to 4 ms on an H100, which would otherwise land in the framework's
 * p99); the slowest of those is printed for each path.  Printed: p50 and p99 (nearest
 * rank) per request for both paths, per bucket of B (each bucket (2^(k-1), 2^k], the last
 * one ending at Bmax, as loom's) and overall, with the ratio of the p50s and the stage
 * loom runs in the bucket, and the sums over the stream.
 *
 * Checks: K requests (default 32), drawn round-robin over the buckets that have requests
 * (a random request of each in turn), are run again after the stream, in stream order, on
 * both paths, each output first poisoned (NaN bytes) over the request's rows and two rows
 * past them, then checked element by element by the error model (bench/lce_common.c:
 * ik_lce_bound against the NVRTC naive f32 references of the two halves, computed once
 * for the whole inputs), and the two rows past the request's B must still hold the poison
 * (a request writes only its own rows).  The worst |err| / bound is printed.
 *
 * Cold and warm (run it twice, each a fresh process, with the same LOOM_CACHE_DIR):
 *   LOOM_CACHE_DIR=$(mktemp -d) bench_serving   cold: an empty module and tuning cache, so
 *                                               prepare times the stages of every bucket and
 *                                               compiles each stage's kernels once (with
 *                                               --tuned it also tunes every bucket): its
 *                                               printed wall time and compile count are the
 *                                               cold start
 *   bench_serving (the same LOOM_CACHE_DIR)     warm: prepare reads the configs, the picks
 *                                               and the cubins from the cache: it compiles 0
 *                                               kernels, and its wall time is the warm start
 * Either way the request path compiles nothing.  scripts/gpu.sh runs both.
 *
 * Exit status: 0 when every check passed and the request path compiled nothing (or
 * without a GPU), 1 when a check failed or something was compiled or built in the request
 * path, 2 on a usage or set-up error (a message says which).
 */
#include "ikbo_lce.h"
#include "lce_op.h" /* ik_default_config */
#include "lce_common.h"
#include "tpl_device.h"
#include "../util/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUCKETS 20

/* A request: its dims, the seed of its mapping, and each path's time (ms). */
typedef struct request {
    int64_t B, U;
    uint64_t mseed;
    int bucket;
    double loom_ms, fw_ms;
} request;

/* What a timed run needs: both paths and the request's dims. */
typedef struct req_ctx {
    loom_runtime *rt;
    loom_ikbo_lce *p;
    lce_fw_ctx *fw;
    loom_buffer *eu, *ec, *map, *out_loom;
    int64_t B, U;
} req_ctx;

static int failures;

static loom_status loom_work(void *c, char *err, size_t n)
{
    req_ctx *x = c;
    loom_status st = loom_ikbo_lce_run_at(x->p, x->B, x->U, x->eu, x->ec, x->map, x->out_loom);
    if (st != LOOM_OK)
        snprintf(err, n, "loom: %s", loom_runtime_error(x->rt));
    return st;
}

static loom_status fw_work(void *c, char *err, size_t n)
{
    req_ctx *x = c;
    x->fw->B = x->B;
    loom_status st = lce_fw_once(x->fw);
    if (st != LOOM_OK)
        snprintf(err, n, "%s", loom_runtime_error(x->rt));
    return st;
}

/* Request r's mapping into map[0, B): users 0 to U-1 once each, the other candidates a
 * random user, shuffled. */
static void make_mapping(const request *r, int32_t *map)
{
    uint64_t st = r->mseed;
    for (int64_t b = 0; b < r->B; b++)
        map[b] = b < r->U ? (int32_t)b : (int32_t)(tpl_rand(&st) % (uint64_t)r->U);
    for (int64_t b = r->B - 1; b > 0; b--) {
        int64_t j = (int64_t)(tpl_rand(&st) % (uint64_t)(b + 1));
        int32_t t = map[b];
        map[b] = map[j];
        map[j] = t;
    }
}

static void upload_mapping(loom_runtime *rt, loom_buffer *dmap, const int32_t *map, int64_t B)
{
    if (loom_buffer_upload(dmap, map, (size_t)B * 4) != LOOM_OK)
        lce_die("uploading a mapping: %s", loom_runtime_error(rt));
}

/* One timed run of work (a request on one path): the device time between its events. */
static double time_one(rt_gpu *g, rt_gpu_work_fn work, req_ctx *x, const char *what, int64_t i)
{
    char err[1024];
    double ms = 0;
    if (rt_gpu_time_each(g, NULL, work, x, 1, &ms, err, sizeof err) != LOOM_OK)
        lce_die("request %lld (B=%lld U=%lld), %s: %s", (long long)i, (long long)x->B, (long long)x->U, what, err);
    return ms;
}

/* Request i on both paths, timed apart, its mapping uploaded first (untimed); the paths
 * take turns going first (even requests loom first). */
static void run_request(rt_gpu *g, req_ctx *x, const request *r, long long i, bool have_fw, int32_t *hmap,
                        double *loom_ms, double *fw_ms)
{
    make_mapping(r, hmap);
    upload_mapping(x->rt, x->map, hmap, r->B);
    x->B = r->B;
    x->U = r->U;
    for (int turn = 0; turn < 2; turn++) {
        bool fw_now = (turn == 0) == (i % 2 == 1);
        if (!fw_now)
            *loom_ms = time_one(g, loom_work, x, "loom", i);
        else if (have_fw)
            *fw_ms = time_one(g, fw_work, x, "framework", i);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The nearest-rank percentile q (0 < q <= 100) of v[0, n), n >= 1 (v is sorted). */
static double percentile(const double *v, int n, double q)
{
    int k = (int)ceil(q / 100.0 * n) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

/* p50 and p99 of the times of the requests in bucket b (b < 0: all), loom's or the
 * framework's; returns how many there were. */
static int stats_of(const request *rq, int n, int b, int fw, double *tmp, double *p50, double *p99)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (b < 0 || rq[i].bucket == b)
            tmp[m++] = fw ? rq[i].fw_ms : rq[i].loom_ms;
    if (m == 0)
        return 0;
    qsort(tmp, (size_t)m, sizeof *tmp, cmp_double);
    *p50 = percentile(tmp, m, 50);
    *p99 = percentile(tmp, m, 99);
    return m;
}

/* The rows [B, B + extra) of out, poisoned before the run, must still hold the poison. */
static bool rows_untouched(rt_gpu *g, loom_buffer *out, int64_t B, int64_t extra, int64_t mn, uint16_t *host)
{
    char err[1024];
    if (extra <= 0)
        return true;
    size_t n = (size_t)(extra * mn);
    if (rt_gpu_dtoh(g, host, rt_buffer_dptr(out) + (uint64_t)(B * mn) * 2, n * 2, err, sizeof err) != LOOM_OK)
        lce_die("reading rows past B back: %s", err);
    for (size_t i = 0; i < n; i++)
        if (host[i] != 0xffff)
            return false;
    return true;
}

static void parse_shape(char *arg, lce_shape *s)
{
    for (char *t = strtok(arg, ","); t; t = strtok(NULL, ",")) {
        long long v;
        char key[8];
        if (sscanf(t, "%7[^=]=%lld", key, &v) != 2)
            lce_die("bad --shape item '%s'", t);
        int64_t *f = !strcmp(key, "M") ? &s->M : !strcmp(key, "N") ? &s->N : !strcmp(key, "Ku") ? &s->Ku
                   : !strcmp(key, "Kc") ? &s->Kc : NULL;
        if (!f)
            lce_die("unknown --shape key '%s' (M, N, Ku, Kc; B and U are --bmax and --umax)", key);
        *f = v;
    }
}

static long long int_arg(const char *opt, const char *v, long long lo, long long hi)
{
    char *end;
    long long x = strtoll(v, &end, 0);
    if (!*v || *end || x < lo || x > hi)
        lce_die("%s takes a whole number from %lld to %lld, not '%s'", opt, lo, hi, v);
    return x;
}

int main(int argc, char **argv)
{
    lce_prog = "bench_serving";
    lce_shape mx = {4096, 64, 433, 256, 1178, 866}; /* B and U: the maxima */
    long long nreq = 1000, ncheck = 32;
    uint64_t seed = 1;
    int tuned = 0, per_bucket = 40;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--tuned")) {
            tuned = 1;
            continue;
        }
        if (i + 1 >= argc || strncmp(a, "--", 2)) {
            fprintf(stderr, "usage: bench_serving [--requests N] [--bmax B] [--umax U] [--shape M=..,N=..,Ku=..,Kc=..] "
                            "[--check K] [--seed S] [--bucket-min K] [--tuned]\n");
            return 2;
        }
        if (!strcmp(a, "--requests"))
            nreq = int_arg(a, argv[++i], 1, 100000);
        else if (!strcmp(a, "--bmax"))
            mx.B = int_arg(a, argv[++i], 1, 65535);
        else if (!strcmp(a, "--umax"))
            mx.U = int_arg(a, argv[++i], 1, 65535);
        else if (!strcmp(a, "--check"))
            ncheck = int_arg(a, argv[++i], 0, 100000);
        else if (!strcmp(a, "--bucket-min"))
            per_bucket = (int)int_arg(a, argv[++i], 0, 1000);
        else if (!strcmp(a, "--seed"))
            seed = (uint64_t)int_arg(a, argv[++i], 0, INT64_MAX);
        else if (!strcmp(a, "--shape"))
            parse_shape(argv[++i], &mx);
        else
            lce_die("unknown option '%s' (--requests, --bmax, --umax, --shape, --check, --seed, --bucket-min, --tuned)", a);
    }
    if (mx.M < 1 || mx.N < 8 || mx.N % 8 || mx.Ku < 1 || mx.Kc < 1 || mx.M > 65535 || mx.N > 65535 ||
        mx.Ku > 65535 || mx.Kc > 65535)
        lce_die("--shape: M, Ku, Kc must be 1 to 65535 and N a multiple of 8 up to 65535");
    if (mx.U > mx.B)
        mx.U = mx.B; /* U <= B in every request */
    if (ncheck > nreq)
        ncheck = nreq;

    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        printf("bench_serving: no GPU here (%s): nothing to time\n", rt ? loom_runtime_error(rt) : "no runtime");
        loom_runtime_destroy(rt);
        return 0;
    }
    rt_gpu *g = rt_runtime_gpu(rt);
    const char *gpu = loom_runtime_device_name(rt);
    char err[1024], cache[1024];
    if (!mc_disk_dir(cache, sizeof cache))
        snprintf(cache, sizeof cache, "off (LOOM_CACHE=0 or no directory)");
    printf("bench_serving: IKBO LCE request stream on %s: M=%lld N=%lld Ku=%lld Kc=%lld f16; %lld requests, B uniform "
           "in [1, %lld], U uniform in [1, min(%lld, B)], seed %llu; cache %s\n",
           gpu, (long long)mx.M, (long long)mx.N, (long long)mx.Ku, (long long)mx.Kc, nreq, (long long)mx.B,
           (long long)mx.U, (unsigned long long)seed, cache);
    fflush(stdout);

    /* the requests, and the buckets of B as loom's: (top[k-1], top[k]] */
    int64_t top[MAX_BUCKETS];
    int nb = 0;
    for (int64_t t = 1; t < mx.B; t *= 2)
        top[nb++] = t;
    top[nb++] = mx.B;
    request *rq = calloc((size_t)(nreq + nb * per_bucket), sizeof *rq);
    double *tmp = calloc((size_t)(nreq + nb * per_bucket), sizeof *tmp);
    int32_t *hmap = malloc((size_t)mx.B * 4);
    uint16_t *hrow = malloc((size_t)(2 * mx.M * mx.N) * 2);
    if (!rq || !tmp || !hmap || !hrow)
        lce_die("out of host memory");
    uint64_t rs = seed;
    for (long long i = 0; i < nreq; i++) {
        request *r = &rq[i];
        r->B = 1 + (int64_t)(tpl_rand(&rs) % (uint64_t)mx.B);
        int64_t umax = mx.U < r->B ? mx.U : r->B;
        r->U = 1 + (int64_t)(tpl_rand(&rs) % (uint64_t)umax);
        r->mseed = tpl_rand(&rs);
        while (top[r->bucket] < r->B)
            r->bucket++;
    }
    /* every bucket at least per_bucket requests: B uniform in the bucket for the ones short
     * of them (a uniform draw leaves the small buckets empty), then the whole stream shuffled */
    int have[MAX_BUCKETS] = {0};
    for (long long i = 0; i < nreq; i++)
        have[rq[i].bucket]++;
    long long ndrawn = nreq;
    for (int k = 0; k < nb; k++)
        for (int64_t lo = k ? top[k - 1] + 1 : 1; have[k] < per_bucket; have[k]++) {
            request *r = &rq[nreq++];
            r->B = lo + (int64_t)(tpl_rand(&rs) % (uint64_t)(top[k] - lo + 1));
            int64_t umax = mx.U < r->B ? mx.U : r->B;
            r->U = 1 + (int64_t)(tpl_rand(&rs) % (uint64_t)umax);
            r->mseed = tpl_rand(&rs);
            r->bucket = k;
        }
    for (long long i = nreq - 1; i > 0; i--) {
        long long j = (long long)(tpl_rand(&rs) % (uint64_t)(i + 1));
        request x = rq[i];
        rq[i] = rq[j];
        rq[j] = x;
    }
    printf("requests: %lld drawn uniformly, %lld more so that every bucket of B has at least %d\n", ndrawn,
           nreq - ndrawn, per_bucket);

    /* the weights (host: prepare takes host arrays), then loom, prepared once at the maxima */
    size_t e = 2;
    uint64_t ws = seed * 7919 + 17;
    uint16_t *wu = malloc((size_t)(mx.M * mx.Ku) * e), *wc = malloc((size_t)(mx.M * mx.Kc) * e);
    if (!wu || !wc)
        lce_die("out of host memory");
    tpl_fill(wu, LOOM_F16, mx.M * mx.Ku, -1, 1, &ws);
    tpl_fill(wc, LOOM_F16, mx.M * mx.Kc, -1, 1, &ws);
    loom_ikbo_lce_shape ls = {mx.B, mx.U, mx.M, mx.N, mx.Ku, mx.Kc, LOOM_F16, LOOM_F16};
    loom_stats st0, st1;
    loom_stats_get(&st0);
    loom_ikbo_lce *p = NULL;
    double t0 = util_now_ms();
    const loom_ikbo_lce_config dcfg = ik_default_config();
    if (loom_ikbo_lce_prepare(rt, &ls, LOOM_IKBO_AUTO, wu, wc, tuned ? NULL : &dcfg, &p) != LOOM_OK)
        lce_die("loom_ikbo_lce_prepare: %s", loom_runtime_error(rt));
    double prep_ms = util_now_ms() - t0;
    loom_stats_get(&st1);
    printf("loom prepare (LOOM_IKBO_AUTO, %s) at B=%lld U=%lld: %.0f ms wall; %llu kernels built, "
           "%llu compiled (IR->PTX) by it; loom_stats after it: %llu built, %llu compiled\n",
           tuned ? "the tuner's config per bucket" : "the default config", (long long)mx.B, (long long)mx.U, prep_ms,
           (unsigned long long)(st1.kernels_built - st0.kernels_built),
           (unsigned long long)(st1.compiles - st0.compiles), (unsigned long long)st1.kernels_built,
           (unsigned long long)st1.compiles);
    printf("  %s\n", loom_ikbo_lce_describe(p));
    fflush(stdout);

    /* the inputs at the maxima, filled on the device once; two outputs, one a path */
    nvref_gemm *ref = NULL;
    if (nvref_gemm_open(g, &ref, err, sizeof err) != LOOM_OK)
        lce_die("NVRTC reference: %s", err);
    loom_buffer *dwu = loom_buffer_create(rt, (size_t)(mx.M * mx.Ku) * e);
    loom_buffer *dwc = loom_buffer_create(rt, (size_t)(mx.M * mx.Kc) * e);
    loom_buffer *eu = loom_buffer_create(rt, (size_t)(mx.U * mx.Ku * mx.N) * e);
    loom_buffer *ec = loom_buffer_create(rt, (size_t)(mx.B * mx.Kc * mx.N) * e);
    loom_buffer *dmap = loom_buffer_create(rt, (size_t)mx.B * 4);
    loom_buffer *out_loom = loom_buffer_create(rt, (size_t)(mx.B * mx.M * mx.N) * e);
    loom_buffer *out_fw = loom_buffer_create(rt, (size_t)(mx.B * mx.M * mx.N) * e);
    if (!dwu || !dwc || !eu || !ec || !dmap || !out_loom || !out_fw)
        lce_die("device buffers: %s", loom_runtime_error(rt));
    if (loom_buffer_upload(dwu, wu, loom_buffer_size(dwu)) || loom_buffer_upload(dwc, wc, loom_buffer_size(dwc)) ||
        loom_buffer_fill(dmap, 0))
        lce_die("upload: %s", loom_runtime_error(rt));
    if (nvref_gemm_fill(ref, rt_buffer_dptr(eu), LOOM_F16, mx.U * mx.Ku * mx.N, seed + 1, -1, 1, err, sizeof err) ||
        nvref_gemm_fill(ref, rt_buffer_dptr(ec), LOOM_F16, mx.B * mx.Kc * mx.N, seed + 2, -1, 1, err, sizeof err))
        lce_die("fill: %s", err);
    lce_ref chk = {.on = false};
    if (ncheck > 0) {
        t0 = util_now_ms();
        lce_ref_open(rt, ref, &mx, dwu, dwc, eu, ec, dmap, &chk);
        printf("reference (NVRTC naive f32 GEMMs of both halves at the maxima) and the check kernels: %.0f ms\n",
               util_now_ms() - t0);
    }

    /* the framework, its buffers at Bmax */
    lce_fw fw;
    lce_fw_open(rt, &fw);
    lce_fw_ctx fx = {.rt = rt, .f = &fw, .s = &mx, .eu = eu, .ec = ec, .map = dmap, .out = out_fw};
    const char *fw_why = lce_fw_prepare(&fx, wu, wc);
    bool have_fw = fw_why == NULL;
    if (have_fw)
        printf("framework: index_select and cat copies (NVRTC), cuBLAS %d (%s) strided batched GEMM, buffers at "
               "B=%lld\n", fw.cb.version, fw.cb.path, (long long)mx.B);
    else
        printf("framework: skipped: %s\n", fw_why);
    fflush(stdout);

    req_ctx x = {rt, p, &fx, eu, ec, dmap, out_loom, 0, 0};
    loom_stats s0, s1;
    loom_stats_get(&s0);

    /* the warm-up: the first request of each B, timed apart from the stream */
    char *seen = calloc((size_t)mx.B + 1, 1);
    if (!seen)
        lce_die("out of host memory");
    double warm_loom = 0, warm_fw = 0;
    int nwarm = 0;
    t0 = util_now_ms();
    for (long long i = 0; i < nreq; i++) {
        if (seen[rq[i].B])
            continue;
        seen[rq[i].B] = 1;
        double lm = 0, fm = 0;
        run_request(g, &x, &rq[i], i, have_fw, hmap, &lm, &fm);
        warm_loom = fmax(warm_loom, lm);
        warm_fw = fmax(warm_fw, fm);
        nwarm++;
    }
    double warm_ms = util_now_ms() - t0;
    free(seen);

    /* the stream */
    t0 = util_now_ms();
    for (long long i = 0; i < nreq; i++)
        run_request(g, &x, &rq[i], i, have_fw, hmap, &rq[i].loom_ms, &rq[i].fw_ms);
    double stream_ms = util_now_ms() - t0;
    loom_stats_get(&s1);
    uint64_t built = s1.kernels_built - s0.kernels_built, compiled = s1.compiles - s0.compiles;

    /* the table */
    printf("warm-up (not in the table): the first request of each of the %d distinct B, %.2f s wall; its slowest "
           "request: loom %.4f ms", nwarm, warm_ms / 1e3, warm_loom);
    if (have_fw)
        printf(", framework %.4f ms (cuBLAS loads a kernel the first time it picks it)", warm_fw);
    printf("\n");
    printf("stream: %lld requests in %.2f s wall (mapping uploads, event waits and both paths); per request, ms: the "
           "device time between events around each path's run, synchronized per request, L2 not flushed, on %s\n",
           nreq, stream_ms / 1e3, gpu);
    printf("  %-11s %6s %10s %10s %10s %10s %12s  %s\n", "B", "requests", "loom p50", "loom p99", "fw p50", "fw p99",
           "fw/loom p50", "loom's stage");
    for (int j = 0; j <= nb; j++) { /* the buckets, then all (k = -1) */
        int k = j < nb ? j : -1;
        double lp50 = 0, lp99 = 0, fp50 = 0, fp99 = 0;
        int m = stats_of(rq, (int)nreq, k, 0, tmp, &lp50, &lp99);
        char label[32], stage[40] = "";
        if (k < 0)
            snprintf(label, sizeof label, "all");
        else if (k == 0 || top[k - 1] + 1 == top[k])
            snprintf(label, sizeof label, "%lld", (long long)top[k]);
        else
            snprintf(label, sizeof label, "%lld-%lld", (long long)top[k - 1] + 1, (long long)top[k]);
        if (k >= 0) {
            loom_ikbo_stage sg = loom_ikbo_lce_stage_at(p, top[k]);
            snprintf(stage, sizeof stage, "%d %s", (int)sg, loom_ikbo_stage_name(sg));
        }
        if (m == 0) {
            printf("  %-11s %6d %10s %10s %10s %10s %12s  %s\n", label, 0, "-", "-", "-", "-", "-", stage);
            continue;
        }
        if (have_fw) {
            stats_of(rq, (int)nreq, k, 1, tmp, &fp50, &fp99);
            printf("  %-11s %6d %10.4f %10.4f %10.4f %10.4f %11.2fx  %s\n", label, m, lp50, lp99, fp50, fp99,
                   fp50 / lp50, stage);
        } else {
            printf("  %-11s %6d %10.4f %10.4f %10s %10s %12s  %s\n", label, m, lp50, lp99, "-", "-", "-", stage);
        }
    }
    double sum_loom = 0, sum_fw = 0;
    for (long long i = 0; i < nreq; i++)
        sum_loom += rq[i].loom_ms, sum_fw += rq[i].fw_ms;
    if (have_fw)
        printf("sum over the stream: loom %.1f ms, framework %.1f ms (x%.2f)\n", sum_loom, sum_fw, sum_fw / sum_loom);
    else
        printf("sum over the stream: loom %.1f ms\n", sum_loom);
    bool compiled_ok = built == 0 && compiled == 0;
    printf("request path: %llu kernels built, %llu compiled during the warm-up and the %lld requests%s\n",
           (unsigned long long)built, (unsigned long long)compiled, nreq,
           compiled_ok ? "" : "  FAIL: the request path must build and compile nothing");
    failures += !compiled_ok;
    fflush(stdout);

    /* the checks: a sample spread over the buckets, run again on both paths */
    double worst_loom = 0, worst_fw = 0;
    int nchecked = 0;
    if (ncheck > 0) {
        int *cnt = calloc((size_t)nb, sizeof *cnt), *pos = calloc((size_t)nb, sizeof *pos);
        int *list = malloc((size_t)nreq * sizeof *list), *start = calloc((size_t)nb + 1, sizeof *start);
        char *pick = calloc((size_t)nreq, 1);
        if (!cnt || !pos || !list || !start || !pick)
            lce_die("out of host memory");
        for (long long i = 0; i < nreq; i++)
            cnt[rq[i].bucket]++;
        for (int k = 0; k < nb; k++)
            start[k + 1] = start[k] + cnt[k];
        for (long long i = 0; i < nreq; i++)
            list[start[rq[i].bucket] + pos[rq[i].bucket]++] = (int)i;
        uint64_t ps = seed ^ 0x5eed;
        for (int k = 0; k < nb; k++) /* each bucket's requests in a random order */
            for (int j = cnt[k] - 1; j > 0; j--) {
                int q = (int)(tpl_rand(&ps) % (uint64_t)(j + 1)), t = list[start[k] + j];
                list[start[k] + j] = list[start[k] + q];
                list[start[k] + q] = t;
            }
        int picked = 0;
        for (int round = 0; picked < ncheck; round++) { /* round-robin, the largest bucket first */
            bool any = false;
            for (int k = nb - 1; k >= 0 && picked < ncheck; k--)
                if (round < cnt[k]) {
                    pick[list[start[k] + round]] = 1;
                    picked++;
                    any = true;
                }
            if (!any)
                break;
        }
        int64_t mn = mx.M * mx.N;
        printf("checks: %d requests spread over the buckets, run again on both paths, each output poisoned first; "
               "by the error model (ik_lce_bound) against NVRTC f32 references, and the 2 rows past B untouched\n",
               picked);
        for (long long i = 0; i < nreq; i++) {
            if (!pick[i])
                continue;
            request *r = &rq[i];
            make_mapping(r, hmap);
            upload_mapping(rt, dmap, hmap, r->B);
            x.B = r->B;
            x.U = r->U;
            int64_t extra = mx.B - r->B < 2 ? mx.B - r->B : 2;
            char line[2][160];
            for (int side = 0; side < 1 + have_fw; side++) {
                loom_buffer *out = side ? out_fw : out_loom;
                const char *what = side ? "framework" : "loom";
                if (rt_gpu_memset8(g, rt_buffer_dptr(out), 0xff, (size_t)((r->B + extra) * mn) * e, err, sizeof err) !=
                        LOOM_OK ||
                    (side ? fw_work : loom_work)(&x, err, sizeof err) != LOOM_OK ||
                    rt_gpu_sync(g, err, sizeof err) != LOOM_OK)
                    lce_die("check of request %lld (B=%lld U=%lld), %s: %s", i, (long long)r->B, (long long)r->U,
                            what, err);
                double bad, worst;
                char chk_what[96];
                snprintf(chk_what, sizeof chk_what, "request %lld (B=%lld U=%lld), %s", i, (long long)r->B,
                         (long long)r->U, what);
                lce_ref_check(rt, &chk, out, r->B, r->U, chk_what, &bad, &worst);
                bool untouched = rows_untouched(g, out, r->B, extra, mn, hrow);
                bool ok = bad == 0 && untouched;
                failures += !ok;
                double *w = side ? &worst_fw : &worst_loom;
                *w = isnan(worst) ? INFINITY : fmax(*w, worst);
                snprintf(line[side], sizeof line[side], "%s %s: %.0f past their bound, worst %.3g%s", what,
                         ok ? "ok" : "FAIL", bad, worst, untouched ? "" : ", WROTE PAST ITS B ROWS");
            }
            loom_ikbo_stage sg = loom_ikbo_lce_stage_at(p, r->B);
            printf("  request %4lld B=%5lld U=%3lld stage %d: %s%s%s\n", i, (long long)r->B, (long long)r->U, (int)sg,
                   line[0], have_fw ? "; " : "", have_fw ? line[1] : "");
            nchecked++;
        }
        free(cnt), free(pos), free(list), free(start), free(pick);
        loom_stats s2;
        loom_stats_get(&s2);
        if (s2.kernels_built != s1.kernels_built || s2.compiles != s1.compiles) {
            printf("checks: FAIL: %llu kernels built, %llu compiled while running the checked requests again\n",
                   (unsigned long long)(s2.kernels_built - s1.kernels_built),
                   (unsigned long long)(s2.compiles - s1.compiles));
            failures++;
        }
        printf("checks: %d requests, worst |err|/bound loom %.3g", nchecked, worst_loom);
        if (have_fw)
            printf(", framework %.3g", worst_fw);
        printf("\n");
    }

    double lp50 = 0, lp99 = 0, fp50 = 0, fp99 = 0;
    stats_of(rq, (int)nreq, -1, 0, tmp, &lp50, &lp99);
    if (have_fw)
        stats_of(rq, (int)nreq, -1, 1, tmp, &fp50, &fp99);
    printf("bench_serving: %s on %s: %lld requests, loom p50 %.4f / p99 %.4f ms", failures ? "FAILED" : "ok", gpu,
           nreq, lp50, lp99);
    if (have_fw)
        printf(", framework p50 %.4f / p99 %.4f ms (x%.2f at p50)", fp50, fp99, fp50 / lp50);
    printf("; prepare %.0f ms, %llu compiles; request path %llu compiles; %d checked, worst |err|/bound %.3g\n",
           prep_ms, (unsigned long long)(st1.compiles - st0.compiles), (unsigned long long)compiled, nchecked,
           worst_loom);

    if (have_fw)
        lce_fw_release(&fx);
    lce_fw_close(rt, &fw);
    lce_ref_close(&chk);
    loom_ikbo_lce_destroy(p);
    loom_buffer *bs[] = {dwu, dwc, eu, ec, dmap, out_loom, out_fw};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        loom_buffer_destroy(bs[i]);
    nvref_gemm_close(ref);
    loom_runtime_destroy(rt);
    free(rq), free(tmp), free(hmap), free(hrow), free(wu), free(wc);
    return failures ? 1 : 0;
}
