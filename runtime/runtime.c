/*
 * runtime.c -- runtimes, buffers and the one launch call.
 *
 * A runtime runs kernels either on the GPU (through the backend in rt.h) or on the CPU
 * interpreter.  Buffers live where the runtime runs kernels, so a program written
 * against loom_buffer_* and loom_launch runs unchanged on either: LOOM_INTERPRET=1 is
 * enough to debug any kernel without a GPU.
 *
 * loom_launch refuses bad input before anything runs: the kernel must verify, the
 * argument count and kinds must match, every tensor's buffer must hold the tensor's
 * whole extent, and the grid must be positive.  Each refusal names the argument.
 */
#include "codegen.h"
#include "gpu.h"
#include "../util/util.h"

#include "../dsl/ir.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct loom_runtime {
    loom_target target; /* INTERPRET or GPU once created */
    loom_status status;
    rt_gpu *gpu;
    bool dump_ir; /* LOOM_DUMP_IR=1 when the runtime was created */
    char err[2048];
};

struct loom_buffer {
    loom_runtime *rt;
    size_t bytes;
    void *host;    /* interpreter */
    uint64_t dptr; /* GPU */
};

static loom_status rt_fail(loom_runtime *rt, loom_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static loom_status rt_fail(loom_runtime *rt, loom_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt->err, sizeof rt->err, fmt, ap);
    va_end(ap);
    return st;
}

void loom_runtime_set_error(loom_runtime *rt, const char *fmt, ...)
{
    if (!rt)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt->err, sizeof rt->err, fmt, ap);
    va_end(ap);
}


loom_runtime *loom_runtime_create(loom_target target)
{
    loom_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return NULL;
    if (target != LOOM_TARGET_AUTO && target != LOOM_TARGET_INTERPRETER && target != LOOM_TARGET_GPU) {
        rt->target = LOOM_TARGET_INTERPRETER; /* nothing runs: every call returns the status */
        rt->status = LOOM_ERR_INVALID;
        rt_fail(rt, LOOM_ERR_INVALID,
                "loom_runtime_create: target %d is not LOOM_TARGET_AUTO (%d), LOOM_TARGET_INTERPRETER (%d) or "
                "LOOM_TARGET_GPU (%d)",
                (int)target, (int)LOOM_TARGET_AUTO, (int)LOOM_TARGET_INTERPRETER, (int)LOOM_TARGET_GPU);
        return rt;
    }
    rt->dump_ir = util_env_on("LOOM_DUMP_IR"); /* read once: a launch should not scan the environment */
    if (target == LOOM_TARGET_AUTO && util_env_on("LOOM_INTERPRET"))
        target = LOOM_TARGET_INTERPRETER;
    if (target == LOOM_TARGET_INTERPRETER) {
        rt->target = LOOM_TARGET_INTERPRETER;
        return rt;
    }
    char msg[1024] = "";
    loom_status st = rt_gpu_open(&rt->gpu, msg, sizeof msg);
    if (st == LOOM_OK) {
        rt->target = LOOM_TARGET_GPU;
        return rt;
    }
    if (target == LOOM_TARGET_GPU) {
        rt->target = LOOM_TARGET_GPU;
        rt->status = st;
        rt_fail(rt, st, "%s", msg);
        return rt;
    }
    rt->target = LOOM_TARGET_INTERPRETER; /* AUTO without a GPU */
    snprintf(rt->err, sizeof rt->err, "no GPU (%s); running on the interpreter", msg);
    return rt;
}

loom_status loom_runtime_status(const loom_runtime *rt) { return rt ? rt->status : LOOM_ERR_INVALID; }
int loom_runtime_is_gpu(const loom_runtime *rt) { return rt && rt->gpu != NULL; }
rt_gpu *rt_runtime_gpu(const loom_runtime *rt) { return rt ? rt->gpu : NULL; }
loom_status rt_runtime_fail(loom_runtime *rt, loom_status st, const char *msg)
{
    return rt ? rt_fail(rt, st, "%s", msg) : st;
}
const char *loom_runtime_error(const loom_runtime *rt) { return rt ? rt->err : "no runtime"; }

const char *loom_runtime_device_name(const loom_runtime *rt)
{
    if (!rt)
        return "";
    return rt->gpu ? rt_gpu_name(rt->gpu) : "interpreter (CPU)";
}

