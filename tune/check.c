/*
 * check.c -- the bench the candidates of a shape run on, and the check that a candidate
 * computes the right thing before it is timed.
 *
 * The bench is set up once per shape, on the main thread while the pool compiles
 * (tune_bench_setup).  The template's init makes the inputs, which are uploaded; they are
 * copied as many times as it takes to fill four L2 sizes, so that successive timed runs
 * take different copies and none finds its inputs left in the L2 by the run before; a
 * buffer of twice the L2 size is made for the flush written before each timed run; and
 * each output gets a reference buffer.  The arguments depend on the shape alone, so one
 * bench serves every candidate, and tune_bench_args_match turns away a kernel that
 * disagrees.
 *
 * The reference is the template's CPU reference when the outputs are small (the driver
 * decides: LOOM_TUNE_REF_MAX).  For large outputs the CPU would take seconds, so it is the
 * default config's output on the GPU (tune_bench_gpu_reference), and the tolerance is
 * doubled since both sides round.  A check (tune_check_one) runs the candidate once on
 * poisoned outputs (0xff bytes: NaN or -1, so an element it forgets to write is caught)
 * and compares them with the reference on the device, by a kernel written in loom's own
 * DSL (tune_compare_kernel): per program of TUNE_CMP_BLOCK elements it writes the count
 * of elements beyond tolerance and the largest error, a second kernel folds those into
 * one count and one maximum (tune_reduce2_kernel), and only those 8 bytes come back to
 * the host, so a check costs a fraction of a millisecond even for outputs of hundreds of
 * MB.
 *
 * A template with an entry in templates/tpl_device.h has its inputs made on the device
 * instead (tune_bench_setup_device): the small ones by its init_rest on the host, the
 * large ones by fill kernels (tune/gpu_inputs.c), and its reference by its own reference
 * kernels (tune_bench_device_reference), so setting up costs no host time to speak of.
 * The comparison kernels are built before the pool starts (tune_bench_compare_kernels),
 * so that it compiles them first, with the candidates.
 */
#include "../util/util.h"
#include "tpl.h" /* tpl_device.h: the inputs and references a template makes on the device */
#include "tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the comparison kernel */

loom_kernel *tune_compare_kernel(loom_dtype dt, int64_t n, bool with_bound, int *grid0)
{
    int64_t nprog = (n + TUNE_CMP_BLOCK - 1) / TUNE_CMP_BLOCK;
    if (n < 1 || nprog > INT32_MAX)
        return NULL;
    *grid0 = (int)nprog;
    loom_kernel *k = loom_kernel_create("loom_tune_compare", 4);
    loom_val got = loom_arg_tensor(k, "got", dt, LOOM_SHAPE1(n), LOOM_IN);
    loom_val ref = loom_arg_tensor(k, "ref", dt, LOOM_SHAPE1(n), LOOM_IN);
    loom_val bnd = with_bound ? loom_arg_tensor(k, "bound", LOOM_F32, LOOM_SHAPE1(n), LOOM_IN) : LOOM_NONE;
    loom_val atol = loom_arg_scalar(k, "atol", LOOM_F32);
    loom_val rtol = loom_arg_scalar(k, "rtol", LOOM_F32);
    loom_val bad = loom_arg_tensor(k, "bad", LOOM_F32, LOOM_SHAPE1(nprog), LOOM_OUT);
    loom_val maxerr = loom_arg_tensor(k, "maxerr", LOOM_F32, LOOM_SHAPE1(nprog), LOOM_OUT);

    loom_val pid = loom_program_id(k, 0);
    loom_val off = n > INT32_MAX - TUNE_CMP_BLOCK
                       ? loom_mul(k, loom_cast(k, pid, LOOM_I64), loom_const_i(k, LOOM_I64, TUNE_CMP_BLOCK))
                       : loom_mul(k, pid, loom_const_i(k, LOOM_I32, TUNE_CMP_BLOCK));
    loom_shape tile = LOOM_SHAPE1(TUNE_CMP_BLOCK);
    /* the tail beyond n loads 0 on both sides (and as the bound), which compares equal */
    loom_val g = loom_cast(k, loom_load(k, got, &off, tile, LOOM_NONE, 0.0), LOOM_F32);
    loom_val r = loom_cast(k, loom_load(k, ref, &off, tile, LOOM_NONE, 0.0), LOOM_F32);
    loom_val d = loom_abs(k, loom_sub(k, g, r));
    loom_val tol = loom_add(k, loom_splat(k, atol, tile), loom_mul(k, rtol, loom_abs(k, r)));
    if (with_bound) /* the error model's bound per element (docs/checks.md) */
        tol = loom_add(k, tol, loom_load(k, bnd, &off, tile, LOOM_NONE, 0.0));
    loom_val ok = loom_cmp(k, LOOM_LE, d, tol);
    loom_val both_nan = loom_and(k, loom_cmp(k, LOOM_NE, g, g), loom_cmp(k, LOOM_NE, r, r));
    ok = loom_or(k, ok, both_nan);
    loom_val zero = loom_const_f(k, LOOM_F32, 0.0), one = loom_const_f(k, LOOM_F32, 1.0);
    loom_val nbad = loom_reduce_sum(k, loom_select(k, ok, zero, one), 0);
    loom_val inf = loom_const_f(k, LOOM_F32, INFINITY);
    loom_val err = loom_select(k, both_nan, zero, loom_select(k, loom_cmp(k, LOOM_NE, d, d), inf, d));
    loom_val worst = loom_reduce_max(k, err, 0);
    loom_store(k, bad, &pid, loom_splat(k, nbad, LOOM_SHAPE1(1)), LOOM_NONE);
    loom_store(k, maxerr, &pid, loom_splat(k, worst, LOOM_SHAPE1(1)), LOOM_NONE);
    return k;
}

