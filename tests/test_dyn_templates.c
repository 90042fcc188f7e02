/*
 * test_dyn_templates.c -- the templates whose row counts are run-time dims: ikbo_broadcast_add
 * (B candidates, U users) and row_softmax (R rows).  One kernel of each, built once at its
 * maxima, runs on the interpreter at many run-time shapes, each output compared with plain C
 * and the rows past the launch's count left alone; the grid rule the registry gives (built
 * at the maxima) yields the template's grid at every launch shape; a launch above a maximum
 * is refused naming the dim; kernels that differ only in their maxima print (and so compile
 * to) the same module; the registry's check run sets the dims from the shape; the PTX
 * assembles.
 */
#include "testutil.h"
#include "tpl.h"

static void parse(const loom_template *t, const char *shape, const char *config, int64_t *sh, int64_t *cf)
{
    char err[512];
    cr_assert_eq(loom_params_parse(t->shape, t->nshape, shape, sh, err, sizeof err), 0, "%s", err);
    cr_assert_eq(loom_params_parse(t->config, t->nconfig, config, cf, err, sizeof err), 0, "%s", err);
}

static loom_kernel *build(const loom_template *t, const int64_t *sh, const int64_t *cf)
{
    char why[512] = "";
    loom_kernel *k = t->build(sh, cf, why, sizeof why);
    cr_assert(k, "%s: %s", t->name, why);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    return k;
}

/* The grid of a launch at shape `at` from the rule of the kernel built at `max`: the rule
 * depends on the static keys and the config alone. */
static void launch_grid(const loom_template *t, const int64_t *max, const int64_t *at, const int64_t *cf, int grid[3])
{
    loom_grid_rule r;
    t->grid_rule(max, cf, &r);
    cr_assert_eq(loom_grid_rule_eval(&r, at, grid), 0, "%s: the rule's grid is out of range", t->name);
    int want[3];
    t->grid(at, cf, want);
    cr_assert(grid[0] == want[0] && grid[1] == want[1] && grid[2] == want[2],
              "%s: the rule gives %dx%dx%d, the template's grid %dx%dx%d", t->name, grid[0], grid[1], grid[2],
              want[0], want[1], want[2]);
}

Test(dyn_templates, broadcast_add_one_kernel_serves_every_batch)
{
    enum { BMAX = 40, UMAX = 7, M = 9, N = 24, MN = M * N };
    const loom_template *t = loom_template_find("ikbo_broadcast_add");
    int64_t max[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    parse(t, "B=40,U=7,M=9,N=24,dtype=f32", "BM=4,BN=16,warps=1", max, cf);
    loom_kernel *k = build(t, max, cf);
    static const int shapes[][2] = {{1, 1}, {3, 2}, {17, 7}, {40, 7}, {25, 1}, {8, 5}, {39, 3}};
    uint64_t seed = 5;
    loom_stats before, after;
    loom_stats_get(&before);
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int B = shapes[c][0], U = shapes[c][1];
        static float cand[BMAX * MN], user[UMAX * MN], out[BMAX * MN];
        int32_t map[BMAX];
        tpl_fill(cand, LOOM_F32, (int64_t)B * MN, -1, 1, &seed);
        tpl_fill(user, LOOM_F32, (int64_t)U * MN, -1, 1, &seed);
        for (int b = 0; b < B; b++)
            map[b] = (int32_t)(tpl_rand(&seed) % (uint64_t)U);
        for (int i = 0; i < BMAX * MN; i++)
            out[i] = -555.0f;
        int64_t at[LOOM_MAX_PARAMS];
        memcpy(at, max, sizeof at);
        at[0] = B, at[1] = U;
        int grid[3];
        launch_grid(t, max, at, cf, grid);
        cr_assert_eq(grid[1], B, "a program row per candidate");
        /* the inputs sized for this launch; the output for the maximum, to see what is written */
        targ a[] = {TA_I32(B), TA_I32(U), TA_BUF(cand, (size_t)B * MN * 4), TA_BUF(user, (size_t)U * MN * 4),
                    TA_BUF(map, (size_t)B * 4), TA_ARR(out)};
        T_RUN_OK(k, grid, a, 6);
        for (int b = 0; b < BMAX; b++)
            for (int i = 0; i < MN; i++) {
                float want = b < B ? cand[b * MN + i] + user[map[b] * MN + i] : -555.0f;
                cr_assert(t_same_f32(out[b * MN + i], want), "B=%d U=%d: out[%d][%d] = %g, expected %g", B, U, b, i,
                          out[b * MN + i], want);
            }
    }
    loom_stats_get(&after);
    cr_assert_eq(after.kernels_built, before.kernels_built, "the seven launches built no kernel");
    cr_assert_eq(after.compiles, before.compiles, "the seven launches compiled nothing");
    loom_kernel_destroy(k);
}

