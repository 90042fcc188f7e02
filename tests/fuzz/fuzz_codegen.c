/*
 * fuzz_codegen.c -- the code generator on kernels that verify: a kernel loom_verify accepts
 * either lowers to PTX or is refused with a message (loom_compile_ptx); it never crashes
 * LLVM, leaks, or hangs.  The kernels are fuzz_gen.h's (random builder calls); most of them
 * do not verify and cost only the builder.
 */
#include "fuzz_gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg g;
    loom_kernel *k = fg_build(&g, data, size);
    if (!k)
        return 0;
    if (loom_verify(k) == LOOM_OK) {
        static const char *const arch[] = {"sm_90a", "sm_90a", "sm_90a", "sm_80", NULL};
        char *ptx = NULL, err[4096] = "";
        size_t smem = 0;
        loom_status st = loom_compile_ptx(k, arch[fz_pick(&g.f, 5)], &ptx, &smem, err, sizeof err);
        if (st == LOOM_OK && (!ptx || !*ptx)) {
            fprintf(stderr, "fuzz_codegen: lowered to no PTX\n%s", loom_print(k));
            abort();
        }
        if (st != LOOM_OK && !err[0]) {
            fprintf(stderr, "fuzz_codegen: refused (%s) with no message\n%s", loom_status_name(st), loom_print(k));
            abort();
        }
        if (getenv("LOOM_FUZZ_VERBOSE"))
            fprintf(stderr, "fuzz_codegen: %s: %zu bytes of PTX %s\n", loom_status_name(st), ptx ? strlen(ptx) : 0, err);
        free(ptx);
    }
    loom_kernel_destroy(k);
    return 0;
}