loom_status loom_runtime_sync(loom_runtime *rt, int timeout_ms)
{
    if (!rt)
        return LOOM_ERR_INVALID;
    if (rt->status != LOOM_OK)
        return rt->status;
    if (!rt->gpu)
        return LOOM_OK;
    return rt_gpu_sync_timeout(rt->gpu, timeout_ms, rt->err, sizeof rt->err);
}

void loom_runtime_destroy(loom_runtime *rt)
{
    if (!rt)
        return;
    if (rt->gpu)
        rt_gpu_close(rt->gpu);
    free(rt);
}

/* ---------------------------------------------------------------- buffers */

loom_buffer *loom_buffer_create(loom_runtime *rt, size_t bytes)
{
    if (!rt || rt->status != LOOM_OK)
        return NULL;
    loom_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        rt_fail(rt, LOOM_ERR_NOMEM, "out of host memory for a buffer descriptor");
        return NULL;
    }
    b->rt = rt;
    b->bytes = bytes;
    if (rt->gpu) {
        if (rt_gpu_alloc(rt->gpu, bytes ? bytes : 1, &b->dptr, rt->err, sizeof rt->err) != LOOM_OK) {
            free(b);
            return NULL;
        }
    } else {
        b->host = calloc(1, bytes ? bytes : 1);
        if (!b->host) {
            rt_fail(rt, LOOM_ERR_NOMEM, "out of host memory for a %zu-byte buffer", bytes);
            free(b);
            return NULL;
        }
    }
    return b;
}

void loom_buffer_destroy(loom_buffer *b)
{
    if (!b)
        return;
    if (b->rt->gpu)
        rt_gpu_free(b->rt->gpu, b->dptr);
    free(b->host);
    free(b);
}

size_t loom_buffer_size(const loom_buffer *b) { return b ? b->bytes : 0; }

loom_status loom_buffer_upload(loom_buffer *b, const void *src, size_t bytes)
{
    if (!b)
        return LOOM_ERR_INVALID;
    if (!src && bytes)
        return rt_fail(b->rt, LOOM_ERR_INVALID, "upload of %zu bytes from a NULL host pointer", bytes);
    if (bytes > b->bytes)
        return rt_fail(b->rt, LOOM_ERR_INVALID, "upload of %zu bytes into a %zu-byte buffer", bytes,
                       b->bytes);
    if (b->rt->gpu)
        return rt_gpu_htod(b->rt->gpu, b->dptr, src, bytes, b->rt->err, sizeof b->rt->err);
    if (bytes) /* (memcpy from NULL is undefined even for 0 bytes) */
        memcpy(b->host, src, bytes);
    return LOOM_OK;
}

loom_status loom_buffer_download(const loom_buffer *b, void *dst, size_t bytes)
{
    if (!b)
        return LOOM_ERR_INVALID;
    if (!dst && bytes)
        return rt_fail(b->rt, LOOM_ERR_INVALID, "download of %zu bytes to a NULL host pointer", bytes);
    if (bytes > b->bytes)
        return rt_fail(b->rt, LOOM_ERR_INVALID, "download of %zu bytes from a %zu-byte buffer", bytes,
                       b->bytes);
    if (b->rt->gpu)
        return rt_gpu_dtoh(b->rt->gpu, dst, b->dptr, bytes, b->rt->err, sizeof b->rt->err);
    if (bytes)
        memcpy(dst, b->host, bytes);
    return LOOM_OK;
}

loom_status loom_buffer_fill(loom_buffer *b, unsigned char byte)
{
    if (!b)
        return LOOM_ERR_INVALID;
    if (b->rt->gpu)
        return rt_gpu_memset8(b->rt->gpu, b->dptr, byte, b->bytes, b->rt->err, sizeof b->rt->err);
    memset(b->host, byte, b->bytes);
    return LOOM_OK;
}

/* ---------------------------------------------------------------- launch */

