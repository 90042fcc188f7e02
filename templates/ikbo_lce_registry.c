/*
 * ikbo_lce_registry.c -- the IKBO linear compression as a registry template (its stage-4
 * kernel, which `loomc tune ikbo_lce` tunes), and what the tuner and the tests need
 * around it: shape and config vectors as specs, the cost model, inputs and the CPU
 * reference in double; and for the autotuner at large shapes (templates/tpl_device.h)
 * the inputs it fills on the device and reference kernels on loom's SIMT path, plus
 * bench_ikbo_lce's check kernel.  The kernels themselves are built in templates/ikbo_lce.c.
 */
#include "ikbo_lce.h"
#include "tpl_device.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


enum { IK_SHAPE(LOOM_S_INDEX) S_COUNT };

ik_spec ik_spec_of(ik_mode mode, const int64_t *sh, const int64_t *cf)
{
    ik_spec s = {.mode = mode, .planes = 2};
    LOOM_UNPACK(IK_SHAPE, &s, sh);
    LOOM_UNPACK(LOOM_IKBO_LCE_CONFIG, &s, cf);
    return s;
}

ik_spec ik_spec_of_shape(ik_mode mode, const int64_t *sh)
{
    ik_spec s = {.mode = mode, .planes = 2, LOOM_IKBO_LCE_CONFIG(LOOM_DEFAULT)};
    LOOM_UNPACK(IK_SHAPE, &s, sh);
    return s;
}

void ik_shape_vector(const loom_ikbo_lce_shape *s, int64_t *v)
{
    ik_spec sp = {.B = s->B, .U = s->U, .M = s->M, .N = s->N, .Ku = s->Ku, .Kc = s->Kc, .dt = s->dtype,
                  .odt = ik_odt_of(s)};
    memset(v, 0, LOOM_MAX_PARAMS * sizeof *v);
    LOOM_PACK(IK_SHAPE, v, &sp);
}

loom_ikbo_lce_config ik_config_of(const int64_t *cf)
{
    loom_ikbo_lce_config c;
    LOOM_UNPACK(LOOM_IKBO_LCE_CONFIG, &c, cf);
    return c;
}

/* ik_why_not, the build's check too (ik_build refuses what it refuses). */
static int valid(const int64_t *sh, const int64_t *cf, char *why, size_t n)
{
    ik_spec s = ik_spec_of(IK_FUSED, sh, cf);
    char buf[300];
    return tpl_valid(ik_why_not(&s, buf, sizeof buf), why, n);
}

/* Without timing: the defaults, but for e4m3 the largest BM (in steps of 32, then 64) whose
 * tiles ik_why_not takes: the default's 224-row transposed tiles at M = 433 would hold
 * more f32 registers in a candidate tile's epilogue than fit (ik_why_not says which);
 * BM=192 gives 160-row ones. */
static void heuristic(const int64_t *sh, int64_t *cf)
{
    if ((loom_dtype)sh[S_dtype] != LOOM_E4M3)
        return;
    char buf[300];
    ik_spec s = ik_spec_of(IK_FUSED, sh, cf);
    static const int64_t bms[] = {256, 224, 192, 160, 128, 64};
    for (size_t i = 0; i < sizeof bms / sizeof *bms; i++) {
        if (bms[i] > s.bm)
            continue;
        ik_spec t = s;
        t.bm = bms[i];
        if (!ik_why_not(&t, buf, sizeof buf)) {
            s = t;
            break;
        }
    }
    LOOM_PACK(LOOM_IKBO_LCE_CONFIG, cf, &s);
}

static loom_kernel *build(const int64_t *sh, const int64_t *cf, char *err, size_t n)
{
    ik_spec s = ik_spec_of(IK_FUSED, sh, cf);
    return ik_build(&s, err, n);
}

static void grid_rule(const int64_t *sh, const int64_t *cf, loom_grid_rule *r)
{
    ik_spec s = ik_spec_of(IK_FUSED, sh, cf);
    ik_grid_rule(&s, S_B, S_U, r);
}

static void grid(const int64_t *sh, const int64_t *cf, int g[3])
{
    loom_grid_rule r;
    grid_rule(sh, cf, &r);
    loom_grid_rule_eval(&r, sh, g);
}

/* Rank configs: waves of equal tiles over the persistent CTAs, the rows and columns
 * computed past M and N (split: rows of whole 64-row halves; trans: columns of whole
 * 64-column halves), the L2 traffic a FLOP, the ring's depth. */
static double cost(const int64_t *sh, const int64_t *cf)
{
    ik_spec s = ik_spec_of(IK_FUSED, sh, cf);
    double rows = (double)ik_tile_rows(&s);
    double tm = (double)TPL_CDIV(s.M, (int64_t)rows), tn = (double)TPL_CDIV(s.N, s.bn);
    double per_tile_u = rows * s.bn * tpl_pad8(s.Ku), per_tile_c = rows * s.bn * tpl_pad8(s.Kc);
    /* split: a group whose rows (trans: columns) are all past M (N) computes nothing */
    double busy = s.consumers != IK_SPLIT ? 1.0
                  : s.trans   ? (double)TPL_CDIV(s.N, 64) * 64 / (tn * s.bn)
                             : (double)TPL_CDIV(s.M, 64) * 64 / (tm * s.bm);
    double work = busy * tm * tn * (s.U * per_tile_u + s.B * per_tile_c) * (1.0 + 64.0 / rows + 64.0 / s.bn);
    double ctas = s.ctas ? s.ctas : 132, tiles = (double)ik_tiles(&s);
    double waves = tiles / ctas, tail = waves > (int64_t)waves ? 1.0 : 0.0;
    return work / tiles * ((int64_t)waves + tail) * (s.stages >= 3 ? 1.0 : 1.3);
}

