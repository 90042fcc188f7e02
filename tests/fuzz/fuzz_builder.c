/*
 * fuzz_builder.c -- the builder, verifier and printer on kernels made of random builder
 * calls (fuzz_gen.h), then the interpreter on tiny buffers when the kernel verifies.
 *
 * What must hold, whatever the bytes: no crash, leak or hang; a kernel that fails
 * verification has a message; a launch with a deliberate mistake (a buffer one byte short,
 * one argument too few, a scalar given a buffer, a tensor given none, a grid of 0 or over
 * the limit) is refused with a message, never run.  A kernel that verifies may still fail
 * at run time (out-of-bounds offsets, a zero divisor, a deadlock), which the interpreter
 * must report with a message.
 */
#include "fuzz_gen.h"

#include <stdio.h>
#include <stdlib.h>

/* Stop at once: an invariant of the library failed (libFuzzer keeps the input). */
static void fuzz_fail(const char *what, loom_kernel *k)
{
    fprintf(stderr, "fuzz_builder: %s\n%s", what, k ? loom_print(k) : "");
    abort();
}

static loom_runtime *interp_rt(void)
{
    static loom_runtime *rt;
    if (!rt)
        rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    return rt;
}

static void run(fg *g)
{
    loom_kernel *k = g->k;
    loom_runtime *rt = interp_rt();
    fz *f = &g->f;
    int nargs = loom_kernel_num_args(k);
    if (!rt || nargs < 0 || nargs > LOOM_MAX_ARGS)
        fuzz_fail("no interpreter runtime or a bad argument count", NULL);
    loom_arg args[LOOM_MAX_ARGS];
    loom_buffer *bufs[LOOM_MAX_ARGS] = {0};
    unsigned mistake = fz_pick(f, 16); /* 0..6: one mistake; others: none */
    int grid[3] = {1 + (int)fz_pick(f, 3), 1 + (int)fz_pick(f, 2), 1 + (int)fz_pick(f, 2)};
    if (loom_kernel_cluster(k) > 1)
        grid[0] = loom_kernel_cluster(k);
    int short_arg = -1;
    for (int i = 0; i < nargs; i++) {
        loom_arg_info ai;
        if (!loom_kernel_arg_info(k, i, &ai))
            fuzz_fail("loom_kernel_arg_info refused an argument in range", k);
        if (!ai.is_tensor) {
            int64_t v = (int64_t)(int8_t)fz_u8(f);
            args[i] = ai.dtype == LOOM_F32 ? LOOM_ARG_F32((float)v) : ai.dtype == LOOM_I32 ? LOOM_ARG_I32((int32_t)v)
                                                                                           : LOOM_ARG_I64(v);
            if (mistake == 3) { /* a buffer for a scalar */
                bufs[i] = loom_buffer_create(rt, 8);
                args[i] = LOOM_ARG_BUF(bufs[i]);
                mistake = 100;
            }
            continue;
        }
        size_t bytes = ai.min_bytes;
        if (mistake == 1 && bytes > 0 && short_arg < 0) {
            short_arg = i;
            bytes--;
        }
        bufs[i] = loom_buffer_create(rt, bytes);
        if (!bufs[i])
            fuzz_fail("loom_buffer_create failed on a small buffer", k);
        unsigned char *h = malloc(bytes ? bytes : 1);
        for (size_t j = 0; j < bytes; j++)
            h[j] = (unsigned char)(fz_done(f) ? j * 37 : fz_u8(f));
        loom_buffer_upload(bufs[i], h, bytes);
        free(h);
        args[i] = LOOM_ARG_BUF(bufs[i]);
        if (mistake == 4) { /* no buffer for a tensor */
            args[i] = LOOM_ARG_BUF(NULL);
            mistake = 100;
        }
    }
    int n = nargs;
    bool refused = false;
    if (mistake == 1 && short_arg >= 0)
        refused = true;
    if (mistake == 2 && nargs > 0) {
        n = nargs - 1;
        refused = true;
    }
    if (mistake >= 100)
        refused = true;
    if (mistake == 5) {
        grid[fz_pick(f, 3)] = (int)fz_pick(f, 2) - 1; /* 0 or -1 */
        refused = true;
    }
    if (mistake == 6) {
        grid[1 + fz_pick(f, 2)] = 65536;
        refused = true;
    }
    loom_status st = loom_launch(rt, k, grid, args, n);
    const char *err = loom_runtime_error(rt);
    if (getenv("LOOM_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_builder: ran on the interpreter: %s %s\n", loom_status_name(st), err);
    if (refused && st != LOOM_ERR_INVALID)
        fuzz_fail("a launch with a mistake in its arguments was not refused", k);
    if (st != LOOM_OK && !*err)
        fuzz_fail("a failed launch left no message", k);
    for (int i = 0; i < nargs; i++)
        loom_buffer_destroy(bufs[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg g;
    loom_kernel *k = fg_build(&g, data, size);
    if (!k)
        return 0;
    loom_status st = loom_verify(k);
    const char *errs = loom_kernel_errors(k);
    if (st == LOOM_OK && loom_kernel_num_errors(k) != 0)
        fuzz_fail("loom_verify passed a kernel with errors", k);
    if (st != LOOM_OK && (!errs || !*errs))
        fuzz_fail("loom_verify failed with no message", k);
    const char *text = loom_print(k);
    if (getenv("LOOM_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_builder: %s\n%s%s", loom_status_name(st), text, errs);
    if (!text)
        fuzz_fail("loom_print returned NULL", NULL);
    for (int i = 0; i < loom_kernel_num_args(k); i++) {
        loom_arg_info ai;
        loom_kernel_arg_info(k, i, &ai);
    }
    loom_arg_info none;
    if (loom_kernel_arg_info(k, -1, &none) || loom_kernel_arg_info(k, loom_kernel_num_args(k), &none))
        fuzz_fail("loom_kernel_arg_info accepted an index out of range", k);
    if (st == LOOM_OK && !g.unbounded && g.work < 2e5) {
        bool small = true;
        for (int i = 0; i < loom_kernel_num_args(k); i++) {
            loom_arg_info ai;
            if (loom_kernel_arg_info(k, i, &ai) && ai.is_tensor && ai.min_bytes > (1u << 16))
                small = false;
        }
        if (small)
            run(&g);
    }
    loom_kernel_destroy(k);
    return 0;
}