/* Check the launch's arguments against the kernel's; fills a message naming the bad one. */
static loom_status check_args(loom_runtime *rt, loom_kernel *k, const int grid[3],
                              const loom_arg *args, int nargs)
{
    if (!grid)
        return rt_fail(rt, LOOM_ERR_INVALID, "launch of '%s': grid is NULL", k->name);
    for (int d = 0; d < 3; d++)
        if (grid[d] < 1 || grid[d] > (d == 0 ? 2147483647 : 65535))
            return rt_fail(rt, LOOM_ERR_INVALID,
                           "launch of '%s': grid[%d] is %d; it must be between 1 and %d", k->name, d,
                           grid[d], d == 0 ? 2147483647 : 65535);
    if (k->cluster > 1 && grid[0] % k->cluster)
        return rt_fail(rt, LOOM_ERR_INVALID,
                       "launch of '%s': the kernel runs in clusters of %d programs along x, but grid[0] is %d, "
                       "not a multiple of %d",
                       k->name, k->cluster, grid[0], k->cluster);
    if (nargs != k->nargs)
        return rt_fail(rt, LOOM_ERR_INVALID, "launch of '%s': %d arguments given, the kernel takes %d",
                       k->name, nargs, k->nargs);
    if (nargs && !args)
        return rt_fail(rt, LOOM_ERR_INVALID, "launch of '%s': args is NULL", k->name);
    int32_t dimval[LOOM_MAX_ARGS] = {0};
    for (int i = 0; i < nargs; i++)
        if (k->args[i].is_dim && !args[i].buf)
            dimval[i] = args[i].s.i32;
    char derr[300];
    for (int i = 0; i < nargs; i++) {
        const ir_arg *a = &k->args[i];
        if (a->is_dim && !args[i].buf && !ir_dims_check(k, dimval, derr, sizeof derr))
            return rt_fail(rt, LOOM_ERR_INVALID, "launch of '%s': %s", k->name, derr);
        if (a->is_tensor) {
            if (!args[i].buf)
                return rt_fail(rt, LOOM_ERR_INVALID,
                               "launch of '%s': argument %d ('%s') is a tensor but no buffer was given",
                               k->name, i, a->name);
            if (args[i].buf->rt != rt)
                return rt_fail(rt, LOOM_ERR_INVALID,
                               "launch of '%s': argument %d ('%s') is a buffer of another runtime",
                               k->name, i, a->name);
            size_t need;
            ir_arg_shape_at(k, i, dimval, NULL, &need);
            if (args[i].buf->bytes < need)
                return rt_fail(rt, LOOM_ERR_INVALID,
                               "launch of '%s': argument %d ('%s') needs %zu bytes (%s tensor of "
                               "that shape) but its buffer has %zu",
                               k->name, i, a->name, need, loom_dtype_name(a->dtype),
                               args[i].buf->bytes);
        } else if (args[i].buf) {
            return rt_fail(rt, LOOM_ERR_INVALID,
                           "launch of '%s': argument %d ('%s') is a scalar but a buffer was given",
                           k->name, i, a->name);
        }
    }
    return LOOM_OK;
}

/* A scalar argument's value as 8 bytes whose low bytes hold it (zero above). */
static int64_t scalar_bits(const loom_kernel *k, int i, const loom_arg *a)
{
    union {
        int64_t i64;
        int32_t i32;
        float f32;
    } u = {0};
    if (a->buf)
        return 0;
    if (k->args[i].dtype == LOOM_I32)
        u.i32 = a->s.i32;
    else if (k->args[i].dtype == LOOM_F32)
        u.f32 = a->s.f32;
    else
        u.i64 = a->s.i64;
    return u.i64;
}

loom_status loom_launch(loom_runtime *rt, loom_kernel *k, const int grid[3], const loom_arg *args,
                        int nargs)
{
    return loom_launch_stream(rt, k, grid, args, nargs, NULL);
}