/* ---------------------------------------------------------------- the bench */

static bool is_output(const loom_arg_info *ai) { return ai->is_tensor && (ai->access & LOOM_OUT); }

/* The elements of tensor argument ai. */
static int64_t elements(const loom_arg_info *ai) { return (int64_t)(ai->min_bytes / loom_dtype_size(ai->dtype)); }

void tune_bench_free(tune_bench *b)
{
    for (int c = 0; c < TUNE_MAX_COPIES; c++)
        for (int i = 0; i < LOOM_MAX_ARGS; i++)
            loom_buffer_destroy(b->extra[c][i]);
    for (int i = 0; i < LOOM_MAX_ARGS; i++) {
        loom_buffer_destroy(b->ref[i]);
        loom_buffer_destroy(b->bound[i]);
        loom_buffer_destroy(b->cbad[i]);
        loom_buffer_destroy(b->cmax[i]);
        loom_buffer_destroy(b->csum[i]);
        loom_kernel_destroy(b->cmpk[i]);
        loom_kernel_destroy(b->redk[i]);
        loom_kernel_destroy(b->fillk[i]);
    }
    for (int i = 0; i < TUNE_MAX_REFK; i++)
        loom_kernel_destroy(b->refk[i]);
    loom_kernel_destroy(b->boundk);
    loom_buffer_destroy(b->flush);
    loom_instance_destroy(&b->in);
    memset(b, 0, sizeof *b);
}

loom_status tune_bench_compare_kernels(tune_bench *b, loom_kernel *probe, char *err, size_t n)
{
    b->nargs = loom_kernel_num_args(probe);
    for (int i = 0; i < b->nargs; i++) {
        loom_arg_info ai;
        loom_kernel_arg_info(probe, i, &ai);
        b->in.info[i] = ai; /* for inputs made on the device (the probe then stays, as b->in.kernel) */
        if (!is_output(&ai) || (b->t->unchecked >> i & 1)) /* (a workspace: the other outputs show it) */
            continue;
        int64_t cnt = (int64_t)(ai.min_bytes / loom_dtype_size(ai.dtype));
        /* the error model's bounds come from the CPU reference (t->bound); a reference made
         * on the device is compared within the template's atol and rtol */
        b->cmpk[i] = tune_compare_kernel(ai.dtype, cnt, b->t->bound != NULL, &b->cmpgrid[i]);
        if (!b->cmpk[i]) {
            snprintf(err, n, "output '%s' of %lld elements cannot be compared", ai.name, (long long)cnt);
            return LOOM_ERR_UNSUPPORTED;
        }
        /* the per-program results summed and maxed on the device: 8 bytes come back */
        if (b->cmpgrid[i] > 1 && !(b->redk[i] = tune_reduce2_kernel(b->cmpgrid[i], TUNE_RED_SUM, TUNE_RED_MAX))) {
            snprintf(err, n, "output '%s': %d partial results cannot be reduced", ai.name, b->cmpgrid[i]);
            return LOOM_ERR_UNSUPPORTED;
        }
    }
    return LOOM_OK;
}

