/*
 * test_ikbo_fa.c -- the IKBO flash attention (templates/ikbo_fa.c) through its C API:
 *
 *   plan         the work plan pairs blocks of one user, keeps every row once, puts the
 *                longest users first, and refuses a bad mapping entry by its index
 *   interpreter  small odd shapes (S = 50 and 200, n_seed = 3 and 64, D = 64, H = 1 and 3,
 *                ratio 1 and 5, sorted and shuffled, with and without lengths, a user with
 *                no keys) against the double-precision CPU reference within the error
 *                model's bound (fa_bound), the output poisoned with NaN first, for several
 *                configs
 *   ptx          the configs a user can pick assemble with ptxas without spills, and P V's
 *                A operand comes from registers
 *   refusals     a shape, config or buffer that cannot be served is refused with a
 *                message naming it
 *   gpu          S in {500, 512, 1000, 2000}, H in {1, 2, 6}, D in {64, 128}, ratio {1, 10,
 *                70} plus a random 0/1 candidate per user, sorted and shuffled, with and
 *                without lengths, f16 and bf16, each element within its bound by the error
 *                model (docs/checks.md) of the template's device reference: support/fa_ref.c's
 *                faref_model, bench_ikbo_fa's check (a naive f32 SIMT attention over the
 *                plan, the device bound kernel, the tuner's comparison), that reference
 *                itself checked against an independent naive f32 attention in CUDA C
 *                (NVRTC, no loom code) within the same bound; skipped without a GPU
 */
#include "fa_ref.h"
#include "ikbo_fa.h"
#include "ikbo_lce.h" /* ik_mapping */
#include "rt.h"
#include "t_model.h"
#include "testutil.h"

#include <math.h>

/* ---------------------------------------------------------------- the plan */

static fa_spec spec(int64_t B, int64_t U, int64_t S, int64_t H, int64_t D, int64_t ns, int varlen)
{
    return (fa_spec){.B = B, .U = U, .S = S, .H = H, .D = D, .nseed = ns, .dt = LOOM_F16, .varlen = varlen, .bn = 64,
                     .stages = 2, .ctas = 8, .sched = 0, .turns = 0, .overlap = 1, .tmastore = 1, .xunit = 0, .horder = 0};
}

Test(ikbo_fa, plan_pairs_blocks_of_one_user_and_covers_every_row)
{
    /* 7 candidates of 100 rows, users 0 1 0 2 1 0 0 (shuffled), lengths 5 9 0 */
    fa_spec s = spec(7, 3, 16, 1, 64, 100, 1);
    int32_t map[7] = {0, 1, 0, 2, 1, 0, 0}, lens[3] = {5, 9, 0};
    int32_t units[14 * FA_UNIT_FIELDS];
    char err[200];
    int64_t n = fa_plan(&s, map, lens, units, err, sizeof err);
    cr_assert(n > 0, "%s", err);
    int covered[700] = {0};
    int64_t prev_len = 1 << 30;
    for (int64_t i = 0; i < n; i++) {
        const int32_t *e = units + i * FA_UNIT_FIELDS;
        int32_t u = e[FA_U_USER];
        cr_expect(lens[u] <= prev_len, "unit %lld: user %d's length %d after a shorter one", (long long)i, u, lens[u]);
        prev_len = lens[u];
        for (int b = 0; b < 2; b++) {
            int32_t q0 = e[b ? FA_U_Q1 : FA_U_Q0], rows = e[b ? FA_U_N1 : FA_U_N0];
            cr_expect(rows >= 0 && rows <= FA_BLOCK);
            for (int32_t r = q0; r < q0 + rows; r++) {
                cr_expect_eq(map[r / 100], u, "row %d (candidate %d) in a unit of user %d", r, r / 100, u);
                covered[r]++;
            }
        }
    }
    for (int r = 0; r < 700; r++)
        cr_expect_eq(covered[r], 1, "row %d is in %d blocks", r, covered[r]);
    cr_expect_leq(n, fa_max_units(&s));
}