/* The user of each candidate: contiguous runs (b * U / B), or a random permutation of them. */
void ik_mapping(int64_t B, int64_t U, int shuffle, uint64_t seed, int32_t *map)
{
    for (int64_t b = 0; b < B; b++) /* with more users than candidates, spread over them */
        map[b] = (int32_t)(b * U / B);
    if (shuffle)
        for (int64_t b = B - 1; b > 0; b--) {
            int64_t j = (int64_t)(tpl_rand(&seed) % (uint64_t)(b + 1));
            int32_t x = map[b];
            map[b] = map[j];
            map[j] = x;
        }
}

/* Fill W [M, kp] with values in its first K columns and zeros after. */
static void fill_padded(void *w, loom_dtype dt, int64_t M, int64_t K, int64_t kp, uint64_t *seed)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t q = 0; q < kp; q++)
            tpl_set(w, dt, m * kp + q, q < K ? (double)(tpl_rand(seed) % 2001) / 1000.0 - 1.0 : 0.0);
}

/* Every argument's starting values; an argument whose host[i] is NULL is skipped (the
 * tuner fills W and E on the device: tpl_device_ikbo_lce). */
static void init(const int64_t *sh, void *const *host, uint64_t seed)
{
    loom_dtype dt = (loom_dtype)sh[S_dtype];
    uint64_t s0 = seed; /* every fill and the mapping draw from it in turn */
    if (host[IKA_B]) /* the run-time dims at the shape's values */
        *(int32_t *)host[IKA_B] = (int32_t)sh[S_B];
    if (host[IKA_U])
        *(int32_t *)host[IKA_U] = (int32_t)sh[S_U];
    if (host[IKA_WU])
        fill_padded(host[IKA_WU], dt, sh[S_M], sh[S_Ku], ik_kpad(dt, sh[S_Ku]), &s0);
    if (host[IKA_WC])
        fill_padded(host[IKA_WC], dt, sh[S_M], sh[S_Kc], ik_kpad(dt, sh[S_Kc]), &s0);
    if (host[IKA_EU])
        tpl_fill(host[IKA_EU], dt, sh[S_U] * sh[S_Ku] * sh[S_N], -1, 1, &s0);
    if (host[IKA_EC])
        tpl_fill(host[IKA_EC], dt, sh[S_B] * sh[S_Kc] * sh[S_N], -1, 1, &s0);
    if (host[IKA_MAP])
        ik_mapping(sh[S_B], sh[S_U], (int)sh[S_shuffle], s0, host[IKA_MAP]);
    if (dt == LOOM_E4M3) { /* the scales: weights' per row, embeddings' per user and candidate, in [0.5, 2] */
        const int64_t n[4] = {sh[S_M], sh[S_M], sh[S_U], sh[S_B]};
        for (int i = 0; i < 4; i++)
            if (host[IKA_SWU + i])
                tpl_fill(host[IKA_SWU + i], LOOM_F32, n[i], 0.5, 2, &s0);
    }
    /* user_res, the counter: zero (the buffers come zeroed), and so the flags' base */
    if (host[IKA_BASE])
        *(int32_t *)host[IKA_BASE] = 0;
}

/* out[b] = Wc @ Ec[b] + Wu @ Eu[u(b)] in double, W given padded (W_user [M, pad8(Ku)],
 * W_cand [M, pad8(Kc)]). */
void ik_reference(const ik_spec *s, const void *wu, const void *wc, const void *eu, const void *ec,
                  const int32_t *map, void *ures, void *out)
{
    int64_t M = s->M, N = s->N, kpu = tpl_pad8(s->Ku), kpc = tpl_pad8(s->Kc);
    double *u = calloc((size_t)(s->U * M * N), sizeof(double)), *row = malloc((size_t)N * sizeof(double));
    if (!u || !row)
        goto done;
    for (int64_t x = 0; x < s->U; x++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t q = 0; q < s->Ku; q++) {
                double a = tpl_get(wu, s->dt, m * kpu + q);
                for (int64_t j = 0; j < N; j++)
                    u[(x * M + m) * N + j] += a * tpl_get(eu, s->dt, (x * s->Ku + q) * N + j);
            }
    if (ures) /* user x's planes at [x][0] and [x][1] */
        for (int64_t i = 0; i < s->U * M * N; i++) {
            int64_t x = i / (M * N), e = i % (M * N);
            double hi = tpl_round(s->dt, u[i]);
            tpl_set(ures, s->dt, (2 * x) * M * N + e, hi);
            tpl_set(ures, s->dt, (2 * x + 1) * M * N + e, u[i] - hi);
        }
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t m = 0; m < M; m++) {
            for (int64_t j = 0; j < N; j++)
                row[j] = u[((int64_t)map[b] * M + m) * N + j];
            for (int64_t q = 0; q < s->Kc; q++) {
                double a = tpl_get(wc, s->dt, m * kpc + q);
                for (int64_t j = 0; j < N; j++)
                    row[j] += a * tpl_get(ec, s->dt, (b * s->Kc + q) * N + j);
            }
            for (int64_t j = 0; j < N; j++)
                tpl_set(out, s->dt, (b * M + m) * N + j, row[j]);
        }
done:
    free(u);
    free(row);
}

/* n values of dtype dt from p as doubles (malloc'ed; NULL when out of memory). */
static double *decoded(const void *p, loom_dtype dt, int64_t n)
{
    double *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    for (int64_t i = 0; d && i < n; i++)
        d[i] = tpl_get(p, dt, i);
    return d;
}

/* The sum of a[q] e[q] over q < n and the sum of their magnitudes. */
static void dot_mag(const double *a, const double *e, int64_t n, double *sum, double *mag)
{
    double sm = 0, mg = 0;
    for (int64_t q = 0; q < n; q++) {
        double p = a[q] * e[q];
        sm += p, mg += fabs(p);
    }
    *sum = sm, *mag = mg;
}

