/*
 * ikbo_fa_plan.c -- the IKBO flash attention's work plan (its code is in
 * templates/ikbo_fa_units.h, shared with the files `loomc aot` writes), and its CPU
 * references (f16/bf16, and FP8 with its bound).
 */
#include "ikbo_fa.h"
#include "ir.h" /* ir_f32_to_fp8: the casts' rounding */

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    double log2e = FA_LOG2E, u = 0x1p-23;
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

/* ---------------------------------------------------------------- FP8 (dtype e4m3) */

/* x rounded to e4m3 as the kernel's cast (dsl/fp8.c), from its f32. */
static double e4m3(double x) { return ir_fp8_to_f32(LOOM_E4M3, ir_f32_to_fp8(LOOM_E4M3, (float)x)); }

/* The 256 e4m3 codes' values (dsl/fp8.c), so the reference decodes each input by a load. */
typedef struct fp8_lut {
    double v[256];
} fp8_lut;

static fp8_lut fp8_lut_make(void)
{
    fp8_lut t;
    for (int c = 0; c < 256; c++)
        t.v[c] = ir_fp8_to_f32(LOOM_E4M3, (uint8_t)c);
    return t;
}

/* One output row of the FP8 kernel's computation (fa_fp8_reference): its scores, tiles,
 * and per element the sums the reference and the bound need. */
typedef struct fp8_row {
    double c, vs, E, smax, m, L;      /* softmax factor, v_scale, largest S error, largest |S| c, max, l */
    double delta;                     /* the relative error of each P before its rounding to e4m3 */
    int64_t T;                        /* 128-key tiles */
    double *N, *Aq, *Ad;              /* [D]: sum q(P) a v, sum q(P) a |v|, sum d a |v| */
} fp8_row;


/* Row qo (head h, user u, len keys): the scores into sc (times c, base 2), the running
 * max of each 128-key tile, and the P V sums with P = 2^(S c - m_tile + 8) rounded to
 * e4m3, rescaled by a = 2^(m_tile - m), and d = how far the rounding of a P off by delta
 * (relative) can move from the reference's (0 where no rounding boundary is that near). */
static void fp8_row_sums(const fa_spec *s, const fp8_lut *t, const uint8_t *q, const uint8_t *k, const uint8_t *v,
                         const float *scales, int64_t qo, int64_t usr, int64_t h, int64_t len, bool fp8_sums,
                         double *sc, fp8_row *w)
{
    int64_t D = s->D, H = s->H;
    double qsc = scales[h], ksc = scales[H + h];
    w->vs = scales[2 * H + h];
    w->c = fa_softmax_factor(D) * qsc * ksc;
    w->E = w->smax = 0, w->L = 0, w->m = -INFINITY, w->T = (len + 127) / 128;
    for (int64_t j = 0; j < len; j++) {
        int64_t ko = ((usr * s->S + j) * H + h) * D;
        double d = 0, mag = 0;
        for (int64_t x = 0; x < D; x++) {
            double p = t->v[q[qo + x]] * t->v[k[ko + x]];
            d += p, mag += fabs(p);
        }
        sc[j] = d * w->c;
        w->m = fmax(w->m, sc[j]);
        w->smax = fmax(w->smax, fabs(sc[j]));
        w->E = fmax(w->E, (fp8_sums ? loom_fp8_mma_sum_error(D, mag) : loom_f32_sum_error(D, mag)) * fabs(w->c));
    }
    double u = 0x1p-23, arg = 2 * w->E + (4 * (w->smax + fabs(w->m) + FA_FP8_P_LOG2) + 3 * w->smax) * u;
    double delta = w->delta = (1 + expm1(arg * M_LN2)) * (1 + 0x1p-21) - 1; /* each P before its rounding */
    for (int64_t x = 0; x < D; x++)
        w->N[x] = w->Aq[x] = w->Ad[x] = 0;
    double mt = -INFINITY;
    for (int64_t j = 0; j < len; j++) {
        if (j % 128 == 0)
            for (int64_t i = j; i < len && i < j + 128; i++)
                mt = fmax(mt, sc[i]);
        double p = exp2(sc[j] - mt + FA_FP8_P_LOG2), a = exp2(mt - w->m), pq = e4m3(p);
        double dq = fmax(e4m3(p * (1 + delta)) - pq, pq - e4m3(p * (1 - delta)));
        w->L += p * a;
        const uint8_t *vj = v + (usr * H + h) * D * s->S + j; /* Vt [U, H, D, S]: column x at vj[x * S] */
        for (int64_t x = 0; x < D; x++) {
            double vv = t->v[vj[x * s->S]];
            w->N[x] += pq * a * vv, w->Aq[x] += pq * a * fabs(vv), w->Ad[x] += dq * a * fabs(vv);
        }
    }
}