loom_status loom_launch_stream(loom_runtime *rt, loom_kernel *k, const int grid[3], const loom_arg *args,
                               int nargs, void *stream)
{
    if (!rt)
        return LOOM_ERR_INVALID;
    if (!k)
        return rt_fail(rt, LOOM_ERR_INVALID, "launch: kernel is NULL");
    if (rt->status != LOOM_OK)
        return rt->status;
    rt->err[0] = 0;
    if (loom_verify(k) != LOOM_OK)
        return rt_fail(rt, LOOM_ERR_VERIFY, "kernel '%s' failed verification:\n%s", k->name,
                       loom_kernel_errors(k));
    if (rt->dump_ir)
        fprintf(stderr, "%s", ir_print_shared(k));
    loom_status st = check_args(rt, k, grid, args, nargs);
    if (st != LOOM_OK)
        return st;
    if (rt->gpu) {
        int64_t progs = INT64_MAX, g3[3] = {grid[0], grid[1], grid[2]};
        util_prod_i64(g3, 3, &progs); /* check_args bounded each dim: it fits */
        int sms = rt_gpu_properties(rt->gpu)->sm_count;
        if (progs > sms && ir_uses_op(k, IR_FLAG_WAIT))
            return rt_fail(rt, LOOM_ERR_INVALID,
                           "launch of '%s': the kernel waits on flags set by other programs, so all its "
                           "programs must run at once; the grid has %lld programs but the GPU has %d SMs "
                           "(launch it persistent: at most one program per SM)",
                           k->name, (long long)progs, sms);
        rt_launch_arg la[LOOM_MAX_ARGS];
        for (int i = 0; i < nargs; i++) {
            la[i].dptr = args[i].buf ? args[i].buf->dptr : 0;
            la[i].s.i64 = scalar_bits(k, i, &args[i]);
        }
        ir_print_shared(k); /* the module lookup's key: printed once, under the kernel's lock */
        return rt_gpu_launch_on(rt->gpu, k, grid, la, stream, rt->err, sizeof rt->err);
    }
    interp_arg ia[LOOM_MAX_ARGS];
    for (int i = 0; i < nargs; i++) {
        ia[i].data = args[i].buf ? args[i].buf->host : NULL;
        ia[i].bytes = args[i].buf ? args[i].buf->bytes : 0;
        ia[i].s.i64 = scalar_bits(k, i, &args[i]);
    }
    return interp_run(k, grid, ia, rt->err, sizeof rt->err);
}

void loom_stats_get(loom_stats *out)
{
    if (out)
        *out = (loom_stats){.kernels_built = ir_kernels_created(), .compiles = cg_compile_count()};
}

/* ---------------------------------------------------------------- PTX */

loom_status loom_compile_ptx(loom_kernel *k, const char *arch, char **ptx, size_t *smem_bytes,
                             char *err, size_t errlen)
{
    if (!k || !ptx) {
        if (err && errlen)
            snprintf(err, errlen, "loom_compile_ptx: %s is NULL", k ? "ptx" : "kernel");
        return LOOM_ERR_INVALID;
    }
    *ptx = NULL;
    if (smem_bytes)
        *smem_bytes = 0;
    if (arch && *arch && !cg_arch_known(arch)) {
        if (err && errlen)
            snprintf(err, errlen, "loom_compile_ptx: arch '%s' is not an NVPTX processor this loom's LLVM knows "
                     "(sm_80, sm_90a, ...)", arch);
        return LOOM_ERR_INVALID;
    }
    if (loom_verify(k) != LOOM_OK) {
        if (err && errlen)
            snprintf(err, errlen, "kernel '%s' failed verification:\n%s", k->name, loom_kernel_errors(k));
        return LOOM_ERR_VERIFY;
    }
    cg_result r;
    loom_status st = cg_compile(k, arch, &r, err, errlen);
    *ptx = r.ptx;
    if (smem_bytes)
        *smem_bytes = r.smem_bytes;
    return st;
}

/* ---------------------------------------------------------------- compile, time */

loom_status loom_prepare(loom_runtime *rt, loom_kernel *k, loom_compile_info *info)
{
    loom_compile_info local;
    if (!info)
        info = &local;
    memset(info, 0, sizeof *info);
    if (!rt || !k)
        return LOOM_ERR_INVALID;
    if (rt->status != LOOM_OK)
        return rt->status;
    if (loom_verify(k) != LOOM_OK)
        return rt_fail(rt, LOOM_ERR_VERIFY, "kernel '%s' failed verification:\n%s", k->name,
                       loom_kernel_errors(k));
    if (!rt->gpu)
        return LOOM_OK;
    ir_print_shared(k);
    return rt_gpu_prepare(rt->gpu, k, info, rt->err, sizeof rt->err);
}

/* loom_prepare_many's workers: each takes the next kernel of the work list until none is
 * left.  The list holds each kernel object once: two threads never look one kernel up at
 * once (the lookup caches its printed IR in the kernel). */