Test(dyn_templates, row_softmax_one_kernel_serves_every_row_count)
{
    enum { RMAX = 50, N = 37 };
    const loom_template *t = loom_template_find("row_softmax");
    int64_t max[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    parse(t, "R=50,N=37,dtype=f32", "BM=4,warps=2", max, cf);
    loom_kernel *k = build(t, max, cf);
    static const int rows[] = {1, 2, 5, 13, 49, 50, 3};
    uint64_t seed = 9;
    loom_stats before, after;
    loom_stats_get(&before);
    for (size_t c = 0; c < sizeof rows / sizeof rows[0]; c++) {
        int R = rows[c];
        static float x[RMAX * N], y[RMAX * N];
        tpl_fill(x, LOOM_F32, (int64_t)R * N, -8, 8, &seed);
        for (int i = 0; i < RMAX * N; i++)
            y[i] = 7.0f;
        int64_t at[LOOM_MAX_PARAMS];
        memcpy(at, max, sizeof at);
        at[0] = R;
        int grid[3];
        launch_grid(t, max, at, cf, grid);
        cr_assert_eq(grid[0], (R + 3) / 4, "a program per 4 rows");
        targ a[] = {TA_I32(R), TA_BUF(x, (size_t)R * N * 4), TA_ARR(y)};
        T_RUN_OK(k, grid, a, 3);
        for (int r = 0; r < RMAX; r++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; r < R && j < N; j++)
                mx = fmax(mx, x[r * N + j]);
            for (int j = 0; r < R && j < N; j++)
                sum += exp((double)x[r * N + j] - mx);
            for (int j = 0; j < N; j++) {
                float got = y[r * N + j];
                if (r >= R) {
                    cr_assert_eq(got, 7.0f, "R=%d: row %d, past the rows, was written", R, r);
                    continue;
                }
                double want = exp((double)x[r * N + j] - mx) / sum;
                cr_assert(fabs(got - want) <= 1e-9 + (N + 16) * 0x1p-24 * want, "R=%d: y[%d][%d] = %.9g, expected %.9g",
                          R, r, j, got, want);
            }
        }
    }
    loom_stats_get(&after);
    cr_assert_eq(after.kernels_built, before.kernels_built, "the seven launches built no kernel");
    cr_assert_eq(after.compiles, before.compiles, "the seven launches compiled nothing");
    loom_kernel_destroy(k);
}

/* The rule and the grid agree at every launch shape below the maxima, over configs. */
Test(dyn_templates, the_grid_rule_gives_the_grid_at_every_launch_shape)
{
    const loom_template *b = loom_template_find("ikbo_broadcast_add"), *s = loom_template_find("row_softmax");
    const char *bcfg[] = {"BM=1,BN=8,warps=1", "BM=8,BN=256,warps=4", "BM=64,BN=32,warps=8"};
    const char *scfg[] = {"BM=1,warps=4", "BM=2,warps=8", "BM=32,warps=1"};
    for (int c = 0; c < 3; c++) {
        int64_t max[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS], at[LOOM_MAX_PARAMS];
        int grid[3];
        parse(b, "B=3000,U=40,M=433,N=256", bcfg[c], max, cf);
        for (int64_t B = 1; B <= 3000; B += 97)
            for (int64_t U = 1; U <= 40; U += 13) {
                memcpy(at, max, sizeof at);
                at[0] = B, at[1] = U;
                launch_grid(b, max, at, cf, grid);
            }
        parse(s, "R=100000,N=1000", scfg[c], max, cf);
        for (int64_t R = 1; R <= 100000; R += 1237) {
            memcpy(at, max, sizeof at);
            at[0] = R;
            launch_grid(s, max, at, cf, grid);
        }
    }
}

