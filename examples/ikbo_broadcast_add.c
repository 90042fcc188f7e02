/*
 * ikbo_broadcast_add -- the IKBO broadcast-add, built with the DSL, run with loom_launch
 * (on the GPU if there is one, else the interpreter; LOOM_INTERPRET=1 forces it) and
 * checked bit-exactly against plain C.
 *
 *   out[b,m,n] = cand[b,m,n] + user[u(b),m,n],   u = cand_to_user (int32, one per b)
 *
 * B and U are run-time dims: the kernel is built for at most B candidates and U users and
 * launched twice, at the whole batch and at its first half, each checked.
 *
 * Usage: ikbo_broadcast_add [B U M N]
 */
#include "loom_ikbo.h"

#include <stdio.h>
#include <stdlib.h>

static uint32_t rng = 12345;
static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

int main(int argc, char **argv)
{
    tpl_broadcast_add_shape s = {.B = 70, .U = 3, .M = 45, .N = 100, .dtype = LOOM_F32};
    if (argc == 5) {
        s.B = atoll(argv[1]);
        s.U = atoll(argv[2]);
        s.M = atoll(argv[3]);
        s.N = atoll(argv[4]);
    }
    const int bm = 16, bn = 64;
    loom_kernel *k = tpl_broadcast_add(&s, bm, bn, 4);
    if (loom_verify(k) != LOOM_OK) {
        fprintf(stderr, "%s", loom_kernel_errors(k));
        return 1;
    }
    size_t nc = (size_t)(s.B * s.M * s.N), nu = (size_t)(s.U * s.M * s.N);
    float *cand = malloc(nc * 4), *user = malloc(nu * 4), *out = malloc(nc * 4);
    int32_t *map = malloc((size_t)s.B * 4);
    for (size_t i = 0; i < nc; i++)
        cand[i] = frand();
    for (size_t i = 0; i < nu; i++)
        user[i] = frand();
    for (int64_t b = 0; b < s.B; b++)
        map[b] = (int32_t)(b * s.U / s.B); /* contiguous candidates per user */

    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_AUTO);
    printf("ikbo_broadcast_add B=%lld U=%lld M=%lld N=%lld on %s\n", (long long)s.B, (long long)s.U,
           (long long)s.M, (long long)s.N, loom_runtime_device_name(rt));
    loom_buffer *bc = loom_buffer_create(rt, nc * 4), *bu = loom_buffer_create(rt, nu * 4),
                *bmap = loom_buffer_create(rt, (size_t)s.B * 4), *bo = loom_buffer_create(rt, nc * 4);
    if (!bc || !bu || !bmap || !bo) {
        fprintf(stderr, "buffer: %s\n", loom_runtime_error(rt));
        return 1;
    }
    loom_buffer_upload(bc, cand, nc * 4);
    loom_buffer_upload(bu, user, nu * 4);
    loom_buffer_upload(bmap, map, (size_t)s.B * 4);
    size_t bad = 0;
    /* the same kernel at the whole batch, then at its first half (at least one candidate) */
    for (int pass = 0; pass < 2; pass++) {
        tpl_broadcast_add_shape at = s;
        at.B = pass == 0 ? s.B : (s.B + 1) / 2;
        int grid[3];
        tpl_broadcast_add_grid(&at, bm, bn, grid);
        loom_buffer_fill(bo, 0xff); /* poison: NaN everywhere */
        loom_arg args[] = {LOOM_ARG_I32((int32_t)at.B), LOOM_ARG_I32((int32_t)at.U), LOOM_ARG_BUF(bc),
                           LOOM_ARG_BUF(bu),           LOOM_ARG_BUF(bmap),           LOOM_ARG_BUF(bo)};
        loom_status st = loom_launch(rt, k, grid, args, 6);
        if (st != LOOM_OK) {
            fprintf(stderr, "launch failed (%s): %s\n", loom_status_name(st), loom_runtime_error(rt));
            return 1;
        }
        loom_buffer_download(bo, out, nc * 4);
        size_t wrong = 0, n = (size_t)(at.B * s.M * s.N);
        for (int64_t b = 0; b < at.B; b++)
            for (int64_t i = 0; i < s.M * s.N; i++) {
                float want = cand[b * s.M * s.N + i] + user[map[b] * s.M * s.N + i];
                if (out[b * s.M * s.N + i] != want && wrong++ < 5)
                    fprintf(stderr, "mismatch at B=%lld, b=%lld i=%lld: %g vs %g\n", (long long)at.B, (long long)b,
                            (long long)i, out[b * s.M * s.N + i], want);
            }
        printf("%s: B=%lld: %zu of %zu elements differ from plain C\n", wrong ? "FAIL" : "ok", (long long)at.B, wrong,
               n);
        bad += wrong;
    }
    loom_buffer_destroy(bc);
    loom_buffer_destroy(bu);
    loom_buffer_destroy(bmap);
    loom_buffer_destroy(bo);
    loom_runtime_destroy(rt);
    loom_kernel_destroy(k);
    free(cand);
    free(user);
    free(out);
    free(map);
    return bad != 0;
}
