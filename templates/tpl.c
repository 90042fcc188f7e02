/*
 * tpl.c -- host helpers for templates: random inputs and dtype-generic element access.
 *
 * Random inputs come from splitmix64, a counter-based generator, so a big fill is cut
 * into ranges made on several threads with exactly the values one thread would make.
 */
#include "tpl.h"

#include "../dsl/ir.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

uint64_t tpl_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull); /* TPL_GAMMA */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define TPL_GAMMA 0x9e3779b97f4a7c15ull

/* Elements [a, b) of a fill whose generator started at state0.  splitmix64 is a counter:
 * element i takes the state state0 + (i + 1) * gamma, so any range can be made alone. */
typedef struct fill_part {
    void *p;
    loom_dtype dt;
    int64_t a, b;
    double lo, hi;
    uint64_t state0;
} fill_part;

static void *fill_range(void *arg)
{
    const fill_part *f = arg;
    uint64_t s = f->state0 + (uint64_t)f->a * TPL_GAMMA;
    bool is_float = ir_dtype_is_float(f->dt);
    for (int64_t i = f->a; i < f->b; i++) {
        double u = (double)(tpl_rand(&s) >> 11) * (1.0 / 9007199254740992.0);
        double v = f->lo + u * (f->hi - f->lo);
        tpl_set(f->p, f->dt, i, is_float ? v : floor(v));
    }
    return NULL;
}

/* Large fills (the autotuner's inputs at benchmark shapes: hundreds of millions of
 * elements) are split over threads; the values are the same as one thread's. */
void tpl_fill(void *p, loom_dtype dt, int64_t n, double lo, double hi, uint64_t *state)
{
    enum { MAX_THREADS = 16, PER_THREAD = 1 << 20 };
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t nt = n / PER_THREAD;
    nt = nt > MAX_THREADS ? MAX_THREADS : nt;
    nt = nt > cores ? cores : nt;
    if (nt < 2) {
        fill_range(&(fill_part){p, dt, 0, n, lo, hi, *state});
    } else {
        fill_part part[MAX_THREADS];
        pthread_t th[MAX_THREADS];
        bool started[MAX_THREADS] = {false};
        for (int64_t t = 0; t < nt; t++)
            part[t] = (fill_part){p, dt, n * t / nt, n * (t + 1) / nt, lo, hi, *state};
        for (int64_t t = 1; t < nt; t++)
            started[t] = pthread_create(&th[t], NULL, fill_range, &part[t]) == 0;
        fill_range(&part[0]);
        for (int64_t t = 1; t < nt; t++) {
            if (started[t])
                pthread_join(th[t], NULL);
            else
                fill_range(&part[t]); /* no thread could be made: do it here */
        }
    }
    *state += (uint64_t)n * TPL_GAMMA;
}

double tpl_get(const void *p, loom_dtype dt, int64_t i)
{
    const unsigned char *b = (const unsigned char *)p + (size_t)i * loom_dtype_size(dt);
    switch (dt) {
    case LOOM_F16: { uint16_t h; memcpy(&h, b, 2); return ir_f16_to_f32(h); }
    case LOOM_BF16: { uint16_t h; memcpy(&h, b, 2); return ir_bf16_to_f32(h); }
    case LOOM_F32: { float f; memcpy(&f, b, 4); return f; }
    case LOOM_I32: { int32_t x; memcpy(&x, b, 4); return x; }
    case LOOM_I64: { int64_t x; memcpy(&x, b, 8); return (double)x; }
    case LOOM_I1: return b[0] != 0;
    case LOOM_E4M3:
    case LOOM_E5M2: return ir_fp8_to_f32(dt, b[0]);
    default: return 0;
    }
}

void tpl_set(void *p, loom_dtype dt, int64_t i, double v)
{
    unsigned char *b = (unsigned char *)p + (size_t)i * loom_dtype_size(dt);
    switch (dt) {
    case LOOM_F16: { uint16_t h = ir_f32_to_f16((float)v); memcpy(b, &h, 2); break; }
    case LOOM_BF16: { uint16_t h = ir_f32_to_bf16((float)v); memcpy(b, &h, 2); break; }
    case LOOM_F32: { float f = (float)v; memcpy(b, &f, 4); break; }
    case LOOM_I32: { int32_t x = (int32_t)v; memcpy(b, &x, 4); break; }
    case LOOM_I64: { int64_t x = (int64_t)v; memcpy(b, &x, 8); break; }
    case LOOM_I1: b[0] = v != 0; break;
    case LOOM_E4M3:
    case LOOM_E5M2: b[0] = ir_f32_to_fp8(dt, (float)v); break;
    default: break;
    }
}

double tpl_round(loom_dtype dt, double v) { return ir_round_to(dt, (float)v); }

loom_kernel *tpl_refuse(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return NULL;
}

int tpl_valid(const char *w, char *why, size_t n)
{
    if (w && why && n)
        snprintf(why, n, "%s", w);
    return w == NULL;
}

