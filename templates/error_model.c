/*
 * error_model.c -- how far a right kernel's output may lie from the exact result, element
 * by element (docs/checks.md says why each term is there).
 *
 * The checks (loom_template_check, so loomc run and the tests; the tuner's check of each
 * candidate against a CPU or device reference; bench_ikbo_lce; docs/checks.md lists the
 * ones still on a tolerance) compare |out - ref| with a bound per element that a template
 * derives from its computation with the three helpers below, instead of one
 * atol + rtol * |ref| for every element.  A single tolerance must be loose enough for
 * the worst element (a long sum that cancels to nearly zero has a large error and a small
 * value), so it passes wrong values elsewhere, and a comparison of maxima says nothing
 * about any one element.  A bound per element is as tight as the computation allows at
 * that element and is never exceeded by a right kernel: the terms are worst cases, not
 * estimates.
 *
 * The terms:
 *   - a sum of k products accumulated in f32 (wgmma, mma, FMA loops), in any order:
 *     |error| <= gamma_k * sum |terms|, gamma_k = k u / (1 - k u).  u is 2^-23, twice the
 *     unit roundoff of round-to-nearest, because the tensor cores' internal adds are not
 *     specified to round to nearest.  f16 and bf16 products are exact in f32.
 *   - the final rounding to the output's type (half an ulp) and the reference's own
 *     rounding when it is stored in that type (another half): one ulp of the output type,
 *     taken at |x| + err so that a value rounded across a power of two is covered.
 *   - a template's own steps (an intermediate stored in f16, exp2 on the SFU, a division):
 *     the template adds them to err before asking for the bound.
 */
#include "tpl.h"

#include <math.h>

/* u of the model: an f32 add may be off by one ulp of its result (2^-23 relative). */
#define F32_U 0x1p-23

double loom_ulp(loom_dtype dt, double x)
{
    int mant, emin; /* explicit mantissa bits; the exponent of the smallest normal */
    switch (dt) {
    case LOOM_F16: mant = 10, emin = -14; break;
    case LOOM_BF16: mant = 7, emin = -126; break;
    case LOOM_F32: mant = 23, emin = -126; break;
    default: return 0; /* integers and booleans are exact */
    }
    x = fabs(x);
    if (!isfinite(x))
        return INFINITY;
    int e = x > 0 ? ilogb(x) : emin;
    if (e < emin)
        e = emin;
    return ldexp(1.0, e - mant);
}

/* FP8 wgmma accumulates with reduced precision: NVIDIA does not document it; DeepSeek-V3
 * (arXiv 2412.19437, 3.3.2) measured about 14 bits kept on H800, and others a 13-bit
 * mantissa (e8m13) with truncation on H100 -- the reason CUTLASS's default FP8 kernels
 * and DeepGEMM add the tensor cores' partial sums into an f32 accumulator every few k
 * blocks.  An add may then be off by one ulp of a 13-bit mantissa, 2^-13 relative. */
#define FP8_MMA_U 0x1p-13

static double gamma_sum(int64_t k, double u, double magnitude)
{
    if (k <= 1)
        return 0; /* one term: its product is exact */
    double ku = (double)k * u;
    if (ku >= 1)
        return INFINITY; /* no bound */
    return ku / (1 - ku) * magnitude;
}

double loom_f32_sum_error(int64_t k, double magnitude) { return gamma_sum(k, F32_U, magnitude); }

double loom_fp8_mma_sum_error(int64_t k, double magnitude) { return gamma_sum(k, FP8_MMA_U, magnitude); }

/* Promotion every `block` products (docs/checks.md, "FP8"): block j sums its L_j <= block
 * products on the tensor cores from zero, off by gamma_L(2^-13) m_j (m_j its sum of
 * |a b|, the m_j summing to `magnitude`), so each block sum is at most (1 + gamma_block) m_j
 * in magnitude; the f32 accumulator adds the cdiv(k, block) block sums, off by
 * gamma_blocks(2^-23) of their magnitudes.  One block (block >= k, or 0): the plain chain. */
double loom_fp8_promoted_sum_error(int64_t k, int64_t block, double magnitude)
{
    if (block <= 0 || block >= k)
        return loom_fp8_mma_sum_error(k, magnitude);
    double in_blocks = gamma_sum(block, FP8_MMA_U, magnitude);
    return in_blocks + gamma_sum((k + block - 1) / block, F32_U, magnitude + in_blocks);
}

/* ref is the reference as stored in dt (x rounded), err the kernel's error before its own
 * final rounding: |out - ref| <= err + half an ulp at the kernel's value + half an ulp at
 * x, and both values lie within |ref| + ulp(ref) / 2 + err. */
double loom_error_bound(loom_dtype dt, double ref, double err)
{
    if (!isfinite(ref) || !isfinite(err))
        return INFINITY;
    double a = fabs(ref);
    return err + loom_ulp(dt, a + loom_ulp(dt, a) / 2 + err);
}