/* Fill argument i's buffer x on the device with its fill (the same values in every copy:
 * the hash depends on the seed and the index alone). */
static loom_status fill_on_device(tune_bench *b, int f, loom_buffer *x)
{
    int i = b->fill_arg[f];
    const loom_arg_info *ai = &b->in.info[i];
    int64_t cnt = (int64_t)(ai->min_bytes / loom_dtype_size(ai->dtype));
    loom_arg a[6];
    tune_fill_args(x, b->seed * 0x9e3779b97f4a7c15ull + (uint64_t)i + 1, b->fill_lo[f], b->fill_hi[f],
                   b->fill_ld[f], b->fill_cols[f], cnt, a);
    int g[3] = {b->fillgrid[f], 1, 1};
    return loom_launch(b->rt, b->fillk[f], g, a, 6);
}

static int fill_of(const tune_bench *b, int arg)
{
    for (int f = 0; f < b->nfill; f++)
        if (b->fill_arg[f] == arg)
            return f;
    return -1;
}

/* After copy 0 exists: the other copies (enough to fill four L2 sizes, at most
 * TUNE_MAX_COPIES, within a quarter of device memory), the flush buffer, the reference
 * buffers and the comparison's buffers. */
static loom_status finish_setup(tune_bench *b, char *err, size_t n)
{
    const rt_gpu_props *pp = b->g ? rt_gpu_properties(b->g) : NULL;
    size_t l2 = pp && pp->l2_bytes > 0 ? (size_t)pp->l2_bytes : (size_t)64 << 20;
    size_t budget = pp && pp->total_mem ? pp->total_mem / 4 : (size_t)4 << 30;
    size_t bytes = b->in.bytes ? b->in.bytes : 1;
    int k = (int)((4 * l2 + bytes - 1) / bytes);
    k = k < 1 ? 1 : k > TUNE_MAX_COPIES ? TUNE_MAX_COPIES : k;
    while (k > 1 && (size_t)k * bytes > budget)
        k--;
    if (!b->g) /* the interpreter (the tests): no cache to defeat, nothing timed */
        k = 1;
    b->ncopies = k;
    loom_status st = LOOM_OK;
    memcpy(b->args[0], b->in.args, sizeof b->in.args);
    for (int c = 1; c < k; c++)
        for (int i = 0; i < b->nargs; i++) {
            const loom_arg_info *ai = &b->in.info[i];
            b->args[c][i] = b->in.args[i];
            if (!ai->is_tensor)
                continue;
            loom_buffer *x = loom_buffer_create(b->rt, ai->min_bytes);
            if (!x)
                goto fail;
            b->extra[c][i] = x;
            b->args[c][i] = LOOM_ARG_BUF(x);
            int f = fill_of(b, i);
            st = ai->access == LOOM_OUT ? loom_buffer_fill(x, 0xff)
                 : f >= 0               ? fill_on_device(b, f, x)
                                        : loom_buffer_upload(x, b->in.host[i], ai->min_bytes);
            if (st != LOOM_OK)
                goto fail;
        }
    if (b->g && !(b->flush = loom_buffer_create(b->rt, 2 * l2)))
        goto fail;
    for (int i = 0; i < b->nargs; i++)
        if (is_output(&b->in.info[i]) && !(b->ref[i] = loom_buffer_create(b->rt, b->in.info[i].min_bytes)))
            goto fail;
    for (int i = 0; i < b->nargs; i++)
        if (b->cmpk[i] && (!(b->cbad[i] = loom_buffer_create(b->rt, (size_t)b->cmpgrid[i] * 4)) ||
                           !(b->cmax[i] = loom_buffer_create(b->rt, (size_t)b->cmpgrid[i] * 4)) ||
                           (b->redk[i] && !(b->csum[i] = loom_buffer_create(b->rt, 8)))))
            goto fail;
    return LOOM_OK;
fail:
    snprintf(err, n, "setting up %d copies of the arguments (%zu bytes each): %s", k, bytes,
             loom_runtime_error(b->rt));
    return st != LOOM_OK ? st : LOOM_ERR_NOMEM;
}