Test(ikbo_fa, plan_of_a_sorted_mapping_has_full_units)
{
    /* n_seed 64, ratio 4 sorted: each user's 4 candidates are 2 units of two full blocks */
    fa_spec s = spec(12, 3, 128, 2, 128, 64, 0);
    int32_t map[12], units[12 * FA_UNIT_FIELDS];
    for (int b = 0; b < 12; b++)
        map[b] = b / 4;
    char err[200];
    cr_assert_eq(fa_plan(&s, map, NULL, units, err, sizeof err), 6, "%s", err);
    for (int i = 0; i < 6; i++)
        cr_expect(units[i * FA_UNIT_FIELDS + FA_U_N0] == 64 && units[i * FA_UNIT_FIELDS + FA_U_N1] == 64);
}

Test(ikbo_fa, plan_refuses_a_bad_entry_by_its_index)
{
    fa_spec s = spec(4, 3, 16, 1, 64, 8, 1);
    int32_t map[4] = {0, 1, 3, 2}, lens[3] = {1, 2, 3}, units[4 * FA_UNIT_FIELDS];
    char err[200];
    cr_expect_eq(fa_plan(&s, map, lens, units, err, sizeof err), -1);
    cr_expect(strstr(err, "cand_to_user[2] = 3"), "%s", err);
    map[2] = 2, lens[1] = 17;
    cr_expect_eq(fa_plan(&s, map, lens, units, err, sizeof err), -1);
    cr_expect(strstr(err, "seq_len[1] = 17"), "%s", err);
}

/* ---------------------------------------------------------------- runs */

typedef struct fa_shape_case {
    int64_t B, U, S, H, D, nseed;
    int shuffle, varlen;
} fa_shape_case;

/* Lengths 0 .. S: user 0 has none when there are several users. */
static void make_lengths(const fa_shape_case *c, int32_t *lens, uint64_t seed)
{
    for (int64_t u = 0; u < c->U; u++)
        lens[u] = u == 0 && c->U > 1 ? 0 : (int32_t)(tpl_rand(&seed) % (uint64_t)(c->S + 1));
}

/* Run the C API on rt at shape c with config cfg; compare with the CPU reference element
 * by element within the error model's bound (fa_bound). */