/* FP8 (ikbo_lce.h, "FP8"): in double from the e4m3 values and the scales, E^T [*, N, K].
 * The bound (docs/checks.md, "ikbo_lce in FP8"): each GEMM's sum of K exact FP8 products
 * on the tensor cores is within loom_fp8_mma_sum_error(K, m) of the exact sum (m its sum of
 * |products|); each part is then scaled by two f32 roundings (the scales' product, the sum
 * times it) and the two parts added by one more (the user part stored in f32, exactly), so
 * within gamma_3 (u = 2^-23) of the parts' magnitudes (each at most its scaled m plus its
 * scaled error); then out is rounded once to odt (loom_error_bound's ulp). */
void ik_fp8_reference(const ik_spec *s, const void *wu, const void *wc, const void *eu, const void *ec,
                      const float *swu, const float *swc, const float *seu, const float *sec, const int32_t *map,
                      void *out, double *bnd)
{
    /* the e4m3 values decoded once, and the user half only for the users some candidate
     * reads (a sample of candidates needs a few of them) */
    int64_t M = s->M, N = s->N, kpu = ik_kpad(s->dt, s->Ku), kpc = ik_kpad(s->dt, s->Kc);
    size_t un = (size_t)(s->U * M * N);
    double *u = calloc(un, sizeof(double)), *mu = calloc(un, sizeof(double));
    double *dwu = decoded(wu, s->dt, M * kpu), *dwc = decoded(wc, s->dt, M * kpc);
    double *deu = decoded(eu, s->dt, s->U * N * s->Ku), *dec = decoded(ec, s->dt, s->B * N * s->Kc);
    uint8_t *need = calloc((size_t)s->U, 1);
    if (!u || !mu || !dwu || !dwc || !deu || !dec || !need)
        goto done;
    for (int64_t b = 0; b < s->B; b++)
        need[map[b]] = 1;
    for (int64_t x = 0; x < s->U; x++)
        for (int64_t m = 0; m < M && need[x]; m++)
            for (int64_t j = 0; j < N; j++) {
                int64_t i = (x * M + m) * N + j;
                dot_mag(dwu + m * kpu, deu + (x * N + j) * s->Ku, s->Ku, &u[i], &mu[i]);
            }
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t j = 0; j < N; j++) {
                double sum, mag;
                dot_mag(dwc + m * kpc, dec + (b * N + j) * s->Kc, s->Kc, &sum, &mag);
                int64_t ui = ((int64_t)map[b] * M + m) * N + j, e = (b * M + m) * N + j;
                double cs = (double)swc[m] * sec[b], us = (double)swu[m] * seu[map[b]];
                tpl_set(out, s->odt, e, cs * sum + us * u[ui]);
                if (!bnd)
                    continue;
                double ec_ = fabs(cs) * loom_fp8_mma_sum_error(s->Kc, mag);
                double eu_ = fabs(us) * loom_fp8_mma_sum_error(s->Ku, mu[ui]);
                double err = ec_ + eu_ + loom_f32_sum_error(3, fabs(cs) * mag + ec_ + fabs(us) * mu[ui] + eu_);
                bnd[e] = loom_error_bound(s->odt, tpl_get(out, s->odt, e), err);
            }
done:
    free(u);
    free(mu);
    free(dwu), free(dwc), free(deu), free(dec), free(need);
}

static void reference(const int64_t *sh, void *const *host, void *const *ref)
{
    ik_spec s = ik_spec_of_shape(IK_FUSED, sh);
    if (ik_fp8(&s)) {
        ik_fp8_reference(&s, host[IKA_WU], host[IKA_WC], host[IKA_EU], host[IKA_EC], host[IKA_SWU], host[IKA_SWC],
                         host[IKA_SEU], host[IKA_SEC], host[IKA_MAP], ref[IKA_OUT], NULL);
        return;
    }
    ik_reference(&s, host[IKA_WU], host[IKA_WC], host[IKA_EU], host[IKA_EC], host[IKA_MAP], ref[IKA_URES],
                 ref[IKA_OUT]);
    /* the claims are back at zero (the buffers come zeroed); the flags counter is not
     * checked: its value depends on the config and on the launches before */
}

/* The error model (docs/checks.md) of the stage-4 kernel: the user part U = Wu @ Eu[x]
 * sums Ku products in f32, goes out as hi = U rounded to dtype and lo = the rest rounded to
 * dtype (off by half an ulp of lo); a candidate's tile sums Kc products in f32 and adds hi
 * and lo (two more f32 adds), then rounds to dtype once. */