Test(dyn_templates, a_launch_above_a_maximum_is_refused_naming_the_dim)
{
    const loom_template *t = loom_template_find("ikbo_broadcast_add");
    int64_t max[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    parse(t, "B=8,U=2,M=4,N=8,dtype=f32", "BM=4,BN=8,warps=1", max, cf);
    loom_kernel *k = build(t, max, cf);
    static float cand[9 * 32], user[3 * 32], out[9 * 32];
    int32_t map[9] = {0};
    int grid[3] = {1, 9, 1};
    targ over_b[] = {TA_I32(9), TA_I32(2), TA_ARR(cand), TA_ARR(user), TA_ARR(map), TA_ARR(out)};
    cr_assert_eq(t_run(k, grid, over_b, 6), LOOM_ERR_INVALID);
    cr_assert(strstr(t_last_error, "'B'") && strstr(t_last_error, "1 to 8"), "%s", t_last_error);
    targ over_u[] = {TA_I32(8), TA_I32(3), TA_ARR(cand), TA_ARR(user), TA_ARR(map), TA_ARR(out)};
    cr_assert_eq(t_run(k, grid, over_u, 6), LOOM_ERR_INVALID);
    cr_assert(strstr(t_last_error, "'U'") && strstr(t_last_error, "1 to 2"), "%s", t_last_error);
    loom_kernel_destroy(k);

    const loom_template *s = loom_template_find("row_softmax");
    parse(s, "R=4,N=8,dtype=f32", "BM=1,warps=1", max, cf);
    k = build(s, max, cf);
    float x[5 * 8] = {0}, y[5 * 8];
    targ over_r[] = {TA_I32(5), TA_ARR(x), TA_ARR(y)};
    cr_assert_eq(t_run(k, grid, over_r, 3), LOOM_ERR_INVALID);
    cr_assert(strstr(t_last_error, "'R'") && strstr(t_last_error, "1 to 4"), "%s", t_last_error);
    loom_kernel_destroy(k);
}

/* The maxima are not in the code: kernels built at other maxima are one module. */
Test(dyn_templates, kernels_that_differ_only_in_their_maxima_are_one_module)
{
    const loom_template *b = loom_template_find("ikbo_broadcast_add"), *s = loom_template_find("row_softmax");
    int64_t sh1[LOOM_MAX_PARAMS], sh2[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    parse(b, "B=64,U=5,M=33,N=64", "BM=8,BN=64,warps=1", sh1, cf);
    parse(b, "B=4096,U=300,M=33,N=64", "BM=8,BN=64,warps=1", sh2, cf);
    loom_kernel *k1 = build(b, sh1, cf), *k2 = build(b, sh2, cf);
    cr_assert_str_eq(loom_print(k1), loom_print(k2));
    cr_assert(strstr(loom_print(k1), "%B: i32 dim") && strstr(loom_print(k1), "%U: i32 dim"), "%s", loom_print(k1));
    loom_kernel_destroy(k1), loom_kernel_destroy(k2);
    parse(s, "R=3,N=1000", "BM=1,warps=4", sh1, cf);
    parse(s, "R=65536,N=1000", "BM=1,warps=4", sh2, cf);
    k1 = build(s, sh1, cf), k2 = build(s, sh2, cf);
    cr_assert_str_eq(loom_print(k1), loom_print(k2));
    cr_assert(strstr(loom_print(k1), "%R: i32 dim"), "%s", loom_print(k1));
    loom_kernel_destroy(k1), loom_kernel_destroy(k2);
}

/* The registry's check run (init sets the dims to the shape's values) passes on the
 * interpreter. */
Test(dyn_templates, the_check_run_sets_the_dims_from_the_shape)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    char rep[1024];
    const loom_template *b = loom_template_find("ikbo_broadcast_add"), *s = loom_template_find("row_softmax");
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    parse(b, "B=13,U=4,M=7,N=40,dtype=f16,shuffle=1", "BM=4,BN=64,warps=4", sh, cf);
    cr_assert_eq(loom_template_check(rt, b, sh, cf, 3, rep, sizeof rep), LOOM_OK, "%s", rep);
    parse(s, "R=11,N=300,dtype=bf16", "BM=2,warps=2", sh, cf);
    cr_assert_eq(loom_template_check(rt, s, sh, cf, 3, rep, sizeof rep), LOOM_OK, "%s", rep);
    loom_instance in;
    char err[512];
    cr_assert_eq(loom_instance_create(rt, s, sh, cf, 1, &in, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert(in.info[0].is_dim && !strcmp(in.info[0].name, "R"), "row_softmax's first argument is R");
    cr_assert_eq(in.args[0].s.i32, 11);
    loom_instance_destroy(&in);
    loom_runtime_destroy(rt);
}

Test(dyn_templates, the_ptx_assembles)
{
    const loom_template *b = loom_template_find("ikbo_broadcast_add"), *s = loom_template_find("row_softmax");
    int64_t sh[LOOM_MAX_PARAMS], cf[LOOM_MAX_PARAMS];
    char *ptx = NULL, err[2048] = "";
    parse(b, "B=1024,U=15,M=433,N=256,dtype=f16", "BM=8,BN=256,warps=4", sh, cf);
    loom_kernel *k = build(b, sh, cf);
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert(t_ptxas_ok(ptx, "sm_90a", "ikbo_broadcast_add"));
    free(ptx);
    loom_kernel_destroy(k);
    parse(s, "R=65536,N=4096,dtype=f32", "BM=8,warps=8", sh, cf);
    k = build(s, sh, cf);
    cr_assert_eq(loom_compile_ptx(k, "sm_90a", &ptx, NULL, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert(t_ptxas_ok(ptx, "sm_90a", "row_softmax"));
    free(ptx);
    loom_kernel_destroy(k);
}