static void run_interp(const fa_shape_case *c, const loom_ikbo_fa_config *cfg)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    int64_t qn = c->B * c->nseed * c->H * c->D, kn = c->U * c->S * c->H * c->D;
    uint16_t *hq = malloc((size_t)qn * 2), *hk = malloc((size_t)kn * 2), *hv = malloc((size_t)kn * 2);
    uint16_t *ho = malloc((size_t)qn * 2), *hr = malloc((size_t)qn * 2);
    int32_t *map = malloc((size_t)c->B * 4), *lens = malloc((size_t)c->U * 4);
    cr_assert(rt && hq && hk && hv && ho && hr && map && lens);
    uint64_t seed = 17;
    tpl_fill(hq, LOOM_F16, qn, -1, 1, &seed);
    tpl_fill(hk, LOOM_F16, kn, -1, 1, &seed);
    tpl_fill(hv, LOOM_F16, kn, -1, 1, &seed);
    ik_mapping(c->B, c->U, c->shuffle, 3, map); /* b * U / B, shuffled on request */
    make_lengths(c, lens, 4);
    fa_spec s = spec(c->B, c->U, c->S, c->H, c->D, c->nseed, c->varlen);
    fa_reference(&s, hq, hk, hv, map, c->varlen ? lens : NULL, hr);
    double *bnd = malloc((size_t)qn * sizeof *bnd);
    cr_assert(bnd);
    fa_bound(&s, hq, hk, hv, map, c->varlen ? lens : NULL, hr, bnd);

    loom_ikbo_fa_shape sh = {c->B, c->U, c->S, c->H, c->D, c->nseed, LOOM_F16, c->varlen, LOOM_F16};
    loom_ikbo_fa *p;
    cr_assert_eq(loom_ikbo_fa_prepare(rt, &sh, cfg, &p), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_buffer *q = loom_buffer_create(rt, (size_t)qn * 2), *k = loom_buffer_create(rt, (size_t)kn * 2);
    loom_buffer *v = loom_buffer_create(rt, (size_t)kn * 2), *o = loom_buffer_create(rt, (size_t)qn * 2);
    loom_buffer *mb = loom_buffer_create(rt, (size_t)c->B * 4), *lb = loom_buffer_create(rt, (size_t)c->U * 4);
    cr_assert(q && k && v && o && mb && lb);
    cr_assert_eq(loom_buffer_upload(q, hq, (size_t)qn * 2) | loom_buffer_upload(k, hk, (size_t)kn * 2) |
                     loom_buffer_upload(v, hv, (size_t)kn * 2) | loom_buffer_upload(mb, map, (size_t)c->B * 4) |
                     loom_buffer_upload(lb, lens, (size_t)c->U * 4) | loom_buffer_fill(o, 0xff),
                 LOOM_OK);
    cr_assert_eq(loom_ikbo_fa_run(p, q, k, v, mb, c->varlen ? lb : NULL, o), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_download(o, ho, (size_t)qn * 2), LOOM_OK);
    t_verdict x = T_VERDICT_INIT;
    for (int64_t i = 0; i < qn; i++)
        t_verdict_add(&x, i, tpl_get(ho, LOOM_F16, i), tpl_get(hr, LOOM_F16, i), bnd[i]);
    cr_assert(x.bad == 0,
              "B=%lld U=%lld S=%lld H=%lld n_seed=%lld%s%s, %s: %lld past their bound (worst |err|/bound %.3g), the "
              "first out[%lld] = %.9g, want %.9g +- %.3g", (long long)c->B, (long long)c->U, (long long)c->S,
              (long long)c->H, (long long)c->nseed, c->shuffle ? " shuffled" : "", c->varlen ? " varlen" : "",
              loom_ikbo_fa_describe(p), (long long)x.bad, x.worst, (long long)x.first, x.got, x.ref, x.bound);
    free(bnd);
    loom_buffer *bs[] = {q, k, v, o, mb, lb};
    for (size_t i = 0; i < 6; i++)
        loom_buffer_destroy(bs[i]);
    loom_ikbo_fa_destroy(p);
    loom_runtime_destroy(rt);
    free(hq), free(hk), free(hv), free(ho), free(hr), free(map), free(lens);
}

static const fa_shape_case interp_cases[] = {
    {5, 5, 50, 1, 64, 3, 0, 0},   /* ratio 1, n_seed 3: many short blocks */
    {10, 2, 50, 3, 64, 3, 1, 1},  /* ratio 5, shuffled, lengths (user 0 has none) */
    {5, 5, 200, 3, 64, 64, 1, 1}, /* ratio 1, full blocks, S not a multiple of the tile */
    {10, 2, 200, 1, 64, 64, 0, 0},
    {5, 1, 200, 1, 64, 64, 1, 1}, /* one user: an odd candidate pairs with no one */
};

Test(ikbo_fa, interpreter_small_odd_shapes)
{
    const loom_ikbo_fa_config cfgs[] = {
        {64, 2, 4, 0, 0, 1, 1, 0, 0}, /* the default's pipeline on 64-key tiles */
        {64, 2, 3, 1, 1, 1, 0, 0, 0}, /* dynamic schedule, turns, register stores */
        {64, 3, 2, 0, 1, 0, 1, 0, 0}, /* one GEMM after the other, with turns */
        {64, 2, 3, 0, 0, 1, 1, 1, 0}, /* across units: the next unit's tile 0 beside the last P V */
        {64, 2, 2, 0, 0, 1, 0, 1, 0}, /* across units, register stores */
        {128, 2, 4, 0, 0, 1, 1, 0, 0}, /* 128-key tiles with D=64: alpha from S [64, 128] scales O [64, 64] */
        {64, 2, 3, 0, 0, 1, 1, 0, 1}, /* a unit's heads side by side, round-robin */
        {64, 2, 3, 1, 1, 1, 0, 0, 1}, /* heads side by side, claimed, turns, register stores */
    };
    for (size_t i = 0; i < sizeof interp_cases / sizeof *interp_cases; i++) {
        run_interp(&interp_cases[i], &cfgs[i % 3]);
        /* across units, where next units may have no keys (lengths), odd blocks, one user */
        if (i == 1 || i == 2 || i == 4)
            run_interp(&interp_cases[i], &cfgs[3 + i % 2]);
        if (i == 1 || i == 2) /* lengths and S past a tile */
            run_interp(&interp_cases[i], &cfgs[5]);
        if (i == 1 || i == 2) /* three heads: a unit's heads side by side */
            run_interp(&interp_cases[i], &cfgs[6 + (i == 2)]);
    }
}

