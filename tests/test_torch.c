/*
 * test_torch.c -- `loomc aot --torch` (docs/torch.md) on the CPU: for the LCE and FA
 * operations and a template of the generic launch (gemm), at a small shape, the Python
 * module P_torch.py is written beside P.c and P.h, compiles (python3 -m py_compile), names
 * the file's ops, and P.c with the entry points it calls still compiles with gcc -std=c11
 * -Wall -Wextra -Werror.  The files without --torch are the same as with it, but for what
 * --torch appends.  The ops themselves run on the GPU: tests/torch/test_loom_torch.py
 * (scripts/gpu.sh where torch imports).
 */
#include "loomc_test.h"
#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* loomc beside this binary, as the build makes it. */
static const char *loomc(void)
{
    static char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    cr_assert(len > 0);
    exe[len] = 0;
    snprintf(strrchr(exe, '/'), sizeof exe - (size_t)(strrchr(exe, '/') - exe), "/loomc");
    if (access(exe, X_OK) != 0)
        cr_skip_test("%s is missing: loomc is built beside loom_tests", exe);
    return exe;
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s was not written", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)len + 1);
    cr_assert(s);
    cr_assert_eq(fread(s, 1, (size_t)len, f), (size_t)len);
    s[len] = 0;
    fclose(f);
    *n = (size_t)len;
    return s;
}

/* Generate NAME at SHAPE with and without --torch, then every check; the ops' names (and the
 * C functions) the module must name. */
static void check(const char *name, const char *shape, const char *const *want, int nwant)
{
    static char out[1 << 16];
    char dir[] = "/tmp/loom_torch_dir_XXXXXX", cmd[3 * PATH_MAX], path[PATH_MAX];
    cr_assert(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "%s aot %s --shape %s --torch --prefix tt -o %s/t && %s aot %s --shape %s --prefix tt -o %s/p",
             loomc(), name, shape, dir, loomc(), name, shape, dir);
    int st = t_sh(cmd, out, sizeof out);
    if (st != 0 && strstr(out, "ptxas"))
        cr_skip_test("no ptxas (loomc aot needs the CUDA toolkit's): %s", out);
    cr_assert_eq(st, 0, "loomc aot %s --torch: %s", name, out);
    cr_expect(strstr(out, "tt_torch.py"), "loomc did not name the module: %s", out);

    /* the module: written, compiles, registers the ops in the loom namespace */
    snprintf(path, sizeof path, "%s/t/tt_torch.py", dir);
    size_t npy;
    char *py = slurp(path, &npy);
    snprintf(cmd, sizeof cmd, "python3 -m py_compile %s", path);
    if (t_sh("python3 -c 'pass'", out, sizeof out) == 0)
        cr_expect_eq(t_sh(cmd, out, sizeof out), 0, "py_compile %s: %s", path, out);
    for (int i = 0; i < nwant; i++)
        cr_expect(strstr(py, want[i]), "%s_torch.py lacks '%s'", name, want[i]);
    cr_expect(strstr(py, ".register_fake"), "no fake implementation");
    cr_expect(strstr(py, "cuda_stream"), "not on torch's current stream");

    /* the C file with --torch's entry points compiles as C11 with every warning an error */
    snprintf(cmd, sizeof cmd, "gcc -std=c11 -Wall -Wextra -Werror -c %s/t/tt.c -o %s/t/tt.o", dir, dir);
    cr_expect_eq(t_sh(cmd, out, sizeof out), 0, "gcc: %s", out);

    /* without --torch: the same files, but for what --torch appends (the header's end is
     * its closing lines, after the appended declarations) */
    const char *ext[] = {"c", "h"};
    for (int e = 0; e < 2; e++) {
        char a[PATH_MAX], b[PATH_MAX];
        snprintf(a, sizeof a, "%s/t/tt.%s", dir, ext[e]);
        snprintf(b, sizeof b, "%s/p/tt.%s", dir, ext[e]);
        size_t na, nb;
        char *ta = slurp(a, &na), *tb = slurp(b, &nb);
        /* after the opening comment, which quotes the command line */
        const char *tail = e ? "\n#ifdef __cplusplus\n}\n#endif\n#endif\n" : "";
        const char *ba = strstr(ta, "*/"), *bb = strstr(tb, "*/");
        cr_assert(ba && bb);
        size_t la = na - (size_t)(ba - ta), lb = nb - (size_t)(bb - tb), keep = lb - strlen(tail);
        cr_expect(la >= lb && !memcmp(ba, bb, keep) && !strcmp(ta + na - strlen(tail), tail),
                  "tt.%s with --torch is not tt.%s without it plus the appended entry points", ext[e], ext[e]);
        free(ta), free(tb);
    }
    snprintf(path, sizeof path, "%s/p/tt_torch.py", dir);
    cr_expect(access(path, F_OK) != 0, "tt_torch.py written without --torch");
    free(py);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    t_sh(cmd, out, sizeof out);
}

Test(torch, lce_module)
{
    const char *want[] = {"\"loom::ikbo_lce\"", "ikbo_lce_run_buffers", "ikbo_lce_buffers", "\"op\": \"ikbo_lce\""};
    check("ikbo_lce", "B=64,U=4,M=77,N=64,Ku=21,Kc=13", want, 4);
}

Test(torch, fa_module)
{
    const char *want[] = {"\"loom::ikbo_fa\"", "\"loom::ikbo_fa_plan\"", "\"loom::ikbo_fa_planned\"",
                          "ikbo_fa_launch_plan", "ikbo_fa_make_plan"};
    check("ikbo_fa", "B=16,U=4,S=256,H=2,D=128,n_seed=64", want, 5);
}

Test(torch, generic_module)
{
    /* gemm through its launch: A and B in, C out (allocated by the op), M from A's rows */
    const char *want[] = {"\"loom::gemm\"", "def gemm(A: torch.Tensor, B: torch.Tensor, batch: int = 1) -> torch.Tensor:",
                          "[\"C\", \"ptr\", \"out\", \"f16\", [\"M\", 200], [200, 1]]"};
    check("gemm", "M=300,N=200,K=136", want, 3);
}

Test(torch, parse)
{
    loomc_opts o;
    char err[256];
    cr_assert_eq(t_loomc("aot gemm --torch --prefix p -o d", &o, err, sizeof err), 0, "%s", err);
    cr_expect_eq(o.torch, 1);
    cr_expect_eq(t_loomc("aot gemm --torch --torch --prefix p -o d", &o, err, sizeof err), -1);
    cr_expect(strstr(err, "--torch is given twice"), "%s", err);
}
