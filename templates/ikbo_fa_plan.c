/*
 * ikbo_fa_plan.c -- the IKBO flash attention's work plan (its code is in
 * templates/ikbo_fa_units.h, shared with the files `loomc aot` writes), and its CPU
 * reference.
 */
#include "ikbo_fa.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t len_of(const fa_spec *s, const int32_t *seq_len, int64_t u)
{
    return seq_len ? seq_len[u] : s->S;
}

int64_t fa_plan(const fa_spec *s, const int32_t *map, const int32_t *seq_len, int32_t *units, char *err,
                size_t errlen)
{
    return fa_units(s->B, s->U, s->S, s->nseed, map, seq_len, units, err, errlen);
}

void fa_reference(const fa_spec *s, const void *q, const void *k, const void *v, const int32_t *map,
                  const int32_t *seq_len, void *out)
{
    int64_t H = s->H, D = s->D, S = s->S;
    double scale = 1.0 / sqrt((double)D);
    double *p = malloc((size_t)S * sizeof *p), *o = malloc((size_t)D * sizeof *o);
    if (!p || !o) {
        free(p), free(o);
        return;
    }
    for (int64_t r = 0; r < fa_rows(s); r++) {
        int64_t u = map[r / s->nseed], len = len_of(s, seq_len, u);
        for (int64_t h = 0; h < H; h++) {
            const int64_t qo = (r * H + h) * D;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < len; j++) {
                int64_t ko = ((u * S + j) * H + h) * D;
                double d = 0;
                for (int64_t x = 0; x < D; x++)
                    d += tpl_get(q, s->dt, qo + x) * tpl_get(k, s->dt, ko + x);
                p[j] = d * scale;
                mx = p[j] > mx ? p[j] : mx;
            }
            for (int64_t x = 0; x < D; x++)
                o[x] = 0;
            for (int64_t j = 0; j < len; j++) {
                p[j] = exp(p[j] - mx);
                sum += p[j];
                int64_t vo = ((u * S + j) * H + h) * D;
                for (int64_t x = 0; x < D; x++)
                    o[x] += p[j] * tpl_get(v, s->dt, vo + x);
            }
            for (int64_t x = 0; x < D; x++)
                tpl_set(out, s->dt, qo + x, len ? o[x] / sum : 0);
        }
    }
    free(p), free(o);
}