typedef struct prep_pool {
    rt_gpu *g;
    loom_kernel *const *ks;
    const int *work; /* indices into ks, each object's first */
    int nwork;
    _Atomic int next;
    loom_status *st;
    char (*err)[1024];
} prep_pool;

static void *prep_worker(void *arg)
{
    prep_pool *p = arg;
    for (int w; (w = atomic_fetch_add(&p->next, 1)) < p->nwork;) {
        int i = p->work[w];
        p->st[i] = rt_gpu_prepare(p->g, p->ks[i], NULL, p->err[i], sizeof p->err[i]);
    }
    return NULL;
}

loom_status loom_prepare_many(loom_runtime *rt, loom_kernel *const *ks, int n, int threads)
{
    if (!rt)
        return LOOM_ERR_INVALID;
    if (n < 0 || (n > 0 && !ks))
        return rt_fail(rt, LOOM_ERR_INVALID, "loom_prepare_many: %s", n < 0 ? "n is negative" : "ks is NULL");
    if (rt->status != LOOM_OK)
        return rt->status;
    for (int i = 0; i < n; i++) {
        if (!ks[i])
            return rt_fail(rt, LOOM_ERR_INVALID, "loom_prepare_many: ks[%d] is NULL", i);
        if (loom_verify(ks[i]) != LOOM_OK)
            return rt_fail(rt, LOOM_ERR_VERIFY, "kernel '%s' (ks[%d]) failed verification:\n%s", ks[i]->name, i,
                           loom_kernel_errors(ks[i]));
        if (rt->gpu)
            ir_print_shared(ks[i]);
    }
    if (!rt->gpu || n == 0)
        return LOOM_OK;
    int *first = calloc((size_t)n, sizeof *first), *work = calloc((size_t)n, sizeof *work), nwork = 0;
    prep_pool p = {.g = rt->gpu, .ks = ks, .work = work, .st = calloc((size_t)n, sizeof *p.st),
                   .err = calloc((size_t)n, sizeof *p.err)};
    pthread_t *th = calloc((size_t)n, sizeof *th);
    if (!first || !work || !p.st || !p.err || !th) {
        free(first);
        free(work);
        free(p.st);
        free(p.err);
        free(th);
        return rt_fail(rt, LOOM_ERR_NOMEM, "loom_prepare_many: out of host memory");
    }
    for (int i = 0; i < n; i++) { /* a kernel object given twice is prepared once */
        first[i] = i;
        for (int j = 0; j < i && first[i] == i; j++)
            if (ks[j] == ks[i])
                first[i] = j;
        if (first[i] == i)
            work[nwork++] = i;
    }
    p.nwork = nwork;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = threads > 0 ? threads : cores > 0 ? (int)cores : 1;
    nt = nt < nwork ? nt : nwork;
    atomic_init(&p.next, 0);
    int started = 0;
    while (started < nt - 1 && pthread_create(&th[started], NULL, prep_worker, &p) == 0)
        started++;
    prep_worker(&p); /* the calling thread is one of the workers */
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    loom_status st = LOOM_OK;
    for (int i = 0; i < n && st == LOOM_OK; i++)
        if (p.st[first[i]] != LOOM_OK)
            st = rt_fail(rt, p.st[first[i]], "kernel '%s' (ks[%d]): %s", ks[i]->name, i, p.err[first[i]]);
    free(first);
    free(work);
    free(p.st);
    free(p.err);
    free(th);
    return st;
}

typedef struct launch_ctx {
    loom_runtime *rt;
    loom_kernel *k;
    const int *grid;
    const loom_arg *args;
    int nargs;
} launch_ctx;

static loom_status launch_work(void *p, char *err, size_t errlen)
{
    launch_ctx *c = p;
    loom_status st = loom_launch(c->rt, c->k, c->grid, c->args, c->nargs);
    if (st != LOOM_OK)
        snprintf(err, errlen, "%s", c->rt->err);
    return st;
}

loom_status loom_time_launch(loom_runtime *rt, loom_kernel *k, const int grid[3],
                             const loom_arg *args, int nargs, int warmup, int reps,
                             double *median_ms)
{
    if (!rt || !k || !median_ms)
        return LOOM_ERR_INVALID;
    if (!rt->gpu)
        return rt_fail(rt, LOOM_ERR_NO_GPU, "timing needs a GPU runtime");
    /* the first launch compiles and checks the arguments; its errors are the user's */
    loom_status st = loom_launch(rt, k, grid, args, nargs);
    if (st != LOOM_OK)
        return st;
    launch_ctx c = {rt, k, grid, args, nargs};
    char err[sizeof rt->err];
    st = rt_gpu_time_ms(rt->gpu, launch_work, &c, warmup, reps, median_ms, err, sizeof err);
    if (st != LOOM_OK)
        return rt_fail(rt, st, "%s", err);
    return LOOM_OK;
}

