/*
 * t_model.h -- the error model (docs/checks.md) in the tests' own checks of a kernel's
 * output against a host reference.
 *
 *   t_verdict, t_verdict_add   count the elements past their bound (NaN fails), keep the
 *                              first of them and the worst |out - ref| / bound
 *   t_gemm_bound, t_gemm_check the gemm template's bound (templates/gemm.c): gamma_K
 *                              sum |a b| before the final rounding, one ulp of odtype,
 *                              against a reference in double rounded to odtype
 *   t_just_past                the value of a dtype nearest ref +- bound that lies past
 *                              the bound: a planted error a check must catch
 *
 * A check's bound comes from the model of the computation (the template's bound, or
 * ik_lce_bound_dt), never from a tolerance: see docs/checks.md for why.
 */
#ifndef LOOM_T_MODEL_H
#define LOOM_T_MODEL_H

#include "testutil.h"
#include "tpl.h"

/* What a check found. */
typedef struct t_verdict {
    int64_t bad;   /* elements past their bound (NaN included) */
    int64_t first; /* the first of them, -1 when none */
    double worst;  /* the largest |out - ref| / bound (infinite for NaN) */
    double got, ref, bound; /* at the first bad element */
} t_verdict;

#define T_VERDICT_INIT {0, -1, 0, 0, 0, 0}

/* Element i: got against ref within bound. */
static inline void t_verdict_add(t_verdict *v, int64_t i, double got, double ref, double bound)
{
    double d = fabs(got - ref), q = d / bound;
    if (!(d <= bound) && !v->bad++)
        v->first = i, v->got = got, v->ref = ref, v->bound = bound;
    if (q > v->worst || q != q)
        v->worst = q != q ? INFINITY : q;
}

/* The gemm model (templates/gemm.c's bound): an element of K exact products whose
 * magnitudes sum to mag, accumulated in f32 in any order, rounded to odt; ref is the
 * reference rounded to odt. */
static inline double t_gemm_bound(loom_dtype odt, int64_t K, double ref, double mag)
{
    return loom_error_bound(odt, ref, loom_f32_sum_error(K, mag));
}

/* Element i of a gemm's C (dtype odt, depth K) whose reference in double is ref (not
 * rounded) and whose products' magnitudes sum to mag: its reference rounded to odt and
 * its bound. */
static inline void t_gemm_expected(loom_dtype odt, int64_t K, double ref, double mag, double *r, double *b)
{
    *r = tpl_round(odt, ref);
    *b = t_gemm_bound(odt, K, *r, mag);
}

/* C [n] (dtype odt, on the host) against ref and mag (t_gemm_ref) by the gemm model. */
static inline t_verdict t_gemm_check(loom_dtype odt, int64_t K, const void *c, const double *ref, const double *mag,
                                     int64_t n)
{
    t_verdict v = T_VERDICT_INIT;
    for (int64_t i = 0; i < n; i++) {
        double r, b;
        t_gemm_expected(odt, K, ref[i], mag[i], &r, &b);
        t_verdict_add(&v, i, tpl_get(c, odt, i), r, b);
    }
    return v;
}

/* The value of dtype dt nearest ref + dir * bound that lies beyond the bound. */
static inline double t_just_past(loom_dtype dt, double ref, double bound, int dir)
{
    double v = tpl_round(dt, ref + dir * bound);
    for (int i = 0; i < 64 && !(fabs(v - ref) > bound); i++) {
        double step = loom_ulp(dt, v);
        v = tpl_round(dt, v + dir * (step > 0 ? step : 1));
    }
    return v;
}

#endif /* LOOM_T_MODEL_H */