static void bound(const int64_t *sh, void *const *host, void *const *ref, double *const *bnd)
{
    ik_spec s = ik_spec_of_shape(IK_FUSED, sh);
    if (ik_fp8(&s)) { /* ik_fp8_reference's (its out the same as ref's) */
        void *out = bnd[IKA_OUT] ? malloc((size_t)(s.B * s.M * s.N) * loom_dtype_size(s.odt)) : NULL;
        if (out)
            ik_fp8_reference(&s, host[IKA_WU], host[IKA_WC], host[IKA_EU], host[IKA_EC], host[IKA_SWU],
                             host[IKA_SWC], host[IKA_SEU], host[IKA_SEC], host[IKA_MAP], out, bnd[IKA_OUT]);
        free(out);
        if (bnd[IKA_CLAIMS])
            bnd[IKA_CLAIMS][0] = bnd[IKA_CLAIMS][1] = 0;
        return;
    }
    int64_t M = s.M, N = s.N, kpu = tpl_pad8(s.Ku), kpc = tpl_pad8(s.Kc);
    const void *wu = host[IKA_WU], *eu = host[IKA_EU], *wc = host[IKA_WC], *ec = host[IKA_EC];
    const int32_t *map = host[IKA_MAP];
    double *u = calloc((size_t)(s.U * M * N), sizeof(double)), *mu = calloc((size_t)(s.U * M * N), sizeof(double));
    double *mc = malloc((size_t)N * sizeof(double));
    if (!u || !mu || !mc || !bnd[IKA_OUT])
        goto done;
    for (int64_t x = 0; x < s.U; x++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t q = 0; q < s.Ku; q++) {
                double a = tpl_get(wu, s.dt, m * kpu + q);
                for (int64_t j = 0; j < N; j++) {
                    double e = tpl_get(eu, s.dt, (x * s.Ku + q) * N + j);
                    u[(x * M + m) * N + j] += a * e;
                    mu[(x * M + m) * N + j] += fabs(a * e);
                }
            }
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t m = 0; m < M; m++) {
            for (int64_t j = 0; j < N; j++)
                mc[j] = 0;
            for (int64_t q = 0; q < s.Kc; q++) {
                double a = fabs(tpl_get(wc, s.dt, m * kpc + q));
                for (int64_t j = 0; j < N; j++)
                    mc[j] += a * fabs(tpl_get(ec, s.dt, (b * s.Kc + q) * N + j));
            }
            for (int64_t j = 0; j < N; j++) {
                int64_t ui = ((int64_t)map[b] * M + m) * N + j, e = (b * M + m) * N + j;
                double eu_ = loom_f32_sum_error(s.Ku, mu[ui]), au = fabs(u[ui]) + eu_;
                double lo = loom_ulp(s.dt, au) / 2; /* |lo| at most half an ulp of hi */
                double err = eu_ + loom_ulp(s.dt, lo) / 2 + loom_f32_sum_error(s.Kc + 2, mc[j] + au + lo + lo);
                bnd[IKA_OUT][e] = loom_error_bound(s.dt, tpl_get(ref[IKA_OUT], s.dt, e), err);
            }
        }
    if (bnd[IKA_CLAIMS]) /* the claims: back at zero, exactly */
        for (int i = 0; i < 2; i++)
            bnd[IKA_CLAIMS][i] = 0;
done:
    free(u);
    free(mu);
    free(mc);
}

const loom_template tpl_def_ikbo_lce = {
    .name = "ikbo_lce",
    .doc = "IKBO linear compression out[b] = W_cand @ E_cand[b] + W_user @ E_user[u(b)]: one persistent "
           "warp-specialized kernel, user tiles handed to candidate tiles by flags (stage 4); dtype e4m3: E "
           "transposed, per-row scales of the weights and per-entry scales of the embeddings",
    .nshape = LOOM_COUNT(IK_SHAPE),
    .shape = {IK_SHAPE(LOOM_SHAPE_PARAM)},
    .nconfig = LOOM_COUNT(LOOM_IKBO_LCE_CONFIG),
    .config = {LOOM_IKBO_LCE_CONFIG(LOOM_CONFIG_PARAM)},
    .valid = valid,
    .cost = cost,
    .heuristic = heuristic,
    .build = build,
    .grid = grid,
    .grid_rule = grid_rule,
    .init = init,
    .reference = reference,
    .atol = 2e-2,
    .rtol = 2e-2,
    /* user_res is the hand-over workspace: out = candidate part + hi + lo shows
     * it, and its planes alone are not predictable.  hi rounds the f32 accumulator; where
     * that sits at a rounding tie the exact reference may round the other way, and hi and
     * lo then differ from the reference's by one hi ulp each, in opposite directions (seen
     * on bf16: B=40,U=40,M=200,N=136,Ku=100,Kc=64).  flags is the hand-over
     * counter: after a launch it has grown by the user blocks of that config's tiling, so
     * its value depends on the config and on how many launches ran (no config-independent
     * reference exists); every hand-over it counts shows in out. */
    .unchecked = 1u << IKA_URES | 1u << IKA_FLAGS,
    .bound = bound,
};

/* ---------------------------------------------------------------- on the device, for the tuner */

/* The reference kernels' tiles: RM x RN of out a program, RK of K a step. */
enum { REF_RM = 64, REF_RN = 64, REF_RK = 32 };

typedef struct ik_args_ref {
    loom_val B, U, wu, eu, wc, ec, index, ures, flags, claims, base, out;
} ik_args_ref;

/* The arguments of the registry's ikbo_lce kernel (ik_build's IK_FUSED), declared in the
 * same order with the same types, so the tuner launches a reference kernel with the
 * candidates' arguments. */
static ik_args_ref declare_ref(loom_kernel *k, const ik_spec *s)
{
    ik_args_ref a;
    a.B = loom_arg_dim(k, "B", s->B, 1);
    a.U = loom_arg_dim(k, "U", s->U, 1);
    int64_t B = LOOM_DIM(a.B), U = LOOM_DIM(a.U);
    a.wu = loom_arg_tensor(k, "W_user", s->dt, LOOM_SHAPE2(s->M, tpl_pad8(s->Ku)), LOOM_IN);
    a.eu = loom_arg_tensor(k, "E_user", s->dt, LOOM_SHAPE3(U, s->Ku, s->N), LOOM_IN);
    a.wc = loom_arg_tensor(k, "W_cand", s->dt, LOOM_SHAPE2(s->M, tpl_pad8(s->Kc)), LOOM_IN);
    a.ec = loom_arg_tensor(k, "E_cand", s->dt, LOOM_SHAPE3(B, s->Kc, s->N), LOOM_IN);
    a.index = loom_arg_tensor(k, "cand_to_user", LOOM_I32, LOOM_SHAPE1(B), LOOM_IN);
    a.ures = loom_arg_tensor(k, "user_res", s->dt, ((loom_shape){4, {U, 2, s->M, s->N}}), LOOM_INOUT);
    a.flags = loom_arg_tensor(k, "flags", LOOM_I32, LOOM_SHAPE1(1), LOOM_INOUT);
    a.claims = loom_arg_tensor(k, "claims", LOOM_I32, LOOM_SHAPE1(2), LOOM_INOUT);
    a.base = loom_arg_scalar(k, "flag_base", LOOM_I32);
    a.out = loom_arg_tensor(k, "out", s->dt, LOOM_SHAPE3(B, s->M, s->N), LOOM_OUT);
    return a;
}