loom_status tune_bench_setup(tune_bench *b, const int64_t *config, uint64_t seed, char *err, size_t n)
{
    double t0 = util_now_ms();
    loom_status st = loom_instance_create(b->rt, b->t, b->shape, config, seed, &b->in, err, n);
    b->inputs_ms = util_now_ms() - t0;
    if (st != LOOM_OK)
        return st;
    return finish_setup(b, err, n);
}

loom_status tune_bench_device_kernels(tune_bench *b, char *err, size_t n)
{
    b->dev = tpl_device_find(b->t);
    if (!b->dev)
        return LOOM_OK;
    tpl_device_fill fills[LOOM_MAX_ARGS];
    int nf = b->dev->fills(b->shape, fills, LOOM_MAX_ARGS);
    for (int f = 0; f < nf; f++) {
        int i = fills[f].arg;
        const loom_arg_info *ai = &b->in.info[i];
        if (i < 0 || i >= b->nargs || !ai->is_tensor || ai->access != LOOM_IN) {
            snprintf(err, n, "the device fill of argument %d: not an input tensor", i);
            return LOOM_ERR_INVALID;
        }
        int64_t cnt = (int64_t)(ai->min_bytes / loom_dtype_size(ai->dtype));
        b->fillk[f] = tune_fill_kernel(ai->dtype, cnt, &b->fillgrid[f]);
        if (!b->fillk[f]) {
            snprintf(err, n, "argument '%s' (%s, %lld elements) cannot be filled on the device", ai->name,
                     loom_dtype_name(ai->dtype), (long long)cnt);
            return LOOM_ERR_UNSUPPORTED;
        }
        b->fill_arg[f] = i;
        b->fill_lo[f] = fills[f].lo;
        b->fill_hi[f] = fills[f].hi;
        b->fill_ld[f] = fills[f].ld;
        b->fill_cols[f] = fills[f].cols;
        b->nfill = f + 1;
    }
    char why[512] = "";
    b->nrefk = b->dev->reference ? b->dev->reference(b->shape, b->refk, b->refgrid, TUNE_MAX_REFK, why, sizeof why) : 0;
    if (b->nrefk < 1) {
        snprintf(err, n, "no device reference: %s", why[0] ? why : "(no reason given)");
        return LOOM_ERR_UNSUPPORTED;
    }
    if (b->dev->bound && b->t->bound) /* a kernel that cannot be made leaves atol and rtol */
        b->boundk = b->dev->bound(b->shape, b->boundgrid);
    return LOOM_OK;
}

static loom_buffer *zero_bound(tune_bench *b, int i);

/* After the reference kernels: the error model's bounds of dev->bound_arg on the device,
 * and the other checked outputs compared exactly (b->model).  Without a bound kernel, or
 * when it fails, nothing changes: atol and rtol. */
static loom_status device_bounds(tune_bench *b, const loom_arg *refargs, char *err, size_t n)
{
    int o = b->dev->bound_arg;
    if (!b->boundk || o < 0 || o >= b->nargs || !b->cmpk[o])
        return LOOM_OK;
    if (!b->bound[o] && !(b->bound[o] = loom_buffer_create(b->rt, (size_t)elements(&b->in.info[o]) * 4))) {
        snprintf(err, n, "the bounds' buffer: %s", loom_runtime_error(b->rt));
        return LOOM_ERR_NOMEM;
    }
    loom_arg args[LOOM_MAX_ARGS + 1];
    memcpy(args, refargs, (size_t)b->nargs * sizeof *args);
    args[b->nargs] = LOOM_ARG_BUF(b->bound[o]);
    loom_status st = loom_launch(b->rt, b->boundk, b->boundgrid, args, b->nargs + 1);
    if (st != LOOM_OK) {
        tune_first_line(err, n, "the bound kernel: ", loom_runtime_error(b->rt));
        return st;
    }
    for (int i = 0; i < b->nargs; i++)
        if (b->cmpk[i]) {
            if (!b->bound[i] && !(b->bound[i] = zero_bound(b, i)))
                return LOOM_ERR_NOMEM;
            b->model[i] = true;
        }
    return LOOM_OK;
}