/* ---------------------------------------------------------------- PTX */

Test(ikbo_fa, ptx_assembles_without_spills_and_keeps_p_in_registers)
{
    const loom_template *t = loom_template_find("ikbo_fa");
    cr_assert(t);
    const char *const shapes[] = {"", "D=64,S=1000,n_seed=100,varlen=1"}, *const bn[] = {"BN=128", "BN=64"};
    const char *const configs[] = {"", "turns=1", "stages=3,sched=1", "overlap=0,tmastore=0", "stages=4"};
    for (size_t i = 0; i < 2; i++)
        for (size_t j = 0; j < sizeof configs / sizeof *configs; j++) {
            int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
            char err[300], cs[100];
            snprintf(cs, sizeof cs, "%s%s%s", bn[i], *configs[j] ? "," : "", configs[j]);
            if (i == 0 && j == 4)
                continue; /* four 128-key slots a ring do not fit with D=128 */
            cr_assert_eq(loom_params_parse(t->shape, t->nshape, shapes[i], sh, err, sizeof err), 0, "%s", err);
            cr_assert_eq(loom_params_parse(t->config, t->nconfig, cs, cf, err, sizeof err), 0, "%s", err);
            loom_kernel *k = t->build(sh, cf, err, sizeof err);
            cr_assert(k, "[%s] [%s]: %s", shapes[i], cs, err);
            char *ptx = NULL;
            cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
            cr_expect(strstr(ptx, "}, {%r") != NULL, "[%s] [%s]: no wgmma with A in registers", shapes[i], cs);
            t_ptxas_ok(ptx, "sm_90a", "ikbo_fa");
            free(ptx);
            loom_kernel_destroy(k);
        }
}

/* A K/V tile of other than D keys: the row statistics come from S [64, BN] and scale O
 * [64, D], two accumulator layouts holding the same rows in the same threads, so nothing
 * goes through shared memory but the epilogue's store (the same as with BN = D). */
Test(ikbo_fa, ptx_of_tiles_other_than_the_head_dim_moves_no_rows_through_shared_memory)
{
    const loom_template *t = loom_template_find("ikbo_fa");
    cr_assert(t);
    const char *const cases[][3] = {{"D=64", "BN=128", "BN=64"}, {"D=128", "BN=64", "BN=128"}};
    for (size_t i = 0; i < 2; i++) {
        int st[2];
        for (int j = 0; j < 2; j++) {
            int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
            char err[300], *ptx = NULL;
            cr_assert_eq(loom_params_parse(t->shape, t->nshape, cases[i][0], sh, err, sizeof err), 0, "%s", err);
            cr_assert_eq(loom_params_parse(t->config, t->nconfig, cases[i][1 + j], cf, err, sizeof err), 0, "%s", err);
            loom_kernel *k = t->build(sh, cf, err, sizeof err);
            cr_assert(k, "[%s] [%s]: %s", cases[i][0], cases[i][1 + j], err);
            cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
            t_ptxas_ok(ptx, "sm_90a", "ikbo_fa");
            st[j] = t_count(ptx, "st.shared");
            cr_expect_eq(t_count(ptx, "ld.shared"), 0, "[%s] [%s]: a layout conversion", cases[i][0], cases[i][1 + j]);
            free(ptx);
            loom_kernel_destroy(k);
        }
        cr_expect_eq(st[0], st[1], "%s: %d shared stores with %s, %d with %s", cases[i][0], st[0], cases[i][1], st[1],
                     cases[i][2]);
    }
}

/* ---------------------------------------------------------------- the untuned config */