/* The bound of one element (docs/checks.md, "ikbo_fa in FP8"), the reference r. */
static double fp8_bound(const fa_spec *s, const fp8_row *w, int64_t len, bool fp8_sums, double r, int64_t x)
{
    if (!len)
        return loom_error_bound(fa_out_dt(s), r, 0);
    double u = 0x1p-23, T = (double)w->T;
    /* a tile's rescale relative to the reference's: its max's error, exp2 and a rounding each tile */
    double ef = (1 + expm1((w->E + 4 * u * (w->smax + fabs(w->m) + FA_FP8_P_LOG2)) * M_LN2)) *
                    pow((1 + 0x1p-21) * (1 + 2 * u), T) - 1;
    double lam = (1 + w->delta) * (1 + ef) * (1 + loom_f32_sum_error(len + w->T, 1.0)) - 1;
    if (!(lam < 0.5))
        return INFINITY;
    double mag = (w->Aq[x] + w->Ad[x]) * (1 + ef);
    double sums = fp8_sums ? loom_fp8_mma_sum_error(len, mag) : loom_f32_sum_error(len, mag);
    double dn = w->Ad[x] * (1 + ef) + ef * w->Aq[x] + sums + T * u * mag;
    double err = fabs(w->vs) * dn / (w->L * (1 - lam)) + fabs(r) * lam / (1 - lam) + (double)len * 0x1p-126;
    err += 3 * u * (fabs(r) + err); /* 1 / l, times v_scale, times O */
    return loom_error_bound(fa_out_dt(s), r, err);
}

/* fa_fp8_reference's rows r0 to r1 - 1 (one thread's part). */
typedef struct fp8_part {
    const fa_spec *s;
    const fp8_lut *t;
    const uint8_t *q, *k, *v;
    const float *scales;
    const int32_t *map, *seq_len;
    bool fp8_sums;
    void *out;
    double *bound;
    int64_t r0, r1;
} fp8_part;

static void *fp8_rows(void *arg)
{
    const fp8_part *a = arg;
    const fa_spec *s = a->s;
    int64_t H = s->H, D = s->D;
    double *sc = malloc((size_t)(s->S > 0 ? s->S : 1) * sizeof *sc), *buf = malloc((size_t)D * 3 * sizeof *buf);
    if (!sc || !buf) {
        free(sc), free(buf);
        return NULL;
    }
    fp8_row w = {.N = buf, .Aq = buf + D, .Ad = buf + 2 * D};
    for (int64_t r = a->r0; r < a->r1; r++) {
        int64_t u = a->map[r / s->nseed], len = len_of(s, a->seq_len, u);
        for (int64_t h = 0; h < H; h++) {
            const int64_t qo = (r * H + h) * D;
            fp8_row_sums(s, a->t, a->q, a->k, a->v, a->scales, qo, u, h, len, a->fp8_sums, sc, &w);
            for (int64_t x = 0; x < D; x++) {
                tpl_set(a->out, fa_out_dt(s), qo + x, len ? w.vs * w.N[x] / w.L : 0);
                if (a->bound)
                    a->bound[qo + x] = fp8_bound(s, &w, len, a->fp8_sums, tpl_get(a->out, fa_out_dt(s), qo + x), x);
            }
        }
    }
    free(sc), free(buf);
    return NULL;
}

/* Rows are independent: large references (the tuner's check at its largest CPU-checked
 * outputs, bench_ikbo_fa's sampled rows at the headline) are split over threads, each
 * row computed as one thread would. */
void fa_fp8_reference(const fa_spec *s, const void *q, const void *k, const void *v, const float *scales,
                      const int32_t *map, const int32_t *seq_len, bool fp8_sums, void *out, double *bound)
{
    enum { MAX_THREADS = 16, MIN_ROWS = 16 };
    fp8_lut t = fp8_lut_make();
    int64_t rows = fa_rows(s), nt = rows / MIN_ROWS;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    nt = nt > MAX_THREADS ? MAX_THREADS : nt > cores ? cores : nt < 1 ? 1 : nt;
    int64_t per = (rows + nt - 1) / nt;
    fp8_part part[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    for (int64_t i = 0; i < nt; i++) {
        int64_t r0 = i * per < rows ? i * per : rows, r1 = r0 + per < rows ? r0 + per : rows;
        part[i] = (fp8_part){s, &t, q, k, v, scales, map, seq_len, fp8_sums, out, bound, r0, r1};
        started[i] = nt > 1 && pthread_create(&th[i], NULL, fp8_rows, &part[i]) == 0;
        if (!started[i]) /* one part, or no thread: this one here */
            fp8_rows(&part[i]);
    }
    for (int64_t i = 0; i < nt; i++)
        if (started[i])
            pthread_join(th[i], NULL);
}

void fa_fp8_dequant(const fa_spec *s, const void *q, const void *k, const void *vt, const float *scales,
                    loom_dtype dt, void *q16, void *k16, void *v16)
{
    int64_t H = s->H, D = s->D, S = s->S, qn = fa_rows(s) * H * D, kn = s->U * S * H * D;
    for (int64_t i = 0; i < qn; i++) /* i over [rows, H, D] */
        tpl_set(q16, dt, i, tpl_get(q, LOOM_E4M3, i) * scales[(i / D) % H]);
    for (int64_t i = 0; i < kn; i++) { /* i over [U * S, H, D] */
        int64_t x = i % D, h = (i / D) % H, key = i / (D * H), u = key / S, j = key % S;
        tpl_set(k16, dt, i, tpl_get(k, LOOM_E4M3, i) * scales[H + h]);
        tpl_set(v16, dt, i, tpl_get(vt, LOOM_E4M3, ((u * H + h) * D + x) * S + j) * scales[2 * H + h]);
    }
}
