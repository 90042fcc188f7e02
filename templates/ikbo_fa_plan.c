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

/* The scores of query row qo (its head's D elements) against the first len keys of user usr
 * at head h, scaled by 1/sqrt(D), into sc[]; returns their maximum (-inf for none).  With
 * emax, also the largest f32 error a kernel's score can have (gamma_D sum |q k|, scaled). */
static double scores(const fa_spec *s, const void *q, const void *k, int64_t qo, int64_t usr, int64_t h, int64_t len,
                     double *sc, double *emax)
{
    double scale = 1.0 / sqrt((double)s->D), mx = -INFINITY;
    for (int64_t j = 0; j < len; j++) {
        int64_t ko = ((usr * s->S + j) * s->H + h) * s->D;
        double d = 0, mag = 0;
        for (int64_t x = 0; x < s->D; x++) {
            double t = tpl_get(q, s->dt, qo + x) * tpl_get(k, s->dt, ko + x);
            d += t;
            mag += fabs(t);
        }
        sc[j] = d * scale;
        mx = sc[j] > mx ? sc[j] : mx;
        if (emax)
            *emax = fmax(*emax, loom_f32_sum_error(s->D, mag) * scale);
    }
    return mx;
}

void fa_reference(const fa_spec *s, const void *q, const void *k, const void *v, const int32_t *map,
                  const int32_t *seq_len, void *out)
{
    int64_t H = s->H, D = s->D, S = s->S;
    double *p = malloc((size_t)S * sizeof *p), *o = malloc((size_t)D * sizeof *o);
    if (!p || !o) {
        free(p), free(o);
        return;
    }
    for (int64_t r = 0; r < fa_rows(s); r++) {
        int64_t u = map[r / s->nseed], len = len_of(s, seq_len, u);
        for (int64_t h = 0; h < H; h++) {
            const int64_t qo = (r * H + h) * D;
            double mx = scores(s, q, k, qo, u, h, len, p, NULL), sum = 0;
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

/* The error model (docs/checks.md) of the kernel at one output row: S = Q K^T sums D exact
 * products in f32; exp2 of (S - max) * scale * log2(e) on the SFU (relative error 2^-21 at
 * most, the argument rounded twice); P rounded to dtype for P V; P V and the row sum l sum
 * len terms in f32; O and l rescaled once a tile (the same factor: only its roundings
 * count) and divided once.  With delta the relative error of each P and rho = delta +
 * gamma_len (1 + delta), out = O / l is off by at most rho / (1 - rho) (A + |out|), where
 * A = sum p |v| / l, plus the rescales' and the division's roundings. */
void fa_bound(const fa_spec *s, const void *q, const void *k, const void *v, const int32_t *map,
              const int32_t *seq_len, const void *ref, double *bound)
{
    int64_t H = s->H, D = s->D, S = s->S;
    double log2e = 1.4426950408889634, u = 0x1p-23;
    double up = s->dt == LOOM_BF16 ? 0x1p-8 : 0x1p-11; /* P rounded to nearest in dtype */
    double *sj = malloc((size_t)S * sizeof *sj), *a = malloc((size_t)D * sizeof *a);
    if (!sj || !a)
        goto done;
    for (int64_t r = 0; r < fa_rows(s); r++) {
        int64_t usr = map[r / s->nseed], len = len_of(s, seq_len, usr);
        for (int64_t h = 0; h < H; h++) {
            const int64_t qo = (r * H + h) * D;
            double emax = 0, smax = 0, l = 0;
            double mx = scores(s, q, k, qo, usr, h, len, sj, &emax);
            for (int64_t j = 0; j < len; j++)
                smax = fmax(smax, fabs(sj[j]));
            /* each exponent (in log2 units) off by the two S errors and its roundings */
            double arg = 2 * emax * log2e + 4 * u * (smax + fabs(mx)) * log2e;
            double delta = (1 + expm1(arg * M_LN2)) * (1 + 0x1p-21) * (1 + up) - 1;
            double rho = delta + loom_f32_sum_error(len, 1.0) * (1 + delta);
            double rel = rho < 0.5 ? rho / (1 - rho) : INFINITY;
            double rounds = (2.0 * (double)((len + 63) / 64) + 4) * u; /* rescales (64-key tiles at least), 1/l */
            for (int64_t x = 0; x < D; x++)
                a[x] = 0;
            for (int64_t j = 0; j < len; j++) {
                double p = exp(sj[j] - mx);
                l += p;
                int64_t vo = ((usr * S + j) * H + h) * D;
                for (int64_t x = 0; x < D; x++)
                    a[x] += p * fabs(tpl_get(v, s->dt, vo + x));
            }
            for (int64_t x = 0; x < D; x++) {
                double r_ = tpl_get(ref, s->dt, qo + x);
                double err = 0;
                if (len) {
                    double big = a[x] / l + fabs(r_) + loom_ulp(s->dt, r_);
                    err = (rel + rounds) * big + (double)len * 0x1p-126; /* exp2 flushes tiny P to 0 */
                }
                bound[qo + x] = loom_error_bound(s->dt, r_, err);
            }
        }
    }
done:
    free(sj);
    free(a);
}