typedef struct copy_ctx {
    rt_gpu *g;
    uint64_t dst, src;
    size_t bytes;
} copy_ctx;

static loom_status copy_work(void *p, char *err, size_t errlen)
{
    copy_ctx *c = p;
    return rt_gpu_dtod(c->g, c->dst, c->src, c->bytes, err, errlen);
}

loom_status loom_time_copy(loom_runtime *rt, loom_buffer *dst, const loom_buffer *src, size_t bytes,
                           int warmup, int reps, double *median_ms)
{
    if (!rt || !dst || !src || !median_ms)
        return LOOM_ERR_INVALID;
    if (!rt->gpu)
        return rt_fail(rt, LOOM_ERR_NO_GPU, "timing needs a GPU runtime");
    if (bytes > dst->bytes || bytes > src->bytes)
        return rt_fail(rt, LOOM_ERR_INVALID, "copy of %zu bytes between buffers of %zu and %zu bytes",
                       bytes, src->bytes, dst->bytes);
    copy_ctx c = {rt->gpu, dst->dptr, src->dptr, bytes};
    char err[sizeof rt->err];
    loom_status st = rt_gpu_time_ms(rt->gpu, copy_work, &c, warmup, reps, median_ms, err, sizeof err);
    if (st != LOOM_OK)
        return rt_fail(rt, st, "%s", err);
    return LOOM_OK;
}

/* ---------------------------------------------------------------- timing any work */

typedef struct work_ctx {
    loom_runtime *rt;
    loom_status (*work)(void *);
    void *ctx;
    loom_buffer *flush;
    int n;
} work_ctx;

static loom_status work_flush(void *p, char *err, size_t errlen)
{
    work_ctx *w = p;
    loom_status st = rt_gpu_memset8(w->rt->gpu, w->flush->dptr, (unsigned char)(w->n++ & 0xff), w->flush->bytes, err,
                                    errlen);
    return st;
}

static loom_status work_run(void *p, char *err, size_t errlen)
{
    work_ctx *w = p;
    loom_status st = w->work(w->ctx);
    if (st != LOOM_OK)
        snprintf(err, errlen, "%s", w->rt->err[0] ? w->rt->err : loom_status_name(st));
    return st;
}

loom_status loom_time_work(loom_runtime *rt, loom_status (*work)(void *ctx), void *ctx, int warmup, int reps,
                           double *median_ms)
{
    if (!rt || !work || !median_ms || warmup < 0 || reps < 1 || reps > 100000)
        return rt ? rt_fail(rt, LOOM_ERR_INVALID, "loom_time_work: bad arguments") : LOOM_ERR_INVALID;
    *median_ms = 0;
    if (!rt->gpu)
        return rt_fail(rt, LOOM_ERR_NO_GPU, "loom_time_work: timing needs a GPU runtime");
    const rt_gpu_props *pp = rt_gpu_properties(rt->gpu);
    size_t l2 = pp->l2_bytes > 0 ? (size_t)pp->l2_bytes : (size_t)64 << 20;
    work_ctx w = {rt, work, ctx, loom_buffer_create(rt, 2 * l2), 0};
    if (!w.flush)
        return rt_fail(rt, LOOM_ERR_NOMEM, "loom_time_work: no memory for the L2 flush buffer");
    char err[1024] = "";
    loom_status st = rt_gpu_time_each_ms(rt->gpu, work_flush, work_run, &w, warmup, reps, median_ms, err, sizeof err);
    loom_buffer_destroy(w.flush);
    if (st != LOOM_OK)
        return rt_fail(rt, st, "loom_time_work: %s", err);
    return LOOM_OK;
}

uint64_t rt_buffer_dptr(const loom_buffer *b) { return b ? b->dptr : 0; }
const loom_runtime *rt_buffer_runtime(const loom_buffer *b) { return b ? b->rt : NULL; }