/* What runs untuned follows the shape: 64-key tiles and a ring of 4 at D=64 (e4m3: 128-key
 * tiles), and a unit's heads side by side (horder=1) where the candidates average at most
 * 256 query rows a user (two units), head by head above; a prepare with cfg NULL and no
 * GPU runs it. */
Test(ikbo_fa, untuned_config_follows_the_shape)
{
    const loom_ikbo_fa_config def = loom_ikbo_fa_untuned_config(NULL);
    cr_expect(def.bn == 128 && def.stages == 2 && def.horder == 0, "the table's defaults: BN=%d stages=%d horder=%d",
              def.bn, def.stages, def.horder);
    struct {
        loom_ikbo_fa_shape s;
        int bn, stages, horder;
    } cases[] = {
        {{2048, 32, 1024, 2, 128, 64, LOOM_F16, 0, LOOM_F16}, 128, 2, 0}, /* the headline: 4096 rows a user */
        {{512, 512, 1024, 2, 128, 64, LOOM_F16, 0, LOOM_F16}, 128, 2, 1}, /* ratio 1 */
        {{512, 512, 1024, 2, 64, 64, LOOM_BF16, 0, LOOM_BF16}, 64, 4, 1}, /* D=64 */
        {{512, 512, 1024, 2, 64, 64, LOOM_E4M3, 0, LOOM_F16}, 128, 4, 1}, /* e4m3 builds 128-key tiles */
        {{4, 1, 200, 1, 128, 64, LOOM_F16, 0, LOOM_F16}, 128, 2, 1},      /* 256 rows a user: two units */
        {{5, 1, 200, 1, 128, 64, LOOM_F16, 0, LOOM_F16}, 128, 2, 0},      /* 320 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        loom_ikbo_fa_config c = loom_ikbo_fa_untuned_config(&cases[i].s);
        cr_expect(c.bn == cases[i].bn && c.stages == cases[i].stages && c.horder == cases[i].horder,
                  "case %zu: BN=%d stages=%d horder=%d, want %d %d %d", i, c.bn, c.stages, c.horder, cases[i].bn,
                  cases[i].stages, cases[i].horder);
    }
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_ikbo_fa *p = NULL;
    cr_assert_eq(loom_ikbo_fa_prepare(rt, &cases[2].s, NULL, &p), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_ikbo_fa_config got = loom_ikbo_fa_config_of(p);
    cr_expect(got.bn == 64 && got.stages == 4 && got.horder == 1, "prepared untuned: %s", loom_ikbo_fa_describe(p));
    cr_expect(strstr(loom_ikbo_fa_describe(p), "horder=1"), "%s", loom_ikbo_fa_describe(p));
    loom_ikbo_fa_destroy(p);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- refusals */

Test(ikbo_fa, refuses_what_it_cannot_serve_naming_it)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_ikbo_fa *p = NULL;
    loom_ikbo_fa_shape sh = {4, 2, 64, 1, 96, 8, LOOM_F16, 0, LOOM_F16};
    cr_expect_eq(loom_ikbo_fa_prepare(rt, &sh, NULL, &p), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "D (the head dim)"), "%s", loom_runtime_error(rt));
    sh.D = 64;
    cr_expect_eq(loom_ikbo_fa_prepare(rt, &sh, &(loom_ikbo_fa_config){96, 2, 4, 0, 0, 1, 1, 0, 0}, &p), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "BN (keys a tile) must be 64 or 128"), "%s", loom_runtime_error(rt));
    sh.D = 128; /* across units with three 128-key K/V slots: one Q slot fits, and the next unit's Q would wait on it */
    cr_expect_eq(loom_ikbo_fa_prepare(rt, &sh, &(loom_ikbo_fa_config){128, 3, 4, 0, 0, 1, 1, 1, 0}, &p), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "xunit=1 needs two Q slots"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_ikbo_fa_prepare(rt, &sh, &(loom_ikbo_fa_config){128, 2, 4, 1, 0, 1, 1, 1, 0}, &p), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "needs sched=0"), "%s", loom_runtime_error(rt));
    sh.D = 64;
    loom_ikbo_fa_config big = {64, 9, 4, 0, 0, 1, 1, 0, 0};
    cr_expect_eq(loom_ikbo_fa_prepare(rt, &sh, &big, &p), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "stages must be 2 to 8"), "%s", loom_runtime_error(rt));
    big.stages = 2, big.horder = 2;
    cr_expect_eq(loom_ikbo_fa_prepare(rt, &sh, &big, &p), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "horder must be 0 or 1"), "%s", loom_runtime_error(rt));
    loom_ikbo_fa_config cfg = {64, 2, 4, 0, 0, 1, 1, 0, 0};
    cr_assert_eq(loom_ikbo_fa_prepare(rt, &sh, &cfg, &p), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_buffer *small = loom_buffer_create(rt, 16), *map = loom_buffer_create(rt, 16);
    int32_t m[4] = {0, 1, 2, 1};
    cr_assert_eq(loom_buffer_upload(map, m, sizeof m), LOOM_OK);
    cr_expect_eq(loom_ikbo_fa_run(p, small, small, small, map, NULL, small), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "cand_to_user[2] = 2"), "%s", loom_runtime_error(rt));
    m[2] = 0;
    cr_assert_eq(loom_buffer_upload(map, m, sizeof m), LOOM_OK);
    cr_expect_eq(loom_ikbo_fa_run(p, small, small, small, map, NULL, small), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "q has 16 bytes"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_ikbo_fa_run(p, small, small, small, map, map, small), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "without varlen"), "%s", loom_runtime_error(rt));
    cr_expect_eq(loom_ikbo_fa_launch(p, small, small, small, small), LOOM_ERR_INVALID);
    loom_buffer_destroy(small), loom_buffer_destroy(map);
    loom_ikbo_fa_destroy(p);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- GPU */