/* acc [RM, RN] = W[m0.., :] @ E[x, :, n0..] in f32 on SIMT FMA (W [M, pad8(K)], its
 * padding zero; E [*, K, N]: rows past K load 0), RK columns of W a step; with mag,
 * |W| @ |E| (the sums of the products' magnitudes, for the error bound). */
static loom_val ref_gemm_of(loom_kernel *k, loom_val w, loom_val e, int64_t kp, loom_val x, loom_val m0, loom_val n0,
                            bool mag)
{
    loom_val acc0 = loom_splat(k, loom_const_f(k, LOOM_F32, 0.0), LOOM_SHAPE2(REF_RM, REF_RN));
    loom_region_op kl = loom_for_begin(k, loom_const_i(k, LOOM_I32, 0), loom_const_i(k, LOOM_I32, kp),
                                       loom_const_i(k, LOOM_I32, REF_RK), 1, &acc0);
    {
        loom_val kk = loom_for_iv(k, kl);
        loom_val a = loom_load(k, w, ((loom_val[]){m0, kk}), LOOM_SHAPE2(REF_RM, REF_RK), LOOM_NONE, 0.0);
        loom_val b = loom_load(k, e, ((loom_val[]){x, kk, n0}), LOOM_SHAPE2(REF_RK, REF_RN), LOOM_NONE, 0.0);
        if (mag) {
            a = loom_abs(k, a);
            b = loom_abs(k, b);
        }
        /* in f32 (exact): the dot stays on SIMT FMA, sharing no path with the stages' tensor
         * cores (an f16 or bf16 one would run on mma.sync) */
        a = loom_cast(k, a, LOOM_F32);
        b = loom_cast(k, b, LOOM_F32);
        loom_val acc = loom_dot(k, a, b, loom_for_arg(k, kl, 0));
        loom_for_end(k, kl, 1, &acc);
    }
    return loom_for_result(k, kl, 0);
}

static loom_val ref_gemm(loom_kernel *k, loom_val w, loom_val e, int64_t kp, loom_val x, loom_val m0, loom_val n0)
{
    return ref_gemm_of(k, w, e, kp, x, m0, n0, false);
}

/* The program's tile of [M, N]: program_id(0) over cdiv(M, RM) x cdiv(N, RN). */
static void ref_tile(loom_kernel *k, const ik_spec *s, loom_val *m0, loom_val *n0)
{
    loom_val tile = loom_program_id(k, 0), tn = loom_const_i(k, LOOM_I32, TPL_CDIV(s->N, REF_RN));
    *m0 = loom_mul(k, loom_div(k, tile, tn), loom_const_i(k, LOOM_I32, REF_RM));
    *n0 = loom_mul(k, loom_rem(k, tile, tn), loom_const_i(k, LOOM_I32, REF_RN));
}

static loom_kernel *ref_user_kernel(const ik_spec *s)
{
    loom_kernel *k = loom_kernel_create("ikbo_lce_ref_user", 4);
    ik_args_ref a = declare_ref(k, s);
    loom_val m0, n0, x = loom_program_id(k, 1);
    ref_tile(k, s, &m0, &n0);
    loom_val acc = ref_gemm(k, a.wu, a.eu, tpl_pad8(s->Ku), x, m0, n0);
    /* the two planes: hi = acc rounded, lo = what hi misses, rounded */
    loom_val hi = loom_cast(k, acc, s->dt);
    loom_val lo = loom_cast(k, loom_sub(k, acc, loom_cast(k, hi, LOOM_F32)), s->dt);
    loom_val zero = loom_const_i(k, LOOM_I32, 0), one = loom_const_i(k, LOOM_I32, 1);
    loom_store(k, a.ures, ((loom_val[]){x, zero, m0, n0}), hi, LOOM_NONE);
    loom_store(k, a.ures, ((loom_val[]){x, one, m0, n0}), lo, LOOM_NONE);
    /* the counter of user blocks done grows by a launch's worth, U blocks a user (program
     * (0, 0) alone) */
    loom_val first = loom_and(k, loom_cmp(k, LOOM_EQ, loom_program_id(k, 0), zero), loom_cmp(k, LOOM_EQ, x, zero));
    loom_region_op once = loom_if_begin(k, first, 0);
    {
        loom_val f = loom_load_scalar(k, a.flags, &zero);
        f = loom_add(k, f, loom_mul(k, a.U, loom_const_i(k, LOOM_I32, ik_blocks_per_user(s))));
        loom_store(k, a.flags, &zero, loom_splat(k, f, LOOM_SHAPE1(1)), LOOM_NONE);
    }
    loom_if_end(k, once, 0, NULL);
    return k;
}

static loom_kernel *ref_cand_kernel(const ik_spec *s)
{
    loom_kernel *k = loom_kernel_create("ikbo_lce_ref_cand", 4);
    ik_args_ref a = declare_ref(k, s);
    loom_val m0, n0, b = loom_program_id(k, 1);
    ref_tile(k, s, &m0, &n0);
    loom_val acc = ref_gemm(k, a.wc, a.ec, tpl_pad8(s->Kc), b, m0, n0);
    loom_val u = loom_load_scalar(k, a.index, &b);
    loom_val zero = loom_const_i(k, LOOM_I32, 0), one = loom_const_i(k, LOOM_I32, 1);
    loom_shape t = LOOM_SHAPE2(REF_RM, REF_RN);
    loom_val hi = loom_load(k, a.ures, ((loom_val[]){u, zero, m0, n0}), t, LOOM_NONE, 0.0);
    loom_val lo = loom_load(k, a.ures, ((loom_val[]){u, one, m0, n0}), t, LOOM_NONE, 0.0);
    acc = loom_add(k, acc, loom_add(k, loom_cast(k, hi, LOOM_F32), loom_cast(k, lo, LOOM_F32)));
    loom_store(k, a.out, ((loom_val[]){b, m0, n0}), loom_cast(k, acc, s->dt), LOOM_NONE);
    return k;
}

