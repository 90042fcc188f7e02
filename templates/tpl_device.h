/*
 * tpl_device.h -- what a template tells the autotuner so that its inputs and reference
 * output are made on the device, not on the host (internal; tune/ reads it).
 *
 * A template's init and reference (include/loom_tune.h) run on the host: right for
 * the tests at small shapes, seconds of CPU at a benchmark shape (ikbo_lce at its
 * headline: 227 M input elements and 113 M output elements).  A template that has an
 * entry here gets instead:
 *
 *   - fills: the (large, floating-point) input arguments the tuner fills on the device
 *     with its counter-based hash (tune/gpu_inputs.c), each with a range and an optional
 *     padding (elements whose index mod ld >= cols are 0);
 *   - init_rest: the other arguments' initial values on the host, with init's contract
 *     except that host[i] is NULL for the filled arguments and for LOOM_OUT ones;
 *   - reference: kernels that take the template kernel's very arguments, run in order on
 *     the inputs and write every output the candidates must reproduce, on an independent
 *     path (simple SIMT kernels: no TMA, no wgmma, no warp specialization), so a check
 *     costs no host time at all.
 *
 * This table stands in for optional loom_template fields (init_device, reference_device)
 * that would carry the same functions; the tuner finds an entry by the template's
 * address, so it still knows no template by name.
 *
 * Prefix: tpl_device_, and ik_ for the IKBO pieces.
 */
#ifndef LOOM_TPL_DEVICE_H
#define LOOM_TPL_DEVICE_H

#include "tpl.h"

/* One input argument filled on the device. */
typedef struct tpl_device_fill {
    int arg;          /* the kernel argument */
    double lo, hi;    /* values uniform in [lo, hi), rounded to the argument's dtype */
    int64_t ld, cols; /* elements whose index mod ld is >= cols are 0 (ld = 0: none) */
} tpl_device_fill;

typedef struct tpl_device {
    const loom_template *t;
    /* The arguments filled on the device at shape: fills[0..n-1], returns n (<= max). */
    int (*fills)(const int64_t *shape, tpl_device_fill *fills, int max);
    /* The others on the host: init's contract, host[i] NULL for the filled arguments and
     * the outputs (LOOM_OUT); INOUT ones get their starting values. */
    void (*init_rest)(const int64_t *shape, void *const *host, uint64_t seed);
    /* The reference kernels and their grids: n (<= max) kernels taking the template
     * kernel's arguments, run in order; 0 with the reason in err when there are none. */
    int (*reference)(const int64_t *shape, loom_kernel **k, int (*grid)[3], int max, char *err, size_t n);
    const char *reference_doc; /* what the reference computes, for the tuner's note */
    /* The error model on the device (docs/checks.md), optional: a kernel taking the
     * template kernel's arguments (the outputs holding the reference, after the reference
     * kernels ran) and then one f32 tensor, bound[elements of argument bound_arg]: the
     * largest |out - ref| a right kernel can give at each element, the reference's own
     * f32 error included.  The template's other checked outputs are then compared
     * exactly.  NULL: atol and rtol. */
    loom_kernel *(*bound)(const int64_t *shape, int grid[3]);
    int bound_arg;
} tpl_device;

/* The entry of template t, or NULL. */
const tpl_device *tpl_device_find(const loom_template *t);

/* An upper bound of loom_ulp(dt, x) for f32 tiles x of shape t, in f32 arithmetic (the
 * DSL has no exponent extraction): |x| 2^-mantissa bits, or the subnormal spacing near
 * zero; at most twice the ulp.  For the device bound kernels. */
loom_val tpl_device_ulp_ub(loom_kernel *k, loom_dtype dt, loom_val x, loom_shape t);

/* ---------------------------------------------------------------- IKBO LCE */

extern const tpl_device tpl_device_ikbo_lce;

/* The reference kernels of ikbo_lce's stage-4 kernel (the arguments of the registry's
 * ikbo_lce kernel at shape), on loom's SIMT path: [0] user_res[x] = the hi and lo planes
 * of W_user @ E_user[x] accumulated in f32, and flags[0] += the user blocks a launch
 * counts; [1] out[b] = W_cand @ E_cand[b] (f32) + hi + lo of user_res[u(b)], rounded once.
 * Returns 2, or 0 with err. */
int ik_reference_kernels(const int64_t *shape, loom_kernel **k, int (*grid)[3], int max, char *err, size_t n);
/* The bound kernel of ikbo_lce's out (tpl_device.bound), or NULL where the reference
 * kernels cannot serve the shape. */
loom_kernel *ik_bound_kernel(const int64_t *shape, int grid[3]);

/* LOOM_IKBO_AUTO's pairwise check of two stages' outputs by the error model: the kernel
 * of the bound less its part proportional to |a| (grid: tiles x B), and that part's
 * factor, the comparison's rtol (templates/ikbo_lce_registry.c says how they are
 * derived).  NULL where the shape is past the SIMT kernels. */
loom_kernel *ik_pair_bound_kernel(int64_t B, int64_t U, int64_t M, int64_t N, int64_t Ku, int64_t Kc, loom_dtype dt,
                                  int grid[3]);
double ik_pair_rtol(loom_dtype dt);

/* bench_ikbo_lce's check, by the error model (docs/checks.md), of an output of any stage
 * (or of the framework) against f32 references of its halves: refc [B, M, N] = W_cand
 * E_cand[b], refu [U, M, N] = W_user E_user[u], and their magnitudes absc, absu (sums of
 * |w e|), as the NVRTC reference computes them.  The bound of an element (ik_lce_bound):
 * the kernel's f32 sums over Ku + Kc + 2 terms however it splits them, the reference's own
 * f32 sums, half an f16 ulp of each half (a stage may round a half to f16), and one ulp of
 * the sum.  Per program of IK_CHECK_BLOCK elements of one candidate: bad[p] the elements
 * past their bound (NaN: past) and worst[p] the largest |out - ref| / bound.  Arguments out
 * (f16), refc, refu, absc, absu, cand_to_user, bad, worst; grid (*grid0, B, 1), *nparts =
 * grid0 * B entries of bad and worst. */
#define IK_CHECK_BLOCK 2048
loom_kernel *ik_check_kernel(int64_t B, int64_t U, int64_t M, int64_t N, int64_t Ku, int64_t Kc, int *grid0,
                             int64_t *nparts);
/* The same bound on the host (exact ulps), for refc = c, refu = u, absc, absu. */
double ik_lce_bound(double c, double u, double absc, double absu, int64_t Ku, int64_t Kc);
/* The same for an output of dtype dt (f16 or bf16: its ulps where ik_lce_bound takes
 * f16's), for the C API's tests of every stage in either dtype. */
double ik_lce_bound_dt(loom_dtype dt, double c, double u, double absc, double absu, int64_t Ku, int64_t Kc);

/* ---------------------------------------------------------------- the others */

/* ikbo_fa: Q, K and V filled on the device; the reference a naive f32 SIMT attention per
 * 16 rows of a plan's row block (no TMA, wgmma or warp specialization); the bound kernel
 * the same pass with the error model's terms (templates/ikbo_fa_registry.c). */
extern const tpl_device tpl_device_ikbo_fa;
/* ikbo_broadcast_add: cand and user filled on the device; the reference one f32 add an
 * element (templates/broadcast_add.c). */
extern const tpl_device tpl_device_broadcast_add;

#endif