typedef struct gpu_case {
    int64_t S, H, D, ratio;
    int shuffle, varlen, bf16;
} gpu_case;

/* B candidates: U = B / ratio users, each with a random 0 or 1 candidate more. */
static void gpu_run(loom_runtime *rt, nvref_gemm *fill, fa_ref *fr, const gpu_case *c, const loom_ikbo_fa_config *cfg)
{
    int64_t U = 6, nseed = c->D == 64 ? 100 : 64;
    uint64_t seed = 99 + (uint64_t)c->S;
    int32_t per[6];
    int64_t B = 0;
    for (int64_t u = 0; u < U; u++)
        B += per[u] = (int32_t)(c->ratio + tpl_rand(&seed) % 2);
    int32_t *map = malloc((size_t)B * 4), lens[6];
    cr_assert(map);
    for (int64_t u = 0, b = 0; u < U; u++)
        for (int i = 0; i < per[u]; i++)
            map[b++] = (int32_t)u;
    if (c->shuffle)
        for (int64_t b = B - 1; b > 0; b--) {
            int64_t j = (int64_t)(tpl_rand(&seed) % (uint64_t)(b + 1));
            int32_t x = map[b];
            map[b] = map[j], map[j] = x;
        }
    for (int64_t u = 0; u < U; u++)
        lens[u] = u == 1 ? 0 : (int32_t)(1 + tpl_rand(&seed) % (uint64_t)c->S);
    loom_dtype dt = c->bf16 ? LOOM_BF16 : LOOM_F16;
    int64_t qn = B * nseed * c->H * c->D, kn = U * c->S * c->H * c->D;
    size_t e = 2;
    loom_buffer *q = loom_buffer_create(rt, (size_t)qn * e), *k = loom_buffer_create(rt, (size_t)kn * e);
    loom_buffer *v = loom_buffer_create(rt, (size_t)kn * e), *o = loom_buffer_create(rt, (size_t)qn * e);
    loom_buffer *mb = loom_buffer_create(rt, (size_t)B * 4), *lb = loom_buffer_create(rt, sizeof lens);
    char err[1024];
    cr_assert(q && k && v && o && mb && lb);
    cr_assert_eq(nvref_gemm_fill(fill, rt_buffer_dptr(q), dt, qn, seed + 1, -1, 1, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(nvref_gemm_fill(fill, rt_buffer_dptr(k), dt, kn, seed + 2, -1, 1, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(nvref_gemm_fill(fill, rt_buffer_dptr(v), dt, kn, seed + 3, -1, 1, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(loom_buffer_upload(mb, map, (size_t)B * 4) | loom_buffer_upload(lb, lens, sizeof lens) |
                     loom_buffer_fill(o, 0xff),
                 LOOM_OK);
    loom_ikbo_fa_shape sh = {B, U, c->S, c->H, c->D, nseed, dt, c->varlen, dt};
    loom_ikbo_fa *p;
    cr_assert_eq(loom_ikbo_fa_prepare(rt, &sh, cfg, &p), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_ikbo_fa_run(p, q, k, v, mb, c->varlen ? lb : NULL, o), LOOM_OK, "%s", loom_runtime_error(rt));
    faref_model m;
    cr_assert_eq(faref_model_open(rt, fr, &sh, q, k, v, map, lens, &m, err, sizeof err), LOOM_OK, "%s", err);
    double bad, maxerr;
    cr_assert_eq(faref_model_check(&m, o, &bad, &maxerr, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect(bad == 0, "S=%lld H=%lld D=%lld ratio=%lld%s%s%s [%s]: %.0f of %lld past their bound, max |err| %.3g",
              (long long)c->S, (long long)c->H, (long long)c->D, (long long)c->ratio, c->shuffle ? " shuffled" : "",
              c->varlen ? " varlen" : "", c->bf16 ? " bf16" : "", loom_ikbo_fa_describe(p), bad, (long long)m.n,
              maxerr);
    faref_model_close(&m);
    loom_buffer *bs[] = {q, k, v, o, mb, lb};
    for (size_t i = 0; i < 6; i++)
        loom_buffer_destroy(bs[i]);
    loom_ikbo_fa_destroy(p);
    free(map);
}

Test(ikbo_fa_gpu, within_the_error_model_of_the_device_reference)
{
    loom_runtime *rt = t_gpu_or_skip();
    char err[1024];
    nvref_gemm *fill;
    fa_ref *fr; /* the independent NVRTC attention that each model's reference is checked against */
    cr_assert_eq(nvref_gemm_open(rt_runtime_gpu(rt), &fill, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(faref_open(rt_runtime_gpu(rt), &fr, err, sizeof err), LOOM_OK, "%s", err);
    const gpu_case cases[] = {
        {500, 1, 64, 1, 0, 0, 0},   {512, 2, 128, 10, 1, 0, 0}, {1000, 6, 128, 70, 0, 1, 0},
        {2000, 2, 64, 10, 1, 1, 0}, {512, 6, 64, 70, 1, 0, 1},  {1000, 1, 128, 1, 1, 1, 1},
        {2000, 2, 128, 70, 1, 0, 0}, {500, 2, 128, 10, 0, 1, 1},
    };
    const loom_ikbo_fa_config cfgs[] = {
        {128, 2, 132, 0, 0, 1, 1, 0, 0}, /* the default */
        {128, 2, 132, 1, 1, 1, 1, 0, 0}, /* dynamic, turns */
        {128, 3, 132, 0, 0, 0, 0, 0, 0}, /* one GEMM after the other, register stores */
        {128, 2, 132, 0, 0, 1, 1, 1, 0}, /* across units */
        {128, 2, 132, 1, 0, 1, 1, 0, 1}, /* dynamic, a unit's heads side by side */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        for (size_t j = 0; j < sizeof cfgs / sizeof *cfgs; j++) {
            loom_ikbo_fa_config c = cfgs[j];
            c.bn = (int)cases[i].D; /* a tile of D keys */
            gpu_run(rt, fill, fr, &cases[i], &c);
        }
        loom_ikbo_fa_config other = cfgs[0]; /* the other tile: 128 keys at D=64, 64 at D=128 */
        other.bn = cases[i].D == 64 ? 128 : 64;
        gpu_run(rt, fill, fr, &cases[i], &other);
    }
    nvref_gemm_close(fill);
    faref_close(fr);
    loom_runtime_destroy(rt);
}