/* The error model of the stage-4 kernel (the host's bound() above), on the device, for
 * the tuner's checks against the reference kernels: twice the model's error (the
 * reference sums in f32 too, by the same steps) plus one ulp; ulps from
 * tpl_device_ulp_ub, and the result scaled up by 2^-20 for the f32 arithmetic of the bound
 * itself. */
static loom_kernel *ref_bound_kernel(const ik_spec *s)
{
    loom_kernel *k = loom_kernel_create("ikbo_lce_ref_bound", 4);
    ik_args_ref a = declare_ref(k, s);
    loom_val bound = loom_arg_tensor(k, "bound", LOOM_F32, LOOM_SHAPE3(s->B, s->M, s->N), LOOM_OUT);
    loom_val m0, n0, b = loom_program_id(k, 1);
    ref_tile(k, s, &m0, &n0);
    loom_shape t = LOOM_SHAPE2(REF_RM, REF_RN);
    loom_val u = loom_load_scalar(k, a.index, &b);
    loom_val magc = ref_gemm_of(k, a.wc, a.ec, tpl_pad8(s->Kc), b, m0, n0, true);
    loom_val magu = ref_gemm_of(k, a.wu, a.eu, tpl_pad8(s->Ku), u, m0, n0, true);
    loom_val zero = loom_const_i(k, LOOM_I32, 0), one = loom_const_i(k, LOOM_I32, 1);
    loom_val hi = loom_cast(k, loom_load(k, a.ures, ((loom_val[]){u, zero, m0, n0}), t, LOOM_NONE, 0.0), LOOM_F32);
    loom_val lo = loom_cast(k, loom_load(k, a.ures, ((loom_val[]){u, one, m0, n0}), t, LOOM_NONE, 0.0), LOOM_F32);
    loom_val r = loom_abs(k, loom_cast(k, loom_load(k, a.out, ((loom_val[]){b, m0, n0}), t, LOOM_NONE, 0.0), LOOM_F32));
#define C(x) loom_splat(k, loom_const_f(k, LOOM_F32, (x)), t)
    double gu = loom_f32_sum_error(s->Ku, 1.0) * (1 + 0x1p-20), gc = loom_f32_sum_error(s->Kc + 2, 1.0) * (1 + 0x1p-20);
    loom_val eu = loom_mul(k, C(gu), magu);
    loom_val au = loom_add(k, loom_add(k, loom_abs(k, hi), loom_abs(k, lo)), eu);
    loom_val lob = loom_mul(k, C(0.5), tpl_device_ulp_ub(k, s->dt, au, t));
    loom_val e = loom_add(k, loom_add(k, eu, loom_mul(k, C(0.5), tpl_device_ulp_ub(k, s->dt, lob, t))),
                          loom_mul(k, C(gc), loom_add(k, loom_add(k, magc, au), loom_mul(k, C(2.0), lob))));
    e = loom_mul(k, C(2.0), e); /* the kernel's error and the reference's */
    loom_val at = loom_add(k, loom_add(k, r, loom_mul(k, C(0.5), tpl_device_ulp_ub(k, s->dt, r, t))), e);
    loom_val bnd = loom_mul(k, loom_add(k, e, tpl_device_ulp_ub(k, s->dt, at, t)), C(1 + 0x1p-20));
#undef C
    loom_store(k, bound, ((loom_val[]){b, m0, n0}), bnd, LOOM_NONE);
    return k;
}

loom_kernel *ik_bound_kernel(const int64_t *sh, int grid[3])
{
    ik_spec s = ik_spec_of_shape(IK_FUSED, sh);
    int64_t tiles = TPL_CDIV(s.M, REF_RM) * TPL_CDIV(s.N, REF_RN);
    if (tiles > INT32_MAX || s.B > 65535 || (s.dt != LOOM_F16 && s.dt != LOOM_BF16))
        return NULL;
    grid[0] = (int)tiles;
    grid[1] = (int)s.B;
    grid[2] = 1;
    return ref_bound_kernel(&s);
}

/* LOOM_IKBO_AUTO's pairwise check (ops/ikbo_lce_auto.c): the bound of |a - b| for two
 * right stages' outputs a and b at each element, less the part proportional to their
 * magnitudes, which the comparison's rtol carries (ik_pair_rtol).  Each stage is within
 * err = gamma_(Ku+Kc+2) (|W_cand| @ |E_cand| + |W_user| @ |E_user|) (its f32 sums however
 * split) + half an ulp of each half (a decomposed stage rounds them; the halves' values
 * summed in f32 too, so within that of the exact ones) of the exact value before its own
 * rounding; so |a - b| <= 2 err +
 * ulp(a) / 2 + ulp(b) / 2, and ulp(x) <= rel |x| + tiny (tpl_device_ulp_ub) with |b| <= |a|
 * + |a - b| gives |a - b| <= (2 err + tiny) (1 + 2^-9) + rel (1 + 2^-9) |a| (rel = 2^-10 for
 * f16, 2^-7 for bf16).  The bound kernel writes (2 err + tiny) (1 + 2^-9), the
 * magnitudes from loom's SIMT path as the reference kernels; the weights unpadded [M, K]
 * (the host's), E and the mapping as the stage-4 kernel's, at the prepare's largest B and U. */
double ik_pair_rtol(loom_dtype dt) { return (dt == LOOM_BF16 ? 0x1p-7 : 0x1p-10) * (1 + 0x1p-9); }