loom_status tune_bench_setup_device(tune_bench *b, uint64_t seed, char *err, size_t n)
{
    double t0 = util_now_ms();
    loom_instance *in = &b->in;
    loom_status st = LOOM_OK;
    b->seed = seed;
    in->nargs = b->nargs;
    for (int i = 0; i < b->nargs; i++) {
        const loom_arg_info *ai = &in->info[i];
        if (!ai->is_tensor) {
            in->host[i] = &in->scalars[i];
            continue;
        }
        if (ai->access != LOOM_OUT && fill_of(b, i) < 0 && !(in->host[i] = calloc(1, ai->min_bytes))) {
            snprintf(err, n, "out of host memory");
            return LOOM_ERR_NOMEM;
        }
    }
    b->dev->init_rest(b->shape, in->host, seed);
    for (int i = 0; i < b->nargs && st == LOOM_OK; i++) {
        const loom_arg_info *ai = &in->info[i];
        if (!ai->is_tensor) {
            in->args[i] = (loom_arg){.buf = NULL};
            memcpy(&in->args[i].s, &in->scalars[i], sizeof in->args[i].s);
            continue;
        }
        in->bytes += ai->min_bytes;
        if (!(in->buf[i] = loom_buffer_create(b->rt, ai->min_bytes))) {
            st = LOOM_ERR_NOMEM;
            break;
        }
        in->args[i] = LOOM_ARG_BUF(in->buf[i]);
        int f = fill_of(b, i);
        st = ai->access == LOOM_OUT ? loom_buffer_fill(in->buf[i], 0xff)
             : f >= 0               ? fill_on_device(b, f, in->buf[i])
                                    : loom_buffer_upload(in->buf[i], in->host[i], ai->min_bytes);
    }
    if (st == LOOM_OK)
        st = finish_setup(b, err, n);
    else
        snprintf(err, n, "inputs on the device: %s", loom_runtime_error(b->rt));
    if (st == LOOM_OK && b->g) { /* a failed fill surfaces here rather than in the first check */
        char e[1024];
        if ((st = rt_gpu_sync(b->g, e, sizeof e)) != LOOM_OK)
            snprintf(err, n, "inputs on the device: %s", e);
    }
    b->inputs_ms = util_now_ms() - t0;
    return st;
}

/* Outputs of copy 0 back to their starting state: OUT poisoned (0xff bytes: NaN or -1),
 * INOUT re-uploaded. */
static loom_status bench_reset_outputs(tune_bench *b, loom_buffer *const *bufs)
{
    for (int i = 0; i < b->nargs; i++) {
        const loom_arg_info *ai = &b->in.info[i];
        if (!is_output(ai))
            continue;
        loom_status st = ai->access == LOOM_OUT ? loom_buffer_fill(bufs[i], 0xff)
                                                : loom_buffer_upload(bufs[i], b->in.host[i], ai->min_bytes);
        if (st != LOOM_OK)
            return st;
    }
    return LOOM_OK;
}

loom_status tune_bench_cpu_reference(tune_bench *b, char *err, size_t n)
{
    loom_expected e;
    loom_status st = loom_expected_create(b->t, b->shape, &b->in, &e);
    for (int i = 0; i < b->nargs && st == LOOM_OK; i++) {
        if (!e.ref[i] || !b->ref[i])
            continue;
        st = loom_buffer_upload(b->ref[i], e.ref[i], b->in.info[i].min_bytes);
        if (st != LOOM_OK || !b->t->bound || !b->cmpk[i])
            continue;
        /* the bounds in f32, rounded up (a bound is never tightened by its storage) */
        int64_t cnt = elements(&b->in.info[i]);
        float *f = malloc((size_t)cnt * sizeof *f);
        if (!f) {
            st = LOOM_ERR_NOMEM;
            break;
        }
        for (int64_t x = 0; x < cnt; x++) {
            float v = (float)e.bound[i][x];
            f[x] = (double)v < e.bound[i][x] ? nextafterf(v, INFINITY) : v;
        }
        if (!(b->bound[i] = loom_buffer_create(b->rt, (size_t)cnt * sizeof *f)))
            st = LOOM_ERR_NOMEM;
        else
            st = loom_buffer_upload(b->bound[i], f, (size_t)cnt * sizeof *f);
        b->model[i] = st == LOOM_OK;
        free(f);
    }
    loom_expected_destroy(&e);
    if (st != LOOM_OK)
        snprintf(err, n, "reference: %s", st == LOOM_ERR_NOMEM ? "out of host memory" : loom_runtime_error(b->rt));
    return st;
}