int64_t tpl_acc_regs(int cwarps, int consumers, int bm, int bn)
{
    int wgs = consumers == TPL_PINGPONG ? 1 : cwarps / 4; /* warp groups sharing one tile */
    return (int64_t)(bm / wgs) * bn / 128;
}

const char *tpl_why_not_consumers(int cwarps, int consumers, int last, int ctas, int bm, int bn)
{
    if (cwarps != 4 && cwarps != 8)
        return "cwarps must be 4 or 8 (one or two consumer warp groups)";
    if (consumers < TPL_COOPERATIVE || consumers > last)
        return last == TPL_SPLIT ? "consumers must be 0 (cooperative), 1 (ping-pong) or 2 (split)"
                                 : "consumers must be 0 (one task shares each tile) or 1 (ping-pong: two take turns "
                                   "on whole tiles)";
    if (consumers != TPL_COOPERATIVE && cwarps != 8)
        return last == TPL_SPLIT ? "consumers=1 and 2 need cwarps=8 (two consumer warp groups)"
                                 : "consumers=1 (ping-pong) needs cwarps=8 (two consumer warp groups)";
    if (consumers == TPL_PINGPONG && ctas == 0)
        return "consumers=1 (ping-pong) needs persistent CTAs (ctas > 0): with one CTA per tile there is no "
               "second tile to take turns on";
    int wgs = consumers == TPL_PINGPONG ? 1 : cwarps / 4; /* warp groups sharing one tile */
    if (bm != 64 * wgs && bm != 128 * wgs)
        return consumers == TPL_PINGPONG ? "BM must be 64 or 128 with consumers=1 (one warp group owns a whole tile)"
                                         : "BM must be 64 or 128 rows per consumer warp group";
    if (bn < 64 || bn > 256 || bn % 64)
        return "BN must be 64, 128, 192 or 256";
    if (tpl_acc_regs(cwarps, consumers, bm, bn) > TPL_ACC_REGS_MAX)
        return "the accumulator needs more than 192 of the consumers' 232 registers a thread";
    return NULL;
}

int64_t tpl_pow2_at_least(int64_t n)
{
    int64_t p = 1;
    while (p < n && p < INT64_C(1) << 62) /* saturates: 2^62 for anything larger */
        p *= 2;
    return p;
}

int64_t tpl_pad8(int64_t n) { return (n + 7) / 8 * 8; }

enum { PAD_ROWS = 16, PAD_COLS = 256 };

static int64_t pad_cols(int64_t ld) { return ld < PAD_COLS ? tpl_pow2_at_least(ld) : PAD_COLS; }

loom_kernel *tpl_pad_rows_kernel(const char *name, int64_t rows, int64_t cols, int64_t ld, loom_dtype dt)
{
    int64_t w = pad_cols(ld);
    loom_kernel *k = loom_kernel_create(name, 4);
    loom_val src = loom_arg_tensor(k, "src", dt, LOOM_SHAPE2(rows, cols), LOOM_IN);
    loom_val dst = loom_arg_tensor(k, "dst", dt, LOOM_SHAPE2(rows, ld), LOOM_OUT);
    loom_val o[2] = {loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, PAD_ROWS)),
                     loom_mul(k, loom_program_id(k, 1), loom_const_i(k, LOOM_I32, w))};
    /* columns past src's read as zero; dst's own bounds mask the store */
    loom_val x = loom_load(k, src, o, LOOM_SHAPE2(PAD_ROWS, w), LOOM_NONE, 0.0);
    loom_store(k, dst, o, x, LOOM_NONE);
    return k;
}

void tpl_pad_rows_grid(int64_t rows, int64_t ld, int grid[3])
{
    grid[0] = (int)TPL_CDIV(rows, PAD_ROWS);
    grid[1] = (int)TPL_CDIV(ld, pad_cols(ld));
    grid[2] = 1;
}

loom_status tpl_fail(loom_runtime *rt, loom_status st, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    loom_runtime_set_error(rt, "%s", msg);
    return st;
}

loom_status tpl_check_request(loom_runtime *rt, const char *fn, int64_t B, int64_t U, int64_t Bmax, int64_t Umax)
{
    if (B < 1 || B > Bmax)
        return tpl_fail(rt, LOOM_ERR_INVALID, "%s: B is %lld; it must be 1 to %lld (the B prepared)", fn, (long long)B,
                        (long long)Bmax);
    if (U < 1 || U > Umax)
        return tpl_fail(rt, LOOM_ERR_INVALID, "%s: U is %lld; it must be 1 to %lld (the U prepared)", fn, (long long)U,
                        (long long)Umax);
    return LOOM_OK;
}

loom_buffer *tpl_zeroed_buffer(loom_runtime *rt, size_t bytes, loom_status *st)
{
    if (*st != LOOM_OK)
        return NULL;
    loom_buffer *b = loom_buffer_create(rt, bytes ? bytes : 1);
    if (!b)
        *st = LOOM_ERR_NOMEM;
    else if ((*st = loom_buffer_fill(b, 0)) != LOOM_OK) {
        loom_buffer_destroy(b);
        b = NULL;
    }
    return b;
}