loom_kernel *ik_pair_bound_kernel(int64_t B, int64_t U, int64_t M, int64_t N, int64_t Ku, int64_t Kc, loom_dtype dt,
                                  int grid[3])
{
    int64_t tiles = TPL_CDIV(M, REF_RM) * TPL_CDIV(N, REF_RN);
    if (tiles > INT32_MAX || B > 65535 || U < 1 || Ku > INT32_MAX || Kc > INT32_MAX ||
        (dt != LOOM_F16 && dt != LOOM_BF16))
        return NULL;
    grid[0] = (int)tiles;
    grid[1] = (int)B;
    grid[2] = 1;
    loom_kernel *k = loom_kernel_create("ikbo_lce_pair_bound", 4);
    loom_val wu = loom_arg_tensor(k, "W_user", dt, LOOM_SHAPE2(M, Ku), LOOM_IN);
    loom_val eu = loom_arg_tensor(k, "E_user", dt, LOOM_SHAPE3(U, Ku, N), LOOM_IN);
    loom_val wc = loom_arg_tensor(k, "W_cand", dt, LOOM_SHAPE2(M, Kc), LOOM_IN);
    loom_val ec = loom_arg_tensor(k, "E_cand", dt, LOOM_SHAPE3(B, Kc, N), LOOM_IN);
    loom_val map = loom_arg_tensor(k, "cand_to_user", LOOM_I32, LOOM_SHAPE1(B), LOOM_IN);
    loom_val bound = loom_arg_tensor(k, "bound", LOOM_F32, LOOM_SHAPE3(B, M, N), LOOM_OUT);
    ik_spec s = {.M = M, .N = N};
    loom_val m0, n0, b = loom_program_id(k, 1);
    ref_tile(k, &s, &m0, &n0);
    loom_shape t = LOOM_SHAPE2(REF_RM, REF_RN);
    loom_val u = loom_load_scalar(k, map, &b);
    loom_val magc = ref_gemm_of(k, wc, ec, Kc, b, m0, n0, true);
    loom_val magu = ref_gemm_of(k, wu, eu, Ku, u, m0, n0, true);
    /* the halves' values (in f32: within ek of the exact ones), for their roundings */
    loom_val hc = loom_abs(k, ref_gemm_of(k, wc, ec, Kc, b, m0, n0, false));
    loom_val hu = loom_abs(k, ref_gemm_of(k, wu, eu, Ku, u, m0, n0, false));
#define C(x) loom_splat(k, loom_const_f(k, LOOM_F32, (x)), t)
    double up = 1 + 0x1p-9, tiny = dt == LOOM_BF16 ? 0x1p-133 : 0x1p-24;
    loom_val ek = loom_mul(k, C(loom_f32_sum_error(Ku + Kc + 2, 1.0) * up), loom_add(k, magc, magu));
    loom_val halves = loom_mul(k, C(0.5), loom_add(k, tpl_device_ulp_ub(k, dt, loom_add(k, hc, ek), t),
                                                   tpl_device_ulp_ub(k, dt, loom_add(k, hu, ek), t)));
    loom_val err = loom_add(k, ek, halves);
    loom_val bnd = loom_mul(k, loom_add(k, loom_mul(k, C(2.0), err), C(tiny)), C(up));
#undef C
    loom_store(k, bound, ((loom_val[]){b, m0, n0}), bnd, LOOM_NONE);
    return k;
}

int ik_reference_kernels(const int64_t *sh, loom_kernel **k, int (*grid)[3], int max, char *err, size_t n)
{
    ik_spec s = ik_spec_of_shape(IK_FUSED, sh);
    int64_t tiles = TPL_CDIV(s.M, REF_RM) * TPL_CDIV(s.N, REF_RN);
    if (max < 2 || tiles > INT32_MAX || s.U > 65535 || s.B > 65535 || tpl_pad8(s.Ku) > INT32_MAX ||
        tpl_pad8(s.Kc) > INT32_MAX || (s.dt != LOOM_F16 && s.dt != LOOM_BF16)) {
        snprintf(err, n, "the reference kernels serve B and U up to 65535 and f16 or bf16");
        return 0;
    }
    k[0] = ref_user_kernel(&s);
    k[1] = ref_cand_kernel(&s);
    grid[0][0] = grid[1][0] = (int)tiles;
    grid[0][1] = (int)s.U;
    grid[1][1] = (int)s.B;
    grid[0][2] = grid[1][2] = 1;
    return 2;
}

static int device_fills(const int64_t *sh, tpl_device_fill *f, int max)
{
    if (max < 4)
        return 0;
    loom_dtype dt = (loom_dtype)sh[S_dtype];
    int64_t kpu = ik_kpad(dt, sh[S_Ku]), kpc = ik_kpad(dt, sh[S_Kc]);
    f[0] = (tpl_device_fill){IKA_WU, -1, 1, kpu, sh[S_Ku]}; /* W_user, its padding zero */
    f[1] = (tpl_device_fill){IKA_EU, -1, 1, 0, 0};          /* E_user */
    f[2] = (tpl_device_fill){IKA_WC, -1, 1, kpc, sh[S_Kc]}; /* W_cand */
    f[3] = (tpl_device_fill){IKA_EC, -1, 1, 0, 0};          /* E_cand */
    return 4;
}

const tpl_device tpl_device_ikbo_lce = {
    .t = &tpl_def_ikbo_lce,
    .fills = device_fills,
    .init_rest = init,
    .reference = ik_reference_kernels,
    .reference_doc = "naive f32 SIMT kernels (no TMA, wgmma or warp specialization)",
    .bound = ik_bound_kernel,
    .bound_arg = IKA_OUT, /* the claims come back to zero, exactly */
};

/* ---------------------------------------------------------------- bench_ikbo_lce's check */