/* The first input set's arguments with the outputs redirected to the reference buffers. */
static void ref_args(const tune_bench *b, loom_arg *args)
{
    memcpy(args, b->args[0], sizeof b->args[0]);
    for (int i = 0; i < b->nargs; i++)
        if (b->ref[i])
            args[i] = LOOM_ARG_BUF(b->ref[i]);
}

loom_status tune_bench_gpu_reference(tune_bench *b, loom_kernel *k, const int grid[3], char *err, size_t n)
{
    loom_arg args[LOOM_MAX_ARGS];
    ref_args(b, args);
    loom_status st = bench_reset_outputs(b, b->ref);
    if (st == LOOM_OK)
        st = loom_launch(b->rt, k, grid, args, b->nargs);
    if (st == LOOM_OK) {
        char e[1024];
        st = rt_gpu_sync(b->g, e, sizeof e);
        if (st != LOOM_OK)
            snprintf(err, n, "%s", e);
    } else {
        snprintf(err, n, "%s", loom_runtime_error(b->rt));
    }
    return st;
}

loom_status tune_bench_device_reference(tune_bench *b, char *err, size_t n)
{
    loom_arg args[LOOM_MAX_ARGS];
    ref_args(b, args);
    loom_status st = bench_reset_outputs(b, b->ref);
    for (int r = 0; r < b->nrefk && st == LOOM_OK; r++) {
        if (!tune_bench_args_match(b, b->refk[r])) {
            snprintf(err, n, "reference kernel '%s' takes other arguments than the candidates",
                     loom_kernel_name(b->refk[r]));
            return LOOM_ERR_INVALID;
        }
        st = loom_launch(b->rt, b->refk[r], b->refgrid[r], args, b->nargs);
    }
    if (st != LOOM_OK) {
        tune_first_line(err, n, "", loom_runtime_error(b->rt));
        return st;
    }
    if ((st = device_bounds(b, args, err, n)) != LOOM_OK)
        return st;
    if (b->g) {
        char e[1024];
        if ((st = rt_gpu_sync(b->g, e, sizeof e)) != LOOM_OK)
            snprintf(err, n, "%s", e);
    }
    return st;
}

bool tune_bench_args_match(const tune_bench *b, loom_kernel *k)
{
    if (loom_kernel_num_args(k) != b->nargs)
        return false;
    for (int i = 0; i < b->nargs; i++) {
        loom_arg_info ai;
        loom_kernel_arg_info(k, i, &ai);
        const loom_arg_info *want = &b->in.info[i];
        if (ai.is_tensor != want->is_tensor || ai.dtype != want->dtype || ai.min_bytes != want->min_bytes ||
            ai.access != want->access)
            return false;
    }
    return true;
}

/* ---------------------------------------------------------------- the check */

/* A bound of zeros for output i (a reference made on the device has no model bounds; the
 * comparison kernel of a template with a model takes one all the same). */
static loom_buffer *zero_bound(tune_bench *b, int i)
{
    loom_status st = LOOM_OK;
    return tpl_zeroed_buffer(b->rt, (size_t)elements(&b->in.info[i]) * 4, &st);
}

/* Run k once on copy 0 and compare its outputs with the reference.  Returns LOOM_OK and
 * the number of bad elements (and the worst error), or the launch's failure with the
 * message in err; *fault is set when the failure was reported by a later synchronizing
 * call (an asynchronous fault: the context may be unusable now). */
