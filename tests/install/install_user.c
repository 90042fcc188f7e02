/* install_user.c -- a program built against an installed loom (tests/install, with CMake's
 * find_package and with pkg-config): it lists the templates, then builds a small kernel with
 * the DSL and runs it on the interpreter, checking every element. */
#include <stdio.h>
#include <string.h>

#include <loom.h>
#include <loom_ikbo.h>
#include <loom_pipe.h>

#define N 100

int main(void)
{
    int n = loom_template_count();
    printf("loom %s, %d templates:", LOOM_VERSION, n);
    for (int i = 0; i < n; i++)
        printf(" %s", loom_template_at(i)->name);
    printf("\n");
    if (n < 1 || !loom_template_find("gemm")) {
        fprintf(stderr, "install_user: no gemm template\n");
        return 1;
    }

    /* out[i] = x[i] + 1: one program, a tile of 128 whose tail past N is masked */
    loom_kernel *k = loom_kernel_create("add_one", 4);
    loom_val x = loom_arg_tensor(k, "x", LOOM_F32, LOOM_SHAPE1(N), LOOM_IN);
    loom_val out = loom_arg_tensor(k, "out", LOOM_F32, LOOM_SHAPE1(N), LOOM_OUT);
    loom_val zero = loom_const_i(k, LOOM_I32, 0);
    loom_val v = loom_load(k, x, ((loom_val[]){zero}), LOOM_SHAPE1(128), LOOM_NONE, 0.0);
    loom_store(k, out, ((loom_val[]){zero}), loom_add(k, v, loom_const_f(k, LOOM_F32, 1.0)), LOOM_NONE);

    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    if (!rt || loom_runtime_status(rt) != LOOM_OK) {
        fprintf(stderr, "install_user: no interpreter runtime\n");
        return 1;
    }
    float hx[N], ho[N];
    for (int i = 0; i < N; i++)
        hx[i] = (float)i;
    loom_buffer *bx = loom_buffer_create(rt, sizeof hx), *bo = loom_buffer_create(rt, sizeof ho);
    loom_buffer_upload(bx, hx, sizeof hx);
    loom_arg args[] = {LOOM_ARG_BUF(bx), LOOM_ARG_BUF(bo)};
    int grid[3] = {1, 1, 1};
    if (loom_launch(rt, k, grid, args, 2) != LOOM_OK) {
        fprintf(stderr, "install_user: %s%s\n", loom_runtime_error(rt), loom_kernel_errors(k));
        return 1;
    }
    loom_buffer_download(bo, ho, sizeof ho);
    for (int i = 0; i < N; i++)
        if (ho[i] != hx[i] + 1.0f) {
            fprintf(stderr, "install_user: out[%d] = %g, expected %g\n", i, ho[i], hx[i] + 1.0f);
            return 1;
        }
    printf("add_one on the interpreter: %d elements correct\n", N);
    loom_buffer_destroy(bx);
    loom_buffer_destroy(bo);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
    return 0;
}
