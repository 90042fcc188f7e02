/*
 * tpl.c -- host helpers for templates: random inputs and dtype-generic element access.
 */
#include "tpl.h"

#include "../dsl/ir.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

uint64_t tpl_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tpl_fill(void *p, loom_dtype dt, int64_t n, double lo, double hi, uint64_t *state)
{
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(tpl_rand(state) >> 11) * (1.0 / 9007199254740992.0);
        double v = lo + u * (hi - lo);
        tpl_set(p, dt, i, ir_dtype_is_float(dt) ? v : floor(v));
    }
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