double ik_lce_bound_dt(loom_dtype dt, double c, double u, double absc, double absu, int64_t Ku, int64_t Kc)
{
    double ek = loom_f32_sum_error(Ku + Kc + 2, absc + absu); /* the kernel's sums, however split */
    double er = loom_f32_sum_error(Kc, absc) + loom_f32_sum_error(Ku, absu) + 0x1p-23 * (fabs(c) + fabs(u));
    double halves = loom_ulp(dt, fabs(c) + ek) / 2 + loom_ulp(dt, fabs(u) + ek) / 2;
    double err = ek + er + halves;
    return err + loom_ulp(dt, fabs(c + u) + err);
}

double ik_lce_bound(double c, double u, double absc, double absu, int64_t Ku, int64_t Kc)
{
    return ik_lce_bound_dt(LOOM_F16, c, u, absc, absu, Ku, Kc);
}

loom_kernel *ik_check_kernel(int64_t B, int64_t U, int64_t M, int64_t N, int64_t Ku, int64_t Kc, int *grid0,
                             int64_t *nparts)
{
    int64_t mn = M * N, per = TPL_CDIV(mn, IK_CHECK_BLOCK);
    if (B < 1 || U < 1 || mn < 1 || Ku < 1 || Kc < 1 || B > 65535 || per * B > INT32_MAX - IK_CHECK_BLOCK ||
        mn > INT32_MAX - IK_CHECK_BLOCK)
        return NULL;
    *grid0 = (int)per;
    *nparts = per * B;
    loom_kernel *k = loom_kernel_create("ikbo_lce_check", 4);
    loom_val out = loom_arg_tensor(k, "out", LOOM_F16, LOOM_SHAPE2(B, mn), LOOM_IN);
    loom_val refc = loom_arg_tensor(k, "refc", LOOM_F32, LOOM_SHAPE2(B, mn), LOOM_IN);
    loom_val refu = loom_arg_tensor(k, "refu", LOOM_F32, LOOM_SHAPE2(U, mn), LOOM_IN);
    loom_val absc = loom_arg_tensor(k, "absc", LOOM_F32, LOOM_SHAPE2(B, mn), LOOM_IN);
    loom_val absu = loom_arg_tensor(k, "absu", LOOM_F32, LOOM_SHAPE2(U, mn), LOOM_IN);
    loom_val map = loom_arg_tensor(k, "cand_to_user", LOOM_I32, LOOM_SHAPE1(B), LOOM_IN);
    loom_val bad = loom_arg_tensor(k, "bad", LOOM_F32, LOOM_SHAPE1(per * B), LOOM_OUT);
    loom_val worst = loom_arg_tensor(k, "worst", LOOM_F32, LOOM_SHAPE1(per * B), LOOM_OUT);
    loom_val p = loom_program_id(k, 0), b = loom_program_id(k, 1);
    loom_val off = loom_mul(k, p, loom_const_i(k, LOOM_I32, IK_CHECK_BLOCK));
    loom_val u = loom_load_scalar(k, map, &b);
    loom_shape t = LOOM_SHAPE1(IK_CHECK_BLOCK);
    /* past M * N every side loads 0: no error there, a bound of an ulp */
    loom_val o = loom_cast(k, loom_load(k, out, ((loom_val[]){b, off}), t, LOOM_NONE, 0.0), LOOM_F32);
    loom_val c = loom_load(k, refc, ((loom_val[]){b, off}), t, LOOM_NONE, 0.0);
    loom_val x = loom_load(k, refu, ((loom_val[]){u, off}), t, LOOM_NONE, 0.0);
    loom_val mc = loom_load(k, absc, ((loom_val[]){b, off}), t, LOOM_NONE, 0.0);
    loom_val mu = loom_load(k, absu, ((loom_val[]){u, off}), t, LOOM_NONE, 0.0);
#define C(v) loom_splat(k, loom_const_f(k, LOOM_F32, (v)), t)
#define ULP(v) tpl_device_ulp_ub(k, LOOM_F16, (v), t)
    double gk = loom_f32_sum_error(Ku + Kc + 2, 1.0), gc = loom_f32_sum_error(Kc, 1.0), gu = loom_f32_sum_error(Ku, 1.0);
    loom_val ac = loom_abs(k, c), ax = loom_abs(k, x);
    loom_val ek = loom_mul(k, C(gk), loom_add(k, mc, mu));
    loom_val er = loom_add(k, loom_add(k, loom_mul(k, C(gc), mc), loom_mul(k, C(gu), mu)),
                           loom_mul(k, C(0x1p-23), loom_add(k, ac, ax)));
    loom_val halves = loom_mul(k, C(0.5), loom_add(k, ULP(loom_add(k, ac, ek)), ULP(loom_add(k, ax, ek))));
    loom_val err = loom_add(k, loom_add(k, ek, er), halves);
    loom_val r32 = loom_add(k, c, x);
    loom_val bnd = loom_mul(k, loom_add(k, err, ULP(loom_add(k, loom_abs(k, r32), err))), C(1 + 0x1p-20));
#undef ULP
    loom_val e = loom_abs(k, loom_sub(k, o, r32));
    loom_val nan = loom_cmp(k, LOOM_NE, e, e);
    loom_val ok = loom_and(k, loom_cmp(k, LOOM_LE, e, bnd), loom_cmp(k, LOOM_EQ, e, e));
    loom_val nbad = loom_reduce_sum(k, loom_select(k, ok, C(0.0), C(1.0)), 0);
    loom_val ratio = loom_select(k, nan, C(INFINITY), loom_div(k, e, bnd));
#undef C
    loom_val at = loom_add(k, loom_mul(k, b, loom_const_i(k, LOOM_I32, per)), p);
    loom_store(k, bad, &at, loom_splat(k, nbad, LOOM_SHAPE1(1)), LOOM_NONE);
    loom_store(k, worst, &at, loom_splat(k, loom_reduce_max(k, ratio, 0), LOOM_SHAPE1(1)), LOOM_NONE);
    return k;
}