static loom_status bench_check(tune_bench *b, loom_kernel *k, const int grid[3], double *nbad, double *worst,
                               bool *fault, char *err, size_t n)
{
    *nbad = 0;
    *worst = 0;
    *fault = false;
    loom_status st = bench_reset_outputs(b, b->in.buf);
    if (st == LOOM_OK)
        st = loom_launch(b->rt, k, grid, b->args[0], b->nargs);
    if (st != LOOM_OK) {
        tune_first_line(err, n, "", loom_runtime_error(b->rt));
        return st;
    }
    double scale = b->gpu_reference ? 2.0 : 1.0;
    for (int i = 0; i < b->nargs; i++) {
        if (!b->cmpk[i])
            continue;
        /* with the error model's bounds (a CPU reference): those alone; else atol and rtol,
         * doubled against a GPU output (both sides round), and a zero bound where the
         * kernel takes one */
        bool model = b->model[i];
        loom_arg ca[7];
        int na = 0;
        ca[na++] = LOOM_ARG_BUF(b->in.buf[i]);
        ca[na++] = LOOM_ARG_BUF(b->ref[i]);
        if (b->t->bound) {
            if (!b->bound[i] && !(b->bound[i] = zero_bound(b, i))) {
                tune_first_line(err, n, "", loom_runtime_error(b->rt));
                return LOOM_ERR_NOMEM;
            }
            ca[na++] = LOOM_ARG_BUF(b->bound[i]);
        }
        ca[na++] = LOOM_ARG_F32(model ? 0.0f : (float)(scale * b->t->atol));
        ca[na++] = LOOM_ARG_F32(model ? 0.0f : (float)(scale * b->t->rtol));
        ca[na++] = LOOM_ARG_BUF(b->cbad[i]);
        ca[na++] = LOOM_ARG_BUF(b->cmax[i]);
        int cg[3] = {b->cmpgrid[i], 1, 1};
        st = loom_launch(b->rt, b->cmpk[i], cg, ca, na);
        float two[2];
        if (b->redk[i]) { /* folded on the device: the count and the worst error come back */
            loom_arg ra[3] = {LOOM_ARG_BUF(b->cbad[i]), LOOM_ARG_BUF(b->cmax[i]), LOOM_ARG_BUF(b->csum[i])};
            static const int one[3] = {1, 1, 1};
            if (st == LOOM_OK)
                st = loom_launch(b->rt, b->redk[i], one, ra, 3);
            if (st == LOOM_OK)
                st = loom_buffer_download(b->csum[i], two, sizeof two);
        } else {
            if (st == LOOM_OK)
                st = loom_buffer_download(b->cbad[i], &two[0], 4);
            if (st == LOOM_OK)
                st = loom_buffer_download(b->cmax[i], &two[1], 4);
        }
        if (st != LOOM_OK) {
            *fault = true;
            tune_first_line(err, n, "", loom_runtime_error(b->rt));
            return st;
        }
        *nbad += two[0];
        if (!(two[1] <= *worst))
            *worst = two[1];
    }
    return LOOM_OK;
}

bool tune_check_one(tune_bench *b, const loom_template *t, const int64_t *shape, loom_tune_result *x, loom_kernel *k,
                    bool *passed)
{
    int grid[3];
    t->grid(shape, x->config, grid);
    double nbad, worst;
    bool fault;
    char e[1024];
    *passed = false;
    loom_status st = bench_check(b, k, grid, &nbad, &worst, &fault, e, sizeof e);
    if (st != LOOM_OK) {
        x->verdict = LOOM_TUNE_LAUNCH_FAILED;
        tune_first_line(x->reason, sizeof x->reason, "", e);
        return !fault;
    }
    if (nbad > 0) {
        x->verdict = LOOM_TUNE_WRONG;
        bool model = false;
        for (int i = 0; i < b->nargs; i++)
            model |= b->model[i];
        snprintf(x->reason, sizeof x->reason, "%.0f elements outside %s (max |err| %.3g) vs %s", nbad,
                 model ? "their error bound" : "tolerance", worst,
                 b->dev && b->nrefk ? "the template's device reference"
                 : b->gpu_reference ? "the reference config's GPU output"
                                    : "the CPU reference");
        return true;
    }
    *passed = true;
    return true;
}
